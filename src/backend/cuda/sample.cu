/*
 * sample.cu: token selection on the GPU, so that greedy decoding and greedy verification
 * move one id per row to the host instead of a row of V logits.
 * Not for: the stochastic sampler (host side for now, src/sample/).
 */
#include "backend/cuda/cuda_common.cuh"

#define AMAX_THREADS 1024

/* Better candidate: larger value, ties to the lower id; NaN never wins (as seer_argmax). */
__device__ __forceinline__ bool amax_better(float v, int i, float bv, int bi) {
    if (v != v)
        return false;
    if (bi < 0)
        return true;
    return v > bv || (v == bv && i < bi);
}

/* One block per row. */
__global__ void argmax_rows_kernel(int32_t *ids, const float *logits, int V) {
    const float *x = logits + (size_t)blockIdx.x * V;
    float bv = 0.f;
    int bi = -1;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        if (amax_better(x[i], i, bv, bi))
            bv = x[i], bi = i;
    __shared__ float sv[AMAX_THREADS];
    __shared__ int si[AMAX_THREADS];
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && amax_better(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + s];
            si[threadIdx.x] = si[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        ids[blockIdx.x] = si[0] < 0 ? 0 : si[0];
}

seer_status seer_cuda_argmax_rows(seer_backend *be, int32_t *ids, const float *logits, int n, int V) {
    seer_cuda *c = seer_cuda_of(be);
    if (n <= 0)
        return SEER_OK;
    SEER_TRY(seer_cuda_reserve(c, &c->argmax_ids, (size_t)n * sizeof(int32_t), "argmax ids"));
    int32_t *d = (int32_t *)c->argmax_ids.p;
    argmax_rows_kernel<<<(unsigned)n, AMAX_THREADS, 0, c->stream>>>(d, logits, V);
    LAUNCH_TRY("argmax_rows_kernel");
    CUDA_TRY(cudaMemcpyAsync(ids, d, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, c->stream));
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    return SEER_OK;
}
