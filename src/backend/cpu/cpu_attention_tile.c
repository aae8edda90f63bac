/*
 * cpu_attention_tile.c: attention for long runs of new tokens (a prompt), in tiles: a block
 * of BQ queries (times the query heads that share a KV head) goes over the keys in blocks of
 * BK with an online softmax (the running max and sum of FlashAttention, Dao et al. 2022), so
 * each key and value row is read once per query block instead of once per query, and the
 * score, exponent and value steps run as vectors over keys and over the head dimension.
 *
 * Not batch-invariant and not the reference: a token's output depends on where its query
 * block starts and the f32 sums run in another order than cpu_attention.c's (tests check it
 * against that reference within a stated tolerance). So it takes only sequences with more
 * than SEER_INVARIANT_NEW_TOKENS new tokens in the call (never a decode or verification step),
 * with a full view and causal order among the new tokens (no mask), new slots following the
 * cached ones.
 *
 * Two builds of the same loop: AVX-512 (run-time choice, head dims that are multiples of
 * 16 up to 256) and plain C for everything else.
 */
#include "backend/cpu/cpu.h"
#include "util/error.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_X86 1
#define AVX512 __attribute__((target("avx512f,avx512dq,fma")))
#endif

#define BQ 16     /* query tokens per tile */
#define BK 16     /* keys per step */
#define MAX_DH 256

bool seer_cpu_attn_tileable(const seer_attn_batch *ab, int b) {
    const int off = ab->seq_tok_off[b], n = ab->seq_tok_off[b + 1] - off;
    if (n <= SEER_INVARIANT_NEW_TOKENS || ab->mask || (ab->seq_view && ab->seq_view[b]) ||
        ab->head_dim > MAX_DH || ab->n_heads / ab->n_kv_heads > 64)
        return false;
    for (int k = 0; k < n; k++)
        if (ab->tok_slot[ab->seq_toks[off + k]] != ab->seq_len0[b] + k)
            return false;
    return true;
}

typedef struct {
    float *out;
    const float *q;
    const void *kv;
    const seer_kv_geom *g;
    int layer;
    const seer_attn_batch *ab;
    const int32_t *item_seq; /* [n_tiled + 1]: first item of each tiled sequence */
    const int32_t *tiled;    /* [n_tiled] the sequences */
    int n_tiled;
    bool avx512;
    _Atomic int oom;
} tile_args;

/* One tile: rows r = (query token, head) of tokens [qt0, qt1) of sequence b. */
typedef struct {
    int R, Dh;
    const float *qrow[BQ * 64]; /* filled for r < R */
    float *orow[BQ * 64];
    int slot[BQ * 64];
    float *m, *l, *o; /* [R], [R], [R][Dh] */
    float *kt;        /* [Dh][BK] keys of the step, transposed */
    const float *vrow[BK];
} tile;

static void tile_scalar(tile *t, int kb, int nk, float scale) {
    const int Dh = t->Dh;
    for (int r = 0; r < t->R; r++) {
        if (kb > t->slot[r])
            continue; /* every key of the step lies after this query */
        float s[BK], mx = -INFINITY;
        for (int k = 0; k < nk; k++) {
            float d = 0.f;
            for (int e = 0; e < Dh; e++)
                d += t->qrow[r][e] * t->kt[e * BK + k];
            s[k] = kb + k <= t->slot[r] ? d * scale : -INFINITY;
            mx = fmaxf(mx, s[k]);
        }
        const float mn = fmaxf(t->m[r], mx), corr = expf(t->m[r] - mn);
        float sum = 0.f;
        for (int k = 0; k < nk; k++) {
            s[k] = expf(s[k] - mn);
            sum += s[k];
        }
        t->l[r] = t->l[r] * corr + sum;
        t->m[r] = mn;
        float *o = t->o + (size_t)r * Dh;
        for (int e = 0; e < Dh; e++) {
            float acc = o[e] * corr;
            for (int k = 0; k < nk; k++)
                acc += s[k] * t->vrow[k][e];
            o[e] = acc;
        }
    }
}

#ifdef HAVE_X86
/* e^x for x <= 0 (-inf gives 0): Cody-Waite reduction by ln 2, degree-7 Taylor polynomial on
 * |r| <= ln2 / 2 (truncation error below 2e-9), 2^n by scalef. */
AVX512 static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.f)); /* e^-104 is 0 in f32 after scalef */
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.f / 5040.f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
}

/* The scores of 4 rows against the step's 16 keys: 4 independent FMA chains over Dh. */
AVX512 static inline void scores4(const tile *t, int r0, __m512 s[4]) {
    const int Dh = t->Dh;
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    const float *q0 = t->qrow[r0], *q1 = t->qrow[r0 + 1], *q2 = t->qrow[r0 + 2], *q3 = t->qrow[r0 + 3];
    for (int e = 0; e < Dh; e++) {
        const __m512 k = _mm512_load_ps(t->kt + (size_t)e * BK);
        a[0] = _mm512_fmadd_ps(_mm512_set1_ps(q0[e]), k, a[0]);
        a[1] = _mm512_fmadd_ps(_mm512_set1_ps(q1[e]), k, a[1]);
        a[2] = _mm512_fmadd_ps(_mm512_set1_ps(q2[e]), k, a[2]);
        a[3] = _mm512_fmadd_ps(_mm512_set1_ps(q3[e]), k, a[3]);
    }
    for (int j = 0; j < 4; j++)
        s[j] = a[j];
}

AVX512 static void tile_avx512(tile *t, int kb, int nk, float scale) {
    const int Dh = t->Dh, nc = Dh / 16;
    const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int r0 = 0; r0 < t->R; r0 += 4) {
        /* rows past R: repeat the last one (computed, not stored) */
        const tile *tt = t;
        __m512 s[4];
        if (r0 + 4 <= t->R) {
            scores4(tt, r0, s);
        } else {
            tile tmp;
            tmp.Dh = Dh, tmp.kt = t->kt;
            for (int j = 0; j < 4; j++)
                tmp.qrow[j] = t->qrow[r0 + j < t->R ? r0 + j : t->R - 1];
            scores4(&tmp, 0, s);
        }
        for (int j = 0; j < 4 && r0 + j < t->R; j++) {
            const int r = r0 + j;
            const int lim = t->slot[r] - kb + 1; /* keys k < lim are visible */
            if (lim <= 0)
                continue;
            const __mmask16 vis = _mm512_cmplt_epi32_mask(lane, _mm512_set1_epi32(lim < nk ? lim : nk));
            const __m512 sc = _mm512_mask_mul_ps(ninf, vis, s[j], vscale);
            const float mx = _mm512_reduce_max_ps(sc);
            const float mn = fmaxf(t->m[r], mx);
            const float corr = expf(t->m[r] - mn);
            const __m512 p = exp512(_mm512_sub_ps(sc, _mm512_set1_ps(mn)));
            t->l[r] = t->l[r] * corr + _mm512_reduce_add_ps(p);
            t->m[r] = mn;
            float pk[16] __attribute__((aligned(64)));
            _mm512_store_ps(pk, p);
            float *o = t->o + (size_t)r * Dh;
            const __m512 vc = _mm512_set1_ps(corr);
            for (int c = 0; c < nc; c += 4) {
                /* four 16-lane chunks of the output row at once, in registers over the keys */
                const int w = nc - c < 4 ? nc - c : 4;
                __m512 acc[4];
                for (int u = 0; u < w; u++)
                    acc[u] = _mm512_mul_ps(_mm512_loadu_ps(o + (c + u) * 16), vc);
                for (int k = 0; k < nk; k++) {
                    const __m512 pv = _mm512_set1_ps(pk[k]);
                    for (int u = 0; u < w; u++)
                        acc[u] = _mm512_fmadd_ps(pv, _mm512_loadu_ps(t->vrow[k] + (c + u) * 16), acc[u]);
                }
                for (int u = 0; u < w; u++)
                    _mm512_storeu_ps(o + (c + u) * 16, acc[u]);
            }
        }
    }
}
#endif

static inline const float *kv_row(const tile_args *a, const int32_t *pages, int s, int which, int kvh) {
    const int ps = a->ab->page_size;
    return seer_cpu_kv_row(a->kv, a->g, pages[s / ps], a->layer, which, s % ps) +
           (size_t)kvh * a->ab->head_dim;
}

/* Items: (tiled sequence, KV head, query block), numbered through item_seq. */
static void tile_items(void *ctx, int64_t i0, int64_t i1) {
    tile_args *a = ctx;
    const seer_attn_batch *ab = a->ab;
    const int H = ab->n_heads, Hkv = ab->n_kv_heads, Dh = ab->head_dim, group = H / Hkv;
    tile *t = malloc(sizeof *t);
    float *buf = malloc(sizeof(float) * ((size_t)BQ * group * (Dh + 2) + (size_t)Dh * BK + 16));
    if (!t || !buf) {
        atomic_store(&a->oom, 1);
        free(t), free(buf);
        return;
    }
    t->Dh = Dh;
    /* kt first: 64-byte aligned for the vector loads */
    t->kt = (float *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    t->m = t->kt + (size_t)Dh * BK;
    t->l = t->m + BQ * group;
    t->o = t->l + BQ * group;
    for (int64_t it = i0; it < i1; it++) {
        int si = 0;
        while (a->item_seq[si + 1] <= it)
            si++;
        const int b = a->tiled[si], rel = (int)(it - a->item_seq[si]);
        const int kvh = rel % Hkv, qb = rel / Hkv;
        const int off = ab->seq_tok_off[b], n = ab->seq_tok_off[b + 1] - off, len0 = ab->seq_len0[b];
        const int qt0 = qb * BQ, qt1 = qt0 + BQ < n ? qt0 + BQ : n;
        const int32_t *pages = ab->seq_pages + (size_t)b * ab->max_pages;
        t->R = (qt1 - qt0) * group;
        for (int r = 0; r < t->R; r++) {
            const int qi = qt0 + r / group, hq = r % group, tok = ab->seq_toks[off + qi];
            t->qrow[r] = a->q + ((size_t)tok * H + (size_t)kvh * group + hq) * Dh;
            t->orow[r] = a->out + ((size_t)tok * H + (size_t)kvh * group + hq) * Dh;
            t->slot[r] = len0 + qi;
            t->m[r] = -INFINITY;
            t->l[r] = 0.f;
        }
        memset(t->o, 0, sizeof(float) * (size_t)t->R * Dh);
        const int kend = len0 + qt1;
        for (int kb = 0; kb < kend; kb += BK) {
            const int nk = kend - kb < BK ? kend - kb : BK;
            for (int k = 0; k < BK; k++) {
                if (k < nk) {
                    const float *kr = kv_row(a, pages, kb + k, 0, kvh);
                    for (int e = 0; e < Dh; e++)
                        t->kt[e * BK + k] = kr[e];
                    t->vrow[k] = kv_row(a, pages, kb + k, 1, kvh);
                } else {
                    for (int e = 0; e < Dh; e++)
                        t->kt[e * BK + k] = 0.f;
                }
            }
#ifdef HAVE_X86
            if (a->avx512)
                tile_avx512(t, kb, nk, ab->scale);
            else
#endif
                tile_scalar(t, kb, nk, ab->scale);
        }
        for (int r = 0; r < t->R; r++) {
            const float inv = 1.f / t->l[r], *o = t->o + (size_t)r * Dh;
            for (int e = 0; e < Dh; e++)
                t->orow[r][e] = o[e] * inv;
        }
    }
    free(t);
    free(buf);
}

seer_status seer_cpu_attention_tiles(seer_backend *be, float *out, const float *q, const void *kv,
                                     const seer_kv_geom *g, int layer, const seer_attn_batch *ab,
                                     const uint8_t *tiled) {
    const seer_cpu *c = be->impl;
    int32_t *seqs = malloc(sizeof(int32_t) * (size_t)ab->n_seq);
    int32_t *first = malloc(sizeof(int32_t) * ((size_t)ab->n_seq + 1));
    if (!seqs || !first) {
        free(seqs), free(first);
        return seer_err(SEER_ERR_OOM, "attention: out of memory");
    }
    int nt = 0;
    first[0] = 0;
    for (int b = 0; b < ab->n_seq; b++)
        if (tiled[b]) {
            const int n = ab->seq_tok_off[b + 1] - ab->seq_tok_off[b];
            seqs[nt] = b;
            first[nt + 1] = first[nt] + (n + BQ - 1) / BQ * ab->n_kv_heads;
            nt++;
        }
    bool wide = false;
#ifdef HAVE_X86
    wide = (c->isa_cap == 0 || c->isa_cap >= SEER_CPU_ISA_AVX512) && ab->head_dim % 16 == 0 &&
           __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#endif
    tile_args a = {out, q, kv, g, layer, ab, first, seqs, nt, wide, 0};
    if (c->n_threads > 1 && first[nt] > 1)
        seer_cpu_pool_run(c->pool, first[nt], 1, tile_items, &a);
    else if (first[nt] > 0)
        tile_items(&a, 0, first[nt]);
    free(seqs), free(first);
    if (atomic_load(&a.oom))
        return seer_err(SEER_ERR_OOM, "attention: out of memory for a tile");
    return SEER_OK;
}
