/*
 * test_calibrate.c: measuring the speculation cost table on the tiny real model
 * (src/spec/calibrate.c): it runs through the public API, gives positive, finite times
 * ordered as the work is (a call of B * n tokens costs more than one of a single token),
 * leaves the contexts as it found them, refuses grids the context cannot hold without
 * changing anything, and its table survives the file and drives the planner. Under a time
 * budget it stops: it measures fewer cells and marks the rest estimated, a later calibration
 * continues such a partial table, and generation under auto with a partial table is
 * greedy-identical to plain decoding.
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

/* Progress as the tools see it: calls counted, the last one marked done. */
typedef struct {
    int calls, last_measured, last_total;
    bool done;
} progress_log;

static void on_progress(void *user, const seer_spec_calibrate_progress *p) {
    progress_log *l = user;
    l->calls++;
    l->last_measured = p->measured, l->last_total = p->total;
    l->done = p->done;
}

/* A budget too small for anything past the first cell: exactly one cell is measured (a table
 * stands on at least one), every other is estimated and flagged, and the drafters with
 * nothing measured get no row. Deterministic: the next cell is always predicted to end past
 * the deadline. */
static void test_budget_partial(void **state) {
    seer_context *ctx = mk_ctx(4, 64);
    const int free0 = seer_kv_free_pages(ctx);
    seer_calibrate_params p = seer_calibrate_default_params();
    p.time_budget_s = 1e-6;
    p.aim_s = 1e-6;
    seer_cost_table t;
    ASSERT_OK(seer_cost_calibrate(ctx, &p, &t));
    ASSERT_OK(seer_cost_table_check(&t));
    int m, n;
    seer_cost_table_count(&t, &m, &n);
    printf("budget 1 us: %d of %d cells measured\n", m, n);
    assert_int_equal(m, 1);
    assert_int_equal(t.est_target[0][0], 0); /* the first cell: B 1 at the shortest L */
    assert_int_equal(t.n_drafters, 0);       /* no view step was measured: no row */
    for (int i = 0; i < t.n_b; i++)
        for (int j = 0; j < t.n_l; j++) {
            assert_int_equal(t.est_target[i][j], i || j);
            for (int v = 0; v < t.n_n; v++) {
                assert_int_equal(t.est_verify[v][i][j], 1);
                /* estimates: finite, at least the step, growing with the tokens */
                assert_true(isfinite(t.t_verify[v][i][j]) && t.t_verify[v][i][j] >= t.t_target[i][j]);
                if (v)
                    assert_true(t.t_verify[v][i][j] >= t.t_verify[v - 1][i][j]);
            }
        }
    /* with no call of more tokens measured, n tokens are taken to cost n steps */
    assert_true(t.t_verify[t.n_n - 1][0][0] >= 0.99 * t.n[t.n_n - 1] * t.t_target[0][0]);
    assert_int_equal(seer_kv_free_pages(ctx), free0);
    /* the file keeps the flags */
    char path[512];
    ASSERT_OK(seer_cost_cache_path(tu_tmp_path(""), "partial", path, sizeof path));
    ASSERT_OK(seer_cost_save(&t, path));
    seer_cost_table u;
    ASSERT_OK(seer_cost_load(path, t.key, &u));
    assert_memory_equal(u.est_verify, t.est_verify, sizeof t.est_verify);

    /* continuing it: the measured cell stands, more are measured */
    p = seer_calibrate_default_params();
    p.time_budget_s = 5;
    p.prev = &u;
    seer_cost_table w;
    ASSERT_OK(seer_cost_calibrate(ctx, &p, &w));
    int m2, n2;
    seer_cost_table_count(&w, &m2, &n2);
    assert_true(m2 > 1);
    assert_true(w.t_target[0][0] == u.t_target[0][0]);
    assert_int_equal(seer_kv_free_pages(ctx), free0);
    seer_context_free(ctx);
}

/* The public call with a budget of 0.5 s returns well within 5 s (a loaded machine's margin:
 * the bound is what is tested, not a speed), reports its progress and ends with done. */
static void test_budget_bound(void **state) {
    seer_context *ctx = mk_ctx(4, 64);
    progress_log log = {0};
    seer_spec_calibrate_params sp = seer_spec_calibrate_default_params();
    sp.budget_s = 0.5;
    sp.progress = on_progress;
    sp.progress_user = &log;
    seer_spec_cost *c = NULL;
    const double t0 = now_s();
    ASSERT_OK(seer_spec_cost_measure(ctx, sp, &c));
    const double wall = now_s() - t0;
    int m, n;
    seer_spec_cost_count(c, &m, &n);
    printf("budget 0.5 s: %.3f s, %d of %d cells measured, %d progress calls\n", wall, m, n, log.calls);
    assert_true(wall < 5.0);
    assert_true(m >= 1 && m <= n);
    assert_true(log.calls >= 2 && log.done);
    assert_int_equal(log.last_measured, m);
    assert_int_equal(log.last_total, n);
    seer_spec_cost_free(c);
    /* a negative budget is refused; 0 is the default (10 s on the CPU) */
    sp.budget_s = -1;
    assert_int_equal(seer_spec_cost_measure(ctx, sp, &c), SEER_ERR_INVALID_ARG);
    assert_true(seer_spec_cost_default_budget(ctx) == 10.0);
    seer_context_free(ctx);
}

/* Speculation never changes greedy output, however little of the table was measured: auto
 * under a one-cell table and under a partial table whose estimated view step makes drafting
 * look good decodes stories260K's golden ids, alone and as a batch. */
static void test_partial_greedy(void **state) {
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = 5;
    cp.n_batch_max = 128;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(g_model, cp, &c));
    seer_spec_calibrate_params sp = seer_spec_calibrate_default_params();
    sp.budget_s = 1e-6;
    seer_spec_cost *one = NULL;
    ASSERT_OK(seer_spec_cost_measure(c, sp, &one));
    seer_context_free(c);
    int m, n;
    seer_spec_cost_count(one, &m, &n);
    assert_int_equal(m, 1);
    /* measured where L is short, estimated (and cheap) where it is long */
    static const char text[] =
        "seer-cost 2\nkey t\nb 1 8\nl 16 1024\nn 2 4 8\n"
        "target 1e-3 2e-3 3e-3 4e-3\n"
        "verify 2 1.1e-3 2.1e-3 3.1e-3 4.1e-3\nest verify 2 0 1 0 1\n"
        "verify 4 1.2e-3 2.2e-3 3.2e-3 4.2e-3\nest verify 4 0 1 0 1\n"
        "verify 8 1.4e-3 2.4e-3 3.4e-3 4.4e-3\nest verify 8 0 1 0 1\n"
        "draft streaming 8 1e-5 1e-5 1e-5 1e-5\nest draft streaming 8 0 1 0 1\n"
        "draft ngram 0 0 0 0 0\nend\n";
    seer_spec_cost *part = NULL;
    ASSERT_OK(seer_spec_cost_parse(text, sizeof text - 1, &part));
    seer_spec_cost_count(part, &m, &n);
    assert_true(m < n);
    const seer_spec_cost *tables[] = {one, part};
    for (int t = 0; t < 2; t++) {
        seer_spec_params spec = seer_spec_default_params();
        spec.kind = SEER_SPEC_AUTO;
        spec.cost = tables[t];
        tu_spec_set(&spec, "sinks", 4);
        tu_gen_ctx cx = {.n_ctx = 512, .page_size = 16, .n_batch_max = 128, .kv_quant_bits = 0};
        seer_spec_auto_stats as, sum = {0};
        for (int i = 0; i < 5; i++) {
            tu_gen_run(g_model, spec, prompts[i], 64, &plen[i], 1, 257 - plen[i], tu_greedy(), cx, &got[i], &as);
            char what[64];
            snprintf(what, sizeof what, "partial table %d, prompt %d", t, i);
            tu_assert_same(&got[i], &gold[i], what);
            for (int k = 0; k < SEER_SPEC_AUTO; k++)
                sum.decisions[k] += as.decisions[k];
        }
        int64_t rounds = 0;
        for (int k = 0; k < SEER_SPEC_AUTO; k++)
            rounds += sum.decisions[k];
        printf("partial table %d: %lld rounds, %lld plain, %lld streaming\n", t, (long long)rounds,
               (long long)sum.decisions[SEER_SPEC_NONE], (long long)sum.decisions[SEER_SPEC_STREAMING]);
        if (t == 1) /* drafting was chosen on estimated cells: the margin does not forbid it */
            assert_true(sum.decisions[SEER_SPEC_STREAMING] > 0);
        tu_gen_run(g_model, spec, prompts[0], 64, plen, 5, 256, tu_greedy(), cx, got, &as);
        for (int i = 0; i < 5; i++) {
            tu_output g2 = got[i];
            if (g2.n > gold[i].n)
                g2.n = gold[i].n;
            tu_assert_same(&g2, &gold[i], "partial table batch");
        }
    }
    seer_spec_cost_free(part);
    seer_spec_cost_free(one);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calibrate_runs),
        cmocka_unit_test(test_calibrate_refuses),
        cmocka_unit_test(test_budget_partial),
        cmocka_unit_test(test_budget_bound),
        cmocka_unit_test(test_partial_greedy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
