/*
 * best_first_size.h: the node budget of best-first trees (SpecExec) from the measured cost of
 * a target pass and of the draft's calls (best_first_size.c). Pure arithmetic, no model.
 */
#ifndef SEER_SPEC_BEST_FIRST_SIZE_H
#define SEER_SPEC_BEST_FIRST_SIZE_H

#include "spec/tree_shape.h"

/* e [n_max + 1]: e[n] = the expected accepted drafts of the best-first tree of n nodes (depth
 * at most d_max; <= 0: unbounded) under positional acceptance p [n_rank] (tree_shape.h). */
seer_status seer_best_first_expected(const double *p, int n_rank, int n_max, int d_max, double *e);

/* The cost of verifying rows rows in calls of at most call_rows, each c(its rows). */
double seer_best_first_pass_cost(const seer_tree_vcost *c, int rows, int call_rows);

/* The draft's forward calls for a best-first tree of n nodes, topk children per expansion
 * (best_first.c adds half the budget left per call). */
int seer_best_first_draft_calls(int n, int topk);

/* The budget n in [0, n_max] maximising (1 + e[n]) / (pass(n + 1) + t_draft_call * calls(n)),
 * all costs relative to one plain decode step; 0 when plain decoding (rate 1 / c(1)) does
 * best. *speedup (may be NULL): the chosen rate over plain's. */
seer_status seer_best_first_choose(const double *p, int n_rank, const seer_tree_vcost *c, int call_rows,
                                   double t_draft_call, int topk, int n_max, int d_max, int *n_out, double *speedup);

#endif
