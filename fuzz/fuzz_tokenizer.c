/*
 * fuzz_tokenizer.c: libFuzzer target for the vocabularies, the encoders (SentencePiece,
 * byte-level BPE with its PCRE2 pre-tokenizers) and the streaming detokenizer.
 *
 * Input: byte 0 picks the vocabulary (bits 0-1) and the flags add_bos (bit 2) and
 * parse_special (bit 3).
 *   vocabulary 0..2: one of the vocabularies listed in SEER_FUZZ_VOCABS (colon-separated
 *     GGUF paths, loaded once; scripts/fuzz.sh passes the fixtures tests/fixtures/NAME/vocab.gguf
 *     and the SentencePiece vocabulary of stories260K); the rest of the input is the text.
 *   vocabulary 3: the vocabulary comes from the input: bytes 1-2 give the text length n
 *     (little-endian), then n bytes of text, then a GGUF file whose tokenizer.ggml.* metadata
 *     seer_vocab_load reads.
 * Each text is encoded; every id must be inside the vocabulary, and the ids run through the
 * streaming detokenizer, whose output must be valid UTF-8 (its promise), as must the text
 * the ids of valid UTF-8 input decode to. Not for: agreement with reference tokenizers
 * (tests/test_bpe.c, test_tokenizer.c).
 */
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIXED 3

static seer_vocab *g_fixed[MAX_FIXED];
static gguf_file *g_fixed_file[MAX_FIXED];
static int g_n_fixed;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *list = getenv("SEER_FUZZ_VOCABS");
    if (!list)
        return 0;
    char *copy = strdup(list), *save = NULL;
    for (char *p = strtok_r(copy, ":", &save); p && g_n_fixed < MAX_FIXED; p = strtok_r(NULL, ":", &save)) {
        gguf_file *f = NULL;
        seer_vocab *v = NULL;
        if (seer_gguf_file_open(p, &f) != SEER_OK || seer_vocab_load(f, &v) != SEER_OK) {
            fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", p, seer_last_error());
            abort();
        }
        g_fixed_file[g_n_fixed] = f;
        g_fixed[g_n_fixed++] = v;
    }
    free(copy);
    return 0;
}

static void run(const seer_vocab *v, const char *text, size_t len, bool add_bos, bool special) {
    const int V = seer_vocab_size(v);
    int cap = (int)len * 2 + 8, n = 0;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    if (!ids)
        return;
    seer_status s = seer_vocab_encode(v, text, len, add_bos, special, ids, cap, &n);
    if (s == SEER_ERR_INVALID_ARG && n > cap) {
        /* more ids than our guess: the count must then be exact */
        int32_t *more = realloc(ids, sizeof *ids * (size_t)n);
        if (!more) {
            free(ids);
            return;
        }
        ids = more;
        cap = n;
        s = seer_vocab_encode(v, text, len, add_bos, special, ids, cap, &n);
    }
    if (s != SEER_OK) {
        free(ids);
        return;
    }
    seer_vocab_detok d;
    seer_vocab_detok_init(&d, v);
    char buf[256];
    size_t out_len = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V)
            abort();
        int k = seer_vocab_detok_push(&d, ids[i], buf, sizeof buf);
        if (k < 0) { /* a long piece: a bigger buffer must take it */
            char *big = malloc(1 << 20);
            if (!big)
                break;
            k = seer_vocab_detok_push(&d, ids[i], big, 1 << 20);
            if (k < 0 || !seer_utf8_valid(big, (size_t)k, NULL))
                abort();
            free(big);
        } else if (!seer_utf8_valid(buf, (size_t)k, NULL)) {
            abort();
        }
        out_len += (size_t)k;
        char piece[64];
        if (seer_vocab_piece(v, ids[i], piece, sizeof piece) < 0)
            abort();
    }
    int k = seer_vocab_detok_flush(&d, buf, sizeof buf);
    if (k < 0 || !seer_utf8_valid(buf, (size_t)k, NULL))
        abort();
    (void)out_len;
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const int which = data[0] & 3;
    const bool add_bos = data[0] & 4, special = data[0] & 8;
    if (which < 3) {
        if (which < g_n_fixed)
            run(g_fixed[which], (const char *)data + 1, size - 1, add_bos, special);
        return 0;
    }
    if (size < 3)
        return 0;
    size_t n = (size_t)data[1] | (size_t)data[2] << 8;
    if (n > size - 3)
        n = size - 3;
    const char *text = (const char *)data + 3;
    gguf_file *f = NULL;
    seer_vocab *v = NULL;
    if (seer_gguf_file_open_memory(data + 3 + n, size - 3 - n, &f) == SEER_OK &&
        seer_vocab_load(f, &v) == SEER_OK)
        run(v, text, n, add_bos, special);
    seer_vocab_free(v);
    seer_gguf_file_close(f);
    return 0;
}
