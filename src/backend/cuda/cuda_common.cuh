/*
 * cuda_common.cuh: what the CUDA backend's files share: the backend state, the one accounting
 * allocator every device byte goes through, error checks that turn into statuses, and the
 * device copies of a forward call's index arrays.
 * Not for: kernels (one op family per .cu file) or the op table (cuda_backend.cu).
 *
 * KV storage layout: [n_pages][n_layers][2 (K, V)][Hkv][page_size][Dh] bf16, so that the
 * rows of one (page, layer, head) that attention reads are one contiguous block.
 */
#ifndef SEER_CUDA_COMMON_CUH
#define SEER_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "backend/backend.h"
#include "kv/kv_quant.h"
#include "util/error.h"
}

typedef __nv_bfloat16 bf16;

/* ---- errors --------------------------------------------------------------------------- */

/* SEER_ERR_BACKEND with the failing call, the CUDA error and where it happened. */
seer_status seer_cuda_fail(cudaError_t e, const char *what, const char *file, int line);
seer_status seer_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line);

#define CUDA_TRY(call)                                                      \
    do {                                                                    \
        cudaError_t cuda_try_e_ = (call);                                   \
        if (cuda_try_e_ != cudaSuccess)                                     \
            return seer_cuda_fail(cuda_try_e_, #call, __FILE__, __LINE__);  \
    } while (0)

#define CUBLAS_TRY(call)                                                      \
    do {                                                                      \
        cublasStatus_t cublas_try_s_ = (call);                                \
        if (cublas_try_s_ != CUBLAS_STATUS_SUCCESS)                           \
            return seer_cublas_fail(cublas_try_s_, #call, __FILE__, __LINE__); \
    } while (0)

/* After a kernel launch: a bad configuration (or an earlier asynchronous fault) shows up
 * here; name is the kernel. */
#define LAUNCH_TRY(name)                                                       \
    do {                                                                       \
        cudaError_t cuda_try_e_ = cudaGetLastError();                          \
        if (cuda_try_e_ != cudaSuccess)                                        \
            return seer_cuda_fail(cuda_try_e_, "launch of " name, __FILE__, __LINE__); \
    } while (0)

/* ---- batch invariance and recorded forward calls ------------------------------------- */

/* Largest row count (tokens of a forward call, rows x of a matmul) for which a row's results
 * do not depend on the other rows of the call: matmuls of up to this many rows run our own
 * kernel with a fixed reduction order (matmul.cu), larger ones cuBLAS, whose kernel choice
 * depends on the row count. Greedy speculation is bit-identical to plain decoding only while
 * the decode (T = sequences) and verification (T = B * (G + 1)) calls stay within it. Forward
 * calls of up to this many tokens are also the ones recorded as CUDA graphs (graph.cu). */
#define SEER_CUDA_INVARIANT_MAX_T 256
/* A key is recorded again after a failed recording (another thread's device-wide
 * synchronisation breaks one under way) up to this many failures. */
#define SEER_CUDA_GRAPH_TRIES 3
/* Recorded forward calls kept per backend (least recently used goes first). */
#define SEER_CUDA_GRAPHS_MAX 24

/* ---- tensor cores --------------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b); /* a in the low half */
    return *(uint32_t *)&h;
}

/* A result stored as f32, or rounded to bf16; four of them at y + 4 i (16 or 8 bytes). */
static __device__ __forceinline__ void store_f(float *y, float v) { *y = v; }
static __device__ __forceinline__ void store_f(bf16 *y, float v) { *y = __float2bfloat16_rn(v); }
static __device__ __forceinline__ void store_f4(float *y, size_t i, float4 v) { ((float4 *)y)[i] = v; }
static __device__ __forceinline__ void store_f4(bf16 *y, size_t i, float4 v) {
    ((uint2 *)y)[i] = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
}

static __device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1,
                                                uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* ---- programmatic dependent launch ------------------------------------------------------ */

/* A kernel launched with seer_cuda_launch may start while the kernel before it in the stream
 * finishes: it must call pdl_wait() before reading anything that kernel writes; pdl_trigger()
 * lets the next one start likewise. Without the launch attribute both do nothing. */
static __device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;"); }
static __device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/* ---- state ---------------------------------------------------------------------------- */

/* A grow-only device buffer owned by the backend. */
typedef struct {
    void *p;
    size_t cap;
} seer_cuda_buf;

/* Which argument of the ops an uploaded index array is. */
enum { SEER_IDX_TOKENS, SEER_IDX_POS, SEER_IDX_PAGE, SEER_IDX_ROW, SEER_IDX_OUT_ROWS, SEER_IDX_COUNT };

typedef struct {
    const int32_t *host;   /* the pointer batch_begin was given (NULL: none) */
    int n;
    int n_pad;             /* entries of the device copy: n, then padding up to the bucket */
    const int32_t *dev;    /* its device copy */
    const int32_t *staged; /* its copy in the pinned staging buffer, to detect reuse */
} seer_cuda_idx;

/* Attention's view of the batch, built on the host by batch_begin (see attention_plan.cu). All
 * pointers are device memory inside the batch buffer. */
typedef struct {
    bool valid;
    seer_attn_batch ab;          /* the struct as batch_begin saw it (its window aside: the
                                  * plan serves every layer, windowed or not) */
    /* staged copies, to check that a later attention call still describes the same batch */
    const int32_t *h_tok_seq, *h_tok_slot, *h_tok_pos, *h_seq_len0, *h_seq_toks, *h_page_off, *h_pages;
    const uint8_t *h_mask;
    int T, n_seq;
    int min_layers_view;         /* smallest n_layers_view > 1 of any view; INT32_MAX if none */
    const int32_t *desc;         /* device: the header and arrays the kernels read (attention.cu) */
    long long n_work;            /* (token, split, head chunk) items of the partial kernel */
    int grid;                    /* its blocks op by op: min(n_work, resident capacity) */
    int grid_bucket;             /* its blocks in a recorded call: a power of two, capped */
    int grid_dec, grid_dec_bucket; /* the same for the decode kind (attention_tc.cu); 0: none */
    int grid_pre, grid_pre_bucket; /* ... and for the prefill kind */
    int grid_pre_mma, grid_pre_mma_bucket; /* ... on its mma.sync kernel, where attention_wgmma.cu
                                  * serves the kind but a call's window or soft-capping rules
                                  * it out (attention_tc.cu) */
    bool split;                  /* some token has more than one split */
    bool need_combine;           /* ... which the partial kernel does not merge: the combine runs */
    bool tc;                     /* the tensor-core kernel serves this batch (attention_tc.cu) */
    bool pre_fixed;              /* prompt tokens split at fixed key positions (attention_tc.cu):
                                  * the mma.sync prefill kind serves them, never attention_wgmma */
} seer_cuda_attn;

/* How the ops of the current forward call run (graph.cu). batch_begin resets it. */
typedef struct {
    int T, n_out;          /* the batch's sizes */
    int T_pad, n_out_pad;  /* the bucket the index arrays are padded to */
    bool padded;           /* the ops are issued at the padded sizes */
    bool capturing;        /* ... and recorded into a graph, not run */
    int entry;             /* graph cache entry of this call; -1 none */
    int held;              /* entry held by forward_begin_hold (a replay) or forward_end_hold
                            * (a new recording), not yet launched; -1 none */
    bool held_replay;
} seer_cuda_fw;

/* A recorded forward call: the key and sizes it was recorded for and the allocator generation
 * its device pointers belong to. */
typedef struct {
    const void *key;
    int T_pad, n_out_pad, att_grid, att_grid_dec, att_grid_pre;
    bool att_split, att_combine, att_pre_fixed, warm;
    int failed; /* recordings of this key that failed: after SEER_CUDA_GRAPH_TRIES, op by op */
    unsigned long gen, last_use;
    cudaGraphExec_t exec;  /* NULL: seen (warm) but not recorded yet */
} seer_cuda_graph;

/* What the RoPE table holds (rope.cu). */
typedef struct {
    bool valid;
    unsigned long epoch;
    const float *inv_freq;
    int half, T;
} seer_cuda_rope_key;

/* What every instance of the backend on one device shares: the accounting allocator and the
 * KV storages. The model's instance holds the weights through it, and each context's
 * instance (exec_clone) its own execution state beside it, so contexts of one model may run
 * in different threads; mu guards everything here. */
typedef struct {
    pthread_mutex_t mu;
    int refs; /* instances using it */
    /* every live device allocation and its size */
    size_t in_use, peak;
    struct seer_cuda_alloc_rec *tab;
    size_t tab_cap, tab_live, tab_used; /* used counts tombstones too */
    struct seer_cuda_kv_pool *kv_pools; /* kv.cu: KV storages, reserved whole, mapped as they grow */
} seer_cuda_dev;

/* Each op family's own scratch and state, defined, made and freed by its files: the instance
 * holds a pointer to each (seer_cuda_families_init / _free in cuda_backend.cu list them). */
typedef struct seer_cuda_mm seer_cuda_mm;     /* matmul.cuh: the matmuls */
typedef struct seer_cuda_att seer_cuda_att;   /* attention.cuh: attention */
typedef struct seer_cuda_smp seer_cuda_smp;   /* sample.cu: sampling and acceptance */
typedef struct seer_cuda_rot seer_cuda_rot;   /* rope.cu: the RoPE table */
typedef struct seer_cuda_kvs seer_cuda_kvs;   /* kv.cu: kv_read's rows */
typedef struct seer_cuda_ew seer_cuda_ew;     /* elementwise.cu: gather_rows */
typedef struct seer_cuda_lp seer_cuda_lp;     /* logprob.cu: logprob_rows */
typedef struct seer_cuda_comm seer_cuda_comm; /* comm_nccl.cu: the collectives' staging */
typedef struct seer_cuda_kvh seer_cuda_kvh;   /* kv_host.cu: the host tier's copy stream */
typedef struct seer_cuda_stg seer_cuda_stg;   /* stage.cu: the weights' copy stream */
typedef struct seer_cuda_cats seer_cuda_cats; /* sparse_cats.cu: ffn_cats' lists and partial sums */

/* One instance: the shared device state and this instance's own stream, graphs, staging of
 * the call's index arrays and tuning; each op family's state behind its pointer. */
typedef struct seer_cuda {
    int device;
    int n_sm;
    size_t smem_optin;
    seer_cuda_dev *dev;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;

    seer_cuda_buf fallback[2];/* index arrays an op uploads itself (no batch_begin copy) */
    seer_cuda_mm *mm;
    seer_cuda_att *attn;
    seer_cuda_smp *smp;
    seer_cuda_rot *rope;
    seer_cuda_kvs *kvs;
    seer_cuda_ew *ew;
    seer_cuda_lp *lp;
    seer_cuda_comm *comm;
    seer_cuda_kvh *kvh;
    seer_cuda_stg *stg;
    seer_cuda_cats *cats;

    /* batch_begin: one pinned staging buffer, one device buffer, both grow-only */
    int32_t *stage;
    size_t stage_cap;         /* bytes */
    cudaEvent_t stage_done;
    bool stage_pending;
    seer_cuda_buf batch;
    seer_cuda_idx idx[SEER_IDX_COUNT];
    seer_cuda_attn att;       /* attention's plan of the current call (batch_begin) */

    /* tuning of the matmuls (matmul.cu), fixed at start-up */
    bool mm_force_blas;       /* seer_cuda_tuning.matmul_cublas: benchmarks only, not invariant */
    bool mm_pdl;              /* programmatic dependent launch (seer_cuda_tuning.pdl) */
    int mm_tile;              /* tokens per block, 8 to 64 (seer_cuda_tuning.mm_tile) */
    int mm_tile_long;         /* ... for bf16 weights whose warps run >= 8 K steps (48; the
                               * same as mm_tile when seer_cuda_tuning.mm_tile sets it) */
    /* the split over K (mm_kb): blocks aimed for per multiprocessor, and the fewest K steps a
     * warp keeps; fixed at start-up (the lab, lab/matmul_lab.cu, sweeps them): the split is
     * part of every element's summation order */
    int mm_waves, mm_min_steps;
    int mm_xb_min_t;          /* bf16 weights: from this many tokens x is rounded to bf16 once
                               * before the matmul reads it (seer_cuda_tuning.mm_xb_min) */
    /* matmul_qt.cu: weights of its types kept as row blocks (seer_cuda_tuning.qt false: in
     * matmul_q.cu's planes; fixed at start-up, as the weights' layout follows it), and the most
     * tokens its GEMV takes (the tensor-core kernel above, with the same bits;
     * seer_cuda_tuning.qt_gemv_max) */
    bool qt;
    int qt_gemv_max_t;
    bool qt_norm_fused; /* seer_cuda_tuning.qt_norm: rmsnorm_q8_kernel before row-block products */
    /* attention's kernels (seer_cuda_tuning.attn): 0 the planner's choice, 1 no wgmma kernel
     * (mma), 2 the scalar kernel for every shape (scalar) */
    int attn_variant;
    bool kv_rows_tc; /* seer_cuda_tuning.kv_rows_tc */
    bool allreduce_nccl;      /* seer_cuda_tuning.allreduce_nccl: no one-shot all-reduce */

    /* graph.cu: recorded forward calls */
    bool graphs;              /* seer_cuda_tuning.graphs false turns them off */
    unsigned long gen;        /* bumped by every free: a recording holds device pointers */
    unsigned long use_clock;
    seer_cuda_fw fw;
    seer_cuda_graph graph[SEER_CUDA_GRAPHS_MAX];
    long n_replayed, n_captured, n_eager, n_redone;
    struct seer_cuda_prof *prof; /* seer_cuda_tuning.profile (profile.cu); NULL: off */
    unsigned long batch_epoch;   /* batch_begin calls and failed recordings so far: what the ops
                                  * of one call share (rope.cu's key) holds for one epoch */
} seer_cuda;

typedef struct seer_cuda_prof seer_cuda_prof;
seer_status seer_cuda_prof_init(seer_cuda *c, const char *path);
void seer_cuda_prof_mark(seer_cuda *c, bool base, const char *fmt, ...);
void seer_cuda_prof_free(seer_cuda *c);
const char *seer_cuda_prof_path(const seer_cuda *c);

static inline seer_cuda *seer_cuda_of(seer_backend *be) { return (seer_cuda *)be->impl; }

/* kernel<<<grid, block, smem, stream>>>(args) with programmatic dependent launch allowed
 * (unless SEER_CUDA_PDL=0). */
template <typename... KArgs, typename... Args>
static cudaError_t seer_cuda_launch(const seer_cuda *c, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                    size_t smem, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = c->mm_pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* ---- memory --------------------------------------------------------------------------- */

/* Device memory through the accounting allocator. On failure: SEER_ERR_OOM with
 * "CUDA: cannot allocate X MiB for WHAT: Y MiB free of Z MiB". */
seer_status seer_cuda_malloc(seer_cuda *c, size_t bytes, const char *what, void **out);
void seer_cuda_free(seer_cuda *c, void *p);
/* Makes b hold at least bytes (contents are not kept when it grows). */
seer_status seer_cuda_reserve(seer_cuda *c, seer_cuda_buf *b, size_t bytes, const char *what);
void seer_cuda_buf_free(seer_cuda *c, seer_cuda_buf *b);
/* Each family's state: made zeroed (its init), and freed with what it holds (its free, which
 * takes a state never made too). The instance calls them in cuda_backend.cu's list. */
struct seer_cuda;
seer_status seer_cuda_mm_init(struct seer_cuda *c);
void seer_cuda_mm_free(struct seer_cuda *c);
seer_status seer_cuda_attention_init(struct seer_cuda *c);
void seer_cuda_attention_free(struct seer_cuda *c);
seer_status seer_cuda_smp_init(struct seer_cuda *c);
void seer_cuda_smp_free(struct seer_cuda *c);
seer_status seer_cuda_rope_init(struct seer_cuda *c);
void seer_cuda_rope_free(struct seer_cuda *c);
seer_status seer_cuda_kvs_init(struct seer_cuda *c);
void seer_cuda_kvs_free(struct seer_cuda *c);
seer_status seer_cuda_ew_init(struct seer_cuda *c);
void seer_cuda_ew_free(struct seer_cuda *c);
seer_status seer_cuda_lp_init(struct seer_cuda *c);
void seer_cuda_lp_free(struct seer_cuda *c);
seer_status seer_cuda_kvh_init(struct seer_cuda *c);
void seer_cuda_kvh_free(struct seer_cuda *c);
/* reps timed copies of bytes from src to dst on c's stream after one warm-up, each one's ms into
 * ms (synthetic.cu: the copy-bandwidth and host-to-device probes). */
seer_status seer_cuda_time_copies(struct seer_cuda *c, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                  float *ms, int reps);
seer_status seer_cuda_stg_init(struct seer_cuda *c);
void seer_cuda_stg_free(struct seer_cuda *c);
seer_status seer_cuda_cats_init(struct seer_cuda *c);
void seer_cuda_cats_free(struct seer_cuda *c);
seer_status seer_cuda_comm_state_init(struct seer_cuda *c);
void seer_cuda_comm_state_free(struct seer_cuda *c);
/* gather_rows' scratch of at least bytes (elementwise.cu), for a gather whose rows overlap */
seer_status seer_cuda_gather_scratch(struct seer_cuda *c, size_t bytes, float **out);
/* Drops an instance's hold on the shared device state; the last one frees it. */
void seer_cuda_dev_release(seer_cuda_dev *d);

/* The device copy of a host index array of n entries that an op received: batch_begin's
 * copy when host is the array it was given for argument `which` and still holds the same
 * values, else a fresh upload into fallback buffer `slot` (0 or 1). which < 0: always the
 * upload. */
seer_status seer_cuda_index(seer_cuda *c, int which, const int32_t *host, int n, int slot,
                            const int32_t **dev);

/* ---- ops (one family per file) -------------------------------------------------------- */

seer_status seer_cuda_weight_load(seer_backend *be, const gguf_tensor *t, seer_weights_kind how,
                                  seer_weight *out);
void seer_cuda_weight_free(seer_backend *be, seer_weight *w);
seer_status seer_cuda_weight_quantize(seer_backend *be, const seer_weight *w, int dtype, seer_weight *out);
seer_status seer_cuda_weight_concat(seer_backend *be, seer_weight *parts, int n, bool interleave,
                                    seer_weight *out);
seer_status seer_cuda_weight_rows(seer_backend *be, const seer_weight *w, int r0, int n, seer_weight *out);
/* sparse.cu */
seer_status seer_cuda_ffn_act_stats(seer_backend *be, float *stats, const float *g, int T, int F, float *tmp);
seer_status seer_cuda_weight_gather(seer_backend *be, const seer_weight *w, const int32_t *idx, int n, bool cols,
                                    seer_weight *out);
/* sparse_cats.cu */
seer_status seer_cuda_ffn_act_hist(seer_backend *be, double *hist, float *g, const float *h, const seer_weight *gate,
                                   int T, int F);
seer_status seer_cuda_weight_transpose(seer_backend *be, const seer_weight *w, seer_weight *out);
seer_status seer_cuda_ffn_cats(seer_backend *be, float *x, float *a, const float *h, const seer_weight *gate,
                               const seer_weight *up, const seer_weight *down_t, float thr, int T);
seer_status seer_cuda_matmul_glu(seer_backend *be, float *y, const float *x, const seer_weight *w,
                                 int T);
seer_status seer_cuda_ffn_glu(seer_backend *be, float *x, float *h, const float *nw, float eps,
                              const seer_weight *wgu, const seer_weight *wdown, float *g, int T);
seer_status seer_cuda_norm_matmul_split(seer_backend *be, float *const *ys, float *h, const float *x,
                                        const float *nw, float eps, const seer_weight *w,
                                        const float *const *biases, int T);
seer_status seer_cuda_norm_matmuls(seer_backend *be, float *const *ys, float *h, const float *x,
                                   const float *nw, float eps, const seer_weight *ws, int n,
                                   const float *const *biases, int T);
seer_status seer_cuda_rope_kv_store(seer_backend *be, float *q, float *k, const float *v,
                                    const int32_t *pos, int T, int H, int Hkv, int Dh,
                                    const float *inv_freq, int neox, void *kv, const seer_kv_geom *g,
                                    int layer, const int32_t *page, const int32_t *row);
seer_status seer_cuda_matmul_split(seer_backend *be, float *const *ys, const float *x,
                                   const seer_weight *w, const float *const *biases, int T);
seer_status seer_cuda_matmul_add(seer_backend *be, float *y, const float *x, const seer_weight *w,
                                 int T);

seer_status seer_cuda_kv_alloc(seer_backend *be, const seer_kv_geom *g, void **out);
void seer_cuda_kv_free(seer_backend *be, void *kv);
seer_status seer_cuda_kv_reserve(seer_backend *be, void *kv, const seer_kv_geom *g, int n_pages,
                                 int *n_committed);
seer_status seer_cuda_kv_mem_available(seer_backend *be, uint64_t *bytes);
seer_status seer_cuda_kv_copy_pages(seer_backend *be, void *kv, const seer_kv_geom *g,
                                    const seer_kv_copy *copies, int n);
/* The host tier (kv_host.cu): a page's bytes there (its rows, seer_cuda_kv_rows_bytes, then
 * its quantised copy), and the copies on the instance's copy stream. */
size_t seer_cuda_kv_page_bytes(seer_backend *be, const seer_kv_geom *g);
size_t seer_cuda_kv_rows_bytes(const seer_kv_geom *g);
seer_status seer_cuda_kv_host_copy(seer_backend *be, void *kv, const seer_kv_geom *g, void *host,
                                   size_t stride, const int32_t *pages, const int32_t *slots, int n,
                                   bool to_host, uint64_t *ticket);
seer_status seer_cuda_kv_host_done(seer_backend *be, uint64_t ticket, bool *done);
seer_status seer_cuda_kv_host_wait(seer_backend *be, uint64_t ticket);
seer_status seer_cuda_kv_move_rows(seer_backend *be, void *kv, const seer_kv_geom *g,
                                   const int32_t *src_page, const int32_t *src_row,
                                   const int32_t *dst_page, const int32_t *dst_row, int n);
seer_status seer_cuda_kv_read(seer_backend *be, const void *kv, const seer_kv_geom *g, int layer,
                              int which, const int32_t *page, const int32_t *row, int n, float *out);
seer_status seer_cuda_kv_store(seer_backend *be, void *kv, const seer_kv_geom *g, int layer,
                               const float *k, const float *v, const int32_t *page,
                               const int32_t *row, int T);

/* Element e of a quantised row (kv/kv_type.h; G values a group, bits a code, the exponents at
 * byte soff): its code times its group's power of two, as seer_kvt_dequantize_head. */
static __device__ __forceinline__ float kvt_value(const uint8_t *row, int e, int G, int bits, int soff) {
    const int ex = (int8_t)row[soff + e / G];
    const float s = ex == -128 ? 0.f : ldexpf(1.f, ex);
    const int q = bits == 8 ? (int)(int8_t)row[e] : ((row[e >> 1] >> (4 * (e & 1))) & 15) - 8;
    return __fmul_rn((float)q, s);
}
/* A storage of quantised rows (geom kv_type, kv_type.cu): the store from f32 rows (device
 * page and row indices), kv_read's rows into out [n][Hkv*Dh], and kv_fill_random's. */
seer_status seer_cuda_kvt_store(seer_cuda *c, void *kv, const seer_kv_geom *g, int layer, const float *k,
                                const float *v, const int32_t *dpage, const int32_t *drow, int T);
seer_status seer_cuda_kvt_read(seer_cuda *c, float *out, const void *kv, const seer_kv_geom *g, int layer, int which,
                               const int32_t *dpage, const int32_t *drow, int n);
seer_status seer_cuda_kvt_fill(seer_cuda *c, void *kv, const seer_kv_geom *g, const int32_t *dpages, int row0, int n,
                               uint64_t seed, float mul);

/* The quantised KV copy (attention_qkv.cu; format kv/kv_quant.h): its base (NULL without
 * one), its page size, the store of k, v [T][Hkv*Dh] (f32, device) at device dpage/drow [T]
 * into it, and the attention op: through the copy when ab->kv_quant; attention.cu's otherwise,
 * except over quantised rows (geom kv_type) where the tensor-core kernels do not serve the call
 * (attention_qkv.cu's then). */
uint8_t *seer_cuda_kv_qdata(seer_cuda *c, const void *kv);
static inline size_t seer_cuda_kvq_page_bytes(const seer_kv_geom *g) {
    return seer_kvq_page_bytes(g->n_layers, g->page_size, g->n_kv_heads * g->head_dim, g->kv_bits);
}
seer_status seer_cuda_kvq_store(seer_cuda *c, void *kv, const seer_kv_geom *g, int layer, const float *k,
                                const float *v, const int32_t *dpage, const int32_t *drow, int T);
seer_status seer_cuda_attention_any(seer_backend *be, float *out, const float *q, const void *kv,
                                    const seer_kv_geom *g, int layer, const seer_attn_batch *ab);

seer_status seer_cuda_batch_begin(seer_backend *be, const seer_attn_batch *ab,
                                  const int32_t *tokens, const int32_t *pos, const int32_t *page,
                                  const int32_t *row, const int32_t *out_rows, int n_out);
seer_status seer_cuda_attention(seer_backend *be, float *out, const float *q, const void *kv,
                                const seer_kv_geom *g, int layer, const seer_attn_batch *ab);
/* Whether seer_cuda_attention runs this call on the tensor-core kernels (attention_tc.cu), the
 * only ones that read a storage of quantised rows (geom kv_type); plans the call where it is
 * not batch_begin's. */
seer_status seer_cuda_attention_on_tc(seer_backend *be, const seer_kv_geom *g, int layer,
                                      const seer_attn_batch *ab, bool *out);
/* Largest dynamic shared memory the attention kernel asks for; init raises its limit. */
size_t seer_cuda_attention_smem_max(void);
seer_status seer_cuda_attention_init(seer_cuda *c);

seer_status seer_cuda_embed(seer_backend *be, float *y, const seer_weight *emb,
                            const int32_t *tokens, int T);
seer_status seer_cuda_rmsnorm(seer_backend *be, float *y, const float *x, const float *w, int T,
                              int D, float eps);
/* rmsnorm rounded to bf16 into y: the bits that seer_cuda_rmsnorm into like (the same kernel:
 * like's alignment picks it), then rounding, would give. */
seer_status seer_cuda_rmsnorm_bf16(seer_cuda *c, bf16 *y, const float *x, const float *w, int T, int D,
                                   float eps, const float *like);
seer_status seer_cuda_matmul(seer_backend *be, float *y, const float *x, const seer_weight *w,
                             const float *bias, int T);
seer_status seer_cuda_rope(seer_backend *be, float *x, const int32_t *pos, int T, int n_heads,
                           int head_dim, const float *inv_freq, int neox);
seer_status seer_cuda_swiglu(seer_backend *be, float *y, const float *g, const float *u, size_t n);
seer_status seer_cuda_geglu(seer_backend *be, float *y, const float *g, const float *u, size_t n);
seer_status seer_cuda_scale(seer_backend *be, float *x, float s, size_t n);
seer_status seer_cuda_softcap(seer_backend *be, float *x, float cap, size_t n);
seer_status seer_cuda_add(seer_backend *be, float *y, const float *x, size_t n);
seer_status seer_cuda_gather_rows(seer_backend *be, float *y, const float *x, const int32_t *rows,
                                  int n_rows, int D);
seer_status seer_cuda_argmax_rows(seer_backend *be, int32_t *ids, const float *logits, int n, int V);
seer_status seer_cuda_logprob_rows(seer_backend *be, const seer_logprob_row *rows, int n, int V, int k,
                                   float *lp, int32_t *top_id, float *top_lp);
seer_status seer_cuda_sample_rows(seer_backend *be, const seer_sample_row *rows, int n, int V,
                                  int32_t *ids);
seer_status seer_cuda_accept_chains(seer_backend *be, const seer_accept_chain *chains, int n,
                                    int V, int32_t *n_acc, int32_t *next);
seer_status seer_cuda_accept_trees(seer_backend *be, const seer_accept_tree *trees, int n, int V,
                                   int stride, int32_t *n_acc, int32_t *path, int32_t *next,
                                   int32_t *n_u);

/* Tensor parallelism (comm_nccl.cu): a communicator over NCCL, and making an instance's
 * device the calling thread's. */
extern "C" seer_status seer_cuda_comm_init(seer_backend *const *ranks, int n, seer_comm **out);
extern "C" seer_status seer_cuda_comm_unique_id(seer_backend *be, void *id);
extern "C" seer_status seer_cuda_comm_init_rank(seer_backend *be, int n, int rank, const void *id, seer_comm **out);
extern "C" seer_status seer_cuda_make_current(seer_backend *be);

/* Forward calls (graph.cu). */
seer_status seer_cuda_forward_begin(seer_backend *be, const void *key, int T_cap, int *T,
                                    int *n_out, bool *done);
seer_status seer_cuda_forward_end(seer_backend *be, seer_status s, bool *redo);
seer_status seer_cuda_forward_begin_hold(seer_backend *be, const void *key, int T_cap, int *T,
                                         int *n_out, bool *done);
seer_status seer_cuda_forward_end_hold(seer_backend *be, seer_status s, bool *redo);
seer_status seer_cuda_forward_launch(seer_backend *be, bool run);
/* gather_rows that, in a padded forward call, reads batch_begin's padded out_rows copy. */
seer_status seer_cuda_gather_rows_fw(seer_backend *be, float *y, const float *x,
                                     const int32_t *rows, int n_rows, int D);
/* The padded size of a forward call of n rows: the graph bucket n falls in (n itself above
 * SEER_CUDA_INVARIANT_MAX_T). */
int seer_cuda_bucket(int n);
void seer_cuda_graphs_free(seer_cuda *c);

/* Graph captures against the calls that may synchronise a device (cudaMalloc, cudaFree,
 * cudaHostAlloc, cudaFreeHost, NCCL's set-up). A capture is the capturing thread's
 * (cudaStreamCaptureModeThreadLocal), so CUDA does not stop another thread from making such
 * a call while it runs, and one that does races with the capture inside the driver: a second
 * thread's cudaDeviceSynchronize during captures crashed in cuCtxSynchronize (H100, driver
 * 580) in 3 of 14 runs. So a capture holds its device's lock shared, from its begin to its
 * end, and those calls hold it exclusively (seer_cuda_unsafe_guard), except on a thread that
 * is capturing on that device itself (its own call fails the capture, which is then redone
 * op by op, as documented). Guards nest: a thread's outermost takes the lock; a thread holding
 * one must not begin a capture. Page-locked memory is the process's, but its calls are
 * guarded against their instance's device only: the captures of other devices are not
 * held off by them. */
void seer_cuda_capture_enter(int device);
void seer_cuda_capture_leave(int device);
struct seer_cuda_unsafe_guard {
    int n;
    int idx[SEER_TP_MAX];
    bool locked[SEER_TP_MAX];
    explicit seer_cuda_unsafe_guard(int device);
    seer_cuda_unsafe_guard(const int *devices, int count); /* several devices (NCCL's set-up) */
    ~seer_cuda_unsafe_guard();
    seer_cuda_unsafe_guard(const seer_cuda_unsafe_guard &) = delete;
    seer_cuda_unsafe_guard &operator=(const seer_cuda_unsafe_guard &) = delete;

  private:
    void take(int device);
};

/* Grid size for a grid-stride loop over n elements. */
static inline unsigned seer_cuda_grid(size_t n, int threads) {
    size_t b = (n + threads - 1) / threads;
    if (b > 65535u * 16u)
        b = 65535u * 16u;
    return (unsigned)(b ? b : 1);
}

#endif
