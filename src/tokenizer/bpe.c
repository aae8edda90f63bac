/*
 * bpe.c: text -> token ids for byte-level BPE vocabularies (tokenizer.ggml.model = "gpt2").
 *
 * The algorithm is GPT-2's (Radford et al. 2019, encoder.py) as llama.cpp and Hugging Face
 * tokenizers run it: a regex pre-tokenizer cuts the text into words, each word's bytes are
 * spelled in the byte-level alphabet (every byte one printable character), and inside a word
 * the adjacent pair with the lowest merge rank is merged again and again (ties: leftmost).
 * The final symbols are looked up as tokens. The regexes are those llama.cpp uses for each
 * tokenizer.ggml.pre, run by PCRE2 with Unicode properties; a list of several regexes is
 * applied in turn, each cutting the pieces the previous one left (matches and the text
 * between them both become pieces).
 *
 * Not for: special-token matching (encode.c) or decoding (vocab.c builds the pieces with
 * seer_bpe_decode_text).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/merge_queue.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Pre-tokenizers                                                                           */

/* \s as llama.cpp (and Unicode's White_Space property) define it; PCRE2's \s leaves out
 * U+0085, so the class is spelled out. */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
           "\\x{202F}\\x{205F}\\x{3000}"

#define RE_GPT2 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])"

/* The Llama 3 and Qwen2 expressions differ only in how many digits make a word. The
 * original's (?i:'s|...) is written out case by case, as in llama.cpp. */
#define RE_LLAMA3_LIKE(DIGITS)                                                                  \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}" DIGITS "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS \
    "])|[" WS "]+"

typedef struct {
    const char *pattern;
    /* llama.cpp's hand-written splitters for the GPT-2/Llama 3/Qwen2 expressions emit each
     * unmatched character as its own piece; its std::regex path keeps a run of unmatched
     * text whole. Both are followed. */
    bool gap_per_char;
} pre_regex;

typedef struct {
    const char *family;
    const char *names; /* tokenizer.ggml.pre values, '|'-separated */
    int n_re;
    pre_regex re[4];
    bool ignore_merges; /* a word that is a token is taken whole (Llama 3) */
    bool add_bos;       /* default of tokenizer.ggml.add_bos_token */
} pre_def;

static const pre_def k_pre[] = {
    {"default", "default|", 4,
     {{"[\\p{P}\\$\\+<=>\\^`\\|]+", false}, {RE_GPT2, true}, {"\\p{N}+", false},
      {"[0-9][0-9][0-9]", false}},
     false, false},
    {"gpt2", "gpt2|gpt-2|phi-2|mpt|olmo|jais|jina-es|jina-de|jina-v2-es|jina-v2-de|roberta-bpe|", 1,
     {{RE_GPT2, true}}, false, false},
    {"llama3", "llama3|llama-v3|llama-bpe|falcon3|dbrx|smaug-bpe|", 1,
     {{RE_LLAMA3_LIKE("{1,3}"), true}}, true, true},
    {"qwen2", "qwen2|deepseek-r1-qwen|stablelm2|megrez|", 1, {{RE_LLAMA3_LIKE(""), true}}, false,
     false},
    {"smollm", "smollm|starcoder|refact|command-r|codeshell|exaone|minerva-7b|", 2,
     {{"\\p{N}", false}, {RE_GPT2, true}}, false, false},
};

static const pre_def *find_pre(const char *pre) {
    if (!pre || !*pre)
        return &k_pre[0];
    size_t n = strlen(pre);
    for (size_t i = 0; i < sizeof k_pre / sizeof *k_pre; i++) {
        for (const char *p = k_pre[i].names; *p;) {
            const char *bar = strchr(p, '|');
            if ((size_t)(bar - p) == n && memcmp(p, pre, n) == 0)
                return &k_pre[i];
            p = bar + 1;
        }
    }
    return NULL;
}

seer_status seer_bpe_check_pre(const char *pre) {
    if (find_pre(pre))
        return SEER_OK;
    char name[48];
    size_t o = 0;
    for (const char *p = pre; *p && o + 1 < sizeof name; p++)
        name[o++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    name[o] = 0;
    return seer_err(SEER_ERR_UNSUPPORTED,
                    "BPE pre-tokenizer '%s' (tokenizer.ggml.pre) is not supported; known: "
                    "default, gpt2, llama-bpe (llama3), qwen2, smollm and their aliases",
                    name);
}

bool seer_bpe_pre_add_bos(const char *pre) {
    const pre_def *d = find_pre(pre);
    return d && d->add_bos;
}

/* ---------------------------------------------------------------------------------------- */
/* The object                                                                               */

struct seer_bpe {
    const pre_def *pre;
    pcre2_code *re[4];
    /* Merges: pool holds each merge as left||right, with the split offset; open addressing
     * on the concatenation and the split. */
    char *pool;
    size_t *m_off;     /* [n_merges] */
    uint32_t *m_len;   /* [n_merges] */
    uint32_t *m_split; /* [n_merges] bytes of the left part */
    int n_merges;
    int32_t *hash;     /* [hash_mask + 1] merge index or -1 */
    size_t hash_mask;
};

static uint64_t merge_hash(const char *s, size_t len, size_t split) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)split;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

void seer_bpe_free(seer_bpe *b) {
    if (!b)
        return;
    for (int i = 0; i < 4; i++)
        pcre2_code_free(b->re[i]);
    free(b->pool);
    free(b->m_off);
    free(b->m_len);
    free(b->m_split);
    free(b->hash);
    free(b);
}

static seer_status compile_pre(seer_bpe *b) {
    for (int i = 0; i < b->pre->n_re; i++) {
        int code;
        PCRE2_SIZE at;
        b->re[i] = pcre2_compile((PCRE2_SPTR)b->pre->re[i].pattern, PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
        if (!b->re[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            return seer_err(SEER_ERR_INTERNAL, "pre-tokenizer %s: regex %d: %s at %zu",
                            b->pre->family, i, (const char *)msg, (size_t)at);
        }
        /* JIT is only a speed-up: without it (no JIT support) the interpreter matches the same. */
        (void)pcre2_jit_compile(b->re[i], PCRE2_JIT_COMPLETE);
    }
    return SEER_OK;
}

static seer_status build_merges(seer_bpe *b, const char *const *merges, const size_t *lens,
                                int n) {
    size_t pool = 0;
    for (int i = 0; i < n; i++) {
        if (!merges[i] && (!lens || lens[i]))
            return seer_err(SEER_ERR_INVALID_ARG, "merge %d has no text", i);
        size_t len = lens ? lens[i] : (merges[i] ? strlen(merges[i]) : 0);
        if (len > (1u << 20))
            return seer_err(SEER_ERR_INVALID_ARG, "merge %d is %zu bytes long", i, len);
        pool += len;
    }
    b->pool = malloc(pool ? pool : 1);
    b->m_off = seer_malloc_array((size_t)n + 1, sizeof *b->m_off);
    b->m_len = seer_malloc_array((size_t)n + 1, sizeof *b->m_len);
    b->m_split = seer_malloc_array((size_t)n + 1, sizeof *b->m_split);
    size_t cap = 16;
    while (cap < (size_t)n * 2)
        cap *= 2;
    b->hash = seer_malloc_array(cap, sizeof *b->hash);
    if (!b->pool || !b->m_off || !b->m_len || !b->m_split || !b->hash)
        return seer_err(SEER_ERR_OOM, "out of memory for %d merges", n);
    memset(b->hash, 0xff, cap * sizeof *b->hash);
    b->hash_mask = cap - 1;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        const char *m = merges[i];
        size_t len = lens ? lens[i] : (m ? strlen(m) : 0);
        /* llama.cpp splits at the first space after the first byte; a merge without one
         * pairs "" with "", which no pair of symbols can ever match. */
        const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        size_t split = 0, total = 0;
        if (sp) {
            split = (size_t)(sp - m);
            total = len - 1;
            memcpy(b->pool + o, m, split);
            memcpy(b->pool + o + split, sp + 1, len - split - 1);
        }
        b->m_off[i] = o;
        b->m_len[i] = (uint32_t)total;
        b->m_split[i] = (uint32_t)split;
        o += total;
        if (split == 0 || split == total)
            continue;
        for (size_t h = (size_t)merge_hash(b->pool + b->m_off[i], total, split) & b->hash_mask;;
             h = (h + 1) & b->hash_mask) {
            int32_t j = b->hash[h];
            if (j < 0) {
                b->hash[h] = i;
                break;
            }
            /* A repeated merge keeps its first (lowest) rank. */
            if (b->m_len[j] == total && b->m_split[j] == split &&
                memcmp(b->pool + b->m_off[j], b->pool + b->m_off[i], total) == 0)
                break;
        }
    }
    b->n_merges = n;
    return SEER_OK;
}

seer_status seer_bpe_init(const char *pre, const char *const *merges, const size_t *merge_lens,
                          int n_merges, seer_bpe **out) {
    if (!out)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_bpe_init: out is NULL");
    *out = NULL;
    if (n_merges < 0 || (n_merges > 0 && !merges))
        return seer_err(SEER_ERR_INVALID_ARG, "seer_bpe_init: bad merge list");
    SEER_TRY(seer_bpe_check_pre(pre));
    const pre_def *d = find_pre(pre);
    seer_bpe *b = calloc(1, sizeof *b);
    if (!b)
        return seer_err(SEER_ERR_OOM, "out of memory for a BPE tokenizer");
    b->pre = d;
    seer_status s = compile_pre(b);
    if (s == SEER_OK)
        s = build_merges(b, merges, merge_lens, n_merges);
    if (s != SEER_OK) {
        seer_bpe_free(b);
        return s;
    }
    *out = b;
    return SEER_OK;
}

const char *seer_bpe_pre_family(const seer_bpe *b) { return b ? b->pre->family : ""; }

int seer_bpe_rank(const seer_bpe *b, const char *s, size_t left_len, size_t len) {
    if (!b || left_len == 0 || left_len >= len)
        return -1;
    for (size_t h = (size_t)merge_hash(s, len, left_len) & b->hash_mask;;
         h = (h + 1) & b->hash_mask) {
        int32_t j = b->hash[h];
        if (j < 0)
            return -1;
        if (b->m_len[j] == len && b->m_split[j] == left_len &&
            memcmp(b->pool + b->m_off[j], s, len) == 0)
            return j;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* The byte-level alphabet                                                                  */

static bool byte_is_self(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

static unsigned byte_codepoint(uint8_t b) {
    if (byte_is_self(b))
        return b;
    /* The 68 other bytes, in order: 0x00-0x20, 0x7F-0xA0, 0xAD. */
    unsigned n = b <= 0x20 ? b : b <= 0xA0 ? 33u + (b - 0x7Fu) : 67u;
    return 256 + n;
}

/* The byte a codepoint stands for, or -1. */
static int codepoint_byte(unsigned cp) {
    if (cp < 256)
        return byte_is_self(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    unsigned n = cp - 256;
    return n < 33 ? (int)n : n < 67 ? (int)(0x7F + n - 33) : 0xAD;
}

int seer_bpe_byte_char(uint8_t b, char out[2]) {
    unsigned cp = byte_codepoint(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

size_t seer_bpe_decode_text(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const uint8_t *p = (const uint8_t *)s + i;
        int b = -1;
        size_t k = 1;
        if (p[0] < 0x80) {
            b = codepoint_byte(p[0]);
        } else if (i + 1 < n && (p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) {
            b = codepoint_byte(((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu));
            k = 2;
        }
        if (b >= 0) {
            out[o++] = (char)b;
        } else {
            /* Not a character of the alphabet (a hand-made vocabulary, or added text): keep
             * its bytes. A longer sequence is copied over the next loop turns byte by byte. */
            memcpy(out + o, p, k);
            o += k;
        }
        i += k;
    }
    return o;
}

/* ---------------------------------------------------------------------------------------- */
/* Pre-tokenization                                                                         */

typedef struct {
    size_t *a;
    size_t n, cap;
} size_vec;

static seer_status sv_push(size_vec *v, size_t x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        size_t *p = realloc(v->a, cap * sizeof *p);
        if (!p)
            return seer_err(SEER_ERR_OOM, "out of memory while pre-tokenizing");
        v->a = p;
        v->cap = cap;
    }
    v->a[v->n++] = x;
    return SEER_OK;
}

/* Pushes the end of the gap [from, to) as one piece or one piece per character. */
static seer_status push_gap(size_vec *out, const char *s, size_t from, size_t to, bool per_char) {
    if (!per_char)
        return from < to ? sv_push(out, to) : SEER_OK;
    while (from < to) {
        int k = seer_utf8_len_from_lead((uint8_t)s[from]);
        from += k > 0 ? (size_t)k : 1;
        SEER_TRY(sv_push(out, from < to ? from : to));
    }
    return SEER_OK;
}

/* One regex over each piece [prev end, end) of in; the results go to out. */
static seer_status split_stage(const pcre2_code *re, bool per_char, pcre2_match_data *md,
                               pcre2_match_context *mc, const char *s, const size_vec *in,
                               size_vec *out) {
    size_t start = 0;
    for (size_t w = 0; w < in->n; w++) {
        size_t end = in->a[w], off = 0, prev = 0, len = end - start;
        const char *sub = s + start;
        while (off < len) {
            int rc = pcre2_match(re, (PCRE2_SPTR)sub, len, off, PCRE2_NO_UTF_CHECK, md, mc);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                PCRE2_UCHAR msg[128];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return seer_err(SEER_ERR_INVALID_ARG, "pre-tokenizer regex failed on a word of "
                                "%zu bytes: %s", len, (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me <= ms) {
                /* None of the expressions can match empty text; step over a character in
                 * case one ever does. */
                int k = seer_utf8_len_from_lead((uint8_t)sub[off]);
                off += k > 0 ? (size_t)k : 1;
                continue;
            }
            SEER_TRY(push_gap(out, s, start + prev, start + ms, per_char));
            SEER_TRY(sv_push(out, start + me));
            prev = off = me;
        }
        SEER_TRY(push_gap(out, s, start + prev, end, per_char));
        start = end;
    }
    return SEER_OK;
}

seer_status seer_bpe_pretokenize(const seer_bpe *b, const char *s, size_t n, size_t **ends,
                                 size_t *n_words) {
    *ends = NULL;
    *n_words = 0;
    if (n == 0)
        return SEER_OK;
    size_vec cur = {0}, next = {0};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    seer_status st = md && mc ? sv_push(&cur, n) : seer_err(SEER_ERR_OOM, "out of memory");
    /* Every expression matches in time linear in the run it looks at (\s*[\r\n]+ scans a
     * whitespace run and gives it back once), but a run of millions of spaces exceeds
     * PCRE2's default step limit; the limit is only a guard against runaway patterns. */
    if (mc)
        pcre2_set_match_limit(mc, UINT32_MAX);
    for (int i = 0; st == SEER_OK && i < b->pre->n_re; i++) {
        next.n = 0;
        st = split_stage(b->re[i], b->pre->re[i].gap_per_char, md, mc, s, &cur, &next);
        size_vec t = cur;
        cur = next;
        next = t;
    }
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    free(next.a);
    if (st != SEER_OK) {
        free(cur.a);
        return st;
    }
    *ends = cur.a;
    *n_words = cur.n;
    return SEER_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Merging                                                                                  */

typedef seer_merge_sym symbol; /* over the bytes of the encoded word */

typedef struct {
    const seer_vocab *v;
    const seer_bpe *b;
    char *buf;    /* the encoded word */
    symbol *sym;
    size_t cap;   /* bytes buf holds; sym holds cap / 1 entries at most */
    seer_merge_queue h;
} word_state;

static seer_status try_pair(void *ctx, int32_t left, int32_t right) {
    word_state *w = ctx;
    if (left < 0 || right < 0)
        return SEER_OK;
    const symbol *l = &w->sym[left], *r = &w->sym[right];
    uint32_t len = l->len + r->len;
    int rank = seer_bpe_rank(w->b, w->buf + l->off, l->len, len);
    if (rank < 0)
        return SEER_OK;
    return seer_merge_push(&w->h, (seer_merge){-(double)rank, left, right, len});
}

/* Emits a final symbol: its token, else the token of each of its characters (every byte has
 * one in a real vocabulary; one that is missing is dropped, as llama.cpp does). */
static seer_status emit(const seer_vocab *v, const char *s, size_t n, seer_id_vec *out) {
    int32_t id = seer_vocab_find(v, s, n);
    if (id >= 0)
        return seer_id_vec_push(out, id);
    for (size_t i = 0; i < n;) {
        int k = seer_utf8_next((const uint8_t *)s + i, n - i);
        size_t step = k > 0 ? (size_t)k : 1;
        id = seer_vocab_find(v, s + i, step);
        if (id >= 0)
            SEER_TRY(seer_id_vec_push(out, id));
        i += step;
    }
    return SEER_OK;
}

static seer_status encode_word(word_state *w, const char *s, size_t n, seer_id_vec *out) {
    /* Each raw byte becomes a one- or two-byte character of the alphabet. */
    if (2 * n > w->cap) {
        size_t cap = 2 * n;
        char *nb = realloc(w->buf, cap);
        if (!nb)
            return seer_err(SEER_ERR_OOM, "out of memory encoding a word of %zu bytes", n);
        w->buf = nb;
        symbol *ns = realloc(w->sym, n * sizeof *ns);
        if (!ns)
            return seer_err(SEER_ERR_OOM, "out of memory encoding a word of %zu bytes", n);
        w->sym = ns;
        w->cap = cap;
    }
    uint32_t o = 0;
    int32_t n_sym = (int32_t)n;
    for (size_t i = 0; i < n; i++) {
        int k = seer_bpe_byte_char((uint8_t)s[i], w->buf + o);
        w->sym[i] = (symbol){(int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, o, (uint32_t)k};
        o += (uint32_t)k;
    }
    if (w->b->pre->ignore_merges) {
        int32_t id = seer_vocab_find(w->v, w->buf, o);
        if (id >= 0)
            return seer_id_vec_push(out, id);
    }
    SEER_TRY(seer_merge_run(&w->h, w->sym, n_sym, try_pair, w));
    for (int32_t i = 0; i >= 0 && i < n_sym; i = w->sym[i].next)
        SEER_TRY(emit(w->v, w->buf + w->sym[i].off, w->sym[i].len, out));
    return SEER_OK;
}

/* Pre-tokenizes and encodes a stretch of valid UTF-8. */
static seer_status encode_valid(word_state *w, const char *s, size_t n, seer_id_vec *out) {
    size_t *ends, n_words;
    SEER_TRY(seer_bpe_pretokenize(w->b, s, n, &ends, &n_words));
    seer_status st = SEER_OK;
    size_t start = 0;
    for (size_t i = 0; i < n_words && st == SEER_OK; i++) {
        st = encode_word(w, s + start, ends[i] - start, out);
        start = ends[i];
    }
    free(ends);
    return st;
}

seer_status seer_bpe_encode_plain(const seer_vocab *v, const char *s, size_t n, seer_id_vec *out) {
    const seer_bpe *b = seer_vocab_bpe(v);
    if (!b)
        return seer_err(SEER_ERR_INTERNAL, "BPE encoding without BPE tables");
    word_state w = {.v = v, .b = b};
    seer_status st = SEER_OK;
    /* The text was validated, but a special token with an ill-formed text could have cut a
     * character: such stray bytes are words of their own, between valid stretches. */
    size_t i = 0, run = 0;
    while (i < n && st == SEER_OK) {
        int k = seer_utf8_next((const uint8_t *)s + i, n - i);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        size_t bad = k < 0 ? (size_t)-k : n - i;
        if (i > run)
            st = encode_valid(&w, s + run, i - run, out);
        if (st == SEER_OK)
            st = encode_word(&w, s + i, bad, out);
        i += bad;
        run = i;
    }
    if (st == SEER_OK && n > run)
        st = encode_valid(&w, s + run, n - run, out);
    free(w.buf);
    free(w.sym);
    free(w.h.a);
    return st;
}
