/*
 * norm.cuh: RMSNorm's arithmetic, shared by the rmsnorm kernel (norm.cu) and the matmul
 * kernels that normalise their input rows on the way in (matmul.cuh): both must give the
 * same bits, so that a token's result does not depend on which path its call took. Every
 * operation is spelled out (no contraction left to the compiler).
 * For a row of D floats (D % 4 == 0, 16-byte aligned) read by NORM_THREADS threads, thread
 * i's partial sums the squares of its float4s i, i + NORM_THREADS, ... in that order; the
 * partials are added across each warp by xor-shuffles (16, 8, 4, 2, 1) and the warp sums
 * in warp order; r = 1 / sqrt(sum / D + eps); y = (x * r) * w.
 */
#ifndef SEER_CUDA_NORM_CUH
#define SEER_CUDA_NORM_CUH

#include "backend/cuda/cuda_common.cuh"

#define NORM_THREADS 256

static __device__ __forceinline__ float norm_add_squares(float ss, float4 v) {
    float t = __fmul_rn(v.x, v.x);
    t = __fmaf_rn(v.y, v.y, t);
    t = __fmaf_rn(v.z, v.z, t);
    t = __fmaf_rn(v.w, v.w, t);
    return __fadd_rn(ss, t);
}

static __device__ __forceinline__ float norm_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* r from the sum of squares of a row of D values */
static __device__ __forceinline__ float norm_inv_rms(float sum, int D, float eps) {
    return __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum, (float)D), eps)));
}

static __device__ __forceinline__ float norm_apply(float x, float r, float w) {
    return __fmul_rn(__fmul_rn(x, r), w);
}

static __device__ __forceinline__ float4 norm_apply4(float4 x, float r, float4 w) {
    return make_float4(norm_apply(x.x, r, w.x), norm_apply(x.y, r, w.y), norm_apply(x.z, r, w.z),
                       norm_apply(x.w, r, w.w));
}

#endif
