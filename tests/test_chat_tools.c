/*
 * test_chat_tools.c: conversations with tools (seer_chat_render_tools) with fixed strings:
 * for ChatML the text equals what Qwen2.5's own Jinja template renders for the same
 * conversation (tools, an assistant turn of calls alone, a run of two tool results, an
 * assistant turn of text and a call), rendered once with jinja2 from the template in
 * Qwen2.5-Coder-0.5B-Instruct's GGUF file and pasted here; the template's own markers are the
 * only bytes marked special; the generic rendering of another template (llama3) holds the
 * same tool text in its turns; without tools it is seer_chat_render_marked; bad input refused.
 */
#include "testutil.h"

#include "tokenizer/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char QWEN_EXPECTED[] =
    "<|im_start|>system\n"
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n"
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Paris?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "{\"temp\": 18}\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "sunny\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "It is 18 C.\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "Thanks<|im_end|>\n"
    "<|im_start|>assistant\n";

static const char TOOL[] =
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
    "\"required\": [\"city\"]}}}";

static const seer_chat_tool_call PARIS[] = {{"get_weather", "{\"city\": \"Paris\"}"}};
static const seer_chat_tool_call NICE[] = {{"get_weather", "{\"city\": \"Nice\"}"}};
static const seer_chat_message MSGS[] = {
    {"user", "Weather in Paris?"}, {"assistant", ""}, {"tool", "{\"temp\": 18}"},
    {"tool", "sunny"},             {"assistant", "It is 18 C."}, {"user", "Thanks"},
};
static const seer_chat_calls CALLS[] = {{NULL, 0}, {PARIS, 1}, {NULL, 0}, {NULL, 0}, {NICE, 1}, {NULL, 0}};
enum { N = sizeof MSGS / sizeof *MSGS };

static seer_chat_template qwen(void) {
    seer_chat_template t = {.kind = SEER_CHAT_CHATML};
    snprintf(t.default_system, sizeof t.default_system, "%s",
             "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    return t;
}

static void test_qwen_format(void **state) {
    (void)state;
    const seer_chat_template t = qwen();
    const char *tools[] = {TOOL};
    char buf[4096];
    uint8_t mark[4096];
    size_t len = 0;
    ASSERT_OK(seer_chat_render_tools(&t, MSGS, CALLS, N, tools, 1, true, buf, mark, sizeof buf, &len));
    if (strcmp(buf, QWEN_EXPECTED))
        fail_msg("rendered:\n%s\n--- expected:\n%s", buf, QWEN_EXPECTED);
    assert_int_equal(len, strlen(QWEN_EXPECTED));
    /* the template's markers are marked, the tool text (content) is not */
    const char *s = strstr(buf, "<|im_start|>assistant\n<tool_call>");
    assert_non_null(s);
    assert_int_equal(mark[s - buf], 1);
    assert_int_equal(mark[strstr(buf, "<tool_call>") - buf], 0);
    assert_int_equal(mark[strstr(buf, "<tools>") - buf], 0);
    /* too small a buffer: the length needed, an error */
    size_t need = 0;
    assert_int_equal(seer_chat_render_tools(&t, MSGS, CALLS, N, tools, 1, true, buf, NULL, 10, &need),
                     SEER_ERR_INVALID_ARG);
    assert_int_equal(need, len);
}

/* A system message of its own comes before the tools; no tools: the plain rendering. */
static void test_system_and_plain(void **state) {
    (void)state;
    const seer_chat_template t = qwen();
    const seer_chat_message m[] = {{"system", "Be brief."}, {"user", "Hi"}};
    const char *tools[] = {TOOL};
    char buf[4096], plain[4096];
    size_t len, plen;
    ASSERT_OK(seer_chat_render_tools(&t, m, NULL, 2, tools, 1, true, buf, NULL, sizeof buf, &len));
    const char head[] = "<|im_start|>system\nBe brief.\n\n# Tools\n";
    assert_true(!strncmp(buf, head, sizeof head - 1));
    assert_null(strstr(buf, "You are Qwen"));
    ASSERT_OK(seer_chat_render_tools(&t, m, NULL, 2, NULL, 0, true, buf, NULL, sizeof buf, &len));
    ASSERT_OK(seer_chat_render(&t, m, 2, true, plain, sizeof plain, &plen));
    assert_string_equal(buf, plain);
}

/* llama3 has no tool format of its own: the same text in its turns. */
static void test_generic(void **state) {
    (void)state;
    seer_chat_template t = {.kind = SEER_CHAT_LLAMA3};
    const char *tools[] = {TOOL};
    char buf[4096];
    size_t len;
    ASSERT_OK(seer_chat_render_tools(&t, MSGS, CALLS, N, tools, 1, true, buf, NULL, sizeof buf, &len));
    assert_non_null(strstr(buf, "<|start_header_id|>system<|end_header_id|>\n\n# Tools\n"));
    assert_non_null(strstr(buf, TOOL));
    assert_non_null(strstr(buf, "<|start_header_id|>assistant<|end_header_id|>\n\n<tool_call>\n{\"name\": "
                                "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|eot_id|>"));
    assert_non_null(strstr(buf, "<|start_header_id|>user<|end_header_id|>\n\n<tool_response>\n{\"temp\": 18}\n"
                                "</tool_response>\n<tool_response>\nsunny\n</tool_response><|eot_id|>"));
}

static void test_bad(void **state) {
    (void)state;
    const seer_chat_template t = qwen();
    char buf[256];
    size_t len;
    const seer_chat_calls on_user[] = {{PARIS, 1}};
    const seer_chat_message u[] = {{"user", "x"}};
    assert_int_equal(seer_chat_render_tools(&t, u, on_user, 1, NULL, 0, true, buf, NULL, sizeof buf, &len),
                     SEER_ERR_INVALID_ARG);
    const seer_chat_tool_call nameless[] = {{NULL, "{}"}};
    const seer_chat_calls c[] = {{nameless, 1}};
    const seer_chat_message a[] = {{"assistant", ""}};
    assert_int_equal(seer_chat_render_tools(&t, a, c, 1, NULL, 0, true, buf, NULL, sizeof buf, &len),
                     SEER_ERR_INVALID_ARG);
    const char *no_tool[] = {NULL};
    assert_int_equal(seer_chat_render_tools(&t, u, NULL, 1, no_tool, 1, true, buf, NULL, sizeof buf, &len),
                     SEER_ERR_INVALID_ARG);
    /* "tool" is a role of conversations with tools only */
    const seer_chat_message tm[] = {{"tool", "x"}};
    assert_int_equal(seer_chat_render(&t, tm, 1, true, buf, sizeof buf, &len), SEER_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen_format),
        cmocka_unit_test(test_system_and_plain),
        cmocka_unit_test(test_generic),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
