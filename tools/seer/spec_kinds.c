/*
 * spec_kinds.c: the speculation kinds as the tools show them (spec_kinds.h), every list
 * enumerated from the library's registry, so that a drafter added there shows up in the
 * CLI's help, the server's accepted values and /metrics with no line here.
 *
 * Not for: the other speculation options, or choosing kinds (the library).
 */
#include "spec_kinds.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static bool shown(const seer_spec_kind_info *in, spec_kinds_which which) {
    switch (which) {
    case SPEC_KINDS_ALL: return true;
    case SPEC_KINDS_DRAFTERS: return in->drafter;
    case SPEC_KINDS_CHOICES: return in->drafter || in->kind == SEER_SPEC_NONE;
    case SPEC_KINDS_TREE_BASE: return in->tree_base;
    case SPEC_KINDS_HIER_BASE: return in->hier_base;
    case SPEC_KINDS_DRAFT_WEIGHTS: return in->draft_weights;
    }
    return false;
}

bool spec_kinds_info(seer_spec_kind k, seer_spec_kind_info *out) {
    for (int i = 0; seer_spec_kind_info_at(i, out); i++)
        if (out->kind == k)
            return true;
    return false;
}

void spec_kinds_help(FILE *f, const char *indent, spec_kinds_which which) {
    seer_spec_kind_info in;
    int w = 0;
    for (int i = 0; seer_spec_kind_info_at(i, &in); i++)
        if (shown(&in, which) && (int)strlen(in.name) > w)
            w = (int)strlen(in.name);
    for (int i = 0; seer_spec_kind_info_at(i, &in); i++)
        if (shown(&in, which))
            fprintf(f, "%s%-*s  %s\n", indent, w, in.name, in.help ? in.help : "");
}

void spec_kinds_list(char *buf, size_t cap, spec_kinds_which which) {
    seer_spec_kind_info in;
    size_t n = 0;
    if (cap)
        buf[0] = 0;
    for (int i = 0, m = 0; seer_spec_kind_info_at(i, &in) && n < cap; i++)
        if (shown(&in, which))
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", m++ ? ", " : "", in.name);
}

bool spec_kinds_serve_parse(const char *name, bool has_draft_model, seer_spec_kind *out, char *msg, size_t cap) {
    seer_spec_kind_info in;
    for (int i = 0; name && seer_spec_kind_info_at(i, &in); i++) {
        if (strcmp(name, in.name))
            continue;
        if (in.needs_draft_model && !has_draft_model) {
            snprintf(msg, cap, "'%s' needs a draft model, and this server has none", name);
            return false;
        }
        *out = in.kind;
        return true;
    }
    char list[512];
    spec_kinds_list(list, sizeof list, SPEC_KINDS_ALL);
    snprintf(msg, cap, "must be one of %s", list);
    return false;
}

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = t->oom ? 0 : vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
        if (t->oom || k < 0)
            return;
        if ((size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        char *p = realloc(t->s, t->cap * 2 + (size_t)k + 1);
        if (!p) {
            t->oom = true;
            return;
        }
        t->s = p;
        t->cap = t->cap * 2 + (size_t)k + 1;
    }
}

/* One counter family: a line per kind shown, labelled label="<name>". */
static void family(text *t, const char *name, const char *help, const char *label, spec_kinds_which which,
                   const int64_t *v) {
    put(t, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    seer_spec_kind_info in;
    for (int i = 0; seer_spec_kind_info_at(i, &in); i++)
        if (shown(&in, which) && in.kind >= 0 && in.kind < SEER_SPEC_KIND_MAX)
            put(t, "%s{%s=\"%s\"} %lld\n", name, label, in.name, (long long)v[in.kind]);
}

char *spec_kinds_metrics(const seer_sched_stats *st) {
    text t = {0};
    family(&t, "seer_spec_drafted_total", "Draft tokens proposed, per drafter.", "drafter", SPEC_KINDS_DRAFTERS,
           st->spec_drafted);
    family(&t, "seer_spec_accepted_total", "Draft tokens accepted, per drafter.", "drafter", SPEC_KINDS_DRAFTERS,
           st->spec_accepted);
    family(&t, "seer_spec_auto_rounds_total",
           "Rounds of requests with automatic speculation, per choice (none: plain decoding).", "choice",
           SPEC_KINDS_CHOICES, st->spec_auto_decisions);
    if (t.oom || !t.s) {
        free(t.s);
        return NULL;
    }
    return t.s;
}
