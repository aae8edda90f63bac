/*
 * draft_ngram.c: prompt lookup. The last n tokens (n from ngram_max down to ngram_min) are
 * searched for in the sequence's earlier tokens; the tokens that followed the latest match
 * are proposed. Deterministic, so q is one-hot, and a proposal is a chain (one-hot drafts
 * have no alternatives to branch on). Costs no forward pass; strong when the output copies
 * from a long context (summaries, code edits, extraction).
 */
#include "spec/drafter.h"
#include "util/error.h"

#include <stdlib.h>

/* Its settings (OPTS below: their names, ranges and defaults), filled at init. */
typedef struct {
    int nmin, nmax; /* suffix lengths tried */
} ngram_impl;

extern const seer_drafter_desc seer_drafter_ngram_desc;

static seer_status ngram_init(const seer_draft_env *env, const seer_spec_params *spec, void **impl) {
    ngram_impl st;
    seer_drafter_settings(&seer_drafter_ngram_desc, spec, &st);
    if (st.nmin < 1 || st.nmax < st.nmin || st.nmax > 64)
        return seer_err(SEER_ERR_INVALID_ARG, "ngram sizes must satisfy 1 <= min %d <= max %d <= 64", st.nmin,
                        st.nmax);
    ngram_impl *im = malloc(sizeof *im);
    if (!im)
        return seer_err(SEER_ERR_OOM, "out of memory");
    *im = st;
    *impl = im;
    return SEER_OK;
}

static void ngram_free(const seer_draft_env *env, void *impl) { free(impl); }

/* Proposes up to gmax tokens for tokens[0..n); returns how many. */
static int lookup(const int32_t *t, int n, int nmin, int nmax, int gmax, int32_t *out) {
    for (int k = nmax < n - 1 ? nmax : n - 1; k >= nmin; k--) {
        const int32_t *suffix = t + n - k;
        /* latest earlier occurrence: start positions i < n - k, scanning backwards */
        for (int i = n - k - 1; i >= 0; i--) {
            int m = 0;
            while (m < k && t[i + m] == suffix[m])
                m++;
            if (m < k)
                continue;
            int avail = n - (i + k);
            int c = avail < gmax ? avail : gmax;
            for (int j = 0; j < c; j++)
                out[j] = t[i + k + j];
            if (c > 0)
                return c;
        }
    }
    return 0;
}

static seer_status ngram_propose(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs) {
    const ngram_impl *im = impl;
    for (int i = 0; i < n; i++) {
        seer_draft_seq *s = &seqs[i];
        const int most = s->max_nodes < s->max_depth ? s->max_nodes : s->max_depth;
        s->n = most > 0 ? lookup(s->tokens, s->n_tokens, im->nmin, im->nmax, most, s->tok) : 0;
        for (int j = 0; j < s->n; j++)
            s->parent[j] = j - 1;
        s->onehot = true;
    }
    return SEER_OK;
}

int seer_drafter_ngram_more(const void *impl, const int32_t *tokens, int n, int gmax, int32_t *out) {
    const ngram_impl *im = impl;
    return gmax > 0 ? lookup(tokens, n, im->nmin, im->nmax, gmax, out) : 0;
}

const seer_drafter_ops seer_drafter_ngram = {
    .name = "ngram",
    .init = ngram_init,
    .free = ngram_free,
    .propose = ngram_propose,
    .has_q = false,
};

static const seer_drafter_option OPTS[] = {
    {{.flag = "spec-ngram", .json = "ngram_max", .metavar = "N", .type = SEER_SPEC_OPT_INT, .def = 4, .lo = 1,
      .hi = 64, .help = "longest suffix to match"},
     SEER_DRAFTER_OPT_EXT, offsetof(ngram_impl, nmax)},
    {{.flag = "spec-ngram-min", .json = "ngram_min", .metavar = "N", .type = SEER_SPEC_OPT_INT, .def = 1, .lo = 1,
      .hi = 64, .help = "shortest suffix accepted"},
     SEER_DRAFTER_OPT_EXT, offsetof(ngram_impl, nmin)},
};

const seer_drafter_desc seer_drafter_ngram_desc = {
    .name = "ngram", .kind = SEER_SPEC_NGRAM, .ops = &seer_drafter_ngram,
    .help = "prompt lookup: continues the latest earlier match of the last n tokens",
    .flags = SEER_DRAFTER_AUTO | SEER_DRAFTER_TREE_BASE,
    .options = OPTS, .n_options = 2,
};
