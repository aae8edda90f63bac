/*
 * regex.c: regular expressions -> grammar expressions (grammar.c's syntax), for the regex
 * constraint and JSON schema's pattern.
 *
 * Covered: literals, ., [classes] with ranges, negation and \d \w \s inside, groups (...)
 * and (?:...), |, * + ? {m} {m,} {m,n} (a lazy ? after them is accepted and means the same
 * set of strings), the escapes \d \w \s \D \W \S \n \r \t \xNN and escaped punctuation,
 * ^ at the start and $ at the end.
 *
 * Not for: back-references, look-around, named groups, Unicode properties, non-ASCII in a
 * class, anchors elsewhere: SEER_ERR_UNSUPPORTED names what was found.
 *
 * In JSON mode the text matched is the inside of a JSON string: " and \ are written escaped,
 * classes leave out the characters JSON must escape, and "." is any JSON string character.
 */
#include "constrain/grammar.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n, i;
    seer_gbuf *o;
    bool json;
    int nest;
    seer_status st;
} rx;

static bool rfail(rx *r, seer_status st, const char *what) {
    if (r->st == SEER_OK)
        r->st = seer_err(st, "regex: %s at offset %zu", what, r->i);
    return false;
}

static void set_bit(uint8_t set[16], unsigned c) {
    if (c < 128)
        set[c >> 3] |= (uint8_t)(1u << (c & 7));
}

static void class_escape(uint8_t set[16], char e, bool *neg_class) {
    *neg_class = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
    case 'd': case 'D':
        for (unsigned c = '0'; c <= '9'; c++) set_bit(set, c);
        break;
    case 'w': case 'W':
        for (unsigned c = 0; c < 128; c++)
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
                set_bit(set, c);
        break;
    case 's': case 'S':
        set_bit(set, ' '); set_bit(set, '\t'); set_bit(set, '\n'); set_bit(set, '\r');
        set_bit(set, '\f'); set_bit(set, '\v');
        break;
    }
}

/* Writes a class over ASCII set (neg: its complement, plus any non-ASCII character). */
static void emit_class(rx *r, const uint8_t set_in[16], bool neg) {
    uint8_t set[16];
    memcpy(set, set_in, 16);
    bool escapes = false; /* JSON: the characters written escaped, as alternatives */
    if (r->json) {
        for (unsigned c = 0; c < 0x20; c++) {
            if (neg)
                set_bit(set, c);
            else
                set[c >> 3] &= (uint8_t)~(1u << (c & 7));
        }
        const bool q = set[4] >> 2 & 1, bs = set['\\' >> 3] >> ('\\' & 7) & 1;
        escapes = !neg && (q || bs);
        if (neg) {
            set_bit(set, '"');
            set_bit(set, '\\');
        } else {
            set['"' >> 3] &= (uint8_t)~(1u << ('"' & 7));
            set['\\' >> 3] &= (uint8_t)~(1u << ('\\' & 7));
        }
        if (escapes)
            seer_gbuf_printf(r->o, "(%s%s", q ? "\"\\\\\\\"\" | " : "", bs ? "\"\\\\\\\\\" | " : "");
    }
    /* an empty class ("[]") matches nothing, as the regex says */
    seer_gbuf_puts(r->o, neg ? "[^" : "[");
    for (unsigned c = 0; c < 128; c++)
        if (set[c >> 3] >> (c & 7) & 1)
            seer_gbuf_printf(r->o, "\\x%02X", c);
    seer_gbuf_puts(r->o, escapes ? "])" : "]");
}

static bool class_char(rx *r, unsigned *c, bool *is_class, uint8_t set[16], bool *neg_part) {
    *is_class = false;
    if (r->i >= r->n)
        return rfail(r, SEER_ERR_INVALID_ARG, "unterminated class");
    const unsigned char ch = (unsigned char)r->s[r->i++];
    if (ch >= 0x80)
        return rfail(r, SEER_ERR_UNSUPPORTED, "non-ASCII character in a class");
    if (ch != '\\') {
        *c = ch;
        return true;
    }
    if (r->i >= r->n)
        return rfail(r, SEER_ERR_INVALID_ARG, "trailing backslash");
    const char e = r->s[r->i++];
    if (strchr("dwsDWS", e)) {
        bool neg;
        class_escape(set, e, &neg);
        if (neg)
            *neg_part = true;
        *is_class = true;
        return true;
    }
    switch (e) {
    case 'n': *c = '\n'; return true;
    case 'r': *c = '\r'; return true;
    case 't': *c = '\t'; return true;
    case 'f': *c = '\f'; return true;
    case 'v': *c = '\v'; return true;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') || (unsigned char)e >= 0x80)
            return rfail(r, SEER_ERR_UNSUPPORTED, "escape in a class");
        *c = (unsigned char)e;
        return true;
    }
}

static bool parse_class(rx *r) {
    bool neg = false, neg_part = false;
    uint8_t set[16] = {0};
    if (r->i < r->n && r->s[r->i] == '^')
        neg = true, r->i++;
    bool first = true;
    for (;;) {
        if (r->i >= r->n)
            return rfail(r, SEER_ERR_INVALID_ARG, "unterminated class");
        if (r->s[r->i] == ']' && !first) {
            r->i++;
            break;
        }
        first = false;
        unsigned lo, hi;
        bool is_class;
        if (!class_char(r, &lo, &is_class, set, &neg_part))
            return false;
        if (is_class)
            continue;
        hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            bool c2;
            if (!class_char(r, &hi, &c2, set, &neg_part))
                return false;
            if (c2 || hi < lo)
                return rfail(r, SEER_ERR_INVALID_ARG, "bad range in a class");
        }
        for (unsigned c = lo; c <= hi; c++)
            set_bit(set, c);
    }
    if (neg_part)
        return rfail(r, SEER_ERR_UNSUPPORTED, "\\D, \\W or \\S inside a class");
    emit_class(r, set, neg);
    return true;
}

static void emit_literal(rx *r, unsigned char c) {
    if (r->json && (c == '"' || c == '\\')) {
        seer_gbuf_puts(r->o, c == '"' ? "\"\\\\\\\"\"" : "\"\\\\\\\\\"");
        return;
    }
    if (r->json && c < 0x20) {
        seer_gbuf_printf(r->o, "\"\\\\u00%02x\"", c);
        return;
    }
    seer_gbuf_literal(r->o, (const char *)&c, 1);
}

static bool parse_alt(rx *r);

static bool parse_atom(rx *r) {
    const unsigned char c = (unsigned char)r->s[r->i++];
    switch (c) {
    case '(':
        if (++r->nest > 64)
            return rfail(r, SEER_ERR_INVALID_ARG, "groups nested too deep");
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':')
                r->i += 2;
            else
                return rfail(r, SEER_ERR_UNSUPPORTED, "look-around or named group");
        }
        seer_gbuf_puts(r->o, "(");
        if (!parse_alt(r))
            return false;
        if (r->i >= r->n || r->s[r->i] != ')')
            return rfail(r, SEER_ERR_INVALID_ARG, "missing ')'");
        r->i++;
        r->nest--;
        seer_gbuf_puts(r->o, ")");
        return true;
    case '[':
        return parse_class(r);
    case '.': {
        if (r->json) {
            seer_gbuf_puts(r->o, "jchar");
        } else {
            uint8_t set[16] = {0};
            set_bit(set, '\n');
            emit_class(r, set, true);
        }
        return true;
    }
    case '^':
    case '$':
        return rfail(r, SEER_ERR_UNSUPPORTED, "anchor inside the pattern");
    case '*': case '+': case '?': case '{':
        return rfail(r, SEER_ERR_INVALID_ARG, "repetition of nothing");
    case '\\': {
        if (r->i >= r->n)
            return rfail(r, SEER_ERR_INVALID_ARG, "trailing backslash");
        const char e = r->s[r->i];
        if (strchr("dwsDWS", e)) {
            r->i++;
            uint8_t set[16] = {0};
            bool neg;
            class_escape(set, e, &neg);
            emit_class(r, set, neg);
            return true;
        }
        if (e == 'x') {
            r->i++;
            unsigned v = 0;
            for (int k = 0; k < 2; k++, r->i++) {
                const char h = r->i < r->n ? r->s[r->i] : 0;
                const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0)
                    return rfail(r, SEER_ERR_INVALID_ARG, "bad \\x escape");
                v = v * 16 + (unsigned)d;
            }
            if (v >= 0x80)
                return rfail(r, SEER_ERR_UNSUPPORTED, "\\x escape above 0x7F");
            emit_literal(r, (unsigned char)v);
            return true;
        }
        unsigned cc;
        bool is_class, neg_part = false;
        uint8_t set[16] = {0};
        if (!class_char(r, &cc, &is_class, set, &neg_part))
            return false;
        emit_literal(r, (unsigned char)cc);
        return true;
    }
    default:
        emit_literal(r, c);
        return true;
    }
}

static bool parse_count(rx *r, long *v) {
    *v = 0;
    if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9')
        return rfail(r, SEER_ERR_INVALID_ARG, "bad {m,n}");
    while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
        *v = *v * 10 + (r->s[r->i++] - '0');
        if (*v > SEER_G_MAX_REPEAT)
            return rfail(r, SEER_ERR_INVALID_ARG, "repetition count above 1000");
    }
    return true;
}

static bool parse_alt(rx *r) {
    for (;;) {
        seer_gbuf_puts(r->o, "(");
        while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
            if (r->s[r->i] == '$' && r->i + 1 == r->n && r->nest == 0)
                break; /* the end anchor */
            seer_gbuf_puts(r->o, "(");
            if (!parse_atom(r))
                return false;
            seer_gbuf_puts(r->o, ")");
            if (r->i < r->n && strchr("*+?", r->s[r->i])) {
                seer_gbuf_put(r->o, r->s + r->i, 1);
                r->i++;
            } else if (r->i < r->n && r->s[r->i] == '{') {
                r->i++;
                long lo, hi;
                if (!parse_count(r, &lo))
                    return false;
                hi = lo;
                if (r->i < r->n && r->s[r->i] == ',') {
                    r->i++;
                    hi = -1;
                    if (r->i < r->n && r->s[r->i] != '}' && !parse_count(r, &hi))
                        return false;
                }
                if (r->i >= r->n || r->s[r->i] != '}' || (hi >= 0 && hi < lo))
                    return rfail(r, SEER_ERR_INVALID_ARG, "bad {m,n}");
                r->i++;
                if (hi < 0)
                    seer_gbuf_printf(r->o, "{%ld,}", lo);
                else
                    seer_gbuf_printf(r->o, "{%ld,%ld}", lo, hi);
            }
            if (r->i < r->n && (r->s[r->i] == '?' || r->s[r->i] == '+') &&
                strchr("*+?}", r->s[r->i - 1]))
                r->i++; /* lazy or possessive: the same strings */
        }
        seer_gbuf_puts(r->o, " \"\")");
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            seer_gbuf_puts(r->o, " | ");
            continue;
        }
        return true;
    }
}

seer_status seer_regex_expr(const char *re, size_t n, seer_gbuf *expr, bool json) {
    if (!re && n)
        return seer_err(SEER_ERR_INVALID_ARG, "regex: NULL");
    if (n > 65536)
        return seer_err(SEER_ERR_INVALID_ARG, "regex: longer than 65536 bytes");
    rx r = {.s = re, .n = n, .o = expr, .json = json, .st = SEER_OK};
    bool start = false, end = false;
    if (r.i < r.n && r.s[0] == '^')
        start = true, r.i++;
    if (n > r.i && re[n - 1] == '$' && !(n >= 2 && re[n - 2] == '\\'))
        end = true;
    if (json && !start)
        seer_gbuf_puts(expr, "jchar* ");
    seer_gbuf_puts(expr, "(");
    bool ok = parse_alt(&r);
    if (ok && r.i < r.n && r.s[r.i] == '$')
        r.i++;
    if (ok && r.i != r.n)
        ok = rfail(&r, SEER_ERR_INVALID_ARG, "unbalanced ')'");
    seer_gbuf_puts(expr, ")");
    if (json && !end)
        seer_gbuf_puts(expr, " jchar*");
    if (!ok)
        return r.st;
    if (expr->oom)
        return seer_err(SEER_ERR_INVALID_ARG, "regex: too large");
    return SEER_OK;
}

seer_status seer_regex_to_grammar(const char *re, size_t len, char **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    seer_gbuf b = {0};
    seer_gbuf_puts(&b, "root ::= ");
    const seer_status st = seer_regex_expr(re, len, &b, false);
    seer_gbuf_puts(&b, "\n");
    if (st != SEER_OK || b.oom) {
        free(b.s);
        return st != SEER_OK ? st : seer_err(SEER_ERR_OOM, "regex: out of memory");
    }
    *out = b.s;
    return SEER_OK;
}
