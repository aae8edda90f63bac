/*
 * llama.c: the Llama-family decoder (llama: Llama 2/3, SmolLM, Mistral without sliding
 * window; qwen2: the same with QKV biases and half-split RoPE) as a sequence of backend ops.
 *
 *   x = embed(tokens)
 *   per layer: x += Wo · attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x))
 *              x += Wdown · (silu(Wgate·n(x)) * Wup·n(x))
 *   logits = Wout · n(x[rows asked for])
 */
#include "model/model.h"
#include "util/error.h"

/* x += W in, fused where the backend can; tmp [T][D] is scratch otherwise. */
static seer_status residual(seer_backend *be, const seer_backend_ops *op, float *x, const float *in,
                            const seer_weight *w, float *tmp, int T, int D) {
    if (op->matmul_add)
        return op->matmul_add(be, x, in, w, T);
    SEER_TRY(op->matmul(be, tmp, in, w, NULL, T));
    return op->add(be, x, tmp, (size_t)T * D);
}

/* q, k, v = Wq n(x), Wk n(x), Wv n(x) (+ biases); h is scratch. */
static seer_status qkv(seer_backend *be, const seer_backend_ops *op, const seer_scratch *s,
                       const seer_layer *L, int T, int D, float eps) {
    float *const ys[3] = {s->q, s->k, s->v};
    const float *const bs[3] = {L->bq, L->bk, L->bv};
    if (L->wqkv.data && op->norm_matmul_split)
        return op->norm_matmul_split(be, ys, s->h, s->x, L->attn_norm, eps, &L->wqkv, bs, T);
    SEER_TRY(op->rmsnorm(be, s->h, s->x, L->attn_norm, T, D, eps));
    if (L->wqkv.data)
        return op->matmul_split(be, ys, s->h, &L->wqkv, bs, T);
    SEER_TRY(op->matmul(be, s->q, s->h, &L->wq, L->bq, T));
    SEER_TRY(op->matmul(be, s->k, s->h, &L->wk, L->bk, T));
    return op->matmul(be, s->v, s->h, &L->wv, L->bv, T);
}

/* x += Wdown glu(Wgate n(x), Wup n(x)); h, g and u are scratch. */
static seer_status ffn(seer_backend *be, const seer_backend_ops *op, const seer_scratch *s,
                       const seer_layer *L, int T, int D, int F, float eps) {
    if (L->wgu.interleaved && op->ffn_glu)
        return op->ffn_glu(be, s->x, s->h, L->ffn_norm, eps, &L->wgu, &L->w_down, s->g, T);
    SEER_TRY(op->rmsnorm(be, s->h, s->x, L->ffn_norm, T, D, eps));
    if (L->wgu.interleaved) {
        SEER_TRY(op->matmul_glu(be, s->g, s->h, &L->wgu, T));
    } else {
        if (L->wgu.data) {
            float *const ys[2] = {s->g, s->u};
            SEER_TRY(op->matmul_split(be, ys, s->h, &L->wgu, NULL, T));
        } else {
            SEER_TRY(op->matmul(be, s->g, s->h, &L->w_gate, NULL, T));
            SEER_TRY(op->matmul(be, s->u, s->h, &L->w_up, NULL, T));
        }
        SEER_TRY(op->swiglu(be, s->g, s->g, s->u, (size_t)T * F));
    }
    return residual(be, op, s->x, s->g, &L->w_down, s->h, T, D);
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

    const seer_layer *layers = ctx->draft_call ? m->draft_layers : m->layers;
    const seer_weight *head = ctx->draft_call ? &m->draft_output : &m->output;

    SEER_TRY(op->embed(be, s->x, &m->tok_embd, tokens, T));
    for (int l = 0; l < in->n_layers; l++) {
        const seer_layer *L = &layers[l];
        SEER_TRY(qkv(be, op, s, L, T, D, eps));
        if (op->rope_kv_store) {
            SEER_TRY(op->rope_kv_store(be, s->q, s->k, s->v, pos, T, H, Hkv, Dh, m->inv_freq,
                                       in->rope_neox, ctx->kv_data, &ctx->geom, l, ctx->tok_page,
                                       ctx->tok_row));
        } else {
            SEER_TRY(op->rope(be, s->q, pos, T, H, Dh, m->inv_freq, in->rope_neox));
            SEER_TRY(op->rope(be, s->k, pos, T, Hkv, Dh, m->inv_freq, in->rope_neox));
        }
        if (ctx->cap_rows) {
            size_t qd = (size_t)H * Dh;
            int k = 0, n_cap = 0;
            for (int i = 0; i < T; i++)
                n_cap += ctx->cap_rows[i] != 0;
            for (int i = 0; i < T; i++)
                if (ctx->cap_rows[i])
                    SEER_TRY(op->download(be, ctx->cap_out + ((size_t)l * n_cap + k++) * qd,
                                          s->q + i * qd, qd * sizeof(float)));
        }
        if (!op->rope_kv_store)
            SEER_TRY(op->kv_store(be, ctx->kv_data, &ctx->geom, l, s->k, s->v, ctx->tok_page,
                                  ctx->tok_row, T));
        SEER_TRY(op->attention(be, s->att, s->q, ctx->kv_data, &ctx->geom, l, ab));
        SEER_TRY(residual(be, op, s->x, s->att, &L->wo, s->h, T, D));
        SEER_TRY(ffn(be, op, s, L, T, D, F, eps));
    }
    if (n_out == 0)
        return SEER_OK;
    SEER_TRY(op->gather_rows(be, s->h, s->x, out_rows, n_out, D));
    SEER_TRY(op->rmsnorm(be, s->h, s->h, m->output_norm, n_out, D, eps));
    return op->matmul(be, s->logits, s->h, head, NULL, n_out);
}

seer_status seer_llama_forward(seer_context *ctx, const int32_t *tokens, const int32_t *pos,
                               const seer_attn_batch *ab, const int32_t *out_rows, int n_out) {
    const seer_backend_ops *op = ctx->be->ops;
    seer_backend *be = ctx->be;
    if (op->batch_begin)
        SEER_TRY(op->batch_begin(be, ab, tokens, pos, ctx->tok_page, ctx->tok_row, out_rows, n_out));
    /* A q capture downloads mid-call: such calls always run op by op. So do calls through the
     * quantised KV copy: a recording is per key and shape, and these differ from the target's
     * calls of the same shape in their attention alone. */
    if (!op->forward_begin || ctx->cap_rows || ab->kv_quant)
        return run_ops(ctx, tokens, pos, ab, out_rows, ab->T, n_out);
    int T = ab->T, n = n_out;
    bool done = false, redo = false;
    const void *key = ctx->draft_call ? (const void *)&ctx->draft_call : (const void *)ctx;
    SEER_TRY(op->forward_begin(be, key, ctx->rows_cap, &T, &n, &done));
    seer_status s = done ? SEER_OK : run_ops(ctx, tokens, pos, ab, out_rows, T, n);
    s = op->forward_end(be, s, &redo);
    if (!redo)
        return s;
    /* A recording failed and nothing of it ran: the ops again, at the same sizes. */
    s = run_ops(ctx, tokens, pos, ab, out_rows, T, n);
    return op->forward_end(be, s, &redo);
}
