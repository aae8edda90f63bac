/*
 * gguf_read.c: the GGUF v2/v3 parser, the file reader around it and the metadata getters.
 *
 * The parser trusts nothing in the file: every read checks the bytes left, every count is
 * compared with what the remaining bytes could hold before anything is allocated, and all
 * tensor geometry is checked (types, sizes, alignment, bounds, overlaps) before a data
 * pointer is handed out. Decoded metadata lives in one arena freed by seer_gguf_file_close.
 * Tensor types whose block size is unknown fail at open; known types without a dequantiser
 * (q5_0, the K-quants, ...) open, and fail when dequantised.
 * Not for: interpreting the metadata (src/model/, src/tokenizer/).
 */
#define _DEFAULT_SOURCE /* mmap, MAP_ANONYMOUS, madvise, O_CLOEXEC under -std=c11 */
#include "gguf/gguf.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_DEPTH 8           /* nesting of arrays inside arrays */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MIN_ALIGNMENT 8
#define GGUF_MAX_ALIGNMENT (1u << 30)
#define MIN_KV_BYTES 13            /* key length (8) + value type (4) + smallest value (1) */
#define MIN_TENSOR_INFO_BYTES 32   /* name length, n_dims, one dim, type, offset */

/* ---- arena and name indices ---------------------------------------------------------- */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    alignas(16) unsigned char data[];
} chunk;

typedef struct {
    chunk *chunks;
    size_t *kv_slots; /* open addressing; slot holds index + 1, 0 = empty */
    size_t kv_cap;    /* power of two */
    size_t *tensor_slots;
    size_t tensor_cap;
} gguf_internal;

static void *arena_alloc(gguf_internal *in, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    chunk *c = in->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ((size_t)64 << 10) ? n : ((size_t)64 << 10);
        if (cap > SIZE_MAX - sizeof(chunk))
            return NULL;
        c = malloc(sizeof(chunk) + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        /* a big block gets its own chunk behind the current one, keeping the latter's room */
        if (in->chunks && cap == n) {
            c->next = in->chunks->next;
            in->chunks->next = c;
        } else {
            c->next = in->chunks;
            in->chunks = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

static void internal_free(gguf_internal *in) {
    if (!in)
        return;
    for (chunk *c = in->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(in);
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static size_t table_cap(uint64_t n) {
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

typedef const char *(*name_of_fn)(const gguf_file *f, size_t i);

static const char *kv_name(const gguf_file *f, size_t i) { return f->kv[i].key; }
static const char *tensor_name(const gguf_file *f, size_t i) { return f->tensors[i].name; }

/* Returns the index of name, or SIZE_MAX; *slot receives where it is or would go. */
static size_t table_find(const gguf_file *f, const size_t *slots, size_t cap, name_of_fn fn,
                         const char *name, size_t *slot) {
    size_t i = (size_t)hash_str(name) & (cap - 1);
    while (slots[i]) {
        if (strcmp(fn(f, slots[i] - 1), name) == 0) {
            if (slot)
                *slot = i;
            return slots[i] - 1;
        }
        i = (i + 1) & (cap - 1);
    }
    if (slot)
        *slot = i;
    return SIZE_MAX;
}

/* ---- the byte reader ----------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t size, pos;
    gguf_internal *in;
    char what[320]; /* the item being read, for messages */
} reader;

static size_t left(const reader *r) { return r->size - r->pos; }

static seer_status need(reader *r, size_t n, const char *field) {
    if (left(r) < n)
        return seer_err(SEER_ERR_FORMAT,
                        "truncated GGUF file: %s of %s needs %zu bytes at offset %zu, %zu left",
                        field, r->what, n, r->pos, left(r));
    return SEER_OK;
}

static seer_status rd_u32(reader *r, uint32_t *v, const char *field) {
    SEER_TRY(need(r, 4, field));
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return SEER_OK;
}

static seer_status rd_u64(reader *r, uint64_t *v, const char *field) {
    SEER_TRY(need(r, 8, field));
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return SEER_OK;
}

/* A length-prefixed string left in place. */
static seer_status rd_str(reader *r, const char **s, uint64_t *len, const char *field) {
    uint64_t n;
    SEER_TRY(rd_u64(r, &n, field));
    if (n > left(r))
        return seer_err(SEER_ERR_FORMAT,
                        "truncated GGUF file: %s of %s is %llu bytes long at offset %zu but only "
                        "%zu bytes are left",
                        field, r->what, (unsigned long long)n, r->pos, left(r));
    *s = (const char *)r->p + r->pos;
    *len = n;
    r->pos += (size_t)n;
    return SEER_OK;
}

/* A NUL-terminated arena copy of a name (key or tensor name). Names holding NUL bytes are
 * rejected: they would compare equal to their prefix everywhere a C string is used. */
static seer_status rd_name(reader *r, const char **out, const char *field) {
    const char *s = NULL;
    uint64_t len = 0;
    SEER_TRY(rd_str(r, &s, &len, field));
    if (len == 0)
        return seer_err(SEER_ERR_FORMAT, "empty %s in %s", field, r->what);
    if (memchr(s, 0, (size_t)len))
        return seer_err(SEER_ERR_FORMAT, "%s of %s contains a NUL byte", field, r->what);
    char *c = arena_alloc(r->in, (size_t)len + 1);
    if (!c)
        return seer_err(SEER_ERR_OOM, "out of memory reading %s", r->what);
    memcpy(c, s, (size_t)len);
    c[len] = 0;
    *out = c;
    return SEER_OK;
}

static size_t fixed_size(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* The fewest bytes one value of type t occupies in a file. */
static size_t min_size(gguf_type t) {
    if (t == GGUF_TYPE_STRING)
        return 8;
    if (t == GGUF_TYPE_ARRAY)
        return 12;
    return fixed_size(t);
}

static seer_status read_value(reader *r, uint32_t type, gguf_value *v, int depth);

static seer_status read_array(reader *r, gguf_value *v, int depth) {
    if (depth >= GGUF_MAX_DEPTH)
        return seer_err(SEER_ERR_FORMAT, "arrays nested deeper than %d levels in %s",
                        GGUF_MAX_DEPTH, r->what);
    uint32_t et;
    uint64_t n;
    SEER_TRY(rd_u32(r, &et, "array element type"));
    if (et >= GGUF_TYPE_COUNT)
        return seer_err(SEER_ERR_FORMAT, "unknown array element type %u in %s", et, r->what);
    SEER_TRY(rd_u64(r, &n, "array length"));
    /* checked before allocating: a hostile length cannot make us allocate more than a small
     * multiple of the file size */
    if (n > left(r) / min_size((gguf_type)et))
        return seer_err(SEER_ERR_FORMAT,
                        "array length %llu in %s exceeds what the remaining %zu bytes can hold",
                        (unsigned long long)n, r->what, left(r));
    gguf_value *items = NULL;
    if (n) {
        if (n > SIZE_MAX / sizeof(gguf_value) ||
            !(items = arena_alloc(r->in, (size_t)n * sizeof(gguf_value))))
            return seer_err(SEER_ERR_OOM, "out of memory for an array of %llu in %s",
                            (unsigned long long)n, r->what);
    }
    for (uint64_t i = 0; i < n; i++)
        SEER_TRY(read_value(r, et, &items[i], depth + 1));
    v->arr.type = (gguf_type)et;
    v->arr.n = n;
    v->arr.items = items;
    return SEER_OK;
}

static seer_status read_value(reader *r, uint32_t type, gguf_value *v, int depth) {
    if (type >= GGUF_TYPE_COUNT)
        return seer_err(SEER_ERR_FORMAT, "unknown metadata value type %u in %s", type,
                        r->what);
    memset(v, 0, sizeof *v);
    v->type = (gguf_type)type;
    if (type == GGUF_TYPE_STRING)
        return rd_str(r, &v->str.s, &v->str.len, "string value");
    if (type == GGUF_TYPE_ARRAY)
        return read_array(r, v, depth);
    size_t sz = fixed_size((gguf_type)type);
    SEER_TRY(need(r, sz, "value"));
    const uint8_t *p = r->p + r->pos;
    r->pos += sz;
    switch (type) {
    case GGUF_TYPE_UINT8: v->u64 = p[0]; break;
    case GGUF_TYPE_INT8: v->i64 = (int8_t)p[0]; break;
    case GGUF_TYPE_BOOL:
        if (p[0] > 1)
            return seer_err(SEER_ERR_FORMAT, "invalid bool value %u in %s (must be 0 or 1)",
                            p[0], r->what);
        v->b = p[0];
        break;
    case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, p, 2); v->u64 = x; break; }
    case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, p, 2); v->i64 = x; break; }
    case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, p, 4); v->u64 = x; break; }
    case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, p, 4); v->i64 = x; break; }
    case GGUF_TYPE_FLOAT32: { float x; memcpy(&x, p, 4); v->f64 = x; break; }
    case GGUF_TYPE_UINT64: memcpy(&v->u64, p, 8); break;
    case GGUF_TYPE_INT64: memcpy(&v->i64, p, 8); break;
    case GGUF_TYPE_FLOAT64: memcpy(&v->f64, p, 8); break;
    default: break;
    }
    return SEER_OK;
}

/* ---- parsing ------------------------------------------------------------------------- */

static seer_status read_header(reader *r, gguf_file *f) {
    snprintf(r->what, sizeof r->what, "the header");
    if (r->size < 4 || memcmp(r->p, "GGUF", 4) != 0)
        return seer_err(SEER_ERR_FORMAT, "not a GGUF file (bad magic)");
    r->pos = 4;
    uint32_t version;
    SEER_TRY(rd_u32(r, &version, "version"));
    if (version == 0x02000000u || version == 0x03000000u)
        return seer_err(SEER_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    if (version == 1)
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "GGUF version 1 is not supported (only versions 2 and 3)");
    if (version != 2 && version != 3)
        return seer_err(SEER_ERR_UNSUPPORTED, "unsupported GGUF version %u (only 2 and 3)",
                        version);
    f->version = version;
    SEER_TRY(rd_u64(r, &f->n_tensors, "tensor count"));
    SEER_TRY(rd_u64(r, &f->n_kv, "metadata count"));
    if (f->n_kv > left(r) / MIN_KV_BYTES)
        return seer_err(SEER_ERR_FORMAT,
                        "metadata count %llu exceeds what the remaining %zu bytes can hold",
                        (unsigned long long)f->n_kv, left(r));
    if (f->n_tensors > left(r) / MIN_TENSOR_INFO_BYTES)
        return seer_err(SEER_ERR_FORMAT,
                        "tensor count %llu exceeds what the remaining %zu bytes can hold",
                        (unsigned long long)f->n_tensors, left(r));
    return SEER_OK;
}

static seer_status read_kvs(reader *r, gguf_file *f, gguf_internal *in) {
    in->kv_cap = table_cap(f->n_kv);
    in->kv_slots = arena_alloc(in, in->kv_cap * sizeof(size_t));
    f->kv = arena_alloc(in, (size_t)f->n_kv * sizeof(gguf_kv));
    if (!in->kv_slots || !f->kv)
        return seer_err(SEER_ERR_OOM, "out of memory for %llu metadata entries",
                        (unsigned long long)f->n_kv);
    memset(in->kv_slots, 0, in->kv_cap * sizeof(size_t));
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        snprintf(r->what, sizeof r->what, "metadata entry %llu", (unsigned long long)i);
        SEER_TRY(rd_name(r, &kv->key, "key"));
        snprintf(r->what, sizeof r->what, "metadata key %.200s", kv->key);
        size_t slot;
        if (table_find(f, in->kv_slots, in->kv_cap, kv_name, kv->key, &slot) != SIZE_MAX)
            return seer_err(SEER_ERR_FORMAT, "duplicate metadata key %.200s", kv->key);
        uint32_t type;
        SEER_TRY(rd_u32(r, &type, "value type"));
        SEER_TRY(read_value(r, type, &kv->val, 0));
        /* registered only once complete, so lookups never see a half-read entry */
        in->kv_slots[slot] = (size_t)i + 1;
    }
    return SEER_OK;
}

static seer_status read_alignment(gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = seer_gguf_find_kv(f, "general.alignment");
    if (!kv)
        return SEER_OK;
    int64_t a;
    SEER_TRY(seer_gguf_get_i64(f, "general.alignment", &a));
    /* The GGUF spec asks for a multiple of 8; below that, tensor data would start at
     * offsets where f32 and f16 loads are misaligned. */
    if (a < GGUF_MIN_ALIGNMENT || a > (int64_t)GGUF_MAX_ALIGNMENT || (a & (a - 1)))
        return seer_err(SEER_ERR_FORMAT,
                        "general.alignment must be a power of two from 8 to 2^30 (a multiple of "
                        "8, as the GGUF spec asks), got %lld",
                        (long long)a);
    f->alignment = (size_t)a;
    return SEER_OK;
}

static seer_status read_tensor_info(reader *r, gguf_file *f, gguf_tensor *t, uint64_t i) {
    snprintf(r->what, sizeof r->what, "tensor info %llu", (unsigned long long)i);
    SEER_TRY(rd_name(r, &t->name, "tensor name"));
    snprintf(r->what, sizeof r->what, "tensor %.200s", t->name);
    uint32_t n_dims;
    SEER_TRY(rd_u32(r, &n_dims, "dimension count"));
    if (n_dims < 1 || n_dims > 4)
        return seer_err(SEER_ERR_FORMAT, "tensor %.200s has %u dimensions (must be 1 to 4)",
                        t->name, n_dims);
    t->n_dims = (int)n_dims;
    uint64_t n = 1;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims)
            continue;
        SEER_TRY(rd_u64(r, &t->ne[d], "dimension"));
        if (t->ne[d] == 0)
            return seer_err(SEER_ERR_FORMAT, "tensor %.200s has a zero dimension (ne[%d])",
                            t->name, d);
        if (t->ne[d] > (uint64_t)INT64_MAX / n)
            return seer_err(SEER_ERR_FORMAT, "tensor %.200s has absurd dimensions (overflow)",
                            t->name);
        n *= t->ne[d];
    }
    uint32_t type;
    SEER_TRY(rd_u32(r, &type, "tensor type"));
    SEER_TRY(rd_u64(r, &t->offset, "tensor offset"));
    if (type >= GGML_TYPE_COUNT || seer_ggml_type_block_elems((ggml_type)type) == 0)
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "unsupported tensor type %u in tensor %.200s (unknown block size)",
                        type, t->name);
    t->type = (ggml_type)type;
    uint64_t blk = (uint64_t)seer_ggml_type_block_elems(t->type);
    if (t->ne[0] % blk)
        return seer_err(SEER_ERR_FORMAT,
                        "tensor %.200s: ne[0] = %llu is not a multiple of the %s block size %llu",
                        t->name, (unsigned long long)t->ne[0], seer_ggml_type_name(t->type),
                        (unsigned long long)blk);
    uint64_t bytes = (uint64_t)seer_ggml_type_block_bytes(t->type);
    if (n / blk > SIZE_MAX / bytes)
        return seer_err(SEER_ERR_FORMAT, "tensor %.200s has absurd dimensions (size overflow)",
                        t->name);
    t->nbytes = (size_t)(n / blk * bytes);
    if (t->offset % f->alignment)
        return seer_err(SEER_ERR_FORMAT,
                        "tensor %.200s: offset %llu is not a multiple of the alignment %zu",
                        t->name, (unsigned long long)t->offset, f->alignment);
    return SEER_OK;
}

typedef struct {
    uint64_t offset;
    size_t idx;
} by_offset;

static int cmp_offset(const void *a, const void *b) {
    uint64_t x = ((const by_offset *)a)->offset, y = ((const by_offset *)b)->offset;
    return x < y ? -1 : x > y;
}

static seer_status read_tensors(reader *r, gguf_file *f, gguf_internal *in) {
    if (f->n_tensors > left(r) / MIN_TENSOR_INFO_BYTES)
        return seer_err(SEER_ERR_FORMAT,
                        "tensor count %llu exceeds what the remaining %zu bytes can hold",
                        (unsigned long long)f->n_tensors, left(r));
    in->tensor_cap = table_cap(f->n_tensors);
    in->tensor_slots = arena_alloc(in, in->tensor_cap * sizeof(size_t));
    f->tensors = arena_alloc(in, (size_t)f->n_tensors * sizeof(gguf_tensor));
    if (!in->tensor_slots || !f->tensors)
        return seer_err(SEER_ERR_OOM, "out of memory for %llu tensors",
                        (unsigned long long)f->n_tensors);
    memset(in->tensor_slots, 0, in->tensor_cap * sizeof(size_t));
    memset(f->tensors, 0, (size_t)f->n_tensors * sizeof(gguf_tensor));
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        SEER_TRY(read_tensor_info(r, f, t, i));
        size_t slot;
        if (table_find(f, in->tensor_slots, in->tensor_cap, tensor_name, t->name, &slot) !=
            SIZE_MAX)
            return seer_err(SEER_ERR_FORMAT, "duplicate tensor name %.200s", t->name);
        in->tensor_slots[slot] = (size_t)i + 1;
    }

    /* the data section starts at the next multiple of the alignment; a file without tensors
     * may end before it */
    size_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
    f->data_offset = r->pos + pad;
    if (f->n_tensors == 0)
        return SEER_OK;
    if (pad > left(r))
        return seer_err(SEER_ERR_FORMAT,
                        "truncated GGUF file: the tensor data section would start at offset "
                        "%zu, beyond the end of the file (%zu bytes)",
                        f->data_offset, r->size);
    size_t avail = r->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return seer_err(SEER_ERR_FORMAT,
                            "tensor %.200s: data at offset %llu + %zu bytes extends beyond the "
                            "end of the file (data section has %zu bytes; truncated file?)",
                            t->name, (unsigned long long)t->offset, t->nbytes, avail);
        t->data = r->p + f->data_offset + t->offset;
    }

    by_offset *order = seer_malloc_array((size_t)f->n_tensors, sizeof(by_offset));
    if (!order)
        return seer_err(SEER_ERR_OOM, "out of memory checking tensor overlaps");
    for (size_t i = 0; i < f->n_tensors; i++)
        order[i] = (by_offset){f->tensors[i].offset, i};
    qsort(order, (size_t)f->n_tensors, sizeof(by_offset), cmp_offset);
    seer_status s = SEER_OK;
    for (size_t i = 1; i < f->n_tensors && s == SEER_OK; i++) {
        const gguf_tensor *a = &f->tensors[order[i - 1].idx], *b = &f->tensors[order[i].idx];
        if (a->offset + a->nbytes > b->offset)
            s = seer_err(SEER_ERR_FORMAT, "tensors %.200s and %.200s overlap in the file",
                         a->name, b->name);
    }
    free(order);
    return s;
}

static seer_status parse(const uint8_t *data, size_t size, bool mapped, gguf_file **out) {
    gguf_file *f = calloc(1, sizeof *f);
    gguf_internal *in = calloc(1, sizeof *in);
    if (!f || !in) {
        free(f);
        free(in);
        return seer_err(SEER_ERR_OOM, "out of memory opening a GGUF file");
    }
    f->arena = in;
    f->base = data;
    f->size = size;
    f->mapped = mapped;
    reader r = {.p = data, .size = size, .in = in};
    seer_status s = read_header(&r, f);
    if (s == SEER_OK)
        s = read_kvs(&r, f, in);
    if (s == SEER_OK)
        s = read_alignment(f);
    if (s == SEER_OK)
        s = read_tensors(&r, f, in);
    if (s != SEER_OK) {
        internal_free(in);
        free(f);
        return s;
    }
    *out = f;
    return SEER_OK;
}

seer_status seer_gguf_file_open_memory(const void *data, size_t size, gguf_file **out) {
    if (!out || (!data && size))
        return seer_err(SEER_ERR_INVALID_ARG, "seer_gguf_file_open_memory: NULL argument");
    *out = NULL;
    return parse(data ? data : "", size, false, out);
}

/* The file's size bytes into a private anonymous mapping: the model then never reads the
 * file again, so a file truncated or rewritten under a running process can neither fault
 * (SIGBUS on a page past the new end) nor change the weights. A file that shrinks while it
 * is read is an error; bytes appended past size are ignored. */
static seer_status read_private(int fd, const char *path, size_t size, const uint8_t **out) {
    uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return seer_err(SEER_ERR_OOM, "cannot allocate %zu bytes to read %s: %s", size, path,
                        strerror(errno));
    size_t got = 0;
    while (got < size) {
        size_t want = size - got;
        if (want > ((size_t)1 << 30))
            want = (size_t)1 << 30; /* read() moves at most ~2 GiB per call on Linux */
        const ssize_t n = read(fd, m + got, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            const int e = n < 0 ? errno : 0;
            munmap(m, size);
            if (e)
                return seer_err(SEER_ERR_IO, "cannot read %s: %s", path, strerror(e));
            return seer_err(SEER_ERR_IO, "%s changed while it was read (%zu of %zu bytes)",
                            path, got, size);
        }
        got += (size_t)n;
    }
    if (mprotect(m, size, PROT_READ) != 0) { /* read-only from here, as the file mapping was */
        const int e = errno;
        munmap(m, size);
        return seer_err(SEER_ERR_OOM, "cannot protect the copy of %s: %s", path, strerror(e));
    }
    *out = m;
    return SEER_OK;
}

static seer_status open_file(const char *path, bool copy, gguf_file **out) {
    if (!path || !out)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_gguf_file_open: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return seer_err(SEER_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return seer_err(SEER_ERR_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return seer_err(SEER_ERR_IO, "%s is not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return seer_err(SEER_ERR_IO, "%s is too large to map", path);
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *base = (const uint8_t *)"";
    if (size && copy) {
        seer_status s = read_private(fd, path, size, &base);
        if (s != SEER_OK) {
            close(fd);
            return s;
        }
    } else if (size) {
        /* a file truncated by someone else while mapped faults on access (SIGBUS): only for
         * a short look at the metadata (seer_gguf_file_open_mapped) */
        void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return seer_err(SEER_ERR_IO, "cannot map %s: %s", path, strerror(e));
        }
        base = m;
    }
    close(fd);
    seer_status s = parse(base, size, size != 0, out);
    if (s != SEER_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", seer_last_error());
        if (size)
            munmap((void *)base, size);
        return seer_err(s, "%s: %s", path, msg);
    }
    return SEER_OK;
}

seer_status seer_gguf_file_open(const char *path, gguf_file **out) { return open_file(path, true, out); }

seer_status seer_gguf_file_open_mapped(const char *path, gguf_file **out) {
    return open_file(path, false, out);
}

void seer_gguf_drop_tensor_data(gguf_file *f) {
    if (!f || !f->mapped || f->data_dropped)
        return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const uintptr_t b = (uintptr_t)f->base, lo = (b + f->data_offset + page - 1) / page * page;
    const uintptr_t hi = (b + f->size + page - 1) / page * page;
    /* zero-filled pages from here on: a stray read gives zeros, never a fault */
    if (hi > lo && madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0)
        f->data_dropped = true;
}

void seer_gguf_file_close(gguf_file *f) {
    if (!f)
        return;
    if (f->mapped)
        munmap((void *)f->base, f->size);
    internal_free(f->arena);
    free(f);
}

/* ---- lookups and getters ------------------------------------------------------------- */

const gguf_kv *seer_gguf_find_kv(const gguf_file *f, const char *key) {
    if (!f || !key)
        return NULL;
    const gguf_internal *in = f->arena;
    size_t i = table_find(f, in->kv_slots, in->kv_cap, kv_name, key, NULL);
    return i == SIZE_MAX ? NULL : &f->kv[i];
}

const gguf_tensor *seer_gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name)
        return NULL;
    const gguf_internal *in = f->arena;
    size_t i = table_find(f, in->tensor_slots, in->tensor_cap, tensor_name, name, NULL);
    return i == SIZE_MAX ? NULL : &f->tensors[i];
}

static const char *value_type_name(gguf_type t) {
    static const char *names[GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
        "f64"};
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "unknown";
}

static seer_status missing(const char *key) {
    return seer_err(SEER_ERR_FORMAT, "missing required metadata %s", key);
}

static seer_status wrong_type(const char *key, gguf_type got, const char *want) {
    return seer_err(SEER_ERR_FORMAT, "metadata %s has type %s, expected %s", key,
                    value_type_name(got), want);
}

static bool is_unsigned(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static bool is_signed(gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

static seer_status value_i64(const char *key, const gguf_value *v, int64_t *out) {
    if (is_signed(v->type)) {
        *out = v->i64;
        return SEER_OK;
    }
    if (is_unsigned(v->type)) {
        if (v->u64 > (uint64_t)INT64_MAX)
            return seer_err(SEER_ERR_FORMAT, "metadata %s = %llu does not fit a signed 64-bit "
                                             "integer", key, (unsigned long long)v->u64);
        *out = (int64_t)v->u64;
        return SEER_OK;
    }
    return wrong_type(key, v->type, "an integer");
}

seer_status seer_gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = seer_gguf_find_kv(f, key);
    if (!kv)
        return missing(key);
    return value_i64(key, &kv->val, out);
}

seer_status seer_gguf_get_i64_opt(const gguf_file *f, const char *key, int64_t def, int64_t *out) {
    if (!seer_gguf_find_kv(f, key)) {
        *out = def;
        return SEER_OK;
    }
    return seer_gguf_get_i64(f, key, out);
}

seer_status seer_gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = seer_gguf_find_kv(f, key);
    if (!kv)
        return missing(key);
    const gguf_value *v = &kv->val;
    /* integers are accepted too: some converters write e.g. rope.freq_base as one */
    if (v->type == GGUF_TYPE_FLOAT64 && isfinite(v->f64) && fabs(v->f64) > FLT_MAX)
        return seer_err(SEER_ERR_FORMAT, "metadata %s = %g does not fit a 32-bit float", key,
                        v->f64);
    if (v->type == GGUF_TYPE_FLOAT32 || v->type == GGUF_TYPE_FLOAT64)
        *out = (float)v->f64;
    else if (is_signed(v->type))
        *out = (float)v->i64;
    else if (is_unsigned(v->type))
        *out = (float)v->u64;
    else
        return wrong_type(key, v->type, "a number");
    return SEER_OK;
}

seer_status seer_gguf_get_f32_opt(const gguf_file *f, const char *key, float def, float *out) {
    if (!seer_gguf_find_kv(f, key)) {
        *out = def;
        return SEER_OK;
    }
    return seer_gguf_get_f32(f, key, out);
}

seer_status seer_gguf_get_bool_opt(const gguf_file *f, const char *key, bool def, bool *out) {
    const gguf_kv *kv = seer_gguf_find_kv(f, key);
    if (!kv) {
        *out = def;
        return SEER_OK;
    }
    if (kv->val.type != GGUF_TYPE_BOOL)
        return wrong_type(key, kv->val.type, "bool");
    *out = kv->val.b;
    return SEER_OK;
}

static seer_status copy_str(const char *key, const gguf_value *v, char *buf, size_t cap) {
    if (v->type != GGUF_TYPE_STRING)
        return wrong_type(key, v->type, "string");
    if (v->str.len >= cap)
        return seer_err(SEER_ERR_FORMAT,
                        "metadata %s is a string of %llu bytes, longer than the %zu allowed",
                        key, (unsigned long long)v->str.len, cap ? cap - 1 : 0);
    memcpy(buf, v->str.s, (size_t)v->str.len);
    buf[v->str.len] = 0;
    return SEER_OK;
}

seer_status seer_gguf_get_str(const gguf_file *f, const char *key, char *buf, size_t cap) {
    const gguf_kv *kv = seer_gguf_find_kv(f, key);
    if (!kv)
        return missing(key);
    return copy_str(key, &kv->val, buf, cap);
}

seer_status seer_gguf_get_str_opt(const gguf_file *f, const char *key, const char *def, char *buf,
                             size_t cap) {
    const gguf_kv *kv = seer_gguf_find_kv(f, key);
    if (kv)
        return copy_str(key, &kv->val, buf, cap);
    size_t n = def ? strlen(def) : 0;
    if (n >= cap)
        return seer_err(SEER_ERR_INVALID_ARG, "default for metadata %s does not fit %zu bytes",
                        key, cap);
    memcpy(buf, def ? def : "", n);
    buf[n] = 0;
    return SEER_OK;
}

seer_status seer_gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem_type,
                         const gguf_value **out) {
    const gguf_kv *kv = seer_gguf_find_kv(f, key);
    if (!kv)
        return missing(key);
    if (kv->val.type != GGUF_TYPE_ARRAY)
        return wrong_type(key, kv->val.type, "array");
    if (elem_type != GGUF_TYPE_COUNT && kv->val.arr.type != elem_type)
        return seer_err(SEER_ERR_FORMAT, "metadata %s is an array of %s, expected %s", key,
                        value_type_name(kv->val.arr.type), value_type_name(elem_type));
    *out = &kv->val;
    return SEER_OK;
}
