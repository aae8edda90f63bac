/*
 * cpu.c: the CPU backend's op table: memory, weights, KV storage and the elementwise ops.
 * f32 compute on the backend's thread pool (cpu_pool.c); quantised weights are kept as stored
 * unless SEER_WEIGHTS_F32 asks for them dequantised. The reference every other backend is
 * tested against.
 * Not for: matmul and attention (cpu_matmul.c, cpu_qmatmul.c, cpu_attention.c).
 */
#include "backend/cpu/cpu.h"
#include "backend/synth_hash.h"
#include "sample/logprob.h"
#include "sample/sample.h"
#include "util/error.h"

#include <math.h>
#include <stdatomic.h>
#include <time.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static seer_status cpu_exec_clone(seer_backend *be, seer_backend **out);

static void cpu_free(seer_backend *be) {
    if (!be)
        return;
    if (be->impl) {
        free(((seer_cpu *)be->impl)->smp);
        free(((seer_cpu *)be->impl)->xq);
        seer_cpu_pool_free(((seer_cpu *)be->impl)->pool);
    }
    free(be->impl);
    free(be);
}

static seer_status cpu_alloc(seer_backend *be, size_t bytes, void **out) {
    /* 64-byte alignment for vector loads; round the size up as aligned_alloc requires. */
    size_t n = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, n ? n : 64);
    if (!p)
        return seer_err(SEER_ERR_OOM, "cannot allocate %zu bytes of host memory", bytes);
    *out = p;
    return SEER_OK;
}

static void cpu_dealloc(seer_backend *be, void *p) { free(p); }

static seer_status cpu_copy(seer_backend *be, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return SEER_OK;
}

static seer_status cpu_weight_load(seer_backend *be, const gguf_tensor *t, seer_weights_kind how,
                                   seer_weight *out) {
    uint64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (how == SEER_WEIGHTS_BF16)
        return seer_err(SEER_ERR_UNSUPPORTED, "the CPU backend keeps weights as stored or in f32, not in bf16");
    if (rows > INT32_MAX || cols > INT32_MAX)
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor %s is too large", t->name);
    memset(out, 0, sizeof *out);
    out->rows = (int)rows;
    out->cols = (int)cols;
    out->dtype = GGML_TYPE_F32;
    if (t->type == GGML_TYPE_F32) {
        out->data = (void *)t->data; /* straight from the file's private copy (seer_gguf_file_open) */
        return SEER_OK;
    }
    if (how == SEER_WEIGHTS_STORED && seer_cpu_qtype_supported(t->type) &&
        cols % seer_ggml_type_block_elems(t->type) == 0) {
        out->data = (void *)t->data; /* the blocks as stored, in place */
        out->dtype = t->type;
        return SEER_OK;
    }
    void *buf = NULL;
    SEER_TRY(cpu_alloc(be, rows * cols * sizeof(float), &buf));
    seer_status s = seer_gguf_tensor_dequant(t, buf, rows * cols);
    if (s != SEER_OK) {
        free(buf);
        return s;
    }
    out->data = buf;
    out->owned = true;
    return SEER_OK;
}

static void cpu_weight_free(seer_backend *be, seer_weight *w) {
    if (w->owned)
        free(w->data);
    memset(w, 0, sizeof *w);
}

static size_t kv_bytes(const seer_kv_geom *g) {
    return (size_t)g->n_pages * seer_kv_geom_page_bytes(g, sizeof(float));
}

/* The KV storage is one anonymous mapping reserved PROT_NONE (address space only) and made
 * writable chunk by chunk as pages are first used, so the base never moves and an unused
 * pool costs no memory. The mapping's first OS page holds this header; the K/V data starts
 * at the next one (64-byte aligned, as vector loads want). */
typedef struct {
    size_t map_bytes;  /* the whole mapping, header page included */
    size_t data_bytes; /* room for the K/V data: g->n_pages pages, rounded to OS pages */
    size_t committed;  /* data bytes made writable (and NaN-poisoned), OS-page aligned */
    /* The quantised copy (geom kv_bits != 0), a mapping of its own grown the same way, so
     * that the full-precision layout every kernel indexes stays as it is. */
    uint8_t *q;          /* [n_pages][seer_kvq_page_bytes] or NULL */
    size_t q_map_bytes;  /* its mapping, rounded to OS pages */
    size_t q_committed;  /* bytes made writable (and poisoned with 0xFF: NaN scales) */
} cpu_kv_hdr;

static size_t os_page(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

/* Commits at least 256 KiB at a time and an eighth of what is committed already, so a long
 * context grows in few steps while a short one stays small, but at most 32 MiB: a step is
 * written (poisoned) and faulted in by the call that needs it, and an eighth of a cache of
 * gigabytes stalled that call (a decode step of a 0.5B model at 28K slots: 0.8 s). Adjacent
 * steps merge into one mapping, so their number costs nothing. */
enum { CPU_KV_CHUNK = 256 << 10, CPU_KV_STEP_MAX = 32 << 20 };

static size_t commit_step(size_t committed, size_t least) {
    const size_t s = committed / 8 > least ? committed / 8 : least;
    return s < CPU_KV_STEP_MAX ? s : CPU_KV_STEP_MAX;
}

static cpu_kv_hdr *kv_hdr(void *kv) { return (cpu_kv_hdr *)((char *)kv - os_page()); }

uint8_t *seer_cpu_kv_qdata(const void *kv) {
    return ((const cpu_kv_hdr *)((const char *)kv - os_page()))->q;
}

static size_t kvq_page_bytes(const seer_kv_geom *g) {
    return seer_kvq_page_bytes(g->n_layers, g->page_size, g->n_kv_heads * g->head_dim, g->kv_bits);
}

static seer_status cpu_kv_alloc(seer_backend *be, const seer_kv_geom *g, void **out) {
    *out = NULL;
    const size_t op = os_page();
    const size_t page = seer_kv_geom_page_bytes(g, sizeof(float));
    if (g->kv_type != SEER_KV_FULL && g->kv_type != SEER_KV_Q8 && g->kv_type != SEER_KV_Q4)
        return seer_err(SEER_ERR_INVALID_ARG, "KV cache: unknown row type %d", g->kv_type);
    if (g->kv_type != SEER_KV_FULL && g->kv_bits)
        return seer_err(SEER_ERR_INVALID_ARG, "KV cache: a quantised copy beside quantised rows");
    if (g->n_pages < 1 || page == 0 || (size_t)g->n_pages > (SIZE_MAX / 2 - op) / page)
        return seer_err(SEER_ERR_OOM, "KV cache: %d pages of %zu bytes overflow the address space",
                        g->n_pages, page);
    const size_t data = (kv_bytes(g) + op - 1) / op * op;
    void *m = mmap(NULL, op + data, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return seer_err(SEER_ERR_OOM, "KV cache: cannot reserve %.1f MiB of address space for %d pages of %d tokens",
                        data / 1048576.0, g->n_pages, g->page_size);
    if (mprotect(m, op, PROT_READ | PROT_WRITE) != 0) {
        munmap(m, op + data);
        return seer_err(SEER_ERR_OOM, "KV cache: cannot commit its header page");
    }
    if (g->kv_bits != 0 && g->kv_bits != 4 && g->kv_bits != 8) {
        munmap(m, op + data);
        return seer_err(SEER_ERR_INVALID_ARG, "KV cache: a quantised copy of %d bits (4 or 8)", g->kv_bits);
    }
    cpu_kv_hdr h = {.map_bytes = op + data, .data_bytes = data, .committed = 0};
    if (g->kv_bits) {
        h.q_map_bytes = (kvq_page_bytes(g) * (size_t)g->n_pages + op - 1) / op * op;
        void *q = mmap(NULL, h.q_map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q == MAP_FAILED) {
            munmap(m, op + data);
            return seer_err(SEER_ERR_OOM, "KV cache: cannot reserve %.1f MiB of address space for its %d-bit copy",
                            h.q_map_bytes / 1048576.0, g->kv_bits);
        }
        h.q = q;
    }
    *(cpu_kv_hdr *)m = h;
    *out = (char *)m + op;
    return SEER_OK;
}

/* Commits the quantised copy up to want bytes (the same growth rule as the rows). */
static seer_status kvq_commit(cpu_kv_hdr *h, size_t want) {
    if (want <= h->q_committed)
        return SEER_OK;
    const size_t op = os_page(), step = commit_step(h->q_committed, CPU_KV_CHUNK / 8);
    size_t to = h->q_committed + step > want ? h->q_committed + step : want;
    to = (to + op - 1) / op * op;
    if (to > h->q_map_bytes)
        to = h->q_map_bytes;
    if (mprotect(h->q + h->q_committed, to - h->q_committed, PROT_READ | PROT_WRITE) != 0)
        return seer_err(SEER_ERR_OOM, "KV cache: cannot commit %.1f MiB more of its quantised copy",
                        (to - h->q_committed) / 1048576.0);
    memset(h->q + h->q_committed, 0xFF, to - h->q_committed);
    h->q_committed = to;
    return SEER_OK;
}

static seer_status cpu_kv_reserve(seer_backend *be, void *kv, const seer_kv_geom *g, int n_pages,
                                  int *n_committed) {
    cpu_kv_hdr *h = kv_hdr(kv);
    const size_t page = seer_kv_geom_page_bytes(g, sizeof(float));
    if (n_pages < 0 || n_pages > g->n_pages)
        return seer_err(SEER_ERR_INVALID_ARG, "KV cache: %d pages asked of a pool of %d", n_pages,
                        g->n_pages);
    const size_t want = (size_t)n_pages * page;
    /* The copy first: a failure there leaves the rows' storage as it was. */
    if (h->q)
        SEER_TRY(kvq_commit(h, (size_t)n_pages * kvq_page_bytes(g)));
    if (want > h->committed) {
        const size_t op = os_page(), step = commit_step(h->committed, CPU_KV_CHUNK);
        size_t to = h->committed + step > want ? h->committed + step : want;
        to = (to + op - 1) / op * op;
        if (to > h->data_bytes)
            to = h->data_bytes;
        char *from = (char *)kv + h->committed;
        if (mprotect(from, to - h->committed, PROT_READ | PROT_WRITE) != 0)
            return seer_err(SEER_ERR_OOM, "KV cache: cannot commit %.1f MiB more (%.1f MiB committed)",
                            (to - h->committed) / 1048576.0, h->committed / 1048576.0);
        /* NaN-poisoned so that reading a slot nothing wrote shows up in tests (in a quantised
         * row the scales, 4-byte aligned, become NaN). */
        float *f = (float *)from;
        for (size_t i = 0; i < (to - h->committed) / sizeof(float); i++)
            f[i] = NAN;
        h->committed = to;
    }
    size_t have = h->committed / page;
    if (h->q && h->q_committed / kvq_page_bytes(g) < have)
        have = h->q_committed / kvq_page_bytes(g);
    *n_committed = have < (size_t)g->n_pages ? (int)have : g->n_pages;
    return SEER_OK;
}

/* MemAvailable of /proc/meminfo: what the kernel can give without swapping. */
static seer_status cpu_kv_mem_available(seer_backend *be, uint64_t *bytes) {
    *bytes = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    if (f)
        fclose(f);
    if (found) {
        *bytes = (uint64_t)kb * 1024;
        return SEER_OK;
    }
    long pages = sysconf(_SC_AVPHYS_PAGES);
    if (pages <= 0)
        return seer_err(SEER_ERR_UNSUPPORTED, "cannot tell how much memory is free");
    *bytes = (uint64_t)pages * os_page();
    return SEER_OK;
}

static void cpu_kv_free(seer_backend *be, void *kv) {
    if (!kv)
        return;
    cpu_kv_hdr *h = kv_hdr(kv);
    if (h->q)
        munmap(h->q, h->q_map_bytes);
    munmap(h, h->map_bytes);
}

static seer_status cpu_kv_copy_pages(seer_backend *be, void *kv, const seer_kv_geom *g,
                                     const seer_kv_copy *copies, int n) {
    const size_t page = seer_kv_geom_page_bytes(g, sizeof(float));
    uint8_t *q = g->kv_bits ? seer_cpu_kv_qdata(kv) : NULL;
    const size_t qpage = kvq_page_bytes(g);
    for (int i = 0; i < n; i++) {
        memcpy((char *)kv + page * copies[i].dst, (char *)kv + page * copies[i].src, page);
        if (q)
            memcpy(q + qpage * copies[i].dst, q + qpage * copies[i].src, qpage);
    }
    return SEER_OK;
}

/* The host tier's copies: memcpy between the pool and a second pool in host memory, done
 * before they return (every ticket is complete at once). */
static size_t cpu_kv_page_bytes(seer_backend *be, const seer_kv_geom *g) {
    return kv_bytes(g) / g->n_pages + kvq_page_bytes(g);
}

static seer_status cpu_kv_host_copy(seer_backend *be, void *kv, const seer_kv_geom *g, void *host,
                                    size_t stride, const int32_t *pages, const int32_t *slots, int n,
                                    bool to_host, uint64_t *ticket) {
    const size_t page = kv_bytes(g) / g->n_pages, qpage = kvq_page_bytes(g);
    SEER_TRY(seer_kv_host_check(g, stride, page + qpage, pages, slots, n));
    uint8_t *q = g->kv_bits ? seer_cpu_kv_qdata(kv) : NULL;
    for (int i = 0; i < n; i++) {
        char *h = (char *)host + stride * (size_t)slots[i], *d = (char *)kv + page * (size_t)pages[i];
        memcpy(to_host ? h : d, to_host ? d : h, page);
        if (q)
            memcpy(to_host ? h + page : (char *)q + qpage * pages[i],
                   to_host ? (char *)q + qpage * pages[i] : h + page, qpage);
    }
    *ticket = 0;
    return SEER_OK;
}

static seer_status cpu_kv_host_done(seer_backend *be, uint64_t ticket, bool *done) {
    *done = true;
    return SEER_OK;
}

static seer_status cpu_kv_host_wait(seer_backend *be, uint64_t ticket) { return SEER_OK; }

static seer_status cpu_kv_move_rows(seer_backend *be, void *kv, const seer_kv_geom *g,
                                    const int32_t *src_page, const int32_t *src_row,
                                    const int32_t *dst_page, const int32_t *dst_row, int n) {
    SEER_TRY(seer_kv_move_check(g, src_page, src_row, dst_page, dst_row, n));
    const int kvd = g->n_kv_heads * g->head_dim;
    const size_t bytes = seer_kv_geom_row_bytes(g, sizeof(float));
    /* the quantised copy's rows move with the rows they copy */
    uint8_t *q = g->kv_bits ? seer_cpu_kv_qdata(kv) : NULL;
    const size_t qbytes = q ? seer_kvq_row_bytes(kvd, g->kv_bits) : 0;
    for (int i = 0; i < n; i++)
        for (int l = 0; l < g->n_layers; l++)
            for (int w = 0; w < 2; w++) {
                uint8_t *d = seer_cpu_kv_qrow(kv, g, dst_page[i], l, w, dst_row[i]);
                const uint8_t *s = seer_cpu_kv_qrow(kv, g, src_page[i], l, w, src_row[i]);
                if (d == s)
                    continue;
                memcpy(d, s, bytes);
                if (q)
                    memcpy(q + seer_kvq_row_off(g->n_layers, g->page_size, kvd, g->kv_bits, dst_page[i], l, w,
                                                dst_row[i]),
                           q + seer_kvq_row_off(g->n_layers, g->page_size, kvd, g->kv_bits, src_page[i], l, w,
                                                src_row[i]),
                           qbytes);
            }
    return SEER_OK;
}

static seer_status cpu_kv_store(seer_backend *be, void *kv, const seer_kv_geom *g, int layer,
                                const float *k, const float *v, const int32_t *page,
                                const int32_t *row, int T) {
    size_t kvd = (size_t)g->n_kv_heads * g->head_dim;
    uint8_t *q = g->kv_bits ? seer_cpu_kv_qdata(kv) : NULL;
    for (int t = 0; t < T; t++) {
        if (g->kv_type != SEER_KV_FULL) { /* only the quantised rows are kept */
            for (int w = 0; w < 2; w++)
                seer_kvt_quantize_row(g->kv_type, (w ? v : k) + t * kvd, g->n_kv_heads, g->head_dim,
                                      seer_cpu_kv_qrow(kv, g, page[t], layer, w, row[t]));
            continue;
        }
        memcpy(seer_cpu_kv_row(kv, g, page[t], layer, 0, row[t]), k + t * kvd, kvd * sizeof(float));
        memcpy(seer_cpu_kv_row(kv, g, page[t], layer, 1, row[t]), v + t * kvd, kvd * sizeof(float));
        for (int w = 0; q && w < 2; w++)
            seer_kvq_quantize_row((w ? v : k) + t * kvd, (int)kvd, g->kv_bits,
                                  q + seer_kvq_row_off(g->n_layers, g->page_size, (int)kvd, g->kv_bits,
                                                       page[t], layer, w, row[t]));
    }
    return SEER_OK;
}

static seer_status cpu_kv_read(seer_backend *be, const void *kv, const seer_kv_geom *g, int layer,
                               int which, const int32_t *page, const int32_t *row, int n, float *out) {
    size_t kvd = (size_t)g->n_kv_heads * g->head_dim;
    for (int i = 0; i < n; i++) {
        if (g->kv_type == SEER_KV_FULL) {
            memcpy(out + i * kvd, seer_cpu_kv_row(kv, g, page[i], layer, which, row[i]), kvd * sizeof(float));
            continue;
        }
        for (int h = 0; h < g->n_kv_heads; h++) /* the values every reader of the rows sees */
            seer_kvt_dequantize_head(g->kv_type, seer_cpu_kv_qrow(kv, g, page[i], layer, which, row[i]),
                                     g->n_kv_heads, g->head_dim, h, out + i * kvd + (size_t)h * g->head_dim);
    }
    return SEER_OK;
}

static seer_status cpu_embed(seer_backend *be, float *y, const seer_weight *emb,
                             const int32_t *tokens, int T) {
    if (emb->dtype != GGML_TYPE_F32) {
        const ggml_type ty = (ggml_type)emb->dtype;
        const size_t row = (size_t)(emb->cols / seer_ggml_type_block_elems(ty)) * seer_ggml_type_block_bytes(ty);
        for (int t = 0; t < T; t++)
            SEER_TRY(seer_gguf_dequant(ty, (const char *)emb->data + (size_t)tokens[t] * row,
                                  y + (size_t)t * emb->cols, (uint64_t)emb->cols));
        return SEER_OK;
    }
    for (int t = 0; t < T; t++)
        memcpy(y + (size_t)t * emb->cols, (const float *)emb->data + (size_t)tokens[t] * emb->cols,
               emb->cols * sizeof(float));
    return SEER_OK;
}

typedef struct {
    float *y;
    const float *x, *w;
    int D;
    float eps;
} rmsnorm_args;

static void rmsnorm_rows(void *ctx, int64_t t0, int64_t t1) {
    const rmsnorm_args *a = ctx;
    const int D = a->D;
    const float *w = a->w;
    for (int64_t t = t0; t < t1; t++) {
        const float *xr = a->x + (size_t)t * D;
        float *yr = a->y + (size_t)t * D;
        float ss = 0.f;
        for (int i = 0; i < D; i++)
            ss += xr[i] * xr[i];
        float r = 1.f / sqrtf(ss / D + a->eps);
        for (int i = 0; i < D; i++)
            yr[i] = xr[i] * r * w[i];
    }
}

static seer_status cpu_rmsnorm(seer_backend *be, float *y, const float *x, const float *w, int T,
                               int D, float eps) {
    rmsnorm_args a = {y, x, w, D, eps};
    seer_cpu_for(be, (size_t)T * D > ((size_t)1 << 16), T, rmsnorm_rows, &a);
    return SEER_OK;
}

static seer_status cpu_rope(seer_backend *be, float *x, const int32_t *pos, int T, int n_heads,
                            int head_dim, const float *inv_freq, int neox) {
    const int half = head_dim / 2;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            /* Angle in double: positions reach 128K and more, where f32 angles lose digits. */
            double a = (double)pos[t] * inv_freq[i];
            float c = (float)cos(a), s = (float)sin(a);
            for (int h = 0; h < n_heads; h++) {
                float *xh = x + ((size_t)t * n_heads + h) * head_dim;
                int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                float x0 = xh[i0], x1 = xh[i1];
                xh[i0] = x0 * c - x1 * s;
                xh[i1] = x0 * s + x1 * c;
            }
        }
    }
    return SEER_OK;
}

typedef struct {
    float *y;
    const float *g, *u;
} swiglu_args;

static void swiglu_range(void *ctx, int64_t i0, int64_t i1) {
    const swiglu_args *a = ctx;
    for (int64_t i = i0; i < i1; i++)
        a->y[i] = a->g[i] / (1.f + expf(-a->g[i])) * a->u[i];
}

static seer_status cpu_swiglu(seer_backend *be, float *y, const float *g, const float *u,
                              size_t n) {
    swiglu_args a = {y, g, u};
    seer_cpu_for(be, n > 65536, (int64_t)n, swiglu_range, &a);
    return SEER_OK;
}

static void geglu_range(void *ctx, int64_t i0, int64_t i1) {
    const swiglu_args *a = ctx;
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = i0; i < i1; i++) {
        const float x = a->g[i];
        a->y[i] = 0.5f * x * (1.f + tanhf(c * x * (1.f + 0.044715f * x * x))) * a->u[i];
    }
}

static seer_status cpu_geglu(seer_backend *be, float *y, const float *g, const float *u,
                             size_t n) {
    swiglu_args a = {y, g, u};
    seer_cpu_for(be, n > 65536, (int64_t)n, geglu_range, &a);
    return SEER_OK;
}

static seer_status cpu_scale(seer_backend *be, float *x, float s, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
    return SEER_OK;
}

static seer_status cpu_softcap(seer_backend *be, float *x, float c, size_t n) {
    const float inv = 1.f / c; /* as llama.cpp: times 1/c, tanh, times c */
    for (size_t i = 0; i < n; i++)
        x[i] = c * tanhf(x[i] * inv);
    return SEER_OK;
}

static seer_status cpu_weight_rows(seer_backend *be, const seer_weight *w, int r0, int n, seer_weight *out) {
    const int be_ = seer_ggml_type_block_elems(w->dtype), bb = seer_ggml_type_block_bytes(w->dtype);
    if (r0 < 0 || n <= 0 || r0 + n > w->rows || be_ <= 0 || bb <= 0 || w->cols % be_)
        return seer_err(SEER_ERR_INVALID_ARG, "weight rows [%d, %d) of a [%d][%d] weight", r0, r0 + n,
                        w->rows, w->cols);
    memset(out, 0, sizeof *out);
    out->data = (char *)w->data + (size_t)r0 * (size_t)(w->cols / be_) * (size_t)bb;
    out->rows = n;
    out->cols = w->cols;
    out->dtype = w->dtype;
    return SEER_OK;
}

static seer_status cpu_add(seer_backend *be, float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
    return SEER_OK;
}

static seer_status cpu_gather_rows(seer_backend *be, float *y, const float *x, const int32_t *rows,
                                   int n_rows, int D) {
    for (int i = 0; i < n_rows; i++)
        memmove(y + (size_t)i * D, x + (size_t)rows[i] * D, D * sizeof(float));
    return SEER_OK;
}

static seer_status cpu_argmax_rows(seer_backend *be, int32_t *ids, const float *logits, int n, int V) {
    for (int r = 0; r < n; r++) {
        const float *x = logits + (size_t)r * V;
        int best = -1;
        for (int i = 0; i < V; i++)
            if (!isnan(x[i]) && (best < 0 || x[i] > x[best]))
                best = i;
        ids[r] = best < 0 ? 0 : best;
    }
    return SEER_OK;
}

static seer_status cpu_logprob_rows(seer_backend *be, const seer_logprob_row *rows, int n, int V, int k,
                                    float *lp, int32_t *top_id, float *top_lp) {
    (void)be;
    if (k < 0 || k > SEER_LOGPROB_TOP_MAX || k > V)
        return seer_err(SEER_ERR_INVALID_ARG, "logprob_rows: %d alternatives (0..%d)", k, SEER_LOGPROB_TOP_MAX);
    for (int r = 0; r < n; r++) {
        if (rows[r].token < 0 || rows[r].token >= V)
            return seer_err(SEER_ERR_INVALID_ARG, "logprob_rows: token %d outside the vocabulary", rows[r].token);
        seer_logprob_row_ref(rows[r].logits, V, rows[r].token, k, &lp[r], k ? top_id + (size_t)r * k : NULL,
                             k ? top_lp + (size_t)r * k : NULL);
    }
    return SEER_OK;
}

/* ---- sampling: the host sampler itself, so that this backend is the reference ---------- */

/* The sampler's scratch for V, then `floats` more floats (8-byte aligned: malloc'd). */
static seer_status cpu_smp_scratch(seer_backend *be, int V, size_t floats, void **scratch,
                                   float **f) {
    seer_cpu *c = be->impl;
    const size_t sb = (seer_sampler_scratch_bytes(V) + 7) / 8 * 8;
    const size_t need = sb + floats * sizeof(float);
    if (need > c->smp_cap) {
        void *p = malloc(need);
        if (!p)
            return seer_err(SEER_ERR_OOM, "sampling: out of memory for a vocabulary of %d", V);
        free(c->smp);
        c->smp = p;
        c->smp_cap = need;
    }
    *scratch = c->smp;
    *f = (float *)((char *)c->smp + sb);
    return SEER_OK;
}

static seer_status cpu_sample_rows(seer_backend *be, const seer_sample_row *rows, int n, int V,
                                   int32_t *ids) {
    if (n <= 0)
        return SEER_OK;
    if (V <= 0)
        return seer_err(SEER_ERR_INVALID_ARG, "sample_rows: vocabulary of %d", V);
    for (int r = 0; r < n; r++)
        SEER_TRY(seer_sampler_params_check(rows[r].sp));
    void *scratch = NULL;
    float *tmp = NULL;
    SEER_TRY(cpu_smp_scratch(be, V, (size_t)V, &scratch, &tmp));
    for (int r = 0; r < n; r++) {
        const seer_sample_row *w = &rows[r];
        float *p = w->probs ? w->probs : tmp;
        seer_sampler_probs_masked(w->sp, w->hist, w->n_hist, w->mask, w->logits, p, V, scratch);
        if (!ids)
            continue;
        if (!(w->sp->temperature > 0.0f))
            ids[r] = seer_argmax(p, V);
        else
            ids[r] = w->u < 0 ? -1 : seer_sample_from_probs(p, V, w->u);
    }
    return SEER_OK;
}

static seer_status cpu_accept_chains(seer_backend *be, const seer_accept_chain *chains, int n,
                                     int V, int32_t *n_acc, int32_t *next) {
    if (n <= 0)
        return SEER_OK;
    void *unused = NULL;
    float *tmp = NULL;
    SEER_TRY(cpu_smp_scratch(be, V, 2 * (size_t)V, &unused, &tmp));
    for (int k = 0; k < n; k++) {
        const seer_accept_chain *ch = &chains[k];
        int i = 0;
        for (;; i++) {
            const float *p = ch->p + (size_t)i * V;
            if (i == ch->nd) {
                next[k] = seer_sample_from_probs(p, V, ch->u[i]);
                break;
            }
            const int32_t x = ch->draft[i];
            const float *q = tmp;
            if (ch->q)
                q = ch->q + (size_t)i * V;
            else
                seer_probs_one_hot(tmp, V, x);
            const float px = x >= 0 && x < V ? p[x] : 0.0f, qx = x >= 0 && x < V ? q[x] : 0.0f;
            if (qx > 0 && ch->u[i] * qx < px)
                continue;
            next[k] = ch->resample_from_p ? seer_sample_from_probs(p, V, ch->u[i + 1])
                                          : seer_sample_residual(p, q, V, ch->u[i + 1], tmp + V);
            break;
        }
        n_acc[k] = i;
    }
    return SEER_OK;
}

/* ---- synthetic models and the bandwidth probe (benchmarks) ------------------------------ */

typedef struct {
    float *w;
    uint64_t seed;
    float mul;
} synth_args;

static void synth_range(void *ctx, int64_t i0, int64_t i1) {
    const synth_args *a = ctx;
    for (int64_t i = i0; i < i1; i++)
        a->w[i] = seer_synth_value(a->seed, (uint64_t)i, a->mul);
}

/* The tree rule of seer_accept_tree on host vectors: w the current p, qw the current q. */
static seer_status cpu_accept_trees(seer_backend *be, const seer_accept_tree *trees, int n, int V,
                                    int stride, int32_t *n_acc, int32_t *path, int32_t *next,
                                    int32_t *n_u) {
    if (n <= 0)
        return SEER_OK;
    void *unused = NULL;
    float *w = NULL;
    SEER_TRY(cpu_smp_scratch(be, V, 2 * (size_t)V, &unused, &w));
    float *qw = w + V;
    for (int k = 0; k < n; k++) {
        const seer_accept_tree *t = &trees[k];
        int node = -1, a = 0, used = 0;
        for (;;) {
            memcpy(w, t->p + (size_t)(node + 1) * V, sizeof(float) * V);
            int first = -1;
            for (int c = node + 1; c < t->n && first < 0; c++)
                if (t->parent[c] == node)
                    first = c;
            if (first < 0)
                break;
            if (t->q)
                memcpy(qw, t->q + (size_t)(node + 1) * V, sizeof(float) * V);
            else
                seer_probs_one_hot(qw, V, t->tok[first]);
            int took = -1;
            for (int c = first; c < t->n && took < 0; c++) {
                if (t->parent[c] != node)
                    continue;
                const int32_t x = t->tok[c];
                const bool in = x >= 0 && x < V;
                const float px = in ? w[x] : 0.f, qx = in ? qw[x] : 0.f;
                const double u = t->u[used++]; /* every child tried takes its uniform */
                if (qx > 0 && u * qx < px) {
                    took = c;
                    break;
                }
                if (!t->resample_from_p) {
                    double z = 0;
                    for (int v = 0; v < V; v++)
                        z += w[v] > qw[v] ? w[v] - qw[v] : 0.f;
                    if (z > 0)
                        for (int v = 0; v < V; v++)
                            w[v] = w[v] > qw[v] ? (float)((w[v] - qw[v]) / z) : 0.f;
                }
                if (in) {
                    double zq = 0;
                    qw[x] = 0;
                    for (int v = 0; v < V; v++)
                        zq += qw[v];
                    for (int v = 0; v < V; v++)
                        qw[v] = zq > 0 ? (float)(qw[v] / zq) : 0.f;
                }
            }
            if (took < 0)
                break;
            path[(size_t)k * stride + a++] = took;
            node = took;
        }
        n_acc[k] = a;
        next[k] = seer_sample_from_probs(w, V, t->u[used++]);
        n_u[k] = used;
    }
    return SEER_OK;
}

static seer_status cpu_weight_random(seer_backend *be, int rows, int cols, uint64_t seed,
                                     float scale, seer_weight *out) {
    if (rows < 1 || cols < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_random: shape [%d][%d]", rows, cols);
    const size_t n = (size_t)rows * cols;
    void *buf = NULL;
    SEER_TRY(cpu_alloc(be, n * sizeof(float), &buf));
    synth_args a = {buf, seed, seer_synth_mul(scale)};
    seer_cpu_for(be, n > ((size_t)1 << 16), (int64_t)n, synth_range, &a);
    memset(out, 0, sizeof *out);
    out->data = buf;
    out->rows = rows;
    out->cols = cols;
    out->dtype = GGML_TYPE_F32;
    out->owned = true;
    return SEER_OK;
}

typedef struct {
    void *kv;
    const seer_kv_geom *g;
    const int32_t *pages;
    int row0, n;
    uint64_t seed;
    float mul;
    _Atomic int oom;
} kvfill_args;

/* Items are (layer*2 + K/V, row) pairs. */
static void kvfill_range(void *ctx, int64_t j0, int64_t j1) {
    const kvfill_args *a = ctx;
    const seer_kv_geom *g = a->g;
    const size_t kvd = (size_t)g->n_kv_heads * g->head_dim;
    /* quantised rows are drawn into a row of f32 first, as a store would get them */
    float *tmp = g->kv_type != SEER_KV_FULL ? malloc(kvd * sizeof(float)) : NULL;
    if (g->kv_type != SEER_KV_FULL && !tmp) {
        atomic_store(&((kvfill_args *)ctx)->oom, 1);
        return;
    }
    for (int64_t j = j0; j < j1; j++) {
        const int lw = (int)(j / a->n), i = (int)(j % a->n);
        const int slot = a->row0 + i, pg = a->pages[slot / g->page_size], r = slot % g->page_size;
        float *dst = tmp ? tmp : seer_cpu_kv_row(a->kv, g, pg, lw / 2, lw % 2, r);
        const uint64_t base = ((uint64_t)lw * a->n + i) * kvd;
        for (size_t e = 0; e < kvd; e++)
            dst[e] = seer_synth_value(a->seed, base + e, a->mul);
        if (tmp)
            seer_kvt_quantize_row(g->kv_type, tmp, g->n_kv_heads, g->head_dim,
                                  seer_cpu_kv_qrow(a->kv, g, pg, lw / 2, lw % 2, r));
        uint8_t *q = g->kv_bits ? seer_cpu_kv_qdata(a->kv) : NULL;
        if (q)
            seer_kvq_quantize_row(dst, (int)kvd, g->kv_bits,
                                  q + seer_kvq_row_off(g->n_layers, g->page_size, (int)kvd, g->kv_bits,
                                                       a->pages[slot / g->page_size], lw / 2, lw % 2,
                                                       slot % g->page_size));
    }
    free(tmp);
}

static seer_status cpu_kv_fill_random(seer_backend *be, void *kv, const seer_kv_geom *g,
                                      const int32_t *pages, int n_pages, int row0, int n,
                                      uint64_t seed, float scale) {
    if (n <= 0)
        return SEER_OK;
    SEER_TRY(seer_kv_fill_check(g, pages, n_pages, row0, n));
    kvfill_args a = {kv, g, pages, row0, n, seed, seer_synth_mul(scale), 0};
    const size_t kvd = (size_t)g->n_kv_heads * g->head_dim;
    seer_cpu_for(be, (size_t)n * kvd > ((size_t)1 << 14), (int64_t)g->n_layers * 2 * n, kvfill_range,
                 &a);
    if (atomic_load(&a.oom))
        return seer_err(SEER_ERR_OOM, "kv_fill_random: out of memory");
    return SEER_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    char *dst;
    const char *src;
    size_t bytes, chunk;
} copy_args;

static void copy_part(void *ctx, int64_t k0, int64_t k1) {
    const copy_args *a = ctx;
    for (int64_t k = k0; k < k1; k++) {
        size_t off = (size_t)k * a->chunk;
        if (off < a->bytes)
            memcpy(a->dst + off, a->src + off, a->bytes - off < a->chunk ? a->bytes - off : a->chunk);
    }
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static seer_status cpu_copy_bandwidth(seer_backend *be, double *bytes_per_s) {
    /* Far beyond the last-level cache; copied by all threads, as the ops read memory. */
    size_t bytes = (size_t)256 << 20;
    char *src = NULL, *dst = NULL;
    while (bytes >= ((size_t)16 << 20)) {
        src = malloc(bytes);
        dst = malloc(bytes);
        if (src && dst)
            break;
        free(src), free(dst);
        src = dst = NULL;
        bytes /= 2;
    }
    if (!src)
        return seer_err(SEER_ERR_OOM, "copy_bandwidth: no memory for the probe buffers");
    const int nt = seer_cpu_threads(be);
    copy_args a = {dst, src, bytes, (bytes / (size_t)nt + 63) / 64 * 64};
    memset(src, 1, bytes);
    memset(dst, 0, bytes); /* touch the pages before timing */
    enum { REPS = 7 };
    double t[REPS];
    for (int r = -1; r < REPS; r++) {
        double t0 = wall_s();
        seer_cpu_for(be, true, nt, copy_part, &a);
        if (r >= 0)
            t[r] = wall_s() - t0;
    }
    free(src);
    free(dst);
    qsort(t, REPS, sizeof *t, cmp_double);
    *bytes_per_s = t[REPS / 2] > 0 ? 2.0 * bytes / t[REPS / 2] : 0;
    return SEER_OK;
}

/* The host tier's emulation: the "device" is host memory too, so a weight's bytes are its
 * rows of blocks as stored, and staging a layer is a memcpy done before the ops after it
 * (which is what lets CI check streamed layers against resident ones). */
static size_t cpu_weight_bytes(seer_backend *be, const seer_weight *w) {
    const int bel = seer_ggml_type_block_elems(w->dtype), bb = seer_ggml_type_block_bytes(w->dtype);
    if (!w->data || bel <= 0 || bb <= 0)
        return 0;
    return (size_t)w->rows * (size_t)(w->cols / bel) * (size_t)bb;
}

static seer_status cpu_stage(seer_backend *be, int slot, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return SEER_OK;
}

static seer_status cpu_stage_wait(seer_backend *be, int slot) { return SEER_OK; }

/* The emulated tier's "host-to-device" link: a memcpy of 64 MiB, bytes copied per second, the
 * median of five after a warm-up. */
static seer_status cpu_h2d_bandwidth(seer_backend *be, double *bytes_per_s) {
    enum { REPS = 5 };
    const size_t bytes = (size_t)64 << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return seer_err(SEER_ERR_OOM, "h2d_bandwidth: no memory for the probe buffers");
    }
    memset(src, 1, bytes);
    double t[REPS];
    for (int r = -1; r < REPS; r++) {
        struct timespec t0, t1;
        /* the buffers escape, so the copy can move neither past the clock nor out of existence */
        __asm__ volatile("" : : "r"(src), "r"(dst) : "memory");
        clock_gettime(CLOCK_MONOTONIC, &t0);
        memcpy(dst, src, bytes);
        __asm__ volatile("" : : "r"(src), "r"(dst) : "memory");
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (r >= 0)
            t[r] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
    free(src);
    free(dst);
    qsort(t, REPS, sizeof *t, cmp_double);
    *bytes_per_s = t[REPS / 2] > 0 ? (double)bytes / t[REPS / 2] : 0;
    return SEER_OK;
}

static seer_status cpu_sync(seer_backend *be) { return SEER_OK; }

static const seer_backend_ops cpu_ops = {
    .name = "cpu",
    .prompt_cuts_free = true, /* tiles aligned to slot 0 (cpu_attention_tile.c) */
    .free = cpu_free,
    .exec_clone = cpu_exec_clone,
    .alloc = cpu_alloc,
    .dealloc = cpu_dealloc,
    .upload = cpu_copy,
    .download = cpu_copy,
    .weight_load = cpu_weight_load,
    .weight_free = cpu_weight_free,
    .weight_quantize = seer_cpu_weight_quantize,
    .ffn_act_stats = seer_cpu_ffn_act_stats,
    .weight_gather = seer_cpu_weight_gather,
    .ffn_act_hist = seer_cpu_ffn_act_hist,
    .weight_transpose = seer_cpu_weight_transpose,
    .ffn_cats = seer_cpu_ffn_cats,
    .kv_alloc = cpu_kv_alloc,
    .kv_reserve = cpu_kv_reserve,
    .kv_mem_available = cpu_kv_mem_available,
    .kv_free = cpu_kv_free,
    .kv_copy_pages = cpu_kv_copy_pages,
    .kv_page_bytes = cpu_kv_page_bytes,
    .kv_host_copy = cpu_kv_host_copy,
    .kv_host_done = cpu_kv_host_done,
    .kv_host_wait = cpu_kv_host_wait,
    .kv_move_rows = cpu_kv_move_rows,
    .kv_store = cpu_kv_store,
    .kv_read = cpu_kv_read,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = seer_cpu_matmul,
    .rope = cpu_rope,
    .attention = seer_cpu_attention,
    .swiglu = cpu_swiglu,
    .geglu = cpu_geglu,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .weight_rows = cpu_weight_rows,
    .add = cpu_add,
    .gather_rows = cpu_gather_rows,
    .argmax_rows = cpu_argmax_rows,
    .sample_rows = cpu_sample_rows,
    .logprob_rows = cpu_logprob_rows,
    .accept_chains = cpu_accept_chains,
    .accept_trees = cpu_accept_trees,
    .weight_random = cpu_weight_random,
    .kv_fill_random = cpu_kv_fill_random,
    .copy_bandwidth = cpu_copy_bandwidth,
    .sync = cpu_sync,
    .weight_bytes = cpu_weight_bytes,
    .stage = cpu_stage,
    .stage_wait = cpu_stage_wait,
    .h2d_bandwidth = cpu_h2d_bandwidth,
    .comm_init = seer_cpu_comm_init,
    .kv_elem_bytes = sizeof(float),
    .kv_types = 1u << SEER_KV_FULL | 1u << SEER_KV_Q8 | 1u << SEER_KV_Q4,
    .attn_window = true, /* on the reference path (cpu_attention.c) */
    .attn_softcap = true, /* likewise */
    .qk_norm = true,
};

static seer_status cpu_exec_clone(seer_backend *be, seer_backend **out) {
    const seer_cpu *c = be->impl;
    SEER_TRY(seer_backend_cpu_init(c->n_threads, out));
    ((seer_cpu *)(*out)->impl)->isa_cap = c->isa_cap;
    return SEER_OK;
}

seer_status seer_backend_cpu_init(int n_threads, seer_backend **out) {
    seer_backend *be = calloc(1, sizeof *be);
    seer_cpu *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return seer_err(SEER_ERR_OOM, "out of memory");
    }
    if (n_threads <= 0)
        n_threads = seer_cpu_default_threads();
    c->n_threads = n_threads;
    seer_status s = seer_cpu_pool_init(n_threads, &c->pool);
    if (s != SEER_OK) {
        free(be);
        free(c);
        return s;
    }
    be->ops = &cpu_ops;
    be->impl = c;
    *out = be;
    return SEER_OK;
}
