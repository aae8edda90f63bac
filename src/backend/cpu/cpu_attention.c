/*
 * cpu_attention.c: reference attention over the paged KV cache, with sparse views and
 * explicit masks among the new tokens.
 *
 * Keys are visited in ascending slot order (the cached slots the view allows, then the new
 * slots the mask allows) with a two-pass softmax, so a token's output depends only on the
 * set of slots it sees, not on how the batch around it was formed. A query-key dot product is
 * summed in 8 lanes and a fixed tree (dot_lanes), which the compiler turns into vector FMAs:
 * one serial f32 chain per key made long prompts latency-bound.
 *
 * A sequence's prompt tokens (seer_attn_batch.seq_prompt: its leading new tokens, causal, full
 * view) go to the tiled path instead (cpu_attention_tile.c), which sums in another order but
 * gives a token the same bits however its prompt is cut into calls; decode and verification
 * steps never do.
 *
 * A windowed layer's call (seer_attn_batch.window) drops the keys behind the window from
 * each token's slots, views included, and always stays on this path. So does a call with
 * soft-capping (seer_attn_batch.softcap), which caps the scaled scores before the softmax.
 *
 * A batch with kv_quant reads every key and value from the storage's quantised copy
 * (kv/kv_quant.h), dequantised a head row at a time into scratch, through the same
 * arithmetic; it never takes the tiled path. Nor does a storage of quantised rows (geom
 * kv_type, kv/kv_type.h), whose every read dequantises a head row the same way: its prompts
 * are computed as decode steps are, which is batch- and cut-invariant too.
 */
#include "backend/cpu/cpu.h"
#include "util/error.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

static inline float dot_lanes(const float *a, const float *b, int n) {
    float acc[8] = {0};
    const int nv = n - n % 8;
    for (int i = 0; i < nv; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (int i = nv; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* dot_lanes of q with four keys at once: four independent chains, each summed exactly as
 * dot_lanes sums it. */
static inline void dot4_lanes(const float *q, const float *const k[4], int n, float *out) {
    float acc[4][8] = {{0}};
    const int nv = n - n % 8;
    for (int i = 0; i < nv; i += 8)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 8; l++)
                acc[j][l] += q[i + l] * k[j][i + l];
    for (int j = 0; j < 4; j++) {
        const float *a = acc[j];
        float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
        for (int i = nv; i < n; i++)
            s += q[i] * k[j][i];
        out[j] = s;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma")))

/* dot4_lanes with the eight lanes in one register, for Dh a multiple of 8: lane l's chain
 * is the same fused multiply-adds (the build contracts a * b + c), the tree the same adds
 * ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)); what the compiler made of the scalar
 * form (gathers and shuffles) kept decode attention at a few GFLOP/s. */
AVX2 static void dot4_avx2(const float *q, const float *const k[4], int n, float *out) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < n; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[j] + i), acc[j]);
    }
    for (int j = 0; j < 4; j++) {
        const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc[j]), _mm256_extractf128_ps(acc[j], 1));
        const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
        out[j] = _mm_cvtss_f32(u) + _mm_cvtss_f32(_mm_shuffle_ps(u, u, 1));
    }
}

static bool have_avx2(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

/* The cached slots below len0 that a window leaves token i: from lo up. */
static int window_lo(const seer_attn_batch *ab, int i) {
    if (ab->window <= 0)
        return 0;
    const int p = ab->tok_pos ? ab->tok_pos[i] : ab->tok_slot[i];
    return p - ab->window + 1 > 0 ? p - ab->window + 1 : 0;
}

/* Slots token i may see, in ascending order; returns the count. Under a window a cached
 * slot's position is the slot, a new token's its position. */
static int visible_slots(const seer_attn_batch *ab, int i, int layer, int kvh, int32_t *out) {
    int b = ab->tok_seq[i];
    int len0 = ab->seq_len0[b];
    const seer_attn_view *v = ab->seq_view ? ab->seq_view[b] : NULL;
    const int lo = window_lo(ab, i);
    int n = 0;
    if (!v) {
        for (int s = lo; s < len0; s++)
            out[n++] = s;
    } else {
        int li = v->n_layers_view > 1 ? layer : 0;
        int hi = v->n_heads_view > 1 ? kvh : 0;
        const int32_t *idx = v->idx + ((size_t)li * v->n_heads_view + hi) * v->n;
        int tail = v->tail_start < 0 ? 0 : v->tail_start;
        for (int k = 0; k < v->n; k++)
            if (idx[k] >= lo && idx[k] < len0 && idx[k] < tail)
                out[n++] = idx[k];
        for (int s = tail > lo ? tail : lo; s < len0; s++)
            out[n++] = s;
    }
    int slot_i = ab->tok_slot[i];
    for (int k = ab->seq_tok_off[b]; k < ab->seq_tok_off[b + 1]; k++) {
        int j = ab->seq_toks[k];
        int ok = ab->mask ? ab->mask[(size_t)i * ab->T + j] != 0 : ab->tok_slot[j] <= slot_i;
        if (ok && ab->window > 0 && ab->tok_pos && ab->tok_pos[i] - ab->tok_pos[j] >= ab->window)
            ok = 0;
        else if (ok && ab->window > 0 && !ab->tok_pos && slot_i - ab->tok_slot[j] >= ab->window)
            ok = 0;
        if (ok)
            out[n++] = ab->tok_slot[j];
    }
    return n;
}

typedef struct {
    float *out;
    const float *q;
    const void *kv;
    const seer_kv_geom *g;
    int layer, max_slots;
    const seer_attn_batch *ab;
    const int32_t *tiled; /* [n_seq] leading tokens of each that cpu_attention_tile.c did, or NULL */
    const uint8_t *qkv;   /* the quantised copy when the batch reads it, else NULL */
    _Atomic int oom;
} attn_args;

/* A head of a quantised storage row (geom kv_type), dequantised into buf [Dh]; out of line,
 * so that head_row stays small enough to inline in the full-precision loops. */
static __attribute__((noinline)) const float *qrow_head(const attn_args *a, const int32_t *pages, int s,
                                                        int which, int kvh, float *buf) {
    const seer_kv_geom *g = a->g;
    const int ps = a->ab->page_size;
    seer_kvt_dequantize_head(g->kv_type, seer_cpu_kv_qrow(a->kv, g, pages[s / ps], a->layer, which, s % ps),
                             g->n_kv_heads, g->head_dim, kvh, buf);
    return buf;
}

/* Head kvh of the key (which = 0) or value row of slot s: in the storage, or dequantised
 * into buf [Dh] from the storage's quantised rows (geom kv_type) or from the copy. */
static inline __attribute__((always_inline)) const float *head_row(const attn_args *a, const int32_t *pages,
                                                                   int s, int which, int kvh, float *buf) {
    const seer_kv_geom *g = a->g;
    const int ps = a->ab->page_size, Dh = g->head_dim;
    if (__builtin_expect(g->kv_type != SEER_KV_FULL, 0))
        return qrow_head(a, pages, s, which, kvh, buf);
    if (!a->qkv)
        return seer_cpu_kv_row(a->kv, g, pages[s / ps], a->layer, which, s % ps) + (size_t)kvh * Dh;
    const int kvd = g->n_kv_heads * Dh;
    seer_kvq_dequantize(a->qkv + seer_kvq_row_off(g->n_layers, g->page_size, kvd, g->kv_bits,
                                                  pages[s / ps], a->layer, which, s % ps),
                        kvd, g->kv_bits, kvh * Dh, Dh, buf);
    return buf;
}

/* Items are (token, KV head) pairs. */
static void attn_items(void *ctx, int64_t j0, int64_t j1) {
    attn_args *a = ctx;
    const seer_attn_batch *ab = a->ab;
    const int layer = a->layer;
    const float *q = a->q;
    float *out = a->out;
    const int H = ab->n_heads, Hkv = ab->n_kv_heads, Dh = ab->head_dim;
    const int group = H / Hkv;
    bool fast = false;
#ifdef AVX2
    fast = Dh % 8 == 0 && have_avx2();
#endif
    int32_t *slots = seer_malloc_array((size_t)a->max_slots + 1, sizeof *slots);
    /* [group][stride]: the query heads that share a KV head go through its keys together, so
     * each key and value row is read once per token rather than once per query head. */
    const size_t stride = (size_t)a->max_slots + 1;
    float *score = seer_malloc_array(stride * group, sizeof *score);
    float *sums = seer_malloc_array((size_t)group, sizeof *sums);
    float *deq = seer_malloc_array((size_t)4 * Dh, sizeof *deq); /* [4][Dh] dequantised rows */
    if (!slots || !score || !sums || !deq) {
        atomic_store(&a->oom, 1);
        free(slots);
        free(score);
        free(sums);
        free(deq);
        return;
    }
    for (int64_t j = j0; j < j1; j++) {
        const int i = (int)(j / Hkv), kvh = (int)(j % Hkv);
        if (a->tiled && ab->tok_slot[i] - ab->seq_len0[ab->tok_seq[i]] < a->tiled[ab->tok_seq[i]])
            continue; /* one of its sequence's leading tokens the tiles did */
        const int32_t *pages = ab->seq_pages + (size_t)ab->tok_seq[i] * ab->max_pages;
        int n = visible_slots(ab, i, layer, kvh, slots);
        const float *qh = q + ((size_t)i * H + (size_t)kvh * group) * Dh;
        float *oh = out + ((size_t)i * H + (size_t)kvh * group) * Dh;
        int k = 0;
        for (; k + 4 <= n; k += 4) {
            const float *kr[4];
            for (int j = 0; j < 4; j++)
                kr[j] = head_row(a, pages, slots[k + j], 0, kvh, deq + (size_t)j * Dh);
            for (int hq = 0; hq < group; hq++) {
                float d[4];
#ifdef AVX2
                if (fast)
                    dot4_avx2(qh + (size_t)hq * Dh, kr, Dh, d);
                else
#endif
                    dot4_lanes(qh + (size_t)hq * Dh, kr, Dh, d);
                for (int j = 0; j < 4; j++)
                    score[hq * stride + k + j] = d[j] * ab->scale;
            }
        }
        for (; k < n; k++) {
            const float *kr = head_row(a, pages, slots[k], 0, kvh, deq);
            for (int hq = 0; hq < group; hq++)
                score[hq * stride + k] = dot_lanes(qh + (size_t)hq * Dh, kr, Dh) * ab->scale;
        }
        if (ab->softcap > 0) { /* as llama.cpp: times 1/c, tanh, times c */
            const float c = ab->softcap, inv = 1.f / c;
            for (int hq = 0; hq < group; hq++)
                for (int k = 0; k < n; k++)
                    score[hq * stride + k] = c * tanhf(score[hq * stride + k] * inv);
        }
        for (int hq = 0; hq < group; hq++) {
            float *sc = score + hq * stride;
            float mx = -INFINITY;
            for (int k = 0; k < n; k++)
                if (sc[k] > mx)
                    mx = sc[k];
            float sum = 0.f;
            for (int k = 0; k < n; k++) {
                sc[k] = expf(sc[k] - mx);
                sum += sc[k];
            }
            sums[hq] = sum;
        }
        for (size_t e = 0; e < (size_t)group * Dh; e++)
            oh[e] = 0.f;
        /* Four values per pass over an output row, added in key order as one at a time
         * would: the row stays in registers between them. */
        k = 0;
        for (; k + 4 <= n; k += 4) {
            const float *vr[4];
            for (int j = 0; j < 4; j++)
                vr[j] = head_row(a, pages, slots[k + j], 1, kvh, deq + (size_t)j * Dh);
            for (int hq = 0; hq < group; hq++) {
                float p[4];
                for (int j = 0; j < 4; j++)
                    p[j] = score[hq * stride + k + j] / sums[hq];
                float *o = oh + (size_t)hq * Dh;
                for (int e = 0; e < Dh; e++) {
                    float t = o[e];
                    t += p[0] * vr[0][e];
                    t += p[1] * vr[1][e];
                    t += p[2] * vr[2][e];
                    t += p[3] * vr[3][e];
                    o[e] = t;
                }
            }
        }
        for (; k < n; k++) {
            const float *vr = head_row(a, pages, slots[k], 1, kvh, deq);
            for (int hq = 0; hq < group; hq++) {
                const float p = score[hq * stride + k] / sums[hq];
                float *o = oh + (size_t)hq * Dh;
                for (int e = 0; e < Dh; e++)
                    o[e] += p * vr[e];
            }
        }
    }
    free(slots);
    free(score);
    free(sums);
    free(deq);
}

seer_status seer_cpu_attention(seer_backend *be, float *out, const float *q, const void *kv,
                               const seer_kv_geom *g, int layer, const seer_attn_batch *ab) {
    const int T = ab->T, Hkv = ab->n_kv_heads;
    int max_slots = 0;
    for (int b = 0; b < ab->n_seq; b++) {
        int m = ab->seq_len0[b] + (ab->seq_tok_off[b + 1] - ab->seq_tok_off[b]);
        if (m > max_slots)
            max_slots = m;
    }
    /* Prompts (long runs of new tokens in one sequence) go through the tiles; everything a
     * decode or verification step sees stays on the reference below. */
    const uint8_t *qkv = NULL;
    if (ab->kv_quant && !(qkv = g->kv_bits ? seer_cpu_kv_qdata(kv) : NULL))
        return seer_err(SEER_ERR_INVALID_ARG, "attention: the batch reads a quantised KV copy the cache does not keep");
    int32_t *tiled = NULL;
    int n_tiled = 0, n_ref = T;
    const bool tiles = !((seer_cpu *)be->impl)->attn_ref && !qkv && g->kv_type == SEER_KV_FULL;
    for (int b = 0; b < ab->n_seq && tiles; b++) {
        const int m = seer_cpu_attn_tileable(ab, b);
        if (m > 0) {
            if (!tiled && !(tiled = calloc((size_t)ab->n_seq, sizeof *tiled)))
                return seer_err(SEER_ERR_OOM, "attention: out of memory");
            tiled[b] = m;
            n_tiled++;
            n_ref -= m;
        }
    }
    if (n_tiled) {
        seer_status st = seer_cpu_attention_tiles(be, out, q, kv, g, layer, ab, tiled);
        if (st != SEER_OK) {
            free(tiled);
            return st;
        }
    }
    attn_args a = {out, q, kv, g, layer, max_slots, ab, tiled, qkv, 0};
    if (n_ref > 0)
        seer_cpu_for(be, (size_t)n_ref * ab->n_heads * max_slots * ab->head_dim > ((size_t)1 << 18),
                     (int64_t)T * Hkv, attn_items, &a);
    free(tiled);
    if (atomic_load(&a.oom))
        return seer_err(SEER_ERR_OOM, "attention: out of memory for %d slots", max_slots);
    return SEER_OK;
}
