/*
 * norm.cu: RMSNorm over rows of f32 activations, y = x * w / sqrt(mean(x^2) + eps), with the
 * sum of squares in f32 as the CPU reference has it (only the summation order differs).
 * Not for: fusing the norm into the following GEMM (a later optimisation).
 */
#include "backend/cuda/cuda_common.cuh"

#define NORM_THREADS 256

/* The sum of every thread's v, the same in every thread: warps, then the warp sums in order. */
static __device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[NORM_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    float tot = 0.f;
    for (int k = 0; k < NORM_THREADS / 32; k++)
        tot += part[k];
    return tot;
}

/* One block per row. Each thread reads and writes the same elements, so y may equal x. */
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(float *y, const float *x, const float *w, int D, float eps) {
    const float *xr = x + (size_t)blockIdx.x * D;
    float *yr = y + (size_t)blockIdx.x * D;
    float ss = 0.f;
    for (int i = threadIdx.x; i < D; i += NORM_THREADS)
        ss += xr[i] * xr[i];
    const float r = 1.f / sqrtf(block_sum(ss) / D + eps);
    for (int i = threadIdx.x; i < D; i += NORM_THREADS)
        yr[i] = xr[i] * r * w[i];
}

/* The same for D a multiple of 4 up to NORM_THREADS * 4 * VPT on 16-byte aligned rows: the
 * row stays in registers between the two passes. The sum runs in another order than the
 * kernel above, fixed for a given D. */
template <int VPT>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_vec_kernel(float *y, const float *x, const float *w, int D, float eps) {
    pdl_trigger();
    pdl_wait();
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * D);
    float4 *yr = (float4 *)(y + (size_t)blockIdx.x * D);
    const int n4 = D / 4;
    float4 v[VPT];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const int i = threadIdx.x + k * NORM_THREADS;
        v[k] = i < n4 ? xr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    const float r = 1.f / sqrtf(block_sum(ss) / D + eps);
    const float4 *w4 = (const float4 *)w;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const int i = threadIdx.x + k * NORM_THREADS;
        if (i < n4) {
            const float4 g = w4[i];
            yr[i] = make_float4(v[k].x * r * g.x, v[k].y * r * g.y, v[k].z * r * g.z, v[k].w * r * g.w);
        }
    }
}

seer_status seer_cuda_rmsnorm(seer_backend *be, float *y, const float *x, const float *w, int T,
                              int D, float eps) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0 || D <= 0)
        return SEER_OK;
    const bool vec = D % 4 == 0 && ((uintptr_t)x | (uintptr_t)y | (uintptr_t)w) % 16 == 0;
    if (vec && D <= NORM_THREADS * 4 * 2)
        CUDA_TRY(seer_cuda_launch(c, rmsnorm_vec_kernel<2>, dim3((unsigned)T), dim3(NORM_THREADS), 0, y, x, w, D, eps));
    else if (vec && D <= NORM_THREADS * 4 * 8)
        CUDA_TRY(seer_cuda_launch(c, rmsnorm_vec_kernel<8>, dim3((unsigned)T), dim3(NORM_THREADS), 0, y, x, w, D, eps));
    else
        rmsnorm_kernel<<<(unsigned)T, NORM_THREADS, 0, c->stream>>>(y, x, w, D, eps);
    LAUNCH_TRY("rmsnorm_kernel");
    return SEER_OK;
}
