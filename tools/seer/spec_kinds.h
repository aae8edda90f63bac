/*
 * spec_kinds.h: the speculation kinds as the tools show them, enumerated from the library's
 * registry (seer_spec_kind_info_at): the CLI's help and messages, the server's accepted
 * 'spec' values, and the /metrics families per drafter. Uses seer.h alone, so that a test can
 * link it beside a drafter of its own.
 *
 * Not for: parsing the other speculation options (cli_table.c, cli_opts.c, serve_fields.c).
 */
#ifndef SEER_TOOLS_SPEC_KINDS_H
#define SEER_TOOLS_SPEC_KINDS_H

#include "seer.h"

#include <stdbool.h>
#include <stdio.h>

/* Which kinds a list shows. */
typedef enum {
    SPEC_KINDS_ALL,       /* none, every drafter, auto */
    SPEC_KINDS_DRAFTERS,  /* every drafter */
    SPEC_KINDS_CHOICES,   /* auto's choices: none (plain decoding) and every drafter */
    SPEC_KINDS_TREE_BASE, /* drafters that fill token trees */
    SPEC_KINDS_HIER_BASE, /* drafters that may be the hierarchy's middle level */
    SPEC_KINDS_DRAFT_WEIGHTS, /* drafters whose steps may use the model's draft weights */
} spec_kinds_which;

/* The kind k's entry (false: none of that kind). */
bool spec_kinds_info(seer_spec_kind k, seer_spec_kind_info *out);
/* One help line per kind, "<indent><name>  <help>", names padded to one column. */
void spec_kinds_help(FILE *f, const char *indent, spec_kinds_which which);
/* The kinds' names, "a, b, c", into buf [cap]. */
void spec_kinds_list(char *buf, size_t cap, spec_kinds_which which);
/* The server's 'spec' value: a kind (all of them; one that drafts with a draft model only
 * when the server has one). false with the reason in msg [cap], a phrase to follow the
 * value's name ("must be one of ..."). */
bool spec_kinds_serve_parse(const char *name, bool has_draft_model, seer_spec_kind *out, char *msg, size_t cap);
/* The speculation families of /metrics (Prometheus text) from st: draft tokens proposed and
 * accepted per drafter, and auto's rounds per choice. malloc'd; NULL: out of memory. */
char *spec_kinds_metrics(const seer_sched_stats *st);

#endif
