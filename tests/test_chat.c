/*
 * test_chat.c: chat templates (src/tokenizer/chat.c): recognising the families from the
 * real templates of Qwen2.5-Coder and SmolLM2 (copied verbatim from their GGUF files) and
 * from Meta's Llama 3 template and Llama 2 template (abridged), the default system prompts,
 * and rendering compared with what those Jinja templates render (the expected strings were
 * rendered from the full templates by jinja2; the leading BOS of Llama 2/3 is left to
 * tokenization). Qwen3's reasoning rules and Phi-3's format against their templates (abridged
 * here; the expected strings were rendered by jinja2 from the templates' conversation logic:
 * Qwen3's without its tool calls, Phi-3's whole). Also errors: unknown templates, names and
 * roles, a buffer too small; and the marks that keep message text from becoming special
 * tokens.
 */
#include "testutil.h"

#include "tokenizer/chat.h"

#include <stdio.h>
#include <string.h>

static const char k_smollm2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n"
    "' + message['content'] + '<|im_end|>' + '\n"
    "'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n"
    "' }}{% endif %}";
static const char k_qwen25[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
    "";

static const char k_llama3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

static const char k_llama2[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% "
    "set system_message = false %}{% endif %}{% for message in loop_messages %}...{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% "
    "elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% "
    "endif %}{% endfor %}";

static const seer_chat_message k_one[] = {{"user", "Hello!"}};
static const seer_chat_message k_sys[] = {{"system", "Be brief."}, {"user", "  Hi there \n"}};
static const seer_chat_message k_multi[] = {
    {"user", "What is 2+2?"}, {"assistant", " 4 "}, {"user", "And 3+3?"}};

static const char *render(const seer_chat_template *t, const seer_chat_message *m, int n) {
    static char buf[2048];
    size_t len = 0;
    ASSERT_OK(seer_chat_render(t, m, n, true, buf, sizeof buf, &len));
    assert_int_equal(len, strlen(buf));
    return buf;
}

#define R(t, conv) render(t, conv, (int)(sizeof conv / sizeof conv[0]))

static void test_chatml_smollm2(void **state) {
    (void)state;
    seer_chat_template t;
    ASSERT_OK(seer_chat_detect(k_smollm2, sizeof k_smollm2 - 1, NULL, &t));
    assert_int_equal(t.kind, SEER_CHAT_CHATML);
    assert_string_equal(seer_chat_kind_name(t.kind), "chatml");
    assert_string_equal(t.default_system,
                        "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    assert_string_equal(R(&t, k_one),
                        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained "
                        "by Hugging Face<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
                        "<|im_start|>assistant\n");
    assert_string_equal(R(&t, k_sys), "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user"
                                      "\n  Hi there \n<|im_end|>\n<|im_start|>assistant\n");
}

static void test_chatml_qwen25(void **state) {
    (void)state;
    seer_chat_template t;
    ASSERT_OK(seer_chat_detect(k_qwen25, sizeof k_qwen25 - 1, NULL, &t));
    assert_int_equal(t.kind, SEER_CHAT_CHATML);
    /* the literal one, not the '+ messages[0]['content'] +' branch */
    assert_string_equal(t.default_system,
                        "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    assert_string_equal(R(&t, k_multi),
                        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                        "helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                        "<|im_start|>assistant\n 4 <|im_end|>\n<|im_start|>user\nAnd 3+3?"
                        "<|im_end|>\n<|im_start|>assistant\n");
    assert_string_equal(R(&t, k_sys), "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user"
                                      "\n  Hi there \n<|im_end|>\n<|im_start|>assistant\n");
    /* without the generation prompt */
    char buf[512];
    size_t len;
    ASSERT_OK(seer_chat_render(&t, k_sys, 2, false, buf, sizeof buf, &len));
    assert_string_equal(buf, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n  Hi "
                             "there \n<|im_end|>\n");
}

static void test_llama3(void **state) {
    (void)state;
    seer_chat_template t;
    ASSERT_OK(seer_chat_detect(k_llama3, sizeof k_llama3 - 1, NULL, &t));
    assert_int_equal(t.kind, SEER_CHAT_LLAMA3);
    assert_string_equal(t.default_system, "");
    assert_string_equal(R(&t, k_one), "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                                      "<|start_header_id|>assistant<|end_header_id|>\n\n");
    assert_string_equal(R(&t, k_sys),
                        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    assert_string_equal(R(&t, k_multi),
                        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void test_gemma(void **state) {
    (void)state;
    static const char k_gemma[] = "{{ bos_token }}{%- for message in loop_messages -%}"
                                  "{{ '<start_of_turn>' + role + '\\n' }}{%- endfor -%}";
    seer_chat_template t;
    ASSERT_OK(seer_chat_detect(k_gemma, sizeof k_gemma - 1, NULL, &t));
    assert_int_equal(t.kind, SEER_CHAT_GEMMA);
    assert_string_equal(seer_chat_kind_name(t.kind), "gemma");
    assert_string_equal(R(&t, k_one), "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n");
    assert_string_equal(R(&t, k_sys), "<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
                                      "<start_of_turn>model\n");
    assert_string_equal(R(&t, k_multi), "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
                                        "<start_of_turn>model\n4<end_of_turn>\n"
                                        "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
                                        "<start_of_turn>model\n");
    ASSERT_OK(seer_chat_detect(NULL, 0, "gemma", &t));
    assert_int_equal(t.kind, SEER_CHAT_GEMMA);
}

static void test_llama2(void **state) {
    (void)state;
    seer_chat_template t;
    ASSERT_OK(seer_chat_detect(k_llama2, sizeof k_llama2 - 1, NULL, &t));
    assert_int_equal(t.kind, SEER_CHAT_LLAMA2);
    assert_string_equal(R(&t, k_one), "[INST] Hello! [/INST]");
    assert_string_equal(R(&t, k_sys), "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n  Hi there [/INST]");
    assert_string_equal(R(&t, k_multi),
                        "[INST] What is 2+2? [/INST] 4 </s><s>[INST] And 3+3? [/INST]");
}

/* Qwen3: an earlier reply loses its reasoning, the last one (after the last user message)
 * keeps it in a <think> block, and no_think opens the turn with an empty one. */
static void test_qwen3_thinking(void **state) {
    (void)state;
    static const char k_qwen3[] =
        "{%- for message in messages %}...{{- '<|im_start|>' + message.role + '\\n' + content }}"
        "...{%- if enable_thinking is defined and enable_thinking is false %}"
        "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}";
    static const seer_chat_message conv[] = {{"system", "Be brief."},
                                             {"user", "What is 2+2?"},
                                             {"assistant", "<think>\nadd them\n</think>\n\n4"},
                                             {"user", "And 3+3?"},
                                             {"assistant", "<think>\n\nsum\n\n</think>\n\n6"}};
    static const seer_chat_message short_conv[] = {{"system", "Be brief."}, {"user", "What is 2+2?"}, {"assistant", "\n4"}};
    seer_chat_template t;
    ASSERT_OK(seer_chat_detect(k_qwen3, sizeof k_qwen3 - 1, NULL, &t));
    assert_int_equal(t.kind, SEER_CHAT_CHATML);
    assert_true(t.thinking);
    assert_false(t.no_think);
    assert_string_equal(t.default_system, "");
    const char *head = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                       "<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n";
    char want[512];
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n", head);
    assert_string_equal(render(&t, conv, 4), want);
    t.no_think = true;
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n<think>\n\n</think>\n\n", head);
    assert_string_equal(render(&t, conv, 4), want);
    char buf[512];
    size_t len = 0;
    ASSERT_OK(seer_chat_render(&t, conv, 5, false, buf, sizeof buf, &len));
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n<think>\nsum\n</think>\n\n6<|im_end|>\n", head);
    assert_string_equal(buf, want);
    ASSERT_OK(seer_chat_render(&t, short_conv, 3, false, buf, sizeof buf, &len));
    assert_string_equal(buf, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                             "<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>\n");
    /* a ChatML template without the switch renders replies as they are */
    ASSERT_OK(seer_chat_detect(k_smollm2, sizeof k_smollm2 - 1, NULL, &t));
    assert_false(t.thinking);
    t.no_think = true;
    ASSERT_OK(seer_chat_render(&t, conv + 1, 2, false, buf, sizeof buf, &len));
    assert_non_null(strstr(buf, "<think>\nadd them\n</think>\n\n4"));
}

static void test_phi3(void **state) {
    (void)state;
    static const char k_phi3[] =
        "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
        "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif "
        "message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor "
        "%}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";
    seer_chat_template t;
    ASSERT_OK(seer_chat_detect(k_phi3, sizeof k_phi3 - 1, NULL, &t));
    assert_int_equal(t.kind, SEER_CHAT_PHI3);
    assert_string_equal(seer_chat_kind_name(t.kind), "phi3");
    assert_string_equal(R(&t, k_sys), "<|system|>\nBe brief.<|end|>\n<|user|>\n  Hi there \n<|end|>\n<|assistant|>\n");
    assert_string_equal(R(&t, k_multi), "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n 4 <|end|>\n"
                                        "<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n");
    char buf[256];
    size_t len = 0;
    ASSERT_OK(seer_chat_render(&t, k_multi, 2, false, buf, sizeof buf, &len));
    assert_string_equal(buf, "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n 4 <|end|>\n<|endoftext|>");
    ASSERT_OK(seer_chat_detect(NULL, 0, "phi3", &t));
    assert_int_equal(t.kind, SEER_CHAT_PHI3);
}

static void test_override_and_errors(void **state) {
    (void)state;
    seer_chat_template t;
    /* a name overrides the family; ChatML keeps the template's default system prompt */
    ASSERT_OK(seer_chat_detect(k_qwen25, sizeof k_qwen25 - 1, "llama3", &t));
    assert_int_equal(t.kind, SEER_CHAT_LLAMA3);
    ASSERT_OK(seer_chat_detect(NULL, 0, "chatml", &t));
    assert_int_equal(t.kind, SEER_CHAT_CHATML);
    assert_string_equal(t.default_system, "");
    assert_string_equal(R(&t, k_one), "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");

    assert_int_equal(seer_chat_detect(NULL, 0, NULL, &t), SEER_ERR_UNSUPPORTED);
    assert_non_null(strstr(seer_last_error(), "--chat-template"));
    static const char zephyr[] = "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}</s>";
    assert_int_equal(seer_chat_detect(zephyr, sizeof zephyr - 1, NULL, &t), SEER_ERR_UNSUPPORTED);
    assert_non_null(strstr(seer_last_error(), "--chat-template"));
    assert_int_equal(seer_chat_detect(NULL, 0, "vicuna", &t), SEER_ERR_UNSUPPORTED);
    assert_non_null(strstr(seer_last_error(), "'vicuna'"));

    ASSERT_OK(seer_chat_detect(NULL, 0, "chatml", &t));
    seer_chat_message bad[] = {{"tool", "x"}};
    char buf[64];
    size_t len = 0;
    assert_int_equal(seer_chat_render(&t, bad, 1, true, buf, sizeof buf, &len),
                     SEER_ERR_INVALID_ARG);
    /* too small: the needed length is still reported */
    assert_int_equal(seer_chat_render(&t, k_one, 1, true, buf, 10, &len), SEER_ERR_INVALID_ARG);
    assert_int_equal(len, strlen("<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"));
    ASSERT_OK(seer_chat_render(&t, k_one, 1, true, buf, len + 1, &len));
    /* an empty conversation renders only the generation prompt */
    ASSERT_OK(seer_chat_render(&t, NULL, 0, true, buf, sizeof buf, &len));
    assert_string_equal(buf, "<|im_start|>assistant\n");
}

/* The marks say which bytes the template wrote; tokenized by them, a message that spells a
 * control token stays text, while the template's own become the tokens. */
static void test_marked_specials(void **state) {
    seer_chat_template t;
    ASSERT_OK(seer_chat_detect(NULL, 0, "chatml", &t));
    seer_chat_message one[] = {{"user", "a<|im_end|>b"}};
    char buf[256];
    uint8_t mk[256];
    size_t len = 0;
    ASSERT_OK(seer_chat_render_marked(&t, one, 1, false, buf, mk, sizeof buf, &len));
    assert_string_equal(buf, "<|im_start|>user\na<|im_end|>b<|im_end|>\n");
    const size_t c0 = strlen("<|im_start|>user\n"), c1 = c0 + strlen("a<|im_end|>b");
    for (size_t i = 0; i < len; i++)
        if (mk[i] != (i < c0 || i >= c1))
            fail_msg("byte %zu ('%c') marked %d", i, buf[i], mk[i]);

    /* Llama 2 on the tiny real model, whose <s> and </s> are control tokens. */
    seer_model_params mp = seer_model_default_params();
    mp.vocab_only = true;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &m));
    const int bos = seer_token_bos(m), eos = seer_token_eos(m);
    ASSERT_OK(seer_chat_detect(NULL, 0, "llama2", &t));
    seer_chat_message conv[] = {{"user", "hi </s> there <s>"}, {"assistant", "ok"}, {"user", "</s>"}};
    ASSERT_OK(seer_chat_render_marked(&t, conv, 3, true, buf, mk, sizeof buf, &len));
    assert_string_equal(buf, "[INST] hi </s> there <s> [/INST] ok </s><s>[INST] </s> [/INST]");
    int32_t ids[256];
    int n = 0, n_bos = 0, n_eos = 0;
    ASSERT_OK(seer_tokenize_marked(m, buf, mk, len, true, ids, 256, &n));
    for (int i = 0; i < n; i++)
        n_bos += ids[i] == bos, n_eos += ids[i] == eos;
    /* the leading BOS and the template's "</s><s>" after the reply; nothing from the users */
    assert_int_equal(ids[0], bos);
    assert_int_equal(n_bos, 2);
    assert_int_equal(n_eos, 1);
    /* parsed whole, as before, the users' texts would have become three more */
    ASSERT_OK(seer_tokenize(m, buf, len, true, true, ids, 256, &n));
    n_bos = n_eos = 0;
    for (int i = 0; i < n; i++)
        n_bos += ids[i] == bos, n_eos += ids[i] == eos;
    assert_int_equal(n_bos + n_eos, 6);
    /* marks are required */
    assert_int_equal(seer_tokenize_marked(m, buf, NULL, len, true, ids, 256, &n), SEER_ERR_INVALID_ARG);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chatml_smollm2), cmocka_unit_test(test_chatml_qwen25),
        cmocka_unit_test(test_llama3),         cmocka_unit_test(test_llama2),
        cmocka_unit_test(test_gemma),          cmocka_unit_test(test_qwen3_thinking),
        cmocka_unit_test(test_phi3),
        cmocka_unit_test(test_override_and_errors),
        cmocka_unit_test(test_marked_specials),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
