/*
 * plan.c: the generator's tree shape chosen online (Sequoia, Chen et al. 2024). Verified
 * rounds feed a positional acceptance estimate (tree_shape.h); every few rounds the dynamic
 * program turns it into the shape the next rounds fill, of the configured size or, with an
 * automatic size, of the size the measured verification cost makes pay best.
 *
 * Shapes only change which tokens are proposed, never the verification rule, so greedy output
 * is the same whatever the shape. The shape changes only between rounds: seer_gen_step calls
 * seer_gen_plan_round before drafting.
 */
#include "spec/best_first_size.h"
#include "spec/spec.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Prior and forgetting of the estimate: a weak prior (two pseudo-trials at 0.5 per rank) that
 * a few rounds override, and a slow decay so the estimate follows the text as it changes. */
#define PLAN_PRIOR_WEIGHT 2.0
#define PLAN_DECAY 0.995
#define PLAN_EVERY_DEFAULT 8

/* Seconds of the fastest of a few calls of n tokens on a fresh sequence (the cache starts
 * empty each time, so every call costs the same). */
static seer_status time_call(seer_context *c, int n, double *out) {
    int32_t tok[SEER_INVARIANT_NEW_TOKENS], pos[SEER_INVARIANT_NEW_TOKENS];
    seer_seq_id sq[SEER_INVARIANT_NEW_TOKENS];
    if (n > SEER_INVARIANT_NEW_TOKENS)
        return seer_err(SEER_ERR_INTERNAL, "timing a call of %d tokens", n);
    *out = 1e30;
    for (int rep = 0; rep < 4; rep++) {
        seer_seq_id id;
        SEER_TRY(seer_seq_new(c, &id));
        for (int j = 0; j < n; j++) {
            tok[j] = 0;
            pos[j] = j;
            sq[j] = id;
        }
        seer_batch b = {.n_tokens = n, .token = tok, .seq = sq, .pos = pos}; /* no logits: the forward pass alone */
        const double t0 = now_s();
        seer_status st = seer_decode(c, &b, NULL);
        const double t = now_s() - t0;
        seer_seq_free(c, id);
        SEER_TRY(st);
        if (rep > 0 && t < *out) /* the first call warms up */
            *out = t;
    }
    if (!(*out > 0))
        *out = 1e-9;
    return SEER_OK;
}

/* The verification cost table of the target context: c(n) = t(n) / t(1) at n = 1, 2, 4, ..
 * up to the tree's rows, never decreasing (a larger call is not cheaper; timer noise aside). */
static seer_status measure_cost(seer_gen *g) {
    /* best-first trees: up to a call's rows (larger trees take several calls) */
    const int n_max = g->best_first && seer_gen_call_rows(g) < g->G + 1 ? seer_gen_call_rows(g) : g->G + 1;
    double t1 = 0;
    int m = 0;
    for (int n = 1; m < 8; n *= 2) {
        const int nn = n < n_max ? n : n_max;
        double t;
        SEER_TRY(time_call(g->ctx, nn, &t));
        if (nn == 1)
            t1 = t;
        g->plan.cost_n[m] = nn;
        g->plan.cost[m] = t / t1;
        if (m > 0 && g->plan.cost[m] < g->plan.cost[m - 1])
            g->plan.cost[m] = g->plan.cost[m - 1];
        m++;
        if (nn == n_max)
            break;
    }
    g->plan.n_cost = m;
    g->plan.t_step_s = t1;
    return SEER_OK;
}

/* One draft step relative to a decode step: given, or from the drafting time since the last
 * plan over the current shape's depth (0 before anything was measured). */
static double draft_cost(const seer_gen *g) {
    if (g->spec.tree_draft_cost > 0)
        return g->spec.tree_draft_cost;
    if (g->plan.steps <= 0 || g->plan.t_step_s <= 0 || g->n_shape < 1)
        return 0.0;
    const int depth = g->sdepth[g->n_shape - 1];
    return g->plan.t_draft_s / g->plan.steps / (depth > 0 ? depth : 1) / g->plan.t_step_s;
}

/* Best-first trees (their drafter searches each tree; the shape gives only its size): the
 * budget from the estimate, the pass's cost table and the draft's cost per call (given per
 * step, or the drafting time per round over the calls of the current budget). */
static seer_status replan_best_first(seer_gen *g, const double *p) {
    const int topk = seer_spec_value_int(&g->spec, "draft-best-first");
    double t_call = g->spec.tree_draft_cost;
    if (!(t_call > 0) && g->plan.steps > 0 && g->plan.t_step_s > 0)
        t_call = g->plan.t_draft_s / g->plan.steps / seer_best_first_draft_calls(g->n_shape, topk) / g->plan.t_step_s;
    const seer_tree_vcost vc = {.n_points = g->plan.n_cost, .n = g->plan.cost_n, .cost = g->plan.cost};
    int n;
    SEER_TRY(seer_best_first_choose(p, g->plan.est.n_rank, &vc, seer_gen_call_rows(g), t_call > 0 ? t_call : 0, topk,
                                    g->G, g->D, &n, NULL));
    if (n < 1) /* still one node, so that acceptance keeps being measured */
        n = 1;
    const int d = g->D < n ? g->D : n;
    seer_tree_shape_default(n, d, g->shape);
    SEER_TRY(seer_tree_shape_check(g->shape, n, g->D, g->sdepth));
    g->n_shape = n;
    g->plan.t_draft_s = 0;
    g->plan.steps = 0;
    return SEER_OK;
}

/* The shape from the estimate into g->shape / sdepth / n_shape; unchanged on failure. */
static seer_status replan(seer_gen *g) {
    double p[SEER_TREE_MAX_RANK];
    seer_tree_est_get(&g->plan.est, p);
    if (g->best_first)
        return replan_best_first(g, p);
    seer_tree_shape t;
    if (g->plan.autosize) {
        const seer_tree_vcost vc = {.n_points = g->plan.n_cost, .n = g->plan.cost_n, .cost = g->plan.cost};
        SEER_TRY(seer_tree_choose(p, g->plan.est.n_rank, &vc, draft_cost(g), g->G + 1, g->D, &t, NULL));
    } else {
        SEER_TRY(seer_tree_best(p, g->plan.est.n_rank, g->G + 1, g->D, &t));
    }
    /* tree_shape's node 0 is the pending token; the generator's shape leaves it out. A plan
     * that says speculation does not pay still drafts one node, so acceptance keeps being
     * measured. */
    int32_t parent[SEER_TREE_MAX_NODES], depth[SEER_TREE_MAX_NODES];
    int n = t.n - 1;
    for (int j = 0; j < n; j++)
        parent[j] = t.parent[j + 1] - 1;
    if (n < 1)
        parent[0] = -1, n = 1;
    if (n > g->G)
        return seer_err(SEER_ERR_INTERNAL, "planned tree of %d nodes, room for %d", n, g->G);
    SEER_TRY(seer_tree_shape_check(parent, n, g->D, depth));
    memcpy(g->shape, parent, sizeof(int32_t) * n);
    memcpy(g->sdepth, depth, sizeof(int32_t) * n);
    g->n_shape = n;
    g->plan.t_draft_s = 0;
    g->plan.steps = 0;
    return SEER_OK;
}

seer_status seer_gen_plan_init(seer_gen *g) {
    g->n_shape = g->G;
    const seer_spec_params *sp = &g->spec;
    g->plan.autosize = g->tree && sp->tree_size < 0;
    /* a best-first tree's shape is its search's: only its size is planned */
    g->plan.on = g->tree && (sp->tree_replan > 0 || g->plan.autosize) && (!g->best_first || g->plan.autosize);
    if (!g->plan.on)
        return SEER_OK;
    g->plan.every = sp->tree_replan > 0 ? sp->tree_replan : PLAN_EVERY_DEFAULT;
    const int n_rank = g->G < SEER_TREE_MAX_RANK ? g->G : SEER_TREE_MAX_RANK;
    SEER_TRY(seer_tree_est_init(&g->plan.est, n_rank, NULL, PLAN_PRIOR_WEIGHT, PLAN_DECAY));
    if (!g->plan.autosize)
        return SEER_OK; /* the default shape until the first plan */
    if (sp->tree_cost_points > 0) {
        if (sp->tree_cost_points > 8 || !sp->tree_cost_n || !sp->tree_cost)
            return seer_err(SEER_ERR_INVALID_ARG, "tree cost table: 1 to 8 points, sizes and costs given");
        for (int i = 0; i < sp->tree_cost_points; i++) {
            if (sp->tree_cost_n[i] < 1 || (i > 0 && sp->tree_cost_n[i] <= sp->tree_cost_n[i - 1]) ||
                !(sp->tree_cost[i] > 0))
                return seer_err(SEER_ERR_INVALID_ARG,
                                "tree cost table: sizes ascending from 1, costs positive (point %d)", i);
            g->plan.cost_n[i] = sp->tree_cost_n[i];
            g->plan.cost[i] = sp->tree_cost[i];
        }
        g->plan.n_cost = sp->tree_cost_points;
        if (!(sp->tree_draft_cost > 0))
            return seer_err(SEER_ERR_INVALID_ARG, "a given tree cost table needs tree_draft_cost > 0");
    } else if (measure_cost(g) != SEER_OK) {
        /* no sequence free to time calls on (a scheduler full of requests): plan the shape
         * at the full size instead of failing the request */
        g->plan.autosize = false;
        seer_clear_error();
        return SEER_OK;
    }
    return replan(g);
}

void seer_gen_plan_observe(seer_gen *g, int k) {
    if (g->autos) {
        seer_gen_auto_observe(g, k);
        return;
    }
    const int nd = g->nd[k], acc = g->acc[k];
    if (!g->plan.on || nd <= 0)
        return;
    const int32_t *par = g->par + (size_t)k * g->G, *path = g->path + (size_t)k * g->G;
    /* children of u in index order are its ranks 1, 2, ..: the order their tokens were drawn
     * and the verifier tries them */
    for (int d = 0, u = -1;; d++) {
        int n_children = 0, rank = 0;
        for (int j = 0; j < nd; j++)
            if (par[j] == u) {
                n_children++;
                if (d < acc && path[d] == j)
                    rank = n_children;
            }
        if (n_children == 0 || seer_tree_est_observe(&g->plan.est, n_children, rank) != SEER_OK || rank == 0)
            return;
        u = path[d];
    }
}

seer_status seer_gen_plan_round(seer_gen *g) {
    if (g->autos) /* automatic speculation chooses the drafter and G every round instead */
        return seer_gen_auto_round(g);
    if (!g->plan.on || ++g->plan.since < g->plan.every)
        return SEER_OK;
    g->plan.since = 0;
    return replan(g);
}

int seer_gen_tree_shape(const seer_gen *g, const int32_t **parent) {
    *parent = g->shape;
    return g->n_shape;
}
