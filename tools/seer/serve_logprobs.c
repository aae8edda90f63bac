/*
 * serve_logprobs.c: OpenAI's `logprobs` objects of `seer serve`, whole and streamed: chat's
 * choices[i].logprobs.content[] (token, logprob, bytes, top_logprobs[]) and completions'
 * tokens / token_logprobs / top_logprobs / text_offset. The values are the target model's raw
 * log-softmax at each generated position (seer_request_params.logprobs), whether the token
 * came from a draft or not; with echo, the prompt's tokens first, from the prefill's logits
 * (seer_request_params.prompt_logprobs), the first one's value null as OpenAI's.
 *
 * A token is reported when its text starts inside the visible text: end-of-text tokens and
 * tokens after a stop string are not, a token the stop string cuts is. A token's "token" is
 * its piece when that is UTF-8, else "bytes:\xNN..." as OpenAI writes partial characters;
 * "bytes" are the piece's bytes.
 *
 * Not for: reading the request fields (serve_api.c) or computing the values (src/spec/).
 */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* logprobs: chat's boolean with top_logprobs (0..20), completions' integer (0..5: the
 * alternatives). With echo the prompt's tokens get theirs too, from the prefill's logits. */
bool serve_logprobs_parse(json_t *root, serve_kind kind, bool echo, seer_request_params *p, serve_error *e) {
    json_t *lp = json_object_get(root, "logprobs");
    long long k = 0;
    if (kind == JOB_CHAT) {
        if (serve_get_bool(root, "logprobs", &p->logprobs, e) < 0)
            return false;
        const int r = serve_get_int(root, "top_logprobs", 0, SEER_TOP_LOGPROBS_MAX, &k, e);
        if (r < 0)
            return false;
        if (r && k > 0 && !p->logprobs) {
            serve_fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs' set to true");
            return false;
        }
        p->top_logprobs = (int)k;
        return true;
    }
    if (!lp || json_is_null(lp) || json_is_false(lp))
        return true;
    if (serve_get_int(root, "logprobs", 0, 5, &k, e) < 0)
        return false;
    p->logprobs = true;
    p->prompt_logprobs = echo;
    p->top_logprobs = (int)k;
    return true;
}

void serve_choice_free_logprobs(serve_choice *c) {
    free(c->plp);
    c->plp = NULL;
    free(c->lp);
    free(c->lp_off);
    seer_detok_free(c->lp_dt);
    c->lp = NULL, c->lp_off = NULL, c->lp_dt = NULL;
}

bool serve_logprobs_echo(serve_job *j, const int32_t *ids, int n) {
    seer_detok *d = NULL;
    j->echo_ids = malloc(sizeof(int32_t) * (size_t)n);
    j->echo_off = malloc(sizeof(size_t) * (size_t)n);
    if (!j->echo_ids || !j->echo_off || seer_detok_init(j->srv->model, &d) != SEER_OK)
        return false;
    memcpy(j->echo_ids, ids, sizeof(int32_t) * (size_t)n);
    char buf[1024];
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        j->echo_off[i] = off < j->echo_len ? off : j->echo_len;
        const int k = seer_detok_push(d, ids[i], buf, sizeof buf);
        off += k > 0 ? (size_t)k : 0;
    }
    seer_detok_free(d);
    return true;
}

/* The prompt's log-probabilities into c, once the prompt is computed. */
static void take_prompt(serve_choice *c, seer_request *r) {
    const seer_token_logprob *plp;
    const int n = c->plp ? 0 : seer_request_prompt_logprobs(r, &plp);
    if (n != c->job->n_prompt || n < 1)
        return;
    c->plp = malloc(sizeof *c->plp * (size_t)n);
    if (c->plp)
        memcpy(c->plp, plp, sizeof *c->plp * (size_t)n);
}

void serve_choice_take_logprobs(serve_choice *c, seer_request *r) {
    const seer_token_logprob *lp;
    const int32_t *ids;
    if (c->job->echo_ids)
        take_prompt(c, r);
    const int n = seer_request_logprobs(r, &lp);
    if (n <= c->n_lp || seer_request_tokens(r, &ids) < n)
        return;
    if (!c->lp_dt && seer_detok_init(c->job->srv->model, &c->lp_dt) != SEER_OK)
        return;
    if (n > c->cap_lp) {
        int cap = c->cap_lp ? c->cap_lp : 64;
        while (cap < n)
            cap *= 2;
        seer_token_logprob *p = realloc(c->lp, sizeof *p * cap);
        if (p)
            c->lp = p;
        size_t *o = p ? realloc(c->lp_off, sizeof *o * cap) : NULL;
        if (!o)
            return;
        c->lp_off = o;
        c->cap_lp = cap;
    }
    char buf[1024];
    for (int i = c->n_lp; i < n; i++) {
        c->lp[i] = lp[i];
        c->lp_off[i] = c->lp_bytes;
        const int k = seer_detok_push(c->lp_dt, ids[i], buf, sizeof buf);
        c->lp_bytes += k > 0 ? (size_t)k : 0; /* a longer piece (none is) would count as none */
    }
    c->n_lp = n;
}

int serve_logprobs_count(const serve_choice *c, size_t text_len) {
    const seer_model *m = c->job->srv->model;
    int n = 0;
    while (n < c->n_lp && c->lp_off[n] < text_len && n < c->n_ids && !seer_token_is_eog(m, c->ids[n]))
        n++;
    return n;
}

static bool valid_utf8(const unsigned char *s, int n) {
    for (int i = 0; i < n;) {
        const unsigned char b = s[i];
        const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n || (len == 2 && b < 0xc2))
            return false;
        for (int k = 1; k < len; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
        if ((len == 3 && ((b == 0xe0 && s[i + 1] < 0xa0) || (b == 0xed && s[i + 1] >= 0xa0))) ||
            (len == 4 && ((b == 0xf0 && s[i + 1] < 0x90) || b > 0xf4 || (b == 0xf4 && s[i + 1] >= 0x90))))
            return false;
        i += len;
    }
    return true;
}

/* The token's text for "token" (*str, malloc'd) and its bytes (into piece, *n). */
static char *token_str(const seer_model *m, int32_t t, unsigned char *piece, int cap, int *n) {
    int k = seer_token_piece(m, t, (char *)piece, cap);
    *n = k = k < 0 ? 0 : k > cap ? cap : k;
    if (valid_utf8(piece, k)) {
        char *s = malloc((size_t)k + 1);
        if (s)
            memcpy(s, piece, (size_t)k), s[k] = 0;
        return s;
    }
    char *s = malloc(6 + 4 * (size_t)k + 1), *o = s;
    if (!s)
        return NULL;
    o += sprintf(o, "bytes:");
    for (int i = 0; i < k; i++)
        o += sprintf(o, "\\x%02x", piece[i]);
    return s;
}

/* {"token", "logprob", "bytes"} of one token (chat). */
static json_t *chat_entry(const seer_model *m, int32_t t, float lp) {
    unsigned char piece[512];
    int n;
    char *s = token_str(m, t, piece, sizeof piece, &n);
    json_t *bytes = json_array();
    for (int i = 0; bytes && i < n; i++)
        json_array_append_new(bytes, json_integer(piece[i]));
    json_t *o = s && bytes ? json_pack("{s:s,s:f,s:o}", "token", s, "logprob", (double)lp, "bytes", bytes) : NULL;
    if (!o)
        json_decref(bytes);
    free(s);
    return o;
}

static json_t *chat_json(const seer_model *m, const serve_choice *c, int from, int to) {
    json_t *content = json_array();
    for (int i = from; content && i < to; i++) {
        const seer_token_logprob *e = &c->lp[i];
        json_t *o = chat_entry(m, c->ids[i], e->logprob), *top = json_array();
        for (int k = 0; o && top && k < e->n_top; k++)
            json_array_append_new(top, chat_entry(m, e->top_id[k], e->top_logprob[k]));
        if (!o || !top || json_object_set_new(o, "top_logprobs", top) || json_array_append_new(content, o)) {
            json_decref(o);
            json_decref(content);
            return NULL;
        }
    }
    return content ? json_pack("{s:o,s:n}", "content", content, "refusal") : NULL;
}

/* Appends one completions entry: token t with value lp (NAN: null, with a null top_logprobs:
 * the echoed prompt's first token) and its alternatives. False when out of memory. */
static bool compl_entry(const seer_model *m, json_t *tokens, json_t *lps, json_t *tops, json_t *offs, int32_t t,
                        const seer_token_logprob *e, size_t off) {
    unsigned char piece[512];
    int n;
    char *s = token_str(m, t, piece, sizeof piece, &n);
    const bool first = isnan(e->logprob);
    json_t *top = first ? json_null() : json_object();
    /* the most likely tokens and the chosen one, as OpenAI's */
    for (int k = 0; s && top && !first && k < e->n_top; k++) {
        char *ts = token_str(m, e->top_id[k], piece, sizeof piece, &n);
        if (ts && !json_object_get(top, ts))
            json_object_set_new(top, ts, json_real(e->top_logprob[k]));
        free(ts);
    }
    if (s && top && !first && !json_object_get(top, s))
        json_object_set_new(top, s, json_real(e->logprob));
    const bool ok = s && top && !json_array_append_new(tokens, json_string(s)) &&
                    !json_array_append_new(lps, first ? json_null() : json_real(e->logprob)) &&
                    !json_array_append_new(tops, top) && !json_array_append_new(offs, json_integer((json_int_t)off));
    free(s);
    return ok;
}

static json_t *compl_json(const serve_job *j, const serve_choice *c, int from, int to, size_t base) {
    const seer_model *m = j->srv->model;
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    json_t *o = json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                          "text_offset", offs);
    bool ok = o != NULL;
    for (int i = 0; ok && from == 0 && c->plp && i < j->n_prompt; i++)
        ok = compl_entry(m, tokens, lps, tops, offs, j->echo_ids[i], &c->plp[i], j->echo_off[i]);
    for (int i = from; ok && i < to; i++)
        ok = compl_entry(m, tokens, lps, tops, offs, c->ids[i], &c->lp[i], base + c->lp_off[i]);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *serve_logprobs_json(const serve_job *j, const serve_choice *c, int from, int to, size_t base) {
    const seer_model *m = j->srv->model;
    return j->kind == JOB_CHAT ? chat_json(m, c, from, to) : compl_json(j, c, from, to, base);
}
