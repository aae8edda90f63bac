/*
 * draft_model.c: a standalone small draft model with the target's vocabulary, in a context
 * of its own with one draft sequence per target sequence. Optionally the draft reads its
 * own cache through a StreamingLLM view (TriForce drafts with budget 256).
 *
 * The draft cache lags the target's: before drafting it catches up on the tokens emitted
 * since (the pending token and, after a fully accepted round, the last draft token), and
 * after verification it is rewound to the accepted prefix of what it had seen.
 */
#include "spec/spec.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    bool has;
    seer_seq_id dseq;
    int dlen;     /* tokens[0..dlen) are in the draft cache */
    int round_n;  /* n_tokens when this round's drafting began; 0 = not drafted */
    int kept;     /* drafts of this round in the draft cache after the pending token */
} dm_seq;

typedef struct {
    seer_context *dctx;
    dm_seq *ds;
    int32_t *view;
    float *qd; /* [B][G][V] on the draft's backend when it is not the target's kind, or NULL */
    float *qh; /* [G][V] host staging for moving them */
} dm_impl;

static seer_status check_vocab(const seer_model *t, const seer_model *d) {
    const seer_vocab *a = seer_model_vocab(t), *b = seer_model_vocab(d);
    if (seer_vocab_size(a) != seer_vocab_size(b))
        return seer_err(SEER_ERR_INVALID_ARG, "draft model vocabulary has %d tokens, the target's %d",
                        seer_vocab_size(b), seer_vocab_size(a));
    for (int i = 0; i < seer_vocab_size(a); i++)
        if (strcmp(seer_vocab_text(a, i), seer_vocab_text(b, i)))
            return seer_err(SEER_ERR_INVALID_ARG,
                            "draft model vocabulary differs from the target's at token %d ('%s' vs '%s')",
                            i, seer_vocab_text(b, i), seer_vocab_text(a, i));
    return SEER_OK;
}

static void dm_free(seer_gen *g, void *impl) {
    dm_impl *im = impl;
    if (!im)
        return;
    if (im->qd)
        im->dctx->model->be->ops->dealloc(im->dctx->model->be, im->qd);
    free(im->qh);
    seer_context_free(im->dctx);
    free(im->ds);
    free(im->view);
    free(im);
}

static seer_status dm_init(seer_gen *g, void **out) {
    SEER_TRY(check_vocab(g->model, g->spec.draft_model));
    dm_impl *im = calloc(1, sizeof *im);
    if (!im)
        return seer_err(SEER_ERR_OOM, "out of memory");
    seer_context_params cp = g->ctx->params;
    cp.n_pages = 0;
    seer_status s = seer_context_init(g->spec.draft_model, cp, &im->dctx);
    im->ds = calloc(cp.n_seq_max, sizeof *im->ds);
    im->view = seer_malloc_array((size_t)g->spec.sinks + 1, sizeof(int32_t));
    if (s == SEER_OK && (!im->ds || !im->view))
        s = seer_err(SEER_ERR_OOM, "out of memory");
    if (s != SEER_OK) {
        dm_free(g, im);
        return s;
    }
    *out = im;
    return SEER_OK;
}

static seer_status dm_seq_added(seer_gen *g, void *impl, int h) {
    dm_impl *im = impl;
    dm_seq *d = &im->ds[h];
    SEER_TRY(seer_seq_new(im->dctx, &d->dseq));
    d->has = true;
    d->dlen = 0;
    d->round_n = 0;
    return SEER_OK;
}

static void dm_seq_released(seer_gen *g, void *impl, int h) {
    dm_impl *im = impl;
    if (im->ds[h].has)
        seer_seq_free(im->dctx, im->ds[h].dseq);
    memset(&im->ds[h], 0, sizeof im->ds[h]);
}

/* Feeds tokens[from..to) of handle h into the draft cache, no logits. */
static seer_status catch_up(seer_gen *g, dm_impl *im, int h, int from, int to) {
    const int chunk = im->dctx->params.n_batch_max;
    const seer_gen_seq *s = &g->seqs[h];
    seer_seq_id sq[chunk];
    int32_t pos[chunk];
    for (int i = from; i < to; i += chunk) {
        int k = to - i < chunk ? to - i : chunk;
        for (int j = 0; j < k; j++)
            sq[j] = im->ds[h].dseq, pos[j] = i + j;
        seer_batch b = {.n_tokens = k, .token = s->tokens + i, .seq = sq, .pos = pos};
        SEER_TRY(seer_decode(im->dctx, &b, NULL));
    }
    return SEER_OK;
}

/* The distributions of sampled drafts, drawn on the draft model's backend into im->qd, to
 * q on the target's (backends of different kinds share no memory). */
static seer_status move_q(seer_gen *g, dm_impl *im, int n, const int *hs, const int *gam, float *q) {
    seer_backend *db = im->dctx->model->be, *tb = g->model->be;
    const size_t row = (size_t)g->V;
    for (int i = 0; i < n; i++) {
        const seer_gen_seq *s = &g->seqs[hs[i]];
        if (gam[i] == 0 || !(s->sp.temperature > 0))
            continue;
        const size_t off = (size_t)i * g->G * row, bytes = (size_t)gam[i] * row * sizeof(float);
        SEER_TRY(db->ops->download(db, im->qh, im->qd + off, bytes));
        SEER_TRY(tb->ops->upload(tb, q + off, im->qh, bytes));
    }
    return SEER_OK;
}

static seer_status dm_propose(seer_gen *g, void *impl, int n, const int *hs, const int *gam,
                              int32_t *draft, float *q, bool *onehot, int *nd) {
    dm_impl *im = impl;
    const int G = g->G, K = g->spec.draft_budget;
    /* Sampled drafts leave q on the draft model's backend: straight into the target's q when
     * both are the same kind of backend (one address space), else via move_q. */
    float *dq = q;
    if (q && im->dctx->model->be->ops != g->model->be->ops) {
        if (!im->qd) {
            seer_backend *db = im->dctx->model->be;
            const size_t n_q = (size_t)g->ctx->params.n_seq_max * G * g->V;
            SEER_TRY(db->ops->alloc(db, n_q * sizeof(float), (void **)&im->qd));
            im->qh = seer_malloc_array((size_t)G * g->V, sizeof(float));
            if (!im->qh)
                return seer_err(SEER_ERR_OOM, "out of memory for draft distributions");
        }
        dq = im->qd;
    }
    for (int i = 0; i < n; i++) {
        dm_seq *d = &im->ds[hs[i]];
        const seer_gen_seq *s = &g->seqs[hs[i]];
        onehot[i] = false;
        d->round_n = 0;
        if (gam[i] == 0)
            continue;
        /* a round that failed after drafting left its drafts in the draft cache: back to what
         * the target holds, so that a retried round drafts the same */
        if (seer_seq_len(im->dctx, d->dseq) > s->n_tokens - 1) {
            SEER_TRY(seer_seq_rewind(im->dctx, d->dseq, s->n_tokens - 1));
            d->dlen = s->n_tokens - 1;
        }
        SEER_TRY(catch_up(g, im, hs[i], d->dlen, s->n_tokens - 1));
        d->dlen = s->n_tokens - 1;
        d->round_n = s->n_tokens;
        int L = d->dlen;
        if (K > 0 && L > K) {
            int sinks = g->spec.sinks < K ? g->spec.sinks : K / 2;
            for (int k = 0; k < sinks; k++)
                im->view[k] = k;
            seer_view v = {.idx = im->view, .n = sinks, .n_layers_view = 1, .n_heads_view = 1,
                           .tail_start = L - (K - sinks)};
            SEER_TRY(seer_seq_set_view(im->dctx, d->dseq, &v));
        }
    }
    seer_seq_id dseq[n > 0 ? n : 1];
    int kept[n > 0 ? n : 1];
    dseq[0] = 0;
    for (int i = 0; i < n; i++)
        dseq[i] = im->ds[hs[i]].dseq;
    seer_status st = seer_gen_expand(g, im->dctx, n, hs, dseq, NULL, NULL, dq, kept);
    for (int i = 0; i < n && st == SEER_OK; i++) {
        dm_seq *d = &im->ds[hs[i]];
        if (!d->round_n)
            continue;
        /* the draft cache holds the pending token and, for a chain, the drafts fed after it;
         * a tree's nodes are cut (the accepted path is fed next round) */
        const int L = g->seqs[hs[i]].n_tokens - 1, len = seer_seq_len(im->dctx, d->dseq);
        const int keep = L + 1 + kept[i] < len ? L + 1 + kept[i] : len;
        st = seer_seq_rewind(im->dctx, d->dseq, keep);
        d->dlen = keep;
        d->kept = keep - (L + 1) > 0 ? keep - (L + 1) : 0;
    }
    if (st == SEER_OK && dq != q)
        st = move_q(g, im, n, hs, gam, q);
    for (int i = 0; i < n; i++)
        seer_seq_clear_view(im->dctx, im->ds[hs[i]].dseq);
    return st;
}

static seer_status dm_verified(seer_gen *g, void *impl, int h, int n_acc, int nd) {
    dm_impl *im = impl;
    dm_seq *d = &im->ds[h];
    if (!d->round_n)
        return SEER_OK;
    /* the draft holds pending + the round's first `kept` chain drafts; keep what the target
     * accepted of them */
    int keep = d->round_n + (n_acc < d->kept ? n_acc : d->kept);
    if (keep < d->dlen) {
        SEER_TRY(seer_seq_rewind(im->dctx, d->dseq, keep));
        d->dlen = keep;
    }
    d->round_n = 0;
    return SEER_OK;
}

const seer_drafter_ops seer_drafter_model = {
    .name = "draft",
    .init = dm_init,
    .free = dm_free,
    .seq_added = dm_seq_added,
    .seq_released = dm_seq_released,
    .propose = dm_propose,
    .verified = dm_verified,
};
