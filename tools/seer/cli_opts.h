/*
 * cli_opts.h: the one option table of `seer generate`, `chat`, `serve` and `bench`
 * (cli_table.c), its parser and the help it prints (cli_opts.c). A row says an option's name,
 * its argument, its help, the commands that take it and where its value goes: a field of
 * cli_common (what the commands share), a field of the command's own options, or a function
 * for values that need more than a range check. The drafters' settings are not rows: they
 * come from the library's registry (seer_spec_option_at) and land in cli_common.spec, so a
 * drafter's setting is named in its own file alone.
 *
 * Not for: what the options mean once parsed (the cmd_*.c files check them against each
 * other and the model), or the server's JSON fields (serve_fields.c).
 */
#ifndef SEER_CLI_OPTS_H
#define SEER_CLI_OPTS_H

#include "seer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The commands (a row's cmds is a set of them). */
enum { CLI_GENERATE = 1, CLI_CHAT = 2, CLI_SERVE = 4, CLI_BENCH = 8 };
#define CLI_GEN_CHAT (CLI_GENERATE | CLI_CHAT)
#define CLI_RUNS (CLI_GENERATE | CLI_CHAT | CLI_SERVE) /* those that run one speculation */
#define CLI_ALL (CLI_RUNS | CLI_BENCH)

/* --spec tree and --spec-base: cli_tree_apply (main.c) turns them into seer_spec_params. */
typedef struct {
    bool on;
    bool base_set;
    seer_spec_kind base;
    int size, depth; /* size -1: auto */
    int replan;
} cli_tree;

/* What the commands share. */
typedef struct {
    const char *model, *draft_model, *cost_file, *spec_weights, *chat_template, *system;
    long long threads, tp, ctx, batch, n_predict, kv_bits;
    double kv_host_gb; /* chat, serve: the KV cache's host tier, GiB (0: none) */
    const char *tp_addr; /* --tp ranks 1..N-1 in processes that connect here (seer worker) */
    bool tp_procs;       /* ... started by the command itself */
    int tp_pids[SEER_TP_MAX]; /* --tp-procs: the workers started (0: none) */
    char tp_addr_buf[64];     /* ... and where they meet rank 0 */
    long long gpu_layers; /* -1: from free memory */
    seer_backend_kind backend;
    seer_weights_kind weights;
    seer_kv_type kv_type;
    bool ctx_beyond, no_think, chat; /* chat: generate wraps its prompt in the chat template */
    seer_sampler_params sp;
    seer_spec_params spec;
    cli_tree tree;
    uint64_t spec_set; /* bit i: the registry's i-th setting was given (seer_spec_option_at) */
} cli_common;

/* How a row's argument is read and stored. */
typedef enum {
    CLI_V_TEXT,  /* no option: a line of help (and more()), for the commands in cmds */
    CLI_V_FLAG,  /* no argument: a bool set to true */
    CLI_V_STR,   /* const char *: the argument itself */
    CLI_V_I64,   /* long long in [lo, hi] */
    CLI_V_I32,   /* int in [lo, hi] */
    CLI_V_U64,   /* uint64_t in [lo, hi] */
    CLI_V_F32,   /* float in [flo, fhi] */
    CLI_V_F64,   /* double in [flo, fhi] */
    CLI_V_FN,    /* fn decides (and prints why not) */
    CLI_V_HELP,  /* -h, --help */
} cli_vtype;

typedef enum { CLI_D_COMMON, CLI_D_CMD } cli_dest;

typedef struct cli_opt cli_opt;
struct cli_opt {
    unsigned cmds;        /* CLI_GENERATE | ... */
    const char *name;     /* long name without "--" (NULL for CLI_V_TEXT) */
    char shortc;          /* -x, or 0 */
    const char *metavar;  /* the argument's name in the help, NULL for none */
    cli_vtype type;
    cli_dest dest;
    size_t off;           /* of the field in cli_common or in the command's options */
    long long lo, hi;     /* integers */
    double flo, fhi;      /* reals */
    bool (*fn)(const char *arg, cli_common *c, void *cmd); /* CLI_V_FN: false after a message */
    const char *help;     /* one or more lines, '\n' between; NULL: not shown */
    void (*more)(FILE *f, unsigned cmd); /* printed after the help (lists from the registry) */
};

/* The table (cli_table.c), ended by a row with cmds 0. */
extern const cli_opt cli_table[];

/* Defaults of the shared fields before parsing. */
void cli_common_init(cli_common *c);
/* Parses argv[1..] for command cmd ("generate": its name in messages) against the rows of
 * table (cli_table) and the drafters' settings into c and the command's own options
 * cmd_opts. Returns -1 to go on (optind: the first operand), 0 after printing the help
 * (--help), 2 after a message on stderr. */
int cli_parse(const cli_opt *table, unsigned cmd, const char *name, int argc, char **argv, cli_common *c,
              void *cmd_opts);
/* The command's help, from the table and the registry. */
void cli_help(const cli_opt *table, FILE *f, unsigned cmd);
/* The drafters' settings in the help, "--flag META  help (default D)" (more() of a row). */
void cli_help_spec_options(FILE *f, unsigned cmd);

#endif
