/*
 * matmul.cu: y [T][rows] = x [T][cols] * W^T (+ bias) with cuBLAS: bf16 weights and bf16
 * inputs (x is rounded to bf16 into a scratch buffer first), f32 accumulation and f32 output.
 * Against the f32 CPU reference the result therefore differs by about the bf16 rounding of
 * the operands (~2^-9 relative per product, mostly cancelling in the sum).
 * Not for: quantised weights, or batch-invariant results (cuBLAS may pick different kernels
 * for different T).
 */
#include "backend/cuda/cuda_common.cuh"

#define CVT_THREADS 256

__global__ void f32_to_bf16_kernel(bf16 *y, const float *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

/* y [T][rows] += bias [rows] */
__global__ void add_bias_kernel(float *y, const float *bias, int rows, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += bias[i % (size_t)rows];
}

seer_status seer_cuda_matmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                             const float *bias, int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0)
        return SEER_OK;
    if (w->dtype != GGML_TYPE_BF16)
        return seer_err(SEER_ERR_UNSUPPORTED, "matmul: CUDA weights are bf16, got type %d", w->dtype);
    const int rows = w->rows, cols = w->cols;
    const size_t nx = (size_t)T * cols;
    SEER_TRY(seer_cuda_reserve(c, &c->xbf16, nx * sizeof(bf16), "matmul input in bf16"));
    bf16 *xb = (bf16 *)c->xbf16.p;
    f32_to_bf16_kernel<<<seer_cuda_grid(nx, CVT_THREADS), CVT_THREADS, 0, c->stream>>>(xb, x, nx);
    LAUNCH_TRY("f32_to_bf16_kernel");
    /* Column-major view: W [rows][cols] row-major is a cols x rows matrix, x is cols x T, and
     * y^T = W x^T is rows x T with leading dimension rows, i.e. y [T][rows] row-major. */
    const float one = 1.f, zero = 0.f;
    CUBLAS_TRY(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, T, cols, &one, w->data,
                            CUDA_R_16BF, cols, xb, CUDA_R_16BF, cols, &zero, y, CUDA_R_32F, rows,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (bias) {
        const size_t ny = (size_t)T * rows;
        add_bias_kernel<<<seer_cuda_grid(ny, CVT_THREADS), CVT_THREADS, 0, c->stream>>>(y, bias, rows, ny);
        LAUNCH_TRY("add_bias_kernel");
    }
    return SEER_OK;
}
