/*
 * attention_plan.cu: batch_begin, once per forward call: checks the batch, uploads every index
 * array the ops use (padded to the recorded call's bucket) and attention's descriptor, and
 * plans the attention kernels' work: how each token is attended (split kinds, whole prefill
 * items for prompt tokens, one-split prefill), its splits, the tensor-core kinds' token groups
 * and items, the scalar kernel's items and the scratch they need (attention.cu and
 * attention_tc.cu read the descriptor; attention.cuh says how).
 * Not for: the kernels or their launch (attention.cu, attention_tc.cu, attention_wgmma.cu).
 */
#include "backend/cuda/attention.cuh"

#include <stdlib.h>
#include <string.h>

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
    seer_cuda_unsafe_guard g(c->device); /* page-locked memory may synchronise the device */
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
        o_cand_slot, o_page_off, o_pages, o_view, o_vlist, o_vidx, o_qoff, o_mask, o_grp, o_gitem, o_tmode,
        o_cvis_off, o_cvis,
        o_tok_pos;
    int n_idx[SEER_IDX_COUNT], n_pad[SEER_IDX_COUNT];
    int32_t *h;    /* the staging copy of the descriptor */
    int32_t *maxC; /* [2 n_seq]: each sequence's largest cached count, whether it has a view */
    /* the plan */
    int H, Dh, group, cap, cap_tc, cap_dec, cap_pre, cap_pre_mma;
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

/* Entries of sequence b's candidate lists under the mask (att_tok.cl): 0 where every token's
 * visible candidates are a prefix of the sequence's (a chain), which the implicit list
 * serves, or where the sequence is prefilled; else the sum of the tokens' visible counts. */
static size_t cvis_count(const seer_attn_batch *ab, int T, int b) {
    const int o = ab->seq_tok_off[b], n_b = ab->seq_tok_off[b + 1] - o;
    if (prompt_run(ab, b, n_b) > 0)
        return 0; /* the prefill kinds' rows share every key: the mask predicate serves */
    size_t n = 0;
    bool prefix = true;
    for (int k = 0; k < n_b; k++) {
        const uint8_t *row = ab->mask + (size_t)ab->seq_toks[o + k] * T;
        int cnt = 0;
        for (int kk = 0; kk < n_b; kk++)
            if (row[ab->seq_toks[o + kk]]) {
                prefix = prefix && kk == cnt;
                cnt++;
            }
        n += (size_t)cnt;
    }
    return prefix ? 0 : n;
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
    B->o_tok_pos = take(T);
    size_t n_cvis = 0; /* candidate lists: those of the masked sequences that need them */
    for (int b = 0; ab->mask && b < n_seq; b++)
        n_cvis += cvis_count(ab, T, b);
    B->o_cvis_off = take(T);
    B->o_cvis = take(n_cvis);
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
    /* positions, for windowed layers (a window is a layer's, not the batch's: every call has them) */
    memcpy(h + B->o_tok_pos, ab->tok_pos ? ab->tok_pos : ab->tok_slot, (size_t)T * sizeof(int32_t));
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
    /* Under a mask, each token's visible candidates listed in candidate order (cvis): its
     * r-th is at visible index C + r, so a tree's node sees its ancestors where a decode step
     * of the same token sees them in the cache, and its splits follow its own count. Where
     * every list of a sequence is a prefix of its candidates (a chain), the implicit list
     * serves (cvis_off -1) and the sequence's rows share tiles as without a mask. A prefilled
     * sequence (prompt_run) keeps the scan of all its candidates under the predicate. */
    const size_t o_cvis_off = B->o_cvis_off, o_cvis = B->o_cvis;
    for (int i = 0; i < T; i++)
        h[o_cvis_off + i] = -1;
    size_t nc = 0;
    for (int b = 0; ab->mask && b < n_seq; b++) {
        const int o = ab->seq_tok_off[b], n_b = ab->seq_tok_off[b + 1] - o;
        if (prompt_run(ab, b, n_b) > 0)
            continue; /* prefilled: every row scans all candidates (ncand n_b) */
        const bool listed = cvis_count(ab, T, b) > 0;
        for (int k = 0; k < n_b; k++) {
            const int j = ab->seq_toks[o + k];
            const uint8_t *row = ab->mask + (size_t)j * T;
            int cnt = 0;
            if (listed)
                h[o_cvis_off + j] = (int32_t)nc;
            for (int kk = 0; kk < n_b; kk++)
                if (row[ab->seq_toks[o + kk]]) {
                    if (listed)
                        h[o_cvis + nc++] = o + kk;
                    cnt++;
                }
            h[o_ncand + j] = cnt;
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
    int cap_tc = 0, cap_dec = 0, cap_pre = 0, cap_pre_mma = 0;
    /* Prompt tokens (seq_prompt) in a call of at most the batch-invariant size are split at
     * fixed key positions (att_pre_chunk of each token's visible count),
     * whole items of 128 rows, merged by the combine kernel: a token's bits then depend on its
     * query and visible keys alone, however its prompt is cut into such calls
     * (prompt_cuts_free), and a short piece of a long prompt spreads over the GPU. */
    const bool fixed = ab->seq_prompt && T <= SEER_CUDA_INVARIANT_MAX_T;
    if (heads_ok && attn_tc_eligible(c, H, Hkv, Dh)) {
        seer_status st = attn_tc_capacity(c, Dh, ATT_TC_CHAIN, &cap_tc);
        if (st == SEER_OK)
            st = attn_tc_capacity(c, Dh, ATT_TC_DEC, &cap_dec);
        if (st == SEER_OK)
            st = attn_tc_capacity(c, Dh, fixed ? ATT_TC_PRE_MMA : ATT_TC_PRE, &cap_pre);
        /* the mma.sync kernel's, for the windowed or soft-capped calls it serves instead */
        if (st == SEER_OK)
            st = attn_tc_capacity(c, Dh, ATT_TC_PRE_MMA, &cap_pre_mma);
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
    B->cap_tc = cap_tc, B->cap_dec = cap_dec, B->cap_pre = cap_pre, B->cap_pre_mma = cap_pre_mma;
    B->n_q = n_q, B->split = split;
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
                /* head size 256: the chain kind's 256 threads hold the rows' results without
                 * spilling, where the decode kind's 128 would (the same arithmetic per row) */
                const int kind = pre ? ATT_TC_PRE : n * group <= 16 && B->Dh <= 128 ? ATT_TC_DEC : ATT_TC_CHAIN;
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
    hd[D_CVIS_OFF] = (int32_t)B->o_cvis_off;
    hd[D_CVIS] = (int32_t)B->o_cvis;
    hd[D_NWORK_TC] = tc ? (int32_t)n_work_tc : 0;
    hd[D_NGRP] = n_grp;
    hd[D_GRP] = (int32_t)o_grp;
    hd[D_GITEM] = (int32_t)o_gitem;
    hd[D_TMODE] = (int32_t)o_tmode;
    hd[D_NGRP_DEC] = n_grp_dec;
    hd[D_NWORK_DEC] = (int32_t)n_work_dec;
    hd[D_NGRP_CHAIN] = n_grp_chain;
    hd[D_NWORK_CHAIN] = (int32_t)n_work_chain;
    hd[D_TOK_POS] = (int32_t)B->o_tok_pos;

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
    a->ab = *ab;
    a->h_tok_seq = h + o_tok_seq;
    a->h_tok_slot = h + o_tok_slot;
    a->h_tok_pos = h + B->o_tok_pos;
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
    att_grid(B->n_work_pre, B->cap_pre_mma, false, &a->grid_pre_mma, &a->grid_pre_mma_bucket);
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
