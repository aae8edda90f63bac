/*
 * tp_ops.c: the tensor-parallel backend's compute ops. Each runs the ranks' op over their
 * parts (Megatron-LM's division, Shoeybi et al. 2019): q, k, v, gate and up by output rows
 * (heads, FFN columns), o and down by input columns followed by an all-reduce, the LM head by
 * vocabulary. Norms, the embedding and the residual stream are computed whole on every rank,
 * except the per-head q/k norms (Qwen3, Gemma 3), which each rank runs on its own heads.
 * Sampling and acceptance run on rank 0 over whole rows; a greedy argmax over divided logits
 * moves one id and one maximum per row and rank. Each op is a closure (op_job) that every
 * rank runs on its own thread (seer_tp_each), its all-reduce included.
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

typedef seer_status (*elem_fn)(seer_backend *b, float *y, const float *a, const float *c, size_t n, float v);

/* An op's arguments, as rank 0 holds them; each rank maps them to its own copies. */
typedef struct {
    float *y, *h, *g;
    const float *x, *c, *w_norm, *bias, *inv_freq;
    float *const *ys;
    const float *const *biases;
    const seer_weight *w, *w2;
    const int32_t *ids, *pos, *page, *row;
    const void *kv;
    const seer_kv_geom *geom;
    const seer_attn_batch *ab;
    int T, D, H, Hkv, Dh, neox, layer, red_cols; /* red_cols: the all-reduce's row width (0: none) */
    float eps, v;
    size_t n;
    tp_alloc a; /* the division an op follows */
    tp_state st;
    elem_fn f;
} op_job;

/* Runs fn on every rank; an op with red_cols sums y's copies across the ranks after it, on each
 * rank's thread (the communicator made first, on this one). */
static seer_status each(tp_be *t, tp_rank_fn fn, op_job *j) {
    if (j->red_cols) {
        seer_comm *c = NULL;
        SEER_TRY(seer_tp_comm(t, &c));
    }
    return seer_tp_each(t, fn, j);
}

static seer_status reduce(tp_be *t, int r, const op_job *j, seer_status prior) {
    return j->red_cols ? seer_tp_all_reduce_rank(t, r, j->y, j->T, j->red_cols, prior) : prior;
}

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

static seer_status embed_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    const tp_weight *tw = j->w->data;
    SEER_TRY(seer_tp_bind(t, r));
    return ROPS(t, r)->embed(RANK(t, r), P(t, j->y, r), &tw->part[r], j->ids, j->T);
}

static seer_status tp_embed(seer_backend *be, float *y, const seer_weight *emb, const int32_t *tokens, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = emb->data;
    if (tw->split.kind != SEER_SPLIT_NONE)
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor parallelism: a divided embedding");
    op_job j = {.y = y, .w = emb, .ids = tokens, .T = T};
    SEER_TRY(each(t, embed_rank, &j));
    seer_tp_set_repl(t, y);
    return SEER_OK;
}

/* rmsnorm of T rows of D, or with st SHARD of each rank's heads' rows (a.rows * w[r] / D) */
static seer_status rmsnorm_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    if (j->st == TP_ROOT && r > 0)
        return SEER_OK;
    const int T = j->st == TP_SHARD ? j->a.rows * (j->a.w[r] / j->D) : j->T;
    SEER_TRY(seer_tp_bind(t, r));
    return ROPS(t, r)->rmsnorm(RANK(t, r), P(t, j->y, r), P(t, j->x, r), P(t, j->w_norm, r), T, j->D, j->eps);
}

/* The per-head norms of Qwen3 and Gemma 3 (qk_norm): q or k divided by heads, normalised as
 * T rows of D = Dh, each rank its own heads' rows. Any other norm of a divided tensor would
 * need the whole row. */
static bool norm_of_heads(const tp_be *t, int T, int D, const tp_alloc *a) {
    bool heads = D > 0 && a->full_w % D == 0 && (long long)T == (long long)a->rows * (a->full_w / D);
    for (int r = 0; heads && r < t->n; r++)
        heads = a->w[r] % D == 0 && a->col0[r] % D == 0;
    return heads;
}

static seer_status tp_rmsnorm(seer_backend *be, float *y, const float *x, const float *w, int T, int D, float eps) {
    tp_be *t = tp_of(be);
    op_job j = {.y = y, .x = x, .w_norm = w, .T = T, .D = D, .eps = eps};
    j.st = state_of(t, x, &j.a);
    if (j.st == TP_SHARD && !norm_of_heads(t, T, D, &j.a))
        return seer_err(SEER_ERR_INTERNAL, "tensor parallelism: rmsnorm of a divided tensor across its parts");
    SEER_TRY(each(t, rmsnorm_rank, &j));
    if (j.st == TP_SHARD) {
        if (y != x)
            seer_tp_set_shard(t, y, j.a.rows, j.a.full_w, j.a.col0, j.a.w);
    } else if (j.st == TP_ROOT) {
        seer_tp_set_root(t, y);
    } else {
        seer_tp_set_repl(t, y);
    }
    return SEER_OK;
}

static seer_status matmul_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    const tp_weight *tw = j->w->data;
    const seer_split_kind k = tw->split.kind;
    const float *b = NULL;
    if (j->bias && (k != SEER_SPLIT_COLS || r == 0)) /* a partial sum takes the bias once */
        b = P(t, j->bias, r) + (k == SEER_SPLIT_ROWS || k == SEER_SPLIT_VOCAB ? tw->r0[r] : 0);
    seer_status s = seer_tp_bind(t, r);
    if (s == SEER_OK)
        s = ROPS(t, r)->matmul(RANK(t, r), P(t, j->y, r), P(t, j->x, r), &tw->part[r], b, j->T);
    return reduce(t, r, j, s);
}

static seer_status tp_matmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                             const float *bias, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = w->data;
    const seer_split_kind k = tw->split.kind;
    op_job j = {.y = y, .x = x, .w = w, .bias = bias, .T = T, .red_cols = k == SEER_SPLIT_COLS ? w->rows : 0};
    SEER_TRY(each(t, matmul_rank, &j));
    if (k == SEER_SPLIT_COLS || k == SEER_SPLIT_NONE) {
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

/* Divided by input columns, rank 0 adds its partial product to y; the others overwrite theirs
 * with it, and the sum across ranks is y plus every partial. */
static seer_status matmul_add_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    const tp_weight *tw = j->w->data;
    seer_status s = seer_tp_bind(t, r);
    if (s == SEER_OK && (r == 0 || !j->red_cols))
        s = ROPS(t, r)->matmul_add(RANK(t, r), P(t, j->y, r), P(t, j->x, r), &tw->part[r], j->T);
    else if (s == SEER_OK)
        s = ROPS(t, r)->matmul(RANK(t, r), P(t, j->y, r), P(t, j->x, r), &tw->part[r], NULL, j->T);
    return reduce(t, r, j, s);
}

static seer_status tp_matmul_add(seer_backend *be, float *y, const float *x, const seer_weight *w, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = w->data;
    op_job j = {.y = y, .x = x, .w = w, .T = T, .red_cols = tw->split.kind == SEER_SPLIT_COLS ? w->rows : 0};
    SEER_TRY(each(t, matmul_add_rank, &j));
    seer_tp_set_repl(t, y);
    return SEER_OK;
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

/* matmul_split, or with h set norm_matmul_split */
static seer_status matmul_split_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    const tp_weight *tw = j->w->data;
    float *ys_r[SEER_WEIGHT_MAX_SEG];
    const float *bs_r[SEER_WEIGHT_MAX_SEG];
    split_outputs(t, j->ys, tw, j->w, j->biases, r, ys_r, bs_r);
    SEER_TRY(seer_tp_bind(t, r));
    if (j->h)
        return ROPS(t, r)->norm_matmul_split(RANK(t, r), ys_r, P(t, j->h, r), P(t, j->x, r), P(t, j->w_norm, r),
                                             j->eps, &tw->part[r], j->biases ? bs_r : NULL, j->T);
    return ROPS(t, r)->matmul_split(RANK(t, r), ys_r, P(t, j->x, r), &tw->part[r], j->biases ? bs_r : NULL, j->T);
}

static seer_status tp_matmul_split(seer_backend *be, float *const *ys, const float *x, const seer_weight *w,
                                   const float *const *biases, int T) {
    tp_be *t = tp_of(be);
    op_job j = {.ys = ys, .x = x, .w = w, .biases = biases, .T = T};
    SEER_TRY(each(t, matmul_split_rank, &j));
    tag_outputs(t, ys, w->data, w, T);
    return SEER_OK;
}

static seer_status tp_norm_matmul_split(seer_backend *be, float *const *ys, float *h, const float *x,
                                        const float *w_norm, float eps, const seer_weight *w,
                                        const float *const *biases, int T) {
    tp_be *t = tp_of(be);
    op_job j = {.ys = ys, .h = h, .x = x, .w_norm = w_norm, .eps = eps, .w = w, .biases = biases, .T = T};
    SEER_TRY(each(t, matmul_split_rank, &j));
    seer_tp_set_repl(t, h);
    tag_outputs(t, ys, w->data, w, T);
    return SEER_OK;
}

static seer_status matmul_glu_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    const tp_weight *tw = j->w->data;
    SEER_TRY(seer_tp_bind(t, r));
    return ROPS(t, r)->matmul_glu(RANK(t, r), P(t, j->y, r), P(t, j->x, r), &tw->part[r], j->T);
}

static seer_status tp_matmul_glu(seer_backend *be, float *y, const float *x, const seer_weight *w, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *tw = w->data;
    op_job j = {.y = y, .x = x, .w = w, .T = T};
    SEER_TRY(each(t, matmul_glu_rank, &j));
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

/* With the down projection divided over several ranks, rank 0 adds its partial to x in the
 * fused op; the others write theirs over x once they have read it, and the all-reduce makes x
 * plus every partial. */
static seer_status ffn_glu_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    const tp_weight *gu = j->w->data, *dn = j->w2->data;
    seer_backend *b = RANK(t, r);
    float *xr = P(t, j->y, r), *hr = P(t, j->h, r), *gr = P(t, j->g, r);
    seer_status s = seer_tp_bind(t, r);
    if (s == SEER_OK && (r == 0 || t->n == 1 || dn->split.kind != SEER_SPLIT_COLS)) {
        s = b->ops->ffn_glu(b, xr, hr, P(t, j->w_norm, r), j->eps, &gu->part[r], &dn->part[r], gr, j->T);
    } else if (s == SEER_OK) {
        s = b->ops->rmsnorm(b, hr, xr, P(t, j->w_norm, r), j->T, j->D, j->eps);
        if (s == SEER_OK)
            s = b->ops->matmul_glu(b, gr, hr, &gu->part[r], j->T);
        if (s == SEER_OK)
            s = b->ops->matmul(b, xr, gr, &dn->part[r], NULL, j->T);
    }
    return reduce(t, r, j, s);
}

static seer_status tp_ffn_glu(seer_backend *be, float *x, float *h, const float *w_norm, float eps,
                              const seer_weight *wgu, const seer_weight *wdown, float *g, int T) {
    tp_be *t = tp_of(be);
    const tp_weight *dn = wdown->data;
    /* one rank divided by columns still sums through the communicator */
    op_job j = {.y = x, .h = h, .g = g, .w_norm = w_norm, .eps = eps, .w = wgu, .w2 = wdown, .T = T,
                .D = wgu->cols, .red_cols = dn->split.kind == SEER_SPLIT_COLS ? wdown->rows : 0};
    SEER_TRY(each(t, ffn_glu_rank, &j));
    seer_tp_set_repl(t, x);
    return SEER_OK;
}

/* Local heads of a tensor of n_heads heads of Dh on rank r: its part's width where divided. */
static int local_heads(tp_be *t, const void *p, int n_heads, int Dh, int r) {
    tp_alloc a;
    return state_of(t, p, &a) == TP_SHARD ? a.w[r] / Dh : n_heads;
}

static seer_status rope_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    SEER_TRY(seer_tp_bind(t, r));
    return ROPS(t, r)->rope(RANK(t, r), P(t, j->y, r), j->pos, j->T, local_heads(t, j->y, j->H, j->Dh, r), j->Dh,
                            P(t, j->inv_freq, r), j->neox);
}

static seer_status tp_rope(seer_backend *be, float *x, const int32_t *pos, int T, int n_heads, int Dh,
                           const float *inv_freq, int neox) {
    op_job j = {.y = x, .pos = pos, .T = T, .H = n_heads, .Dh = Dh, .inv_freq = inv_freq, .neox = neox};
    return each(tp_of(be), rope_rank, &j);
}

static seer_status rope_kv_store_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    const tp_kv *tk = j->kv;
    const seer_kv_geom l = seer_tp_geom(t, j->geom, r);
    SEER_TRY(seer_tp_bind(t, r));
    return ROPS(t, r)->rope_kv_store(RANK(t, r), P(t, j->y, r), P(t, j->g, r), P(t, j->x, r), j->pos, j->T,
                                     local_heads(t, j->y, j->H, j->Dh, r), l.n_kv_heads, j->Dh, P(t, j->inv_freq, r),
                                     j->neox, tk->kv[r], &l, j->layer, j->page, j->row);
}

static seer_status tp_rope_kv_store(seer_backend *be, float *q, float *k, const float *v, const int32_t *pos,
                                    int T, int H, int Hkv, int Dh, const float *inv_freq, int neox, void *kv,
                                    const seer_kv_geom *g, int layer, const int32_t *page, const int32_t *row) {
    op_job j = {.y = q, .g = k, .x = v, .pos = pos, .T = T, .H = H, .Hkv = Hkv, .Dh = Dh, .inv_freq = inv_freq,
                .neox = neox, .kv = kv, .geom = g, .layer = layer, .page = page, .row = row};
    return each(tp_of(be), rope_kv_store_rank, &j);
}

static seer_status attention_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    const tp_kv *tk = j->kv;
    const seer_kv_geom l = seer_tp_geom(t, j->geom, r);
    SEER_TRY(seer_tp_bind(t, r));
    return ROPS(t, r)->attention(RANK(t, r), P(t, j->y, r), P(t, j->x, r), tk->kv[r], &l, j->layer, &t->ab_r[r]);
}

static seer_status tp_attention(seer_backend *be, float *out, const float *q, const void *kv,
                                const seer_kv_geom *g, int layer, const seer_attn_batch *ab) {
    tp_be *t = tp_of(be);
    SEER_TRY(seer_tp_batch(t, ab));
    op_job j = {.y = out, .x = q, .kv = kv, .geom = g, .layer = layer};
    SEER_TRY(each(t, attention_rank, &j));
    int col0[SEER_TP_MAX], w[SEER_TP_MAX];
    for (int r = 0; r < t->n; r++) {
        int h0, nh;
        seer_tp_units(ab->n_heads, t->n, r, &h0, &nh);
        col0[r] = h0 * ab->head_dim;
        w[r] = nh * ab->head_dim;
    }
    seer_tp_set_shard(t, out, ab->T, ab->n_heads * ab->head_dim, col0, w);
    return SEER_OK;
}

/* An elementwise op over n elements (v: its constant, where it has one), held as key is: on
 * every rank (whole or divided alike, n scaled to the part), or on rank 0 alone when only it
 * holds key. */
static seer_status elementwise_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    if (j->st == TP_ROOT && r > 0)
        return SEER_OK;
    const size_t nl = j->st == TP_SHARD ? j->n / (size_t)j->a.full_w * (size_t)j->a.w[r] : j->n;
    SEER_TRY(seer_tp_bind(t, r));
    return j->f(RANK(t, r), P(t, j->y, r), P(t, j->x, r), P(t, j->c, r), nl, j->v);
}

static seer_status elementwise(tp_be *t, const void *key, float *y, const float *a, const float *c,
                               size_t n, float v, elem_fn f) {
    op_job j = {.y = y, .x = a, .c = c, .n = n, .v = v, .f = f};
    j.st = state_of(t, key, &j.a);
    const tp_alloc *al = &j.a;
    if (j.st == TP_SHARD && n % (size_t)al->full_w)
        return seer_err(SEER_ERR_INTERNAL, "tensor parallelism: an elementwise op over part of a divided row");
    SEER_TRY(each(t, elementwise_rank, &j));
    if (j.st == TP_SHARD)
        (al->vocab ? seer_tp_set_vocab : seer_tp_set_shard)(t, y, (int)(n / (size_t)al->full_w), al->full_w,
                                                              al->col0, al->w);
    else if (j.st == TP_ROOT)
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

static seer_status gather_rows_rank(tp_be *t, int r, void *ctx) {
    const op_job *j = ctx;
    if (j->st == TP_ROOT && r > 0)
        return SEER_OK;
    SEER_TRY(seer_tp_bind(t, r));
    return ROPS(t, r)->gather_rows(RANK(t, r), P(t, j->y, r), P(t, j->x, r), j->ids, j->T,
                                   j->st == TP_SHARD ? j->a.w[r] : j->D);
}

static seer_status tp_gather_rows(seer_backend *be, float *y, const float *x, const int32_t *rows, int n_rows,
                                  int D) {
    tp_be *t = tp_of(be);
    op_job j = {.y = y, .x = x, .ids = rows, .T = n_rows, .D = D};
    if (state_of(t, x, &j.a) == TP_SHARD && D != j.a.full_w)
        SEER_TRY(seer_tp_make_root(t, x));
    j.st = state_of(t, x, &j.a);
    SEER_TRY(each(t, gather_rows_rank, &j));
    const tp_alloc *a = &j.a;
    if (j.st == TP_SHARD)
        (a->vocab ? seer_tp_set_vocab : seer_tp_set_shard)(t, y, n_rows, a->full_w, a->col0, a->w);
    else if (j.st == TP_ROOT)
        seer_tp_set_root(t, y);
    else
        seer_tp_set_repl(t, y);
    return SEER_OK;
}

/* Rank r's argmax over its vocabulary and the maxima themselves (element lid[i] of row i of
 * its part, gathered as rows of one float), into lid and val [n] at rank r's place. */
typedef struct {
    const float *logits;
    int n;
    const tp_alloc *a;
    int32_t *lid; /* [n_ranks][n] */
    float *val;   /* [n_ranks][n] */
} argmax_job;

static seer_status argmax_rank(tp_be *t, int r, void *ctx) {
    const argmax_job *j = ctx;
    seer_backend *b = RANK(t, r);
    const float *lr = P(t, j->logits, r);
    const int n = j->n, w = j->a->w[r];
    int32_t *lid = j->lid + (size_t)r * n, *rows = t->amax_rows + (size_t)r * n;
    SEER_TRY(seer_tp_bind(t, r));
    SEER_TRY(b->ops->argmax_rows(b, lid, lr, n, w));
    for (int i = 0; i < n; i++)
        rows[i] = i * w + lid[i];
    SEER_TRY(b->ops->gather_rows(b, t->amax[r], lr, rows, n, 1));
    return b->ops->download(b, j->val + (size_t)r * n, t->amax[r], (size_t)n * sizeof(float));
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
        int32_t *nr = seer_malloc_array((size_t)n * t->n, sizeof *nr);
        if (!nr)
            return seer_err(SEER_ERR_OOM, "out of memory");
        free(t->amax_rows);
        t->amax_rows = nr;
        for (int r = 0; r < t->n; r++) {
            SEER_TRY(seer_tp_bind(t, r));
            SEER_TRY(ROPS(t, r)->alloc(RANK(t, r), (size_t)n * sizeof(float), (void **)&t->amax[r]));
        }
        t->amax_cap = n;
    }
    argmax_job j = {.logits = logits, .n = n, .a = a};
    j.lid = seer_malloc_array((size_t)n * t->n, sizeof *j.lid);
    j.val = seer_malloc_array((size_t)n * t->n, sizeof *j.val);
    seer_status s = j.lid && j.val ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
    if (s == SEER_OK)
        s = seer_tp_each(t, argmax_rank, &j);
    for (int i = 0; i < n && s == SEER_OK; i++) {
        float best = j.val[i];
        ids[i] = a->col0[0] + j.lid[i];
        for (int r = 1; r < t->n; r++) {
            const float v = j.val[(size_t)r * n + i];
            if (!isnan(v) && (isnan(best) || v > best)) {
                ids[i] = a->col0[r] + j.lid[(size_t)r * n + i];
                best = v;
            }
        }
    }
    free(j.lid);
    free(j.val);
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
