/* bench.h: what `seer bench`'s measuring (cmd_bench.c) and reporting (bench_out.c) share. */
#ifndef SEER_BENCH_H
#define SEER_BENCH_H

#include "seer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#define BENCH_MAX_LIST 32

typedef struct {
    const char *synthetic, *model_path;
    seer_backend_kind backend;
    seer_weights_kind weights;
    int threads, page_size, steps, warmup, prefill, sinks;
    uint64_t seed;
    double alpha; /* synthetic acceptance of the speculative runs */
    int ctx[BENCH_MAX_LIST], n_ctx;
    int batch[BENCH_MAX_LIST], n_batch;
    seer_spec_kind spec[BENCH_MAX_LIST];
    int n_spec;
    int budget[BENCH_MAX_LIST], n_budget;
    int gamma[BENCH_MAX_LIST], n_gamma;
    bool json;
    const char *json_out; /* also write the JSON object to this file */
    const char *plot;
    const char *replot;   /* plot this JSON of an earlier run instead of measuring */
    const char *peer;     /* another implementation's plain decode at the same points (JSON) */
} bench_opts;

/* One speculative setting at one (L, B): measured back to back with plain decoding through
 * the same generator loop. */
typedef struct {
    seer_spec_kind kind;
    int budget, gamma;
    bool ok;
    char err[256];
    double draft_step_ms;    /* T_D: one draft forward step of the whole batch */
    double verify_ms;        /* T_V: one verification call of G+1 tokens per sequence */
    double round_ms;         /* one generator round (drafting + verification) */
    double acceptance;       /* accepted / drafted (synthetic: about alpha) */
    double tok_per_verify;   /* tokens emitted per sequence per verification */
    double gen_plain_tok_s;  /* plain decoding through the generator, same process */
    double spec_tok_s;
    double speedup;          /* spec_tok_s / gen_plain_tok_s */
    double projected;        /* cost model (§1) at alpha from T_D, T_V and T_T */
} bench_spec;

typedef struct {
    int L, B;
    bool ok;
    char err[256];
    double step_ms, step_min_ms, step_max_ms; /* plain decode: median, fastest, slowest */
    double tok_s;
    double bytes;            /* W + B*L*c */
    double floor_ms, floor_tok_s, fraction;
    bool finite;             /* the logits of the first step were all finite */
    /* The peer's plain decode at this (L, B) (--peer), when its file has the point. */
    bool peer_has, peer_ok;
    char peer_err[64];       /* e.g. "oom" */
    double peer_step_ms, peer_tok_s;
    bench_spec *spec;
    int n_spec;
} bench_point;

typedef struct {
    seer_model_info info;
    seer_model_footprint fp;
    double bandwidth;        /* bytes/s */
    int prefill_tokens;
    double prefill_ms, prefill_tok_s, prefill_tflops; /* prefill_tokens 0: not measured */
    char prefill_err[256];
    char date[32];
    bench_point *pts;
    int n_pts;
    bool has_peer;
    char peer_label[64];     /* e.g. "HF transformers": the column, JSON and plot label */
    char peer_desc[256];     /* versions, cache, device, as the peer's file says */
} bench_result;

/* Another implementation's plain decode of the same model shape (scripts/hf_peer.py writes
 * it): {"peer": LABEL, "description": TEXT, "model": {"dim", "n_layers", "n_heads",
 * "n_kv_heads", "ffn_dim", "n_vocab"}, "points": [{"ctx", "batch", "ms_per_step"} or
 * {"ctx", "batch", "error"}]}. */
typedef struct {
    int L, B;
    bool ok;
    char err[64];
    double step_ms;
} bench_peer_point;

typedef struct {
    char label[64], desc[256];
    int dim, n_layers, n_heads, n_kv_heads, ffn_dim, n_vocab;
    bench_peer_point *pts;
    int n_pts;
} bench_peer;

double bench_omega(int gamma, double alpha);

void bench_print_table(const bench_opts *o, const bench_result *r);
/* Writes the JSON object and a newline to f. Returns 0, or 1 when it could not be built. */
int bench_print_json(FILE *f, const bench_opts *o, const bench_result *r);
/* Reads what bench_print_json wrote, enough for bench_plot (allocates r->pts and their
 * spec arrays). Returns 0, or 1 with a message on stderr. */
int bench_load_json(const char *path, bench_opts *o, bench_result *r);
/* Reads a peer's JSON. Returns 0, or 1 with a message on stderr naming the file and what is
 * wrong with it (p then holds nothing to free). */
int bench_peer_load(const char *path, bench_peer *p);
void bench_peer_free(bench_peer *p);
/* Copies the peer's numbers into r's points of the same (L, B). The peer must have run the
 * model r->info describes (same dimensions). Returns 0, or 1 with a message on stderr (r
 * unchanged). */
int bench_peer_merge(const char *path, const bench_peer *p, bench_result *r);
/* Writes the PNG with gnuplot. Returns 0 on success, 1 on failure; when gnuplot is not
 * installed it says so on stderr and returns 0 (the table and JSON hold the numbers). */
int bench_plot(const bench_opts *o, const bench_result *r);

#endif
