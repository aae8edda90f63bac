/*
 * serve_structured.c: the request fields of structured output and token bias:
 *   response_format  {"type": "text"}, {"type": "json_object"} (any JSON object), or
 *                    {"type": "json_schema", "json_schema": {"name", "schema", "strict",
 *                    "description"}} (the schema subset src/constrain/schema.c covers);
 *   grammar          seer's extension (as llama-server's): grammar text, src/constrain/grammar.c;
 *   logit_bias       OpenAI's map of token ids (as strings) to biases in [-100, 100].
 * Both endpoints take all three. A schema feature the engine does not cover is refused with a
 * 400 naming it (strict or not: a constraint seer cannot honour is not silently dropped).
 *
 * The vocabulary's token trie is built once per process, from the first constraint, and shared
 * by all later ones (seer_constraint_new_sharing).
 *
 * Not for: the other fields (serve_fields.c, serve_api.c) or generation.
 */
#include "serve.h"
#include "serve_tools.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t base_mu = PTHREAD_MUTEX_INITIALIZER;
static seer_constraint *base;            /* the first constraint made: its trie is shared */
static const seer_model *base_model;

static seer_status compile(serve_state *srv, seer_constraint_kind kind, const char *text, size_t len,
                           seer_constraint **out) {
    pthread_mutex_lock(&base_mu);
    seer_status st;
    if (base && base_model == srv->model) {
        st = seer_constraint_new_sharing(base, kind, text, len, out);
    } else {
        st = seer_constraint_new(srv->model, kind, text, len, out);
        if (st == SEER_OK && !base) {
            /* a second handle on the same constraint's trie: a clone */
            if (seer_constraint_clone(*out, &base) == SEER_OK)
                base_model = srv->model;
        }
    }
    pthread_mutex_unlock(&base_mu);
    return st;
}

static bool compile_or_fail(serve_state *srv, seer_constraint_kind kind, const char *text, size_t len,
                            const char *param, serve_structured *out, serve_error *e) {
    const seer_status st = compile(srv, kind, text, len, &out->con);
    if (st == SEER_OK)
        return true;
    if (st == SEER_ERR_OOM)
        serve_fail(e, 500, NULL, NULL, "out of memory compiling the constraint");
    else
        serve_fail(e, 400, param, st == SEER_ERR_UNSUPPORTED ? "unsupported" : "invalid_value", "'%s': %.200s",
                   param, seer_last_error());
    return false;
}

static bool read_format(serve_state *srv, json_t *rf, serve_structured *out, serve_error *e) {
    const char *P = "response_format";
    json_t *ty = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(ty)) {
        serve_fail(e, 400, P, "invalid_type", "'response_format' must be an object with a string 'type'");
        return false;
    }
    const char *t = json_string_value(ty);
    const char *k;
    json_t *v;
    json_object_foreach(rf, k, v) {
        if (strcmp(k, "type") && !(strcmp(t, "json_schema") == 0 && strcmp(k, "json_schema") == 0)) {
            serve_fail(e, 400, P, "invalid_value", "'response_format' of type '%.40s' takes no '%.40s'", t, k);
            return false;
        }
    }
    if (!strcmp(t, "text"))
        return true;
    if (!strcmp(t, "json_object"))
        return compile_or_fail(srv, SEER_CONSTRAINT_JSON_OBJECT, "", 0, P, out, e);
    if (strcmp(t, "json_schema")) {
        serve_fail(e, 400, P, "invalid_value",
                   "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
        return false;
    }
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js)) {
        serve_fail(e, 400, P, "invalid_type", "'response_format.json_schema' must be an object");
        return false;
    }
    json_object_foreach(js, k, v) {
        if (!strcmp(k, "name") || !strcmp(k, "description")) {
            if (!json_is_string(v)) {
                serve_fail(e, 400, P, "invalid_type", "'response_format.json_schema.%s' must be a string", k);
                return false;
            }
        } else if (!strcmp(k, "strict")) {
            if (!json_is_boolean(v) && !json_is_null(v)) {
                serve_fail(e, 400, P, "invalid_type", "'response_format.json_schema.strict' must be a boolean");
                return false;
            }
        } else if (strcmp(k, "schema")) {
            serve_fail(e, 400, P, "invalid_value", "'response_format.json_schema' takes no '%.40s'", k);
            return false;
        }
    }
    json_t *name = json_object_get(js, "name");
    if (!json_is_string(name) || json_string_length(name) == 0 || json_string_length(name) > 64) {
        serve_fail(e, 400, P, "invalid_value", "'response_format.json_schema.name' must be a string of 1 to 64 characters");
        return false;
    }
    json_t *schema = json_object_get(js, "schema");
    if (!schema || json_is_null(schema)) /* OpenAI: no schema means any JSON */
        return compile_or_fail(srv, SEER_CONSTRAINT_JSON_SCHEMA, "{}", 2, P, out, e);
    if (!json_is_object(schema) && !json_is_boolean(schema)) {
        serve_fail(e, 400, P, "invalid_type", "'response_format.json_schema.schema' must be an object");
        return false;
    }
    /* the schema's own text, members in their order (the grammar follows it) */
    char *text = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    if (!text) {
        serve_fail(e, 500, NULL, NULL, "out of memory");
        return false;
    }
    const bool ok = compile_or_fail(srv, SEER_CONSTRAINT_JSON_SCHEMA, text, strlen(text), P, out, e);
    free(text);
    return ok;
}

static bool read_bias(serve_state *srv, json_t *lb, seer_request_params *p, serve_structured *out, serve_error *e) {
    if (!json_is_object(lb)) {
        serve_fail(e, 400, "logit_bias", "invalid_type", "'logit_bias' must be an object of token ids to numbers");
        return false;
    }
    const size_t n = json_object_size(lb);
    if (n == 0)
        return true;
    if (n > SEER_MAX_LOGIT_BIAS) {
        serve_fail(e, 400, "logit_bias", "invalid_value", "'logit_bias' holds %zu entries; at most %d", n,
                   SEER_MAX_LOGIT_BIAS);
        return false;
    }
    out->bias = calloc(n, sizeof *out->bias);
    if (!out->bias) {
        serve_fail(e, 500, NULL, NULL, "out of memory");
        return false;
    }
    const int V = seer_n_vocab(srv->model);
    const char *k;
    json_t *v;
    int i = 0;
    json_object_foreach(lb, k, v) {
        char *end = NULL;
        const long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id >= V || (k[0] == '0' && k[1])) {
            serve_fail(e, 400, "logit_bias", "invalid_value", "'logit_bias' key '%.32s' is not a token id of the vocabulary (0..%d)",
                       k, V - 1);
            return false;
        }
        if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100)) {
            serve_fail(e, 400, "logit_bias", "invalid_value", "'logit_bias' of token %ld must be a number in [-100, 100]", id);
            return false;
        }
        out->bias[i].token = (int32_t)id;
        out->bias[i++].bias = (float)json_number_value(v);
    }
    p->sampler.logit_bias = out->bias;
    p->sampler.n_logit_bias = i;
    return true;
}

bool serve_structured_read(serve_state *srv, json_t *root, seer_request_params *p, serve_structured *out,
                           serve_error *e) {
    memset(out, 0, sizeof *out);
    json_t *rf = json_object_get(root, "response_format"), *gr = json_object_get(root, "grammar");
    json_t *lb = json_object_get(root, "logit_bias");
    if (lb && !json_is_null(lb) && !read_bias(srv, lb, p, out, e))
        return false;
    const bool has_gr = gr && !json_is_null(gr);
    if (rf && !json_is_null(rf) && !read_format(srv, rf, out, e))
        return false;
    if (has_gr) {
        if (out->con) {
            serve_fail(e, 400, "grammar", "invalid_value", "give 'grammar' or a JSON 'response_format', not both");
            return false;
        }
        if (!json_is_string(gr)) {
            serve_fail(e, 400, "grammar", "invalid_type", "'grammar' must be a string");
            return false;
        }
        if (!compile_or_fail(srv, SEER_CONSTRAINT_GRAMMAR, json_string_value(gr), json_string_length(gr), "grammar",
                             out, e))
            return false;
    }
    p->constraint = out->con;
    return true;
}

bool serve_structured_tools(serve_state *srv, const serve_tools *t, seer_request_params *p, serve_structured *out,
                            serve_error *e) {
    if (!t->force)
        return true;
    if (out->con) {
        serve_fail(e, 400, "tool_choice", "invalid_value",
                   "'tool_choice' forces a tool call: give no 'response_format' or 'grammar' beside it");
        return false;
    }
    char *g = NULL;
    if (!serve_tools_grammar(t, &g, e))
        return false;
    const bool ok = compile_or_fail(srv, SEER_CONSTRAINT_GRAMMAR, g, strlen(g), "tool_choice", out, e);
    free(g);
    if (ok)
        p->constraint = out->con;
    return ok;
}

void serve_structured_free(serve_structured *s) {
    seer_constraint_free(s->con);
    free(s->bias);
    memset(s, 0, sizeof *s);
}
