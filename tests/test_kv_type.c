/*
 * test_kv_type.c: the target's quantised KV rows (kv/kv_type.h, seer_context_params.kv_type)
 * on the CPU backend. Round trips stay within half a step of each group's scale; the pool of
 * quantised rows keeps no full-precision row (its size is the quantised rows'); attention over
 * it equals the reference attention over a full-precision pool holding the dequantised rows,
 * bit for bit, for decode steps, ragged batches, chains under views, tree masks and
 * prompt-sized runs; kv_read, page copies, row moves and the random fill work on it; the
 * context counts the real bytes and refuses what cannot work.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "kv/kv_type.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int TYPES[] = {SEER_KV_Q8, SEER_KV_Q4};

static float *rand_x(size_t n, float scale, uint64_t *rng) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * tu_rand_uniform(rng);
    return x;
}

/* Each group's scale is the least power of two s with amax <= qmax s, and
 * |x - dequant(quant(x))| <= s / 2; a zero group comes back exactly. */
static void test_round_trip(void **state) {
    (void)state;
    static const int shapes[][2] = {{1, 8}, {4, 8}, {2, 40}, {2, 64}, {8, 128}, {1, 96}, {3, 256}};
    uint64_t rng = 5;
    for (size_t t = 0; t < 2; t++)
        for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
            const int type = TYPES[t], Hkv = shapes[c][0], Dh = shapes[c][1], kvd = Hkv * Dh;
            const int G = seer_kvt_group(type, Dh), qmax = type == SEER_KV_Q8 ? 127 : 7;
            assert_int_equal(kvd % G, 0);
            for (int rep = 0; rep < 20; rep++) {
                const float scale = powf(10.f, (float)(rep % 7) - 3.f);
                float *x = rand_x((size_t)kvd, scale, &rng);
                if (rep == 19)
                    for (int e = 0; e < G; e++)
                        x[e] = 0.f;
                const size_t rb = seer_kvt_row_bytes(type, Hkv, Dh);
                uint8_t *q = malloc(rb);
                memset(q, 0xA5, rb); /* the quantiser must write every byte */
                seer_kvt_quantize_row(type, x, Hkv, Dh, q);
                uint8_t *q2 = malloc(rb);
                memset(q2, 0x5A, rb);
                seer_kvt_quantize_row(type, x, Hkv, Dh, q2);
                assert_memory_equal(q, q2, rb);
                float *y = malloc(sizeof(float) * kvd);
                for (int h = 0; h < Hkv; h++)
                    seer_kvt_dequantize_head(type, q, Hkv, Dh, h, y + (size_t)h * Dh);
                for (int g0 = 0; g0 < kvd; g0 += G) {
                    float amax = 0.f;
                    for (int e = g0; e < g0 + G; e++)
                        amax = fmaxf(amax, fabsf(x[e]));
                    const int8_t ex = (int8_t)q[seer_kvt_scales_off(type, kvd) + (size_t)g0 / G];
                    const double s = ex == -128 ? 0 : ldexp(1.0, ex);
                    if (amax > 0) {
                        assert_true(amax <= qmax * s);    /* it covers the group */
                        assert_true(amax > qmax * s / 2); /* the least power of two that does */
                    }
                    const double tol = s / 2;
                    for (int e = g0; e < g0 + G; e++)
                        if (fabs((double)y[e] - x[e]) > tol)
                            fail_msg("type %d Hkv %d Dh %d rep %d: element %d is %g, stored %g", type, Hkv, Dh,
                                     rep, e, y[e], x[e]);
                    if (amax == 0.f)
                        for (int e = g0; e < g0 + G; e++)
                            assert_true(y[e] == 0.f);
                }
                free(x), free(q), free(q2), free(y);
            }
        }
    /* the Llama-3.1-8B shape: 1056 and 544 bytes against 2048 of bf16 */
    assert_int_equal(seer_kvt_row_bytes(SEER_KV_Q8, 8, 128), 1056);
    assert_int_equal(seer_kvt_row_bytes(SEER_KV_Q4, 8, 128), 544);
    assert_int_equal(seer_kvt_row_bytes(SEER_KV_FULL, 8, 128), 0);
    assert_int_equal(seer_kvt_group(SEER_KV_Q8, 128), 32);
    assert_int_equal(seer_kvt_group(SEER_KV_Q4, 128), 32);
    assert_int_equal(seer_kvt_group(SEER_KV_Q4, 40), 40);
    /* a NaN or infinite value gives a defined row, not undefined behaviour */
    float bad[8] = {NAN, 1.f, -1.f, INFINITY, 0.f, 2.f, -3.f, 0.5f};
    uint8_t row[32];
    seer_kvt_quantize_row(SEER_KV_Q8, bad, 1, 8, row);
    seer_kvt_quantize_row(SEER_KV_Q4, bad, 1, 8, row);
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

/* Fills every slot of a quantised pool and a full-precision pool with the same random rows,
 * then overwrites the full-precision pool's rows with what kv_read gives back from the
 * quantised one (the dequantised rows). */
static void fill_pair(seer_backend *be, store *qs, store *deq, const int32_t *pages, int mp, int ns,
                      const int *len, uint64_t *rng) {
    const seer_kv_geom *g = &qs->g;
    const int kvd = g->n_kv_heads * g->head_dim, ps = g->page_size;
    for (int b = 0; b < ns; b++) {
        const int n = len[b];
        int32_t *pg = malloc(sizeof(int32_t) * n), *row = malloc(sizeof(int32_t) * n);
        for (int s = 0; s < n; s++)
            pg[s] = pages[b * mp + s / ps], row[s] = s % ps;
        for (int l = 0; l < g->n_layers; l++) {
            float *k = rand_x((size_t)n * kvd, 1.f, rng), *v = rand_x((size_t)n * kvd, 1.f, rng);
            ASSERT_OK(be->ops->kv_store(be, qs->kv, g, l, k, v, pg, row, n));
            float *k2 = malloc(sizeof(float) * n * kvd), *v2 = malloc(sizeof(float) * n * kvd);
            ASSERT_OK(be->ops->kv_read(be, qs->kv, g, l, 0, pg, row, n, k2));
            ASSERT_OK(be->ops->kv_read(be, qs->kv, g, l, 1, pg, row, n, v2));
            assert_true(tu_rel_err(k2, k, (size_t)n * kvd) > 0); /* really quantised */
            assert_true(tu_rel_err(k2, k, (size_t)n * kvd) < (g->kv_type == SEER_KV_Q8 ? 0.02 : 0.25));
            ASSERT_OK(be->ops->kv_store(be, deq->kv, &deq->g, l, k2, v2, pg, row, n));
            free(k), free(v), free(k2), free(v2);
        }
        free(pg), free(row);
    }
}

/* Attention over a pool of quantised rows against the reference over the dequantised rows. */
static void test_attention(void **state) {
    (void)state;
    static const struct {
        int Hkv, group, Dh, ps, ns, len0[3], ntok[3];
        bool view, mask;
    } cases[] = {
        {2, 7, 64, 16, 1, {300}, {1}, false, false},             /* Qwen2.5-0.5B's heads, a decode step */
        {4, 2, 8, 16, 3, {40, 3, 77}, {1, 1, 1}, false, false}, /* stories260K's, a ragged batch */
        {2, 2, 40, 4, 2, {50, 9}, {5, 2}, true, false},          /* chains under a view; Dh % 32 != 0 */
        {1, 4, 48, 8, 2, {20, 31}, {4, 3}, false, true},         /* a tree mask */
        {3, 3, 64, 16, 1, {10}, {90}, false, false},             /* prompt-sized: no tiles */
        {1, 1, 16, 1, 1, {33}, {2}, true, false},                /* one-slot pages */
    };
    uint64_t rng = 99;
    for (size_t t = 0; t < 2; t++)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            const int Hkv = cases[c].Hkv, H = Hkv * cases[c].group, Dh = cases[c].Dh, ps = cases[c].ps;
            const int ns = cases[c].ns, L = 2;
            int T = 0, maxlen = 0, len[3];
            for (int b = 0; b < ns; b++) {
                T += cases[c].ntok[b];
                len[b] = cases[c].len0[b] + cases[c].ntok[b];
                maxlen = len[b] > maxlen ? len[b] : maxlen;
            }
            const int mp = (maxlen + ps - 1) / ps;
            seer_backend *be;
            ASSERT_OK(seer_backend_cpu_init(2, &be));
            seer_kv_geom g = {.n_pages = ns * mp, .page_size = ps, .n_layers = L, .n_kv_heads = Hkv,
                              .head_dim = Dh, .kv_type = TYPES[t]};
            seer_kv_geom g0 = g;
            g0.kv_type = SEER_KV_FULL;
            store qs, deq;
            store_open(&qs, be, g);
            store_open(&deq, be, g0);
            int32_t *pages = malloc(sizeof(int32_t) * ns * mp);
            for (int b = 0; b < ns; b++)
                for (int i = 0; i < mp; i++)
                    pages[b * mp + i] = b + i * ns; /* interleaved, as a pool hands them */
            fill_pair(be, &qs, &deq, pages, mp, ns, len, &rng);
            int32_t *tok_seq = malloc(sizeof(int32_t) * T), *tok_slot = malloc(sizeof(int32_t) * T);
            int32_t *seq_toks = malloc(sizeof(int32_t) * T), off[4], len0[3];
            off[0] = 0;
            for (int b = 0, k = 0; b < ns; b++) {
                len0[b] = cases[c].len0[b];
                for (int i = 0; i < cases[c].ntok[b]; i++, k++)
                    tok_seq[k] = b, tok_slot[k] = len0[b] + i, seq_toks[k] = k;
                off[b + 1] = off[b] + cases[c].ntok[b];
            }
            int32_t vidx[3][2 * 4 * 64];
            seer_attn_view views[3];
            const seer_attn_view *vp[3] = {NULL, NULL, NULL};
            for (int b = 0; b < ns && cases[c].view; b++) {
                const int n = len0[b] / 2 / 3;
                for (int r = 0; r < L * Hkv; r++)
                    for (int k = 0; k < n; k++)
                        vidx[b][r * n + k] = (b + r) % 3 + 3 * k;
                views[b] = (seer_attn_view){.idx = vidx[b], .n = n, .n_layers_view = L, .n_heads_view = Hkv,
                                            .tail_start = len0[b] / 2};
                vp[b] = &views[b];
            }
            uint8_t *mask = NULL;
            if (cases[c].mask) {
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
            for (int l = 0; l < L; l++) {
                seer_cpu *cpu = be->impl;
                for (size_t e = 0; e < n; e++)
                    got[e] = NAN; /* poisoned: every output must be written */
                ASSERT_OK(be->ops->attention(be, got, q, qs.kv, &g, l, &ab));
                cpu->attn_ref = 1; /* the untiled reference, which quantised rows always take */
                ASSERT_OK(be->ops->attention(be, ref, q, deq.kv, &g0, l, &ab));
                cpu->attn_ref = 0;
                if (memcmp(got, ref, sizeof(float) * n) != 0)
                    fail_msg("type %d case %zu layer %d: attention over quantised rows differs from the "
                             "reference over the dequantised rows", TYPES[t], c, l);
            }
            free(got), free(ref), free(q), free(mask);
            free(pages), free(tok_seq), free(tok_slot), free(seq_toks);
            store_close(&qs), store_close(&deq);
            be->ops->free(be);
        }
}

/* Page copies, row moves and the random fill on quantised rows; the pool's storage is the
 * quantised rows' size. */
static void test_storage_ops(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    for (size_t t = 0; t < 2; t++) {
        seer_kv_geom g = {.n_pages = 3, .page_size = 8, .n_layers = 2, .n_kv_heads = 2, .head_dim = 32,
                          .kv_type = TYPES[t]};
        const size_t rb = seer_kvt_row_bytes(TYPES[t], 2, 32);
        assert_int_equal(seer_kv_geom_row_bytes(&g, 4), rb);
        assert_int_equal(seer_kv_geom_page_bytes(&g, 4), 2 * 2 * 8 * rb);
        store s;
        store_open(&s, be, g);
        const int32_t pages[3] = {2, 0, 1};
        ASSERT_OK(be->ops->kv_fill_random(be, s.kv, &g, pages, 3, 0, 24, 11, 0.5f));
        /* the fill's rows are its f32 rows quantised: within half a step of them */
        float rows[64];
        const int pg = 0, row = 3;
        ASSERT_OK(be->ops->kv_read(be, s.kv, &g, 1, 1, &pg, &row, 1, rows));
        for (int e = 0; e < 64; e++)
            assert_true(isfinite(rows[e]) && fabsf(rows[e]) < 4.f);
        /* slots 9 -> 3, 17 -> 4, then 3 -> 5 (the row just moved there) */
        const int32_t sp[3] = {0, 1, 2}, sr[3] = {1, 1, 3}, dp[3] = {2, 2, 2}, dr[3] = {3, 4, 5};
        uint8_t *want = malloc(3 * 2 * 2 * rb);
        for (int i = 0; i < 3; i++)
            for (int l = 0; l < 2; l++)
                for (int w = 0; w < 2; w++) {
                    const int src = i == 2 ? 0 : i;
                    memcpy(want + ((i * 2 + l) * 2 + w) * rb, seer_cpu_kv_qrow(s.kv, &g, sp[src], l, w, sr[src]), rb);
                }
        ASSERT_OK(be->ops->kv_move_rows(be, s.kv, &g, sp, sr, dp, dr, 3));
        for (int i = 0; i < 3; i++)
            for (int l = 0; l < 2; l++)
                for (int w = 0; w < 2; w++)
                    assert_memory_equal(seer_cpu_kv_qrow(s.kv, &g, dp[i], l, w, dr[i]),
                                        want + ((i * 2 + l) * 2 + w) * rb, rb);
        /* a page copy: page 2 onto page 1 */
        seer_kv_copy cp = {2, 1};
        ASSERT_OK(be->ops->kv_copy_pages(be, s.kv, &g, &cp, 1));
        assert_memory_equal(seer_cpu_kv_qrow(s.kv, &g, 1, 0, 0, 0), seer_cpu_kv_qrow(s.kv, &g, 2, 0, 0, 0),
                            seer_kv_geom_page_bytes(&g, 4));
        /* a bad move is refused with nothing moved */
        const int32_t bad = 3;
        assert_int_equal(be->ops->kv_move_rows(be, s.kv, &g, &bad, sr, dp, dr, 1), SEER_ERR_INVALID_ARG);
        free(want);
        store_close(&s);
        /* quantised rows and a draft copy beside them, or an unknown type: refused */
        void *kv = NULL;
        g.kv_bits = 4;
        assert_int_equal(be->ops->kv_alloc(be, &g, &kv), SEER_ERR_INVALID_ARG);
        g.kv_bits = 0;
        g.kv_type = 7;
        assert_int_equal(be->ops->kv_alloc(be, &g, &kv), SEER_ERR_INVALID_ARG);
        assert_null(kv);
    }
    be->ops->free(be);
}

/* The context: the pool's bytes are the quantised rows', more tokens fit in the same bytes,
 * decoding works and differs from full precision by a little, and bad settings are refused
 * with nothing made. */
static void test_context(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_kv_type parsed;
    ASSERT_OK(seer_kv_type_parse("q8", &parsed));
    assert_int_equal(parsed, SEER_KV_Q8);
    ASSERT_OK(seer_kv_type_parse("q4", &parsed));
    assert_int_equal(parsed, SEER_KV_Q4);
    ASSERT_OK(seer_kv_type_parse("bf16", &parsed));
    assert_int_equal(parsed, SEER_KV_FULL);
    assert_int_equal(seer_kv_type_parse("q8_0", &parsed), SEER_ERR_INVALID_ARG);
    assert_int_equal(parsed, SEER_KV_FULL);
    assert_null(seer_kv_type_name((seer_kv_type)9));
    float *logits[3];
    seer_kv_memory mem[3];
    int32_t toks[6] = {1, 410, 469, 347, 300, 301}, pos[6] = {0, 1, 2, 3, 4, 5}, sq[6] = {0};
    for (int i = 0; i < 3; i++) {
        seer_context_params cp = seer_context_default_params();
        cp.n_ctx = 128;
        cp.kv_type = (seer_kv_type)i;
        seer_context *c;
        ASSERT_OK(seer_context_init(m, cp, &c));
        seer_seq_id s;
        ASSERT_OK(seer_seq_new(c, &s));
        uint8_t want[6] = {0, 0, 0, 0, 0, 1};
        seer_batch b = {.n_tokens = 6, .token = toks, .seq = sq, .pos = pos, .logits = want};
        logits[i] = malloc(sizeof(float) * 512);
        ASSERT_OK(seer_decode(c, &b, logits[i]));
        seer_context_kv_memory(c, &mem[i]);
        assert_int_equal(mem[i].kv_type, i);
        /* a batch reading a draft copy the pool does not keep is refused, state intact */
        seer_batch bq = b;
        bq.kv_quant = true;
        assert_int_equal(seer_decode(c, &bq, logits[i]), SEER_ERR_INVALID_ARG);
        assert_int_equal(seer_seq_len(c, s), 6);
        seer_context_free(c);
    }
    /* stories260K: 5 layers, 4 KV heads of 8 (q4's group: the head row) */
    assert_int_equal(seer_kv_bytes_per_token(m, SEER_KV_FULL), 2 * 5 * 32 * 4);
    assert_int_equal(seer_kv_bytes_per_token(m, SEER_KV_Q8), 2 * 5 * seer_kvt_row_bytes(SEER_KV_Q8, 4, 8));
    assert_int_equal(seer_kv_bytes_per_token(m, SEER_KV_Q4), 2 * 5 * seer_kvt_row_bytes(SEER_KV_Q4, 4, 8));
    for (int i = 1; i < 3; i++) {
        assert_int_equal(mem[i].bytes_reserved, seer_kv_bytes_per_token(m, (seer_kv_type)i) * 16 * mem[i].n_pages);
        assert_true(mem[i].bytes_reserved < mem[0].bytes_reserved);
        assert_int_equal(mem[i].quant_bytes_reserved, 0);
        const double err = tu_rel_err(logits[i], logits[0], 512);
        print_message("%s KV: prompt logits relative error %.3g\n", seer_kv_type_name((seer_kv_type)i), err);
        assert_true(err > 0 && err < (i == 1 ? 0.05 : 0.5));
    }
    free(logits[0]), free(logits[1]), free(logits[2]);
    /* refusals leave nothing made */
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    cp.kv_type = SEER_KV_Q8;
    cp.kv_quant_bits = 4;
    seer_context *bad = NULL;
    assert_int_equal(seer_context_init(m, cp, &bad), SEER_ERR_INVALID_ARG);
    assert_null(bad);
    cp.kv_quant_bits = 0;
    cp.kv_type = (seer_kv_type)5;
    assert_int_equal(seer_context_init(m, cp, &bad), SEER_ERR_INVALID_ARG);
    assert_null(bad);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_storage_ops),
        cmocka_unit_test(test_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
