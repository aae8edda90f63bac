/*
 * quant.c: the ggml tensor types as GGUF stores them: block sizes, f16/bf16 conversion and
 * the reference (scalar) quantisers and dequantisers of the block formats seer computes with.
 *
 * The byte layouts and the rounding of the quantisers follow ggml's reference
 * implementations, so files written here load in other GGUF readers and files from ggml
 * converters dequantise to the same floats. Not for: fast kernels (the backends have those)
 * or the dequantisers of Q5_0, Q5_1 and the K-quants Q4_K/Q5_K/Q6_K (quant_k.c, dispatched
 * from seer_gguf_dequant); the other K formats' sizes are known here so that files holding them
 * can be opened, but they cannot be dequantised.
 */
#include "gguf/gguf.h"
#include "gguf/quant_k.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int blk;   /* elements per block */
    int bytes; /* bytes per block */
    bool supported;
} type_info;

static const type_info g_types[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"f32", 1, 4, true},
    [GGML_TYPE_F16] = {"f16", 1, 2, true},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 18, true},
    [GGML_TYPE_Q4_1] = {"q4_1", 32, 20, true},
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22, false},
    [GGML_TYPE_Q5_1] = {"q5_1", 32, 24, false},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34, true},
    [GGML_TYPE_Q8_1] = {"q8_1", 32, 36, false},
    [GGML_TYPE_Q2_K] = {"q2_K", 256, 84, false},
    [GGML_TYPE_Q3_K] = {"q3_K", 256, 110, false},
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 144, false},
    [GGML_TYPE_Q5_K] = {"q5_K", 256, 176, false},
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 210, false},
    [GGML_TYPE_Q8_K] = {"q8_K", 256, 292, false},
    [GGML_TYPE_BF16] = {"bf16", 1, 2, true},
};

static const type_info *info_of(ggml_type t) {
    if ((unsigned)t >= GGML_TYPE_COUNT || !g_types[t].name)
        return NULL;
    return &g_types[t];
}

const char *seer_ggml_type_name(ggml_type t) {
    static _Thread_local char buf[24];
    const type_info *ti = info_of(t);
    if (ti)
        return ti->name;
    snprintf(buf, sizeof buf, "type%d", (int)t);
    return buf;
}

bool seer_ggml_type_supported(ggml_type t) {
    const type_info *ti = info_of(t);
    return ti && (ti->supported || seer_dequant_k_supported(t));
}

int seer_ggml_type_block_elems(ggml_type t) {
    const type_info *ti = info_of(t);
    return ti ? ti->blk : 0;
}

int seer_ggml_type_block_bytes(ggml_type t) {
    const type_info *ti = info_of(t);
    return ti ? ti->bytes : 0;
}

seer_status seer_ggml_nbytes(ggml_type t, uint64_t n, size_t *out) {
    const type_info *ti = info_of(t);
    if (!ti)
        return seer_err(SEER_ERR_UNSUPPORTED, "unsupported tensor type %s (%d)",
                        seer_ggml_type_name(t), (int)t);
    if (n % (uint64_t)ti->blk)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "%llu elements of type %s are not a multiple of its block size %d",
                        (unsigned long long)n, ti->name, ti->blk);
    uint64_t blocks = n / (uint64_t)ti->blk;
    if (blocks > SIZE_MAX / (uint64_t)ti->bytes)
        return seer_err(SEER_ERR_INVALID_ARG, "%llu elements of type %s overflow a size",
                        (unsigned long long)n, ti->name);
    *out = (size_t)(blocks * (uint64_t)ti->bytes);
    return SEER_OK;
}

/* ---- f16 / bf16 ---------------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static float bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

float seer_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in f32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t seer_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: stay quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    /* 65520 is halfway between 65504 (odd mantissa) and 65536: even rounds it to inf */
    if (ax >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
        if (ax <= 0x33000000u) /* <= 2^-25: rounds to zero (2^-25 is a tie, zero is even) */
            return (uint16_t)sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* units of 2^-24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++; /* may carry into the smallest normal, which is the right encoding */
        return (uint16_t)(sign | q);
    }
    uint32_t h = (ax - 0x38000000u) >> 13;
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is still correct rounding */
    return (uint16_t)(sign | h);
}

float seer_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t seer_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: rounding could turn it into inf */
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ---- block formats ------------------------------------------------------------------- */

/* Sources may be unaligned (a file's alignment can be 1), so multi-byte loads go through
 * memcpy. */
static uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

static void dequant_q8_0(const uint8_t *b, float *y) {
    float d = seer_f16_to_f32(ld16(b));
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

static void dequant_q4_0(const uint8_t *b, float *y) {
    float d = seer_f16_to_f32(ld16(b));
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((b[2 + j] & 0x0f) - 8) * d;
        y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
    }
}

static void dequant_q4_1(const uint8_t *b, float *y) {
    float d = seer_f16_to_f32(ld16(b));
    float m = seer_f16_to_f32(ld16(b + 2));
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(b[4 + j] & 0x0f) * d + m;
        y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
    }
}

/* The quantisers mirror ggml's quantize_row_*_ref: the scale is computed in f32 and stored
 * as f16, the codes use the f32 scale. */
static void quant_q8_0(const float *x, uint8_t *b) {
    float amax = 0;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.f;
    float id = d ? 1.f / d : 0.f;
    st16(b, seer_f32_to_f16(d));
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)roundf(fminf(127.f, fmaxf(-127.f, x[j] * id)));
}

static int clamp_code(float v) {
    /* ggml truncates v + 0.5 (or + 8.5) towards zero and caps at 15 */
    int q = (int)fminf(15.f, fmaxf(0.f, v));
    return q;
}

static void quant_q4_0(const float *x, uint8_t *b) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    /* the signed extreme maps to -8, so the full range [-8, 7] is used on its side */
    float d = max / -8.f;
    float id = d ? 1.f / d : 0.f;
    st16(b, seer_f32_to_f16(d));
    for (int j = 0; j < 16; j++) {
        int q0 = clamp_code(x[j] * id + 8.5f);
        int q1 = clamp_code(x[j + 16] * id + 8.5f);
        b[2 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

static void quant_q4_1(const float *x, uint8_t *b) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; j++) {
        min = fminf(min, x[j]);
        max = fmaxf(max, x[j]);
    }
    float d = (max - min) / 15.f;
    float id = d ? 1.f / d : 0.f;
    st16(b, seer_f32_to_f16(d));
    st16(b + 2, seer_f32_to_f16(min));
    for (int j = 0; j < 16; j++) {
        int q0 = clamp_code((x[j] - min) * id + 0.5f);
        int q1 = clamp_code((x[j + 16] - min) * id + 0.5f);
        b[4 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

static seer_status check_n(ggml_type t, uint64_t n, const char *what) {
    const type_info *ti = info_of(t);
    if (!ti || !ti->supported)
        return seer_err(SEER_ERR_UNSUPPORTED, "unsupported tensor type %s (%d) for %s",
                        seer_ggml_type_name(t), (int)t, what);
    if (n % (uint64_t)ti->blk)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "%s of %llu elements: not a multiple of the %s block size %d", what,
                        (unsigned long long)n, ti->name, ti->blk);
    return SEER_OK;
}

seer_status seer_gguf_dequant(ggml_type t, const void *src, float *dst, uint64_t n) {
    if (seer_dequant_k_supported(t)) /* K-quants and Q5_0/Q5_1: quant_k.c */
        return seer_dequant_k(t, src, dst, n);
    SEER_TRY(check_n(t, n, "dequantisation"));
    const uint8_t *s = src;
    switch (t) {
    case GGML_TYPE_F32:
        memcpy(dst, s, (size_t)n * 4);
        break;
    case GGML_TYPE_F16:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = seer_f16_to_f32(ld16(s + 2 * i));
        break;
    case GGML_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = seer_bf16_to_f32(ld16(s + 2 * i));
        break;
    case GGML_TYPE_Q8_0:
        for (uint64_t i = 0; i < n / 32; i++)
            dequant_q8_0(s + 34 * i, dst + 32 * i);
        break;
    case GGML_TYPE_Q4_0:
        for (uint64_t i = 0; i < n / 32; i++)
            dequant_q4_0(s + 18 * i, dst + 32 * i);
        break;
    case GGML_TYPE_Q4_1:
        for (uint64_t i = 0; i < n / 32; i++)
            dequant_q4_1(s + 20 * i, dst + 32 * i);
        break;
    default:
        return seer_err(SEER_ERR_INTERNAL, "dequantiser missing for %s", seer_ggml_type_name(t));
    }
    return SEER_OK;
}

seer_status seer_gguf_tensor_dequant(const gguf_tensor *t, float *dst, uint64_t n) {
    if (!seer_ggml_type_supported(t->type))
        return seer_err(SEER_ERR_UNSUPPORTED, "unsupported tensor type %s (%d) in tensor %s",
                        seer_ggml_type_name(t->type), (int)t->type, t->name);
    uint64_t ne = seer_gguf_tensor_nelements(t);
    if (n > ne)
        return seer_err(SEER_ERR_INVALID_ARG, "tensor %s has %llu elements, %llu requested",
                        t->name, (unsigned long long)ne, (unsigned long long)n);
    seer_status s = seer_gguf_dequant(t->type, t->data, dst, n);
    if (s != SEER_OK)
        return seer_err(s, "tensor %s: %s", t->name, seer_last_error());
    return SEER_OK;
}

uint64_t seer_gguf_tensor_nelements(const gguf_tensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims && d < 4; d++)
        n *= t->ne[d];
    return n;
}

seer_status seer_gguf_quant(ggml_type t, const float *src, void *dst, uint64_t n) {
    if (seer_quant_k_supported(t)) /* K-quants and Q5_0/Q5_1: quant_k_write.c */
        return seer_quant_k(t, src, dst, n);
    SEER_TRY(check_n(t, n, "quantisation"));
    uint8_t *d = dst;
    if (t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1) {
        /* the block scales are meaningless with inf or NaN in the block, and the integer
         * conversions would be undefined */
        for (uint64_t i = 0; i < n; i++)
            if (!isfinite(src[i]))
                return seer_err(SEER_ERR_INVALID_ARG,
                                "cannot quantise the non-finite value at index %llu to %s",
                                (unsigned long long)i, seer_ggml_type_name(t));
    }
    switch (t) {
    case GGML_TYPE_F32:
        memcpy(d, src, (size_t)n * 4);
        break;
    case GGML_TYPE_F16:
        for (uint64_t i = 0; i < n; i++)
            st16(d + 2 * i, seer_f32_to_f16(src[i]));
        break;
    case GGML_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++)
            st16(d + 2 * i, seer_f32_to_bf16(src[i]));
        break;
    case GGML_TYPE_Q8_0:
        for (uint64_t i = 0; i < n / 32; i++)
            quant_q8_0(src + 32 * i, d + 34 * i);
        break;
    case GGML_TYPE_Q4_0:
        for (uint64_t i = 0; i < n / 32; i++)
            quant_q4_0(src + 32 * i, d + 18 * i);
        break;
    case GGML_TYPE_Q4_1:
        for (uint64_t i = 0; i < n / 32; i++)
            quant_q4_1(src + 32 * i, d + 20 * i);
        break;
    default:
        return seer_err(SEER_ERR_INTERNAL, "quantiser missing for %s", seer_ggml_type_name(t));
    }
    return SEER_OK;
}
