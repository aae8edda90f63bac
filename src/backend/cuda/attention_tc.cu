/*
 * attention_tc.cu: attention on the tensor cores for head sizes 64, 96, 128 and 256 and GQA groups up
 * to 16, over the same descriptor and visible sets as attention.cu (batch_begin builds both).
 *
 * The rows of a work item are (token, query head) pairs of consecutive tokens of one
 * sequence that share a KV head, so every K/V tile that goes to shared memory serves all of
 * them: a verification of G + 1 tokens reads the cache once, not G + 1 times. Scores
 * S = Q K^T and the update O += P V are mma.m16n8k16 products (Q and P rounded to bf16,
 * f32 accumulation), with an online softmax per row in between (Milakov & Gimelshein 2018;
 * the register layout of P as the next product's operand follows FlashAttention-2, Dao 2023).
 * K/V tiles of 64 keys are double-buffered with cp.async.
 *
 * Two kinds of item, served by three instantiations of the kernel (ATT_TC_DEC, _CHAIN, _PRE):
 *  - split (decode, verification, short chunks: at most SEER_ATT_TC_PREFILL_MIN new tokens in
 *    the sequence): the token's visible slots are cut into chunks by att_chunk(n_vis) exactly
 *    as in attention.cu; up to 32 rows; the four warps take fixed 16-key quarters of every
 *    tile, each with its own softmax state, merged in warp order at the end. A row's result
 *    depends on its own query, its visible set and that fixed order only: the other rows of
 *    the item (one token alone in a decode step, or G + 1 of them in a verification) do not
 *    change a bit of it, which greedy speculation relies on. Items of at most 16 rows go to
 *    the decode kind, the others to the chain kind; the arithmetic per row is the same.
 *  - prefill (longer runs of new tokens; the prefill kind): flash attention proper, one split
 *    over all visible slots, 128 rows, a warp per 16 rows over every key of every tile, its
 *    result written from registers; or, where a sequence's chunk has too few rows to fill
 *    the GPU that way, 64 rows, two warps per 16 rows over halves of each tile, merged. A
 *    flagged prompt token (seer_attn_batch.seq_prompt) in a call of at most
 *    SEER_CUDA_INVARIANT_MAX_T tokens takes a third way, "whole" items: 128 rows, one key
 *    part, split at fixed visible indices (att_pre_chunk of its visible count), the splits
 *    merged by the combine kernel in split order. Its result then
 *    depends on its query and its visible keys alone (tiles past a row's keys add exact
 *    zeros), so a prompt gives the same bits however it is cut into such calls (the
 *    backend's prompt_cuts_free), and a short piece of a long prompt beside a decode step
 *    spreads over the GPU instead of reading every key in one block per head. Not
 *    batch-invariant with the split kind (different summation order and exponential), and
 *    need not be: a prompt is prefilled the same way whatever decodes after it. Its own
 *    instantiation, so that its larger Q buffer does not cost the chain kind shared memory (lab/attention_lab.cu measured it: 1.5-4 % on chains).
 * On Hopper builds with sm_90a, attention_wgmma.cu serves the prefill kind of head size 128
 * (the same items, descriptor and visible sets; asynchronous warpgroup products), except in a
 * windowed layer's call or one with soft-capping, which it does not take: the mma.sync prefill
 * kind serves those. Every kind here masks the keys behind a row's window (att_in_window; keys
 * behind every row's are not read at all) and caps the scaled scores (att_cap).
 *
 * A storage of quantised rows (geom kv_type q8 / q4, kv/kv_type.h; rows laid out as kv.cu and
 * kv_type.cu keep them) has its own instantiations of every kind (BITS 8 and 4): tc_load_q
 * reads each key's head codes and its groups' exponents, in the storage's own geometry
 * (attn_params' byte strides, seer_kvt_row_bytes and seer_kvt_scales_off), and writes code *
 * 2^e, exact in bf16, into the same shared tiles, so the products, softmax and merges are the
 * bf16 kernel's code and a call gives, bit for bit, what the same call gives over bf16 rows
 * holding the dequantised values (test_backend_ops_qkv checks it). The bf16 instantiations'
 * generated code is not changed by them (the same instructions). Candidly, a first version:
 * its loads are synchronous (ordinary loads, then conversion and shared-memory stores, while
 * cp.async runs the bf16 tiles a stage ahead), so a tile's latency is not hidden behind the
 * previous tile's products; its speed is not yet measured on a GPU, and it serves only with
 * seer_cuda_tuning.kv_rows_tc (off by default until it has run on one). attention_wgmma.cu does
 * not read such rows: their prefill kind runs here, on the mma.sync kernel.
 * Not for: head sizes other than 64, 96, 128 and 256 or groups above 16 (attention.cu serves them).
 */
#include "backend/cuda/attention.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define TC_THREADS 256 /* 8 warps: key parts x m-tiles */
#define TC_TK 64
#define TC_PRE_ROWS 128 /* rows of a prefill item: a warp's m-tile each */

static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

static __device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* 16 bytes global -> shared; n = 0 writes zeros without reading. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(n)
                 : "memory");
}

static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
static __device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

static __device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

static __device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Q rows and tokens a block of a kind holds, its threads. */
static __host__ __device__ constexpr int tc_qrows(int kind) {
    return kind == ATT_TC_DEC ? 16 : kind == ATT_TC_PRE ? TC_PRE_ROWS : 64;
}
static __host__ __device__ constexpr int tc_toks(int kind) { return kind == ATT_TC_PRE ? TC_PRE_ROWS : 64; }
static __host__ __device__ constexpr int tc_threads(int kind) { return kind == ATT_TC_DEC ? 128 : 256; }

/* Shared memory of a block, in the order the kernel carves it. */
static __host__ __device__ constexpr size_t tc_smem(int dh, int kind) {
    return (size_t)tc_qrows(kind) * (dh + 8) * 2  /* Q rows, bf16 */
           + (size_t)4 * 64 * (dh + 8) * 2        /* two stages of K and V tiles */
           + 2 * 64 * 8 + 2 * 64 * 4              /* key offsets, candidate (or slot) of each key */
           + (size_t)5 * tc_toks(kind) * 4        /* token, visible count, slot, splits, position
                                                   * per row token */
           + 128 * 2 * 4                          /* (m, l) per key part and row for the merge */
           + (kind == ATT_TC_DEC ? (size_t)4 * 8 * dh * 4 : 0); /* decode: a split's merge, eight rows at a time */
}

/* What the rows of an item share, in shared memory; window: the call's (attn_params). */
struct tc_item {
    int ntok, ng, rows, window;
    const int *t_i, *t_nvis, *t_slot, *t_pos;
    int owner; /* >= 0: the tile holds this token's keys, the other rows see none of it */
};

/* Whether row r sees the key at tile position kl (visible index kidx). kcand holds each key's
 * candidate, or -1 - slot for a cached slot. */
static __device__ __forceinline__ bool tc_visible(const att_desc &a, const tc_item &it,
                                                  const long long *koff, const int *kcand, int r,
                                                  int kl, int kidx) {
    if (r >= it.rows || koff[kl] < 0)
        return false;
    const int tt = r / it.ng;
    if (kidx >= it.t_nvis[tt] || (it.owner >= 0 && tt != it.owner))
        return false;
    const int ci = kcand[kl];
    if (ci < 0)
        return att_in_window(it.window, it.t_pos[tt], -1 - ci);
    const bool ok =
        a.mask ? a.mask[(size_t)it.t_i[tt] * a.T + a.cand_tok[ci]] != 0 : a.cand_slot[ci] <= it.t_slot[tt];
    return ok && att_in_window(it.window, it.t_pos[tt], a.tok_pos[a.cand_tok[ci]]);
}

/*
 * One tile for m-tile rows [16 mt, 16 mt + 16) against NKT n8 key tiles starting at tile
 * position kl0: scores, mask, online softmax (state m, l of rows g and g + 8), O update.
 * FAST_EXP: the prefill kind's exponential (__expf), which the split kinds must not change.
 * full: every row of the item sees every key of the tile (the common case far from the end
 * of the visible range), so the mask is skipped; rows past the item's are zeros, harmless.
 */
template <int DH, int NKT, bool FAST_EXP>
static __device__ __forceinline__ void tc_tile(const att_desc &a, const tc_item &it,
                                               const bf16 *qs, const bf16 *Ks, const bf16 *Vs,
                                               const long long *koff, const int *kcand, int mt,
                                               int kl0, int kbase, bool full, float scale, float cap,
                                               float cap_inv, float (&m)[2], float (&l)[2],
                                               float (&O)[DH / 8][4]) {
    constexpr int LD = DH + 8;
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    float S[NKT][4];
#pragma unroll
    for (int n = 0; n < NKT; n++)
        S[n][0] = S[n][1] = S[n][2] = S[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < DH / 16; kk++) {
        uint32_t qa[4];
        ldsm_x4(qa, qs + (size_t)(mt * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int n2 = 0; n2 < NKT / 2; n2++) {
            uint32_t kb[4];
            const int j = lane >> 3;
            ldsm_x4(kb, Ks + (size_t)(kl0 + n2 * 16 + (j >> 1) * 8 + (lane & 7)) * LD + kk * 16 + (j & 1) * 8);
            mma_bf16(S[2 * n2], qa[0], qa[1], qa[2], qa[3], kb[0], kb[1]);
            mma_bf16(S[2 * n2 + 1], qa[0], qa[1], qa[2], qa[3], kb[2], kb[3]);
        }
    }
    float alpha[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int r = mt * 16 + g + 8 * hr;
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NKT; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int kl = kl0 + n * 8 + 2 * c + e;
                const float v = full || tc_visible(a, it, koff, kcand, r, kl, kbase + kl)
                                    ? att_cap(S[n][2 * hr + e] * scale, cap, cap_inv)
                                    : -INFINITY;
                S[n][2 * hr + e] = v;
                mx = fmaxf(mx, v);
            }
        mx = quad_max(mx);
        const float m_new = fmaxf(m[hr], mx);
        float sum = 0.f;
        if (m_new == -INFINITY) { /* nothing seen yet: exp(-inf - -inf) would be NaN */
            alpha[hr] = 1.f;
#pragma unroll
            for (int n = 0; n < NKT; n++)
                S[n][2 * hr] = S[n][2 * hr + 1] = 0.f;
        } else {
            alpha[hr] = FAST_EXP ? __expf(m[hr] - m_new) : expf(m[hr] - m_new);
#pragma unroll
            for (int n = 0; n < NKT; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float pv = FAST_EXP ? __expf(S[n][2 * hr + e] - m_new) : expf(S[n][2 * hr + e] - m_new);
                    S[n][2 * hr + e] = pv;
                    sum += pv;
                }
        }
        sum = quad_sum(sum);
        m[hr] = m_new;
        l[hr] = l[hr] * alpha[hr] + sum;
    }
    /* a running max that did not move scales by 1: skipped where no row of the warp moved
     * (the prefill kind; bit-exact, x * 1 = x) */
    if (!FAST_EXP || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
    for (int dn = 0; dn < DH / 8; dn++) {
        O[dn][0] *= alpha[0];
        O[dn][1] *= alpha[0];
        O[dn][2] *= alpha[1];
        O[dn][3] *= alpha[1];
    }
    }
#pragma unroll
    for (int j = 0; j < NKT / 2; j++) {
        const uint32_t p0 = pack_bf16(S[2 * j][0], S[2 * j][1]), p1 = pack_bf16(S[2 * j][2], S[2 * j][3]);
        const uint32_t p2 = pack_bf16(S[2 * j + 1][0], S[2 * j + 1][1]),
                       p3 = pack_bf16(S[2 * j + 1][2], S[2 * j + 1][3]);
        const int jj = lane >> 3;
        const bf16 *vrow = Vs + (size_t)(kl0 + j * 16 + (jj & 1) * 8 + (lane & 7)) * LD + (jj >> 1) * 8;
#pragma unroll
        for (int d2 = 0; d2 < DH / 16; d2++) {
            uint32_t vb[4];
            ldsm_x4_t(vb, vrow + d2 * 16);
            mma_bf16(O[2 * d2], p0, p1, p2, p3, vb[0], vb[1]);
            mma_bf16(O[2 * d2 + 1], p0, p1, p2, p3, vb[2], vb[3]);
        }
    }
}

/* Merges each split token's S partials (unnormalised sums, running max and sum per split) in
 * split order: a warp per row (token, head of the group), lanes over the head's elements.
 * The same arithmetic in the same order as attn_combine_kernel (attention.cu), so a token's
 * output does not depend on which of the two merged it. */
template <int DH, int NT>
static __device__ void tc_combine(const att_desc &a, const attn_params &p, const int *t_i,
                                  const int *t_S, int ntok, int ng, int kvh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = warp; r < ntok * ng; r += NT / 32) {
        const int tt = r / ng, S = t_S[tt];
        if (S <= 1)
            continue;
        const int i = t_i[tt], h = kvh * ng + r % ng;
        const size_t row0 = (size_t)a.qoff[i] * p.H + h, rs = (size_t)p.H;
        /* lane j's splits k = j + 32 w: their running maxima, then weights, in registers */
        constexpr int KW = ATT_MAX_SPLITS > 32 ? (ATT_MAX_SPLITS + 31) / 32 : 1;
        float mk[KW], wk[KW];
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < KW; w++) {
            const int k = lane + 32 * w;
            mk[w] = k < S ? __ldcg(&p.part_ml[(row0 + k * rs) * 2]) : -INFINITY;
            M = fmaxf(M, mk[w]);
        }
        for (int o = 16; o > 0; o >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        float L = 0.f;
#pragma unroll
        for (int w = 0; w < KW; w++) { /* written as attn_combine_kernel writes it */
            const int k = lane + 32 * w;
            wk[w] = mk[w] == -INFINITY ? 0.f : expf(mk[w] - M);
            if (k < S)
                L += __ldcg(&p.part_ml[(row0 + k * rs) * 2 + 1]) * wk[w];
        }
        for (int o = 16; o > 0; o >>= 1)
            L += __shfl_xor_sync(0xffffffffu, L, o);
        const float inv = L > 0.f ? 1.f / L : 0.f;
        float acc[DH / 32];
#pragma unroll
        for (int e = 0; e < DH / 32; e++)
            acc[e] = 0.f;
        /* split k's weight from the lane that holds it: the loads below depend on nothing,
         * so many splits' loads are in flight at once; the sums still run in split order */
#pragma unroll 16
        for (int k = 0; k < S; k++) {
            float src = wk[0];
#pragma unroll
            for (int w = 1; w < KW; w++)
                src = (k >> 5) == w ? wk[w] : src;
            const float wt = __shfl_sync(0xffffffffu, src, k & 31);
            const float *pa = p.part_acc + (row0 + k * rs) * DH;
#pragma unroll
            for (int e = 0; e < DH / 32; e++)
                acc[e] = fmaf(wt, __ldcg(&pa[lane + 32 * e]), acc[e]);
        }
        float *out = p.out + ((size_t)i * p.H + h) * DH;
#pragma unroll
        for (int e = 0; e < DH / 32; e++)
            out[lane + 32 * e] = acc[e] * inv;
    }
}

/* One element d of a row's result from its key parts: part w's (m, l) at ml[w * ml_stride]
 * and its scaled sum at part[w * part_stride], merged in part order; written as the output of
 * token i, head h (a token of one split) or as split s's partial. Both kinds of item merge
 * through this, so their arithmetic is the same. */
template <int DH>
static __device__ __forceinline__ void tc_merge_parts(const att_desc &a, const attn_params &p, const float *ml,
                                                      int ml_stride, const float *part, size_t part_stride,
                                                      int KP, int i, int h, int d, int S, int s) {
    float M = -INFINITY;
    for (int w = 0; w < KP; w++)
        M = fmaxf(M, ml[w * ml_stride]);
    float L = 0.f, acc = 0.f;
    for (int w = 0; w < KP; w++) {
        const float mw = ml[w * ml_stride];
        L += mw == -INFINITY ? 0.f : ml[w * ml_stride + 1] * expf(mw - M);
        acc += part[w * part_stride];
    }
    if (S == 1) {
        p.out[((size_t)i * p.H + h) * DH + d] = L > 0.f ? acc * (1.f / L) : 0.f;
    } else {
        const size_t prow = (size_t)(a.qoff[i] + s) * p.H + h;
        p.part_acc[prow * DH + d] = acc;
        if (d == 0) {
            p.part_ml[prow * 2] = M;
            p.part_ml[prow * 2 + 1] = L;
        }
    }
}

/* ---- the kernel's pieces -------------------------------------------------------------- */
/* Each takes what it uses of the kernel's state as parameters. A few values come by reference
 * (tc_prep's item, tc_load's tile pointers, tc_dec_finish's lane coordinates, tc_merge_keyparts'
 * split), as the lambdas among these captured them: by value, the compiler orders the same
 * operations otherwise (a comparison's operands swapped, predicates where there were branches),
 * and the instructions of an instantiation are no longer exactly the ones it wrote with these
 * pieces in the kernel's body (compared instruction by instruction). */

/* The block's shared memory (tc_smem), as the kernel carves it. */
struct tc_shm {
    bf16 *qs;        /* [Q rows][DH + 8] bf16 */
    bf16 *kvs;       /* [stage][K, V][64][DH + 8] */
    long long *koff; /* [stage][64] where each key of a tile lives; -1: none */
    int *kcand;      /* [stage][64] each key's candidate, or -1 - slot for a cached slot */
    int *t_i, *t_nvis, *t_slot, *t_S, *t_pos; /* [tokens] token, visible count, slot, splits, position */
    float *ml_s;     /* [key part][rows of a part][m, l] */
    float *mrg;      /* [key part][rows of a part][DH] after the tiles */
    float *mb;       /* decode: [key part][8 rows][DH], beside the tiles */
};

/* The item's tokens into shared memory, thread k token k: index, visible count, slot,
 * position, splits. */
static __device__ __forceinline__ void tc_tokens(const att_desc &a, const attn_params &p, const tc_shm &sh,
                                                 const att_tok &t0, int first, int ntok, int kvh, bool one_split,
                                                 bool whole) {
    const int tid = threadIdx.x;
    if (tid < ntok) {
        const int i = a.cand_tok[first + tid];
        const att_tok tk = tid ? att_token(a, i, p.layer, kvh) : t0;
        sh.t_i[tid] = i;
        sh.t_nvis[tid] = tk.n_vis;
        sh.t_slot[tid] = tk.slot;
        sh.t_pos[tid] = a.tok_pos[i];
        sh.t_S[tid] = one_split ? 1 : whole ? att_pre_splits(tk.n_vis) : att_splits(tk.n_vis);
    }
}

/* Q rows (token, head of the group) as bf16; rows past the item's are zeros */
template <int DH, int NT>
static __device__ __forceinline__ void tc_stage_q(const attn_params &p, bf16 *qs, const int *t_i, int rows,
                                                  int n_mt, int ng, int kvh) {
    constexpr int LD = DH + 8;
    for (int e = threadIdx.x; e < n_mt * 16 * (DH / 8); e += NT) {
        const int r = e / (DH / 8), d8 = e % (DH / 8);
        uint4 w = make_uint4(0, 0, 0, 0);
        if (r < rows) {
            const float *src = p.q + ((size_t)t_i[r / ng] * p.H + kvh * ng + r % ng) * DH + d8 * 8;
            const float4 x0 = *(const float4 *)src, x1 = *(const float4 *)(src + 4);
            w = make_uint4(pack_bf16(x0.x, x0.y), pack_bf16(x0.z, x0.w), pack_bf16(x1.x, x1.y),
                           pack_bf16(x1.z, x1.w));
        }
        *(uint4 *)(qs + (size_t)r * LD + d8 * 8) = w;
    }
}

/* What tc_prep needs of an item: where its keys live, and which of them every row sees. */
struct tc_keys {
    const int32_t *pages;             /* the sequence's pages */
    size_t head_off;                  /* the layer's and KV head's rows in a page */
    int kvh, end;                     /* KV head; the item's keys end at visible index end */
    int full_end, min_nvis, min_slot; /* keys every row sees (tc_prep) */
};

/* An item's tc_keys; under a window, also its rows' smallest and largest position in s_pos. */
static __device__ __forceinline__ tc_keys tc_keys_of(const att_desc &a, const attn_params &p, const tc_shm &sh,
                                                     const att_tok &t0, int kvh, int ntok, int end, int max_nvis,
                                                     int *s_pos) {
    const int tid = threadIdx.x;
    const int *t_nvis = sh.t_nvis, *t_slot = sh.t_slot, *t_pos = sh.t_pos;
    const int32_t *pages = a.pages + a.page_off[t0.b];
    const size_t head_off = p.layer_off + (size_t)kvh * p.head_stride;
    /* Keys of every row: a tile inside [0, min over the tokens of n_vis) without candidates
     * is seen whole by every row (with its keys present). */
    int min_nvis = max_nvis, min_slot = INT_MAX;
    for (int k = 0; k < ntok; k++) {
        min_nvis = min(min_nvis, t_nvis[k]);
        min_slot = min(min_slot, t_slot[k]);
    }
    const int full_end = min(min_nvis, t0.C);
    if (p.window > 0) { /* in shared memory: no registers held over the tiles for it */
        if (tid == 0) {
            int lo = INT_MAX, hi = INT_MIN;
            for (int k = 0; k < ntok; k++)
                lo = min(lo, t_pos[k]), hi = max(hi, t_pos[k]);
            s_pos[0] = lo, s_pos[1] = hi;
        }
        __syncthreads();
    }
    return {pages, head_off, kvh, end, full_end, min_nvis, min_slot};
}

/* Where each key of the tile at visible index k0 lives (stage st of koff and kcand; -1: none):
 * its K row's head in bf16 elements from p.kv, or, over quantised rows (BITS > 0), the byte
 * offset of the head's codes in its K row (rows of p.kv_row_bytes); true where every row sees
 * every key of it. owner >= 0: the tile of a token tree's item from the one holding visible
 * index C on, with that token's own keys (below). */
template <int DH, int BITS>
static __device__ __forceinline__ bool tc_prep(const att_desc &a, const attn_params &p, const tc_shm &sh,
                                               const tc_keys &ks, const att_tok &t0, const int *s_pos, int st,
                                               int k0, int owner) {
    const int tid = threadIdx.x;
    const int &kvh = ks.kvh, &end = ks.end; /* references: see above */
    const int32_t *const &pages = ks.pages;
    const size_t &head_off = ks.head_off;
    const int &full_end = ks.full_end, &min_nvis = ks.min_nvis, &min_slot = ks.min_slot;
    const int *t_i = sh.t_i;
    long long *koff = sh.koff;
    int *kcand = sh.kcand;
    bool ok = true;
    if (tid < TC_TK) {
        const int k = k0 + tid;
        int ci = -1;
        const att_tok to = owner < 0 ? t0 : att_token(a, t_i[owner], p.layer, kvh);
        int slot = k < end && (owner < 0 || k < to.n_vis) ? att_key_slot(a, to, k, &ci) : -1;
        /* under a window: a key behind every row's window is none (not read); one
         * inside every row's leaves the tile whole */
        bool in_all = true;
        if (p.window > 0 && slot >= 0) {
            const int kp = ci < 0 ? slot : a.tok_pos[a.cand_tok[ci]];
            in_all = att_in_window(p.window, s_pos[1], kp);
            if (!att_in_window(p.window, s_pos[0], kp))
                slot = -1;
        }
        koff[st * TC_TK + tid] =
            slot < 0 ? -1
                     : (long long)((size_t)pages[slot / p.page_size] * p.page_stride + head_off +
                                   (size_t)(slot % p.page_size) * (BITS ? p.kv_row_bytes : (size_t)DH));
        kcand[st * TC_TK + tid] = ci >= 0 ? ci : -1 - max(slot, 0);
        /* new tokens at slots up to every row's own, without a mask, are seen by
         * every row too: a prefill chunk tests the predicate on its diagonal only */
        ok = owner < 0 && slot >= 0 && in_all &&
             (k < full_end || (ci >= 0 && k < min_nvis && !a.mask && slot <= min_slot));
    }
    return ok;
}

/* Stage st's K and V tiles, with cp.async, from where koff says (zeros for no key): this
 * thread's copies start at column ch, kv_col = p.kv + ch * 8 (the kernel says why). */
template <int DH, int NT>
static __device__ __forceinline__ void tc_load(const attn_params &p, long long *const &koff, bf16 *const &kvs,
                                               const bf16 *kv_col, int ch, size_t kv_stride, int st) {
    constexpr int LD = DH + 8;
    constexpr int CH = DH / 8, KEYS = TC_TK * CH / NT; /* 16-byte columns, keys per thread */
    static_assert(TC_TK * CH % NT == 0, "a tile's copies divide among the threads");
    const int tid = threadIdx.x;
#pragma unroll
    for (int j = 0; j < KEYS; j++) {
        /* where the threads do not divide into whole keys (Dh 96), the column of
         * each copy is its own */
        constexpr bool SAME_COL = NT % CH == 0;
        const int e = tid + j * NT, key = SAME_COL ? tid / CH + j * (NT / CH) : e / CH;
        const int chj = SAME_COL ? ch : e % CH;
        const long long o = koff[st * TC_TK + key];
        bf16 *dst = kvs + ((size_t)(st * 2) * TC_TK + key) * LD + chj * 8;
        const bf16 *src = o >= 0 ? (SAME_COL ? kv_col : p.kv + chj * 8) + o : p.kv;
        const int n = o >= 0 ? 16 : 0;
        cp_async16(dst, src, n);
        cp_async16(dst + (size_t)TC_TK * LD, o >= 0 ? src + kv_stride : p.kv, n);
    }
}

/* 2^ex as a float, ex in [-128, 127] a group's exponent (kv/kv_type.h): ldexpf(1, ex) of
 * kvt_value without its call; -128 is a group of zeros (scale 0), -127 the one subnormal. */
static __device__ __forceinline__ float tc_pow2(int ex) {
    return ex == -128 ? 0.f : ex == -127 ? __int_as_float(0x00400000) : __int_as_float((ex + 127) << 23);
}

/* Eight consecutive values of a quantised head row, codes w (q8: eight int8 in two words; q4:
 * eight nibbles q + 8 in one word, value j in bits 4 j) of a group with exponent ex, as
 * eight bf16: code * 2^ex is exact in f32 and in bf16 (at most 7 significant bits). */
template <int BITS>
static __device__ __forceinline__ uint4 tc_dequant8(const uint32_t (&w)[BITS / 4], int ex) {
    const float s = tc_pow2(ex);
    float f[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int q;
        if constexpr (BITS == 8)
            q = (int)(w[j / 4] << (24 - 8 * (j % 4))) >> 24; /* byte j % 4 of word j / 4, signed */
        else
            q = (int)((w[0] >> (4 * j)) & 15u) - 8;
        f[j] = __fmul_rn((float)q, s);
    }
    return make_uint4(pack_bf16(f[0], f[1]), pack_bf16(f[2], f[3]), pack_bf16(f[4], f[5]), pack_bf16(f[6], f[7]));
}

/* Stage st's K and V tiles from quantised rows (BITS 8 or 4, kv/kv_type.h), the same bf16
 * tiles tc_load leaves: each 16-byte column (eight values) from BITS bytes of the head's codes
 * at koff (tc_prep) and its group's exponent eoff bytes after them, V the same kv_stride bytes
 * on; zeros for no key. Ordinary loads, every one issued before the first conversion, then
 * shared-memory stores: the tile is complete in shared memory when they return, which the
 * kernel's barrier before the tile's use covers as it covers cp.async's wait. */
template <int DH, int NT, int BITS>
static __device__ __forceinline__ void tc_load_q(const attn_params &p, const long long *koff, bf16 *kvs,
                                                 long long eoff, int st) {
    constexpr int LD = DH + 8;
    constexpr int CH = DH / 8, KEYS = TC_TK * CH / NT, W = BITS / 4; /* code words per column */
    static_assert(BITS == 8 || BITS == 4, "q8 or q4 codes");
    static_assert(DH % 32 == 0, "a column lies in one group of 32 (seer_kvt_group)");
    static_assert(TC_TK * CH % NT == 0, "a tile's copies divide among the threads");
    const int tid = threadIdx.x;
    const uint8_t *kv = (const uint8_t *)p.kv;
    constexpr bool SAME_COL = NT % CH == 0; /* tc_load's columns: see there */
    /* keys whose loads are in flight at once: all of a thread's, but half of them at head size
     * 256 (sixteen columns a thread), where all would spill (ptxas -v) */
    constexpr int NB = DH > 128 ? KEYS / 2 : KEYS;
#pragma unroll
    for (int j0 = 0; j0 < KEYS; j0 += NB) {
        uint32_t kw[NB][W], vw[NB][W];
        int ke[NB], ve[NB];
#pragma unroll
        for (int jj = 0; jj < NB; jj++) {
            const int j = j0 + jj, e = tid + j * NT, key = SAME_COL ? tid / CH + j * (NT / CH) : e / CH;
            const int chj = SAME_COL ? tid % CH : e % CH;
            const long long o = koff[st * TC_TK + key];
#pragma unroll
            for (int w = 0; w < W; w++) /* no key: codes of zero (q4: nibbles of 8), scale 0 */
                kw[jj][w] = vw[jj][w] = BITS == 8 ? 0u : 0x88888888u;
            ke[jj] = ve[jj] = -128;
            if (o >= 0) {
                const uint8_t *kr = kv + o, *vr = kr + p.kv_stride;
                if constexpr (BITS == 8) {
                    const uint2 a = *(const uint2 *)(kr + chj * 8), b = *(const uint2 *)(vr + chj * 8);
                    kw[jj][0] = a.x, kw[jj][1] = a.y, vw[jj][0] = b.x, vw[jj][1] = b.y;
                } else {
                    kw[jj][0] = *(const uint32_t *)(kr + chj * 4);
                    vw[jj][0] = *(const uint32_t *)(vr + chj * 4);
                }
                ke[jj] = (int8_t)kr[eoff + chj / 4]; /* eight values of column chj: group chj / 4 */
                ve[jj] = (int8_t)vr[eoff + chj / 4];
            }
        }
#pragma unroll
        for (int jj = 0; jj < NB; jj++) {
            const int j = j0 + jj, e = tid + j * NT, key = SAME_COL ? tid / CH + j * (NT / CH) : e / CH;
            const int chj = SAME_COL ? tid % CH : e % CH;
            bf16 *dst = kvs + ((size_t)(st * 2) * TC_TK + key) * LD + chj * 8;
            *(uint4 *)dst = tc_dequant8<BITS>(kw[jj], ke[jj]);
            *(uint4 *)(dst + (size_t)TC_TK * LD) = tc_dequant8<BITS>(vw[jj], ve[jj]);
        }
    }
}

/* Decode kind: split s's rows (one m-tile, at most 16) from the four warps' states,
 * eight rows at a time through mb, with the arithmetic of tc_merge_keyparts; then the
 * state starts over for the next split. */
template <int DH, int NT>
static __device__ __forceinline__ void tc_dec_finish(const att_desc &a, const attn_params &p, const tc_item &it,
                                                     const tc_shm &sh, int kvh, int s, int kp, int KP, int MR,
                                                     float (&m)[2], float (&l)[2], float (&O)[DH / 8][4],
                                                     const int &g, const int &c) {
    const int tid = threadIdx.x, ng = it.ng;
    const int *t_i = sh.t_i, *t_S = sh.t_S;
    float *ml_s = sh.ml_s, *mb = sh.mb;
#pragma unroll
    for (int hr = 0; hr < 2; hr++)
        if (c == 0) {
            const int r = g + 8 * hr;
            ml_s[(kp * MR + r) * 2] = m[hr];
            ml_s[(kp * MR + r) * 2 + 1] = l[hr];
        }
    __syncthreads();
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        if (8 * hr >= it.rows)
            break;
        {
            const int r = g + 8 * hr;
            float M = -INFINITY;
            for (int w = 0; w < KP; w++)
                M = fmaxf(M, ml_s[(w * MR + r) * 2]);
            const float ew = m[hr] == -INFINITY ? 0.f : expf(m[hr] - M);
            float *dst = mb + (size_t)(kp * 8 + g) * DH + 2 * c;
#pragma unroll
            for (int dn = 0; dn < DH / 8; dn++)
                *(float2 *)(dst + dn * 8) = make_float2(O[dn][2 * hr] * ew, O[dn][2 * hr + 1] * ew);
        }
        __syncthreads();
        for (int e = tid; e < 8 * DH; e += NT) {
            const int r8 = e / DH, r = 8 * hr + r8, d = e % DH, tt = r / ng;
            if (r >= it.rows)
                break;
            if (s >= t_S[tt])
                continue;
            tc_merge_parts<DH>(a, p, ml_s + 2 * r, 2 * MR, mb + (size_t)r8 * DH + d, (size_t)8 * DH, KP,
                               t_i[tt], kvh * ng + r % ng, d, t_S[tt], s);
        }
        __syncthreads();
    }
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
#pragma unroll
    for (int dn = 0; dn < DH / 8; dn++)
        O[dn][0] = O[dn][1] = O[dn][2] = O[dn][3] = 0.f;
}

/* A prefill item of one split and one key part: the state of rows g and g + 8 of m-tile mt is
 * their result, written from registers. */
template <int DH>
static __device__ __forceinline__ void tc_write_rows(const attn_params &p, const int *t_i, int rows, int ng, int kvh,
                                                     int mt, int g, int c, const float (&l)[2],
                                                     const float (&O)[DH / 8][4]) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int r = mt * 16 + g + 8 * hr;
        if (r >= rows)
            break;
        const float inv = l[hr] > 0.f ? 1.f / l[hr] : 0.f;
        float *dst = p.out + ((size_t)t_i[r / ng] * p.H + kvh * ng + r % ng) * DH + 2 * c;
#pragma unroll
        for (int dn = 0; dn < DH / 8; dn++)
            *(float2 *)(dst + dn * 8) = make_float2(O[dn][2 * hr] * inv, O[dn][2 * hr + 1] * inv);
    }
}

/* Merge the key parts in part order: each warp's (m, l) and its O scaled to the
 * rows' common max, then summed part by part; written as split s0's result. */
template <int DH, int NT>
static __device__ __forceinline__ void tc_merge_keyparts(const att_desc &a, const attn_params &p, const tc_item &it,
                                                         const tc_shm &sh, int kvh, const int &s0, int kp, int KP,
                                                         int MR, int mt, int n_mt, const float (&m)[2],
                                                         const float (&l)[2], const float (&O)[DH / 8][4], int g,
                                                         int c) {
    const int tid = threadIdx.x, ng = it.ng;
    const int *t_i = sh.t_i, *t_S = sh.t_S;
    float *ml_s = sh.ml_s, *mrg = sh.mrg;
#pragma unroll
    for (int hr = 0; hr < 2; hr++)
        if (mt < n_mt && c == 0) {
            const int r = mt * 16 + g + 8 * hr;
            ml_s[(kp * MR + r) * 2] = m[hr];
            ml_s[(kp * MR + r) * 2 + 1] = l[hr];
        }
    __syncthreads();
    if (mt < n_mt) {
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int r = mt * 16 + g + 8 * hr;
            float M = -INFINITY;
            for (int w = 0; w < KP; w++)
                M = fmaxf(M, ml_s[(w * MR + r) * 2]);
            const float ew = m[hr] == -INFINITY ? 0.f : expf(m[hr] - M);
            float *dst = mrg + (size_t)(kp * MR + r) * DH + 2 * c;
#pragma unroll
            for (int dn = 0; dn < DH / 8; dn++)
                *(float2 *)(dst + dn * 8) = make_float2(O[dn][2 * hr] * ew, O[dn][2 * hr + 1] * ew);
        }
    }
    __syncthreads();
    for (int e = tid; e < it.rows * DH; e += NT) {
        const int r = e / DH, d = e % DH, tt = r / ng;
        if (s0 >= t_S[tt])
            continue;
        tc_merge_parts<DH>(a, p, ml_s + 2 * r, 2 * MR, mrg + (size_t)r * DH + d, (size_t)MR * DH, KP,
                           t_i[tt], kvh * ng + r % ng, d, t_S[tt], s0);
    }
}

/* A lone token's merge of its splits (tc_combine) by the item that brings the last of them to
 * (group lo, KV head kvh): this item's are [s0, s1) of S; s_last: the block's answer. */
template <int DH, int NT>
static __device__ __forceinline__ void tc_merge_last(const att_desc &a, const attn_params &p, const int *t_i,
                                                     const int *t_S, int &s_last, int lo, int kvh, int S, int s0,
                                                     int s1, int ntok, int ng) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *ctr = p.att_cnt + (size_t)lo * p.Hkv + kvh;
        s_last = atomicAdd(ctr, s1 - s0) == S - (s1 - s0); /* the splits of (group, head) */
        if (s_last)
            *ctr = 0; /* every item has arrived: ready for the next call */
    }
    __syncthreads();
    if (s_last) {
        __threadfence();
        tc_combine<DH, NT>(a, p, t_i, t_S, ntok, ng, kvh);
    }
}

/* Persistent, over its kind's work units (one split of one (group, KV head)): block b takes
 * units b, b + grid, ..., unit = gitem[group] + split * Hkv + KV head.
 * DEC (the decode kind): groups of at most 16 rows, not prefilled (decode steps, short
 * chains): one m-tile, four warps. With more units U than blocks, block b takes units
 * [U b / grid, U (b + 1) / grid) instead, unit = gitem[group] + KV head * splits + split, and
 * streams through each run of consecutive splits of one (group, head) in one pipeline, a
 * split's partial merged while the next split's first tile is in flight.
 * CHAIN (chains of up to 32 rows): eight warps, one split per item. A row's arithmetic is the
 * same in both: key part kp of every 64-key tile is warp kp's, the parts merge in part order,
 * the splits in split order; so a token gives the same bits in a decode step and in a
 * verification chain whichever kind serves each.
 * PRE (the prefill kind): eight warps, one m-tile each, over every key of a single split (or,
 * for items of at most 64 rows not flagged whole, two warps per m-tile over halves of each
 * tile); whole items over one fixed split each, their partials left to the combine.
 * BITS: 0 for bf16 rows; 8 or 4 for a storage of quantised rows, whose tiles tc_load_q
 * dequantises into the same shared memory (the rest is the same code). */
template <int DH, int KIND, int BITS>
__global__ void __launch_bounds__(tc_threads(KIND), DH > 128 ? 1 : 2) attn_tc_kernel(attn_params p) {
    constexpr bool DEC = KIND == ATT_TC_DEC, PRE = KIND == ATT_TC_PRE;
    constexpr int LD = DH + 8, NT = tc_threads(KIND), NTOK = tc_toks(KIND);
    extern __shared__ __align__(16) unsigned char tc_sm[];
    bf16 *qs = (bf16 *)tc_sm;
    bf16 *kvs = qs + tc_qrows(KIND) * LD; /* [stage][K, V][64][LD] */
    long long *koff = (long long *)(kvs + 4 * 64 * LD);
    int *kcand = (int *)(koff + 2 * 64);
    int *t_i = kcand + 2 * 64, *t_nvis = t_i + NTOK, *t_slot = t_nvis + NTOK, *t_S = t_slot + NTOK;
    int *t_pos = t_S + NTOK;
    float *ml_s = (float *)(t_pos + NTOK); /* [key part][rows of a part][m, l] */
    float *mrg = (float *)kvs;         /* [key part][rows of a part][DH] after the tiles */
    float *mb = ml_s + 128 * 2;        /* decode: [key part][8 rows][DH], beside the tiles */
    const tc_shm sh = {qs, kvs, koff, kcand, t_i, t_nvis, t_slot, t_S, t_pos, ml_s, mrg, mb};
    __shared__ int s_last;
    __shared__ int s_pos[2]; /* a windowed call: the item's smallest and largest row position */

    /* The descriptor, token info and key addresses come from batch_begin: only q and the
     * cache (written by the kernels before) wait for them (pdl_wait before the first use). */
    pdl_trigger();
    const att_desc a = att_desc_load(p.desc);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int ng = p.group;

    /* this kind's groups and items: the decode kind's, the chain kind's, the prefill kind's */
    const int g_first = DEC ? 0 : PRE ? a.n_grp_chain : a.n_grp_dec;
    const int g_last = (DEC ? a.n_grp_dec : PRE ? a.n_grp : a.n_grp_chain) - 1;
    const int i_begin = DEC ? 0 : PRE ? a.n_work_chain : a.n_work_dec;
    const int i_end = DEC ? a.n_work_dec : PRE ? a.n_work_tc : a.n_work_chain;
    /* A work unit is one split of one (group, KV head). Where the decode kind has more units
     * than blocks, a block takes an equal contiguous range of them, counted split by split
     * within each KV head, and streams through the consecutive splits of each (group, head)
     * it meets as one item. Otherwise (and in the other kinds) a block takes one unit at a
     * time, strided over the grid, counted KV head by KV head within each split: the blocks
     * of one split then read the heads of the same pages side by side. */
    const long long n_units = i_end - i_begin;
    const bool ranges = DEC && n_units > gridDim.x;
    int item = i_begin + (ranges ? (int)(n_units * blockIdx.x / gridDim.x) : (int)blockIdx.x);
    const int item_stop = ranges ? i_begin + (int)(n_units * (blockIdx.x + 1) / gridDim.x) : i_end;
    for (int next; item < item_stop; item = next) {
        __syncthreads(); /* the previous item is done with shared memory */
        const int lo = att_last_le(a.gitem, g_first, g_last, item); /* the group */
        const int32_t *gr = a.grp + 4 * lo;
        const int first = gr[0], ntok = gr[1], S = gr[3];
        /* whole: prompt tokens split at fixed key positions (batch_begin), one key part */
        const bool merge_here = (gr[2] & 2) != 0, whole = (gr[2] & 1) != 0;
        const bool one_split = PRE && !whole;
        const int local = item - a.gitem[lo];
        const int kvh = ranges ? local / S : local % p.Hkv, s0 = ranges ? local % S : local / p.Hkv;
        const int s1 = ranges ? min(S, s0 + (item_stop - item)) : min(s0 + 1, S);
        next = ranges ? item + (s1 - s0) : item + (int)gridDim.x;
        const att_tok t0 = att_token(a, a.cand_tok[first], p.layer, kvh);
        tc_tokens(a, p, sh, t0, first, ntok, kvh, one_split, whole);
        __syncthreads();
        int max_nvis = 0;
        for (int k = 0; k < ntok; k++)
            max_nvis = max(max_nvis, t_nvis[k]);
        const long long chunk = one_split ? (long long)max_nvis : whole ? att_pre_chunk(t0.n_vis) : att_chunk(t0.n_vis);
        const int begin = (int)(one_split ? 0 : s0 * chunk);
        const int end = (int)min((long long)s1 * chunk, (long long)max_nvis);
        pdl_wait(); /* from here on q, the cache and the outputs are ours */
        do { /* break: the item is done */
            if (begin >= end)
                break;
            const tc_item it = {ntok, ng, ntok * ng, p.window, t_i, t_nvis, t_slot, t_pos, -1};
            const int n_mt = (it.rows + 15) / 16; /* m-tiles with rows: at most 2 split, 8 prefill */
            /* Warp roles: key part kp of each tile (split: four of 16 keys, the fixed order a
             * row's sum follows; prefill: one, all 64 keys, or two of 32 for items of at most
             * 64 rows, which then keep every warp busy) and m-tile mt of the rows. */
            const int KP = PRE ? (whole || it.rows > 64 ? 1 : 2) : 4;        /* key parts */
            const int MR = DEC ? 16 : PRE ? TC_PRE_ROWS / KP : 32;            /* rows of a part */
            const int kp = warp % KP, mt = warp / KP;

            tc_stage_q<DH, NT>(p, qs, t_i, it.rows, n_mt, ng, kvh);

            const tc_keys keys = tc_keys_of(a, p, sh, t0, kvh, ntok, end, max_nvis, s_pos);
            /* A thread copies the same 16-byte column of a few keys, K and V from one offset:
             * the address arithmetic per copy is an add (the issue loop was a third of the
             * kernel's stall samples when each copy recomputed its key, column and half). */
            const int ch = tid % (DH / 8);
            const bf16 *kv_col = p.kv + ch * 8;
            const size_t kv_stride = p.kv_stride;
            /* quantised rows: the head's exponents from its codes (kv/kv_type.h: a row's codes,
             * then its exponents from kv_soff, DH / 32 a head) */
            const long long eoff = BITS ? (long long)p.kv_soff + (long long)kvh * (DH / 32 - DH * BITS / 8) : 0;

            float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, O[DH / 8][4];
    #pragma unroll
            for (int dn = 0; dn < DH / 8; dn++)
                O[dn][0] = O[dn][1] = O[dn][2] = O[dn][3] = 0.f;

            const int n_tiles = (end - begin + TC_TK - 1) / TC_TK;
            const int tps = (int)(chunk / TC_TK); /* tiles per split (decode kind) */
            /* A token tree's rows (their sequence lists its candidates, t0.cl) see different
             * new keys at the same visible index: the tiles from the one holding index C on
             * are taken once per token of the item, with that token's keys and the other
             * rows masked (a tile a row sees nothing of leaves its state exactly as it was),
             * so each row's tiles are those of its own decode step. Steps: the shared tiles,
             * then (tile, token) pairs. */
            const bool per_tok = t0.cl != NULL && ntok > 1;
            const int ft = !per_tok ? n_tiles : t0.C <= begin ? 0 : min(n_tiles, (t0.C - begin) / TC_TK);
            const int n_steps = ft + (n_tiles - ft) * (per_tok ? ntok : 1);
            auto step_tile = [&](int s) { return s < ft ? s : ft + (s - ft) / ntok; };
            auto step_owner = [&](int s) { return s < ft ? -1 : (s - ft) % ntok; };
            bool full[2];
            int own[2];
            own[0] = step_owner(0);
            own[1] = -1;
            full[0] = __syncthreads_and(tc_prep<DH, BITS>(a, p, sh, keys, t0, s_pos, 0,
                                                          begin + step_tile(0) * TC_TK, own[0]));
            full[1] = false;
            if constexpr (BITS != 0)
                tc_load_q<DH, NT, BITS>(p, koff, kvs, eoff, 0);
            else
                tc_load<DH, NT>(p, koff, kvs, kv_col, ch, kv_stride, 0);
            cp_async_commit();
            for (int sp = 0; sp < n_steps; sp++) {
                const int st = sp & 1, t = step_tile(sp);
                if (sp + 1 < n_steps) {
                    own[st ^ 1] = step_owner(sp + 1);
                    full[st ^ 1] = __syncthreads_and(
                        tc_prep<DH, BITS>(a, p, sh, keys, t0, s_pos, st ^ 1, begin + step_tile(sp + 1) * TC_TK,
                                          own[st ^ 1]));
                    if constexpr (BITS != 0)
                        tc_load_q<DH, NT, BITS>(p, koff, kvs, eoff, st ^ 1);
                    else
                        tc_load<DH, NT>(p, koff, kvs, kv_col, ch, kv_stride, st ^ 1);
                }
                cp_async_commit();
                cp_async_wait1();
                __syncthreads();
                const bf16 *Ks = kvs + (size_t)(st * 2) * TC_TK * LD, *Vs = Ks + (size_t)TC_TK * LD;
                const long long *ko = koff + st * TC_TK;
                const int *kc = kcand + st * TC_TK;
                const int kbase = begin + t * TC_TK;
                tc_item its = it;
                its.owner = own[st];
                if (mt < n_mt) {
                    if (PRE) { /* the part's keys in steps of 16: the registers of one */
    #pragma unroll 1
                        for (int q = kp * 4 / KP; q < (kp + 1) * 4 / KP; q++)
                            tc_tile<DH, 2, true>(a, its, qs, Ks, Vs, ko, kc, mt, q * 16, kbase, full[st], p.scale,
                                                 p.softcap, p.softcap_inv, m, l, O);
                    } else
                        tc_tile<DH, 2, false>(a, its, qs, Ks, Vs, ko, kc, mt, kp * 16, kbase, full[st], p.scale,
                                              p.softcap, p.softcap_inv, m, l, O);
                }
                __syncthreads();
                const bool tile_done = own[st] < 0 || own[st] == ntok - 1;
                if (DEC && tile_done && ((t + 1) % tps == 0 || t + 1 == n_tiles))
                    tc_dec_finish<DH, NT>(a, p, it, sh, kvh, s0 + t / tps, kp, KP, MR, m, l, O, g, c);
            }
            if (DEC)
                break;
            if (one_split && KP == 1) { /* a row's state is its result, written from registers */
                if (mt < n_mt)
                    tc_write_rows<DH>(p, t_i, it.rows, ng, kvh, mt, g, c, l, O);
                break;
            }

            tc_merge_keyparts<DH, NT>(a, p, it, sh, kvh, s0, kp, KP, MR, mt, n_mt, m, l, O, g, c);
        } while (0);

        /* A group marked so (a lone token): the item that brings the last of the splits of
         * (group, KV head) merges the token's splits, in split order as attn_combine_kernel
         * does (threadFenceReduction in the CUDA samples); every item arrives with its count
         * of splits, also one whose splits are empty. */
        if (merge_here)
            tc_merge_last<DH, NT>(a, p, t_i, t_S, s_last, lo, kvh, S, s0, s1, ntok, ng);
    }
}

/* ---- host side ------------------------------------------------------------------------ */

bool attn_tc_eligible(const seer_cuda *c, int H, int Hkv, int Dh) {
    /* the scalar variant (seer_cuda_tuning.attn "scalar"): the scalar kernel for every shape
     * ("mma": these kernels, without attention_wgmma.cu's) */
    if (c->attn_variant == 2 || Hkv < 1 || H % Hkv)
        return false;
    return (Dh == 64 || Dh == 96 || Dh == 128 || Dh == 256) && H / Hkv <= 16;
}

int attn_tc_tokens(int group, bool prefill) { return (prefill ? TC_PRE_ROWS : 32) / group; }

/* The shared memory of a kind, for bf16 rows and for q8 and q4 rows (the same carving). */
template <int DH, int KIND>
static cudaError_t tc_attr() {
    const int smem = (int)tc_smem(DH, KIND);
    const cudaFuncAttribute at = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e = cudaFuncSetAttribute(attn_tc_kernel<DH, KIND, 0>, at, smem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_tc_kernel<DH, KIND, 8>, at, smem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_tc_kernel<DH, KIND, 4>, at, smem);
    return e;
}

seer_status attn_tc_init(seer_cuda *c) {
    c->attn->wg = 0;
    for (size_t k = 0; k < sizeof c->attn->tc_occ / sizeof *c->attn->tc_occ; k++)
        c->attn->tc_occ[k] = -1;
    if (tc_smem(128, ATT_TC_PRE) > c->smem_optin)
        return SEER_OK; /* attn_tc_capacity then says none: the scalar kernel runs */
    CUDA_TRY((tc_attr<64, ATT_TC_DEC>()));
    CUDA_TRY((tc_attr<64, ATT_TC_CHAIN>()));
    CUDA_TRY((tc_attr<64, ATT_TC_PRE>()));
    CUDA_TRY((tc_attr<96, ATT_TC_DEC>()));
    CUDA_TRY((tc_attr<96, ATT_TC_CHAIN>()));
    CUDA_TRY((tc_attr<96, ATT_TC_PRE>()));
    CUDA_TRY((tc_attr<128, ATT_TC_DEC>()));
    CUDA_TRY((tc_attr<128, ATT_TC_CHAIN>()));
    CUDA_TRY((tc_attr<128, ATT_TC_PRE>()));
    if (tc_smem(256, ATT_TC_PRE) <= c->smem_optin) {
        CUDA_TRY((tc_attr<256, ATT_TC_DEC>()));
        CUDA_TRY((tc_attr<256, ATT_TC_CHAIN>()));
        CUDA_TRY((tc_attr<256, ATT_TC_PRE>()));
    }
    return attn_wg_init(c);
}

/* The bf16 rows' kernel's: the plan sizes the grids by it, for quantised rows too (their
 * kernels carve the same shared memory under the same launch bounds; a persistent grid is
 * right at any size, only its speed depends on it). */
template <int DH, int KIND>
static seer_status tc_occupancy(int *n) {
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, attn_tc_kernel<DH, KIND, 0>, tc_threads(KIND),
                                                           tc_smem(DH, KIND)));
    return SEER_OK;
}

template <int DH>
static seer_status tc_occupancy_of(int kind, int *n) {
    return kind == ATT_TC_DEC     ? tc_occupancy<DH, ATT_TC_DEC>(n)
           : kind == ATT_TC_CHAIN ? tc_occupancy<DH, ATT_TC_CHAIN>(n)
                                  : tc_occupancy<DH, ATT_TC_PRE>(n);
}

/* Asked of the runtime once per head size and kind: batch_begin wants it every forward call. */
seer_status attn_tc_capacity(seer_cuda *c, int Dh, int kind, int *out) {
    int *cached = &c->attn->tc_occ[(Dh == 64 ? 0 : Dh == 96 ? 4 : Dh == 128 ? 8 : 12) + kind];
    if (*cached < 0) {
        int n = 0;
        const int k = kind == ATT_TC_PRE_MMA ? ATT_TC_PRE : kind;
        if (kind == ATT_TC_PRE && attn_wg_serves(c, Dh)) {
            SEER_TRY(attn_wg_capacity(c, &n));
        } else if (tc_smem(Dh, ATT_TC_PRE) <= c->smem_optin) { /* the largest kind */
            SEER_TRY(Dh == 64    ? tc_occupancy_of<64>(k, &n)
                     : Dh == 96  ? tc_occupancy_of<96>(k, &n)
                     : Dh == 128 ? tc_occupancy_of<128>(k, &n)
                                 : tc_occupancy_of<256>(k, &n));
            n = (n > 0 ? n : 1) * c->n_sm;
        }
        *cached = n; /* 0: the kernel does not fit; the scalar one runs */
    }
    *out = *cached;
    return SEER_OK;
}

template <int DH, int KIND, int BITS>
static seer_status tc_launch(seer_cuda *c, const attn_params &p, int grid) {
    CUDA_TRY(seer_cuda_launch(c, attn_tc_kernel<DH, KIND, BITS>, dim3((unsigned)grid), dim3(tc_threads(KIND)),
                              tc_smem(DH, KIND), p));
    LAUNCH_TRY("attn_tc_kernel");
    return SEER_OK;
}

template <int DH, int BITS>
static seer_status tc_launch_all(seer_cuda *c, const attn_params &p, const int (&grid)[ATT_TC_KINDS + 1]) {
    if (grid[ATT_TC_DEC] > 0)
        SEER_TRY((tc_launch<DH, ATT_TC_DEC, BITS>(c, p, grid[ATT_TC_DEC])));
    if (grid[ATT_TC_CHAIN] > 0)
        SEER_TRY((tc_launch<DH, ATT_TC_CHAIN, BITS>(c, p, grid[ATT_TC_CHAIN])));
    if (grid[ATT_TC_PRE] <= 0)
        return SEER_OK;
    if (!attn_wg_serves(c, DH) || c->att.pre_fixed) /* planned for the mma.sync kernel */
        return tc_launch<DH, ATT_TC_PRE, BITS>(c, p, grid[ATT_TC_PRE]);
    /* attention_wgmma.cu takes neither a window nor soft-capping nor quantised rows: the
     * mma.sync kernel serves such calls, over its own grid (the same items) */
    if (p.window > 0 || p.softcap > 0.f || BITS)
        return tc_launch<DH, ATT_TC_PRE, BITS>(c, p, grid[ATT_TC_PRE_MMA]);
    return attn_wg_launch(c, p, grid[ATT_TC_PRE]);
}

template <int BITS>
static seer_status tc_launch_dh(seer_cuda *c, const attn_params &p, const int (&grid)[ATT_TC_KINDS + 1]) {
    return p.Dh == 64    ? tc_launch_all<64, BITS>(c, p, grid)
           : p.Dh == 96  ? tc_launch_all<96, BITS>(c, p, grid)
           : p.Dh == 128 ? tc_launch_all<128, BITS>(c, p, grid)
                         : tc_launch_all<256, BITS>(c, p, grid);
}

seer_status attn_tc_launch(seer_cuda *c, const attn_params &p, const int (&grid)[ATT_TC_KINDS + 1]) {
    if (p.kv_bits != 0 && p.kv_bits != 8 && p.kv_bits != 4)
        return seer_err(SEER_ERR_INTERNAL, "attention: quantised KV rows of %d bits", p.kv_bits);
    return p.kv_bits == 8 ? tc_launch_dh<8>(c, p, grid)
           : p.kv_bits == 4 ? tc_launch_dh<4>(c, p, grid)
                            : tc_launch_dh<0>(c, p, grid);
}
