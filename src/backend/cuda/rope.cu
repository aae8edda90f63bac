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

/* A thread per (token, head, pair). */
__global__ void rope_kernel(float *x, const float2 *tab, int T, int n_heads, int Dh, int neox) {
    const int half = Dh / 2;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * n_heads * half)
        return;
    const int i = (int)(idx % half);
    const size_t th = idx / half; /* token * n_heads + head */
    const int t = (int)(th / n_heads);
    const float2 cs = tab[(size_t)t * half + i];
    float *xh = x + th * Dh;
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float x0 = xh[i0], x1 = xh[i1];
    /* the products rounded separately, as the reference computes them */
    xh[i0] = __fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y));
    xh[i1] = __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x));
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
    seer_cuda_rope_key *k = &c->rope_key;
    const bool shared = dp == c->idx[SEER_IDX_POS].dev;
    if (!shared || !k->valid || k->epoch != c->batch_epoch || k->inv_freq != inv_freq || k->half != half ||
        k->T < T) {
        SEER_TRY(seer_cuda_reserve(c, &c->rope_tab, (size_t)T * half * sizeof(float2), "the RoPE table"));
        const int n = T * half;
        rope_table_kernel<<<(unsigned)((n + 127) / 128), 128, 0, c->stream>>>((float2 *)c->rope_tab.p, dp,
                                                                                inv_freq, T, half);
        LAUNCH_TRY("rope_table_kernel");
        k->valid = shared;
        k->epoch = c->batch_epoch;
        k->inv_freq = inv_freq;
        k->half = half;
        k->T = T;
    }
    const size_t n = (size_t)T * n_heads * half;
    rope_kernel<<<seer_cuda_grid(n, 128), 128, 0, c->stream>>>(x, (const float2 *)c->rope_tab.p, T,
                                                               n_heads, head_dim, neox);
    LAUNCH_TRY("rope_kernel");
    return SEER_OK;
}
