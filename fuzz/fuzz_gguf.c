/*
 * fuzz_gguf.c: libFuzzer target for the GGUF reader.
 *
 * Parses the input; when it opens, touches every metadata value (nested arrays included),
 * runs every getter on every key, dequantises the first elements of each tensor, and
 * rewrites the whole file with the writer, which must read back with the same keys and
 * tensors. Not for: checking values numerically (the unit tests do that).
 *
 * Build: clang -fsanitize=fuzzer,address,undefined -Iinclude -Isrc fuzz/fuzz_gguf.c \
 *        src/gguf/\*.c src/util/error.c -lm     (scripts/fuzz.sh does this and runs it)
 */
#include "gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

static volatile uint64_t g_sink; /* keeps the walks from being optimised away */

static void walk_value(const gguf_value *v) {
    switch (v->type) {
    case GGUF_TYPE_STRING:
        for (uint64_t i = 0; i < v->str.len; i++)
            g_sink += (unsigned char)v->str.s[i];
        break;
    case GGUF_TYPE_ARRAY:
        for (uint64_t i = 0; i < v->arr.n; i++) {
            if (v->arr.items[i].type != v->arr.type)
                abort(); /* the reader promised homogeneous arrays */
            walk_value(&v->arr.items[i]);
        }
        break;
    default:
        g_sink += v->u64;
        break;
    }
}

static void try_getters(const gguf_file *f, const char *key) {
    int64_t i;
    float x;
    bool b;
    char s[64];
    const gguf_value *arr;
    g_sink += (uint64_t)seer_gguf_get_i64(f, key, &i);
    g_sink += (uint64_t)seer_gguf_get_f32(f, key, &x);
    g_sink += (uint64_t)seer_gguf_get_bool_opt(f, key, false, &b);
    g_sink += (uint64_t)seer_gguf_get_str(f, key, s, sizeof s);
    g_sink += (uint64_t)seer_gguf_get_arr(f, key, GGUF_TYPE_COUNT, &arr);
    g_sink += (uint64_t)seer_gguf_get_arr(f, key, GGUF_TYPE_STRING, &arr);
}

static void dequant_head(const gguf_tensor *t) {
    float out[256];
    uint64_t blk = (uint64_t)seer_ggml_type_block_elems(t->type);
    if (blk == 0 || blk > 256)
        abort(); /* the reader only admits types with a known block size */
    uint64_t n = seer_gguf_tensor_nelements(t);
    uint64_t blocks = n / blk, want = 64 / blk ? 64 / blk : 1;
    if (blocks > want)
        blocks = want;
    seer_status s = seer_gguf_tensor_dequant(t, out, blocks * blk);
    if (seer_ggml_type_supported(t->type) != (s == SEER_OK))
        abort();
    for (uint64_t i = 0; s == SEER_OK && i < blocks * blk; i++) {
        uint32_t u;
        memcpy(&u, &out[i], 4);
        g_sink += u;
    }
}

/* Writer(reader(input)) must be a file the reader accepts, with the same content names. */
static void rewrite(const gguf_file *f) {
    gguf_writer *w = seer_gguf_writer_init();
    if (!w)
        return;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (seer_gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].val) != SEER_OK)
            abort();
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (seer_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) != SEER_OK)
            abort();
    }
    uint8_t *buf = NULL;
    size_t size = 0;
    if (seer_gguf_writer_to_buffer(w, &buf, &size) != SEER_OK)
        abort();
    seer_gguf_writer_free(w);
    gguf_file *g = NULL;
    if (seer_gguf_file_open_memory(buf, size, &g) != SEER_OK)
        abort();
    if (g->n_kv != f->n_kv || g->n_tensors != f->n_tensors || g->alignment != f->alignment)
        abort();
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = seer_gguf_find_kv(g, f->kv[i].key);
        if (!kv || kv->val.type != f->kv[i].val.type)
            abort();
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *a = &f->tensors[i], *b = seer_gguf_find_tensor(g, a->name);
        if (!b || b->type != a->type || b->nbytes != a->nbytes || memcmp(a->ne, b->ne, 32) ||
            memcmp(a->data, b->data, a->nbytes))
            abort();
    }
    seer_gguf_file_close(g);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    if (seer_gguf_file_open_memory(data, size, &f) != SEER_OK) {
        if (f)
            abort(); /* failure must leave *out NULL */
        return 0;
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (seer_gguf_find_kv(f, f->kv[i].key) != &f->kv[i])
            abort();
        walk_value(&f->kv[i].val);
        try_getters(f, f->kv[i].key);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (seer_gguf_find_tensor(f, t->name) != t)
            abort();
        if ((const uint8_t *)t->data < f->base ||
            t->nbytes > f->size - (size_t)((const uint8_t *)t->data - f->base))
            abort();
        dequant_head(t);
    }
    rewrite(f);
    seer_gguf_file_close(f);
    return 0;
}
