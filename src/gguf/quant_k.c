/*
 * quant_k.c: dequantising Q4_K, Q5_K, Q6_K, Q5_0 and Q5_1 blocks to f32.
 *
 * Byte layouts (ggml's ggml-common.h), QK_K = 256 elements per super-block:
 *   Q4_K (144 B): f16 d, f16 dmin, 12 B of 6-bit scales and mins for 8 sub-blocks of 32,
 *                 128 B of 4-bit quants; x = d*scale*q - dmin*min.
 *   Q5_K (176 B): as Q4_K plus 32 B holding each quant's fifth bit.
 *   Q6_K (210 B): 128 B low 4 bits, 64 B high 2 bits, 16 int8 scales (sub-blocks of 16),
 *                 f16 d; x = d*scale*(q - 32).
 *   Q5_0 (22 B):  f16 d, 32 high bits, 16 B of nibbles for 32 elements; x = d*(q - 16).
 *   Q5_1 (24 B):  f16 d, f16 m, 32 high bits, 16 B of nibbles; x = d*q + m.
 * The element order and the arithmetic follow ggml's reference dequantize_row_* so that a
 * tensor dequantises to the floats other GGUF readers compute.
 * Not for: quantising, or the rarer Q2_K, Q3_K and the IQ formats.
 */
#include "gguf/quant_k.h"
#include "util/error.h"

#include <string.h>

#define QK_K 256

typedef struct {
    ggml_type type;
    int blk, bytes;
} k_info;

static const k_info k_types[] = {
    {GGML_TYPE_Q4_K, QK_K, 144}, {GGML_TYPE_Q5_K, QK_K, 176}, {GGML_TYPE_Q6_K, QK_K, 210},
    {GGML_TYPE_Q5_0, 32, 22},    {GGML_TYPE_Q5_1, 32, 24},
};

static const k_info *find(ggml_type t) {
    for (size_t i = 0; i < sizeof k_types / sizeof *k_types; i++)
        if (k_types[i].type == t)
            return &k_types[i];
    return NULL;
}

bool seer_dequant_k_supported(ggml_type t) { return find(t) != NULL; }

static float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return seer_f16_to_f32(h);
}

/* The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes: sub-blocks 0-3
 * keep theirs in the low 6 bits of bytes j and j+4; 4-7 in the nibbles of bytes j+4 with
 * their top two bits in the spare high bits of bytes j-4 and j. */
static void scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void block_q4_k(const uint8_t *b, float *y) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int j = 0; j < QK_K / 64; j++) {
        int sc, m;
        scale_min(2 * j, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        scale_min(2 * j + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (q[l] >> 4) - m2;
        q += 32;
    }
}

static void block_q5_k(const uint8_t *b, float *y) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    for (int j = 0; j < QK_K / 64; j++) {
        int sc, m;
        scale_min(2 * j, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        scale_min(2 * j + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        const uint8_t u1 = (uint8_t)(1u << (2 * j)), u2 = (uint8_t)(2u << (2 * j));
        for (int l = 0; l < 32; l++)
            *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        ql += 32;
    }
}

static void block_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = f16_at(b + 208);
    for (int n = 0; n < QK_K; n += 128) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * sc[is + 0] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

static void block_q5_0(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int x0 = ((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
        int x1 = ((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
        y[j] = x0 * d;
        y[j + 16] = x1 * d;
    }
}

static void block_q5_1(const uint8_t *b, float *y) {
    const float d = f16_at(b), m = f16_at(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int x0 = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
        int x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

seer_status seer_dequant_k(ggml_type t, const void *src, float *dst, uint64_t n) {
    const k_info *ki = find(t);
    if (!ki)
        return seer_err(SEER_ERR_UNSUPPORTED, "seer_dequant_k: type %s (%d) is not handled here",
                        seer_ggml_type_name(t), (int)t);
    if (n % (uint64_t)ki->blk)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "%llu elements of type %s are not a multiple of its block size %d",
                        (unsigned long long)n, seer_ggml_type_name(t), ki->blk);
    if (n > 0 && (!src || !dst))
        return seer_err(SEER_ERR_INVALID_ARG, "seer_dequant_k: NULL buffer");
    void (*fn)(const uint8_t *, float *) = t == GGML_TYPE_Q4_K   ? block_q4_k
                                           : t == GGML_TYPE_Q5_K ? block_q5_k
                                           : t == GGML_TYPE_Q6_K ? block_q6_k
                                           : t == GGML_TYPE_Q5_0 ? block_q5_0
                                                                 : block_q5_1;
    const int64_t nb = (int64_t)(n / (uint64_t)ki->blk);
    const uint8_t *s = src;
    /* Blocks are independent, so the split over threads does not change any value. Whole
     * models dequantise at load time, where this matters. */
#pragma omp parallel for schedule(static) if (nb > 4096)
    for (int64_t i = 0; i < nb; i++)
        fn(s + i * ki->bytes, dst + i * ki->blk);
    return SEER_OK;
}
