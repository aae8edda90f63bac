/*
 * test_sparse_ffn.c: the sparse FFN of draft steps (src/model/sparse_ffn.c, its settings in
 * src/spec/sparse_ffn_opts.c; Griffin's contextual sparsity).
 *   - the CPU ops: ffn_act_stats against a direct double computation; weight_gather of rows
 *     and of columns from f32 and Q8_0 weights against the weights' own values; an index
 *     outside the weight refused with the output untouched;
 *   - the compact copy is what the draft calls multiply by: at density 1 a sparse call's
 *     logits are the full call's bit for bit, at 0.5 they differ;
 *   - greedy speculation is plain decoding: stories260K's golden ids with a sparse FFN under
 *     every view of the cache (streaming, retrieval, snapkv, quantkv), with trees, with the
 *     draft weights, at the hierarchy's middle level and as a batch of five;
 *   - sampling: the first three tokens follow the target's joint distribution (chi-square)
 *     with the sparse draft, and the same test fails the wrong acceptance rule;
 *   - bad settings refused, nothing changed.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "model/model.h"
#include "spec/drafter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_ops(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(2, &be));
    const seer_backend_ops *op = be->ops;
    uint64_t rng = 7;
    /* ffn_act_stats: each row at unit norm, squared, summed; a zero row adds nothing */
    enum { T = 5, F = 96, R = 40 };
    float g[T * F], st[F], ref[F];
    tu_fill_random(g, T * F, &rng);
    memset(g + 2 * F, 0, F * sizeof(float));
    for (int j = 0; j < F; j++)
        st[j] = ref[j] = 0.25f * (float)j;
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int j = 0; j < F; j++)
            ss += (double)g[t * F + j] * g[t * F + j];
        for (int j = 0; ss > 0 && j < F; j++)
            ref[j] += (float)((double)g[t * F + j] * g[t * F + j] / ss);
    }
    float tmp[T];
    ASSERT_OK(op->ffn_act_stats(be, st, g, T, F, tmp));
    for (int j = 0; j < F; j++)
        assert_true(fabsf(st[j] - ref[j]) <= 1e-5f * (1 + fabsf(ref[j])));

    /* weight_gather from f32 and Q8_0, rows and columns */
    float *w32 = malloc(sizeof(float) * R * F), *deq = malloc(sizeof(float) * R * F);
    tu_fill_random(w32, (size_t)R * F, &rng);
    seer_weight wf = {.data = w32, .rows = R, .cols = F, .dtype = GGML_TYPE_F32}, wq;
    ASSERT_OK(op->weight_quantize(be, &wf, GGML_TYPE_Q8_0, &wq));
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_Q8_0, wq.data, deq, (uint64_t)R * F));
    const int32_t rows[3] = {39, 0, 17}, cols[4] = {95, 3, 3, 64};
    const seer_weight *ws[2] = {&wf, &wq};
    const float *vals[2] = {w32, deq};
    for (int k = 0; k < 2; k++) {
        seer_weight o;
        ASSERT_OK(op->weight_gather(be, ws[k], rows, 3, false, &o));
        assert_int_equal(o.rows, 3);
        assert_int_equal(o.cols, F);
        assert_int_equal(o.dtype, GGML_TYPE_F32);
        for (int i = 0; i < 3; i++)
            assert_memory_equal((float *)o.data + i * F, vals[k] + rows[i] * F, F * sizeof(float));
        op->weight_free(be, &o);
        ASSERT_OK(op->weight_gather(be, ws[k], cols, 4, true, &o));
        assert_int_equal(o.rows, R);
        assert_int_equal(o.cols, 4);
        for (int r = 0; r < R; r++)
            for (int i = 0; i < 4; i++)
                assert_true(((float *)o.data)[r * 4 + i] == vals[k][r * F + cols[i]]);
        op->weight_free(be, &o);
    }
    /* an index outside: refused, out untouched */
    seer_weight o = {.rows = 123};
    const int32_t bad[2] = {1, R};
    assert_int_equal(op->weight_gather(be, &wf, bad, 2, false, &o), SEER_ERR_INVALID_ARG);
    assert_int_equal(o.rows, 123);
    assert_null(o.data);
    const int32_t badc[1] = {-1};
    assert_int_equal(op->weight_gather(be, &wf, badc, 1, true, &o), SEER_ERR_INVALID_ARG);
    assert_int_equal(o.rows, 123);
    op->weight_free(be, &wq);
    free(w32);
    free(deq);
    op->free(be);
}

/* Logits of the last of n prompt tokens decoded one call at a time after a full prefill of
 * the first n - 1, the last call sparse or not. */
static void last_logits(seer_context *c, const int32_t *tok, int n, bool sparse, float *out) {
    seer_seq_id s;
    ASSERT_OK(seer_seq_new(c, &s));
    int32_t pos[64];
    seer_seq_id sq[64];
    for (int i = 0; i < n; i++)
        pos[i] = i, sq[i] = s;
    seer_batch b = {.n_tokens = n - 1, .token = tok, .seq = sq, .pos = pos};
    ASSERT_OK(seer_decode(c, &b, NULL));
    const uint8_t want = 1;
    seer_batch b1 = {.n_tokens = 1, .token = tok + n - 1, .seq = sq, .pos = pos + n - 1, .logits = &want,
                     .sparse_ffn = sparse};
    ASSERT_OK(seer_decode(c, &b1, out));
    seer_seq_free(c, s);
}

static void test_compact_copy(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    const int V = seer_n_vocab(m);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = 2;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    int32_t tok[24];
    for (int i = 0; i < 24; i++)
        tok[i] = 1 + (i * 37) % 300;
    float *full = malloc(sizeof(float) * V), *sp = malloc(sizeof(float) * V);
    /* no sparse FFN: a sparse call is refused, nothing cached */
    seer_seq_id s;
    ASSERT_OK(seer_seq_new(c, &s));
    int32_t pos0 = 0;
    seer_batch b = {.n_tokens = 1, .token = tok, .seq = &s, .pos = &pos0, .sparse_ffn = true};
    assert_int_equal(seer_decode(c, &b, NULL), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_seq_len(c, s), 0);
    seer_seq_free(c, s);

    last_logits(c, tok, 24, false, full);
    ASSERT_OK(seer_sparse_ffn_init(c, SEER_SFFN_GRIFFIN, 1.0f, 0));
    assert_int_equal(seer_sparse_ffn_neurons(c), m->info.ffn_dim);
    last_logits(c, tok, 24, true, sp);
    assert_memory_equal(full, sp, sizeof(float) * V); /* every neuron, in order: the same bits */
    ASSERT_OK(seer_sparse_ffn_init(c, SEER_SFFN_GRIFFIN, 0.5f, 0));
    assert_true(seer_sparse_ffn_neurons(c) < m->info.ffn_dim);
    last_logits(c, tok, 24, true, sp);
    print_message("stories260K: %d of %d neurons, max |logit difference| %.4f\n", seer_sparse_ffn_neurons(c),
                  m->info.ffn_dim, tu_rel_err(sp, full, V));
    assert_true(tu_rel_err(sp, full, V) > 0);
    /* the full calls are not changed by the statistic they add */
    float *again = malloc(sizeof(float) * V);
    last_logits(c, tok, 24, false, again);
    assert_memory_equal(full, again, sizeof(float) * V);
    free(again);
    free(full);
    free(sp);
    seer_context_free(c);
    seer_model_free(m);
}

static seer_spec_params sparse(seer_spec_kind k, double density, seer_model *draft) {
    seer_spec_params sp = tu_spec(k, 4, 48);
    sp.draft_model = draft;
    tu_spec_set(&sp, "hier_gamma", 2);
    ASSERT_OK(seer_spec_set_num(&sp, "ffn_density", density));
    ASSERT_OK(seer_spec_set_num(&sp, "ffn_refresh", 4));
    return sp;
}

static void golden(seer_model *m, seer_spec_params sp, const char *what, int n_batch) {
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    tu_gen_ctx cx = {.n_ctx = 512, .page_size = 16, .n_batch_max = 64,
                     .kv_quant_bits = sp.kind == SEER_SPEC_QUANTKV || (int)tu_spec_get(&sp, "hier_base") == SEER_SPEC_QUANTKV ? 8 : 0};
    seer_spec_stats st = {0};
    if (n_batch == 1) {
        for (int i = 0; i < 5; i++) {
            seer_spec_stats a = tu_gen_run(m, sp, prompts[i], 64, &plen[i], 1, 257 - plen[i], tu_greedy(), cx,
                                           &got[i], NULL);
            char w[128];
            snprintf(w, sizeof w, "%s prompt %d", what, i);
            tu_assert_same(&got[i], &gold[i], w);
            st.rounds += a.rounds, st.emitted += a.emitted, st.drafted += a.drafted, st.accepted += a.accepted;
        }
    } else {
        st = tu_gen_run(m, sp, prompts[0], 64, plen, 5, 256, tu_greedy(), cx, got, NULL);
        for (int i = 0; i < 5; i++) {
            char w[128];
            snprintf(w, sizeof w, "%s batch prompt %d", what, i);
            tu_output g2 = got[i];
            if (g2.n > gold[i].n)
                g2.n = gold[i].n;
            tu_assert_same(&g2, &gold[i], w);
        }
    }
    print_message("%s: tokens per verification %.3f, acceptance %.3f\n", what, (double)st.emitted / st.rounds,
                  (double)st.accepted / (st.drafted ? st.drafted : 1));
    assert_true(st.accepted > 0);
}

static void test_greedy_golden(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    const seer_spec_kind views[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV, SEER_SPEC_QUANTKV};
    for (int k = 0; k < 4; k++) {
        char what[96];
        snprintf(what, sizeof what, "stories %s, density 0.5", seer_spec_kind_name(views[k]));
        golden(m, sparse(views[k], 0.5, NULL), what, 1);
        if (k >= 2) /* trees over two views (the tree drafting is the views' own) */
            continue;
        seer_spec_params tr = sparse(views[k], 0.5, NULL);
        tr.tree_size = 10;
        tr.tree_depth = 4;
        snprintf(what, sizeof what, "stories %s tree of 10, density 0.5", seer_spec_kind_name(views[k]));
        golden(m, tr, what, 1);
    }
    golden(m, sparse(SEER_SPEC_STREAMING, 0.3, NULL), "stories streaming, density 0.3, batch of 5", 5);
    seer_spec_params h = sparse(SEER_SPEC_HIERARCHY, 0.5, m);
    tu_spec_set(&h, "hier_base", SEER_SPEC_SNAPKV);
    golden(m, h, "stories hierarchy (snapkv middle), density 0.5", 1);
    seer_model_free(m);
    /* with the draft weights: the compact copy in their type */
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    mp.draft_weights = "q8_0";
    ASSERT_OK(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &m));
    seer_spec_params dw = sparse(SEER_SPEC_RETRIEVAL, 0.5, NULL);
    dw.draft_weights = true;
    golden(m, dw, "stories retrieval, q8_0 draft weights, density 0.5", 1);
    seer_model_free(m);
}

static const char *gen_model(const char *name, int vocab, int dim, int layers, int heads, int kv, uint64_t seed,
                             float scale) {
    static char path[512];
    snprintf(path, sizeof path, "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = "llama";
    p.n_vocab = vocab;
    p.dim = dim;
    p.n_layers = layers;
    p.n_heads = heads;
    p.n_kv_heads = kv;
    p.ffn_dim = dim * 8; /* 256: densities in steps of 1/8 (blocks of 32) */
    p.ctx = 512;
    p.seed = seed;
    p.scale = scale;
    ASSERT_OK(seer_gen_model(&p, path));
    return path;
}

/* The target's distribution under the sparse draft's proposals; the wrong rule fails. */
static void test_distribution(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(gen_model("sffn_dist.gguf", 260, 32, 2, 4, 2, 21, 0.6f));
    tu_dist dist;
    tu_dist_init(&dist, m);
    const int runs = 4000;
    /* a draft not far from the target, so that its rejections are where the rules differ (a
     * far one leaves a residual close to p, and any rule passes) */
    seer_spec_params sp = sparse(SEER_SPEC_STREAMING, 0.5, NULL);
    sp.gamma = 3;
    tu_spec_set(&sp, "budget", 6);
    tu_spec_set(&sp, "sinks", 2);
    tu_dist_expect(&dist, sp, runs, NULL, "sparse FFN 0.5, streaming");
    seer_spec_params tr = sp;
    tr.tree_size = 8;
    tr.tree_depth = 2;
    tr.gamma = 2;
    tu_dist_expect(&dist, tr, runs, NULL, "sparse FFN 0.5, streaming tree of 8");
    tu_dist_expect(&dist, sp, runs, &seer_verify_wrong_rule_for_tests, "sparse FFN 0.5 with the wrong rule");
    seer_model_free(m);
}

static void test_bad_settings(void **state) {
    (void)state;
    seer_spec_params sp = seer_spec_default_params();
    assert_int_equal(seer_spec_set(&sp, "ffn_density", "0"), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_spec_set(&sp, "spec-ffn-density", "1.5"), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_spec_set(&sp, "ffn_refresh", "-1"), SEER_ERR_INVALID_ARG);
    double v;
    ASSERT_OK(seer_spec_get(&sp, "ffn_density", &v));
    assert_true(v == 1.0);
    ASSERT_OK(seer_spec_set(&sp, "spec-ffn-density", "0.4"));
    ASSERT_OK(seer_spec_get(&sp, "ffn_density", &v));
    assert_true(fabs(v - 0.4) < 1e-12);
    /* its settings are listed, owned by the sparse FFN */
    bool found = false;
    seer_spec_option o;
    for (int i = 0; seer_spec_option_at(i, &o); i++)
        found |= !strcmp(o.flag, "spec-ffn-density") && !strcmp(o.drafter, "sparse-ffn");
    assert_true(found);

    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_gen *g = NULL;
    sp.kind = SEER_SPEC_NGRAM; /* reads no weights of the target */
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_null(g);
    assert_int_equal(seer_sparse_ffn_neurons(c), 0);
    sp.kind = SEER_SPEC_AUTO;
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_UNSUPPORTED);
    assert_int_equal(seer_sparse_ffn_neurons(c), 0);
    assert_int_equal(seer_sparse_ffn_init(c, SEER_SFFN_GRIFFIN, 0.0f, 0), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_sparse_ffn_init(c, SEER_SFFN_GRIFFIN, 0.5f, -1), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_sparse_ffn_neurons(c), 0);
    sp.kind = SEER_SPEC_STREAMING;
    ASSERT_OK(seer_gen_init(c, sp, &g));
    assert_int_equal(seer_sparse_ffn_neurons(c), seer_sparse_ffn_keep(m->info.ffn_dim, 0.4f));
    seer_gen_free(g);
    seer_context_free(c);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops),
        cmocka_unit_test(test_compact_copy),
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_greedy_golden),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
