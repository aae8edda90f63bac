/*
 * mask_ahead.c: the token masks of a verification's rows computed while the forward call
 * that verifies runs. The forward pass does not need them: only the sampling and the
 * acceptance rule after the logits do (the scheme of XGrammar's overlap). The checks before
 * the call use no masks (constrain_rows.c: walks over a path's bytes, and a forced-token walk
 * that stops at the first branch), so the caller issues the forward call first and the rows'
 * masks are computed on the calling thread after it returns and before the sampling
 * (seer_constraint_mask_after fills each constrained sequence's cache of masks). On CUDA the
 * forward call returns once queued (a stream, a graph launch) and the first wait for the
 * device is the sampling's, so the masks are computed while the device runs; on the CPU the
 * forward returns finished and the masks follow it (a helper thread beside the forward's own
 * threads was measured and not kept: docs/benchmarks.md). Masks depend only on the path, so
 * the order changes no output; a constraint with SEER_CONSTRAINT_MASKS_BEFORE_CALL takes the
 * order before (its masks before the call), which the tests compare against.
 *
 * Not for: the masks themselves (src/constrain/), how rows use them (verify.c, tree.c).
 */
#include "constrain/grammar.h"
#include "spec/round.h"
#include "spec/spec.h"

/* The masks of entry k's rows: after the pending token and after each draft node. */
static void entry_masks(seer_gen *g, int k) {
    seer_gen_seq *s = &g->seqs[g->hs[k]];
    const int32_t *tok = g->draft + (size_t)k * g->G, *par = g->par + (size_t)k * g->G;
    for (int u = -1; u < g->nd[k]; u++)
        if (!seer_spec_row_mask(s->con, tok, par, u))
            return; /* memory: verification asks again and reports it */
}

static bool before_call(const seer_gen *g, int k) {
    return seer_constraint_options(g->seqs[g->hs[k]].con) & SEER_CONSTRAINT_MASKS_BEFORE_CALL;
}

void seer_round_masks(seer_gen *g, int k0, int k1, bool before) {
    for (int k = k0; k < k1; k++)
        if (g->seqs[g->hs[k]].con && before_call(g, k) == before)
            entry_masks(g, k);
}
