/*
 * sched.c: the scheduler. One step = one forward call on the target:
 *
 *   1. cancelled requests leave (their KV pages are freed);
 *   2. waiting requests are admitted while the context has sequences free;
 *   3. a plan under the token budget: the rounds of decoding requests (longest waiting
 *      first; pending token + up to G drafts), then prefill chunks while they fit. Each
 *      request's rows must be computed the same way alone and under load (greedy ids do not
 *      depend on the traffic). Two regimes:
 *      - free cuts (seer_context_prompt_cuts_free: a prompt token's bits do not depend on
 *        the call, the CPU, and CUDA in calls of up to its batch-invariant 256 tokens, so
 *        there with a chunk and mix_max within them; prefill_stall not negative): beside
 *        rounds, the prompt tokens
 *        are sized by time (stall.c): as many as the measured step times say add about
 *        prefill_stall times a step of the rounds alone, so a stream's gap between tokens
 *        stays near (1 + prefill_stall) times its idle one; without rounds, chunks of up
 *        to the chunk size;
 *      - fixed cuts (otherwise, or prefill_stall negative): a prompt is cut at fixed multiples of the chunk size and a chunk
 *        waits until it fits whole. The longest-waiting prefill's chunk goes before the
 *        rounds when it fits beside one row per round, or when the step before left it out;
 *        otherwise the rounds go first and it waits. So while a long prompt is read, every
 *        decoding request gets a round in at least every other call (its inter-token
 *        latency is at most about two calls, one of them a full chunk, as long as one row
 *        per round fits in the budget), and the prompt a chunk in at least every other call.
 *        The calls above mix_max (plan_step) keep the same alternation;
 *   4. the KV pages the step needs are counted first; while the pool cannot hold them the
 *      most recently admitted request is preempted (pages freed, tokens kept, recomputed
 *      when it is admitted again, as vLLM's recompute preemption; with a host tier its pages
 *      are copied there first and copied back when it is admitted again, offload.c): a step
 *      is never applied halfway;
 *   5. the drafters of each speculation class propose (their own forward calls);
 *   6. one seer_decode call over every planned row;
 *   7. verification per request, then emission (stop set, limits, text).
 *
 * The last prefill chunk of a request carries its last prompt token as the pending token of
 * a round without drafts: its logits give the first token, as a prompt fed in one call does.
 *
 * Every failure in 5-7 rolls back: sequences are rewound to their lengths before the step
 * and samplers' generators restored, so the requests are as they were.
 */
#include "sched/sched.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double sched_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define MAX_GROUPS 8

/* Test builds only (SEER_TEST_HOOKS, the tests that link this file into themselves): when
 * > 0, counts down once per step that reaches the end of its forward call and verification;
 * the step at which it reaches 0 fails there (SEER_ERR_BACKEND), after the call has appended
 * rows and samplers have drawn, so that the roll-back is exercised. */
#ifdef SEER_TEST_HOOKS
int seer_sched_fail_for_tests;
#define INJECTED_FAILURE (seer_sched_fail_for_tests > 0 && --seer_sched_fail_for_tests == 0)
#else
#define INJECTED_FAILURE false
#endif

typedef struct {
    bool used;
    seer_spec_params spec;
    seer_gen *g;
    int n_live;
    int emitted; /* tokens this step's rounds of the class emitted (auto's measured rate) */
    /* per step: this class's rounds (indices into the plan) */
    int n, *plan_idx;
} sched_group;

typedef struct {
    seer_request *r;
    int n_new;      /* rows this step */
    bool prefill;   /* a prefill chunk (the last one is a round without drafts) */
    bool round;     /* ends with a pending token whose logits are verified */
    int gam;        /* draft nodes allowed */
    int dl;         /* draft depth allowed */
    int len0;       /* cache length before the step */
    int k;          /* its entry in its class's round */
} plan_entry;

struct seer_sched {
    seer_context *ctx;
    seer_sched_params p;
    int budget, chunk, B;
    int mix_max;            /* most tokens of a call that mixes requests (0: any) */
    bool free_cuts;         /* prompts may be cut anywhere (seer_context_prompt_cuts_free and
                             * prefill_stall >= 0) */
    seer_stall stall;       /* the time budget of prompt tokens beside rounds */
    int stall_left;         /* prompt tokens the plan may still put beside rounds */
    bool alone, alone_last; /* the plan (the last step's) is one prefill chunk alone */
    seer_request *head;     /* the plan's longest-waiting prefilling request, or NULL */
    bool head_left;         /* the plan leaves the head's chunk out */
    bool chunk_turn;        /* the last step left the head's chunk out: this one plans it first */
    int B_run;              /* requests holding sequences at once: B minus the cache's */
    seer_prefix_cache pc;
    seer_kv_host *host;     /* the KV cache's host tier, or NULL */
    sched_group groups[MAX_GROUPS];
    seer_request **running; /* [B] */
    int n_running;
    seer_request **waiting; /* FIFO, grows */
    int n_waiting, cap_waiting;
    uint64_t next_order, n_step;
    seer_sched_stats stats;
    /* step scratch */
    plan_entry *plan;       /* [B] */
    int32_t *tok, *sq, *pos, *ids; /* [budget] */
    uint8_t *want, *capf, *prompt; /* [budget] */
    uint8_t *mask;          /* [budget][budget] tree mask of a call, allocated at the first tree */
    seer_prompt_lp plp;     /* the call's rows that give prompt tokens' log-probabilities */
    float *qbuf;            /* [n_layers][budget][H*Dh] captured queries, or NULL */
};

seer_sched_params seer_sched_default_params(void) {
    seer_sched_params p = {.max_batch_tokens = 0, .prefill_chunk = 0, .prefix_cache = 0, .mix_max_tokens = 0,
                           .prefill_stall = 0, .kv_host_bytes = 0};
    return p;
}

/* Drafters' settings compare by name (seer_spec_option_at), those of drafters registered at
 * run time included; the common ones by field. */
static bool spec_equal(const seer_spec_params *a, const seer_spec_params *b) {
    if (a->kind != b->kind)
        return false;
    if (a->kind == SEER_SPEC_NONE)
        return true;
    seer_spec_option o;
    for (int i = 0; seer_spec_option_at(i, &o); i++) {
        double x = 0, y = 0;
        if (seer_spec_get(a, o.flag, &x) != SEER_OK || seer_spec_get(b, o.flag, &y) != SEER_OK || x != y)
            return false;
    }
    return a->gamma == b->gamma && a->draft_model == b->draft_model && a->draft_weights == b->draft_weights &&
           a->tree_size == b->tree_size && a->tree_depth == b->tree_depth &&
           a->tree_replan == b->tree_replan && a->tree_draft_cost == b->tree_draft_cost &&
           a->tree_cost_points == b->tree_cost_points && a->tree_cost_n == b->tree_cost_n &&
           a->tree_cost == b->tree_cost && a->cost == b->cost;
}

static void group_clear(seer_sched *s, sched_group *gr) {
    if (gr->g)
        seer_gen_free(gr->g);
    free(gr->plan_idx);
    memset(gr, 0, sizeof *gr);
}

static void sched_free_body(seer_sched *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n_running; i++) {
        seer_request *r = s->running[i];
        seer_offload_settle(s->host, r);
        seer_round_detach(s->groups[r->group].g, r->h);
        r->state = REQ_NEW, r->sched = NULL;
    }
    for (int i = 0; i < s->n_waiting; i++) {
        seer_kv_host_drop(s->host, s->waiting[i]->saved);
        s->waiting[i]->saved = SEER_KV_HOST_NONE;
        s->waiting[i]->state = REQ_NEW, s->waiting[i]->sched = NULL;
    }
    for (int i = 0; i < MAX_GROUPS; i++)
        group_clear(s, &s->groups[i]);
    seer_prefix_free(&s->pc, s->ctx);
    seer_kv_host_free(s->host);
    free(s->running), free(s->waiting), free(s->plan);
    free(s->tok), free(s->sq), free(s->pos), free(s->ids), free(s->want), free(s->capf), free(s->prompt), free(s->qbuf);
    seer_prompt_lp_free(&s->plp);
    free(s->mask);
    free(s);
}

/* the failure that led here stays the one the caller reads */
void seer_sched_free(seer_sched *s) { SEER_ERR_KEPT(sched_free_body(s)); }

seer_status seer_sched_init(seer_context *ctx, seer_sched_params params, seer_sched **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    SEER_CHECK_ARG(ctx);
    const int TB = ctx->params.n_batch_max;
    if (params.max_batch_tokens < 0 || params.max_batch_tokens > TB)
        return seer_err(SEER_ERR_INVALID_ARG, "token budget %d is outside [1, n_batch_max %d]",
                        params.max_batch_tokens, TB);
    seer_sched *s = calloc(1, sizeof *s);
    if (!s)
        return seer_err(SEER_ERR_OOM, "out of memory");
    s->ctx = ctx;
    s->p = params;
    s->budget = params.max_batch_tokens ? params.max_batch_tokens : TB;
    s->chunk = params.prefill_chunk ? params.prefill_chunk : (s->budget < 256 ? s->budget : 256);
    if (s->chunk < 1 || s->chunk > s->budget) {
        const int budget = s->budget;
        free(s);
        return seer_err(SEER_ERR_INVALID_ARG, "prefill chunk %d is outside [1, budget %d]",
                        params.prefill_chunk, budget);
    }
    if (params.mix_max_tokens < 0) {
        free(s);
        return seer_err(SEER_ERR_INVALID_ARG, "mix_max_tokens %d is negative", params.mix_max_tokens);
    }
    s->mix_max = params.mix_max_tokens ? params.mix_max_tokens : ctx->model->be->ops->invariant_max_tokens;
    if (!(params.prefill_stall <= 1e3f)) { /* NaN too */
        free(s);
        return seer_err(SEER_ERR_INVALID_ARG, "prefill_stall %g is above 1000", (double)params.prefill_stall);
    }
    /* free cuts hold in calls the backend computes batch-invariantly (CUDA: 256 tokens) */
    const int inv = ctx->model->be->ops->invariant_max_tokens;
    s->free_cuts = seer_context_prompt_cuts_free(ctx) && params.prefill_stall >= 0 &&
                   (inv == 0 || (s->chunk <= inv && s->mix_max && s->mix_max <= inv));
    s->stall = (seer_stall){.stall = params.prefill_stall > 0 ? params.prefill_stall : 1, .chunk = s->chunk};
    s->B = ctx->params.n_seq_max;
    if (params.prefix_cache < 0 || params.prefix_cache >= s->B) {
        free(s);
        return seer_err(SEER_ERR_INVALID_ARG, "prefix cache of %d sequences leaves none of the context's %d for requests",
                        params.prefix_cache, ctx->params.n_seq_max);
    }
    s->B_run = s->B - params.prefix_cache;
    int unit = ctx->params.page_size; /* lcm(page size, chunk); with free cuts the page size */
    while (!s->free_cuts && unit % s->chunk)
        unit += ctx->params.page_size;
    if (params.kv_host_bytes < 0) {
        free(s);
        return seer_err(SEER_ERR_INVALID_ARG, "a host tier of %lld bytes: the size must not be negative",
                        (long long)params.kv_host_bytes);
    }
    seer_status hs = params.kv_host_bytes ? seer_kv_host_init(ctx, (uint64_t)params.kv_host_bytes, &s->host) : SEER_OK;
    if (hs != SEER_OK) {
        free(s);
        return hs;
    }
    if (seer_prefix_init(&s->pc, params.prefix_cache, unit, s->host) != SEER_OK) {
        seer_kv_host_free(s->host);
        free(s);
        return seer_err(SEER_ERR_OOM, "out of memory for the prefix cache");
    }
    s->running = calloc(s->B, sizeof *s->running);
    s->plan = calloc(s->B, sizeof *s->plan);
    s->tok = seer_malloc_array(s->budget, sizeof(int32_t));
    s->sq = seer_malloc_array(s->budget, sizeof(int32_t));
    s->pos = seer_malloc_array(s->budget, sizeof(int32_t));
    s->ids = seer_malloc_array(s->budget, sizeof(int32_t));
    s->want = calloc(s->budget, 1);
    s->capf = calloc(s->budget, 1);
    s->prompt = calloc(s->budget, 1);
    if (!s->running || !s->plan || !s->tok || !s->sq || !s->pos || !s->ids || !s->want || !s->capf || !s->prompt) {
        seer_sched_free(s);
        return seer_err(SEER_ERR_OOM, "out of memory for the scheduler");
    }
    s->stats.kv_pages_total = ctx->kv->n_pages;
    *out = s;
    return SEER_OK;
}

/* The class of spec: an existing one, or a new seer_gen (which checks the settings). */
static seer_status find_group(seer_sched *s, const seer_spec_params *spec, int *out) {
    int free_slot = -1;
    for (int i = 0; i < MAX_GROUPS; i++) {
        if (s->groups[i].used && spec_equal(&s->groups[i].spec, spec)) {
            *out = i;
            return SEER_OK;
        }
        if (free_slot < 0 && !s->groups[i].used)
            free_slot = i;
    }
    if (free_slot < 0) /* reuse a class no request is in */
        for (int i = 0; i < MAX_GROUPS && free_slot < 0; i++)
            if (s->groups[i].n_live == 0) {
                bool queued = false;
                for (int w = 0; w < s->n_waiting && !queued; w++)
                    queued = s->waiting[w]->group == i;
                if (!queued) {
                    group_clear(s, &s->groups[i]);
                    free_slot = i;
                }
            }
    if (free_slot < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "more than %d distinct speculation settings at once", MAX_GROUPS);
    sched_group *gr = &s->groups[free_slot];
    if (seer_gen_best_first(spec)) /* its trees may exceed the scheduler's one call */
        return seer_err(SEER_ERR_INVALID_ARG, "best-first trees run in the generator (seer_gen), not the scheduler");
    SEER_TRY(seer_gen_init(s->ctx, *spec, &gr->g));
    gr->plan_idx = malloc(sizeof(int) * s->B);
    if (!gr->plan_idx) {
        group_clear(s, gr);
        return seer_err(SEER_ERR_OOM, "out of memory");
    }
    gr->used = true;
    gr->spec = *spec;
    *out = free_slot;
    return SEER_OK;
}

/* Room for one more waiting request; on failure the queue is as it was. */
static seer_status waiting_reserve(seer_sched *s) {
    if (s->n_waiting < s->cap_waiting)
        return SEER_OK;
    const int cap = s->cap_waiting ? 2 * s->cap_waiting : 16;
    seer_request **w = realloc(s->waiting, sizeof *w * cap);
    if (!w)
        return seer_err(SEER_ERR_OOM, "out of memory");
    s->waiting = w;
    s->cap_waiting = cap;
    return SEER_OK;
}

seer_status seer_sched_submit(seer_sched *s, seer_request *r) {
    SEER_CHECK_ARG(s);
    SEER_CHECK_ARG(r);
    if (r->state != REQ_NEW || r->finish != SEER_FINISH_NONE)
        return seer_err(SEER_ERR_INVALID_ARG, "the request was submitted already");
    if (r->model != s->ctx->model)
        return seer_err(SEER_ERR_INVALID_ARG, "the request is for another model");
    const int n_ctx = s->ctx->params.n_ctx;
    if (r->n_prompt >= n_ctx)
        return seer_err(SEER_ERR_CONTEXT, "the prompt has %d tokens; the context holds %d", r->n_prompt, n_ctx);
    SEER_TRY(waiting_reserve(s));
    int grp = -1;
    SEER_TRY(find_group(s, &r->p.spec, &grp));
    SEER_TRY(seer_request_reserve(r, n_ctx));
    r->group = grp;
    r->h = -1;
    r->sched = s;
    r->state = REQ_WAITING;
    r->t_submit = seer_sched_now();
    s->waiting[s->n_waiting++] = r;
    s->stats.tokens_prompt += r->n_prompt;
    return SEER_OK;
}

/* Gives r's sequence and drafter state back (r keeps tokens and sampler). */
static void detach(seer_sched *s, seer_request *r) {
    sched_group *gr = &s->groups[r->group];
    seer_offload_settle(s->host, r);
    seer_round_detach(gr->g, r->h);
    gr->n_live--;
    r->h = -1;
    free(r->qcap);
    r->qcap = NULL;
}

static void remove_running(seer_sched *s, int i) {
    memmove(s->running + i, s->running + i + 1, sizeof *s->running * (s->n_running - i - 1));
    s->n_running--;
}

static void remove_waiting(seer_sched *s, int i) {
    memmove(s->waiting + i, s->waiting + i + 1, sizeof *s->waiting * (s->n_waiting - i - 1));
    s->n_waiting--;
}

/* Takes r's KV back; it goes to the front of the queue with everything it emitted. */
static seer_status preempt(seer_sched *s, int i) {
    seer_request *r = s->running[i];
    SEER_TRY(waiting_reserve(s));
    seer_offload_save(s->host, s->ctx, r, s->n_step, &s->stats);
    detach(s, r);
    remove_running(s, i);
    memmove(s->waiting + 1, s->waiting, sizeof *s->waiting * s->n_waiting);
    s->waiting[0] = r;
    s->n_waiting++;
    r->state = REQ_WAITING;
    r->st.n_preempted++;
    s->stats.n_preemptions++;
    return SEER_OK;
}

/* Admits r: a sequence, a handle in its class, its drafter's prefill wishes. */
static seer_status admit(seer_sched *s, seer_request *r) {
    sched_group *gr = &s->groups[r->group];
    seer_gen *g = gr->g;
    seer_seq_id seq;
    const int n = r->n_tokens;
    int tail = seer_round_q_rows(g, n);
    if (tail > n)
        tail = n;
    /* its own cache from the host tier, or a cached prefix, leaving the pending token and the
     * rows whose queries the drafter wants to be computed */
    const int limit = n - (tail > 1 ? tail : 1);
    int m = 0, from_cache = 0;
    uint64_t ticket = 0;
    bool loading = false;
    /* (a request that wants its prompt's log-probabilities computes every row it has not: no
     * cached prefix, and its own copy only once its prompt is whole) */
    const bool every_row = r->p.prompt_logprobs && !r->plp_done;
    SEER_TRY(seer_offload_restore(s->host, s->ctx, r, every_row ? 0 : limit, s->n_step, &seq, &m, &loading, &ticket));
    const int e = loading || r->p.prompt_logprobs ? -1 : seer_prefix_lookup(&s->pc, r->tokens, n, limit, &m, s->n_step);
    if (e >= 0 && s->pc.e[e].seq < 0) {
        loading = seer_kv_host_load(s->host, s->pc.e[e].host, m, s->n_step, &seq, &ticket) == SEER_OK;
        from_cache = loading ? m : 0;
        if (!loading) { /* (the pool short of the pages) computed instead */
            m = 0;
            SEER_TRY(seer_seq_new(s->ctx, &seq));
        }
    } else if (e >= 0) {
        SEER_TRY(seer_seq_fork(s->ctx, s->pc.e[e].seq, &seq));
        seer_status st = seer_seq_rewind(s->ctx, seq, m);
        if (st != SEER_OK) {
            seer_seq_free(s->ctx, seq);
            return st;
        }
        from_cache = m;
    } else if (!loading) {
        SEER_TRY(seer_seq_new(s->ctx, &seq));
    }
    r->state = loading ? REQ_LOADING : REQ_WAITING; /* what a failure below must settle */
    r->load_ticket = ticket;
    if (tail > 0) {
        const seer_model_info *in = &s->ctx->model->info;
        r->qcap = seer_malloc_array((size_t)in->n_layers * tail * in->n_heads * in->head_dim, sizeof(float));
        if (!r->qcap) {
            seer_offload_settle(s->host, r);
            seer_seq_free(s->ctx, seq);
            r->state = REQ_WAITING;
            return seer_err(SEER_ERR_OOM, "out of memory for prefill queries");
        }
    }
    const seer_round_seq q = {.seq = seq, .tokens = r->tokens, .n_tokens = r->n_tokens, .n_prompt = r->n_prompt,
                              .cap = r->cap, .max_new = r->p.max_tokens, .ignore_eos = r->p.ignore_eos,
                              .smp = r->smp, .sp = r->p.sampler, .logprobs = r->p.logprobs,
                              .top_logprobs = r->p.top_logprobs, .con = r->con};
    int h;
    seer_status st = seer_round_attach(g, &q, &h);
    if (st != SEER_OK) {
        free(r->qcap);
        r->qcap = NULL;
        seer_offload_settle(s->host, r);
        seer_seq_free(s->ctx, seq);
        r->state = REQ_WAITING;
        return st;
    }
    gr->n_live++;
    r->h = h;
    r->seq = seq;
    r->tail = tail;
    r->n_cached = m;
    r->st.n_prefix_reused += from_cache;
    s->stats.prefix_hits += from_cache / s->ctx->params.page_size;
    if (loading) {
        r->st.n_host_restored += m;
        s->stats.kv_host_hits++;
    }
    r->n_target = n;
    r->state = loading ? REQ_LOADING : REQ_PREFILL;
    r->order = s->next_order++;
    return SEER_OK;
}

/* Pages seq needs to grow by add tokens (new pages and a copy of a shared last page). */
static int pages_needed(const seer_context *c, seer_seq_id seq, int add) {
    const seer_kv *kv = c->kv;
    const seer_kv_seq *q = &kv->seqs[seq];
    const int ps = kv->page_size;
    int need = (q->len + add + ps - 1) / ps - q->n_pages;
    if (need < 0)
        need = 0;
    if (add > 0 && q->len % ps && q->len / ps < q->n_pages && kv->refcount[q->pages[q->len / ps]] > 1)
        need++;
    return need;
}

static int cmp_last_step(const void *a, const void *b) {
    const seer_request *x = *(seer_request *const *)a, *y = *(seer_request *const *)b;
    if (x->last_step != y->last_step)
        return x->last_step < y->last_step ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* The next chunk of prefilling request r: with fixed cuts, up to the next multiple of s->chunk
 * from the start, the same cuts whatever else runs; with free cuts, up to s->chunk tokens
 * and the prompt tokens the plan may still put beside rounds (stall_left). */
static int chunk_len(const seer_sched *s, const seer_request *r) {
    if (s->free_cuts) {
        int n = r->n_target - r->n_cached;
        n = n < s->chunk ? n : s->chunk;
        return n < s->stall_left ? n : s->stall_left;
    }
    int end = (r->n_cached / s->chunk + 1) * s->chunk;
    if (end > r->n_target)
        end = r->n_target;
    return end - r->n_cached;
}

/*
 * Plans entries into s->plan under a budget of left tokens; returns their number.
 *
 * Decoding requests' rounds come before prefill chunks (Sarathi-Serve's stall-free batching),
 * but a chunk is never cut to the room the rounds leave (the cuts are fixed), so the chunk of
 * the longest-waiting prefill (s->head) goes first when it fits beside one row per round (the
 * rounds' drafts then take what is left), or when the last step left it out (chunk_turn);
 * otherwise the rounds take the budget and it waits one step. A stream thus gets a round in
 * at least every other call, and the head prefill a chunk in at least every other call.
 */
static int plan_fill(seer_sched *s, int left) {
    int n = 0;
    seer_request *order[s->B > 0 ? s->B : 1];
    memcpy(order, s->running, sizeof *order * s->n_running);
    qsort(order, s->n_running, sizeof *order, cmp_last_step);
    seer_request *head = NULL;
    int n_rounds = 0;
    for (int i = 0; i < s->n_running; i++) {
        if (!head && order[i]->state == REQ_PREFILL)
            head = order[i];
        n_rounds += order[i]->state == REQ_DECODE;
    }
    s->head = head;
    s->stall_left = n_rounds > 0 ? seer_stall_tokens(&s->stall) : s->budget;
    if (s->free_cuts && head && left - n_rounds < s->stall_left) /* room for a row per round */
        s->stall_left = left - n_rounds > 1 ? left - n_rounds : 1;
    const bool head_first = head && (s->chunk_turn || chunk_len(s, head) + n_rounds <= left);
    /* pass 0: the head's chunk when it goes first; pass 1: rounds; pass 2: prefill chunks
     * while they fit, longest waiting first */
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < s->n_running && left > 0; i++) {
            seer_request *r = order[i];
            bool taken = false;
            for (int e = 0; e < n && !taken; e++)
                taken = s->plan[e].r == r;
            if (taken)
                continue;
            plan_entry pe = {.r = r};
            if (r->state == REQ_PREFILL && pass != 1) {
                if (pass == 0 && (r != head || !head_first))
                    continue;
                pe.n_new = chunk_len(s, r);
                if (s->free_cuts && pe.n_new > left)
                    pe.n_new = left; /* cut to the room */
                pe.prefill = true;
                pe.round = r->n_cached + pe.n_new == r->n_target;
                if (pe.n_new > left || pe.n_new <= 0)
                    continue;
                s->stall_left -= pe.n_new;
            } else if (r->state == REQ_DECODE && pass == 1) {
                /* drafts within the budget less a row for each round still to plan */
                const int later = --n_rounds, room = left - later > 1 ? left - later : 1;
                /* the request's own limit cuts the depth */
                const int rest = r->p.max_tokens - (r->n_tokens - r->n_prompt) - 1;
                seer_round_limits(s->groups[r->group].g, r->h, room, rest > 0 ? rest : 0, &pe.gam, &pe.dl);
                pe.n_new = 1 + pe.gam;
                pe.round = true;
            } else {
                continue;
            }
            pe.len0 = seer_seq_len(s->ctx, r->seq);
            s->plan[n++] = pe;
            left -= pe.n_new;
        }
    return n;
}

/*
 * Plans the step into s->plan; returns the number of entries. A call of more tokens than the
 * backend computes batch-invariantly (mix_max) may not mix requests: a row's bits would then
 * depend on the other traffic. So a prefill chunk larger than that runs alone in its call
 * (its size comes from the request's own cuts), and the other requests' rounds and small
 * chunks run in calls of at most mix_max tokens, the two kinds of call taking turns. Sets
 * s->head_left: the plan leaves the head prefill out (the next step plans it first).
 */
static int plan_step(seer_sched *s) {
    s->alone = false;
    int n = plan_fill(s, s->budget), tokens = 0, big = -1;
    for (int e = 0; e < n; e++) {
        tokens += s->plan[e].n_new;
        if (big < 0 && s->plan[e].prefill && s->plan[e].n_new > s->mix_max)
            big = e;
    }
    if (s->mix_max && tokens > s->mix_max) {
        if (n == 1) { /* a chunk above the limit with nothing beside it: alone if others wait */
            s->alone = s->plan[0].prefill && s->n_running > 1;
        } else if (big < 0) { /* every entry fits the limit: the plan under it takes at least one */
            n = plan_fill(s, s->mix_max);
        } else {
            const plan_entry alone = s->plan[big];
            const int m = plan_fill(s, s->mix_max);
            if (!s->alone_last || m == 0) {
                s->plan[0] = alone;
                s->alone = true;
                n = 1;
            } else {
                n = m;
            }
        }
    }
    s->head_left = s->head != NULL;
    for (int e = 0; e < n && s->head_left; e++)
        s->head_left = s->plan[e].r != s->head;
    return n;
}

/* Pages the plan needs: drafts are written into the target's cache (self-drafts) before the
 * verification rewrites them, so a round needs room for 1 + gam rows. */
static int plan_pages(seer_sched *s, int n) {
    int need = 0;
    for (int e = 0; e < n; e++)
        need += pages_needed(s->ctx, s->plan[e].r->seq, s->plan[e].n_new);
    return need;
}

static void notify(seer_sched *s, seer_request *r) {
    if (r->updated && r->p.on_update) {
        r->updated = false;
        r->p.on_update(r, r->p.user);
    }
    r->updated = false;
}

static void retire(seer_sched *s, int i) {
    seer_request *r = s->running[i];
    detach(s, r);
    seer_kv_host_drop(s->host, r->saved);
    r->saved = SEER_KV_HOST_NONE;
    remove_running(s, i);
    r->state = REQ_DONE;
    r->sched = NULL;
    s->stats.n_finished++;
}

/* Undoes the effects of a failed step on every planned request. */
static void roll_back(seer_sched *s, int n) {
    for (int e = 0; e < n; e++) {
        plan_entry *pe = &s->plan[e];
        seer_seq_clear_view(s->ctx, pe->r->seq);
        if (seer_seq_len(s->ctx, pe->r->seq) > pe->len0)
            seer_seq_rewind(s->ctx, pe->r->seq, pe->len0);
        *seer_sampler_rng(pe->r->smp) = pe->r->rng_saved;
    }
}

/* Each class's round entries: decoding requests first (the drafters see those), then the
 * last prefill chunks (rounds without drafts); then the drafters of each class propose. */
static seer_status plan_rounds(seer_sched *s, int n) {
    for (int i = 0; i < MAX_GROUPS; i++) {
        s->groups[i].n = 0;
        if (s->groups[i].g)
            seer_round_begin(s->groups[i].g);
    }
    for (int pass = 0; pass < 2; pass++)
        for (int e = 0; e < n; e++) {
            plan_entry *pe = &s->plan[e];
            if (!pe->round || pe->prefill != (pass == 1))
                continue;
            sched_group *gr = &s->groups[pe->r->group];
            pe->k = seer_round_add(gr->g, pe->r->h, pe->gam, pe->dl);
            gr->plan_idx[gr->n++] = e;
        }
    for (int i = 0; i < MAX_GROUPS; i++) {
        sched_group *gr = &s->groups[i];
        int nd = 0;
        while (nd < gr->n && !s->plan[gr->plan_idx[nd]].prefill)
            nd++;
        if (!gr->g || !nd)
            continue;
        SEER_TRY(seer_round_propose(gr->g, nd));
        for (int k = 0; k < nd; k++)
            s->plan[gr->plan_idx[k]].n_new = 1 + seer_round_nodes(gr->g, k);
    }
    return SEER_OK;
}

/* Lays out the rows of prefill entry pe (a prompt chunk) at b's end: the last one's output
 * goes to the round, the rows that give prompt tokens' log-probabilities to s->plp. */
static seer_status put_chunk(seer_sched *s, const plan_entry *pe, seer_round_rows *b, int *ncap) {
    seer_request *r = pe->r;
    for (int j = r->n_cached; j < r->n_cached + pe->n_new; j++) {
        const int T = b->T++;
        const bool round = pe->round && j == r->n_target - 1, plp = seer_prompt_lp_wants(r, j);
        b->tok[T] = r->tokens[j];
        b->seq[T] = r->seq;
        b->pos[T] = j;
        b->want[T] = round || plp;
        s->capf[T] = r->tail > 0 && j >= r->n_target - r->tail;
        s->prompt[T] = j < r->n_prompt; /* not a generated token recomputed */
        *ncap += s->capf[T];
        if (round)
            seer_round_out_row(s->groups[r->group].g, pe->k, b->n_out);
        else if (plp)
            SEER_TRY(seer_prompt_lp_note(&s->plp, s->budget, r, j, b->n_out));
        b->n_out += b->want[T];
    }
    return SEER_OK;
}

/* The tree mask of a call of T rows laid out from the plan's n entries. */
static uint8_t *call_mask(seer_sched *s, int n, int T) {
    if (!s->mask)
        s->mask = seer_malloc_array((size_t)s->budget * s->budget, 1);
    if (!s->mask)
        return NULL;
    memset(s->mask, 0, (size_t)T * T);
    for (int e = 0, t = 0; e < n; e++) {
        const plan_entry *pe = &s->plan[e];
        if (pe->prefill) /* a prompt chunk: causal */
            for (int a = 0; a < pe->n_new; a++)
                memset(s->mask + (size_t)(t + a) * T + t, 1, a + 1);
        else
            seer_round_mask(s->groups[pe->r->group].g, pe->k, s->mask, T);
        t += pe->n_new;
    }
    return s->mask;
}

/* Steps 5-7 for a plan of n entries; on failure the caller rolls back. */
static seer_status run_plan(seer_sched *s, int n) {
    seer_context *c = s->ctx;
    const seer_model_info *in = &c->model->info;
    const size_t qd = (size_t)in->n_heads * in->head_dim;
    for (int e = 0; e < n; e++)
        s->plan[e].r->rng_saved = *seer_sampler_rng(s->plan[e].r->smp);
    SEER_TRY(plan_rounds(s, n));
    /* the one forward call */
    seer_round_rows b = {.tok = s->tok, .seq = s->sq, .pos = s->pos, .want = s->want, .chains = true};
    int ncap = 0;
    bool amax = true;
    s->plp.n = 0;
    for (int e = 0; e < n; e++) {
        plan_entry *pe = &s->plan[e];
        seer_gen *g = s->groups[pe->r->group].g;
        if (pe->round)
            amax &= seer_round_greedy(g, pe->k);
        if (pe->prefill) {
            SEER_TRY(put_chunk(s, pe, &b, &ncap));
            continue;
        }
        const int t = b.T, m = seer_round_put(g, pe->k, &b);
        memset(s->capf + t, 0, m);
        memset(s->prompt + t, 0, m);
    }
    const int T = b.T;
    if (ncap) {
        if (!s->qbuf)
            s->qbuf = seer_malloc_array((size_t)in->n_layers * s->budget * qd, sizeof(float));
        if (!s->qbuf)
            return seer_err(SEER_ERR_OOM, "out of memory for captured queries");
    }
    /* trees attend to their ancestors; without one the call stays causal as always */
    uint8_t *mask = b.chains ? NULL : call_mask(s, n, T);
    if (!b.chains && !mask)
        return seer_err(SEER_ERR_OOM, "out of memory for a tree mask");
    seer_batch call = {.n_tokens = T, .token = s->tok, .seq = s->sq, .pos = s->pos, .logits = s->want,
                       .mask = mask, .capture = ncap ? s->capf : NULL, .queries = s->qbuf, .prompt = s->prompt};
    float *L = NULL;
    amax &= s->plp.n == 0; /* the prompt's log-probabilities read the logits */
    /* the rows' masks while the call runs: only the verification after it needs them */
    for (int i = 0; i < MAX_GROUPS; i++)
        if (s->groups[i].n)
            seer_round_masks(s->groups[i].g, 0, s->groups[i].n, true);
    const seer_status fst = amax ? seer_decode_argmax(c, &call, s->ids) : seer_decode_keep(c, &call, &L);
    for (int i = 0; i < MAX_GROUPS; i++)
        if (s->groups[i].n)
            seer_round_masks(s->groups[i].g, 0, s->groups[i].n, false);
    SEER_TRY(fst);
    SEER_TRY(seer_prompt_lp_compute(&s->plp, c, L, in->n_vocab));
    for (int i = 0; i < MAX_GROUPS; i++)
        if (s->groups[i].n)
            SEER_TRY(seer_round_verify(s->groups[i].g, 0, s->groups[i].n, amax ? s->ids : NULL, L));
    if (INJECTED_FAILURE)
        return seer_err(SEER_ERR_BACKEND, "injected failure (test hook)");
    /* queries of prompt tails, in batch order */
    for (int e = 0, t = 0, cr = 0; e < n && ncap; e++) {
        plan_entry *pe = &s->plan[e];
        seer_request *r = pe->r;
        if (!pe->prefill) {
            t += pe->n_new;
            continue;
        }
        for (int j = r->n_cached; j < r->n_cached + pe->n_new; j++, t++) {
            if (!s->capf[t])
                continue;
            const int ti = j - (r->n_target - r->tail);
            for (int l = 0; l < in->n_layers; l++)
                memcpy(r->qcap + ((size_t)l * r->tail + ti) * qd, s->qbuf + ((size_t)l * ncap + cr) * qd,
                       qd * sizeof(float));
            cr++;
        }
    }
    return SEER_OK;
}

typedef struct {
    seer_request *r;
    int n_ctx;
    const seer_gen *g;
    int k, j; /* the round entry and the token of its round being emitted */
} emit_target;

/* A round's token into its request: its log-probability, text, stop set, limits; true when
 * the request ends. */
static bool emit_request(void *user, int32_t t) {
    emit_target *to = user;
    const seer_token_logprob *lp = seer_round_logprob(to->g, to->k, to->j++);
    if (lp)
        seer_request_put_logprob(to->r, lp);
    seer_request_emit(to->r, t, to->n_ctx);
    return to->r->finish != SEER_FINISH_NONE;
}

/* The last prefill chunk of r was verified and settled (with status st): r decodes from now
 * on, and its drafter takes it on. */
static seer_status prompt_done(seer_sched *s, seer_request *r, seer_status st) {
    seer_gen *g = s->groups[r->group].g;
    r->n_cached = r->n_target;
    r->state = REQ_DECODE;
    r->plp_done = r->plp != NULL;
    /* the prompt's pages for later requests; a failure here only means no entry */
    if (st == SEER_OK)
        (void)seer_prefix_insert(&s->pc, s->ctx, r->seq, r->tokens, r->n_prompt, s->n_step);
    if (st == SEER_OK && r->tail > 0)
        st = seer_round_prefill_q(g, r->h, r->qcap, r->tail);
    if (st == SEER_OK)
        st = seer_round_added(g, r->h);
    free(r->qcap);
    r->qcap = NULL;
    return st;
}

/* Emission after a successful call. Drafter failures here end that request alone. */
static void commit(seer_sched *s, int n) {
    for (int e = 0; e < n; e++) {
        plan_entry *pe = &s->plan[e];
        seer_request *r = pe->r;
        sched_group *gr = &s->groups[r->group];
        seer_gen *g = gr->g;
        r->st.n_computed += pe->n_new;
        s->stats.tokens_computed += pe->n_new;
        r->last_step = s->n_step;
        if (pe->prefill && !pe->round) {
            r->n_cached += pe->n_new;
            continue;
        }
        seer_status st = seer_round_settle(g, pe->k, !pe->prefill);
        if (pe->prefill)
            st = prompt_done(s, r, st);
        emit_target to = {.r = r, .n_ctx = s->ctx->params.n_ctx, .g = g, .k = pe->k};
        const seer_round_result res = seer_round_emit(g, pe->k, emit_request, &to);
        r->st.rounds++;
        r->st.drafted += res.drafted;
        r->st.accepted += res.accepted;
        /* auto: the kind this round ran with (nothing drafted when it was plain) */
        const seer_spec_kind kind = seer_round_kind(g);
        s->stats.spec_drafted[kind] += res.drafted;
        s->stats.spec_accepted[kind] += res.accepted;
        if (gr->spec.kind == SEER_SPEC_AUTO && !pe->prefill)
            s->stats.spec_auto_decisions[kind]++;
        s->stats.tokens_generated += res.emitted;
        gr->emitted += res.emitted;
        if (st == SEER_OK && !pe->prefill && r->finish == SEER_FINISH_NONE)
            st = seer_round_verified(g, pe->k);
        if (st != SEER_OK)
            seer_request_finish(r, SEER_FINISH_ERROR);
    }
}

seer_status seer_sched_step(seer_sched *s, int *n_active) {
    SEER_CHECK_ARG(s);
    seer_context *c = s->ctx;
    seer_request *done[s->B + s->n_waiting + 1];
    int n_done = 0;
    /* 1. cancellations */
    for (int i = s->n_running - 1; i >= 0; i--)
        if (atomic_load(&s->running[i]->cancel)) {
            seer_request *r = s->running[i];
            seer_request_finish(r, SEER_FINISH_CANCELLED);
            retire(s, i);
            done[n_done++] = r;
        }
    for (int i = s->n_waiting - 1; i >= 0; i--)
        if (atomic_load(&s->waiting[i]->cancel)) {
            seer_request *r = s->waiting[i];
            seer_request_finish(r, SEER_FINISH_CANCELLED);
            remove_waiting(s, i);
            seer_kv_host_drop(s->host, r->saved);
            r->saved = SEER_KV_HOST_NONE;
            r->state = REQ_DONE;
            r->sched = NULL;
            s->stats.n_finished++;
            done[n_done++] = r;
        }
    /* 2. admissions, while a sequence is free and the pool holds what the request has so
     * far (always when nothing runs, so that a request too large ends rather than waits) */
    int reserved = 0;
    const int ps = c->kv->page_size;
    while (s->n_waiting && s->n_running < s->B_run) {
        seer_request *r = s->waiting[0];
        int need = (r->n_tokens + ps) / ps;
        while (reserved + need > seer_kv_free_pages(c) && seer_prefix_evict_lru(&s->pc, c))
            ;
        if (s->n_running && reserved + need > seer_kv_free_pages(c))
            break;
        if (admit(s, r) != SEER_OK) {
            /* out of memory for its state: it ends rather than blocks the queue */
            remove_waiting(s, 0);
            seer_request_finish(r, SEER_FINISH_ERROR);
            r->state = REQ_DONE;
            r->sched = NULL;
            done[n_done++] = r;
            continue;
        }
        reserved += need;
        remove_waiting(s, 0);
        s->running[s->n_running++] = r;
    }
    /* copies from the host tier that have completed: those requests go on with their prefill */
    seer_status st = seer_offload_poll(s->host, s->running, s->n_running);
    /* 3-4. the plan, within the pool; first the groups' tree shapes (online planning) for
     * the rounds below, between rounds as the shapes must change */
    for (int i = 0; i < MAX_GROUPS && st == SEER_OK; i++)
        if (s->groups[i].g)
            st = seer_round_plan(s->groups[i].g);
    int n = st == SEER_OK ? plan_step(s) : 0;
    while (n > 0 && plan_pages(s, n) > seer_kv_free_pages(c)) {
        if (seer_prefix_evict_lru(&s->pc, c)) /* cached prefixes go before running requests */
            continue;
        int vi = -1, oldest = 0;
        for (int i = 1; i < s->n_running; i++)
            if (s->running[i]->order < s->running[oldest]->order)
                oldest = i;
        for (int i = 0; i < s->n_running; i++)
            if (i != oldest && (vi < 0 || s->running[i]->order > s->running[vi]->order))
                vi = i;
        if (vi < 0) { /* it alone does not fit in the whole pool */
            seer_request *r = s->running[oldest];
            seer_request_finish(r, SEER_FINISH_LENGTH);
            retire(s, oldest);
            done[n_done++] = r;
        } else if ((st = preempt(s, vi)) != SEER_OK) {
            n = 0;
            break;
        }
        n = plan_step(s);
    }
    if (n > 0) {
        const double t0 = sched_now_s();
        st = run_plan(s, n);
        if (st != SEER_OK) {
            roll_back(s, n);
        } else {
            s->n_step++;
            s->stats.n_steps++;
            s->alone_last = s->alone;
            s->chunk_turn = s->head_left;
            if (s->alone)
                s->stats.n_calls_alone++;
            else if (n > 1) {
                int t = 0;
                for (int e = 0; e < n; e++)
                    t += s->plan[e].n_new;
                if (t > s->stats.max_mixed_tokens)
                    s->stats.max_mixed_tokens = t;
            }
            for (int i = 0; i < MAX_GROUPS; i++)
                s->groups[i].emitted = 0;
            commit(s, n);
            /* auto classes measure their rate over the whole step (the call they share with
             * prefill chunks and other classes included) */
            const double dt = sched_now_s() - t0;
            int n_prompt = 0, n_rounds = 0;
            for (int e = 0; e < n; e++) {
                n_prompt += s->plan[e].prefill ? s->plan[e].n_new : 0;
                n_rounds += !s->plan[e].prefill;
            }
            seer_stall_observe(&s->stall, dt, n_prompt, n_rounds);
            for (int i = 0; i < MAX_GROUPS; i++)
                if (s->groups[i].g && s->groups[i].spec.kind == SEER_SPEC_AUTO && s->groups[i].emitted > 0)
                    seer_round_done(s->groups[i].g, s->groups[i].emitted, dt);
        }
    }
    for (int i = s->n_running - 1; i >= 0 && st == SEER_OK; i--)
        if (s->running[i]->finish != SEER_FINISH_NONE) {
            done[n_done++] = s->running[i];
            retire(s, i);
        }
    for (int i = 0; i < s->n_running; i++)
        notify(s, s->running[i]);
    for (int i = 0; i < n_done; i++)
        notify(s, done[i]);
    if (n_active)
        *n_active = s->n_running + s->n_waiting;
    return st;
}

void seer_sched_get_stats(const seer_sched *s, seer_sched_stats *out) {
    if (!out)
        return;
    if (!s) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = s->stats;
    out->n_running = s->n_running;
    out->n_waiting = s->n_waiting;
    out->kv_pages_total = s->ctx->kv->n_pages;
    out->kv_pages_free = seer_kv_free_pages(s->ctx);
    out->prefix_entries = s->pc.n;
    out->kv_pages_cached = seer_prefix_pages(&s->pc, s->ctx);
    if (s->host) {
        out->kv_host_pages = seer_kv_host_used(s->host);
        out->kv_host_pages_total = s->host->n_slots;
        out->kv_host_bytes_out = s->host->bytes_to_host;
        out->kv_host_bytes_in = s->host->bytes_from_host;
        out->kv_host_evictions = s->host->evictions;
    }
}
