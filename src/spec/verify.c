/*
 * verify.c: the acceptance rule of speculative decoding, and the draws of draft tokens, as
 * requests to the backend's sampling ops (sample_rows, accept_chains): logits and
 * probability vectors stay where the model computed them and only ids, per-row parameters
 * and uniforms cross to and from the host. The CPU backend runs the host sampler
 * (src/sample/) itself, so there is one path whatever the backend.
 *
 * Greedy (temperature 0): accept while the draft token is the target's argmax, then emit the
 * argmax at the first mismatch (or the bonus position): bit-identical to plain greedy.
 * Sampling (Leviathan et al.; Chen et al.): accept x_i with probability min(1, p_i(x)/q_i(x));
 * at the first rejection emit from norm(max(p_i - q_i, 0)); if all are accepted emit from
 * p_{G+1}. p and q are both the sequence's sampler transform (penalties, temperature, top-k,
 * top-p, min-p) of the target's and the draft's logits with the same history. A one-hot q
 * (n-gram, greedy drafts) makes the residual p with x removed.
 *
 * Uniforms come from the sequence's own generator in the order a sequential rule draws them:
 * a chain's are drawn ahead of the device call and those it did not use are given back, so
 * the stream does not depend on the backend.
 */
#include "constrain/grammar.h"
#include "spec/spec.h"
#include "util/error.h"

#include <string.h>

/* Test builds only (SEER_TEST_HOOKS, the tests that link this file into themselves): when
 * nonzero, a rejected draft token is replaced by a sample from p instead of the residual,
 * which is NOT exact; the distribution tests use it to show their power. The library itself
 * always applies the exact rule. */
#ifdef SEER_TEST_HOOKS
int seer_verify_wrong_rule_for_tests;
#define WRONG_RULE (seer_verify_wrong_rule_for_tests != 0)
/* nonzero: the target's rows lose their constraint mask (the drafter's keep theirs), which is
 * NOT exact: test_spec_constrain's distribution test must catch it */
int seer_constrain_wrong_rule_for_tests;
#define WRONG_MASK (seer_constrain_wrong_rule_for_tests != 0)
#else
#define WRONG_RULE false
#define WRONG_MASK false
#endif

seer_sample_row seer_gen_row(const seer_gen_seq *s, int j, const float *logits, float *probs,
                             double u) {
    seer_sample_row r = {.logits = logits, .probs = probs, .sp = &s->sp, .hist = s->tokens,
                         .n_hist = s->n_tokens + j, .u = u};
    if (s->con && !WRONG_MASK) /* the j staged tokens after the sequence's */
        r.mask = seer_constraint_mask_after(s->con, s->tokens + s->n_tokens, j);
    if (!seer_sampler_penalised(&s->sp))
        r.hist = NULL, r.n_hist = 0; /* no penalty: the history is irrelevant */
    return r;
}

double seer_gen_draw(seer_gen_seq *s) {
    return s->sp.temperature > 0 ? seer_sampler_uniform(s->smp) : -1.0;
}

seer_status seer_gen_need_q(seer_gen *g) {
    if (g->qd || g->G == 0)
        return SEER_OK;
    seer_backend *be = g->model->be;
    const size_t n = (size_t)g->ctx->params.n_seq_max * g->G * g->V;
    return be->ops->alloc(be, n * sizeof(float), (void **)&g->qd);
}

seer_status seer_gen_first_token(seer_gen *g, seer_gen_seq *s, float *logits, int32_t *next) {
    g->rows[0] = seer_gen_row(s, 0, logits, NULL, seer_gen_draw(s));
    return seer_context_sample(g->ctx, g->rows, 1, next);
}



seer_status seer_verify_group(seer_gen *g, int k0, int k1, const int *row0, float *logits) {
    const int V = g->V, G = g->G;
    int nr = 0, nc = 0, nt = 0, nu = 0, rows = 0;
    for (int k = k0; k < k1; k++)
        rows += g->nd[k] + 1;
    seer_gen_hist_reset(g);
    SEER_TRY(seer_gen_hist_reserve(g, rows));
    for (int k = k0; k < k1; k++) {
        seer_gen_seq *s = &g->seqs[g->hs[k]];
        const int nd = g->nd[k];
        const int32_t *d = g->draft + (size_t)k * G;
        int32_t *path = g->path + (size_t)k * G;
        float *Lk = logits + (size_t)row0[k] * V;
        g->first[k] = nr;
        g->chain[k] = -1;
        if (!(s->sp.temperature > 0)) { /* greedy: the argmax of every node */
            for (int j = 0; j <= nd; j++)
                g->rows[nr++] = seer_gen_node_row(g, k, s, j - 1, Lk + (size_t)j * V, NULL, -1);
        } else if (seer_gen_synthetic(g)) {
            /* Timing runs on random weights, where real acceptance means nothing: the ragged
             * batch machinery runs as it would at acceptance rate alpha (first children) */
            int node;
            g->acc[k] = seer_gen_synthetic_path(g, k, path, &node);
            g->rows[nr++] = seer_gen_node_row(g, k, s, node, Lk + (size_t)(node + 1) * V, NULL, seer_gen_draw(s));
        } else if (nd == 0) { /* nothing to test: a draw from p_0 */
            g->acc[k] = 0;
            g->rows[nr++] = seer_gen_node_row(g, k, s, -1, Lk, NULL, seer_gen_draw(s));
        } else {
            /* p of every node in place of the logits (apart from them when the entry wants
             * log-probabilities: logprobs.c reads the logits after), then the rule over them */
            float *Pk = seer_gen_lp_probs(g, k, Lk);
            for (int j = 0; j <= nd; j++)
                g->rows[nr++] = seer_gen_node_row(g, k, s, j - 1, Lk + (size_t)j * V, Pk + (size_t)j * V, -1);
            seer_rng *rng = seer_sampler_rng(s->smp);
            g->rng0[k - k0] = *rng;
            double *u = g->u + nu;
            for (int j = 0; j <= nd; j++)
                u[j] = seer_sampler_uniform(s->smp);
            nu += nd + 1;
            const float *q = g->onehot[k] ? NULL : g->qd + (size_t)k * G * V;
            if (seer_gen_is_chain(g, k)) {
                g->chains[nc] = (seer_accept_chain){
                    .nd = nd, .draft = d, .p = Pk, .u = u, .q = q,
                    .resample_from_p = WRONG_RULE};
                g->chain[k] = nc++;
            } else {
                g->trees[nt] = (seer_accept_tree){
                    .n = nd, .tok = d, .parent = g->par + (size_t)k * G, .p = Pk, .q = q, .u = u,
                    .resample_from_p = WRONG_RULE};
                g->chain[k] = (1 << 20) + nt++;
            }
        }
    }
    for (int i = 0; WRONG_MASK && i < nr; i++)
        g->rows[i].mask = NULL;
    SEER_TRY(seer_context_sample(g->ctx, g->rows, nr, g->ids));
    if (nc)
        SEER_TRY(seer_context_accept(g->ctx, g->chains, nc, g->c_acc, g->c_next));
    int32_t *t_acc = g->c_acc + nc, *t_next = g->c_next + nc; /* after the chains' results */
    if (nt)
        SEER_TRY(seer_context_accept_trees(g->ctx, g->trees, nt, G, t_acc, g->tpath, t_next, g->t_used));
    for (int k = k0; k < k1; k++) {
        seer_gen_seq *s = &g->seqs[g->hs[k]];
        const int nd = g->nd[k];
        int32_t *path = g->path + (size_t)k * G;
        if (!(s->sp.temperature > 0)) {
            g->acc[k] = seer_verify_tree_ids(g, k, s, g->ids + g->first[k], &g->next[k]);
            continue;
        }
        if (g->chain[k] < 0) {
            g->next[k] = g->ids[g->first[k]];
            continue;
        }
        int used;
        if (g->chain[k] < (1 << 20)) {
            const int c = g->chain[k], a = g->c_acc[c];
            g->acc[k] = a;
            g->next[k] = g->c_next[c];
            for (int j = 0; j < a; j++)
                path[j] = j;
            /* A sequential rule draws a + 1 test uniforms and one for the emitted token (nd + 1
             * when all pass); give back the rest. */
            used = a < nd ? a + 2 : nd + 1;
        } else {
            const int t = g->chain[k] - (1 << 20);
            g->acc[k] = t_acc[t];
            g->next[k] = t_next[t];
            memcpy(path, g->tpath + (size_t)t * G, sizeof(int32_t) * t_acc[t]);
            used = g->t_used[t];
        }
        seer_rng *rng = seer_sampler_rng(s->smp);
        *rng = g->rng0[k - k0];
        for (int j = 0; j < used; j++)
            (void)seer_sampler_uniform(s->smp);
    }
    return SEER_OK;
}
