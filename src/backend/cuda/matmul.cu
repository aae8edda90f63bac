/*
 * matmul.cu: y [T][rows] = x [T][cols] * W^T (+ bias) with bf16 weights and bf16-rounded
 * inputs, f32 accumulation and f32 output. Against the f32 CPU reference the result differs
 * by about the bf16 rounding of the operands (~2^-9 relative per product, mostly cancelling
 * in the sum).
 *
 * Up to SEER_CUDA_INVARIANT_MAX_T rows (decode, verification, short prefill chunks): our own
 * kernel, batch-invariant and built for the weight-streaming regime. Each warp holds 32 rows
 * of W (two m16 tiles of the tensor cores' mma.m16n8k16) and a fixed slice of the K steps of
 * 64 columns; a block is 8 such warps over the same rows, and a weight may further be split
 * over KB blocks. Every element's sum runs the same way whatever T is: mma steps in K order
 * within the slice (the tokens are the mma's n dimension; an element's result depends on its
 * own row and column alone), the 8 warps' sums added in warp order, then the KB block sums
 * in block order by whichever block finishes last. The split (KB, slices) depends on the
 * weight's shape and the device alone, never on T or on the other rows. Tokens come in
 * tiles (a grid dimension; weights are read once per tile, from L2 after the first).
 * W is streamed with 16-byte loads that skip L1; x is read as f32, rounded to bf16 in
 * registers, and kept in L1 for the other warps; from mm_xb_min_t tokens (several token tiles,
 * x read from L2 by every row group) it is rounded to bf16 once first, with the same bits.
 *
 * Above it: cuBLAS (x rounded to bf16 into a scratch buffer first, or written there in bf16 by
 * the norm before it), whose kernel choice depends on T: prefill only. The (gate, up)
 * products come out rounded to bf16 there, as the glu's input. Quantised weights take the
 * same route, their rows dequantised to bf16 a slice at a time (matmul_q.cu has their small-T
 * kernel).
 */
#include "backend/cuda/matmul.cuh"

#include <stdlib.h>
#include <string.h>

#define CVT_THREADS 256
#define MM_KSTEP 64       /* columns per K step */

__global__ void f32_to_bf16_kernel(bf16 *y, const float *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

/* The same four at a time (n4 groups of 16-byte aligned f32 into 8-byte aligned bf16). */
__global__ void f32_to_bf16_vec_kernel(bf16 *y, const float4 *x, size_t n4) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x)
        store_f4(y, i, x[i]);
}

/* y [T][rows] += bias [rows] */
__global__ void add_bias_kernel(float *y, const float *bias, int rows, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += bias[i % (size_t)rows];
}

/* ---- the batch-invariant kernel --------------------------------------------------------- */

/* Eight bf16 of row r of W from column col (zeros outside the matrix). VEC: 16-byte aligned
 * rows, so the whole vector is in or out. */
template <bool VEC>
static __device__ __forceinline__ uint4 load_w(const bf16 *W, int rows, int cols, int r, int col) {
    if (r >= rows || col >= cols)
        return make_uint4(0, 0, 0, 0);
    const bf16 *p = W + (size_t)r * cols + col;
    if constexpr (VEC) {
        return ld_stream16(p);
    } else {
        uint32_t w[4];
        const unsigned short *u = (const unsigned short *)p;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t lo = col + 2 * k < cols ? u[2 * k] : 0u;
            const uint32_t hi = col + 2 * k + 1 < cols ? u[2 * k + 1] : 0u;
            w[k] = lo | hi << 16;
        }
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Eight f32 of token t of x from column col, rounded to bf16 pairs (zeros outside). XB: x
 * holds them already rounded (bf16, 16-byte aligned rows): the same bits, half the bytes. */
template <bool VEC, bool XB>
static __device__ __forceinline__ uint4 load_x(const float *x, int T, int cols, int t, int col) {
    if (t >= T || col >= cols)
        return make_uint4(0, 0, 0, 0);
    if constexpr (XB)
        return __ldg((const uint4 *)((const bf16 *)x + (size_t)t * cols + col));
    const float *p = x + (size_t)t * cols + col;
    if constexpr (VEC) {
        const float4 a = __ldg((const float4 *)p), b = __ldg((const float4 *)p + 1);
        return make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y),
                          pack_bf16(b.z, b.w));
    } else {
        float f[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            f[k] = col + k < cols ? __ldg(p + k) : 0.f;
        return make_uint4(pack_bf16(f[0], f[1]), pack_bf16(f[2], f[3]), pack_bf16(f[4], f[5]),
                          pack_bf16(f[6], f[7]));
    }
}

/*
 * Lane (g = lane / 4, c = lane % 4) of a warp loads, per K step of 64 columns k0.., for each
 * of its rows g, g + 8, g + 16, g + 24 the 16 bytes at columns k0 + h*32 + c*8 (h = 0, 1),
 * and the same columns of token g of each n8 tile. Within each 32-column half, the 8 values
 * are fed to two mma k16 steps (j = 0: values 0-3, j = 1: values 4-7), values 4j, 4j+1 as
 * the fragment's k = 2c, 2c+1 and 4j+2, 4j+3 as k = 2c+8, 2c+9, for W and x alike: a
 * permutation of K inside the step, the same for every row and token, so the sum is the
 * matrix product. Loads are the rows' contiguous 64 bytes per 4 lanes, straight into the
 * fragments, with no shared memory.
 */
template <int NT, bool VEC, bool XB>
__global__ void __launch_bounds__(MM_WARPS * 32, NT <= 4 ? 2 : 1)
mm_inv_kernel(mm_out out, mm_w wd, const float *__restrict__ x, float *__restrict__ part,
              int *__restrict__ cnt, int T, int kb_n, int n_steps, int nz, int tile) {
    const bf16 *__restrict__ W = (const bf16 *)wd.p[0];
    const int rows = wd.rows, cols = wd.cols;
    const int lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
    const mm_pos ps = mm_position(kb_n, n_steps, nz, tile);
    const int row0 = ps.row0, tok0 = ps.tok0, s0 = ps.s0, s1 = ps.s1;

    float acc[2][NT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[m][n][e] = 0.f;

    /* wv[m * 2 + r][h]: row row0 + m*16 + r*8 + g, half h of the step */
    uint4 wa[4][2], wb[4][2];
    auto load_step = [&](uint4 (&wv)[4][2], int s) {
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                wv[q][h] = load_w<VEC>(W, rows, cols, row0 + q * 8 + g, s * MM_KSTEP + h * 32 + c4 * 8);
    };
    auto compute_step = [&](const uint4 (&wv)[4][2], int s) {
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int t = tok0 + n * 8 + g;
            const uint4 x0 = load_x<VEC, XB>(x, T, cols, t, s * MM_KSTEP + c4 * 8);
            const uint4 x1 = load_x<VEC, XB>(x, T, cols, t, s * MM_KSTEP + 32 + c4 * 8);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint4 xv = h ? x1 : x0;
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    const uint4 lo = wv[m * 2][h], hi = wv[m * 2 + 1][h];
                    mma_bf16(acc[m][n], lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
                    mma_bf16(acc[m][n], lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
                }
            }
        }
    };
    /* Programmatic dependent launch: the next matmul in the stream may start now and stream
     * its own weights while this one runs. The first two steps' weights go in flight before
     * waiting for the kernel that writes x (weights never change between kernels). Without
     * the launch attribute both instructions do nothing. */
    asm volatile("griddepcontrol.launch_dependents;");
    if (s0 < s1)
        load_step(wa, s0);
    if (s0 + 1 < s1)
        load_step(wb, s0 + 1);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    /* Two register stages: the next step's weights are in flight while this one computes. */
    for (int s = s0; s < s1; s += 2) {
        compute_step(wa, s);
        if (s + 2 < s1)
            load_step(wa, s + 2);
        if (s + 1 < s1) {
            compute_step(wb, s + 1);
            if (s + 3 < s1)
                load_step(wb, s + 3);
        }
    }

    mm_finish<NT>(acc, out, part, cnt, rows, T, ps.kb, kb_n, ps.rg, ps.z, nz, tok0, row0);
}

template <bool VEC, bool XB>
static mm_kernel_fn mm_pick_t(int nt) {
    switch (nt) {
    case 1: return mm_inv_kernel<1, VEC, XB>;
    case 2: return mm_inv_kernel<2, VEC, XB>;
    case 3: return mm_inv_kernel<3, VEC, XB>;
    case 4: return mm_inv_kernel<4, VEC, XB>;
    case 5: return mm_inv_kernel<5, VEC, XB>;
    case 6: return mm_inv_kernel<6, VEC, XB>;
    case 7: return mm_inv_kernel<7, VEC, XB>;
    default: return mm_inv_kernel<8, VEC, XB>;
    }
}

static mm_kernel_fn mm_pick(int nt, bool vec) {
    return vec ? mm_pick_t<true, false>(nt) : mm_pick_t<false, false>(nt);
}
/* x passed as bf16 (vec always holds for it) */
static mm_kernel_fn mm_pick_xb(int nt, bool) { return mm_pick_t<true, true>(nt); }

/* Blocks over K for a weight: enough blocks to cover the multiprocessors mm_waves times,
 * keeping at least mm_min_steps K steps per warp. A function of the shape and the device
 * only. */
static int mm_kb(const seer_cuda *c, int rows, int n_steps) {
    const long long row_groups = (rows + MM_ROWS - 1) / MM_ROWS;
    int kb = 1;
    while (kb < MM_MAX_KB && row_groups * kb < (long long)c->n_sm * c->mm_waves &&
           n_steps >= (long long)c->mm_min_steps * MM_WARPS * kb * 2)
        kb *= 2;
    return kb;
}

seer_status seer_cuda_mm_launch(seer_cuda *c, const mm_out &out, const mm_w &w, const float *x,
                                int T, int n_steps, mm_kernel_fn (*pick)(int, bool), bool vec,
                                int tile_long) {
    const int rows = w.rows;
    const int kb = mm_kb(c, rows, n_steps);
    /* Blocks whose warps run 8 K steps or more may take tile_long tokens (one block an SM
     * then, but the weights read fewer times): on an H100 (lab, 2026-11-25) at T = 42 the bf16
     * FFN products ran 8-11 % faster in one tile of 48 than in two of 24, and q/k/v at T = 72
     * 12 % faster in two tiles of 40 than in three of 24, while o (4 steps a warp) ran 10-12 %
     * slower. */
    const int tile_max = n_steps >= 8 * MM_WARPS * kb ? tile_long : c->mm_tile;
    const long long row_groups = (rows + MM_ROWS - 1) / MM_ROWS;
    /* Tokens per block: any split of the tokens over blocks gives every element the same
     * sum, so this is tuned for speed alone. Larger tiles read the weights fewer times
     * (from L2 after the first) but hold more accumulators: past 32 tokens a block no
     * longer shares its SM (measured on the H200: 32 beats 16 and 64 from T = 32 up). The
     * tiles are balanced: 40 tokens go as 24 + 16, not 32 + 8. */
    const int nz = (T + tile_max - 1) / tile_max;
    const int tile = ((T + nz - 1) / nz + 7) / 8 * 8;
    const int nt = tile / 8;
    const long long blocks = row_groups * kb * nz;
    if (blocks > INT32_MAX)
        return seer_err(SEER_ERR_UNSUPPORTED, "matmul: %d x %d weight at T = %d", rows, w.cols, T);
    float *part = NULL;
    int *cnt = NULL;
    if (kb > 1) {
        const size_t n_cnt = (size_t)row_groups * nz;
        if (n_cnt * sizeof(int) > c->mm->cnt.cap) {
            SEER_TRY(seer_cuda_reserve(c, &c->mm->cnt, n_cnt * sizeof(int), "matmul split counters"));
            /* counters start at zero; the last block of each tile resets its own */
            CUDA_TRY(cudaMemsetAsync(c->mm->cnt.p, 0, c->mm->cnt.cap, c->stream));
        }
        SEER_TRY(seer_cuda_reserve(c, &c->mm->part, (size_t)kb * T * rows * sizeof(float),
                                   "matmul split partials"));
        part = (float *)c->mm->part.p;
        cnt = (int *)c->mm->cnt.p;
    }
    /* outputs are written after griddepcontrol.wait, accumulating ones too */
    CUDA_TRY(seer_cuda_launch(c, pick(nt, vec), dim3((unsigned)blocks), dim3(MM_WARPS * 32), 0, out,
                              w, x, part, cnt, T, kb, n_steps, nz, tile));
    LAUNCH_TRY("matmul kernel");
    return SEER_OK;
}

/* x [n] to bf16 in the scratch xbf16: cuBLAS multiplies bf16 by bf16, and the batch-invariant
 * kernel reads x there from mm_xb_min_t tokens. */
static seer_status to_bf16(seer_cuda *c, const float *x, size_t n) {
    SEER_TRY(seer_cuda_reserve(c, &c->mm->xbf16, n * sizeof(bf16), "matmul input in bf16"));
    if (n % 4 == 0 && (uintptr_t)x % 16 == 0)
        f32_to_bf16_vec_kernel<<<seer_cuda_grid(n / 4, CVT_THREADS), CVT_THREADS, 0, c->stream>>>(
            (bf16 *)c->mm->xbf16.p, (const float4 *)x, n / 4);
    else
        f32_to_bf16_kernel<<<seer_cuda_grid(n, CVT_THREADS), CVT_THREADS, 0, c->stream>>>((bf16 *)c->mm->xbf16.p, x, n);
    LAUNCH_TRY("f32_to_bf16_kernel");
    return SEER_OK;
}

static seer_status matmul_invariant(seer_cuda *c, const mm_out &out, const float *x,
                                    const seer_weight *w, int T) {
    mm_w wd = {};
    wd.p[0] = (const uint8_t *)w->data;
    wd.stride[0] = w->cols * (int)sizeof(bf16);
    wd.rows = w->rows;
    wd.cols = w->cols;
    wd.type = w->dtype;
    const bool vec = w->cols % 8 == 0 && (uintptr_t)w->data % 16 == 0 && (uintptr_t)x % 16 == 0;
    const int n_steps = (w->cols + MM_KSTEP - 1) / MM_KSTEP;
    /* From mm_xb_min_t tokens the blocks of several token tiles, and of every row group,
     * read x from L2 many times over: rounded to bf16 once first, it is half the bytes (the
     * kernel rounds the same way, so the sums are the same bits). */
    if (vec && T >= c->mm_xb_min_t) {
        SEER_TRY(to_bf16(c, x, (size_t)T * w->cols));
        return seer_cuda_mm_launch(c, out, wd, (const float *)c->mm->xbf16.p, T, n_steps, mm_pick_xb, true,
                                   c->mm_tile_long);
    }
    return seer_cuda_mm_launch(c, out, wd, x, T, n_steps, mm_pick, vec, c->mm_tile_long);
}

/* ---- cuBLAS, for prefill -------------------------------------------------------------- */

/* Rows of a quantised weight dequantised per slice: bounds the scratch (bf16) at 64M values. */
#define Q_SLICE_ELEMS ((size_t)1 << 26)

/* y [T][ldy] (+)= x W_r^T for rows [r0, r0 + n) of w into columns 0..n of y (f32, or bf16 when
 * yt is CUDA_R_16BF: the f32 sums rounded), with cuBLAS. x is already in bf16 (xb). Quantised
 * rows are dequantised to bf16 a slice at a time first. */
static seer_status gemm_rows(seer_cuda *c, void *y, cudaDataType yt, int ldy, const bf16 *xb,
                             const seer_weight *w, int r0, int n, int T, bool acc) {
    const int cols = w->cols;
    const float one = 1.f, beta = acc ? 1.f : 0.f;
    const size_t ysz = yt == CUDA_R_16BF ? sizeof(bf16) : sizeof(float);
    if (w->dtype == GGML_TYPE_BF16) {
        /* Column-major view: W [rows][cols] row-major is a cols x rows matrix, x is cols x T,
         * and y^T = W x^T is rows x T with leading dimension ldy, i.e. y [T][ldy] row-major. */
        CUBLAS_TRY(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, T, cols, &one,
                                (const bf16 *)w->data + (size_t)r0 * cols, CUDA_R_16BF, cols, xb,
                                CUDA_R_16BF, cols, &beta, y, yt, ldy, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
        return SEER_OK;
    }
    int slice = (int)(Q_SLICE_ELEMS / (size_t)cols);
    if (slice < 1)
        slice = 1;
    if (slice > n)
        slice = n;
    SEER_TRY(seer_cuda_reserve(c, &c->mm->wbf16, (size_t)slice * cols * sizeof(bf16), "dequantised weight rows"));
    for (int i = 0; i < n; i += slice) {
        const int k = n - i < slice ? n - i : slice;
        SEER_TRY(seer_cuda_q_rows_bf16(c, (bf16 *)c->mm->wbf16.p, w, r0 + i, k));
        CUBLAS_TRY(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, k, T, cols, &one, c->mm->wbf16.p,
                                CUDA_R_16BF, cols, xb, CUDA_R_16BF, cols, &beta, (char *)y + i * ysz, yt,
                                ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return SEER_OK;
}

/* Whether T rows take the batch-invariant kernels (else cuBLAS). The quantised kernel reads x
 * in 16-byte pieces: an unaligned x (never from the model's scratch) takes the cuBLAS route. */
static bool invariant_rows(const seer_cuda *c, const seer_weight *w, const float *x, int T) {
    return T <= SEER_CUDA_INVARIANT_MAX_T && !c->mm_force_blas &&
           (w->dtype == GGML_TYPE_BF16 || (uintptr_t)x % 16 == 0);
}

/* out's segments of x W^T with x in bf16 in xbf16 already: cuBLAS, then the biases. */
static seer_status blas_segments(seer_cuda *c, const mm_out &out, const seer_weight *w, int T) {
    for (int j = 0; j < out.nseg; j++) {
        const int rows = out.r0[j + 1] - out.r0[j];
        SEER_TRY(gemm_rows(c, out.y[j], CUDA_R_32F, rows, (const bf16 *)c->mm->xbf16.p, w, out.r0[j], rows, T,
                           out.acc != 0));
        if (out.b[j]) {
            const size_t ny = (size_t)T * rows;
            add_bias_kernel<<<seer_cuda_grid(ny, CVT_THREADS), CVT_THREADS, 0, c->stream>>>(out.y[j], out.b[j],
                                                                                           rows, ny);
            LAUNCH_TRY("add_bias_kernel");
        }
    }
    return SEER_OK;
}

static seer_status matmul_any(seer_backend *be, const mm_out &out, const float *x, const seer_weight *w,
                              int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0)
        return SEER_OK;
    if (invariant_rows(c, w, x, T))
        return w->dtype != GGML_TYPE_BF16 ? seer_cuda_matmul_q_invariant(c, out, x, w, T)
                                          : matmul_invariant(c, out, x, w, T);
    SEER_TRY(to_bf16(c, x, (size_t)T * w->cols));
    return blas_segments(c, out, w, T);
}

static mm_out one_out(float *y, const float *bias, int rows, bool acc) {
    mm_out o = {};
    o.y[0] = y;
    o.b[0] = bias;
    o.r0[1] = rows;
    o.nseg = 1;
    o.acc = acc;
    return o;
}

seer_status seer_cuda_matmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                             const float *bias, int T) {
    return matmul_any(be, one_out(y, bias, w->rows, false), x, w, T);
}

seer_status seer_cuda_matmul_add(seer_backend *be, float *y, const float *x, const seer_weight *w,
                                 int T) {
    return matmul_any(be, one_out(y, NULL, w->rows, true), x, w, T);
}

/* The cuBLAS path of a (gate, up) product with its input in xbf16: the [T][rows] row pairs,
 * rounded to bf16, in glu_tmp. */
static seer_status glu_products(seer_cuda *c, const seer_weight *w, int T, const bf16 **gu) {
    SEER_TRY(seer_cuda_reserve(c, &c->mm->glu_tmp, (size_t)T * w->rows * sizeof(bf16), "gate and up products"));
    SEER_TRY(gemm_rows(c, c->mm->glu_tmp.p, CUDA_R_16BF, w->rows, (const bf16 *)c->mm->xbf16.p, w, 0, w->rows, T, false));
    *gu = (const bf16 *)c->mm->glu_tmp.p;
    return SEER_OK;
}

/* y [n] = glu of the n bf16 pairs in gu, in f32 or rounded to bf16 (as f32_to_bf16_kernel
 * would). */
template <typename Y> __global__ void glu_pairs_kernel(Y *y, const __nv_bfloat162 *gu, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float2 p = __bfloat1622float2(gu[i]);
        store_f(y + i, glu(p.x, p.y));
    }
}

/* The same, four pairs (16 bytes) at a time: n4 groups. */
template <typename Y> __global__ void glu_pairs_vec_kernel(Y *y, const uint4 *gu, size_t n4) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint4 p = gu[i];
        const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&p.x),
                     b = __bfloat1622float2(*(const __nv_bfloat162 *)&p.y),
                     c = __bfloat1622float2(*(const __nv_bfloat162 *)&p.z),
                     d = __bfloat1622float2(*(const __nv_bfloat162 *)&p.w);
        store_f4(y, i, make_float4(glu(a.x, a.y), glu(b.x, b.y), glu(c.x, c.y), glu(d.x, d.y)));
    }
}

template <typename Y> static seer_status glu_pairs(seer_cuda *c, Y *y, const bf16 *gu, size_t n) {
    if (n % 4 == 0 && (uintptr_t)y % (4 * sizeof(Y)) == 0 && (uintptr_t)gu % 16 == 0)
        glu_pairs_vec_kernel<Y><<<seer_cuda_grid(n / 4, CVT_THREADS), CVT_THREADS, 0, c->stream>>>(
            y, (const uint4 *)gu, n / 4);
    else
        glu_pairs_kernel<Y><<<seer_cuda_grid(n, CVT_THREADS), CVT_THREADS, 0, c->stream>>>(
            y, (const __nv_bfloat162 *)gu, n);
    LAUNCH_TRY("glu_pairs_kernel");
    return SEER_OK;
}

seer_status seer_cuda_matmul_glu(seer_backend *be, float *y, const float *x, const seer_weight *w,
                                 int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (!w->interleaved || w->rows % 2)
        return seer_err(SEER_ERR_INVALID_ARG, "matmul_glu: the weight is not interleaved (gate, up) pairs");
    if (T <= 0)
        return SEER_OK;
    if (invariant_rows(c, w, x, T)) {
        mm_out o = one_out(y, NULL, w->rows, false);
        o.glu = 1;
        return matmul_any(be, o, x, w, T); /* the invariant kernel, as matmul_any picks it */
    }
    const bf16 *gu;
    SEER_TRY(to_bf16(c, x, (size_t)T * w->cols));
    SEER_TRY(glu_products(c, w, T, &gu));
    return glu_pairs(c, y, gu, (size_t)T * w->rows / 2);
}

/* rmsnorm of x into h, then the batch-invariant product of h (invariant_rows holds): where w
 * is in row blocks, the norm writes the product's 8-bit x at once (seer_cuda_qt_matmul_norm:
 * the same bits, one launch fewer), and h is not written. */
static seer_status norm_invariant(seer_backend *be, const mm_out &o, float *h, const float *x, const float *nw,
                                  float eps, const seer_weight *w, int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (w->dtype != GGML_TYPE_BF16 && seer_cuda_qt_of(c, w->dtype, w->cols))
        return seer_cuda_qt_matmul_norm(be, o, h, x, nw, eps, w, T);
    SEER_TRY(seer_cuda_rmsnorm(be, h, x, nw, T, w->cols, eps));
    return matmul_any(be, o, h, w, T);
}

/* The norm of x [T][D] with nw into xbf16 for cuBLAS: the bits rmsnorm into like and then
 * to_bf16 would give. */
static seer_status norm_to_bf16(seer_cuda *c, const float *x, const float *nw, float eps, int T, int D,
                                const float *like) {
    SEER_TRY(seer_cuda_reserve(c, &c->mm->xbf16, (size_t)T * D * sizeof(bf16), "matmul input in bf16"));
    return seer_cuda_rmsnorm_bf16(c, (bf16 *)c->mm->xbf16.p, x, nw, T, D, eps, like);
}

/* x += Wdown glu(Wgu rmsnorm(x)). Where the products go to cuBLAS, the norm and the pairs' glu
 * go to bf16 at once, which is what the products read of rmsnorm's and matmul_glu's outputs
 * anyway: the same bits as rmsnorm, matmul_glu and matmul_add, without writing h and g in f32
 * and reading them back. */
seer_status seer_cuda_ffn_glu(seer_backend *be, float *x, float *h, const float *nw, float eps,
                              const seer_weight *wgu, const seer_weight *wdown, float *g, int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (!wgu->interleaved || wgu->rows % 2 || wdown->cols != wgu->rows / 2 || wdown->rows != wgu->cols)
        return seer_err(SEER_ERR_INVALID_ARG, "ffn_glu: a %dx%d (gate, up) weight with a %dx%d down weight",
                        wgu->rows, wgu->cols, wdown->rows, wdown->cols);
    if (T <= 0)
        return SEER_OK;
    const int D = wgu->cols, F = wdown->cols;
    /* where either product takes the invariant kernel, each op picks its own route */
    if (invariant_rows(c, wgu, h, T)) {
        mm_out o = one_out(g, NULL, wgu->rows, false); /* as seer_cuda_matmul_glu makes it */
        o.glu = 1;
        SEER_TRY(norm_invariant(be, o, h, x, nw, eps, wgu, T));
        return seer_cuda_matmul_add(be, x, g, wdown, T);
    }
    if (invariant_rows(c, wdown, g, T)) {
        SEER_TRY(seer_cuda_rmsnorm(be, h, x, nw, T, D, eps));
        SEER_TRY(seer_cuda_matmul_glu(be, g, h, wgu, T));
        return seer_cuda_matmul_add(be, x, g, wdown, T);
    }
    /* room for both of xbf16's uses first: it never moves between them */
    SEER_TRY(seer_cuda_reserve(c, &c->mm->xbf16, (size_t)T * (D > F ? D : F) * sizeof(bf16), "matmul input in bf16"));
    SEER_TRY(norm_to_bf16(c, x, nw, eps, T, D, h));
    const bf16 *gu;
    SEER_TRY(glu_products(c, wgu, T, &gu));
    /* the products' input is read by now in stream order: its buffer takes the pairs */
    SEER_TRY(glu_pairs(c, (bf16 *)c->mm->xbf16.p, gu, (size_t)T * F));
    return gemm_rows(c, x, CUDA_R_32F, D, (const bf16 *)c->mm->xbf16.p, wdown, 0, D, T, true);
}

/* out's segments from a weight's row ranges (matmul_split's arguments). */
static seer_status split_out(const char *op, float *const *ys, const seer_weight *w, const float *const *biases,
                             mm_out *o) {
    if (w->n_seg < 1 || w->n_seg > SEER_WEIGHT_MAX_SEG)
        return seer_err(SEER_ERR_INVALID_ARG, "%s: the weight has %d segments", op, w->n_seg);
    *o = mm_out{};
    o->nseg = w->n_seg;
    for (int j = 0; j < w->n_seg; j++) {
        o->y[j] = ys[j];
        o->b[j] = biases ? biases[j] : NULL;
        o->r0[j + 1] = o->r0[j] + w->seg_rows[j];
    }
    if (o->r0[w->n_seg] != w->rows)
        return seer_err(SEER_ERR_INVALID_ARG, "%s: segments of %d rows in a weight of %d", op, o->r0[w->n_seg],
                        w->rows);
    return SEER_OK;
}

seer_status seer_cuda_matmul_split(seer_backend *be, float *const *ys, const float *x,
                                   const seer_weight *w, const float *const *biases, int T) {
    mm_out o;
    SEER_TRY(split_out("matmul_split", ys, w, biases, &o));
    return matmul_any(be, o, x, w, T);
}

/* rmsnorm into h, then matmul_split of h; above the invariant rows the norm goes to bf16 at
 * once (the same bits), and h is not written. */
seer_status seer_cuda_norm_matmul_split(seer_backend *be, float *const *ys, float *h, const float *x,
                                        const float *nw, float eps, const seer_weight *w,
                                        const float *const *biases, int T) {
    seer_cuda *c = seer_cuda_of(be);
    mm_out o;
    if (w->n_seg < 1) /* a weight of one part */
        o = one_out(ys[0], biases ? biases[0] : NULL, w->rows, false);
    else
        SEER_TRY(split_out("norm_matmul_split", ys, w, biases, &o));
    if (T <= 0)
        return SEER_OK;
    if (invariant_rows(c, w, h, T))
        return norm_invariant(be, o, h, x, nw, eps, w, T);
    SEER_TRY(norm_to_bf16(c, x, nw, eps, T, w->cols, h));
    return blas_segments(c, o, w, T);
}

/* rmsnorm into h, then each weight's product of h: where every weight is in row blocks and
 * takes the invariant kernels, x in 8 bits once for all of them
 * (seer_cuda_qt_matmuls_norm); else rmsnorm and a matmul each. The values of rmsnorm and n
 * matmuls either way. */
seer_status seer_cuda_norm_matmuls(seer_backend *be, float *const *ys, float *h, const float *x,
                                   const float *nw, float eps, const seer_weight *ws, int n,
                                   const float *const *biases, int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (n < 1 || n > SEER_WEIGHT_MAX_SEG)
        return seer_err(SEER_ERR_INVALID_ARG, "norm_matmuls: %d weights (1 to %d)", n, SEER_WEIGHT_MAX_SEG);
    const int cols = ws[0].cols;
    bool rows_qt = true;
    mm_out outs[SEER_WEIGHT_MAX_SEG];
    for (int j = 0; j < n; j++) {
        if (ws[j].cols != cols || ws[j].n_seg)
            return seer_err(SEER_ERR_INVALID_ARG, "norm_matmuls: weight %d is not a plain weight of %d columns", j,
                            cols);
        outs[j] = one_out(ys[j], biases ? biases[j] : NULL, ws[j].rows, false);
        rows_qt = rows_qt && ws[j].dtype != GGML_TYPE_BF16 && seer_cuda_qt_of(c, ws[j].dtype, cols) &&
                  invariant_rows(c, &ws[j], h, T);
    }
    if (T <= 0)
        return SEER_OK;
    if (rows_qt)
        return seer_cuda_qt_matmuls_norm(be, outs, h, x, nw, eps, ws, n, T);
    SEER_TRY(seer_cuda_rmsnorm(be, h, x, nw, T, cols, eps));
    for (int j = 0; j < n; j++)
        SEER_TRY(matmul_any(be, outs[j], h, &ws[j], T));
    return SEER_OK;
}

/* ---- the family's state ---------------------------------------------------------------- */

seer_status seer_cuda_mm_init(seer_cuda *c) {
    c->mm = (seer_cuda_mm *)calloc(1, sizeof *c->mm);
    return c->mm ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

void seer_cuda_mm_free(seer_cuda *c) {
    if (!c->mm)
        return;
    seer_cuda_buf *bufs[] = {&c->mm->xbf16, &c->mm->part, &c->mm->cnt, &c->mm->glu_tmp, &c->mm->wbf16};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        seer_cuda_buf_free(c, bufs[i]);
    free(c->mm);
    c->mm = NULL;
}
