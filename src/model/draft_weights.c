/*
 * draft_weights.c: the model's draft weights (seer_model_params.draft_weights): a copy of
 * every linear weight and of the LM head quantised to Q8_0 or Q4_0 on the backend, made once
 * at load from the weights as held, and multiplied by in the forward calls that ask for it
 * (seer_batch.draft_weights). The norms and biases are the model's own. Fused weights
 * (seer_model_fuse) are quantised whole: their rows quantise independently, so the copy of a
 * fused weight is the fusion of the parts' copies, with the same segments. A weight whose rows
 * are no whole blocks is shared as it is.
 * Not for: choosing when to use them (the drafters, src/spec/).
 */
#include "model/model.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

seer_status seer_draft_dtype_parse(const char *name, int *dtype) {
    *dtype = 0;
    if (!name || !*name)
        return SEER_OK;
    if (!strcmp(name, "q8_0"))
        *dtype = GGML_TYPE_Q8_0;
    else if (!strcmp(name, "q4_0"))
        *dtype = GGML_TYPE_Q4_0;
    else {
        char buf[64];
        return seer_err(SEER_ERR_INVALID_ARG, "draft weights '%s': q8_0 or q4_0",
                        seer_text_escape(name, buf, sizeof buf));
    }
    return SEER_OK;
}

/* dst: src quantised; src's shape without data (a part of a fused weight: the forward pass
 * multiplies by the fused one); or src itself, not owned, where its rows are no whole blocks
 * of 32 (a small model's FFN). */
static seer_status quantize(seer_backend *be, const seer_weight *src, int dtype, bool shape_only,
                            seer_weight *dst) {
    memset(dst, 0, sizeof *dst);
    if (shape_only) {
        dst->rows = src->rows;
        dst->cols = src->cols;
        dst->dtype = dtype;
        return SEER_OK;
    }
    if (src->cols % 32) {
        *dst = *src;
        dst->owned = false;
        return SEER_OK;
    }
    return be->ops->weight_quantize(be, src, dtype, dst);
}

static seer_weight *layer_weights(seer_layer *L, int i) {
    seer_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->wqkv, &L->wgu};
    return i < (int)(sizeof ws / sizeof *ws) ? ws[i] : NULL;
}

seer_status seer_model_make_draft(seer_model *m, int dtype) {
    if (!dtype)
        return SEER_OK;
    seer_backend *be = m->be;
    if (!be->ops->weight_quantize)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot make draft weights", be->ops->name);
    const int n = m->info.n_layers;
    m->draft_layers = calloc((size_t)n, sizeof *m->draft_layers);
    if (!m->draft_layers)
        return seer_err(SEER_ERR_OOM, "out of memory");
    m->draft_dtype = dtype;
    for (int l = 0; l < n; l++) {
        seer_layer *L = &m->layers[l], *D = &m->draft_layers[l];
        *D = *L; /* norms and biases shared */
        for (int i = 0; layer_weights(D, i); i++)
            memset(layer_weights(D, i), 0, sizeof(seer_weight));
        /* wq wk wv wo w_gate w_up w_down wqkv wgu: the parts of a fused weight that exists
         * keep their shape only; a fused weight the backend did not make stays empty */
        for (int i = 0; layer_weights(L, i); i++) {
            const seer_weight *s = layer_weights(L, i);
            const bool part = i <= 2 ? L->wqkv.data != NULL : (i == 4 || i == 5) && L->wgu.data;
            if (part || s->data)
                SEER_TRY(quantize(be, s, dtype, part, layer_weights(D, i)));
        }
    }
    return quantize(be, &m->output, dtype, false, &m->draft_output);
}

void seer_model_free_draft(seer_model *m) {
    seer_backend *be = m->be;
    if (m->draft_layers)
        for (int l = 0; l < m->info.n_layers; l++)
            for (int i = 0; layer_weights(&m->draft_layers[l], i); i++)
                be->ops->weight_free(be, layer_weights(&m->draft_layers[l], i));
    free(m->draft_layers);
    m->draft_layers = NULL;
    if (m->draft_output.data)
        be->ops->weight_free(be, &m->draft_output);
    m->draft_dtype = 0;
}
