/*
 * matmul_qt.cu: quantised weights in row blocks for small T (decode, verification): their
 * making on the device from the GGUF blocks, the 8-bit x they multiply, the GEMV and the
 * tensor-core kernel, and the layout's other readers (fusing, dequantised rows). Every type
 * of qt_formats.cuh (Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1; the layout of each is
 * described there) goes through the same kernels, templated on its description; a weight
 * whose columns are not whole blocks of 256 stays in matmul_q.cu's planes (seer_cuda_qt_of).
 *
 * x, per call (qt_xprep_kernel): each group of 32 columns of a token rounded to 8 bits
 * (dx = amax / 127, q = round(x / dx)), its bytes in the weights' order (byte 8c + i: column
 * 4c + i; 8c + 4 + i: column 16 + 4c + i), and (dx, sum of q) per group.
 *
 * The GEMV: lane = row, 8 warps over slices of K, KB blocks over K, the warps' sums added in
 * warp order and the blocks' in block order (matmul.cuh's split, with rows in lanes). A K
 * step is half a block (128 columns). Per group a lane sums code * q exactly in integers
 * (8 dp4a per group and token, started from 0x4B400000 so that the sum read as a float is
 * 2^23 + 2^22 + sum: one FADD from exact; Q6_K: two sums, one per 16-column scale), then
 * adds in f32 by the type's chain, in group order, e.g. Q4_K
 *     acc = fma(dx, fma(d * sc, isum, -(dmin * m) * sum q), acc).
 * The integer part is exact and the f32 part a fixed chain per (row, token), whatever T is.
 * Above seer_cuda.qt_gemv_max_t tokens (1 by default; up to SEER_CUDA_INVARIANT_MAX_T) the
 * tensor-core kernel sums the same integers (mma.m16n8k32.s8 from a 0x4B400000 start, or two
 * m16n8k16 for a type with two scales a group; two m16 tiles of rows, tokens as n) and runs
 * the same chain in the same split over K, so a row's bits do not depend on T or on which
 * kernel ran (test_backend_ops_q checks both).
 *
 * What the numbers keep: the weights exactly (codes, scales, mins as stored); x rounded to 8
 * bits per group of 32 (as the CPU backend and llama.cpp's quantised products do) where the
 * planes' kernel rounds it to bf16: against the CPU's f32 reference about 4e-3 relative
 * instead of 2e-3 (lab, Llama shapes, Q4_K).
 * Measured for Q4_K (lab_matmul, H100, T = 1, us): gate/up 43.7 -> 25.9, down 23.4 -> 16.4,
 * q/k/v 11.0 -> 9.6, o 8.2 -> 6.6 (x preparation included); the GEMV is bound by the x
 * preparation launch on the small shapes and streams at ~88 % of the copy bandwidth on
 * gate/up. The tensor-core kernel is within 10 % of the planes' kernel from T = 2 to 8,
 * slower at 16 (1 block an SM for two n8 tiles) and faster at 64. The other types: see
 * docs/benchmarks.md.
 * Not for: prefill (cuBLAS on dequantised rows, matmul.cu).
 */
#include "backend/cuda/matmul_qt.cuh"

bool seer_cuda_qt_type(int dtype) {
    switch (dtype) {
#define QT_CASE(TYPE) case TYPE:
        QT_FORMATS(QT_CASE)
#undef QT_CASE
        return true;
    default:
        return false;
    }
}

template <class F> static size_t qt_bytes_of(int rows, int cols) {
    return (size_t)((rows + QT_ROWS - 1) / QT_ROWS) * (size_t)(cols / QT_COLS) * F::BYTES;
}

size_t seer_cuda_qt_bytes(int dtype, int rows, int cols) {
    switch (dtype) {
#define QT_CASE(TYPE) case TYPE: return qt_bytes_of<qt_fmt<TYPE>>(rows, cols);
        QT_FORMATS(QT_CASE)
#undef QT_CASE
    default:
        return 0;
    }
}

/* ---- making the blocks ------------------------------------------------------------------- */

/* One thread per (row, block) of src's rows, which are rows [row0, row0 + rows) of the weight
 * (GGUF blocks, n_sb blocks of 256 columns a row). dst starts zeroed (padding rows stay so). */
template <class F> __global__ void qt_repack_kernel(uint8_t *dst, const uint8_t *src, int row0, int rows, int n_sb) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)rows * n_sb;
         i += (long long)gridDim.x * blockDim.x) {
        const int sr = (int)(i / n_sb), sb = (int)(i % n_sb), r = row0 + sr;
        qt_repack_row<F>(dst + ((size_t)(r / QT_ROWS) * n_sb + sb) * F::BYTES,
                         src + ((size_t)sr * n_sb + sb) * F::GGUF, r % QT_ROWS);
    }
}

seer_status seer_cuda_qt_repack(seer_cuda *c, int dtype, void *dst, const void *src, int row0, int rows, int cols) {
    if (cols % QT_COLS || !seer_cuda_qt_type(dtype))
        return seer_err(SEER_ERR_INVALID_ARG, "row blocks: %s with %d columns",
                        seer_ggml_type_name((ggml_type)dtype), cols);
    const int n_sb = cols / QT_COLS;
    const unsigned grid = seer_cuda_grid((size_t)rows * n_sb, 256);
    switch (dtype) {
#define QT_CASE(TYPE)                                                                                  \
    case TYPE:                                                                                         \
        qt_repack_kernel<qt_fmt<TYPE>><<<grid, 256, 0, c->stream>>>((uint8_t *)dst, (const uint8_t *)src, \
                                                                   row0, rows, n_sb);                  \
        break;
        QT_FORMATS(QT_CASE)
#undef QT_CASE
    }
    LAUNCH_TRY("qt_repack_kernel");
    return SEER_OK;
}

/* ---- x in 8 bits -------------------------------------------------------------------------- */

/* One warp per (token, group), lane = column. */
__global__ void qt_xprep_kernel(int8_t *xq, float2 *xd, const float *x, int T, int cols) {
    pdl_trigger(); /* the product's first weights go in flight meanwhile */
    pdl_wait();
    const int groups = cols / 32, lane = threadIdx.x & 31;
    const long long wi = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    if (wi >= (long long)T * groups)
        return;
    const int t = (int)(wi / groups), g = (int)(wi % groups);
    const float v = x[(size_t)t * cols + (size_t)g * 32 + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    const int q = (int)roundf(v * id);
    int s = q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    xq[(size_t)t * cols + (size_t)g * 32 + qt_x_byte(lane)] = (int8_t)q;
    if (lane == 0)
        xd[(size_t)t * groups + g] = make_float2(d, (float)s);
}

/* ---- the GEMV ------------------------------------------------------------------------------ */

/* The end of a block: acc[t] holds this warp's sum for row row0 + lane and token t. The
 * warps' sums are added in warp order, the KB blocks' in block order (mm_finish's reduction
 * with rows in lanes). */
template <int NTOK>
static __device__ __forceinline__ void qt_finish(float (&acc)[NTOK], const mm_out &out, float *__restrict__ part,
                                                 int *__restrict__ cnt, int rows, int T, int kb, int kb_n, int rg,
                                                 int row0) {
    __shared__ float red[MM_WARPS][NTOK][QT_ROWS + 1];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < NTOK; t++)
        red[warp][t][lane] = acc[t];
    __syncthreads();
    /* warp et sums token et */
    const int et = warp, er = lane, r = row0 + er;
    if (et < NTOK) {
        float sum = red[0][et][er];
#pragma unroll
        for (int w = 1; w < MM_WARPS; w++)
            sum += red[w][et][er];
        mm_put(out, part, rows, T, kb, kb_n, et, r, er, sum);
    }
    if (kb_n == 1 || !mm_last_block(&cnt[rg], kb_n))
        return;
    if (et < NTOK)
        mm_put_parts(out, part, rows, T, kb_n, et, r, er);
    if (threadIdx.x == 0)
        cnt[rg] = 0;
}

template <class F, int NTOK>
__global__ void __launch_bounds__(MM_WARPS * 32, 2)
qt_gemv_kernel(mm_out out, const uint8_t *__restrict__ W, const int8_t *__restrict__ xq,
               const float2 *__restrict__ xd, float *__restrict__ part, int *__restrict__ cnt, int rows,
               int cols, int T, int kb_n, int n_steps) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kb = blockIdx.x % kb_n, rg = blockIdx.x / kb_n, n_sb = cols / QT_COLS;
    const int KS = kb_n * MM_WARPS, ks = kb * MM_WARPS + warp;
    const int s0 = (int)((long long)n_steps * ks / KS), s1 = (int)((long long)n_steps * (ks + 1) / KS);
    const uint8_t *Wr = W + (size_t)rg * n_sb * F::BYTES;
    float acc[NTOK];
#pragma unroll
    for (int t = 0; t < NTOK; t++)
        acc[t] = 0.f;
    qt_row<F> ra, rb;
    pdl_trigger();
    if (s0 < s1)
        qt_load_row<F>(ra, Wr + (size_t)(s0 >> 1) * F::BYTES, s0 & 1, lane);
    if (s0 + 1 < s1)
        qt_load_row<F>(rb, Wr + (size_t)((s0 + 1) >> 1) * F::BYTES, (s0 + 1) & 1, lane);
    pdl_wait();
    for (int s = s0; s < s1; s += 2) {
        qt_step<F, NTOK>(ra, s, acc, xq, xd, T, cols);
        if (s + 2 < s1)
            qt_load_row<F>(ra, Wr + (size_t)((s + 2) >> 1) * F::BYTES, s & 1, lane);
        if (s + 1 < s1) {
            qt_step<F, NTOK>(rb, s + 1, acc, xq, xd, T, cols);
            if (s + 3 < s1)
                qt_load_row<F>(rb, Wr + (size_t)((s + 3) >> 1) * F::BYTES, (s + 1) & 1, lane);
        }
    }
    qt_finish<NTOK>(acc, out, part, cnt, rows, T, kb, kb_n, rg, rg * QT_ROWS);
}

/* ---- larger T: the same sums on the tensor cores ------------------------------------------- */

static __device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* k16: lane (g, c) holds k 4c..4c+3 of rows g (a0) and g + 8 (a1), and of token g (b0) */
static __device__ __forceinline__ void mma_s8_k16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

/* One step: per group, per m16 tile and n8 token tile the integer sums of rows (g, g + 8) x
 * tokens (2c, 2c + 1) (one k32 mma over the group, or a k16 one per half where the type has
 * two scales a group); each element then runs the type's chain, as qt_step does. */
template <class F, int NT>
static __device__ __forceinline__ void qt_mstep(const qt_lane<F> &r, int s, float (&acc)[2][NT][4],
                                                const int8_t *__restrict__ xq, const float2 *__restrict__ xd,
                                                int T, int cols, int tok0, int g, int c) {
    const int groups = cols / 32;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int gi = s * 4 + j;
        uint32_t e[4], o[4];
        typename F::gs sc[4];
        qt_lane_group<F>(r, j, e, o, sc);
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int tb = tok0 + n * 8 + g, t0 = tok0 + n * 8 + 2 * c;
            uint2 b = make_uint2(0, 0);
            if (tb < T)
                b = __ldg((const uint2 *)(xq + (size_t)tb * cols + (size_t)gi * 32 + 8 * c));
            float2 x0 = make_float2(0.f, 0.f), x1 = x0;
            if (t0 < T)
                x0 = __ldg(xd + (size_t)t0 * groups + gi);
            if (t0 + 1 < T)
                x1 = __ldg(xd + (size_t)(t0 + 1) * groups + gi);
#pragma unroll
            for (int m = 0; m < 2; m++) {
                int i0[4] = {QT_ISUM0, QT_ISUM0, QT_ISUM0, QT_ISUM0}, i1[4] = {QT_ISUM0, QT_ISUM0, QT_ISUM0, QT_ISUM0};
                if constexpr (F::SPLIT) {
                    mma_s8_k16(i0, e[2 * m], e[2 * m + 1], b.x);
                    mma_s8_k16(i1, o[2 * m], o[2 * m + 1], b.y);
                } else {
                    mma_s8(i0, e[2 * m], e[2 * m + 1], o[2 * m], o[2 * m + 1], b.x, b.y);
                }
                float *A = acc[m][n];
#pragma unroll
                for (int el = 0; el < 4; el++) {
                    const int q = 2 * m + (el >> 1);
                    A[el] = F::chain(sc[q], qt_isum(i0[el]), F::SPLIT ? qt_isum(i1[el]) : 0.f, el & 1 ? x1 : x0,
                                     A[el]);
                }
            }
        }
    }
}

template <class F, int NT>
__global__ void __launch_bounds__(MM_WARPS * 32, NT <= 1 ? 2 : 1)
qt_mma_kernel(mm_out out, const uint8_t *__restrict__ W, const int8_t *__restrict__ xq,
              const float2 *__restrict__ xd, float *__restrict__ part, int *__restrict__ cnt, int rows, int cols,
              int T, int kb_n, int n_steps, int nz, int tile) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3, n_sb = cols / QT_COLS;
    const mm_pos ps = mm_position(kb_n, n_steps, nz, tile);
    const int s0 = ps.s0, s1 = ps.s1;
    const uint8_t *Wr = W + (size_t)ps.rg * n_sb * F::BYTES;
    float acc[2][NT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[m][n][e] = 0.f;
    qt_lane<F> ra, rb;
    pdl_trigger();
    if (s0 < s1)
        qt_load_lane<F>(ra, Wr + (size_t)(s0 >> 1) * F::BYTES, s0 & 1, g, c);
    if (s0 + 1 < s1)
        qt_load_lane<F>(rb, Wr + (size_t)((s0 + 1) >> 1) * F::BYTES, (s0 + 1) & 1, g, c);
    pdl_wait();
    for (int s = s0; s < s1; s += 2) {
        qt_mstep<F, NT>(ra, s, acc, xq, xd, T, cols, ps.tok0, g, c);
        if (s + 2 < s1)
            qt_load_lane<F>(ra, Wr + (size_t)((s + 2) >> 1) * F::BYTES, s & 1, g, c);
        if (s + 1 < s1) {
            qt_mstep<F, NT>(rb, s + 1, acc, xq, xd, T, cols, ps.tok0, g, c);
            if (s + 3 < s1)
                qt_load_lane<F>(rb, Wr + (size_t)((s + 3) >> 1) * F::BYTES, (s + 1) & 1, g, c);
        }
    }
    mm_finish<NT>(acc, out, part, cnt, rows, T, ps.kb, kb_n, ps.rg, ps.z, nz, ps.tok0, ps.row0);
}

/* ---- the launch ---------------------------------------------------------------------------- */

/* Blocks over K: about two blocks per multiprocessor, at least two K steps a warp. A
 * function of the shape and the device only: both kernels split the same way. */
static int qt_kb(const seer_cuda *c, int rows, int n_steps) {
    const long long rgs = (rows + QT_ROWS - 1) / QT_ROWS;
    int kb = 1;
    while (kb < MM_MAX_KB && rgs * kb < 2LL * c->n_sm && n_steps >= 2 * MM_WARPS * kb * 2)
        kb *= 2;
    return kb;
}

/* A call's plan: the x buffers, the split and the kernel. */
struct qt_plan {
    const int8_t *xq;
    const float2 *xd;
    float *part;
    int *cnt;
    int rows, cols, T, kb, n_steps, nz, tile;
    long long rgs;
    bool gemv;
};

template <class F> static cudaError_t qt_launch(seer_cuda *c, const mm_out &out, const uint8_t *W, const qt_plan &p) {
    const dim3 block(MM_WARPS * 32);
    if (p.gemv) {
        const dim3 grid((unsigned)(p.rgs * p.kb));
        void (*k)(mm_out, const uint8_t *, const int8_t *, const float2 *, float *, int *, int, int, int, int, int) =
            p.T == 1   ? qt_gemv_kernel<F, 1>
            : p.T == 2 ? qt_gemv_kernel<F, 2>
            : p.T <= 4 ? qt_gemv_kernel<F, 4>
                       : qt_gemv_kernel<F, 8>;
        return seer_cuda_launch(c, k, grid, block, 0, out, W, p.xq, p.xd, p.part, p.cnt, p.rows, p.cols, p.T, p.kb,
                                p.n_steps);
    }
    const dim3 grid((unsigned)(p.rgs * p.kb * p.nz));
    void (*k)(mm_out, const uint8_t *, const int8_t *, const float2 *, float *, int *, int, int, int, int, int, int,
              int);
    switch (p.tile / 8) {
    case 1: k = qt_mma_kernel<F, 1>; break;
    case 2: k = qt_mma_kernel<F, 2>; break;
    case 3: k = qt_mma_kernel<F, 3>; break;
    default: k = qt_mma_kernel<F, 4>; break;
    }
    return seer_cuda_launch(c, k, grid, block, 0, out, W, p.xq, p.xd, p.part, p.cnt, p.rows, p.cols, p.T, p.kb,
                            p.n_steps, p.nz, p.tile);
}

/* x in 8 bits: room for it in xbf16 (xq [T][cols], then xd [T][cols / 32]). */
static seer_status qt_x_room(seer_cuda *c, int T, int cols, int8_t **xq, float2 **xd) {
    const size_t xq_bytes = ((size_t)T * cols + 15) / 16 * 16;
    SEER_TRY(seer_cuda_reserve(c, &c->mm->xbf16, xq_bytes + (size_t)T * (cols / 32) * sizeof(float2),
                               "matmul input in 8 bits"));
    *xq = (int8_t *)c->mm->xbf16.p;
    *xd = (float2 *)((uint8_t *)c->mm->xbf16.p + xq_bytes);
    return SEER_OK;
}

static seer_status qt_check(const seer_weight *w, int T) {
    if (T < 1 || T > SEER_CUDA_INVARIANT_MAX_T || w->cols % QT_COLS || !seer_cuda_qt_type(w->dtype))
        return seer_err(SEER_ERR_INVALID_ARG, "row blocks: T = %d, %s with %d columns", T,
                        seer_ggml_type_name((ggml_type)w->dtype), w->cols);
    return SEER_OK;
}

/* The product of x in 8 bits (xq, xd) with w. */
static seer_status qt_product(seer_cuda *c, const mm_out &out, const int8_t *xq, const float2 *xd,
                              const seer_weight *w, int T) {
    const int rows = w->rows, cols = w->cols;
    qt_plan p = {};
    p.xq = xq;
    p.xd = xd;
    p.rows = rows;
    p.cols = cols;
    p.T = T;
    p.n_steps = cols / QT_STEP;
    p.kb = qt_kb(c, rows, p.n_steps);
    p.rgs = (rows + QT_ROWS - 1) / QT_ROWS;
    p.gemv = T <= c->qt_gemv_max_t && T <= QT_MAX_T;
    /* token tiles of the mma kernel: as matmul.cu's, balanced, at most mm_tile tokens */
    const int tmax = c->mm_tile < 32 ? c->mm_tile : 32;
    p.nz = p.gemv ? 1 : (T + tmax - 1) / tmax;
    p.tile = p.gemv ? 8 : ((T + p.nz - 1) / p.nz + 7) / 8 * 8;
    if (p.kb > 1) {
        if ((size_t)p.rgs * p.nz * sizeof(int) > c->mm->cnt.cap) {
            SEER_TRY(seer_cuda_reserve(c, &c->mm->cnt, (size_t)p.rgs * p.nz * sizeof(int), "matmul split counters"));
            CUDA_TRY(cudaMemsetAsync(c->mm->cnt.p, 0, c->mm->cnt.cap, c->stream));
        }
        SEER_TRY(seer_cuda_reserve(c, &c->mm->part, (size_t)p.kb * T * rows * sizeof(float), "matmul split partials"));
        p.part = (float *)c->mm->part.p;
        p.cnt = (int *)c->mm->cnt.p;
    }
    const uint8_t *W = (const uint8_t *)w->data;
    cudaError_t e = cudaSuccess;
    switch (w->dtype) {
#define QT_CASE(TYPE) case TYPE: e = qt_launch<qt_fmt<TYPE>>(c, out, W, p); break;
        QT_FORMATS(QT_CASE)
#undef QT_CASE
    }
    CUDA_TRY(e);
    LAUNCH_TRY("qt_gemv_kernel / qt_mma_kernel");
    return SEER_OK;
}

/* x [T][cols] in 8 bits (qt_xprep_kernel) into xbf16. */
static seer_status qt_x_of(seer_cuda *c, const float *x, int T, int cols, int8_t **xq, float2 **xd) {
    SEER_TRY(qt_x_room(c, T, cols, xq, xd));
    CUDA_TRY(seer_cuda_launch(c, qt_xprep_kernel, dim3(seer_cuda_grid((size_t)T * (cols / 32) * 32, 256)), dim3(256),
                              0, *xq, *xd, x, T, cols));
    LAUNCH_TRY("qt_xprep_kernel");
    return SEER_OK;
}

seer_status seer_cuda_qt_matmul(seer_cuda *c, const mm_out &out, const float *x, const seer_weight *w, int T) {
    SEER_TRY(qt_check(w, T));
    int8_t *xq;
    float2 *xd;
    SEER_TRY(qt_x_of(c, x, T, w->cols, &xq, &xd));
    return qt_product(c, out, xq, xd, w, T);
}

/* rmsnorm(x) in 8 bits: written by the norm at once where it can (h not written), else the
 * norm into h and then the x kernel; the same bits either way. */
static seer_status qt_norm_x(seer_backend *be, float *h, const float *x, const float *nw, float eps, int T, int cols,
                             int8_t **xq, float2 **xd) {
    seer_cuda *c = seer_cuda_of(be);
    if (!c->qt_norm_fused || !seer_cuda_rmsnorm_q8_fits(x, nw, cols)) {
        SEER_TRY(seer_cuda_rmsnorm(be, h, x, nw, T, cols, eps));
        return qt_x_of(c, h, T, cols, xq, xd);
    }
    SEER_TRY(qt_x_room(c, T, cols, xq, xd));
    return seer_cuda_rmsnorm_q8(c, *xq, *xd, x, nw, T, cols, eps);
}

seer_status seer_cuda_qt_matmuls_norm(seer_backend *be, const mm_out *outs, float *h, const float *x,
                                      const float *nw, float eps, const seer_weight *ws, int n, int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (n < 1 || n > SEER_WEIGHT_MAX_SEG)
        return seer_err(SEER_ERR_INVALID_ARG, "row blocks: %d weights in one product (1 to %d)", n,
                        SEER_WEIGHT_MAX_SEG);
    for (int j = 0; j < n; j++) {
        SEER_TRY(qt_check(&ws[j], T));
        if (ws[j].cols != ws[0].cols)
            return seer_err(SEER_ERR_INVALID_ARG, "row blocks: weights of %d and %d columns on one x", ws[0].cols,
                            ws[j].cols);
    }
    int8_t *xq;
    float2 *xd;
    SEER_TRY(qt_norm_x(be, h, x, nw, eps, T, ws[0].cols, &xq, &xd));
    for (int j = 0; j < n; j++)
        SEER_TRY(qt_product(c, outs[j], xq, xd, &ws[j], T));
    return SEER_OK;
}

seer_status seer_cuda_qt_matmul_norm(seer_backend *be, const mm_out &out, float *h, const float *x,
                                     const float *nw, float eps, const seer_weight *w, int T) {
    return seer_cuda_qt_matmuls_norm(be, &out, h, x, nw, eps, w, 1, T);
}

/* ---- the layout's other readers ------------------------------------------------------------ */

/* N bytes (a power of two up to 32, aligned so) from s to d */
template <int N> static __device__ __forceinline__ void qt_copy(uint8_t *d, const uint8_t *s) {
    if constexpr (N >= 16) {
#pragma unroll
        for (int k = 0; k < N / 16; k++)
            ((uint4 *)d)[k] = ((const uint4 *)s)[k];
    } else if constexpr (N == 8) {
        *(uint2 *)d = *(const uint2 *)s;
    } else if constexpr (N == 4) {
        *(uint32_t *)d = *(const uint32_t *)s;
    } else if constexpr (N == 2) {
        *(uint16_t *)d = *(const uint16_t *)s;
    } else if constexpr (N == 1) {
        *d = *s;
    }
}

/* One thread per (row, block) of a part: its bytes to row r0 + i * stride of dst
 * (weight_concat). */
template <class F>
__global__ void qt_gather_kernel(uint8_t *dst, const uint8_t *src, int rows, int n_sb, int r0, int stride) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)rows * n_sb;
         i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / n_sb), sb = (int)(i % n_sb), d = r0 + r * stride;
        const uint8_t *s = src + ((size_t)(r / QT_ROWS) * n_sb + sb) * F::BYTES;
        uint8_t *o = dst + ((size_t)(d / QT_ROWS) * n_sb + sb) * F::BYTES;
        const int sr = r % QT_ROWS, dr = d % QT_ROWS;
        for (int j = 0; j < 8; j++) {
            qt_copy<F::LO>(o + F::lo_at(j, dr), s + F::lo_at(j, sr));
            qt_copy<F::HI>(o + F::hi_at(j, dr), s + F::hi_at(j, sr));
        }
        for (int h = 0; h < 2; h++)
            qt_copy<F::SC>(o + F::sc_at(h, dr), s + F::sc_at(h, sr));
        qt_copy<F::SB>(o + F::sb_at(dr), s + F::sb_at(sr));
    }
}

seer_status seer_cuda_qt_gather(seer_cuda *c, int dtype, void *dst, const void *src, int rows, int cols, int r0,
                                int stride) {
    const int n_sb = cols / QT_COLS;
    const unsigned grid = seer_cuda_grid((size_t)rows * n_sb, 256);
    switch (dtype) {
#define QT_CASE(TYPE)                                                                                  \
    case TYPE:                                                                                         \
        qt_gather_kernel<qt_fmt<TYPE>><<<grid, 256, 0, c->stream>>>((uint8_t *)dst, (const uint8_t *)src, \
                                                                   rows, n_sb, r0, stride);            \
        break;
        QT_FORMATS(QT_CASE)
#undef QT_CASE
    default:
        return seer_err(SEER_ERR_INVALID_ARG, "row blocks: no %s", seer_ggml_type_name((ggml_type)dtype));
    }
    LAUNCH_TRY("qt_gather_kernel");
    return SEER_OK;
}

static __device__ __forceinline__ void qt_put(float *o, float v) { *o = v; }
static __device__ __forceinline__ void qt_put(bf16 *o, float v) { *o = __float2bfloat16_rn(v); }

/* out [n_rows][cols] = rows row0.. of W (or rows row_ids[]), one thread per (row, group): the
 * CPU's dequantisation (qt_group_values); a row outside W: NaN. */
template <class F, typename OUT>
__global__ void qt_dequant_kernel(OUT *out, const uint8_t *W, int rows, int cols, const int32_t *row_ids, int row0,
                                  int n_rows) {
    const int n_sb = cols / QT_COLS, groups = cols / 32;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)n_rows * groups;
         i += (long long)gridDim.x * blockDim.x) {
        const int rr = (int)(i / groups), gi = (int)(i % groups);
        const int row = row_ids ? row_ids[rr] : row0 + rr;
        OUT *o = out + (size_t)rr * cols + (size_t)gi * 32;
        if (row < 0 || row >= rows) {
            for (int e = 0; e < 32; e++)
                qt_put(o + e, __int_as_float(0x7fc00000));
            continue;
        }
        float v[32];
        qt_group_values<F>(W + ((size_t)(row / QT_ROWS) * n_sb + gi / 8) * F::BYTES, gi % 8, row % QT_ROWS, v);
        for (int e = 0; e < 32; e++)
            qt_put(o + e, v[e]);
    }
}

template <typename OUT>
static seer_status qt_dequant(seer_cuda *c, OUT *out, const seer_weight *w, const int32_t *row_ids, int row0,
                              int n_rows) {
    const unsigned grid = seer_cuda_grid((size_t)n_rows * (w->cols / 32), 256);
    const uint8_t *W = (const uint8_t *)w->data;
    switch (w->dtype) {
#define QT_CASE(TYPE)                                                                                 \
    case TYPE:                                                                                        \
        qt_dequant_kernel<qt_fmt<TYPE>, OUT><<<grid, 256, 0, c->stream>>>(out, W, w->rows, w->cols, row_ids, \
                                                                          row0, n_rows);              \
        break;
        QT_FORMATS(QT_CASE)
#undef QT_CASE
    default:
        return seer_err(SEER_ERR_INVALID_ARG, "row blocks: no %s", seer_ggml_type_name((ggml_type)w->dtype));
    }
    LAUNCH_TRY("qt_dequant_kernel");
    return SEER_OK;
}

seer_status seer_cuda_qt_rows_bf16(seer_cuda *c, bf16 *out, const seer_weight *w, int row0, int n_rows) {
    return qt_dequant<bf16>(c, out, w, NULL, row0, n_rows);
}

seer_status seer_cuda_qt_gather_f32(seer_cuda *c, float *out, const seer_weight *w, const int32_t *rows,
                                    int n_rows) {
    return qt_dequant<float>(c, out, w, rows, 0, n_rows);
}
