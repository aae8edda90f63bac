/*
 * prompt_lp.c: the log-probabilities of a request's prompt tokens
 * (seer_request_params.prompt_logprobs, OpenAI's echo with logprobs): the prefill's call keeps
 * the logits of every prompt row (row j gives token j + 1's), and one backend call
 * (logprob_rows, the one the generated tokens' go through) turns them into the raw
 * log-softmax at the next prompt token and the most likely tokens there.
 *
 * Not for: the generated tokens' (spec/logprobs.c) or laying out the call (sched.c).
 */
#include "sched/sched.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

void seer_prompt_lp_free(seer_prompt_lp *p) {
    free(p->rows), free(p->req), free(p->pos), free(p->out), free(p->lp), free(p->top_lp), free(p->top_id);
    memset(p, 0, sizeof *p);
}

seer_status seer_prompt_lp_note(seer_prompt_lp *p, int cap, seer_request *r, int j, int out) {
    if (!p->rows) {
        const size_t K = SEER_TOP_LOGPROBS_MAX;
        p->rows = seer_malloc_array(cap, sizeof *p->rows);
        p->req = seer_malloc_array(cap, sizeof *p->req);
        p->pos = seer_malloc_array(cap, sizeof *p->pos);
        p->out = seer_malloc_array(cap, sizeof *p->out);
        p->lp = seer_malloc_array(cap, sizeof *p->lp);
        p->top_lp = seer_malloc_array((size_t)cap * K, sizeof *p->top_lp);
        p->top_id = seer_malloc_array((size_t)cap * K, sizeof *p->top_id);
        p->cap = cap;
        if (!p->rows || !p->req || !p->pos || !p->out || !p->lp || !p->top_lp || !p->top_id) {
            seer_prompt_lp_free(p);
            return seer_err(SEER_ERR_OOM, "out of memory for the prompt's log-probabilities");
        }
    }
    if (p->n >= p->cap)
        return seer_err(SEER_ERR_INTERNAL, "more prompt rows than the call holds");
    p->req[p->n] = r;
    p->pos[p->n] = j;
    p->out[p->n++] = out;
    return SEER_OK;
}

seer_status seer_prompt_lp_compute(seer_prompt_lp *p, seer_context *c, const float *L, int V) {
    const int n = p->n;
    p->n = 0;
    if (n == 0)
        return SEER_OK;
    if (!L)
        return seer_err(SEER_ERR_INTERNAL, "prompt log-probabilities asked of an argmax-only call");
    int k = 0;
    for (int i = 0; i < n; i++) {
        const seer_request *r = p->req[i];
        p->rows[i] = (seer_logprob_row){.logits = L + (size_t)p->out[i] * V, .token = r->tokens[p->pos[i] + 1]};
        k = r->p.top_logprobs > k ? r->p.top_logprobs : k;
    }
    SEER_TRY(seer_context_logprobs(c, p->rows, n, k, p->lp, p->top_id, p->top_lp));
    for (int i = 0; i < n; i++) {
        seer_request *r = p->req[i];
        const int t = r->p.top_logprobs;
        seer_token_logprob *o = &r->plp[p->pos[i] + 1];
        memset(o, 0, sizeof *o);
        o->logprob = p->lp[i];
        o->n_top = t;
        memcpy(o->top_id, p->top_id + (size_t)i * k, sizeof(int32_t) * t);
        memcpy(o->top_logprob, p->top_lp + (size_t)i * k, sizeof(float) * t);
    }
    return SEER_OK;
}
