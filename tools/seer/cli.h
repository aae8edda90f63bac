/* cli.h: what the seer subcommands share: strict number parsing and messages. */
#ifndef SEER_CLI_H
#define SEER_CLI_H

#include "seer.h"
#include "seer_bench.h"
#include "spec_kinds.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Strict parsers: the whole string must be a number within [lo, hi]; on failure they print
 * "seer: --flag: ..." to stderr and return false. */
bool cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
bool cli_float(const char *flag, const char *s, double lo, double hi, double *out);
/* Prints "seer: <what>: <status message>" to stderr. */
void cli_error(const char *what, seer_status s);
bool cli_backend(const char *s, seer_backend_kind *out);
/* --weights: stored (as the file has them), bf16 (CUDA) or f32 (CPU) dequantised at load. */
bool cli_weights(const char *s, seer_weights_kind *out);
/* --ctx (0 = not given) against the model's trained context: a longer one is refused with a
 * message unless beyond (--ctx-beyond-trained) is set, then it gets a warning. */
bool cli_ctx_ok(long long ctx, int ctx_train, bool beyond);
/* Seconds on a monotonic clock. */
double cli_now_s(void);

/* The sampler flags generate and chat share: getopt_long values for their option tables,
 * and their parser: 1 = c was one of them and is stored in sp, 0 = c is not a sampler flag,
 * -1 = its value was bad (the message is printed). */
enum { CLI_O_TEMP = 512, CLI_O_TOPK, CLI_O_TOPP, CLI_O_MINP, CLI_O_REP, CLI_O_REPN, CLI_O_SEED, CLI_O_FREQ, CLI_O_PRES };
int cli_sampler_opt(int c, const char *arg, seer_sampler_params *sp);

/* --spec with token trees (generate, chat): "--spec tree" proposes trees over the base
 * drafter --spec-base (default streaming) with --spec-tree-size nodes (default 8) and depth
 * --spec-tree-depth (default --spec-gamma). "--spec hierarchy" takes --spec-base as its
 * middle level's view and --spec-hier-gamma as its bottom chain. cli_spec_kind parses --spec's value (tree or a
 * drafter), cli_tree_opt the tree flags (1 = taken, 0 = not one of them, -1 = bad value),
 * cli_tree_apply sets spec from them after parsing (false with a message when inconsistent). */
typedef struct {
    bool on;
    bool base_set;
    seer_spec_kind base;
    int size, depth; /* size -1: auto */
    int replan;
    int hier_gamma;  /* --spec-hier-gamma (0: not given) */
} cli_tree;
enum { CLI_O_SBASE = 560, CLI_O_TSIZE, CLI_O_TDEPTH, CLI_O_TREPLAN, CLI_O_HGAMMA, CLI_O_CALBUDGET };
/* (--spec-calibrate-budget rides with these: generate and chat take them both) */
#define CLI_TREE_OPTIONS                                                                   \
    {"spec-base", required_argument, 0, CLI_O_SBASE},                                      \
        {"spec-calibrate-budget", required_argument, 0, CLI_O_CALBUDGET},                  \
        {"spec-tree-size", required_argument, 0, CLI_O_TSIZE},                             \
        {"spec-tree-depth", required_argument, 0, CLI_O_TDEPTH},                           \
        {"spec-tree-replan", required_argument, 0, CLI_O_TREPLAN},                         \
        {"spec-hier-gamma", required_argument, 0, CLI_O_HGAMMA}
/* The help of the tree and hierarchy options, with the drafters that may fill a tree or be
 * the hierarchy's middle level (from the registry). */
void cli_tree_help(FILE *f);
#define CLI_TREE_HELP_BASE                                                                 \
    "      --spec tree       token trees over --spec-base (SpecInfer / Sequoia verification)\n" \
    "      --spec-base KIND  the drafter that fills the tree (default streaming), one of:\n"
#define CLI_TREE_HELP_REST                                                                 \
    "      --spec-tree-size N  nodes per tree (default 8); auto: the size and shape that pay best\n" \
    "                        (Sequoia), from the acceptance measured while generating and the\n" \
    "                        verification cost measured at start (at most 32 nodes)\n"        \
    "      --spec-tree-depth D depth of a tree (default --spec-gamma)\n"                      \
    "      --spec-tree-replan R re-plan the tree's shape every R rounds from the measured\n"   \
    "                        acceptance (Sequoia; default 0: fixed shape, 8 with auto)\n"   \
    "      --spec hierarchy  TriForce's hierarchy: --draft-model drafts for the target under the\n" \
    "                        view --spec-base (default streaming), which verifies exactly and\n" \
    "                        proposes --spec-gamma tokens to the target; the views:\n"
#define CLI_TREE_HELP_HIER                                                                 \
    "      --spec-hier-gamma N tokens the draft model proposes per middle verification (default 2)\n" \
    CLI_CALIBRATE_HELP
bool cli_spec_kind(const char *arg, seer_spec_kind *kind, cli_tree *t);
/* false with a message when kind drafts with a draft model and draft_model is NULL. */
bool cli_draft_model_ok(const char *cmd, seer_spec_kind kind, const char *draft_model);
/* --spec-weights T (after cli_tree_apply; type NULL: not given): the draft weights' type, q8_0
 * or q4_0, for a drafter whose steps may use draft weights (seer_spec_kind_info.draft_weights)
 * or auto (its sparse self-drafts); sets spec->draft_weights. false with a message
 * for another type or drafter. */
bool cli_spec_weights(const char *cmd, const char *type, seer_spec_params *spec);
#define CLI_SPEC_WEIGHTS_HELP                                                              \
    "      --spec-weights T  the self-draft's steps multiply by a copy of the weights quantised\n" \
    "                        to T (q8_0 or q4_0; made at load, from f32 or bf16 weights);\n" \
    "                        with auto, its sparse self-drafts' steps\n"
int cli_tree_opt(int c, const char *arg, cli_tree *t);
bool cli_tree_apply(const cli_tree *t, seer_spec_params *spec);

/* A growing text buffer (s NUL-terminated when cap > 0). */
typedef struct {
    char *s;
    size_t n, cap;
} cli_text;
/* Appends the text seer_detok_push gives for token (flush: what seer_detok_flush gives; token
 * is then ignored) to t, growing t as needed so that no token's text is ever dropped however
 * long its piece. Returns the bytes appended, or -1 when out of memory (message printed). */
int cli_detok_append(seer_detok *dt, int32_t token, bool flush, cli_text *t);

/* Output on stdout (cli_io.c). cli_stdout_open, at a command's start: ignores SIGPIPE (a
 * closed pipe becomes an EPIPE that is reported) and refuses, with a message, a closed stdout.
 * cli_out writes n bytes (and flushes when asked); after the first failure it writes nothing
 * more and returns false. cli_stdout_done flushes and, when any write failed, prints why on
 * stderr and returns false: the command then exits non-zero. */
bool cli_stdout_open(const char *cmd);
bool cli_out(const char *s, size_t n, bool flush);
bool cli_stdout_done(const char *cmd);

/* Prompts (cli_io.c), bounded before they are tokenized. cli_prompt_max_bytes: the most bytes
 * a prompt can have and still fit n_ctx tokens of m's vocabulary (no token stands for more
 * text than its piece). cli_prompt_open opens a prompt file before the model loads (NULL with
 * a message when it cannot be read or is a directory); cli_prompt_read reads it (and closes
 * nothing), refusing with a message (NULL) a file of more than max bytes (a regular file
 * unread, a device or pipe after max + 1 bytes) or one with a NUL byte. cli_prompt_fits:
 * false with a message when a prompt of len bytes is over max. */
size_t cli_prompt_max_bytes(const seer_model *m, int n_ctx);
FILE *cli_prompt_open(const char *cmd, const char *path);
char *cli_prompt_read(const char *cmd, FILE *f, const char *path, size_t max, int n_ctx);
bool cli_prompt_fits(const char *cmd, const char *what, size_t len, size_t max, int n_ctx);

/* --spec auto's cost table (cli_cost.c): loaded from path (NULL: the default cache file) when
 * it holds one for ctx's model and device (and the draft model's row when draft is given),
 * else calibrated on ctx and saved there. NULL with a note on stderr when none can be had:
 * generation then runs plain. */
seer_spec_cost *cli_auto_cost(const char *cmd, seer_context *ctx, seer_model *draft, const char *path);
/* --spec-calibrate-budget: the bound on calibration's time for cli_auto_cost (0: the
 * library's default, 10 s on the CPU, 2 s on a GPU). */
void cli_cost_set_budget(double seconds);
#define CLI_CALIBRATE_HELP                                                                 \
    "      --spec-calibrate-budget S  auto: seconds calibration may take at most (default 10 on\n" \
    "                        the CPU, 2 on a GPU); cells it has no time for are estimated\n"

/* --spec-cost-file at start: false with a message when path (NULL: not given) exists and is
 * not a regular file (a symlink, device, FIFO or directory), which a cost file never
 * replaces or reads. */
bool cli_cost_file_ok(const char *cmd, const char *path);
/* The decisions and speedups of auto speculation, as JSON and as a line on stderr. */
typedef struct json_t json_t;
json_t *cli_auto_json(const seer_spec_auto_stats *st);
void cli_auto_print(const char *cmd, const seer_spec_auto_stats *st);

int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
