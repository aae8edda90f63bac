/*
 * tp_bench.c: what `seer bench --tp N` measures of tensor parallelism beside the steps: the
 * time of one all-reduce of a decode step's rows, made as a forward call makes it (each rank
 * from its own thread, the same choice of ordered sum and of transport).
 * Not for: the forward pass (tp_ops.c).
 */
#include "parallel/tp_internal.h"
#include "util/error.h"

#include <stdlib.h>
#include <time.h>

typedef struct {
    float *buf;
    int T, cols, reps;
} ar_bench_job;

static seer_status ar_bench_rank(tp_be *t, int r, void *ctx) {
    const ar_bench_job *j = ctx;
    seer_status s = SEER_OK;
    for (int i = 0; i < j->reps && s == SEER_OK; i++)
        s = seer_tp_all_reduce_rank(t, r, j->buf, j->T, j->cols, SEER_OK);
    if (s == SEER_OK && t->rank[r]->ops->sync)
        s = t->rank[r]->ops->sync(t->rank[r]); /* the rank's device is done with them */
    return s;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

seer_status seer_tp_time_all_reduce(seer_backend *be, int T, int cols, int reps, double *sec) {
    *sec = 0;
    if (!seer_backend_is_tp(be))
        return seer_err(SEER_ERR_UNSUPPORTED, "the all-reduce is timed on a model divided over ranks (--tp)");
    if (T < 1 || cols < 1 || reps < 1 || (size_t)T * (size_t)cols > ((size_t)1 << 28))
        return seer_err(SEER_ERR_INVALID_ARG, "an all-reduce of %d rows of %d, %d times", T, cols, reps);
    tp_be *t = tp_of(be);
    seer_comm *c = NULL;
    SEER_TRY(seer_tp_comm(t, &c));
    const size_t n = (size_t)T * (size_t)cols;
    float *zero = calloc(n, sizeof *zero), *buf = NULL;
    if (!zero)
        return seer_err(SEER_ERR_OOM, "out of memory");
    seer_status s = be->ops->alloc(be, n * sizeof(float), (void **)&buf);
    if (s == SEER_OK)
        s = be->ops->upload(be, buf, zero, n * sizeof(float)); /* zeros stay zeros: no denormals */
    ar_bench_job j = {buf, T, cols, 1};
    if (s == SEER_OK)
        s = seer_tp_each(t, ar_bench_rank, &j); /* warm-up: buffers, the transport's first call */
    const double t0 = now_s();
    j.reps = reps;
    if (s == SEER_OK)
        s = seer_tp_each(t, ar_bench_rank, &j);
    if (s == SEER_OK)
        *sec = (now_s() - t0) / reps;
    be->ops->dealloc(be, buf);
    free(zero);
    return s;
}
