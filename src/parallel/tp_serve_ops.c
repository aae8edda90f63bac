/*
 * tp_serve_ops.c: the compute and KV ops of a rank's process (tp_serve.c runs the stream):
 * each message's fields checked against the op's signature and the handle table, then the
 * op run on the rank's backend. An attention batch is kept decoded at fixed addresses while
 * the next message brings the same bytes (att_cache in tp_serve.h).
 * Not for: memory, weights, instances or collectives (tp_serve.c).
 */
#include "parallel/tp_serve.h"

#include <stdlib.h>

static seer_status op_split(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m) {
    /* x, weight, T, nseg, (y, bias) x 4, has biases [, h, w_norm, eps] */
    const bool norm = op == TP_OP_NORM_MATMUL_SPLIT;
    TRY(seer_tp_msg_check(m, norm ? "ppiippppppppippf" : "ppiippppppppi", norm ? "norm_matmul_split" : "matmul_split"));
    float *x, *ys[SEER_WEIGHT_MAX_SEG], *bs[SEER_WEIGHT_MAX_SEG];
    seer_weight *wt;
    int T, nseg;
    TRY(mem(sv, m, 0, &x));
    TRY(weight(sv, m, 1, &wt));
    TRY(num(m, 2, 0, BIG, &T));
    TRY(num(m, 3, 1, SEER_WEIGHT_MAX_SEG, &nseg));
    if (nseg != (wt->n_seg ? wt->n_seg : 1))
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: %d outputs for a weight of %d segments", nseg,
                        wt->n_seg);
    for (int j = 0; j < SEER_WEIGHT_MAX_SEG; j++) {
        TRY(mem(sv, m, 4 + 2 * j, &ys[j]));
        TRY(mem(sv, m, 5 + 2 * j, &bs[j]));
    }
    const float *const *b = m->f[12].i ? (const float *const *)bs : NULL;
    if (!norm)
        return be->ops->matmul_split(be, ys, x, wt, b, T);
    float *h, *wn;
    TRY(mem(sv, m, 13, &h));
    TRY(mem(sv, m, 14, &wn));
    return be->ops->norm_matmul_split(be, ys, h, x, wn, (float)m->f[15].f, wt, b, T);
}

/* An attention batch from field k on (tp_remote_ops.c's w_batch); views and idx are the
 * caller's to free. */
static seer_status batch(const tp_msg *m, int k, seer_attn_batch *ab, seer_attn_view **views,
                         const seer_attn_view ***seq_view) {
    int T, ns, mp;
    TRY(num(m, k, 0, BIG, &T));
    memset(ab, 0, sizeof *ab);
    ab->T = T;
    TRY(num(m, k + 1, 0, BIG, &ab->n_heads));
    TRY(num(m, k + 2, 0, BIG, &ab->n_kv_heads));
    TRY(num(m, k + 3, 0, BIG, &ab->head_dim));
    ab->scale = (float)m->f[k + 4].f;
    TRY(num(m, k + 5, 1, BIG, &ab->page_size));
    TRY(num(m, k + 6, 0, 1 << 20, &ns));
    TRY(num(m, k + 7, 0, 1 << 20, &mp));
    ab->n_seq = ns;
    ab->max_pages = mp;
    TRY(ids(m, k + 8, (int64_t)ns * mp, &ab->seq_pages, "attention's pages"));
    TRY(ids(m, k + 9, ns, &ab->seq_len0, "attention's lengths"));
    TRY(ids(m, k + 10, ns + 1, &ab->seq_tok_off, "attention's offsets"));
    TRY(ids(m, k + 11, T, &ab->seq_toks, "attention's tokens"));
    TRY(ids(m, k + 12, T, &ab->tok_seq, "attention's sequences"));
    TRY(ids(m, k + 13, T, &ab->tok_slot, "attention's slots"));
    if (m->f[k + 14].i)
        TRY(seer_tp_msg_array(m, k + 15, (size_t)T * (size_t)T, 1, (const void **)&ab->mask, "attention's mask"));
    ab->kv_quant = m->f[k + 16].i != 0;
    if (m->f[k + 17].i)
        TRY(ids(m, k + 18, ns, &ab->seq_prompt, "attention's prompt counts"));
    TRY(num(m, k + 19, 0, INT32_MAX, &ab->window));
    if (m->f[k + 20].i)
        TRY(ids(m, k + 21, T, &ab->tok_pos, "attention's positions"));
    ab->softcap = (float)m->f[k + 22].f;
    for (int s = 0; s < ns; s++) /* the offsets must lie within the tokens */
        if (ab->seq_tok_off[s] < 0 || ab->seq_tok_off[s] > ab->seq_tok_off[s + 1] || ab->seq_tok_off[s + 1] > T)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: attention's token offsets are not ascending");
    const int32_t *meta = NULL;
    if (m->f[k + 23].len == 0 && ns == 0)
        return SEER_OK;
    TRY(ids(m, k + 23, (int64_t)ns * 5, &meta, "attention's views"));
    size_t n_idx = 0;
    for (int s = 0; s < ns; s++) {
        const int32_t *v = meta + s * 5;
        if (v[0] && (v[1] < 0 || v[2] < 0 || v[3] < 0 || v[1] > BIG || v[2] > 4096 || v[3] > 4096))
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a view of bad shape");
        if (v[0])
            n_idx += (size_t)v[1] * v[2] * v[3];
        if (n_idx > BIG) /* each term is below 2^55: the sum cannot wrap before this */
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: attention's views hold over %d indices", BIG);
    }
    const int32_t *idx;
    TRY(ids(m, k + 24, (int64_t)n_idx, &idx, "attention's view indices"));
    *views = calloc((size_t)ns + 1, sizeof **views);
    *seq_view = calloc((size_t)ns + 1, sizeof **seq_view);
    if (!*views || !*seq_view)
        return seer_err(SEER_ERR_OOM, "out of memory");
    size_t at = 0;
    for (int s = 0; s < ns; s++) {
        const int32_t *v = meta + s * 5;
        if (!v[0])
            continue;
        (*views)[s] = (seer_attn_view){idx + at, v[1], v[2], v[3], v[4]};
        (*seq_view)[s] = &(*views)[s];
        at += (size_t)v[1] * v[2] * v[3];
    }
    ab->seq_view = *seq_view;
    return SEER_OK;
}

static void slot_free(att_slot *a) {
    free(a->bytes);
    free(a->m);
    free(a->views);
    free(a->sview);
    memset(a, 0, sizeof *a);
}

void seer_tp_att_clear(att_cache *c) {
    for (int j = 0; j < 2; j++)
        slot_free(&c->slot[j]);
    for (int k = 0; k < SV_IDX_N; k++)
        free(c->idx[k]);
    memset(c, 0, sizeof *c);
}

static att_cache *att_find(tp_serve *sv, seer_backend *be) {
    for (int i = 0; i < SV_ATT; i++)
        if (sv->att[i].be == be)
            return &sv->att[i];
    return NULL;
}

static att_cache *att_of(tp_serve *sv, seer_backend *be) {
    att_cache *c = att_find(sv, be);
    if (c)
        return c;
    c = att_find(sv, NULL); /* a free cache, else the oldest taken */
    if (!c)
        c = &sv->att[sv->att_next++ % SV_ATT];
    seer_tp_att_clear(c);
    c->be = be;
    return c;
}

seer_status seer_tp_att_batch(tp_serve *sv, seer_backend *be, const tp_msg *m, int k0, const seer_attn_batch **ab) {
    /* the batch's fields lie together: eight numbers of 16 bytes and a string's header before
     * field k0 + 8's bytes, field k0 + 24's padded bytes last */
    const char *b0 = (const char *)m->f[k0 + 8].data - 8 * 16 - 16;
    const char *b1 = (const char *)m->f[k0 + 24].data + m->f[k0 + 24].len + (8 - m->f[k0 + 24].len % 8) % 8;
    const size_t n = (size_t)(b1 - b0);
    att_cache *c = att_of(sv, be);
    att_slot *a = &c->slot[c->cur];
    if (!(a->bytes && a->len == n && !memcmp(a->bytes, b0, n))) {
        a = &c->slot[c->cur ^ 1];
        slot_free(a);
        a->bytes = malloc(n ? n : 1);
        a->m = malloc(sizeof *a->m);
        if (!a->bytes || !a->m) {
            slot_free(a);
            return seer_err(SEER_ERR_OOM, "out of memory");
        }
        memcpy(a->bytes, b0, n);
        a->len = n;
        seer_status s = seer_tp_msg_parse(a->bytes, n, a->m);
        if (s == SEER_OK)
            s = batch(a->m, 0, &a->ab, &a->views, &a->sview);
        if (s != SEER_OK) {
            slot_free(a);
            return s;
        }
        c->cur ^= 1;
    }
    *ab = &a->ab;
    return SEER_OK;
}

const int32_t *seer_tp_kept_idx(tp_serve *sv, seer_backend *be, int role, const int32_t *a, int n) {
    att_cache *c = att_find(sv, be);
    if (!c || !c->idx[role] || !a || n <= 0 || n > c->idx_cap[role])
        return a;
    const int kn = c->idx_n[role];
    if (memcmp(c->idx[role], a, (size_t)(n < kn ? n : kn) * sizeof *a))
        return a;
    if (n > kn) /* a padded call's rows past the batch's, as this message has them */
        memcpy(c->idx[role] + kn, a + kn, (size_t)(n - kn) * sizeof *a);
    return c->idx[role];
}

seer_status seer_tp_kept_set(tp_serve *sv, seer_backend *be, const int32_t *const *a, const int *n) {
    att_cache *c = att_of(sv, be);
    for (int k = 0; k < SV_IDX_N; k++) {
        c->idx_n[k] = 0;
        if (!a[k] || n[k] <= 0)
            continue;
        /* room for a padded call's rows (CUDA pads a call of up to 65 tokens to a multiple of 8) */
        const int cap = n[k] + 64;
        if (cap > c->idx_cap[k]) {
            int32_t *p = realloc(c->idx[k], (size_t)cap * sizeof *p);
            if (!p)
                return seer_err(SEER_ERR_OOM, "out of memory");
            c->idx[k] = p;
            c->idx_cap[k] = cap;
        }
        memcpy(c->idx[k], a[k], (size_t)n[k] * sizeof **a);
        c->idx_n[k] = n[k];
    }
    return SEER_OK;
}

static seer_status op_attention(tp_serve *sv, seer_backend *be, const tp_msg *m) {
    TRY(seer_tp_msg_check(m, "ppp" GEOM "i" "iiiifiiibbbbbbibiibiibfbb", "attention"));
    float *out, *q;
    void *k;
    TRY(mem(sv, m, 0, &out));
    TRY(mem(sv, m, 1, &q));
    TRY(kv(sv, m, 2, &k));
    const seer_kv_geom g = geom(m, 3);
    int layer;
    TRY(num(m, 10, 0, g.n_layers - 1, &layer));
    const seer_attn_batch *ab;
    TRY(seer_tp_att_batch(sv, be, m, 11, &ab));
    return be->ops->attention(be, out, q, k, &g, layer, ab);
}

/* ---- the KV cache's host tier ------------------------------------------------------------- */

/* n pages of KV storage k between the storage and the message: out of it into the answer
 * (to_host) or from the message's bytes into it, through host memory of this process (the
 * backend's own, where it has some: CUDA copies from page-locked memory). */
static seer_status host_pages(seer_backend *be, void *k, const seer_kv_geom *g, const tp_msg *m, int n,
                              const int32_t *pages, bool to_host, tp_wbuf *w) {
    const seer_backend_ops *o = be->ops;
    if (!o->kv_page_bytes || !o->kv_host_copy || !o->kv_host_wait)
        return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend has no host tier of the KV cache");
    const size_t pb = o->kv_page_bytes(be, g);
    if (!pb || (size_t)n > SIZE_MAX / pb)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: %d pages of %zu bytes", n, pb);
    if (!to_host && m->f[10].len != (size_t)n * pb)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: %zu bytes for %d pages of %zu", m->f[10].len, n,
                        pb);
    const size_t bytes = (size_t)n * pb;
    int32_t *slots = malloc((size_t)n * sizeof *slots + 1);
    void *host = NULL;
    seer_status s = slots ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
    if (s == SEER_OK && o->host_alloc)
        s = o->host_alloc(be, bytes, &host);
    else if (s == SEER_OK && !(host = malloc(bytes)))
        s = seer_err(SEER_ERR_OOM, "out of memory for %d pages", n);
    for (int i = 0; i < n && s == SEER_OK; i++)
        slots[i] = i;
    if (s == SEER_OK && !to_host)
        memcpy(host, m->f[10].data, bytes);
    uint64_t ticket = 0;
    if (s == SEER_OK)
        s = o->kv_host_copy(be, k, g, host, pb, pages, slots, n, to_host, &ticket);
    if (s == SEER_OK)
        s = o->kv_host_wait(be, ticket);
    if (s == SEER_OK && to_host)
        seer_tp_w_bytes(w, host, bytes);
    if (host && o->host_alloc)
        o->host_free(be, host);
    else
        free(host);
    free(slots);
    return s;
}

static seer_status op_kv_host(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w) {
    if (op == TP_OP_KV_PAGE_BYTES) {
        TRY(seer_tp_msg_check(m, GEOM, "kv_page_bytes"));
        for (int j = 0; j < 7; j++)
            if (m->f[j].i < 0 || m->f[j].i > BIG)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a KV geometry's field %d", j);
        if (!be->ops->kv_page_bytes)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend has no host tier of the KV cache");
        const seer_kv_geom g = geom(m, 0);
        seer_tp_w_int(w, (int64_t)be->ops->kv_page_bytes(be, &g));
        return SEER_OK;
    }
    /* kv, geom, n, pages [, the pages' bytes] */
    const bool to_host = op == TP_OP_KV_HOST_OUT;
    TRY(seer_tp_msg_check(m, to_host ? "p" GEOM "ib" : "p" GEOM "ibb", "kv_host_copy"));
    void *k;
    int n;
    const int32_t *pages;
    TRY(kv(sv, m, 0, &k));
    const seer_kv_geom g = geom(m, 1);
    TRY(num(m, 8, 0, BIG, &n));
    TRY(ids(m, 9, n, &pages, "kv_host_copy"));
    for (int i = 0; i < n; i++)
        if (pages[i] < 0 || pages[i] >= g.n_pages)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a page copy outside the pool");
    return host_pages(be, k, &g, m, n, pages, to_host, w);
}

static seer_status op_kv(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w) {
    void *k;
    int n, T, layer;
    if (op == TP_OP_KV_COPY) {
        TRY(seer_tp_msg_check(m, "p" GEOM "ib", "kv_copy_pages"));
        TRY(kv(sv, m, 0, &k));
        const seer_kv_geom g = geom(m, 1);
        const seer_kv_copy *c;
        TRY(num(m, 8, 0, BIG, &n));
        TRY(seer_tp_msg_array(m, 9, (size_t)n, sizeof *c, (const void **)&c, "kv_copy_pages"));
        for (int i = 0; i < n; i++)
            if (c[i].src < 0 || c[i].src >= g.n_pages || c[i].dst < 0 || c[i].dst >= g.n_pages)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a page copy outside the pool");
        return be->ops->kv_copy_pages(be, k, &g, c, n);
    }
    if (op == TP_OP_KV_MOVE) {
        TRY(seer_tp_msg_check(m, "p" GEOM "ibbbb", "kv_move_rows"));
        TRY(kv(sv, m, 0, &k));
        const seer_kv_geom g = geom(m, 1);
        const int32_t *a[4];
        TRY(num(m, 8, 0, BIG, &n));
        for (int j = 0; j < 4; j++)
            TRY(ids(m, 9 + j, n, &a[j], "kv_move_rows"));
        return be->ops->kv_move_rows(be, k, &g, a[0], a[1], a[2], a[3], n);
    }
    if (op == TP_OP_KV_READ) {
        TRY(seer_tp_msg_check(m, "p" GEOM "iiibb", "kv_read"));
        TRY(kv(sv, m, 0, &k));
        const seer_kv_geom g = geom(m, 1);
        const int32_t *page, *row;
        int which;
        TRY(num(m, 8, 0, g.n_layers - 1, &layer));
        TRY(num(m, 9, 0, 1, &which));
        TRY(num(m, 10, 0, BIG, &n));
        TRY(ids(m, 11, n, &page, "kv_read"));
        TRY(ids(m, 12, n, &row, "kv_read"));
        for (int i = 0; i < n; i++)
            if (page[i] < 0 || page[i] >= g.n_pages || row[i] < 0 || row[i] >= g.page_size)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a row read outside the pool");
        if (!be->ops->kv_read)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend has no kv_read");
        const size_t cnt = (size_t)n * g.n_kv_heads * g.head_dim;
        float *out = malloc(cnt * sizeof *out + 1);
        if (!out)
            return seer_err(SEER_ERR_OOM, "out of memory");
        seer_status s = be->ops->kv_read(be, k, &g, layer, which, page, row, n, out);
        if (s == SEER_OK)
            seer_tp_w_bytes(w, out, cnt * sizeof *out);
        free(out);
        return s;
    }
    if (op == TP_OP_KV_FILL) { /* kv, geom, n_pages, pages, row0, n, seed, scale */
        TRY(seer_tp_msg_check(m, "p" GEOM "ibiiif", "kv_fill_random"));
        TRY(kv(sv, m, 0, &k));
        const seer_kv_geom g = geom(m, 1);
        const int32_t *pages;
        int row0;
        TRY(num(m, 8, 0, BIG, &n));
        TRY(ids(m, 9, n, &pages, "kv_fill_random"));
        TRY(num(m, 10, 0, BIG, &row0));
        TRY(num(m, 11, 0, BIG, &T));
        TRY(seer_kv_fill_check(&g, pages, n, row0, T));
        if (!be->ops->kv_fill_random)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend has no synthetic KV");
        return be->ops->kv_fill_random(be, k, &g, pages, n, row0, T, (uint64_t)m->f[12].i, (float)m->f[13].f);
    }
    /* KV_STORE: kv, geom, layer, k, v, T, page, row */
    TRY(seer_tp_msg_check(m, "p" GEOM "ippibb", "kv_store"));
    TRY(kv(sv, m, 0, &k));
    const seer_kv_geom g = geom(m, 1);
    float *kk, *vv;
    const int32_t *page, *row;
    TRY(num(m, 8, 0, g.n_layers - 1, &layer));
    TRY(mem(sv, m, 9, &kk));
    TRY(mem(sv, m, 10, &vv));
    TRY(num(m, 11, 0, BIG, &T));
    TRY(ids(m, 12, T, &page, "kv_store"));
    TRY(ids(m, 13, T, &row, "kv_store"));
    if (!be->ops->kv_store)
        return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend has no kv_store");
    page = seer_tp_kept_idx(sv, be, SV_IDX_PAGE, page, T);
    row = seer_tp_kept_idx(sv, be, SV_IDX_ROW, row, T);
    return be->ops->kv_store(be, k, &g, layer, kk, vv, page, row, T);
}

static seer_status op_rope(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m) {
    int T, H, Hkv, Dh, neox, layer;
    const int32_t *pos, *page, *row;
    float *q, *k, *v, *fr;
    void *kvp;
    if (op == TP_OP_ROPE) {
        TRY(seer_tp_msg_check(m, "pibiipi", "rope"));
        TRY(mem(sv, m, 0, &q));
        TRY(num(m, 1, 0, BIG, &T));
        TRY(ids(m, 2, T, &pos, "rope"));
        TRY(num(m, 3, 0, BIG, &H));
        TRY(num(m, 4, 0, BIG, &Dh));
        TRY(mem(sv, m, 5, &fr));
        pos = seer_tp_kept_idx(sv, be, SV_IDX_POS, pos, T);
        return be->ops->rope(be, q, pos, T, H, Dh, fr, (int)m->f[6].i);
    }
    TRY(seer_tp_msg_check(m, "pppibiiipip" GEOM "ibb", "rope_kv_store"));
    TRY(mem(sv, m, 0, &q));
    TRY(mem(sv, m, 1, &k));
    TRY(mem(sv, m, 2, &v));
    TRY(num(m, 3, 0, BIG, &T));
    TRY(ids(m, 4, T, &pos, "rope_kv_store"));
    TRY(num(m, 5, 0, BIG, &H));
    TRY(num(m, 6, 0, BIG, &Hkv));
    TRY(num(m, 7, 0, BIG, &Dh));
    TRY(mem(sv, m, 8, &fr));
    neox = (int)m->f[9].i;
    TRY(kv(sv, m, 10, &kvp));
    const seer_kv_geom g = geom(m, 11);
    TRY(num(m, 18, 0, g.n_layers - 1, &layer));
    TRY(ids(m, 19, T, &page, "rope_kv_store"));
    TRY(ids(m, 20, T, &row, "rope_kv_store"));
    pos = seer_tp_kept_idx(sv, be, SV_IDX_POS, pos, T);
    page = seer_tp_kept_idx(sv, be, SV_IDX_PAGE, page, T);
    row = seer_tp_kept_idx(sv, be, SV_IDX_ROW, row, T);
    return be->ops->rope_kv_store(be, q, k, v, pos, T, H, Hkv, Dh, fr, neox, kvp, &g, layer, page, row);
}

static seer_status op_elementwise(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m) {
    float *y, *a, *b;
    if (op == TP_OP_SCALE || op == TP_OP_SOFTCAP) {
        TRY(seer_tp_msg_check(m, "pfi", "scale"));
        TRY(mem(sv, m, 0, &y));
        if (m->f[2].i < 0)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a negative size");
        if (op == TP_OP_SCALE)
            return be->ops->scale(be, y, (float)m->f[1].f, (size_t)m->f[2].i);
        return be->ops->softcap(be, y, (float)m->f[1].f, (size_t)m->f[2].i);
    }
    TRY(seer_tp_msg_check(m, "pppi", "an elementwise op"));
    TRY(mem(sv, m, 0, &y));
    TRY(mem(sv, m, 1, &a));
    TRY(mem(sv, m, 2, &b));
    if (m->f[3].i < 0)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a negative size");
    const size_t n = (size_t)m->f[3].i;
    if (op == TP_OP_ADD)
        return be->ops->add(be, y, a, n);
    if (op == TP_OP_SWIGLU)
        return be->ops->swiglu(be, y, a, b, n);
    return be->ops->geglu(be, y, a, b, n);
}

static seer_status op_matmul(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m) {
    float *y, *x, *b, *h, *g;
    seer_weight *w, *w2;
    int T;
    switch (op) {
    case TP_OP_MATMUL:
        TRY(seer_tp_msg_check(m, "pppp" "i", "matmul"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &x));
        TRY(weight(sv, m, 2, &w));
        TRY(mem(sv, m, 3, &b));
        TRY(num(m, 4, 0, BIG, &T));
        return be->ops->matmul(be, y, x, w, b, T);
    case TP_OP_MATMUL_ADD:
    case TP_OP_MATMUL_GLU:
        TRY(seer_tp_msg_check(m, "pppi", "matmul_add"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &x));
        TRY(weight(sv, m, 2, &w));
        TRY(num(m, 3, 0, BIG, &T));
        return op == TP_OP_MATMUL_ADD ? be->ops->matmul_add(be, y, x, w, T) : be->ops->matmul_glu(be, y, x, w, T);
    case TP_OP_FFN_GLU:
        TRY(seer_tp_msg_check(m, "pppfpppi", "ffn_glu"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &h));
        TRY(mem(sv, m, 2, &x)); /* the norm's weight */
        TRY(weight(sv, m, 4, &w));
        TRY(weight(sv, m, 5, &w2));
        TRY(mem(sv, m, 6, &g));
        TRY(num(m, 7, 0, BIG, &T));
        return be->ops->ffn_glu(be, y, h, x, (float)m->f[3].f, w, w2, g, T);
    default:
        return op_split(sv, be, op, m);
    }
}

seer_status seer_tp_serve_compute(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w) {
    float *y, *x;
    int T, D, n, V;
    const int32_t *rows;
    seer_weight *wt;
    switch (op) {
    case TP_OP_KV_COPY:
    case TP_OP_KV_MOVE:
    case TP_OP_KV_STORE:
    case TP_OP_KV_READ:
    case TP_OP_KV_FILL:
        return op_kv(sv, be, op, m, w);
    case TP_OP_KV_PAGE_BYTES:
    case TP_OP_KV_HOST_OUT:
    case TP_OP_KV_HOST_IN:
        return op_kv_host(sv, be, op, m, w);
    case TP_OP_EMBED:
        TRY(seer_tp_msg_check(m, "ppib", "embed"));
        TRY(mem(sv, m, 0, &y));
        TRY(weight(sv, m, 1, &wt));
        TRY(num(m, 2, 0, BIG, &T));
        TRY(ids(m, 3, T, &rows, "embed"));
        for (int i = 0; i < T; i++)
            if (rows[i] < 0 || rows[i] >= wt->rows)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: token %d outside the embedding", rows[i]);
        return be->ops->embed(be, y, wt, seer_tp_kept_idx(sv, be, SV_IDX_TOKENS, rows, T), T);
    case TP_OP_RMSNORM:
        TRY(seer_tp_msg_check(m, "pppiif", "rmsnorm"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &x));
        float *wn;
        TRY(mem(sv, m, 2, &wn));
        TRY(num(m, 3, 0, BIG, &T));
        TRY(num(m, 4, 1, BIG, &D));
        return be->ops->rmsnorm(be, y, x, wn, T, D, (float)m->f[5].f);
    case TP_OP_MATMUL:
    case TP_OP_MATMUL_ADD:
    case TP_OP_MATMUL_GLU:
    case TP_OP_FFN_GLU:
    case TP_OP_MATMUL_SPLIT:
    case TP_OP_NORM_MATMUL_SPLIT:
        return op_matmul(sv, be, op, m);
    case TP_OP_ROPE:
    case TP_OP_ROPE_KV_STORE:
        return op_rope(sv, be, op, m);
    case TP_OP_ATTENTION:
        return op_attention(sv, be, m);
    case TP_OP_SWIGLU:
    case TP_OP_GEGLU:
    case TP_OP_ADD:
    case TP_OP_SCALE:
    case TP_OP_SOFTCAP:
        return op_elementwise(sv, be, op, m);
    case TP_OP_GATHER_ROWS:
        TRY(seer_tp_msg_check(m, "ppibi", "gather_rows"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &x));
        TRY(num(m, 2, 0, BIG, &n));
        TRY(ids(m, 3, n, &rows, "gather_rows"));
        TRY(num(m, 4, 1, BIG, &D));
        return be->ops->gather_rows(be, y, x, seer_tp_kept_idx(sv, be, SV_IDX_OUT, rows, n), n, D);
    case TP_OP_ARGMAX: {
        TRY(seer_tp_msg_check(m, "pii", "argmax_rows"));
        TRY(mem(sv, m, 0, &x));
        TRY(num(m, 1, 0, BIG, &n));
        TRY(num(m, 2, 1, BIG, &V));
        int32_t *out = malloc((size_t)n * 4 + 4);
        if (!out)
            return seer_err(SEER_ERR_OOM, "out of memory");
        seer_status s = be->ops->argmax_rows(be, out, x, n, V);
        if (s == SEER_OK)
            seer_tp_w_bytes(w, out, (size_t)n * 4);
        free(out);
        return s;
    }
    default:
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: unknown op %u", op);
    }
}
