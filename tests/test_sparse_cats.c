/*
 * test_sparse_cats.c: the CATS form of the sparse FFN (src/model/sparse_ffn.c with
 * --spec-ffn-mode cats; Lee et al. 2024), beside test_sparse_ffn.c's Griffin.
 *   - the CPU ops: weight_transpose of f32 and Q8_0 against the weights' values;
 *     ffn_act_hist against a direct count, from the pre-activation and from the gate (plain
 *     and interleaved); ffn_cats against a direct double computation (plain and interleaved
 *     gate and up, Q8_0 up), at threshold 0 against the dense FFN, the kept entries exactly
 *     those at or above the threshold; bad shapes and thresholds refused, x untouched;
 *   - a context's thresholds: after a prompt, a CATS call keeps about the density's share of
 *     each token's neurons, its logits differ from the full call's, and the full calls are
 *     unchanged by the histogram they add;
 *   - greedy speculation is plain decoding: stories260K's golden ids with the CATS draft under
 *     streaming and retrieval (chains and a tree), quantkv, the draft weights and a ragged
 *     batch of five;
 *   - sampling: the first three tokens follow the target's joint distribution (chi-square),
 *     chains and a tree, and the same test fails the wrong acceptance rule;
 *   - the setting: parsed by name, a bad name refused, listed; a GELU-gated family refused.
 */
#include "testutil.h"

#include "backend/act_hist.h"
#include "backend/backend.h"
#include "model/model.h"
#include "spec/drafter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double silu_d(double g) { return g / (1.0 + exp(-g)); }

static void test_transpose_and_hist(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(2, &be));
    const seer_backend_ops *op = be->ops;
    uint64_t rng = 11;
    enum { R = 40, C = 96, T = 5, F = 96, D = 64 };
    /* weight_transpose from f32 and Q8_0 */
    float *w32 = malloc(sizeof(float) * R * C), *deq = malloc(sizeof(float) * R * C);
    tu_fill_random(w32, (size_t)R * C, &rng);
    seer_weight wf = {.data = w32, .rows = R, .cols = C, .dtype = GGML_TYPE_F32}, wq, o;
    ASSERT_OK(op->weight_quantize(be, &wf, GGML_TYPE_Q8_0, &wq));
    ASSERT_OK(seer_gguf_dequant(GGML_TYPE_Q8_0, wq.data, deq, (uint64_t)R * C));
    const seer_weight *ws[2] = {&wf, &wq};
    const float *vals[2] = {w32, deq};
    for (int k = 0; k < 2; k++) {
        ASSERT_OK(op->weight_transpose(be, ws[k], &o));
        assert_int_equal(o.rows, C);
        assert_int_equal(o.cols, R);
        assert_int_equal(o.dtype, GGML_TYPE_F32);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                assert_true(((float *)o.data)[c * R + r] == vals[k][r * C + c]);
        op->weight_free(be, &o);
    }
    op->weight_free(be, &wq);

    /* ffn_act_hist: the bins of |silu(g)|, added to what is there; zeros in bin 0 */
    float g[T * F], h[T * D], gate[F * D], both[2 * F * D];
    tu_fill_random(g, T * F, &rng);
    for (int i = 0; i < T * F; i++)
        g[i] *= (float)(i % 7) * 3.f; /* many octaves, zeros among them */
    double hist[SEER_ACT_HIST_BINS], ref[SEER_ACT_HIST_BINS];
    for (int b = 0; b < SEER_ACT_HIST_BINS; b++)
        hist[b] = ref[b] = b % 3;
    for (int i = 0; i < T * F; i++) {
        const float v = fabsf(g[i] / (1.f + expf(-g[i])));
        const int b = seer_act_hist_bin(v);
        assert_true(v >= seer_act_hist_edge(b));
        assert_true(b == SEER_ACT_HIST_BINS - 1 || v < seer_act_hist_edge(b + 1));
        ref[b] += 1;
    }
    ASSERT_OK(op->ffn_act_hist(be, hist, g, NULL, NULL, T, F));
    assert_memory_equal(hist, ref, sizeof hist);
    assert_true(ref[0] >= T * F / 7); /* the zeros */
    /* from the gate: h gate^T first, plain and interleaved (its even rows) */
    tu_fill_random(h, T * D, &rng);
    tu_fill_random(gate, F * D, &rng);
    tu_fill_random(both, 2 * F * D, &rng);
    for (int j = 0; j < F; j++)
        memcpy(both + (size_t)2 * j * D, gate + (size_t)j * D, D * sizeof(float));
    seer_weight wg = {.data = gate, .rows = F, .cols = D, .dtype = GGML_TYPE_F32};
    seer_weight wb = {.data = both, .rows = 2 * F, .cols = D, .dtype = GGML_TYPE_F32, .n_seg = 2,
                      .interleaved = true, .seg_rows = {F, F}};
    double hp[SEER_ACT_HIST_BINS] = {0}, hi[SEER_ACT_HIST_BINS] = {0};
    float tmp[T * F];
    ASSERT_OK(op->ffn_act_hist(be, hp, tmp, h, &wg, T, F));
    ASSERT_OK(op->ffn_act_hist(be, hi, tmp, h, &wb, T, F));
    double n_p = 0, n_i = 0, moved = 0;
    for (int b = 0; b < SEER_ACT_HIST_BINS; b++)
        n_p += hp[b], n_i += hi[b], moved += fabs(hp[b] - hi[b]);
    assert_true(n_p == T * F && n_i == T * F);
    assert_true(moved <= 4); /* two sums in another order: an entry may cross an edge */
    /* a gate of another width refused */
    wg.rows = F - 1;
    assert_int_equal(op->ffn_act_hist(be, hp, tmp, h, &wg, T, F), SEER_ERR_INVALID_ARG);
    free(w32);
    free(deq);
    op->free(be);
}

/* x += CATS's FFN in doubles: ref [T][D]; kept [T][F] the entries kept. */
static void cats_ref(double *ref, uint8_t *kept, const float *x, const float *h, const float *gate, const float *up,
                     const float *down, float thr, int T, int F, int D) {
    for (int t = 0; t < T; t++) {
        for (int d = 0; d < D; d++)
            ref[t * D + d] = x[t * D + d];
        for (int j = 0; j < F; j++) {
            double g = 0, u = 0;
            for (int d = 0; d < D; d++)
                g += (double)gate[j * D + d] * h[t * D + d], u += (double)up[j * D + d] * h[t * D + d];
            const double a = silu_d(g);
            kept[t * F + j] = fabs(a) >= thr;
            for (int d = 0; kept[t * F + j] && d < D; d++)
                ref[t * D + d] += a * u * down[d * F + j];
        }
    }
}

static void test_ffn_cats_op(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(2, &be));
    const seer_backend_ops *op = be->ops;
    uint64_t rng = 23;
    enum { T = 3, F = 256, D = 64 };
    float *gate = malloc(sizeof(float) * F * D), *up = malloc(sizeof(float) * F * D);
    float *down = malloc(sizeof(float) * D * F), *gu = malloc(sizeof(float) * 2 * F * D);
    float h[T * D], x[T * D], x0[T * D], a[T * F];
    tu_fill_random(gate, (size_t)F * D, &rng);
    tu_fill_random(up, (size_t)F * D, &rng);
    tu_fill_random(down, (size_t)D * F, &rng);
    tu_fill_random(h, T * D, &rng);
    tu_fill_random(x0, T * D, &rng);
    for (int j = 0; j < F; j++) {
        memcpy(gu + (size_t)2 * j * D, gate + (size_t)j * D, D * sizeof(float));
        memcpy(gu + (size_t)(2 * j + 1) * D, up + (size_t)j * D, D * sizeof(float));
    }
    seer_weight wg = {.data = gate, .rows = F, .cols = D, .dtype = GGML_TYPE_F32};
    seer_weight wu = {.data = up, .rows = F, .cols = D, .dtype = GGML_TYPE_F32};
    seer_weight wd = {.data = down, .rows = D, .cols = F, .dtype = GGML_TYPE_F32};
    seer_weight wgu = {.data = gu, .rows = 2 * F, .cols = D, .dtype = GGML_TYPE_F32, .n_seg = 2,
                       .interleaved = true, .seg_rows = {F, F}};
    seer_weight dt, wuq;
    ASSERT_OK(op->weight_transpose(be, &wd, &dt));
    ASSERT_OK(op->weight_quantize(be, &wu, GGML_TYPE_Q8_0, &wuq));
    double *ref = malloc(sizeof(double) * T * D);
    uint8_t *kept = malloc((size_t)T * F);
    const float thrs[] = {0.f, 0.15f, 0.6f};
    for (int k = 0; k < 3; k++) {
        cats_ref(ref, kept, x0, h, gate, up, down, thrs[k], T, F, D);
        int n_kept = 0;
        for (int i = 0; i < T * F; i++)
            n_kept += kept[i];
        for (int form = 0; form < 3; form++) { /* plain, interleaved, Q8_0 up */
            memcpy(x, x0, sizeof x);
            const seer_weight *g = form == 1 ? &wgu : &wg, *u = form == 1 ? NULL : form == 2 ? &wuq : &wu;
            ASSERT_OK(op->ffn_cats(be, x, a, h, g, u, &dt, thrs[k], T));
            double err = 0, mag = 0;
            for (int i = 0; i < T * D; i++)
                err = fmax(err, fabs(x[i] - ref[i])), mag = fmax(mag, fabs(ref[i]));
            int agree = 0;
            for (int i = 0; i < T * F; i++)
                agree += (a[i] != 0.f) == kept[i];
            print_message("thr %.2f form %d: %d of %d kept, max err %.2e of %.2e\n", (double)thrs[k], form,
                          n_kept, T * F, err, mag);
            assert_true(err <= (form == 2 ? 2e-2 : 1e-4) * (1 + mag)); /* Q8_0: the up rows' rounding */
            assert_true(agree >= T * F - 1); /* at most a value on the edge */
        }
        assert_true(k == 0 ? n_kept == T * F : n_kept < T * F);
    }
    /* threshold 0: the dense FFN, x + down (silu(gate h) * up h) */
    float *gg = malloc(sizeof(float) * T * F), *uu = malloc(sizeof(float) * T * F), dense[T * D];
    ASSERT_OK(op->matmul(be, gg, h, &wg, NULL, T));
    ASSERT_OK(op->matmul(be, uu, h, &wu, NULL, T));
    ASSERT_OK(op->swiglu(be, gg, gg, uu, (size_t)T * F));
    ASSERT_OK(op->matmul(be, dense, gg, &wd, NULL, T));
    memcpy(x, x0, sizeof x);
    ASSERT_OK(op->ffn_cats(be, x, a, h, &wg, &wu, &dt, 0.f, T));
    for (int i = 0; i < T * D; i++)
        assert_true(fabsf(x[i] - (x0[i] + dense[i])) <= 1e-4f * (1 + fabsf(dense[i])));
    for (int i = 0; i < T * F; i++) /* a: the hidden activation */
        assert_true(fabsf(a[i] - gg[i]) <= 1e-5f * (1 + fabsf(gg[i])));
    /* refused, x untouched: shapes that disagree, a negative or NaN threshold */
    memcpy(x, x0, sizeof x);
    assert_int_equal(op->ffn_cats(be, x, a, h, &wg, &wu, &wd, 0.1f, T), SEER_ERR_INVALID_ARG); /* not transposed */
    assert_int_equal(op->ffn_cats(be, x, a, h, &wg, NULL, &dt, 0.1f, T), SEER_ERR_INVALID_ARG); /* not interleaved */
    assert_int_equal(op->ffn_cats(be, x, a, h, &wg, &wu, &dt, -1.f, T), SEER_ERR_INVALID_ARG);
    assert_int_equal(op->ffn_cats(be, x, a, h, &wg, &wu, &dt, NAN, T), SEER_ERR_INVALID_ARG);
    assert_memory_equal(x, x0, sizeof x);
    op->weight_free(be, &dt);
    op->weight_free(be, &wuq);
    free(gate), free(up), free(down), free(gu), free(ref), free(kept), free(gg), free(uu);
    op->free(be);
}

/* Decodes the n prompt tokens (n - 1 in one full call, the last flagged sparse or not) into a
 * new sequence of c: the last token's logits into out. */
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

static void test_thresholds(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    const int V = seer_n_vocab(m), F = m->info.ffn_dim;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = 2;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    int32_t tok[48];
    for (int i = 0; i < 48; i++)
        tok[i] = 1 + (i * 37) % 300;
    float *full = malloc(sizeof(float) * V), *sp = malloc(sizeof(float) * V), *again = malloc(sizeof(float) * V);
    last_logits(c, tok, 48, false, full);
    const float dens[] = {0.65f, 0.5f, 0.3f};
    for (int k = 0; k < 3; k++) {
        ASSERT_OK(seer_sparse_ffn_init(c, SEER_SFFN_CATS, dens[k], 0));
        assert_int_equal(seer_sparse_ffn_neurons(c), F);
        last_logits(c, tok, 48, true, sp);
        /* the last layer's kept entries of the sparse token (the CPU's scratch is host memory) */
        int n_kept = 0;
        for (int j = 0; j < F; j++)
            n_kept += c->s.g[j] != 0.f;
        print_message("CATS %.2f: last layer keeps %d of %d, max |logit difference| %.4f\n", (double)dens[k],
                      n_kept, F, tu_rel_err(sp, full, V));
        assert_true(fabs((double)n_kept / F - dens[k]) < 0.2);
        assert_true(tu_rel_err(sp, full, V) > 0);
        /* the full calls are not changed by the histogram they add */
        last_logits(c, tok, 48, false, again);
        assert_memory_equal(full, again, sizeof(float) * V);
    }
    free(full), free(sp), free(again);
    seer_context_free(c);
    seer_model_free(m);
}

static seer_spec_params cats(seer_spec_kind k, double density) {
    seer_spec_params sp = tu_spec(k, 4, 48);
    ASSERT_OK(seer_spec_set(&sp, "ffn_mode", "cats"));
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
                     .kv_quant_bits = sp.kind == SEER_SPEC_QUANTKV ? 8 : 0};
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
    } else { /* prompts of different lengths: a ragged batch */
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
    golden(m, cats(SEER_SPEC_STREAMING, 0.5), "stories streaming, CATS 0.5", 1);
    golden(m, cats(SEER_SPEC_RETRIEVAL, 0.5), "stories retrieval, CATS 0.5", 1);
    golden(m, cats(SEER_SPEC_QUANTKV, 0.5), "stories quantkv, CATS 0.5", 1);
    seer_spec_params tr = cats(SEER_SPEC_STREAMING, 0.5);
    tr.tree_size = 10;
    tr.tree_depth = 4;
    golden(m, tr, "stories streaming tree of 10, CATS 0.5", 1);
    golden(m, cats(SEER_SPEC_STREAMING, 0.3), "stories streaming, CATS 0.3, batch of 5", 5);
    seer_model_free(m);
    /* with the draft weights: their attention, the same FFN */
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    mp.draft_weights = "q8_0";
    ASSERT_OK(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &m));
    seer_spec_params dw = cats(SEER_SPEC_RETRIEVAL, 0.5);
    dw.draft_weights = true;
    golden(m, dw, "stories retrieval, q8_0 draft weights, CATS 0.5", 1);
    seer_model_free(m);
}

static const char *gen_model(const char *name, const char *arch, uint64_t seed, float scale) {
    static char path[512];
    snprintf(path, sizeof path, "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = arch;
    p.n_vocab = 260;
    p.dim = 32;
    p.n_layers = 2;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.ffn_dim = 256;
    p.ctx = 512;
    p.seed = seed;
    p.scale = scale;
    ASSERT_OK(seer_gen_model(&p, path));
    return path;
}

/* The target's distribution under the CATS draft's proposals; the wrong rule fails. */
static void test_distribution(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(gen_model("cats_dist.gguf", "llama", 21, 0.6f));
    tu_dist dist;
    tu_dist_init(&dist, m);
    const int runs = 4000;
    seer_spec_params sp = cats(SEER_SPEC_STREAMING, 0.5);
    sp.gamma = 3;
    tu_spec_set(&sp, "budget", 6);
    tu_spec_set(&sp, "sinks", 2);
    tu_dist_expect(&dist, sp, runs, NULL, "CATS 0.5, streaming");
    seer_spec_params tr = sp;
    tr.tree_size = 8;
    tr.tree_depth = 2;
    tr.gamma = 2;
    tu_dist_expect(&dist, tr, runs, NULL, "CATS 0.5, streaming tree of 8");
    tu_dist_expect(&dist, sp, runs, &seer_verify_wrong_rule_for_tests, "CATS 0.5 with the wrong rule");
    seer_model_free(m);
}

static void test_setting(void **state) {
    (void)state;
    seer_spec_params sp = seer_spec_default_params();
    double v;
    ASSERT_OK(seer_spec_get(&sp, "ffn_mode", &v));
    assert_true(v == SEER_SFFN_GRIFFIN);
    ASSERT_OK(seer_spec_set(&sp, "spec-ffn-mode", "cats"));
    ASSERT_OK(seer_spec_get(&sp, "ffn_mode", &v));
    assert_true(v == SEER_SFFN_CATS);
    assert_int_equal(seer_spec_set(&sp, "ffn_mode", "deja-vu"), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_spec_set(&sp, "ffn_mode", "1"), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_spec_set_num(&sp, "ffn_mode", 2), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_spec_set_num(&sp, "ffn_mode", 0.5), SEER_ERR_INVALID_ARG);
    ASSERT_OK(seer_spec_get(&sp, "ffn_mode", &v));
    assert_true(v == SEER_SFFN_CATS); /* unchanged by the refusals */
    bool found = false;
    seer_spec_option o;
    for (int i = 0; seer_spec_option_at(i, &o); i++)
        if (!strcmp(o.flag, "spec-ffn-mode")) {
            found = !strcmp(o.drafter, "sparse-ffn") && o.type == SEER_SPEC_OPT_CHOICE &&
                    !strcmp(o.choices[(int)o.def], "griffin") && !strcmp(o.choices[1], "cats");
        }
    assert_true(found);

    /* a GELU-gated family: refused at init, the context without a sparse FFN */
    seer_model *m = tu_load_cpu(gen_model("cats_gemma.gguf", "gemma2", 5, 0.5f));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_gen *g = NULL;
    sp.kind = SEER_SPEC_STREAMING;
    ASSERT_OK(seer_spec_set_num(&sp, "ffn_density", 0.5));
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_UNSUPPORTED);
    print_message("gemma2: %s\n", seer_last_error());
    assert_null(g);
    assert_int_equal(seer_sparse_ffn_neurons(c), 0);
    ASSERT_OK(seer_spec_set(&sp, "ffn_mode", "griffin")); /* Griffin's statistic takes any FFN */
    ASSERT_OK(seer_gen_init(c, sp, &g));
    seer_gen_free(g);
    seer_context_free(c);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transpose_and_hist),
        cmocka_unit_test(test_ffn_cats_op),
        cmocka_unit_test(test_thresholds),
        cmocka_unit_test(test_setting),
        cmocka_unit_test(test_greedy_golden),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
