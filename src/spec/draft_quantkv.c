/*
 * draft_quantkv.c: the quantised-KV self-draft. The target drafts for itself with every
 * attention read going through the pool's 4- or 8-bit copy of its K/V rows (seer_batch
 * .kv_quant; the copy is written beside each row by the store that writes it, so it is always
 * complete), optionally under the streaming view (sinks + recent slots within the budget) as
 * well: a quantised sparse view. Weights and everything else are the target's own.
 *
 * What the draft steps write into the cache (full-precision rows and their copies of the
 * drafted slots) is rewritten by verification, which attends through the full-precision rows;
 * after the rollback the cache holds only exact target KV, so the output is the target's
 * (bit-identical under greedy decoding). The drafter is stateless between rounds.
 */
#include "spec/spec.h"
#include "util/error.h"

#include <stdlib.h>

typedef struct {
    int32_t *sinks; /* [budget] slots 0..sinks-1 of the streaming view */
} quantkv_impl;

static seer_status quantkv_init(seer_gen *g, void **out) {
    quantkv_impl *im = calloc(1, sizeof *im);
    if (im)
        im->sinks = seer_malloc_array((size_t)g->spec.budget, sizeof(int32_t));
    if (!im || !im->sinks) {
        free(im);
        return seer_err(SEER_ERR_OOM, "out of memory for the quantised-KV draft");
    }
    for (int i = 0; i < g->spec.budget; i++)
        im->sinks[i] = i;
    *out = im;
    return SEER_OK;
}

static void quantkv_free(seer_gen *g, void *impl) {
    quantkv_impl *im = impl;
    free(im->sinks);
    free(im);
}

static seer_status quantkv_seq_added(seer_gen *g, void *impl, int h) { return SEER_OK; }
static void quantkv_seq_released(seer_gen *g, void *impl, int h) {}

/* The streaming view over L cached slots when the combination asks for it and the cache is
 * longer than the budget (as the streaming self-draft builds it). */
static seer_status set_view(seer_gen *g, quantkv_impl *im, seer_seq_id seq, int L) {
    const int K = g->spec.budget;
    if (g->spec.quant_view != SEER_SPEC_STREAMING || L <= K) {
        seer_seq_clear_view(g->ctx, seq);
        return SEER_OK;
    }
    const int sinks = g->spec.sinks < L ? g->spec.sinks : L;
    seer_view v = {.idx = im->sinks, .n = sinks, .n_layers_view = 1, .n_heads_view = 1,
                   .tail_start = L - (K - sinks)};
    return seer_seq_set_view(g->ctx, seq, &v);
}

static seer_status quantkv_propose(seer_gen *g, void *impl, int n, const int *hs, const int *gam,
                                   int32_t *draft, float *q, bool *onehot, int *nd) {
    quantkv_impl *im = impl;
    seer_context *c = g->ctx;
    const int G = g->G;
    int maxg = 0;
    seer_status st = SEER_OK;
    for (int i = 0; i < n && st == SEER_OK; i++) {
        maxg = gam[i] > maxg ? gam[i] : maxg;
        st = set_view(g, im, g->seqs[hs[i]].seq, g->seqs[hs[i]].n_tokens - 1);
    }
    int32_t tok[n], sq[n], pos[n], who[n];
    uint8_t want[n];
    for (int j = 0; j < maxg && st == SEER_OK; j++) {
        int T = 0;
        for (int i = 0; i < n; i++) {
            if (j >= gam[i])
                continue;
            const seer_gen_seq *s = &g->seqs[hs[i]];
            const int L = s->n_tokens - 1;
            tok[T] = j == 0 ? s->tokens[L] : draft[(size_t)i * G + j - 1];
            sq[T] = s->seq;
            pos[T] = L + j;
            want[T] = 1;
            who[T++] = i;
        }
        seer_batch b = {.n_tokens = T, .token = tok, .seq = sq, .pos = pos, .logits = want,
                        .kv_quant = true};
        st = seer_gen_draft_step(g, c, &b, hs, who, j, draft, q);
        for (int t = 0; t < T && st == SEER_OK; t++)
            nd[who[t]] = j + 1;
    }
    for (int i = 0; i < n; i++) {
        const seer_gen_seq *s = &g->seqs[hs[i]];
        seer_seq_clear_view(c, s->seq);
        seer_status r = seer_seq_rewind(c, s->seq, s->n_tokens - 1);
        if (st == SEER_OK)
            st = r;
        onehot[i] = false;
    }
    return st;
}

static seer_status quantkv_verified(seer_gen *g, void *impl, int h, int n_acc, int nd) { return SEER_OK; }

const seer_drafter_ops seer_drafter_quantkv = {
    .name = "quantkv",
    .init = quantkv_init,
    .free = quantkv_free,
    .seq_added = quantkv_seq_added,
    .seq_released = quantkv_seq_released,
    .propose = quantkv_propose,
    .verified = quantkv_verified,
};
