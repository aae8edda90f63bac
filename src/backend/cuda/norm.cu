/*
 * norm.cu: RMSNorm over rows of f32 activations, y = x * w / sqrt(mean(x^2) + eps), with the
 * sum of squares in f32 as the CPU reference has it (only the summation order differs).
 * Prefill's cuBLAS products read their input in bf16: there the norm writes bf16 at once, the
 * same bits as the f32 result rounded (seer_cuda_rmsnorm_bf16).
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
template <typename Y>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(Y *y, const float *x, const float *w, int D, float eps) {
    const float *xr = x + (size_t)blockIdx.x * D;
    Y *yr = y + (size_t)blockIdx.x * D;
    float ss = 0.f;
    for (int i = threadIdx.x; i < D; i += NORM_THREADS)
        ss += xr[i] * xr[i];
    const float r = 1.f / sqrtf(block_sum(ss) / D + eps);
    for (int i = threadIdx.x; i < D; i += NORM_THREADS)
        store_f(yr + i, xr[i] * r * w[i]);
}

/* The same for D a multiple of 4 up to NORM_THREADS * 4 * VPT on 16-byte aligned rows: the
 * row stays in registers between the two passes. The sum runs in another order than the
 * kernel above, fixed for a given D. */
template <int VPT, typename Y>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_vec_kernel(Y *y, const float *x, const float *w, int D, float eps) {
    pdl_trigger();
    pdl_wait();
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * D);
    Y *yr = y + (size_t)blockIdx.x * D;
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
            store_f4(yr, i, make_float4(v[k].x * r * g.x, v[k].y * r * g.y, v[k].z * r * g.z, v[k].w * r * g.w));
        }
    }
}

/* Which kernel a row of D serves: the vector one (2 or 8 float4 per thread) where the rows
 * and the weight allow, else the plain one. y_al: whether y is 16-byte aligned. */
static int norm_kind(const float *x, const float *w, bool y_al, int D) {
    const bool vec = D % 4 == 0 && y_al && ((uintptr_t)x | (uintptr_t)w) % 16 == 0;
    return !vec ? 0 : D <= NORM_THREADS * 4 * 2 ? 2 : D <= NORM_THREADS * 4 * 8 ? 8 : 0;
}

template <typename Y>
static seer_status norm_launch(seer_cuda *c, Y *y, const float *x, const float *w, int T, int D, float eps,
                               int kind) {
    if (T <= 0 || D <= 0)
        return SEER_OK;
    if (kind == 2)
        CUDA_TRY(seer_cuda_launch(c, rmsnorm_vec_kernel<2, Y>, dim3((unsigned)T), dim3(NORM_THREADS), 0, y, x, w, D, eps));
    else if (kind == 8)
        CUDA_TRY(seer_cuda_launch(c, rmsnorm_vec_kernel<8, Y>, dim3((unsigned)T), dim3(NORM_THREADS), 0, y, x, w, D, eps));
    else
        rmsnorm_kernel<Y><<<(unsigned)T, NORM_THREADS, 0, c->stream>>>(y, x, w, D, eps);
    LAUNCH_TRY("rmsnorm_kernel");
    return SEER_OK;
}

seer_status seer_cuda_rmsnorm(seer_backend *be, float *y, const float *x, const float *w, int T,
                              int D, float eps) {
    return norm_launch(seer_cuda_of(be), y, x, w, T, D, eps, norm_kind(x, w, (uintptr_t)y % 16 == 0, D));
}

seer_status seer_cuda_rmsnorm_bf16(seer_cuda *c, bf16 *y, const float *x, const float *w, int T, int D,
                                   float eps, const float *like) {
    return norm_launch(c, y, x, w, T, D, eps, norm_kind(x, w, (uintptr_t)like % 16 == 0, D));
}
