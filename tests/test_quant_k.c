/*
 * test_quant_k.c: the dequantisers of src/gguf/quant_k.c against blocks built by hand.
 *
 * Each test chooses the values a block stands for (scales, mins, quants), packs them into
 * the byte layout as ggml's format description gives it (written here element by element,
 * independently of the dequantiser's loops), and compares seer_dequant_k with the floats
 * computed directly from the chosen values. Tolerance: 1e-6 relative, which only a fused
 * multiply-add could use. Also: two blocks in a row, bad sizes, types not handled.
 */
#include "testutil.h"

#include "gguf/quant_k.h"

#include <math.h>
#include <string.h>

#define QK_K 256

static void put16(uint8_t *p, float f) {
    uint16_t h = seer_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static void expect_close(const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++) {
        float tol = 1e-6f * fmaxf(1.f, fabsf(want[i]));
        if (!(fabsf(got[i] - want[i]) <= tol))
            fail_msg("element %d: got %.9g, want %.9g", i, got[i], want[i]);
    }
}

/* The 12 scale bytes of Q4_K/Q5_K from eight 6-bit scales and mins: sub-blocks 0-3 in the
 * low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 as nibbles of bytes
 * 8-11 (scale low, min high) with their top two bits in bits 6-7 of bytes 0-3 (scales) and
 * 4-7 (mins). */
static void pack_scales(const int sc[8], const int m[8], uint8_t out[12]) {
    memset(out, 0, 12);
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
    }
    for (int j = 4; j < 8; j++)
        out[j + 4] = (uint8_t)((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
}

/* Element e of a Q4_K/Q5_K super-block lives in 64-element chunk e/64: the low nibbles of
 * 32 bytes hold its first 32 elements, the high nibbles the next 32. */
static void put_nibble(uint8_t *qs, int e, int v) {
    int c = e / 64, p = e % 64;
    uint8_t *b = &qs[c * 32 + p % 32];
    if (p < 32)
        *b = (uint8_t)((*b & 0xF0) | (v & 0xF));
    else
        *b = (uint8_t)((*b & 0x0F) | ((v & 0xF) << 4));
}

typedef struct {
    float d, dmin;
    int sc[8], m[8];
    int q[QK_K];
} kblock;

static void make_kblock(kblock *b, uint64_t *rng, int qmax) {
    b->d = 0.5f + (float)(tu_rand_u64(rng) % 64) / 128.f;    /* exact in f16 */
    b->dmin = 0.125f + (float)(tu_rand_u64(rng) % 32) / 64.f;
    for (int j = 0; j < 8; j++) {
        b->sc[j] = (int)(tu_rand_u64(rng) % 64);
        b->m[j] = (int)(tu_rand_u64(rng) % 64);
    }
    b->sc[3] = 63; /* the extremes of the 6-bit fields */
    b->m[5] = 63;
    b->sc[6] = 0;
    for (int e = 0; e < QK_K; e++)
        b->q[e] = (int)(tu_rand_u64(rng) % (uint64_t)(qmax + 1));
    b->q[0] = 0;
    b->q[QK_K - 1] = qmax;
}

static void test_q4_k(void **state) {
    (void)state;
    uint64_t rng = 1;
    uint8_t raw[2 * 144];
    float want[2 * QK_K], got[2 * QK_K];
    for (int k = 0; k < 2; k++) {
        kblock b;
        make_kblock(&b, &rng, 15);
        uint8_t *p = raw + 144 * k;
        memset(p, 0, 144);
        put16(p, b.d);
        put16(p + 2, b.dmin);
        pack_scales(b.sc, b.m, p + 4);
        for (int e = 0; e < QK_K; e++) {
            put_nibble(p + 16, e, b.q[e]);
            want[k * QK_K + e] = b.d * b.sc[e / 32] * b.q[e] - b.dmin * b.m[e / 32];
        }
    }
    ASSERT_OK(seer_dequant_k(GGML_TYPE_Q4_K, raw, got, 2 * QK_K));
    expect_close(got, want, 2 * QK_K);
}

static void test_q5_k(void **state) {
    (void)state;
    uint64_t rng = 2;
    uint8_t raw[2 * 176];
    float want[2 * QK_K], got[2 * QK_K];
    for (int k = 0; k < 2; k++) {
        kblock b;
        make_kblock(&b, &rng, 31);
        uint8_t *p = raw + 176 * k;
        memset(p, 0, 176);
        put16(p, b.d);
        put16(p + 2, b.dmin);
        pack_scales(b.sc, b.m, p + 4);
        for (int e = 0; e < QK_K; e++) {
            put_nibble(p + 48, e, b.q[e]);
            /* the fifth bit: byte e%32 of the 32 high-bit bytes, bit = sub-block index */
            if (b.q[e] & 16)
                p[16 + e % 32] |= (uint8_t)(1u << (e / 32));
            want[k * QK_K + e] = b.d * b.sc[e / 32] * b.q[e] - b.dmin * b.m[e / 32];
        }
    }
    ASSERT_OK(seer_dequant_k(GGML_TYPE_Q5_K, raw, got, 2 * QK_K));
    expect_close(got, want, 2 * QK_K);
}

static void test_q6_k(void **state) {
    (void)state;
    uint64_t rng = 3;
    uint8_t raw[2 * 210];
    float want[2 * QK_K], got[2 * QK_K];
    for (int k = 0; k < 2; k++) {
        uint8_t *p = raw + 210 * k, *ql = p, *qh = p + 128;
        int8_t sc[16];
        memset(p, 0, 210);
        float d = 0.25f + (float)(tu_rand_u64(&rng) % 16) / 64.f;
        for (int i = 0; i < 16; i++)
            sc[i] = (int8_t)((int)(tu_rand_u64(&rng) % 256) - 128);
        sc[0] = -128;
        sc[15] = 127;
        memcpy(p + 192, sc, 16);
        put16(p + 208, d);
        for (int e = 0; e < QK_K; e++) {
            int q = (int)(tu_rand_u64(&rng) % 64);
            if (e == 0)
                q = 0;
            if (e == QK_K - 1)
                q = 63;
            /* halves of 128; quarters of 32 inside a half; scales per 16 elements */
            int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
            uint8_t *lo = &ql[h * 64 + (quarter & 1) * 32 + l];
            if (quarter < 2)
                *lo = (uint8_t)((*lo & 0xF0) | (q & 0xF));
            else
                *lo = (uint8_t)((*lo & 0x0F) | ((q & 0xF) << 4));
            qh[h * 32 + l] |= (uint8_t)(((q >> 4) & 3) << (2 * quarter));
            want[k * QK_K + e] = d * sc[h * 8 + quarter * 2 + l / 16] * (q - 32);
        }
    }
    ASSERT_OK(seer_dequant_k(GGML_TYPE_Q6_K, raw, got, 2 * QK_K));
    expect_close(got, want, 2 * QK_K);
}

static void test_q5_0_q5_1(void **state) {
    (void)state;
    uint64_t rng = 4;
    for (int variant = 0; variant < 2; variant++) {
        int bytes = variant ? 24 : 22;
        uint8_t raw[3 * 24];
        float want[96], got[96];
        for (int k = 0; k < 3; k++) {
            uint8_t *p = raw + bytes * k;
            memset(p, 0, (size_t)bytes);
            float d = 0.5f + (float)(tu_rand_u64(&rng) % 32) / 64.f, m = -1.5f + (float)k;
            put16(p, d);
            if (variant)
                put16(p + 2, m);
            uint8_t *qhp = p + (variant ? 4 : 2), *qs = qhp + 4;
            uint32_t qh = 0;
            for (int e = 0; e < 32; e++) {
                int q = (int)(tu_rand_u64(&rng) % 32);
                /* elements 0-15 in the low nibbles, 16-31 in the high; bit e of qh is the
                 * fifth bit of element e */
                if (e < 16)
                    qs[e] |= (uint8_t)(q & 0xF);
                else
                    qs[e - 16] |= (uint8_t)((q & 0xF) << 4);
                qh |= (uint32_t)(q >> 4) << e;
                want[k * 32 + e] = variant ? d * q + m : d * (q - 16);
            }
            memcpy(qhp, &qh, 4);
        }
        ggml_type t = variant ? GGML_TYPE_Q5_1 : GGML_TYPE_Q5_0;
        ASSERT_OK(seer_dequant_k(t, raw, got, 96));
        expect_close(got, want, 96);
    }
}

static void test_errors(void **state) {
    (void)state;
    uint8_t raw[210] = {0};
    float out[256];
    assert_true(seer_dequant_k_supported(GGML_TYPE_Q4_K));
    assert_true(seer_dequant_k_supported(GGML_TYPE_Q5_0));
    assert_false(seer_dequant_k_supported(GGML_TYPE_Q3_K));
    assert_false(seer_dequant_k_supported(GGML_TYPE_Q8_0));
    assert_int_equal(seer_dequant_k(GGML_TYPE_Q4_K, raw, out, 128), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "block size 256"));
    assert_int_equal(seer_dequant_k(GGML_TYPE_Q5_1, raw, out, 33), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_dequant_k(GGML_TYPE_Q2_K, raw, out, 256), SEER_ERR_UNSUPPORTED);
    assert_non_null(strstr(seer_last_error(), "q2_K"));
    assert_int_equal(seer_dequant_k(GGML_TYPE_Q6_K, NULL, out, 256), SEER_ERR_INVALID_ARG);
    ASSERT_OK(seer_dequant_k(GGML_TYPE_Q6_K, NULL, NULL, 0));
    /* an all-zero block is all zeros */
    ASSERT_OK(seer_dequant_k(GGML_TYPE_Q6_K, raw, out, 256));
    for (int i = 0; i < 256; i++)
        assert_true(out[i] == 0.f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_k),      cmocka_unit_test(test_q5_k),
        cmocka_unit_test(test_q6_k),      cmocka_unit_test(test_q5_0_q5_1),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
