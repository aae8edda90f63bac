/*
 * kv.cu: the KV page storage on the device: allocation (address space reserved whole, memory
 * mapped in chunks as pages are first used, NaN-poisoned so that reading a slot nothing
 * wrote shows up in tests), page copies for copy-on-write, and storing a forward
 * call's K/V rows, rounded to bf16; and reading rows back as f32 for the host.
 * Layout [n_pages][n_layers][2][Hkv][page_size][Dh] bf16 (see cuda_common.cuh). A geometry with
 * kv_bits also gets the quantised copy (kv/kv_quant.h) in an address range of its own, grown
 * with the rows; its kernels are in attention_qkv.cu.
 * Not for: attention over the cache (attention.cu).
 */
#include "backend/cuda/cuda_common.cuh"

#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* kv_read's rows in f32 before they go to the host. */
struct seer_cuda_kvs {
    seer_cuda_buf read;
};

seer_status seer_cuda_kvs_init(seer_cuda *c) {
    c->kvs = (seer_cuda_kvs *)calloc(1, sizeof *c->kvs);
    return c->kvs ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

void seer_cuda_kvs_free(seer_cuda *c) {
    if (!c->kvs)
        return;
    seer_cuda_buf_free(c, &c->kvs->read);
    free(c->kvs);
    c->kvs = NULL;
}

static seer_status check_geom(const seer_kv_geom *g) {
    if (g->n_pages < 1 || g->page_size < 1 || g->n_layers < 1 || g->n_kv_heads < 1 ||
        g->head_dim < 2 || g->head_dim % 2)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "KV geometry: %d pages of %d tokens, %d layers, %d KV heads of %d dims",
                        g->n_pages, g->page_size, g->n_layers, g->n_kv_heads, g->head_dim);
    if (g->kv_type != SEER_KV_FULL && g->kv_type != SEER_KV_Q8 && g->kv_type != SEER_KV_Q4)
        return seer_err(SEER_ERR_INVALID_ARG, "KV cache: unknown row type %d", g->kv_type);
    if (g->kv_type != SEER_KV_FULL && g->kv_bits)
        return seer_err(SEER_ERR_INVALID_ARG, "KV cache: a quantised copy beside quantised rows");
    return SEER_OK;
}

/* Bytes of one page as stored (bf16 rows, or the geometry's quantised rows). */
static size_t page_bytes(const seer_kv_geom *g) { return seer_kv_geom_page_bytes(g, sizeof(bf16)); }

/* A KV storage: one range of device addresses reserved for the whole pool with the driver's
 * virtual memory management, backed by physical chunks mapped at its end as pages are first
 * used. The base never moves (kernels index pages from it; recorded graphs hold it). A chunk's
 * handle is released as soon as it is mapped: the memory lives until it is unmapped. */
struct kv_region {
    CUdeviceptr base;
    size_t reserved;   /* bytes of address space, a multiple of gran */
    size_t committed;  /* bytes mapped from base, a multiple of gran */
    size_t *chunks;    /* [n_chunks] sizes of the mappings, in address order */
    int n_chunks, cap_chunks;
};

struct seer_cuda_kv_pool {
    struct seer_cuda_kv_pool *next;
    struct kv_region rows; /* the bf16 pages; rows.base is the storage's handle */
    struct kv_region q;    /* the quantised copy (base 0: none) */
    size_t data_bytes; /* bytes of g->n_pages pages */
    size_t gran;       /* the allocation granularity */
};

/* The driver calls of the virtual memory management, found through the runtime
 * (cudaGetDriverEntryPointByVersion) instead of linked against libcuda: the library then also
 * loads, and runs on the CPU, on machines without the NVIDIA driver. Resolved once. */
struct cu_api {
    bool ok;
    decltype(&::cuGetErrorName) GetErrorName;
    decltype(&::cuDeviceGet) DeviceGet;
    decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
    decltype(&::cuMemGetAllocationGranularity) MemGetAllocationGranularity;
    decltype(&::cuMemAddressReserve) MemAddressReserve;
    decltype(&::cuMemCreate) MemCreate;
    decltype(&::cuMemMap) MemMap;
    decltype(&::cuMemRelease) MemRelease;
    decltype(&::cuMemSetAccess) MemSetAccess;
    decltype(&::cuMemUnmap) MemUnmap;
    decltype(&::cuMemAddressFree) MemAddressFree;
};

static const cu_api &cu(void) {
    static const cu_api api = [] {
        cu_api a = {};
        a.ok = true;
        void *fn;
        cudaDriverEntryPointQueryResult q;
#define CU_GET(name)                                                                                  \
    fn = NULL;                                                                                        \
    if (cudaGetDriverEntryPointByVersion("cu" #name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess || \
        q != cudaDriverEntryPointSuccess || !fn)                                                      \
        a.ok = false;                                                                                 \
    a.name = (decltype(a.name))fn;
        CU_GET(GetErrorName)
        CU_GET(DeviceGet)
        CU_GET(DeviceGetAttribute)
        CU_GET(MemGetAllocationGranularity)
        CU_GET(MemAddressReserve)
        CU_GET(MemCreate)
        CU_GET(MemMap)
        CU_GET(MemRelease)
        CU_GET(MemSetAccess)
        CU_GET(MemUnmap)
        CU_GET(MemAddressFree)
#undef CU_GET
        (void)cudaGetLastError();
        return a;
    }();
    return api;
}

static seer_status cu_fail(CUresult r, const char *what) {
    const char *name = NULL;
    if (!cu().GetErrorName || cu().GetErrorName(r, &name) != CUDA_SUCCESS)
        name = "unknown";
    return seer_err(r == CUDA_ERROR_OUT_OF_MEMORY ? SEER_ERR_OOM : SEER_ERR_BACKEND,
                    "CUDA: %s failed: %s", what, name);
}

#define CU_TRY(call, what)                     \
    do {                                       \
        CUresult cu_try_r_ = (call);           \
        if (cu_try_r_ != CUDA_SUCCESS)         \
            return cu_fail(cu_try_r_, what);   \
    } while (0)

static CUmemAllocationProp kv_prop(int device) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

/* The pool whose rows start at kv, unlinked from the list with unlink (a storage is used by
 * one context, so the pool itself needs no lock once found). */
static struct seer_cuda_kv_pool *find_pool(seer_cuda *c, const void *kv, bool unlink = false) {
    seer_cuda_dev *d = c->dev;
    struct seer_cuda_kv_pool *found = NULL;
    pthread_mutex_lock(&d->mu);
    for (struct seer_cuda_kv_pool **l = &d->kv_pools; *l; l = &(*l)->next)
        if ((*l)->rows.base == (CUdeviceptr)kv) {
            found = *l;
            if (unlink)
                *l = found->next;
            break;
        }
    pthread_mutex_unlock(&d->mu);
    return found;
}

static void count_bytes(seer_cuda *c, size_t add, size_t sub) {
    seer_cuda_dev *d = c->dev;
    pthread_mutex_lock(&d->mu);
    d->in_use = d->in_use + add - sub;
    if (d->in_use > d->peak)
        d->peak = d->in_use;
    pthread_mutex_unlock(&d->mu);
}

seer_status seer_cuda_kv_alloc(seer_backend *be, const seer_kv_geom *g, void **out) {
    seer_cuda *c = seer_cuda_of(be);
    *out = NULL;
    SEER_TRY(check_geom(g));
    const size_t pe = page_bytes(g);
    if (pe > SIZE_MAX / 4 / (size_t)g->n_pages)
        return seer_err(SEER_ERR_OOM, "KV cache: %d pages of %zu bytes overflow a size", g->n_pages, pe);
    const size_t bytes = pe * (size_t)g->n_pages;
    size_t fr = 0, tot = 0;
    CUDA_TRY(cudaMemGetInfo(&fr, &tot));
    if (bytes > tot) /* could never be committed: refused before anything is reserved */
        return seer_err(SEER_ERR_OOM, "KV cache: %d pages of %d tokens need %.1f MiB; the device has %.1f MiB",
                        g->n_pages, g->page_size, bytes / 1048576.0, tot / 1048576.0);
    CUdevice dev;
    int vmm = 0;
    if (!cu().ok)
        return seer_err(SEER_ERR_UNSUPPORTED, "CUDA: the driver offers no virtual memory management calls");
    CU_TRY(cu().DeviceGet(&dev, c->device), "cuDeviceGet");
    CU_TRY(cu().DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
           "asking for virtual memory management");
    if (!vmm)
        return seer_err(SEER_ERR_UNSUPPORTED, "CUDA: the device has no virtual memory management for a growing KV cache");
    CUmemAllocationProp prop = kv_prop(c->device);
    size_t gran = 0;
    CU_TRY(cu().MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
           "cuMemGetAllocationGranularity");
    if (gran == 0)
        return seer_err(SEER_ERR_BACKEND, "CUDA: allocation granularity 0");
    struct seer_cuda_kv_pool *pool = (struct seer_cuda_kv_pool *)calloc(1, sizeof *pool);
    if (!pool)
        return seer_err(SEER_ERR_OOM, "KV cache: out of host memory");
    if (g->kv_bits != 0 && g->kv_bits != 4 && g->kv_bits != 8) {
        free(pool);
        return seer_err(SEER_ERR_INVALID_ARG, "KV cache: a quantised copy of %d bits (4 or 8)", g->kv_bits);
    }
    pool->data_bytes = bytes;
    pool->rows.reserved = (pool->data_bytes + gran - 1) / gran * gran;
    pool->gran = gran;
    CUresult r = cu().MemAddressReserve(&pool->rows.base, pool->rows.reserved, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
        free(pool);
        return cu_fail(r, "reserving device addresses for the KV cache");
    }
    if (g->kv_bits) {
        pool->q.reserved = (seer_cuda_kvq_page_bytes(g) * (size_t)g->n_pages + gran - 1) / gran * gran;
        r = cu().MemAddressReserve(&pool->q.base, pool->q.reserved, 0, 0, 0);
        if (r != CUDA_SUCCESS) {
            (void)cu().MemAddressFree(pool->rows.base, pool->rows.reserved);
            free(pool);
            return cu_fail(r, "reserving device addresses for the KV cache's quantised copy");
        }
    }
    pthread_mutex_lock(&c->dev->mu);
    pool->next = c->dev->kv_pools;
    c->dev->kv_pools = pool;
    pthread_mutex_unlock(&c->dev->mu);
    *out = (void *)pool->rows.base;
    return SEER_OK;
}

uint8_t *seer_cuda_kv_qdata(seer_cuda *c, const void *kv) {
    struct seer_cuda_kv_pool *pool = find_pool(c, kv);
    return pool && pool->q.base ? (uint8_t *)pool->q.base : NULL;
}

/* Maps one more chunk of bytes at the end of what is mapped; all or nothing. */
static seer_status map_chunk(seer_cuda *c, struct kv_region *pool, size_t bytes) {
    if (pool->n_chunks == pool->cap_chunks) {
        int cap = pool->cap_chunks ? 2 * pool->cap_chunks : 16;
        size_t *p = (size_t *)realloc(pool->chunks, sizeof *p * (size_t)cap);
        if (!p)
            return seer_err(SEER_ERR_OOM, "KV cache: out of host memory");
        pool->chunks = p;
        pool->cap_chunks = cap;
    }
    CUmemAllocationProp prop = kv_prop(c->device);
    CUmemGenericAllocationHandle h;
    CUresult r = cu().MemCreate(&h, bytes, &prop, 0);
    if (r != CUDA_SUCCESS) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
            (void)cudaGetLastError();
        if (r == CUDA_ERROR_OUT_OF_MEMORY)
            return seer_err(SEER_ERR_OOM, "CUDA: cannot grow the KV cache by %.1f MiB (%.1f MiB committed): %.1f MiB free of %.1f MiB",
                            bytes / 1048576.0, pool->committed / 1048576.0, fr / 1048576.0, tot / 1048576.0);
        return cu_fail(r, "cuMemCreate for the KV cache");
    }
    const CUdeviceptr at = pool->base + pool->committed;
    r = cu().MemMap(at, bytes, 0, h, 0);
    if (r != CUDA_SUCCESS) {
        (void)cu().MemRelease(h);
        return cu_fail(r, "cuMemMap for the KV cache");
    }
    /* The mapping keeps the memory alive; the handle is not needed past this point. */
    (void)cu().MemRelease(h);
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = cu().MemSetAccess(at, bytes, &acc, 1);
    if (r == CUDA_SUCCESS) {
        /* 0xFFFF is a bf16 NaN: reading a slot nothing wrote shows up in tests. */
        cudaError_t e = cudaMemsetAsync((void *)at, 0xFF, bytes, c->stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            (void)cu().MemUnmap(at, bytes);
            return seer_cuda_fail(e, "poisoning the KV cache", __FILE__, __LINE__);
        }
    } else {
        (void)cu().MemUnmap(at, bytes);
        return cu_fail(r, "cuMemSetAccess for the KV cache");
    }
    pool->chunks[pool->n_chunks++] = bytes;
    pool->committed += bytes;
    count_bytes(c, bytes, 0);
    return SEER_OK;
}

/* Maps region r up to at least want bytes: at least 2 MiB and an eighth of what is there at
 * a time (few steps, little over-commit). */
static seer_status grow_region(seer_cuda *c, struct kv_region *r, size_t gran, size_t want) {
    if (want <= r->committed)
        return SEER_OK;
    /* The driver calls below act on the calling thread's current context. */
    CUDA_TRY(cudaSetDevice(c->device));
    size_t step = r->committed / 8 > ((size_t)2 << 20) ? r->committed / 8 : ((size_t)2 << 20);
    size_t to = r->committed + step > want ? r->committed + step : want;
    to = (to + gran - 1) / gran * gran;
    if (to > r->reserved)
        to = r->reserved;
    return map_chunk(c, r, to - r->committed);
}

seer_status seer_cuda_kv_reserve(seer_backend *be, void *kv, const seer_kv_geom *g, int n_pages,
                                 int *n_committed) {
    seer_cuda *c = seer_cuda_of(be);
    struct seer_cuda_kv_pool *pool = find_pool(c, kv);
    if (!pool || n_pages < 0 || n_pages > g->n_pages)
        return seer_err(SEER_ERR_INVALID_ARG, "KV cache: %d pages asked of a pool of %d", n_pages,
                        g->n_pages);
    const size_t pb = page_bytes(g), qb = seer_cuda_kvq_page_bytes(g);
    /* The copy first: when the rows then fail, the storage the pool counts is as it was. */
    if (pool->q.base)
        SEER_TRY(grow_region(c, &pool->q, pool->gran, (size_t)n_pages * qb));
    SEER_TRY(grow_region(c, &pool->rows, pool->gran, (size_t)n_pages * pb));
    size_t have = pool->rows.committed / pb;
    if (pool->q.base && pool->q.committed / qb < have)
        have = pool->q.committed / qb;
    *n_committed = have < (size_t)g->n_pages ? (int)have : g->n_pages;
    return SEER_OK;
}

seer_status seer_cuda_kv_mem_available(seer_backend *be, uint64_t *bytes) {
    size_t fr = 0, tot = 0;
    CUDA_TRY(cudaMemGetInfo(&fr, &tot));
    *bytes = fr;
    return SEER_OK;
}

void seer_cuda_kv_free(seer_backend *be, void *kv) {
    seer_cuda *c = seer_cuda_of(be);
    struct seer_cuda_kv_pool *pool = kv ? find_pool(c, kv, true) : NULL;
    if (!pool)
        return; /* not ours: freeing it could only do harm */
    /* Work queued on the stream may still read the pages. */
    if (cudaStreamSynchronize(c->stream) != cudaSuccess)
        (void)cudaGetLastError();
    struct kv_region *regions[2] = {&pool->rows, &pool->q};
    for (int k = 0; k < 2; k++) {
        struct kv_region *r = regions[k];
        if (!r->base)
            continue;
        size_t off = 0;
        for (int i = 0; i < r->n_chunks; i++) {
            (void)cu().MemUnmap(r->base + off, r->chunks[i]);
            off += r->chunks[i];
        }
        (void)cu().MemAddressFree(r->base, r->reserved);
        count_bytes(c, 0, r->committed);
        free(r->chunks);
    }
    c->gen++; /* a recorded forward call may hold the base: recordings of older generations go */
    free(pool);
}

/* A page's rows and its quantised copy, as the host tier holds them (kv_host.cu). */
size_t seer_cuda_kv_page_bytes(seer_backend *be, const seer_kv_geom *g) {
    (void)be;
    return page_bytes(g) + seer_cuda_kvq_page_bytes(g);
}

size_t seer_cuda_kv_rows_bytes(const seer_kv_geom *g) { return page_bytes(g); }

seer_status seer_cuda_kv_copy_pages(seer_backend *be, void *kv, const seer_kv_geom *g,
                                    const seer_kv_copy *copies, int n) {
    seer_cuda *c = seer_cuda_of(be);
    const size_t pb = page_bytes(g), qb = seer_cuda_kvq_page_bytes(g);
    uint8_t *q = g->kv_bits ? seer_cuda_kv_qdata(c, kv) : NULL;
    for (int i = 0; i < n; i++) {
        const int s = copies[i].src, d = copies[i].dst;
        if (s < 0 || s >= g->n_pages || d < 0 || d >= g->n_pages)
            return seer_err(SEER_ERR_INVALID_ARG, "KV page copy %d -> %d outside the %d pages", s, d,
                            g->n_pages);
        if (s == d)
            continue;
        /* In stream order, so a later copy may read what an earlier one wrote. */
        CUDA_TRY(cudaMemcpyAsync((char *)kv + pb * d, (const char *)kv + pb * s, pb,
                                 cudaMemcpyDeviceToDevice, c->stream));
        if (q)
            CUDA_TRY(cudaMemcpyAsync(q + qb * d, q + qb * s, qb, cudaMemcpyDeviceToDevice, c->stream));
    }
    return SEER_OK;
}

/* One block per (token, K or V); threads over the Hkv*Dh/2 value pairs of the row. */
__global__ void kv_store_kernel(bf16 *kv, const float *k, const float *v, const int32_t *page,
                                const int32_t *row, int layer, int n_layers, int n_pages,
                                int page_size, int Hkv, int Dh) {
    const int t = blockIdx.x, which = blockIdx.y;
    const int pg = page[t], r = row[t];
    if (pg < 0 || pg >= n_pages || r < 0 || r >= page_size)
        return; /* never from the model code; a bad index must not write elsewhere */
    const int kvd = Hkv * Dh, half = Dh / 2;
    const float2 *src = (const float2 *)((which ? v : k) + (size_t)t * kvd);
    const size_t head0 = (((size_t)pg * n_layers + layer) * 2 + which) * Hkv;
    for (int p = threadIdx.x; p < kvd / 2; p += blockDim.x) {
        const int h = p / half, e2 = p % half;
        const float2 x = src[p];
        __nv_bfloat162 *dst =
            (__nv_bfloat162 *)(kv + ((head0 + h) * page_size + r) * Dh) + e2;
        *dst = __floats2bfloat162_rn(x.x, x.y);
    }
}

seer_status seer_cuda_kv_store(seer_backend *be, void *kv, const seer_kv_geom *g, int layer,
                               const float *k, const float *v, const int32_t *page,
                               const int32_t *row, int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0)
        return SEER_OK;
    if (layer < 0 || layer >= g->n_layers)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_store: layer %d of %d", layer, g->n_layers);
    if (T > 65535 * 32)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_store: %d tokens in one call", T);
    const int32_t *dpage, *drow;
    SEER_TRY(seer_cuda_index(c, SEER_IDX_PAGE, page, T, 0, &dpage));
    SEER_TRY(seer_cuda_index(c, SEER_IDX_ROW, row, T, 1, &drow));
    /* k and v rows are float2-aligned: Hkv*Dh is even and buffers come 256-byte aligned. */
    dim3 grid((unsigned)T, 2);
    if (g->kv_type != SEER_KV_FULL) /* only the quantised rows are kept */
        return seer_cuda_kvt_store(c, kv, g, layer, k, v, dpage, drow, T);
    kv_store_kernel<<<grid, 128, 0, c->stream>>>((bf16 *)kv, k, v, dpage, drow, layer, g->n_layers,
                                                 g->n_pages, g->page_size, g->n_kv_heads,
                                                 g->head_dim);
    LAUNCH_TRY("kv_store_kernel");
    if (g->kv_bits)
        SEER_TRY(seer_cuda_kvq_store(c, kv, g, layer, k, v, dpage, drow, T));
    return SEER_OK;
}

/* One block per (layer, K or V, KV head); its threads own fixed elements of the head's Dh
 * and go through the moves in order, so a move that reads a row an earlier move wrote sees
 * the written value (the op's in-order contract) without synchronisation: the same thread
 * wrote it. mv holds [n][4] = src page, src row, dst page, dst row (checked on the host). */
__global__ void kv_move_rows_kernel(bf16 *kv, const int32_t *mv, int n, int n_layers, int page_size,
                                    int Hkv, int Dh) {
    const int layer = blockIdx.x, which = blockIdx.y, h = blockIdx.z;
    for (int i = 0; i < n; i++) {
        const int32_t *m = mv + (size_t)i * 4;
        const bf16 *src = kv + (((((size_t)m[0] * n_layers + layer) * 2 + which) * Hkv + h) * page_size + m[1]) * Dh;
        bf16 *dst = kv + (((((size_t)m[2] * n_layers + layer) * 2 + which) * Hkv + h) * page_size + m[3]) * Dh;
        for (int e = threadIdx.x; e < Dh; e += blockDim.x)
            dst[e] = src[e];
    }
}

/* The same for the quantised copy's rows (kv/kv_quant.h layout), in 8-byte words: one block
 * per (layer, K or V), each thread owning fixed words through the moves in order. */
__global__ void kvq_move_rows_kernel(uint64_t *q, const int32_t *mv, int n, int n_layers, int page_size,
                                     int row_words) {
    const int layer = blockIdx.x, which = blockIdx.y;
    for (int i = 0; i < n; i++) {
        const int32_t *m = mv + (size_t)i * 4;
        const uint64_t *src = q + ((((size_t)m[0] * n_layers + layer) * 2 + which) * page_size + m[1]) * row_words;
        uint64_t *dst = q + ((((size_t)m[2] * n_layers + layer) * 2 + which) * page_size + m[3]) * row_words;
        for (int e = threadIdx.x; e < row_words; e += blockDim.x)
            dst[e] = src[e];
    }
}

seer_status seer_cuda_kv_move_rows(seer_backend *be, void *kv, const seer_kv_geom *g,
                                   const int32_t *src_page, const int32_t *src_row,
                                   const int32_t *dst_page, const int32_t *dst_row, int n) {
    seer_cuda *c = seer_cuda_of(be);
    if (n <= 0)
        return SEER_OK;
    SEER_TRY(seer_kv_move_check(g, src_page, src_row, dst_page, dst_row, n));
    if (n > (1 << 20))
        return seer_err(SEER_ERR_INVALID_ARG, "kv_move_rows: %d moves in one call", n);
    int32_t *mv = (int32_t *)malloc(sizeof(int32_t) * 4 * (size_t)n);
    if (!mv)
        return seer_err(SEER_ERR_OOM, "out of memory");
    for (int i = 0; i < n; i++) {
        mv[4 * i] = src_page[i];
        mv[4 * i + 1] = src_row[i];
        mv[4 * i + 2] = dst_page[i];
        mv[4 * i + 3] = dst_row[i];
    }
    const int32_t *dmv;
    seer_status st = seer_cuda_index(c, -1, mv, 4 * n, 0, &dmv);
    free(mv); /* the upload is staged before seer_cuda_index returns */
    SEER_TRY(st);
    if (g->kv_type != SEER_KV_FULL) { /* whole quantised rows (multiples of 16 bytes), in 8-byte words */
        kvq_move_rows_kernel<<<dim3((unsigned)g->n_layers, 2), 64, 0, c->stream>>>(
            (uint64_t *)kv, dmv, n, g->n_layers, g->page_size, (int)(seer_kv_geom_row_bytes(g, sizeof(bf16)) / 8));
        LAUNCH_TRY("kvq_move_rows_kernel");
        return SEER_OK;
    }
    dim3 grid((unsigned)g->n_layers, 2, (unsigned)g->n_kv_heads);
    const int threads = g->head_dim < 128 ? 64 : 128;
    kv_move_rows_kernel<<<grid, threads, 0, c->stream>>>((bf16 *)kv, dmv, n, g->n_layers, g->page_size,
                                                         g->n_kv_heads, g->head_dim);
    LAUNCH_TRY("kv_move_rows_kernel");
    if (g->kv_bits) { /* the copy's rows move with the rows they copy (row bytes: multiples of 8) */
        uint8_t *q = seer_cuda_kv_qdata(c, kv);
        const int words = (int)(seer_kvq_row_bytes(g->n_kv_heads * g->head_dim, g->kv_bits) / 8);
        if (q) {
            kvq_move_rows_kernel<<<dim3((unsigned)g->n_layers, 2), 64, 0, c->stream>>>(
                (uint64_t *)q, dmv, n, g->n_layers, g->page_size, words);
            LAUNCH_TRY("kvq_move_rows_kernel");
        }
    }
    return SEER_OK;
}

/* One block per row asked for; a bad index gives a NaN row rather than a stray read. */
__global__ void kv_read_kernel(float *out, const bf16 *kv, const int32_t *page, const int32_t *row,
                               int layer, int which, int n_layers, int n_pages, int page_size,
                               int Hkv, int Dh) {
    const int i = blockIdx.x, pg = page[i], r = row[i], kvd = Hkv * Dh;
    float *o = out + (size_t)i * kvd;
    if (pg < 0 || pg >= n_pages || r < 0 || r >= page_size) {
        for (int p = threadIdx.x; p < kvd; p += blockDim.x)
            o[p] = __int_as_float(0x7fc00000);
        return;
    }
    const size_t head0 = (((size_t)pg * n_layers + layer) * 2 + which) * Hkv;
    for (int p = threadIdx.x; p < kvd; p += blockDim.x) {
        const int h = p / Dh, e = p % Dh;
        o[p] = __bfloat162float(kv[((head0 + h) * page_size + r) * Dh + e]);
    }
}

seer_status seer_cuda_kv_read(seer_backend *be, const void *kv, const seer_kv_geom *g, int layer,
                              int which, const int32_t *page, const int32_t *row, int n, float *out) {
    seer_cuda *c = seer_cuda_of(be);
    if (n <= 0)
        return SEER_OK;
    if (layer < 0 || layer >= g->n_layers || (which != 0 && which != 1))
        return seer_err(SEER_ERR_INVALID_ARG, "kv_read: layer %d of %d, which %d", layer,
                        g->n_layers, which);
    const size_t bytes = (size_t)n * g->n_kv_heads * g->head_dim * sizeof(float);
    SEER_TRY(seer_cuda_reserve(c, &c->kvs->read, bytes, "kv_read rows"));
    const int32_t *dpage, *drow;
    SEER_TRY(seer_cuda_index(c, -1, page, n, 0, &dpage));
    SEER_TRY(seer_cuda_index(c, -1, row, n, 1, &drow));
    if (g->kv_type != SEER_KV_FULL)
        SEER_TRY(seer_cuda_kvt_read(c, (float *)c->kvs->read.p, kv, g, layer, which, dpage, drow, n));
    else
        kv_read_kernel<<<(unsigned)n, 128, 0, c->stream>>>((float *)c->kvs->read.p, (const bf16 *)kv, dpage,
                                                       drow, layer, which, g->n_layers, g->n_pages,
                                                       g->page_size, g->n_kv_heads, g->head_dim);
    LAUNCH_TRY("kv_read_kernel");
    CUDA_TRY(cudaMemcpyAsync(out, c->kvs->read.p, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    return SEER_OK;
}
