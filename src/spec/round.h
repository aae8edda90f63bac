/*
 * round.h: one speculation round for a set of sequences of one speculation class (a
 * seer_gen): the drafter proposes, the round lays out each sequence's rows (pending token +
 * draft nodes) and tree mask in a forward call, verifies the call's outputs, settles each
 * sequence's cache on the accepted path and emits the accepted tokens. The generator
 * (gen.c) and the scheduler (src/sched/) both run their rounds through it; the scheduler
 * sees seer_gen through this interface alone.
 *
 * A round: seer_round_begin, seer_round_add per sequence (entries k = 0, 1, ...), then
 * seer_round_propose, seer_round_put (or seer_round_out_row for a pending token laid out by
 * the caller) into the caller's forward call, seer_round_mask when the call is not all
 * chains, seer_round_verify on the call's outputs, and per entry seer_round_settle,
 * seer_round_emit and seer_round_verified.
 *
 * Not for: the forward call itself, prefill chunks and token budgets (the callers), the
 * acceptance rule (verify.c) or tree shapes (tree.c, plan.c).
 */
#ifndef SEER_SPEC_ROUND_H
#define SEER_SPEC_ROUND_H

#include "seer.h"

/* A sequence a caller hands to a class: the class borrows the token array and sampler,
 * which the caller keeps when the sequence is detached. Invariant: the cache holds
 * tokens[0 .. n_tokens-1) and tokens[n_tokens-1] is pending. */
typedef struct {
    seer_seq_id seq;
    int32_t *tokens; /* [cap] prompt + emitted */
    int n_tokens, n_prompt, cap;
    int max_new;     /* -1: until the context is full */
    bool ignore_eos;
    seer_sampler *smp;
    seer_sampler_params sp;
    bool logprobs;    /* its emitted tokens get log-probabilities (seer_round_logprob) */
    int top_logprobs; /* with this many alternatives (<= SEER_TOP_LOGPROBS_MAX) */
    seer_constraint *con; /* NULL: none; borrowed like smp, advanced by every emitted token */
} seer_round_seq;

/* ---- sequences of a class ---------------------------------------------------------------- */

/* Takes q into a free handle (*h); the drafter is not told yet (seer_round_added). */
seer_status seer_round_attach(seer_gen *g, const seer_round_seq *q, int *h);
/* Gives handle h back: the drafter's state and the target sequence are freed, the token
 * array and sampler stay with the caller. */
void seer_round_detach(seer_gen *g, int h);
/* Prompt rows (of n_prompt) whose queries the drafter wants captured (0: none). */
int seer_round_q_rows(seer_gen *g, int n_prompt);
/* The captured queries q [n_layers][n_rows][H*Dh] of handle h's last prompt rows. */
seer_status seer_round_prefill_q(seer_gen *g, int h, const float *q, int n_rows);
/* The drafter takes handle h on (after its prompt is in the cache). */
seer_status seer_round_added(seer_gen *g, int h);
/* Between rounds: the class's tree shape (online planning) or auto's choice for the next
 * round. On failure nothing changed. */
seer_status seer_round_plan(seer_gen *g);
/* The draft nodes (*gam) and depth (*dl) a round of handle h may draft with a forward call
 * of at most budget rows for it (-1: no limit) and at most depth_max tokens of depth (-1: no
 * limit beyond the sequence's own). */
void seer_round_limits(const seer_gen *g, int h, int budget, int depth_max, int *gam, int *dl);
/* The kind that drafts this round: the class's kind, or auto's choice (NONE: plain). */
seer_spec_kind seer_round_kind(const seer_gen *g);
/* After a round of an automatic class: the tokens it emitted and the seconds it took. */
void seer_round_done(seer_gen *g, int emitted, double seconds);

/* ---- a round ------------------------------------------------------------------------------ */

/* Forgets the last round's entries. */
void seer_round_begin(seer_gen *g);
/* Adds handle h with gam draft nodes of depth at most dl; returns its entry k. */
int seer_round_add(seer_gen *g, int h, int gam, int dl);
/* The drafter proposes for entries [0, n) (no forward call on the target is open). Nothing
 * to do when the class has no drafter this round or no entry may draft. */
seer_status seer_round_propose(seer_gen *g, int n);
/* Draft nodes entry k carries (0 before proposing). */
int seer_round_nodes(const seer_gen *g, int k);
/* True when entry k's sampler is plain argmax of the logits: a call whose rounds are all so
 * may return ids (seer_decode_argmax) instead of logits. */
bool seer_round_greedy(const seer_gen *g, int k);

/* The rows of a forward call as they are laid out. */
typedef struct {
    int32_t *tok, *seq, *pos; /* [capacity] */
    uint8_t *want;            /* [capacity] rows whose output the call returns */
    int T;                    /* rows so far */
    int n_out;                /* rows so far whose output is returned */
    bool chains;              /* every entry put so far is a chain (no mask needed) */
} seer_round_rows;

/* Appends entry k's rows (pending token, then its nodes) to b; returns how many. */
int seer_round_put(seer_gen *g, int k, seer_round_rows *b);
/* Entry k's pending token is output row `row` of a call the caller laid out (the last row of
 * a prompt: a round without drafts). */
void seer_round_out_row(seer_gen *g, int k, int row);
/* Marks in mask [T][T] the rows put for entry k attending their ancestors and themselves. */
void seer_round_mask(const seer_gen *g, int k, uint8_t *mask, int T);
/* Verifies entries [k0, k1) on the call's outputs: ids (argmax, when every entry is greedy)
 * or logits [..][V] (backend memory; sampled rows' logits are overwritten by probabilities,
 * except those of sequences that want log-probabilities). A class without speculation skips
 * the verifier: the next token is drawn from the row. Then the log-probabilities of what the
 * entries that want them will emit (seer_round_logprob). */
seer_status seer_round_verify(seer_gen *g, int k0, int k1, const int32_t *ids, float *logits);

/* The log-probability of the j-th token (0 .. accepted) entry k's round emits, and the most
 * likely tokens at its position, under the target's raw distribution (spec/logprobs.c); NULL
 * when the sequence asked for none. Valid until the next verification. */
const seer_token_logprob *seer_round_logprob(const seer_gen *g, int k, int j);

/* Moves entry k's accepted KV rows after its pending token and cuts the cache after them;
 * observe: counts the round into the online tree planner (a drafted round). */
seer_status seer_round_settle(seer_gen *g, int k, bool observe);

/* What entry k's round did. */
typedef struct {
    int drafted, accepted, emitted;
} seer_round_result;

/* Called per emitted token t, after it is appended to the sequence's tokens; returns true
 * when the sequence ends with it. */
typedef bool (*seer_round_emit_fn)(void *user, int32_t t);

/* Emits entry k's accepted tokens and the one after them, up to the sequence's end: fn
 * decides the end (NULL: the end-of-text tokens, max_new and the context). */
seer_round_result seer_round_emit(seer_gen *g, int k, seer_round_emit_fn fn, void *user);
/* Tells the drafter entry k was verified and emitted. */
seer_status seer_round_verified(seer_gen *g, int k);

/* The rows' masks of round entries [k0, k1) whose constraints take them on this side of the
 * forward call: before it (SEER_CONSTRAINT_MASKS_BEFORE_CALL) or after it returns, whatever
 * its status (the others, while an asynchronous backend's device computes). */
void seer_round_masks(seer_gen *g, int k0, int k1, bool before_call);

/* Whether p asks for best-first trees (the draft model's draft-best-first), which the
 * generator verifies in several calls where they exceed one (tree_chunk.c). */
bool seer_gen_best_first(const seer_spec_params *p);

#endif
