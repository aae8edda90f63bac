/*
 * test_host_weights.c: layers whose weights live in host memory and are streamed to the
 * device per forward call (seer_model_params.gpu_layers, src/model/host_weights.c), on the
 * CPU backend, whose stage op emulates the host tier with a second pool and memcpy. With any
 * number of layers streamed, the logits of a prefill equal those of the model with every
 * layer resident bit for bit (stories260K, a generated model whose file stores q|k|v and
 * gate|up fused, a synthetic model, and a real model where present); greedy decoding with and
 * without speculation (a draft model's chains and trees, best-first trees verified in
 * several calls, a self-draft) reproduces
 * stories260K's golden ids, and a sampled run the resident model's tokens; placement from
 * free memory follows its rule; bad settings are refused with a clear error.
 */
#include "testutil.h"

#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static seer_status load(const char *path, int gpu_layers, seer_model **m) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    mp.gpu_layers = gpu_layers;
    return seer_model_load(path, mp, m);
}

/* The prefill logits of m with gpu_layers g against those of the resident model (ref). */
static void assert_same_logits(const char *path, int g, const int32_t *tok, int n, const float *ref,
                               const char *what) {
    seer_model *m = NULL;
    ASSERT_OK(load(path, g, &m));
    seer_model_info in;
    seer_model_get_info(m, &in);
    const int resident = g < in.n_layers ? g : in.n_layers;
    assert_int_equal(in.n_layers_resident, resident);
    assert_true((in.host_weight_bytes > 0) == (resident < in.n_layers));
    const size_t V = (size_t)in.n_vocab;
    float *got = malloc(sizeof(float) * n * V);
    assert_non_null(got);
    for (size_t i = 0; i < n * V; i++)
        got[i] = NAN;
    tu_prefill_logits(m, tok, n, got, NULL, NULL);
    if (memcmp(got, ref, sizeof(float) * n * V))
        fail_msg("%s: gpu_layers %d: logits differ from every layer resident", what, g);
    free(got);
    seer_model_free(m);
}

/* Every number of resident layers from 0 to all against the resident model, on the file path. */
static void check_file(const char *path, int n_tok, const char *what) {
    seer_model *m = NULL;
    ASSERT_OK(load(path, -1, &m));
    seer_model_info in;
    seer_model_get_info(m, &in);
    assert_int_equal(in.n_layers_resident, in.n_layers); /* the CPU keeps all by default */
    assert_int_equal(in.host_weight_bytes, 0);
    int32_t tok[64];
    uint64_t rng = 7;
    for (int i = 0; i < n_tok; i++)
        tok[i] = (int32_t)(tu_rand_u64(&rng) % (uint64_t)(in.n_vocab < 256 ? in.n_vocab : 256));
    const size_t V = (size_t)in.n_vocab;
    float *ref = malloc(sizeof(float) * n_tok * V);
    assert_non_null(ref);
    tu_prefill_logits(m, tok, n_tok, ref, NULL, NULL);
    seer_model_free(m);
    const int nl = in.n_layers;
    const int gs[] = {0, 1, nl / 2, nl - 1};
    for (size_t k = 0; k < sizeof gs / sizeof *gs; k++)
        if (gs[k] >= 0 && (k == 0 || gs[k] != gs[k - 1]))
            assert_same_logits(path, gs[k], tok, n_tok, ref, what);
    free(ref);
}

static void test_logits_stories(void **state) {
    (void)state;
    check_file(tu_data_path("models/stories260K.gguf"), 40, "stories260K");
}

/* phi3 files store q|k|v and gate|up fused: the parts are row views of one weight, which the
 * host block must keep as views of its copy. */
static void test_logits_fused_file(void **state) {
    (void)state;
    const char *archs[] = {"phi3", "qwen2", "gemma3"};
    for (int a = 0; a < 3; a++) {
        char name[32];
        snprintf(name, sizeof name, "hw_%s.gguf", archs[a]);
        const char *path = tu_tmp_path(name);
        seer_gen_params p = seer_gen_default_params();
        p.arch = archs[a];
        p.n_vocab = 300;
        p.dim = 64;
        p.n_layers = 3;
        p.n_heads = 4;
        p.n_kv_heads = 2;
        p.ffn_dim = 128;
        p.ctx = 512;
        p.seed = 31 + a;
        p.scale = 0.3f;
        p.dtype = a == 1 ? "q8_0" : "f32";
        ASSERT_OK(seer_gen_model(&p, path));
        check_file(path, 24, archs[a]);
    }
}

static void test_logits_real_model(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/models/smollm2-135m-instruct.gguf", SEER_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_message("skipped: %s is absent\n", path);
        skip();
    }
    fclose(f);
    check_file(path, 12, "SmolLM2-135M");
}

/* A synthetic model (the benchmark's) made with streamed layers computes as the resident one. */
static void test_logits_synthetic(void **state) {
    (void)state;
    float *out[2] = {NULL, NULL};
    int32_t tok[16];
    for (int i = 0; i < 16; i++)
        tok[i] = 3 + 5 * i;
    size_t V = 0;
    for (int k = 0; k < 2; k++) {
        seer_model_params mp = seer_model_default_params();
        mp.backend = SEER_BACKEND_CPU;
        mp.n_threads = 2;
        mp.gpu_layers = k ? 1 : -1;
        seer_model *m = NULL;
        ASSERT_OK(seer_model_synthetic("tiny", NULL, mp, &m));
        seer_model_info in;
        seer_model_get_info(m, &in);
        assert_int_equal(in.n_layers_resident, k ? 1 : in.n_layers);
        V = (size_t)in.n_vocab;
        out[k] = malloc(sizeof(float) * 16 * V);
        assert_non_null(out[k]);
        tu_prefill_logits(m, tok, 16, out[k], NULL, NULL);
        seer_model_free(m);
    }
    assert_memory_equal(out[0], out[1], sizeof(float) * 16 * V);
    free(out[0]);
    free(out[1]);
}

static seer_spec_params spec_of(seer_spec_kind k, seer_model *draft, int tree) {
    seer_spec_params sp = tu_spec(k, 4, 48);
    sp.draft_model = draft;
    tu_spec_set(&sp, "draft_budget", k == SEER_SPEC_DRAFT ? 32 : 0);
    if (tree) {
        sp.tree_size = tree;
        sp.tree_depth = 4;
    }
    return sp;
}

/* Greedy decoding from a stories260K with one layer on the "device": plain, a draft model's
 * chains and trees and a self-draft all give the golden ids. */
static void test_greedy_golden_streamed(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s", tu_data_path("models/stories260K.gguf"));
    seer_model *m = NULL, *d = tu_load_cpu(path);
    ASSERT_OK(load(path, 1, &m));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    const struct {
        seer_spec_kind kind;
        int tree, best_first;
    } runs[] = {{SEER_SPEC_NONE, 0, 0}, {SEER_SPEC_DRAFT, 0, 0}, {SEER_SPEC_DRAFT, 12, 0}, {SEER_SPEC_STREAMING, 0, 0},
                {SEER_SPEC_DRAFT, 100, 4}}; /* SpecExec: best-first trees in calls of 64 rows */
    tu_gen_ctx cx = {.n_ctx = 512, .page_size = 16, .n_batch_max = 64};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        seer_spec_params sp = spec_of(runs[r].kind, d, runs[r].tree);
        if (runs[r].best_first) {
            tu_spec_set(&sp, "draft_best_first", runs[r].best_first);
            sp.tree_depth = 12;
        }
        for (int i = 0; i < 2; i++) {
            tu_gen_run(m, sp, prompts[i], 64, &plen[i], 1, 257 - plen[i], tu_greedy(), cx, &got[i], NULL);
            char what[96];
            snprintf(what, sizeof what, "streamed %s tree %d prompt %d", seer_spec_kind_name(runs[r].kind),
                     runs[r].tree, i);
            tu_assert_same(&got[i], &gold[i], what);
        }
    }
    seer_model_free(d);
    seer_model_free(m);
}

/* Sampling at T > 0 with a draft model's tree: the streamed target's bits are the resident
 * one's, so the same seeds give the same tokens. */
static void test_sampled_same_streamed(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s", tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(path);
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[2][3];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 0.9f;
    sp.seed = 42;
    tu_gen_ctx cx = {.n_ctx = 512, .page_size = 16, .n_batch_max = 64};
    for (int k = 0; k < 2; k++) {
        seer_model *m = NULL;
        ASSERT_OK(load(path, k ? 0 : -1, &m));
        tu_gen_run(m, spec_of(SEER_SPEC_DRAFT, d, 12), prompts[0], 64, plen, 3, 120, sp, cx, got[k], NULL);
        seer_model_free(m);
    }
    for (int i = 0; i < 3; i++)
        tu_assert_same(&got[1][i], &got[0][i], "sampled, every layer streamed");
    seer_model_free(d);
}

/* Placement from free memory (gpu_layers -1) on a backend that reports free memory and can
 * stream: the leading layers while they fit beside two slots of the largest layer and the
 * reserve (1 GiB here), every layer when all fit (no slots then), and a clear refusal when
 * not even the slots fit. */
static uint64_t fake_free;
static seer_status fake_mem(seer_backend *be, uint64_t *bytes) {
    (void)be;
    *bytes = fake_free;
    return SEER_OK;
}
static size_t fake_bytes(seer_backend *be, const seer_weight *w) { return 1; }
static seer_status fake_stage(seer_backend *be, int slot, void *dst, const void *src, size_t n) { return SEER_OK; }
static seer_status fake_wait(seer_backend *be, int slot) { return SEER_OK; }

static void test_plan_from_free_memory(void **state) {
    (void)state;
    static const seer_backend_ops ops = {.name = "fake", .kv_mem_available = fake_mem, .weight_bytes = fake_bytes,
                                         .stage = fake_stage, .stage_wait = fake_wait};
    seer_backend be = {.ops = &ops};
    const uint64_t G = 1ull << 30;
    uint64_t est[8];
    for (int l = 0; l < 8; l++)
        est[l] = G;
    const struct {
        uint64_t free_b;
        int resident;
    } cases[] = {{20 * G, 8}, {10 * G, 8}, {9 * G, 6}, {8 * G + G / 2, 5}, {5 * G, 2}, {4 * G, 1}, {3 * G + G / 2, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        seer_model m = {.be = &be};
        m.info.n_layers = 8;
        fake_free = cases[k].free_b;
        ASSERT_OK(seer_host_plan(&m, -1, 0, est));
        if (m.n_resident != cases[k].resident)
            fail_msg("%.1f GiB free: %d layers resident, expected %d", (double)cases[k].free_b / G, m.n_resident,
                     cases[k].resident);
        assert_true((m.host != NULL) == (m.n_resident < 8));
        free(m.host);
    }
    seer_model m = {.be = &be};
    m.info.n_layers = 8;
    fake_free = 2 * G;
    assert_int_equal(seer_host_plan(&m, -1, 0, est), SEER_ERR_OOM);
    assert_non_null(strstr(seer_last_error(), "staging slots"));
    assert_null(m.host);
    /* an explicit count is taken as given, and refused with tensor parallelism */
    ASSERT_OK(seer_host_plan(&m, 3, 0, est));
    assert_int_equal(m.n_resident, 3);
    free(m.host);
    m.host = NULL;
    assert_int_equal(seer_host_plan(&m, 3, 2, est), SEER_ERR_UNSUPPORTED);
    assert_null(m.host);
}

static void test_bad_settings(void **state) {
    (void)state;
    const char *path = tu_data_path("models/stories260K.gguf");
    seer_model *m = (seer_model *)&m;
    assert_int_equal(load(path, -2, &m), SEER_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(seer_last_error(), "gpu_layers"));
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    mp.gpu_layers = 1;
    mp.tp = 1;
    assert_int_equal(seer_model_load(path, mp, &m), SEER_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(seer_last_error(), "tensor parallelism"));
    mp.tp = 0;
    mp.draft_weights = "q8_0";
    assert_int_equal(seer_model_load(path, mp, &m), SEER_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(seer_last_error(), "draft weights"));
    /* all layers asked for, or more: nothing streamed, draft weights allowed */
    mp.gpu_layers = 1000;
    ASSERT_OK(seer_model_load(path, mp, &m));
    seer_model_info in;
    seer_model_get_info(m, &in);
    assert_int_equal(in.n_layers_resident, in.n_layers);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_stories),
        cmocka_unit_test(test_logits_fused_file),
        cmocka_unit_test(test_logits_real_model),
        cmocka_unit_test(test_logits_synthetic),
        cmocka_unit_test(test_greedy_golden_streamed),
        cmocka_unit_test(test_sampled_same_streamed),
        cmocka_unit_test(test_plan_from_free_memory),
        cmocka_unit_test(test_bad_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
