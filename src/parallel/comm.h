/*
 * comm.h: the collectives of tensor parallelism over the ranks of one group, each rank an
 * instance of one backend on a device of its own. A backend makes them with its comm_init op
 * (CPU: src/backend/cpu/cpu_comm.c, in shared memory; CUDA: src/backend/cuda/comm_nccl.cu,
 * NCCL). Buffers are each rank's backend memory; the calls are queued in order with the
 * ranks' other work, as the ops are.
 * Not for: deciding what to divide (tp_backend.c).
 */
#ifndef SEER_PARALLEL_COMM_H
#define SEER_PARALLEL_COMM_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>

struct seer_comm {
    int n; /* ranks */
    /* bufs[r] [count] in rank r's memory: each becomes the sum over the ranks. ordered: the
     * sum is taken in rank order, (b0 + b1) + b2 ..., the same bits whatever count is (a
     * batch-invariant forward pass needs it past two ranks); otherwise in the order of the
     * transport's algorithm, which may depend on count. */
    seer_status (*all_reduce)(seer_comm *c, float *const *bufs, size_t count, bool ordered);
    /* src[r] [rows][ncols[r]] in rank r's memory goes to dst, rank 0's memory [rows][ld], at
     * columns [col0[r], col0[r] + ncols[r]). src[0] may be dst + col0[0] itself with
     * col0[0] = 0 (rows widened in place). */
    seer_status (*gather_cols)(seer_comm *c, float *dst, size_t ld, int rows,
                               const float *const *src, const int *col0, const int *ncols);
    void (*free)(seer_comm *c);
};

#endif
