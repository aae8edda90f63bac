/*
 * norm.cu: RMSNorm over rows of f32 activations, y = x * w / sqrt(mean(x^2) + eps), with the
 * sum of squares in f32 as the CPU reference has it (only the summation order differs).
 * Prefill's cuBLAS products read their input in bf16: there the norm writes bf16 at once, the
 * same bits as the f32 result rounded (seer_cuda_rmsnorm_bf16).
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul.cuh"

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

/* rmsnorm_vec_kernel's norm, each group of 32 values then rounded to 8 bits as
 * qt_xprep_kernel rounds the f32 result (matmul_qt.cu): the same elements per thread, the
 * same products, so the same bits as the norm into f32 followed by that kernel. A group's
 * 32 columns are 8 float4 of 8 neighbouring lanes (D a multiple of 128, so every warp is
 * whole in every pass). */
template <int VPT>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_q8_kernel(int8_t *xq, float2 *xd, const float *x, const float *w, int D, float eps) {
    pdl_trigger();
    pdl_wait();
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * D);
    const int n4 = D / 4, groups = D / 32;
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
        if (i >= n4) /* the whole warp: n4 is a multiple of 32 */
            break;
        const float4 g = w4[i];
        const float h[4] = {v[k].x * r * g.x, v[k].y * r * g.y, v[k].z * r * g.z, v[k].w * r * g.w};
        float amax = fmaxf(fmaxf(fabsf(h[0]), fabsf(h[1])), fmaxf(fabsf(h[2]), fabsf(h[3])));
#pragma unroll
        for (int o = 4; o > 0; o >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
        uint32_t packed = 0;
        int s = 0;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int q = (int)roundf(h[e] * id);
            s += q;
            packed |= (uint32_t)(uint8_t)(int8_t)q << (8 * e);
        }
#pragma unroll
        for (int o = 4; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        const int grp = i / 8, l = i % 8;
        *(uint32_t *)(xq + (size_t)blockIdx.x * D + (size_t)grp * 32 + qt_x_byte(4 * l)) = packed;
        if (l == 0)
            xd[(size_t)blockIdx.x * groups + grp] = make_float2(d, (float)s);
    }
}

bool seer_cuda_rmsnorm_q8_fits(const float *x, const float *w, int D) {
    return D % 128 == 0 && norm_kind(x, w, true, D) != 0;
}

seer_status seer_cuda_rmsnorm_q8(seer_cuda *c, int8_t *xq, float2 *xd, const float *x, const float *w, int T,
                                 int D, float eps) {
    if (!seer_cuda_rmsnorm_q8_fits(x, w, D) || (uintptr_t)xq % 4)
        return seer_err(SEER_ERR_INTERNAL, "rmsnorm_q8: a row of %d or unaligned rows", D);
    if (T <= 0)
        return SEER_OK;
    if (norm_kind(x, w, true, D) == 2)
        CUDA_TRY(seer_cuda_launch(c, rmsnorm_q8_kernel<2>, dim3((unsigned)T), dim3(NORM_THREADS), 0, xq, xd, x, w, D,
                                  eps));
    else
        CUDA_TRY(seer_cuda_launch(c, rmsnorm_q8_kernel<8>, dim3((unsigned)T), dim3(NORM_THREADS), 0, xq, xd, x, w, D,
                                  eps));
    LAUNCH_TRY("rmsnorm_q8_kernel");
    return SEER_OK;
}
