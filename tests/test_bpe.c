/*
 * test_bpe.c: byte-level BPE vocabularies (src/tokenizer/bpe.c and the BPE parts of
 * vocab.c, encode.c): the byte <-> unicode alphabet, the pre-tokenizer regexes of each
 * family, merge order against a naive re-scanning reference, added and control tokens, BOS,
 * pieces and streaming decode of split characters, loading from GGUF metadata, bad input,
 * and encode/decode round trips of random text. Real vocabularies are checked against
 * llama.cpp's ids in test_real_models.c.
 */
#include "testutil.h"

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                  */

/* Spells raw bytes in the byte-level alphabet (static buffer). */
static const char *enc_bytes(const char *s) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    size_t o = 0;
    for (const char *p = s; *p; p++)
        o += (size_t)seer_bpe_byte_char((uint8_t)*p, buf[k] + o);
    buf[k][o] = 0;
    return buf[k];
}

typedef struct {
    const char *text; /* raw text; stored spelled in the alphabet unless special */
    int type;         /* 0: normal */
} tok_def;

/* A vocabulary of the 256 byte characters (ids 0..255, in byte order), then extra tokens.
 * merges are given in raw text "left right" and spelled in the alphabet here. */
static seer_vocab *mk_bpe(const char *pre, const tok_def *extra, int n_extra,
                          const char *const *merges, int n_merges, bool add_bos, int bos,
                          int eos) {
    int n = 256 + n_extra;
    char **texts = calloc((size_t)n, sizeof *texts);
    int32_t *types = calloc((size_t)n, sizeof *types);
    for (int b = 0; b < 256; b++) {
        texts[b] = calloc(3, 1);
        seer_bpe_byte_char((uint8_t)b, texts[b]);
        types[b] = SEER_TOKEN_NORMAL;
    }
    for (int i = 0; i < n_extra; i++) {
        int t = extra[i].type ? extra[i].type : SEER_TOKEN_NORMAL;
        texts[256 + i] = strdup(t == SEER_TOKEN_NORMAL ? enc_bytes(extra[i].text) : extra[i].text);
        types[256 + i] = t;
    }
    char **m = calloc((size_t)n_merges + 1, sizeof *m);
    for (int i = 0; i < n_merges; i++) {
        /* Spell each side separately; the separating space stays a real space. */
        const char *sp = strchr(merges[i] + 1, ' ');
        char left[64], right[64];
        snprintf(left, sizeof left, "%.*s", (int)(sp - merges[i]), merges[i]);
        snprintf(right, sizeof right, "%s", sp + 1);
        char both[256];
        snprintf(both, sizeof both, "%s", enc_bytes(left));
        strcat(both, " ");
        strcat(both, enc_bytes(right));
        m[i] = strdup(both);
    }
    seer_vocab_desc d = {.kind = SEER_VOCAB_BPE, .model_name = "gpt2", .n = n,
                         .texts = (const char *const *)texts, .types = types, .bos = bos,
                         .eos = eos, .unk = -1, .pad = -1, .add_bos = add_bos,
                         .merges = (const char *const *)m, .n_merges = n_merges, .pre = pre};
    seer_vocab *v = NULL;
    ASSERT_OK(seer_vocab_from_arrays(&d, &v));
    for (int i = 0; i < n; i++)
        free(texts[i]);
    for (int i = 0; i < n_merges; i++)
        free(m[i]);
    free(texts);
    free(types);
    free(m);
    return v;
}

/* Encodes and returns the tokens' pieces joined by '|' (static buffer). */
static const char *enc_str(const seer_vocab *v, const char *text, size_t len, bool bos,
                           bool special) {
    static char out[8192];
    int32_t ids[1024];
    int n = -1;
    ASSERT_OK(seer_vocab_encode(v, text, len, bos, special, ids, 1024, &n));
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        int t = seer_vocab_type(v, ids[i]);
        const char *p;
        int pl;
        if (t == SEER_TOKEN_CONTROL) {
            p = seer_vocab_text(v, ids[i]);
            pl = seer_vocab_text_len(v, ids[i]);
        } else {
            p = seer_vocab_piece_ref(v, ids[i], &pl);
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%.*s", i ? "|" : "", pl, p);
    }
    return out;
}

#define ENC(v, lit, bos, special) enc_str(v, lit, sizeof(lit) - 1, bos, special)

/* The words of the pre-tokenizer of family pre, joined by '|' (static buffer). */
static const char *words(const char *pre, const char *text, size_t len) {
    static char out[4096];
    seer_bpe *b = NULL;
    ASSERT_OK(seer_bpe_init(pre, NULL, NULL, 0, &b));
    size_t *ends, n;
    ASSERT_OK(seer_bpe_pretokenize(b, text, len, &ends, &n));
    size_t o = 0, start = 0;
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(ends[i] > start);
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%.*s", i ? "|" : "",
                              (int)(ends[i] - start), text + start);
        start = ends[i];
    }
    assert_int_equal(start, len);
    free(ends);
    seer_bpe_free(b);
    return out;
}

#define WORDS(pre, lit) words(pre, lit, sizeof(lit) - 1)

/* ---------------------------------------------------------------------------------------- */
/* The alphabet                                                                             */

static void test_byte_alphabet(void **state) {
    (void)state;
    char seen[256][3];
    for (int b = 0; b < 256; b++) {
        char c[3] = {0};
        int k = seer_bpe_byte_char((uint8_t)b, c);
        assert_in_range(k, 1, 2);
        /* printable ASCII and most of Latin-1 stand for themselves */
        if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) {
            unsigned cp = k == 1 ? (uint8_t)c[0]
                                 : (((uint8_t)c[0] & 0x1Fu) << 6) | ((uint8_t)c[1] & 0x3Fu);
            assert_int_equal(cp, b);
        }
        for (int j = 0; j < b; j++)
            assert_false(strcmp(seen[j], c) == 0);
        memcpy(seen[b], c, 3);
        char back[4];
        assert_int_equal(seer_bpe_decode_text(c, (size_t)k, back), 1);
        assert_int_equal((uint8_t)back[0], b);
    }
    /* GPT-2's well-known spellings: space Ġ (U+0120), newline Ċ (U+010A), tab ĉ (U+0109),
     * 0x7F ġ (U+0121), soft hyphen Ń (U+0143). */
    assert_string_equal(enc_bytes(" "), "\xC4\xA0");
    assert_string_equal(enc_bytes("\n"), "\xC4\x8A");
    assert_string_equal(enc_bytes("\t"), "\xC4\x89");
    assert_string_equal(enc_bytes("\x7F"), "\xC4\xA1");
    assert_string_equal(enc_bytes("\xAD"), "\xC5\x83");
    /* a character outside the alphabet passes through */
    char out[8];
    assert_int_equal(seer_bpe_decode_text("\xE2\x82\xAC", 3, out), 3);
    assert_memory_equal(out, "\xE2\x82\xAC", 3);
}

/* ---------------------------------------------------------------------------------------- */
/* Pre-tokenizers                                                                           */

static void test_pre_gpt2(void **state) {
    (void)state;
    assert_string_equal(WORDS("gpt2", "Hello world's  test 123 !!"),
                        "Hello| world|'s| | test| 123| !!");
    assert_string_equal(WORDS("gpt2", "I'M ok"), "I|'|M| ok"); /* case-sensitive contractions */
    assert_string_equal(WORDS("gpt2", "a  \n\n b"), "a|  \n\n| b");
    assert_string_equal(WORDS("gpt2", "end   "), "end|   ");
    assert_string_equal(WORDS("gpt2", "\tx"), "\t|x"); /* lone whitespace before a word */
    /* U+0085 is whitespace, as in llama.cpp and Unicode (PCRE2's \s leaves it out) */
    assert_string_equal(WORDS("gpt2", "!\xC2\x85x"), "!|\xC2\x85|x");
    assert_string_equal(WORDS("gpt2", "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD"),
                        "caf\xC3\xA9| \xE4\xBD\xA0\xE5\xA5\xBD");
    assert_string_equal(WORDS("gpt2", ""), "");
    /* aliases */
    assert_string_equal(WORDS("gpt-2", "a b"), "a| b");
    assert_string_equal(WORDS("olmo", "a b"), "a| b");
}

static void test_pre_llama3(void **state) {
    (void)state;
    assert_string_equal(WORDS("llama-bpe", "12345 x1234567"), "123|45| x|123|456|7");
    assert_string_equal(WORDS("llama-bpe", "I'M here"), "I|'M| here");
    assert_string_equal(WORDS("llama-bpe", "Hello\n\nworld"), "Hello|\n\n|world");
    assert_string_equal(WORDS("llama-bpe", "  hi"), " | hi");
    assert_string_equal(WORDS("llama-bpe", "x \n y"), "x| \n| y");
    assert_string_equal(WORDS("llama-bpe", "(a)!!\n\n"), "(a|)!!\n\n");
    assert_string_equal(WORDS("llama-bpe", "\tfoo"), "\tfoo"); /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    assert_string_equal(WORDS("llama3", " 42"), " |42");
}

static void test_pre_qwen2(void **state) {
    (void)state;
    assert_string_equal(WORDS("qwen2", "12345"), "1|2|3|4|5");
    assert_string_equal(WORDS("qwen2", " 2024 is"), " |2|0|2|4| is");
    assert_string_equal(WORDS("qwen2", "def f(x):\n    return x"),
                        "def| f|(x|):\n|   | return| x");
    assert_string_equal(WORDS("deepseek-r1-qwen", "ab12"), "ab|1|2");
}

static void test_pre_smollm(void **state) {
    (void)state;
    /* \p{N} first: every digit its own piece, then the GPT-2 expression on what is left */
    assert_string_equal(WORDS("smollm", "x 2024 y"), "x| |2|0|2|4| y");
    assert_string_equal(WORDS("smollm", "ab12cd"), "ab|1|2|cd");
    assert_string_equal(WORDS("starcoder", "v2"), "v|2");
}

static void test_pre_default(void **state) {
    (void)state;
    /* punctuation runs first, then GPT-2, then digit runs, then groups of three digits */
    assert_string_equal(WORDS("default", "a+b=3.14"), "a|+|b|=|3|.|14");
    assert_string_equal(WORDS("default", "12345 abc"), "123|45| abc");
    assert_string_equal(WORDS(NULL, "x, y"), "x|,| y");
    assert_string_equal(WORDS("", "x!"), "x|!");
}

static void test_pre_unknown(void **state) {
    (void)state;
    seer_bpe *b = (seer_bpe *)0x1;
    assert_int_equal(seer_bpe_init("no-such-pre", NULL, NULL, 0, &b), SEER_ERR_UNSUPPORTED);
    assert_null(b);
    assert_non_null(strstr(seer_last_error(), "'no-such-pre'"));
    assert_non_null(strstr(seer_last_error(), "tokenizer.ggml.pre"));
    assert_int_equal(seer_bpe_check_pre("qwen2"), SEER_OK);
    assert_true(seer_bpe_pre_add_bos("llama-bpe"));
    assert_false(seer_bpe_pre_add_bos("qwen2"));
}

/* ---------------------------------------------------------------------------------------- */
/* Merges                                                                                   */

static void test_merge_order(void **state) {
    (void)state;
    /* lower rank wins over position: "b c" (rank 0) before "a b" (rank 1) */
    static const char *const m1[] = {"b c", "a b"};
    static const tok_def t1[] = {{"bc", 0}, {"ab", 0}};
    seer_vocab *v = mk_bpe("gpt2", t1, 2, m1, 2, false, -1, -1);
    assert_string_equal(ENC(v, "abc", false, false), "a|bc");
    seer_vocab_free(v);

    /* equal ranks: leftmost first */
    static const char *const m2[] = {"a a"};
    static const tok_def t2[] = {{"aa", 0}};
    v = mk_bpe("gpt2", t2, 1, m2, 1, false, -1, -1);
    assert_string_equal(ENC(v, "aaa", false, false), "aa|a");
    assert_string_equal(ENC(v, "aaaa", false, false), "aa|aa");
    seer_vocab_free(v);

    /* chained merges across the space character; words never merge across words */
    static const char *const m3[] = {"h e", "l l", "he ll", "hell o", "  w", " w o"};
    static const tok_def t3[] = {{"he", 0}, {"ll", 0}, {"hell", 0}, {"hello", 0},
                                 {" w", 0}, {" wo", 0}};
    v = mk_bpe("gpt2", t3, 6, m3, 6, false, -1, -1);
    assert_string_equal(ENC(v, "hello world", false, false), "hello| wo|r|l|d");
    assert_string_equal(ENC(v, "hellohello", false, false), "hello|hello");
    seer_vocab_free(v);

    /* Llama 3 takes a whole word that is a token without merging (ignore_merges) */
    static const tok_def t4[] = {{"xyz", 0}};
    v = mk_bpe("llama-bpe", t4, 1, NULL, 0, false, -1, -1);
    assert_string_equal(ENC(v, "xyz", false, false), "xyz");
    seer_vocab_free(v);
    v = mk_bpe("gpt2", t4, 1, NULL, 0, false, -1, -1);
    assert_string_equal(ENC(v, "xyz", false, false), "x|y|z");
    seer_vocab_free(v);
}

/* The rank lookup sees exactly the merges given, split at the first space after byte 0. */
static void test_merge_table(void **state) {
    (void)state;
    const char *m[] = {"a b", "ab c", "  x", "a b"};
    seer_bpe *b = NULL;
    ASSERT_OK(seer_bpe_init("gpt2", m, NULL, 4, &b));
    assert_int_equal(seer_bpe_rank(b, "ab", 1, 2), 0); /* a repeated merge keeps rank 0 */
    assert_int_equal(seer_bpe_rank(b, "abc", 2, 3), 1);
    assert_int_equal(seer_bpe_rank(b, " x", 1, 2), 2); /* a left side that is a space */
    assert_int_equal(seer_bpe_rank(b, "abc", 1, 3), -1);
    assert_int_equal(seer_bpe_rank(b, "ba", 1, 2), -1);
    assert_int_equal(seer_bpe_rank(b, "ab", 0, 2), -1);
    seer_bpe_free(b);
}

/* Naive reference BPE: rescan all adjacent pairs for the lowest rank, merge the leftmost. */
static int naive_bpe(const seer_bpe *b, const char *w, size_t n, size_t *cuts) {
    int ns = 0;
    for (size_t i = 0; i < n;) {
        int k = seer_utf8_len_from_lead((uint8_t)w[i]);
        cuts[ns++] = i;
        i += (size_t)k;
    }
    cuts[ns] = n;
    for (;;) {
        int best = -1, best_rank = 1 << 30;
        for (int i = 0; i + 1 < ns; i++) {
            int r = seer_bpe_rank(b, w + cuts[i], cuts[i + 1] - cuts[i], cuts[i + 2] - cuts[i]);
            if (r >= 0 && r < best_rank) {
                best_rank = r;
                best = i;
            }
        }
        if (best < 0)
            return ns;
        memmove(cuts + best + 1, cuts + best + 2, (size_t)(ns - best - 1) * sizeof *cuts);
        ns--;
    }
}

static void test_merge_random_vs_naive(void **state) {
    (void)state;
    /* Merges over the letters a-d, including ones whose result is no token (allowed: the
     * final symbol then falls back to its characters). */
    const char *m[] = {"a b", "c d", "ab cd", "b a", "a a", "d d", "ba b", "aa aa", "dd c",
                       "ab ab", "c c", "abcd a"};
    int nm = sizeof m / sizeof *m;
    tok_def extra[16];
    char store[16][16];
    for (int i = 0; i < nm; i++) {
        const char *sp = strchr(m[i], ' ');
        snprintf(store[i], sizeof store[i], "%.*s%s", (int)(sp - m[i]), m[i], sp + 1);
        extra[i] = (tok_def){store[i], 0};
    }
    /* leave "dd c" out of the vocabulary */
    extra[8] = extra[nm - 1];
    seer_vocab *v = mk_bpe("gpt2", extra, nm - 1, m, nm, false, -1, -1);
    const seer_bpe *b = seer_vocab_bpe(v);
    uint64_t rng = 7;
    for (int it = 0; it < 2000; it++) {
        char w[40];
        size_t n = 1 + tu_rand_u64(&rng) % 30;
        for (size_t i = 0; i < n; i++)
            w[i] = (char)('a' + tu_rand_u64(&rng) % 4);
        w[n] = 0;
        size_t cuts[41];
        int ns = naive_bpe(b, w, n, cuts);
        char want[256];
        size_t wl = 0;
        for (int i = 0; i < ns; i++) {
            const char *sym = w + cuts[i];
            size_t L = cuts[i + 1] - cuts[i];
            /* a final symbol that is no token falls back to its characters */
            bool known = seer_vocab_find(v, sym, L) >= 0;
            for (size_t j = 0; j < (known ? 1 : L); j++) {
                if (wl)
                    want[wl++] = '|';
                size_t k = known ? L : 1;
                memcpy(want + wl, known ? sym : sym + j, k);
                wl += k;
            }
        }
        want[wl] = 0;
        const char *got = enc_str(v, w, n, false, false);
        if (strcmp(got, want) != 0)
            fail_msg("word %s: seer %s, naive %s", w, got, want);
    }
    seer_vocab_free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* Special tokens, BOS, pieces                                                              */

static seer_vocab *mk_chat_vocab(bool add_bos) {
    static const char *const m[] = {"h i"};
    static const tok_def t[] = {{"<|im_start|>", SEER_TOKEN_CONTROL},
                                {"<|im_end|>", SEER_TOKEN_CONTROL},
                                {"<tool>", SEER_TOKEN_USER_DEFINED},
                                {"hi", 0},
                                {"<s>", SEER_TOKEN_CONTROL}};
    return mk_bpe("qwen2", t, 5, m, 1, add_bos, 260, 257);
}

static void test_special_tokens(void **state) {
    (void)state;
    seer_vocab *v = mk_chat_vocab(false);
    /* control tokens only with parse_special */
    assert_string_equal(ENC(v, "<|im_start|>hi<|im_end|>", false, true), "<|im_start|>|hi|<|im_end|>");
    assert_string_equal(ENC(v, "<|im_start|>hi", false, false), "<|||i|m|_|s|t|a|r|t|||>|hi");
    /* user-defined (added) tokens are matched in any case */
    assert_string_equal(ENC(v, "a<tool>b", false, false), "a|<tool>|b");
    assert_string_equal(ENC(v, "a<tool>b", false, true), "a|<tool>|b");
    /* a special token may split a word that would otherwise merge */
    assert_string_equal(ENC(v, "h<|im_end|>i", false, true), "h|<|im_end|>|i");
    /* end-of-generation: EOS and <|im_end|> */
    assert_true(seer_vocab_is_eog(v, 257));
    assert_false(seer_vocab_is_eog(v, 256));
    assert_false(seer_vocab_is_eog(v, 'a'));
    seer_vocab_free(v);
}

static void test_bos(void **state) {
    (void)state;
    int32_t ids[8];
    int n = -1;
    /* the vocabulary does not ask for BOS: none even when the caller allows it */
    seer_vocab *v = mk_chat_vocab(false);
    ASSERT_OK(seer_vocab_encode(v, "hi", 2, true, false, ids, 8, &n));
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 259);
    seer_vocab_free(v);
    v = mk_chat_vocab(true);
    ASSERT_OK(seer_vocab_encode(v, "hi", 2, true, false, ids, 8, &n));
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 260);
    ASSERT_OK(seer_vocab_encode(v, "hi", 2, false, false, ids, 8, &n));
    assert_int_equal(n, 1);
    ASSERT_OK(seer_vocab_encode(v, "", 0, true, false, ids, 8, &n));
    assert_int_equal(n, 1);
    seer_vocab_free(v);
}

static void test_pieces_and_detok(void **state) {
    (void)state;
    static const char *const m[] = {"  h", " h i"};
    static const tok_def t[] = {{" h", 0}, {" hi", 0}, {"<|im_end|>", SEER_TOKEN_CONTROL},
                                {"<tool>", SEER_TOKEN_USER_DEFINED}};
    seer_vocab *v = mk_bpe("gpt2", t, 4, m, 2, false, -1, 258);
    char buf[16];
    assert_int_equal(seer_vocab_piece(v, 257, buf, sizeof buf), 3);
    assert_string_equal(buf, " hi");
    assert_int_equal(seer_vocab_piece(v, 0xC3, buf, sizeof buf), 1); /* a raw byte */
    assert_int_equal((uint8_t)buf[0], 0xC3);
    assert_int_equal(seer_vocab_piece(v, 258, buf, sizeof buf), 0); /* control: nothing */
    assert_int_equal(seer_vocab_piece(v, 259, buf, sizeof buf), 6); /* user-defined: its text */
    assert_string_equal(buf, "<tool>");

    /* "é" is two byte tokens; the detokenizer holds the first until the second arrives */
    int32_t ids[8];
    int n = -1;
    ASSERT_OK(seer_vocab_encode(v, " hi\xC3\xA9", 5, false, false, ids, 8, &n));
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 0xC3);
    seer_vocab_detok d;
    seer_vocab_detok_init(&d, v);
    char out[32];
    assert_int_equal(seer_vocab_detok_push(&d, ids[0], out, sizeof out), 3);
    assert_string_equal(out, " hi"); /* no leading-space stripping for BPE */
    assert_int_equal(seer_vocab_detok_push(&d, ids[1], out, sizeof out), 0);
    assert_int_equal(seer_vocab_detok_push(&d, ids[2], out, sizeof out), 2);
    assert_string_equal(out, "\xC3\xA9");
    assert_int_equal(seer_vocab_detok_push(&d, 0xE4, out, sizeof out), 0);
    assert_int_equal(seer_vocab_detok_flush(&d, out, sizeof out), 3);
    assert_string_equal(out, "\xEF\xBF\xBD");
    seer_vocab_free(v);
}

static void test_bad_input(void **state) {
    (void)state;
    seer_vocab *v = mk_chat_vocab(false);
    int32_t ids[8];
    int n = -1;
    assert_int_equal(seer_vocab_encode(v, "ok\xC3(", 4, false, false, ids, 8, &n),
                     SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "offset 2"));
    assert_int_equal(seer_vocab_encode(v, "hi hi hi", 8, false, false, ids, 1, &n),
                     SEER_ERR_INVALID_ARG);
    assert_int_equal(n, 5); /* hi, space, hi, space, hi */
    seer_vocab_free(v);

    /* a special token whose text cuts a character leaves stray bytes: they still encode */
    static const tok_def t[] = {{"\xA9x", SEER_TOKEN_USER_DEFINED}};
    v = mk_bpe("gpt2", t, 1, NULL, 0, false, -1, -1);
    ASSERT_OK(seer_vocab_encode(v, "\xC3\xA9xy", 4, false, false, ids, 8, &n));
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 0xC3);
    assert_int_equal(ids[1], 256);
    assert_int_equal(ids[2], 'y');
    seer_vocab_free(v);
}

/* Random text of ASCII, whitespace, digits, multi-byte characters and emoji encodes to ids
 * whose pieces concatenate back to the text, under every pre-tokenizer family. */
static void test_round_trip(void **state) {
    (void)state;
    static const char *const alphabet[] = {
        "a", "b", "Z", " ", "  ", "\n", "\t", "\r\n", "1", "42", "'s", "'LL", "!", ".", "(",
        "\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "\xC2\x85", "\xC2\xA0", "\xE2\x80\x8B",
        "\xD0\x96", "<", "|", "_", "\xE3\x80\x80", "\xCC\x81", "\x7F", "\x01"};
    static const char *const pres[] = {"gpt2", "llama-bpe", "qwen2", "smollm", "default"};
    static const char *const m[] = {"  a", "a b", "  1", "1 2", "' s"};
    static const tok_def t[] = {{" a", 0}, {"ab", 0}, {" 1", 0}, {"12", 0}, {"'s", 0}};
    uint64_t rng = 99;
    for (size_t p = 0; p < sizeof pres / sizeof *pres; p++) {
        seer_vocab *v = mk_bpe(pres[p], t, 5, m, 5, false, -1, -1);
        for (int it = 0; it < 300; it++) {
            char text[512];
            size_t n = 0;
            int k = (int)(tu_rand_u64(&rng) % 40);
            for (int i = 0; i < k; i++) {
                const char *a = alphabet[tu_rand_u64(&rng) % (sizeof alphabet / sizeof *alphabet)];
                memcpy(text + n, a, strlen(a));
                n += strlen(a);
            }
            int32_t ids[512];
            int nid = -1;
            ASSERT_OK(seer_vocab_encode(v, text, n, false, false, ids, 512, &nid));
            char back[1024];
            size_t o = 0;
            for (int i = 0; i < nid; i++) {
                int pl;
                const char *pc = seer_vocab_piece_ref(v, ids[i], &pl);
                memcpy(back + o, pc, (size_t)pl);
                o += (size_t)pl;
            }
            if (o != n || memcmp(back, text, n) != 0)
                fail_msg("pre %s: round trip of %zu bytes failed", pres[p], n);
        }
        seer_vocab_free(v);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Loading from GGUF                                                                        */

static gguf_writer *bpe_writer(const char *pre, bool merges) {
    gguf_writer *w = seer_gguf_writer_init();
    const char *toks[260];
    char store[256][3];
    for (int b = 0; b < 256; b++) {
        memset(store[b], 0, 3);
        seer_bpe_byte_char((uint8_t)b, store[b]);
        toks[b] = store[b];
    }
    toks[256] = "<|endoftext|>";
    toks[257] = "<|im_start|>";
    toks[258] = "<|im_end|>";
    toks[259] = "hi";
    int32_t types[260];
    for (int i = 0; i < 260; i++)
        types[i] = i >= 256 && i <= 258 ? SEER_TOKEN_CONTROL : SEER_TOKEN_NORMAL;
    const char *m[] = {"h i"};
    seer_gguf_writer_set_str(w, "general.architecture", "qwen2");
    seer_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre)
        seer_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    seer_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 260);
    seer_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 260);
    if (merges)
        seer_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", m, 1);
    seer_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256);
    seer_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 258);
    return w;
}

static seer_status load(gguf_writer *w, seer_vocab **v) {
    uint8_t *buf;
    size_t size;
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size));
    seer_gguf_writer_free(w);
    gguf_file *f = NULL;
    ASSERT_OK(seer_gguf_file_open_memory(buf, size, &f));
    seer_status s = seer_vocab_load(f, v);
    seer_gguf_file_close(f);
    free(buf);
    return s;
}

static void test_gguf_load(void **state) {
    (void)state;
    seer_vocab *v = NULL;
    ASSERT_OK(load(bpe_writer("qwen2", true), &v));
    assert_int_equal(seer_vocab_kind_of(v), SEER_VOCAB_BPE);
    assert_string_equal(seer_vocab_model_name(v), "gpt2");
    assert_string_equal(seer_bpe_pre_family(seer_vocab_bpe(v)), "qwen2");
    assert_int_equal(seer_vocab_bos(v), 256);
    assert_int_equal(seer_vocab_eos(v), 258);
    assert_int_equal(seer_vocab_unk(v), -1);
    assert_false(seer_vocab_add_bos(v)); /* qwen2's default */
    assert_false(seer_vocab_add_space_prefix(v));
    assert_true(seer_vocab_is_eog(v, 258));
    assert_true(seer_vocab_is_eog(v, 256)); /* <|endoftext|> */
    assert_string_equal(ENC(v, "<|im_start|>hi hi", true, true), "<|im_start|>|hi| |hi");
    seer_vocab_free(v);

    /* the Llama 3 family asks for BOS by default; no pre at all is "default" */
    ASSERT_OK(load(bpe_writer("llama-bpe", true), &v));
    assert_true(seer_vocab_add_bos(v));
    assert_string_equal(ENC(v, "hi", true, false), "<|endoftext|>|hi");
    seer_vocab_free(v);
    ASSERT_OK(load(bpe_writer(NULL, true), &v));
    assert_string_equal(seer_bpe_pre_family(seer_vocab_bpe(v)), "default");
    seer_vocab_free(v);

    v = (seer_vocab *)0x1;
    assert_int_equal(load(bpe_writer("klingon", true), &v), SEER_ERR_UNSUPPORTED);
    assert_null(v);
    assert_non_null(strstr(seer_last_error(), "'klingon'"));
    assert_int_equal(load(bpe_writer("qwen2", false), &v), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "tokenizer.ggml.merges"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_alphabet),   cmocka_unit_test(test_pre_gpt2),
        cmocka_unit_test(test_pre_llama3),      cmocka_unit_test(test_pre_qwen2),
        cmocka_unit_test(test_pre_smollm),      cmocka_unit_test(test_pre_default),
        cmocka_unit_test(test_pre_unknown),     cmocka_unit_test(test_merge_order),
        cmocka_unit_test(test_merge_table),     cmocka_unit_test(test_merge_random_vs_naive),
        cmocka_unit_test(test_special_tokens),  cmocka_unit_test(test_bos),
        cmocka_unit_test(test_pieces_and_detok), cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_gguf_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
