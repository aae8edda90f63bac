/*
 * test_gpu_model.c: the forward pass on the CUDA backend.
 *
 * The tiny real model against its reference greedy ids: how many leading ids the CUDA argmax
 * reproduces, per prompt and in total, and, decoding the reference ids teacher-forced, at how
 * many steps it agrees. bf16 weights and activations flip near ties of the f32 reference, so
 * the assertion is that disagreements are rare (>= 98% of steps agree) and only at near ties
 * (the reference's margin there below NEAR_TIE of max |logit|).
 *
 * Random Llama and Qwen2 models (GQA, MHA, MQA; f32, bf16 and q8_0 weights) and models of the
 * other families: Qwen3 (per-head q/k norms, YaRN), Gemma 2 (sandwich norms, GeGLU, a window
 * on every other layer, soft-capped scores and logits, head size 256), Gemma 3 (five windowed
 * layers of six with their own RoPE base; head sizes 64 and 256) and Phi-3 (fused q|k|v and
 * gate|up tensors split at load, LongRoPE; head sizes 96 and 128; q8_0 and Q4_K weights).
 * The logits of a batched prefill, a single-token decode, a gamma+1 = 5 token verification
 * call with and without a tree mask, a mixed batch of two sequences, a sparse-view decode, a
 * long prefill and decode steps after it (recorded and replayed as CUDA graphs), CUDA against
 * the CPU reference; windows of 8 positions, so every call past the first reaches behind
 * them. Tolerance: max |cuda - cpu| <= 3e-2 * max |cpu| over the compared rows; the CUDA path
 * rounds weights, matmul inputs and the KV cache to bf16 (relative 2^-9 each), which over two
 * layers stays near 1e-2 of the logit scale.
 *
 * A prompt cut into calls in four ways gives the same bits on the GPU (free cuts), for the
 * Llama shapes and for a windowed Gemma 3 shape. Greedy speculation with sparse self-drafts
 * (streaming, retrieval) gives the same ids as plain decoding on the GPU for every family.
 *
 * Skips (via cmocka's skip()) when built without CUDA or when no CUDA device is present.
 */
#include "testutil.h"

#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_no_device(void **state) {
    (void)state;
#ifdef SEER_HAVE_CUDA
    printf("skipped: no CUDA device\n");
#else
    printf("skipped: no CUDA device (built without CUDA)\n");
#endif
    skip();
}

#ifdef SEER_HAVE_CUDA

#define LOGIT_TOL 3e-2
/* A disagreement with the golden ids is a near tie when the reference's margin there is below
 * this fraction of max |logit| (the bf16 path moves logits by up to ~2e-2 of it). */
#define NEAR_TIE 1e-2

static seer_model *load(const char *path, seer_backend_kind kind) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = kind;
    /* the CPU reference dequantises to f32 (its stored path rounds x to 8 bits) */
    if (kind == SEER_BACKEND_CPU)
        mp.weights = SEER_WEIGHTS_F32;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_load(path, mp, &m));
    return m;
}

static seer_context *mkctx_b(seer_model *m, int n_ctx, int n_seq, int page, int n_batch) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    cp.n_batch_max = n_batch;
    cp.page_size = page;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    return c;
}

static seer_context *mkctx(seer_model *m, int n_ctx, int n_seq, int page) {
    return mkctx_b(m, n_ctx, n_seq, page, 128);
}

/* ---- golden ids of the tiny real model ------------------------------------------------- */

static int parse_ids(char *s, int32_t *out, int cap) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ","))
        out[n++] = (int32_t)atoi(tok);
    return n;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int v = 1; v < n; v++)
        if (x[v] > x[best])
            best = v;
    return best;
}

/* Second-largest logit other than id. */
static float best_other(const float *x, int n, int id) {
    float m = -INFINITY;
    for (int v = 0; v < n; v++)
        if (v != id && x[v] > m)
            m = x[v];
    return m;
}

/* Both backends decode the reference ids teacher-forced (prompt in one batched call, then one
 * token at a time), which up to the first mismatch is exactly greedy decoding. Reports the
 * leading ids the CUDA argmax reproduces, how many steps agree in all, and at the first
 * mismatch both logits and the reference backend's margin there: a near tie that bf16
 * rounding flips reads very differently from a wrong result. */
static void test_golden_stories(void **state) {
    (void)state;
    const char *path = tu_data_path("models/stories260K.gguf");
    printf("model: %s\n", path);
    seer_model *m[2] = {load(path, SEER_BACKEND_CPU), load(path, SEER_BACKEND_CUDA)};
    seer_model_info info;
    seer_model_get_info(m[1], &info);
    assert_string_equal(info.backend, "cuda");
    size_t sz;
    char *tsv = (char *)tu_read_file(tu_data_path("golden/stories260K-greedy.tsv"), &sz);
    assert_non_null(tsv);
    tsv = realloc(tsv, sz + 1);
    tsv[sz] = 0;
    int V = seer_n_vocab(m[1]), rows = 0, total = 0, total_ref = 0, total_agree = 0;
    int total_steps = 0, cpu_off = 0;
    double worst_margin = 0; /* the reference's margin where cuda disagrees, of max |logit| */
    float *lg[2] = {malloc(sizeof(float) * V), malloc(sizeof(float) * V)};
    int matched[16], lens[16];
    double worst_err = 0;
    char *save = NULL;
    strtok_r(tsv, "\n", &save); /* header */
    for (char *line = strtok_r(NULL, "\n", &save); line && rows < 16; line = strtok_r(NULL, "\n", &save)) {
        char *f[4] = {0};
        char *p = line;
        for (int k = 0; k < 4; k++) {
            f[k] = p;
            p = strchr(p, '\t');
            if (!p)
                break;
            *p++ = 0;
        }
        assert_non_null(f[2]);
        int32_t pids[300], gids[300];
        int np = parse_ids(f[1], pids, 300), ng = parse_ids(f[2], gids, 300);
        seer_context *c[2];
        seer_seq_id seq = 0;
        int32_t *sq = calloc(np, sizeof *sq), *pos = calloc(np, sizeof *pos);
        uint8_t *want = calloc(np, 1);
        for (int k = 0; k < 2; k++) {
            c[k] = mkctx(m[k], 512, 1, 16);
            ASSERT_OK(seer_seq_new(c[k], &seq));
        }
        for (int i = 0; i < np; i++)
            sq[i] = seq, pos[i] = i;
        want[np - 1] = 1;
        seer_batch b = {.n_tokens = np, .token = pids, .seq = sq, .pos = pos, .logits = want};
        for (int k = 0; k < 2; k++)
            ASSERT_OK(seer_decode(c[k], &b, lg[k]));
        int lead = -1, agree = 0, steps = 0;
        for (int n = 0; n < ng; n++) {
            steps++;
            const int ref = gids[n], got = argmax(lg[1], V);
            double e = 0, mx = 0;
            for (int v = 0; v < V; v++) {
                e = fmax(e, fabs((double)lg[1][v] - lg[0][v]));
                mx = fmax(mx, fabs(lg[0][v]));
            }
            worst_err = fmax(worst_err, mx > 0 ? e / mx : e);
            agree += got == ref;
            cpu_off += argmax(lg[0], V) != ref;
            if (got != ref)
                worst_margin = fmax(worst_margin, (lg[0][ref] - best_other(lg[0], V, ref)) / mx);
            if (got != ref && lead < 0) {
                lead = n;
                printf("gpu_model: golden prompt %d '%s': id %d: cuda argmax %d (logit %.5f) over "
                       "reference %d (%.5f); cpu argmax %d, its margin for the reference %.5f\n",
                       rows, f[0], n, got, lg[1][got], ref, lg[1][ref], argmax(lg[0], V),
                       lg[0][ref] - best_other(lg[0], V, ref));
            }
            if (ref == 1) /* the reference stops at BOS */
                break;
            int32_t p1 = np + n;
            uint8_t one = 1;
            seer_batch b1 = {.n_tokens = 1, .token = &gids[n], .seq = &seq, .pos = &p1, .logits = &one};
            for (int k = 0; k < 2; k++)
                ASSERT_OK(seer_decode(c[k], &b1, lg[k]));
        }
        if (lead < 0)
            lead = steps;
        printf("gpu_model: golden prompt %d '%s': %d of %d reference ids match; teacher-forced "
               "%d of %d steps agree\n", rows, f[0], lead, ng, agree, steps);
        matched[rows] = lead;
        lens[rows] = ng;
        total += lead;
        total_ref += ng;
        total_agree += agree;
        total_steps += steps;
        free(sq), free(pos), free(want);
        for (int k = 0; k < 2; k++)
            seer_context_free(c[k]);
        rows++;
    }
    int worst = 1 << 30;
    for (int r = 0; r < rows; r++)
        worst = matched[r] < worst ? matched[r] : worst;
    printf("gpu_model: golden total %d of %d reference ids match (worst prompt %d); teacher-forced "
           "%d agree; logits max err %.3e of max |logit|\n", total, total_ref, worst, total_agree,
           worst_err);
    int short_lead = 0;
    for (int r = 0; r < rows; r++)
        short_lead += matched[r] < (lens[r] < 32 ? lens[r] : 32);
    printf("gpu_model: golden: %d prompt(s) match fewer than 32 leading ids; steps where cuda "
           "disagrees: %d, the reference's largest margin there %.2e of max |logit| (near-tie "
           "bound %.0e)\n", short_lead, total_steps - total_agree, worst_margin, NEAR_TIE);
    assert_int_equal(rows, 5);
    if (cpu_off)
        fail_msg("the CPU reference itself disagrees with the golden ids at %d steps: wrong files?", cpu_off);
    /* bf16 weights and activations flip near ties of the f32 reference (seen: margins of
     * 0.0035 on logits of 16.5 flipped at id 14 of 'Zoo'), so leading-id counts of a correct
     * implementation vary; what must hold is that only near ties flip, and rarely. */
    if (worst_margin > NEAR_TIE)
        fail_msg("cuda disagrees with the reference where its margin is %.2e of max |logit| (> %.0e): "
                 "not a near tie", worst_margin, NEAR_TIE);
    if (total_agree < 0.98 * total_steps)
        fail_msg("teacher-forced, cuda agrees with the reference at only %d of %d steps", total_agree,
                 total_steps);
    free(lg[0]), free(lg[1]);
    free(tsv);
    for (int k = 0; k < 2; k++)
        seer_model_free(m[k]);
}

/* ---- random models: CUDA against the CPU reference -------------------------------------- */

typedef struct {
    const char *arch;
    int vocab, dim, layers, heads, kv_heads, ffn;
    bool tied;
    const char *dtype;
    int head_dim, window;     /* 0: dim / heads; 0: the family's default window */
    const char *rope_scaling; /* NULL, or a scaling by 4 over 64 trained positions */
} shape;

static const shape SHAPES[] = {
    {"llama", 320, 128, 2, 8, 2, 256, false, "f32", 0, 0, NULL},  /* GQA 4, Dh 16 */
    {"llama", 300, 128, 2, 4, 4, 192, true, "f32", 0, 0, NULL},   /* MHA, Dh 32, tied */
    {"qwen2", 280, 128, 2, 4, 2, 160, false, "f32", 0, 0, NULL},  /* GQA 2, biases, neox RoPE */
    {"qwen2", 300, 256, 2, 2, 2, 128, false, "bf16", 0, 0, NULL}, /* MHA, Dh 128 */
    {"llama", 300, 512, 2, 4, 1, 384, false, "q8_0", 0, 0, NULL}, /* MQA, Dh 128 */
    {"qwen3", 300, 256, 2, 4, 2, 256, false, "bf16", 128, 0, "yarn"},    /* q/k norms, Dh 128 */
    {"gemma2", 300, 256, 2, 4, 2, 384, true, "f32", 256, 8, NULL},       /* Dh 256, softcaps */
    {"gemma3", 300, 256, 6, 4, 1, 256, true, "bf16", 64, 8, "linear"},   /* Dh 64, 5 + 1 layers */
    {"gemma3", 300, 640, 2, 4, 1, 512, true, "bf16", 256, 8, NULL},      /* 270M's heads */
    {"phi3", 300, 192, 2, 2, 2, 256, false, "q8_0", 96, 0, "longrope"}, /* Dh 96, rows copied */
    {"phi3", 300, 256, 2, 2, 1, 256, false, "q4_k", 128, 0, NULL},       /* Q4_K row views */
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof *SHAPES))

static void gen_shape(const shape *s, const char *path, int ctx, uint64_t seed) {
    seer_gen_params p = seer_gen_default_params();
    p.arch = s->arch;
    p.n_vocab = s->vocab;
    p.dim = s->dim;
    p.n_layers = s->layers;
    p.n_heads = s->heads;
    p.n_kv_heads = s->kv_heads;
    p.ffn_dim = s->ffn;
    p.tied = s->tied;
    p.dtype = s->dtype;
    p.ctx = ctx;
    p.seed = seed;
    p.head_dim = s->head_dim;
    p.window = s->window;
    if (s->rope_scaling) {
        p.rope_scaling = s->rope_scaling;
        p.rope_factor = 4.f;
        p.rope_orig_ctx = 64; /* the tests' contexts are longer: LongRoPE's long factors */
        p.rope_attn_factor = !strcmp(s->rope_scaling, "longrope") ? 1.19f : 0.f;
    }
    /* The generator's default scale, 1/sqrt(dim), as trained models are initialised. With
     * test_model.c's 0.15 the softmaxes are so peaked that bf16 rounding of K and of the
     * matmul inputs moves logits by up to 9e-2 of their scale (D=512, Dh=128). */
    p.scale = 0.f;
    ASSERT_OK(seer_gen_model(&p, path));
}

static const char *gen(int k) {
    static char keep[N_SHAPES][512];
    char name[64];
    snprintf(name, sizeof name, "gpu_model%d.gguf", k);
    snprintf(keep[k], sizeof keep[k], "%s", tu_tmp_path(name));
    gen_shape(&SHAPES[k], keep[k], 256, 500 + (uint64_t)k);
    return keep[k];
}

/* max |a - b| / max |b| */
static double logit_err(const float *a, const float *b, size_t n) {
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(b[i]) > m)
            m = fabs(b[i]);
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e))
            e = isnan(d) ? INFINITY : d;
    }
    return m > 0 ? e / m : e;
}

typedef struct {
    seer_model *m[2];   /* 0 cpu, 1 cuda */
    seer_context *c[2];
    int V;
    double worst;
    int fails;
    const char *label;
} pair;

/* Runs the same batch on both backends and compares the logits of the flagged rows. */
static void both(pair *pr, const char *what, const seer_batch *b) {
    int n_out = 0;
    for (int i = 0; i < b->n_tokens; i++)
        n_out += b->logits && b->logits[i];
    float *l[2];
    for (int k = 0; k < 2; k++) {
        l[k] = malloc(sizeof(float) * (n_out ? n_out : 1) * pr->V);
        ASSERT_OK(seer_decode(pr->c[k], b, l[k]));
    }
    double e = logit_err(l[1], l[0], (size_t)n_out * pr->V);
    bool ok = e <= LOGIT_TOL;
    printf("gpu_model: %-44s %-26s T=%-3d rows=%-3d err=%.3e tol=%.1e %s\n", pr->label, what,
           b->n_tokens, n_out, e, LOGIT_TOL, ok ? "ok" : "FAIL");
    if (e > pr->worst || isnan(e))
        pr->worst = e;
    pr->fails += !ok;
    free(l[0]), free(l[1]);
}

static void rewind_both(pair *pr, seer_seq_id s, int len) {
    for (int k = 0; k < 2; k++)
        ASSERT_OK(seer_seq_rewind(pr->c[k], s, len));
}

static void test_random_models(void **state) {
    (void)state;
    double worst = 0;
    int fails = 0;
    for (int k = 0; k < N_SHAPES; k++) {
        const char *path = gen(k);
        const shape *sh = &SHAPES[k];
        char label[128];
        snprintf(label, sizeof label, "%s D=%d H=%d Hkv=%d Dh=%d L=%d %s w=%d", sh->arch, sh->dim, sh->heads,
                 sh->kv_heads, sh->head_dim ? sh->head_dim : sh->dim / sh->heads, sh->layers, sh->dtype,
                 sh->window);
        pair pr = {.label = label};
        pr.m[0] = load(path, SEER_BACKEND_CPU);
        pr.m[1] = load(path, SEER_BACKEND_CUDA);
        pr.V = seer_n_vocab(pr.m[0]);
        seer_seq_id s0 = 0, s1 = 0;
        for (int j = 0; j < 2; j++) {
            pr.c[j] = mkctx(pr.m[j], 128, 2, 16);
            ASSERT_OK(seer_seq_new(pr.c[j], &s0));
            ASSERT_OK(seer_seq_new(pr.c[j], &s1));
        }
        uint64_t rng = 77 + k;
        enum { P = 23, G = 5 };
        int32_t tok[128], seq[128], pos[128];
        uint8_t want[128];
        for (int i = 0; i < 128; i++)
            tok[i] = (int32_t)(tu_rand_u64(&rng) % (uint64_t)pr.V), want[i] = 1;

        /* batched prefill, every row */
        for (int i = 0; i < P; i++)
            seq[i] = s0, pos[i] = i;
        seer_batch b = {.n_tokens = P, .token = tok, .seq = seq, .pos = pos, .logits = want};
        both(&pr, "prefill", &b);
        /* single-token decode */
        int32_t p1 = P;
        b = (seer_batch){.n_tokens = 1, .token = &tok[P], .seq = &s0, .pos = &p1, .logits = want};
        both(&pr, "decode", &b);
        /* verification of gamma + 1 tokens, causal */
        for (int i = 0; i < G; i++)
            seq[i] = s0, pos[i] = P + 1 + i;
        b = (seer_batch){.n_tokens = G, .token = &tok[P + 1], .seq = seq, .pos = pos, .logits = want};
        both(&pr, "verify chain", &b);
        rewind_both(&pr, s0, P + 1);
        /* verification of a tree: 0 -> {1, 2}, 1 -> 3, 2 -> 4 */
        const int parent[G] = {-1, 0, 0, 1, 2}, depth[G] = {0, 1, 1, 2, 2};
        uint8_t mask[G * G] = {0};
        for (int i = 0; i < G; i++) {
            for (int j = i; j >= 0; j = parent[j])
                mask[i * G + j] = 1;
            pos[i] = P + 1 + depth[i];
        }
        b.mask = mask;
        both(&pr, "verify tree", &b);
        rewind_both(&pr, s0, P + 1);
        /* two sequences in one call: a prompt for s1 and a tree for s0, interleaved */
        const int T = 15; /* every third token is one of s0's G */
        uint8_t mmask[T * T];
        memset(mmask, 0, sizeof mmask);
        for (int i = 0; i < T; i++)
            seq[i] = i % 3 == 0 ? s0 : s1;
        int n0 = 0, n1 = 0, idx0[G];
        for (int i = 0; i < T; i++) {
            if (seq[i] == s0 && n0 < G) {
                idx0[n0] = i;
                pos[i] = P + 1 + depth[n0];
                n0++;
            } else {
                pos[i] = n1++;
            }
        }
        assert_int_equal(n0, G);
        for (int i = 0; i < T; i++)
            for (int j = 0; j <= i; j++)
                mmask[i * T + j] = seq[i] == s1 && seq[j] == s1; /* causal within s1 */
        for (int a = 0; a < n0; a++)
            for (int j = a; j >= 0; j = parent[j])
                mmask[idx0[a] * T + idx0[j]] = 1;
        b = (seer_batch){.n_tokens = T, .token = &tok[30], .seq = seq, .pos = pos, .logits = want,
                         .mask = mmask};
        both(&pr, "two sequences, tree mask", &b);
        rewind_both(&pr, s0, P + 1);
        /* a sparse view on s0: sinks, a few slots, a tail */
        int32_t idx[] = {0, 1, 2, 3, 9, 14};
        seer_view v = {.idx = idx, .n = 6, .n_layers_view = 1, .n_heads_view = 1, .tail_start = 18};
        for (int j = 0; j < 2; j++)
            ASSERT_OK(seer_seq_set_view(pr.c[j], s0, &v));
        p1 = P + 1;
        b = (seer_batch){.n_tokens = 1, .token = &tok[50], .seq = &s0, .pos = &p1, .logits = want};
        both(&pr, "decode under a view", &b);
        /* a prompt long enough to be prefilled in one split per token (the tensor-core
         * kernel's prefill kind), continuing s1's cache, then a decode step after it */
        {
            const int s1len = seer_seq_len(pr.c[0], s1);
            assert_int_equal(s1len, seer_seq_len(pr.c[1], s1));
            const int P2 = 90;
            for (int i = 0; i < P2; i++)
                seq[i] = s1, pos[i] = s1len + i;
            b = (seer_batch){.n_tokens = P2, .token = tok, .seq = seq, .pos = pos, .logits = want};
            both(&pr, "long prefill", &b);
            p1 = s1len + P2;
            b = (seer_batch){.n_tokens = 1, .token = &tok[100], .seq = &s1, .pos = &p1, .logits = want};
            both(&pr, "decode after a long prefill", &b);
            /* more steps of one shape: recorded, then replayed */
            for (int st = 1; st <= 4; st++) {
                p1 = s1len + P2 + st;
                b.token = &tok[100 + st];
                both(&pr, "decode step (graphs)", &b);
            }
        }

        for (int j = 0; j < 2; j++) {
            seer_context_free(pr.c[j]);
            seer_model_free(pr.m[j]);
        }
        if (pr.worst > worst || isnan(pr.worst))
            worst = pr.worst;
        fails += pr.fails;
    }
    printf("gpu_model: random models worst err=%.3e tol=%.1e %s\n", worst, LOGIT_TOL,
           fails ? "FAIL" : "ok");
    if (fails)
        fail_msg("%d comparisons over tolerance (worst %.3e)", fails, worst);
}

/* ---- prompt cuts ---------------------------------------------------------------------- */

/*
 * Prompt tokens keep their bits however the prompt is cut into calls of up to the backend's
 * batch-invariant size, and whatever else the calls hold (seer_context_prompt_cuts_free),
 * on the head sizes each attention kernel serves: 16 (the scalar kernel), 64 (tensor cores,
 * whole prefill items) and 128 (the same, or the warpgroup kernel on Hopper); and on Gemma 3's
 * windowed layers (window 32) at head size 64. A prompt of
 * 300 tokens in calls of 256 and 44 (the reference, within tolerance of the CPU), of 1, 7,
 * 70 and 222, of 150, 10 and 140, and of 13 beside another sequence's decode step.
 */
static void test_prompt_cuts(void **state) {
    (void)state;
    static const shape CUT_SHAPES[] = {
        {"llama", 320, 128, 2, 8, 2, 256, false, "f32", 0, 0, NULL},   /* Dh 16 */
        {"llama", 320, 256, 2, 4, 2, 512, false, "bf16", 0, 0, NULL},  /* Dh 64, GQA 2 */
        {"qwen2", 300, 512, 2, 4, 1, 512, false, "bf16", 0, 0, NULL},  /* Dh 128, GQA 4 */
        {"gemma3", 320, 256, 6, 4, 1, 512, true, "bf16", 64, 32, NULL}, /* windowed, Dh 64 */
    };
    enum { N = 300 };
    int fails = 0;
    for (int k = 0; k < (int)(sizeof CUT_SHAPES / sizeof *CUT_SHAPES); k++) {
        const shape *sh = &CUT_SHAPES[k];
        char name[64];
        snprintf(name, sizeof name, "gpu_cuts%d.gguf", k);
        const char *path = tu_tmp_path(name);
        gen_shape(sh, path, 512, 900 + (uint64_t)k);
        seer_model *mg = load(path, SEER_BACKEND_CUDA), *mc = load(path, SEER_BACKEND_CPU);
        seer_context *c = mkctx_b(mg, 512, 2, 16, 256), *cc = mkctx_b(mc, 512, 2, 16, 256);
        assert_true(seer_context_prompt_cuts_free(c));
        const int V = seer_n_vocab(mg);
        int32_t toks[N];
        for (int i = 0; i < N; i++)
            toks[i] = (int32_t)((7 * i * i + 3) % V);
        float *ref = malloc(sizeof(float) * N * V), *got = malloc(sizeof(float) * N * V);
        assert_non_null(ref);
        assert_non_null(got);
        const int one[] = {256}, a[] = {1, 7, 70, 222}, b[] = {150, 10, 140}, d[] = {13};
        tu_feed_cuts(cc, toks, N, one, 1, N, -1, got, V);
        tu_feed_cuts(c, toks, N, one, 1, N, -1, ref, V);
        const double e = logit_err(ref, got, (size_t)N * V);
        printf("gpu_model: prompt cuts, %s D=%d H=%d Hkv=%d %s: against the CPU err=%.3e tol=%.1e\n",
               sh->arch, sh->dim, sh->heads, sh->kv_heads, sh->dtype, e, LOGIT_TOL);
        fails += !(e <= LOGIT_TOL);
        seer_seq_id other;
        ASSERT_OK(seer_seq_new(c, &other));
        const struct {
            const int *cuts;
            int n;
            seer_seq_id other;
            const char *what;
        } runs[] = {{a, 4, -1, "1, 7, 70, 222"}, {b, 3, -1, "150, 10, 140"}, {d, 1, other, "13 beside a decode step"}};
        for (int r = 0; r < 3; r++) {
            tu_feed_cuts(c, toks, N, runs[r].cuts, runs[r].n, N, runs[r].other, got, V);
            const bool same = memcmp(ref, got, sizeof(float) * N * V) == 0;
            printf("gpu_model: prompt cuts, %s head size %d, calls of %s: %s\n", sh->arch,
                   sh->head_dim ? sh->head_dim : sh->dim / sh->heads, runs[r].what,
                   same ? "the same bits" : "FAIL: bits differ");
            fails += !same;
        }
        free(ref), free(got);
        seer_context_free(c);
        seer_context_free(cc);
        seer_model_free(mg);
        seer_model_free(mc);
    }
    if (fails)
        fail_msg("%d prompt-cut comparisons failed", fails);
}

/* ---- speculation on the other families ---------------------------------------------------- */

/* Greedy speculation with the sparse self-drafts (streaming: sinks and the recent slots;
 * retrieval: selected chunks), chains and a tree, gives the ids plain decoding gives, on the
 * GPU, for three prompts decoded together past their windows; and plain decoding of the three
 * together gives each prompt's ids alone. The drafts attend under views that the windowed
 * layers cut further, and verification runs G + 1 tokens where plain decoding runs one. */
static void test_family_spec(void **state) {
    (void)state;
    int bad = 0;
    for (int k = 0; k < N_SHAPES; k++) {
        const shape *sh = &SHAPES[k];
        if (!strcmp(sh->arch, "llama") || !strcmp(sh->arch, "qwen2"))
            continue; /* test_gpu_spec's */
        char name[64];
        snprintf(name, sizeof name, "gpu_model_spec%d.gguf", k);
        const char *path = tu_tmp_path(name);
        gen_shape(sh, path, 256, 700 + (uint64_t)k);
        seer_model *m = load(path, SEER_BACKEND_CUDA);
        const int V = seer_n_vocab(m);
        uint64_t rng = 31 + k;
        int32_t prompts[3][128];
        int plen[3] = {40, 7, 23};
        for (int i = 0; i < 3; i++) /* repetitive: drafts are accepted */
            for (int j = 0; j < plen[i]; j++)
                prompts[i][j] = j >= 6 && (tu_rand_u64(&rng) & 1) ? prompts[i][j - 6]
                                                                   : (int32_t)(3 + tu_rand_u64(&rng) % (uint64_t)(V - 3));
        const tu_gen_ctx cx = {.n_ctx = 256, .page_size = 4, .n_batch_max = 64};
        tu_output plain[3], one, got[3];
        (void)tu_gen_run(m, seer_spec_default_params(), prompts[0], 128, plen, 3, 80, tu_greedy(), cx, plain, NULL);
        int diff = 0;
        for (int i = 0; i < 3; i++) {
            (void)tu_gen_run(m, seer_spec_default_params(), prompts[i], 128, &plen[i], 1, 80, tu_greedy(), cx, &one,
                             NULL);
            diff += one.n != plain[i].n || memcmp(one.ids, plain[i].ids, sizeof(int32_t) * one.n);
        }
        printf("gpu_model: spec %-7s Dh=%-3d w=%d %-10s plain alone vs together: %d of 3 differ %s\n", sh->arch,
               sh->head_dim, sh->window, sh->dtype, diff, diff ? "FAIL" : "ok");
        bad += diff;
        static const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_STREAMING};
        for (int r = 0; r < 3; r++) {
            seer_spec_params sp = tu_spec(kinds[r], 4, 20);
            if (r == 2) { /* a tree of 2 G + 2 nodes: the tree mask and its positions */
                sp.tree_size = 10;
                sp.tree_depth = 4;
            }
            seer_spec_stats st = tu_gen_run(m, sp, prompts[0], 128, plen, 3, 80, tu_greedy(), cx, got, NULL);
            diff = 0;
            for (int i = 0; i < 3; i++)
                diff += got[i].n != plain[i].n || memcmp(got[i].ids, plain[i].ids, sizeof(int32_t) * got[i].n);
            printf("gpu_model: spec %-7s Dh=%-3d w=%d %-10s %s%s: %d of 3 differ from plain decoding "
                   "(acceptance %.2f) %s\n", sh->arch, sh->head_dim, sh->window, sh->dtype,
                   seer_spec_kind_name(kinds[r]), r == 2 ? " tree" : "", diff,
                   st.drafted ? (double)st.accepted / st.drafted : 0.0, diff ? "FAIL" : "ok");
            bad += diff;
        }
        seer_model_free(m);
    }
    if (bad)
        fail_msg("%d greedy outputs with speculation (or batched) differ from plain decoding alone", bad);
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    if (seer_backend_cuda_available()) {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_golden_stories),
            cmocka_unit_test(test_random_models),
            cmocka_unit_test(test_prompt_cuts),
            cmocka_unit_test(test_family_spec),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
    }
#endif
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_device)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
