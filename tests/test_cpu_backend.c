/*
 * test_cpu_backend.c: the CPU backend's own machinery. The thread pool: every item of a job
 * is run exactly once, over many jobs in a row and chunk sizes; the default thread count
 * follows the affinity mask. The matmul on weights kept in their GGUF blocks (cpu_qmatmul.c)
 * against the f32 reference on the same weights dequantised, for every block format it
 * takes, on random blocks (random codes, random finite scales) across shapes.
 *
 * Checked per case: relative L2 error to the reference within QTOL on random x (8-bit
 * activations per group of 32: measured 2.5e-3..7e-3, up to 1.3e-2 for random K-quant blocks), and
 * within XTOL on x that 8 bits represent exactly (which checks the unpacking of every code); each token's row bit-identical to
 * computing that token alone (batch invariance: T from 1 to 70, below and above the widths
 * at which the prefill tiles start and not multiples of their token tile; rows not multiples
 * of 8 or 16); bit-identical for 1 and 3 threads; the scalar, AVX2 and AVX-512 paths
 * bit-identical to each other (those the CPU has); the embedding lookup of a
 * stored table equal to the dequantised row. kv_move_rows against moves made by hand.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include "testutil.h"

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "gguf/gguf.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Random x: 8-bit activations add ~2^-8 relative per element; random K-quant blocks (mins
 * as large as scales, unlike a real model's) cancel more and reach 1.3e-2. */
#define QTOL 2e-2
/* x exactly representable in 8 bits per group: only the f32 summation order differs. */
#define XTOL 1e-5

typedef struct {
    ggml_type type;
    int f16_off[2]; /* offsets of the block's f16 scale fields (-1: none) */
} fmt;

static const fmt FMTS[] = {
    {GGML_TYPE_Q4_0, {0, -1}},  {GGML_TYPE_Q4_1, {0, 2}}, {GGML_TYPE_Q5_0, {0, -1}},
    {GGML_TYPE_Q5_1, {0, 2}},   {GGML_TYPE_Q8_0, {0, -1}}, {GGML_TYPE_Q4_K, {0, 2}},
    {GGML_TYPE_Q5_K, {0, 2}},   {GGML_TYPE_Q6_K, {208, -1}},
};

/* Random blocks: random bytes, with each f16 scale replaced by a finite value in
 * [2^-10, 2^-6) so that every weight is finite and of a plausible size. */
static uint8_t *rand_blocks(const fmt *f, int rows, int cols, uint64_t *rng, size_t *bytes) {
    const int be = seer_ggml_type_block_elems(f->type), bb = seer_ggml_type_block_bytes(f->type);
    const size_t nb = (size_t)rows * (cols / be);
    uint8_t *p = malloc(nb * bb);
    for (size_t i = 0; i < nb * bb; i++)
        p[i] = (uint8_t)tu_rand_u64(rng);
    for (size_t b = 0; b < nb; b++)
        for (int k = 0; k < 2; k++)
            if (f->f16_off[k] >= 0) {
                float v = ldexpf(1.f + (float)(tu_rand_u64(rng) % 1024) / 1024.f,
                                 -10 + (int)(tu_rand_u64(rng) % 4));
                uint16_t h = seer_f32_to_f16(v);
                memcpy(p + b * bb + f->f16_off[k], &h, 2);
            }
    *bytes = nb * bb;
    return p;
}

static gguf_tensor tensor_of(ggml_type type, int rows, int cols, void *data, size_t bytes) {
    gguf_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.type = type;
    t.ne[0] = (uint64_t)cols;
    t.ne[1] = (uint64_t)rows;
    t.ne[2] = t.ne[3] = 1;
    t.n_dims = 2;
    t.data = data;
    t.nbytes = bytes;
    return t;
}

static float *rand_x(size_t n, uint64_t *rng) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(tu_rand_u64(rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    return x;
}

/* x whose groups of 32 quantise exactly: k * 2^-7 with one |k| = 127 per group. */
static float *exact_x(size_t n, uint64_t *rng) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        int k = (int)(tu_rand_u64(rng) % 255) - 127;
        if (i % 32 == 5)
            k = tu_rand_u64(rng) & 1 ? 127 : -127;
        x[i] = ldexpf((float)k, -7);
    }
    return x;
}

static float *run(seer_backend *be, const seer_weight *w, const float *x, const float *bias, int T) {
    float *y = malloc(sizeof(float) * (size_t)T * w->rows);
    for (size_t i = 0; i < (size_t)T * w->rows; i++)
        y[i] = NAN;
    ASSERT_OK(be->ops->matmul(be, y, x, w, bias, T));
    return y;
}

static void test_qmatmul(void **state) {
    (void)state;
    seer_backend *ref, *q1, *q3;
    ASSERT_OK(seer_backend_cpu_init(2, &ref));
    ASSERT_OK(seer_backend_cpu_init(1, &q1));
    ASSERT_OK(seer_backend_cpu_init(3, &q3));
    static const struct {
        int T, rows, cols;
    } shapes[] = {{1, 67, 256}, {5, 130, 512}, {70, 96, 768}, {3, 48, 256}, {9, 200, 512}, {17, 35, 1024}};
    uint64_t rng = 42;
    for (size_t k = 0; k < sizeof FMTS / sizeof *FMTS; k++) {
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const int T = shapes[s].T, R = shapes[s].rows, C = shapes[s].cols;
            size_t bytes;
            uint8_t *blk = rand_blocks(&FMTS[k], R, C, &rng, &bytes);
            gguf_tensor t = tensor_of(FMTS[k].type, R, C, blk, bytes);
            seer_weight wr, w1, w3;
            ASSERT_OK(ref->ops->weight_load(ref, &t, SEER_WEIGHTS_F32, &wr));
            ASSERT_OK(q1->ops->weight_load(q1, &t, SEER_WEIGHTS_STORED, &w1));
            ASSERT_OK(q3->ops->weight_load(q3, &t, SEER_WEIGHTS_STORED, &w3));
            assert_int_equal(wr.dtype, GGML_TYPE_F32);
            assert_int_equal(w1.dtype, FMTS[k].type);
            assert_ptr_equal(w1.data, blk); /* no copy */
            float *x = rand_x((size_t)T * C, &rng);
            float *bias = s == 1 ? rand_x(R, &rng) : NULL;
            float *yr = run(ref, &wr, x, bias, T);
            float *y1 = run(q1, &w1, x, bias, T);
            float *y3 = run(q3, &w3, x, bias, T);
            double e = tu_rel_err(y1, yr, (size_t)T * R);
            printf("%-5s T=%-3d rows=%-4d cols=%-4d rel_err=%.2e\n", seer_ggml_type_name(FMTS[k].type),
                   T, R, C, e);
            if (!(e <= QTOL))
                fail_msg("%s: rel err %g > %g", seer_ggml_type_name(FMTS[k].type), e, QTOL);
            assert_memory_equal(y1, y3, sizeof(float) * T * R);
            float *xe = exact_x((size_t)T * C, &rng);
            float *yre = run(ref, &wr, xe, bias, T), *y1e = run(q1, &w1, xe, bias, T);
            e = tu_rel_err(y1e, yre, (size_t)T * R);
            if (!(e <= XTOL))
                fail_msg("%s: exact x: rel err %g > %g", seer_ggml_type_name(FMTS[k].type), e, XTOL);
            free(xe), free(yre), free(y1e);
            /* batch invariance: each token alone */
            for (int i = 0; i < T; i++) {
                float *yi = run(q1, &w1, x + (size_t)i * C, bias, 1);
                assert_memory_equal(yi, y1 + (size_t)i * R, sizeof(float) * R);
                free(yi);
            }
            /* the scalar and AVX2 paths (AVX-512 is the default where the CPU has it) */
            for (int isa = SEER_CPU_ISA_SCALAR; isa <= SEER_CPU_ISA_AVX512; isa++) {
                ((seer_cpu *)q1->impl)->isa_cap = isa;
                float *ys = run(q1, &w1, x, bias, T);
                ((seer_cpu *)q1->impl)->isa_cap = 0;
                if (memcmp(ys, y1, sizeof(float) * T * R) != 0)
                    fail_msg("%s T=%d rows=%d: ISA level %d differs from the default path",
                             seer_ggml_type_name(FMTS[k].type), T, R, isa);
                free(ys);
            }
            free(yr), free(y1), free(y3), free(x), free(bias);
            ref->ops->weight_free(ref, &wr);
            q1->ops->weight_free(q1, &w1);
            q3->ops->weight_free(q3, &w3);
            free(blk);
        }
    }
    ref->ops->free(ref);
    q1->ops->free(q1);
    q3->ops->free(q3);
}

/* Activations with a NaN or an infinity (a corrupt or exploding model): the groups that hold
 * one give NaN, as the f32 path does, the others their usual values, and nothing converts a
 * non-finite float to an integer (UBSan checks that in the sanitizer build). */
static void test_qmatmul_nonfinite(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    uint64_t rng = 5;
    const int R = 16, C = 256, T = 3;
    for (size_t k = 0; k < sizeof FMTS / sizeof *FMTS; k++) {
        size_t bytes;
        uint8_t *blk = rand_blocks(&FMTS[k], R, C, &rng, &bytes);
        gguf_tensor t = tensor_of(FMTS[k].type, R, C, blk, bytes);
        seer_weight w;
        ASSERT_OK(be->ops->weight_load(be, &t, SEER_WEIGHTS_STORED, &w));
        float *x = rand_x((size_t)T * C, &rng);
        x[5] = NAN;          /* token 0 */
        x[C + 40] = INFINITY; /* token 1 */
        for (int i = 64; i < 96; i++) /* token 2: a group of zeros and one subnormal */
            x[2 * C + i] = i == 70 ? 1e-40f : 0.f;
        float *y = run(be, &w, x, NULL, T);
        for (int r = 0; r < R; r++) {
            assert_true(isnan(y[r]));
            assert_true(isnan(y[R + r]));
            assert_true(isfinite(y[2 * R + r])); /* token 2 is untouched */
        }
        be->ops->weight_free(be, &w);
        free(x), free(y), free(blk);
    }
    be->ops->free(be);
}

static void test_qembed(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(2, &be));
    uint64_t rng = 9;
    const int V = 50, D = 512;
    for (size_t k = 0; k < sizeof FMTS / sizeof *FMTS; k++) {
        size_t bytes;
        uint8_t *blk = rand_blocks(&FMTS[k], V, D, &rng, &bytes);
        gguf_tensor t = tensor_of(FMTS[k].type, V, D, blk, bytes);
        seer_weight w;
        ASSERT_OK(be->ops->weight_load(be, &t, SEER_WEIGHTS_STORED, &w));
        float *all = malloc(sizeof(float) * V * D), *y = malloc(sizeof(float) * 3 * D);
        ASSERT_OK(seer_gguf_dequant(FMTS[k].type, blk, all, (uint64_t)V * D));
        const int32_t toks[3] = {7, 0, V - 1};
        ASSERT_OK(be->ops->embed(be, y, &w, toks, 3));
        for (int i = 0; i < 3; i++)
            assert_memory_equal(y + (size_t)i * D, all + (size_t)toks[i] * D, sizeof(float) * D);
        be->ops->weight_free(be, &w);
        free(all), free(y), free(blk);
    }
    be->ops->free(be);
}


/* The tiled attention for prompts (cpu_attention_tile.c) against the reference
 * (cpu_attention.c) on random q, k, v: sequences with more than SEER_INVARIANT_NEW_TOKENS new
 * tokens after some cached ones, beside sequences that stay on the reference (those must stay
 * bit-identical). Tolerance ATOL on outputs of size <= 1: the online softmax and the
 * vector exponent sum in another order (measured below 1e-6). */
#define ATOL 2e-5
static void test_attention_tiles(void **state) {
    (void)state;
    static const struct {
        int Hkv, group, Dh, ps, ns, len0[3], ntok[3];
    } cases[] = {
        {3, 3, 64, 16, 1, {0}, {200}},                   /* SmolLM2's heads */
        {2, 7, 64, 16, 2, {37, 0}, {150, 66}},           /* Qwen2.5's, one just over the limit */
        {1, 4, 48, 8, 3, {5, 10, 0}, {100, 3, 65}},      /* a decode and a 65-token chunk beside */
        {2, 2, 40, 16, 1, {20}, {90}},                   /* Dh not a multiple of 16 */
        {1, 1, 16, 1, 1, {130}, {70}},                   /* one-slot pages */
        {2, 6, 128, 16, 1, {300}, {130}},                /* Qwen2.5-1.5B's: Dh 128, rows 96 */
        {2, 7, 80, 16, 1, {3}, {97}},                    /* rows 112 (7 lanes of 16), Dh 5 x 16 */
        {1, 2, 36, 16, 1, {33}, {80}},                   /* Dh % 8 != 0: plain C only */
    };
    uint64_t rng = 77;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int Hkv = cases[c].Hkv, H = Hkv * cases[c].group, Dh = cases[c].Dh, ps = cases[c].ps;
        const int ns = cases[c].ns, kvd = Hkv * Dh;
        int T = 0, maxlen = 0;
        for (int b = 0; b < ns; b++) {
            T += cases[c].ntok[b];
            const int len = cases[c].len0[b] + cases[c].ntok[b];
            maxlen = len > maxlen ? len : maxlen;
        }
        const int mp = (maxlen + ps - 1) / ps;
        seer_kv_geom g = {.n_pages = ns * mp, .page_size = ps, .n_layers = 1, .n_kv_heads = Hkv, .head_dim = Dh};
        seer_backend *be;
        ASSERT_OK(seer_backend_cpu_init(2, &be));
        seer_cpu *cpu = be->impl;
        void *kv;
        int committed;
        ASSERT_OK(be->ops->kv_alloc(be, &g, &kv));
        ASSERT_OK(be->ops->kv_reserve(be, kv, &g, g.n_pages, &committed));
        /* pages of sequence b: b, b + ns, b + 2 ns, ... (interleaved, as a pool hands them) */
        int32_t *pages = malloc(sizeof(int32_t) * ns * mp);
        for (int b = 0; b < ns; b++)
            for (int i = 0; i < mp; i++)
                pages[b * mp + i] = b + i * ns;
        /* the cached slots */
        for (int b = 0; b < ns; b++) {
            const int L0 = cases[c].len0[b];
            if (!L0)
                continue;
            float *k = rand_x((size_t)L0 * kvd, &rng), *v = rand_x((size_t)L0 * kvd, &rng);
            int32_t *pg = malloc(sizeof(int32_t) * L0), *row = malloc(sizeof(int32_t) * L0);
            for (int s = 0; s < L0; s++)
                pg[s] = pages[b * mp + s / ps], row[s] = s % ps;
            ASSERT_OK(be->ops->kv_store(be, kv, &g, 0, k, v, pg, row, L0));
            free(k), free(v), free(pg), free(row);
        }
        /* the new tokens, sequence by sequence */
        int32_t *tok_seq = malloc(sizeof(int32_t) * T), *tok_slot = malloc(sizeof(int32_t) * T);
        int32_t *seq_toks = malloc(sizeof(int32_t) * T), *pg = malloc(sizeof(int32_t) * T);
        int32_t *row = malloc(sizeof(int32_t) * T), off[4], len0[3];
        off[0] = 0;
        for (int b = 0, t = 0; b < ns; b++) {
            len0[b] = cases[c].len0[b];
            for (int i = 0; i < cases[c].ntok[b]; i++, t++) {
                tok_seq[t] = b;
                tok_slot[t] = len0[b] + i;
                seq_toks[t] = t;
                pg[t] = pages[b * mp + tok_slot[t] / ps];
                row[t] = tok_slot[t] % ps;
            }
            off[b + 1] = off[b] + cases[c].ntok[b];
        }
        float *k = rand_x((size_t)T * kvd, &rng), *v = rand_x((size_t)T * kvd, &rng);
        float *q = rand_x((size_t)T * H * Dh, &rng);
        for (size_t i = 0; i < (size_t)T * H * Dh; i++)
            q[i] *= 3.f; /* a softmax far from uniform */
        ASSERT_OK(be->ops->kv_store(be, kv, &g, 0, k, v, pg, row, T));
        seer_attn_batch ab = {.T = T, .n_heads = H, .n_kv_heads = Hkv, .head_dim = Dh,
                              .scale = 1.f / sqrtf((float)Dh), .page_size = ps, .n_seq = ns,
                              .max_pages = mp, .seq_pages = pages, .seq_len0 = len0,
                              .seq_tok_off = off, .seq_toks = seq_toks, .tok_seq = tok_seq,
                              .tok_slot = tok_slot};
        const size_t n = (size_t)T * H * Dh;
        float *ref = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
        cpu->attn_ref = 1;
        ASSERT_OK(be->ops->attention(be, ref, q, kv, &g, 0, &ab));
        cpu->attn_ref = 0;
        /* the best the CPU has, then plain C and AVX2 (cpu_attention_tile.c has all three) */
        static const int isas[] = {0, SEER_CPU_ISA_SCALAR, SEER_CPU_ISA_AVX2};
        for (int ii = 0; ii < 3; ii++) {
            const int isa = isas[ii];
            cpu->isa_cap = isa;
            for (size_t i = 0; i < n; i++)
                out[i] = NAN;
            ASSERT_OK(be->ops->attention(be, out, q, kv, &g, 0, &ab));
            double worst = 0;
            for (int t = 0; t < T; t++) {
                const float *o = out + (size_t)t * H * Dh, *r = ref + (size_t)t * H * Dh;
                if (!seer_cpu_attn_tileable(&ab, tok_seq[t])) {
                    if (memcmp(o, r, sizeof(float) * H * Dh) != 0)
                        fail_msg("case %zu token %d: a sequence left to the reference changed", c, t);
                    continue;
                }
                for (int e = 0; e < H * Dh; e++) {
                    const double d = fabs((double)o[e] - r[e]);
                    if (!(d <= ATOL))
                        fail_msg("case %zu isa %d token %d elem %d: %g vs %g", c, isa, t, e, o[e], r[e]);
                    worst = d > worst ? d : worst;
                }
            }
            printf("attention tiles: case %zu (Hkv %d group %d Dh %d ps %d) isa cap %d: max |diff| %.2e\n",
                   c, Hkv, cases[c].group, Dh, ps, isa, worst);
        }
        cpu->isa_cap = 0;
        assert_true(seer_cpu_attn_tileable(&ab, 0));
        free(ref), free(out), free(k), free(v), free(q), free(pages);
        free(tok_seq), free(tok_slot), free(seq_toks), free(pg), free(row);
        be->ops->kv_free(be, kv);
        be->ops->free(be);
    }
}

typedef struct {
    _Atomic int *hits;
    _Atomic int64_t sum;
} pool_ctx;

static void count_items(void *ctx, int64_t i0, int64_t i1) {
    pool_ctx *c = ctx;
    for (int64_t i = i0; i < i1; i++) {
        atomic_fetch_add(&c->hits[i], 1);
        atomic_fetch_add(&c->sum, i);
    }
}

/* kv_move_rows against moves done one by one on a copy of the storage: every row of every
 * page afterwards, moves that read rows earlier moves wrote, a move onto itself, and refusal
 * of a row outside the pool with nothing moved. */
static void test_kv_move_rows(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    seer_kv_geom g = {.n_pages = 3, .page_size = 4, .n_layers = 2, .n_kv_heads = 2, .head_dim = 8};
    void *kv;
    int nc = 0;
    ASSERT_OK(be->ops->kv_alloc(be, &g, &kv));
    ASSERT_OK(be->ops->kv_reserve(be, kv, &g, g.n_pages, &nc));
    const size_t kvd = (size_t)g.n_kv_heads * g.head_dim, rows = (size_t)g.n_pages * g.page_size;
    /* a distinct value per (page, layer, K/V, row, element) */
    for (int p = 0; p < g.n_pages; p++)
        for (int l = 0; l < g.n_layers; l++)
            for (int w = 0; w < 2; w++)
                for (int r = 0; r < g.page_size; r++)
                    for (size_t e = 0; e < kvd; e++)
                        seer_cpu_kv_row(kv, &g, p, l, w, r)[e] = (float)((((p * 2 + l) * 2 + w) * 4 + r) * 100 + (int)e);
    const size_t n_el = rows * g.n_layers * 2 * kvd;
    float *ref = malloc(n_el * sizeof *ref);
    /* ref [page*ps + row][layer][which][kvd], moved by hand */
    for (int p = 0; p < g.n_pages; p++)
        for (int r = 0; r < g.page_size; r++)
            for (int l = 0; l < g.n_layers; l++)
                for (int w = 0; w < 2; w++)
                    memcpy(ref + ((((size_t)p * g.page_size + r) * g.n_layers + l) * 2 + w) * kvd,
                           seer_cpu_kv_row(kv, &g, p, l, w, r), kvd * sizeof(float));
    /* 2:1 -> 0:3 across pages, 0:3 -> 1:0 reads what the first wrote, 1:2 -> 1:2 itself, 0:1 -> 2:3 */
    const int32_t sp[] = {2, 0, 1, 0}, sr[] = {1, 3, 2, 1}, dp[] = {0, 1, 1, 2}, dr[] = {3, 0, 2, 3};
    const int n = 4;
    for (int i = 0; i < n; i++)
        memmove(ref + ((size_t)dp[i] * g.page_size + dr[i]) * g.n_layers * 2 * kvd,
                ref + ((size_t)sp[i] * g.page_size + sr[i]) * g.n_layers * 2 * kvd, g.n_layers * 2 * kvd * sizeof(float));
    ASSERT_OK(be->ops->kv_move_rows(be, kv, &g, sp, sr, dp, dr, n));
    int moved = 0;
    for (int p = 0; p < g.n_pages; p++)
        for (int r = 0; r < g.page_size; r++)
            for (int l = 0; l < g.n_layers; l++)
                for (int w = 0; w < 2; w++) {
                    const float *want = ref + ((((size_t)p * g.page_size + r) * g.n_layers + l) * 2 + w) * kvd;
                    const float *got = seer_cpu_kv_row(kv, &g, p, l, w, r);
                    assert_memory_equal(got, want, kvd * sizeof(float));
                    moved += got[0] != (float)((((p * 2 + l) * 2 + w) * 4 + r) * 100);
                }
    assert_int_equal(moved, 3 * g.n_layers * 2); /* three rows changed, in every layer, K and V */
    /* the storage of 1:0 now holds what 2:1 held */
    assert_true(seer_cpu_kv_row(kv, &g, 1, 1, 1, 0)[5] == (float)((((2 * 2 + 1) * 2 + 1) * 4 + 1) * 100 + 5));
    /* out of range: refused, nothing moved */
    const int32_t bp[] = {0, 3}, br[] = {0, 0}, bd[] = {1, 1}, bdr[] = {1, 1};
    float before = seer_cpu_kv_row(kv, &g, 1, 0, 0, 1)[0];
    assert_int_equal(be->ops->kv_move_rows(be, kv, &g, bp, br, bd, bdr, 2), SEER_ERR_INVALID_ARG);
    assert_true(seer_cpu_kv_row(kv, &g, 1, 0, 0, 1)[0] == before);
    const int32_t rr[] = {4};
    assert_int_equal(be->ops->kv_move_rows(be, kv, &g, bp, rr, bd, bdr, 1), SEER_ERR_INVALID_ARG);
    be->ops->kv_free(be, kv);
    be->ops->free(be);
    free(ref);
}

static void test_pool(void **state) {
    (void)state;
    enum { N = 1000 };
    for (int nt = 1; nt <= 4; nt++) {
        seer_cpu_pool *p;
        ASSERT_OK(seer_cpu_pool_init(nt, &p));
        _Atomic int *hits = calloc(N, sizeof *hits);
        uint64_t rng = 3;
        for (int job = 0; job < 3000; job++) {
            const int64_t n = (int64_t)(tu_rand_u64(&rng) % N) + 1;
            const int64_t chunk = (int64_t)(tu_rand_u64(&rng) % 40) + 1;
            for (int64_t i = 0; i < n; i++)
                atomic_store(&hits[i], 0);
            pool_ctx c = {hits, 0};
            seer_cpu_pool_run(p, n, chunk, count_items, &c);
            for (int64_t i = 0; i < n; i++)
                if (atomic_load(&hits[i]) != 1)
                    fail_msg("threads %d job %d: item %lld of %lld ran %d times", nt, job,
                             (long long)i, (long long)n, atomic_load(&hits[i]));
            assert_int_equal(atomic_load(&c.sum), n * (n - 1) / 2);
        }
        free(hits);
        seer_cpu_pool_free(p);
    }
}

static void test_default_threads(void **state) {
    (void)state;
    cpu_set_t old, one;
    assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
    const int n = seer_cpu_default_threads();
    assert_true(n >= 1 && n <= CPU_COUNT(&old));
    int first = 0;
    while (!CPU_ISSET(first, &old))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    const int n1 = seer_cpu_default_threads();
    assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
    assert_int_equal(n1, 1);
}

/* A weights kind the library does not know is refused by seer_model_load; the CPU backend
 * has no bf16 path. */
static void test_weights_mode(void **state) {
    (void)state;
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.weights = (seer_weights_kind)7;
    seer_model *m = NULL;
    assert_int_equal(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &m), SEER_ERR_INVALID_ARG);
    assert_null(m);
    mp.weights = SEER_WEIGHTS_BF16;
    assert_int_not_equal(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &m), SEER_OK);
    assert_null(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_kv_move_rows),
        cmocka_unit_test(test_default_threads),
        cmocka_unit_test(test_qmatmul),
        cmocka_unit_test(test_qmatmul_nonfinite),
        cmocka_unit_test(test_qembed),
        cmocka_unit_test(test_attention_tiles),
        cmocka_unit_test(test_weights_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
