/* cpu.h: internals shared by the CPU backend's files. */
#ifndef SEER_BACKEND_CPU_H
#define SEER_BACKEND_CPU_H

#include "backend/backend.h"
#include "kv/kv_quant.h"

/* A parallel op's body: processes items [i0, i1). */
typedef void (*seer_cpu_task)(void *ctx, int64_t i0, int64_t i1);
typedef struct seer_cpu_pool seer_cpu_pool;

/* cpu_pool.c. n_threads counts the calling thread: 1 starts no worker. */
seer_status seer_cpu_pool_init(int n_threads, seer_cpu_pool **out);
void seer_cpu_pool_free(seer_cpu_pool *p);
/* Runs fn over [0, n) in chunks of `chunk` items on the pool's threads and the caller;
 * returns when all are done. */
void seer_cpu_pool_run(seer_cpu_pool *p, int64_t n, int64_t chunk, seer_cpu_task fn, void *ctx);
int seer_cpu_default_threads(void);

enum { SEER_CPU_ISA_SCALAR = 1, SEER_CPU_ISA_AVX2 = 2, SEER_CPU_ISA_AVX512 = 3 };

typedef struct {
    int n_threads;
    seer_cpu_pool *pool;
    int attn_ref;         /* 1: every sequence takes the reference attention (tests) */
    int isa_cap;          /* SEER_CPU_ISA_*: the best the quantised dots and the tiled prompt
                           * attention may use (tests compare the paths); 0: whatever the
                           * CPU has */
    void *xq;             /* quantised activations for cpu_qmatmul.c, grow-only */
    size_t xq_cap;        /* bytes */
    void *smp;       /* sample_rows / accept_chains scratch, grow-only */
    size_t smp_cap;  /* bytes */
} seer_cpu;

static inline int seer_cpu_threads(const seer_backend *be) {
    return ((const seer_cpu *)be->impl)->n_threads;
}

/* KV storage layout: [n_pages][n_layers][2][page_size][Hkv*Dh] floats. */
/* Runs fn over [0, n) on the backend's threads when `parallel`, else on the caller; chunks
 * are sized so that each thread gets several (threads that lose their core take fewer). */
static inline void seer_cpu_for(const seer_backend *be, bool parallel, int64_t n, seer_cpu_task fn,
                                void *ctx) {
    const seer_cpu *c = be->impl;
    if (!parallel || c->n_threads < 2) {
        if (n > 0)
            fn(ctx, 0, n);
        return;
    }
    int64_t chunk = (n + (int64_t)c->n_threads * 8 - 1) / ((int64_t)c->n_threads * 8);
    seer_cpu_pool_run(c->pool, n, chunk, fn, ctx);
}

static inline float *seer_cpu_kv_row(const void *kv, const seer_kv_geom *g, int page, int layer,
                                     int which, int row) {
    size_t kvd = (size_t)g->n_kv_heads * g->head_dim;
    size_t off = (((size_t)page * g->n_layers + layer) * 2 + which) * g->page_size + row;
    return (float *)kv + off * kvd;
}

/* Stored row (page, layer, which, row) as bytes, whatever the geometry's kv_type. */
static inline uint8_t *seer_cpu_kv_qrow(const void *kv, const seer_kv_geom *g, int page, int layer,
                                        int which, int row) {
    return (uint8_t *)kv + seer_kv_geom_row_off(g, sizeof(float), page, layer, which, row);
}

/* The quantised copy of a KV storage (kv/kv_quant.h layout), NULL when its geometry has
 * kv_bits 0. */
uint8_t *seer_cpu_kv_qdata(const void *kv);

/* The communicator of CPU ranks (cpu_comm.c). */
seer_status seer_cpu_comm_init(seer_backend *const *ranks, int n, seer_comm **out);
seer_status seer_cpu_matmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                            const float *bias, int T);
/* cpu_qmatmul.c: the same product with w in one of the block formats below. */
seer_status seer_cpu_ffn_act_stats(seer_backend *be, float *stats, const float *g, int T, int F,
                                   float *tmp);
seer_status seer_cpu_weight_gather(seer_backend *be, const seer_weight *w, const int32_t *idx, int n, bool cols,
                                   seer_weight *out);
seer_status seer_cpu_ffn_act_hist(seer_backend *be, double *hist, float *g, const float *h, const seer_weight *gate,
                                  int T, int F);
seer_status seer_cpu_weight_transpose(seer_backend *be, const seer_weight *w, seer_weight *out);
seer_status seer_cpu_ffn_cats(seer_backend *be, float *x, float *a, const float *h, const seer_weight *gate,
                              const seer_weight *up, const seer_weight *down_t, float thr, int T);
seer_status seer_cpu_weight_quantize(seer_backend *be, const seer_weight *w, int dtype, seer_weight *out);
bool seer_cpu_qtype_supported(int type);
seer_status seer_cpu_qmatmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                             const float *bias, int T);
seer_status seer_cpu_attention(seer_backend *be, float *out, const float *q, const void *kv,
                               const seer_kv_geom *g, int layer, const seer_attn_batch *ab);
/* cpu_attention_tile.c: how many of sequence b's leading new tokens go through the tiled path
 * (its prompt tokens, seer_attn_batch.seq_prompt, under a full view; without seq_prompt, all
 * of a run longer than SEER_INVARIANT_NEW_TOKENS with no mask; 0: none), and that path for
 * the leading tiled[b] new tokens of each sequence b ([n_seq]). */
int seer_cpu_attn_tileable(const seer_attn_batch *ab, int b);
seer_status seer_cpu_attention_tiles(seer_backend *be, float *out, const float *q, const void *kv,
                                     const seer_kv_geom *g, int layer, const seer_attn_batch *ab,
                                     const int32_t *tiled);

#endif
