/*
 * test_spec_select.c: the self-drafts whose view is selected per round from a query
 * (shadowkv: ShadowKV's landmarks and outlier chunks; magicpig: MagicPIG's SimHash
 * collisions; src/spec/select_view.c). Greedy output is bit-identical to plain decoding
 * (random models and stories260K's golden ids; chains of 2 and 6, a token tree, single
 * sequences and ragged batches; the views' budgets well under the sequences' lengths, and
 * the draft does disagree with the target); sampled output follows the target's distribution
 * (chi-square), and the same test fails with a wrong rule; settings out of range are refused
 * with nothing made.
 */
#include "testutil.h"

#include "spec/spec.h"

#include <stdio.h>
#include <string.h>

static seer_spec_kind kind_of(const char *name) {
    seer_spec_kind k;
    ASSERT_OK(seer_spec_kind_parse(name, &k));
    return k;
}

static const char *const NAMES[] = {"shadowkv", "magicpig"};

/* The drafter's settings at budget K: small sinks, windows, chunks and tables, so that the
 * selection is most of what the draft reads. */
static seer_spec_params sel_spec(const char *name, int gamma, int budget) {
    seer_spec_params sp = tu_spec(kind_of(name), gamma, budget);
    tu_spec_set(&sp, "sinks", 2);
    ASSERT_OK(seer_spec_set(&sp, "spec-shadow-chunk", "4"));
    ASSERT_OK(seer_spec_set(&sp, "spec-shadow-outliers", "1"));
    ASSERT_OK(seer_spec_set(&sp, "spec-shadow-window", "4"));
    ASSERT_OK(seer_spec_set(&sp, "spec-pig-bits", "3"));
    ASSERT_OK(seer_spec_set(&sp, "spec-pig-tables", "12"));
    ASSERT_OK(seer_spec_set(&sp, "spec-pig-window", "4"));
    return sp;
}

static seer_spec_stats run(seer_model *m, seer_spec_params spec, int32_t prompts[][64], const int *plen, int n,
                           int max_new, int n_ctx, int page, tu_output *out) {
    tu_gen_ctx cx = {.n_ctx = n_ctx, .page_size = page, .n_batch_max = 128};
    return tu_gen_run(m, spec, prompts[0], 64, plen, n, max_new, tu_greedy(), cx, out, NULL);
}

/* A random model: one sequence and a ragged batch of three, chains and a tree; the draft
 * agrees with the target often but not always (the view is not the full cache), and with a
 * budget covering the whole sequence it always agrees (the draft is then the target). */
static void test_greedy_random(void **state) {
    (void)state;
    seer_gen_params g = seer_gen_default_params();
    g.arch = "llama", g.n_vocab = 300, g.dim = 64, g.n_layers = 2, g.n_heads = 4, g.n_kv_heads = 2;
    g.ffn_dim = 128, g.ctx = 512, g.seed = 31, g.scale = 0.3f;
    const char *path = tu_tmp_path("sel1.gguf");
    ASSERT_OK(seer_gen_model(&g, path));
    seer_model *m = tu_load_cpu(path);
    uint64_t rng = 5;
    int32_t prompts[3][64];
    int plen[3] = {48, 9, 30};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = (int32_t)(tu_rand_u64(&rng) % 300);
    tu_output plain[3], got[3];
    for (int i = 0; i < 3; i++)
        run(m, seer_spec_default_params(), &prompts[i], &plen[i], 1, 60, 160, 4, &plain[i]);
    for (int k = 0; k < 2; k++) {
        const int settings[][3] = {{2, 24, 0}, {6, 20, 0}, {4, 24, 10}}; /* G, K, tree nodes */
        for (int s = 0; s < 3; s++) {
            seer_spec_params sp = sel_spec(NAMES[k], settings[s][0], settings[s][1]);
            sp.tree_size = settings[s][2];
            sp.tree_depth = settings[s][2] ? settings[s][0] : 0;
            char what[128];
            seer_spec_stats st = run(m, sp, prompts, plen, 3, 60, 160, 4, got);
            for (int i = 0; i < 3; i++) {
                snprintf(what, sizeof what, "%s G=%d K=%d tree %d batch seq %d", NAMES[k], sp.gamma, (int)tu_spec_get(&sp, "budget"),
                         sp.tree_size, i);
                tu_assert_same(&got[i], &plain[i], what);
            }
            if (!(st.accepted > 0 && st.accepted < st.drafted))
                fail_msg("%s: accepted %lld of %lld drafts; expected a ragged mix", what, (long long)st.accepted,
                         (long long)st.drafted);
            run(m, sp, &prompts[0], &plen[0], 1, 60, 160, 4, got);
            tu_assert_same(&got[0], &plain[0], NAMES[k]);
        }
        /* a budget past every sequence's length: the full view, every draft accepted */
        seer_spec_params full = sel_spec(NAMES[k], 3, 200);
        seer_spec_stats st = run(m, full, prompts, plen, 3, 60, 160, 4, got);
        for (int i = 0; i < 3; i++)
            tu_assert_same(&got[i], &plain[i], "full budget");
        assert_true(st.drafted > 0);
        assert_int_equal(st.accepted, st.drafted);
    }
    seer_model_free(m);
}

/* stories260K: the golden ids with chains of 2 and 6 and a tree, each prompt alone and all
 * five as a ragged batch (each stopping at its own BOS or budget). */
static void test_greedy_golden_stories(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    for (int k = 0; k < 2; k++) {
        const int settings[][2] = {{2, 0}, {6, 0}, {4, 10}}; /* G, tree nodes */
        for (int s = 0; s < 3; s++) {
            seer_spec_params sp = sel_spec(NAMES[k], settings[s][0], 48);
            sp.tree_size = settings[s][1];
            sp.tree_depth = settings[s][1] ? settings[s][0] : 0;
            seer_spec_stats tot = {0};
            for (int i = 0; i < 5 && s != 1; i++) { /* G = 6: the batch alone (the test's time) */
                seer_spec_stats a = run(m, sp, &prompts[i], &plen[i], 1, 257 - plen[i], 512, 16, &got[i]);
                char what[96];
                snprintf(what, sizeof what, "stories %s G=%d tree %d prompt %d", NAMES[k], sp.gamma, sp.tree_size, i);
                tu_assert_same(&got[i], &gold[i], what);
                tot.drafted += a.drafted, tot.accepted += a.accepted;
            }
            seer_spec_stats b = run(m, sp, prompts, plen, 5, 256, 512, 16, got);
            tot.drafted += b.drafted, tot.accepted += b.accepted;
            assert_true(tot.accepted > 0 && tot.accepted < tot.drafted);
            for (int i = 0; i < 5; i++) {
                char what[96];
                snprintf(what, sizeof what, "stories batch %s G=%d tree %d prompt %d", NAMES[k], sp.gamma,
                         sp.tree_size, i);
                tu_output g2 = got[i];
                if (g2.n > gold[i].n)
                    g2.n = gold[i].n;
                tu_assert_same(&g2, &gold[i], what);
            }
        }
    }
    seer_model_free(m);
}

/* Sampling: the first three tokens are distributed as the target's, with chains and a tree;
 * the same test tells a wrong rule (rejections resampled from p). */
static void test_distribution(void **state) {
    (void)state;
    seer_gen_params g = seer_gen_default_params();
    g.arch = "llama", g.n_vocab = 260, g.dim = 32, g.n_layers = 2, g.n_heads = 4, g.n_kv_heads = 2;
    g.ffn_dim = 64, g.ctx = 512, g.seed = 21, g.scale = 0.6f;
    const char *path = tu_tmp_path("seldist.gguf");
    ASSERT_OK(seer_gen_model(&g, path));
    seer_model *m = tu_load_cpu(path);
    tu_dist dist;
    tu_dist_init(&dist, m);
    const int runs = 4000;
    for (int k = 0; k < 2; k++) {
        seer_spec_params spec = sel_spec(NAMES[k], 3, 12);
        ASSERT_OK(seer_spec_set(&spec, "spec-shadow-chunk", "2"));
        spec.tree_size = k ? 6 : 0; /* shadowkv's chains, magicpig's trees (the test's time) */
        spec.tree_depth = k ? 3 : 0;
        tu_dist_expect(&dist, spec, runs, NULL, "distribution %s %s", NAMES[k], k ? "tree" : "chain");
    }
    /* a view of 12 of the 24 prompt slots: drafts accepted and rejected in the first round;
     * the same runs under a wrong rule fail */
    tu_dist_expect(&dist, sel_spec("magicpig", 3, 12), runs, &seer_verify_wrong_rule_for_tests,
                   "distribution magicpig with the wrong rule");
    seer_model_free(m);
}

/* Settings out of range are refused by name, and ones the drafter cannot run at its init,
 * with an error and nothing made. */
static void test_bad_settings(void **state) {
    (void)state;
    seer_spec_params sp = sel_spec("magicpig", 3, 16), before = sp;
    assert_int_equal(seer_spec_set(&sp, "spec-pig-bits", "17"), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_spec_set(&sp, "spec-shadow-chunk", "0"), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_spec_set(&sp, "spec-pig-tables", "x"), SEER_ERR_INVALID_ARG);
    assert_memory_equal(&sp, &before, sizeof sp);
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 128;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    ASSERT_OK(seer_spec_set(&sp, "spec-pig-collide", "13")); /* more than its 12 tables */
    seer_gen *g = NULL;
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_null(g);
    assert_non_null(strstr(seer_last_error(), "collide"));
    seer_context_free(c);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_greedy_random),
        cmocka_unit_test(test_greedy_golden_stories),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
