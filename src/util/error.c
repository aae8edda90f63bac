/*
 * error.c: per-thread error messages, the escaping of text from files for printing, and
 * overflow-checked allocation.
 *
 * Messages quote names and strings read from model files (keys, tensor names, tokens), so
 * a message is escaped as a whole when it is recorded: a hostile file cannot put terminal
 * control sequences into what a tool prints. Tools escape what they print straight from a
 * file (seer info) with the same seer_text_escape.
 */
#include "util/error.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char g_msg[1024];

/* Length of the well-formed UTF-8 sequence at p (at most n bytes) and its code point, or 0
 * when p does not start one (RFC 3629: no overlongs, surrogates or values past U+10FFFF). */
static int utf8_seq(const unsigned char *p, size_t n, uint32_t *cp) {
    const unsigned c = p[0];
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    if ((size_t)len > n)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (p[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

const char *seer_text_escape(const char *s, char *buf, size_t cap) {
    if (!buf || cap == 0)
        return buf;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t n = strlen((const char *)p), o = 0;
    for (size_t i = 0; i < n;) {
        char unit[20];
        int ul, adv;
        uint32_t cp = 0;
        const int k = p[i] >= 0x80 ? utf8_seq(p + i, n - i, &cp) : 0;
        if (p[i] == '\n' || p[i] == '\t' || p[i] == '\r') {
            ul = snprintf(unit, sizeof unit, "\\%c", p[i] == '\n' ? 'n' : p[i] == '\t' ? 't' : 'r');
            adv = 1;
        } else if (p[i] < 0x20 || p[i] == 0x7F) {
            ul = snprintf(unit, sizeof unit, "\\x%02x", p[i]);
            adv = 1;
        } else if (p[i] < 0x80) {
            unit[0] = (char)p[i];
            ul = adv = 1;
        } else if (k == 0) { /* not UTF-8: the raw byte could be a C1 control elsewhere */
            ul = snprintf(unit, sizeof unit, "\\x%02x", p[i]);
            adv = 1;
        } else if (cp < 0xA0) { /* C1 controls: U+009B is a CSI to some terminals */
            ul = snprintf(unit, sizeof unit, "\\u%04x", (unsigned)cp);
            adv = k;
        } else {
            memcpy(unit, p + i, (size_t)k);
            ul = adv = k;
        }
        if (o + (size_t)ul >= cap)
            break;
        memcpy(buf + o, unit, (size_t)ul);
        o += (size_t)ul;
        i += (size_t)adv;
    }
    buf[o] = 0;
    return buf;
}

seer_status seer_err(seer_status s, const char *fmt, ...) {
    char raw[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    seer_text_escape(raw, g_msg, sizeof g_msg);
    return s;
}

void seer_clear_error(void) { g_msg[0] = 0; }

_Static_assert(sizeof(((seer_err_saved *)0)->msg) == sizeof g_msg, "a saved message holds any message");

void seer_err_save(seer_err_saved *s) { memcpy(s->msg, g_msg, sizeof g_msg); }

void seer_err_restore(const seer_err_saved *s) { memcpy(g_msg, s->msg, sizeof g_msg); }

const char *seer_last_error(void) { return g_msg; }

const char *seer_status_str(seer_status s) {
    switch (s) {
    case SEER_OK: return "SEER_OK";
    case SEER_ERR_IO: return "SEER_ERR_IO";
    case SEER_ERR_FORMAT: return "SEER_ERR_FORMAT";
    case SEER_ERR_UNSUPPORTED: return "SEER_ERR_UNSUPPORTED";
    case SEER_ERR_INVALID_ARG: return "SEER_ERR_INVALID_ARG";
    case SEER_ERR_OOM: return "SEER_ERR_OOM";
    case SEER_ERR_KV_FULL: return "SEER_ERR_KV_FULL";
    case SEER_ERR_CONTEXT: return "SEER_ERR_CONTEXT";
    case SEER_ERR_BACKEND: return "SEER_ERR_BACKEND";
    case SEER_ERR_INTERNAL: return "SEER_ERR_INTERNAL";
    }
    return "SEER_ERR_UNKNOWN";
}

void *seer_malloc_array(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return NULL;
    return malloc(n && size ? n * size : 1);
}

void *seer_calloc_array(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}
