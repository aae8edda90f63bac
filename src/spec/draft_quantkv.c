/*
 * draft_quantkv.c: the quantised-KV self-draft. The target drafts for itself with every
 * attention read going through the pool's 4- or 8-bit copy of its K/V rows (seer_batch
 * .kv_quant; the copy is written beside each row by the store that writes it, so it is always
 * complete), optionally under the streaming view (sinks + recent slots within the budget) as
 * well: a quantised sparse view. Weights and everything else are the target's own; chains and
 * trees are drafted by the step helper (seer_draft_expand).
 *
 * What the draft steps write into the cache (full-precision rows and their copies of the
 * drafted slots) is rewritten by verification, which attends through the full-precision rows;
 * after the rollback the cache holds only exact target KV, so the output is the target's
 * (bit-identical under greedy decoding). The drafter is stateless between rounds.
 */
#include "spec/drafter.h"
#include "util/error.h"

#include <stdlib.h>

typedef struct {
    seer_context *ctx;
    int budget, sinks;
    bool streaming; /* under the streaming view as well */
    bool draft_weights;
    int32_t *sink_idx; /* [budget] slots 0..sinks-1 of the streaming view */
} quantkv_impl;

/* Its settings (OPTS below): its view, and the streaming view's budget and sinks it reads. */
typedef struct {
    seer_spec_kind view;
    int budget, sinks;
} quantkv_settings;

extern const seer_drafter_desc seer_drafter_quantkv_desc;

static seer_status quantkv_init(const seer_draft_env *env, const seer_spec_params *p, void **out) {
    if (!env->ctx->params.kv_quant_bits)
        return seer_err(SEER_ERR_INVALID_ARG, "speculation 'quantkv' needs a context with a quantised KV "
                                              "copy (kv_quant_bits 4 or 8)");
    quantkv_settings own;
    seer_drafter_settings(&seer_drafter_quantkv_desc, p, &own);
    if (own.view != SEER_SPEC_NONE && own.view != SEER_SPEC_STREAMING)
        return seer_err(SEER_ERR_INVALID_ARG, "quantkv view '%s' must be none or streaming",
                        seer_spec_kind_name(own.view));
    const bool streaming = own.view == SEER_SPEC_STREAMING;
    if (streaming && own.budget < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "spec budget %d must be positive", own.budget);
    if (streaming && own.sinks < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "spec sinks %d is negative", own.sinks);
    quantkv_impl *im = calloc(1, sizeof *im);
    if (im && streaming)
        im->sink_idx = seer_malloc_array((size_t)own.budget, sizeof(int32_t));
    if (!im || (streaming && !im->sink_idx)) {
        free(im);
        return seer_err(SEER_ERR_OOM, "out of memory for the quantised-KV draft");
    }
    im->ctx = env->ctx;
    im->streaming = streaming;
    im->draft_weights = p->draft_weights;
    im->budget = own.budget;
    im->sinks = own.sinks < own.budget ? own.sinks : own.budget;
    for (int i = 0; streaming && i < own.budget; i++)
        im->sink_idx[i] = i;
    *out = im;
    return SEER_OK;
}

static void quantkv_free(const seer_draft_env *env, void *impl) {
    quantkv_impl *im = impl;
    (void)env;
    free(im->sink_idx);
    free(im);
}

/* The streaming view over L cached slots when the combination asks for it and the cache is
 * longer than the budget (as the streaming self-draft builds it). */
static seer_status set_view(quantkv_impl *im, seer_seq_id seq, int L) {
    const int K = im->budget;
    if (!im->streaming || L <= K) {
        seer_seq_clear_view(im->ctx, seq);
        return SEER_OK;
    }
    const int sinks = im->sinks < L ? im->sinks : L;
    seer_view v = {.idx = im->sink_idx, .n = sinks, .n_layers_view = 1, .n_heads_view = 1,
                   .tail_start = L - (K - sinks)};
    return seer_seq_set_view(im->ctx, seq, &v);
}

static seer_status quantkv_propose(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs) {
    quantkv_impl *im = impl;
    seer_context *c = im->ctx;
    seer_status st = SEER_OK;
    seer_seq_id dseq[n > 0 ? n : 1];
    for (int i = 0; i < n && st == SEER_OK; i++) {
        dseq[i] = seqs[i].seq;
        st = set_view(im, seqs[i].seq, seqs[i].n_tokens - 1);
    }
    if (st == SEER_OK)
        st = seer_draft_expand(env, c, n, seqs, dseq, NULL, NULL, NULL, NULL,
                               (seer_draft_reads){.kv_quant = true, .draft_weights = im->draft_weights});
    for (int i = 0; i < n; i++) {
        seer_status r = seer_draft_leave(c, &seqs[i]);
        if (st == SEER_OK)
            st = r;
        seqs[i].onehot = false;
    }
    return st;
}

static seer_status quantkv_view(const seer_draft_env *env, void *impl, const seer_draft_seq *s,
                                seer_draft_reads *reads) {
    (void)env;
    *reads = (seer_draft_reads){.kv_quant = true, .draft_weights = ((quantkv_impl *)impl)->draft_weights};
    return set_view(impl, s->seq, s->n_tokens - 1);
}

const seer_drafter_ops seer_drafter_quantkv = {
    .name = "quantkv",
    .init = quantkv_init,
    .free = quantkv_free,
    .propose = quantkv_propose,
    .has_q = true,
    .view = quantkv_view,
};

static const char *const VIEWS[] = {"none", "streaming", NULL};
static const seer_drafter_option OPTS[] = {
    {{.flag = "spec-kv-view", .json = "kv_view", .metavar = "V", .type = SEER_SPEC_OPT_KIND,
      .def = SEER_SPEC_NONE, .choices = VIEWS,
      .help = "none (every slot) or streaming (sinks + recent within the budget)"},
     SEER_DRAFTER_OPT_EXT, offsetof(quantkv_settings, view)},
    SEER_DRAFTER_READS(SEER_DRAFTER_BUDGET, offsetof(quantkv_settings, budget)),
    SEER_DRAFTER_READS("spec-sinks", offsetof(quantkv_settings, sinks)),
};

const seer_drafter_desc seer_drafter_quantkv_desc = {
    .name = "quantkv", .kind = SEER_SPEC_QUANTKV, .ops = &seer_drafter_quantkv,
    .help = "self-draft through the pool's quantised KV copy (--spec-kv-bits, --spec-kv-view)",
    .flags = SEER_DRAFTER_BUDGETED | SEER_DRAFTER_TREE_BASE | SEER_DRAFTER_HIER_BASE | SEER_DRAFTER_DRAFT_WEIGHTS,
    .options = OPTS, .n_options = 3,
};
