/*
 * test_backend_ops_mm.c: the CUDA backend's matmuls and their fused forms (matmul,
 * matmul_split, matmul_add, matmul_glu, ffn_glu, norm_matmul_split, norm_matmuls) against the
 * CPU reference backend on fresh random inputs, on both sides of the switch to cuBLAS (T
 * above SEER_CUDA_INVARIANT_MAX_T), outputs poisoned with NaN; the fused forms also against the plain ops on the GPU.
 *
 * Error measure: ||out - ref||_2 / ||ref||_2 (NaN counts as infinite). Every case prints a
 * line "op shape rel_err=X tol=Y"; a summary table follows the cmocka report.
 *
 * Skips (via cmocka's skip()) when built without CUDA or when no CUDA device is present.
 */
#include "ops_harness.h"

#ifdef SEER_HAVE_CUDA

/* ---- matmul ------------------------------------------------------------------------------- */

/* Tolerance 1e-2: W and x are rounded to bf16 (relative 2^-9 each); the rounding errors
 * are independent and mostly cancel in the dot products, giving ~3e-3 in practice. With bf16
 * weights and x already bf16-exact ("exact") the products are exact in f32 and only the
 * accumulation order differs: 1e-4. */
static void test_matmul(void **state) {
    (void)state;
    static const struct {
        int T, rows, cols, bias;
        ggml_type type;
    } cases[] = {
        {1, 96, 200, 0, GGML_TYPE_F32},     {3, 96, 200, 1, GGML_TYPE_F32},
        {17, 200, 96, 1, GGML_TYPE_F32},    {64, 96, 200, 0, GGML_TYPE_F32},
        {1, 4096, 4096, 0, GGML_TYPE_F32},  {17, 4096, 4096, 1, GGML_TYPE_F32},
        {64, 4096, 4096, 0, GGML_TYPE_F32}, {5, 1000, 256, 0, GGML_TYPE_BF16},
        {7, 512, 256, 1, GGML_TYPE_Q8_0},   {3, 300, 64, 0, GGML_TYPE_F16},
        {33, 1024, 512, 0, GGML_TYPE_Q4_0}, {2, 32000, 288, 0, GGML_TYPE_F32},
        {128, 11008, 1024, 0, GGML_TYPE_BF16},
        {9, 4096, 4096, 1, GGML_TYPE_BF16},
        {263, 96, 201, 1, GGML_TYPE_BF16}, /* cuBLAS, an input of an odd count */
        {300, 128, 256, 0, GGML_TYPE_BF16},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 1000 + k;
        const int T = cases[k].T, R = cases[k].rows, C = cases[k].cols;
        host_tensor ht;
        make_tensor(&ht, "w", cases[k].type, R, C, &rng);
        seer_weight wc, wg;
        ASSERT_OK(cpu->ops->weight_load(cpu, &ht.t, SEER_WEIGHTS_F32, &wc));
        ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wg));
        assert_int_equal(wg.rows, R);
        assert_int_equal(wg.cols, C);
        float *x = rand_array((size_t)T * C, 1.f, &rng);
        const bool exact = cases[k].type == GGML_TYPE_BF16 && k >= 12;
        if (exact)
            to_bf16_exact(x, (size_t)T * C);
        float *bias = cases[k].bias ? rand_array(R, 1.f, &rng) : NULL;
        float *ref = nan_array((size_t)T * R);
        ASSERT_OK(cpu->ops->matmul(cpu, ref, x, &wc, bias, T));
        float *dx = dev_copy(x, (size_t)T * C), *db = bias ? dev_copy(bias, R) : NULL;
        float *dy = dev_nan((size_t)T * R);
        ASSERT_OK(gpu->ops->matmul(gpu, dy, dx, &wg, db, T));
        float *out = dev_fetch(dy, (size_t)T * R);
        char shape[128];
        snprintf(shape, sizeof shape, "T=%d rows=%d cols=%d %s%s%s", T, R, C,
                 seer_ggml_type_name(cases[k].type), bias ? " bias" : "", exact ? " exact" : "");
        record("matmul", shape, out, ref, (size_t)T * R, exact ? 1e-4 : 1e-2);
        cpu->ops->weight_free(cpu, &wc);
        gpu->ops->weight_free(gpu, &wg);
        dev_free(dx), dev_free(dy);
        if (db)
            dev_free(db);
        free(x), free(bias), free(ref), free(out), free(ht.data);
    }
    assert_op_passed("matmul");
}

/* The fused forms: weight_concat of 2-3 parts, matmul_split into one output per part (with
 * and without biases) and matmul_add. Against the CPU reference within the matmul tolerance,
 * and each part against the plain GPU matmul of that part alone (bf16-exact inputs, where both
 * sums are exact products in f32: 1e-5), T on both sides of the cuBLAS switch. */
static void test_matmul_fused(void **state) {
    (void)state;
    static const struct {
        int T, n, rows[3], cols, bias;
    } cases[] = {
        {1, 3, {512, 128, 128}, 512, 0},   {5, 3, {300, 76, 76}, 200, 1},
        {64, 2, {1000, 1000}, 256, 0},     {1, 2, {2048, 2048}, 1024, 0},
        {300, 3, {256, 64, 64}, 128, 1},   {17, 2, {96, 40}, 64, 1},
    };
    if (!gpu->ops->weight_concat)
        return;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 5000 + k;
        const int T = cases[k].T, n = cases[k].n, C = cases[k].cols;
        host_tensor ht[3];
        seer_weight wc[3], wg[3], parts[3], fused;
        float *x = rand_array((size_t)T * C, 1.f, &rng);
        to_bf16_exact(x, (size_t)T * C);
        float *dx = dev_copy(x, (size_t)T * C);
        float *ref[3], *dy[3], *db[3] = {NULL, NULL, NULL}, *bias[3] = {NULL, NULL, NULL};
        for (int j = 0; j < n; j++) {
            const int R = cases[k].rows[j];
            make_tensor(&ht[j], "w", GGML_TYPE_BF16, R, C, &rng);
            ASSERT_OK(cpu->ops->weight_load(cpu, &ht[j].t, SEER_WEIGHTS_F32, &wc[j]));
            ASSERT_OK(gpu->ops->weight_load(gpu, &ht[j].t, SEER_WEIGHTS_STORED, &wg[j]));
            ASSERT_OK(gpu->ops->weight_load(gpu, &ht[j].t, SEER_WEIGHTS_STORED, &parts[j]));
            if (cases[k].bias) {
                bias[j] = rand_array(R, 1.f, &rng);
                db[j] = dev_copy(bias[j], R);
            }
            ref[j] = nan_array((size_t)T * R);
            ASSERT_OK(cpu->ops->matmul(cpu, ref[j], x, &wc[j], bias[j], T));
            dy[j] = dev_nan((size_t)T * R);
        }
        ASSERT_OK(gpu->ops->weight_concat(gpu, parts, n, false, &fused));
        assert_int_equal(fused.n_seg, n);
        ASSERT_OK(gpu->ops->matmul_split(gpu, dy, dx, &fused, (const float *const *)db, T));
        for (int j = 0; j < n; j++) {
            const int R = cases[k].rows[j];
            float *out = dev_fetch(dy[j], (size_t)T * R);
            char shape[128];
            snprintf(shape, sizeof shape, "T=%d part %d/%d rows=%d cols=%d%s", T, j, n, R, C,
                     bias[j] ? " bias" : "");
            record("matmul_split", shape, out, ref[j], (size_t)T * R, 1e-2);
            /* the plain GPU matmul of the part alone, and of its view in the fused weight */
            float *dz = dev_nan((size_t)T * R);
            ASSERT_OK(gpu->ops->matmul(gpu, dz, dx, &wg[j], db[j], T));
            float *alone = dev_fetch(dz, (size_t)T * R);
            record("matmul_split-vs-plain", shape, out, alone, (size_t)T * R, 1e-5);
            ASSERT_OK(gpu->ops->matmul(gpu, dz, dx, &parts[j], db[j], T));
            float *view = dev_fetch(dz, (size_t)T * R);
            record("matmul_split-vs-plain", shape, view, alone, (size_t)T * R, 1e-5);
            free(out), free(alone), free(view);
            dev_free(dz);
        }
        /* matmul_add: y = r + x W0^T for a random r */
        const int R0 = cases[k].rows[0];
        float *r = rand_array((size_t)T * R0, 1.f, &rng), *sum = nan_array((size_t)T * R0);
        ASSERT_OK(cpu->ops->matmul(cpu, sum, x, &wc[0], NULL, T));
        for (size_t i = 0; i < (size_t)T * R0; i++)
            sum[i] += r[i];
        float *dr = dev_copy(r, (size_t)T * R0);
        ASSERT_OK(gpu->ops->matmul_add(gpu, dr, dx, &wg[0], T));
        float *got = dev_fetch(dr, (size_t)T * R0);
        char shape[96];
        snprintf(shape, sizeof shape, "T=%d rows=%d cols=%d", T, R0, C);
        record("matmul_add", shape, got, sum, (size_t)T * R0, 1e-2);
        free(r), free(sum), free(got);
        dev_free(dr);
        for (int j = 0; j < n; j++) {
            cpu->ops->weight_free(cpu, &wc[j]);
            gpu->ops->weight_free(gpu, &wg[j]);
            gpu->ops->weight_free(gpu, &parts[j]);
            dev_free(dy[j]);
            if (db[j])
                dev_free(db[j]);
            free(ref[j]), free(bias[j]), free(ht[j].data);
        }
        gpu->ops->weight_free(gpu, &fused);
        dev_free(dx);
        free(x);
    }
    assert_op_passed("matmul_split");
    assert_op_passed("matmul_split-vs-plain");
    assert_op_passed("matmul_add");
}

/* matmul_glu on an interleaved (gate, up) weight: against the CPU's two matmuls and swiglu
 * (matmul tolerance), and against the GPU's own matmul_split of the same rows followed by
 * swiglu: the same sums and the same product formula, so identical (tolerance 0). Above the
 * invariant rows (cuBLAS) the products are rounded to bf16 first: there the plain side's
 * products are rounded on the host and combined by the same formula (tolerance 1e-6, the
 * host's expf against the device's). T on both sides of the cuBLAS switch. */
static void test_matmul_glu(void **state) {
    (void)state;
    static const struct {
        int T, F, D;
    } cases[] = {{1, 1000, 256}, {5, 2048, 1024}, {64, 96, 64}, {300, 512, 128}, {17, 14336 / 8, 4096 / 8},
                 {261, 98, 64} /* cuBLAS, an odd count of pairs' groups */};
    if (!gpu->ops->matmul_glu)
        return;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 6000 + k;
        const int T = cases[k].T, F = cases[k].F, D = cases[k].D;
        host_tensor ht[2];
        seer_weight wc[2], a[2], b[2], inter, seg;
        for (int j = 0; j < 2; j++) {
            make_tensor(&ht[j], "w", GGML_TYPE_BF16, F, D, &rng);
            ASSERT_OK(cpu->ops->weight_load(cpu, &ht[j].t, SEER_WEIGHTS_F32, &wc[j]));
            ASSERT_OK(gpu->ops->weight_load(gpu, &ht[j].t, SEER_WEIGHTS_STORED, &a[j]));
            ASSERT_OK(gpu->ops->weight_load(gpu, &ht[j].t, SEER_WEIGHTS_STORED, &b[j]));
        }
        ASSERT_OK(gpu->ops->weight_concat(gpu, a, 2, true, &inter));
        ASSERT_OK(gpu->ops->weight_concat(gpu, b, 2, false, &seg));
        assert_true(inter.interleaved && !seg.interleaved);
        float *x = rand_array((size_t)T * D, 1.f, &rng);
        float *g = nan_array((size_t)T * F), *u = nan_array((size_t)T * F), *ref = nan_array((size_t)T * F);
        ASSERT_OK(cpu->ops->matmul(cpu, g, x, &wc[0], NULL, T));
        ASSERT_OK(cpu->ops->matmul(cpu, u, x, &wc[1], NULL, T));
        ASSERT_OK(cpu->ops->swiglu(cpu, ref, g, u, (size_t)T * F));
        float *dx = dev_copy(x, (size_t)T * D), *dy = dev_nan((size_t)T * F);
        float *dg = dev_nan((size_t)T * F), *du = dev_nan((size_t)T * F);
        ASSERT_OK(gpu->ops->matmul_glu(gpu, dy, dx, &inter, T));
        float *out = dev_fetch(dy, (size_t)T * F);
        float *const ys[2] = {dg, du};
        ASSERT_OK(gpu->ops->matmul_split(gpu, ys, dx, &seg, NULL, T));
        const bool blas = T > gpu->ops->invariant_max_tokens;
        float *plain;
        if (blas) {
            plain = dev_fetch(dg, (size_t)T * F);
            float *up = dev_fetch(du, (size_t)T * F);
            to_bf16_exact(plain, (size_t)T * F);
            to_bf16_exact(up, (size_t)T * F);
            for (size_t i = 0; i < (size_t)T * F; i++)
                plain[i] = plain[i] / (1.f + expf(-plain[i])) * up[i];
            free(up);
        } else {
            ASSERT_OK(gpu->ops->swiglu(gpu, dg, dg, du, (size_t)T * F));
            plain = dev_fetch(dg, (size_t)T * F);
        }
        char shape[96];
        snprintf(shape, sizeof shape, "T=%d F=%d D=%d", T, F, D);
        record("matmul_glu", shape, out, ref, (size_t)T * F, 1e-2);
        record("matmul_glu-vs-plain", shape, out, plain, (size_t)T * F, blas ? 1e-6 : 0);
        for (int j = 0; j < 2; j++) {
            cpu->ops->weight_free(cpu, &wc[j]);
            gpu->ops->weight_free(gpu, &a[j]);
            gpu->ops->weight_free(gpu, &b[j]);
            free(ht[j].data);
        }
        gpu->ops->weight_free(gpu, &inter);
        gpu->ops->weight_free(gpu, &seg);
        dev_free(dx), dev_free(dy), dev_free(dg), dev_free(du);
        free(x), free(g), free(u), free(ref), free(out), free(plain);
    }
    assert_op_passed("matmul_glu");
    assert_op_passed("matmul_glu-vs-plain");
}

/* ffn_glu (x += Wdown glu(Wgu rmsnorm(x))) against rmsnorm, matmul_glu and matmul_add on the
 * GPU (tolerance 0: the same values by its contract) and against the CPU's rmsnorm, matmuls,
 * swiglu and add, on both sides of the cuBLAS switch, with bf16 and Q8_0 weights, and with
 * K-quants in row blocks, where the norm writes the first product's 8-bit x itself. */
static void test_ffn_glu(void **state) {
    (void)state;
    static const struct {
        int T, F, D;
        ggml_type type;
    } cases[] = {{1, 512, 256, GGML_TYPE_BF16}, {7, 320, 128, GGML_TYPE_BF16},
                 {300, 512, 256, GGML_TYPE_BF16}, {5, 512, 256, GGML_TYPE_Q8_0},
                 {300, 512, 256, GGML_TYPE_Q8_0}, {260, 640, 200, GGML_TYPE_BF16},
                 /* row blocks: the norm writes the product's 8-bit x at once (rmsnorm_q8) */
                 {1, 512, 512, GGML_TYPE_Q4_K}, {5, 256, 512, GGML_TYPE_Q6_K}, {2, 256, 256, GGML_TYPE_Q8_0}};
    if (!gpu->ops->ffn_glu)
        return;
    const float eps = 1e-5f;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 6500 + k;
        const int T = cases[k].T, F = cases[k].F, D = cases[k].D;
        host_tensor ht[3];
        seer_weight wc[3], wg[3], gu;
        for (int j = 0; j < 3; j++) { /* gate, up: F x D; down: D x F */
            make_tensor(&ht[j], "w", cases[k].type, j < 2 ? F : D, j < 2 ? D : F, &rng);
            ASSERT_OK(cpu->ops->weight_load(cpu, &ht[j].t, SEER_WEIGHTS_F32, &wc[j]));
            ASSERT_OK(gpu->ops->weight_load(gpu, &ht[j].t, SEER_WEIGHTS_STORED, &wg[j]));
        }
        ASSERT_OK(gpu->ops->weight_concat(gpu, wg, 2, true, &gu));
        float *x = rand_array((size_t)T * D, 1.f, &rng), *nw = rand_array(D, 1.f, &rng);
        float *h = nan_array((size_t)T * D), *g = nan_array((size_t)T * F), *u = nan_array((size_t)T * F);
        float *ref = malloc(sizeof(float) * T * D);
        memcpy(ref, x, sizeof(float) * T * D);
        ASSERT_OK(cpu->ops->rmsnorm(cpu, h, x, nw, T, D, eps));
        ASSERT_OK(cpu->ops->matmul(cpu, g, h, &wc[0], NULL, T));
        ASSERT_OK(cpu->ops->matmul(cpu, u, h, &wc[1], NULL, T));
        ASSERT_OK(cpu->ops->swiglu(cpu, g, g, u, (size_t)T * F));
        float *y = nan_array((size_t)T * D);
        ASSERT_OK(cpu->ops->matmul(cpu, y, g, &wc[2], NULL, T));
        ASSERT_OK(cpu->ops->add(cpu, ref, y, (size_t)T * D));
        free(y);
        float *dx = dev_copy(x, (size_t)T * D), *dx2 = dev_copy(x, (size_t)T * D), *dnw = dev_copy(nw, D);
        float *dh = dev_nan((size_t)T * D), *dh2 = dev_nan((size_t)T * D);
        float *dg = dev_nan((size_t)T * F), *dg2 = dev_nan((size_t)T * F);
        ASSERT_OK(gpu->ops->ffn_glu(gpu, dx, dh, dnw, eps, &gu, &wg[2], dg, T));
        ASSERT_OK(gpu->ops->rmsnorm(gpu, dh2, dx2, dnw, T, D, eps));
        ASSERT_OK(gpu->ops->matmul_glu(gpu, dg2, dh2, &gu, T));
        ASSERT_OK(gpu->ops->matmul_add(gpu, dx2, dg2, &wg[2], T));
        float *out = dev_fetch(dx, (size_t)T * D), *two = dev_fetch(dx2, (size_t)T * D);
        char shape[96];
        snprintf(shape, sizeof shape, "T=%d F=%d D=%d %s", T, F, D, seer_ggml_type_name(cases[k].type));
        /* quantised weights in row blocks round x to 8 bits per group of 32 in both products
         * (about 5e-3 each against the f32 reference): twice the one product's tolerance */
        record("ffn_glu", shape, out, ref, (size_t)T * D, cases[k].type == GGML_TYPE_BF16 ? 1e-2 : 2e-2);
        record("ffn_glu-vs-ops", shape, out, two, (size_t)T * D, 0);
        for (int j = 0; j < 3; j++) {
            cpu->ops->weight_free(cpu, &wc[j]);
            gpu->ops->weight_free(gpu, &wg[j]);
            free(ht[j].data);
        }
        gpu->ops->weight_free(gpu, &gu);
        dev_free(dx), dev_free(dx2), dev_free(dnw), dev_free(dh), dev_free(dh2), dev_free(dg), dev_free(dg2);
        free(x), free(nw), free(h), free(g), free(u), free(ref), free(out), free(two);
    }
    assert_op_passed("ffn_glu");
    assert_op_passed("ffn_glu-vs-ops");
}

/* norm_matmul_split (rmsnorm of x, then the segments of W times it, with biases) against the
 * CPU's rmsnorm and matmuls of each part, and against the GPU's rmsnorm and matmul_split
 * (tolerance 0: the same values by its contract); also a weight of one part (matmul). T on
 * both sides of the cuBLAS switch, bf16 and Q8_0, and K-quants and Q8_0 in row blocks (the
 * norm then writes the 8-bit x: the same bits as rmsnorm and the x kernel). */
static void test_norm_matmul_split(void **state) {
    (void)state;
    static const struct {
        int T, n, rows[3], cols, bias;
        ggml_type type;
    } cases[] = {
        {5, 3, {256, 64, 64}, 256, 0, GGML_TYPE_BF16},   {300, 3, {256, 64, 64}, 256, 1, GGML_TYPE_BF16},
        {9, 3, {128, 32, 32}, 128, 1, GGML_TYPE_Q8_0},   {280, 3, {128, 32, 32}, 128, 0, GGML_TYPE_Q8_0},
        {3, 1, {200}, 96, 1, GGML_TYPE_BF16},            {270, 1, {200}, 96, 0, GGML_TYPE_BF16},
        /* row blocks: the norm writes the product's 8-bit x at once (rmsnorm_q8) */
        {1, 3, {512, 128, 128}, 512, 1, GGML_TYPE_Q4_K}, {6, 3, {256, 64, 64}, 256, 0, GGML_TYPE_Q6_K},
        {1, 1, {64}, 4096, 0, GGML_TYPE_Q8_0}, {2, 1, {64}, 2048, 1, GGML_TYPE_Q4_K},
    };
    if (!gpu->ops->norm_matmul_split)
        return;
    const float eps = 1e-6f;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 6800 + k;
        const int T = cases[k].T, n = cases[k].n, C = cases[k].cols;
        host_tensor ht[3];
        seer_weight wc[3], wg[3], w;
        float *ys[3], *ys2[3], *bias[3], *db[3], *ref[3];
        int rows = 0;
        float *x = rand_array((size_t)T * C, 1.f, &rng), *nw = rand_array(C, 1.f, &rng);
        float *h = nan_array((size_t)T * C);
        ASSERT_OK(cpu->ops->rmsnorm(cpu, h, x, nw, T, C, eps));
        for (int j = 0; j < n; j++) {
            const int R = cases[k].rows[j];
            rows += R;
            make_tensor(&ht[j], "w", cases[k].type, R, C, &rng);
            ASSERT_OK(cpu->ops->weight_load(cpu, &ht[j].t, SEER_WEIGHTS_F32, &wc[j]));
            ASSERT_OK(gpu->ops->weight_load(gpu, &ht[j].t, SEER_WEIGHTS_STORED, &wg[j]));
            bias[j] = cases[k].bias ? rand_array(R, 1.f, &rng) : NULL;
            db[j] = bias[j] ? dev_copy(bias[j], R) : NULL;
            ref[j] = nan_array((size_t)T * R);
            ASSERT_OK(cpu->ops->matmul(cpu, ref[j], h, &wc[j], bias[j], T));
            ys[j] = dev_nan((size_t)T * R);
            ys2[j] = dev_nan((size_t)T * R);
        }
        if (n > 1)
            ASSERT_OK(gpu->ops->weight_concat(gpu, wg, n, false, &w));
        else
            w = wg[0];
        assert_int_equal(w.rows, rows);
        float *dx = dev_copy(x, (size_t)T * C), *dnw = dev_copy(nw, C);
        float *dh = dev_nan((size_t)T * C), *dh2 = dev_nan((size_t)T * C);
        const float *const bs[3] = {db[0], n > 1 ? db[1] : NULL, n > 2 ? db[2] : NULL};
        ASSERT_OK(gpu->ops->norm_matmul_split(gpu, ys, dh, dx, dnw, eps, &w, bs, T));
        ASSERT_OK(gpu->ops->rmsnorm(gpu, dh2, dx, dnw, T, C, eps));
        if (n > 1)
            ASSERT_OK(gpu->ops->matmul_split(gpu, ys2, dh2, &w, bs, T));
        else
            ASSERT_OK(gpu->ops->matmul(gpu, ys2[0], dh2, &w, bs[0], T));
        for (int j = 0; j < n; j++) {
            const int R = cases[k].rows[j];
            float *out = dev_fetch(ys[j], (size_t)T * R), *two = dev_fetch(ys2[j], (size_t)T * R);
            char shape[128];
            snprintf(shape, sizeof shape, "T=%d part %d/%d rows=%d cols=%d %s%s", T, j, n, R, C,
                     seer_ggml_type_name(cases[k].type), bias[j] ? " bias" : "");
            record("norm_matmul_split", shape, out, ref[j], (size_t)T * R, 1e-2);
            record("norm_matmul_split-vs-ops", shape, out, two, (size_t)T * R, 0);
            free(out), free(two);
        }
        for (int j = 0; j < n; j++) {
            cpu->ops->weight_free(cpu, &wc[j]);
            if (n > 1)
                gpu->ops->weight_free(gpu, &wg[j]);
            dev_free(ys[j]), dev_free(ys2[j]);
            if (db[j])
                dev_free(db[j]);
            free(ref[j]), free(bias[j]), free(ht[j].data);
        }
        gpu->ops->weight_free(gpu, &w);
        dev_free(dx), dev_free(dnw), dev_free(dh), dev_free(dh2);
        free(x), free(nw), free(h);
    }
    assert_op_passed("norm_matmul_split");
    assert_op_passed("norm_matmul_split-vs-ops");
}

/* norm_matmuls (rmsnorm of x, then several weights of their own types times it, with biases)
 * against the CPU's rmsnorm and matmuls, and against the GPU's rmsnorm and a matmul each
 * (tolerance 0: the same values by its contract). Weights in row blocks of differing types at
 * T = 1 (one launch for all), T = 3 (one 8-bit x, a launch each), rows that are not whole row
 * blocks, a bf16 weight among them (the ops one by one) and T past the cuBLAS switch. */
static void test_norm_matmuls(void **state) {
    (void)state;
    static const struct {
        int T, n, rows[4], cols, bias;
        ggml_type type[4];
    } cases[] = {
        {1, 3, {512, 128, 128}, 512, 1, {GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K}},
        {1, 4, {256, 64, 64, 32}, 256, 0, {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q5_K}},
        {1, 2, {96, 40}, 1024, 1, {GGML_TYPE_Q6_K, GGML_TYPE_Q4_K}},
        {1, 1, {4096}, 256, 0, {GGML_TYPE_Q4_K}},
        {3, 3, {512, 128, 128}, 512, 0, {GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K}},
        {1, 3, {256, 64, 64}, 256, 1, {GGML_TYPE_Q4_K, GGML_TYPE_BF16, GGML_TYPE_Q6_K}},
        {280, 2, {256, 64}, 256, 1, {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K}},
    };
    if (!gpu->ops->norm_matmuls)
        return;
    const float eps = 1e-6f;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 7100 + k;
        const int T = cases[k].T, n = cases[k].n, C = cases[k].cols;
        host_tensor ht[4];
        seer_weight wc[4], wg[4];
        float *ys[4] = {0}, *ys2[4] = {0}, *bias[4] = {0}, *db[4] = {0}, *ref[4] = {0};
        float *x = rand_array((size_t)T * C, 1.f, &rng), *nw = rand_array(C, 1.f, &rng);
        float *h = nan_array((size_t)T * C);
        ASSERT_OK(cpu->ops->rmsnorm(cpu, h, x, nw, T, C, eps));
        for (int j = 0; j < n; j++) {
            const int R = cases[k].rows[j];
            make_tensor(&ht[j], "w", cases[k].type[j], R, C, &rng);
            ASSERT_OK(cpu->ops->weight_load(cpu, &ht[j].t, SEER_WEIGHTS_F32, &wc[j]));
            ASSERT_OK(gpu->ops->weight_load(gpu, &ht[j].t, SEER_WEIGHTS_STORED, &wg[j]));
            bias[j] = cases[k].bias ? rand_array(R, 1.f, &rng) : NULL;
            db[j] = bias[j] ? dev_copy(bias[j], R) : NULL;
            ref[j] = nan_array((size_t)T * R);
            ASSERT_OK(cpu->ops->matmul(cpu, ref[j], h, &wc[j], bias[j], T));
            ys[j] = dev_nan((size_t)T * R);
            ys2[j] = dev_nan((size_t)T * R);
        }
        float *dx = dev_copy(x, (size_t)T * C), *dnw = dev_copy(nw, C);
        float *dh = dev_nan((size_t)T * C), *dh2 = dev_nan((size_t)T * C);
        const float *const bs[4] = {db[0], db[1], db[2], db[3]};
        ASSERT_OK(gpu->ops->norm_matmuls(gpu, ys, dh, dx, dnw, eps, wg, n, bs, T));
        ASSERT_OK(gpu->ops->rmsnorm(gpu, dh2, dx, dnw, T, C, eps));
        for (int j = 0; j < n; j++)
            ASSERT_OK(gpu->ops->matmul(gpu, ys2[j], dh2, &wg[j], bs[j], T));
        for (int j = 0; j < n; j++) {
            const int R = cases[k].rows[j];
            float *out = dev_fetch(ys[j], (size_t)T * R), *two = dev_fetch(ys2[j], (size_t)T * R);
            char shape[128];
            snprintf(shape, sizeof shape, "T=%d weight %d/%d rows=%d cols=%d %s%s", T, j, n, R, C,
                     seer_ggml_type_name(cases[k].type[j]), bias[j] ? " bias" : "");
            record("norm_matmuls", shape, out, ref[j], (size_t)T * R, 1e-2);
            record("norm_matmuls-vs-ops", shape, out, two, (size_t)T * R, 0);
            free(out), free(two);
        }
        /* bad input: a weight of other columns, too many weights; the outputs untouched */
        if (n > 1 && T == 1) {
            seer_weight bad[2] = {wg[0], wg[1]};
            bad[1].cols = C / 2;
            assert_int_not_equal(gpu->ops->norm_matmuls(gpu, ys, dh, dx, dnw, eps, bad, 2, NULL, T), SEER_OK);
            assert_int_not_equal(gpu->ops->norm_matmuls(gpu, ys, dh, dx, dnw, eps, wg, SEER_WEIGHT_MAX_SEG + 1,
                                                         NULL, T),
                                 SEER_OK);
        }
        for (int j = 0; j < n; j++) {
            cpu->ops->weight_free(cpu, &wc[j]);
            gpu->ops->weight_free(gpu, &wg[j]);
            dev_free(ys[j]), dev_free(ys2[j]);
            if (db[j])
                dev_free(db[j]);
            free(ref[j]), free(bias[j]), free(ht[j].data);
        }
        dev_free(dx), dev_free(dnw), dev_free(dh), dev_free(dh2);
        free(x), free(nw), free(h);
    }
    assert_op_passed("norm_matmuls");
    assert_op_passed("norm_matmuls-vs-ops");
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),     cmocka_unit_test(test_matmul_fused),
        cmocka_unit_test(test_matmul_glu), cmocka_unit_test(test_ffn_glu),
        cmocka_unit_test(test_norm_matmul_split), cmocka_unit_test(test_norm_matmuls),
    };
    return ops_run(tests, sizeof tests / sizeof *tests);
#else
    return ops_run(NULL, 0);
#endif
}
