/* cli.h: what the seer subcommands share: strict number parsing and messages; their options
 * are one table (cli_opts.h). */
#ifndef SEER_CLI_H
#define SEER_CLI_H

#include "seer.h"
#include "seer_bench.h"
#include "cli_opts.h"
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
/* `seer worker` (cmd_worker.c), and for --tp-procs: starts ranks 1 .. c->tp - 1 as `seer
 * worker` processes that meet rank 0 at a free port of 127.0.0.1, written into addr [cap]
 * (pids [SEER_TP_MAX] their ids; false: none is left running, the reason printed); cli_tp_reap
 * waits for them (after the model is freed they end on rank 0's goodbye), with kill_them
 * ending them first. */
int cmd_worker(int argc, char **argv);
bool cli_tp_spawn(const cli_common *c, char *addr, size_t cap, int *pids);
/* --tp-addr and --tp-procs into mp (the workers started here); false: the reason printed. */
bool cli_tp_setup(const char *cmd, cli_common *c, seer_model_params *mp);
void cli_tp_reap(int *pids, bool kill_them);
bool cli_backend(const char *s, seer_backend_kind *out);
/* --weights: stored (as the file has them), bf16 (CUDA) or f32 (CPU) dequantised at load. */
bool cli_weights(const char *s, seer_weights_kind *out);
/* --ctx (0 = not given) against the model's trained context: a longer one is refused with a
 * message unless beyond (--ctx-beyond-trained) is set, then it gets a warning. */
bool cli_ctx_ok(long long ctx, int ctx_train, bool beyond);
/* Seconds on a monotonic clock. */
double cli_now_s(void);

/* --spec's value for generate and chat: tree (then t->on) or a kind (cli_spec_kind); false
 * with a message for another. */
bool cli_spec_kind(const char *arg, seer_spec_kind *kind, cli_tree *t);
/* false with a message when kind drafts with a draft model and draft_model is NULL. */
bool cli_draft_model_ok(const char *cmd, seer_spec_kind kind, const char *draft_model);
/* --spec-weights T (after cli_tree_apply; type NULL: not given): the draft weights' type, q8_0
 * or q4_0, for a drafter whose steps may use draft weights (seer_spec_kind_info.draft_weights)
 * or auto (its sparse self-drafts); sets spec->draft_weights. false with a message
 * for another type or drafter. */
bool cli_spec_weights(const char *cmd, const char *type, seer_spec_params *spec);
/* After parsing: "--spec tree" proposes trees over the base drafter --spec-base (default
 * streaming) with --spec-tree-size nodes (default 8) and depth --spec-tree-depth (default
 * --spec-gamma); "--spec hierarchy" takes --spec-base as its middle level's view. Sets
 * c->spec from c->tree, and refuses (false, with a message) tree options without trees and a
 * drafter's setting that means something only with its own kind (seer_spec_option.own_only)
 * given with another. */
bool cli_tree_apply(cli_common *c);
/* A drafter setting's value in spec by name (seer_spec_get; 0 for an unknown name). */
double cli_spec_num(const seer_spec_params *spec, const char *name);
/* Whether spec drafts through the pool's quantised KV copy (quantkv, or the hierarchy over a
 * quantkv middle): the context then needs the copy (--spec-kv-bits). */
bool cli_spec_quantkv(const seer_spec_params *spec);

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
int cmd_perplexity(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
