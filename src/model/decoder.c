/*
 * decoder.c: the forward pass of every family, as a sequence of backend ops. The family's
 * descriptor (arch/arch.h) and the tensors its layers have decide which blocks run:
 *
 *   x = embed(tokens)                                  (times sqrt(D): embed_scale)
 *   per layer: q, k, v = Wq·n(x), Wk·n(x), Wv·n(x)      (+ biases where bound)
 *              q, k = n_q(q), n_k(k) per head           (where q_norm, k_norm are bound)
 *              a = Wo · attn(rope(q), rope(k), v)       (the layer's RoPE and window)
 *              x += a                                   (x += n_post(a): attn_post_norm)
 *              f = Wdown · (act(Wgate·n(x)) * Wup·n(x)) (act: SiLU or tanh-GELU)
 *              x += f                                   (x += n_post(f): ffn_post_norm)
 *   logits = Wout · n(x[rows asked for])                (c tanh(logits / c): final_softcap)
 *
 * Attention caps its scores where the family has attention soft-capping
 * (seer_attn_batch.softcap, set for every layer), and takes the RoPE frequencies of the
 * layer (a windowed layer's own base) and of the context (LongRoPE's long factors past the
 * trained context).
 *
 * The Llama path (no optional block) issues exactly the ops it always did, fused forms
 * included, so its outputs do not change with the families beside it.
 */
#include "backend/act_hist.h"
#include "model/model.h"
#include "util/error.h"

#include <math.h>

/* x += W in, fused where the backend can; tmp [T][D] is scratch otherwise. */
static seer_status residual(seer_backend *be, const seer_backend_ops *op, float *x, const float *in,
                            const seer_weight *w, float *tmp, int T, int D) {
    if (op->matmul_add)
        return op->matmul_add(be, x, in, w, T);
    SEER_TRY(op->matmul(be, tmp, in, w, NULL, T));
    return op->add(be, x, tmp, (size_t)T * D);
}

/* x += n_post(W in) (a sandwich norm) or x += W in; tmp [T][D] is scratch. */
static seer_status residual_norm(seer_backend *be, const seer_backend_ops *op, float *x, const float *in,
                                 const seer_weight *w, const float *post, float eps, float *tmp, int T,
                                 int D) {
    if (!post)
        return residual(be, op, x, in, w, tmp, T, D);
    SEER_TRY(op->matmul(be, tmp, in, w, NULL, T));
    SEER_TRY(op->rmsnorm(be, tmp, tmp, post, T, D, eps));
    return op->add(be, x, tmp, (size_t)T * D);
}

/* q, k, v = Wq n(x), Wk n(x), Wv n(x) (+ biases), then the per-head norms; h is scratch. */
static seer_status qkv(seer_backend *be, const seer_backend_ops *op, const seer_scratch *s,
                       const seer_layer *L, int T, int D, int H, int Hkv, int Dh, float eps) {
    float *const ys[3] = {s->q, s->k, s->v};
    const float *const bs[3] = {L->bq, L->bk, L->bv};
    if (L->wqkv.data && op->norm_matmul_split) {
        SEER_TRY(op->norm_matmul_split(be, ys, s->h, s->x, L->attn_norm, eps, &L->wqkv, bs, T));
    } else if (!L->wqkv.data && op->norm_matmuls) { /* the three in their own types (not joined) */
        const seer_weight ws[3] = {L->wq, L->wk, L->wv};
        SEER_TRY(op->norm_matmuls(be, ys, s->h, s->x, L->attn_norm, eps, ws, 3, bs, T));
    } else {
        SEER_TRY(op->rmsnorm(be, s->h, s->x, L->attn_norm, T, D, eps));
        if (L->wqkv.data) {
            SEER_TRY(op->matmul_split(be, ys, s->h, &L->wqkv, bs, T));
        } else {
            SEER_TRY(op->matmul(be, s->q, s->h, &L->wq, L->bq, T));
            SEER_TRY(op->matmul(be, s->k, s->h, &L->wk, L->bk, T));
            SEER_TRY(op->matmul(be, s->v, s->h, &L->wv, L->bv, T));
        }
    }
    /* RMSNorm of each head: the rows of q [T][H][Dh] are its T*H heads */
    if (L->q_norm)
        SEER_TRY(op->rmsnorm(be, s->q, s->q, L->q_norm, T * H, Dh, eps));
    if (L->k_norm)
        SEER_TRY(op->rmsnorm(be, s->k, s->k, L->k_norm, T * Hkv, Dh, eps));
    return SEER_OK;
}

/* What a call's FFN does beyond the layer's (sparse_ffn.c). */
typedef struct {
    float *stats;  /* Griffin's statistic [F] to add the first T_stats rows' activation to */
    double *hist;  /* CATS's histogram [SEER_ACT_HIST_BINS] to add their |silu(gate)| to */
    int T_stats;
    float thr;     /* >= 0: a CATS call at this threshold (its layer: the target's gate and
                    * up, down transposed) */
} ffn_extra;

/* x += Wdown glu(Wgate n(x), Wup n(x)); h, g and u are scratch. */
static seer_status ffn(seer_backend *be, const seer_backend_ops *op, const seer_scratch *s,
                       const seer_layer *L, seer_arch_act act, int T, int D, int F, float eps,
                       const ffn_extra *ex) {
    const bool plain = act == SEER_ACT_SILU && !L->ffn_post_norm;
    if (ex->thr >= 0) { /* CATS: the gate in full, up and down at the kept neurons */
        SEER_TRY(op->rmsnorm(be, s->h, s->x, L->ffn_norm, T, D, eps));
        const bool il = L->wgu.interleaved;
        return op->ffn_cats(be, s->x, s->g, s->h, il ? &L->wgu : &L->w_gate, il ? NULL : &L->w_up, &L->w_down,
                            ex->thr, T);
    }
    if (plain && L->wgu.interleaved && op->ffn_glu && !ex->stats && !ex->hist)
        return op->ffn_glu(be, s->x, s->h, L->ffn_norm, eps, &L->wgu, &L->w_down, s->g, T);
    SEER_TRY(op->rmsnorm(be, s->h, s->x, L->ffn_norm, T, D, eps));
    if (L->wgu.interleaved) { /* only SiLU's gate and up are interleaved (seer_model_fuse) */
        SEER_TRY(op->matmul_glu(be, s->g, s->h, &L->wgu, T));
        if (ex->hist) /* the gate has no rows of its own: the op forms it again, into u */
            SEER_TRY(op->ffn_act_hist(be, ex->hist, s->u, s->h, &L->wgu, ex->T_stats, F));
    } else {
        if (L->wgu.data) {
            float *const ys[2] = {s->g, s->u};
            SEER_TRY(op->matmul_split(be, ys, s->h, &L->wgu, NULL, T));
        } else {
            SEER_TRY(op->matmul(be, s->g, s->h, &L->w_gate, NULL, T));
            SEER_TRY(op->matmul(be, s->u, s->h, &L->w_up, NULL, T));
        }
        if (ex->hist) /* the gate's pre-activation, before the product overwrites it */
            SEER_TRY(op->ffn_act_hist(be, ex->hist, s->g, NULL, NULL, ex->T_stats, F));
        if (act == SEER_ACT_GELU_TANH)
            SEER_TRY(op->geglu(be, s->g, s->g, s->u, (size_t)T * F));
        else
            SEER_TRY(op->swiglu(be, s->g, s->g, s->u, (size_t)T * F));
    }
    if (ex->stats) /* the sparse FFN's statistic (sparse_ffn.c) */
        SEER_TRY(op->ffn_act_stats(be, ex->stats, s->g, ex->T_stats, F, s->h)); /* h: free until the residual */
    return residual_norm(be, op, s->x, s->g, &L->w_down, L->ffn_post_norm, eps, s->h, T, D);
}

/* Downloads the rows of q that the call captures (seer_batch.capture) for layer l. */
static seer_status capture_q(seer_context *ctx, int l, int T, size_t qd) {
    const seer_backend_ops *op = ctx->be->ops;
    int k = 0, n_cap = 0;
    for (int i = 0; i < T; i++)
        n_cap += ctx->cap_rows[i] != 0;
    for (int i = 0; i < T; i++)
        if (ctx->cap_rows[i])
            SEER_TRY(op->download(ctx->be, ctx->cap_out + ((size_t)l * n_cap + k++) * qd,
                                  ctx->s.q + i * qd, qd * sizeof(float)));
    return SEER_OK;
}

/* The ops of one forward call over T rows (>= ab->T when the backend pads to a recorded
 * shape), logits for the first n_out gathered rows. */
static seer_status run_ops(seer_context *ctx, const int32_t *tokens, const int32_t *pos,
                           const seer_attn_batch *ab, const int32_t *out_rows, int T, int n_out) {
    const seer_model *m = ctx->model;
    const seer_backend_ops *op = ctx->be->ops;
    seer_backend *be = ctx->be;
    const seer_model_info *in = &m->info;
    const seer_scratch *s = &ctx->s;
    const int D = in->dim, F = in->ffn_dim;
    const int H = in->n_heads, Hkv = in->n_kv_heads, Dh = in->head_dim;
    const float eps = in->norm_eps;
    const seer_arch_desc *d = m->desc;

    const seer_layer *layers = ctx->draft_call ? m->draft_layers : m->layers;
    /* a sparse FFN's call: the compact layers (sparse_ffn.c), of fewer neurons */
    const seer_layer *ffn_layers = ctx->ffn_layers ? ctx->ffn_layers : layers;
    const int F_call = ctx->ffn_layers ? seer_sparse_ffn_neurons(ctx) : F;
    const seer_weight *head = ctx->draft_call ? &m->draft_output : &m->output;
    seer_attn_batch abw; /* a windowed layer's batch */
    if (m->window) {
        abw = *ab;
        abw.window = m->window;
    }

    /* LongRoPE: the long factors where this context is longer than the trained one, as
     * llama.cpp picks them by its context size */
    const float *global_fr =
        m->inv_freq_long && ctx->params.n_ctx > m->rope_orig_ctx ? m->inv_freq_long : m->inv_freq;

    /* layers in host memory (host_weights.c): the first two streamed layers' copies start
     * now, under the resident layers' compute, and each streamed layer's ops are followed by
     * the copy of the one two ahead into the slot they read */
    const bool host = !ctx->draft_call && m->host;
    if (host) {
        SEER_TRY(seer_host_stage(ctx, m->n_resident));
        SEER_TRY(seer_host_stage(ctx, m->n_resident + 1));
    }
    SEER_TRY(op->embed(be, s->x, &m->tok_embd, tokens, T));
    if (d->embed_scale)
        SEER_TRY(op->scale(be, s->x, sqrtf((float)D), (size_t)T * D));
    for (int l = 0; l < in->n_layers; l++) {
        const seer_layer *L = &layers[l];
        seer_layer staged;
        if (host)
            SEER_TRY(seer_host_layer_get(ctx, l, &L, &staged));
        const bool windowed = m->window && seer_arch_layer_windowed(&m->hp, l);
        const float *fr = windowed && m->inv_freq_local ? m->inv_freq_local : global_fr;
        SEER_TRY(qkv(be, op, s, L, T, D, H, Hkv, Dh, eps));
        if (op->rope_kv_store) {
            SEER_TRY(op->rope_kv_store(be, s->q, s->k, s->v, pos, T, H, Hkv, Dh, fr, in->rope_neox,
                                       ctx->kv_data, &ctx->geom, l, ctx->tok_page, ctx->tok_row));
        } else {
            SEER_TRY(op->rope(be, s->q, pos, T, H, Dh, fr, in->rope_neox));
            SEER_TRY(op->rope(be, s->k, pos, T, Hkv, Dh, fr, in->rope_neox));
        }
        if (ctx->cap_rows)
            SEER_TRY(capture_q(ctx, l, T, (size_t)H * Dh));
        if (!op->rope_kv_store)
            SEER_TRY(op->kv_store(be, ctx->kv_data, &ctx->geom, l, s->k, s->v, ctx->tok_page,
                                  ctx->tok_row, T));
        SEER_TRY(op->attention(be, s->att, s->q, ctx->kv_data, &ctx->geom, l, windowed ? &abw : ab));
        SEER_TRY(residual_norm(be, op, s->x, s->att, &L->wo, L->attn_post_norm, eps, s->h, T, D));
        /* a sparse FFN's compact layers, else the layer (or its staged copy) */
        const ffn_extra ex = {.stats = ctx->ffn_stats ? ctx->ffn_stats + (size_t)l * F : NULL,
                              .hist = ctx->ffn_hist ? ctx->ffn_hist + (size_t)l * SEER_ACT_HIST_BINS : NULL,
                              .T_stats = ab->T, .thr = ctx->ffn_thr ? ctx->ffn_thr[l] : -1.f};
        SEER_TRY(ffn(be, op, s, ctx->ffn_layers ? &ffn_layers[l] : L, d->act, T, D, F_call, eps, &ex));
        if (host && l >= m->n_resident)
            SEER_TRY(seer_host_stage(ctx, l + 2));
    }
    if (n_out == 0)
        return SEER_OK;
    SEER_TRY(op->gather_rows(be, s->h, s->x, out_rows, n_out, D));
    SEER_TRY(op->rmsnorm(be, s->h, s->h, m->output_norm, n_out, D, eps));
    SEER_TRY(op->matmul(be, s->logits, s->h, head, NULL, n_out));
    if (m->final_softcap > 0)
        SEER_TRY(op->softcap(be, s->logits, m->final_softcap, (size_t)n_out * in->n_vocab));
    return SEER_OK;
}

seer_status seer_decoder_forward(seer_context *ctx, const int32_t *tokens, const int32_t *pos,
                                 const seer_attn_batch *ab, const int32_t *out_rows, int n_out) {
    const seer_backend_ops *op = ctx->be->ops;
    seer_backend *be = ctx->be;
    if (op->batch_begin)
        SEER_TRY(op->batch_begin(be, ab, tokens, pos, ctx->tok_page, ctx->tok_row, out_rows, n_out));
    /* A q capture downloads mid-call: such calls always run op by op. So do calls through the
     * quantised KV copy: a recording is per key and shape, and these differ from the target's
     * calls of the same shape in their attention alone. So do calls over quantised KV rows
     * (geom kv_type), whose attention may be one that uploads its slot lists per call (CUDA:
     * attention_qkv.cu, for the shapes the tensor-core kernel does not serve), and the sparse
     * FFN's calls: their compact copy is made anew at each choice. */
    if (!op->forward_begin || ctx->cap_rows || ab->kv_quant || ctx->geom.kv_type != SEER_KV_FULL || ctx->ffn_layers)
        return run_ops(ctx, tokens, pos, ab, out_rows, ab->T, n_out);
    int T = ab->T, n = n_out;
    bool done = false, redo = false;
    /* the calls that add a sparse FFN's statistic have more ops: a key of their own */
    const void *key = ctx->draft_call ? (const void *)&ctx->draft_call
                      : ctx->ffn_stats ? (const void *)&ctx->ffn_stats
                      : ctx->ffn_hist  ? (const void *)&ctx->ffn_hist : (const void *)ctx;
    SEER_TRY(op->forward_begin(be, key, ctx->rows_cap, &T, &n, &done));
    seer_status s = done ? SEER_OK : run_ops(ctx, tokens, pos, ab, out_rows, T, n);
    s = op->forward_end(be, s, &redo);
    if (!redo)
        return s;
    /* A recording failed and nothing of it ran: the ops again, at the same sizes. */
    s = run_ops(ctx, tokens, pos, ab, out_rows, T, n);
    return op->forward_end(be, s, &redo);
}
