/*
 * fuzz_constrain.c: libFuzzer target for the constraint engine's parsers (src/constrain/):
 * the first byte picks grammar text, JSON schema or regex; the rest is the text. What compiles
 * is run: masks over a small vocabulary and a walk of allowed tokens, which must agree with
 * seer_constraint_allows, the forced-token walk (seer_constraint_forced_after) checked against
 * the mask, and a rollback to the start.
 */
#include "constrain/grammar.h"

#include <stdlib.h>
#include <string.h>

static const char *const vocab[] = {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "0", "1", "-", ".",
                                    "e", "a", "b", "x", "\\", "true", "false", "null", "\"a\"",
                                    "\xc3\xa9", "\xc3", "\xa9", "ab", "{\"", "\":", "\",", "12"};
enum { NV = sizeof vocab / sizeof vocab[0] + 1 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const seer_constraint_kind kinds[4] = {SEER_CONSTRAINT_GRAMMAR, SEER_CONSTRAINT_JSON_SCHEMA,
                                           SEER_CONSTRAINT_REGEX, SEER_CONSTRAINT_JSON_SCHEMA};
    const seer_constraint_kind kind = kinds[data[0] & 3];
    const char *pieces[NV];
    int lens[NV];
    for (int i = 0; i < NV - 1; i++) {
        pieces[i] = vocab[i];
        lens[i] = (int)strlen(vocab[i]);
    }
    pieces[NV - 1] = NULL;
    lens[NV - 1] = 0;
    const int32_t eog = NV - 1;
    seer_constraint *c = NULL;
    if (seer_constraint_from_pieces(kind, (const char *)data + 1, size - 1, pieces, lens, NV, &eog, 1, &c) !=
        SEER_OK)
        return 0;
    uint32_t bits[(NV + 31) / 32];
    unsigned h = data[0];
    for (int step = 0; step < 16; step++) {
        const int n = seer_constraint_mask(c, bits);
        if (n < 0)
            abort();
        int allowed[NV], k = 0;
        for (int t = 0; t < NV; t++) {
            const bool in = bits[t >> 5] >> (t & 31) & 1;
            if (in != seer_constraint_allows(c, t))
                abort(); /* the mask and the direct check must agree */
            if (in)
                allowed[k++] = t;
        }
        if (k != n)
            abort();
        /* the forced-token walk: its token allowed, every allowed token comparable with its
         * string (a prefix of it, or beginning with it) */
        seer_forced f;
        const int fr = seer_constraint_forced_after(c, NULL, 0, &f);
        if (fr < 0)
            abort();
        if (fr == 0) {
            if (f.tok >= 0 && !(bits[f.tok >> 5] >> (f.tok & 31) & 1))
                abort();
            for (int i = 0; i < k && f.len > 0; i++) {
                const int l = lens[allowed[i]], m = l < f.len ? l : f.len;
                if (memcmp(pieces[allowed[i]], f.bytes, (size_t)m) != 0)
                    abort();
            }
        }
        if (k == 0)
            break;
        h = h * 1103515245u + 12345u;
        if (seer_constraint_accept(c, allowed[(h >> 8) % (unsigned)k]) != SEER_OK)
            abort();
    }
    if (seer_constraint_rollback(c, seer_constraint_n_accepted(c)) != SEER_OK)
        abort();
    seer_constraint_free(c);
    return 0;
}
