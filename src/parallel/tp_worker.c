/*
 * tp_worker.c: one host thread per rank. Rank 0's work runs on the calling thread, each other
 * rank's on a worker thread of its own, kept for the instance's life: a rank's ops, its
 * recorded graphs (a CUDA capture is the capturing thread's, cudaStreamCaptureModeThreadLocal)
 * and its collectives (one communicator per thread, as NCCL asks: no group spans devices) are
 * all issued from that rank's thread. seer_tp_each hands one closure to every rank and returns
 * when every rank has run it; a rank's results are its own memory, so nothing a rank computes
 * depends on when the others run.
 * Not for: what the closures do (tp_ops.c, tp_kv.c, tp_backend.c).
 */
#include "parallel/tp_internal.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tp_workers *w;
    int r;
} worker_arg;

struct tp_workers {
    tp_be *t;
    int n_started; /* threads of ranks 1 .. n_started */
    pthread_t th[SEER_TP_MAX];
    worker_arg arg[SEER_TP_MAX];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long job; /* counts the closures handed out */
    int pending;       /* workers still running the current one */
    bool quit;
    tp_rank_fn fn;
    void *ctx;
    seer_status st[SEER_TP_MAX];
    char msg[SEER_TP_MAX][512]; /* a failed rank's seer_last_error(), which is per thread */
};

static void *worker_main(void *p) {
    const worker_arg *a = p;
    tp_workers *w = a->w;
    const int r = a->r;
    unsigned long seen = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && w->job == seen)
            pthread_cond_wait(&w->go, &w->mu);
        if (w->quit)
            break;
        seen = w->job;
        const tp_rank_fn fn = w->fn;
        void *ctx = w->ctx;
        pthread_mutex_unlock(&w->mu);
        const seer_status s = fn(w->t, r, ctx);
        pthread_mutex_lock(&w->mu);
        w->st[r] = s;
        if (s != SEER_OK)
            snprintf(w->msg[r], sizeof w->msg[r], "%s", seer_last_error());
        if (--w->pending == 0)
            pthread_cond_signal(&w->done);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void seer_tp_workers_free(tp_workers *w) {
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->go);
    pthread_mutex_unlock(&w->mu);
    for (int r = 1; r <= w->n_started; r++)
        pthread_join(w->th[r], NULL);
    pthread_cond_destroy(&w->done);
    pthread_cond_destroy(&w->go);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

seer_status seer_tp_workers_init(tp_be *t, tp_workers **out) {
    *out = NULL;
    if (t->n == 1)
        return SEER_OK; /* the caller's thread is the only rank's */
    tp_workers *w = calloc(1, sizeof *w);
    if (!w)
        return seer_err(SEER_ERR_OOM, "out of memory");
    w->t = t;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w);
        return seer_err(SEER_ERR_OOM, "cannot create a mutex");
    }
    if (pthread_cond_init(&w->go, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        free(w);
        return seer_err(SEER_ERR_OOM, "cannot create a condition variable");
    }
    if (pthread_cond_init(&w->done, NULL) != 0) {
        pthread_cond_destroy(&w->go);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return seer_err(SEER_ERR_OOM, "cannot create a condition variable");
    }
    for (int r = 1; r < t->n; r++) {
        w->arg[r] = (worker_arg){w, r};
        const int e = pthread_create(&w->th[r], NULL, worker_main, &w->arg[r]);
        if (e != 0) {
            seer_tp_workers_free(w);
            return seer_err(SEER_ERR_OOM, "tensor parallelism: cannot start rank %d's thread (%s)", r, strerror(e));
        }
        w->n_started = r;
    }
    *out = w;
    return SEER_OK;
}

seer_status seer_tp_each(tp_be *t, tp_rank_fn fn, void *ctx) {
    tp_workers *w = t->workers;
    if (!w)
        return fn(t, 0, ctx);
    pthread_mutex_lock(&w->mu);
    w->fn = fn;
    w->ctx = ctx;
    w->pending = t->n - 1;
    w->job++;
    pthread_cond_broadcast(&w->go);
    pthread_mutex_unlock(&w->mu);
    const seer_status s0 = fn(t, 0, ctx);
    seer_status st[SEER_TP_MAX];
    pthread_mutex_lock(&w->mu);
    while (w->pending > 0)
        pthread_cond_wait(&w->done, &w->mu);
    memcpy(st, w->st, sizeof st);
    pthread_mutex_unlock(&w->mu);
    if (s0 != SEER_OK)
        return s0;
    for (int r = 1; r < t->n; r++)
        if (st[r] != SEER_OK)
            return seer_err(st[r], "tensor parallelism: rank %d: %s", r, w->msg[r]);
    return SEER_OK;
}
