/*
 * cost_plan.c: acceptance tracked online, and the choice of speculation per round from the
 * cost table (see cost.h).
 *
 * The rule is MagicDec's model made per round: an option (drafter, K, G) emits
 * sum_i (1 + sum_{j<=G} prod_{m<=j} a_i,m) tokens for the batch in G * T_D + T_V(G + 1)
 * seconds, plain decoding B tokens in T_T; the option with the most tokens per second wins,
 * and plain unless an option beats it by min_speedup (§5 of the speculative decoding
 * reference). A tree of n nodes and depth d emits B * (1 + E_tree) in d * T_D + T_V(n), E_tree
 * from Sequoia's program on the batch's mean positional acceptance.
 *
 * Acceptance per depth rather than one alpha: a draft far from the verified prefix drifts
 * further, and a chain's value lies in its products of a_j, so a flat alpha over-values long
 * chains where acceptance decays with depth. Each request's estimate shrinks towards the
 * batch-wide estimate of recent rounds (prior_weight pseudo-observations of it), which itself
 * starts from prior_accept: a new request starts at what the batch sees, and a request with
 * a long history follows its own text. A depth the batch has seen little of is assumed to
 * accept as the depth before it (its pseudo-observations are of that depth's estimate), so
 * that rounds of G drafts do not leave depth G + 1 at the initial prior forever: chains of
 * one accepted at 0.8 make a chain of two look as good as it is.
 *
 * Acceptance per budget: chains are tracked per drafter kind and per budget K of the table (a
 * view of 2048 slots can accept 0.5 where one of 512 accepts 0.1 on the same text). A
 * budget's depth-0 prior is the kind's estimate over all its budgets, so a budget not yet
 * seen is taken to do as the others did until a probe tries it. Trees' positional estimates
 * stay per kind.
 *
 * Exploration: a drafter never chosen is never observed, so an initial prior under the break-
 * even acceptance would keep plain decoding for good. seer_cost_choose_probe makes the same
 * choice with explore_accept as the depth-0 prior of every budget: where drafting would pay if
 * acceptance were that high and little has been seen, it names the option to try, a budget
 * never tried before one whose failures have been seen (auto.c runs one such
 * round after explore_every plain rounds in a row, and doubles that gap after each probe that
 * leaves plain decoding the choice, so that probes cost O(log n) rounds of n where drafting
 * does not pay); each probe's observations pull the estimate to what the text gives.
 *
 * Known limits: a tree level of w nodes is charged one draft step, which holds while a
 * drafting call of w tokens per sequence stays memory-bound; the batch's mean L stands for
 * every sequence's (the attention's cost is linear in the sum of the L's).
 */
#include "spec/cost.h"
#include "spec/drafter.h"
#include "util/error.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct seer_cost_planner {
    seer_cost_table t;
    seer_cost_params p;
    seer_accept_stats batch[SEER_COST_KINDS]; /* recent rounds of every request */
    seer_accept_depths batch_k[SEER_COST_KINDS][SEER_COST_MAX_K]; /* ... per budget */
};

seer_cost_params seer_cost_default_params(void) {
    return (seer_cost_params){
        .max_gamma = 8,
        .max_tree_nodes = 0, /* the generator verifies chains only */
        .max_tree_depth = 0,
        .tree_ranks = 4,
        .prior_accept = 0.6,
        .prior_weight = 4.0,
        .batch_decay = 0.995,
        .request_decay = 0.98,
        .min_speedup = 1.02,
        .explore_accept = 0.9,
        .explore_every = 8,
        .est_margin = 1.25,
    };
}

static seer_status check_params(const seer_cost_params *p) {
    if (p->max_gamma < 1 || p->max_gamma > SEER_COST_MAX_G)
        return seer_err(SEER_ERR_INVALID_ARG, "cost planner: max_gamma %d (1..%d)", p->max_gamma,
                        SEER_COST_MAX_G);
    if (p->max_tree_nodes < 0 || p->max_tree_nodes > SEER_TREE_MAX_NODES ||
        p->max_tree_depth < 0 || p->max_tree_depth > SEER_COST_MAX_G)
        return seer_err(SEER_ERR_INVALID_ARG, "cost planner: trees of %d nodes, depth %d",
                        p->max_tree_nodes, p->max_tree_depth);
    if (p->tree_ranks < 1 || p->tree_ranks > SEER_TREE_MAX_RANK)
        return seer_err(SEER_ERR_INVALID_ARG, "cost planner: %d tree ranks", p->tree_ranks);
    if (!(p->prior_accept >= 0 && p->prior_accept <= 1) || !(p->prior_weight > 0) ||
        !isfinite(p->prior_weight) || !(p->batch_decay > 0 && p->batch_decay <= 1) ||
        !(p->request_decay > 0 && p->request_decay <= 1) ||
        !(p->min_speedup >= 1) || !isfinite(p->min_speedup) ||
        !(p->explore_accept >= 0 && p->explore_accept <= 1) || p->explore_every < 0 ||
        !(p->est_margin >= 1) || !isfinite(p->est_margin))
        return seer_err(SEER_ERR_INVALID_ARG,
                        "cost planner: prior %g (in [0, 1]), weight %g (> 0), decays %g and %g (in"
                        " (0, 1]), min speedup %g (>= 1), exploration %g (in [0, 1]) every %d (>= 0),"
                        " estimate margin %g (>= 1)",
                        p->prior_accept, p->prior_weight, p->batch_decay, p->request_decay,
                        p->min_speedup, p->explore_accept, p->explore_every, p->est_margin);
    return SEER_OK;
}

/* Unseen ranks get a prior halving per rank: a child tried after its siblings' rejection
 * is drawn from what is left, so it is less likely than the first (Sequoia's measured
 * positional acceptance falls the same way). */
static void stats_init(const seer_cost_params *p, seer_accept_stats *s) {
    double prior[SEER_TREE_MAX_RANK];
    for (int k = 0; k < p->tree_ranks; k++)
        prior[k] = p->prior_accept / (double)(1 << k);
    memset(&s->chain, 0, sizeof s->chain);
    /* decay 1: the planner forgets once per observed chain or node (pos_decay), not per
     * depth of a chain */
    seer_status st = seer_tree_est_init(&s->pos, p->tree_ranks, prior, p->prior_weight, 1.0);
    (void)st;
    assert(st == SEER_OK); /* the parameters were checked */
}

seer_status seer_cost_planner_init(const seer_cost_table *t, seer_cost_params p,
                                   seer_cost_planner **out) {
    SEER_CHECK_ARG(out);
    SEER_TRY(seer_cost_table_check(t));
    SEER_TRY(check_params(&p));
    seer_cost_planner *pl = calloc(1, sizeof *pl);
    if (!pl)
        return seer_err(SEER_ERR_OOM, "cost planner: out of memory");
    pl->t = *t;
    pl->p = p;
    for (int k = 0; k < SEER_COST_KINDS; k++)
        stats_init(&p, &pl->batch[k]);
    *out = pl; /* calloc: batch_k starts empty */
    return SEER_OK;
}

void seer_cost_planner_free(seer_cost_planner *pl) { free(pl); }

const seer_cost_table *seer_cost_planner_table(const seer_cost_planner *pl) { return &pl->t; }

void seer_accept_track_init(const seer_cost_planner *pl, seer_accept_track *tr) {
    for (int k = 0; k < SEER_COST_KINDS; k++)
        stats_init(&pl->p, &tr->kind[k]);
    memset(tr->budget, 0, sizeof tr->budget);
}

static void depths_decay(seer_accept_depths *d, double decay) {
    for (int i = 0; decay != 1 && i < SEER_COST_MAX_G; i++)
        d->tried[i] *= decay, d->accepted[i] *= decay;
}

static void pos_decay(seer_tree_accept_est *e, double decay) {
    for (int k = 0; decay != 1 && k < e->n_rank; k++)
        e->tried[k] *= decay, e->accepted[k] *= decay;
}

static bool kind_ok(seer_spec_kind kind) {
    return kind < SEER_COST_KINDS && seer_drafter_of_kind(kind) != NULL;
}

/* The index of budget in kind's row of the table, -1 when it has none. */
static int budget_index(const seer_cost_planner *pl, seer_spec_kind kind, int budget) {
    const int d = seer_cost_find_drafter(&pl->t, kind);
    for (int ki = 0; d >= 0 && ki < pl->t.drafter[d].n_k; ki++)
        if (pl->t.drafter[d].k[ki] == budget)
            return ki;
    return -1;
}

/* Depths j0 .. j0 + tried - 1 verified, the first n_acc of them accepted. */
static void depths_observe(seer_accept_depths *d, double decay, int j0, int tried, int n_acc) {
    depths_decay(d, decay);
    for (int j = j0; j < j0 + tried && j < SEER_COST_MAX_G; j++) {
        d->tried[j] += 1;
        d->accepted[j] += j - j0 < n_acc;
    }
}

/* The depth counts of one verification into the kind's and the budget's estimates, batch-wide
 * and the request's (tr may be NULL); ss [2] gets the kind's stats, whose positional estimate
 * the caller updates. */
static void observe_depths(seer_cost_planner *pl, seer_accept_track *tr, seer_spec_kind kind,
                           int budget, int j0, int tried, int n_acc, seer_accept_stats **ss) {
    const int ki = budget_index(pl, kind, budget);
    ss[0] = &pl->batch[kind];
    ss[1] = tr ? &tr->kind[kind] : NULL;
    seer_accept_depths *sk[2] = {ki >= 0 ? &pl->batch_k[kind][ki] : NULL,
                                 ki >= 0 && tr ? &tr->budget[kind][ki] : NULL};
    const double decay[2] = {pl->p.batch_decay, pl->p.request_decay};
    for (int s = 0; s < 2; s++) {
        if (sk[s])
            depths_observe(sk[s], decay[s], j0, tried, n_acc);
        if (ss[s]) {
            depths_observe(&ss[s]->chain, decay[s], j0, tried, n_acc);
            pos_decay(&ss[s]->pos, decay[s]);
        }
    }
}

seer_status seer_cost_observe_chain(seer_cost_planner *pl, seer_accept_track *tr,
                                    seer_spec_kind kind, int budget, int nd, int n_acc) {
    SEER_CHECK_ARG(pl);
    if (!kind_ok(kind) || n_acc < 0 || n_acc > nd)
        return seer_err(SEER_ERR_INVALID_ARG, "cost planner: chain of %d with %d accepted (%s)", nd,
                        n_acc, seer_spec_kind_name(kind));
    /* depths 1..n_acc were accepted; depth n_acc + 1 was tried and rejected (when drafted) */
    const int tried = n_acc < nd ? n_acc + 1 : nd;
    seer_accept_stats *ss[2];
    observe_depths(pl, tr, kind, budget, 0, tried, n_acc, ss);
    for (int s = 0; s < 2; s++)
        for (int j = 0; ss[s] && j < tried && j < SEER_COST_MAX_G; j++)
            seer_tree_est_observe(&ss[s]->pos, 1, j < n_acc ? 1 : 0);
    return SEER_OK;
}

seer_status seer_cost_observe_node(seer_cost_planner *pl, seer_accept_track *tr,
                                   seer_spec_kind kind, int budget, int depth, int n_children,
                                   int accepted_rank) {
    SEER_CHECK_ARG(pl);
    if (!kind_ok(kind) || depth < 0 || n_children < 0 || accepted_rank < 0 ||
        accepted_rank > n_children)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "cost planner: node at depth %d, rank %d of %d children accepted (%s)",
                        depth, accepted_rank, n_children, seer_spec_kind_name(kind));
    if (n_children == 0)
        return SEER_OK;
    /* the first child is what a chain would have drafted: its depth counts as a chain's */
    seer_accept_stats *ss[2];
    observe_depths(pl, tr, kind, budget, depth, 1, accepted_rank == 1, ss);
    for (int s = 0; s < 2; s++)
        if (ss[s])
            seer_tree_est_observe(&ss[s]->pos, n_children, accepted_rank);
    return SEER_OK;
}

/* a [max_gamma] per depth and p [tree_ranks] of one request (tr NULL: the batch) under kind
 * at its table budget of index ki (-1: every budget together); explore: a probe round's
 * depth-0 prior. A budget's depth 0 shrinks towards the kind's estimate over every budget (a
 * budget not yet seen is taken to accept as the others do) or, for a probe, towards
 * explore_accept (a budget not yet seen is worth trying); p is the kind's. */
static void accept_est(const seer_cost_planner *pl, const seer_accept_track *tr, seer_spec_kind kind,
                       int ki, bool explore, double *a, double *p) {
    const seer_cost_params *q = &pl->p;
    const seer_accept_stats *b = &pl->batch[kind];
    const seer_accept_stats *r = tr ? &tr->kind[kind] : NULL;
    const double w = q->prior_weight;
    if (a) {
        const seer_accept_depths *bd = &b->chain, *rd = r ? &r->chain : NULL;
        double x = explore ? q->explore_accept : q->prior_accept;
        if (ki >= 0) {
            if (!explore)
                x = (bd->accepted[0] + w * x) / (bd->tried[0] + w);
            bd = &pl->batch_k[kind][ki];
            rd = tr ? &tr->budget[kind][ki] : NULL;
        }
        for (int j = 0; j < q->max_gamma; j++) { /* depth j's pseudo-observations: j - 1's */
            x = (bd->accepted[j] + w * x) / (bd->tried[j] + w);
            a[j] = rd ? (rd->accepted[j] + w * x) / (rd->tried[j] + w) : x;
        }
    }
    if (p) {
        seer_tree_est_get(&b->pos, p);
        if (r)
            for (int k = 0; k < q->tree_ranks; k++)
                p[k] = (r->pos.accepted[k] + w * p[k]) / (r->pos.tried[k] + w);
    }
}

void seer_cost_accept(const seer_cost_planner *pl, const seer_accept_track *tr,
                      seer_spec_kind kind, int budget, double *a, double *p) {
    accept_est(pl, tr, kind, budget_index(pl, kind, budget), false, a, p);
}

double seer_cost_chain_tokens(const double *a, int G) {
    double e = 1.0, run = 1.0;
    for (int j = 0; j < G; j++) {
        run *= a[j];
        e += run;
    }
    return e;
}

/* Per-batch inputs of one drafter: chain tokens for G = 1..max_gamma summed over the batch
 * (ch [max_gamma + 1], ch[0] = B) and the batch's mean positional acceptance p. */
static void batch_accept(const seer_cost_planner *pl, const seer_accept_track *const *tracks, int B,
                         seer_spec_kind kind, int ki, bool explore, double *ch, double *p) {
    const int Gm = pl->p.max_gamma, R = pl->p.tree_ranks;
    double a[SEER_COST_MAX_G], pi[SEER_TREE_MAX_RANK];
    memset(ch, 0, sizeof(double) * (Gm + 1));
    memset(p, 0, sizeof(double) * R);
    for (int i = 0; i < B; i++) {
        accept_est(pl, tracks ? tracks[i] : NULL, kind, ki, explore, a, pi);
        double run = 1.0;
        ch[0] += 1.0;
        for (int g = 1; g <= Gm; g++) {
            run *= a[g - 1];
            ch[g] += run; /* increments: the prefix sums come below */
        }
        for (int k = 0; k < R; k++)
            p[k] += pi[k] / B;
    }
    for (int g = 1; g <= Gm; g++)
        ch[g] += ch[g - 1];
}

static void fill(seer_spec_decision *d, seer_spec_kind kind, int budget, int gamma, int nodes,
                 double tokens, double t, double plain_tps) {
    d->kind = kind;
    d->budget = budget;
    d->gamma = gamma;
    d->tree_nodes = nodes;
    d->tokens_per_round = tokens;
    d->t_round_s = t;
    d->tokens_per_s = tokens / t;
    d->plain_tokens_per_s = plain_tps;
    d->speedup = d->tokens_per_s / plain_tps;
}

static seer_status check_batch(const int *lens, int B, double *L) {
    SEER_CHECK_ARG(lens);
    if (B < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "cost planner: batch of %d", B);
    double sum = 0;
    for (int i = 0; i < B; i++) {
        if (lens[i] < 0)
            return seer_err(SEER_ERR_INVALID_ARG, "cost planner: length %d", lens[i]);
        sum += lens[i];
    }
    *L = sum / B > 1 ? sum / B : 1;
    return SEER_OK;
}

static seer_status choose(const seer_cost_planner *pl, const seer_accept_track *const *tracks,
                          const int *lens, int B, const bool *allowed, bool explore, seer_spec_decision *out) {
    SEER_CHECK_ARG(pl);
    SEER_CHECK_ARG(out);
    double L;
    SEER_TRY(check_batch(lens, B, &L));
    const seer_cost_table *t = &pl->t;
    const seer_cost_params *q = &pl->p;
    bool plain_est;
    const double t_plain = seer_cost_target_est(t, B, L, &plain_est), plain_tps = B / t_plain;
    seer_spec_decision best;
    memset(&best, 0, sizeof best);
    fill(&best, SEER_SPEC_NONE, 0, 0, 0, B, t_plain, plain_tps);
    const int D = q->max_tree_depth ? q->max_tree_depth : q->max_gamma, N = q->max_tree_nodes;
    double f[(SEER_COST_MAX_G + 1) * (SEER_TREE_MAX_NODES + 1)];
    for (int d = 0; d < t->n_drafters; d++) {
        const seer_cost_drafter *dr = &t->drafter[d];
        if (allowed && !allowed[dr->kind])
            continue;
        bool trees = false;
        for (int ki = 0; ki < dr->n_k; ki++) {
            double ch[SEER_COST_MAX_G + 1], p[SEER_TREE_MAX_RANK];
            batch_accept(pl, tracks, B, dr->kind, ki, explore, ch, p);
            if (ki == 0) /* p is the kind's, the same at every budget */
                trees = N > 2 && seer_tree_table(p, q->tree_ranks, N, D, f) == SEER_OK;
            bool d_est;
            const double td = seer_cost_draft_est(t, d, ki, B, L, &d_est);
            for (int g = 1; g <= q->max_gamma; g++) {
                bool v_est;
                const double tv = seer_cost_verify_est(t, g + 1, B, L, &v_est);
                /* a partial table's guesses: drafting must win by the margin too */
                const double tr = (g * td + tv) * (plain_est || d_est || v_est ? q->est_margin : 1.0);
                if (ch[g] / tr > best.tokens_per_s)
                    fill(&best, dr->kind, dr->k[ki], g, 0, ch[g], tr, plain_tps);
            }
            /* trees wider than a chain (a chain of depth d is n = d + 1, costed above with
             * its per-depth acceptance) */
            for (int dep = 1; trees && dep <= D; dep++)
                for (int n = dep + 2; n <= N; n++) {
                    const double tok = B * f[dep * (N + 1) + n];
                    bool v_est;
                    const double tv = seer_cost_verify_est(t, n, B, L, &v_est);
                    const double tr = (dep * td + tv) * (plain_est || d_est || v_est ? q->est_margin : 1.0);
                    if (tok / tr > best.tokens_per_s) {
                        fill(&best, dr->kind, dr->k[ki], dep, n, tok, tr, plain_tps);
                        best.tree_ranks = q->tree_ranks;
                        memcpy(best.tree_p, p, sizeof(double) * q->tree_ranks);
                    }
                }
        }
    }
    if (best.speedup < q->min_speedup) {
        memset(&best, 0, sizeof best);
        fill(&best, SEER_SPEC_NONE, 0, 0, 0, B, t_plain, plain_tps);
    }
    *out = best;
    return SEER_OK;
}

seer_status seer_cost_choose(const seer_cost_planner *pl, const seer_accept_track *const *tracks,
                             const int *lens, int B, const bool *allowed, seer_spec_decision *out) {
    SEER_CHECK_ARG(pl);
    return choose(pl, tracks, lens, B, allowed, false, out);
}

seer_status seer_cost_choose_probe(const seer_cost_planner *pl, const seer_accept_track *const *tracks,
                                   const int *lens, int B, const bool *allowed, seer_spec_decision *out) {
    SEER_CHECK_ARG(pl);
    return choose(pl, tracks, lens, B, allowed, true, out);
}

seer_status seer_cost_predict(const seer_cost_planner *pl, const seer_accept_track *const *tracks,
                              const int *lens, int B, seer_spec_kind kind, int budget, int gamma,
                              seer_spec_decision *out) {
    SEER_CHECK_ARG(pl);
    SEER_CHECK_ARG(out);
    double L;
    SEER_TRY(check_batch(lens, B, &L));
    const seer_cost_table *t = &pl->t;
    const double t_plain = seer_cost_target(t, B, L), plain_tps = B / t_plain;
    seer_spec_decision d;
    memset(&d, 0, sizeof d);
    if (kind == SEER_SPEC_NONE || gamma == 0) {
        fill(&d, SEER_SPEC_NONE, 0, 0, 0, B, t_plain, plain_tps);
        *out = d;
        return SEER_OK;
    }
    const int di = kind_ok(kind) ? seer_cost_find_drafter(t, kind) : -1;
    int ki = -1;
    for (int k = 0; di >= 0 && k < t->drafter[di].n_k; k++)
        if (t->drafter[di].k[k] == budget)
            ki = k;
    if (ki < 0 || gamma < 0 || gamma > pl->p.max_gamma)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "cost planner: no measured %s step with budget %d, or gamma %d > %d",
                        seer_spec_kind_name(kind), budget, gamma, pl->p.max_gamma);
    double ch[SEER_COST_MAX_G + 1], p[SEER_TREE_MAX_RANK];
    batch_accept(pl, tracks, B, kind, ki, false, ch, p);
    const double tr =
        gamma * seer_cost_draft(t, di, ki, B, L) + seer_cost_verify(t, gamma + 1, B, L);
    fill(&d, kind, budget, gamma, 0, ch[gamma], tr, plain_tps);
    *out = d;
    return SEER_OK;
}
