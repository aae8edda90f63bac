/*
 * test_backend_ops_lp.c: logprob_rows on the CUDA backend against the CPU reference
 * (src/sample/logprob.c), the host outputs poisoned before each run: V of 7, 1000, 32000 and
 * 152064; random rows, peaked rows, rows of few distinct values (large ties) and rows with NaN
 * and -inf; k of 0, 1, 5 and 20; several rows naming one row of logits.
 * Tolerance: 1e-5 absolute on log-probabilities (the log-sum-exp's sum runs in another order);
 * ids must be equal (ties go to the lower id on both). Runs only where a device is present.
 */
#include "ops_harness.h"

#ifdef SEER_HAVE_CUDA

static void fill_row(float *x, int V, int kind, uint64_t *rng) {
    for (int i = 0; i < V; i++) {
        const float u = tu_rand_uniform(rng);
        switch (kind) {
        case 0: x[i] = 6.f * u; break;                                  /* random */
        case 1: x[i] = 2.f * u + (i == V / 3 ? 30.f : 0.f); break;      /* peaked */
        case 2: x[i] = (float)(int)(3.f * (u + 1.f)); break;           /* few values: ties */
        default: x[i] = i % 97 == 3 ? NAN : i % 89 == 5 ? -INFINITY : 4.f * u; break;
        }
    }
}

static void test_logprob_rows(void **state) {
    (void)state;
    static const int Vs[] = {7, 1000, 32000, 152064};
    static const int ks[] = {0, 1, 5, 20};
    int fails = 0, cases = 0;
    for (size_t a = 0; a < sizeof Vs / sizeof *Vs; a++)
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++) {
            const int V = Vs[a], k = ks[b] < V ? ks[b] : V, R = 4, n = 6;
            uint64_t rng = 100 + a * 10 + b;
            float *h = malloc(sizeof(float) * (size_t)R * V);
            for (int r = 0; r < R; r++)
                fill_row(h + (size_t)r * V, V, r, &rng);
            float *d = dev_copy(h, (size_t)R * V);
            seer_logprob_row rc[6], rg[6];
            for (int i = 0; i < n; i++) {
                const int r = i % R;
                const int32_t t = (int32_t)(tu_rand_u64(&rng) % (uint64_t)V);
                rc[i] = (seer_logprob_row){h + (size_t)r * V, t};
                rg[i] = (seer_logprob_row){d + (size_t)r * V, t};
            }
            float lc[6], lg[6], tc[6 * 20], tg[6 * 20];
            int32_t ic[6 * 20], ig[6 * 20];
            for (int i = 0; i < 6 * 20; i++)
                tg[i] = NAN, ig[i] = -7;
            for (int i = 0; i < 6; i++)
                lg[i] = NAN;
            ASSERT_OK(cpu->ops->logprob_rows(cpu, rc, n, V, k, lc, ic, tc));
            ASSERT_OK(gpu->ops->logprob_rows(gpu, rg, n, V, k, lg, ig, tg));
            double worst = 0;
            bool ok = true;
            for (int i = 0; i < n; i++) {
                const bool both_inf = isinf(lc[i]) && isinf(lg[i]) && (lc[i] < 0) == (lg[i] < 0);
                const double e = both_inf ? 0 : fabs((double)lc[i] - lg[i]);
                ok &= e <= 1e-5;
                worst = e > worst ? e : worst;
                for (int j = 0; j < k; j++) {
                    const int o = i * k + j;
                    ok &= ic[o] == ig[o];
                    const bool bi = isinf(tc[o]) && isinf(tg[o]);
                    const double et = bi ? 0 : fabs((double)tc[o] - tg[o]);
                    ok &= et <= 1e-5;
                    worst = et > worst ? et : worst;
                }
            }
            printf("%-12s V=%-7d k=%-2d rows=%d worst_abs_err=%.3e %s\n", "logprob_rows", V, k, n, worst,
                   ok ? "ok" : "FAIL");
            fails += !ok;
            cases++;
            dev_free(d);
            free(h);
        }
    if (fails)
        fail_msg("logprob_rows: %d of %d cases differ from the CPU", fails, cases);
    /* bad arguments are refused, not run */
    float lp;
    seer_logprob_row bad = {NULL, 0};
    assert_int_equal(gpu->ops->logprob_rows(gpu, &bad, 1, 10, 21, &lp, NULL, NULL), SEER_ERR_INVALID_ARG);
    bad.token = 10;
    assert_int_equal(gpu->ops->logprob_rows(gpu, &bad, 1, 10, 1, &lp, NULL, NULL), SEER_ERR_INVALID_ARG);
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_logprob_rows)};
    return ops_run(tests, sizeof tests / sizeof *tests);
#else
    return ops_run(NULL, 0);
#endif
}
