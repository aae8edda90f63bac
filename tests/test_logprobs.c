/*
 * test_logprobs.c: per-token log-probabilities of requests (seer_request_params.logprobs) on
 * the tiny real model (stories260K), CPU backend:
 *   - the backend op against a log-softmax written here (ties, NaN, k = 0 and 20);
 *   - a greedy request's values equal the log-softmax of seer_decode's logits at the same
 *     positions computed independently, the top-1 alternative is the chosen token and the
 *     alternatives are in order with exp sums <= 1;
 *   - speculation (n-gram, streaming self-draft, trees) on vs off: the same ids and the same
 *     log-probabilities bit for bit under greedy decoding;
 *   - a sampled request with n-gram drafts accepted (the verifier's probabilities kept apart
 *     from the logits) still reports the raw log-softmax of the emitted tokens;
 *   - the prompt's log-probabilities (prompt_logprobs) equal the log-softmax of the prompt's
 *     logits computed independently, over prefill chunks and with a prefix cache that holds
 *     the prompt already;
 *   - bad settings refused.
 */
#include "testutil.h"

#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static seer_model *M;

static int setup(void **state) {
    (void)state;
    M = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    return M ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    seer_model_free(M);
    return 0;
}

/* log softmax(x)[t], written plainly in double */
static double ref_lp(const float *x, int V, int t) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < V; i++)
        sum += exp((double)x[i] - mx);
    return (double)x[t] - mx - log(sum);
}

/* ---- the op -------------------------------------------------------------------------- */

static void test_op(void **state) {
    (void)state;
    const int V = 1000;
    float *x = malloc(sizeof(float) * 2 * V);
    uint64_t rng = 7;
    tu_fill_random(x, 2 * V, &rng);
    for (int i = 0; i < V; i++)
        x[i] *= 8;
    x[10] = x[20] = 9.f; /* a tie at the top: the lower id first */
    x[30] = NAN;         /* counts as -inf */
    x[V + 5] = 50.f;
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    seer_logprob_row rows[3] = {{x, 20}, {x, 30}, {x + V, 5}};
    float lp[3];
    int32_t id[3 * 20];
    float tl[3 * 20];
    for (int i = 0; i < 60; i++)
        id[i] = -7, tl[i] = NAN;
    ASSERT_OK(be->ops->logprob_rows(be, rows, 3, V, 20, lp, id, tl));
    x[30] = -INFINITY;
    assert_true(fabs(lp[0] - ref_lp(x, V, 20)) < 1e-5);
    assert_true(isinf(lp[1]) && lp[1] < 0);
    assert_true(fabs(lp[2] - ref_lp(x + V, V, 5)) < 1e-5);
    assert_int_equal(id[0], 10);
    assert_int_equal(id[1], 20);
    assert_int_equal(id[40], 5);
    for (int r = 0; r < 3; r++)
        for (int j = 0; j < 20; j++) {
            const int i = r * 20 + j;
            assert_true(id[i] >= 0 && id[i] < V && id[i] != 30);
            assert_true(fabs(tl[i] - ref_lp(x + (r == 2) * V, V, id[i])) < 1e-5);
            if (j)
                assert_true(tl[i] <= tl[i - 1]);
        }
    /* no alternatives; then bad arguments */
    ASSERT_OK(be->ops->logprob_rows(be, rows, 1, V, 0, lp, NULL, NULL));
    assert_int_equal(be->ops->logprob_rows(be, rows, 1, V, 21, lp, id, tl), SEER_ERR_INVALID_ARG);
    seer_logprob_row bad = {x, V};
    assert_int_equal(be->ops->logprob_rows(be, &bad, 1, V, 1, lp, id, tl), SEER_ERR_INVALID_ARG);
    be->ops->free(be);
    free(x);
}

/* ---- requests ------------------------------------------------------------------------ */

typedef struct {
    int32_t ids[128];
    seer_token_logprob lp[128];
    int n;
    int64_t accepted;
} run_out;

static const int32_t PROMPT[] = {1, 403, 407, 261, 378, 1261, 29889, 403, 407, 261, 378, 1261, 29889, 403};

static void run(seer_spec_params spec, seer_sampler_params sp, int top, int max_tokens, run_out *o) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = 2;
    cp.n_batch_max = 64;
    cp.page_size = 16;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(M, cp, &c));
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, seer_sched_default_params(), &s));
    seer_request_params p = seer_request_default_params();
    p.sampler = sp;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.spec = spec;
    p.logprobs = true;
    p.top_logprobs = top;
    const int V = seer_n_vocab(M);
    int32_t prompt[sizeof PROMPT / sizeof *PROMPT];
    for (size_t i = 0; i < sizeof PROMPT / sizeof *PROMPT; i++)
        prompt[i] = PROMPT[i] % V;
    seer_request *r = NULL;
    ASSERT_OK(seer_request_new(M, prompt, sizeof prompt / sizeof *prompt, &p, &r));
    ASSERT_OK(seer_sched_submit(s, r));
    int active = 1;
    while (active)
        ASSERT_OK(seer_sched_step(s, &active));
    const int32_t *ids;
    const seer_token_logprob *lp;
    o->n = seer_request_tokens(r, &ids);
    assert_int_equal(seer_request_logprobs(r, &lp), o->n);
    assert_true(o->n > 0 && o->n <= 128);
    memcpy(o->ids, ids, sizeof(int32_t) * o->n);
    memcpy(o->lp, lp, sizeof *lp * o->n);
    seer_request_stats st;
    seer_request_get_stats(r, &st);
    o->accepted = st.accepted;
    seer_request_free(r);
    seer_sched_free(s);
    seer_context_free(c);
}

/* Every emitted token's values against the log-softmax of the logits seer_decode gives for
 * the prompt and the output in one call. */
static void check_against_decode(const run_out *o, int top, bool greedy) {
    const int V = seer_n_vocab(M), np = sizeof PROMPT / sizeof *PROMPT, n = np + o->n - 1;
    int32_t tok[128];
    for (int i = 0; i < np; i++)
        tok[i] = PROMPT[i] % V;
    memcpy(tok + np, o->ids, sizeof(int32_t) * (o->n - 1));
    float *L = malloc(sizeof(float) * (size_t)n * V);
    tu_prefill_logits(M, tok, n, L, NULL, NULL);
    for (int i = 0; i < o->n; i++) {
        const float *x = L + (size_t)(np - 1 + i) * V;
        const seer_token_logprob *e = &o->lp[i];
        const double want = ref_lp(x, V, o->ids[i]);
        if (fabs(e->logprob - want) > 2e-3)
            fail_msg("token %d (%d): logprob %.6f, log-softmax of the logits %.6f", i, o->ids[i], e->logprob, want);
        assert_int_equal(e->n_top, top);
        double mass = 0;
        for (int j = 0; j < top; j++) {
            assert_true(fabs(e->top_logprob[j] - ref_lp(x, V, e->top_id[j])) < 2e-3);
            if (j)
                assert_true(e->top_logprob[j] <= e->top_logprob[j - 1]);
            mass += exp(e->top_logprob[j]);
        }
        assert_true(mass <= 1 + 1e-5);
        if (greedy && top > 0) {
            assert_int_equal(e->top_id[0], o->ids[i]);
            assert_true(e->top_logprob[0] == e->logprob);
        }
    }
    free(L);
}

static void test_greedy_values(void **state) {
    (void)state;
    run_out o;
    run(seer_spec_default_params(), tu_greedy(), 5, 40, &o);
    check_against_decode(&o, 5, true);
    run_out z; /* no alternatives */
    run(seer_spec_default_params(), tu_greedy(), 0, 10, &z);
    assert_int_equal(z.n, 10);
    assert_int_equal(z.lp[3].n_top, 0);
    assert_true(z.lp[3].logprob == o.lp[3].logprob);
}

static void assert_same(const run_out *a, const run_out *b, const char *what) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        if (a->ids[i] != b->ids[i] || a->lp[i].logprob != b->lp[i].logprob ||
            memcmp(a->lp[i].top_id, b->lp[i].top_id, sizeof(int32_t) * a->lp[i].n_top) ||
            memcmp(a->lp[i].top_logprob, b->lp[i].top_logprob, sizeof(float) * a->lp[i].n_top))
            fail_msg("%s: token %d differs (%d %.9g against %d %.9g)", what, i, a->ids[i], a->lp[i].logprob,
                     b->ids[i], b->lp[i].logprob);
    }
}

static void test_spec_identical(void **state) {
    (void)state;
    run_out off, on;
    run(seer_spec_default_params(), tu_greedy(), 3, 60, &off);
    run(tu_spec(SEER_SPEC_NGRAM, 4, 0), tu_greedy(), 3, 60, &on);
    assert_true(on.accepted > 0);
    assert_same(&off, &on, "ngram");
    run(tu_spec(SEER_SPEC_STREAMING, 3, 24), tu_greedy(), 3, 60, &on);
    assert_same(&off, &on, "streaming");
    seer_spec_params tree = tu_spec(SEER_SPEC_STREAMING, 3, 24);
    tree.tree_size = 6;
    run(tree, tu_greedy(), 3, 60, &on);
    assert_same(&off, &on, "streaming tree");
}

static void test_sampled_spec(void **state) {
    (void)state;
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 0.7f;
    sp.top_p = 0.9f;
    sp.seed = 11;
    run_out o;
    run(tu_spec(SEER_SPEC_NGRAM, 4, 0), sp, 4, 60, &o);
    assert_true(o.accepted > 0); /* the rows of drafted rounds went through the verifier */
    check_against_decode(&o, 4, false);
    seer_spec_params st = tu_spec(SEER_SPEC_STREAMING, 3, 24);
    run(st, sp, 2, 40, &o);
    check_against_decode(&o, 2, false);
}

/* The prompt's values: a prompt cut into chunks of 5, after a request of the same prompt left
 * it in the prefix cache (which a request wanting them must not take rows from). */
static void test_prompt_logprobs(void **state) {
    (void)state;
    const int V = seer_n_vocab(M), np = sizeof PROMPT / sizeof *PROMPT, top = 4;
    int32_t prompt[sizeof PROMPT / sizeof *PROMPT];
    for (int i = 0; i < np; i++)
        prompt[i] = PROMPT[i] % V;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = 3;
    cp.n_batch_max = 64;
    cp.page_size = 4;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(M, cp, &c));
    seer_sched_params sch = seer_sched_default_params();
    sch.prefill_chunk = 5;
    sch.prefix_cache = 1;
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, sch, &s));
    float *L = malloc(sizeof(float) * (size_t)np * V);
    tu_prefill_logits(M, prompt, np, L, NULL, NULL);
    for (int round = 0; round < 2; round++) {
        seer_request_params p = seer_request_default_params();
        p.sampler = tu_greedy();
        p.max_tokens = 3;
        p.prompt_logprobs = round == 1;
        p.top_logprobs = top;
        seer_request *r = NULL;
        ASSERT_OK(seer_request_new(M, prompt, np, &p, &r));
        const seer_token_logprob *lp = (const seer_token_logprob *)1;
        assert_int_equal(seer_request_prompt_logprobs(r, &lp), 0); /* not computed yet */
        assert_null(lp);
        ASSERT_OK(seer_sched_submit(s, r));
        int active = 1;
        while (active)
            ASSERT_OK(seer_sched_step(s, &active));
        seer_request_stats st;
        seer_request_get_stats(r, &st);
        if (round == 0) {
            assert_int_equal(seer_request_prompt_logprobs(r, &lp), 0);
            seer_request_free(r);
            continue;
        }
        assert_int_equal(st.n_prefix_reused, 0);
        assert_int_equal(seer_request_prompt_logprobs(r, &lp), np);
        assert_true(isnan(lp[0].logprob));
        assert_int_equal(lp[0].n_top, 0);
        for (int i = 1; i < np; i++) {
            const float *x = L + (size_t)(i - 1) * V;
            if (fabs(lp[i].logprob - ref_lp(x, V, prompt[i])) > 2e-3)
                fail_msg("prompt token %d: %.6f against %.6f", i, lp[i].logprob, ref_lp(x, V, prompt[i]));
            assert_int_equal(lp[i].n_top, top);
            for (int j = 0; j < top; j++) {
                assert_true(fabs(lp[i].top_logprob[j] - ref_lp(x, V, lp[i].top_id[j])) < 2e-3);
                if (j)
                    assert_true(lp[i].top_logprob[j] <= lp[i].top_logprob[j - 1]);
            }
        }
        seer_request_free(r);
    }
    free(L);
    seer_sched_free(s);
    seer_context_free(c);
}

static void test_bad(void **state) {
    (void)state;
    seer_request_params p = seer_request_default_params();
    p.logprobs = true;
    p.top_logprobs = SEER_TOP_LOGPROBS_MAX + 1;
    const int32_t t[2] = {1, 2};
    seer_request *r = (seer_request *)1;
    assert_int_equal(seer_request_new(M, t, 2, &p, &r), SEER_ERR_INVALID_ARG);
    assert_null(r);
    p.top_logprobs = -1;
    assert_int_equal(seer_request_new(M, t, 2, &p, &r), SEER_ERR_INVALID_ARG);
    p.logprobs = false;
    p.prompt_logprobs = true;
    assert_int_equal(seer_request_new(M, t, 2, &p, &r), SEER_ERR_INVALID_ARG);
    p.prompt_logprobs = false;
    /* none asked: none kept */
    p.logprobs = false;
    ASSERT_OK(seer_request_new(M, t, 2, &p, &r));
    const seer_token_logprob *lp = (const seer_token_logprob *)1;
    assert_int_equal(seer_request_logprobs(r, &lp), 0);
    assert_null(lp);
    seer_request_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op),
        cmocka_unit_test(test_greedy_values),
        cmocka_unit_test(test_spec_identical),
        cmocka_unit_test(test_sampled_spec),
        cmocka_unit_test(test_prompt_logprobs),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
