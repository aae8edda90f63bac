/*
 * gen.c: the generation loop. Every round, for all unfinished sequences together: the
 * drafter proposes up to G tokens each, one batched target call verifies pending + drafts,
 * the verifier accepts a prefix and emits one more token, and each sequence's cache is
 * rewound to what was accepted. Plain decoding is the same loop with G = 0, so greedy
 * output does not depend on which path ran.
 */
#include "seer_bench.h"
#include "spec/accept_trace.h"
#include "spec/round.h"
#include "spec/spec.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The longest chain automatic speculation considers (the cost model's default). */
#define AUTO_MAX_GAMMA 8

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* seer_spec_default_params: spec_opts.c, from the drafters' declared defaults. */

static seer_status check_params(const seer_context *ctx, const seer_spec_params *p) {
    if (p->kind != SEER_SPEC_NONE && p->kind != SEER_SPEC_AUTO && !seer_drafter_of_kind(p->kind))
        return seer_err(SEER_ERR_INVALID_ARG, "unknown speculation kind %d", (int)p->kind);
    if (p->kind == SEER_SPEC_NONE)
        return SEER_OK;
    if (p->draft_weights && !ctx->model->draft_layers)
        return seer_err(SEER_ERR_INVALID_ARG, "speculation with draft weights: the model was loaded without "
                                              "them (seer_model_params.draft_weights)");
    if (p->kind != SEER_SPEC_DRAFT && seer_spec_value_int(p, "draft-best-first") > 0)
        return seer_err(SEER_ERR_INVALID_ARG, "best-first search (draft-best-first) goes with the draft model's trees "
                                              "(--spec tree --spec-base draft), not with %s",
                        seer_spec_kind_name(p->kind));
    if (p->kind == SEER_SPEC_AUTO) { /* its drafters' settings are checked by their inits */
        if (p->tree_size != 0)
            return seer_err(SEER_ERR_INVALID_ARG, "automatic speculation proposes chains, not trees");
        return SEER_OK;
    }
    if (p->gamma < 1 || p->gamma + 1 > SEER_INVARIANT_NEW_TOKENS) /* verification stays exact */
        return seer_err(SEER_ERR_INVALID_ARG, "spec gamma %d is out of range [1, %d]", p->gamma,
                        SEER_INVARIANT_NEW_TOKENS - 1);
    const bool bf = seer_gen_best_first(p);
    if (bf && (p->tree_size < -1 || p->tree_size > SEER_TREE_BEST_FIRST_MAX || p->tree_depth < 0 || p->tree_replan < 0 ||
               ctx->params.n_batch_max < 2))
        return seer_err(SEER_ERR_INVALID_ARG, "best-first tree of %d nodes: must be in [-1, %d], with a batch limit "
                        "of 2 or more", p->tree_size, SEER_TREE_BEST_FIRST_MAX);
    if (!bf && (p->tree_size < -1 || p->tree_depth < 0 || p->tree_replan < 0 || p->tree_size + 1 > SEER_INVARIANT_NEW_TOKENS ||
                p->tree_size + 1 > ctx->params.n_batch_max))
        return seer_err(SEER_ERR_INVALID_ARG, "tree of %d nodes: must be in [0, %d] (and fit in the batch limit %d)",
                        p->tree_size, SEER_INVARIANT_NEW_TOKENS - 1, ctx->params.n_batch_max - 1);
    if (bf && p->tree_size == 0)
        return seer_err(SEER_ERR_INVALID_ARG, "best-first search builds trees: set a tree size (or -1)");
    if (p->tree_size == -1 && !bf && (p->tree_depth > SEER_TREE_AUTO_MAX || ctx->params.n_batch_max < 2))
        return seer_err(SEER_ERR_INVALID_ARG, "automatic tree size: depth %d (at most %d) and a batch limit of 2 or more",
                        p->tree_depth, SEER_TREE_AUTO_MAX);
    if (p->tree_size > 0 && (p->tree_depth ? p->tree_depth : p->gamma) > p->tree_size)
        return seer_err(SEER_ERR_INVALID_ARG, "tree depth %d exceeds its %d nodes",
                        p->tree_depth ? p->tree_depth : p->gamma, p->tree_size);
    if (p->gamma + 1 > ctx->params.n_batch_max)
        return seer_err(SEER_ERR_INVALID_ARG, "gamma %d + 1 exceeds the context's batch limit %d",
                        p->gamma, ctx->params.n_batch_max);
    return SEER_OK;
}

static void gen_free_body(seer_gen *g) {
    if (!g)
        return;
    for (int h = 0; h < g->n_seqs; h++) {
        seer_gen_release(g, h);
        seer_gen_seq_drop(&g->seqs[h]);
        free(g->seqs[h].tokens);
    }
    if (g->autos)
        seer_gen_auto_free(g); /* its candidates, g->dops among them */
    else if (g->dops && g->dimpl)
        g->dops->free(&g->env, g->dimpl);
    if (g->qd)
        g->model->be->ops->dealloc(g->model->be, g->qd);
    if (g->vlog)
        g->model->be->ops->dealloc(g->model->be, g->vlog);
    free(g->chunked), free(g->vslot);
    seer_gen_lp_free(g);
    free(g->seqs), free(g->hs), free(g->gam), free(g->nd), free(g->draft), free(g->onehot);
    free(g->row0), free(g->t0);
    free(g->dl), free(g->par), free(g->path), free(g->hbuf), free(g->mask), free(g->trees);
    free(g->t_used), free(g->tpath), free(g->shape), free(g->sdepth), free(g->dv);
    free(g->scratch.ids);
    free(g->ids), free(g->rows), free(g->chains), free(g->u), free(g->rng0), free(g->first);
    free(g->chain), free(g->acc), free(g->next), free(g->c_acc), free(g->c_next);
    free(g);
}

/* the failure that led here stays the one the caller reads */
void seer_gen_free(seer_gen *g) { SEER_ERR_KEPT(gen_free_body(g)); }

seer_status seer_gen_init(seer_context *ctx, seer_spec_params spec, seer_gen **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    SEER_CHECK_ARG(ctx);
    SEER_TRY(check_params(ctx, &spec));
    seer_gen *g = calloc(1, sizeof *g);
    if (!g)
        return seer_err(SEER_ERR_OOM, "out of memory");
    g->ctx = ctx;
    g->model = ctx->model;
    g->V = ctx->model->info.n_vocab;
    g->spec = spec;
    const int B = ctx->params.n_seq_max, TB = ctx->params.n_batch_max;
    /* an automatic size plans within the most nodes a verification call takes */
    int auto_max = SEER_TREE_AUTO_MAX < TB - 1 ? SEER_TREE_AUTO_MAX : TB - 1;
    if (auto_max > SEER_INVARIANT_NEW_TOKENS - 1)
        auto_max = SEER_INVARIANT_NEW_TOKENS - 1;
    g->best_first = seer_gen_best_first(&spec);
    if (g->best_first) /* its trees are verified in several calls where they exceed one */
        auto_max = SEER_TREE_BEST_FIRST_AUTO;
    g->tree = spec.kind != SEER_SPEC_NONE && spec.tree_size != 0;
    g->G = spec.kind == SEER_SPEC_NONE ? 0 : spec.tree_size > 0 ? spec.tree_size : spec.tree_size < 0 ? auto_max : spec.gamma;
    if (spec.kind == SEER_SPEC_AUTO) { /* room for the longest chain the planner considers */
        g->G = AUTO_MAX_GAMMA < TB - 1 ? AUTO_MAX_GAMMA : TB - 1;
        g->G = g->G < SEER_INVARIANT_NEW_TOKENS - 1 ? g->G : SEER_INVARIANT_NEW_TOKENS - 1;
        spec.gamma = g->G;
    }
    g->D = spec.kind == SEER_SPEC_NONE ? 0 : g->tree && spec.tree_depth > 0 ? spec.tree_depth : spec.gamma;
    if (g->D > g->G)
        g->D = g->G;
    const int G = g->G;
    const size_t n_ids = (size_t)B * (G + 1) > (size_t)TB ? (size_t)B * (G + 1) : (size_t)TB;
    const size_t n_rows = (size_t)TB > (size_t)G + 1 ? (size_t)TB : (size_t)G + 1; /* one entry's, chunked */
    g->seqs = calloc(B, sizeof *g->seqs);
    g->hs = calloc(B, sizeof(int));
    g->gam = calloc(B, sizeof(int));
    g->nd = calloc(B, sizeof(int));
    g->row0 = calloc(B, sizeof(int));
    g->t0 = calloc(B, sizeof(int));
    g->draft = seer_calloc_array((size_t)B * (G ? G : 1), sizeof(int32_t));
    g->onehot = calloc(B, sizeof(bool));
    g->ids = seer_malloc_array(n_ids, sizeof(int32_t));
    g->rows = seer_malloc_array(n_rows + B, sizeof *g->rows);
    g->chains = seer_malloc_array(B, sizeof *g->chains);
    g->u = seer_malloc_array(n_rows + B, sizeof *g->u);
    g->chunked = calloc(B, sizeof(bool));
    g->vslot = g->best_first ? seer_calloc_array((size_t)B * (G ? G : 1), sizeof(int32_t)) : NULL;
    g->rng0 = seer_malloc_array(B, sizeof *g->rng0);
    g->first = seer_malloc_array(B, sizeof(int));
    g->chain = seer_malloc_array(B, sizeof(int));
    g->acc = seer_malloc_array(B, sizeof(int32_t));
    g->next = seer_malloc_array(B, sizeof(int32_t));
    g->c_acc = seer_malloc_array(B, sizeof(int32_t));
    g->c_next = seer_malloc_array(B, sizeof(int32_t));
    g->dl = calloc(B, sizeof(int));
    g->par = seer_calloc_array((size_t)B * (G ? G : 1), sizeof(int32_t));
    g->path = seer_calloc_array((size_t)B * (G ? G : 1), sizeof(int32_t));
    g->tpath = seer_calloc_array((size_t)B * (G ? G : 1), sizeof(int32_t));
    /* a tree call's mask; chains never need one */
    g->mask = g->tree ? seer_malloc_array((size_t)TB * TB, 1) : NULL;
    g->trees = seer_malloc_array(B, sizeof *g->trees);
    g->t_used = seer_malloc_array(B, sizeof(int32_t));
    g->shape = seer_malloc_array(G ? G : 1, sizeof(int32_t));
    g->sdepth = seer_malloc_array(G ? G : 1, sizeof(int32_t));
    g->dv = calloc(B, sizeof *g->dv);
    g->scratch.ids = seer_malloc_array(TB, sizeof(int32_t));
    g->scratch.rows = g->rows; /* the generator's own rows: drafting and verification never overlap */
    g->scratch.mask = g->mask;
    if (!g->dv || !g->scratch.ids || !g->dl || !g->par || !g->path || !g->tpath || (g->tree && !g->mask) || !g->trees || !g->t_used ||
        !g->shape || !g->sdepth) {
        seer_gen_free(g);
        return seer_err(SEER_ERR_OOM, "out of memory for %d sequences x %d draft nodes", B, G);
    }
    /* the shape rounds fill: a chain of gamma, or the default tree */
    if (g->tree)
        seer_tree_shape_default(G, g->D, g->shape);
    else
        for (int j = 0; j < G; j++)
            g->shape[j] = j - 1;
    if (G) {
        seer_status s = seer_tree_shape_check(g->shape, G, g->D, g->sdepth);
        if (s == SEER_OK)
            s = seer_gen_plan_init(g);
        if (s != SEER_OK) {
            seer_gen_free(g);
            return s;
        }
    }
    if (!g->seqs || !g->hs || !g->gam || !g->nd || !g->row0 || !g->t0 || !g->draft || !g->onehot || !g->ids || !g->rows ||
        !g->chains || !g->u || !g->rng0 || !g->first || !g->chain || !g->acc || !g->next ||
        !g->c_acc || !g->c_next || !g->chunked || (g->best_first && !g->vslot)) {
        seer_gen_free(g);
        return seer_err(SEER_ERR_OOM, "out of memory for %d sequences x %d draft tokens", B, G);
    }
    g->env = (seer_draft_env){.ctx = ctx, .model = ctx->model, .V = g->V, .max_nodes = G,
                              .shape = g->shape, .depth = g->sdepth, .scratch = &g->scratch};
    const seer_drafter_desc *desc = seer_drafter_of_kind(spec.kind); /* NULL for none and auto */
    g->dops = desc ? desc->ops : NULL;
    if (spec.kind == SEER_SPEC_AUTO) {
        seer_status s = seer_gen_auto_init(g);
        if (s != SEER_OK) {
            seer_gen_free(g);
            return s;
        }
    }
    if (g->dops) {
        seer_status s = g->dops->init(&g->env, &g->spec, &g->dimpl);
        if (s != SEER_OK) {
            g->dops = NULL;
            seer_gen_free(g);
            return s;
        }
    }
    /* last: the context's sparse FFN changes only for a generator that is made */
    seer_status sf = seer_spec_sparse_ffn_apply(ctx, &spec, &g->env.sparse_ffn);
    if (sf != SEER_OK) {
        seer_gen_free(g);
        return sf;
    }
    *out = g;
    return SEER_OK;
}

static int n_generated(const seer_gen_seq *s) { return s->n_tokens - s->n_prompt; }

/* Appends an emitted token and decides whether the sequence is done (as seer_round_emit). */
static void emit(seer_gen *g, seer_gen_seq *s, int32_t t) {
    s->tokens[s->n_tokens++] = t;
    if (s->con)
        (void)seer_constraint_accept(s->con, t);
    if (seer_gen_seq_done(g, s, t) || (s->con && seer_constraint_finished(s->con)))
        s->finished = true;
}

/* Prefill in chunks of the batch limit, the same chunks whichever drafter runs (so the
 * target's numerics do not depend on it); the queries of the last `tail` rows are captured
 * into q_cap [n_layers][tail][H*Dh] for the drafter. *out: the last row's logits, left in
 * backend memory. */
static seer_status prefill(seer_gen *g, seer_gen_seq *s, int tail, float *q_cap, float **out) {
    seer_context *c = g->ctx;
    const seer_model_info *in = &g->model->info;
    const size_t qd = (size_t)in->n_heads * in->head_dim;
    const int n = s->n_prompt, chunk = c->params.n_batch_max;
    int32_t *seq = malloc(sizeof(int32_t) * chunk), *pos = malloc(sizeof(int32_t) * chunk);
    uint8_t *want = calloc(chunk, 1), *cap = calloc(chunk, 1), *prompt = malloc(chunk);
    int cap_rows = tail < chunk ? tail : chunk;
    float *tmp = tail > 0 ? seer_malloc_array((size_t)in->n_layers * cap_rows * qd, sizeof(float)) : NULL;
    seer_status st = SEER_OK;
    if (!seq || !pos || !want || !cap || !prompt || (tail > 0 && !tmp))
        st = seer_err(SEER_ERR_OOM, "out of memory");
    else
        memset(prompt, 1, chunk); /* as the scheduler's chunks flag them: the same rows */
    for (int i = 0; i < n && st == SEER_OK; i += chunk) {
        int k = n - i < chunk ? n - i : chunk, first = -1, nc = 0;
        for (int j = 0; j < k; j++) {
            seq[j] = s->seq;
            pos[j] = i + j;
            want[j] = i + j == n - 1;
            cap[j] = tail > 0 && i + j >= n - tail;
            if (cap[j] && first < 0)
                first = j;
            nc += cap[j];
        }
        seer_batch b = {.n_tokens = k, .token = s->tokens + i, .seq = seq, .pos = pos, .logits = want,
                        .capture = nc ? cap : NULL, .queries = tmp, .prompt = prompt};
        st = want[k - 1] ? seer_decode_keep(c, &b, out) : seer_decode(c, &b, NULL);
        /* rows [i + first, i + first + nc) are tail rows (i + first) - (n - tail) onwards */
        for (int l = 0; l < in->n_layers && nc && st == SEER_OK; l++)
            memcpy(q_cap + ((size_t)l * tail + (i + first - (n - tail))) * qd, tmp + (size_t)l * nc * qd,
                   (size_t)nc * qd * sizeof(float));
    }
    free(seq), free(pos), free(want), free(cap), free(prompt), free(tmp);
    return st;
}

/* Claims a free handle and fills its bookkeeping (no cache work). */
static seer_status claim(seer_gen *g, const int32_t *prompt, int n, int max_new,
                         seer_sampler_params sp, bool ignore_eos, int *out) {
    seer_context *c = g->ctx;
    const int n_ctx = c->params.n_ctx;
    if (!prompt || n < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "the prompt must have at least one token");
    if (n >= n_ctx)
        return seer_err(SEER_ERR_CONTEXT, "the prompt has %d tokens; the context holds %d", n, n_ctx);
    if (max_new < -1 || max_new == 0)
        return seer_err(SEER_ERR_INVALID_ARG, "max_new %d must be positive or -1", max_new);
    for (int i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= g->V)
            return seer_err(SEER_ERR_INVALID_ARG, "prompt token %d is outside the vocabulary", prompt[i]);
    int h = 0;
    while (h < g->n_seqs && (g->seqs[h].alive || g->seqs[h].tokens))
        h++;
    if (h == c->params.n_seq_max)
        return seer_err(SEER_ERR_INVALID_ARG, "generator is full (%d sequences)", h);
    seer_gen_seq *s = &g->seqs[h];
    memset(s, 0, sizeof *s);
    s->cap = n_ctx + 1;
    s->tokens = seer_malloc_array(s->cap, sizeof(int32_t));
    if (!s->tokens)
        return seer_err(SEER_ERR_OOM, "out of memory");
    seer_status st = seer_sampler_init(sp, g->V, &s->smp);
    if (st != SEER_OK) {
        free(s->tokens);
        memset(s, 0, sizeof *s);
        return st;
    }
    memcpy(s->tokens, prompt, sizeof(int32_t) * n);
    s->n_tokens = s->n_prompt = n;
    s->max_new = max_new;
    s->ignore_eos = ignore_eos;
    s->sp = sp;
    s->accept_avg = 1.f;
    if (h == g->n_seqs)
        g->n_seqs++;
    *out = h;
    return SEER_OK;
}

/* Undoes claim() (and frees the sequence if it was attached). */
static void unclaim(seer_gen *g, int h) {
    seer_gen_seq *s = &g->seqs[h];
    seer_gen_seq_drop(s);
    if (s->alive) {
        seer_gen_release(g, h);
    } else {
        seer_sampler_free(s->smp);
        s->smp = NULL;
    }
    free(s->tokens);
    s->tokens = NULL;
}

seer_status seer_gen_add(seer_gen *g, const int32_t *prompt, int n, int max_new,
                         seer_sampler_params sp, bool ignore_eos, int *handle) {
    return seer_gen_add_ext(g, prompt, n, max_new, sp, ignore_eos, NULL, handle);
}

seer_status seer_gen_add_ext(seer_gen *g, const int32_t *prompt, int n, int max_new, seer_sampler_params sp,
                             bool ignore_eos, const seer_gen_seq_params *xp, int *handle) {
    SEER_CHECK_ARG(g);
    SEER_CHECK_ARG(prompt);
    SEER_CHECK_ARG(handle);
    const seer_gen_seq_params x = xp ? *xp : seer_gen_seq_default_params();
    SEER_TRY(seer_gen_seq_check(g, &x));
    int h;
    SEER_TRY(claim(g, prompt, n, max_new, sp, ignore_eos, &h));
    seer_gen_seq *s = &g->seqs[h];
    seer_status st = seer_gen_seq_setup(s, &x);
    if (st != SEER_OK) {
        unclaim(g, h);
        return st;
    }
    st = seer_seq_new(g->ctx, &s->seq);
    if (st != SEER_OK) {
        unclaim(g, h);
        return st;
    }
    s->alive = true;
    int tail = seer_gen_drafter_q_rows(g, n);
    float *qcap = NULL;
    if (tail > 0) {
        const seer_model_info *in = &g->model->info;
        qcap = seer_malloc_array((size_t)in->n_layers * tail * in->n_heads * in->head_dim, sizeof(float));
        if (!qcap)
            st = seer_err(SEER_ERR_OOM, "out of memory for prefill queries");
    }
    double t0 = now_s();
    float *last = NULL;
    if (st == SEER_OK)
        st = prefill(g, s, tail, qcap, &last);
    g->stats.t_prefill_s += now_s() - t0;
    if (st == SEER_OK && tail > 0)
        st = seer_gen_drafter_prefill_q(g, h, qcap, tail);
    if (st == SEER_OK)
        st = seer_gen_drafter_added(g, h);
    free(qcap);
    /* The first token comes from the prefill's last logits, as a round with no drafts. The
     * drafter's work above ran no forward call on the target's context, so they are intact. */
    int32_t next;
    if (st == SEER_OK)
        st = seer_gen_seq_first(g, s, last, &next);
    if (st != SEER_OK) {
        unclaim(g, h);
        return st;
    }
    for (int i = 0; i < n; i++)
        seer_sampler_accept(s->smp, prompt[i]);
    emit(g, s, next);
    seer_sampler_accept(s->smp, next);
    g->stats.emitted++;
    *handle = h;
    return SEER_OK;
}

seer_status seer_gen_adopt(seer_gen *g, seer_seq_id seq, const int32_t *tokens, int n,
                           int max_new, seer_sampler_params sp, bool ignore_eos, int *handle) {
    SEER_CHECK_ARG(g);
    SEER_CHECK_ARG(tokens);
    SEER_CHECK_ARG(handle);
    if (seer_seq_len(g->ctx, seq) != n - 1)
        return seer_err(SEER_ERR_INVALID_ARG, "adopt: sequence %d holds %d tokens, expected %d",
                        (int)seq, seer_seq_len(g->ctx, seq), n - 1);
    int h;
    SEER_TRY(claim(g, tokens, n, max_new, sp, ignore_eos, &h));
    seer_gen_seq *s = &g->seqs[h];
    s->seq = seq;
    s->alive = true;
    seer_status st = seer_gen_drafter_added(g, h);
    if (st != SEER_OK) {
        /* the caller keeps its sequence on failure */
        seer_gen_drafter_released(g, h);
        s->alive = false;
        unclaim(g, h);
        return st;
    }
    for (int i = 0; i < n; i++)
        seer_sampler_accept(s->smp, tokens[i]);
    *handle = h;
    return SEER_OK;
}

void seer_gen_limits(const seer_gen *g, const seer_gen_seq *s, int budget, int *gam, int *dl) {
    const int room = g->ctx->params.n_ctx - s->n_tokens - 1; /* slots for draft rows */
    const int left = s->max_new < 0 ? room + 1 : s->max_new - n_generated(s) - 1;
    int m = g->n_shape < room ? g->n_shape : room, d = g->D < left ? g->D : left;
    if (budget >= 0 && m > budget - 1)
        m = budget - 1;
    if (!g->tree && m > d) /* a chain's nodes are its depth */
        m = d;
    *gam = m > 0 ? m : 0;
    *dl = d > 0 ? d : 0;
    if (*dl == 0)
        *gam = 0;
}

seer_draft_seq *seer_gen_view(seer_gen *g, int h, int k) {
    seer_gen_seq *s = &g->seqs[h];
    seer_draft_seq *v = &g->dv[k >= 0 ? k : 0];
    *v = (seer_draft_seq){.slot = h, .seq = s->seq, .tokens = s->tokens, .n_tokens = s->n_tokens,
                          .n_prompt = s->n_prompt, .sp = &s->sp, .smp = s->smp, .con = s->con,
                          .accept_avg = s->accept_avg, .rounds = s->rounds};
    if (k >= 0) {
        const size_t G = (size_t)g->G;
        v->max_nodes = g->gam[k];
        v->max_depth = g->dl[k];
        v->tok = g->draft + k * G;
        v->parent = g->par + k * G;
        v->q = g->qd && s->sp.temperature > 0 ? g->qd + k * G * g->V : NULL;
        v->n_acc = g->acc[k];
        v->path = g->path + k * G;
    }
    return v;
}

void seer_gen_unview(seer_gen *g, const seer_draft_seq *v) {
    g->seqs[v->slot].accept_avg = v->accept_avg;
    g->seqs[v->slot].rounds = v->rounds;
}

seer_status seer_gen_drafter_added(seer_gen *g, int h) {
    if (g->autos)
        return seer_gen_auto_added(g, h);
    if (!g->dops || !g->dops->seq_added)
        return SEER_OK;
    seer_draft_seq *v = seer_gen_view(g, h, -1);
    seer_status st = g->dops->seq_added(&g->env, g->dimpl, v);
    seer_gen_unview(g, v);
    return st;
}

void seer_gen_drafter_released(seer_gen *g, int h) {
    if (g->autos) {
        seer_gen_auto_released(g, h);
        return;
    }
    if (g->dops && g->dops->seq_released)
        g->dops->seq_released(&g->env, g->dimpl, h);
}

int seer_gen_drafter_q_rows(seer_gen *g, int n_prompt) {
    if (g->autos)
        return seer_gen_auto_q_rows(g, n_prompt);
    return g->dops && g->dops->prefill_q_rows ? g->dops->prefill_q_rows(g->dimpl, n_prompt) : 0;
}

seer_status seer_gen_drafter_prefill_q(seer_gen *g, int h, const float *q, int n_rows) {
    if (g->autos)
        return seer_gen_auto_prefill_q(g, h, q, n_rows);
    if (!g->dops || !g->dops->prefill_q)
        return SEER_OK;
    seer_draft_seq *v = seer_gen_view(g, h, -1);
    seer_status st = g->dops->prefill_q(&g->env, g->dimpl, v, q, n_rows);
    seer_gen_unview(g, v);
    return st;
}

seer_status seer_gen_drafter_verified(seer_gen *g, int k) {
    if (!g->dops || !g->dops->verified)
        return SEER_OK;
    seer_draft_seq *v = seer_gen_view(g, g->hs[k], k);
    v->n = g->nd[k];
    seer_status st = g->dops->verified(&g->env, g->dimpl, v);
    seer_gen_unview(g, v);
    return st;
}

/* Settles and emits round entry k after its verification, and tells the drafter. */
static seer_status round_entry_done(seer_gen *g, int k) {
    seer_status st = seer_round_settle(g, k, true);
    const seer_round_result r = seer_round_emit(g, k, NULL, NULL);
    for (int j = 0; j < r.emitted && st == SEER_OK; j++)
        st = seer_gen_seq_keep_lp(&g->seqs[g->hs[k]], seer_round_logprob(g, k, j));
    g->stats.rounds++;
    g->stats.drafted += r.drafted;
    g->stats.accepted += r.accepted;
    g->stats.emitted += r.emitted;
    if (g->rec && st == SEER_OK && r.drafted > 0) {
        int budget;
        const seer_spec_kind rk = seer_gen_round_drafter(g, &budget);
        st = seer_accept_trace_record(g->rec, g->rec_epoch, g->hs[k], rk, budget, r.accepted, r.drafted);
    }
    if (st == SEER_OK)
        st = seer_round_verified(g, k);
    return st;
}

/* Verification of the round's n entries: pending + drafts of every sequence, in as few
 * calls as the batch limit allows (one when B * (G + 1) fits). */
static seer_status verify_calls(seer_gen *g, int n) {
    seer_context *c = g->ctx;
    const int TB = c->params.n_batch_max;
    seer_round_rows b = {.tok = malloc(sizeof(int32_t) * TB), .seq = malloc(sizeof(int32_t) * TB),
                         .pos = malloc(sizeof(int32_t) * TB), .want = malloc(TB)};
    seer_status st = b.tok && b.seq && b.pos && b.want ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
    const int per_seq = seer_gen_call_rows(g);
    for (int i0 = 0; i0 < n && st == SEER_OK;) {
        int i = i0;
        if (g->best_first && seer_round_nodes(g, i0) + 1 > per_seq) { /* a tree larger than a call */
            st = seer_gen_verify_chunked(g, i0, per_seq);
            if (st == SEER_OK)
                st = round_entry_done(g, i0);
            i0++;
            continue;
        }
        b.T = b.n_out = 0;
        b.chains = true;
        for (; i < n && b.T + seer_round_nodes(g, i) + 1 <= TB && seer_round_nodes(g, i) + 1 <= per_seq; i++)
            seer_round_put(g, i, &b);
        bool amax = true;
        for (int k = i0; k < i; k++)
            amax &= seer_round_greedy(g, k);
        /* trees attend to their ancestors; chains keep the causal call they always made */
        uint8_t *mask = NULL;
        if (!b.chains && !g->mask) {
            st = seer_err(SEER_ERR_INTERNAL, "a tree proposal from a generator of chains");
            break;
        }
        if (!b.chains) {
            mask = g->mask;
            memset(mask, 0, (size_t)b.T * b.T);
            for (int k = i0; k < i; k++)
                seer_round_mask(g, k, mask, b.T);
        }
        seer_batch call = {.n_tokens = b.T, .token = b.tok, .seq = b.seq, .pos = b.pos, .logits = b.want,
                           .mask = mask};
        /* the rows' masks while the call runs: only the verification after it needs them */
        double tm = now_s();
        seer_round_masks(g, i0, i, true);
        g->stats.t_mask_s += now_s() - tm;
        g->stats.verify_calls++;
        if (amax) {
            st = seer_decode_argmax(c, &call, g->ids);
            tm = now_s();
            seer_round_masks(g, i0, i, false);
            g->stats.t_mask_s += now_s() - tm;
            if (st == SEER_OK)
                st = seer_round_verify(g, i0, i, g->ids, NULL);
        } else {
            float *L = NULL;
            st = seer_decode_keep(c, &call, &L);
            tm = now_s();
            seer_round_masks(g, i0, i, false);
            g->stats.t_mask_s += now_s() - tm;
            if (st == SEER_OK)
                st = seer_round_verify(g, i0, i, NULL, L);
        }
        for (int k = i0; k < i && st == SEER_OK; k++)
            st = round_entry_done(g, k);
        i0 = i;
    }
    free(b.tok), free(b.seq), free(b.pos), free(b.want);
    return st;
}

seer_status seer_gen_step(seer_gen *g, int *n_active) {
    SEER_CHECK_ARG(g);
    SEER_CHECK_ARG(n_active);
    seer_round_begin(g);
    for (int h = 0; h < g->n_seqs; h++) {
        seer_gen_seq *s = &g->seqs[h];
        if (!s->alive || s->finished)
            continue;
        int gam, dl;
        seer_gen_limits(g, s, -1, &gam, &dl);
        seer_round_add(g, h, gam, dl);
    }
    const int n = g->n_round;
    *n_active = n;
    if (n == 0)
        return SEER_OK;
    /* a new shape (online planning) or auto's choice takes effect from this round: the limits
     * follow it */
    const int64_t emitted0 = g->stats.emitted;
    const double t_round0 = now_s();
    if (g->plan.on || g->autos) {
        SEER_TRY(seer_round_plan(g));
        for (int i = 0; i < n; i++)
            seer_gen_limits(g, &g->seqs[g->hs[i]], -1, &g->gam[i], &g->dl[i]);
    }
    const double t0 = now_s();
    SEER_TRY(seer_round_propose(g, n));
    const double t1 = now_s();
    seer_status st = verify_calls(g, n);
    g->stats.t_draft_s += t1 - t0;
    g->stats.t_verify_s += now_s() - t1;
    if (st == SEER_OK)
        seer_round_done(g, (int)(g->stats.emitted - emitted0), now_s() - t_round0);
    for (int i = 0; i < n; i++)
        if (g->seqs[g->hs[i]].finished)
            (*n_active)--;
    return st;
}

int seer_gen_output(const seer_gen *g, int h, const int32_t **ids) {
    if (!g || !ids || h < 0 || h >= g->n_seqs || !g->seqs[h].tokens) {
        if (ids)
            *ids = NULL;
        return -1;
    }
    *ids = g->seqs[h].tokens + g->seqs[h].n_prompt;
    return n_generated(&g->seqs[h]);
}

bool seer_gen_finished(const seer_gen *g, int h) {
    return !g || h < 0 || h >= g->n_seqs || !g->seqs[h].alive || g->seqs[h].finished;
}

void seer_gen_release(seer_gen *g, int h) {
    if (!g || h < 0 || h >= g->n_seqs || !g->seqs[h].alive)
        return;
    seer_gen_seq *s = &g->seqs[h];
    seer_gen_drafter_released(g, h);
    seer_seq_free(g->ctx, s->seq);
    seer_sampler_free(s->smp);
    s->smp = NULL;
    s->alive = false;
    s->finished = true;
}

void seer_gen_remove(seer_gen *g, int h) {
    if (!g || h < 0 || h >= g->n_seqs)
        return;
    seer_gen_release(g, h);
    seer_gen_seq_drop(&g->seqs[h]);
    free(g->seqs[h].tokens);
    g->seqs[h].tokens = NULL;
    if (g->rec) /* the handle's next sequence records lines of its own */
        seer_accept_trace_close(g->rec, g->rec_epoch, h);
}

void seer_gen_stats(const seer_gen *g, seer_spec_stats *out) {
    if (g && out)
        *out = g->stats;
    else if (out)
        memset(out, 0, sizeof *out);
}

/* ---- acceptance traces (accept_trace.c): recording and synthetic replay ----------------- */

seer_spec_kind seer_gen_round_drafter(const seer_gen *g, int *budget) {
    if (g->autos)
        return seer_gen_auto_current(g, budget);
    const seer_spec_kind k = seer_gen_round_kind(g);
    *budget = seer_drafter_has(k, SEER_DRAFTER_BUDGETED) ? seer_spec_value_int(&g->spec, SEER_DRAFTER_BUDGET) : 0;
    return k;
}

seer_status seer_gen_record_trace(seer_gen *g, seer_accept_trace *t) {
    SEER_CHECK_ARG(g);
    if (g->rec)
        for (int h = 0; h < g->n_seqs; h++)
            seer_accept_trace_close(g->rec, g->rec_epoch, h);
    g->rec = t;
    g->rec_epoch = t ? seer_accept_trace_begin(t) : 0;
    return SEER_OK;
}

