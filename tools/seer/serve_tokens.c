/*
 * serve_tokens.c: `seer serve`'s POST /tokenize and POST /detokenize, in llama-server's shape.
 *
 *   /tokenize   {"content": "text", "add_special": false, "with_pieces": false}
 *               -> {"tokens": [ids]}, or with_pieces: {"tokens": [{"id": 15, "piece": "he"}]}
 *               (a piece that is not whole UTF-8, a byte of a multi-byte character, is given as
 *               its bytes' values: "piece": [195]). add_special: a BOS first where the model
 *               has one, and control-token texts such as "<|im_end|>" become those tokens
 *               (without it they stay text).
 *   /detokenize {"tokens": [ids]} -> {"content": "text"}, the text seer would stream for them
 *               (a SentencePiece vocabulary's first word keeps the space it was encoded with).
 *
 * Both answer at once (the model's tokenizer only; no scheduler step), behind the API key like
 * /v1/. A field not listed here, a wrong type, an id outside the vocabulary or text over the
 * body limit is refused with 400 and nothing else happens.
 *
 * Not for: the generation endpoints (serve_api.c), routing (serve_http.c).
 */
#include "cli.h"
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The body as a JSON object whose every field is one of known[]; NULL with e filled. */
static json_t *parse_object(const char *body, size_t len, const char *const *known, int n_known, serve_error *e) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        serve_fail(e, 400, NULL, "invalid_json", "the body is not valid JSON: %s (at byte %d)", je.text, je.position);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        serve_fail(e, 400, NULL, "invalid_request", "the body must be a JSON object");
        return NULL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        int k = 0;
        while (k < n_known && strcmp(key, known[k]))
            k++;
        if (k == n_known) {
            snprintf(e->param_buf, sizeof e->param_buf, "%.120s", key);
            serve_fail(e, 400, e->param_buf, "unknown_field", "unknown field '%.120s'", key);
            json_decref(root);
            return NULL;
        }
    }
    return root;
}

/* piece as a JSON string when it is whole UTF-8, else as the list of its byte values */
static json_t *piece_json(const char *p, int n) {
    json_t *s = json_stringn(p, (size_t)n); /* NULL for bytes that are not UTF-8 */
    if (s)
        return s;
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

char *serve_tokenize_json(serve_state *srv, const char *body, size_t len, serve_error *e) {
    static const char *const known[] = {"content", "add_special", "with_pieces"};
    json_t *root = parse_object(body, len, known, 3, e);
    if (!root)
        return NULL;
    char *out = NULL;
    int32_t *ids = NULL;
    json_t *res = NULL;
    bool add_special = false, with_pieces = false;
    json_t *c = json_object_get(root, "content");
    if (!c || !json_is_string(c)) {
        serve_fail(e, 400, "content", "invalid_type", "'content' must be a string");
        goto done;
    }
    if (serve_get_bool(root, "add_special", &add_special, e) < 0 ||
        serve_get_bool(root, "with_pieces", &with_pieces, e) < 0)
        goto done;
    const char *text = json_string_value(c);
    const size_t n_text = json_string_length(c);
    /* no token is shorter than a byte, and a BOS comes first */
    const int cap = n_text + 2 < (size_t)1 << 30 ? (int)n_text + 2 : 1 << 30;
    ids = malloc(sizeof *ids * (size_t)cap);
    int n = 0;
    if (!ids) {
        serve_fail(e, 500, NULL, "out_of_memory", "out of memory for %d tokens", cap);
        goto done;
    }
    const seer_status st = seer_tokenize(srv->model, text, n_text, add_special, add_special, ids, cap, &n);
    if (st != SEER_OK) {
        serve_fail(e, 400, "content", "invalid_value", "'content' cannot be tokenized: %s", seer_last_error());
        goto done;
    }
    json_t *toks = json_array();
    res = json_object();
    json_object_set_new(res, "tokens", toks);
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(toks, json_integer(ids[i]));
            continue;
        }
        char piece[512];
        const int np = seer_token_piece(srv->model, ids[i], piece, sizeof piece);
        json_t *t = json_object();
        json_object_set_new(t, "id", json_integer(ids[i]));
        json_object_set_new(t, "piece", piece_json(piece, np > 0 ? np : 0));
        json_array_append_new(toks, t);
    }
    out = json_dumps(res, JSON_COMPACT);
    if (!out) {
        serve_fail(e, 500, NULL, "out_of_memory", "out of memory for the answer");
    }
done:
    json_decref(res);
    json_decref(root);
    free(ids);
    return out;
}

char *serve_detokenize_json(serve_state *srv, const char *body, size_t len, serve_error *e) {
    static const char *const known[] = {"tokens"};
    json_t *root = parse_object(body, len, known, 1, e);
    if (!root)
        return NULL;
    char *out = NULL;
    seer_detok *dt = NULL;
    cli_text text = {0};
    json_t *toks = json_object_get(root, "tokens");
    const int V = seer_n_vocab(srv->model);
    if (!toks || !json_is_array(toks)) {
        serve_fail(e, 400, "tokens", "invalid_type", "'tokens' must be an array of token ids");
        goto done;
    }
    for (size_t i = 0; i < json_array_size(toks); i++) {
        json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= V) {
            serve_fail(e, 400, "tokens", "invalid_value", "'tokens'[%zu] is not a token id of this model (0 to %d)", i, V - 1);
            goto done;
        }
    }
    if (seer_detok_init(srv->model, &dt) != SEER_OK) {
        serve_fail(e, 500, NULL, "out_of_memory", "%s", seer_last_error());
        goto done;
    }
    for (size_t i = 0; i <= json_array_size(toks); i++) {
        const bool flush = i == json_array_size(toks);
        const int32_t id = flush ? 0 : (int32_t)json_integer_value(json_array_get(toks, i));
        if (cli_detok_append(dt, id, flush, &text) < 0) {
            serve_fail(e, 500, NULL, "out_of_memory", "out of memory for the text");
            goto done;
        }
    }
    json_t *res = json_object();
    json_object_set_new(res, "content", json_stringn(text.s ? text.s : "", text.n)); /* UTF-8: seer_detok's */
    out = json_dumps(res, JSON_COMPACT);
    json_decref(res);
    if (!out) {
        serve_fail(e, 500, NULL, "out_of_memory", "out of memory for the answer");
    }
done:
    seer_detok_free(dt);
    free(text.s);
    json_decref(root);
    return out;
}

/* The text of token ids as the detokenizer writes generated text (control tokens have none; a
 * BOS drops the space SentencePiece puts before the first word): what `echo` sends of a
 * prompt given as ids. NULL when out of memory. */
char *serve_ids_text(serve_state *srv, const int32_t *ids, int n, size_t *len) {
    seer_detok *d = NULL;
    size_t cap = 256, used = 0;
    char *s = malloc(cap);
    if (!s || seer_detok_init(srv->model, &d) != SEER_OK) {
        free(s);
        return NULL;
    }
    for (int i = 0; i <= n; i++) {
        int k;
        /* a piece that does not fit consumes nothing: the room doubles until it does */
        while ((k = i < n ? seer_detok_push(d, ids[i], s + used, (int)(cap - used))
                          : seer_detok_flush(d, s + used, (int)(cap - used))) < 0) {
            char *p = cap < ((size_t)1 << 30) ? realloc(s, cap * 2) : NULL;
            if (!p) {
                free(s);
                seer_detok_free(d);
                return NULL;
            }
            s = p, cap *= 2;
        }
        used += (size_t)k;
    }
    seer_detok_free(d);
    *len = used;
    return s;
}
