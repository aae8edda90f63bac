/*
 * norm.cu: RMSNorm over rows of f32 activations, y = x * w / sqrt(mean(x^2) + eps), with the
 * sum of squares in f32 as the CPU reference has it (only the summation order differs).
 * The vectorised kernel's arithmetic (norm.cuh) is also what the matmul kernels use when
 * they normalise their input on the way in (matmul_normed).
 */
#include "backend/cuda/norm.cuh"

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
 * kernel above (norm.cuh's), fixed for a given D. */
template <int VPT>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_vec_kernel(float *y, const float *x, const float *w, int D, float eps) {
    __shared__ float part[NORM_THREADS / 32];
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
        if (i < n4)
            ss = norm_add_squares(ss, v[k]);
    }
    ss = norm_warp_sum(ss);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
#pragma unroll
    for (int k = 0; k < NORM_THREADS / 32; k++)
        tot = __fadd_rn(tot, part[k]);
    const float r = norm_inv_rms(tot, D, eps);
    const float4 *w4 = (const float4 *)w;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const int i = threadIdx.x + k * NORM_THREADS;
        if (i < n4)
            yr[i] = norm_apply4(v[k], r, w4[i]);
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
