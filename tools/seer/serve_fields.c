/*
 * serve_fields.c: the top-level fields of an OpenAI request body, each either honoured or
 * refused. One table names every field /v1/chat/completions and /v1/completions take and
 * what seer does with it; a field not in the table for its endpoint is refused (as OpenAI
 * refuses unknown parameters), and so is a value seer cannot honour (a tool_choice that
 * forces a call ...; response_format, grammar and logit_bias are
 * serve_structured.c's). Fields whose only
 * effect is metadata on OpenAI's side (user, metadata, safety_identifier, prompt_cache_key,
 * store false, service_tier auto or default) are accepted after a type check: by definition
 * they change no output. null is the field left out, for any field.
 *
 * It checks and refuses; serve_api.c reads the values of the fields seer honours. The
 * drafters' settings in the "seer" object are read here, by the names the drafters declare
 * (seer_spec_option_at), so that no list of them is kept in the server.
 */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

serve_job *serve_fail(serve_error *e, int status, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    e->param = param;
    e->code = code;
    return NULL;
}

int serve_get_num(json_t *o, const char *key, double lo, double hi, double *out, serve_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v)) {
        serve_fail(e, 400, key, "invalid_type", "'%s' must be a number", key);
        return -1;
    }
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) {
        serve_fail(e, 400, key, "invalid_value", "'%s' is %g; it must be in [%g, %g]", key, d, lo, hi);
        return -1;
    }
    *out = d;
    return 1;
}

int serve_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, serve_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v)) {
        serve_fail(e, 400, key, "invalid_type", "'%s' must be an integer", key);
        return -1;
    }
    long long d = json_integer_value(v);
    if (d < lo || d > hi) {
        serve_fail(e, 400, key, "invalid_value", "'%s' is %lld; it must be in [%lld, %lld]", key, d, lo, hi);
        return -1;
    }
    *out = d;
    return 1;
}

bool serve_fields_spec(json_t *x, seer_spec_params *spec, serve_error *e) {
    seer_spec_option so;
    for (int i = 0; seer_spec_option_at(i, &so); i++) {
        json_t *v = json_object_get(x, so.json);
        long long n = 0;
        double d = 0;
        seer_status st = SEER_OK;
        if (!v || json_is_null(v))
            continue;
        if (so.type == SEER_SPEC_OPT_INT) {
            if (serve_get_int(x, so.json, (long long)so.lo, (long long)so.hi, &n, e) < 0)
                return false;
            st = seer_spec_set_num(spec, so.json, (double)n);
        } else if (so.type == SEER_SPEC_OPT_FLOAT) {
            if (serve_get_num(x, so.json, so.lo, so.hi, &d, e) < 0)
                return false;
            st = seer_spec_set_num(spec, so.json, d);
        } else if (!json_is_string(v)) {
            serve_fail(e, 400, so.json, "invalid_type", "'%s' must be a string", so.json);
            return false;
        } else {
            st = seer_spec_set(spec, so.json, json_string_value(v));
        }
        if (st != SEER_OK) {
            serve_fail(e, 400, so.json, "invalid_value", "%s", seer_last_error());
            return false;
        }
    }
    return true;
}

int serve_get_bool(json_t *o, const char *key, bool *out, serve_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        serve_fail(e, 400, key, "invalid_type", "'%s' must be true or false", key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

/* Checks of one field's value v (never NULL nor null) in the body o. */
typedef bool (*field_check)(json_t *o, const char *key, json_t *v, serve_error *e);

static bool unsupported(serve_error *e, const char *key, const char *why) {
    serve_fail(e, 400, key, "unsupported", "'%s' is not supported%s", key, why);
    return false;
}

/* Read by serve_api.c, which checks its type and range. */
static bool ck_read(json_t *o, const char *key, json_t *v, serve_error *e) {
    (void)o, (void)key, (void)v, (void)e;
    return true;
}

/* Metadata for OpenAI's own records: a string, with no effect on the output. */
static bool ck_string(json_t *o, const char *key, json_t *v, serve_error *e) {
    (void)o;
    if (json_is_string(v))
        return true;
    serve_fail(e, 400, key, "invalid_type", "'%s' must be a string", key);
    return false;
}

static bool ck_metadata(json_t *o, const char *key, json_t *v, serve_error *e) {
    (void)o;
    const char *k;
    json_t *x;
    if (json_is_object(v)) {
        bool ok = true;
        json_object_foreach(v, k, x) ok = ok && json_is_string(x);
        if (ok)
            return true;
    }
    serve_fail(e, 400, key, "invalid_type", "'%s' must be an object of strings", key);
    return false;
}

/* The template's switches, as vLLM and llama-server take them: seer's built-in templates have
 * one, enable_thinking (Qwen3's; no effect on a template without it), and refuse the rest. */
static bool ck_template_kwargs(json_t *o, const char *key, json_t *v, serve_error *e) {
    (void)o;
    if (!json_is_object(v)) {
        serve_fail(e, 400, key, "invalid_type", "'%s' must be an object", key);
        return false;
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (strcmp(k, "enable_thinking"))
            return unsupported(e, key, ": the built-in chat templates take only enable_thinking");
        if (!json_is_boolean(x)) {
            serve_fail(e, 400, key, "invalid_type", "'%s.enable_thinking' must be true or false", key);
            return false;
        }
    }
    return true;
}

/* Nothing is stored: store true would promise what seer does not do. */
static bool ck_store(json_t *o, const char *key, json_t *v, serve_error *e) {
    bool b = false;
    if (serve_get_bool(o, key, &b, e) < 0)
        return false;
    (void)v;
    return b ? unsupported(e, key, ": this server stores no completions (only false)") : true;
}

static bool ck_service_tier(json_t *o, const char *key, json_t *v, serve_error *e) {
    if (!ck_string(o, key, v, e))
        return false;
    const char *s = json_string_value(v);
    return !strcmp(s, "auto") || !strcmp(s, "default") ? true
                                                       : unsupported(e, key, " (only \"auto\" or \"default\")");
}

/* best_of candidates (serve_best_of.c checks it against n and stream). */
static bool ck_best_of(json_t *o, const char *key, json_t *v, serve_error *e) {
    long long d;
    (void)v;
    return serve_get_int(o, key, 1, SERVE_MAX_CHOICES, &d, e) >= 0;
}

/* Each of n choices is a generation of its own (serve_api.c). */
static bool ck_n(json_t *o, const char *key, json_t *v, serve_error *e) {
    long long d;
    (void)v;
    return serve_get_int(o, key, 1, SERVE_MAX_CHOICES, &d, e) >= 0;
}

/* Accepted only empty (an empty bias, suffix, tool or function list changes nothing). */
static bool ck_empty(json_t *o, const char *key, json_t *v, serve_error *e) {
    (void)o;
    if ((json_is_object(v) && json_object_size(v) == 0) || (json_is_array(v) && json_array_size(v) == 0) ||
        (json_is_string(v) && json_string_length(v) == 0))
        return true;
    return unsupported(e, key, "");
}

/* The legacy function_call: with no functions, "none" (call none) is what happens; any other
 * choice asks for functions (tools and tool_choice are their successors, serve_tools.c). */
static bool ck_tool_choice(json_t *o, const char *key, json_t *v, serve_error *e) {
    (void)o;
    if (json_is_string(v) && !strcmp(json_string_value(v), "none"))
        return true;
    return unsupported(e, key, " (functions are not supported, tools are; only \"none\")");
}

static bool ck_refused(json_t *o, const char *key, json_t *v, serve_error *e) {
    (void)o, (void)v;
    return unsupported(e, key, "");
}

static bool ck_modalities(json_t *o, const char *key, json_t *v, serve_error *e) {
    (void)o;
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)) &&
        !strcmp(json_string_value(json_array_get(v, 0)), "text"))
        return true;
    return unsupported(e, key, " (only [\"text\"])");
}

static bool ck_verbosity(json_t *o, const char *key, json_t *v, serve_error *e) {
    (void)o;
    if (json_is_string(v) && !strcmp(json_string_value(v), "medium"))
        return true;
    return unsupported(e, key, " (only \"medium\", the default)");
}

enum { F_CHAT = 1, F_COMPL = 2, F_BOTH = 3 };

static const struct {
    const char *name;
    int where; /* F_CHAT, F_COMPL or both */
    field_check check;
} k_fields[] = {
    /* read by serve_api.c */
    {"messages", F_CHAT, ck_read},
    {"prompt", F_COMPL, ck_read},
    {"model", F_BOTH, ck_read},
    {"max_tokens", F_BOTH, ck_read},
    {"max_completion_tokens", F_CHAT, ck_read},
    {"temperature", F_BOTH, ck_read},
    {"top_p", F_BOTH, ck_read},
    {"seed", F_BOTH, ck_read},
    {"stop", F_BOTH, ck_read},
    {"stream", F_BOTH, ck_read},
    {"stream_options", F_BOTH, ck_read},
    {"echo", F_COMPL, ck_read},
    /* seer's own (as llama-server's) */
    {"top_k", F_BOTH, ck_read},
    {"min_p", F_BOTH, ck_read},
    {"repeat_penalty", F_BOTH, ck_read},
    {"seer", F_BOTH, ck_read},
    {"chat_template_kwargs", F_CHAT, ck_template_kwargs},
    /* metadata: no effect on the output by definition */
    {"user", F_BOTH, ck_string},
    {"safety_identifier", F_CHAT, ck_string},
    {"prompt_cache_key", F_CHAT, ck_string},
    {"metadata", F_CHAT, ck_metadata},
    {"store", F_CHAT, ck_store},
    {"service_tier", F_CHAT, ck_service_tier},
    /* honoured only at their neutral value */
    {"n", F_BOTH, ck_n},
    {"best_of", F_COMPL, ck_best_of},
    {"frequency_penalty", F_BOTH, ck_read},
    {"presence_penalty", F_BOTH, ck_read},
    {"logprobs", F_BOTH, ck_read},
    {"top_logprobs", F_CHAT, ck_read},
    {"logit_bias", F_BOTH, ck_read},
    {"response_format", F_BOTH, ck_read},
    {"grammar", F_BOTH, ck_read},
    {"suffix", F_COMPL, ck_empty},
    {"tools", F_CHAT, ck_read},
    {"functions", F_CHAT, ck_empty},
    {"tool_choice", F_CHAT, ck_read},
    {"function_call", F_CHAT, ck_tool_choice},
    {"modalities", F_CHAT, ck_modalities},
    {"verbosity", F_CHAT, ck_verbosity},
    /* refused whatever their value */
    {"parallel_tool_calls", F_CHAT, ck_refused},
    {"audio", F_CHAT, ck_refused},
    {"prediction", F_CHAT, ck_refused},
    {"reasoning_effort", F_CHAT, ck_refused},
    {"web_search_options", F_CHAT, ck_refused},
};

bool serve_fields_check(json_t *root, serve_kind kind, serve_error *e) {
    const int where = kind == JOB_CHAT ? F_CHAT : F_COMPL;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (json_is_null(v))
            continue;
        size_t i = 0;
        const size_t n = sizeof k_fields / sizeof *k_fields;
        while (i < n && !(strcmp(k_fields[i].name, key) == 0 && (k_fields[i].where & where)))
            i++;
        if (i == n) {
            /* the key names the field: it lives as long as root */
            serve_fail(e, 400, key, "unknown_parameter", "unknown parameter '%.100s' for %s", key,
                       kind == JOB_CHAT ? "/v1/chat/completions" : "/v1/completions");
            return false;
        }
        if (!k_fields[i].check(root, k_fields[i].name, v, e))
            return false;
    }
    return true;
}
