/*
 * test_backend_ops_sparse.c: the ops of contextual sparsity (ffn_act_stats, weight_gather) on
 * the CUDA backend against the CPU reference. ffn_act_stats: T of 1, 7, 65 and 600 rows, F of
 * 96 to 14336, a zero row, added to a statistic already there, the scratch poisoned with NaN;
 * tolerance 1e-5 (sums in another order). weight_gather: rows and columns of bf16 weights,
 * repeated and unordered indices, compared bit for bit (a gather rounds nothing); an index
 * outside refused. Runs only where a device is present.
 */
#include "ops_harness.h"

#ifdef SEER_HAVE_CUDA

static void test_ffn_act_stats(void **state) {
    (void)state;
    static const struct {
        int T, F;
    } cases[] = {{1, 96}, {7, 1000}, {65, 14336}, {600, 4864}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 9100 + k;
        const int T = cases[k].T, F = cases[k].F;
        float *g = rand_array((size_t)T * F, 2.f, &rng), *st = rand_array(F, 1.f, &rng);
        for (int j = 0; j < F; j++)
            st[j] = fabsf(st[j]);
        if (T > 1)
            memset(g + (size_t)F, 0, F * sizeof(float)); /* a zero row adds nothing */
        float *ref = malloc(F * sizeof(float)), tmp_h[600];
        memcpy(ref, st, F * sizeof(float));
        ASSERT_OK(cpu->ops->ffn_act_stats(cpu, ref, g, T, F, tmp_h));
        float *dg = dev_copy(g, (size_t)T * F), *ds = dev_copy(st, F), *dt = dev_nan(T);
        ASSERT_OK(gpu->ops->ffn_act_stats(gpu, ds, dg, T, F, dt));
        float *out = dev_fetch(ds, F);
        char shape[64];
        snprintf(shape, sizeof shape, "T=%d F=%d", T, F);
        record("ffn_act_stats", shape, out, ref, F, 1e-5);
        dev_free(dg), dev_free(ds), dev_free(dt);
        free(g), free(st), free(ref), free(out);
    }
    assert_op_passed("ffn_act_stats");
}

static void test_weight_gather(void **state) {
    (void)state;
    static const struct {
        int rows, cols, n, by_cols;
    } cases[] = {{64, 96, 5, 0}, {1000, 256, 500, 0}, {896, 4864, 2432, 1}, {100, 33, 1, 1}, {4864, 896, 4864, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 9200 + k;
        const int R = cases[k].rows, C = cases[k].cols, n = cases[k].n, bc = cases[k].by_cols;
        host_tensor ht;
        make_tensor(&ht, "w", GGML_TYPE_BF16, R, C, &rng);
        seer_weight wc, wg, oc, og;
        ASSERT_OK(cpu->ops->weight_load(cpu, &ht.t, SEER_WEIGHTS_F32, &wc));
        ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wg));
        const int lim = bc ? C : R;
        int32_t *idx = malloc(n * sizeof *idx);
        for (int i = 0; i < n; i++) /* the last twice, the rest in no order */
            idx[i] = i == n - 1 && n > 1 ? idx[0] : (int32_t)(tu_rand_u64(&rng) % (uint64_t)lim);
        ASSERT_OK(cpu->ops->weight_gather(cpu, &wc, idx, n, bc, &oc));
        ASSERT_OK(gpu->ops->weight_gather(gpu, &wg, idx, n, bc, &og));
        assert_int_equal(og.rows, oc.rows);
        assert_int_equal(og.cols, oc.cols);
        assert_int_equal(og.dtype, GGML_TYPE_BF16);
        const size_t N = (size_t)oc.rows * oc.cols;
        uint16_t *hb = malloc(N * sizeof *hb);
        ASSERT_OK(gpu->ops->download(gpu, hb, og.data, N * sizeof *hb));
        float *out = malloc(N * sizeof(float));
        for (size_t i = 0; i < N; i++)
            out[i] = seer_bf16_to_f32(hb[i]);
        char shape[96];
        snprintf(shape, sizeof shape, "[%d][%d] %s n=%d", R, C, bc ? "cols" : "rows", n);
        record("weight_gather", shape, out, (const float *)oc.data, N, 0);
        /* outside the weight: refused, out untouched */
        seer_weight keep = {.rows = 7};
        idx[0] = lim;
        assert_int_equal(gpu->ops->weight_gather(gpu, &wg, idx, n, bc, &keep), SEER_ERR_INVALID_ARG);
        assert_int_equal(keep.rows, 7);
        assert_null(keep.data);
        cpu->ops->weight_free(cpu, &oc), gpu->ops->weight_free(gpu, &og);
        cpu->ops->weight_free(cpu, &wc), gpu->ops->weight_free(gpu, &wg);
        free(idx), free(hb), free(out), free(ht.data);
    }
    assert_op_passed("weight_gather");
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_ffn_act_stats), cmocka_unit_test(test_weight_gather)};
    return ops_run(tests, sizeof tests / sizeof *tests);
#else
    return ops_run(NULL, 0);
#endif
}
