/*
 * test_backend_ops_kvh.c: the KV host tier's copies of the CUDA backend (kv_host_copy on its
 * copy stream, kv_host_done, kv_host_wait) against the CPU's memcpy: random K/V stored in some
 * pages (with a quantised copy of 4 or 8 bits in some cases), copied to poisoned host slots
 * (scattered, and in consecutive runs) right after the stores are issued, then back into
 * other, NaN-poisoned pages. The rows read back equal the device's originals bit for bit and
 * the CPU's within bf16; copied out again, every byte of a slot (the quantised copy's too)
 * equals the first copy; the bytes of a slot past its page stay untouched; tickets complete
 * in order; bad pages, strides and tickets are refused.
 *
 * Skips (via cmocka's skip()) when built without CUDA or when no CUDA device is present.
 */
#include "ops_harness.h"

#ifdef SEER_HAVE_CUDA

static void store_random(seer_backend *be, void *kv, const seer_kv_geom *g, const int32_t *page,
                         const int32_t *row, int T, uint64_t seed, bool device) {
    const size_t nk = (size_t)T * g->n_kv_heads * g->head_dim;
    for (int l = 0; l < g->n_layers; l++) {
        uint64_t rng = seed + l;
        float *k = rand_array(nk, 1.f, &rng), *v = rand_array(nk, 1.f, &rng);
        if (device) {
            float *dk = dev_copy(k, nk), *dv = dev_copy(v, nk);
            ASSERT_OK(be->ops->batch_begin(be, NULL, NULL, NULL, page, row, NULL, 0));
            ASSERT_OK(be->ops->kv_store(be, kv, g, l, dk, dv, page, row, T));
            dev_free(dk), dev_free(dv);
        } else {
            ASSERT_OK(be->ops->kv_store(be, kv, g, l, k, v, page, row, T));
        }
        free(k), free(v);
    }
}

static void test_kv_host_copy(void **state) {
    (void)state;
    static const struct {
        int Hkv, Dh, ps, layers, bits;
    } cases[] = {{2, 64, 4, 2, 0}, {8, 128, 16, 3, 8}, {1, 64, 1, 1, 4}, {4, 128, 16, 2, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const int ps = cases[k].ps, T = 5 * ps, np = 5;
        seer_kv_geom g = {.n_pages = 2 * np + 2, .page_size = ps, .n_layers = cases[k].layers,
                          .n_kv_heads = cases[k].Hkv, .head_dim = cases[k].Dh, .kv_bits = cases[k].bits};
        void *kc, *kg;
        int nc = 0;
        ASSERT_OK(cpu->ops->kv_alloc(cpu, &g, &kc));
        ASSERT_OK(gpu->ops->kv_alloc(gpu, &g, &kg));
        ASSERT_OK(cpu->ops->kv_reserve(cpu, kc, &g, g.n_pages, &nc));
        ASSERT_OK(gpu->ops->kv_reserve(gpu, kg, &g, g.n_pages, &nc));
        const size_t pbg = gpu->ops->kv_page_bytes(gpu, &g), pbc = cpu->ops->kv_page_bytes(cpu, &g);
        const size_t stride = (pbg > pbc ? pbg : pbc) + 256;
        int32_t page[80], row[80], dpage[80];
        /* source pages 1..np, destination pages np+1..2np; slots 7 5 6 1 0: a run (5, 6) and
         * scattered ones */
        int32_t src[5], dst[5], slots[5] = {7, 5, 6, 1, 0}, slots2[5] = {2, 3, 4, 8, 9};
        for (int i = 0; i < np; i++)
            src[i] = 1 + i, dst[i] = np + 1 + i;
        for (int t = 0; t < T; t++)
            page[t] = src[t / ps], dpage[t] = dst[t / ps], row[t] = t % ps;
        store_random(cpu, kc, &g, page, row, T, 900 + k, false);
        store_random(gpu, kg, &g, page, row, T, 900 + k, true);
        uint8_t *hg = NULL, *hc = malloc(stride * 10);
        ASSERT_OK(gpu->ops->host_alloc(gpu, stride * 10, (void **)&hg));
        memset(hg, 0xA5, stride * 10);
        memset(hc, 0xA5, stride * 10);
        /* issued right behind the stores: the copy waits for them on its own stream */
        uint64_t t1 = 0, t2 = 0, tc = 0;
        ASSERT_OK(gpu->ops->kv_host_copy(gpu, kg, &g, hg, stride, src, slots, np, true, &t1));
        ASSERT_OK(cpu->ops->kv_host_copy(cpu, kc, &g, hc, stride, src, slots, np, true, &tc));
        ASSERT_OK(gpu->ops->kv_host_wait(gpu, t1));
        bool done = false;
        ASSERT_OK(gpu->ops->kv_host_done(gpu, t1, &done));
        assert_true(done);
        for (int s = 0; s < 10; s++)
            for (size_t b = pbg; b < stride; b++)
                assert_int_equal(hg[stride * s + b], 0xA5);
        /* back into the poisoned pages, then out again into other slots */
        ASSERT_OK(gpu->ops->kv_host_copy(gpu, kg, &g, hg, stride, dst, slots, np, false, &t2));
        ASSERT_OK(cpu->ops->kv_host_copy(cpu, kc, &g, hc, stride, dst, slots, np, false, &tc));
        assert_true(t2 > t1);
        uint64_t t3 = 0;
        ASSERT_OK(gpu->ops->kv_host_copy(gpu, kg, &g, hg, stride, dst, slots2, np, true, &t3));
        ASSERT_OK(gpu->ops->kv_host_wait(gpu, t3));
        ASSERT_OK(gpu->ops->kv_host_done(gpu, t2, &done)); /* an earlier ticket is complete too */
        assert_true(done);
        for (int i = 0; i < np; i++)
            assert_memory_equal(hg + stride * slots[i], hg + stride * slots2[i], pbg);
        const size_t nk = (size_t)T * g.n_kv_heads * g.head_dim;
        float *orig = nan_array(nk), *back = nan_array(nk), *ref = nan_array(nk);
        char shape[128];
        for (int l = 0; l < g.n_layers; l++)
            for (int w = 0; w < 2; w++) {
                ASSERT_OK(gpu->ops->kv_read(gpu, kg, &g, l, w, page, row, T, orig));
                ASSERT_OK(gpu->ops->kv_read(gpu, kg, &g, l, w, dpage, row, T, back));
                ASSERT_OK(cpu->ops->kv_read(cpu, kc, &g, l, w, dpage, row, T, ref));
                snprintf(shape, sizeof shape, "Hkv=%d Dh=%d ps=%d bits=%d layer %d %s", g.n_kv_heads, g.head_dim,
                         ps, g.kv_bits, l, w ? "V" : "K");
                record("kv_host_copy", shape, back, ref, nk, 5e-3);
                record("kv_host_copy-exact", shape, back, orig, nk, 0);
            }
        free(orig), free(back), free(ref);
        /* refused: a page outside the pool, slots smaller than a page, a ticket never issued */
        const int32_t bad = g.n_pages;
        uint64_t tb = 0;
        assert_int_equal(gpu->ops->kv_host_copy(gpu, kg, &g, hg, stride, &bad, slots, 1, true, &tb),
                         SEER_ERR_INVALID_ARG);
        assert_int_equal(gpu->ops->kv_host_copy(gpu, kg, &g, hg, pbg - 1, src, slots, 1, true, &tb),
                         SEER_ERR_INVALID_ARG);
        assert_int_equal(gpu->ops->kv_host_wait(gpu, t3 + 100), SEER_ERR_INVALID_ARG);
        gpu->ops->host_free(gpu, hg);
        free(hc);
        gpu->ops->kv_free(gpu, kg);
        cpu->ops->kv_free(cpu, kc);
    }
    assert_op_passed("kv_host_copy");
    assert_op_passed("kv_host_copy-exact");
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_kv_host_copy)};
    return ops_run(tests, sizeof tests / sizeof *tests);
#else
    return ops_run(NULL, 0);
#endif
}
