/*
 * test_accept_trace.c: acceptance traces (src/spec/accept_trace.c) and the calibration of
 * one operating point on existing sequences, the two things `seer bench` needs to time
 * auto and fixed settings under real, uneven acceptance.
 *
 *   - the file: parse, save and load back to the same rounds; every malformed input refused
 *     with SEER_ERR_FORMAT and nothing returned; a missing file is SEER_ERR_IO;
 *   - replay: a line read as a stream of per-token outcomes (a ones, then a zero when a < n),
 *     cyclically; the line of the round's budget preferred; no line for a kind: -1;
 *   - recording: a generator's rounds (stories260K, streaming) recorded with the counts its
 *     stats report, per sequence of a batch;
 *   - replay through the generator: traces that accept everything, nothing, and exactly two
 *     of every four drafts give exactly those acceptances (chains and trees), and a kind the
 *     trace lacks falls back to the synthetic rate;
 *   - seer_spec_cost_calibrate_seqs: a table of one point timed on the caller's sequences,
 *     which keep their lengths; sequences of unequal lengths refused.
 */
#include "testutil.h"

#include "spec/accept_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static seer_accept_trace *parse_ok(const char *text) {
    seer_accept_trace *t = NULL;
    ASSERT_OK(seer_accept_trace_parse(text, strlen(text), &t));
    assert_non_null(t);
    return t;
}

static void test_file(void **state) {
    (void)state;
    seer_accept_trace *t = parse_ok("seer-accept-trace 1\n# recorded\n\nseq streaming 256 3/4 4/4 0/4\n"
                                    "seq retrieval 512 1/2 2/2\r\nseq ngram 0 0/1\nend\n");
    int64_t r, d, a;
    seer_accept_trace_counts(t, SEER_SPEC_NONE, &r, &d, &a);
    assert_int_equal(r, 6);
    assert_int_equal(d, 17);
    assert_int_equal(a, 10);
    seer_accept_trace_counts(t, SEER_SPEC_RETRIEVAL, &r, &d, &a);
    assert_true(r == 2 && d == 4 && a == 3);
    const char *path = tu_tmp_path("t.trace");
    ASSERT_OK(seer_accept_trace_save(t, path));
    seer_accept_trace *u = NULL;
    ASSERT_OK(seer_accept_trace_load(path, &u));
    size_t n;
    char *text = (char *)tu_read_file(path, &n);
    assert_non_null(text);
    assert_string_equal(text, "seer-accept-trace 1\nseq streaming 256 3/4 4/4 0/4\nseq retrieval 512 1/2 2/2\n"
                              "seq ngram 0 0/1\nend\n");
    free(text);
    seer_accept_trace_counts(u, SEER_SPEC_NONE, &r, &d, &a);
    assert_true(r == 6 && d == 17 && a == 10);
    seer_accept_trace_free(u);
    seer_accept_trace_free(t);

    static const char *const bad[] = {
        "",
        "seq streaming 16 1/2\nend\n",                              /* no header */
        "seer-accept-trace 2\nend\n",                               /* version */
        "seer-accept-trace 1\nseq streaming 16 1/2\n",              /* cut short */
        "seer-accept-trace 1\nseq bogus 16 1/2\nend\n",
        "seer-accept-trace 1\nseq auto 16 1/2\nend\n",              /* not a drafter */
        "seer-accept-trace 1\nseq none 16 1/2\nend\n",
        "seer-accept-trace 1\nseq streaming -1 1/2\nend\n",         /* budget */
        "seer-accept-trace 1\nseq streaming x 1/2\nend\n",
        "seer-accept-trace 1\nseq streaming 16\nend\n",             /* no rounds */
        "seer-accept-trace 1\nseq streaming 16 5/4\nend\n",         /* a > n */
        "seer-accept-trace 1\nseq streaming 16 -1/4\nend\n",
        "seer-accept-trace 1\nseq streaming 16 0/0\nend\n",
        "seer-accept-trace 1\nseq streaming 16 1/65\nend\n",        /* n past 64 */
        "seer-accept-trace 1\nseq streaming 16 1/\nend\n",
        "seer-accept-trace 1\nseq streaming 16 1\nend\n",
        "seer-accept-trace 1\nseq streaming 16 1/2x\nend\n",
        "seer-accept-trace 1\nseq streaming 16 99999999999999999999/2\nend\n",
        "seer-accept-trace 1\nrounds streaming 16 1/2\nend\n",      /* unknown record */
        "seer-accept-trace 1\nend\nseq streaming 16 1/2\n",         /* after end */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        seer_accept_trace *x = (seer_accept_trace *)&x;
        assert_int_equal(seer_accept_trace_parse(bad[i], strlen(bad[i]), &x), SEER_ERR_FORMAT);
        assert_null(x);
    }
    const char nul[] = "seer-accept-trace 1\nseq streaming 16 1/2\0\nend\n";
    seer_accept_trace *x = NULL;
    assert_int_equal(seer_accept_trace_parse(nul, sizeof nul - 1, &x), SEER_ERR_FORMAT);
    assert_int_equal(seer_accept_trace_load(tu_tmp_path("absent.trace"), &x), SEER_ERR_IO);
    assert_null(x);
}

static void test_replay_stream(void **state) {
    (void)state;
    seer_accept_trace *t = parse_ok("seer-accept-trace 1\nseq streaming 16 2/4 4/4 0/4\n"
                                    "seq streaming 64 1/1 0/3\nend\n");
    int64_t pos = -1;
    int line = seer_accept_trace_pick(t, SEER_SPEC_STREAMING, 16, 0, &pos);
    assert_int_equal(line, 0);
    assert_int_equal(pos, 0);
    /* 2/4 4/4 0/4: 1 1 0, 1 1 1 1, 0; then again */
    static const bool want[] = {1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 0};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        assert_int_equal(seer_accept_trace_next(t, line, &pos), want[i]);
    /* the budget's own line; another budget: any line of the kind, by handle */
    assert_int_equal(seer_accept_trace_pick(t, SEER_SPEC_STREAMING, 64, 5, &pos), 1);
    assert_true(pos >= 0 && pos < 2);
    assert_int_equal(seer_accept_trace_pick(t, SEER_SPEC_STREAMING, 32, 0, &pos), 0);
    assert_int_equal(seer_accept_trace_pick(t, SEER_SPEC_STREAMING, 32, 1, &pos), 1);
    assert_int_equal(seer_accept_trace_pick(t, SEER_SPEC_RETRIEVAL, 16, 0, &pos), -1);
    /* sequences sharing a line start at different outcomes */
    int64_t p1, p2;
    seer_accept_trace_pick(t, SEER_SPEC_STREAMING, 16, 1, &p1);
    seer_accept_trace_pick(t, SEER_SPEC_STREAMING, 16, 2, &p2);
    assert_true(p1 != p2 && p1 >= 0 && p1 < 8 && p2 >= 0 && p2 < 8);
    seer_accept_trace_free(t);
}

/* A generator over n prompts of a model; returns its stats. */
/* synthetic acceptance for gen()'s generator (seer_gen_set_synthetic; 0, NULL: none) */
static float synth_alpha;
static const seer_accept_trace *synth_trace;

static seer_spec_stats gen(seer_model *m, seer_spec_params sp, int n, int max_new, seer_accept_trace *rec,
                           tu_output *out) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = n;
    cp.n_batch_max = 64;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_gen *g = NULL;
    ASSERT_OK(seer_gen_init(c, sp, &g));
    if (synth_alpha > 0 || synth_trace)
        ASSERT_OK(seer_gen_set_synthetic(g, synth_alpha, synth_trace));
    if (rec)
        ASSERT_OK(seer_gen_record_trace(g, rec));
    static const int32_t prompt[] = {1, 403, 261, 29, 410, 306, 270, 269, 324, 280, 303, 271};
    for (int i = 0; i < n; i++) {
        int h;
        ASSERT_OK(seer_gen_add(g, prompt, 4 + 4 * i, max_new, tu_greedy(), true, &h));
    }
    int active = n;
    while (active > 0)
        ASSERT_OK(seer_gen_step(g, &active));
    for (int i = 0; out && i < n; i++) {
        const int32_t *ids;
        out[i].n = seer_gen_output(g, i, &ids);
        memcpy(out[i].ids, ids, sizeof(int32_t) * out[i].n);
    }
    seer_spec_stats st;
    seer_gen_stats(g, &st);
    seer_gen_free(g);
    seer_context_free(c);
    return st;
}

static seer_spec_params streaming(int gamma) {
    seer_spec_params sp = seer_spec_default_params();
    sp.kind = SEER_SPEC_STREAMING;
    sp.gamma = gamma;
    tu_spec_set(&sp, "budget", 16);
    tu_spec_set(&sp, "sinks", 4);
    return sp;
}

static void test_record(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_accept_trace *t = NULL;
    ASSERT_OK(seer_accept_trace_new(&t));
    tu_output plain[3], got[3];
    gen(m, seer_spec_default_params(), 3, 80, NULL, plain);
    const seer_spec_stats st = gen(m, streaming(4), 3, 80, t, got);
    for (int i = 0; i < 3; i++)
        tu_assert_same(&got[i], &plain[i], "recording changes nothing");
    int64_t r, d, a;
    seer_accept_trace_counts(t, SEER_SPEC_STREAMING, &r, &d, &a);
    assert_int_equal(d, st.drafted);
    assert_int_equal(a, st.accepted);
    assert_true(r > 0 && r <= st.rounds);
    assert_true(a > 0 && a < d);
    /* one line per sequence, read back from the file */
    const char *path = tu_tmp_path("rec.trace");
    ASSERT_OK(seer_accept_trace_save(t, path));
    size_t n;
    char *text = (char *)tu_read_file(path, &n);
    int lines = 0;
    for (char *p = text; (p = strstr(p, "\nseq streaming 16 ")); p++)
        lines++;
    assert_int_equal(lines, 3);
    free(text);
    seer_accept_trace *u = NULL;
    ASSERT_OK(seer_accept_trace_load(path, &u));
    int64_t r2, d2, a2;
    seer_accept_trace_counts(u, SEER_SPEC_NONE, &r2, &d2, &a2);
    assert_true(r2 == r && d2 == d && a2 == a);
    seer_accept_trace_free(u);
    seer_accept_trace_free(t);
    seer_model_free(m);
}

static void test_replay_gen(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    static const char *const traces[] = {
        "seer-accept-trace 1\nseq streaming 16 4/4\nend\n",
        "seer-accept-trace 1\nseq streaming 16 0/4\nend\n",
        "seer-accept-trace 1\nseq streaming 16 2/4\nend\n",
    };
    static const double want[] = {1.0, 0.0, 0.5};
    for (int tree = 0; tree < 2; tree++)
        for (int i = 0; i < 3; i++) {
            seer_accept_trace *t = parse_ok(traces[i]);
            seer_spec_params sp = streaming(4);
            synth_trace = t;
            if (tree) { /* the first children of a tree follow the trace as a chain does */
                sp.tree_size = 8;
                sp.tree_depth = 4;
            }
            /* the ends of generation cut rounds short: only whole rounds of 4 count here */
            const seer_spec_stats st = gen(m, sp, 2, 200, NULL, NULL);
            const double acc_chain = st.drafted ? (double)st.accepted / st.drafted : -1;
            const double per_round = (double)(st.emitted - 2) / st.rounds - 1; /* accepted per round */
            print_message("trace %d%s: drafted %lld accepted %lld rounds %lld\n", i, tree ? " tree" : "",
                          (long long)st.drafted, (long long)st.accepted, (long long)st.rounds);
            if (!tree)
                assert_true(acc_chain > want[i] - 0.05 && acc_chain < want[i] + 0.05);
            else
                assert_true(per_round > 4 * want[i] - 0.25 && per_round < 4 * want[i] + 0.25);
            seer_accept_trace_free(t);
        }
    /* a kind without lines accepts at the synthetic rate */
    seer_accept_trace *t = parse_ok("seer-accept-trace 1\nseq retrieval 16 4/4\nend\n");
    seer_spec_params sp = streaming(4);
    synth_trace = t;
    synth_alpha = 0.5f;
    const seer_spec_stats st = gen(m, sp, 2, 200, NULL, NULL);
    synth_trace = NULL;
    synth_alpha = 0;
    const double acc = (double)st.accepted / st.drafted;
    assert_true(acc > 0.1 && acc < 0.6); /* a chain at 0.5 per token: about (0.5+...+0.5^4)/4 */
    seer_accept_trace_free(t);
    seer_model_free(m);
}

static void test_calibrate_seqs(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = 3;
    cp.n_batch_max = 64;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_seq_id s[3];
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(seer_seq_new(c, &s[i]));
        ASSERT_OK(seer_seq_fill_synthetic(c, s[i], 100, 7 + i));
    }
    const int budgets[] = {16, 32, 1000};
    seer_spec_cost *t = NULL;
    ASSERT_OK(seer_spec_cost_calibrate_seqs(c, s, 2, budgets, 3, false, 0.05, &t));
    assert_true(seer_spec_cost_has(t, SEER_SPEC_STREAMING));
    assert_false(seer_spec_cost_has(t, SEER_SPEC_NGRAM));
    for (int i = 0; i < 3; i++)
        assert_int_equal(seer_seq_len(c, s[i]), 100);
    seer_spec_cost_free(t);
    ASSERT_OK(seer_spec_cost_calibrate_seqs(c, s, 1, NULL, 0, true, 0.05, &t));
    assert_false(seer_spec_cost_has(t, SEER_SPEC_STREAMING));
    assert_true(seer_spec_cost_has(t, SEER_SPEC_NGRAM));
    seer_spec_cost_free(t);
    /* unequal lengths, and nonsense counts: refused, sequences intact */
    ASSERT_OK(seer_seq_rewind(c, s[2], 50));
    t = NULL;
    assert_int_not_equal(seer_spec_cost_calibrate_seqs(c, s, 3, budgets, 2, false, 0.05, &t), SEER_OK);
    assert_null(t);
    assert_int_not_equal(seer_spec_cost_calibrate_seqs(c, s, 0, budgets, 2, false, 0.05, &t), SEER_OK);
    assert_int_not_equal(seer_spec_cost_calibrate_seqs(c, s, 2, budgets, -1, false, 0.05, &t), SEER_OK);
    assert_int_equal(seer_seq_len(c, s[0]), 100);
    assert_int_equal(seer_seq_len(c, s[2]), 50);
    seer_context_free(c);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file),   cmocka_unit_test(test_replay_stream), cmocka_unit_test(test_record),
        cmocka_unit_test(test_replay_gen), cmocka_unit_test(test_calibrate_seqs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
