/*
 * test_tuning.c: the CUDA backend's variants as the library takes them (seer_cuda_tuning,
 * seer_bench.h) and as lab/cuda_env.h reads them from the SEER_CUDA_* variables: defaults,
 * each setting's forms, refusals, and the tuned loads. Runs on the CPU: applying the variants
 * on a device is test_backend_ops_mma's and test_gpu_spec's; that the library itself reads no
 * environment is scripts/check-symbols.sh's check.
 */
#include "testutil.h"

#include "cuda_env.h"

#include <stdlib.h>
#include <string.h>

static void test_defaults_and_setter(void **state) {
    seer_cuda_tuning t = seer_cuda_default_tuning();
    assert_true(t.graphs && t.pdl && t.qt && t.qt_norm && !t.matmul_cublas);
    assert_int_equal(t.mm_xb_min, 40);
    assert_int_equal(t.mm_tile, 0);
    assert_int_equal(t.qt_gemv_max, 1);
    assert_null(t.profile);
    assert_null(t.attn);
    ASSERT_OK(seer_cuda_tuning_set(&t, "graphs", "0"));
    ASSERT_OK(seer_cuda_tuning_set(&t, "pdl", "0"));
    ASSERT_OK(seer_cuda_tuning_set(&t, "qt", "0"));
    ASSERT_OK(seer_cuda_tuning_set(&t, "qt_norm", "0"));
    assert_false(t.graphs || t.pdl || t.qt || t.qt_norm);
    ASSERT_OK(seer_cuda_tuning_set(&t, "graphs", "1"));
    assert_true(t.graphs);
    ASSERT_OK(seer_cuda_tuning_set(&t, "matmul", "cublas"));
    assert_true(t.matmul_cublas);
    ASSERT_OK(seer_cuda_tuning_set(&t, "matmul", "ours"));
    assert_false(t.matmul_cublas);
    ASSERT_OK(seer_cuda_tuning_set(&t, "mm_tile", "20")); /* down to a multiple of 8 */
    assert_int_equal(t.mm_tile, 16);
    ASSERT_OK(seer_cuda_tuning_set(&t, "mm_tile", "100")); /* outside [8, 64]: 32 */
    assert_int_equal(t.mm_tile, 32);
    ASSERT_OK(seer_cuda_tuning_set(&t, "mm_xb_min", "0")); /* not positive: the default */
    assert_int_equal(t.mm_xb_min, 40);
    ASSERT_OK(seer_cuda_tuning_set(&t, "mm_xb_min", "64"));
    assert_int_equal(t.mm_xb_min, 64);
    ASSERT_OK(seer_cuda_tuning_set(&t, "qt_gemv_max", "8"));
    assert_int_equal(t.qt_gemv_max, 8);
    ASSERT_OK(seer_cuda_tuning_set(&t, "attn", "mma"));
    assert_string_equal(t.attn, "mma");
    ASSERT_OK(seer_cuda_tuning_set(&t, "profile", "/tmp/p.txt"));
    assert_string_equal(t.profile, "/tmp/p.txt");
    const seer_cuda_tuning before = t;
    assert_int_equal(seer_cuda_tuning_set(&t, "SEER_CUDA_QT", "0"), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "SEER_CUDA_QT"));
    assert_int_equal(seer_cuda_tuning_set(NULL, "qt", "0"), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_cuda_tuning_set(&t, "qt", NULL), SEER_ERR_INVALID_ARG);
    assert_memory_equal(&t, &before, sizeof t);
}

static void test_env_reader(void **state) {
    setenv("SEER_CUDA_GRAPHS", "0", 1);
    setenv("SEER_CUDA_ATTN", "scalar", 1);
    setenv("SEER_CUDA_MM_TILE", "16", 1);
    setenv("SEER_CUDA_PROFILE", "prof.txt", 1);
    seer_cuda_tuning t = lab_cuda_tuning_from_env();
    assert_false(t.graphs);
    assert_string_equal(t.attn, "scalar");
    assert_int_equal(t.mm_tile, 16);
    assert_string_equal(t.profile, "prof.txt");
    assert_true(t.pdl && t.qt); /* unset variables: the defaults */
    unsetenv("SEER_CUDA_GRAPHS");
    unsetenv("SEER_CUDA_ATTN");
    unsetenv("SEER_CUDA_MM_TILE");
    unsetenv("SEER_CUDA_PROFILE");
    t = lab_cuda_tuning_from_env();
    const seer_cuda_tuning d = seer_cuda_default_tuning();
    assert_memory_equal(&t, &d, sizeof t);
}

/* The tuned loads take a tuning (the CPU backend ignores it) and NULL, for the defaults. */
static void test_tuned_loads(void **state) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    seer_cuda_tuning t = seer_cuda_default_tuning();
    t.graphs = false;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_load_tuned(tu_data_path("models/stories260K.gguf"), mp, &t, &m));
    seer_model_free(m);
    m = NULL;
    ASSERT_OK(seer_model_synthetic_tuned("tiny", NULL, mp, NULL, &m));
    seer_model_free(m);
    m = NULL;
    assert_int_equal(seer_model_load_tuned("/nonexistent.gguf", mp, &t, &m), SEER_ERR_IO);
    assert_null(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_setter),
        cmocka_unit_test(test_env_reader),
        cmocka_unit_test(test_tuned_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
