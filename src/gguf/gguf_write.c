/*
 * gguf_write.c: a GGUF v3 writer that collects metadata and tensors in memory and emits
 * them to a file or a buffer.
 *
 * Metadata values are serialised when they are set, so the writer keeps bytes rather than
 * value trees. Output follows the reader's rules: tensor offsets and the data section are
 * aligned to general.alignment (default 32), each tensor's data is zero-padded to it.
 * Tensors are either copied in when added, or declared without data and filled one at a
 * time while the file is written (seer_gguf_writer_write_stream), so that files larger than
 * memory can be written with one tensor's bytes held at a time.
 * Not for: editing files in place.
 */
#include "gguf/gguf.h"
#include "util/error.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WRITER_MAX_DEPTH 8 /* the reader's array nesting limit */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

typedef struct {
    char *key;
    bytes val; /* type (u32) and payload, as in the file */
} wkv;

typedef struct {
    char *name;
    ggml_type type;
    int n_dims;
    uint64_t ne[4];
    void *data;
    size_t nbytes;
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    size_t n_deferred; /* tensors declared without data */
    size_t alignment;
    seer_status err; /* first failure of a void setter */
    char errmsg[512];
};

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 8;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return false;
        c *= 2;
    }
    void *q = seer_malloc_array(c, elem);
    if (!q)
        return false;
    if (*p) {
        memcpy(q, *p, *cap * elem);
        free(*p);
    }
    *p = q;
    *cap = c;
    return true;
}

static bool put(bytes *b, const void *src, size_t n) {
    if (n > SIZE_MAX - b->n)
        return false;
    void *p = b->p;
    if (!grow(&p, &b->cap, b->n + n, 1))
        return false;
    b->p = p;
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
    return true;
}

static bool put_u32(bytes *b, uint32_t v) { return put(b, &v, 4); }
static bool put_u64(bytes *b, uint64_t v) { return put(b, &v, 8); }

static bool put_str(bytes *b, const char *s, uint64_t len) {
    return put_u64(b, len) && put(b, s, (size_t)len);
}

gguf_writer *seer_gguf_writer_init(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w)
        w->alignment = 32;
    return w;
}

void seer_gguf_writer_free(gguf_writer *w) {
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

/* Records the first failure of a setter so that write reports it. */
static void record(gguf_writer *w, seer_status s) {
    if (w && w->err == SEER_OK && s != SEER_OK) {
        w->err = s;
        snprintf(w->errmsg, sizeof w->errmsg, "%s", seer_last_error());
    }
}

/* Stores an already serialised value under key, replacing an earlier one; takes val. */
static seer_status store(gguf_writer *w, const char *key, bytes *val) {
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].val.p);
            w->kv[i].val = *val;
            *val = (bytes){0};
            return SEER_OK;
        }
    }
    void *p = w->kv;
    char *k = malloc(strlen(key) + 1);
    if (!k || !grow(&p, &w->cap_kv, w->n_kv + 1, sizeof(wkv))) {
        free(k);
        return seer_err(SEER_ERR_OOM, "out of memory setting metadata %s", key);
    }
    w->kv = p;
    strcpy(k, key);
    w->kv[w->n_kv++] = (wkv){k, *val};
    *val = (bytes){0};
    return SEER_OK;
}

static seer_status check_key(const gguf_writer *w, const char *key) {
    if (!w)
        return seer_err(SEER_ERR_INVALID_ARG, "gguf writer: NULL writer");
    if (!key || !key[0])
        return seer_err(SEER_ERR_INVALID_ARG, "gguf writer: empty metadata key");
    return SEER_OK;
}

static seer_status ser_value(bytes *b, const gguf_value *v, int depth, bool with_type,
                             const char *key);

static seer_status ser_payload(bytes *b, gguf_type t, const gguf_value *v, int depth,
                               const char *key) {
    bool ok = true;
    switch (t) {
    case GGUF_TYPE_UINT8: { uint8_t x = (uint8_t)v->u64; ok = put(b, &x, 1); break; }
    case GGUF_TYPE_INT8: { int8_t x = (int8_t)v->i64; ok = put(b, &x, 1); break; }
    case GGUF_TYPE_UINT16: { uint16_t x = (uint16_t)v->u64; ok = put(b, &x, 2); break; }
    case GGUF_TYPE_INT16: { int16_t x = (int16_t)v->i64; ok = put(b, &x, 2); break; }
    case GGUF_TYPE_UINT32: ok = put_u32(b, (uint32_t)v->u64); break;
    case GGUF_TYPE_INT32: { int32_t x = (int32_t)v->i64; ok = put(b, &x, 4); break; }
    case GGUF_TYPE_FLOAT32: {
        /* out-of-range doubles become inf rather than an undefined conversion */
        double d = v->f64;
        float x = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
        ok = put(b, &x, 4);
        break;
    }
    case GGUF_TYPE_BOOL: { uint8_t x = v->b ? 1 : 0; ok = put(b, &x, 1); break; }
    case GGUF_TYPE_UINT64: ok = put_u64(b, v->u64); break;
    case GGUF_TYPE_INT64: ok = put(b, &v->i64, 8); break;
    case GGUF_TYPE_FLOAT64: ok = put(b, &v->f64, 8); break;
    case GGUF_TYPE_STRING:
        if (!v->str.s && v->str.len)
            return seer_err(SEER_ERR_INVALID_ARG, "metadata %s: string with NULL data", key);
        ok = put_str(b, v->str.s, v->str.len);
        break;
    case GGUF_TYPE_ARRAY:
        if (depth >= WRITER_MAX_DEPTH)
            return seer_err(SEER_ERR_INVALID_ARG, "metadata %s: arrays nested deeper than %d",
                            key, WRITER_MAX_DEPTH);
        if ((unsigned)v->arr.type >= GGUF_TYPE_COUNT)
            return seer_err(SEER_ERR_INVALID_ARG, "metadata %s: bad array element type %d", key,
                            (int)v->arr.type);
        if (v->arr.n && !v->arr.items)
            return seer_err(SEER_ERR_INVALID_ARG, "metadata %s: array with NULL items", key);
        if (!put_u32(b, (uint32_t)v->arr.type) || !put_u64(b, v->arr.n))
            break;
        for (uint64_t i = 0; i < v->arr.n; i++) {
            if (v->arr.items[i].type != v->arr.type)
                return seer_err(SEER_ERR_INVALID_ARG,
                                "metadata %s: array item %llu has type %d, the array says %d",
                                key, (unsigned long long)i, (int)v->arr.items[i].type,
                                (int)v->arr.type);
            SEER_TRY(ser_value(b, &v->arr.items[i], depth + 1, false, key));
        }
        break;
    default:
        return seer_err(SEER_ERR_INVALID_ARG, "metadata %s: bad value type %d", key, (int)t);
    }
    if (!ok)
        return seer_err(SEER_ERR_OOM, "out of memory serialising metadata %s", key);
    return SEER_OK;
}

static seer_status ser_value(bytes *b, const gguf_value *v, int depth, bool with_type,
                             const char *key) {
    if ((unsigned)v->type >= GGUF_TYPE_COUNT)
        return seer_err(SEER_ERR_INVALID_ARG, "metadata %s: bad value type %d", key,
                        (int)v->type);
    if (with_type && !put_u32(b, (uint32_t)v->type))
        return seer_err(SEER_ERR_OOM, "out of memory serialising metadata %s", key);
    return ser_payload(b, v->type, v, depth, key);
}

/* general.alignment decides the layout, so it is checked when set rather than at write. */
static seer_status note_alignment(const char *key, const gguf_value *v, size_t *align) {
    if (strcmp(key, "general.alignment") != 0)
        return SEER_OK;
    uint64_t a = 0;
    if (v->type == GGUF_TYPE_UINT8 || v->type == GGUF_TYPE_UINT16 ||
        v->type == GGUF_TYPE_UINT32 || v->type == GGUF_TYPE_UINT64)
        a = v->u64;
    else if ((v->type == GGUF_TYPE_INT8 || v->type == GGUF_TYPE_INT16 ||
              v->type == GGUF_TYPE_INT32 || v->type == GGUF_TYPE_INT64) && v->i64 > 0)
        a = (uint64_t)v->i64;
    if (a < 8 || (a & (a - 1)) || a > (1u << 30))
        return seer_err(SEER_ERR_INVALID_ARG,
                        "general.alignment must be a power of two from 8 to 2^30");
    *align = (size_t)a;
    return SEER_OK;
}

seer_status seer_gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *v) {
    seer_status s = check_key(w, key);
    if (s == SEER_OK && !v)
        s = seer_err(SEER_ERR_INVALID_ARG, "metadata %s: NULL value", key);
    size_t align = w ? w->alignment : 0;
    if (s == SEER_OK)
        s = note_alignment(key, v, &align);
    bytes b = {0};
    if (s == SEER_OK)
        s = ser_value(&b, v, 0, true, key);
    if (s == SEER_OK)
        s = store(w, key, &b);
    if (s == SEER_OK)
        w->alignment = align;
    free(b.p);
    return s;
}

static void set_scalar(gguf_writer *w, const char *key, gguf_value v) {
    record(w, seer_gguf_writer_set_value(w, key, &v));
}

void seer_gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    set_scalar(w, key, (gguf_value){.type = GGUF_TYPE_UINT32, .u64 = v});
}

void seer_gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    set_scalar(w, key, (gguf_value){.type = GGUF_TYPE_INT32, .i64 = v});
}

void seer_gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    set_scalar(w, key, (gguf_value){.type = GGUF_TYPE_UINT64, .u64 = v});
}

void seer_gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    set_scalar(w, key, (gguf_value){.type = GGUF_TYPE_FLOAT32, .f64 = v});
}

void seer_gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    set_scalar(w, key, (gguf_value){.type = GGUF_TYPE_BOOL, .b = v});
}

void seer_gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    if (!v) {
        record(w, seer_err(SEER_ERR_INVALID_ARG, "metadata %s: NULL string", key ? key : ""));
        return;
    }
    gguf_value val = {.type = GGUF_TYPE_STRING};
    val.str.s = v;
    val.str.len = strlen(v);
    set_scalar(w, key, val);
}

/* Arrays of plain elements are serialised directly: tokenizer arrays hold 10^5 entries. */
static void set_arr_raw(gguf_writer *w, const char *key, gguf_type et, const void *v,
                        uint64_t n, size_t elem) {
    seer_status s = check_key(w, key);
    if (s == SEER_OK && strcmp(key, "general.alignment") == 0)
        s = seer_err(SEER_ERR_INVALID_ARG, "general.alignment must be an integer");
    if (s == SEER_OK && n && !v)
        s = seer_err(SEER_ERR_INVALID_ARG, "metadata %s: NULL array", key);
    if (s == SEER_OK && n > SIZE_MAX / elem)
        s = seer_err(SEER_ERR_INVALID_ARG, "metadata %s: array too long", key);
    bytes b = {0};
    if (s == SEER_OK) {
        bool ok = put_u32(&b, GGUF_TYPE_ARRAY) && put_u32(&b, (uint32_t)et) && put_u64(&b, n);
        if (et == GGUF_TYPE_STRING) {
            const char *const *strs = v;
            for (uint64_t i = 0; ok && i < n; i++) {
                if (!strs[i]) {
                    s = seer_err(SEER_ERR_INVALID_ARG, "metadata %s: NULL string at %llu", key,
                                 (unsigned long long)i);
                    break;
                }
                ok = put_str(&b, strs[i], strlen(strs[i]));
            }
        } else {
            ok = ok && put(&b, v, (size_t)n * elem);
        }
        if (s == SEER_OK && !ok)
            s = seer_err(SEER_ERR_OOM, "out of memory serialising metadata %s", key);
    }
    if (s == SEER_OK)
        s = store(w, key, &b);
    free(b.p);
    record(w, s);
}

void seer_gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    set_arr_raw(w, key, GGUF_TYPE_STRING, v, n, sizeof(char *));
}

void seer_gguf_writer_set_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n) {
    set_arr_raw(w, key, GGUF_TYPE_FLOAT32, v, n, 4);
}

void seer_gguf_writer_set_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    set_arr_raw(w, key, GGUF_TYPE_INT32, v, n, 4);
}

/* data NULL declares a tensor whose bytes a fill function gives at write time. */
static seer_status add_tensor(gguf_writer *w, const char *name, ggml_type type, int n_dims,
                              const uint64_t *ne, const void *data) {
    if (!w || !name || !name[0] || !ne)
        return seer_err(SEER_ERR_INVALID_ARG, "gguf writer: bad tensor argument");
    if (n_dims < 1 || n_dims > 4)
        return seer_err(SEER_ERR_INVALID_ARG, "tensor %s: %d dimensions (must be 1 to 4)",
                        name, n_dims);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return seer_err(SEER_ERR_INVALID_ARG, "duplicate tensor name %s", name);
    int blk = seer_ggml_type_block_elems(type);
    if (!blk)
        return seer_err(SEER_ERR_UNSUPPORTED, "unsupported tensor type %d in tensor %s",
                        (int)type, name);
    uint64_t n = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX / n)
            return seer_err(SEER_ERR_INVALID_ARG, "tensor %s: bad dimension ne[%d] = %llu",
                            name, d, (unsigned long long)ne[d]);
        n *= ne[d];
    }
    if (ne[0] % (uint64_t)blk)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "tensor %s: ne[0] = %llu is not a multiple of the %s block size %d",
                        name, (unsigned long long)ne[0], seer_ggml_type_name(type), blk);
    size_t nbytes;
    SEER_TRY(seer_ggml_nbytes(type, n, &nbytes));
    void *p = w->t;
    char *nm = malloc(strlen(name) + 1);
    void *copy = data ? malloc(nbytes) : NULL;
    if (!nm || (data && !copy) || !grow(&p, &w->cap_t, w->n_t + 1, sizeof(wtensor))) {
        free(nm);
        free(copy);
        return seer_err(SEER_ERR_OOM, "out of memory adding tensor %s (%zu bytes)", name,
                        nbytes);
    }
    w->t = p;
    strcpy(nm, name);
    if (data)
        memcpy(copy, data, nbytes);
    else
        w->n_deferred++;
    wtensor *t = &w->t[w->n_t++];
    *t = (wtensor){.name = nm, .type = type, .n_dims = n_dims, .data = copy, .nbytes = nbytes};
    for (int d = 0; d < 4; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    return SEER_OK;
}

seer_status seer_gguf_writer_add_tensor(gguf_writer *w, const char *name, ggml_type type, int n_dims,
                                   const uint64_t *ne, const void *data) {
    if (!data)
        return seer_err(SEER_ERR_INVALID_ARG, "gguf writer: tensor %s without data",
                        name ? name : "(null)");
    return add_tensor(w, name, type, n_dims, ne, data);
}

seer_status seer_gguf_writer_declare_tensor(gguf_writer *w, const char *name, ggml_type type,
                                       int n_dims, const uint64_t *ne) {
    return add_tensor(w, name, type, n_dims, ne, NULL);
}

/* ---- output -------------------------------------------------------------------------- */

/* Output goes to a buffer, a file, or nowhere (counting the size first). */
typedef struct {
    uint8_t *buf;
    FILE *fp;
    size_t pos;
    bool fail;
    /* streaming: the bytes of declared tensors come from fill, through scratch */
    gguf_fill_fn fill;
    void *fill_ctx;
    void *scratch;
    seer_status fill_status; /* SEER_OK, or the fill function's failure (its message kept) */
} sink;

static void emit(sink *s, const void *p, size_t n) {
    if (s->fail || !n)
        return;
    if (s->buf)
        memcpy(s->buf + s->pos, p, n);
    else if (s->fp && fwrite(p, 1, n, s->fp) != n)
        s->fail = true;
    s->pos += n;
}

static void emit_u32(sink *s, uint32_t v) { emit(s, &v, 4); }
static void emit_u64(sink *s, uint64_t v) { emit(s, &v, 8); }

static void emit_pad(sink *s, size_t align) {
    static const uint8_t zeros[256];
    size_t pad = (align - s->pos % align) % align;
    while (pad) {
        size_t k = pad < sizeof zeros ? pad : sizeof zeros;
        emit(s, zeros, k);
        pad -= k;
    }
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void emit_all(const gguf_writer *w, sink *s) {
    emit(s, "GGUF", 4);
    emit_u32(s, 3);
    emit_u64(s, w->n_t);
    emit_u64(s, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        emit_u64(s, strlen(w->kv[i].key));
        emit(s, w->kv[i].key, strlen(w->kv[i].key));
        emit(s, w->kv[i].val.p, w->kv[i].val.n);
    }
    size_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        emit_u64(s, strlen(t->name));
        emit(s, t->name, strlen(t->name));
        emit_u32(s, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            emit_u64(s, t->ne[d]);
        emit_u32(s, (uint32_t)t->type);
        emit_u64(s, off);
        off = align_up(off + t->nbytes, w->alignment);
    }
    if (w->n_t == 0)
        return;
    emit_pad(s, w->alignment);
    for (size_t i = 0; i < w->n_t && !s->fail; i++) {
        const wtensor *t = &w->t[i];
        if (t->data) {
            emit(s, t->data, t->nbytes);
        } else {
            seer_status st = s->fill(s->fill_ctx, i, t->name, s->scratch, t->nbytes);
            if (st != SEER_OK) {
                s->fill_status = st;
                s->fail = true;
                return;
            }
            emit(s, s->scratch, t->nbytes);
        }
        emit_pad(s, w->alignment);
    }
}

static seer_status check_writer(const gguf_writer *w, bool streaming) {
    if (!w)
        return seer_err(SEER_ERR_INVALID_ARG, "gguf writer: NULL writer");
    if (w->err != SEER_OK)
        return seer_err(w->err, "%s", w->errmsg);
    if (w->n_deferred && !streaming)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "gguf writer: %zu declared tensors need seer_gguf_writer_write_stream",
                        w->n_deferred);
    return SEER_OK;
}

seer_status seer_gguf_writer_to_buffer(gguf_writer *w, uint8_t **buf, size_t *size) {
    SEER_TRY(check_writer(w, false));
    if (!buf || !size)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_gguf_writer_to_buffer: NULL argument");
    sink count = {0};
    emit_all(w, &count);
    uint8_t *b = malloc(count.pos ? count.pos : 1);
    if (!b)
        return seer_err(SEER_ERR_OOM, "out of memory for a GGUF buffer of %zu bytes", count.pos);
    sink out = {.buf = b};
    emit_all(w, &out);
    *buf = b;
    *size = out.pos;
    return SEER_OK;
}

static seer_status write_file(gguf_writer *w, const char *path, sink *out) {
    if (!path)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_gguf_writer_write: NULL path");
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return seer_err(SEER_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    out->fp = fp;
    emit_all(w, out);
    bool failed = out->fail;
    if (fclose(fp) != 0)
        failed = true;
    if (failed) {
        remove(path);
        if (out->fill_status != SEER_OK) /* the fill function's message stands */
            return out->fill_status;
        return seer_err(SEER_ERR_IO, "error writing %s", path);
    }
    return SEER_OK;
}

seer_status seer_gguf_writer_write(gguf_writer *w, const char *path) {
    SEER_TRY(check_writer(w, false));
    sink out = {0};
    return write_file(w, path, &out);
}

seer_status seer_gguf_writer_write_stream(gguf_writer *w, const char *path, gguf_fill_fn fill,
                                     void *ctx) {
    SEER_TRY(check_writer(w, true));
    if (!fill && w->n_deferred)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_gguf_writer_write_stream: NULL fill function");
    size_t largest = 0;
    for (size_t i = 0; i < w->n_t; i++)
        if (!w->t[i].data && w->t[i].nbytes > largest)
            largest = w->t[i].nbytes;
    sink out = {.fill = fill, .fill_ctx = ctx};
    if (largest && !(out.scratch = malloc(largest)))
        return seer_err(SEER_ERR_OOM, "out of memory for a tensor of %zu bytes", largest);
    seer_status s = write_file(w, path, &out);
    free(out.scratch);
    return s;
}
