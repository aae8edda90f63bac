/*
 * matmul.cuh: what the batch-invariant matmul kernels share (matmul.cu for bf16 weights,
 * matmul_q.cu for weights in their GGUF block encodings): where the output rows go, the
 * fixed-order reduction of the warps' and blocks' partial sums, and the launch that picks
 * the split over K from the weight's shape and the device alone.
 * Not for: the kernels' main loops, which differ in how they read a weight.
 */
#ifndef SEER_CUDA_MATMUL_CUH
#define SEER_CUDA_MATMUL_CUH

#include "backend/cuda/cuda_common.cuh"

#define MM_WARPS 8        /* warps of a block: K slices of the same rows */
#define MM_ROWS 32        /* rows of W per block */
#define MM_MAX_TILE 64    /* most tokens one block holds: 8 n8 tiles */
#define MM_MAX_KB 16

/* Where the rows of W go: row r of segment j (r0[j] <= r < r0[j + 1]) to y[j][t][r - r0[j]]
 * (+ b[j][r - r0[j]] when b[j]); acc: y += the product instead of y =. */
struct mm_out {
    float *y[SEER_WEIGHT_MAX_SEG];
    const float *b[SEER_WEIGHT_MAX_SEG];
    int r0[SEER_WEIGHT_MAX_SEG + 1];
    int nseg, acc;
    int glu; /* rows come in (gate, up) pairs: y[0][t][r / 2] = glu(row r, row r + 1) */
};

/* A weight as the kernels read it: up to four planes of [rows][stride[i] bytes] (bf16: one
 * plane of the rows; quantised: see qweights.cuh). */
struct mm_w {
    const uint8_t *p[4];
    int stride[4];
    int rows, cols, type;
};

/* silu(g) * u exactly as the swiglu op computes it (elementwise.cu) */
static __device__ __forceinline__ float glu(float g, float u) { return g / (1.f + expf(-g)) * u; }

static __device__ __forceinline__ void mm_store(const mm_out &o, int t, int r, float v) {
    float *y = o.y[0];
    const float *b = o.b[0];
    int base = 0, w = o.r0[1];
#pragma unroll
    for (int k = 1; k < SEER_WEIGHT_MAX_SEG; k++)
        if (k < o.nseg && r >= o.r0[k]) {
            y = o.y[k];
            b = o.b[k];
            base = o.r0[k];
            w = o.r0[k + 1] - o.r0[k];
        }
    const int rr = r - base;
    if (b)
        v += b[rr];
    float *d = y + (size_t)t * w + rr;
    *d = o.acc ? *d + v : v;
}

/* 16 bytes that the kernel reads once: past L1, into L2 in 256-byte pieces. */
static __device__ __forceinline__ uint4 ld_stream16(const void *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

/* Token t, row r's sum from one block (lane er of its warp holds row r, the warp holds rows of
 * one token): with one block over K, to the output, or for a glu its pair's (the up row is the
 * next lane's) product; else to block kb's partial. Every lane of the warp calls it. */
static __device__ __forceinline__ void mm_put(const mm_out &out, float *__restrict__ part, int rows, int T,
                                              int kb, int kb_n, int t, int r, int er, float sum) {
    if (kb_n == 1 && out.glu) {
        const float up = __shfl_xor_sync(0xffffffffu, sum, 1);
        if (t < T && r < rows && !(er & 1))
            out.y[0][(size_t)t * (rows / 2) + r / 2] = glu(sum, up);
    } else if (t < T && r < rows) {
        if (kb_n == 1)
            mm_store(out, t, r, sum);
        else
            part[((size_t)kb * T + t) * rows + r] = sum;
    }
}

/* Whether this block is the last of the kb_n over K of its tile to arrive at *ctr (which it
 * then resets for the next call): the one that adds the partials (threadFenceReduction in the
 * CUDA samples). Every thread of the block calls it. */
static __device__ __forceinline__ bool mm_last_block(int *ctr, int kb_n) {
    __shared__ int s_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        s_last = atomicAdd(ctr, 1) == kb_n - 1;
    __syncthreads();
    const bool last = s_last;
    if (last)
        __threadfence();
    return last;
}

/* The last block's store of token t, row r: the KB blocks' partials added in block order. */
static __device__ __forceinline__ void mm_put_parts(const mm_out &out, const float *__restrict__ part, int rows,
                                                    int T, int kb_n, int t, int r, int er) {
    float sum = 0.f;
    if (t < T && r < rows) {
        sum = __ldcg(&part[(size_t)t * rows + r]);
        for (int k = 1; k < kb_n; k++)
            sum += __ldcg(&part[((size_t)k * T + t) * rows + r]);
    }
    mm_put(out, NULL, rows, T, 0, 1, t, r, er, sum);
}

/*
 * The end of a block: acc[m][n][e] holds, in the mma accumulator layout, this warp's sums for
 * rows row0 + m*16 + g (+ 8) and tokens tok0 + n*8 + 2c (+ 1). The warps' sums are added in
 * warp order; with kb_n > 1 blocks over K, the last block of the tile to arrive adds the KB
 * sums in block order (threadFenceReduction in the CUDA samples). The order depends on the
 * split alone, never on T.
 */
template <int NT>
static __device__ __forceinline__ void mm_finish(float (&acc)[2][NT][4], const mm_out &out,
                                                 float *__restrict__ part, int *__restrict__ cnt,
                                                 int rows, int T, int kb, int kb_n, int rg, int z,
                                                 int nz, int tok0, int row0) {
    __shared__ float red[MM_WARPS][8][MM_ROWS + 1]; /* [warp][token of the n8 tile][row] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
    const int et = threadIdx.x >> 5, er = threadIdx.x & 31;
#pragma unroll
    for (int n = 0; n < NT; n++) {
#pragma unroll
        for (int m = 0; m < 2; m++) {
            red[warp][2 * c4][m * 16 + g] = acc[m][n][0];
            red[warp][2 * c4 + 1][m * 16 + g] = acc[m][n][1];
            red[warp][2 * c4][m * 16 + g + 8] = acc[m][n][2];
            red[warp][2 * c4 + 1][m * 16 + g + 8] = acc[m][n][3];
        }
        __syncthreads();
        float sum = red[0][et][er];
#pragma unroll
        for (int w = 1; w < MM_WARPS; w++)
            sum += red[w][et][er];
        mm_put(out, part, rows, T, kb, kb_n, tok0 + n * 8 + et, row0 + er, er, sum);
        __syncthreads();
    }
    if (kb_n == 1 || !mm_last_block(&cnt[(size_t)rg * nz + z], kb_n))
        return;
#pragma unroll
    for (int n = 0; n < NT; n++)
        mm_put_parts(out, part, rows, T, kb_n, tok0 + n * 8 + et, row0 + er, er);
    if (threadIdx.x == 0)
        cnt[(size_t)rg * nz + z] = 0; /* ready for the next call */
}

/* A kernel's (block index -> z token tile, kb K block, rg row group) and the K steps
 * [s0, s1) of this warp. */
struct mm_pos {
    int z, kb, rg, row0, tok0, s0, s1;
};

static __device__ __forceinline__ mm_pos mm_position(int kb_n, int n_steps, int nz, int tile) {
    mm_pos p;
    int b = blockIdx.x;
    p.z = b % nz;
    b /= nz;
    p.kb = b % kb_n;
    p.rg = b / kb_n;
    p.row0 = p.rg * MM_ROWS;
    p.tok0 = p.z * tile;
    const int warp = threadIdx.x >> 5;
    const int KS = kb_n * MM_WARPS, ks = p.kb * MM_WARPS + warp;
    p.s0 = (int)((long long)n_steps * ks / KS);
    p.s1 = (int)((long long)n_steps * (ks + 1) / KS);
    return p;
}

typedef void (*mm_kernel_fn)(mm_out, mm_w, const float *, float *, int *, int, int, int, int, int);

/* Launches fn (one of the kernels above, for n_steps K steps of the weight) over the weight's
 * row groups x KB blocks x token tiles; KB and the tile come from the shape, the device and T
 * (the tile only: any split of the tokens gives every element the same sum), at most
 * mm_tile tokens, or tile_long where each warp runs many K steps. pick(nt) gives the kernel
 * for nt n8 tiles per block. */
seer_status seer_cuda_mm_launch(seer_cuda *c, const mm_out &out, const mm_w &w, const float *x,
                                int T, int n_steps, mm_kernel_fn (*pick)(int nt, bool vec), bool vec,
                                int tile_long);

/* Weights in a GGUF block encoding (matmul_q.cu). */
mm_w seer_cuda_qweight_planes(const seer_weight *w);
/* The matmul family's scratch (matmul.cu, matmul_q.cu, matmul_qt.cu): x in bf16 (or the row
 * blocks' 8-bit x), the split-K partials and per-tile arrival counters (zero between calls),
 * matmul_glu's products before the pairs combine and a slice of a quantised weight's rows in
 * bf16 (both cuBLAS). Its tuning is the instance's (seer_cuda.mm_*). */
struct seer_cuda_mm {
    seer_cuda_buf xbf16, part, cnt, glu_tmp, wbf16;
};

seer_status seer_cuda_matmul_q_invariant(seer_cuda *c, const mm_out &out, const float *x,
                                         const seer_weight *w, int T);
/* Quantised weights in row blocks (matmul_qt.cu; the types of qt_formats.cuh): the bytes of a
 * [rows][cols] weight so laid out, their making from the GGUF blocks (src: rows [row0,
 * row0 + rows) of the weight, on the device; dst zeroed before the first rows), and the
 * product (T <= SEER_CUDA_INVARIANT_MAX_T; the GEMV up to QT_MAX_T tokens). */
#define QT_MAX_T 8
bool seer_cuda_qt_type(int dtype);
size_t seer_cuda_qt_bytes(int dtype, int rows, int cols);
seer_status seer_cuda_qt_repack(seer_cuda *c, int dtype, void *dst, const void *src, int row0, int rows, int cols);
seer_status seer_cuda_qt_matmul(seer_cuda *c, const mm_out &out, const float *x, const seer_weight *w, int T);
/* The same product of rmsnorm(x) with nw [cols]: the norm writes x in 8 bits at once
 * (seer_cuda_rmsnorm_q8), the same bits as seer_cuda_rmsnorm into f32 and then
 * seer_cuda_qt_matmul, one launch fewer. Where seer_cuda_rmsnorm_q8_fits is false: the norm
 * into h, then seer_cuda_qt_matmul. */
seer_status seer_cuda_qt_matmul_norm(seer_backend *be, const mm_out &out, float *h, const float *x,
                                     const float *nw, float eps, const seer_weight *w, int T);
/* The products of n (<= SEER_WEIGHT_MAX_SEG) weights in row blocks of any of the types, with
 * the same columns, of one rmsnorm(x) into outs[j]: x in 8 bits once, then each weight's
 * product, with the bits of its own seer_cuda_qt_matmul_norm. */
seer_status seer_cuda_qt_matmuls_norm(seer_backend *be, const mm_out *outs, float *h, const float *x,
                                      const float *nw, float eps, const seer_weight *ws, int n, int T);
/* Where column j (0..31) of a group of x in 8 bits goes among the group's 32 bytes: the
 * weights' order (byte 8c + i: column 4c + i; 8c + 4 + i: column 16 + 4c + i). */
static __host__ __device__ __forceinline__ int qt_x_byte(int j) { return 8 * ((j & 15) >> 2) + 4 * (j >> 4) + (j & 3); }
/* x [T][D] normalised with w (rmsnorm_vec_kernel's bits) into x in 8 bits per group of 32
 * (qt_xprep_kernel's): xq [T][D] in qt_x_byte order, xd [T][D / 32] (scale, sum of codes).
 * Fits: D a multiple of 128 up to 8192, x and w 16-byte aligned. */
bool seer_cuda_rmsnorm_q8_fits(const float *x, const float *w, int D);
seer_status seer_cuda_rmsnorm_q8(seer_cuda *c, int8_t *xq, float2 *xd, const float *x, const float *w, int T,
                                 int D, float eps);
/* rows [0, rows) of src (row blocks) to rows r0 + i * stride of dst (fusing weights) */
seer_status seer_cuda_qt_gather(seer_cuda *c, int dtype, void *dst, const void *src, int rows, int cols, int r0,
                                int stride);
/* as seer_cuda_q_rows_bf16 / seer_cuda_q_gather_f32 below, for a weight in row blocks */
seer_status seer_cuda_qt_rows_bf16(seer_cuda *c, bf16 *out, const seer_weight *w, int row0, int n_rows);
seer_status seer_cuda_qt_gather_f32(seer_cuda *c, float *out, const seer_weight *w, const int32_t *rows,
                                    int n_rows);
/* Whether a kept weight of this dtype and width is in row blocks on this backend: a row-block
 * type whose rows are whole blocks of 256 columns (the others keep matmul_q.cu's planes), unless
 * SEER_CUDA_QT=0. */
static inline bool seer_cuda_qt_of(const seer_cuda *c, int dtype, int cols) {
    return c->qt && cols % 256 == 0 && seer_cuda_qt_type(dtype);
}
/* out [n_rows][cols] bf16 = rows row0 .. row0 + n_rows of w, dequantised. */
seer_status seer_cuda_q_rows_bf16(seer_cuda *c, bf16 *out, const seer_weight *w, int row0, int n_rows);
/* out [n_rows][cols] f32 = rows rows[i] (device memory) of w; a row outside w gives NaNs. */
seer_status seer_cuda_q_gather_f32(seer_cuda *c, float *out, const seer_weight *w, const int32_t *rows,
                                   int n_rows);

#endif
