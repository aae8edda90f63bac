/*
 * attention.cu: attention over the paged bf16 KV cache with sparse views and explicit masks
 * among the new tokens, as flash decoding (Dao et al., "Flash-Decoding for long-context
 * inference", 2023): the slots a token may see are split into chunks, one block per (token,
 * KV head, head chunk, split) runs an online softmax (Milakov & Gimelshein 2018) over its
 * chunk for all query heads of the GQA group it holds, and a second kernel merges the splits.
 * Also batch_begin: the upload, once per forward call, of every index array the ops use and
 * of the per-token descriptors the attention kernel reads.
 *
 * The visible set is exactly the CPU reference's (cpu_attention.c): token i of sequence b
 * sees, for every layer and KV head, the cached slots s < len0 its view allows (view entries
 * with 0 <= s < min(len0, tail), then every slot in [tail, len0)), then the new tokens of b
 * the mask allows (without a mask: those at a slot <= its own). Visible index k of a token
 * maps to a slot in O(1): k < C is a cached slot (C = len0 without a view, else the
 * surviving list entries plus the tail), k >= C is the (k - C)-th new token of b, kept or
 * masked out by the predicate. Only the summation order differs from the reference.
 * Not for: performance tuning (tile shapes, tensor cores, CUDA graphs come later).
 */
#include "backend/cuda/cuda_common.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATT_TK 64          /* keys per tile; the softmax step assumes 2 per lane */
#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_GB 8           /* most query heads one block holds */
#define ATT_MAX_DH 256
#define ATT_PAIRS (ATT_GB * ATT_MAX_DH / 2 / ATT_THREADS) /* (head, dim pair)s per thread */
#define ATT_SPLIT_SLOTS 256 /* aim: a split per this many visible slots ... */
#define ATT_MAX_SPLITS 1024 /* ... but never more splits than this */

/* ---- batch_begin ---------------------------------------------------------------------- */

static seer_status bad_batch(const char *what, int a, int b) {
    return seer_err(SEER_ERR_INVALID_ARG, "attention batch: %s (%d, %d)", what, a, b);
}

/* Pinned staging buffer of at least bytes, after the copy that last read it has finished. */
static seer_status stage_reserve(seer_cuda *c, size_t bytes) {
    if (c->stage_pending) {
        CUDA_TRY(cudaEventSynchronize(c->stage_done));
        c->stage_pending = false;
    }
    if (bytes <= c->stage_cap)
        return SEER_OK;
    size_t want = bytes + bytes / 2;
    if (c->stage)
        CUDA_TRY(cudaFreeHost(c->stage));
    c->stage = NULL;
    c->stage_cap = 0;
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, want);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return seer_err(SEER_ERR_OOM, "CUDA: cannot allocate %.1f MiB of pinned host memory for the batch index arrays: %s",
                        want / 1048576.0, cudaGetErrorString(e));
    }
    c->stage = (int32_t *)p;
    c->stage_cap = want;
    return SEER_OK;
}

seer_status seer_cuda_batch_begin(seer_backend *be, const seer_attn_batch *ab,
                                  const int32_t *tokens, const int32_t *pos, const int32_t *page,
                                  const int32_t *row, const int32_t *out_rows, int n_out) {
    seer_cuda *c = seer_cuda_of(be);
    /* Forget the last call's copies first: whatever fails below, no op uses stale ones. */
    memset(c->idx, 0, sizeof c->idx);
    c->att.valid = false;
    if (!ab)
        return SEER_OK;
    const int T = ab->T, n_seq = ab->n_seq, ps = ab->page_size, Hkv = ab->n_kv_heads;
    if (T < 1 || n_seq < 1 || ps < 1 || ab->max_pages < 0 || n_out < 0 || n_out > T)
        return bad_batch("T, n_seq, page_size or n_out out of range", T, n_seq);
    if (ab->seq_tok_off[0] != 0 || ab->seq_tok_off[n_seq] != T)
        return bad_batch("seq_tok_off must run from 0 to T", ab->seq_tok_off[0], ab->seq_tok_off[n_seq]);
    for (int b = 0; b < n_seq; b++) {
        if (ab->seq_tok_off[b + 1] < ab->seq_tok_off[b])
            return bad_batch("seq_tok_off decreases at sequence", b, ab->seq_tok_off[b + 1]);
        if (ab->seq_len0[b] < 0)
            return bad_batch("negative len0 of sequence", b, ab->seq_len0[b]);
    }
    for (int i = 0; i < T; i++) {
        if (ab->tok_seq[i] < 0 || ab->tok_seq[i] >= n_seq)
            return bad_batch("tok_seq out of range at token", i, ab->tok_seq[i]);
        if (ab->tok_slot[i] < 0)
            return bad_batch("negative slot at token", i, ab->tok_slot[i]);
        if (ab->seq_toks[i] < 0 || ab->seq_toks[i] >= T)
            return bad_batch("seq_toks out of range at", i, ab->seq_toks[i]);
    }

    /* Sizes: pages each sequence needs, view lists and their entries. */
    size_t n_pages_all = 0, n_lists = 0, n_entries = 0;
    int min_lv = INT32_MAX;
    for (int b = 0; b < n_seq; b++) {
        long long max_slot = (long long)ab->seq_len0[b] - 1;
        for (int k = ab->seq_tok_off[b]; k < ab->seq_tok_off[b + 1]; k++) {
            const int j = ab->seq_toks[k];
            if (ab->tok_seq[j] != b)
                return bad_batch("seq_toks lists a token of another sequence", k, j);
            if (ab->tok_slot[j] > max_slot)
                max_slot = ab->tok_slot[j];
        }
        const long long np = (max_slot + ps) / ps;
        if (np > ab->max_pages)
            return bad_batch("a sequence needs more pages than max_pages", b, (int)np);
        n_pages_all += (size_t)np;
        const seer_attn_view *v = ab->seq_view ? ab->seq_view[b] : NULL;
        if (v) {
            if (v->n < 0 || (v->n > 0 && !v->idx) || v->n_layers_view < 1 || v->n_heads_view < 1)
                return bad_batch("malformed view of sequence", b, v->n);
            if (v->n_heads_view > 1 && v->n_heads_view < Hkv)
                return bad_batch("view has fewer head lists than KV heads", v->n_heads_view, Hkv);
            if (v->n_layers_view > 1 && v->n_layers_view < min_lv)
                min_lv = v->n_layers_view;
            const size_t nl = (size_t)v->n_layers_view * v->n_heads_view;
            n_lists += nl;
            n_entries += nl * (size_t)v->n;
        }
    }

    if (n_pages_all > INT32_MAX || n_entries > INT32_MAX)
        return bad_batch("page tables or view lists too large", (int)(n_pages_all >> 31),
                         (int)(n_entries >> 31));

    /* Layout of the staging buffer, in int32 words. */
    size_t off = 0;
    auto take = [&off](size_t words) {
        size_t o = off;
        off += words;
        return o;
    };
    const size_t o_idx[SEER_IDX_COUNT] = {take(T), take(T), take(T), take(T), take((size_t)n_out)};
    const size_t o_tok_seq = take(T), o_tok_slot = take(T), o_ncand = take(T);
    const size_t o_len0 = take(n_seq), o_tok_off = take((size_t)n_seq + 1);
    const size_t o_cand_tok = take(T), o_cand_slot = take(T);
    const size_t o_page_off = take((size_t)n_seq + 1), o_pages = take(n_pages_all);
    const size_t o_view = take((size_t)n_seq * 5), o_vlist = take(n_lists * 2);
    const size_t o_vidx = take(n_entries);
    const size_t o_mask = take(ab->mask ? ((size_t)T * T + 3) / 4 : 0);
    const size_t bytes = off * sizeof(int32_t);
    SEER_TRY(stage_reserve(c, bytes));
    int32_t *h = c->stage;

    const int32_t *src_idx[SEER_IDX_COUNT] = {tokens, pos, page, row, out_rows};
    const int n_idx[SEER_IDX_COUNT] = {T, T, T, T, n_out};
    for (int k = 0; k < SEER_IDX_COUNT; k++)
        if (src_idx[k] && n_idx[k])
            memcpy(h + o_idx[k], src_idx[k], (size_t)n_idx[k] * sizeof(int32_t));
    memcpy(h + o_tok_seq, ab->tok_seq, (size_t)T * sizeof(int32_t));
    memcpy(h + o_tok_slot, ab->tok_slot, (size_t)T * sizeof(int32_t));
    memcpy(h + o_len0, ab->seq_len0, (size_t)n_seq * sizeof(int32_t));
    memcpy(h + o_tok_off, ab->seq_tok_off, ((size_t)n_seq + 1) * sizeof(int32_t));
    memcpy(h + o_cand_tok, ab->seq_toks, (size_t)T * sizeof(int32_t));
    for (int k = 0; k < T; k++)
        h[o_cand_slot + k] = ab->tok_slot[ab->seq_toks[k]];
    if (ab->mask)
        memcpy(h + o_mask, ab->mask, (size_t)T * T);

    /* Pages, views (filtered as the reference filters them) and the largest cached count. */
    int32_t *maxC = (int32_t *)seer_malloc_array((size_t)n_seq, sizeof(int32_t));
    if (!maxC)
        return seer_err(SEER_ERR_OOM, "attention batch: out of host memory");
    size_t pg = 0, nl = 0, ne = 0;
    for (int b = 0; b < n_seq; b++) {
        const int len0 = ab->seq_len0[b];
        long long max_slot = (long long)len0 - 1;
        for (int k = ab->seq_tok_off[b]; k < ab->seq_tok_off[b + 1]; k++)
            if (ab->tok_slot[ab->seq_toks[k]] > max_slot)
                max_slot = ab->tok_slot[ab->seq_toks[k]];
        const size_t np = (size_t)((max_slot + ps) / ps);
        h[o_page_off + b] = (int32_t)pg;
        memcpy(h + o_pages + pg, ab->seq_pages + (size_t)b * ab->max_pages, np * sizeof(int32_t));
        pg += np;
        int32_t *vw = h + o_view + 5 * (size_t)b;
        const seer_attn_view *v = ab->seq_view ? ab->seq_view[b] : NULL;
        if (!v) {
            vw[0] = vw[1] = vw[2] = vw[3] = vw[4] = 0;
            maxC[b] = len0;
            continue;
        }
        const int tail = v->tail_start < 0 ? 0 : v->tail_start;
        const int lim = len0 < tail ? len0 : tail;
        vw[0] = 1;
        vw[1] = tail;
        vw[2] = v->n_layers_view;
        vw[3] = v->n_heads_view;
        vw[4] = (int32_t)nl;
        int best = 0;
        for (int r = 0; r < v->n_layers_view * v->n_heads_view; r++, nl++) {
            const int32_t *list = v->idx + (size_t)r * v->n;
            int cnt = 0;
            for (int k = 0; k < v->n; k++)
                if (list[k] >= 0 && list[k] < lim)
                    h[o_vidx + ne + cnt++] = list[k];
            h[o_vlist + 2 * nl] = (int32_t)ne;
            h[o_vlist + 2 * nl + 1] = cnt;
            ne += (size_t)cnt;
            if (cnt > best)
                best = cnt;
        }
        maxC[b] = best + (len0 > tail ? len0 - tail : 0);
    }
    h[o_page_off + n_seq] = (int32_t)pg;

    /* New-token candidates each token scans: with a mask all of its sequence's; without,
     * the prefix at slots <= its own when the sequence's slots ascend (they do: slot =
     * len0 + rank), else all (the kernel's predicate then filters). */
    long long max_vis = 0;
    for (int i = 0; i < T; i++)
        h[o_ncand + i] = -1;
    for (int b = 0; b < n_seq; b++) {
        const int o = ab->seq_tok_off[b], n_b = ab->seq_tok_off[b + 1] - o;
        bool ascending = true;
        for (int k = 1; k < n_b; k++)
            if (h[o_cand_slot + o + k] <= h[o_cand_slot + o + k - 1])
                ascending = false;
        for (int k = 0; k < n_b; k++) {
            const int j = ab->seq_toks[o + k];
            if (h[o_ncand + j] != -1) {
                free(maxC);
                return bad_batch("seq_toks lists a token twice", o + k, j);
            }
            const int nc = ab->mask || !ascending ? n_b : k + 1;
            h[o_ncand + j] = nc;
            if ((long long)maxC[b] + nc > max_vis)
                max_vis = (long long)maxC[b] + nc;
        }
    }
    free(maxC);
    if (max_vis > INT32_MAX / 2)
        return seer_err(SEER_ERR_INVALID_ARG, "attention batch: %lld visible slots for one token",
                        max_vis);

    SEER_TRY(seer_cuda_reserve(c, &c->batch, bytes, "the batch index arrays"));
    CUDA_TRY(cudaMemcpyAsync(c->batch.p, h, bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_TRY(cudaEventRecord(c->stage_done, c->stream));
    c->stage_pending = true;

    const int32_t *d = (const int32_t *)c->batch.p;
    for (int k = 0; k < SEER_IDX_COUNT; k++)
        if (src_idx[k])
            c->idx[k] = seer_cuda_idx{src_idx[k], n_idx[k], d + o_idx[k], h + o_idx[k]};
    seer_cuda_attn *a = &c->att;
    a->ab_ptr = ab;
    a->ab = *ab;
    a->h_tok_seq = h + o_tok_seq;
    a->h_tok_slot = h + o_tok_slot;
    a->h_seq_len0 = h + o_len0;
    a->h_seq_toks = h + o_cand_tok;
    a->h_page_off = h + o_page_off;
    a->h_pages = h + o_pages;
    a->h_mask = ab->mask ? (const uint8_t *)(h + o_mask) : NULL;
    a->T = T;
    a->n_seq = n_seq;
    a->max_vis = (int)max_vis;
    a->min_layers_view = min_lv;
    a->tok_seq = d + o_tok_seq;
    a->tok_slot = d + o_tok_slot;
    a->tok_ncand = d + o_ncand;
    a->seq_len0 = d + o_len0;
    a->seq_tok_off = d + o_tok_off;
    a->cand_tok = d + o_cand_tok;
    a->cand_slot = d + o_cand_slot;
    a->seq_page_off = d + o_page_off;
    a->pages = d + o_pages;
    a->seq_view = d + o_view;
    a->vlist = d + o_vlist;
    a->vidx = d + o_vidx;
    a->mask = ab->mask ? (const uint8_t *)(d + o_mask) : NULL;
    a->valid = true;
    return SEER_OK;
}

/* Whether batch_begin's descriptors still describe ab (else attention rebuilds them). The
 * view lists are taken as unchanged within a forward call: the context builds them once per
 * call, and comparing them would cost as much as uploading them again. */
static bool att_matches(const seer_cuda *c, const seer_attn_batch *ab) {
    const seer_cuda_attn *a = &c->att;
    if (!a->valid || a->ab_ptr != ab || memcmp(&a->ab, ab, sizeof *ab))
        return false;
    const size_t T = (size_t)ab->T, ns = (size_t)ab->n_seq;
    if (memcmp(a->h_tok_seq, ab->tok_seq, T * 4) || memcmp(a->h_tok_slot, ab->tok_slot, T * 4) ||
        memcmp(a->h_seq_len0, ab->seq_len0, ns * 4) || memcmp(a->h_seq_toks, ab->seq_toks, T * 4))
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

typedef struct {
    float *out;             /* [T][H][Dh] */
    const float *q;         /* [T][H][Dh] */
    const bf16 *kv;
    float *part_acc;        /* [T][H][S][Dh] unnormalised */
    float *part_ml;         /* [T][H][S][2] running max, sum */
    int T, H, Hkv, Dh, group, gb, n_hc, S, chunk, layer, page_size;
    size_t page_stride, layer_off, kv_stride, head_stride; /* in bf16 elements */
    float scale;
    const int32_t *tok_seq, *tok_slot, *tok_ncand, *seq_len0, *seq_tok_off, *cand_tok, *cand_slot;
    const int32_t *seq_page_off, *pages, *seq_view, *vlist, *vidx;
    const uint8_t *mask;
} attn_params;

static __device__ __forceinline__ float2 bf2_to_f2(uint32_t w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

static __host__ __device__ size_t attn_smem_bytes(int gb, int Dh) {
    const int W = (Dh / 2) | 1;
    return ATT_TK * sizeof(long long) +
           sizeof(float) * ((size_t)gb * Dh + 2 * (size_t)ATT_TK * W + (size_t)gb * ATT_TK + 3 * (size_t)gb);
}

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

    size_t bid = blockIdx.x;
    const int s = (int)(bid % (size_t)p.S);
    bid /= (size_t)p.S;
    const int hcs = p.Hkv * p.n_hc;
    const int hc = (int)(bid % (size_t)hcs);
    const int i = (int)(bid / (size_t)hcs);
    const int kvh = hc / p.n_hc, g0 = (hc % p.n_hc) * gb;
    const int ng = min(gb, p.group - g0);
    const int h0 = kvh * p.group + g0;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const int b = p.tok_seq[i], len0 = p.seq_len0[b], slot_i = p.tok_slot[i];
    const int32_t *sv = p.seq_view + 5 * b;
    const bool has_view = sv[0] != 0;
    int C = len0, vcnt = 0, tail = 0;
    const int32_t *vl = NULL;
    if (has_view) {
        tail = sv[1];
        const int nlv = sv[2], nhv = sv[3];
        const int li = nlv > 1 ? p.layer : 0, hi = nhv > 1 ? kvh : 0;
        const int32_t *e = p.vlist + 2 * ((size_t)sv[4] + (size_t)li * nhv + hi);
        vl = p.vidx + e[0];
        vcnt = e[1];
        C = vcnt + max(0, len0 - tail);
    }
    const int tok0 = p.seq_tok_off[b];
    const int n_vis = C + p.tok_ncand[i];
    const int begin = s * p.chunk, end = min(begin + p.chunk, n_vis);
    const int32_t *pages = p.pages + p.seq_page_off[b];
    const size_t head_off = p.layer_off + (size_t)kvh * p.head_stride;

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

    for (int t0 = begin; t0 < end; t0 += ATT_TK) {
        /* 1: which slot each key of the tile is */
        if (tid < ATT_TK) {
            const int k = t0 + tid;
            int slot = -1;
            if (k < end) {
                if (k < C) {
                    slot = !has_view ? k : (k < vcnt ? vl[k] : tail + (k - vcnt));
                } else {
                    const int ci = tok0 + (k - C);
                    const int cs = p.cand_slot[ci];
                    const bool ok = p.mask ? p.mask[(size_t)i * p.T + p.cand_tok[ci]] != 0 : cs <= slot_i;
                    slot = ok ? cs : -1;
                }
            }
            off_s[tid] = slot < 0 ? -1
                                  : (long long)((size_t)pages[slot / p.page_size] * p.page_stride + head_off +
                                                (size_t)(slot % p.page_size) * Dh);
        }
        __syncthreads();
        /* 2: K and V rows into shared memory (zeros for keys not seen) */
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
                sc = d * p.scale;
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

    if (p.S == 1) {
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
        return;
    }
#pragma unroll
    for (int r = 0; r < ATT_PAIRS; r++) {
        const int pi = tid + r * ATT_THREADS;
        if (pi < ng * D2) {
            const int g = pi / D2, e2 = pi - g * D2;
            float2 *o = (float2 *)(p.part_acc + (((size_t)i * p.H + h0 + g) * p.S + s) * Dh) + e2;
            *o = make_float2(acc[2 * r], acc[2 * r + 1]);
        }
    }
    if (tid < ng) {
        float *ml = p.part_ml + (((size_t)i * p.H + h0 + tid) * p.S + s) * 2;
        ml[0] = m_s[tid];
        ml[1] = l_s[tid];
    }
}

/* One block per (token, head): merges the S partial softmaxes. */
__global__ void attn_combine_kernel(float *out, const float *part_acc, const float *part_ml, int S,
                                    int Dh) {
    extern __shared__ float wsm[]; /* [S] weight of each split */
    __shared__ float L_s;
    const size_t ih = blockIdx.x;
    const float *ml = part_ml + ih * (size_t)S * 2;
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        float M = -INFINITY;
        for (int s = lane; s < S; s += 32)
            M = fmaxf(M, ml[2 * s]);
        for (int o = 16; o > 0; o >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        float L = 0.f;
        for (int s = lane; s < S; s += 32) {
            const float m = ml[2 * s];
            const float w = m == -INFINITY ? 0.f : expf(m - M);
            wsm[s] = w;
            L += ml[2 * s + 1] * w;
        }
        for (int o = 16; o > 0; o >>= 1)
            L += __shfl_xor_sync(0xffffffffu, L, o);
        if (lane == 0)
            L_s = L;
    }
    __syncthreads();
    const float L = L_s, inv = L > 0.f ? 1.f / L : 0.f;
    const float *pa = part_acc + ih * (size_t)S * Dh;
    for (int e = threadIdx.x; e < Dh; e += blockDim.x) {
        float o = 0.f;
        for (int s = 0; s < S; s++)
            o = fmaf(wsm[s], pa[(size_t)s * Dh + e], o);
        out[ih * Dh + e] = o * inv;
    }
}

/* ---- the op --------------------------------------------------------------------------- */

size_t seer_cuda_attention_smem_max(void) { return attn_smem_bytes(ATT_GB, ATT_MAX_DH); }

seer_status seer_cuda_attention_init(seer_cuda *c) {
    const size_t need = seer_cuda_attention_smem_max();
    if (need > c->smem_optin)
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "CUDA attention needs %zu bytes of shared memory per block; the device allows %zu",
                        need, c->smem_optin);
    CUDA_TRY(cudaFuncSetAttribute(attn_partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)need));
    return SEER_OK;
}

seer_status seer_cuda_attention(seer_backend *be, float *out, const float *q, const void *kv,
                                const seer_kv_geom *g, int layer, const seer_attn_batch *ab) {
    seer_cuda *c = seer_cuda_of(be);
    const int T = ab->T, H = ab->n_heads, Hkv = ab->n_kv_heads, Dh = ab->head_dim;
    if (T < 1)
        return SEER_OK;
    if (Hkv < 1 || H < Hkv || H % Hkv)
        return seer_err(SEER_ERR_INVALID_ARG, "attention: %d heads are not a multiple of %d KV heads", H, Hkv);
    if (Dh < 2 || Dh % 2 || Dh > ATT_MAX_DH)
        return seer_err(SEER_ERR_UNSUPPORTED, "attention: head_dim %d (CUDA supports even sizes up to %d)",
                        Dh, ATT_MAX_DH);
    if (g->head_dim != Dh || g->n_kv_heads != Hkv || g->page_size != ab->page_size)
        return seer_err(SEER_ERR_INVALID_ARG, "attention: the batch does not match the KV geometry");
    if (layer < 0 || layer >= g->n_layers)
        return seer_err(SEER_ERR_INVALID_ARG, "attention: layer %d of %d", layer, g->n_layers);
    if (!att_matches(c, ab))
        SEER_TRY(seer_cuda_batch_begin(be, ab, NULL, NULL, NULL, NULL, NULL, 0));
    const seer_cuda_attn *a = &c->att;
    if (layer >= a->min_layers_view)
        return seer_err(SEER_ERR_INVALID_ARG, "attention: layer %d has no list in a view of %d layers",
                        layer, a->min_layers_view);

    const int group = H / Hkv;
    const int n_hc = (group + ATT_GB - 1) / ATT_GB;
    const int gb = (group + n_hc - 1) / n_hc;
    const long long base = (long long)T * Hkv * n_hc;
    const int max_vis = a->max_vis;
    /* Splits: about one per ATT_SPLIT_SLOTS visible slots, but only as many as it takes to
     * give every multiprocessor a few blocks; a prefill has blocks enough without. */
    long long S = (max_vis + ATT_SPLIT_SLOTS - 1) / ATT_SPLIT_SLOTS;
    const long long want = (4LL * c->n_sm + base - 1) / base;
    if (S > want)
        S = want;
    if (S > ATT_MAX_SPLITS)
        S = ATT_MAX_SPLITS;
    if (S < 1)
        S = 1;
    long long chunk = (max_vis + S - 1) / S;
    chunk = (chunk + ATT_TK - 1) / ATT_TK * ATT_TK;
    if (chunk < ATT_TK)
        chunk = ATT_TK;
    S = (max_vis + chunk - 1) / chunk;
    if (S < 1)
        S = 1;
    const long long blocks = base * S;
    if (blocks > INT32_MAX)
        return seer_err(SEER_ERR_UNSUPPORTED, "attention: %lld blocks", blocks);

    attn_params p;
    p.out = out;
    p.q = q;
    p.kv = (const bf16 *)kv;
    p.part_acc = p.part_ml = NULL;
    if (S > 1) {
        const size_t n_acc = (size_t)T * H * S * Dh, n_ml = (size_t)T * H * S * 2;
        SEER_TRY(seer_cuda_reserve(c, &c->attn_part, (n_acc + n_ml) * sizeof(float),
                                   "attention partials"));
        p.part_acc = (float *)c->attn_part.p;
        p.part_ml = p.part_acc + n_acc;
    }
    p.T = T;
    p.H = H;
    p.Hkv = Hkv;
    p.Dh = Dh;
    p.group = group;
    p.gb = gb;
    p.n_hc = n_hc;
    p.S = (int)S;
    p.chunk = (int)chunk;
    p.layer = layer;
    p.page_size = g->page_size;
    p.head_stride = (size_t)g->page_size * Dh;
    p.kv_stride = (size_t)Hkv * p.head_stride;
    p.layer_off = (size_t)layer * 2 * p.kv_stride;
    p.page_stride = (size_t)g->n_layers * 2 * p.kv_stride;
    p.scale = ab->scale;
    p.tok_seq = a->tok_seq;
    p.tok_slot = a->tok_slot;
    p.tok_ncand = a->tok_ncand;
    p.seq_len0 = a->seq_len0;
    p.seq_tok_off = a->seq_tok_off;
    p.cand_tok = a->cand_tok;
    p.cand_slot = a->cand_slot;
    p.seq_page_off = a->seq_page_off;
    p.pages = a->pages;
    p.seq_view = a->seq_view;
    p.vlist = a->vlist;
    p.vidx = a->vidx;
    p.mask = a->mask;

    attn_partial_kernel<<<(unsigned)blocks, ATT_THREADS, attn_smem_bytes(gb, Dh), c->stream>>>(p);
    LAUNCH_TRY("attn_partial_kernel");
    if (S > 1) {
        /* Padded: the compiler may merge the tail of the weight loop into one wider load. */
        const size_t smem = (size_t)((S + 7) / 4 * 4) * sizeof(float);
        attn_combine_kernel<<<(unsigned)((size_t)T * H), 128, smem, c->stream>>>(
            out, p.part_acc, p.part_ml, (int)S, Dh);
        LAUNCH_TRY("attn_combine_kernel");
    }
    return SEER_OK;
}
