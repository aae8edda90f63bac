/*
 * attention.cuh: what the two attention kernels (attention.cu: scalar flash decoding for any
 * head size; attention_tc.cu: tensor cores) share: the batch descriptor batch_begin writes,
 * the visible set of a token (a windowed layer's window and soft-capping included), and the
 * split rule that makes a token's result independent of its batch.
 */
#ifndef SEER_CUDA_ATTENTION_CUH
#define SEER_CUDA_ATTENTION_CUH

#include "backend/cuda/cuda_common.cuh"

#define ATT_TK 64          /* keys per tile; the softmax step assumes 2 per lane */
#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_GB 8           /* most query heads one block holds */
#define ATT_MAX_DH 256
#define ATT_PAIRS (ATT_GB * ATT_MAX_DH / 2 / ATT_THREADS) /* (head, dim pair)s per thread */
/* Most splits of one token. With chunks of at least ATT_MIN_CHUNK keys (four tiles: shorter
 * splits spent more on their merges than on their keys, so 14 draft steps over 512 slots
 * took 5x their floor) a 16K context makes 64 splits per (token, KV head); past it the
 * chunk doubles instead, and the partials (2 * Dh * 4 bytes per query head and split) stay
 * under 1% of the K and V they summarise. */
#ifndef ATT_MAX_SPLITS /* a lab build may set it (part of every token's summation order) */
#define ATT_MAX_SPLITS 64
#endif
#ifndef ATT_MIN_CHUNK /* the fewest keys of a split, a multiple of ATT_TK (a lab build may set it) */
#define ATT_MIN_CHUNK 256
#endif
#define ATT_COMBINE_W 1024 /* split weights the combine holds in shared memory at a time */
/* New tokens of one sequence above which the tensor-core kernel prefills them (one split
 * each, flash attention) instead of splitting their visible slots: verification chains and
 * decode steps stay at or below it (backend.h), and they are the calls that must be
 * batch-invariant. */
#define SEER_ATT_TC_PREFILL_MIN SEER_INVARIANT_NEW_TOKENS

/* Header of the batch descriptor (int32 words); arrays follow at the offsets it gives. */
enum {
    D_T, D_NSEQ, D_NQ, D_NWORK, D_HAS_MASK,
    D_TOK_SEQ, D_TOK_SLOT, D_NCAND, D_LEN0, D_TOK_OFF, D_CAND_TOK, D_CAND_SLOT, D_PAGE_OFF,
    D_PAGES, D_VIEW, D_VLIST, D_VIDX, D_QOFF, D_MASK,
    D_NWORK_TC, D_NGRP, D_GRP, D_GITEM, D_TMODE, D_NGRP_DEC, D_NWORK_DEC,
    D_NGRP_CHAIN, D_NWORK_CHAIN, D_TOK_POS, D_CVIS_OFF, D_CVIS,
    D_WORDS = 32
};

/* Keys per split for n_vis visible slots: the smallest power-of-two multiple of min_chunk
 * that makes at most max_splits splits. */
static __host__ __device__ __forceinline__ long long att_chunk_of(long long n_vis, long long min_chunk,
                                                                   int max_splits) {
    long long c = min_chunk;
    while (c * max_splits < n_vis)
        c *= 2;
    return c;
}

/* Keys per split of a token that sees n_vis slots. */
static __host__ __device__ __forceinline__ long long att_chunk(long long n_vis) {
    return att_chunk_of(n_vis, ATT_MIN_CHUNK, ATT_MAX_SPLITS);
}

static __host__ __device__ __forceinline__ int att_splits(long long n_vis) {
    return n_vis > ATT_TK ? (int)((n_vis + att_chunk(n_vis) - 1) / att_chunk(n_vis)) : 1;
}

/* Keys per split of a prompt token in a whole prefill item (attention_tc.cu): longer splits
 * than att_chunk's, at most ATT_PRE_SPLITS of them, since a prefill item's 128 rows each
 * write a partial per split (at 32K, 256 prompt tokens of 32 heads of 128 write 68 MB a layer
 * in 16 splits, 272 MB in 64), while a few prompt tokens beside a decode step still spread
 * over the GPU. */
#define ATT_PRE_MIN_CHUNK 1024
#define ATT_PRE_SPLITS 16
static __host__ __device__ __forceinline__ long long att_pre_chunk(long long n_vis) {
    return att_chunk_of(n_vis, ATT_PRE_MIN_CHUNK, ATT_PRE_SPLITS);
}

static __host__ __device__ __forceinline__ int att_pre_splits(long long n_vis) {
    return n_vis > 0 ? (int)((n_vis + att_pre_chunk(n_vis) - 1) / att_pre_chunk(n_vis)) : 1;
}

/* At least att_splits(n) for every n <= n_vis (att_splits itself is not monotonic). */
static inline int att_splits_bound(long long n_vis) {
    const long long b = (n_vis + ATT_MIN_CHUNK - 1) / ATT_MIN_CHUNK;
    return b < 1 ? 1 : (int)(b < ATT_MAX_SPLITS ? b : ATT_MAX_SPLITS);
}


struct attn_params {
    float *out;             /* [T][H][Dh] */
    const float *q;         /* [T][H][Dh] */
    const bf16 *kv;
    float *part_acc;        /* [n_q][H][Dh] unnormalised, row (qoff[i] + split) */
    float *part_ml;         /* [n_q][H][2] running max, sum */
    const int32_t *desc;    /* the batch descriptor */
    int *att_cnt;           /* tensor-core kernel: arrivals per (group, KV head), zero between calls */
    int H, Hkv, Dh, group, gb, n_hc, layer, page_size;
    size_t page_stride, layer_off, kv_stride, head_stride; /* in bf16 elements (quantised rows: below) */
    float scale;
    int window;             /* > 0: a windowed layer's call (att_in_window) */
    float softcap, softcap_inv; /* > 0: each scaled score s becomes softcap tanh(s softcap_inv) */
    /* A storage of quantised rows (geom kv_type q8 / q4, kv/kv_type.h), which only the tensor-core
     * kernel reads (attention_tc.cu): kv_bits the bits of a code (0: bf16 rows). With them kv is
     * the pool's bytes, and page_stride, layer_off and kv_stride are in bytes, head_stride is a
     * head's code bytes within a row, kv_row_bytes a row's bytes (seer_kvt_row_bytes) and
     * kv_soff where a row's exponents start (seer_kvt_scales_off). */
    int kv_bits, kv_soff;
    size_t kv_row_bytes;
};

/* The descriptor's arrays, located through its header. */
struct att_desc {
    int T, n_work;
    const int32_t *tok_seq, *tok_slot, *ncand, *len0, *tok_off, *cand_tok, *cand_slot;
    const int32_t *page_off, *pages, *view, *vlist, *vidx, *qoff;
    const int32_t *tok_pos; /* [T] each token's position (seer_attn_batch.tok_pos, else its slot) */
    const int32_t *cvis_off, *cvis; /* [T] where a token's list of visible candidates starts in
                                       cvis, or -1: its candidates are its sequence's first
                                       ncand (see att_tok.cl) */
    int n_work_tc, n_grp;
    int n_grp_dec, n_work_dec;     /* the decode kind's groups and items come first, */
    int n_grp_chain, n_work_chain; /* then the chain kind's (ends), then the prefill kind's */
    const int32_t *grp;   /* [n_grp][4]: first index into cand_tok, tokens, flags (2: merged
                             in the kernel), splits */
    const int32_t *gitem; /* [n_grp + 1]: first work unit (split of a KV head) of each group */
    const int32_t *tmode; /* [T]: 1 = the token's sequence is prefilled in one split, 2 = the
                             partial kernel merges its splits; 0 = the combine kernel does; 3
                             = the same, for a prompt token in whole items (att_pre_splits) */
    const uint8_t *mask; /* NULL: causal among the new tokens */
};

static __device__ __forceinline__ att_desc att_desc_load(const int32_t *d) {
    att_desc a;
    a.T = d[D_T];
    a.n_work = d[D_NWORK];
    a.tok_seq = d + d[D_TOK_SEQ];
    a.tok_slot = d + d[D_TOK_SLOT];
    a.ncand = d + d[D_NCAND];
    a.len0 = d + d[D_LEN0];
    a.tok_off = d + d[D_TOK_OFF];
    a.cand_tok = d + d[D_CAND_TOK];
    a.cand_slot = d + d[D_CAND_SLOT];
    a.page_off = d + d[D_PAGE_OFF];
    a.pages = d + d[D_PAGES];
    a.view = d + d[D_VIEW];
    a.vlist = d + d[D_VLIST];
    a.vidx = d + d[D_VIDX];
    a.qoff = d + d[D_QOFF];
    a.tok_pos = d + d[D_TOK_POS];
    a.cvis_off = d + d[D_CVIS_OFF];
    a.cvis = d + d[D_CVIS];
    a.mask = d[D_HAS_MASK] ? (const uint8_t *)(d + d[D_MASK]) : NULL;
    a.n_work_tc = d[D_NWORK_TC];
    a.n_grp = d[D_NGRP];
    a.n_grp_dec = d[D_NGRP_DEC];
    a.n_work_dec = d[D_NWORK_DEC];
    a.n_grp_chain = d[D_NGRP_CHAIN];
    a.n_work_chain = d[D_NWORK_CHAIN];
    a.grp = d + d[D_GRP];
    a.gitem = d + d[D_GITEM];
    a.tmode = d + d[D_TMODE];
    return a;
}

/* What token i sees in (layer, KV head kvh): C cached visible slots (the first vcnt from the
 * view list vl, then the tail from slot `tail`), then its candidates: n_vis in all. */
struct att_tok {
    int b, slot, C, vcnt, tail, tok0, n_vis;
    bool has_view;
    const int32_t *vl;
    const int32_t *cl; /* the candidate of visible index C + r is cl[r] (a token tree: its
                          ancestors and itself in candidate order, so each at its depth, where a
                          decode step of the token finds it in the cache), or, NULL, tok0 + r */
};

static __device__ __forceinline__ att_tok att_token(const att_desc &a, int i, int layer, int kvh) {
    att_tok t;
    t.b = a.tok_seq[i];
    t.slot = a.tok_slot[i];
    t.tok0 = a.tok_off[t.b];
    const int len0 = a.len0[t.b];
    const int32_t *sv = a.view + 5 * t.b;
    t.has_view = sv[0] != 0;
    t.C = len0;
    t.vcnt = 0;
    t.tail = 0;
    t.vl = NULL;
    if (t.has_view) {
        t.tail = sv[1];
        const int nlv = sv[2], nhv = sv[3];
        const int li = nlv > 1 ? layer : 0, hi = nhv > 1 ? kvh : 0;
        const int32_t *e = a.vlist + 2 * ((size_t)sv[4] + (size_t)li * nhv + hi);
        t.vl = a.vidx + e[0];
        t.vcnt = e[1];
        t.C = t.vcnt + max(0, len0 - t.tail);
    }
    t.n_vis = t.C + a.ncand[i];
    t.cl = a.cvis_off[i] >= 0 ? a.cvis + a.cvis_off[i] : NULL;
    return t;
}

/* Sliding-window attention (seer_attn_batch.window): whether a token at position tp sees a key
 * at position kp (a cached slot's position is the slot, a new token's its tok_pos), the CPU
 * reference's rule: kp > tp - window. */
static __host__ __device__ __forceinline__ bool att_in_window(int window, int tp, int kp) {
    return window <= 0 || (long long)tp - kp < window;
}

/* A scaled score, soft-capped where the call asks (Gemma 2): c tanh(s / c) as the CPU reference
 * computes it, c tanh(s * (1 / c)). */
static __device__ __forceinline__ float att_cap(float s, float cap, float cap_inv) {
    return cap > 0.f ? cap * tanhf(s * cap_inv) : s;
}

/* The last index in [lo, hi] whose v is at most x (v ascending, v[lo] <= x): the token of a
 * partial row, the group of a work item. */
static __device__ __forceinline__ int att_last_le(const int32_t *v, int lo, int hi, int x) {
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (v[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The candidate at visible index k (C <= k < n_vis) of a token. */
static __device__ __forceinline__ int att_cand(const att_tok &t, int k) {
    return t.cl ? t.cl[k - t.C] : t.tok0 + (k - t.C);
}

/* The slot of visible key k (< t.n_vis) of a token, and in *ci the candidate it is (-1: a
 * cached slot, through the view where the token has one). */
static __device__ __forceinline__ int att_key_slot(const att_desc &a, const att_tok &t, int k, int *ci) {
    if (k < t.C) {
        *ci = -1;
        return !t.has_view ? k : (k < t.vcnt ? t.vl[k] : t.tail + (k - t.vcnt));
    }
    *ci = att_cand(t, k);
    return a.cand_slot[*ci];
}

/* The attention family's scratch and state (attention.cu, attention_tc.cu, attention_wgmma.cu,
 * attention_qkv.cu); the plan of the current call is the instance's (seer_cuda.att). */
struct seer_cuda_att {
    seer_cuda_buf part;  /* flash-decoding partials */
    seer_cuda_buf cnt;   /* tensor-core attention's arrival counters (zero between calls) */
    int occ_key, occ;    /* resident attention blocks per SM for (gb, Dh) = key */
    int tc_occ[16];      /* tensor-core attention blocks the GPU holds, Dh 64 / 96 / 128 / 256 x decode /
                          * chain / prefill kind / prefill on mma.sync; -1 unknown */
    int wg;              /* attention_wgmma.cu serves the prefill kind (Hopper, sm_90a) */
    /* attention_qkv.cu: the slot lists of an attention through the quantised copy, host
     * staging (int32 entries) and their device copy */
    int32_t *qkv_host;
    size_t qkv_host_cap;
    seer_cuda_buf qkv_idx;
};

/* Heads of the GQA group one block of the scalar kernel holds, and how many blocks a group
 * takes. */
static inline void head_chunks(int H, int Hkv, int *n_hc, int *gb) {
    const int group = H / Hkv;
    *n_hc = (group + ATT_GB - 1) / ATT_GB;
    *gb = (group + *n_hc - 1) / *n_hc;
}

/* The scalar kernel's blocks the device holds at once for this head configuration
 * (attention.cu). */
seer_status attn_capacity(seer_cuda *c, int gb, int Dh, int *out);

/* Tensor-core kernel (attention_tc.cu): whether it serves this head shape, how many tokens a
 * work item holds, and the launch of its persistent grids over the descriptor's items. Its
 * three kinds: decode steps and short chains of at most 16 rows, longer chains, prefills. */
enum { ATT_TC_DEC, ATT_TC_CHAIN, ATT_TC_PRE, ATT_TC_KINDS };
/* attn_tc_capacity's key for the prefill kind on its mma.sync kernel where attention_wgmma.cu
 * would serve it (prompt tokens split at fixed positions, seer_cuda_attn.pre_fixed) */
#define ATT_TC_PRE_MMA ATT_TC_KINDS
bool attn_tc_eligible(const seer_cuda *c, int H, int Hkv, int Dh);
int attn_tc_tokens(int group, bool prefill);
seer_status attn_tc_init(seer_cuda *c);
/* Resident blocks of one kind of the tensor-core kernel of a head size; 0: it does not fit
 * (the scalar kernel serves). */
seer_status attn_tc_capacity(seer_cuda *c, int Dh, int kind, int *out);
/* Each kind over its grid of blocks (0: not launched), in kind order; grid[ATT_TC_PRE_MMA]: the
 * prefill kind's on its mma.sync kernel where attention_wgmma.cu cannot take the call. */
seer_status attn_tc_launch(seer_cuda *c, const attn_params &p, const int (&grid)[ATT_TC_KINDS + 1]);

/* attention_wgmma.cu: the prefill kind on Hopper (head size 128): whether this build and device
 * have it (found out once, by attn_wg_init), its resident blocks, its launch. */
seer_status attn_wg_init(seer_cuda *c);
bool attn_wg_serves(const seer_cuda *c, int Dh);
seer_status attn_wg_capacity(seer_cuda *c, int *out);
seer_status attn_wg_launch(seer_cuda *c, const attn_params &p, int grid);

#endif
