/*
 * test_sample.c: the sampler (seer_sampler_*) and the helpers in src/sample/sample.h.
 *
 * Exactness tests compare against a plain reference written here (full sorts, doubles, no
 * thresholds or heaps); statistical tests compare histograms with the exact distribution by
 * a chi-square test whose threshold is set for a false alarm rate of about 1e-6, and show
 * that the same test rejects slightly wrong distributions.
 */
#include "testutil.h"

#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Reference pipeline ---------------------------------------------------------------- */

typedef struct {
    double v;
    int id;
} ref_cand;

static int ref_cmp_desc(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* The pipeline as the specification states it, step by step. The softmax numerators are
 * rounded to float as the library stores them, so that top-p boundaries agree exactly. */
static void ref_probs(const seer_sampler_params *p, const int32_t *hist, int n_hist,
                      const float *logits, int V, double *out) {
    float *w = malloc((size_t)V * sizeof *w);
    ref_cand *c = malloc((size_t)V * sizeof *c);
    assert_non_null(w);
    assert_non_null(c);
    for (int i = 0; i < V; i++)
        w[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    if ((p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) &&
        p->repeat_last_n > 0) {
        int n = n_hist < p->repeat_last_n ? n_hist : p->repeat_last_n;
        const int32_t *h = hist + n_hist - n;
        for (int j = 0; j < n; j++) {
            int seen = 0, count = 0;
            for (int k = 0; k < j; k++)
                seen |= h[k] == h[j];
            if (seen || h[j] < 0 || h[j] >= V)
                continue;
            for (int k = 0; k < n; k++)
                count += h[k] == h[j];
            /* each operation rounded (volatile: no fused multiply-add) */
            volatile float r = w[h[j]] > 0 ? w[h[j]] / p->repeat_penalty : w[h[j]] * p->repeat_penalty;
            volatile float f = (float)count * p->frequency_penalty;
            volatile float sub = f + p->presence_penalty;
            w[h[j]] = r - sub;
        }
    }
    for (int i = 0; i < V; i++)
        out[i] = 0;
    if (p->temperature <= 0) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (w[i] > w[best])
                best = i;
        out[best] = 1;
        free(w);
        free(c);
        return;
    }
    for (int i = 0; i < V; i++) {
        c[i].v = w[i];
        c[i].id = i;
    }
    qsort(c, (size_t)V, sizeof *c, ref_cmp_desc);
    int n = (p->top_k > 0 && p->top_k < V) ? p->top_k : V;
    const double m = c[0].v;
    for (int j = 0; j < n; j++)
        c[j].v = c[j].v == m ? 1.0 : (float)exp((c[j].v - m) * (1.0 / (double)p->temperature));
    qsort(c, (size_t)n, sizeof *c, ref_cmp_desc);
    double z = 0;
    for (int j = 0; j < n; j++)
        z += c[j].v;
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int j = 0; j < n; j++) {
            cum += c[j].v;
            if (cum >= (double)p->top_p * z) {
                n = j + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        const double cut = (double)p->min_p * c[0].v;
        int k = 0;
        while (k < n && c[k].v >= cut)
            k++;
        n = k;
    }
    double zk = 0;
    for (int j = 0; j < n; j++)
        zk += c[j].v;
    for (int j = 0; j < n; j++)
        out[c[j].id] = c[j].v / zk;
    free(w);
    free(c);
}

static seer_sampler_params plain_params(float temperature) {
    seer_sampler_params p = seer_sampler_default_params();
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    return p;
}

/* probs through a fresh sampler with no history */
static void probs_of(seer_sampler_params p, const float *logits, int V, float *probs) {
    seer_sampler *s = NULL;
    ASSERT_OK(seer_sampler_init(p, V, &s));
    seer_sampler_probs(s, logits, probs);
    seer_sampler_free(s);
}

/* Asserts the nonzero entries of probs [V] are exactly the ids in keep [n]. */
static void assert_kept(const float *probs, int V, const int *keep, int n) {
    for (int i = 0; i < V; i++) {
        int want = 0;
        for (int j = 0; j < n; j++)
            want |= keep[j] == i;
        if (want != (probs[i] > 0))
            fail_msg("token %d: prob %g, expected it %s", i, (double)probs[i],
                     want ? "kept" : "dropped");
    }
}

static double sum_f(const float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    return s;
}

/* Same support as ref and each entry within 1e-6 + 1e-5 relative. */
static void assert_probs_match(const float *got, const double *ref, int V) {
    for (int i = 0; i < V; i++) {
        if ((got[i] > 0) != (ref[i] > 0))
            fail_msg("token %d: got %g, reference %g (kept sets differ)", i, (double)got[i],
                     ref[i]);
        if (fabs(got[i] - ref[i]) > 1e-6 + 1e-5 * ref[i])
            fail_msg("token %d: got %.9g, reference %.9g", i, (double)got[i], ref[i]);
    }
    assert_true(fabs(sum_f(got, V) - 1.0) < 1e-5);
}

/* ---- Chi-square machinery ---------------------------------------------------------------- */

/* The z with P(N(0,1) > z) = alpha, by bisection on erfc (monotone, so 200 halvings of
 * [0, 40] reach double precision). */
static double normal_upper_quantile(double alpha) {
    double lo = 0, hi = 40;
    for (int i = 0; i < 200; i++) {
        const double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(mid / sqrt(2.0)) > alpha)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* Upper alpha quantile of chi-square with df degrees of freedom by the Wilson-Hilferty
 * approximation ((X/df)^(1/3) is nearly normal with mean 1 - 2/(9 df) and variance
 * 2/(9 df)). In the far tail at small df it overestimates the quantile (df = 2, alpha =
 * 1e-6: 30.3 against the exact 27.6, checked in test_chi2_threshold), which only makes a
 * false alarm rarer than alpha; the power tests below show the test still bites. */
static double chi2_critical(int df, double alpha) {
    const double z = normal_upper_quantile(alpha);
    const double a = 2.0 / (9.0 * df);
    const double t = 1.0 - a + z * sqrt(a);
    return df * t * t * t;
}

#define CHI2_ALPHA 1e-6

/* Pearson's statistic of counts obs [n] (N draws) against probabilities p [n]; +inf if a
 * draw fell where p is 0. *df receives (bins with p > 0) - 1. */
static double chi2_stat(const long *obs, const double *p, int n, long N, int *df) {
    double s = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] > 0) {
            const double e = (double)N * p[i];
            const double d = (double)obs[i] - e;
            s += d * d / e;
            bins++;
        } else if (obs[i] > 0) {
            s = INFINITY;
        }
    }
    *df = bins - 1;
    return s;
}

/* Counts of N draws from probs [n] by inverse CDF with rng (a sampler under test's
 * alternative: a distribution that is NOT the target). */
static void draw_counts(const double *probs, int n, long N, uint64_t seed, long *counts) {
    float pf[64];
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) {
        pf[i] = (float)probs[i];
        counts[i] = 0;
    }
    seer_rng r;
    seer_rng_seed(&r, seed);
    for (long k = 0; k < N; k++)
        counts[seer_sample_from_probs(pf, n, seer_rng_uniform(&r))]++;
}

static void test_chi2_threshold(void **state) {
    (void)state;
    assert_true(fabs(normal_upper_quantile(0.025) - 1.959964) < 1e-5);
    assert_true(fabs(normal_upper_quantile(1e-6) - 4.753424) < 1e-5);
    /* df = 2 has an exact tail, exp(-x/2): the approximation errs on the safe side */
    const double exact2 = 2.0 * log(1.0 / CHI2_ALPHA);
    const double wh2 = chi2_critical(2, CHI2_ALPHA);
    assert_true(wh2 >= exact2 && wh2 < 1.12 * exact2);
    /* and is accurate where the approximation is usually quoted: df = 10, alpha = 0.05 */
    assert_true(fabs(chi2_critical(10, 0.05) - 18.307) < 0.05);
}

/* ---- Parameters ----------------------------------------------------------------------------- */

static void test_defaults(void **state) {
    (void)state;
    seer_sampler_params p = seer_sampler_default_params();
    assert_true(p.temperature == 0.8f);
    assert_int_equal(p.top_k, 40);
    assert_true(p.top_p == 0.95f);
    assert_true(p.min_p == 0.05f);
    assert_true(p.repeat_penalty == 1.0f);
    assert_int_equal(p.repeat_last_n, 64);
    assert_true(p.seed == 0);
    ASSERT_OK(seer_sampler_params_check(&p));
}

static void expect_invalid(seer_sampler_params p, int V, const char *name) {
    seer_sampler *s = (seer_sampler *)&p; /* any non-NULL value: init must clear it */
    seer_status st = seer_sampler_init(p, V, &s);
    assert_int_equal(st, SEER_ERR_INVALID_ARG);
    assert_null(s);
    if (!strstr(seer_last_error(), name))
        fail_msg("message \"%s\" does not name %s", seer_last_error(), name);
}

static void test_invalid_params(void **state) {
    (void)state;
    const seer_sampler_params d = seer_sampler_default_params();
    seer_sampler_params p;
    expect_invalid(d, 0, "n_vocab");
    expect_invalid(d, -3, "n_vocab");
    const float bad_t[] = {-0.1f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        p = d;
        p.temperature = bad_t[i];
        expect_invalid(p, 10, "temperature");
    }
    p = d;
    p.top_k = -1;
    expect_invalid(p, 10, "top_k");
    const float bad_top_p[] = {0.0f, -0.5f, 1.0001f, NAN};
    for (int i = 0; i < 4; i++) {
        p = d;
        p.top_p = bad_top_p[i];
        expect_invalid(p, 10, "top_p");
    }
    const float bad_min_p[] = {-0.01f, 1.01f, NAN};
    for (int i = 0; i < 3; i++) {
        p = d;
        p.min_p = bad_min_p[i];
        expect_invalid(p, 10, "min_p");
    }
    const float bad_pen[] = {0.0f, -1.0f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        p = d;
        p.repeat_penalty = bad_pen[i];
        expect_invalid(p, 10, "repeat_penalty");
    }
    p = d;
    p.repeat_last_n = -1;
    expect_invalid(p, 10, "repeat_last_n");
    p = d;
    p.repeat_last_n = 1 << 30;
    expect_invalid(p, 10, "repeat_last_n");
    assert_int_equal(seer_sampler_init(d, 10, NULL), SEER_ERR_INVALID_ARG);

    /* the edges of the valid ranges are accepted */
    p = d;
    p.temperature = 0;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 1;
    p.repeat_last_n = 0;
    seer_sampler *s = NULL;
    ASSERT_OK(seer_sampler_init(p, 1, &s));
    seer_sampler_free(s);
    seer_sampler_free(NULL);
}

/* ---- Random generator ------------------------------------------------------------------- */

static void test_rng(void **state) {
    (void)state;
    /* xoshiro256** from the state {1, 2, 3, 4}, worked through by hand from the published
     * recurrence, and splitmix64's first output from 0 */
    seer_rng r = {{1, 2, 3, 4}};
    assert_true(seer_rng_next(&r) == 11520ull);
    assert_true(seer_rng_next(&r) == 0ull);
    assert_true(seer_rng_next(&r) == 1509978240ull);
    assert_true(seer_rng_next(&r) == 1215971899390074240ull);
    seer_rng_seed(&r, 0);
    assert_true(r.s[0] == 0xE220A8397B1DCDAFull);

    seer_rng_seed(&r, 12345);
    double mn = 1, mx = 0, sum = 0;
    const int n = 1000000;
    for (int i = 0; i < n; i++) {
        const double u = seer_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        mn = u < mn ? u : mn;
        mx = u > mx ? u : mx;
        sum += u;
    }
    /* mean of 1e6 uniforms has sd 2.9e-4; 10 sd */
    assert_true(fabs(sum / n - 0.5) < 3e-3);
    assert_true(mn < 1e-4 && mx > 1 - 1e-4);
}

/* ---- Greedy and argmax ---------------------------------------------------------------- */

static void test_argmax(void **state) {
    (void)state;
    const float a[] = {1, 3, 2, 3, -1};
    assert_int_equal(seer_argmax(a, 5), 1);
    const float b[] = {NAN, 2, NAN, 5, 5, NAN};
    assert_int_equal(seer_argmax(b, 6), 3);
    const float c[] = {NAN, NAN};
    assert_int_equal(seer_argmax(c, 2), 0);
    const float d[] = {-INFINITY, -INFINITY, -3};
    assert_int_equal(seer_argmax(d, 3), 2);
    assert_int_equal(seer_argmax(a, 0), -1);
}

static void test_greedy(void **state) {
    (void)state;
    const int V = 6;
    const float logits[] = {0.5f, 2.0f, NAN, 2.0f, -1.0f, 1.0f};
    float probs[6];
    seer_sampler_params p = seer_sampler_default_params();
    p.temperature = 0;
    seer_sampler *s = NULL;
    ASSERT_OK(seer_sampler_init(p, V, &s));
    seer_sampler_probs(s, logits, probs);
    const int one[] = {1};
    assert_kept(probs, V, one, 1);
    assert_true(probs[1] == 1.0f);
    assert_int_equal(seer_sampler_sample(s, logits, NULL), 1);

    /* a NaN where the max would be is ignored, not propagated */
    const float nan_first[] = {NAN, -5.0f, -2.0f, NAN, -2.0f, -9.0f};
    assert_int_equal(seer_sampler_sample(s, nan_first, probs), 2);
    assert_true(probs[2] == 1.0f && sum_f(probs, V) == 1.0);

    /* greedy draws no uniform: the generator is where a fresh one is */
    seer_sampler *fresh = NULL;
    ASSERT_OK(seer_sampler_init(p, V, &fresh));
    assert_true(seer_sampler_uniform(s) == seer_sampler_uniform(fresh));
    seer_sampler_free(fresh);
    seer_sampler_free(s);
}

static void test_nan_and_inf_sampling(void **state) {
    (void)state;
    const int V = 5;
    float probs[5];
    const float with_nan[] = {1.0f, NAN, 0.0f, NAN, 2.0f};
    probs_of(plain_params(1.0f), with_nan, V, probs);
    const int kept[] = {0, 2, 4};
    assert_kept(probs, V, kept, 3);
    const double z = exp(1.0) + 1.0 + exp(2.0);
    assert_true(fabs(probs[4] - exp(2.0) / z) < 1e-6);

    /* +inf logits share all the mass; all -inf (or NaN) gives a uniform draw, not NaN */
    const float with_inf[] = {1.0f, INFINITY, 0.0f, INFINITY, 2.0f};
    probs_of(plain_params(1.0f), with_inf, V, probs);
    assert_true(probs[1] == 0.5f && probs[3] == 0.5f && probs[0] == 0 && probs[4] == 0);
    const float all_neg_inf[] = {-INFINITY, NAN, -INFINITY, -INFINITY, NAN};
    probs_of(plain_params(1.0f), all_neg_inf, V, probs);
    for (int i = 0; i < V; i++)
        assert_true(probs[i] == 0.2f);
}

/* ---- Truncations ---------------------------------------------------------------------- */

static void test_top_k(void **state) {
    (void)state;
    const int V = 7;
    const float logits[] = {1, 3, 3, 2, 3, 0, 3};
    float probs[7];
    seer_sampler_params p = plain_params(1.0f);
    p.top_k = 2;
    probs_of(p, logits, V, probs);
    const int k2[] = {1, 2};
    assert_kept(probs, V, k2, 2);
    assert_true(probs[1] == 0.5f && probs[2] == 0.5f);
    p.top_k = 5;
    probs_of(p, logits, V, probs);
    const int k5[] = {1, 2, 3, 4, 6};
    assert_kept(probs, V, k5, 5);
    p.top_k = 1;
    probs_of(p, logits, V, probs);
    assert_kept(probs, V, k2, 1);
    assert_true(probs[1] == 1.0f);
    p.top_k = V + 10; /* larger than V: off */
    probs_of(p, logits, V, probs);
    const int all[] = {0, 1, 2, 3, 4, 5, 6};
    assert_kept(probs, V, all, V);

    /* many ties: 1000 logits on 10 levels, against the reference's full sort */
    const int V2 = 1000;
    float *l2 = malloc(V2 * sizeof *l2), *p2 = malloc(V2 * sizeof *p2);
    double *r2 = malloc(V2 * sizeof *r2);
    uint64_t rs = 7;
    for (int i = 0; i < V2; i++)
        l2[i] = (float)(int)(5.0f * (tu_rand_uniform(&rs) + 1.0f));
    const int ks[] = {1, 37, 100, 101, 999};
    for (int j = 0; j < 5; j++) {
        p.top_k = ks[j];
        probs_of(p, l2, V2, p2);
        ref_probs(&p, NULL, 0, l2, V2, r2);
        assert_probs_match(p2, r2, V2);
        int nz = 0;
        for (int i = 0; i < V2; i++)
            nz += p2[i] > 0;
        assert_int_equal(nz, ks[j]);
    }
    free(l2);
    free(p2);
    free(r2);
}

static void test_top_p(void **state) {
    (void)state;
    const int V = 4;
    const float logits[] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    float probs[4];
    seer_sampler_params p = plain_params(1.0f);

    p.top_p = 1.0f; /* off: every token with nonzero probability stays */
    probs_of(p, logits, V, probs);
    const int all[] = {0, 1, 2, 3};
    assert_kept(probs, V, all, 4);
    p.top_p = 0.8f; /* 0.5 + 0.25 < 0.8: a third token, of the tied pair the lower id */
    probs_of(p, logits, V, probs);
    assert_kept(probs, V, all, 3);
    assert_true(fabs(probs[2] - 0.125 / 0.875) < 1e-6);
    p.top_p = 0.7f;
    probs_of(p, logits, V, probs);
    assert_kept(probs, V, all, 2);
    assert_true(fabs(probs[0] - 2.0 / 3.0) < 1e-6);
    p.top_p = 0.49f;
    probs_of(p, logits, V, probs);
    assert_kept(probs, V, all, 1);
    assert_true(probs[0] == 1.0f);

    /* tiny top_p keeps exactly the max, the lowest id of a tied max */
    const float tied[] = {1.0f, 5.0f, 5.0f, 2.0f};
    p.top_p = 1e-6f;
    probs_of(p, tied, V, probs);
    const int one[] = {1};
    assert_kept(probs, V, one, 1);
    assert_true(probs[1] == 1.0f);
}

static void test_min_p(void **state) {
    (void)state;
    const int V = 5;
    const float logits[] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.1f), logf(0.025f)};
    float probs[5];
    seer_sampler_params p = plain_params(1.0f);
    const int ids[] = {0, 1, 2, 3, 4};
    p.min_p = 0.3f; /* cut at 0.15 */
    probs_of(p, logits, V, probs);
    assert_kept(probs, V, ids, 2);
    assert_true(fabs(probs[1] - 1.0 / 3.0) < 1e-6);
    p.min_p = 0.21f; /* cut at 0.105 */
    probs_of(p, logits, V, probs);
    assert_kept(probs, V, ids, 3);
    p.min_p = 0.01f;
    probs_of(p, logits, V, probs);
    assert_kept(probs, V, ids, 5);
    p.min_p = 1.0f;
    probs_of(p, logits, V, probs);
    assert_kept(probs, V, ids, 1);
}

/* top-p measures mass against the distribution before min-p (the pipeline's order), not
 * against what min-p left. */
static void test_top_p_then_min_p(void **state) {
    (void)state;
    const int V = 4;
    const float logits[] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    float probs[4];
    seer_sampler_params p = plain_params(1.0f);
    p.min_p = 0.3f; /* drops 0.1 */
    p.top_p = 0.75f; /* 0.4 + 0.3 < 0.75 <= 0.9: keeps three */
    probs_of(p, logits, V, probs);
    const int ids[] = {0, 1, 2};
    assert_kept(probs, V, ids, 3);
    assert_true(fabs(probs[2] - 0.2 / 0.9) < 1e-6);
}

static void test_temperature(void **state) {
    (void)state;
    const int V = 5;
    const float logits[] = {0.3f, -1.2f, 2.5f, 0.0f, 1.1f};
    float probs[5];
    const float temps[] = {0.25f, 0.5f, 1.0f, 2.0f, 7.0f};
    for (int t = 0; t < 5; t++) {
        probs_of(plain_params(temps[t]), logits, V, probs);
        double z = 0, e[5];
        for (int i = 0; i < V; i++)
            z += e[i] = exp((double)logits[i] / temps[t]);
        for (int i = 0; i < V; i++)
            if (fabs(probs[i] - e[i] / z) > 1e-7 + 1e-6 * e[i] / z)
                fail_msg("T=%g token %d: %.9g vs %.9g", (double)temps[t], i, (double)probs[i],
                         e[i] / z);
    }
}

/* ---- Repetition penalty --------------------------------------------------------------- */

static void test_repeat_penalty(void **state) {
    (void)state;
    const int V = 5;
    const float logits[] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    float probs[5], want_l[5];
    seer_sampler_params p = plain_params(1.0f);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    seer_sampler *s = NULL;
    ASSERT_OK(seer_sampler_init(p, V, &s));
    /* 2 falls out of the window of 3; 0 occurs twice but is penalised once; -1 and 99 are
     * outside the vocabulary and ignored; 4 has logit 0 (multiplied, stays 0) */
    const int32_t acc[] = {2, 0, 1, 0};
    for (int i = 0; i < 4; i++)
        seer_sampler_accept(s, acc[i]);
    seer_sampler_probs(s, logits, probs);
    memcpy(want_l, logits, sizeof want_l);
    want_l[0] = 1.0f;  /* positive: divided */
    want_l[1] = -4.0f; /* negative: multiplied */
    double z = 0;
    for (int i = 0; i < V; i++)
        z += exp(want_l[i]);
    for (int i = 0; i < V; i++)
        assert_true(fabs(probs[i] - exp(want_l[i]) / z) < 1e-6);

    const int32_t *h = NULL;
    assert_int_equal(seer_sampler_history(s, &h), 3);
    assert_int_equal(h[0], 0);
    assert_int_equal(h[1], 1);
    assert_int_equal(h[2], 0);

    /* stateless form with the same window gives the same bits; the extra ids outside the
     * vocabulary are ignored */
    float probs2[5];
    void *scratch = malloc(seer_sampler_scratch_bytes(V));
    memset(scratch, 0xA5, seer_sampler_scratch_bytes(V)); /* the scratch needs no zeroing */
    const int32_t hist2[] = {3, -1, 0, 1, 99, 0};
    p.repeat_last_n = 5;
    seer_sampler_probs_with_history(&p, hist2, 6, logits, probs2, V, scratch);
    assert_memory_equal(probs, probs2, sizeof probs);
    free(scratch);

    /* greedy flips once the leader is penalised */
    seer_sampler_params g = p;
    g.temperature = 0;
    g.repeat_penalty = 4.0f;
    seer_sampler *sg = NULL;
    ASSERT_OK(seer_sampler_init(g, V, &sg));
    assert_int_equal(seer_sampler_sample(sg, logits, NULL), 0);
    seer_sampler_accept(sg, 0); /* 2.0 / 4 = 0.5 ties with token 3; 2 (1.0) wins */
    assert_int_equal(seer_sampler_sample(sg, logits, NULL), 2);
    seer_sampler_reset(sg);
    assert_int_equal(seer_sampler_history(sg, &h), 0);
    assert_int_equal(seer_sampler_sample(sg, logits, NULL), 0);
    seer_sampler_free(sg);
    seer_sampler_free(s);
}

/* Frequency and presence penalties (as llama.cpp and OpenAI): count * frequency +
 * presence off each token of the window's logit, after the repetition penalty; ids outside
 * the window and the vocabulary untouched; greedy follows the penalised logits. */
static void test_frequency_presence(void **state) {
    (void)state;
    const int V = 5;
    const float logits[] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    seer_sampler_params p = plain_params(1.0f);
    p.repeat_last_n = 4;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    seer_sampler *s = NULL;
    ASSERT_OK(seer_sampler_init(p, V, &s));
    /* 4 falls out of the window of 4; 0 occurs twice, 2 and 3 once; 77 is ignored */
    const int32_t acc[] = {4, 0, 2, 0, 3, 77};
    for (int i = 0; i < 6; i++)
        seer_sampler_accept(s, acc[i]);
    float probs[5];
    seer_sampler_probs(s, logits, probs);
    /* window {2, 0, 3, 77}: the last four accepted */
    const float want_l[] = {2.0f - (0.5f + 0.25f), -2.0f, 1.0f - (0.5f + 0.25f), 0.5f - (0.5f + 0.25f), 0.0f};
    double z = 0;
    for (int i = 0; i < V; i++)
        z += exp((double)want_l[i] - 2.0);
    for (int i = 0; i < V; i++)
        assert_true(fabs(probs[i] - exp((double)want_l[i] - 2.0) / z) < 1e-6);
    seer_sampler_free(s);
    /* with a repetition penalty of 2 first: 2 / 2 - 0.75 for id 0; greedy then takes id 4 */
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    ASSERT_OK(seer_sampler_init(p, V, &s));
    assert_int_equal(seer_sampler_sample(s, logits, NULL), 0);
    const int32_t acc2[] = {0, 0, 2, 3};
    for (int i = 0; i < 4; i++)
        seer_sampler_accept(s, acc2[i]);
    /* 0: 2 / 2 - 2 = -1; 2: 1 / 2 - 1 = -0.5; 3: 0.5 / 2 - 1 = -0.75; 4: 0 wins */
    assert_int_equal(seer_sampler_sample(s, logits, NULL), 4);
    seer_sampler_free(s);
    /* not finite: refused */
    p.presence_penalty = INFINITY;
    assert_int_equal(seer_sampler_init(p, V, &s), SEER_ERR_INVALID_ARG);
}

static void test_history_window(void **state) {
    (void)state;
    seer_sampler_params p = seer_sampler_default_params();
    p.repeat_last_n = 3;
    seer_sampler *s = NULL;
    ASSERT_OK(seer_sampler_init(p, 100, &s));
    const int32_t *h = NULL;
    for (int i = 1; i <= 20; i++) {
        seer_sampler_accept(s, i);
        const int n = seer_sampler_history(s, &h);
        assert_int_equal(n, i < 3 ? i : 3);
        for (int j = 0; j < n; j++)
            assert_int_equal(h[j], i - n + 1 + j);
    }
    seer_sampler_free(s);
    p.repeat_last_n = 0;
    ASSERT_OK(seer_sampler_init(p, 100, &s));
    seer_sampler_accept(s, 5);
    assert_int_equal(seer_sampler_history(s, &h), 0);
    seer_sampler_free(s);
}

/* ---- Against the reference on random inputs ------------------------------------------- */

static void test_random_against_reference(void **state) {
    (void)state;
    const int Vs[] = {1, 2, 7, 100, 1000};
    const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.5f};
    const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.01f};
    const float min_ps[] = {0.0f, 0.05f, 0.3f};
    const float pens[] = {1.0f, 1.3f, 0.8f};
    uint64_t rs = 99;
    float *logits = malloc(1000 * sizeof *logits), *probs = malloc(1000 * sizeof *probs);
    double *ref = malloc(1000 * sizeof *ref);
    int32_t hist[80];
    for (int c = 0; c < 400; c++) {
        const int V = Vs[tu_rand_u64(&rs) % 5];
        const int ks[] = {0, 1, 5, 40, V + 3};
        seer_sampler_params p = seer_sampler_default_params();
        p.temperature = temps[tu_rand_u64(&rs) % 5];
        p.top_k = ks[tu_rand_u64(&rs) % 5];
        p.top_p = top_ps[tu_rand_u64(&rs) % 4];
        p.min_p = min_ps[tu_rand_u64(&rs) % 3];
        p.repeat_penalty = pens[tu_rand_u64(&rs) % 3];
        p.repeat_last_n = (int)(tu_rand_u64(&rs) % 40);
        static const float freqs[] = {0.0f, 0.5f, -0.3f}, pres[] = {0.0f, 1.25f, -0.7f};
        p.frequency_penalty = freqs[tu_rand_u64(&rs) % 3];
        p.presence_penalty = pres[tu_rand_u64(&rs) % 3];
        const int quantise = (int)(tu_rand_u64(&rs) % 2);
        for (int i = 0; i < V; i++) {
            float x = 6.0f * tu_rand_uniform(&rs);
            logits[i] = quantise ? roundf(x) : x;
            if (tu_rand_u64(&rs) % 50 == 0)
                logits[i] = NAN;
        }
        const int nh = (int)(tu_rand_u64(&rs) % 80);
        for (int i = 0; i < nh; i++)
            hist[i] = (int32_t)(tu_rand_u64(&rs) % (uint64_t)(V + 2)) - 1; /* -1 .. V */
        seer_sampler *s = NULL;
        ASSERT_OK(seer_sampler_init(p, V, &s));
        for (int i = 0; i < nh; i++)
            seer_sampler_accept(s, hist[i]);
        seer_sampler_probs(s, logits, probs);
        ref_probs(&p, hist, nh, logits, V, ref);
        assert_probs_match(probs, ref, V);
        seer_sampler_free(s);
    }
    free(logits);
    free(probs);
    free(ref);
}

/* A 150K vocabulary: top-p's threshold shortcut and the heap must agree with full sorts. */
static void test_large_vocab(void **state) {
    (void)state;
    const int V = 150000;
    float *logits = malloc(V * sizeof *logits), *probs = malloc(V * sizeof *probs);
    double *ref = malloc(V * sizeof *ref);
    uint64_t rs = 2024;
    for (int i = 0; i < V; i++)
        logits[i] = 4.0f * tu_rand_uniform(&rs);
    struct {
        int top_k;
        float top_p, min_p, temperature;
    } cases[] = {
        {0, 0.9f, 0.0f, 1.0f},   /* nucleus of thousands: the safe threshold */
        {0, 0.3f, 0.0f, 0.2f},   /* peaked: the bold threshold */
        {40, 0.95f, 0.05f, 0.8f}, /* defaults */
        {0, 0.95f, 0.05f, 1.0f},
        {5000, 0.99f, 0.0f, 1.0f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        seer_sampler_params p = plain_params(cases[c].temperature);
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        probs_of(p, logits, V, probs);
        ref_probs(&p, NULL, 0, logits, V, ref);
        assert_probs_match(probs, ref, V);
    }

    /* all equal: no threshold helps, top-p must keep the lowest half of the ids */
    for (int i = 0; i < V; i++)
        logits[i] = 0.25f;
    seer_sampler_params p = plain_params(1.0f);
    p.top_p = 0.5f;
    probs_of(p, logits, V, probs);
    for (int i = 0; i < V; i++)
        if ((probs[i] > 0) != (i < V / 2))
            fail_msg("flat logits, top_p 0.5: token %d has prob %g", i, (double)probs[i]);
    free(logits);
    free(probs);
    free(ref);
}

/* ---- Sampling ------------------------------------------------------------------------- */

static void test_sample_from_probs(void **state) {
    (void)state;
    const float p[] = {0, 0.25f, 0, 0.5f, 0.25f, 0};
    assert_int_equal(seer_sample_from_probs(p, 6, 0.0), 1);
    assert_int_equal(seer_sample_from_probs(p, 6, 0.2499), 1);
    assert_int_equal(seer_sample_from_probs(p, 6, 0.25), 3);
    assert_int_equal(seer_sample_from_probs(p, 6, 0.7499), 3);
    assert_int_equal(seer_sample_from_probs(p, 6, 0.75), 4);
    assert_int_equal(seer_sample_from_probs(p, 6, 0.9999999), 4);
    assert_int_equal(seer_sample_from_probs(p, 6, 1.5), 4); /* above the total: last nonzero */
    const float bad[] = {NAN, -0.5f, 0.5f, NAN};
    assert_int_equal(seer_sample_from_probs(bad, 4, 0.9), 2);
    const float zero[] = {0, 0, 0};
    assert_int_equal(seer_sample_from_probs(zero, 3, 0.1), -1);
    assert_int_equal(seer_sample_from_probs(p, 0, 0.1), -1);

    float oh[5];
    seer_probs_one_hot(oh, 5, 3);
    assert_true(oh[3] == 1.0f && sum_f(oh, 5) == 1.0);
    seer_probs_one_hot(oh, 5, 7);
    assert_true(sum_f(oh, 5) == 0.0);
}

/* seer_sampler_sample equals seer_sampler_probs followed by seer_sample_from_probs with the
 * sampler's next uniform, whether it walks the kept ids (small kept set) or all of probs,
 * and whether or not the caller takes the probs. */
static void test_sample_probs_out(void **state) {
    (void)state;
    const int V = 500;
    float *logits = malloc(V * sizeof *logits), *pa = malloc(V * sizeof *pa);
    float *pb = malloc(V * sizeof *pb);
    uint64_t rs = 5;
    for (int i = 0; i < V; i++)
        logits[i] = 3.0f * tu_rand_uniform(&rs);
    const int ks[] = {10, 0};
    for (int j = 0; j < 2; j++) {
        seer_sampler_params p = seer_sampler_default_params();
        p.top_k = ks[j];
        p.min_p = 0.0f;
        p.seed = 9;
        seer_sampler *a = NULL, *b = NULL, *c = NULL;
        ASSERT_OK(seer_sampler_init(p, V, &a));
        ASSERT_OK(seer_sampler_init(p, V, &b));
        ASSERT_OK(seer_sampler_init(p, V, &c));
        for (int i = 0; i < 300; i++) {
            const int32_t ta = seer_sampler_sample(a, logits, pa);
            seer_sampler_probs(b, logits, pb);
            assert_memory_equal(pa, pb, V * sizeof *pa);
            const int32_t tb = seer_sample_from_probs(pb, V, seer_sampler_uniform(b));
            assert_int_equal(ta, tb);
            assert_int_equal(seer_sampler_sample(c, logits, NULL), ta);
            assert_true(pa[ta] > 0);
        }
        seer_sampler_free(a);
        seer_sampler_free(b);
        seer_sampler_free(c);
    }
    free(logits);
    free(pa);
    free(pb);
}

static void run_sequence(seer_sampler_params p, const float *logits, int V, int32_t *out, int n) {
    seer_sampler *s = NULL;
    ASSERT_OK(seer_sampler_init(p, V, &s));
    for (int i = 0; i < n; i++) {
        out[i] = seer_sampler_sample(s, logits, NULL);
        seer_sampler_accept(s, out[i]);
    }
    /* reset reproduces the run from the start */
    seer_sampler_reset(s);
    for (int i = 0; i < n; i++) {
        const int32_t t = seer_sampler_sample(s, logits, NULL);
        assert_int_equal(t, out[i]);
        seer_sampler_accept(s, t);
    }
    seer_sampler_free(s);
}

static void test_determinism(void **state) {
    (void)state;
    const int V = 1000, n = 200;
    float *logits = malloc(V * sizeof *logits);
    uint64_t rs = 11;
    for (int i = 0; i < V; i++)
        logits[i] = 3.0f * tu_rand_uniform(&rs);
    seer_sampler_params p = seer_sampler_default_params();
    p.top_k = 0;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.1f;
    p.seed = 42;
    int32_t a[200], b[200], c[200];
    run_sequence(p, logits, V, a, n);
    run_sequence(p, logits, V, b, n);
    assert_memory_equal(a, b, sizeof a);
    p.seed = 43;
    run_sequence(p, logits, V, c, n);
    int differ = 0;
    for (int i = 0; i < n; i++)
        differ += a[i] != c[i];
    assert_true(differ > n / 2);
    free(logits);
}

/* ---- Statistics ------------------------------------------------------------------------- */

#define N_DRAWS 200000L

/* The fixed small case: 8 tokens, T = 0.7, top_k 6, top_p 0.9 leaves five tokens. */
static const float stat_logits[8] = {1.0f, 1.4f, 0.6f, -1.0f, 1.2f, 0.2f, 1.8f, -0.5f};

static seer_sampler_params stat_params(void) {
    seer_sampler_params p = seer_sampler_default_params();
    p.temperature = 0.7f;
    p.top_k = 6;
    p.top_p = 0.9f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

static void test_sampler_distribution(void **state) {
    (void)state;
    const int V = 8;
    const seer_sampler_params p = stat_params();
    double exact[8];
    ref_probs(&p, NULL, 0, stat_logits, V, exact);
    int nz = 0;
    for (int i = 0; i < V; i++)
        nz += exact[i] > 0;
    assert_int_equal(nz, 5);

    seer_sampler *s = NULL;
    ASSERT_OK(seer_sampler_init(p, V, &s));
    float probs[8];
    seer_sampler_probs(s, stat_logits, probs);
    assert_probs_match(probs, exact, V);
    long counts[8] = {0};
    for (long k = 0; k < N_DRAWS; k++)
        counts[seer_sampler_sample(s, stat_logits, NULL)]++;
    seer_sampler_free(s);

    int df;
    const double chi2 = chi2_stat(counts, exact, V, N_DRAWS, &df);
    const double crit = chi2_critical(df, CHI2_ALPHA);
    assert_int_equal(df, 4);
    if (!(chi2 < crit))
        fail_msg("sampler histogram: chi2 %.2f >= critical %.2f (df %d)", chi2, crit, df);

    /* The same test rejects near misses. Untruncated softmax: draws land on dropped
     * tokens. */
    double wrong[8];
    long wc[8];
    seer_sampler_params q = plain_params(p.temperature);
    ref_probs(&q, NULL, 0, stat_logits, V, wrong);
    draw_counts(wrong, V, N_DRAWS, 77, wc);
    assert_true(chi2_stat(wc, exact, V, N_DRAWS, &df) > crit);
    /* The right truncation at T = 0.75 instead of 0.7: same support, probabilities a few
     * percent off (expected statistic about 250 against a threshold of about 35). */
    q = p;
    q.temperature = 0.75f;
    ref_probs(&q, NULL, 0, stat_logits, V, wrong);
    draw_counts(wrong, V, N_DRAWS, 78, wc);
    const double chi2_wrong = chi2_stat(wc, exact, V, N_DRAWS, &df);
    if (!(chi2_wrong > crit))
        fail_msg("T=0.75 draws pass as T=0.7: chi2 %.2f <= %.2f", chi2_wrong, crit);
    /* top-p forgotten (top-k only): one extra token */
    q = p;
    q.top_p = 1.0f;
    ref_probs(&q, NULL, 0, stat_logits, V, wrong);
    draw_counts(wrong, V, N_DRAWS, 79, wc);
    assert_true(chi2_stat(wc, exact, V, N_DRAWS, &df) > crit);
}

static const float res_p[8] = {0.3f, 0.2f, 0.15f, 0.1f, 0.1f, 0.08f, 0.05f, 0.02f};
static const float res_q[8] = {0.1f, 0.3f, 0.1f, 0.2f, 0.05f, 0.1f, 0.1f, 0.05f};

static void test_residual_edges(void **state) {
    (void)state;
    float scratch[8];
    /* p == q: a draw from p */
    for (int i = 0; i < 100; i++) {
        const double u = (i + 0.5) / 100.0;
        assert_int_equal(seer_sample_residual(res_p, res_p, 8, u, scratch),
                         seer_sample_from_probs(res_p, 8, u));
    }
    /* one-hot q at x: p without x, renormalised; with and without scratch */
    for (int x = 0; x < 8; x++) {
        float q[8], r[8];
        seer_probs_one_hot(q, 8, x);
        double z = 1.0 - res_p[x];
        for (int i = 0; i < 8; i++)
            r[i] = i == x ? 0.0f : (float)(res_p[i] / z);
        /* compare at the middle of each expected cell so rounding cannot matter */
        double cum = 0;
        for (int i = 0; i < 8; i++) {
            if (r[i] == 0)
                continue;
            const double u = cum + 0.5 * r[i];
            cum += r[i];
            assert_int_equal(seer_sample_residual(res_p, q, 8, u, scratch), i);
            assert_int_equal(seer_sample_residual(res_p, q, 8, u, NULL), i);
        }
    }
    /* both one-hot at the same token: that token */
    float a[8];
    seer_probs_one_hot(a, 8, 5);
    assert_int_equal(seer_sample_residual(a, a, 8, 0.3, scratch), 5);
    /* u at the top end still gives a token of the residual's support */
    const int32_t t = seer_sample_residual(res_p, res_q, 8, 0.9999999999, NULL);
    assert_true(res_p[t] > res_q[t]);
}

static void test_residual_distribution(void **state) {
    (void)state;
    double r[8], z = 0;
    for (int i = 0; i < 8; i++)
        z += r[i] = res_p[i] > res_q[i] ? (double)res_p[i] - (double)res_q[i] : 0.0;
    for (int i = 0; i < 8; i++)
        r[i] /= z;
    seer_rng rng;
    seer_rng_seed(&rng, 555);
    float scratch[8];
    long counts[8] = {0};
    for (long k = 0; k < N_DRAWS; k++)
        counts[seer_sample_residual(res_p, res_q, 8, seer_rng_uniform(&rng), scratch)]++;
    int df;
    const double chi2 = chi2_stat(counts, r, 8, N_DRAWS, &df);
    const double crit = chi2_critical(df, CHI2_ALPHA);
    if (!(chi2 < crit))
        fail_msg("residual histogram: chi2 %.2f >= %.2f (df %d)", chi2, crit, df);

    /* Power: p renormalised over the residual's support has the right support and the
     * wrong weights. */
    double wrong[8], zw = 0;
    for (int i = 0; i < 8; i++)
        zw += wrong[i] = r[i] > 0 ? res_p[i] : 0.0;
    for (int i = 0; i < 8; i++)
        wrong[i] /= zw;
    long wc[8];
    draw_counts(wrong, 8, N_DRAWS, 556, wc);
    assert_true(chi2_stat(wc, r, 8, N_DRAWS, &df) > crit);
}

/* One step of speculative sampling built on the helpers: draft x ~ q, accept with
 * min(1, p(x)/q(x)), else the residual. The emitted token must be distributed as p; resampling
 * from q on rejection (a known published mistake) must fail the same test. */
static void test_speculative_identity(void **state) {
    (void)state;
    double p[8];
    for (int i = 0; i < 8; i++)
        p[i] = res_p[i];
    seer_rng rng;
    seer_rng_seed(&rng, 321);
    float scratch[8];
    long good[8] = {0}, bad[8] = {0};
    for (long k = 0; k < N_DRAWS; k++) {
        const int32_t x = seer_sample_from_probs(res_q, 8, seer_rng_uniform(&rng));
        const double ratio = (double)res_p[x] / (double)res_q[x];
        const double u_acc = seer_rng_uniform(&rng);
        const double u_res = seer_rng_uniform(&rng);
        if (u_acc < ratio) {
            good[x]++;
            bad[x]++;
        } else {
            good[seer_sample_residual(res_p, res_q, 8, u_res, scratch)]++;
            bad[seer_sample_from_probs(res_q, 8, u_res)]++;
        }
    }
    int df;
    const double chi2 = chi2_stat(good, p, 8, N_DRAWS, &df);
    const double crit = chi2_critical(df, CHI2_ALPHA);
    if (!(chi2 < crit))
        fail_msg("speculative step: chi2 %.2f >= %.2f (df %d)", chi2, crit, df);
    assert_true(chi2_stat(bad, p, 8, N_DRAWS, &df) > crit);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chi2_threshold),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_invalid_params),
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_nan_and_inf_sampling),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_top_p_then_min_p),
        cmocka_unit_test(test_temperature),
        cmocka_unit_test(test_repeat_penalty),
        cmocka_unit_test(test_frequency_presence),
        cmocka_unit_test(test_history_window),
        cmocka_unit_test(test_random_against_reference),
        cmocka_unit_test(test_large_vocab),
        cmocka_unit_test(test_sample_from_probs),
        cmocka_unit_test(test_sample_probs_out),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_sampler_distribution),
        cmocka_unit_test(test_residual_edges),
        cmocka_unit_test(test_residual_distribution),
        cmocka_unit_test(test_speculative_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
