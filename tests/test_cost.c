/*
 * test_cost.c: the speculation cost model (src/spec/cost*.c): interpolation of the measured
 * table (exact at grid points, between neighbours off them), the per-round choice against an
 * exhaustive evaluation and MagicDec's closed form, plain decoding when drafting is dear or
 * acceptance low, longer chains at higher acceptance, acceptance tracking with its batch-wide
 * prior, the text file's round trip, and malformed files (every truncation, listed faults,
 * random corruption) refused with the output left untouched.
 */
#include "testutil.h"

#include "spec/cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A memory-bound model: a step reads the weights (w) and every sequence's KV (c per token);
 * a call of n tokens per sequence adds compute e per token; a draft step reads weights wd
 * and K tokens of KV. */
static double m_target(double B, double L) { return 1e-3 + B * L * 1e-8; }
static double m_verify(int n, double B, double L) { return m_target(B, L) + B * (n - 1) * 2e-5; }
static double m_draft(double wd, int K, double B) { return wd + B * K * 1e-8; }

static void make_table(seer_cost_table *t, double wd) {
    memset(t, 0, sizeof *t);
    snprintf(t->key, sizeof t->key, "test-model@cpu");
    const int b[] = {1, 4, 16}, l[] = {1024, 8192, 65536}, n[] = {2, 4, 8, 16};
    t->n_b = 3, t->n_l = 3, t->n_n = 4;
    memcpy(t->b, b, sizeof b), memcpy(t->l, l, sizeof l), memcpy(t->n, n, sizeof n);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            t->t_target[i][j] = m_target(b[i], l[j]);
            for (int k = 0; k < 4; k++)
                t->t_verify[k][i][j] = m_verify(n[k], b[i], l[j]);
        }
    t->n_drafters = 2;
    seer_cost_drafter *s = &t->drafter[0], *g = &t->drafter[1];
    s->kind = SEER_SPEC_STREAMING, s->n_k = 2, s->k[0] = 256, s->k[1] = 1024;
    g->kind = SEER_SPEC_NGRAM, g->n_k = 1, g->k[0] = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            s->t[0][i][j] = m_draft(wd, 256, b[i]);
            s->t[1][i][j] = m_draft(wd, 1024, b[i]);
            g->t[0][i][j] = 2e-6;
        }
}

static void test_interpolation(void **state) {
    seer_cost_table t;
    make_table(&t, 9e-4);
    ASSERT_OK(seer_cost_table_check(&t));
    for (int i = 0; i < t.n_b; i++)
        for (int j = 0; j < t.n_l; j++) {
            const double B = t.b[i], L = t.l[j];
            assert_true(seer_cost_target(&t, B, L) == t.t_target[i][j]);
            assert_true(seer_cost_verify(&t, 1, B, L) == t.t_target[i][j]);
            for (int k = 0; k < t.n_n; k++)
                assert_true(seer_cost_verify(&t, t.n[k], B, L) == t.t_verify[k][i][j]);
            assert_true(seer_cost_draft(&t, 0, 1, B, L) == t.drafter[0].t[1][i][j]);
        }
    /* between grid points: within the neighbours, and at the log midpoint their average */
    const double mid = seer_cost_target(&t, 2, 8192);
    assert_true(fabs(mid - 0.5 * (t.t_target[0][1] + t.t_target[1][1])) < 1e-15);
    const double x = seer_cost_target(&t, 3, 20000);
    assert_true(x > t.t_target[0][1] && x < t.t_target[1][2]);
    /* outside: the edge */
    assert_true(seer_cost_target(&t, 64, 1 << 20) == t.t_target[2][2]);
    assert_true(seer_cost_target(&t, 1, 10) == t.t_target[0][0]);
    /* n: linear between sizes, the last slope beyond */
    const double v3 = seer_cost_verify(&t, 3, 4, 8192);
    assert_true(fabs(v3 - m_verify(3, 4, 8192)) < 1e-15);
    assert_true(fabs(seer_cost_verify(&t, 24, 4, 8192) - m_verify(24, 4, 8192)) < 1e-15);
    assert_int_equal(seer_cost_find_drafter(&t, SEER_SPEC_NGRAM), 1);
    assert_int_equal(seer_cost_find_drafter(&t, SEER_SPEC_DRAFT), -1);
}

static seer_cost_planner *planner(const seer_cost_table *t, double prior, int max_gamma,
                                  double min_speedup) {
    seer_cost_params p = seer_cost_default_params();
    p.request_decay = 1.0; /* plain counts: the estimates converge */
    p.prior_accept = prior;
    p.max_gamma = max_gamma;
    p.min_speedup = min_speedup;
    seer_cost_planner *pl = NULL;
    ASSERT_OK(seer_cost_planner_init(t, p, &pl));
    return pl;
}

/* MagicDec's speedup (§1): Omega(G, a) / (G T_D / T_T + T_V / T_T). */
static double magicdec(double a, int G, double td, double tv, double tt) {
    const double omega = (1 - pow(a, G + 1)) / (1 - a);
    return omega / (G * td / tt + tv / tt);
}

static void test_choice_closed_form(void **state) {
    seer_cost_table t;
    make_table(&t, 1e-4);
    const bool only_streaming[SEER_COST_KINDS] = {[SEER_SPEC_STREAMING] = true};
    const double alphas[] = {0.5, 0.7, 0.85, 0.95};
    const int Bs[] = {1, 4, 16}, Ls[] = {2048, 30000, 65536};
    int prev_g = 0;
    for (int ai = 0; ai < 4; ai++) {
        seer_cost_planner *pl = planner(&t, alphas[ai], 12, 1.0);
        for (int bi = 0; bi < 3; bi++)
            for (int li = 0; li < 3; li++) {
                const int B = Bs[bi];
                int lens[16];
                for (int i = 0; i < B; i++)
                    lens[i] = Ls[li];
                seer_spec_decision d;
                ASSERT_OK(seer_cost_choose(pl, NULL, lens, B, only_streaming, &d));
                /* exhaustive: every K and G by the closed form */
                const double tt = seer_cost_target(&t, B, Ls[li]);
                double best = 1.0;
                int bg = 0;
                for (int k = 0; k < 2; k++)
                    for (int g = 1; g <= 12; g++) {
                        const double s = magicdec(alphas[ai], g, seer_cost_draft(&t, 0, k, B, Ls[li]),
                                                  seer_cost_verify(&t, g + 1, B, Ls[li]), tt);
                        if (s > best)
                            best = s, bg = g;
                    }
                if (fabs(d.speedup - best) > 1e-9 * best)
                    fail_msg("a %.2f B %d L %d: chose %.6f (G %d), best %.6f (G %d)", alphas[ai], B,
                             Ls[li], d.speedup, d.gamma, best, bg);
                assert_int_equal(d.gamma, bg);
                assert_true(fabs(d.tokens_per_s - d.tokens_per_round / d.t_round_s) < 1e-6);
                if (bi == 2 && li == 2) { /* the largest B * L: speculation pays */
                    assert_int_equal(d.kind, SEER_SPEC_STREAMING);
                    assert_true(d.gamma >= prev_g); /* higher acceptance, longer chain */
                    prev_g = d.gamma;
                }
            }
        seer_cost_planner_free(pl);
    }
    assert_true(prev_g > 2);
}

static void test_plain_when_not_worth_it(void **state) {
    seer_cost_table t;
    int lens[4] = {1024, 1024, 1024, 1024};
    seer_spec_decision d;
    /* a self-draft that reads all the weights at short context (T_D ~ T_T) */
    make_table(&t, 1e-3);
    t.n_drafters = 1; /* no n-gram */
    seer_cost_planner *pl = planner(&t, 0.8, 8, 1.0);
    ASSERT_OK(seer_cost_choose(pl, NULL, lens, 4, NULL, &d));
    assert_int_equal(d.kind, SEER_SPEC_NONE);
    assert_int_equal(d.gamma, 0);
    assert_true(d.speedup == 1.0);
    assert_true(fabs(d.tokens_per_s - 4 / seer_cost_target(&t, 4, 1024)) < 1e-9);
    seer_cost_planner_free(pl);
    /* a cheap draft, but acceptance near zero */
    make_table(&t, 1e-5);
    pl = planner(&t, 0.02, 8, 1.0);
    ASSERT_OK(seer_cost_choose(pl, NULL, lens, 4, NULL, &d));
    assert_int_equal(d.kind, SEER_SPEC_NONE);
    /* ... and at good acceptance it speculates, unless the margin asked for is not met */
    seer_cost_planner_free(pl);
    pl = planner(&t, 0.8, 8, 1.0);
    ASSERT_OK(seer_cost_choose(pl, NULL, lens, 4, NULL, &d));
    assert_int_not_equal(d.kind, SEER_SPEC_NONE);
    const double s = d.speedup;
    assert_true(s > 1.0);
    seer_cost_planner_free(pl);
    pl = planner(&t, 0.8, 8, s + 0.01);
    ASSERT_OK(seer_cost_choose(pl, NULL, lens, 4, NULL, &d));
    assert_int_equal(d.kind, SEER_SPEC_NONE);
    seer_cost_planner_free(pl);
}

static void test_tracking(void **state) {
    seer_cost_table t;
    make_table(&t, 1e-4);
    seer_cost_planner *pl = planner(&t, 0.6, 8, 1.0);
    seer_accept_track good, bad, fresh;
    seer_accept_track_init(pl, &good);
    seer_accept_track_init(pl, &bad);
    double a[8], p[4];
    seer_cost_accept(pl, &good, SEER_SPEC_STREAMING, 256, a, p);
    for (int j = 0; j < 8; j++)
        assert_true(fabs(a[j] - 0.6) < 1e-15);
    assert_true(fabs(p[0] - 0.6) < 1e-15 && fabs(p[1] - 0.3) < 1e-15);
    /* acceptance per depth: true a_j = 0.95 - 0.05 j for the good request, 0.5 for the bad */
    uint64_t st = 5;
    for (int it = 0; it < 3000; it++) {
        for (int v = 0; v < 2; v++) {
            int acc = 0;
            while (acc < 8 && (tu_rand_uniform(&st) + 1) / 2 < (v ? 0.5 : 0.95 - 0.05 * acc))
                acc++;
            ASSERT_OK(seer_cost_observe_chain(pl, v ? &bad : &good, SEER_SPEC_STREAMING, 256, 8, acc));
        }
    }
    seer_cost_accept(pl, &good, SEER_SPEC_STREAMING, 256, a, p);
    for (int j = 0; j < 4; j++)
        if (fabs(a[j] - (0.95 - 0.05 * j)) > 0.03)
            fail_msg("depth %d: %.3f, true %.3f", j + 1, a[j], 0.95 - 0.05 * j);
    seer_cost_accept(pl, &bad, SEER_SPEC_STREAMING, 256, a, NULL);
    assert_true(fabs(a[0] - 0.5) < 0.03);
    /* a new request starts from the batch's recent rounds, not from the initial prior */
    seer_accept_track_init(pl, &fresh);
    double ab[8], af[8];
    seer_cost_accept(pl, NULL, SEER_SPEC_STREAMING, 256, ab, NULL);
    seer_cost_accept(pl, &fresh, SEER_SPEC_STREAMING, 256, af, NULL);
    assert_true(fabs(af[0] - ab[0]) < 1e-15 && ab[0] > 0.65);
    seer_cost_accept(pl, &fresh, SEER_SPEC_NGRAM, 0, af, NULL);
    assert_true(fabs(af[0] - 0.6) < 1e-15); /* other drafters untouched */
    /* the good request gets a longer chain than the bad one */
    const int lens[1] = {65536};
    const seer_accept_track *tg[1] = {&good}, *tb[1] = {&bad};
    const bool only[SEER_COST_KINDS] = {[SEER_SPEC_STREAMING] = true};
    seer_spec_decision dg, db;
    ASSERT_OK(seer_cost_choose(pl, tg, lens, 1, only, &dg));
    ASSERT_OK(seer_cost_choose(pl, tb, lens, 1, only, &db));
    assert_true(dg.gamma > db.gamma || db.kind == SEER_SPEC_NONE);
    /* predict agrees with choose on the chosen option, and with the chain formula */
    seer_spec_decision pr;
    ASSERT_OK(seer_cost_predict(pl, tg, lens, 1, dg.kind, dg.budget, dg.gamma, &pr));
    assert_true(pr.tokens_per_s == dg.tokens_per_s);
    seer_cost_accept(pl, &good, SEER_SPEC_STREAMING, 256, a, NULL);
    assert_true(fabs(pr.tokens_per_round - seer_cost_chain_tokens(a, dg.gamma)) < 1e-12);
    assert_int_equal(seer_cost_predict(pl, tg, lens, 1, SEER_SPEC_STREAMING, 300, 4, &pr),
                     SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_cost_predict(pl, tg, lens, 1, SEER_SPEC_DRAFT, 0, 4, &pr),
                     SEER_ERR_INVALID_ARG);
    /* tree nodes inform the positional estimate */
    for (int it = 0; it < 2000; it++)
        ASSERT_OK(seer_cost_observe_node(pl, &fresh, SEER_SPEC_NGRAM, 0, 0, 3, it % 4 == 3 ? 0 : 2));
    seer_cost_accept(pl, &fresh, SEER_SPEC_NGRAM, 0, af, p);
    assert_true(p[0] < 0.05 && fabs(p[1] - 0.75) < 0.03 && p[2] < 0.05);
    /* bad observations count nothing */
    seer_accept_track before = good;
    assert_int_equal(seer_cost_observe_chain(pl, &good, SEER_SPEC_STREAMING, 256, 3, 4), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_cost_observe_chain(pl, &good, SEER_SPEC_NONE, 0, 3, 1), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_cost_observe_node(pl, &good, SEER_SPEC_STREAMING, 256, 0, 2, 3), SEER_ERR_INVALID_ARG);
    assert_memory_equal(&before, &good, sizeof good);
    seer_cost_planner_free(pl);
    /* with the default forgetting a request follows a change of its text */
    ASSERT_OK(seer_cost_planner_init(&t, seer_cost_default_params(), &pl));
    seer_accept_track_init(pl, &fresh);
    for (int it = 0; it < 300; it++)
        ASSERT_OK(seer_cost_observe_chain(pl, &fresh, SEER_SPEC_STREAMING, 256, 4, 4));
    seer_cost_accept(pl, &fresh, SEER_SPEC_STREAMING, 256, a, NULL);
    assert_true(a[0] > 0.9);
    for (int it = 0; it < 300; it++)
        ASSERT_OK(seer_cost_observe_chain(pl, &fresh, SEER_SPEC_STREAMING, 256, 4, 0));
    seer_cost_accept(pl, &fresh, SEER_SPEC_STREAMING, 256, a, NULL);
    assert_true(a[0] < 0.1);
    seer_cost_planner_free(pl);
    /* per budget: K 256 accepts nothing, K 1024 everything; each estimate follows its own
     * rounds, the kind's lies between, and a probe tries the budget not yet seen */
    seer_cost_params q = seer_cost_default_params();
    q.min_speedup = 1.0;
    ASSERT_OK(seer_cost_planner_init(&t, q, &pl));
    seer_accept_track_init(pl, &fresh);
    const int len1[1] = {65536};
    const seer_accept_track *tf[1] = {&fresh};
    for (int it = 0; it < 40; it++)
        ASSERT_OK(seer_cost_observe_chain(pl, &fresh, SEER_SPEC_STREAMING, 256, 4, 0));
    seer_cost_accept(pl, &fresh, SEER_SPEC_STREAMING, 1024, a, NULL);
    double a256[8], akind[8];
    seer_cost_accept(pl, &fresh, SEER_SPEC_STREAMING, 256, a256, NULL);
    seer_cost_accept(pl, &fresh, SEER_SPEC_STREAMING, 0, akind, NULL); /* not a table budget */
    assert_true(a256[0] < 0.1 && a[0] < 0.2); /* unseen: the kind's estimate, low */
    seer_spec_decision dp;
    ASSERT_OK(seer_cost_choose_probe(pl, tf, len1, 1, only, &dp));
    assert_int_equal(dp.kind, SEER_SPEC_STREAMING);
    assert_int_equal(dp.budget, 1024);
    for (int it = 0; it < 40; it++)
        ASSERT_OK(seer_cost_observe_chain(pl, &fresh, SEER_SPEC_STREAMING, 1024, 4, 4));
    seer_cost_accept(pl, &fresh, SEER_SPEC_STREAMING, 1024, a, NULL);
    seer_cost_accept(pl, &fresh, SEER_SPEC_STREAMING, 256, a256, NULL);
    seer_cost_accept(pl, &fresh, SEER_SPEC_STREAMING, 0, akind, NULL);
    assert_true(a[0] > 0.9 && a256[0] < 0.1 && akind[0] > a256[0] && akind[0] < a[0]);
    ASSERT_OK(seer_cost_choose(pl, tf, len1, 1, only, &dp));
    assert_int_equal(dp.budget, 1024);
    seer_cost_planner_free(pl);
}

static void test_trees_and_formula(void **state) {
    const double a[3] = {0.5, 0.5, 0.5};
    assert_true(fabs(seer_cost_chain_tokens(a, 3) - 1.875) < 1e-15);
    assert_true(seer_cost_chain_tokens(a, 0) == 1.0);
    /* with free drafts and flat verification, a tree beats the best chain */
    seer_cost_table t;
    make_table(&t, 1e-6);
    for (int k = 0; k < t.n_n; k++)
        for (int i = 0; i < t.n_b; i++)
            for (int j = 0; j < t.n_l; j++)
                t.t_verify[k][i][j] = t.t_target[i][j];
    seer_cost_params p = seer_cost_default_params();
    p.max_tree_nodes = 32;
    p.max_tree_depth = 6;
    p.max_gamma = 6;
    p.prior_accept = 0.6;
    seer_cost_planner *pl = NULL;
    ASSERT_OK(seer_cost_planner_init(&t, p, &pl));
    const int lens[2] = {8192, 8192};
    seer_spec_decision d;
    ASSERT_OK(seer_cost_choose(pl, NULL, lens, 2, NULL, &d));
    assert_true(d.tree_nodes > d.gamma + 1);
    assert_true(d.gamma <= 6);
    seer_tree_shape sh;
    ASSERT_OK(seer_tree_best(d.tree_p, d.tree_ranks, d.tree_nodes, d.gamma, &sh));
    assert_true(fabs(d.tokens_per_round - 2 * (1 + sh.expected)) < 1e-9);
    seer_cost_planner_free(pl);
    pl = NULL;
    p.max_tree_nodes = SEER_TREE_MAX_NODES + 1;
    assert_int_equal(seer_cost_planner_init(&t, p, &pl), SEER_ERR_INVALID_ARG);
    assert_null(pl);
    p = seer_cost_default_params();
    p.min_speedup = 0.5;
    assert_int_equal(seer_cost_planner_init(&t, p, &pl), SEER_ERR_INVALID_ARG);
    p = seer_cost_default_params();
    p.max_gamma = SEER_COST_MAX_G + 1;
    assert_int_equal(seer_cost_planner_init(&t, p, &pl), SEER_ERR_INVALID_ARG);
}

static bool tables_equal(const seer_cost_table *x, const seer_cost_table *y) {
    if (strcmp(x->key, y->key) || x->n_b != y->n_b || x->n_l != y->n_l || x->n_n != y->n_n ||
        x->n_drafters != y->n_drafters)
        return false;
    for (int i = 0; i < x->n_b; i++)
        for (int j = 0; j < x->n_l; j++) {
            if (x->t_target[i][j] != y->t_target[i][j])
                return false;
            for (int k = 0; k < x->n_n; k++)
                if (x->t_verify[k][i][j] != y->t_verify[k][i][j])
                    return false;
            for (int d = 0; d < x->n_drafters; d++)
                for (int k = 0; k < x->drafter[d].n_k; k++)
                    if (x->drafter[d].t[k][i][j] != y->drafter[d].t[k][i][j])
                        return false;
        }
    for (int d = 0; d < x->n_drafters; d++) {
        if (x->drafter[d].kind != y->drafter[d].kind || x->drafter[d].n_k != y->drafter[d].n_k)
            return false;
        for (int k = 0; k < x->drafter[d].n_k; k++)
            if (x->drafter[d].k[k] != y->drafter[d].k[k])
                return false;
    }
    return !memcmp(x->b, y->b, sizeof x->b) && !memcmp(x->l, y->l, sizeof x->l) &&
           !memcmp(x->n, y->n, sizeof x->n);
}

static void test_file_round_trip(void **state) {
    seer_cost_table t, u;
    make_table(&t, 3.3e-4);
    t.t_target[1][2] = 1.0 / 3.0; /* a value %g would round */
    const char *path = tu_tmp_path("round.cost");
    ASSERT_OK(seer_cost_save(&t, path));
    memset(&u, 0, sizeof u);
    ASSERT_OK(seer_cost_load(path, "test-model@cpu", &u));
    assert_true(tables_equal(&t, &u));
    /* another model's cache is refused, and the output left alone */
    seer_cost_table v;
    memset(&v, 0x5a, sizeof v);
    seer_cost_table v0 = v;
    assert_int_equal(seer_cost_load(path, "other@cuda", &v), SEER_ERR_FORMAT);
    assert_memory_equal(&v, &v0, sizeof v);
    assert_int_equal(seer_cost_load(tu_tmp_path("absent.cost"), NULL, &v), SEER_ERR_IO);
    /* format into a short buffer */
    char small[64];
    size_t len = 0;
    assert_int_equal(seer_cost_format(&t, small, sizeof small, &len), SEER_ERR_INVALID_ARG);
    assert_true(len > sizeof small);
    /* a bad table is not written */
    t.t_target[0][0] = -1;
    assert_int_equal(seer_cost_save(&t, tu_tmp_path("bad.cost")), SEER_ERR_INVALID_ARG);
    /* the cache path */
    char buf[256];
    ASSERT_OK(seer_cost_cache_path("/tmp/c", "llama-My Model/x@cuda:0", buf, sizeof buf));
    assert_string_equal(buf, "/tmp/c/llama-My_Model_x_cuda_0.cost");
    assert_int_equal(seer_cost_cache_path("/tmp/c", "k", buf, 8), SEER_ERR_INVALID_ARG);
}

static const char *VALID =
    "seer-cost 1\n"
    "# a comment\n"
    "key m@cpu\n"
    "b 1 2\n"
    "l 16 64\n"
    "n 4\n"
    "target 1e-3 2e-3 3e-3 4e-3\n"
    "verify 4 2e-3 3e-3 4e-3 5e-3\n"
    "draft streaming 8 1e-4 1e-4 2e-4 2e-4\n"
    "draft streaming 16 2e-4 2e-4 3e-4 3e-4\n"
    "draft ngram 0 0 0 0 0\n"
    "end\n";

static void expect_bad(const char *text, size_t len, const char *why) {
    seer_cost_table out;
    memset(&out, 0xa5, sizeof out);
    seer_cost_table before = out;
    const seer_status st = seer_cost_parse(text, len, &out);
    if (st != SEER_ERR_FORMAT)
        fail_msg("%s: got %s, want SEER_ERR_FORMAT", why, seer_status_str(st));
    assert_true(strlen(seer_last_error()) > 0);
    assert_memory_equal(&out, &before, sizeof out);
}

/* VALID with its line starting with `prefix` replaced by `line` ("" removes it). */
static void expect_bad_edit(const char *prefix, const char *line) {
    char buf[2048] = "";
    const char *why = line[0] ? line : prefix;
    const char *p = VALID;
    while (*p) {
        const char *nl = strchr(p, '\n');
        if (!strncmp(p, prefix, strlen(prefix))) {
            strcat(buf, line);
            prefix = "\x01"; /* once */
        } else
            strncat(buf, p, (size_t)(nl - p + 1));
        p = nl + 1;
    }
    expect_bad(buf, strlen(buf), why);
}

/* Version 2's estimate flags (a partial calibration): read, kept through the file, trusted
 * less by the planner; every misplaced or malformed flag record refused. */
static const char *VALID2 =
    "seer-cost 2\n"
    "key m@cpu\n"
    "b 1 2\n"
    "l 16 64\n"
    "n 4\n"
    "target 1e-3 2e-3 3e-3 4e-3\n"
    "est target 0 0 1 1\n"
    "verify 4 2e-3 3e-3 4e-3 5e-3\n"
    "est verify 4 0 1 1 1\n"
    "draft streaming 8 1e-4 1e-4 2e-4 2e-4\n"
    "est draft streaming 8 0 1 0 1\n"
    "end\n";

static void expect_bad_v2(const char *find, const char *repl) {
    char buf[2048];
    const char *p = strstr(VALID2, find);
    assert_non_null(p);
    const size_t pre = (size_t)(p - VALID2);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)pre, VALID2, repl, p + strlen(find));
    expect_bad(buf, strlen(buf), repl[0] ? repl : find);
}

static void test_estimates(void **state) {
    seer_cost_table t, u;
    ASSERT_OK(seer_cost_parse(VALID2, strlen(VALID2), &t));
    assert_int_equal(t.est_target[0][0], 0);
    assert_int_equal(t.est_target[1][1], 1);
    assert_int_equal(t.est_verify[0][0][1], 1);
    assert_int_equal(t.drafter[0].est[0][1][0], 0);
    int m, n;
    seer_cost_table_count(&t, &m, &n);
    assert_int_equal(n, 12);
    assert_int_equal(m, 12 - 2 - 3 - 2);
    /* the flags survive the file; a whole table writes none */
    char text[4096];
    size_t len;
    ASSERT_OK(seer_cost_format(&t, text, sizeof text, &len));
    assert_non_null(strstr(text, "est verify 4 0 1 1 1"));
    ASSERT_OK(seer_cost_parse(text, len, &u));
    assert_memory_equal(u.est_target, t.est_target, sizeof t.est_target);
    assert_memory_equal(u.est_verify, t.est_verify, sizeof t.est_verify);
    assert_memory_equal(u.drafter[0].est, t.drafter[0].est, sizeof t.drafter[0].est);
    ASSERT_OK(seer_cost_parse(VALID, strlen(VALID), &u)); /* version 1: measured throughout */
    seer_cost_table_count(&u, &m, &n);
    assert_int_equal(m, n);
    ASSERT_OK(seer_cost_format(&u, text, sizeof text, &len));
    assert_null(strstr(text, "est "));
    /* reading an estimated cell says so; a measured one does not */
    bool e = true;
    seer_cost_target_est(&t, 1, 16, &e);
    assert_false(e);
    seer_cost_target_est(&t, 1.5, 16, &e); /* between B 1 (measured) and 2 (estimated) */
    assert_true(e);
    seer_cost_verify_est(&t, 4, 1, 16, &e);
    assert_false(e);
    seer_cost_verify_est(&t, 4, 1, 64, &e);
    assert_true(e);
    seer_cost_draft_est(&t, 0, 0, 1, 64, &e);
    assert_true(e);
    seer_cost_draft_est(&t, 0, 0, 2, 16, &e);
    assert_false(e);
    /* misplaced, repeated, out-of-range or unknown flags; no target measured */
    expect_bad_v2("est target 0 0 1 1\n", "est target 1 1 1 1\n");
    expect_bad_v2("est target 0 0 1 1\n", "est target 0 0 1 2\n");
    expect_bad_v2("est target 0 0 1 1\n", "est target 0 0 1\n");
    expect_bad_v2("est target 0 0 1 1\n", "est target 0 0 1 1 0\n");
    expect_bad_v2("est target 0 0 1 1\n", "est target 0 0 1 1\nest target 0 0 1 1\n");
    expect_bad_v2("target 1e-3 2e-3 3e-3 4e-3\nest target 0 0 1 1\n",
                  "est target 0 0 1 1\ntarget 1e-3 2e-3 3e-3 4e-3\n");
    expect_bad_v2("est verify 4 0 1 1 1\n", "est verify 8 0 1 1 1\n");
    expect_bad_v2("est draft streaming 8 0 1 0 1\n", "est draft streaming 16 0 1 0 1\n");
    expect_bad_v2("est draft streaming 8 0 1 0 1\n", "est draft ngram 0 0 1 0 1\n");
    expect_bad_v2("est draft streaming 8 0 1 0 1\n", "est frobnicate 0 1 0 1\n");
    expect_bad_v2("est draft streaming 8 0 1 0 1\n", "est\n");

    /* the planner: drafting predicted 1.27x plain on measured times is chosen; the same on
     * an estimated draft step must win by the margin (1.25: 1.01x, under min_speedup) */
    seer_cost_table w;
    ASSERT_OK(seer_cost_parse(VALID2, strlen(VALID2), &w));
    memset(w.est_target, 0, sizeof w.est_target);
    memset(w.est_verify, 0, sizeof w.est_verify);
    memset(w.drafter[0].est, 0, sizeof w.drafter[0].est);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            w.t_target[i][j] = 1e-3;
            w.t_verify[0][i][j] = 1e-3; /* verification costs a step */
            w.drafter[0].t[0][i][j] = 0.5e-3;
        }
    seer_cost_params cp = seer_cost_default_params();
    cp.prior_accept = 0.9; /* G = 1: 1.9 tokens in 1.5 ms against 1 in 1 ms */
    cp.max_gamma = 1;
    const int lens[1] = {16};
    seer_spec_decision d;
    seer_cost_planner *pl = NULL;
    ASSERT_OK(seer_cost_planner_init(&w, cp, &pl));
    ASSERT_OK(seer_cost_choose(pl, NULL, lens, 1, NULL, &d));
    assert_int_equal(d.kind, SEER_SPEC_STREAMING);
    seer_cost_planner_free(pl);
    w.drafter[0].est[0][0][0] = 1; /* the draft step at (1, 16) was estimated */
    ASSERT_OK(seer_cost_planner_init(&w, cp, &pl));
    ASSERT_OK(seer_cost_choose(pl, NULL, lens, 1, NULL, &d));
    assert_int_equal(d.kind, SEER_SPEC_NONE);
    seer_cost_planner_free(pl);
    cp.est_margin = 0.5; /* below 1: refused */
    assert_int_equal(seer_cost_planner_init(&w, cp, &pl), SEER_ERR_INVALID_ARG);
}

static void test_malformed(void **state) {
    seer_cost_table t;
    ASSERT_OK(seer_cost_parse(VALID, strlen(VALID), &t));
    assert_int_equal(t.n_drafters, 2);
    assert_int_equal(t.drafter[0].n_k, 2);
    assert_true(seer_cost_verify(&t, 4, 2, 64) == 5e-3);
    /* every truncation before the final 'end' */
    const size_t n = strlen(VALID);
    for (size_t k = 0; k + 2 < n; k++)
        expect_bad(VALID, k, "truncated");
    ASSERT_OK(seer_cost_parse(VALID, n - 1, &t)); /* no final newline is fine */
    expect_bad_edit("seer-cost", "seer-cost 3\n"); /* a later version than this reader's */
    expect_bad_edit("seer-cost", "seer-cost 0\n");
    expect_bad_edit("end", "est target 0 1 1 1\nend\n"); /* VALID is version 1: no est records */
    expect_bad_edit("seer-cost", "gguf 1\n");
    expect_bad_edit("key", "key \n");
    expect_bad_edit("key", "key a\x1b[2Jb\n");
    expect_bad_edit("b ", "b 2 1\n");
    expect_bad_edit("b ", "b 1 1\n");
    expect_bad_edit("b ", "b 0 2\n");
    expect_bad_edit("b ", "b 1 2 3 4 5 6 7 8 9\n");
    expect_bad_edit("b ", "b 1 99999999999999999999\n");
    expect_bad_edit("b ", "b 1 2x\n");
    expect_bad_edit("l ", "l 16 64\nl 16 64\n");
    expect_bad_edit("n ", "n 1\n");
    expect_bad_edit("target", "target 1e-3 2e-3 3e-3\n");
    expect_bad_edit("target", "target 1e-3 2e-3 3e-3 4e-3 5e-3\n");
    expect_bad_edit("target", "target 1e-3 2e-3 3e-3 0\n");
    expect_bad_edit("target", "target 1e-3 2e-3 3e-3 -4e-3\n");
    expect_bad_edit("target", "target 1e-3 nan 3e-3 4e-3\n");
    expect_bad_edit("target", "target 1e-3 inf 3e-3 4e-3\n");
    expect_bad_edit("target", "target 1e-3 1e999 3e-3 4e-3\n");
    expect_bad_edit("target", "target 1e-3 2e6 3e-3 4e-3\n");
    expect_bad_edit("target", "");
    expect_bad_edit("target", "target 1e-3 2e-3 3e-3 4e-3\ntarget 1e-3 2e-3 3e-3 4e-3\n");
    expect_bad_edit("verify", "");
    expect_bad_edit("verify", "verify 8 2e-3 3e-3 4e-3 5e-3\n");
    expect_bad_edit("verify", "verify 4 2e-3 3e-3 4e-3 5e-3\nverify 4 2e-3 3e-3 4e-3 5e-3\n");
    expect_bad_edit("draft streaming 16", "draft streaming 4 2e-4 2e-4 3e-4 3e-4\n");
    expect_bad_edit("draft ngram", "draft none 0 0 0 0 0\n");
    expect_bad_edit("draft ngram", "draft magic 0 0 0 0 0\n");
    expect_bad_edit("draft ngram", "draft ngram -1 0 0 0 0\n");
    expect_bad_edit("draft ngram", "draft\n");
    expect_bad_edit("end", "end now\n");
    expect_bad_edit("end", "end\ntarget 1 1 1 1\n");
    expect_bad_edit("n ", "frobnicate 3\n");
    expect_bad_edit("b ", "target 1e-3 2e-3 3e-3 4e-3\n");
    char key[300] = "key ";
    memset(key + 4, 'k', 200);
    strcpy(key + 204, "\n");
    expect_bad_edit("key", key);
    char nul[512];
    memcpy(nul, VALID, n);
    nul[20] = 0;
    expect_bad(nul, n, "NUL byte");
    expect_bad("", 0, "empty");
    /* random corruption: never a crash; whatever parses is a valid table */
    uint64_t st = 3;
    int parsed = 0;
    for (int it = 0; it < 3000; it++) {
        char buf[512];
        memcpy(buf, VALID, n);
        const int flips = 1 + (int)(tu_rand_u64(&st) % 4);
        for (int f = 0; f < flips; f++)
            buf[tu_rand_u64(&st) % n] = (char)(tu_rand_u64(&st) % 128);
        if (seer_cost_parse(buf, n, &t) == SEER_OK) {
            ASSERT_OK(seer_cost_table_check(&t));
            parsed++;
        }
    }
    assert_true(parsed < 3000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interpolation),
        cmocka_unit_test(test_choice_closed_form),
        cmocka_unit_test(test_plain_when_not_worth_it),
        cmocka_unit_test(test_tracking),
        cmocka_unit_test(test_trees_and_formula),
        cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_estimates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
