/*
 * tp_remote.c: a rank in another process, as rank 0's process holds it (tp_remote.h): a
 * backend whose ops are messages to the rank's process. An op whose answer would be its
 * status alone (compute, uploads, KV writes, frees) is posted: sent, not waited for; the rank
 * runs the stream in order, keeps the first such failure of an instance and reports it at that
 * instance's next op that waits (downloads, syncs, allocations, anything returning data), so
 * a rank's failure is the failure of that op, naming the op that met it. A closed connection,
 * a time-out or a bad answer marks the link dead and every later op fails at once with the
 * first reason (rank 0 never waits on a rank that left; a send waits for the socket at most
 * the time-out, so what is queued is bounded by the sockets' buffers). Pointers into the
 * rank's memory are handles that this side numbers (tp_remote.h's fake addresses), so an
 * allocation's answer is its status alone.
 * Not for: the rank's side (tp_serve.c) or the collectives (tp_remote_comm.c).
 */
#include "parallel/tp_remote.h"
#include "util/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int fd, rank, timeout_ms, refs;
    pthread_mutex_t mu; /* the socket: one message (and its answer) at a time */
    tp_reader rd;
    int64_t next_handle;
    seer_status dead; /* SEER_OK while the link works */
    char why[400];
} tp_link;

typedef struct {
    tp_link *l;
    uint32_t inst; /* the rank's instance: 0 its backend, else a clone's handle */
    const seer_backend_ops *rank0; /* sizes and names only */
    seer_kv_geom pb_geom; /* kv_page_bytes' last answer, for this geometry */
    size_t pb;
    const int32_t *idx[TP_IDX_N]; /* batch_begin's arrays and lengths (seer_tp_w_idx) */
    int idx_n[TP_IDX_N];
} rb;

static seer_backend_ops remote_ops;

static rb *rb_of(seer_backend *be) { return be->impl; }

static void *fake(int64_t h) { return (void *)(uintptr_t)(TP_FAKE_BIT | (uint64_t)h << TP_FAKE_OFF_BITS); }

static seer_status new_handle(rb *b, int64_t *h) {
    pthread_mutex_lock(&b->l->mu);
    *h = ++b->l->next_handle;
    pthread_mutex_unlock(&b->l->mu);
    if (*h > TP_FAKE_MAX_HANDLE)
        return seer_err(SEER_ERR_OOM, "rank %d: more than %lld allocations over its link", b->l->rank,
                        (long long)TP_FAKE_MAX_HANDLE);
    return SEER_OK;
}

static void w_weight(tp_wbuf *w, const seer_weight *wt) { tp_w_rptr(w, wt ? wt->data : NULL); }

/* Sends op with w's fields (w freed), waits for the answer and checks that its fields are
 * sig's; on success *pl holds them (the caller frees it). */
#define rpc seer_tp_remote_rpc

seer_status seer_tp_remote_rpc(seer_backend *be, uint32_t op, tp_wbuf *w, const char *sig, tp_msg *m, void **pl) {
    rb *b = rb_of(be);
    tp_link *l = b->l;
    *pl = NULL;
    pthread_mutex_lock(&l->mu);
    seer_status s = l->dead;
    char why[sizeof l->why];
    snprintf(why, sizeof why, "%s", l->why);
    tp_wire_hdr h = {0};
    void *p = NULL;
    if (s == SEER_OK)
        s = seer_tp_wire_send(l->fd, op, b->inst, 0, w, l->timeout_ms);
    if (s == SEER_OK)
        s = seer_tp_wire_read(&l->rd, &h, &p, l->timeout_ms);
    if (s == SEER_OK)
        s = seer_tp_msg_parse(p, (size_t)h.bytes, m);
    if (s != SEER_OK && l->dead == SEER_OK) {
        l->dead = s == SEER_ERR_OOM ? SEER_ERR_OOM : SEER_ERR_IO;
        snprintf(l->why, sizeof l->why, "%s", seer_last_error());
        snprintf(why, sizeof why, "%s", l->why);
        s = l->dead;
    }
    pthread_mutex_unlock(&l->mu);
    seer_tp_w_free(w);
    if (s != SEER_OK) {
        free(p);
        return seer_err(s, "rank %d (another process): %s", l->rank, why);
    }
    if (h.kind != SEER_OK) {
        const bool has = m->n == 1 && m->f[0].type == TP_F_BYTES;
        const seer_status rs = (seer_status)h.kind;
        /* the message's length bounded: past INT_MAX the precision would be negative, and
         * the bytes (not NUL-terminated) read to their end and beyond */
        const int len = has ? (int)(m->f[0].len < 1024 ? m->f[0].len : 1024) : 0;
        seer_status e = seer_err(rs, "rank %d: %.*s", l->rank, len, has ? (const char *)m->f[0].data : "");
        free(p);
        return e;
    }
    s = seer_tp_msg_check(m, sig, "an answer");
    if (s != SEER_OK) {
        free(p);
        return s;
    }
    *pl = p;
    return SEER_OK;
}

seer_status seer_tp_remote_post(seer_backend *be, uint32_t op, tp_wbuf *w) {
    rb *b = rb_of(be);
    tp_link *l = b->l;
    pthread_mutex_lock(&l->mu);
    seer_status s = l->dead;
    if (s == SEER_OK)
        s = seer_tp_wire_send(l->fd, op, b->inst, TP_WIRE_NO_REPLY, w, l->timeout_ms);
    if (s != SEER_OK && l->dead == SEER_OK) {
        l->dead = s == SEER_ERR_OOM ? SEER_ERR_OOM : SEER_ERR_IO;
        snprintf(l->why, sizeof l->why, "%s", seer_last_error());
    }
    char why[sizeof l->why];
    snprintf(why, sizeof why, "%s", l->why);
    s = l->dead;
    pthread_mutex_unlock(&l->mu);
    seer_tp_w_free(w);
    return s == SEER_OK ? SEER_OK : seer_err(s, "rank %d (another process): %s", l->rank, why);
}

#define post seer_tp_remote_post

/* rpc of an op whose answer is the status alone, waited for */
static seer_status rpc0(seer_backend *be, uint32_t op, tp_wbuf *w) {
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, op, w, "", &m, &pl));
    free(pl);
    return SEER_OK;
}

static void link_drop(tp_link *l) {
    pthread_mutex_lock(&l->mu);
    const int left = --l->refs;
    pthread_mutex_unlock(&l->mu);
    if (left)
        return;
    close(l->fd);
    seer_tp_reader_free(&l->rd);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static void r_free(seer_backend *be) {
    rb *b = rb_of(be);
    tp_wbuf w = {0};
    /* the root instance says goodbye (waited: the rank's process ends its stream); a
     * context's instance is freed with what it still holds */
    if (b->inst)
        (void)post(be, TP_OP_FREE, &w);
    else
        (void)rpc0(be, TP_OP_BYE, &w);
    link_drop(b->l);
    free(b);
    free(be);
}

static seer_status wrap(tp_link *l, uint32_t inst, const seer_backend_ops *rank0, seer_backend **out) {
    seer_backend *be = calloc(1, sizeof *be);
    rb *b = calloc(1, sizeof *b);
    if (!be || !b) {
        free(be);
        free(b);
        return seer_err(SEER_ERR_OOM, "out of memory");
    }
    b->l = l;
    b->inst = inst;
    b->rank0 = rank0;
    be->ops = &remote_ops;
    be->impl = b;
    *out = be;
    return SEER_OK;
}

static seer_status r_clone(seer_backend *be, seer_backend **out) {
    rb *b = rb_of(be);
    int64_t h;
    SEER_TRY(new_handle(b, &h));
    tp_wbuf w = {0};
    seer_tp_w_int(&w, h);
    SEER_TRY(rpc0(be, TP_OP_CLONE, &w));
    pthread_mutex_lock(&b->l->mu);
    b->l->refs++;
    pthread_mutex_unlock(&b->l->mu);
    seer_status s = wrap(b->l, (uint32_t)h, b->rank0, out);
    if (s != SEER_OK)
        link_drop(b->l);
    return s;
}

static seer_status r_alloc(seer_backend *be, size_t bytes, void **out) {
    int64_t h;
    SEER_TRY(new_handle(rb_of(be), &h));
    if (bytes >= 1ull << TP_FAKE_OFF_BITS)
        return seer_err(SEER_ERR_OOM, "an allocation of %zu bytes on a rank in another process", bytes);
    tp_wbuf w = {0};
    seer_tp_w_int(&w, h);
    seer_tp_w_int(&w, (int64_t)bytes);
    SEER_TRY(rpc0(be, TP_OP_ALLOC, &w));
    *out = fake(h);
    return SEER_OK;
}

static void r_dealloc(seer_backend *be, void *p) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, p);
    (void)post(be, TP_OP_DEALLOC, &w);
}

static seer_status r_upload(seer_backend *be, void *dst, const void *src, size_t bytes) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, dst);
    seer_tp_w_bytes(&w, src, bytes);
    return post(be, TP_OP_UPLOAD, &w);
}

static seer_status r_download(seer_backend *be, void *dst, const void *src, size_t bytes) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, src);
    seer_tp_w_int(&w, (int64_t)bytes);
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, TP_OP_DOWNLOAD, &w, "b", &m, &pl));
    seer_status s = m.f[0].len == bytes ? SEER_OK
                                        : seer_err(SEER_ERR_IO, "rank %d answered a download of %zu bytes with %zu",
                                                   rb_of(be)->l->rank, bytes, m.f[0].len);
    if (s == SEER_OK && bytes)
        memcpy(dst, m.f[0].data, bytes);
    free(pl);
    return s;
}

static seer_status r_sync(seer_backend *be) {
    tp_wbuf w = {0};
    return rpc0(be, TP_OP_SYNC, &w);
}

/* ---- weights ------------------------------------------------------------------------------ */

static void set_weight(seer_weight *out, const tp_msg *m, int k, void *data) {
    out->rows = (int)m->f[k].i;
    out->cols = (int)m->f[k + 1].i;
    out->dtype = (int)m->f[k + 2].i;
    out->owned = m->f[k + 3].i != 0;
    out->data = data;
}

static seer_status r_weight_load(seer_backend *be, const gguf_tensor *t, seer_weights_kind how, seer_weight *out) {
    memset(out, 0, sizeof *out);
    int64_t h;
    SEER_TRY(new_handle(rb_of(be), &h));
    tp_wbuf w = {0};
    seer_tp_w_int(&w, h);
    seer_tp_w_int(&w, how);
    seer_tp_w_bytes(&w, t->name, t->name ? strlen(t->name) : 0);
    seer_tp_w_int(&w, t->n_dims);
    for (int k = 0; k < 4; k++)
        seer_tp_w_int(&w, (int64_t)t->ne[k]);
    seer_tp_w_int(&w, t->type);
    seer_tp_w_bytes(&w, t->data, t->nbytes);
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, TP_OP_WLOAD, &w, "iiii", &m, &pl));
    set_weight(out, &m, 0, fake(h));
    free(pl);
    return SEER_OK;
}

static void r_weight_free(seer_backend *be, seer_weight *wt) {
    tp_wbuf w = {0};
    w_weight(&w, wt);
    (void)post(be, TP_OP_WFREE, &w);
    wt->data = NULL;
}

static seer_status r_weight_concat(seer_backend *be, seer_weight *parts, int n, bool interleave, seer_weight *out) {
    memset(out, 0, sizeof *out);
    if (n < 1 || n > SEER_WEIGHT_MAX_SEG)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_concat of %d parts", n);
    int64_t h;
    SEER_TRY(new_handle(rb_of(be), &h));
    tp_wbuf w = {0};
    seer_tp_w_int(&w, h);
    seer_tp_w_int(&w, interleave);
    for (int j = 0; j < n; j++)
        w_weight(&w, &parts[j]);
    char sig[8 + 5 * SEER_WEIGHT_MAX_SEG] = "iiiiii"; /* out: rows cols dtype owned n_seg interleaved */
    for (int j = 0; j < n; j++)
        strcat(sig, "iiiii"); /* part j: rows cols dtype owned has-data */
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, TP_OP_WCONCAT, &w, sig, &m, &pl));
    set_weight(out, &m, 0, fake(h));
    out->n_seg = (int)m.f[4].i;
    out->interleaved = m.f[5].i != 0;
    for (int j = 0; j < n; j++) {
        const int k = 6 + 5 * j;
        set_weight(&parts[j], &m, k, m.f[k + 4].i ? parts[j].data : NULL);
        out->seg_rows[j] = parts[j].rows;
    }
    free(pl);
    return SEER_OK;
}

/* A synthetic weight (seer bench): drawn by the rank from seed as its backend draws it. */
static seer_status r_weight_random(seer_backend *be, int rows, int cols, uint64_t seed, float scale,
                                   seer_weight *out) {
    memset(out, 0, sizeof *out);
    int64_t h;
    SEER_TRY(new_handle(rb_of(be), &h));
    tp_wbuf w = {0};
    seer_tp_w_int(&w, h);
    seer_tp_w_int(&w, rows);
    seer_tp_w_int(&w, cols);
    seer_tp_w_int(&w, (int64_t)seed);
    seer_tp_w_dbl(&w, scale);
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, TP_OP_WRANDOM, &w, "iiii", &m, &pl));
    set_weight(out, &m, 0, fake(h));
    free(pl);
    return SEER_OK;
}

/* The draft weights' copy of a weight the rank holds, quantised there; its segments are w's. */
static seer_status r_weight_quantize(seer_backend *be, const seer_weight *wt, int dtype, seer_weight *out) {
    const seer_weight src = *wt; /* out may be wt */
    memset(out, 0, sizeof *out);
    int64_t h;
    SEER_TRY(new_handle(rb_of(be), &h));
    tp_wbuf w = {0};
    seer_tp_w_int(&w, h);
    w_weight(&w, &src);
    seer_tp_w_int(&w, dtype);
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, TP_OP_WQUANT, &w, "iiii", &m, &pl));
    *out = src;
    set_weight(out, &m, 0, fake(h));
    free(pl);
    return SEER_OK;
}

/* ---- KV storage ----------------------------------------------------------------------------- */

static seer_status r_kv_alloc(seer_backend *be, const seer_kv_geom *g, void **out) {
    int64_t h;
    SEER_TRY(new_handle(rb_of(be), &h));
    tp_wbuf w = {0};
    seer_tp_w_int(&w, h);
    tp_w_geom(&w, g);
    SEER_TRY(rpc0(be, TP_OP_KV_ALLOC, &w));
    *out = fake(h);
    return SEER_OK;
}

static seer_status r_kv_reserve(seer_backend *be, void *kv, const seer_kv_geom *g, int n_pages, int *n_committed) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, kv);
    tp_w_geom(&w, g);
    seer_tp_w_int(&w, n_pages);
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, TP_OP_KV_RESERVE, &w, "i", &m, &pl));
    *n_committed = (int)m.f[0].i;
    free(pl);
    return SEER_OK;
}

static seer_status r_kv_mem(seer_backend *be, uint64_t *bytes) {
    tp_wbuf w = {0};
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, TP_OP_KV_MEM, &w, "i", &m, &pl));
    *bytes = (uint64_t)m.f[0].i;
    free(pl);
    return SEER_OK;
}

static void r_kv_free(seer_backend *be, void *kv) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, kv);
    (void)post(be, TP_OP_KV_FREE, &w);
}

static seer_status r_kv_copy(seer_backend *be, void *kv, const seer_kv_geom *g, const seer_kv_copy *c, int n) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, kv);
    tp_w_geom(&w, g);
    seer_tp_w_int(&w, n);
    tp_w_arr(&w, c, (size_t)n, sizeof *c);
    return post(be, TP_OP_KV_COPY, &w);
}

static seer_status r_kv_move(seer_backend *be, void *kv, const seer_kv_geom *g, const int32_t *sp,
                             const int32_t *sr, const int32_t *dp, const int32_t *dr, int n) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, kv);
    tp_w_geom(&w, g);
    seer_tp_w_int(&w, n);
    tp_w_arr(&w, sp, (size_t)n, 4);
    tp_w_arr(&w, sr, (size_t)n, 4);
    tp_w_arr(&w, dp, (size_t)n, 4);
    tp_w_arr(&w, dr, (size_t)n, 4);
    return post(be, TP_OP_KV_MOVE, &w);
}

static seer_status r_kv_store(seer_backend *be, void *kv, const seer_kv_geom *g, int layer, const float *k,
                              const float *v, const int32_t *page, const int32_t *row, int T) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, kv);
    tp_w_geom(&w, g);
    seer_tp_w_int(&w, layer);
    tp_w_rptr(&w, k);
    tp_w_rptr(&w, v);
    seer_tp_w_int(&w, T);
    seer_tp_w_idx(&w, be, TP_IDX_PAGE, page, T);
    seer_tp_w_idx(&w, be, TP_IDX_ROW, row, T);
    return post(be, TP_OP_KV_STORE, &w);
}

static seer_status r_kv_read(seer_backend *be, const void *kv, const seer_kv_geom *g, int layer, int which,
                             const int32_t *page, const int32_t *row, int n, float *out) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, kv);
    tp_w_geom(&w, g);
    seer_tp_w_int(&w, layer);
    seer_tp_w_int(&w, which);
    seer_tp_w_int(&w, n);
    tp_w_arr(&w, page, (size_t)n, 4);
    tp_w_arr(&w, row, (size_t)n, 4);
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, TP_OP_KV_READ, &w, "b", &m, &pl));
    const void *a;
    seer_status s = seer_tp_msg_array(&m, 0, (size_t)n * g->n_kv_heads * g->head_dim, sizeof(float), &a, "kv_read's answer");
    if (s == SEER_OK && n > 0)
        memcpy(out, a, m.f[0].len);
    free(pl);
    return s;
}

static seer_status r_kv_fill_random(seer_backend *be, void *kv, const seer_kv_geom *g, const int32_t *pages,
                                    int n_pages, int row0, int n, uint64_t seed, float scale) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, kv);
    tp_w_geom(&w, g);
    seer_tp_w_int(&w, n_pages);
    tp_w_arr(&w, pages, n_pages > 0 ? (size_t)n_pages : 0, 4);
    seer_tp_w_int(&w, row0);
    seer_tp_w_int(&w, n);
    seer_tp_w_int(&w, (int64_t)seed);
    seer_tp_w_dbl(&w, scale);
    return post(be, TP_OP_KV_FILL, &w);
}

/* ---- the KV cache's host tier ------------------------------------------------------------ */

/* A page's bytes as the rank stores it, asked once per geometry (0 where the link failed). */
static size_t r_kv_page_bytes(seer_backend *be, const seer_kv_geom *g) {
    rb *b = rb_of(be);
    pthread_mutex_lock(&b->l->mu);
    size_t pb = b->pb && !memcmp(&b->pb_geom, g, sizeof *g) ? b->pb : 0;
    pthread_mutex_unlock(&b->l->mu);
    if (pb)
        return pb;
    tp_wbuf w = {0};
    tp_w_geom(&w, g);
    tp_msg m;
    void *pl;
    if (rpc(be, TP_OP_KV_PAGE_BYTES, &w, "i", &m, &pl) != SEER_OK)
        return 0;
    pb = m.f[0].i > 0 ? (size_t)m.f[0].i : 0;
    free(pl);
    pthread_mutex_lock(&b->l->mu);
    b->pb = pb;
    b->pb_geom = *g;
    pthread_mutex_unlock(&b->l->mu);
    return pb;
}

/* Pages to the host come back in the answer (waited for: the caller reads them next); pages
 * from the host go in the message, posted. Either way the rank copies them in the stream's
 * order, so the copies are complete when this returns as far as any later op can tell: the
 * tickets are done at once. */
static seer_status r_kv_host_copy(seer_backend *be, void *kv, const seer_kv_geom *g, void *host, size_t stride,
                                  const int32_t *pages, const int32_t *slots, int n, bool to_host,
                                  uint64_t *ticket) {
    *ticket = 0;
    const size_t pb = r_kv_page_bytes(be, g);
    if (!pb)
        return seer_err(SEER_ERR_IO, "rank %d: no page size for its KV storage (%s)", rb_of(be)->l->rank,
                        seer_last_error());
    SEER_TRY(seer_kv_host_check(g, stride, pb, pages, slots, n));
    if (n <= 0)
        return SEER_OK;
    tp_wbuf w = {0};
    tp_w_rptr(&w, kv);
    tp_w_geom(&w, g);
    seer_tp_w_int(&w, n);
    tp_w_arr(&w, pages, (size_t)n, 4);
    if (!to_host) {
        char *buf = seer_malloc_array((size_t)n, pb);
        if (!buf) {
            seer_tp_w_free(&w);
            return seer_err(SEER_ERR_OOM, "out of memory for %d pages", n);
        }
        for (int i = 0; i < n; i++)
            memcpy(buf + (size_t)i * pb, (const char *)host + (size_t)slots[i] * stride, pb);
        seer_tp_w_bytes(&w, buf, (size_t)n * pb);
        free(buf);
        return post(be, TP_OP_KV_HOST_IN, &w);
    }
    tp_msg m;
    void *pl;
    SEER_TRY(rpc(be, TP_OP_KV_HOST_OUT, &w, "b", &m, &pl));
    const void *a;
    seer_status s = seer_tp_msg_array(&m, 0, (size_t)n, pb, &a, "kv_host_copy's answer");
    for (int i = 0; i < n && s == SEER_OK; i++)
        memcpy((char *)host + (size_t)slots[i] * stride, (const char *)a + (size_t)i * pb, pb);
    free(pl);
    return s;
}

static seer_status r_kv_host_done(seer_backend *be, uint64_t ticket, bool *done) {
    (void)be;
    (void)ticket;
    *done = true;
    return SEER_OK;
}

static seer_status r_kv_host_wait(seer_backend *be, uint64_t ticket) {
    (void)be;
    (void)ticket;
    return SEER_OK;
}

void seer_tp_remote_fill_compute(seer_backend_ops *o);

static seer_status r_init_ops(void);

seer_status seer_backend_remote_init(int fd, int rank, int timeout_ms, const seer_backend_ops *ops,
                                     seer_backend **out) {
    *out = NULL;
    tp_link *l = calloc(1, sizeof *l);
    if (!l || pthread_mutex_init(&l->mu, NULL) != 0) {
        free(l);
        close(fd);
        return seer_err(SEER_ERR_OOM, "out of memory");
    }
    l->fd = fd;
    l->rd = seer_tp_reader(fd);
    l->rank = rank;
    l->timeout_ms = timeout_ms;
    l->refs = 1;
    (void)r_init_ops();
    seer_status s = wrap(l, 0, ops, out);
    if (s != SEER_OK)
        link_drop(l);
    return s;
}

bool seer_backend_is_remote(const seer_backend *be) { return be && be->ops == &remote_ops; }

const seer_backend_ops *seer_tp_remote_rank0(const seer_backend *be) { return ((const rb *)be->impl)->rank0; }

void seer_tp_remote_keep_idx(seer_backend *be, const int32_t *const *a, const int *n) {
    rb *b = rb_of(be);
    for (int k = 0; k < TP_IDX_N; k++) {
        b->idx[k] = a[k];
        b->idx_n[k] = a[k] ? n[k] : 0;
    }
}

void seer_tp_w_idx(tp_wbuf *w, seer_backend *be, int role, const int32_t *a, int T) {
    const rb *b = rb_of(be);
    const int have = b->idx_n[role];
    const bool padded = a && a == b->idx[role] && T > have;
    int32_t *pad = padded ? malloc((size_t)T * sizeof *pad) : NULL;
    if (!pad) { /* not a padded call's; or no memory, and the rank refuses the short array */
        tp_w_arr(w, a, padded ? (size_t)have : T > 0 ? (size_t)T : 0, 4);
        return;
    }
    memcpy(pad, a, (size_t)have * sizeof *pad);
    for (int i = have; i < T; i++)
        pad[i] = role == TP_IDX_PAGE ? -1 : 0;
    tp_w_arr(w, pad, (size_t)T, 4);
    free(pad);
}

static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static void fill_ops(void) {
    seer_backend_ops *o = &remote_ops;
    o->name = "remote";
    o->free = r_free;
    o->exec_clone = r_clone;
    o->alloc = r_alloc;
    o->dealloc = r_dealloc;
    o->upload = r_upload;
    o->download = r_download;
    o->sync = r_sync;
    o->weight_load = r_weight_load;
    o->weight_free = r_weight_free;
    o->weight_concat = r_weight_concat;
    o->kv_alloc = r_kv_alloc;
    o->kv_reserve = r_kv_reserve;
    o->kv_mem_available = r_kv_mem;
    o->kv_free = r_kv_free;
    o->kv_copy_pages = r_kv_copy;
    o->kv_move_rows = r_kv_move;
    o->kv_store = r_kv_store;
    o->kv_read = r_kv_read;
    o->kv_fill_random = r_kv_fill_random;
    o->weight_random = r_weight_random;
    o->weight_quantize = r_weight_quantize;
    o->kv_page_bytes = r_kv_page_bytes;
    o->kv_host_copy = r_kv_host_copy;
    o->kv_host_done = r_kv_host_done;
    o->kv_host_wait = r_kv_host_wait;
    seer_tp_remote_fill_compute(o);
}

static seer_status r_init_ops(void) {
    pthread_once(&ops_once, fill_ops);
    return SEER_OK;
}

void seer_tp_remote_mask_ops(seer_backend_ops *o) {
    (void)r_init_ops();
    const seer_backend_ops *r = &remote_ops;
    /* every op a rank's thread may call on its own instance, where the remote side lacks it:
     * the host tier of weights (weight_bytes, stage, stage_wait), the
     * sparse FFN's and weight_rows (which the tensor-parallel backend has none of either),
     * h2d_bandwidth, make_current (a remote rank's device is its process's) */
#define MASK(f) \
    if (!r->f)  \
        o->f = NULL;
    MASK(exec_clone) MASK(weight_quantize) MASK(kv_page_bytes) MASK(kv_host_copy)
    MASK(kv_host_done) MASK(kv_host_wait) MASK(kv_read) MASK(batch_begin) MASK(forward_begin) MASK(forward_end)
    MASK(forward_begin_hold) MASK(forward_end_hold) MASK(forward_launch) MASK(weight_concat) MASK(matmul_split)
    MASK(matmul_add) MASK(matmul_glu) MASK(norm_matmul_split) MASK(ffn_glu) MASK(rope_kv_store) MASK(scale)
    MASK(geglu) MASK(softcap) MASK(weight_rows) MASK(ffn_act_stats) MASK(weight_gather) MASK(ffn_act_hist)
    MASK(weight_transpose) MASK(ffn_cats) MASK(weight_random)
    MASK(weight_random_split) MASK(kv_fill_random) MASK(h2d_bandwidth)
    MASK(make_current) MASK(weight_bytes) MASK(stage) MASK(stage_wait)
#undef MASK
}
