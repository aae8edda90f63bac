/*
 * weights.cu: binding a GGUF tensor as a CUDA weight: whatever its type, dequantised on the
 * host (gguf_dequant) a slice of rows at a time, rounded to bf16 (nearest even) and copied to
 * device memory [rows][cols]. bf16 tensors are copied as they are.
 * Not for: quantised GEMMs (weights are always bf16 on the device for now).
 */
#include "backend/cuda/cuda_common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "gguf/gguf.h"
}

/* Elements dequantised per slice: bounds the host memory a big embedding table needs. */
#define SLICE_ELEMS ((size_t)1 << 22)

static seer_status load_rows(seer_cuda *c, const gguf_tensor *t, bf16 *dst, uint64_t rows,
                             uint64_t cols) {
    const int be = ggml_type_block_elems(t->type);
    if (be <= 0 || !ggml_type_supported(t->type))
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor %s: unsupported type %s (%d)", t->name,
                        ggml_type_name(t->type), (int)t->type);
    /* Slices of whole rows need rows that end on a block boundary; otherwise one slice. */
    uint64_t rows_per = cols % (uint64_t)be ? rows : SLICE_ELEMS / cols;
    if (rows_per < 1)
        rows_per = 1;
    if (rows_per > rows)
        rows_per = rows;
    const size_t slice = (size_t)(rows_per * cols);
    float *f = (float *)seer_malloc_array(slice, sizeof *f);
    uint16_t *h = (uint16_t *)seer_malloc_array(slice, sizeof *h);
    seer_status s = SEER_OK;
    if (!f || !h)
        s = seer_err(SEER_ERR_OOM, "tensor %s: out of host memory for a %zu-element slice",
                     t->name, slice);
    for (uint64_t r0 = 0; s == SEER_OK && r0 < rows; r0 += rows_per) {
        const uint64_t nr = rows - r0 < rows_per ? rows - r0 : rows_per;
        const uint64_t ne = nr * cols;
        size_t off = 0;
        s = ggml_nbytes(t->type, r0 * cols, &off);
        if (s == SEER_OK && off > t->nbytes)
            s = seer_err(SEER_ERR_FORMAT, "tensor %s: data shorter than its shape", t->name);
        if (s == SEER_OK)
            s = gguf_dequant(t->type, (const uint8_t *)t->data + off, f, ne);
        if (s != SEER_OK) {
            s = seer_err(s, "tensor %s: %s", t->name, seer_last_error());
            break;
        }
        for (uint64_t i = 0; i < ne; i++)
            h[i] = seer_f32_to_bf16(f[i]);
        cudaError_t e = cudaMemcpyAsync(dst + r0 * cols, h, ne * sizeof *h, cudaMemcpyHostToDevice,
                                        c->stream);
        /* The next slice overwrites h: wait for this copy whatever memory h is in. */
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess)
            s = seer_cuda_fail(e, "copying a weight slice to the device", __FILE__, __LINE__);
    }
    free(f);
    free(h);
    return s;
}

seer_status seer_cuda_weight_load(seer_backend *be, const gguf_tensor *t, seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    const uint64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (rows > INT32_MAX || cols > INT32_MAX || rows == 0 || cols == 0)
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor %s has an unsupported shape", t->name);
    const size_t bytes = (size_t)(rows * cols) * sizeof(bf16);
    char what[160];
    snprintf(what, sizeof what, "weight %s", t->name);
    void *d = NULL;
    SEER_TRY(seer_cuda_malloc(c, bytes, what, &d));
    seer_status s = SEER_OK;
    if (t->type == GGML_TYPE_BF16) {
        if (t->nbytes < bytes)
            s = seer_err(SEER_ERR_FORMAT, "tensor %s: data shorter than its shape", t->name);
        cudaError_t e = cudaSuccess;
        if (s == SEER_OK)
            e = cudaMemcpyAsync(d, t->data, bytes, cudaMemcpyHostToDevice, c->stream);
        if (s == SEER_OK && e == cudaSuccess)
            e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess)
            s = seer_cuda_fail(e, what, __FILE__, __LINE__);
    } else {
        s = load_rows(c, t, (bf16 *)d, rows, cols);
    }
    if (s != SEER_OK) {
        seer_cuda_free(c, d);
        return s;
    }
    memset(out, 0, sizeof *out);
    out->data = d;
    out->rows = (int)rows;
    out->cols = (int)cols;
    out->dtype = GGML_TYPE_BF16;
    out->owned = true;
    return SEER_OK;
}

void seer_cuda_weight_free(seer_backend *be, seer_weight *w) {
    if (w->owned)
        seer_cuda_free(seer_cuda_of(be), w->data);
    memset(w, 0, sizeof *w);
}

/* Rows of several bf16 weights as one (matmul_split then reads them in one pass); the parts
 * become views of their rows in it. Interleaved (two parts, for matmul_glu): row i of part j
 * goes to row 2 i + j, and the parts keep their shape without data. */
seer_status seer_cuda_weight_concat(seer_backend *be, seer_weight *parts, int n, bool interleave,
                                    seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    if (n < 1 || n > SEER_WEIGHT_MAX_SEG)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_concat: %d parts (1 to %d)", n, SEER_WEIGHT_MAX_SEG);
    if (interleave && (n != 2 || parts[0].rows != parts[1].rows))
        return seer_err(SEER_ERR_INVALID_ARG, "weight_concat: interleaving needs two parts of equal rows");
    long long rows = 0;
    for (int j = 0; j < n; j++) {
        if (parts[j].dtype != GGML_TYPE_BF16 || parts[j].cols != parts[0].cols || parts[j].n_seg)
            return seer_err(SEER_ERR_INVALID_ARG, "weight_concat: part %d is not a plain bf16 weight of %d columns",
                            j, parts[0].cols);
        rows += parts[j].rows;
    }
    if (rows > INT32_MAX)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_concat: %lld rows", rows);
    const size_t cols = (size_t)parts[0].cols;
    void *p = NULL;
    SEER_TRY(seer_cuda_malloc(c, (size_t)rows * cols * sizeof(bf16), "a fused weight", &p));
    size_t r0 = 0;
    for (int j = 0; j < n; j++) {
        const size_t bytes = (size_t)parts[j].rows * cols * sizeof(bf16);
        /* interleaved: row i of part j at row 2 i + j */
        cudaError_t e = interleave
                            ? cudaMemcpy2DAsync((bf16 *)p + j * cols, 2 * cols * sizeof(bf16), parts[j].data,
                                                cols * sizeof(bf16), cols * sizeof(bf16), (size_t)parts[j].rows,
                                                cudaMemcpyDeviceToDevice, c->stream)
                            : cudaMemcpyAsync((bf16 *)p + r0 * cols, parts[j].data, bytes,
                                              cudaMemcpyDeviceToDevice, c->stream);
        if (e == cudaSuccess && j == n - 1)
            e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            seer_cuda_free(c, p);
            return seer_cuda_fail(e, "copying a weight into a fused one", __FILE__, __LINE__);
        }
        r0 += (size_t)parts[j].rows;
    }
    memset(out, 0, sizeof *out);
    out->data = p;
    out->rows = (int)rows;
    out->cols = (int)cols;
    out->dtype = GGML_TYPE_BF16;
    out->owned = true;
    out->n_seg = n;
    out->interleaved = interleave;
    r0 = 0;
    for (int j = 0; j < n; j++) {
        out->seg_rows[j] = parts[j].rows;
        const int pr = parts[j].rows;
        seer_cuda_weight_free(be, &parts[j]);
        /* interleaved rows are no weight of their own: the part keeps its shape, no data */
        parts[j].data = interleave ? NULL : (bf16 *)p + r0 * cols;
        parts[j].rows = pr;
        parts[j].cols = (int)cols;
        parts[j].dtype = GGML_TYPE_BF16;
        parts[j].owned = false;
        r0 += (size_t)pr;
    }
    return SEER_OK;
}
