/*
 * serve_api.c: the OpenAI-compatible request bodies and responses of `seer serve`:
 * /v1/completions and /v1/chat/completions parsed and checked into a job (a seer_request with
 * its settings), the JSON of whole responses, streamed chunks (SSE) and errors.
 *
 * Every field is checked for its type and range before anything is queued, so a bad request
 * gets a 4xx with an OpenAI-style error object and changes nothing; null for an optional
 * field is the field left out (clients send nulls for what they do not set). Which top-level
 * fields exist and which values seer refuses rather than ignores is serve_fields.c's table;
 * this file reads the values seer honours. Answers carry OpenAI's finish reasons only
 * ("stop", "length"); a stream with stream_options.include_usage ends with a chunk of its own
 * holding the usage and no choice, as OpenAI's does. With n > 1 each choice is a request of
 * its own (seed + index); a stream interleaves the choices' chunks, each naming its index. The "seer" object carries what OpenAI
 * has no field for: speculation settings per request ({"spec": "ngram", "gamma": 4, ...};
 * "tree_size" and "tree_depth" for token trees) and ignore_eos; the response's (in a stream, each
 * choice's final chunk) has the token ids, the drafter asked for, its counts and acceptance, and
 * the decode speed, which the chat page shows.
 */
#include "serve.h"
#include "serve_tools.h"
#include "spec_kinds.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *serve_finish_name(seer_finish_reason f) {
    switch (f) {
    case SEER_FINISH_STOP: return "stop";
    case SEER_FINISH_LENGTH: return "length";
    case SEER_FINISH_CANCELLED: return "cancelled";
    case SEER_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

const char *serve_finish_api(seer_finish_reason f) {
    switch (f) {
    case SEER_FINISH_STOP: return "stop";
    case SEER_FINISH_LENGTH:
    case SEER_FINISH_CANCELLED: return "length";
    default: return NULL;
    }
}

void serve_choice_release_slot(serve_choice *c) {
    serve_state *srv = c->job->srv;
    pthread_mutex_lock(&srv->mu);
    if (c->slot) {
        c->slot = false;
        srv->n_slots--;
    }
    pthread_mutex_unlock(&srv->mu);
}

void serve_job_cancel(serve_job *j) {
    for (int i = 0; i < j->n_choices; i++)
        seer_request_cancel(j->choices[i].req); /* an atomic flag: harmless once finished */
}

/* A choice is finished (j->mu held): the job is done when all are. */
static void choice_finished(serve_choice *c, seer_finish_reason f) {
    serve_job *j = c->job;
    if (c->done)
        return;
    c->done = true;
    c->finish = f;
    if (f == SEER_FINISH_ERROR)
        j->error = true;
    j->done = ++j->n_done == j->n_choices;
}

void serve_choice_fail(serve_choice *c, const char *msg) {
    serve_job *j = c->job;
    serve_choice_release_slot(c);
    pthread_mutex_lock(&j->mu);
    if (!j->failed)
        snprintf(j->error_msg, sizeof j->error_msg, "%s", msg);
    j->failed = true;
    choice_finished(c, SEER_FINISH_ERROR);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    serve_job_unref(j);
}

char *serve_error_json(const serve_error *e) {
    const char *type = e->status == 401 ? "authentication_error"
                       : e->status >= 500 ? "server_error"
                       : e->status == 429 ? "rate_limit_error" : "invalid_request_error";
    json_t *o = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type", type,
                          "param", e->param ? json_string(e->param) : json_null(),
                          "code", e->code ? json_string(e->code) : json_null());
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* Frees the choices' requests and buffers; n: how many have a request. */
static void free_choices(serve_job *j, int n) {
    for (int i = 0; i < n; i++) {
        serve_choice_release_slot(&j->choices[i]);
        seer_request_free(j->choices[i].req);
    }
    for (int i = 0; i < j->n_choices; i++)
        free(j->choices[i].text), free(j->choices[i].ids), serve_choice_free_logprobs(&j->choices[i]);
    free(j->choices);
}

void serve_job_unref(serve_job *j) {
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0)
        return;
    serve_state *srv = j->srv;
    free_choices(j, j->n_choices);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->pending), free(j->echo), free(j->echo_ids), free(j->echo_off);
    json_decref(j->tool_defs);
    free(j);
    pthread_mutex_lock(&srv->mu);
    srv->n_jobs--;
    pthread_cond_broadcast(&srv->wake);
    pthread_mutex_unlock(&srv->mu);
}

/* The scheduler thread's view of a choice: new text and ids, the end. */
static void on_update(seer_request *r, void *user) {
    serve_choice *c = user;
    serve_job *j = c->job;
    serve_state *srv = j->srv;
    size_t len;
    const char *t = seer_request_text(r, &len);
    const int32_t *ids;
    int n = seer_request_tokens(r, &ids);
    double ttft = -1, itl = -1;
    int n_itl = 0;
    const bool fin = seer_request_finished(r);
    if (fin) /* before the answer is there: a client that has it may ask again at once */
        serve_choice_release_slot(c);
    pthread_mutex_lock(&j->mu);
    if (len > c->text_len) {
        if (len + 1 > c->text_cap) {
            size_t cap = c->text_cap ? c->text_cap : 256;
            while (cap < len + 1)
                cap *= 2;
            char *p = realloc(c->text, cap);
            if (p)
                c->text = p, c->text_cap = cap;
        }
        if (len + 1 <= c->text_cap) {
            memcpy(c->text + c->text_len, t + c->text_len, len - c->text_len);
            c->text_len = len;
            c->text[len] = 0;
        }
    }
    if (n > c->n_ids) {
        if (n > c->cap_ids) {
            int cap = c->cap_ids ? c->cap_ids : 64;
            while (cap < n)
                cap *= 2;
            int32_t *p = realloc(c->ids, sizeof(int32_t) * cap);
            if (p)
                c->ids = p, c->cap_ids = cap;
        }
        if (n <= c->cap_ids) {
            seer_request_stats st;
            seer_request_get_stats(r, &st);
            if (c->n_ids == 0) {
                ttft = st.t_first_token_s;
            } else {
                itl = (st.t_last_token_s - c->t_last) / (n - c->n_ids);
                n_itl = n - c->n_ids;
            }
            c->t_last = st.t_last_token_s;
            memcpy(c->ids + c->n_ids, ids + c->n_ids, sizeof(int32_t) * (n - c->n_ids));
            c->n_ids = n;
        }
    }
    if (j->logprobs || j->rank_lp)
        serve_choice_take_logprobs(c, r);
    if (fin) {
        seer_request_get_stats(r, &c->st);
        choice_finished(c, seer_request_finish_reason(r));
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&srv->metrics.mu);
    if (ttft >= 0)
        serve_hist_observe(&srv->metrics.ttft, ttft);
    for (int k = 0; k < n_itl; k++)
        serve_hist_observe(&srv->metrics.itl, itl);
    if (fin)
        srv->metrics.finished[c->finish]++;
    pthread_mutex_unlock(&srv->metrics.mu);
}

/* The "seer" extension object: speculation per request. */
static bool parse_seer(serve_state *srv, json_t *x, seer_request_params *p, serve_error *e) {
    if (!x || json_is_null(x))
        return true;
    if (!json_is_object(x)) {
        serve_fail(e, 400, "seer", "invalid_type", "'seer' must be an object");
        return false;
    }
    json_t *k = json_object_get(x, "spec");
    if (k && !json_is_null(k)) {
        char why[640]; /* the kinds come from the library's registry */
        if (!spec_kinds_serve_parse(json_is_string(k) ? json_string_value(k) : NULL, p->spec.draft_model != NULL,
                                    &p->spec.kind, why, sizeof why)) {
            serve_fail(e, 400, "seer.spec", "invalid_value", "'seer.spec' %s", why);
            return false;
        }
    }
    long long v;
    int r;
#define SEER_INT(name, field, lo, hi)                                            \
    if ((r = serve_get_int(x, name, lo, hi, &v, e)) < 0)                               \
        return false;                                                            \
    if (r > 0)                                                                   \
        p->spec.field = (int)v;
    SEER_INT("gamma", gamma, 1, 16)
    SEER_INT("tree_size", tree_size, 0, 64)  /* token trees of this many nodes (0: a chain) */
    SEER_INT("tree_depth", tree_depth, 0, 64) /* their depth (0: gamma) */
#undef SEER_INT
    if (!serve_fields_spec(x, &p->spec, e)) /* the drafters' own settings */
        return false;
    const int depth = p->spec.tree_depth ? p->spec.tree_depth : p->spec.gamma;
    if (p->spec.tree_size > 0 && depth > p->spec.tree_size) {
        serve_fail(e, 400, "seer.tree_depth", "invalid_value", "a tree's depth %d exceeds its %d nodes", depth,
             p->spec.tree_size);
        return false;
    }
    double nmax = 0, nmin = 0; /* n-gram's settings, kept by name */
    if (seer_spec_get(&p->spec, "ngram_max", &nmax) == SEER_OK &&
        seer_spec_get(&p->spec, "ngram_min", &nmin) == SEER_OK && nmax < nmin) {
        serve_fail(e, 400, "seer.ngram_max", "invalid_value", "'ngram_max' must be at least 'ngram_min'");
        return false;
    }
    if (serve_get_bool(x, "ignore_eos", &p->ignore_eos, e) < 0)
        return false;
    (void)srv;
    return true;
}

/* Text of a message's content: a string or an array of {"type": "text", "text": ...}. */
static char *content_text(json_t *c, serve_error *e) {
    if (json_is_null(c)) /* an assistant turn may have no content */
        return strdup("");
    if (json_is_string(c))
        return strdup(json_string_value(c));
    if (!json_is_array(c)) {
        serve_fail(e, 400, "messages", "invalid_type", "a message's content must be a string or an array of text parts");
        return NULL;
    }
    size_t n = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *t = json_object_get(part, "text"), *ty = json_object_get(part, "type");
        if (!json_is_object(part) || !json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
            !json_is_string(t)) {
            serve_fail(e, 400, "messages", "invalid_type", "only text content parts are supported");
            return NULL;
        }
        n += json_string_length(t);
    }
    char *s = malloc(n + 1), *o = s;
    if (!s)
        return NULL;
    json_array_foreach(c, i, part) {
        json_t *t = json_object_get(part, "text");
        memcpy(o, json_string_value(t), json_string_length(t));
        o += json_string_length(t);
    }
    *o = 0;
    return s;
}

/* Prompt ids of a chat: the messages rendered with the model's template and the tools when
 * they are on (no_think: a thinking template opens the answer with an empty <think></think>,
 * enable_thinking false). */
static int32_t *chat_prompt(serve_state *srv, json_t *msgs, const serve_tools *tools, bool no_think, int *n,
                            serve_error *e) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        serve_fail(e, 400, "messages", "invalid_type", "'messages' must be a non-empty array");
        return NULL;
    }
    const size_t nm = json_array_size(msgs);
    if (nm > 4096) {
        serve_fail(e, 400, "messages", "invalid_value", "too many messages");
        return NULL;
    }
    seer_chat_message *m = calloc(nm, sizeof *m);
    seer_chat_calls *mc = calloc(nm, sizeof *mc);
    int32_t *ids = NULL;
    char *buf = NULL;
    uint8_t *mark = NULL;
    size_t i;
    json_t *msg;
    if (!m || !mc) {
        free(m), free(mc);
        return NULL;
    }
    json_array_foreach(msgs, i, msg) {
        json_t *role = json_object_get(msg, "role"), *c = json_object_get(msg, "content");
        if (!json_is_object(msg) || !json_is_string(role)) {
            serve_fail(e, 400, "messages", "invalid_type", "message %zu needs a string 'role'", i);
            goto out;
        }
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "developer") &&
            strcmp(r, "tool")) {
            serve_fail(e, 400, "messages", "invalid_value",
                       "message %zu: role must be system, user, assistant or tool", i);
            goto out;
        }
        m[i].role = !strcmp(r, "developer") ? "system" : r;
        json_t *tcid = json_object_get(msg, "tool_call_id");
        if (tcid && !json_is_null(tcid) && !json_is_string(tcid)) {
            serve_fail(e, 400, "messages", "invalid_type", "message %zu: 'tool_call_id' must be a string", i);
            goto out;
        }
        json_t *calls = json_object_get(msg, "tool_calls");
        if (calls && !json_is_null(calls) && strcmp(r, "assistant")) {
            serve_fail(e, 400, "messages", "invalid_value", "message %zu: only an assistant has 'tool_calls'", i);
            goto out;
        }
        if (!serve_tools_message_calls(calls, i, &mc[i], e))
            goto out;
        if (!c && mc[i].n) /* an assistant turn of calls alone */
            c = json_null();
        if (!c || !(m[i].content = content_text(c, e))) {
            if (!e->status)
                serve_fail(e, 400, "messages", "invalid_type", "message %zu needs a 'content'", i);
            goto out;
        }
    }
    size_t need = 0, len = 0;
    seer_chat_template tmpl = srv->tmpl;
    tmpl.no_think = no_think;
    const char *const *defs = tools->on ? (const char *const *)tools->defs : NULL;
    const int nd = tools->on ? tools->n : 0;
    if (seer_chat_render_tools(&tmpl, m, mc, (int)nm, defs, nd, true, NULL, NULL, 0, &need) == SEER_ERR_OOM) {
        serve_fail(e, 500, NULL, NULL, "out of memory");
        goto out;
    }
    buf = malloc(need + 1);
    mark = malloc(need + 1);
    if (!buf || !mark || seer_chat_render_tools(&tmpl, m, mc, (int)nm, defs, nd, true, buf, mark, need + 1, &len) != SEER_OK) {
        serve_fail(e, 400, "messages", "invalid_value", "the conversation cannot be rendered: %s", seer_last_error());
        goto out;
    }
    int cnt = 0;
    seer_status s = seer_tokenize_marked(srv->model, buf, mark, len, true, NULL, 0, &cnt);
    if (s != SEER_OK && s != SEER_ERR_INVALID_ARG) {
        serve_fail(e, 400, "messages", "invalid_value", "the messages cannot be tokenized: %s", seer_last_error());
        goto out;
    }
    ids = malloc(sizeof(int32_t) * (cnt + 1));
    if (!ids || seer_tokenize_marked(srv->model, buf, mark, len, true, ids, cnt, &cnt) != SEER_OK) {
        free(ids);
        ids = NULL;
        serve_fail(e, 500, NULL, NULL, "tokenizing failed");
        goto out;
    }
    *n = cnt;
out:
    for (size_t k = 0; k < nm; k++) {
        free((char *)m[k].content);
        for (int c = 0; mc && c < mc[k].n; c++)
            free((char *)mc[k].calls[c].arguments);
        if (mc)
            free((seer_chat_tool_call *)mc[k].calls);
    }
    free(mc);
    free(m), free(buf), free(mark);
    return ids;
}

static int32_t *tokenize_text(serve_state *srv, const char *t, size_t len, int *n, serve_error *e) {
    int cnt = 0;
    seer_status s = seer_tokenize(srv->model, t, len, true, false, NULL, 0, &cnt);
    if (s != SEER_OK && s != SEER_ERR_INVALID_ARG) {
        serve_fail(e, 400, "prompt", "invalid_value", "the prompt cannot be tokenized: %s", seer_last_error());
        return NULL;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (cnt + 1));
    if (!ids || seer_tokenize(srv->model, t, len, true, false, ids, cnt, &cnt) != SEER_OK) {
        free(ids);
        serve_fail(e, 500, NULL, NULL, "tokenizing failed");
        return NULL;
    }
    *n = cnt;
    return ids;
}

/* Prompt ids of a completion: a string, an array of one string, or an array of token ids. */
static int32_t *completion_prompt(serve_state *srv, json_t *p, int *n, serve_error *e) {
    if (json_is_string(p))
        return tokenize_text(srv, json_string_value(p), json_string_length(p), n, e);
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        return completion_prompt(srv, json_array_get(p, 0), n, e);
    if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0))) {
        const size_t np = json_array_size(p);
        const int V = seer_n_vocab(srv->model);
        if (np > (size_t)srv->n_ctx) {
            serve_fail(e, 400, "prompt", "context_length_exceeded", "the prompt has %zu tokens; the context holds %d", np, srv->n_ctx);
            return NULL;
        }
        int32_t *ids = malloc(sizeof(int32_t) * np);
        size_t i;
        json_t *v;
        if (!ids)
            return NULL;
        json_array_foreach(p, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V) {
                free(ids);
                serve_fail(e, 400, "prompt", "invalid_value", "prompt token %zu is not an id of the vocabulary", i);
                return NULL;
            }
            ids[i] = (int32_t)json_integer_value(v);
        }
        *n = (int)np;
        return ids;
    }
    serve_fail(e, 400, "prompt", "invalid_type", "'prompt' must be a string, an array of one string or an array of token ids");
    return NULL;
}

/* A job of n_choices choices, each a request of the prompt ids with p's settings; choice i
 * samples with p's seed + i (distinct choices draw distinct samples, reproducibly). */
static serve_job *job_new(serve_state *srv, serve_kind kind, const int32_t *ids, int n, const seer_request_params *p,
                          int n_choices, serve_error *e) {
    serve_job *j = calloc(1, sizeof *j);
    serve_choice *ch = calloc((size_t)n_choices, sizeof *ch);
    if (!j || !ch) {
        free(j), free(ch);
        return serve_fail(e, 500, NULL, NULL, "out of memory");
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = srv;
    j->kind = kind;
    j->created = (long long)time(NULL);
    j->n_prompt = n;
    j->spec_kind = p->spec.kind;
    j->refs = 1;
    j->fd = -1;
    j->choices = ch;
    j->n_choices = j->n_return = n_choices;
    for (int i = 0; i < n_choices; i++) {
        seer_request_params q = *p;
        q.sampler.seed = p->sampler.seed + (uint64_t)i;
        q.on_update = on_update;
        q.user = &ch[i];
        ch[i].job = j;
        ch[i].index = i;
        if (seer_request_new(srv->model, ids, n, &q, &ch[i].req) != SEER_OK) {
            serve_fail(e, 400, NULL, "invalid_value", "%s", seer_last_error());
            free_choices(j, i);
            pthread_mutex_destroy(&j->mu);
            pthread_cond_destroy(&j->cv);
            free(j);
            return NULL;
        }
    }
    return j;
}

serve_job *serve_job_from_json(serve_state *srv, serve_kind kind, const char *body, size_t len,
                               serve_error *e) {
    memset(e, 0, sizeof *e);
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root)
        return serve_fail(e, 400, NULL, "invalid_json", "the body is not valid JSON: %s (at byte %d)", je.text, je.position);
    serve_job *j = NULL;
    int32_t *ids = NULL;
    int n = 0;
    const char **stops = NULL;
    size_t n_stop = 0;
    seer_request_params p = seer_request_default_params();
    p.sampler = srv->sampler;
    p.spec = srv->spec;
    p.max_tokens = srv->default_max_tokens;
    bool stream = false, include_usage = false;
    serve_structured structured = {0};
    char *echo_text = NULL;
    size_t echo_len = 0;
    serve_tools tools = {0};
    long long iv;
    double dv;
    int r;
    if (!json_is_object(root)) {
        serve_fail(e, 400, NULL, "invalid_type", "the body must be a JSON object");
        goto out;
    }
    if (!serve_fields_check(root, kind, e)) {
        if (e->param && !strcmp(e->code, "unknown_parameter")) { /* the name lives in root */
            snprintf(e->param_buf, sizeof e->param_buf, "%s", e->param);
            e->param = e->param_buf;
        }
        goto out;
    }
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) {
            serve_fail(e, 400, "model", "invalid_type", "'model' must be a string");
            goto out;
        }
        if (strcmp(json_string_value(model), srv->model_id)) {
            serve_fail(e, 404, "model", "model_not_found", "the model '%.100s' does not exist (this server serves '%.100s')",
                 json_string_value(model), srv->model_id);
            goto out;
        }
    }
    if (serve_get_bool(root, "stream", &stream, e) < 0)
        goto out;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so) && !stream) { /* as OpenAI: it would have no effect */
        serve_fail(e, 400, "stream_options", "invalid_value", "'stream_options' is only allowed when 'stream' is true");
        goto out;
    }
    if (so && !json_is_null(so)) {
        bool obfuscate = false;
        const char *k;
        json_t *x;
        if (!json_is_object(so) || serve_get_bool(so, "include_usage", &include_usage, e) < 0 ||
            serve_get_bool(so, "include_obfuscation", &obfuscate, e) < 0) {
            serve_fail(e, 400, "stream_options", "invalid_type",
                       "'stream_options' must be an object of booleans (include_usage)");
            goto out;
        }
        if (obfuscate) {
            serve_fail(e, 400, "stream_options", "unsupported",
                       "'stream_options.include_obfuscation' is not supported (only false)");
            goto out;
        }
        json_object_foreach(so, k, x) {
            if (!json_is_null(x) && strcmp(k, "include_usage") && strcmp(k, "include_obfuscation")) {
                serve_fail(e, 400, "stream_options", "unknown_parameter",
                           "unknown parameter 'stream_options.%.100s'", k);
                goto out;
            }
        }
    }
    bool echo = false;
    if (serve_get_bool(root, "echo", &echo, e) < 0)
        goto out;
    json_t *mct = json_object_get(root, "max_completion_tokens");
    const char *mt = mct && !json_is_null(mct) ? "max_completion_tokens" : "max_tokens";
    if ((r = serve_get_int(root, mt, 1, 1 << 24, &iv, e)) < 0)
        goto out;
    if (r)
        p.max_tokens = (int)iv;
    if ((r = serve_get_num(root, "temperature", 0, 2, &dv, e)) < 0)
        goto out;
    if (r)
        p.sampler.temperature = (float)dv;
    if ((r = serve_get_num(root, "top_p", 1e-9, 1, &dv, e)) < 0)
        goto out;
    if (r)
        p.sampler.top_p = (float)dv;
    if ((r = serve_get_int(root, "top_k", 0, 1 << 24, &iv, e)) < 0)
        goto out;
    if (r)
        p.sampler.top_k = (int)iv;
    if ((r = serve_get_num(root, "min_p", 0, 1, &dv, e)) < 0)
        goto out;
    if (r)
        p.sampler.min_p = (float)dv;
    if ((r = serve_get_num(root, "repeat_penalty", 1e-3, 100, &dv, e)) < 0)
        goto out;
    if (r)
        p.sampler.repeat_penalty = (float)dv;
    if ((r = serve_get_num(root, "frequency_penalty", -2, 2, &dv, e)) < 0)
        goto out;
    if (r)
        p.sampler.frequency_penalty = (float)dv;
    if ((r = serve_get_num(root, "presence_penalty", -2, 2, &dv, e)) < 0)
        goto out;
    if (r)
        p.sampler.presence_penalty = (float)dv;
    json_t *seed = json_object_get(root, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) {
            serve_fail(e, 400, "seed", "invalid_type", "'seed' must be an integer");
            goto out;
        }
        p.sampler.seed = (uint64_t)json_integer_value(seed);
    }
    long long n_choices = 1;
    int best_of = 1;
    if (serve_get_int(root, "n", 1, SERVE_MAX_CHOICES, &n_choices, e) < 0 ||
        !serve_best_of_parse(root, (int)n_choices, &best_of, e))
        goto out;
    json_t *stop = json_object_get(root, "stop");
    if (stop && !json_is_null(stop)) {
        json_t *one = json_is_string(stop) ? stop : NULL;
        n_stop = one ? 1 : json_is_array(stop) ? json_array_size(stop) : (size_t)-1;
        if (n_stop > 4) {
            serve_fail(e, 400, "stop", "invalid_type", "'stop' must be a string or an array of up to 4 strings");
            goto out;
        }
        stops = calloc(n_stop ? n_stop : 1, sizeof *stops);
        for (size_t k = 0; stops && k < n_stop; k++) {
            json_t *s = one ? one : json_array_get(stop, k);
            if (!json_is_string(s) || json_string_length(s) < 1 || json_string_length(s) > 256 ||
                strlen(json_string_value(s)) != json_string_length(s)) {
                serve_fail(e, 400, "stop", "invalid_value", "each stop string must have 1 to 256 bytes");
                goto out;
            }
            stops[k] = json_string_value(s);
        }
        p.stop = stops;
        p.n_stop = (int)n_stop;
    }
    if (!parse_seer(srv, json_object_get(root, "seer"), &p, e))
        goto out;
    if (!serve_logprobs_parse(root, kind, echo, &p, e) || !serve_structured_read(srv, root, &p, &structured, e))
        goto out;
    if (kind == JOB_CHAT) {
        /* chat_template_kwargs: serve_fields.c let only enable_thinking through, a boolean */
        const json_t *think = json_object_get(json_object_get(root, "chat_template_kwargs"), "enable_thinking");
        if (!serve_tools_parse(root, &tools, e))
            goto out;
        if (!serve_structured_tools(srv, &tools, &p, &structured, e)) /* a forced call's constraint */
            goto out;
        ids = chat_prompt(srv, json_object_get(root, "messages"), &tools, json_is_false(think), &n, e);
    } else {
        json_t *pr = json_object_get(root, "prompt");
        if (!pr || json_is_null(pr)) {
            serve_fail(e, 400, "prompt", "missing", "'prompt' is required");
            goto out;
        }
        ids = completion_prompt(srv, pr, &n, e);
        if (ids && echo) {
            json_t *one = json_is_array(pr) && json_is_string(json_array_get(pr, 0)) ? json_array_get(pr, 0) : pr;
            echo_len = json_is_string(one) ? json_string_length(one) : 0;
            echo_text = json_is_string(one) ? malloc(echo_len + 1) : serve_ids_text(srv, ids, n, &echo_len);
            if (!echo_text) {
                serve_fail(e, 500, NULL, NULL, "out of memory");
                goto out;
            }
            if (json_is_string(one))
                memcpy(echo_text, json_string_value(one), echo_len + 1);
        }
    }
    if (!ids) {
        if (!e->status)
            serve_fail(e, 500, NULL, NULL, "out of memory");
        goto out;
    }
    if (n < 1) {
        serve_fail(e, 400, "prompt", "invalid_value", "the prompt is empty");
        goto out;
    }
    if (n >= srv->n_ctx) {
        serve_fail(e, 400, kind == JOB_CHAT ? "messages" : "prompt", "context_length_exceeded",
             "the prompt has %d tokens; the context holds %d", n, srv->n_ctx);
        goto out;
    }
    if (srv->max_prompt > 0 && n > srv->max_prompt) {
        serve_fail(e, 400, kind == JOB_CHAT ? "messages" : "prompt", "prompt_too_long",
             "the prompt has %d tokens; this server takes at most %d", n, srv->max_prompt);
        goto out;
    }
    if (p.max_tokens > srv->n_ctx - n)
        p.max_tokens = srv->n_ctx - n;
    const bool user_lp = p.logprobs;
    p.logprobs |= best_of > n_choices; /* the candidates are ranked by theirs */
    j = job_new(srv, kind, ids, n, &p, best_of, e);
    if (!j)
        goto out;
    j->n_return = (int)n_choices;
    j->rank_lp = best_of > n_choices;
    j->stream = stream;
    j->include_usage = include_usage;
    j->logprobs = user_lp;
    j->tools = tools.on;
    j->tool_defs = tools.on ? json_incref(tools.tools) : NULL;
    j->top_logprobs = p.top_logprobs;
    j->echo = echo_text, j->echo_len = echo_len;
    echo_text = NULL;
    pthread_mutex_lock(&srv->mu);
    snprintf(j->id, sizeof j->id, "%s-%llu", kind == JOB_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)++srv->next_id);
    srv->n_jobs++;
    pthread_mutex_unlock(&srv->mu);
    if (j->echo && p.prompt_logprobs && !serve_logprobs_echo(j, ids, n)) {
        serve_job_unref(j);
        j = serve_fail(e, 500, NULL, NULL, "out of memory");
        goto out;
    }
out:
    serve_tools_free(&tools);
    free(ids);
    free(echo_text);
    free(stops);
    serve_structured_free(&structured); /* the job's requests hold their own copies */
    json_decref(root);
    return j;
}

/* The prompt counted once, the completions of every choice summed (as OpenAI). */
static json_t *usage_of(const serve_job *j) {
    int n_gen = 0;
    for (int i = 0; i < j->n_choices; i++)
        n_gen += j->choices[i].n_ids;
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", j->n_prompt, "completion_tokens", n_gen,
                     "total_tokens", j->n_prompt + n_gen);
}

/* seer's own fields of a choice: the generated ids, the speculation asked for and its counts,
 * and the speeds (what the chat page shows). acceptance: accepted / drafted (null when nothing
 * was drafted); tokens_per_second: the tokens after the first over the time since the first
 * (the decode speed, the prompt's time left out; null with fewer than two tokens). */
static json_t *seer_of(const serve_choice *c) {
    json_t *ids = json_array();
    for (int i = 0; i < c->n_ids; i++)
        json_array_append_new(ids, json_integer(c->ids[i]));
    const seer_request_stats *st = &c->st;
    const double dt = st->t_last_token_s - st->t_first_token_s;
    const char *drafter = seer_spec_kind_name(c->job->spec_kind);
    return json_pack("{s:o,s:I,s:I,s:i,s:s,s:o,s:o,s:o}", "token_ids", ids, "drafted", (json_int_t)st->drafted,
                     "accepted", (json_int_t)st->accepted, "preempted", st->n_preempted, "drafter",
                     drafter ? drafter : "?", "acceptance",
                     st->drafted > 0 ? json_real((double)st->accepted / (double)st->drafted) : json_null(),
                     "tokens_per_second",
                     st->n_generated > 1 && dt > 0 ? json_real((st->n_generated - 1) / dt) : json_null(),
                     "time_to_first_token_s", st->t_first_token_s >= 0 ? json_real(st->t_first_token_s) : json_null());
}

static const char *model_of(const serve_job *j) { return j->srv->model_id; }

/* One choice of a whole response. */
static json_t *whole_choice(serve_job *j, serve_choice *c) {
    const char *fin = serve_finish_api(c->finish);
    json_t *lp = j->logprobs ? serve_logprobs_json(j, c, 0, serve_logprobs_count(c, c->text_len), j->echo_len)
                             : json_null();
    if (!lp)
        return NULL;
    if (j->kind == JOB_CHAT) {
        bool called = false;
        char pre[80];
        snprintf(pre, sizeof pre, "%s_%d", j->id, c->index);
        json_t *msg = j->tools ? serve_tools_message(c->text ? c->text : "", c->text_len, j->tool_defs, pre, &called)
                               : json_pack("{s:s,s:s%}", "role", "assistant", "content", c->text ? c->text : "",
                                           c->text_len);
        if (called && c->finish == SEER_FINISH_STOP)
            fin = "tool_calls";
        return json_pack("{s:i,s:o,s:o,s:o}", "index", c->index, "message", msg, "finish_reason",
                         fin ? json_string(fin) : json_null(), "logprobs", lp);
    }
    /* echo: the prompt's text, then the completion's */
    const size_t n = j->echo_len + c->text_len;
    char *t = malloc(n + 1);
    if (!t) {
        json_decref(lp);
        return NULL;
    }
    if (j->echo_len)
        memcpy(t, j->echo, j->echo_len);
    if (c->text_len)
        memcpy(t + j->echo_len, c->text, c->text_len);
    t[n] = 0;
    json_t *o = json_pack("{s:i,s:s%,s:o,s:o}", "index", c->index, "text", t, n, "logprobs", lp, "finish_reason",
                          fin ? json_string(fin) : json_null());
    free(t);
    return o;
}

/* With one choice, seer's fields are the response's; with several, each choice has its own. */
char *serve_job_response(serve_job *j) {
    json_t *choices = json_array();
    int order[SERVE_MAX_CHOICES];
    serve_best_of_order(j, order); /* best_of: the likeliest candidates, numbered from 0 */
    for (int i = 0; choices && i < j->n_return; i++) {
        json_t *c = whole_choice(j, &j->choices[order[i]]);
        if (c)
            json_object_set_new(c, "index", json_integer(i));
        if (c && j->n_return > 1)
            json_object_set_new(c, "seer", seer_of(&j->choices[order[i]]));
        if (!c || json_array_append_new(choices, c)) {
            json_decref(choices);
            return NULL;
        }
    }
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", j->id, "object",
                          j->kind == JOB_CHAT ? "chat.completion" : "text_completion", "created",
                          (json_int_t)j->created, "model", model_of(j), "choices", choices,
                          "usage", usage_of(j));
    if (o && j->n_return == 1)
        json_object_set_new(o, "seer", seer_of(&j->choices[order[0]]));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* One "data: {...}\n\n" event of a stream: text (may be NULL) and finish reason (NULL: none). */
static bool push_event(serve_job *j, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return false;
    size_t n = strlen(s), need = j->pending_len + n + 9;
    if (need > j->pending_cap) {
        size_t cap = j->pending_cap ? j->pending_cap : 1024;
        while (cap < need)
            cap *= 2;
        char *p = realloc(j->pending, cap);
        if (!p) {
            free(s);
            return false;
        }
        j->pending = p;
        j->pending_cap = cap;
    }
    j->pending_len += (size_t)sprintf(j->pending + j->pending_len, "data: %s\n\n", s);
    free(s);
    return true;
}

/* A chunk of a stream with one choice, or none (the usage chunk). With include_usage every
 * chunk but the usage chunk has "usage": null, as OpenAI's. */
static json_t *chunk(serve_job *j, json_t *choice) {
    json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:[]}", "id", j->id, "object",
                          j->kind == JOB_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)j->created, "model", model_of(j), "choices");
    if (!c) {
        json_decref(choice);
        return NULL;
    }
    if (choice)
        json_array_append_new(json_object_get(c, "choices"), choice);
    if (j->include_usage)
        json_object_set_new(c, "usage", choice ? json_null() : usage_of(j));
    return c;
}

static json_t *choice_of(serve_job *j, int index, const char *text, size_t n, const char *fin) {
    json_t *f = fin ? json_string(fin) : json_null();
    if (j->kind == JOB_CHAT) {
        json_t *delta = text ? json_pack("{s:s%}", "content", text, n) : json_object();
        return json_pack("{s:i,s:o,s:n,s:o}", "index", index, "delta", delta, "logprobs", "finish_reason", f);
    }
    return json_pack("{s:i,s:s%,s:n,s:o}", "index", index, "text", text ? text : "", text ? n : 0, "logprobs",
                     "finish_reason", f);
}

/* Phase 0: each choice's role chunk (chat) or echo (completions). */
static bool first_events(serve_job *j) {
    bool ok = true;
    j->phase = 1;
    for (int i = 0; i < j->n_choices && !j->failed; i++) {
        if (j->kind == JOB_CHAT)
            ok = ok && push_event(j, chunk(j, json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", i, "delta", "role",
                                                        "assistant", "content", "", "logprobs", "finish_reason")));
        else if (j->echo_len)
            ok = ok && push_event(j, chunk(j, choice_of(j, i, j->echo, j->echo_len, NULL)));
    }
    return ok;
}

/* A finished choice of a chat with tools, once: when its text holds calls, its content left
 * and the calls' deltas are pushed (true; c->called); else false (the rest is content). */
static bool serve_tools_final(serve_job *j, serve_choice *c, bool *ok) {
    if (c->tools_done)
        return c->called;
    c->tools_done = true;
    char pre[80];
    snprintf(pre, sizeof pre, "%s_%d", j->id, c->index);
    size_t cl = 0;
    json_t *calls = serve_tools_parse_output(c->text ? c->text : "", c->text_len, j->tool_defs, pre, &cl);
    if (!calls)
        return false;
    c->called = true;
    if (cl > c->sent_text)
        *ok = *ok && push_event(j, chunk(j, choice_of(j, c->index, c->text + c->sent_text, cl - c->sent_text, NULL)));
    json_t *d = serve_tools_deltas(calls);
    size_t k;
    json_t *x;
    json_array_foreach(d, k, x)
        *ok = *ok && push_event(j, chunk(j, json_pack("{s:i,s:O,s:n,s:n}", "index", c->index, "delta", x, "logprobs",
                                                        "finish_reason")));
    json_decref(d);
    json_decref(calls);
    c->sent_text = c->text_len;
    return true;
}

/* Phase 1: new text of each choice, then the final chunk of each finished one; when all are
 * sent, the usage chunk if asked for. Returns false when nothing new is there. */
static bool text_events(serve_job *j) {
    bool any = false, ok = true;
    for (int i = 0; i < j->n_choices; i++) {
        serve_choice *c = &j->choices[i];
        /* with tools, text that is or may become a call waits for the end */
        size_t avail = j->tools && !c->done ? serve_tools_safe_prefix(c->text, c->text_len) : c->text_len;
        if (j->tools && c->done && serve_tools_final(j, c, &ok))
            avail = c->sent_text;
        if (avail > c->sent_text) {
            json_t *ch = choice_of(j, i, c->text + c->sent_text, avail - c->sent_text, NULL);
            if (ch && j->logprobs) { /* the tokens whose text starts in this piece */
                const int to = serve_logprobs_count(c, avail);
                json_object_set_new(ch, "logprobs", serve_logprobs_json(j, c, c->sent_lp, to, j->echo_len));
                c->sent_lp = to;
            }
            ok = ok && push_event(j, chunk(j, ch));
            c->sent_text = avail;
            any = true;
        }
    }
    if (any)
        return ok;
    int n_final = 0;
    for (int i = 0; i < j->n_choices; i++) {
        serve_choice *c = &j->choices[i];
        if (c->done && !c->sent_final) {
            const char *fin = c->called && c->finish == SEER_FINISH_STOP ? "tool_calls" : serve_finish_api(c->finish);
            json_t *o = chunk(j, choice_of(j, i, NULL, 0, fin));
            if (o)
                json_object_set_new(o, "seer", seer_of(c));
            ok = ok && push_event(j, o);
            c->sent_final = true;
            any = true;
        }
        n_final += c->sent_final;
    }
    if (n_final == j->n_choices) {
        j->phase = 2;
        /* the totals on a chunk of their own with no choice, as OpenAI's and llama-server's */
        return ok && (!j->include_usage || push_event(j, chunk(j, NULL)));
    }
    return any ? ok : false;
}

bool serve_job_next_events(serve_job *j) {
    if (j->phase == 0) {
        const size_t had = j->pending_len;
        const bool ok = first_events(j);
        if (!ok || j->pending_len > had)
            return ok;
    }
    if (j->phase == 1 && (j->failed || j->error)) {
        serve_error e = {.status = j->failed ? 400 : 500, .code = j->failed ? "invalid_value" : "generation_failed"};
        snprintf(e.message, sizeof e.message, "%s", j->failed ? j->error_msg : "the generation failed");
        char *s = serve_error_json(&e);
        bool ok = s && push_event(j, json_loads(s, 0, NULL));
        free(s);
        j->phase = 2;
        return ok;
    }
    if (j->phase == 1)
        return text_events(j);
    if (j->phase == 2) {
        const char *d = "data: [DONE]\n\n";
        size_t n = strlen(d);
        if (j->pending_len + n + 1 > j->pending_cap) {
            char *p = realloc(j->pending, j->pending_len + n + 1);
            if (!p)
                return false;
            j->pending = p;
            j->pending_cap = j->pending_len + n + 1;
        }
        memcpy(j->pending + j->pending_len, d, n);
        j->pending_len += n;
        j->phase = 3;
        return true;
    }
    return false;
}

char *serve_models_json(serve_state *srv) {
    json_t *o = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", srv->model_id,
                          "object", "model", "created", (json_int_t)0, "owned_by", "seer");
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}
