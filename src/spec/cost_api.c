/*
 * cost_api.c: the public face of the cost table (seer_spec_cost, include/seer.h) that
 * `--spec auto` reads: calibration fitted to a context, the cache file and its default place.
 *
 * Not the model itself (cost.c, cost_plan.c) nor the measuring (calibrate.c): this file
 * chooses grids a given context can hold, adds the rows calibration does not measure, and
 * wraps the table in an object tools can hold through the public API.
 */
#include "model/model.h"
#include "spec/cost.h"
#include "util/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct seer_spec_cost {
    seer_cost_table t;
};

static seer_status wrap(const seer_cost_table *t, seer_spec_cost **out) {
    seer_spec_cost *c = malloc(sizeof *c);
    if (!c)
        return seer_err(SEER_ERR_OOM, "out of memory for a cost table");
    c->t = *t;
    *out = c;
    return SEER_OK;
}

/* The n-gram drafter matches suffixes on the host and makes no forward call: its step is
 * counted as free next to the target's calls (measured on stories260K it is a few µs, below
 * the timer noise of one decode). */
static void add_ngram_row(seer_cost_table *t) {
    if (seer_cost_find_drafter(t, SEER_SPEC_NGRAM) >= 0 || t->n_drafters >= SEER_COST_MAX_DRAFTERS)
        return;
    seer_cost_drafter *d = &t->drafter[t->n_drafters++];
    memset(d, 0, sizeof *d);
    d->kind = SEER_SPEC_NGRAM;
    d->n_k = 1;
    d->k[0] = 0;
}

seer_spec_calibrate_params seer_spec_calibrate_default_params(void) {
    return (seer_spec_calibrate_params){0};
}

double seer_spec_cost_default_budget(const seer_context *ctx) {
    /* the CPU's steps are the slow ones (a 1.5B model's is near a second on two cores): its
     * bound is what a person waits for once; a GPU measures the whole table of an 8B model in
     * well under a second */
    return ctx && !strcmp(ctx->model->be->ops->name, "cpu") ? 10.0 : 2.0;
}

typedef struct {
    const seer_spec_calibrate_params *p;
    double budget_s;
} progress_relay;

static void relay(void *user, int measured, int total, double elapsed_s) {
    const progress_relay *r = user;
    const seer_spec_calibrate_progress pr = {measured, total, elapsed_s, r->budget_s, false};
    r->p->progress(r->p->progress_user, &pr);
}

seer_status seer_spec_cost_measure(seer_context *ctx, seer_spec_calibrate_params sp, seer_spec_cost **out) {
    SEER_CHECK_ARG(ctx);
    SEER_CHECK_ARG(out);
    if (sp.budget_s < 0 || !isfinite(sp.budget_s))
        return seer_err(SEER_ERR_INVALID_ARG, "calibration: a budget of %g s", sp.budget_s);
    seer_calibrate_params p = seer_calibrate_default_params();
    p.time_budget_s = sp.budget_s > 0 ? sp.budget_s : seer_spec_cost_default_budget(ctx);
    if (p.aim_s > p.time_budget_s)
        p.aim_s = p.time_budget_s;
    progress_relay rl = {&sp, p.time_budget_s};
    if (sp.progress)
        p.progress = relay, p.progress_user = &rl;
    /* batch sizes the context can hold: 1, 2, 4 within its sequences and a verification call
     * of 8 tokens per sequence within its batch limit */
    const int n_seq = ctx->params.n_seq_max, TB = ctx->params.n_batch_max;
    p.n_n = 0;
    for (int n = 2; n <= 8 && n <= TB; n *= 2)
        p.n[p.n_n++] = n;
    if (p.n_n == 0)
        return seer_err(SEER_ERR_INVALID_ARG, "calibration: a batch limit of %d tokens is too small", TB);
    const int nm = p.n[p.n_n - 1];
    for (int b = 1; b <= 4 && b <= n_seq && b * nm <= TB; b *= 2)
        p.b[p.n_b++] = b;
    seer_context *dctx = NULL;
    seer_status st = SEER_OK;
    if (sp.draft_model) {
        seer_context_params cp = seer_context_default_params();
        cp.n_ctx = ctx->params.n_ctx;
        cp.n_seq_max = p.b[p.n_b - 1];
        cp.n_batch_max = TB;
        st = seer_context_init(sp.draft_model, cp, &dctx);
        p.draft_ctx = dctx;
    }
    /* the n-gram row is added after measuring: the previous table's comes off for the match */
    seer_cost_table *prev = NULL;
    if (sp.prev) {
        prev = malloc(sizeof *prev);
        if (prev) {
            *prev = sp.prev->t;
            const int d = seer_cost_find_drafter(prev, SEER_SPEC_NGRAM);
            if (d >= 0) {
                memmove(&prev->drafter[d], &prev->drafter[d + 1],
                        sizeof prev->drafter[0] * (size_t)(prev->n_drafters - d - 1));
                prev->n_drafters--;
            }
            p.prev = prev;
        }
    }
    seer_cost_table *t = calloc(1, sizeof *t);
    if (st == SEER_OK && !t)
        st = seer_err(SEER_ERR_OOM, "out of memory for a cost table");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (st == SEER_OK)
        st = seer_cost_calibrate(ctx, &p, t);
    if (st == SEER_OK) {
        add_ngram_row(t);
        st = wrap(t, out);
    }
    if (st == SEER_OK && sp.progress) {
        int m, n;
        seer_cost_table_count(t, &m, &n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double el = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        const seer_spec_calibrate_progress pr = {m, n, el, p.time_budget_s, true};
        sp.progress(sp.progress_user, &pr);
    }
    free(prev);
    free(t);
    seer_context_free(dctx);
    return st;
}

seer_status seer_spec_cost_calibrate(seer_context *ctx, seer_model *draft_model, double time_s,
                                     seer_spec_cost **out) {
    seer_spec_calibrate_params p = seer_spec_calibrate_default_params();
    p.budget_s = time_s > 0 ? time_s : 0;
    p.draft_model = draft_model;
    return seer_spec_cost_measure(ctx, p, out);
}

seer_status seer_spec_cost_calibrate_seqs(seer_context *ctx, const seer_seq_id *seqs, int n_seq,
                                          const int *budgets, int n_budgets, bool ngram, double time_s,
                                          seer_spec_cost **out) {
    SEER_CHECK_ARG(ctx);
    SEER_CHECK_ARG(seqs);
    SEER_CHECK_ARG(out);
    if (n_seq < 1 || n_seq > SEER_COST_MAX_SEQ || n_budgets < 0 || n_budgets > SEER_COST_MAX_K ||
        (n_budgets > 0 && !budgets))
        return seer_err(SEER_ERR_INVALID_ARG, "calibration in place: %d sequences, %d budgets", n_seq, n_budgets);
    /* a benchmark's one point: time_s is the measuring aimed at, and the bound is generous
     * (the point's table should be whole; past the bound the rest is estimated) */
    seer_calibrate_params p = seer_calibrate_default_params();
    if (time_s > 0)
        p.aim_s = time_s;
    p.time_budget_s = 30 * p.aim_s;
    p.seqs = seqs;
    p.n_b = 1;
    p.b[0] = n_seq;
    p.n_l = 1;
    p.l[0] = seer_seq_len(ctx, seqs[0]);
    /* verification of chains up to the planner's longest, within the batch limit */
    const int TB = ctx->params.n_batch_max, ns[] = {2, 3, 5, 9, SEER_COST_MAX_G + 1};
    p.n_n = 0;
    for (int i = 0; i < 5 && n_seq * ns[i] <= TB; i++)
        p.n[p.n_n++] = ns[i];
    if (p.n_n == 0)
        return seer_err(SEER_ERR_INVALID_ARG, "calibration: a batch limit of %d tokens is too small", TB);
    p.self_drafts = n_budgets > 0;
    p.n_k = 0;
    for (int i = 0; i < n_budgets; i++)
        if (budgets[i] < p.l[0]) /* a view as large as the cache is no draft */
            p.k[p.n_k++] = budgets[i];
    p.self_drafts = p.n_k > 0;
    if (!p.self_drafts)
        p.n_k = 1, p.k[0] = 1; /* unused: the grid needs a budget */
    seer_cost_table *t = calloc(1, sizeof *t);
    if (!t)
        return seer_err(SEER_ERR_OOM, "out of memory for a cost table");
    seer_status st = seer_cost_calibrate(ctx, &p, t);
    if (st == SEER_OK) {
        if (ngram)
            add_ngram_row(t);
        st = wrap(t, out);
    }
    free(t);
    return st;
}

seer_status seer_spec_cost_load(const char *path, const seer_context *ctx, seer_spec_cost **out) {
    SEER_CHECK_ARG(path);
    SEER_CHECK_ARG(ctx);
    SEER_CHECK_ARG(out);
    char key[SEER_COST_KEY_MAX];
    seer_cost_key(ctx->model, NULL, key, sizeof key);
    seer_cost_table *t = calloc(1, sizeof *t);
    if (!t)
        return seer_err(SEER_ERR_OOM, "out of memory for a cost table");
    seer_status st = seer_cost_load(path, key, t);
    if (st == SEER_OK)
        st = wrap(t, out);
    free(t);
    return st;
}

seer_status seer_spec_cost_parse(const char *text, size_t len, seer_spec_cost **out) {
    SEER_CHECK_ARG(text);
    SEER_CHECK_ARG(out);
    seer_cost_table *t = calloc(1, sizeof *t);
    if (!t)
        return seer_err(SEER_ERR_OOM, "out of memory for a cost table");
    seer_status st = seer_cost_parse(text, len, t);
    if (st == SEER_OK)
        st = wrap(t, out);
    free(t);
    return st;
}

seer_status seer_spec_cost_save(const seer_spec_cost *c, const char *path) {
    SEER_CHECK_ARG(c);
    SEER_CHECK_ARG(path);
    return seer_cost_save(&c->t, path);
}

seer_status seer_spec_cost_check_path(const char *path) { return seer_cost_check_path(path); }

/* mkdir -p of the directory part of path's first n bytes. */
static seer_status make_dirs(char *dir) {
    for (char *p = dir + 1;; p++) {
        const char c = *p;
        if (c != '/' && c != 0)
            continue;
        *p = 0;
        const int r = mkdir(dir, 0755);
        const int e = errno;
        *p = c;
        if (r != 0 && e != EEXIST)
            return seer_err(SEER_ERR_IO, "cannot create the cache directory '%s': %s", dir, strerror(e));
        if (!c)
            return SEER_OK;
    }
}

seer_status seer_spec_cost_default_path(const seer_context *ctx, char *buf, size_t cap) {
    SEER_CHECK_ARG(ctx);
    SEER_CHECK_ARG(buf);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[1024];
    int n;
    if (xdg && xdg[0] == '/')
        n = snprintf(dir, sizeof dir, "%s/seer", xdg);
    else if (home && home[0])
        n = snprintf(dir, sizeof dir, "%s/.cache/seer", home);
    else
        return seer_err(SEER_ERR_IO, "no cache directory: neither XDG_CACHE_HOME nor HOME is set");
    if (n < 0 || (size_t)n >= sizeof dir)
        return seer_err(SEER_ERR_IO, "the cache directory's path is too long");
    SEER_TRY(make_dirs(dir));
    char key[SEER_COST_KEY_MAX];
    seer_cost_key(ctx->model, NULL, key, sizeof key);
    return seer_cost_cache_path(dir, key, buf, cap);
}

void seer_spec_cost_count(const seer_spec_cost *c, int *measured, int *total) {
    if (!c) {
        if (measured)
            *measured = 0;
        if (total)
            *total = 0;
        return;
    }
    seer_cost_table_count(&c->t, measured, total);
}

bool seer_spec_cost_has(const seer_spec_cost *c, seer_spec_kind kind) {
    return c && seer_cost_find_drafter(&c->t, kind) >= 0;
}

void seer_spec_cost_free(seer_spec_cost *c) { free(c); }

const seer_cost_table *seer_spec_cost_table(const seer_spec_cost *c) { return c ? &c->t : NULL; }
