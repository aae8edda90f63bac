/*
 * cpu_comm.c: the collectives of tensor parallelism between CPU ranks, which share the
 * process's memory: sums and copies in place, in rank order. The reference the NCCL
 * communicator is tested against, and what lets the CPU test tensor parallelism on any
 * machine.
 */
#include "backend/cpu/cpu.h"
#include "parallel/comm.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

static seer_status local_all_reduce(seer_comm *c, float *const *bufs, size_t count, bool ordered) {
    /* every sum is taken in rank order, ordered or not */
    for (size_t i = 0; i < count; i++) {
        float s = bufs[0][i];
        for (int r = 1; r < c->n; r++)
            s += bufs[r][i];
        for (int r = 0; r < c->n; r++)
            bufs[r][i] = s;
    }
    return SEER_OK;
}

static seer_status local_gather_cols(seer_comm *c, float *dst, size_t ld, int rows,
                                     const float *const *src, const int *col0, const int *ncols) {
    /* Last row first: rank 0's block may lie in dst itself (logits gathered in place), where
     * a widened row lands at or past its source and only over rows already moved. */
    for (int r = 0; r < c->n; r++)
        for (int t = rows - 1; t >= 0; t--)
            memmove(dst + (size_t)t * ld + col0[r], src[r] + (size_t)t * ncols[r],
                    (size_t)ncols[r] * sizeof(float));
    return SEER_OK;
}

static void local_free(seer_comm *c) { free(c); }

seer_status seer_cpu_comm_init(seer_backend *const *ranks, int n, seer_comm **out) {
    *out = NULL;
    if (n < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "a communicator needs at least one rank (%d)", n);
    seer_comm *c = calloc(1, sizeof *c);
    if (!c)
        return seer_err(SEER_ERR_OOM, "out of memory");
    c->n = n;
    c->all_reduce = local_all_reduce;
    c->gather_cols = local_gather_cols;
    c->free = local_free;
    *out = c;
    return SEER_OK;
}
