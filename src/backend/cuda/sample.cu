/*
 * sample.cu: token selection on the GPU, so that decoding and verification move ids (and a
 * few per-row parameters and uniforms) between host and device instead of rows of V logits:
 *   argmax_rows    greedy decoding and greedy verification;
 *   sample_rows    the sampler transform of src/sample/sample.h (logit_bias, a constraint's
 *                  vocabulary mask, repetition penalty, temperature, top-k, softmax, top-p,
 *                  min-p) and an inverse-CDF draw;
 *   accept_chains  speculative sampling's acceptance rule over chains of draft tokens and the
 *                  residual draw at the first rejection (src/spec/verify.c states the rule);
 *   accept_trees   the multi-draft rule over token trees (backend.h, seer_accept_tree).
 * Not for: drawing uniforms (the host draws them from each sequence's generator) or any
 * bookkeeping of sequences.
 *
 * One block per row (per chain). The CPU sorts; here every cut is a threshold found by a
 * radix descent over the 32 bits of the values (four histogram passes of 8 bits), followed,
 * where a cut falls inside a run of equal values, by the id of the n-th equal value in id
 * order, so ties go to the lower ids exactly as on the CPU. V = 152K is a few dozen passes
 * over one row that stays in L2.
 *
 * Agreement with the CPU: the kept set and the probabilities follow the same arithmetic
 * (exp in double, rounded to float; sums in double), but sums run in another order, so a
 * top-p cut or a CDF step can differ when it lies within rounding (~1e-16 relative) of the
 * uniform or the target mass. The top-p histograms add doubles with shared-memory atomics,
 * whose order varies from run to run: only such boundary cases can vary between runs.
 */
#include "backend/cuda/cuda_common.cuh"

extern "C" {
#include "sample/sample.h"
}

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The sampling family's scratch: sample_rows / accept_chains descriptors and results, working
 * rows of sampled rows that keep no probabilities, accept_trees' working p and q rows
 * ([n][2][V]), argmax_rows' results before they go to the host, host staging, penalty marks
 * and counts [V]. */
struct seer_cuda_smp {
    seer_cuda_buf dev, work, tree_work, argmax_ids;
    void *host;
    size_t host_cap;
    uint8_t *mark;
    int32_t *count;
    int mark_cap;
};

seer_status seer_cuda_smp_init(seer_cuda *c) {
    c->smp = (seer_cuda_smp *)calloc(1, sizeof *c->smp);
    return c->smp ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

void seer_cuda_smp_free(seer_cuda *c) {
    if (!c->smp)
        return;
    seer_cuda_buf *bufs[] = {&c->smp->dev, &c->smp->work, &c->smp->tree_work, &c->smp->argmax_ids};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        seer_cuda_buf_free(c, bufs[i]);
    free(c->smp->host);
    free(c->smp->mark);
    free(c->smp->count);
    free(c->smp);
    c->smp = NULL;
}

#define AMAX_THREADS 1024

/* Better candidate: larger value, ties to the lower id; NaN never wins (as seer_argmax). */
__device__ __forceinline__ bool amax_better(float v, int i, float bv, int bi) {
    if (v != v)
        return false;
    if (bi < 0)
        return true;
    return v > bv || (v == bv && i < bi);
}

/* One block per row. */
__global__ void argmax_rows_kernel(int32_t *ids, const float *logits, int V) {
    const float *x = logits + (size_t)blockIdx.x * V;
    float bv = 0.f;
    int bi = -1;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        if (amax_better(x[i], i, bv, bi))
            bv = x[i], bi = i;
    __shared__ float sv[AMAX_THREADS];
    __shared__ int si[AMAX_THREADS];
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && amax_better(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + s];
            si[threadIdx.x] = si[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        ids[blockIdx.x] = si[0] < 0 ? 0 : si[0];
}

seer_status seer_cuda_argmax_rows(seer_backend *be, int32_t *ids, const float *logits, int n, int V) {
    seer_cuda *c = seer_cuda_of(be);
    if (n <= 0)
        return SEER_OK;
    SEER_TRY(seer_cuda_reserve(c, &c->smp->argmax_ids, (size_t)n * sizeof(int32_t), "argmax ids"));
    int32_t *d = (int32_t *)c->smp->argmax_ids.p;
    argmax_rows_kernel<<<(unsigned)n, AMAX_THREADS, 0, c->stream>>>(d, logits, V);
    LAUNCH_TRY("argmax_rows_kernel");
    CUDA_TRY(cudaMemcpyAsync(ids, d, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, c->stream));
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    return SEER_OK;
}

/* ---- block-wide building blocks -------------------------------------------------------- */

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)

typedef struct {
    int hist[256];
    double mass[256];
    double red_d[SMP_WARPS];
    float red_f[SMP_WARPS];
    int red_i[SMP_WARPS];
    int red_j[SMP_WARPS];
    int sel, found, cnt, res;
    double above;
} smp_shared;

/* NaN counts as -inf (sample.h). */
__device__ __forceinline__ float smp_clean(float x) { return x == x ? x : -INFINITY; }

/* Order-preserving map of a float to 32 bits (-0 folded onto +0, which compare equal). */
__device__ __forceinline__ uint32_t smp_key(float f) {
    uint32_t b = __float_as_uint(f == 0.0f ? 0.0f : f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* Block sums and extremes; every thread gets the result. The fold order is fixed, so the
 * result does not vary between runs. */
/* Every thread's v combined by op (warps first, then the warp results in warp order), the
 * same in every thread; red is SMP_WARPS entries of shared memory. */
template <typename T, typename Op>
__device__ T smp_reduce(T v, T *red, Op op) {
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    T r = red[0];
    for (int w = 1; w < SMP_WARPS; w++)
        r = op(r, red[w]);
    return r;
}

__device__ double smp_sum_d(double v, smp_shared *sh) {
    return smp_reduce(v, sh->red_d, [](double x, double y) { return x + y; });
}

__device__ float smp_max_f(float v, smp_shared *sh) {
    return smp_reduce(v, sh->red_f, [](float x, float y) { return fmaxf(x, y); });
}

__device__ int smp_min_i(int v, smp_shared *sh) {
    return smp_reduce(v, sh->red_i, [](int x, int y) { return min(x, y); });
}

__device__ int smp_max_i(int v, smp_shared *sh) {
    return -smp_min_i(-v, sh);
}

/* Exclusive prefix sums over the threads in thread order. */
__device__ double smp_exscan_d(double v, smp_shared *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    double inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        double t = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
            inc += t;
    }
    __syncthreads();
    if (lane == 31)
        sh->red_d[w] = inc;
    __syncthreads();
    double base = 0;
    for (int k = 0; k < w; k++)
        base += sh->red_d[k];
    return base + inc - v;
}

__device__ int smp_exscan_i(int v, smp_shared *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
            inc += t;
    }
    __syncthreads();
    if (lane == 31)
        sh->red_i[w] = inc;
    __syncthreads();
    int base = 0;
    for (int k = 0; k < w; k++)
        base += sh->red_i[k];
    return base + inc - v;
}

/* This thread's contiguous share [lo, hi) of [0, V): what the scans walk in id order. */
__device__ __forceinline__ void smp_chunk(int V, int *lo, int *hi) {
    const int ch = (V + (int)blockDim.x - 1) / (int)blockDim.x;
    *lo = min((int)threadIdx.x * ch, V);
    *hi = min(*lo + ch, V);
}

/* The id of the r-th (1-based) i in id order with pred(i); V - 1 if there are fewer. */
template <typename Pred>
__device__ int smp_nth(Pred pred, int V, int r, smp_shared *sh) {
    int lo, hi;
    smp_chunk(V, &lo, &hi);
    int cnt = 0;
    for (int i = lo; i < hi; i++)
        cnt += pred(i) ? 1 : 0;
    const int excl = smp_exscan_i(cnt, sh);
    if (threadIdx.x == 0)
        sh->res = V - 1;
    __syncthreads();
    if (excl < r && r <= excl + cnt) {
        int k = excl;
        for (int i = lo; i < hi; i++)
            if (pred(i) && ++k == r) {
                sh->res = i;
                break;
            }
    }
    __syncthreads();
    return sh->res;
}

/* Weight of id i in a draw: p[i] (mode 0), or max(p[i] - q[i], 0) with q a vector (mode 1)
 * or one-hot at x (mode 2). NaN and negatives weigh nothing. */
__device__ __forceinline__ float smp_weight(int mode, const float *p, const float *q, int x, int i) {
    if (mode == 0)
        return p[i];
    const float qi = mode == 1 ? q[i] : (i == x ? 1.0f : 0.0f);
    const float d = p[i] - qi;
    return d > 0.0f ? d : 0.0f;
}

/* Inverse CDF in id order (seer_sample_from_probs, and seer_sample_residual's walk with the
 * target scaled by the total): the first i with target < w[0] + ... + w[i] among w > 0; if
 * rounding leaves target at or above the total, the last i with w > 0; -1 if none. */
__device__ int smp_draw(int mode, const float *p, const float *q, int x, int V, double target,
                        smp_shared *sh) {
    int lo, hi;
    smp_chunk(V, &lo, &hi);
    double s = 0;
    int last = -1;
    for (int i = lo; i < hi; i++) {
        const float w = smp_weight(mode, p, q, x, i);
        if (w > 0.0f) {
            s += w;
            last = i;
        }
    }
    const double excl = smp_exscan_d(s, sh);
    const int t_star = smp_min_i(s > 0 && target < excl + s ? (int)threadIdx.x : INT_MAX, sh);
    const int last_all = smp_max_i(last, sh);
    if (t_star == INT_MAX)
        return last_all;
    if ((int)threadIdx.x == t_star) {
        double cum = excl;
        int res = last;
        for (int i = lo; i < hi; i++) {
            const float w = smp_weight(mode, p, q, x, i);
            if (w > 0.0f) {
                cum += w;
                if (target < cum) {
                    res = i;
                    break;
                }
            }
        }
        sh->res = res;
    }
    __syncthreads();
    const int res = sh->res;
    __syncthreads();
    return res;
}

/* ---- sample_rows ----------------------------------------------------------------------- */

/* One row as the kernel sees it (built on the host by seer_cuda_sample_rows). */
typedef struct {
    const float *logits; /* [V] */
    float *buf;          /* [V] working row: the probs row when kept, else scratch; NULL only
                          * for an argmax without penalty */
    float *probs;        /* [V] or NULL */
    double u;
    float temperature, top_p, min_p, penalty;
    int top_k;
    int pen_off, n_pen;  /* distinct penalised ids: pen[pen_off ..], what frequency and presence
                          * subtract from each: sub[pen_off ..] (seer_penalty_sub) */
    int bias_off, n_bias; /* logit_bias: distinct ids bid[bias_off ..], added bval[bias_off ..] */
    int mask_off;         /* the row's vocabulary mask: words mask[mask_off ..], -1: none */
} smp_row;

__global__ void __launch_bounds__(SMP_THREADS)
sample_rows_kernel(const smp_row *rows, const int32_t *pen, const float *sub, const int32_t *bid,
                   const float *bval, const uint32_t *mask, int V, int32_t *ids) {
    __shared__ smp_shared sh;
    const smp_row R = rows[blockIdx.x];
    const int tid = threadIdx.x, nt = blockDim.x;

    /* 1. logit_bias (one rounded add per distinct id, as sample.c), the mask (-inf outside),
     * then the penalised logits (CTRL, then frequency and presence; once per distinct id of the
     * window): seer_penalty_apply's operations, each rounded, none fused */
    if (R.buf) {
        for (int i = tid; i < V; i += nt)
            R.buf[i] = smp_clean(R.logits[i]);
        __syncthreads();
        for (int k = tid; k < R.n_bias; k += nt) {
            const int id = bid[R.bias_off + k];
            R.buf[id] = __fadd_rn(R.buf[id], bval[R.bias_off + k]);
        }
        __syncthreads();
        if (R.mask_off >= 0)
            for (int i = tid; i < V; i += nt)
                if (!(mask[R.mask_off + (i >> 5)] >> (i & 31) & 1u))
                    R.buf[i] = -INFINITY;
        __syncthreads();
        for (int k = tid; k < R.n_pen; k += nt) {
            const int id = pen[R.pen_off + k];
            const float v = R.buf[id];
            R.buf[id] = __fsub_rn(v > 0 ? __fdiv_rn(v, R.penalty) : __fmul_rn(v, R.penalty), sub[R.pen_off + k]);
        }
        __syncthreads();
    }
    const float *src = R.buf ? R.buf : R.logits;

    /* 2. temperature 0: one-hot at the argmax, ties to the lowest id */
    if (!(R.temperature > 0.0f)) {
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int i = tid; i < V; i += nt) {
            const float v = smp_clean(src[i]);
            if (bi == INT_MAX || v > bv)
                bv = v, bi = i;
        }
        const float m = smp_max_f(bv, &sh);
        const int id = smp_min_i(bi != INT_MAX && bv == m ? bi : INT_MAX, &sh);
        if (R.probs)
            for (int i = tid; i < V; i += nt)
                R.probs[i] = i == id ? 1.0f : 0.0f;
        if (ids && tid == 0)
            ids[blockIdx.x] = id;
        return;
    }
    float *e = R.buf; /* from here on it holds numerators, then probabilities */

    float mx = -INFINITY;
    for (int i = tid; i < V; i += nt)
        mx = fmaxf(mx, src[i]);
    const float m = smp_max_f(mx, &sh);

    /* 3. top-k: the k-th largest key; ties at it go to the lowest ids */
    uint32_t tk = 0;
    int idk = V - 1;
    const bool topk = R.top_k > 0 && R.top_k < V;
    if (topk) {
        uint32_t prefix = 0, mask = 0;
        int above = 0;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = tid; b < 256; b += nt)
                sh.hist[b] = 0;
            __syncthreads();
            for (int i = tid; i < V; i += nt) {
                const uint32_t key = smp_key(src[i]);
                if ((key & mask) == prefix)
                    atomicAdd(&sh.hist[(key >> shift) & 255u], 1);
            }
            __syncthreads();
            if (tid == 0) {
                int b = 255;
                for (; b > 0 && above + sh.hist[b] < R.top_k; b--)
                    above += sh.hist[b];
                sh.sel = b;
                sh.cnt = sh.hist[b];
            }
            __syncthreads();
            prefix |= (uint32_t)sh.sel << shift;
            mask |= 255u << shift;
            __syncthreads();
        }
        if (tid == 0)
            sh.found = above;
        __syncthreads();
        tk = prefix;
        const int need = R.top_k - sh.found, eq = sh.cnt;
        if (need < eq)
            idk = smp_nth([&](int i) { return smp_key(src[i]) == tk; }, V, need, &sh);
    }

    /* 4. softmax numerators: the max gets exactly 1 (sample.c) */
    const double inv_t = 1.0 / (double)R.temperature;
    double zp = 0;
    for (int i = tid; i < V; i += nt) {
        const float v = src[i];
        const uint32_t key = smp_key(v);
        const bool in = !topk || key > tk || (key == tk && i <= idk);
        const float ev = !in ? 0.0f : v == m ? 1.0f : (float)exp(((double)v - (double)m) * inv_t);
        e[i] = ev;
        zp += ev;
    }
    const double z = smp_sum_d(zp, &sh);

    /* 5. min-p against the largest numerator, which is 1 */
    const double tmin = R.min_p > 0.0f ? (double)R.min_p : 0.0;

    /* 6. top-p: the value E at which the mass taken in descending order (ties by id) first
     * reaches top_p * z, and how many of the values equal to E it takes. Measured over all
     * candidates: min-p keeps a prefix of the same order, so the kept set is the shorter
     * of the two prefixes. */
    bool cut = false;
    float E = 0.0f;
    int idp = V - 1;
    if (R.top_p < 1.0f) {
        const double target = (double)R.top_p * z;
        uint32_t prefix = 0, mask = 0;
        double above = 0;
        bool found = true;
        for (int shift = 24; shift >= 0 && found; shift -= 8) {
            for (int b = tid; b < 256; b += nt)
                sh.hist[b] = 0, sh.mass[b] = 0;
            __syncthreads();
            for (int i = tid; i < V; i += nt) {
                const float ev = e[i];
                const uint32_t key = __float_as_uint(ev);
                if (ev > 0.0f && (key & mask) == prefix) {
                    atomicAdd(&sh.hist[(key >> shift) & 255u], 1);
                    atomicAdd(&sh.mass[(key >> shift) & 255u], (double)ev);
                }
            }
            __syncthreads();
            if (tid == 0) {
                int b = 255, lowest = -1;
                double a = above;
                for (; b >= 0; b--) {
                    if (sh.hist[b] == 0)
                        continue;
                    if (a + sh.mass[b] >= target)
                        break;
                    a += sh.mass[b];
                    lowest = b;
                }
                /* Below the first digit the target was reached within this bin's parent; a
                 * sum in another order can fall short of it by rounding: take the last bin. */
                if (b < 0 && shift < 24 && lowest >= 0) {
                    b = lowest;
                    a -= sh.mass[b];
                }
                sh.found = b >= 0;
                sh.sel = b < 0 ? 0 : b;
                sh.cnt = b < 0 ? 0 : sh.hist[b];
                sh.above = a;
            }
            __syncthreads();
            found = sh.found;
            above = sh.above;
            prefix |= (uint32_t)sh.sel << shift;
            mask |= 255u << shift;
            __syncthreads();
        }
        if (found) {
            E = __uint_as_float(prefix);
            const int eq = sh.cnt;
            double rr = ceil((target - above) / (double)E);
            const int r = rr < 1 ? 1 : rr > eq ? eq : (int)rr;
            cut = (double)E >= tmin; /* else min-p is the shorter prefix */
            if (cut && r < eq)
                idp = smp_nth([&](int i) { return e[i] == E; }, V, r, &sh);
        }
    }

    /* 7. renormalise over the kept set */
    double zk = 0;
    for (int i = tid; i < V; i += nt) {
        const float ev = e[i];
        if (ev > 0.0f && (double)ev >= tmin && (!cut || ev > E || (ev == E && i <= idp)))
            zk += ev;
    }
    const double inv_z = 1.0 / smp_sum_d(zk, &sh);
    for (int i = tid; i < V; i += nt) {
        const float ev = e[i];
        const bool keep = ev > 0.0f && (double)ev >= tmin && (!cut || ev > E || (ev == E && i <= idp));
        e[i] = keep ? (float)((double)ev * inv_z) : 0.0f;
    }
    __syncthreads();

    /* 8. the draw */
    if (ids) {
        const int id = R.u < 0 ? -1 : smp_draw(0, e, NULL, -1, V, R.u, &sh);
        if (tid == 0)
            ids[blockIdx.x] = id;
    }
}

/* Host staging: grow-only, pageable (a copy from it returns once the data is staged). */
static seer_status smp_host(seer_cuda *c, size_t bytes, char **out) {
    if (bytes > c->smp->host_cap) {
        void *p = malloc(bytes);
        if (!p)
            return seer_err(SEER_ERR_OOM, "CUDA sampling: out of host memory");
        free(c->smp->host);
        c->smp->host = p;
        c->smp->host_cap = bytes;
    }
    *out = (char *)c->smp->host;
    return SEER_OK;
}

static size_t smp_align(size_t x) { return (x + 15) / 16 * 16; }

seer_status seer_cuda_sample_rows(seer_backend *be, const seer_sample_row *rows, int n, int V,
                                  int32_t *ids) {
    seer_cuda *c = seer_cuda_of(be);
    if (n <= 0)
        return SEER_OK;
    if (V <= 0)
        return seer_err(SEER_ERR_INVALID_ARG, "sample_rows: vocabulary of %d", V);
    size_t n_pen = 0, n_bias = 0, n_mask = 0;
    const size_t W = ((size_t)V + 31) / 32;
    int n_scratch = 0;
    for (int r = 0; r < n; r++) {
        const seer_sampler_params *p = rows[r].sp;
        SEER_TRY(seer_sampler_params_check(p));
        const bool pen = seer_sampler_penalised(p) && rows[r].hist && rows[r].n_hist > 0;
        if (pen)
            n_pen += (size_t)(rows[r].n_hist < p->repeat_last_n ? rows[r].n_hist : p->repeat_last_n);
        n_bias += (size_t)p->n_logit_bias;
        n_mask += rows[r].mask ? W : 0;
        n_scratch += !rows[r].probs && (p->temperature > 0.0f || pen || p->n_logit_bias > 0 || rows[r].mask);
    }
    if (c->smp->mark_cap < V) {
        uint8_t *m = (uint8_t *)malloc((size_t)V);
        int32_t *k = (int32_t *)malloc((size_t)V * sizeof(int32_t));
        if (!m || !k) {
            free(m), free(k);
            return seer_err(SEER_ERR_OOM, "CUDA sampling: out of host memory");
        }
        free(c->smp->mark);
        free(c->smp->count);
        c->smp->mark = m;
        c->smp->count = k;
        c->smp->mark_cap = V;
    }
    const size_t desc_b = smp_align((size_t)n * sizeof(smp_row));
    const size_t pen_b = smp_align(n_pen * sizeof(int32_t)), sub_b = smp_align(n_pen * sizeof(float));
    const size_t ids_b = (size_t)n * sizeof(int32_t);
    /* logit_bias ids and values, then the rows' masks, after the penalties */
    const size_t bid_b = smp_align(n_bias * sizeof(int32_t)), bval_b = smp_align(n_bias * sizeof(float));
    const size_t mask_b = smp_align(n_mask * sizeof(uint32_t));
    const size_t up_b = desc_b + pen_b + sub_b + bid_b + bval_b + mask_b;
    char *h = NULL;
    SEER_TRY(smp_host(c, up_b, &h));
    SEER_TRY(seer_cuda_reserve(c, &c->smp->dev, up_b + ids_b, "sampling descriptors"));
    if (n_scratch)
        SEER_TRY(seer_cuda_reserve(c, &c->smp->work, (size_t)n_scratch * V * sizeof(float),
                                   "sampling scratch rows"));
    smp_row *desc = (smp_row *)h;
    int32_t *pen = (int32_t *)(h + desc_b);
    float *sub = (float *)(h + desc_b + pen_b);
    float *work = (float *)c->smp->work.p;
    uint8_t *mark = c->smp->mark;
    int32_t *count = c->smp->count;
    int32_t *bid = (int32_t *)(h + desc_b + pen_b + sub_b);
    float *bval = (float *)(h + desc_b + pen_b + sub_b + bid_b);
    uint32_t *mwords = (uint32_t *)(h + desc_b + pen_b + sub_b + bid_b + bval_b);
    int off = 0, s = 0, boff = 0;
    size_t moff = 0;
    for (int r = 0; r < n; r++) {
        const seer_sample_row *w = &rows[r];
        const seer_sampler_params *p = w->sp;
        smp_row d;
        memset(&d, 0, sizeof d);
        d.logits = w->logits;
        d.probs = w->probs;
        d.u = w->u;
        d.temperature = p->temperature;
        d.top_p = p->top_p;
        d.min_p = p->min_p;
        d.penalty = p->repeat_penalty;
        d.top_k = p->top_k;
        d.pen_off = off;
        /* the distinct ids of the window and their counts, as sample.c takes them */
        const int m = seer_penalty_window(p, w->hist, w->n_hist, V, mark, count, pen + off);
        for (int i = 0; i < m; i++, off++)
            sub[off] = seer_penalty_sub(p, count[pen[off]]);
        d.n_pen = off - d.pen_off;
        d.bias_off = boff;
        for (int i = 0; i < p->n_logit_bias; i++) /* distinct (checked where params come in) */
            if (p->logit_bias[i].token >= 0 && p->logit_bias[i].token < V) {
                bid[boff] = p->logit_bias[i].token;
                bval[boff++] = p->logit_bias[i].bias;
            }
        d.n_bias = boff - d.bias_off;
        d.mask_off = -1;
        if (w->mask) {
            memcpy(mwords + moff, w->mask, W * sizeof(uint32_t));
            d.mask_off = (int)moff;
            moff += W;
        }
        const bool need = p->temperature > 0.0f || m > 0 || p->n_logit_bias > 0 || w->mask;
        d.buf = w->probs ? w->probs : need ? work + (size_t)(s++) * V : NULL;
        desc[r] = d;
    }
    char *dev = (char *)c->smp->dev.p;
    CUDA_TRY(cudaMemcpyAsync(dev, h, up_b, cudaMemcpyHostToDevice, c->stream));
    int32_t *d_ids = ids ? (int32_t *)(dev + up_b) : NULL;
    const size_t at_b = desc_b + pen_b + sub_b;
    sample_rows_kernel<<<(unsigned)n, SMP_THREADS, 0, c->stream>>>(
        (const smp_row *)dev, (const int32_t *)(dev + desc_b), (const float *)(dev + desc_b + pen_b),
        (const int32_t *)(dev + at_b), (const float *)(dev + at_b + bid_b),
        (const uint32_t *)(dev + at_b + bid_b + bval_b), V, d_ids);
    LAUNCH_TRY("sample_rows_kernel");
    if (ids) {
        CUDA_TRY(cudaMemcpyAsync(ids, d_ids, ids_b, cudaMemcpyDeviceToHost, c->stream));
        CUDA_TRY(cudaStreamSynchronize(c->stream));
    }
    return SEER_OK;
}

/* ---- accept_chains --------------------------------------------------------------------- */

typedef struct {
    const float *p; /* [nd + 1][V] */
    const float *q; /* [nd][V] or NULL: one-hot */
    int nd, d_off, u_off, resample;
} acc_chain;

__global__ void __launch_bounds__(SMP_THREADS)
accept_chains_kernel(const acc_chain *chains, const int32_t *drafts, const double *us, int V,
                     int32_t *out) {
    __shared__ smp_shared sh;
    const acc_chain C = chains[blockIdx.x];
    const int32_t *d = drafts + C.d_off;
    const double *u = us + C.u_off;
    if (threadIdx.x == 0) {
        int a = 0;
        for (; a < C.nd; a++) {
            const int x = d[a];
            const bool ok = x >= 0 && x < V;
            const float px = ok ? C.p[(size_t)a * V + x] : 0.0f;
            const float qx = !ok ? 0.0f : C.q ? C.q[(size_t)a * V + x] : 1.0f;
            if (!(qx > 0 && u[a] * qx < px))
                break;
        }
        sh.cnt = a;
    }
    __syncthreads();
    const int a = sh.cnt;
    __syncthreads();
    const float *p = C.p + (size_t)a * V;
    int id;
    if (a == C.nd) {
        id = smp_draw(0, p, NULL, -1, V, u[a], &sh);
    } else if (C.resample) {
        id = smp_draw(0, p, NULL, -1, V, u[a + 1], &sh);
    } else {
        const int mode = C.q ? 1 : 2, x = d[a];
        const float *q = C.q ? C.q + (size_t)a * V : NULL;
        double tp = 0;
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            tp += smp_weight(mode, p, q, x, i);
        const double total = smp_sum_d(tp, &sh);
        id = total > 0 ? smp_draw(mode, p, q, x, V, u[a + 1] * total, &sh)
                       : smp_draw(0, p, NULL, -1, V, u[a + 1], &sh);
    }
    if (threadIdx.x == 0) {
        out[2 * blockIdx.x] = a;
        out[2 * blockIdx.x + 1] = id;
    }
}

/* One acceptance call's staging: n descriptors of desc_size bytes, n_u uniforms, n_i indices
 * and out_b bytes of results, laid out alike in the pinned host buffer (h) and on the device
 * (d): descriptors, uniforms, indices, results. */
typedef struct {
    char *h, *d;
    size_t u_at, i_at, out_at, out_b;
} acc_stage;

static seer_status acc_stage_begin(seer_cuda *c, size_t desc_bytes, size_t n_u, size_t n_i, size_t out_b,
                                   acc_stage *st) {
    st->u_at = smp_align(desc_bytes);
    st->i_at = st->u_at + smp_align(n_u * sizeof(double));
    st->out_at = st->i_at + smp_align(n_i * sizeof(int32_t));
    st->out_b = out_b;
    SEER_TRY(smp_host(c, st->out_at + out_b, &st->h));
    SEER_TRY(seer_cuda_reserve(c, &c->smp->dev, st->out_at + out_b, "acceptance descriptors"));
    st->d = (char *)c->smp->dev.p;
    return SEER_OK;
}

static double *acc_u(const acc_stage *st, char *base) { return (double *)(base + st->u_at); }
static int32_t *acc_i(const acc_stage *st, char *base) { return (int32_t *)(base + st->i_at); }
static int32_t *acc_out(const acc_stage *st, char *base) { return (int32_t *)(base + st->out_at); }

/* After the host side is filled: to the device (before the kernel). */
static seer_status acc_stage_upload(seer_cuda *c, const acc_stage *st) {
    CUDA_TRY(cudaMemcpyAsync(st->d, st->h, st->out_at, cudaMemcpyHostToDevice, c->stream));
    return SEER_OK;
}

/* After the kernel: its results back into the host side. */
static seer_status acc_stage_results(seer_cuda *c, const acc_stage *st) {
    CUDA_TRY(cudaMemcpyAsync(st->h + st->out_at, st->d + st->out_at, st->out_b, cudaMemcpyDeviceToHost,
                             c->stream));
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    return SEER_OK;
}

seer_status seer_cuda_accept_chains(seer_backend *be, const seer_accept_chain *chains, int n,
                                    int V, int32_t *n_acc, int32_t *next) {
    seer_cuda *c = seer_cuda_of(be);
    if (n <= 0)
        return SEER_OK;
    size_t n_d = 0, n_u = 0;
    for (int k = 0; k < n; k++) {
        if (chains[k].nd < 0)
            return seer_err(SEER_ERR_INVALID_ARG, "accept_chains: chain %d has %d drafts", k, chains[k].nd);
        n_d += (size_t)chains[k].nd;
        n_u += (size_t)chains[k].nd + 1;
    }
    acc_stage st;
    SEER_TRY(acc_stage_begin(c, (size_t)n * sizeof(acc_chain), n_u, n_d, (size_t)2 * n * sizeof(int32_t), &st));
    acc_chain *desc = (acc_chain *)st.h;
    double *hu = acc_u(&st, st.h);
    int32_t *hd = acc_i(&st, st.h);
    int od = 0, ou = 0;
    for (int k = 0; k < n; k++) {
        const seer_accept_chain *ch = &chains[k];
        acc_chain a;
        memset(&a, 0, sizeof a);
        a.p = ch->p;
        a.q = ch->q;
        a.nd = ch->nd;
        a.d_off = od;
        a.u_off = ou;
        a.resample = ch->resample_from_p ? 1 : 0;
        if (ch->nd)
            memcpy(hd + od, ch->draft, sizeof(int32_t) * ch->nd);
        memcpy(hu + ou, ch->u, sizeof(double) * (ch->nd + 1));
        od += ch->nd;
        ou += ch->nd + 1;
        desc[k] = a;
    }
    SEER_TRY(acc_stage_upload(c, &st));
    accept_chains_kernel<<<(unsigned)n, SMP_THREADS, 0, c->stream>>>(
        (const acc_chain *)st.d, acc_i(&st, st.d), acc_u(&st, st.d), V, acc_out(&st, st.d));
    LAUNCH_TRY("accept_chains_kernel");
    SEER_TRY(acc_stage_results(c, &st));
    const int32_t *res = acc_out(&st, st.h);
    for (int k = 0; k < n; k++) {
        n_acc[k] = res[2 * k];
        next[k] = res[2 * k + 1];
    }
    return SEER_OK;
}

/* ---- accept_trees ---------------------------------------------------------------------- */

/* The multi-draft rule of seer_accept_tree (Sequoia: children drawn without replacement).
 * One block per tree; the walk's control flow is the same in every thread (each decision is
 * read from shared or global memory after a barrier), the row updates (residual, q without
 * the rejected child) go over V in parallel with the sums in double as on the CPU. Working
 * rows: w (the current p) and qw (the current q), 2 V floats per tree. */
typedef struct {
    const float *p; /* [n + 1][V] */
    const float *q; /* [n][V] or NULL: one-hot at the first child */
    int n, t_off, u_off, resample;
} acc_tree;

__global__ void __launch_bounds__(SMP_THREADS)
accept_trees_kernel(const acc_tree *trees, const int32_t *toks, const int32_t *pars, const double *us,
                    float *work, int V, int stride, int32_t *out) {
    __shared__ smp_shared sh;
    const acc_tree T = trees[blockIdx.x];
    const int32_t *tok = toks + T.t_off, *par = pars + T.t_off;
    const double *u = us + T.u_off;
    float *w = work + (size_t)blockIdx.x * 2 * V, *qw = w + V;
    int32_t *o = out + (size_t)blockIdx.x * (3 + stride);
    int node = -1, a = 0, used = 0;
    for (;;) {
        const float *pr = T.p + (size_t)(node + 1) * V;
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            w[i] = pr[i];
        int first = -1;
        for (int c = node + 1; c < T.n && first < 0; c++)
            if (par[c] == node)
                first = c;
        if (first < 0)
            break;
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            qw[i] = T.q ? T.q[(size_t)(node + 1) * V + i] : (i == tok[first] ? 1.0f : 0.0f);
        __syncthreads();
        int took = -1;
        for (int c = first; c < T.n; c++) {
            if (par[c] != node)
                continue;
            const int32_t x = tok[c];
            const bool in = x >= 0 && x < V;
            const float px = in ? w[x] : 0.0f, qx = in ? qw[x] : 0.0f;
            const bool pass = qx > 0 && u[used] * qx < px;
            used++;
            if (pass) {
                took = c;
                break;
            }
            if (!T.resample) {
                double zl = 0;
                for (int i = threadIdx.x; i < V; i += blockDim.x)
                    zl += w[i] > qw[i] ? w[i] - qw[i] : 0.0f;
                const double z = smp_sum_d(zl, &sh);
                if (z > 0)
                    for (int i = threadIdx.x; i < V; i += blockDim.x)
                        w[i] = w[i] > qw[i] ? (float)((w[i] - qw[i]) / z) : 0.0f;
            }
            __syncthreads();
            if (in) {
                if (threadIdx.x == 0)
                    qw[x] = 0.0f;
                __syncthreads();
                double zl = 0;
                for (int i = threadIdx.x; i < V; i += blockDim.x)
                    zl += qw[i];
                const double zq = smp_sum_d(zl, &sh);
                for (int i = threadIdx.x; i < V; i += blockDim.x)
                    qw[i] = zq > 0 ? (float)(qw[i] / zq) : 0.0f;
            }
            __syncthreads();
        }
        if (took < 0)
            break;
        if (threadIdx.x == 0)
            o[3 + a] = took;
        a++;
        node = took;
        __syncthreads();
    }
    __syncthreads();
    const int id = smp_draw(0, w, NULL, -1, V, u[used], &sh);
    if (threadIdx.x == 0) {
        o[0] = a;
        o[1] = id;
        o[2] = used + 1;
    }
}

seer_status seer_cuda_accept_trees(seer_backend *be, const seer_accept_tree *trees, int n, int V,
                                   int stride, int32_t *n_acc, int32_t *path, int32_t *next,
                                   int32_t *n_u) {
    seer_cuda *c = seer_cuda_of(be);
    if (n <= 0)
        return SEER_OK;
    size_t n_t = 0, n_uu = 0;
    for (int k = 0; k < n; k++) {
        if (trees[k].n < 0 || trees[k].n > stride)
            return seer_err(SEER_ERR_INVALID_ARG, "accept_trees: tree %d has %d nodes (stride %d)", k,
                            trees[k].n, stride);
        for (int j = 0; j < trees[k].n; j++)
            if (trees[k].parent[j] < -1 || trees[k].parent[j] >= j)
                return seer_err(SEER_ERR_INVALID_ARG, "accept_trees: tree %d node %d under %d", k, j,
                                trees[k].parent[j]);
        n_t += (size_t)trees[k].n;
        n_uu += (size_t)trees[k].n + 1;
    }
    acc_stage st;
    SEER_TRY(acc_stage_begin(c, (size_t)n * sizeof(acc_tree), n_uu, 2 * n_t, (size_t)n * (3 + stride) * sizeof(int32_t),
                             &st));
    SEER_TRY(seer_cuda_reserve(c, &c->smp->tree_work, (size_t)n * 2 * V * sizeof(float), "tree acceptance rows"));
    acc_tree *desc = (acc_tree *)st.h;
    double *hu = acc_u(&st, st.h);
    int32_t *ht = acc_i(&st, st.h), *hp = ht + n_t;
    int ot = 0, ou = 0;
    for (int k = 0; k < n; k++) {
        const seer_accept_tree *t = &trees[k];
        acc_tree a;
        memset(&a, 0, sizeof a);
        a.p = t->p;
        a.q = t->q;
        a.n = t->n;
        a.t_off = ot;
        a.u_off = ou;
        a.resample = t->resample_from_p ? 1 : 0;
        if (t->n) {
            memcpy(ht + ot, t->tok, sizeof(int32_t) * t->n);
            memcpy(hp + ot, t->parent, sizeof(int32_t) * t->n);
        }
        memcpy(hu + ou, t->u, sizeof(double) * (t->n + 1));
        ot += t->n;
        ou += t->n + 1;
        desc[k] = a;
    }
    SEER_TRY(acc_stage_upload(c, &st));
    const int32_t *d_tok = acc_i(&st, st.d);
    accept_trees_kernel<<<(unsigned)n, SMP_THREADS, 0, c->stream>>>(
        (const acc_tree *)st.d, d_tok, d_tok + n_t, acc_u(&st, st.d), (float *)c->smp->tree_work.p, V, stride,
        acc_out(&st, st.d));
    LAUNCH_TRY("accept_trees_kernel");
    SEER_TRY(acc_stage_results(c, &st));
    const int32_t *res = acc_out(&st, st.h);
    for (int k = 0; k < n; k++) {
        const int32_t *r = res + (size_t)k * (3 + stride);
        n_acc[k] = r[0];
        next[k] = r[1];
        n_u[k] = r[2];
        memcpy(path + (size_t)k * stride, r + 3, sizeof(int32_t) * r[0]);
    }
    return SEER_OK;
}
