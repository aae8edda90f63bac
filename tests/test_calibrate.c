/*
 * test_calibrate.c: measuring the speculation cost table on the tiny real model
 * (src/spec/calibrate.c): it runs through the public API, gives positive, finite times
 * ordered as the work is (a call of B * n tokens costs more than one of a single token),
 * leaves the contexts as it found them, refuses grids the context cannot hold without
 * changing anything, and its table survives the file and drives the planner.
 */
#include "testutil.h"

#include "spec/cost.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static seer_model *g_model;

static int setup(void **state) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    return seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &g_model) == SEER_OK ? 0 : -1;
}

static int teardown(void **state) {
    seer_model_free(g_model);
    return 0;
}

static seer_context *mk_ctx(int n_seq, int n_batch) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = n_seq;
    cp.n_batch_max = n_batch;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(g_model, cp, &c));
    return c;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_calibrate_runs(void **state) {
    seer_context *ctx = mk_ctx(4, 64), *dctx = mk_ctx(4, 64);
    const int free0 = seer_kv_free_pages(ctx), dfree0 = seer_kv_free_pages(dctx);
    seer_calibrate_params p = seer_calibrate_default_params();
    p.draft_ctx = dctx; /* the model as its own draft: a full-cache draft step */
    seer_cost_table t;
    const double t0 = now_s();
    ASSERT_OK(seer_cost_calibrate(ctx, &p, &t));
    const double wall = now_s() - t0;
    ASSERT_OK(seer_cost_table_check(&t));
    assert_non_null(strstr(t.key, "llama-"));
    assert_non_null(strstr(t.key, "@cpu"));
    assert_int_equal(t.n_b, 3);
    assert_int_equal(t.n_l, 3);
    assert_int_equal(t.n_n, 3);
    assert_true(t.l[2] <= 512 - 8 - 1);
    /* streaming and draft; no row for the selection drafters (set-up not measured) */
    assert_int_equal(t.n_drafters, 2);
    assert_true(seer_cost_find_drafter(&t, SEER_SPEC_STREAMING) >= 0);
    assert_true(seer_cost_find_drafter(&t, SEER_SPEC_SNAPKV) < 0);
    assert_true(seer_cost_find_drafter(&t, SEER_SPEC_RETRIEVAL) < 0);
    const int dd = seer_cost_find_drafter(&t, SEER_SPEC_DRAFT);
    assert_true(dd >= 0);
    assert_int_equal(t.drafter[dd].n_k, 1);
    printf("calibration took %.3f s (budget %.2f s); key %s\n", wall, p.time_budget_s, t.key);
    const int sd = seer_cost_find_drafter(&t, SEER_SPEC_STREAMING);
    for (int i = 0; i < t.n_b; i++)
        for (int j = 0; j < t.n_l; j++) {
            printf("B %d L %3d: target %7.1f us, verify", t.b[i], t.l[j], 1e6 * t.t_target[i][j]);
            for (int v = 0; v < t.n_n; v++)
                printf(" %d:%7.1f", t.n[v], 1e6 * t.t_verify[v][i][j]);
            printf(" us, draft K=%d %7.1f us, model %7.1f us\n", t.drafter[sd].k[0],
                   1e6 * t.drafter[sd].t[0][i][j], 1e6 * t.drafter[dd].t[0][i][j]);
            assert_true(t.t_target[i][j] > 0 && isfinite(t.t_target[i][j]));
            assert_true(t.t_target[i][j] < 1.0); /* a 260K-parameter model's step */
            for (int d = 0; d < t.n_drafters; d++)
                for (int k = 0; k < t.drafter[d].n_k; k++)
                    assert_true(t.drafter[d].t[k][i][j] > 0 && isfinite(t.drafter[d].t[k][i][j]));
        }
    /* Monotone where the work differs many-fold: the largest call (B 4, n 8: 32 tokens with
     * their logits) against a single token at the same length. */
    for (int j = 0; j < t.n_l; j++)
        assert_true(t.t_verify[t.n_n - 1][t.n_b - 1][j] > t.t_target[0][j]);
    /* the contexts as found */
    assert_int_equal(seer_kv_free_pages(ctx), free0);
    assert_int_equal(seer_kv_free_pages(dctx), dfree0);
    seer_seq_id ids[4];
    for (int i = 0; i < 4; i++)
        ASSERT_OK(seer_seq_new(ctx, &ids[i]));
    for (int i = 0; i < 4; i++)
        seer_seq_free(ctx, ids[i]);

    /* round trip through the cache, then a plan from it */
    char path[512];
    ASSERT_OK(seer_cost_cache_path(tu_tmp_path(""), t.key, path, sizeof path));
    ASSERT_OK(seer_cost_save(&t, path));
    seer_cost_table u;
    ASSERT_OK(seer_cost_load(path, t.key, &u));
    assert_true(u.t_verify[1][2][1] == t.t_verify[1][2][1]);
    seer_cost_planner *pl = NULL;
    ASSERT_OK(seer_cost_planner_init(&u, seer_cost_default_params(), &pl));
    const int lens[4] = {100, 200, 300, 400};
    seer_spec_decision d;
    ASSERT_OK(seer_cost_choose(pl, NULL, lens, 4, NULL, &d));
    assert_true(d.speedup >= 1.0);
    assert_true(d.plain_tokens_per_s > 0);
    printf("plan at B 4: %s K %d G %d, predicted speedup %.2f\n", seer_spec_kind_name(d.kind),
           d.budget, d.gamma, d.speedup);
    seer_cost_planner_free(pl);
    seer_context_free(dctx);
    seer_context_free(ctx);
}

static void test_calibrate_refuses(void **state) {
    seer_context *ctx = mk_ctx(2, 64);
    const int free0 = seer_kv_free_pages(ctx);
    seer_cost_table t;
    memset(&t, 0x3c, sizeof t);
    seer_cost_table t0 = t;
    seer_calibrate_params p = seer_calibrate_default_params();
    /* default B grid 1, 2, 4: the context has 2 sequences */
    assert_int_not_equal(seer_cost_calibrate(ctx, &p, &t), SEER_OK);
    assert_memory_equal(&t, &t0, sizeof t);
    assert_int_equal(seer_kv_free_pages(ctx), free0);
    assert_true(strlen(seer_last_error()) > 0);
    /* a batch the context cannot run (2 * 8 tokens > 8) */
    seer_context_free(ctx);
    ctx = mk_ctx(2, 8);
    p.n_b = 2, p.b[0] = 1, p.b[1] = 2;
    assert_int_not_equal(seer_cost_calibrate(ctx, &p, &t), SEER_OK);
    assert_memory_equal(&t, &t0, sizeof t);
    assert_int_equal(seer_kv_free_pages(ctx), free0);
    /* bad grids and parameters */
    p.n_b = 2, p.b[0] = 2, p.b[1] = 1;
    assert_int_equal(seer_cost_calibrate(ctx, &p, &t), SEER_ERR_INVALID_ARG);
    p.n_b = SEER_COST_MAX_B + 1;
    assert_int_equal(seer_cost_calibrate(ctx, &p, &t), SEER_ERR_INVALID_ARG);
    p = seer_calibrate_default_params();
    p.time_budget_s = 0;
    assert_int_equal(seer_cost_calibrate(ctx, &p, &t), SEER_ERR_INVALID_ARG);
    assert_memory_equal(&t, &t0, sizeof t);
    seer_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calibrate_runs),
        cmocka_unit_test(test_calibrate_refuses),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
