/*
 * test_quant_kwrite.c: the quantisers of src/gguf/quant_k_write.c (Q4_K, Q5_K, Q6_K, Q5_0,
 * Q5_1) byte for byte against ggml's reference output, plus round trips and bad input.
 *
 * Reference vectors (tests/fixtures/quant_k/<type>.bin): the bytes ggml_quantize_chunk
 * (no importance matrix, so quantize_row_<type>_ref) wrote for the 32768 floats that
 * make_inputs() below gives (128 rows of 256), using ggml 0.25.3 (llama.cpp commit 0c1e570,
 * as vendored in llama-cpp-python 0.3.36 from PyPI), libggml-base built with gcc 14,
 * -O3 -ffp-contract=off, GGML_NATIVE=OFF, on x86-64; the program was make_inputs() and one
 * ggml_quantize_chunk call per type. The Q5_0 and Q5_1 files are also identical to the
 * numpy quantisers of the `gguf` PyPI package 0.19.0 (gguf.quants.quantize). The rows
 * cover four scales (1e-3 to 37.5, so f16 scales from subnormal to large), uniform and
 * bell-shaped values, all-positive and all-negative rows (the min-above-zero paths),
 * sparse rows with 50x outliers, all-zero rows and half-zero rows, constant runs
 * (max == min) and 1e-20 values (below ggml's all-zero threshold).
 */
#include "testutil.h"

#include "gguf/gguf.h"
#include "gguf/quant_k.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN_ROWS 128
#define IN_COLS 256

/* splitmix64 and exact integer-to-float steps, so the inputs are the same floats on any
 * platform (the reference program used this generator verbatim). */
static uint64_t in_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float in_unif(uint64_t *s) { /* [-1, 1), 24 bits */
    return (float)((int32_t)(in_next(s) >> 40) - (1 << 23)) * 0x1p-23f;
}

static void make_inputs(float *x) {
    static const float scales[4] = {1e-3f, 0.02f, 1.f, 37.5f};
    uint64_t s = 20261123;
    for (int r = 0; r < IN_ROWS; r++) {
        float sc = scales[(r / 8) % 4];
        float *y = x + r * IN_COLS;
        for (int i = 0; i < IN_COLS; i++) {
            float u = in_unif(&s), v;
            switch (r % 8) {
            case 0: v = u * sc; break;
            case 1: v = (u + in_unif(&s) + in_unif(&s) + in_unif(&s)) * 0.5f * sc; break;
            case 2: v = (u * u + 0.5f) * sc; break;
            case 3: v = -(u * u + 0.25f) * sc; break;
            case 4: v = i % 37 == 5 ? u * sc * 50.f : (i % 5 == 0 ? 0.f : u * sc * 0.01f); break;
            case 5: v = (r % 16 == 5 || i < 128) ? 0.f : u * sc; break;
            case 6: v = i < 64 ? 0.37f * sc : (i < 96 ? -sc : u * sc); break;
            default: v = i % 2 ? u * 1e-20f : u * sc * (i % 64 < 16 ? 1e-6f : 1.f); break;
            }
            y[i] = v;
        }
    }
}

typedef struct {
    ggml_type t;
    const char *file;
    double rms_tol; /* rms(dequant(quant(x)) - x) / rms(x) on bell-shaped rows */
} kcase;

/* Measured on the bell-shaped data of test_round_trip at all three scales: Q4_K 0.069,
 * Q5_K 0.035, Q6_K 0.017, Q5_0 0.041, Q5_1 0.037 (Q4_0 gives 0.082, Q8_0 0.005). The
 * tolerances leave ~30% headroom: a broken search or packing gives far more. */
static const kcase k_cases[] = {
    {GGML_TYPE_Q4_K, "q4_K.bin", 0.09}, {GGML_TYPE_Q5_K, "q5_K.bin", 0.045},
    {GGML_TYPE_Q6_K, "q6_K.bin", 0.022}, {GGML_TYPE_Q5_0, "q5_0.bin", 0.053},
    {GGML_TYPE_Q5_1, "q5_1.bin", 0.048},
};

static void test_reference_bytes(void **state) {
    (void)state;
    float *x = malloc(sizeof(float) * IN_ROWS * IN_COLS);
    assert_non_null(x);
    make_inputs(x);
    for (size_t k = 0; k < sizeof k_cases / sizeof *k_cases; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/fixtures/quant_k/%s", SEER_SOURCE_DIR,
                 k_cases[k].file);
        size_t size = 0;
        uint8_t *want = tu_read_file(path, &size);
        if (!want)
            fail_msg("cannot read %s", path);
        size_t nbytes = 0;
        ASSERT_OK(seer_ggml_nbytes(k_cases[k].t, IN_ROWS * IN_COLS, &nbytes));
        assert_int_equal(size, nbytes);
        uint8_t *got = malloc(nbytes);
        assert_non_null(got);
        ASSERT_OK(seer_gguf_quant(k_cases[k].t, x, got, IN_ROWS * IN_COLS));
        int bb = seer_ggml_type_block_bytes(k_cases[k].t);
        for (size_t i = 0; i < nbytes; i++)
            if (got[i] != want[i])
                fail_msg("%s: byte %zu (block %zu, offset %zu) is %u, ggml wrote %u",
                         seer_ggml_type_name(k_cases[k].t), i, i / (size_t)bb, i % (size_t)bb,
                         got[i], want[i]);
        free(got);
        free(want);
    }
    free(x);
}

/* Quantising one block at a time gives the bytes of the whole-array call (the threads
 * split blocks, nothing crosses them). */
static void test_blockwise(void **state) {
    (void)state;
    float *x = malloc(sizeof(float) * IN_ROWS * IN_COLS);
    uint8_t *all = malloc(IN_ROWS * IN_COLS), *one = malloc(IN_ROWS * IN_COLS);
    assert_true(x && all && one);
    make_inputs(x);
    for (size_t k = 0; k < sizeof k_cases / sizeof *k_cases; k++) {
        ggml_type t = k_cases[k].t;
        int be = seer_ggml_type_block_elems(t), bb = seer_ggml_type_block_bytes(t);
        int nb = IN_ROWS * IN_COLS / be;
        ASSERT_OK(seer_gguf_quant(t, x, all, (uint64_t)IN_ROWS * IN_COLS));
        for (int b = 0; b < nb; b++)
            ASSERT_OK(seer_quant_k(t, x + (size_t)b * be, one + (size_t)b * bb, (uint64_t)be));
        assert_memory_equal(all, one, (size_t)nb * bb);
    }
    free(x);
    free(all);
    free(one);
}

static void test_round_trip(void **state) {
    (void)state;
    enum { N = 1 << 16 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    uint8_t *q = malloc(N * 4);
    assert_true(x && y && q);
    for (size_t k = 0; k < sizeof k_cases / sizeof *k_cases; k++) {
        ggml_type t = k_cases[k].t;
        static const float scales[3] = {1e-2f, 1.f, 300.f};
        for (int si = 0; si < 3; si++) {
            uint64_t s = 7 + (uint64_t)si;
            for (int i = 0; i < N; i++)
                x[i] = (in_unif(&s) + in_unif(&s) + in_unif(&s) + in_unif(&s)) * scales[si];
            ASSERT_OK(seer_gguf_quant(t, x, q, N));
            ASSERT_OK(seer_gguf_dequant(t, q, y, N));
            double se = 0, sx = 0;
            for (int i = 0; i < N; i++) {
                se += (double)(y[i] - x[i]) * (y[i] - x[i]);
                sx += (double)x[i] * x[i];
            }
            double rel = sqrt(se / sx);
            if (!(rel < k_cases[k].rms_tol))
                fail_msg("%s at scale %g: relative rms error %.4f, tolerance %.3f",
                         seer_ggml_type_name(t), (double)scales[si], rel, k_cases[k].rms_tol);
        }
        /* zeros stay zero exactly */
        memset(x, 0, sizeof(float) * 1024);
        ASSERT_OK(seer_gguf_quant(t, x, q, 1024));
        ASSERT_OK(seer_gguf_dequant(t, q, y, 1024));
        for (int i = 0; i < 1024; i++)
            assert_true(y[i] == 0.f);
    }
    free(x);
    free(y);
    free(q);
}

static void test_bad_input(void **state) {
    (void)state;
    float x[256] = {0};
    uint8_t q[256];
    for (size_t k = 0; k < sizeof k_cases / sizeof *k_cases; k++) {
        ggml_type t = k_cases[k].t;
        int be = seer_ggml_type_block_elems(t);
        assert_int_equal(seer_gguf_quant(t, x, q, (uint64_t)be + 1), SEER_ERR_INVALID_ARG);
        x[be - 1] = NAN;
        assert_int_equal(seer_gguf_quant(t, x, q, (uint64_t)be), SEER_ERR_INVALID_ARG);
        x[be - 1] = INFINITY;
        assert_int_equal(seer_gguf_quant(t, x, q, (uint64_t)be), SEER_ERR_INVALID_ARG);
        x[be - 1] = 0;
        assert_int_equal(seer_quant_k(t, NULL, q, (uint64_t)be), SEER_ERR_INVALID_ARG);
        ASSERT_OK(seer_quant_k(t, NULL, NULL, 0));
    }
    assert_false(seer_quant_k_supported(GGML_TYPE_Q8_0));
    assert_int_equal(seer_quant_k(GGML_TYPE_Q3_K, x, q, 256), SEER_ERR_UNSUPPORTED);
    assert_int_equal(seer_gguf_quant(GGML_TYPE_Q3_K, x, q, 256), SEER_ERR_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_bytes),
        cmocka_unit_test(test_blockwise),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
