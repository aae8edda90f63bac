/*
 * mask_ahead.c: the token masks of a verification's rows computed while the forward call
 * that verifies runs. The forward pass does not need them: only the sampling and the
 * acceptance rule after the logits do (the scheme of XGrammar's overlap). Before the call
 * the round knows every row's path (the pending token and the drafts), so a helper thread
 * fills each constrained sequence's cache of masks (seer_constraint_mask_after) while the
 * calling thread issues the call: on a GPU backend the call returns once queued and the
 * first wait is the sampling's, on the CPU the helper runs beside the forward's threads.
 * The proposals' checks before the call (constrain_rows.c) use walks over a path's bytes
 * and a forced-token walk that stops at the first branch, not masks, so that the whole mask
 * work lands here. Masks are a function of the path, so the order changes no output.
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

static bool overlapped(const seer_gen *g, int k) {
    const seer_constraint *con = g->seqs[g->hs[k]].con;
    return con && !(seer_constraint_options(con) & SEER_CONSTRAINT_MASKS_BEFORE_CALL);
}

static void *run(void *arg) {
    seer_gen *g = arg;
    for (int k = g->ahead.k0; k < g->ahead.k1; k++)
        if (overlapped(g, k))
            entry_masks(g, k);
    return NULL;
}

void seer_mask_ahead_start(seer_gen *g, int k0, int k1) {
    bool any = false;
    for (int k = k0; k < k1; k++) {
        if (!g->seqs[g->hs[k]].con)
            continue;
        if (overlapped(g, k))
            any = true;
        else
            entry_masks(g, k); /* the masks before the call, on this thread */
    }
    g->ahead.k0 = k0;
    g->ahead.k1 = k1;
    g->ahead.running = any && pthread_create(&g->ahead.th, NULL, run, g) == 0;
    if (any && !g->ahead.running)
        (void)run(g); /* no thread: before the call, as above */
}

void seer_mask_ahead_wait(seer_gen *g) {
    if (g->ahead.running)
        pthread_join(g->ahead.th, NULL);
    g->ahead.running = false;
}
