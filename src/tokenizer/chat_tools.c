/*
 * chat_tools.c: conversations with tools (seer_chat_render_tools): the tool definitions, the
 * assistant's tool calls and the tools' results written in Qwen2.5's tool format (Hermes
 * style), then rendered by the template (chat.c) as plain system, user and assistant turns.
 * For ChatML this is, byte for byte, what Qwen2.5's Jinja template writes; the other
 * templates have no tool format of their own and get the same text in their turns.
 *
 * Not for: parsing the model's tool calls back (the server's, tools/seer/serve_tools.c) or
 * JSON itself: the caller gives the texts.
 */
#include "tokenizer/chat.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s) {
    const size_t n = strlen(s);
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, s, n + 1);
    b->len += n;
}

static const char TOOLS_HEAD[] =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

seer_status seer_chat_render_tools(const seer_chat_template *t, const seer_chat_message *msgs,
                                   const seer_chat_calls *calls, int n, const char *const *tools, int n_tools, bool add_assistant, char *buf,
                                   uint8_t *special_ok, size_t cap, size_t *len) {
    if (!t || !len || n < 0 || (n > 0 && !msgs) || n_tools < 0 || (n_tools > 0 && !tools))
        return seer_err(SEER_ERR_INVALID_ARG, "seer_chat_render_tools: bad arguments");
    for (int i = 0; i < n; i++) {
        const seer_chat_message *m = &msgs[i];
        const seer_chat_calls c = calls ? calls[i] : (seer_chat_calls){0};
        if (!m->role || !m->content || c.n < 0 || (c.n && !c.calls))
            return seer_err(SEER_ERR_INVALID_ARG, "chat message %d: bad message", i);
        if (c.n && strcmp(m->role, "assistant"))
            return seer_err(SEER_ERR_INVALID_ARG, "chat message %d: only an assistant makes tool calls", i);
        for (int k = 0; k < c.n; k++)
            if (!c.calls[k].name || !c.calls[k].arguments)
                return seer_err(SEER_ERR_INVALID_ARG, "chat message %d: tool call %d has no name or arguments", i, k);
    }
    for (int i = 0; i < n_tools; i++)
        if (!tools[i])
            return seer_err(SEER_ERR_INVALID_ARG, "tool %d has no definition", i);
    /* at most one more message (a system message for the tools) */
    seer_chat_message *out = calloc((size_t)n + 1, sizeof *out);
    sbuf *texts = calloc((size_t)n + 1, sizeof *texts);
    int m = 0;
    seer_status st = out && texts ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
    int i = 0;
    if (st == SEER_OK && n_tools > 0) {
        sbuf *b = &texts[m];
        const bool own = n > 0 && !strcmp(msgs[0].role, "system");
        const char *sys = own ? msgs[0].content : t->default_system;
        sb_put(b, sys);
        sb_put(b, TOOLS_HEAD + (*sys ? 0 : 2)); /* no blank lines before the tools alone */
        for (int k = 0; k < n_tools; k++) {
            sb_put(b, "\n");
            sb_put(b, tools[k]);
        }
        sb_put(b, TOOLS_TAIL);
        out[m++].role = "system";
        i = own ? 1 : 0;
    }
    for (; st == SEER_OK && i < n; i++) {
        const seer_chat_message *in = &msgs[i];
        sbuf *b = &texts[m];
        if (!strcmp(in->role, "tool")) { /* a run of results: one user turn */
            for (; i < n && !strcmp(msgs[i].role, "tool"); i++) {
                sb_put(b, b->len ? "\n<tool_response>\n" : "<tool_response>\n");
                sb_put(b, msgs[i].content);
                sb_put(b, "\n</tool_response>");
            }
            i--;
            out[m++].role = "user";
            continue;
        }
        sb_put(b, in->content);
        const seer_chat_calls c = calls ? calls[i] : (seer_chat_calls){0};
        for (int k = 0; k < c.n; k++) {
            sb_put(b, b->len ? "\n<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": \"");
            sb_put(b, c.calls[k].name);
            sb_put(b, "\", \"arguments\": ");
            sb_put(b, c.calls[k].arguments);
            sb_put(b, "}\n</tool_call>");
        }
        out[m++].role = in->role;
    }
    for (int k = 0; st == SEER_OK && k < m; k++) {
        if (texts[k].oom)
            st = seer_err(SEER_ERR_OOM, "out of memory");
        out[k].content = texts[k].p ? texts[k].p : "";
    }
    if (st == SEER_OK)
        st = seer_chat_render_marked(t, out, m, add_assistant, buf, special_ok, cap, len);
    for (int k = 0; texts && k <= n; k++)
        free(texts[k].p);
    free(texts);
    free(out);
    return st;
}
