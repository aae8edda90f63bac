/*
 * test_gguf.c: the GGUF reader and writer (round trips, the real tiny model, one test per
 * class of corrupt file, truncation at every offset) and the random-model generator.
 */
#include "testutil.h"

#include "gguf/gguf.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- helpers ------------------------------------------------------------------------- */

/* Opens a copy of buf in an allocation of exactly size bytes, so that AddressSanitizer
 * catches any read past the end. */
static seer_status open_exact(const uint8_t *buf, size_t size, gguf_file **out) {
    uint8_t *copy = malloc(size ? size : 1);
    assert_non_null(copy);
    memcpy(copy, buf, size);
    seer_status s = seer_gguf_file_open_memory(copy, size, out);
    if (s != SEER_OK) {
        assert_null(*out);
        free(copy);
    } else {
        /* the caller closes; the copy is freed with it through close_exact */
    }
    return s;
}

static void close_exact(gguf_file *f) {
    if (!f)
        return;
    void *base = (void *)f->base;
    seer_gguf_file_close(f);
    free(base);
}

#define EXPECT_FAIL(buf, size, status, needle)                                               \
    do {                                                                                     \
        gguf_file *f_ = (gguf_file *)0x1;                                                    \
        seer_status s_ = open_exact((buf), (size), &f_);                                     \
        if (s_ != (status))                                                                  \
            fail_msg("expected %s, got %s: %s", seer_status_str(status), seer_status_str(s_), \
                     seer_last_error());                                                     \
        if (!strstr(seer_last_error(), (needle)))                                            \
            fail_msg("message \"%s\" lacks \"%s\"", seer_last_error(), (needle));            \
    } while (0)

/* A hand-assembled GGUF byte stream. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} raw;

static void raw_put(raw *r, const void *d, size_t n) {
    if (r->n + n > r->cap) {
        r->cap = (r->n + n) * 2 + 64;
        r->p = realloc(r->p, r->cap);
        assert_non_null(r->p);
    }
    memcpy(r->p + r->n, d, n);
    r->n += n;
}
static void raw_u8(raw *r, uint8_t v) { raw_put(r, &v, 1); }
static void raw_u32(raw *r, uint32_t v) { raw_put(r, &v, 4); }
static void raw_u64(raw *r, uint64_t v) { raw_put(r, &v, 8); }
static void raw_str(raw *r, const char *s) {
    raw_u64(r, strlen(s));
    raw_put(r, s, strlen(s));
}
static void raw_header(raw *r, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw_put(r, "GGUF", 4);
    raw_u32(r, version);
    raw_u64(r, n_tensors);
    raw_u64(r, n_kv);
}
static void raw_kv_u32(raw *r, const char *key, uint32_t v) {
    raw_str(r, key);
    raw_u32(r, GGUF_TYPE_UINT32);
    raw_u32(r, v);
}
static void raw_tensor(raw *r, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset) {
    raw_str(r, name);
    raw_u32(r, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        raw_u64(r, ne[d]);
    raw_u32(r, type);
    raw_u64(r, offset);
}
static void raw_pad(raw *r, size_t align, size_t extra) {
    while (r->n % align)
        raw_u8(r, 0);
    for (size_t i = 0; i < extra; i++)
        raw_u8(r, (uint8_t)i);
}

/* A file with one kv and the given tensors (all f32 unless types say), data zero-filled to
 * data_bytes. */
static raw one_tensor_file(const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                           uint64_t offset, size_t data_bytes) {
    raw r = {0};
    raw_header(&r, 3, 1, 1);
    raw_kv_u32(&r, "general.x", 7);
    raw_tensor(&r, name, n_dims, ne, type, offset);
    raw_pad(&r, 32, data_bytes);
    return r;
}

static const gguf_kv *must_kv(const gguf_file *f, const char *key) {
    const gguf_kv *kv = seer_gguf_find_kv(f, key);
    if (!kv)
        fail_msg("key %s missing", key);
    return kv;
}

/* ---- round trips --------------------------------------------------------------------- */

static gguf_value val_u(gguf_type t, uint64_t u) { return (gguf_value){.type = t, .u64 = u}; }
static gguf_value val_i(gguf_type t, int64_t i) { return (gguf_value){.type = t, .i64 = i}; }
static gguf_value val_f(gguf_type t, double f) { return (gguf_value){.type = t, .f64 = f}; }
static gguf_value val_s(const char *s) {
    gguf_value v = {.type = GGUF_TYPE_STRING};
    v.str.s = s;
    v.str.len = strlen(s);
    return v;
}
static gguf_value val_arr(gguf_type et, gguf_value *items, uint64_t n) {
    gguf_value v = {.type = GGUF_TYPE_ARRAY};
    v.arr.type = et;
    v.arr.items = items;
    v.arr.n = n;
    return v;
}

static bool str_is(const gguf_value *v, const char *s) {
    return v->type == GGUF_TYPE_STRING && v->str.len == strlen(s) &&
           memcmp(v->str.s, s, v->str.len) == 0;
}

/* Writer with every value type, nested arrays and three tensors. */
static gguf_writer *make_rich_writer(void) {
    gguf_writer *w = seer_gguf_writer_init();
    assert_non_null(w);
    gguf_value v;
    v = val_u(GGUF_TYPE_UINT8, 250);
    ASSERT_OK(seer_gguf_writer_set_value(w, "t.u8", &v));
    v = val_i(GGUF_TYPE_INT8, -120);
    ASSERT_OK(seer_gguf_writer_set_value(w, "t.i8", &v));
    v = val_u(GGUF_TYPE_UINT16, 65000);
    ASSERT_OK(seer_gguf_writer_set_value(w, "t.u16", &v));
    v = val_i(GGUF_TYPE_INT16, -32000);
    ASSERT_OK(seer_gguf_writer_set_value(w, "t.i16", &v));
    seer_gguf_writer_set_u32(w, "t.u32", 4000000000u);
    seer_gguf_writer_set_i32(w, "t.i32", -2000000000);
    seer_gguf_writer_set_f32(w, "t.f32", 0.15625f);
    seer_gguf_writer_set_bool(w, "t.bool", true);
    seer_gguf_writer_set_bool(w, "t.bool_false", false);
    seer_gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo");
    seer_gguf_writer_set_str(w, "t.empty", "");
    seer_gguf_writer_set_u64(w, "t.u64", 0xfedcba9876543210ull);
    v = val_i(GGUF_TYPE_INT64, INT64_MIN);
    ASSERT_OK(seer_gguf_writer_set_value(w, "t.i64", &v));
    v = val_f(GGUF_TYPE_FLOAT64, 1.0 / 3.0);
    ASSERT_OK(seer_gguf_writer_set_value(w, "t.f64", &v));
    const char *strs[] = {"a", "", "\xe2\x96\x81the"};
    seer_gguf_writer_set_arr_str(w, "t.arr_str", strs, 3);
    const float fs[] = {0.f, -1.5f, 3e38f, -0.0f};
    seer_gguf_writer_set_arr_f32(w, "t.arr_f32", fs, 4);
    const int32_t is[] = {1, -2, INT32_MAX, INT32_MIN, 6};
    seer_gguf_writer_set_arr_i32(w, "t.arr_i32", is, 5);
    seer_gguf_writer_set_arr_i32(w, "t.arr_empty", NULL, 0);
    /* [["x","yy"], [], ["zzz"]] */
    gguf_value s0[] = {val_s("x"), val_s("yy")}, s2[] = {val_s("zzz")};
    gguf_value outer[] = {val_arr(GGUF_TYPE_STRING, s0, 2), val_arr(GGUF_TYPE_STRING, NULL, 0),
                          val_arr(GGUF_TYPE_STRING, s2, 1)};
    v = val_arr(GGUF_TYPE_ARRAY, outer, 3);
    ASSERT_OK(seer_gguf_writer_set_value(w, "t.nested", &v));
    gguf_value bools[] = {{.type = GGUF_TYPE_BOOL, .b = true}, {.type = GGUF_TYPE_BOOL, .b = 0}};
    v = val_arr(GGUF_TYPE_BOOL, bools, 2);
    ASSERT_OK(seer_gguf_writer_set_value(w, "t.arr_bool", &v));
    /* eight levels of arrays, the most the reader accepts */
    gguf_value lv[8];
    gguf_value leaf = val_u(GGUF_TYPE_UINT8, 42);
    lv[0] = val_arr(GGUF_TYPE_UINT8, &leaf, 1);
    for (int i = 1; i < 8; i++)
        lv[i] = val_arr(GGUF_TYPE_ARRAY, &lv[i - 1], 1);
    ASSERT_OK(seer_gguf_writer_set_value(w, "t.deep", &lv[7]));

    float a[6] = {1, 2, 3, 4, 5, 6};
    uint64_t ne_a[2] = {3, 2};
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 2, ne_a, a));
    uint16_t h[5];
    for (int i = 0; i < 5; i++)
        h[i] = seer_f32_to_f16((float)i - 2.f);
    uint64_t ne_h[1] = {5};
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "b.half", GGML_TYPE_F16, 1, ne_h, h));
    float q[64];
    for (int i = 0; i < 64; i++)
        q[i] = (float)(i - 32) / 8.f;
    uint8_t qb[68];
    ASSERT_OK(seer_gguf_quant(GGML_TYPE_Q8_0, q, qb, 64));
    uint64_t ne_q[4] = {32, 1, 2, 1};
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "c.q8", GGML_TYPE_Q8_0, 4, ne_q, qb));
    return w;
}

static void check_rich_file(const gguf_file *f) {
    assert_int_equal(f->n_kv, 21);
    assert_int_equal(f->n_tensors, 3);
    assert_int_equal(must_kv(f, "t.u8")->val.type, GGUF_TYPE_UINT8);
    assert_int_equal(must_kv(f, "t.u8")->val.u64, 250);
    assert_int_equal(must_kv(f, "t.i8")->val.type, GGUF_TYPE_INT8);
    assert_int_equal(must_kv(f, "t.i8")->val.i64, -120);
    assert_int_equal(must_kv(f, "t.u16")->val.u64, 65000);
    assert_int_equal(must_kv(f, "t.i16")->val.i64, -32000);
    assert_int_equal(must_kv(f, "t.u32")->val.u64, 4000000000u);
    assert_int_equal(must_kv(f, "t.i32")->val.type, GGUF_TYPE_INT32);
    assert_int_equal(must_kv(f, "t.i32")->val.i64, -2000000000);
    assert_true(must_kv(f, "t.f32")->val.f64 == 0.15625);
    assert_int_equal(must_kv(f, "t.f32")->val.type, GGUF_TYPE_FLOAT32);
    assert_true(must_kv(f, "t.bool")->val.b);
    assert_false(must_kv(f, "t.bool_false")->val.b);
    assert_true(str_is(&must_kv(f, "t.str")->val, "h\xc3\xa9llo"));
    assert_true(str_is(&must_kv(f, "t.empty")->val, ""));
    assert_true(must_kv(f, "t.u64")->val.u64 == 0xfedcba9876543210ull);
    assert_true(must_kv(f, "t.i64")->val.i64 == INT64_MIN);
    assert_true(must_kv(f, "t.f64")->val.f64 == 1.0 / 3.0);

    const gguf_value *arr;
    ASSERT_OK(seer_gguf_get_arr(f, "t.arr_str", GGUF_TYPE_STRING, &arr));
    assert_int_equal(arr->arr.n, 3);
    assert_true(str_is(&arr->arr.items[0], "a"));
    assert_true(str_is(&arr->arr.items[1], ""));
    assert_true(str_is(&arr->arr.items[2], "\xe2\x96\x81the"));
    ASSERT_OK(seer_gguf_get_arr(f, "t.arr_f32", GGUF_TYPE_FLOAT32, &arr));
    assert_int_equal(arr->arr.n, 4);
    assert_true(arr->arr.items[1].f64 == -1.5 && arr->arr.items[2].f64 == (double)3e38f);
    assert_true(signbit(arr->arr.items[3].f64));
    ASSERT_OK(seer_gguf_get_arr(f, "t.arr_i32", GGUF_TYPE_INT32, &arr));
    assert_int_equal(arr->arr.n, 5);
    assert_true(arr->arr.items[2].i64 == INT32_MAX && arr->arr.items[3].i64 == INT32_MIN);
    ASSERT_OK(seer_gguf_get_arr(f, "t.arr_empty", GGUF_TYPE_INT32, &arr));
    assert_int_equal(arr->arr.n, 0);
    ASSERT_OK(seer_gguf_get_arr(f, "t.arr_bool", GGUF_TYPE_BOOL, &arr));
    assert_true(arr->arr.items[0].b && !arr->arr.items[1].b);

    ASSERT_OK(seer_gguf_get_arr(f, "t.nested", GGUF_TYPE_ARRAY, &arr));
    assert_int_equal(arr->arr.n, 3);
    assert_int_equal(arr->arr.items[0].arr.type, GGUF_TYPE_STRING);
    assert_int_equal(arr->arr.items[0].arr.n, 2);
    assert_true(str_is(&arr->arr.items[0].arr.items[1], "yy"));
    assert_int_equal(arr->arr.items[1].arr.n, 0);
    assert_true(str_is(&arr->arr.items[2].arr.items[0], "zzz"));

    ASSERT_OK(seer_gguf_get_arr(f, "t.deep", GGUF_TYPE_COUNT, &arr));
    const gguf_value *v = arr;
    for (int i = 0; i < 7; i++) {
        assert_int_equal(v->arr.type, GGUF_TYPE_ARRAY);
        assert_int_equal(v->arr.n, 1);
        v = &v->arr.items[0];
    }
    assert_int_equal(v->arr.type, GGUF_TYPE_UINT8);
    assert_int_equal(v->arr.items[0].u64, 42);

    const gguf_tensor *t = seer_gguf_find_tensor(f, "a");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_true(t->ne[0] == 3 && t->ne[1] == 2 && t->ne[2] == 1 && t->ne[3] == 1);
    assert_int_equal(t->type, GGML_TYPE_F32);
    assert_int_equal(t->nbytes, 24);
    float got[64];
    ASSERT_OK(seer_gguf_tensor_dequant(t, got, 6));
    for (int i = 0; i < 6; i++)
        assert_true(got[i] == (float)(i + 1));
    t = seer_gguf_find_tensor(f, "b.half");
    assert_non_null(t);
    assert_int_equal(t->nbytes, 10);
    ASSERT_OK(seer_gguf_tensor_dequant(t, got, 5));
    assert_true(got[0] == -2.f && got[4] == 2.f);
    t = seer_gguf_find_tensor(f, "c.q8");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 4);
    assert_int_equal(seer_gguf_tensor_nelements(t), 64);
    assert_int_equal(t->nbytes, 68);
    ASSERT_OK(seer_gguf_tensor_dequant(t, got, 64));
    for (int i = 0; i < 64; i++)
        assert_true(fabsf(got[i] - (float)(i - 32) / 8.f) < 0.02f);
    assert_int_equal(seer_gguf_tensor_dequant(t, got, 96), SEER_ERR_INVALID_ARG);
    assert_null(seer_gguf_find_tensor(f, "missing"));
    assert_null(seer_gguf_find_kv(f, "t.missing"));

    /* layout: aligned data section, aligned offsets, pointers into the buffer */
    assert_int_equal(f->alignment, 32);
    assert_int_equal(f->data_offset % 32, 0);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        assert_int_equal(f->tensors[i].offset % 32, 0);
        assert_ptr_equal(f->tensors[i].data,
                         f->base + f->data_offset + f->tensors[i].offset);
    }
}

static void test_roundtrip_memory(void **state) {
    (void)state;
    gguf_writer *w = make_rich_writer();
    uint8_t *buf;
    size_t size;
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size));
    seer_gguf_writer_free(w);
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(buf, size, &f));
    assert_int_equal(f->version, 3);
    assert_false(f->mapped);
    check_rich_file(f);
    close_exact(f);
    free(buf);
}

static void test_roundtrip_file(void **state) {
    (void)state;
    gguf_writer *w = make_rich_writer();
    const char *path = tu_tmp_path("rich.gguf");
    ASSERT_OK(seer_gguf_writer_write(w, path));
    uint8_t *buf;
    size_t size;
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size));
    seer_gguf_writer_free(w);
    size_t fsize;
    uint8_t *fbuf = tu_read_file(path, &fsize);
    assert_non_null(fbuf);
    assert_int_equal(fsize, size);
    assert_memory_equal(fbuf, buf, size); /* file and buffer output agree byte for byte */
    free(fbuf);
    free(buf);
    gguf_file *f = NULL;
    ASSERT_OK(seer_gguf_file_open(path, &f));
    assert_true(f->mapped);
    assert_int_equal(f->size, size);
    check_rich_file(f);
    seer_gguf_file_close(f);
}

/* Streaming: declared tensors filled at write time give the bytes of a writer that was
 * handed the same data up front; a failing fill stops the write and removes the file. */
typedef struct {
    int calls;
    size_t fail_at; /* tensor index whose fill fails; SIZE_MAX: none */
} stream_ctx;

static void stream_data(size_t index, uint8_t *dst, size_t nbytes) {
    for (size_t i = 0; i < nbytes; i++)
        dst[i] = (uint8_t)(index * 31 + i * 7);
}

static seer_status stream_fill(void *ctx, size_t index, const char *name, void *dst,
                               size_t nbytes) {
    stream_ctx *c = ctx;
    c->calls++;
    if (index == c->fail_at)
        return seer_err(SEER_ERR_OOM, "no bytes for %s", name);
    stream_data(index, dst, nbytes);
    return SEER_OK;
}

static void test_stream_write(void **state) {
    (void)state;
    const uint64_t ne_a[2] = {64, 3}, ne_b[1] = {7}, ne_c[1] = {256};
    uint8_t a[64 / 32 * 34 * 3], c[256 / 256 * 144];
    stream_data(0, a, sizeof a);
    stream_data(2, c, sizeof c);
    float b[7] = {1, 2, 3, 4, 5, 6, 7};
    gguf_writer *full = seer_gguf_writer_init(), *lazy = seer_gguf_writer_init();
    seer_gguf_writer_set_u32(full, "k", 5);
    seer_gguf_writer_set_u32(lazy, "k", 5);
    ASSERT_OK(seer_gguf_writer_add_tensor(full, "a", GGML_TYPE_Q8_0, 2, ne_a, a));
    ASSERT_OK(seer_gguf_writer_add_tensor(full, "b", GGML_TYPE_F32, 1, ne_b, b));
    ASSERT_OK(seer_gguf_writer_add_tensor(full, "c", GGML_TYPE_Q4_K, 1, ne_c, c));
    ASSERT_OK(seer_gguf_writer_declare_tensor(lazy, "a", GGML_TYPE_Q8_0, 2, ne_a));
    ASSERT_OK(seer_gguf_writer_add_tensor(lazy, "b", GGML_TYPE_F32, 1, ne_b, b)); /* mixed */
    ASSERT_OK(seer_gguf_writer_declare_tensor(lazy, "c", GGML_TYPE_Q4_K, 1, ne_c));
    assert_int_equal(seer_gguf_writer_declare_tensor(lazy, "c", GGML_TYPE_F32, 1, ne_c),
                     SEER_ERR_INVALID_ARG); /* duplicate */
    assert_int_equal(seer_gguf_writer_declare_tensor(lazy, "d", GGML_TYPE_Q4_K, 1, ne_b),
                     SEER_ERR_INVALID_ARG); /* 7 is not a multiple of 256 */
    assert_int_equal(seer_gguf_writer_add_tensor(lazy, "e", GGML_TYPE_F32, 1, ne_b, NULL),
                     SEER_ERR_INVALID_ARG);
    const char *pf = tu_tmp_path("full.gguf"), *pl = tu_tmp_path("lazy.gguf");
    ASSERT_OK(seer_gguf_writer_write(full, pf));
    /* declared tensors need the streaming call */
    assert_int_equal(seer_gguf_writer_write(lazy, pl), SEER_ERR_INVALID_ARG);
    uint8_t *buf;
    size_t size;
    assert_int_equal(seer_gguf_writer_to_buffer(lazy, &buf, &size), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_gguf_writer_write_stream(lazy, pl, NULL, NULL), SEER_ERR_INVALID_ARG);
    stream_ctx sc = {.fail_at = SIZE_MAX};
    ASSERT_OK(seer_gguf_writer_write_stream(lazy, pl, stream_fill, &sc));
    assert_int_equal(sc.calls, 2);
    size_t nf, nl;
    uint8_t *bf = tu_read_file(pf, &nf), *bl = tu_read_file(pl, &nl);
    assert_true(bf && bl);
    assert_int_equal(nf, nl);
    assert_memory_equal(bf, bl, nf);
    free(bf);
    free(bl);
    sc = (stream_ctx){.fail_at = 2};
    assert_int_equal(seer_gguf_writer_write_stream(lazy, pl, stream_fill, &sc), SEER_ERR_OOM);
    assert_non_null(strstr(seer_last_error(), "no bytes for c"));
    struct stat st;
    assert_int_not_equal(stat(pl, &st), 0); /* removed */
    seer_gguf_writer_free(full);
    seer_gguf_writer_free(lazy);
}

static void test_getters(void **state) {
    (void)state;
    gguf_writer *w = make_rich_writer();
    uint8_t *buf;
    size_t size;
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size));
    seer_gguf_writer_free(w);
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(buf, size, &f));

    int64_t i = 0;
    ASSERT_OK(seer_gguf_get_i64(f, "t.u8", &i));
    assert_int_equal(i, 250);
    ASSERT_OK(seer_gguf_get_i64(f, "t.i16", &i));
    assert_int_equal(i, -32000);
    ASSERT_OK(seer_gguf_get_i64(f, "t.u32", &i));
    assert_int_equal(i, 4000000000ll);
    ASSERT_OK(seer_gguf_get_i64(f, "t.i64", &i));
    assert_true(i == INT64_MIN);
    i = 5;
    assert_int_equal(seer_gguf_get_i64(f, "t.u64", &i), SEER_ERR_FORMAT); /* > INT64_MAX */
    assert_int_equal(i, 5);
    assert_int_equal(seer_gguf_get_i64(f, "t.str", &i), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "t.str"));
    assert_int_equal(seer_gguf_get_i64(f, "t.f32", &i), SEER_ERR_FORMAT);
    assert_int_equal(seer_gguf_get_i64(f, "no.such.key", &i), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "missing required metadata no.such.key"));
    assert_int_equal(i, 5);
    ASSERT_OK(seer_gguf_get_i64_opt(f, "no.such.key", 77, &i));
    assert_int_equal(i, 77);
    assert_int_equal(seer_gguf_get_i64_opt(f, "t.bool", 1, &i), SEER_ERR_FORMAT);

    float x = 0;
    ASSERT_OK(seer_gguf_get_f32(f, "t.f32", &x));
    assert_true(x == 0.15625f);
    ASSERT_OK(seer_gguf_get_f32(f, "t.f64", &x));
    assert_true(x == (float)(1.0 / 3.0));
    ASSERT_OK(seer_gguf_get_f32(f, "t.i16", &x));
    assert_true(x == -32000.f);
    assert_int_equal(seer_gguf_get_f32(f, "t.arr_f32", &x), SEER_ERR_FORMAT);
    assert_int_equal(seer_gguf_get_f32(f, "nope", &x), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "missing required metadata nope"));
    ASSERT_OK(seer_gguf_get_f32_opt(f, "nope", 2.5f, &x));
    assert_true(x == 2.5f);
    assert_int_equal(seer_gguf_get_f32_opt(f, "t.str", 2.5f, &x), SEER_ERR_FORMAT);

    bool b = false;
    ASSERT_OK(seer_gguf_get_bool_opt(f, "t.bool", false, &b));
    assert_true(b);
    ASSERT_OK(seer_gguf_get_bool_opt(f, "nope", true, &b));
    assert_true(b);
    assert_int_equal(seer_gguf_get_bool_opt(f, "t.u8", false, &b), SEER_ERR_FORMAT);

    char s[16];
    ASSERT_OK(seer_gguf_get_str(f, "t.str", s, sizeof s));
    assert_string_equal(s, "h\xc3\xa9llo");
    ASSERT_OK(seer_gguf_get_str(f, "t.empty", s, sizeof s));
    assert_string_equal(s, "");
    strcpy(s, "keep");
    assert_int_equal(seer_gguf_get_str(f, "t.str", s, 6), SEER_ERR_FORMAT); /* 6 bytes + NUL */
    assert_string_equal(s, "keep");
    ASSERT_OK(seer_gguf_get_str(f, "t.str", s, 7));
    assert_int_equal(seer_gguf_get_str(f, "t.u32", s, sizeof s), SEER_ERR_FORMAT);
    assert_int_equal(seer_gguf_get_str(f, "nope", s, sizeof s), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "missing required metadata nope"));
    ASSERT_OK(seer_gguf_get_str_opt(f, "nope", "dflt", s, sizeof s));
    assert_string_equal(s, "dflt");
    ASSERT_OK(seer_gguf_get_str_opt(f, "t.str", "dflt", s, sizeof s));
    assert_string_equal(s, "h\xc3\xa9llo");

    const gguf_value *arr = NULL;
    assert_int_equal(seer_gguf_get_arr(f, "t.arr_f32", GGUF_TYPE_INT32, &arr), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "t.arr_f32"));
    assert_null(arr);
    assert_int_equal(seer_gguf_get_arr(f, "t.u8", GGUF_TYPE_COUNT, &arr), SEER_ERR_FORMAT);
    assert_int_equal(seer_gguf_get_arr(f, "nope", GGUF_TYPE_COUNT, &arr), SEER_ERR_FORMAT);
    ASSERT_OK(seer_gguf_get_arr(f, "t.arr_f32", GGUF_TYPE_COUNT, &arr));
    close_exact(f);
    free(buf);

    /* doubles beyond the f32 range: an error for the getter, inf when written as f32 */
    w = seer_gguf_writer_init();
    gguf_value big = val_f(GGUF_TYPE_FLOAT64, 1e300);
    ASSERT_OK(seer_gguf_writer_set_value(w, "big", &big));
    big.type = GGUF_TYPE_FLOAT32;
    ASSERT_OK(seer_gguf_writer_set_value(w, "big32", &big));
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size));
    seer_gguf_writer_free(w);
    ASSERT_OK(open_exact(buf, size, &f));
    x = 1.f;
    assert_int_equal(seer_gguf_get_f32(f, "big", &x), SEER_ERR_FORMAT);
    assert_true(x == 1.f);
    ASSERT_OK(seer_gguf_get_f32(f, "big32", &x));
    assert_true(isinf(x));
    close_exact(f);
    free(buf);
}

static void test_version2(void **state) {
    (void)state;
    gguf_writer *w = make_rich_writer();
    uint8_t *buf;
    size_t size;
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size));
    seer_gguf_writer_free(w);
    /* v2 and v3 share the layout (v3 only added big-endian files) */
    buf[4] = 2;
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(buf, size, &f));
    assert_int_equal(f->version, 2);
    check_rich_file(f);
    close_exact(f);

    buf[4] = 1;
    EXPECT_FAIL(buf, size, SEER_ERR_UNSUPPORTED, "version 1");
    buf[4] = 4;
    EXPECT_FAIL(buf, size, SEER_ERR_UNSUPPORTED, "version 4");
    buf[4] = 0;
    EXPECT_FAIL(buf, size, SEER_ERR_UNSUPPORTED, "version 0");
    buf[4] = 0;
    buf[7] = 3; /* a big-endian file's version */
    EXPECT_FAIL(buf, size, SEER_ERR_UNSUPPORTED, "big-endian");
    free(buf);
}

static void check_alignment(size_t align) {
    gguf_writer *w = seer_gguf_writer_init();
    if (align)
        seer_gguf_writer_set_u32(w, "general.alignment", (uint32_t)align);
    seer_gguf_writer_set_str(w, "k", "abc");
    uint8_t data[40];
    for (int i = 0; i < 40; i++)
        data[i] = (uint8_t)(i * 7);
    uint64_t ne1 = 5, ne2 = 3, ne3 = 10;
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "x", GGML_TYPE_F16, 1, &ne1, data));
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "y", GGML_TYPE_F32, 1, &ne2, data));
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "z", GGML_TYPE_F32, 1, &ne3, data));
    uint8_t *buf;
    size_t size;
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size));
    seer_gguf_writer_free(w);
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(buf, size, &f));
    size_t a = align ? align : 32;
    assert_int_equal(f->alignment, a);
    assert_int_equal(f->data_offset % a, 0);
    assert_true(f->data_offset >= 24);
    for (uint64_t i = 0; i < 3; i++) {
        const gguf_tensor *t = &f->tensors[i];
        assert_int_equal(t->offset % a, 0);
        assert_memory_equal(t->data, data, t->nbytes);
    }
    /* the writer packs tensors at the next aligned offset */
    assert_int_equal(f->tensors[1].offset, (10 + a - 1) / a * a);
    close_exact(f);
    free(buf);
}

static void test_alignment(void **state) {
    (void)state;
    check_alignment(0); /* default 32 */
    check_alignment(32);
    check_alignment(64);
    check_alignment(8);
    check_alignment(4096);

    /* writer refuses alignments the reader would refuse */
    const uint32_t bad[] = {48, 1, 2, 4};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gguf_writer *w = seer_gguf_writer_init();
        seer_gguf_writer_set_u32(w, "general.alignment", bad[i]);
        uint8_t *buf;
        size_t size;
        assert_int_equal(seer_gguf_writer_to_buffer(w, &buf, &size), SEER_ERR_INVALID_ARG);
        assert_non_null(strstr(seer_last_error(), "power of two"));
        seer_gguf_writer_free(w);
    }
}

static void test_bad_alignment(void **state) {
    (void)state;
    /* 1, 2 and 4 are powers of two, but the GGUF spec asks for multiples of 8: with them
     * an f32 tensor can start at an odd offset (a misaligned load in the CPU matmul) */
    const uint32_t bad[] = {0, 1, 2, 3, 4, 48, 0x80000000u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        raw r = {0};
        raw_header(&r, 3, 0, 1);
        raw_kv_u32(&r, "general.alignment", bad[i]);
        EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "general.alignment");
        free(r.p);
    }
    /* a tensor at offset 1 under alignment 1 is what the check keeps out */
    raw r1 = {0};
    raw_header(&r1, 3, 1, 1);
    raw_kv_u32(&r1, "general.alignment", 1);
    uint64_t ne1 = 2;
    raw_tensor(&r1, "t", 1, &ne1, GGML_TYPE_F32, 1);
    raw_pad(&r1, 1, 9);
    EXPECT_FAIL(r1.p, r1.n, SEER_ERR_FORMAT, "multiple of 8");
    free(r1.p);
    raw r = {0};
    raw_header(&r, 3, 0, 1);
    raw_str(&r, "general.alignment");
    raw_u32(&r, GGUF_TYPE_STRING);
    raw_str(&r, "32");
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "general.alignment");
    free(r.p);

    /* a valid custom alignment read from a hand-built file */
    r = (raw){0};
    raw_header(&r, 3, 1, 1);
    raw_kv_u32(&r, "general.alignment", 16);
    uint64_t ne = 4;
    raw_tensor(&r, "t", 1, &ne, GGML_TYPE_F32, 16);
    raw_pad(&r, 16, 32);
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(r.p, r.n, &f));
    assert_int_equal(f->alignment, 16);
    assert_int_equal(f->data_offset % 16, 0);
    close_exact(f);
    free(r.p);
}

/* ---- names with control characters ----------------------------------------------------- */

static void test_text_escape(void **state) {
    (void)state;
    char b[64];
    assert_string_equal(seer_text_escape("plain é ü", b, sizeof b), "plain é ü");
    assert_string_equal(seer_text_escape("a\x1b[2Jb\n\t\r\x7f", b, sizeof b), "a\\x1b[2Jb\\n\\t\\r\\x7f");
    /* U+009B (CSI in the C1 range), a lone continuation byte, a truncated sequence */
    assert_string_equal(seer_text_escape("x\xc2\x9by\x80z\xe2\x82", b, sizeof b),
                        "x\\u009by\\x80z\\xe2\\x82");
    /* cut between units, never inside an escape or a character */
    assert_string_equal(seer_text_escape("ab\x1b", b, 5), "ab");
    assert_string_equal(seer_text_escape("a\xc3\xa9", b, 3), "a");
    assert_string_equal(seer_text_escape(NULL, b, sizeof b), "");
    assert_null(seer_text_escape("x", NULL, 4));
}

static void test_escaped_messages(void **state) {
    (void)state;
    /* a duplicate key and a tensor name carrying a terminal escape: the messages quote them
     * escaped, with no control byte left */
    raw r = {0};
    raw_header(&r, 3, 0, 2);
    raw_kv_u32(&r, "k\x1b]0;owned\x07", 1);
    raw_kv_u32(&r, "k\x1b]0;owned\x07", 2);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "k\\x1b]0;owned\\x07");
    free(r.p);
    r = (raw){0};
    raw_header(&r, 3, 1, 0);
    const uint64_t ne[7] = {4, 1, 1, 1, 1, 1, 1};
    raw_tensor(&r, "t\x1b[2J", 7, ne, GGML_TYPE_F32, 0);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "t\\x1b[2J");
    free(r.p);
    for (const char *m = seer_last_error(); *m; m++)
        assert_true((unsigned char)*m >= 0x20 && *m != 0x7f);
}

/* ---- the real tiny model ------------------------------------------------------------- */

static void test_stories260k(void **state) {
    (void)state;
    gguf_file *f = NULL;
    ASSERT_OK(seer_gguf_file_open(tu_data_path("models/stories260K.gguf"), &f));
    assert_int_equal(f->version, 3);
    char s[64];
    ASSERT_OK(seer_gguf_get_str(f, "general.architecture", s, sizeof s));
    assert_string_equal(s, "llama");
    int64_t v;
    ASSERT_OK(seer_gguf_get_i64(f, "llama.embedding_length", &v));
    assert_int_equal(v, 64);
    ASSERT_OK(seer_gguf_get_i64(f, "llama.block_count", &v));
    assert_int_equal(v, 5);
    ASSERT_OK(seer_gguf_get_i64(f, "llama.attention.head_count_kv", &v));
    assert_int_equal(v, 4);
    float eps;
    ASSERT_OK(seer_gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps));
    assert_true(eps > 0.9e-5f && eps < 1.1e-5f);
    const gguf_value *tok;
    ASSERT_OK(seer_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok));
    assert_int_equal(tok->arr.n, 512);
    assert_true(str_is(&tok->arr.items[1], "<s>"));
    const gguf_value *sc;
    ASSERT_OK(seer_gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &sc));
    assert_int_equal(sc->arr.n, 512);
    bool add_bos = false;
    ASSERT_OK(seer_gguf_get_bool_opt(f, "tokenizer.ggml.add_bos_token", false, &add_bos));
    assert_true(add_bos);

    assert_int_equal(f->n_tensors, 47);
    const gguf_tensor *t = seer_gguf_find_tensor(f, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, GGML_TYPE_F32);
    assert_true(t->ne[0] == 64 && t->ne[1] == 512);
    assert_null(seer_gguf_find_tensor(f, "output.weight")); /* tied */
    t = seer_gguf_find_tensor(f, "blk.4.ffn_down.weight");
    assert_non_null(t);
    assert_true(t->ne[0] == 172 && t->ne[1] == 64);
    float row[172];
    ASSERT_OK(seer_gguf_tensor_dequant(t, row, 172));
    for (int i = 0; i < 172; i++)
        assert_true(isfinite(row[i]) && fabsf(row[i]) < 10.f);
    seer_gguf_file_close(f);
}

/* ---- corrupt files, one test per class ------------------------------------------------ */

static void test_bad_magic_and_io(void **state) {
    (void)state;
    raw r = {0};
    raw_header(&r, 3, 0, 0);
    r.p[0] = 'X';
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "magic");
    EXPECT_FAIL(r.p, 0, SEER_ERR_FORMAT, "magic");
    EXPECT_FAIL(r.p, 3, SEER_ERR_FORMAT, "magic");
    r.p[0] = 'G';
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(r.p, r.n, &f)); /* an empty GGUF file is valid */
    assert_int_equal(f->n_kv, 0);
    assert_int_equal(f->n_tensors, 0);
    close_exact(f);
    free(r.p);

    f = (gguf_file *)0x1;
    assert_int_equal(seer_gguf_file_open(tu_tmp_path("does-not-exist.gguf"), &f), SEER_ERR_IO);
    assert_null(f);
    assert_non_null(strstr(seer_last_error(), "does-not-exist.gguf"));
    assert_int_equal(seer_gguf_file_open("/tmp", &f), SEER_ERR_IO);
    const char *empty = tu_tmp_path("empty.gguf");
    assert_int_equal(tu_write_file(empty, "", 0), 0);
    assert_int_equal(seer_gguf_file_open(empty, &f), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "empty.gguf"));
    const char *bad = tu_tmp_path("bad.gguf");
    assert_int_equal(tu_write_file(bad, "GGUF\x03\0\0\0\x01", 9), 0);
    assert_int_equal(seer_gguf_file_open(bad, &f), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "truncated"));
    assert_null(f);
}

static void test_bad_counts(void **state) {
    (void)state;
    raw r = {0};
    raw_header(&r, 3, 0, 1000000);
    raw_kv_u32(&r, "a", 1);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "metadata count 1000000");
    free(r.p);
    r = (raw){0};
    raw_header(&r, 3, UINT64_MAX, 0);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "tensor count");
    free(r.p);
    r = (raw){0};
    raw_header(&r, 3, 0, UINT64_MAX);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "metadata count");
    free(r.p);
    /* more kvs announced than present, but few enough to pass the size check */
    r = (raw){0};
    raw_header(&r, 3, 0, 2);
    raw_kv_u32(&r, "a", 1);
    raw_kv_u32(&r, "b", 1);
    r.n -= 2;
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "truncated");
    free(r.p);
}

static void test_bad_arrays(void **state) {
    (void)state;
    const uint32_t types[] = {GGUF_TYPE_UINT8, GGUF_TYPE_UINT64, GGUF_TYPE_STRING,
                              GGUF_TYPE_ARRAY};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        raw r = {0};
        raw_header(&r, 3, 0, 1);
        raw_str(&r, "tokenizer.ggml.tokens");
        raw_u32(&r, GGUF_TYPE_ARRAY);
        raw_u32(&r, types[i]);
        raw_u64(&r, (uint64_t)1 << 62);
        raw_u64(&r, 0);
        EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "array length");
        assert_non_null(strstr(seer_last_error(), "tokenizer.ggml.tokens"));
        free(r.p);
    }
    /* unknown element type */
    raw r = {0};
    raw_header(&r, 3, 0, 1);
    raw_str(&r, "k");
    raw_u32(&r, GGUF_TYPE_ARRAY);
    raw_u32(&r, 13);
    raw_u64(&r, 0);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "element type 13");
    free(r.p);
    /* nine levels of nesting */
    r = (raw){0};
    raw_header(&r, 3, 0, 1);
    raw_str(&r, "deep");
    raw_u32(&r, GGUF_TYPE_ARRAY);
    for (int i = 0; i < 9; i++) {
        raw_u32(&r, GGUF_TYPE_ARRAY);
        raw_u64(&r, 1);
    }
    raw_u32(&r, GGUF_TYPE_UINT8);
    raw_u64(&r, 0);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "nested");
    assert_non_null(strstr(seer_last_error(), "deep"));
    free(r.p);
    /* the writer refuses to produce such a file */
    gguf_value lv[9];
    lv[0] = val_arr(GGUF_TYPE_UINT8, NULL, 0);
    for (int i = 1; i < 9; i++)
        lv[i] = val_arr(GGUF_TYPE_ARRAY, &lv[i - 1], 1);
    gguf_writer *w = seer_gguf_writer_init();
    assert_int_equal(seer_gguf_writer_set_value(w, "deep", &lv[8]), SEER_ERR_INVALID_ARG);
    seer_gguf_writer_free(w);
}

static void test_bad_strings(void **state) {
    (void)state;
    raw r = {0};
    raw_header(&r, 3, 0, 1);
    raw_str(&r, "general.name");
    raw_u32(&r, GGUF_TYPE_STRING);
    raw_u64(&r, 1000);
    raw_put(&r, "short", 5);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "1000 bytes");
    assert_non_null(strstr(seer_last_error(), "general.name"));
    free(r.p);
    /* key length beyond the file */
    r = (raw){0};
    raw_header(&r, 3, 0, 1);
    raw_u64(&r, UINT64_MAX);
    raw_put(&r, "abcdefghijklmnop", 16);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "truncated");
    free(r.p);
    /* a key holding a NUL byte */
    r = (raw){0};
    raw_header(&r, 3, 0, 1);
    raw_u64(&r, 3);
    raw_put(&r, "a\0b", 3);
    raw_u32(&r, GGUF_TYPE_UINT8);
    raw_u8(&r, 1);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "NUL");
    free(r.p);
    /* keys that are not UTF-8 are accepted and found */
    r = (raw){0};
    raw_header(&r, 3, 0, 1);
    raw_str(&r, "k\xff\xfe");
    raw_u32(&r, GGUF_TYPE_UINT8);
    raw_u8(&r, 9);
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(r.p, r.n, &f));
    assert_non_null(seer_gguf_find_kv(f, "k\xff\xfe"));
    close_exact(f);
    free(r.p);
}

static void test_bad_values(void **state) {
    (void)state;
    raw r = {0};
    raw_header(&r, 3, 0, 1);
    raw_str(&r, "tokenizer.ggml.add_bos_token");
    raw_u32(&r, GGUF_TYPE_BOOL);
    raw_u8(&r, 2);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "invalid bool");
    assert_non_null(strstr(seer_last_error(), "add_bos_token"));
    free(r.p);
    /* invalid bool inside an array */
    r = (raw){0};
    raw_header(&r, 3, 0, 1);
    raw_str(&r, "flags");
    raw_u32(&r, GGUF_TYPE_ARRAY);
    raw_u32(&r, GGUF_TYPE_BOOL);
    raw_u64(&r, 3);
    raw_u8(&r, 1);
    raw_u8(&r, 0);
    raw_u8(&r, 0xff);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "invalid bool");
    free(r.p);
    r = (raw){0};
    raw_header(&r, 3, 0, 1);
    raw_str(&r, "weird");
    raw_u32(&r, 99);
    raw_u32(&r, 0);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "value type 99");
    free(r.p);
    r = (raw){0};
    raw_header(&r, 3, 0, 2);
    raw_kv_u32(&r, "general.dup", 1);
    raw_kv_u32(&r, "general.dup", 2);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "duplicate metadata key general.dup");
    free(r.p);
}

static void test_bad_dims(void **state) {
    (void)state;
    uint64_t ne[5] = {4, 1, 1, 1, 1};
    raw r = one_tensor_file("blk.0.w", 0, ne, GGML_TYPE_F32, 0, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "0 dimensions");
    assert_non_null(strstr(seer_last_error(), "blk.0.w"));
    free(r.p);
    r = one_tensor_file("blk.0.w", 5, ne, GGML_TYPE_F32, 0, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "5 dimensions");
    free(r.p);
    uint64_t zero[2] = {4, 0};
    r = one_tensor_file("blk.0.w", 2, zero, GGML_TYPE_F32, 0, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "zero dimension");
    assert_non_null(strstr(seer_last_error(), "blk.0.w"));
    free(r.p);
    uint64_t huge[4] = {1u << 16, 1u << 16, 1u << 16, 1u << 16};
    r = one_tensor_file("big", 4, huge, GGML_TYPE_F32, 0, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "overflow");
    free(r.p);
    /* the product fits but the bytes do not */
    uint64_t wide[2] = {(uint64_t)1 << 40, (uint64_t)1 << 22};
    r = one_tensor_file("wide", 2, wide, GGML_TYPE_F32, 0, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "overflow");
    free(r.p);
    /* fits in size_t, far beyond the file */
    uint64_t big[2] = {1024, 1024};
    r = one_tensor_file("blk.1.w", 2, big, GGML_TYPE_F32, 0, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "beyond the end");
    assert_non_null(strstr(seer_last_error(), "blk.1.w"));
    free(r.p);
    uint64_t odd[2] = {48, 2};
    r = one_tensor_file("q", 2, odd, GGML_TYPE_Q8_0, 0, 256);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "block size");
    assert_non_null(strstr(seer_last_error(), "q8_0"));
    free(r.p);
}

static void test_bad_types(void **state) {
    (void)state;
    uint64_t ne[2] = {32, 2};
    const uint32_t unknown[] = {4, 5, 16, 29, 39, 40, 1000, 0xffffffffu};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        raw r = one_tensor_file("blk.3.attn_q.weight", 2, ne, unknown[i], 0, 1024);
        char want[80];
        snprintf(want, sizeof want, "unsupported tensor type %u in tensor blk.3.attn_q.weight",
                 unknown[i]);
        EXPECT_FAIL(r.p, r.n, SEER_ERR_UNSUPPORTED, want);
        free(r.p);
    }
    /* known block size, no dequantiser: opens, fails when dequantised */
    const uint32_t known[] = {GGML_TYPE_Q8_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q8_K};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        uint64_t kne[2] = {256, 2};
        raw r = one_tensor_file("blk.0.ffn_up.weight", 2, kne, known[i], 0, 1024);
        gguf_file *f = NULL;
        ASSERT_OK(open_exact(r.p, r.n, &f));
        const gguf_tensor *t = seer_gguf_find_tensor(f, "blk.0.ffn_up.weight");
        assert_non_null(t);
        size_t nb;
        ASSERT_OK(seer_ggml_nbytes((ggml_type)known[i], 512, &nb));
        assert_int_equal(t->nbytes, nb);
        float out[256];
        assert_int_equal(seer_gguf_tensor_dequant(t, out, 256), SEER_ERR_UNSUPPORTED);
        char want[96];
        snprintf(want, sizeof want, "unsupported tensor type %s (%u) in tensor blk.0.ffn_up.weight",
                 seer_ggml_type_name((ggml_type)known[i]), known[i]);
        if (!strstr(seer_last_error(), want))
            fail_msg("message \"%s\" lacks \"%s\"", seer_last_error(), want);
        assert_int_equal(seer_gguf_dequant(t->type, t->data, out, 256), SEER_ERR_UNSUPPORTED);
        close_exact(f);
        free(r.p);
    }
}

static void test_bad_offsets(void **state) {
    (void)state;
    uint64_t ne = 8;
    raw r = one_tensor_file("t", 1, &ne, GGML_TYPE_F32, 16, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "alignment");
    assert_non_null(strstr(seer_last_error(), "offset 16"));
    free(r.p);
    r = one_tensor_file("t", 1, &ne, GGML_TYPE_F32, 64, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "beyond the end");
    free(r.p);
    r = one_tensor_file("t", 1, &ne, GGML_TYPE_F32, UINT64_MAX - 31, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "beyond the end");
    free(r.p);
    /* data section itself starts past the end: infos end mid-block, no padding follows */
    r = (raw){0};
    raw_header(&r, 3, 1, 0);
    raw_tensor(&r, "t", 1, &ne, GGML_TYPE_F32, 0);
    assert_true(r.n % 32 != 0);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "truncated");
    free(r.p);

    /* overlap: b starts inside a */
    uint64_t ne_a = 16, ne_b = 8;
    r = (raw){0};
    raw_header(&r, 3, 2, 0);
    raw_tensor(&r, "a", 1, &ne_a, GGML_TYPE_F32, 32);
    raw_tensor(&r, "b", 1, &ne_b, GGML_TYPE_F32, 64);
    raw_pad(&r, 32, 256);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "overlap");
    assert_non_null(strstr(seer_last_error(), "a and b"));
    free(r.p);
    /* same offset */
    r = (raw){0};
    raw_header(&r, 3, 2, 0);
    raw_tensor(&r, "a", 1, &ne_b, GGML_TYPE_F32, 0);
    raw_tensor(&r, "b", 1, &ne_b, GGML_TYPE_F32, 0);
    raw_pad(&r, 32, 256);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "overlap");
    free(r.p);
    /* adjacent, listed out of order: fine */
    r = (raw){0};
    raw_header(&r, 3, 2, 0);
    raw_tensor(&r, "a", 1, &ne_b, GGML_TYPE_F32, 32);
    raw_tensor(&r, "b", 1, &ne_b, GGML_TYPE_F32, 0);
    raw_pad(&r, 32, 64);
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(r.p, r.n, &f));
    close_exact(f);
    free(r.p);
    /* duplicate names */
    r = (raw){0};
    raw_header(&r, 3, 2, 0);
    raw_tensor(&r, "output.weight", 1, &ne_b, GGML_TYPE_F32, 0);
    raw_tensor(&r, "output.weight", 1, &ne_b, GGML_TYPE_F32, 32);
    raw_pad(&r, 32, 64);
    EXPECT_FAIL(r.p, r.n, SEER_ERR_FORMAT, "duplicate tensor name output.weight");
    free(r.p);
}

/* A small file whose last tensor ends exactly at the end of the file, so that every
 * truncation removes something the reader needs. */
static void make_small_file(uint8_t **buf, size_t *size) {
    gguf_writer *w = seer_gguf_writer_init();
    seer_gguf_writer_set_str(w, "general.architecture", "llama");
    seer_gguf_writer_set_u32(w, "llama.block_count", 1);
    const char *toks[] = {"<unk>", "a", "bc"};
    seer_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    const float sc[] = {0, -1, -2};
    seer_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", sc, 3);
    gguf_value inner[] = {val_s("x")};
    gguf_value outer[] = {val_arr(GGUF_TYPE_STRING, inner, 1)};
    gguf_value v = val_arr(GGUF_TYPE_ARRAY, outer, 1);
    ASSERT_OK(seer_gguf_writer_set_value(w, "nested", &v));
    seer_gguf_writer_set_bool(w, "flag", true);
    float d[16];
    for (int i = 0; i < 16; i++)
        d[i] = (float)i;
    uint64_t ne_a[2] = {4, 2}, ne_b = 32;
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 2, ne_a, d));
    uint8_t q[34] = {0};
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "b", GGML_TYPE_Q8_0, 1, &ne_b, q));
    uint64_t ne_c = 8;
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "c", GGML_TYPE_F32, 1, &ne_c, d));
    ASSERT_OK(seer_gguf_writer_to_buffer(w, buf, size));
    seer_gguf_writer_free(w);
}

static void test_truncation_everywhere(void **state) {
    (void)state;
    uint8_t *buf;
    size_t size;
    make_small_file(&buf, &size);
    assert_int_equal(size % 32, 0); /* "c" is 32 bytes: no trailing padding to cut */
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(buf, size, &f));
    close_exact(f);
    for (size_t cut = 0; cut < size; cut++) {
        f = (gguf_file *)0x1;
        seer_status s = open_exact(buf, cut, &f);
        if (s == SEER_OK)
            fail_msg("file cut to %zu of %zu bytes opened", cut, size);
        assert_int_equal(s, SEER_ERR_FORMAT);
        assert_true(seer_last_error()[0] != 0);
    }
    free(buf);
}

/* Every single-byte change either opens (and then every tensor is inside the file) or fails
 * with a message; never a crash or a leak. */
static void test_byte_flips(void **state) {
    (void)state;
    uint8_t *buf;
    size_t size;
    make_small_file(&buf, &size);
    const uint8_t vals[] = {0x00, 0x01, 0x08, 0x7f, 0x80, 0xff};
    int failed = 0;
    for (size_t i = 0; i < size; i++) {
        for (size_t k = 0; k < sizeof vals; k++) {
            uint8_t old = buf[i];
            if (old == vals[k])
                continue;
            buf[i] = vals[k];
            gguf_file *f = NULL;
            seer_status s = open_exact(buf, size, &f);
            if (s == SEER_OK) {
                for (uint64_t t = 0; t < f->n_tensors; t++) {
                    const gguf_tensor *tt = &f->tensors[t];
                    assert_true((const uint8_t *)tt->data >= f->base);
                    assert_true((const uint8_t *)tt->data + tt->nbytes <= f->base + f->size);
                }
                close_exact(f);
            } else {
                assert_true(seer_last_error()[0] != 0);
                failed++;
            }
            buf[i] = old;
        }
    }
    assert_true(failed > 0);
    free(buf);
}

/* ---- writer errors ------------------------------------------------------------------- */

static void test_writer_errors(void **state) {
    (void)state;
    gguf_writer *w = seer_gguf_writer_init();
    float d[64] = {0};
    uint64_t ne[2] = {32, 2};
    ASSERT_OK(seer_gguf_writer_add_tensor(w, "x", GGML_TYPE_F32, 2, ne, d));
    assert_int_equal(seer_gguf_writer_add_tensor(w, "x", GGML_TYPE_F32, 2, ne, d),
                     SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "duplicate"));
    assert_int_equal(seer_gguf_writer_add_tensor(w, "y", GGML_TYPE_F32, 0, ne, d),
                     SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_gguf_writer_add_tensor(w, "y", GGML_TYPE_F32, 5, ne, d),
                     SEER_ERR_INVALID_ARG);
    uint64_t odd[1] = {33};
    assert_int_equal(seer_gguf_writer_add_tensor(w, "y", GGML_TYPE_Q4_0, 1, odd, d),
                     SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_gguf_writer_add_tensor(w, "y", (ggml_type)20, 1, ne, d),
                     SEER_ERR_UNSUPPORTED);
    uint64_t zero[1] = {0};
    assert_int_equal(seer_gguf_writer_add_tensor(w, "y", GGML_TYPE_F32, 1, zero, d),
                     SEER_ERR_INVALID_ARG);
    /* setting a key twice keeps one entry with the last value */
    seer_gguf_writer_set_u32(w, "k", 1);
    seer_gguf_writer_set_str(w, "k", "two");
    uint8_t *buf;
    size_t size;
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size));
    gguf_file *f = NULL;
    ASSERT_OK(open_exact(buf, size, &f));
    assert_int_equal(f->n_kv, 1);
    assert_true(str_is(&must_kv(f, "k")->val, "two"));
    assert_int_equal(f->n_tensors, 1);
    close_exact(f);
    free(buf);
    assert_int_equal(seer_gguf_writer_write(w, "/nonexistent-dir/x.gguf"), SEER_ERR_IO);
    /* a failed void setter is reported by write */
    seer_gguf_writer_set_str(w, NULL, "v");
    assert_int_equal(seer_gguf_writer_to_buffer(w, &buf, &size), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_gguf_writer_write(w, tu_tmp_path("never.gguf")), SEER_ERR_INVALID_ARG);
    struct stat st;
    assert_int_not_equal(stat(tu_tmp_path("never.gguf"), &st), 0);
    seer_gguf_writer_free(w);

    w = seer_gguf_writer_init();
    gguf_value bad = val_arr(GGUF_TYPE_UINT32, NULL, 0);
    gguf_value items[2] = {val_u(GGUF_TYPE_UINT32, 1), val_i(GGUF_TYPE_INT32, 2)};
    bad.arr.items = items;
    bad.arr.n = 2;
    assert_int_equal(seer_gguf_writer_set_value(w, "mixed", &bad), SEER_ERR_INVALID_ARG);
    gguf_value t13 = {.type = (gguf_type)13};
    assert_int_equal(seer_gguf_writer_set_value(w, "t13", &t13), SEER_ERR_INVALID_ARG);
    ASSERT_OK(seer_gguf_writer_to_buffer(w, &buf, &size)); /* the returning setter records nothing */
    free(buf);
    seer_gguf_writer_free(w);
    seer_gguf_writer_free(NULL);
}

/* ---- the random-model generator ------------------------------------------------------- */

static void expect_tensor(const gguf_file *f, const char *name, ggml_type type, uint64_t ne0,
                          uint64_t ne1) {
    const gguf_tensor *t = seer_gguf_find_tensor(f, name);
    if (!t)
        fail_msg("tensor %s missing", name);
    if (t->type != type || t->ne[0] != ne0 || t->ne[1] != ne1 || t->n_dims != (ne1 > 1 ? 2 : 1))
        fail_msg("tensor %s: type %s [%llu, %llu], expected %s [%llu, %llu]", name,
                 seer_ggml_type_name(t->type), (unsigned long long)t->ne[0],
                 (unsigned long long)t->ne[1], seer_ggml_type_name(type), (unsigned long long)ne0,
                 (unsigned long long)ne1);
}

static int64_t get_i(const gguf_file *f, const char *key) {
    int64_t v = -1;
    ASSERT_OK(seer_gguf_get_i64(f, key, &v));
    return v;
}

/* Length in bytes of the last UTF-8 character of s[0..n). */
static size_t last_char_len(const char *s, size_t n) {
    size_t k = 1;
    while (k < n && ((unsigned char)s[n - k] & 0xc0) == 0x80)
        k++;
    return k;
}

static bool vocab_has(const gguf_value *tok, const char *s, size_t n) {
    for (uint64_t i = 0; i < tok->arr.n; i++)
        if (tok->arr.items[i].str.len == n && memcmp(tok->arr.items[i].str.s, s, n) == 0)
            return true;
    return false;
}

static void check_vocab(const gguf_file *f, int n_vocab) {
    char s[32];
    ASSERT_OK(seer_gguf_get_str(f, "tokenizer.ggml.model", s, sizeof s));
    assert_string_equal(s, "llama");
    const gguf_value *tok, *sc, *ty;
    ASSERT_OK(seer_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok));
    ASSERT_OK(seer_gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &sc));
    ASSERT_OK(seer_gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &ty));
    assert_int_equal(tok->arr.n, (uint64_t)n_vocab);
    assert_int_equal(sc->arr.n, (uint64_t)n_vocab);
    assert_int_equal(ty->arr.n, (uint64_t)n_vocab);
    assert_int_equal(get_i(f, "tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(get_i(f, "tokenizer.ggml.eos_token_id"), 2);
    assert_int_equal(get_i(f, "tokenizer.ggml.unknown_token_id"), 0);
    assert_true(str_is(&tok->arr.items[0], "<unk>") && ty->arr.items[0].i64 == 2);
    assert_true(str_is(&tok->arr.items[1], "<s>") && ty->arr.items[1].i64 == 3);
    assert_true(str_is(&tok->arr.items[2], "</s>") && ty->arr.items[2].i64 == 3);
    for (int b = 0; b < 256; b++) {
        char want[8];
        snprintf(want, sizeof want, "<0x%02X>", b);
        assert_true(str_is(&tok->arr.items[3 + b], want));
        assert_int_equal(ty->arr.items[3 + b].i64, 6);
    }
    for (int i = 259; i < n_vocab; i++) {
        const gguf_value *t = &tok->arr.items[i];
        assert_int_equal(ty->arr.items[i].i64, 1);
        assert_true(t->str.len > 0);
        if (i > 259)
            assert_true(sc->arr.items[i].f64 < sc->arr.items[i - 1].f64);
        /* distinct, and buildable by merges: both halves are earlier pieces */
        for (int j = 259; j < i; j++)
            if (tok->arr.items[j].str.len == t->str.len &&
                memcmp(tok->arr.items[j].str.s, t->str.s, t->str.len) == 0)
                fail_msg("piece %d repeats piece %d", i, j);
        size_t k = last_char_len(t->str.s, t->str.len);
        if (k < t->str.len) {
            assert_true(vocab_has(tok, t->str.s, t->str.len - k));
            assert_true(vocab_has(tok, t->str.s + t->str.len - k, k));
        }
    }
    /* the pieces every SentencePiece text needs */
    if (n_vocab > 259)
        assert_true(vocab_has(tok, "\xe2\x96\x81", 3));
    if (n_vocab >= 512) {
        assert_true(vocab_has(tok, "\xe2\x96\x81t", 4));
        assert_true(vocab_has(tok, "a", 1));
        assert_true(vocab_has(tok, "Z", 1));
    }
}

static void check_generated(const seer_gen_params *p, const char *path) {
    gguf_file *f = NULL;
    ASSERT_OK(seer_gguf_file_open(path, &f));
    char s[64], key[128];
    ASSERT_OK(seer_gguf_get_str(f, "general.architecture", s, sizeof s));
    assert_string_equal(s, p->arch);
    ASSERT_OK(seer_gguf_get_str(f, "general.name", s, sizeof s));
    int hd = p->head_dim ? p->head_dim : p->dim / p->n_heads;
    const char *a = p->arch;
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    assert_int_equal(get_i(f, KEY("context_length")), p->ctx);
    assert_int_equal(get_i(f, KEY("embedding_length")), p->dim);
    assert_int_equal(get_i(f, KEY("block_count")), p->n_layers);
    assert_int_equal(get_i(f, KEY("feed_forward_length")), p->ffn_dim);
    assert_int_equal(get_i(f, KEY("attention.head_count")), p->n_heads);
    assert_int_equal(get_i(f, KEY("attention.head_count_kv")), p->n_kv_heads);
    assert_int_equal(get_i(f, KEY("rope.dimension_count")), hd);
    assert_int_equal(get_i(f, KEY("attention.key_length")), hd);
    assert_int_equal(get_i(f, KEY("attention.value_length")), hd);
    assert_int_equal(must_kv(f, KEY("context_length"))->val.type, GGUF_TYPE_UINT32);
    assert_int_equal(must_kv(f, KEY("rope.freq_base"))->val.type, GGUF_TYPE_FLOAT32);
    float x;
    ASSERT_OK(seer_gguf_get_f32(f, KEY("rope.freq_base"), &x));
    assert_true(x == p->rope_base);
    ASSERT_OK(seer_gguf_get_f32(f, KEY("attention.layer_norm_rms_epsilon"), &x));
    assert_true(x == p->norm_eps);
#undef KEY
    check_vocab(f, p->n_vocab);

    ggml_type wt = GGML_TYPE_COUNT;
    static const struct {
        const char *n;
        ggml_type t;
    } dts[] = {{"f32", GGML_TYPE_F32},   {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},
               {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1}};
    for (size_t i = 0; i < 6; i++)
        if (strcmp(dts[i].n, p->dtype) == 0)
            wt = dts[i].t;
    uint64_t D = (uint64_t)p->dim, V = (uint64_t)p->n_vocab, F = (uint64_t)p->ffn_dim;
    uint64_t QD = (uint64_t)(p->n_heads * hd), KD = (uint64_t)(p->n_kv_heads * hd);
    bool qwen2 = strcmp(p->arch, "qwen2") == 0;
    uint64_t n_expect = 2 + (p->tied ? 0 : 1) + (uint64_t)p->n_layers * (qwen2 ? 12 : 9);
    assert_int_equal(f->n_tensors, n_expect);
    expect_tensor(f, "token_embd.weight", wt, D, V);
    expect_tensor(f, "output_norm.weight", GGML_TYPE_F32, D, 1);
    if (p->tied)
        assert_null(seer_gguf_find_tensor(f, "output.weight"));
    else
        expect_tensor(f, "output.weight", wt, D, V);
    char name[64];
    for (int l = 0; l < p->n_layers; l++) {
#define T(suffix, type, n0, n1) \
    (snprintf(name, sizeof name, "blk.%d." suffix, l), expect_tensor(f, name, type, n0, n1))
        T("attn_norm.weight", GGML_TYPE_F32, D, 1);
        T("attn_q.weight", wt, D, QD);
        T("attn_k.weight", wt, D, KD);
        T("attn_v.weight", wt, D, KD);
        T("attn_output.weight", wt, QD, D);
        T("ffn_norm.weight", GGML_TYPE_F32, D, 1);
        T("ffn_gate.weight", wt, D, F);
        T("ffn_up.weight", wt, D, F);
        T("ffn_down.weight", wt, F, D);
        if (qwen2) {
            T("attn_q.bias", GGML_TYPE_F32, QD, 1);
            T("attn_k.bias", GGML_TYPE_F32, KD, 1);
            T("attn_v.bias", GGML_TYPE_F32, KD, 1);
        } else {
            snprintf(name, sizeof name, "blk.%d.attn_q.bias", l);
            assert_null(seer_gguf_find_tensor(f, name));
        }
#undef T
    }

    /* weights: roughly the requested spread; norms near 1 */
    const gguf_tensor *t = seer_gguf_find_tensor(f, "blk.0.ffn_down.weight");
    size_t n = (size_t)seer_gguf_tensor_nelements(t);
    float *w = malloc(n * sizeof(float));
    assert_non_null(w);
    ASSERT_OK(seer_gguf_tensor_dequant(t, w, n));
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (double)w[i] * w[i];
    double want = p->scale > 0 ? p->scale : 1.0 / sqrt((double)F);
    double got = sqrt(ss / (double)n);
    if (fabs(got - want) > 0.15 * want)
        fail_msg("std %g, expected about %g", got, want);
    free(w);
    t = seer_gguf_find_tensor(f, "blk.0.attn_norm.weight");
    float nw[4096];
    ASSERT_OK(seer_gguf_tensor_dequant(t, nw, D));
    for (uint64_t i = 0; i < D; i++)
        assert_true(nw[i] >= 0.9f && nw[i] <= 1.1f);
    seer_gguf_file_close(f);
}

static void test_gen_model_variants(void **state) {
    (void)state;
    const char *archs[] = {"llama", "qwen2"};
    const char *dtypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"};
    for (int a = 0; a < 2; a++) {
        for (int tied = 0; tied < 2; tied++) {
            for (int d = 0; d < 6; d++) {
                seer_gen_params p = seer_gen_default_params();
                p.arch = archs[a];
                p.tied = tied;
                p.dtype = dtypes[d];
                p.n_vocab = 300 + 37 * d;
                p.seed = (uint64_t)(a * 100 + tied * 10 + d);
                const char *path = tu_tmp_path("gen.gguf");
                ASSERT_OK(seer_gen_model(&p, path));
                check_generated(&p, path);
            }
        }
    }
}

static void test_gen_model_shapes(void **state) {
    (void)state;
    seer_gen_params p = seer_gen_default_params();
    p.dim = 96;
    p.n_heads = 6;
    p.n_kv_heads = 2;
    p.head_dim = 32; /* n_heads * head_dim != dim */
    p.ffn_dim = 160;
    p.n_layers = 3;
    p.n_vocab = 1000;
    p.dtype = "q8_0";
    p.scale = 0.05f;
    p.rope_base = 500000.f;
    p.norm_eps = 1e-6f;
    p.ctx = 4096;
    const char *path = tu_tmp_path("gen-shapes.gguf");
    ASSERT_OK(seer_gen_model(&p, path));
    check_generated(&p, path);
    p.arch = "qwen2";
    p.n_vocab = 259; /* specials and bytes only */
    p.tied = true;
    ASSERT_OK(seer_gen_model(&p, path));
    check_generated(&p, path);
}

static void test_gen_model_deterministic(void **state) {
    (void)state;
    seer_gen_params p = seer_gen_default_params();
    p.dtype = "q4_1";
    p.seed = 42;
    const char *a = tu_tmp_path("det-a.gguf"), *b = tu_tmp_path("det-b.gguf");
    ASSERT_OK(seer_gen_model(&p, a));
    ASSERT_OK(seer_gen_model(&p, b));
    size_t na, nb;
    uint8_t *ba = tu_read_file(a, &na), *bb = tu_read_file(b, &nb);
    assert_non_null(ba);
    assert_non_null(bb);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);
    free(bb);
    p.seed = 43;
    ASSERT_OK(seer_gen_model(&p, b));
    bb = tu_read_file(b, &nb);
    assert_non_null(bb);
    assert_int_equal(na, nb); /* same layout, different weights */
    assert_true(memcmp(ba, bb, na) != 0);
    free(ba);
    free(bb);
}

static void test_gen_model_bad_params(void **state) {
    (void)state;
    const char *path = tu_tmp_path("gen-bad.gguf");
    remove(path);
    seer_gen_params base = seer_gen_default_params();
    seer_gen_params p;
#define BAD(field, value, needle)                                                         \
    do {                                                                                  \
        p = base;                                                                         \
        p.field = value;                                                                  \
        seer_status s_ = seer_gen_model(&p, path);                                        \
        if (s_ != SEER_ERR_INVALID_ARG)                                                   \
            fail_msg("%s = %s: got %s", #field, #value, seer_status_str(s_));             \
        if (!strstr(seer_last_error(), needle))                                           \
            fail_msg("%s = %s: message \"%s\" lacks \"%s\"", #field, #value,              \
                     seer_last_error(), needle);                                          \
    } while (0)
    BAD(n_vocab, 258, "n_vocab");
    BAD(n_vocab, -1, "n_vocab");
    BAD(dim, 0, "dim");
    BAD(dim, -64, "dim");
    BAD(n_layers, 0, "n_layers");
    BAD(n_heads, 0, "head");
    BAD(n_kv_heads, 0, "head");
    BAD(n_kv_heads, 3, "divide");
    BAD(n_heads, 5, "divide"); /* 5 % 2 */
    BAD(ffn_dim, 0, "ffn_dim");
    BAD(ctx, 0, "ctx");
    BAD(head_dim, -2, "head_dim");
    BAD(head_dim, 7, "even");
    BAD(rope_base, 0.f, "rope_base");
    BAD(rope_base, NAN, "rope_base");
    BAD(norm_eps, -1.f, "norm_eps");
    BAD(scale, -1.f, "scale");
    BAD(arch, "gpt9", "gpt9");
    BAD(arch, NULL, "architecture");
    BAD(dtype, "q3_k", "q3_k");
    BAD(dtype, NULL, "dtype");
    base.dim = 48;
    base.n_heads = 4;
    BAD(dtype, "q4_0", "divisible by 32"); /* dim 48 */
    base = seer_gen_default_params();
    base.ffn_dim = 100;
    BAD(dtype, "q8_0", "divisible by 32");
    base = seer_gen_default_params();
    base.dim = 60;
    base.n_heads = 8; /* 60 / 8 */
    BAD(head_dim, 0, "divide");
#undef BAD
    struct stat st;
    assert_int_not_equal(stat(path, &st), 0); /* nothing was written */
    p = seer_gen_default_params();
    assert_int_equal(seer_gen_model(NULL, path), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_gen_model(&p, NULL), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_gen_model(&p, "/nonexistent-dir/m.gguf"), SEER_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_memory),
        cmocka_unit_test(test_roundtrip_file),
        cmocka_unit_test(test_stream_write),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_version2),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_text_escape),
        cmocka_unit_test(test_escaped_messages),
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_bad_magic_and_io),
        cmocka_unit_test(test_bad_counts),
        cmocka_unit_test(test_bad_arrays),
        cmocka_unit_test(test_bad_strings),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_bad_dims),
        cmocka_unit_test(test_bad_types),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_truncation_everywhere),
        cmocka_unit_test(test_byte_flips),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_gen_model_variants),
        cmocka_unit_test(test_gen_model_shapes),
        cmocka_unit_test(test_gen_model_deterministic),
        cmocka_unit_test(test_gen_model_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
