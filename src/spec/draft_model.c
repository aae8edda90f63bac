/*
 * draft_model.c: a standalone small draft model with the target's vocabulary, in a context
 * of its own with one draft sequence per target sequence. Optionally the draft reads its
 * own cache through a StreamingLLM view (TriForce drafts with budget 256).
 *
 * The draft cache lags the target's: before drafting it catches up on the tokens emitted
 * since (the pending token and, after a fully accepted round, the last draft token), and
 * after verification it is rewound to the accepted prefix of what it had seen.
 */
#include "spec/drafter.h"
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
    /* settings (seer_spec_params) */
    int budget; /* StreamingLLM budget of the draft's own cache, 0: full */
    int sinks;
    int best_first; /* > 0: trees by best-first search, this many children per expanded node */
    const seer_model *target;
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

static void dm_free(const seer_draft_env *env, void *impl) {
    dm_impl *im = impl;
    if (!im)
        return;
    if (im->qd)
        im->dctx->be->ops->dealloc(im->dctx->be, im->qd);
    free(im->qh);
    seer_context_free(im->dctx);
    free(im->ds);
    free(im->view);
    free(im);
}

/* Its settings (OPTS below): its own cache's budget, and the streaming view's sinks its view
 * of that cache keeps. */
typedef struct {
    int budget, sinks, best_first;
} dm_settings;

extern const seer_drafter_desc seer_drafter_model_desc;

static seer_status dm_init(const seer_draft_env *env, const seer_spec_params *p, void **out) {
    if (!p->draft_model)
        return seer_err(SEER_ERR_INVALID_ARG, "speculation 'draft' needs a draft model");
    dm_settings own;
    seer_drafter_settings(&seer_drafter_model_desc, p, &own);
    if (own.budget < 0 || own.sinks < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "draft budget %d or sinks %d is negative", own.budget, own.sinks);
    SEER_TRY(check_vocab(env->model, p->draft_model));
    dm_impl *im = calloc(1, sizeof *im);
    if (!im)
        return seer_err(SEER_ERR_OOM, "out of memory");
    im->budget = own.budget;
    im->sinks = own.sinks;
    im->best_first = own.best_first;
    im->target = env->model;
    seer_context_params cp = env->ctx->params;
    cp.n_pages = 0;
    seer_status s = seer_context_init(p->draft_model, cp, &im->dctx);
    im->ds = calloc(cp.n_seq_max, sizeof *im->ds);
    im->view = seer_malloc_array((size_t)own.sinks + 1, sizeof(int32_t));
    if (s == SEER_OK && (!im->ds || !im->view))
        s = seer_err(SEER_ERR_OOM, "out of memory");
    if (s != SEER_OK) {
        dm_free(env, im);
        return s;
    }
    *out = im;
    return SEER_OK;
}

static seer_status dm_seq_added(const seer_draft_env *env, void *impl, seer_draft_seq *s) {
    dm_impl *im = impl;
    dm_seq *d = &im->ds[s->slot];
    SEER_TRY(seer_seq_new(im->dctx, &d->dseq));
    d->has = true;
    d->dlen = 0;
    d->round_n = 0;
    return SEER_OK;
}

static void dm_seq_released(const seer_draft_env *env, void *impl, int slot) {
    dm_impl *im = impl;
    if (im->ds[slot].has)
        seer_seq_free(im->dctx, im->ds[slot].dseq);
    memset(&im->ds[slot], 0, sizeof im->ds[slot]);
}

/* Feeds tokens[from..to) of s into its draft cache, no logits. */
static seer_status catch_up(dm_impl *im, const seer_draft_seq *s, int from, int to) {
    const int chunk = im->dctx->params.n_batch_max;
    const int h = s->slot;
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
 * each sequence's q on the target's (backends of different kinds share no memory). */
static seer_status move_q(const seer_draft_env *env, dm_impl *im, int n, seer_draft_seq *seqs) {
    seer_backend *db = im->dctx->be, *tb = im->target->be;
    const size_t row = (size_t)env->V;
    for (int i = 0; i < n; i++) {
        if (seqs[i].n == 0 || !seqs[i].q)
            continue;
        const size_t off = (size_t)i * env->max_nodes * row, bytes = (size_t)seqs[i].n * row * sizeof(float);
        SEER_TRY(db->ops->download(db, im->qh, im->qd + off, bytes));
        SEER_TRY(tb->ops->upload(tb, seqs[i].q, im->qh, bytes));
    }
    return SEER_OK;
}

static seer_status dm_propose(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs) {
    dm_impl *im = impl;
    const int G = env->max_nodes, K = im->budget;
    /* Sampled drafts leave q on the draft model's backend: straight into the target's q when
     * both are the same kind of backend (one address space), else via move_q. */
    bool sampled = false;
    for (int i = 0; i < n; i++)
        sampled |= seqs[i].q != NULL;
    const bool apart = sampled && im->dctx->be->ops != im->target->be->ops;
    if (apart && !im->qd) {
        seer_backend *db = im->dctx->be;
        const size_t n_q = (size_t)im->dctx->params.n_seq_max * G * env->V;
        SEER_TRY(db->ops->alloc(db, n_q * sizeof(float), (void **)&im->qd));
        im->qh = seer_malloc_array((size_t)G * env->V, sizeof(float));
        if (!im->qh)
            return seer_err(SEER_ERR_OOM, "out of memory for draft distributions");
    }
    for (int i = 0; i < n; i++) {
        const seer_draft_seq *s = &seqs[i];
        dm_seq *d = &im->ds[s->slot];
        seqs[i].onehot = false;
        d->round_n = 0;
        if (s->max_nodes == 0)
            continue;
        /* a round that failed after drafting left its drafts in the draft cache: back to what
         * the target holds, so that a retried round drafts the same */
        if (seer_seq_len(im->dctx, d->dseq) > s->n_tokens - 1) {
            SEER_TRY(seer_seq_rewind(im->dctx, d->dseq, s->n_tokens - 1));
            d->dlen = s->n_tokens - 1;
        }
        SEER_TRY(catch_up(im, s, d->dlen, s->n_tokens - 1));
        d->dlen = s->n_tokens - 1;
        d->round_n = s->n_tokens;
        int L = d->dlen;
        if (K > 0 && L > K) {
            int sinks = im->sinks < K ? im->sinks : K / 2;
            for (int k = 0; k < sinks; k++)
                im->view[k] = k;
            seer_view v = {.idx = im->view, .n = sinks, .n_layers_view = 1, .n_heads_view = 1,
                           .tail_start = L - (K - sinks)};
            SEER_TRY(seer_seq_set_view(im->dctx, d->dseq, &v));
        }
    }
    seer_seq_id dseq[n > 0 ? n : 1];
    float *q_of[n > 0 ? n : 1];
    int kept[n > 0 ? n : 1];
    dseq[0] = 0;
    q_of[0] = NULL;
    for (int i = 0; i < n; i++) {
        dseq[i] = im->ds[seqs[i].slot].dseq;
        q_of[i] = apart ? im->qd + (size_t)i * G * env->V : seqs[i].q;
    }
    seer_status st;
    if (im->best_first > 0) { /* SpecExec's search: the draft cache ends at the pending token */
        st = seer_draft_best_first(env, im->dctx, n, seqs, dseq, q_of, im->best_first);
        for (int i = 0; i < n; i++)
            kept[i] = 0;
    } else {
        st = seer_draft_expand(env, im->dctx, n, seqs, dseq, q_of, NULL, NULL, kept, (seer_draft_reads){0});
    }
    for (int i = 0; i < n && st == SEER_OK; i++) {
        dm_seq *d = &im->ds[seqs[i].slot];
        if (!d->round_n)
            continue;
        /* the draft cache holds the pending token and, for a chain, the drafts fed after it;
         * a tree's nodes are cut (the accepted path is fed next round) */
        const int L = seqs[i].n_tokens - 1, len = seer_seq_len(im->dctx, d->dseq);
        const int keep = L + 1 + kept[i] < len ? L + 1 + kept[i] : len;
        st = seer_seq_rewind(im->dctx, d->dseq, keep);
        d->dlen = keep;
        d->kept = keep - (L + 1) > 0 ? keep - (L + 1) : 0;
    }
    if (st == SEER_OK && apart)
        st = move_q(env, im, n, seqs);
    for (int i = 0; i < n; i++)
        seer_seq_clear_view(im->dctx, im->ds[seqs[i].slot].dseq);
    return st;
}

static seer_status dm_verified(const seer_draft_env *env, void *impl, seer_draft_seq *s) {
    dm_impl *im = impl;
    dm_seq *d = &im->ds[s->slot];
    if (!d->round_n)
        return SEER_OK;
    /* the draft holds pending + the round's first `kept` chain drafts; keep what the target
     * accepted of them */
    int keep = d->round_n + (s->n_acc < d->kept ? s->n_acc : d->kept);
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
    .has_q = true,
};

static const seer_drafter_option OPTS[] = {
    {{.flag = "draft-budget", .json = "draft_budget", .metavar = "K", .type = SEER_SPEC_OPT_INT, .def = 0,
      .lo = 0, .hi = 1 << 24, .help = "StreamingLLM budget of the draft model's own cache (0 = full)"},
     SEER_DRAFTER_OPT_EXT, offsetof(dm_settings, budget)},
    SEER_DRAFTER_READS("spec-sinks", offsetof(dm_settings, sinks)),
    {{.flag = "draft-best-first", .json = "draft_best_first", .metavar = "K", .type = SEER_SPEC_OPT_INT, .def = 0,
      .lo = 0, .hi = 64,
      .help = "trees by SpecExec's best-first search, K children per expanded node (0 = fill the planned "
              "shape; with --spec tree --spec-base draft); trees may then exceed a forward call (--spec-tree-size up "
              "to 4096)"},
     SEER_DRAFTER_OPT_EXT, offsetof(dm_settings, best_first)},
};

const seer_drafter_desc seer_drafter_model_desc = {
    .name = "draft", .kind = SEER_SPEC_DRAFT, .ops = &seer_drafter_model,
    .help = "a small draft model of the same vocabulary (--draft-model)",
    .flags = SEER_DRAFTER_DRAFT_MODEL | SEER_DRAFTER_AUTO | SEER_DRAFTER_TREE_BASE,
    .options = OPTS, .n_options = 3,
};
