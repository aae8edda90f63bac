/*
 * select_view.c: the shared part of the self-drafts whose view a selector chooses per round
 * from a query (select_view.h): the index kept in step with each sequence's cache, the query
 * captured in the first draft step of every round, and the view assembled from the sinks,
 * the selector's slots and the recent window.
 *
 * The budget K is split as sinks + n_pick + window, the sinks and the window each cut to a
 * quarter of K when K is small (auto may try small budgets), so that at least half of K is
 * chosen by the selector. A selector may fill fewer than n_pick slots of a row (MagicPIG's
 * collisions); the row is then padded with slots at or past the window's start, which the
 * view's contract ignores (only listed slots below tail_start are read), so the draft reads
 * at most K cached slots.
 *
 * Not for: what a selector indexes or how it scores (draft_shadowkv.c, draft_magicpig.c).
 */
#include "spec/select_view.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    void *ix;        /* the selector's index, or NULL */
    seer_seq_id seq; /* the sequence ix indexes */
    int indexed;     /* slots [0, indexed) are in ix */
    float *q;        /* [n_layers][H*Dh] the latest captured query, or NULL */
} sel_seq;

typedef struct {
    const seer_selector *sel;
    void *cfg;
    int budget, sinks, window, n_pick;
    bool draft_weights;
    seer_context *ctx;
    const seer_model_info *in;
    int n_seq_max;
    sel_seq *ss;   /* [n_seq_max] */
    int32_t *rows; /* [n_layers][Hkv][sinks + n_pick] the view being built */
    int32_t *pick; /* [n_layers][Hkv][n_pick] the selector's answer */
    int *cnt;      /* [n_layers * Hkv] */
    float *qbuf;   /* [n_layers][B][H*Dh] queries captured by one draft call */
} sel_impl;

static void seq_clear(sel_impl *im, sel_seq *s) {
    if (s->ix)
        im->sel->seq_free(s->ix);
    free(s->q);
    memset(s, 0, sizeof *s);
}

void seer_select_free(const seer_draft_env *env, void *impl) {
    (void)env;
    sel_impl *im = impl;
    if (!im)
        return;
    for (int i = 0; im->ss && i < im->n_seq_max; i++)
        seq_clear(im, &im->ss[i]);
    free(im->ss), free(im->rows), free(im->pick), free(im->cnt), free(im->qbuf), free(im->cfg);
    free(im);
}

seer_status seer_select_init(const seer_draft_env *env, seer_select_settings set, const seer_selector *sel,
                             void *cfg, void **impl) {
    if (set.budget < 1 || set.sinks < 0 || set.window < 0) {
        free(cfg);
        return seer_err(SEER_ERR_INVALID_ARG, "spec budget %d must be positive, sinks %d and window %d not negative",
                        set.budget, set.sinks, set.window);
    }
    sel_impl *im = calloc(1, sizeof *im);
    if (!im) {
        free(cfg);
        return seer_err(SEER_ERR_OOM, "out of memory for the selecting self-draft");
    }
    const seer_model_info *in = &env->model->info;
    const int B = env->ctx->params.n_seq_max, K = set.budget;
    im->sel = sel;
    im->cfg = cfg;
    im->budget = K;
    im->sinks = set.sinks < K / 4 ? set.sinks : K / 4;
    im->window = set.window < K / 4 ? set.window : K / 4;
    im->n_pick = K - im->sinks - im->window;
    im->draft_weights = set.draft_weights;
    im->ctx = env->ctx;
    im->in = in;
    im->n_seq_max = B;
    const size_t rows = (size_t)in->n_layers * in->n_kv_heads;
    im->ss = calloc(B, sizeof *im->ss);
    im->rows = seer_malloc_array(rows * (im->sinks + im->n_pick), sizeof(int32_t));
    im->pick = seer_malloc_array(rows * im->n_pick, sizeof(int32_t));
    im->cnt = seer_malloc_array(rows, sizeof(int));
    im->qbuf = seer_malloc_array((size_t)in->n_layers * B * in->n_heads * in->head_dim, sizeof(float));
    if (!im->ss || !im->rows || !im->pick || !im->cnt || !im->qbuf) {
        seer_select_free(env, im);
        return seer_err(SEER_ERR_OOM, "out of memory for the selecting self-draft");
    }
    *impl = im;
    return SEER_OK;
}

void seer_select_released(const seer_draft_env *env, void *impl, int slot) {
    (void)env;
    sel_impl *im = impl;
    seq_clear(im, &im->ss[slot]);
}

int seer_select_q_rows(void *impl, int n_prompt) {
    (void)impl;
    return n_prompt > 0 ? 1 : 0;
}

/* Keeps q (the last of n_rows rows per layer of a [n_layers][n_rows][H*Dh] block; stride
 * rows apart) as s's query. */
static seer_status keep_query(sel_impl *im, sel_seq *s, const float *q, int n_rows, int row) {
    const size_t qd = (size_t)im->in->n_heads * im->in->head_dim;
    if (!s->q)
        s->q = seer_malloc_array((size_t)im->in->n_layers * qd, sizeof(float));
    if (!s->q)
        return seer_err(SEER_ERR_OOM, "out of memory for the draft's query");
    for (int l = 0; l < im->in->n_layers; l++)
        memcpy(s->q + l * qd, q + ((size_t)l * n_rows + row) * qd, qd * sizeof(float));
    return SEER_OK;
}

seer_status seer_select_prefill_q(const seer_draft_env *env, void *impl, seer_draft_seq *s, const float *q,
                                  int n_rows) {
    (void)env;
    sel_impl *im = impl;
    sel_seq *ss = &im->ss[s->slot];
    seq_clear(im, ss); /* a new sequence in this slot: fresh state */
    return n_rows > 0 ? keep_query(im, ss, q, n_rows, n_rows - 1) : SEER_OK;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Brings s's index up to its cache's L exact slots (renewed for another sequence). */
static seer_status index_up_to(sel_impl *im, const seer_draft_seq *s, int L) {
    sel_seq *ss = &im->ss[s->slot];
    if (ss->ix && (ss->seq != s->seq || L < ss->indexed)) {
        im->sel->seq_free(ss->ix);
        ss->ix = NULL;
    }
    if (!ss->ix) {
        ss->ix = im->sel->seq_new(im->cfg, im->in);
        if (!ss->ix)
            return seer_err(SEER_ERR_OOM, "out of memory for the draft's key index");
        ss->seq = s->seq;
        ss->indexed = 0;
    }
    if (ss->indexed < L) {
        SEER_TRY(im->sel->extend(im->cfg, ss->ix, im->ctx, s->seq, ss->indexed, L));
        ss->indexed = L;
    }
    return SEER_OK;
}

/* Sets the draft view of s whose cache holds L slots. */
static seer_status set_view(sel_impl *im, const seer_draft_seq *s, int L) {
    if (L <= im->budget) {
        seer_seq_clear_view(im->ctx, s->seq);
        return SEER_OK;
    }
    sel_seq *ss = &im->ss[s->slot];
    const int lim = L - im->window, lo = im->sinks < lim ? im->sinks : lim, n = im->sinks + im->n_pick;
    const int n_rows = im->in->n_layers * im->in->n_kv_heads;
    if (!ss->q) { /* no query yet (a view asked for before any capture): sinks + recent */
        for (int i = 0; i < im->sinks; i++)
            im->rows[i] = i;
        seer_view v = {.idx = im->rows, .n = im->sinks, .n_layers_view = 1, .n_heads_view = 1,
                       .tail_start = L - (im->budget - im->sinks)};
        return seer_seq_set_view(im->ctx, s->seq, &v);
    }
    SEER_TRY(index_up_to(im, s, L));
    SEER_TRY(im->sel->select(im->cfg, ss->ix, ss->q, lo, lim, ss->indexed, im->n_pick, im->pick, im->cnt));
    for (int r = 0; r < n_rows; r++) {
        int32_t *row = im->rows + (size_t)r * n, *pk = im->pick + (size_t)r * im->n_pick;
        int k = 0, c = im->cnt[r] < im->n_pick ? im->cnt[r] : im->n_pick;
        for (int i = 0; i < lo; i++)
            row[k++] = i;
        qsort(pk, c, sizeof *pk, cmp_i32);
        for (int i = 0; i < c; i++) /* in [lo, lim), once each */
            if (pk[i] >= lo && pk[i] < lim && (k == 0 || pk[i] > row[k - 1]))
                row[k++] = pk[i];
        for (int pad = lim; k < n; pad++) /* at or past tail_start: not read */
            row[k++] = pad;
    }
    seer_view v = {.idx = im->rows, .n = n, .n_layers_view = im->in->n_layers,
                   .n_heads_view = im->in->n_kv_heads, .tail_start = lim};
    return seer_seq_set_view(im->ctx, s->seq, &v);
}

seer_status seer_select_propose(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs) {
    sel_impl *im = impl;
    seer_context *c = im->ctx;
    seer_status st = SEER_OK;
    seer_seq_id dseq[n > 0 ? n : 1];
    uint8_t cap0[n > 0 ? n : 1];
    memset(cap0, 0, sizeof cap0);
    for (int i = 0; i < n && st == SEER_OK; i++) {
        dseq[i] = seqs[i].seq;
        cap0[i] = seqs[i].max_nodes > 0;
        st = set_view(im, &seqs[i], seqs[i].n_tokens - 1);
    }
    if (st == SEER_OK)
        st = seer_draft_expand(env, c, n, seqs, dseq, NULL, cap0, im->qbuf, NULL,
                               (seer_draft_reads){.draft_weights = im->draft_weights});
    int n_cap = 0;
    for (int i = 0; i < n && st == SEER_OK; i++)
        n_cap += cap0[i];
    /* the pending token's query chooses the next round's view (flagged rows in order) */
    for (int i = 0, k = 0; i < n && st == SEER_OK; i++)
        if (cap0[i])
            st = keep_query(im, &im->ss[seqs[i].slot], im->qbuf, n_cap, k++);
    for (int i = 0; i < n; i++) {
        seer_status r = seer_draft_leave(c, &seqs[i]);
        if (st == SEER_OK)
            st = r;
        seqs[i].onehot = false;
    }
    return st;
}

seer_status seer_select_view(const seer_draft_env *env, void *impl, const seer_draft_seq *s,
                             seer_draft_reads *reads) {
    (void)env;
    *reads = (seer_draft_reads){.draft_weights = ((sel_impl *)impl)->draft_weights};
    return set_view(impl, s, s->n_tokens - 1);
}
