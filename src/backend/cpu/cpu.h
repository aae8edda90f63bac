/* cpu.h: internals shared by the CPU backend's files. */
#ifndef SEER_BACKEND_CPU_H
#define SEER_BACKEND_CPU_H

#include "backend/backend.h"

typedef struct {
    int n_threads;
    void *smp;       /* sample_rows / accept_chains scratch, grow-only */
    size_t smp_cap;  /* bytes */
} seer_cpu;

static inline int seer_cpu_threads(const seer_backend *be) {
    return ((const seer_cpu *)be->impl)->n_threads;
}

/* KV storage layout: [n_pages][n_layers][2][page_size][Hkv*Dh] floats. */
static inline float *seer_cpu_kv_row(const void *kv, const seer_kv_geom *g, int page, int layer,
                                     int which, int row) {
    size_t kvd = (size_t)g->n_kv_heads * g->head_dim;
    size_t off = (((size_t)page * g->n_layers + layer) * 2 + which) * g->page_size + row;
    return (float *)kv + off * kvd;
}

seer_status seer_cpu_matmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                            const float *bias, int T);
seer_status seer_cpu_attention(seer_backend *be, float *out, const float *q, const void *kv,
                               const seer_kv_geom *g, int layer, const seer_attn_batch *ab);

#endif
