/*
 * matmul_qt.cu: Q4_K weights in row blocks for a GEMV at small T (decode): the layout, its
 * making on the device from the GGUF blocks, the 8-bit x it multiplies, and the kernel.
 *
 * Layout, per block of 32 rows and super-block of 256 columns (QT_SB_BYTES = 4736 bytes):
 *   codes, per half h (128 columns) and group j of it (32 columns): [row 0..31][16 bytes],
 *     2048 bytes a half; a row's 16 bytes are 4 words, word c holding columns 4c..4c+3 of
 *     the group in its low nibbles (byte i: column 4c + i) and 16+4c..16+4c+3 in its high
 *     nibbles, so that w & 0x0F0F0F0F and (w >> 4) & 0x0F0F0F0F are four codes each as bytes
 *     (and word c is what lane c of an mma.m16n8k32 A fragment holds for that row);
 *   sub-scales, per half: [row][sc of the half's 4 groups, m of them], 256 bytes a half;
 *   d and dmin as stored (f16): [row][4 bytes], 128 bytes.
 * Rows are padded to a multiple of 32 with zeros. 4736 bytes per 8192 weights: 4.625 bits a
 * weight (the file: 4.5), every bit of the file kept (the 6-bit scales unpacked to bytes).
 *
 * x, per call (qt_xprep_kernel): each group of 32 columns of a token rounded to 8 bits
 * (dx = amax / 127, q = round(x / dx)), its bytes in the weights' order (byte 8c + i: column
 * 4c + i; 8c + 4 + i: column 16 + 4c + i), and (dx, sum of q) per group.
 *
 * The kernel: lane = row, 8 warps over slices of K, KB blocks over K, the warps' sums added
 * in warp order and the blocks' in block order (matmul.cuh's split, with rows in lanes). Per
 * group a lane sums code * q exactly in integers (8 dp4a per group and token, started from
 * 0x4B400000 so that the sum read as a float is 2^23 + 2^22 + sum: one FADD from exact),
 * then adds in f32, in group order:
 *     acc = fma(dx, fma(d * sc, isum, -(dmin * m) * sum q), acc)
 * where d * sc and dmin * m are exact in f32 (an f16 times a 6-bit integer). The integer
 * part is exact and the f32 part a fixed chain per (row, token), whatever T is. Above
 * seer_cuda.qt_gemv_max_t tokens (1 by default; up to SEER_CUDA_INVARIANT_MAX_T) a
 * tensor-core kernel sums the same integers (mma.m16n8k32.s8 from a 0x4B400000 start, two
 * m16 tiles of rows, tokens as n) and runs the same chain in the same split over K, so a
 * row's bits do not depend on T or on which kernel ran (test_backend_ops_q checks both).
 *
 * What the numbers keep: the weights exactly (codes, d, dmin, 6-bit scales); x rounded to 8
 * bits per group of 32 (as the CPU backend and llama.cpp's quantised products do) where the
 * planes' kernel rounds it to bf16: against the CPU's f32 reference about 4e-3 relative
 * instead of 2e-3 (lab, Llama shapes).
 * Measured (lab_matmul, H100, T = 1, us): gate/up 43.7 -> 25.9, down 23.4 -> 16.4, q/k/v
 * 11.0 -> 9.6, o 8.2 -> 6.6 (x preparation included); the GEMV is bound by the x
 * preparation launch on the small shapes and streams at ~88 % of the copy bandwidth on
 * gate/up. The tensor-core kernel is within 10 % of the planes' kernel from T = 2 to 8,
 * slower at 16 (1 block an SM for two n8 tiles) and faster at 64.
 * Not for: the other types (matmul_q.cu), prefill (cuBLAS on dequantised rows).
 */
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/qweights.cuh"

#define QT_ROWS 32
#define QT_SB_BYTES 4736
#define QT_SCM 4096 /* offset of the sub-scales in a super-block */
#define QT_DM 4608  /* offset of d, dmin */

size_t seer_cuda_qt_bytes(int rows, int cols) {
    return (size_t)((rows + QT_ROWS - 1) / QT_ROWS) * (size_t)(cols / 256) * QT_SB_BYTES;
}

/* ggml's get_scale_min_k4: sub-block j's 6-bit scale and min from the 12 packed bytes q. */
static __device__ __forceinline__ void k4_sm(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* One thread per (row, super-block) of src (GGUF Q4_K blocks, rows of n_sb blocks). dst
 * starts zeroed (the padding rows stay so). */
__global__ void qt_repack_kernel(uint8_t *dst, const uint8_t *src, int rows, int n_sb) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)rows * n_sb;
         i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / n_sb), sb = (int)(i % n_sb), rr = r % QT_ROWS;
        const uint8_t *b = src + ((size_t)r * n_sb + sb) * 144;
        uint8_t *o = dst + ((size_t)(r / QT_ROWS) * n_sb + sb) * QT_SB_BYTES;
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = b + 16 + 32 * (j >> 1);
            const int sh = (j & 1) * 4;
            uint32_t w[4];
            for (int c = 0; c < 4; c++) {
                w[c] = 0;
                for (int k = 0; k < 4; k++) {
                    const uint32_t lo = (qs[4 * c + k] >> sh) & 15, hi = (qs[16 + 4 * c + k] >> sh) & 15;
                    w[c] |= (lo | hi << 4) << (8 * k);
                }
            }
            *(uint4 *)(o + (j >> 2) * 2048 + (j & 3) * 512 + rr * 16) = make_uint4(w[0], w[1], w[2], w[3]);
            int sc, m;
            k4_sm(j, b + 4, &sc, &m);
            o[QT_SCM + (j >> 2) * 256 + rr * 8 + (j & 3)] = (uint8_t)sc;
            o[QT_SCM + (j >> 2) * 256 + rr * 8 + 4 + (j & 3)] = (uint8_t)m;
        }
        for (int k = 0; k < 4; k++)
            o[QT_DM + rr * 4 + k] = b[k];
    }
}

seer_status seer_cuda_qt_repack(seer_cuda *c, void *dst, const void *src, int rows, int cols) {
    if (cols % 256)
        return seer_err(SEER_ERR_INVALID_ARG, "q4_K tiles: %d columns are not whole super-blocks", cols);
    const int n_sb = cols / 256;
    CUDA_TRY(cudaMemsetAsync(dst, 0, seer_cuda_qt_bytes(rows, cols), c->stream));
    qt_repack_kernel<<<seer_cuda_grid((size_t)rows * n_sb, 256), 256, 0, c->stream>>>(
        (uint8_t *)dst, (const uint8_t *)src, rows, n_sb);
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
    const int c = (lane & 15) >> 2, pos = 8 * c + 4 * (lane >> 4) + (lane & 3);
    xq[(size_t)t * cols + (size_t)g * 32 + pos] = (int8_t)q;
    if (lane == 0)
        xd[(size_t)t * groups + g] = make_float2(d, (float)s);
}

/* ---- the kernel ---------------------------------------------------------------------------- */

/* One K step (half a super-block) of a lane's row: 4 groups of codes, the sub-scales. */
struct qt_raw {
    uint4 q[4];
    uint2 scm;
    uint32_t dm;
};

static __device__ __forceinline__ void qt_load(qt_raw &r, const uint8_t *W, int rg, int n_sb, int s, int lane) {
    const uint8_t *b = W + ((size_t)rg * n_sb + (s >> 1)) * QT_SB_BYTES;
#pragma unroll
    for (int j = 0; j < 4; j++)
        r.q[j] = ld_stream16(b + (s & 1) * 2048 + j * 512 + lane * 16);
    r.scm = __ldg((const uint2 *)(b + QT_SCM + (s & 1) * 256 + lane * 8));
    r.dm = __ldg((const uint32_t *)(b + QT_DM + lane * 4));
}

/* byte j of w as the float 2^23 + byte */
static __device__ __forceinline__ float qt_byte_f(uint32_t w, int j) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | j));
}

template <int NTOK>
static __device__ __forceinline__ void qt_step(const qt_raw &r, int s, float (&acc)[NTOK], const int8_t *__restrict__ xq,
                                               const float2 *__restrict__ xd, int T, int cols) {
    const float2 dd = __half22float2(*(const __half2 *)&r.dm);
    const float dneg = dd.x * -8388608.f, mneg = dd.y * -8388608.f;
    const int groups = cols / 32;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int gi = s * 4 + j;
        /* d * sc, dmin * m: exact (fma of d (2^23 + sc) with -d 2^23) */
        const float ds = fmaf(dd.x, qt_byte_f(r.scm.x, j), dneg);
        const float dm = fmaf(dd.y, qt_byte_f(r.scm.y, j), mneg);
        const uint4 w = r.q[j];
        const int l0 = (int)(w.x & 0x0F0F0F0Fu), h0 = (int)((w.x >> 4) & 0x0F0F0F0Fu);
        const int l1 = (int)(w.y & 0x0F0F0F0Fu), h1 = (int)((w.y >> 4) & 0x0F0F0F0Fu);
        const int l2 = (int)(w.z & 0x0F0F0F0Fu), h2 = (int)((w.z >> 4) & 0x0F0F0F0Fu);
        const int l3 = (int)(w.w & 0x0F0F0F0Fu), h3 = (int)((w.w >> 4) & 0x0F0F0F0Fu);
#pragma unroll
        for (int t = 0; t < NTOK; t++) {
            if (t >= T)
                break;
            const int8_t *xp = xq + (size_t)t * cols + (size_t)gi * 32;
            const int4 xa = __ldg((const int4 *)xp), xb = __ldg((const int4 *)xp + 1);
            int is = 0x4B400000;
            is = __dp4a(l0, xa.x, is);
            is = __dp4a(h0, xa.y, is);
            is = __dp4a(l1, xa.z, is);
            is = __dp4a(h1, xa.w, is);
            is = __dp4a(l2, xb.x, is);
            is = __dp4a(h2, xb.y, is);
            is = __dp4a(l3, xb.z, is);
            is = __dp4a(h3, xb.w, is);
            const float v = __int_as_float(is) - 12582912.f;
            const float2 dx = __ldg(xd + (size_t)t * groups + gi);
            acc[t] = fmaf(dx.x, fmaf(ds, v, -(dm * dx.y)), acc[t]);
        }
    }
}

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

template <int NTOK>
__global__ void __launch_bounds__(MM_WARPS * 32, 2)
qt_gemv_kernel(mm_out out, const uint8_t *__restrict__ W, const int8_t *__restrict__ xq,
               const float2 *__restrict__ xd, float *__restrict__ part, int *__restrict__ cnt, int rows,
               int cols, int T, int kb_n, int n_steps) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kb = blockIdx.x % kb_n, rg = blockIdx.x / kb_n, n_sb = cols / 256;
    const int KS = kb_n * MM_WARPS, ks = kb * MM_WARPS + warp;
    const int s0 = (int)((long long)n_steps * ks / KS), s1 = (int)((long long)n_steps * (ks + 1) / KS);
    float acc[NTOK];
#pragma unroll
    for (int t = 0; t < NTOK; t++)
        acc[t] = 0.f;
    qt_raw ra, rb;
    pdl_trigger();
    if (s0 < s1)
        qt_load(ra, W, rg, n_sb, s0, lane);
    if (s0 + 1 < s1)
        qt_load(rb, W, rg, n_sb, s0 + 1, lane);
    pdl_wait();
    for (int s = s0; s < s1; s += 2) {
        qt_step<NTOK>(ra, s, acc, xq, xd, T, cols);
        if (s + 2 < s1)
            qt_load(ra, W, rg, n_sb, s + 2, lane);
        if (s + 1 < s1) {
            qt_step<NTOK>(rb, s + 1, acc, xq, xd, T, cols);
            if (s + 3 < s1)
                qt_load(rb, W, rg, n_sb, s + 3, lane);
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

/* A K step of rows g + 8q (q = 0..3) for lane (g, c): word c of each group, the sub-scales. */
struct qt_mraw {
    uint32_t w[4][4]; /* [group][q] */
    uint2 scm[4];
    uint32_t dm[4];
};

static __device__ __forceinline__ void qt_mload(qt_mraw &r, const uint8_t *W, int rg, int n_sb, int s, int g, int c) {
    const uint8_t *b = W + ((size_t)rg * n_sb + (s >> 1)) * QT_SB_BYTES;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int q = 0; q < 4; q++)
            r.w[j][q] = __ldg((const uint32_t *)(b + (s & 1) * 2048 + j * 512 + (g + 8 * q) * 16 + c * 4));
#pragma unroll
    for (int q = 0; q < 4; q++) {
        r.scm[q] = __ldg((const uint2 *)(b + QT_SCM + (s & 1) * 256 + (g + 8 * q) * 8));
        r.dm[q] = __ldg((const uint32_t *)(b + QT_DM + (g + 8 * q) * 4));
    }
}

/* One step: per group, per m16 tile and n8 token tile one mma gives the integer sums of
 * rows (g, g + 8) x tokens (2c, 2c + 1); each element then runs qt_step's chain. */
template <int NT>
static __device__ __forceinline__ void qt_mstep(const qt_mraw &r, int s, float (&acc)[2][NT][4],
                                                const int8_t *__restrict__ xq, const float2 *__restrict__ xd,
                                                int T, int cols, int tok0, int g, int c) {
    const int groups = cols / 32;
    float d[4], dn[4], mn[4], mnn[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float2 dd = __half22float2(*(const __half2 *)&r.dm[q]);
        d[q] = dd.x;
        mn[q] = dd.y;
        dn[q] = dd.x * -8388608.f;
        mnn[q] = dd.y * -8388608.f;
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int gi = s * 4 + j;
        float ds[4], dm[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            ds[q] = fmaf(d[q], qt_byte_f(r.scm[q].x, j), dn[q]);
            dm[q] = fmaf(mn[q], qt_byte_f(r.scm[q].y, j), mnn[q]);
        }
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            lo[q] = r.w[j][q] & 0x0F0F0F0Fu;
            hi[q] = (r.w[j][q] >> 4) & 0x0F0F0F0Fu;
        }
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
                int is[4] = {0x4B400000, 0x4B400000, 0x4B400000, 0x4B400000};
                mma_s8(is, lo[2 * m], lo[2 * m + 1], hi[2 * m], hi[2 * m + 1], b.x, b.y);
                float *A = acc[m][n];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int q = 2 * m + (e >> 1);
                    const float2 dx = e & 1 ? x1 : x0;
                    const float v = __int_as_float(is[e]) - 12582912.f;
                    A[e] = fmaf(dx.x, fmaf(ds[q], v, -(dm[q] * dx.y)), A[e]);
                }
            }
        }
    }
}

template <int NT>
__global__ void __launch_bounds__(MM_WARPS * 32, NT <= 1 ? 2 : 1)
qt_mma_kernel(mm_out out, const uint8_t *__restrict__ W, const int8_t *__restrict__ xq,
              const float2 *__restrict__ xd, float *__restrict__ part, int *__restrict__ cnt, int rows, int cols,
              int T, int kb_n, int n_steps, int nz, int tile) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3, n_sb = cols / 256;
    const mm_pos ps = mm_position(kb_n, n_steps, nz, tile);
    const int s0 = ps.s0, s1 = ps.s1;
    float acc[2][NT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[m][n][e] = 0.f;
    qt_mraw ra, rb;
    pdl_trigger();
    if (s0 < s1)
        qt_mload(ra, W, ps.rg, n_sb, s0, g, c);
    if (s0 + 1 < s1)
        qt_mload(rb, W, ps.rg, n_sb, s0 + 1, g, c);
    pdl_wait();
    for (int s = s0; s < s1; s += 2) {
        qt_mstep<NT>(ra, s, acc, xq, xd, T, cols, ps.tok0, g, c);
        if (s + 2 < s1)
            qt_mload(ra, W, ps.rg, n_sb, s + 2, g, c);
        if (s + 1 < s1) {
            qt_mstep<NT>(rb, s + 1, acc, xq, xd, T, cols, ps.tok0, g, c);
            if (s + 3 < s1)
                qt_mload(rb, W, ps.rg, n_sb, s + 3, g, c);
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

seer_status seer_cuda_qt_matmul(seer_cuda *c, const mm_out &out, const float *x, const void *wt, int rows,
                                int cols, int T) {
    if (T < 1 || T > SEER_CUDA_INVARIANT_MAX_T || cols % 256)
        return seer_err(SEER_ERR_INVALID_ARG, "q4_K tiles: T = %d, %d columns", T, cols);
    const int groups = cols / 32, n_steps = cols / 128;
    const size_t xq_bytes = ((size_t)T * cols + 15) / 16 * 16;
    SEER_TRY(seer_cuda_reserve(c, &c->mm->xbf16, xq_bytes + (size_t)T * groups * sizeof(float2), "matmul input in 8 bits"));
    int8_t *xq = (int8_t *)c->mm->xbf16.p;
    float2 *xd = (float2 *)((uint8_t *)c->mm->xbf16.p + xq_bytes);
    CUDA_TRY(seer_cuda_launch(c, qt_xprep_kernel, dim3(seer_cuda_grid((size_t)T * groups * 32, 256)), dim3(256), 0,
                              xq, xd, x, T, cols));
    LAUNCH_TRY("qt_xprep_kernel");
    const int kb = qt_kb(c, rows, n_steps);
    const long long rgs = (rows + QT_ROWS - 1) / QT_ROWS;
    const bool gemv = T <= c->qt_gemv_max_t && T <= QT_MAX_T;
    /* token tiles of the mma kernel: as matmul.cu's, balanced, at most mm_tile tokens */
    const int tmax = c->mm_tile < 32 ? c->mm_tile : 32;
    const int nz = gemv ? 1 : (T + tmax - 1) / tmax;
    const int tile = gemv ? 8 : ((T + nz - 1) / nz + 7) / 8 * 8;
    float *part = NULL;
    int *cnt = NULL;
    if (kb > 1) {
        if ((size_t)rgs * nz * sizeof(int) > c->mm->cnt.cap) {
            SEER_TRY(seer_cuda_reserve(c, &c->mm->cnt, (size_t)rgs * nz * sizeof(int), "matmul split counters"));
            CUDA_TRY(cudaMemsetAsync(c->mm->cnt.p, 0, c->mm->cnt.cap, c->stream));
        }
        SEER_TRY(seer_cuda_reserve(c, &c->mm->part, (size_t)kb * T * rows * sizeof(float), "matmul split partials"));
        part = (float *)c->mm->part.p;
        cnt = (int *)c->mm->cnt.p;
    }
    const uint8_t *W = (const uint8_t *)wt;
    const int8_t *cxq = xq;
    const float2 *cxd = xd;
    const dim3 block(MM_WARPS * 32);
    cudaError_t e;
    if (gemv) {
        const dim3 grid((unsigned)(rgs * kb));
        void (*k)(mm_out, const uint8_t *, const int8_t *, const float2 *, float *, int *, int, int, int, int, int) =
            T == 1 ? qt_gemv_kernel<1> : T == 2 ? qt_gemv_kernel<2> : T <= 4 ? qt_gemv_kernel<4> : qt_gemv_kernel<8>;
        e = seer_cuda_launch(c, k, grid, block, 0, out, W, cxq, cxd, part, cnt, rows, cols, T, kb, n_steps);
    } else {
        const dim3 grid((unsigned)(rgs * kb * nz));
        void (*k)(mm_out, const uint8_t *, const int8_t *, const float2 *, float *, int *, int, int, int, int, int,
                  int, int);
        switch (tile / 8) {
        case 1: k = qt_mma_kernel<1>; break;
        case 2: k = qt_mma_kernel<2>; break;
        case 3: k = qt_mma_kernel<3>; break;
        default: k = qt_mma_kernel<4>; break;
        }
        e = seer_cuda_launch(c, k, grid, block, 0, out, W, cxq, cxd, part, cnt, rows, cols, T, kb, n_steps, nz, tile);
    }
    CUDA_TRY(e);
    LAUNCH_TRY("qt_gemv_kernel / qt_mma_kernel");
    return SEER_OK;
}

/* ---- the layout's other readers ------------------------------------------------------------ */

/* One thread per (row, super-block) of a part: its bytes to row map(i) of dst (weight_concat). */
__global__ void qt_gather_kernel(uint8_t *dst, const uint8_t *src, int rows, int n_sb, int r0, int stride) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)rows * n_sb;
         i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / n_sb), sb = (int)(i % n_sb), d = r0 + r * stride;
        const uint8_t *s = src + ((size_t)(r / QT_ROWS) * n_sb + sb) * QT_SB_BYTES;
        uint8_t *o = dst + ((size_t)(d / QT_ROWS) * n_sb + sb) * QT_SB_BYTES;
        const int sr = r % QT_ROWS, dr = d % QT_ROWS;
        for (int j = 0; j < 8; j++)
            *(uint4 *)(o + (j >> 2) * 2048 + (j & 3) * 512 + dr * 16) =
                *(const uint4 *)(s + (j >> 2) * 2048 + (j & 3) * 512 + sr * 16);
        for (int h = 0; h < 2; h++)
            *(uint2 *)(o + QT_SCM + h * 256 + dr * 8) = *(const uint2 *)(s + QT_SCM + h * 256 + sr * 8);
        *(uint32_t *)(o + QT_DM + dr * 4) = *(const uint32_t *)(s + QT_DM + sr * 4);
    }
}

seer_status seer_cuda_qt_gather(seer_cuda *c, void *dst, const void *src, int rows, int cols, int r0, int stride) {
    const int n_sb = cols / 256;
    qt_gather_kernel<<<seer_cuda_grid((size_t)rows * n_sb, 256), 256, 0, c->stream>>>(
        (uint8_t *)dst, (const uint8_t *)src, rows, n_sb, r0, stride);
    LAUNCH_TRY("qt_gather_kernel");
    return SEER_OK;
}

static __device__ __forceinline__ void qt_put(float *o, float v) { *o = v; }
static __device__ __forceinline__ void qt_put(bf16 *o, float v) { *o = __float2bfloat16_rn(v); }

/* out [n_rows][cols] = rows row0.. of W (or rows row_ids[]), one thread per (row, group): the
 * CPU's dequantisation, d * sc * q - dmin * m (both products exact); a row outside W: NaN. */
template <typename OUT>
__global__ void qt_dequant_kernel(OUT *out, const uint8_t *W, int rows, int cols, const int32_t *row_ids, int row0,
                                  int n_rows) {
    const int n_sb = cols / 256, groups = cols / 32;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)n_rows * groups;
         i += (long long)gridDim.x * blockDim.x) {
        const int rr = (int)(i / groups), gi = (int)(i % groups), sb = gi / 8, j = gi % 8;
        const int row = row_ids ? row_ids[rr] : row0 + rr;
        OUT *o = out + (size_t)rr * cols + (size_t)gi * 32;
        if (row < 0 || row >= rows) {
            for (int e = 0; e < 32; e++)
                qt_put(o + e, __int_as_float(0x7fc00000));
            continue;
        }
        const uint8_t *b = W + ((size_t)(row / QT_ROWS) * n_sb + sb) * QT_SB_BYTES;
        const int r = row % QT_ROWS;
        const uint4 w = *(const uint4 *)(b + (j >> 2) * 2048 + (j & 3) * 512 + r * 16);
        const float2 dd = __half22float2(*(const __half2 *)(b + QT_DM + r * 4));
        const float d1 = dd.x * (float)b[QT_SCM + (j >> 2) * 256 + r * 8 + (j & 3)];
        const float m1 = dd.y * (float)b[QT_SCM + (j >> 2) * 256 + r * 8 + 4 + (j & 3)];
        const uint32_t wv[4] = {w.x, w.y, w.z, w.w};
        for (int c = 0; c < 4; c++)
            for (int k = 0; k < 4; k++) {
                const uint32_t byte = (wv[c] >> (8 * k)) & 0xFF;
                qt_put(o + 4 * c + k, __fsub_rn(__fmul_rn(d1, (float)(byte & 15)), m1));
                qt_put(o + 16 + 4 * c + k, __fsub_rn(__fmul_rn(d1, (float)(byte >> 4)), m1));
            }
    }
}

template <typename OUT>
static seer_status qt_dequant(seer_cuda *c, OUT *out, const seer_weight *w, const int32_t *row_ids, int row0,
                              int n_rows) {
    const size_t n = (size_t)n_rows * (w->cols / 32);
    qt_dequant_kernel<OUT><<<seer_cuda_grid(n, 256), 256, 0, c->stream>>>(out, (const uint8_t *)w->data, w->rows,
                                                                         w->cols, row_ids, row0, n_rows);
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
