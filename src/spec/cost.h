/*
 * cost.h: the cost model that chooses speculation per round (§1 and §5 of the speculative
 * decoding reference; MagicDec's model, Sequoia's for trees).
 *
 * Three parts:
 *   - a table of measured phase times (cost.c): the target's decode step T_T(B, L), the
 *     verification call T_V(n, B, L) of n tokens per sequence, and each drafter's step
 *     T_D(drafter, K, B, L); read back bilinearly in (log B, log L) and linearly in n, and
 *     kept in a small text file per model and device (cost_file.c);
 *   - acceptance tracked online per request, drafter and budget, with a batch-wide estimate of the
 *     recent rounds as its prior, and the choice, every round, of the option that maximises
 *     predicted tokens per second, plain decoding whenever nothing is predicted to win
 *     (cost_plan.c);
 *   - calibration, which measures the table on a live context within a time budget,
 *     estimating and flagging the cells it had no time for (calibrate.c).
 *
 * Not for running speculation: the generator and the scheduler do that and report outcomes
 * here. Times are seconds throughout.
 */
#ifndef SEER_SPEC_COST_H
#define SEER_SPEC_COST_H

#include "seer.h"
#include "spec/tree_shape.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SEER_COST_MAX_B 8        /* batch sizes in the grid */
#define SEER_COST_MAX_SEQ 512    /* sequences of the largest batch size calibration times */
#define SEER_COST_MAX_L 8        /* cache lengths in the grid */
#define SEER_COST_MAX_N 8        /* verification sizes in the grid */
#define SEER_COST_MAX_K 6        /* budgets per drafter */
#define SEER_COST_MAX_DRAFTERS 8
#define SEER_COST_MAX_G 16       /* longest chain the planner considers */
#define SEER_COST_KINDS SEER_SPEC_KIND_MAX
#define SEER_COST_KEY_MAX 128
#define SEER_COST_FILE_VERSION 2 /* what seer_cost_format writes; 1 is read too */
#define SEER_COST_MAX_TIME_S 1e6 /* a time past this is a broken measurement or file */

/* One drafter's measured step: every sequence of the batch drafts one token. */
typedef struct {
    seer_spec_kind kind;
    int n_k;
    int k[SEER_COST_MAX_K];                                    /* [n_k] ascending budgets K
                                                                  (0: not a budgeted drafter) */
    double t[SEER_COST_MAX_K][SEER_COST_MAX_B][SEER_COST_MAX_L]; /* [n_k][n_b][n_l] s, >= 0 */
    uint8_t est[SEER_COST_MAX_K][SEER_COST_MAX_B][SEER_COST_MAX_L]; /* 1: estimated, not measured */
} seer_cost_drafter;

typedef struct {
    char key[SEER_COST_KEY_MAX]; /* what the times were measured on (model + device) */
    int n_b, n_l, n_n;
    int b[SEER_COST_MAX_B];      /* [n_b] ascending batch sizes, >= 1 */
    int l[SEER_COST_MAX_L];      /* [n_l] ascending cache lengths, >= 1 */
    int n[SEER_COST_MAX_N];      /* [n_n] ascending verification sizes (tokens per sequence),
                                    >= 2: n = 1 is t_target */
    double t_target[SEER_COST_MAX_B][SEER_COST_MAX_L];                 /* [n_b][n_l] s, > 0 */
    double t_verify[SEER_COST_MAX_N][SEER_COST_MAX_B][SEER_COST_MAX_L]; /* [n_n][n_b][n_l] s */
    /* 1 where a time was estimated from the measured ones (calibration out of time), not
     * measured; 0 throughout for a whole table. The planner trusts estimated cells less
     * (seer_cost_params.est_margin). */
    uint8_t est_target[SEER_COST_MAX_B][SEER_COST_MAX_L];
    uint8_t est_verify[SEER_COST_MAX_N][SEER_COST_MAX_B][SEER_COST_MAX_L];
    int n_drafters;
    seer_cost_drafter drafter[SEER_COST_MAX_DRAFTERS]; /* [n_drafters], one per kind */
} seer_cost_table;

/* SEER_OK when the grids ascend within their limits, every time is positive (drafters'
 * >= 0) and at most SEER_COST_MAX_TIME_S, every estimate flag is 0 or 1 with at least one
 * target time measured, and no kind appears twice; otherwise SEER_ERR_INVALID_ARG naming
 * the first fault. */
seer_status seer_cost_table_check(const seer_cost_table *t);
/* Cells (times) of t that were measured, and all of them (the n-gram row, zero by rule, not
 * counted): *measured < *total for a partial table. Either pointer may be NULL. */
void seer_cost_table_count(const seer_cost_table *t, int *measured, int *total);

/* Interpolated times at batch size B and mean cache length L (clamped to the grid: outside
 * it the nearest edge's value, which under-estimates long contexts: calibrate to the longest
 * L served). Exact at grid points. */
double seer_cost_target(const seer_cost_table *t, double B, double L);
/* n tokens per sequence: t_target at n = 1, linear in n between grid sizes, the last
 * segment's slope past the last (never below it). */
double seer_cost_verify(const seer_cost_table *t, int n, double B, double L);
/* The index of kind's drafter, -1 when the table has none. */
int seer_cost_find_drafter(const seer_cost_table *t, seer_spec_kind kind);
/* Drafter d's step at its budget index ki. */
double seer_cost_draft(const seer_cost_table *t, int d, int ki, double B, double L);
/* The same three, setting *est (when not NULL) to whether any cell the value was read from
 * (with a weight above 0) is estimated. */
double seer_cost_target_est(const seer_cost_table *t, double B, double L, bool *est);
double seer_cost_verify_est(const seer_cost_table *t, int n, double B, double L, bool *est);
double seer_cost_draft_est(const seer_cost_table *t, int d, int ki, double B, double L, bool *est);

/* The text file (cost_file.c). Format, one record per line ('#' comments and blank lines
 * allowed; numbers separated by spaces; rows of n_b * n_l times, B-major):
 *   seer-cost 2
 *   key <text to the end of the line>
 *   b <B ...>            l <L ...>            n <n ...>       (n may be absent)
 *   target <times>
 *   verify <n> <times>                                          (one per n of the grid)
 *   draft <kind name> <K> <times>                               (K ascending per kind)
 *   est target <flags>  est verify <n> <flags>  est draft <kind name> <K> <flags>
 *                       (optional, after the row they mark: n_b * n_l flags, 1 where the
 *                        time was estimated; a row without one was measured throughout)
 *   end
 * Version 1 (no est records) is read as a table measured throughout; a later version is
 * refused. Parsing never trusts the input: every malformed, truncated, out-of-range or
 * duplicated record is SEER_ERR_FORMAT naming its line, and *out is left as it was. */
seer_status seer_cost_parse(const char *text, size_t len, seer_cost_table *out);
/* Reads path; with want_key not NULL a table for another key is SEER_ERR_FORMAT (a stale
 * cache). SEER_ERR_IO when the file cannot be read. */
seer_status seer_cost_load(const char *path, const char *want_key, seer_cost_table *out);
/* Writes t (checked first) to path through a fresh temporary file beside it (mkstemp)
 * renamed over it; SEER_ERR_IO, with path untouched, when path is anything but a regular
 * file or nothing (seer_cost_check_path). seer_cost_load refuses the same: it reads only a
 * regular file, never through a symbolic link. */
seer_status seer_cost_save(const seer_cost_table *t, const char *path);
seer_status seer_cost_check_path(const char *path);
/* The text of t into buf [cap]; *len (may be NULL) its length. SEER_ERR_INVALID_ARG when it
 * does not fit. */
seer_status seer_cost_format(const seer_cost_table *t, char *buf, size_t cap, size_t *len);
/* The cache key of a model on its backend: "<arch>-<name>-<params>-<file size>@<device>",
 * device the backend's name unless device is given (a GPU's name, say). */
void seer_cost_key(const seer_model *model, const char *device, char *buf, size_t cap);
/* dir/<key with every character but [A-Za-z0-9._-] made '_'>.cost into buf [cap]. */
seer_status seer_cost_cache_path(const char *dir, const char *key, char *buf, size_t cap);

/* The table inside a public seer_spec_cost (cost_api.c); NULL for NULL. */
const seer_cost_table *seer_spec_cost_table(const seer_spec_cost *c);

/* ---------------------------------------------------------------------------------------- */
/* Acceptance and the choice per round (cost_plan.c)                                        */

/* Acceptance per depth of a chain: tried[j], accepted[j] (decayed) count the times depth j + 1
 * was verified, and accepted given depths 1..j were. */
typedef struct {
    double tried[SEER_COST_MAX_G];
    double accepted[SEER_COST_MAX_G];
} seer_accept_depths;

/* What one drafter's rounds taught, every budget together: chains as acceptance per depth,
 * trees as positional acceptance (tree_shape.h). A chain informs both: each of its tried
 * depths is a node with one child. */
typedef struct {
    seer_accept_depths chain;
    seer_tree_accept_est pos;
} seer_accept_stats;

/* One request's acceptance: per drafter kind, and per kind and budget K (budget[kind][ki] for
 * the table's K of index ki in that kind's row: a view of 2048 slots can accept where one of
 * 512 does not). The caller keeps one per request. */
typedef struct {
    seer_accept_stats kind[SEER_COST_KINDS];
    seer_accept_depths budget[SEER_COST_KINDS][SEER_COST_MAX_K];
} seer_accept_track;

typedef struct {
    int max_gamma;          /* longest chain considered (1..SEER_COST_MAX_G) */
    int max_tree_nodes;     /* trees of up to this many nodes too (<= SEER_TREE_MAX_NODES);
                               0: chains only */
    int max_tree_depth;     /* 0: max_gamma */
    int tree_ranks;         /* children per node the positional estimate keeps */
    double prior_accept;    /* acceptance assumed before anything is seen */
    double prior_weight;    /* pseudo-observations behind each prior (> 0) */
    double batch_decay;     /* the batch-wide estimate's forgetting per observed chain or tree
                               node, in (0, 1]: it follows the recent rounds of all requests */
    double request_decay;   /* a request's own forgetting per observed chain or node (an
                               exponential average over its recent rounds; 1: all of them) */
    double min_speedup;     /* speculate only when predicted at least this much faster than
                               plain (>= 1; above 1 it keeps marginal options off) */
    double explore_accept;  /* probe rounds: the depth-0 prior (in [0, 1]) */
    int explore_every;      /* auto: a probe after this many plain rounds in a row (0: never);
                               the gap doubles after each probe that leaves plain the choice */
    double est_margin;      /* an option whose draft or verification time reads an estimated
                               cell of a partial table is charged this many times its
                               predicted round time (>= 1): unmeasured, plain is preferred */
} seer_cost_params;

seer_cost_params seer_cost_default_params(void);

typedef struct seer_cost_planner seer_cost_planner;

/* A planner on a copy of table t (checked). */
seer_status seer_cost_planner_init(const seer_cost_table *t, seer_cost_params p,
                                   seer_cost_planner **out);
void seer_cost_planner_free(seer_cost_planner *pl);
const seer_cost_table *seer_cost_planner_table(const seer_cost_planner *pl);

/* A fresh request's track: nothing seen, every estimate at the batch-wide prior. */
void seer_accept_track_init(const seer_cost_planner *pl, seer_accept_track *tr);

/* A verified chain of nd drafts of kind at budget K (a K of the table's row for kind; any
 * other value, 0 for one without budgets, teaches the kind's estimate only) of which the
 * first n_acc were accepted, into the request's track (may be NULL) and the batch-wide
 * estimate. Depths past SEER_COST_MAX_G are not counted. SEER_ERR_INVALID_ARG (nothing
 * counted) unless 0 <= n_acc <= nd. */
seer_status seer_cost_observe_chain(seer_cost_planner *pl, seer_accept_track *tr,
                                    seer_spec_kind kind, int budget, int nd, int n_acc);
/* One verified tree node at depth (its children at depth + 1) with n_children children, of
 * which the one of rank accepted_rank (1-based; 0: none) was accepted. */
seer_status seer_cost_observe_node(seer_cost_planner *pl, seer_accept_track *tr,
                                   seer_spec_kind kind, int budget, int depth, int n_children,
                                   int accepted_rank);

/* The estimates the planner uses: a [max_gamma] per depth (chains) and p [tree_ranks]
 * (trees, every budget together) of one request under kind at budget K (tr NULL: the
 * batch-wide estimate; a K not in the table's row: the kind's estimate over every budget). */
void seer_cost_accept(const seer_cost_planner *pl, const seer_accept_track *tr,
                      seer_spec_kind kind, int budget, double *a, double *p);

/* One round's plan for a batch. */
typedef struct {
    seer_spec_kind kind;     /* SEER_SPEC_NONE: plain decoding */
    int budget;              /* K of the drafter (a grid value of the table) */
    int gamma;               /* chain: drafts per round; tree: its depth (draft steps) */
    int tree_nodes;          /* 0: a chain; else the tree's nodes, root included, whose shape
                                is seer_tree_best(tree_p, tree_ranks, tree_nodes, gamma) */
    int tree_ranks;
    double tree_p[SEER_TREE_MAX_RANK]; /* [tree_ranks] the batch's positional acceptance */
    double tokens_per_round; /* predicted tokens emitted per round, the batch together */
    double t_round_s;        /* predicted seconds of a round (drafting and verification) */
    double tokens_per_s;     /* predicted */
    double plain_tokens_per_s; /* predicted for plain decoding of the same batch */
    double speedup;          /* tokens_per_s / plain_tokens_per_s (1 for plain) */
} seer_spec_decision;

/* The best option for the B requests tracks [B] (NULL entries: the batch-wide estimate)
 * whose caches hold lens [B] tokens, among drafters allowed (allowed[kind], NULL: every
 * drafter of the table) and their budgets in the table. Plain unless an option is predicted
 * at least min_speedup times faster. */
seer_status seer_cost_choose(const seer_cost_planner *pl, const seer_accept_track *const *tracks,
                             const int *lens, int B, const bool *allowed, seer_spec_decision *out);
/* The same choice with explore_accept as the depth-0 prior: the option worth one probe round
 * (plain when none would pay even then, or when what was seen already rules drafting out). */
seer_status seer_cost_choose_probe(const seer_cost_planner *pl, const seer_accept_track *const *tracks,
                                   const int *lens, int B, const bool *allowed, seer_spec_decision *out);
/* The prediction for one given chain option (gamma 0 or kind NONE: plain), to report next to
 * what a fixed setting measured. SEER_ERR_INVALID_ARG when the table lacks kind or budget. */
seer_status seer_cost_predict(const seer_cost_planner *pl, const seer_accept_track *const *tracks,
                              const int *lens, int B, seer_spec_kind kind, int budget, int gamma,
                              seer_spec_decision *out);

/* Expected tokens a chain of G drafts emits per round under per-depth acceptance a [G]:
 * 1 + sum_j prod_{i <= j} a_i. */
double seer_cost_chain_tokens(const double *a, int G);

/* ---------------------------------------------------------------------------------------- */
/* Calibration (calibrate.c)                                                                */

typedef struct {
    int n_b, n_l, n_n, n_k;         /* grid sizes; 0: the defaults */
    int b[SEER_COST_MAX_B];         /* default 1, 2, 4 */
    int l[SEER_COST_MAX_L];         /* default 3 lengths log-spaced from 32 to what n_ctx allows */
    int n[SEER_COST_MAX_N];         /* default 2, 4, 8 */
    int k[SEER_COST_MAX_K];         /* sparse self-draft budgets; default 16, 64 */
    bool self_drafts;               /* measure the sparse-view step (the streaming drafter's
                                       row; see calibrate.c for retrieval and snapkv) */
    int sinks;                      /* sink slots of the measured view */
    seer_context *draft_ctx;        /* a draft model's context to measure (NULL: none); it needs
                                       the same free sequences as ctx */
    double time_budget_s;           /* the bound on measuring (> 0): no call starts that is
                                       predicted to end past it; the points left are estimated
                                       from the measured ones and flagged (est_*) */
    double aim_s;                   /* measuring time aimed at when calls are cheap (> 0; the
                                       repetitions per point are sized to it) */
    int min_reps;                   /* timings per point when cheap enough (median kept) */
    const seer_cost_table *prev;    /* NULL, or a partial table of the same grids and key:
                                       its measured cells are kept and only the rest measured */
    void (*progress)(void *user, int measured, int total, double elapsed_s); /* NULL, or called
                                       after every measured point and at the end */
    void *progress_user;
    const char *device;             /* for the key; NULL: the backend's name */
    const seer_seq_id *seqs;        /* NULL: calibration makes and fills its own sequences;
                                       else max B sequences of ctx to time in place, each
                                       holding l[0] tokens (one length, n_l 1), rewound to it
                                       after every call and left as found (no draft_ctx) */
} seer_calibrate_params;

seer_calibrate_params seer_calibrate_default_params(void);

/* Measures the table on ctx through the public API: it makes max B sequences, fills them
 * with synthetic KV to each L as needed (seer_seq_fill_synthetic), times decode calls of 1
 * and n tokens per sequence (every token's logits returned, as a round needs them) and a
 * draft step under a view of K slots, rewinding after each call, and frees the sequences.
 * Within time_budget_s: the most informative points first, then the cheapest; what is left
 * is estimated (time = a + b * tokens + c * KV rows read, fitted to the measured points) and
 * flagged. ctx (and draft_ctx) needs max B free sequences, room for max L + max n tokens in
 * each and a batch of max B * max n tokens; otherwise SEER_ERR_INVALID_ARG (or the decode's
 * error). The contexts are left as found. */
seer_status seer_cost_calibrate(seer_context *ctx, const seer_calibrate_params *p,
                                seer_cost_table *out);

#endif
