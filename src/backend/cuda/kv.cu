/*
 * kv.cu: the KV page storage on the device: allocation (NaN-poisoned, so that reading a slot
 * nothing wrote shows up in tests), page copies for copy-on-write, and storing a forward
 * call's K/V rows, rounded to bf16; and reading rows back as f32 for the host.
 * Layout [n_pages][n_layers][2][Hkv][page_size][Dh] bf16 (see cuda_common.cuh).
 * Not for: attention over the cache (attention.cu).
 */
#include "backend/cuda/cuda_common.cuh"

#include <stdio.h>

static size_t page_elems(const seer_kv_geom *g) {
    return (size_t)g->n_layers * 2 * g->n_kv_heads * g->page_size * g->head_dim;
}

static seer_status check_geom(const seer_kv_geom *g) {
    if (g->n_pages < 1 || g->page_size < 1 || g->n_layers < 1 || g->n_kv_heads < 1 ||
        g->head_dim < 2 || g->head_dim % 2)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "KV geometry: %d pages of %d tokens, %d layers, %d KV heads of %d dims",
                        g->n_pages, g->page_size, g->n_layers, g->n_kv_heads, g->head_dim);
    return SEER_OK;
}

seer_status seer_cuda_kv_alloc(seer_backend *be, const seer_kv_geom *g, void **out) {
    seer_cuda *c = seer_cuda_of(be);
    *out = NULL;
    SEER_TRY(check_geom(g));
    const size_t pe = page_elems(g);
    if (pe > SIZE_MAX / sizeof(bf16) / (size_t)g->n_pages)
        return seer_err(SEER_ERR_OOM, "KV cache: %d pages of %zu values overflow a size", g->n_pages, pe);
    const size_t bytes = pe * sizeof(bf16) * (size_t)g->n_pages;
    char what[128];
    snprintf(what, sizeof what, "the KV cache (%d pages of %d tokens)", g->n_pages, g->page_size);
    void *p = NULL;
    SEER_TRY(seer_cuda_malloc(c, bytes, what, &p));
    /* 0xFFFF is a bf16 NaN. */
    cudaError_t e = cudaMemsetAsync(p, 0xFF, bytes, c->stream);
    if (e != cudaSuccess) {
        seer_cuda_free(c, p);
        return seer_cuda_fail(e, "poisoning the KV cache", __FILE__, __LINE__);
    }
    *out = p;
    return SEER_OK;
}

void seer_cuda_kv_free(seer_backend *be, void *kv) { seer_cuda_free(seer_cuda_of(be), kv); }

seer_status seer_cuda_kv_copy_pages(seer_backend *be, void *kv, const seer_kv_geom *g,
                                    const seer_kv_copy *copies, int n) {
    seer_cuda *c = seer_cuda_of(be);
    const size_t pb = page_elems(g) * sizeof(bf16);
    for (int i = 0; i < n; i++) {
        const int s = copies[i].src, d = copies[i].dst;
        if (s < 0 || s >= g->n_pages || d < 0 || d >= g->n_pages)
            return seer_err(SEER_ERR_INVALID_ARG, "KV page copy %d -> %d outside the %d pages", s, d,
                            g->n_pages);
        if (s == d)
            continue;
        /* In stream order, so a later copy may read what an earlier one wrote. */
        CUDA_TRY(cudaMemcpyAsync((char *)kv + pb * d, (const char *)kv + pb * s, pb,
                                 cudaMemcpyDeviceToDevice, c->stream));
    }
    return SEER_OK;
}

/* One block per (token, K or V); threads over the Hkv*Dh/2 value pairs of the row. */
__global__ void kv_store_kernel(bf16 *kv, const float *k, const float *v, const int32_t *page,
                                const int32_t *row, int layer, int n_layers, int n_pages,
                                int page_size, int Hkv, int Dh) {
    const int t = blockIdx.x, which = blockIdx.y;
    const int pg = page[t], r = row[t];
    if (pg < 0 || pg >= n_pages || r < 0 || r >= page_size)
        return; /* never from the model code; a bad index must not write elsewhere */
    const int kvd = Hkv * Dh, half = Dh / 2;
    const float2 *src = (const float2 *)((which ? v : k) + (size_t)t * kvd);
    const size_t head0 = (((size_t)pg * n_layers + layer) * 2 + which) * Hkv;
    for (int p = threadIdx.x; p < kvd / 2; p += blockDim.x) {
        const int h = p / half, e2 = p % half;
        const float2 x = src[p];
        __nv_bfloat162 *dst =
            (__nv_bfloat162 *)(kv + ((head0 + h) * page_size + r) * Dh) + e2;
        *dst = __floats2bfloat162_rn(x.x, x.y);
    }
}

seer_status seer_cuda_kv_store(seer_backend *be, void *kv, const seer_kv_geom *g, int layer,
                               const float *k, const float *v, const int32_t *page,
                               const int32_t *row, int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0)
        return SEER_OK;
    if (layer < 0 || layer >= g->n_layers)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_store: layer %d of %d", layer, g->n_layers);
    if (T > 65535 * 32)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_store: %d tokens in one call", T);
    const int32_t *dpage, *drow;
    SEER_TRY(seer_cuda_index(c, SEER_IDX_PAGE, page, T, 0, &dpage));
    SEER_TRY(seer_cuda_index(c, SEER_IDX_ROW, row, T, 1, &drow));
    /* k and v rows are float2-aligned: Hkv*Dh is even and buffers come 256-byte aligned. */
    dim3 grid((unsigned)T, 2);
    kv_store_kernel<<<grid, 128, 0, c->stream>>>((bf16 *)kv, k, v, dpage, drow, layer, g->n_layers,
                                                 g->n_pages, g->page_size, g->n_kv_heads,
                                                 g->head_dim);
    LAUNCH_TRY("kv_store_kernel");
    return SEER_OK;
}

/* One block per row asked for; a bad index gives a NaN row rather than a stray read. */
__global__ void kv_read_kernel(float *out, const bf16 *kv, const int32_t *page, const int32_t *row,
                               int layer, int which, int n_layers, int n_pages, int page_size,
                               int Hkv, int Dh) {
    const int i = blockIdx.x, pg = page[i], r = row[i], kvd = Hkv * Dh;
    float *o = out + (size_t)i * kvd;
    if (pg < 0 || pg >= n_pages || r < 0 || r >= page_size) {
        for (int p = threadIdx.x; p < kvd; p += blockDim.x)
            o[p] = __int_as_float(0x7fc00000);
        return;
    }
    const size_t head0 = (((size_t)pg * n_layers + layer) * 2 + which) * Hkv;
    for (int p = threadIdx.x; p < kvd; p += blockDim.x) {
        const int h = p / Dh, e = p % Dh;
        o[p] = __bfloat162float(kv[((head0 + h) * page_size + r) * Dh + e]);
    }
}

seer_status seer_cuda_kv_read(seer_backend *be, const void *kv, const seer_kv_geom *g, int layer,
                              int which, const int32_t *page, const int32_t *row, int n, float *out) {
    seer_cuda *c = seer_cuda_of(be);
    if (n <= 0)
        return SEER_OK;
    if (layer < 0 || layer >= g->n_layers || (which != 0 && which != 1))
        return seer_err(SEER_ERR_INVALID_ARG, "kv_read: layer %d of %d, which %d", layer,
                        g->n_layers, which);
    const size_t bytes = (size_t)n * g->n_kv_heads * g->head_dim * sizeof(float);
    SEER_TRY(seer_cuda_reserve(c, &c->kv_read, bytes, "kv_read rows"));
    const int32_t *dpage, *drow;
    SEER_TRY(seer_cuda_index(c, -1, page, n, 0, &dpage));
    SEER_TRY(seer_cuda_index(c, -1, row, n, 1, &drow));
    kv_read_kernel<<<(unsigned)n, 128, 0, c->stream>>>((float *)c->kv_read.p, (const bf16 *)kv, dpage,
                                                       drow, layer, which, g->n_layers, g->n_pages,
                                                       g->page_size, g->n_kv_heads, g->head_dim);
    LAUNCH_TRY("kv_read_kernel");
    CUDA_TRY(cudaMemcpyAsync(out, c->kv_read.p, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    return SEER_OK;
}
