/*
 * tp_kv.c: KV storage on the tensor-parallel backend (each rank's pages hold its key/value
 * heads) and the per-rank attention batch (its head counts, its heads' view lists).
 * Not for: page bookkeeping (src/kv/), which sees one pool whatever the ranks.
 */
#include "parallel/tp_internal.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- KV storage -------------------------------------------------------------------------- */

seer_kv_geom seer_tp_geom(const tp_be *t, const seer_kv_geom *g, int r) {
    seer_kv_geom l = *g;
    int h0;
    seer_tp_units(g->n_kv_heads, t->n, r, &h0, &l.n_kv_heads);
    return l;
}

static seer_status tp_kv_alloc(seer_backend *be, const seer_kv_geom *g, void **out) {
    tp_be *t = tp_of(be);
    tp_kv *k = calloc(1, sizeof *k);
    if (!k)
        return seer_err(SEER_ERR_OOM, "out of memory");
    seer_status s = SEER_OK;
    for (int r = 0; r < t->n && s == SEER_OK; r++) {
        const seer_kv_geom l = seer_tp_geom(t, g, r);
        s = seer_tp_bind(t, r);
        if (s == SEER_OK)
            s = t->rank[r]->ops->kv_alloc(t->rank[r], &l, &k->kv[r]);
    }
    if (s != SEER_OK) {
        for (int r = 0; r < t->n; r++)
            if (k->kv[r]) {
                (void)seer_tp_bind(t, r);
                t->rank[r]->ops->kv_free(t->rank[r], k->kv[r]);
            }
        free(k);
        return s;
    }
    *out = k;
    return SEER_OK;
}

static void tp_kv_free(seer_backend *be, void *kv) {
    tp_be *t = tp_of(be);
    tp_kv *k = kv;
    if (!k)
        return;
    for (int r = 0; r < t->n; r++)
        if (k->kv[r]) {
            (void)seer_tp_bind(t, r);
            t->rank[r]->ops->kv_free(t->rank[r], k->kv[r]);
        }
    free(k);
}

static seer_status tp_kv_reserve(seer_backend *be, void *kv, const seer_kv_geom *g, int n_pages,
                                 int *n_committed) {
    tp_be *t = tp_of(be);
    tp_kv *k = kv;
    int least = 0;
    for (int r = 0; r < t->n; r++) {
        const seer_kv_geom l = seer_tp_geom(t, g, r);
        int c = 0;
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(t->rank[r]->ops->kv_reserve(t->rank[r], k->kv[r], &l, n_pages, &c));
        least = r == 0 || c < least ? c : least;
    }
    *n_committed = least;
    return SEER_OK;
}

static seer_status tp_kv_mem_available(seer_backend *be, uint64_t *bytes) {
    tp_be *t = tp_of(be);
    uint64_t least = UINT64_MAX;
    for (int r = 0; r < t->n; r++) {
        uint64_t b = 0;
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(t->rank[r]->ops->kv_mem_available(t->rank[r], &b));
        least = b < least ? b : least;
    }
    /* each rank holds about 1/n of every page (less where key/value heads are replicated:
     * then the pool's own reservation is what refuses) */
    *bytes = least * (uint64_t)t->n;
    return SEER_OK;
}

/* A KV op's arguments, as rank 0 holds them; each rank runs it on its own heads' storage, on
 * its own thread (seer_tp_each). */
typedef struct {
    const tp_kv *kv;
    const seer_kv_geom *g;
    const seer_kv_copy *copies;
    const int32_t *sp, *sr, *dp, *dr; /* move_rows; page, row: sp, sr */
    const float *k, *v;
    float *out;
    int n, layer, which, n_pages, row0;
    uint64_t seed;
    float scale;
} kv_job;

static seer_status copy_pages_rank(tp_be *t, int r, void *ctx) {
    const kv_job *j = ctx;
    const seer_kv_geom l = seer_tp_geom(t, j->g, r);
    SEER_TRY(seer_tp_bind(t, r));
    return t->rank[r]->ops->kv_copy_pages(t->rank[r], j->kv->kv[r], &l, j->copies, j->n);
}

static seer_status tp_kv_copy_pages(seer_backend *be, void *kv, const seer_kv_geom *g,
                                    const seer_kv_copy *copies, int n) {
    kv_job j = {.kv = kv, .g = g, .copies = copies, .n = n};
    return seer_tp_each(tp_of(be), copy_pages_rank, &j);
}

static seer_status move_rows_rank(tp_be *t, int r, void *ctx) {
    const kv_job *j = ctx;
    const seer_kv_geom l = seer_tp_geom(t, j->g, r);
    SEER_TRY(seer_tp_bind(t, r));
    return t->rank[r]->ops->kv_move_rows(t->rank[r], j->kv->kv[r], &l, j->sp, j->sr, j->dp, j->dr, j->n);
}

/* The host tier: a slot holds every rank's part of the page, rank after rank. The copies are
 * issued on every rank and waited for here, so tickets are complete at once (the overlap of a
 * rank's copy stream with its compute is left to the ranks' own backends). */
static size_t tp_kv_page_bytes(seer_backend *be, const seer_kv_geom *g) {
    tp_be *t = tp_of(be);
    size_t b = 0;
    for (int r = 0; r < t->n; r++) {
        const seer_kv_geom l = seer_tp_geom(t, g, r);
        b += t->rank[r]->ops->kv_page_bytes(t->rank[r], &l);
    }
    return b;
}

static seer_status tp_kv_host_copy(seer_backend *be, void *kv, const seer_kv_geom *g, void *host,
                                   size_t stride, const int32_t *pages, const int32_t *slots, int n,
                                   bool to_host, uint64_t *ticket) {
    tp_be *t = tp_of(be);
    tp_kv *k = kv;
    SEER_TRY(seer_kv_host_check(g, stride, tp_kv_page_bytes(be, g), pages, slots, n));
    uint64_t tk[t->n];
    size_t off = 0;
    for (int r = 0; r < t->n; r++) {
        const seer_kv_geom l = seer_tp_geom(t, g, r);
        seer_backend *b = t->rank[r];
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(b->ops->kv_host_copy(b, k->kv[r], &l, (char *)host + off, stride, pages, slots, n, to_host,
                                      &tk[r]));
        off += b->ops->kv_page_bytes(b, &l);
    }
    for (int r = 0; r < t->n; r++) {
        SEER_TRY(seer_tp_bind(t, r));
        SEER_TRY(t->rank[r]->ops->kv_host_wait(t->rank[r], tk[r]));
    }
    *ticket = 0;
    return SEER_OK;
}

static seer_status tp_kv_host_done(seer_backend *be, uint64_t ticket, bool *done) {
    *done = true;
    return SEER_OK;
}

static seer_status tp_kv_host_wait(seer_backend *be, uint64_t ticket) { return SEER_OK; }

static seer_status tp_kv_move_rows(seer_backend *be, void *kv, const seer_kv_geom *g,
                                   const int32_t *sp, const int32_t *sr, const int32_t *dp,
                                   const int32_t *dr, int n) {
    SEER_TRY(seer_kv_move_check(g, sp, sr, dp, dr, n));
    kv_job j = {.kv = kv, .g = g, .sp = sp, .sr = sr, .dp = dp, .dr = dr, .n = n};
    return seer_tp_each(tp_of(be), move_rows_rank, &j);
}

/* rank r's heads of n rows into out's whole rows */
static seer_status kv_read_rank(tp_be *t, int r, void *ctx) {
    const kv_job *j = ctx;
    const seer_kv_geom l = seer_tp_geom(t, j->g, r);
    const int Dh = j->g->head_dim, W = j->g->n_kv_heads * Dh;
    int h0, nh;
    seer_tp_units(j->g->n_kv_heads, t->n, r, &h0, &nh);
    float *tmp = seer_malloc_array((size_t)j->n * nh * Dh + 1, sizeof *tmp);
    if (!tmp)
        return seer_err(SEER_ERR_OOM, "out of memory");
    seer_status s = seer_tp_bind(t, r);
    if (s == SEER_OK)
        s = t->rank[r]->ops->kv_read(t->rank[r], j->kv->kv[r], &l, j->layer, j->which, j->sp, j->sr, j->n, tmp);
    /* ranks that replicate a key/value head write the same values to the same place: only
     * the first of them writes */
    int p0 = -1, pn;
    if (r > 0)
        seer_tp_units(j->g->n_kv_heads, t->n, r - 1, &p0, &pn);
    for (int i = 0; i < j->n && s == SEER_OK && p0 != h0; i++)
        memcpy(j->out + (size_t)i * W + (size_t)h0 * Dh, tmp + (size_t)i * nh * Dh, (size_t)nh * Dh * sizeof(float));
    free(tmp);
    return s;
}

static seer_status tp_kv_read(seer_backend *be, const void *kv, const seer_kv_geom *g, int layer,
                              int which, const int32_t *page, const int32_t *row, int n, float *out) {
    kv_job j = {.kv = kv, .g = g, .layer = layer, .which = which, .sp = page, .sr = row, .n = n, .out = out};
    return seer_tp_each(tp_of(be), kv_read_rank, &j);
}

static seer_status kv_store_rank(tp_be *t, int r, void *ctx) {
    const kv_job *j = ctx;
    const seer_kv_geom l = seer_tp_geom(t, j->g, r);
    SEER_TRY(seer_tp_bind(t, r));
    return t->rank[r]->ops->kv_store(t->rank[r], j->kv->kv[r], &l, j->layer, seer_tp_ptr(t, j->k, r),
                                     seer_tp_ptr(t, j->v, r), j->sp, j->sr, j->n);
}

static seer_status tp_kv_store(seer_backend *be, void *kv, const seer_kv_geom *g, int layer,
                               const float *kk, const float *v, const int32_t *page,
                               const int32_t *row, int T) {
    kv_job j = {.kv = kv, .g = g, .layer = layer, .k = kk, .v = v, .sp = page, .sr = row, .n = T};
    return seer_tp_each(tp_of(be), kv_store_rank, &j);
}

static seer_status fill_random_rank(tp_be *t, int r, void *ctx) {
    const kv_job *j = ctx;
    const seer_kv_geom l = seer_tp_geom(t, j->g, r);
    SEER_TRY(seer_tp_bind(t, r));
    /* each rank's heads from a seed of its own: random KV of the same statistics */
    return t->rank[r]->ops->kv_fill_random(t->rank[r], j->kv->kv[r], &l, j->sp, j->n_pages, j->row0, j->n,
                                           j->seed ^ (0xbf58476d1ce4e5b9ull * (uint64_t)(r + 1)), j->scale);
}

static seer_status tp_kv_fill_random(seer_backend *be, void *kv, const seer_kv_geom *g,
                                     const int32_t *pages, int n_pages, int row0, int n,
                                     uint64_t seed, float scale) {
    SEER_TRY(seer_kv_fill_check(g, pages, n_pages, row0, n));
    kv_job j = {.kv = kv, .g = g, .sp = pages, .n_pages = n_pages, .row0 = row0, .n = n, .seed = seed,
                .scale = scale};
    return seer_tp_each(tp_of(be), fill_random_rank, &j);
}

/* ---- the per-rank attention batch --------------------------------------------------------- */

seer_status seer_tp_batch(tp_be *t, const seer_attn_batch *ab) {
    if (t->ab_key == ab)
        return SEER_OK;
    seer_tp_batch_clear(t);
    const int H = ab->n_heads, Hkv = ab->n_kv_heads;
    if (!seer_tp_heads_divide(H, Hkv, t->n))
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor parallelism: %d heads with %d key/value heads do not divide over %d ranks",
                        H, Hkv, t->n);
    for (int r = 0; r < t->n; r++) {
        seer_attn_batch *b = &t->ab_r[r];
        *b = *ab;
        int q0, kv0;
        seer_tp_units(H, t->n, r, &q0, &b->n_heads);
        seer_tp_units(Hkv, t->n, r, &kv0, &b->n_kv_heads);
        if (!ab->seq_view)
            continue;
        /* views with a list per key/value head keep the rank's heads' lists */
        size_t n_idx = 0;
        for (int s = 0; s < ab->n_seq; s++) {
            const seer_attn_view *v = ab->seq_view[s];
            if (v && v->n_heads_view > 1)
                n_idx += (size_t)v->n_layers_view * b->n_kv_heads * v->n;
        }
        t->seq_view_r[r] = calloc((size_t)ab->n_seq + 1, sizeof *t->seq_view_r[r]);
        t->views_r[r] = calloc((size_t)ab->n_seq + 1, sizeof *t->views_r[r]);
        t->view_idx_r[r] = malloc((n_idx + 1) * sizeof *t->view_idx_r[r]);
        if (!t->seq_view_r[r] || !t->views_r[r] || !t->view_idx_r[r]) {
            seer_tp_batch_clear(t);
            return seer_err(SEER_ERR_OOM, "out of memory");
        }
        int32_t *idx = t->view_idx_r[r];
        for (int s = 0; s < ab->n_seq; s++) {
            const seer_attn_view *v = ab->seq_view[s];
            if (!v || v->n_heads_view <= 1) {
                t->seq_view_r[r][s] = v;
                continue;
            }
            seer_attn_view *lv = &t->views_r[r][s];
            *lv = *v;
            lv->idx = idx;
            lv->n_heads_view = b->n_kv_heads;
            for (int l = 0; l < v->n_layers_view; l++)
                for (int h = 0; h < b->n_kv_heads; h++) {
                    memcpy(idx, v->idx + ((size_t)l * v->n_heads_view + kv0 + h) * v->n, (size_t)v->n * sizeof *idx);
                    idx += v->n;
                }
            t->seq_view_r[r][s] = lv;
        }
        b->seq_view = t->seq_view_r[r];
    }
    t->ab_key = ab;
    return SEER_OK;
}

typedef struct {
    const int32_t *tokens, *pos, *page, *row, *out_rows;
    int n_out;
} batch_job;

static seer_status batch_begin_rank(tp_be *t, int r, void *ctx) {
    const batch_job *j = ctx;
    seer_backend *b = t->rank[r];
    if (!b->ops->batch_begin)
        return SEER_OK;
    SEER_TRY(seer_tp_bind(t, r));
    return b->ops->batch_begin(b, &t->ab_r[r], j->tokens, j->pos, j->page, j->row, j->out_rows, j->n_out);
}

static seer_status tp_batch_begin(seer_backend *be, const seer_attn_batch *ab, const int32_t *tokens,
                                  const int32_t *pos, const int32_t *page, const int32_t *row,
                                  const int32_t *out_rows, int n_out) {
    tp_be *t = tp_of(be);
    t->ab_key = NULL; /* a new batch, even at the same address */
    SEER_TRY(seer_tp_batch(t, ab));
    batch_job j = {tokens, pos, page, row, out_rows, n_out};
    return seer_tp_each(t, batch_begin_rank, &j);
}

void seer_tp_fill_kv_ops(seer_backend_ops *o, const seer_backend_ops *in) {
    o->kv_alloc = tp_kv_alloc;
    o->kv_reserve = tp_kv_reserve;
    o->kv_mem_available = in->kv_mem_available ? tp_kv_mem_available : NULL;
    o->kv_free = tp_kv_free;
    o->kv_copy_pages = tp_kv_copy_pages;
    o->kv_move_rows = tp_kv_move_rows;
    if (in->kv_host_copy) {
        o->kv_page_bytes = tp_kv_page_bytes;
        o->kv_host_copy = tp_kv_host_copy;
        o->kv_host_done = tp_kv_host_done;
        o->kv_host_wait = tp_kv_host_wait;
    }
    o->kv_read = tp_kv_read;
    o->kv_store = tp_kv_store;
    o->kv_fill_random = in->kv_fill_random ? tp_kv_fill_random : NULL;
    o->batch_begin = tp_batch_begin;
}
