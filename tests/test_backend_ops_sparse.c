/*
 * test_backend_ops_sparse.c: the ops of contextual sparsity (ffn_act_stats, weight_gather, and
 * CATS's ffn_act_hist, weight_transpose, ffn_cats) on the CUDA backend against the CPU
 * reference. ffn_act_stats: T of 1, 7, 65 and 600 rows, F of 96 to 14336, a zero row, added
 * to a statistic already there, the scratch poisoned with NaN; tolerance 1e-5 (sums in another
 * order). weight_gather: rows and columns of bf16 weights, repeated and unordered indices,
 * compared bit for bit (a gather rounds nothing); an index outside refused.
 * weight_transpose: bf16 weights bit for bit. ffn_act_hist: counts added to counts already
 * there, from the pre-activation and from an interleaved gate (the scratch poisoned), within
 * 1e-3 (a silu that rounds across a bin's edge moves an entry). ffn_cats: one row and
 * several, plain and interleaved gate and up, D a multiple of 8 or not (the vector and the
 * scalar kernels), F up to 14336 at one row; a threshold between two of the activations, so
 * that both keep the same neurons; the activation output poisoned with NaN before the op;
 * x and the activation within 1e-4 (sums in another order). Runs only where a device is
 * present.
 */
#include "ops_harness.h"

#include "backend/act_hist.h"

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

static void test_weight_transpose(void **state) {
    (void)state;
    static const struct {
        int rows, cols;
    } cases[] = {{896, 4864}, {100, 33}, {1, 64}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 9300 + k;
        const int R = cases[k].rows, C = cases[k].cols;
        host_tensor ht;
        make_tensor(&ht, "w", GGML_TYPE_BF16, R, C, &rng);
        seer_weight wc, wg, oc, og;
        ASSERT_OK(cpu->ops->weight_load(cpu, &ht.t, SEER_WEIGHTS_F32, &wc));
        ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wg));
        ASSERT_OK(cpu->ops->weight_transpose(cpu, &wc, &oc));
        ASSERT_OK(gpu->ops->weight_transpose(gpu, &wg, &og));
        assert_int_equal(og.rows, C);
        assert_int_equal(og.cols, R);
        assert_int_equal(og.dtype, GGML_TYPE_BF16);
        const size_t N = (size_t)R * C;
        uint16_t *hb = malloc(N * sizeof *hb);
        float *out = malloc(N * sizeof(float));
        ASSERT_OK(gpu->ops->download(gpu, hb, og.data, N * sizeof *hb));
        for (size_t i = 0; i < N; i++)
            out[i] = seer_bf16_to_f32(hb[i]);
        char shape[64];
        snprintf(shape, sizeof shape, "[%d][%d]", R, C);
        record("weight_transpose", shape, out, (const float *)oc.data, N, 0);
        cpu->ops->weight_free(cpu, &oc), gpu->ops->weight_free(gpu, &og);
        cpu->ops->weight_free(cpu, &wc), gpu->ops->weight_free(gpu, &wg);
        free(hb), free(out), free(ht.data);
    }
    assert_op_passed("weight_transpose");
}

/* One layer's FFN on both backends: gate, up [F][D] and down [D][F] (bf16), the CPU's in f32,
 * and on each the interleaved (gate, up) weight when asked (the CPU's built by hand: it has
 * no weight_concat) and down transposed. */
typedef struct {
    seer_weight cg, cu, cd, cgu, cdt; /* CPU */
    seer_weight gg, gu, gd, ggu, gdt; /* CUDA */
    float *cgu_data;
    void *td[3];
} ffn_pair;

static void ffn_pair_make(ffn_pair *p, int F, int D, bool interleave, uint64_t *rng) {
    memset(p, 0, sizeof *p);
    host_tensor ht[3];
    make_tensor(&ht[0], "gate", GGML_TYPE_BF16, F, D, rng);
    make_tensor(&ht[1], "up", GGML_TYPE_BF16, F, D, rng);
    make_tensor(&ht[2], "down", GGML_TYPE_BF16, D, F, rng);
    seer_weight *cw[3] = {&p->cg, &p->cu, &p->cd}, *gw[3] = {&p->gg, &p->gu, &p->gd};
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(cpu->ops->weight_load(cpu, &ht[i].t, SEER_WEIGHTS_F32, cw[i]));
        ASSERT_OK(gpu->ops->weight_load(gpu, &ht[i].t, SEER_WEIGHTS_STORED, gw[i]));
        p->td[i] = ht[i].data;
    }
    ASSERT_OK(cpu->ops->weight_transpose(cpu, &p->cd, &p->cdt));
    ASSERT_OK(gpu->ops->weight_transpose(gpu, &p->gd, &p->gdt));
    if (!interleave)
        return;
    p->cgu_data = malloc(sizeof(float) * 2 * F * D);
    for (int j = 0; j < F; j++) {
        memcpy(p->cgu_data + (size_t)2 * j * D, (float *)p->cg.data + (size_t)j * D, D * sizeof(float));
        memcpy(p->cgu_data + (size_t)(2 * j + 1) * D, (float *)p->cu.data + (size_t)j * D, D * sizeof(float));
    }
    p->cgu = (seer_weight){.data = p->cgu_data, .rows = 2 * F, .cols = D, .dtype = GGML_TYPE_F32, .n_seg = 2,
                           .interleaved = true, .seg_rows = {F, F}};
    seer_weight parts[2] = {p->gg, p->gu};
    ASSERT_OK(gpu->ops->weight_concat(gpu, parts, 2, true, &p->ggu));
    assert_true(p->ggu.interleaved);
    p->gg = parts[0], p->gu = parts[1];
}

static void ffn_pair_free(ffn_pair *p) {
    seer_weight *cw[] = {&p->cg, &p->cu, &p->cd, &p->cdt}, *gw[] = {&p->gg, &p->gu, &p->gd, &p->gdt, &p->ggu};
    for (size_t i = 0; i < sizeof cw / sizeof *cw; i++)
        if (cw[i]->data)
            cpu->ops->weight_free(cpu, cw[i]);
    for (size_t i = 0; i < sizeof gw / sizeof *gw; i++)
        if (gw[i]->data)
            gpu->ops->weight_free(gpu, gw[i]);
    free(p->cgu_data);
    for (int i = 0; i < 3; i++)
        free(p->td[i]);
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A threshold between two of the |silu| values of h gate^T that keeps about density of them:
 * the middle of the widest gap near the quantile, so that both backends keep the same. */
static float threshold_in_gap(const float *h, const float *gate, int T, int F, int D, double density) {
    const size_t n = (size_t)T * F;
    double *v = malloc(n * sizeof *v);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < F; j++) {
            double g = 0;
            for (int d = 0; d < D; d++)
                g += (double)h[(size_t)t * D + d] * gate[(size_t)j * D + d];
            v[(size_t)t * F + j] = fabs(g / (1 + exp(-g)));
        }
    qsort(v, n, sizeof *v, by_value);
    const size_t q = (size_t)((1 - density) * (double)n);
    size_t best = q > 0 ? q : 1;
    for (size_t i = q > 40 ? q - 40 : 1; i < n && i < q + 40; i++)
        if (v[i] - v[i - 1] > v[best] - v[best - 1])
            best = i;
    const float thr = (float)(0.5 * (v[best] + v[best - 1]));
    free(v);
    return thr;
}

static void test_ffn_act_hist(void **state) {
    (void)state;
    static const struct {
        int T, F, D;
    } cases[] = {{1, 96, 64}, {7, 1000, 96}, {65, 4864, 128}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 9400 + k;
        const int T = cases[k].T, F = cases[k].F, D = cases[k].D;
        float *g = rand_array((size_t)T * F, 4.f, &rng), *h = rand_array((size_t)T * D, 1.f, &rng);
        to_bf16_exact(h, (size_t)T * D);
        double base[SEER_ACT_HIST_BINS], ref[SEER_ACT_HIST_BINS];
        for (int b = 0; b < SEER_ACT_HIST_BINS; b++)
            base[b] = (double)(b % 5);
        ffn_pair p;
        ffn_pair_make(&p, F, D, true, &rng);
        for (int from_gate = 0; from_gate < 2; from_gate++) {
            memcpy(ref, base, sizeof ref);
            float *tmp = malloc(sizeof(float) * T * F);
            memcpy(tmp, g, sizeof(float) * T * F);
            ASSERT_OK(cpu->ops->ffn_act_hist(cpu, ref, tmp, h, from_gate ? &p.cgu : NULL, T, F));
            double *dh = dev_alloc(sizeof base);
            ASSERT_OK(gpu->ops->upload(gpu, dh, base, sizeof base));
            float *dg = from_gate ? dev_nan((size_t)T * F) : dev_copy(g, (size_t)T * F), *dx = dev_copy(h, (size_t)T * D);
            ASSERT_OK(gpu->ops->ffn_act_hist(gpu, dh, dg, dx, from_gate ? &p.ggu : NULL, T, F));
            double out[SEER_ACT_HIST_BINS];
            ASSERT_OK(gpu->ops->download(gpu, out, dh, sizeof out));
            float fo[SEER_ACT_HIST_BINS], fr[SEER_ACT_HIST_BINS];
            double n_out = 0, n_ref = 0;
            for (int b = 0; b < SEER_ACT_HIST_BINS; b++)
                fo[b] = (float)out[b], fr[b] = (float)ref[b], n_out += out[b], n_ref += ref[b];
            assert_true(n_out == n_ref); /* every entry counted once */
            char shape[96];
            snprintf(shape, sizeof shape, "T=%d F=%d %s", T, F, from_gate ? "from an interleaved gate" : "from g");
            record("ffn_act_hist", shape, fo, fr, SEER_ACT_HIST_BINS, 1e-3);
            dev_free(dh), dev_free(dg), dev_free(dx);
            free(tmp);
        }
        ffn_pair_free(&p);
        free(g), free(h);
    }
    assert_op_passed("ffn_act_hist");
}

static void test_ffn_cats(void **state) {
    (void)state;
    static const struct {
        int T, F, D;
        bool interleave;
        double density;
    } cases[] = {{1, 4864, 896, true, 0.5},   {1, 14336, 4096, true, 0.3}, {1, 1000, 96, false, 0.65},
                 {5, 1000, 96, true, 0.5},    {17, 512, 100, false, 0.5},  {65, 256, 64, true, 0.3},
                 {3, 96, 36, true, 1.0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 9500 + k;
        const int T = cases[k].T, F = cases[k].F, D = cases[k].D;
        ffn_pair p;
        ffn_pair_make(&p, F, D, cases[k].interleave, &rng);
        float *h = rand_array((size_t)T * D, 1.f, &rng), *x = rand_array((size_t)T * D, 1.f, &rng);
        to_bf16_exact(h, (size_t)T * D);
        const float thr = cases[k].density >= 1 ? 0.f
                                                 : threshold_in_gap(h, p.cg.data, T, F, D, cases[k].density);
        float *ca = nan_array((size_t)T * F), *cx = malloc(sizeof(float) * T * D);
        memcpy(cx, x, sizeof(float) * T * D);
        const bool il = cases[k].interleave;
        ASSERT_OK(cpu->ops->ffn_cats(cpu, cx, ca, h, il ? &p.cgu : &p.cg, il ? NULL : &p.cu, &p.cdt, thr, T));
        float *dx = dev_copy(x, (size_t)T * D), *dh = dev_copy(h, (size_t)T * D), *da = dev_nan((size_t)T * F);
        ASSERT_OK(gpu->ops->ffn_cats(gpu, dx, da, dh, il ? &p.ggu : &p.gg, il ? NULL : &p.gu, &p.gdt, thr, T));
        float *ox = dev_fetch(dx, (size_t)T * D), *oa = dev_fetch(da, (size_t)T * F);
        int kept = 0, same = 0;
        for (size_t i = 0; i < (size_t)T * F; i++)
            kept += ca[i] != 0.f, same += (ca[i] != 0.f) == (oa[i] != 0.f);
        char shape[128];
        snprintf(shape, sizeof shape, "T=%d F=%d D=%d %s, %d of %zu kept", T, F, D, il ? "interleaved" : "plain",
                 kept, (size_t)T * F);
        record("ffn_cats", shape, ox, cx, (size_t)T * D, 1e-4);
        record("ffn_cats a", shape, oa, ca, (size_t)T * F, 1e-4);
        assert_int_equal(same, T * F); /* the same neurons kept */
        dev_free(dx), dev_free(dh), dev_free(da);
        free(h), free(x), free(ca), free(cx), free(ox), free(oa);
        ffn_pair_free(&p);
    }
    assert_op_passed("ffn_cats");
    assert_op_passed("ffn_cats a");
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_ffn_act_stats), cmocka_unit_test(test_weight_gather),
                                       cmocka_unit_test(test_weight_transpose), cmocka_unit_test(test_ffn_act_hist),
                                       cmocka_unit_test(test_ffn_cats)};
    return ops_run(tests, sizeof tests / sizeof *tests);
#else
    return ops_run(NULL, 0);
#endif
}
