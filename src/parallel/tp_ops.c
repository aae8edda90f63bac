/*
 * tp_ops.c: the tensor-parallel backend's compute ops. Each runs the ranks' op over their
 * parts (Megatron-LM's division, Shoeybi et al. 2019): q, k, v, gate and up by output rows
 * (heads, FFN columns), o and down by input columns followed by an all-reduce, the LM head by
 * vocabulary. Norms, the embedding and the residual stream are computed whole on every rank,
 * except the per-head q/k norms (Qwen3, Gemma 3), which each rank runs on its own heads.
 * Sampling and acceptance run on rank 0 over whole rows; a greedy argmax over divided logits
 * moves one id and one maximum per row and rank.
 * Not for: memory, weights and KV storage (tp_backend.c).
 */
#include "parallel/tp_internal.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RANK(t, r) ((t)->rank[r])
#define ROPS(t, r) ((t)->rank[r]->ops)
#define P(t, p, r) ((float *)seer_tp_ptr((t), (p), (r)))

static tp_state state_of(tp_be *t, const void *p, tp_alloc *a) {
    return seer_tp_lookup(t, p, a) ? a->state : TP_REPL;
}

/* The part of tw rank r holds as rows of the output (col0, width) for a tagged output. */
static void part_cols(const tp_be *t, const tp_weight *tw, int seg, int div, int *col0, int *w) {
    for (int r = 0; r < t->n; r++) {
        const seer_weight *p = &tw->part[r];
        col0[r] = p->n_seg ? tw->seg_r0[seg][r] : tw->r0[r];
        w[r] = (p->n_seg ? p->seg_rows[seg] : p->rows) / div;
    }
}

static seer_status tp_embed(seer_backend *be, float *y, const seer_weight *emb, const int32_t *tokens, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = emb->data;
    if (tw->split.kind != SEER_SPLIT_NONE)
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor parallelism: a divided embedding");
    for (int r = 0; r < t->n; r++) {
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->embed(RANK(t, r), P(t, y, r), &tw->part[r], tokens, T));
    }
    seer_tp_set_repl(t, y);
    return SEER_OK;
}

/* The per-head norms of Qwen3 and Gemma 3 (qk_norm): q or k divided by heads, normalised as
 * T rows of D = Dh, each rank its own heads' rows. Any other norm of a divided tensor would
 * need the whole row. */
static seer_status rmsnorm_heads(tp_be *t, float *y, const float *x, const float *w, int T, int D, float eps,
                                 const tp_alloc *a) {
    bool heads = D > 0 && a->full_w % D == 0 && (long long)T == (long long)a->rows * (a->full_w / D);
    for (int r = 0; heads && r < t->n; r++)
        heads = a->w[r] % D == 0 && a->col0[r] % D == 0;
    if (!heads)
        return seer_err(SEER_ERR_INTERNAL, "tensor parallelism: rmsnorm of a divided tensor across its parts");
    for (int r = 0; r < t->n; r++) {
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->rmsnorm(RANK(t, r), P(t, y, r), P(t, x, r), P(t, w, r), a->rows * (a->w[r] / D), D,
                                     eps));
    }
    if (y != x)
        seer_tp_set_shard(t, y, a->rows, a->full_w, a->col0, a->w);
    return SEER_OK;
}

static seer_status tp_rmsnorm(seer_backend *be, float *y, const float *x, const float *w, int T, int D, float eps) {
    tp_be *t = tp_of(be);
    tp_alloc a;
    const tp_state st = state_of(t, x, &a);
    if (st == TP_SHARD)
        return rmsnorm_heads(t, y, x, w, T, D, eps, &a);
    const int n = st == TP_ROOT ? 1 : t->n;
    for (int r = 0; r < n; r++) {
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->rmsnorm(RANK(t, r), P(t, y, r), P(t, x, r), P(t, w, r), T, D, eps));
    }
    if (st == TP_ROOT)
        seer_tp_set_root(t, y);
    else
        seer_tp_set_repl(t, y);
    return SEER_OK;
}

static seer_status tp_matmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                             const float *bias, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = w->data;
    const seer_split_kind k = tw->split.kind;
    for (int r = 0; r < t->n; r++) {
        const float *b = NULL;
        if (bias && (k != SEER_SPLIT_COLS || r == 0)) /* a partial sum takes the bias once */
            b = P(t, bias, r) + (k == SEER_SPLIT_ROWS || k == SEER_SPLIT_VOCAB ? tw->r0[r] : 0);
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->matmul(RANK(t, r), P(t, y, r), P(t, x, r), &tw->part[r], b, T));
    }
    if (k == SEER_SPLIT_COLS)
        return seer_tp_all_reduce(t, y, T, w->rows);
    if (k == SEER_SPLIT_NONE) {
        seer_tp_set_repl(t, y);
        return SEER_OK;
    }
    int col0[SEER_TP_MAX], wd[SEER_TP_MAX];
    part_cols(t, tw, 0, 1, col0, wd);
    if (k == SEER_SPLIT_VOCAB)
        seer_tp_set_vocab(t, y, T, w->rows, col0, wd);
    else
        seer_tp_set_shard(t, y, T, w->rows, col0, wd);
    return SEER_OK;
}

static seer_status tp_matmul_add(seer_backend *be, float *y, const float *x, const seer_weight *w, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = w->data;
    if (tw->split.kind != SEER_SPLIT_COLS) {
        for (int r = 0; r < t->n; r++) {
            SEER_TRY(seer_tp_bind(t, r));
            SEER_TRY(ROPS(t, r)->matmul_add(RANK(t, r), P(t, y, r), P(t, x, r), &tw->part[r], T));
        }
        seer_tp_set_repl(t, y);
        return SEER_OK;
    }
    /* rank 0 adds its partial product to y; the others overwrite theirs with it, and the sum
     * across ranks is y plus every partial */
    for (int r = 0; r < t->n; r++) {
        SEER_TRY(seer_tp_bind(t, r));
        if (r == 0)
            SEER_TRY(ROPS(t, r)->matmul_add(RANK(t, r), y, x, &tw->part[r], T));
        else
            SEER_TRY(ROPS(t, r)->matmul(RANK(t, r), P(t, y, r), P(t, x, r), &tw->part[r], NULL, T));
    }
    return seer_tp_all_reduce(t, y, T, w->rows);
}

static void split_outputs(tp_be *t, float *const *ys, const tp_weight *tw, const seer_weight *w,
                          const float *const *biases, int r, float **ys_r, const float **bs_r) {
    const int nseg = w->n_seg ? w->n_seg : 1;
    for (int j = 0; j < nseg; j++) {
        ys_r[j] = P(t, ys[j], r);
        bs_r[j] = biases && biases[j] ? P(t, biases[j], r) + (w->n_seg ? tw->seg_r0[j][r] : tw->r0[r]) : NULL;
    }
}

static void tag_outputs(tp_be *t, float *const *ys, const tp_weight *tw, const seer_weight *w, int T) {
    const int nseg = w->n_seg ? w->n_seg : 1;
    for (int j = 0; j < nseg; j++) {
        if (tw->split.kind == SEER_SPLIT_NONE) {
            seer_tp_set_repl(t, ys[j]);
            continue;
        }
        int col0[SEER_TP_MAX], wd[SEER_TP_MAX];
        part_cols(t, tw, j, 1, col0, wd);
        seer_tp_set_shard(t, ys[j], T, w->n_seg ? w->seg_rows[j] : w->rows, col0, wd);
    }
}

static seer_status tp_matmul_split(seer_backend *be, float *const *ys, const float *x, const seer_weight *w,
                                   const float *const *biases, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = w->data;
    for (int r = 0; r < t->n; r++) {
        float *ys_r[SEER_WEIGHT_MAX_SEG];
        const float *bs_r[SEER_WEIGHT_MAX_SEG];
        split_outputs(t, ys, tw, w, biases, r, ys_r, bs_r);
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->matmul_split(RANK(t, r), ys_r, P(t, x, r), &tw->part[r], biases ? bs_r : NULL, T));
    }
    tag_outputs(t, ys, tw, w, T);
    return SEER_OK;
}

static seer_status tp_norm_matmul_split(seer_backend *be, float *const *ys, float *h, const float *x,
                                        const float *w_norm, float eps, const seer_weight *w,
                                        const float *const *biases, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = w->data;
    for (int r = 0; r < t->n; r++) {
        float *ys_r[SEER_WEIGHT_MAX_SEG];
        const float *bs_r[SEER_WEIGHT_MAX_SEG];
        split_outputs(t, ys, tw, w, biases, r, ys_r, bs_r);
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->norm_matmul_split(RANK(t, r), ys_r, P(t, h, r), P(t, x, r), P(t, w_norm, r),
                                               eps, &tw->part[r], biases ? bs_r : NULL, T));
    }
    seer_tp_set_repl(t, h);
    tag_outputs(t, ys, tw, w, T);
    return SEER_OK;
}

static seer_status tp_matmul_glu(seer_backend *be, float *y, const float *x, const seer_weight *w, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = w->data;
    for (int r = 0; r < t->n; r++) {
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->matmul_glu(RANK(t, r), P(t, y, r), P(t, x, r), &tw->part[r], T));
    }
    if (tw->split.kind == SEER_SPLIT_NONE) {
        seer_tp_set_repl(t, y);
        return SEER_OK;
    }
    int col0[SEER_TP_MAX], wd[SEER_TP_MAX];
    part_cols(t, tw, 0, 2, col0, wd);
    /* the joined weight's first segment is the gate: its rows are the output's columns */
    for (int r = 0; r < t->n; r++)
        col0[r] = tw->seg_r0[0][r];
    seer_tp_set_shard(t, y, T, w->rows / 2, col0, wd);
    return SEER_OK;
}

static seer_status tp_ffn_glu(seer_backend *be, float *x, float *h, const float *w_norm, float eps,
                              const seer_weight *wgu, const seer_weight *wdown, float *g, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *gu = wgu->data, *dn = wdown->data;
    if (dn->split.kind != SEER_SPLIT_COLS || t->n == 1) {
        for (int r = 0; r < t->n; r++) {
            SEER_TRY(seer_tp_bind(t, r));
            SEER_TRY(ROPS(t, r)->ffn_glu(RANK(t, r), P(t, x, r), P(t, h, r), P(t, w_norm, r), eps,
                                         &gu->part[r], &dn->part[r], P(t, g, r), T));
        }
        if (dn->split.kind == SEER_SPLIT_COLS)
            return seer_tp_all_reduce(t, x, T, wdown->rows); /* one rank: through the communicator still */
        seer_tp_set_repl(t, x);
        return SEER_OK;
    }
    /* rank 0 adds its partial to x in the fused op; the others write theirs over x once they
     * have read it, and the all-reduce makes x plus every partial */
    const int D = wgu->cols;
    for (int r = 0; r < t->n; r++) {
        seer_backend *b = RANK(t, r);
        SEER_TRY(seer_tp_bind(t, r));
        if (r == 0) {
            SEER_TRY(b->ops->ffn_glu(b, x, h, w_norm, eps, &gu->part[0], &dn->part[0], g, T));
            continue;
        }
        float *xr = P(t, x, r), *hr = P(t, h, r), *gr = P(t, g, r);
        SEER_TRY(b->ops->rmsnorm(b, hr, xr, P(t, w_norm, r), T, D, eps));
        SEER_TRY(b->ops->matmul_glu(b, gr, hr, &gu->part[r], T));
        SEER_TRY(b->ops->matmul(b, xr, gr, &dn->part[r], NULL, T));
    }
    return seer_tp_all_reduce(t, x, T, wdown->rows);
}

/* Local heads of a tensor of n_heads heads of Dh on rank r: its part's width where divided. */
static int local_heads(tp_be *t, const void *p, int n_heads, int Dh, int r) {
    tp_alloc a;
    return state_of(t, p, &a) == TP_SHARD ? a.w[r] / Dh : n_heads;
}

static seer_status tp_rope(seer_backend *be, float *x, const int32_t *pos, int T, int n_heads, int Dh,
                           const float *inv_freq, int neox) {
    tp_be *t = tp_of(be);
    for (int r = 0; r < t->n; r++) {
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->rope(RANK(t, r), P(t, x, r), pos, T, local_heads(t, x, n_heads, Dh, r), Dh,
                                  P(t, inv_freq, r), neox));
    }
    return SEER_OK;
}

static seer_status tp_rope_kv_store(seer_backend *be, float *q, float *k, const float *v, const int32_t *pos,
                                    int T, int H, int Hkv, int Dh, const float *inv_freq, int neox, void *kv,
                                    const seer_kv_geom *g, int layer, const int32_t *page, const int32_t *row) {
    tp_be *t = tp_of(be);
    tp_kv *tk = kv;
    for (int r = 0; r < t->n; r++) {
        const seer_kv_geom l = seer_tp_geom(t, g, r);
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->rope_kv_store(RANK(t, r), P(t, q, r), P(t, k, r), P(t, v, r), pos, T,
                                           local_heads(t, q, H, Dh, r), l.n_kv_heads, Dh, P(t, inv_freq, r),
                                           neox, tk->kv[r], &l, layer, page, row));
    }
    return SEER_OK;
}

static seer_status tp_attention(seer_backend *be, float *out, const float *q, const void *kv,
                                const seer_kv_geom *g, int layer, const seer_attn_batch *ab) {
    tp_be *t = tp_of(be);
    const tp_kv *tk = kv;
    SEER_TRY(seer_tp_batch(t, ab));
    int col0[SEER_TP_MAX], w[SEER_TP_MAX];
    for (int r = 0; r < t->n; r++) {
        const seer_kv_geom l = seer_tp_geom(t, g, r);
        int h0, nh;
        seer_tp_units(ab->n_heads, t->n, r, &h0, &nh);
        col0[r] = h0 * ab->head_dim;
        w[r] = nh * ab->head_dim;
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->attention(RANK(t, r), P(t, out, r), P(t, q, r), tk->kv[r], &l, layer, &t->ab_r[r]));
    }
    seer_tp_set_shard(t, out, ab->T, ab->n_heads * ab->head_dim, col0, w);
    return SEER_OK;
}

/* An elementwise op over n elements (v: its constant, where it has one), held as key is: on
 * every rank (whole or divided alike, n scaled to the part), or on rank 0 alone when only it
 * holds key. */
typedef seer_status (*elem_fn)(seer_backend *b, float *y, const float *a, const float *c, size_t n, float v);

static seer_status elementwise(tp_be *t, const void *key, float *y, const float *a, const float *c,
                               size_t n, float v, elem_fn f) {
    tp_alloc al;
    const tp_state st = state_of(t, key, &al);
    const int nr = st == TP_ROOT ? 1 : t->n;
    if (st == TP_SHARD && n % (size_t)al.full_w)
        return seer_err(SEER_ERR_INTERNAL, "tensor parallelism: an elementwise op over part of a divided row");
    for (int r = 0; r < nr; r++) {
        const size_t nl = st == TP_SHARD ? n / (size_t)al.full_w * (size_t)al.w[r] : n;
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(f(RANK(t, r), P(t, y, r), P(t, a, r), P(t, c, r), nl, v));
    }
    if (st == TP_SHARD)
        (al.vocab ? seer_tp_set_vocab : seer_tp_set_shard)(t, y, (int)(n / (size_t)al.full_w), al.full_w, al.col0,
                                                             al.w);
    else if (st == TP_ROOT)
        seer_tp_set_root(t, y);
    else
        seer_tp_set_repl(t, y);
    return SEER_OK;
}

static seer_status swiglu_fn(seer_backend *b, float *y, const float *g, const float *u, size_t n, float unused) {
    return b->ops->swiglu(b, y, g, u, n);
}

static seer_status add_fn(seer_backend *b, float *y, const float *x, const float *unused, size_t n, float v) {
    return b->ops->add(b, y, x, n);
}

static seer_status tp_swiglu(seer_backend *be, float *y, const float *g, const float *u, size_t n) {
    return elementwise(tp_of(be), g, y, g, u, n, 0.f, swiglu_fn);
}

static seer_status geglu_fn(seer_backend *b, float *y, const float *g, const float *u, size_t n, float unused) {
    return b->ops->geglu(b, y, g, u, n);
}

static seer_status tp_geglu(seer_backend *be, float *y, const float *g, const float *u, size_t n) {
    return elementwise(tp_of(be), g, y, g, u, n, 0.f, geglu_fn);
}

static seer_status scale_fn(seer_backend *b, float *y, const float *unused0, const float *unused1, size_t n,
                            float v) {
    return b->ops->scale(b, y, v, n);
}

static seer_status softcap_fn(seer_backend *b, float *y, const float *unused0, const float *unused1, size_t n,
                              float v) {
    return b->ops->softcap(b, y, v, n);
}

/* x [n] in place by a constant (scale: x * s; softcap: s tanh(x / s)), wherever x is held. */
static seer_status tp_scale(seer_backend *be, float *x, float s, size_t n) {
    return elementwise(tp_of(be), x, x, NULL, NULL, n, s, scale_fn);
}

static seer_status tp_softcap(seer_backend *be, float *x, float c, size_t n) {
    return elementwise(tp_of(be), x, x, NULL, NULL, n, c, softcap_fn);
}

static seer_status tp_add(seer_backend *be, float *y, const float *x, size_t n) {
    tp_be *t = tp_of(be);
    tp_alloc a;
    /* y += x runs where the more narrowly held of the two is */
    const void *key = state_of(t, y, &a) != TP_REPL ? (const void *)y : (const void *)x;
    return elementwise(t, key, y, x, NULL, n, 0.f, add_fn);
}

static seer_status tp_gather_rows(seer_backend *be, float *y, const float *x, const int32_t *rows, int n_rows,
                                  int D) {
    tp_be *t = tp_of(be);
    tp_alloc a;
    const tp_state st = state_of(t, x, &a);
    if (st == TP_SHARD && D != a.full_w)
        SEER_TRY(seer_tp_make_root(t, x));
    const tp_state s2 = state_of(t, x, &a);
    const int nr = s2 == TP_ROOT ? 1 : t->n;
    for (int r = 0; r < nr; r++) {
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(ROPS(t, r)->gather_rows(RANK(t, r), P(t, y, r), P(t, x, r), rows, n_rows,
                                         s2 == TP_SHARD ? a.w[r] : D));
    }
    if (s2 == TP_SHARD)
        (a.vocab ? seer_tp_set_vocab : seer_tp_set_shard)(t, y, n_rows, a.full_w, a.col0, a.w);
    else if (s2 == TP_ROOT)
        seer_tp_set_root(t, y);
    else
        seer_tp_set_repl(t, y);
    return SEER_OK;
}

/* Greedy decoding over logits divided by vocabulary: each rank's argmax and its value, then
 * the best across ranks, ties to the lowest id (rank order is id order), NaN never winning. */
static seer_status argmax_divided(tp_be *t, int32_t *ids, const float *logits, int n, const tp_alloc *a) {
    if (n > t->amax_cap) {
        for (int r = 0; r < t->n; r++)
            if (t->amax[r]) {
                SEER_TRY(seer_tp_bind(t, r));
                ROPS(t, r)->dealloc(RANK(t, r), t->amax[r]);
                t->amax[r] = NULL;
            }
        t->amax_cap = 0;
        int32_t *nr = realloc(t->amax_rows, (size_t)n * sizeof *nr);
        if (!nr)
            return seer_err(SEER_ERR_OOM, "out of memory");
        t->amax_rows = nr;
        for (int r = 0; r < t->n; r++) {
            SEER_TRY(seer_tp_bind(t, r));
            SEER_TRY(ROPS(t, r)->alloc(RANK(t, r), (size_t)n * sizeof(float), (void **)&t->amax[r]));
        }
        t->amax_cap = n;
    }
    int32_t *lid = seer_malloc_array((size_t)n, sizeof *lid);
    float *val = seer_malloc_array((size_t)n, sizeof *val), *best = seer_malloc_array((size_t)n, sizeof *best);
    seer_status s = lid && val && best ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
    for (int r = 0; r < t->n && s == SEER_OK; r++) {
        seer_backend *b = RANK(t, r);
        const float *lr = P(t, logits, r);
        s = seer_tp_bind(t, r);
        if (s == SEER_OK)
            s = b->ops->argmax_rows(b, lid, lr, n, a->w[r]);
        /* the maxima: element lid[i] of row i of the part, gathered as rows of one float */
        for (int i = 0; i < n && s == SEER_OK; i++)
            t->amax_rows[i] = i * a->w[r] + lid[i];
        if (s == SEER_OK)
            s = b->ops->gather_rows(b, t->amax[r], lr, t->amax_rows, n, 1);
        if (s == SEER_OK)
            s = b->ops->download(b, val, t->amax[r], (size_t)n * sizeof(float));
        for (int i = 0; i < n && s == SEER_OK; i++)
            if (r == 0 || (!isnan(val[i]) && (isnan(best[i]) || val[i] > best[i]))) {
                ids[i] = a->col0[r] + lid[i];
                best[i] = val[i];
            }
    }
    free(lid);
    free(val);
    free(best);
    return s;
}

static seer_status tp_argmax_rows(seer_backend *be, int32_t *ids, const float *logits, int n, int V) {
    tp_be *t = tp_of(be);
    tp_alloc a;
    if (state_of(t, logits, &a) == TP_SHARD && a.full_w == V &&
        (size_t)((const char *)logits - a.base0) / sizeof(float) == a.off)
        return argmax_divided(t, ids, logits, n, &a);
    SEER_TRY(seer_tp_make_root(t, logits));
    SEER_TRY(seer_tp_bind(t, 0));
    return ROPS(t, 0)->argmax_rows(RANK(t, 0), ids, logits, n, V);
}

static seer_status tp_sample_rows(seer_backend *be, const seer_sample_row *rows, int n, int V, int32_t *ids) {
    tp_be *t = tp_of(be);
    for (int i = 0; i < n; i++)
        SEER_TRY(seer_tp_make_root(t, rows[i].logits));
    SEER_TRY(seer_tp_bind(t, 0));
    SEER_TRY(ROPS(t, 0)->sample_rows(RANK(t, 0), rows, n, V, ids));
    for (int i = 0; i < n; i++)
        if (rows[i].probs)
            seer_tp_set_root(t, rows[i].probs);
    return SEER_OK;
}

static seer_status tp_logprob_rows(seer_backend *be, const seer_logprob_row *rows, int n, int V, int k, float *lp,
                                   int32_t *top_id, float *top_lp) {
    tp_be *t = tp_of(be);
    for (int i = 0; i < n; i++)
        SEER_TRY(seer_tp_make_root(t, rows[i].logits));
    SEER_TRY(seer_tp_bind(t, 0));
    return ROPS(t, 0)->logprob_rows(RANK(t, 0), rows, n, V, k, lp, top_id, top_lp);
}

static seer_status tp_accept_chains(seer_backend *be, const seer_accept_chain *chains, int n, int V,
                                    int32_t *n_acc, int32_t *next) {
    tp_be *t = tp_of(be);
    for (int i = 0; i < n; i++) {
        SEER_TRY(seer_tp_make_root(t, chains[i].p));
        SEER_TRY(seer_tp_make_root(t, chains[i].q));
    }
    SEER_TRY(seer_tp_bind(t, 0));
    return ROPS(t, 0)->accept_chains(RANK(t, 0), chains, n, V, n_acc, next);
}

static seer_status tp_accept_trees(seer_backend *be, const seer_accept_tree *trees, int n, int V, int stride,
                                   int32_t *n_acc, int32_t *path, int32_t *next, int32_t *n_u) {
    tp_be *t = tp_of(be);
    for (int i = 0; i < n; i++) {
        SEER_TRY(seer_tp_make_root(t, trees[i].p));
        SEER_TRY(seer_tp_make_root(t, trees[i].q));
    }
    SEER_TRY(seer_tp_bind(t, 0));
    return ROPS(t, 0)->accept_trees(RANK(t, 0), trees, n, V, stride, n_acc, path, next, n_u);
}

void seer_tp_fill_compute_ops(seer_backend_ops *o, const seer_backend_ops *in, int n) {
    o->embed = tp_embed;
    o->rmsnorm = tp_rmsnorm;
    o->matmul = tp_matmul;
    o->rope = tp_rope;
    o->attention = tp_attention;
    o->swiglu = tp_swiglu;
    o->add = tp_add;
    o->gather_rows = tp_gather_rows;
    o->argmax_rows = tp_argmax_rows;
    o->sample_rows = tp_sample_rows;
    o->accept_chains = tp_accept_chains;
    o->logprob_rows = in->logprob_rows ? tp_logprob_rows : NULL;
    o->accept_trees = in->accept_trees ? tp_accept_trees : NULL;
    o->matmul_split = in->matmul_split ? tp_matmul_split : NULL;
    o->matmul_add = in->matmul_add ? tp_matmul_add : NULL;
    o->matmul_glu = in->matmul_glu ? tp_matmul_glu : NULL;
    o->norm_matmul_split = in->norm_matmul_split ? tp_norm_matmul_split : NULL;
    o->ffn_glu = in->ffn_glu && in->matmul_glu && in->rmsnorm ? tp_ffn_glu : NULL;
    o->rope_kv_store = in->rope_kv_store ? tp_rope_kv_store : NULL;
    /* the newer families' blocks: elementwise on whatever each rank holds, the per-head norms
     * on each rank's heads, windows and soft-capping inside each rank's attention */
    o->scale = in->scale ? tp_scale : NULL;
    o->geglu = in->geglu ? tp_geglu : NULL;
    o->softcap = in->softcap ? tp_softcap : NULL;
    o->qk_norm = in->qk_norm;
    o->attn_window = in->attn_window;
    o->attn_softcap = in->attn_softcap;
}
