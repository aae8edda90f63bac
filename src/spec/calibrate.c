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
 * median of repeated calls, after an untimed warm-up where one is cheap (first-touch of pages
 * and scratch), with repetitions sized to aim_s.
 *
 * The time is bounded (time_budget_s): a table of 3 batch sizes, 3 lengths, 3 verification
 * sizes, 2 view budgets and a draft model is 63 forward calls at least, which for a 1.5B
 * model on a 2-core CPU at 13K tokens of context took minutes, not the few hundred ms it
 * takes on small models. So the points are ordered by what they teach: a single-token step
 * at the shortest and the longest length, the view steps at the longest, the largest call
 * at the shortest (they fix a, c and b of time = a + b * tokens + c * KV rows read, and the
 * views where speculation pays), the draft model's step; then the cheapest left, its fill counted,
 * while each is predicted to end within the budget. What is left is estimated from that
 * line (fitted by least squares on the relative error, terms kept non-negative), flagged in
 * the table, and trusted less by the planner (cost_plan.c's est_margin); a drafter budget
 * with no cell measured gets no row at all. A later calibration given the partial table
 * (prev) keeps its measured cells and spends its budget on the rest.
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
#include "seer_bench.h"
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
        .time_budget_s = 10.0,
        .aim_s = 0.3,
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
    bool borrowed;     /* the caller's sequences (seer_calibrate_params.seqs): never freed */
    int calls;         /* decode calls made so far (the first is warmed up) */
    int max_T;         /* the largest call so far (a larger one touches new scratch) */
    double fill_s;     /* seconds spent filling, and the rows filled: the fill rate */
    double fill_rows;
} side;

/* A call is started only when it is predicted to end within the budget with this slack: on a
 * shared 2-core CPU the same step's time moved by up to a third between calls. */
#define CALL_SLACK 1.3

typedef struct {
    const seer_calibrate_params *p;
    double t_point;     /* seconds of repetitions aimed at per point */
    double deadline;    /* no call is started that is predicted to end past it */
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
 * (view: the K-slot view of a sparse draft, or 0), into *out: the median of the repetitions.
 * warm: one untimed call first; dt_pred: the time the call is expected to take (0: unknown). */
static seer_status time_point(bench *bn, side *s, int B, int L, int n, int K, bool warm,
                              double dt_pred, double *out) {
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
    /* repetitions sized to the aim; min_reps where they cost little of the budget */
    const double budget = bn->p->time_budget_s;
    for (int r = warm ? -1 : 0; r < planned && st == SEER_OK; r++) { /* r = -1: the warm-up */
        const double t0 = now_s();
        st = seer_decode_argmax(s->ctx, &b, bn->ids);
        if (st == SEER_OK)
            st = seer_model_sync(seer_context_model(s->ctx));
        const double t1 = now_s(), dt = t1 - t0;
        if (st == SEER_OK)
            st = rewind_all(s, B, L);
        if (st != SEER_OK)
            break;
        s->calls++;
        if (r == (warm ? -1 : 0)) {
            /* sized from the first call (the warm-up's; without one the prediction where it
             * is lower: an unwarmed call may carry first-touch costs) */
            const double d = r < 0 ? dt : dt_pred > 0 && dt_pred < dt ? dt_pred : dt;
            const double want = d > 0 ? bn->t_point / d : 64;
            planned = want < 1 ? 1 : want > 64 ? 64 : (int)want;
            if (planned < bn->p->min_reps && bn->p->min_reps * d <= budget / 50)
                planned = bn->p->min_reps;
        }
        if (r >= 0)
            times[reps++] = dt > 1e-9 ? dt : 1e-9;
        /* past the deadline only the one timed call (never the warm-up alone: at 14 x 32K on
         * an H100 the warm-up calls of the view steps, 13.2 ms at 2048 slots, stood in the
         * table for rounds of 11.2) */
        if (reps > 0 && now_s() + CALL_SLACK * dt > bn->deadline)
            planned = reps;
    }
    if (T > s->max_T)
        s->max_T = T;
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

/* Rows the first B sequences of s lack to hold L tokens (rewinding is free). */
static double fill_rows(const side *s, int B, int L) {
    double rows = 0;
    for (int i = 0; i < B; i++) {
        const int have = seer_seq_len(s->ctx, s->seq[i]);
        rows += have < L ? L - have : 0;
    }
    return rows;
}

/* Brings the first B sequences of s to length L. */
/* Fills the first B sequences of s to L (rewinding the longer ones), in pieces of at most
 * FILL_PIECE rows so that the deadline is checked between them: a fill's rate is not steady
 * (on a 2-core CPU one sequence's 16K rows took 0.5 s, the next one's 2.4 s, first touches
 * of its pages), so a predicted fill may not fit. *late: it stopped at the deadline. */
enum { FILL_PIECE = 256 };


static seer_status side_fill(side *s, int B, int L, double deadline, bool *late) {
    const double t0 = now_s();
    double rows = 0, piece_s = 0;
    *late = false;
    for (int i = 0; i < B && !*late; i++) {
        int have = seer_seq_len(s->ctx, s->seq[i]);
        if (have > L)
            SEER_TRY(seer_seq_rewind(s->ctx, s->seq[i], L));
        while (have < L) {
            const double p0 = now_s();
            if (p0 + piece_s > deadline) { /* the next piece, timed as the last one */
                *late = true;
                break;
            }
            const int n = L - have < FILL_PIECE ? L - have : FILL_PIECE;
            SEER_TRY(seer_seq_fill_synthetic(s->ctx, s->seq[i], n,
                                             1000u * (uint64_t)L + (uint64_t)i + ((uint64_t)have << 32)));
            have += n, rows += n;
            piece_s = now_s() - p0;
        }
    }
    if (rows > 0)
        s->fill_s += now_s() - t0, s->fill_rows += rows;
    return SEER_OK;
}

/* ---- the points and the model that estimates the ones not measured ---------------------- */

typedef enum { PT_TARGET, PT_VERIFY, PT_VIEW, PT_DRAFT } point_kind;

/* One cell of the table. Its work: T tokens in the call, R KV rows read by their attention. */
typedef struct {
    point_kind kind;
    int B, L, n, K;
    double T, R;
    double *out;   /* the table's cell */
    uint8_t *est;  /* its flag */
    bool done;     /* measured (now or in the table it continues) */
} point;

/* time = a + b * T + c * R, fitted to measured times by least squares on the relative error,
 * with a, b, c >= 0 (the subset of terms with the least error whose coefficients are all
 * non-negative). A call's cost is the weights read once (a), each token's products (b) and
 * each attention row read (c); on the CPU and on a GPU at small T this is what the steps do. */
typedef struct {
    double a, b, c;
    int n;         /* points it was fitted to (0: no fit) */
} line_fit;

static double fit_eval(const line_fit *f, double T, double R) { return f->a + f->b * T + f->c * R; }

/* Solves the m x m system (m <= 3) in place by Gaussian elimination; false when singular. */
static bool solve(double A[3][3], double *y, int m, double *x) {
    for (int i = 0; i < m; i++) {
        int piv = i;
        for (int r = i + 1; r < m; r++)
            if (fabs(A[r][i]) > fabs(A[piv][i]))
                piv = r;
        if (fabs(A[piv][i]) < 1e-12)
            return false;
        for (int c = 0; c < m; c++) {
            const double tmp = A[i][c];
            A[i][c] = A[piv][c], A[piv][c] = tmp;
        }
        const double ty = y[i];
        y[i] = y[piv], y[piv] = ty;
        for (int r = i + 1; r < m; r++) {
            const double f = A[r][i] / A[i][i];
            for (int c = i; c < m; c++)
                A[r][c] -= f * A[i][c];
            y[r] -= f * y[i];
        }
    }
    for (int i = m - 1; i >= 0; i--) {
        double v = y[i];
        for (int c = i + 1; c < m; c++)
            v -= A[i][c] * x[c];
        x[i] = v / A[i][i];
    }
    return true;
}

/* Fits f to the measured points of pts [np] that sel() takes. */
static void fit_points(const point *pts, int np, bool (*sel)(const point *), line_fit *f) {
    double Tmax = 1, Rmax = 1;
    int n = 0;
    for (int i = 0; i < np; i++)
        if (pts[i].done && sel(&pts[i])) {
            Tmax = fmax(Tmax, pts[i].T), Rmax = fmax(Rmax, pts[i].R);
            n++;
        }
    *f = (line_fit){0};
    if (n == 0)
        return;
    double best_err = INFINITY;
    /* term subsets: bit 0 a, bit 1 b, bit 2 c (features scaled to [0, 1] for conditioning);
     * on a tie the one tried first, with more terms and the constant */
    static const int masks[] = {7, 3, 5, 1, 6, 2, 4};
    for (int mi = 0; mi < 7; mi++) {
        const int mask = masks[mi];
        int cols[3], m = 0;
        for (int k = 0; k < 3; k++)
            if (mask >> k & 1)
                cols[m++] = k;
        if (m > n)
            continue;
        double A[3][3] = {{0}}, y[3] = {0}, x[3] = {0};
        for (int i = 0; i < np; i++) {
            if (!pts[i].done || !sel(&pts[i]))
                continue;
            const double t = *pts[i].out, w = 1.0 / t;
            const double feat[3] = {1.0, pts[i].T / Tmax, pts[i].R / Rmax};
            for (int r = 0; r < m; r++) {
                for (int c = 0; c < m; c++)
                    A[r][c] += w * w * feat[cols[r]] * feat[cols[c]];
                y[r] += w * w * feat[cols[r]] * t;
            }
        }
        if (!solve(A, y, m, x))
            continue;
        double co[3] = {0, 0, 0};
        bool ok = true;
        for (int r = 0; r < m; r++)
            ok &= x[r] >= 0, co[cols[r]] = x[r];
        if (!ok)
            continue;
        double err = 0;
        for (int i = 0; i < np; i++)
            if (pts[i].done && sel(&pts[i])) {
                const double t = *pts[i].out;
                const double e = (co[0] + co[1] * pts[i].T / Tmax + co[2] * pts[i].R / Rmax - t) / t;
                err += e * e;
            }
        if (err < best_err * (1 - 1e-9))
            best_err = err, *f = (line_fit){co[0], co[1] / Tmax, co[2] / Rmax, n};
    }
    /* A call's tokens never cost nothing: with no measured call of more tokens than the
     * others the b term is unknown, and a verification of n tokens is then taken to cost n
     * steps (plain decoding wins wherever that is all there is). */
    double T0 = -1;
    bool varied = false;
    for (int i = 0; i < np; i++)
        if (pts[i].done && sel(&pts[i])) {
            varied |= T0 >= 0 && pts[i].T != T0;
            T0 = pts[i].T;
        }
    if (!varied && f->n > 0 && T0 > 0)
        f->b = fmax(f->b, fit_eval(f, T0, 0) / T0), f->a = 0;
}

/* The estimates: the target's calls (its step and verification, and the view step when the
 * view multiplies by the same weights), the view step through draft weights, and the draft
 * model's step. A family with too few points of its own is the target's line times the
 * median ratio of its measured points to it. */
typedef struct {
    line_fit tgt, view, dft;
    double view_ratio, dft_ratio;
    bool view_own; /* views have weights of their own (draft weights) */
} estimator;

static bool sel_tgt_views(const point *p) { return p->kind != PT_DRAFT; }
static bool sel_tgt(const point *p) { return p->kind == PT_TARGET || p->kind == PT_VERIFY; }
static bool sel_view(const point *p) { return p->kind == PT_VIEW; }
static bool sel_dft(const point *p) { return p->kind == PT_DRAFT; }

static double median_ratio(const point *pts, int np, bool (*sel)(const point *), const line_fit *f) {
    double r[1024];
    int n = 0;
    for (int i = 0; i < np && n < 1024; i++)
        if (pts[i].done && sel(&pts[i])) {
            const double e = fit_eval(f, pts[i].T, pts[i].R);
            if (e > 0)
                r[n++] = *pts[i].out / e;
        }
    if (n == 0)
        return 1.0;
    qsort(r, (size_t)n, sizeof *r, cmp_double);
    return n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
}

static void estimator_update(estimator *e, const point *pts, int np) {
    fit_points(pts, np, e->view_own ? sel_tgt : sel_tgt_views, &e->tgt);
    if (e->tgt.n == 0) /* only views measured so far: they stand in */
        fit_points(pts, np, sel_tgt_views, &e->tgt);
    fit_points(pts, np, sel_view, &e->view);
    e->view_ratio = median_ratio(pts, np, sel_view, &e->tgt);
    fit_points(pts, np, sel_dft, &e->dft);
    e->dft_ratio = median_ratio(pts, np, sel_dft, &e->tgt);
}

static double estimate(const estimator *e, const point *p) {
    const double base = fit_eval(&e->tgt, p->T, p->R);
    double v = base;
    if (p->kind == PT_VIEW && e->view_own)
        v = e->view.n >= 3 ? fit_eval(&e->view, p->T, p->R) : base * e->view_ratio;
    else if (p->kind == PT_DRAFT)
        v = e->dft.n >= 3 ? fit_eval(&e->dft, p->T, p->R) : base * e->dft_ratio;
    return v > 1e-9 ? v : 1e-9;
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

/* Whether prev (a partial table) was measured on the same model and grids as t: then its
 * measured cells stand. */
static bool same_grids(const seer_cost_table *a, const seer_cost_table *b) {
    return a->n_b == b->n_b && a->n_l == b->n_l && a->n_n == b->n_n && !strcmp(a->key, b->key) &&
           !memcmp(a->b, b->b, sizeof(int) * (size_t)a->n_b) && !memcmp(a->l, b->l, sizeof(int) * (size_t)a->n_l) &&
           !memcmp(a->n, b->n, sizeof(int) * (size_t)a->n_n);
}

static int index_of(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return i;
    return -1;
}

/* p's cell in prev (same grids) when it was measured there, else NULL. */
static const double *prev_cell(const seer_cost_table *prev, const point *p) {
    const int ib = index_of(prev->b, prev->n_b, p->B), il = index_of(prev->l, prev->n_l, p->L);
    if (ib < 0 || il < 0)
        return NULL;
    const double *v = NULL;
    uint8_t e = 1;
    if (p->kind == PT_TARGET)
        v = &prev->t_target[ib][il], e = prev->est_target[ib][il];
    else if (p->kind == PT_VERIFY) {
        const int iv = index_of(prev->n, prev->n_n, p->n);
        if (iv >= 0)
            v = &prev->t_verify[iv][ib][il], e = prev->est_verify[iv][ib][il];
    } else {
        const int d = seer_cost_find_drafter(prev, p->kind == PT_VIEW ? SEER_SPEC_STREAMING : SEER_SPEC_DRAFT);
        const int ik = d < 0 ? -1 : index_of(prev->drafter[d].k, prev->drafter[d].n_k, p->K);
        if (ik >= 0)
            v = &prev->drafter[d].t[ik][ib][il], e = prev->drafter[d].est[ik][ib][il];
    }
    return v && !e ? v : NULL;
}

/* The ratio of measured to estimated time at the measured cell nearest to p (in grid steps
 * of B and L) of p's row (same kind, n and K), within [0.5, 2]; 1 when the row has none. The
 * line fits the whole table and misses where the steps curve (a CPU's attention at long
 * contexts); the nearest measurement corrects it locally. */
static double anchor_ratio(const estimator *e, const point *pts, int np, const point *p,
                           const seer_cost_table *t) {
    const int ib = index_of(t->b, t->n_b, p->B), il = index_of(t->l, t->n_l, p->L);
    int best = -1, best_d = 1 << 30;
    for (int i = 0; i < np; i++) {
        const point *q = &pts[i];
        if (!q->done || q->kind != p->kind || q->n != p->n || q->K != p->K)
            continue;
        const int db = abs(index_of(t->b, t->n_b, q->B) - ib), dl = abs(index_of(t->l, t->n_l, q->L) - il);
        const int d = 2 * (db + dl) + (dl > 0); /* a tie: the same length first */
        if (d < best_d)
            best_d = d, best = i;
    }
    if (best < 0)
        return 1.0;
    const double r = *pts[best].out / estimate(e, &pts[best]);
    return r < 0.5 ? 0.5 : r > 2.0 ? 2.0 : r;
}

/* Raises estimated cells to what their measured neighbours imply: a row's time does not fall
 * with B or with L, and a verification costs at least the step and one of fewer tokens. */
static void monotone_row(const seer_cost_table *t, double (*v)[SEER_COST_MAX_L], const uint8_t (*f)[SEER_COST_MAX_L]) {
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++) {
            if (!f[i][j])
                continue;
            if (i > 0 && v[i][j] < v[i - 1][j])
                v[i][j] = v[i - 1][j];
            if (j > 0 && v[i][j] < v[i][j - 1])
                v[i][j] = v[i][j - 1];
        }
}

static void make_monotone(seer_cost_table *t) {
    monotone_row(t, t->t_target, t->est_target);
    for (int v = 0; v < t->n_n; v++)
        monotone_row(t, t->t_verify[v], t->est_verify[v]);
    for (int d = 0; d < t->n_drafters; d++)
        for (int k = 0; k < t->drafter[d].n_k; k++)
            monotone_row(t, t->drafter[d].t[k], t->drafter[d].est[k]);
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++) {
            double lo = t->t_target[i][j];
            for (int v = 0; v < t->n_n; v++) {
                if (t->est_verify[v][i][j] && t->t_verify[v][i][j] < lo)
                    t->t_verify[v][i][j] = lo;
                lo = t->t_verify[v][i][j];
            }
        }
}

/* Drops a drafter's budgets that had nothing measured, and a drafter left with none: a row of
 * guesses alone is no row (auto never picks what calibration did not see run). */
static void drop_unmeasured(seer_cost_table *t) {
    for (int d = 0; d < t->n_drafters; d++) {
        seer_cost_drafter *dr = &t->drafter[d];
        int kept = 0;
        for (int k = 0; k < dr->n_k; k++) {
            bool any = false;
            for (int i = 0; i < t->n_b; i++)
                for (int j = 0; j < t->n_l; j++)
                    any |= !dr->est[k][i][j];
            if (!any)
                continue;
            if (kept != k) {
                dr->k[kept] = dr->k[k];
                memcpy(dr->t[kept], dr->t[k], sizeof dr->t[k]);
                memcpy(dr->est[kept], dr->est[k], sizeof dr->est[k]);
            }
            kept++;
        }
        dr->n_k = kept;
        if (kept == 0) {
            memmove(dr, dr + 1, sizeof *dr * (size_t)(t->n_drafters - d - 1));
            t->n_drafters--, d--;
        }
    }
}

/* Every cell of the table as a point (per batch size and length: the target's step, each
 * verification size, each view budget, the draft model's step), into *out (n_out of them). */
static seer_status list_points(seer_cost_table *t, const seer_calibrate_params *p, const int *k, int n_k,
                               seer_cost_drafter *self, seer_cost_drafter *dm, point **out, int *n_out) {
    const int per_lb = 1 + t->n_n + (p->self_drafts ? n_k : 0) + (p->draft_ctx ? 1 : 0);
    const int np = t->n_b * t->n_l * per_lb;
    point *pts = calloc((size_t)(np > 0 ? np : 1), sizeof *pts);
    if (!pts)
        return seer_err(SEER_ERR_OOM, "calibration: out of memory");
    int n = 0;
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++) {
            const int B = t->b[i], L = t->l[j];
            pts[n++] = (point){PT_TARGET, B, L, 1, 0, B, B * (L + 1.0), &t->t_target[i][j],
                               &t->est_target[i][j], false};
            for (int v = 0; v < t->n_n; v++) {
                const int m = t->n[v];
                pts[n++] = (point){PT_VERIFY, B, L, m, 0, (double)B * m, B * (m * (double)L + m * (m + 1) / 2.0),
                                   &t->t_verify[v][i][j], &t->est_verify[v][i][j], false};
            }
            for (int q = 0; p->self_drafts && q < n_k; q++) {
                const int K = k[q];
                pts[n++] = (point){PT_VIEW, B, L, 1, K, B, B * ((K < L ? K : L) + 1.0), &self->t[q][i][j],
                                   &self->est[q][i][j], false};
            }
            if (p->draft_ctx)
                pts[n++] = (point){PT_DRAFT, B, L, 1, 0, B, B * (L + 1.0), &dm->t[0][i][j], &dm->est[0][i][j], false};
        }
    *out = pts;
    *n_out = n;
    return SEER_OK;
}

/* The points measured first, in order (at most cap of them, those not done): a single-token
 * step at the shortest and the longest length (a, c), the view step at the longest, the
 * largest call at the shortest (b), the draft model's step, a verification at the longest. */
static int pick_anchors(const point *pts, int n, const seer_cost_table *t, int Bm, int Lm, int Nm, int *anchors,
                        int cap) {
    int n_anchor = 0;
    const int Bs[] = {t->b[0], t->b[0], t->b[0], Bm}, Ls[] = {t->l[0], Lm, Lm, t->l[0]};
    const point_kind ks[] = {PT_TARGET, PT_TARGET, PT_VIEW, PT_VERIFY};
    const int ns[] = {1, 1, 1, Nm};
    for (int a = 0; a < 4; a++)
        for (int i = 0; i < n; i++)
            if (pts[i].kind == ks[a] && pts[i].B == Bs[a] && pts[i].L == Ls[a] && pts[i].n == ns[a] &&
                !pts[i].done && n_anchor < cap)
                anchors[n_anchor++] = i;
    for (int i = 0; i < n; i++)
        if (!pts[i].done && n_anchor < cap &&
            ((pts[i].kind == PT_DRAFT && pts[i].B == t->b[0] && pts[i].L == t->l[0]) ||
             (pts[i].kind == PT_VERIFY && pts[i].B == t->b[0] && pts[i].L == Lm && pts[i].n == t->n[0] &&
              t->n_l > 1)))
            anchors[n_anchor++] = i;
    return n_anchor;
}

seer_status seer_cost_calibrate(seer_context *ctx, const seer_calibrate_params *p,
                                seer_cost_table *out) {
    SEER_CHECK_ARG(ctx);
    SEER_CHECK_ARG(p);
    SEER_CHECK_ARG(out);
    if (!(p->time_budget_s > 0) || !isfinite(p->time_budget_s) || !(p->aim_s > 0) ||
        !isfinite(p->aim_s) || p->min_reps < 1 || p->min_reps > 64 || p->sinks < 1)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "calibration: time budget %g s, aim %g s, %d repetitions (1..64), %d sinks",
                        p->time_budget_s, p->aim_s, p->min_reps, p->sinks);
    const double t_start = now_s();
    seer_cost_table *t = calloc(1, sizeof *t);
    if (!t)
        return seer_err(SEER_ERR_OOM, "calibration: out of memory");
    int k[SEER_COST_MAX_K], n_k = 0;
    seer_status st = grids(ctx, p, t, k, &n_k);
    const int Bm = t->n_b ? t->b[t->n_b - 1] : 0, Nm = t->n_n ? t->n[t->n_n - 1] : 1;
    const int Lm = t->n_l ? t->l[t->n_l - 1] : 0;
    if (st == SEER_OK && Bm > SEER_COST_MAX_SEQ)
        st = seer_err(SEER_ERR_INVALID_ARG, "calibration: batch size %d (at most %d)", Bm, SEER_COST_MAX_SEQ);
    const int V = seer_n_vocab(seer_context_model(ctx));
    if (st == SEER_OK && p->draft_ctx && seer_n_vocab(seer_context_model(p->draft_ctx)) != V)
        st = seer_err(SEER_ERR_INVALID_ARG, "calibration: the draft model's vocabulary differs");
    /* what every point needs, checked before any work: a point skipped for time must not
     * hide a grid the context cannot run */
    seer_context *const cs[2] = {ctx, p->draft_ctx};
    for (int c = 0; c < 2 && st == SEER_OK; c++) {
        if (!cs[c])
            continue;
        const int TB = cs[c]->params.n_batch_max, nc = seer_context_n_ctx(cs[c]);
        const int need_T = c == 0 ? Bm * Nm : Bm;
        if (need_T > TB || Lm + Nm > nc)
            st = seer_err(SEER_ERR_INVALID_ARG,
                          "calibration: calls of %d tokens at up to %d cached need a batch limit of %d "
                          "(have %d) and a context of %d (have %d)",
                          need_T, Lm, need_T, TB, Lm + Nm, nc);
    }
    bench bn = {.p = p};
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

    /* Every cell as a point. */
    point *pts = NULL;
    int n = 0;
    if (st == SEER_OK)
        st = list_points(t, p, k, n_k, self, dm, &pts, &n);
    for (int i = 0; i < n; i++)
        *pts[i].est = 1;
    /* a partial table of the same grids: its measured cells stand */
    int measured = 0;
    if (st == SEER_OK && p->prev) {
        seer_cost_key(seer_context_model(ctx), p->device, t->key, sizeof t->key);
        if (same_grids(t, p->prev))
            for (int i = 0; i < n; i++) {
                const double *v = prev_cell(p->prev, &pts[i]);
                if (v) {
                    *pts[i].out = *v, *pts[i].est = 0, pts[i].done = true;
                    measured++;
                }
            }
    }
    bn.t_point = p->aim_s / (n + 1);
    bn.deadline = t_start + p->time_budget_s;
    estimator est = {.view_own = seer_context_model(ctx)->draft_layers != NULL};
    estimator_update(&est, pts, n);

    /* The most informative points first: a single-token step at the shortest and the
     * longest length (a, c), the view steps there, the largest call at the shortest (b), the
     * draft model's step, a 2-token verification at the longest; then the cheapest left,
     * fills included, while they fit. The single-token steps go before the verifications:
     * at 3 x 128K on an H100 a view's first calls after the 9- and 17-token verifications
     * ran 3.6x slower than in the rounds. */
    int anchors[4 + SEER_COST_MAX_K + 2];
    const int n_anchor = pick_anchors(pts, n, t, Bm, Lm, Nm, anchors, (int)(sizeof anchors / sizeof *anchors));
    int next_anchor = 0;
    while (st == SEER_OK) {
        int best = -1;
        const bool anchor = next_anchor < n_anchor;
        if (anchor)
            best = anchors[next_anchor++];
        else {
            /* the cheapest left, its fill included */
            double best_cost = INFINITY;
            for (int i = 0; i < n; i++) {
                if (pts[i].done)
                    continue;
                side *s = pts[i].kind == PT_DRAFT ? &dft : &tgt;
                const double rate = s->fill_rows > 0 ? s->fill_s / s->fill_rows : 0;
                const double c = estimate(&est, &pts[i]) + rate * fill_rows(s, pts[i].B, pts[i].L);
                if (c < best_cost)
                    best_cost = c, best = i;
            }
            if (best < 0)
                break; /* everything measured */
        }
        point *pt = &pts[best];
        if (pt->done)
            continue;
        side *s = pt->kind == PT_DRAFT ? &dft : &tgt;
        const double dt_pred = measured > 0 ? estimate(&est, pt) : 0;
        /* a warm-up call where it is cheap, and for a side's first call or a larger call
         * than any before (first-touch of scratch) unless that costs a twentieth of the
         * budget: an expensive call's first-touch costs are a small part of it */
        const bool warm = dt_pred <= bn.t_point ||
                          ((s->calls == 0 || (int)pt->T > s->max_T) && dt_pred <= p->time_budget_s / 20);
        const double rate = s->fill_rows > 0 ? s->fill_s / s->fill_rows : 0;
        const double cost = rate * fill_rows(s, pt->B, pt->L) + dt_pred * (warm ? 2 : 1);
        /* the first point is always measured: a table stands on at least one time */
        if (measured > 0 && now_s() + CALL_SLACK * cost > bn.deadline) {
            if (anchor)
                continue; /* an anchor that does not fit: cheaper points may */
            break;        /* the cheapest does not fit: nothing does */
        }
        bool late = false;
        st = side_fill(s, pt->B, pt->L, measured > 0 ? bn.deadline : INFINITY, &late);
        /* the fill ran slower than its rate said: the call no longer fits */
        if (st == SEER_OK && measured > 0 && (late || now_s() + CALL_SLACK * dt_pred * (warm ? 2 : 1) > bn.deadline))
            break;
        if (st == SEER_OK)
            st = time_point(&bn, s, pt->B, pt->L, pt->n, pt->K, warm, dt_pred, pt->out);
        if (st != SEER_OK)
            break;
        pt->done = true, *pt->est = 0;
        measured++;
        estimator_update(&est, pts, n);
        if (p->progress)
            p->progress(p->progress_user, measured, n, now_s() - t_start);
    }
    /* the rest from the measured ones: the line's shape anchored to the nearest measured
     * cell of the same row, and never below what their row and column say */
    for (int i = 0; st == SEER_OK && i < n; i++)
        if (!pts[i].done)
            *pts[i].out = estimate(&est, &pts[i]) * anchor_ratio(&est, pts, n, &pts[i], t);
    if (st == SEER_OK)
        make_monotone(t);
    if (st == SEER_OK)
        drop_unmeasured(t);
    side_close(&tgt);
    side_close(&dft);
    if (st == SEER_OK) {
        seer_cost_key(seer_context_model(ctx), p->device, t->key, sizeof t->key);
        st = seer_cost_table_check(t);
    }
    if (st == SEER_OK && p->progress)
        p->progress(p->progress_user, measured, n, now_s() - t_start);
    if (st == SEER_OK)
        *out = *t;
    free(pts);
    free(bn.ids);
    free(bn.tok);
    free(bn.pos);
    free(bn.sid);
    free(bn.flag);
    free(bn.view_idx);
    free(t);
    return st;
}
