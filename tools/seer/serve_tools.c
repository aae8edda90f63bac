/*
 * serve_tools.c: OpenAI tool calling in `seer serve`: the `tools` definitions checked and
 * written as the template lists them, assistant `tool_calls` and `tool` messages of the
 * conversation, and the model's <tool_call>{"name": ..., "arguments": {...}}</tool_call>
 * output (Qwen2.5's Hermes format, seer_chat_render_tools) parsed back into `tool_calls`.
 *
 * tool_choice: "auto" renders the tools and parses the output; "none" renders none and
 * parses nothing. "required" and a named function also constrain the output to exactly one
 * call (serve_tools_grammar: the JSON schema of serve_tools_schema between the tags), which the
 * constraint engine enforces exactly, under speculation too.
 *
 * Not for: the chat template itself (src/tokenizer/chat_tools.c) or the HTTP layer.
 */
#define _GNU_SOURCE /* memmem */
#include "serve_tools.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DUMP_FLAGS (JSON_PRESERVE_ORDER) /* ", " and ": " as Python's json.dumps */

static bool bad(serve_error *e, const char *param, const char *fmt, const char *what) {
    serve_fail(e, 400, param, "invalid_value", fmt, what);
    return false;
}

bool serve_tools_parse(json_t *root, serve_tools *t, serve_error *e) {
    memset(t, 0, sizeof *t);
    json_t *tools = json_object_get(root, "tools"), *choice = json_object_get(root, "tool_choice");
    const bool has = tools && !json_is_null(tools) && json_is_array(tools) && json_array_size(tools) > 0;
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return bad(e, "tools", "'tools' must be an array%s", "");
    if (choice && !json_is_null(choice)) {
        const char *c = json_is_string(choice) ? json_string_value(choice) : NULL;
        if (c && !strcmp(c, "none"))
            return true;
        if (!has)
            return bad(e, "tool_choice", "'tool_choice' needs 'tools'%s", "");
        if (!c || strcmp(c, "auto")) {
            json_t *fn = json_object_get(choice, "function"), *nm = json_object_get(fn, "name");
            if (c && !strcmp(c, "required")) {
                t->force = true;
            } else if (json_is_object(choice) && json_is_string(json_object_get(choice, "type")) &&
                       !strcmp(json_string_value(json_object_get(choice, "type")), "function") && json_is_string(nm) &&
                       json_string_length(nm) > 0 && json_string_length(nm) < sizeof t->only) {
                t->force = true;
                snprintf(t->only, sizeof t->only, "%s", json_string_value(nm));
            } else {
                return bad(e, "tool_choice",
                           "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                           "\"function\": {\"name\": ...}}%s", "");
            }
        }
    }
    if (!has)
        return true;
    const size_t n = json_array_size(tools);
    if (n > 128)
        return bad(e, "tools", "'tools' holds too many tools (at most 128)%s", "");
    t->defs = calloc(n, sizeof *t->defs);
    if (!t->defs) {
        serve_fail(e, 500, NULL, NULL, "out of memory");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(tools, i), *f = json_object_get(x, "function");
        json_t *name = json_object_get(f, "name"), *desc = json_object_get(f, "description");
        json_t *par = json_object_get(f, "parameters");
        if (!json_is_object(x) || !json_is_string(json_object_get(x, "type")) ||
            strcmp(json_string_value(json_object_get(x, "type")), "function") || !json_is_object(f) ||
            !json_is_string(name) || (desc && !json_is_null(desc) && !json_is_string(desc)) ||
            (par && !json_is_null(par) && !json_is_object(par))) {
            serve_tools_free(t);
            return bad(e, "tools", "each of 'tools' must be {\"type\": \"function\", \"function\": {\"name\": string, "
                                   "\"description\"?: string, \"parameters\"?: object}}%s", "");
        }
        const char *nm = json_string_value(name);
        size_t k = 0;
        while (nm[k] && (isalnum((unsigned char)nm[k]) || nm[k] == '_' || nm[k] == '-'))
            k++;
        if (k == 0 || nm[k] || k > 64) {
            serve_tools_free(t);
            return bad(e, "tools", "'tools': a function name must be 1 to 64 of a-z, A-Z, 0-9, _ and -%s", "");
        }
        /* as the template lists it: type, then the function's name, description, parameters */
        json_t *fn = json_pack("{s:s}", "name", nm);
        if (desc && json_is_string(desc))
            json_object_set(fn, "description", desc);
        if (par && json_is_object(par))
            json_object_set(fn, "parameters", par);
        json_t *def = json_pack("{s:s,s:o}", "type", "function", "function", fn);
        t->defs[i] = def ? json_dumps(def, DUMP_FLAGS) : NULL;
        json_decref(def);
        if (!t->defs[i]) {
            serve_tools_free(t);
            serve_fail(e, 500, NULL, NULL, "out of memory");
            return false;
        }
        t->n = (int)i + 1;
    }
    t->tools = json_incref(tools);
    t->on = true;
    if (t->only[0]) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = !strcmp(json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"),
                                                              "name")),
                            t->only);
        if (!found) {
            serve_tools_free(t);
            return bad(e, "tool_choice", "'tool_choice' names a function that is not one of 'tools'%s", "");
        }
    }
    return true;
}

/* g with the rule name root (outside literals, classes and comments) written as to. */
static char *rename_root(const char *g, const char *to) {
    const size_t n = strlen(g), tl = strlen(to);
    char *o = malloc(n * (tl > 4 ? tl / 4 + 2 : 2) + 1);
    if (!o)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        const char c = g[i];
        if (c == '"' || c == '[') { /* a literal or a class, escapes included */
            const char end = c == '"' ? '"' : ']';
            o[j++] = g[i++];
            while (i < n && g[i] != end) {
                if (g[i] == '\\' && i + 1 < n)
                    o[j++] = g[i++];
                o[j++] = g[i++];
            }
            if (i < n)
                o[j++] = g[i++];
        } else if (c == '#') {
            while (i < n && g[i] != '\n')
                o[j++] = g[i++];
        } else if (isalnum((unsigned char)c) || c == '_' || c == '-') {
            size_t k = i;
            while (k < n && (isalnum((unsigned char)g[k]) || g[k] == '_' || g[k] == '-'))
                k++;
            if (k - i == 4 && !memcmp(g + i, "root", 4)) {
                memcpy(o + j, to, tl);
                j += tl;
            } else {
                memcpy(o + j, g + i, k - i);
                j += k - i;
            }
            i = k;
        } else {
            o[j++] = g[i++];
        }
    }
    o[j] = 0;
    return o;
}

bool serve_tools_grammar(const serve_tools *t, char **out, serve_error *e) {
    *out = NULL;
    json_t *schema = serve_tools_schema(t->tools, t->only[0] ? t->only : NULL);
    char *text = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    json_decref(schema);
    char *g = NULL;
    const seer_status st = text ? seer_constraint_grammar_text(SEER_CONSTRAINT_JSON_SCHEMA, text, strlen(text), &g)
                                : SEER_ERR_OOM;
    free(text);
    if (st != SEER_OK) {
        if (st == SEER_ERR_OOM)
            serve_fail(e, 500, NULL, NULL, "out of memory");
        else
            serve_fail(e, 400, "tools", "unsupported", "a call forced over these tools' parameters: %.200s",
                       seer_last_error());
        return false;
    }
    char *body = rename_root(g, "tool-call-json");
    free(g);
    static const char head[] = "root ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n";
    char *all = body ? malloc(sizeof head + strlen(body)) : NULL;
    if (all) {
        memcpy(all, head, sizeof head - 1);
        strcpy(all + sizeof head - 1, body);
    }
    free(body);
    if (!all) {
        serve_fail(e, 500, NULL, NULL, "out of memory");
        return false;
    }
    *out = all;
    return true;
}

void serve_tools_free(serve_tools *t) {
    for (int i = 0; i < t->n; i++)
        free(t->defs[i]);
    free(t->defs);
    json_decref(t->tools);
    memset(t, 0, sizeof *t);
}

json_t *serve_tools_schema(json_t *tools, const char *only) {
    json_t *any = json_array();
    size_t i;
    json_t *x;
    json_array_foreach(tools, i, x) {
        json_t *f = json_object_get(x, "function"), *par = json_object_get(f, "parameters");
        const char *nm = json_string_value(json_object_get(f, "name"));
        if (!nm || (only && strcmp(only, nm)))
            continue;
        json_t *args = json_is_object(par) ? json_incref(par) : json_pack("{s:s}", "type", "object");
        json_array_append_new(any, json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s],s:b}", "type", "object", "properties",
                                             "name", "const", nm, "arguments", args, "required", "name",
                                             "arguments", "additionalProperties", 0));
    }
    return json_pack("{s:o}", "anyOf", any);
}

char *serve_tools_arguments_text(json_t *args) {
    if (json_is_string(args)) { /* OpenAI's: the arguments as a JSON string */
        json_t *v = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
        char *s = v ? json_dumps(v, DUMP_FLAGS | JSON_ENCODE_ANY) : strdup(json_string_value(args));
        json_decref(v);
        return s;
    }
    return json_dumps(args, DUMP_FLAGS | JSON_ENCODE_ANY);
}

/* An assistant message's tool_calls into calls [n] (names borrowed from x, arguments
 * malloc'd). */
bool serve_tools_message_calls(json_t *x, size_t i, seer_chat_calls *m, serve_error *e) {
    if (!x || json_is_null(x))
        return true;
    const size_t n = json_is_array(x) ? json_array_size(x) : 0;
    seer_chat_tool_call *c = n ? calloc(n, sizeof *c) : NULL;
    if (!json_is_array(x) || n > 128 || (n && !c)) {
        free(c);
        serve_fail(e, 400, "messages", "invalid_type", "message %zu: 'tool_calls' must be an array of calls", i);
        return false;
    }
    m->calls = c;
    for (size_t k = 0; k < n; k++) {
        json_t *f = json_object_get(json_array_get(x, k), "function");
        json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        if (!json_is_string(name) || !(json_is_string(args) || json_is_object(args)) ||
            !(c[k].arguments = serve_tools_arguments_text(args))) {
            serve_fail(e, 400, "messages", "invalid_type",
                       "message %zu: tool call %zu needs a function with a name and arguments", i, k);
            return false;
        }
        c[k].name = json_string_value(name);
        m->n = (int)k + 1;
    }
    return true;
}

/* ---- parsing the output ------------------------------------------------------------------- */

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

size_t serve_tools_safe_prefix(const char *text, size_t len) {
    if (!text || len == 0)
        return 0;
    const char *p = memmem(text, len, OPEN, sizeof OPEN - 1);
    if (p)
        return (size_t)(p - text);
    size_t w = 0; /* an output that opens with '{' may be a bare call */
    while (w < len && isspace((unsigned char)text[w]))
        w++;
    if (w == len || text[w] == '{')
        return 0;
    /* a tail that may still become "<tool_call>" */
    for (size_t k = sizeof OPEN - 2; k > 0; k--)
        if (len >= k && !memcmp(text + len - k, OPEN, k))
            return len - k;
    return len;
}

static void trim(const char **s, size_t *n) {
    while (*n && isspace((unsigned char)**s))
        (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

/* {"name": string, "arguments"?: object} as OpenAI's call with id id; NULL when it is not. */
static json_t *call_of(json_t *call, const char *id) {
    json_t *name = json_object_get(call, "name"), *args = json_object_get(call, "arguments");
    if (!json_is_object(call) || !json_is_string(name) || (args && !json_is_object(args)))
        return NULL;
    char *a = args ? json_dumps(args, DUMP_FLAGS) : strdup("{}");
    json_t *o = a ? json_pack("{s:s,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function", "name", name,
                              "arguments", a)
                  : NULL;
    free(a);
    return o;
}

/* A whole output that is one bare {"name": ..., "arguments": {...}} naming a tool of tools
 * (small models often leave the tags out): that call. */
static json_t *bare_call(const char *text, size_t len, json_t *tools, const char *id_prefix) {
    trim(&text, &len);
    json_t *call = len && *text == '{' ? json_loadb(text, len, 0, NULL) : NULL;
    const char *nm = json_string_value(json_object_get(call, "name"));
    bool known = false;
    size_t i;
    json_t *x;
    json_array_foreach(tools, i, x) {
        const char *t = json_string_value(json_object_get(json_object_get(x, "function"), "name"));
        known |= nm && t && !strcmp(nm, t);
    }
    char id[96];
    snprintf(id, sizeof id, "call_%s_0", id_prefix);
    json_t *o = known ? call_of(call, id) : NULL, *calls = o ? json_array() : NULL;
    json_decref(call);
    if (calls && !json_array_append_new(calls, o))
        return calls;
    json_decref(o);
    json_decref(calls);
    return NULL;
}

json_t *serve_tools_parse_output(const char *text, size_t len, json_t *tools, const char *id_prefix,
                                 size_t *content_len) {
    *content_len = 0;
    if (!text || len == 0)
        return NULL;
    const char *p = memmem(text, len, OPEN, sizeof OPEN - 1);
    if (!p) {
        *content_len = 0;
        return bare_call(text, len, tools, id_prefix);
    }
    json_t *calls = json_array();
    const char *end = text + len;
    while (calls && p) {
        const char *body = p + sizeof OPEN - 1;
        const char *q = memmem(body, (size_t)(end - body), CLOSE, sizeof CLOSE - 1);
        if (!q)
            goto fail;
        size_t n = (size_t)(q - body);
        trim(&body, &n);
        json_t *call = json_loadb(body, n, 0, NULL);
        char id[96];
        snprintf(id, sizeof id, "call_%s_%zu", id_prefix, json_array_size(calls));
        json_t *o = call_of(call, id);
        json_decref(call);
        if (!o || json_array_append_new(calls, o))
            goto fail;
        /* only white space may stand between calls and after the last */
        const char *r = q + sizeof CLOSE - 1;
        while (r < end && isspace((unsigned char)*r))
            r++;
        if (r < end && (size_t)(end - r) >= sizeof OPEN - 1 && !memcmp(r, OPEN, sizeof OPEN - 1))
            p = r;
        else if (r == end)
            p = NULL;
        else
            goto fail;
    }
    if (!calls)
        return NULL;
    size_t n = (size_t)((const char *)memmem(text, len, OPEN, sizeof OPEN - 1) - text);
    while (n && isspace((unsigned char)text[n - 1]))
        n--;
    *content_len = n;
    return calls;
fail:
    json_decref(calls);
    return NULL;
}

/* ---- the response ------------------------------------------------------------------------- */

json_t *serve_tools_message(const char *text, size_t len, json_t *tools, const char *id_prefix, bool *called) {
    size_t cl = 0;
    json_t *calls = serve_tools_parse_output(text, len, tools, id_prefix, &cl);
    *called = calls != NULL;
    if (!calls)
        return json_pack("{s:s,s:s%}", "role", "assistant", "content", text, len);
    const char *c = text;
    while (cl && isspace((unsigned char)*c))
        c++, cl--;
    return json_pack("{s:s,s:o,s:o}", "role", "assistant", "content", cl ? json_stringn(c, cl) : json_null(),
                     "tool_calls", calls);
}

json_t *serve_tools_deltas(json_t *calls) {
    json_t *out = json_array();
    size_t i;
    json_t *x;
    json_array_foreach(calls, i, x) {
        json_t *f = json_object_get(x, "function");
        json_array_append_new(out, json_pack("{s:[{s:i,s:O,s:s,s:{s:O,s:s}}]}", "tool_calls", "index", (int)i, "id",
                                             json_object_get(x, "id"), "type", "function", "function", "name",
                                             json_object_get(f, "name"), "arguments", ""));
        json_array_append_new(out, json_pack("{s:[{s:i,s:{s:O}}]}", "tool_calls", "index", (int)i, "function",
                                             "arguments", json_object_get(f, "arguments")));
    }
    return out;
}
