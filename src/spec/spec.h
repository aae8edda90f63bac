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
    /* round scratch, sized for n_seq_max sequences and n_batch_max rows */
    int *hs, *gam, *nd;
    int32_t *draft;   /* [B][G] */
    float *qd;        /* [B][G][V] draft distributions, target backend memory; allocated the
                       * first time a sampled sequence drafts with a drafter that has them */
    bool *onehot;     /* [B] q is one-hot at the draft tokens */
    int32_t *ids;     /* [max(B*(G+1), n_batch_max)] ids of one backend call */
    seer_sample_row *rows;     /* [n_batch_max + B] */
    seer_accept_chain *chains; /* [B] */
    double *u;        /* [n_batch_max + B] uniforms of the chains */
    seer_rng *rng0;   /* [B] generator states before a chain's uniforms were drawn */
    int *first;       /* [B] first row of each sequence in rows */
    int *chain;       /* [B] its chain, -1: none */
    int32_t *acc, *next, *c_acc, *c_next; /* [B] results per sequence and per chain */
};

/* True when the sequence's sampler is plain argmax of the logits: then forward calls return
 * ids (seer_decode_argmax) and no logits leave the device. */
static inline bool seer_gen_argmax_only(const seer_gen_seq *s) {
    return s->sp.temperature <= 0 && s->sp.repeat_penalty == 1.f;
}

/* A drafter proposes up to gam[i] tokens for each sequence hs[i] (i < n) whose pending token
 * is tokens[n_tokens-1], writing draft[i*G + j], nd[i] and either q[(i*G + j)*V ..] (the
 * distribution each token was drawn from, after the sequence's sampler transform; the
 * target's backend memory, g->qd, allocated when a sampled sequence drafts) or
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
extern const seer_drafter_ops seer_drafter_quantkv; /* the target through its quantised KV copy */

/* Writes this round's draft tokens after s's tokens (tokens[n_tokens + j] = draft[j]), so
 * that the penalty history of draft position j is simply tokens[0 .. n_tokens + j). Those
 * entries are scratch: emitted tokens overwrite them. Room: n_tokens + nd < cap always. */
void seer_gen_stage_drafts(seer_gen_seq *s, const int32_t *draft, int nd);

/* The sample row of s at draft position j (after the pending token and j drafts, staged). */
seer_sample_row seer_gen_row(const seer_gen_seq *s, int j, const float *logits, float *probs,
                             double u);

/* The uniform of a draw for s: one from its generator when it samples, else -1 (greedy
 * draws none, so switching temperature does not shift other streams). */
double seer_gen_draw(seer_gen_seq *s);

/* Allocates g->qd if it is not yet there. */
seer_status seer_gen_need_q(seer_gen *g);

/* One drafting step on c (the target's context, or a draft model's with the target's
 * vocabulary): b holds, for each token t, draft position j of sequence i = who[t] (handle
 * hs[i]); every token's logits are flagged. Writes draft[i*G + j] and stages it; for sampled
 * sequences q[(i*G + j)*V ..] (c's backend memory) receives the distribution it was drawn
 * from. Greedy drafts move ids only; sampled ones ids and uniforms. */
seer_status seer_gen_draft_step(seer_gen *g, seer_context *c, const seer_batch *b, const int *hs,
                                const int *who, int j, int32_t *draft, float *q);

/* The first token after a prefill whose last logits are logits [V] (backend memory). */
seer_status seer_gen_first_token(seer_gen *g, seer_gen_seq *s, float *logits, int32_t *next);

/* The verification rule (§3 of the speculative-decoding reference) for sequences k0..k1 of
 * the round (handles g->hs[k], drafts g->draft + k*G, g->nd[k], g->qd, g->onehot[k]) whose
 * target logits are logits [..][V] (backend memory) from row row0[k] on (pending, then each
 * draft). Writes g->acc[k] (accepted drafts) and g->next[k] (the token emitted after them).
 * The logits of sampled sequences are overwritten by their probabilities. */
seer_status seer_verify_group(seer_gen *g, int k0, int k1, const int *row0, float *logits);

/* The rule for a greedy sequence from the target's argmax ids [nd+1] (of the penalised logits
 * when it has a penalty): accept while draft == argmax, emit the argmax at the first
 * mismatch; under synthetic_accept, acceptance drawn at that rate. */
int seer_verify_chain_ids(seer_gen *g, seer_gen_seq *s, const int32_t *amax, const int32_t *draft,
                          int nd, int32_t *next);

/* Test hook: when nonzero, a rejected draft token is replaced by a sample from p instead of
 * the residual, which is NOT exact; the distribution test uses it to show its power. */
extern int seer_verify_wrong_rule_for_tests;

#endif
