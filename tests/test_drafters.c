/*
 * test_drafters.c: a drafter declared here alone, in this test binary, registered at run time
 * (seer_drafter_register): it is a speculation kind by its name, it shows up in the lists the
 * tools build from the registry (the CLI's help, the server's accepted 'spec' values and
 * /metrics, tools/seer/spec_kinds.c), and the generator and the scheduler run it, greedy
 * output unchanged (the tiny real model's golden ids). Also the registry's refusals.
 */
#include "testutil.h"

#include "spec/drafter.h"
#include "spec_kinds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int impl_token; /* the drafter keeps no state: its impl points here */

static seer_status dummy_init(const seer_draft_env *env, const seer_spec_params *spec, void **impl) {
    *impl = &impl_token;
    return SEER_OK;
}

static void dummy_free(const seer_draft_env *env, void *impl) {}

/* A chain repeating the pending token: often wrong, so verification both accepts and rejects. */
static seer_status dummy_propose(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs) {
    for (int i = 0; i < n; i++) {
        seer_draft_seq *s = &seqs[i];
        const int m = s->max_nodes < s->max_depth ? s->max_nodes : s->max_depth;
        for (int j = 0; j < m; j++) {
            s->tok[j] = s->tokens[s->n_tokens - 1];
            s->parent[j] = j - 1;
        }
        s->n = m;
        s->onehot = true;
    }
    return SEER_OK;
}

static const seer_drafter_ops dummy_ops = {
    .name = "dummy", .init = dummy_init, .free = dummy_free, .propose = dummy_propose, .has_q = false,
};

static const seer_drafter_desc dummy_desc = {
    .name = "dummy", .ops = &dummy_ops, .help = "repeats the pending token (a test's drafter)",
    .flags = SEER_DRAFTER_TREE_BASE,
};

static seer_spec_kind dummy_kind;

static int setup(void **state) {
    return seer_drafter_register(&dummy_desc, &dummy_kind) == SEER_OK ? 0 : -1;
}

/* Everything the tools print into one string. */
static char *help_text(spec_kinds_which which) {
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    assert_non_null(f);
    spec_kinds_help(f, "  ", which);
    fclose(f);
    return s;
}

static void test_kind(void **state) {
    assert_true(dummy_kind > SEER_SPEC_AUTO && dummy_kind < SEER_SPEC_KIND_MAX);
    seer_spec_kind k = SEER_SPEC_NONE;
    ASSERT_OK(seer_spec_kind_parse("dummy", &k));
    assert_int_equal(k, dummy_kind);
    assert_string_equal(seer_spec_kind_name(dummy_kind), "dummy");
    /* the built-in kinds keep their names, and the list ends with auto */
    ASSERT_OK(seer_spec_kind_parse("ngram", &k));
    assert_int_equal(k, SEER_SPEC_NGRAM);
    seer_spec_kind_info in, last = {0};
    bool seen = false;
    for (int i = 0; seer_spec_kind_info_at(i, &in); i++) {
        seen |= in.kind == dummy_kind && in.drafter && in.tree_base && !in.hier_base;
        last = in;
    }
    assert_true(seen);
    assert_int_equal(last.kind, SEER_SPEC_AUTO);
    /* an unknown name's message lists it too */
    assert_int_equal(seer_spec_kind_parse("magic", &k), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "dummy"));
}

static void test_cli_help(void **state) {
    char *all = help_text(SPEC_KINDS_ALL), *tree = help_text(SPEC_KINDS_TREE_BASE),
         *hier = help_text(SPEC_KINDS_HIER_BASE);
    assert_non_null(strstr(all, "dummy"));
    assert_non_null(strstr(all, "repeats the pending token"));
    assert_non_null(strstr(all, "streaming"));
    assert_non_null(strstr(tree, "dummy"));
    assert_null(strstr(hier, "dummy"));
    char list[512];
    spec_kinds_list(list, sizeof list, SPEC_KINDS_ALL);
    assert_non_null(strstr(list, "dummy"));
    free(all), free(tree), free(hier);
}

static void test_server_values(void **state) {
    seer_spec_kind k = SEER_SPEC_NONE;
    char msg[640];
    assert_true(spec_kinds_serve_parse("dummy", false, &k, msg, sizeof msg));
    assert_int_equal(k, dummy_kind);
    assert_false(spec_kinds_serve_parse("bogus", false, &k, msg, sizeof msg));
    assert_non_null(strstr(msg, "dummy"));
    assert_non_null(strstr(msg, "hierarchy"));
    /* a drafter that needs a draft model, on a server without one */
    assert_false(spec_kinds_serve_parse("draft", false, &k, msg, sizeof msg));
    assert_true(spec_kinds_serve_parse("draft", true, &k, msg, sizeof msg));
}

/* The generator and the scheduler run it; greedy ids are the golden ones; /metrics counts
 * its drafts under its name. */
static void test_runs(void **state) {
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], out[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_spec_params spec = tu_spec(dummy_kind, 3, 24);
    const int max_new = 40;
    tu_gen_ctx cx = {.n_ctx = 256, .page_size = 16, .n_batch_max = 64};
    const seer_spec_stats gs = tu_gen_run(m, spec, &prompts[0][0], 64, plen, 3, max_new, tu_greedy(), cx, out, NULL);
    assert_true(gs.drafted > 0);
    for (int i = 0; i < 3; i++) {
        gold[i].n = out[i].n < gold[i].n ? out[i].n : gold[i].n;
        tu_assert_same(&out[i], &gold[i], "dummy drafter (generator)");
    }

    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = 3;
    cp.n_batch_max = 64;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, seer_sched_default_params(), &s));
    seer_request *r[3];
    for (int i = 0; i < 3; i++) {
        seer_request_params p = seer_request_default_params();
        p.sampler = tu_greedy();
        p.max_tokens = max_new;
        p.spec = spec;
        ASSERT_OK(seer_request_new(m, prompts[i], plen[i], &p, &r[i]));
        ASSERT_OK(seer_sched_submit(s, r[i]));
    }
    int active = 1, steps = 0;
    while (active) {
        ASSERT_OK(seer_sched_step(s, &active));
        assert_true(++steps < 10000);
    }
    for (int i = 0; i < 3; i++) {
        const int32_t *ids;
        tu_output o = {.n = seer_request_tokens(r[i], &ids)};
        memcpy(o.ids, ids, sizeof(int32_t) * o.n);
        tu_assert_same(&o, &out[i], "dummy drafter (scheduler)");
        seer_request_free(r[i]);
    }
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    assert_true(st.spec_drafted[dummy_kind] > 0);
    char *metrics = spec_kinds_metrics(&st), line[128];
    assert_non_null(metrics);
    snprintf(line, sizeof line, "seer_spec_drafted_total{drafter=\"dummy\"} %lld\n", (long long)st.spec_drafted[dummy_kind]);
    assert_non_null(strstr(metrics, line));
    assert_non_null(strstr(metrics, "seer_spec_accepted_total{drafter=\"dummy\"}"));
    assert_non_null(strstr(metrics, "seer_spec_auto_rounds_total{choice=\"dummy\"} 0\n"));
    assert_non_null(strstr(metrics, "seer_spec_drafted_total{drafter=\"hierarchy\"} 0\n"));
    free(metrics);
    seer_sched_free(s);
    seer_context_free(c);
    seer_model_free(m);
}

/* Refusals: a name taken, a drafter without its ops. */
static void test_register_refusals(void **state) {
    seer_drafter_desc again = dummy_desc;
    assert_int_equal(seer_drafter_register(&again, NULL), SEER_ERR_INVALID_ARG);
    again.name = "auto";
    assert_int_equal(seer_drafter_register(&again, NULL), SEER_ERR_INVALID_ARG);
    again.name = "other";
    again.kind = SEER_SPEC_STREAMING; /* a kind taken */
    assert_int_equal(seer_drafter_register(&again, NULL), SEER_ERR_INVALID_ARG);
    again.kind = SEER_SPEC_NONE;
    again.ops = NULL;
    assert_int_equal(seer_drafter_register(&again, NULL), SEER_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kind),
        cmocka_unit_test(test_cli_help),
        cmocka_unit_test(test_server_values),
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_register_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
