/*
 * cpu_matmul.c: y = x W^T in f32 on the CPU (weights in block formats go to cpu_qmatmul.c), and
 * the quantised copy of a weight (weight_quantize).
 *
 * Every output element is computed by the same sequence of operations whatever T, the
 * tile it lands in or the thread that runs it: 16 lane accumulators over the input in
 * order, a fixed reduction tree, then the scalar tail. That makes the reference path
 * batch-invariant: a token's logits are bit-identical whether it is decoded alone or
 * verified among γ+1 others, which greedy speculative decoding relies on.
 */
#include "backend/cpu/cpu.h"
#include "gguf/gguf.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define LANES 16
#define ROWS 4

static inline float reduce_lanes(const float *a) {
    float s8[8], s4[4];
    for (int l = 0; l < 8; l++)
        s8[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; l++)
        s4[l] = s8[l] + s8[l + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* y[r] = dot(x[r], w) for ROWS rows of x (rows beyond nr repeat the last row). */
static void dot_rows(float *y, const float *const *x, int nr, const float *w, int n) {
    float acc[ROWS][LANES];
    memset(acc, 0, sizeof acc);
    int nv = n - n % LANES;
    for (int i = 0; i < nv; i += LANES) {
        for (int r = 0; r < ROWS; r++)
            for (int l = 0; l < LANES; l++)
                acc[r][l] += x[r][i + l] * w[i + l];
    }
    for (int r = 0; r < nr; r++) {
        float s = reduce_lanes(acc[r]);
        for (int i = nv; i < n; i++)
            s += x[r][i] * w[i];
        y[r] = s;
    }
}

typedef struct {
    float *y;
    const float *x, *W, *bias;
    int rows, cols, T;
} matmul_args;

/* Output rows [o0, o1). Output rows outer so each weight row is read once per block of ROWS
 * tokens; the weight is the big operand in decode. */
static void matmul_rows(void *ctx, int64_t o0, int64_t o1) {
    const matmul_args *a = ctx;
    const int rows = a->rows, cols = a->cols, T = a->T;
    for (int64_t o = o0; o < o1; o++) {
        const float *wr = a->W + (size_t)o * cols;
        for (int t0 = 0; t0 < T; t0 += ROWS) {
            int nr = T - t0 < ROWS ? T - t0 : ROWS;
            const float *xr[ROWS];
            for (int r = 0; r < ROWS; r++)
                xr[r] = a->x + (size_t)(t0 + (r < nr ? r : nr - 1)) * cols;
            float out[ROWS];
            dot_rows(out, xr, nr, wr, cols);
            for (int r = 0; r < nr; r++)
                a->y[(size_t)(t0 + r) * rows + o] = out[r] + (a->bias ? a->bias[o] : 0.f);
        }
    }
}

seer_status seer_cpu_matmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                            const float *bias, int T) {
    if (w->dtype != GGML_TYPE_F32)
        return seer_cpu_qmatmul(be, y, x, w, bias, T);
    matmul_args a = {y, x, (const float *)w->data, bias, w->rows, w->cols, T};
    seer_cpu_for(be, (size_t)w->rows * w->cols * T > ((size_t)1 << 20), w->rows, matmul_rows, &a);
    return SEER_OK;
}

typedef struct {
    const seer_weight *w;
    uint8_t *dst;
    size_t row_bytes;
    int dtype;
    seer_status *st; /* [rows]: each row's status (rows quantise independently) */
} quant_args;

static void quant_rows(void *ctx, int64_t r0, int64_t r1) {
    const quant_args *a = ctx;
    const int cols = a->w->cols;
    float *f = malloc((size_t)cols * sizeof *f);
    for (int64_t r = r0; r < r1; r++) {
        if (!f) {
            a->st[r] = SEER_ERR_OOM;
            continue;
        }
        const float *x = (const float *)a->w->data + (size_t)r * cols;
        if (a->w->dtype == GGML_TYPE_BF16) {
            for (int i = 0; i < cols; i++)
                f[i] = seer_bf16_to_f32(((const uint16_t *)a->w->data)[(size_t)r * cols + i]);
            x = f;
        }
        a->st[r] = seer_gguf_quant((ggml_type)a->dtype, x, a->dst + (size_t)r * a->row_bytes, (uint64_t)cols);
    }
    free(f);
}

seer_status seer_cpu_weight_quantize(seer_backend *be, const seer_weight *w, int dtype, seer_weight *out) {
    if (dtype != GGML_TYPE_Q8_0 && dtype != GGML_TYPE_Q4_0)
        return seer_err(SEER_ERR_UNSUPPORTED, "weight_quantize: to %s (q8_0 or q4_0)",
                        seer_ggml_type_name((ggml_type)dtype));
    if (!w->data || (w->dtype != GGML_TYPE_F32 && w->dtype != GGML_TYPE_BF16))
        return seer_err(SEER_ERR_UNSUPPORTED, "weight_quantize: from a %s weight (f32 or bf16)",
                        seer_ggml_type_name((ggml_type)w->dtype));
    if (w->rows < 1 || w->cols < 1 || w->cols % 32)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_quantize: %d columns are not whole blocks of 32",
                        w->cols);
    size_t row_bytes = 0;
    SEER_TRY(seer_ggml_nbytes((ggml_type)dtype, (uint64_t)w->cols, &row_bytes));
    uint8_t *dst = malloc(row_bytes * (size_t)w->rows);
    seer_status *st = calloc((size_t)w->rows, sizeof *st);
    if (!dst || !st) {
        free(dst);
        free(st);
        return seer_err(SEER_ERR_OOM, "weight_quantize: out of memory for %d rows", w->rows);
    }
    quant_args a = {w, dst, row_bytes, dtype, st};
    seer_cpu_for(be, (size_t)w->rows * w->cols > ((size_t)1 << 16), w->rows, quant_rows, &a);
    seer_status s = SEER_OK;
    for (int r = 0; r < w->rows && s == SEER_OK; r++)
        if (st[r] != SEER_OK)
            s = st[r] == SEER_ERR_OOM ? seer_err(SEER_ERR_OOM, "weight_quantize: out of memory")
                                      : seer_err(st[r], "weight_quantize: row %d: a value is not finite", r);
    free(st);
    if (s != SEER_OK) {
        free(dst);
        return s;
    }
    *out = *w;
    out->data = dst;
    out->dtype = dtype;
    out->owned = true;
    return SEER_OK;
}
