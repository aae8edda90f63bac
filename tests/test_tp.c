/*
 * test_tp.c: tensor parallelism (src/parallel/). On the CPU, N ranks in one process: the
 * collectives against their definition, each rank on a thread of its own; the ranks' threads
 * (one per rank, rank 0 the caller's) and a failing rank's error; repeated runs bit-identical;
 * the logits of the tiny real model and of a qwen2-shaped model with biases at N = 1, 2, 4, 8 against undivided decoding (N = 1 bit-identical, others
 * within the float reordering of the sums, stated below), the captured queries likewise; greedy
 * output at N = 2 and 4 equal to the reference program's ids, and greedy speculation on vs off
 * bit-identical at the same N with every drafter; sampling; divisions refused with a clear
 * error; the logits of Qwen3, Gemma 2 and 3 and Phi-3 files at N = 1, 2, 4 against undivided
 * decoding. The GPU's side is test_gpu_tp.c.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "parallel/comm.h"
#include "parallel/tp_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The logits of N ranks against undivided decoding: the sums of the attention output and the
 * FFN take their partials in another order, so a logit moves by a few f32 roundings of the
 * residual stream's magnitude. */
#define TP_REL_TOL 2e-5

static void tokens_of(int32_t *tok, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)(tu_rand_u64(&seed) % (uint64_t)V);
}

/* ---- the collectives ---------------------------------------------------------------------- */

/* Each rank calls every collective from a thread of its own, as the backend's workers do. */
enum { COMM_N = 3, COMM_C = 37, COMM_ROWS = 4 };

typedef struct {
    seer_comm *c;
    int r;
    float *buf[2];       /* the all-reduce's buffer, unordered then ordered */
    float *dst;          /* gather_cols' destination (rank 0) */
    const float *src;    /* its block */
    seer_status s;
} comm_rank;

static const int comm_col0[COMM_N] = {0, 2, 6}, comm_nc[COMM_N] = {2, 4, 3};

static void *comm_rank_main(void *p) {
    comm_rank *a = p;
    a->s = SEER_OK;
    for (int ordered = 0; ordered < 2 && a->s == SEER_OK; ordered++)
        a->s = a->c->all_reduce(a->c, a->r, a->buf[ordered], COMM_C, ordered);
    if (a->s == SEER_OK)
        a->s = a->c->gather_cols(a->c, a->r, a->dst, 9, COMM_ROWS, a->src, comm_col0, comm_nc);
    return NULL;
}

static void test_local_comm(void **state) {
    (void)state;
    enum { N = COMM_N, C = COMM_C, ROWS = COMM_ROWS };
    seer_backend *be[N];
    for (int r = 0; r < N; r++)
        ASSERT_OK(seer_backend_cpu_init(1, &be[r]));
    seer_comm *c = NULL;
    ASSERT_OK(be[0]->ops->comm_init(be, N, &c));
    uint64_t rs = 7;
    float buf[2][N][C], want[2][C];
    for (int o = 0; o < 2; o++) {
        for (int r = 0; r < N; r++)
            tu_fill_random(buf[o][r], C, &rs);
        for (int i = 0; i < C; i++)
            want[o][i] = (buf[o][0][i] + buf[o][1][i]) + buf[o][2][i];
    }
    /* three ranks' columns into rows of 9, rank 0's block widened in place */
    float dst[ROWS * 9], p1[ROWS * 4], p2[ROWS * 3], wantg[ROWS * 9];
    tu_fill_random(dst, ROWS * 2, &rs);
    tu_fill_random(p1, ROWS * 4, &rs);
    tu_fill_random(p2, ROWS * 3, &rs);
    for (int t = 0; t < ROWS; t++) {
        memcpy(wantg + t * 9, dst + t * 2, 2 * sizeof(float));
        memcpy(wantg + t * 9 + 2, p1 + t * 4, 4 * sizeof(float));
        memcpy(wantg + t * 9 + 6, p2 + t * 3, 3 * sizeof(float));
    }
    const float *src[N] = {dst, p1, p2};
    comm_rank a[N];
    pthread_t th[N];
    for (int r = 0; r < N; r++) {
        a[r] = (comm_rank){.c = c, .r = r, .buf = {buf[0][r], buf[1][r]}, .dst = r == 0 ? dst : NULL,
                           .src = src[r]};
        assert_int_equal(pthread_create(&th[r], NULL, comm_rank_main, &a[r]), 0);
    }
    for (int r = 0; r < N; r++) {
        pthread_join(th[r], NULL);
        assert_int_equal(a[r].s, SEER_OK);
    }
    for (int o = 0; o < 2; o++)
        for (int r = 0; r < N; r++)
            assert_memory_equal(buf[o][r], want[o], sizeof want[o]);
    assert_memory_equal(dst, wantg, sizeof wantg);
    c->free(c);
    for (int r = 0; r < N; r++)
        be[r]->ops->free(be[r]);
}

/* ---- one thread per rank ------------------------------------------------------------------ */

typedef struct {
    pthread_t th[SEER_TP_MAX];
    int ran[SEER_TP_MAX];
    int fail_rank;
} each_probe;

static seer_status probe_rank(tp_be *t, int r, void *ctx) {
    (void)t;
    each_probe *p = ctx;
    p->th[r] = pthread_self();
    p->ran[r]++;
    if (r == p->fail_rank)
        return seer_err(SEER_ERR_BACKEND, "probe failed on purpose");
    return SEER_OK;
}

/* Every rank's closure runs once per call, rank 0 on the caller's thread and each other rank
 * on a thread of its own, the same one every call; a rank's failure comes back with its rank
 * and message, and the next call runs as before. */
static void test_rank_threads(void **state) {
    (void)state;
    enum { N = 4 };
    seer_backend *ranks[N], *be = NULL;
    for (int r = 0; r < N; r++)
        ASSERT_OK(seer_backend_cpu_init(1, &ranks[r]));
    ASSERT_OK(seer_backend_tp_init(ranks, N, &be));
    tp_be *t = tp_of(be);
    each_probe p = {.fail_rank = -1}, q = {.fail_rank = -1};
    ASSERT_OK(seer_tp_each(t, probe_rank, &p));
    assert_true(pthread_equal(p.th[0], pthread_self()));
    for (int r = 0; r < N; r++) {
        assert_int_equal(p.ran[r], 1);
        for (int k = 0; k < r; k++)
            assert_false(pthread_equal(p.th[r], p.th[k]));
    }
    q.fail_rank = 2;
    assert_int_equal(seer_tp_each(t, probe_rank, &q), SEER_ERR_BACKEND);
    assert_non_null(strstr(seer_last_error(), "rank 2: probe failed on purpose"));
    for (int r = 0; r < N; r++)
        assert_int_equal(q.ran[r], 1); /* the others ran to the end */
    q.fail_rank = -1;
    ASSERT_OK(seer_tp_each(t, probe_rank, &q));
    for (int r = 0; r < N; r++) {
        assert_int_equal(q.ran[r], 2);
        assert_true(pthread_equal(q.th[r], p.th[r]));
    }
    be->ops->free(be);
}

/* ---- logits against undivided decoding (CPU) ------------------------------------------------ */

static void compare_logits(const char *path, const int *tps, int n_tp, const char *what) {
    seer_model *ref = tu_load_tp(path, SEER_BACKEND_CPU, 0);
    seer_model_info in;
    seer_model_get_info(ref, &in);
    const int V = in.n_vocab, n = 24, qd = in.n_heads * in.head_dim;
    int32_t tok[24];
    tokens_of(tok, n, V, 11);
    uint8_t cap[24] = {0};
    cap[3] = cap[17] = 1;
    float *want = malloc(sizeof(float) * n * V), *got = malloc(sizeof(float) * n * V);
    float *qw = malloc(sizeof(float) * in.n_layers * 2 * qd), *qg = malloc(sizeof(float) * in.n_layers * 2 * qd);
    tu_prefill_logits(ref, tok, n, want, cap, qw);
    for (int k = 0; k < n_tp; k++) {
        seer_model *m = tu_load_tp(path, SEER_BACKEND_CPU, tps[k]);
        memset(got, 0xff, sizeof(float) * n * V); /* poisoned: every logit must be written */
        memset(qg, 0xff, sizeof(float) * in.n_layers * 2 * qd);
        tu_prefill_logits(m, tok, n, got, cap, qg);
        double e = tu_rel_err(got, want, (size_t)n * V), eq = tu_rel_err(qg, qw, (size_t)in.n_layers * 2 * qd);
        printf("tp: %s tp %d: logits rel err %.2e, queries %.2e\n", what, tps[k], e, eq);
        if (tps[k] == 1) {
            assert_memory_equal(got, want, sizeof(float) * n * V);
            assert_memory_equal(qg, qw, sizeof(float) * in.n_layers * 2 * qd);
        }
        if (!(e <= TP_REL_TOL) || !(eq <= TP_REL_TOL))
            fail_msg("%s tp %d: logits off by %.3g, queries by %.3g (tolerance %g)", what, tps[k], e, eq, TP_REL_TOL);
        seer_model_free(m);
    }
    free(want);
    free(got);
    free(qw);
    free(qg);
    seer_model_free(ref);
}

static void test_logits_stories(void **state) {
    (void)state;
    /* 8 heads, 4 key/value heads: 2 and 4 ranks divide both, 8 replicate each key/value head
     * on two ranks; the FFN's 172 columns divide unevenly over 8 */
    const int tps[] = {1, 2, 4, 8};
    compare_logits(tu_data_path("models/stories260K.gguf"), tps, 4, "stories260K");
}

/* Four ranks on four threads, summing in the communicator as each arrives: the same bits on
 * every run, however the threads were scheduled. */
static void test_repeatable(void **state) {
    (void)state;
    seer_model *m = tu_load_tp(tu_data_path("models/stories260K.gguf"), SEER_BACKEND_CPU, 4);
    seer_model_info in;
    seer_model_get_info(m, &in);
    const int V = in.n_vocab, n = 24;
    int32_t tok[24];
    tokens_of(tok, n, V, 29);
    float *a = malloc(sizeof(float) * n * V), *b = malloc(sizeof(float) * n * V);
    tu_prefill_logits(m, tok, n, a, NULL, NULL);
    for (int k = 0; k < 4; k++) {
        memset(b, 0xff, sizeof(float) * n * V);
        tu_prefill_logits(m, tok, n, b, NULL, NULL);
        assert_memory_equal(a, b, sizeof(float) * n * V);
    }
    free(a);
    free(b);
    seer_model_free(m);
}

static void test_logits_qwen2(void **state) {
    (void)state;
    const char *path = tu_tmp_path("tp-qwen2.gguf");
    seer_gen_params p = seer_gen_default_params();
    p.arch = "qwen2";
    p.n_vocab = 300;
    p.dim = 64;
    p.n_layers = 2;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.ffn_dim = 96;
    p.ctx = 512;
    p.seed = 5;
    p.scale = 0.2f;
    ASSERT_OK(seer_gen_model(&p, path));
    const int tps[] = {1, 2, 4};
    compare_logits(path, tps, 3, "qwen2 (biases, separate LM head)");
}

/* ---- generation (CPU) -------------------------------------------------------------------- */

static void test_greedy_golden_and_spec(void **state) {
    (void)state;
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], plain[3], got[3];
    const int n = tu_read_golden(prompts, plen, gold);
    assert_true(n >= 3);
    tu_gen_ctx cx = {.n_ctx = 512, .page_size = 8, .n_batch_max = 128};
    const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV, SEER_SPEC_NGRAM};
    const int tps[] = {2, 4};
    for (int k = 0; k < 2; k++) {
        seer_model *m = tu_load_tp(tu_data_path("models/stories260K.gguf"), SEER_BACKEND_CPU, tps[k]);
        /* the reference program's fp32 ids, three prompts in one batch */
        tu_gen_run(m, seer_spec_default_params(), prompts[0], 64, plen, 3, -1, tu_greedy(), cx, plain, NULL);
        for (int i = 0; i < 3; i++) {
            char what[64];
            snprintf(what, sizeof what, "tp %d golden prompt %d", tps[k], i);
            tu_output p = plain[i];
            if (p.n > gold[i].n)
                p.n = gold[i].n;
            tu_assert_same(&p, &gold[i], what);
        }
        for (size_t d = 0; d < sizeof kinds / sizeof *kinds; d++) {
            seer_spec_stats st = tu_gen_run(m, tu_spec(kinds[d], 4, 24), prompts[0], 64, plen, 3, -1, tu_greedy(),
                                            cx, got, NULL);
            assert_true(st.drafted > 0);
            for (int i = 0; i < 3; i++) {
                char what[64];
                snprintf(what, sizeof what, "tp %d %s prompt %d", tps[k], seer_spec_kind_name(kinds[d]), i);
                tu_assert_same(&got[i], &plain[i], what);
            }
        }
        seer_model_free(m);
    }
}

static void test_sampled(void **state) {
    (void)state;
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], a[2], b[2];
    tu_read_golden(prompts, plen, gold);
    tu_gen_ctx cx = {.n_ctx = 256, .page_size = 8, .n_batch_max = 64};
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.seed = 1234;
    seer_model *ref = tu_load_tp(tu_data_path("models/stories260K.gguf"), SEER_BACKEND_CPU, 0);
    seer_model *m = tu_load_tp(tu_data_path("models/stories260K.gguf"), SEER_BACKEND_CPU, 2);
    tu_gen_run(ref, seer_spec_default_params(), prompts[0], 64, plen, 2, 60, sp, cx, a, NULL);
    tu_gen_run(m, seer_spec_default_params(), prompts[0], 64, plen, 2, 60, sp, cx, b, NULL);
    /* the same uniforms over probabilities a few roundings apart: the same draws unless one
     * falls within that distance of a step of the CDF */
    for (int i = 0; i < 2; i++)
        tu_assert_same(&b[i], &a[i], "tp 2 sampled");
    /* speculative sampling through rank 0's acceptance */
    tu_gen_run(m, tu_spec(SEER_SPEC_STREAMING, 3, 16), prompts[0], 64, plen, 2, 60, sp, cx, b, NULL);
    for (int i = 0; i < 2; i++)
        assert_true(b[i].n > 0);
    seer_model_free(m);
    seer_model_free(ref);
}

static void test_refused(void **state) {
    (void)state;
    const char *path = tu_data_path("models/stories260K.gguf");
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 1;
    seer_model *m = (seer_model *)1;
    mp.tp = 3; /* 8 heads do not divide over 3 ranks */
    assert_int_equal(seer_model_load(path, mp, &m), SEER_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(seer_last_error(), "do not divide over 3 ranks"));
    const int bad[] = {-1, SEER_TP_MAX + 1};
    for (int i = 0; i < 2; i++) {
        mp.tp = bad[i];
        assert_int_equal(seer_model_load(path, mp, &m), SEER_ERR_INVALID_ARG);
        assert_null(m);
    }
    /* 16 ranks: one head each would need 16 heads */
    mp.tp = 16;
    assert_int_equal(seer_model_load(path, mp, &m), SEER_ERR_UNSUPPORTED);
    assert_null(m);
}

/* The newer families over N ranks against undivided decoding: per-head q/k norms on each
 * rank's heads (Qwen3, Gemma 3), GeGLU on each rank's FFN columns, the scaled embedding,
 * sandwich norms, windows and soft-capping inside each rank's attention (Gemma 2 and 3), the
 * final soft-cap on each rank's vocabulary, and Phi-3's fused q|k|v and gate|up tensors
 * divided part by part. */
static void test_logits_families(void **state) {
    (void)state;
    static const char *const fams[] = {"qwen3", "gemma2", "gemma3", "phi3"};
    for (int f = 0; f < 4; f++) {
        seer_gen_params p = seer_gen_default_params();
        p.arch = fams[f];
        p.n_vocab = 300;
        p.dim = 64;
        p.n_layers = f == 2 ? 6 : 2; /* Gemma 3: five windowed layers, then a global one */
        p.n_heads = 4;
        p.n_kv_heads = f == 3 ? 4 : 2;
        p.ffn_dim = 96;
        p.ctx = 512;
        p.seed = 7 + (uint64_t)f;
        p.scale = 0.2f;
        p.window = 8; /* the 24-token prompt crosses it */
        char name[64];
        snprintf(name, sizeof name, "tp-%s.gguf", fams[f]);
        const char *path = tu_tmp_path(name);
        ASSERT_OK(seer_gen_model(&p, path));
        const int tps[] = {1, 2, 4};
        compare_logits(path, tps, 3, fams[f]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_comm),
        cmocka_unit_test(test_rank_threads),
        cmocka_unit_test(test_repeatable),
        cmocka_unit_test(test_logits_stories),
        cmocka_unit_test(test_logits_qwen2),
        cmocka_unit_test(test_logits_families),
        cmocka_unit_test(test_greedy_golden_and_spec),
        cmocka_unit_test(test_sampled),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
