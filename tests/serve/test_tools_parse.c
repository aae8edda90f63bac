/*
 * test_tools_parse.c: the server's tool-call handling (tools/seer/serve_tools.c) on fixed
 * strings, no model: the model's <tool_call> output parsed into OpenAI tool_calls (one call,
 * two, content before them, a bare JSON call naming a tool, and the malformed outputs that
 * stay content), the streaming hold-back of text that may be a call, the stream's deltas, the
 * request's tools and tool_choice (auto, none; required and named forced, with their grammar;
 * a name not among the tools refused), message
 * tool_calls, and the JSON schema of the allowed calls.
 */
#include "testutil.h"

#include "serve_tools.h"

#include <stdlib.h>
#include <string.h>

static json_t *TOOLS;

static int setup(void **state) {
    (void)state;
    TOOLS = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                       "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}},"
                       " {\"type\": \"function\", \"function\": {\"name\": \"add\"}}]",
                       0, NULL);
    return TOOLS ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    json_decref(TOOLS);
    return 0;
}

static json_t *parse(const char *text, size_t *cl) {
    return serve_tools_parse_output(text, strlen(text), TOOLS, "x", cl);
}

static void assert_call(json_t *calls, size_t i, const char *name, const char *args) {
    json_t *c = json_array_get(calls, i), *f = json_object_get(c, "function");
    assert_string_equal(json_string_value(json_object_get(c, "type")), "function");
    assert_string_equal(json_string_value(json_object_get(f, "name")), name);
    assert_string_equal(json_string_value(json_object_get(f, "arguments")), args);
    char id[32];
    snprintf(id, sizeof id, "call_x_%zu", i);
    assert_string_equal(json_string_value(json_object_get(c, "id")), id);
}

static void test_parse(void **state) {
    (void)state;
    size_t cl = 99;
    json_t *c = parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", &cl);
    assert_non_null(c);
    assert_int_equal(json_array_size(c), 1);
    assert_call(c, 0, "get_weather", "{\"city\": \"Paris\"}");
    assert_int_equal(cl, 0);
    json_decref(c);
    /* text before, two calls, compact JSON re-written as the template writes it */
    const char *two = "Let me look.\n<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":[2,3]}}\n</tool_call>\n"
                      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>\n";
    c = parse(two, &cl);
    assert_non_null(c);
    assert_int_equal(json_array_size(c), 2);
    assert_call(c, 0, "add", "{\"a\": 1, \"b\": [2, 3]}");
    assert_call(c, 1, "get_weather", "{}");
    assert_int_equal(cl, strlen("Let me look."));
    json_decref(c);
    /* a bare call naming a tool; arguments left out are {} */
    c = parse("  {\"name\": \"add\"}\n", &cl);
    assert_non_null(c);
    assert_call(c, 0, "add", "{}");
    json_decref(c);
    /* content: none of these is a call */
    const char *not_calls[] = {
        "Hello there",
        "{\"name\": \"unknown_tool\", \"arguments\": {}}",                       /* bare, not a tool */
        "{\"name\": \"add\", \"arguments\": {}} and more",                      /* bare, then text */
        "<tool_call>{\"name\": \"add\", \"arguments\": {}}",                     /* left open */
        "<tool_call>{\"name\": \"add\", \"arguments\": {}</tool_call>",          /* bad JSON */
        "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",               /* name not a string */
        "<tool_call>{\"name\": \"add\", \"arguments\": \"{}\"}</tool_call>",     /* arguments not an object */
        "<tool_call>{\"name\": \"add\"}</tool_call> then text",                  /* text after */
        "<tool_call>[1]</tool_call>",
        "",
    };
    for (size_t i = 0; i < sizeof not_calls / sizeof *not_calls; i++) {
        c = parse(not_calls[i], &cl);
        if (c)
            fail_msg("%s: parsed as a call", not_calls[i]);
    }
    /* the whole message */
    bool called = false;
    json_t *m = serve_tools_message(two, strlen(two), TOOLS, "x", &called);
    assert_true(called);
    assert_string_equal(json_string_value(json_object_get(m, "content")), "Let me look.");
    assert_int_equal(json_array_size(json_object_get(m, "tool_calls")), 2);
    json_decref(m);
    m = serve_tools_message("<tool_call>{\"name\": \"add\"}</tool_call>", 38, TOOLS, "x", &called);
    assert_true(called && json_is_null(json_object_get(m, "content")));
    json_decref(m);
    m = serve_tools_message("plain", 5, TOOLS, "x", &called);
    assert_false(called);
    assert_string_equal(json_string_value(json_object_get(m, "content")), "plain");
    assert_null(json_object_get(m, "tool_calls"));
    json_decref(m);
}

static void test_stream(void **state) {
    (void)state;
    /* what may be sent as content before the end */
    assert_int_equal(serve_tools_safe_prefix("Hello", 5), 5);
    assert_int_equal(serve_tools_safe_prefix("Hello <tool", 11), 6);
    assert_int_equal(serve_tools_safe_prefix("Hello <", 7), 6);
    assert_int_equal(serve_tools_safe_prefix("Hi <tool_call>{\"name\"", 21), 3);
    assert_int_equal(serve_tools_safe_prefix("  {\"name\": \"a", 13), 0);
    assert_int_equal(serve_tools_safe_prefix("  ", 2), 0);
    assert_int_equal(serve_tools_safe_prefix(NULL, 0), 0); /* no text yet */
    size_t cl0 = 5;
    assert_null(serve_tools_parse_output(NULL, 0, TOOLS, "x", &cl0));
    assert_int_equal(cl0, 0);
    assert_int_equal(serve_tools_safe_prefix("a < b", 5), 5);
    /* deltas: index, id, type and name, then the arguments */
    size_t cl;
    json_t *c = parse("<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1}}</tool_call>", &cl);
    json_t *d = serve_tools_deltas(c);
    assert_int_equal(json_array_size(d), 2);
    json_t *d0 = json_array_get(json_object_get(json_array_get(d, 0), "tool_calls"), 0);
    json_t *d1 = json_array_get(json_object_get(json_array_get(d, 1), "tool_calls"), 0);
    assert_int_equal(json_integer_value(json_object_get(d0, "index")), 0);
    assert_string_equal(json_string_value(json_object_get(d0, "id")), "call_x_0");
    assert_string_equal(json_string_value(json_object_get(json_object_get(d0, "function"), "name")), "add");
    assert_string_equal(json_string_value(json_object_get(json_object_get(d0, "function"), "arguments")), "");
    assert_null(json_object_get(d1, "id"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(d1, "function"), "arguments")),
                        "{\"a\": 1}");
    json_decref(d);
    json_decref(c);
}

static json_t *req(const char *s) {
    json_t *r = json_loads(s, 0, NULL);
    assert_non_null(r);
    return r;
}

static void test_request(void **state) {
    (void)state;
    serve_tools t;
    serve_error e;
    json_t *r = req("{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\", "
                    "\"parameters\": {\"type\": \"object\"}}}]}");
    memset(&e, 0, sizeof e);
    assert_true(serve_tools_parse(r, &t, &e));
    assert_true(t.on);
    assert_int_equal(t.n, 1);
    assert_string_equal(t.defs[0], "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\", "
                                   "\"parameters\": {\"type\": \"object\"}}}");
    serve_tools_free(&t);
    json_object_set_new(r, "tool_choice", json_string("none"));
    assert_true(serve_tools_parse(r, &t, &e));
    assert_false(t.on);
    serve_tools_free(&t);
    json_object_set_new(r, "tool_choice", json_string("auto"));
    assert_true(serve_tools_parse(r, &t, &e));
    assert_true(t.on);
    serve_tools_free(&t);
    /* forcing a call: "required" (any tool) or a named one, its grammar one tagged call whose
     * JSON is the schema's (the schema's start rule renamed, names inside literals kept) */
    json_object_set_new(r, "tool_choice", json_string("required"));
    assert_true(serve_tools_parse(r, &t, &e));
    assert_true(t.on && t.force);
    assert_string_equal(t.only, "");
    serve_tools_free(&t);
    json_object_set_new(r, "tool_choice", json_loads("{\"type\": \"function\", \"function\": {\"name\": \"f\"}}", 0, NULL));
    assert_true(serve_tools_parse(r, &t, &e));
    assert_true(t.on && t.force);
    assert_string_equal(t.only, "f");
    char *g = NULL;
    assert_true(serve_tools_grammar(&t, &g, &e));
    assert_true(!strncmp(g, "root ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n", 55));
    assert_non_null(strstr(g, "\ntool-call-json ::="));
    assert_null(strstr(g + 10, "root ::="));
    assert_non_null(strstr(g, "\\\"f\\\"")); /* the name, as a literal of the JSON */
    free(g);
    serve_tools_free(&t);
    /* refused: a named function not among the tools, unknown choices, bad tools, a choice
     * without tools */
    const char *bad[][2] = {
        {"{\"type\": \"function\", \"function\": {\"name\": \"g\"}}", "tool_choice"},
        {"{\"type\": \"function\"}", "tool_choice"},
        {"\"sometimes\"", "tool_choice"},
        {"3", "tool_choice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_object_set_new(r, "tool_choice", json_loads(bad[i][0], JSON_DECODE_ANY, NULL));
        memset(&e, 0, sizeof e);
        assert_false(serve_tools_parse(r, &t, &e));
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, bad[i][1]);
    }
    json_decref(r);
    const char *bad_tools[] = {
        "{\"tools\": 3}",
        "{\"tools\": [{\"type\": \"retrieval\"}]}",
        "{\"tools\": [{\"type\": \"function\", \"function\": {}}]}",
        "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}",
        "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": 1}}]}",
        "{\"tool_choice\": \"auto\"}",
    };
    for (size_t i = 0; i < sizeof bad_tools / sizeof *bad_tools; i++) {
        r = req(bad_tools[i]);
        memset(&e, 0, sizeof e);
        if (serve_tools_parse(r, &t, &e))
            fail_msg("%s: accepted", bad_tools[i]);
        assert_int_equal(e.status, 400);
        json_decref(r);
    }
}

static void test_messages_and_schema(void **state) {
    (void)state;
    serve_error e = {0};
    seer_chat_calls m = {0};
    json_t *x = req("[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"add\", \"arguments\": "
                    "\"{\\\"a\\\":1}\"}}, {\"function\": {\"name\": \"g\", \"arguments\": \"not json\"}}]");
    assert_true(serve_tools_message_calls(x, 0, &m, &e));
    assert_int_equal(m.n, 2);
    assert_string_equal(m.calls[0].name, "add");
    assert_string_equal(m.calls[0].arguments, "{\"a\": 1}");
    assert_string_equal(m.calls[1].arguments, "not json");
    for (int k = 0; k < m.n; k++)
        free((char *)m.calls[k].arguments);
    free((seer_chat_tool_call *)m.calls);
    json_decref(x);
    x = req("[{\"function\": {\"name\": 3}}]");
    m = (seer_chat_calls){0};
    assert_false(serve_tools_message_calls(x, 0, &m, &e));
    assert_int_equal(e.status, 400);
    for (int k = 0; k < m.n; k++)
        free((char *)m.calls[k].arguments);
    free((seer_chat_tool_call *)m.calls);
    json_decref(x);
    /* the schema of the allowed calls: one branch per tool, or the one named */
    json_t *s = serve_tools_schema(TOOLS, NULL);
    json_t *any = json_object_get(s, "anyOf");
    assert_int_equal(json_array_size(any), 2);
    json_t *b0 = json_array_get(any, 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(b0, "properties"), "name"),
                                                          "const")),
                        "get_weather");
    assert_non_null(json_object_get(json_object_get(json_object_get(b0, "properties"), "arguments"), "properties"));
    json_decref(s);
    s = serve_tools_schema(TOOLS, "add");
    assert_int_equal(json_array_size(json_object_get(s, "anyOf")), 1);
    json_decref(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_request),
        cmocka_unit_test(test_messages_and_schema),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
