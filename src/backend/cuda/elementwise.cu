/*
 * elementwise.cu: the f32 elementwise ops: SwiGLU (silu(g) * u), GeGLU (tanh-GELU(g) * u),
 * residual add, scaling (Gemma's embedding times sqrt(D)), soft-capping (Gemma 2's final
 * logits) and gathering the rows whose logits are wanted. Full-precision expf, tanhf and
 * division, in the CPU reference's order of operations.
 * Not for: anything with a reduction (norm.cu) or a weight (matmul.cu).
 */
#include "backend/cuda/cuda_common.cuh"

#include <stdlib.h>

/* gather_rows' scratch, for a gather whose output overlaps its input. */
struct seer_cuda_ew {
    seer_cuda_buf gather_tmp;
};

seer_status seer_cuda_ew_init(seer_cuda *c) {
    c->ew = (seer_cuda_ew *)calloc(1, sizeof *c->ew);
    return c->ew ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

void seer_cuda_ew_free(seer_cuda *c) {
    if (!c->ew)
        return;
    seer_cuda_buf_free(c, &c->ew->gather_tmp);
    free(c->ew);
    c->ew = NULL;
}

seer_status seer_cuda_gather_scratch(seer_cuda *c, size_t bytes, float **out) {
    SEER_TRY(seer_cuda_reserve(c, &c->ew->gather_tmp, bytes, "gather_rows scratch"));
    *out = (float *)c->ew->gather_tmp.p;
    return SEER_OK;
}

#define EW_THREADS 256

/* y may equal g or u: each element is read and written by one thread. */
__global__ void swiglu_kernel(float *y, const float *g, const float *u, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float a = g[i];
        y[i] = a / (1.f + expf(-a)) * u[i];
    }
}

/* GELU with the tanh approximation, written as cpu.c's geglu_range writes it; y may equal g
 * or u. */
__global__ void geglu_kernel(float *y, const float *g, const float *u, size_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float x = g[i];
        y[i] = 0.5f * x * (1.f + tanhf(c * x * (1.f + 0.044715f * x * x))) * u[i];
    }
}

__global__ void scale_kernel(float *x, float s, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

/* c tanh(x / c) as c tanh(x * (1 / c)), the reciprocal taken once on the host (llama.cpp's
 * form, and the CPU reference's). */
__global__ void softcap_kernel(float *x, float c, float inv, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = c * tanhf(x[i] * inv);
}

__global__ void add_kernel(float *y, const float *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

/* One block per output row. */
__global__ void gather_rows_kernel(float *y, const float *x, const int32_t *rows, int D) {
    const float *src = x + (size_t)rows[blockIdx.x] * D;
    float *dst = y + (size_t)blockIdx.x * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        dst[i] = src[i];
}

seer_status seer_cuda_swiglu(seer_backend *be, float *y, const float *g, const float *u, size_t n) {
    seer_cuda *c = seer_cuda_of(be);
    if (!n)
        return SEER_OK;
    swiglu_kernel<<<seer_cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(y, g, u, n);
    LAUNCH_TRY("swiglu_kernel");
    return SEER_OK;
}

seer_status seer_cuda_geglu(seer_backend *be, float *y, const float *g, const float *u, size_t n) {
    seer_cuda *c = seer_cuda_of(be);
    if (!n)
        return SEER_OK;
    geglu_kernel<<<seer_cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(y, g, u, n);
    LAUNCH_TRY("geglu_kernel");
    return SEER_OK;
}

seer_status seer_cuda_scale(seer_backend *be, float *x, float s, size_t n) {
    seer_cuda *c = seer_cuda_of(be);
    if (!n)
        return SEER_OK;
    scale_kernel<<<seer_cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(x, s, n);
    LAUNCH_TRY("scale_kernel");
    return SEER_OK;
}

seer_status seer_cuda_softcap(seer_backend *be, float *x, float cap, size_t n) {
    seer_cuda *c = seer_cuda_of(be);
    if (!(cap > 0.f))
        return seer_err(SEER_ERR_INVALID_ARG, "softcap: cap %g must be positive", cap);
    if (!n)
        return SEER_OK;
    const float inv = 1.f / cap;
    softcap_kernel<<<seer_cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(x, cap, inv, n);
    LAUNCH_TRY("softcap_kernel");
    return SEER_OK;
}

seer_status seer_cuda_add(seer_backend *be, float *y, const float *x, size_t n) {
    seer_cuda *c = seer_cuda_of(be);
    if (!n)
        return SEER_OK;
    add_kernel<<<seer_cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(y, x, n);
    LAUNCH_TRY("add_kernel");
    return SEER_OK;
}

seer_status seer_cuda_gather_rows(seer_backend *be, float *y, const float *x, const int32_t *rows,
                                  int n_rows, int D) {
    seer_cuda *c = seer_cuda_of(be);
    if (n_rows <= 0 || D <= 0)
        return SEER_OK;
    int max_row = 0;
    for (int i = 0; i < n_rows; i++) {
        if (rows[i] < 0)
            return seer_err(SEER_ERR_INVALID_ARG, "gather_rows: row %d at %d is negative", rows[i], i);
        if (rows[i] > max_row)
            max_row = rows[i];
    }
    const int32_t *dr;
    SEER_TRY(seer_cuda_index(c, SEER_IDX_OUT_ROWS, rows, n_rows, 0, &dr));
    const size_t out_bytes = (size_t)n_rows * D * sizeof(float);
    const char *y0 = (const char *)y, *y1 = y0 + out_bytes;
    const char *x0 = (const char *)x, *x1 = x0 + ((size_t)max_row + 1) * D * sizeof(float);
    /* In place (the CPU reference allows it with memmove), rows would race: gather into
     * scratch first. */
    const bool overlap = y0 < x1 && x0 < y1;
    float *dst = y;
    if (overlap)
        SEER_TRY(seer_cuda_gather_scratch(c, out_bytes, &dst));
    gather_rows_kernel<<<(unsigned)n_rows, 128, 0, c->stream>>>(dst, x, dr, D);
    LAUNCH_TRY("gather_rows_kernel");
    if (overlap)
        CUDA_TRY(cudaMemcpyAsync(y, dst, out_bytes, cudaMemcpyDeviceToDevice, c->stream));
    return SEER_OK;
}
