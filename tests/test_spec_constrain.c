/*
 * test_spec_constrain.c: structured output inside speculation (src/spec/constrain_rows.c),
 * through the scheduler's requests:
 *   - greedy output under a constraint is the same with every drafter (chains and trees, the
 *     draft model and the hierarchy) as without speculation, and the grammar accepts it;
 *   - forced tokens are drafted (jump-forward) and accepted: a literal the grammar forces is
 *     emitted in few verification calls even by a drafter that finds nothing;
 *   - sampling under a constraint, with speculation, follows the target's distribution masked
 *     to the grammar and renormalised (chi-square over the first three tokens), and the same
 *     test fails a wrong rule: the mask left off the target's rows (the mask on the
 *     drafter's rows alone; on the target's alone would be exact, as any q is);
 *   - logit_bias: greedy with speculation equals greedy without, and a bias of +100 on a token
 *     makes greedy emit it.
 */
#include "testutil.h"

#include "constrain/grammar.h"
#include "sample/sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char *gen_model(const char *name, int vocab, int dim, uint64_t seed, float scale) {
    static char paths[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(paths[k], sizeof paths[k], "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = "llama";
    p.n_vocab = vocab;
    p.dim = dim;
    p.n_layers = 2;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.ffn_dim = dim * 2;
    p.ctx = 512;
    p.seed = seed;
    p.scale = scale;
    ASSERT_OK(seer_gen_model(&p, paths[k]));
    return paths[k];
}

typedef struct {
    int32_t ids[256];
    int n;
    seer_request_stats st;
    char text[2048];
} run_out;

/* Runs prompts [n] (each plen tokens) as requests with spec, sampler sp and constraint con
 * (may be NULL), into out [n]. */
static void run_sched(seer_model *m, seer_spec_params spec, int32_t prompts[][32], const int *plen, int n,
                      int max_new, seer_sampler_params sp, const seer_constraint *con, run_out *out) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = n;
    cp.n_batch_max = 64;
    cp.page_size = 16;
    cp.kv_quant_bits = spec.kind == SEER_SPEC_QUANTKV ||
                               (spec.kind == SEER_SPEC_HIERARCHY && (int)tu_spec_get(&spec, "hier_base") == SEER_SPEC_QUANTKV)
                           ? 8 : 0;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, seer_sched_default_params(), &s));
    seer_request *r[8];
    for (int i = 0; i < n; i++) {
        seer_request_params p = seer_request_default_params();
        p.sampler = sp;
        p.max_tokens = max_new;
        p.spec = spec;
        p.constraint = con;
        ASSERT_OK(seer_request_new(m, prompts[i], plen[i], &p, &r[i]));
        ASSERT_OK(seer_sched_submit(s, r[i]));
    }
    int active = 1;
    for (int steps = 0; active; steps++) {
        ASSERT_OK(seer_sched_step(s, &active));
        assert_true(steps < 100000);
    }
    for (int i = 0; i < n; i++) {
        const int32_t *ids;
        out[i].n = seer_request_tokens(r[i], &ids);
        assert_true(out[i].n <= 256);
        memcpy(out[i].ids, ids, sizeof(int32_t) * out[i].n); /* the generated tokens */
        seer_request_get_stats(r[i], &out[i].st);
        size_t len = 0;
        const char *t = seer_request_text(r[i], &len);
        snprintf(out[i].text, sizeof out[i].text, "%s", t);
        seer_request_free(r[i]);
    }
    seer_sched_free(s);
    seer_context_free(c);
}

static void assert_same(const run_out *a, const run_out *b, const char *what) {
    if (a->n != b->n || memcmp(a->ids, b->ids, sizeof(int32_t) * a->n) != 0) {
        int j = 0;
        while (j < a->n && j < b->n && a->ids[j] == b->ids[j])
            j++;
        fail_msg("%s: outputs differ at token %d (lengths %d and %d)", what, j, a->n, b->n);
    }
}

static seer_spec_params with_tree(seer_spec_params sp, int size, int depth) {
    sp.tree_size = size;
    sp.tree_depth = depth;
    sp.gamma = depth;
    return sp;
}

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":10},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"bb\",\"once\"]},\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\",\"tags\"],\"additionalProperties\":false}";

/* Greedy under a JSON schema on stories260K: every drafter gives the output of plain
 * decoding, and that output is JSON the schema's grammar accepts. */
static void test_greedy_identical(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_constraint *con = NULL;
    ASSERT_OK(seer_constraint_new(m, SEER_CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &con));
    char *gtext = NULL;
    ASSERT_OK(seer_constraint_grammar_text(SEER_CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &gtext));
    seer_grammar *g = NULL;
    ASSERT_OK(seer_grammar_parse(gtext, strlen(gtext), &g));
    free(gtext);
    int32_t prompts[3][32];
    int plen[3];
    static const char *const texts[3] = {"Once upon a time", "The cat sat", "Lily wanted a"};
    for (int i = 0; i < 3; i++)
        ASSERT_OK(seer_tokenize(m, texts[i], strlen(texts[i]), true, false, prompts[i], 32, &plen[i]));
    const int max_new = 80;
    run_out plain[3], got[3];
    run_sched(m, seer_spec_default_params(), prompts, plen, 3, max_new, tu_greedy(), con, plain);
    for (int i = 0; i < 3; i++) {
        print_message("plain %d: %s\n", i, plain[i].text);
        assert_true(plain[i].n > 5);
        assert_true(seer_grammar_accepts(g, plain[i].text, strlen(plain[i].text), false));
    }
    /* at least one finished its document and stopped there */
    bool complete = false;
    for (int i = 0; i < 3; i++)
        complete |= seer_grammar_accepts(g, plain[i].text, strlen(plain[i].text), true) &&
                    plain[i].n < max_new;
    assert_true(complete);

    seer_spec_params specs[16];
    const char *names[16];
    int ns = 0;
    const seer_spec_kind chains[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV,
                                     SEER_SPEC_QUANTKV, SEER_SPEC_NGRAM, SEER_SPEC_DRAFT};
    for (size_t k = 0; k < sizeof chains / sizeof *chains; k++) {
        specs[ns] = tu_spec(chains[k], 4, 24);
        specs[ns].draft_model = d;
        names[ns++] = seer_spec_kind_name(chains[k]);
    }
    const seer_spec_kind trees[] = {SEER_SPEC_STREAMING, SEER_SPEC_DRAFT, SEER_SPEC_NGRAM};
    for (size_t k = 0; k < sizeof trees / sizeof *trees; k++) {
        specs[ns] = with_tree(tu_spec(trees[k], 3, 24), 7, 3);
        specs[ns].draft_model = d;
        names[ns++] = "tree";
    }
    specs[ns] = tu_spec(SEER_SPEC_HIERARCHY, 4, 16);
    tu_spec_set(&specs[ns], "hier_base", SEER_SPEC_STREAMING);
    tu_spec_set(&specs[ns], "hier_gamma", 2);
    tu_spec_set(&specs[ns], "kv_view", SEER_SPEC_STREAMING);
    specs[ns].draft_model = d;
    names[ns++] = "hierarchy";
    for (int k = 0; k < ns; k++) {
        run_sched(m, specs[k], prompts, plen, 3, max_new, tu_greedy(), con, got);
        int64_t drafted = 0, accepted = 0;
        for (int i = 0; i < 3; i++) {
            char what[96];
            snprintf(what, sizeof what, "greedy under a schema, %s (spec %d), prompt %d", names[k], k, i);
            assert_same(&got[i], &plain[i], what);
            drafted += got[i].st.drafted;
            accepted += got[i].st.accepted;
        }
        print_message("%-10s drafted %lld accepted %lld\n", names[k], (long long)drafted, (long long)accepted);
        assert_true(drafted > 0);
    }
    seer_grammar_free(g);
    seer_constraint_free(con);
    seer_model_free(d);
    seer_model_free(m);
}

/* A literal the grammar forces reaches the target as drafts: n-gram finds nothing in a prompt
 * of distinct bytes, yet the literal is accepted many tokens per call. Byte-level vocabulary
 * (gen_model's 256 byte tokens; lowercase letters have no second piece at this size): every
 * byte of the literal is a forced token. */
static void test_jump_forward(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(gen_model("jf.gguf", 300, 32, 5, 0.5f));
    const char *gram = "root ::= [a-h] [a-h] \"qrstuvwxyzklmnopqrst\" [a-h] [a-h]";
    seer_constraint *con = NULL;
    ASSERT_OK(seer_constraint_new(m, SEER_CONSTRAINT_GRAMMAR, gram, strlen(gram), &con));
    int32_t prompts[1][32];
    int plen[1] = {12};
    for (int j = 0; j < 12; j++)
        prompts[0][j] = 3 + j * 7; /* distinct: no n-gram match */
    run_out plain[1], jf[1];
    run_sched(m, seer_spec_default_params(), prompts, plen, 1, 40, tu_greedy(), con, plain);
    seer_spec_params sp = tu_spec(SEER_SPEC_NGRAM, 8, 0);
    run_sched(m, sp, prompts, plen, 1, 40, tu_greedy(), con, jf);
    assert_same(&jf[0], &plain[0], "jump-forward");
    print_message("plain: %lld rounds; n-gram with jump-forward: %lld rounds, %lld drafted, %lld accepted: %s\n",
                  (long long)plain[0].st.rounds, (long long)jf[0].st.rounds, (long long)jf[0].st.drafted,
                  (long long)jf[0].st.accepted, jf[0].text);
    assert_int_equal(strlen(jf[0].text), 24);
    assert_non_null(strstr(jf[0].text, "qrstuvwxyzklmnopqrst"));
    /* 20 forced bytes at up to 8 drafts per call: all accepted */
    assert_true(jf[0].st.accepted >= 18);
    assert_true(jf[0].st.rounds <= plain[0].st.rounds - 15);
    /* the switch: the same request without forced drafts gives the same text, in about one
     * call per token */
    run_out off[1];
    seer_constraint_set_options(con, SEER_CONSTRAINT_NO_FORCED_DRAFTS);
    run_sched(m, sp, prompts, plen, 1, 40, tu_greedy(), con, off);
    assert_same(&off[0], &plain[0], "jump-forward off");
    print_message("n-gram without jump-forward: %lld rounds, %lld drafted, %lld accepted\n",
                  (long long)off[0].st.rounds, (long long)off[0].st.drafted, (long long)off[0].st.accepted);
    assert_true(off[0].st.accepted < 5);
    assert_true(off[0].st.rounds >= plain[0].st.rounds - 5);
    seer_constraint_free(con);
    seer_model_free(m);
}

/* The masks computed on a helper thread while the forward call runs (mask_ahead.c) against
 * the order before it (SEER_CONSTRAINT_MASKS_BEFORE_CALL: every row's mask on the calling
 * thread before the call): the same tokens, drafts and acceptances with every kind of
 * drafter, greedy and sampled (the sampled draws use the same uniforms, so they match too). */
static void test_masks_overlapped(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_constraint *con = NULL, *before = NULL;
    ASSERT_OK(seer_constraint_new(m, SEER_CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &con));
    ASSERT_OK(seer_constraint_clone(con, &before));
    seer_constraint_set_options(before, SEER_CONSTRAINT_MASKS_BEFORE_CALL);
    assert_int_equal(seer_constraint_options(before), SEER_CONSTRAINT_MASKS_BEFORE_CALL);
    assert_int_equal(seer_constraint_options(con), 0);
    int32_t prompts[3][32];
    int plen[3];
    static const char *const texts[3] = {"Once upon a time", "The cat sat", "Lily wanted a"};
    for (int i = 0; i < 3; i++)
        ASSERT_OK(seer_tokenize(m, texts[i], strlen(texts[i]), true, false, prompts[i], 32, &plen[i]));
    seer_spec_params specs[5] = {seer_spec_default_params(), tu_spec(SEER_SPEC_NGRAM, 4, 24),
                                 tu_spec(SEER_SPEC_DRAFT, 4, 24), tu_spec(SEER_SPEC_STREAMING, 4, 24),
                                 with_tree(tu_spec(SEER_SPEC_NGRAM, 3, 24), 7, 3)};
    seer_sampler_params samp = tu_greedy();
    samp.temperature = 0.8f;
    samp.seed = 7;
    for (int k = 0; k < 5; k++) {
        specs[k].draft_model = d;
        for (int t = 0; t < 2; t++) {
            run_out a[3], b[3];
            const seer_sampler_params sp = t ? samp : tu_greedy();
            run_sched(m, specs[k], prompts, plen, 3, 60, sp, con, a);
            run_sched(m, specs[k], prompts, plen, 3, 60, sp, before, b);
            for (int i = 0; i < 3; i++) {
                char what[96];
                snprintf(what, sizeof what, "masks overlapped vs before the call, spec %d, %s, prompt %d", k,
                         t ? "sampled" : "greedy", i);
                assert_same(&a[i], &b[i], what);
                assert_int_equal(a[i].st.drafted, b[i].st.drafted);
                assert_int_equal(a[i].st.accepted, b[i].st.accepted);
                assert_true(a[i].n > 3);
            }
        }
    }
    seer_constraint_free(before);
    seer_constraint_free(con);
    seer_model_free(d);
    seer_model_free(m);
}

/* ---- distribution ------------------------------------------------------------------------- */

typedef struct {
    int32_t t[3];
    double p;
} cell;

/* The exact distribution of the first three tokens: the target's probabilities under sp with
 * the constraint's mask after each prefix (seer_sampler_probs_masked), i.e. masked and
 * renormalised before top-k/top-p/min-p. */
static int exact_cells(seer_model *m, const int32_t *prompt, int n, seer_sampler_params sp,
                       seer_constraint *con, cell *cells, int cap) {
    const int V = seer_n_vocab(m);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    float *lg = malloc(sizeof(float) * V), *pr[3];
    for (int k = 0; k < 3; k++)
        pr[k] = malloc(sizeof(float) * V);
    void *scratch = malloc(seer_sampler_scratch_bytes(V));
    seer_seq_id q;
    ASSERT_OK(seer_seq_new(c, &q));
    int32_t toks[64];
    memcpy(toks, prompt, sizeof(int32_t) * n);
    int nc = 0;
    int32_t path[3];
    /* probabilities after toks[0 .. n + depth) */
    #define PROBS(depth)                                                                      \
        do {                                                                                  \
            const int len_ = n + (depth);                                                     \
            ASSERT_OK(seer_seq_rewind(c, q, 0));                                              \
            int32_t sq[64], pos[64];                                                          \
            uint8_t w[64] = {0};                                                              \
            for (int i_ = 0; i_ < len_; i_++)                                                 \
                sq[i_] = q, pos[i_] = i_;                                                     \
            w[len_ - 1] = 1;                                                                  \
            seer_batch b_ = {.n_tokens = len_, .token = toks, .seq = sq, .pos = pos, .logits = w}; \
            ASSERT_OK(seer_decode(c, &b_, lg));                                               \
            const uint32_t *mk_ = seer_constraint_mask_after(con, path, (depth));             \
            assert_non_null(mk_);                                                             \
            seer_sampler_probs_masked(&sp, toks, len_, mk_, lg, pr[depth], V, scratch);       \
        } while (0)
    PROBS(0);
    for (int a = 0; a < V; a++) {
        if (pr[0][a] == 0)
            continue;
        toks[n] = path[0] = a;
        PROBS(1);
        for (int b = 0; b < V; b++) {
            if (pr[1][b] == 0)
                continue;
            toks[n + 1] = path[1] = b;
            PROBS(2);
            for (int cc = 0; cc < V; cc++)
                if (pr[2][cc] > 0) {
                    assert_true(nc < cap);
                    cells[nc].t[0] = a, cells[nc].t[1] = b, cells[nc].t[2] = cc;
                    cells[nc++].p = (double)pr[0][a] * pr[1][b] * pr[2][cc];
                }
        }
    }
    #undef PROBS
    free(lg), free(pr[0]), free(pr[1]), free(pr[2]), free(scratch);
    seer_context_free(c);
    return nc;
}

/* chi-square of n_runs seeded runs of requests with spec against the exact cells, over the
 * critical value at 1e-6; outcomes outside the cells (the grammar's or the target's support)
 * join the pooled cell of small expectations. */
static double chi2_runs(seer_model *m, seer_spec_params spec, const int32_t *prompt, int n, seer_sampler_params sp,
                        const seer_constraint *con, const cell *cells, int nc, int n_runs, long *outside) {
    long *count = calloc((size_t)nc, sizeof(long));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch_max = 32;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, seer_sched_default_params(), &s));
    long other = 0;
    for (int r = 0; r < n_runs; r++) {
        seer_request_params p = seer_request_default_params();
        p.sampler = sp;
        p.sampler.seed = 1000 + (uint64_t)r;
        p.max_tokens = 3;
        p.ignore_eos = true;
        p.spec = spec;
        p.constraint = con;
        seer_request *rq = NULL;
        ASSERT_OK(seer_request_new(m, prompt, n, &p, &rq));
        ASSERT_OK(seer_sched_submit(s, rq));
        int active = 1;
        while (active)
            ASSERT_OK(seer_sched_step(s, &active));
        const int32_t *ids;
        /* a token the grammar refuses ends the request early: outside too */
        const int nt = seer_request_tokens(rq, &ids);
        int k = nt == 3 ? 0 : nc;
        while (k < nc && memcmp(cells[k].t, ids, sizeof cells[k].t))
            k++;
        if (k < nc)
            count[k]++;
        else
            other++;
        seer_request_free(rq);
    }
    seer_sched_free(s);
    seer_context_free(c);
    double chi = 0, pool_e = 0, pool_o = (double)other;
    int used = 0;
    for (int k = 0; k < nc; k++) {
        const double e = cells[k].p * n_runs;
        if (e < 5) {
            pool_e += e, pool_o += count[k];
            continue;
        }
        chi += (count[k] - e) * (count[k] - e) / e;
        used++;
    }
    if (pool_e > 0 || pool_o > 0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / (pool_e > 1 ? pool_e : 1);
        used++;
    }
    free(count);
    *outside = other;
    return chi / tu_chi2_crit(used - 1);
}

static void test_distribution(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(gen_model("cd.gguf", 300, 32, 21, 0.6f));
    seer_model *d = tu_load_cpu(gen_model("cdd.gguf", 300, 16, 22, 0.6f));
    /* a grammar whose mask changes with the position; byte tokens stand for its characters */
    const char *gram = "root ::= [a-p] [a-h0-7] [0-9a-z]+";
    seer_constraint *con = NULL;
    ASSERT_OK(seer_constraint_new(m, SEER_CONSTRAINT_GRAMMAR, gram, strlen(gram), &con));
    /* a prompt of allowed bytes repeating with period 6: the n-gram draft finds matches */
    int32_t prompt[24];
    {
        const int32_t *ids;
        int32_t buf[64];
        int nb = 0;
        ASSERT_OK(seer_tokenize(m, "ab1cd2ab1cd2ab1cd2ab1cd2", 24, false, false, buf, 64, &nb));
        (void)ids;
        assert_true(nb >= 12);
        for (int i = 0; i < 24; i++)
            prompt[i] = buf[i % nb];
    }
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 0.9f;
    sp.top_k = 4;
    sp.top_p = 0.9f;
    sp.min_p = 0.02f;
    cell cells[64];
    const int nc = exact_cells(m, prompt, 24, sp, con, cells, 64);
    print_message("%d cells\n", nc);
    assert_true(nc >= 8);
    const int runs = 3000;
    const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_DRAFT, SEER_SPEC_NGRAM};
    for (int k = 0; k < 3; k++) {
        seer_spec_params spec = tu_spec(kinds[k], 3, 6);
        tu_spec_set(&spec, "sinks", 2);
        spec.draft_model = d;
        long outside;
        const double r = chi2_runs(m, spec, prompt, 24, sp, con, cells, nc, runs, &outside);
        print_message("constrained %s: chi2 / critical = %.3f, %ld outside\n", seer_spec_kind_name(kinds[k]), r, outside);
        assert_int_equal(outside, 0);
        assert_true(r < 1);
    }
    /* the wrong rule: the mask on the drafter's rows only, not the target's */
    seer_spec_params spec = tu_spec(SEER_SPEC_STREAMING, 3, 6);
    tu_spec_set(&spec, "sinks", 2);
    long outside;
    seer_constrain_wrong_rule_for_tests = 1;
    const double r = chi2_runs(m, spec, prompt, 24, sp, con, cells, nc, runs, &outside);
    seer_constrain_wrong_rule_for_tests = 0;
    print_message("wrong rule (target unmasked): chi2 / critical = %.3f, %ld outside\n", r, outside);
    assert_true(r > 1);
    seer_constraint_free(con);
    seer_model_free(d);
    seer_model_free(m);
}

/* ---- logit_bias ---------------------------------------------------------------------------- */

static void test_logit_bias(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[2][32];
    int plen[2];
    ASSERT_OK(seer_tokenize(m, "Once upon a time", 16, true, false, prompts[0], 32, &plen[0]));
    ASSERT_OK(seer_tokenize(m, "The dog", 7, true, false, prompts[1], 32, &plen[1]));
    run_out base[2], plain[2], spec_out[2];
    run_sched(m, seer_spec_default_params(), prompts, plen, 2, 30, tu_greedy(), NULL, base);
    /* bias the first token greedy emitted down and some other token up */
    const int32_t first = base[0].ids[0];
    seer_logit_bias lb[2] = {{first, -100.0f}, {base[0].ids[3], 5.0f}};
    seer_sampler_params sp = tu_greedy();
    sp.logit_bias = lb;
    sp.n_logit_bias = 2;
    run_sched(m, seer_spec_default_params(), prompts, plen, 2, 30, sp, NULL, plain);
    assert_int_not_equal(plain[0].ids[0], first);
    const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_NGRAM};
    for (int k = 0; k < 2; k++) {
        run_sched(m, tu_spec(kinds[k], 4, 24), prompts, plen, 2, 30, sp, NULL, spec_out);
        for (int i = 0; i < 2; i++)
            assert_same(&spec_out[i], &plain[i], "logit_bias under speculation");
    }
    /* +100 makes greedy pick the token every time */
    seer_logit_bias up = {42, 100.0f};
    sp.logit_bias = &up;
    sp.n_logit_bias = 1;
    run_sched(m, tu_spec(SEER_SPEC_STREAMING, 4, 24), prompts, plen, 2, 10, sp, NULL, spec_out);
    for (int j = 0; j < spec_out[0].n; j++)
        assert_int_equal(spec_out[0].ids[j], 42);
    /* refusals: out of range, twice, NaN */
    seer_logit_bias bad[2] = {{1, 101.0f}, {2, 0.0f}};
    sp.logit_bias = bad;
    sp.n_logit_bias = 1;
    seer_request_params p = seer_request_default_params();
    p.sampler = sp;
    seer_request *r = NULL;
    assert_int_equal(seer_request_new(m, prompts[0], plen[0], &p, &r), SEER_ERR_INVALID_ARG);
    bad[0].bias = 1.0f, bad[1].token = 1;
    p.sampler.n_logit_bias = 2;
    assert_int_equal(seer_request_new(m, prompts[0], plen[0], &p, &r), SEER_ERR_INVALID_ARG);
    p.sampler.n_logit_bias = SEER_MAX_LOGIT_BIAS + 1;
    assert_int_equal(seer_request_new(m, prompts[0], plen[0], &p, &r), SEER_ERR_INVALID_ARG);
    assert_null(r);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_jump_forward),
        cmocka_unit_test(test_masks_overlapped),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_logit_bias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
