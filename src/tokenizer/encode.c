/*
 * encode.c: seer_vocab_encode, the part of encoding every vocabulary kind shares: argument
 * checks, UTF-8 validation, BOS, and cutting the text at special tokens before the plain
 * stretches go to the SentencePiece (spm.c) or byte-level BPE (bpe.c) encoder.
 * Not for: the merge algorithms themselves.
 */
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Texts longer than this are refused, which keeps every index in int32 range (the escaped
 * text is up to three times as long as the input). */
#define MAX_TEXT_BYTES ((size_t)1 << 28)

seer_status seer_id_vec_push(seer_id_vec *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p)
            return seer_err(SEER_ERR_OOM, "out of memory for %zu token ids", cap);
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return SEER_OK;
}

typedef struct {
    size_t pos, len;
    int32_t id;
} special_match;

static int cmp_match(const void *a, const void *b) {
    const special_match *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Finds the special tokens in the text the way llama.cpp partitions it: each special token,
 * longest first, claims its non-overlapping occurrences (left to right) in the parts no
 * longer token has claimed. with_control: control tokens take part (user-defined ones
 * always do), only where every byte is marked in special_ok when that is given. Returns the
 * matches sorted by position in *out. */
static seer_status find_specials(const seer_vocab *v, const char *s, size_t n, bool with_control,
                                 const uint8_t *special_ok, special_match **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    uint8_t *claimed = calloc(n, 1);
    special_match *mv = NULL;
    size_t nm = 0, cm = 0;
    if (!claimed)
        return seer_err(SEER_ERR_OOM, "out of memory encoding %zu bytes", n);
    for (int k = 0; k < seer_vocab_n_special(v); k++) {
        int32_t id = seer_vocab_special(v, k);
        const bool control = seer_vocab_type(v, id) == SEER_TOKEN_CONTROL;
        if (!with_control && control)
            continue;
        const char *t = seer_vocab_text(v, id);
        size_t L = (size_t)seer_vocab_text_len(v, id);
        size_t i = 0;
        while (L <= n && i <= n - L) {
            const char *p = memchr(s + i, t[0], n - L + 1 - i);
            if (!p)
                break;
            size_t at = (size_t)(p - s);
            bool ok = memcmp(p, t, L) == 0;
            for (size_t j = 0; ok && j < L; j++)
                ok = !claimed[at + j] && (!control || !special_ok || special_ok[at + j]);
            if (!ok) {
                i = at + 1;
                continue;
            }
            if (nm == cm) {
                size_t c2 = cm ? cm * 2 : 16;
                special_match *q = realloc(mv, c2 * sizeof *q);
                if (!q) {
                    free(mv);
                    free(claimed);
                    return seer_err(SEER_ERR_OOM, "out of memory encoding %zu bytes", n);
                }
                mv = q;
                cm = c2;
            }
            mv[nm++] = (special_match){at, L, id};
            memset(claimed + at, 1, L);
            i = at + L;
        }
    }
    free(claimed);
    if (nm > 1)
        qsort(mv, nm, sizeof *mv, cmp_match);
    *out = mv;
    *n_out = nm;
    return SEER_OK;
}

static seer_status encode_plain(const seer_vocab *v, const char *s, size_t n, bool prefix,
                                seer_id_vec *out) {
    if (n == 0)
        return SEER_OK;
    if (seer_vocab_kind_of(v) == SEER_VOCAB_BPE)
        return seer_bpe_encode_plain(v, s, n, out);
    return seer_spm_encode_plain(v, s, n, prefix, out);
}

static seer_status encode_all(const seer_vocab *v, const char *text, size_t len, bool add_bos,
                              bool parse_special, const uint8_t *special_ok, seer_id_vec *ids) {
    bool bpe = seer_vocab_kind_of(v) == SEER_VOCAB_BPE;
    /* BPE files say whether their model wants BOS (Qwen2 and SmolLM2 do not); SentencePiece
     * models always had one, and the caller decides. */
    if (add_bos && seer_vocab_bos(v) >= 0 && (!bpe || seer_vocab_add_bos(v)))
        SEER_TRY(seer_id_vec_push(ids, seer_vocab_bos(v)));
    if (len == 0)
        return SEER_OK;
    /* The dummy prefix goes only in front of the whole text (when it starts with plain
     * text), not after each special token: the rule of llama.cpp's SPM tokenizer from its
     * special-token parsing onwards, and what HF's non-legacy Llama tokenizer does. */
    bool prefix = !bpe && seer_vocab_add_space_prefix(v);
    /* Control tokens are matched only when asked; user-defined tokens always are, in
     * SentencePiece text as in BPE text, as llama.cpp partitions it (Gemma's vocabulary has
     * user-defined tokens for runs of spaces and HTML tags). */
    if (seer_vocab_n_special(v) == 0)
        return encode_plain(v, text, len, prefix, ids);
    special_match *mv;
    size_t nm;
    SEER_TRY(find_specials(v, text, len, parse_special, special_ok, &mv, &nm));
    seer_status st = SEER_OK;
    size_t at = 0;
    for (size_t k = 0; k <= nm && st == SEER_OK; k++) {
        size_t end = k < nm ? mv[k].pos : len;
        if (end > at)
            st = encode_plain(v, text + at, end - at, prefix && at == 0, ids);
        if (st == SEER_OK && k < nm) {
            st = seer_id_vec_push(ids, mv[k].id);
            at = mv[k].pos + mv[k].len;
        }
    }
    free(mv);
    return st;
}

static seer_status encode(const seer_vocab *v, const char *text, size_t len, bool add_bos,
                          bool parse_special, const uint8_t *special_ok, int32_t *out, int cap,
                          int *n_out) {
    if (!v || !n_out || cap < 0 || (!text && len > 0) || (!out && cap > 0))
        return seer_err(SEER_ERR_INVALID_ARG, "seer_tokenize: bad arguments");
    if (len > MAX_TEXT_BYTES)
        return seer_err(SEER_ERR_INVALID_ARG, "text of %zu bytes is too long to tokenize", len);
    size_t bad;
    if (!seer_utf8_valid(text, len, &bad))
        return seer_err(SEER_ERR_FORMAT, "invalid UTF-8 at byte offset %zu", bad);
    seer_id_vec ids = {0};
    seer_status st = encode_all(v, text, len, add_bos, parse_special, special_ok, &ids);
    if (st == SEER_OK && ids.n > (size_t)INT_MAX)
        st = seer_err(SEER_ERR_INVALID_ARG, "text needs more than INT_MAX tokens");
    if (st == SEER_OK) {
        int n = (int)ids.n;
        *n_out = n;
        if (n > 0 && cap > 0)
            memcpy(out, ids.ids, (size_t)(n < cap ? n : cap) * sizeof *out);
        if (n > cap)
            st = seer_err(SEER_ERR_INVALID_ARG, "the text needs %d tokens but the output holds %d",
                          n, cap);
    }
    free(ids.ids);
    return st;
}

seer_status seer_vocab_encode(const seer_vocab *v, const char *text, size_t len, bool add_bos,
                              bool parse_special, int32_t *out, int cap, int *n_out) {
    return encode(v, text, len, add_bos, parse_special, NULL, out, cap, n_out);
}

seer_status seer_vocab_encode_marked(const seer_vocab *v, const char *text, const uint8_t *special_ok,
                                     size_t len, bool add_bos, int32_t *out, int cap, int *n_out) {
    if (!special_ok && len > 0)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_tokenize_marked: no marks");
    return encode(v, text, len, add_bos, true, special_ok, out, cap, n_out);
}
