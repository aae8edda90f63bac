/* gguf_api.c: the public inspection API (seer_gguf_*) over the internal reader. */
#include "gguf/gguf.h"
#include "util/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

struct seer_gguf {
    gguf_file f;
};

seer_status seer_gguf_open(const char *path, seer_gguf **out) {
    SEER_CHECK_ARG(out);
    gguf_file *f;
    *out = NULL;
    SEER_CHECK_ARG(path);
    SEER_TRY(seer_gguf_file_open_mapped(path, &f)); /* metadata only: no need to read the weights */
    *out = (seer_gguf *)f; /* seer_gguf is a gguf_file seen from outside */
    return SEER_OK;
}

void seer_gguf_close(seer_gguf *g) { seer_gguf_file_close((gguf_file *)g); }
int seer_gguf_version(const seer_gguf *g) { return g ? (int)g->f.version : 0; }
int seer_gguf_n_kv(const seer_gguf *g) { return g ? (int)g->f.n_kv : 0; }
int seer_gguf_n_tensors(const seer_gguf *g) { return g ? (int)g->f.n_tensors : 0; }

static bool kv_ok(const seer_gguf *g, int i) { return g && i >= 0 && (uint64_t)i < g->f.n_kv; }

const char *seer_gguf_key(const seer_gguf *g, int i) { return kv_ok(g, i) ? g->f.kv[i].key : NULL; }

static const char *type_name(gguf_type t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                  "str", "arr", "u64", "i64", "f64"};
    return t < GGUF_TYPE_COUNT ? names[t] : "?";
}

static int scalar_text(const gguf_value *v, char *buf, int cap) {
    switch (v->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        return snprintf(buf, cap, "%" PRIu64, v->u64);
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        return snprintf(buf, cap, "%" PRId64, v->i64);
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
        return snprintf(buf, cap, "%g", v->f64);
    case GGUF_TYPE_BOOL:
        return snprintf(buf, cap, "%s", v->b ? "true" : "false");
    case GGUF_TYPE_STRING: {
        int n = v->str.len > 60 ? 60 : (int)v->str.len;
        int k = 0;
        char tmp[256];
        for (int i = 0; i < n && k < (int)sizeof tmp - 5; i++) {
            unsigned char c = (unsigned char)v->str.s[i];
            if (c == '\n')
                k += snprintf(tmp + k, sizeof tmp - k, "\\n");
            else if (c < 32)
                k += snprintf(tmp + k, sizeof tmp - k, "\\x%02x", c);
            else
                tmp[k++] = (char)c;
        }
        tmp[k] = 0;
        return snprintf(buf, cap, "\"%s\"%s", tmp, v->str.len > 60 ? "..." : "");
    }
    case GGUF_TYPE_ARRAY: {
        int k = snprintf(buf, cap, "[%s x %" PRIu64 "]", type_name(v->arr.type), v->arr.n);
        for (uint64_t i = 0; i < v->arr.n && i < 4 && k < cap - 1; i++) {
            k += snprintf(buf + k, cap - k, " ");
            if (k < cap - 1)
                k += scalar_text(&v->arr.items[i], buf + k, cap - k);
        }
        if (v->arr.n > 4 && k < cap - 1)
            k += snprintf(buf + k, cap - k, " ...");
        return k;
    }
    default:
        return snprintf(buf, cap, "?");
    }
}

void seer_gguf_value_text(const seer_gguf *g, int i, char *buf, int cap) {
    if (!buf || cap <= 0)
        return;
    buf[0] = 0;
    if (kv_ok(g, i))
        scalar_text(&g->f.kv[i].val, buf, cap);
}

void seer_gguf_tensor(const seer_gguf *g, int i, seer_tensor_info *out) {
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!g || i < 0 || (uint64_t)i >= g->f.n_tensors)
        return;
    const gguf_tensor *t = &g->f.tensors[i];
    out->name = t->name;
    out->type = seer_ggml_type_name(t->type);
    out->n_dims = t->n_dims;
    memcpy(out->ne, t->ne, sizeof out->ne);
    out->nbytes = t->nbytes;
    out->offset = t->offset;
}
