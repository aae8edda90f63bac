/*
 * draft_hierarchy.c: TriForce's speculation hierarchy, exact at every level.
 *
 *   bottom: a small draft model (the `draft` drafter's machinery, draft_model.c) proposes
 *           chains of hier_gamma tokens;
 *   middle: the target itself reading a sparse view of its own cache (a self-draft view:
 *           streaming, retrieval, snapkv or quantkv, chosen by hier_base) verifies each such
 *           chain in one forward call with the exact rule, and repeats until it holds the G
 *           tokens of the round;
 *   top:    the generator verifies those G tokens on the full target as any chain.
 *
 * The middle level is itself a lossless speculative loop (speculative-decoding.md §2.6): a
 * rejected bottom token is replaced by a draw from the residual norm(max(p_mid - q_bot, 0)),
 * never from p_mid as TriForce's published code does. Each middle token x is then
 * distributed as p_mid at the position it was decided, and that row of p_mid is what the
 * proposal hands to the top as x's q, so that the top's verification is exact too. Greedy
 * rounds walk the middle's argmax; the top verifies, so the output is plain decoding's.
 *
 * The middle's KV for its own tokens is written into the target's cache under the view
 * (as the self-drafts write theirs) and cut when the round ends; the top's verification
 * rewrites those slots with full attention. Proposals are chains (no token trees).
 */
#include "sample/sample.h"
#include "spec/drafter.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

/* Test builds only (SEER_TEST_HOOKS): when nonzero, the middle level replaces a rejected draft
 * token by a sample from its own distribution instead of the residual (TriForce's published
 * code), which is NOT exact; the distribution test uses it to show its power. */
#ifdef SEER_TEST_HOOKS
int seer_hier_wrong_rule_for_tests;
#define WRONG_RULE (seer_hier_wrong_rule_for_tests != 0)
#else
#define WRONG_RULE false
#endif

typedef struct {
    /* settings (seer_spec_params) */
    int g1;                       /* bottom chain per middle verification (hier_gamma) */
    const seer_drafter_ops *mops; /* the middle's view: a self-draft or quantkv */
    void *mid;
    void *bot;                    /* seer_drafter_model's state */
    seer_draft_env benv;          /* the bottom's run: chains of g1 */
    int32_t *bshape, *bdepth;     /* [g1] */
    int32_t *btok, *bpar;         /* [B][g1] the bottom's chains */
    float *bq;                    /* [B][g1][V] target backend memory: their q, or NULL */
    seer_draft_seq *bs;           /* [B] the bottom's view of each sequence */
    int n_seq_max;
    float *host;                  /* [V] staging of q rows */
} hier_impl;

static void hier_free(const seer_draft_env *env, void *impl) {
    hier_impl *im = impl;
    if (!im)
        return;
    if (im->mid)
        im->mops->free(env, im->mid);
    if (im->bot)
        seer_drafter_model.free(&im->benv, im->bot);
    if (im->bq)
        env->model->be->ops->dealloc(env->model->be, im->bq);
    free(im->bshape), free(im->bdepth), free(im->btok), free(im->bpar), free(im->bs), free(im->host);
    free(im);
}

/* Its own settings (OPTS below); the middle and the bottom read theirs as the drafters they
 * are. */
typedef struct {
    int gamma;           /* g1: the bottom's chain */
    seer_spec_kind base; /* the middle's view */
} hier_settings;

extern const seer_drafter_desc seer_drafter_hierarchy_desc;

static seer_status hier_init(const seer_draft_env *env, const seer_spec_params *p, void **out) {
    hier_settings own;
    seer_drafter_settings(&seer_drafter_hierarchy_desc, p, &own);
    if (!p->draft_model)
        return seer_err(SEER_ERR_INVALID_ARG, "speculation 'hierarchy' needs a draft model (the bottom level)");
    if (p->tree_size != 0)
        return seer_err(SEER_ERR_INVALID_ARG, "speculation 'hierarchy' proposes chains, not token trees");
    const seer_spec_kind base = own.base;
    if (!seer_drafter_has(base, SEER_DRAFTER_HIER_BASE)) {
        char views[256];
        seer_drafter_names(SEER_DRAFTER_HIER_BASE, views, sizeof views);
        return seer_err(SEER_ERR_INVALID_ARG, "hierarchy base '%s' must be a view of the target: %s",
                        seer_spec_kind_name(base), views);
    }
    const int TB = env->ctx->params.n_batch_max;
    if (own.gamma < 1 || own.gamma + 1 > TB)
        return seer_err(SEER_ERR_INVALID_ARG, "hierarchy gamma %d must be in [1, %d] (the batch limit %d less one)",
                        own.gamma, TB - 1, TB);
    hier_impl *im = calloc(1, sizeof *im);
    if (!im)
        return seer_err(SEER_ERR_OOM, "out of memory for the hierarchy");
    const int g1 = own.gamma, B = env->ctx->params.n_seq_max;
    im->g1 = g1;
    im->n_seq_max = B;
    im->mops = seer_drafter_find(seer_spec_kind_name(base));
    im->bshape = seer_malloc_array(g1, sizeof(int32_t));
    im->bdepth = seer_malloc_array(g1, sizeof(int32_t));
    im->btok = seer_malloc_array((size_t)B * g1, sizeof(int32_t));
    im->bpar = seer_malloc_array((size_t)B * g1, sizeof(int32_t));
    im->bs = calloc(B, sizeof *im->bs);
    im->host = seer_malloc_array(env->V, sizeof(float));
    if (!im->mops || !im->mops->view || !im->bshape || !im->bdepth || !im->btok || !im->bpar || !im->bs ||
        !im->host) {
        hier_free(env, im);
        return seer_err(SEER_ERR_OOM, "out of memory for the hierarchy");
    }
    for (int j = 0; j < g1; j++)
        im->bshape[j] = j - 1, im->bdepth[j] = j + 1;
    im->benv = *env;
    im->benv.max_nodes = g1;
    im->benv.shape = im->bshape;
    im->benv.depth = im->bdepth;
    /* each level reads its own settings: the middle as the drafter it is, the bottom as
     * `draft` (draft_model, draft_budget, sinks) */
    seer_spec_params mp = *p;
    mp.kind = base;
    seer_status st = im->mops->init(env, &mp, &im->mid);
    if (st != SEER_OK)
        im->mid = NULL;
    if (st == SEER_OK) {
        seer_spec_params bp = *p;
        bp.kind = SEER_SPEC_DRAFT;
        st = seer_drafter_model.init(&im->benv, &bp, &im->bot);
        if (st != SEER_OK)
            im->bot = NULL;
    }
    if (st != SEER_OK) {
        hier_free(env, im);
        return st;
    }
    *out = im;
    return SEER_OK;
}

static seer_status hier_seq_added(const seer_draft_env *env, void *impl, seer_draft_seq *s) {
    hier_impl *im = impl;
    if (im->mops->seq_added)
        SEER_TRY(im->mops->seq_added(env, im->mid, s));
    return seer_drafter_model.seq_added(&im->benv, im->bot, s);
}

static void hier_seq_released(const seer_draft_env *env, void *impl, int slot) {
    hier_impl *im = impl;
    if (im->mops->seq_released)
        im->mops->seq_released(env, im->mid, slot);
    seer_drafter_model.seq_released(&im->benv, im->bot, slot);
}

static int hier_prefill_q_rows(void *impl, int n_prompt) {
    hier_impl *im = impl;
    return im->mops->prefill_q_rows ? im->mops->prefill_q_rows(im->mid, n_prompt) : 0;
}

static seer_status hier_prefill_q(const seer_draft_env *env, void *impl, seer_draft_seq *s, const float *q,
                                  int n_rows) {
    hier_impl *im = impl;
    return im->mops->prefill_q ? im->mops->prefill_q(env, im->mid, s, q, n_rows) : SEER_OK;
}

static seer_status hier_verified(const seer_draft_env *env, void *impl, seer_draft_seq *s) {
    hier_impl *im = impl;
    /* the bottom needs nothing: its next proposal cuts its cache back to what the target
     * holds (draft_model.c) */
    return im->mops->verified ? im->mops->verified(env, im->mid, s) : SEER_OK;
}

static bool argmax_only(const seer_draft_seq *s) {
    return s->sp->temperature <= 0 && !seer_sampler_penalised(s->sp) && !seer_sampler_biased(s->sp) && !s->con;
}

/* One middle level's state of a sequence during a round. */
typedef struct {
    int want;      /* G of this round: the chain the top gets */
    int m;         /* middle tokens decided so far (in s->tok, their q rows in s->q) */
    int32_t *ext;  /* [n_tokens + want] the sequence's tokens + the middle's */
} mid_seq;

/* Verifies the bottom chains of the active sequences (act [na]) on the target under the
 * middle's view, in calls within the batch limit, and appends the tokens the exact rule
 * decides to each sequence's middle chain. */
static seer_status mid_verify(const seer_draft_env *env, hier_impl *im, seer_draft_seq *seqs, mid_seq *ms,
                              const int *act, int na, seer_draft_reads reads) {
    seer_context *c = env->ctx;
    const int TB = c->params.n_batch_max, V = env->V;
    seer_draft_scratch *sc = env->scratch;
    seer_backend *be = env->model->be;
    int32_t *tok = malloc(sizeof(int32_t) * TB), *sq = malloc(sizeof(int32_t) * TB),
            *pos = malloc(sizeof(int32_t) * TB), *hist = NULL;
    uint8_t *want = malloc(TB);
    seer_accept_chain *ch = malloc(sizeof *ch * (na > 0 ? na : 1));
    double *u = malloc(sizeof(double) * ((size_t)na * (im->g1 + 1) + 1));
    int32_t *acc = malloc(sizeof(int32_t) * (na > 0 ? na : 1)), *next = malloc(sizeof(int32_t) * (na > 0 ? na : 1));
    int *row0 = malloc(sizeof(int) * (na > 0 ? na : 1)), *cix = malloc(sizeof(int) * (na > 0 ? na : 1));
    seer_status st = tok && sq && pos && want && ch && u && acc && next && row0 && cix
                         ? SEER_OK
                         : seer_err(SEER_ERR_OOM, "out of memory for the middle level");
    for (int k0 = 0, k1; k0 < na && st == SEER_OK; k0 = k1) {
        int T = 0;
        bool amax = true;
        for (k1 = k0; k1 < na; k1++) {
            const int i = act[k1];
            const seer_draft_seq *b = &im->bs[k1];
            if (T + b->n + 1 > TB)
                break;
            const int L = seqs[i].n_tokens - 1, m = ms[i].m;
            row0[k1] = T;
            /* the bottom's chain after the middle's: each row's penalty history is its path */
            for (int r = 0; r < b->n; r++) {
                seqs[i].tok[m + r] = b->tok[r];
                seqs[i].parent[m + r] = m + r - 1;
            }
            for (int r = 0; r <= b->n; r++) {
                tok[T] = r == 0 ? ms[i].ext[L + m] : b->tok[r - 1];
                sq[T] = seqs[i].seq;
                pos[T] = L + m + r;
                want[T++] = 1;
            }
            amax &= argmax_only(&seqs[i]);
        }
        seer_batch bt = {.n_tokens = T, .token = tok, .seq = sq, .pos = pos, .logits = want,
                        .kv_quant = reads.kv_quant, .draft_weights = reads.draft_weights,
                        .sparse_ffn = env->sparse_ffn};
        float *Lg = NULL;
        if (amax) {
            st = seer_decode_argmax(c, &bt, sc->ids);
        } else {
            st = seer_decode_keep(c, &bt, &Lg);
            /* every row through the sampler transform: p in place for sampled sequences, the
             * argmax for greedy ones; penalty histories are each row's middle prefix */
            size_t hn = 0;
            for (int k = k0; k < k1; k++)
                if (seer_sampler_penalised(seqs[act[k]].sp))
                    hn += (size_t)(im->bs[k].n + 1) * (seqs[act[k]].sp->repeat_last_n + env->max_nodes + 1);
            free(hist);
            hist = hn ? seer_malloc_array(hn, sizeof(int32_t)) : NULL;
            if (st == SEER_OK && hn && !hist)
                st = seer_err(SEER_ERR_OOM, "out of memory for penalty histories");
            size_t ho = 0;
            for (int k = k0; k < k1 && st == SEER_OK; k++) {
                seer_draft_seq *s = &seqs[act[k]];
                const bool sampled = s->sp->temperature > 0;
                for (int r = 0; r <= im->bs[k].n; r++) {
                    float *row = Lg + (size_t)(row0[k] + r) * V;
                    sc->rows[row0[k] + r] = seer_draft_node_row(s, ms[act[k]].m - 1 + r, row, sampled ? row : NULL,
                                                                -1, hist ? hist + ho : NULL);
                    if (seer_sampler_penalised(s->sp))
                        ho += (size_t)s->sp->repeat_last_n + env->max_nodes + 1;
                }
            }
            if (st == SEER_OK)
                st = seer_context_sample(c, sc->rows, T, sc->ids);
            /* sampled: the exact rule over the bottom's q */
            int nc = 0, nu = 0;
            for (int k = k0; k < k1 && st == SEER_OK; k++) {
                seer_draft_seq *s = &seqs[act[k]];
                cix[k] = -1;
                if (!(s->sp->temperature > 0))
                    continue;
                const seer_draft_seq *b = &im->bs[k];
                for (int r = 0; r <= b->n; r++)
                    u[nu + r] = seer_sampler_uniform(s->smp);
                ch[nc] = (seer_accept_chain){.nd = b->n, .draft = b->tok, .p = Lg + (size_t)row0[k] * V,
                                             .q = b->q, .u = u + nu,
                                             .resample_from_p = WRONG_RULE};
                nu += b->n + 1;
                cix[k] = nc++;
            }
            if (st == SEER_OK && nc)
                st = seer_context_accept(c, ch, nc, acc, next);
        }
        for (int k = k0; k < k1 && st == SEER_OK; k++) {
            const int i = act[k];
            seer_draft_seq *s = &seqs[i], *b = &im->bs[k];
            mid_seq *mq = &ms[i];
            const int32_t *ids = sc->ids + row0[k];
            int a;
            int32_t y;
            if (!amax && cix[k] >= 0) {
                a = acc[cix[k]];
                y = next[cix[k]];
            } else { /* greedy: the argmax walk */
                a = 0;
                while (a < b->n && b->tok[a] == ids[a])
                    a++;
                y = ids[a];
            }
            /* the accepted bottom tokens and the one emitted after them, within the round's G */
            const int L = s->n_tokens - 1, m = mq->m;
            int add = a + 1 <= mq->want - m ? a + 1 : mq->want - m;
            for (int r = 0; r < add; r++) {
                const int32_t t = r < a ? b->tok[r] : y;
                s->tok[m + r] = t;
                s->parent[m + r] = m + r - 1;
                mq->ext[L + 1 + m + r] = t;
                /* x's q: the middle's p at the row that decided it (not the residual: the
                 * residual draw and the acceptances together make x ~ p_mid there) */
                if (s->q) {
                    const float *src = Lg + (size_t)(row0[k] + r) * V;
                    st = be->ops->download(be, im->host, src, sizeof(float) * V);
                    if (st == SEER_OK)
                        st = be->ops->upload(be, s->q + (size_t)(m + r) * V, im->host, sizeof(float) * V);
                    if (st != SEER_OK)
                        break;
                }
            }
            mq->m += add;
            /* the middle's cache: the pending token and its decided tokens but the last */
            if (st == SEER_OK)
                st = seer_seq_rewind(c, s->seq, L + mq->m);
            /* the bottom keeps what the middle accepted of its chain */
            b->n_acc = a;
            if (st == SEER_OK)
                st = seer_drafter_model.verified(&im->benv, im->bot, b);
        }
    }
    free(tok), free(sq), free(pos), free(want), free(ch), free(u), free(acc), free(next), free(row0), free(cix);
    free(hist);
    return st;
}

static seer_status hier_propose(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs) {
    hier_impl *im = impl;
    seer_context *c = env->ctx;
    const int V = env->V, g1 = im->g1;
    bool sampled = false;
    for (int i = 0; i < n; i++)
        sampled |= seqs[i].q != NULL;
    if (sampled && !im->bq) {
        seer_backend *be = env->model->be;
        SEER_TRY(be->ops->alloc(be, (size_t)im->n_seq_max * g1 * V * sizeof(float), (void **)&im->bq));
    }
    mid_seq *ms = calloc(n > 0 ? n : 1, sizeof *ms);
    int *act = malloc(sizeof(int) * (n > 0 ? n : 1));
    seer_status st = ms && act ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory for the hierarchy");
    seer_draft_reads reads = {0};
    for (int i = 0; i < n && st == SEER_OK; i++) {
        seer_draft_seq *s = &seqs[i];
        s->n = 0;
        s->onehot = false;
        int w = s->max_nodes < s->max_depth ? s->max_nodes : s->max_depth;
        ms[i].want = w < env->max_nodes ? w : env->max_nodes;
        if (ms[i].want <= 0) {
            ms[i].want = 0;
            continue;
        }
        ms[i].ext = seer_malloc_array((size_t)s->n_tokens + ms[i].want, sizeof(int32_t));
        if (!ms[i].ext) {
            st = seer_err(SEER_ERR_OOM, "out of memory for the hierarchy");
            break;
        }
        memcpy(ms[i].ext, s->tokens, sizeof(int32_t) * s->n_tokens);
        st = im->mops->view(env, im->mid, s, &reads);
    }
    /* middle rounds until every sequence holds its G tokens: the bottom drafts for all of
     * them in one go, the middle verifies them in one call */
    while (st == SEER_OK) {
        int na = 0;
        for (int i = 0; i < n; i++)
            if (ms[i].m < ms[i].want)
                act[na++] = i;
        if (na == 0)
            break;
        for (int k = 0; k < na; k++) {
            const int i = act[k];
            const seer_draft_seq *s = &seqs[i];
            const int left = ms[i].want - ms[i].m, g = g1 < left ? g1 : left;
            im->bs[k] = (seer_draft_seq){.slot = s->slot, .seq = s->seq, .tokens = ms[i].ext,
                                         .n_tokens = s->n_tokens + ms[i].m, .n_prompt = s->n_prompt, .sp = s->sp,
                                         .smp = s->smp, .accept_avg = s->accept_avg, .rounds = s->rounds,
                                         .max_nodes = g, .max_depth = g, .tok = im->btok + (size_t)k * g1,
                                         .parent = im->bpar + (size_t)k * g1,
                                         .q = s->q ? im->bq + (size_t)k * g1 * V : NULL};
        }
        st = seer_drafter_model.propose(&im->benv, im->bot, na, im->bs);
        if (st == SEER_OK)
            st = mid_verify(env, im, seqs, ms, act, na, reads);
    }
    for (int i = 0; i < n; i++) {
        if (st == SEER_OK)
            seqs[i].n = ms[i].m;
        if (ms[i].want == 0)
            continue;
        seer_status r = seer_draft_leave(c, &seqs[i]);
        if (st == SEER_OK)
            st = r;
        free(ms[i].ext);
    }
    free(ms), free(act);
    return st;
}

const seer_drafter_ops seer_drafter_hierarchy = {
    .name = "hierarchy",
    .init = hier_init,
    .free = hier_free,
    .seq_added = hier_seq_added,
    .seq_released = hier_seq_released,
    .propose = hier_propose,
    .verified = hier_verified,
    .prefill_q_rows = hier_prefill_q_rows,
    .prefill_q = hier_prefill_q,
    .has_q = true,
};

static const char *const MIDDLE[] = {"streaming", "retrieval", "snapkv", "quantkv", NULL};
static const seer_drafter_option OPTS[] = {
    {{.flag = "spec-hier-gamma", .json = "hier_gamma", .metavar = "N", .type = SEER_SPEC_OPT_INT, .def = 2,
      .lo = 1, .hi = 64, .own_only = true, .help = "tokens the draft model proposes per middle verification"},
     SEER_DRAFTER_OPT_EXT, offsetof(hier_settings, gamma)},
    {{.flag = "spec-hier-base", .json = "hier_base", .metavar = "KIND", .type = SEER_SPEC_OPT_KIND,
      .def = SEER_SPEC_STREAMING, .choices = MIDDLE, .own_only = true,
      .help = "the middle level's view: streaming, retrieval, snapkv or quantkv"},
     SEER_DRAFTER_OPT_EXT, offsetof(hier_settings, base)},
};

const seer_drafter_desc seer_drafter_hierarchy_desc = {
    .name = "hierarchy", .kind = SEER_SPEC_HIERARCHY, .ops = &seer_drafter_hierarchy,
    .help = "TriForce: --draft-model drafts for the target under a sparse view, which proposes to it",
    .flags = SEER_DRAFTER_BUDGETED | SEER_DRAFTER_DRAFT_MODEL | SEER_DRAFTER_DRAFT_WEIGHTS,
    .options = OPTS, .n_options = 2,
};
