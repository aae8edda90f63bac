/*
 * test_kv_quant.c: the quantised KV copy (kv/kv_quant.h) and the CPU backend's use of it.
 * Round trips stay within half a quantisation step of each group; the store, the page copy
 * and the random fill keep the copy beside the rows; attention through the copy equals the
 * reference attention over the dequantised rows, bit for bit (the same arithmetic on the same
 * values), across decode steps, ragged batches, views, masks and prompt-sized runs; attention
 * over the rows does not change when a copy is kept; the context counts the copy in the
 * pool and refuses what cannot work.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "kv/kv_quant.h"
#include "spec/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *rand_x(size_t n, float scale, uint64_t *rng) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * tu_rand_uniform(rng);
    return x;
}

/* |x - dequant(quant(x))| <= step / 2 per group (step = (max - min) / (2^bits - 1)), with
 * room for the rounding of min + q * step in f32. */
static void test_round_trip(void **state) {
    (void)state;
    static const int kvds[] = {1, 7, 8, 31, 32, 33, 64, 100, 128, 896};
    uint64_t rng = 5;
    for (int bits = 4; bits <= 8; bits += 4)
        for (size_t c = 0; c < sizeof kvds / sizeof *kvds; c++) {
            const int kvd = kvds[c];
            for (int rep = 0; rep < 20; rep++) {
                /* scales from tiny to large, an offset, and sometimes a constant group */
                const float scale = powf(10.f, (float)(rep % 7) - 3.f), off = rep % 3 ? 0.f : 5.f * scale;
                float *x = rand_x((size_t)kvd, scale, &rng);
                for (int e = 0; e < kvd; e++)
                    x[e] += off;
                if (rep == 19)
                    for (int e = 0; e < kvd && e < SEER_KVQ_GROUP; e++)
                        x[e] = 0.25f;
                const size_t rb = seer_kvq_row_bytes(kvd, bits);
                uint8_t *q = malloc(rb);
                memset(q, 0xA5, rb); /* the quantiser must write every byte it later reads */
                seer_kvq_quantize_row(x, kvd, bits, q);
                float *y = malloc(sizeof(float) * kvd);
                seer_kvq_dequantize(q, kvd, bits, 0, kvd, y);
                for (int g0 = 0; g0 < kvd; g0 += SEER_KVQ_GROUP) {
                    const int g1 = g0 + SEER_KVQ_GROUP < kvd ? g0 + SEER_KVQ_GROUP : kvd;
                    float mn = x[g0], mx = x[g0];
                    for (int e = g0; e < g1; e++)
                        mn = fminf(mn, x[e]), mx = fmaxf(mx, x[e]);
                    const double step = (mx - mn) / (double)((1 << bits) - 1);
                    const double tol = step / 2 * (1 + 1e-5) + 4 * 1.2e-7 * fmax(fabs(mn), fabs(mx));
                    for (int e = g0; e < g1; e++)
                        if (fabs((double)y[e] - x[e]) > tol)
                            fail_msg("bits %d kvd %d rep %d: element %d is %g, stored %g (step %g)", bits,
                                     kvd, rep, e, y[e], x[e], step);
                    if (mx == mn) /* a constant group comes back exactly */
                        for (int e = g0; e < g1; e++)
                            assert_true(y[e] == x[e]);
                }
                /* a part of the row decodes as the same part of the whole */
                if (kvd > 9) {
                    float part[4];
                    seer_kvq_dequantize(q, kvd, bits, 5, 4, part);
                    assert_memory_equal(part, y + 5, sizeof part);
                }
                free(x), free(q), free(y);
            }
        }
    assert_int_equal(seer_kvq_row_bytes(128, 0), 0);
    assert_int_equal(seer_kvq_row_bytes(128, 4), 4 * 8 + 64);
    assert_int_equal(seer_kvq_row_bytes(128, 8), 4 * 8 + 128);
    assert_int_equal(seer_kvq_row_bytes(33, 4), 2 * 8 + 24);
}

typedef struct {
    seer_backend *be;
    seer_kv_geom g;
    void *kv;
} store;

static void store_open(store *s, seer_backend *be, seer_kv_geom g) {
    int committed;
    s->be = be;
    s->g = g;
    ASSERT_OK(be->ops->kv_alloc(be, &s->g, &s->kv));
    ASSERT_OK(be->ops->kv_reserve(be, s->kv, &s->g, g.n_pages, &committed));
    assert_int_equal(committed, g.n_pages);
}

static void store_close(store *s) { s->be->ops->kv_free(s->be, s->kv); }

/* Attention over a pool with a copy (read through it, and not) against a pool without one
 * that holds the dequantised rows, on batches of several shapes. */
static void test_attention_through_copy(void **state) {
    (void)state;
    static const struct {
        int Hkv, group, Dh, ps, ns, len0[3], ntok[3];
        bool view, mask;
    } cases[] = {
        {2, 7, 64, 16, 1, {300}, {1}, false, false},     /* Qwen2.5-0.5B's heads, a decode step */
        {4, 2, 8, 16, 3, {40, 3, 77}, {1, 1, 1}, false, false}, /* stories260K's, a ragged batch */
        {2, 2, 40, 4, 2, {50, 9}, {5, 2}, true, false},  /* chains under a view; Dh % 32 != 0 */
        {1, 4, 48, 8, 2, {20, 31}, {4, 3}, false, true}, /* a tree mask */
        {3, 3, 64, 16, 1, {10}, {90}, false, false},     /* prompt-sized: no tiles through a copy */
        {1, 1, 16, 1, 1, {33}, {2}, true, false},        /* one-slot pages */
    };
    uint64_t rng = 99;
    for (int bits = 4; bits <= 8; bits += 4)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            const int Hkv = cases[c].Hkv, H = Hkv * cases[c].group, Dh = cases[c].Dh, ps = cases[c].ps;
            const int ns = cases[c].ns, kvd = Hkv * Dh, L = 2;
            int T = 0, maxlen = 0;
            for (int b = 0; b < ns; b++) {
                T += cases[c].ntok[b];
                const int len = cases[c].len0[b] + cases[c].ntok[b];
                maxlen = len > maxlen ? len : maxlen;
            }
            const int mp = (maxlen + ps - 1) / ps;
            seer_backend *be;
            ASSERT_OK(seer_backend_cpu_init(2, &be));
            seer_kv_geom g = {.n_pages = ns * mp, .page_size = ps, .n_layers = L, .n_kv_heads = Hkv,
                              .head_dim = Dh, .kv_bits = bits};
            seer_kv_geom g0 = g;
            g0.kv_bits = 0;
            store qs, plain, deq; /* with a copy; the same rows without; the dequantised rows */
            store_open(&qs, be, g);
            store_open(&plain, be, g0);
            store_open(&deq, be, g0);
            int32_t *pages = malloc(sizeof(int32_t) * ns * mp);
            for (int b = 0; b < ns; b++)
                for (int i = 0; i < mp; i++)
                    pages[b * mp + i] = b + i * ns; /* interleaved, as a pool hands them */
            int32_t *tok_seq = malloc(sizeof(int32_t) * T), *tok_slot = malloc(sizeof(int32_t) * T);
            int32_t *seq_toks = malloc(sizeof(int32_t) * T), off[4], len0[3];
            off[0] = 0;
            for (int b = 0, t = 0; b < ns; b++) {
                len0[b] = cases[c].len0[b];
                for (int i = 0; i < cases[c].ntok[b]; i++, t++)
                    tok_seq[t] = b, tok_slot[t] = len0[b] + i, seq_toks[t] = t;
                off[b + 1] = off[b] + cases[c].ntok[b];
            }
            /* every slot of every sequence (cached and new), each layer */
            for (int b = 0; b < ns; b++) {
                const int n = len0[b] + cases[c].ntok[b];
                int32_t *pg = malloc(sizeof(int32_t) * n), *row = malloc(sizeof(int32_t) * n);
                for (int s = 0; s < n; s++)
                    pg[s] = pages[b * mp + s / ps], row[s] = s % ps;
                for (int l = 0; l < L; l++) {
                    float *k = rand_x((size_t)n * kvd, 1.f, &rng), *v = rand_x((size_t)n * kvd, 1.f, &rng);
                    ASSERT_OK(be->ops->kv_store(be, qs.kv, &g, l, k, v, pg, row, n));
                    ASSERT_OK(be->ops->kv_store(be, plain.kv, &g0, l, k, v, pg, row, n));
                    const uint8_t *qd = seer_cpu_kv_qdata(qs.kv);
                    for (int s = 0; s < n; s++)
                        for (int w = 0; w < 2; w++)
                            seer_kvq_dequantize(qd + seer_kvq_row_off(L, ps, kvd, bits, pg[s], l, w, row[s]),
                                                kvd, bits, 0, kvd, (w ? v : k) + (size_t)s * kvd);
                    ASSERT_OK(be->ops->kv_store(be, deq.kv, &g0, l, k, v, pg, row, n));
                    free(k), free(v);
                }
                free(pg), free(row);
            }
            /* a view per layer and KV head: every third slot below the tail, offset by row */
            int32_t vidx[3][2 * 4 * 64];
            seer_attn_view views[3];
            const seer_attn_view *vp[3] = {NULL, NULL, NULL};
            for (int b = 0; b < ns && cases[c].view; b++) {
                const int n = len0[b] / 2 / 3; /* 3 (n - 1) + 2 < len0 / 2 */
                assert_true(L * Hkv * n <= 2 * 4 * 64);
                for (int r = 0; r < L * Hkv; r++)
                    for (int k = 0; k < n; k++)
                        vidx[b][r * n + k] = (b + r) % 3 + 3 * k;
                views[b] = (seer_attn_view){.idx = vidx[b], .n = n, .n_layers_view = L, .n_heads_view = Hkv,
                                            .tail_start = len0[b] / 2};
                vp[b] = &views[b];
            }
            uint8_t *mask = NULL;
            if (cases[c].mask) { /* each token sees itself and the even-indexed tokens before it */
                mask = calloc((size_t)T * T, 1);
                for (int i = 0; i < T; i++)
                    for (int j = off[tok_seq[i]]; j <= i; j++)
                        mask[(size_t)i * T + j] = j == i || (j - off[tok_seq[i]]) % 2 == 0;
            }
            float *q = rand_x((size_t)T * H * Dh, 3.f, &rng);
            seer_attn_batch ab = {.T = T, .n_heads = H, .n_kv_heads = Hkv, .head_dim = Dh,
                                  .scale = 1.f / sqrtf((float)Dh), .page_size = ps, .n_seq = ns,
                                  .max_pages = mp, .seq_pages = pages, .seq_len0 = len0,
                                  .seq_tok_off = off, .seq_toks = seq_toks, .seq_view = vp,
                                  .tok_seq = tok_seq, .tok_slot = tok_slot, .mask = mask};
            const size_t n = (size_t)T * H * Dh;
            float *got = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
            float *full = malloc(sizeof(float) * n), *full_ref = malloc(sizeof(float) * n);
            for (int l = 0; l < L; l++) {
                seer_cpu *cpu = be->impl;
                ab.kv_quant = true;
                ASSERT_OK(be->ops->attention(be, got, q, qs.kv, &g, l, &ab));
                ab.kv_quant = false;
                cpu->attn_ref = 1; /* the untiled reference, which the copy always takes */
                ASSERT_OK(be->ops->attention(be, ref, q, deq.kv, &g0, l, &ab));
                cpu->attn_ref = 0;
                if (memcmp(got, ref, sizeof(float) * n) != 0)
                    fail_msg("bits %d case %zu layer %d: attention through the copy differs from the "
                             "reference over the dequantised rows", bits, c, l);
                ASSERT_OK(be->ops->attention(be, full, q, qs.kv, &g, l, &ab));
                ASSERT_OK(be->ops->attention(be, full_ref, q, plain.kv, &g0, l, &ab));
                if (memcmp(full, full_ref, sizeof(float) * n) != 0)
                    fail_msg("bits %d case %zu layer %d: keeping a copy changed full attention", bits, c, l);
                /* the copy really is coarser: its outputs differ from the rows' */
                assert_true(tu_rel_err(got, full, n) > 0);
                assert_true(tu_rel_err(got, full, n) < (bits == 4 ? 0.3 : 0.03));
            }
            /* a page copy carries the copy with the rows: page pages[0] onto a spare one */
            const size_t qpage = seer_kvq_page_bytes(L, ps, kvd, bits);
            if (g.n_pages > 1) {
                seer_kv_copy cp = {pages[0], pages[ns * mp - 1]};
                ASSERT_OK(be->ops->kv_copy_pages(be, qs.kv, &g, &cp, 1));
                const uint8_t *qd = seer_cpu_kv_qdata(qs.kv);
                assert_memory_equal(qd + qpage * cp.dst, qd + qpage * cp.src, qpage);
            }
            /* an attention through a copy the storage does not keep is refused */
            ab.kv_quant = true;
            assert_int_equal(be->ops->attention(be, got, q, plain.kv, &g0, 0, &ab), SEER_ERR_INVALID_ARG);
            free(got), free(ref), free(full), free(full_ref), free(q), free(mask);
            free(pages), free(tok_seq), free(tok_slot), free(seq_toks);
            store_close(&qs), store_close(&plain), store_close(&deq);
            be->ops->free(be);
        }
}

/* kv_fill_random writes the copy of the rows it fills; a copy of any other width is refused. */
static void test_fill_random(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    seer_kv_geom g = {.n_pages = 3, .page_size = 8, .n_layers = 2, .n_kv_heads = 2, .head_dim = 16, .kv_bits = 4};
    store s;
    store_open(&s, be, g);
    const int32_t pages[2] = {2, 0};
    ASSERT_OK(be->ops->kv_fill_random(be, s.kv, &g, pages, 2, 3, 10, 7, 0.5f));
    const int kvd = 32;
    float rows[kvd], deq[kvd];
    for (int i = 0; i < 10; i++) {
        const int slot = 3 + i, pg = pages[slot / 8], row = slot % 8;
        for (int l = 0; l < 2; l++)
            for (int w = 0; w < 2; w++) {
                ASSERT_OK(be->ops->kv_read(be, s.kv, &g, l, w, &pg, &row, 1, rows));
                seer_kvq_dequantize(seer_cpu_kv_qdata(s.kv) + seer_kvq_row_off(2, 8, kvd, 4, pg, l, w, row),
                                    kvd, 4, 0, kvd, deq);
                float mn = rows[0], mx = rows[0];
                for (int e = 0; e < kvd; e++)
                    mn = fminf(mn, rows[e]), mx = fmaxf(mx, rows[e]);
                for (int e = 0; e < kvd; e++)
                    assert_true(fabsf(deq[e] - rows[e]) <= (mx - mn) / 15 / 2 * 1.0001f + 1e-6f);
            }
    }
    store_close(&s);
    void *kv = NULL;
    g.kv_bits = 5;
    assert_int_equal(be->ops->kv_alloc(be, &g, &kv), SEER_ERR_INVALID_ARG);
    assert_null(kv);
    be->ops->free(be);
}

/* kv_move_rows (the accepted path of a token tree moved into place) moves each row's copy
 * with it, in order: a later move reads what an earlier one wrote. */
static void test_move_rows(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    for (int bits = 4; bits <= 8; bits += 4) {
        seer_kv_geom g = {.n_pages = 3, .page_size = 8, .n_layers = 2, .n_kv_heads = 2, .head_dim = 16,
                          .kv_bits = bits};
        store s;
        store_open(&s, be, g);
        const int32_t pages[3] = {2, 0, 1};
        ASSERT_OK(be->ops->kv_fill_random(be, s.kv, &g, pages, 3, 0, 24, 11, 0.5f));
        const int kvd = 32;
        const size_t rb = seer_kvq_row_bytes(kvd, bits);
        const uint8_t *qd = seer_cpu_kv_qdata(s.kv);
        /* slots 9 -> 3, 17 -> 4, then 3 -> 5 (the row just moved there) */
        const int32_t sp[3] = {0, 1, 2}, sr[3] = {1, 1, 3}, dp[3] = {2, 2, 2}, dr[3] = {3, 4, 5};
        uint8_t *want = malloc(3 * 2 * 2 * rb);
        for (int i = 0; i < 3; i++)
            for (int l = 0; l < 2; l++)
                for (int w = 0; w < 2; w++) {
                    const int src = i == 2 ? 0 : i; /* move 2 reads move 0's destination */
                    memcpy(want + ((i * 2 + l) * 2 + w) * rb,
                           qd + seer_kvq_row_off(2, 8, kvd, bits, sp[src], l, w, sr[src]), rb);
                }
        ASSERT_OK(be->ops->kv_move_rows(be, s.kv, &g, sp, sr, dp, dr, 3));
        for (int i = 0; i < 3; i++)
            for (int l = 0; l < 2; l++)
                for (int w = 0; w < 2; w++)
                    assert_memory_equal(qd + seer_kvq_row_off(2, 8, kvd, bits, dp[i], l, w, dr[i]),
                                        want + ((i * 2 + l) * 2 + w) * rb, rb);
        free(want);
        store_close(&s);
    }
    be->ops->free(be);
}

/* The context counts the copy in its pool, refuses settings that cannot work and a batch
 * that reads a copy it does not keep; plain decoding with a copy kept is unchanged. */
static void test_context(void **state) {
    (void)state;
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 1;
    seer_model *m;
    ASSERT_OK(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &m));
    seer_kv_memory mem[3];
    seer_context *c[3];
    int32_t toks[6] = {1, 410, 469, 347, 300, 301}, pos[6] = {0, 1, 2, 3, 4, 5}, sq[6] = {0};
    float *logits[3];
    for (int i = 0; i < 3; i++) {
        seer_context_params cp = seer_context_default_params();
        cp.n_ctx = 128;
        cp.kv_quant_bits = i * 4;
        ASSERT_OK(seer_context_init(m, cp, &c[i]));
        seer_seq_id s;
        ASSERT_OK(seer_seq_new(c[i], &s));
        assert_int_equal(s, 0);
        uint8_t want[6] = {0, 0, 0, 0, 0, 1};
        seer_batch b = {.n_tokens = 6, .token = toks, .seq = sq, .pos = pos, .logits = want};
        logits[i] = malloc(sizeof(float) * 512);
        ASSERT_OK(seer_decode(c[i], &b, logits[i]));
        seer_context_kv_memory(c[i], &mem[i]);
        assert_int_equal(mem[i].quant_bits, i * 4);
    }
    /* stories260K: 5 layers, 4 KV heads of 8: rows of 32 values */
    const uint64_t q4 = seer_kvq_page_bytes(5, 16, 32, 4), q8 = seer_kvq_page_bytes(5, 16, 32, 8);
    assert_int_equal(mem[0].quant_bytes_reserved, 0);
    assert_int_equal(mem[1].quant_bytes_reserved, q4 * mem[1].n_pages);
    assert_int_equal(mem[2].quant_bytes_reserved, q8 * mem[2].n_pages);
    assert_int_equal(mem[1].bytes_reserved - mem[0].bytes_reserved, mem[1].quant_bytes_reserved);
    assert_int_equal(mem[2].bytes_reserved - mem[0].bytes_reserved, mem[2].quant_bytes_reserved);
    assert_int_equal(mem[1].quant_bytes_committed, q4 * mem[1].n_pages_committed);
    assert_true(mem[1].n_pages_committed >= 1);
    /* the target's own forward reads the rows: the copy changes nothing of it */
    assert_memory_equal(logits[0], logits[1], sizeof(float) * 512);
    assert_memory_equal(logits[0], logits[2], sizeof(float) * 512);
    /* a decode step through the copy differs, the 8-bit one less than the 4-bit one; it is
     * refused without a copy */
    int32_t t1 = 302, p1 = 6, s1 = 0;
    uint8_t w1 = 1;
    seer_batch b1 = {.n_tokens = 1, .token = &t1, .seq = &s1, .pos = &p1, .logits = &w1, .kv_quant = true};
    float *lq = malloc(sizeof(float) * 512);
    assert_int_equal(seer_decode(c[0], &b1, lq), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_seq_len(c[0], 0), 6);
    double err[3] = {0};
    for (int i = 1; i < 3; i++) {
        b1.kv_quant = true;
        ASSERT_OK(seer_decode(c[i], &b1, lq));
        b1.kv_quant = false;
        ASSERT_OK(seer_seq_rewind(c[i], 0, 6));
        ASSERT_OK(seer_decode(c[i], &b1, logits[i]));
        err[i] = tu_rel_err(lq, logits[i], 512);
        print_message("%d-bit decode step: logits relative error %.3g\n", 4 * i, err[i]);
    }
    assert_true(err[1] > 0 && err[1] < 1);
    assert_true(err[2] > 0 && err[2] < err[1] / 4);
    /* refusals */
    seer_spec_params sp = seer_spec_default_params();
    sp.kind = SEER_SPEC_QUANTKV;
    seer_gen *g = NULL;
    assert_int_equal(seer_gen_init(c[0], sp, &g), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_spec_set_num(&sp, "kv_view", SEER_SPEC_SNAPKV), SEER_ERR_INVALID_ARG);
    assert_true(tu_spec_get(&sp, "kv_view") == SEER_SPEC_NONE);
    tu_spec_set(&sp, "kv_view", SEER_SPEC_STREAMING);
    ASSERT_OK(seer_gen_init(c[1], sp, &g));
    seer_gen_free(g);
    seer_context_params cp = seer_context_default_params();
    cp.kv_quant_bits = 6;
    seer_context *bad = NULL;
    assert_int_equal(seer_context_init(m, cp, &bad), SEER_ERR_INVALID_ARG);
    assert_null(bad);
    seer_spec_kind k;
    ASSERT_OK(seer_spec_kind_parse("quantkv", &k));
    assert_int_equal(k, SEER_SPEC_QUANTKV);
    assert_string_equal(seer_spec_kind_name(SEER_SPEC_QUANTKV), "quantkv");
    for (int i = 0; i < 3; i++) {
        free(logits[i]);
        seer_context_free(c[i]);
    }
    free(lq);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_attention_through_copy),
        cmocka_unit_test(test_fill_random),
        cmocka_unit_test(test_move_rows),
        cmocka_unit_test(test_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
