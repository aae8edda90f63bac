/*
 * calibrate.c: measures the cost table (cost.h) on a live context, through the public API
 * and the decode the generator calls (contexts, sequences, views, seer_decode_argmax), so that
 * what it times is what a round pays: the same forward calls, every token's logits computed
 * and reduced where they are to the argmax id a greedy round verifies with (a sampled round's
 * kernels also leave the logits on the device). Copying every row's logits to the host, as
 * an earlier version did, added B * n * V floats per call that no round moves, and priced
 * drafting too dear: on an H100 its tables forecast speedups 3-5 % below those measured.
 *
 * Caches are filled with synthetic KV (seer_seq_fill_synthetic) rather than by prefill: the
 * step's cost depends on how many slots it reads, not on their values, and filling is what
 * keeps calibration within a few hundred milliseconds on small models. Each point is the
 * median of repeated calls after one untimed warm-up (first-touch of pages and scratch), with
 * as many repetitions as the time budget allows.
 *
 * A model that holds draft weights (seer_model_params.draft_weights) has its view step timed
 * through them: auto's self-draft candidates draft through them (auto.c), and the table's key
 * names them (seer_cost_key), so a table measured without them is not read for it.
 *
 * Not measured: the n-gram drafter (host-side suffix matching, no forward call). The sparse
 * view step is measured as the streaming drafter's (a view of K slots); retrieval and SnapKV
 * get no row, so the planner never picks them: their per-request set-up (the prompt's keys
 * scored at prefill, the selection rebuilt as the text grows) is not measured, and it is what
 * their cost is at long context (on an H100, a trace of 8K-32K-token requests with them among
 * auto's candidates did not finish in 150 s, where plain decoding served it in 58 s).
 */
#include "model/model.h"
#include "spec/cost.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

seer_calibrate_params seer_calibrate_default_params(void) {
    return (seer_calibrate_params){
        .self_drafts = true,
        .sinks = 4,
        .time_budget_s = 0.3,
        .min_reps = 3,
    };
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One side of the measurement: a context and the sequences calibration made in it. */
typedef struct {
    seer_context *ctx;
    seer_seq_id seq[SEER_COST_MAX_SEQ];
    int n_seq;
    int V;
    bool borrowed;  /* the caller's sequences (seer_calibrate_params.seqs): never freed */
} side;

typedef struct {
    const seer_calibrate_params *p;
    double t_point;     /* seconds allowed per measured point */
    double deadline;    /* past it, a point is one call after its warm-up */
    int32_t *ids;       /* [max B * max n] */
    int32_t *tok, *pos; /* [max B * max n] */
    seer_seq_id *sid;   /* [max B * max n] */
    uint8_t *flag;      /* [max B * max n] all ones */
    int32_t *view_idx;  /* [sinks] */
} bench;

/* Rewinds the first B sequences of s to L. */
static seer_status rewind_all(side *s, int B, int L) {
    for (int i = 0; i < B; i++)
        SEER_TRY(seer_seq_rewind(s->ctx, s->seq[i], L));
    return SEER_OK;
}

/* Times one decode of n tokens per sequence for the first B sequences of s, all at length L
 * (view: the K-slot view of a sparse draft, or 0), into *out: the median of the repetitions. */
static seer_status time_point(bench *bn, side *s, int B, int L, int n, int K, double *out) {
    const int T = B * n;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < n; j++) {
            const int t = i * n + j;
            bn->tok[t] = (int32_t)((7 * t + 3 * L + 1) % s->V);
            bn->sid[t] = s->seq[i];
            bn->pos[t] = L + j;
        }
    /* a self-draft's step multiplies by the model's draft weights where it holds them, as
     * auto's candidates then do */
    const seer_batch b = {.n_tokens = T, .token = bn->tok, .seq = bn->sid, .pos = bn->pos,
                          .logits = bn->flag, .mask = NULL,
                          .draft_weights = K > 0 && seer_context_model(s->ctx)->draft_layers != NULL};
    /* A streaming view of K slots: the sinks and the latest K - sinks (MagicDec). */
    const bool view = K > 0 && K < L;
    if (view) {
        const int sk = bn->p->sinks < K ? bn->p->sinks : K - 1;
        for (int i = 0; i < sk; i++)
            bn->view_idx[i] = i;
        const seer_view v = {.idx = bn->view_idx, .n = sk, .n_layers_view = 1, .n_heads_view = 1,
                             .tail_start = L - (K - sk)};
        for (int i = 0; i < B; i++) {
            const seer_status st = seer_seq_set_view(s->ctx, s->seq[i], &v);
            if (st != SEER_OK) {
                for (int k = 0; k < i; k++)
                    seer_seq_clear_view(s->ctx, s->seq[k]);
                return st;
            }
        }
    }
    double times[64];
    int reps = 0, planned = 1;
    seer_status st = SEER_OK;
    for (int r = -1; r < planned && st == SEER_OK; r++) { /* r = -1: the warm-up */
        const double t0 = now_s();
        st = seer_decode_argmax(s->ctx, &b, bn->ids);
        if (st == SEER_OK)
            st = seer_model_sync(seer_context_model(s->ctx));
        const double dt = now_s() - t0;
        if (st == SEER_OK)
            st = rewind_all(s, B, L);
        if (st != SEER_OK)
            break;
        if (r < 0 && now_s() > bn->deadline) {
            /* over budget: one timed call after the warm-up, never the warm-up itself (at
             * 14 x 32K on an H100 the 1 s budget ran out before the view steps, and their
             * warm-up calls, 13.2 ms at 2048 slots, stood in the table for rounds of 11.2) */
            planned = 1;
        } else if (r < 0) {
            const double want = dt > 0 ? bn->t_point / dt : 64;
            planned = want < bn->p->min_reps ? bn->p->min_reps : want > 64 ? 64 : (int)want;
        } else
            times[reps++] = dt > 1e-9 ? dt : 1e-9;
    }
    if (view)
        for (int i = 0; i < B; i++)
            seer_seq_clear_view(s->ctx, s->seq[i]);
    if (st != SEER_OK)
        return st;
    qsort(times, (size_t)reps, sizeof *times, cmp_double);
    *out = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
    return SEER_OK;
}

static seer_status side_open(side *s, seer_context *ctx, int B) {
    s->ctx = ctx;
    s->n_seq = 0;
    s->V = seer_n_vocab(seer_context_model(ctx));
    for (int i = 0; i < B; i++) {
        const seer_status st = seer_seq_new(ctx, &s->seq[i]);
        if (st != SEER_OK) {
            char msg[512]; /* the message is rewritten from itself: copy it first */
            snprintf(msg, sizeof msg, "%s", seer_last_error());
            return seer_err(st, "calibration needs %d free sequences: %s", B, msg);
        }
        s->n_seq++;
    }
    return SEER_OK;
}

static void side_close(side *s) {
    for (int i = 0; i < s->n_seq && !s->borrowed; i++)
        seer_seq_free(s->ctx, s->seq[i]);
    s->n_seq = 0;
}

/* Brings every sequence of s to length L. */
static seer_status side_fill(side *s, int L, uint64_t seed) {
    for (int i = 0; i < s->n_seq; i++) {
        const int have = seer_seq_len(s->ctx, s->seq[i]);
        SEER_TRY(seer_seq_fill_synthetic(s->ctx, s->seq[i], L - have, seed + (uint64_t)i));
    }
    return SEER_OK;
}

/* The grids: the caller's, or defaults fitted to the context. */
static seer_status grids(seer_context *ctx, const seer_calibrate_params *p, seer_cost_table *t,
                         int *k, int *n_k) {
    const int def_b[] = {1, 2, 4}, def_n[] = {2, 4, 8}, def_k[] = {16, 64};
    if (p->n_b < 0 || p->n_b > SEER_COST_MAX_B || p->n_l < 0 || p->n_l > SEER_COST_MAX_L ||
        p->n_n < 0 || p->n_n > SEER_COST_MAX_N || p->n_k < 0 || p->n_k > SEER_COST_MAX_K)
        return seer_err(SEER_ERR_INVALID_ARG, "calibration: grid sizes %d %d %d %d", p->n_b,
                        p->n_l, p->n_n, p->n_k);
    t->n_b = p->n_b ? p->n_b : 3;
    memcpy(t->b, p->n_b ? p->b : def_b, sizeof(int) * (size_t)t->n_b);
    t->n_n = p->n_n ? p->n_n : 3;
    memcpy(t->n, p->n_n ? p->n : def_n, sizeof(int) * (size_t)t->n_n);
    *n_k = p->n_k ? p->n_k : 2;
    memcpy(k, p->n_k ? p->k : def_k, sizeof(int) * (size_t)*n_k);
    if (p->n_l) {
        t->n_l = p->n_l;
        memcpy(t->l, p->l, sizeof(int) * (size_t)t->n_l);
    } else {
        const int top = seer_context_n_ctx(ctx) - t->n[t->n_n - 1] - 1;
        if (top < 64)
            return seer_err(SEER_ERR_INVALID_ARG, "calibration: context of %d tokens is too short",
                            seer_context_n_ctx(ctx));
        t->n_l = 3;
        t->l[0] = 32, t->l[1] = (int)lround(sqrt(32.0 * top)), t->l[2] = top;
    }
    /* the table's own rules (ascending, in range), on the grids alone */
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++)
            t->t_target[i][j] = 1;
    for (int v = 0; v < t->n_n; v++)
        for (int i = 0; i < t->n_b; i++)
            for (int j = 0; j < t->n_l; j++)
                t->t_verify[v][i][j] = 1;
    t->n_drafters = 1;
    t->drafter[0].kind = SEER_SPEC_STREAMING;
    t->drafter[0].n_k = *n_k;
    memcpy(t->drafter[0].k, k, sizeof(int) * (size_t)*n_k);
    snprintf(t->key, sizeof t->key, "grid");
    const seer_status st = seer_cost_table_check(t);
    if (st != SEER_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", seer_last_error());
        return seer_err(st, "calibration: %s", msg);
    }
    for (int i = 0; i < *n_k; i++)
        if (k[i] < 1)
            return seer_err(SEER_ERR_INVALID_ARG, "calibration: budget %d", k[i]);
    return SEER_OK;
}

seer_status seer_cost_calibrate(seer_context *ctx, const seer_calibrate_params *p,
                                seer_cost_table *out) {
    SEER_CHECK_ARG(ctx);
    SEER_CHECK_ARG(p);
    SEER_CHECK_ARG(out);
    if (!(p->time_budget_s > 0) || !isfinite(p->time_budget_s) || p->min_reps < 1 ||
        p->min_reps > 64 || p->sinks < 1)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "calibration: time budget %g s, %d repetitions (1..64), %d sinks",
                        p->time_budget_s, p->min_reps, p->sinks);
    seer_cost_table *t = calloc(1, sizeof *t);
    if (!t)
        return seer_err(SEER_ERR_OOM, "calibration: out of memory");
    int k[SEER_COST_MAX_K], n_k = 0;
    seer_status st = grids(ctx, p, t, k, &n_k);
    const int Bm = t->n_b ? t->b[t->n_b - 1] : 0, Nm = t->n_n ? t->n[t->n_n - 1] : 1;
    if (st == SEER_OK && Bm > SEER_COST_MAX_SEQ)
        st = seer_err(SEER_ERR_INVALID_ARG, "calibration: batch size %d (at most %d)", Bm, SEER_COST_MAX_SEQ);
    const int V = seer_n_vocab(seer_context_model(ctx));
    if (st == SEER_OK && p->draft_ctx && seer_n_vocab(seer_context_model(p->draft_ctx)) != V)
        st = seer_err(SEER_ERR_INVALID_ARG, "calibration: the draft model's vocabulary differs");
    const int per_lb = 1 + t->n_n + (p->self_drafts ? n_k : 0) + (p->draft_ctx ? 1 : 0);
    bench bn = {.p = p, .t_point = p->time_budget_s / (t->n_b * t->n_l * per_lb + 1)};
    const size_t T = (size_t)Bm * (size_t)Nm;
    if (st == SEER_OK) {
        bn.ids = seer_malloc_array(T, sizeof(int32_t));
        bn.tok = seer_malloc_array(T, sizeof(int32_t));
        bn.pos = seer_malloc_array(T, sizeof(int32_t));
        bn.sid = seer_malloc_array(T, sizeof(seer_seq_id));
        bn.flag = seer_malloc_array(T, 1);
        bn.view_idx = seer_malloc_array((size_t)p->sinks, sizeof(int32_t));
        if (!bn.ids || !bn.tok || !bn.pos || !bn.sid || !bn.flag || !bn.view_idx)
            st = seer_err(SEER_ERR_OOM, "calibration: out of memory for %zu tokens", T);
        else
            memset(bn.flag, 1, T);
    }
    side tgt = {0}, dft = {0};
    bn.deadline = now_s() + p->time_budget_s;
    if (st == SEER_OK && p->seqs) {
        if (t->n_l != 1 || p->draft_ctx)
            st = seer_err(SEER_ERR_INVALID_ARG, "calibration in place: one length and no draft model");
        for (int i = 0; i < Bm && st == SEER_OK; i++)
            if (seer_seq_len(ctx, p->seqs[i]) != t->l[0])
                st = seer_err(SEER_ERR_INVALID_ARG, "calibration in place: sequence %d holds %d tokens, not %d",
                              (int)p->seqs[i], seer_seq_len(ctx, p->seqs[i]), t->l[0]);
        if (st == SEER_OK) {
            tgt = (side){.ctx = ctx, .n_seq = Bm, .V = V, .borrowed = true};
            memcpy(tgt.seq, p->seqs, sizeof(seer_seq_id) * (size_t)Bm);
        }
    } else if (st == SEER_OK)
        st = side_open(&tgt, ctx, Bm);
    if (st == SEER_OK && p->draft_ctx)
        st = side_open(&dft, p->draft_ctx, Bm);
    seer_cost_drafter *self = &t->drafter[0], *dm = &t->drafter[1];
    t->n_drafters = 0;
    if (p->self_drafts) {
        /* the three sparse self-drafts read the same view; each gets the measured rows */
        t->n_drafters = 1;
        self->kind = SEER_SPEC_STREAMING, self->n_k = n_k;
        memcpy(self->k, k, sizeof(int) * (size_t)n_k);
    }
    if (p->draft_ctx) {
        dm = &t->drafter[t->n_drafters++];
        dm->kind = SEER_SPEC_DRAFT, dm->n_k = 1, dm->k[0] = 0;
    }
    for (int j = 0; j < t->n_l && st == SEER_OK; j++) {
        const int L = t->l[j];
        st = side_fill(&tgt, L, 1000u * (uint64_t)j);
        if (st == SEER_OK && p->draft_ctx)
            st = side_fill(&dft, L, 7000u * (uint64_t)j);
        for (int i = 0; i < t->n_b && st == SEER_OK; i++) {
            const int B = t->b[i];
            /* the cheap single-token calls first, so that they get their repetitions before
             * the long verifications spend the budget */
            st = time_point(&bn, &tgt, B, L, 1, 0, &t->t_target[i][j]);
            for (int q = 0; p->self_drafts && q < n_k && st == SEER_OK; q++)
                st = time_point(&bn, &tgt, B, L, 1, k[q], &self->t[q][i][j]);
            for (int v = 0; v < t->n_n && st == SEER_OK; v++)
                st = time_point(&bn, &tgt, B, L, t->n[v], 0, &t->t_verify[v][i][j]);
            if (st == SEER_OK && p->draft_ctx)
                st = time_point(&bn, &dft, B, L, 1, 0, &dm->t[0][i][j]);
        }
    }
    side_close(&tgt);
    side_close(&dft);
    if (st == SEER_OK) {
        seer_cost_key(seer_context_model(ctx), p->device, t->key, sizeof t->key);
        st = seer_cost_table_check(t);
    }
    if (st == SEER_OK)
        *out = *t;
    free(bn.ids);
    free(bn.tok);
    free(bn.pos);
    free(bn.sid);
    free(bn.flag);
    free(bn.view_idx);
    free(t);
    return st;
}
