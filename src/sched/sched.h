/*
 * sched.h: what the request object (request.c) and the scheduler (sched.c) share.
 *
 * A running request is a sequence of its speculation class (a seer_gen per distinct
 * seer_spec_params, driven through the round interface of spec/round.h): the class borrows
 * the request's token array and sampler, which the request keeps when it leaves (finished
 * or preempted).
 */
#ifndef SEER_SCHED_H
#define SEER_SCHED_H

#include "kv/kv_host.h"
#include "model/model.h"
#include "sample/sample.h"
#include "seer.h"
#include "spec/round.h"

#include <stdatomic.h>

typedef enum {
    REQ_NEW = 0, /* not submitted */
    REQ_WAITING, /* queued, no KV */
    REQ_LOADING, /* tokens[0 .. n_cached) being copied from the host tier (load_ticket) */
    REQ_PREFILL, /* tokens[0 .. n_cached) in the cache, more to feed */
    REQ_DECODE,  /* generating: the seer_round_seq invariant holds */
    REQ_DONE,
} req_state;

struct seer_request {
    const seer_model *model;
    seer_request_params p;
    char **stop;      /* [n_stop] owned copies */
    size_t stop_max;  /* longest stop string */
    int32_t *tokens;  /* [cap] prompt + generated */
    int n_tokens, n_prompt, cap;
    seer_sampler *smp;
    seer_constraint *con; /* its own copy of params.constraint (NULL: none) */
    seer_detok *dt;
    char *text;       /* [text_cap] generated text, NUL-terminated */
    size_t text_len, text_cap, n_visible;
    atomic_bool cancel;
    seer_finish_reason finish;
    req_state state;
    seer_sched *sched;
    int group, h;     /* its seer_gen and handle there while it holds KV */
    seer_seq_id seq;  /* its target sequence while it holds KV */
    int n_cached;     /* REQ_PREFILL: tokens fed so far */
    int n_target;     /* REQ_PREFILL: tokens to feed (n_tokens at admission) */
    int tail;         /* prompt rows whose queries its drafter wants */
    float *qcap;      /* [n_layers][tail][H*Dh] */
    uint64_t order;   /* admission order: the latest admitted is preempted first */
    uint64_t last_step; /* step of its latest round: the longest waiting goes first */
    bool updated;     /* emitted or finished this step */
    seer_rng rng_saved; /* the sampler's generator at the start of a step (rolled back on error) */
    double t_submit;
    seer_request_stats st;
    seer_token_logprob *lp; /* [lp_cap] of the generated tokens (p.logprobs), n_generated used */
    int lp_cap;
    seer_token_logprob *plp; /* [n_prompt] of the prompt's tokens (p.prompt_logprobs) */
    bool plp_done;           /* the prompt is computed: plp is whole */
    seer_kv_host_ref saved; /* its cache copied to the host tier when it was preempted */
    int saved_len;          /* tokens of it */
    uint64_t load_ticket;   /* REQ_LOADING: the copy from the host */
};

/* The time budget of prompt tokens beside decoding requests (stall.c). */
typedef struct {
    double stall;           /* seer_sched_params.prefill_stall; <= 0: whole chunks */
    int chunk;              /* the most prompt tokens of a step */
    double t_rounds, t_tok; /* seconds (moving averages; 0: none yet): a step of rounds
                             * alone; what a prompt token adds to a step */
} seer_stall;

/* The prompt tokens a step may put beside rounds, in [1, chunk]. */
int seer_stall_tokens(const seer_stall *st);
/* Folds in a finished step of dt seconds that held prompt_tokens prompt tokens and rounds
 * rounds (decode or verification). */
void seer_stall_observe(seer_stall *st, double dt, int prompt_tokens, int rounds);

/* The prefix cache (prefix.c): prompt prefixes kept in sequences of their own. */
typedef struct {
    seer_seq_id seq;       /* -1: spilled to the host tier */
    seer_kv_host_ref host; /* its pages there when spilled */
    int32_t *tokens; /* [n] */
    int n;
    uint64_t last_used;
} seer_prefix_entry;

typedef struct {
    seer_prefix_entry *e; /* [cap_all] */
    int n, cap;           /* entries; most of them on the device (its sequences) */
    int cap_all;          /* most entries, those spilled included */
    int unit;             /* entries and matches are multiples of it */
    seer_kv_host *host;   /* where evicted entries spill (NULL: they are dropped) */
} seer_prefix_cache;

/* host: the tier evicted entries spill to, or NULL. */
seer_status seer_prefix_init(seer_prefix_cache *pc, int slots, int unit, seer_kv_host *host);
void seer_prefix_free(seer_prefix_cache *pc, seer_context *c);
/* The entry sharing the longest prefix with t [n], cut to at most limit tokens and to a
 * multiple of the unit (*m; 0 and -1 returned when none), on the device (its seq) or spilled
 * (seq -1: its host pages). Marks it used at now. Spilled entries the tier evicted go. */
int seer_prefix_lookup(seer_prefix_cache *pc, const int32_t *t, int n, int limit, int *m, uint64_t now);
/* Keeps the first n tokens (cut to the unit) of seq, whose tokens are t. */
seer_status seer_prefix_insert(seer_prefix_cache *pc, seer_context *c, seer_seq_id seq, const int32_t *t,
                               int n, uint64_t now);
/* Frees the device pages of the least recently used entry on the device: spilled to the host
 * tier where there is one (dropped where that fails), else dropped. false: none on the device. */
bool seer_prefix_evict_lru(seer_prefix_cache *pc, seer_context *c);
/* Distinct KV pages the entries hold (-1: out of memory). */
int seer_prefix_pages(const seer_prefix_cache *pc, const seer_context *c);

/* The host tier in preemption (offload.c); h NULL: no tier, nothing done. */
/* Copies r's cache to the tier before it is preempted (r->saved; none where it does not fit). */
void seer_offload_save(seer_kv_host *h, seer_context *c, seer_request *r, uint64_t now, seer_sched_stats *st);
/* At r's admission: a new sequence *seq loading the first *m (at most limit) tokens of its
 * saved cache (*loading, the copy's *ticket); nothing when it has none. */
seer_status seer_offload_restore(seer_kv_host *h, seer_context *c, seer_request *r, int limit, uint64_t now,
                                 seer_seq_id *seq, int *m, bool *loading, uint64_t *ticket);
/* Waits for r's copy from the host if one is in flight (before its sequence is freed). */
void seer_offload_settle(seer_kv_host *h, seer_request *r);
/* Running requests whose copies are complete go on with their prefill; when no running request
 * could compute, waits for the copies. */
seer_status seer_offload_poll(seer_kv_host *h, seer_request **running, int n);

/* Request-side helpers for the scheduler (request.c). */
/* Makes room for a context of n_ctx tokens (+1 pending) in r->tokens. */
seer_status seer_request_reserve(seer_request *r, int n_ctx);
/* Appends an emitted token: text, stop set, limits. Sets r->finish when it ends r. */
void seer_request_emit(seer_request *r, int32_t t, int n_ctx);
void seer_request_finish(seer_request *r, seer_finish_reason why);
/* Keeps lp as the log-probability of the token about to be emitted (seer_request_emit comes
 * next); a request that cannot keep it (out of memory) finishes with SEER_FINISH_ERROR. */
void seer_request_put_logprob(seer_request *r, const seer_token_logprob *lp);
double seer_sched_now(void);

/* The prompt's log-probabilities (prompt_lp.c): the rows of a forward call whose logits give
 * a prompt token's, noted while the call is laid out and computed after it. */
typedef struct {
    seer_logprob_row *rows; /* [cap] */
    seer_request **req;     /* [cap] */
    int32_t *pos;           /* [cap] the position of the row; it gives token pos + 1's */
    int32_t *out;           /* [cap] the call's output row */
    float *lp, *top_lp;     /* [cap], [cap][SEER_TOP_LOGPROBS_MAX] */
    int32_t *top_id;        /* [cap][SEER_TOP_LOGPROBS_MAX] */
    int n, cap;
} seer_prompt_lp;
/* Whether the row of r at position j gives a prompt token's log-probability. */
static inline bool seer_prompt_lp_wants(const seer_request *r, int j) {
    return r->p.prompt_logprobs && j + 1 < r->n_prompt;
}
/* Notes r's row at position j, output row out of the call (room for cap rows, made here). */
seer_status seer_prompt_lp_note(seer_prompt_lp *p, int cap, seer_request *r, int j, int out);
/* The noted rows' values from the call's logits L [outputs][V] into their requests; the
 * notes are cleared. */
seer_status seer_prompt_lp_compute(seer_prompt_lp *p, seer_context *c, const float *L, int V);
void seer_prompt_lp_free(seer_prompt_lp *p);

#endif
