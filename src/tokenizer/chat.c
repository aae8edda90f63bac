/*
 * chat.c: rendering a conversation in the format of a model's chat template.
 *
 * Families (recognised by a substring of tokenizer.chat_template):
 *   chatml  "<|im_start|>"        Qwen2/Qwen2.5, SmolLM2: each message is
 *           <|im_start|>ROLE\nCONTENT<|im_end|>\n; the templates of Qwen2.5 and SmolLM2 put a
 *           default system message first when the conversation has none, which is taken
 *           from the template text itself.
 *   llama3  "<|start_header_id|>"  <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
 *           with the content trimmed (Meta's template; its leading <|begin_of_text|> is the
 *           BOS that tokenization adds).
 *   llama2  "[INST]"               <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] ANSWER </s>
 *           with contents stripped, the system message folded into the first user turn and
 *           the first <s> left to tokenization (Meta's template).
 *   gemma   "<start_of_turn>"      <start_of_turn>ROLE\nCONTENT<end_of_turn>\n with ROLE user or
 *           model (the assistant), contents trimmed, a system message's text (untrimmed)
 *           and "\n\n" put before the first user message's (Google's Gemma 3 template; its
 *           leading <bos> is the BOS that tokenization adds).
 *   phi3    "<|assistant|>" with "<|end|>"   <|ROLE|>\nCONTENT<|end|>\n, and <|endoftext|>
 *           after the last message when the assistant's turn is not opened (Microsoft's
 *           Phi-3 template).
 * A ChatML template that reads enable_thinking is Qwen3's: an assistant message keeps only
 * what follows its last </think> (its reasoning is not shown again), except the replies after
 * the last user message, which keep the reasoning between <think>\n and \n</think>\n\n; and
 * with no_think the assistant's turn opens with an empty <think>\n\n</think>\n\n.
 * Not for: Jinja in general, tool calls, or templates outside these families (the caller is
 * told to pick one with --chat-template).
 */
#include "tokenizer/chat.h"

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include <string.h>

static const char *const k_names[] = {NULL, "chatml", "llama3", "llama2", "gemma", "phi3"};

const char *seer_chat_kind_name(seer_chat_kind k) {
    return k >= SEER_CHAT_CHATML && k <= SEER_CHAT_PHI3 ? k_names[k] : "unknown";
}

static const char *find_in(const char *s, size_t n, const char *lit) {
    size_t k = strlen(lit);
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (s[i] == lit[0] && memcmp(s + i, lit, k) == 0)
            return s + i;
    return NULL;
}

/* The literal system prompt of a ChatML template: the text between "<|im_start|>system"
 * plus a newline (real or Jinja-escaped) and "<|im_end|>", when that text is plain (no
 * quotes, braces or '+', i.e. not an expression such as messages[0]['content']). */
static void chatml_default_system(const char *t, size_t n, char *out, size_t cap) {
    static const char open[] = "<|im_start|>system";
    out[0] = 0;
    for (const char *p = t; p && (p = find_in(p, n - (size_t)(p - t), open));) {
        const char *q = p + sizeof open - 1, *end = t + n;
        p = q;
        bool escaped = false;
        if (q < end && *q == '\n')
            q++;
        else if (q + 1 < end && q[0] == '\\' && q[1] == 'n')
            q += 2, escaped = true;
        else
            continue;
        const char *close = find_in(q, (size_t)(end - q), "<|im_end|>");
        if (!close || close == q)
            continue;
        bool plain = true;
        for (const char *c = q; c < close && plain; c++)
            plain = !strchr("'\"{}+", *c);
        if (!plain)
            continue;
        size_t o = 0;
        for (const char *c = q; c < close && o + 1 < cap; c++) {
            if (escaped && c + 1 < close && c[0] == '\\' && c[1] == 'n') {
                out[o++] = '\n';
                c++;
            } else {
                out[o++] = *c;
            }
        }
        out[o] = 0;
        return;
    }
}

seer_status seer_chat_detect(const char *tmpl, size_t len, const char *name,
                             seer_chat_template *out) {
    if (!out)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_chat_detect: out is NULL");
    memset(out, 0, sizeof *out);
    if (!tmpl)
        len = 0;
    seer_chat_kind k = 0;
    if (name) {
        for (int i = SEER_CHAT_CHATML; i <= SEER_CHAT_PHI3; i++)
            if (!strcmp(name, k_names[i]))
                k = (seer_chat_kind)i;
        if (!k)
            return seer_err(SEER_ERR_UNSUPPORTED,
                            "unknown chat template '%s' (--chat-template takes chatml, llama3, "
                            "llama2, gemma or phi3)", name);
    } else if (!tmpl) {
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "the model has no chat template (tokenizer.chat_template); choose one "
                        "with --chat-template chatml|llama3|llama2|gemma|phi3");
    } else if (find_in(tmpl, len, "<|im_start|>")) {
        k = SEER_CHAT_CHATML;
    } else if (find_in(tmpl, len, "<|start_header_id|>")) {
        k = SEER_CHAT_LLAMA3;
    } else if (find_in(tmpl, len, "[INST]")) {
        k = SEER_CHAT_LLAMA2;
    } else if (find_in(tmpl, len, "<start_of_turn>")) {
        k = SEER_CHAT_GEMMA;
    } else if (find_in(tmpl, len, "<|assistant|>") && find_in(tmpl, len, "<|end|>")) {
        k = SEER_CHAT_PHI3;
    } else {
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "the model's chat template is not one seer knows; choose one with "
                        "--chat-template chatml|llama3|llama2|gemma|phi3");
    }
    out->kind = k;
    if (k == SEER_CHAT_CHATML && tmpl) {
        chatml_default_system(tmpl, len, out->default_system, sizeof out->default_system);
        out->thinking = find_in(tmpl, len, "enable_thinking") != NULL;
    }
    return SEER_OK;
}

seer_status seer_chat_template_init(const seer_model *model, const char *name,
                                    seer_chat_template *out) {
    if (!model || !out)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_chat_template_init: bad arguments");
    const gguf_kv *kv = seer_gguf_find_kv(model->gguf, "tokenizer.chat_template");
    if (kv && kv->val.type == GGUF_TYPE_STRING)
        return seer_chat_detect(kv->val.str.s, (size_t)kv->val.str.len, name, out);
    return seer_chat_detect(NULL, 0, name, out);
}

bool seer_token_is_eog(const seer_model *model, int32_t token) {
    return model && seer_vocab_is_eog(seer_model_vocab(model), token);
}

/* ---------------------------------------------------------------------------------------- */
/* Rendering                                                                                */

typedef struct {
    char *buf;
    uint8_t *mark; /* [cap] 1: the template's text, 0: a message's; NULL: not kept */
    size_t cap, len;
    bool content;  /* what is put now comes from a message */
} out_buf;

static void put_n(out_buf *o, const char *s, size_t n) {
    if (o->len + n < o->cap) {
        memcpy(o->buf + o->len, s, n);
        if (o->mark)
            memset(o->mark + o->len, !o->content, n);
    }
    o->len += n;
}

/* Text from a message (or the default system prompt), never parsed for special tokens. */
static void put_content(out_buf *o, const char *s) {
    o->content = true;
    put_n(o, s, strlen(s));
    o->content = false;
}

static void put(out_buf *o, const char *s) { put_n(o, s, strlen(s)); }

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Jinja's trim / Python's strip() on ASCII whitespace. */
static void put_trimmed(out_buf *o, const char *s) {
    size_t n = strlen(s), a = 0;
    while (a < n && is_space(s[a]))
        a++;
    while (n > a && is_space(s[n - 1]))
        n--;
    o->content = true;
    put_n(o, s + a, n - a);
    o->content = false;
}

/* An assistant message as Qwen3's template renders it: the text after the last </think>
 * without its leading newlines; a reply after the last user message (late) keeps its
 * reasoning (before the first </think>, after the <think> before that, newlines stripped at
 * both ends) in a <think> block, which the last message always gets. */
static void put_qwen3_reply(out_buf *o, const char *c, bool late, bool last) {
    const char *first = strstr(c, "</think>"), *close = first;
    for (const char *p = first; p && (p = strstr(p + 1, "</think>"));)
        close = p;
    const char *body = c, *r0 = c, *r1 = c;
    if (first) {
        body = close + strlen("</think>");
        for (const char *p = c; (p = strstr(p, "<think>")) && p < first; p++)
            r0 = p + strlen("<think>");
        r1 = first;
        while (r1 > r0 && r1[-1] == '\n')
            r1--;
        while (r0 < r1 && *r0 == '\n')
            r0++;
    }
    const bool wrap = late && (last || r1 > r0);
    if (first || wrap)
        while (*body == '\n')
            body++;
    if (wrap) {
        put(o, "<think>\n");
        o->content = true;
        put_n(o, r0, (size_t)(r1 - r0));
        o->content = false;
        put(o, "\n</think>\n\n");
    }
    put_content(o, body);
}

static void render_chatml(const seer_chat_template *t, const seer_chat_message *m, int n,
                          bool add_assistant, out_buf *o) {
    if (t->default_system[0] && (n == 0 || strcmp(m[0].role, "system") != 0)) {
        put(o, "<|im_start|>system\n");
        put_content(o, t->default_system);
        put(o, "<|im_end|>\n");
    }
    int last_user = n - 1;
    while (t->thinking && last_user >= 0 && strcmp(m[last_user].role, "user"))
        last_user--;
    for (int i = 0; i < n; i++) {
        put(o, "<|im_start|>");
        put(o, m[i].role);
        put(o, "\n");
        if (t->thinking && !strcmp(m[i].role, "assistant"))
            put_qwen3_reply(o, m[i].content, i > last_user, i == n - 1);
        else
            put_content(o, m[i].content);
        put(o, "<|im_end|>\n");
    }
    if (add_assistant)
        put(o, t->thinking && t->no_think ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                          : "<|im_start|>assistant\n");
}

static void render_phi3(const seer_chat_message *m, int n, bool add_assistant, out_buf *o) {
    for (int i = 0; i < n; i++) {
        put(o, "<|");
        put(o, m[i].role);
        put(o, "|>\n");
        put_content(o, m[i].content);
        put(o, "<|end|>\n");
    }
    put(o, add_assistant ? "<|assistant|>\n" : "<|endoftext|>");
}

static void render_llama3(const seer_chat_message *m, int n, bool add_assistant, out_buf *o) {
    for (int i = 0; i < n; i++) {
        put(o, "<|start_header_id|>");
        put(o, m[i].role);
        put(o, "<|end_header_id|>\n\n");
        put_trimmed(o, m[i].content);
        put(o, "<|eot_id|>");
    }
    if (add_assistant)
        put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_llama2(const seer_chat_message *m, int n, out_buf *o) {
    const char *sys = NULL;
    int first = 0;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sys = m[0].content;
        first = 1;
    }
    for (int i = first; i < n; i++) {
        if (!strcmp(m[i].role, "user")) {
            if (i > first)
                put(o, "<s>");
            put(o, "[INST] ");
            if (sys && i == first) {
                /* Meta's template strips '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + user as a
                 * whole: only the user text's end loses its whitespace. */
                const char *u = m[i].content;
                size_t len = strlen(u);
                while (len > 0 && is_space(u[len - 1]))
                    len--;
                put(o, "<<SYS>>\n");
                put_content(o, sys);
                put(o, "\n<</SYS>>\n\n");
                o->content = true;
                put_n(o, u, len);
                o->content = false;
            } else {
                put_trimmed(o, m[i].content);
            }
            put(o, " [/INST]");
        } else if (!strcmp(m[i].role, "assistant")) {
            put(o, " ");
            put_trimmed(o, m[i].content);
            put(o, " </s>");
        }
    }
}

static void render_gemma(const seer_chat_message *m, int n, bool add_assistant, out_buf *o) {
    const char *sys = NULL;
    int first = 0;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sys = m[0].content;
        first = 1;
    }
    for (int i = first; i < n; i++) {
        put(o, "<start_of_turn>");
        put(o, strcmp(m[i].role, "assistant") ? m[i].role : "model");
        put(o, "\n");
        if (sys && i == first) { /* Google's template: the system text as it is, then "\n\n" */
            put_content(o, sys);
            put(o, "\n\n");
        }
        put_trimmed(o, m[i].content);
        put(o, "<end_of_turn>\n");
    }
    if (add_assistant)
        put(o, "<start_of_turn>model\n");
}

seer_status seer_chat_render(const seer_chat_template *t, const seer_chat_message *msgs, int n,
                             bool add_assistant, char *buf, size_t cap, size_t *len) {
    return seer_chat_render_marked(t, msgs, n, add_assistant, buf, NULL, cap, len);
}

seer_status seer_chat_render_marked(const seer_chat_template *t, const seer_chat_message *msgs, int n,
                                    bool add_assistant, char *buf, uint8_t *special_ok, size_t cap,
                                    size_t *len) {
    if (!t || !len || n < 0 || (n > 0 && !msgs) || (cap > 0 && !buf))
        return seer_err(SEER_ERR_INVALID_ARG, "seer_chat_render: bad arguments");
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || !msgs[i].content ||
            (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")))
            return seer_err(SEER_ERR_INVALID_ARG,
                            "chat message %d: role must be system, user or assistant", i);
    }
    out_buf o = {buf, special_ok, cap, 0, false};
    switch (t->kind) {
    case SEER_CHAT_CHATML:
        render_chatml(t, msgs, n, add_assistant, &o);
        break;
    case SEER_CHAT_LLAMA3:
        render_llama3(msgs, n, add_assistant, &o);
        break;
    case SEER_CHAT_LLAMA2:
        render_llama2(msgs, n, &o);
        break;
    case SEER_CHAT_GEMMA:
        render_gemma(msgs, n, add_assistant, &o);
        break;
    case SEER_CHAT_PHI3:
        render_phi3(msgs, n, add_assistant, &o);
        break;
    default:
        return seer_err(SEER_ERR_INVALID_ARG, "seer_chat_render: unknown template kind %d",
                        (int)t->kind);
    }
    *len = o.len;
    if (o.len >= cap)
        return seer_err(SEER_ERR_INVALID_ARG, "the chat needs %zu bytes but the buffer holds %zu",
                        o.len + 1, cap);
    buf[o.len] = 0;
    return SEER_OK;
}
