/*
 * graph.cu: forward calls recorded as CUDA graphs and replayed. A forward call of T tokens
 * (T <= SEER_CUDA_INVARIANT_MAX_T: decode, draft and verification steps) is issued at the
 * sizes of its bucket: batch_begin pads the index arrays (padding rows write no KV and
 * gather row 0), the model code calls every op at the padded sizes, and since every op of
 * such a call gives a row results that do not depend on the other rows, the real rows come
 * out bit-identical to a call at the batch's own sizes. Everything that changes from batch to
 * batch lives in device memory that batch_begin writes outside the graph (the index arrays
 * at offsets fixed by the bucket, attention's descriptor with its own header), so a
 * recording stays valid for every later batch of the same key: the caller's buffers, the two
 * bucket sizes, attention's grid buckets, whether attention splits, which prefill kernel
 * runs and whether the combine
 * kernel runs.
 *
 * Policy: a key's first call runs op by op at the padded sizes (buffers grow to what the
 * shape needs), its second is captured (then launched), later ones replay. Any free of device
 * memory (a buffer growing, a context freed) bumps the allocator's generation and retires
 * every recording made before it. A capture that fails is dropped and the call runs again op
 * by op at the same padded sizes (forward_end's redo), so that its rows have the bits a
 * replay would give them; the key's next call records again, up to SEER_CUDA_GRAPH_TRIES
 * failures. SEER_CUDA_GRAPHS=0 turns recording off (calls then run at their own sizes).
 * Not for: prefill (larger calls run op by op at their own sizes), or calls that download
 * mid-forward (q capture for the drafters: the model code does not ask then).
 */
#include "backend/cuda/cuda_common.cuh"

#include <pthread.h>

#include <string.h>

int seer_cuda_bucket(int n) {
    if (n <= 0)
        return 0;
    if (n > SEER_CUDA_INVARIANT_MAX_T)
        return n;
    if (n <= 8) { /* 1, 2, 4, 8 */
        int b = 1;
        while (b < n)
            b *= 2;
        return b;
    }
    /* multiples of 8, the matmul's n8 token tiles: a coarser bucket would pay for its padding
     * rows in every matmul (a verification of 14 x 5 tokens padded to 96 cost 27 % more in
     * the matmuls than at 72) */
    return (n + 7) / 8 * 8;
}

static void entry_drop(seer_cuda_graph *e) {
    if (e->exec && cudaGraphExecDestroy(e->exec) != cudaSuccess)
        (void)cudaGetLastError();
    memset(e, 0, sizeof *e);
}

void seer_cuda_graphs_free(seer_cuda *c) {
    for (int i = 0; i < SEER_CUDA_GRAPHS_MAX; i++)
        entry_drop(&c->graph[i]);
}

/* The entry for the current call's key, or a fresh one (evicting the least recently used). */
static int entry_find(seer_cuda *c, const void *key) {
    const seer_cuda_fw *f = &c->fw;
    const seer_cuda_attn *a = &c->att;
    int lru = -1;
    for (int i = 0; i < SEER_CUDA_GRAPHS_MAX; i++) {
        const seer_cuda_graph *e = &c->graph[i];
        if (e->key == key && e->T_pad == f->T_pad && e->n_out_pad == f->n_out_pad &&
            e->att_grid == a->grid_bucket && e->att_grid_dec == a->grid_dec_bucket &&
            e->att_grid_pre == a->grid_pre_bucket && e->att_split == a->split &&
            e->att_combine == a->need_combine && e->att_pre_fixed == a->pre_fixed)
            return i;
        const seer_cuda_graph *l = lru >= 0 ? &c->graph[lru] : NULL;
        if (!l || (l->key && (!e->key || e->last_use < l->last_use)))
            lru = i; /* an empty entry, else the least recently used */
    }
    seer_cuda_graph *e = &c->graph[lru];
    entry_drop(e);
    e->key = key;
    e->T_pad = f->T_pad;
    e->n_out_pad = f->n_out_pad;
    e->att_grid = a->grid_bucket;
    e->att_grid_dec = a->grid_dec_bucket;
    e->att_grid_pre = a->grid_pre_bucket;
    e->att_split = a->split;
    e->att_combine = a->need_combine;
    e->att_pre_fixed = a->pre_fixed;
    e->gen = c->gen;
    return lru;
}

/* The capture locks (cuda_common.cuh), one per device: readers are captures, writers the
 * unsafe calls. glibc's default rwlock lets a reader in while a writer waits, which the ranks
 * of a divided model need: each begins its capture while another thread may wait to free. */
#define CAPTURE_LOCKS 64
static pthread_rwlock_t capture_lock[CAPTURE_LOCKS];
static pthread_once_t capture_once = PTHREAD_ONCE_INIT;
static __thread int captures_held[CAPTURE_LOCKS]; /* this thread's captures under way */
static __thread int unsafe_held[CAPTURE_LOCKS];   /* its guards (nested: the outermost locks) */

static void capture_locks_init(void) {
    for (int i = 0; i < CAPTURE_LOCKS; i++)
        pthread_rwlock_init(&capture_lock[i], NULL);
}

static int lock_of(int device) {
    pthread_once(&capture_once, capture_locks_init);
    return (device < 0 ? -device : device) % CAPTURE_LOCKS;
}

void seer_cuda_capture_enter(int device) {
    const int i = lock_of(device);
    if (captures_held[i]++ == 0)
        pthread_rwlock_rdlock(&capture_lock[i]);
}

void seer_cuda_capture_leave(int device) {
    const int i = lock_of(device);
    if (--captures_held[i] == 0)
        pthread_rwlock_unlock(&capture_lock[i]);
}

void seer_cuda_unsafe_guard::take(int device) {
    const int i = lock_of(device);
    for (int k = 0; k < n; k++)
        if (idx[k] == i)
            return; /* two ranks' devices on one lock */
    const bool lock = captures_held[i] == 0 && unsafe_held[i] == 0;
    unsafe_held[i]++;
    if (lock)
        pthread_rwlock_wrlock(&capture_lock[i]);
    idx[n] = i;
    locked[n++] = lock;
}

seer_cuda_unsafe_guard::seer_cuda_unsafe_guard(int device) : n(0) { take(device); }

seer_cuda_unsafe_guard::seer_cuda_unsafe_guard(const int *devices, int count) : n(0) {
    /* in ascending order, as every guard of several takes them: no two wait on each other */
    int order[SEER_TP_MAX];
    const int m = count < SEER_TP_MAX ? count : SEER_TP_MAX;
    for (int k = 0; k < m; k++) {
        int j = k;
        while (j > 0 && lock_of(order[j - 1]) > lock_of(devices[k])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = devices[k];
    }
    for (int k = 0; k < m; k++)
        take(order[k]);
}

seer_cuda_unsafe_guard::~seer_cuda_unsafe_guard() {
    for (int k = n - 1; k >= 0; k--) {
        unsafe_held[idx[k]]--;
        if (locked[k])
            pthread_rwlock_unlock(&capture_lock[idx[k]]);
    }
}

/* forward_begin; hold: a replay is not launched but held for forward_launch. */
static seer_status forward_begin(seer_backend *be, const void *key, int T_cap, int *T, int *n_out,
                                 bool *done, bool hold) {
    seer_cuda *c = seer_cuda_of(be);
    seer_cuda_fw *f = &c->fw;
    *done = false;
    if (f->capturing) { /* a capture whose forward_end never came: dropped */
        cudaGraph_t g = NULL;
        if (cudaStreamEndCapture(c->stream, &g) == cudaSuccess && g)
            (void)cudaGraphDestroy(g);
        (void)cudaGetLastError();
        seer_cuda_capture_leave(c->device);
    }
    f->padded = f->capturing = false;
    f->entry = f->held = -1;
    if (!c->graphs || !c->att.valid || f->T != *T || f->n_out != *n_out ||
        f->T > SEER_CUDA_INVARIANT_MAX_T || f->T_pad > T_cap || f->n_out_pad > T_cap) {
        c->n_eager++;
        return SEER_OK;
    }
    const int i = entry_find(c, key);
    seer_cuda_graph *e = &c->graph[i];
    e->last_use = ++c->use_clock;
    if (e->gen != c->gen) { /* its pointers may be stale: start over at this generation */
        if (e->exec && cudaGraphExecDestroy(e->exec) != cudaSuccess)
            (void)cudaGetLastError();
        e->exec = NULL;
        e->warm = false;
        e->failed = 0;
        e->gen = c->gen;
    }
    if (e->exec) {
        *done = true;
        if (hold) { /* dropped, the call runs op by op at the padded sizes */
            f->held = f->entry = i;
            f->held_replay = f->padded = true;
            *T = f->T_pad;
            *n_out = f->n_out_pad;
            return SEER_OK;
        }
        c->n_replayed++;
        CUDA_TRY(cudaGraphLaunch(e->exec, c->stream));
        return SEER_OK;
    }
    f->padded = true;
    f->entry = i;
    *T = f->T_pad;
    *n_out = f->n_out_pad;
    if (e->warm && e->failed < SEER_CUDA_GRAPH_TRIES) {
        seer_cuda_capture_enter(c->device);
        cudaError_t r = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
        if (r != cudaSuccess) {
            seer_cuda_capture_leave(c->device);
            (void)cudaGetLastError();
            e->failed++; /* this call runs op by op, padded */
        } else {
            f->capturing = true;
        }
    }
    return SEER_OK;
}

seer_status seer_cuda_forward_begin(seer_backend *be, const void *key, int T_cap, int *T,
                                    int *n_out, bool *done) {
    return forward_begin(be, key, T_cap, T, n_out, done, false);
}

seer_status seer_cuda_forward_begin_hold(seer_backend *be, const void *key, int T_cap, int *T,
                                         int *n_out, bool *done) {
    return forward_begin(be, key, T_cap, T, n_out, done, true);
}

/* forward_end; launch: false keeps a recording that succeeded for forward_launch. */
static seer_status forward_end(seer_backend *be, seer_status s, bool *redo, bool launch) {
    seer_cuda *c = seer_cuda_of(be);
    seer_cuda_fw *f = &c->fw;
    *redo = false;
    f->held = -1;
    const int i = f->entry;
    seer_cuda_graph *e = i >= 0 ? &c->graph[i] : NULL;
    if (!f->capturing) {
        if (e && s == SEER_OK) {
            e->warm = true;
            e->gen = c->gen; /* the warm-up may have grown buffers: those pointers are current */
        }
        if (f->padded)
            c->n_eager++;
        f->padded = false;
        f->entry = -1;
        return s;
    }
    f->capturing = false;
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t r = cudaStreamEndCapture(c->stream, &g);
    seer_cuda_capture_leave(c->device);
    if (r == cudaSuccess && s == SEER_OK && g)
        r = cudaGraphInstantiate(&exec, g, 0);
    if (g && cudaGraphDestroy(g) != cudaSuccess)
        (void)cudaGetLastError();
    if (r != cudaSuccess || s != SEER_OK || !exec || e->gen != c->gen) {
        /* Nothing of the call ran. The caller issues it again op by op at the same padded
         * sizes (the same bits as a replay, whatever made the capture fail), then calls
         * forward_end again. */
        (void)cudaGetLastError();
        if (exec && cudaGraphExecDestroy(exec) != cudaSuccess)
            (void)cudaGetLastError();
        e->failed++;
        c->n_redone++;
        /* Work the ops share within a call (the RoPE table) was queued into the recording
         * and never ran: a new epoch makes the ops queue it again. */
        c->batch_epoch++;
        *redo = true;
        return SEER_OK;
    }
    e->exec = exec;
    c->n_captured++;
    if (!launch) {
        f->held = i; /* padded and entry stay: a redo runs op by op as after a failed capture */
        f->held_replay = false;
        return SEER_OK;
    }
    f->padded = false;
    f->entry = -1;
    CUDA_TRY(cudaGraphLaunch(exec, c->stream));
    return SEER_OK;
}

seer_status seer_cuda_forward_end(seer_backend *be, seer_status s, bool *redo) {
    return forward_end(be, s, redo, true);
}

/* Ranks of a tensor-parallel group replay, record or run op by op together: each holds its
 * replay (forward_begin_hold) or its finished recording (forward_end_hold) instead of
 * launching it, and only when every rank has one do they all launch. A rank whose launch is
 * dropped (run false) issues the ops op by op with the others, its recording kept for the
 * key's next call; a forward pass launched on one rank and run again on another would leave
 * the others' collectives unmatched. */
seer_status seer_cuda_forward_end_hold(seer_backend *be, seer_status s, bool *redo) {
    return forward_end(be, s, redo, false);
}

seer_status seer_cuda_forward_launch(seer_backend *be, bool run) {
    seer_cuda *c = seer_cuda_of(be);
    seer_cuda_fw *f = &c->fw;
    const int i = f->held;
    f->held = -1;
    if (i < 0)
        return SEER_OK;
    if (!run) {
        /* the ops run op by op at the padded sizes (padded and entry as set); what a
         * recording would have queued never ran, as after a failed capture */
        if (!f->held_replay)
            c->n_redone++;
        c->batch_epoch++;
        return SEER_OK;
    }
    f->padded = false;
    f->entry = -1;
    if (f->held_replay)
        c->n_replayed++;
    CUDA_TRY(cudaGraphLaunch(c->graph[i].exec, c->stream));
    return SEER_OK;
}

/* ---- gather_rows in a padded call ----------------------------------------------------- */

__global__ void gather_rows_fw_kernel(float *y, const float *x, const int32_t *rows, int D) {
    const float *src = x + (size_t)rows[blockIdx.x] * D;
    float *dst = y + (size_t)blockIdx.x * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        dst[i] = src[i];
}

seer_status seer_cuda_gather_rows_fw(seer_backend *be, float *y, const float *x,
                                     const int32_t *rows, int n_rows, int D) {
    seer_cuda *c = seer_cuda_of(be);
    const seer_cuda_idx *e = &c->idx[SEER_IDX_OUT_ROWS];
    /* The op's own path reads every entry of rows on the host, which a padded call's host
     * array does not have. batch_begin checked the real entries (< T); the padding is 0. */
    if (!c->fw.padded || n_rows <= 0 || D <= 0 || rows != e->host || n_rows > e->n_pad ||
        memcmp(rows, e->staged, (size_t)e->n * sizeof *rows))
        return seer_cuda_gather_rows(be, y, x, rows, n_rows, D);
    const size_t out_bytes = (size_t)n_rows * D * sizeof(float);
    const char *y0 = (const char *)y, *y1 = y0 + out_bytes;
    const char *x0 = (const char *)x, *x1 = x0 + (size_t)c->fw.T_pad * D * sizeof(float);
    const bool overlap = y0 < x1 && x0 < y1;
    float *dst = y;
    if (overlap)
        SEER_TRY(seer_cuda_gather_scratch(c, out_bytes, &dst));
    gather_rows_fw_kernel<<<(unsigned)n_rows, 128, 0, c->stream>>>(dst, x, e->dev, D);
    LAUNCH_TRY("gather_rows_fw_kernel");
    if (overlap)
        CUDA_TRY(cudaMemcpyAsync(y, dst, out_bytes, cudaMemcpyDeviceToDevice, c->stream));
    return SEER_OK;
}
