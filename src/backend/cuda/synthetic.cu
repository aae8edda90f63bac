/*
 * synthetic.cu: what benchmarks at real shapes need from the device: random bf16 weights and
 * random KV generated in place by a counter-based hash (backend/synth_hash.h, the same
 * numbers as the CPU backend before rounding), the device-to-device copy bandwidth that the
 * decode floor is measured against, and a device-wide synchronisation for timing.
 * Not for: anything on the forward path.
 */
#include "backend/cuda/cuda_common.cuh"

extern "C" {
#include "backend/synth_hash.h"
}

#include <stdlib.h>
#include <string.h>

__global__ void weight_random_kernel(bf16 *w, size_t n, uint64_t seed, float mul) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        w[i] = __float2bfloat16_rn(seer_synth_value(seed, i, mul));
}

seer_status seer_cuda_weight_random(seer_backend *be, int rows, int cols, uint64_t seed,
                                    float scale, seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    if (rows < 1 || cols < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_random: shape [%d][%d]", rows, cols);
    const size_t n = (size_t)rows * cols;
    void *d = NULL;
    SEER_TRY(seer_cuda_malloc(c, n * sizeof(bf16), "a synthetic weight", &d));
    weight_random_kernel<<<seer_cuda_grid(n, 256), 256, 0, c->stream>>>((bf16 *)d, n, seed,
                                                                         seer_synth_mul(scale));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        seer_cuda_free(c, d);
        return seer_cuda_fail(e, "launch of weight_random_kernel", __FILE__, __LINE__);
    }
    memset(out, 0, sizeof *out);
    out->data = d;
    out->rows = rows;
    out->cols = cols;
    out->dtype = GGML_TYPE_BF16;
    out->owned = true;
    return SEER_OK;
}

/* Element idx enumerates (layer, K/V, slot i, e) exactly as the value index of the contract,
 * so the hash counter is idx itself. Consecutive threads write consecutive e: one head's Dh
 * values of a row are contiguous in the [Hkv][page_size][Dh] block. */
__global__ void kv_fill_kernel(bf16 *kv, const int32_t *pages, int row0, int n, int n_layers,
                               int page_size, int Hkv, int Dh, uint64_t seed, float mul) {
    const size_t kvd = (size_t)Hkv * Dh, total = (size_t)n_layers * 2 * n * kvd;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t e = idx % kvd, rest = idx / kvd;
        const int i = (int)(rest % n), lw = (int)(rest / n);
        const int slot = row0 + i, pg = pages[slot / page_size], r = slot % page_size;
        const int h = (int)(e / Dh), d = (int)(e % Dh);
        const size_t off = ((((size_t)pg * n_layers + lw / 2) * 2 + lw % 2) * Hkv + h) * page_size;
        kv[(off + r) * Dh + d] = __float2bfloat16_rn(seer_synth_value(seed, idx, mul));
    }
}

seer_status seer_cuda_kv_fill_random(seer_backend *be, void *kv, const seer_kv_geom *g,
                                     const int32_t *pages, int n_pages, int row0, int n,
                                     uint64_t seed, float scale) {
    seer_cuda *c = seer_cuda_of(be);
    if (n <= 0)
        return SEER_OK;
    SEER_TRY(seer_kv_fill_check(g, pages, n_pages, row0, n));
    if (g->kv_bits) /* the copy is quantised from f32 rows, which this fill never has */
        return seer_err(SEER_ERR_UNSUPPORTED, "kv_fill_random: a KV storage with a quantised copy (CUDA)");
    /* A buffer of its own rather than the forward call's index copies: this runs between
     * forward calls and must not disturb what they keep. */
    void *dpages = NULL;
    SEER_TRY(seer_cuda_malloc(c, (size_t)n_pages * sizeof(int32_t), "kv_fill_random pages", &dpages));
    cudaError_t e = cudaMemcpyAsync(dpages, pages, (size_t)n_pages * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess && g->kv_type != SEER_KV_FULL) {
        seer_status st = seer_cuda_kvt_fill(c, kv, g, (const int32_t *)dpages, row0, n, seed, seer_synth_mul(scale));
        seer_cuda_free(c, dpages);
        return st;
    }
    if (e == cudaSuccess) {
        const size_t total = (size_t)g->n_layers * 2 * n * g->n_kv_heads * g->head_dim;
        kv_fill_kernel<<<seer_cuda_grid(total, 256), 256, 0, c->stream>>>(
            (bf16 *)kv, (const int32_t *)dpages, row0, n, g->n_layers, g->page_size, g->n_kv_heads,
            g->head_dim, seed, seer_synth_mul(scale));
        e = cudaGetLastError();
    }
    seer_cuda_free(c, dpages); /* waits for the stream: the kernel has read the pages */
    if (e != cudaSuccess)
        return seer_cuda_fail(e, "kv_fill_random", __FILE__, __LINE__);
    return SEER_OK;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

seer_status seer_cuda_time_copies(seer_cuda *c, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                  float *ms, int reps) {
    cudaEvent_t ev[2] = {NULL, NULL};
    seer_status s = SEER_OK;
    cudaError_t e = cudaEventCreate(&ev[0]);
    if (e == cudaSuccess)
        e = cudaEventCreate(&ev[1]);
    for (int r = -1; r < reps && e == cudaSuccess; r++) { /* r = -1: warm-up */
        e = cudaEventRecord(ev[0], c->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(dst, src, bytes, kind, c->stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(ev[1], c->stream);
        if (e == cudaSuccess)
            e = cudaEventSynchronize(ev[1]);
        if (e == cudaSuccess && r >= 0)
            e = cudaEventElapsedTime(&ms[r], ev[0], ev[1]);
    }
    if (e != cudaSuccess)
        s = seer_cuda_fail(e, "timing a copy", __FILE__, __LINE__);
    for (int i = 0; i < 2; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    return s;
}

seer_status seer_cuda_copy_bandwidth(seer_backend *be, double *bytes_per_s) {
    seer_cuda *c = seer_cuda_of(be);
    /* 2 GiB each way: far beyond L2; smaller when memory is short. */
    size_t bytes = (size_t)2 << 30;
    void *src = NULL, *dst = NULL;
    for (; bytes >= ((size_t)64 << 20); bytes /= 2) {
        if (seer_cuda_malloc(c, bytes, "the bandwidth probe", &src) != SEER_OK)
            continue;
        if (seer_cuda_malloc(c, bytes, "the bandwidth probe", &dst) == SEER_OK)
            break;
        seer_cuda_free(c, src);
        src = NULL;
    }
    if (!dst)
        return seer_err(SEER_ERR_OOM, "copy_bandwidth: no device memory for two 64 MiB buffers");
    enum { REPS = 9 };
    float ms[REPS];
    seer_status s = SEER_OK;
    cudaError_t e = cudaMemsetAsync(src, 1, bytes, c->stream);
    if (e != cudaSuccess)
        s = seer_cuda_fail(e, "cudaMemsetAsync", __FILE__, __LINE__);
    if (s == SEER_OK)
        s = seer_cuda_time_copies(c, dst, src, bytes, cudaMemcpyDeviceToDevice, ms, REPS);
    seer_cuda_free(c, src);
    seer_cuda_free(c, dst);
    if (s != SEER_OK)
        return s;
    qsort(ms, REPS, sizeof *ms, cmp_float);
    *bytes_per_s = ms[REPS / 2] > 0 ? 2.0 * (double)bytes / (ms[REPS / 2] * 1e-3) : 0;
    return SEER_OK;
}

seer_status seer_cuda_sync(seer_backend *be) {
    (void)be;
    CUDA_TRY(cudaDeviceSynchronize());
    return SEER_OK;
}
