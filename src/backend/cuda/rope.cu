/*
 * rope.cu: rotary position embeddings in place on [T][n_heads][Dh], both pair styles
 * (neox: (i, i + Dh/2); else adjacent (2i, 2i+1)). As in the CPU reference the angle is
 * double(pos) * inv_freq[i] and its cosine and sine are taken in double: positions reach
 * 128K and more, where an f32 angle has lost the digits that matter.
 * Not for: computing inv_freq (model.c does, with any context scaling).
 */
#include "backend/cuda/cuda_common.cuh"

/* Block (token, pair chunk); each thread takes one frequency i, computes its rotation once
 * and applies it to every head. */
__global__ void rope_kernel(float *x, const int32_t *pos, const float *inv_freq, int n_heads,
                            int Dh, int neox) {
    const int t = blockIdx.x;
    const int half = Dh / 2;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= half)
        return;
    double sd, cd;
    sincos((double)pos[t] * (double)inv_freq[i], &sd, &cd);
    const float c = (float)cd, s = (float)sd;
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    float *xt = x + (size_t)t * n_heads * Dh;
    for (int h = 0; h < n_heads; h++) {
        float *xh = xt + (size_t)h * Dh;
        const float x0 = xh[i0], x1 = xh[i1];
        /* the products rounded separately, as the reference computes them */
        xh[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        xh[i1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
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
    const int half = head_dim / 2, threads = half < 128 ? (half + 31) / 32 * 32 : 128;
    dim3 grid((unsigned)T, (unsigned)((half + threads - 1) / threads));
    rope_kernel<<<grid, threads, 0, c->stream>>>(x, dp, inv_freq, n_heads, head_dim, neox);
    LAUNCH_TRY("rope_kernel");
    return SEER_OK;
}
