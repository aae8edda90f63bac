/*
 * request.c: the request object: prompt and emitted tokens, sampler, stop set, limits,
 * streaming text and statistics. What a request does in a forward call is the scheduler's
 * business (sched.c); here is what it holds and how an emitted token is taken in.
 *
 * Stop strings are matched on the detokenized text (the streaming detokenizer only ever
 * gives complete UTF-8), so a stop string split over several tokens is found. The visible
 * text holds back the longest tail that is a proper prefix of a stop string until the next
 * token decides it.
 */
#include "sched/sched.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STOP_MAX_BYTES 256
#define STOP_MAX_COUNT 16

double seer_sched_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

seer_request_params seer_request_default_params(void) {
    seer_request_params p = {0};
    p.sampler = seer_sampler_default_params();
    p.max_tokens = 256;
    p.spec = seer_spec_default_params();
    return p;
}

void seer_request_free(seer_request *r) {
    if (!r)
        return;
    for (int i = 0; i < r->p.n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->tokens);
    free(r->text);
    free(r->lp);
    free(r->plp);
    free(r->qcap);
    seer_sampler_free(r->smp);
    seer_constraint_free(r->con);
    seer_detok_free(r->dt);
    free(r);
}

seer_status seer_request_new(const seer_model *model, const int32_t *prompt, int n,
                             const seer_request_params *params, seer_request **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    SEER_CHECK_ARG(model);
    SEER_CHECK_ARG(prompt);
    SEER_CHECK_ARG(params);
    const int V = seer_n_vocab(model);
    if (n < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "the prompt must have at least one token");
    for (int i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return seer_err(SEER_ERR_INVALID_ARG, "prompt token %d is outside the vocabulary", prompt[i]);
    if (params->max_tokens < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "max_tokens %d must be positive", params->max_tokens);
    if (params->n_stop < 0 || params->n_stop > STOP_MAX_COUNT || (params->n_stop && !params->stop))
        return seer_err(SEER_ERR_INVALID_ARG, "stop strings: %d of at most %d", params->n_stop, STOP_MAX_COUNT);
    for (int i = 0; i < params->n_stop; i++) {
        size_t l = params->stop[i] ? strlen(params->stop[i]) : 0;
        if (l < 1 || l > STOP_MAX_BYTES)
            return seer_err(SEER_ERR_INVALID_ARG, "stop string %d must have 1 to %d bytes", i, STOP_MAX_BYTES);
    }
    if ((params->logprobs || params->prompt_logprobs) && (params->top_logprobs < 0 || params->top_logprobs > SEER_TOP_LOGPROBS_MAX))
        return seer_err(SEER_ERR_INVALID_ARG, "top_logprobs %d must be 0..%d", params->top_logprobs,
                        SEER_TOP_LOGPROBS_MAX);
    SEER_TRY(seer_sampler_params_check(&params->sampler));
    SEER_TRY(seer_logit_bias_check_distinct(&params->sampler));
    if (params->constraint && seer_constraint_n_vocab(params->constraint) != V)
        return seer_err(SEER_ERR_INVALID_ARG, "the constraint was made for a vocabulary of %d, not %d",
                        seer_constraint_n_vocab(params->constraint), V);
    seer_request *r = calloc(1, sizeof *r);
    if (!r)
        return seer_err(SEER_ERR_OOM, "out of memory");
    r->model = model;
    r->saved = SEER_KV_HOST_NONE;
    r->p = *params;
    r->p.stop = NULL;
    r->p.n_stop = 0;
    r->cap = n + 1;
    r->tokens = seer_malloc_array(r->cap, sizeof(int32_t));
    r->text_cap = 256;
    r->text = malloc(r->text_cap);
    r->stop = params->n_stop ? calloc(params->n_stop, sizeof(char *)) : NULL;
    seer_status st = r->tokens && r->text && (r->stop || !params->n_stop)
                         ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
    for (int i = 0; i < params->n_stop && st == SEER_OK; i++) {
        r->stop[i] = strdup(params->stop[i]);
        if (!r->stop[i])
            st = seer_err(SEER_ERR_OOM, "out of memory");
        else
            r->p.n_stop = i + 1;
        size_t l = strlen(params->stop[i]);
        r->stop_max = l > r->stop_max ? l : r->stop_max;
    }
    r->p.constraint = NULL;
    if (st == SEER_OK)
        st = seer_sampler_init(params->sampler, V, &r->smp);
    if (st == SEER_OK) /* logit_bias: the sampler's own copy from now on */
        r->p.sampler = *seer_sampler_get_params(r->smp);
    if (st == SEER_OK && params->constraint)
        st = seer_constraint_clone(params->constraint, &r->con);
    if (st == SEER_OK)
        st = seer_detok_init(model, &r->dt);
    if (st == SEER_OK && params->prompt_logprobs) {
        r->plp = calloc((size_t)n, sizeof *r->plp);
        if (!r->plp)
            st = seer_err(SEER_ERR_OOM, "out of memory for the prompt's log-probabilities");
        else
            r->plp[0].logprob = NAN; /* no token precedes the first */
    }
    if (st != SEER_OK) {
        seer_request_free(r);
        return st;
    }
    memcpy(r->tokens, prompt, sizeof(int32_t) * n);
    r->n_tokens = r->n_prompt = n;
    for (int i = 0; i < n; i++)
        seer_sampler_accept(r->smp, prompt[i]);
    r->text[0] = 0;
    atomic_init(&r->cancel, false);
    r->st.n_prompt = n;
    r->st.t_first_token_s = r->st.t_last_token_s = -1;
    *out = r;
    return SEER_OK;
}

seer_status seer_request_reserve(seer_request *r, int n_ctx) {
    if (r->cap >= n_ctx + 1)
        return SEER_OK;
    int32_t *t = realloc(r->tokens, sizeof(int32_t) * ((size_t)n_ctx + 1));
    if (!t)
        return seer_err(SEER_ERR_OOM, "out of memory for a context of %d tokens", n_ctx);
    r->tokens = t;
    r->cap = n_ctx + 1;
    return SEER_OK;
}

void seer_request_put_logprob(seer_request *r, const seer_token_logprob *lp) {
    if (r->finish != SEER_FINISH_NONE || !r->p.logprobs)
        return;
    const int i = r->n_tokens - r->n_prompt;
    if (i >= r->lp_cap) {
        const int cap = r->lp_cap ? 2 * r->lp_cap : 64;
        seer_token_logprob *p = realloc(r->lp, (size_t)cap * sizeof *p);
        if (!p) {
            seer_request_finish(r, SEER_FINISH_ERROR);
            return;
        }
        r->lp = p;
        r->lp_cap = cap;
    }
    r->lp[i] = *lp;
}

int seer_request_logprobs(const seer_request *r, const seer_token_logprob **out) {
    *out = NULL;
    if (!r || !r->p.logprobs || !r->lp)
        return 0;
    *out = r->lp;
    return r->n_tokens - r->n_prompt;
}

int seer_request_prompt_logprobs(const seer_request *r, const seer_token_logprob **out) {
    if (out)
        *out = NULL;
    if (!r || !out || !r->plp || !r->plp_done)
        return 0;
    *out = r->plp;
    return r->n_prompt;
}

void seer_request_cancel(seer_request *r) {
    if (r)
        atomic_store(&r->cancel, true);
}

seer_finish_reason seer_request_finish_reason(const seer_request *r) { return r ? r->finish : SEER_FINISH_NONE; }
bool seer_request_finished(const seer_request *r) { return r && r->finish != SEER_FINISH_NONE; }
void *seer_request_user(const seer_request *r) { return r ? r->p.user : NULL; }
int seer_request_n_prompt(const seer_request *r) { return r ? r->n_prompt : 0; }

int seer_request_tokens(const seer_request *r, const int32_t **ids) {
    if (!r) {
        if (ids)
            *ids = NULL;
        return 0;
    }
    if (ids)
        *ids = r->tokens + r->n_prompt;
    return r->n_tokens - r->n_prompt;
}

const char *seer_request_text(const seer_request *r, size_t *len) {
    if (!r) {
        if (len)
            *len = 0;
        return "";
    }
    if (len)
        *len = r->n_visible;
    return r->text;
}

void seer_request_get_stats(const seer_request *r, seer_request_stats *out) {
    if (!out)
        return;
    if (r)
        *out = r->st;
    else
        memset(out, 0, sizeof *out);
}

void seer_request_finish(seer_request *r, seer_finish_reason why) {
    if (r->finish != SEER_FINISH_NONE)
        return;
    r->finish = why;
    r->updated = true;
    if (why == SEER_FINISH_STOP || why == SEER_FINISH_LENGTH) {
        /* what the detokenizer still holds is part of the answer; held-back text is final */
        char tail[64];
        int k = seer_detok_flush(r->dt, tail, sizeof tail);
        if (k > 0 && r->text_len + k + 1 <= r->text_cap) {
            memcpy(r->text + r->text_len, tail, k);
            r->text_len += k;
            r->text[r->text_len] = 0;
        }
    }
    if (why != SEER_FINISH_CANCELLED)
        r->n_visible = r->text_len;
}

static bool text_grow(seer_request *r, size_t need) {
    if (need <= r->text_cap)
        return true;
    size_t cap = r->text_cap * 2 > need ? r->text_cap * 2 : need;
    char *t = realloc(r->text, cap);
    if (!t)
        return false;
    r->text = t;
    r->text_cap = cap;
    return true;
}

/* Looks for a stop string in the text that changed (from `from` on, minus the overlap a
 * match could reach back with). Cuts the text at the earliest match. */
static bool match_stop(seer_request *r, size_t from) {
    size_t start = from >= r->stop_max ? from - r->stop_max + 1 : 0, best = (size_t)-1;
    for (int i = 0; i < r->p.n_stop; i++) {
        const char *m = strstr(r->text + start, r->stop[i]);
        if (m && (size_t)(m - r->text) < best)
            best = (size_t)(m - r->text);
    }
    if (best == (size_t)-1)
        return false;
    r->text_len = best;
    r->text[best] = 0;
    return true;
}

/* Bytes at the end of the text that are a proper prefix of some stop string. */
static size_t held_back(const seer_request *r) {
    size_t keep = 0;
    for (int i = 0; i < r->p.n_stop; i++) {
        size_t l = strlen(r->stop[i]);
        for (size_t k = l - 1; k > keep; k--)
            if (k <= r->text_len && !memcmp(r->text + r->text_len - k, r->stop[i], k)) {
                keep = k;
                break;
            }
    }
    return keep;
}

void seer_request_emit(seer_request *r, int32_t t, int n_ctx) {
    if (r->finish != SEER_FINISH_NONE)
        return;
    r->tokens[r->n_tokens++] = t;
    r->updated = true;
    r->st.n_generated++;
    const double now = seer_sched_now() - r->t_submit;
    if (r->st.t_first_token_s < 0)
        r->st.t_first_token_s = now;
    r->st.t_last_token_s = now;
    const seer_model *m = r->model;
    const bool eog = !r->p.ignore_eos && (seer_token_is_eog(m, t) || t == seer_token_eos(m) ||
                                          t == seer_token_bos(m));
    /* the constraint took t already (round.c); an end token or a refused one ends it */
    if (eog || (r->con && seer_constraint_finished(r->con))) {
        seer_request_finish(r, SEER_FINISH_STOP);
        return;
    }
    /* seer_detok_push consumes nothing when the piece does not fit: the room doubles until
     * it does (a piece is at most a GGUF string) */
    int k = -1;
    for (size_t room = 64; k < 0 && room <= ((size_t)1 << 30); room *= 2) {
        if (!text_grow(r, r->text_len + room))
            break;
        k = seer_detok_push(r->dt, t, r->text + r->text_len, (int)(r->text_cap - r->text_len));
    }
    if (k > 0) {
        size_t from = r->text_len;
        r->text_len += k;
        r->text[r->text_len] = 0;
        if (r->p.n_stop && match_stop(r, from)) {
            r->n_visible = r->text_len;
            seer_request_finish(r, SEER_FINISH_STOP);
            return;
        }
    }
    r->n_visible = r->text_len - (r->p.n_stop ? held_back(r) : 0);
    if (r->n_tokens - r->n_prompt >= r->p.max_tokens || r->n_tokens >= n_ctx)
        seer_request_finish(r, SEER_FINISH_LENGTH);
}
