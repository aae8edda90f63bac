/*
 * verify.c: the acceptance rule of speculative decoding for one chain of draft tokens.
 *
 * Greedy (temperature 0): accept while the draft token is the target's argmax, then emit the
 * argmax at the first mismatch (or the bonus position): bit-identical to plain greedy.
 * Sampling (Leviathan et al.; Chen et al.): accept x_i with probability min(1, p_i(x)/q_i(x));
 * at the first rejection emit from norm(max(p_i - q_i, 0)); if all are accepted emit from
 * p_{G+1}. p and q are both the sequence's sampler transform (penalties, temperature, top-k,
 * top-p, min-p) of the target's and the draft's logits with the same history. A one-hot q
 * (n-gram, greedy drafts) makes the residual p with x removed.
 */
#include "spec/spec.h"

#include <string.h>

void seer_gen_probs(seer_gen *g, const seer_gen_seq *s, const int32_t *hist, int n_hist,
                    const float *logits, float *probs) {
    seer_sampler_probs_with_history(&s->sp, hist, n_hist, logits, probs, g->V, g->sscratch);
}

/* History for the penalty at draft position i: the sequence's last tokens, then the drafts
 * before i. Returns its length; the caller appends draft tokens after it. */
static int history(seer_gen *g, const seer_gen_seq *s) {
    int k = s->sp.repeat_last_n < s->n_tokens ? s->sp.repeat_last_n : s->n_tokens;
    if (s->sp.repeat_penalty == 1.f)
        k = 0; /* no penalty: the history is irrelevant */
    memcpy(g->hist, s->tokens + s->n_tokens - k, sizeof(int32_t) * k);
    return k;
}

int32_t seer_gen_draft_token(seer_gen *g, seer_gen_seq *s, const int32_t *drafts, int j,
                             const float *logits, float *q) {
    int nh = history(g, s);
    memcpy(g->hist + nh, drafts, sizeof(int32_t) * j);
    seer_gen_probs(g, s, g->hist, nh + j, logits, q);
    return s->sp.temperature <= 0 ? seer_argmax(q, g->V)
                                  : seer_sample_from_probs(q, g->V, seer_sampler_uniform(s->smp));
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

int seer_verify_chain(seer_gen *g, seer_gen_seq *s, const float *p_logits, const int32_t *draft,
                      int nd, const float *q, bool onehot, int32_t *next) {
    const int V = g->V;
    int nh = history(g, s);
    for (int i = 0; i < nd; i++)
        g->hist[nh + i] = draft[i];
    const bool greedy = s->sp.temperature <= 0;
    if (g->spec.synthetic_accept > 0) {
        /* Timing runs on random weights, where real acceptance means nothing: the ragged
         * batch machinery runs as it would at acceptance rate alpha. */
        int i = 0;
        while (i < nd && seer_sampler_uniform(s->smp) < g->spec.synthetic_accept)
            i++;
        seer_gen_probs(g, s, g->hist, nh + i, p_logits + (size_t)i * V, g->p);
        *next = greedy ? seer_argmax(g->p, V) : seer_sample_from_probs(g->p, V, seer_sampler_uniform(s->smp));
        return i;
    }
    for (int i = 0; i <= nd; i++) {
        seer_gen_probs(g, s, g->hist, nh + i, p_logits + (size_t)i * V, g->p);
        if (greedy) {
            int32_t a = seer_argmax(g->p, V);
            if (i < nd && draft[i] == a)
                continue;
            *next = a;
            return i;
        }
        if (i == nd) {
            *next = seer_sample_from_probs(g->p, V, seer_sampler_uniform(s->smp));
            return nd;
        }
        const float *qi = q + (size_t)i * V;
        if (onehot) {
            seer_probs_one_hot(g->tmp, V, draft[i]);
            qi = g->tmp;
        }
        double r = seer_sampler_uniform(s->smp);
        float px = g->p[draft[i]], qx = qi[draft[i]];
        if (qx > 0 && r * qx < px)
            continue;
        /* Rejected: the residual. seer_sample_residual needs its own scratch, distinct
         * from qi (which may be g->tmp). */
        float *scratch = onehot ? g->tmp + V : g->tmp;
        if (seer_verify_wrong_rule_for_tests) {
            *next = seer_sample_from_probs(g->p, V, seer_sampler_uniform(s->smp));
            return i;
        }
        *next = seer_sample_residual(g->p, qi, V, seer_sampler_uniform(s->smp), scratch);
        return i;
    }
    return nd; /* not reached */
}
