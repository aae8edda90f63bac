/*
 * quant_k_write.c: quantising f32 to Q4_K, Q5_K, Q6_K, Q5_0 and Q5_1 blocks.
 *
 * The output is meant to be byte-identical to ggml's reference quantisers
 * (quantize_row_*_ref, what llama-quantize uses without an importance matrix), so a file
 * written here holds the bytes llama.cpp would write for the same floats. That is why the
 * code keeps ggml's exact arithmetic: the same operation order, divisions where ggml
 * divides, the f16-rounded super-block scales reused for the final codes, ties rounded to
 * even by the 1.5*2^23 trick, and the integer conversions (truncations, wraps) as ggml
 * writes them. The file is compiled with -ffp-contract=off (CMakeLists.txt): a fused
 * multiply-add would round differently and change codes.
 *
 * The search each K format makes (after ggml's make_qkx2_quants and make_qx_quants):
 *   Q4_K/Q5_K: per sub-block of 32, an affine fit (scale, min) chosen among nmax-stretched
 *              candidates by weighted squared error, weights |x| + rms(sub-block); the eight
 *              scales and mins are then themselves quantised to 6 bits against the block's
 *              largest.
 *   Q6_K:      per sub-block of 16, a symmetric scale searched over 19 stretches of the
 *              extreme, weighted by x^2; the sixteen scales go to int8 against the largest.
 * Byte layouts: quant_k.c. Not for: importance-matrix quantisation, Q2_K/Q3_K or IQ formats.
 */
#include "gguf/quant_k.h"
#include "util/error.h"

#include <math.h>
#include <string.h>

#define QK_K 256
#define GROUP_EPS 1e-15f /* below this a group's largest magnitude counts as all zero */

/* Round to nearest, ties to even, for |v| < 2^22: adding 1.5*2^23 leaves the rounded
 * integer in the low mantissa bits. Values outside that range never reach it here: the
 * callers divide by a scale fitted to the same values. */
static int round_even(float v) {
    float t = v + 12582912.f;
    int32_t bits;
    memcpy(&bits, &t, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

static void put_f16(uint8_t *p, float f) {
    uint16_t h = seer_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static float get_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return seer_f16_to_f32(h);
}

/* ---- Q5_0 / Q5_1 --------------------------------------------------------------------- */

static void quant_q5_0(const float *x, uint8_t *b) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    /* the signed extreme maps to code 0 (-16), as Q4_0 does with -8 */
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    put_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        /* truncation of v + 16.5 rounds half up; only the top needs a cap */
        int q0 = imin(31, (int)(x[j] * id + 16.5f));
        int q1 = imin(31, (int)(x[j + 16] * id + 16.5f));
        b[6 + j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
        qh |= (uint32_t)((q0 >> 4) & 1) << j;
        qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
    }
    memcpy(b + 2, &qh, 4);
}

static void quant_q5_1(const float *x, uint8_t *b) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    const float d = (max - min) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        /* (x - min) * id lies in [0, 31]: the reference neither clamps nor needs to */
        int q0 = (int)((x[j] - min) * id + 0.5f);
        int q1 = (int)((x[j + 16] - min) * id + 0.5f);
        b[8 + j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
        qh |= (uint32_t)((q0 >> 4) & 1) << j;
        qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
    }
    memcpy(b + 4, &qh, 4);
}

/* ---- Q4_K / Q5_K --------------------------------------------------------------------- */

/* Weighted affine fit of n values to codes 0..nmax: x ~ scale*L - *neg_min, the min never
 * above zero. Starts from the plain range fit, then tries nstep+1 stretched ranges
 * (nmax + rmin + rdelta*k over the range), solving the weighted least-squares scale and min
 * for each candidate's codes and keeping the lowest weighted squared error. Returns the
 * scale; L gets the codes. */
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L,
                        float *neg_min, float rmin, float rdelta, int nstep) {
    uint8_t cand[32];
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)imax(0, imin(nmax, round_even(iscale * (x[i] - min))));
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_err += w[i] * diff;
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * k + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, round_even(iscale * (x[i] - min))));
            cand[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0))
            continue;
        float s = (sum_w * sum_xl - sum_x * sum_l) / det;
        float m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (m > 0) { /* a positive min would need negative codes: refit through zero */
            m = 0;
            s = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = s * cand[i] + m - x[i];
            diff = diff * diff;
            err += w[i] * diff;
        }
        if (err < best_err) {
            memcpy(L, cand, (size_t)n);
            best_err = err;
            scale = s;
            min = m;
        }
    }
    *neg_min = -min;
    return scale;
}

/* Q4_K and Q5_K share everything but the code width (nmax 15 or 31), the search's range
 * (rmin, nstep) and where the codes go. b: the 144- or 176-byte block; L: the codes. */
static void kquant_affine(const float *x, uint8_t *b, uint8_t L[QK_K], int nmax, float rmin,
                          int nstep) {
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0; /* the mins are subtracted, so both are >= 0 */
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    uint8_t *sc = b + 4;
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        /* the reference stores the rounded value in a byte before capping it at 63 */
        uint8_t ls = (uint8_t)round_even(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)round_even(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else { /* low nibbles in bytes 8-11, top two bits in the spare bits of 0-7 */
            sc[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
            sc[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    put_f16(b, max_scale / 63.f);
    put_f16(b + 2, max_min / 63.f);
    /* the codes are redone against the scales as stored (f16 times 6 bits), so that the
     * dequantised values are the fitted ones as closely as the stored scales allow */
    const float d_all = get_f16(b), dmin_all = get_f16(b + 2);
    for (int j = 0; j < 8; j++) {
        int s6, m6;
        if (j < 4) {
            s6 = sc[j] & 63;
            m6 = sc[j + 4] & 63;
        } else {
            s6 = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
            m6 = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        }
        const float d = d_all * s6;
        if (!d)
            continue; /* the fit's codes stay */
        const float dm = dmin_all * m6;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)imax(0, imin(nmax, round_even((x[32 * j + i] + dm) / d)));
    }
}

static void quant_q4_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    memset(b, 0, 144);
    kquant_affine(x, b, L, 15, -1.f, 20);
    uint8_t *q = b + 16;
    for (int j = 0; j < QK_K; j += 64) { /* 64 values per 32 bytes: low nibble first half */
        for (int l = 0; l < 32; l++)
            q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        q += 32;
    }
}

static void quant_q5_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    memset(b, 0, 176);
    kquant_affine(x, b, L, 31, -0.5f, 15);
    uint8_t *qh = b + 16, *ql = b + 48;
    for (int n = 0, bit = 0; n < QK_K; n += 64, bit += 2) {
        for (int j = 0; j < 32; j++) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            qh[j] |= (uint8_t)(((l1 >> 4) << bit) | ((l2 >> 4) << (bit + 1)));
            ql[j] = (uint8_t)((l1 & 0xF) | ((l2 & 0xF) << 4));
        }
        ql += 32;
    }
}

/* ---- Q6_K ---------------------------------------------------------------------------- */

/* Symmetric fit of n values to codes -nmax..nmax-1 (stored with +nmax), weights x^2: the
 * extreme's scale, then 18 stretches of it, keeping the one with the largest
 * (sum w x l)^2 / sum w l^2 (the least weighted squared error for its best scale). */
static float fit_symmetric(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, round_even(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0)
            continue;
        iscale = -(nmax + 0.1f * k) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, round_even(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, round_even(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quant_q6_k(const float *x, uint8_t *b) {
    int8_t L[QK_K];
    float scales[16];
    float max_scale = 0, max_abs = 0;
    memset(b, 0, 210);
    for (int ib = 0; ib < 16; ib++) {
        scales[ib] = fit_symmetric(16, 32, x + 16 * ib, L + 16 * ib);
        if (fabsf(scales[ib]) > max_abs) {
            max_abs = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    if (max_abs < GROUP_EPS)
        return; /* an all-zero block: zero bytes, d = 0 */
    uint8_t *ql = b, *qh = b + 128;
    int8_t *sc = (int8_t *)(b + 192);
    float iscale = -128.f / max_scale;
    put_f16(b + 208, 1 / iscale);
    for (int ib = 0; ib < 16; ib++)
        sc[ib] = (int8_t)imin(127, round_even(iscale * scales[ib]));
    const float d_all = get_f16(b + 208);
    for (int j = 0; j < 16; j++) {
        const float d = d_all * sc[j];
        if (!d)
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(imax(-32, imin(31, round_even(x[16 * j + i] / d))) + 32);
    }
    /* 128 values per 64 low-nibble bytes and 32 high-bit bytes, four quarters interleaved */
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; l++) {
            const uint8_t *u = (const uint8_t *)L + j + l;
            ql[l] = (uint8_t)((u[0] & 0xF) | ((u[64] & 0xF) << 4));
            ql[l + 32] = (uint8_t)((u[32] & 0xF) | ((u[96] & 0xF) << 4));
            qh[l] = (uint8_t)((u[0] >> 4) | ((u[32] >> 4) << 2) | ((u[64] >> 4) << 4) |
                              ((u[96] >> 4) << 6));
        }
        ql += 64;
        qh += 32;
    }
}

/* ---- dispatch ------------------------------------------------------------------------ */

bool seer_quant_k_supported(ggml_type t) {
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K ||
           t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1;
}

seer_status seer_quant_k(ggml_type t, const float *src, void *dst, uint64_t n) {
    if (!seer_quant_k_supported(t))
        return seer_err(SEER_ERR_UNSUPPORTED, "seer_quant_k: type %s (%d) is not handled here",
                        seer_ggml_type_name(t), (int)t);
    const int blk = seer_ggml_type_block_elems(t), bytes = seer_ggml_type_block_bytes(t);
    if (n % (uint64_t)blk)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "%llu elements of type %s are not a multiple of its block size %d",
                        (unsigned long long)n, seer_ggml_type_name(t), blk);
    if (n > 0 && (!src || !dst))
        return seer_err(SEER_ERR_INVALID_ARG, "seer_quant_k: NULL buffer");
    /* the fits divide by ranges and scales: inf or NaN would give meaningless codes and
     * undefined integer conversions */
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(src[i]))
            return seer_err(SEER_ERR_INVALID_ARG,
                            "cannot quantise the non-finite value at index %llu to %s",
                            (unsigned long long)i, seer_ggml_type_name(t));
    void (*fn)(const float *, uint8_t *) = t == GGML_TYPE_Q4_K   ? quant_q4_k
                                           : t == GGML_TYPE_Q5_K ? quant_q5_k
                                           : t == GGML_TYPE_Q6_K ? quant_q6_k
                                           : t == GGML_TYPE_Q5_0 ? quant_q5_0
                                                                 : quant_q5_1;
    const int64_t nb = (int64_t)(n / (uint64_t)blk);
    uint8_t *d = dst;
    /* Blocks are independent, so the split over threads does not change any byte. */
#pragma omp parallel for schedule(static) if (nb > 256)
    for (int64_t i = 0; i < nb; i++)
        fn(src + i * blk, d + i * bytes);
    return SEER_OK;
}
