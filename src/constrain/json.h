/*
 * json.h: a small JSON reader for the schema translator: the whole document into a tree of
 * nodes, with bounded depth and size, so that hostile schemas fail with a message.
 *
 * Not for: the server's request bodies (tools/seer/ has its own reader) or writing JSON.
 */
#ifndef SEER_CONSTRAIN_JSON_H
#define SEER_CONSTRAIN_JSON_H

#include "seer.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum { SJ_NULL, SJ_BOOL, SJ_NUM, SJ_STR, SJ_ARR, SJ_OBJ } sj_type;

typedef struct sj {
    sj_type type;
    bool b;
    double num;
    const char *raw; /* SJ_NUM: the number's text in the document; SJ_STR: decoded, NUL-ended */
    size_t raw_len;  /* bytes of raw (a string may hold \u0000) */
    struct sj **items; /* SJ_ARR: values; SJ_OBJ: values */
    char **keys;       /* SJ_OBJ: decoded keys, NUL-ended */
    size_t *key_lens;
    int n;
} sj;

#define SJ_MAX_DEPTH 64

/* Parses text [len]; *out is freed with seer_json_free. */
seer_status seer_json_parse(const char *text, size_t len, sj **out);
void seer_json_free(sj *v);
/* The member key of object o, or NULL. */
const sj *seer_json_get(const sj *o, const char *key);

#endif
