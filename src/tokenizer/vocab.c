/*
 * vocab.c: the vocabulary object: token texts, scores and types, lookup by text, the piece
 * each token prints as, and reading all of it from GGUF tokenizer.ggml.* metadata.
 *
 * Not for: encoding (encode.c, spm.c, bpe.c) or streaming decode (detok.c). SentencePiece
 * ("llama") and byte-level BPE ("gpt2") vocabularies load; others are refused.
 */
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sanity bounds: a real vocabulary has at most a few hundred thousand tokens, each a few
 * dozen bytes; these only keep index arithmetic in int range on hostile input. */
#define MAX_TOKENS (1 << 26)
#define MAX_TOKEN_BYTES (1 << 20)

struct seer_vocab {
    seer_vocab_kind kind;
    char model_name[32];
    int n;                 /* V */
    char *text_pool;       /* every text, each followed by a NUL */
    size_t *text_off;      /* [V] */
    int32_t *text_len;     /* [V] */
    float *scores;         /* [V] */
    uint8_t *types;        /* [V] normalised to 1..6 */
    char *piece_pool;
    size_t *piece_off;     /* [V] */
    int32_t *piece_len;    /* [V] */
    int32_t *hash;         /* open addressing, -1 = empty; [hash_mask + 1] */
    size_t hash_mask;
    int32_t byte_tok[256]; /* <0xXX> ids, -1 when missing */
    int32_t *special;      /* [n_special] control + user-defined, longest text first */
    int n_special;
    int bos, eos, unk, pad;
    bool add_bos, add_space_prefix;
    seer_bpe *bpe;         /* merges and pre-tokenizer of a BPE vocabulary, else NULL */
    int32_t eog[16];       /* end-of-generation ids */
    int n_eog;
};

/* FNV-1a: token texts are short, so a simple byte hash is as fast as anything here. */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "<0xXX>" -> XX, else -1. */
static int parse_byte_text(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>')
        return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void seer_vocab_free(seer_vocab *v) {
    if (!v)
        return;
    free(v->text_pool);
    free(v->text_off);
    free(v->text_len);
    free(v->scores);
    free(v->types);
    free(v->piece_pool);
    free(v->piece_off);
    free(v->piece_len);
    free(v->hash);
    free(v->special);
    seer_bpe_free(v->bpe);
    free(v);
}

typedef struct {
    int32_t len, id;
} special_key;

static int cmp_special(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The piece of a normal token is its text with each "▁" turned back into a space. */
static size_t unescape_spaces(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && (uint8_t)s[i] == 0xE2 && (uint8_t)s[i + 1] == 0x96 &&
            (uint8_t)s[i + 2] == 0x81) {
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = s[i++];
        }
    }
    return o;
}

static seer_status build_pieces(seer_vocab *v, size_t pool_bytes) {
    v->piece_pool = malloc(pool_bytes ? pool_bytes : 1);
    v->piece_off = seer_malloc_array((size_t)v->n, sizeof *v->piece_off);
    v->piece_len = seer_malloc_array((size_t)v->n, sizeof *v->piece_len);
    if (!v->piece_pool || !v->piece_off || !v->piece_len)
        return seer_err(SEER_ERR_OOM, "out of memory for %d token pieces", v->n);
    size_t o = 0;
    for (int i = 0; i < v->n; i++) {
        const char *t = v->text_pool + v->text_off[i];
        size_t n = (size_t)v->text_len[i];
        v->piece_off[i] = o;
        int b = parse_byte_text(t, n);
        if (v->kind == SEER_VOCAB_BPE && v->types[i] == SEER_TOKEN_NORMAL) {
            /* Byte-level text: each character stands for one raw byte. */
            o += seer_bpe_decode_text(t, n, v->piece_pool + o);
            v->piece_len[i] = (int32_t)(o - v->piece_off[i]);
            continue;
        }
        switch (v->types[i]) {
        case SEER_TOKEN_CONTROL:
        case SEER_TOKEN_UNUSED:
            break; /* BOS, EOS and friends print nothing */
        case SEER_TOKEN_BYTE:
            if (b >= 0)
                v->piece_pool[o++] = (char)b;
            else
                o += unescape_spaces(t, n, v->piece_pool + o);
            break;
        case SEER_TOKEN_UNKNOWN:
        case SEER_TOKEN_USER_DEFINED:
            memcpy(v->piece_pool + o, t, n);
            o += n;
            break;
        default:
            if (v->kind == SEER_VOCAB_BPE) {
                memcpy(v->piece_pool + o, t, n);
                o += n;
            } else {
                o += unescape_spaces(t, n, v->piece_pool + o);
            }
            break;
        }
        v->piece_len[i] = (int32_t)(o - v->piece_off[i]);
    }
    return SEER_OK;
}

static seer_status build_hash(seer_vocab *v) {
    size_t cap = 16;
    while (cap < (size_t)v->n * 2)
        cap *= 2;
    v->hash = seer_malloc_array(cap, sizeof *v->hash);
    if (!v->hash)
        return seer_err(SEER_ERR_OOM, "out of memory for the token hash table");
    memset(v->hash, 0xff, cap * sizeof *v->hash);
    v->hash_mask = cap - 1;
    for (int i = 0; i < v->n; i++) {
        const char *t = v->text_pool + v->text_off[i];
        size_t n = (size_t)v->text_len[i];
        if (n == 0)
            continue;
        size_t h = (size_t)hash_bytes(t, n) & v->hash_mask;
        for (;; h = (h + 1) & v->hash_mask) {
            int32_t id = v->hash[h];
            if (id < 0) {
                v->hash[h] = i;
                break;
            }
            /* A duplicate text keeps the lower id. */
            if ((size_t)v->text_len[id] == n && memcmp(v->text_pool + v->text_off[id], t, n) == 0)
                break;
        }
    }
    return SEER_OK;
}

static seer_status build_specials(seer_vocab *v) {
    int m = 0;
    for (int i = 0; i < v->n; i++)
        if ((v->types[i] == SEER_TOKEN_CONTROL || v->types[i] == SEER_TOKEN_USER_DEFINED) &&
            v->text_len[i] > 0)
            m++;
    special_key *keys = seer_malloc_array((size_t)m, sizeof *keys);
    v->special = seer_malloc_array((size_t)m, sizeof *v->special);
    if (!keys || !v->special) {
        free(keys);
        return seer_err(SEER_ERR_OOM, "out of memory for %d special tokens", m);
    }
    m = 0;
    for (int i = 0; i < v->n; i++)
        if ((v->types[i] == SEER_TOKEN_CONTROL || v->types[i] == SEER_TOKEN_USER_DEFINED) &&
            v->text_len[i] > 0)
            keys[m++] = (special_key){v->text_len[i], i};
    qsort(keys, (size_t)m, sizeof *keys, cmp_special);
    for (int i = 0; i < m; i++)
        v->special[i] = keys[i].id;
    v->n_special = m;
    free(keys);
    return SEER_OK;
}

static int id_or_none(int id, int n) { return id >= 0 && id < n ? id : -1; }

/* The texts llama.cpp treats as ending a turn or a text (llama-vocab.cpp, special_eog_ids). */
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "<|end_of_text|>",
};

static void build_eog(seer_vocab *v) {
    v->n_eog = 0;
    if (v->eos >= 0)
        v->eog[v->n_eog++] = v->eos;
    for (size_t k = 0; k < sizeof k_eog_texts / sizeof *k_eog_texts; k++) {
        int32_t id = seer_vocab_find(v, k_eog_texts[k], strlen(k_eog_texts[k]));
        if (id < 0 || id == v->eos || v->n_eog == (int)(sizeof v->eog / sizeof *v->eog))
            continue;
        if (v->types[id] == SEER_TOKEN_CONTROL || v->types[id] == SEER_TOKEN_USER_DEFINED)
            v->eog[v->n_eog++] = id;
    }
}

static seer_status vocab_fill(seer_vocab *v, const seer_vocab_desc *d) {
    int n = d->n;
    size_t pool = 0;
    for (int i = 0; i < n; i++) {
        size_t len = d->text_lens ? d->text_lens[i] : (d->texts[i] ? strlen(d->texts[i]) : 0);
        if (len > 0 && !d->texts[i])
            return seer_err(SEER_ERR_INVALID_ARG, "token %d has a length but no text", i);
        if (len > MAX_TOKEN_BYTES)
            return seer_err(SEER_ERR_INVALID_ARG, "token %d text is %zu bytes long", i, len);
        pool += len + 1;
    }
    v->n = n;
    v->text_pool = malloc(pool);
    v->text_off = seer_malloc_array((size_t)n, sizeof *v->text_off);
    v->text_len = seer_malloc_array((size_t)n, sizeof *v->text_len);
    v->scores = seer_malloc_array((size_t)n, sizeof *v->scores);
    v->types = seer_malloc_array((size_t)n, sizeof *v->types);
    if (!v->text_pool || !v->text_off || !v->text_len || !v->scores || !v->types)
        return seer_err(SEER_ERR_OOM, "out of memory for a vocabulary of %d tokens", n);
    for (int i = 0; i < 256; i++)
        v->byte_tok[i] = -1;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t len = d->text_lens ? d->text_lens[i] : (d->texts[i] ? strlen(d->texts[i]) : 0);
        if (len)
            memcpy(v->text_pool + o, d->texts[i], len);
        v->text_pool[o + len] = 0;
        v->text_off[i] = o;
        v->text_len[i] = (int32_t)len;
        o += len + 1;
        float s = d->scores ? d->scores[i] : 0.0f;
        /* NaN would break the merge order; such a merge is treated as the least wanted. */
        v->scores[i] = isnan(s) ? -INFINITY : s;
        int b = parse_byte_text(v->text_pool + v->text_off[i], len);
        int t = d->types ? d->types[i] : (b >= 0 ? SEER_TOKEN_BYTE : SEER_TOKEN_NORMAL);
        if (t < SEER_TOKEN_NORMAL || t > SEER_TOKEN_BYTE)
            t = SEER_TOKEN_NORMAL;
        v->types[i] = (uint8_t)t;
        if (t == SEER_TOKEN_BYTE && b >= 0 && v->byte_tok[b] < 0)
            v->byte_tok[b] = i;
    }
    v->bos = id_or_none(d->bos, n);
    v->eos = id_or_none(d->eos, n);
    v->unk = id_or_none(d->unk, n);
    v->pad = id_or_none(d->pad, n);
    v->add_bos = d->add_bos;
    v->add_space_prefix = d->add_space_prefix;
    v->kind = d->kind;
    const char *name = d->model_name ? d->model_name : "llama";
    size_t nl = strlen(name);
    if (nl >= sizeof v->model_name)
        nl = sizeof v->model_name - 1;
    memcpy(v->model_name, name, nl);
    v->model_name[nl] = 0;
    if (v->kind == SEER_VOCAB_BPE)
        SEER_TRY(seer_bpe_init(d->pre, d->merges, d->merge_lens, d->n_merges, &v->bpe));
    SEER_TRY(build_pieces(v, pool));
    SEER_TRY(build_hash(v));
    SEER_TRY(build_specials(v));
    build_eog(v);
    return SEER_OK;
}

seer_status seer_vocab_from_arrays(const seer_vocab_desc *d, seer_vocab **out) {
    if (!out)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_vocab_from_arrays: out is NULL");
    *out = NULL;
    if (!d || !d->texts)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_vocab_from_arrays: no token texts");
    if (d->n < 1 || d->n > MAX_TOKENS)
        return seer_err(SEER_ERR_INVALID_ARG, "vocabulary size %d is out of range", d->n);
    if (d->kind != SEER_VOCAB_SPM && d->kind != SEER_VOCAB_BPE)
        return seer_err(SEER_ERR_INVALID_ARG, "unknown vocabulary kind %d", (int)d->kind);
    seer_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return seer_err(SEER_ERR_OOM, "out of memory for a vocabulary");
    seer_status s = vocab_fill(v, d);
    if (s != SEER_OK) {
        seer_vocab_free(v);
        return s;
    }
    *out = v;
    return SEER_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* GGUF                                                                                     */

/* The model name quoted in an error message, limited to printable ASCII. */
static void printable_name(const char *s, uint64_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (uint64_t i = 0; i < n && o + 1 < cap; i++)
        buf[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    buf[o] = 0;
}

static bool str_is(const gguf_value *val, const char *lit) {
    size_t n = strlen(lit);
    return val->str.len == n && memcmp(val->str.s, lit, n) == 0;
}

static bool is_int_type(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_INT8 || t == GGUF_TYPE_UINT16 ||
           t == GGUF_TYPE_INT16 || t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

static bool is_signed_type(gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

/* An optional token id; absent keys take def, values outside [0, n) count as absent. */
static seer_status get_id(const gguf_file *f, const char *key, int def, int n, int *out) {
    int64_t x;
    SEER_TRY(seer_gguf_get_i64_opt(f, key, def, &x));
    *out = x >= 0 && x < n ? (int)x : -1;
    return SEER_OK;
}

typedef struct {
    const char **texts;
    size_t *lens;
    float *scores;
    int32_t *types;
    const char **merges;
    size_t *merge_lens;
    int n_merges;
} load_tmp;

static seer_status load_merges(const gguf_file *f, load_tmp *t) {
    const gguf_value *a;
    if (!seer_gguf_find_kv(f, "tokenizer.ggml.merges"))
        return seer_err(SEER_ERR_FORMAT, "a BPE vocabulary needs tokenizer.ggml.merges");
    SEER_TRY(seer_gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &a));
    if (a->arr.n > MAX_TOKENS)
        return seer_err(SEER_ERR_FORMAT, "tokenizer.ggml.merges has %llu entries",
                        (unsigned long long)a->arr.n);
    int n = (int)a->arr.n;
    t->merges = seer_malloc_array((size_t)n + 1, sizeof *t->merges);
    t->merge_lens = seer_malloc_array((size_t)n + 1, sizeof *t->merge_lens);
    if (!t->merges || !t->merge_lens)
        return seer_err(SEER_ERR_OOM, "out of memory reading %d merges", n);
    for (int i = 0; i < n; i++) {
        const gguf_value *it = &a->arr.items[i];
        if (it->type != GGUF_TYPE_STRING)
            return seer_err(SEER_ERR_FORMAT, "tokenizer.ggml.merges[%d] is not a string", i);
        t->merges[i] = it->str.s;
        t->merge_lens[i] = (size_t)it->str.len;
    }
    t->n_merges = n;
    return SEER_OK;
}

static seer_status load_arrays(const gguf_file *f, int n, const gguf_value *tok, load_tmp *t) {
    t->texts = seer_malloc_array((size_t)n, sizeof *t->texts);
    t->lens = seer_malloc_array((size_t)n, sizeof *t->lens);
    if (!t->texts || !t->lens)
        return seer_err(SEER_ERR_OOM, "out of memory reading %d tokens", n);
    for (int i = 0; i < n; i++) {
        const gguf_value *it = &tok->arr.items[i];
        if (it->type != GGUF_TYPE_STRING)
            return seer_err(SEER_ERR_FORMAT, "tokenizer.ggml.tokens[%d] is not a string", i);
        t->texts[i] = it->str.s;
        t->lens[i] = (size_t)it->str.len;
    }
    if (seer_gguf_find_kv(f, "tokenizer.ggml.scores")) {
        const gguf_value *a;
        SEER_TRY(seer_gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &a));
        if (a->arr.n != (uint64_t)n)
            return seer_err(SEER_ERR_FORMAT,
                            "tokenizer.ggml.scores has %llu entries but there are %d tokens",
                            (unsigned long long)a->arr.n, n);
        t->scores = seer_malloc_array((size_t)n, sizeof *t->scores);
        if (!t->scores)
            return seer_err(SEER_ERR_OOM, "out of memory reading token scores");
        for (int i = 0; i < n; i++)
            t->scores[i] = (float)a->arr.items[i].f64;
    }
    if (seer_gguf_find_kv(f, "tokenizer.ggml.token_type")) {
        const gguf_value *a;
        SEER_TRY(seer_gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_COUNT, &a));
        if (!is_int_type(a->arr.type))
            return seer_err(SEER_ERR_FORMAT, "tokenizer.ggml.token_type is not an integer array");
        if (a->arr.n != (uint64_t)n)
            return seer_err(SEER_ERR_FORMAT,
                            "tokenizer.ggml.token_type has %llu entries but there are %d tokens",
                            (unsigned long long)a->arr.n, n);
        t->types = seer_malloc_array((size_t)n, sizeof *t->types);
        if (!t->types)
            return seer_err(SEER_ERR_OOM, "out of memory reading token types");
        for (int i = 0; i < n; i++) {
            const gguf_value *it = &a->arr.items[i];
            int64_t x = is_signed_type(it->type) ? it->i64
                        : it->u64 > (uint64_t)INT32_MAX ? INT32_MAX
                                                        : (int64_t)it->u64;
            /* Out-of-range types become normal in seer_vocab_from_arrays. */
            t->types[i] = x < INT32_MIN || x > INT32_MAX ? 0 : (int32_t)x;
        }
    }
    return SEER_OK;
}

seer_status seer_vocab_load(const gguf_file *f, seer_vocab **out) {
    if (!out)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_vocab_load: out is NULL");
    *out = NULL;
    if (!f)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_vocab_load: no file");
    const gguf_kv *mkv = seer_gguf_find_kv(f, "tokenizer.ggml.model");
    if (!mkv)
        return seer_err(SEER_ERR_FORMAT, "missing required metadata tokenizer.ggml.model");
    if (mkv->val.type != GGUF_TYPE_STRING)
        return seer_err(SEER_ERR_FORMAT, "tokenizer.ggml.model is not a string");
    bool bpe = str_is(&mkv->val, "gpt2");
    if (!bpe && !str_is(&mkv->val, "llama")) {
        char name[48];
        printable_name(mkv->val.str.s, mkv->val.str.len, name, sizeof name);
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "tokenizer model '%s' (tokenizer.ggml.model) is not supported", name);
    }

    const gguf_value *tok;
    SEER_TRY(seer_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok));
    if (tok->arr.n == 0 || tok->arr.n > MAX_TOKENS)
        return seer_err(SEER_ERR_FORMAT, "tokenizer.ggml.tokens has %llu entries",
                        (unsigned long long)tok->arr.n);
    int n = (int)tok->arr.n;

    seer_vocab_desc d = {.kind = bpe ? SEER_VOCAB_BPE : SEER_VOCAB_SPM,
                         .model_name = bpe ? "gpt2" : "llama", .n = n};
    char pre[64] = "";
    seer_status s = SEER_OK;
    if (bpe) {
        /* An unknown pre-tokenizer is refused before anything large is read. */
        s = seer_gguf_get_str_opt(f, "tokenizer.ggml.pre", "default", pre, sizeof pre);
        if (s == SEER_OK)
            s = seer_bpe_check_pre(pre);
        d.pre = pre;
    }
    /* SentencePiece defaults are those of Llama-family models (and llama.cpp's); BPE files
     * name their special tokens, and want BOS only when their pre-tokenizer family does
     * (llama.cpp's rule) unless the file says otherwise. */
    if (s == SEER_OK)
        s = get_id(f, "tokenizer.ggml.bos_token_id", bpe ? -1 : 1, n, &d.bos);
    if (s == SEER_OK)
        s = get_id(f, "tokenizer.ggml.eos_token_id", bpe ? -1 : 2, n, &d.eos);
    if (s == SEER_OK)
        s = get_id(f, "tokenizer.ggml.unknown_token_id", bpe ? -1 : 0, n, &d.unk);
    if (s == SEER_OK)
        s = get_id(f, "tokenizer.ggml.padding_token_id", -1, n, &d.pad);
    if (s == SEER_OK)
        s = seer_gguf_get_bool_opt(f, "tokenizer.ggml.add_bos_token",
                              bpe ? seer_bpe_pre_add_bos(pre) : true, &d.add_bos);
    if (s == SEER_OK)
        s = seer_gguf_get_bool_opt(f, "tokenizer.ggml.add_space_prefix", !bpe, &d.add_space_prefix);
    if (s != SEER_OK)
        return s;

    load_tmp t = {0};
    s = load_arrays(f, n, tok, &t);
    if (s == SEER_OK && bpe)
        s = load_merges(f, &t);
    if (s == SEER_OK) {
        d.texts = t.texts;
        d.text_lens = t.lens;
        d.scores = t.scores;
        d.types = t.types;
        d.merges = t.merges;
        d.merge_lens = t.merge_lens;
        d.n_merges = t.n_merges;
        s = seer_vocab_from_arrays(&d, out);
    }
    free(t.texts);
    free(t.lens);
    free(t.scores);
    free(t.types);
    free(t.merges);
    free(t.merge_lens);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* Accessors                                                                                */

static bool valid_id(const seer_vocab *v, int32_t id) { return v && id >= 0 && id < v->n; }

seer_vocab_kind seer_vocab_kind_of(const seer_vocab *v) { return v ? v->kind : (seer_vocab_kind)0; }
int seer_vocab_size(const seer_vocab *v) { return v ? v->n : 0; }
int seer_vocab_bos(const seer_vocab *v) { return v ? v->bos : -1; }
int seer_vocab_eos(const seer_vocab *v) { return v ? v->eos : -1; }
int seer_vocab_unk(const seer_vocab *v) { return v ? v->unk : -1; }
int seer_vocab_pad(const seer_vocab *v) { return v ? v->pad : -1; }
bool seer_vocab_add_bos(const seer_vocab *v) { return v && v->add_bos; }
bool seer_vocab_add_space_prefix(const seer_vocab *v) { return v && v->add_space_prefix; }
const char *seer_vocab_model_name(const seer_vocab *v) { return v ? v->model_name : ""; }
const seer_bpe *seer_vocab_bpe(const seer_vocab *v) { return v ? v->bpe : NULL; }

bool seer_vocab_is_eog(const seer_vocab *v, int32_t id) {
    if (!v || id < 0)
        return false;
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return true;
    return false;
}

const char *seer_vocab_text(const seer_vocab *v, int32_t id) {
    return valid_id(v, id) ? v->text_pool + v->text_off[id] : NULL;
}

int seer_vocab_text_len(const seer_vocab *v, int32_t id) {
    return valid_id(v, id) ? v->text_len[id] : -1;
}

int seer_vocab_type(const seer_vocab *v, int32_t id) { return valid_id(v, id) ? v->types[id] : 0; }

float seer_vocab_score(const seer_vocab *v, int32_t id) {
    return valid_id(v, id) ? v->scores[id] : 0.0f;
}

int32_t seer_vocab_find(const seer_vocab *v, const char *s, size_t len) {
    if (!v || !s || len == 0 || len > MAX_TOKEN_BYTES)
        return -1;
    for (size_t h = (size_t)hash_bytes(s, len) & v->hash_mask;; h = (h + 1) & v->hash_mask) {
        int32_t id = v->hash[h];
        if (id < 0)
            return -1;
        if ((size_t)v->text_len[id] == len && memcmp(v->text_pool + v->text_off[id], s, len) == 0)
            return id;
    }
}

int32_t seer_vocab_byte_token(const seer_vocab *v, uint8_t b) { return v ? v->byte_tok[b] : -1; }

int seer_vocab_n_special(const seer_vocab *v) { return v ? v->n_special : 0; }

int32_t seer_vocab_special(const seer_vocab *v, int i) {
    return v && i >= 0 && i < v->n_special ? v->special[i] : -1;
}

const char *seer_vocab_piece_ref(const seer_vocab *v, int32_t id, int *len) {
    if (!valid_id(v, id)) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = v->piece_len[id];
    return v->piece_pool + v->piece_off[id];
}

int seer_vocab_piece(const seer_vocab *v, int32_t id, char *buf, int cap) {
    int n;
    const char *p = seer_vocab_piece_ref(v, id, &n);
    if (!p)
        return -1;
    if (buf && cap > 0) {
        int c = n < cap ? n : cap;
        memcpy(buf, p, (size_t)c);
        if (n < cap)
            buf[n] = 0;
    }
    return n;
}
