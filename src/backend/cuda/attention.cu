/*
 * attention.cu: attention over the paged bf16 KV cache with sparse views and explicit masks
 * among the new tokens, as flash decoding (Dao et al., "Flash-Decoding for long-context
 * inference", 2023): the slots a token may see are split into chunks, one block per (token,
 * split, KV head, head chunk) item runs an online softmax (Milakov & Gimelshein 2018) over
 * its chunk for all query heads of the GQA group it holds, and a second kernel merges the
 * splits: the scalar kernel, for every head size. Head sizes 64 and 128 run on the tensor
 * cores instead (attention_tc.cu), over the same descriptor. Also batch_begin: the upload,
 * once per forward call, of every index array the ops use and of the descriptors both
 * attention kernels read (including the tensor-core kernel's token groups).
 *
 * The visible set is exactly the CPU reference's (cpu_attention.c): token i of sequence b
 * sees, for every layer and KV head, the cached slots s < len0 its view allows (view entries
 * with 0 <= s < min(len0, tail), then every slot in [tail, len0)), then the new tokens of b
 * the mask allows (without a mask: those at a slot <= its own). Visible index k of a token
 * maps to a slot in O(1): k < C is a cached slot (C = len0 without a view, else the
 * surviving list entries plus the tail), k >= C is the (k - C)-th new token of b, kept or
 * masked out by the predicate. Only the summation order differs from the reference.
 *
 * Batch invariance: the chunk size is a function of the token's own visible count (the
 * smallest power-of-two multiple of ATT_TK that makes at most ATT_MAX_SPLITS splits), so a
 * token's splits, the tiles inside each split and the order the combine merges them in
 * depend on that count alone, never on the batch it is in. Without a mask a token at slot s
 * sees visible indices 0..s mapped to slots 0..s whether its predecessors are cached or new in the same call, so a decode step
 * and a verification call give it bit-identical outputs.
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

/* ---- batch_begin ---------------------------------------------------------------------- */

static seer_status bad_batch(const char *what, int a, int b) {
    return seer_err(SEER_ERR_INVALID_ARG, "attention batch: %s (%d, %d)", what, a, b);
}

/* Sequence b's leading new tokens that are prefilled (of its n_b): its prompt tokens
 * (seq_prompt); without that array, all of a run longer than SEER_ATT_TC_PREFILL_MIN. */
static int prompt_run(const seer_attn_batch *ab, int b, int n_b) {
    if (ab->seq_prompt)
        return ab->seq_prompt[b] < n_b ? ab->seq_prompt[b] : n_b;
    return n_b > SEER_ATT_TC_PREFILL_MIN ? n_b : 0;
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


__global__ void __launch_bounds__(ATT_THREADS) attn_partial_kernel(attn_params p);

/* Heads of the GQA group one block holds, and how many blocks a group takes. */
static void head_chunks(int H, int Hkv, int *n_hc, int *gb) {
    const int group = H / Hkv;
    *n_hc = (group + ATT_GB - 1) / ATT_GB;
    *gb = (group + *n_hc - 1) / *n_hc;
}

static size_t attn_smem_bytes(int gb, int Dh) {
    const int W = (Dh / 2) | 1;
    return ATT_TK * sizeof(long long) +
           sizeof(float) * ((size_t)gb * Dh + 2 * (size_t)ATT_TK * W + (size_t)gb * ATT_TK + 3 * (size_t)gb);
}

/* Blocks of an attention kernel for n items on cap resident ones: op by op, and in a recorded
 * call (a power of two, capped); 0: not launched, unless at_least_one (the scalar kernel,
 * which always launches). */
static void att_grid(long long n, int cap, bool at_least_one, int *grid, int *bucket) {
    if (n == 0 && at_least_one)
        n = 1;
    *grid = (int)(n < cap ? n : cap);
    int b = 1;
    while (b < n && b < cap)
        b *= 2;
    *bucket = n == 0 ? 0 : b < cap ? b : cap;
}

/* Partial-kernel blocks the device holds at once for this head configuration. */
static seer_status attn_capacity(seer_cuda *c, int gb, int Dh, int *out) {
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

/* What batch_begin works out, step by step: bb_check (the batch and its sizes), bb_fill (the
 * descriptor's layout and its index arrays), bb_plan_tokens (which kernel, each token's splits),
 * bb_plan_tc (the tensor-core kinds' groups and items), bb_plan_scalar (the scalar kernel's
 * items, the scratch they need), bb_upload (header, copy, the state the ops read). */
typedef struct {
    seer_cuda *c;
    const seer_attn_batch *ab;
    const int32_t *src_idx[SEER_IDX_COUNT]; /* tokens, pos, page, row, out_rows */
    int T, n_seq, ps, Hkv, n_out, Tb, nb, min_lv;
    size_t n_pages_all, n_lists, n_entries, bytes;
    /* word offsets of the descriptor's arrays */
    size_t o_idx[SEER_IDX_COUNT], o_tok_seq, o_tok_slot, o_ncand, o_len0, o_tok_off, o_cand_tok,
        o_cand_slot, o_page_off, o_pages, o_view, o_vlist, o_vidx, o_qoff, o_mask, o_grp, o_gitem, o_tmode;
    int n_idx[SEER_IDX_COUNT], n_pad[SEER_IDX_COUNT];
    int32_t *h;    /* the staging copy of the descriptor */
    int32_t *maxC; /* [2 n_seq]: each sequence's largest cached count, whether it has a view */
    /* the plan */
    int H, Dh, group, cap, cap_tc, cap_dec, cap_pre;
    bool heads_ok, fixed, tc, split, need_combine;
    long long n_q, n_work, n_work_pre, n_work_tc, n_work_dec, n_work_chain;
    int n_grp, n_grp_dec, n_grp_chain;
} bb_t;

/* The batch's arrays in range and consistent; the sizes of its page tables and view lists. */
static seer_status bb_check(bb_t *B) {
    const seer_attn_batch *ab = B->ab;
    const int T = B->T, n_seq = B->n_seq, ps = B->ps, Hkv = B->Hkv, n_out = B->n_out;
    const int32_t *out_rows = B->src_idx[SEER_IDX_COUNT - 1];
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
    /* gathered rows must be rows of this call: a padded gather reads them unchecked */
    for (int i = 0; out_rows && i < n_out; i++)
        if (out_rows[i] < 0 || out_rows[i] >= T)
            return bad_batch("out_rows entry out of range at", i, out_rows[i]);

    /* Sizes: pages each sequence needs, view lists and their entries. */
    size_t &n_pages_all = B->n_pages_all, &n_lists = B->n_lists, &n_entries = B->n_entries;
    int &min_lv = B->min_lv;
    n_pages_all = n_lists = n_entries = 0;
    min_lv = INT32_MAX;
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
    return SEER_OK;
}

/* The descriptor's layout, the ops' index arrays (padded to the bucket), the batch's arrays,
 * pages and views, each token's candidates. Leaves B->maxC for the caller to free. */
static seer_status bb_fill(bb_t *B) {
    seer_cuda *c = B->c;
    const seer_attn_batch *ab = B->ab;
    const int T = B->T, n_seq = B->n_seq, ps = B->ps, n_out = B->n_out;
    const size_t n_pages_all = B->n_pages_all, n_lists = B->n_lists, n_entries = B->n_entries;
    /* Layout in int32 words: the header, the ops' index arrays padded to the bucket (their
     * offsets depend on the bucket alone, so a recorded call finds them where it expects),
     * then attention's arrays, found through the header. */
    const int Tb = B->Tb = seer_cuda_bucket(T), nb = B->nb = n_out ? seer_cuda_bucket(n_out) : 0;
    size_t off = 0;
    auto take = [&off](size_t words) {
        size_t o = off;
        off += words;
        return o;
    };
    (void)take(D_WORDS);
    for (int k = 0; k < SEER_IDX_COUNT; k++)
        B->o_idx[k] = take(k < SEER_IDX_COUNT - 1 ? (size_t)Tb : (size_t)nb);
    B->o_tok_seq = take(T);
    B->o_tok_slot = take(T);
    B->o_ncand = take(T);
    B->o_len0 = take(n_seq);
    B->o_tok_off = take((size_t)n_seq + 1);
    B->o_cand_tok = take(T);
    B->o_cand_slot = take(T);
    B->o_page_off = take((size_t)n_seq + 1);
    B->o_pages = take(n_pages_all);
    B->o_view = take((size_t)n_seq * 5);
    B->o_vlist = take(n_lists * 2);
    B->o_vidx = take(n_entries);
    B->o_qoff = take((size_t)T + 1);
    B->o_mask = take(ab->mask ? ((size_t)T * T + 3) / 4 : 0);
    B->o_grp = take((size_t)T * 4);
    B->o_gitem = take((size_t)T + 1);
    B->o_tmode = take(T);
    if (off > INT32_MAX)
        return bad_batch("batch descriptor too large", (int)(off >> 31), 0);
    B->bytes = off * sizeof(int32_t);
    SEER_TRY(stage_reserve(c, B->bytes));
    int32_t *h = B->h = c->stage;
    const size_t *o_idx = B->o_idx;
    const size_t o_tok_seq = B->o_tok_seq, o_tok_slot = B->o_tok_slot, o_ncand = B->o_ncand,
                 o_len0 = B->o_len0, o_tok_off = B->o_tok_off, o_cand_tok = B->o_cand_tok,
                 o_cand_slot = B->o_cand_slot, o_page_off = B->o_page_off, o_pages = B->o_pages,
                 o_view = B->o_view, o_vlist = B->o_vlist, o_vidx = B->o_vidx, o_mask = B->o_mask;

    /* padding rows: token 0 at position 0, no KV write (page -1), gathering row 0 */
    const int32_t *const *src_idx = B->src_idx;
    int *n_idx = B->n_idx, *n_pad = B->n_pad;
    for (int k = 0; k < SEER_IDX_COUNT; k++) {
        n_idx[k] = k < SEER_IDX_COUNT - 1 ? T : n_out;
        n_pad[k] = k < SEER_IDX_COUNT - 1 ? Tb : nb;
    }
    const int32_t pad_val[SEER_IDX_COUNT] = {0, 0, -1, 0, 0};
    for (int k = 0; k < SEER_IDX_COUNT; k++) {
        const int from = src_idx[k] ? n_idx[k] : 0;
        if (from)
            memcpy(h + o_idx[k], src_idx[k], (size_t)from * sizeof(int32_t));
        for (int i = from; i < n_pad[k]; i++)
            h[o_idx[k] + i] = pad_val[k];
    }
    memcpy(h + o_tok_seq, ab->tok_seq, (size_t)T * sizeof(int32_t));
    memcpy(h + o_tok_slot, ab->tok_slot, (size_t)T * sizeof(int32_t));
    memcpy(h + o_len0, ab->seq_len0, (size_t)n_seq * sizeof(int32_t));
    memcpy(h + o_tok_off, ab->seq_tok_off, ((size_t)n_seq + 1) * sizeof(int32_t));
    memcpy(h + o_cand_tok, ab->seq_toks, (size_t)T * sizeof(int32_t));
    for (int k = 0; k < T; k++)
        h[o_cand_slot + k] = ab->tok_slot[ab->seq_toks[k]];
    if (ab->mask)
        memcpy(h + o_mask, ab->mask, (size_t)T * T);

    /* Pages, views (filtered as the reference filters them) and the largest cached count
     * (a view's per-list counts differ: has_view[b] then asks for a bound on the splits). */
    int32_t *maxC = B->maxC = (int32_t *)seer_malloc_array((size_t)n_seq * 2, sizeof(int32_t));
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
        maxC[n_seq + b] = v != NULL;
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
     * len0 + rank), else all (the kernel's predicate then filters). Then each token's splits
     * at most (over layers and heads) and their running sum: the work items. */
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
                return bad_batch("seq_toks lists a token twice", o + k, j);
            }
            h[o_ncand + j] = ab->mask || !ascending ? n_b : k + 1;
        }
    }
    return SEER_OK;
}

/* Which kernel serves the batch, how each token is attended (tmode) and its splits (qoff). */
static seer_status bb_plan_tokens(bb_t *B) {
    seer_cuda *c = B->c;
    const seer_attn_batch *ab = B->ab;
    const int T = B->T, n_seq = B->n_seq, Hkv = B->Hkv;
    int32_t *h = B->h;
    const int32_t *maxC = B->maxC;
    const size_t o_ncand = B->o_ncand, o_qoff = B->o_qoff, o_tmode = B->o_tmode;
    /* Which kernel: the tensor-core one (attention_tc.cu) where it serves the head shape. */
    const int H = ab->n_heads, Dh = ab->head_dim;
    const bool heads_ok = Hkv >= 1 && H >= Hkv && H % Hkv == 0 && Dh >= 2 && Dh <= ATT_MAX_DH;
    int cap_tc = 0, cap_dec = 0, cap_pre = 0;
    /* Prompt tokens (seq_prompt) in a call of at most the batch-invariant size are split at
     * fixed key positions (att_pre_chunk of each token's visible count),
     * whole items of 128 rows, merged by the combine kernel: a token's bits then depend on its
     * query and visible keys alone, however its prompt is cut into such calls
     * (prompt_cuts_free), and a short piece of a long prompt spreads over the GPU. */
    const bool fixed = ab->seq_prompt && T <= SEER_CUDA_INVARIANT_MAX_T;
    if (heads_ok && attn_tc_eligible(H, Hkv, Dh)) {
        seer_status st = attn_tc_capacity(c, Dh, ATT_TC_CHAIN, &cap_tc);
        if (st == SEER_OK)
            st = attn_tc_capacity(c, Dh, ATT_TC_DEC, &cap_dec);
        if (st == SEER_OK)
            st = attn_tc_capacity(c, Dh, fixed ? ATT_TC_PRE_MMA : ATT_TC_PRE, &cap_pre);
        if (st != SEER_OK)
            return st;
    }
    const bool tc = cap_tc > 0;
    const int group = heads_ok ? H / Hkv : 1;

    /* A sequence's prompt tokens are prefilled (tensor cores only): in one split each (tmode
     * 1), or split at fixed positions (fixed, no view: tmode 3, the combine merges). Then
     * each token's splits and their running sum. */
    for (int b = 0; b < n_seq; b++) {
        const int o = ab->seq_tok_off[b], n_b = ab->seq_tok_off[b + 1] - o;
        const int m_b = prompt_run(ab, b, n_b);
        const int mode = fixed && !maxC[n_seq + b] ? 3 : 1;
        for (int k = 0; k < n_b; k++)
            h[o_tmode + ab->seq_toks[o + k]] = tc && k < m_b ? mode : 0;
    }
    long long n_q = 0;
    bool split = false;
    for (int i = 0; i < T; i++) {
        const long long vis = (long long)maxC[ab->tok_seq[i]] + h[o_ncand + i];
        const int tm = h[o_tmode + i];
        const int S = tm == 3                        ? att_pre_splits(vis)
                      : tm                           ? 1
                      : maxC[n_seq + ab->tok_seq[i]] ? att_splits_bound(vis)
                                                     : att_splits(vis);
        h[o_qoff + i] = (int32_t)(n_q < INT32_MAX ? n_q : INT32_MAX);
        n_q += S;
        split |= S > 1;
    }
    h[o_qoff + T] = (int32_t)(n_q < INT32_MAX ? n_q : INT32_MAX);
    B->H = H, B->Dh = Dh, B->heads_ok = heads_ok, B->fixed = fixed, B->tc = tc, B->group = group;
    B->cap_tc = cap_tc, B->cap_dec = cap_dec, B->cap_pre = cap_pre, B->n_q = n_q, B->split = split;
    return SEER_OK;
}

/* The tensor-core kinds' groups (of tokens sharing each K/V tile) and their work units. */
static void bb_plan_tc(bb_t *B) {
    const seer_attn_batch *ab = B->ab;
    const int n_seq = B->n_seq, Hkv = B->Hkv, group = B->group, cap_pre = B->cap_pre;
    const bool tc = B->tc, fixed = B->fixed;
    int32_t *h = B->h;
    const int32_t *maxC = B->maxC;
    const size_t o_ncand = B->o_ncand, o_qoff = B->o_qoff, o_grp = B->o_grp, o_gitem = B->o_gitem,
                 o_tmode = B->o_tmode;
    /* Tensor-core items: groups of consecutive tokens of a sequence (in seq_toks order) whose
     * rows share each K/V tile. A split group's tokens have one chunk size, so their splits
     * start at the same visible index; a token under a view goes alone (its counts differ by
     * layer and head). Items per group: its most splits, times the KV heads.
     * Groups of at most 16 rows that are not prefilled go to the decode kind, first (pass 0);
     * the other split groups to the chain kind (pass 1); prefilled groups to the prefill kind,
     * last (pass 2). Work units: a group's splits times the KV heads. The decode kind's
     * blocks take equal contiguous ranges of its units and stream through the consecutive
     * splits they hold: that changes the time a call takes, never a bit of its output (each
     * split is computed as alone). */
    int &n_grp = B->n_grp, &n_grp_dec = B->n_grp_dec, &n_grp_chain = B->n_grp_chain;
    long long &n_work_tc = B->n_work_tc, &n_work_dec = B->n_work_dec, &n_work_chain = B->n_work_chain;
    n_grp = n_grp_dec = n_grp_chain = 0;
    n_work_tc = n_work_dec = n_work_chain = 0;
    if (tc) {
        for (int pass = ATT_TC_DEC; pass < ATT_TC_KINDS; pass++)
        for (int b = 0; b < n_seq; b++) {
            const int o = ab->seq_tok_off[b], n_b = ab->seq_tok_off[b + 1] - o;
            const int m_b = prompt_run(ab, b, n_b);
            const bool view = maxC[n_seq + b] != 0;
            for (int k = 0; k < n_b;) {
                /* A group is all prompt tokens (the prefill kind) or none. Prefill items hold
                 * 128 rows; split at fixed positions (whole: one key part per row, the
                 * tokens of one chunk size), or else in one split, where they may hold 64
                 * rows with two key parts when the run would not fill the resident blocks at
                 * 128 (decided by the run alone, never by the other sequences of the call). */
                const bool pre = k < m_b, whole = pre && fixed && !view;
                const int lim = pre ? m_b : n_b;
                int cap_tok = view && !pre ? 1 : attn_tc_tokens(group, pre);
                if (pre && !whole && (long long)(m_b + cap_tok - 1) / cap_tok * Hkv < cap_pre && cap_tok > 1)
                    cap_tok /= 2;
                const int i0 = ab->seq_toks[o + k];
                const long long vis0 = (long long)maxC[b] + h[o_ncand + i0];
                int n = 1, S = h[o_qoff + i0 + 1] - h[o_qoff + i0];
                while (k + n < lim && n < cap_tok) {
                    const int j = ab->seq_toks[o + k + n];
                    const long long vis = (long long)maxC[b] + h[o_ncand + j];
                    const bool other_chunk = whole ? att_pre_chunk(vis) != att_pre_chunk(vis0)
                                                   : !pre && att_chunk(vis) != att_chunk(vis0);
                    if (other_chunk)
                        break;
                    const int Sj = h[o_qoff + j + 1] - h[o_qoff + j];
                    S = Sj > S ? Sj : S;
                    n++;
                }
                const int kind = pre ? ATT_TC_PRE : n * group <= 16 ? ATT_TC_DEC : ATT_TC_CHAIN;
                if (kind != pass) {
                    k += n;
                    continue;
                }
                int32_t *gr = h + o_grp + 4 * (size_t)n_grp;
                gr[0] = o + k;
                gr[1] = n;
                /* a lone token's splits (a decode step) are merged by the kernel's last split
                 * item; a chain's by the combine kernel, more rows in parallel. Both merge in
                 * the same order with the same arithmetic: the results are identical. */
                const bool here = !pre && n == 1 && S > 1;
                gr[2] = (here ? 2 : 0) | (whole ? 1 : 0);
                gr[3] = S;
                if (here)
                    h[o_tmode + i0] = 2;
                n_grp++;
                n_grp_dec += pass == ATT_TC_DEC;
                n_grp_chain += pass != ATT_TC_PRE;
                k += n;
            }
        }
        for (int k = 0; k < n_grp; k++) {
            const int S = h[o_grp + 4 * (size_t)k + 3];
            h[o_gitem + k] = (int32_t)(n_work_tc < INT32_MAX ? n_work_tc : INT32_MAX);
            n_work_tc += (long long)S * Hkv;
            if (k + 1 == n_grp_dec)
                n_work_dec = n_work_tc;
            if (k + 1 == n_grp_chain)
                n_work_chain = n_work_tc;
        }
        h[o_gitem + n_grp] = (int32_t)(n_work_tc < INT32_MAX ? n_work_tc : INT32_MAX);
    }
}

/* The scalar kernel's items; the partials, split counters and whether the combine runs. */
static seer_status bb_plan_scalar(bb_t *B) {
    seer_cuda *c = B->c;
    const int T = B->T, Hkv = B->Hkv, H = B->H, Dh = B->Dh, cap_tc = B->cap_tc, n_grp = B->n_grp;
    const bool heads_ok = B->heads_ok, tc = B->tc, split = B->split;
    const long long n_q = B->n_q, n_work_tc = B->n_work_tc, n_work_dec = B->n_work_dec,
                    n_work_chain = B->n_work_chain;
    const int32_t *h = B->h;
    const size_t o_qoff = B->o_qoff, o_tmode = B->o_tmode;
    /* Scalar items per (token, split): one per KV head and head chunk. */
    int n_hc = 0, gb = 0, &cap = B->cap;
    cap = 1;
    if (heads_ok) {
        head_chunks(H, Hkv, &n_hc, &gb);
        if (tc)
            cap = cap_tc;
        else
            SEER_TRY(attn_capacity(c, gb, Dh, &cap));
    }
    const long long n_work = B->n_work = !heads_ok ? 0 : tc ? n_work_chain - n_work_dec : n_q * Hkv * n_hc;
    B->n_work_pre = tc ? n_work_tc - n_work_chain : 0;
    if (n_work > INT32_MAX || n_work_tc > INT32_MAX)
        return seer_err(SEER_ERR_UNSUPPORTED, "attention batch: %lld work items",
                        n_work > n_work_tc ? n_work : n_work_tc);
    if (split && heads_ok) {
        const size_t n_part = (size_t)n_q * H * ((size_t)Dh + 2);
        SEER_TRY(seer_cuda_reserve(c, &c->attn->part, n_part * sizeof(float), "attention partials"));
    }
    bool &need_combine = B->need_combine; /* a token with splits left to the combine kernel */
    need_combine = false;
    for (int i = 0; i < T; i++)
        need_combine |= h[o_qoff + i + 1] - h[o_qoff + i] > 1 && (h[o_tmode + i] == 0 || h[o_tmode + i] == 3);
    if (tc) { /* the tensor-core kernel's arrival counters: zero, and kept so. Reserved for
                 every batch, so that a recording never holds a pointer from before them. */
        const size_t n_cnt = (size_t)(n_grp > 16 ? n_grp : 16) * Hkv * sizeof(int);
        if (n_cnt > c->attn->cnt.cap) {
            SEER_TRY(seer_cuda_reserve(c, &c->attn->cnt, n_cnt, "attention split counters"));
            CUDA_TRY(cudaMemsetAsync(c->attn->cnt.p, 0, c->attn->cnt.cap, c->stream));
        }
    }
    return SEER_OK;
}

/* The header, the copy to the device (one, asynchronous), and what the ops read of it. */
static seer_status bb_upload(bb_t *B) {
    seer_cuda *c = B->c;
    const seer_attn_batch *ab = B->ab;
    const int T = B->T, n_seq = B->n_seq, n_out = B->n_out, n_grp = B->n_grp, n_grp_dec = B->n_grp_dec,
              n_grp_chain = B->n_grp_chain;
    const bool tc = B->tc, fixed = B->fixed, split = B->split, need_combine = B->need_combine;
    const int min_lv = B->min_lv;
    const long long n_q = B->n_q, n_work = B->n_work, n_work_tc = B->n_work_tc, n_work_dec = B->n_work_dec,
                    n_work_chain = B->n_work_chain;
    int32_t *h = B->h;
    const size_t o_tok_seq = B->o_tok_seq, o_tok_slot = B->o_tok_slot, o_ncand = B->o_ncand,
                 o_len0 = B->o_len0, o_tok_off = B->o_tok_off, o_cand_tok = B->o_cand_tok,
                 o_cand_slot = B->o_cand_slot, o_page_off = B->o_page_off, o_pages = B->o_pages,
                 o_view = B->o_view, o_vlist = B->o_vlist, o_vidx = B->o_vidx, o_qoff = B->o_qoff,
                 o_mask = B->o_mask, o_grp = B->o_grp, o_gitem = B->o_gitem, o_tmode = B->o_tmode;
    int32_t *hd = h;
    memset(hd, 0, D_WORDS * sizeof(int32_t));
    hd[D_T] = T;
    hd[D_NSEQ] = n_seq;
    hd[D_NQ] = (int32_t)n_q;
    hd[D_NWORK] = (int32_t)n_work;
    hd[D_HAS_MASK] = ab->mask != NULL;
    hd[D_TOK_SEQ] = (int32_t)o_tok_seq;
    hd[D_TOK_SLOT] = (int32_t)o_tok_slot;
    hd[D_NCAND] = (int32_t)o_ncand;
    hd[D_LEN0] = (int32_t)o_len0;
    hd[D_TOK_OFF] = (int32_t)o_tok_off;
    hd[D_CAND_TOK] = (int32_t)o_cand_tok;
    hd[D_CAND_SLOT] = (int32_t)o_cand_slot;
    hd[D_PAGE_OFF] = (int32_t)o_page_off;
    hd[D_PAGES] = (int32_t)o_pages;
    hd[D_VIEW] = (int32_t)o_view;
    hd[D_VLIST] = (int32_t)o_vlist;
    hd[D_VIDX] = (int32_t)o_vidx;
    hd[D_QOFF] = (int32_t)o_qoff;
    hd[D_MASK] = (int32_t)o_mask;
    hd[D_NWORK_TC] = tc ? (int32_t)n_work_tc : 0;
    hd[D_NGRP] = n_grp;
    hd[D_GRP] = (int32_t)o_grp;
    hd[D_GITEM] = (int32_t)o_gitem;
    hd[D_TMODE] = (int32_t)o_tmode;
    hd[D_NGRP_DEC] = n_grp_dec;
    hd[D_NWORK_DEC] = (int32_t)n_work_dec;
    hd[D_NGRP_CHAIN] = n_grp_chain;
    hd[D_NWORK_CHAIN] = (int32_t)n_work_chain;

    SEER_TRY(seer_cuda_reserve(c, &c->batch, B->bytes, "the batch index arrays"));
    CUDA_TRY(cudaMemcpyAsync(c->batch.p, h, B->bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_TRY(cudaEventRecord(c->stage_done, c->stream));
    c->stage_pending = true;

    const int32_t *d = (const int32_t *)c->batch.p;
    const int32_t *const *src_idx = B->src_idx;
    for (int k = 0; k < SEER_IDX_COUNT; k++)
        if (src_idx[k])
            c->idx[k] = seer_cuda_idx{src_idx[k], B->n_idx[k], B->n_pad[k], d + B->o_idx[k], h + B->o_idx[k]};
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
    a->min_layers_view = min_lv;
    a->desc = d;
    a->n_work = n_work;
    /* the tensor-core kinds launch only with items (a grid of 0: not launched) */
    att_grid(B->n_work, B->cap, !tc, &a->grid, &a->grid_bucket);
    att_grid(n_work_dec, B->cap_dec, false, &a->grid_dec, &a->grid_dec_bucket);
    att_grid(B->n_work_pre, B->cap_pre, false, &a->grid_pre, &a->grid_pre_bucket);
    a->split = split;
    a->need_combine = need_combine;
    a->tc = tc;
    a->pre_fixed = tc && fixed;
    a->valid = true;
    c->fw.T = T;
    c->fw.n_out = n_out;
    c->fw.T_pad = B->Tb;
    c->fw.n_out_pad = B->nb;
    return SEER_OK;
}

seer_status seer_cuda_batch_begin(seer_backend *be, const seer_attn_batch *ab,
                                  const int32_t *tokens, const int32_t *pos, const int32_t *page,
                                  const int32_t *row, const int32_t *out_rows, int n_out) {
    seer_cuda *c = seer_cuda_of(be);
    if (c->fw.capturing)
        return seer_err(SEER_ERR_INTERNAL, "CUDA: batch_begin during a graph capture");
    /* Forget the last call's copies first: whatever fails below, no op uses stale ones. */
    memset(c->idx, 0, sizeof c->idx);
    c->att.valid = false;
    memset(&c->fw, 0, sizeof c->fw);
    c->fw.entry = -1;
    c->batch_epoch++;
    if (!ab)
        return SEER_OK;
    bb_t B = {};
    B.c = c;
    B.ab = ab;
    B.src_idx[0] = tokens, B.src_idx[1] = pos, B.src_idx[2] = page, B.src_idx[3] = row, B.src_idx[4] = out_rows;
    B.T = ab->T, B.n_seq = ab->n_seq, B.ps = ab->page_size, B.Hkv = ab->n_kv_heads, B.n_out = n_out;
    SEER_TRY(bb_check(&B));
    seer_status st = bb_fill(&B);
    if (st == SEER_OK)
        st = bb_plan_tokens(&B);
    if (st == SEER_OK)
        bb_plan_tc(&B);
    free(B.maxC);
    if (st == SEER_OK)
        st = bb_plan_scalar(&B);
    if (st == SEER_OK)
        st = bb_upload(&B);
    return st;
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


static __device__ __forceinline__ float2 bf2_to_f2(uint32_t w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
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
        const int C = tk.C, vcnt = tk.vcnt, tail = tk.tail, tok0 = tk.tok0, slot_i = tk.slot;
        const bool has_view = tk.has_view;
        const int32_t *vl = tk.vl;
        const long long chunk = att_chunk(tk.n_vis);
        const int begin = (int)(s * chunk), end = (int)min((long long)begin + chunk, (long long)tk.n_vis);
        const int32_t *pages = a.pages + a.page_off[tk.b];
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
                        const int cs = a.cand_slot[ci];
                        const bool ok = a.mask ? a.mask[(size_t)i * a.T + a.cand_tok[ci]] != 0 : cs <= slot_i;
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
    if (!att_matches(c, ab)) {
        /* a padded call's other ops rely on batch_begin's padded copies, which a rebuild drops */
        if (c->fw.padded)
            return seer_err(SEER_ERR_INTERNAL, "attention: the batch changed inside a padded forward call");
        SEER_TRY(seer_cuda_batch_begin(be, ab, NULL, NULL, NULL, NULL, NULL, 0));
    }
    const seer_cuda_attn *a = &c->att;
    if (layer >= a->min_layers_view)
        return seer_err(SEER_ERR_INVALID_ARG, "attention: layer %d has no list in a view of %d layers",
                        layer, a->min_layers_view);

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
    p.scale = ab->scale;

    const int grid = c->fw.padded ? a->grid_bucket : a->grid;
    if (a->tc) {
        const int grids[ATT_TC_KINDS] = {c->fw.padded ? a->grid_dec_bucket : a->grid_dec, grid,
                                         c->fw.padded ? a->grid_pre_bucket : a->grid_pre};
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
