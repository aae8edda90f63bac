/*
 * ops_harness.h: what the backend op tests share (test_backend_ops*.c):
 * the CPU and CUDA backends under test, the relative-error bookkeeping and its summary, device
 * memory helpers that poison outputs with NaN, and random GGUF tensors.
 * Header-only (static functions): each test executable includes it once.
 */
#ifndef SEER_OPS_HARNESS_H
#define SEER_OPS_HARNESS_H

#include "testutil.h"

#include "backend/backend.h"
#include "cuda_env.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* each includer uses a different subset of the helpers */
#pragma GCC diagnostic ignored "-Wunused-function"

#ifdef SEER_HAVE_CUDA

static seer_backend *cpu, *gpu;

/* ---- bookkeeping ------------------------------------------------------------------------ */

typedef struct {
    const char *op;
    int cases, fails;
    double worst_ratio, worst_err, worst_tol;
} op_stat;

#define MAX_STATS 48
static op_stat stats[MAX_STATS];
static int n_stats;

static op_stat *stat_of(const char *op) {
    for (int i = 0; i < n_stats; i++)
        if (!strcmp(stats[i].op, op))
            return &stats[i];
    if (n_stats == MAX_STATS)
        fail_msg("more than %d op names: raise MAX_STATS", MAX_STATS);
    op_stat *s = &stats[n_stats++];
    memset(s, 0, sizeof *s);
    s->op = op;
    s->worst_ratio = -1;
    return s;
}

static double l2_rel_err(const float *out, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - ref[i];
        if (isnan(d) || isinf(d))
            return INFINITY;
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Prints the case line and records it; the test function asserts at its end. */
static void record(const char *op, const char *shape, const float *out, const float *ref,
                   size_t n, double tol) {
    double e = l2_rel_err(out, ref, n);
    bool ok = e <= tol;
    printf("%-10s %-78s rel_err=%.3e tol=%.1e %s\n", op, shape, e, tol, ok ? "ok" : "FAIL");
    fflush(stdout);
    op_stat *s = stat_of(op);
    s->cases++;
    s->fails += !ok;
    double ratio = tol > 0 ? e / tol : (e > 0 ? INFINITY : 0);
    if (ratio > s->worst_ratio || (isnan(ratio) && !isnan(s->worst_ratio))) {
        s->worst_ratio = ratio;
        s->worst_err = e;
        s->worst_tol = tol;
    }
}

static void assert_op_passed(const char *op) {
    op_stat *s = stat_of(op);
    if (s->fails)
        fail_msg("%s: %d of %d cases over tolerance (worst rel_err %.3e, tol %.1e)", op, s->fails,
                 s->cases, s->worst_err, s->worst_tol);
}

static void print_summary(void) {
    printf("\nsummary: %-12s %6s %14s %10s %5s\n", "op", "cases", "worst_rel_err", "tol", "pass");
    for (int i = 0; i < n_stats; i++)
        printf("summary: %-12s %6d %14.3e %10.1e %5s\n", stats[i].op, stats[i].cases,
               stats[i].worst_err, stats[i].worst_tol, stats[i].fails ? "NO" : "yes");
}

/* ---- memory helpers ---------------------------------------------------------------------- */

static float *nan_array(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

static float *rand_array(size_t n, float scale, uint64_t *rng) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = tu_rand_uniform(rng) * scale;
    return x;
}

/* Head shapes the tensor-core attention kernel serves (attention_tc.cu): it rounds q and the
 * softmax weights to bf16 for the products, so even with bf16-exact K, V and q the weights
 * carry a relative 2^-9 rounding each: about 1e-3 on outputs over few slots, less over many
 * (tolerance 3e-3 against the CPU, test_backend_ops' "attention-x"). */
static bool attn_tc_shape(int Dh, int group) {
    return (Dh == 64 || Dh == 96 || Dh == 128 || Dh == 256) && group <= 16;
}

/* Rounds x to values bf16 holds exactly: the device's bf16 copies are then exact, and what
 * is left of the difference to the reference is f32 summation order alone. */
static void to_bf16_exact(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = seer_bf16_to_f32(seer_f32_to_bf16(x[i]));
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    ASSERT_OK(gpu->ops->alloc(gpu, bytes, &p));
    return p;
}

static float *dev_copy(const float *h, size_t n) {
    float *d = dev_alloc(n * sizeof *d);
    ASSERT_OK(gpu->ops->upload(gpu, d, h, n * sizeof *d));
    return d;
}

static float *dev_nan(size_t n) {
    float *h = nan_array(n);
    float *d = dev_copy(h, n);
    free(h);
    return d;
}

static float *dev_fetch(const float *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    ASSERT_OK(gpu->ops->download(gpu, h, d, n * sizeof *h));
    return h;
}

static void dev_free(void *p) { gpu->ops->dealloc(gpu, p); }

/* A weight tensor of type t made from random f32 values, as a GGUF reader would hand it out. */
typedef struct {
    gguf_tensor t;
    void *data;
} host_tensor;

static void make_tensor(host_tensor *ht, const char *name, ggml_type type, int rows, int cols,
                        uint64_t *rng) {
    size_t n = (size_t)rows * cols, nb = 0;
    float *f = rand_array(n, 1.f, rng);
    ASSERT_OK(seer_ggml_nbytes(type, n, &nb));
    ht->data = malloc(nb);
    assert_non_null(ht->data);
    ASSERT_OK(seer_gguf_quant(type, f, ht->data, n));
    free(f);
    memset(&ht->t, 0, sizeof ht->t);
    ht->t.name = name;
    ht->t.n_dims = 2;
    ht->t.ne[0] = (uint64_t)cols;
    ht->t.ne[1] = (uint64_t)rows;
    ht->t.ne[2] = ht->t.ne[3] = 1;
    ht->t.type = type;
    ht->t.data = ht->data;
    ht->t.nbytes = nb;
}

static int setup(void **state) {
    (void)state;
    if (seer_backend_cpu_init(0, &cpu) != SEER_OK)
        return -1;
    /* the variant a test run asks for (test_backend_ops_mma: SEER_CUDA_ATTN=mma) */
    const seer_cuda_tuning tuning = lab_cuda_tuning_from_env();
    if (seer_backend_cuda_init_tuned(0, &tuning, &gpu) != SEER_OK) {
        fprintf(stderr, "CUDA backend: %s\n", seer_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (gpu)
        gpu->ops->free(gpu);
    if (cpu)
        cpu->ops->free(cpu);
    return 0;
}

#endif /* SEER_HAVE_CUDA */

static void test_no_device(void **state) {
    (void)state;
#ifdef SEER_HAVE_CUDA
    printf("skipped: no CUDA device\n");
#else
    printf("skipped: no CUDA device (built without CUDA)\n");
#endif
    skip();
}

/* A test binary's run: its n tests on the CUDA device (SEER_TEST_FILTER=name: one family, e.g.
 * to run it under a sanitizer), then the error table; without a device, or built without
 * CUDA (tests NULL), one skipped test. */
static int ops_run(const struct CMUnitTest *tests, size_t n) {
#ifdef SEER_HAVE_CUDA
    if (n && seer_backend_cuda_available()) {
        if (getenv("SEER_TEST_FILTER"))
            cmocka_set_test_filter(getenv("SEER_TEST_FILTER"));
        int rc = _cmocka_run_group_tests("tests", tests, n, setup, teardown);
        print_summary();
        return rc;
    }
#endif
    (void)tests, (void)n;
    const struct CMUnitTest none[] = {cmocka_unit_test(test_no_device)};
    return cmocka_run_group_tests(none, NULL, NULL);
}

#endif
