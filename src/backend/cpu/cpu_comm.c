/*
 * cpu_comm.c: the collectives of tensor parallelism between CPU ranks, which share the
 * process's memory and run on threads of their own: each rank publishes its buffer, the ranks
 * meet, and each sums or copies its share in rank order. The reference the NCCL communicator
 * is tested against, and what lets the CPU test tensor parallelism on any machine.
 * Not for: ranks in other processes (their memory is not this one's).
 */
#include "backend/cpu/cpu.h"
#include "parallel/comm.h"
#include "util/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    seer_comm base; /* first: callers hold a pointer to it */
    pthread_mutex_t mu;
    pthread_cond_t met;
    int arrived;
    unsigned long round;
    float *buf[SEER_TP_MAX];       /* all_reduce: each rank's buffer */
    const float *src[SEER_TP_MAX]; /* gather_cols: each rank's block */
} local_comm;

/* Returns once every rank has called it; what each rank wrote before it is visible after. */
static void meet(local_comm *c) {
    pthread_mutex_lock(&c->mu);
    const unsigned long round = c->round;
    if (++c->arrived == c->base.n) {
        c->arrived = 0;
        c->round++;
        pthread_cond_broadcast(&c->met);
    } else {
        while (c->round == round)
            pthread_cond_wait(&c->met, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
}

static seer_status local_all_reduce(seer_comm *base, int r, float *buf, size_t count, bool ordered) {
    (void)ordered; /* every sum is taken in rank order */
    local_comm *c = (local_comm *)base;
    const int n = base->n;
    if (n == 1)
        return SEER_OK;
    c->buf[r] = buf;
    meet(c);
    /* rank r sums elements [i0, i1) of every buffer: each element is one rank's, in rank
     * order, so its bits do not depend on which rank took it or when */
    const size_t i0 = count * (size_t)r / (size_t)n, i1 = count * (size_t)(r + 1) / (size_t)n;
    for (size_t i = i0; i < i1; i++) {
        float s = c->buf[0][i];
        for (int k = 1; k < n; k++)
            s += c->buf[k][i];
        for (int k = 0; k < n; k++)
            c->buf[k][i] = s;
    }
    meet(c); /* no rank reuses its buffer while another still writes it */
    return SEER_OK;
}

static seer_status local_gather_cols(seer_comm *base, int r, float *dst, size_t ld, int rows, const float *src,
                                     const int *col0, const int *ncols) {
    local_comm *c = (local_comm *)base;
    const int n = base->n;
    c->src[r] = src;
    if (n > 1)
        meet(c);
    /* Rank 0 copies, last row first: its own block may lie in dst itself (logits gathered in
     * place), where a widened row lands at or past its source and only over rows already
     * moved. */
    if (r == 0)
        for (int k = 0; k < n; k++)
            for (int t = rows - 1; t >= 0; t--)
                memmove(dst + (size_t)t * ld + col0[k], c->src[k] + (size_t)t * ncols[k],
                        (size_t)ncols[k] * sizeof(float));
    if (n > 1)
        meet(c); /* the others' blocks stay as they are until copied */
    return SEER_OK;
}

static void local_free(seer_comm *base) {
    local_comm *c = (local_comm *)base;
    pthread_cond_destroy(&c->met);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

seer_status seer_cpu_comm_init(seer_backend *const *ranks, int n, seer_comm **out) {
    (void)ranks;
    *out = NULL;
    if (n < 1 || n > SEER_TP_MAX)
        return seer_err(SEER_ERR_INVALID_ARG, "a communicator needs 1 to %d ranks (%d)", SEER_TP_MAX, n);
    local_comm *c = calloc(1, sizeof *c);
    if (!c)
        return seer_err(SEER_ERR_OOM, "out of memory");
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return seer_err(SEER_ERR_OOM, "cannot create a mutex");
    }
    if (pthread_cond_init(&c->met, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return seer_err(SEER_ERR_OOM, "cannot create a condition variable");
    }
    c->base.n = n;
    c->base.all_reduce = local_all_reduce;
    c->base.gather_cols = local_gather_cols;
    c->base.free = local_free;
    *out = &c->base;
    return SEER_OK;
}
