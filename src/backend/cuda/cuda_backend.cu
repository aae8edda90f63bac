/*
 * cuda_backend.cu: the CUDA backend's op table, its start-up and teardown, the accounting
 * allocator that every device byte goes through, host<->device copies and the lookup of a
 * forward call's uploaded index arrays.
 * Not for: the ops themselves (weights.cu, embed.cu, norm.cu, rope.cu, matmul.cu,
 * elementwise.cu, kv.cu, attention*.cu).
 *
 * Instances: seer_backend_cuda_init makes the model's (weights go through it); exec_clone
 * makes one per context, with its own stream, graphs, staging and scratch, on the device
 * state they all share (the allocator and the KV storages, behind one mutex). So contexts of
 * one model run in different threads at once, each in order on its own non-blocking stream;
 * download() synchronises that stream, which is also where a kernel fault of the forward
 * pass surfaces.
 */
#include "backend/cuda/cuda_common.cuh"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors --------------------------------------------------------------------------- */

seer_status seer_cuda_fail(cudaError_t e, const char *what, const char *file, int line) {
    const char *f = strrchr(file, '/');
    return seer_err(SEER_ERR_BACKEND, "CUDA error %s (%d: %s) in %s at %s:%d", cudaGetErrorName(e),
                    (int)e, cudaGetErrorString(e), what, f ? f + 1 : file, line);
}

seer_status seer_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line) {
    const char *f = strrchr(file, '/');
    return seer_err(SEER_ERR_BACKEND, "cuBLAS error %s (%d: %s) in %s at %s:%d",
                    cublasGetStatusName(s), (int)s, cublasGetStatusString(s), what, f ? f + 1 : file,
                    line);
}

/* ---- the accounting allocator ----------------------------------------------------------- */

/* Open-addressing table from device pointer to size; key 0 is empty, 1 a tombstone (device
 * pointers are never 0 or 1). */
struct seer_cuda_alloc_rec {
    uintptr_t key;
    size_t bytes;
};

#define REC_EMPTY ((uintptr_t)0)
#define REC_TOMB ((uintptr_t)1)

static size_t rec_hash(uintptr_t k, size_t cap) {
    uint64_t x = (uint64_t)k >> 8; /* cudaMalloc returns 256-byte aligned pointers */
    x *= 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & (cap - 1);
}

/* The table is kept at most half used, so a free entry always exists. */
static void rec_put(struct seer_cuda_alloc_rec *tab, size_t cap, uintptr_t k, size_t bytes) {
    size_t i = rec_hash(k, cap);
    while (tab[i].key != REC_EMPTY && tab[i].key != REC_TOMB)
        i = (i + 1) & (cap - 1);
    tab[i].key = k;
    tab[i].bytes = bytes;
}

static seer_status rec_grow(seer_cuda_dev *c) {
    size_t cap = c->tab_cap ? c->tab_cap : 64;
    while ((c->tab_live + 1) * 2 > cap)
        cap *= 2;
    struct seer_cuda_alloc_rec *t =
        (struct seer_cuda_alloc_rec *)seer_calloc_array(cap, sizeof *t);
    if (!t)
        return seer_err(SEER_ERR_OOM, "CUDA: out of host memory for the allocation table");
    for (size_t i = 0; i < c->tab_cap; i++)
        if (c->tab[i].key != REC_EMPTY && c->tab[i].key != REC_TOMB)
            rec_put(t, cap, c->tab[i].key, c->tab[i].bytes);
    free(c->tab);
    c->tab = t;
    c->tab_cap = cap;
    c->tab_used = c->tab_live;
    return SEER_OK;
}

/* Returns the recorded size of p and forgets it; 0 if p is not ours. */
static size_t rec_take(seer_cuda_dev *c, void *p) {
    if (!c->tab_cap)
        return 0;
    uintptr_t k = (uintptr_t)p;
    for (size_t i = rec_hash(k, c->tab_cap), n = 0; n < c->tab_cap;
         i = (i + 1) & (c->tab_cap - 1), n++) {
        if (c->tab[i].key == REC_EMPTY)
            return 0;
        if (c->tab[i].key == k) {
            c->tab[i].key = REC_TOMB;
            c->tab_live--;
            return c->tab[i].bytes;
        }
    }
    return 0;
}

seer_status seer_cuda_malloc(seer_cuda *c, size_t bytes, const char *what, void **out) {
    *out = NULL;
    seer_cuda_dev *d = c->dev;
    pthread_mutex_lock(&d->mu);
    const seer_status grown = (d->tab_used + 1) * 2 > d->tab_cap ? rec_grow(d) : SEER_OK;
    pthread_mutex_unlock(&d->mu);
    SEER_TRY(grown);
    const size_t n = bytes ? (bytes + 255) / 256 * 256 : 256;
    if (n < bytes)
        return seer_err(SEER_ERR_OOM, "CUDA: cannot allocate %zu bytes for %s", bytes, what);
    void *p = NULL;
    cudaError_t e;
    {
        seer_cuda_unsafe_guard g(c->device);
        e = cudaMalloc(&p, n);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        size_t fr = 0, tot = 0;
        const bool info = cudaMemGetInfo(&fr, &tot) == cudaSuccess;
        if (!info)
            (void)cudaGetLastError();
        if (e == cudaErrorMemoryAllocation)
            return seer_err(SEER_ERR_OOM, "CUDA: cannot allocate %.1f MiB for %s: %.1f MiB free of %.1f MiB",
                            n / 1048576.0, what, fr / 1048576.0, tot / 1048576.0);
        /* Anything else is the device failing, usually a fault left by an earlier kernel. */
        if (!info)
            return seer_err(SEER_ERR_BACKEND,
                            "CUDA: cannot allocate %.1f MiB for %s: %s (%s); the device is in an error state",
                            n / 1048576.0, what, cudaGetErrorName(e), cudaGetErrorString(e));
        return seer_err(SEER_ERR_BACKEND,
                        "CUDA: cannot allocate %.1f MiB for %s: %s (%s); %.1f MiB free of %.1f MiB",
                        n / 1048576.0, what, cudaGetErrorName(e), cudaGetErrorString(e),
                        fr / 1048576.0, tot / 1048576.0);
    }
    pthread_mutex_lock(&d->mu);
    seer_status s = (d->tab_used + 1) * 2 > d->tab_cap ? rec_grow(d) : SEER_OK; /* another thread's */
    if (s == SEER_OK) {
        rec_put(d->tab, d->tab_cap, (uintptr_t)p, n);
        d->tab_live++;
        d->tab_used++;
        d->in_use += n;
        if (d->in_use > d->peak)
            d->peak = d->in_use;
    }
    pthread_mutex_unlock(&d->mu);
    if (s != SEER_OK) {
        seer_cuda_unsafe_guard g(c->device);
        if (cudaFree(p) != cudaSuccess)
            (void)cudaGetLastError();
        return s;
    }
    *out = p;
    return SEER_OK;
}

void seer_cuda_free(seer_cuda *c, void *p) {
    if (!p)
        return;
    seer_cuda_dev *d = c->dev;
    pthread_mutex_lock(&d->mu);
    const size_t n = rec_take(d, p);
    if (n)
        d->in_use -= n;
    pthread_mutex_unlock(&d->mu);
    if (!n)
        return; /* not ours: freeing it could only do harm */
    /* Work queued on the stream may still read p. */
    if (cudaStreamSynchronize(c->stream) != cudaSuccess)
        (void)cudaGetLastError();
    {
        seer_cuda_unsafe_guard g(c->device);
        if (cudaFree(p) != cudaSuccess)
            (void)cudaGetLastError();
    }
    c->gen++; /* a recorded forward call may hold p: recordings of older generations go */
}

seer_status seer_cuda_reserve(seer_cuda *c, seer_cuda_buf *b, size_t bytes, const char *what) {
    if (bytes <= b->cap && b->p)
        return SEER_OK;
    if (c->fw.capturing) /* a recording cannot free or allocate: the forward call runs again op by op */
        return seer_err(SEER_ERR_INTERNAL, "CUDA: %s would grow during a graph capture", what);
    /* Grow by half again so that slowly growing batches do not reallocate every call. */
    size_t want = bytes + bytes / 2;
    if (want < bytes)
        want = bytes;
    /* The old buffer goes first: when memory is tight the new one may need its room. */
    seer_cuda_buf_free(c, b);
    void *p = NULL;
    if (seer_cuda_malloc(c, want, what, &p) != SEER_OK) {
        want = bytes;
        SEER_TRY(seer_cuda_malloc(c, want, what, &p));
    }
    b->p = p;
    b->cap = want;
    return SEER_OK;
}

void seer_cuda_buf_free(seer_cuda *c, seer_cuda_buf *b) {
    seer_cuda_free(c, b->p);
    b->p = NULL;
    b->cap = 0;
}

/* ---- the shared device state -------------------------------------------------------------- */

static seer_status dev_new(seer_cuda_dev **out) {
    seer_cuda_dev *d = (seer_cuda_dev *)calloc(1, sizeof *d);
    if (!d)
        return seer_err(SEER_ERR_OOM, "out of memory");
    if (pthread_mutex_init(&d->mu, NULL) != 0) {
        free(d);
        return seer_err(SEER_ERR_OOM, "CUDA: cannot create a mutex");
    }
    d->refs = 1;
    *out = d;
    return SEER_OK;
}

static void dev_retain(seer_cuda_dev *d) {
    pthread_mutex_lock(&d->mu);
    d->refs++;
    pthread_mutex_unlock(&d->mu);
}

void seer_cuda_dev_release(seer_cuda_dev *d) {
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    const int left = --d->refs;
    pthread_mutex_unlock(&d->mu);
    if (left)
        return;
    pthread_mutex_destroy(&d->mu);
    free(d->tab);
    free(d);
}

/* ---- index arrays ----------------------------------------------------------------------- */

seer_status seer_cuda_index(seer_cuda *c, int which, const int32_t *host, int n, int slot,
                            const int32_t **dev) {
    *dev = NULL;
    if (n <= 0)
        return SEER_OK;
    if (which >= 0 && which < SEER_IDX_COUNT) {
        /* In a padded forward call n may run past the caller's entries into the padding. */
        const seer_cuda_idx *e = &c->idx[which];
        const int cmp = n < e->n ? n : e->n;
        if (e->host == host && (n <= e->n || (c->fw.padded && n <= e->n_pad)) &&
            !memcmp(host, e->staged, (size_t)cmp * sizeof *host)) {
            *dev = e->dev;
            return SEER_OK;
        }
    }
    if (c->fw.capturing) /* a recording would copy from host memory the caller reuses */
        return seer_err(SEER_ERR_INTERNAL, "CUDA: an op's index array is not batch_begin's during a graph capture");
    seer_cuda_buf *b = &c->fallback[slot];
    SEER_TRY(seer_cuda_reserve(c, b, (size_t)n * sizeof *host, "an op's index array"));
    /* From pageable memory the copy returns once the source is staged, so the caller may
     * reuse its array at once; the stream orders it after earlier readers of b. */
    CUDA_TRY(cudaMemcpyAsync(b->p, host, (size_t)n * sizeof *host, cudaMemcpyHostToDevice, c->stream));
    *dev = (const int32_t *)b->p;
    return SEER_OK;
}

/* ---- op table entries that live here ----------------------------------------------------- */

/* The op families whose state an instance holds (each made and freed by its own files). */
static const struct {
    seer_status (*init)(seer_cuda *c);
    void (*free)(seer_cuda *c);
} families[] = {
    {seer_cuda_mm_init, seer_cuda_mm_free},     {seer_cuda_attention_init, seer_cuda_attention_free},
    {seer_cuda_smp_init, seer_cuda_smp_free},   {seer_cuda_rope_init, seer_cuda_rope_free},
    {seer_cuda_kvs_init, seer_cuda_kvs_free},   {seer_cuda_ew_init, seer_cuda_ew_free},
    {seer_cuda_lp_init, seer_cuda_lp_free},     {seer_cuda_kvh_init, seer_cuda_kvh_free},
    {seer_cuda_comm_state_init, seer_cuda_comm_state_free},
    {seer_cuda_stg_init, seer_cuda_stg_free},   {seer_cuda_cats_init, seer_cuda_cats_free},
};

static void cuda_free_be(seer_backend *be) {
    if (!be)
        return;
    seer_cuda *c = seer_cuda_of(be);
    if (c) {
        if (c->stream && cudaStreamSynchronize(c->stream) != cudaSuccess)
            (void)cudaGetLastError();
        seer_cuda_graphs_free(c);
        seer_cuda_prof_free(c);
        for (size_t i = 0; i < sizeof families / sizeof *families; i++)
            families[i].free(c);
        seer_cuda_buf *bufs[] = {&c->fallback[0], &c->fallback[1], &c->batch};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
            seer_cuda_buf_free(c, bufs[i]);
        if (c->blas)
            cublasDestroy(c->blas);
        seer_cuda_free(c, c->blas_ws);
        if (c->stage) {
            seer_cuda_unsafe_guard g(c->device);
            cudaFreeHost(c->stage);
        }
        if (c->stage_done)
            cudaEventDestroy(c->stage_done);
        if (c->stream)
            cudaStreamDestroy(c->stream);
        (void)cudaGetLastError();
        seer_cuda_dev_release(c->dev);
        free(c);
    }
    free(be);
}

static seer_status cuda_alloc(seer_backend *be, size_t bytes, void **out) {
    return seer_cuda_malloc(seer_cuda_of(be), bytes, "a backend buffer", out);
}

static void cuda_dealloc(seer_backend *be, void *p) { seer_cuda_free(seer_cuda_of(be), p); }

static seer_status cuda_upload(seer_backend *be, void *dst, const void *src, size_t bytes) {
    seer_cuda *c = seer_cuda_of(be);
    if (!bytes)
        return SEER_OK;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    /* Synchronous, so that the caller may free or change src whatever memory it is in. */
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    return SEER_OK;
}

static seer_status cuda_download(seer_backend *be, void *dst, const void *src, size_t bytes) {
    seer_cuda *c = seer_cuda_of(be);
    if (bytes) {
        cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream);
        if (e != cudaSuccess)
            return seer_cuda_fail(e, "download (cudaMemcpyAsync; an earlier kernel may have failed)",
                                  __FILE__, __LINE__);
    }
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return seer_cuda_fail(e, "download (stream synchronise: a kernel queued earlier failed)",
                              __FILE__, __LINE__);
    return SEER_OK;
}

static seer_status cuda_host_alloc(seer_backend *be, size_t bytes, void **out) {
    cudaError_t e;
    {
        seer_cuda_unsafe_guard g(seer_cuda_of(be)->device);
        e = cudaHostAlloc(out, bytes, cudaHostAllocPortable);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return seer_err(SEER_ERR_OOM, "CUDA: cannot allocate %.1f MiB of page-locked host memory: %s",
                        bytes / 1048576.0, cudaGetErrorString(e));
    }
    return SEER_OK;
}

static void cuda_host_free(seer_backend *be, void *p) {
    seer_cuda_unsafe_guard g(seer_cuda_of(be)->device);
    if (p && cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

/* Benchmark ops (synthetic.cu). */
seer_status seer_cuda_weight_random(seer_backend *be, int rows, int cols, uint64_t seed,
                                    float scale, seer_weight *out);
seer_status seer_cuda_kv_fill_random(seer_backend *be, void *kv, const seer_kv_geom *g,
                                     const int32_t *pages, int n_pages, int row0, int n,
                                     uint64_t seed, float scale);
seer_status seer_cuda_copy_bandwidth(seer_backend *be, double *bytes_per_s);
seer_status seer_cuda_sync(seer_backend *be);
/* The host tier of the weights (weights.cu, stage.cu). */
size_t seer_cuda_weight_bytes(seer_backend *be, const seer_weight *w);
seer_status seer_cuda_stage(seer_backend *be, int slot, void *dst, const void *src, size_t bytes);
seer_status seer_cuda_stage_wait(seer_backend *be, int slot);
seer_status seer_cuda_h2d_bandwidth(seer_backend *be, double *bytes_per_s);

/* ---- profiling (profile.cu): the same ops, each followed by an event ------------------ */

template <typename F> struct prof_wrap;
template <typename... A> struct prof_wrap<seer_status (*)(seer_backend *, A...)> {
    template <seer_status (*F)(seer_backend *, A...), const char *N>
    static seer_status run(seer_backend *be, A... a) {
        seer_status s = F(be, a...);
        seer_cuda_prof_mark(seer_cuda_of(be), false, "%s", N);
        return s;
    }
};
#define PROF(field, fn)                                                       \
    do {                                                                      \
        static const char name_[] = #field;                                   \
        o.field = prof_wrap<decltype(&fn)>::run<fn, name_>;                   \
    } while (0)

/* a weight's dtype in the profile's keys (a model's draft weights have its shapes) */
#define DT(w) seer_ggml_type_name((ggml_type)(w)->dtype)

static seer_status prof_matmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                               const float *bias, int T) {
    seer_status s = seer_cuda_matmul(be, y, x, w, bias, T);
    seer_cuda_prof_mark(seer_cuda_of(be), false, "matmul %dx%d %s", w->rows, w->cols, DT(w));
    return s;
}

static seer_status prof_matmul_split(seer_backend *be, float *const *ys, const float *x,
                                     const seer_weight *w, const float *const *biases, int T) {
    seer_status s = seer_cuda_matmul_split(be, ys, x, w, biases, T);
    seer_cuda_prof_mark(seer_cuda_of(be), false, "matmul %dx%d %s (%d parts)", w->rows, w->cols, DT(w), w->n_seg);
    return s;
}

static seer_status prof_matmul_add(seer_backend *be, float *y, const float *x, const seer_weight *w,
                                   int T) {
    seer_status s = seer_cuda_matmul_add(be, y, x, w, T);
    seer_cuda_prof_mark(seer_cuda_of(be), false, "matmul+add %dx%d %s", w->rows, w->cols, DT(w));
    return s;
}

static seer_status prof_matmul_glu(seer_backend *be, float *y, const float *x, const seer_weight *w,
                                   int T) {
    seer_status s = seer_cuda_matmul_glu(be, y, x, w, T);
    seer_cuda_prof_mark(seer_cuda_of(be), false, "matmul+glu %dx%d %s", w->rows, w->cols, DT(w));
    return s;
}

static seer_status prof_ffn_glu(seer_backend *be, float *x, float *h, const float *nw, float eps,
                                const seer_weight *wgu, const seer_weight *wdown, float *g, int T) {
    seer_status s = seer_cuda_ffn_glu(be, x, h, nw, eps, wgu, wdown, g, T);
    seer_cuda_prof_mark(seer_cuda_of(be), false, "rmsnorm+ffn_glu %dx%d, %dx%d %s", wgu->rows, wgu->cols,
                        wdown->rows, wdown->cols, DT(wgu));
    return s;
}

static seer_status prof_norm_matmul_split(seer_backend *be, float *const *ys, float *h, const float *x,
                                          const float *nw, float eps, const seer_weight *w,
                                          const float *const *biases, int T) {
    seer_status s = seer_cuda_norm_matmul_split(be, ys, h, x, nw, eps, w, biases, T);
    seer_cuda_prof_mark(seer_cuda_of(be), false, "rmsnorm+matmul %dx%d %s (%d parts)", w->rows, w->cols,
                        DT(w), w->n_seg);
    return s;
}

static seer_status prof_norm_matmuls(seer_backend *be, float *const *ys, float *h, const float *x,
                                     const float *nw, float eps, const seer_weight *ws, int n,
                                     const float *const *biases, int T) {
    seer_status s = seer_cuda_norm_matmuls(be, ys, h, x, nw, eps, ws, n, biases, T);
    seer_cuda_prof_mark(seer_cuda_of(be), false, "rmsnorm+matmuls %d weights of %d columns, first %s", n,
                        n > 0 ? ws[0].cols : 0, n > 0 ? DT(&ws[0]) : "");
    return s;
}

static seer_status prof_batch_begin(seer_backend *be, const seer_attn_batch *ab, const int32_t *tokens,
                                    const int32_t *pos, const int32_t *page, const int32_t *row,
                                    const int32_t *out_rows, int n_out) {
    seer_cuda_prof_mark(seer_cuda_of(be), true, "base");
    seer_status s = seer_cuda_batch_begin(be, ab, tokens, pos, page, row, out_rows, n_out);
    seer_cuda_prof_mark(seer_cuda_of(be), false, "batch_begin (index upload)");
    return s;
}

static seer_backend_ops cuda_ops_make(void);
static seer_status cuda_exec_clone(seer_backend *be, seer_backend **out);

static seer_backend_ops cuda_ops_prof_make(void) {
    seer_backend_ops o = cuda_ops_make();
    PROF(embed, seer_cuda_embed);
    PROF(rmsnorm, seer_cuda_rmsnorm);
    PROF(rope, seer_cuda_rope);
    PROF(attention, seer_cuda_attention_any);
    PROF(swiglu, seer_cuda_swiglu);
    PROF(geglu, seer_cuda_geglu);
    PROF(scale, seer_cuda_scale);
    PROF(softcap, seer_cuda_softcap);
    PROF(add, seer_cuda_add);
    PROF(gather_rows, seer_cuda_gather_rows_fw);
    PROF(argmax_rows, seer_cuda_argmax_rows);
    PROF(kv_store, seer_cuda_kv_store);
    o.matmul = prof_matmul;
    o.matmul_split = prof_matmul_split;
    o.matmul_add = prof_matmul_add;
    o.matmul_glu = prof_matmul_glu;
    o.ffn_glu = prof_ffn_glu;
    o.norm_matmul_split = prof_norm_matmul_split;
    o.norm_matmuls = prof_norm_matmuls;
    PROF(rope_kv_store, seer_cuda_rope_kv_store);
    o.batch_begin = prof_batch_begin;
    return o;
}

/* Filled by name, so that an op added to the table cannot land in the wrong field. */
static seer_backend_ops cuda_ops_make(void) {
    seer_backend_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.invariant_max_tokens = SEER_CUDA_INVARIANT_MAX_T; /* above it, matmuls go to cuBLAS */
    o.prompt_cuts_free = true; /* in calls up to it: whole prefill items (attention_tc.cu) */
    o.free = cuda_free_be;
    o.exec_clone = cuda_exec_clone;
    o.alloc = cuda_alloc;
    o.dealloc = cuda_dealloc;
    o.upload = cuda_upload;
    o.download = cuda_download;
    o.host_alloc = cuda_host_alloc;
    o.host_free = cuda_host_free;
    o.weight_load = seer_cuda_weight_load;
    o.weight_free = seer_cuda_weight_free;
    o.kv_alloc = seer_cuda_kv_alloc;
    o.kv_free = seer_cuda_kv_free;
    o.kv_reserve = seer_cuda_kv_reserve;
    o.kv_mem_available = seer_cuda_kv_mem_available;
    o.kv_copy_pages = seer_cuda_kv_copy_pages;
    o.kv_page_bytes = seer_cuda_kv_page_bytes;
    o.kv_host_copy = seer_cuda_kv_host_copy;
    o.kv_host_done = seer_cuda_kv_host_done;
    o.kv_host_wait = seer_cuda_kv_host_wait;
    o.kv_move_rows = seer_cuda_kv_move_rows;
    o.kv_read = seer_cuda_kv_read;
    o.kv_store = seer_cuda_kv_store;
    o.batch_begin = seer_cuda_batch_begin;
    o.forward_begin = seer_cuda_forward_begin;
    o.forward_end = seer_cuda_forward_end;
    o.forward_begin_hold = seer_cuda_forward_begin_hold;
    o.forward_end_hold = seer_cuda_forward_end_hold;
    o.forward_launch = seer_cuda_forward_launch;
    o.embed = seer_cuda_embed;
    o.rmsnorm = seer_cuda_rmsnorm;
    o.matmul = seer_cuda_matmul;
    o.rope = seer_cuda_rope;
    o.attention = seer_cuda_attention_any; /* attention.cu, or through the quantised KV copy */
    o.weight_concat = seer_cuda_weight_concat;
    o.weight_quantize = seer_cuda_weight_quantize;
    o.ffn_act_stats = seer_cuda_ffn_act_stats;
    o.weight_gather = seer_cuda_weight_gather;
    o.ffn_act_hist = seer_cuda_ffn_act_hist;
    o.weight_transpose = seer_cuda_weight_transpose;
    o.ffn_cats = seer_cuda_ffn_cats;
    o.matmul_split = seer_cuda_matmul_split;
    o.matmul_add = seer_cuda_matmul_add;
    o.matmul_glu = seer_cuda_matmul_glu;
    o.ffn_glu = seer_cuda_ffn_glu;
    o.norm_matmul_split = seer_cuda_norm_matmul_split;
    o.norm_matmuls = seer_cuda_norm_matmuls;
    o.rope_kv_store = seer_cuda_rope_kv_store;
    o.swiglu = seer_cuda_swiglu;
    o.geglu = seer_cuda_geglu;
    o.scale = seer_cuda_scale;
    o.softcap = seer_cuda_softcap;
    o.weight_rows = seer_cuda_weight_rows;
    o.add = seer_cuda_add;
    o.gather_rows = seer_cuda_gather_rows_fw;
    o.argmax_rows = seer_cuda_argmax_rows;
    o.sample_rows = seer_cuda_sample_rows;
    o.accept_chains = seer_cuda_accept_chains;
    o.logprob_rows = seer_cuda_logprob_rows;
    o.accept_trees = seer_cuda_accept_trees;
    o.weight_random = seer_cuda_weight_random;
    o.kv_fill_random = seer_cuda_kv_fill_random;
    o.copy_bandwidth = seer_cuda_copy_bandwidth;
    o.sync = seer_cuda_sync;
    o.weight_bytes = seer_cuda_weight_bytes;
    o.stage = seer_cuda_stage;
    o.stage_wait = seer_cuda_stage_wait;
    o.h2d_bandwidth = seer_cuda_h2d_bandwidth;
    o.comm_init = seer_cuda_comm_init;
    o.comm_unique_id = seer_cuda_comm_unique_id;
    o.comm_init_rank = seer_cuda_comm_init_rank;
    o.make_current = seer_cuda_make_current;
    o.kv_elem_bytes = (int)sizeof(bf16);
    o.kv_types = 1u << SEER_KV_FULL | 1u << SEER_KV_Q8 | 1u << SEER_KV_Q4;
    /* every attention kernel honours both, or the launch picks one that does
     * (attention_tc.cu: attention_wgmma.cu's prefill kind takes neither) */
    o.attn_window = true;
    o.attn_softcap = true;
    o.qk_norm = true; /* rmsnorm takes any row count and length */
    return o;
}

static const seer_backend_ops cuda_ops = cuda_ops_make();
static const seer_backend_ops cuda_ops_prof = cuda_ops_prof_make();

/* A kernel that does nothing: launching it proves the binary has code for this GPU. */
__global__ void seer_cuda_probe_kernel(int *p) {
    if (p)
        *p = 1;
}

/* Starts instance c on device: settings from the variants t (NULL: the defaults) for the
 * model's instance, the same as parent's for a context's (so that a context computes as its
 * model was set up to). */
static seer_status cuda_start(seer_cuda *c, int device, const seer_cuda *parent, const seer_cuda_tuning *t) {
    CUDA_TRY(cudaSetDevice(device));
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, device));
    c->device = device;
    c->n_sm = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    c->smem_optin = prop.sharedMemPerBlockOptin;
    if (prop.major < 8)
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "CUDA device %d (%s) has compute capability %d.%d; bf16 needs 8.0 or newer",
                        device, prop.name, prop.major, prop.minor);
    CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    if (parent) {
        c->graphs = parent->graphs;
        if (parent->prof)
            SEER_TRY(seer_cuda_prof_init(c, seer_cuda_prof_path(parent)));
        c->mm_force_blas = parent->mm_force_blas;
        c->mm_pdl = parent->mm_pdl;
        c->mm_waves = parent->mm_waves;
        c->mm_min_steps = parent->mm_min_steps;
        c->mm_tile = parent->mm_tile;
        c->mm_tile_long = parent->mm_tile_long;
        c->mm_xb_min_t = parent->mm_xb_min_t;
        c->qt = parent->qt;
        c->qt_gemv_max_t = parent->qt_gemv_max_t;
        c->qt_norm_fused = parent->qt_norm_fused;
        c->attn_variant = parent->attn_variant;
        c->kv_rows_tc = parent->kv_rows_tc;
        c->allreduce_nccl = parent->allreduce_nccl;
    } else {
        const seer_cuda_tuning tu = t ? *t : seer_cuda_default_tuning();
        c->graphs = tu.graphs;
        if (tu.profile && *tu.profile) {
            SEER_TRY(seer_cuda_prof_init(c, tu.profile));
            c->graphs = false; /* the events go between the ops */
        }
        c->mm_force_blas = tu.matmul_cublas;
        c->mm_pdl = tu.pdl;
        c->mm_waves = 1;
        c->mm_min_steps = 2;
        c->mm_xb_min_t = tu.mm_xb_min > 0 ? tu.mm_xb_min : 40;
        c->mm_tile = tu.mm_tile ? tu.mm_tile / 8 * 8 : 32;
        if (c->mm_tile < 8 || c->mm_tile > 64)
            c->mm_tile = 32;
        c->mm_tile_long = tu.mm_tile ? c->mm_tile : 48;
        c->qt = tu.qt;
        c->qt_gemv_max_t = tu.qt_gemv_max;
        c->qt_norm_fused = tu.qt_norm;
        c->attn_variant = !tu.attn ? 0 : !strcmp(tu.attn, "mma") ? 1 : !strcmp(tu.attn, "scalar") ? 2 : 0;
        c->allreduce_nccl = tu.allreduce_nccl;
        c->kv_rows_tc = tu.kv_rows_tc;
    }
    c->fw.entry = -1;
    c->fw.held = -1;
    CUDA_TRY(cudaEventCreateWithFlags(&c->stage_done, cudaEventDisableTiming));
    seer_cuda_probe_kernel<<<1, 1, 0, c->stream>>>(NULL);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "CUDA device %d (%s, compute capability %d.%d) cannot run this build's kernels: %s (%s)",
                        device, prop.name, prop.major, prop.minor, cudaGetErrorName(e),
                        cudaGetErrorString(e));
    CUBLAS_TRY(cublasCreate(&c->blas));
    CUBLAS_TRY(cublasSetStream(c->blas, c->stream));
    /* Our own workspace: counted by the allocator, and fixed (as graph capture needs). */
    const size_t ws = 32u << 20;
    SEER_TRY(seer_cuda_malloc(c, ws, "the cuBLAS workspace", &c->blas_ws));
    CUBLAS_TRY(cublasSetWorkspace(c->blas, c->blas_ws, ws));
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        SEER_TRY(families[i].init(c));
    return SEER_OK;
}

/* An instance on device with the shared state d (whose hold it takes over: released with
 * the instance, or here on failure) and the settings of parent (NULL: those of t). */
static seer_status cuda_instance(int device, seer_cuda_dev *d, const seer_cuda *parent, const seer_cuda_tuning *t,
                                  seer_backend **out) {
    *out = NULL;
    seer_backend *be = (seer_backend *)calloc(1, sizeof *be);
    seer_cuda *c = (seer_cuda *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        seer_cuda_dev_release(d);
        return seer_err(SEER_ERR_OOM, "out of memory");
    }
    c->dev = d;
    be->ops = &cuda_ops;
    be->impl = c;
    seer_status s = cuda_start(c, device, parent, t);
    if (c->prof)
        be->ops = &cuda_ops_prof;
    if (s != SEER_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", seer_last_error());
        cuda_free_be(be);
        return seer_err(s, "%s", msg);
    }
    *out = be;
    return SEER_OK;
}

extern "C" seer_status seer_backend_cuda_init(int device, seer_backend **out) {
    return seer_backend_cuda_init_tuned(device, NULL, out);
}

extern "C" seer_status seer_backend_cuda_init_tuned(int device, const seer_cuda_tuning *t, seer_backend **out) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        /* Without a GPU there is usually no driver either, and the runtime then reports
         * cudaErrorInsufficientDriver ("driver version is insufficient"), which sends people
         * looking for a driver upgrade: say what is missing instead. */
        void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (drv)
            dlclose(drv);
        if (e == cudaErrorNoDevice || !drv)
            return seer_err(SEER_ERR_BACKEND, "no CUDA device was found (%s)",
                            drv ? cudaGetErrorString(e) : "no NVIDIA driver is installed: "
                                                          "libcuda.so.1 cannot be loaded");
        return seer_err(SEER_ERR_BACKEND, "no usable CUDA device: %s (%s)", cudaGetErrorName(e),
                        cudaGetErrorString(e));
    }
    if (n == 0)
        return seer_err(SEER_ERR_BACKEND, "no CUDA device was found");
    if (device < 0 || device >= n)
        return seer_err(SEER_ERR_INVALID_ARG, "CUDA device %d does not exist (%d present)", device, n);
    seer_cuda_dev *d = NULL;
    SEER_TRY(dev_new(&d));
    return cuda_instance(device, d, NULL, t, out);
}

/* A context's instance: its own stream, graphs, staging and scratch, on the shared device
 * state (allocator, KV storages) through which the model's weights were loaded. */
static seer_status cuda_exec_clone(seer_backend *be, seer_backend **out) {
    const seer_cuda *c = seer_cuda_of(be);
    dev_retain(c->dev);
    return cuda_instance(c->device, c->dev, c, NULL, out);
}


extern "C" void seer_backend_cuda_graph_stats(const seer_backend *be, long *replayed,
                                              long *captured, long *eager, long *redone) {
    const seer_cuda *c = (const seer_cuda *)be->impl;
    *replayed = c->n_replayed;
    *captured = c->n_captured;
    *eager = c->n_eager;
    *redone = c->n_redone;
}

extern "C" bool seer_backend_cuda_available(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return n >= 1;
}
