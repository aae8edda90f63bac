/* error.c: per-thread error messages and overflow-checked allocation. */
#include "util/error.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static _Thread_local char g_msg[1024];

seer_status seer_err(seer_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return s;
}

void seer_clear_error(void) { g_msg[0] = 0; }

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
