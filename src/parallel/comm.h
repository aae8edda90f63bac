/*
 * comm.h: the collectives of tensor parallelism over the ranks of one group, each rank an
 * instance of one backend on a device of its own, driven by a host thread of its own. A
 * backend makes them with its comm_init op (CPU: src/backend/cpu/cpu_comm.c, in shared
 * memory; CUDA: src/backend/cuda/comm_nccl.cu, NCCL). Every call is collective: each rank
 * makes it, from its own thread, with its own buffers in its own memory, in the same order
 * as the other ranks; the calls are queued in order with the rank's other work, as the ops
 * are. A rank whose earlier work failed still makes the call (with whatever its buffer
 * holds), so that no rank waits for one that left.
 * Not for: deciding what to divide (tp_backend.c) or which thread issues what (tp_worker.c).
 */
#ifndef SEER_PARALLEL_COMM_H
#define SEER_PARALLEL_COMM_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>

struct seer_comm {
    int n; /* ranks */
    /* Rank r's buf [count] becomes the sum over the ranks' bufs. ordered: the sum is taken
     * in rank order, (b0 + b1) + b2 ..., the same bits whatever count is (a batch-invariant
     * forward pass needs it past two ranks); otherwise in the order of the transport's
     * algorithm, which may depend on count. */
    seer_status (*all_reduce)(seer_comm *c, int r, float *buf, size_t count, bool ordered);
    /* Rank r's src [rows][ncols[r]] goes to dst, rank 0's memory [rows][ld], at columns
     * [col0[r], col0[r] + ncols[r]); dst is read on rank 0 only. Rank 0's src may be
     * dst + col0[0] itself with col0[0] = 0 (rows widened in place). col0 and ncols are the
     * same on every rank. */
    seer_status (*gather_cols)(seer_comm *c, int r, float *dst, size_t ld, int rows, const float *src,
                               const int *col0, const int *ncols);
    void (*free)(seer_comm *c);
    /* Ranks in separate processes (CUDA: the one-shot all-reduce's peer buffers, mapped with
     * CUDA IPC; src/parallel/tp_remote_comm.c). peer_bytes: one rank's blob (0: none);
     * peer_export writes this rank's (its buffers' handles); peer_import takes every rank's
     * [n][peer_bytes] and maps the others'; peer_enable turns the path on or drops it, the same
     * way on every rank once every rank has imported (a rank alone on it would wait forever).
     * NULL where the communicator has none. */
    size_t peer_bytes;
    seer_status (*peer_export)(seer_comm *c, void *blob);
    seer_status (*peer_import)(seer_comm *c, const void *all);
    void (*peer_enable)(seer_comm *c, bool on);
};

#endif
