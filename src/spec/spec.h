/*
 * spec.h: the generator's state (struct seer_gen) and what the generator (gen.c), the round
 * (round.c), the verifier (verify.c), the tree code (tree.c) and the planners share. Private
 * to src/spec/: the scheduler sees a class through round.h, drafters see drafter.h alone.
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
#include "spec/drafter.h"
#include "spec/tree_shape.h"

/* Replay positions a sequence keeps, one per (drafter kind, budget) it drafted with; past
 * this many the oldest is reused. */
#define SEER_GEN_TRACE_SLOTS 8

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
    seer_constraint *con; /* structured output (NULL: none): masks every row (constrain_rows.c) */
    float accept_avg; /* running acceptance rate (exponential average) */
    int rounds;       /* rounds since the drafter last refreshed its state */
    void *dstate;     /* the drafter's per-sequence state */
    struct {          /* synthetic.c's trace replay, one per drafter kind and budget K used */
        seer_spec_kind kind;
        int budget;
        int line;     /* the line replayed, -1: the trace has none of the kind */
        int64_t pos;  /* next outcome */
    } trace[SEER_GEN_TRACE_SLOTS];
    int n_trace;
    bool logprobs;    /* emitted tokens get their log-probabilities (logprobs.c) */
    int top_logprobs; /* with this many alternatives */
    /* a generator's own sequences (seer_gen_add_ext, gen_seq.c): */
    bool own_con;            /* con is the sequence's copy, freed with it */
    seer_token_logprob *lp;  /* [n_lp] the generated tokens' log-probabilities */
    int n_lp, cap_lp;
} seer_gen_seq;

/* Most nodes of a best-first tree (SpecExec; the draft model's draft-best-first), given or
 * chosen (tree_size -1, best_first_size.c: up to the AUTO bound). */
#define SEER_TREE_BEST_FIRST_MAX 4096
#define SEER_TREE_BEST_FIRST_AUTO 1024

struct seer_gen {
    seer_context *ctx;
    const seer_model *model;
    int V;
    int G;            /* most draft nodes per sequence and round (the stride of draft, par, qd):
                       * gamma for chains, tree_size for trees */
    int D;            /* most draft depth per round (gamma for chains) */
    bool tree;        /* rounds propose trees of the shape below (else chains) */
    bool best_first;  /* the drafter searches its trees best-first (the shape gives only their
                       * size); a tree larger than a call is verified in calls (tree_chunk.c) */
    bool *chunked;    /* [B] the entry was verified in several calls: its nodes' slots in vslot */
    int32_t *vslot;   /* [B][G] (best_first) the cache slot of each node's verified row */
    float *vlog;      /* [G + 1][V] target backend memory: a chunked sampled entry's logits */
    int32_t *shape;   /* [G] parent of each node of the tree drafters fill (-1: the pending
                       * token), nodes in breadth-first order: a parent comes before its
                       * children, a shallower node before a deeper one, siblings in the order
                       * their tokens are drawn. A chain is parent[j] = j - 1. */
    int32_t *sdepth;  /* [G] depth of each shape node (1: a child of the pending token) */
    int n_shape;      /* nodes of the shape (<= G; G unless re-planned online) */
    struct {
        bool on;                  /* the shape is re-planned online (tree_replan, tree_size -1) */
        bool autosize;            /* tree_size -1: the size too (seer_tree_choose) */
        int every, since;         /* re-plan every this many rounds; rounds since the last */
        seer_tree_accept_est est; /* positional acceptance of all sequences' rounds */
        int n_cost;               /* verification cost table (autosize) */
        int cost_n[8];
        double cost[8];
        double t_step_s;          /* measured seconds of a one-token call (0: table given) */
        double t_draft_s, steps;  /* draft seconds and drafting steps since the last plan */
    } plan;
    seer_spec_params spec;
    seer_accept_trace *rec;       /* seer_gen_record_trace: rounds recorded here (NULL: none) */
    float synth_alpha;            /* seer_gen_set_synthetic (timing runs only; 0: off) */
    const seer_accept_trace *synth_trace;
    int rec_epoch;
    const seer_drafter_ops *dops; /* the drafter of this round (auto: the one chosen, or NULL) */
    void *dimpl;
    struct seer_gen_auto *autos;  /* SEER_SPEC_AUTO: the candidates and the planner (auto.c) */
    seer_draft_env env;       /* what the drafter sees of the run */
    seer_draft_scratch scratch;
    seer_draft_seq *dv;       /* [B] views of the round entries (and of one handle at a time
                               * outside rounds) */
    seer_gen_seq *seqs;
    int n_seqs;
    seer_spec_stats stats;
    /* round scratch, sized for n_seq_max sequences and n_batch_max rows */
    int n_round;      /* entries of the current round (round.c) */
    int *hs, *gam, *nd;
    int *row0, *t0;   /* [B] each entry's first output row and first row of the call (-1:
                       * laid out by the caller) */
    int *dl;          /* [B] most depth a round of each sequence may draft */
    int32_t *draft;   /* [B][G] draft tokens, node j of sequence i at i*G + j */
    int32_t *par;     /* [B][G] their parents (-1: the pending token): the proposal's tree */
    float *qd;        /* [B][G][V] draft distributions, target backend memory: row r of a
                       * sequence is the distribution the children of node r - 1 (row 0: of the
                       * pending token) were drawn from (so, for a chain, row j is draft j's);
                       * allocated the first time a sampled sequence drafts with a drafter
                       * that has them */
    int32_t *path;    /* [B][G] nodes of the accepted path, acc[k] of them */
    int32_t *hbuf;    /* penalty histories of tree nodes (tree.c), hbuf_cap entries */
    size_t hbuf_cap, hbuf_used;
    uint8_t *mask;    /* [n_batch_max][n_batch_max] a forward call's tree mask (tree
                       * generators only: chains never need one) */
    seer_accept_tree *trees; /* [B] */
    int32_t *t_used;  /* [B] uniforms each tree's rule used */
    int32_t *tpath;   /* [B][G] accepted paths of the trees of one verification */
    bool *onehot;     /* [B] q is one-hot at the draft tokens */
    int32_t *ids;     /* [max(B*(G+1), n_batch_max)] ids of one backend call */
    seer_sample_row *rows;     /* [n_batch_max + B] */
    seer_accept_chain *chains; /* [B] */
    double *u;        /* [n_batch_max + B] uniforms of the chains */
    seer_rng *rng0;   /* [B] generator states before a chain's uniforms were drawn */
    int *first;       /* [B] first row of each sequence in rows */
    int *chain;       /* [B] its chain, -1: none */
    int32_t *acc, *next, *c_acc, *c_next; /* [B] results per sequence and per chain */
    /* log-probabilities of emitted tokens (logprobs.c), allocated at first use */
    float *lpp;       /* [lpp_rows][V] backend memory: the probabilities of the sampled rows of
                       * entries that want logprobs, kept apart so that their logits stay */
    int lpp_rows;
    int *lprow;       /* [B] each entry's first row in lpp, -1: its rows are overwritten */
    seer_token_logprob *lpk; /* [B][G + 1] each entry's emitted tokens' log-probabilities */
    seer_logprob_row *lpr;   /* [B * (G + 1)] rows of one logprob_rows call, and its results: */
    float *lpv, *lpt;        /* [B * (G + 1)], [B * (G + 1)][SEER_LOGPROB_TOP_MAX] */
    int32_t *lpi;            /* [B * (G + 1)][SEER_LOGPROB_TOP_MAX] */
};

/* True when the sequence's sampler is plain argmax of the logits: then forward calls return
 * ids (seer_decode_argmax) and no logits leave the device. */
static inline bool seer_gen_argmax_only(const seer_gen_seq *s) {
    return s->sp.temperature <= 0 && !seer_sampler_penalised(&s->sp) && !seer_sampler_biased(&s->sp) &&
           !s->con;
}

/* Whether s ends with the token t it just appended: an end-of-text token (unless ignored),
 * max_new or the context. */
static inline bool seer_gen_seq_done(const seer_gen *g, const seer_gen_seq *s, int32_t t) {
    return (!s->ignore_eos && (t == g->model->info.token_eos || t == g->model->info.token_bos)) ||
           (s->max_new >= 0 && s->n_tokens - s->n_prompt >= s->max_new) || s->n_tokens >= g->ctx->params.n_ctx;
}

/* Timing runs on random weights (seer_gen_set_synthetic, synthetic.c): acceptance is drawn,
 * not decided by the rule. */
static inline bool seer_gen_synthetic(const seer_gen *g) { return g->synth_alpha > 0 || g->synth_trace; }
/* A synthetic run's accepted path of round entry k: first children, each accepted at the
 * synthetic rate or as the replayed trace says, into path; returns their count and the last
 * accepted node in *last (-1: none). */
int seer_gen_synthetic_path(seer_gen *g, int k, int32_t *path, int *last);
/* seer_gen_round_kind with the budget K of the drafter (0: not a budgeted one). */
seer_spec_kind seer_gen_round_drafter(const seer_gen *g, int *budget);
/* auto: the candidate chosen for this round (SEER_SPEC_NONE: plain). */
seer_spec_kind seer_gen_auto_current(const seer_gen *g, int *budget);

/* The drafter's hooks for handle h through its view (the scheduler calls them too). */
seer_status seer_gen_drafter_added(seer_gen *g, int h);
void seer_gen_drafter_released(seer_gen *g, int h);
/* Prompt rows whose queries the drafter wants (0: none). */
int seer_gen_drafter_q_rows(seer_gen *g, int n_prompt);
seer_status seer_gen_drafter_prefill_q(seer_gen *g, int h, const float *q, int n_rows);
/* After round entry k was verified and emitted. */
seer_status seer_gen_drafter_verified(seer_gen *g, int k);

/* The drafter's view of handle h (as round entry k when k >= 0), and its return (the drafter
 * may renew the running acceptance and round count). */
seer_draft_seq *seer_gen_view(seer_gen *g, int h, int k);
void seer_gen_unview(seer_gen *g, const seer_draft_seq *v);

/* ---- Speculation chosen per round (auto.c) ------------------------------------------------- */

/* Sets up SEER_SPEC_AUTO after the generator's arrays and env: every candidate drafter the
 * cost table has a row for (and the settings allow) is initialised once per budget K of its
 * row; candidates that cannot run here are left out. */
seer_status seer_gen_auto_init(seer_gen *g);
void seer_gen_auto_free(seer_gen *g);
/* Every candidate keeps its per-sequence state for every sequence (so that whichever is
 * chosen in a round finds it), so these hooks go to all of them. */
seer_status seer_gen_auto_added(seer_gen *g, int h);
void seer_gen_auto_released(seer_gen *g, int h);
int seer_gen_auto_q_rows(seer_gen *g, int n_prompt);
seer_status seer_gen_auto_prefill_q(seer_gen *g, int h, const float *q, int n_rows);
/* Before a round: the choice for the generator's unfinished sequences; sets dops, dimpl,
 * n_shape and D (0 for plain decoding). */
seer_status seer_gen_auto_round(seer_gen *g);
/* After round entry k was verified: its acceptance into the request's track. */
void seer_gen_auto_observe(seer_gen *g, int k);
/* After a round: tokens it emitted and the seconds it took. */
void seer_gen_auto_round_done(seer_gen *g, int emitted, double seconds);
/* The kind that drafted this round: spec.kind, or auto's choice (NONE: plain). */
seer_spec_kind seer_gen_round_kind(const seer_gen *g);

/* ---- Constraints (constrain_rows.c) ---------------------------------------------------------- */

/* After the drafter proposed for round entries [0, n): for a constrained sequence, a one-hot
 * proposal loses the nodes the grammar refuses (and their subtrees), and a chain whose rows
 * q does not need (greedy, or one-hot) is extended by the tokens the grammar forces (the only
 * allowed token), so that they reach the target in the same call ("jump-forward"). */
seer_status seer_gen_constrain_proposals(seer_gen *g, int n);

/* ---- Trees (tree.c) ------------------------------------------------------------------------ */

/* The shape a tree round fills when none is given: a main chain of depth d (the drafts a
 * chain would make) with the other n - d nodes as leaves beside it, the k-th extra child of
 * each chain node being its k-th likeliest alternative, spread over the depths shallowest
 * first. parent [n] in breadth-first order. A shape chosen by a cost model can replace it:
 * anything seer_tree_shape_check accepts. */
void seer_tree_shape_default(int n, int d, int32_t *parent);
/* SEER_OK when parent [n] is a breadth-first tree (parent[j] in [-1, j), depths never
 * decreasing) of depth at most d; the depths into depth [n]. */
seer_status seer_tree_shape_check(const int32_t *parent, int n, int d, int32_t *depth);

/* ---- Online tree shapes (plan.c) ------------------------------------------------------------ */

/* Sets g->plan up from g->spec (after G, D, shape and sdepth): the estimator, the cost table
 * (measured on the target context when tree_size is -1 and none is given) and, for an
 * automatic size, the first shape from the prior. */
seer_status seer_gen_plan_init(seer_gen *g);
/* Counts round entry k's verified tree into the estimator: for each node on the accepted
 * walk from the pending token, its children and the rank of the accepted one. */
void seer_gen_plan_observe(seer_gen *g, int k);
/* Before a round: every plan.every rounds, the shape from the current estimate. Between
 * rounds only; on failure the shape is unchanged. */
seer_status seer_gen_plan_round(seer_gen *g);
/* The shape the next round fills: parent [n] (return value n), breadth-first as g->shape. */
int seer_gen_tree_shape(const seer_gen *g, const int32_t **parent);

/* Whether sequence k's proposal this round is a chain (parents j - 1). */
bool seer_gen_is_chain(const seer_gen *g, int k);
/* Writes the verification rows of round entry k (pending token + its nd nodes) to tok and
 * pos (L + depth); returns how many. */
int seer_gen_verify_rows(const seer_gen *g, int k, int32_t *tok, int32_t *pos);
/* Marks in mask [T][T] the rows t0 .. t0 + n of round entry k (n = nd + 1) attending their
 * ancestors and themselves; causal: a causal run of n rows from t0 (a prompt chunk). */
void seer_gen_mask_rows(const seer_gen *g, int k, uint8_t *mask, int T, int t0, int n, bool causal);
/* After verification of round entry k (sequence s): moves the accepted path's KV rows into
 * the slots after the pending token and cuts the cache after them. */
seer_status seer_gen_settle(seer_gen *g, int k, seer_gen_seq *s);

/* The most rows of one sequence a verification call takes: the batch limit, and the new
 * tokens a backend computes as one-at-a-time decoding would (SEER_INVARIANT_NEW_TOKENS). */
int seer_gen_call_rows(const seer_gen *g);
/* Verifies round entry k, whose tree exceeds a call, in calls of at most rows rows
 * (tree_chunk.c): nodes in index order (parents first), each call feeding its nodes with the
 * ancestors earlier calls computed again, under the tree mask and a view that hides the
 * earlier calls' rows; then the rule over all rows, as seer_round_verify. Marks the entry
 * chunked: its nodes' verified rows lie at vslot (seer_gen_settle moves them). */
seer_status seer_gen_verify_chunked(seer_gen *g, int k, int rows);
/* The token the round emits at step j <= acc[k] of entry k: the j-th accepted draft, then
 * next[k]. */
static inline int32_t seer_gen_emitted(const seer_gen *g, int k, int j) {
    return j < g->acc[k] ? g->draft[(size_t)k * g->G + g->path[(size_t)k * g->G + j]] : g->next[k];
}
/* The sample row of node u (-1: the pending token) of round entry k, with the penalty history
 * of its path (scratch in g->hbuf, grown by seer_gen_hist_reserve). */
seer_sample_row seer_gen_node_row(seer_gen *g, int k, const seer_gen_seq *s, int u, const float *logits,
                                  float *probs, double uni);
/* Makes g->hbuf hold the histories of rows rows of sequences like s. */
seer_status seer_gen_hist_reserve(seer_gen *g, int rows);
void seer_gen_hist_reset(seer_gen *g);
/* Greedy rule over a tree from the target's argmax ids [nd + 1] (row 0: pending token, row
 * j + 1: node j): from the root, accept the child whose token is the argmax, emit the
 * argmax where none is. Writes path, returns the accepted count. */
int seer_verify_tree_ids(seer_gen *g, int k, seer_gen_seq *s, const int32_t *amax, int32_t *next);

/* The sample row of s after its tokens and the j tokens staged after them (the first token
 * after a prefill: j = 0; tree nodes use seer_gen_node_row). */
seer_sample_row seer_gen_row(const seer_gen_seq *s, int j, const float *logits, float *probs,
                             double u);

/* The uniform of a draw for s: one from its generator when it samples, else -1 (greedy
 * draws none, so switching temperature does not shift other streams). */
double seer_gen_draw(seer_gen_seq *s);

/* The nodes (*gam) and depth (*dl) a round of s may draft: its draft rows must fit in the
 * context (and in budget - 1 rows of a forward call when budget >= 0), its depth within the
 * tokens it may still emit. */
void seer_gen_limits(const seer_gen *g, const seer_gen_seq *s, int budget, int *gam, int *dl);
/* Allocates g->qd if it is not yet there. */
seer_status seer_gen_need_q(seer_gen *g);

/* The first token after a prefill whose last logits are logits [V] (backend memory). */
seer_status seer_gen_first_token(seer_gen *g, seer_gen_seq *s, float *logits, int32_t *next);

/* gen_seq.c: a generator's own sequences with constraints and log-probabilities. */
/* Checks xp against g (SEER_ERR_INVALID_ARG). */
seer_status seer_gen_seq_check(const seer_gen *g, const seer_gen_seq_params *xp);
/* Sets s's log-probability wishes and its own copy of the constraint. */
seer_status seer_gen_seq_setup(seer_gen_seq *s, const seer_gen_seq_params *xp);
/* Frees what setup and keep_lp hold. */
void seer_gen_seq_drop(seer_gen_seq *s);
/* Appends one emitted token's log-probability (nothing when s wants none). */
seer_status seer_gen_seq_keep_lp(seer_gen_seq *s, const seer_token_logprob *lp);
/* seer_gen_first_token, keeping the token's log-probability when s wants it. */
seer_status seer_gen_seq_first(seer_gen *g, seer_gen_seq *s, float *logits, int32_t *next);

/* ---- Log-probabilities of emitted tokens (logprobs.c) ------------------------------------ */

/* Before verifying entries [k0, k1): room for the probabilities of their sampled rows that
 * must not overwrite the logits (g->lprow), and for the results. */
seer_status seer_gen_lp_prepare(seer_gen *g, int k0, int k1);
/* The probability rows the verifier writes for entry k's row j whose logits are at Lk: apart
 * when the entry wants logprobs, else in place. */
float *seer_gen_lp_probs(seer_gen *g, int k, float *Lk);
/* After verifying entries [k0, k1) on logits [..][V] (backend memory, intact where lprow
 * says): the log-probability and alternatives of every token each will emit, into g->lpk. */
seer_status seer_gen_lp_compute(seer_gen *g, int k0, int k1, const float *logits);
void seer_gen_lp_free(seer_gen *g);

/* The verification rule (§3 of the speculative-decoding reference) for sequences k0..k1 of
 * the round (handles g->hs[k], trees g->draft/par + k*G, g->nd[k], g->qd, g->onehot[k])
 * whose target logits are logits [..][V] (backend memory) from row row0[k] on (pending, then
 * each node). Chains go to the backend's accept_chains, other trees to accept_trees. Writes
 * g->acc[k] (accepted drafts), g->path (their nodes) and g->next[k] (the token after them).
 * The logits of sampled sequences are overwritten by their probabilities. */
seer_status seer_verify_group(seer_gen *g, int k0, int k1, const int *row0, float *logits);

#endif
