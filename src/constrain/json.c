/*
 * json.c: the schema translator's JSON reader (json.h): RFC 8259 values, strings decoded
 * (with \u escapes and surrogate pairs), depth at most SJ_MAX_DEPTH.
 *
 * Not for: anything on the request path of the server; speed (schemas are small).
 */
#include "constrain/json.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n, i;
    seer_status st;
    long nodes;
} rd;

static sj *bad(rd *r, const char *what) {
    if (r->st == SEER_OK)
        r->st = seer_err(SEER_ERR_INVALID_ARG, "schema: invalid JSON at byte %zu: %s", r->i, what);
    return NULL;
}

static void ws(rd *r) {
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

static int hex4(rd *r) {
    if (r->i + 4 > r->n)
        return -1;
    int v = 0;
    for (int k = 0; k < 4; k++) {
        const char c = r->s[r->i++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return -1;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A string at r->i (past the opening quote): malloc'd decoded copy, *len its length. */
static char *str(rd *r, size_t *len) {
    char *o = malloc(r->n - r->i + 1); /* decoding never lengthens */
    if (!o) {
        r->st = seer_err(SEER_ERR_OOM, "schema: out of memory");
        return NULL;
    }
    size_t k = 0;
    for (;;) {
        if (r->i >= r->n) {
            free(o);
            return (char *)bad(r, "unterminated string");
        }
        const unsigned char c = (unsigned char)r->s[r->i++];
        if (c == '"')
            break;
        if (c < 0x20) {
            free(o);
            return (char *)bad(r, "control character in a string");
        }
        if (c != '\\') {
            o[k++] = (char)c;
            continue;
        }
        if (r->i >= r->n) {
            free(o);
            return (char *)bad(r, "unterminated string");
        }
        const char e = r->s[r->i++];
        const char *map = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e);
        if (e && map && ((map - "\"\"\\\\//b\bf\fn\nr\rt\t") % 2 == 0)) {
            o[k++] = map[1];
            continue;
        }
        if (e != 'u') {
            free(o);
            return (char *)bad(r, "bad escape");
        }
        int cp = hex4(r);
        if (cp >= 0xD800 && cp < 0xDC00 && r->i + 6 <= r->n && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u') {
            r->i += 2;
            const int lo = hex4(r);
            if (lo < 0xDC00 || lo > 0xDFFF)
                cp = -1;
            else
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xD800 && cp < 0xE000)
            cp = -1;
        if (cp < 0) {
            free(o);
            return (char *)bad(r, "bad \\u escape");
        }
        k += put_utf8(o + k, (unsigned)cp);
    }
    o[k] = 0;
    *len = k;
    return o;
}

static sj *value(rd *r, int depth);

static bool grow(rd *r, sj *v, int *cap, bool keys) {
    if (v->n < *cap)
        return true;
    const int c = *cap ? *cap * 2 : 4;
    sj **it = realloc(v->items, (size_t)c * sizeof *it);
    if (it)
        v->items = it;
    if (it && keys) {
        char **k = realloc(v->keys, (size_t)c * sizeof *k);
        if (k)
            v->keys = k;
        size_t *kl = k ? realloc(v->key_lens, (size_t)c * sizeof *kl) : NULL;
        if (kl)
            v->key_lens = kl;
        it = kl ? it : NULL;
    }
    if (!it) {
        r->st = seer_err(SEER_ERR_OOM, "schema: out of memory");
        return false;
    }
    *cap = c;
    return true;
}

static sj *container(rd *r, sj *v, int depth) {
    const bool obj = v->type == SJ_OBJ;
    const char close = obj ? '}' : ']';
    int cap = 0;
    ws(r);
    if (r->i < r->n && r->s[r->i] == close) {
        r->i++;
        return v;
    }
    for (;;) {
        if (!grow(r, v, &cap, obj))
            return NULL;
        if (obj) {
            ws(r);
            if (r->i >= r->n || r->s[r->i] != '"')
                return bad(r, "expected a key");
            r->i++;
            size_t kl = 0;
            char *k = str(r, &kl);
            if (!k)
                return NULL;
            v->keys[v->n] = k;
            v->key_lens[v->n] = kl;
            v->items[v->n] = NULL;
            v->n++;
            ws(r);
            if (r->i >= r->n || r->s[r->i] != ':')
                return bad(r, "expected ':'");
            r->i++;
            if (!(v->items[v->n - 1] = value(r, depth + 1)))
                return NULL;
        } else {
            sj *it = value(r, depth + 1);
            if (!it)
                return NULL;
            v->items[v->n++] = it;
        }
        ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == close) {
            r->i++;
            return v;
        }
        return bad(r, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static sj *value(rd *r, int depth) {
    ws(r);
    if (depth > SJ_MAX_DEPTH)
        return bad(r, "nested too deep");
    if (++r->nodes > 200000)
        return bad(r, "too many values");
    if (r->i >= r->n)
        return bad(r, "unexpected end");
    sj *v = calloc(1, sizeof *v);
    if (!v) {
        r->st = seer_err(SEER_ERR_OOM, "schema: out of memory");
        return NULL;
    }
    const char c = r->s[r->i];
    sj *res = v;
    if (c == '{' || c == '[') {
        r->i++;
        v->type = c == '{' ? SJ_OBJ : SJ_ARR;
        res = container(r, v, depth);
    } else if (c == '"') {
        r->i++;
        v->type = SJ_STR;
        v->raw = str(r, &v->raw_len);
        res = v->raw ? v : NULL;
    } else if (r->n - r->i >= 4 && memcmp(r->s + r->i, "true", 4) == 0) {
        v->type = SJ_BOOL, v->b = true, r->i += 4;
    } else if (r->n - r->i >= 5 && memcmp(r->s + r->i, "false", 5) == 0) {
        v->type = SJ_BOOL, r->i += 5;
    } else if (r->n - r->i >= 4 && memcmp(r->s + r->i, "null", 4) == 0) {
        v->type = SJ_NULL, r->i += 4;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        /* RFC 8259's number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
        const size_t a = r->i;
        size_t j = a;
        if (j < r->n && r->s[j] == '-')
            j++;
        const size_t d0 = j;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9')
            j++;
        bool ok = j > d0 && !(r->s[d0] == '0' && j - d0 > 1);
        if (ok && j < r->n && r->s[j] == '.') {
            const size_t f = ++j;
            while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9')
                j++;
            ok = j > f;
        }
        if (ok && j < r->n && (r->s[j] == 'e' || r->s[j] == 'E')) {
            j++;
            if (j < r->n && (r->s[j] == '+' || r->s[j] == '-'))
                j++;
            const size_t e = j;
            while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9')
                j++;
            ok = j > e;
        }
        if (!ok || j - a > 64) {
            res = NULL;
            bad(r, "bad number");
        } else {
            char buf[72];
            memcpy(buf, r->s + a, j - a);
            buf[j - a] = 0;
            v->type = SJ_NUM;
            v->num = strtod(buf, NULL);
            v->raw = r->s + a;
            v->raw_len = j - a;
            r->i = j;
        }
    } else {
        res = bad(r, "unexpected character");
    }
    if (!res) {
        seer_json_free(v);
        return NULL;
    }
    return v;
}

seer_status seer_json_parse(const char *text, size_t len, sj **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    if (!text)
        return seer_err(SEER_ERR_INVALID_ARG, "schema: text is NULL");
    rd r = {.s = text, .n = len, .st = SEER_OK};
    sj *v = value(&r, 0);
    if (v) {
        ws(&r);
        if (r.i != r.n) {
            seer_json_free(v);
            v = bad(&r, "trailing characters");
        }
    }
    if (!v)
        return r.st != SEER_OK ? r.st : seer_err(SEER_ERR_INVALID_ARG, "schema: invalid JSON");
    *out = v;
    return SEER_OK;
}

void seer_json_free(sj *v) {
    if (!v)
        return;
    for (int i = 0; i < v->n; i++) {
        seer_json_free(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->key_lens);
    if (v->type == SJ_STR)
        free((void *)v->raw);
    free(v);
}

const sj *seer_json_get(const sj *o, const char *key) {
    if (!o || o->type != SJ_OBJ)
        return NULL;
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->keys[i], key) == 0 && strlen(key) == o->key_lens[i])
            return o->items[i];
    return NULL;
}
