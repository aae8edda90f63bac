/*
 * gen_seq.c: what a generator's sequence may ask for beyond its sampler (seer_gen_add_ext):
 * structured output (its own copy of a constraint's state) and the log-probabilities of its
 * tokens, kept per sequence for seer_gen_logprobs. The rounds themselves are the scheduler's
 * (round.c masks every row by the constraint, logprobs.c computes the values); this file
 * checks the parameters, takes the first token's from the prefill's last row and keeps the
 * values a round emits.
 *
 * Not for: the round (round.c) or requests (src/sched/, which keep theirs in the request).
 */
#include "sample/logprob.h"
#include "spec/spec.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

seer_gen_seq_params seer_gen_seq_default_params(void) {
    return (seer_gen_seq_params){.logprobs = false, .top_logprobs = 0, .constraint = NULL};
}

seer_status seer_gen_seq_check(const seer_gen *g, const seer_gen_seq_params *xp) {
    if (xp->logprobs && (xp->top_logprobs < 0 || xp->top_logprobs > SEER_TOP_LOGPROBS_MAX))
        return seer_err(SEER_ERR_INVALID_ARG, "top_logprobs %d must be 0..%d", xp->top_logprobs,
                        SEER_TOP_LOGPROBS_MAX);
    if (xp->constraint && seer_constraint_n_vocab(xp->constraint) != g->V)
        return seer_err(SEER_ERR_INVALID_ARG, "the constraint was made for a vocabulary of %d, not %d",
                        seer_constraint_n_vocab(xp->constraint), g->V);
    return SEER_OK;
}

seer_status seer_gen_seq_setup(seer_gen_seq *s, const seer_gen_seq_params *xp) {
    s->logprobs = xp->logprobs;
    s->top_logprobs = xp->logprobs ? xp->top_logprobs : 0;
    if (!xp->constraint)
        return SEER_OK;
    SEER_TRY(seer_constraint_clone(xp->constraint, &s->con));
    s->own_con = true;
    return SEER_OK;
}

void seer_gen_seq_drop(seer_gen_seq *s) {
    if (s->own_con)
        seer_constraint_free(s->con);
    s->con = NULL;
    s->own_con = false;
    free(s->lp);
    s->lp = NULL;
    s->n_lp = s->cap_lp = 0;
}

seer_status seer_gen_seq_keep_lp(seer_gen_seq *s, const seer_token_logprob *lp) {
    if (!s->logprobs || !lp)
        return SEER_OK;
    if (s->n_lp == s->cap_lp) {
        const int cap = s->cap_lp ? 2 * s->cap_lp : 64;
        seer_token_logprob *p = realloc(s->lp, sizeof *p * cap);
        if (!p)
            return seer_err(SEER_ERR_OOM, "out of memory for log-probabilities");
        s->lp = p;
        s->cap_lp = cap;
    }
    s->lp[s->n_lp++] = *lp;
    return SEER_OK;
}

/* The first token comes from the prefill's last row as a round without drafts would draw it
 * (masked by the constraint); with log-probabilities the draw writes a row of its own, so
 * that the logits stay for logprob_rows. */
seer_status seer_gen_seq_first(seer_gen *g, seer_gen_seq *s, float *logits, int32_t *next) {
    if (!s->logprobs)
        return seer_gen_first_token(g, s, logits, next);
    seer_backend *be = g->model->be;
    float *probs = NULL;
    SEER_TRY(be->ops->alloc(be, (size_t)g->V * sizeof(float), (void **)&probs));
    g->rows[0] = seer_gen_row(s, 0, logits, probs, seer_gen_draw(s));
    seer_status st = seer_context_sample(g->ctx, g->rows, 1, next);
    be->ops->dealloc(be, probs);
    seer_token_logprob o = {.n_top = s->top_logprobs};
    if (st == SEER_OK) {
        const seer_logprob_row row = {.logits = logits, .token = *next};
        st = seer_context_logprobs(g->ctx, &row, 1, s->top_logprobs, &o.logprob, o.top_id, o.top_logprob);
    }
    return st == SEER_OK ? seer_gen_seq_keep_lp(s, &o) : st;
}

int seer_gen_logprobs(const seer_gen *g, int h, const seer_token_logprob **out) {
    if (out)
        *out = NULL;
    if (!g || !out || h < 0 || h >= g->n_seqs || !g->seqs[h].tokens)
        return -1;
    const seer_gen_seq *s = &g->seqs[h];
    if (!s->logprobs)
        return 0;
    *out = s->lp;
    return s->n_lp;
}
