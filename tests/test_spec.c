/*
 * test_spec.c: lossless speculative decoding. Greedy output with every drafter is
 * bit-identical to plain greedy decoding (random models and the tiny real model's golden
 * ids; single sequences and mixed batches); under sampling the emitted tokens follow the
 * target distribution exactly (chi-square), and a deliberately wrong rule fails the same
 * test; the edge cases of rollback and context limits hold. The quantised-KV self-draft (4 and
 * 8 bits, alone and under the streaming view) is held to the same tests.
 */
#include "testutil.h"

#include "spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *gen_model(const char *name, const char *arch, int vocab, int dim, int layers,
                             int heads, int kv, uint64_t seed, float scale) {
    static char paths[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(paths[k], sizeof paths[k], "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = arch;
    p.n_vocab = vocab;
    p.dim = dim;
    p.n_layers = layers;
    p.n_heads = heads;
    p.n_kv_heads = kv;
    p.ffn_dim = dim * 2;
    p.ctx = 512;
    p.seed = seed;
    p.scale = scale;
    ASSERT_OK(seer_gen_model(&p, paths[k]));
    return paths[k];
}

/* kv_quant_bits of the contexts run() makes. */
static int run_kv_bits;

/* Generates for n_prompts prompts together; returns stats. */
static seer_spec_stats run(seer_model *m, seer_spec_params spec, int32_t prompts[][64],
                           const int *plen, int n_prompts, int max_new, seer_sampler_params sp,
                           int n_ctx, int page, tu_output *out) {
    tu_gen_ctx cx = {.n_ctx = n_ctx, .page_size = page, .n_batch_max = 128, .kv_quant_bits = run_kv_bits};
    return tu_gen_run(m, spec, prompts[0], 64, plen, n_prompts, max_new, sp, cx, out, NULL);
}

static const seer_spec_kind KINDS[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV,
                                       SEER_SPEC_DRAFT, SEER_SPEC_NGRAM};

static seer_spec_params spec_of(seer_spec_kind k, seer_model *draft, int gamma, int budget) {
    seer_spec_params sp = tu_spec(k, gamma, budget);
    sp.draft_model = draft;
    tu_spec_set(&sp, "draft_budget", k == SEER_SPEC_DRAFT ? 24 : 0);
    return sp;
}

/* Random-weight models, one sequence and a ragged batch of three, every drafter, several
 * gamma/budget settings, pages of 4 so that every rollback crosses page boundaries. */
static void test_greedy_identical_random(void **state) {
    const char *archs[2][2] = {{"llama", "t1.gguf"}, {"qwen2", "t2.gguf"}};
    for (int a = 0; a < 2; a++) {
        const char *path = gen_model(archs[a][1], archs[a][0], 300, 64, 2, 4, 2, 11 + a, 0.3f);
        seer_model *m = tu_load_cpu(path);
        /* the draft model: the same weights read through a StreamingLLM view of its own
         * cache, so that it agrees with the target often but not always */
        seer_model *d = tu_load_cpu(path);
        uint64_t rng = 17 + a;
        int32_t prompts[3][64];
        int plen[3] = {40, 7, 23};
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < plen[i]; j++) /* repetitive prompts give n-gram matches */
                prompts[i][j] = j >= 10 && (tu_rand_u64(&rng) & 1) ? prompts[i][j - 10]
                                                                    : (int32_t)(tu_rand_u64(&rng) % 300);
        tu_output plain[3], got[3];
        for (int i = 0; i < 3; i++)
            run(m, seer_spec_default_params(), &prompts[i], &plen[i], 1, 60, tu_greedy(), 160, 4, &plain[i]);
        const int settings[][2] = {{1, 8}, {5, 20}};
        for (size_t k = 0; k < sizeof KINDS / sizeof *KINDS; k++)
            for (int s = 0; s < 2; s++) {
                seer_spec_params sp = spec_of(KINDS[k], d, settings[s][0], settings[s][1]);
                char what[128];
                seer_spec_stats st = run(m, sp, prompts, plen, 3, 60, tu_greedy(), 160, 4, got);
                for (int i = 0; i < 3; i++) {
                    snprintf(what, sizeof what, "%s %s G=%d K=%d batch seq %d", archs[a][0],
                             seer_spec_kind_name(KINDS[k]), sp.gamma, (int)tu_spec_get(&sp, "budget"), i);
                    tu_assert_same(&got[i], &plain[i], what);
                }
                assert_true(st.drafted > 0);
                /* ragged acceptance: some but not all drafts accepted */
                if (KINDS[k] != SEER_SPEC_NGRAM && !(st.accepted > 0 && st.accepted < st.drafted))
                    fail_msg("%s: accepted %lld of %lld drafts; expected a ragged mix", what,
                             (long long)st.accepted, (long long)st.drafted);
                run(m, sp, &prompts[0], &plen[0], 1, 60, tu_greedy(), 160, 4, got);
                snprintf(what, sizeof what, "%s %s single", archs[a][0], seer_spec_kind_name(KINDS[k]));
                tu_assert_same(&got[0], &plain[0], what);
            }
        seer_model_free(d);
        seer_model_free(m);
    }
}

/* The tiny real model: every drafter reproduces the golden ids of every prompt (the story
 * ends with BOS inside an accepted draft at some point, and generation stops there). */
static void test_greedy_golden_stories(void **state) {
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    for (size_t k = 0; k < sizeof KINDS / sizeof *KINDS; k++) {
        for (int gm = 2 + 4 * (int)(k % 2); gm <= 6; gm += 8) { /* G = 2 or 6 by kind */
            seer_spec_params sp = spec_of(KINDS[k], d, gm, 48);
            tu_spec_set(&sp, "draft_budget", 32);
            /* budget 256 positions in total, as the reference: prompt + generated */
            for (int i = 0; i < 5; i++) {
                run(m, sp, &prompts[i], &plen[i], 1, 257 - plen[i], tu_greedy(), 512, 16, &got[i]);
                char what[96];
                snprintf(what, sizeof what, "stories %s G=%d prompt %d", seer_spec_kind_name(KINDS[k]), gm, i);
                tu_assert_same(&got[i], &gold[i], what);
            }
            /* all five together: a ragged batch, each stopping at its own BOS or budget;
             * the longest budget is used and outputs are compared up to the reference's */
            run(m, sp, prompts, plen, 5, 256, tu_greedy(), 512, 16, got);
            for (int i = 0; i < 5; i++) {
                char what[96];
                snprintf(what, sizeof what, "stories batch %s prompt %d", seer_spec_kind_name(KINDS[k]), i);
                tu_output g2 = got[i];
                if (g2.n > gold[i].n)
                    g2.n = gold[i].n;
                tu_assert_same(&g2, &gold[i], what);
            }
        }
    }
    seer_model_free(d);
    seer_model_free(m);
}

/* SnapKV's observation window straddling two prefill chunks selects exactly what it selects
 * when the prompt fits one chunk: the drafts, and so the acceptance counts, are equal. */
static void test_snapkv_window_across_chunks(void **state) {
    seer_model *m = tu_load_cpu(gen_model("sk.gguf", "llama", 300, 64, 2, 4, 2, 31, 0.3f));
    int32_t prompt[150];
    for (int i = 0; i < 150; i++)
        prompt[i] = (int32_t)((i * 7919) % 300);
    seer_spec_stats st[2];
    const int32_t *ids[2];
    int n[2];
    seer_context *c[2];
    seer_gen *g[2];
    for (int r = 0; r < 2; r++) {
        seer_context_params cp = seer_context_default_params();
        cp.n_ctx = 256;
        cp.n_batch_max = r == 0 ? 128 : 256; /* window rows 120..149: split, then whole */
        ASSERT_OK(seer_context_init(m, cp, &c[r]));
        seer_spec_params sp = spec_of(SEER_SPEC_SNAPKV, NULL, 4, 48);
        tu_spec_set(&sp, "snap_window", 30);
        ASSERT_OK(seer_gen_init(c[r], sp, &g[r]));
        int h, active = 1;
        ASSERT_OK(seer_gen_add(g[r], prompt, 150, 40, tu_greedy(), true, &h));
        while (active)
            ASSERT_OK(seer_gen_step(g[r], &active));
        n[r] = seer_gen_output(g[r], h, &ids[r]);
        seer_gen_stats(g[r], &st[r]);
    }
    assert_int_equal(n[0], n[1]);
    assert_memory_equal(ids[0], ids[1], sizeof(int32_t) * n[0]);
    assert_int_equal(st[0].drafted, st[1].drafted);
    assert_int_equal(st[0].accepted, st[1].accepted);
    assert_true(st[0].accepted < st[0].drafted); /* the selection is really sparse */
    for (int r = 0; r < 2; r++) {
        seer_gen_free(g[r]);
        seer_context_free(c[r]);
    }
    seer_model_free(m);
}

/* The story's closing BOS arrives inside an accepted draft: generation stops right there,
 * the accepted tokens after it are dropped, and the output equals the reference. */
static void test_stop_inside_draft(void **state) {
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompt[1][64] = {{1, 410, 469, 347}}; /* "Zoo": the reference ends with BOS */
    int plen[1] = {4};
    tu_output plain, got;
    run(m, seer_spec_default_params(), prompt, plen, 1, 400, tu_greedy(), 512, 16, &plain);
    assert_int_equal(plain.ids[plain.n - 1], 1);
    int truncated = 0;
    for (int gm = 3; gm <= 8; gm++) {
        seer_spec_params sp = spec_of(SEER_SPEC_STREAMING, NULL, gm, 4096); /* draft == target */
        seer_spec_stats st = run(m, sp, prompt, plen, 1, 400, tu_greedy(), 512, 16, &got);
        tu_assert_same(&got, &plain, "stop inside a draft");
        assert_int_equal(st.accepted, st.drafted);
        /* without truncation every round emits accepted + 1 tokens (+1 from the prefill) */
        truncated += st.emitted < st.accepted + st.rounds + 1;
    }
    assert_true(truncated > 0);
    seer_model_free(m);
}

/* Budget >= context: the self-draft is the full model, so greedy accepts every draft. Also
 * gamma larger than the room left, and a prompt of one token. */
static void test_edge_cases(void **state) {
    seer_model *m = tu_load_cpu(gen_model("e.gguf", "llama", 300, 64, 2, 4, 2, 5, 0.3f));
    int32_t prompts[1][64] = {{1}};
    int plen[1] = {1};
    tu_output plain, got;
    run(m, seer_spec_default_params(), prompts, plen, 1, -1, tu_greedy(), 50, 4, &plain);
    assert_int_equal(plain.n, 49); /* context of 50 filled: 1 prompt + 49 generated */
    for (int kind = SEER_SPEC_STREAMING; kind <= SEER_SPEC_SNAPKV; kind++) {
        seer_spec_params sp = spec_of((seer_spec_kind)kind, NULL, 8, 1000);
        seer_spec_stats st = run(m, sp, prompts, plen, 1, -1, tu_greedy(), 50, 4, &got);
        tu_assert_same(&got, &plain, "budget >= context");
        assert_true(st.drafted > 0);
        assert_int_equal(st.accepted, st.drafted);
    }
    /* gamma 16 near the end of a 50-token context: drafts shrink to the room left */
    seer_spec_params sp = spec_of(SEER_SPEC_STREAMING, NULL, 16, 8);
    run(m, sp, prompts, plen, 1, -1, tu_greedy(), 50, 4, &got);
    tu_assert_same(&got, &plain, "gamma beyond the context");
    /* max_new smaller than gamma */
    run(m, sp, prompts, plen, 1, 3, tu_greedy(), 50, 4, &got);
    assert_int_equal(got.n, 3);
    assert_memory_equal(got.ids, plain.ids, 3 * sizeof(int32_t));

    /* adopt: a sequence whose cache was filled outside the generator continues exactly */
    {
        int32_t pr[1][64];
        int pl[1] = {12};
        for (int i = 0; i < 12; i++)
            pr[0][i] = (int32_t)(i * 37 % 300);
        tu_output ref;
        run(m, seer_spec_default_params(), pr, pl, 1, 20, tu_greedy(), 50, 4, &ref);
        seer_context_params cp = seer_context_default_params();
        cp.n_ctx = 50;
        cp.page_size = 4;
        seer_context *c;
        ASSERT_OK(seer_context_init(m, cp, &c));
        seer_seq_id q;
        ASSERT_OK(seer_seq_new(c, &q));
        int32_t sq[12], pos[12];
        for (int i = 0; i < 12; i++)
            sq[i] = q, pos[i] = i;
        seer_batch b = {.n_tokens = 12, .token = pr[0], .seq = sq, .pos = pos};
        ASSERT_OK(seer_decode(c, &b, NULL));
        seer_gen *g;
        ASSERT_OK(seer_gen_init(c, spec_of(SEER_SPEC_STREAMING, NULL, 3, 6), &g));
        int32_t toks[13];
        memcpy(toks, pr[0], sizeof(int32_t) * 12);
        toks[12] = ref.ids[0];
        int h, active = 1;
        assert_int_equal(seer_gen_adopt(g, q, toks, 12, 19, tu_greedy(), false, &h), SEER_ERR_INVALID_ARG);
        ASSERT_OK(seer_gen_adopt(g, q, toks, 13, 19, tu_greedy(), false, &h));
        while (active)
            ASSERT_OK(seer_gen_step(g, &active));
        const int32_t *ids;
        assert_int_equal(seer_gen_output(g, h, &ids), 19);
        assert_memory_equal(ids, ref.ids + 1, 19 * sizeof(int32_t));
        seer_gen_free(g);
        seer_context_free(c);
    }

    /* bad arguments */
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 32;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_gen *g;
    sp.gamma = 0;
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    sp = spec_of(SEER_SPEC_DRAFT, NULL, 4, 8);
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    ASSERT_OK(seer_gen_init(c, seer_spec_default_params(), &g));
    int h;
    assert_int_equal(seer_gen_add(g, prompts[0], 0, 5, tu_greedy(), false, &h), SEER_ERR_INVALID_ARG);
    int32_t longp[40] = {0};
    assert_int_equal(seer_gen_add(g, longp, 40, 5, tu_greedy(), false, &h), SEER_ERR_CONTEXT);
    int32_t badtok = 300;
    assert_int_equal(seer_gen_add(g, &badtok, 1, 5, tu_greedy(), false, &h), SEER_ERR_INVALID_ARG);
    seer_sampler_params bad = tu_greedy();
    bad.top_p = 2;
    assert_int_not_equal(seer_gen_add(g, prompts[0], 1, 5, bad, false, &h), SEER_OK);
    assert_int_equal(seer_kv_free_pages(c), 2);
    seer_gen_free(g);
    seer_context_free(c);
    seer_model_free(m);
}

/* A draft model whose vocabulary differs is refused with a clear message. */
static void test_vocab_mismatch(void **state) {
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(gen_model("v.gguf", "llama", 512, 32, 1, 2, 1, 3, 0.3f));
    seer_context *c;
    ASSERT_OK(seer_context_init(m, seer_context_default_params(), &c));
    seer_gen *g;
    seer_spec_params sp = spec_of(SEER_SPEC_DRAFT, d, 4, 16);
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "vocabulary"));
    seer_context_free(c);
    seer_model_free(d);
    seer_model_free(m);
}

/* The quantised-KV self-draft, 4 and 8 bits, alone and under the streaming view: greedy
 * output equals plain decoding on random Llama and Qwen2 models (one sequence and a ragged
 * batch of three) and the golden ids of stories260K (each prompt alone and all five
 * together); plain decoding in a pool that keeps a copy equals it too. The 4-bit drafts are
 * accepted often but not always (the copy is not the rows). */
static const struct {
    int bits;
    seer_spec_kind view;
} QKV[] = {{4, SEER_SPEC_NONE}, {8, SEER_SPEC_NONE}, {4, SEER_SPEC_STREAMING}};

static void test_quantkv_greedy(void **state) {
    const char *archs[2][2] = {{"llama", "q1.gguf"}, {"qwen2", "q2.gguf"}};
    for (int a = 0; a < 2; a++) {
        seer_model *m = tu_load_cpu(gen_model(archs[a][1], archs[a][0], 300, 64, 2, 4, 2, 41 + a, 0.3f));
        uint64_t rng = 47 + a;
        int32_t prompts[3][64];
        int plen[3] = {45, 9, 26};
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < plen[i]; j++)
                prompts[i][j] = (int32_t)(tu_rand_u64(&rng) % 300);
        tu_output plain[3], got[3];
        run_kv_bits = 0;
        for (int i = 0; i < 3; i++)
            run(m, seer_spec_default_params(), &prompts[i], &plen[i], 1, 60, tu_greedy(), 160, 4, &plain[i]);
        run_kv_bits = 4;
        run(m, seer_spec_default_params(), prompts, plen, 3, 60, tu_greedy(), 160, 4, got);
        for (int i = 0; i < 3; i++)
            tu_assert_same(&got[i], &plain[i], "plain decoding in a pool with a 4-bit copy");
        for (size_t k = 0; k < sizeof QKV / sizeof *QKV; k++)
            for (int gm = 2; gm <= 5; gm += 3) {
                seer_spec_params sp = spec_of(SEER_SPEC_QUANTKV, NULL, gm, 20);
                tu_spec_set(&sp, "kv_view", QKV[k].view);
                run_kv_bits = QKV[k].bits;
                char what[128];
                seer_spec_stats st = run(m, sp, prompts, plen, 3, 60, tu_greedy(), 160, 4, got);
                for (int i = 0; i < 3; i++) {
                    snprintf(what, sizeof what, "%s quantkv %d-bit view %s G=%d batch seq %d", archs[a][0],
                             QKV[k].bits, seer_spec_kind_name(QKV[k].view), gm, i);
                    tu_assert_same(&got[i], &plain[i], what);
                }
                print_message("%s quantkv %d-bit view %s G=%d: accepted %lld of %lld\n", archs[a][0],
                              QKV[k].bits, seer_spec_kind_name(QKV[k].view), gm, (long long)st.accepted,
                              (long long)st.drafted);
                assert_true(st.drafted > 0 && st.accepted > 0);
                if (QKV[k].bits == 4 && st.accepted == st.drafted)
                    fail_msg("%s: every 4-bit draft accepted; expected a ragged mix", what);
                run(m, sp, &prompts[0], &plen[0], 1, 60, tu_greedy(), 160, 4, got);
                tu_assert_same(&got[0], &plain[0], "quantkv single");
            }
        run_kv_bits = 0;
        seer_model_free(m);
    }

    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    for (size_t k = 0; k < sizeof QKV / sizeof *QKV; k++) {
        seer_spec_params sp = spec_of(SEER_SPEC_QUANTKV, NULL, 3 + (int)k, 48);
        tu_spec_set(&sp, "kv_view", QKV[k].view);
        run_kv_bits = QKV[k].bits;
        for (int i = 0; i < 5; i++) {
            run(m, sp, &prompts[i], &plen[i], 1, 257 - plen[i], tu_greedy(), 512, 16, &got[i]);
            char what[96];
            snprintf(what, sizeof what, "stories quantkv %d-bit view %s prompt %d", QKV[k].bits,
                     seer_spec_kind_name(QKV[k].view), i);
            tu_assert_same(&got[i], &gold[i], what);
        }
        run(m, sp, prompts, plen, 5, 256, tu_greedy(), 512, 16, got);
        for (int i = 0; i < 5; i++) {
            char what[96];
            snprintf(what, sizeof what, "stories batch quantkv %d-bit prompt %d", QKV[k].bits, i);
            tu_output g2 = got[i];
            if (g2.n > gold[i].n)
                g2.n = gold[i].n;
            tu_assert_same(&g2, &gold[i], what);
        }
    }
    run_kv_bits = 0;
    seer_model_free(m);
}

/* ---- distribution ---------------------------------------------------------------------- */

static void test_distribution(void **state) {
    /* weights scaled up so the distributions are peaked but not degenerate */
    seer_model *m = tu_load_cpu(gen_model("dist.gguf", "llama", 260, 32, 2, 4, 2, 21, 0.6f));
    seer_model *d = tu_load_cpu(gen_model("distd.gguf", "llama", 260, 16, 1, 2, 1, 22, 0.6f));
    tu_dist dist;
    tu_dist_init(&dist, m);
    const int runs = 4000;
    seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_DRAFT, SEER_SPEC_NGRAM};
    for (int k = 0; k < 3; k++) {
        seer_spec_params spec = spec_of(kinds[k], d, 3, 6);
        tu_spec_set(&spec, "sinks", 2);
        tu_dist_expect(&dist, spec, runs, NULL, "distribution %s", seer_spec_kind_name(kinds[k]));
    }
    /* the quantised-KV draft: 4 bits alone, 4 bits under the streaming view, and 8 bits */
    for (size_t k = 0; k < sizeof QKV / sizeof *QKV; k++) {
        seer_spec_params spec = spec_of(SEER_SPEC_QUANTKV, NULL, 3, 6);
        tu_spec_set(&spec, "sinks", 2);
        tu_spec_set(&spec, "kv_view", QKV[k].view);
        dist.kv_bits = QKV[k].bits;
        tu_dist_expect(&dist, spec, runs, NULL, "distribution quantkv %d-bit view %s", QKV[k].bits,
                       seer_spec_kind_name(QKV[k].view));
        dist.kv_bits = 0;
    }
    /* the same test rejects a wrong rule: resampling rejections from p, not the residual */
    seer_spec_params spec = spec_of(SEER_SPEC_STREAMING, d, 3, 6);
    tu_spec_set(&spec, "sinks", 2);
    tu_dist_expect(&dist, spec, runs, &seer_verify_wrong_rule_for_tests, "distribution with the wrong rule");
    seer_model_free(d);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identical_random),
        cmocka_unit_test(test_greedy_golden_stories),
        cmocka_unit_test(test_quantkv_greedy),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_stop_inside_draft),
        cmocka_unit_test(test_snapkv_window_across_chunks),
        cmocka_unit_test(test_vocab_mismatch),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
