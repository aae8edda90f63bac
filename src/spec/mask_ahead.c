/*
 * mask_ahead.c: the token masks of a verification's rows computed while the forward call
 * that verifies runs. The forward pass does not need them: only the sampling and the
 * acceptance rule after the logits do (the scheme of XGrammar's overlap). Where the
 * backend's forward call returns once queued (backend.h's forward_async: CUDA, whose first
 * wait is the sampling's), the calling thread fills each constrained sequence's cache of
 * masks (seer_constraint_mask_after) after issuing the call and before sampling, while the
 * device computes. Where it returns finished (the CPU), the round knows every row's path
 * before the call (the pending token and the drafts), so a helper thread fills the caches
 * beside the forward's own threads; that hides mask time only where the forward leaves a
 * core free.
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

static void job(seer_gen *g) {
    for (int k = g->ahead.k0; k < g->ahead.k1; k++)
        if (overlapped(g, k))
            entry_masks(g, k);
}

/* The helper: waits for a job, runs it, says so, until told to quit. */
static void *run(void *arg) {
    seer_gen *g = arg;
    seer_mask_ahead *a = &g->ahead;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->busy && !a->quit)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->quit)
            break;
        pthread_mutex_unlock(&a->mu);
        job(g);
        pthread_mutex_lock(&a->mu);
        a->busy = false;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* Starts the helper the first time one is wanted; false where it cannot be. */
static bool helper(seer_gen *g) {
    seer_mask_ahead *a = &g->ahead;
    if (a->started || a->failed)
        return a->started;
    if (pthread_mutex_init(&a->mu, NULL) != 0) {
        a->failed = true;
        return false;
    }
    if (pthread_cond_init(&a->cv, NULL) != 0) {
        pthread_mutex_destroy(&a->mu);
        a->failed = true;
        return false;
    }
    a->busy = a->quit = false;
    if (pthread_create(&a->th, NULL, run, g) != 0) {
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
        a->failed = true;
        return false;
    }
    a->started = true;
    return true;
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
    if (!any)
        return;
    seer_mask_ahead *a = &g->ahead;
    a->k0 = k0;
    a->k1 = k1;
    if (g->model->be->ops->forward_async) {
        a->deferred = true; /* after the call is issued, on this thread */
        return;
    }
    if (!helper(g)) {
        job(g); /* no thread: before the call, as above */
        return;
    }
    pthread_mutex_lock(&a->mu);
    a->busy = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void seer_mask_ahead_wait(seer_gen *g) {
    seer_mask_ahead *a = &g->ahead;
    if (a->deferred) {
        a->deferred = false;
        job(g);
        return;
    }
    if (!a->started)
        return;
    pthread_mutex_lock(&a->mu);
    while (a->busy)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

void seer_mask_ahead_free(seer_mask_ahead *a) {
    if (!a->started)
        return;
    pthread_mutex_lock(&a->mu);
    a->quit = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->th, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    a->started = false;
}
