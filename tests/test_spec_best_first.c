/*
 * test_spec_best_first.c: SpecExec's trees (the draft model's best-first search) and their
 * verification in several calls where a tree exceeds one.
 *
 *   - Bad settings are refused: a best-first search without a tree size, a tree over the
 *     most nodes, with another kind than the draft model (the hierarchy, auto), and
 *     best-first trees in the scheduler (whose one call cannot chunk them).
 *   - Greedy output with best-first trees equals plain decoding on random models (a draft
 *     that is the target and one of its weights rescaled; one sequence and a ragged batch of three;
 *     pages of 4 so that accepted rows move across pages), for trees that fit a call, trees
 *     of 100 nodes verified in calls of 65 rows and trees of 60 nodes in calls of 16 (the
 *     batch limit); the trees are as large as asked, so the chunked path ran; greedy
 *     verification calls only where the walk goes (more than one call a round for a draft
 *     equal to the target, fewer than the whole tree's for the rescaled one).
 *   - Under sampling (T > 0 with top-k, top-p, min-p) the joint distribution of the first three
 *     tokens passes the chi-square test with best-first trees of 36 nodes verified in calls of
 *     32 rows, and fails it with the wrong rule.
 *   - The node budget chosen from a pass's cost (best_first_size.c): a pass whose cost is
 *     flat in its tokens (a streamed, offloaded target) takes a large tree, a pass whose cost
 *     grows with them a small one (plain decoding: one node), an expensive draft a smaller
 *     one; the expected accepted tokens of a budget grow with it. End to end, an automatic
 *     size (tree size -1) with given tables keeps greedy output and sizes the trees so.
 */
#include "testutil.h"

#include "spec/best_first_size.h"
#include "spec/spec.h"
#include "spec/tree_shape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *gen_model(const char *name, int vocab, int dim, int layers, uint64_t seed, float scale) {
    static char paths[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(paths[k], sizeof paths[k], "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = "llama";
    p.n_vocab = vocab;
    p.dim = dim;
    p.n_layers = layers;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.ffn_dim = dim * 2;
    p.ctx = 1024;
    p.seed = seed;
    p.scale = scale;
    ASSERT_OK(seer_gen_model(&p, paths[k]));
    return paths[k];
}

static seer_spec_params best_first(seer_model *draft, int size, int depth, int topk) {
    seer_spec_params sp = seer_spec_default_params();
    sp.kind = SEER_SPEC_DRAFT;
    sp.gamma = 4; /* chains only */
    sp.tree_size = size;
    sp.tree_depth = depth;
    sp.draft_model = draft;
    tu_spec_set(&sp, "draft_best_first", topk);
    return sp;
}

static void test_bad_settings(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch_max = 32;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_gen *g = NULL;
    seer_spec_params sp = best_first(m, 0, 8, 2); /* no tree */
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    sp = best_first(m, SEER_TREE_BEST_FIRST_MAX + 1, 8, 2);
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_null(g);
    sp = best_first(m, 16, 8, 2);
    sp.kind = SEER_SPEC_HIERARCHY; /* only the draft model's own trees search */
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    sp.kind = SEER_SPEC_AUTO;
    sp.tree_size = 0;
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_null(g);
    sp = best_first(m, 200, 8, 2); /* larger than a call: accepted */
    ASSERT_OK(seer_gen_init(c, sp, &g));
    seer_gen_free(g);
    seer_sched_params sc = seer_sched_default_params();
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, sc, &s));
    int32_t prompt[4] = {1, 2, 3, 4};
    seer_request_params rp = seer_request_default_params();
    rp.spec = sp;
    rp.max_tokens = 4;
    seer_request *r = NULL;
    seer_status st = seer_request_new(m, prompt, 4, &rp, &r);
    if (st == SEER_OK)
        st = seer_sched_submit(s, r);
    assert_int_equal(st, SEER_ERR_INVALID_ARG);
    seer_request_free(r);
    seer_sched_free(s);
    seer_context_free(c);
    seer_model_free(m);
}

static void test_greedy_identical(void **state) {
    (void)state;
    const char *path = gen_model("bf1.gguf", 300, 64, 2, 11, 0.3f);
    const char *other = gen_model("bf2.gguf", 300, 64, 2, 11, 0.2f); /* its weights at another scale */
    seer_model *m = tu_load_cpu(path), *same = tu_load_cpu(path), *diff = tu_load_cpu(other);
    uint64_t rng = 17;
    int32_t prompts[3][64];
    int plen[3] = {40, 7, 23};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = j >= 10 && (tu_rand_u64(&rng) & 1) ? prompts[i][j - 10] : (int32_t)(tu_rand_u64(&rng) % 300);
    tu_output plain[3], got[3];
    tu_gen_ctx cx = {.n_ctx = 900, .page_size = 4, .n_batch_max = 128};
    for (int i = 0; i < 3; i++)
        tu_gen_run(m, seer_spec_default_params(), prompts[i], 64, &plen[i], 1, 50, tu_greedy(), cx, &plain[i], NULL);
    static const struct {
        int size, depth, topk, batch;
    } cases[] = {{40, 12, 3, 128}, {100, 16, 4, 128}, {60, 12, 2, 16}};
    seer_model *drafts[2] = {same, diff};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (int dr = 0; dr < 2; dr++) {
            seer_spec_params sp = best_first(drafts[dr], cases[k].size, cases[k].depth, cases[k].topk);
            cx.n_batch_max = cases[k].batch;
            char what[160];
            snprintf(what, sizeof what, "best-first n=%d k=%d calls of %d, draft %s", cases[k].size, cases[k].topk,
                     cases[k].batch < 65 ? cases[k].batch : 65, dr ? "rescaled" : "same");
            seer_spec_stats st = tu_gen_run(m, sp, prompts[0], 64, plen, 3, 50, tu_greedy(), cx, got, NULL);
            for (int i = 0; i < 3; i++)
                tu_assert_same(&got[i], &plain[i], what);
            print_message("%s: %.1f nodes, %.2f accepted and %.2f target calls per round\n", what,
                          (double)st.drafted / st.rounds, (double)st.accepted / st.rounds,
                          (double)st.verify_calls / st.rounds);
            assert_true(st.accepted > 0);
            if (dr == 1 && !(st.accepted * 2 < st.rounds * cases[k].depth))
                fail_msg("%s: accepted %lld in %lld rounds", what, (long long)st.accepted, (long long)st.rounds);
            /* the trees are as large as asked (up to the end of the generation) */
            assert_true((double)st.drafted / st.rounds > cases[k].size * 0.6);
            st = tu_gen_run(m, sp, prompts[1], 64, &plen[1], 1, 50, tu_greedy(), cx, got, NULL);
            tu_assert_same(&got[0], &plain[1], what);
            /* one sequence: a call per round at least; where the tree exceeds a call the walk
             * goes past the first (a draft equal to the target reaches deep) but takes fewer
             * calls than the whole tree would (the rescaled draft's walks end in the first) */
            const int per = cases[k].batch < 65 ? cases[k].batch : 65, full = (cases[k].size + per) / per;
            print_message("  one sequence: %.2f target calls per round (the whole tree: %d or more)\n",
                          (double)st.verify_calls / st.rounds, full);
            assert_true(st.verify_calls >= st.rounds);
            if (full > 1 && dr == 0)
                assert_true(st.verify_calls > st.rounds);
            if (full > 1 && dr == 1)
                assert_true(st.verify_calls < st.rounds * full);
        }
    seer_model_free(diff);
    seer_model_free(same);
    seer_model_free(m);
}

static void test_distribution(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(gen_model("bfdist.gguf", 260, 32, 2, 21, 0.6f));
    /* the draft: the target's weights at another scale (the same ranking of most tokens, other
     * probabilities: some drafts accepted, some rejected) */
    seer_model *d = tu_load_cpu(gen_model("bfdistd.gguf", 260, 32, 2, 21, 0.45f));
    tu_dist dist;
    tu_dist_init(&dist, m);
    dist.max_new = 8; /* the first round drafts past the third token: trees of depth 6 */
    const int runs = 4000;
    /* 36 nodes, three children per expanded node: in calls of 32 rows (the batch limit) */
    seer_spec_params spec = best_first(d, 36, 6, 3);
    tu_dist_expect(&dist, spec, runs, NULL, "best-first tree distribution, chunked");
    spec = best_first(d, 12, 4, 2);
    tu_dist_expect(&dist, spec, runs, NULL, "best-first tree distribution, one call");
    spec = best_first(d, 36, 6, 3);
    tu_dist_expect(&dist, spec, runs, &seer_verify_wrong_rule_for_tests,
                   "best-first tree distribution with the wrong rule");
    seer_model_free(d);
    seer_model_free(m);
}

/* The budget from cost tables: flat pass cost (offloaded: the weights' stream dominates) takes
 * a large tree, a pass linear in its tokens a small one. */
static void test_size_choice(void **state) {
    (void)state;
    const double p[4] = {0.7, 0.4, 0.3, 0.2};
    double e[1025];
    ASSERT_OK(seer_best_first_expected(p, 4, 1024, 0, e));
    assert_true(fabs(e[1] - 0.7) < 1e-12); /* the best node: rank 1 below the root */
    for (int n = 1; n <= 1024; n++)
        assert_true(e[n] >= e[n - 1] && e[n] - e[n - 1] <= e[1] + 1e-12);
    assert_true(e[1024] > 3 * e[1]); /* deep along the likeliest paths */
    /* a depth bound caps it: depth 1 holds only the root's children */
    double e1[9];
    ASSERT_OK(seer_best_first_expected(p, 4, 8, 1, e1));
    assert_true(e1[8] == e1[4] && e1[4] < 1.0 + 1e-12);
    const int n_flat[] = {1, 65}, n_lin[] = {1, 65};
    const double c_flat[] = {1.0, 1.02}, c_lin[] = {1.0, 65.0};
    const seer_tree_vcost flat = {2, n_flat, c_flat}, lin = {2, n_lin, c_lin};
    int n_f, n_l;
    double sp_f, sp_l;
    ASSERT_OK(seer_best_first_choose(p, 4, &flat, 65, 0.01, 4, 4096, 0, &n_f, &sp_f));
    ASSERT_OK(seer_best_first_choose(p, 4, &lin, 65, 0.01, 4, 4096, 0, &n_l, &sp_l));
    print_message("budget: flat pass %d nodes (%.2fx plain), linear pass %d nodes (%.2fx)\n", n_f, sp_f, n_l, sp_l);
    assert_true(n_f >= 64);
    assert_true(n_l <= 4);
    assert_true(sp_f > sp_l && sp_l >= 1.0);
    /* a pass of several calls costs each call: the flat table's best tree fills its calls */
    assert_true((n_f + 1) % 65 == 0 || n_f == 4096);
    /* an expensive draft shrinks the tree */
    int n_d;
    ASSERT_OK(seer_best_first_choose(p, 4, &flat, 65, 0.5, 4, 4096, 0, &n_d, NULL));
    assert_true(n_d < n_f);
    /* bad arguments are refused */
    const double bad[1] = {1.5};
    assert_int_equal(seer_best_first_choose(bad, 1, &flat, 65, 0.01, 4, 64, 0, &n_d, NULL), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_best_first_choose(p, 4, &flat, 0, 0.01, 4, 64, 0, &n_d, NULL), SEER_ERR_INVALID_ARG);
}

/* An automatic budget (tree size -1) from given cost tables: greedy output unchanged, and the
 * flat table's trees larger than the linear one's. */
static void test_auto_size(void **state) {
    (void)state;
    const char *path = gen_model("bfa.gguf", 300, 64, 2, 11, 0.3f);
    seer_model *m = tu_load_cpu(path), *d = tu_load_cpu(path);
    int32_t prompt[1][64];
    int plen = 30;
    uint64_t rng = 5;
    for (int j = 0; j < plen; j++)
        prompt[0][j] = (int32_t)(tu_rand_u64(&rng) % 300);
    tu_gen_ctx cx = {.n_ctx = 900, .page_size = 4, .n_batch_max = 32};
    tu_output plain, got;
    tu_gen_run(m, seer_spec_default_params(), prompt[0], 64, &plen, 1, 40, tu_greedy(), cx, &plain, NULL);
    const int cn[] = {1, 32};
    const double flat[] = {1.0, 1.02}, lin[] = {1.0, 32.0};
    double per_round[2];
    for (int t = 0; t < 2; t++) {
        seer_spec_params sp = best_first(d, -1, 16, 3);
        sp.tree_cost_points = 2, sp.tree_cost_n = cn, sp.tree_cost = t ? lin : flat, sp.tree_draft_cost = 0.01f;
        seer_spec_stats st = tu_gen_run(m, sp, prompt[0], 64, &plen, 1, 40, tu_greedy(), cx, &got, NULL);
        tu_assert_same(&got, &plain, t ? "best-first, automatic size, linear pass" : "best-first, automatic size, flat pass");
        per_round[t] = (double)st.drafted / st.rounds;
    }
    print_message("automatic budget: %.1f nodes per round (flat pass), %.1f (linear)\n", per_round[0], per_round[1]);
    assert_true(per_round[0] > 20 && per_round[1] < 4); /* flat: one full call of 32 rows */
    seer_model_free(d);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_size_choice),
        cmocka_unit_test(test_auto_size),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
