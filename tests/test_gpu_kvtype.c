/*
 * test_gpu_kvtype.c: a CUDA target whose KV rows are quantised (kv_type q8, q4): greedy output
 * with every drafter (the sparse self-drafts reading the same quantised rows, the draft model,
 * n-grams, token trees under their mask with the accepted path's rows moved, the hierarchy)
 * equals plain greedy decoding on the GPU with the same kv_type, on stories260K's golden
 * prompts (one sequence and a batch of three) and random models of head sizes 64 and 128
 * (ragged batches). Head size 8 (stories260K) runs attention_qkv.cu's kernel, 64 and 128 the
 * tensor-core kernel (attention_tc.cu, dequantising in its tile loads): its prompt, decode,
 * chain and tree calls must agree bit for bit as over bf16 rows. The ops under it (the
 * quantising store, attention over the rows) are checked against the CPU in
 * test_backend_ops_qkv.
 *
 * Skips (via cmocka's skip()) when built without CUDA or when no CUDA device is present.
 */
#include "testutil.h"

#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

static void test_no_device(void **state) {
    (void)state;
    printf("skipped: no CUDA device\n");
    skip();
}

#ifdef SEER_HAVE_CUDA

static seer_model *load_cuda(const char *path) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CUDA;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_load(path, mp, &m));
    return m;
}

static seer_spec_stats run(seer_model *m, seer_kv_type t, seer_spec_params spec, int32_t prompts[][64],
                           const int *plen, int n, int max_new, int page, tu_output *out) {
    tu_gen_ctx cx = {.n_ctx = 320, .page_size = page, .n_batch_max = 128, .kv_type = t};
    return tu_gen_run(m, spec, prompts[0], 64, plen, n, max_new, tu_greedy(), cx, out, NULL);
}

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
    for (int b = 0; b < 2; b++) {
        out[n] = tu_spec(b ? SEER_SPEC_DRAFT : SEER_SPEC_STREAMING, 3, 16);
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
    return n + 1;
}

static int compare(const char *name, seer_model *m, seer_model *d, int32_t prompts[][64], int *plen, int n,
                   int max_new, int page) {
    int bad = 0;
    seer_spec_params sps[8];
    const int nd = drafters(d, sps);
    for (int t = SEER_KV_Q8; t <= SEER_KV_Q4; t++) {
        tu_output plain[3], got[3];
        for (int i = 0; i < n; i++)
            run(m, (seer_kv_type)t, seer_spec_default_params(), &prompts[i], &plen[i], 1, max_new, page, &plain[i]);
        for (int k = 0; k < nd; k++) {
            run(m, (seer_kv_type)t, sps[k], prompts, plen, n, max_new, page, got);
            for (int i = 0; i < n; i++) {
                const bool same = got[i].n == plain[i].n &&
                                  !memcmp(got[i].ids, plain[i].ids, sizeof(int32_t) * (size_t)got[i].n);
                printf("gpu_kvtype: %s kv %s %s%s seq %d: %s\n", name, seer_kv_type_name((seer_kv_type)t),
                       seer_spec_kind_name(sps[k].kind), sps[k].tree_size ? " tree" : "", i, same ? "ok" : "DIFFERS");
                bad += !same;
            }
        }
    }
    return bad;
}

static void test_spec_identical(void **state) {
    (void)state;
    int bad = 0;
    {
        const char *path = tu_data_path("models/stories260K.gguf");
        seer_model *m = load_cuda(path), *d = load_cuda(path);
        int32_t prompts[5][64];
        int plen[5];
        tu_output gold[5];
        assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
        bad += compare("stories260K", m, d, prompts, plen, 3, 150, 16);
        seer_model_free(d);
        seer_model_free(m);
    }
    for (int heads = 8; heads >= 4; heads -= 4) { /* head sizes 64 and 128 */
        const char *path = tu_tmp_path("gpu_kvtype.gguf");
        seer_gen_params p = seer_gen_default_params();
        p.arch = "llama";
        p.n_vocab = 300;
        p.dim = 512;
        p.n_layers = 2;
        p.n_heads = heads;
        p.n_kv_heads = 2;
        p.ffn_dim = 512;
        p.ctx = 512;
        p.seed = 31;
        p.scale = 0.3f;
        ASSERT_OK(seer_gen_model(&p, path));
        seer_model *m = load_cuda(path), *d = load_cuda(path);
        uint64_t rng = 37;
        int32_t prompts[3][64];
        int plen[3] = {60, 7, 23};
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < plen[i]; j++)
                prompts[i][j] = j >= 10 && (tu_rand_u64(&rng) & 1) ? prompts[i][j - 10]
                                                                    : (int32_t)(tu_rand_u64(&rng) % 300);
        bad += compare(heads == 8 ? "random Dh 64" : "random Dh 128", m, d, prompts, plen, 3, 100, 4);
        seer_model_free(d);
        seer_model_free(m);
    }
    printf("gpu_kvtype: speculation on vs off over quantised KV on the GPU: %d mismatching outputs %s\n", bad,
           bad ? "FAIL" : "ok");
    if (bad)
        fail_msg("%d greedy outputs with speculation differ from plain decoding", bad);
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    if (seer_backend_cuda_available()) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_spec_identical)};
        return cmocka_run_group_tests(tests, NULL, NULL);
    }
#endif
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_device)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
