/*
 * sparse.cu: the ops of contextual sparsity (backend.h: ffn_act_stats, weight_gather): the
 * per-neuron statistic of the FFN's hidden activation that the sparse FFN draft chooses its
 * neurons by, and the gather of the chosen rows of gate|up and columns of down into its
 * compact copy (bf16 weights, the backend's float type). In the CPU reference's order:
 * each row's sum of squares, then per neuron the rows in order.
 * Not for: choosing the neurons (src/model/sparse_ffn.c) or multiplying by the copy
 * (matmul.cu).
 */
#include "backend/cuda/cuda_common.cuh"

/* inv [T] = 1 / sum_j g[t][j]^2 (0 for a zero row); one block of 256 per row. */
__global__ void act_inv_norm_kernel(float *inv, const float *g, int F) {
    __shared__ double part[256];
    const float *r = g + (size_t)blockIdx.x * F;
    double ss = 0;
    for (int j = threadIdx.x; j < F; j += blockDim.x)
        ss += (double)r[j] * r[j];
    part[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        inv[blockIdx.x] = part[0] > 0 ? (float)(1.0 / part[0]) : 0.f;
}

/* stats [F] += sum_t g[t][j]^2 inv[t], one thread per neuron, rows in order. */
__global__ void act_stats_kernel(float *stats, const float *g, const float *inv, int T, int F) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= F)
        return;
    float acc = stats[j];
    for (int t = 0; t < T; t++) {
        const float x = g[(size_t)t * F + j];
        acc += (float)((double)x * x * inv[t]);
    }
    stats[j] = acc;
}

seer_status seer_cuda_ffn_act_stats(seer_backend *be, float *stats, const float *g, int T, int F, float *tmp) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0 || F <= 0)
        return SEER_OK;
    act_inv_norm_kernel<<<(unsigned)T, 256, 0, c->stream>>>(tmp, g, F);
    LAUNCH_TRY("act_inv_norm_kernel");
    act_stats_kernel<<<seer_cuda_grid((size_t)F, 64), 64, 0, c->stream>>>(stats, g, tmp, T, F);
    LAUNCH_TRY("act_stats_kernel");
    return SEER_OK;
}

/* out [R][C]: rows idx of w [.][cols] (by_cols 0; C = cols) or its columns idx (1; R = rows). */
__global__ void gather_weight_kernel(bf16 *out, const bf16 *w, const int32_t *idx, int R, int C, int cols,
                                     int by_cols) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)R * C)
        return;
    const int r = (int)(i / C), k = (int)(i % C);
    out[i] = by_cols ? w[(size_t)r * cols + idx[k]] : w[(size_t)idx[r] * cols + k];
}

seer_status seer_cuda_weight_gather(seer_backend *be, const seer_weight *w, const int32_t *idx, int n, bool cols,
                                    seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    if (!w->data || w->dtype != GGML_TYPE_BF16)
        return seer_err(SEER_ERR_UNSUPPORTED, "weight_gather: from a %s weight (the CUDA backend gathers bf16)",
                        seer_ggml_type_name((ggml_type)w->dtype));
    const int lim = cols ? w->cols : w->rows;
    if (n < 1 || !idx)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_gather: %d indices", n);
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= lim)
            return seer_err(SEER_ERR_INVALID_ARG, "weight_gather: index %d (%d) outside the %d %s of the weight", i,
                            idx[i], lim, cols ? "columns" : "rows");
    const int R = cols ? w->rows : n, C = cols ? n : w->cols;
    const int32_t *di;
    SEER_TRY(seer_cuda_index(c, -1, idx, n, 0, &di));
    void *d = NULL;
    SEER_TRY(seer_cuda_malloc(c, (size_t)R * C * sizeof(bf16), "a sparse FFN's compact copy", &d));
    gather_weight_kernel<<<seer_cuda_grid((size_t)R * C, 256), 256, 0, c->stream>>>(
        (bf16 *)d, (const bf16 *)w->data, di, R, C, w->cols, cols ? 1 : 0);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        seer_cuda_free(c, d);
        return seer_cuda_fail(e, "launch of gather_weight_kernel", __FILE__, __LINE__);
    }
    memset(out, 0, sizeof *out);
    out->data = d;
    out->rows = R;
    out->cols = C;
    out->dtype = GGML_TYPE_BF16;
    out->owned = true;
    return SEER_OK;
}
