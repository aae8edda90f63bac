/* test_quant.c: ggml block formats and f16/bf16 conversion, against hand-written bytes. */
#include "testutil.h"

#include "gguf/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_type_table(void **state) {
    (void)state;
    static const struct {
        ggml_type t;
        const char *name;
        int blk, bytes;
        bool sup;
    } want[] = {
        {GGML_TYPE_F32, "f32", 1, 4, true},      {GGML_TYPE_F16, "f16", 1, 2, true},
        {GGML_TYPE_BF16, "bf16", 1, 2, true},    {GGML_TYPE_Q8_0, "q8_0", 32, 34, true},
        {GGML_TYPE_Q4_0, "q4_0", 32, 18, true},  {GGML_TYPE_Q4_1, "q4_1", 32, 20, true},
        {GGML_TYPE_Q5_0, "q5_0", 32, 22, true}, {GGML_TYPE_Q5_1, "q5_1", 32, 24, true},
        {GGML_TYPE_Q8_1, "q8_1", 32, 36, false}, {GGML_TYPE_Q2_K, "q2_K", 256, 84, false},
        {GGML_TYPE_Q3_K, "q3_K", 256, 110, false}, {GGML_TYPE_Q4_K, "q4_K", 256, 144, true},
        {GGML_TYPE_Q5_K, "q5_K", 256, 176, true}, {GGML_TYPE_Q6_K, "q6_K", 256, 210, true},
        {GGML_TYPE_Q8_K, "q8_K", 256, 292, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_string_equal(seer_ggml_type_name(want[i].t), want[i].name);
        assert_int_equal(seer_ggml_type_block_elems(want[i].t), want[i].blk);
        assert_int_equal(seer_ggml_type_block_bytes(want[i].t), want[i].bytes);
        assert_int_equal(seer_ggml_type_supported(want[i].t), want[i].sup);
    }
    /* 4 and 5 were removed from ggml; 16+ are formats we do not know the size of */
    ggml_type unknown[] = {(ggml_type)4, (ggml_type)5, (ggml_type)16, (ggml_type)39,
                           (ggml_type)40, (ggml_type)-1};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_int_equal(seer_ggml_type_block_elems(unknown[i]), 0);
        assert_int_equal(seer_ggml_type_block_bytes(unknown[i]), 0);
        assert_false(seer_ggml_type_supported(unknown[i]));
    }
    assert_string_equal(seer_ggml_type_name((ggml_type)16), "type16");

    size_t nb = 0;
    ASSERT_OK(seer_ggml_nbytes(GGML_TYPE_Q4_K, 512, &nb));
    assert_int_equal(nb, 288);
    ASSERT_OK(seer_ggml_nbytes(GGML_TYPE_F16, 3, &nb));
    assert_int_equal(nb, 6);
    nb = 77;
    assert_int_equal(seer_ggml_nbytes(GGML_TYPE_Q8_0, 33, &nb), SEER_ERR_INVALID_ARG);
    assert_int_equal(nb, 77);
    assert_int_equal(seer_ggml_nbytes((ggml_type)20, 32, &nb), SEER_ERR_UNSUPPORTED);
    assert_int_equal(seer_ggml_nbytes(GGML_TYPE_Q8_K, UINT64_MAX / 256 * 256, &nb),
                     SEER_ERR_INVALID_ARG); /* 2^56 blocks of 292 bytes */
}

static void test_f16_to_f32(void **state) {
    (void)state;
    assert_true(seer_f16_to_f32(0x3c00) == 1.0f);
    assert_true(seer_f16_to_f32(0xc000) == -2.0f);
    assert_true(seer_f16_to_f32(0x3555) == 0x1.554p-2f); /* 0.333251953125 */
    assert_true(seer_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(seer_f16_to_f32(0x0400) == 0x1p-14f);     /* smallest normal */
    assert_true(seer_f16_to_f32(0x0001) == 0x1p-24f);     /* smallest subnormal */
    assert_true(seer_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    assert_true(seer_f16_to_f32(0x8001) == -0x1p-24f);
    assert_int_equal(bits(seer_f16_to_f32(0x8000)), 0x80000000u); /* -0 keeps its sign */
    assert_int_equal(bits(seer_f16_to_f32(0x0000)), 0);
    assert_true(isinf(seer_f16_to_f32(0x7c00)) && seer_f16_to_f32(0x7c00) > 0);
    assert_true(isinf(seer_f16_to_f32(0xfc00)) && seer_f16_to_f32(0xfc00) < 0);
    assert_true(isnan(seer_f16_to_f32(0x7e00)));
    assert_true(isnan(seer_f16_to_f32(0x7c01))); /* signalling pattern is still NaN */
}

static void test_f32_to_f16(void **state) {
    (void)state;
    assert_int_equal(seer_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(seer_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(seer_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(seer_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(seer_f32_to_f16(65504.0f), 0x7bff);
    /* 65520 lies halfway between 65504 (odd) and 65536 (even, not representable): inf */
    assert_int_equal(seer_f32_to_f16(65519.996f), 0x7bff);
    assert_int_equal(seer_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(seer_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(seer_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(seer_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(seer_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t n = seer_f32_to_f16(NAN);
    assert_int_equal(n & 0x7c00, 0x7c00);
    assert_true((n & 0x3ff) != 0);
    /* a NaN whose payload lives only in the low bits must not become inf */
    assert_true(isnan(seer_f16_to_f32(seer_f32_to_f16(from_bits(0x7f800001u)))));
    /* ties to even among normals: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
    assert_int_equal(seer_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(seer_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(seer_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    /* subnormals: units of 2^-24, ties to even */
    assert_int_equal(seer_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(seer_f32_to_f16(0x1p-25f), 0x0000);            /* tie -> 0 */
    assert_int_equal(seer_f32_to_f16(0x1.000002p-25f), 0x0001);     /* just above the tie */
    assert_int_equal(seer_f32_to_f16(0x1.8p-24f), 0x0002);          /* 1.5 -> 2 */
    assert_int_equal(seer_f32_to_f16(0x1.4p-23f), 0x0002);          /* 2.5 -> 2 */
    assert_int_equal(seer_f32_to_f16(-0x1.8p-24f), 0x8002);
    assert_int_equal(seer_f32_to_f16(1023 * 0x1p-24f), 0x03ff);
    /* the largest subnormal plus half a unit rounds up into the smallest normal */
    assert_int_equal(seer_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);
    assert_int_equal(seer_f32_to_f16(0x1p-14f), 0x0400);
    assert_int_equal(seer_f32_to_f16(1e-30f), 0x0000);
    /* every f16 value survives a round trip through f32 */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaN payloads are not all preserved */
        assert_int_equal(seer_f32_to_f16(seer_f16_to_f32((uint16_t)h)), h);
    }
}

static void test_bf16(void **state) {
    (void)state;
    assert_true(seer_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(seer_bf16_to_f32(0x4049) == 3.140625f);
    assert_true(seer_bf16_to_f32(0xc000) == -2.0f);
    assert_true(isinf(seer_bf16_to_f32(0x7f80)));
    assert_true(isnan(seer_bf16_to_f32(0x7fc0)));
    assert_true(seer_bf16_to_f32(0x0001) == from_bits(0x00010000u)); /* subnormal */
    assert_int_equal(seer_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(seer_f32_to_bf16(3.14159265f), 0x4049);
    assert_int_equal(seer_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie -> even */
    assert_int_equal(seer_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even */
    assert_int_equal(seer_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(seer_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(seer_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(seer_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(seer_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds up */
    assert_int_equal(seer_f32_to_bf16(from_bits(0x00008000u)), 0x0000); /* subnormal tie */
    assert_int_equal(seer_f32_to_bf16(from_bits(0x00018000u)), 0x0002);
    /* NaN with payload only in the dropped bits must stay NaN */
    assert_true(isnan(seer_bf16_to_f32(seer_f32_to_bf16(from_bits(0x7f800001u)))));
    assert_true(isnan(seer_bf16_to_f32(seer_f32_to_bf16(from_bits(0xffffffffu)))));
}

static void test_dequant_f32_f16_bf16(void **state) {
    (void)state;
    float y[4];
    const float xf[4] = {1.5f, -0.0f, 1e-40f, -3e38f};
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_F32, xf, y, 4));
    assert_memory_equal(y, xf, sizeof xf);

    uint8_t h[8];
    put16(h, 0x3c00);
    put16(h + 2, 0xb800);
    put16(h + 4, 0x0001);
    put16(h + 6, 0xfc00);
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_F16, h, y, 4));
    assert_true(y[0] == 1.0f && y[1] == -0.5f && y[2] == 0x1p-24f && isinf(y[3]) && y[3] < 0);

    put16(h, 0x3f80);
    put16(h + 2, 0xbf00);
    put16(h + 4, 0x4049);
    put16(h + 6, 0x7f80);
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_BF16, h, y, 4));
    assert_true(y[0] == 1.0f && y[1] == -0.5f && y[2] == 3.140625f && isinf(y[3]));

    /* sources inside a file need not be aligned */
    uint8_t un[9] = {0xff};
    memcpy(un + 1, xf, 8);
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_F32, un + 1, y, 2));
    assert_true(y[0] == 1.5f);
}

static void test_dequant_q8_0(void **state) {
    (void)state;
    uint8_t b[2 * 34];
    put16(b, 0x3800); /* d = 0.5 */
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)(j - 16);
    b[2 + 0] = (uint8_t)(int8_t)-128;
    b[2 + 31] = 127;
    put16(b + 34, 0xc400); /* d = -4 */
    for (int j = 0; j < 32; j++)
        b[36 + j] = (uint8_t)(int8_t)(j % 2 ? 1 : -1);
    float y[64];
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_Q8_0, b, y, 64));
    assert_true(y[0] == -64.0f);
    assert_true(y[1] == -7.5f);
    assert_true(y[16] == 0.0f);
    assert_true(y[17] == 0.5f);
    assert_true(y[31] == 63.5f);
    assert_true(y[32] == 4.0f);
    assert_true(y[33] == -4.0f);
    assert_true(y[63] == -4.0f);
}

static void test_dequant_q4_0(void **state) {
    (void)state;
    uint8_t b[18];
    put16(b, 0x4000); /* d = 2 */
    /* low nibble of byte j is element j, high nibble is element j + 16 */
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_Q4_0, b, y, 32));
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)((j - 8) * 2));
        assert_true(y[j + 16] == (float)((7 - j) * 2));
    }
    assert_true(y[0] == -16.0f && y[15] == 14.0f && y[16] == 14.0f && y[31] == -16.0f);
}

static void test_dequant_q4_1(void **state) {
    (void)state;
    uint8_t b[20];
    put16(b, 0x3400);     /* d = 0.25 */
    put16(b + 2, 0xbc00); /* m = -1 */
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_Q4_1, b, y, 32));
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == j * 0.25f - 1.0f);
        assert_true(y[j + 16] == (15 - j) * 0.25f - 1.0f);
    }
    assert_true(y[0] == -1.0f && y[15] == 2.75f);
}

static void test_quant_hand_blocks(void **state) {
    (void)state;
    /* q4_0 keeps the sign of the largest magnitude: +4 maps to code 0 with d = -0.5 */
    float x[32], y[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)((j % 9) - 4) * 0.5f; /* -2 .. 2 */
    x[5] = 4.0f;
    uint8_t b[20];
    ASSERT_OK(seer_gguf_quant(GGML_TYPE_Q4_0, x, b, 32));
    assert_int_equal(b[0] | (b[1] << 8), 0xb800); /* d = -0.5 */
    assert_int_equal(b[2 + 5] & 0x0f, 0);         /* x[5] = (0 - 8) * -0.5 */
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_Q4_0, b, y, 32));
    for (int j = 0; j < 32; j++) /* all values are multiples of d: exact */
        assert_true(x[j] == y[j]);
}

static void test_quant_q8_0_bytes(void **state) {
    (void)state;
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16); /* amax 16: d = 16/127, codes round(x * 127/16) */
    uint8_t b[34];
    ASSERT_OK(seer_gguf_quant(GGML_TYPE_Q8_0, x, b, 32));
    assert_int_equal(b[0] | (b[1] << 8), seer_f32_to_f16(16.0f / 127.0f));
    assert_int_equal((int8_t)b[2 + 0], -127); /* -16 */
    assert_int_equal((int8_t)b[2 + 16], 0);
    assert_int_equal((int8_t)b[2 + 17], 8);   /* 7.9375 -> 8 */
    assert_int_equal((int8_t)b[2 + 18], 16);  /* 15.875 -> 16 */
    assert_int_equal((int8_t)b[2 + 20], 32);  /* 31.75 -> 32 */
    assert_int_equal((int8_t)b[2 + 31], 119); /* 15 * 7.9375 = 119.06 */

    /* q4_1: min -1, max 2 -> d = 0.2, codes round((x + 1) / 0.2) */
    for (int j = 0; j < 32; j++)
        x[j] = -1.0f + 0.2f * (float)(j % 16);
    uint8_t c[20];
    ASSERT_OK(seer_gguf_quant(GGML_TYPE_Q4_1, x, c, 32));
    assert_int_equal(c[0] | (c[1] << 8), seer_f32_to_f16(0.2f));
    assert_int_equal(c[2] | (c[3] << 8), 0xbc00);
    for (int j = 0; j < 16; j++) {
        assert_int_equal(c[4 + j] & 0x0f, j);
        assert_int_equal(c[4 + j] >> 4, j);
    }

    /* all-zero blocks get d = 0 and dequantise to zeros */
    float z[32] = {0}, y[32];
    ASSERT_OK(seer_gguf_quant(GGML_TYPE_Q4_0, z, b, 32));
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_Q4_0, b, y, 32));
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == 0.0f);
}

/* Bound on the error of storing v as f16 (relative for normals, absolute for subnormals). */
static double e16(double v) { return fabs(v) * 0x1p-11 + 0x1p-25; }

/* Worst-case absolute error of each block, as the format allows: half a step (a whole one
 * where q4_0 saturates), plus the f16 rounding of the scale times the largest code. */
static void check_roundtrip(ggml_type t, size_t n, uint64_t seed) {
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    uint8_t *q = malloc(n * 4);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(q);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) /* per-block magnitudes from 1e-3 to 1e3 */
        x[i] = tu_rand_uniform(&s) * powf(10.f, (float)((i / 32) % 7) - 3.f);
    ASSERT_OK(seer_gguf_quant(t, x, q, n));
    ASSERT_OK(seer_gguf_dequant(t, q, y, n));
    for (size_t b0 = 0; b0 < n; b0 += 32) {
        float amax = 0, mn = x[b0], mx = x[b0];
        for (size_t i = b0; i < b0 + 32; i++) {
            amax = fmaxf(amax, fabsf(x[i]));
            mn = fminf(mn, x[i]);
            mx = fmaxf(mx, x[i]);
        }
        for (size_t i = b0; i < b0 + 32; i++) {
            double err = fabs((double)x[i] - y[i]), bound;
            switch (t) {
            case GGML_TYPE_F16: bound = fabs(x[i]) * 0x1p-11 + 0x1p-25; break;
            case GGML_TYPE_BF16: bound = fabs(x[i]) * 0x1p-8; break;
            case GGML_TYPE_Q8_0: bound = (amax / 127. * 0.5 + 127 * e16(amax / 127.)); break;
            case GGML_TYPE_Q4_0: bound = (amax / 8. + 8 * e16(amax / 8.)); break;
            case GGML_TYPE_Q4_1:
                bound = (mx - mn) / 30. + 15 * e16((mx - mn) / 15.) + e16(mn);
                break;
            default: bound = 0; break;
            }
            if (err > bound * 1.0001)
                fail_msg("%s element %zu: %g -> %g, error %g > bound %g", seer_ggml_type_name(t), i,
                         (double)x[i], (double)y[i], err, bound);
        }
    }
    free(x);
    free(y);
    free(q);
}

static void test_roundtrip_bounds(void **state) {
    (void)state;
    ggml_type ts[] = {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
                      GGML_TYPE_Q4_1};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
        check_roundtrip(ts[k], 32 * 700, 1234 + k);
    float x[64], y[64];
    uint64_t s = 7;
    tu_fill_random(x, 64, &s);
    ASSERT_OK(seer_gguf_quant(GGML_TYPE_F32, x, y, 64));
    assert_memory_equal(x, y, sizeof x);
}

static void test_quant_errors(void **state) {
    (void)state;
    float x[64] = {0};
    uint8_t q[256];
    float y[64];
    assert_int_equal(seer_gguf_quant(GGML_TYPE_Q8_0, x, q, 31), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "block size"));
    assert_int_equal(seer_gguf_dequant(GGML_TYPE_Q4_1, q, y, 48), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_gguf_quant(GGML_TYPE_Q3_K, x, q, 256), SEER_ERR_UNSUPPORTED);
    assert_int_equal(seer_gguf_dequant(GGML_TYPE_Q3_K, q, y, 0), SEER_ERR_UNSUPPORTED);
    assert_non_null(strstr(seer_last_error(), "q3_K"));
    assert_int_equal(seer_gguf_dequant((ggml_type)77, q, y, 1), SEER_ERR_UNSUPPORTED);
    assert_non_null(strstr(seer_last_error(), "77"));
    x[3] = NAN;
    assert_int_equal(seer_gguf_quant(GGML_TYPE_Q4_0, x, q, 32), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "index 3"));
    x[3] = INFINITY;
    assert_int_equal(seer_gguf_quant(GGML_TYPE_Q8_0, x, q, 32), SEER_ERR_INVALID_ARG);
    /* the float formats carry non-finite values */
    ASSERT_OK(seer_gguf_quant(GGML_TYPE_F16, x, q, 32));
    ASSERT_OK(seer_gguf_quant(GGML_TYPE_BF16, x, q, 32));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_f16_to_f32),
        cmocka_unit_test(test_f32_to_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_dequant_f32_f16_bf16),
        cmocka_unit_test(test_dequant_q8_0),
        cmocka_unit_test(test_dequant_q4_0),
        cmocka_unit_test(test_dequant_q4_1),
        cmocka_unit_test(test_quant_hand_blocks),
        cmocka_unit_test(test_quant_q8_0_bytes),
        cmocka_unit_test(test_roundtrip_bounds),
        cmocka_unit_test(test_quant_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
