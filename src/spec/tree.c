/*
 * tree.c: token trees (SpecInfer, Sequoia) on the generator's side: the default shape, the
 * verification rows and tree mask of a proposal, the greedy rule over a tree, the penalty
 * history of a node, and the compaction of the accepted path's KV rows.
 *
 * A proposal is nodes 0..nd-1 below the pending token with a parent array (parents first,
 * breadth-first); a chain is the tree whose parents are j - 1, and then everything here
 * does what chain speculation did: no mask, no KV moves, the same draft calls.
 *
 * Not here: drafting a shape (expand.c, the drafters' helper), the sampling rule (the
 * backend's accept_trees, driven from verify.c) and the choice of shape by a cost model (a
 * shape from elsewhere replaces seer_tree_shape_default).
 */
#include "spec/spec.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

void seer_tree_shape_default(int n, int d, int32_t *parent) {
    if (d > n)
        d = n;
    if (d < 1)
        return;
    /* extra leaves per depth: rank by rank, shallowest first */
    int extra[d + 1];
    memset(extra, 0, sizeof extra);
    for (int left = n - d; left > 0;)
        for (int k = 1; k <= d && left > 0; k++, left--)
            extra[k]++;
    /* level k: the chain node, then its extra siblings, all children of the chain node at
     * depth k - 1, whose index is the first of level k - 1 */
    int j = 0, prev_first = -1;
    for (int k = 1; k <= d; k++) {
        const int first = j;
        for (int e = 0; e <= extra[k]; e++)
            parent[j++] = prev_first;
        prev_first = first;
    }
}

seer_status seer_tree_shape_check(const int32_t *parent, int n, int d, int32_t *depth) {
    for (int j = 0; j < n; j++) {
        if (parent[j] < -1 || parent[j] >= j)
            return seer_err(SEER_ERR_INVALID_ARG, "tree node %d has parent %d (must be in [-1, %d))", j,
                            parent[j], j);
        depth[j] = parent[j] < 0 ? 1 : depth[parent[j]] + 1;
        if (j > 0 && depth[j] < depth[j - 1])
            return seer_err(SEER_ERR_INVALID_ARG, "tree nodes are not in breadth-first order at %d", j);
        if (depth[j] > d)
            return seer_err(SEER_ERR_INVALID_ARG, "tree node %d is at depth %d, deeper than %d", j, depth[j], d);
    }
    return SEER_OK;
}

bool seer_gen_is_chain(const seer_gen *g, int k) {
    const int32_t *p = g->par + (size_t)k * g->G;
    for (int j = 0; j < g->nd[k]; j++)
        if (p[j] != j - 1)
            return false;
    return true;
}

/* Depth of node j of entry k (0: the pending token). */
static int node_depth(const seer_gen *g, int k, int j) {
    const int32_t *p = g->par + (size_t)k * g->G;
    int d = 0;
    for (; j >= 0; j = p[j])
        d++;
    return d;
}

int seer_gen_verify_rows(const seer_gen *g, int k, int32_t *tok, int32_t *pos) {
    const seer_gen_seq *s = &g->seqs[g->hs[k]];
    const int L = s->n_tokens - 1, nd = g->nd[k];
    const int32_t *d = g->draft + (size_t)k * g->G;
    tok[0] = s->tokens[L];
    pos[0] = L;
    for (int j = 0; j < nd; j++) {
        tok[j + 1] = d[j];
        pos[j + 1] = L + node_depth(g, k, j);
    }
    return nd + 1;
}

void seer_gen_mask_rows(const seer_gen *g, int k, uint8_t *mask, int T, int t0, int n, bool causal) {
    for (int a = 0; a < n; a++) {
        uint8_t *row = mask + (size_t)(t0 + a) * T + t0;
        if (causal) {
            memset(row, 1, a + 1);
            continue;
        }
        /* row a is node a - 1: itself and its ancestors, the pending token (row 0) last */
        const int32_t *p = g->par + (size_t)k * g->G;
        for (int j = a - 1; j >= 0; j = p[j])
            row[j + 1] = 1;
        row[0] = 1;
    }
}

seer_status seer_gen_settle(seer_gen *g, int k, seer_gen_seq *s) {
    const int L = s->n_tokens - 1, acc = g->acc[k];
    const int32_t *path = g->path + (size_t)k * g->G;
    int32_t src[acc > 0 ? acc : 1], dst[acc > 0 ? acc : 1];
    int m = 0;
    const int32_t *vs = g->chunked[k] ? g->vslot + (size_t)k * g->G : NULL;
    for (int j = 0; j < acc; j++) {
        const int from = vs ? vs[path[j]] : L + 1 + path[j];
        if (from != L + 1 + j) {
            src[m] = from;
            dst[m++] = L + 1 + j;
        }
    }
    /* path nodes increase (a child comes after its parent) and path[j] >= j, so a slot is
     * read before any move writes it or after the move that put the right row there; a
     * chunked entry's slots increase along a path as well (a node's call comes after its
     * parent's, or it lies after its parent in the same call), and src[j] >= L + 1 + j */
    if (m)
        SEER_TRY(seer_seq_move_slots(g->ctx, s->seq, src, dst, m));
    return seer_seq_rewind(g->ctx, s->seq, L + 1 + acc);
}

int seer_verify_tree_ids(seer_gen *g, int k, seer_gen_seq *s, const int32_t *amax, int32_t *next) {
    const int nd = g->nd[k];
    const int32_t *d = g->draft + (size_t)k * g->G, *p = g->par + (size_t)k * g->G;
    int32_t *path = g->path + (size_t)k * g->G;
    int node = -1, a = 0;
    if (seer_gen_synthetic(g)) { /* timing runs on random weights */
        a = seer_gen_synthetic_path(g, k, path, &node);
        *next = amax[node + 1];
        return a;
    }
    for (;;) {
        const int32_t want = amax[node + 1];
        int c = node + 1;
        while (c < nd && !(p[c] == node && d[c] == want))
            c++;
        if (c == nd)
            break;
        path[a++] = c;
        node = c;
    }
    *next = amax[node + 1];
    return a;
}

/* ---- penalty histories of tree nodes --------------------------------------------------- */

void seer_gen_hist_reset(seer_gen *g) { g->hbuf_used = 0; }

seer_status seer_gen_hist_reserve(seer_gen *g, int rows) {
    int rl = 0;
    for (int h = 0; h < g->n_seqs; h++)
        if (g->seqs[h].alive && seer_sampler_penalised(&g->seqs[h].sp) && g->seqs[h].sp.repeat_last_n > rl)
            rl = g->seqs[h].sp.repeat_last_n;
    if (!rl)
        return SEER_OK;
    const size_t need = (size_t)rows * ((size_t)rl + g->G + 1);
    if (need <= g->hbuf_cap)
        return SEER_OK;
    int32_t *b = seer_malloc_array(need, sizeof(int32_t));
    if (!b)
        return seer_err(SEER_ERR_OOM, "out of memory for tree penalty histories");
    free(g->hbuf);
    g->hbuf = b;
    g->hbuf_cap = need;
    g->hbuf_used = 0;
    return SEER_OK;
}

seer_sample_row seer_gen_node_row(seer_gen *g, int k, const seer_gen_seq *s, int u, const float *logits,
                                  float *probs, double uni) {
    seer_sample_row r = {.logits = logits, .probs = probs, .sp = &s->sp, .u = uni};
    if (s->con)
        r.mask = seer_spec_row_mask(s->con, g->draft + (size_t)k * g->G, g->par + (size_t)k * g->G, u);
    if (!seer_sampler_penalised(&s->sp))
        return r; /* no penalty: the history is irrelevant */
    const int32_t *d = g->draft + (size_t)k * g->G, *p = g->par + (size_t)k * g->G;
    int dep = 0;
    for (int j = u; j >= 0; j = p[j])
        dep++;
    const int rl = s->sp.repeat_last_n;
    const int from_tokens = s->n_tokens < rl ? s->n_tokens : rl;
    int32_t *b = g->hbuf + g->hbuf_used;
    memcpy(b, s->tokens + s->n_tokens - from_tokens, sizeof(int32_t) * from_tokens);
    int i = from_tokens + dep;
    for (int j = u; j >= 0; j = p[j])
        b[--i] = d[j];
    g->hbuf_used += (size_t)from_tokens + dep;
    r.hist = b;
    r.n_hist = from_tokens + dep;
    return r;
}
