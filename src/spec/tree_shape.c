/*
 * tree_shape.c: Sequoia's dynamic program for speculation tree shapes, its hardware-aware
 * size choice, and the online estimate of positional acceptance (see tree_shape.h).
 *
 * The program (Sequoia, Chen et al. 2024, §3.1): let f_d(m) be 1 + the best expected
 * accepted drafts of a tree of at most m nodes and depth at most d. A tree is a root plus
 * subtrees under children of rank 1..b, and the child of rank k is the accepted one with
 * probability a[k] (independently of what happens below it), so
 *   f_d(m) = 1 + g_{d-1}(m - 1, 1),
 *   g_c(r, k) = max(0, max_{1 <= s <= r} a[k] * f_c(s) + g_c(r - s, k + 1)),
 * where g_c(r, k) is the best the children of rank k.. can add with r nodes between them.
 * "At most m nodes" rather than exactly m keeps f monotone and lets the program leave out
 * children whose a[k] is 0.
 */
#include "spec/tree_shape.h"
#include "util/error.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void seer_tree_rank_probs(const double *p, int n_rank, double *a) {
    double miss = 1.0; /* probability that ranks 1..k-1 were all rejected */
    for (int k = 0; k < n_rank; k++) {
        a[k] = miss * p[k];
        miss *= 1.0 - p[k];
    }
}

seer_status seer_tree_check_p(const double *p, int n_rank) {
    if (!p)
        return seer_err(SEER_ERR_INVALID_ARG, "tree shape: acceptance vector is NULL");
    if (n_rank < 1 || n_rank > SEER_TREE_MAX_RANK)
        return seer_err(SEER_ERR_INVALID_ARG, "tree shape: %d ranks (1..%d)", n_rank,
                        SEER_TREE_MAX_RANK);
    for (int k = 0; k < n_rank; k++)
        if (!(p[k] >= 0.0 && p[k] <= 1.0)) /* also rejects NaN */
            return seer_err(SEER_ERR_INVALID_ARG, "tree shape: p[%d] = %g is not in [0, 1]", k,
                            p[k]);
    return SEER_OK;
}

seer_status seer_tree_expected(const double *p, int n_rank, const int *parent, const int *rank,
                               int n, double *out) {
    SEER_TRY(seer_tree_check_p(p, n_rank));
    SEER_CHECK_ARG(parent);
    SEER_CHECK_ARG(rank);
    SEER_CHECK_ARG(out);
    if (n < 1 || n > SEER_TREE_MAX_NODES || parent[0] != -1)
        return seer_err(SEER_ERR_INVALID_ARG, "tree shape: %d nodes, or node 0 is not a root", n);
    double a[SEER_TREE_MAX_RANK] = {0}, reach[SEER_TREE_MAX_NODES];
    uint32_t seen[SEER_TREE_MAX_NODES] = {0}; /* ranks used among each node's children */
    seer_tree_rank_probs(p, n_rank, a);
    reach[0] = 1.0;
    double e = 0.0;
    for (int i = 1; i < n; i++) {
        const int q = parent[i], k = rank[i];
        if (q < 0 || q >= i || k < 1 || k > 32 || (seen[q] >> (k - 1) & 1u))
            return seer_err(SEER_ERR_INVALID_ARG,
                            "tree shape: node %d (parent %d, rank %d) is not a valid child", i, q,
                            k);
        seen[q] |= 1u << (k - 1);
        /* the probability that node i is accepted: its parent's, times being the accepted one */
        reach[i] = reach[q] * (k <= n_rank ? a[k - 1] : 0.0);
        e += reach[i];
    }
    *out = e;
    return SEER_OK;
}

/* The program for depths 0..d_max and sizes 0..n_max into f [d_max + 1][n_max + 1]; with
 * choice [d_max][n_rank][n_max] (may be NULL) the size given to the child of rank k + 1 with r
 * nodes left for ranks k + 1.. under a node of depth budget c + 1 (0: no such child). */
static void tree_dp(const double *a, int n_rank, int n_max, int d_max, double *f, uint8_t *choice) {
    const int W = n_max + 1;
    double g[SEER_TREE_MAX_RANK + 1][SEER_TREE_MAX_NODES + 1];
    for (int m = 0; m <= n_max; m++)
        f[m] = m > 0 ? 1.0 : 0.0;
    for (int d = 1; d <= d_max; d++) {
        const double *fc = f + (size_t)(d - 1) * W; /* children's subtrees have depth <= d-1 */
        for (int r = 0; r <= n_max; r++)
            g[n_rank][r] = 0.0;
        for (int k = n_rank - 1; k >= 0; k--) {
            for (int r = 0; r <= n_max; r++) {
                double best = 0.0; /* no child of this rank (nor after it) */
                int arg = 0;
                for (int s = 1; s <= r; s++) {
                    const double v = a[k] * fc[s] + g[k + 1][r - s];
                    if (v > best)
                        best = v, arg = s;
                }
                g[k][r] = best;
                if (choice)
                    choice[((size_t)(d - 1) * n_rank + k) * W + r] = (uint8_t)arg;
            }
        }
        double *fd = f + (size_t)d * W;
        fd[0] = 0.0;
        for (int m = 1; m <= n_max; m++)
            fd[m] = 1.0 + g[0][m - 1];
    }
}

/* The depth beyond which nothing changes: a tree of m nodes is at most m - 1 deep. */
static int eff_depth(int n_max, int d_max) {
    return d_max <= 0 || d_max > n_max - 1 ? n_max - 1 : d_max;
}

seer_status seer_tree_table(const double *p, int n_rank, int n_max, int d_max, double *f) {
    SEER_TRY(seer_tree_check_p(p, n_rank));
    SEER_CHECK_ARG(f);
    if (n_max < 1 || n_max > SEER_TREE_MAX_NODES || d_max < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "tree shape: table of %d nodes, depth %d", n_max,
                        d_max);
    double a[SEER_TREE_MAX_RANK] = {0};
    seer_tree_rank_probs(p, n_rank, a);
    const int de = d_max < n_max - 1 ? d_max : n_max - 1, W = n_max + 1;
    tree_dp(a, n_rank, n_max, de, f, NULL);
    for (int d = de + 1; d <= d_max; d++)
        memcpy(f + (size_t)d * W, f + (size_t)de * W, sizeof(double) * W);
    return SEER_OK;
}

seer_status seer_tree_best(const double *p, int n_rank, int n, int max_depth,
                           seer_tree_shape *out) {
    SEER_TRY(seer_tree_check_p(p, n_rank));
    SEER_CHECK_ARG(out);
    if (n < 1 || n > SEER_TREE_MAX_NODES)
        return seer_err(SEER_ERR_INVALID_ARG, "tree shape: %d nodes (1..%d)", n,
                        SEER_TREE_MAX_NODES);
    const int D = n > 1 ? eff_depth(n, max_depth) : 0, W = n + 1;
    double a[SEER_TREE_MAX_RANK] = {0};
    seer_tree_rank_probs(p, n_rank, a);
    double *f = seer_malloc_array((size_t)(D + 1) * W, sizeof *f);
    uint8_t *choice = D > 0 ? seer_malloc_array((size_t)D * n_rank * W, 1) : NULL;
    if (!f || (D > 0 && !choice)) {
        free(f);
        free(choice);
        return seer_err(SEER_ERR_OOM, "tree shape: out of memory");
    }
    tree_dp(a, n_rank, n, D, f, choice);

    /* Unfold breadth-first: each queued node carries its node budget and depth budget, and
     * its children are appended in rank order, so the queue order is the output order. */
    int budget[SEER_TREE_MAX_NODES], dleft[SEER_TREE_MAX_NODES];
    seer_tree_shape t;
    memset(&t, 0, sizeof t);
    t.n = 1;
    t.parent[0] = -1;
    budget[0] = n;
    dleft[0] = D;
    for (int i = 0; i < t.n; i++) {
        if (dleft[i] == 0 || budget[i] <= 1)
            continue;
        int r = budget[i] - 1;
        for (int k = 0; k < n_rank && r > 0; k++) {
            const int s = choice[((size_t)(dleft[i] - 1) * n_rank + k) * W + r];
            if (s == 0)
                break;
            const int c = t.n++;
            t.parent[c] = i, t.rank[c] = k + 1, t.depth[c] = t.depth[i] + 1;
            budget[c] = s, dleft[c] = dleft[i] - 1;
            if (t.depth[c] > t.depth_max)
                t.depth_max = t.depth[c];
            r -= s;
        }
    }
    t.expected = f[(size_t)D * W + n] - 1.0;
    free(f);
    free(choice);
    *out = t;
    return SEER_OK;
}

static seer_status vcost_check(const seer_tree_vcost *c) {
    if (!c || c->n_points < 1 || !c->n || !c->cost)
        return seer_err(SEER_ERR_INVALID_ARG, "tree shape: no verification costs");
    for (int i = 0; i < c->n_points; i++) {
        if (c->n[i] < 1 || (i > 0 && c->n[i] <= c->n[i - 1]))
            return seer_err(SEER_ERR_INVALID_ARG,
                            "tree shape: verification sizes must ascend from 1 (point %d: %d)", i,
                            c->n[i]);
        if (!(c->cost[i] > 0.0) || !isfinite(c->cost[i]))
            return seer_err(SEER_ERR_INVALID_ARG, "tree shape: verification cost %d is %g", i,
                            c->cost[i]);
    }
    return SEER_OK;
}

double seer_tree_vcost_at(const seer_tree_vcost *c, int n) {
    const int P = c->n_points;
    if (P == 1 || n <= c->n[0])
        return c->cost[0];
    for (int i = 1; i < P; i++)
        if (n <= c->n[i]) {
            const double t = (double)(n - c->n[i - 1]) / (c->n[i] - c->n[i - 1]);
            return c->cost[i - 1] + t * (c->cost[i] - c->cost[i - 1]);
        }
    const double slope = (c->cost[P - 1] - c->cost[P - 2]) / (c->n[P - 1] - c->n[P - 2]);
    return c->cost[P - 1] + (slope > 0 ? slope * (n - c->n[P - 1]) : 0.0);
}

seer_status seer_tree_choose(const double *p, int n_rank, const seer_tree_vcost *c, double t_draft,
                             int n_max, int d_max, seer_tree_shape *out, double *speedup) {
    SEER_TRY(seer_tree_check_p(p, n_rank));
    SEER_TRY(vcost_check(c));
    SEER_CHECK_ARG(out);
    if (!(t_draft >= 0.0) || !isfinite(t_draft))
        return seer_err(SEER_ERR_INVALID_ARG, "tree shape: draft cost %g", t_draft);
    if (n_max < 1 || n_max > SEER_TREE_MAX_NODES)
        return seer_err(SEER_ERR_INVALID_ARG, "tree shape: %d nodes (1..%d)", n_max,
                        SEER_TREE_MAX_NODES);
    const int D = n_max > 1 ? eff_depth(n_max, d_max) : 0, W = n_max + 1;
    double *f = seer_malloc_array((size_t)(D + 1) * W, sizeof *f);
    if (!f)
        return seer_err(SEER_ERR_OOM, "tree shape: out of memory");
    double a[SEER_TREE_MAX_RANK] = {0};
    seer_tree_rank_probs(p, n_rank, a);
    tree_dp(a, n_rank, n_max, D, f, NULL);
    const double plain = 1.0 / seer_tree_vcost_at(c, 1);
    double best = plain;
    int bn = 1, bd = 0;
    for (int d = 1; d <= D; d++)
        for (int m = d + 1; m <= n_max; m++) {
            const double rate = f[(size_t)d * W + m] / (d * t_draft + seer_tree_vcost_at(c, m));
            if (rate > best)
                best = rate, bn = m, bd = d;
        }
    free(f);
    SEER_TRY(seer_tree_best(p, n_rank, bn, bd, out));
    if (speedup)
        *speedup = best / plain;
    return SEER_OK;
}

seer_status seer_tree_est_init(seer_tree_accept_est *e, int n_rank, const double *prior_p,
                               double prior_weight, double decay) {
    SEER_CHECK_ARG(e);
    if (n_rank < 1 || n_rank > SEER_TREE_MAX_RANK)
        return seer_err(SEER_ERR_INVALID_ARG, "acceptance estimate: %d ranks (1..%d)", n_rank,
                        SEER_TREE_MAX_RANK);
    if (prior_p)
        SEER_TRY(seer_tree_check_p(prior_p, n_rank));
    if (!(prior_weight > 0.0) || !isfinite(prior_weight) || !(decay > 0.0 && decay <= 1.0))
        return seer_err(SEER_ERR_INVALID_ARG,
                        "acceptance estimate: prior weight %g (> 0), decay %g (in (0, 1])",
                        prior_weight, decay);
    memset(e, 0, sizeof *e);
    e->n_rank = n_rank;
    e->prior_weight = prior_weight;
    e->decay = decay;
    for (int k = 0; k < n_rank; k++)
        e->prior[k] = prior_p ? prior_p[k] : 0.5;
    return SEER_OK;
}

seer_status seer_tree_est_observe(seer_tree_accept_est *e, int n_children, int accepted_rank) {
    SEER_CHECK_ARG(e);
    if (n_children < 0 || accepted_rank < 0 || accepted_rank > n_children)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "acceptance estimate: accepted rank %d of %d children", accepted_rank,
                        n_children);
    if (n_children == 0)
        return SEER_OK; /* a leaf: nothing was tried */
    if (e->decay < 1.0)
        for (int k = 0; k < e->n_rank; k++)
            e->tried[k] *= e->decay, e->accepted[k] *= e->decay;
    const int last = accepted_rank > 0 ? accepted_rank : n_children;
    for (int k = 1; k <= last && k <= e->n_rank; k++) {
        e->tried[k - 1] += 1.0;
        if (k == accepted_rank)
            e->accepted[k - 1] += 1.0;
    }
    return SEER_OK;
}

void seer_tree_est_get(const seer_tree_accept_est *e, double *p) {
    for (int k = 0; k < e->n_rank; k++)
        p[k] = (e->accepted[k] + e->prior_weight * e->prior[k]) / (e->tried[k] + e->prior_weight);
}
