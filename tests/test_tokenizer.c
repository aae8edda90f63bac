/*
 * test_tokenizer.c: SentencePiece vocabularies (src/tokenizer/): loading from GGUF, encoding
 * against the reference ids of stories260K and against a naive re-scanning reference
 * encoder, hand-made vocabularies for the merge order, byte fallback, dummy prefix and
 * special tokens, UTF-8 validation, the streaming detokenizer, round trips and random input.
 */
#include "testutil.h"

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SP "\xE2\x96\x81" /* "▁" */

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                  */

typedef struct {
    const char *text;
    float score;
    int type; /* 0: normal */
} tok_def;

/* A vocabulary of <unk>, <s>, </s>, optionally the 256 byte tokens (ids 3..258), then toks. */
static seer_vocab *mk_vocab(const tok_def *toks, int n, bool bytes, bool prefix) {
    int nb = bytes ? 256 : 0, total = 3 + nb + n;
    const char **texts = calloc((size_t)total, sizeof *texts);
    float *scores = calloc((size_t)total, sizeof *scores);
    int32_t *types = calloc((size_t)total, sizeof *types);
    char(*bt)[16] = calloc(256, sizeof *bt);
    texts[0] = "<unk>", types[0] = SEER_TOKEN_UNKNOWN;
    texts[1] = "<s>", types[1] = SEER_TOKEN_CONTROL;
    texts[2] = "</s>", types[2] = SEER_TOKEN_CONTROL;
    for (int i = 0; i < nb; i++) {
        snprintf(bt[i], sizeof bt[i], "<0x%02X>", i);
        texts[3 + i] = bt[i];
        types[3 + i] = SEER_TOKEN_BYTE;
    }
    for (int i = 0; i < n; i++) {
        texts[3 + nb + i] = toks[i].text;
        scores[3 + nb + i] = toks[i].score;
        types[3 + nb + i] = toks[i].type ? toks[i].type : SEER_TOKEN_NORMAL;
    }
    seer_vocab_desc d = {.kind = SEER_VOCAB_SPM, .n = total, .texts = texts, .scores = scores,
                         .types = types, .bos = 1, .eos = 2, .unk = 0, .pad = -1,
                         .add_bos = true, .add_space_prefix = prefix};
    seer_vocab *v = NULL;
    ASSERT_OK(seer_vocab_from_arrays(&d, &v));
    free(texts);
    free(scores);
    free(types);
    free(bt);
    return v;
}

/* Encodes and returns the token texts joined by '|' (static buffer). */
static const char *enc_str(const seer_vocab *v, const char *text, size_t len, bool bos,
                           bool special) {
    static char out[4096];
    int32_t ids[512];
    int n = -1;
    ASSERT_OK(seer_vocab_encode(v, text, len, bos, special, ids, 512, &n));
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *t = seer_vocab_text(v, ids[i]);
        assert_non_null(t);
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%s", i ? "|" : "", t);
    }
    return out;
}

#define ENC(v, lit, bos, special) enc_str(v, lit, sizeof(lit) - 1, bos, special)

/* Decodes ids through the streaming detokenizer (plus a final flush) into a malloc'd,
 * NUL-terminated string; checks that every chunk is valid UTF-8. */
static char *detok_all(const seer_vocab *v, const int32_t *ids, size_t n, size_t *len_out) {
    seer_vocab_detok d;
    seer_vocab_detok_init(&d, v);
    size_t cap = 256, len = 0;
    char *out = malloc(cap);
    char buf[64];
    for (size_t i = 0; i <= n; i++) {
        int k = i < n ? seer_vocab_detok_push(&d, ids[i], buf, sizeof buf)
                      : seer_vocab_detok_flush(&d, buf, sizeof buf);
        assert_true(k >= 0);
        assert_int_equal(buf[k], 0);
        assert_true(seer_utf8_valid(buf, (size_t)k, NULL));
        if (len + (size_t)k + 1 > cap) {
            cap = 2 * (len + (size_t)k + 1);
            out = realloc(out, cap);
        }
        memcpy(out + len, buf, (size_t)k);
        len += (size_t)k;
    }
    out[len] = 0;
    if (len_out)
        *len_out = len;
    return out;
}

static seer_vocab *load_stories(void) {
    gguf_file *f = NULL;
    ASSERT_OK(seer_gguf_file_open(tu_data_path("models/stories260K.gguf"), &f));
    seer_vocab *v = NULL;
    ASSERT_OK(seer_vocab_load(f, &v));
    seer_gguf_file_close(f); /* the vocabulary must not point into the mapping */
    return v;
}

/* Encodes with BOS, decodes, and checks the text comes back unchanged. */
static void check_round_trip(const seer_vocab *v, const char *text, size_t len) {
    int n = 0;
    seer_status s = seer_vocab_encode(v, text, len, true, false, NULL, 0, &n);
    assert_true(s == SEER_OK || s == SEER_ERR_INVALID_ARG);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    int n2 = -1;
    ASSERT_OK(seer_vocab_encode(v, text, len, true, false, ids, n, &n2));
    assert_int_equal(n, n2);
    size_t dl;
    char *dec = detok_all(v, ids, (size_t)n, &dl);
    if (dl != len || memcmp(dec, text, len) != 0)
        fail_msg("round trip of %zu bytes gave %zu bytes: '%s'", len, dl, dec);
    free(dec);
    free(ids);
}

/* ---------------------------------------------------------------------------------------- */
/* stories260K                                                                              */

typedef struct {
    char *prompt, *stdout_text;
    int32_t prompt_ids[64], greedy_ids[600];
    int n_prompt, n_greedy;
} golden_row;

static int parse_ids(const char *s, int32_t *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        out[n++] = (int32_t)strtol(s, (char **)&s, 10);
        if (*s == ',')
            s++;
        else
            break;
    }
    return n;
}

static char *unescape_newlines(const char *s) {
    char *o = malloc(strlen(s) + 1), *p = o;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] == 'n') {
            *p++ = '\n';
            s++;
        } else {
            *p++ = *s;
        }
    }
    *p = 0;
    return o;
}

static int read_golden(golden_row *rows, int cap) {
    size_t size;
    char *data = (char *)tu_read_file(tu_data_path("golden/stories260K-greedy.tsv"), &size);
    assert_non_null(data);
    int n = 0;
    char *line = strchr(data, '\n'); /* skip the header */
    while (line && line[1] && n < cap) {
        line++;
        char *end = strchr(line, '\n');
        if (end)
            *end = 0;
        char *f[4] = {line, NULL, NULL, NULL};
        int nf = 1;
        for (char *p = line; nf < 4 && (p = strchr(p, '\t'));) {
            *p++ = 0;
            f[nf++] = p;
        }
        assert_int_equal(nf, 4);
        golden_row *r = &rows[n++];
        r->prompt = malloc(strlen(f[0]) + 1);
        strcpy(r->prompt, f[0]);
        r->n_prompt = parse_ids(f[1], r->prompt_ids, 64);
        r->n_greedy = parse_ids(f[2], r->greedy_ids, 600);
        r->stdout_text = unescape_newlines(f[3]);
        line = end;
    }
    free(data);
    return n;
}

static void free_golden(golden_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        free(rows[i].prompt);
        free(rows[i].stdout_text);
    }
}

static void test_stories_metadata(void **state) {
    seer_vocab *v = load_stories();
    assert_int_equal(seer_vocab_size(v), 512);
    assert_int_equal(seer_vocab_bos(v), 1);
    assert_int_equal(seer_vocab_eos(v), 2);
    assert_int_equal(seer_vocab_unk(v), 0);
    assert_string_equal(seer_vocab_model_name(v), "llama");
    assert_int_equal(seer_vocab_kind_of(v), SEER_VOCAB_SPM);
    assert_true(seer_vocab_add_space_prefix(v));
    assert_string_equal(seer_vocab_text(v, 1), "<s>");
    assert_int_equal(seer_vocab_type(v, 1), SEER_TOKEN_CONTROL);
    assert_int_equal(seer_vocab_byte_token(v, 0x0A), 13);
    assert_int_equal(seer_vocab_find(v, SP "the", 6), 265);
    assert_null(seer_vocab_text(v, 512));
    assert_null(seer_vocab_text(v, -1));

    char buf[16];
    assert_int_equal(seer_vocab_piece(v, 265, buf, sizeof buf), 4);
    assert_string_equal(buf, " the");
    assert_int_equal(seer_vocab_piece(v, 13, buf, sizeof buf), 1);
    assert_string_equal(buf, "\n");
    assert_int_equal(seer_vocab_piece(v, 1, buf, sizeof buf), 0); /* BOS prints nothing */
    assert_string_equal(buf, "");
    assert_int_equal(seer_vocab_piece(v, 0, buf, sizeof buf), 5); /* <unk>: its text */
    assert_string_equal(buf, "<unk>");
    assert_int_equal(seer_vocab_piece(v, 512, buf, sizeof buf), -1);
    /* Too small a buffer: the full length is still returned, only cap bytes are written. */
    memset(buf, 'x', sizeof buf);
    assert_int_equal(seer_vocab_piece(v, 265, buf, 2), 4);
    assert_memory_equal(buf, " tx", 3);
    seer_vocab_free(v);
}

static void test_stories_golden_encode(void **state) {
    seer_vocab *v = load_stories();
    static golden_row rows[16];
    int n = read_golden(rows, 16);
    assert_true(n >= 5);
    assert_string_equal(rows[0].prompt, "");
    for (int r = 0; r < n; r++) {
        for (int special = 0; special < 2; special++) {
            int32_t ids[256];
            int k = -1;
            ASSERT_OK(seer_vocab_encode(v, rows[r].prompt, strlen(rows[r].prompt), true,
                                        special, ids, 256, &k));
            if (k != rows[r].n_prompt)
                fail_msg("'%s': %d tokens, expected %d", rows[r].prompt, k, rows[r].n_prompt);
            assert_memory_equal(ids, rows[r].prompt_ids, (size_t)k * sizeof *ids);
        }
    }
    free_golden(rows, n);
    seer_vocab_free(v);
}

/* The reference program prints BOS + prompt + generation through the same SentencePiece
 * rules (leading space after BOS dropped), then a newline. */
static void test_stories_golden_decode(void **state) {
    seer_vocab *v = load_stories();
    static golden_row rows[16];
    int n = read_golden(rows, 16);
    bool saw_once = false;
    for (int r = 0; r < n; r++) {
        golden_row *g = &rows[r];
        int32_t all[700];
        memcpy(all, g->prompt_ids, (size_t)g->n_prompt * sizeof *all);
        memcpy(all + g->n_prompt, g->greedy_ids, (size_t)g->n_greedy * sizeof *all);
        size_t len;
        char *text = detok_all(v, all, (size_t)(g->n_prompt + g->n_greedy), &len);
        size_t want = strlen(g->stdout_text);
        assert_true(len >= 100);
        if (strncmp(text, g->stdout_text, len) != 0 || want < len || want > len + 1)
            fail_msg("row '%s':\n got: '%s'\nwant: '%s'", g->prompt, text, g->stdout_text);

        if (strcmp(g->prompt, "Once upon a time") == 0) {
            /* The generation alone, pushed after the prompt, continues the prompt's text. */
            saw_once = true;
            char *gen = detok_all(v, g->greedy_ids, (size_t)g->n_greedy, &len);
            const char *after = g->stdout_text + strlen(g->prompt);
            assert_true(len >= 100);
            assert_memory_equal(gen, after, 100);
            assert_int_equal(strncmp(gen, after, len), 0);
            free(gen);
        }
        free(text);
    }
    assert_true(saw_once);
    free_golden(rows, n);
    seer_vocab_free(v);
}

static const char *const k_corpus[] = {
    "Hello, world!",
    "Once upon a time, there was a little girl named Lily.",
    "  two leading spaces",
    "trailing spaces   ",
    "a  b   c    d     e",
    "tabs\tand\nnewlines\r\nand\n\n\nblank lines",
    "Caf\xC3\xA9 cr\xC3\xA8me br\xC3\xBBl\xC3\xA9" "e, na\xC3\xAFve fa\xC3\xA7" "ade",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE"
    "\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
    "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 thumbs \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD flag "
    "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",
    "\xCE\xA9\xE2\x89\x88\xC3\xA7\xE2\x88\x9A\xE2\x88\xAB \xF0\x9D\x84\x9E \xE2\x82\xAC",
    "edge code points \xC2\x80 \xDF\xBF \xE0\xA0\x80 \xED\x9F\xBF \xEE\x80\x80 \xEF\xBF\xBF "
    "\xF0\x90\x80\x80 \xF4\x8F\xBF\xBF",
    "control chars \x01\x02\x1b[0m\x7f",
    "literal <s> and </s> and <unk> stay text",
    " ",
    "   ",
    "\n",
    "",
};

static void test_stories_round_trip(void **state) {
    seer_vocab *v = load_stories();
    for (size_t i = 0; i < sizeof k_corpus / sizeof *k_corpus; i++)
        check_round_trip(v, k_corpus[i], strlen(k_corpus[i]));
    /* Embedded NUL bytes are text like any other. */
    check_round_trip(v, "a\0b\0\0c", 6);
    seer_vocab_free(v);
}

static void test_stories_long_input(void **state) {
    seer_vocab *v = load_stories();
    size_t len = 100 * 1024;
    char *text = malloc(len + 1);
    uint64_t rng = 7;
    const char *words[] = {"Once", "upon", "a", "time", "Lily", "\xC3\xA9t\xC3\xA9",
                           "\xF0\x9F\x98\x80", "\n", ",", "the", "  ", "\xE4\xB8\xAD"};
    size_t o = 0;
    while (o < len) {
        const char *w = words[tu_rand_u64(&rng) % (sizeof words / sizeof *words)];
        size_t wl = strlen(w);
        if (o + wl + 1 > len)
            break;
        memcpy(text + o, w, wl);
        o += wl;
        text[o++] = ' ';
    }
    check_round_trip(v, text, o);
    /* One long run of a single character: many equal-score merges in a row. */
    memset(text, 'a', len);
    check_round_trip(v, text, len);
    memset(text, ' ', len);
    check_round_trip(v, text, len);
    free(text);
    seer_vocab_free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* Hand-made vocabularies                                                                   */

static void test_merge_order_by_score(void **state) {
    /* Leftmost-first merging would give "ab|c"; the higher-scoring "bc" must win. */
    tok_def t[] = {{"a", -10, 0}, {"b", -10, 0}, {"c", -10, 0}, {"ab", -3, 0}, {"bc", -2, 0},
                   {"d", -10, 0}, {"cd", -1, 0}, {"abcd", -5, 0}, {"ab" "cd", -4, 0}};
    seer_vocab *v = mk_vocab(t, 9, false, false);
    assert_string_equal(ENC(v, "abc", false, false), "a|bc");
    /* "cd" (-1) merges first, then "ab" (-3), then "ab"+"cd": of the two tokens spelled
     * "abcd" the lower id is the one found. */
    assert_string_equal(ENC(v, "abcd", false, false), "abcd");
    int32_t ids[4];
    int n;
    ASSERT_OK(seer_vocab_encode(v, "abcd", 4, false, false, ids, 4, &n));
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 3 + 7);
    seer_vocab_free(v);

    /* Equal scores: the leftmost pair merges first. */
    tok_def t2[] = {{"a", -10, 0}, {"aa", -1, 0}};
    v = mk_vocab(t2, 2, false, false);
    assert_string_equal(ENC(v, "aaa", false, false), "aa|a");
    assert_string_equal(ENC(v, "aaaaa", false, false), "aa|aa|a");
    seer_vocab_free(v);

    /* A pair only merges through tokens that exist: "xyz" needs "xy" or "yz" first. */
    tok_def t3[] = {{"x", -10, 0}, {"y", -10, 0}, {"z", -10, 0}, {"xyz", 0, 0}};
    v = mk_vocab(t3, 4, false, false);
    assert_string_equal(ENC(v, "xyz", false, false), "x|y|z");
    seer_vocab_free(v);
}

static void test_byte_fallback(void **state) {
    tok_def t[] = {{SP, -1, 0}, {"h", -5, 0}, {"i", -5, 0}, {SP "hi", -2, 0}, {"hi", -3, 0}};
    seer_vocab *v = mk_vocab(t, 5, true, true);
    assert_string_equal(ENC(v, "hi \xF0\x9F\x98\x80", false, false),
                        SP "hi|" SP "|<0xF0>|<0x9F>|<0x98>|<0x80>");
    assert_string_equal(ENC(v, "\xC3\xA9", false, false), SP "|<0xC3>|<0xA9>");
    seer_vocab_free(v);

    /* Without byte tokens an unknown character becomes one <unk>. */
    v = mk_vocab(t, 5, false, true);
    assert_string_equal(ENC(v, "hi\xC3\xA9hi", true, false), "<s>|" SP "hi|<unk>|hi");
    seer_vocab_free(v);
}

static void test_dummy_prefix(void **state) {
    tok_def t[] = {{SP, -1, 0},      {"h", -5, 0},       {"i", -5, 0},
                   {SP "hi", -2, 0}, {"hi", -3, 0},      {SP SP, -4, 0}};
    seer_vocab *on = mk_vocab(t, 6, true, true), *off = mk_vocab(t, 6, true, false);
    assert_string_equal(ENC(on, "hi hi", false, false), SP "hi|" SP "hi");
    assert_string_equal(ENC(off, "hi hi", false, false), "hi|" SP "hi");
    assert_string_equal(ENC(on, "hi hi", true, false), "<s>|" SP "hi|" SP "hi");
    /* Only spaces: each becomes "▁", plus the dummy one. */
    assert_string_equal(ENC(on, "   ", false, false), SP SP "|" SP SP);
    assert_string_equal(ENC(off, "   ", false, false), SP SP "|" SP);
    assert_string_equal(ENC(on, " hi", false, false), SP "|" SP "hi");
    seer_vocab_free(on);
    seer_vocab_free(off);
}

static void test_special_tokens(void **state) {
    tok_def t[] = {{SP, -1, 0},
                   {"h", -5, 0},
                   {"i", -5, 0},
                   {SP "hi", -2, 0},
                   {"hi", -3, 0},
                   {"<", -6, 0},
                   {">", -6, 0},
                   {"s", -6, 0},
                   {"/", -6, 0},
                   {"<|im|>", 0, SEER_TOKEN_USER_DEFINED},
                   {"<|im|>x", 0, SEER_TOKEN_CONTROL},
                   {"x", -6, 0},
                   {"ab", 0, SEER_TOKEN_USER_DEFINED},
                   {"bcd", 0, SEER_TOKEN_USER_DEFINED},
                   {"a", -6, 0}};
    seer_vocab *v = mk_vocab(t, 15, true, true);
    /* After a special token no dummy prefix is added. */
    assert_string_equal(ENC(v, "<s>hi</s>", false, true), "<s>|hi|</s>");
    assert_string_equal(ENC(v, "hi<s>hi", false, true), SP "hi|<s>|hi");
    assert_string_equal(ENC(v, "<s>hi</s>", false, false),
                        SP "|<|s|>|hi|<|/|s|>");
    /* The longer special token claims its text first. */
    assert_string_equal(ENC(v, "<|im|>x<|im|>", false, true), "<|im|>x|<|im|>");
    /* Longest first, over the whole text (llama.cpp's partitioning): "bcd" before "ab". */
    assert_string_equal(ENC(v, "abcd", false, true), SP "|a|bcd");
    assert_string_equal(ENC(v, "<s><s>", true, true), "<s>|<s>|<s>");
    assert_string_equal(ENC(v, "<s", false, true), SP "|<|s");
    /* Control tokens print nothing; user-defined tokens print their text. */
    char buf[16];
    assert_int_equal(seer_vocab_piece(v, seer_vocab_find(v, "<|im|>x", 7), buf, 16), 0);
    assert_int_equal(seer_vocab_piece(v, seer_vocab_find(v, "<|im|>", 6), buf, 16), 6);
    assert_string_equal(buf, "<|im|>");
    assert_int_equal(seer_vocab_n_special(v), 6);
    assert_string_equal(seer_vocab_text(v, seer_vocab_special(v, 0)), "<|im|>x");
    seer_vocab_free(v);

    /* Plain text never turns into control tokens, neither by merging nor as a character. */
    tok_def t2[] = {{"<", -6, 0}, {">", -6, 0}, {"s", -6, 0}, {"<s", -1, 0},
                    {"@", 0, SEER_TOKEN_CONTROL}};
    v = mk_vocab(t2, 5, true, false);
    assert_string_equal(ENC(v, "<s>@", false, false), "<s|>|<0x40>");
    assert_string_equal(ENC(v, "<s>@", false, true), "<s>|@");
    seer_vocab_free(v);
}

static void test_empty_and_nul(void **state) {
    tok_def t[] = {{SP, -1, 0}, {"a", -5, 0}, {"b", -5, 0}};
    seer_vocab *v = mk_vocab(t, 3, true, true);
    int n = -1;
    ASSERT_OK(seer_vocab_encode(v, "", 0, false, false, NULL, 0, &n));
    assert_int_equal(n, 0);
    ASSERT_OK(seer_vocab_encode(v, NULL, 0, false, true, NULL, 0, &n));
    assert_int_equal(n, 0);
    assert_string_equal(ENC(v, "", true, false), "<s>");
    assert_string_equal(enc_str(v, "a\0b", 3, false, false), SP "|a|<0x00>|b");
    assert_string_equal(enc_str(v, "\0", 1, false, true), SP "|<0x00>");
    seer_vocab_free(v);
}

static void test_capacity(void **state) {
    tok_def t[] = {{SP, -1, 0}, {"a", -5, 0}, {"b", -5, 0}};
    seer_vocab *v = mk_vocab(t, 3, true, true);
    int32_t ids[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
    int n = -1;
    assert_int_equal(seer_vocab_encode(v, "ab a", 4, true, false, ids, 3, &n),
                     SEER_ERR_INVALID_ARG);
    assert_int_equal(n, 6); /* <s> ▁ a b ▁ a */
    assert_int_equal(ids[3], -7);
    assert_int_equal(ids[0], 1);
    n = -1;
    assert_int_equal(seer_vocab_encode(v, "ab a", 4, true, false, NULL, 0, &n),
                     SEER_ERR_INVALID_ARG);
    assert_int_equal(n, 6);
    ASSERT_OK(seer_vocab_encode(v, "ab a", 4, true, false, ids, 6, &n));
    assert_int_equal(n, 6);
    /* Bad arguments. */
    assert_int_equal(seer_vocab_encode(v, NULL, 3, true, false, ids, 8, &n), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_vocab_encode(v, "a", 1, true, false, ids, -1, &n), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_vocab_encode(v, "a", 1, true, false, NULL, 4, &n), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_vocab_encode(v, "a", 1, true, false, ids, 8, NULL), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_vocab_encode(NULL, "a", 1, true, false, ids, 8, &n),
                     SEER_ERR_INVALID_ARG);
    seer_vocab_free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* UTF-8                                                                                    */

/* An independent validator that decodes code points and checks their ranges. */
static bool ref_utf8_valid(const uint8_t *s, size_t n, size_t *bad) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        int need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = need > 0 && i + (size_t)need <= n;
        uint32_t cp = need == 1 ? c : need == 2 ? c & 0x1F : need == 3 ? c & 0x0F : c & 0x07;
        for (int k = 1; ok && k < need; k++) {
            ok = (s[i + k] & 0xC0) == 0x80;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (ok && (cp < min_cp[need] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)))
            ok = false;
        if (!ok) {
            *bad = i;
            return false;
        }
        i += (size_t)need;
    }
    return true;
}

static void test_utf8_rejects(void **state) {
    static const struct {
        const char *s;
        size_t len, off;
    } bad[] = {
        {"\x80", 1, 0},                   /* stray continuation */
        {"ab\xC0\xAF", 4, 2},             /* overlong '/' */
        {"\xC1\xBF", 2, 0},               /* overlong */
        {"\xE0\x80\xAF", 3, 0},           /* overlong 3-byte */
        {"\xF0\x80\x80\xAF", 4, 0},       /* overlong 4-byte */
        {"x\xED\xA0\x80", 4, 1},          /* surrogate U+D800 */
        {"x\xED\xBF\xBF", 4, 1},          /* surrogate U+DFFF */
        {"\xF4\x90\x80\x80", 4, 0},       /* U+110000 */
        {"\xF5\x80\x80\x80", 4, 0},       /* lead byte past U+10FFFF */
        {"\xFF", 1, 0},
        {"abc\xE2\x82", 5, 3},            /* truncated at the end */
        {"abc\xF0\x9F\x98", 6, 3},
        {"\xE2\x28\xA1", 3, 0},           /* bad continuation */
        {"ok \xC3\xA9 \xC3", 7, 6},
        {"a\0\xC3(", 4, 2},
    };
    tok_def t[] = {{SP, -1, 0}};
    seer_vocab *v = mk_vocab(t, 1, true, true);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t off = 999;
        assert_false(seer_utf8_valid(bad[i].s, bad[i].len, &off));
        assert_int_equal(off, bad[i].off);
        int32_t ids[32];
        int n = -5;
        assert_int_equal(seer_vocab_encode(v, bad[i].s, bad[i].len, true, true, ids, 32, &n),
                         SEER_ERR_FORMAT);
        assert_int_equal(n, -5);
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte offset %zu", bad[i].off);
        assert_non_null(strstr(seer_last_error(), want));
    }
    static const char *const good[] = {"\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF",
                                       "\xEE\x80\x80", "\xEF\xBF\xBF", "\xF0\x90\x80\x80",
                                       "\xF4\x8F\xBF\xBF"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_true(seer_utf8_valid(good[i], strlen(good[i]), NULL));
    seer_vocab_free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* Streaming detokenizer                                                                    */

static int push(seer_vocab_detok *d, int32_t id, char *buf) {
    return seer_vocab_detok_push(d, id, buf, 64);
}

static void test_detok_partial_sequences(void **state) {
    tok_def t[] = {{SP, -1, 0}, {"A", -5, 0}, {SP "hi", -2, 0}};
    seer_vocab *v = mk_vocab(t, 3, true, true);
    seer_vocab_detok d;
    seer_vocab_detok_init(&d, v);
    char buf[64];
    /* U+1F600 as four byte tokens: nothing until the last one. */
    assert_int_equal(push(&d, 3 + 0xF0, buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(push(&d, 3 + 0x9F, buf), 0);
    assert_int_equal(push(&d, 3 + 0x98, buf), 0);
    assert_int_equal(push(&d, 3 + 0x80, buf), 4);
    assert_string_equal(buf, "\xF0\x9F\x98\x80");

    /* A lead byte followed by ASCII: U+FFFD, then the ASCII. */
    assert_int_equal(push(&d, 3 + 0xE2, buf), 0);
    assert_int_equal(push(&d, 3 + 256 + 1, buf), 4);
    assert_string_equal(buf, "\xEF\xBF\xBD" "A");
    /* Bytes that can never start a sequence come out at once, one U+FFFD each. */
    assert_int_equal(push(&d, 3 + 0xFF, buf), 3);
    assert_string_equal(buf, "\xEF\xBF\xBD");
    assert_int_equal(push(&d, 3 + 0xC0, buf), 3);
    assert_int_equal(push(&d, 3 + 0xAF, buf), 3);
    /* ED A0 (a surrogate's start) is ill-formed at its second byte: two replacements. */
    assert_int_equal(push(&d, 3 + 0xED, buf), 0);
    assert_int_equal(push(&d, 3 + 0xA0, buf), 6);
    assert_string_equal(buf, "\xEF\xBF\xBD\xEF\xBF\xBD");
    /* E2 82 then a new lead byte: the maximal subpart E2 82 is one U+FFFD. */
    assert_int_equal(push(&d, 3 + 0xE2, buf), 0);
    assert_int_equal(push(&d, 3 + 0x82, buf), 0);
    assert_int_equal(push(&d, 3 + 0xE2, buf), 3);
    assert_int_equal(push(&d, 3 + 0x82, buf), 0);
    assert_int_equal(push(&d, 3 + 0xAC, buf), 3);
    assert_string_equal(buf, "\xE2\x82\xAC");

    /* Flush of an unfinished sequence: one U+FFFD, then nothing is held. */
    assert_int_equal(push(&d, 3 + 0xF0, buf), 0);
    assert_int_equal(push(&d, 3 + 0x9F, buf), 0);
    assert_int_equal(seer_vocab_detok_flush(&d, buf, 64), 3);
    assert_string_equal(buf, "\xEF\xBF\xBD");
    assert_int_equal(seer_vocab_detok_flush(&d, buf, 64), 0);
    assert_int_equal(push(&d, 3 + 0x80, buf), 3); /* a stray continuation now */

    /* Bad ids print nothing and change nothing. */
    assert_int_equal(push(&d, -1, buf), 0);
    assert_int_equal(push(&d, 100000, buf), 0);
    seer_vocab_free(v);

    /* Multi-byte pieces that finish (or break) a held sequence: only odd vocabularies have
     * token texts that start inside a character, but they must still decode exactly. */
    tok_def odd[] = {{"\x9F\x98\x80ok", 0, 0}, {"\x82\xAC\xE2\x82", 0, 0}, {"\x98\x80", 0, 0}};
    v = mk_vocab(odd, 3, true, false);
    seer_vocab_detok_init(&d, v);
    assert_int_equal(push(&d, 3 + 0xF0, buf), 0);
    assert_int_equal(push(&d, 259, buf), 6);
    assert_string_equal(buf, "\xF0\x9F\x98\x80ok");
    assert_int_equal(push(&d, 3 + 0xE2, buf), 0);
    assert_int_equal(push(&d, 260, buf), 3); /* "€" out, a new E2 82 held */
    assert_string_equal(buf, "\xE2\x82\xAC");
    assert_int_equal(push(&d, 3 + 0xAC, buf), 3);
    assert_int_equal(push(&d, 3 + 0xF0, buf), 0);
    assert_int_equal(push(&d, 3 + 0x9F, buf), 0);
    assert_int_equal(push(&d, 261, buf), 4);
    assert_string_equal(buf, "\xF0\x9F\x98\x80");
    assert_int_equal(push(&d, 3 + 0xF4, buf), 0);
    assert_int_equal(push(&d, 261, buf), 9); /* F4 98 is past U+10FFFF at its second byte */
    assert_string_equal(buf, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    seer_vocab_free(v);
}

static void test_detok_capacity(void **state) {
    tok_def t[] = {{SP, -1, 0}, {"A", -5, 0}, {SP "hi", -2, 0}};
    seer_vocab *v = mk_vocab(t, 3, true, true);
    seer_vocab_detok d;
    seer_vocab_detok_init(&d, v);
    char buf[64];
    assert_int_equal(push(&d, 3 + 0xF0, buf), 0);
    assert_int_equal(push(&d, 3 + 0x9F, buf), 0);
    assert_int_equal(push(&d, 3 + 0x98, buf), 0);
    /* 4 bytes + NUL do not fit in 4: refused, nothing consumed. */
    assert_int_equal(seer_vocab_detok_push(&d, 3 + 0x80, buf, 4), -1);
    assert_int_equal(d.n_held, 3);
    assert_int_equal(seer_vocab_detok_push(&d, 3 + 0x80, buf, 5), 4);
    assert_string_equal(buf, "\xF0\x9F\x98\x80");
    /* Even an empty result needs room for the NUL. */
    assert_int_equal(seer_vocab_detok_push(&d, 1, buf, 0), -1);
    assert_false(d.strip_pending);
    assert_int_equal(seer_vocab_detok_push(&d, 1, buf, 1), 0);
    assert_true(d.strip_pending);
    assert_int_equal(seer_vocab_detok_push(&d, 3 + 256 + 2, buf, 3), 2); /* "▁hi" -> "hi" */
    assert_string_equal(buf, "hi");
    assert_int_equal(push(&d, 3 + 0xC3, buf), 0);
    assert_int_equal(seer_vocab_detok_flush(&d, buf, 3), -1);
    assert_int_equal(seer_vocab_detok_flush(&d, buf, 4), 3);
    seer_vocab_free(v);
}

static void test_detok_leading_space(void **state) {
    tok_def t[] = {{SP, -1, 0}, {"A", -5, 0}, {SP "hi", -2, 0}};
    seer_vocab *v = mk_vocab(t, 3, true, true);
    int32_t hi = 3 + 256 + 2, sp = 3 + 256;
    int32_t a[] = {1, hi, hi, 2, 1, sp, hi};
    char *s = detok_all(v, a, 7, NULL);
    assert_string_equal(s, "hi hi hi"); /* the space-only piece after the second BOS goes */
    free(s);
    /* Without BOS nothing is stripped: a caller streaming only generated tokens. */
    int32_t b[] = {hi, hi};
    s = detok_all(v, b, 2, NULL);
    assert_string_equal(s, " hi hi");
    free(s);
    /* Control tokens between BOS and the text keep the strip pending. */
    int32_t c[] = {1, 2, hi};
    s = detok_all(v, c, 3, NULL);
    assert_string_equal(s, "hi");
    free(s);
    /* The option can be turned off. */
    seer_vocab_detok d;
    seer_vocab_detok_init(&d, v);
    assert_true(d.strip_leading_space);
    d.strip_leading_space = false;
    char buf[64];
    assert_int_equal(push(&d, 1, buf), 0);
    assert_int_equal(push(&d, hi, buf), 3);
    assert_string_equal(buf, " hi");
    seer_vocab_free(v);
    /* Vocabularies without the dummy prefix do not strip by default. */
    v = mk_vocab(t, 3, true, false);
    seer_vocab_detok_init(&d, v);
    assert_false(d.strip_leading_space);
    seer_vocab_free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* Random input                                                                             */

/* The naive form of the algorithm (as llama2.c runs it): rescan all adjacent pairs after
 * every merge, merge the best-scoring (leftmost on ties), then byte fallback. */
static int ref_encode(const seer_vocab *v, const char *s, size_t n, bool prefix, int32_t *out) {
    char buf[1024];
    size_t o = 0;
    size_t off[400], len[400];
    int ns = 0;
    if (prefix) {
        memcpy(buf, SP, 3);
        off[ns] = 0, len[ns++] = 3, o = 3;
    }
    for (size_t i = 0; i < n;) {
        if (s[i] == ' ') {
            memcpy(buf + o, SP, 3);
            off[ns] = o, len[ns++] = 3, o += 3, i++;
            continue;
        }
        size_t k = (size_t)seer_utf8_len_from_lead((uint8_t)s[i]);
        memcpy(buf + o, s + i, k);
        off[ns] = o, len[ns++] = k, o += k, i += k;
    }
    for (;;) {
        int best = -1;
        float best_score = 0;
        for (int i = 0; i + 1 < ns; i++) {
            int32_t id = seer_vocab_find(v, buf + off[i], len[i] + len[i + 1]);
            if (id < 0 || seer_vocab_type(v, id) != SEER_TOKEN_NORMAL)
                continue;
            if (best < 0 || seer_vocab_score(v, id) > best_score)
                best = i, best_score = seer_vocab_score(v, id);
        }
        if (best < 0)
            break;
        len[best] += len[best + 1];
        memmove(off + best + 1, off + best + 2, (size_t)(ns - best - 2) * sizeof *off);
        memmove(len + best + 1, len + best + 2, (size_t)(ns - best - 2) * sizeof *len);
        ns--;
    }
    int m = 0;
    for (int i = 0; i < ns; i++) {
        int32_t id = seer_vocab_find(v, buf + off[i], len[i]);
        if (id >= 0 && seer_vocab_type(v, id) == SEER_TOKEN_NORMAL)
            out[m++] = id;
        else
            for (size_t k = 0; k < len[i]; k++)
                out[m++] = seer_vocab_byte_token(v, (uint8_t)buf[off[i] + k]);
    }
    return m;
}

static void test_random_vs_reference(void **state) {
    static const char *const alpha[] = {"a", "b", "c", SP, "\xC3\xA9", "\xE4\xB8\xAD"};
    static const char *const in_alpha[] = {"a", "b", "c", " ", "\xC3\xA9", "\xE4\xB8\xAD", "d"};
    uint64_t rng = 12345;
    for (int round = 0; round < 40; round++) {
        /* A random vocabulary of unique strings over the alphabet, scores with many ties. */
        tok_def t[120];
        char texts[120][40];
        int nt = 0;
        for (int i = 0; i < 5; i++) /* the single characters except "d" */
            t[nt] = (tok_def){alpha[i], -100, 0}, nt++;
        while (nt < 120) {
            int len = 2 + (int)(tu_rand_u64(&rng) % 4);
            texts[nt][0] = 0;
            for (int k = 0; k < len; k++)
                strcat(texts[nt], alpha[tu_rand_u64(&rng) % 6]);
            bool dup = false;
            for (int j = 0; j < nt && !dup; j++)
                dup = strcmp(t[j].text, texts[nt]) == 0;
            if (dup)
                continue;
            t[nt] = (tok_def){texts[nt], -(float)(tu_rand_u64(&rng) % 8), 0};
            nt++;
        }
        bool prefix = round % 2 == 0;
        seer_vocab *v = mk_vocab(t, nt, true, prefix);
        for (int trial = 0; trial < 50; trial++) {
            char s[200];
            size_t n = 0;
            int chars = (int)(tu_rand_u64(&rng) % 40);
            for (int k = 0; k < chars; k++) {
                const char *c = in_alpha[tu_rand_u64(&rng) % 7];
                memcpy(s + n, c, strlen(c));
                n += strlen(c);
            }
            int32_t got[400], want[400];
            int ng = -1;
            ASSERT_OK(seer_vocab_encode(v, s, n, false, false, got, 400, &ng));
            int nw = n ? ref_encode(v, s, n, prefix, want) : 0;
            assert_int_equal(ng, nw);
            assert_memory_equal(got, want, (size_t)ng * sizeof *got);
        }
        seer_vocab_free(v);
    }
}

static void test_fuzz_bytes(void **state) {
    seer_vocab *v = load_stories();
    uint64_t rng = 99;
    static const char *const pieces[] = {"a", " ", "  ", "e", "\n", "\xC3\xA9", "\xE2\x82\xAC",
                                         "\xF0\x9F\x98\x80", "<s>", "\x00", "the", "\t"};
    int n_valid = 0;
    for (int it = 0; it < 3000; it++) {
        uint8_t s[96];
        size_t n = 0;
        size_t target = tu_rand_u64(&rng) % 64;
        while (n < target) {
            uint64_t r = tu_rand_u64(&rng);
            if (it % 3 == 0) {
                s[n++] = (uint8_t)r; /* raw random bytes: mostly invalid */
            } else {
                const char *p = pieces[r % 12];
                size_t pl = r % 12 == 9 ? 1 : strlen(p);
                memcpy(s + n, p, pl);
                n += pl;
                if (it % 3 == 2 && (r >> 32) % 10 == 0)
                    s[n++] = (uint8_t)(r >> 40); /* sprinkle a random byte */
            }
        }
        size_t off_ref = 0, off = 0;
        bool valid_ref = ref_utf8_valid(s, n, &off_ref);
        bool valid = seer_utf8_valid((const char *)s, n, &off);
        assert_int_equal(valid, valid_ref);
        int32_t ids[512];
        int k = -1;
        seer_status st = seer_vocab_encode(v, (const char *)s, n, true, it % 2, ids, 512, &k);
        if (valid) {
            ASSERT_OK(st);
            check_round_trip(v, (const char *)s, n);
            n_valid++;
        } else {
            assert_int_equal(off, off_ref);
            assert_int_equal(st, SEER_ERR_FORMAT);
        }
    }
    assert_true(n_valid > 1000);

    /* Random token streams: the detokenizer's output is always valid UTF-8, and equals the
     * whole concatenation of the pieces decoded at once. */
    for (int it = 0; it < 500; it++) {
        int32_t ids[40];
        int n = 1 + (int)(tu_rand_u64(&rng) % 40);
        for (int i = 0; i < n; i++) {
            uint64_t r = tu_rand_u64(&rng);
            ids[i] = r % 3 == 0 ? 3 + (int32_t)((r >> 8) % 256) : 259 + (int32_t)((r >> 8) % 253);
        }
        if (it % 10 == 0) { /* a bad id: ignored */
            uint64_t r = tu_rand_u64(&rng);
            ids[n / 2] = (r & 1) ? 512 + (int32_t)((r >> 1) % 1000)
                                 : -1 - (int32_t)((r >> 1) % 500);
        }
        size_t dl;
        char *dec = detok_all(v, ids, (size_t)n, &dl);
        assert_true(seer_utf8_valid(dec, dl, NULL));
        char raw[1024], want[4096];
        size_t nr = 0, nw = 0;
        for (int i = 0; i < n; i++) {
            int pl;
            const char *p = seer_vocab_piece_ref(v, ids[i], &pl);
            if (p) {
                memcpy(raw + nr, p, (size_t)pl);
                nr += (size_t)pl;
            }
        }
        for (size_t i = 0; i < nr;) {
            int c = seer_utf8_next((const uint8_t *)raw + i, nr - i);
            if (c > 0) {
                memcpy(want + nw, raw + i, (size_t)c);
                nw += (size_t)c, i += (size_t)c;
            } else {
                memcpy(want + nw, "\xEF\xBF\xBD", 3);
                nw += 3;
                i += c < 0 ? (size_t)-c : nr - i; /* an unfinished tail: one U+FFFD */
            }
        }
        assert_int_equal(dl, nw);
        assert_memory_equal(dec, want, nw);
        free(dec);
    }
    seer_vocab_free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* GGUF metadata                                                                            */

static seer_status load_from_writer(gguf_writer *w, seer_vocab **out) {
    uint8_t *buf = NULL;
    size_t size = 0;
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size));
    seer_gguf_writer_free(w);
    gguf_file *f = NULL;
    ASSERT_OK(seer_gguf_file_open_memory(buf, size, &f));
    seer_status s = seer_vocab_load(f, out);
    seer_gguf_file_close(f);
    free(buf);
    return s;
}

static gguf_writer *tiny_writer(const char *model) {
    static const char *const texts[] = {"<unk>", "<s>", "</s>", "<0x41>", SP "hi",
                                        "h",     "i",   SP,     "hi"};
    gguf_writer *w = seer_gguf_writer_init();
    if (model)
        seer_gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    seer_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, 9);
    return w;
}

static void test_gguf_load(void **state) {
    /* Only tokens: scores 0, byte tokens recognised by their text, Llama default ids. */
    seer_vocab *v = NULL;
    ASSERT_OK(load_from_writer(tiny_writer("llama"), &v));
    assert_int_equal(seer_vocab_size(v), 9);
    assert_int_equal(seer_vocab_bos(v), 1);
    assert_int_equal(seer_vocab_eos(v), 2);
    assert_int_equal(seer_vocab_byte_token(v, 0x41), 3);
    assert_true(seer_vocab_add_space_prefix(v));
    assert_string_equal(ENC(v, "hiA", true, false), "<s>|" SP "hi|<0x41>");
    seer_vocab_free(v);

    /* Scores, types, explicit ids (an out-of-range one counts as absent), flags. */
    gguf_writer *w = tiny_writer("llama");
    float scores[9] = {0, 0, 0, 0, -1, -2, -2, -3, -1.5f};
    int32_t types[9] = {2, 3, 3, 6, 1, 1, 1, 1, 1};
    seer_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, 9);
    seer_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 9);
    seer_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    seer_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 80);
    seer_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false);
    seer_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    ASSERT_OK(load_from_writer(w, &v));
    assert_int_equal(seer_vocab_bos(v), 2);
    assert_int_equal(seer_vocab_eos(v), -1);
    assert_false(seer_vocab_add_space_prefix(v));
    assert_false(seer_vocab_add_bos(v));
    assert_int_equal(seer_vocab_type(v, 0), SEER_TOKEN_UNKNOWN);
    assert_string_equal(ENC(v, "hi hi", true, false), "</s>|hi|" SP "hi");
    seer_vocab_free(v);

    v = (seer_vocab *)0x1;
    /* A byte-level BPE vocabulary needs its merges (tests/test_bpe.c loads complete ones). */
    assert_int_equal(load_from_writer(tiny_writer("gpt2"), &v), SEER_ERR_FORMAT);
    assert_null(v);
    assert_non_null(strstr(seer_last_error(), "tokenizer.ggml.merges"));
    assert_int_equal(load_from_writer(tiny_writer("bert"), &v), SEER_ERR_UNSUPPORTED);
    assert_non_null(strstr(seer_last_error(), "'bert'"));
    assert_int_equal(load_from_writer(tiny_writer(NULL), &v), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "tokenizer.ggml.model"));

    w = seer_gguf_writer_init();
    seer_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    assert_int_not_equal(load_from_writer(w, &v), SEER_OK); /* no tokens */
    assert_null(v);

    w = tiny_writer("llama");
    seer_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, 8);
    assert_int_equal(load_from_writer(w, &v), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "scores"));

    w = tiny_writer("llama");
    seer_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 7);
    assert_int_equal(load_from_writer(w, &v), SEER_ERR_FORMAT);

    w = tiny_writer("llama");
    seer_gguf_writer_set_arr_str(w, "tokenizer.ggml.scores", (const char *const[]){"x"}, 1);
    assert_int_not_equal(load_from_writer(w, &v), SEER_OK);

    w = tiny_writer("llama");
    seer_gguf_writer_set_str(w, "tokenizer.ggml.bos_token_id", "one");
    assert_int_not_equal(load_from_writer(w, &v), SEER_OK);
    assert_null(v);

    /* Odd but harmless: unknown token types count as normal, empty texts are never found. */
    w = seer_gguf_writer_init();
    seer_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    seer_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const[]){"", "x", "", SP},
                            4);
    seer_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", (const int32_t[]){1, 99, -3, 1}, 4);
    ASSERT_OK(load_from_writer(w, &v));
    assert_int_equal(seer_vocab_type(v, 1), SEER_TOKEN_NORMAL);
    assert_int_equal(seer_vocab_find(v, "", 0), -1);
    assert_string_equal(ENC(v, "x x", false, false), SP "|x|" SP "|x");
    seer_vocab_free(v);
}

/* Corrupted tokenizer metadata: whatever the GGUF reader accepts, the vocabulary either
 * loads and works or is refused with a message. */
static void test_gguf_corrupt(void **state) {
    gguf_writer *w = tiny_writer("llama");
    float scores[9] = {0, 0, 0, 0, -1, -2, -2, -3, -1.5f};
    int32_t types[9] = {2, 3, 3, 6, 1, 1, 1, 1, 4};
    seer_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, 9);
    seer_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 9);
    seer_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    uint8_t *orig = NULL;
    size_t size = 0;
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &orig, &size));
    seer_gguf_writer_free(w);
    uint8_t *buf = malloc(size);
    uint64_t rng = 4242;
    int n_loaded = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, orig, size);
        int flips = 1 + (int)(tu_rand_u64(&rng) % 4);
        for (int k = 0; k < flips; k++) {
            uint64_t r = tu_rand_u64(&rng);
            buf[r % size] = (uint8_t)(r >> 32);
        }
        gguf_file *f = NULL;
        if (seer_gguf_file_open_memory(buf, size, &f) != SEER_OK)
            continue;
        seer_vocab *v = NULL;
        seer_status s = seer_vocab_load(f, &v);
        seer_gguf_file_close(f);
        if (s != SEER_OK) {
            assert_null(v);
            assert_true(seer_last_error()[0] != 0);
            continue;
        }
        n_loaded++;
        int32_t ids[64];
        int n = 0;
        s = seer_vocab_encode(v, "hi <s>A\xC3\xA9", 9, true, true, ids, 64, &n);
        assert_true(s == SEER_OK || s == SEER_ERR_UNSUPPORTED);
        size_t dl;
        if (s == SEER_OK)
            free(detok_all(v, ids, (size_t)n, &dl));
        seer_vocab_free(v);
    }
    assert_true(n_loaded > 0);
    free(buf);
    free(orig);
}

/* The public API over a loaded model: seer_tokenize and seer_detok_* reach the same code. */
static void test_public_api(void **state) {
    seer_model *m = NULL;
    ASSERT_OK(seer_model_load(tu_data_path("models/stories260K.gguf"),
                              seer_model_default_params(), &m));
    int32_t ids[16];
    int n = -1;
    ASSERT_OK(seer_tokenize(m, "Once upon a time", 16, true, false, ids, 16, &n));
    const int32_t want[] = {1, 403, 407, 261, 378};
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    assert_int_equal(seer_tokenize(m, "a\xFF", 2, true, false, ids, 16, &n), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "offset 1"));
    char piece[16];
    assert_int_equal(seer_token_piece(m, 403, piece, sizeof piece), 5);
    assert_string_equal(piece, " Once");

    seer_detok *d = NULL;
    assert_int_equal(seer_detok_init(NULL, &d), SEER_ERR_INVALID_ARG);
    ASSERT_OK(seer_detok_init(m, &d));
    char text[64] = "", buf[16];
    for (int i = 0; i < n; i++) {
        int k = seer_detok_push(d, ids[i], buf, sizeof buf);
        assert_true(k >= 0);
        strcat(text, buf);
    }
    assert_string_equal(text, "Once upon a time");
    assert_int_equal(seer_detok_push(d, 3 + 0xE2, buf, sizeof buf), 0);
    assert_int_equal(seer_detok_flush(d, buf, 2), -1);
    assert_int_equal(seer_detok_flush(d, buf, sizeof buf), 3);
    assert_string_equal(buf, "\xEF\xBF\xBD");
    assert_int_equal(seer_detok_push(NULL, 5, buf, sizeof buf), -1);
    seer_detok_free(d);
    seer_detok_free(NULL);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories_metadata),
        cmocka_unit_test(test_stories_golden_encode),
        cmocka_unit_test(test_stories_golden_decode),
        cmocka_unit_test(test_stories_round_trip),
        cmocka_unit_test(test_stories_long_input),
        cmocka_unit_test(test_merge_order_by_score),
        cmocka_unit_test(test_byte_fallback),
        cmocka_unit_test(test_dummy_prefix),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_empty_and_nul),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_utf8_rejects),
        cmocka_unit_test(test_detok_partial_sequences),
        cmocka_unit_test(test_detok_capacity),
        cmocka_unit_test(test_detok_leading_space),
        cmocka_unit_test(test_random_vs_reference),
        cmocka_unit_test(test_fuzz_bytes),
        cmocka_unit_test(test_gguf_load),
        cmocka_unit_test(test_gguf_corrupt),
        cmocka_unit_test(test_public_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
