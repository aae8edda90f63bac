/* bench.h: what `seer bench`'s measuring (cmd_bench.c) and reporting (bench_out.c) share. */
#ifndef SEER_BENCH_H
#define SEER_BENCH_H

#include "seer.h"
#include "seer_bench.h"
#include "cli_opts.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#define BENCH_MAX_LIST 32
#define BENCH_MAX_PREFILL_REPS 15

/* The option table's parsers of bench's lists (cli_table.c; cmd_bench.c): false after a
 * message. o is the bench_opts. */
bool bench_opt_ctx_list(const char *arg, cli_common *c, void *o);
bool bench_opt_batch_list(const char *arg, cli_common *c, void *o);
bool bench_opt_budget_list(const char *arg, cli_common *c, void *o);
bool bench_opt_gamma_list(const char *arg, cli_common *c, void *o);
bool bench_opt_spec_list(const char *arg, cli_common *c, void *o);
bool bench_opt_weights_list(const char *arg, cli_common *c, void *o);
bool bench_opt_prefill(const char *arg, cli_common *c, void *o);
bool bench_opt_alpha(const char *arg, cli_common *c, void *o);
bool bench_opt_resume(const char *arg, cli_common *c, void *o);

typedef struct {
    const char *synthetic, *model_path;
    seer_backend_kind backend;
    seer_weights_kind weights;
    int threads, page_size, steps, warmup;
    int tp; /* --tp: ranks of tensor parallelism (0: none) */
    cli_common tpc; /* --tp-addr, --tp-procs (cli_tp_setup) and the workers it started */
    int gpu_layers; /* --gpu-layers: layers resident (-1: from free memory) */
    int prefill[BENCH_MAX_LIST], n_prefill; /* prompt sizes of the prefill runs (none: skip) */
    int prefill_reps;                        /* timed runs of each, after a warm-up: the median */
    int prefill_chunk;                       /* prompt tokens per forward call of a prefill */
    int resume[BENCH_MAX_LIST], n_resume;    /* --resume: cached tokens of the resume runs */
    uint64_t seed;
    double alpha; /* synthetic acceptance of the speculative runs */
    const char *draft_synthetic, *draft_path; /* the draft model of draft and hierarchy runs */
    seer_model *draft;
    seer_spec_params drafters;       /* the drafters' settings (the registry's options: --spec-sinks,
                                      * --spec-hier-gamma ...); kind, budget and gamma per run */
    const char *trace_path;          /* --accept-trace: replayed acceptance instead of alpha */
    seer_accept_trace *trace;
    int ctx[BENCH_MAX_LIST], n_ctx;
    int batch[BENCH_MAX_LIST], n_batch;
    seer_spec_kind spec[BENCH_MAX_LIST];
    int n_spec;
    int budget[BENCH_MAX_LIST], n_budget;
    int gamma[BENCH_MAX_LIST], n_gamma;
    /* --spec-weights: each self-draft setting with the model's weights (false) and/or its
     * draft weights (true) of type spec_weights */
    bool dweights[2];
    int n_dweights;
    const char *spec_weights;
    int tree_size;        /* > 0: the speculative runs draft trees of this many nodes, depth gamma */
    seer_kv_type kv_type; /* --kv-type: how every context of the run stores its KV */
    bool json;
    const char *json_out; /* also write the JSON object to this file */
    const char *plot;
    const char *replot;   /* plot this JSON of an earlier run instead of measuring */
    const char *peer;     /* another implementation's decode and prefill at the same points (JSON) */
} bench_opts;

/* One speculative setting at one (L, B): measured back to back with plain decoding through
 * the same generator loop. */
typedef struct {
    seer_spec_kind kind;
    int budget, gamma;
    int tree_size;           /* > 0: trees of this many nodes and depth gamma */
    bool draft_weights;      /* the draft steps multiply by the draft weights */
    float ffn_density;       /* the draft steps' sparse FFN (--spec-ffn-density; 1: whole) */
    bool ffn_cats;           /* ... chosen per token (--spec-ffn-mode cats): all of the gate read */
    int best_first;          /* the draft model's best-first trees (--draft-best-first K; 0: none) */
    bool ok;
    char err[256];
    double draft_step_ms;    /* T_D: one draft forward step of the whole batch */
    double verify_ms;        /* T_V: one verification call of G+1 tokens per sequence (a
                              * tree's nodes + 1 under the tree mask, and the KV row moves) */
    double round_ms;         /* one generator round (drafting + verification) */
    double acceptance;       /* accepted / drafted (synthetic: about alpha) */
    double tok_per_verify;   /* tokens emitted per sequence per verification */
    double calls_per_verify; /* the target's forward calls per verification (> 1: a tree
                              * larger than a call, verified in several) */
    double gen_plain_tok_s;  /* plain decoding through the generator, same process */
    double spec_tok_s;
    double speedup;          /* spec_tok_s / gen_plain_tok_s */
    double projected;        /* cost model (§1) at alpha from T_D, T_V and T_T */
    /* auto: what it chose over the timed rounds, and what the table predicted */
    double auto_plain_frac;  /* rounds decoded plain */
    double auto_mean_gamma;  /* G over the speculating rounds */
    double auto_predicted;   /* predicted speedup over the table's plain rate */
    double calibrate_s;      /* the point's table: seconds to measure it */
} bench_spec;

typedef struct {
    int L, B;
    bool ok;
    char err[256];
    double step_ms, step_min_ms, step_max_ms; /* plain decode: median, fastest, slowest */
    double tok_s;
    double bytes;            /* W + B*L*c */
    double floor_ms, floor_tok_s, fraction;
    double pcie_floor_ms;    /* streamed layers: info.host_weight_bytes / h2d_bandwidth (the
                              * floor above is the larger of it and the device's); else 0 */
    bool finite;             /* the logits of the first step were all finite */
    /* The peer's plain decode at this (L, B) (--peer), when its file has the point. */
    bool peer_has, peer_ok;
    char peer_err[64];       /* e.g. "oom" */
    double peer_step_ms, peer_tok_s;
    bench_spec *spec;
    int n_spec;
} bench_point;

/* One prompt of P tokens in one sequence, and the peer's prefill of the same size. */
typedef struct {
    int tokens;              /* P */
    bool ok;
    char err[256];
    double ms, tok_s, tflops; /* median of 3 */
    bool peer_has, peer_ok;
    char peer_err[64];
    double peer_tok_s;
} bench_prefill;

/* A preempted request of L cached tokens resumed (bench_resume.c): by recomputing its L + 1
 * tokens (a prefill in chunks of prefill_chunk) or by copying its pages back from the host
 * tier and computing its pending token; medians of prefill_reps. */
typedef struct {
    int tokens;              /* L */
    bool ok;
    char err[256];
    double recompute_ms;     /* prefill of L + 1 tokens */
    double save_ms, load_ms; /* the pages to the host (at preemption) and back (at resume) */
    double step_ms;          /* the pending token's decode over the restored cache */
    double bytes;            /* of the pages, either way */
} bench_resume;

typedef struct {
    seer_model_info info;
    seer_model_footprint fp;
    double bandwidth;        /* bytes/s */
    double h2d_bandwidth;    /* host-to-device bytes/s, measured when layers are streamed
                              * (info.host_weight_bytes > 0), else 0 */
    int ranks;           /* GPUs the model is divided over (--tp; 1 without) */
    seer_kv_type kv_type;    /* the run's (fp.kv_bytes_per_token counts its bytes) */
    uint64_t kv_capacity;    /* tokens of KV of kv_type the free memory held before any context
                                (seer_model_kv_capacity); 0: unknown */
    double allreduce_s[BENCH_MAX_LIST]; /* --tp: one all-reduce of batch[i] rows of D, seconds
                                           (0: not measured) */
    bench_prefill prefill[BENCH_MAX_LIST];
    int n_prefill;
    bench_resume resume[BENCH_MAX_LIST];
    int n_resume;
    char date[32];
    bench_point *pts;
    int n_pts;
    bool has_peer;
    char peer_label[64];     /* e.g. "llama.cpp": the column, JSON and plot label */
    char peer_version[128];  /* e.g. "llama.cpp 0c1e57098 (build 0), ...", "" when not given */
    char peer_desc[1024];    /* build, device and the exact commands, as the peer's file says */
    struct bench_peer_prefill *peer_only; /* the peer's prefill runs of no size of this run
                                             (batched, or sizes not measured here), shown as
                                             its own; [n_peer_only], owned */
    int n_peer_only;
} bench_result;

/* Another implementation's decode and prefill of the same model shape. scripts/hf_peer.py
 * (HF transformers) and scripts/peer-llamacpp.sh (llama.cpp) write it:
 *   {"peer": LABEL, "version": TEXT (optional), "description": TEXT,
 *    "model": {"dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "n_vocab", ...},
 *    "points": [{"ctx", "batch", "ms_per_step"} or {"ctx", "batch", "error"}],
 *    "prefill": [{"tokens", "batch" (default 1), "tok_per_s"} or {"tokens", "error"}]
 *               (optional)}
 * ms_per_step is one decode step of the whole batch (B new tokens) with L tokens cached; a
 * prefill's tok_per_s counts the prompt tokens of all its sequences. Other keys are kept for
 * people and ignored here. */
typedef struct {
    int L, B;
    bool ok;
    char err[64];
    double step_ms;
} bench_peer_point;

typedef struct bench_peer_prefill {
    int tokens, B;
    bool ok;
    char err[64];
    double tok_s;
} bench_peer_prefill;

typedef struct {
    char label[64], version[128], desc[1024];
    int dim, n_layers, n_heads, n_kv_heads, ffn_dim, n_vocab;
    bench_peer_point *pts;
    int n_pts;
    bench_peer_prefill *prefill;
    int n_prefill;
} bench_peer;

double bench_omega(int gamma, double alpha);
/* The fastest fixed setting of a point (plain decoding when none beats it): its speedup over
 * plain, and its index in p->spec (-1: plain). */
double bench_best_fixed(const bench_point *p, int *idx);
/* "streaming", or "streaming+tree12" for a tree run (static storage, per call). */
const char *bench_spec_label(const bench_spec *s);

void bench_print_table(const bench_opts *o, const bench_result *r);
/* --resume (bench_resume.c): one run into br (its tokens set), its table and its JSON array. */
void bench_run_resume(const bench_opts *o, seer_model *m, const bench_result *r, bench_resume *br);
void bench_print_resume(FILE *f, const bench_opts *o, const bench_result *r);
struct json_t *bench_resume_json(const bench_result *r);
/* Writes the JSON object and a newline to f. Returns 0, or 1 when it could not be built. */
int bench_print_json(FILE *f, const bench_opts *o, const bench_result *r);
/* Reads what bench_print_json wrote, enough for bench_plot (allocates r->pts and their
 * spec arrays). Returns 0, or 1 with a message on stderr. */
int bench_load_json(const char *path, bench_opts *o, bench_result *r);
/* Reads a peer's JSON. Returns 0, or 1 with a message on stderr naming the file and what is
 * wrong with it (p then holds nothing to free). */
int bench_peer_load(const char *path, bench_peer *p);
void bench_peer_free(bench_peer *p);
/* Copies the peer's numbers into r's points of the same (L, B) and its prefill (B = 1) into
 * r's prefill runs of the same size; its other prefill runs go to r->peer_only. The peer must have run the
 * model r->info describes (same dimensions). Returns 0, or 1 with a message on stderr (r
 * unchanged). */
int bench_peer_merge(const char *path, const bench_peer *p, bench_result *r);
/* Frees what bench_peer_merge and bench_load_json allocated in r (points, their speculative
 * settings, the peer's own prefill runs). */
void bench_result_free(bench_result *r);
/* "q4_K 65%, q6_K 28%, f32 7%": the footprint's stored dtypes by their share of W, prefixed
 * by the GGUF's file type ("Q4_K_M: ...") when it has one. */
void bench_weight_types(const seer_model_footprint *fp, char *buf, size_t cap);
/* Writes the PNG with gnuplot. Returns 0 on success, 1 on failure; when gnuplot is not
 * installed it says so on stderr and returns 0 (the table and JSON hold the numbers). */
int bench_plot(const bench_opts *o, const bench_result *r);

#endif
