/*
 * sample.h: internals of the sampler behind seer_sampler_*: the random generator, the
 * stateless logits -> probabilities transform, and the small helpers the speculative
 * verifier builds on (inverse-CDF draws with a given uniform, argmax, residual sampling).
 *
 * Not for: acceptance rules, trees or anything that knows about drafts; those live in
 * src/spec/. Everything here is plain CPU code over [V] float vectors.
 *
 * Determinism: for the same parameters, history and logits every function here gives
 * bit-identical results; nothing depends on threads or on what scratch memory held before.
 */
#ifndef SEER_SAMPLE_H
#define SEER_SAMPLE_H

#include "seer.h"

#include <stddef.h>
#include <stdint.h>

/* ---- Random generator ------------------------------------------------------------------
 * xoshiro256** (Blackman and Vigna, "Scrambled linear pseudorandom number generators",
 * 2018): 256 bits of state, period 2^256 - 1, passes BigCrush and PractRand, and needs only
 * shifts, rotations and one multiply per draw. Its state is filled by splitmix64 from the
 * 64-bit seed, as its authors recommend, so every seed (0 included) gives a good state. */
typedef struct {
    uint64_t s[4];
} seer_rng;

void seer_rng_seed(seer_rng *r, uint64_t seed);
uint64_t seer_rng_next(seer_rng *r);
/* Uniform in [0, 1): the top 53 bits of a draw times 2^-53, so every double the interval
 * can hold at that spacing is equally likely and 1.0 is never returned. */
double seer_rng_uniform(seer_rng *r);

/* ---- Parameters and the stateless transform -------------------------------------------- */

/* SEER_OK, or SEER_ERR_INVALID_ARG with a message naming the first bad field. */
seer_status seer_sampler_params_check(const seer_sampler_params *p);

/* SEER_OK when p's logit_bias lists no token twice (O(n^2): checked once, where params are
 * taken in, not per row). */
seer_status seer_logit_bias_check_distinct(const seer_sampler_params *p);

/* Whether p changes logits before the temperature (penalties or logit_bias): then greedy
 * decoding needs the logits, not only the model's argmax. */
static inline bool seer_sampler_biased(const seer_sampler_params *p) {
    return p->n_logit_bias > 0;
}

/* Whether p transforms logits by the history (a penalty on and a window to look at): then
 * the verifier and the backends' samplers need each row's history. */
static inline bool seer_sampler_penalised(const seer_sampler_params *p) {
    return p->repeat_last_n > 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}
/* The penalties of one id that occurs count (>= 1) times in the window (penalty.c, compiled
 * without contraction, so that every backend's sampler forms the same bits): what is
 * subtracted after the repetition penalty, count * frequency_penalty + presence_penalty; and
 * the penalised logit, (v > 0 ? v / rep : v * rep) - sub. CUDA's sampler forms the same value
 * with the same rounded operations from seer_penalty_sub's result. */
float seer_penalty_sub(const seer_sampler_params *p, int count);
float seer_penalty_apply(float v, float rep, float sub);
/* The penalty window of a row whose history is hist[0 .. n_hist): the distinct ids in range
 * [0, V) among its last p->repeat_last_n entries, each once in order of first occurrence, into
 * ids (room: repeat_last_n), and each one's occurrences into count[id]; mark and count [V] are
 * scratch that needs no initialisation. Returns how many ids (0 when p penalises nothing).
 * The CPU's sampler and CUDA's (on the host, staging its rows) both take the window here. */
int seer_penalty_window(const seer_sampler_params *p, const int32_t *hist, int n_hist, int V, uint8_t *mark,
                        int32_t *count, int32_t *ids);

/* Bytes of scratch seer_sampler_probs_with_history needs for a vocabulary of n_vocab
 * (about 13 * n_vocab). The scratch need not be initialised and may be reused freely. */
size_t seer_sampler_scratch_bytes(int n_vocab);

/* The sampling pipeline, with no state of its own, so that a verifier can transform target
 * and draft logits identically:
 *   0. logit_bias: each listed id in [0, V) gets its bias added (a plain float add);
 *   1. penalties on every distinct id in the last min(n_history, repeat_last_n) entries of
 *      history (ids outside [0, V) are ignored; a repeated id is penalised once): a positive
 *      logit is divided by repeat_penalty, any other multiplied, then count *
 *      frequency_penalty + presence_penalty is subtracted (count: its occurrences there);
 *   2. temperature <= 0: one-hot at the argmax (ties -> lowest id, NaN as -inf), done;
 *   3. top-k (k largest logits; at equal logits lower ids win, so exactly k are kept);
 *   4. softmax at the temperature over the kept set;
 *   5. top-p: the shortest run of the most probable tokens (ties -> lower id first) whose
 *      mass is >= top_p of the total, at least one token;
 *   6. min-p: drop tokens with p < min_p * p_max;
 *   7. renormalise.
 * NaN logits count as -inf throughout. probs [n_vocab] receives zeros outside the kept set
 * and sums to 1 (up to float rounding). logits is not modified. p must pass
 * seer_sampler_params_check; scratch holds seer_sampler_scratch_bytes(n_vocab) bytes,
 * 8-byte aligned (malloc'd memory is). */
void seer_sampler_probs_with_history(const seer_sampler_params *p, const int32_t *history,
                                     int n_history, const float *logits, float *probs,
                                     int n_vocab, void *scratch);

/* seer_sampler_probs_with_history with a vocabulary mask applied after logit_bias and before
 * the penalties: mask [(n_vocab + 31) / 32] (bit i % 32 of word i / 32 set: token i allowed;
 * NULL: all) sets every other logit to -inf, so that the kept set is renormalised over the
 * allowed tokens (a constraint's per-row mask; src/constrain/). */
void seer_sampler_probs_masked(const seer_sampler_params *p, const int32_t *history, int n_history,
                               const uint32_t *mask, const float *logits, float *probs, int n_vocab,
                               void *scratch);

/* ---- Access to a sampler's state (for the verifier) -------------------------------------- */

const seer_sampler_params *seer_sampler_get_params(const seer_sampler *s);
int seer_sampler_n_vocab(const seer_sampler *s);
/* The penalty window: sets *tokens to the last accepted tokens, oldest first, and returns
 * their count (at most repeat_last_n). Valid until the next accept or reset. */
int seer_sampler_history(const seer_sampler *s, const int32_t **tokens);
/* The sampler's generator: the verifier draws a chain's uniforms ahead of the device call
 * and gives back the ones the rule did not use by restoring a saved copy, so that the stream
 * a sequence consumes does not depend on where the rule runs. */
seer_rng *seer_sampler_rng(seer_sampler *s);

/* ---- Helpers over probability vectors ----------------------------------------------------- */

/* Inverse CDF in id order: the first i with u < probs[0] + ... + probs[i] among entries
 * > 0. If rounding leaves u at or above the total, the last entry > 0. Entries <= 0 or NaN
 * are never chosen. -1 if n <= 0 or no entry is > 0. */
int32_t seer_sample_from_probs(const float *probs, int n, double u);

/* Index of the largest entry, ties -> lowest id, NaN ignored; 0 if all are NaN, -1 if
 * n <= 0. This is the one tie rule of greedy decoding, plain and speculative alike. */
int32_t seer_argmax(const float *x, int n);

/* A draw from norm(max(p - q, 0)) with uniform u, the residual of speculative sampling
 * (Leviathan et al. 2023; Chen et al. 2023) after a rejection. If max(p - q, 0) sums to 0
 * (p == q), a draw from p. scratch [n] floats or NULL (then the differences are computed
 * twice; the result is the same). */
int32_t seer_sample_residual(const float *p, const float *q, int n, double u, float *scratch);

/* probs [n] = one-hot at tok (all zeros if tok is outside [0, n)). */
void seer_probs_one_hot(float *probs, int n, int32_t tok);

#endif
