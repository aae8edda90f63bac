/*
 * tree.c: token trees (SpecInfer, Sequoia): the default shape, the step-by-step drafting that
 * fills a shape, the verification rows and tree mask of a proposal, the greedy rule over a
 * tree and the compaction of the accepted path's KV rows.
 *
 * A proposal is nodes 0..nd-1 below the pending token with a parent array (parents first,
 * breadth-first); a chain is the tree whose parents are j - 1, and then everything here
 * does what chain speculation did: no mask, no KV moves, the same draft calls.
 *
 * Not here: the sampling rule (the backend's accept_trees, driven from verify.c) and the
 * choice of shape by a cost model (a shape from elsewhere replaces seer_tree_shape_default).
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
    for (int j = 0; j < acc; j++)
        if (path[j] != j) {
            src[m] = L + 1 + path[j];
            dst[m++] = L + 1 + j;
        }
    /* path nodes increase (a child comes after its parent) and path[j] >= j, so a slot is
     * read before any move writes it or after the move that put the right row there */
    if (m)
        SEER_TRY(seer_seq_move_slots(g->ctx, s->seq, src, dst, m));
    return seer_seq_rewind(g->ctx, s->seq, L + 1 + acc);
}

int seer_verify_tree_ids(seer_gen *g, int k, seer_gen_seq *s, const int32_t *amax, int32_t *next) {
    const int nd = g->nd[k];
    const int32_t *d = g->draft + (size_t)k * g->G, *p = g->par + (size_t)k * g->G;
    int32_t *path = g->path + (size_t)k * g->G;
    int node = -1, a = 0;
    if (g->spec.synthetic_accept > 0) {
        /* timing runs on random weights: the first child at the synthetic rate */
        for (;;) {
            int c = node + 1;
            while (c < nd && p[c] != node)
                c++;
            if (c == nd || !(seer_sampler_uniform(s->smp) < g->spec.synthetic_accept))
                break;
            path[a++] = c;
            node = c;
        }
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
        if (g->seqs[h].alive && g->seqs[h].sp.repeat_penalty != 1.f && g->seqs[h].sp.repeat_last_n > rl)
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
    if (s->sp.repeat_penalty == 1.f || s->sp.repeat_last_n <= 0)
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

/* ---- drafting a shape ------------------------------------------------------------------ */

/* The best count ids of row x [V] by value (ties: lower id) that are not in skip [n_skip]. */
static void top_ids(const float *x, int V, const int32_t *skip, int n_skip, int count, int32_t *out) {
    for (int c = 0; c < count; c++) {
        int best = -1;
        for (int v = 0; v < V; v++) {
            bool taken = false;
            for (int s = 0; s < n_skip && !taken; s++)
                taken = skip[s] == v;
            for (int s = 0; s < c && !taken; s++)
                taken = out[s] == v;
            if (!taken && x[v] == x[v] && (best < 0 || x[v] > x[best]))
                best = v;
        }
        out[c] = best < 0 ? skip[0] : best;
    }
}

/* A draw from q [V] without the ids in skip [n_skip] (renormalised), inverse CDF in id
 * order with uniform u; -1 when nothing is left. */
static int32_t draw_without(const float *q, int V, const int32_t *skip, int n_skip, double u) {
    double z = 0;
    for (int v = 0; v < V; v++)
        z += q[v] > 0 ? q[v] : 0;
    for (int s = 0; s < n_skip; s++)
        if (skip[s] >= 0 && skip[s] < V && q[skip[s]] > 0)
            z -= q[skip[s]];
    if (!(z > 0))
        return -1;
    double t = u * z, c = 0;
    int last = -1;
    for (int v = 0; v < V; v++) {
        if (!(q[v] > 0))
            continue;
        bool skipped = false;
        for (int s = 0; s < n_skip && !skipped; s++)
            skipped = skip[s] == v;
        if (skipped)
            continue;
        last = v;
        c += q[v];
        if (t < c)
            return v;
    }
    return last;
}

seer_status seer_gen_expand(seer_gen *g, seer_context *c, int n, const int *hs,
                            const seer_seq_id *dseq, uint8_t *cap0, float *qbuf, float *q,
                            int *kept) {
    const int G = g->G, V = g->V, TB = c->params.n_batch_max;
    int m[n], branch[n], maxd = 0;
    for (int i = 0; i < n; i++) {
        /* the shape's first nodes within the node and depth limits (breadth-first: a prefix) */
        int k = 0;
        while (k < g->gam[i] && k < G && g->sdepth[k] <= g->dl[i])
            k++;
        m[i] = k;
        g->nd[i] = 0;
        branch[i] = 1 << 30; /* first depth with two nodes */
        for (int j = 1; j < k; j++)
            if (g->sdepth[j] == g->sdepth[j - 1] && g->sdepth[j] < branch[i])
                branch[i] = g->sdepth[j];
        if (k)
            maxd = g->sdepth[k - 1] > maxd ? g->sdepth[k - 1] : maxd;
        if (kept)
            kept[i] = 0;
        if (cap0 && k == 0)
            cap0[i] = 0;
    }
    int32_t *tok = malloc(sizeof(int32_t) * TB), *sq = malloc(sizeof(int32_t) * TB),
            *pos = malloc(sizeof(int32_t) * TB), *who = malloc(sizeof(int32_t) * TB),
            *node = malloc(sizeof(int32_t) * TB), *pick = malloc(sizeof(int32_t) * (G + 1));
    uint8_t *want = malloc(TB), *cap = malloc(TB);
    float *row = NULL;
    seer_status st = tok && sq && pos && who && node && pick && want && cap
                         ? SEER_OK
                         : seer_err(SEER_ERR_OOM, "out of memory for drafting");
    for (int d = 1; d <= maxd && st == SEER_OK; d++) {
        int T = 0, n_cap = 0;
        bool masked = false;
        for (int i = 0; i < n && st == SEER_OK; i++) {
            if (m[i] == 0 || g->sdepth[m[i] - 1] < d)
                continue;
            const seer_gen_seq *s = &g->seqs[hs[i]];
            const int L = s->n_tokens - 1;
            const int32_t *dr = g->draft + (size_t)i * G;
            /* nodes fed by this call: the one at depth d - 1 while the tree above is a
             * chain, else everything from the first branching depth down to d - 1 */
            int lo = d - 1 < branch[i] ? d - 1 : branch[i];
            if (lo < d - 1)
                st = seer_seq_rewind(c, dseq[i], L + lo);
            masked |= d - 1 >= branch[i]; /* siblings in the call */
            for (int j = -1; j < m[i] && st == SEER_OK; j++) {
                const int dj = j < 0 ? 0 : g->sdepth[j];
                if (dj < lo || dj > d - 1)
                    continue;
                if (T == TB) {
                    st = seer_err(SEER_ERR_INVALID_ARG, "a draft tree does not fit in the batch limit %d", TB);
                    break;
                }
                tok[T] = j < 0 ? s->tokens[L] : dr[j];
                sq[T] = dseq[i];
                pos[T] = L + dj;
                node[T] = j;
                who[T] = i;
                /* logits where the node has children in this sequence's tree */
                bool parent = false;
                for (int x = j + 1; x < m[i] && !parent; x++)
                    parent = g->shape[x] == j;
                want[T] = dj == d - 1 && parent;
                cap[T] = cap0 && d == 1 && cap0[i];
                n_cap += cap[T];
                T++;
            }
        }
        if (st != SEER_OK || T == 0)
            break;
        uint8_t *mask = NULL;
        if (masked) {
            mask = g->mask;
            memset(mask, 0, (size_t)T * T);
            for (int t = 0; t < T; t++)
                for (int u = 0; u < T; u++) {
                    if (who[u] != who[t])
                        continue;
                    /* u is t or an ancestor of t */
                    for (int j = node[t];; j = g->shape[j]) {
                        if (j == node[u]) {
                            mask[(size_t)t * T + u] = 1;
                            break;
                        }
                        if (j < 0)
                            break;
                    }
                }
        }
        seer_batch b = {.n_tokens = T, .token = tok, .seq = sq, .pos = pos, .logits = want, .mask = mask,
                        .capture = n_cap ? cap : NULL, .queries = qbuf};
        bool amax = true, branching = false;
        int nf = 0;
        for (int t = 0; t < T; t++) {
            if (!want[t])
                continue;
            nf++;
            amax &= seer_gen_argmax_only(&g->seqs[hs[who[t]]]);
            int kids = 0;
            for (int x = node[t] + 1; x < m[who[t]]; x++)
                kids += g->shape[x] == node[t];
            branching |= kids > 1;
        }
        float *Lg = NULL;
        if (amax && !branching) {
            st = seer_decode_argmax(c, &b, g->ids);
        } else {
            st = seer_decode_keep(c, &b, &Lg);
            seer_gen_hist_reset(g);
            if (st == SEER_OK)
                st = seer_gen_hist_reserve(g, nf);
            for (int t = 0, f = 0; t < T && st == SEER_OK; t++) {
                if (!want[t])
                    continue;
                const int i = who[t];
                seer_gen_seq *s = &g->seqs[hs[i]];
                float *qi = s->sp.temperature > 0 ? q + ((size_t)i * G + node[t] + 1) * V : NULL;
                g->rows[f] = seer_gen_node_row(g, i, s, node[t], Lg + (size_t)f * V, qi, seer_gen_draw(s));
                f++;
            }
            if (st == SEER_OK)
                st = seer_context_sample(c, g->rows, nf, g->ids);
        }
        /* children: the first from the call, the others (siblings) on the host */
        for (int t = 0, f = 0; t < T && st == SEER_OK; t++) {
            if (!want[t])
                continue;
            const int i = who[t], u = node[t];
            seer_gen_seq *s = &g->seqs[hs[i]];
            int32_t *dr = g->draft + (size_t)i * G, *pr = g->par + (size_t)i * G;
            int kids = 0;
            for (int x = u + 1; x < m[i]; x++)
                if (g->shape[x] == u) {
                    pr[x] = u;
                    if (kids++ == 0)
                        dr[x] = g->ids[f];
                }
            if (kids > 1) {
                if (!row)
                    row = seer_malloc_array(V, sizeof(float));
                const bool sampled = s->sp.temperature > 0;
                const float *src = sampled ? q + ((size_t)i * G + u + 1) * V : Lg + (size_t)f * V;
                seer_backend *be = c->be;
                if (!row)
                    st = seer_err(SEER_ERR_OOM, "out of memory for drafting");
                else
                    st = be->ops->download(be, row, src, sizeof(float) * V);
                int n_pick = 0;
                for (int x = u + 1; x < m[i] && st == SEER_OK; x++) {
                    if (g->shape[x] != u)
                        continue;
                    if (n_pick == 0) {
                        pick[n_pick++] = dr[x];
                        continue;
                    }
                    /* greedy: the next best logits; sampling: without replacement. When the
                     * draft's support is used up the node repeats its first sibling: the rule
                     * then rejects it at no cost (q without that token gives it 0) */
                    int32_t t2;
                    if (sampled)
                        t2 = draw_without(row, V, pick, n_pick, seer_gen_draw(s));
                    else
                        top_ids(row, V, pick, n_pick, 1, &t2);
                    dr[x] = t2 < 0 ? pick[0] : t2;
                    if (t2 >= 0)
                        pick[n_pick++] = t2;
                }
            }
            f++;
        }
        for (int i = 0; i < n && st == SEER_OK; i++) {
            int k = 0;
            while (k < m[i] && g->sdepth[k] <= d)
                k++;
            g->nd[i] = k;
        }
    }
    for (int i = 0; i < n && kept; i++)
        kept[i] = branch[i] >= (1 << 30) && g->nd[i] > 0 ? g->nd[i] - 1 : 0;
    free(tok), free(sq), free(pos), free(who), free(node), free(pick), free(want), free(cap), free(row);
    return st;
}
