/*
 * test_backend_ops.c: the ops of the CUDA backend against the CPU reference backend on
 * fresh random inputs across shapes: odd sizes, GQA groups, head sizes, page sizes, several
 * sequences per batch, tree masks, sparse views, forks and long contexts. Outputs are
 * poisoned with NaN before each run, so an element an op fails to write shows up. The
 * matmuls are in test_backend_ops_mm.c, the quantised weights in test_backend_ops_q.c, the
 * quantised KV copy in test_backend_ops_qkv.c.
 *
 * Error measure: ||out - ref||_2 / ||ref||_2 (NaN counts as infinite). Every case prints a
 * line "op shape rel_err=X tol=Y"; a summary table follows the cmocka report.
 *
 * A forward call whose CUDA graph recording fails is redone op by op with the same results.
 *
 * Skips (via cmocka's skip()) when built without CUDA or when no CUDA device is present.
 */
#include "ops_harness.h"

#ifdef SEER_HAVE_CUDA

/* rope_kv_store against rope, rope, kv_store: on the CPU (rope tolerance for q and k, the bf16
 * tolerance for the stored rows) and the GPU's own separate ops (identical). Positions and
 * pages come through batch_begin as in a forward call. */
static void test_rope_kv_store(void **state) {
    (void)state;
    static const struct {
        int T, H, Hkv, Dh, neox, ps;
    } cases[] = {{1, 32, 8, 128, 0, 16}, {7, 9, 3, 64, 1, 4}, {70, 4, 4, 64, 0, 16}, {3, 14, 2, 64, 1, 1}};
    if (!gpu->ops->rope_kv_store)
        return;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 6500 + k;
        const int T = cases[k].T, H = cases[k].H, Hkv = cases[k].Hkv, Dh = cases[k].Dh;
        const size_t nq = (size_t)T * H * Dh, nk = (size_t)T * Hkv * Dh;
        seer_kv_geom g = {.n_pages = (T + cases[k].ps - 1) / cases[k].ps + 2, .page_size = cases[k].ps,
                          .n_layers = 2, .n_kv_heads = Hkv, .head_dim = Dh};
        void *kc, *k1, *k2;
        int nc = 0;
        ASSERT_OK(cpu->ops->kv_alloc(cpu, &g, &kc));
        ASSERT_OK(gpu->ops->kv_alloc(gpu, &g, &k1));
        ASSERT_OK(gpu->ops->kv_alloc(gpu, &g, &k2));
        ASSERT_OK(cpu->ops->kv_reserve(cpu, kc, &g, g.n_pages, &nc));
        ASSERT_OK(gpu->ops->kv_reserve(gpu, k1, &g, g.n_pages, &nc));
        ASSERT_OK(gpu->ops->kv_reserve(gpu, k2, &g, g.n_pages, &nc));
        float *q = rand_array(nq, 1.f, &rng), *kk = rand_array(nk, 1.f, &rng), *v = rand_array(nk, 1.f, &rng);
        float *fr = malloc(Dh / 2 * sizeof *fr);
        for (int i = 0; i < Dh / 2; i++)
            fr[i] = (float)pow(10000.0, -2.0 * i / Dh);
        int32_t *pos = malloc(T * sizeof *pos), *page = malloc(T * sizeof *page), *row = malloc(T * sizeof *row);
        for (int t = 0; t < T; t++) {
            pos[t] = 1000 + 3 * t;
            page[t] = 1 + t / g.page_size;
            row[t] = t % g.page_size;
        }
        /* CPU reference */
        float *rq = malloc(nq * sizeof *rq), *rk = malloc(nk * sizeof *rk);
        memcpy(rq, q, nq * sizeof *rq);
        memcpy(rk, kk, nk * sizeof *rk);
        ASSERT_OK(cpu->ops->rope(cpu, rq, pos, T, H, Dh, fr, cases[k].neox));
        ASSERT_OK(cpu->ops->rope(cpu, rk, pos, T, Hkv, Dh, fr, cases[k].neox));
        ASSERT_OK(cpu->ops->kv_store(cpu, kc, &g, 1, rk, v, page, row, T));
        /* GPU fused, then separate */
        float *dfr = dev_copy(fr, Dh / 2);
        float *q1 = dev_copy(q, nq), *kk1 = dev_copy(kk, nk), *v1 = dev_copy(v, nk);
        float *q2 = dev_copy(q, nq), *kk2 = dev_copy(kk, nk);
        ASSERT_OK(gpu->ops->batch_begin(gpu, NULL, NULL, pos, page, row, NULL, 0));
        ASSERT_OK(gpu->ops->rope_kv_store(gpu, q1, kk1, v1, pos, T, H, Hkv, Dh, dfr, cases[k].neox, k1, &g, 1,
                                          page, row));
        ASSERT_OK(gpu->ops->rope(gpu, q2, pos, T, H, Dh, dfr, cases[k].neox));
        ASSERT_OK(gpu->ops->rope(gpu, kk2, pos, T, Hkv, Dh, dfr, cases[k].neox));
        ASSERT_OK(gpu->ops->kv_store(gpu, k2, &g, 1, kk2, v1, page, row, T));
        float *oq1 = dev_fetch(q1, nq), *ok1 = dev_fetch(kk1, nk), *oq2 = dev_fetch(q2, nq), *ok2 = dev_fetch(kk2, nk);
        char shape[96];
        snprintf(shape, sizeof shape, "T=%d H=%d Hkv=%d Dh=%d %s ps=%d", T, H, Hkv, Dh,
                 cases[k].neox ? "neox" : "adjacent", cases[k].ps);
        record("rope_kv_store", shape, oq1, rq, nq, 1e-5);
        record("rope_kv_store", shape, ok1, rk, nk, 1e-5);
        record("rope_kv_store-vs-plain", shape, oq1, oq2, nq, 0);
        record("rope_kv_store-vs-plain", shape, ok1, ok2, nk, 0);
        float *rc = nan_array(nk), *r1 = nan_array(nk), *r2 = nan_array(nk);
        for (int which = 0; which < 2; which++) {
            ASSERT_OK(cpu->ops->kv_read(cpu, kc, &g, 1, which, page, row, T, rc));
            ASSERT_OK(gpu->ops->kv_read(gpu, k1, &g, 1, which, page, row, T, r1));
            ASSERT_OK(gpu->ops->kv_read(gpu, k2, &g, 1, which, page, row, T, r2));
            record("rope_kv_store", which ? "stored V" : "stored K", r1, rc, nk, 5e-3);
            record("rope_kv_store-vs-plain", which ? "stored V" : "stored K", r1, r2, nk, 0);
        }
        cpu->ops->kv_free(cpu, kc);
        gpu->ops->kv_free(gpu, k1);
        gpu->ops->kv_free(gpu, k2);
        dev_free(dfr), dev_free(q1), dev_free(kk1), dev_free(v1), dev_free(q2), dev_free(kk2);
        free(q), free(kk), free(v), free(fr), free(pos), free(page), free(row), free(rq), free(rk);
        free(oq1), free(ok1), free(oq2), free(ok2), free(rc), free(r1), free(r2);
    }
    assert_op_passed("rope_kv_store");
    assert_op_passed("rope_kv_store-vs-plain");
}

/* ---- kv_move_rows ------------------------------------------------------------------------- */

/* Rows stored on both backends, then moved in an order where later moves read rows earlier
 * ones wrote (the compaction of an accepted tree path) and one row onto itself. The device's
 * rows after the move: exactly (tolerance 0) its own rows before it at the sources, and the
 * CPU's moved rows within bf16 rounding; rows no move wrote are unchanged. */
static void test_kv_move_rows(void **state) {
    (void)state;
    static const struct {
        int Hkv, Dh, ps, layers;
    } cases[] = {{2, 64, 4, 2}, {8, 128, 16, 3}, {1, 64, 1, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 7100 + k;
        const int Hkv = cases[k].Hkv, Dh = cases[k].Dh, ps = cases[k].ps, T = 12;
        const size_t nk = (size_t)T * Hkv * Dh;
        seer_kv_geom g = {.n_pages = (T + ps - 1) / ps + 1, .page_size = ps, .n_layers = cases[k].layers,
                          .n_kv_heads = Hkv, .head_dim = Dh};
        void *kc, *kg;
        int nc = 0;
        ASSERT_OK(cpu->ops->kv_alloc(cpu, &g, &kc));
        ASSERT_OK(gpu->ops->kv_alloc(gpu, &g, &kg));
        ASSERT_OK(cpu->ops->kv_reserve(cpu, kc, &g, g.n_pages, &nc));
        ASSERT_OK(gpu->ops->kv_reserve(gpu, kg, &g, g.n_pages, &nc));
        int32_t page[12], row[12];
        for (int t = 0; t < T; t++)
            page[t] = t / ps, row[t] = t % ps;
        for (int l = 0; l < g.n_layers; l++) {
            float *kk = rand_array(nk, 1.f, &rng), *v = rand_array(nk, 1.f, &rng);
            float *dk = dev_copy(kk, nk), *dv = dev_copy(v, nk);
            ASSERT_OK(cpu->ops->kv_store(cpu, kc, &g, l, kk, v, page, row, T));
            ASSERT_OK(gpu->ops->batch_begin(gpu, NULL, NULL, NULL, page, row, NULL, 0));
            ASSERT_OK(gpu->ops->kv_store(gpu, kg, &g, l, dk, dv, page, row, T));
            dev_free(dk), dev_free(dv), free(kk), free(v);
        }
        /* slots: 3 -> 1, 5 -> 2, 2 -> 3 (reads what the second wrote), 7 -> 7, 11 -> 4 */
        const int32_t src[] = {3, 5, 2, 7, 11}, dst[] = {1, 2, 3, 7, 4};
        const int n = 5;
        int32_t sp[5], sr[5], dp[5], dr[5];
        for (int i = 0; i < n; i++)
            sp[i] = src[i] / ps, sr[i] = src[i] % ps, dp[i] = dst[i] / ps, dr[i] = dst[i] % ps;
        /* the device's rows before, moved by hand: what its rows must be after, exactly */
        float *before = nan_array(nk), *after = nan_array(nk), *want = nan_array(nk), *rc = nan_array(nk);
        ASSERT_OK(cpu->ops->kv_move_rows(cpu, kc, &g, sp, sr, dp, dr, n));
        ASSERT_OK(gpu->ops->kv_move_rows(gpu, kg, &g, sp, sr, dp, dr, n));
        for (int l = 0; l < g.n_layers; l++)
            for (int which = 0; which < 2; which++) {
                ASSERT_OK(gpu->ops->kv_read(gpu, kg, &g, l, which, page, row, T, after));
                ASSERT_OK(cpu->ops->kv_read(cpu, kc, &g, l, which, page, row, T, rc));
                char shape[96];
                snprintf(shape, sizeof shape, "Hkv=%d Dh=%d ps=%d layer %d %s", Hkv, Dh, ps, l, which ? "V" : "K");
                record("kv_move_rows", shape, after, rc, nk, 5e-3);
            }
        /* exactness on the device: a fresh store, a read, the move, a read */
        for (int l = 0; l < g.n_layers; l++) {
            float *kk = rand_array(nk, 1.f, &rng), *v = rand_array(nk, 1.f, &rng);
            float *dk = dev_copy(kk, nk), *dv = dev_copy(v, nk);
            ASSERT_OK(gpu->ops->batch_begin(gpu, NULL, NULL, NULL, page, row, NULL, 0));
            ASSERT_OK(gpu->ops->kv_store(gpu, kg, &g, l, dk, dv, page, row, T));
            dev_free(dk), dev_free(dv), free(kk), free(v);
        }
        const size_t kvd = (size_t)Hkv * Dh, per = 2 * nk;
        float *all_before = nan_array(per * g.n_layers);
        for (int l = 0; l < g.n_layers; l++)
            for (int which = 0; which < 2; which++)
                ASSERT_OK(gpu->ops->kv_read(gpu, kg, &g, l, which, page, row, T, all_before + l * per + which * nk));
        ASSERT_OK(gpu->ops->kv_move_rows(gpu, kg, &g, sp, sr, dp, dr, n));
        for (int l = 0; l < g.n_layers; l++)
            for (int which = 0; which < 2; which++) {
                memcpy(want, all_before + l * per + which * nk, nk * sizeof(float));
                for (int i = 0; i < n; i++)
                    memmove(want + dst[i] * kvd, want + src[i] * kvd, kvd * sizeof(float));
                ASSERT_OK(gpu->ops->kv_read(gpu, kg, &g, l, which, page, row, T, after));
                record("kv_move_rows-exact", "rows vs the device's own, moved by hand", after, want, nk, 0);
            }
        free(all_before);
        /* a row outside the pool is refused */
        const int32_t bad[] = {g.n_pages};
        assert_int_equal(gpu->ops->kv_move_rows(gpu, kg, &g, bad, sr, dp, dr, 1), SEER_ERR_INVALID_ARG);
        cpu->ops->kv_free(cpu, kc);
        gpu->ops->kv_free(gpu, kg);
        free(before), free(after), free(want), free(rc);
    }
    assert_op_passed("kv_move_rows");
    assert_op_passed("kv_move_rows-exact");
}

/* ---- embed -------------------------------------------------------------------------------- */

/* Tolerance: an f32 table is rounded to bf16 on the device (relative 2^-9 per value, ~2e-3
 * in L2), so 5e-3; a bf16 table is copied exactly, so 0. */
static void test_embed(void **state) {
    (void)state;
    static const struct {
        int V, D, T;
        ggml_type type;
    } cases[] = {{1000, 200, 1, GGML_TYPE_F32}, {1000, 200, 17, GGML_TYPE_BF16},
                 {32000, 288, 64, GGML_TYPE_F32}, {5000, 4096, 3, GGML_TYPE_BF16},
                 {300, 64, 64, GGML_TYPE_Q8_0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 2000 + k;
        const int V = cases[k].V, D = cases[k].D, T = cases[k].T;
        host_tensor ht;
        make_tensor(&ht, "token_embd", cases[k].type, V, D, &rng);
        seer_weight wc, wg;
        ASSERT_OK(cpu->ops->weight_load(cpu, &ht.t, SEER_WEIGHTS_F32, &wc));
        ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wg));
        int32_t *tok = malloc(T * sizeof *tok);
        for (int t = 0; t < T; t++)
            tok[t] = t == 0 ? V - 1 : (int32_t)(tu_rand_u64(&rng) % (uint64_t)V);
        float *ref = nan_array((size_t)T * D);
        ASSERT_OK(cpu->ops->embed(cpu, ref, &wc, tok, T));
        float *dy = dev_nan((size_t)T * D);
        ASSERT_OK(gpu->ops->embed(gpu, dy, &wg, tok, T));
        float *out = dev_fetch(dy, (size_t)T * D);
        char shape[128];
        snprintf(shape, sizeof shape, "V=%d D=%d T=%d %s", V, D, T, seer_ggml_type_name(cases[k].type));
        record("embed", shape, out, ref, (size_t)T * D, cases[k].type == GGML_TYPE_BF16 ? 0 : 5e-3);
        cpu->ops->weight_free(cpu, &wc);
        gpu->ops->weight_free(gpu, &wg);
        dev_free(dy);
        free(tok), free(ref), free(out), free(ht.data);
    }
    assert_op_passed("embed");
}

/* ---- rmsnorm ------------------------------------------------------------------------------ */

/* Tolerance 1e-5: f32 throughout; only the order of the sum of squares differs. */
static void test_rmsnorm(void **state) {
    (void)state;
    static const struct {
        int T, D, in_place;
        float eps;
    } cases[] = {{1, 96, 0, 1e-5f},   {3, 200, 1, 1e-6f},  {17, 4096, 0, 1e-5f},
                 {64, 4096, 1, 1e-5f}, {5, 8192, 0, 1e-6f}, {64, 7, 0, 1e-5f}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 3000 + k;
        const int T = cases[k].T, D = cases[k].D;
        const size_t n = (size_t)T * D;
        float *x = rand_array(n, 3.f, &rng), *w = rand_array(D, 1.f, &rng);
        float *ref = nan_array(n);
        ASSERT_OK(cpu->ops->rmsnorm(cpu, ref, x, w, T, D, cases[k].eps));
        float *dx = dev_copy(x, n), *dw = dev_copy(w, D);
        float *dy = cases[k].in_place ? dx : dev_nan(n);
        ASSERT_OK(gpu->ops->rmsnorm(gpu, dy, dx, dw, T, D, cases[k].eps));
        float *out = dev_fetch(dy, n);
        char shape[128];
        snprintf(shape, sizeof shape, "T=%d D=%d eps=%g%s", T, D, cases[k].eps,
                 cases[k].in_place ? " in-place" : "");
        record("rmsnorm", shape, out, ref, n, 1e-5);
        if (dy != dx)
            dev_free(dy);
        dev_free(dx), dev_free(dw);
        free(x), free(w), free(ref), free(out);
    }
    assert_op_passed("rmsnorm");
}

/* ---- rope --------------------------------------------------------------------------------- */

/* Tolerance 1e-5: both sides take the angle and its sine and cosine in double and round
 * them to f32; what is left is the last bit of the libraries' cos/sin. */
static void test_rope(void **state) {
    (void)state;
    static const struct {
        int T, n_heads, Dh, neox, max_pos;
        float base;
    } cases[] = {
        {1, 4, 8, 0, 100, 10000.f},         {3, 32, 64, 1, 4096, 10000.f},
        {17, 8, 128, 0, 131072, 500000.f},  {64, 2, 128, 1, 1 << 20, 1000000.f},
        {5, 1, 64, 0, 1 << 24, 10000.f},    {64, 28, 128, 1, 32768, 1000000.f},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t rng = 4000 + k;
        const int T = cases[k].T, nh = cases[k].n_heads, Dh = cases[k].Dh;
        const size_t n = (size_t)T * nh * Dh;
        float *x = rand_array(n, 1.f, &rng);
        float *fr = malloc(Dh / 2 * sizeof *fr);
        for (int i = 0; i < Dh / 2; i++)
            fr[i] = (float)pow(cases[k].base, -2.0 * i / Dh);
        int32_t *pos = malloc(T * sizeof *pos);
        for (int t = 0; t < T; t++)
            pos[t] = t == 0 ? cases[k].max_pos - 1 : (int32_t)(tu_rand_u64(&rng) % (uint64_t)cases[k].max_pos);
        float *ref = malloc(n * sizeof *ref);
        memcpy(ref, x, n * sizeof *ref);
        ASSERT_OK(cpu->ops->rope(cpu, ref, pos, T, nh, Dh, fr, cases[k].neox));
        float *dx = dev_copy(x, n), *dfr = dev_copy(fr, Dh / 2);
        ASSERT_OK(gpu->ops->rope(gpu, dx, pos, T, nh, Dh, dfr, cases[k].neox));
        float *out = dev_fetch(dx, n);
        char shape[128];
        snprintf(shape, sizeof shape, "T=%d heads=%d Dh=%d %s max_pos=%d base=%g", T, nh, Dh,
                 cases[k].neox ? "neox" : "adjacent", cases[k].max_pos, cases[k].base);
        record("rope", shape, out, ref, n, 1e-5);
        dev_free(dx), dev_free(dfr);
        free(x), free(fr), free(pos), free(ref), free(out);
    }
    assert_op_passed("rope");
}

/* ---- elementwise ------------------------------------------------------------------------- */

/* Tolerances: swiglu 1e-5 (expf differs in the last bits); add and gather_rows are exact
 * copies and sums of the same f32 values, so 0. */
static void test_elementwise(void **state) {
    (void)state;
    static const size_t sizes[] = {1, 17, 4096 * 3 + 5, 1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        uint64_t rng = 5000 + k;
        const size_t n = sizes[k];
        float *g = rand_array(n, 8.f, &rng), *u = rand_array(n, 2.f, &rng);
        float *ref = nan_array(n);
        ASSERT_OK(cpu->ops->swiglu(cpu, ref, g, u, n));
        float *dg = dev_copy(g, n), *du = dev_copy(u, n), *dy = dev_nan(n);
        ASSERT_OK(gpu->ops->swiglu(gpu, dy, dg, du, n));
        float *out = dev_fetch(dy, n);
        char shape[96];
        snprintf(shape, sizeof shape, "n=%zu", n);
        record("swiglu", shape, out, ref, n, 1e-5);
        free(out);
        ASSERT_OK(gpu->ops->swiglu(gpu, dg, dg, du, n)); /* in place, as the model calls it */
        out = dev_fetch(dg, n);
        snprintf(shape, sizeof shape, "n=%zu in-place", n);
        record("swiglu", shape, out, ref, n, 1e-5);
        free(out);

        memcpy(ref, g, n * sizeof *ref);
        ASSERT_OK(cpu->ops->add(cpu, ref, u, n));
        ASSERT_OK(gpu->ops->upload(gpu, dg, g, n * sizeof *g));
        ASSERT_OK(gpu->ops->add(gpu, dg, du, n));
        out = dev_fetch(dg, n);
        snprintf(shape, sizeof shape, "n=%zu", n);
        record("add", shape, out, ref, n, 0);
        dev_free(dg), dev_free(du), dev_free(dy);
        free(g), free(u), free(ref), free(out);
    }
    assert_op_passed("swiglu");
    assert_op_passed("add");

    /* Gemma's blocks. Tolerances: geglu and softcap 1e-6 (tanhf differs in the last bits; one
     * element alone is not compared, where 1 + tanh(x) of a large negative x is all rounding),
     * scale 0 (one rounding on both sides). */
    for (size_t k = 1; k < sizeof sizes / sizeof *sizes; k++) {
        uint64_t rng = 5200 + k;
        const size_t n = sizes[k];
        float *g = rand_array(n, 8.f, &rng), *u = rand_array(n, 2.f, &rng), *ref = nan_array(n);
        char shape[96];
        snprintf(shape, sizeof shape, "n=%zu", n);
        ASSERT_OK(cpu->ops->geglu(cpu, ref, g, u, n));
        float *dg = dev_copy(g, n), *du = dev_copy(u, n), *dy = dev_nan(n);
        ASSERT_OK(gpu->ops->geglu(gpu, dy, dg, du, n));
        float *out = dev_fetch(dy, n);
        record("geglu", shape, out, ref, n, 1e-6);
        free(out);
        ASSERT_OK(gpu->ops->geglu(gpu, dg, dg, du, n)); /* in place, as the model calls it */
        out = dev_fetch(dg, n);
        snprintf(shape, sizeof shape, "n=%zu in-place", n);
        record("geglu", shape, out, ref, n, 1e-6);
        free(out);
        /* in place: an element the op leaves alone keeps its input, far from the result */
        static const float caps[] = {30.f, 0.5f};
        for (int c = 0; c < 2; c++) {
            memcpy(ref, g, n * sizeof *ref);
            ASSERT_OK(cpu->ops->softcap(cpu, ref, caps[c], n));
            ASSERT_OK(gpu->ops->upload(gpu, dy, g, n * sizeof *g));
            ASSERT_OK(gpu->ops->softcap(gpu, dy, caps[c], n));
            out = dev_fetch(dy, n);
            snprintf(shape, sizeof shape, "n=%zu cap=%g", n, caps[c]);
            record("softcap", shape, out, ref, n, 1e-6);
            free(out);
        }
        memcpy(ref, g, n * sizeof *ref);
        ASSERT_OK(cpu->ops->scale(cpu, ref, 25.298221f, n));
        ASSERT_OK(gpu->ops->upload(gpu, dy, g, n * sizeof *g));
        ASSERT_OK(gpu->ops->scale(gpu, dy, 25.298221f, n));
        out = dev_fetch(dy, n);
        snprintf(shape, sizeof shape, "n=%zu s=sqrt(640)", n);
        record("scale", shape, out, ref, n, 0);
        dev_free(dg), dev_free(du), dev_free(dy);
        free(g), free(u), free(ref), free(out);
    }
    assert_op_passed("geglu");
    assert_op_passed("softcap");
    assert_op_passed("scale");

    static const struct {
        int n_src, n_rows, D, in_place;
    } gc[] = {{1, 1, 96, 0}, {9, 5, 4096, 0}, {64, 64, 200, 0}, {64, 17, 96, 1}, {300, 40, 4096, 1}};
    for (size_t k = 0; k < sizeof gc / sizeof *gc; k++) {
        uint64_t rng = 5500 + k;
        const int D = gc[k].D, nr = gc[k].n_rows, ns = gc[k].n_src;
        float *x = rand_array((size_t)ns * D, 1.f, &rng);
        int32_t *rows = malloc(nr * sizeof *rows);
        /* in place the rows must ascend with rows[i] >= i, as the model's out_rows do */
        for (int i = 0, r = 0; i < nr; i++) {
            if (gc[k].in_place) {
                int left = nr - i, room = ns - r - left;
                r += room > 0 ? (int)(tu_rand_u64(&rng) % (uint64_t)(room + 1)) : 0;
                rows[i] = r++;
            } else {
                rows[i] = (int32_t)(tu_rand_u64(&rng) % (uint64_t)ns);
            }
        }
        float *ref = nan_array((size_t)nr * D);
        ASSERT_OK(cpu->ops->gather_rows(cpu, ref, x, rows, nr, D));
        float *dx = dev_copy(x, (size_t)ns * D);
        float *dy = gc[k].in_place ? dx : dev_nan((size_t)nr * D);
        ASSERT_OK(gpu->ops->gather_rows(gpu, dy, dx, rows, nr, D));
        float *out = dev_fetch(dy, (size_t)nr * D);
        char shape[96];
        snprintf(shape, sizeof shape, "src=%d rows=%d D=%d%s", ns, nr, D, gc[k].in_place ? " in-place" : "");
        record("gather_rows", shape, out, ref, (size_t)nr * D, 0);
        if (dy != dx)
            dev_free(dy);
        dev_free(dx);
        free(x), free(rows), free(ref), free(out);
    }
    assert_op_passed("gather_rows");
}

/* ---- index arrays uploaded once per forward call ----------------------------------------- */

/* A batch of T <= 16 tokens of one sequence on page 0 (row t: token t), for ops that take
 * their index arrays from batch_begin. */
typedef struct {
    int32_t page[16], row[16], seq_pages[1], len0[1], off[2], toks[16], tseq[16], tslot[16];
    seer_attn_batch ab;
} one_seq;

static void one_seq_batch(one_seq *b, int T, int n_heads, int head_dim) {
    assert_true(T <= 16);
    memset(b, 0, sizeof *b);
    b->off[1] = T;
    for (int t = 0; t < T; t++)
        b->row[t] = b->toks[t] = b->tslot[t] = t;
    b->ab = (seer_attn_batch){.T = T, .n_heads = n_heads, .n_kv_heads = n_heads, .head_dim = head_dim,
                              .scale = 1.f / sqrtf((float)head_dim), .page_size = 16, .n_seq = 1,
                              .max_pages = 1, .seq_pages = b->seq_pages, .seq_len0 = b->len0,
                              .seq_tok_off = b->off, .seq_toks = b->toks, .tok_seq = b->tseq,
                              .tok_slot = b->tslot};
}

/* RoPE's frequencies, base 10000, host and device copies. */
static float *rope_freqs(float *fr, int head_dim) {
    for (int i = 0; i < head_dim / 2; i++)
        fr[i] = (float)pow(10000.0, -2.0 * i / head_dim);
    return dev_copy(fr, head_dim / 2);
}

/* embed, rope and gather_rows given the arrays batch_begin uploaded, then the same host
 * arrays with changed contents (the backend must notice and not use its stale copy). */
static void test_batch_index(void **state) {
    (void)state;
    uint64_t rng = 6000;
    enum { T = 9, V = 500, D = 128, NH = 4, DH = 32 };
    host_tensor ht;
    make_tensor(&ht, "token_embd", GGML_TYPE_BF16, V, D, &rng);
    seer_weight wc, wg;
    ASSERT_OK(cpu->ops->weight_load(cpu, &ht.t, SEER_WEIGHTS_F32, &wc));
    ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wg));
    int32_t tok[T], pos[T], out_rows[3] = {2, 5, 8};
    for (int t = 0; t < T; t++) {
        tok[t] = (int32_t)(tu_rand_u64(&rng) % V);
        pos[t] = 1000 + t;
    }
    one_seq b;
    one_seq_batch(&b, T, NH, DH);
    float fr[DH / 2];
    float *dfr = rope_freqs(fr, DH);
    float *x = rand_array((size_t)T * NH * DH, 1.f, &rng);
    float *dq = dev_alloc((size_t)T * NH * DH * sizeof(float));
    float *de = dev_nan((size_t)T * D), *dg = dev_nan((size_t)3 * D);
    float *ref = nan_array((size_t)T * NH * DH);
    ASSERT_OK(gpu->ops->batch_begin(gpu, &b.ab, tok, pos, b.page, b.row, out_rows, 3));
    for (int round = 0; round < 2; round++) {
        const char *how = round ? "changed host arrays" : "batch copies";
        char shape[96];
        ASSERT_OK(cpu->ops->embed(cpu, ref, &wc, tok, T));
        ASSERT_OK(gpu->ops->embed(gpu, de, &wg, tok, T));
        float *out = dev_fetch(de, (size_t)T * D);
        snprintf(shape, sizeof shape, "T=%d D=%d bf16 (%s)", T, D, how);
        record("embed", shape, out, ref, (size_t)T * D, 0);
        free(out);

        float *ref2 = nan_array((size_t)3 * D);
        ASSERT_OK(cpu->ops->gather_rows(cpu, ref2, ref, out_rows, 3, D));
        ASSERT_OK(gpu->ops->gather_rows(gpu, dg, de, out_rows, 3, D));
        out = dev_fetch(dg, (size_t)3 * D);
        snprintf(shape, sizeof shape, "rows=3 D=%d (%s)", D, how);
        record("gather_rows", shape, out, ref2, (size_t)3 * D, 0);
        free(out), free(ref2);

        memcpy(ref, x, (size_t)T * NH * DH * sizeof *ref);
        ASSERT_OK(cpu->ops->rope(cpu, ref, pos, T, NH, DH, fr, 0));
        ASSERT_OK(gpu->ops->upload(gpu, dq, x, (size_t)T * NH * DH * sizeof *x));
        ASSERT_OK(gpu->ops->rope(gpu, dq, pos, T, NH, DH, dfr, 0));
        out = dev_fetch(dq, (size_t)T * NH * DH);
        snprintf(shape, sizeof shape, "T=%d heads=%d Dh=%d (%s)", T, NH, DH, how);
        record("rope", shape, out, ref, (size_t)T * NH * DH, 1e-5);
        free(out);
        /* same pointers, new contents */
        tok[3] = (tok[3] + 7) % V;
        pos[2] += 5000;
        out_rows[0] = 0;
    }
    cpu->ops->weight_free(cpu, &wc);
    gpu->ops->weight_free(gpu, &wg);
    dev_free(dfr), dev_free(dq), dev_free(de), dev_free(dg);
    free(x), free(ref), free(ht.data);
    assert_op_passed("embed");
    assert_op_passed("gather_rows");
    assert_op_passed("rope");
}

/* A forward call whose recording fails (an op reports an error while the backend records
 * the call as a CUDA graph) runs again op by op: rope then gives what it gives unrecorded, at
 * the new call's positions (work the recording only queued, such as the RoPE table of the
 * call, is done again). The key's next call is recorded, the one after replayed. */
static void test_failed_recording(void **state) {
    (void)state;
    if (!gpu->ops->forward_begin)
        skip();
    uint64_t rng = 6100;
    enum { T = 9, CAP = 64, NH = 4, DH = 32 };
    int32_t tok[T], pos[T], out_rows[1] = {T - 1};
    for (int t = 0; t < T; t++)
        tok[t] = t;
    one_seq b;
    one_seq_batch(&b, T, NH, DH);
    float fr[DH / 2];
    float *dfr = rope_freqs(fr, DH);
    const size_t n = (size_t)CAP * NH * DH;
    float *x = rand_array(n, 1.f, &rng), *ref = nan_array(n);
    float *dq = dev_alloc(n * sizeof(float));
    static int key; /* the caller's buffers: one shape, one sequence of ops */
    long rep0, cap0, eag0, redo0, rep, cap, eag, redo;
    seer_backend_cuda_graph_stats(gpu, &rep0, &cap0, &eag0, &redo0);
    static const char *what[4] = {"warm-up", "recording failed, redone", "recorded", "replayed"};
    for (int call = 0; call < 4; call++) {
        for (int t = 0; t < T; t++)
            pos[t] = 100 + 40 * call + t;
        ASSERT_OK(gpu->ops->upload(gpu, dq, x, n * sizeof *x));
        ASSERT_OK(gpu->ops->batch_begin(gpu, &b.ab, tok, pos, b.page, b.row, out_rows, 1));
        int Tp = T, n_out = 1;
        bool done = false, redo_asked = false;
        ASSERT_OK(gpu->ops->forward_begin(gpu, &key, CAP, &Tp, &n_out, &done));
        assert_int_equal(done, call == 3);
        assert_true(Tp >= T && Tp <= CAP);
        seer_status s = done ? SEER_OK : gpu->ops->rope(gpu, dq, pos, Tp, NH, DH, dfr, 0);
        ASSERT_OK(gpu->ops->forward_end(gpu, call == 1 && s == SEER_OK ? SEER_ERR_INTERNAL : s, &redo_asked));
        assert_int_equal(redo_asked, call == 1);
        if (redo_asked) {
            ASSERT_OK(gpu->ops->rope(gpu, dq, pos, Tp, NH, DH, dfr, 0));
            ASSERT_OK(gpu->ops->forward_end(gpu, SEER_OK, &redo_asked));
            assert_false(redo_asked);
        }
        memcpy(ref, x, (size_t)T * NH * DH * sizeof *ref);
        ASSERT_OK(cpu->ops->rope(cpu, ref, pos, T, NH, DH, fr, 0));
        float *out = dev_fetch(dq, (size_t)T * NH * DH);
        char shape[96];
        snprintf(shape, sizeof shape, "T=%d heads=%d Dh=%d, call %d: %s", T, NH, DH, call, what[call]);
        record("rope", shape, out, ref, (size_t)T * NH * DH, 1e-5);
        free(out);
    }
    seer_backend_cuda_graph_stats(gpu, &rep, &cap, &eag, &redo);
    printf("failed recording: %ld redone, %ld recorded, %ld replayed\n", redo - redo0, cap - cap0, rep - rep0);
    assert_int_equal(redo - redo0, 1);
    assert_int_equal(cap - cap0, 1);
    assert_int_equal(rep - rep0, 1);
    dev_free(dfr), dev_free(dq);
    free(x), free(ref);
    assert_op_passed("rope");
}

/* ---- attention ---------------------------------------------------------------------------- */

#define MAX_SEQ 8

typedef struct {
    const char *name;
    int Hkv, group, Dh, ps, n_layers, layer;
    int n_seq, len0[MAX_SEQ], ntok[MAX_SEQ];
    int mask;       /* random trees among each sequence's new tokens (+ cross-sequence noise) */
    int view;       /* 0 none; 1 shared list on seq 0; 2 per-layer/per-head lists on every seq;
                       3 seq 0 tail_start 0, seq 1 tail_start past len0 */
    int fork;       /* seq 1 starts as a copy of seq 0's cached pages (kv_copy_pages) */
    int interleave; /* tokens of the sequences interleaved in the batch */
    int window;     /* > 0: a windowed layer's call (positions: a tree token's is len0 + its
                       depth), planned by batch_begin without the window, as decoder.c does */
    float cap;      /* > 0: soft-capped scores */
} attn_case;

/* A check's power: out must be over tol from the reference of a slightly different call (a
 * window one longer or shorter, no soft-capping), or the check could not tell the two apart. */
static void record_differs(const char *shape, const float *out, const float *alt, size_t n, double tol) {
    const double e = l2_rel_err(out, alt, n);
    printf("%-10s %-78s rel_err=%.3e must exceed %.1e %s\n", "attention-power", shape, e, tol,
           e > tol ? "ok" : "FAIL");
    op_stat *st = stat_of("attention-power");
    st->cases++;
    st->fails += !(e > tol);
}

/* n distinct values of [0, range), ascending. */
static int32_t *rand_subset(int n, int range, uint64_t *rng) {
    int32_t *all = malloc((size_t)(range > 0 ? range : 1) * sizeof *all);
    for (int i = 0; i < range; i++)
        all[i] = i;
    for (int i = 0; i < n; i++) {
        int j = i + (int)(tu_rand_u64(rng) % (uint64_t)(range - i));
        int32_t t = all[i];
        all[i] = all[j];
        all[j] = t;
    }
    for (int i = 1; i < n; i++) /* insertion sort of the first n */
        for (int j = i; j > 0 && all[j - 1] > all[j]; j--) {
            int32_t t = all[j];
            all[j] = all[j - 1];
            all[j - 1] = t;
        }
    return all;
}

/* Writes random K/V for slots [0, len) of a sequence into every layer of both caches. */
static void fill_cache(void *kc, void *kg, const seer_kv_geom *g, const int32_t *pages, int len,
                       bool exact, uint64_t *rng) {
    enum { CH = 8192 };
    const size_t kvd = (size_t)g->n_kv_heads * g->head_dim;
    float *dk = dev_alloc(CH * kvd * sizeof(float)), *dv = dev_alloc(CH * kvd * sizeof(float));
    int32_t *page = malloc(CH * sizeof *page), *row = malloc(CH * sizeof *row);
    for (int l = 0; l < g->n_layers; l++)
        for (int s0 = 0; s0 < len; s0 += CH) {
            const int n = len - s0 < CH ? len - s0 : CH;
            float *k = rand_array((size_t)n * kvd, 1.f, rng), *v = rand_array((size_t)n * kvd, 1.f, rng);
            if (exact) {
                to_bf16_exact(k, (size_t)n * kvd);
                to_bf16_exact(v, (size_t)n * kvd);
            }
            for (int i = 0; i < n; i++) {
                page[i] = pages[(s0 + i) / g->page_size];
                row[i] = (s0 + i) % g->page_size;
            }
            ASSERT_OK(cpu->ops->kv_store(cpu, kc, g, l, k, v, page, row, n));
            ASSERT_OK(gpu->ops->upload(gpu, dk, k, (size_t)n * kvd * sizeof *k));
            ASSERT_OK(gpu->ops->upload(gpu, dv, v, (size_t)n * kvd * sizeof *v));
            ASSERT_OK(gpu->ops->kv_store(gpu, kg, g, l, dk, dv, page, row, n));
            free(k), free(v);
        }
    dev_free(dk), dev_free(dv);
    free(page), free(row);
}

/* Tolerance 1e-2: the device cache holds K and V in bf16 (relative 2^-9 per value), which
 * moves scores by ~|q||k| 2^-9 scale and outputs by about the V rounding: ~3e-3.
 * With K and V bf16-exact ("attention-x") the cache is exact and only f32 summation order
 * differs: 1e-4. That tighter check is what catches a single slot seen or missed in error:
 * the output averages n random rows, so one slot moves it by about 1/sqrt(n) relative,
 * 3e-3 at n = 128K. */
static void run_attention_case(const attn_case *ac, bool exact, uint64_t seed) {
    uint64_t rng = seed;
    const int Hkv = ac->Hkv, H = Hkv * ac->group, Dh = ac->Dh, ps = ac->ps, ns = ac->n_seq;
    const size_t kvd = (size_t)Hkv * Dh;
    int need[MAX_SEQ], total = 0, mp = 1, T = 0;
    for (int b = 0; b < ns; b++) {
        need[b] = (ac->len0[b] + ac->ntok[b] + ps - 1) / ps;
        total += need[b];
        mp = need[b] > mp ? need[b] : mp;
        T += ac->ntok[b];
    }
    const int n_pages = total + 3;
    int32_t *perm = malloc(n_pages * sizeof *perm);
    for (int i = 0; i < n_pages; i++)
        perm[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
        int j = (int)(tu_rand_u64(&rng) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *seq_pages = calloc((size_t)ns * mp, sizeof *seq_pages);
    for (int b = 0, next = 0; b < ns; b++)
        for (int p = 0; p < need[b]; p++)
            seq_pages[(size_t)b * mp + p] = perm[next++];
    seer_kv_geom g = {.n_pages = n_pages, .page_size = ps, .n_layers = ac->n_layers,
                      .n_kv_heads = Hkv, .head_dim = Dh};
    void *kc = NULL, *kg = NULL;
    int n_committed = 0;
    ASSERT_OK(cpu->ops->kv_alloc(cpu, &g, &kc));
    ASSERT_OK(gpu->ops->kv_alloc(gpu, &g, &kg));
    ASSERT_OK(cpu->ops->kv_reserve(cpu, kc, &g, g.n_pages, &n_committed));
    ASSERT_OK(gpu->ops->kv_reserve(gpu, kg, &g, g.n_pages, &n_committed));
    for (int b = 0; b < ns; b++)
        if (!(ac->fork && b == 1))
            fill_cache(kc, kg, &g, seq_pages + (size_t)b * mp, ac->len0[b], exact, &rng);
    if (ac->fork) { /* seq 1 = a copy of seq 0's cached pages */
        int np = (ac->len0[0] + ps - 1) / ps;
        seer_kv_copy *cp = malloc((np ? np : 1) * sizeof *cp);
        for (int p = 0; p < np; p++)
            cp[p] = (seer_kv_copy){.src = seq_pages[p], .dst = seq_pages[mp + p]};
        ASSERT_OK(cpu->ops->kv_copy_pages(cpu, kc, &g, cp, np));
        ASSERT_OK(gpu->ops->kv_copy_pages(gpu, kg, &g, cp, np));
        free(cp);
    }

    /* the batch */
    int32_t *tok_seq = malloc(T * sizeof(int32_t)), *tok_slot = malloc(T * sizeof(int32_t));
    int32_t *seq_toks = malloc(T * sizeof(int32_t)), *page = malloc(T * sizeof(int32_t));
    int32_t *row = malloc(T * sizeof(int32_t)), off[MAX_SEQ + 1], len0[MAX_SEQ], done[MAX_SEQ] = {0};
    for (int b = 0; b < ns; b++)
        len0[b] = ac->len0[b];
    for (int t = 0; t < T;) {
        for (int b = 0; b < ns && t < T; b++) {
            int take = ac->interleave ? 1 : ac->ntok[b];
            for (int r = 0; r < take && done[b] < ac->ntok[b]; r++, t++) {
                tok_seq[t] = b;
                tok_slot[t] = len0[b] + done[b]++;
                page[t] = seq_pages[(size_t)b * mp + tok_slot[t] / ps];
                row[t] = tok_slot[t] % ps;
            }
        }
    }
    off[0] = 0;
    for (int b = 0; b < ns; b++) {
        off[b + 1] = off[b] + ac->ntok[b];
        int f = off[b];
        for (int t = 0; t < T; t++)
            if (tok_seq[t] == b)
                seq_toks[f++] = t;
    }
    int32_t *tpos = malloc(T * sizeof(int32_t)); /* positions: the slots, or by tree depth */
    memcpy(tpos, tok_slot, T * sizeof(int32_t));
    uint8_t *mask = NULL;
    if (ac->mask) {
        mask = calloc((size_t)T * T, 1);
        for (size_t i = 0; i < (size_t)T * T; i++)
            mask[i] = tu_rand_u64(&rng) % 10 < 3; /* cross-sequence noise, must be ignored */
        for (int b = 0; b < ns; b++) {
            int n = ac->ntok[b], *parent = malloc((n ? n : 1) * sizeof(int));
            int *depth = malloc((n ? n : 1) * sizeof(int));
            for (int k = 0; k < n; k++) {
                parent[k] = k ? (int)(tu_rand_u64(&rng) % (uint64_t)(k + 1)) - 1 : -1;
                depth[k] = parent[k] < 0 ? 0 : depth[parent[k]] + 1;
                int i = seq_toks[off[b] + k];
                tpos[i] = len0[b] + depth[k];
                for (int k2 = 0; k2 < n; k2++)
                    mask[(size_t)i * T + seq_toks[off[b] + k2]] = 0;
                for (int a = k; a >= 0; a = parent[a])
                    mask[(size_t)i * T + seq_toks[off[b] + a]] = 1;
            }
            free(parent), free(depth);
        }
    }
    seer_attn_view views[MAX_SEQ];
    const seer_attn_view *vptr[MAX_SEQ] = {0};
    int32_t *vidx[MAX_SEQ] = {0};
    for (int b = 0; b < ns && ac->view; b++) {
        const int L0 = ac->len0[b];
        seer_attn_view *v = &views[b];
        memset(v, 0, sizeof *v);
        v->n_layers_view = v->n_heads_view = 1;
        if (ac->view == 1 && b != 0)
            continue;
        if (ac->view == 2) {
            v->n_layers_view = ac->n_layers;
            v->n_heads_view = Hkv;
        }
        const int range = L0 + 8; /* some entries at or past len0: filtered out */
        v->n = range < 24 ? range / 2 : 24;
        if (ac->view == 1)
            v->n = range / 3;
        v->tail_start = ac->view == 3 ? (b == 0 ? 0 : L0 + 5) : L0 - L0 / 4;
        const int nl = v->n_layers_view * v->n_heads_view;
        vidx[b] = malloc(((size_t)nl * v->n + 1) * sizeof(int32_t));
        for (int r = 0; r < nl; r++) {
            int32_t *sub = rand_subset(v->n, range, &rng);
            memcpy(vidx[b] + (size_t)r * v->n, sub, v->n * sizeof(int32_t));
            free(sub);
        }
        v->idx = vidx[b];
        vptr[b] = v;
    }
    seer_attn_batch ab = {.T = T, .n_heads = H, .n_kv_heads = Hkv, .head_dim = Dh,
                          .scale = 1.f / sqrtf((float)Dh), .page_size = ps, .n_seq = ns,
                          .max_pages = mp, .seq_pages = seq_pages, .seq_len0 = len0,
                          .seq_tok_off = off, .seq_toks = seq_toks,
                          .seq_view = ac->view ? vptr : NULL, .tok_seq = tok_seq,
                          .tok_slot = tok_slot, .mask = mask, .window = ac->window,
                          .tok_pos = ac->window ? tpos : NULL, .softcap = ac->cap};
    seer_attn_batch ab0 = ab; /* the call as planned: a global layer's */
    ab0.window = 0;

    /* q scaled up so that the softmax is far from uniform */
    float *q = rand_array((size_t)T * H * Dh, 3.f, &rng);
    float *k = rand_array((size_t)T * kvd, 1.f, &rng), *v = rand_array((size_t)T * kvd, 1.f, &rng);
    if (exact) {
        to_bf16_exact(q, (size_t)T * H * Dh);
        to_bf16_exact(k, (size_t)T * kvd);
        to_bf16_exact(v, (size_t)T * kvd);
    }
    float *ref = nan_array((size_t)T * H * Dh);
    ASSERT_OK(cpu->ops->kv_store(cpu, kc, &g, ac->layer, k, v, page, row, T));
    ASSERT_OK(cpu->ops->attention(cpu, ref, q, kc, &g, ac->layer, &ab));
    float *dq = dev_copy(q, (size_t)T * H * Dh), *dk = dev_copy(k, (size_t)T * kvd);
    float *dv = dev_copy(v, (size_t)T * kvd), *dout = dev_nan((size_t)T * H * Dh);
    ASSERT_OK(gpu->ops->batch_begin(gpu, &ab0, NULL, NULL, page, row, NULL, 0));
    ASSERT_OK(gpu->ops->kv_store(gpu, kg, &g, ac->layer, dk, dv, page, row, T));
    ASSERT_OK(gpu->ops->attention(gpu, dout, dq, kg, &g, ac->layer, &ab));
    float *out = dev_fetch(dout, (size_t)T * H * Dh);
    const size_t nout = (size_t)T * H * Dh;

    char shape[200], lens[64] = "", *p = lens;
    for (int b = 0; b < ns; b++)
        p += snprintf(p, lens + sizeof lens - p, "%s%d+%d", b ? "," : "", ac->len0[b], ac->ntok[b]);
    snprintf(shape, sizeof shape, "%s Hkv=%d grp=%d Dh=%d ps=%d L=%d/%d seq=[%s]%s%s%s w=%d cap=%g", ac->name,
             Hkv, ac->group, Dh, ps, ac->layer, ac->n_layers, lens, ac->mask ? " mask" : "",
             ac->view ? " view" : "", ac->fork ? " fork" : "", ac->window, ac->cap);
    const double tol = exact ? (attn_tc_shape(Dh, ac->group) ? 3e-3 : 1e-4) : 1e-2;
    record(exact ? "attention-x" : "attention", shape, out, ref, nout, tol);
    float *alt = nan_array(nout);
    if (ac->window) { /* the call's global layers: the same plan, no window */
        ASSERT_OK(cpu->ops->attention(cpu, alt, q, kc, &g, ac->layer, &ab0));
        float *dout0 = dev_nan(nout);
        ASSERT_OK(gpu->ops->attention(gpu, dout0, dq, kg, &g, ac->layer, &ab0));
        float *out0 = dev_fetch(dout0, nout);
        char what[240];
        snprintf(what, sizeof what, "%s, global layer", shape);
        record(exact ? "attention-x" : "attention", what, out0, alt, nout, tol);
        dev_free(dout0), free(out0);
    }
    for (int w = 0; exact && w < 3; w++) { /* window + 1, window - 1, no soft-capping */
        if ((w < 2 && !ac->window) || (w == 2 && !(ac->cap > 0)))
            continue;
        seer_attn_batch ab1 = ab;
        if (w < 2)
            ab1.window = ac->window + (w ? -1 : 1);
        else
            ab1.softcap = 0;
        ASSERT_OK(cpu->ops->attention(cpu, alt, q, kc, &g, ac->layer, &ab1));
        char what[240];
        snprintf(what, sizeof what, "%s against %s", shape, w == 0 ? "w+1" : w == 1 ? "w-1" : "no cap");
        record_differs(what, out, alt, nout, tol);
    }
    free(alt);

    /* kv_read of the rows just stored; tolerance 5e-3: the device holds them in bf16 (0
     * when they are bf16-exact) */
    float *rc = nan_array((size_t)T * kvd), *rg = nan_array((size_t)T * kvd);
    for (int which = 0; which < 2; which++) {
        ASSERT_OK(cpu->ops->kv_read(cpu, kc, &g, ac->layer, which, page, row, T, rc));
        ASSERT_OK(gpu->ops->kv_read(gpu, kg, &g, ac->layer, which, page, row, T, rg));
        char what[64];
        snprintf(what, sizeof what, "%s n=%d Hkv=%d Dh=%d", which ? "V" : "K", T, Hkv, Dh);
        record("kv_read", what, rg, rc, (size_t)T * kvd, exact ? 0 : 5e-3);
    }
    free(rc), free(rg);

    cpu->ops->kv_free(cpu, kc);
    gpu->ops->kv_free(gpu, kg);
    dev_free(dq), dev_free(dk), dev_free(dv), dev_free(dout);
    for (int b = 0; b < ns; b++)
        free(vidx[b]);
    free(perm), free(seq_pages), free(tok_seq), free(tok_slot), free(seq_toks), free(page);
    free(row), free(mask), free(q), free(k), free(v), free(ref), free(out), free(tpos);
}

static const attn_case ATTN_CASES[] = {
    /* name        Hkv grp Dh  ps  L  l  ns len0            ntok          mask view fork il w cap */
    {"decode",      2, 4, 128, 16, 1, 0, 1, {100},          {1},          0, 0, 0, 0, 0, 0},
    {"decode-mha",  4, 1, 64,  1,  1, 0, 1, {37},           {1},          0, 0, 0, 0, 0, 0},
    {"chunk",       1, 2, 8,   64, 1, 0, 1, {130},          {3},          0, 0, 0, 0, 0, 0},
    {"prefill",     2, 8, 128, 16, 1, 0, 1, {0},            {64},         0, 0, 0, 0, 0, 0},
    {"prefill",     3, 2, 64,  1,  2, 1, 1, {0},            {17},         0, 0, 0, 0, 0, 0},
    {"empty",       1, 1, 64,  16, 1, 0, 1, {0},            {1},          0, 0, 0, 0, 0, 0},
    {"multi",       2, 4, 64,  16, 1, 0, 3, {0, 45, 300},   {17, 1, 5},   0, 0, 0, 1, 0, 0},
    {"multi",       1, 8, 128, 64, 2, 0, 4, {63, 64, 65, 1}, {2, 1, 3, 64}, 0, 0, 0, 0, 0, 0},
    {"tree",        1, 8, 128, 16, 1, 0, 2, {20, 77},       {5, 9},       1, 0, 0, 1, 0, 0},
    {"tree",        4, 2, 64,  1,  1, 0, 3, {0, 5, 33},     {4, 7, 5},    1, 0, 0, 0, 0, 0},
    {"view-shared", 2, 4, 64,  16, 3, 1, 2, {200, 150},     {1, 5},       0, 1, 0, 0, 0, 0},
    {"view-lh",     4, 2, 128, 16, 2, 1, 2, {300, 41},      {5, 3},       1, 2, 0, 1, 0, 0},
    {"view-tail",   2, 2, 64,  8,  1, 0, 2, {90, 60},       {2, 3},       0, 3, 0, 0, 0, 0},
    {"fork",        2, 4, 64,  16, 1, 0, 2, {37, 37},       {3, 4},       0, 0, 1, 1, 0, 0},
    {"dh10",        2, 3, 10,  16, 1, 0, 2, {50, 7},        {3, 2},       1, 0, 0, 0, 0, 0},
    {"dh40",        1, 12, 40, 16, 1, 0, 1, {513},          {4},          0, 0, 0, 0, 0, 0},
    {"dh256",       2, 16, 256, 16, 1, 0, 2, {700, 9},      {1, 6},       0, 0, 0, 0, 0, 0},
    {"dh6",         1, 7, 6,   4,  1, 0, 1, {29},           {11},         1, 0, 0, 0, 0, 0},
    {"batch-dec",   2, 4, 128, 16, 1, 0, 8, {2048, 17, 999, 4000, 1, 0, 333, 1500},
                                            {1, 1, 1, 1, 1, 1, 1, 1},     0, 0, 0, 1, 0, 0},
    {"verify",      8, 4, 128, 16, 1, 0, 1, {4096},         {64},         0, 0, 0, 0, 0, 0},
    {"ps1-long",    1, 4, 64,  1,  1, 0, 1, {5000},         {2},          0, 0, 0, 0, 0, 0},
    {"long-128k",   1, 8, 128, 64, 1, 0, 1, {131072},       {1},          0, 0, 0, 0, 0, 0},
    {"long-128k",   2, 4, 128, 16, 1, 0, 1, {131072},       {1},          0, 0, 0, 0, 0, 0},
    {"long-32k",    2, 4, 128, 16, 1, 0, 3, {32768, 20000, 32768}, {1, 5, 3}, 1, 0, 0, 1, 0, 0},
    {"long-view",   2, 4, 128, 16, 1, 0, 1, {32768},        {4},          0, 2, 0, 0, 0, 0},
    /* more than 64 new tokens in a sequence: the tensor-core kernel's prefill kind */
    {"prefill-tc",  8, 4, 128, 16, 1, 0, 1, {0},            {200},        0, 0, 0, 0, 0, 0},
    {"prefill-tc",  2, 4, 64,  16, 1, 0, 3, {1000, 0, 7},   {130, 65, 1}, 0, 0, 0, 1, 0, 0},
    {"prefill-mask", 1, 8, 128, 16, 1, 0, 1, {50},          {100},        1, 0, 0, 0, 0, 0},
    {"prefill-view", 2, 4, 64, 16, 2, 1, 1, {300},          {80},         0, 2, 0, 0, 0, 0},
    {"prefill-mha", 4, 1, 64,  16, 1, 0, 1, {33},           {150},        0, 0, 0, 0, 0, 0},
    /* head size 128: on Hopper the wgmma kernel's (views, one query head per KV head, pages
     * of one slot, 16 query heads per KV head over two sequences) */
    {"prefill-view", 2, 4, 128, 16, 2, 1, 1, {300},         {80},         0, 2, 0, 0, 0, 0},
    {"prefill-mha", 2, 1, 128, 1,  1, 0, 1, {33},           {300},        0, 0, 0, 0, 0, 0},
    {"prefill-g16", 1, 16, 128, 16, 1, 0, 2, {77, 0},       {150, 90},    0, 0, 0, 1, 0, 0},
    /* chunks wide enough to fill an H100's or H200's resident blocks with 128-row items (at
     * least 2 x 132 of them per sequence): a warp over every key of a tile, the result from
     * registers */
    {"prefill-wide", 8, 4, 128, 16, 1, 0, 1, {300},         {1100},       0, 0, 0, 0, 0, 0},
    {"prefill-wide", 8, 4, 128, 16, 1, 0, 2, {0, 40},       {1100, 1060}, 1, 0, 0, 1, 0, 0},
    {"verify-8",    8, 4, 128, 16, 1, 0, 2, {5000, 4095},   {8, 8},       0, 0, 0, 1, 0, 0},
    {"verify-g16",  2, 16, 64, 16, 1, 0, 1, {700},          {5},          0, 0, 0, 0, 0, 0},
    /* windowed layers: the boundary on a page's first slot (256), Dh 64 / 128 / 256, splits,
     * chains, trees (positions by depth), views that the window cuts, prefill kinds, long
     * contexts where most tiles lie behind the window, pages of one slot, a window of 1 */
    {"win-decode",  2, 4, 128, 16, 1, 0, 1, {300},          {1},          0, 0, 0, 0, 45, 0},
    {"win-decode",  2, 16, 256, 16, 2, 1, 2, {700, 9},      {1, 6},       0, 0, 0, 1, 64, 0},
    {"win-chain",   2, 4, 64,  16, 1, 0, 2, {200, 50},      {5, 3},       0, 0, 0, 1, 32, 0},
    {"win-tree",    1, 8, 128, 16, 1, 0, 2, {100, 40},      {6, 9},       1, 0, 0, 1, 20, 0},
    {"win-tree",    2, 2, 256, 4,  1, 0, 2, {60, 33},       {7, 5},       1, 0, 0, 0, 9, 2.f},
    {"win-view",    2, 4, 64,  16, 2, 1, 2, {300, 150},     {1, 5},       0, 2, 0, 0, 50, 0},
    {"win-view",    2, 8, 256, 16, 1, 0, 1, {400},          {3},          0, 1, 0, 0, 70, 0},
    {"win-prefill", 8, 4, 128, 16, 1, 0, 1, {0},            {200},        0, 0, 0, 0, 50, 0},
    {"win-prefill", 2, 4, 64,  16, 1, 0, 3, {1000, 0, 7},   {130, 65, 1}, 0, 0, 0, 1, 100, 0},
    {"win-prefill", 2, 2, 256, 16, 1, 0, 1, {0},            {150},        0, 0, 0, 0, 40, 0},
    {"win-long",    2, 4, 128, 16, 1, 0, 1, {32768},        {4},          0, 0, 0, 0, 1024, 0},
    {"win-long",    1, 8, 256, 64, 1, 0, 1, {20000},        {1},          0, 0, 0, 0, 4096, 0},
    {"win-ps1",     1, 4, 64,  1,  1, 0, 1, {500},          {3},          0, 0, 0, 0, 7, 0},
    {"win-1",       2, 4, 128, 16, 1, 0, 1, {50},           {3},          0, 0, 0, 0, 1, 0},
    /* soft-capped scores (Gemma 2), alone and with a window */
    {"softcap",     2, 4, 128, 16, 1, 0, 2, {300, 20},      {1, 5},       0, 0, 0, 1, 0, 2.f},
    {"softcap",     8, 4, 128, 16, 1, 0, 1, {0},            {200},        0, 0, 0, 0, 0, 3.f},
    {"softcap",     2, 8, 256, 16, 1, 0, 2, {500, 3},       {1, 4},       0, 0, 0, 0, 0, 2.f},
    {"win+cap",     2, 4, 64,  16, 1, 0, 1, {700},          {70},         0, 0, 0, 0, 128, 3.f},
    {"win+cap",     4, 2, 256, 16, 1, 0, 1, {5000},         {5},          0, 0, 0, 0, 4096, 2.5f},
    /* head size 96 (Phi-3): the tensor-core kinds, whose threads then copy columns of
     * different keys (decode, chains, trees, batches, prefill, windows, pages of one slot) */
    {"dh96-decode", 4, 1, 96,  16, 1, 0, 2, {3000, 17},     {1, 1},       0, 0, 0, 1, 0, 0},
    {"dh96-chain",  2, 4, 96,  16, 1, 0, 2, {700, 64},      {8, 5},       0, 0, 0, 1, 0, 0},
    {"dh96-tree",   4, 1, 96,  16, 1, 0, 2, {300, 20},      {9, 6},       1, 0, 0, 0, 0, 0},
    {"dh96-prefill", 4, 1, 96, 16, 1, 0, 2, {100, 0},       {150, 70},    0, 0, 0, 1, 0, 0},
    {"dh96-mask",   2, 2, 96,  1,  1, 0, 1, {40},           {90},         1, 0, 0, 0, 0, 0},
    {"dh96-win",    2, 4, 96,  16, 1, 0, 2, {2000, 30},     {3, 100},     0, 0, 0, 1, 256, 0},
};

static void test_attention(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof ATTN_CASES / sizeof *ATTN_CASES; k++) {
        run_attention_case(&ATTN_CASES[k], false, 7000 + k);
        run_attention_case(&ATTN_CASES[k], true, 8000 + k);
    }
    assert_op_passed("attention");
    assert_op_passed("attention-x");
    assert_op_passed("attention-power");
    assert_op_passed("kv_read");
}

/* ---- failures are statuses with messages ------------------------------------------------ */

static void test_errors(void **state) {
    (void)state;
    void *p = NULL;
    assert_int_equal(gpu->ops->alloc(gpu, (size_t)1 << 52, &p), SEER_ERR_OOM);
    assert_null(p);
    printf("alloc 4 PiB: %s\n", seer_last_error());
    assert_non_null(strstr(seer_last_error(), "CUDA: cannot allocate"));
    assert_non_null(strstr(seer_last_error(), "MiB free of"));
    /* the backend still works after a refused allocation */
    float h[5] = {1, 2, 3, 4, 5}, back[5];
    float *d = dev_copy(h, 5);
    ASSERT_OK(gpu->ops->download(gpu, back, d, sizeof back));
    assert_memory_equal(back, h, sizeof h);
    dev_free(d);

    /* a weight of a type the dequantiser does not know */
    char junk[256] = {0};
    gguf_tensor t = {.name = "blk.0.odd", .n_dims = 2, .ne = {256, 1, 1, 1}, .type = GGML_TYPE_Q2_K,
                     .data = junk, .nbytes = sizeof junk};
    seer_weight w;
    assert_int_not_equal(gpu->ops->weight_load(gpu, &t, SEER_WEIGHTS_STORED, &w), SEER_OK);
    printf("q2_K weight: %s\n", seer_last_error());
    assert_non_null(strstr(seer_last_error(), "blk.0.odd"));

    /* a KV cache that cannot fit */
    seer_kv_geom g = {.n_pages = 1 << 20, .page_size = 4096, .n_layers = 1, .n_kv_heads = 1,
                      .head_dim = 256};
    void *kv = NULL;
    assert_int_equal(gpu->ops->kv_alloc(gpu, &g, &kv), SEER_ERR_OOM);
    printf("4 TiB KV cache: %s\n", seer_last_error());
    assert_non_null(strstr(seer_last_error(), "KV cache"));
    assert_null(kv);
    /* and an odd head size is refused by attention, not run */
    seer_attn_batch ab = {.T = 1, .n_heads = 2, .n_kv_heads = 1, .head_dim = 7};
    seer_kv_geom g2 = {.n_pages = 1, .page_size = 1, .n_layers = 1, .n_kv_heads = 1, .head_dim = 7};
    assert_int_not_equal(gpu->ops->attention(gpu, NULL, NULL, NULL, &g2, 0, &ab), SEER_OK);
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),      cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_rmsnorm),     cmocka_unit_test(test_rope),
        cmocka_unit_test(test_embed),       cmocka_unit_test(test_batch_index),
        cmocka_unit_test(test_rope_kv_store), cmocka_unit_test(test_attention),
        cmocka_unit_test(test_kv_move_rows), cmocka_unit_test(test_failed_recording),
    };
    return ops_run(tests, sizeof tests / sizeof *tests);
#else
    return ops_run(NULL, 0);
#endif
}
