/*
 * utf8.c: UTF-8 validation and classification of one sequence at a time.
 *
 * The rules are those of RFC 3629 / Unicode 15 table 3-7: no overlong forms, no surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF. Invalid input is measured in "maximal subparts"
 * (Unicode 15 section 3.9, "U+FFFD substitution of maximal subparts"), which is what the
 * streaming detokenizer replaces by one U+FFFD each. Not for: normalisation or case folding.
 */
#include "tokenizer/tokenizer.h"

int seer_utf8_len_from_lead(uint8_t lead) {
    if (lead < 0x80)
        return 1;
    if (lead >= 0xC2 && lead <= 0xDF)
        return 2;
    if (lead >= 0xE0 && lead <= 0xEF)
        return 3;
    if (lead >= 0xF0 && lead <= 0xF4)
        return 4;
    return 0;
}

int seer_utf8_next(const uint8_t *s, size_t n) {
    if (n == 0)
        return 0;
    uint8_t c = s[0];
    int need = seer_utf8_len_from_lead(c);
    if (need == 0)
        return -1; /* stray continuation byte, C0/C1 (always overlong) or F5..FF */
    if (need == 1)
        return 1;
    /* The second byte's range depends on the lead byte: this is where overlongs, surrogates
     * and code points past U+10FFFF are excluded (table 3-7). */
    uint8_t lo = 0x80, hi = 0xBF;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n)
            return 0; /* a valid prefix so far; more bytes may complete it */
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return -i;
    }
    return need;
}

bool seer_utf8_valid(const char *s, size_t len, size_t *bad_offset) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        /* ASCII runs are the common case; skip them without the full classification. */
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int k = seer_utf8_next(p + i, len - i);
        if (k <= 0) {
            if (bad_offset)
                *bad_offset = i;
            return false;
        }
        i += (size_t)k;
    }
    return true;
}
