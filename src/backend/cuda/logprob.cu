/*
 * logprob.cu: logprob_rows on the GPU (backend.h): per row of logits, the raw log-softmax at
 * one token and the k (<= 20) most likely tokens, so that OpenAI's `logprobs` move a few
 * numbers per row to the host, not rows of V = 152K logits.
 *
 * Not for: the sampler's transform or draws (sample.cu).
 *
 * One block per row: a maximum, a sum of exp(x - max) in double (the CPU reference,
 * src/sample/logprob.c, sums in double in id order; here the order is the block's, so the
 * two agree within float rounding of the result), then k passes, each finding the best entry
 * ranked after the previous pick (larger value, ties to the lower id, NaN as -inf). k passes
 * over one row that stays in L2: at V = 152K and k = 20, about 12 MB of L2 reads per row.
 */
#include "backend/cuda/cuda_common.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct seer_cuda_lp {
    seer_cuda_buf dev; /* the rows' descriptors, then the results */
};

seer_status seer_cuda_lp_init(seer_cuda *c) {
    c->lp = (seer_cuda_lp *)calloc(1, sizeof *c->lp);
    return c->lp ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

void seer_cuda_lp_free(seer_cuda *c) {
    if (!c->lp)
        return;
    seer_cuda_buf_free(c, &c->lp->dev);
    free(c->lp);
    c->lp = NULL;
}

#define LP_THREADS 1024
#define LP_WARPS (LP_THREADS / 32)

/* (va, ia) ranks before (vb, ib): larger value, ties to the lower id; ib < 0 is "none". */
__device__ __forceinline__ bool lp_before(float va, int ia, float vb, int ib) {
    if (ia < 0)
        return false;
    if (ib < 0)
        return true;
    return va > vb || (va == vb && ia < ib);
}

__device__ __forceinline__ float lp_val(float x) { return x != x ? -INFINITY : x; }

__global__ void logprob_rows_kernel(const seer_logprob_row *rows, int V, int k, float *lp, int32_t *top_id,
                                    float *top_lp) {
    const seer_logprob_row row = rows[blockIdx.x];
    const float *x = row.logits;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ float sf[LP_WARPS];
    __shared__ int si[LP_WARPS];
    __shared__ double sd[LP_WARPS];
    __shared__ float s_max;
    __shared__ double s_lse;
    __shared__ float s_pv;
    __shared__ int s_pi;

    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        m = fmaxf(m, lp_val(x[i]));
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0)
        sf[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = -INFINITY;
        for (int w = 0; w < LP_WARPS; w++)
            r = fmaxf(r, sf[w]);
        s_max = r;
    }
    __syncthreads();
    const float mx = s_max;
    double sum = 0;
    if (mx > -INFINITY)
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const float v = lp_val(x[i]);
            if (v > -INFINITY)
                sum += exp((double)v - mx);
        }
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0)
        sd[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double r = 0;
        for (int w = 0; w < LP_WARPS; w++)
            r += sd[w];
        s_lse = mx > -INFINITY ? (double)mx + log(r) : INFINITY;
        const float v = lp_val(x[row.token]);
        lp[blockIdx.x] = v > -INFINITY ? (float)((double)v - s_lse) : -INFINITY;
        s_pv = 0.f;
        s_pi = -1;
    }
    __syncthreads();
    const double lse = s_lse;
    for (int t = 0; t < k; t++) {
        const float pv = s_pv;
        const int pi = s_pi;
        float bv = 0.f;
        int bi = -1;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const float v = lp_val(x[i]);
            if ((pi < 0 || lp_before(pv, pi, v, i)) && lp_before(v, i, bv, bi))
                bv = v, bi = i;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (lp_before(ov, oi, bv, bi))
                bv = ov, bi = oi;
        }
        if (lane == 0)
            sf[warp] = bv, si[warp] = bi;
        __syncthreads();
        if (threadIdx.x == 0) {
            float rv = 0.f;
            int ri = -1;
            for (int w = 0; w < LP_WARPS; w++)
                if (lp_before(sf[w], si[w], rv, ri))
                    rv = sf[w], ri = si[w];
            const size_t o = (size_t)blockIdx.x * k + t;
            top_id[o] = ri;
            top_lp[o] = rv > -INFINITY ? (float)((double)rv - lse) : -INFINITY;
            s_pv = rv;
            s_pi = ri;
        }
        __syncthreads();
    }
}

seer_status seer_cuda_logprob_rows(seer_backend *be, const seer_logprob_row *rows, int n, int V, int k,
                                   float *lp, int32_t *top_id, float *top_lp) {
    seer_cuda *c = seer_cuda_of(be);
    if (k < 0 || k > SEER_LOGPROB_TOP_MAX || k > V)
        return seer_err(SEER_ERR_INVALID_ARG, "logprob_rows: %d alternatives (0..%d)", k, SEER_LOGPROB_TOP_MAX);
    if (n <= 0)
        return SEER_OK;
    for (int r = 0; r < n; r++)
        if (rows[r].token < 0 || rows[r].token >= V)
            return seer_err(SEER_ERR_INVALID_ARG, "logprob_rows: token %d outside the vocabulary", rows[r].token);
    const size_t b_rows = ((size_t)n * sizeof *rows + 15) / 16 * 16;
    const size_t b_lp = ((size_t)n * sizeof(float) + 15) / 16 * 16;
    const size_t b_top = (size_t)n * (k ? k : 1) * sizeof(float);
    SEER_TRY(seer_cuda_reserve(c, &c->lp->dev, b_rows + b_lp + 2 * b_top, "logprob rows"));
    char *base = (char *)c->lp->dev.p;
    seer_logprob_row *d_rows = (seer_logprob_row *)base;
    float *d_lp = (float *)(base + b_rows);
    int32_t *d_id = (int32_t *)(base + b_rows + b_lp);
    float *d_tlp = (float *)(base + b_rows + b_lp + b_top);
    CUDA_TRY(cudaMemcpyAsync(d_rows, rows, (size_t)n * sizeof *rows, cudaMemcpyHostToDevice, c->stream));
    logprob_rows_kernel<<<(unsigned)n, LP_THREADS, 0, c->stream>>>(d_rows, V, k, d_lp, d_id, d_tlp);
    LAUNCH_TRY("logprob_rows_kernel");
    CUDA_TRY(cudaMemcpyAsync(lp, d_lp, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    if (k) {
        CUDA_TRY(cudaMemcpyAsync(top_id, d_id, (size_t)n * k * sizeof(int32_t), cudaMemcpyDeviceToHost, c->stream));
        CUDA_TRY(cudaMemcpyAsync(top_lp, d_tlp, (size_t)n * k * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    }
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    return SEER_OK;
}
