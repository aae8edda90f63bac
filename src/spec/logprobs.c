/*
 * logprobs.c: the log-probability of every token a round emits, and the most likely tokens
 * at its position, under the target's raw distribution (the log-softmax of the target's
 * logits at that row: what OpenAI and vLLM report by default), whether the token was
 * accepted from a draft or drawn by the verifier. One backend call (logprob_rows) per
 * verification for the entries that want them; only ids and a few floats per emitted token
 * reach the host.
 *
 * The emitted token j of entry k was chosen at the row of its parent on the accepted path:
 * the pending token's row for j = 0, node path[j - 1]'s row after that. Those rows must still
 * hold logits after verification: greedy rows are only read, and the sampled rows of an
 * entry that wants logprobs get their probabilities in rows of their own (g->lpp) instead of
 * in place.
 *
 * Not for: the acceptance rule (verify.c) or keeping the results (the request, src/sched/).
 */
#include "spec/spec.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

void seer_gen_lp_free(seer_gen *g) {
    if (g->lpp)
        g->model->be->ops->dealloc(g->model->be, g->lpp);
    g->lpp = NULL;
    free(g->lprow), free(g->lpk), free(g->lpr), free(g->lpv), free(g->lpt), free(g->lpi);
}

static bool wants_sampled_rows(const seer_gen *g, int k, const seer_gen_seq *s) {
    return s->logprobs && s->sp.temperature > 0 && g->nd[k] > 0;
}

seer_status seer_gen_lp_prepare(seer_gen *g, int k0, int k1) {
    bool any = false;
    int rows = 0;
    for (int k = k0; k < k1; k++) {
        const seer_gen_seq *s = &g->seqs[g->hs[k]];
        any |= s->logprobs;
        if (wants_sampled_rows(g, k, s))
            rows += g->nd[k] + 1;
    }
    if (!any)
        return SEER_OK;
    const size_t B = (size_t)g->ctx->params.n_seq_max, R = B * (g->G + 1);
    if (!g->lprow) {
        g->lprow = malloc(B * sizeof *g->lprow);
        g->lpk = seer_malloc_array(R, sizeof *g->lpk);
        g->lpr = seer_malloc_array(R, sizeof *g->lpr);
        g->lpv = seer_malloc_array(R, sizeof *g->lpv);
        g->lpt = seer_malloc_array(R * SEER_LOGPROB_TOP_MAX, sizeof *g->lpt);
        g->lpi = seer_malloc_array(R * SEER_LOGPROB_TOP_MAX, sizeof *g->lpi);
        if (!g->lprow || !g->lpk || !g->lpr || !g->lpv || !g->lpt || !g->lpi) {
            free(g->lprow), free(g->lpk), free(g->lpr), free(g->lpv), free(g->lpt), free(g->lpi);
            g->lprow = NULL, g->lpk = NULL, g->lpr = NULL, g->lpv = NULL, g->lpt = NULL, g->lpi = NULL;
            return seer_err(SEER_ERR_OOM, "out of memory for log-probabilities");
        }
    }
    seer_backend *be = g->model->be;
    if (rows > g->lpp_rows) {
        float *p = NULL;
        SEER_TRY(be->ops->alloc(be, (size_t)rows * g->V * sizeof(float), (void **)&p));
        if (g->lpp)
            be->ops->dealloc(be, g->lpp);
        g->lpp = p;
        g->lpp_rows = rows;
    }
    for (int k = k0, r = 0; k < k1; k++) {
        g->lprow[k] = -1;
        if (wants_sampled_rows(g, k, &g->seqs[g->hs[k]])) {
            g->lprow[k] = r;
            r += g->nd[k] + 1;
        }
    }
    return SEER_OK;
}

float *seer_gen_lp_probs(seer_gen *g, int k, float *Lk) {
    if (!g->lprow || !g->seqs[g->hs[k]].logprobs || g->lprow[k] < 0)
        return Lk;
    return g->lpp + (size_t)g->lprow[k] * g->V;
}

seer_status seer_gen_lp_compute(seer_gen *g, int k0, int k1, const float *logits) {
    const int G1 = g->G + 1;
    int n = 0, top = 0;
    for (int k = k0; k < k1; k++) {
        const seer_gen_seq *s = &g->seqs[g->hs[k]];
        if (!s->logprobs)
            continue;
        if (!logits)
            return seer_err(SEER_ERR_INTERNAL, "log-probabilities asked of an argmax-only call");
        top = s->top_logprobs > top ? s->top_logprobs : top;
        const int32_t *path = g->path + (size_t)k * g->G;
        for (int j = 0; j <= g->acc[k]; j++) {
            const int node = j == 0 ? -1 : path[j - 1];
            g->lpr[n++] = (seer_logprob_row){.logits = logits + (size_t)(g->row0[k] + node + 1) * g->V,
                                             .token = seer_gen_emitted(g, k, j)};
        }
    }
    if (n == 0)
        return SEER_OK;
    SEER_TRY(seer_context_logprobs(g->ctx, g->lpr, n, top, g->lpv, g->lpi, g->lpt));
    for (int k = k0, i = 0; k < k1; k++) {
        const seer_gen_seq *s = &g->seqs[g->hs[k]];
        if (!s->logprobs)
            continue;
        for (int j = 0; j <= g->acc[k]; j++, i++) {
            seer_token_logprob *o = &g->lpk[(size_t)k * G1 + j];
            o->logprob = g->lpv[i];
            o->n_top = s->top_logprobs;
            memcpy(o->top_id, g->lpi + (size_t)i * top, sizeof(int32_t) * s->top_logprobs);
            memcpy(o->top_logprob, g->lpt + (size_t)i * top, sizeof(float) * s->top_logprobs);
            /* the unused alternatives are zeros, not what the buffer held before */
            memset(o->top_id + s->top_logprobs, 0, sizeof(int32_t) * (SEER_TOP_LOGPROBS_MAX - s->top_logprobs));
            memset(o->top_logprob + s->top_logprobs, 0, sizeof(float) * (SEER_TOP_LOGPROBS_MAX - s->top_logprobs));
        }
    }
    return SEER_OK;
}
