/*
 * round.c: the speculation round (round.h) for the sequences of one class: proposal, the
 * rows and tree mask of the forward call, verification, settling and emission. The
 * generator's step (gen.c) and the scheduler's step (src/sched/sched.c) both run it, so a
 * rule of the round is written once.
 *
 * Not for: the acceptance rule itself (verify.c), tree shapes and KV moves (tree.c), the
 * forward call and its batching (the callers).
 */
#include "spec/round.h"
#include "spec/spec.h"
#include "util/error.h"

#include <string.h>
#include <time.h>

static double round_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- sequences of a class ---------------------------------------------------------------- */

seer_status seer_round_attach(seer_gen *g, const seer_round_seq *q, int *out) {
    const int B = g->ctx->params.n_seq_max;
    int h = 0;
    while (h < B && (g->seqs[h].alive || g->seqs[h].tokens))
        h++;
    if (h == B)
        return seer_err(SEER_ERR_INTERNAL, "no free handle in a speculation class");
    seer_gen_seq *s = &g->seqs[h];
    memset(s, 0, sizeof *s);
    s->alive = true;
    s->seq = q->seq;
    s->tokens = q->tokens;
    s->n_tokens = q->n_tokens;
    s->n_prompt = q->n_prompt;
    s->cap = q->cap;
    s->max_new = q->max_new;
    s->ignore_eos = q->ignore_eos;
    s->smp = q->smp;
    s->sp = q->sp;
    s->logprobs = q->logprobs;
    s->top_logprobs = q->top_logprobs;
    s->con = q->con;
    s->accept_avg = 1.f;
    if (h >= g->n_seqs)
        g->n_seqs = h + 1;
    *out = h;
    return SEER_OK;
}

void seer_round_detach(seer_gen *g, int h) {
    seer_gen_seq *s = &g->seqs[h];
    seer_gen_drafter_released(g, h);
    seer_seq_free(g->ctx, s->seq);
    memset(s, 0, sizeof *s);
}

int seer_round_q_rows(seer_gen *g, int n_prompt) { return seer_gen_drafter_q_rows(g, n_prompt); }

seer_status seer_round_prefill_q(seer_gen *g, int h, const float *q, int n_rows) {
    return seer_gen_drafter_prefill_q(g, h, q, n_rows);
}

seer_status seer_round_added(seer_gen *g, int h) { return seer_gen_drafter_added(g, h); }

seer_status seer_round_plan(seer_gen *g) { return seer_gen_plan_round(g); }

void seer_round_limits(const seer_gen *g, int h, int budget, int depth_max, int *gam, int *dl) {
    seer_gen_limits(g, &g->seqs[h], budget, gam, dl);
    if (depth_max < 0)
        return;
    if (*dl > depth_max)
        *dl = depth_max;
    if (!g->tree && *gam > *dl) /* a chain's nodes are its depth */
        *gam = *dl;
    if (*dl == 0)
        *gam = 0;
}

seer_spec_kind seer_round_kind(const seer_gen *g) { return seer_gen_round_kind(g); }

void seer_round_done(seer_gen *g, int emitted, double seconds) {
    if (g->autos)
        seer_gen_auto_round_done(g, emitted, seconds);
}

/* ---- a round ------------------------------------------------------------------------------ */

void seer_round_begin(seer_gen *g) { g->n_round = 0; }

int seer_round_add(seer_gen *g, int h, int gam, int dl) {
    const int k = g->n_round++;
    g->hs[k] = h;
    g->gam[k] = gam;
    g->dl[k] = dl;
    g->nd[k] = 0;
    g->onehot[k] = false;
    g->chunked[k] = false;
    return k;
}

int seer_round_nodes(const seer_gen *g, int k) { return g->nd[k]; }

bool seer_round_greedy(const seer_gen *g, int k) {
    const seer_gen_seq *s = &g->seqs[g->hs[k]];
    return seer_gen_argmax_only(s) && !s->logprobs; /* log-probabilities read the logits */
}

seer_status seer_round_propose(seer_gen *g, int n) {
    bool any = false, sampled = false;
    for (int i = 0; i < n; i++) {
        any |= g->gam[i] > 0;
        sampled |= g->gam[i] > 0 && g->seqs[g->hs[i]].sp.temperature > 0;
    }
    if (!g->dops || !any)
        return SEER_OK;
    if (sampled && g->dops->has_q)
        SEER_TRY(seer_gen_need_q(g));
    for (int i = 0; i < n; i++)
        seer_gen_view(g, g->hs[i], i);
    const double t0 = round_now_s();
    seer_status st = g->dops->propose(&g->env, g->dimpl, n, g->dv);
    g->plan.t_draft_s += round_now_s() - t0; /* the draft step's cost, for an automatic tree size */
    g->plan.steps += 1;
    for (int i = 0; i < n; i++) {
        g->nd[i] = g->dv[i].n;
        g->onehot[i] = g->dv[i].onehot;
        seer_gen_unview(g, &g->dv[i]);
    }
    SEER_TRY(st);
    for (int i = 0; i < n; i++) {
        if (g->nd[i] < 0 || g->nd[i] > g->gam[i])
            return seer_err(SEER_ERR_INTERNAL, "drafter proposed %d nodes, room for %d", g->nd[i], g->gam[i]);
        const int32_t *p = g->par + (size_t)i * g->G;
        for (int j = 0; j < g->nd[i]; j++)
            if (p[j] < -1 || p[j] >= j)
                return seer_err(SEER_ERR_INTERNAL, "drafter proposed node %d under %d", j, p[j]);
    }
    return seer_gen_constrain_proposals(g, n);
}

int seer_round_put(seer_gen *g, int k, seer_round_rows *b) {
    const seer_gen_seq *s = &g->seqs[g->hs[k]];
    const int T = b->T;
    g->t0[k] = T;
    g->row0[k] = b->n_out;
    const int m = seer_gen_verify_rows(g, k, b->tok + T, b->pos + T);
    for (int j = 0; j < m; j++) {
        b->seq[T + j] = s->seq;
        b->want[T + j] = 1;
    }
    b->T += m;
    b->n_out += m;
    b->chains &= seer_gen_is_chain(g, k);
    return m;
}

void seer_round_out_row(seer_gen *g, int k, int row) {
    g->t0[k] = -1;
    g->row0[k] = row;
}

void seer_round_mask(const seer_gen *g, int k, uint8_t *mask, int T) {
    if (g->t0[k] >= 0)
        seer_gen_mask_rows(g, k, mask, T, g->t0[k], g->nd[k] + 1, false);
}

/* Plain decoding: no drafts, so no rule to apply; the same draws the verifier makes for a
 * round without drafts (one row from the pending token's logits). */
static seer_status verify_plain(seer_gen *g, int k0, int k1, const int32_t *ids, float *logits) {
    if (ids) {
        for (int k = k0; k < k1; k++) {
            g->acc[k] = 0;
            g->next[k] = ids[g->row0[k]];
        }
        return SEER_OK;
    }
    seer_gen_hist_reset(g);
    SEER_TRY(seer_gen_hist_reserve(g, k1 - k0));
    for (int k = k0; k < k1; k++) {
        seer_gen_seq *s = &g->seqs[g->hs[k]];
        g->rows[k - k0] =
            seer_gen_node_row(g, k, s, -1, logits + (size_t)g->row0[k] * g->V, NULL, seer_gen_draw(s));
    }
    SEER_TRY(seer_context_sample(g->ctx, g->rows, k1 - k0, g->ids));
    for (int k = k0; k < k1; k++) {
        g->acc[k] = 0;
        g->next[k] = g->ids[k - k0];
    }
    return SEER_OK;
}

static seer_status verify_rule(seer_gen *g, int k0, int k1, const int32_t *ids, float *logits) {
    if (g->spec.kind == SEER_SPEC_NONE)
        return verify_plain(g, k0, k1, ids, logits);
    if (!ids)
        return seer_verify_group(g, k0, k1, g->row0, logits);
    for (int k = k0; k < k1; k++)
        g->acc[k] = seer_verify_tree_ids(g, k, &g->seqs[g->hs[k]], ids + g->row0[k], &g->next[k]);
    return SEER_OK;
}

seer_status seer_round_verify(seer_gen *g, int k0, int k1, const int32_t *ids, float *logits) {
    SEER_TRY(seer_gen_lp_prepare(g, k0, k1));
    SEER_TRY(verify_rule(g, k0, k1, ids, logits));
    return seer_gen_lp_compute(g, k0, k1, ids ? NULL : logits);
}

const seer_token_logprob *seer_round_logprob(const seer_gen *g, int k, int j) {
    if (!g->seqs[g->hs[k]].logprobs || !g->lpk || j < 0 || j > g->acc[k])
        return NULL;
    return &g->lpk[(size_t)k * (g->G + 1) + j];
}

seer_status seer_round_settle(seer_gen *g, int k, bool observe) {
    if (observe)
        seer_gen_plan_observe(g, k);
    return seer_gen_settle(g, k, &g->seqs[g->hs[k]]);
}

seer_round_result seer_round_emit(seer_gen *g, int k, seer_round_emit_fn fn, void *user) {
    seer_gen_seq *s = &g->seqs[g->hs[k]];
    const int nd = g->nd[k], acc = g->acc[k];
    if (nd > 0)
        s->accept_avg = 0.8f * s->accept_avg + 0.2f * (float)acc / nd;
    int e = 0;
    for (int j = 0; j <= acc && !s->finished; j++, e++) {
        const int32_t t = seer_gen_emitted(g, k, j);
        s->tokens[s->n_tokens++] = t;
        /* a refusal marks the constraint finished (seer_constraint_finished): the row had
         * nothing allowed, or memory failed */
        if (s->con)
            (void)seer_constraint_accept(s->con, t);
        s->finished = fn ? fn(user, t) : seer_gen_seq_done(g, s, t);
        if (s->con && seer_constraint_finished(s->con))
            s->finished = true;
        seer_sampler_accept(s->smp, t);
    }
    s->rounds++;
    return (seer_round_result){.drafted = nd, .accepted = acc, .emitted = e};
}

seer_status seer_round_verified(seer_gen *g, int k) { return seer_gen_drafter_verified(g, k); }
