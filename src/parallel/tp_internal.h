/*
 * tp_internal.h: what tp_backend.c (instances, memory, weights, KV) and tp_ops.c (the
 * compute ops) share.
 *
 * Memory: every allocation exists on every rank with the same size. The caller holds rank
 * 0's pointer; an interval table maps any pointer into an allocation to the same offset in
 * another rank's copy. Each allocation also records what its copies hold:
 *   REPL  every rank holds the same values (activations of dimension D, norms, biases);
 *   SHARD rows of a wider tensor [rows][full_w], rank r holding columns
 *         [col0[r], col0[r] + w[r]) as [rows][w[r]] from element off (q, attention output,
 *         the FFN's hidden activations, logits divided by vocabulary);
 *   ROOT  only rank 0's copy is current (what sampling wrote).
 */
#ifndef SEER_PARALLEL_TP_INTERNAL_H
#define SEER_PARALLEL_TP_INTERNAL_H

#include "parallel/comm.h"
#include "parallel/tp.h"

#include <pthread.h>

typedef enum { TP_REPL = 0, TP_SHARD, TP_ROOT } tp_state;

typedef struct {
    char *base0; /* rank 0's copy: the key */
    size_t bytes;
    char *base[SEER_TP_MAX];
    tp_state state;
    /* SHARD */
    size_t off;  /* element where row 0 starts */
    int rows, full_w;
    int col0[SEER_TP_MAX], w[SEER_TP_MAX];
    bool vocab;  /* logits: may be gathered whole into rank 0's copy (nothing reads the parts
                  * after) */
} tp_alloc;

/* The allocation table, shared by a model's instance and its contexts' clones. */
typedef struct {
    pthread_mutex_t mu;
    int refs;
    tp_alloc *a; /* sorted by base0 */
    int n_a, cap;
} tp_shared;

/* A weight as the tensor-parallel backend holds it (seer_weight.data). */
typedef struct {
    seer_weight_split split;
    seer_weight part[SEER_TP_MAX];
    int r0[SEER_TP_MAX], nr[SEER_TP_MAX]; /* rows (ROWS, VOCAB) or columns (COLS) of the undivided weight */
    int seg_r0[SEER_WEIGHT_MAX_SEG][SEER_TP_MAX]; /* a concatenation: each segment's first row */
    void *host[SEER_TP_MAX]; /* column copies a rank's part may point into */
    bool borrowed[SEER_TP_MAX]; /* the part is another weight's (draft weights it could not
                                 * quantise): not freed with this one */
} tp_weight;

/* The KV storage: one per rank, each over the rank's key/value heads. */
typedef struct {
    void *kv[SEER_TP_MAX];
} tp_kv;

typedef struct tp_workers tp_workers;

typedef struct {
    int n;
    seer_backend *rank[SEER_TP_MAX];
    tp_workers *workers; /* ranks 1 .. n-1's threads (tp_worker.c); NULL for one rank */
    bool owns_ranks;
    bool remote;             /* ranks in other processes (tp_remote.h) */
    seer_backend_ops in_ops; /* with remote ranks: the ops every rank can run */
    seer_backend_ops ops;
    char name[48];
    tp_shared *sh;
    seer_comm *comm;
    /* the per-rank attention batches of the current forward call (batch_begin) */
    const seer_attn_batch *ab_key;
    seer_attn_batch ab_r[SEER_TP_MAX];
    const seer_attn_view **seq_view_r[SEER_TP_MAX];
    seer_attn_view *views_r[SEER_TP_MAX];
    int32_t *view_idx_r[SEER_TP_MAX];
    /* argmax_rows' per-rank maxima */
    float *amax[SEER_TP_MAX];
    int amax_cap;
    int32_t *amax_rows;
} tp_be;

static inline tp_be *tp_of(seer_backend *be) { return (tp_be *)be->impl; }

/* Rank r's part of a step, run on rank r's thread: its ops, its collectives. */
typedef seer_status (*tp_rank_fn)(tp_be *t, int r, void *ctx);
/* Runs fn(t, r, ctx) for every rank, each on its rank's thread (rank 0 on the caller's), and
 * returns when all have returned: the first failure in rank order, with its rank's message.
 * fn must not call seer_tp_each itself. */
seer_status seer_tp_each(tp_be *t, tp_rank_fn fn, void *ctx);
/* The worker threads of t's ranks 1 .. n-1 (*out NULL for one rank); freed with _free. */
seer_status seer_tp_workers_init(tp_be *t, tp_workers **out);
void seer_tp_workers_free(tp_workers *w);

/* Makes rank r's device current on the calling thread. */
seer_status seer_tp_bind(tp_be *t, int r);
/* p (rank 0's memory, NULL allowed) as rank r's pointer; NULL for memory the table lacks. */
void *seer_tp_ptr(tp_be *t, const void *p, int r);
/* The allocation holding p, copied out (false: none). */
bool seer_tp_lookup(tp_be *t, const void *p, tp_alloc *out);
void seer_tp_set_repl(tp_be *t, const void *p);
void seer_tp_set_root(tp_be *t, const void *p);
/* p holds rows of [rows][full_w] from its own offset, rank r columns [col0[r], + w[r]); a
 * division that leaves rank 0 everything is REPL. */
void seer_tp_set_shard(tp_be *t, const void *p, int rows, int full_w, const int *col0, const int *w);
/* ... of logits divided by vocabulary */
void seer_tp_set_vocab(tp_be *t, const void *p, int rows, int full_w, const int *col0, const int *w);
/* Makes rank 0's copy of the allocation holding p whole (gathers divided logits; other
 * divided tensors are an error: their parts are still to be read). */
seer_status seer_tp_make_root(tp_be *t, const void *p);
/* The ranks' communicator, made on first use. */
seer_status seer_tp_comm(tp_be *t, seer_comm **out);
/* Rank r's part of summing p's copies (T rows of width cols) across the ranks, on rank r's
 * thread after prior (the status of rank r's work before it): the collective is entered
 * whatever prior is, so that no rank waits for one that left; returns prior if it failed.
 * The communicator must exist (seer_tp_comm on the caller's thread first). */
seer_status seer_tp_all_reduce_rank(tp_be *t, int r, float *p, int T, int cols, seer_status prior);
/* The per-rank attention batches of ab (built once per batch). */
seer_status seer_tp_batch(tp_be *t, const seer_attn_batch *ab);
/* The KV geometry of rank r: its key/value heads. */
seer_kv_geom seer_tp_geom(const tp_be *t, const seer_kv_geom *g, int r);

/* Forgets the per-rank attention batches. */
void seer_tp_batch_clear(tp_be *t);

/* The op table's parts, from the ranks' table in (ops the ranks lack stay NULL):
 * tp_weights.c, tp_kv.c and tp_ops.c (the compute ops). */
void seer_tp_fill_weight_ops(seer_backend_ops *o, const seer_backend_ops *in);
void seer_tp_fill_kv_ops(seer_backend_ops *o, const seer_backend_ops *in);
void seer_tp_fill_compute_ops(seer_backend_ops *o, const seer_backend_ops *in, int n);

#endif
