/*
 * test_constrain.c: the constraint engine (src/constrain/): grammars accept and reject
 * strings; bad grammars, schemas and regexes get errors; JSON schemas compile to grammars that
 * accept valid and reject invalid documents; integer bounds are exact; token masks equal a
 * brute-force check over a small vocabulary; accept, rollback and clone keep states apart.
 */
#include "testutil.h"

#include "constrain/grammar.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static seer_grammar *compile(seer_constraint_kind kind, const char *text) {
    char *src = NULL;
    if (seer_constraint_grammar_text(kind, text, text ? strlen(text) : 0, &src) != SEER_OK) {
        print_error("compile failed: %s\n", seer_last_error());
        return NULL;
    }
    seer_grammar *g = NULL;
    if (seer_grammar_parse(src, strlen(src), &g) != SEER_OK)
        print_error("parse failed: %s\n%s\n", seer_last_error(), src);
    free(src);
    return g;
}

static bool acc(const seer_grammar *g, const char *s) {
    return seer_grammar_accepts(g, s, strlen(s), true);
}

static void test_grammar_basics(void **state) {
    (void)state;
    seer_grammar *g = compile(SEER_CONSTRAINT_GRAMMAR,
                              "root ::= greet (\" \" name)? \"!\"{1,3}\n"
                              "greet ::= \"hi\" | \"hello\"  # a comment\n"
                              "name ::= [A-Z] [a-z]* | \"x\"+\n");
    assert_non_null(g);
    assert_true(acc(g, "hi!"));
    assert_true(acc(g, "hello Bob!!!"));
    assert_true(acc(g, "hi xxx!"));
    assert_true(acc(g, "hi B!"));
    assert_false(acc(g, "hi!!!!"));
    assert_false(acc(g, "hi bob!"));
    assert_false(acc(g, "hi "));
    assert_false(acc(g, "hey!"));
    assert_true(seer_grammar_accepts(g, "hello Bo", 8, false)); /* a prefix */
    seer_grammar_free(g);

    g = compile(SEER_CONSTRAINT_GRAMMAR, "root ::= [^a] . \"\\x41\" \"\\u00e9\"");
    assert_non_null(g);
    assert_true(acc(g, "bzA\xc3\xa9"));
    assert_true(acc(g, "\xc3\xa9\xe2\x82\xac" "A\xc3\xa9")); /* multi-byte characters */
    assert_false(acc(g, "azA\xc3\xa9"));
    assert_false(acc(g, "\xc3zA\xc3\xa9"));  /* a broken UTF-8 sequence */
    assert_false(acc(g, "\xed\xa0\x80zA\xc3\xa9")); /* a surrogate */
    seer_grammar_free(g);

    /* nested recursion (balanced brackets) */
    g = compile(SEER_CONSTRAINT_GRAMMAR, "root ::= \"\" | \"(\" root \")\" root");
    assert_non_null(g);
    assert_true(acc(g, "(()())()"));
    assert_false(acc(g, "(()"));
    assert_false(acc(g, "())"));
    seer_grammar_free(g);
}

static void test_grammar_errors(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",                              /* no root */
        "root ::= a",                    /* undefined */
        "root ::= root \"x\" | \"y\"",   /* left recursion */
        "root ::= (\"\")*",              /* repeating something empty */
        "root ::= a\na ::= \"\"? root",  /* left recursion through a nullable prefix */
        "root ::= \"abc",                /* unterminated */
        "root ::= [abc",
        "root ::= (\"a\"",
        "root ::= \"a\")",
        "root ::= \"a\"{3,2}",
        "root ::= \"a\"{5000}",
        "root ::= [\xc3\xa9]",           /* non-ASCII in a class */
        "root ::= \"a\"\nroot ::= \"b\"",/* twice */
        "root ::= @",
        "::= \"a\"",
        "root ::= \"\\x4\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        seer_grammar *g = NULL;
        const seer_status st = seer_grammar_parse(bad[i], strlen(bad[i]), &g);
        if (st == SEER_OK)
            print_error("accepted bad grammar %zu: %s\n", i, bad[i]);
        assert_int_not_equal(st, SEER_OK);
        assert_null(g);
        assert_true(strlen(seer_last_error()) > 0);
    }
    /* a deep but legal grammar: repetition past the stack depth is refused per byte, not a crash */
    seer_grammar *g = compile(SEER_CONSTRAINT_GRAMMAR, "root ::= \"[\" root \"]\" | \"x\"");
    assert_non_null(g);
    char deep[2000];
    memset(deep, '[', sizeof deep);
    assert_false(seer_grammar_accepts(g, deep, sizeof deep, false));
    assert_true(seer_grammar_accepts(g, deep, 100, false));
    seer_grammar_free(g);
    /* an ambiguous grammar with many live stacks stays bounded */
    g = compile(SEER_CONSTRAINT_GRAMMAR, "root ::= (\"a\" | \"a\" \"a\" | \"a\" \"a\" \"a\")* \"b\"");
    assert_non_null(g);
    char as[300];
    memset(as, 'a', sizeof as);
    as[299] = 'b';
    assert_true(seer_grammar_accepts(g, as, sizeof as, true));
    seer_grammar_free(g);
}

static const char *const person_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":20},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",null]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":3},"
    "\"address\":{\"$ref\":\"#/$defs/addr\"},"
    "\"score\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"null\"}]},"
    "\"kind\":{\"const\":\"person\"}},"
    "\"required\":[\"name\",\"age\",\"kind\"],\"additionalProperties\":false,"
    "\"$defs\":{\"addr\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\"]}}}";

static void test_schema_documents(void **state) {
    (void)state;
    seer_grammar *g = compile(SEER_CONSTRAINT_JSON_SCHEMA, person_schema);
    assert_non_null(g);
    static const char *const good[] = {
        "{\"name\":\"Ann\",\"age\":30,\"kind\":\"person\"}",
        "{ \"name\": \"Ann\", \"age\": 0, \"kind\": \"person\" }",
        "{\n  \"name\": \"\\u00e9\\n\",\n  \"age\": 150,\n  \"email\": \"a.b@c.org\",\n"
        "  \"role\": null,\n  \"tags\": [\"x\", \"y\"],\n  \"address\": {\"city\": \"Oslo\", \"zip\": \"01234\"},\n"
        "  \"score\": -1.5e3,\n  \"kind\": \"person\"\n}",
        "{\"name\":\"caf\xc3\xa9\",\"age\":7,\"role\":\"admin\",\"score\":null,\"kind\":\"person\"}",
    };
    static const char *const badd[] = {
        "{\"name\":\"\",\"age\":30,\"kind\":\"person\"}",            /* minLength */
        "{\"name\":\"Ann\",\"age\":151,\"kind\":\"person\"}",        /* maximum */
        "{\"name\":\"Ann\",\"age\":-1,\"kind\":\"person\"}",
        "{\"name\":\"Ann\",\"age\":30}",                             /* required */
        "{\"age\":30,\"name\":\"Ann\",\"kind\":\"person\"}",         /* order is the schema's */
        "{\"name\":\"Ann\",\"age\":30,\"kind\":\"person\",\"x\":1}", /* additional */
        "{\"name\":\"Ann\",\"age\":30,\"tags\":[],\"kind\":\"person\"}",
        "{\"name\":\"Ann\",\"age\":30,\"tags\":[\"a\",\"b\",\"c\",\"d\"],\"kind\":\"person\"}",
        "{\"name\":\"Ann\",\"age\":30,\"role\":\"root\",\"kind\":\"person\"}",
        "{\"name\":\"Ann\",\"age\":30,\"address\":{\"zip\":\"01234\"},\"kind\":\"person\"}",
        "{\"name\":\"Ann\",\"age\":30,\"address\":{\"city\":\"a\",\"zip\":\"1234\"},\"kind\":\"person\"}",
        "{\"name\":\"Ann\",\"age\":030,\"kind\":\"person\"}",
        "{\"name\":\"A\x01\",\"age\":30,\"kind\":\"person\"}",
        "{\"name\":\"Ann\",\"age\":30,\"kind\":\"person\"} ",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (!acc(g, good[i]))
            print_error("rejected good %zu: %s\n", i, good[i]);
        assert_true(acc(g, good[i]));
    }
    for (size_t i = 0; i < sizeof badd / sizeof badd[0]; i++) {
        if (acc(g, badd[i]))
            print_error("accepted bad %zu: %s\n", i, badd[i]);
        assert_false(acc(g, badd[i]));
    }
    seer_grammar_free(g);

    g = compile(SEER_CONSTRAINT_JSON_OBJECT, NULL);
    assert_non_null(g);
    assert_true(acc(g, "{}"));
    assert_true(acc(g, "{\"a\": [1, {\"b\": null}, \"x\", true, -0.5E+2]}"));
    assert_false(acc(g, "[]"));
    assert_false(acc(g, "{\"a\": 01}"));
    assert_false(acc(g, "{\"a\": 1,}"));
    seer_grammar_free(g);

    /* recursion through $ref, and pattern without anchors (a search) */
    g = compile(SEER_CONSTRAINT_JSON_SCHEMA,
                "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
                "\"v\":{\"type\":\"string\",\"pattern\":\"ab+\"},\"kids\":{\"type\":\"array\",\"items\":"
                "{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}}}");
    assert_non_null(g);
    assert_true(acc(g, "{\"v\":\"xxabbby\",\"kids\":[{\"v\":\"ab\"},{\"v\":\"ab\",\"kids\":[]}]}"));
    assert_false(acc(g, "{\"v\":\"xxa\"}"));
    seer_grammar_free(g);
}

static void test_schema_errors(void **state) {
    (void)state;
    static const char *const bad[] = {
        "", "{", "[1,2]", "{\"type\":\"object\",\"not\":{}}", "{\"type\":\"strin\"}",
        "{\"$ref\":\"#/$defs/missing\"}", "{\"$ref\":\"http://x/y\"}", "{\"type\":\"array\",\"uniqueItems\":true}",
        "{\"allOf\":[{},{}]}", "{\"enum\":[]}", "{\"type\":\"string\",\"pattern\":\"(?=a)\"}",
        "{\"type\":\"string\",\"pattern\":\"a(\"}", "{\"type\":\"string\",\"maxLength\":5000}",
        "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "false", "{\"type\":\"object\",\"required\":[\"x\"],\"properties\":{}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        seer_status st = seer_schema_to_grammar(bad[i], strlen(bad[i]), &out);
        seer_grammar *g = NULL;
        if (st == SEER_OK) {
            st = seer_grammar_parse(out, strlen(out), &g);
            seer_grammar_free(g);
            print_error("schema %zu compiled: %s\n", i, bad[i]);
        }
        free(out);
        assert_int_not_equal(st, SEER_OK);
    }
    char deep[400];
    for (int i = 0; i < 200; i++)
        deep[i] = '[', deep[399 - i] = ']';
    char *out = NULL;
    assert_int_not_equal(seer_schema_to_grammar(deep, sizeof deep, &out), SEER_OK);
}

static void test_integer_bounds(void **state) {
    (void)state;
    static const int b[][2] = {{0, 150}, {-20, 7}, {-300, -12}, {5, 5}, {17, 1234}, {-1, 0}, {99, 100}};
    for (size_t k = 0; k < sizeof b / sizeof b[0]; k++) {
        char schema[160];
        snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%d,\"maximum\":%d}", b[k][0], b[k][1]);
        seer_grammar *g = compile(SEER_CONSTRAINT_JSON_SCHEMA, schema);
        assert_non_null(g);
        for (int v = -1500; v <= 1500; v++) {
            char s[16];
            snprintf(s, sizeof s, "%d", v);
            const bool want = v >= b[k][0] && v <= b[k][1];
            if (acc(g, s) != want)
                print_error("%s: %d gives %d\n", schema, v, !want);
            assert_int_equal(acc(g, s), want);
        }
        assert_false(acc(g, "-0"));
        seer_grammar_free(g);
    }
    seer_grammar *g = compile(SEER_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"integer\",\"exclusiveMinimum\":10}");
    assert_non_null(g);
    assert_false(acc(g, "10"));
    assert_true(acc(g, "11"));
    assert_true(acc(g, "123456789"));
    assert_false(acc(g, "-11"));
    seer_grammar_free(g);
    g = compile(SEER_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}");
    assert_non_null(g);
    assert_true(acc(g, "0.25"));
    assert_true(acc(g, "1"));
    assert_true(acc(g, "1.000"));
    assert_false(acc(g, "1.5"));
    assert_false(acc(g, "2"));
    assert_false(acc(g, "-0.5"));
    seer_grammar_free(g);
}

static void test_regex(void **state) {
    (void)state;
    seer_grammar *g = compile(SEER_CONSTRAINT_REGEX, "^(\\d{3}-)?[A-Z][a-z]+(?:, [a-z]+)*\\.?$");
    assert_non_null(g);
    assert_true(acc(g, "Hello"));
    assert_true(acc(g, "555-Hello, world, again."));
    assert_false(acc(g, "55-Hello"));
    assert_false(acc(g, "hello"));
    seer_grammar_free(g);
    g = compile(SEER_CONSTRAINT_REGEX, "a|b\\w*|[^x-z]");
    assert_non_null(g);
    assert_true(acc(g, "a"));
    assert_true(acc(g, "b_9"));
    assert_true(acc(g, "\xc3\xa9"));
    assert_false(acc(g, "y"));
    seer_grammar_free(g);
}

/* A vocabulary of strings over the bytes JSON needs, with duplicates and prefixes of each
 * other, plus an end token. */
enum { NV = 600 };

static void make_vocab(char **pieces, int *lens, uint64_t *rs) {
    static const char alpha[] = "{}[]\":, \n0123456789-.eEaAbnrtulsfx\\";
    for (int i = 0; i < NV - 1; i++) {
        const int len = i < 40 ? 1 : 1 + (int)(tu_rand_u64(rs) % 6);
        pieces[i] = malloc(8);
        for (int k = 0; k < len; k++)
            pieces[i][k] = i < (int)sizeof alpha - 1 ? alpha[i] : alpha[tu_rand_u64(rs) % (sizeof alpha - 1)];
        lens[i] = i < (int)sizeof alpha - 1 ? 1 : len;
    }
    memcpy(pieces[100], "\"name\"", 6), lens[100] = 6;
    memcpy(pieces[101], "\"name\"", 6), lens[101] = 6; /* the same bytes twice */
    pieces[NV - 1] = NULL;
    lens[NV - 1] = 0;
}

static int n_forced, n_forced_str; /* steps where a chain of several prefixes forced its
                                    * longest; where a string was forced with no one token */

static bool is_prefix(const char *a, int la, const char *b, int lb) {
    return la <= lb && memcmp(a, b, (size_t)la) == 0;
}

/* seer_constraint_forced_after against its rule over the brute-force allowed set [count]:
 * the maximal allowed pieces (no other allowed piece extends them) have the forced string as
 * their common prefix; with one maximal string, its highest id is the token; where the text
 * may end, 1 (the caller's full mask decides). */
static void check_forced(seer_constraint *c, char *const *pieces, const int *lens, const int *allowed, int count,
                         int32_t eog) {
    seer_forced f;
    const int r = seer_constraint_forced_after(c, NULL, 0, &f);
    for (int i = 0; i < count; i++)
        if (allowed[i] == eog) {
            assert_int_equal(r, 1);
            return;
        }
    assert_int_equal(r, 0);
    int32_t want = -1, n_max = 0, lcp = -1;
    const char *first = NULL;
    for (int i = 0; i < count; i++) {
        const int a = allowed[i];
        bool maximal = true;
        for (int j = 0; j < count && maximal; j++)
            maximal = !(lens[allowed[j]] > lens[a] && is_prefix(pieces[a], lens[a], pieces[allowed[j]], lens[allowed[j]]));
        if (!maximal)
            continue;
        if (!first) {
            first = pieces[a], lcp = lens[a], n_max = 1, want = a;
            continue;
        }
        if (lens[a] == lens[want] && memcmp(pieces[a], pieces[want], (size_t)lens[a]) == 0) {
            want = a > want ? a : want; /* the same bytes */
            continue;
        }
        n_max++;
        int m = 0;
        while (m < lcp && m < lens[a] && first[m] == pieces[a][m])
            m++;
        lcp = m;
    }
    if (n_max != 1)
        want = -1;
    if (!first || lcp == 0) {
        assert_int_equal(f.len, 0);
        assert_int_equal(f.tok, -1);
    } else {
        assert_int_equal(f.len, lcp);
        assert_memory_equal(f.bytes, first, (size_t)lcp);
        assert_int_equal(f.tok, want);
    }
    n_forced += want >= 0 && count > 1;
    n_forced_str += want < 0 && lcp > 0;
    for (int i = 0; i < count; i++)
        assert_true(seer_constraint_allows_after(c, NULL, 0, allowed[i]));
}

/* A string forced before a branch: "abc" then "d" or "e", the tokens its prefixes and the
 * two ways on. Nothing is one token's, then the last piece is. */
static void test_forced_string(void **state) {
    (void)state;
    static const char *const pieces[] = {"a", "ab", "abcd", "abce", "x", "c", "d", "e", "</s>"};
    int lens[9];
    for (int i = 0; i < 9; i++)
        lens[i] = (int)strlen(pieces[i]);
    const int32_t eog = 8;
    const char *gram = "root ::= \"abc\" (\"d\" | \"e\") \"x\"";
    seer_constraint *c = NULL;
    assert_int_equal(seer_constraint_from_pieces(SEER_CONSTRAINT_GRAMMAR, gram, strlen(gram), pieces, lens, 9, &eog, 1,
                                                 &c), SEER_OK);
    seer_forced f;
    assert_int_equal(seer_constraint_forced_after(c, NULL, 0, &f), 0);
    assert_int_equal(f.len, 3);
    assert_memory_equal(f.bytes, "abc", 3);
    assert_int_equal(f.tok, -1);
    const int32_t path[] = {1, 5}; /* "ab" "c": then "d" or "e", nothing common */
    assert_int_equal(seer_constraint_forced_after(c, path, 2, &f), 0);
    assert_int_equal(f.len, 0);
    assert_int_equal(f.tok, -1);
    const int32_t path2[] = {2}; /* "abcd": "x" alone */
    assert_int_equal(seer_constraint_forced_after(c, path2, 1, &f), 0);
    assert_int_equal(f.tok, 4);
    const int32_t path3[] = {2, 4}; /* the end: the full mask decides */
    assert_int_equal(seer_constraint_forced_after(c, path3, 2, &f), 1);
    const int32_t bad[] = {4};
    assert_int_equal(seer_constraint_forced_after(c, bad, 1, &f), 0);
    assert_int_equal(f.len, 0);
    assert_false(seer_constraint_allows_after(c, NULL, 0, 4));
    assert_true(seer_constraint_allows_after(c, path, 1, 5));
    seer_constraint_free(c);
}

static void test_mask_brute_force(void **state) {
    (void)state;
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},"
        "\"l\":{\"type\":\"array\",\"items\":{\"enum\":[true,false,null]}}},\"required\":[\"name\"]}",
        NULL, /* json_object */
    };
    uint64_t rs = 7;
    char *pieces[NV];
    int lens[NV];
    make_vocab(pieces, lens, &rs);
    const int32_t eog = NV - 1;
    for (size_t si = 0; si < 2; si++) {
        const seer_constraint_kind kind = schemas[si] ? SEER_CONSTRAINT_JSON_SCHEMA : SEER_CONSTRAINT_JSON_OBJECT;
        const char *text = schemas[si] ? schemas[si] : "";
        seer_constraint *c = NULL;
        assert_int_equal(seer_constraint_from_pieces(kind, text, strlen(text), (const char *const *)pieces,
                                                     lens, NV, &eog, 1, &c), SEER_OK);
        seer_grammar *g = compile(kind, text);
        assert_non_null(g);
        uint32_t bits[(NV + 31) / 32];
        char prefix[4096];
        size_t plen = 0;
        for (int step = 0; step < 60; step++) {
            const int n = seer_constraint_mask(c, bits);
            int count = 0, allowed[NV];
            for (int t = 0; t < NV; t++) {
                bool want;
                if (t == eog) {
                    want = seer_grammar_accepts(g, prefix, plen, true);
                } else if (lens[t] == 0) {
                    want = false;
                } else {
                    memcpy(prefix + plen, pieces[t], (size_t)lens[t]);
                    want = seer_grammar_accepts(g, prefix, plen + (size_t)lens[t], false);
                }
                const bool got = bits[t >> 5] >> (t & 31) & 1;
                if (want != got)
                    print_error("step %d token %d (%.*s): mask %d, brute force %d\n", step, t, lens[t],
                                pieces[t] ? pieces[t] : "", got, want);
                assert_int_equal(got, want);
                assert_int_equal(seer_constraint_allows(c, t), want);
                if (want)
                    allowed[count++] = t;
            }
            assert_int_equal(n, count);
            check_forced(c, pieces, lens, allowed, count, eog);
            if (count == 0 || (count == 1 && allowed[0] == eog))
                break;
            /* prefer tokens that close structures now and then so that walks end */
            int pick = allowed[tu_rand_u64(&rs) % (uint64_t)count];
            if (pick == eog)
                pick = allowed[0] == eog ? allowed[1] : allowed[0];
            assert_int_equal(seer_constraint_accept(c, pick), SEER_OK);
            memcpy(prefix + plen, pieces[pick], (size_t)lens[pick]);
            plen += (size_t)lens[pick];
            /* rollback and clone: take the token back, then again */
            if (step % 5 == 4) {
                seer_constraint *d = NULL;
                assert_int_equal(seer_constraint_clone(c, &d), SEER_OK);
                assert_int_equal(seer_constraint_rollback(c, 1), SEER_OK);
                assert_int_equal(seer_constraint_n_accepted(c), seer_constraint_n_accepted(d) - 1);
                assert_int_equal(seer_constraint_accept(c, pick), SEER_OK);
                uint32_t b2[(NV + 31) / 32];
                assert_int_equal(seer_constraint_mask(d, b2), seer_constraint_mask(c, bits));
                assert_memory_equal(b2, bits, sizeof bits);
                seer_constraint_free(d);
            }
        }
        /* a disallowed token is refused and leaves the state alone */
        const int before = seer_constraint_n_accepted(c);
        int bad = -1;
        seer_constraint_mask(c, bits);
        for (int t = 0; t < NV && bad < 0; t++)
            if (!(bits[t >> 5] >> (t & 31) & 1))
                bad = t;
        assert_true(bad >= 0);
        assert_int_not_equal(seer_constraint_accept(c, bad), SEER_OK);
        assert_int_equal(seer_constraint_n_accepted(c), before);
        assert_int_not_equal(seer_constraint_rollback(c, before + 1), SEER_OK);
        assert_int_equal(seer_constraint_rollback(c, before), SEER_OK);
        assert_int_equal(seer_constraint_n_accepted(c), 0);
        seer_grammar_free(g);
        seer_constraint_free(c);
    }
    print_message("forced: by a chain of prefixes at %d steps, a string alone at %d\n", n_forced, n_forced_str);
    assert_true(n_forced > 0);
    for (int i = 0; i < NV; i++)
        free(pieces[i]);
}

/* A constraint made sharing another's vocabulary masks as one made from scratch, and lives on
 * after the one it shares with is freed. */
static void test_sharing(void **state) {
    (void)state;
    uint64_t rs = 11;
    char *pieces[NV];
    int lens[NV];
    make_vocab(pieces, lens, &rs);
    const int32_t eog = NV - 1;
    seer_constraint *a = NULL, *b = NULL, *c = NULL;
    ASSERT_OK(seer_constraint_from_pieces(SEER_CONSTRAINT_REGEX, "[0-9]+", 6, (const char *const *)pieces, lens, NV,
                                          &eog, 1, &a));
    ASSERT_OK(seer_constraint_from_pieces(SEER_CONSTRAINT_JSON_OBJECT, "", 0, (const char *const *)pieces, lens, NV,
                                          &eog, 1, &b));
    ASSERT_OK(seer_constraint_new_sharing(a, SEER_CONSTRAINT_JSON_OBJECT, "", 0, &c));
    seer_constraint *x = NULL;
    assert_int_not_equal(seer_constraint_new_sharing(a, SEER_CONSTRAINT_GRAMMAR, "root ::= x", 10, &x), SEER_OK);
    assert_null(x);
    seer_constraint_free(a);
    uint32_t b1[(NV + 31) / 32], b2[(NV + 31) / 32];
    assert_int_equal(seer_constraint_mask(b, b1), seer_constraint_mask(c, b2));
    assert_memory_equal(b1, b2, sizeof b1);
    seer_constraint_free(b);
    seer_constraint_free(c);
    for (int i = 0; i < NV; i++)
        free(pieces[i]);
}

/* Every schema of the server's conformance set (tests/data/schemas/) compiles. */
static void test_schema_set(void **state) {
    (void)state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tests/data/schemas", SEER_SOURCE_DIR);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t size = 0;
        uint8_t *text = tu_read_file(path, &size);
        assert_non_null(text);
        seer_grammar *g = compile(SEER_CONSTRAINT_JSON_SCHEMA, (const char *)text);
        if (!g)
            print_error("%s does not compile\n", e->d_name);
        assert_non_null(g);
        seer_grammar_free(g);
        free(text);
        n++;
    }
    closedir(d);
    assert_true(n >= 50);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grammar_basics),   cmocka_unit_test(test_grammar_errors),
        cmocka_unit_test(test_schema_documents), cmocka_unit_test(test_schema_errors),
        cmocka_unit_test(test_integer_bounds),   cmocka_unit_test(test_regex),
        cmocka_unit_test(test_mask_brute_force), cmocka_unit_test(test_forced_string), cmocka_unit_test(test_sharing),
        cmocka_unit_test(test_schema_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
