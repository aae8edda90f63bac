/*
 * sched.h: what the request object (request.c) and the scheduler (sched.c) share.
 *
 * A running request lives in the generator state of its speculation class (a seer_gen per
 * distinct seer_spec_params, so that the drafters of src/spec/ run unchanged): its
 * seer_gen_seq borrows the request's token array and sampler, which the request keeps when
 * it leaves (finished or preempted).
 */
#ifndef SEER_SCHED_H
#define SEER_SCHED_H

#include "seer.h"
#include "spec/spec.h"

#include <stdatomic.h>

typedef enum {
    REQ_NEW = 0, /* not submitted */
    REQ_WAITING, /* queued, no KV */
    REQ_PREFILL, /* tokens[0 .. n_cached) in the cache, more to feed */
    REQ_DECODE,  /* generating: the seer_gen_seq invariant holds */
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
    seer_detok *dt;
    char *text;       /* [text_cap] generated text, NUL-terminated */
    size_t text_len, text_cap, n_visible;
    atomic_bool cancel;
    seer_finish_reason finish;
    req_state state;
    seer_sched *sched;
    int group, h;     /* its seer_gen and handle there while it holds KV */
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
};

/* Request-side helpers for the scheduler (request.c). */
/* Makes room for a context of n_ctx tokens (+1 pending) in r->tokens. */
seer_status seer_request_reserve(seer_request *r, int n_ctx);
/* Appends an emitted token: text, stop set, limits. Sets r->finish when it ends r. */
void seer_request_emit(seer_request *r, int32_t t, int n_ctx);
void seer_request_finish(seer_request *r, seer_finish_reason why);
double seer_sched_now(void);

/* Test hook: when > 0, counts down once per step that reaches the end of its forward call
 * and verification; the step at which it reaches 0 fails there (SEER_ERR_BACKEND), after the
 * call has appended rows and samplers have drawn, so that the roll-back is exercised. */
extern int seer_sched_fail_for_tests;

#endif
