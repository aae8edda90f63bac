/*
 * attention_qkv.cu: the quantised KV copy on the device (format kv/kv_quant.h). The kernel
 * that quantises a forward call's K/V rows into it, launched by kv_store and rope_kv_store
 * right after they store the same f32 rows; and attention that reads every key and value from
 * the copy (a batch with kv_quant: the quantised-KV self-draft), with the op table's dispatch
 * between it and attention.cu's kernels.
 *
 * The attention here is a plain one, tested against the CPU's attention through the copy
 * (cpu_attention.c, the reference): the host lists, per (token, KV head), the slots the token
 * sees (the reference's rule: the cached slots under its view and window in ascending order,
 * then the new slots under the mask and window) as (page, row) pairs, and scores are
 * soft-capped where the batch asks; one block per (token, query head) runs its
 * four warps over the list, each with an online softmax, and combines them. The lists are
 * uploaded per call, so such calls are not recorded into graphs (llama.c runs them op by op).
 * Candidly: it is not tuned (one block per query head re-reads the group's keys, and a decode
 * step of one sequence has only H blocks); the flash-decoding split of attention.cu would be
 * the next step once its rewrite settles.
 *
 * The same kernel reads a storage whose rows are themselves quantised (geom kv_type q8 / q4,
 * kv/kv_type.h; stored by kv_type.cu) in the calls the tensor-core kernel does not serve: head
 * sizes other than 64, 96, 128 and 256, GQA groups above 16, the scalar variant
 * (seer_cuda_tuning.attn), a device without the shared memory, and every call unless
 * seer_cuda_tuning.kv_rows_tc is set (off by default until that path has run on a GPU). With
 * it, every other call over such a storage (decode, verification chains, trees, prompts,
 * views, windows) goes to
 * attention_tc.cu, which dequantises in its tile loads (seer_cuda_attention_on_tc decides, by
 * the plan that would run the same call over bf16 rows). Here each (token, head)'s output
 * depends only on its list, so it is batch-invariant and the same in every call. Candidly, for
 * those shapes it is the correct path, not the fast one.
 *
 * Not for: attention over the bf16 rows (attention.cu, attention_tc.cu), over quantised rows
 * of the shapes attention_tc.cu serves, or the copy's storage (kv.cu).
 */
#include "backend/cuda/attention.cuh"

#include <math.h>
#include <stdlib.h>

#define QKV_FULL 0xffffffffu
#define QKV_WARPS 4
#define QKV_MAX_NE 8 /* Dh <= 256 */

/* ---- the store ---------------------------------------------------------------------- */

/* One block per (token, K or V); warp w quantises groups w, w + 4, ...: lane l holds element
 * 32 g + l, the group's min and max come from a butterfly over the warp, and the codes and
 * parameters are what seer_kvq_quantize_row writes (the same f32 operations in the same
 * order; rintf rounds half to even on both). */
__global__ void kvq_store_kernel(uint8_t *qkv, const float *k, const float *v, const int32_t *page,
                                 const int32_t *row, int layer, int n_layers, int n_pages,
                                 int page_size, int kvd, int bits, size_t rb) {
    const int t = blockIdx.x, which = blockIdx.y;
    const int pg = page[t], r = row[t];
    if (pg < 0 || pg >= n_pages || r < 0 || r >= page_size)
        return; /* never from the model code; a bad index must not write elsewhere */
    const float *src = (which ? v : k) + (size_t)t * kvd;
    uint8_t *dst = qkv + ((((size_t)pg * n_layers + layer) * 2 + which) * page_size + r) * rb;
    const int ng = (kvd + SEER_KVQ_GROUP - 1) / SEER_KVQ_GROUP, levels = (1 << bits) - 1;
    float *par = (float *)dst;
    uint8_t *codes = dst + (size_t)ng * 8;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int gi = warp; gi < ng; gi += blockDim.x / 32) {
        const int e = gi * SEER_KVQ_GROUP + lane;
        const bool in = e < kvd;
        const float x = in ? src[e] : 0.f;
        float mn = in ? x : INFINITY, mx = in ? x : -INFINITY;
        for (int o = 16; o; o >>= 1) {
            mn = fminf(mn, __shfl_xor_sync(QKV_FULL, mn, o));
            mx = fmaxf(mx, __shfl_xor_sync(QKV_FULL, mx, o));
        }
        const float scale = __fdiv_rn(mx - mn, (float)levels);
        const float inv = scale > 0.f ? __fdiv_rn(1.f, scale) : 0.f;
        if (lane == 0) {
            par[2 * gi] = scale;
            par[2 * gi + 1] = mn;
        }
        int qv = 0;
        if (in) {
            const float qf = rintf(__fmul_rn(__fsub_rn(x, mn), inv));
            qv = qf < 0.f ? 0 : qf > (float)levels ? levels : (int)qf;
        }
        if (bits == 8) {
            if (in)
                codes[e] = (uint8_t)qv;
        } else {
            const int hi = __shfl_down_sync(QKV_FULL, qv, 1);
            if (in && !(lane & 1))
                codes[e / 2] = (uint8_t)(qv | ((e + 1 < kvd ? hi : 0) << 4));
        }
    }
}

seer_status seer_cuda_kvq_store(seer_cuda *c, void *kv, const seer_kv_geom *g, int layer, const float *k,
                                const float *v, const int32_t *dpage, const int32_t *drow, int T) {
    uint8_t *qkv = seer_cuda_kv_qdata(c, kv);
    if (!qkv)
        return seer_err(SEER_ERR_INTERNAL, "CUDA: the KV storage has no quantised copy");
    const int kvd = g->n_kv_heads * g->head_dim;
    const size_t rb = seer_kvq_row_bytes(kvd, g->kv_bits);
    kvq_store_kernel<<<dim3((unsigned)T, 2), 128, 0, c->stream>>>(qkv, k, v, dpage, drow, layer, g->n_layers,
                                                                g->n_pages, g->page_size, kvd, g->kv_bits, rb);
    LAUNCH_TRY("kvq_store_kernel");
    return SEER_OK;
}

/* ---- attention through the copy ------------------------------------------------------- */

/* Element e of a quantised row of kvd values. */
static __device__ __forceinline__ float kvq_elem(const uint8_t *row, int ng, int e, int bits) {
    const float *par = (const float *)row;
    const uint8_t *codes = row + (size_t)ng * 8;
    const int gi = e / SEER_KVQ_GROUP;
    const int q = bits == 8 ? codes[e] : (codes[e / 2] >> (4 * (e & 1))) & 15;
    return par[2 * gi + 1] + (float)q * par[2 * gi];
}

/* Element e of a row of the copy (kv_quant.h) or, with G > 0, of a quantised storage row
 * (kv_type.h: G values a group, exponents at byte soff). */
static __device__ __forceinline__ float qrow_elem(const uint8_t *row, int ng, int e, int bits, int G, int soff) {
    return G ? kvt_value(row, e, G, bits, soff) : kvq_elem(row, ng, e, bits);
}

/* out [T][H][Dh]: block (token i, query head h) over the slots locs[off[i Hkv + h / group] ..
 * off[i Hkv + h / group + 1]) (page, row). Lane l holds elements l + 32 j of the head. */
template <int NE>
__global__ void __launch_bounds__(QKV_WARPS * 32)
    qkv_attn_kernel(float *out, const float *q, const uint8_t *qkv, const int2 *locs, const int32_t *off,
                    int layer, int n_layers, int page_size, int H, int Hkv, int Dh, int bits, size_t rb,
                    int G, int soff, float scale, float cap, float cap_inv) {
    const int i = blockIdx.x / H, h = blockIdx.x % H, kvh = h / (H / Hkv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kvd = Hkv * Dh, ng = (kvd + SEER_KVQ_GROUP - 1) / SEER_KVQ_GROUP;
    const int32_t o0 = off[i * Hkv + kvh], n = off[i * Hkv + kvh + 1] - o0;
    const float *qh = q + ((size_t)i * H + h) * Dh;
    float qr[NE], acc[NE];
#pragma unroll
    for (int j = 0; j < NE; j++) {
        const int e = lane + 32 * j;
        qr[j] = e < Dh ? qh[e] : 0.f;
        acc[j] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int k = warp; k < n; k += QKV_WARPS) {
        const int2 pr = locs[o0 + k];
        const size_t base = (((size_t)pr.x * n_layers + layer) * 2) * page_size + pr.y;
        const uint8_t *kr = qkv + base * rb, *vr = qkv + (base + page_size) * rb;
        float d = 0.f;
#pragma unroll
        for (int j = 0; j < NE; j++) {
            const int e = lane + 32 * j;
            if (e < Dh)
                d += qr[j] * qrow_elem(kr, ng, kvh * Dh + e, bits, G, soff);
        }
        for (int o = 16; o; o >>= 1)
            d += __shfl_xor_sync(QKV_FULL, d, o);
        const float s = att_cap(d * scale, cap, cap_inv), mn = fmaxf(m, s);
        const float cf = expf(m - mn), p = expf(s - mn);
        l = l * cf + p;
#pragma unroll
        for (int j = 0; j < NE; j++) {
            const int e = lane + 32 * j;
            acc[j] = acc[j] * cf + (e < Dh ? p * qrow_elem(vr, ng, kvh * Dh + e, bits, G, soff) : 0.f);
        }
        m = mn;
    }
    __shared__ float sm_m[QKV_WARPS], sm_l[QKV_WARPS];
    __shared__ float sm_acc[QKV_WARPS][QKV_MAX_NE * 32];
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < NE; j++)
        sm_acc[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    if (warp != 0)
        return;
    float M = -INFINITY;
    for (int w = 0; w < QKV_WARPS; w++)
        M = fmaxf(M, sm_m[w]);
    float L = 0.f, f[QKV_WARPS];
    for (int w = 0; w < QKV_WARPS; w++) {
        f[w] = sm_m[w] == -INFINITY ? 0.f : expf(sm_m[w] - M); /* a warp that saw no slot */
        L += sm_l[w] * f[w];
    }
    float *oh = out + ((size_t)i * H + h) * Dh;
#pragma unroll
    for (int j = 0; j < NE; j++) {
        const int e = lane + 32 * j;
        if (e >= Dh)
            continue;
        float a = 0.f;
        for (int w = 0; w < QKV_WARPS; w++)
            a += sm_acc[w][e] * f[w];
        oh[e] = a / L;
    }
}

/* Appends the (page, row) of each slot token i sees under KV head kvh: the CPU reference's
 * visible_slots, in its order, a windowed layer's window included. */
static int32_t list_slots(const seer_attn_batch *ab, int i, int layer, int kvh, int2 *out) {
    const int b = ab->tok_seq[i], len0 = ab->seq_len0[b], ps = ab->page_size;
    const int32_t *pages = ab->seq_pages + (size_t)b * ab->max_pages;
    const seer_attn_view *v = ab->seq_view ? ab->seq_view[b] : NULL;
    const int W = ab->window > 0 ? ab->window : 0;
    const int pos_i = ab->tok_pos ? ab->tok_pos[i] : ab->tok_slot[i];
    const int lo = W && pos_i - W + 1 > 0 ? pos_i - W + 1 : 0; /* the first cached slot seen */
    int32_t n = 0;
#define QKV_PUT(s) (out[n++] = make_int2(pages[(s) / ps], (s) % ps))
    if (!v) {
        for (int s = lo; s < len0; s++)
            QKV_PUT(s);
    } else {
        const int li = v->n_layers_view > 1 ? layer : 0, hi = v->n_heads_view > 1 ? kvh : 0;
        const int32_t *idx = v->idx + ((size_t)li * v->n_heads_view + hi) * v->n;
        const int tail = v->tail_start < 0 ? 0 : v->tail_start;
        for (int k = 0; k < v->n; k++)
            if (idx[k] >= lo && idx[k] < len0 && idx[k] < tail)
                QKV_PUT(idx[k]);
        for (int s = tail > lo ? tail : lo; s < len0; s++)
            QKV_PUT(s);
    }
    const int slot_i = ab->tok_slot[i];
    for (int k = ab->seq_tok_off[b]; k < ab->seq_tok_off[b + 1]; k++) {
        const int j = ab->seq_toks[k];
        const bool ok = ab->mask ? ab->mask[(size_t)i * ab->T + j] != 0 : ab->tok_slot[j] <= slot_i;
        if (ok && att_in_window(W, pos_i, ab->tok_pos ? ab->tok_pos[j] : ab->tok_slot[j]))
            QKV_PUT(ab->tok_slot[j]);
    }
#undef QKV_PUT
    return n;
}

static seer_status qkv_attention(seer_cuda *c, float *out, const float *q, const void *kv, const seer_kv_geom *g,
                                 int layer, const seer_attn_batch *ab) {
    /* the storage's own quantised rows, or the draft's copy beside bf16 rows */
    const bool rows = g->kv_type != SEER_KV_FULL;
    const uint8_t *qkv = rows ? (const uint8_t *)kv : g->kv_bits ? seer_cuda_kv_qdata(c, kv) : NULL;
    if (!qkv || (rows && ab->kv_quant))
        return seer_err(SEER_ERR_INVALID_ARG, "attention: the batch reads a quantised KV copy the cache does not keep");
    const int T = ab->T, H = ab->n_heads, Hkv = ab->n_kv_heads, Dh = ab->head_dim;
    if (Dh < 1 || Dh > QKV_MAX_NE * 32 || Hkv < 1 || H % Hkv || g->n_kv_heads != Hkv || g->head_dim != Dh)
        return seer_err(SEER_ERR_UNSUPPORTED, "attention through the quantised KV copy: %d/%d heads of %d dims",
                        H, Hkv, Dh);
    if (T < 1)
        return SEER_OK;
    /* Host staging: offsets [T Hkv + 1], then the (page, row) pairs; sized by the most each
     * token can see (its sequence's cached and new slots). */
    size_t most = 0;
    for (int i = 0; i < T; i++) {
        const int b = ab->tok_seq[i];
        most += (size_t)Hkv * (size_t)(ab->seq_len0[b] + ab->seq_tok_off[b + 1] - ab->seq_tok_off[b]);
    }
    const size_t n_off = (size_t)T * Hkv + 1, want = (n_off + 1) / 2 * 2 + 2 * most;
    if (most > (size_t)INT32_MAX)
        return seer_err(SEER_ERR_UNSUPPORTED, "attention through the quantised KV copy: %zu slots in one call", most);
    if (want > c->attn->qkv_host_cap) {
        int32_t *p = (int32_t *)realloc(c->attn->qkv_host, want * sizeof(int32_t));
        if (!p)
            return seer_err(SEER_ERR_OOM, "attention through the quantised KV copy: out of host memory");
        c->attn->qkv_host = p;
        c->attn->qkv_host_cap = want;
    }
    int32_t *off = c->attn->qkv_host;
    int2 *locs = (int2 *)(c->attn->qkv_host + (n_off + 1) / 2 * 2); /* 8-byte aligned */
    int32_t n = 0;
    for (int i = 0; i < T; i++)
        for (int kvh = 0; kvh < Hkv; kvh++) {
            off[i * Hkv + kvh] = n;
            n += list_slots(ab, i, layer, kvh, locs + n);
        }
    off[(size_t)T * Hkv] = n;
    const size_t bytes = ((n_off + 1) / 2 * 2 + 2 * (size_t)n) * sizeof(int32_t);
    SEER_TRY(seer_cuda_reserve(c, &c->attn->qkv_idx, bytes, "the quantised KV attention's slot lists"));
    /* From pageable memory the copy returns once the source is staged: the staging buffer is
     * free for the next layer at once; the stream orders it after the kernel that read the
     * device buffer last. */
    CUDA_TRY(cudaMemcpyAsync(c->attn->qkv_idx.p, c->attn->qkv_host, bytes, cudaMemcpyHostToDevice, c->stream));
    const int32_t *d_off = (const int32_t *)c->attn->qkv_idx.p;
    const int2 *d_locs = (const int2 *)(d_off + (n_off + 1) / 2 * 2);
    const size_t rb = rows ? seer_kvt_row_bytes(g->kv_type, Hkv, Dh) : seer_kvq_row_bytes(Hkv * Dh, g->kv_bits);
    const int bits = rows ? seer_kvt_bits(g->kv_type) : g->kv_bits;
    const int G = rows ? seer_kvt_group(g->kv_type, Dh) : 0, soff = rows ? (int)seer_kvt_scales_off(g->kv_type, Hkv * Dh) : 0;
    const float cap = ab->softcap > 0.f ? ab->softcap : 0.f, cap_inv = cap > 0.f ? 1.f / cap : 0.f;
    const dim3 grid((unsigned)((size_t)T * H)), block(QKV_WARPS * 32);
#define QKV_LAUNCH(NE)                                                                                     \
    qkv_attn_kernel<NE><<<grid, block, 0, c->stream>>>(out, q, qkv, d_locs, d_off, layer, g->n_layers,      \
                                                       g->page_size, H, Hkv, Dh, bits, rb, G, soff,        \
                                                       ab->scale, cap, cap_inv)
    const int ne = (Dh + 31) / 32;
    if (ne <= 1)
        QKV_LAUNCH(1);
    else if (ne <= 2)
        QKV_LAUNCH(2);
    else if (ne <= 4)
        QKV_LAUNCH(4);
    else
        QKV_LAUNCH(8);
#undef QKV_LAUNCH
    LAUNCH_TRY("qkv_attn_kernel");
    return SEER_OK;
}

seer_status seer_cuda_attention_any(seer_backend *be, float *out, const float *q, const void *kv,
                                    const seer_kv_geom *g, int layer, const seer_attn_batch *ab) {
    if (ab->kv_quant) /* the draft's copy: here always */
        return qkv_attention(seer_cuda_of(be), out, q, kv, g, layer, ab);
    if (g->kv_type != SEER_KV_FULL) { /* the storage's quantised rows: the tensor cores' where they serve */
        bool tc = false;
        if (!seer_cuda_of(be)->kv_rows_tc) /* off until it has run on a GPU (seer_cuda_tuning) */
            return qkv_attention(seer_cuda_of(be), out, q, kv, g, layer, ab);
        SEER_TRY(seer_cuda_attention_on_tc(be, g, layer, ab, &tc));
        if (!tc)
            return qkv_attention(seer_cuda_of(be), out, q, kv, g, layer, ab);
    }
    return seer_cuda_attention(be, out, q, kv, g, layer, ab);
}
