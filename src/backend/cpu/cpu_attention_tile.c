/*
 * cpu_attention_tile.c: attention for long runs of new tokens (a prompt), in tiles: a block
 * of BQ queries (times the query heads that share a KV head) goes over the keys in steps of
 * BK with an online softmax (the running max and sum of FlashAttention, Dao et al. 2022), so
 * each key and value row is read once per query block instead of once per query.
 *
 * Layout: the block's rows r = (query token, head) lie in vector lanes. The queries are
 * transposed once per block (qt [Dh][RP]) and the step's scores kept as p [BK][RP], so the
 * score product broadcasts key elements straight from the cache (no transposed copy of the
 * keys), and the max, exponent and sum of the softmax run down the keys lane by lane, with
 * no reduction across lanes and no scalar exponent. The value product runs in the other
 * layout, o [RP][Dh], broadcasting each row's probability against value rows. Scores are
 * kept in log2 units (the queries are scaled by scale * log2 e) so the exponent is a 2^x.
 *
 * Not the reference: the f32 sums run in another order than cpu_attention.c's (tests check
 * it against that reference within a stated tolerance), so it takes only prompt tokens
 * (seer_attn_batch.seq_prompt: a sequence's leading new tokens, causal, full view), never a
 * decode or verification step. But a row's output depends only on its own slot and its
 * queries: the key steps are aligned to slot 0, and the steps past the row's slot (up to
 * the last slot of its query block) are masked for it, which adds exact zeros and rescales
 * by exactly 1. So a prompt token gets the same bits whatever call it is in and however its
 * prompt is cut into calls (the backend's prompt_cuts_free; test_cpu_backend checks it), never
 * depending on the thread that runs it.
 *
 * Three builds of the same step: AVX-512 (head dims that are multiples of 16), AVX2 with FMA
 * (multiples of 8), both chosen at run time under the backend's isa_cap, and plain C written
 * in 8-lane loops that compilers vectorise for any head dim.
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
#define AVX2 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))
#endif

#define BQ 16     /* query tokens per item */
#define BK 32     /* keys per step */
#define MAX_DH 256
#define MAX_GROUP 64
#define RP_MAX (BQ * MAX_GROUP)

/* 2^x = 2^n * 2^r, n = round(x), |r| <= 1/2: Taylor coefficients of e^(r ln 2) to degree 7
 * (truncation below 6e-9); x is clamped at -126 so that 2^n stays a normal number (the
 * softmax's exponents are <= 0; masked keys are zeroed separately). */
#define EXP2_C1 0.6931471805599453f
#define EXP2_C2 0.2402265069591007f
#define EXP2_C3 0.05550410866482158f
#define EXP2_C4 0.009618129107628477f
#define EXP2_C5 0.0013333558146428443f
#define EXP2_C6 0.00015403530393381608f
#define EXP2_C7 1.525273380405984e-05f

int seer_cpu_attn_tileable(const seer_attn_batch *ab, int b) {
    const int off = ab->seq_tok_off[b], n = ab->seq_tok_off[b + 1] - off;
    const int m = ab->seq_prompt ? ab->seq_prompt[b] : (n > SEER_INVARIANT_NEW_TOKENS && !ab->mask ? n : 0);
    if (m <= 0 || m > n || (ab->seq_view && ab->seq_view[b]) || ab->window > 0 || ab->softcap > 0 || ab->head_dim > MAX_DH ||
        ab->n_heads / ab->n_kv_heads > MAX_GROUP)
        return 0;
    for (int k = 0; k < m; k++)
        if (ab->tok_slot[ab->seq_toks[off + k]] != ab->seq_len0[b] + k)
            return 0;
    return m;
}

enum { TILE_C, TILE_AVX2, TILE_AVX512 };

typedef struct {
    float *out;
    const float *q;
    const void *kv;
    const seer_kv_geom *g;
    int layer;
    const seer_attn_batch *ab;
    const int32_t *item_seq; /* [n_tiled + 1]: first item of each tiled sequence */
    const int32_t *tiled;    /* [n_tiled] the sequences */
    const int32_t *n_rows;   /* [n_tiled] their leading new tokens in tiles */
    int n_tiled, path;       /* TILE_* */
    _Atomic int oom;
} tile_args;

/* One item's state: rows r = (query token, head) of one query block and one KV head; RP is R
 * rounded up to 16 lanes (rows past R have zero queries and are never stored). */
typedef struct {
    int R, RP, Dh, kb;    /* kb: the step's first key slot */
    float *qt;            /* [Dh][RP] queries, transposed, times scale * log2 e */
    float *o;             /* [RP][Dh] unnormalised outputs */
    float *m, *l, *corr;  /* [RP] running max (log2 units), running sum, the step's rescale */
    int32_t *slot;        /* [RP] the row's slot: keys after it are masked */
    float *p;             /* [BK][RP] the step's scores, then probabilities */
    const float *krow[BK], *vrow[BK]; /* past the item's last key: a zero row */
} tile;

/* ---- plain C: 8 lanes in loops ------------------------------------------------------- */

static inline float exp2_c(float x) {
    x = x < -126.f ? -126.f : x;
    const float n = (x + 12582912.f) - 12582912.f; /* round to nearest: 1.5 * 2^23 */
    const float r = x - n;
    float p = EXP2_C7;
    p = p * r + EXP2_C6;
    p = p * r + EXP2_C5;
    p = p * r + EXP2_C4;
    p = p * r + EXP2_C3;
    p = p * r + EXP2_C2;
    p = p * r + EXP2_C1;
    p = p * r + 1.f;
    union {
        int32_t i;
        float f;
    } u = {.i = ((int32_t)n + 127) << 23};
    return p * u.f;
}

/* GCC's loop vectoriser would take the head-dim loop below with gathers down qt's columns;
 * the 8-lane bodies are what should become vectors (its straight-line vectoriser does that). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-vectorize")))
#endif
static void step_c(tile *t, bool diag) {
    const int RP = t->RP, Dh = t->Dh;
    /* scores: 8 rows x 4 keys per pass over the head dim */
    for (int r0 = 0; r0 < RP; r0 += 8)
        for (int k0 = 0; k0 < BK; k0 += 4) {
            float acc[4][8] = {{0}};
            const float *k0r = t->krow[k0], *k1r = t->krow[k0 + 1], *k2r = t->krow[k0 + 2],
                        *k3r = t->krow[k0 + 3];
            for (int e = 0; e < Dh; e++) {
                const float *qv = t->qt + (size_t)e * RP + r0;
                const float b0 = k0r[e], b1 = k1r[e], b2 = k2r[e], b3 = k3r[e];
                for (int l = 0; l < 8; l++) {
                    acc[0][l] += b0 * qv[l];
                    acc[1][l] += b1 * qv[l];
                    acc[2][l] += b2 * qv[l];
                    acc[3][l] += b3 * qv[l];
                }
            }
            for (int j = 0; j < 4; j++)
                memcpy(t->p + (size_t)(k0 + j) * RP + r0, acc[j], sizeof acc[j]);
        }
    /* online softmax down the keys, lane by lane */
    for (int r0 = 0; r0 < RP; r0 += 8) {
        float mx[8], sum[8] = {0};
        for (int l = 0; l < 8; l++)
            mx[l] = t->m[r0 + l];
        for (int k = 0; k < BK; k++) {
            float *s = t->p + (size_t)k * RP + r0;
            for (int l = 0; l < 8; l++) {
                if (diag && t->kb + k > t->slot[r0 + l])
                    s[l] = -INFINITY;
                mx[l] = s[l] > mx[l] ? s[l] : mx[l];
            }
        }
        for (int k = 0; k < BK; k++) {
            float *s = t->p + (size_t)k * RP + r0;
            for (int l = 0; l < 8; l++) {
                float e = exp2_c(s[l] - mx[l]);
                if (diag && t->kb + k > t->slot[r0 + l])
                    e = 0.f;
                s[l] = e;
                sum[l] += e;
            }
        }
        for (int l = 0; l < 8; l++) {
            const float c = exp2_c(t->m[r0 + l] - mx[l]);
            t->corr[r0 + l] = c;
            t->l[r0 + l] = t->l[r0 + l] * c + sum[l];
            t->m[r0 + l] = mx[l];
        }
    }
    /* values: 4 rows x 8 output elements per pass over the keys */
    for (int r0 = 0; r0 < RP; r0 += 4) {
        int e0 = 0;
        for (; e0 + 8 <= Dh; e0 += 8) {
            float acc[4][8];
            for (int i = 0; i < 4; i++)
                for (int l = 0; l < 8; l++)
                    acc[i][l] = t->o[(size_t)(r0 + i) * Dh + e0 + l] * t->corr[r0 + i];
            for (int k = 0; k < BK; k++) {
                const float *v = t->vrow[k] + e0, *pk = t->p + (size_t)k * RP + r0;
                for (int i = 0; i < 4; i++)
                    for (int l = 0; l < 8; l++)
                        acc[i][l] += pk[i] * v[l];
            }
            for (int i = 0; i < 4; i++)
                memcpy(t->o + (size_t)(r0 + i) * Dh + e0, acc[i], sizeof acc[i]);
        }
        for (int i = 0; i < 4 && e0 < Dh; i++) { /* Dh % 8 */
            float *o = t->o + (size_t)(r0 + i) * Dh;
            for (int e = e0; e < Dh; e++) {
                float acc = o[e] * t->corr[r0 + i];
                for (int k = 0; k < BK; k++)
                    acc += t->p[(size_t)k * RP + r0 + i] * t->vrow[k][e];
                o[e] = acc;
            }
        }
    }
}

#ifdef HAVE_X86
/* ---- AVX2: 8 lanes in a register ----------------------------------------------------- */

AVX2 INLINE __m256 exp2_256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-126.f));
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(EXP2_C7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP2_C6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP2_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP2_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP2_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP2_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP2_C1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Scores of NV x 8 rows against 4 keys: 4 NV accumulators over the head dim. */
AVX2 INLINE void qk256(tile *t, int r0, int NV) {
    const int RP = t->RP, Dh = t->Dh;
    for (int k0 = 0; k0 < BK; k0 += 4) {
        __m256 acc[4][2];
        for (int j = 0; j < 4; j++)
            for (int u = 0; u < NV; u++)
                acc[j][u] = _mm256_setzero_ps();
        const float *kr[4] = {t->krow[k0], t->krow[k0 + 1], t->krow[k0 + 2], t->krow[k0 + 3]};
        for (int e = 0; e < Dh; e++) {
            __m256 qv[2];
            for (int u = 0; u < NV; u++)
                qv[u] = _mm256_load_ps(t->qt + (size_t)e * RP + r0 + 8 * u);
            for (int j = 0; j < 4; j++) {
                const __m256 b = _mm256_broadcast_ss(kr[j] + e);
                for (int u = 0; u < NV; u++)
                    acc[j][u] = _mm256_fmadd_ps(b, qv[u], acc[j][u]);
            }
        }
        for (int j = 0; j < 4; j++)
            for (int u = 0; u < NV; u++)
                _mm256_store_ps(t->p + (size_t)(k0 + j) * RP + r0 + 8 * u, acc[j][u]);
    }
}

/* o rows r0..r0+3, NV x 8 elements from e0, rescaled and then accumulated over the step. */
AVX2 INLINE void pv256(tile *t, int r0, int e0, int NV) {
    const int RP = t->RP, Dh = t->Dh;
    __m256 acc[4][2];
    for (int i = 0; i < 4; i++) {
        const __m256 c = _mm256_broadcast_ss(t->corr + r0 + i);
        for (int u = 0; u < NV; u++)
            acc[i][u] = _mm256_mul_ps(_mm256_loadu_ps(t->o + (size_t)(r0 + i) * Dh + e0 + 8 * u), c);
    }
    for (int k = 0; k < BK; k++) {
        __m256 v[2];
        for (int u = 0; u < NV; u++)
            v[u] = _mm256_loadu_ps(t->vrow[k] + e0 + 8 * u);
        const float *pk = t->p + (size_t)k * RP + r0;
        for (int i = 0; i < 4; i++) {
            const __m256 b = _mm256_broadcast_ss(pk + i);
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm256_fmadd_ps(b, v[u], acc[i][u]);
        }
    }
    for (int i = 0; i < 4; i++)
        for (int u = 0; u < NV; u++)
            _mm256_storeu_ps(t->o + (size_t)(r0 + i) * Dh + e0 + 8 * u, acc[i][u]);
}

AVX2 static void step_avx2(tile *t, bool diag) {
    const int RP = t->RP, Dh = t->Dh;
    for (int r0 = 0; r0 < RP; r0 += 16)
        qk256(t, r0, 2);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int r0 = 0; r0 < RP; r0 += 8) {
        const __m256i sl = _mm256_load_si256((const __m256i *)(t->slot + r0));
        const __m256 m0 = _mm256_load_ps(t->m + r0);
        __m256 mx = m0, sum = _mm256_setzero_ps();
        for (int k = 0; k < BK; k++) {
            float *s = t->p + (size_t)k * RP + r0;
            __m256 v = _mm256_load_ps(s);
            if (diag) {
                const __m256 drop = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(t->kb + k), sl));
                v = _mm256_blendv_ps(v, ninf, drop);
                _mm256_store_ps(s, v);
            }
            mx = _mm256_max_ps(mx, v);
        }
        for (int k = 0; k < BK; k++) {
            float *s = t->p + (size_t)k * RP + r0;
            __m256 e = exp2_256(_mm256_sub_ps(_mm256_load_ps(s), mx));
            if (diag)
                e = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(t->kb + k), sl)), e);
            _mm256_store_ps(s, e);
            sum = _mm256_add_ps(sum, e);
        }
        const __m256 c = exp2_256(_mm256_sub_ps(m0, mx));
        _mm256_store_ps(t->corr + r0, c);
        _mm256_store_ps(t->l + r0, _mm256_fmadd_ps(_mm256_load_ps(t->l + r0), c, sum));
        _mm256_store_ps(t->m + r0, mx);
    }
    for (int r0 = 0; r0 < RP; r0 += 4) {
        int e0 = 0;
        for (; e0 + 16 <= Dh; e0 += 16)
            pv256(t, r0, e0, 2);
        if (e0 < Dh)
            pv256(t, r0, e0, 1);
    }
}

/* ---- AVX-512: 16 lanes in a register ------------------------------------------------- */

AVX512 INLINE __m512 exp2_512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-126.f));
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(EXP2_C7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP2_C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP2_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP2_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP2_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP2_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP2_C1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
}

/* Scores of NV x 16 rows against 8 keys: 8 NV accumulators over the head dim. */
AVX512 INLINE void qk512(tile *t, int r0, int NV) {
    const int RP = t->RP, Dh = t->Dh;
    for (int k0 = 0; k0 < BK; k0 += 8) {
        __m512 acc[8][3];
        for (int j = 0; j < 8; j++)
            for (int u = 0; u < NV; u++)
                acc[j][u] = _mm512_setzero_ps();
        const float *const *kr = t->krow + k0;
        for (int e = 0; e < Dh; e++) {
            __m512 qv[3];
            for (int u = 0; u < NV; u++)
                qv[u] = _mm512_load_ps(t->qt + (size_t)e * RP + r0 + 16 * u);
            for (int j = 0; j < 8; j++) {
                const __m512 b = _mm512_set1_ps(kr[j][e]);
                for (int u = 0; u < NV; u++)
                    acc[j][u] = _mm512_fmadd_ps(b, qv[u], acc[j][u]);
            }
        }
        for (int j = 0; j < 8; j++)
            for (int u = 0; u < NV; u++)
                _mm512_store_ps(t->p + (size_t)(k0 + j) * RP + r0 + 16 * u, acc[j][u]);
    }
}

AVX512 INLINE void pv512(tile *t, int r0, int e0, int NV) {
    const int RP = t->RP, Dh = t->Dh;
    __m512 acc[4][4];
    for (int i = 0; i < 4; i++) {
        const __m512 c = _mm512_set1_ps(t->corr[r0 + i]);
        for (int u = 0; u < NV; u++)
            acc[i][u] = _mm512_mul_ps(_mm512_loadu_ps(t->o + (size_t)(r0 + i) * Dh + e0 + 16 * u), c);
    }
    for (int k = 0; k < BK; k++) {
        __m512 v[4];
        for (int u = 0; u < NV; u++)
            v[u] = _mm512_loadu_ps(t->vrow[k] + e0 + 16 * u);
        const float *pk = t->p + (size_t)k * RP + r0;
        for (int i = 0; i < 4; i++) {
            const __m512 b = _mm512_set1_ps(pk[i]);
            for (int u = 0; u < NV; u++)
                acc[i][u] = _mm512_fmadd_ps(b, v[u], acc[i][u]);
        }
    }
    for (int i = 0; i < 4; i++)
        for (int u = 0; u < NV; u++)
            _mm512_storeu_ps(t->o + (size_t)(r0 + i) * Dh + e0 + 16 * u, acc[i][u]);
}

AVX512 static void step_avx512(tile *t, bool diag) {
    const int RP = t->RP, Dh = t->Dh;
    int r0 = 0;
    for (; r0 + 48 <= RP; r0 += 48)
        qk512(t, r0, 3);
    if (RP - r0 == 32)
        qk512(t, r0, 2);
    else if (RP - r0 == 16)
        qk512(t, r0, 1);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (r0 = 0; r0 < RP; r0 += 16) {
        const __m512i sl = _mm512_load_si512(t->slot + r0);
        const __m512 m0 = _mm512_load_ps(t->m + r0);
        __m512 mx = m0, sum = _mm512_setzero_ps();
        for (int k = 0; k < BK; k++) {
            float *s = t->p + (size_t)k * RP + r0;
            __m512 v = _mm512_load_ps(s);
            if (diag) {
                v = _mm512_mask_mov_ps(ninf, _mm512_cmple_epi32_mask(_mm512_set1_epi32(t->kb + k), sl), v);
                _mm512_store_ps(s, v);
            }
            mx = _mm512_max_ps(mx, v);
        }
        for (int k = 0; k < BK; k++) {
            float *s = t->p + (size_t)k * RP + r0;
            __m512 e = exp2_512(_mm512_sub_ps(_mm512_load_ps(s), mx));
            if (diag)
                e = _mm512_maskz_mov_ps(_mm512_cmple_epi32_mask(_mm512_set1_epi32(t->kb + k), sl), e);
            _mm512_store_ps(s, e);
            sum = _mm512_add_ps(sum, e);
        }
        const __m512 c = exp2_512(_mm512_sub_ps(m0, mx));
        _mm512_store_ps(t->corr + r0, c);
        _mm512_store_ps(t->l + r0, _mm512_fmadd_ps(_mm512_load_ps(t->l + r0), c, sum));
        _mm512_store_ps(t->m + r0, mx);
    }
    for (r0 = 0; r0 < RP; r0 += 4) {
        int e0 = 0;
        for (; e0 + 64 <= Dh; e0 += 64)
            pv512(t, r0, e0, 4);
        switch ((Dh - e0) / 16) {
        case 3: pv512(t, r0, e0, 3); break;
        case 2: pv512(t, r0, e0, 2); break;
        case 1: pv512(t, r0, e0, 1); break;
        default: break;
        }
    }
}
#endif

static inline const float *kv_row(const tile_args *a, const int32_t *pages, int s, int which, int kvh) {
    const int ps = a->ab->page_size;
    return seer_cpu_kv_row(a->kv, a->g, pages[s / ps], a->layer, which, s % ps) +
           (size_t)kvh * a->ab->head_dim;
}

/* Items: (tiled sequence, query block, KV head), the last query blocks (the most keys) first
 * so that the threads that take them early finish together. */
static void tile_items(void *ctx, int64_t i0, int64_t i1) {
    tile_args *a = ctx;
    const seer_attn_batch *ab = a->ab;
    const int H = ab->n_heads, Hkv = ab->n_kv_heads, Dh = ab->head_dim, group = H / Hkv;
    const int RP = (BQ * group + 15) / 16 * 16;
    const float qscale = ab->scale * 1.44269504088896341f; /* log2 e */
    tile t = {.RP = RP, .Dh = Dh};
    /* every array a multiple of 64 bytes, for the aligned vector loads */
    const size_t nf = (size_t)Dh * RP * 2 + (size_t)RP * 4 + (size_t)BK * RP + MAX_DH;
    float *buf = aligned_alloc(64, sizeof(float) * nf);
    if (!buf) {
        atomic_store(&a->oom, 1);
        return;
    }
    t.qt = buf;
    t.o = t.qt + (size_t)Dh * RP;
    t.m = t.o + (size_t)Dh * RP;
    t.l = t.m + RP;
    t.corr = t.l + RP;
    t.slot = (int32_t *)(t.corr + RP);
    t.p = (float *)(t.slot + RP);
    float *zero = t.p + (size_t)BK * RP;
    memset(zero, 0, sizeof(float) * MAX_DH);
    for (int64_t it = i0; it < i1; it++) {
        int si = 0;
        while (a->item_seq[si + 1] <= it)
            si++;
        const int b = a->tiled[si], rel = (int)(it - a->item_seq[si]);
        const int off = ab->seq_tok_off[b], n = a->n_rows[si], len0 = ab->seq_len0[b];
        const int nqb = (n + BQ - 1) / BQ, kvh = rel % Hkv, qb = nqb - 1 - rel / Hkv;
        const int qt0 = qb * BQ, qt1 = qt0 + BQ < n ? qt0 + BQ : n;
        const int32_t *pages = ab->seq_pages + (size_t)b * ab->max_pages;
        t.R = (qt1 - qt0) * group;
        for (int r = 0; r < RP; r++) {
            const int rr = r < t.R ? r : t.R - 1, qi = qt0 + rr / group, hq = rr % group;
            const float *qr = a->q + ((size_t)ab->seq_toks[off + qi] * H + (size_t)kvh * group + hq) * Dh;
            for (int e = 0; e < Dh; e++)
                t.qt[(size_t)e * RP + r] = r < t.R ? qr[e] * qscale : 0.f;
            t.slot[r] = len0 + qi;
            t.m[r] = -INFINITY;
            t.l[r] = 0.f;
        }
        memset(t.o, 0, sizeof(float) * (size_t)RP * Dh);
        const int kend = len0 + qt1;
        for (t.kb = 0; t.kb < kend; t.kb += BK) {
            for (int k = 0; k < BK; k++) {
                const bool in = t.kb + k < kend;
                t.krow[k] = in ? kv_row(a, pages, t.kb + k, 0, kvh) : zero;
                t.vrow[k] = in ? kv_row(a, pages, t.kb + k, 1, kvh) : zero;
            }
            /* the step reaches past the block's first slot: some keys are masked for some rows */
            const bool diag = t.kb + BK - 1 > len0 + qt0;
            switch (a->path) {
#ifdef HAVE_X86
            case TILE_AVX512: step_avx512(&t, diag); break;
            case TILE_AVX2: step_avx2(&t, diag); break;
#endif
            default: step_c(&t, diag); break;
            }
        }
        for (int r = 0; r < t.R; r++) {
            const int qi = qt0 + r / group, hq = r % group;
            float *dst = a->out + ((size_t)ab->seq_toks[off + qi] * H + (size_t)kvh * group + hq) * Dh;
            const float inv = 1.f / t.l[r], *o = t.o + (size_t)r * Dh;
            for (int e = 0; e < Dh; e++)
                dst[e] = o[e] * inv;
        }
    }
    free(buf);
}

seer_status seer_cpu_attention_tiles(seer_backend *be, float *out, const float *q, const void *kv,
                                     const seer_kv_geom *g, int layer, const seer_attn_batch *ab,
                                     const int32_t *tiled) {
    const seer_cpu *c = be->impl;
    int32_t *seqs = malloc(sizeof(int32_t) * 2 * (size_t)ab->n_seq), *rows = seqs + ab->n_seq;
    int32_t *first = malloc(sizeof(int32_t) * ((size_t)ab->n_seq + 1));
    if (!seqs || !first) {
        free(seqs), free(first);
        return seer_err(SEER_ERR_OOM, "attention: out of memory");
    }
    int nt = 0;
    first[0] = 0;
    for (int b = 0; b < ab->n_seq; b++)
        if (tiled[b]) {
            seqs[nt] = b;
            rows[nt] = tiled[b];
            first[nt + 1] = first[nt] + (tiled[b] + BQ - 1) / BQ * ab->n_kv_heads;
            nt++;
        }
    int path = TILE_C;
#ifdef HAVE_X86
    const int cap = c->isa_cap ? c->isa_cap : SEER_CPU_ISA_AVX512;
    if (cap >= SEER_CPU_ISA_AVX512 && ab->head_dim % 16 == 0 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512dq"))
        path = TILE_AVX512;
    else if (cap >= SEER_CPU_ISA_AVX2 && ab->head_dim % 8 == 0 && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma"))
        path = TILE_AVX2;
#endif
    tile_args a = {out, q, kv, g, layer, ab, first, seqs, rows, nt, path, 0};
    if (c->n_threads > 1 && first[nt] > 1)
        seer_cpu_pool_run(c->pool, first[nt], 1, tile_items, &a);
    else if (first[nt] > 0)
        tile_items(&a, 0, first[nt]);
    free(seqs), free(first);
    if (atomic_load(&a.oom))
        return seer_err(SEER_ERR_OOM, "attention: out of memory for a tile");
    return SEER_OK;
}
