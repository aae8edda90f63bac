/*
 * attention.cu: attention over the paged bf16 KV cache with sparse views and explicit masks
 * among the new tokens, as flash decoding (Dao et al., "Flash-Decoding for long-context
 * inference", 2023): the slots a token may see are split into chunks, one block per (token,
 * split, KV head, head chunk) item runs an online softmax (Milakov & Gimelshein 2018) over
 * its chunk for all query heads of the GQA group it holds, and a second kernel merges the
 * splits: the scalar kernel, for every head size. Head sizes 64 and 128 run on the tensor
 * cores instead (attention_tc.cu), over the same descriptor, which batch_begin
 * (attention_plan.cu) uploads once per forward call. A storage of quantised rows (geom
 * kv_type) comes here only in the calls the tensor-core kernel serves
 * (seer_cuda_attention_on_tc; attention_qkv.cu takes the others): the scalar kernel reads bf16
 * rows alone.
 *
 * The visible set is exactly the CPU reference's (cpu_attention.c): token i of sequence b
 * sees, for every layer and KV head, the cached slots s < len0 its view allows (view entries
 * with 0 <= s < min(len0, tail), then every slot in [tail, len0)), then the new tokens of b
 * the mask allows (without a mask: those at a slot <= its own). Visible index k of a token
 * maps to a slot in O(1): k < C is a cached slot (C = len0 without a view, else the
 * surviving list entries plus the tail), k >= C is the (k - C)-th new token of b, kept or
 * masked out by the predicate; under a mask, the (k - C)-th of the new tokens the mask lets
 * it see (att_cand), so that a token tree's node finds its ancestors at the visible indices
 * where a decode step of the same token finds them in the cache. Only the summation order
 * differs from the reference.
 *
 * A windowed layer's call (seer_attn_batch.window) masks the keys behind the token's window
 * as the predicate masks a candidate (att_in_window), and soft-capping (softcap) caps each
 * scaled score (att_cap); both are launch arguments, not part of the plan, so the one plan of a
 * forward call serves its windowed and its global layers, and a token's splits (and so its
 * bits) are the same in a decode step and in a verification. Tiles of which no key is seen
 * are skipped, which changes nothing in the result.
 *
 * Batch invariance: the chunk size is a function of the token's own visible count (the
 * smallest power-of-two multiple of ATT_TK that makes at most ATT_MAX_SPLITS splits), so a
 * token's splits, the tiles inside each split and the order the combine merges them in
 * depend on that count alone, never on the batch it is in. Without a mask a token at slot s
 * sees visible indices 0..s mapped to slots 0..s whether its predecessors are cached or new
 * in the same call, and a tree's node at depth d sees C + d + 1 (its ancestors listed), so a
 * decode step and a verification call, chain or tree, give it bit-identical outputs.
 *
 * Recorded calls (graph.cu): the kernels take one pointer to the batch descriptor and read
 * the token count, the work count and every array's offset from its header, so their launch
 * arguments stay the same from batch to batch; the partial kernel is persistent (its blocks
 * stride over the work items) with a grid fixed per recording.
 * Not for: tuning the scalar kernel (the tensor-core kernel is the fast path).
 */
#include "backend/cuda/cuda_common.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/attention.cuh"

__global__ void __launch_bounds__(ATT_THREADS) attn_partial_kernel(attn_params p);

static size_t attn_smem_bytes(int gb, int Dh) {
    const int W = (Dh / 2) | 1;
    return ATT_TK * sizeof(long long) +
           sizeof(float) * ((size_t)gb * Dh + 2 * (size_t)ATT_TK * W + (size_t)gb * ATT_TK + 3 * (size_t)gb);
}

/* Partial-kernel blocks the device holds at once for this head configuration. */
seer_status attn_capacity(seer_cuda *c, int gb, int Dh, int *out) {
    const int key = gb * 4096 + Dh;
    if (c->attn->occ_key != key) {
        int n = 0;
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attn_partial_kernel, ATT_THREADS,
                                                               attn_smem_bytes(gb, Dh)));
        c->attn->occ_key = key;
        c->attn->occ = n > 0 ? n : 1;
    }
    *out = c->attn->occ * c->n_sm;
    return SEER_OK;
}

/* Whether two batches are the same call's, the window aside: a windowed layer's batch is a
 * copy of the call's with its window set (decoder.c), and the plan serves both. Field by
 * field, since copies need not agree in their padding. */
static bool same_call(const seer_attn_batch *x, const seer_attn_batch *y) {
    return x->T == y->T && x->n_heads == y->n_heads && x->n_kv_heads == y->n_kv_heads &&
           x->head_dim == y->head_dim && x->scale == y->scale && x->page_size == y->page_size &&
           x->n_seq == y->n_seq && x->max_pages == y->max_pages && x->seq_pages == y->seq_pages &&
           x->seq_len0 == y->seq_len0 && x->seq_tok_off == y->seq_tok_off && x->seq_toks == y->seq_toks &&
           x->seq_view == y->seq_view && x->tok_seq == y->tok_seq && x->tok_slot == y->tok_slot &&
           x->mask == y->mask && x->kv_quant == y->kv_quant && x->seq_prompt == y->seq_prompt &&
           x->tok_pos == y->tok_pos && x->softcap == y->softcap;
}

/* Whether batch_begin's descriptors still describe ab (else attention rebuilds them). The
 * view lists are taken as unchanged within a forward call: the context builds them once per
 * call, and comparing them would cost as much as uploading them again. */
static bool att_matches(const seer_cuda *c, const seer_attn_batch *ab) {
    const seer_cuda_attn *a = &c->att;
    if (!a->valid || !same_call(&a->ab, ab))
        return false;
    const size_t T = (size_t)ab->T, ns = (size_t)ab->n_seq;
    if (memcmp(a->h_tok_seq, ab->tok_seq, T * 4) || memcmp(a->h_tok_slot, ab->tok_slot, T * 4) ||
        memcmp(a->h_seq_len0, ab->seq_len0, ns * 4) || memcmp(a->h_seq_toks, ab->seq_toks, T * 4) ||
        (ab->tok_pos && memcmp(a->h_tok_pos, ab->tok_pos, T * 4)))
        return false;
    if (ab->mask && memcmp(a->h_mask, ab->mask, T * T))
        return false;
    for (size_t b = 0; b < ns; b++) {
        const size_t np = (size_t)(a->h_page_off[b + 1] - a->h_page_off[b]);
        if (memcmp(a->h_pages + a->h_page_off[b], ab->seq_pages + b * (size_t)ab->max_pages, np * 4))
            return false;
    }
    return true;
}

/* ---- kernels -------------------------------------------------------------------------- */


static __device__ __forceinline__ float2 bf2_to_f2(uint32_t w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

/* Step 2 of a tile: its K and V rows into shared memory, [ATT_TK][W] bf16 pairs each (zeros
 * for keys not seen, off_s[r] < 0). */
static __device__ __forceinline__ void att_load_kv(const attn_params &p, const long long *off_s, uint32_t *ks,
                                                   uint32_t *vs, int D2, int W, int tid) {
    if ((D2 & 3) == 0) {
        const int q4 = D2 >> 2;
        for (int w = tid; w < ATT_TK * q4; w += ATT_THREADS) {
            const int r = w / q4, e4 = w - r * q4;
            const long long o = off_s[r];
            uint4 kw = make_uint4(0, 0, 0, 0), vw = kw;
            if (o >= 0) {
                kw = ((const uint4 *)(p.kv + o))[e4];
                vw = ((const uint4 *)(p.kv + o + p.kv_stride))[e4];
            }
            uint32_t *kd = ks + r * W + 4 * e4, *vd = vs + r * W + 4 * e4;
            kd[0] = kw.x, kd[1] = kw.y, kd[2] = kw.z, kd[3] = kw.w;
            vd[0] = vw.x, vd[1] = vw.y, vd[2] = vw.z, vd[3] = vw.w;
        }
    } else {
        for (int w = tid; w < ATT_TK * D2; w += ATT_THREADS) {
            const int r = w / D2, e2 = w - r * D2;
            const long long o = off_s[r];
            uint32_t kw = 0, vw = 0;
            if (o >= 0) {
                kw = ((const uint32_t *)(p.kv + o))[e2];
                vw = ((const uint32_t *)(p.kv + o + p.kv_stride))[e2];
            }
            ks[r * W + e2] = kw;
            vs[r * W + e2] = vw;
        }
    }
}

/* Persistent: block b takes items b, b + gridDim.x, ... of the descriptor's n_work, item =
 * (qoff[i] + split) * (Hkv * n_hc) + head chunk. */
__global__ void __launch_bounds__(ATT_THREADS) attn_partial_kernel(attn_params p) {
    extern __shared__ long long smem_ll[];
    const int Dh = p.Dh, D2 = Dh >> 1, W = D2 | 1, gb = p.gb;
    /* Row strides of W words, odd, so that lanes reading one word of 32 different keys hit
     * 32 different banks. */
    long long *off_s = smem_ll;                       /* [TK] K row of each key, -1: none */
    float *qs = (float *)(off_s + ATT_TK);            /* [gb][Dh] */
    uint32_t *ks = (uint32_t *)(qs + (size_t)gb * Dh); /* [TK][W] bf16 pairs */
    uint32_t *vs = ks + ATT_TK * W;                   /* [TK][W] */
    float *ps = (float *)(vs + ATT_TK * W);           /* [gb][TK] scores, then weights */
    float *m_s = ps + gb * ATT_TK, *l_s = m_s + gb, *al_s = l_s + gb;

    const att_desc a = att_desc_load(p.desc);
    const int HC = p.Hkv * p.n_hc;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    for (int item = blockIdx.x; item < a.n_work; item += gridDim.x) {
        const int hc = item % HC, qi = item / HC;
        const int i = att_last_le(a.qoff, 0, a.T - 1, qi), s = qi - a.qoff[i]; /* the token */
        const int kvh = hc / p.n_hc, g0 = (hc % p.n_hc) * gb;
        const int ng = min(gb, p.group - g0);
        const int h0 = kvh * p.group + g0;
        const att_tok tk = att_token(a, i, p.layer, kvh);
        const int S = att_splits(tk.n_vis);
        if (s >= S)
            continue; /* this (layer, head) sees fewer slots than the token's most */
        const int C = tk.C, vcnt = tk.vcnt, tail = tk.tail, slot_i = tk.slot;
        const bool has_view = tk.has_view;
        const int32_t *vl = tk.vl;
        const long long chunk = att_chunk(tk.n_vis);
        const int begin = (int)(s * chunk), end = (int)min((long long)begin + chunk, (long long)tk.n_vis);
        const int32_t *pages = a.pages + a.page_off[tk.b];
        const size_t head_off = p.layer_off + (size_t)kvh * p.head_stride;
        const int pos_i = a.tok_pos[i];
        /* Under a window the cached keys below pos_i - window + 1 are not seen; without a view
         * key k < C is slot k, so the tiles wholly below start over there (a tile no key of
         * which is seen changes nothing, and the loop skips such tiles anyway). */
        int first = begin;
        if (p.window > 0 && !has_view) {
            const long long lo = min((long long)pos_i - p.window + 1, (long long)C);
            if (lo > begin)
                first = begin + (int)((lo - begin) / ATT_TK) * ATT_TK;
        }

        const float *qg = p.q + ((size_t)i * p.H + h0) * Dh;
        for (int e = tid; e < ng * Dh; e += ATT_THREADS)
            qs[e] = qg[e];
        if (tid < gb) {
            m_s[tid] = -INFINITY;
            l_s[tid] = 0.f;
        }
        float acc[2 * ATT_PAIRS];
#pragma unroll
        for (int r = 0; r < 2 * ATT_PAIRS; r++)
            acc[r] = 0.f;
        __syncthreads();

        for (int t0 = first; t0 < end; t0 += ATT_TK) {
            /* 1: which slot each key of the tile is */
            if (tid < ATT_TK) {
                const int k = t0 + tid;
                int slot = -1;
                if (k < end) {
                    if (k < C) {
                        slot = !has_view ? k : (k < vcnt ? vl[k] : tail + (k - vcnt));
                        if (!att_in_window(p.window, pos_i, slot))
                            slot = -1;
                    } else {
                        const int ci = att_cand(tk, k);
                        const int cs = a.cand_slot[ci];
                        const bool ok = a.mask ? a.mask[(size_t)i * a.T + a.cand_tok[ci]] != 0 : cs <= slot_i;
                        slot = ok && att_in_window(p.window, pos_i, a.tok_pos[a.cand_tok[ci]]) ? cs : -1;
                    }
                }
                off_s[tid] = slot < 0 ? -1
                                      : (long long)((size_t)pages[slot / p.page_size] * p.page_stride + head_off +
                                                    (size_t)(slot % p.page_size) * Dh);
            }
            /* a tile of which no key is seen leaves the state as it is: skipped */
            if (!__syncthreads_or(tid < ATT_TK && off_s[tid] >= 0))
                continue;
            /* 2: K and V rows into shared memory (zeros for keys not seen) */
            att_load_kv(p, off_s, ks, vs, D2, W, tid);
            __syncthreads();
            /* 3: scores, a warp per (head, 32 keys), a lane per key */
            for (int pr = warp; pr < ng * (ATT_TK / 32); pr += ATT_WARPS) {
                const int g = pr / (ATT_TK / 32), r = (pr % (ATT_TK / 32)) * 32 + lane;
                float sc = -INFINITY;
                if (off_s[r] >= 0) {
                    const float2 *q2 = (const float2 *)(qs + (size_t)g * Dh);
                    const uint32_t *kr = ks + r * W;
                    float d = 0.f;
                    for (int e2 = 0; e2 < D2; e2++) {
                        const float2 kf = bf2_to_f2(kr[e2]), qf = q2[e2];
                        d = fmaf(qf.x, kf.x, d);
                        d = fmaf(qf.y, kf.y, d);
                    }
                    sc = att_cap(d * p.scale, p.softcap, p.softcap_inv);
                }
                ps[g * ATT_TK + r] = sc;
            }
            __syncthreads();
            /* 4: online softmax step, a warp per head */
            for (int g = warp; g < ng; g += ATT_WARPS) {
                const float s0 = ps[g * ATT_TK + lane], s1 = ps[g * ATT_TK + lane + 32];
                float mx = fmaxf(s0, s1);
                for (int o = 16; o > 0; o >>= 1)
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                const float m_old = m_s[g], m_new = fmaxf(m_old, mx);
                float p0 = 0.f, p1 = 0.f, alpha = 1.f;
                if (m_new != -INFINITY) { /* else nothing seen yet: exp(-inf - -inf) would be NaN */
                    p0 = expf(s0 - m_new);
                    p1 = expf(s1 - m_new);
                    alpha = expf(m_old - m_new);
                }
                float sum = p0 + p1;
                for (int o = 16; o > 0; o >>= 1)
                    sum += __shfl_xor_sync(0xffffffffu, sum, o);
                ps[g * ATT_TK + lane] = p0;
                ps[g * ATT_TK + lane + 32] = p1;
                __syncwarp(); /* every lane has read m_s[g] and l_s[g] before lane 0 writes them */
                if (lane == 0) {
                    m_s[g] = m_new;
                    l_s[g] = l_s[g] * alpha + sum;
                    al_s[g] = alpha;
                }
            }
            __syncthreads();
            /* 5: acc = acc * alpha + P V, a thread per (head, dim pair) */
#pragma unroll
            for (int r = 0; r < ATT_PAIRS; r++) {
                const int pi = tid + r * ATT_THREADS;
                if (pi < ng * D2) {
                    const int g = pi / D2, e2 = pi - g * D2;
                    const float al = al_s[g];
                    float a0 = acc[2 * r] * al, a1 = acc[2 * r + 1] * al;
                    const float *pg = ps + g * ATT_TK;
                    for (int k = 0; k < ATT_TK; k++) {
                        const float pk = pg[k];
                        const float2 vf = bf2_to_f2(vs[k * W + e2]);
                        a0 = fmaf(pk, vf.x, a0);
                        a1 = fmaf(pk, vf.y, a1);
                    }
                    acc[2 * r] = a0;
                    acc[2 * r + 1] = a1;
                }
            }
            __syncthreads();
        }

        if (S == 1) {
#pragma unroll
            for (int r = 0; r < ATT_PAIRS; r++) {
                const int pi = tid + r * ATT_THREADS;
                if (pi < ng * D2) {
                    const int g = pi / D2, e2 = pi - g * D2;
                    const float l = l_s[g];
                    /* nothing visible: zeros, as the reference's empty sum gives */
                    const float inv = l > 0.f ? 1.f / l : 0.f;
                    float2 *o = (float2 *)(p.out + ((size_t)i * p.H + h0 + g) * Dh) + e2;
                    *o = make_float2(acc[2 * r] * inv, acc[2 * r + 1] * inv);
                }
            }
        } else {
            const size_t prow = (size_t)(a.qoff[i] + s) * p.H + h0;
#pragma unroll
            for (int r = 0; r < ATT_PAIRS; r++) {
                const int pi = tid + r * ATT_THREADS;
                if (pi < ng * D2) {
                    const int g = pi / D2, e2 = pi - g * D2;
                    float2 *o = (float2 *)(p.part_acc + (prow + g) * Dh) + e2;
                    *o = make_float2(acc[2 * r], acc[2 * r + 1]);
                }
            }
            if (tid < ng) {
                float *ml = p.part_ml + (prow + tid) * 2;
                ml[0] = m_s[tid];
                ml[1] = l_s[tid];
            }
        }
        __syncthreads(); /* the next item overwrites shared memory */
    }
}

/* One block per (token, head) of the grid's rows; tokens past T and tokens with a single
 * split (written by the partial kernel) leave at once. Merges the token's S splits in split
 * order: the result depends on S and the partials alone. */
__global__ void attn_combine_kernel(attn_params p) {
    __shared__ float wsm[ATT_COMBINE_W];
    __shared__ float M_s, L_s;
    pdl_trigger();
    pdl_wait();
    const att_desc a = att_desc_load(p.desc);
    const int i = blockIdx.x / p.H, h = blockIdx.x % p.H;
    if (i >= a.T || a.tmode[i] == 1 || a.tmode[i] == 2)
        return;
    const att_tok tk = att_token(a, i, p.layer, h / p.group);
    const int S = a.tmode[i] == 3 ? att_pre_splits(tk.n_vis) : att_splits(tk.n_vis), Dh = p.Dh;
    if (S == 1)
        return;
    const size_t row0 = (size_t)a.qoff[i] * p.H + h, rstride = (size_t)p.H;
    const float *ml = p.part_ml + row0 * 2;
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        float M = -INFINITY;
        for (int s = lane; s < S; s += 32)
            M = fmaxf(M, ml[s * rstride * 2]);
        for (int o = 16; o > 0; o >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        float L = 0.f;
        for (int s = lane; s < S; s += 32) {
            const float m = ml[s * rstride * 2];
            const float w = m == -INFINITY ? 0.f : expf(m - M);
            L += ml[s * rstride * 2 + 1] * w;
        }
        for (int o = 16; o > 0; o >>= 1)
            L += __shfl_xor_sync(0xffffffffu, L, o);
        if (lane == 0) {
            M_s = M;
            L_s = L;
        }
    }
    __syncthreads();
    const float M = M_s, L = L_s, inv = L > 0.f ? 1.f / L : 0.f;
    const float *pa = p.part_acc + row0 * Dh;
    float o[ATT_MAX_DH / 128 + 1];
    for (int r = 0; r < ATT_MAX_DH / 128 + 1; r++)
        o[r] = 0.f;
    for (int s0 = 0; s0 < S; s0 += ATT_COMBINE_W) {
        const int n = min(ATT_COMBINE_W, S - s0);
        for (int k = threadIdx.x; k < n; k += blockDim.x) {
            const float m = ml[(size_t)(s0 + k) * rstride * 2];
            wsm[k] = m == -INFINITY ? 0.f : expf(m - M);
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < ATT_MAX_DH / 128 + 1; r++) {
            const int e = threadIdx.x + r * 128;
            if (e < Dh) {
                float v = o[r];
#pragma unroll 8 /* several splits' loads in flight; the sum still runs in split order */
                for (int k = 0; k < n; k++)
                    v = fmaf(wsm[k], pa[(size_t)(s0 + k) * rstride * Dh + e], v);
                o[r] = v;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < ATT_MAX_DH / 128 + 1; r++) {
        const int e = threadIdx.x + r * 128;
        if (e < Dh)
            p.out[((size_t)i * p.H + h) * Dh + e] = o[r] * inv;
    }
}

/* ---- the op --------------------------------------------------------------------------- */

size_t seer_cuda_attention_smem_max(void) { return attn_smem_bytes(ATT_GB, ATT_MAX_DH); }

seer_status seer_cuda_attention_init(seer_cuda *c) {
    c->attn = (seer_cuda_att *)calloc(1, sizeof *c->attn);
    if (!c->attn)
        return seer_err(SEER_ERR_OOM, "out of memory");
    const size_t need = seer_cuda_attention_smem_max();
    if (need > c->smem_optin)
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "CUDA attention needs %zu bytes of shared memory per block; the device allows %zu",
                        need, c->smem_optin);
    CUDA_TRY(cudaFuncSetAttribute(attn_partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)need));
    c->attn->occ_key = -1;
    return attn_tc_init(c);
}

void seer_cuda_attention_free(seer_cuda *c) {
    if (!c->attn)
        return;
    seer_cuda_buf_free(c, &c->attn->part);
    seer_cuda_buf_free(c, &c->attn->cnt);
    seer_cuda_buf_free(c, &c->attn->qkv_idx);
    free(c->attn->qkv_host);
    free(c->attn);
    c->attn = NULL;
}

/* The checks of a call of T >= 1 tokens, and its plan: batch_begin's, or made here where the
 * plan is not this call's. */
static seer_status att_plan(seer_backend *be, const seer_kv_geom *g, int layer, const seer_attn_batch *ab) {
    seer_cuda *c = seer_cuda_of(be);
    const int H = ab->n_heads, Hkv = ab->n_kv_heads, Dh = ab->head_dim;
    if (Hkv < 1 || H < Hkv || H % Hkv)
        return seer_err(SEER_ERR_INVALID_ARG, "attention: %d heads are not a multiple of %d KV heads", H, Hkv);
    if (Dh < 2 || Dh % 2 || Dh > ATT_MAX_DH)
        return seer_err(SEER_ERR_UNSUPPORTED, "attention: head_dim %d (CUDA supports even sizes up to %d)",
                        Dh, ATT_MAX_DH);
    if (g->head_dim != Dh || g->n_kv_heads != Hkv || g->page_size != ab->page_size)
        return seer_err(SEER_ERR_INVALID_ARG, "attention: the batch does not match the KV geometry");
    if (layer < 0 || layer >= g->n_layers)
        return seer_err(SEER_ERR_INVALID_ARG, "attention: layer %d of %d", layer, g->n_layers);
    if (!att_matches(c, ab)) {
        /* a padded call's other ops rely on batch_begin's padded copies, which a rebuild drops */
        if (c->fw.padded)
            return seer_err(SEER_ERR_INTERNAL, "attention: the batch changed inside a padded forward call");
        SEER_TRY(seer_cuda_batch_begin(be, ab, NULL, NULL, NULL, NULL, NULL, 0));
    }
    if (layer >= c->att.min_layers_view)
        return seer_err(SEER_ERR_INVALID_ARG, "attention: layer %d has no list in a view of %d layers",
                        layer, c->att.min_layers_view);
    return SEER_OK;
}

seer_status seer_cuda_attention_on_tc(seer_backend *be, const seer_kv_geom *g, int layer,
                                      const seer_attn_batch *ab, bool *out) {
    seer_cuda *c = seer_cuda_of(be);
    const int H = ab->n_heads, Hkv = ab->n_kv_heads, Dh = ab->head_dim;
    *out = false;
    /* quantised rows: the kernels read groups of 32 (every head size they serve has them) */
    if (ab->T < 1 || !attn_tc_eligible(c, H, Hkv, Dh) ||
        (g->kv_type != SEER_KV_FULL && seer_kvt_group(g->kv_type, Dh) != 32))
        return SEER_OK;
    SEER_TRY(att_plan(be, g, layer, ab));
    *out = c->att.tc;
    return SEER_OK;
}

seer_status seer_cuda_attention(seer_backend *be, float *out, const float *q, const void *kv,
                                const seer_kv_geom *g, int layer, const seer_attn_batch *ab) {
    seer_cuda *c = seer_cuda_of(be);
    const int T = ab->T, H = ab->n_heads, Hkv = ab->n_kv_heads, Dh = ab->head_dim;
    if (T < 1)
        return SEER_OK;
    SEER_TRY(att_plan(be, g, layer, ab));
    const seer_cuda_attn *a = &c->att;
    /* quantised rows: only the tensor-core kernels read them (seer_cuda_attention_on_tc) */
    const bool rows = g->kv_type != SEER_KV_FULL;
    if (rows && (!a->tc || seer_kvt_group(g->kv_type, Dh) != 32))
        return seer_err(SEER_ERR_INTERNAL, "attention: quantised KV rows in a call the tensor-core kernel "
                                           "does not serve");

    int n_hc, gb;
    head_chunks(H, Hkv, &n_hc, &gb);
    attn_params p;
    p.out = out;
    p.q = q;
    p.kv = (const bf16 *)kv;
    p.part_acc = p.part_ml = NULL;
    if (a->split) {
        /* batch_begin reserved room for the accumulators of n_q (token, split) rows, then
         * their (m, l): placed by the buffer's capacity, fixed until it is reallocated (which
         * drops every recording), not by this call's n_q */
        const size_t q_cap = c->attn->part.cap / (sizeof(float) * (size_t)H * ((size_t)Dh + 2));
        p.part_acc = (float *)c->attn->part.p;
        p.part_ml = p.part_acc + q_cap * H * Dh;
    }
    p.desc = a->desc;
    p.att_cnt = (int *)c->attn->cnt.p;
    p.H = H;
    p.Hkv = Hkv;
    p.Dh = Dh;
    p.group = H / Hkv;
    p.gb = gb;
    p.n_hc = n_hc;
    p.layer = layer;
    p.page_size = g->page_size;
    p.head_stride = (size_t)g->page_size * Dh;
    p.kv_stride = (size_t)Hkv * p.head_stride;
    p.layer_off = (size_t)layer * 2 * p.kv_stride;
    p.page_stride = (size_t)g->n_layers * 2 * p.kv_stride;
    p.kv_bits = p.kv_soff = 0;
    p.kv_row_bytes = 0;
    if (rows) {
        /* kv.cu's pages of quantised rows: [page][layer][K, V][slot][row], a row kv/kv_type.h's
         * (the codes of head h from byte h Dh bits / 8, then the exponents), in bytes */
        p.kv_bits = seer_kvt_bits(g->kv_type);
        p.kv_soff = (int)seer_kvt_scales_off(g->kv_type, Hkv * Dh);
        p.kv_row_bytes = seer_kv_geom_row_bytes(g, (int)sizeof(bf16));
        p.head_stride = (size_t)Dh * p.kv_bits / 8;
        p.kv_stride = (size_t)g->page_size * p.kv_row_bytes;
        p.layer_off = (size_t)layer * 2 * p.kv_stride;
        p.page_stride = (size_t)g->n_layers * 2 * p.kv_stride;
    }
    p.scale = ab->scale;
    p.window = ab->window > 0 ? ab->window : 0;
    p.softcap = ab->softcap > 0.f ? ab->softcap : 0.f;
    p.softcap_inv = p.softcap > 0.f ? 1.f / p.softcap : 0.f;

    const int grid = c->fw.padded ? a->grid_bucket : a->grid;
    if (a->tc) {
        const int grids[ATT_TC_KINDS + 1] = {c->fw.padded ? a->grid_dec_bucket : a->grid_dec, grid,
                                             c->fw.padded ? a->grid_pre_bucket : a->grid_pre,
                                             c->fw.padded ? a->grid_pre_mma_bucket : a->grid_pre_mma};
        SEER_TRY(attn_tc_launch(c, p, grids));
    } else {
        attn_partial_kernel<<<(unsigned)grid, ATT_THREADS, attn_smem_bytes(gb, Dh), c->stream>>>(p);
        LAUNCH_TRY("attn_partial_kernel");
    }
    seer_cuda_prof_mark(c, false, "attention (partials)");
    if (a->need_combine) { /* tokens the partial kernels left split (tmode 0) */
        const int rows = c->fw.padded ? c->fw.T_pad : T;
        CUDA_TRY(seer_cuda_launch(c, attn_combine_kernel, dim3((unsigned)((size_t)rows * H)), dim3(128), 0, p));
        LAUNCH_TRY("attn_combine_kernel");
    }
    return SEER_OK;
}
