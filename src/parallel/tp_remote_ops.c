/*
 * tp_remote_ops.c: the compute ops of a rank in another process (tp_remote.c's backend): each
 * op's arguments written as one message (tp_remote.h's op kinds), in the order tp_serve.c reads
 * them. Pointers go as handles, host arrays by value with their lengths. Each is posted (not
 * waited for) except argmax_rows, whose ids come back.
 * Also batch_begin and the recorded-call pair around the ops of a forward call.
 * Not for: memory, weights and KV storage (tp_remote.c).
 */
#include "parallel/tp_remote.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

static void w_weight(tp_wbuf *w, const seer_weight *wt) { tp_w_rptr(w, wt ? wt->data : NULL); }

/* every compute op but argmax_rows answers with its status alone: posted, not waited for */
static seer_status send0(seer_backend *be, uint32_t op, tp_wbuf *w) { return seer_tp_remote_post(be, op, w); }

static seer_status r_embed(seer_backend *be, float *y, const seer_weight *emb, const int32_t *tokens, int T) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, y);
    w_weight(&w, emb);
    seer_tp_w_int(&w, T);
    seer_tp_w_idx(&w, be, TP_IDX_TOKENS, tokens, T);
    return send0(be, TP_OP_EMBED, &w);
}

static seer_status r_rmsnorm(seer_backend *be, float *y, const float *x, const float *wn, int T, int D, float eps) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, y);
    tp_w_rptr(&w, x);
    tp_w_rptr(&w, wn);
    seer_tp_w_int(&w, T);
    seer_tp_w_int(&w, D);
    seer_tp_w_dbl(&w, eps);
    return send0(be, TP_OP_RMSNORM, &w);
}

static seer_status r_matmul(seer_backend *be, float *y, const float *x, const seer_weight *wt, const float *bias,
                            int T) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, y);
    tp_w_rptr(&w, x);
    w_weight(&w, wt);
    tp_w_rptr(&w, bias);
    seer_tp_w_int(&w, T);
    return send0(be, TP_OP_MATMUL, &w);
}

static seer_status r_matmul_add(seer_backend *be, float *y, const float *x, const seer_weight *wt, int T) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, y);
    tp_w_rptr(&w, x);
    w_weight(&w, wt);
    seer_tp_w_int(&w, T);
    return send0(be, TP_OP_MATMUL_ADD, &w);
}

static seer_status r_matmul_glu(seer_backend *be, float *y, const float *x, const seer_weight *wt, int T) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, y);
    tp_w_rptr(&w, x);
    w_weight(&w, wt);
    seer_tp_w_int(&w, T);
    return send0(be, TP_OP_MATMUL_GLU, &w);
}

/* the segments' outputs and biases after the common arguments */
static void w_split(tp_wbuf *w, float *const *ys, const seer_weight *wt, const float *const *biases) {
    const int nseg = wt->n_seg ? wt->n_seg : 1;
    seer_tp_w_int(w, nseg);
    for (int j = 0; j < SEER_WEIGHT_MAX_SEG; j++) {
        tp_w_rptr(w, j < nseg ? ys[j] : NULL);
        tp_w_rptr(w, j < nseg && biases ? biases[j] : NULL);
    }
    seer_tp_w_int(w, biases != NULL);
}

static seer_status r_matmul_split(seer_backend *be, float *const *ys, const float *x, const seer_weight *wt,
                                  const float *const *biases, int T) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, x);
    w_weight(&w, wt);
    seer_tp_w_int(&w, T);
    w_split(&w, ys, wt, biases);
    return send0(be, TP_OP_MATMUL_SPLIT, &w);
}

static seer_status r_norm_matmul_split(seer_backend *be, float *const *ys, float *h, const float *x,
                                       const float *wn, float eps, const seer_weight *wt,
                                       const float *const *biases, int T) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, x);
    w_weight(&w, wt);
    seer_tp_w_int(&w, T);
    w_split(&w, ys, wt, biases);
    tp_w_rptr(&w, h);
    tp_w_rptr(&w, wn);
    seer_tp_w_dbl(&w, eps);
    return send0(be, TP_OP_NORM_MATMUL_SPLIT, &w);
}

static seer_status r_ffn_glu(seer_backend *be, float *x, float *h, const float *wn, float eps, const seer_weight *wgu,
                             const seer_weight *wdown, float *g, int T) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, x);
    tp_w_rptr(&w, h);
    tp_w_rptr(&w, wn);
    seer_tp_w_dbl(&w, eps);
    w_weight(&w, wgu);
    w_weight(&w, wdown);
    tp_w_rptr(&w, g);
    seer_tp_w_int(&w, T);
    return send0(be, TP_OP_FFN_GLU, &w);
}

static seer_status r_rope(seer_backend *be, float *x, const int32_t *pos, int T, int nh, int Dh, const float *inv_freq,
                          int neox) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, x);
    seer_tp_w_int(&w, T);
    seer_tp_w_idx(&w, be, TP_IDX_POS, pos, T);
    seer_tp_w_int(&w, nh);
    seer_tp_w_int(&w, Dh);
    tp_w_rptr(&w, inv_freq);
    seer_tp_w_int(&w, neox);
    return send0(be, TP_OP_ROPE, &w);
}

static seer_status r_rope_kv_store(seer_backend *be, float *q, float *k, const float *v, const int32_t *pos, int T,
                                   int H, int Hkv, int Dh, const float *inv_freq, int neox, void *kv,
                                   const seer_kv_geom *g, int layer, const int32_t *page, const int32_t *row) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, q);
    tp_w_rptr(&w, k);
    tp_w_rptr(&w, v);
    seer_tp_w_int(&w, T);
    seer_tp_w_idx(&w, be, TP_IDX_POS, pos, T);
    seer_tp_w_int(&w, H);
    seer_tp_w_int(&w, Hkv);
    seer_tp_w_int(&w, Dh);
    tp_w_rptr(&w, inv_freq);
    seer_tp_w_int(&w, neox);
    tp_w_rptr(&w, kv);
    tp_w_geom(&w, g);
    seer_tp_w_int(&w, layer);
    seer_tp_w_idx(&w, be, TP_IDX_PAGE, page, T);
    seer_tp_w_idx(&w, be, TP_IDX_ROW, row, T);
    return send0(be, TP_OP_ROPE_KV_STORE, &w);
}

/* An attention batch (backend.h's seer_attn_batch), views included. */
static void w_batch(tp_wbuf *w, const seer_attn_batch *ab) {
    const int T = ab->T, ns = ab->n_seq;
    seer_tp_w_int(w, T);
    seer_tp_w_int(w, ab->n_heads);
    seer_tp_w_int(w, ab->n_kv_heads);
    seer_tp_w_int(w, ab->head_dim);
    seer_tp_w_dbl(w, ab->scale);
    seer_tp_w_int(w, ab->page_size);
    seer_tp_w_int(w, ns);
    seer_tp_w_int(w, ab->max_pages);
    tp_w_arr(w, ab->seq_pages, (size_t)ns * (size_t)ab->max_pages, 4);
    tp_w_arr(w, ab->seq_len0, (size_t)ns, 4);
    tp_w_arr(w, ab->seq_tok_off, (size_t)ns + 1, 4);
    tp_w_arr(w, ab->seq_toks, (size_t)T, 4);
    tp_w_arr(w, ab->tok_seq, (size_t)T, 4);
    tp_w_arr(w, ab->tok_slot, (size_t)T, 4);
    tp_w_opt(w, ab->mask, (size_t)T * (size_t)T, 1);
    seer_tp_w_int(w, ab->kv_quant);
    tp_w_opt(w, ab->seq_prompt, (size_t)ns, 4);
    seer_tp_w_int(w, ab->window);
    tp_w_opt(w, ab->tok_pos, (size_t)T, 4);
    seer_tp_w_dbl(w, ab->softcap);
    /* views: [n_seq][5] (present, n, layers, heads, tail_start), then every present view's
     * indices one after another */
    int32_t *meta = ns > 0 ? calloc((size_t)ns * 5, sizeof *meta) : NULL;
    size_t n_idx = 0;
    for (int s = 0; s < ns && meta; s++) {
        const seer_attn_view *v = ab->seq_view ? ab->seq_view[s] : NULL;
        if (!v)
            continue;
        meta[s * 5] = 1;
        meta[s * 5 + 1] = v->n;
        meta[s * 5 + 2] = v->n_layers_view;
        meta[s * 5 + 3] = v->n_heads_view;
        meta[s * 5 + 4] = v->tail_start;
        n_idx += (size_t)v->n * v->n_layers_view * v->n_heads_view;
    }
    if (ns > 0 && !meta)
        w->oom = true;
    tp_w_arr(w, meta, meta ? (size_t)ns * 5 : 0, 4);
    int32_t *idx = n_idx ? malloc(n_idx * sizeof *idx) : NULL;
    if (n_idx && !idx)
        w->oom = true;
    size_t at = 0;
    for (int s = 0; s < ns && meta && idx; s++) {
        const seer_attn_view *v = ab->seq_view ? ab->seq_view[s] : NULL;
        if (!v)
            continue;
        const size_t c = (size_t)v->n * v->n_layers_view * v->n_heads_view;
        memcpy(idx + at, v->idx, c * sizeof *idx);
        at += c;
    }
    tp_w_arr(w, idx, idx ? n_idx : 0, 4);
    free(idx);
    free(meta);
}

static seer_status r_attention(seer_backend *be, float *out, const float *q, const void *kv, const seer_kv_geom *g,
                               int layer, const seer_attn_batch *ab) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, out);
    tp_w_rptr(&w, q);
    tp_w_rptr(&w, kv);
    tp_w_geom(&w, g);
    seer_tp_w_int(&w, layer);
    w_batch(&w, ab);
    return send0(be, TP_OP_ATTENTION, &w);
}

static seer_status elem3(seer_backend *be, uint32_t op, float *y, const float *a, const float *b, size_t n) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, y);
    tp_w_rptr(&w, a);
    tp_w_rptr(&w, b);
    seer_tp_w_int(&w, (int64_t)n);
    return send0(be, op, &w);
}

static seer_status r_swiglu(seer_backend *be, float *y, const float *g, const float *u, size_t n) {
    return elem3(be, TP_OP_SWIGLU, y, g, u, n);
}

static seer_status r_geglu(seer_backend *be, float *y, const float *g, const float *u, size_t n) {
    return elem3(be, TP_OP_GEGLU, y, g, u, n);
}

static seer_status r_add(seer_backend *be, float *y, const float *x, size_t n) {
    return elem3(be, TP_OP_ADD, y, x, NULL, n);
}

static seer_status scal(seer_backend *be, uint32_t op, float *x, float s, size_t n) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, x);
    seer_tp_w_dbl(&w, s);
    seer_tp_w_int(&w, (int64_t)n);
    return send0(be, op, &w);
}

static seer_status r_scale(seer_backend *be, float *x, float s, size_t n) { return scal(be, TP_OP_SCALE, x, s, n); }

static seer_status r_softcap(seer_backend *be, float *x, float c, size_t n) {
    return scal(be, TP_OP_SOFTCAP, x, c, n);
}

static seer_status r_gather_rows(seer_backend *be, float *y, const float *x, const int32_t *rows, int n, int D) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, y);
    tp_w_rptr(&w, x);
    seer_tp_w_int(&w, n);
    seer_tp_w_idx(&w, be, TP_IDX_OUT, rows, n);
    seer_tp_w_int(&w, D);
    return send0(be, TP_OP_GATHER_ROWS, &w);
}

static seer_status r_argmax_rows(seer_backend *be, int32_t *ids, const float *logits, int n, int V) {
    tp_wbuf w = {0};
    tp_w_rptr(&w, logits);
    seer_tp_w_int(&w, n);
    seer_tp_w_int(&w, V);
    tp_msg m;
    void *pl;
    SEER_TRY(seer_tp_remote_rpc(be, TP_OP_ARGMAX, &w, "b", &m, &pl));
    const void *a;
    seer_status s = seer_tp_msg_array(&m, 0, (size_t)n, 4, &a, "argmax_rows' answer");
    if (s == SEER_OK && n > 0)
        memcpy(ids, a, (size_t)n * 4);
    free(pl);
    return s;
}

/* ---- around a forward call ------------------------------------------------------------ */

/* Sent only where rank 0's backend has batch_begin (a rank of the same kind then does): the
 * batch as attention sends it, so that the rank decodes both at the same addresses. */
static seer_status r_batch_begin(seer_backend *be, const seer_attn_batch *ab, const int32_t *tokens,
                                 const int32_t *pos, const int32_t *page, const int32_t *row,
                                 const int32_t *out_rows, int n_out) {
    if (!seer_tp_remote_rank0(be)->batch_begin)
        return SEER_OK;
    if (!ab)
        return seer_err(SEER_ERR_INVALID_ARG, "batch_begin without a batch on a rank in another process");
    tp_wbuf w = {0};
    w_batch(&w, ab);
    const int32_t *a[TP_IDX_N] = {tokens, pos, page, row, out_rows};
    int n[TP_IDX_N];
    for (int k = 0; k < TP_IDX_N; k++) {
        n[k] = k == TP_IDX_OUT ? (n_out > 0 ? n_out : 0) : ab->T;
        tp_w_opt(&w, a[k], (size_t)n[k], 4);
    }
    seer_tp_remote_keep_idx(be, a, n);
    seer_tp_w_int(&w, n_out);
    return seer_tp_remote_post(be, TP_OP_BATCH_BEGIN, &w);
}

/* The rank's recorded calls: begin and end wait for their answers (sizes, done, redo), the
 * launch is posted. The key goes as a number: it names rank 0's buffers, whose copies on the
 * rank are as fixed as they are. */
static seer_status fwd_begin(seer_backend *be, const void *key, int T_cap, int *T, int *n_out, bool *done,
                             bool hold) {
    tp_wbuf w = {0};
    seer_tp_w_int(&w, (int64_t)(uintptr_t)key);
    seer_tp_w_int(&w, T_cap);
    seer_tp_w_int(&w, *T);
    seer_tp_w_int(&w, *n_out);
    seer_tp_w_int(&w, hold);
    tp_msg m;
    void *pl;
    SEER_TRY(seer_tp_remote_rpc(be, TP_OP_FWD_BEGIN, &w, "iii", &m, &pl));
    seer_status s = SEER_OK;
    if (m.f[0].i < 0 || m.f[0].i > T_cap || m.f[1].i < 0 || m.f[1].i > T_cap)
        s = seer_err(SEER_ERR_IO, "a rank's forward_begin answered sizes %lld and %lld for room of %d",
                     (long long)m.f[0].i, (long long)m.f[1].i, T_cap);
    if (s == SEER_OK) {
        *T = (int)m.f[0].i;
        *n_out = (int)m.f[1].i;
        *done = m.f[2].i != 0;
    }
    free(pl);
    return s;
}

static seer_status fwd_end(seer_backend *be, seer_status st, bool *redo, bool hold) {
    tp_wbuf w = {0};
    seer_tp_w_int(&w, st);
    seer_tp_w_int(&w, hold);
    tp_msg m;
    void *pl;
    *redo = false;
    SEER_TRY(seer_tp_remote_rpc(be, TP_OP_FWD_END, &w, "i", &m, &pl));
    *redo = m.f[0].i != 0;
    free(pl);
    return SEER_OK;
}

static seer_status r_forward_begin(seer_backend *be, const void *key, int T_cap, int *T, int *n_out, bool *done) {
    return fwd_begin(be, key, T_cap, T, n_out, done, false);
}

static seer_status r_forward_begin_hold(seer_backend *be, const void *key, int T_cap, int *T, int *n_out,
                                        bool *done) {
    return fwd_begin(be, key, T_cap, T, n_out, done, true);
}

static seer_status r_forward_end(seer_backend *be, seer_status s, bool *redo) { return fwd_end(be, s, redo, false); }

static seer_status r_forward_end_hold(seer_backend *be, seer_status s, bool *redo) {
    return fwd_end(be, s, redo, true);
}

static seer_status r_forward_launch(seer_backend *be, bool run) {
    tp_wbuf w = {0};
    seer_tp_w_int(&w, run);
    return seer_tp_remote_post(be, TP_OP_FWD_LAUNCH, &w);
}

void seer_tp_remote_fill_compute(seer_backend_ops *o) {
    o->batch_begin = r_batch_begin;
    o->forward_begin = r_forward_begin;
    o->forward_end = r_forward_end;
    o->forward_begin_hold = r_forward_begin_hold;
    o->forward_end_hold = r_forward_end_hold;
    o->forward_launch = r_forward_launch;
    o->embed = r_embed;
    o->rmsnorm = r_rmsnorm;
    o->matmul = r_matmul;
    o->matmul_add = r_matmul_add;
    o->matmul_glu = r_matmul_glu;
    o->matmul_split = r_matmul_split;
    o->norm_matmul_split = r_norm_matmul_split;
    o->ffn_glu = r_ffn_glu;
    o->rope = r_rope;
    o->rope_kv_store = r_rope_kv_store;
    o->attention = r_attention;
    o->swiglu = r_swiglu;
    o->geglu = r_geglu;
    o->add = r_add;
    o->scale = r_scale;
    o->softcap = r_softcap;
    o->gather_rows = r_gather_rows;
    o->argmax_rows = r_argmax_rows;
}
