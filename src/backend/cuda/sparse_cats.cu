/*
 * sparse_cats.cu: the ops of CATS's sparse FFN (backend.h: ffn_act_hist, weight_transpose,
 * ffn_cats; Lee et al. 2024) on bf16 weights. ffn_cats is the draft step's FFN: the gate in
 * full, then up and down only at the neurons some row keeps, so that a step reads all of
 * the gate and the density's share of up and down:
 *
 *   1. the gate: a warp per neuron over an interleaved (gate, up) weight's even rows (its
 *      bf16 rows, 16 bytes a lane a step), or the backend's matmul for a plain gate; then
 *      silu, the threshold, and a flag per neuron that some row keeps it;
 *   2. the flagged neurons as one ascending list (one block's scan);
 *   3. up: a warp per listed neuron, its row read once for the call's rows, a[t][j] times the
 *      dot (a kept entry only);
 *   4. down: down_t [F][D] holds down's columns as rows (weight_transpose), so a listed
 *      neuron's column is 2 D contiguous bytes. Blocks of 256 columns and 4 rows, the list
 *      cut into S splits so that the grid fills the device at one row; each block's 8 warps
 *      take its split's neurons in turn and add up in shared memory in a fixed order; the
 *      splits' partial sums are added to x in split order. No atomics: the same bits on
 *      every run.
 *
 * At one row (the chain's draft step) the gate's warps read every gate row and the others
 * read only kept rows; rows of several tokens read the union of their kept rows once. The
 * list lives on the device, so grids are sized for every neuron and the warps past its end
 * return.
 * Not for: choosing the thresholds (src/model/sparse_ffn.c) or Griffin's ops (sparse.cu).
 */
#include "backend/act_hist.h"
#include "backend/cuda/cuda_common.cuh"

struct seer_cuda_cats {
    seer_cuda_buf scratch; /* ffn_cats: flags [F], the list [F] and its length, the partial
                            * sums [T][S][D]; grows in ffn_cats (which runs op by op) */
};

seer_status seer_cuda_cats_init(seer_cuda *c) {
    c->cats = (seer_cuda_cats *)calloc(1, sizeof *c->cats);
    return c->cats ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

void seer_cuda_cats_free(seer_cuda *c) {
    if (!c->cats)
        return;
    seer_cuda_buf_free(c, &c->cats->scratch);
    free(c->cats);
    c->cats = NULL;
}

#define CATS_TOK 8     /* rows a warp's dot products hold at once */
#define DOWN_WARPS 8   /* warps of a down block */
#define DOWN_TOK 4     /* rows of a down block */
#define DOWN_COLS 256  /* columns of a down block: 8 a lane */
#define DOWN_SPLITS 64 /* most splits of the list */

static __device__ __forceinline__ float silu_f(float g) { return g / (1.f + expf(-g)); }

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Eight bf16 at p (16 bytes, aligned) as floats. */
static __device__ __forceinline__ void load8(float (&w)[8], const bf16 *p) {
    const uint4 raw = *(const uint4 *)p;
    const __nv_bfloat162 *q = (const __nv_bfloat162 *)&raw;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(q[i]);
        w[2 * i] = f.x, w[2 * i + 1] = f.y;
    }
}

/* acc[k] += this lane's share of row . h[k] over D for k < nt (h [nt][D]). VEC: 8 columns a
 * step (D % 8 == 0, 16-byte aligned rows), else one. The caller sums acc over the warp. */
template <bool VEC>
static __device__ __forceinline__ void row_dots(float (&acc)[CATS_TOK], const bf16 *row, const float *h, int nt,
                                                int D, int lane) {
    if (VEC) {
        for (int d = lane * 8; d < D; d += 256) {
            float w[8];
            load8(w, row + d);
#pragma unroll
            for (int k = 0; k < CATS_TOK; k++) {
                if (k >= nt)
                    break;
                const float4 a = *(const float4 *)(h + (size_t)k * D + d);
                const float4 b = *(const float4 *)(h + (size_t)k * D + d + 4);
                acc[k] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z +
                          w[7] * b.w;
            }
        }
    } else {
        for (int d = lane; d < D; d += 32) {
            const float w = __bfloat162float(row[d]);
#pragma unroll
            for (int k = 0; k < CATS_TOK; k++) {
                if (k >= nt)
                    break;
                acc[k] += w * h[(size_t)k * D + d];
            }
        }
    }
}

/* The gate of an interleaved (gate, up) weight gu [2F][D] (neuron j: row 2 j), a warp per
 * neuron. act: a [T][F] = silu of the dot, 0 below thr, and flag[j] = some row keeps j;
 * else a = the dot (the pre-activation, for ffn_act_hist). */
template <bool VEC>
__global__ void cats_gate_kernel(float *a, int *flag, const float *h, const bf16 *gu, int T, int F, int D, float thr,
                                 int act) {
    const int j = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (j >= F)
        return;
    const bf16 *row = gu + (size_t)2 * j * D;
    bool any = false;
    for (int t0 = 0; t0 < T; t0 += CATS_TOK) {
        const int nt = min(CATS_TOK, T - t0);
        float acc[CATS_TOK] = {};
        row_dots<VEC>(acc, row, h + (size_t)t0 * D, nt, D, lane);
#pragma unroll
        for (int k = 0; k < CATS_TOK; k++)
            acc[k] = warp_sum(acc[k]);
        if (lane != 0)
            continue;
        for (int k = 0; k < nt; k++) {
            float *at = a + (size_t)(t0 + k) * F + j;
            if (!act) {
                *at = acc[k];
                continue;
            }
            const float s = silu_f(acc[k]);
            const bool keep = fabsf(s) >= thr; /* NaN: not kept */
            *at = keep ? s : 0.f;
            any |= keep;
        }
    }
    if (act && lane == 0)
        flag[j] = any;
}

/* a [T][F] in place (the plain gate's matmul): silu, 0 below thr; flag[j] = some row keeps
 * j. A thread per neuron. */
__global__ void cats_act_kernel(float *a, int *flag, int T, int F, float thr) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= F)
        return;
    bool any = false;
    for (int t = 0; t < T; t++) {
        float *at = a + (size_t)t * F + j;
        const float s = silu_f(*at);
        const bool keep = fabsf(s) >= thr;
        *at = keep ? s : 0.f;
        any |= keep;
    }
    flag[j] = any;
}

/* list [*n] = the neurons j with flag[j], ascending. One block: a scan of its threads' flags,
 * a chunk of blockDim.x neurons at a time. */
__global__ void cats_list_kernel(int32_t *list, int *n, const int *flag, int F) {
    __shared__ int warp_n[32];
    __shared__ int base;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (threadIdx.x == 0)
        base = 0;
    __syncthreads();
    for (int j0 = 0; j0 < F; j0 += blockDim.x) {
        const int j = j0 + threadIdx.x;
        const bool f = j < F && flag[j];
        const unsigned m = __ballot_sync(0xffffffffu, f);
        if (lane == 0)
            warp_n[w] = __popc(m);
        __syncthreads();
        int off = base;
        for (int k = 0; k < w; k++)
            off += warp_n[k];
        if (f)
            list[off + __popc(m & ((1u << lane) - 1u))] = j;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int k = 0; k < nw; k++)
                base += warp_n[k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *n = base;
}

/* a[t][j] *= up_j . h_t for the listed neurons (a 0 stays 0): a warp per entry, up_j being row
 * step j + off of w (plain up: 1, 0; interleaved: 2, 1). Groups of rows that keep none of
 * j are skipped, so at one row a warp reads its row only when it is kept. */
template <bool VEC>
__global__ void cats_up_kernel(float *a, const int32_t *list, const int *n, const float *h, const bf16 *w, int step,
                               int off, int T, int F, int D) {
    const int k = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (k >= *n)
        return;
    const int j = list[k];
    const bf16 *row = w + ((size_t)step * j + off) * D;
    for (int t0 = 0; t0 < T; t0 += CATS_TOK) {
        const int nt = min(CATS_TOK, T - t0);
        bool need = false;
        for (int q = 0; q < nt; q++)
            need |= a[(size_t)(t0 + q) * F + j] != 0.f;
        if (!need)
            continue;
        float acc[CATS_TOK] = {};
        row_dots<VEC>(acc, row, h + (size_t)t0 * D, nt, D, lane);
#pragma unroll
        for (int q = 0; q < CATS_TOK; q++)
            acc[q] = warp_sum(acc[q]);
        if (lane == 0)
            for (int q = 0; q < nt; q++)
                a[(size_t)(t0 + q) * F + j] *= acc[q];
    }
}

/* part [T][S][D]: for the block's DOWN_TOK rows (blockIdx.z) and DOWN_COLS columns
 * (blockIdx.x), split s's (blockIdx.y) share of the sum over the listed neurons
 * [s n / S, (s + 1) n / S) of a[t][j] down_t[j]. The warps take the split's neurons in turn;
 * their sums are added in warp order. VEC: a lane's 8 columns contiguous (D % 8 == 0), else
 * strided by 32. */
template <bool VEC>
__global__ void __launch_bounds__(DOWN_WARPS * 32)
    cats_down_kernel(float *part, const float *a, const int32_t *list, const int *n_list, const bf16 *dt, int T,
                     int F, int D, int S) {
    __shared__ float red[DOWN_WARPS][DOWN_TOK][DOWN_COLS];
    const int n = *n_list, s = blockIdx.y, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int k0 = (int)((long long)s * n / S), k1 = (int)((long long)(s + 1) * n / S);
    const int t0 = blockIdx.z * DOWN_TOK, nt = min(DOWN_TOK, T - t0);
    const int c_tile = blockIdx.x * DOWN_COLS;
    float acc[DOWN_TOK][8] = {};
    for (int k = k0 + w; k < k1; k += DOWN_WARPS) {
        const int j = list[k];
        float v[DOWN_TOK];
        bool any = false;
#pragma unroll
        for (int q = 0; q < DOWN_TOK; q++) {
            v[q] = q < nt ? a[(size_t)(t0 + q) * F + j] : 0.f;
            any |= v[q] != 0.f;
        }
        if (!any)
            continue;
        const bf16 *row = dt + (size_t)j * D;
        float x[8];
        if (VEC) {
            const int c = c_tile + lane * 8;
            if (c < D) {
                load8(x, row + c);
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++)
                    x[i] = 0.f;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int c = c_tile + lane + 32 * i;
                x[i] = c < D ? __bfloat162float(row[c]) : 0.f;
            }
        }
#pragma unroll
        for (int q = 0; q < DOWN_TOK; q++)
#pragma unroll
            for (int i = 0; i < 8; i++)
                acc[q][i] += v[q] * x[i];
    }
#pragma unroll
    for (int q = 0; q < DOWN_TOK; q++)
#pragma unroll
        for (int i = 0; i < 8; i++)
            red[w][q][VEC ? lane * 8 + i : lane + 32 * i] = acc[q][i];
    __syncthreads();
    const int c = c_tile + threadIdx.x; /* a thread per column of the tile */
    for (int q = 0; q < nt && c < D; q++) {
        float sum = 0.f;
        for (int u = 0; u < DOWN_WARPS; u++)
            sum += red[u][q][threadIdx.x];
        part[((size_t)(t0 + q) * S + s) * D + c] = sum;
    }
}

/* x [T][D] += the splits' partial sums, in split order. */
__global__ void cats_sum_kernel(float *x, const float *part, int T, int S, int D) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)T * D;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / D, d = i % D;
        float sum = 0.f;
        for (int s = 0; s < S; s++)
            sum += part[(t * S + s) * D + d];
        x[i] += sum;
    }
}

/* hist [BINS] += the bins of |silu(g)| over g [n]: counted per block in shared memory, then
 * added as doubles (integer counts: exact, in any order). */
__global__ void act_hist_kernel(double *hist, const float *g, size_t n) {
    __shared__ unsigned cnt[SEER_ACT_HIST_BINS];
    for (int b = threadIdx.x; b < SEER_ACT_HIST_BINS; b += blockDim.x)
        cnt[b] = 0;
    __syncthreads();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        atomicAdd(&cnt[seer_act_hist_bin(fabsf(silu_f(g[i])))], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < SEER_ACT_HIST_BINS; b += blockDim.x)
        if (cnt[b])
            atomicAdd(&hist[b], (double)cnt[b]);
}

/* out [C][R] = the transpose of w [R][C], through 32 x 32 tiles in shared memory. */
__global__ void transpose_kernel(bf16 *out, const bf16 *w, int R, int C) {
    __shared__ bf16 tile[32][33];
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    for (int i = threadIdx.y; i < 32; i += blockDim.y)
        if (r0 + i < R && c0 + (int)threadIdx.x < C)
            tile[i][threadIdx.x] = w[(size_t)(r0 + i) * C + c0 + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y)
        if (c0 + i < C && r0 + (int)threadIdx.x < R)
            out[(size_t)(c0 + i) * R + r0 + threadIdx.x] = tile[threadIdx.x][i];
}

static bool vec_ok(const void *p, int D) { return D % 8 == 0 && (uintptr_t)p % 16 == 0; }

/* The gate's neurons as ffn_cats takes it (with up, or interleaved with up); 0 otherwise. */
static int gate_neurons(const seer_weight *gate, const seer_weight *up) {
    if (up)
        return gate->interleaved ? 0 : gate->rows;
    return gate->interleaved && gate->rows % 2 == 0 ? gate->rows / 2 : 0;
}

/* The interleaved gate's pass over gu (bf16) into a: act as cats_gate_kernel. */
static seer_status gate_pass(seer_cuda *c, float *a, int *flag, const float *h, const seer_weight *gu, int T, int F,
                             float thr, int act) {
    const int D = gu->cols;
    const unsigned blocks = (unsigned)(((size_t)F * 32 + 255) / 256);
    if (vec_ok(gu->data, D) && vec_ok(h, D))
        cats_gate_kernel<true><<<blocks, 256, 0, c->stream>>>(a, flag, h, (const bf16 *)gu->data, T, F, D, thr, act);
    else
        cats_gate_kernel<false><<<blocks, 256, 0, c->stream>>>(a, flag, h, (const bf16 *)gu->data, T, F, D, thr, act);
    LAUNCH_TRY("cats_gate_kernel");
    return SEER_OK;
}

seer_status seer_cuda_ffn_act_hist(seer_backend *be, double *hist, float *g, const float *h, const seer_weight *gate,
                                   int T, int F) {
    seer_cuda *c = seer_cuda_of(be);
    if (gate && (gate->interleaved ? gate_neurons(gate, NULL) : gate->rows) != F)
        return seer_err(SEER_ERR_INVALID_ARG, "ffn_act_hist: a gate of %d rows for %d neurons", gate->rows, F);
    if (gate && gate->interleaved && gate->dtype != GGML_TYPE_BF16)
        return seer_err(SEER_ERR_UNSUPPORTED, "ffn_act_hist: an interleaved %s gate (the CUDA backend reads bf16)",
                        seer_ggml_type_name((ggml_type)gate->dtype));
    if (T <= 0 || F <= 0)
        return SEER_OK;
    if (gate && gate->interleaved)
        SEER_TRY(gate_pass(c, g, NULL, h, gate, T, F, 0.f, 0));
    else if (gate)
        SEER_TRY(seer_cuda_matmul(be, g, h, gate, NULL, T));
    const size_t n = (size_t)T * F;
    unsigned blocks = seer_cuda_grid(n, 256);
    if (blocks > (unsigned)c->n_sm * 4)
        blocks = (unsigned)c->n_sm * 4;
    act_hist_kernel<<<blocks, 256, 0, c->stream>>>(hist, g, n);
    LAUNCH_TRY("act_hist_kernel");
    return SEER_OK;
}

seer_status seer_cuda_weight_transpose(seer_backend *be, const seer_weight *w, seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    if (!w->data || w->dtype != GGML_TYPE_BF16 || w->interleaved)
        return seer_err(SEER_ERR_UNSUPPORTED, "weight_transpose: from a %s%s weight (the CUDA backend reads bf16)",
                        w->interleaved ? "interleaved " : "", seer_ggml_type_name((ggml_type)w->dtype));
    const int R = w->rows, C = w->cols;
    void *d = NULL;
    SEER_TRY(seer_cuda_malloc(c, (size_t)R * C * sizeof(bf16), "down's transpose (CATS)", &d));
    transpose_kernel<<<dim3((unsigned)(C + 31) / 32, (unsigned)(R + 31) / 32), dim3(32, 8), 0, c->stream>>>(
        (bf16 *)d, (const bf16 *)w->data, R, C);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        seer_cuda_free(c, d);
        return seer_cuda_fail(e, "launch of transpose_kernel", __FILE__, __LINE__);
    }
    memset(out, 0, sizeof *out);
    out->data = d;
    out->rows = C;
    out->cols = R;
    out->dtype = GGML_TYPE_BF16;
    out->owned = true;
    return SEER_OK;
}

/* Splits of the neuron list: enough blocks for two per multiprocessor at the call's rows. */
static int down_splits(const seer_cuda *c, int T, int F, int D) {
    const long long tiles = (long long)((D + DOWN_COLS - 1) / DOWN_COLS) * ((T + DOWN_TOK - 1) / DOWN_TOK);
    long long s = (2LL * c->n_sm + tiles - 1) / tiles;
    const long long most = F / 32 > 1 ? F / 32 : 1;
    s = s < most ? s : most;
    s = s < DOWN_SPLITS ? s : DOWN_SPLITS;
    return s > 1 ? (int)s : 1;
}

seer_status seer_cuda_ffn_cats(seer_backend *be, float *x, float *a, const float *h, const seer_weight *gate,
                               const seer_weight *up, const seer_weight *down_t, float thr, int T) {
    seer_cuda *c = seer_cuda_of(be);
    const int F = gate_neurons(gate, up), D = gate->cols;
    if (!F || (up && (up->rows != F || up->cols != D)) || down_t->rows != F || down_t->cols != D)
        return seer_err(SEER_ERR_INVALID_ARG, "ffn_cats: gate [%d][%d]%s, up [%d][%d] and down_t [%d][%d] do not agree",
                        gate->rows, D, gate->interleaved ? " interleaved" : "", up ? up->rows : 0,
                        up ? up->cols : 0, down_t->rows, down_t->cols);
    const seer_weight *u = up ? up : gate;
    if (!u->data || u->dtype != GGML_TYPE_BF16 || !down_t->data || down_t->dtype != GGML_TYPE_BF16)
        return seer_err(SEER_ERR_UNSUPPORTED, "ffn_cats: up %s and down_t %s (the CUDA backend reads bf16)",
                        seer_ggml_type_name((ggml_type)u->dtype), seer_ggml_type_name((ggml_type)down_t->dtype));
    if (!(thr >= 0))
        return seer_err(SEER_ERR_INVALID_ARG, "ffn_cats: threshold %g", (double)thr);
    if (T <= 0)
        return SEER_OK;
    const int S = down_splits(c, T, F, D);
    const size_t head = ((size_t)2 * F + 4) * sizeof(int32_t);
    SEER_TRY(seer_cuda_reserve(c, &c->cats->scratch, head + (size_t)T * S * D * sizeof(float),
                               "the CATS FFN's lists and partial sums"));
    int *flag = (int *)c->cats->scratch.p;
    int32_t *list = flag + F;
    int *n = list + F;
    float *part = (float *)((char *)c->cats->scratch.p + head);

    /* 1. the gate in full, kept at thr */
    if (up) {
        SEER_TRY(seer_cuda_matmul(be, a, h, gate, NULL, T));
        cats_act_kernel<<<seer_cuda_grid((size_t)F, 256), 256, 0, c->stream>>>(a, flag, T, F, thr);
        LAUNCH_TRY("cats_act_kernel");
    } else {
        SEER_TRY(gate_pass(c, a, flag, h, gate, T, F, thr, 1));
    }
    /* 2. the kept neurons of any row, ascending */
    cats_list_kernel<<<1, 1024, 0, c->stream>>>(list, n, flag, F);
    LAUNCH_TRY("cats_list_kernel");
    /* 3. up at the kept neurons */
    const unsigned warps_blocks = (unsigned)(((size_t)F * 32 + 255) / 256);
    const int step = up ? 1 : 2, off = up ? 0 : 1;
    if (vec_ok(u->data, D) && vec_ok(h, D))
        cats_up_kernel<true><<<warps_blocks, 256, 0, c->stream>>>(a, list, n, h, (const bf16 *)u->data, step, off, T,
                                                                  F, D);
    else
        cats_up_kernel<false><<<warps_blocks, 256, 0, c->stream>>>(a, list, n, h, (const bf16 *)u->data, step, off, T,
                                                                   F, D);
    LAUNCH_TRY("cats_up_kernel");
    /* 4. down at the kept neurons, in S splits, then their sum into x */
    const dim3 grid((unsigned)((D + DOWN_COLS - 1) / DOWN_COLS), (unsigned)S, (unsigned)((T + DOWN_TOK - 1) / DOWN_TOK));
    if (vec_ok(down_t->data, D))
        cats_down_kernel<true><<<grid, DOWN_WARPS * 32, 0, c->stream>>>(part, a, list, n,
                                                                        (const bf16 *)down_t->data, T, F, D, S);
    else
        cats_down_kernel<false><<<grid, DOWN_WARPS * 32, 0, c->stream>>>(part, a, list, n,
                                                                         (const bf16 *)down_t->data, T, F, D, S);
    LAUNCH_TRY("cats_down_kernel");
    cats_sum_kernel<<<seer_cuda_grid((size_t)T * D, 256), 256, 0, c->stream>>>(x, part, T, S, D);
    LAUNCH_TRY("cats_sum_kernel");
    return SEER_OK;
}
