/*
 * cpu_sparse.c: the CPU's ops of contextual sparsity (backend.h: ffn_act_stats, weight_gather),
 * the reference of every other backend's. The per-neuron statistic the sparse FFN draft
 * chooses its neurons by, and the gather of the chosen rows and columns into its compact copy.
 * Not for: choosing the neurons or running the draft (src/model/sparse_ffn.c).
 */
#include "backend/cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

seer_status seer_cpu_ffn_act_stats(seer_backend *be, float *stats, const float *g, int T, int F,
                                   float *tmp) {
    (void)be, (void)tmp;
    for (int t = 0; t < T; t++) {
        const float *r = g + (size_t)t * F;
        double ss = 0;
        for (int j = 0; j < F; j++)
            ss += (double)r[j] * r[j];
        if (!(ss > 0))
            continue;
        const double inv = 1.0 / ss;
        for (int j = 0; j < F; j++)
            stats[j] += (float)((double)r[j] * r[j] * inv);
    }
    return SEER_OK;
}

/* Row r of w as f32 into out [w->cols]. */
static seer_status row_f32(const seer_weight *w, int r, float *out) {
    if (w->dtype == GGML_TYPE_F32) {
        memcpy(out, (const float *)w->data + (size_t)r * w->cols, (size_t)w->cols * sizeof(float));
        return SEER_OK;
    }
    size_t row_bytes = 0;
    SEER_TRY(seer_ggml_nbytes((ggml_type)w->dtype, (uint64_t)w->cols, &row_bytes));
    return seer_gguf_dequant((ggml_type)w->dtype, (const char *)w->data + (size_t)r * row_bytes, out,
                             (uint64_t)w->cols);
}

seer_status seer_cpu_weight_gather(seer_backend *be, const seer_weight *w, const int32_t *idx, int n, bool cols,
                                   seer_weight *out) {
    (void)be;
    if (!w->data || (w->dtype != GGML_TYPE_F32 && !seer_ggml_type_supported((ggml_type)w->dtype)))
        return seer_err(SEER_ERR_UNSUPPORTED, "weight_gather: from a %s weight",
                        seer_ggml_type_name((ggml_type)w->dtype));
    const int lim = cols ? w->cols : w->rows;
    if (n < 1 || !idx)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_gather: %d indices", n);
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= lim)
            return seer_err(SEER_ERR_INVALID_ARG, "weight_gather: index %d (%d) outside the %d %s of the weight",
                            i, idx[i], lim, cols ? "columns" : "rows");
    const int R = cols ? w->rows : n, C = cols ? n : w->cols;
    float *dst = malloc((size_t)R * C * sizeof(float));
    float *row = cols ? malloc((size_t)w->cols * sizeof(float)) : NULL;
    if (!dst || (cols && !row)) {
        free(dst);
        free(row);
        return seer_err(SEER_ERR_OOM, "weight_gather: out of memory for a [%d][%d] weight", R, C);
    }
    seer_status s = SEER_OK;
    for (int r = 0; r < R && s == SEER_OK; r++) {
        if (!cols) {
            s = row_f32(w, idx[r], dst + (size_t)r * C);
            continue;
        }
        s = row_f32(w, r, row);
        for (int i = 0; i < n && s == SEER_OK; i++)
            dst[(size_t)r * C + i] = row[idx[i]];
    }
    free(row);
    if (s != SEER_OK) {
        free(dst);
        return s;
    }
    memset(out, 0, sizeof *out);
    out->data = dst;
    out->rows = R;
    out->cols = C;
    out->dtype = GGML_TYPE_F32;
    out->owned = true;
    return SEER_OK;
}
