/*
 * schema.c: JSON schema -> grammar text (grammar.c's syntax), the subset OpenAI's structured
 * outputs accept, plus the any-JSON-object grammar of json_object mode.
 *
 * Covered: type (one or a list), properties with required and optional members (emitted in
 * the schema's order; optional ones may be left out), additionalProperties (false, absent or
 * true: only the listed properties are generated, which every such schema accepts; a schema
 * with no properties but an additionalProperties schema gives a map), items with minItems /
 * maxItems, enum, const, anyOf, oneOf (as anyOf), allOf of one schema, $ref to #/$defs/... or
 * #/definitions/... (recursion allowed), strings with minLength / maxLength, pattern (regex.c)
 * and the formats date, time, date-time, uuid, email; integers with minimum / maximum /
 * exclusive bounds (exact); numbers with bounds are generated as the integers in range (plus
 * any fraction when both bounds are integers >= 0), which every such schema accepts; boolean,
 * null. Annotations (title, description, default, examples, $schema, $id, $comment, strict,
 * deprecated, readOnly, writeOnly, discriminator) are ignored.
 *
 * Not for: keywords that change what is valid in ways a grammar cannot honour cheaply (not,
 * if/then/else, patternProperties, uniqueItems, multipleOf, prefixItems, dependencies, ...):
 * they give SEER_ERR_UNSUPPORTED naming the keyword.
 *
 * Whitespace: one space, or a newline and at most 20 spaces or tabs, between tokens (as
 * llama.cpp bounds it: a model cannot fill its output with blank lines), none
 * before or after the whole value. Numbers: at most 16 integer digits, 15 fraction digits
 * and 3 exponent digits, so that a model cannot run on in one number.
 */
#include "constrain/grammar.h"
#include "constrain/json.h"
#include "util/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable text ----------------------------------------------------------------------- */

void seer_gbuf_put(seer_gbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = cap > 4 * (size_t)SEER_G_MAX_TEXT ? NULL : realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void seer_gbuf_puts(seer_gbuf *b, const char *s) {
    seer_gbuf_put(b, s, strlen(s));
}

void seer_gbuf_printf(seer_gbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof tmp)
        b->oom = true;
    else
        seer_gbuf_put(b, tmp, (size_t)n);
}

void seer_gbuf_literal(seer_gbuf *b, const char *s, size_t n) {
    seer_gbuf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            const char e[2] = {'\\', (char)c};
            seer_gbuf_put(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            seer_gbuf_printf(b, "\\x%02X", c);
        } else {
            seer_gbuf_put(b, (const char *)&c, 1);
        }
    }
    seer_gbuf_put(b, "\"", 1);
}

/* ---- the fixed part ---------------------------------------------------------------------- */

static const char *const base_rules =
    "ws ::= (\" \" | \"\\n\" [ \\t]{0,20})?\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jint ::= \"-\"? jnat\n"
    "jnat ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "jnum ::= jint (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?\n"
    "jbool ::= \"true\" | \"false\"\n"
    "jnull ::= \"null\"\n"
    "jvalue ::= jobject | jarray | jstring | jnum | jbool | jnull\n"
    "jmember ::= jstring ws \":\" ws jvalue\n"
    "jobject ::= \"{\" ws (jmember ws (\",\" ws jmember ws)*)? \"}\"\n"
    "jarray ::= \"[\" ws (jvalue ws (\",\" ws jvalue ws)*)? \"]\"\n"
    "jdate ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n"
    "jtime ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "juuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}\n"
    "jemail ::= [a-zA-Z0-9._+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} (\".\" [a-zA-Z0-9-]{1,63}){1,4}\n";

seer_status seer_json_object_grammar(char **out) {
    SEER_CHECK_ARG(out);
    seer_gbuf b = {0};
    seer_gbuf_puts(&b, "root ::= jobject\n");
    seer_gbuf_puts(&b, base_rules);
    if (b.oom) {
        free(b.s);
        return seer_err(SEER_ERR_OOM, "schema: out of memory");
    }
    *out = b.s;
    return SEER_OK;
}

/* ---- the translator ---------------------------------------------------------------------- */

typedef struct {
    const sj *root;
    seer_gbuf defs;
    int n_rules;
    const char **ref_keys; /* $ref strings already given a rule */
    int *ref_ids;
    int n_refs;
    int depth;
    seer_status st;
} sc;

#define SC_MAX_RULES 20000

static bool sfail(sc *c, seer_status st, const char *fmt, const char *arg) {
    if (c->st == SEER_OK) {
        char a[96];
        seer_text_escape(arg ? arg : "", a, sizeof a);
        c->st = seer_err(st, fmt, a);
    }
    return false;
}

static bool gen(sc *c, const sj *s, int *id);

static int new_id(sc *c) {
    if (c->n_rules >= SC_MAX_RULES) {
        sfail(c, SEER_ERR_INVALID_ARG, "schema: too large (more than 20000 rules)%s", NULL);
        return -1;
    }
    return c->n_rules++;
}

/* JSON text of a value, for const and enum. */
static void write_json(seer_gbuf *b, const sj *v, int depth) {
    if (depth > SJ_MAX_DEPTH) {
        b->oom = true;
        return;
    }
    switch (v->type) {
    case SJ_NULL: seer_gbuf_puts(b, "null"); break;
    case SJ_BOOL: seer_gbuf_puts(b, v->b ? "true" : "false"); break;
    case SJ_NUM: seer_gbuf_put(b, v->raw, v->raw_len); break;
    case SJ_STR:
        seer_gbuf_put(b, "\"", 1);
        for (size_t i = 0; i < v->raw_len; i++) {
            const unsigned char ch = (unsigned char)v->raw[i];
            if (ch == '"' || ch == '\\') {
                const char e[2] = {'\\', (char)ch};
                seer_gbuf_put(b, e, 2);
            } else if (ch < 0x20) {
                seer_gbuf_printf(b, "\\u%04x", ch);
            } else
                seer_gbuf_put(b, (const char *)&ch, 1);
        }
        seer_gbuf_put(b, "\"", 1);
        break;
    case SJ_ARR:
    case SJ_OBJ:
        seer_gbuf_put(b, v->type == SJ_ARR ? "[" : "{", 1);
        for (int i = 0; i < v->n; i++) {
            if (i)
                seer_gbuf_put(b, ",", 1);
            if (v->type == SJ_OBJ) {
                sj k = {.type = SJ_STR, .raw = v->keys[i], .raw_len = v->key_lens[i]};
                write_json(b, &k, depth + 1);
                seer_gbuf_put(b, ":", 1);
            }
            write_json(b, v->items[i], depth + 1);
        }
        seer_gbuf_put(b, v->type == SJ_ARR ? "]" : "}", 1);
        break;
    }
}

static void lit_json(sc *c, const sj *v) {
    seer_gbuf t = {0};
    write_json(&t, v, 0);
    if (t.oom)
        c->defs.oom = true;
    else
        seer_gbuf_literal(&c->defs, t.s, t.n);
    free(t.s);
}

static bool known_annotation(const char *k) {
    static const char *const ann[] = {"title", "description", "default", "examples", "$schema", "$id",
                                      "$comment", "strict", "deprecated", "readOnly", "writeOnly",
                                      "discriminator", "$defs", "definitions", "name", "example",
                                      "additionalProperties", NULL};
    for (int i = 0; ann[i]; i++)
        if (strcmp(k, ann[i]) == 0)
            return true;
    return false;
}

static bool check_keywords(sc *c, const sj *s) {
    static const char *const kw[] = {"type", "properties", "required", "items", "minItems", "maxItems",
                                     "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength",
                                     "maxLength", "pattern", "format", "minimum", "maximum",
                                     "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int i = 0; i < s->n; i++) {
        bool ok = known_annotation(s->keys[i]);
        for (int j = 0; !ok && kw[j]; j++)
            ok = strcmp(s->keys[i], kw[j]) == 0;
        if (!ok)
            return sfail(c, SEER_ERR_UNSUPPORTED, "schema: keyword '%s' is not supported", s->keys[i]);
    }
    return true;
}

static bool get_count(sc *c, const sj *s, const char *key, long dflt, long *out) {
    const sj *v = seer_json_get(s, key);
    *out = dflt;
    if (!v)
        return true;
    if (v->type != SJ_NUM || v->num < 0 || v->num != floor(v->num) || v->num > SEER_G_MAX_REPEAT)
        return sfail(c, SEER_ERR_UNSUPPORTED, "schema: '%s' must be an integer in 0..1000", key);
    *out = (long)v->num;
    return true;
}

static void repeat_suffix(sc *c, long lo, long hi) {
    if (hi < 0)
        seer_gbuf_printf(&c->defs, "{%ld,}", lo);
    else
        seer_gbuf_printf(&c->defs, "{%ld,%ld}", lo, hi);
}

static bool gen_string(sc *c, const sj *s, int id) {
    long lo, hi;
    if (!get_count(c, s, "minLength", 0, &lo) || !get_count(c, s, "maxLength", -1, &hi))
        return false;
    if (hi >= 0 && hi < lo)
        return sfail(c, SEER_ERR_INVALID_ARG, "schema: maxLength below minLength%s", NULL);
    const sj *fmt = seer_json_get(s, "format"), *pat = seer_json_get(s, "pattern");
    if (pat && pat->type == SJ_STR) {
        seer_gbuf expr = {0};
        const seer_status st = seer_regex_expr(pat->raw, pat->raw_len, &expr, true);
        if (st == SEER_OK)
            seer_gbuf_printf(&c->defs, "r%d ::= \"\\\"\" %s \"\\\"\"\n", id, expr.s ? expr.s : "");
        free(expr.s);
        if (st != SEER_OK && c->st == SEER_OK)
            c->st = st;
        return st == SEER_OK;
    }
    if (fmt && fmt->type == SJ_STR) {
        static const char *const f[][2] = {{"date", "jdate"}, {"time", "jtime"},
                                           {"date-time", "jdate \"T\" jtime"}, {"uuid", "juuid"},
                                           {"email", "jemail"}};
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
            if (strcmp(fmt->raw, f[k][0]) == 0) {
                seer_gbuf_printf(&c->defs, "r%d ::= \"\\\"\" %s \"\\\"\"\n", id, f[k][1]);
                return true;
            }
        /* other formats are annotations unless a validator asserts them; plain strings */
    }
    seer_gbuf_printf(&c->defs, "r%d ::= \"\\\"\" jchar", id);
    repeat_suffix(c, lo, hi);
    seer_gbuf_puts(&c->defs, " \"\\\"\"\n");
    return true;
}

/* Nonnegative integers in [lo, hi] with the same number of digits, as grammar text
 * (the classic range-to-pattern split: common first digit, then lower/middle/upper parts). */
static void range_same(seer_gbuf *b, const char *lo, const char *hi, int n) {
    if (n == 0)
        return;
    if (strncmp(lo, hi, (size_t)n) == 0) {
        seer_gbuf_literal(b, lo, (size_t)n);
        return;
    }
    if (lo[0] == hi[0]) {
        seer_gbuf_printf(b, "\"%c\" (", lo[0]);
        range_same(b, lo + 1, hi + 1, n - 1);
        seer_gbuf_puts(b, ")");
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    const bool lo_min = strncmp(lo + 1, zeros, (size_t)n - 1) == 0;
    const bool hi_max = strncmp(hi + 1, nines, (size_t)n - 1) == 0;
    const char a = lo_min ? lo[0] : (char)(lo[0] + 1), z = hi_max ? hi[0] : (char)(hi[0] - 1);
    bool first = true;
    seer_gbuf_puts(b, "(");
    if (!lo_min) {
        seer_gbuf_printf(b, "\"%c\" (", lo[0]);
        range_same(b, lo + 1, nines, n - 1);
        seer_gbuf_puts(b, ")");
        first = false;
    }
    if (a <= z) {
        seer_gbuf_printf(b, "%s[%c-%c]", first ? "" : " | ", a, z);
        if (n > 1)
            seer_gbuf_printf(b, " [0-9]{%d}", n - 1);
        first = false;
    }
    if (!hi_max) {
        seer_gbuf_printf(b, "%s\"%c\" (", first ? "" : " | ", hi[0]);
        range_same(b, zeros, hi + 1, n - 1);
        seer_gbuf_puts(b, ")");
    }
    seer_gbuf_puts(b, ")");
}

/* Nonnegative integers in [lo, hi] (hi < 0: unbounded), written without leading zeros. */
static void range_nat(seer_gbuf *b, long long lo, long long hi) {
    char l[24], h[24];
    bool first = true;
    seer_gbuf_puts(b, "(");
    for (int d = snprintf(l, sizeof l, "%lld", lo); d <= 16; d++) {
        long long dlo = 1, dhi;
        for (int k = 1; k < d; k++)
            dlo *= 10;
        if (d == 1)
            dlo = 0;
        dhi = d == 1 ? 9 : dlo * 10 - 1;
        if (dlo < lo)
            dlo = lo;
        if (hi >= 0 && dhi > hi)
            dhi = hi;
        if (dlo > dhi)
            break;
        if (!first)
            seer_gbuf_puts(b, " | ");
        first = false;
        snprintf(l, sizeof l, "%lld", dlo);
        snprintf(h, sizeof h, "%lld", dhi);
        range_same(b, l, h, d);
    }
    seer_gbuf_puts(b, first ? "\"0\")" : ")");
}

static bool gen_integer(sc *c, const sj *s, int id, bool number) {
    const sj *mn = seer_json_get(s, "minimum"), *mx = seer_json_get(s, "maximum");
    const sj *emn = seer_json_get(s, "exclusiveMinimum"), *emx = seer_json_get(s, "exclusiveMaximum");
    const double big = 1e15;
    double lo = -big, hi = big;
    if ((mn && mn->type != SJ_NUM) || (mx && mx->type != SJ_NUM) || (emn && emn->type != SJ_NUM) ||
        (emx && emx->type != SJ_NUM))
        return sfail(c, SEER_ERR_UNSUPPORTED, "schema: numeric bounds must be numbers%s", NULL);
    if (!mn && !mx && !emn && !emx) {
        seer_gbuf_printf(&c->defs, "r%d ::= %s\n", id, number ? "jnum" : "jint");
        return true;
    }
    if (mn)
        lo = ceil(mn->num);
    if (emn)
        lo = fmax(lo, floor(emn->num) + 1);
    if (mx)
        hi = floor(mx->num);
    if (emx)
        hi = fmin(hi, ceil(emx->num) - 1);
    if (lo < -big || hi > big || lo > hi)
        return sfail(c, SEER_ERR_UNSUPPORTED,
                     "schema: numeric bounds hold no integer in range (|x| < 1e15)%s", NULL);
    const bool lo_set = mn || emn, hi_set = mx || emx;
    /* fractions are added only where they cannot cross a bound: integer bounds >= 0 */
    const bool frac = number && lo_set && hi_set && lo >= 0 && !emx && !emn && mn->num == lo &&
                      mx->num == hi;
    seer_gbuf_printf(&c->defs, "r%d ::= ", id);
    bool first = true;
    if (lo < 0) {
        const long long nhi = (long long)-lo, nlo = hi < 0 ? (long long)-hi : 1;
        seer_gbuf_puts(&c->defs, "\"-\" ");
        range_nat(&c->defs, nlo, lo_set ? nhi : -1);
        first = false;
    }
    if (hi >= 0) {
        if (!first)
            seer_gbuf_puts(&c->defs, " | ");
        if (frac && hi > lo) {
            range_nat(&c->defs, (long long)lo, (long long)hi - 1);
            seer_gbuf_printf(&c->defs, " (\".\" [0-9]{1,15})? | \"%lld\" (\".\" \"0\"{1,15})?", (long long)hi);
        } else {
            range_nat(&c->defs, lo < 0 ? 0 : (long long)lo, hi_set ? (long long)hi : -1);
        }
    }
    seer_gbuf_puts(&c->defs, "\n");
    return true;
}

static bool gen_object(sc *c, const sj *s, int id) {
    const sj *props = seer_json_get(s, "properties"), *req = seer_json_get(s, "required");
    const sj *addl = seer_json_get(s, "additionalProperties");
    if ((props && props->type != SJ_OBJ) || (req && req->type != SJ_ARR))
        return sfail(c, SEER_ERR_INVALID_ARG, "schema: bad properties or required%s", NULL);
    if ((!props || props->n == 0) && req && req->n > 0)
        return sfail(c, SEER_ERR_UNSUPPORTED, "schema: required properties with no properties%s", NULL);
    if (!props || props->n == 0) {
        if (addl && addl->type == SJ_OBJ) { /* a map to values of one schema */
            int v;
            if (!gen(c, addl, &v))
                return false;
            seer_gbuf_printf(&c->defs,
                             "r%d ::= \"{\" ws (jstring ws \":\" ws r%d ws (\",\" ws jstring ws \":\" ws "
                             "r%d ws)*)? \"}\"\n", id, v, v);
        } else if (addl && addl->type == SJ_BOOL && !addl->b) {
            seer_gbuf_printf(&c->defs, "r%d ::= \"{\" ws \"}\"\n", id);
        } else {
            seer_gbuf_printf(&c->defs, "r%d ::= jobject\n", id);
        }
        return true;
    }
    for (int i = 0; req && i < req->n; i++) {
        if (req->items[i]->type != SJ_STR)
            return sfail(c, SEER_ERR_INVALID_ARG, "schema: required must list strings%s", NULL);
        if (!seer_json_get(props, req->items[i]->raw))
            return sfail(c, SEER_ERR_UNSUPPORTED, "schema: required property '%s' is not in properties",
                         req->items[i]->raw);
    }
    const int n = props->n;
    int *val = malloc((size_t)n * sizeof *val);
    if (!val)
        return sfail(c, SEER_ERR_OOM, "schema: out of memory%s", NULL);
    for (int i = 0; i < n; i++)
        if (!gen(c, props->items[i], &val[i])) {
            free(val);
            return false;
        }
    /* A_i: properties i.. with none written yet; B_i: with one written (a comma first). */
    const int base = c->n_rules;
    c->n_rules += 2 * (n + 1);
    for (int i = 0; i <= n; i++) {
        const int a = base + 2 * i, bb = a + 1;
        if (i == n) {
            seer_gbuf_printf(&c->defs, "r%d ::= \"\"\nr%d ::= \"\"\n", a, bb);
            continue;
        }
        bool required = false;
        for (int k = 0; req && k < req->n; k++)
            required |= strcmp(req->items[k]->raw, props->keys[i]) == 0;
        seer_gbuf t = {0};
        sj key = {.type = SJ_STR, .raw = props->keys[i], .raw_len = props->key_lens[i]};
        write_json(&t, &key, 0);
        seer_gbuf_printf(&c->defs, "r%d ::= ", a);
        seer_gbuf_literal(&c->defs, t.s ? t.s : "", t.n);
        seer_gbuf_printf(&c->defs, " ws \":\" ws r%d ws r%d%s", val[i], base + 2 * (i + 1) + 1,
                         required ? "\n" : "");
        if (!required)
            seer_gbuf_printf(&c->defs, " | r%d\n", base + 2 * (i + 1));
        seer_gbuf_printf(&c->defs, "r%d ::= \",\" ws ", bb);
        seer_gbuf_literal(&c->defs, t.s ? t.s : "", t.n);
        seer_gbuf_printf(&c->defs, " ws \":\" ws r%d ws r%d%s", val[i], base + 2 * (i + 1) + 1,
                         required ? "\n" : "");
        if (!required)
            seer_gbuf_printf(&c->defs, " | r%d\n", base + 2 * (i + 1) + 1);
        if (t.oom)
            c->defs.oom = true;
        free(t.s);
    }
    free(val);
    seer_gbuf_printf(&c->defs, "r%d ::= \"{\" ws r%d \"}\"\n", id, base);
    return c->n_rules <= SC_MAX_RULES || sfail(c, SEER_ERR_INVALID_ARG, "schema: too large%s", NULL);
}

static bool gen_array(sc *c, const sj *s, int id) {
    long lo, hi;
    if (!get_count(c, s, "minItems", 0, &lo) || !get_count(c, s, "maxItems", -1, &hi))
        return false;
    if (hi >= 0 && hi < lo)
        return sfail(c, SEER_ERR_INVALID_ARG, "schema: maxItems below minItems%s", NULL);
    const sj *items = seer_json_get(s, "items");
    int v = -1;
    if (items && !gen(c, items, &v))
        return false;
    char item[24];
    if (v >= 0)
        snprintf(item, sizeof item, "r%d", v);
    else
        snprintf(item, sizeof item, "jvalue");
    if (hi == 0) {
        seer_gbuf_printf(&c->defs, "r%d ::= \"[\" ws \"]\"\n", id);
        return true;
    }
    seer_gbuf_printf(&c->defs, "r%d ::= \"[\" ws %s%s ws (\",\" ws %s ws)", id, lo == 0 ? "(" : "", item, item);
    repeat_suffix(c, lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
    seer_gbuf_printf(&c->defs, "%s \"]\"\n", lo == 0 ? ")?" : "");
    return true;
}

static bool gen_ref(sc *c, const sj *ref, int *id) {
    if (ref->type != SJ_STR)
        return sfail(c, SEER_ERR_INVALID_ARG, "schema: $ref must be a string%s", NULL);
    for (int i = 0; i < c->n_refs; i++)
        if (strcmp(c->ref_keys[i], ref->raw) == 0) {
            *id = c->ref_ids[i];
            return true;
        }
    const char *r = ref->raw, *name = NULL;
    const sj *defs = NULL;
    if (strncmp(r, "#/$defs/", 8) == 0)
        defs = seer_json_get(c->root, "$defs"), name = r + 8;
    else if (strncmp(r, "#/definitions/", 14) == 0)
        defs = seer_json_get(c->root, "definitions"), name = r + 14;
    else if (strcmp(r, "#") == 0)
        defs = NULL, name = NULL;
    else
        return sfail(c, SEER_ERR_UNSUPPORTED, "schema: $ref '%s' (only #, #/$defs/... and #/definitions/...)", r);
    const sj *target = name ? seer_json_get(defs, name) : c->root;
    if (!target)
        return sfail(c, SEER_ERR_INVALID_ARG, "schema: $ref '%s' names no definition", r);
    const int rid = new_id(c);
    if (rid < 0 || c->n_refs >= SC_MAX_RULES)
        return false;
    const char **k = realloc(c->ref_keys, ((size_t)c->n_refs + 1) * sizeof *k);
    if (k)
        c->ref_keys = k;
    int *ids = k ? realloc(c->ref_ids, ((size_t)c->n_refs + 1) * sizeof *ids) : NULL;
    if (!ids)
        return sfail(c, SEER_ERR_OOM, "schema: out of memory%s", NULL);
    c->ref_ids = ids;
    c->ref_keys[c->n_refs] = ref->raw;
    c->ref_ids[c->n_refs++] = rid;
    int body;
    if (!gen(c, target, &body))
        return false;
    seer_gbuf_printf(&c->defs, "r%d ::= r%d\n", rid, body);
    *id = rid;
    return true;
}

/* One schema of a given type name (or all of s's alternatives when type is absent). */
static bool gen_typed(sc *c, const sj *s, const char *type, int id) {
    if (strcmp(type, "string") == 0)
        return gen_string(c, s, id);
    if (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0)
        return gen_integer(c, s, id, type[0] == 'n');
    if (strcmp(type, "boolean") == 0)
        return seer_gbuf_printf(&c->defs, "r%d ::= jbool\n", id), true;
    if (strcmp(type, "null") == 0)
        return seer_gbuf_printf(&c->defs, "r%d ::= jnull\n", id), true;
    if (strcmp(type, "object") == 0)
        return gen_object(c, s, id);
    if (strcmp(type, "array") == 0)
        return gen_array(c, s, id);
    return sfail(c, SEER_ERR_INVALID_ARG, "schema: unknown type '%s'", type);
}

static bool gen_alts(sc *c, const sj *list, int id, const char *what) {
    if (list->type != SJ_ARR || list->n == 0)
        return sfail(c, SEER_ERR_INVALID_ARG, "schema: '%s' must be a non-empty array", what);
    int *ids = malloc((size_t)list->n * sizeof *ids);
    if (!ids)
        return sfail(c, SEER_ERR_OOM, "schema: out of memory%s", NULL);
    for (int i = 0; i < list->n; i++)
        if (!gen(c, list->items[i], &ids[i])) {
            free(ids);
            return false;
        }
    seer_gbuf_printf(&c->defs, "r%d ::= ", id);
    for (int i = 0; i < list->n; i++)
        seer_gbuf_printf(&c->defs, "%sr%d", i ? " | " : "", ids[i]);
    seer_gbuf_puts(&c->defs, "\n");
    free(ids);
    return true;
}

static bool gen(sc *c, const sj *s, int *id) {
    if (++c->depth > SJ_MAX_DEPTH) {
        c->depth--;
        return sfail(c, SEER_ERR_INVALID_ARG, "schema: nested too deep%s", NULL);
    }
    bool ok = true;
    *id = -1;
    if (s->type == SJ_BOOL) {
        if (!s->b)
            ok = sfail(c, SEER_ERR_UNSUPPORTED, "schema: 'false' admits no value%s", NULL);
        else if ((*id = new_id(c)) >= 0)
            seer_gbuf_printf(&c->defs, "r%d ::= jvalue\n", *id);
        c->depth--;
        return ok && *id >= 0;
    }
    if (s->type != SJ_OBJ) {
        c->depth--;
        return sfail(c, SEER_ERR_INVALID_ARG, "schema: a schema must be an object or a boolean%s", NULL);
    }
    const sj *ref = seer_json_get(s, "$ref"), *cst = seer_json_get(s, "const"), *en = seer_json_get(s, "enum");
    const sj *any = seer_json_get(s, "anyOf"), *one = seer_json_get(s, "oneOf"), *all = seer_json_get(s, "allOf");
    const sj *type = seer_json_get(s, "type");
    ok = check_keywords(c, s);
    if (ok && ref) {
        ok = gen_ref(c, ref, id);
    } else if (ok && (*id = new_id(c)) < 0) {
        ok = false;
    } else if (ok && cst) {
        seer_gbuf_printf(&c->defs, "r%d ::= ", *id);
        lit_json(c, cst);
        seer_gbuf_puts(&c->defs, "\n");
    } else if (ok && en) {
        if (en->type != SJ_ARR || en->n == 0)
            ok = sfail(c, SEER_ERR_INVALID_ARG, "schema: enum must be a non-empty array%s", NULL);
        seer_gbuf_printf(&c->defs, "r%d ::= ", *id);
        for (int i = 0; ok && i < en->n; i++) {
            if (i)
                seer_gbuf_puts(&c->defs, " | ");
            lit_json(c, en->items[i]);
        }
        seer_gbuf_puts(&c->defs, "\n");
    } else if (ok && (any || one)) {
        ok = gen_alts(c, any ? any : one, *id, any ? "anyOf" : "oneOf");
    } else if (ok && all) {
        if (all->type != SJ_ARR || all->n != 1)
            ok = sfail(c, SEER_ERR_UNSUPPORTED, "schema: allOf with more than one schema%s", NULL);
        int sub;
        if (ok && (ok = gen(c, all->items[0], &sub)))
            seer_gbuf_printf(&c->defs, "r%d ::= r%d\n", *id, sub);
    } else if (ok && type && type->type == SJ_ARR) {
        seer_gbuf alts = {0};
        for (int i = 0; ok && i < type->n; i++) {
            const int sub = new_id(c);
            ok = sub >= 0 && type->items[i]->type == SJ_STR && gen_typed(c, s, type->items[i]->raw, sub);
            seer_gbuf_printf(&alts, "%sr%d", i ? " | " : "", sub);
        }
        if (ok && type->n == 0)
            ok = sfail(c, SEER_ERR_INVALID_ARG, "schema: empty type list%s", NULL);
        if (ok)
            seer_gbuf_printf(&c->defs, "r%d ::= %s\n", *id, alts.s);
        if (alts.oom)
            c->defs.oom = true;
        free(alts.s);
    } else if (ok && type) {
        ok = type->type == SJ_STR ? gen_typed(c, s, type->raw, *id)
                                  : sfail(c, SEER_ERR_INVALID_ARG, "schema: type must be a string%s", NULL);
    } else if (ok) { /* no type: infer from the keywords, else any value */
        const char *t = seer_json_get(s, "properties") ? "object"
                        : seer_json_get(s, "items")    ? "array"
                        : seer_json_get(s, "pattern") || seer_json_get(s, "format") ? "string"
                                                                       : NULL;
        if (t)
            ok = gen_typed(c, s, t, *id);
        else
            seer_gbuf_printf(&c->defs, "r%d ::= jvalue\n", *id);
    }
    c->depth--;
    return ok;
}

seer_status seer_schema_to_grammar(const char *schema, size_t len, char **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    if (len > SEER_G_MAX_TEXT)
        return seer_err(SEER_ERR_INVALID_ARG, "schema: longer than %d bytes", SEER_G_MAX_TEXT);
    sj *root = NULL;
    SEER_TRY(seer_json_parse(schema, len, &root));
    sc c = {.root = root, .st = SEER_OK};
    int id = -1;
    const bool ok = gen(&c, root, &id);
    seer_status st = c.st;
    if (ok && !c.defs.oom) {
        seer_gbuf g = {0};
        seer_gbuf_printf(&g, "root ::= r%d\n", id);
        seer_gbuf_puts(&g, base_rules);
        seer_gbuf_put(&g, c.defs.s ? c.defs.s : "", c.defs.n);
        if (g.oom || g.n > SEER_G_MAX_TEXT) {
            free(g.s);
            st = seer_err(SEER_ERR_INVALID_ARG, "schema: its grammar is too large");
        } else {
            *out = g.s;
            st = SEER_OK;
        }
    } else if (ok) {
        st = seer_err(SEER_ERR_INVALID_ARG, "schema: its grammar is too large");
    } else if (st == SEER_OK) {
        st = seer_err(SEER_ERR_INVALID_ARG, "schema: invalid");
    }
    free(c.defs.s);
    free(c.ref_keys);
    free(c.ref_ids);
    seer_json_free(root);
    return st;
}
