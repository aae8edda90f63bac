/*
 * tp_backend.c: the tensor-parallel backend's instances, memory and recorded calls (tp.h says
 * what it is; tp_internal.h how memory is kept).
 * Not for: weights (tp_weights.c), KV storage (tp_kv.c), the compute ops (tp_ops.c) or the
 * collectives (comm.h).
 */
#include "parallel/tp_internal.h"
#include "parallel/tp_remote.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the allocation table ------------------------------------------------------------- */

/* Index of the allocation holding p, or -1; the caller holds sh->mu. */
static int find_locked(const tp_shared *sh, const void *p) {
    const char *c = p;
    int lo = 0, hi = sh->n_a - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const tp_alloc *a = &sh->a[mid];
        if (c < a->base0)
            hi = mid - 1;
        else if (c >= a->base0 + (a->bytes ? a->bytes : 1))
            lo = mid + 1;
        else
            return mid;
    }
    return -1;
}

void *seer_tp_ptr(tp_be *t, const void *p, int r) {
    if (!p)
        return NULL;
    if (r == 0)
        return (void *)p;
    pthread_mutex_lock(&t->sh->mu);
    int i = find_locked(t->sh, p);
    void *q = i < 0 ? NULL : t->sh->a[i].base[r] + ((const char *)p - t->sh->a[i].base0);
    pthread_mutex_unlock(&t->sh->mu);
    return q;
}

bool seer_tp_lookup(tp_be *t, const void *p, tp_alloc *out) {
    if (!p)
        return false;
    pthread_mutex_lock(&t->sh->mu);
    int i = find_locked(t->sh, p);
    if (i >= 0)
        *out = t->sh->a[i];
    pthread_mutex_unlock(&t->sh->mu);
    return i >= 0;
}

static void set_state(tp_be *t, const void *p, tp_state s) {
    if (!p)
        return;
    pthread_mutex_lock(&t->sh->mu);
    int i = find_locked(t->sh, p);
    if (i >= 0)
        t->sh->a[i].state = s;
    pthread_mutex_unlock(&t->sh->mu);
}

void seer_tp_set_repl(tp_be *t, const void *p) { set_state(t, p, TP_REPL); }
void seer_tp_set_root(tp_be *t, const void *p) { set_state(t, p, t->n > 1 ? TP_ROOT : TP_REPL); }

static void set_shard(tp_be *t, const void *p, int rows, int full_w, const int *col0, const int *w,
                      bool vocab) {
    if (!p)
        return;
    if (col0[0] == 0 && w[0] == full_w) { /* one rank, or a replicated part: whole everywhere */
        seer_tp_set_repl(t, p);
        return;
    }
    pthread_mutex_lock(&t->sh->mu);
    int i = find_locked(t->sh, p);
    if (i >= 0) {
        tp_alloc *a = &t->sh->a[i];
        a->state = TP_SHARD;
        a->off = (size_t)((const char *)p - a->base0) / sizeof(float);
        a->rows = rows;
        a->full_w = full_w;
        memcpy(a->col0, col0, (size_t)t->n * sizeof *col0);
        memcpy(a->w, w, (size_t)t->n * sizeof *w);
        a->vocab = vocab;
    }
    pthread_mutex_unlock(&t->sh->mu);
}

void seer_tp_set_shard(tp_be *t, const void *p, int rows, int full_w, const int *col0, const int *w) {
    set_shard(t, p, rows, full_w, col0, w, false);
}

void seer_tp_set_vocab(tp_be *t, const void *p, int rows, int full_w, const int *col0, const int *w) {
    set_shard(t, p, rows, full_w, col0, w, true);
}

typedef struct {
    seer_comm *c;
    tp_alloc a;
} gather_job;

static seer_status gather_rank(tp_be *t, int r, void *ctx) {
    gather_job *j = ctx;
    const tp_alloc *a = &j->a;
    SEER_TRY(seer_tp_bind(t, r));
    /* in place: rank 0's part widens to whole rows within its own copy (gather_cols allows it) */
    return j->c->gather_cols(j->c, r, (float *)a->base0 + a->off, (size_t)a->full_w, a->rows,
                             (const float *)a->base[r] + a->off, a->col0, a->w);
}

seer_status seer_tp_make_root(tp_be *t, const void *p) {
    gather_job j;
    if (!seer_tp_lookup(t, p, &j.a) || j.a.state != TP_SHARD)
        return SEER_OK;
    if (!j.a.vocab)
        return seer_err(SEER_ERR_INTERNAL, "tensor parallelism: a divided activation read whole");
    SEER_TRY(seer_tp_comm(t, &j.c));
    SEER_TRY(seer_tp_each(t, gather_rank, &j));
    set_state(t, p, TP_ROOT);
    return SEER_OK;
}

seer_status seer_tp_bind(tp_be *t, int r) {
    seer_backend *b = t->rank[r];
    return t->n > 1 && b->ops->make_current ? b->ops->make_current(b) : SEER_OK;
}

seer_status seer_tp_comm(tp_be *t, seer_comm **out) {
    if (!t->comm) {
        const seer_backend_ops *o = t->rank[0]->ops;
        if (t->remote) {
            SEER_TRY(seer_tp_remote_comm_init(t->rank, t->n, &t->comm));
            *out = t->comm;
            return SEER_OK;
        }
        if (!o->comm_init)
            return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend has no communicator for tensor parallelism", o->name);
        SEER_TRY(o->comm_init(t->rank, t->n, &t->comm));
    }
    *out = t->comm;
    return SEER_OK;
}

seer_status seer_tp_all_reduce_rank(tp_be *t, int r, float *p, int T, int cols, seer_status prior) {
    /* Two summands add the same either way; past two the order must not depend on the
     * call's size where rows are to be batch-invariant. */
    const int inv = t->ops.invariant_max_tokens;
    const bool ordered = t->n > 2 && (inv == 0 || T <= inv);
    seer_status s = seer_tp_bind(t, r);
    if (s == SEER_OK)
        s = t->comm->all_reduce(t->comm, r, seer_tp_ptr(t, p, r), (size_t)T * cols, ordered);
    return prior != SEER_OK ? prior : s;
}

/* ---- instances -------------------------------------------------------------------------- */

void seer_tp_batch_clear(tp_be *t) {
    for (int r = 0; r < SEER_TP_MAX; r++) {
        free(t->seq_view_r[r]);
        free(t->views_r[r]);
        free(t->view_idx_r[r]);
        t->seq_view_r[r] = NULL;
        t->views_r[r] = NULL;
        t->view_idx_r[r] = NULL;
    }
    t->ab_key = NULL;
}

static void tp_free(seer_backend *be) {
    if (!be)
        return;
    tp_be *t = tp_of(be);
    seer_tp_workers_free(t->workers); /* idle between calls: nothing of theirs is in flight */
    seer_tp_batch_clear(t);
    if (t->comm)
        t->comm->free(t->comm);
    for (int r = 0; r < t->n; r++) {
        if (t->amax[r]) {
            (void)seer_tp_bind(t, r);
            t->rank[r]->ops->dealloc(t->rank[r], t->amax[r]);
        }
    }
    free(t->amax_rows);
    if (t->owns_ranks)
        for (int r = 0; r < t->n; r++)
            if (t->rank[r]) {
                (void)seer_tp_bind(t, r);
                t->rank[r]->ops->free(t->rank[r]);
            }
    if (t->sh) {
        pthread_mutex_lock(&t->sh->mu);
        const int left = --t->sh->refs;
        pthread_mutex_unlock(&t->sh->mu);
        if (!left) {
            pthread_mutex_destroy(&t->sh->mu);
            free(t->sh->a);
            free(t->sh);
        }
    }
    free(t);
    free(be);
}

static seer_status tp_new(int n, tp_shared *sh, seer_backend *const *ranks, seer_backend **out);

static seer_status tp_exec_clone(seer_backend *be, seer_backend **out) {
    tp_be *t = tp_of(be);
    seer_backend *cl[SEER_TP_MAX] = {0};
    seer_status s = SEER_OK;
    bool own = false;
    for (int r = 0; r < t->n && s == SEER_OK; r++) {
        seer_backend *b = t->rank[r];
        if (b->ops->exec_clone) {
            s = seer_tp_bind(t, r);
            if (s == SEER_OK)
                s = b->ops->exec_clone(b, &cl[r]);
            own = true;
        } else {
            cl[r] = b;
        }
    }
    if (s == SEER_OK) {
        pthread_mutex_lock(&t->sh->mu);
        t->sh->refs++;
        pthread_mutex_unlock(&t->sh->mu);
        s = tp_new(t->n, t->sh, cl, out);
        if (s == SEER_OK) {
            tp_of(*out)->owns_ranks = own;
            return SEER_OK;
        }
        pthread_mutex_lock(&t->sh->mu);
        t->sh->refs--;
        pthread_mutex_unlock(&t->sh->mu);
    }
    for (int r = 0; r < t->n; r++)
        if (cl[r] && cl[r] != t->rank[r])
            cl[r]->ops->free(cl[r]);
    return s;
}

/* ---- memory ----------------------------------------------------------------------------- */

/* Each rank allocates and frees its copies on its own thread: on CUDA a thread that is not
 * capturing waits out the others' captures before an allocation (cuda_common.cuh), which a
 * capture driven from this thread would never end. */
static seer_status alloc_rank(tp_be *t, int r, void *ctx) {
    tp_alloc *a = ctx;
    SEER_TRY(seer_tp_bind(t, r));
    return t->rank[r]->ops->alloc(t->rank[r], a->bytes, (void **)&a->base[r]);
}

static seer_status dealloc_rank(tp_be *t, int r, void *ctx) {
    const tp_alloc *a = ctx;
    if (a->base[r]) {
        (void)seer_tp_bind(t, r);
        t->rank[r]->ops->dealloc(t->rank[r], a->base[r]);
    }
    return SEER_OK;
}

static seer_status tp_alloc_op(seer_backend *be, size_t bytes, void **out) {
    tp_be *t = tp_of(be);
    tp_alloc a = {.bytes = bytes};
    seer_status s = seer_tp_each(t, alloc_rank, &a);
    if (s == SEER_OK) {
        a.base0 = a.base[0];
        tp_shared *sh = t->sh;
        pthread_mutex_lock(&sh->mu);
        if (sh->n_a == sh->cap) {
            int cap = sh->cap ? 2 * sh->cap : 64;
            tp_alloc *na = realloc(sh->a, (size_t)cap * sizeof *na);
            if (!na) {
                s = seer_err(SEER_ERR_OOM, "out of memory");
            } else {
                sh->a = na;
                sh->cap = cap;
            }
        }
        if (s == SEER_OK) {
            int i = sh->n_a;
            while (i > 0 && sh->a[i - 1].base0 > a.base0) {
                sh->a[i] = sh->a[i - 1];
                i--;
            }
            sh->a[i] = a;
            sh->n_a++;
        }
        pthread_mutex_unlock(&sh->mu);
        if (s == SEER_OK) {
            *out = a.base0;
            return SEER_OK;
        }
    }
    (void)seer_tp_each(t, dealloc_rank, &a); /* what the ranks that succeeded hold */
    return s;
}

static void tp_dealloc(seer_backend *be, void *p) {
    tp_be *t = tp_of(be);
    if (!p)
        return;
    tp_shared *sh = t->sh;
    pthread_mutex_lock(&sh->mu);
    int i = find_locked(sh, p);
    tp_alloc a = {0};
    if (i >= 0) {
        a = sh->a[i];
        memmove(&sh->a[i], &sh->a[i + 1], (size_t)(sh->n_a - i - 1) * sizeof *sh->a);
        sh->n_a--;
    }
    pthread_mutex_unlock(&sh->mu);
    if (i >= 0)
        (void)seer_tp_each(t, dealloc_rank, &a);
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} copy_job;

static seer_status upload_rank(tp_be *t, int r, void *ctx) {
    const copy_job *j = ctx;
    SEER_TRY(seer_tp_bind(t, r));
    return t->rank[r]->ops->upload(t->rank[r], seer_tp_ptr(t, j->dst, r), j->src, j->bytes);
}

static seer_status tp_upload(seer_backend *be, void *dst, const void *src, size_t bytes) {
    tp_be *t = tp_of(be);
    tp_alloc a;
    if (!seer_tp_lookup(t, dst, &a))
        return seer_err(SEER_ERR_INVALID_ARG, "upload: the destination is not this backend's memory");
    copy_job j = {dst, src, bytes};
    SEER_TRY(seer_tp_each(t, upload_rank, &j));
    if ((char *)dst == a.base0 && bytes >= a.bytes)
        seer_tp_set_repl(t, dst);
    return SEER_OK;
}

typedef struct {
    float *dst;
    tp_alloc a;
    size_t t0, nt;
} rows_job;

/* rank r's columns of rows [t0, t0 + nt) of a divided activation into dst's whole rows */
static seer_status download_rows_rank(tp_be *t, int r, void *ctx) {
    const rows_job *j = ctx;
    const tp_alloc *a = &j->a;
    SEER_TRY(seer_tp_bind(t, r));
    for (size_t i = 0; i < j->nt; i++) {
        const float *s = (const float *)a->base[r] + a->off + (j->t0 + i) * (size_t)a->w[r];
        SEER_TRY(t->rank[r]->ops->download(t->rank[r], j->dst + i * a->full_w + a->col0[r], s,
                                           (size_t)a->w[r] * sizeof(float)));
    }
    return SEER_OK;
}

static seer_status tp_download(seer_backend *be, void *dst, const void *src, size_t bytes) {
    tp_be *t = tp_of(be);
    tp_alloc a;
    if (!seer_tp_lookup(t, src, &a))
        return seer_err(SEER_ERR_INVALID_ARG, "download: the source is not this backend's memory");
    seer_backend *b0 = t->rank[0];
    const size_t e0 = (size_t)((const char *)src - a.base0) / sizeof(float);
    const size_t n = bytes / sizeof(float);
    /* logits, or what is not whole rows: gathered whole on rank 0 first (one copy back) */
    if (a.state == TP_SHARD &&
        (a.vocab || e0 < a.off || (e0 - a.off) % (size_t)a.full_w || n % (size_t)a.full_w))
        SEER_TRY(seer_tp_make_root(t, src));
    if (!seer_tp_lookup(t, src, &a) || a.state != TP_SHARD) {
        SEER_TRY(seer_tp_bind(t, 0));
        return b0->ops->download(b0, dst, src, bytes);
    }
    /* Whole rows of a divided activation (a q capture): each rank's columns of each row, in
     * place in every rank's copy (the parts are still to be read). */
    rows_job j = {dst, a, (e0 - a.off) / (size_t)a.full_w, n / (size_t)a.full_w};
    return seer_tp_each(t, download_rows_rank, &j);
}

/* ---- graphs --------------------------------------------------------------------------- */

/* Every rank replays, records or runs op by op together (backend.h's held pair), each on its
 * own thread: a forward pass launched on one rank and run again on another would leave the
 * others' collectives unmatched. */
typedef struct {
    const void *key;
    int T_cap;
    int T[SEER_TP_MAX], n_out[SEER_TP_MAX];
    bool flag[SEER_TP_MAX]; /* begin: done; end: redo */
    seer_status s;          /* end: the forward pass's status */
    bool run;               /* launch */
} fwd_job;

static seer_status launch_rank(tp_be *t, int r, void *ctx) {
    const fwd_job *j = ctx;
    SEER_TRY(seer_tp_bind(t, r));
    return t->rank[r]->ops->forward_launch(t->rank[r], j->run);
}

static seer_status launch_all(tp_be *t, bool run) {
    fwd_job j = {.run = run};
    return seer_tp_each(t, launch_rank, &j);
}

static seer_status begin_rank(tp_be *t, int r, void *ctx) {
    fwd_job *j = ctx;
    SEER_TRY(seer_tp_bind(t, r));
    return t->rank[r]->ops->forward_begin_hold(t->rank[r], j->key, j->T_cap, &j->T[r], &j->n_out[r], &j->flag[r]);
}

static seer_status tp_forward_begin(seer_backend *be, const void *key, int T_cap, int *T, int *n_out,
                                    bool *done) {
    tp_be *t = tp_of(be);
    fwd_job j = {.key = key, .T_cap = T_cap};
    for (int r = 0; r < t->n; r++) {
        j.T[r] = *T;
        j.n_out[r] = *n_out;
    }
    seer_status s = seer_tp_each(t, begin_rank, &j);
    bool all = true;
    for (int r = 0; r < t->n && s == SEER_OK; r++) {
        if (j.T[r] != j.T[0] || j.n_out[r] != j.n_out[0])
            s = seer_err(SEER_ERR_INTERNAL, "tensor parallelism: rank %d pads a call to %d rows, rank 0 to %d", r,
                         j.T[r], j.T[0]);
        all &= j.flag[r];
    }
    if (s != SEER_OK) {
        (void)launch_all(t, false);
        return s;
    }
    /* all replay, or none does: a rank that would replay alone runs op by op with the others */
    SEER_TRY(launch_all(t, all));
    *T = j.T[0];
    *n_out = j.n_out[0];
    *done = all;
    return SEER_OK;
}

static seer_status end_rank(tp_be *t, int r, void *ctx) {
    fwd_job *j = ctx;
    SEER_TRY(seer_tp_bind(t, r));
    return t->rank[r]->ops->forward_end_hold(t->rank[r], j->s, &j->flag[r]);
}

static seer_status tp_forward_end(seer_backend *be, seer_status s, bool *redo) {
    tp_be *t = tp_of(be);
    fwd_job j = {.s = s};
    const seer_status first = seer_tp_each(t, end_rank, &j);
    bool any = false;
    for (int r = 0; r < t->n; r++)
        any |= j.flag[r];
    seer_status l = launch_all(t, first == SEER_OK && !any);
    *redo = any && first == SEER_OK;
    return first != SEER_OK ? first : l;
}

/* ---- the rest ---------------------------------------------------------------------------- */

bool seer_backend_is_tp(const seer_backend *be) { return be && be->ops && be->ops->free == tp_free; }

static seer_status tp_copy_bandwidth(seer_backend *be, double *bps) {
    tp_be *t = tp_of(be);
    SEER_TRY(seer_tp_bind(t, 0));
    return t->rank[0]->ops->copy_bandwidth(t->rank[0], bps);
}

/* Host memory of rank 0, which every download of a whole activation goes through. */
static seer_status tp_host_alloc(seer_backend *be, size_t bytes, void **out) {
    tp_be *t = tp_of(be);
    SEER_TRY(seer_tp_bind(t, 0));
    return t->rank[0]->ops->host_alloc(t->rank[0], bytes, out);
}

static void tp_host_free(seer_backend *be, void *p) {
    tp_be *t = tp_of(be);
    t->rank[0]->ops->host_free(t->rank[0], p);
}

static seer_status sync_rank(tp_be *t, int r, void *ctx) {
    (void)ctx;
    SEER_TRY(seer_tp_bind(t, r));
    return t->rank[r]->ops->sync(t->rank[r]);
}

static seer_status tp_sync(seer_backend *be) { return seer_tp_each(tp_of(be), sync_rank, NULL); }

static seer_status tp_new(int n, tp_shared *sh, seer_backend *const *ranks, seer_backend **out) {
    *out = NULL;
    seer_backend *be = calloc(1, sizeof *be);
    tp_be *t = calloc(1, sizeof *t);
    if (!be || !t) {
        free(be);
        free(t);
        return seer_err(SEER_ERR_OOM, "out of memory");
    }
    t->n = n;
    t->sh = sh;
    t->owns_ranks = true;
    memcpy(t->rank, ranks, (size_t)n * sizeof *ranks);
    const seer_backend_ops *in = ranks[0]->ops;
    for (int r = 1; r < n; r++)
        t->remote |= seer_backend_is_remote(ranks[r]);
    if (t->remote) { /* what every rank can run: rank 0's ops less those a remote rank lacks */
        t->in_ops = *in;
        seer_tp_remote_mask_ops(&t->in_ops);
        in = &t->in_ops;
    }
    seer_backend_ops *o = &t->ops;
    snprintf(t->name, sizeof t->name, "%s x%d", in->name, n);
    o->name = t->name;
    o->invariant_max_tokens = in->invariant_max_tokens;
    o->prompt_cuts_free = in->prompt_cuts_free;
    o->kv_elem_bytes = in->kv_elem_bytes;
    o->free = tp_free;
    o->exec_clone = tp_exec_clone;
    o->alloc = tp_alloc_op;
    o->dealloc = tp_dealloc;
    o->upload = tp_upload;
    o->download = tp_download;
    if (in->host_alloc && in->host_free) {
        o->host_alloc = tp_host_alloc;
        o->host_free = tp_host_free;
    }
    if (in->forward_begin_hold && in->forward_end_hold && in->forward_launch) {
        o->forward_begin = tp_forward_begin;
        o->forward_end = tp_forward_end;
    }
    o->copy_bandwidth = in->copy_bandwidth ? tp_copy_bandwidth : NULL;
    o->sync = in->sync ? tp_sync : NULL;
    seer_tp_fill_weight_ops(o, in);
    seer_tp_fill_kv_ops(o, in);
    seer_tp_fill_compute_ops(o, in, n);
    seer_status s = seer_tp_workers_init(t, &t->workers);
    if (s != SEER_OK) {
        free(t);
        free(be);
        return s;
    }
    be->ops = o;
    be->impl = t;
    *out = be;
    return SEER_OK;
}

seer_status seer_backend_tp_init(seer_backend *const *ranks, int n, seer_backend **out) {
    *out = NULL;
    seer_status s = SEER_OK;
    if (n < 1 || n > SEER_TP_MAX)
        s = seer_err(SEER_ERR_INVALID_ARG, "tensor parallelism over %d ranks (1 to %d)", n, SEER_TP_MAX);
    for (int r = 0; r < n && s == SEER_OK; r++)
        if (!ranks[r] || (ranks[r]->ops != ranks[0]->ops && !(r > 0 && seer_backend_is_remote(ranks[r]))))
            s = seer_err(SEER_ERR_INVALID_ARG, "tensor parallelism: the ranks are not instances of one backend");
    tp_shared *sh = s == SEER_OK ? calloc(1, sizeof *sh) : NULL;
    if (s == SEER_OK && !sh)
        s = seer_err(SEER_ERR_OOM, "out of memory");
    if (s == SEER_OK && pthread_mutex_init(&sh->mu, NULL) != 0) {
        free(sh);
        sh = NULL;
        s = seer_err(SEER_ERR_OOM, "cannot create a mutex");
    }
    if (s == SEER_OK) {
        sh->refs = 1;
        s = tp_new(n, sh, ranks, out);
        if (s == SEER_OK)
            return SEER_OK;
        pthread_mutex_destroy(&sh->mu);
        free(sh);
    }
    for (int r = 0; r < n && r < SEER_TP_MAX; r++)
        if (ranks[r])
            ranks[r]->ops->free(ranks[r]);
    return s;
}
