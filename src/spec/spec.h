/*
 * spec.h: what the generator (gen.c), the verifier (verify.c) and the drafters share.
 *
 * Invariant of a generating sequence: its target cache holds tokens[0 .. n_tokens-1) and
 * the last emitted token tokens[n_tokens-1] is "pending": its KV is written by the next
 * round's first forward call (verification, or the first draft step).
 */
#ifndef SEER_SPEC_H
#define SEER_SPEC_H

#include "model/model.h"
#include "sample/sample.h"
#include "seer.h"

typedef struct {
    bool alive;      /* handle in use and not released */
    bool finished;
    seer_seq_id seq; /* target sequence */
    int32_t *tokens; /* [cap] prompt + emitted */
    int n_tokens, n_prompt, cap;
    int max_new;     /* -1: until the context is full */
    bool ignore_eos;
    seer_sampler *smp;
    seer_sampler_params sp;
    float accept_avg; /* running acceptance rate (exponential average) */
    int rounds;       /* rounds since the drafter last refreshed its state */
    void *dstate;     /* the drafter's per-sequence state */
} seer_gen_seq;

typedef struct seer_drafter_ops seer_drafter_ops;

struct seer_gen {
    seer_context *ctx;
    const seer_model *model;
    int V, G;
    seer_spec_params spec;
    const seer_drafter_ops *dops;
    void *dimpl;
    seer_gen_seq *seqs;
    int n_seqs;
    seer_spec_stats stats;
    /* round scratch, sized for n_seq_max sequences */
    int *hs, *gam, *nd;
    int32_t *draft;   /* [B][G] */
    float *q;         /* [B][G][V] draft distributions */
    bool *onehot;     /* [B] q is one-hot at the draft tokens */
    float *logits;    /* [B*(G+1)][V] */
    float *p, *tmp;   /* [V] each */
    void *sscratch;   /* sampler scratch */
    int32_t *hist;    /* [n_ctx + G + 1] history for penalties */
    int32_t *ids;     /* [B*(G+1)] argmax ids of a greedy call */
};

/* True when the sequence's sampler is plain argmax of the logits: then forward calls return
 * ids (seer_decode_argmax) and no logits leave the device. */
static inline bool seer_gen_argmax_only(const seer_gen_seq *s) {
    return s->sp.temperature <= 0 && s->sp.repeat_penalty == 1.f;
}

/* A drafter proposes up to gam[i] tokens for each sequence hs[i] (i < n) whose pending token
 * is tokens[n_tokens-1], writing draft[i*G + j], nd[i] and either q[(i*G + j)*V ..] (the
 * distribution each token was drawn from, after the sequence's sampler transform) or
 * onehot[i] = true. It must leave each target sequence's cache length as it found it. */
struct seer_drafter_ops {
    const char *name;
    seer_status (*init)(seer_gen *g, void **impl);
    void (*free)(seer_gen *g, void *impl);
    /* After the prompt of handle h is in the cache (q of its last rows captured if asked). */
    seer_status (*seq_added)(seer_gen *g, void *impl, int h);
    void (*seq_released)(seer_gen *g, void *impl, int h);
    seer_status (*propose)(seer_gen *g, void *impl, int n, const int *hs, const int *gam,
                           int32_t *draft, float *q, bool *onehot, int *nd);
    /* After verification accepted n_acc of nd tokens and emitted n_acc + 1. */
    seer_status (*verified)(seer_gen *g, void *impl, int h, int n_acc, int nd);
    /* Prompt rows whose queries the drafter wants at prefill (SnapKV); 0 = none. */
    int (*prefill_q_rows)(seer_gen *g, void *impl, int n_prompt);
    seer_status (*prefill_q)(seer_gen *g, void *impl, int h, const float *q, int n_rows);
};

extern const seer_drafter_ops seer_drafter_self;  /* streaming, retrieval, snapkv */
extern const seer_drafter_ops seer_drafter_model; /* standalone draft model */
extern const seer_drafter_ops seer_drafter_ngram;

/* Sampler transform of logits at a position whose preceding tokens are hist[0..n_hist). */
void seer_gen_probs(seer_gen *g, const seer_gen_seq *s, const int32_t *hist, int n_hist,
                    const float *logits, float *probs);

/* A draft token at draft position j of s from the drafter's logits: q [V] receives the
 * sequence's sampler transform (with the history the verifier will use: the sequence's
 * tokens, then drafts[0..j)), and the token is its argmax (greedy) or a sample from it. */
int32_t seer_gen_draft_token(seer_gen *g, seer_gen_seq *s, const int32_t *drafts, int j,
                             const float *logits, float *q);

/* The verification rule (§3 of the speculative-decoding reference) for one chain.
 * p_logits [nd+1][V] are the target's logits at the pending token and each draft token;
 * returns the accepted count and writes the emitted token to *next. */
int seer_verify_chain(seer_gen *g, seer_gen_seq *s, const float *p_logits, const int32_t *draft,
                      int nd, const float *q, bool onehot, int32_t *next);

/* seer_verify_chain for an argmax-only sequence, from the target's argmax ids [nd+1]. */
int seer_verify_chain_ids(seer_gen *g, seer_gen_seq *s, const int32_t *amax, const int32_t *draft,
                          int nd, int32_t *next);

/* Test hook: when nonzero, a rejected draft token is replaced by a sample from p instead of
 * the residual, which is NOT exact; the distribution test uses it to show its power. */
extern int seer_verify_wrong_rule_for_tests;

#endif
