/*
 * serve_tools.h: tool calling in `seer serve` (serve_tools.c): the request's tools and
 * tool_choice, and the model's output parsed into OpenAI tool_calls.
 *
 * Not for: the chat template (seer_chat_render_tools) or HTTP.
 */
#ifndef SEER_SERVE_TOOLS_H
#define SEER_SERVE_TOOLS_H

#include "serve.h"

typedef struct {
    bool on;      /* tools given and tool_choice not "none": rendered, and the output parsed */
    bool force;   /* tool_choice "required" or a named function: the output is one call
                     (serve_tools_grammar constrains it) */
    char only[72]; /* the named function ("" for "required": any of the tools) */
    int n;
    char **defs;  /* [n] each tool's JSON as the template lists it */
    json_t *tools; /* the request's array (a reference) */
} serve_tools;

/* Reads `tools` and `tool_choice` of a chat request into t (zeroed first). "none" or no
 * tools: t->on false. "required" or a named function: t->force (a named function must be
 * one of the tools). False with e filled on a bad value. */
bool serve_tools_parse(json_t *root, serve_tools *t, serve_error *e);
/* The grammar (src/constrain/grammar.c) of one forced call, "<tool_call>\n" JSON "\n</tool_call>",
 * the JSON that of serve_tools_schema(t->tools, t->only or NULL), malloc'd into *out. False
 * with e filled (400: parameters the schema engine does not cover). */
bool serve_tools_grammar(const serve_tools *t, char **out, serve_error *e);
/* serve_structured.c: where t->force, its grammar as the request's constraint, into p and
 * *out (which serve_structured_read filled): refused (400) beside a response_format or
 * grammar constraint. True, doing nothing, where no call is forced. */
bool serve_structured_tools(serve_state *srv, const serve_tools *t, seer_request_params *p, serve_structured *out,
                            serve_error *e);
void serve_tools_free(serve_tools *t);
/* Message i's tool_calls x (absent or null: none) into m: names borrowed from x, arguments
 * malloc'd (serve_tools_arguments_text; the caller frees them and m->calls). */
bool serve_tools_message_calls(json_t *x, size_t i, seer_chat_calls *m, serve_error *e);
/* The JSON schema of the calls tools allow, {"anyOf": [{"name": const, "arguments": the
 * function's parameters}]} (only: that function alone; NULL: every one): what a constraint
 * engine would apply to the text between <tool_call> and </tool_call>. */
json_t *serve_tools_schema(json_t *tools, const char *only);
/* A message's tool call arguments (OpenAI's JSON string, or an object) as the template writes
 * them: the JSON re-dumped with ", " and ": ", or the string as it is when it is not JSON. */
char *serve_tools_arguments_text(json_t *args);
/* The bytes of text [len] that are content for sure while streaming: up to a "<tool_call>",
 * short of a tail that may still become one, and none of an output that opens with '{' (it
 * may be a bare call). */
size_t serve_tools_safe_prefix(const char *text, size_t len);
/* The tool calls of a whole output: OpenAI's tool_calls array (ids call_<id_prefix>_0, _1 ...),
 * and in *content_len the length of the content before them (trimmed of white space at its
 * end; its start may hold white space too: the caller trims). Calls are
 * <tool_call>{"name": string, "arguments": object}</tool_call>, only white space after and
 * between them; an output that is one such JSON object alone, without the tags, is a call too
 * when its name is one of tools (small models often leave the tags out). NULL when the output
 * holds no well-formed call (then it is all content): text after the calls, a call that is
 * not such JSON, or one left open. */
json_t *serve_tools_parse_output(const char *text, size_t len, json_t *tools, const char *id_prefix,
                                 size_t *content_len);
/* The message of a whole chat choice with tools: {"role", "content", "tool_calls"} with
 * *called, or the text as content when it holds no call. */
json_t *serve_tools_message(const char *text, size_t len, json_t *tools, const char *id_prefix, bool *called);
/* A stream's deltas of calls (serve_tools_parse_output's array): per call one with its index,
 * id, type and name (arguments ""), then one with its arguments. */
json_t *serve_tools_deltas(json_t *calls);

#endif
