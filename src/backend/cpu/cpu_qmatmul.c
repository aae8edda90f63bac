/*
 * cpu_qmatmul.c: y = x W^T with W kept in its GGUF blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K, Q6_K), read straight from the file mapping.
 *
 * The activation rows are quantised to 8 bits per group of 32 (one f32 scale per group, as
 * ggml's Q8_0/Q8_1 do for its quantised dots), so each group's dot product is an exact
 * integer sum. Each weight group is unpacked to integer codes w = a * code + b (b: the
 * block's min, for the formats that have one); the group contributes
 *     t = a * isum(code, xq) [+ b * sum(xq)],   acc = fma(dx, t, acc)
 * in group order. Every step after the integer sums is one fixed sequence of f32 operations
 * (explicit fmaf), shared by the scalar, AVX2 and AVX-512 paths (the last in
 * cpu_qmatmul_avx512.c, taken first where the CPU has VNNI), so an output element has the
 * same bits whatever T, the thread that computes it, or the instruction set picked at run
 * time: the batch invariance greedy speculation relies on holds as in the f32 path.
 *
 * Accuracy: this is not the f32 reference (cpu_matmul.c on dequantised weights, selected with
 * SEER_WEIGHTS_F32): the 8-bit activations add a relative error of about 2^-8 per group;
 * tests/test_backend_ops.c states the bound it checks.
 *
 * Not for: f32/f16/bf16 weights (dequantised to f32 at load, cpu_matmul.c).
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_qmatmul.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

#define ROWS 4 /* tokens sharing one unpacked weight group */

bool seer_cpu_qtype_supported(int type) {
    switch (type) {
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

/* ---- activations ------------------------------------------------------------------------ */

/* x [T][cols] -> codes q [T][cols], scales d [T][cols/32], code sums s [T][cols/32] and
 * those of each group's first 16 elements h [T][cols/32]. Plain
 * scalar code: every step is exact or correctly rounded per element, so however the compiler
 * vectorises it the values are the same. */
typedef struct {
    const float *x;
    int8_t *q;
    float *d;
    int32_t *s, *h;
    int cols;
    bool avx512;
} xquant_args;

static void xquant_rows(void *ctx, int64_t t0, int64_t t1) {
    const xquant_args *a = ctx;
    if (a->avx512) {
        seer_cpu_xquant_avx512(a->x, a->q, a->d, a->s, a->h, a->cols, t0, t1);
        return;
    }
    const int cols = a->cols, ng = cols / QK;
    for (int64_t t = t0; t < t1; t++) {
        for (int g = 0; g < ng; g++) {
            const float *x = a->x + (size_t)t * cols + g * QK;
            int8_t *q = a->q + (size_t)t * cols + g * QK;
            float amax = 0.f;
            bool finite = true;
            for (int i = 0; i < QK; i++) {
                finite = finite && isfinite(x[i]);
                amax = fmaxf(amax, fabsf(x[i]));
            }
            /* A NaN or infinity in the group makes its scale NaN, so the products come out NaN
             * as the f32 path's would; its codes are 0 (a float outside int's range must not
             * be converted). */
            const float d = finite ? amax / 127.f : NAN;
            float id = finite && amax > 0.f ? 127.f / amax : 0.f;
            if (!isfinite(id)) /* a subnormal amax: the group's codes are 0 */
                id = 0.f;
            int32_t s = 0, h = 0;
            for (int i = 0; i < QK; i++) {
                float f = finite ? nearbyintf(x[i] * id) : 0.f;
                f = f > 127.f ? 127.f : f < -127.f ? -127.f : f;
                const int v = (int)f;
                q[i] = (int8_t)v;
                s += v;
                h += i < QK / 2 ? v : 0;
            }
            a->d[(size_t)t * ng + g] = d;
            a->s[(size_t)t * ng + g] = s;
            a->h[(size_t)t * ng + g] = h;
        }
    }
}

/* ---- weight groups: scales ------------------------------------------------------------- */

static inline float f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return seer_f16_to_f32(h);
}

typedef struct {
    float a0, a1, b; /* w = a * code + b; a0 for elements 0-15, a1 for 16-31 */
} gscale;

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (quant_k.c's layout). */
static inline void k_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Group g's scales of the block at b, from the block's f16 scale d and min dm already in f32
 * (dm is unused by types without a min). The per-group arithmetic is the same f32 sequence
 * for every code path; only how d and dm are read from f16 differs (group_scale,
 * group_scale_hw), with the same values. */
static inline gscale group_scale_of(int type, const uint8_t *b, int g, float d, float dm) {
    gscale s = {0, 0, 0};
    int sc, m;
    switch (type) {
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0:
        s.a0 = s.a1 = d;
        break;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1:
        s.a0 = s.a1 = d;
        s.b = dm;
        break;
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
        k_scale_min(g, b + 4, &sc, &m);
        s.a0 = s.a1 = d * (float)sc;
        s.b = -(dm * (float)m);
        break;
    case GGML_TYPE_Q6_K: {
        const int8_t *scl = (const int8_t *)(b + 192) + (g / 4) * 8;
        s.a0 = d * (float)scl[(g % 4) * 2];
        s.a1 = d * (float)scl[(g % 4) * 2 + 1];
        break;
    }
    }
    return s;
}

/* Where a block keeps its f16 scale d; its min (Q4_1, Q5_1) or dmin (K-quants) follows it. */
static inline int d_offset(int type) { return type == GGML_TYPE_Q6_K ? 208 : 0; }
static inline bool has_min(int type) {
    return type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1 || type == GGML_TYPE_Q4_K ||
           type == GGML_TYPE_Q5_K;
}

static inline gscale group_scale(int type, const uint8_t *b, int g) {
    return group_scale_of(type, b, g, f16(b + d_offset(type)), has_min(type) ? f16(b + 2) : 0.f);
}

/* One group's contribution, from its two half sums i0, i1 and the activation code sum xs. */
static inline float group_term(int kind, gscale s, int32_t i0, int32_t i1, int32_t xs) {
    switch (kind) {
    case KIND_MIN:
        return fmaf(s.b, (float)xs, s.a0 * (float)(i0 + i1));
    case KIND_HALVES:
        return fmaf(s.a1, (float)i1, s.a0 * (float)i0);
    default:
        return s.a0 * (float)(i0 + i1);
    }
}

/* ---- weight groups: codes, scalar ---------------------------------------------------- */

/* Codes of group g of the block at b (signed for KIND_SYM/KIND_HALVES, 0..31 for KIND_MIN). */
static void group_codes(int type, const uint8_t *b, int g, int8_t *c) {
    switch (type) {
    case GGML_TYPE_Q8_0:
        memcpy(c, b + 2, 32);
        break;
    case GGML_TYPE_Q4_0:
        for (int j = 0; j < 16; j++) {
            c[j] = (int8_t)((b[2 + j] & 0xF) - 8);
            c[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
        }
        break;
    case GGML_TYPE_Q4_1:
        for (int j = 0; j < 16; j++) {
            c[j] = (int8_t)(b[4 + j] & 0xF);
            c[j + 16] = (int8_t)(b[4 + j] >> 4);
        }
        break;
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1: {
        const int off = type == GGML_TYPE_Q5_0 ? 2 : 4, bias = type == GGML_TYPE_Q5_0 ? 16 : 0;
        uint32_t qh;
        memcpy(&qh, b + off, 4);
        const uint8_t *qs = b + off + 4;
        for (int j = 0; j < 16; j++) {
            c[j] = (int8_t)(((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - bias);
            c[j + 16] = (int8_t)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - bias);
        }
        break;
    }
    case GGML_TYPE_Q4_K: {
        const uint8_t *q = b + 16 + (g / 2) * 32;
        for (int l = 0; l < 32; l++)
            c[l] = (int8_t)(g & 1 ? q[l] >> 4 : q[l] & 0xF);
        break;
    }
    case GGML_TYPE_Q5_K: {
        const uint8_t *ql = b + 48 + (g / 2) * 32, *qh = b + 16;
        for (int l = 0; l < 32; l++)
            c[l] = (int8_t)((g & 1 ? ql[l] >> 4 : ql[l] & 0xF) | (((qh[l] >> g) & 1) << 4));
        break;
    }
    case GGML_TYPE_Q6_K: {
        const int h = g / 4, k = g % 4;
        const uint8_t *ql = b + 64 * h + (k & 1) * 32, *qh = b + 128 + 32 * h;
        for (int l = 0; l < 32; l++) {
            int lo = k < 2 ? ql[l] & 0xF : ql[l] >> 4;
            c[l] = (int8_t)((lo | (((qh[l] >> (2 * k)) & 3) << 4)) - 32);
        }
        break;
    }
    }
}

/* Output rows [o0, o1) for tokens [t0, t0 + nr), scalar codes. */
static void qdot_scalar(const qmm_args *a, int o, int t0, int nr, float *out) {
    const int gpb = a->blk_elems / QK, ng = a->cols / QK, kind = type_kind(a->type);
    const uint8_t *w = a->W + (size_t)o * a->row_bytes;
    float acc[ROWS] = {0};
    int8_t c[QK];
    for (int gi = 0; gi < ng; gi++) {
        const uint8_t *b = w + (size_t)(gi / gpb) * a->blk_bytes;
        const gscale s = group_scale(a->type, b, gi % gpb);
        group_codes(a->type, b, gi % gpb, c);
        for (int r = 0; r < nr; r++) {
            const size_t t = (size_t)t0 + r;
            const int8_t *x = a->xq + t * a->cols + (size_t)gi * QK;
            int32_t i0 = 0, i1 = 0;
            for (int l = 0; l < 16; l++)
                i0 += c[l] * x[l];
            for (int l = 16; l < 32; l++)
                i1 += c[l] * x[l];
            const float term = group_term(kind, s, i0, i1, a->xs[t * ng + gi]);
            acc[r] = fmaf(a->xd[t * ng + gi], term, acc[r]);
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = acc[r];
}

/* ---- weight groups: codes, AVX2 -------------------------------------------------------- */

#ifdef HAVE_X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float f16_hw(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h); /* exact, as seer_f16_to_f32 */
}

/* group_scale with the hardware f16 conversion (same values). */
AVX2 static inline gscale group_scale_hw(int type, const uint8_t *b, int g) {
    return group_scale_of(type, b, g, f16_hw(b + d_offset(type)), has_min(type) ? f16_hw(b + 2) : 0.f);
}

AVX2 static inline __m256i nibbles(const uint8_t *q16) {
    const __m128i v = _mm_loadu_si128((const __m128i *)q16), m = _mm_set1_epi8(0xF);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set (ggml's bytes_from_bits_32 idea). */
AVX2 static inline __m256i bits_to_bytes(uint32_t x) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    const __m256i bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    v = _mm256_or_si256(v, bit);
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

AVX2 static inline __m256i group_codes_avx2(int type, const uint8_t *b, int g) {
    switch (type) {
    case GGML_TYPE_Q8_0:
        return _mm256_loadu_si256((const __m256i *)(b + 2));
    case GGML_TYPE_Q4_0:
        return _mm256_sub_epi8(nibbles(b + 2), _mm256_set1_epi8(8));
    case GGML_TYPE_Q4_1:
        return nibbles(b + 4);
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1: {
        const int off = type == GGML_TYPE_Q5_0 ? 2 : 4;
        uint32_t qh;
        memcpy(&qh, b + off, 4);
        __m256i v = _mm256_or_si256(
            nibbles(b + off + 4), _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
        return type == GGML_TYPE_Q5_0 ? _mm256_sub_epi8(v, _mm256_set1_epi8(16)) : v;
    }
    case GGML_TYPE_Q4_K: {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + (g / 2) * 32));
        if (g & 1)
            q = _mm256_srli_epi16(q, 4);
        return _mm256_and_si256(q, _mm256_set1_epi8(0xF));
    }
    case GGML_TYPE_Q5_K: {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 48 + (g / 2) * 32));
        if (g & 1)
            q = _mm256_srli_epi16(q, 4);
        q = _mm256_and_si256(q, _mm256_set1_epi8(0xF));
        __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16));
        /* bit g of each byte -> 0x10 */
        h = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(g)), _mm256_set1_epi8(1));
        return _mm256_or_si256(q, _mm256_slli_epi16(h, 4));
    }
    case GGML_TYPE_Q6_K: {
        const int h = g / 4, k = g % 4;
        __m256i lo = _mm256_loadu_si256((const __m256i *)(b + 64 * h + (k & 1) * 32));
        if (k >= 2)
            lo = _mm256_srli_epi16(lo, 4);
        lo = _mm256_and_si256(lo, _mm256_set1_epi8(0xF));
        __m256i hi = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        hi = _mm256_and_si256(_mm256_srl_epi16(hi, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
        return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
    }
    }
    return _mm256_setzero_si256();
}

/* Exact half sums of c * x over elements 0-15 and 16-31. |products| <= 128 * 127, so the
 * 16-bit pair sums of maddubs cannot saturate. */
AVX2 static inline void half_sums(__m256i c, bool is_signed, __m256i x, int32_t *i0, int32_t *i1) {
    __m256i p;
    if (is_signed)
        p = _mm256_maddubs_epi16(_mm256_sign_epi8(c, c), _mm256_sign_epi8(x, c));
    else
        p = _mm256_maddubs_epi16(c, x);
    const __m256i s = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
    __m128i lo = _mm256_castsi256_si128(s), hi = _mm256_extracti128_si256(s, 1);
    /* both halves at once: [lo0+lo2, lo1+lo3, hi0+hi2, hi1+hi3] */
    __m128i a = _mm_unpacklo_epi64(lo, hi), b = _mm_unpackhi_epi64(lo, hi);
    __m128i t = _mm_add_epi32(a, b);
    *i0 = _mm_extract_epi32(t, 0) + _mm_extract_epi32(t, 1);
    *i1 = _mm_extract_epi32(t, 2) + _mm_extract_epi32(t, 3);
}

AVX2 static void qdot_avx2(const qmm_args *a, int o, int t0, int nr, float *out) {
    const int gpb = a->blk_elems / QK, ng = a->cols / QK, kind = type_kind(a->type);
    const bool is_signed = kind != KIND_MIN;
    const uint8_t *w = a->W + (size_t)o * a->row_bytes;
    float acc[ROWS] = {0};
    for (int gi = 0; gi < ng; gi++) {
        const uint8_t *b = w + (size_t)(gi / gpb) * a->blk_bytes;
        const gscale s = group_scale_hw(a->type, b, gi % gpb);
        const __m256i c = group_codes_avx2(a->type, b, gi % gpb);
        for (int r = 0; r < nr; r++) {
            const size_t t = (size_t)t0 + r;
            const __m256i x = _mm256_loadu_si256((const __m256i *)(a->xq + t * a->cols + (size_t)gi * QK));
            int32_t i0, i1;
            half_sums(c, is_signed, x, &i0, &i1);
            const float term = group_term(kind, s, i0, i1, a->xs[t * ng + gi]);
            acc[r] = fmaf(a->xd[t * ng + gi], term, acc[r]);
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = acc[r];
}

/* Eight weight rows at once, one per f32 lane: lane j does exactly what qdot_avx2 does for
 * row o + j (the integer sums are exact in any order; the f32 steps are the same
 * operations), so the result is the same bits while the horizontal sums are shared. */
AVX2 static inline __attribute__((always_inline)) void
qdot8_avx2_t(const qmm_args *a, int o, int t0, int nr, float out[][8], const int type) {
    const int gpb = a->blk_elems / QK, ng = a->cols / QK, kind = type_kind(type);
    const bool is_signed = kind != KIND_MIN;
    const uint8_t *w = a->W + (size_t)o * a->row_bytes;
    __m256 acc[ROWS];
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    /* The run of 8 rows after the next, prefetched into L2 in order, as the AVX-512 path
     * does (cpu_qmatmul_avx512.c says why). */
    const uint8_t *next = w + 2 * 8 * a->row_bytes;
    const size_t step = (8 * a->row_bytes + (size_t)ng - 1) / (size_t)ng;
    size_t pf = 0, want = 0;
    /* K-quants (8 groups a block): every group's scales of the 8 rows' current blocks, made
     * once per block ([group][row]; group_scale_of's values, the same f32 steps), so that
     * the f16 reads and the 6-bit unpacking are not repeated for each group. The formats of
     * one group per block make theirs with the codes (measured faster). */
    const bool kq = type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K;
    float ka0[8][8], ka1[8][8], kb[8][8];
    for (int gi = 0; gi < ng; gi++) {
        for (want += step; pf < want; pf += 64)
            _mm_prefetch((const char *)(next + pf), _MM_HINT_T1);
        const int g = gi % gpb;
        const uint8_t *blk = w + (size_t)(gi / gpb) * a->blk_bytes;
        if (kq && g == 0)
            for (int j = 0; j < 8; j++) {
                const uint8_t *b = blk + (size_t)j * a->row_bytes;
                const float d = f16_hw(b + d_offset(type)), dm = has_min(type) ? f16_hw(b + 2) : 0.f;
                for (int k = 0; k < 8; k++) {
                    const gscale s = group_scale_of(type, b, k, d, dm);
                    ka0[k][j] = s.a0, ka1[k][j] = s.a1, kb[k][j] = s.b;
                }
            }
        __m256i c[8], cs[8];
        float a0[8], a1[8], bb[8];
        for (int j = 0; j < 8; j++) {
            const uint8_t *b = blk + (size_t)j * a->row_bytes;
            if (!kq) {
                const gscale s = group_scale_hw(type, b, g);
                a0[j] = s.a0, a1[j] = s.a1, bb[j] = s.b;
            }
            c[j] = group_codes_avx2(type, b, g);
            cs[j] = is_signed ? _mm256_sign_epi8(c[j], c[j]) : c[j];
        }
        const __m256 va0 = _mm256_loadu_ps(kq ? ka0[g] : a0), va1 = _mm256_loadu_ps(kq ? ka1[g] : a1),
                     vb = _mm256_loadu_ps(kq ? kb[g] : bb);
        for (int r = 0; r < nr; r++) {
            const size_t t = (size_t)t0 + r;
            const __m256i x = _mm256_loadu_si256((const __m256i *)(a->xq + t * a->cols + (size_t)gi * QK));
            __m256i p[8];
            for (int j = 0; j < 8; j++) {
                __m256i xs = is_signed ? _mm256_sign_epi8(x, c[j]) : x;
                p[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(cs[j], xs), ones);
            }
            /* lanes 0-3 of p[j] cover elements 0-15, lanes 4-7 elements 16-31 */
            const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
            const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
            const __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
            const __m256i i0 = _mm256_permute2x128_si256(q0, q1, 0x20);
            const __m256i i1 = _mm256_permute2x128_si256(q0, q1, 0x31);
            __m256 term;
            if (kind == KIND_MIN)
                term = _mm256_fmadd_ps(vb, _mm256_set1_ps((float)a->xs[t * ng + gi]),
                                       _mm256_mul_ps(va0, _mm256_cvtepi32_ps(_mm256_add_epi32(i0, i1))));
            else if (kind == KIND_HALVES)
                term = _mm256_fmadd_ps(va1, _mm256_cvtepi32_ps(i1),
                                       _mm256_mul_ps(va0, _mm256_cvtepi32_ps(i0)));
            else
                term = _mm256_mul_ps(va0, _mm256_cvtepi32_ps(_mm256_add_epi32(i0, i1)));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a->xd[t * ng + gi]), term, acc[r]);
        }
    }
    for (int r = 0; r < nr; r++)
        _mm256_storeu_ps(out[r], acc[r]);
}

/* qdot8_avx2_t with the block format a constant, so that its switches fold away. */
AVX2 static void qdot8_avx2(const qmm_args *a, int o, int t0, int nr, float out[][8]) {
    switch (a->type) {
#define Q8CASE(T) case T: qdot8_avx2_t(a, o, t0, nr, out, T); break;
    Q8CASE(GGML_TYPE_Q4_0) Q8CASE(GGML_TYPE_Q4_1) Q8CASE(GGML_TYPE_Q5_0) Q8CASE(GGML_TYPE_Q5_1)
    Q8CASE(GGML_TYPE_Q8_0) Q8CASE(GGML_TYPE_Q4_K) Q8CASE(GGML_TYPE_Q5_K) Q8CASE(GGML_TYPE_Q6_K)
#undef Q8CASE
    }
}

/* Eight rows' groups unpacked once for many tokens (prefill): codes, their magnitudes for the
 * signed formats, and scales. The same values qdot8_avx2 computes on the fly, so the same
 * bits. */
typedef struct {
    __m256i *c, *cs;    /* [ng][8] */
    float *a0, *a1, *b; /* [ng][8] */
} unpacked8;

AVX2 static inline __attribute__((always_inline)) void
unpack8_avx2_t(const qmm_args *a, int o, unpacked8 *u, const int type) {
    const int gpb = a->blk_elems / QK, ng = a->cols / QK;
    const bool is_signed = type_kind(type) != KIND_MIN;
    const uint8_t *w = a->W + (size_t)o * a->row_bytes;
    for (int gi = 0; gi < ng; gi++)
        for (int j = 0; j < 8; j++) {
            const uint8_t *b = w + (size_t)j * a->row_bytes + (size_t)(gi / gpb) * a->blk_bytes;
            const gscale s = group_scale_hw(type, b, gi % gpb);
            const size_t k = (size_t)gi * 8 + j;
            u->a0[k] = s.a0, u->a1[k] = s.a1, u->b[k] = s.b;
            const __m256i c = group_codes_avx2(type, b, gi % gpb);
            _mm256_store_si256(&u->c[k], c);
            _mm256_store_si256(&u->cs[k], is_signed ? _mm256_sign_epi8(c, c) : c);
        }
}

AVX2 static void unpack8_avx2(const qmm_args *a, int o, unpacked8 *u) {
    switch (a->type) {
#define U8CASE(T) case T: unpack8_avx2_t(a, o, u, T); break;
    U8CASE(GGML_TYPE_Q4_0) U8CASE(GGML_TYPE_Q4_1) U8CASE(GGML_TYPE_Q5_0) U8CASE(GGML_TYPE_Q5_1)
    U8CASE(GGML_TYPE_Q8_0) U8CASE(GGML_TYPE_Q4_K) U8CASE(GGML_TYPE_Q5_K) U8CASE(GGML_TYPE_Q6_K)
#undef U8CASE
    }
}

AVX2 static void qdot8_pre_avx2(const qmm_args *a, const unpacked8 *u, int t0, int nr, float out[][8]) {
    const int ng = a->cols / QK, kind = type_kind(a->type);
    const bool is_signed = kind != KIND_MIN;
    __m256 acc[ROWS];
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int gi = 0; gi < ng; gi++) {
        const __m256i *c = u->c + (size_t)gi * 8, *cs = u->cs + (size_t)gi * 8;
        const __m256 va0 = _mm256_loadu_ps(u->a0 + (size_t)gi * 8);
        const __m256 va1 = _mm256_loadu_ps(u->a1 + (size_t)gi * 8);
        const __m256 vb = _mm256_loadu_ps(u->b + (size_t)gi * 8);
        for (int r = 0; r < nr; r++) {
            const size_t t = (size_t)t0 + r;
            const __m256i x = _mm256_loadu_si256((const __m256i *)(a->xq + t * a->cols + (size_t)gi * QK));
            __m256i p[8];
            for (int j = 0; j < 8; j++) {
                __m256i xs = is_signed ? _mm256_sign_epi8(x, _mm256_load_si256(&c[j])) : x;
                p[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_load_si256(&cs[j]), xs), ones);
            }
            const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
            const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
            const __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
            const __m256i i0 = _mm256_permute2x128_si256(q0, q1, 0x20);
            const __m256i i1 = _mm256_permute2x128_si256(q0, q1, 0x31);
            __m256 term;
            if (kind == KIND_MIN)
                term = _mm256_fmadd_ps(vb, _mm256_set1_ps((float)a->xs[t * ng + gi]),
                                       _mm256_mul_ps(va0, _mm256_cvtepi32_ps(_mm256_add_epi32(i0, i1))));
            else if (kind == KIND_HALVES)
                term = _mm256_fmadd_ps(va1, _mm256_cvtepi32_ps(i1),
                                       _mm256_mul_ps(va0, _mm256_cvtepi32_ps(i0)));
            else
                term = _mm256_mul_ps(va0, _mm256_cvtepi32_ps(_mm256_add_epi32(i0, i1)));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a->xd[t * ng + gi]), term, acc[r]);
        }
    }
    for (int r = 0; r < nr; r++)
        _mm256_storeu_ps(out[r], acc[r]);
}
#endif

/* ---- the matmul ------------------------------------------------------------------------ */

typedef void (*qdot_fn)(const qmm_args *, int, int, int, float *);

/* The best instruction set this CPU has, at most `cap` (SEER_CPU_ISA_*; 0: no cap). */
static int pick_isa(int cap) {
    int isa = SEER_CPU_ISA_SCALAR;
#ifdef HAVE_X86
    /* F16C comes with every AVX2 CPU (x86-64-v3), and clang's builtin cannot test it. */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        isa = SEER_CPU_ISA_AVX2;
    if (isa == SEER_CPU_ISA_AVX2 && seer_cpu_qmm_avx512_ok())
        isa = SEER_CPU_ISA_AVX512;
#endif
    return cap && cap < isa ? cap : isa;
}

typedef struct {
    const qmm_args *a;
    qdot_fn dot;
    bool wide;   /* qdot8_avx2 for runs of 8 rows */
    bool avx512; /* seer_cpu_qmm_avx512_rows for runs of 16 */
} qmm_job;

static void qmm_store8(const qmm_args *a, int64_t o, int t0, int nr, float out[][8]) {
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < 8; k++)
            a->y[(size_t)(t0 + r) * a->rows + o + k] = out[r][k] + (a->bias ? a->bias[o + k] : 0.f);
}

#ifdef HAVE_X86
/* Many tokens: each run of 8 rows is unpacked once and used for all of them. Returns the
 * first row it did not do (all of them, unless memory ran out: the caller does the rest). */
static int64_t qmm_rows_pre(const qmm_args *a, int64_t o0, int64_t o1) {
    const size_t ng = (size_t)(a->cols / QK);
    unpacked8 u;
    void *mem = aligned_alloc(32, ng * 8 * (2 * sizeof(__m256i) + 3 * sizeof(float)));
    if (!mem)
        return o0;
    u.c = mem;
    u.cs = u.c + ng * 8;
    u.a0 = (float *)(u.cs + ng * 8);
    u.a1 = u.a0 + ng * 8;
    u.b = u.a1 + ng * 8;
    int64_t o = o0;
    for (; o + 8 <= o1; o += 8) {
        unpack8_avx2(a, (int)o, &u);
        for (int t0 = 0; t0 < a->T; t0 += ROWS) {
            const int nr = a->T - t0 < ROWS ? a->T - t0 : ROWS;
            float out[ROWS][8];
            qdot8_pre_avx2(a, &u, t0, nr, out);
            qmm_store8(a, o, t0, nr, out);
        }
    }
    free(mem);
    return o;
}
#endif

/* Tokens per call from which the weights are unpacked ahead (the result is the same). */
#define PRE_T 8

static void qmm_rows(void *ctx, int64_t o0, int64_t o1) {
    const qmm_job *j = ctx;
    const qmm_args *a = j->a;
    if (j->avx512)
        o0 = seer_cpu_qmm_avx512_rows(a, o0, o1);
#ifdef HAVE_X86
    if (j->wide && a->T >= PRE_T)
        o0 = qmm_rows_pre(a, o0, o1);
#endif
    for (int t0 = 0; t0 < a->T; t0 += ROWS) {
        const int nr = a->T - t0 < ROWS ? a->T - t0 : ROWS;
        int64_t o = o0;
#ifdef HAVE_X86
        for (; j->wide && o + 8 <= o1; o += 8) {
            float out[ROWS][8];
            qdot8_avx2(a, (int)o, t0, nr, out);
            qmm_store8(a, o, t0, nr, out);
        }
#endif
        for (; o < o1; o++) {
            float out[ROWS];
            j->dot(a, (int)o, t0, nr, out);
            for (int r = 0; r < nr; r++)
                a->y[(size_t)(t0 + r) * a->rows + o] = out[r] + (a->bias ? a->bias[o] : 0.f);
        }
    }
}

seer_status seer_cpu_qmatmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                             const float *bias, int T) {
    seer_cpu *c = be->impl;
    const int cols = w->cols, ng = cols / QK;
    const size_t need = (size_t)T * cols + (size_t)T * ng * (sizeof(float) + 2 * sizeof(int32_t)) + 64;
    if (need > c->xq_cap) {
        void *p = malloc(need);
        if (!p)
            return seer_err(SEER_ERR_OOM, "matmul: out of memory for %d activation rows", T);
        free(c->xq);
        c->xq = p;
        c->xq_cap = need;
    }
    float *xd = c->xq;
    int32_t *xs = (int32_t *)(xd + (size_t)T * ng), *xh = xs + (size_t)T * ng;
    int8_t *xq = (int8_t *)(xh + (size_t)T * ng);
    const int isa = pick_isa(c->isa_cap);
    xquant_args xa = {x, xq, xd, xs, xh, cols, isa >= SEER_CPU_ISA_AVX512};
    seer_cpu_for(be, (size_t)T * cols > ((size_t)1 << 16), T, xquant_rows, &xa);
    qmm_args a = {y, w->data, xq, xd, xs, xh, bias, w->dtype, w->rows, cols, T, 0,
                  seer_ggml_type_block_elems((ggml_type)w->dtype),
                  seer_ggml_type_block_bytes((ggml_type)w->dtype)};
    a.row_bytes = (size_t)(cols / a.blk_elems) * a.blk_bytes;
    qmm_job j = {&a, qdot_scalar, false, false};
#ifdef HAVE_X86
    if (isa >= SEER_CPU_ISA_AVX2)
        j.dot = qdot_avx2, j.wide = true;
    j.avx512 = isa >= SEER_CPU_ISA_AVX512;
#endif
    /* Chunks of whole 16-row runs, so that the narrower paths only take the matrix's last
     * rows (the bits are the same either way; the speed is not). */
    if (c->n_threads > 1 && (size_t)w->rows * cols * T > ((size_t)1 << 18)) {
        int64_t chunk = ((int64_t)w->rows + (int64_t)c->n_threads * 8 - 1) / ((int64_t)c->n_threads * 8);
        chunk = (chunk + 15) / 16 * 16;
        seer_cpu_pool_run(c->pool, w->rows, chunk, qmm_rows, &j);
    } else {
        qmm_rows(&j, 0, w->rows);
    }
    return SEER_OK;
}
