/*
 * rope.cu: rotary position embeddings in place on [T][n_heads][Dh], both pair styles
 * (neox: (i, i + Dh/2); else adjacent (2i, 2i+1)). As in the CPU reference the angle is
 * double(pos) * inv_freq[i] and its cosine and sine are taken in double: positions reach
 * 128K and more, where an f32 angle has lost the digits that matter.
 *
 * The cosines and sines depend on the positions alone, which every layer's q and k share:
 * the first rope of a forward call (after batch_begin) writes them to a table [T][Dh/2] and
 * the later ones only rotate. A call whose positions are not batch_begin's computes its own.
 * Not for: computing inv_freq (model.c does, with any context scaling).
 */
#include "backend/cuda/cuda_common.cuh"

#include <stdlib.h>

/* The table of the current call and what it was made for. */
struct seer_cuda_rot {
    seer_cuda_buf tab; /* cos, sin per (token, frequency) */
    seer_cuda_rope_key key;
};

seer_status seer_cuda_rope_init(seer_cuda *c) {
    c->rope = (seer_cuda_rot *)calloc(1, sizeof *c->rope);
    return c->rope ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

void seer_cuda_rope_free(seer_cuda *c) {
    if (!c->rope)
        return;
    seer_cuda_buf_free(c, &c->rope->tab);
    free(c->rope);
    c->rope = NULL;
}

__global__ void rope_table_kernel(float2 *tab, const int32_t *pos, const float *inv_freq, int T,
                                  int half) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * half)
        return;
    const int t = idx / half, i = idx % half;
    double sd, cd;
    sincos((double)pos[t] * (double)inv_freq[i], &sd, &cd);
    tab[idx] = make_float2((float)cd, (float)sd);
}

/* A block row per token (blockIdx.x), a thread per (head, pair) of it: 32-bit index math. */
__global__ void rope_kernel(float *x, const float2 *tab, int n_heads, int Dh, int neox) {
    const int half = Dh / 2, t = blockIdx.x;
    const int j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= n_heads * half)
        return;
    const int h = j / half, i = j - h * half;
    const float2 cs = tab[(size_t)t * half + i];
    float *xh = x + ((size_t)t * n_heads + h) * Dh;
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float x0 = xh[i0], x1 = xh[i1];
    /* the products rounded separately, as the reference computes them */
    xh[i0] = __fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y));
    xh[i1] = __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x));
}

#define ROPE_THREADS 128

/* The grid of the kernels here: a block row per token, enough blocks for the pairs of n heads. */
static dim3 rope_grid(int T, int n, int half) {
    return dim3((unsigned)T, (unsigned)((n * half + ROPE_THREADS - 1) / ROPE_THREADS));
}

/* The table for the positions dp [T] (device), shared by every rope of the forward call when
 * dp is batch_begin's copy. */
static seer_status rope_table(seer_cuda *c, const int32_t *dp, int T, const float *inv_freq, int half,
                              const float2 **tab) {
    seer_cuda_rope_key *k = &c->rope->key;
    const bool shared = dp == c->idx[SEER_IDX_POS].dev;
    if (!shared || !k->valid || k->epoch != c->batch_epoch || k->inv_freq != inv_freq || k->half != half ||
        k->T < T) {
        SEER_TRY(seer_cuda_reserve(c, &c->rope->tab, (size_t)T * half * sizeof(float2), "the RoPE table"));
        const int n = T * half;
        rope_table_kernel<<<(unsigned)((n + 127) / 128), 128, 0, c->stream>>>((float2 *)c->rope->tab.p, dp,
                                                                                inv_freq, T, half);
        LAUNCH_TRY("rope_table_kernel");
        k->valid = shared;
        k->epoch = c->batch_epoch;
        k->inv_freq = inv_freq;
        k->half = half;
        k->T = T;
    }
    *tab = (const float2 *)c->rope->tab.p;
    return SEER_OK;
}

seer_status seer_cuda_rope(seer_backend *be, float *x, const int32_t *pos, int T, int n_heads,
                           int head_dim, const float *inv_freq, int neox) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0 || n_heads <= 0)
        return SEER_OK;
    if (head_dim < 2 || head_dim % 2)
        return seer_err(SEER_ERR_INVALID_ARG, "rope: head_dim %d must be even", head_dim);
    const int32_t *dp;
    SEER_TRY(seer_cuda_index(c, SEER_IDX_POS, pos, T, 0, &dp));
    const int half = head_dim / 2;
    const float2 *tab;
    SEER_TRY(rope_table(c, dp, T, inv_freq, half, &tab));
    rope_kernel<<<rope_grid(T, n_heads, half), ROPE_THREADS, 0, c->stream>>>(x, tab, n_heads, head_dim, neox);
    LAUNCH_TRY("rope_kernel");
    return SEER_OK;
}

/* As rope_kernel, a thread per (head, pair) over the H query heads, then the Hkv key heads,
 * then the Hkv value heads: queries and keys rotate in place as rope_kernel does, keys and
 * values go to the cache as kv_store_kernel (kv.cu) writes them. */
__global__ void rope_store_kernel(float *q, float *k, const float *v, const float2 *tab, bf16 *kv,
                                  const int32_t *page, const int32_t *row, int H, int Hkv,
                                  int Dh, int neox, int layer, int n_layers, int n_pages, int page_size) {
    const int half = Dh / 2, NH = H + 2 * Hkv, t = blockIdx.x;
    pdl_trigger();
    pdl_wait();
    const int j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= NH * half)
        return;
    const int h = j / half, i = j - h * half;
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const int pg = page[t], r = row[t];
    const bool store = pg >= 0 && pg < n_pages && r >= 0 && r < page_size;
    if (h >= H + Hkv) { /* a value pair, unrotated */
        const int vh = h - H - Hkv;
        if (store) {
            const float2 x = ((const float2 *)(v + ((size_t)t * Hkv + vh) * Dh))[i];
            const size_t head = (((size_t)pg * n_layers + layer) * 2 + 1) * Hkv + vh;
            ((__nv_bfloat162 *)(kv + (head * page_size + r) * Dh))[i] = __floats2bfloat162_rn(x.x, x.y);
        }
        return;
    }
    const float2 cs = tab[(size_t)t * half + i];
    float *xh = h < H ? q + ((size_t)t * H + h) * Dh : k + ((size_t)t * Hkv + (h - H)) * Dh;
    const float x0 = xh[i0], x1 = xh[i1];
    const float y0 = __fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y));
    const float y1 = __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x));
    xh[i0] = y0;
    xh[i1] = y1;
    if (h >= H && store) {
        const size_t head = (((size_t)pg * n_layers + layer) * 2) * Hkv + (h - H);
        bf16 *dst = kv + (head * page_size + r) * Dh;
        dst[i0] = __float2bfloat16_rn(y0);
        dst[i1] = __float2bfloat16_rn(y1);
    }
}

seer_status seer_cuda_rope_kv_store(seer_backend *be, float *q, float *k, const float *v,
                                    const int32_t *pos, int T, int H, int Hkv, int Dh,
                                    const float *inv_freq, int neox, void *kv, const seer_kv_geom *g,
                                    int layer, const int32_t *page, const int32_t *row) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0)
        return SEER_OK;
    if (Dh < 2 || Dh % 2 || H < 1 || Hkv < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "rope_kv_store: %d/%d heads of size %d", H, Hkv, Dh);
    if (layer < 0 || layer >= g->n_layers || g->n_kv_heads != Hkv || g->head_dim != Dh)
        return seer_err(SEER_ERR_INVALID_ARG, "rope_kv_store: layer %d of %d, or heads unlike the cache's",
                        layer, g->n_layers);
    if (g->kv_type != SEER_KV_FULL) { /* quantised rows: rope as rope does, then the quantising store */
        SEER_TRY(seer_cuda_rope(be, q, pos, T, H, Dh, inv_freq, neox));
        SEER_TRY(seer_cuda_rope(be, k, pos, T, Hkv, Dh, inv_freq, neox));
        return seer_cuda_kv_store(be, kv, g, layer, k, v, page, row, T);
    }
    const int32_t *dp, *dpage, *drow;
    SEER_TRY(seer_cuda_index(c, SEER_IDX_POS, pos, T, 0, &dp));
    const int half = Dh / 2;
    const float2 *tab;
    SEER_TRY(rope_table(c, dp, T, inv_freq, half, &tab));
    SEER_TRY(seer_cuda_index(c, SEER_IDX_PAGE, page, T, 0, &dpage));
    SEER_TRY(seer_cuda_index(c, SEER_IDX_ROW, row, T, 1, &drow));
    CUDA_TRY(seer_cuda_launch(c, rope_store_kernel, rope_grid(T, H + 2 * Hkv, half), dim3(ROPE_THREADS), 0, q,
                              k, v, tab, (bf16 *)kv, dpage, drow, H, Hkv, Dh, neox, layer, g->n_layers,
                              g->n_pages, g->page_size));
    LAUNCH_TRY("rope_store_kernel");
    /* The quantised copy from the same f32 rows, roped in place above. */
    if (g->kv_bits)
        SEER_TRY(seer_cuda_kvq_store(c, kv, g, layer, k, v, dpage, drow, T));
    return SEER_OK;
}
