/*
 * test_draft_weights.c: the model's draft weights (seer_model_params.draft_weights) on the
 * CPU. The copy holds, for every linear weight and the LM head, the bytes seer_gguf_quant gives
 * for its values; a forward call that asks for it computes near the model's logits but not
 * equal to them; greedy speculation whose draft steps multiply by it (every drafter that
 * reads the target, chains and trees, the hierarchy's middle level, auto's sparse views) stays
 * bit-identical to plain decoding; auto's cost table for such a model is its own; bad names,
 * batches and settings are refused and leave state as it was.
 */
#include "testutil.h"

#include "gguf/gguf.h"
#include "model/model.h"
#include "spec/cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *gen_model(const char *name, const char *arch, int ffn, uint64_t seed) {
    static char paths[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(paths[k], sizeof paths[k], "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = arch;
    p.n_vocab = 300;
    p.dim = 64;
    p.n_layers = 2;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.ffn_dim = ffn;
    p.ctx = 512;
    p.seed = seed;
    p.scale = 0.3f;
    ASSERT_OK(seer_gen_model(&p, paths[k]));
    return paths[k];
}

static seer_status load(const char *path, const char *dw, seer_model **m) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    mp.draft_weights = dw;
    return seer_model_load(path, mp, m);
}

/* The weight's copy holds seer_gguf_quant's bytes of the weight's values, row by row. */
static void assert_copy(const seer_weight *w, const seer_weight *d, ggml_type t, const char *what) {
    assert_int_equal(w->dtype, GGML_TYPE_F32);
    assert_int_equal(d->dtype, t);
    assert_true(d->owned && d->rows == w->rows && d->cols == w->cols && d->data != w->data);
    size_t nb = 0;
    ASSERT_OK(seer_ggml_nbytes(t, (uint64_t)w->rows * w->cols, &nb));
    uint8_t *ref = malloc(nb);
    assert_non_null(ref);
    ASSERT_OK(seer_gguf_quant(t, w->data, ref, (uint64_t)w->rows * w->cols));
    if (memcmp(ref, d->data, nb))
        fail_msg("%s: the %s copy is not seer_gguf_quant's bytes", what, seer_ggml_type_name(t));
    free(ref);
}

static void test_copy_and_forward(void **state) {
    (void)state;
    static const char *names[] = {"q8_0", "q4_0"};
    static const ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
    const char *archs[2][2] = {{"llama", "dw1.gguf"}, {"qwen2", "dw2.gguf"}};
    for (int a = 0; a < 2; a++) {
        const char *path = gen_model(archs[a][1], archs[a][0], 128, 61 + a);
        double rel8 = 0;
        for (int q = 0; q < 2; q++) {
            seer_model *m = NULL;
            ASSERT_OK(load(path, names[q], &m));
            assert_non_null(m->draft_layers);
            for (int l = 0; l < m->info.n_layers; l++) {
                const seer_layer *L = &m->layers[l], *D = &m->draft_layers[l];
                assert_copy(&L->wq, &D->wq, types[q], "wq");
                assert_copy(&L->wv, &D->wv, types[q], "wv");
                assert_copy(&L->w_down, &D->w_down, types[q], "w_down");
                assert_ptr_equal(D->attn_norm, L->attn_norm); /* norms and biases shared */
                assert_ptr_equal(D->bq, L->bq);
            }
            assert_copy(&m->output, &m->draft_output, types[q], "output");
            seer_model_footprint fp;
            seer_model_get_footprint(m, &fp);
            assert_string_equal(fp.draft_weights, names[q]);
            /* 7 weights a layer and the head, whole blocks of 32 */
            const uint64_t elems = fp.weight_elems, bb = (uint64_t)seer_ggml_type_block_bytes(types[q]);
            assert_true(fp.draft_weight_bytes == elems / 32 * bb);

            /* one call with the draft weights, one without, on two sequences of a context */
            seer_context_params cp = seer_context_default_params();
            cp.n_ctx = 64;
            cp.n_seq_max = 2;
            cp.page_size = 4;
            seer_context *c = NULL;
            ASSERT_OK(seer_context_init(m, cp, &c));
            int32_t tok[12], pos[12];
            seer_seq_id sq[12];
            uint8_t want[12];
            uint64_t rng = 5;
            for (int i = 0; i < 12; i++) {
                tok[i] = (int32_t)(tu_rand_u64(&rng) % 300);
                pos[i] = i % 6;
                sq[i] = i / 6;
                want[i] = i % 6 == 5;
            }
            seer_seq_id s0, s1;
            ASSERT_OK(seer_seq_new(c, &s0));
            ASSERT_OK(seer_seq_new(c, &s1));
            for (int i = 0; i < 12; i++)
                sq[i] = i < 6 ? s0 : s1;
            const int V = m->info.n_vocab;
            float *full = malloc(sizeof(float) * 2 * V), *draft = malloc(sizeof(float) * 2 * V);
            assert_non_null(full);
            assert_non_null(draft);
            seer_batch b = {.n_tokens = 6, .token = tok, .seq = sq, .pos = pos, .logits = want};
            ASSERT_OK(seer_decode(c, &b, full));
            b = (seer_batch){.n_tokens = 6, .token = tok + 6, .seq = sq + 6, .pos = pos + 6, .logits = want + 6};
            ASSERT_OK(seer_decode(c, &b, full + V));
            /* the same tokens again from fresh sequences, through the copy */
            seer_seq_free(c, s0);
            seer_seq_free(c, s1);
            ASSERT_OK(seer_seq_new(c, &s0));
            ASSERT_OK(seer_seq_new(c, &s1));
            for (int i = 0; i < 12; i++)
                sq[i] = i < 6 ? s0 : s1;
            b = (seer_batch){.n_tokens = 12, .token = tok, .seq = sq, .pos = pos, .logits = want, .draft_weights = true};
            ASSERT_OK(seer_decode(c, &b, draft));
            double num = 0, den = 0;
            for (int i = 0; i < 2 * V; i++) {
                assert_true(isfinite(draft[i]));
                num += (draft[i] - full[i]) * (double)(draft[i] - full[i]);
                den += full[i] * (double)full[i];
            }
            const double rel = sqrt(num / den);
            print_message("%s %s: draft logits' relative L2 distance %.4f\n", archs[a][0], names[q], rel);
            /* the copy is what the call multiplied by: near the model, nearer at 8 bits */
            assert_true(rel > 0 && rel < (q == 0 ? 0.1 : 0.6));
            if (q == 1)
                assert_true(rel > rel8);
            rel8 = rel;
            seer_context_free(c);
            free(full), free(draft);
            seer_model_free(m);
        }
    }
}

static void test_errors(void **state) {
    (void)state;
    const char *path = gen_model("dwe.gguf", "llama", 128, 71);
    seer_model *m = NULL;
    assert_int_equal(load(path, "q4_k", &m), SEER_ERR_INVALID_ARG);
    assert_null(m);
    assert_int_equal(load(path, "Q8_0 ", &m), SEER_ERR_INVALID_ARG);
    ASSERT_OK(load(path, "", &m)); /* "" is none */
    assert_null(m->draft_layers);

    /* a batch asking for draft weights the model lacks: refused, the cache unchanged */
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 32;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_seq_id s;
    ASSERT_OK(seer_seq_new(c, &s));
    int32_t tok[2] = {5, 6}, pos[2] = {0, 1};
    seer_seq_id sq[2] = {s, s};
    seer_batch b = {.n_tokens = 2, .token = tok, .seq = sq, .pos = pos, .draft_weights = true};
    assert_int_equal(seer_decode(c, &b, NULL), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_seq_len(c, s), 0);
    b.draft_weights = false;
    ASSERT_OK(seer_decode(c, &b, NULL));
    assert_int_equal(seer_seq_len(c, s), 2);

    /* speculation asking for them: refused at init, for every drafter that reads the target */
    const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        seer_spec_params sp = tu_spec(kinds[k], 3, 16);
        sp.draft_weights = true;
        seer_gen *g = NULL;
        assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
        assert_null(g);
    }
    seer_context_free(c);
    seer_model_free(m);
}

/* Greedy speculation through the draft weights equals plain decoding, token for token, on
 * models whose FFN is whole blocks (every weight copied) and not (its rows shared). */
static void test_greedy_identical(void **state) {
    (void)state;
    struct {
        const char *arch, *file;
        int ffn;
        const char *dw;
    } cases[] = {{"llama", "dg1.gguf", 128, "q4_0"}, {"qwen2", "dg2.gguf", 128, "q8_0"},
                 {"llama", "dg3.gguf", 100, "q4_0"}};
    for (size_t a = 0; a < sizeof cases / sizeof *cases; a++) {
        const char *path = gen_model(cases[a].file, cases[a].arch, cases[a].ffn, 81 + a);
        seer_model *m = NULL, *d = NULL;
        ASSERT_OK(load(path, cases[a].dw, &m));
        ASSERT_OK(load(path, NULL, &d)); /* the hierarchy's bottom level */
        uint64_t rng = 91 + a;
        int32_t prompts[3][64];
        int plen[3] = {37, 8, 21};
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < plen[i]; j++)
                prompts[i][j] = (int32_t)(tu_rand_u64(&rng) % 300);
        tu_gen_ctx cx = {.n_ctx = 160, .page_size = 4, .n_batch_max = 128};
        tu_output plain[3], got[3];
        for (int i = 0; i < 3; i++)
            tu_gen_run(m, seer_spec_default_params(), prompts[i], 64, &plen[i], 1, 60, tu_greedy(), cx,
                       &plain[i], NULL);
        struct {
            seer_spec_kind kind;
            int tree, kv_bits;
        } settings[] = {{SEER_SPEC_STREAMING, 0, 0}, {SEER_SPEC_RETRIEVAL, 0, 0}, {SEER_SPEC_SNAPKV, 0, 0},
                        {SEER_SPEC_QUANTKV, 0, 4},   {SEER_SPEC_STREAMING, 6, 0}, {SEER_SPEC_HIERARCHY, 0, 0}};
        long long acc[2] = {0, 0}, drafted[2] = {0, 0};
        for (size_t k = 0; k < sizeof settings / sizeof *settings; k++)
            for (int w = 0; w < 2; w++) {
                seer_spec_params sp = tu_spec(settings[k].kind, 4, 20);
                sp.draft_weights = w;
                sp.draft_model = d;
                if (settings[k].tree) {
                    sp.tree_size = settings[k].tree;
                    sp.tree_depth = 3;
                }
                tu_gen_ctx c2 = cx;
                c2.kv_quant_bits = settings[k].kv_bits;
                seer_spec_stats st = tu_gen_run(m, sp, prompts[0], 64, plen, 3, 60, tu_greedy(), c2, got, NULL);
                for (int i = 0; i < 3; i++) {
                    char what[128];
                    snprintf(what, sizeof what, "%s %s %s%s%s seq %d", cases[a].arch, cases[a].dw,
                             seer_spec_kind_name(settings[k].kind), settings[k].tree ? " tree" : "",
                             w ? " draft weights" : "", i);
                    tu_assert_same(&got[i], &plain[i], what);
                }
                assert_true(st.drafted > 0);
                acc[w] += st.accepted;
                drafted[w] += st.drafted;
            }
        print_message("%s %s: accepted %lld of %lld drafts with the draft weights, %lld of %lld without\n",
                      cases[a].arch, cases[a].dw, acc[1], drafted[1], acc[0], drafted[0]);
        /* the draft weights propose, and are not the model's weights */
        assert_true(acc[1] > 0 && acc[1] < drafted[1]);
        assert_true(acc[1] != acc[0] || drafted[1] != drafted[0]);
        seer_model_free(d);
        seer_model_free(m);
    }
}


/* A cost table where a streaming view of 8 or 32 slots pays at any acceptance (a draft step a
 * tenth of a target step): auto drafts in every round. */
static seer_spec_cost *streaming_table(void) {
    const char *text = "seer-cost 1\nkey test table\nb 1 8\nl 16 1024\nn 2 4 8\n"
                       "target 1e-3 1e-3 1e-3 1e-3\n"
                       "verify 2 1.1e-3 1.1e-3 1.1e-3 1.1e-3\nverify 4 1.2e-3 1.2e-3 1.2e-3 1.2e-3\n"
                       "verify 8 1.4e-3 1.4e-3 1.4e-3 1.4e-3\n"
                       "draft streaming 8 1e-4 1e-4 1e-4 1e-4\ndraft streaming 32 1e-4 1e-4 1e-4 1e-4\nend\n";
    seer_spec_cost *c = NULL;
    ASSERT_OK(seer_spec_cost_parse(text, strlen(text), &c));
    return c;
}

/* Auto on a model holding draft weights: its sparse self-draft candidates draft through them
 * (greedy output still the plain one, the drafts not those of the same model without the
 * copy); calibration times their step so; the cost table's key names the copy, so that a
 * table measured without it is not read for it. */
static void test_auto(void **state) {
    (void)state;
    const char *path = gen_model("da1.gguf", "llama", 128, 97);
    seer_model *m = NULL, *plain_m = NULL;
    ASSERT_OK(load(path, "q4_0", &m));
    ASSERT_OK(load(path, NULL, &plain_m));
    char key[SEER_COST_KEY_MAX], key0[SEER_COST_KEY_MAX];
    seer_cost_key(m, NULL, key, sizeof key);
    seer_cost_key(plain_m, NULL, key0, sizeof key0);
    assert_non_null(strstr(key, "+dw-q4_0@"));
    assert_null(strstr(key0, "+dw"));
    uint64_t rng = 5;
    int32_t prompts[2][64];
    int plen[2] = {30, 11};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = (int32_t)(tu_rand_u64(&rng) % 300);
    tu_gen_ctx cx = {.n_ctx = 200, .page_size = 4, .n_batch_max = 128};
    tu_output plain[2], got[2];
    tu_gen_run(m, seer_spec_default_params(), prompts[0], 64, plen, 2, 80, tu_greedy(), cx, plain, NULL);
    seer_spec_cost *c = streaming_table();
    seer_spec_params sp = seer_spec_default_params();
    sp.kind = SEER_SPEC_AUTO;
    sp.cost = c;
    tu_spec_set(&sp, "sinks", 4);
    seer_spec_auto_stats as[2];
    seer_spec_stats st[2];
    seer_model *models[2] = {m, plain_m};
    for (int k = 0; k < 2; k++) {
        st[k] = tu_gen_run(models[k], sp, prompts[0], 64, plen, 2, 80, tu_greedy(), cx, got, &as[k]);
        for (int i = 0; i < 2; i++)
            tu_assert_same(&got[i], &plain[i], k ? "auto without draft weights" : "auto with draft weights");
        assert_true(st[k].drafted > 0 && as[k].decisions[SEER_SPEC_STREAMING] > 0);
    }
    print_message("auto: accepted %lld of %lld drafts through the copy, %lld of %lld without it\n",
                  (long long)st[0].accepted, (long long)st[0].drafted, (long long)st[1].accepted,
                  (long long)st[1].drafted);
    /* the same model values, prompts and table: only the weights the drafts multiply by differ */
    assert_true(st[0].accepted != st[1].accepted || st[0].drafted != st[1].drafted);
    seer_spec_cost_free(c);
    /* calibration on the model with the copy (its view step through it) */
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 200;
    cp.n_seq_max = 4;
    cp.n_batch_max = 64;
    seer_context *ctx = NULL;
    ASSERT_OK(seer_context_init(m, cp, &ctx));
    c = NULL;
    ASSERT_OK(seer_spec_cost_calibrate(ctx, NULL, 0.05, &c));
    assert_true(seer_spec_cost_has(c, SEER_SPEC_STREAMING));
    assert_string_equal(seer_spec_cost_table(c)->key, key);
    seer_spec_cost_free(c);
    seer_context_free(ctx);
    seer_model_free(plain_m);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_and_forward),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
