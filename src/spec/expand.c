/*
 * expand.c: step drafting of a tree shape (seer_draft_expand in drafter.h), shared by the
 * drafters that draft token by token with a model (the self-drafts and the draft model):
 * one forward call per depth, children chosen from each node's draft distribution. Chains
 * are the shape whose parents are j - 1, and draft exactly as chain speculation did.
 *
 * Not here: what a drafter reads (its views, its context) or the verification.
 */
#include "spec/drafter.h"
#include "sample/sample.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

static bool argmax_only(const seer_draft_seq *s) {
    return s->sp->temperature <= 0 && !seer_sampler_penalised(s->sp) && !seer_sampler_biased(s->sp) && !s->con;
}

/* Row u + 1 of sequence i's q: its own rows or the caller's (a draft model's backend). */
static float *q_row(seer_draft_seq *seqs, float *const *q_of, int i, int u, int V) {
    float *q = q_of ? q_of[i] : seqs[i].q;
    return q + (size_t)(u + 1) * V;
}

double seer_draft_uniform(seer_draft_seq *s) {
    return s->sp->temperature > 0 ? seer_sampler_uniform(s->smp) : -1.0;
}

seer_sample_row seer_draft_node_row(const seer_draft_seq *s, int u, const float *logits, float *probs,
                                    double uni, int32_t *hist) {
    seer_sample_row r = {.logits = logits, .probs = probs, .sp = s->sp, .u = uni};
    if (s->con)
        r.mask = seer_spec_row_mask(s->con, s->tok, s->parent, u);
    if (!seer_sampler_penalised(s->sp) || !hist)
        return r; /* no penalty: the history is irrelevant */
    int dep = 0;
    for (int j = u; j >= 0; j = s->parent[j])
        dep++;
    const int rl = s->sp->repeat_last_n;
    const int from_tokens = s->n_tokens < rl ? s->n_tokens : rl;
    memcpy(hist, s->tokens + s->n_tokens - from_tokens, sizeof(int32_t) * from_tokens);
    int i = from_tokens + dep;
    for (int j = u; j >= 0; j = s->parent[j])
        hist[--i] = s->tok[j];
    r.hist = hist;
    r.n_hist = from_tokens + dep;
    return r;
}

/* The best count ids of row x [V] by value (ties: lower id) that are not in skip [n_skip]. */
void seer_draft_top_ids(const float *x, int V, const int32_t *skip, int n_skip, int count, int32_t *out) {
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
int32_t seer_draft_draw_without(const float *q, int V, const int32_t *skip, int n_skip, double u) {
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

/* The mask of a drafting call: token t sees token u where both are nodes of one sequence's
 * tree and u is t or an ancestor of t (node -1: the sequence's last real token). */
static void call_mask(uint8_t *mask, int T, const int32_t *who, const int32_t *node, const int32_t *shape) {
    memset(mask, 0, (size_t)T * T);
    for (int t = 0; t < T; t++)
        for (int u = 0; u < T; u++) {
            if (who[u] != who[t])
                continue;
            for (int j = node[t];; j = shape[j]) {
                if (j == node[u]) {
                    mask[(size_t)t * T + u] = 1;
                    break;
                }
                if (j < 0)
                    break;
            }
        }
}

/* The children of each node whose logits the call gave (want): the first child is the call's
 * pick (ids, in order of the wanted rows), its siblings are drawn on the host from the node's
 * row (Lg, or the draft distribution when sampling) without replacement. *row: a [V] host
 * buffer made on first use, kept by the caller. */
static seer_status place_children(seer_context *c, seer_draft_seq *seqs, float *const *q_of, const int *m,
                                  const int32_t *shape, int T, const uint8_t *want, const int32_t *who,
                                  const int32_t *node, const int32_t *ids, const float *Lg, int V,
                                  int32_t *pick, float **row_p) {
    seer_status st = SEER_OK;
    float *row = *row_p;
    for (int t = 0, f = 0; t < T && st == SEER_OK; t++) {
        if (!want[t])
            continue;
        const int i = who[t], u = node[t];
        seer_draft_seq *s = &seqs[i];
        int32_t *dr = s->tok, *pr = s->parent;
        int kids = 0;
        for (int x = u + 1; x < m[i]; x++)
            if (shape[x] == u) {
                pr[x] = u;
                if (kids++ == 0)
                    dr[x] = ids[f];
            }
        if (kids > 1) {
            if (!row)
                row = seer_malloc_array(V, sizeof(float));
            const bool sampled = s->sp->temperature > 0;
            const float *src = sampled ? q_row(seqs, q_of, i, u, V) : Lg + (size_t)f * V;
            seer_backend *be = c->be;
            if (!row)
                st = seer_err(SEER_ERR_OOM, "out of memory for drafting");
            else
                st = be->ops->download(be, row, src, sizeof(float) * V);
            int n_pick = 0;
            for (int x = u + 1; x < m[i] && st == SEER_OK; x++) {
                if (shape[x] != u)
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
                    t2 = seer_draft_draw_without(row, V, pick, n_pick, seer_draft_uniform(s));
                else
                    seer_draft_top_ids(row, V, pick, n_pick, 1, &t2);
                dr[x] = t2 < 0 ? pick[0] : t2;
                if (t2 >= 0)
                    pick[n_pick++] = t2;
            }
        }
        f++;
    }
    *row_p = row;
    return st;
}

seer_status seer_draft_expand(const seer_draft_env *env, seer_context *c, int n, seer_draft_seq *seqs,
                              const seer_seq_id *dseq, float *const *q_of, uint8_t *cap0, float *qbuf,
                              int *kept, seer_draft_reads reads) {
    const int G = env->max_nodes, V = env->V, TB = c->params.n_batch_max;
    const int32_t *shape = env->shape, *sdepth = env->depth;
    seer_draft_scratch *sc = env->scratch;
    int m[n], branch[n], maxd = 0;
    for (int i = 0; i < n; i++) {
        /* the shape's first nodes within the node and depth limits (breadth-first: a prefix) */
        int k = 0;
        while (k < seqs[i].max_nodes && k < G && sdepth[k] <= seqs[i].max_depth)
            k++;
        m[i] = k;
        seqs[i].n = 0;
        branch[i] = 1 << 30; /* first depth with two nodes */
        for (int j = 1; j < k; j++)
            if (sdepth[j] == sdepth[j - 1] && sdepth[j] < branch[i])
                branch[i] = sdepth[j];
        if (k)
            maxd = sdepth[k - 1] > maxd ? sdepth[k - 1] : maxd;
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
    int32_t *hist = NULL;
    seer_status st = tok && sq && pos && who && node && pick && want && cap
                         ? SEER_OK
                         : seer_err(SEER_ERR_OOM, "out of memory for drafting");
    for (int d = 1; d <= maxd && st == SEER_OK; d++) {
        /* the sequences in as few calls as the batch limit allows (one unless the trees of
         * many sequences are fed again below their first branching depth) */
        bool any = false;
        for (int i0 = 0, i = 0; i0 < n && st == SEER_OK; i0 = i) {
            int T = 0, n_cap = 0;
            bool masked = false;
            for (i = i0; i < n && st == SEER_OK; i++) {
                if (m[i] == 0 || sdepth[m[i] - 1] < d)
                    continue;
                const seer_draft_seq *s = &seqs[i];
                const int L = s->n_tokens - 1;
                const int32_t *dr = s->tok;
                /* nodes fed by this call: the one at depth d - 1 while the tree above is a
                 * chain, else everything from the first branching depth down to d - 1 */
                int lo = d - 1 < branch[i] ? d - 1 : branch[i], rows = 0;
                for (int j = -1; j < m[i]; j++) {
                    const int dj = j < 0 ? 0 : sdepth[j];
                    rows += dj >= lo && dj <= d - 1;
                }
                if (T + rows > TB) {
                    if (T == 0 || d == 1) /* the first call captures queries: it is never cut */
                        st = seer_err(SEER_ERR_INVALID_ARG, "draft trees do not fit in the batch limit %d", TB);
                    break;
                }
                if (lo < d - 1)
                    st = seer_seq_rewind(c, dseq[i], L + lo);
                masked |= d - 1 >= branch[i]; /* siblings in the call */
                for (int j = -1; j < m[i] && st == SEER_OK; j++) {
                    const int dj = j < 0 ? 0 : sdepth[j];
                    if (dj < lo || dj > d - 1)
                        continue;
                    tok[T] = j < 0 ? s->tokens[L] : dr[j];
                    sq[T] = dseq[i];
                    pos[T] = L + dj;
                    node[T] = j;
                    who[T] = i;
                    /* logits where the node has children in this sequence's tree */
                    bool parent = false;
                    for (int x = j + 1; x < m[i] && !parent; x++)
                        parent = shape[x] == j;
                    want[T] = dj == d - 1 && parent;
                    cap[T] = cap0 && d == 1 && cap0[i];
                    n_cap += cap[T];
                    T++;
                }
            }
            if (st != SEER_OK || T == 0)
                break;
            any = true;
            uint8_t *mask = masked ? sc->mask : NULL;
            if (masked)
                call_mask(mask, T, who, node, shape);
            seer_batch b = {.n_tokens = T, .token = tok, .seq = sq, .pos = pos, .logits = want, .mask = mask,
                            .capture = n_cap ? cap : NULL, .queries = qbuf, .kv_quant = reads.kv_quant,
                            .draft_weights = reads.draft_weights, .sparse_ffn = env->sparse_ffn && c == env->ctx};
            bool amax = true, branching = false;
            int nf = 0;
            for (int t = 0; t < T; t++) {
                if (!want[t])
                    continue;
                nf++;
                amax &= argmax_only(&seqs[who[t]]);
                int kids = 0;
                for (int x = node[t] + 1; x < m[who[t]]; x++)
                    kids += shape[x] == node[t];
                branching |= kids > 1;
            }
            float *Lg = NULL;
            if (amax && !branching) {
                st = seer_decode_argmax(c, &b, sc->ids);
            } else {
                st = seer_decode_keep(c, &b, &Lg);
                size_t hn = 0;
                for (int t = 0; t < T; t++)
                    if (want[t] && seer_sampler_penalised(seqs[who[t]].sp))
                        hn += (size_t)seqs[who[t]].sp->repeat_last_n + G + 1;
                free(hist);
                hist = hn ? seer_malloc_array(hn, sizeof(int32_t)) : NULL;
                if (st == SEER_OK && hn && !hist)
                    st = seer_err(SEER_ERR_OOM, "out of memory for penalty histories");
                size_t ho = 0;
                for (int t = 0, f = 0; t < T && st == SEER_OK; t++) {
                    if (!want[t])
                        continue;
                    const int i = who[t];
                    seer_draft_seq *s = &seqs[i];
                    float *qi = s->sp->temperature > 0 ? q_row(seqs, q_of, i, node[t], V) : NULL;
                    sc->rows[f] = seer_draft_node_row(s, node[t], Lg + (size_t)f * V, qi, seer_draft_uniform(s),
                                                      hist ? hist + ho : NULL);
                    if (seer_sampler_penalised(s->sp))
                        ho += (size_t)s->sp->repeat_last_n + G + 1;
                    f++;
                }
                if (st == SEER_OK)
                    st = seer_context_sample(c, sc->rows, nf, sc->ids);
            }
            /* children: the first from the call, the others (siblings) on the host */
            if (st == SEER_OK)
                st = place_children(c, seqs, q_of, m, shape, T, want, who, node, sc->ids, Lg, V, pick, &row);
        }
        if (!any)
            break;
        for (int i = 0; i < n && st == SEER_OK; i++) {
            int k = 0;
            while (k < m[i] && sdepth[k] <= d)
                k++;
            seqs[i].n = k;
        }
    }
    for (int i = 0; i < n && kept; i++)
        kept[i] = branch[i] >= (1 << 30) && seqs[i].n > 0 ? seqs[i].n - 1 : 0;
    free(tok), free(sq), free(pos), free(who), free(node), free(pick), free(want), free(cap), free(row);
    free(hist);
    return st;
}

seer_status seer_draft_leave(seer_context *c, const seer_draft_seq *s) {
    seer_seq_clear_view(c, s->seq);
    return seer_seq_rewind(c, s->seq, s->n_tokens - 1);
}
