/*
 * detok.c: streaming token -> text that only ever hands out complete UTF-8.
 *
 * A token's piece may be a fragment of a character (byte-fallback tokens carry one byte
 * each), so the bytes of an unfinished sequence are held until the tokens that complete it
 * arrive; bytes that can no longer become valid UTF-8 are replaced by U+FFFD, one per
 * maximal ill-formed subpart (Unicode 15 section 3.9). seer_detok_* in seer.h are thin
 * wrappers over the vocabulary-level seer_vocab_detok_*, which tests drive directly.
 * Not for: whole-sequence decoding with cleanup rules (spaces before punctuation etc.).
 */
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

static const uint8_t k_replacement[3] = {0xEF, 0xBF, 0xBD};

void seer_vocab_detok_init(seer_vocab_detok *d, const seer_vocab *v) {
    memset(d, 0, sizeof *d);
    d->vocab = v;
    d->strip_leading_space =
        v && seer_vocab_kind_of(v) == SEER_VOCAB_SPM && seer_vocab_add_space_prefix(v);
}

/* Decodes s[*pos..n) one sequence at a time while sequences start before stop, appending
 * to out when it is not NULL. Stops early at an unfinished sequence that runs to the end of
 * s, leaving *pos at its first byte. Returns the number of bytes produced. */
static size_t drain(const uint8_t *s, size_t n, size_t *pos, size_t stop, uint8_t *out) {
    size_t o = 0, i = *pos;
    while (i < stop) {
        int k = seer_utf8_next(s + i, n - i);
        if (k == 0)
            break;
        if (k > 0) {
            if (out)
                memcpy(out + o, s + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            if (out)
                memcpy(out + o, k_replacement, 3);
            o += 3;
            i += (size_t)-k;
        }
    }
    *pos = i;
    return o;
}

/* Runs held bytes + piece through the decoder. Returns the output length; when out is not
 * NULL also writes it and stores the new unfinished tail in held / *n_held. */
static size_t decode(const uint8_t *held_in, int n_held_in, const uint8_t *p, size_t np,
                     uint8_t *out, uint8_t *held, int *n_held) {
    /* Sequences that start in the held bytes are decoded from a small joined copy: such a
     * sequence ends at most 4 bytes later, so 3 held + 4 piece bytes cover it. */
    uint8_t tmp[8];
    size_t nh = (size_t)n_held_in, take = np < 4 ? np : 4;
    memcpy(tmp, held_in, nh);
    if (take)
        memcpy(tmp + nh, p, take);
    size_t pos = 0;
    size_t o = drain(tmp, nh + take, &pos, nh, out);
    uint8_t tail[4];
    size_t ntail = 0;
    if (pos < nh) {
        /* Held bytes plus the whole (short) piece are still one unfinished sequence. */
        ntail = nh + take - pos;
        memcpy(tail, tmp + pos, ntail);
    } else {
        size_t ppos = pos - nh;
        o += drain(p, np, &ppos, np, out ? out + o : NULL);
        ntail = np - ppos;
        if (ntail)
            memcpy(tail, p + ppos, ntail);
    }
    if (out) {
        memcpy(held, tail, ntail);
        *n_held = (int)ntail;
    }
    return o;
}

int seer_vocab_detok_push(seer_vocab_detok *d, int32_t token, char *buf, int cap) {
    if (!d || !buf || cap < 1)
        return -1;
    int np = 0;
    const char *p = seer_vocab_piece_ref(d->vocab, token, &np);
    if (!p) {
        buf[0] = 0;
        return 0;
    }
    bool pending = d->strip_pending;
    if (np > 0) {
        if (pending && p[0] == ' ') {
            p++;
            np--;
        }
        pending = false;
    }
    if (d->strip_leading_space && token == seer_vocab_bos(d->vocab))
        pending = true;
    size_t need = decode(d->held, d->n_held, (const uint8_t *)p, (size_t)np, NULL, NULL, NULL);
    if (need + 1 > (size_t)cap)
        return -1;
    uint8_t held[4];
    int n_held = 0;
    decode(d->held, d->n_held, (const uint8_t *)p, (size_t)np, (uint8_t *)buf, held, &n_held);
    buf[need] = 0;
    memcpy(d->held, held, sizeof held);
    d->n_held = n_held;
    d->strip_pending = pending;
    return (int)need;
}

int seer_vocab_detok_flush(seer_vocab_detok *d, char *buf, int cap) {
    if (!d || !buf || cap < 1)
        return -1;
    /* The held bytes are a valid prefix of one sequence, i.e. one maximal subpart. */
    int need = d->n_held > 0 ? 3 : 0;
    if (need + 1 > cap)
        return -1;
    memcpy(buf, k_replacement, (size_t)need);
    buf[need] = 0;
    d->n_held = 0;
    return need;
}

struct seer_detok {
    seer_vocab_detok d;
};

seer_status seer_detok_init(const seer_model *model, seer_detok **out) {
    if (!out)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_detok_init: out is NULL");
    *out = NULL;
    if (!model)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_detok_init: model is NULL");
    const seer_vocab *v = seer_model_vocab(model);
    if (!v)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_detok_init: the model has no vocabulary");
    seer_detok *d = malloc(sizeof *d);
    if (!d)
        return seer_err(SEER_ERR_OOM, "out of memory for a detokenizer");
    seer_vocab_detok_init(&d->d, v);
    *out = d;
    return SEER_OK;
}

void seer_detok_free(seer_detok *d) { free(d); }

int seer_detok_push(seer_detok *d, int32_t token, char *buf, int cap) {
    return d ? seer_vocab_detok_push(&d->d, token, buf, cap) : -1;
}

int seer_detok_flush(seer_detok *d, char *buf, int cap) {
    return d ? seer_vocab_detok_flush(&d->d, buf, cap) : -1;
}
