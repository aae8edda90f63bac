/*
 * test_spec_kvtype.c: speculation over a target whose KV rows are quantised (kv_type q8, q4)
 * stays exact with respect to that target. Greedy output with every drafter (the sparse
 * self-drafts, which read the same quantised rows, the draft model, n-grams, token trees and
 * the hierarchy) is bit-identical to plain greedy decoding with the same kv_type, one sequence
 * and a ragged batch, on a random model and the tiny real model. The quantised target really
 * is another model: its greedy output differs from the full-precision one's somewhere. Under
 * sampling the emitted tokens follow the quantised-KV target's exact distribution
 * (chi-square), and a wrong acceptance rule fails the same test.
 */
#include "testutil.h"

#include "spec/spec.h"

#include <stdio.h>
#include <string.h>

static seer_kv_type kv_type;

static seer_spec_stats run(seer_model *m, seer_spec_params spec, int32_t prompts[][64], const int *plen,
                           int n_prompts, int max_new, int page, tu_output *out) {
    tu_gen_ctx cx = {.n_ctx = 320, .page_size = page, .n_batch_max = 128, .kv_type = kv_type};
    return tu_gen_run(m, spec, prompts[0], 64, plen, n_prompts, max_new, tu_greedy(), cx, out, NULL);
}

/* The drafters: chains of each kind, trees over two bases, the hierarchy over streaming. */
static int drafters(seer_model *d, seer_spec_params *out) {
    static const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV,
                                           SEER_SPEC_DRAFT, SEER_SPEC_NGRAM};
    int n = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        out[n] = tu_spec(kinds[k], 4, 16);
        out[n].draft_model = d;
        tu_spec_set(&out[n], "draft_budget", kinds[k] == SEER_SPEC_DRAFT ? 24 : 0);
        n++;
    }
    for (int b = 0; b < 2; b++) { /* trees over a sparse view and over the draft model */
        out[n] = tu_spec(b ? SEER_SPEC_DRAFT : SEER_SPEC_RETRIEVAL, 3, 16);
        out[n].tree_size = 8;
        out[n].tree_depth = 3;
        out[n].draft_model = d;
        tu_spec_set(&out[n], "draft_budget", b ? 24 : 0);
        n++;
    }
    out[n] = tu_spec(SEER_SPEC_HIERARCHY, 4, 16);
    tu_spec_set(&out[n], "hier_base", SEER_SPEC_STREAMING);
    tu_spec_set(&out[n], "hier_gamma", 2);
    out[n].draft_model = d;
    n++;
    return n;
}

static void check_all(seer_model *m, seer_model *d, int32_t prompts[][64], int *plen, int n_prompts, int max_new,
                      int page, const char *name) {
    tu_output plain[4], got[4];
    seer_spec_params sps[8];
    const int nd = drafters(d, sps);
    for (int t = SEER_KV_Q8; t <= SEER_KV_Q4; t++) {
        kv_type = (seer_kv_type)t;
        for (int i = 0; i < n_prompts; i++)
            run(m, seer_spec_default_params(), &prompts[i], &plen[i], 1, max_new, page, &plain[i]);
        for (int k = 0; k < nd; k++) {
            seer_spec_stats st = run(m, sps[k], prompts, plen, n_prompts, max_new, page, got);
            char what[128];
            for (int i = 0; i < n_prompts; i++) {
                snprintf(what, sizeof what, "%s kv %s %s%s batch seq %d", name, seer_kv_type_name(kv_type),
                         seer_spec_kind_name(sps[k].kind), sps[k].tree_size ? " tree" : "", i);
                tu_assert_same(&got[i], &plain[i], what);
            }
            assert_true(st.drafted > 0);
            run(m, sps[k], &prompts[0], &plen[0], 1, max_new, page, got);
            snprintf(what, sizeof what, "%s kv %s %s single", name, seer_kv_type_name(kv_type),
                     seer_spec_kind_name(sps[k].kind));
            tu_assert_same(&got[0], &plain[0], what);
        }
    }
    kv_type = SEER_KV_FULL;
}

static void test_random(void **state) {
    (void)state;
    const char *path = tu_tmp_path("kvt1.gguf");
    seer_gen_params p = seer_gen_default_params();
    p.arch = "llama";
    p.n_vocab = 300;
    p.dim = 64;
    p.n_layers = 2;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.ffn_dim = 128;
    p.ctx = 512;
    p.seed = 21;
    p.scale = 0.3f;
    ASSERT_OK(seer_gen_model(&p, path));
    seer_model *m = tu_load_cpu(path), *d = tu_load_cpu(path);
    uint64_t rng = 23;
    int32_t prompts[3][64];
    int plen[3] = {40, 7, 23};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < plen[i]; j++) /* repetitive prompts give n-gram matches */
            prompts[i][j] = j >= 10 && (tu_rand_u64(&rng) & 1) ? prompts[i][j - 10]
                                                                : (int32_t)(tu_rand_u64(&rng) % 300);
    check_all(m, d, prompts, plen, 3, 60, 4, "random");
    seer_model_free(d);
    seer_model_free(m);
}

/* The tiny real model, the golden prompts; and the quantised target is not the full one. */
static void test_stories(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    check_all(m, d, prompts, plen, 3, 120, 16, "stories");
    /* q4 changes some greedy token of the five golden continuations */
    int differ = 0;
    kv_type = SEER_KV_Q4;
    for (int i = 0; i < 5; i++) {
        tu_output got;
        run(m, seer_spec_default_params(), &prompts[i], &plen[i], 1, 257 - plen[i], 16, &got);
        differ += got.n != gold[i].n || memcmp(got.ids, gold[i].ids, sizeof(int32_t) * got.n) != 0;
    }
    kv_type = SEER_KV_FULL;
    print_message("q4 KV: %d of 5 golden continuations differ\n", differ);
    assert_true(differ > 0);
    seer_model_free(d);
    seer_model_free(m);
}

/* Sampling: the first three emitted tokens follow the quantised-KV target's exact
 * distribution with speculation (chi-square), and the same test fails a wrong rule
 * (rejections resampled from p, not the residual). The cells differ from the full-precision
 * target's, so a run that read full-precision KV anywhere would fail too. */
static void test_distribution(void **state) {
    (void)state;
    const char *path = tu_tmp_path("kvt_dist.gguf"), *dpath = tu_tmp_path("kvt_distd.gguf");
    seer_gen_params p = seer_gen_default_params();
    p.arch = "llama";
    p.n_vocab = 260; /* test_spec's distribution models */
    p.dim = 32;
    p.n_layers = 2;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.ffn_dim = 64;
    p.ctx = 512;
    p.seed = 21;
    p.scale = 0.6f;
    ASSERT_OK(seer_gen_model(&p, path));
    p.dim = 16, p.n_layers = 1, p.n_heads = 2, p.n_kv_heads = 1, p.ffn_dim = 32, p.seed = 22;
    ASSERT_OK(seer_gen_model(&p, dpath));
    seer_model *m = tu_load_cpu(path), *d = tu_load_cpu(dpath);
    tu_dist dist;
    tu_dist_init(&dist, m);
    const int runs = 4000;
    for (int t = SEER_KV_Q8; t <= SEER_KV_Q4; t++) {
        tu_dist_set_kv_type(&dist, (seer_kv_type)t);
        seer_spec_params spec = tu_spec(t == SEER_KV_Q8 ? SEER_SPEC_STREAMING : SEER_SPEC_DRAFT, 3, 6);
        tu_spec_set(&spec, "sinks", 2);
        spec.draft_model = d;
        tu_dist_expect(&dist, spec, runs, NULL, "distribution kv %s %s", seer_kv_type_name((seer_kv_type)t),
                       seer_spec_kind_name(spec.kind));
    }
    seer_spec_params spec = tu_spec(SEER_SPEC_STREAMING, 3, 6);
    tu_spec_set(&spec, "sinks", 2);
    tu_dist_expect(&dist, spec, runs, &seer_verify_wrong_rule_for_tests, "distribution kv q4 with the wrong rule");
    seer_model_free(d);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_stories),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
