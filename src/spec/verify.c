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
#include "spec/spec.h"
#include "util/error.h"

#include <string.h>

void seer_gen_stage_drafts(seer_gen_seq *s, const int32_t *draft, int nd) {
    if (nd > 0)
        memcpy(s->tokens + s->n_tokens, draft, sizeof(int32_t) * nd);
}

seer_sample_row seer_gen_row(const seer_gen_seq *s, int j, const float *logits, float *probs,
                             double u) {
    seer_sample_row r = {.logits = logits, .probs = probs, .sp = &s->sp, .hist = s->tokens,
                         .n_hist = s->n_tokens + j, .u = u};
    if (s->sp.repeat_penalty == 1.f || s->sp.repeat_last_n <= 0)
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

seer_status seer_gen_draft_step(seer_gen *g, seer_context *c, const seer_batch *b, const int *hs,
                                const int *who, int j, int32_t *draft, float *q) {
    const int T = b->n_tokens, G = g->G, V = g->V;
    bool amax = true;
    for (int t = 0; t < T; t++)
        amax &= seer_gen_argmax_only(&g->seqs[hs[who[t]]]);
    if (amax) {
        SEER_TRY(seer_decode_argmax(c, b, g->ids));
    } else {
        float *L;
        SEER_TRY(seer_decode_keep(c, b, &L));
        for (int t = 0; t < T; t++) {
            const int i = who[t];
            seer_gen_seq *s = &g->seqs[hs[i]];
            float *qi = s->sp.temperature > 0 ? q + ((size_t)i * G + j) * V : NULL;
            g->rows[t] = seer_gen_row(s, j, L + (size_t)t * V, qi, seer_gen_draw(s));
        }
        SEER_TRY(seer_context_sample(c, g->rows, T, g->ids));
    }
    for (int t = 0; t < T; t++) {
        const int i = who[t];
        seer_gen_seq *s = &g->seqs[hs[i]];
        draft[(size_t)i * G + j] = g->ids[t];
        s->tokens[s->n_tokens + j] = g->ids[t];
    }
    return SEER_OK;
}

seer_status seer_gen_first_token(seer_gen *g, seer_gen_seq *s, float *logits, int32_t *next) {
    g->rows[0] = seer_gen_row(s, 0, logits, NULL, seer_gen_draw(s));
    return seer_context_sample(g->ctx, g->rows, 1, next);
}

int seer_verify_wrong_rule_for_tests;

int seer_verify_chain_ids(seer_gen *g, seer_gen_seq *s, const int32_t *amax, const int32_t *draft,
                          int nd, int32_t *next) {
    int i = 0;
    if (g->spec.synthetic_accept > 0) {
        while (i < nd && seer_sampler_uniform(s->smp) < g->spec.synthetic_accept)
            i++;
    } else {
        while (i < nd && draft[i] == amax[i])
            i++;
    }
    *next = amax[i];
    return i;
}

seer_status seer_verify_group(seer_gen *g, int k0, int k1, const int *row0, float *logits) {
    const int V = g->V, G = g->G, Gs = G ? G : 1;
    int nr = 0, nc = 0, nu = 0;
    for (int k = k0; k < k1; k++) {
        seer_gen_seq *s = &g->seqs[g->hs[k]];
        const int nd = g->nd[k];
        const int32_t *d = g->draft + (size_t)k * Gs;
        float *Lk = logits + (size_t)row0[k] * V;
        seer_gen_stage_drafts(s, d, nd);
        g->first[k] = nr;
        g->chain[k] = -1;
        if (!(s->sp.temperature > 0)) { /* greedy: the argmax of every position */
            for (int j = 0; j <= nd; j++)
                g->rows[nr++] = seer_gen_row(s, j, Lk + (size_t)j * V, NULL, -1);
        } else if (g->spec.synthetic_accept > 0) {
            /* Timing runs on random weights, where real acceptance means nothing: the ragged
             * batch machinery runs as it would at acceptance rate alpha. */
            int i = 0;
            while (i < nd && seer_sampler_uniform(s->smp) < g->spec.synthetic_accept)
                i++;
            g->acc[k] = i;
            g->rows[nr++] = seer_gen_row(s, i, Lk + (size_t)i * V, NULL, seer_gen_draw(s));
        } else if (nd == 0) { /* nothing to test: a draw from p_0 */
            g->acc[k] = 0;
            g->rows[nr++] = seer_gen_row(s, 0, Lk, NULL, seer_gen_draw(s));
        } else {
            /* p_0 .. p_nd in place of the logits, then the rule over them */
            for (int j = 0; j <= nd; j++)
                g->rows[nr++] = seer_gen_row(s, j, Lk + (size_t)j * V, Lk + (size_t)j * V, -1);
            seer_rng *rng = seer_sampler_rng(s->smp);
            g->rng0[k - k0] = *rng;
            double *u = g->u + nu;
            for (int j = 0; j <= nd; j++)
                u[j] = seer_sampler_uniform(s->smp);
            nu += nd + 1;
            g->chains[nc] = (seer_accept_chain){
                .nd = nd, .draft = d, .p = Lk, .u = u,
                .q = g->onehot[k] ? NULL : g->qd + (size_t)k * Gs * V,
                .resample_from_p = seer_verify_wrong_rule_for_tests != 0};
            g->chain[k] = nc++;
        }
    }
    SEER_TRY(seer_context_sample(g->ctx, g->rows, nr, g->ids));
    if (nc)
        SEER_TRY(seer_context_accept(g->ctx, g->chains, nc, g->c_acc, g->c_next));
    for (int k = k0; k < k1; k++) {
        seer_gen_seq *s = &g->seqs[g->hs[k]];
        const int nd = g->nd[k];
        if (!(s->sp.temperature > 0)) {
            g->acc[k] = seer_verify_chain_ids(g, s, g->ids + g->first[k], g->draft + (size_t)k * Gs,
                                              nd, &g->next[k]);
        } else if (g->chain[k] < 0) {
            g->next[k] = g->ids[g->first[k]];
        } else {
            const int c = g->chain[k], a = g->c_acc[c];
            g->acc[k] = a;
            g->next[k] = g->c_next[c];
            /* A sequential rule draws a + 1 test uniforms and one for the emitted token (nd + 1
             * when all pass); give back the rest. */
            const int used = a < nd ? a + 2 : nd + 1;
            seer_rng *rng = seer_sampler_rng(s->smp);
            *rng = g->rng0[k - k0];
            for (int j = 0; j < used; j++)
                (void)seer_sampler_uniform(s->smp);
        }
    }
    return SEER_OK;
}
