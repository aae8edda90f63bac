/*
 * test_tree_shape.c: Sequoia's tree-shape program (src/spec/tree_shape.c) against brute-force
 * enumeration of every tree of up to 7 nodes, under random acceptance vectors and depth
 * limits; the shape of its output; a Monte Carlo walk of the verifier on the chosen tree;
 * monotonicity; the chain case; the hardware-aware size choice against exhaustive search;
 * and the online acceptance estimate's convergence.
 */
#include "testutil.h"

#include "spec/tree_shape.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static double urand(uint64_t *st) { return (tu_rand_uniform(st) + 1.0) * 0.5; } /* [0, 1) */

/* Best expected accepted drafts over every tree of at most n nodes and depth <= dmax: all
 * parent arrays with parent[i] < i (every ordered tree has one, by preorder labels), children
 * ranked by label. */
static double brute_best(const double *p, int n_rank, int n, int dmax) {
    int parent[8], rank[8], depth[8], nch[8];
    double best = 0.0;
    for (int m = 1; m <= n; m++) {
        int code[8] = {0}; /* code[i] = parent of node i, odometer over [0, i) */
        for (;;) {
            memset(nch, 0, sizeof nch);
            parent[0] = -1, rank[0] = 0, depth[0] = 0;
            int ok = 1;
            for (int i = 1; i < m; i++) {
                parent[i] = code[i];
                rank[i] = ++nch[code[i]];
                depth[i] = depth[code[i]] + 1;
                ok &= depth[i] <= dmax;
            }
            if (ok) {
                double e = -1;
                ASSERT_OK(seer_tree_expected(p, n_rank, parent, rank, m, &e));
                if (e > best)
                    best = e;
            }
            int i = m - 1;
            while (i >= 1 && ++code[i] >= i)
                code[i--] = 0;
            if (i < 1)
                break;
        }
    }
    return best;
}

/* The breadth-first layout tree_shape.h promises. */
static void check_layout(const seer_tree_shape *t, int n_rank) {
    assert_in_range(t->n, 1, SEER_TREE_MAX_NODES);
    assert_int_equal(t->parent[0], -1);
    assert_int_equal(t->depth[0], 0);
    assert_int_equal(t->rank[0], 0);
    int dm = 0;
    for (int i = 1; i < t->n; i++) {
        assert_in_range(t->parent[i], 0, i - 1);
        assert_int_equal(t->depth[i], t->depth[t->parent[i]] + 1);
        assert_true(t->depth[i] >= t->depth[i - 1]);
        assert_in_range(t->rank[i], 1, n_rank);
        if (t->parent[i] == t->parent[i - 1])
            assert_int_equal(t->rank[i], t->rank[i - 1] + 1);
        else
            assert_int_equal(t->rank[i], 1);
        if (t->depth[i] > dm)
            dm = t->depth[i];
    }
    assert_int_equal(t->depth_max, dm);
}

static void test_dp_matches_brute_force(void **state) {
    uint64_t st = 42;
    const int depths[] = {1, 2, 3, 0};
    int cases = 0;
    for (int trial = 0; trial < 24; trial++) {
        const int n_rank = 1 + trial % 4;
        double p[4];
        for (int k = 0; k < n_rank; k++)
            p[k] = urand(&st);
        if (trial % 5 == 4)
            p[n_rank - 1] = 0.0; /* a useless rank must not be given nodes */
        for (int n = 1; n <= 7; n++)
            for (int di = 0; di < 4; di++) {
                seer_tree_shape t;
                ASSERT_OK(seer_tree_best(p, n_rank, n, depths[di], &t));
                check_layout(&t, n_rank);
                assert_true(t.n <= n);
                if (depths[di] > 0)
                    assert_true(t.depth_max <= depths[di]);
                const double bf = brute_best(p, n_rank, n, depths[di] > 0 ? depths[di] : n);
                if (fabs(t.expected - bf) > 1e-12)
                    fail_msg("trial %d n %d depth %d: dp %.15f brute %.15f", trial, n, depths[di],
                             t.expected, bf);
                double e = -1;
                ASSERT_OK(seer_tree_expected(p, n_rank, t.parent, t.rank, t.n, &e));
                assert_true(fabs(e - t.expected) < 1e-12);
                cases++;
            }
    }
    assert_int_equal(cases, 24 * 7 * 4);
}

/* The verifier's walk: at each node try the children in rank order, each accepted with p of
 * its rank; the mean accepted depth must be the DP's expectation. */
static void test_monte_carlo_walk(void **state) {
    const double p[3] = {0.7, 0.45, 0.3};
    seer_tree_shape t;
    ASSERT_OK(seer_tree_best(p, 3, 24, 0, &t));
    assert_int_equal(t.n, 24);
    assert_true(t.depth_max >= 3);
    uint64_t st = 7;
    const int N = 200000;
    double sum = 0, sum2 = 0;
    for (int it = 0; it < N; it++) {
        int node = 0, acc = 0;
        for (;;) {
            int next = -1;
            for (int c = 1; c < t.n && next < 0; c++)
                if (t.parent[c] == node && urand(&st) < p[t.rank[c] - 1])
                    next = c;
            if (next < 0)
                break;
            node = next, acc++;
        }
        sum += acc, sum2 += (double)acc * acc;
    }
    const double mean = sum / N, sd = sqrt((sum2 / N - mean * mean) / N);
    if (fabs(mean - t.expected) > 5 * sd)
        fail_msg("simulated %.4f +- %.4f, predicted %.4f", mean, sd, t.expected);
}

static void test_monotone(void **state) {
    const double p[4] = {0.55, 0.35, 0.2, 0.1};
    enum { N = 40, D = 12 };
    static double f[(D + 1) * (N + 1)];
    ASSERT_OK(seer_tree_table(p, 4, N, D, f));
    for (int d = 0; d <= D; d++)
        for (int m = 1; m <= N; m++) {
            const double v = f[d * (N + 1) + m];
            assert_true(v >= f[d * (N + 1) + m - 1]);
            if (d > 0)
                assert_true(v >= f[(d - 1) * (N + 1) + m]);
        }
    assert_true(f[0 * (N + 1) + N] == 1.0); /* depth 0: the root alone */
    assert_true(f[D * (N + 1) + N] > f[1 * (N + 1) + N]);
    /* Better acceptance never gives a worse tree. */
    seer_tree_shape lo, hi;
    const double q[4] = {0.65, 0.35, 0.2, 0.1};
    ASSERT_OK(seer_tree_best(p, 4, 32, 6, &lo));
    ASSERT_OK(seer_tree_best(q, 4, 32, 6, &hi));
    assert_true(hi.expected > lo.expected);
}

static void test_chain(void **state) {
    const double p1[1] = {0.8}, p3[3] = {0.8, 0.0, 0.0};
    for (int v = 0; v < 2; v++)
        for (int n = 1; n <= 12; n++) {
            seer_tree_shape t;
            ASSERT_OK(seer_tree_best(v ? p3 : p1, v ? 3 : 1, n, 0, &t));
            assert_int_equal(t.n, n);
            assert_int_equal(t.depth_max, n - 1);
            double want = 0, pw = 1;
            for (int i = 1; i < n; i++) {
                assert_int_equal(t.parent[i], i - 1);
                assert_int_equal(t.rank[i], 1);
                pw *= 0.8;
                want += pw;
            }
            assert_true(fabs(t.expected - want) < 1e-12);
        }
    /* Depth 1: a star of the useful ranks only. */
    const double ps[3] = {0.5, 0.5, 0.0};
    seer_tree_shape t;
    ASSERT_OK(seer_tree_best(ps, 3, 10, 1, &t));
    assert_int_equal(t.n, 3);
    assert_true(fabs(t.expected - 0.75) < 1e-12);
}

static void test_vcost_interpolation(void **state) {
    const int n[3] = {1, 4, 16};
    const double c[3] = {1.0, 1.3, 2.5};
    const seer_tree_vcost vc = {3, n, c};
    for (int i = 0; i < 3; i++)
        assert_true(seer_tree_vcost_at(&vc, n[i]) == c[i]);
    assert_true(fabs(seer_tree_vcost_at(&vc, 2) - 1.1) < 1e-12);
    assert_true(fabs(seer_tree_vcost_at(&vc, 10) - 1.9) < 1e-12);
    assert_true(fabs(seer_tree_vcost_at(&vc, 28) - 3.7) < 1e-12); /* last slope continues */
}

static void test_choose(void **state) {
    const double p[3] = {0.75, 0.4, 0.25};
    const int n[4] = {1, 8, 32, 64};
    const double c[4] = {1.0, 1.05, 1.4, 2.6};
    const seer_tree_vcost vc = {4, n, c};
    enum { N = 64 };
    static double f[N * (N + 1)];
    ASSERT_OK(seer_tree_table(p, 3, N, N - 1, f));
    const double tds[] = {0.0, 0.02, 0.1, 0.3, 0.9, 5.0};
    for (int i = 0; i < 6; i++) {
        seer_tree_shape t;
        double sp = 0;
        ASSERT_OK(seer_tree_choose(p, 3, &vc, tds[i], N, 0, &t, &sp));
        /* exhaustive over (size, depth) with the table */
        double best = 1.0 / c[0];
        for (int d = 1; d < N; d++)
            for (int m = 2; m <= N; m++) {
                const double r = f[d * (N + 1) + m] / (d * tds[i] + seer_tree_vcost_at(&vc, m));
                best = r > best ? r : best;
            }
        assert_true(fabs(sp - best * c[0]) < 1e-9);
        const double got = (1 + t.expected) / (t.depth_max * tds[i] + seer_tree_vcost_at(&vc, t.n));
        assert_true(fabs(got - best) < 1e-9);
        assert_true(sp >= 1.0);
    }
    /* drafting dearer than a decode step at this acceptance: plain */
    seer_tree_shape t;
    double sp = 0;
    ASSERT_OK(seer_tree_choose(p, 3, &vc, 5.0, N, 0, &t, &sp));
    assert_int_equal(t.n, 1);
    assert_true(sp == 1.0);
    /* free drafts, flat verification: the whole budget */
    const double flat[4] = {1, 1, 1, 1};
    const seer_tree_vcost vf = {4, n, flat};
    ASSERT_OK(seer_tree_choose(p, 3, &vf, 0.0, 20, 0, &t, &sp));
    assert_int_equal(t.n, 20);
    /* a depth cap holds */
    ASSERT_OK(seer_tree_choose(p, 3, &vf, 0.0, 20, 3, &t, &sp));
    assert_true(t.depth_max <= 3);
}

static void test_bad_args(void **state) {
    const double bad[2] = {0.5, 1.5}, good[2] = {0.5, 0.5};
    seer_tree_shape t;
    assert_int_equal(seer_tree_best(bad, 2, 5, 0, &t), SEER_ERR_INVALID_ARG);
    const double nan[1] = {NAN};
    assert_int_equal(seer_tree_best(nan, 1, 5, 0, &t), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_tree_best(good, 0, 5, 0, &t), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_tree_best(good, 2, 0, 0, &t), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_tree_best(good, 2, SEER_TREE_MAX_NODES + 1, 0, &t), SEER_ERR_INVALID_ARG);
    const int dup_parent[3] = {-1, 0, 0}, dup_rank[3] = {0, 1, 1};
    double e;
    assert_int_equal(seer_tree_expected(good, 2, dup_parent, dup_rank, 3, &e), SEER_ERR_INVALID_ARG);
    const int fwd_parent[3] = {-1, 2, 0}, fwd_rank[3] = {0, 1, 1};
    assert_int_equal(seer_tree_expected(good, 2, fwd_parent, fwd_rank, 3, &e), SEER_ERR_INVALID_ARG);
    const int un[2] = {2, 1};
    const double uc[2] = {1, 1};
    const seer_tree_vcost vc = {2, un, uc};
    assert_int_equal(seer_tree_choose(good, 2, &vc, 0.1, 8, 0, &t, NULL), SEER_ERR_INVALID_ARG);
    /* the largest table works */
    ASSERT_OK(seer_tree_best(good, 2, SEER_TREE_MAX_NODES, 0, &t));
    assert_int_equal(t.n, SEER_TREE_MAX_NODES);
}

/* Draws the accepted rank of a node with n children under positional acceptance p. */
static int draw_rank(const double *p, int n, uint64_t *st) {
    for (int k = 1; k <= n; k++)
        if (urand(st) < p[k - 1])
            return k;
    return 0;
}

static void test_estimator(void **state) {
    const double truth[3] = {0.6, 0.3, 0.2};
    seer_tree_accept_est e;
    ASSERT_OK(seer_tree_est_init(&e, 3, NULL, 4.0, 1.0));
    double p[3];
    seer_tree_est_get(&e, p);
    for (int k = 0; k < 3; k++)
        assert_true(p[k] == 0.5); /* the prior before any observation */
    uint64_t st = 99;
    for (int it = 0; it < 40000; it++)
        ASSERT_OK(seer_tree_est_observe(&e, 3, draw_rank(truth, 3, &st)));
    seer_tree_est_get(&e, p);
    for (int k = 0; k < 3; k++)
        if (fabs(p[k] - truth[k]) > 0.02)
            fail_msg("rank %d: estimated %.4f, true %.4f", k + 1, p[k], truth[k]);
    /* chains (one child per node) inform rank 1 only */
    seer_tree_accept_est c;
    const double prior[2] = {0.5, 0.25};
    ASSERT_OK(seer_tree_est_init(&c, 2, prior, 2.0, 1.0));
    for (int it = 0; it < 20000; it++)
        ASSERT_OK(seer_tree_est_observe(&c, 1, urand(&st) < 0.85 ? 1 : 0));
    seer_tree_est_get(&c, p);
    assert_true(fabs(p[0] - 0.85) < 0.02);
    assert_true(p[1] == 0.25);
    /* with decay the estimate follows a change */
    seer_tree_accept_est d;
    ASSERT_OK(seer_tree_est_init(&d, 1, NULL, 1.0, 0.99));
    for (int it = 0; it < 3000; it++)
        ASSERT_OK(seer_tree_est_observe(&d, 1, urand(&st) < 0.9));
    for (int it = 0; it < 3000; it++)
        ASSERT_OK(seer_tree_est_observe(&d, 1, urand(&st) < 0.3));
    seer_tree_est_get(&d, p);
    assert_true(fabs(p[0] - 0.3) < 0.1);
    /* bad observations change nothing */
    seer_tree_accept_est before = e;
    assert_int_equal(seer_tree_est_observe(&e, 2, 3), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_tree_est_observe(&e, -1, 0), SEER_ERR_INVALID_ARG);
    assert_memory_equal(&before, &e, sizeof e);
    assert_int_equal(seer_tree_est_init(&e, 3, NULL, 0.0, 1.0), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_tree_est_init(&e, 3, NULL, 1.0, 1.5), SEER_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp_matches_brute_force),
        cmocka_unit_test(test_monte_carlo_walk),
        cmocka_unit_test(test_monotone),
        cmocka_unit_test(test_chain),
        cmocka_unit_test(test_vcost_interpolation),
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_estimator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
