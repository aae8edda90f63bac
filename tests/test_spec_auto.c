/*
 * test_spec_auto.c: SEER_SPEC_AUTO, speculation chosen every round by the cost model.
 *
 *   - greedy output with auto equals plain decoding on a random model (alone and as a ragged
 *     batch) under a table that makes every drafter look alike, so that the choice moves
 *     between drafters and plain from round to round, and stories260K's golden ids under a
 *     calibrated table and under one that always favours drafting, in the generator and in
 *     the scheduler (auto requests beside plain ones);
 *   - the choice, seen through the decision counts: plain in every round when every draft is
 *     predicted to lose (a draft step as dear as a target step), a drafter when drafts are
 *     cheap and verification flat; plain without a table;
 *   - exploration: where drafting pays only above the initial prior, probe rounds find a high
 *     acceptance (auto then drafts in most rounds) and stop soon at a low one; acceptance per
 *     budget: a small view that accepts nothing does not keep a larger one that accepts
 *     everything from being found (replayed from a trace);
 *   - sampled generation with auto runs, drafts, and is reproducible from its seed;
 *   - the public cost table: calibration, save and load, a stale key refused, the default
 *     cache path.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *gen_model(const char *name, int vocab, int dim, int layers, uint64_t seed) {
    static char path[512];
    snprintf(path, sizeof path, "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = "llama";
    p.n_vocab = vocab;
    p.dim = dim;
    p.n_layers = layers;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.ffn_dim = dim * 2;
    p.ctx = 512;
    p.seed = seed;
    p.scale = 0.3f;
    ASSERT_OK(seer_gen_model(&p, path));
    return path;
}

typedef struct {
    seer_spec_stats st;
    seer_spec_auto_stats as;
} run_stats;

/* Generates from n_prompts prompts together in one generator. */
/* synthetic acceptance for run()'s generator (seer_gen_set_synthetic; 0, NULL: none) */
static float synth_alpha;
static const seer_accept_trace *synth_trace;

static run_stats run(seer_model *m, seer_spec_params spec, int32_t prompts[][64], const int *plen,
                     int n_prompts, int max_new, seer_sampler_params sp, tu_output *out) {
    tu_gen_ctx cx = {.n_ctx = 512, .page_size = 16, .n_batch_max = 128, .kv_quant_bits = 0,
                     .synthetic_accept = synth_alpha, .synthetic_trace = synth_trace};
    run_stats rs;
    rs.st = tu_gen_run(m, spec, prompts[0], 64, plen, n_prompts, max_new, sp, cx, out, &rs.as);
    return rs;
}

/* A cost table in the file's format: B 1, 8; L 16, 1024; n 2, 4, 8; a target step of t_t,
 * verification of n tokens t_t * (1 + v_slope * (n - 1)), and a step of t_d for each listed
 * drafter (budgets[] for the sparse self-drafts). */
static int budgets[2] = {8, 256}, n_budgets = 2;
static double budget_cost[2] = {1, 1}; /* each budget's step: t_d times this */

static seer_spec_cost *table(double t_t, double v_slope, double t_d, const char *const *kinds, int n_kinds) {
    char buf[8192];
    int n = snprintf(buf, sizeof buf, "seer-cost 1\nkey test table\nb 1 8\nl 16 1024\nn 2 4 8\ntarget");
    for (int i = 0; i < 4; i++)
        n += snprintf(buf + n, sizeof buf - n, " %.9g", t_t);
    const int ns[] = {2, 4, 8};
    for (int v = 0; v < 3; v++) {
        n += snprintf(buf + n, sizeof buf - n, "\nverify %d", ns[v]);
        for (int i = 0; i < 4; i++)
            n += snprintf(buf + n, sizeof buf - n, " %.9g", t_t * (1 + v_slope * (ns[v] - 1)));
    }
    for (int k = 0; k < n_kinds; k++) {
        const bool budgeted = strcmp(kinds[k], "ngram") && strcmp(kinds[k], "draft");
        for (int b = 0; b < (budgeted ? n_budgets : 1); b++) {
            n += snprintf(buf + n, sizeof buf - n, "\ndraft %s %d", kinds[k], budgeted ? budgets[b] : 0);
            for (int i = 0; i < 4; i++)
                n += snprintf(buf + n, sizeof buf - n, " %.9g", t_d * (budgeted ? budget_cost[b] : 1));
        }
    }
    n += snprintf(buf + n, sizeof buf - n, "\nend\n");
    seer_spec_cost *c = NULL;
    ASSERT_OK(seer_spec_cost_parse(buf, (size_t)n, &c));
    return c;
}

static const char *const ALL[] = {"streaming", "retrieval", "snapkv", "draft", "ngram"};

static seer_spec_params auto_spec(const seer_spec_cost *c, seer_model *draft) {
    seer_spec_params sp = seer_spec_default_params();
    sp.kind = SEER_SPEC_AUTO;
    sp.cost = c;
    sp.draft_model = draft;
    tu_spec_set(&sp, "sinks", 4);
    tu_spec_set(&sp, "chunk", 4);
    tu_spec_set(&sp, "snap_window", 4);
    tu_spec_set(&sp, "draft_budget", 24);
    return sp;
}

static int64_t rounds_of(const seer_spec_auto_stats *as) {
    int64_t r = 0;
    for (int k = 0; k < SEER_SPEC_AUTO; k++)
        r += as->decisions[k];
    return r;
}

static int kinds_chosen(const seer_spec_auto_stats *as) {
    int n = 0;
    for (int k = 0; k < SEER_SPEC_AUTO; k++)
        n += as->decisions[k] > 0;
    return n;
}

static void test_parse(void **state) {
    (void)state;
    seer_spec_kind k;
    ASSERT_OK(seer_spec_kind_parse("auto", &k));
    assert_int_equal(k, SEER_SPEC_AUTO);
    assert_string_equal(seer_spec_kind_name(SEER_SPEC_AUTO), "auto");
    /* auto proposes chains: a tree is refused */
    const char *path = gen_model("a0.gguf", 300, 32, 1, 3);
    seer_model *m = tu_load_cpu(path);
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, seer_context_default_params(), &c));
    seer_spec_params sp = auto_spec(NULL, NULL);
    sp.tree_size = 4;
    seer_gen *g = NULL;
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_null(g);
    seer_context_free(c);
    seer_model_free(m);
}

/* Random prompts with repeats (so that n-gram lookups find matches). */
static void prompts_of(int32_t prompts[3][64], const int *plen, int vocab, uint64_t seed) {
    uint64_t rng = seed;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = j >= 10 && (tu_rand_u64(&rng) & 1) ? prompts[i][j - 10]
                                                                : (int32_t)(tu_rand_u64(&rng) % vocab);
}

/* The choice goes to plain when every draft is predicted to lose, to a drafter when drafting
 * is predicted to win; without a table every round is plain. Output is plain's throughout. */
static void test_choice(void **state) {
    (void)state;
    const char *path = gen_model("a1.gguf", 300, 64, 2, 11);
    seer_model *m = tu_load_cpu(path), *d = tu_load_cpu(path);
    int32_t prompts[3][64];
    const int plen[3] = {40, 7, 23};
    prompts_of(prompts, plen, 300, 17);
    tu_output plain[3], got[3];
    run(m, seer_spec_default_params(), prompts, plen, 3, 60, tu_greedy(), plain);

    /* a draft step as dear as a target step, and verification of n tokens n steps: nothing
     * can win */
    seer_spec_cost *lose = table(1e-3, 1.0, 1e-3, ALL, 5);
    run_stats rs = run(m, auto_spec(lose, d), prompts, plen, 3, 60, tu_greedy(), got);
    for (int i = 0; i < 3; i++)
        tu_assert_same(&got[i], &plain[i], "auto, drafts predicted to lose");
    assert_true(rs.as.has_table);
    assert_true(rounds_of(&rs.as) > 0);
    assert_int_equal(rs.as.decisions[SEER_SPEC_NONE], rounds_of(&rs.as));
    assert_int_equal(rs.st.drafted, 0);

    /* drafts nearly free and verification flat: a drafter in (almost) every round. The
     * full-view budget (256 > every cache here) drafts with the target itself, so acceptance
     * stays high and the choice stays on drafting. */
    const char *const streaming[] = {"streaming"};
    budgets[0] = 256, n_budgets = 1;
    seer_spec_cost *win = table(1e-3, 0.01, 1e-5, streaming, 1);
    budgets[0] = 8, n_budgets = 2;
    rs = run(m, auto_spec(win, d), prompts, plen, 3, 60, tu_greedy(), got);
    for (int i = 0; i < 3; i++)
        tu_assert_same(&got[i], &plain[i], "auto, drafts predicted to win");
    print_message("win table: %lld streaming rounds, %lld plain, mean G %.2f, predicted speedup %.2f\n",
                  (long long)rs.as.decisions[SEER_SPEC_STREAMING], (long long)rs.as.decisions[SEER_SPEC_NONE],
                  (double)rs.as.gamma_sum / (rs.as.decisions[SEER_SPEC_STREAMING] + 1e-9),
                  rs.as.predicted_s > 0 ? rs.as.predicted_tokens / rs.as.predicted_s /
                                              (rs.as.plain_tok_s_sum / rounds_of(&rs.as)) : 0);
    assert_true(rs.as.decisions[SEER_SPEC_STREAMING] >= rounds_of(&rs.as) * 9 / 10);
    assert_true(rs.st.drafted > 0 && rs.st.accepted > 0);
    assert_int_equal(rs.as.drafted[SEER_SPEC_STREAMING], rs.st.drafted);
    double pred, meas;
    seer_spec_auto_speedups(&rs.as, &pred, &meas);
    assert_true(pred > 1.05);
    assert_true(meas > 0);
    /* fewer rounds than tokens: the drafts were accepted */
    assert_true(rs.st.rounds < rs.st.emitted - 3);

    /* no table: plain, and said so */
    rs = run(m, auto_spec(NULL, d), prompts, plen, 3, 60, tu_greedy(), got);
    for (int i = 0; i < 3; i++)
        tu_assert_same(&got[i], &plain[i], "auto without a table");
    assert_false(rs.as.has_table);
    assert_int_equal(rs.as.decisions[SEER_SPEC_NONE], rounds_of(&rs.as));
    assert_int_equal(rs.st.drafted, 0);
    seer_spec_cost_free(lose);
    seer_spec_cost_free(win);
    seer_model_free(d);
    seer_model_free(m);
}

/* Every drafter priced alike (drafts cheap, verification rising): the choice follows each
 * drafter's measured acceptance and moves between drafters and plain from round to round;
 * greedy output stays plain decoding's, alone and in a ragged batch. */
static void test_switching_identical(void **state) {
    (void)state;
    const char *path = gen_model("a2.gguf", 300, 64, 2, 5);
    seer_model *m = tu_load_cpu(path), *d = tu_load_cpu(path);
    int32_t prompts[3][64];
    const int plen[3] = {40, 7, 23};
    prompts_of(prompts, plen, 300, 29);
    tu_output plain[3], got[3];
    run(m, seer_spec_default_params(), prompts, plen, 3, 80, tu_greedy(), plain);
    seer_spec_cost *mix = table(1e-3, 0.15, 1e-4, ALL, 5);
    run_stats rs = run(m, auto_spec(mix, d), prompts, plen, 3, 80, tu_greedy(), got);
    for (int i = 0; i < 3; i++)
        tu_assert_same(&got[i], &plain[i], "auto switching, batch");
    print_message("switching: plain %lld, streaming %lld, retrieval %lld, snapkv %lld, draft %lld, ngram %lld\n",
                  (long long)rs.as.decisions[0], (long long)rs.as.decisions[1], (long long)rs.as.decisions[2],
                  (long long)rs.as.decisions[3], (long long)rs.as.decisions[4], (long long)rs.as.decisions[5]);
    assert_true(kinds_chosen(&rs.as) >= 2);
    for (int i = 0; i < 3; i++) {
        run(m, auto_spec(mix, d), &prompts[i], &plen[i], 1, 80, tu_greedy(), got);
        tu_assert_same(&got[0], &plain[i], "auto switching, single");
    }
    seer_spec_cost_free(mix);
    seer_model_free(d);
    seer_model_free(m);
}

/* Exploration: under a table where drafting pays only at high acceptance, the initial prior
 * (0.6) predicts plain decoding; probe rounds measure the drafter, so that auto drafts in most
 * rounds where acceptance is high (synthetic 0.95) and probes only a few times where it is low
 * (synthetic 0.05). Depths past the chains run are assumed to accept as the one before, so
 * the chain grows past G 1. */
static void test_explore(void **state) {
    (void)state;
    const char *path = gen_model("a3.gguf", 300, 64, 2, 13);
    seer_model *m = tu_load_cpu(path);
    int32_t prompts[3][64];
    const int plen[3] = {40, 7, 23};
    prompts_of(prompts, plen, 300, 19);
    const char *const streaming[] = {"streaming"};
    budgets[0] = 16, n_budgets = 1;
    /* G 1 at acceptance a: (1 + a) tokens in 1.65 steps; pays 2 % (min_speedup) only above
     * a = 0.68, and no longer chain pays at the initial prior 0.6 */
    seer_spec_cost *t = table(1e-3, 0.05, 0.6e-3, streaming, 1);
    budgets[0] = 8, n_budgets = 2;
    static const float alpha[] = {0.95f, 0.05f};
    for (int i = 0; i < 2; i++) {
        seer_spec_params sp = auto_spec(t, NULL);
        synth_alpha = alpha[i];
        tu_output got[3];
        run_stats rs = run(m, sp, prompts, plen, 3, 300, tu_greedy(), got);
        synth_alpha = 0;
        const int64_t rounds = rounds_of(&rs.as), drafting = rounds - rs.as.decisions[SEER_SPEC_NONE];
        print_message("synthetic %.2f: %lld rounds, %lld drafting (%lld probes), mean G %.2f\n", alpha[i],
                      (long long)rounds, (long long)drafting, (long long)rs.as.probes,
                      drafting ? (double)rs.as.gamma_sum / drafting : 0.0);
        assert_true(rs.as.probes >= 1);
        if (i == 0) {
            /* the first 8 rounds are plain, until the first probe (explore_every) */
            assert_true(drafting >= (rounds - 8) * 3 / 4);
            assert_true(rs.as.gamma_sum > drafting * 3 / 2); /* chains longer than one */
        } else {
            assert_true(drafting <= rounds / 8);
            assert_true(rs.as.probes <= 10);
        }
    }
    seer_spec_cost_free(t);
    seer_model_free(m);
}

/* Acceptance is tracked per budget: a view of 16 slots that accepts nothing must not rule out
 * one of 64 that accepts everything (replayed from a trace whose lines differ by budget). The
 * cheaper view is tried first, fails, and a probe then finds the larger one. */
static void test_budgets(void **state) {
    (void)state;
    const char *path = gen_model("a4.gguf", 300, 64, 2, 17);
    seer_model *m = tu_load_cpu(path);
    int32_t prompts[3][64];
    const int plen[3] = {40, 7, 23};
    prompts_of(prompts, plen, 300, 23);
    const char *const streaming[] = {"streaming"};
    budgets[0] = 16, budgets[1] = 64, budget_cost[0] = 0.2, budget_cost[1] = 0.4;
    seer_spec_cost *t = table(1e-3, 0.05, 1e-3, streaming, 1);
    budgets[0] = 8, budgets[1] = 256, budget_cost[0] = budget_cost[1] = 1;
    const char *text = "seer-accept-trace 1\nseq streaming 16 0/4\nseq streaming 64 4/4\nend\n";
    seer_accept_trace *tr = NULL;
    ASSERT_OK(seer_accept_trace_parse(text, strlen(text), &tr));
    seer_spec_params sp = auto_spec(t, NULL);
    synth_trace = tr;
    tu_output got[3];
    run_stats rs = run(m, sp, prompts, plen, 3, 300, tu_greedy(), got);
    synth_trace = NULL;
    const int64_t rounds = rounds_of(&rs.as), drafting = rounds - rs.as.decisions[SEER_SPEC_NONE];
    const double acc = rs.as.drafted[SEER_SPEC_STREAMING]
                           ? (double)rs.as.accepted[SEER_SPEC_STREAMING] / rs.as.drafted[SEER_SPEC_STREAMING]
                           : 0;
    print_message("budgets: %lld rounds, %lld drafting (%lld probes), acceptance %.3f\n", (long long)rounds,
                  (long long)drafting, (long long)rs.as.probes, acc);
    /* drafting at 64 in most rounds after the first probe; the rounds at 16 accept nothing */
    assert_true(rs.as.probes >= 1);
    assert_true(drafting >= rounds / 2);
    assert_true(acc > 0.8);
    seer_accept_trace_free(tr);
    seer_spec_cost_free(t);
    seer_model_free(m);
}

/* stories260K's golden ids with auto: under a table calibrated here and under one where
 * drafting always looks good, alone and as a batch of five. */
static void test_golden_stories(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = 5;
    cp.n_batch_max = 128;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_spec_cost *cal = NULL;
    ASSERT_OK(seer_spec_cost_calibrate(c, d, 0.1, &cal));
    seer_context_free(c);
    seer_spec_cost *mix = table(1e-3, 0.1, 1e-4, ALL, 5);
    const seer_spec_cost *tables[] = {cal, mix};
    for (int t = 0; t < 2; t++) {
        seer_spec_auto_stats sum = {0};
        for (int i = 0; i < 5; i++) {
            run_stats rs =
                run(m, auto_spec(tables[t], d), &prompts[i], &plen[i], 1, 257 - plen[i], tu_greedy(), &got[i]);
            char what[64];
            snprintf(what, sizeof what, "stories auto table %d prompt %d", t, i);
            tu_assert_same(&got[i], &gold[i], what);
            for (int k = 0; k < SEER_SPEC_AUTO; k++)
                sum.decisions[k] += rs.as.decisions[k];
        }
        print_message("stories table %d: plain %lld, streaming %lld, retrieval %lld, snapkv %lld, draft %lld, ngram %lld\n",
                      t, (long long)sum.decisions[0], (long long)sum.decisions[1], (long long)sum.decisions[2],
                      (long long)sum.decisions[3], (long long)sum.decisions[4], (long long)sum.decisions[5]);
        if (t == 1)
            assert_true(sum.decisions[SEER_SPEC_NONE] < rounds_of(&sum));
        run(m, auto_spec(tables[t], d), prompts, plen, 5, 256, tu_greedy(), got);
        for (int i = 0; i < 5; i++) {
            tu_output g2 = got[i];
            if (g2.n > gold[i].n)
                g2.n = gold[i].n;
            tu_assert_same(&g2, &gold[i], "stories auto batch");
        }
    }
    seer_spec_cost_free(mix);
    seer_spec_cost_free(cal);
    seer_model_free(d);
    seer_model_free(m);
}

/* The scheduler: golden requests with auto (ragged rounds, prefill chunks between them)
 * beside a plain request; the decision counts reach its stats. */
static void test_golden_sched(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = 5;
    cp.n_batch_max = 64;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_spec_cost *mix = table(1e-3, 0.1, 1e-4, ALL, 5);
    seer_sched_params spm = {.max_batch_tokens = 48, .prefill_chunk = 4};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_request *r[5];
    for (int i = 0; i < 5; i++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0;
        p.max_tokens = gold[i].n;
        p.spec = auto_spec(mix, NULL);
        if (i == 4)
            p.spec.kind = SEER_SPEC_NONE;
        ASSERT_OK(seer_request_new(m, prompts[i], plen[i], &p, &r[i]));
        ASSERT_OK(seer_sched_submit(s, r[i]));
    }
    int active = 1;
    for (int steps = 0; active; steps++) {
        ASSERT_OK(seer_sched_step(s, &active));
        assert_true(steps < 100000);
    }
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    int64_t auto_rounds = 0, spec_rounds = 0;
    for (int k = 0; k <= SEER_SPEC_QUANTKV; k++) {
        auto_rounds += st.spec_auto_decisions[k];
        spec_rounds += k ? st.spec_auto_decisions[k] : 0;
    }
    print_message("scheduler: auto rounds %lld, of which speculating %lld\n", (long long)auto_rounds,
                  (long long)spec_rounds);
    assert_true(spec_rounds > 0);
    int64_t rounds4 = 0;
    for (int i = 0; i < 5; i++) {
        const int32_t *ids;
        tu_output o;
        o.n = seer_request_tokens(r[i], &ids);
        memcpy(o.ids, ids, sizeof(int32_t) * o.n);
        char what[64];
        snprintf(what, sizeof what, "scheduler auto request %d", i);
        tu_assert_same(&o, &gold[i], what);
        seer_request_stats rs;
        seer_request_get_stats(r[i], &rs);
        if (i < 4)
            rounds4 += rs.rounds - 1; /* the prefill's round is not auto's */
        else
            assert_int_equal(rs.drafted, 0);
        seer_request_free(r[i]);
    }
    assert_int_equal(auto_rounds, rounds4);
    seer_sched_free(s);
    seer_spec_cost_free(mix);
    seer_context_free(c);
    seer_model_free(m);
}

/* Sampled generation with auto: runs, drafts and accepts, and a seed gives the same text. */
static void test_sampled(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], a[5], b[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_spec_cost *mix = table(1e-3, 0.1, 1e-4, ALL, 5);
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 0.8f;
    sp.seed = 42;
    run_stats ra = run(m, auto_spec(mix, NULL), prompts, plen, 3, 120, sp, a);
    run(m, auto_spec(mix, NULL), prompts, plen, 3, 120, sp, b);
    assert_true(ra.st.drafted > 0 && ra.st.accepted > 0);
    assert_true(rounds_of(&ra.as) > 0);
    for (int i = 0; i < 3; i++) {
        tu_assert_same(&a[i], &b[i], "sampled auto, same seed");
        for (int j = 0; j < a[i].n; j++)
            assert_true(a[i].ids[j] >= 0 && a[i].ids[j] < 512);
    }
    seer_spec_cost_free(mix);
    seer_model_free(m);
}

/* The public table: calibration fitted to a one-sequence context, save, load, a stale key
 * refused, the default cache path under XDG_CACHE_HOME. */
static void test_cost_file(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_context *c = NULL;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_spec_cost *cal = NULL;
    /* half a second: the rows come whole on a loaded machine too (0.05 s did not always) */
    ASSERT_OK(seer_spec_cost_calibrate(c, NULL, 0.5, &cal));
    assert_true(seer_spec_cost_has(cal, SEER_SPEC_STREAMING));
    assert_true(seer_spec_cost_has(cal, SEER_SPEC_NGRAM));
    assert_false(seer_spec_cost_has(cal, SEER_SPEC_DRAFT));
    const char *p = tu_tmp_path("auto.cost");
    ASSERT_OK(seer_spec_cost_save(cal, p));
    seer_spec_cost *back = NULL;
    ASSERT_OK(seer_spec_cost_load(p, c, &back));
    assert_true(seer_spec_cost_has(back, SEER_SPEC_STREAMING));
    assert_false(seer_spec_cost_has(back, SEER_SPEC_SNAPKV)); /* calibration gives it no row */
    seer_spec_cost_free(back);
    /* a table of another key is a stale cache */
    seer_spec_cost *other = table(1e-3, 0.1, 1e-4, ALL, 1);
    ASSERT_OK(seer_spec_cost_save(other, p));
    back = NULL;
    assert_int_equal(seer_spec_cost_load(p, c, &back), SEER_ERR_FORMAT);
    assert_null(back);
    assert_int_equal(seer_spec_cost_load(tu_tmp_path("absent.cost"), c, &back), SEER_ERR_IO);
    /* the default path */
    const char *dir = tu_tmp_path("xdg");
    setenv("XDG_CACHE_HOME", dir, 1);
    char path[1024];
    ASSERT_OK(seer_spec_cost_default_path(c, path, sizeof path));
    assert_true(strncmp(path, dir, strlen(dir)) == 0);
    assert_non_null(strstr(path, "/seer/"));
    assert_non_null(strstr(path, ".cost"));
    struct stat sb;
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/seer", dir);
    assert_int_equal(stat(sub, &sb), 0);
    /* a context too short to calibrate: an error, not a crash, and the context unchanged */
    seer_context *tiny = NULL;
    cp.n_ctx = 32;
    ASSERT_OK(seer_context_init(m, cp, &tiny));
    seer_spec_cost *none = NULL;
    assert_int_not_equal(seer_spec_cost_calibrate(tiny, NULL, 0.05, &none), SEER_OK);
    assert_null(none);
    seer_context_free(tiny);
    seer_spec_cost_free(other);
    seer_spec_cost_free(cal);
    seer_context_free(c);
    seer_model_free(m);
}

/* A cost file is only ever a regular file: a symlink (to a file or to nothing) and a FIFO
 * named as the cost file are refused by save and load and left exactly as they were (a save
 * used to rename its temporary file over them, turning a link into a file; as root, over
 * /dev/null). A regular file is replaced, and nothing is left beside it. */
static void test_cost_file_not_regular(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, seer_context_default_params(), &c));
    seer_spec_cost *t = table(1e-3, 0.1, 1e-4, ALL, 1);
    char target[512], link[512], dangling[512], fifo[512]; /* tu_tmp_path's buffers rotate */
    snprintf(target, sizeof target, "%s", tu_tmp_path("nr-target.txt"));
    snprintf(link, sizeof link, "%s", tu_tmp_path("nr-link.cost"));
    snprintf(dangling, sizeof dangling, "%s", tu_tmp_path("nr-dangling.cost"));
    snprintf(fifo, sizeof fifo, "%s", tu_tmp_path("nr-fifo.cost"));
    assert_int_equal(tu_write_file(target, "precious\n", 9), 0);
    unlink(link), unlink(dangling), unlink(fifo);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(symlink(tu_tmp_path("nr-nothing"), dangling), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *paths[] = {link, dangling, fifo};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(seer_spec_cost_check_path(paths[i]), SEER_ERR_IO);
        assert_int_equal(seer_spec_cost_save(t, paths[i]), SEER_ERR_IO);
        assert_non_null(strstr(seer_last_error(), "not a regular file"));
        seer_spec_cost *back = NULL;
        assert_int_equal(seer_spec_cost_load(paths[i], c, &back), SEER_ERR_IO); /* FIFO: no wait */
        assert_null(back);
        struct stat sb;
        assert_int_equal(lstat(paths[i], &sb), 0);
        assert_true(i < 2 ? S_ISLNK(sb.st_mode) : S_ISFIFO(sb.st_mode));
    }
    size_t n = 0;
    uint8_t *kept = tu_read_file(target, &n);
    assert_non_null(kept);
    assert_int_equal(n, 9);
    assert_memory_equal(kept, "precious\n", 9);
    free(kept);
    assert_int_equal(access(tu_tmp_path("nr-nothing"), F_OK), -1); /* not created through the link */
    /* a regular file: replaced; a directory: refused */
    const char *reg = tu_tmp_path("nr-regular.cost");
    assert_int_equal(tu_write_file(reg, "old", 3), 0);
    assert_int_equal(seer_spec_cost_check_path(reg), SEER_OK);
    ASSERT_OK(seer_spec_cost_save(t, reg));
    kept = tu_read_file(reg, &n);
    assert_non_null(kept);
    assert_true(n > 3 && !memcmp(kept, "seer-cost 2", 11));
    free(kept);
    assert_int_equal(seer_spec_cost_check_path(tu_tmp_path("nr-absent.cost")), SEER_OK);
    mkdir(tu_tmp_path("nr-dir.cost"), 0700);
    assert_int_equal(seer_spec_cost_save(t, tu_tmp_path("nr-dir.cost")), SEER_ERR_IO);
    seer_spec_cost_free(t);
    seer_context_free(c);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cost_file_not_regular),
        cmocka_unit_test(test_parse),          cmocka_unit_test(test_choice), cmocka_unit_test(test_explore), cmocka_unit_test(test_budgets),
        cmocka_unit_test(test_switching_identical), cmocka_unit_test(test_golden_stories),
        cmocka_unit_test(test_golden_sched),   cmocka_unit_test(test_sampled),
        cmocka_unit_test(test_cost_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
