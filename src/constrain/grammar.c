/*
 * grammar.c: the GBNF-like grammar text -> compiled rules (grammar.h).
 *
 * Syntax (as llama.cpp's GBNF, over bytes):
 *   name ::= alternatives          a rule; names are [A-Za-z0-9_-]+, the start rule is root
 *   a b                            sequence          a | b     alternatives
 *   "text"                         literal bytes (escapes \n \r \t \\ \" \xNN \uXXXX)
 *   [a-z_] [^"\\]                  byte classes; a class holds ASCII characters and \xNN
 *                                  bytes; a negated class matches one ASCII character
 *                                  outside it or one well-formed UTF-8 multi-byte character
 *   .                              any one UTF-8 character
 *   ( ... )                        group
 *   x? x* x+ x{m} x{m,} x{m,n}     repetition (m, n <= SEER_G_MAX_REPEAT)
 *   # comment                      to the end of the line
 * A rule ends where the next "name ::=" begins. Left recursion (a rule that can reach itself
 * without consuming a byte, which includes repeating something that can be empty) is
 * refused, so that expanding a stack always ends.
 *
 * Not for: matching (match.c), the vocabulary (mask.c), JSON schema (schema.c).
 */
#include "constrain/grammar.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *k;
    uint32_t *v;
    int n, cap;
} evec;

typedef struct {
    const char *s;
    size_t n, i;
    evec *rules;
    char **names; /* NULL for rules made by the compiler */
    bool *defined;
    int n_rules, cap_rules;
    uint8_t (*sets)[32];
    int n_sets, cap_sets;
    long n_elems;
    int utf8_rule, any_rule, nest;
    seer_status st;
} gb;

static bool fail(gb *b, seer_status st, const char *fmt, const char *arg) {
    if (b->st == SEER_OK) {
        /* the line of the error helps whoever wrote the grammar */
        int line = 1;
        for (size_t j = 0; j < b->i && j < b->n; j++)
            line += b->s[j] == '\n';
        char msg[160];
        snprintf(msg, sizeof msg, fmt, arg ? arg : "");
        b->st = seer_err(st, "grammar: line %d: %s", line, msg);
    }
    return false;
}

static bool ev_push(gb *b, evec *e, uint8_t k, uint32_t v) {
    if (++b->n_elems > SEER_G_MAX_ELEMS)
        return fail(b, SEER_ERR_INVALID_ARG, "grammar too large (more than %s elements)", "1048576");
    if (e->n == e->cap) {
        const int cap = e->cap ? e->cap * 2 : 8;
        uint8_t *k2 = realloc(e->k, (size_t)cap);
        if (!k2)
            return fail(b, SEER_ERR_OOM, "out of memory%s", NULL);
        e->k = k2;
        uint32_t *v2 = realloc(e->v, (size_t)cap * sizeof *v2);
        if (!v2)
            return fail(b, SEER_ERR_OOM, "out of memory%s", NULL);
        e->v = v2;
        e->cap = cap;
    }
    e->k[e->n] = k;
    e->v[e->n++] = v;
    return true;
}

static bool ev_append(gb *b, evec *dst, const evec *src) {
    for (int i = 0; i < src->n; i++)
        if (!ev_push(b, dst, src->k[i], src->v[i]))
            return false;
    return true;
}

static void ev_free(evec *e) {
    free(e->k);
    free(e->v);
    memset(e, 0, sizeof *e);
}

/* A new rule (named or not); -1 on failure. */
static int new_rule(gb *b, const char *name, size_t nlen) {
    if (b->n_rules >= SEER_G_MAX_RULES) {
        fail(b, SEER_ERR_INVALID_ARG, "too many rules (more than %s)", "65536");
        return -1;
    }
    if (b->n_rules == b->cap_rules) {
        const int cap = b->cap_rules ? b->cap_rules * 2 : 16;
        evec *r = realloc(b->rules, (size_t)cap * sizeof *r);
        if (r)
            b->rules = r;
        char **nm = realloc(b->names, (size_t)cap * sizeof *nm);
        if (nm)
            b->names = nm;
        bool *d = realloc(b->defined, (size_t)cap * sizeof *d);
        if (d)
            b->defined = d;
        if (!r || !nm || !d) {
            fail(b, SEER_ERR_OOM, "out of memory%s", NULL);
            return -1;
        }
        b->cap_rules = cap;
    }
    const int id = b->n_rules;
    memset(&b->rules[id], 0, sizeof b->rules[id]);
    b->names[id] = NULL;
    b->defined[id] = name == NULL;
    if (name) {
        b->names[id] = malloc(nlen + 1);
        if (!b->names[id]) {
            fail(b, SEER_ERR_OOM, "out of memory%s", NULL);
            return -1;
        }
        memcpy(b->names[id], name, nlen);
        b->names[id][nlen] = 0;
    }
    b->n_rules++;
    return id;
}

static int find_rule(gb *b, const char *name, size_t nlen) {
    for (int i = 0; i < b->n_rules; i++)
        if (b->names[i] && strlen(b->names[i]) == nlen && memcmp(b->names[i], name, nlen) == 0)
            return i;
    return new_rule(b, name, nlen);
}

static int add_set(gb *b, const uint8_t set[32]) {
    for (int i = 0; i < b->n_sets; i++)
        if (memcmp(b->sets[i], set, 32) == 0)
            return i;
    if (b->n_sets == b->cap_sets) {
        const int cap = b->cap_sets ? b->cap_sets * 2 : 16;
        uint8_t(*s)[32] = realloc(b->sets, (size_t)cap * 32);
        if (!s) {
            fail(b, SEER_ERR_OOM, "out of memory%s", NULL);
            return -1;
        }
        b->sets = s;
        b->cap_sets = cap;
    }
    memcpy(b->sets[b->n_sets], set, 32);
    return b->n_sets++;
}

static void set_range(uint8_t set[32], unsigned lo, unsigned hi) {
    for (unsigned c = lo; c <= hi && c < 256; c++)
        set[c >> 3] |= (uint8_t)(1u << (c & 7));
}

static bool push_range(gb *b, evec *e, unsigned lo, unsigned hi) {
    uint8_t set[32] = {0};
    set_range(set, lo, hi);
    const int id = add_set(b, set);
    return id >= 0 && ev_push(b, e, SEER_GE_SET, (uint32_t)id);
}

/* The rule for one well-formed UTF-8 multi-byte character (RFC 3629's table). */
static int utf8_rule(gb *b) {
    if (b->utf8_rule >= 0)
        return b->utf8_rule;
    static const uint8_t tab[8][4][2] = {
        {{0xC2, 0xDF}, {0x80, 0xBF}},
        {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
        {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
        {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
    };
    const int r = new_rule(b, NULL, 0);
    if (r < 0)
        return -1;
    for (int a = 0; a < 8; a++) {
        for (int j = 0; j < 4 && tab[a][j][0]; j++)
            if (!push_range(b, &b->rules[r], tab[a][j][0], tab[a][j][1]))
                return -1;
        if (!ev_push(b, &b->rules[r], SEER_GE_END, 0))
            return -1;
    }
    return b->utf8_rule = r;
}

/* ---- lexing ---------------------------------------------------------------------------- */

static void skip_ws(gb *b) {
    while (b->i < b->n) {
        const char c = b->s[b->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            b->i++;
        else if (c == '#')
            while (b->i < b->n && b->s[b->i] != '\n')
                b->i++;
        else
            break;
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static size_t name_len(const gb *b, size_t at) {
    size_t j = at;
    while (j < b->n && is_name_char(b->s[j]))
        j++;
    return j - at;
}

/* Whether a "name ::=" starts at the current position. */
static bool at_rule_start(const gb *b) {
    const size_t nl = name_len(b, b->i);
    if (nl == 0)
        return false;
    size_t j = b->i + nl;
    while (j < b->n && (b->s[j] == ' ' || b->s[j] == '\t' || b->s[j] == '\n' || b->s[j] == '\r'))
        j++;
    return j + 3 <= b->n && memcmp(b->s + j, "::=", 3) == 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class at b->i: *cp its value (a byte for \xNN with *is_byte,
 * else a code point: an ASCII character, a \u escape or a raw UTF-8 byte). */
static bool read_char(gb *b, unsigned *cp, bool *is_byte) {
    *is_byte = false;
    if (b->i >= b->n)
        return fail(b, SEER_ERR_INVALID_ARG, "unexpected end of grammar%s", NULL);
    const char c = b->s[b->i++];
    if (c != '\\') {
        *cp = (uint8_t)c;
        *is_byte = (uint8_t)c >= 0x80; /* raw UTF-8 in the text stands for its own bytes */
        return true;
    }
    if (b->i >= b->n)
        return fail(b, SEER_ERR_INVALID_ARG, "unexpected end of grammar%s", NULL);
    const char e = b->s[b->i++];
    int digits = 0;
    switch (e) {
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case 'x': digits = 2; *is_byte = true; break;
    case 'u': digits = 4; break;
    default:
        if ((uint8_t)e < 0x20 || (uint8_t)e >= 0x7F)
            return fail(b, SEER_ERR_INVALID_ARG, "bad escape%s", NULL);
        *cp = (uint8_t)e; /* \\ \" \] \[ \- \^ and any other printable character */
        return true;
    }
    unsigned v = 0;
    for (int k = 0; k < digits; k++) {
        const int h = b->i < b->n ? hexval(b->s[b->i]) : -1;
        if (h < 0)
            return fail(b, SEER_ERR_INVALID_ARG, "bad \\x or \\u escape%s", NULL);
        v = v * 16 + (unsigned)h;
        b->i++;
    }
    *cp = v;
    return true;
}

static bool push_codepoint(gb *b, evec *e, unsigned cp, bool is_byte) {
    if (is_byte || cp < 0x80)
        return push_range(b, e, cp, cp);
    uint8_t u[4];
    int n;
    if (cp < 0x800) {
        u[0] = (uint8_t)(0xC0 | cp >> 6); u[1] = (uint8_t)(0x80 | (cp & 63)); n = 2;
    } else {
        u[0] = (uint8_t)(0xE0 | cp >> 12); u[1] = (uint8_t)(0x80 | ((cp >> 6) & 63));
        u[2] = (uint8_t)(0x80 | (cp & 63)); n = 3;
    }
    for (int k = 0; k < n; k++)
        if (!push_range(b, e, u[k], u[k]))
            return false;
    return true;
}

static bool parse_alts(gb *b, evec *out);

static bool parse_class(gb *b, evec *out) {
    bool neg = false;
    if (b->i < b->n && b->s[b->i] == '^') {
        neg = true;
        b->i++;
    }
    uint8_t set[32] = {0};
    for (;;) {
        if (b->i >= b->n)
            return fail(b, SEER_ERR_INVALID_ARG, "unterminated character class%s", NULL);
        if (b->s[b->i] == ']') {
            b->i++;
            break;
        }
        unsigned lo, hi;
        bool byte_lo, byte_hi;
        if ((uint8_t)b->s[b->i] >= 0x80)
            return fail(b, SEER_ERR_UNSUPPORTED,
                        "non-ASCII characters in a class are not supported (use \\xNN bytes or "
                        "alternatives)%s", NULL);
        if (!read_char(b, &lo, &byte_lo))
            return false;
        hi = lo;
        byte_hi = byte_lo;
        if (b->i + 1 < b->n && b->s[b->i] == '-' && b->s[b->i + 1] != ']') {
            b->i++;
            if ((uint8_t)b->s[b->i] >= 0x80)
                return fail(b, SEER_ERR_UNSUPPORTED, "non-ASCII characters in a class are not supported%s", NULL);
            if (!read_char(b, &hi, &byte_hi))
                return false;
        }
        if ((lo >= 0x80 && !byte_lo) || (hi >= 0x80 && !byte_hi) || lo > 0xFF || hi > 0xFF)
            return fail(b, SEER_ERR_UNSUPPORTED,
                        "non-ASCII characters in a class are not supported (use \\xNN bytes or "
                        "alternatives)%s", NULL);
        if (hi < lo)
            return fail(b, SEER_ERR_INVALID_ARG, "empty range in a class%s", NULL);
        set_range(set, lo, hi);
    }
    if (!neg) {
        const int id = add_set(b, set);
        return id >= 0 && ev_push(b, out, SEER_GE_SET, (uint32_t)id);
    }
    /* one ASCII character outside the class, or one multi-byte UTF-8 character */
    uint8_t comp[32] = {0};
    for (unsigned c = 0; c < 0x80; c++)
        if (!(set[c >> 3] >> (c & 7) & 1))
            set_range(comp, c, c);
    const int u = utf8_rule(b);
    const int id = add_set(b, comp);
    const int r = u < 0 || id < 0 ? -1 : new_rule(b, NULL, 0);
    if (r < 0)
        return false;
    evec *e = &b->rules[r];
    return ev_push(b, e, SEER_GE_SET, (uint32_t)id) && ev_push(b, e, SEER_GE_END, 0) &&
           ev_push(b, e, SEER_GE_REF, (uint32_t)u) && ev_push(b, e, SEER_GE_END, 0) &&
           ev_push(b, out, SEER_GE_REF, (uint32_t)r);
}

static bool parse_uint(gb *b, int *v) {
    if (b->i >= b->n || b->s[b->i] < '0' || b->s[b->i] > '9')
        return fail(b, SEER_ERR_INVALID_ARG, "expected a number in {m,n}%s", NULL);
    long x = 0;
    while (b->i < b->n && b->s[b->i] >= '0' && b->s[b->i] <= '9') {
        x = x * 10 + (b->s[b->i++] - '0');
        if (x > SEER_G_MAX_REPEAT)
            return fail(b, SEER_ERR_INVALID_ARG, "repetition count above %s", "1000");
    }
    *v = (int)x;
    return true;
}

/* x* as a new rule R ::= x R | (empty); returns R or -1. */
static int star_rule(gb *b, const evec *unit) {
    const int r = new_rule(b, NULL, 0);
    if (r < 0 || !ev_append(b, &b->rules[r], unit) || !ev_push(b, &b->rules[r], SEER_GE_REF, (uint32_t)r) ||
        !ev_push(b, &b->rules[r], SEER_GE_END, 0) || !ev_push(b, &b->rules[r], SEER_GE_END, 0))
        return -1;
    return r;
}

/* Applies a repetition {lo, hi} (hi < 0: unbounded) to unit, appending to out. */
static bool repeat(gb *b, evec *unit, int lo, int hi, evec *out) {
    if (unit->n != 1) { /* a sequence is repeated through a rule of its own */
        const int r = new_rule(b, NULL, 0);
        if (r < 0 || !ev_append(b, &b->rules[r], unit) || !ev_push(b, &b->rules[r], SEER_GE_END, 0))
            return false;
        unit->n = 0;
        if (!ev_push(b, unit, SEER_GE_REF, (uint32_t)r))
            return false;
    }
    for (int k = 0; k < lo; k++)
        if (!ev_append(b, out, unit))
            return false;
    if (hi < 0) {
        const int r = star_rule(b, unit);
        return r >= 0 && ev_push(b, out, SEER_GE_REF, (uint32_t)r);
    }
    int prev = -1; /* O_k ::= x O_{k-1} | (empty) */
    for (int k = lo; k < hi; k++) {
        const int r = new_rule(b, NULL, 0);
        if (r < 0 || !ev_append(b, &b->rules[r], unit) ||
            (prev >= 0 && !ev_push(b, &b->rules[r], SEER_GE_REF, (uint32_t)prev)) ||
            !ev_push(b, &b->rules[r], SEER_GE_END, 0) || !ev_push(b, &b->rules[r], SEER_GE_END, 0))
            return false;
        prev = r;
    }
    return prev < 0 || ev_push(b, out, SEER_GE_REF, (uint32_t)prev);
}

static bool parse_item(gb *b, evec *out) {
    evec unit = {0};
    bool ok = true;
    const char c = b->s[b->i];
    if (c == '"') {
        b->i++;
        for (;;) {
            if (b->i >= b->n) {
                ok = fail(b, SEER_ERR_INVALID_ARG, "unterminated string%s", NULL);
                break;
            }
            if (b->s[b->i] == '"') {
                b->i++;
                break;
            }
            unsigned cp;
            bool byte;
            if (!(ok = read_char(b, &cp, &byte) && push_codepoint(b, &unit, cp, byte)))
                break;
        }
    } else if (c == '[') {
        b->i++;
        ok = parse_class(b, &unit);
    } else if (c == '.') {
        b->i++;
        if (b->any_rule < 0) {
            const int u = utf8_rule(b);
            const int r = u < 0 ? -1 : new_rule(b, NULL, 0);
            ok = r >= 0 && push_range(b, &b->rules[r], 0, 0x7F) && ev_push(b, &b->rules[r], SEER_GE_END, 0) &&
                 ev_push(b, &b->rules[r], SEER_GE_REF, (uint32_t)u) && ev_push(b, &b->rules[r], SEER_GE_END, 0);
            if (ok)
                b->any_rule = r;
        }
        ok = ok && ev_push(b, &unit, SEER_GE_REF, (uint32_t)b->any_rule);
    } else if (c == '(') {
        b->i++;
        if (++b->nest > 64) {
            ok = fail(b, SEER_ERR_INVALID_ARG, "groups nested too deep%s", NULL);
        } else {
            const int r = new_rule(b, NULL, 0);
            evec tmp = {0};
            ok = r >= 0 && parse_alts(b, &tmp);
            if (ok && (b->i >= b->n || b->s[b->i] != ')'))
                ok = fail(b, SEER_ERR_INVALID_ARG, "expected ')'%s", NULL);
            if (ok) {
                b->i++;
                b->rules[r] = tmp;
                memset(&tmp, 0, sizeof tmp);
                ok = ev_push(b, &unit, SEER_GE_REF, (uint32_t)r);
            }
            ev_free(&tmp);
        }
        b->nest--;
    } else if (is_name_char(c)) {
        const size_t nl = name_len(b, b->i);
        const int r = find_rule(b, b->s + b->i, nl);
        b->i += nl;
        ok = r >= 0 && ev_push(b, &unit, SEER_GE_REF, (uint32_t)r);
    } else {
        char ch[2] = {c, 0};
        ok = fail(b, SEER_ERR_INVALID_ARG, "unexpected character '%s'", (uint8_t)c >= 0x20 && (uint8_t)c < 0x7F ? ch : "?");
    }
    if (ok && b->i < b->n && (b->s[b->i] == '*' || b->s[b->i] == '+' || b->s[b->i] == '?' || b->s[b->i] == '{')) {
        const char q = b->s[b->i++];
        int lo = 0, hi = -1;
        if (q == '+')
            lo = 1;
        else if (q == '?')
            hi = 1;
        else if (q == '{') {
            ok = parse_uint(b, &lo);
            hi = lo;
            if (ok && b->i < b->n && b->s[b->i] == ',') {
                b->i++;
                hi = -1;
                if (b->i < b->n && b->s[b->i] != '}')
                    ok = parse_uint(b, &hi);
            }
            if (ok && (b->i >= b->n || b->s[b->i] != '}'))
                ok = fail(b, SEER_ERR_INVALID_ARG, "expected '}'%s", NULL);
            b->i++;
            if (ok && hi >= 0 && hi < lo)
                ok = fail(b, SEER_ERR_INVALID_ARG, "bad repetition {m,n} with n < m%s", NULL);
        }
        ok = ok && repeat(b, &unit, lo, hi, out);
    } else if (ok) {
        ok = ev_append(b, out, &unit);
    }
    ev_free(&unit);
    return ok;
}

static bool parse_alts(gb *b, evec *out) {
    for (;;) {
        for (;;) { /* one sequence */
            skip_ws(b);
            if (b->i >= b->n || b->s[b->i] == '|' || b->s[b->i] == ')' || at_rule_start(b))
                break;
            if (!parse_item(b, out))
                return false;
        }
        if (!ev_push(b, out, SEER_GE_END, 0))
            return false;
        if (b->i < b->n && b->s[b->i] == '|') {
            b->i++;
            continue;
        }
        return true;
    }
}

/* ---- checks and flattening ------------------------------------------------------------- */

/* Refuses left recursion: a rule reaching itself through leftmost positions that can be empty. */
static bool check_left_recursion(gb *b) {
    const int n = b->n_rules;
    bool *nullable = calloc((size_t)n + 1, 1);
    uint8_t *color = calloc((size_t)n + 1, 1);
    int *stk = malloc(((size_t)n + 1) * 2 * sizeof *stk);
    bool ok = nullable && color && stk;
    if (!ok)
        fail(b, SEER_ERR_OOM, "out of memory%s", NULL);
    for (bool changed = ok; changed;) { /* fixpoint over rules */
        changed = false;
        for (int r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            const evec *e = &b->rules[r];
            bool all = true;
            for (int j = 0; j < e->n; j++) {
                if (e->k[j] == SEER_GE_END) {
                    if (all) {
                        nullable[r] = changed = true;
                        break;
                    }
                    all = true;
                } else if (e->k[j] == SEER_GE_SET || !nullable[e->v[j]])
                    all = false;
            }
        }
    }
    /* iterative DFS over "r may start with s" edges; grey = on the current path */
    for (int root = 0; ok && root < n; root++) {
        if (color[root])
            continue;
        int sp = 0;
        stk[sp++] = root;
        stk[sp++] = 0;
        color[root] = 1;
        while (ok && sp > 0) {
            const int r = stk[sp - 2];
            int j = stk[sp - 1];
            const evec *e = &b->rules[r];
            int next = -1;
            bool lead = true; /* j is at a leftmost-reachable position */
            for (int t = 0; t < j; t++) { /* recompute the leading state up to j */
                if (e->k[t] == SEER_GE_END)
                    lead = true;
                else if (e->k[t] == SEER_GE_SET || !nullable[e->v[t]])
                    lead = false;
            }
            for (; j < e->n; j++) {
                if (e->k[j] == SEER_GE_END) {
                    lead = true;
                    continue;
                }
                if (lead && e->k[j] == SEER_GE_REF) {
                    const int s = (int)e->v[j];
                    if (color[s] == 1) {
                        ok = fail(b, SEER_ERR_INVALID_ARG,
                                  "left recursion through rule '%s' (or a repetition of something "
                                  "that can be empty)",
                                  b->names[s] ? b->names[s] : (b->names[r] ? b->names[r] : "(group)"));
                        break;
                    }
                    if (color[s] == 0) {
                        next = s;
                        j++;
                        break;
                    }
                }
                if (e->k[j] == SEER_GE_SET || !nullable[e->v[j]])
                    lead = false;
            }
            if (!ok)
                break;
            stk[sp - 1] = j;
            if (next >= 0) {
                color[next] = 1;
                stk[sp++] = next;
                stk[sp++] = 0;
            } else if (j >= e->n) {
                color[r] = 2;
                sp -= 2;
            }
        }
    }
    free(nullable);
    free(color);
    free(stk);
    return ok;
}

static seer_status finish(gb *b, seer_grammar **out) {
    int root = -1;
    for (int r = 0; r < b->n_rules; r++) {
        if (!b->defined[r])
            return fail(b, SEER_ERR_INVALID_ARG, "rule '%s' is used but not defined", b->names[r]), b->st;
        if (b->names[r] && strcmp(b->names[r], "root") == 0)
            root = r;
    }
    if (root < 0)
        return fail(b, SEER_ERR_INVALID_ARG, "no rule named root%s", NULL), b->st;
    if (!check_left_recursion(b))
        return b->st;
    seer_grammar *g = calloc(1, sizeof *g);
    long n_alts = 0;
    for (int r = 0; r < b->n_rules; r++)
        for (int j = 0; j < b->rules[r].n; j++)
            n_alts += b->rules[r].k[j] == SEER_GE_END;
    if (g) {
        g->kind = malloc((size_t)b->n_elems + 1);
        g->val = malloc(((size_t)b->n_elems + 1) * sizeof *g->val);
        g->alt_off = malloc(((size_t)n_alts + 1) * sizeof *g->alt_off);
        g->rule_alt = malloc(((size_t)b->n_rules + 1) * sizeof *g->rule_alt);
        g->sets = malloc((size_t)(b->n_sets + 1) * 32);
    }
    if (!g || !g->kind || !g->val || !g->alt_off || !g->rule_alt || !g->sets) {
        seer_grammar_free(g);
        return fail(b, SEER_ERR_OOM, "out of memory%s", NULL), b->st;
    }
    if (b->n_sets)
        memcpy(g->sets, b->sets, (size_t)b->n_sets * 32);
    g->n_sets = b->n_sets;
    int pos = 0, a = 0;
    for (int r = 0; r < b->n_rules; r++) {
        g->rule_alt[r] = (uint32_t)a;
        bool start = true;
        for (int j = 0; j < b->rules[r].n; j++) {
            if (start)
                g->alt_off[a++] = (uint32_t)pos;
            g->kind[pos] = b->rules[r].k[j];
            g->val[pos++] = b->rules[r].v[j];
            start = b->rules[r].k[j] == SEER_GE_END;
        }
    }
    g->rule_alt[b->n_rules] = (uint32_t)a;
    g->kind[pos] = SEER_GE_END; /* a sentinel: pos + 1 of the last element is always valid */
    g->val[pos] = 0;
    g->n_elems = pos;
    g->n_rules = b->n_rules;
    g->root = root;
    *out = g;
    return SEER_OK;
}

seer_status seer_grammar_parse(const char *text, size_t len, seer_grammar **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    if (!text && len)
        return seer_err(SEER_ERR_INVALID_ARG, "grammar: text is NULL");
    if (len > SEER_G_MAX_TEXT)
        return seer_err(SEER_ERR_INVALID_ARG, "grammar: %zu bytes, more than the limit of %d", len,
                        SEER_G_MAX_TEXT);
    gb b = {.s = text, .n = len, .utf8_rule = -1, .any_rule = -1, .st = SEER_OK};
    for (;;) {
        skip_ws(&b);
        if (b.i >= b.n)
            break;
        const size_t nl = name_len(&b, b.i);
        if (!at_rule_start(&b)) {
            fail(&b, SEER_ERR_INVALID_ARG, "expected 'name ::='%s", NULL);
            break;
        }
        const int r = find_rule(&b, b.s + b.i, nl);
        if (r < 0)
            break;
        if (b.defined[r]) {
            fail(&b, SEER_ERR_INVALID_ARG, "rule '%s' defined twice", b.names[r]);
            break;
        }
        b.defined[r] = true;
        b.i += nl;
        skip_ws(&b);
        b.i += 3;
        evec tmp = {0};
        if (!parse_alts(&b, &tmp)) {
            ev_free(&tmp);
            break;
        }
        if (b.i < b.n && b.s[b.i] == ')') {
            ev_free(&tmp);
            fail(&b, SEER_ERR_INVALID_ARG, "unbalanced ')'%s", NULL);
            break;
        }
        ev_free(&b.rules[r]);
        b.rules[r] = tmp;
    }
    seer_status st = b.st == SEER_OK ? finish(&b, out) : b.st;
    for (int r = 0; r < b.n_rules; r++) {
        ev_free(&b.rules[r]);
        free(b.names[r]);
    }
    free(b.rules);
    free(b.names);
    free(b.defined);
    free(b.sets);
    return st;
}

void seer_grammar_free(seer_grammar *g) {
    if (!g)
        return;
    free(g->kind);
    free(g->val);
    free(g->sets);
    free(g->alt_off);
    free(g->rule_alt);
    free(g);
}
