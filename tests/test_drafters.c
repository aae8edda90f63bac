/*
 * test_drafters.c: a drafter declared here alone, in this test binary, registered at run time
 * (seer_drafter_register): it is a speculation kind by its name, it shows up in the lists the
 * tools build from the registry (the CLI's help, the server's accepted 'spec' values and
 * /metrics, tools/seer/spec_kinds.c), its own setting is an option of the CLI (the option
 * parser and help, tools/seer/cli_opts.c) and a field of the server's "seer" object
 * (tools/seer/serve_fields.c), and the generator and the scheduler run it, greedy output
 * unchanged (the tiny real model's golden ids). Also the registry's refusals.
 */
#include "testutil.h"

#include "cli_opts.h"
#include "spec/drafter.h"
#include "spec_kinds.h"
#ifdef SEER_HAVE_SERVE
#include "serve.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Its settings struct and its one setting, declared here: the most tokens a proposal repeats. */
typedef struct {
    int reach;
} dummy_settings;

static const seer_drafter_option dummy_opts[] = {
    {{.flag = "spec-dummy-reach", .json = "dummy_reach", .metavar = "N", .type = SEER_SPEC_OPT_INT, .def = 16,
      .lo = 1, .hi = 16, .help = "most tokens the dummy drafter repeats"},
     SEER_DRAFTER_OPT_EXT, offsetof(dummy_settings, reach)},
};

static const seer_drafter_desc dummy_desc;
static int init_reach; /* the reach the last init read */

static seer_status dummy_init(const seer_draft_env *env, const seer_spec_params *spec, void **impl) {
    dummy_settings *st = malloc(sizeof *st);
    if (!st)
        return SEER_ERR_OOM;
    seer_drafter_settings(&dummy_desc, spec, st);
    init_reach = st->reach;
    *impl = st;
    return SEER_OK;
}

static void dummy_free(const seer_draft_env *env, void *impl) { free(impl); }

/* A chain repeating the pending token: often wrong, so verification both accepts and rejects. */
static seer_status dummy_propose(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs) {
    const int reach = ((const dummy_settings *)impl)->reach;
    for (int i = 0; i < n; i++) {
        seer_draft_seq *s = &seqs[i];
        int m = s->max_nodes < s->max_depth ? s->max_nodes : s->max_depth;
        m = m < reach ? m : reach;
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
    .flags = SEER_DRAFTER_TREE_BASE, .options = dummy_opts, .n_options = 1,
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

/* Its setting: listed by the registry, set and read by name (range checked, a refusal
 * leaving the value), and refused as a name another drafter has. */
static void test_setting(void **state) {
    seer_spec_option so;
    bool listed = false;
    for (int i = 0; seer_spec_option_at(i, &so); i++)
        listed |= !strcmp(so.flag, "spec-dummy-reach") && !strcmp(so.drafter, "dummy") && so.def == 16;
    assert_true(listed);
    seer_spec_params p = seer_spec_default_params();
    double v = 0;
    ASSERT_OK(seer_spec_get(&p, "spec-dummy-reach", &v));
    assert_true(v == 16);
    ASSERT_OK(seer_spec_set(&p, "dummy_reach", "3"));
    assert_int_equal(seer_spec_set(&p, "spec-dummy-reach", "17"), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "out of range"));
    assert_int_equal(seer_spec_set(&p, "spec-dummy-reach", "x"), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_spec_set(&p, "spec-no-such", "1"), SEER_ERR_INVALID_ARG);
    ASSERT_OK(seer_spec_get(&p, "spec-dummy-reach", &v));
    assert_true(v == 3);
    /* a built-in drafter's setting by name */
    ASSERT_OK(seer_spec_set(&p, "budget", "77"));
    assert_true(tu_spec_get(&p, "spec-budget") == 77);
    /* n-gram's, kept by name in seer_spec_params.ext as the dummy's */
    ASSERT_OK(seer_spec_get(&p, "ngram_max", &v));
    assert_true(v == 4);
    ASSERT_OK(seer_spec_set(&p, "spec-ngram", "7"));
    ASSERT_OK(seer_spec_get(&p, "ngram_max", &v));
    assert_true(v == 7);
    ASSERT_OK(seer_spec_get(&p, "spec-dummy-reach", &v)); /* a slot of its own */
    assert_true(v == 3);
    ASSERT_OK(seer_spec_set(&p, "spec-kv-view", "streaming"));
    assert_true(tu_spec_get(&p, "kv_view") == SEER_SPEC_STREAMING);
    assert_int_equal(seer_spec_set(&p, "spec-kv-view", "ngram"), SEER_ERR_INVALID_ARG);
    assert_true(tu_spec_get(&p, "kv_view") == SEER_SPEC_STREAMING);
    /* a drafter whose setting takes a name in use */
    static const seer_drafter_option clash[] = {
        {{.flag = "spec-budget", .json = "other_budget", .type = SEER_SPEC_OPT_INT, .def = 1, .lo = 0, .hi = 2},
         SEER_DRAFTER_OPT_EXT, 0},
    };
    seer_drafter_desc other = dummy_desc;
    other.name = "other";
    other.options = clash;
    assert_int_equal(seer_drafter_register(&other, NULL), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "exists already"));
    /* a setting of named choices whose default is none of them */
    static const char *const two[] = {"one", "two", NULL};
    static const seer_drafter_option bad_choice[] = {
        {{.flag = "spec-other-way", .json = "other_way", .type = SEER_SPEC_OPT_CHOICE, .def = 2, .choices = two},
         SEER_DRAFTER_OPT_EXT, 0},
    };
    other.options = bad_choice;
    assert_int_equal(seer_drafter_register(&other, NULL), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "choices"));
}

/* The CLI: its option parser takes the setting (into the speculation's settings), refuses a
 * value out of its range, and the help shows it with its drafter and default. */
static void test_cli_option(void **state) {
    static const cli_opt table[] = {{.cmds = CLI_GENERATE, .name = "help", .shortc = 'h', .type = CLI_V_HELP}, {.cmds = 0}};
    char *argv[] = {"generate", "--spec-dummy-reach", "5", "--spec-budget", "8", NULL};
    cli_common c;
    cli_common_init(&c);
    assert_int_equal(cli_parse(table, CLI_GENERATE, "generate", 5, argv, &c, NULL), -1);
    double v = 0;
    ASSERT_OK(seer_spec_get(&c.spec, "spec-dummy-reach", &v));
    assert_true(v == 5);
    assert_true(tu_spec_get(&c.spec, "budget") == 8);
    char *bad[] = {"generate", "--spec-dummy-reach", "0", NULL};
    cli_common_init(&c);
    assert_int_equal(cli_parse(table, CLI_GENERATE, "generate", 3, bad, &c, NULL), 2);
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    assert_non_null(f);
    cli_help(table, f, CLI_GENERATE); /* no rows to show: the settings come with the table's row */
    cli_help_spec_options(f, CLI_GENERATE);
    fclose(f);
    assert_non_null(strstr(s, "--spec-dummy-reach N"));
    assert_non_null(strstr(s, "most tokens the dummy drafter repeats (dummy; default 16)"));
    assert_non_null(strstr(s, "--spec-budget K"));
    /* a setting of named choices: its names and its default by name */
    assert_non_null(strstr(s, "(sparse-ffn; griffin or cats; default griffin)"));
    free(s);
    char *mode[] = {"generate", "--spec-ffn-mode", "cats", NULL};
    cli_common_init(&c);
    assert_int_equal(cli_parse(table, CLI_GENERATE, "generate", 3, mode, &c, NULL), -1);
    assert_true(tu_spec_get(&c.spec, "ffn_mode") == 1);
    char *bad_mode[] = {"generate", "--spec-ffn-mode", "dense", NULL};
    cli_common_init(&c);
    assert_int_equal(cli_parse(table, CLI_GENERATE, "generate", 3, bad_mode, &c, NULL), 2);
}

#ifdef SEER_HAVE_SERVE
/* The server: the "seer" object takes the setting by its json name, within its range. */
static void test_server_field(void **state) {
    seer_spec_params p = seer_spec_default_params();
    serve_error e = {0};
    json_t *x = json_pack("{s:i, s:i}", "dummy_reach", 2, "sinks", 4);
    assert_true(serve_fields_spec(x, &p, &e));
    double v = 0;
    ASSERT_OK(seer_spec_get(&p, "dummy_reach", &v));
    assert_true(v == 2);
    assert_true(tu_spec_get(&p, "sinks") == 4);
    json_decref(x);
    x = json_pack("{s:i}", "dummy_reach", 40);
    assert_false(serve_fields_spec(x, &p, &e));
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "dummy_reach"));
    json_decref(x);
    x = json_pack("{s:s}", "dummy_reach", "far");
    assert_false(serve_fields_spec(x, &p, &e));
    json_decref(x);
    ASSERT_OK(seer_spec_get(&p, "dummy_reach", &v));
    assert_true(v == 2);
    /* a setting of named choices: its name as a string */
    x = json_pack("{s:s}", "ffn_mode", "cats");
    assert_true(serve_fields_spec(x, &p, &e));
    json_decref(x);
    assert_true(tu_spec_get(&p, "ffn_mode") == 1);
    x = json_pack("{s:s}", "ffn_mode", "dense");
    assert_false(serve_fields_spec(x, &p, &e));
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "griffin, cats"));
    json_decref(x);
    x = json_pack("{s:i}", "ffn_mode", 1);
    assert_false(serve_fields_spec(x, &p, &e));
    json_decref(x);
    assert_true(tu_spec_get(&p, "ffn_mode") == 1);
}
#else
static void test_server_field(void **state) { skip(); }
#endif

/* The generator and the scheduler run it; greedy ids are the golden ones; /metrics counts
 * its drafts under its name. */
static void test_runs(void **state) {
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], out[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_spec_params spec = tu_spec(dummy_kind, 3, 24);
    ASSERT_OK(seer_spec_set(&spec, "spec-dummy-reach", "2")); /* its setting reaches its init */
    const int max_new = 40;
    tu_gen_ctx cx = {.n_ctx = 256, .page_size = 16, .n_batch_max = 64};
    const seer_spec_stats gs = tu_gen_run(m, spec, &prompts[0][0], 64, plen, 3, max_new, tu_greedy(), cx, out, NULL);
    assert_true(gs.drafted > 0);
    assert_int_equal(init_reach, 2);
    assert_true(gs.drafted <= 2 * gs.rounds);
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
        cmocka_unit_test(test_setting),
        cmocka_unit_test(test_cli_option),
        cmocka_unit_test(test_server_field),
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_register_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
