/*
 * best_first_size.c: the node budget of best-first trees (SpecExec) chosen by the cost model:
 * the budget n that maximises expected tokens per round over the round's time, where the
 * round's time is the target's verification pass over n + 1 rows (in calls of at most
 * call_rows, each costing c(rows) from the measured table) plus the draft's calls.
 *
 * The expected accepted drafts of a best-first tree of n nodes follow from positional
 * acceptance (tree_shape.h): a node's chance of being on the accepted path is the product of
 * a[rank] along its path, and best-first search keeps the n nodes where that product is
 * largest (a child's never exceeds its parent's, so they form a tree). E(n) is the sum of the
 * n largest, enumerated with a heap.
 *
 * An offloaded target streams its weights once per call, so c(rows) is nearly flat up to a
 * call's rows: the choice is then a large tree. A target whose pass grows with its tokens
 * (compute-bound, or a fast GPU-resident one) gets a small one.
 */
#include "spec/best_first_size.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    double p;
    int depth;
} bfs_node;

static void heap_push(bfs_node *h, int *n, bfs_node x) {
    int i = (*n)++;
    while (i > 0 && h[(i - 1) / 2].p < x.p) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

static bfs_node heap_pop(bfs_node *h, int *n) {
    bfs_node top = h[0], x = h[--(*n)];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1].p > h[c].p)
            c++;
        if (h[c].p <= x.p)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = x;
    return top;
}

seer_status seer_best_first_expected(const double *p, int n_rank, int n_max, int d_max, double *e) {
    SEER_TRY(seer_tree_check_p(p, n_rank));
    if (n_max < 0 || !e)
        return seer_err(SEER_ERR_INVALID_ARG, "best-first expectation: %d nodes", n_max);
    double a[SEER_TREE_MAX_RANK];
    seer_tree_rank_probs(p, n_rank, a);
    bfs_node *h = seer_malloc_array((size_t)n_max * n_rank + n_rank + 1, sizeof *h);
    if (!h)
        return seer_err(SEER_ERR_OOM, "out of memory for a best-first expectation");
    int hn = 0;
    for (int r = 0; r < n_rank; r++)
        if (a[r] > 0)
            heap_push(h, &hn, (bfs_node){a[r], 1});
    e[0] = 0;
    for (int n = 1; n <= n_max; n++) {
        if (hn == 0) { /* nothing more can be accepted */
            e[n] = e[n - 1];
            continue;
        }
        const bfs_node x = heap_pop(h, &hn);
        e[n] = e[n - 1] + x.p;
        if (d_max > 0 && x.depth >= d_max)
            continue;
        for (int r = 0; r < n_rank; r++)
            if (a[r] * x.p > 0)
                heap_push(h, &hn, (bfs_node){a[r] * x.p, x.depth + 1});
    }
    free(h);
    return SEER_OK;
}

double seer_best_first_pass_cost(const seer_tree_vcost *c, int rows, int call_rows) {
    const int full = rows / call_rows, rem = rows % call_rows;
    return full * seer_tree_vcost_at(c, call_rows) + (rem ? seer_tree_vcost_at(c, rem) : 0.0);
}

int seer_best_first_draft_calls(int n, int topk) {
    /* the pending token's call, then calls that each add half the budget left (one node's
     * children at least): about log2(n / topk) + 1 more */
    int calls = 1;
    for (int left = n; left > 0; calls++)
        left -= left / 2 > topk ? left / 2 : topk;
    return calls;
}

seer_status seer_best_first_choose(const double *p, int n_rank, const seer_tree_vcost *c, int call_rows,
                                   double t_draft_call, int topk, int n_max, int d_max, int *n_out, double *speedup) {
    if (!c || c->n_points < 1 || call_rows < 1 || topk < 1 || n_max < 1 || !n_out || !(t_draft_call >= 0))
        return seer_err(SEER_ERR_INVALID_ARG, "best-first size: bad arguments (%d rows per call, %d children, %d nodes)",
                        call_rows, topk, n_max);
    double *e = seer_malloc_array((size_t)n_max + 1, sizeof(double));
    if (!e)
        return seer_err(SEER_ERR_OOM, "out of memory for a best-first size");
    seer_status st = seer_best_first_expected(p, n_rank, n_max, d_max, e);
    if (st != SEER_OK) {
        free(e);
        return st;
    }
    const double plain = 1.0 / seer_tree_vcost_at(c, 1);
    double best = plain;
    int bn = 0;
    for (int n = 1; n <= n_max; n++) {
        const double t = seer_best_first_pass_cost(c, n + 1, call_rows) + t_draft_call * seer_best_first_draft_calls(n, topk);
        const double rate = (1.0 + e[n]) / t;
        if (rate > best * (1 + 1e-12)) { /* ties: the smaller tree */
            best = rate;
            bn = n;
        }
    }
    free(e);
    *n_out = bn;
    if (speedup)
        *speedup = best / plain;
    return SEER_OK;
}
