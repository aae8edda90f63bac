/*
 * best_first.c: SpecExec's tree search (Svirschevski et al. 2024, arXiv 2406.02532) by a
 * draft model: the tree grows where the draft thinks the text most likely goes. Every node
 * carries the draft probability of its path (the product of q along it); each forward call
 * expands the most probable frontier nodes of every sequence, each into topk children, until
 * the node budget is filled. A call feeds the nodes it expands together with their ancestors
 * (the draft cache holds only the prefix and the pending token), under a tree mask, so that
 * nodes of many branches share one call and no node sees another branch.
 *
 * Children are drawn as step drafting draws them (expand.c): greedy, the sampler's pick and
 * then the next best logits; sampling, draws without replacement from the node's draft
 * distribution, whose row goes to q. A node's number of children is fixed when it is expanded,
 * before its draws, so the multi-draft rule stays exact whatever the rest of the tree does.
 *
 * Not here: verification (tree_chunk.c runs a large tree through the target in calls) and
 * the choice of the budget (best_first_size.c).
 */
#include "sample/sample.h"
#include "spec/drafter.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A sequence's search. */
typedef struct {
    int m;          /* node budget */
    int nn;         /* nodes so far */
    int32_t *depth; /* [m] 1: below the pending token */
    double *score;  /* [m] log draft probability of the path */
    uint8_t *done;  /* [m] expanded (or not expandable) */
    uint8_t *in;    /* [m] scratch: in this call's rows */
} bf_seq;

/* Host softmax at temperature 1 of x [V] into y [V] (the greedy draft's path probabilities). */
static void softmax(const float *x, int V, float *y) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++)
        mx = x[v] > mx ? x[v] : mx;
    double z = 0;
    for (int v = 0; v < V; v++) {
        y[v] = x[v] == x[v] && isfinite(mx) ? expf(x[v] - mx) : 0.f;
        z += y[v];
    }
    for (int v = 0; v < V; v++)
        y[v] = z > 0 ? (float)(y[v] / z) : 0.f;
}

int seer_draft_top_excl(const float *x, int V, int32_t skip, int count, int32_t *out) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        const float xv = x[v];
        if (v == skip || xv != xv || (n == count && !(xv > x[out[n - 1]])))
            continue;
        int i = n < count ? n++ : n - 1; /* the last kept drops out when full */
        while (i > 0 && xv > x[out[i - 1]]) {
            out[i] = out[i - 1];
            i--;
        }
        out[i] = v;
    }
    return n;
}

/* The unexpanded node of s with the highest score that may get children, -1 for none. */
static int best_frontier(const bf_seq *b, int max_depth) {
    int best = -1;
    for (int u = 0; u < b->nn; u++)
        if (!b->done[u] && b->depth[u] < max_depth && (best < 0 || b->score[u] > b->score[best]))
            best = u;
    return best;
}

/* Rows of node u's path not yet in the call (u and its ancestors, the pending token excluded). */
static int path_new(const bf_seq *b, const int32_t *parent, int u) {
    int k = 0;
    for (int j = u; j >= 0; j = parent[j])
        k += !b->in[j];
    return k;
}

/* Appends child t of u (log probability lq) to sequence i's proposal. */
static void add_child(bf_seq *b, seer_draft_seq *s, int u, int32_t t, double lq) {
    const int x = b->nn++;
    s->tok[x] = t;
    s->parent[x] = u;
    b->depth[x] = u < 0 ? 1 : b->depth[u] + 1;
    b->score[x] = (u < 0 ? 0 : b->score[u]) + lq;
    b->done[x] = 0;
}

/* The children of node u of sequence i: first the call's pick, the others from the host row
 * (the node's logits, greedy, or its q row, sampling). row, prob: [V] host scratch. */
static seer_status children(seer_context *c, seer_draft_seq *s, bf_seq *b, float *qrow_dev, const float *Lg_row,
                            int u, int32_t first, int kids, int V, float *row, float *prob, int32_t *pick) {
    seer_backend *be = c->be;
    const bool sampled = s->sp->temperature > 0;
    SEER_TRY(be->ops->download(be, row, sampled ? qrow_dev : Lg_row, sizeof(float) * V));
    if (sampled)
        memcpy(prob, row, sizeof(float) * V);
    else
        softmax(row, V, prob);
    int n_pick = 0, n_top = 0;
    if (!sampled && kids > 1) /* greedy siblings: the best logits after the pick */
        n_top = seer_draft_top_excl(row, V, first, kids - 1, pick + 1);
    for (int k = 0; k < kids; k++) {
        int32_t t = first;
        if (k > 0) {
            if (sampled)
                t = seer_draft_draw_without(row, V, pick, n_pick, seer_draft_uniform(s));
            else
                t = k - 1 < n_top ? pick[k] : -1;
            if (t < 0)
                break; /* the draft's support is used up */
        }
        if (t < 0 || t >= V)
            return seer_err(SEER_ERR_INTERNAL, "best-first draft picked token %d of %d", t, V);
        pick[n_pick++] = t;
        add_child(b, s, u, t, prob[t] > 0 ? log((double)prob[t]) : -1e30);
    }
    return SEER_OK;
}

/* Chooses sequence i's nodes for the next call (rows in index order into the call) and
 * returns the rows added; *n_exp: the nodes it expands, listed in exp. */
static int choose(bf_seq *b, const seer_draft_seq *s, int topk, int room, int32_t *exp, int *n_exp) {
    const int left = b->m - b->nn;
    /* at most half the budget left per call (but one node's children at least): later
     * calls see the new nodes' scores, so the tree stays close to a true best-first one */
    int want = left / 2 > topk ? left / 2 : topk, planned = 0, rows = 0;
    memset(b->in, 0, (size_t)b->nn);
    *n_exp = 0;
    while (planned < want && planned < left) {
        const int u = best_frontier(b, s->max_depth);
        if (u < 0)
            break;
        const int add = path_new(b, s->parent, u);
        if (rows + add > room)
            break;
        for (int j = u; j >= 0; j = s->parent[j])
            b->in[j] = 1;
        rows += add;
        b->done[u] = 1;
        exp[(*n_exp)++] = u;
        planned += topk;
    }
    return rows;
}

/* Frees the search state. */
static void bf_free(bf_seq *bs, int n) {
    for (int i = 0; bs && i < n; i++)
        free(bs[i].depth), free(bs[i].score), free(bs[i].done), free(bs[i].in);
    free(bs);
}

/* The rows of one forward call of the search: a sequence's are the nodes in its in[] (index
 * order), with logits where a node is expanded; the first call holds the pending tokens. */
typedef struct {
    int32_t *tok, *pos, *node, *who;
    seer_seq_id *sq;
    uint8_t *want;
    int32_t *hist;
} bf_call;

seer_status seer_draft_best_first(const seer_draft_env *env, seer_context *c, int n, seer_draft_seq *seqs,
                                  const seer_seq_id *dseq, float *const *q_of, int topk) {
    const int V = env->V, TB = c->params.n_batch_max, G = env->max_nodes;
    seer_draft_scratch *sc = env->scratch;
    if (topk < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "best-first search: %d children per node", topk);
    bf_seq *bs = calloc(n > 0 ? n : 1, sizeof *bs);
    bf_call cl = {.tok = seer_malloc_array(TB, sizeof(int32_t)), .pos = seer_malloc_array(TB, sizeof(int32_t)),
                  .node = seer_malloc_array(TB, sizeof(int32_t)), .who = seer_malloc_array(TB, sizeof(int32_t)),
                  .sq = seer_malloc_array(TB, sizeof(seer_seq_id)), .want = malloc(TB)};
    float *row = seer_malloc_array(V, sizeof(float)), *prob = seer_malloc_array(V, sizeof(float));
    int32_t *pick = seer_malloc_array(topk, sizeof(int32_t)), *exp = seer_malloc_array(TB + 1, sizeof(int32_t));
    seer_status st = bs && cl.tok && cl.pos && cl.node && cl.who && cl.sq && cl.want && row && prob && pick && exp
                         ? SEER_OK
                         : seer_err(SEER_ERR_OOM, "out of memory for a best-first search");
    for (int i = 0; i < n && st == SEER_OK; i++) {
        seqs[i].n = 0;
        seqs[i].onehot = false;
        bf_seq *b = &bs[i];
        b->m = seqs[i].max_nodes < G ? seqs[i].max_nodes : G;
        if (seqs[i].max_depth < 1)
            b->m = 0;
        const size_t m1 = (size_t)(b->m > 0 ? b->m : 1);
        b->depth = seer_malloc_array(m1, sizeof(int32_t));
        b->score = seer_malloc_array(m1, sizeof(double));
        b->done = calloc(m1, 1);
        b->in = calloc(m1, 1);
        if (!b->depth || !b->score || !b->done || !b->in)
            st = seer_err(SEER_ERR_OOM, "out of memory for a best-first search");
    }
    /* call 0 feeds the pending tokens (node -1); later calls the chosen nodes and ancestors */
    for (int call = 0; st == SEER_OK; call++) {
        int T = 0, n_exp = 0;
        for (int i = 0; i < n; i++) {
            bf_seq *b = &bs[i];
            seer_draft_seq *s = &seqs[i];
            const int L = s->n_tokens - 1;
            if (b->m == 0 || T >= TB) {
                b->m = call == 0 ? 0 : b->m; /* no room for its pending token: it drafts nothing */
                continue;
            }
            if (call == 0) {
                cl.tok[T] = s->tokens[L], cl.pos[T] = L, cl.node[T] = -1, cl.who[T] = i, cl.sq[T] = dseq[i];
                cl.want[T] = 1;
                T++;
                continue;
            }
            if (b->nn >= b->m)
                continue;
            int ne;
            const int rows = choose(b, s, topk, TB - T, exp + n_exp, &ne);
            if (!rows)
                continue;
            for (int j = 0; j < b->nn; j++) {
                if (!b->in[j])
                    continue;
                bool ex = false;
                for (int e = 0; e < ne && !ex; e++)
                    ex = exp[n_exp + e] == j;
                cl.tok[T] = s->tok[j], cl.pos[T] = L + b->depth[j], cl.node[T] = j, cl.who[T] = i;
                cl.sq[T] = dseq[i], cl.want[T] = ex;
                T++;
            }
            n_exp += ne;
        }
        if (T == 0)
            break;
        /* the tree mask: a row sees itself and its ancestors among the call's rows */
        uint8_t *mask = NULL;
        if (call > 0) {
            mask = sc->mask;
            memset(mask, 0, (size_t)T * T);
            for (int t = 0; t < T; t++)
                for (int u = 0; u < T; u++) {
                    if (cl.who[u] != cl.who[t])
                        continue;
                    const int32_t *par = seqs[cl.who[t]].parent;
                    for (int j = cl.node[t]; j >= 0; j = par[j])
                        if (j == cl.node[u]) {
                            mask[(size_t)t * T + u] = 1;
                            break;
                        }
                }
        }
        seer_batch bt = {.n_tokens = T, .token = cl.tok, .seq = cl.sq, .pos = cl.pos, .logits = cl.want, .mask = mask};
        float *Lg = NULL;
        st = seer_decode_keep(c, &bt, &Lg);
        int nf = 0;
        size_t hn = 0;
        for (int t = 0; t < T; t++)
            if (cl.want[t] && seer_sampler_penalised(seqs[cl.who[t]].sp))
                hn += (size_t)seqs[cl.who[t]].sp->repeat_last_n + G + 1;
        free(cl.hist);
        cl.hist = hn ? seer_malloc_array(hn, sizeof(int32_t)) : NULL;
        if (st == SEER_OK && hn && !cl.hist)
            st = seer_err(SEER_ERR_OOM, "out of memory for penalty histories");
        size_t ho = 0;
        for (int t = 0; t < T && st == SEER_OK; t++) {
            if (!cl.want[t])
                continue;
            seer_draft_seq *s = &seqs[cl.who[t]];
            const int u = cl.node[t];
            float *q = q_of ? q_of[cl.who[t]] : s->q;
            float *qi = s->sp->temperature > 0 ? q + (size_t)(u + 1) * V : NULL;
            sc->rows[nf] = seer_draft_node_row(s, u, Lg + (size_t)nf * V, qi, seer_draft_uniform(s),
                                               cl.hist ? cl.hist + ho : NULL);
            if (seer_sampler_penalised(s->sp))
                ho += (size_t)s->sp->repeat_last_n + G + 1;
            nf++;
        }
        if (st == SEER_OK && nf)
            st = seer_context_sample(c, sc->rows, nf, sc->ids);
        for (int t = 0, f = 0; t < T && st == SEER_OK; t++) {
            if (!cl.want[t])
                continue;
            const int i = cl.who[t], u = cl.node[t];
            bf_seq *b = &bs[i];
            seer_draft_seq *s = &seqs[i];
            float *q = q_of ? q_of[i] : s->q;
            int kids = b->m - b->nn < topk ? b->m - b->nn : topk;
            if (kids > 0)
                st = children(c, s, b, s->sp->temperature > 0 ? q + (size_t)(u + 1) * V : NULL, Lg + (size_t)f * V,
                              u, sc->ids[f], kids, V, row, prob, pick);
            f++;
        }
        /* back to the prefix and the pending token */
        for (int i = 0; i < n && st == SEER_OK; i++)
            if (seer_seq_len(c, dseq[i]) > seqs[i].n_tokens)
                st = seer_seq_rewind(c, dseq[i], seqs[i].n_tokens);
    }
    for (int i = 0; i < n && st == SEER_OK; i++)
        seqs[i].n = bs[i].nn;
    bf_free(bs, n);
    free(cl.tok), free(cl.pos), free(cl.node), free(cl.who), free(cl.sq), free(cl.want), free(cl.hist);
    free(row), free(prob), free(pick), free(exp);
    return st;
}
