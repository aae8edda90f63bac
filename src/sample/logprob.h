/*
 * logprob.h: the log-probabilities OpenAI's `logprobs` report: the log-softmax of a raw row
 * of logits (no temperature, penalties or truncation, as OpenAI and vLLM report by default)
 * at one token, and the row's k most likely tokens. The CPU backend's logprob_rows is this
 * function; other backends are tested against it.
 *
 * Not for: the sampler's transform (sample.h) or choosing which rows to ask about
 * (src/spec/logprobs.c).
 */
#ifndef SEER_SAMPLE_LOGPROB_H
#define SEER_SAMPLE_LOGPROB_H

#include <stdint.h>

/* For the row x [V]: *lp = log softmax(x)[token]; top_id / top_lp [k] the k largest entries
 * of log softmax(x), largest first, ties to the lower id (k <= V). NaN counts as -inf. The
 * log-sum-exp is max + log(sum exp(x - max)), the sum in double in id order. A row with no
 * finite entry gives -inf everywhere (ids still in order). */
void seer_logprob_row_ref(const float *x, int V, int32_t token, int k, float *lp, int32_t *top_id,
                          float *top_lp);

#endif
