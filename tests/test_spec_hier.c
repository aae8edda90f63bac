/*
 * test_spec_hier.c: the speculation hierarchy (TriForce, exact at every level): a draft
 * model drafts for the target under a sparse view, which proposes to the full target.
 *
 *   - Bad settings are refused with the generator not made and the context untouched: no
 *     draft model, a vocabulary that differs, a middle level that is not a view of the
 *     target (draft, ngram), token trees, a bottom chain of 0 or past the batch limit, a
 *     quantkv middle without the quantised copy, a middle setting its drafter refuses.
 *   - Greedy output equals plain decoding on random models for every middle view
 *     (streaming, retrieval, snapkv, quantkv) with a weaker bottom drafting chains of 3 and a
 *     perfect one (the target's weights) drafting chains of 1, alone and as a
 *     ragged batch of three, with calls cut by a small batch limit, and with a repetition
 *     penalty (sampled rows at temperature 0); the middle's greedy chain is the chain its
 *     view drafts alone (same drafted and accepted counts as that self-draft).
 *   - stories260K's golden ids with the hierarchy over every middle view (draft model: the
 *     same file; streaming as a batch of five, the others one prompt each), and through the
 *     scheduler beside a chain.
 *   - Under sampling (T > 0 with top-k, top-p, min-p) the joint distribution of the first
 *     three tokens passes the chi-square test with a sparse middle; with TriForce's middle
 *     rule (a rejection resampled from the middle's own distribution) it fails.
 */
#include "testutil.h"

#include "spec/drafter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *gen_model(const char *name, int vocab, int dim, int layers, int heads, int kv, uint64_t seed,
                             float scale) {
    static char paths[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(paths[k], sizeof paths[k], "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = "llama";
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

static int n_batch = 128; /* the contexts' batch limit */

static bool needs_quant(const seer_spec_params *sp) {
    return sp->kind == SEER_SPEC_QUANTKV || (sp->kind == SEER_SPEC_HIERARCHY && (int)tu_spec_get(sp, "hier_base") == SEER_SPEC_QUANTKV);
}

static seer_spec_stats run(seer_model *m, seer_spec_params spec, int32_t prompts[][64], const int *plen,
                           int n_prompts, int max_new, seer_sampler_params sp, int n_ctx, int page,
                           tu_output *out) {
    tu_gen_ctx cx = {.n_ctx = n_ctx, .page_size = page, .n_batch_max = n_batch,
                     .kv_quant_bits = needs_quant(&spec) ? 8 : 0};
    return tu_gen_run(m, spec, prompts[0], 64, plen, n_prompts, max_new, sp, cx, out, NULL);
}

static const seer_spec_kind BASES[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV,
                                       SEER_SPEC_QUANTKV};

static seer_spec_params hier_of(seer_spec_kind base, seer_model *draft, int gamma, int g1, int budget) {
    seer_spec_params sp = tu_spec(SEER_SPEC_HIERARCHY, gamma, budget);
    tu_spec_set(&sp, "hier_base", base);
    tu_spec_set(&sp, "hier_gamma", g1);
    tu_spec_set(&sp, "kv_view", SEER_SPEC_STREAMING);
    sp.draft_model = draft;
    return sp;
}

/* ---- bad settings --------------------------------------------------------------------------- */

static void test_bad_settings(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *other = tu_load_cpu(gen_model("hv.gguf", 300, 32, 1, 2, 1, 3, 0.3f)); /* another vocabulary */
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch_max = 32;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    const int free0 = seer_kv_free_pages(c);
    seer_gen *g = (seer_gen *)&g; /* must come back NULL */
    const struct {
        seer_spec_params sp;
        const char *what;
    } bad[] = {
        {hier_of(SEER_SPEC_STREAMING, NULL, 4, 2, 16), "draft model"},
        {hier_of(SEER_SPEC_STREAMING, other, 4, 2, 16), "vocabulary"},
        {hier_of(SEER_SPEC_STREAMING, m, 4, 32, 16), "gamma"},
        {hier_of(SEER_SPEC_QUANTKV, m, 4, 2, 16), "quantised"},
    };
    /* settings out of their declared range or choices are refused when set, the value kept */
    const struct {
        const char *name;
        double v;
        const char *what;
    } bad_set[] = {
        {"hier_base", SEER_SPEC_DRAFT, "hier_base"}, {"hier_base", SEER_SPEC_NGRAM, "hier_base"},
        {"hier_base", SEER_SPEC_HIERARCHY, "hier_base"}, {"hier_gamma", 0, "hier_gamma"},
        {"budget", 0, "budget"}, {"chunk", 0, "chunk"},
    };
    for (size_t k = 0; k < sizeof bad_set / sizeof *bad_set; k++) {
        seer_spec_params sp = hier_of(SEER_SPEC_RETRIEVAL, m, 4, 2, 16);
        const double before = tu_spec_get(&sp, bad_set[k].name);
        assert_int_equal(seer_spec_set_num(&sp, bad_set[k].name, bad_set[k].v), SEER_ERR_INVALID_ARG);
        if (!strstr(seer_last_error(), bad_set[k].what))
            fail_msg("set %d: message '%s' does not mention %s", (int)k, seer_last_error(), bad_set[k].what);
        assert_true(tu_spec_get(&sp, bad_set[k].name) == before);
    }
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        g = (seer_gen *)&g;
        seer_status s = seer_gen_init(c, bad[k].sp, &g);
        if (s != SEER_ERR_INVALID_ARG)
            fail_msg("case %d (%s): status %d", (int)k, bad[k].what, (int)s);
        assert_null(g);
        if (!strstr(seer_last_error(), bad[k].what))
            fail_msg("case %d: message '%s' does not mention %s", (int)k, seer_last_error(), bad[k].what);
        assert_int_equal(seer_kv_free_pages(c), free0);
    }
    /* token trees over the hierarchy */
    seer_spec_params sp = hier_of(SEER_SPEC_STREAMING, m, 4, 2, 16);
    sp.tree_size = 8;
    sp.tree_depth = 4;
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_null(g);
    /* a middle setting its own drafter refuses (a SnapKV window past the batch limit) */
    sp = hier_of(SEER_SPEC_SNAPKV, m, 4, 2, 16);
    tu_spec_set(&sp, "snap_window", cp.n_batch_max + 1);
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_null(g);
    /* the names */
    seer_spec_kind k;
    ASSERT_OK(seer_spec_kind_parse("hierarchy", &k));
    assert_int_equal(k, SEER_SPEC_HIERARCHY);
    assert_string_equal(seer_spec_kind_name(SEER_SPEC_HIERARCHY), "hierarchy");
    assert_ptr_equal(seer_drafter_find("hierarchy"), &seer_drafter_hierarchy);
    /* and a good one, defaults for the base and the bottom chain */
    sp = seer_spec_default_params();
    sp.kind = SEER_SPEC_HIERARCHY;
    sp.draft_model = m;
    ASSERT_OK(seer_gen_init(c, sp, &g));
    seer_gen_free(g);
    assert_int_equal(seer_kv_free_pages(c), free0);
    seer_context_free(c);
    seer_model_free(other);
    seer_model_free(m);
}

/* ---- greedy identity ---------------------------------------------------------------------- */

static void test_greedy_identical_random(void **state) {
    (void)state;
    const char *tp = gen_model("h1.gguf", 300, 64, 2, 4, 2, 11, 0.3f);
    seer_model *m = tu_load_cpu(tp);
    seer_model *d = tu_load_cpu(gen_model("h1d.gguf", 300, 32, 1, 2, 1, 12, 0.3f)); /* a weaker draft */
    seer_model *same = tu_load_cpu(tp);                                                     /* a perfect one */
    uint64_t rng = 17;
    int32_t prompts[3][64];
    int plen[3] = {40, 7, 23};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = j >= 10 && (tu_rand_u64(&rng) & 1) ? prompts[i][j - 10] : (int32_t)(tu_rand_u64(&rng) % 300);
    tu_output plain[3], got[3];
    for (int i = 0; i < 3; i++)
        run(m, seer_spec_default_params(), &prompts[i], &plen[i], 1, 40, tu_greedy(), 160, 4, &plain[i]);
    /* a weaker bottom with chains of 3, the perfect one with chains of 1 */
    for (size_t k = 0; k < sizeof BASES / sizeof *BASES; k++)
        for (int w = 0; w < 2; w++) {
            const int g1 = w ? 1 : 3;
            seer_spec_params sp = hier_of(BASES[k], w ? same : d, 4, g1, 20);
            tu_spec_set(&sp, "refresh_every", 0); /* the hierarchy keeps the prefill's retrieval selection */
            char what[128];
            seer_spec_stats st = run(m, sp, prompts, plen, 3, 40, tu_greedy(), 160, 4, got);
            for (int i = 0; i < 3; i++) {
                snprintf(what, sizeof what, "hierarchy %s g1=%d draft %d batch seq %d", seer_spec_kind_name(BASES[k]),
                         g1, w, i);
                tu_assert_same(&got[i], &plain[i], what);
            }
            if (!(st.accepted > 0 && st.accepted < st.drafted))
                fail_msg("%s: accepted %lld of %lld", what, (long long)st.accepted, (long long)st.drafted);
            /* the middle's greedy chain is its view's own: the self-draft of that view
             * proposes and gets accepted the same (checked with the weaker bottom) */
            seer_spec_params self = sp;
            self.kind = BASES[k];
            seer_spec_stats ss = w ? st : run(m, self, prompts, plen, 3, 40, tu_greedy(), 160, 4, got);
            if (ss.drafted != st.drafted || ss.accepted != st.accepted)
                fail_msg("%s: %lld of %lld accepted, the self-draft alone %lld of %lld", what,
                         (long long)st.accepted, (long long)st.drafted, (long long)ss.accepted, (long long)ss.drafted);
            run(m, sp, &prompts[1], &plen[1], 1, 40, tu_greedy(), 160, 4, got);
            snprintf(what, sizeof what, "hierarchy %s g1=%d draft %d single", seer_spec_kind_name(BASES[k]), g1, w);
            tu_assert_same(&got[0], &plain[1], what);
        }
    /* a batch limit below the middle's rows of three sequences: its calls are cut */
    n_batch = 8;
    for (size_t k = 0; k < sizeof BASES / sizeof *BASES; k++) {
        run(m, hier_of(BASES[k], d, 5, 3, 20), prompts, plen, 3, 40, tu_greedy(), 160, 4, got);
        for (int i = 0; i < 3; i++)
            tu_assert_same(&got[i], &plain[i], "hierarchy in calls of 8 tokens");
    }
    n_batch = 128;
    /* with a repetition penalty: every middle row's history is its own prefix */
    seer_sampler_params pen = tu_greedy();
    pen.repeat_penalty = 1.3f;
    pen.repeat_last_n = 16;
    run(m, seer_spec_default_params(), prompts, plen, 3, 50, pen, 160, 4, plain);
    for (size_t k = 0; k < sizeof BASES / sizeof *BASES; k++) {
        run(m, hier_of(BASES[k], d, 4, 2, 12), prompts, plen, 3, 50, pen, 160, 4, got);
        for (int i = 0; i < 3; i++)
            tu_assert_same(&got[i], &plain[i], "hierarchy with a repetition penalty");
    }
    /* and with frequency and presence penalties over the same window */
    pen.repeat_penalty = 1.0f;
    pen.frequency_penalty = 0.4f;
    pen.presence_penalty = 0.3f;
    run(m, seer_spec_default_params(), prompts, plen, 3, 50, pen, 160, 4, plain);
    run(m, hier_of(BASES[0], d, 4, 2, 12), prompts, plen, 3, 50, pen, 160, 4, got);
    for (int i = 0; i < 3; i++)
        tu_assert_same(&got[i], &plain[i], "hierarchy with frequency and presence penalties");
    seer_model_free(same);
    seer_model_free(d);
    seer_model_free(m);
}

/* stories260K: every middle view reproduces the golden ids (streaming as a batch of five). */
static void test_greedy_golden_stories(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    for (size_t k = 0; k < sizeof BASES / sizeof *BASES; k++) {
        seer_spec_params sp = hier_of(BASES[k], d, 6, 3, 48);
        tu_spec_set(&sp, "draft_budget", 32); /* the bottom reads a streaming view of its own cache */
        /* streaming: the batch of five; the other views: one prompt each, alone */
        const int n = k == 0 ? 5 : 1, first = k == 0 ? 0 : (int)k;
        seer_spec_stats b = run(m, sp, &prompts[first], &plen[first], n, 256, tu_greedy(), 512, 16, got);
        print_message("stories hierarchy %s, %d prompt(s): %.3f tokens per target verification\n",
                      seer_spec_kind_name(BASES[k]), n, (double)b.emitted / b.rounds);
        for (int i = 0; i < n; i++) {
            char what[96];
            snprintf(what, sizeof what, "stories hierarchy %s prompt %d", seer_spec_kind_name(BASES[k]), first + i);
            tu_output g2 = got[i];
            if (g2.n > gold[first + i].n)
                g2.n = gold[first + i].n;
            tu_assert_same(&g2, &gold[first + i], what);
        }
    }
    seer_model_free(d);
    seer_model_free(m);
}

/* The scheduler: hierarchy requests of two views beside a chain request, in one context. */
static void test_greedy_golden_sched(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = 3;
    cp.n_batch_max = 64;
    cp.page_size = 16;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_sched_params spm = {.max_batch_tokens = 48, .prefill_chunk = 8};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_request *r[3];
    for (int i = 0; i < 3; i++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0;
        p.max_tokens = gold[i].n;
        p.spec = hier_of(i == 1 ? SEER_SPEC_RETRIEVAL : SEER_SPEC_STREAMING, m, 4, 2, 24);
        if (i == 2)
            p.spec.kind = SEER_SPEC_STREAMING; /* a chain class beside the hierarchy */
        ASSERT_OK(seer_request_new(m, prompts[i], plen[i], &p, &r[i]));
        ASSERT_OK(seer_sched_submit(s, r[i]));
    }
    int active = 1;
    for (int steps = 0; active; steps++) {
        ASSERT_OK(seer_sched_step(s, &active));
        assert_true(steps < 100000);
    }
    for (int i = 0; i < 3; i++) {
        const int32_t *ids;
        tu_output o;
        o.n = seer_request_tokens(r[i], &ids);
        memcpy(o.ids, ids, sizeof(int32_t) * o.n);
        char what[64];
        snprintf(what, sizeof what, "scheduler hierarchy request %d", i);
        tu_assert_same(&o, &gold[i], what);
        seer_request_stats rs;
        seer_request_get_stats(r[i], &rs);
        assert_true(rs.drafted > 0 && rs.accepted > 0);
        seer_request_free(r[i]);
    }
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    assert_true(st.spec_drafted[SEER_SPEC_HIERARCHY] > 0);
    seer_sched_free(s);
    seer_context_free(c);
    seer_model_free(m);
}

/* ---- the distribution ----------------------------------------------------------------------- */

static void test_distribution(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(gen_model("hdist.gguf", 260, 32, 2, 4, 2, 21, 0.6f));
    /* the bottom: the target's weights at a larger scale, so that its distributions overlap
     * the target's but are sharper (the middle rejects some of its tokens and not all: the
     * case where the middle's rule matters) */
    seer_model *d = tu_load_cpu(gen_model("hdistd.gguf", 260, 32, 2, 4, 2, 21, 1.0f));
    tu_dist dist;
    tu_dist_init(&dist, m);
    /* token 1 comes from the prefill; tokens 2 and 3 are the first round's drafts when runs
     * generate 4 tokens, both decided by the middle (streaming, 6 of 24 slots) from bottom
     * chains of 1: two middle calls, the second fed the first's token, so that the q rows of
     * one round come from two calls */
    dist.max_new = 4;
    seer_spec_params spec = hier_of(SEER_SPEC_STREAMING, d, 2, 1, 6);
    tu_spec_set(&spec, "sinks", 2);
    tu_dist_expect(&dist, spec, 2000, NULL, "hierarchy distribution");
    dist.max_new = 3;
    /* TriForce's middle rule with a middle that is the target (a view of every slot), so that
     * the top accepts whatever the middle gives (token 2): its bias reaches the output */
    spec = hier_of(SEER_SPEC_STREAMING, d, 2, 1, 64);
    tu_dist_expect(&dist, spec, 1200, &seer_hier_wrong_rule_for_tests,
                   "hierarchy distribution with the middle's wrong rule");
    seer_model_free(d);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_greedy_identical_random),
        cmocka_unit_test(test_greedy_golden_stories),
        cmocka_unit_test(test_greedy_golden_sched),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
