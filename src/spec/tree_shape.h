/*
 * tree_shape.h: the shape of a speculation tree (Sequoia, Chen et al. 2024): which tree of
 * at most n nodes maximises the expected tokens a verification round emits, given how likely
 * the k-th ranked child of a node is to be accepted; how large a tree pays on given hardware;
 * and an online estimate of those acceptance rates from verification outcomes.
 *
 * Not for drafting or verifying a tree (the drafters and verify.c do that): this is planning
 * only, pure arithmetic without model or backend.
 *
 * Positional acceptance: p[k-1] (k = 1..n_rank) is the probability that the k-th child of a
 * node, in the order the verifier tries them, is accepted given that children 1..k-1 were
 * rejected. The probability that child k is the accepted one is then
 * a[k] = p[k] * prod_{j<k} (1 - p[j]), and a tree's expected accepted drafts per round is the
 * sum over its non-root nodes of the product of a[rank] along the path from the root.
 */
#ifndef SEER_SPEC_TREE_SHAPE_H
#define SEER_SPEC_TREE_SHAPE_H

#include "seer.h"

/* Most nodes (root included) and most ranked children the planner considers. Sequoia's trees
 * stop paying well before 128 nodes on current GPUs (verification turns compute-bound). */
#define SEER_TREE_MAX_NODES 128
#define SEER_TREE_MAX_RANK 16

/* A tree in breadth-first order: node 0 is the root (the pending token, not a draft), every
 * node's parent comes before it, nodes of one depth are contiguous, and the children of a
 * node are consecutive in rank order. A chain of G drafts is the tree of n = G + 1 nodes with
 * every rank 1. */
typedef struct {
    int n;                              /* nodes, root included (1 .. SEER_TREE_MAX_NODES) */
    int depth_max;                      /* deepest node's depth (0: root only) */
    int parent[SEER_TREE_MAX_NODES];    /* [n] parent node; -1 for the root */
    int rank[SEER_TREE_MAX_NODES];      /* [n] 1-based rank among siblings; 0 for the root */
    int depth[SEER_TREE_MAX_NODES];     /* [n] the root is at depth 0 */
    double expected;                    /* expected accepted drafts per round (root excluded);
                                           the round emits expected + 1 tokens */
} seer_tree_shape;

/* a [n_rank] from p [n_rank] as above. Values outside [0, 1] or not finite are the caller's
 * error (see seer_tree_check_p). */
void seer_tree_rank_probs(const double *p, int n_rank, double *a);

/* SEER_OK when 1 <= n_rank <= SEER_TREE_MAX_RANK and every p is in [0, 1]. */
seer_status seer_tree_check_p(const double *p, int n_rank);

/* The expected accepted drafts of any tree (parents before children, ranks 1-based and
 * unique among siblings) under p; the independent check of the dynamic program. */
seer_status seer_tree_expected(const double *p, int n_rank, const int *parent, const int *rank,
                               int n, double *out);

/* Sequoia's dynamic program: the tree of at most n nodes (1 <= n <= SEER_TREE_MAX_NODES) and
 * depth at most max_depth (<= 0: unbounded) that maximises the expected accepted drafts.
 * Nodes are added only where they add something: with a[k] = 0 for every k > r, no node has
 * more than r children, so out->n may be less than n. Ties go to the first child sizes found
 * (deterministic). */
seer_status seer_tree_best(const double *p, int n_rank, int n, int max_depth,
                           seer_tree_shape *out);

/* The DP's table alone: f[d * (n_max + 1) + m] = 1 + the best expected accepted drafts of a
 * tree of at most m nodes and depth at most d, for d = 0..d_max and m = 0..n_max (m = 0 holds
 * 0). f is [d_max + 1][n_max + 1]. Cost O(d_max * n_max^2 * n_rank). */
seer_status seer_tree_table(const double *p, int n_rank, int n_max, int d_max, double *f);

/* Verification cost of n tokens per sequence relative to one decode step, measured at a few
 * sizes: c(n) is linear between the points, c(n[0]) below the first, and continues the last
 * segment's slope beyond the last (never below the last value). */
typedef struct {
    int n_points;
    const int *n;       /* [n_points] strictly ascending, >= 1 */
    const double *cost; /* [n_points] > 0, relative to one plain decode step */
} seer_tree_vcost;

double seer_tree_vcost_at(const seer_tree_vcost *c, int n);

/* Sequoia's hardware-aware choice: the size n <= n_max and depth d <= d_max (d <= 0:
 * n_max - 1) maximising (1 + E[accepted](n, d)) / (d * t_draft + c(n)), where t_draft is one
 * draft step relative to a decode step. The plain step (n = 1, d = 0, rate 1 / c(1)) is among
 * the candidates, so out->n == 1 means speculation does not pay. *speedup (may be NULL)
 * receives the chosen rate over the plain rate. */
seer_status seer_tree_choose(const double *p, int n_rank, const seer_tree_vcost *c, double t_draft,
                             int n_max, int d_max, seer_tree_shape *out, double *speedup);

/* Online estimate of positional acceptance: counts per rank with a prior of prior_weight
 * pseudo-trials at prior_p, optionally decayed (each observation first multiplies the counts
 * by decay, so the estimate follows recent rounds: 1 = plain counting). */
typedef struct {
    int n_rank;
    double prior_weight;
    double decay;                          /* (0, 1] */
    double prior[SEER_TREE_MAX_RANK];      /* [n_rank] */
    double tried[SEER_TREE_MAX_RANK];      /* [n_rank] (decayed) times rank k was tried */
    double accepted[SEER_TREE_MAX_RANK];   /* [n_rank] (decayed) times it was accepted */
} seer_tree_accept_est;

/* prior_p [n_rank] (NULL: 0.5 at every rank). */
seer_status seer_tree_est_init(seer_tree_accept_est *e, int n_rank, const double *prior_p,
                               double prior_weight, double decay);
/* One verified node that had n_children drafted children and accepted the child of rank
 * accepted_rank (1-based; 0: none): ranks before it were tried and rejected, it was tried and
 * accepted; with none, every child was tried and rejected. Children past n_rank are not
 * counted. SEER_ERR_INVALID_ARG (nothing counted) when accepted_rank > n_children or either is
 * negative. */
seer_status seer_tree_est_observe(seer_tree_accept_est *e, int n_children, int accepted_rank);
/* p [e->n_rank]: (accepted + w * prior) / (tried + w) per rank. */
void seer_tree_est_get(const seer_tree_accept_est *e, double *p);

#endif
