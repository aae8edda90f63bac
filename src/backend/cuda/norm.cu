/*
 * norm.cu: RMSNorm over rows of f32 activations, y = x * w / sqrt(mean(x^2) + eps), with the
 * sum of squares in f32 as the CPU reference has it (only the summation order differs).
 * Not for: fusing the norm into the following GEMM (a later optimisation).
 */
#include "backend/cuda/cuda_common.cuh"

#define NORM_THREADS 256

/* One block per row. Each thread reads and writes the same elements, so y may equal x. */
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(float *y, const float *x, const float *w, int D, float eps) {
    __shared__ float part[NORM_THREADS / 32];
    const float *xr = x + (size_t)blockIdx.x * D;
    float *yr = y + (size_t)blockIdx.x * D;
    float ss = 0.f;
    for (int i = threadIdx.x; i < D; i += NORM_THREADS)
        ss += xr[i] * xr[i];
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
    for (int k = 0; k < NORM_THREADS / 32; k++)
        tot += part[k];
    const float r = 1.f / sqrtf(tot / D + eps);
    for (int i = threadIdx.x; i < D; i += NORM_THREADS)
        yr[i] = xr[i] * r * w[i];
}

seer_status seer_cuda_rmsnorm(seer_backend *be, float *y, const float *x, const float *w, int T,
                              int D, float eps) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0 || D <= 0)
        return SEER_OK;
    rmsnorm_kernel<<<(unsigned)T, NORM_THREADS, 0, c->stream>>>(y, x, w, D, eps);
    LAUNCH_TRY("rmsnorm_kernel");
    return SEER_OK;
}
