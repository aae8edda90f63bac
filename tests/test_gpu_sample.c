/*
 * test_gpu_sample.c: the CUDA backend's sampling ops against the CPU backend's (which are the
 * host sampler itself, test_sample_ops.c), and speculative sampling on the GPU end to end.
 *
 *   - sample_rows: V of 7, 300, 32000 and 152064; peaked logits, a few levels (large ties at
 *     the top-k and top-p cuts), all equal, -inf and NaN entries, only three finite logits,
 *     all -inf; temperatures 1e-3 to 100 and 0 (with and without penalty), top-k from 1 to
 *     beyond V, top-p, min-p, repetition, frequency and presence penalties with duplicate and
 *     out-of-range history; logit_bias (with an id outside V) on a quarter of the rows and a
 *     constraint's vocabulary mask on a third.
 *     Probabilities: the same support and |gpu - cpu| <= 1e-6 * max(1, cpu) + 1e-9 per entry
 *     (both round exp in double to float; sums run in another order). Ids: >= 99.9% of 64
 *     draws per row equal given the same uniform, and every mismatch lies at a boundary
 *     (the uniform within 1e-5 of the CPU's cumulative mass at the smaller of the two ids).
 *   - chi-square of 200000 GPU draws (V = 64) and 50000 (V = 152064, top-k 40) against the
 *     exact CPU probabilities (critical value at tail 1e-6).
 *   - accept_chains: 3048 chains of 0 to 5 drafts (vector q, one-hot q, the wrong-rule
 *     hook), V 300 and 152064: accepted counts equal exactly (the test reads the same floats), the
 *     emitted token equal except at a boundary, >= 99.9%.
 *   - accept_trees: 2032 random trees of up to 12 nodes, V 300 and 152064: accepted paths,
 *     emitted tokens and uniforms used equal the CPU's in all but at most 1 in 1000 (a
 *     uniform at a boundary of rows renormalised with sums in another order).
 *   - seer_gen on the GPU: the joint distribution of the first three tokens under
 *     speculative sampling (streaming, draft model, n-gram; token trees over streaming and
 *     the draft model) matches the exact distribution
 *     computed from the GPU model's logits (chi-square as in test_spec.c), and the wrong rule
 *     fails it; greedy decoding with a repetition penalty (the sample_rows path at
 *     temperature 0) is identical with and without speculation.
 *
 * Skips when built without CUDA or when no CUDA device is present.
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include "backend/backend.h"
#include "sample/sample.h"
#include "spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_no_device(void **state) {
    (void)state;
    printf("skipped: no CUDA device\n");
    skip();
}

#ifdef SEER_HAVE_CUDA

typedef struct {
    float t;
    int k;
    float p, min_p, pen;
} cfg;

static const cfg CFGS[] = {
    {0.8f, 40, 0.95f, 0.05f, 1.0f},  {1.0f, 0, 1.0f, 0.0f, 1.0f},   {0.7f, 0, 0.9f, 0.0f, 1.0f},
    {1.3f, 0, 1.0f, 0.1f, 1.0f},     {0.9f, 1000, 0.5f, 0.0f, 1.3f}, {1e-3f, 5, 1.0f, 0.0f, 1.0f},
    {100.f, 50, 0.99f, 0.0f, 1.0f},  {0.0f, 40, 0.95f, 0.05f, 1.2f}, {0.0f, 0, 1.0f, 0.0f, 1.0f},
    {1.0f, 1, 1.0f, 0.0f, 1.0f},     {0.8f, 400000, 0.95f, 0.05f, 1.0f}, {0.6f, 3, 0.3f, 0.2f, 0.8f},
};
#define N_CFG ((int)(sizeof CFGS / sizeof *CFGS))
#define N_KIND 6

static seer_sampler_params params_of(const cfg *c) {
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = c->t;
    sp.top_k = c->k;
    sp.top_p = c->p;
    sp.min_p = c->min_p;
    sp.repeat_penalty = c->pen;
    sp.repeat_last_n = 32;
    /* where the repetition penalty is on, frequency and presence too (sample.h's order) */
    sp.frequency_penalty = c->pen != 1.0f ? 0.35f : 0.0f;
    sp.presence_penalty = c->pen != 1.0f ? -0.6f : 0.0f;
    return sp;
}

static double uniform(uint64_t *rng) { return (double)(tu_rand_u64(rng) >> 11) * 0x1.0p-53; }

/* 0 peaked, 1 a few levels (ties), 2 all equal, 3 -inf and NaN, 4 three finite, 5 all -inf */
static void fill_logits(float *x, int V, int kind, uint64_t *rng) {
    for (int i = 0; i < V; i++) {
        float v = 4.f * tu_rand_uniform(rng);
        if (kind == 1)
            v = roundf(v);
        else if (kind == 2)
            v = 0.5f;
        else if (kind == 3 && tu_rand_u64(rng) % 3 == 0)
            v = tu_rand_u64(rng) % 5 == 0 ? NAN : -INFINITY;
        else if (kind == 4)
            v = i == V / 2 || i == V / 3 || i == V - 1 ? v : -INFINITY;
        else if (kind == 5)
            v = -INFINITY;
        x[i] = v;
    }
}

typedef struct {
    seer_backend *cpu, *gpu;
} pair;

static pair backends(void) {
    pair b;
    ASSERT_OK(seer_backend_cpu_init(1, &b.cpu));
    ASSERT_OK(seer_backend_cuda_init(0, &b.gpu));
    return b;
}

static void pair_free(pair *b) {
    b->cpu->ops->free(b->cpu);
    b->gpu->ops->free(b->gpu);
}

static float *dev_upload(seer_backend *be, const float *x, size_t n) {
    float *d = NULL;
    ASSERT_OK(be->ops->alloc(be, n * sizeof(float), (void **)&d));
    ASSERT_OK(be->ops->upload(be, d, x, n * sizeof(float)));
    return d;
}

/* Is a disagreement between ids a and b for uniform u at a CDF step of probs (CPU)? */
static bool at_boundary(const float *probs, int V, double u, int32_t a, int32_t b, double scale) {
    if (a < 0 || b < 0)
        return false;
    const int lo = a < b ? a : b;
    double cum = 0;
    for (int i = 0; i <= lo; i++)
        if (probs[i] > 0)
            cum += probs[i];
    return fabs(u - cum / scale) <= 1e-5;
}

static void test_sample_rows_vs_cpu(void **state) {
    (void)state;
    pair b = backends();
    enum { DRAWS = 64 };
    const int Vs[] = {7, 300, 32000, 152064};
    uint64_t rng = 77;
    long n_ids = 0, id_mismatch = 0, id_boundary = 0, bad_rows = 0;
    double worst = 0;
    for (size_t vi = 0; vi < sizeof Vs / sizeof *Vs; vi++) {
        const int V = Vs[vi], R = N_CFG * N_KIND;
        float *lg = malloc(sizeof(float) * R * V), *pc = malloc(sizeof(float) * R * V);
        float *pg = malloc(sizeof(float) * R * V);
        int32_t *hist = malloc(sizeof(int32_t) * R * 40);
        seer_sampler_params *sp = malloc(sizeof *sp * R);
        const int W = (V + 31) / 32;
        uint32_t *masks = malloc(sizeof(uint32_t) * (size_t)R * W);
        seer_logit_bias *bias = malloc(sizeof *bias * R * 3);
        for (int r = 0; r < R; r++) {
            fill_logits(lg + (size_t)r * V, V, r % N_KIND, &rng);
            sp[r] = params_of(&CFGS[r / N_KIND]);
            for (int w = 0; w < W; w++) /* about half the vocabulary allowed */
                masks[(size_t)r * W + w] = (uint32_t)tu_rand_u64(&rng);
            bias[r * 3] = (seer_logit_bias){(int32_t)(tu_rand_u64(&rng) % (uint64_t)V), 7.5f};
            bias[r * 3 + 1] = (seer_logit_bias){(int32_t)(tu_rand_u64(&rng) % (uint64_t)V), -3.25f};
            bias[r * 3 + 2] = (seer_logit_bias){V + 5, 100.0f}; /* outside V: ignored */
            if (bias[r * 3 + 1].token == bias[r * 3].token)
                bias[r * 3 + 1].token = (bias[r * 3].token + 1) % V;
            if (r % 4 == 2) {
                sp[r].logit_bias = bias + r * 3;
                sp[r].n_logit_bias = 3;
            }
            for (int i = 0; i < 40; i++) /* duplicates and ids outside [0, V) */
                hist[r * 40 + i] = i % 9 == 8 ? (i % 2 ? -1 : V + 3)
                                              : (int32_t)(tu_rand_u64(&rng) % (uint64_t)(V < 50 ? V : 50));
        }
        float *dl = dev_upload(b.gpu, lg, (size_t)R * V), *dp = NULL;
        ASSERT_OK(b.gpu->ops->alloc(b.gpu, sizeof(float) * R * V, (void **)&dp));
        seer_sample_row *rc = malloc(sizeof *rc * R * DRAWS), *rg = malloc(sizeof *rg * R * DRAWS);
        double *u = malloc(sizeof(double) * R * DRAWS);
        int32_t *ic = malloc(sizeof(int32_t) * R * DRAWS), *ig = malloc(sizeof(int32_t) * R * DRAWS);
        /* probabilities kept, one draw each */
        for (int r = 0; r < R; r++) {
            u[r] = uniform(&rng);
            rc[r] = (seer_sample_row){.logits = lg + (size_t)r * V, .probs = pc + (size_t)r * V, .sp = &sp[r],
                                      .hist = hist + r * 40, .n_hist = 40, .u = u[r],
                                      .mask = r % 3 == 1 ? masks + (size_t)r * W : NULL};
            rg[r] = rc[r];
            rg[r].logits = dl + (size_t)r * V;
            rg[r].probs = dp + (size_t)r * V;
        }
        ASSERT_OK(b.cpu->ops->sample_rows(b.cpu, rc, R, V, ic));
        ASSERT_OK(b.gpu->ops->sample_rows(b.gpu, rg, R, V, ig));
        ASSERT_OK(b.gpu->ops->download(b.gpu, pg, dp, sizeof(float) * R * V));
        for (int r = 0; r < R; r++) {
            const float *c = pc + (size_t)r * V, *g = pg + (size_t)r * V;
            int bad = 0;
            for (int i = 0; i < V; i++) {
                const double d = fabs((double)g[i] - c[i]);
                if ((c[i] > 0) != (g[i] > 0) || d > 1e-6 * fmax(1.0, c[i]) + 1e-9)
                    bad++;
                if (d > worst)
                    worst = d;
            }
            if (bad) {
                bad_rows++;
                printf("gpu_sample: V=%d cfg %d kind %d: %d entries differ\n", V, r / N_KIND, r % N_KIND, bad);
            }
        }
        /* ids: DRAWS uniforms per row, probabilities not kept */
        for (int r = 0; r < R; r++)
            for (int k = 0; k < DRAWS; k++) {
                const int j = r * DRAWS + k;
                u[j] = k == 0 ? 0.0 : k == 1 ? 1.0 - 0x1.0p-53 : uniform(&rng);
                rc[j] = (seer_sample_row){.logits = lg + (size_t)r * V, .probs = NULL, .sp = &sp[r],
                                          .hist = hist + r * 40, .n_hist = 40, .u = u[j],
                                          .mask = r % 3 == 1 ? masks + (size_t)r * W : NULL};
                rg[j] = rc[j];
                rg[j].logits = dl + (size_t)r * V;
            }
        ASSERT_OK(b.cpu->ops->sample_rows(b.cpu, rc, R * DRAWS, V, ic));
        const int per_call = V > 50000 ? 128 : 1024; /* each row without probs takes a [V] scratch */
        for (int k0 = 0; k0 < R * DRAWS; k0 += per_call) {
            const int n = R * DRAWS - k0 < per_call ? R * DRAWS - k0 : per_call;
            ASSERT_OK(b.gpu->ops->sample_rows(b.gpu, rg + k0, n, V, ig + k0));
        }
        for (int j = 0; j < R * DRAWS; j++) {
            n_ids++;
            if (ic[j] == ig[j])
                continue;
            id_mismatch++;
            if (at_boundary(pc + (size_t)(j / DRAWS) * V, V, u[j], ic[j], ig[j], 1.0))
                id_boundary++;
            else
                printf("gpu_sample: V=%d row %d u=%.17g: cpu %d gpu %d, not at a boundary\n", V, j / DRAWS,
                       u[j], ic[j], ig[j]);
        }
        b.gpu->ops->dealloc(b.gpu, dl);
        b.gpu->ops->dealloc(b.gpu, dp);
        free(lg), free(pc), free(pg), free(hist), free(sp), free(rc), free(rg), free(u), free(ic), free(ig);
        free(masks), free(bias);
    }
    printf("gpu_sample: probabilities worst |gpu-cpu| %.3g, %ld rows off; ids %ld of %ld differ (%ld at a boundary)\n",
           worst, bad_rows, id_mismatch, n_ids, id_boundary);
    assert_int_equal(bad_rows, 0);
    assert_int_equal(id_mismatch, id_boundary);
    assert_true(id_mismatch * 1000 <= n_ids);
    /* bad parameters are refused */
    seer_sampler_params bad = seer_sampler_default_params();
    bad.temperature = NAN;
    float *d1 = NULL;
    ASSERT_OK(b.gpu->ops->alloc(b.gpu, sizeof(float) * 8, (void **)&d1));
    seer_sample_row row = {.logits = d1, .sp = &bad, .u = 0.5};
    int32_t id;
    assert_int_equal(b.gpu->ops->sample_rows(b.gpu, &row, 1, 8, &id), SEER_ERR_INVALID_ARG);
    b.gpu->ops->dealloc(b.gpu, d1);
    pair_free(&b);
}


/* chi2 / critical of counts against n * probs, cells with expectation < 5 pooled. */
static double chi2_ratio(const long *count, const float *probs, int V, long n) {
    double chi = 0, pe = 0, po = 0;
    int used = 0;
    for (int i = 0; i < V; i++) {
        const double e = probs[i] * (double)n;
        if (probs[i] == 0) {
            if (count[i])
                return INFINITY; /* outside the support */
            continue;
        }
        if (e < 5) {
            pe += e, po += count[i];
            continue;
        }
        chi += (count[i] - e) * (count[i] - e) / e;
        used++;
    }
    if (pe > 0) {
        chi += (po - pe) * (po - pe) / (pe > 1 ? pe : 1);
        used++;
    }
    return used > 1 ? chi / tu_chi2_crit(used - 1) : 0;
}

static void test_sampling_chi_square(void **state) {
    (void)state;
    pair b = backends();
    uint64_t rng = 123;
    const struct {
        int V;
        long n;
        cfg c;
    } cases[] = {{64, 200000, {0.8f, 20, 0.9f, 0.01f, 1.0f}}, {152064, 50000, {0.8f, 40, 0.95f, 0.0f, 1.0f}}};
    for (int t = 0; t < 2; t++) {
        const int V = cases[t].V;
        const long N = cases[t].n;
        float *lg = malloc(sizeof(float) * V), *pc = malloc(sizeof(float) * V);
        fill_logits(lg, V, 0, &rng);
        seer_sampler_params sp = params_of(&cases[t].c);
        seer_sample_row rc = {.logits = lg, .probs = pc, .sp = &sp, .u = -1};
        ASSERT_OK(b.cpu->ops->sample_rows(b.cpu, &rc, 1, V, NULL));
        float *dl = dev_upload(b.gpu, lg, V);
        const int CH = V > 50000 ? 256 : 2048; /* each row takes a [V] scratch */
        seer_sample_row *rg = malloc(sizeof *rg * CH);
        int32_t *ig = malloc(sizeof(int32_t) * CH);
        long *count = calloc(V, sizeof(long));
        for (long k0 = 0; k0 < N; k0 += CH) {
            const int n = N - k0 < CH ? (int)(N - k0) : CH;
            for (int j = 0; j < n; j++)
                rg[j] = (seer_sample_row){.logits = dl, .sp = &sp, .u = uniform(&rng)};
            ASSERT_OK(b.gpu->ops->sample_rows(b.gpu, rg, n, V, ig));
            for (int j = 0; j < n; j++) {
                assert_true(ig[j] >= 0 && ig[j] < V);
                count[ig[j]]++;
            }
        }
        const double r = chi2_ratio(count, pc, V, N);
        printf("gpu_sample: %ld GPU draws, V=%d: chi2 / critical = %.3f\n", N, V, r);
        assert_true(r < 1);
        b.gpu->ops->dealloc(b.gpu, dl);
        free(lg), free(pc), free(rg), free(ig), free(count);
    }
    pair_free(&b);
}

static void test_accept_vs_cpu(void **state) {
    (void)state;
    pair b = backends();
    enum { G = 5 };
    const int Vs[] = {300, 152064}, Ns[] = {3000, 48};
    uint64_t rng = 31;
    long n_ch = 0, n_diff = 0, n_bound = 0, acc_total = 0, d_total = 0;
    for (int vi = 0; vi < 2; vi++) {
        const int V = Vs[vi], N = Ns[vi];
        seer_sampler_params sp = seer_sampler_default_params();
        sp.top_k = vi ? 0 : 30; /* the large vocabulary with the whole softmax */
        sp.temperature = 1.0f;
        float *p = malloc(sizeof(float) * (size_t)N * (G + 1) * V), *q = malloc(sizeof(float) * (size_t)N * G * V);
        float *lg = malloc(sizeof(float) * V);
        int32_t *d = malloc(sizeof(int32_t) * N * G);
        double *u = malloc(sizeof(double) * N * (G + 1));
        seer_accept_chain *cc = malloc(sizeof *cc * N), *cg = malloc(sizeof *cg * N);
        void *scratch = malloc(seer_sampler_scratch_bytes(V));
        for (int k = 0; k < N; k++) {
            const int nd = k % (G + 1);
            const bool onehot = k % 3 == 0;
            for (int i = 0; i <= nd; i++) {
                fill_logits(lg, V, 0, &rng);
                seer_sampler_probs_with_history(&sp, NULL, 0, lg, p + ((size_t)k * (G + 1) + i) * V, V, scratch);
                if (i == nd)
                    break;
                float *qi = q + ((size_t)k * G + i) * V;
                for (int j = 0; j < V; j++)
                    lg[j] += 0.8f * tu_rand_uniform(&rng);
                seer_sampler_probs_with_history(&sp, NULL, 0, lg, qi, V, scratch);
                d[k * G + i] = onehot && i % 2 ? (int32_t)(tu_rand_u64(&rng) % V) : seer_sample_from_probs(qi, V, uniform(&rng));
            }
            for (int i = 0; i <= nd; i++)
                u[k * (G + 1) + i] = uniform(&rng);
            cc[k] = (seer_accept_chain){.nd = nd, .draft = d + k * G, .p = p + (size_t)k * (G + 1) * V,
                                        .q = onehot ? NULL : q + (size_t)k * G * V, .u = u + k * (G + 1),
                                        .resample_from_p = k % 11 == 5};
        }
        float *dp = dev_upload(b.gpu, p, (size_t)N * (G + 1) * V), *dq = dev_upload(b.gpu, q, (size_t)N * G * V);
        for (int k = 0; k < N; k++) {
            cg[k] = cc[k];
            cg[k].p = dp + (size_t)k * (G + 1) * V;
            cg[k].q = cc[k].q ? dq + (size_t)k * G * V : NULL;
        }
        int32_t *ac = malloc(sizeof(int32_t) * N), *nc = malloc(sizeof(int32_t) * N);
        int32_t *ag = malloc(sizeof(int32_t) * N), *ng = malloc(sizeof(int32_t) * N);
        ASSERT_OK(b.cpu->ops->accept_chains(b.cpu, cc, N, V, ac, nc));
        ASSERT_OK(b.gpu->ops->accept_chains(b.gpu, cg, N, V, ag, ng));
        float *res = malloc(sizeof(float) * V);
        for (int k = 0; k < N; k++) {
            n_ch++;
            acc_total += ac[k];
            d_total += cc[k].nd;
            if (ac[k] != ag[k])
                fail_msg("V=%d chain %d: %d accepted on the CPU, %d on the GPU", V, k, ac[k], ag[k]);
            if (nc[k] == ng[k])
                continue;
            n_diff++;
            /* the distribution the token was drawn from, and the uniform used */
            const int a = ac[k];
            const float *pa = cc[k].p + (size_t)a * V;
            double total = 1, uu = cc[k].u[a == cc[k].nd ? a : a + 1];
            if (a < cc[k].nd && !cc[k].resample_from_p) {
                total = 0;
                for (int i = 0; i < V; i++) {
                    const float qi = cc[k].q ? cc[k].q[(size_t)a * V + i] : (i == cc[k].draft[a] ? 1.f : 0.f);
                    res[i] = pa[i] - qi > 0 ? pa[i] - qi : 0;
                    total += res[i];
                }
                pa = res;
            }
            if (at_boundary(pa, V, uu, nc[k], ng[k], total))
                n_bound++;
            else
                printf("gpu_sample: accept V=%d chain %d: cpu %d gpu %d, not at a boundary\n", V, k, nc[k], ng[k]);
        }
        b.gpu->ops->dealloc(b.gpu, dp);
        b.gpu->ops->dealloc(b.gpu, dq);
        free(p), free(q), free(lg), free(d), free(u), free(cc), free(cg), free(scratch);
        free(ac), free(nc), free(ag), free(ng), free(res);
    }
    printf("gpu_sample: accept_chains: %ld chains, %ld of %ld drafts accepted, emitted tokens differ in %ld (%ld at a boundary)\n",
           n_ch, acc_total, d_total, n_diff, n_bound);
    assert_true(acc_total > 0 && acc_total < d_total);
    assert_int_equal(n_diff, n_bound);
    assert_true(n_diff * 1000 <= n_ch);
    pair_free(&b);
}

/* accept_trees: random trees of up to 12 nodes (vector and one-hot q, the wrong-rule hook)
 * over the same floats and uniforms on both backends. The walk's decisions read rows that
 * the residual updates renormalise with sums in another order, so a decision or the emitted
 * token may differ where a uniform lies within rounding of a boundary: at most 1 in 1000. */
static void test_accept_trees_vs_cpu(void **state) {
    (void)state;
    pair b = backends();
    enum { NMAX = 12 };
    const int Vs[] = {300, 152064}, Ns[] = {2000, 32};
    uint64_t rng = 77;
    long n_tr = 0, n_diff = 0, acc_total = 0;
    for (int vi = 0; vi < 2; vi++) {
        const int V = Vs[vi], N = Ns[vi];
        seer_sampler_params sp = seer_sampler_default_params();
        sp.top_k = vi ? 0 : 20;
        sp.temperature = 1.0f;
        float *p = malloc(sizeof(float) * (size_t)N * (NMAX + 1) * V), *q = malloc(sizeof(float) * (size_t)N * NMAX * V);
        float *lg = malloc(sizeof(float) * V);
        int32_t *tok = malloc(sizeof(int32_t) * N * NMAX), *par = malloc(sizeof(int32_t) * N * NMAX);
        double *u = malloc(sizeof(double) * N * (NMAX + 1));
        seer_accept_tree *tc = malloc(sizeof *tc * N), *tg = malloc(sizeof *tg * N);
        void *scratch = malloc(seer_sampler_scratch_bytes(V));
        for (int k = 0; k < N; k++) {
            const int n = (int)(tu_rand_u64(&rng) % (NMAX + 1));
            const bool onehot = k % 5 == 0;
            for (int j = 0; j < n; j++) /* any earlier node (or the root) as the parent */
                par[k * NMAX + j] = (int32_t)(tu_rand_u64(&rng) % (uint64_t)(j + 1)) - 1;
            for (int r = 0; r <= n; r++) {
                fill_logits(lg, V, 0, &rng);
                seer_sampler_probs_with_history(&sp, NULL, 0, lg, p + ((size_t)k * (NMAX + 1) + r) * V, V, scratch);
                if (r == n)
                    break;
                for (int j = 0; j < V; j++)
                    lg[j] += 0.8f * tu_rand_uniform(&rng);
                seer_sampler_probs_with_history(&sp, NULL, 0, lg, q + ((size_t)k * NMAX + r) * V, V, scratch);
            }
            for (int j = 0; j < n; j++) { /* a child drawn from its parent's q row */
                const float *qr = q + ((size_t)k * NMAX + par[k * NMAX + j] + 1) * V;
                tok[k * NMAX + j] = seer_sample_from_probs(qr, V, uniform(&rng));
            }
            for (int j = 0; j <= n; j++)
                u[k * (NMAX + 1) + j] = uniform(&rng);
            tc[k] = (seer_accept_tree){.n = n, .tok = tok + k * NMAX, .parent = par + k * NMAX,
                                       .p = p + (size_t)k * (NMAX + 1) * V,
                                       .q = onehot ? NULL : q + (size_t)k * NMAX * V, .u = u + k * (NMAX + 1),
                                       .resample_from_p = k % 13 == 7};
        }
        float *dp = dev_upload(b.gpu, p, (size_t)N * (NMAX + 1) * V), *dq = dev_upload(b.gpu, q, (size_t)N * NMAX * V);
        for (int k = 0; k < N; k++) {
            tg[k] = tc[k];
            tg[k].p = dp + (size_t)k * (NMAX + 1) * V;
            tg[k].q = tc[k].q ? dq + (size_t)k * NMAX * V : NULL;
        }
        int32_t *ac = malloc(sizeof(int32_t) * N), *nc = malloc(sizeof(int32_t) * N), *uc = malloc(sizeof(int32_t) * N);
        int32_t *ag = malloc(sizeof(int32_t) * N), *ng = malloc(sizeof(int32_t) * N), *ug = malloc(sizeof(int32_t) * N);
        int32_t *pc = malloc(sizeof(int32_t) * N * NMAX), *pg = malloc(sizeof(int32_t) * N * NMAX);
        ASSERT_OK(b.cpu->ops->accept_trees(b.cpu, tc, N, V, NMAX, ac, pc, nc, uc));
        ASSERT_OK(b.gpu->ops->accept_trees(b.gpu, tg, N, V, NMAX, ag, pg, ng, ug));
        for (int k = 0; k < N; k++) {
            n_tr++;
            acc_total += ac[k];
            assert_true(ag[k] >= 0 && ag[k] <= tc[k].n && ug[k] >= 1 && ug[k] <= tc[k].n + 1);
            if (ac[k] != ag[k] || nc[k] != ng[k] || uc[k] != ug[k] ||
                memcmp(pc + k * NMAX, pg + k * NMAX, sizeof(int32_t) * ac[k])) {
                n_diff++;
                printf("gpu_sample: accept_trees V=%d tree %d (%d nodes): cpu %d accepted, token %d; gpu %d, %d\n",
                       V, k, tc[k].n, ac[k], nc[k], ag[k], ng[k]);
            }
        }
        b.gpu->ops->dealloc(b.gpu, dp);
        b.gpu->ops->dealloc(b.gpu, dq);
        free(p), free(q), free(lg), free(tok), free(par), free(u), free(tc), free(tg), free(scratch);
        free(ac), free(nc), free(uc), free(ag), free(ng), free(ug), free(pc), free(pg);
    }
    printf("gpu_sample: accept_trees: %ld trees, %ld nodes accepted, %ld differ\n", n_tr, acc_total, n_diff);
    assert_true(acc_total > 0);
    assert_true(n_diff * 1000 <= n_tr);
    pair_free(&b);
}

/* ---- speculative sampling on the GPU, end to end ---------------------------------------- */

static seer_model *load_cuda(const char *path) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CUDA;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_load(path, mp, &m));
    return m;
}

static const char *gen_model(const char *name, int vocab, int dim, int layers, int heads, int kv,
                             uint64_t seed, float scale) {
    static char paths[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(paths[k], sizeof paths[k], "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = "llama";
    p.n_vocab = vocab;
    p.dim = dim;
    p.n_layers = layers;
    p.n_heads = heads;
    p.n_kv_heads = kv;
    p.ffn_dim = dim * 2;
    p.ctx = 512;
    p.seed = seed;
    p.scale = scale;
    ASSERT_OK(seer_gen_model(&p, paths[k]));
    return paths[k];
}

static seer_spec_params spec_of(seer_spec_kind k, seer_model *draft) {
    seer_spec_params sp = seer_spec_default_params();
    sp.kind = k;
    sp.gamma = 3;
    tu_spec_set(&sp, "budget", 6);
    tu_spec_set(&sp, "sinks", 2);
    tu_spec_set(&sp, "chunk", 4);
    tu_spec_set(&sp, "snap_window", 4);
    sp.draft_model = draft;
    tu_spec_set(&sp, "draft_budget", 0);
    return sp;
}

static void test_spec_distribution_gpu(void **state) {
    (void)state;
    seer_model *m = load_cuda(gen_model("gsd.gguf", 260, 32, 2, 4, 2, 21, 0.6f));
    seer_model *d = load_cuda(gen_model("gsdd.gguf", 260, 16, 1, 2, 1, 22, 0.6f));
    tu_dist dist;
    tu_dist_init(&dist, m);
    const int runs = 4000;
    const seer_spec_kind kinds[] = {SEER_SPEC_NONE, SEER_SPEC_STREAMING, SEER_SPEC_DRAFT, SEER_SPEC_NGRAM};
    for (int k = 0; k < 4; k++)
        tu_dist_expect(&dist, spec_of(kinds[k], d), runs, NULL, "gpu_sample: distribution %s on the GPU",
                       seer_spec_kind_name(kinds[k]));
    /* token trees: four children at the root (the whole support under top-k 4), depth 2 */
    for (int k = 1; k < 3; k++) {
        seer_spec_params tsp = spec_of(kinds[k], d);
        tsp.tree_size = 8;
        tsp.tree_depth = 2;
        tu_dist_expect(&dist, tsp, runs, NULL, "gpu_sample: tree distribution %s on the GPU",
                       seer_spec_kind_name(kinds[k]));
    }
    tu_dist_expect(&dist, spec_of(SEER_SPEC_STREAMING, d), runs, &seer_verify_wrong_rule_for_tests,
                   "gpu_sample: distribution with the wrong rule on the GPU (chain)");
    seer_spec_params tw = spec_of(SEER_SPEC_STREAMING, d);
    tw.tree_size = 8;
    tw.tree_depth = 2;
    tu_dist_expect(&dist, tw, runs, &seer_verify_wrong_rule_for_tests,
                   "gpu_sample: distribution with the wrong rule on the GPU (tree)");
    seer_model_free(d);
    seer_model_free(m);
}

/* Greedy with a repetition penalty is not plain argmax: every round goes through sample_rows
 * at temperature 0. Speculation must not change the output. */
static void test_greedy_penalty_spec_identical(void **state) {
    (void)state;
    seer_model *m = load_cuda(tu_data_path("models/stories260K.gguf"));
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 0;
    sp.repeat_penalty = 1.3f;
    sp.repeat_last_n = 16;
    int32_t prompt[3][8] = {{1, 410, 469, 347}, {1, 365, 425, 263, 479}, {1, 1, 320}};
    const int plen[3] = {4, 5, 3};
    const seer_spec_kind kinds[] = {SEER_SPEC_NONE, SEER_SPEC_STREAMING, SEER_SPEC_NGRAM, SEER_SPEC_DRAFT};
    int32_t ref[3][100];
    long drafted = 0;
    for (int k = 0; k < 4; k++) {
        seer_context_params cp = seer_context_default_params();
        cp.n_ctx = 256;
        cp.n_seq_max = 3;
        cp.n_batch_max = 64;
        seer_context *c;
        ASSERT_OK(seer_context_init(m, cp, &c));
        seer_spec_params spec = spec_of(kinds[k], m);
        tu_spec_set(&spec, "budget", 4096); /* the streaming draft is the target: long accepted runs */
        seer_gen *g;
        ASSERT_OK(seer_gen_init(c, spec, &g));
        int h[3], active = 1;
        for (int i = 0; i < 3; i++)
            ASSERT_OK(seer_gen_add(g, prompt[i], plen[i], 100, sp, true, &h[i]));
        while (active)
            ASSERT_OK(seer_gen_step(g, &active));
        for (int i = 0; i < 3; i++) {
            const int32_t *ids;
            const int n = seer_gen_output(g, h[i], &ids);
            assert_int_equal(n, 100);
            if (k == 0) {
                memcpy(ref[i], ids, sizeof(int32_t) * n);
            } else if (memcmp(ref[i], ids, sizeof(int32_t) * n)) {
                fail_msg("greedy with penalty: %s differs from plain decoding on prompt %d",
                         seer_spec_kind_name(kinds[k]), i);
            }
        }
        seer_spec_stats st;
        seer_gen_stats(g, &st);
        drafted += st.drafted;
        seer_gen_free(g);
        seer_context_free(c);
    }
    assert_true(drafted > 0);
    seer_model_free(m);
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    if (seer_backend_cuda_available()) {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_sample_rows_vs_cpu),
            cmocka_unit_test(test_sampling_chi_square),
            cmocka_unit_test(test_accept_vs_cpu),
            cmocka_unit_test(test_accept_trees_vs_cpu),
            cmocka_unit_test(test_spec_distribution_gpu),
            cmocka_unit_test(test_greedy_penalty_spec_identical),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
    }
#endif
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_device)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
