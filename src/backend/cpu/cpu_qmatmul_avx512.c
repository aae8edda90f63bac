/*
 * cpu_qmatmul_avx512.c: the quantised matmul's AVX-512 + VNNI kernels (cpu_qmatmul.c says
 * what is computed), chosen at run time where the CPU has them. Sixteen weight rows at a
 * time, one per f32 lane.
 *
 * Same bits as the scalar and AVX2 paths: a group's integer sums are exact whatever the
 * instructions, and the f32 steps after them are the same operations in the same order. The
 * integer sums come from vpdpbusd (unsigned x signed bytes), so signed codes are offset to
 * unsigned ones (c + bias) and bias * (sum of the activation codes) taken off again, exactly.
 *
 * Two shapes of the same arithmetic:
 *  - few tokens (decode): each group of 16 rows is unpacked into 8 registers, two rows
 *    each, and every token's dot products are reduced across lanes (the integer tree);
 *  - many tokens (prefill): the 16 rows are unpacked once for the whole matrix width into a
 *    buffer laid out row-per-lane, four code bytes per lane (a transposed tile), so a group's
 *    sums for one token are eight vpdpbusd against a broadcast of four activation bytes and
 *    no reduction at all; tokens go four at a time over the buffer (register tiling).
 *
 * Not for: tail rows past the last run of 16 (the AVX2 path takes them), CPUs without VNNI.
 */
#include "backend/cpu/cpu_qmatmul.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

int seer_cpu_qmm_avx512_ok(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

/* The offset that makes a format's codes unsigned (the codes below are code + bias). */
static inline int bias_of(int type) {
    switch (type) {
    case GGML_TYPE_Q4_0: return 8;
    case GGML_TYPE_Q5_0: return 16;
    case GGML_TYPE_Q8_0: return 128;
    case GGML_TYPE_Q6_K: return 32;
    default: return 0;
    }
}

/* ---- scales: one lane per row ------------------------------------------------------------ */

/* 32 bits at b + off of each of the 16 rows (idx: each lane's row offset in bytes). */
AVX512 INLINE __m512i gather16(const uint8_t *b, int off, __m512i idx) {
    return _mm512_i32gather_epi32(idx, (const void *)(b + off), 1);
}

AVX512 INLINE __m512 f16_lo(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
AVX512 INLINE __m512 f16_hi(__m512i v) { return f16_lo(_mm512_srli_epi32(v, 16)); }

/* -x as the scalar code's unary minus does it (a sign flip, also of 0). */
AVX512 INLINE __m512 neg(__m512 x) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

/* Every group's scales of the block at b (row 0's; the other rows at idx), the values
 * cpu_qmatmul.c's group_scale_of gives, with the same f32 operations. */
AVX512 INLINE void block_scales16(const int type, const uint8_t *b, __m512i idx, __m512 *a0,
                                  __m512 *a1, __m512 *bb) {
    switch (type) {
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0:
        a0[0] = f16_lo(gather16(b, 0, idx));
        break;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: {
        const __m512i v = gather16(b, 0, idx);
        a0[0] = f16_lo(v);
        bb[0] = f16_hi(v);
        break;
    }
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: {
        const __m512i v = gather16(b, 0, idx);
        const __m512 d = f16_lo(v), dm = f16_hi(v);
        const __m512i q0 = gather16(b, 4, idx), q1 = gather16(b, 8, idx), q2 = gather16(b, 12, idx);
        const __m512i m63 = _mm512_set1_epi32(63), m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
        for (int j = 0; j < 4; j++) {
            const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(q0, 8 * j), m63);
            const __m512i m = _mm512_and_si512(_mm512_srli_epi32(q1, 8 * j), m63);
            a0[j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
            bb[j] = neg(_mm512_mul_ps(dm, _mm512_cvtepi32_ps(m)));
        }
        for (int j = 0; j < 4; j++) {
            const __m512i sc = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(q2, 8 * j), m15),
                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(q0, 8 * j + 6), m3), 4));
            const __m512i m = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(q2, 8 * j + 4), m15),
                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(q1, 8 * j + 6), m3), 4));
            a0[4 + j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
            bb[4 + j] = neg(_mm512_mul_ps(dm, _mm512_cvtepi32_ps(m)));
        }
        break;
    }
    case GGML_TYPE_Q6_K: {
        /* d is the block's last 2 bytes (208-209 of 210): 4 bytes from 206, not 208, so that
         * the gather stays inside the last block of the matrix */
        const __m512 d = f16_hi(gather16(b, 206, idx));
        for (int q = 0; q < 4; q++) { /* four int8 scales per gather: groups 2q, 2q+1 */
            const __m512i v = gather16(b, 192 + 4 * q, idx);
            for (int h = 0; h < 2; h++) {
                /* group g = 4 * (q / 2) + 2 * (q % 2) + h reads scl[(g / 4) * 8 + (g % 4) * 2 + {0, 1}]
                 * = bytes 4q + 2h + {0, 1} */
                const int g = 4 * (q / 2) + 2 * (q % 2) + h;
                const __m512i s0 = _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 16 * h), 24);
                const __m512i s1 = _mm512_srai_epi32(_mm512_slli_epi32(v, 16 - 16 * h), 24);
                a0[g] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(s0));
                a1[g] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(s1));
            }
        }
        break;
    }
    }
}

/* ---- codes: two rows per register (row m in the low 256 bits, row m + 8 in the high) ----- */

AVX512 INLINE __m512i pair256(const uint8_t *pa, const uint8_t *pb) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)pa)),
                              _mm256_loadu_si256((const __m256i *)pb), 1);
}

/* 16 packed bytes of each row -> its 32 nibbles, low nibbles first. */
AVX512 INLINE __m512i nibbles2(const uint8_t *pa, const uint8_t *pb) {
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pa));
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pb));
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    z = _mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4); /* 128-bit lanes 1 and 3 */
    return _mm512_and_si512(z, _mm512_set1_epi8(0xF));
}

static inline uint64_t qh2(const uint8_t *pa, const uint8_t *pb) {
    uint32_t a, b;
    memcpy(&a, pa, 4);
    memcpy(&b, pb, 4);
    return (uint64_t)a | (uint64_t)b << 32;
}

/* Group g's codes + bias_of(type) of the blocks at pa (row m) and pb (row m + 8). */
AVX512 INLINE __m512i codes2(const int type, const uint8_t *pa, const uint8_t *pb, int g) {
    const __m512i m4 = _mm512_set1_epi8(0xF), b16 = _mm512_set1_epi8(16);
    switch (type) {
    case GGML_TYPE_Q8_0:
        return _mm512_xor_si512(pair256(pa + 2, pb + 2), _mm512_set1_epi8((char)0x80));
    case GGML_TYPE_Q4_0:
        return nibbles2(pa + 2, pb + 2);
    case GGML_TYPE_Q4_1:
        return nibbles2(pa + 4, pb + 4);
    case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: {
        const int off = type == GGML_TYPE_Q5_0 ? 2 : 4;
        const __m512i z = nibbles2(pa + off + 4, pb + off + 4);
        return _mm512_mask_add_epi8(z, qh2(pa + off, pb + off), z, b16);
    }
    case GGML_TYPE_Q4_K: {
        __m512i z = pair256(pa + 16 + (g / 2) * 32, pb + 16 + (g / 2) * 32);
        if (g & 1)
            z = _mm512_srli_epi16(z, 4);
        return _mm512_and_si512(z, m4);
    }
    case GGML_TYPE_Q5_K: {
        __m512i z = pair256(pa + 48 + (g / 2) * 32, pb + 48 + (g / 2) * 32);
        if (g & 1)
            z = _mm512_srli_epi16(z, 4);
        z = _mm512_and_si512(z, m4);
        const __mmask64 h = _mm512_test_epi8_mask(pair256(pa + 16, pb + 16), _mm512_set1_epi8((char)(1 << g)));
        return _mm512_mask_add_epi8(z, h, z, b16);
    }
    case GGML_TYPE_Q6_K: {
        const int h = g / 4, k = g % 4;
        __m512i lo = pair256(pa + 64 * h + (k & 1) * 32, pb + 64 * h + (k & 1) * 32);
        if (k >= 2)
            lo = _mm512_srli_epi16(lo, 4);
        __m512i hi = pair256(pa + 128 + 32 * h, pb + 128 + 32 * h);
        /* bits 2k, 2k+1 of each byte to bits 4, 5 (a 16-bit shift moves no neighbour's bit
         * into them) */
        hi = k == 3 ? _mm512_srli_epi16(hi, 2) : _mm512_slli_epi16(hi, 4 - 2 * k);
        /* (lo & 0xF) | (hi & 0x30) */
        return _mm512_ternarylogic_epi32(_mm512_and_si512(lo, m4), hi, _mm512_set1_epi8(0x30), 0xF8);
    }
    }
    return _mm512_setzero_si512();
}

/* ---- the f32 steps, one lane per row ----------------------------------------------------- */

/* acc += xd * term(i0, i1), term as cpu_qmatmul.c's group_term. i0, i1: the exact half sums
 * of the offset codes; the offset is taken off here (xh, xs: the token's code sums). */
AVX512 INLINE __m512 group_acc(const int type, __m512i i0, __m512i i1, __m512 a0, __m512 a1,
                               __m512 bb, int32_t xh, int32_t xs, float xd, __m512 acc) {
    const int kind = type_kind(type), bias = bias_of(type);
    __m512 term;
    if (kind == KIND_HALVES) {
        i0 = _mm512_sub_epi32(i0, _mm512_set1_epi32(bias * xh));
        i1 = _mm512_sub_epi32(i1, _mm512_set1_epi32(bias * (xs - xh)));
        term = _mm512_fmadd_ps(a1, _mm512_cvtepi32_ps(i1), _mm512_mul_ps(a0, _mm512_cvtepi32_ps(i0)));
    } else {
        __m512i s = _mm512_add_epi32(i0, i1);
        if (bias)
            s = _mm512_sub_epi32(s, _mm512_set1_epi32(bias * xs));
        term = _mm512_mul_ps(a0, _mm512_cvtepi32_ps(s));
        if (kind == KIND_MIN)
            term = _mm512_fmadd_ps(bb, _mm512_set1_ps((float)xs), term);
    }
    return _mm512_fmadd_ps(_mm512_set1_ps(xd), term, acc);
}

/* ---- few tokens: unpack per group, reduce across lanes ------------------------------------ */

#define TT 4 /* tokens per pass over the weights */

/* p[m]: row m's eight lane sums in 256-bit half 0, row m + 8's in half 1; lanes 0-3 of each
 * half cover elements 0-15. Returns the half sums in row order (i0: elements 0-15). */
AVX512 INLINE void reduce16(const __m512i p[8], __m512i *i0, __m512i *i1) {
    __m512i a[4], b[2];
    for (int k = 0; k < 4; k++)
        a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * k], p[2 * k + 1]),
                                _mm512_unpackhi_epi32(p[2 * k], p[2 * k + 1]));
    for (int k = 0; k < 2; k++)
        b[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * k], a[2 * k + 1]),
                                _mm512_unpackhi_epi64(a[2 * k], a[2 * k + 1]));
    /* b[0]'s 128-bit lanes: rows 0-3 half 0, rows 0-3 half 1, rows 8-11 half 0, half 1;
     * b[1]'s the same for rows 4-7 and 12-15 */
    const __m512i lo = _mm512_set_epi32(27, 26, 25, 24, 11, 10, 9, 8, 19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i hi = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 23, 22, 21, 20, 7, 6, 5, 4);
    *i0 = _mm512_permutex2var_epi32(b[0], lo, b[1]);
    *i1 = _mm512_permutex2var_epi32(b[0], hi, b[1]);
}

AVX512 INLINE __m512i row_offsets(size_t row_bytes) {
    return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32((int)row_bytes));
}

AVX512 INLINE void qdot16_t(const qmm_args *a, int64_t o, int t0, int nr, __m512 acc[TT], const int type) {
    const int gpb = a->blk_elems / QK, ng = a->cols / QK;
    const size_t rb = a->row_bytes;
    const uint8_t *w = a->W + (size_t)o * rb;
    const __m512i idx = row_offsets(rb), zero = _mm512_setzero_si512();
    __m512 a0[8], a1[8], bb[8];
    for (int i = 0; i < 8; i++) /* the formats without a1 or b multiply them by nothing */
        a0[i] = a1[i] = bb[i] = _mm512_setzero_ps();
    for (int r = 0; r < TT; r++)
        acc[r] = _mm512_setzero_ps();
    /* The run of 16 rows after the next is one contiguous stretch of 16 * rb bytes: it is
     * prefetched into L2 in order, in step with these rows' groups, one prefetch per 64
     * bytes. perf: decode stalled on the first touch of each block (the scales' gather);
     * sixteen strided streams are more than the hardware prefetcher follows well, and
     * prefetching them one run ahead into L1 (the earlier scheme) left a matrix streamed
     * from memory at half of what one core reads (lab, SmolLM2's Q8_0 head: 9.7 GMAC/s
     * before, 21-23 after, about the 22 GB/s of a plain read loop; docs/benchmarks.md). */
    const uint8_t *next = w + 2 * 16 * rb;
    const size_t step = (16 * rb + (size_t)ng - 1) / (size_t)ng;
    size_t pf = 0, want = 0;
    for (int gi = 0; gi < ng; gi++) {
        const int g = gi % gpb;
        const uint8_t *blk = w + (size_t)(gi / gpb) * a->blk_bytes;
        for (want += step; pf < want; pf += 64)
            _mm_prefetch((const char *)(next + pf), _MM_HINT_T1);
        if (g == 0)
            block_scales16(type, blk, idx, a0, a1, bb);
        __m512i c[8];
        for (int m = 0; m < 8; m++)
            c[m] = codes2(type, blk + m * rb, blk + (m + 8) * rb, g);
        for (int r = 0; r < nr; r++) {
            const size_t t = (size_t)t0 + r, k = t * ng + gi;
            const __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a->xq + t * a->cols + (size_t)gi * QK)));
            __m512i p[8], i0, i1;
            for (int m = 0; m < 8; m++)
                p[m] = _mm512_dpbusd_epi32(zero, c[m], x);
            reduce16(p, &i0, &i1);
            acc[r] = group_acc(type, i0, i1, a0[g], a1[g], bb[g], a->xh[k], a->xs[k], a->xd[k], acc[r]);
        }
    }
}

/* ---- many tokens: a transposed tile of 16 rows -------------------------------------------- */

/* The unpacked rows: per group, 8 vectors of 16 lanes (lane j: row j's codes 4k..4k+3 in
 * vector k), then its scales a0, a1, b. */
enum { TILE_VECS = 11 };

AVX512 INLINE void unpack16_t(const qmm_args *a, int64_t o, __m512i *u, const int type) {
    const int gpb = a->blk_elems / QK, ng = a->cols / QK;
    const size_t rb = a->row_bytes;
    const uint8_t *w = a->W + (size_t)o * rb;
    const __m512i idx = row_offsets(rb);
    /* tmp[m]: row m's 8 dwords then row m + 8's */
    __m512i tmp[8];
    const __m512i gidx = _mm512_set_epi32(120, 104, 88, 72, 56, 40, 24, 8,
                                          112, 96, 80, 64, 48, 32, 16, 0);
    __m512 a0[8], a1[8], bb[8];
    for (int i = 0; i < 8; i++)
        a0[i] = a1[i] = bb[i] = _mm512_setzero_ps();
    for (int gi = 0; gi < ng; gi++) {
        const int g = gi % gpb;
        const uint8_t *blk = w + (size_t)(gi / gpb) * a->blk_bytes;
        if (g == 0)
            block_scales16(type, blk, idx, a0, a1, bb);
        for (int m = 0; m < 8; m++)
            _mm512_store_si512(&tmp[m], codes2(type, blk + m * rb, blk + (m + 8) * rb, g));
        __m512i *ug = u + (size_t)gi * TILE_VECS;
        /* lane j < 8: tmp[j] dword k; lane j >= 8: tmp[j - 8] dword 8 + k */
        for (int k = 0; k < 8; k++)
            _mm512_store_si512(&ug[k], _mm512_i32gather_epi32(_mm512_add_epi32(gidx, _mm512_set1_epi32(k)), (const void *)tmp, 4));
        _mm512_store_ps((float *)&ug[8], a0[g]);
        _mm512_store_ps((float *)&ug[9], a1[g]);
        _mm512_store_ps((float *)&ug[10], bb[g]);
    }
}

AVX512 INLINE void qdot16_tile_t(const qmm_args *a, const __m512i *u, int t0, int nr, __m512 acc[TT], const int type) {
    const int ng = a->cols / QK;
    const __m512i zero = _mm512_setzero_si512();
    for (int r = 0; r < TT; r++)
        acc[r] = _mm512_setzero_ps();
    for (int gi = 0; gi < ng; gi++) {
        const __m512i *ug = u + (size_t)gi * TILE_VECS;
        __m512i c[8];
        for (int k = 0; k < 8; k++)
            c[k] = _mm512_load_si512(&ug[k]);
        const __m512 a0 = _mm512_load_ps((const float *)&ug[8]);
        const __m512 a1 = _mm512_load_ps((const float *)&ug[9]);
        const __m512 bb = _mm512_load_ps((const float *)&ug[10]);
        for (int r = 0; r < nr; r++) {
            const size_t t = (size_t)t0 + r, k = t * ng + gi;
            const int8_t *xp = a->xq + t * a->cols + (size_t)gi * QK;
            int32_t xw[8];
            memcpy(xw, xp, 32);
            __m512i i0 = zero, i1 = zero;
            for (int q = 0; q < 4; q++) {
                i0 = _mm512_dpbusd_epi32(i0, c[q], _mm512_set1_epi32(xw[q]));
                i1 = _mm512_dpbusd_epi32(i1, c[4 + q], _mm512_set1_epi32(xw[4 + q]));
            }
            acc[r] = group_acc(type, i0, i1, a0, a1, bb, a->xh[k], a->xs[k], a->xd[k], acc[r]);
        }
    }
}

/* ---- the activations ------------------------------------------------------------------ */

/* cpu_qmatmul.c's xquant_rows for tokens [t0, t1), the same values: every step is exact or
 * correctly rounded per element (abs, max, the division, the product, round to nearest
 * even as nearbyintf in the default mode, the clamp). */
AVX512 void seer_cpu_xquant_avx512(const float *x, int8_t *q, float *d, int32_t *s, int32_t *h,
                                   int cols, int64_t t0, int64_t t1) {
    const int ng = cols / QK;
    const __m512 lim = _mm512_set1_ps(127.f), nlim = _mm512_set1_ps(-127.f);
    for (int64_t t = t0; t < t1; t++)
        for (int g = 0; g < ng; g++) {
            const size_t e = (size_t)t * cols + (size_t)g * QK, k = (size_t)t * ng + g;
            const __m512 x0 = _mm512_loadu_ps(x + e), x1 = _mm512_loadu_ps(x + e + 16);
            /* 0x99: NaN (quiet, signalling) or infinity */
            const bool finite = !(_mm512_fpclass_ps_mask(x0, 0x99) | _mm512_fpclass_ps_mask(x1, 0x99));
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
            float id = finite && amax > 0.f ? 127.f / amax : 0.f;
            if (!isfinite(id)) /* a subnormal amax */
                id = 0.f;
            d[k] = finite ? amax / 127.f : NAN;
            const __m512 vid = _mm512_set1_ps(id);
            __m512i q0 = _mm512_setzero_si512(), q1 = _mm512_setzero_si512();
            if (finite) {
                q0 = _mm512_cvtps_epi32(_mm512_max_ps(nlim, _mm512_min_ps(lim, _mm512_roundscale_ps(_mm512_mul_ps(x0, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))));
                q1 = _mm512_cvtps_epi32(_mm512_max_ps(nlim, _mm512_min_ps(lim, _mm512_roundscale_ps(_mm512_mul_ps(x1, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))));
            }
            _mm_storeu_si128((__m128i *)(q + e), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(q + e + 16), _mm512_cvtepi32_epi8(q1));
            h[k] = _mm512_reduce_add_epi32(q0);
            s[k] = h[k] + _mm512_reduce_add_epi32(q1);
        }
}

/* ---- the rows --------------------------------------------------------------------------- */

/* Tokens from which the 16 rows are unpacked into a tile first (the bits are the same). */
#define TILE_T 4

static void store16(const qmm_args *a, int64_t o, int t0, int nr, const float out[][16]) {
    for (int r = 0; r < nr; r++) {
        float *y = a->y + (size_t)(t0 + r) * a->rows + o;
        for (int k = 0; k < 16; k++)
            y[k] = out[r][k] + (a->bias ? a->bias[o + k] : 0.f);
    }
}

AVX512 INLINE int64_t rows_t(const qmm_args *a, int64_t o0, int64_t o1, const int type) {
    const int ng = a->cols / QK;
    __m512i *u = NULL;
    if (a->T >= TILE_T) {
        u = aligned_alloc(64, (size_t)ng * TILE_VECS * sizeof(__m512i));
        if (!u)
            return o0;
    }
    int64_t o = o0;
    for (; o + 16 <= o1; o += 16) {
        if (u)
            unpack16_t(a, o, u, type);
        for (int t0 = 0; t0 < a->T; t0 += TT) {
            const int nr = a->T - t0 < TT ? a->T - t0 : TT;
            __m512 acc[TT];
            float out[TT][16];
            /* nr a constant in each call, so that the accumulators stay in registers */
            switch (nr) {
#define NR_CASE(N)                                                                                  \
    case N:                                                                                         \
        if (u)                                                                                      \
            qdot16_tile_t(a, u, t0, N, acc, type);                                                  \
        else                                                                                        \
            qdot16_t(a, o, t0, N, acc, type);                                                       \
        break;
            NR_CASE(1) NR_CASE(2) NR_CASE(3) NR_CASE(4)
#undef NR_CASE
            }
            for (int r = 0; r < nr; r++)
                _mm512_storeu_ps(out[r], acc[r]);
            store16(a, o, t0, nr, out);
        }
    }
    free(u);
    return o;
}

/* rows_t with the block format a constant, so that its switches fold away. */
#define ROWS_FN(T, name) AVX512 static int64_t name(const qmm_args *a, int64_t o0, int64_t o1) { return rows_t(a, o0, o1, T); }
ROWS_FN(GGML_TYPE_Q4_0, rows_q4_0)
ROWS_FN(GGML_TYPE_Q4_1, rows_q4_1)
ROWS_FN(GGML_TYPE_Q5_0, rows_q5_0)
ROWS_FN(GGML_TYPE_Q5_1, rows_q5_1)
ROWS_FN(GGML_TYPE_Q8_0, rows_q8_0)
ROWS_FN(GGML_TYPE_Q4_K, rows_q4_k)
ROWS_FN(GGML_TYPE_Q5_K, rows_q5_k)
ROWS_FN(GGML_TYPE_Q6_K, rows_q6_k)
#undef ROWS_FN

int64_t seer_cpu_qmm_avx512_rows(const qmm_args *a, int64_t o0, int64_t o1) {
    /* the gathers take 32-bit row offsets */
    if (a->row_bytes * 15 + 256 > (size_t)INT32_MAX)
        return o0;
    switch (a->type) {
    case GGML_TYPE_Q4_0: return rows_q4_0(a, o0, o1);
    case GGML_TYPE_Q4_1: return rows_q4_1(a, o0, o1);
    case GGML_TYPE_Q5_0: return rows_q5_0(a, o0, o1);
    case GGML_TYPE_Q5_1: return rows_q5_1(a, o0, o1);
    case GGML_TYPE_Q8_0: return rows_q8_0(a, o0, o1);
    case GGML_TYPE_Q4_K: return rows_q4_k(a, o0, o1);
    case GGML_TYPE_Q5_K: return rows_q5_k(a, o0, o1);
    case GGML_TYPE_Q6_K: return rows_q6_k(a, o0, o1);
    default: return o0;
    }
}

#else
int seer_cpu_qmm_avx512_ok(void) { return 0; }
void seer_cpu_xquant_avx512(const float *x, int8_t *q, float *d, int32_t *s, int32_t *h, int cols,
                            int64_t t0, int64_t t1) {
    (void)x, (void)q, (void)d, (void)s, (void)h, (void)cols, (void)t0, (void)t1;
}
int64_t seer_cpu_qmm_avx512_rows(const qmm_args *a, int64_t o0, int64_t o1) {
    (void)a, (void)o1;
    return o0;
}
#endif
