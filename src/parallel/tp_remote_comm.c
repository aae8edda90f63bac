/*
 * tp_remote_comm.c: the collectives of a group whose ranks live in several processes
 * (tp_remote.h). Every rank's thread runs in rank 0's process; each copies its buffer into
 * host memory of its own there (a remote rank's download is a message to its process), the
 * threads meet in the CPU's communicator, which sums in rank order ((b0 + b1) + b2 ..., the
 * bits the in-process CPU group gives), and each copies the sum back. Through rank 0's host,
 * not between the ranks' devices: the reference path, not a fast one (NCCL between processes
 * would replace it on GPUs). A rank whose copy fails still meets the others, with whatever its
 * host buffer holds, so no thread waits for one that left.
 * Not for: ranks that share one process (cpu_comm.c, comm_nccl.cu).
 */
#include "backend/cpu/cpu.h"
#include "parallel/comm.h"
#include "parallel/tp_remote.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    seer_comm base; /* first */
    seer_comm *inner; /* the CPU's, over the host buffers */
    seer_backend *rank[SEER_TP_MAX];
    float *host[SEER_TP_MAX]; /* each rank's, touched by its thread alone */
    size_t cap[SEER_TP_MAX];
} staged_comm;

static seer_status grow(staged_comm *c, int r, size_t count) {
    if (count <= c->cap[r])
        return SEER_OK;
    float *p = realloc(c->host[r], count * sizeof *p);
    if (!p)
        return seer_err(SEER_ERR_OOM, "out of memory for a collective of %zu floats", count);
    c->host[r] = p;
    c->cap[r] = count;
    return SEER_OK;
}

static seer_status st_all_reduce(seer_comm *base, int r, float *buf, size_t count, bool ordered) {
    staged_comm *c = (staged_comm *)base;
    seer_backend *b = c->rank[r];
    /* Out of host memory for the staging buffer is the one failure that leaves the others
     * waiting (a host without the few MB a collective takes). */
    SEER_TRY(grow(c, r, count));
    float *h = c->host[r];
    seer_status s = b->ops->download(b, h, buf, count * sizeof(float));
    if (s != SEER_OK)
        memset(h, 0, count * sizeof(float));
    const seer_status m = c->inner->all_reduce(c->inner, r, h, count, ordered);
    if (s == SEER_OK)
        s = m;
    if (s == SEER_OK)
        s = b->ops->upload(b, buf, h, count * sizeof(float));
    return s;
}

static seer_status st_gather_cols(seer_comm *base, int r, float *dst, size_t ld, int rows, const float *src,
                                  const int *col0, const int *ncols) {
    staged_comm *c = (staged_comm *)base;
    seer_backend *b = c->rank[r];
    const size_t mine = (size_t)rows * (size_t)ncols[r], whole = r == 0 ? (size_t)rows * ld : 0;
    /* rank 0's host buffer holds dst's rows (every column of which some rank's block
     * covers), then its own block; the others' their block */
    SEER_TRY(grow(c, r, whole + mine));
    float *h = c->host[r];
    seer_status s = mine ? b->ops->download(b, h + whole, src, mine * sizeof(float)) : SEER_OK;
    const seer_status m = c->inner->gather_cols(c->inner, r, h, ld, rows, h + whole, col0, ncols);
    if (s == SEER_OK)
        s = m;
    if (s == SEER_OK && r == 0)
        s = b->ops->upload(b, dst, h, whole * sizeof(float));
    return s;
}
static void st_free(seer_comm *base) {
    staged_comm *c = (staged_comm *)base;
    c->inner->free(c->inner);
    for (int r = 0; r < base->n; r++)
        free(c->host[r]);
    free(c);
}

seer_status seer_tp_remote_comm_init(seer_backend *const *ranks, int n, seer_comm **out) {
    *out = NULL;
    staged_comm *c = calloc(1, sizeof *c);
    if (!c)
        return seer_err(SEER_ERR_OOM, "out of memory");
    seer_status s = seer_cpu_comm_init(ranks, n, &c->inner);
    if (s != SEER_OK) {
        free(c);
        return s;
    }
    memcpy(c->rank, ranks, (size_t)n * sizeof *ranks);
    c->base.n = n;
    c->base.all_reduce = st_all_reduce;
    c->base.gather_cols = st_gather_cols;
    c->base.free = st_free;
    *out = &c->base;
    return SEER_OK;
}
