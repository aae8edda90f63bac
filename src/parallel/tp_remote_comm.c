/*
 * tp_remote_comm.c: the collectives of a group whose ranks live in several processes
 * (tp_remote.h). Every rank's thread runs in rank 0's process; each copies its buffer into
 * host memory of its own there (a remote rank's download is a message to its process), the
 * threads meet in the CPU's communicator, which sums in rank order ((b0 + b1) + b2 ..., the
 * bits the in-process CPU group gives), and each copies the sum back. Through rank 0's host,
 * not between the ranks' devices: the reference path, not a fast one (NCCL between processes
 * would replace it on GPUs). A rank whose copy fails still meets the others, with whatever its
 * host buffer holds, and one that cannot grow its host buffer fails the collective on every
 * rank before any enters it, so no thread waits for one that left.
 * Where rank 0's backend can make one rank of a group per process (CUDA: NCCL's
 * ncclCommInitRank from an id rank 0 sends), each process holds its rank instead and a remote
 * rank's collective is a message that its process runs on its own stream, posted like the
 * compute ops around it (its failure comes back at the rank's next waited op).
 * Not for: ranks that share one process (cpu_comm.c, comm_nccl.cu).
 */
#include "backend/cpu/cpu.h"
#include "parallel/comm.h"
#include "parallel/tp_remote.h"
#include "util/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    seer_comm base; /* first */
    seer_comm *inner; /* the CPU's, over the host buffers */
    seer_backend *rank[SEER_TP_MAX];
    float *host[SEER_TP_MAX]; /* each rank's, touched by its thread alone */
    size_t cap[SEER_TP_MAX];  /* ... its floats, written by its thread alone */
    /* the ranks' meeting when a buffer must grow (stage) */
    pthread_mutex_t mu;
    pthread_cond_t met;
    int arrived, failed, failed_out; /* failed: the lowest rank that could not grow (-1: none) */
    unsigned long round;
    size_t held[SEER_TP_MAX]; /* cap as of the last meeting: the same on every thread */
} staged_comm;

/* Returns once every rank has called it, with the lowest rank whose ok was false (-1: none).
 * The last to come takes every rank's cap as held. */
static int meet(staged_comm *c, int r, bool ok) {
    pthread_mutex_lock(&c->mu);
    const unsigned long round = c->round;
    if (!ok && (c->failed < 0 || r < c->failed))
        c->failed = r;
    int f;
    if (++c->arrived == c->base.n) {
        memcpy(c->held, c->cap, sizeof c->held);
        f = c->failed_out = c->failed;
        c->failed = -1;
        c->arrived = 0;
        c->round++;
        pthread_cond_broadcast(&c->met);
    } else {
        while (c->round == round)
            pthread_cond_wait(&c->met, &c->mu);
        f = c->failed_out; /* not overwritten before this rank comes to the next meeting */
    }
    pthread_mutex_unlock(&c->mu);
    return f;
}

/* Every rank's host buffer made to hold need[k] floats before a collective (need is the same
 * on every rank's thread). Where one must grow, every rank grows its own and they meet: if
 * one could not, all of them fail (that one with its reason, the others naming it) and none
 * enters the collective, which would otherwise wait forever for the one that left. */
static seer_status stage(staged_comm *c, int r, const size_t *need) {
    bool grows = false;
    for (int k = 0; k < c->base.n; k++)
        grows |= need[k] > c->held[k];
    if (!grows)
        return SEER_OK;
    seer_status s = SEER_OK;
    if (need[r] > c->cap[r]) {
        float *p = need[r] <= SIZE_MAX / sizeof *p ? realloc(c->host[r], need[r] * sizeof *p) : NULL;
        if (p) {
            c->host[r] = p;
            c->cap[r] = need[r];
        } else {
            s = seer_err(SEER_ERR_OOM, "out of host memory to stage a collective of %zu floats", need[r]);
        }
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s", s != SEER_OK ? seer_last_error() : "");
    const int f = meet(c, r, s == SEER_OK);
    if (s != SEER_OK)
        return seer_err(s, "%s", msg);
    if (f >= 0)
        return seer_err(SEER_ERR_OOM, "a collective did not run: rank %d had no host memory to stage it", f);
    return SEER_OK;
}

static seer_status st_all_reduce(seer_comm *base, int r, float *buf, size_t count, bool ordered) {
    staged_comm *c = (staged_comm *)base;
    seer_backend *b = c->rank[r];
    size_t need[SEER_TP_MAX];
    for (int k = 0; k < base->n; k++)
        need[k] = count;
    SEER_TRY(stage(c, r, need));
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
    /* rank 0's host buffer holds dst's rows (every column of which some rank's block
     * covers), then its own block; the others' their block */
    size_t need[SEER_TP_MAX];
    const size_t whole = ld <= SIZE_MAX / 2 / ((size_t)rows + 1) ? (size_t)rows * ld : SIZE_MAX / 2;
    for (int k = 0; k < base->n; k++)
        need[k] = (size_t)rows * (size_t)ncols[k] + (k == 0 ? whole : 0);
    SEER_TRY(stage(c, r, need));
    const size_t mine = (size_t)rows * (size_t)ncols[r], off = r == 0 ? whole : 0;
    float *h = c->host[r];
    seer_status s = mine ? b->ops->download(b, h + off, src, mine * sizeof(float)) : SEER_OK;
    const seer_status m = c->inner->gather_cols(c->inner, r, h, ld, rows, h + off, col0, ncols);
    if (s == SEER_OK)
        s = m;
    if (s == SEER_OK && r == 0)
        s = b->ops->upload(b, dst, h, whole * sizeof(float));
    return s;
}

static void st_free(seer_comm *base) {
    staged_comm *c = (staged_comm *)base;
    pthread_cond_destroy(&c->met);
    pthread_mutex_destroy(&c->mu);
    c->inner->free(c->inner);
    for (int r = 0; r < base->n; r++)
        free(c->host[r]);
    free(c);
}

/* ---- one rank of one group per process ------------------------------------------------------ */

typedef struct {
    seer_comm base; /* first */
    seer_comm *local; /* rank 0's own rank of the group */
    seer_backend *rank[SEER_TP_MAX];
} proc_comm;

static seer_status pc_all_reduce(seer_comm *base, int r, float *buf, size_t count, bool ordered) {
    proc_comm *c = (proc_comm *)base;
    if (r == 0)
        return c->local->all_reduce(c->local, 0, buf, count, ordered);
    tp_wbuf w = {0};
    tp_w_rptr(&w, buf);
    seer_tp_w_int(&w, (int64_t)count);
    seer_tp_w_int(&w, ordered);
    return seer_tp_remote_post(c->rank[r], TP_OP_ALLREDUCE, &w);
}

static seer_status pc_gather_cols(seer_comm *base, int r, float *dst, size_t ld, int rows, const float *src,
                                  const int *col0, const int *ncols) {
    proc_comm *c = (proc_comm *)base;
    if (r == 0)
        return c->local->gather_cols(c->local, 0, dst, ld, rows, src, col0, ncols);
    tp_wbuf w = {0};
    tp_w_rptr(&w, src);
    seer_tp_w_int(&w, (int64_t)ld);
    seer_tp_w_int(&w, rows);
    tp_w_arr(&w, col0, (size_t)base->n, sizeof *col0);
    tp_w_arr(&w, ncols, (size_t)base->n, sizeof *ncols);
    return seer_tp_remote_post(c->rank[r], TP_OP_GATHER, &w);
}

/* Every rank's process frees its rank at the same time, as it made it: NCCL's
 * ncclCommDestroy of one rank waits for the others' (the buffers they share through its
 * proxy), so the remote ranks' frees are posted, not waited for, before rank 0's own; a free
 * waited for (as it once was) waited out the link's time-out. */
static void pc_free(seer_comm *base) {
    proc_comm *c = (proc_comm *)base;
    for (int r = 1; r < base->n; r++) {
        tp_wbuf w = {0};
        (void)seer_tp_remote_post(c->rank[r], TP_OP_COMM_FREE, &w);
    }
    if (c->local)
        c->local->free(c->local);
    free(c);
}

typedef struct {
    proc_comm *c;
    int r;
    const char *id;
    seer_status s;
    char msg[512];
} init_arg;

static void *init_main(void *p) {
    init_arg *a = p;
    tp_wbuf w = {0};
    seer_tp_w_bytes(&w, a->id, SEER_COMM_ID_BYTES);
    seer_tp_w_int(&w, a->c->base.n);
    seer_tp_w_int(&w, a->r);
    tp_msg m;
    void *pl = NULL;
    a->s = seer_tp_remote_rpc(a->c->rank[a->r], TP_OP_COMM_INIT, &w, "", &m, &pl);
    free(pl);
    if (a->s != SEER_OK)
        snprintf(a->msg, sizeof a->msg, "%s", seer_last_error());
    return NULL;
}

/* A message to rank r's communicator; fields w, answer sig (the answer's payload into *pl). */
static seer_status peer_rpc(proc_comm *c, int r, uint32_t op, tp_wbuf *w, const char *sig, tp_msg *m, void **pl) {
    return seer_tp_remote_rpc(c->rank[r], op, w, sig, m, pl);
}

/* The one-shot all-reduce's peer buffers between the processes (CUDA IPC): every rank
 * exports its handles, every rank maps the others', and only if every rank could is the path
 * turned on, on every rank alike; otherwise NCCL takes every message. A failure here turns
 * the path off; it fails nothing else (a dead link fails the next op). */
static void peer_setup(proc_comm *c) {
    seer_comm *l = c->local;
    const int n = c->base.n;
    if (!l->peer_bytes || !l->peer_export)
        return;
    const size_t pb = l->peer_bytes;
    char *all = calloc((size_t)n, pb);
    bool ok = all && l->peer_export(l, all) == SEER_OK, exported = ok;
    for (int r = 1; r < n && ok; r++) {
        tp_wbuf w = {0};
        tp_msg m;
        void *pl = NULL;
        ok = peer_rpc(c, r, TP_OP_PEER_EXPORT, &w, "b", &m, &pl) == SEER_OK && m.f[0].len == pb;
        if (ok)
            memcpy(all + (size_t)r * pb, m.f[0].data, pb);
        free(pl);
    }
    for (int r = 1; r < n && ok; r++) {
        tp_wbuf w = {0};
        seer_tp_w_bytes(&w, all, (size_t)n * pb);
        tp_msg m;
        void *pl = NULL;
        ok = peer_rpc(c, r, TP_OP_PEER_IMPORT, &w, "", &m, &pl) == SEER_OK;
        free(pl);
    }
    ok = ok && l->peer_import(l, all) == SEER_OK;
    for (int r = 1; r < n; r++) { /* every rank alike, also those whose export went wrong */
        tp_wbuf w = {0};
        seer_tp_w_int(&w, ok);
        tp_msg m;
        void *pl = NULL;
        if (peer_rpc(c, r, TP_OP_PEER_ENABLE, &w, "", &m, &pl) != SEER_OK)
            ok = false; /* too late for the others to agree: the link is dead anyway */
        free(pl);
    }
    if (exported)
        l->peer_enable(l, ok);
    free(all);
}

/* Every rank's process makes its rank of one group at once (the call is collective): the
 * remote ones each from a thread of their own, rank 0 on the caller's. */
static seer_status proc_comm_init(seer_backend *const *ranks, int n, seer_comm **out) {
    seer_backend *b0 = ranks[0];
    char id[SEER_COMM_ID_BYTES];
    SEER_TRY(b0->ops->comm_unique_id(b0, id));
    proc_comm *c = calloc(1, sizeof *c);
    if (!c)
        return seer_err(SEER_ERR_OOM, "out of memory");
    c->base.n = n;
    c->base.all_reduce = pc_all_reduce;
    c->base.gather_cols = pc_gather_cols;
    c->base.free = pc_free;
    memcpy(c->rank, ranks, (size_t)n * sizeof *ranks);
    init_arg a[SEER_TP_MAX];
    pthread_t th[SEER_TP_MAX];
    bool started[SEER_TP_MAX] = {0};
    for (int r = 1; r < n; r++) {
        a[r] = (init_arg){.c = c, .r = r, .id = id};
        started[r] = pthread_create(&th[r], NULL, init_main, &a[r]) == 0;
        if (!started[r])
            a[r].s = seer_err(SEER_ERR_OOM, "cannot start a thread for rank %d's communicator", r);
    }
    /* a rank that could not be asked leaves rank 0's init waiting on NCCL's own time-out */
    seer_status s = b0->ops->comm_init_rank(b0, n, 0, id, &c->local);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", s != SEER_OK ? seer_last_error() : "");
    for (int r = 1; r < n; r++) {
        if (started[r])
            pthread_join(th[r], NULL);
        if (s == SEER_OK && a[r].s != SEER_OK) {
            s = a[r].s;
            snprintf(msg, sizeof msg, "%s", a[r].msg);
        }
    }
    if (s != SEER_OK) {
        pc_free(&c->base);
        return seer_err(s, "%s", msg);
    }
    peer_setup(c);
    *out = &c->base;
    return SEER_OK;
}

seer_status seer_tp_remote_comm_init(seer_backend *const *ranks, int n, seer_comm **out) {
    *out = NULL;
    if (ranks[0]->ops->comm_init_rank && ranks[0]->ops->comm_unique_id)
        return proc_comm_init(ranks, n, out);
    staged_comm *c = calloc(1, sizeof *c);
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
    c->failed = -1;
    seer_status s = seer_cpu_comm_init(ranks, n, &c->inner);
    if (s != SEER_OK) {
        pthread_cond_destroy(&c->met);
        pthread_mutex_destroy(&c->mu);
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
