/*
 * spm.c: text -> token ids for SentencePiece vocabularies.
 *
 * The algorithm is SentencePiece's BPE encoding (Kudo & Richardson 2018; bpe_model.cc), as
 * llama.cpp's SPM tokenizer and llama2.c also run it: spaces become "▁" (U+2581), a dummy
 * "▁" is put in front of the text, the text is split into UTF-8 characters, and the adjacent
 * pair whose concatenation is the highest-scoring token is merged again and again (ties:
 * leftmost) until no pair is a token. Characters that are no token fall back to their bytes'
 * <0xXX> tokens. A heap of candidate pairs over a linked list of symbols keeps this
 * O(n log n). Not for: byte-level BPE (bpe.c) or special tokens and BOS (encode.c).
 */
#include "tokenizer/merge_queue.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

typedef seer_merge_sym symbol; /* over the bytes of the escaped text */

/* Raw text encodes only to normal and user-defined tokens, as in SentencePiece: control,
 * unknown, byte and unused tokens are reached by other routes or never. */
static int32_t find_mergeable(const seer_vocab *v, const char *s, size_t n) {
    int32_t id = seer_vocab_find(v, s, n);
    if (id < 0)
        return -1;
    int t = seer_vocab_type(v, id);
    return t == SEER_TOKEN_NORMAL || t == SEER_TOKEN_USER_DEFINED ? id : -1;
}

typedef struct {
    const seer_vocab *v;
    const char *buf;
    symbol *sym;
    seer_merge_queue h;
} merge_state;

static seer_status try_pair(void *ctx, int32_t left, int32_t right) {
    merge_state *m = ctx;
    if (left < 0 || right < 0)
        return SEER_OK;
    const symbol *l = &m->sym[left], *r = &m->sym[right];
    uint32_t len = l->len + r->len;
    int32_t id = find_mergeable(m->v, m->buf + l->off, len);
    if (id < 0)
        return SEER_OK;
    return seer_merge_push(&m->h, (seer_merge){seer_vocab_score(m->v, id), left, right, len});
}

static seer_status emit_symbol(const seer_vocab *v, const char *s, size_t n, seer_id_vec *out) {
    int32_t id = find_mergeable(v, s, n);
    if (id >= 0)
        return seer_id_vec_push(out, id);
    /* Byte fallback (SentencePiece byte_fallback): one <0xXX> per byte of the character.
     * Without byte tokens the character becomes UNK, and with neither it is dropped. */
    bool all = true;
    for (size_t i = 0; i < n && all; i++)
        all = seer_vocab_byte_token(v, (uint8_t)s[i]) >= 0;
    if (all) {
        for (size_t i = 0; i < n; i++)
            SEER_TRY(seer_id_vec_push(out, seer_vocab_byte_token(v, (uint8_t)s[i])));
        return SEER_OK;
    }
    if (seer_vocab_unk(v) >= 0)
        return seer_id_vec_push(out, seer_vocab_unk(v));
    return SEER_OK;
}

static seer_status merge_and_emit(merge_state *m, int32_t n_sym, seer_id_vec *out) {
    SEER_TRY(seer_merge_run(&m->h, m->sym, n_sym, try_pair, m));
    for (int32_t i = 0; i >= 0 && i < n_sym; i = m->sym[i].next)
        SEER_TRY(emit_symbol(m->v, m->buf + m->sym[i].off, m->sym[i].len, out));
    return SEER_OK;
}

/* Encodes one stretch of plain text. prefix: put the dummy "▁" in front. */
seer_status seer_spm_encode_plain(const seer_vocab *v, const char *s, size_t n, bool prefix,
                                  seer_id_vec *out) {
    if (n == 0)
        return SEER_OK;
    size_t cap = 3 * n + 3;
    char *buf = malloc(cap);
    symbol *sym = seer_malloc_array(n + 1, sizeof *sym);
    merge_state m = {.v = v, .buf = buf, .sym = sym};
    seer_status st = SEER_OK;
    if (!buf || !sym) {
        st = seer_err(SEER_ERR_OOM, "out of memory encoding %zu bytes", n);
        goto done;
    }
    size_t o = 0;
    int32_t n_sym = 0;
    if (prefix) {
        memcpy(buf, "\xE2\x96\x81", 3);
        sym[n_sym++] = (symbol){-1, -1, 0, 3};
        o = 3;
    }
    for (size_t i = 0; i < n;) {
        const uint8_t *p = (const uint8_t *)s + i;
        size_t k;
        if (*p == ' ') {
            memcpy(buf + o, "\xE2\x96\x81", 3);
            sym[n_sym++] = (symbol){-1, -1, (uint32_t)o, 3};
            o += 3;
            i++;
            continue;
        }
        /* The text was validated, but a special token with an ill-formed text could have
         * cut a character: a stray byte then stands alone and falls back to its byte. */
        int c = seer_utf8_next(p, n - i);
        k = c > 0 ? (size_t)c : 1;
        memcpy(buf + o, p, k);
        sym[n_sym++] = (symbol){-1, -1, (uint32_t)o, (uint32_t)k};
        o += k;
        i += k;
    }
    for (int32_t i = 0; i < n_sym; i++) {
        sym[i].prev = i - 1;
        sym[i].next = i + 1 < n_sym ? i + 1 : -1;
    }
    st = merge_and_emit(&m, n_sym, out);
done:
    free(m.h.a);
    free(sym);
    free(buf);
    return st;
}
