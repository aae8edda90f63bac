/*
 * test_gen_ext.c: a generator's sequences with structured output and log-probabilities
 * (seer_gen_add_ext, seer_gen_logprobs) on the tiny real model (stories260K), CPU backend:
 *   - greedy and sampled log-probabilities equal the log-softmax of seer_decode's logits at
 *     the same positions (the first token's, from the prefill, included), with speculation
 *     and without; greedy ids and values bit-identical with speculation on and off, and the
 *     same as a scheduler's request's;
 *   - a constraint (a grammar) holds every output, with speculation on and off (same ids),
 *     the same ids as a request with that constraint, and the caller's constraint untouched;
 *   - bad parameters refused with nothing added; a sequence that asked for none has none.
 */
#include "testutil.h"

#include <math.h>
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

static const int32_t PROMPT[] = {1, 403, 407, 261, 378, 1261, 29889, 403, 407, 261, 378, 1261, 29889, 403};
#define NP ((int)(sizeof PROMPT / sizeof *PROMPT))

typedef struct {
    int32_t ids[128];
    seer_token_logprob lp[128];
    int n, n_lp;
    int64_t accepted;
} gen_out;

static void prompt_ids(int32_t *p) {
    for (int i = 0; i < NP; i++)
        p[i] = PROMPT[i] % seer_n_vocab(M);
}

static seer_context *ctx_new(void) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = 2;
    cp.n_batch_max = 64;
    cp.page_size = 16;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(M, cp, &c));
    return c;
}

static void run_gen(seer_spec_params spec, seer_sampler_params sp, const seer_gen_seq_params *xp, int max_new,
                    gen_out *o) {
    seer_context *c = ctx_new();
    seer_gen *g = NULL;
    ASSERT_OK(seer_gen_init(c, spec, &g));
    int32_t prompt[NP];
    prompt_ids(prompt);
    int h, active = 1;
    ASSERT_OK(seer_gen_add_ext(g, prompt, NP, max_new, sp, true, xp, &h));
    while (active)
        ASSERT_OK(seer_gen_step(g, &active));
    const int32_t *ids;
    const seer_token_logprob *lp;
    o->n = seer_gen_output(g, h, &ids);
    o->n_lp = seer_gen_logprobs(g, h, &lp);
    assert_true(o->n > 0 && o->n <= 128);
    memcpy(o->ids, ids, sizeof(int32_t) * o->n);
    if (o->n_lp > 0)
        memcpy(o->lp, lp, sizeof *lp * o->n_lp);
    seer_spec_stats st;
    seer_gen_stats(g, &st);
    o->accepted = st.accepted;
    seer_gen_free(g);
    seer_context_free(c);
}

/* The same through a scheduler's request. */
static void run_request(seer_spec_params spec, seer_sampler_params sp, const seer_gen_seq_params *xp, int max_new,
                        gen_out *o) {
    seer_context *c = ctx_new();
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, seer_sched_default_params(), &s));
    seer_request_params p = seer_request_default_params();
    p.sampler = sp;
    p.max_tokens = max_new;
    p.ignore_eos = true;
    p.spec = spec;
    p.logprobs = xp->logprobs;
    p.top_logprobs = xp->top_logprobs;
    p.constraint = xp->constraint;
    int32_t prompt[NP];
    prompt_ids(prompt);
    seer_request *r = NULL;
    ASSERT_OK(seer_request_new(M, prompt, NP, &p, &r));
    ASSERT_OK(seer_sched_submit(s, r));
    int active = 1;
    while (active)
        ASSERT_OK(seer_sched_step(s, &active));
    const int32_t *ids;
    const seer_token_logprob *lp;
    o->n = seer_request_tokens(r, &ids);
    o->n_lp = seer_request_logprobs(r, &lp);
    memcpy(o->ids, ids, sizeof(int32_t) * o->n);
    if (o->n_lp > 0)
        memcpy(o->lp, lp, sizeof *lp * o->n_lp);
    seer_request_free(r);
    seer_sched_free(s);
    seer_context_free(c);
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

/* Every generated token's values against the log-softmax of the logits of one seer_decode
 * call over the prompt and the output. */
static void check_against_decode(const gen_out *o, int top) {
    const int V = seer_n_vocab(M), n = NP + o->n - 1;
    assert_int_equal(o->n_lp, o->n);
    int32_t tok[160];
    prompt_ids(tok);
    memcpy(tok + NP, o->ids, sizeof(int32_t) * (o->n - 1));
    float *L = malloc(sizeof(float) * (size_t)n * V);
    tu_prefill_logits(M, tok, n, L, NULL, NULL);
    for (int i = 0; i < o->n; i++) {
        const float *x = L + (size_t)(NP - 1 + i) * V;
        const seer_token_logprob *e = &o->lp[i];
        if (fabs(e->logprob - ref_lp(x, V, o->ids[i])) > 2e-3)
            fail_msg("token %d (%d): logprob %.6f, log-softmax %.6f", i, o->ids[i], e->logprob,
                     ref_lp(x, V, o->ids[i]));
        assert_int_equal(e->n_top, top);
        for (int j = 0; j < top; j++) {
            assert_true(fabs(e->top_logprob[j] - ref_lp(x, V, e->top_id[j])) < 2e-3);
            if (j)
                assert_true(e->top_logprob[j] <= e->top_logprob[j - 1]);
        }
    }
    free(L);
}

static void assert_same(const gen_out *a, const gen_out *b, bool lp, const char *what) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        const bool differ = a->ids[i] != b->ids[i] ||
                            (lp && (a->lp[i].logprob != b->lp[i].logprob || a->lp[i].n_top != b->lp[i].n_top ||
                                    memcmp(a->lp[i].top_id, b->lp[i].top_id, sizeof(int32_t) * a->lp[i].n_top)));
        if (differ)
            fail_msg("%s: token %d differs (%d against %d)", what, i, a->ids[i], b->ids[i]);
    }
}

static void test_logprobs(void **state) {
    (void)state;
    seer_gen_seq_params xp = seer_gen_seq_default_params();
    xp.logprobs = true;
    xp.top_logprobs = 5;
    gen_out off, on, req;
    run_gen(seer_spec_default_params(), tu_greedy(), &xp, 40, &off);
    check_against_decode(&off, 5);
    for (int i = 0; i < off.n; i++) /* greedy: the chosen token is the likeliest */
        assert_int_equal(off.lp[i].top_id[0], off.ids[i]);
    run_gen(tu_spec(SEER_SPEC_NGRAM, 4, 0), tu_greedy(), &xp, 40, &on);
    assert_true(on.accepted > 0);
    assert_same(&off, &on, true, "ngram");
    run_gen(tu_spec(SEER_SPEC_STREAMING, 3, 24), tu_greedy(), &xp, 40, &on);
    assert_same(&off, &on, true, "streaming");
    run_request(seer_spec_default_params(), tu_greedy(), &xp, 40, &req);
    assert_same(&off, &req, true, "request");
    /* sampled, drafts accepted: the raw log-softmax of the emitted tokens */
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 0.7f;
    sp.top_p = 0.9f;
    sp.seed = 11;
    xp.top_logprobs = 3;
    run_gen(tu_spec(SEER_SPEC_NGRAM, 4, 0), sp, &xp, 60, &on);
    assert_true(on.accepted > 0);
    check_against_decode(&on, 3);
    run_gen(seer_spec_default_params(), sp, &xp, 20, &on);
    check_against_decode(&on, 3);
}

/* Whether ids are a sentence of the constraint's language so far, on a copy of its state. */
static void assert_allowed(const seer_constraint *con, const gen_out *o) {
    seer_constraint *c = NULL;
    ASSERT_OK(seer_constraint_clone(con, &c));
    for (int i = 0; i < o->n; i++)
        if (seer_constraint_accept(c, o->ids[i]) != SEER_OK && !seer_token_is_eog(M, o->ids[i]))
            fail_msg("token %d (%d) refused by the constraint", i, o->ids[i]);
    seer_constraint_free(c);
}

static void test_constraint(void **state) {
    (void)state;
    const char *gram = "root ::= \"Once\" ( \" \" [a-z]+ )+ \".\"";
    seer_constraint *con = NULL;
    ASSERT_OK(seer_constraint_new(M, SEER_CONSTRAINT_GRAMMAR, gram, strlen(gram), &con));
    seer_gen_seq_params xp = seer_gen_seq_default_params();
    xp.constraint = con;
    gen_out off, on, req, free_run;
    run_gen(seer_spec_default_params(), tu_greedy(), NULL, 40, &free_run);
    run_gen(seer_spec_default_params(), tu_greedy(), &xp, 40, &off);
    assert_allowed(con, &off);
    assert_int_equal(off.n_lp, 0);
    bool differs = off.n != free_run.n;
    for (int i = 0; !differs && i < off.n; i++)
        differs = off.ids[i] != free_run.ids[i];
    assert_true(differs); /* the constraint changed the output */
    run_gen(tu_spec(SEER_SPEC_STREAMING, 3, 24), tu_greedy(), &xp, 40, &on);
    assert_same(&off, &on, false, "streaming, constrained");
    run_gen(tu_spec(SEER_SPEC_NGRAM, 4, 0), tu_greedy(), &xp, 40, &on);
    assert_same(&off, &on, false, "ngram, constrained");
    run_request(seer_spec_default_params(), tu_greedy(), &xp, 40, &req);
    assert_same(&off, &req, false, "request, constrained");
    assert_int_equal(seer_constraint_n_accepted(con), 0); /* the caller's state is untouched */
    /* sampled under the constraint, with log-probabilities */
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 1.0f;
    sp.seed = 5;
    xp.logprobs = true;
    xp.top_logprobs = 2;
    run_gen(tu_spec(SEER_SPEC_STREAMING, 3, 24), sp, &xp, 40, &on);
    assert_allowed(con, &on);
    check_against_decode(&on, 2);
    seer_constraint_free(con);
}

static void test_bad(void **state) {
    (void)state;
    seer_context *c = ctx_new();
    seer_gen *g = NULL;
    ASSERT_OK(seer_gen_init(c, seer_spec_default_params(), &g));
    int32_t prompt[NP];
    prompt_ids(prompt);
    const int free0 = seer_kv_free_pages(c);
    seer_gen_seq_params xp = seer_gen_seq_default_params();
    xp.logprobs = true;
    xp.top_logprobs = SEER_TOP_LOGPROBS_MAX + 1;
    int h = -5;
    assert_int_equal(seer_gen_add_ext(g, prompt, NP, 4, tu_greedy(), true, &xp, &h), SEER_ERR_INVALID_ARG);
    xp.top_logprobs = -1;
    assert_int_equal(seer_gen_add_ext(g, prompt, NP, 4, tu_greedy(), true, &xp, &h), SEER_ERR_INVALID_ARG);
    assert_int_equal(h, -5);
    assert_int_equal(seer_kv_free_pages(c), free0);
    const seer_token_logprob *lp = (const seer_token_logprob *)1;
    assert_int_equal(seer_gen_logprobs(g, 0, &lp), -1);
    assert_null(lp);
    /* none asked: none kept */
    ASSERT_OK(seer_gen_add_ext(g, prompt, NP, 4, tu_greedy(), true, NULL, &h));
    lp = (const seer_token_logprob *)1;
    assert_int_equal(seer_gen_logprobs(g, h, &lp), 0);
    assert_null(lp);
    assert_int_equal(seer_gen_logprobs(NULL, h, &lp), -1);
    seer_gen_free(g);
    seer_context_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_constraint),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
