/*
 * draft_ngram.c: prompt lookup. The last n tokens (n from ngram_max down to ngram_min) are
 * searched for in the sequence's earlier tokens; the tokens that followed the latest match
 * are proposed. Deterministic, so q is one-hot. Costs no forward pass; strong when the
 * output copies from a long context (summaries, code edits, extraction).
 */
#include "spec/spec.h"

static seer_status ngram_init(seer_gen *g, void **impl) {
    *impl = (void *)1; /* stateless */
    return SEER_OK;
}

static void ngram_free(seer_gen *g, void *impl) {}

static seer_status ngram_none(seer_gen *g, void *impl, int h) { return SEER_OK; }

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

static seer_status ngram_propose(seer_gen *g, void *impl, int n, const int *hs, const int *gam,
                                 int32_t *draft, float *q, bool *onehot, int *nd) {
    for (int i = 0; i < n; i++) {
        const seer_gen_seq *s = &g->seqs[hs[i]];
        const int most = gam[i] < g->dl[i] ? gam[i] : g->dl[i];
        nd[i] = most > 0 ? lookup(s->tokens, s->n_tokens, g->spec.ngram_min, g->spec.ngram_max,
                                  most, draft + (size_t)i * g->G)
                           : 0;
        for (int j = 0; j < nd[i]; j++)
            g->par[(size_t)i * g->G + j] = j - 1;
        onehot[i] = true;
    }
    return SEER_OK;
}

static seer_status ngram_verified(seer_gen *g, void *impl, int h, int n_acc, int nd) { return SEER_OK; }

const seer_drafter_ops seer_drafter_ngram = {
    .name = "ngram",
    .init = ngram_init,
    .free = ngram_free,
    .seq_added = ngram_none,
    .propose = ngram_propose,
    .verified = ngram_verified,
};
