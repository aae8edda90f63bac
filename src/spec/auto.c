/*
 * auto.c: SEER_SPEC_AUTO, speculation chosen every round by the calibrated cost model
 * (cost.h; MagicDec's model per round, §1 of the speculative decoding reference).
 *
 * At init every drafter the cost table has a row for becomes a candidate, once per budget K
 * of its row (a sparse self-draft's K is fixed at its init). Before each round the planner
 * (seer_cost_choose) gets the batch's size B, its cache lengths and each request's online
 * acceptance per drafter kind and budget, and names a drafter, K and G, or plain decoding; the
 * generator then runs that round with that drafter as if it were its only one.
 *
 * Why this stays exact whatever is chosen when: verification never depends on which drafter
 * proposed (greedy output is the target's argmax chain, sampled output exact rejection
 * sampling over any proposal), and each candidate keeps its per-sequence state alive for
 * every sequence (seq_added, prefill queries, release go to all of them). A candidate that
 * sat out some rounds renews lazily when picked: the sparse self-drafts read the cache as it
 * is then (their selections cover a prefix and the recent slots stay visible), the draft
 * model catches its own cache up on the tokens emitted meanwhile, n-gram reads the tokens.
 * Only the drafter that proposed a round sees its verification (verified hook).
 *
 * A model holding draft weights (seer_model_params.draft_weights) gives the sparse self-draft
 * candidates their cheaper steps: they draft through the copy whatever the generator's
 * draft_weights says, as calibration measured them (calibrate.c).
 *
 * Not here: trees (the cost model's tree options stay off: auto proposes chains), and the
 * quantised-KV self-draft (calibration does not measure it and it needs the KV copy at
 * context creation, which every plain step would pay for).
 */
#include "spec/cost.h"
#include "spec/spec.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define AUTO_MAX_CAND (SEER_COST_MAX_DRAFTERS * SEER_COST_MAX_K)

typedef struct {
    seer_spec_kind kind;
    int budget;                /* the table's K (0: not a budgeted drafter) */
    const seer_drafter_ops *ops;
    void *impl;
    seer_spec_params spec;     /* its settings: the generator's with kind and budget set */
} auto_cand;

struct seer_gen_auto {
    seer_cost_planner *pl;     /* NULL: no table, every round plain */
    int n_cand;
    auto_cand cand[AUTO_MAX_CAND];
    bool allowed[SEER_COST_KINDS];
    int cur;                   /* this round's candidate, -1: plain */
    int plain_run;             /* plain rounds in a row (a probe after gap of them) */
    int explore_every;         /* the planner's first gap */
    int gap;                   /* doubles after each probe that did not make drafting pay */
    bool probed;               /* the last round was a probe */
    seer_accept_track *track;  /* [n_seq_max] per handle */
    bool *tracked;             /* [n_seq_max] its track was started */
    const seer_accept_track **tr; /* [n_seq_max] a round's tracks */
    int *lens;                 /* [n_seq_max] a round's cache lengths */
    float *qtmp;               /* prefill queries repacked for a candidate that wants fewer rows */
    size_t qtmp_cap;
    seer_spec_auto_stats st;
};

/* The drafters auto may choose (the registry's flags): those that need a draft model only
 * with one. */
static bool candidate_kind(seer_spec_kind k, const seer_spec_params *sp) {
    return seer_drafter_has(k, SEER_DRAFTER_AUTO) &&
           (sp->draft_model != NULL || !seer_drafter_has(k, SEER_DRAFTER_DRAFT_MODEL));
}

seer_status seer_gen_auto_init(seer_gen *g) {
    struct seer_gen_auto *a = calloc(1, sizeof *a);
    const int B = g->ctx->params.n_seq_max;
    if (a) {
        a->track = calloc(B, sizeof *a->track);
        a->tracked = calloc(B, sizeof *a->tracked);
        a->tr = calloc(B, sizeof *a->tr);
        a->lens = calloc(B, sizeof *a->lens);
    }
    if (!a || !a->track || !a->tracked || !a->tr || !a->lens) {
        if (a)
            free(a->track), free(a->tracked), free(a->tr), free(a->lens);
        free(a);
        return seer_err(SEER_ERR_OOM, "out of memory for automatic speculation");
    }
    a->cur = -1;
    g->autos = a;
    const seer_cost_table *t = seer_spec_cost_table(g->spec.cost);
    if (!t || g->G < 1)
        return SEER_OK; /* plain decoding throughout */
    a->st.has_table = true;
    seer_cost_params cp = seer_cost_default_params();
    cp.max_gamma = g->G < SEER_COST_MAX_G ? g->G : SEER_COST_MAX_G;
    SEER_TRY(seer_cost_planner_init(t, cp, &a->pl));
    a->explore_every = a->gap = cp.explore_every;
    for (int d = 0; d < t->n_drafters; d++) {
        const seer_cost_drafter *dr = &t->drafter[d];
        if (!candidate_kind(dr->kind, &g->spec))
            continue;
        for (int ki = 0; ki < dr->n_k && a->n_cand < AUTO_MAX_CAND; ki++) {
            auto_cand *c = &a->cand[a->n_cand];
            c->kind = dr->kind;
            c->budget = dr->k[ki];
            c->spec = g->spec;
            c->spec.kind = dr->kind;
            c->spec.tree_size = 0;
            const bool k_ok = c->budget <= 0 || seer_spec_set_num(&c->spec, SEER_DRAFTER_BUDGET, c->budget) == SEER_OK;
            /* the sparse self-drafts draft through the model's draft weights where it holds
             * them: calibration timed their step so (calibrate.c) */
            c->spec.draft_weights = g->ctx->model->draft_layers && seer_drafter_has(c->kind, SEER_DRAFTER_SPARSE_SELF);
            c->ops = seer_drafter_of_kind(dr->kind)->ops;
            /* a candidate that cannot run with these settings (a budget out of range or one its view refuses, a
             * draft model of another vocabulary) is left out rather than failing generation */
            if (!k_ok || !c->ops || c->ops->init(&g->env, &c->spec, &c->impl) != SEER_OK) {
                memset(c, 0, sizeof *c);
                continue;
            }
            a->allowed[c->kind] = true;
            a->n_cand++;
        }
    }
    return SEER_OK;
}

void seer_gen_auto_free(seer_gen *g) {
    struct seer_gen_auto *a = g->autos;
    if (!a)
        return;
    for (int i = 0; i < a->n_cand; i++)
        a->cand[i].ops->free(&g->env, a->cand[i].impl);
    seer_cost_planner_free(a->pl);
    free(a->track), free(a->tracked), free(a->tr), free(a->lens), free(a->qtmp);
    free(a);
    g->autos = NULL;
    g->dops = NULL;
    g->dimpl = NULL;
}

seer_status seer_gen_auto_added(seer_gen *g, int h) {
    struct seer_gen_auto *a = g->autos;
    if (a->pl) {
        seer_accept_track_init(a->pl, &a->track[h]);
        a->tracked[h] = true;
    }
    for (int i = 0; i < a->n_cand; i++) {
        if (!a->cand[i].ops->seq_added)
            continue;
        seer_draft_seq *v = seer_gen_view(g, h, -1);
        seer_status st = a->cand[i].ops->seq_added(&g->env, a->cand[i].impl, v);
        seer_gen_unview(g, v);
        SEER_TRY(st);
    }
    return SEER_OK;
}

void seer_gen_auto_released(seer_gen *g, int h) {
    struct seer_gen_auto *a = g->autos;
    a->tracked[h] = false;
    for (int i = 0; i < a->n_cand; i++)
        if (a->cand[i].ops->seq_released)
            a->cand[i].ops->seq_released(&g->env, a->cand[i].impl, h);
}

static int cand_q_rows(const auto_cand *c, int n_prompt) {
    return c->ops->prefill_q_rows ? c->ops->prefill_q_rows(c->impl, n_prompt) : 0;
}

int seer_gen_auto_q_rows(seer_gen *g, int n_prompt) {
    const struct seer_gen_auto *a = g->autos;
    int m = 0;
    for (int i = 0; i < a->n_cand; i++) {
        const int r = cand_q_rows(&a->cand[i], n_prompt);
        m = r > m ? r : m;
    }
    return m;
}

seer_status seer_gen_auto_prefill_q(seer_gen *g, int h, const float *q, int n_rows) {
    struct seer_gen_auto *a = g->autos;
    const seer_model_info *in = &g->model->info;
    const size_t qd = (size_t)in->n_heads * in->head_dim;
    const int n_prompt = g->seqs[h].n_prompt;
    for (int i = 0; i < a->n_cand; i++) {
        auto_cand *c = &a->cand[i];
        int r = cand_q_rows(c, n_prompt);
        if (r <= 0 || !c->ops->prefill_q)
            continue;
        r = r < n_rows ? r : n_rows;
        /* q is [n_layers][n_rows][H*Dh]; a candidate wanting fewer rows gets the last r of
         * each layer */
        const float *qc = q;
        if (r < n_rows) {
            const size_t need = (size_t)in->n_layers * r * qd;
            if (need > a->qtmp_cap) {
                float *nq = realloc(a->qtmp, need * sizeof(float));
                if (!nq)
                    return seer_err(SEER_ERR_OOM, "out of memory for prefill queries");
                a->qtmp = nq;
                a->qtmp_cap = need;
            }
            for (int l = 0; l < in->n_layers; l++)
                memcpy(a->qtmp + (size_t)l * r * qd, q + ((size_t)l * n_rows + (n_rows - r)) * qd,
                       (size_t)r * qd * sizeof(float));
            qc = a->qtmp;
        }
        seer_draft_seq *v = seer_gen_view(g, h, -1);
        seer_status st = c->ops->prefill_q(&g->env, c->impl, v, qc, r);
        seer_gen_unview(g, v);
        SEER_TRY(st);
    }
    return SEER_OK;
}

static void set_plain(seer_gen *g) {
    g->autos->cur = -1;
    g->dops = NULL;
    g->dimpl = NULL;
    g->n_shape = 0;
    g->D = 0;
}

seer_status seer_gen_auto_round(seer_gen *g) {
    struct seer_gen_auto *a = g->autos;
    int B = 0;
    for (int h = 0; h < g->n_seqs; h++) {
        const seer_gen_seq *s = &g->seqs[h];
        if (!s->alive || s->finished)
            continue;
        a->tr[B] = a->tracked[h] ? &a->track[h] : NULL;
        a->lens[B++] = s->n_tokens > 1 ? s->n_tokens - 1 : 0;
    }
    set_plain(g);
    if (B == 0)
        return SEER_OK;
    seer_spec_decision d;
    memset(&d, 0, sizeof d);
    if (a->pl && a->n_cand > 0) {
        /* a planner failure costs this round its speculation, never the generation */
        if (seer_cost_choose(a->pl, a->tr, a->lens, B, a->allowed, &d) != SEER_OK)
            memset(&d, 0, sizeof d);
        /* a drafter the planner has seen too little of to choose, but that would pay at a
         * high acceptance, gets one round now and then (cost_plan.c: exploration) */
        if (a->probed && d.kind != SEER_SPEC_NONE) /* the probe made drafting pay */
            a->gap = a->explore_every;
        else if (a->probed && a->gap < (1 << 20))
            a->gap *= 2;
        a->probed = false;
        if (d.kind == SEER_SPEC_NONE && a->explore_every > 0 && ++a->plain_run >= a->gap) {
            a->plain_run = 0;
            if (seer_cost_choose_probe(a->pl, a->tr, a->lens, B, a->allowed, &d) != SEER_OK)
                memset(&d, 0, sizeof d);
            if (d.kind != SEER_SPEC_NONE)
                a->st.probes++, a->probed = true;
        } else if (d.kind != SEER_SPEC_NONE)
            a->plain_run = 0;
        for (int i = 0; d.kind != SEER_SPEC_NONE && i < a->n_cand; i++)
            if (a->cand[i].kind == d.kind && a->cand[i].budget == d.budget && d.gamma >= 1) {
                a->cur = i;
                g->dops = a->cand[i].ops;
                g->dimpl = a->cand[i].impl;
                g->n_shape = g->D = d.gamma < g->G ? d.gamma : g->G;
                break;
            }
    }
    const seer_spec_kind k = a->cur >= 0 ? a->cand[a->cur].kind : SEER_SPEC_NONE;
    a->st.decisions[k]++;
    if (a->cur >= 0)
        a->st.gamma_sum += g->D;
    if (d.t_round_s > 0) {
        a->st.predicted_tokens += d.tokens_per_round;
        a->st.predicted_s += d.t_round_s;
        a->st.plain_tok_s_sum += d.plain_tokens_per_s;
    }
    return SEER_OK;
}

seer_spec_kind seer_gen_auto_current(const seer_gen *g, int *budget) {
    const struct seer_gen_auto *a = g->autos;
    *budget = a->cur >= 0 ? a->cand[a->cur].budget : 0;
    return a->cur >= 0 ? a->cand[a->cur].kind : SEER_SPEC_NONE;
}

void seer_gen_auto_observe(seer_gen *g, int k) {
    struct seer_gen_auto *a = g->autos;
    if (a->cur < 0 || !a->pl || g->gam[k] <= 0)
        return;
    const seer_spec_kind kind = a->cand[a->cur].kind;
    const int h = g->hs[k], nd = g->nd[k], acc = g->acc[k];
    a->st.drafted[kind] += nd;
    a->st.accepted[kind] += acc;
    /* A round's yield is what counts: a drafter that proposed fewer nodes than it was given
     * (n-gram without a match) is counted as if the depth after its last accepted node had
     * been rejected, so that a drafter with nothing to propose stops being chosen. */
    int tried = nd;
    if (acc == nd && nd < g->gam[k])
        tried = nd + 1;
    (void)seer_cost_observe_chain(a->pl, a->tracked[h] ? &a->track[h] : NULL, kind,
                                  a->cand[a->cur].budget, tried, acc);
}

void seer_gen_auto_round_done(seer_gen *g, int emitted, double seconds) {
    struct seer_gen_auto *a = g->autos;
    if (!a)
        return;
    a->st.emitted += emitted;
    a->st.measured_s += seconds;
}

seer_spec_kind seer_gen_round_kind(const seer_gen *g) {
    if (!g->autos)
        return g->spec.kind;
    return g->autos->cur >= 0 ? g->autos->cand[g->autos->cur].kind : SEER_SPEC_NONE;
}

void seer_gen_auto_stats(const seer_gen *g, seer_spec_auto_stats *out) {
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (g && g->autos)
        *out = g->autos->st;
}

void seer_spec_auto_speedups(const seer_spec_auto_stats *st, double *predicted, double *measured) {
    double p = 0, m = 0;
    int64_t rounds = 0;
    for (int k = 0; st && k < SEER_SPEC_KIND_MAX; k++)
        rounds += st->decisions[k];
    if (st && rounds > 0 && st->plain_tok_s_sum > 0) {
        const double plain = st->plain_tok_s_sum / (double)rounds;
        if (st->predicted_s > 0)
            p = st->predicted_tokens / st->predicted_s / plain;
        if (st->measured_s > 0)
            m = (double)st->emitted / st->measured_s / plain;
    }
    if (predicted)
        *predicted = p;
    if (measured)
        *measured = m;
}
