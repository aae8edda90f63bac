/*
 * test_tp_wire.c: the op stream's messages between rank 0 and a rank in another process
 * (tp_wire.c, tp_serve.c), without sockets: the parser refuses bad frames, and bad messages to
 * a rank are refused with their reasons and leave its state as it was (its fuzzer:
 * fuzz/fuzz_tp_wire.c); a posted message's failure is kept for the next waited one. The
 * stream between processes is test_tp_proc's.
 */
#include "parallel/tp_remote.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_wire(void **state) {
    (void)state;
    tp_wbuf w = {0};
    seer_tp_w_int(&w, -7);
    seer_tp_w_dbl(&w, 0.25);
    seer_tp_w_bytes(&w, "abc", 3);
    seer_tp_w_ptr(&w, 9, 16);
    tp_msg m;
    ASSERT_OK(seer_tp_msg_parse(w.buf, w.len, &m));
    ASSERT_OK(seer_tp_msg_check(&m, "ifbp", "test"));
    assert_int_equal(m.f[0].i, -7);
    assert_true(m.f[1].f == 0.25);
    assert_int_equal(m.f[2].len, 3);
    assert_memory_equal(m.f[2].data, "abc", 3);
    assert_int_equal(m.f[3].i, 9);
    assert_int_equal(m.f[3].off, 16);
    assert_int_equal(seer_tp_msg_check(&m, "ifb", "test"), SEER_ERR_FORMAT);
    assert_int_equal(seer_tp_msg_check(&m, "ifbi", "test"), SEER_ERR_FORMAT);
    /* every cut of the frame short of the whole is refused, except at a field's end */
    const size_t ends[] = {0, 16, 32, 56, 80};
    for (size_t l = 0; l < w.len; l++) {
        bool at_end = false;
        for (size_t k = 0; k < 5; k++)
            at_end |= ends[k] == l;
        assert_int_equal(seer_tp_msg_parse(w.buf, l, &m), at_end ? SEER_OK : SEER_ERR_FORMAT);
    }
    /* every field's data 8-aligned from the payload's start */
    ASSERT_OK(seer_tp_msg_parse(w.buf, w.len, &m));
    assert_int_equal((size_t)((const char *)m.f[2].data - w.buf) % 8, 0);
    /* an unknown type; a length past the end; a header or a string's padding not zero */
    char bad[16] = {'z'};
    assert_int_equal(seer_tp_msg_parse(bad, 16, &m), SEER_ERR_FORMAT);
    char longb[16] = {'b', 0, 0, 0, 0, 0, 0, 0, 100};
    assert_int_equal(seer_tp_msg_parse(longb, 16, &m), SEER_ERR_FORMAT);
    char hdr[16] = {'i', 1};
    assert_int_equal(seer_tp_msg_parse(hdr, 16, &m), SEER_ERR_FORMAT);
    char pad[24] = {'b', 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c', 0, 0, 0, 0, 1};
    assert_int_equal(seer_tp_msg_parse(pad, 24, &m), SEER_ERR_FORMAT);
    pad[23] = 0;
    ASSERT_OK(seer_tp_msg_parse(pad, 24, &m));
    /* too many fields */
    seer_tp_w_reset(&w);
    for (int i = 0; i <= TP_WIRE_MAX_FIELDS; i++)
        seer_tp_w_int(&w, i);
    assert_int_equal(seer_tp_msg_parse(w.buf, w.len, &m), SEER_ERR_FORMAT);
    seer_tp_w_free(&w);
}

/* Bad messages to a rank change nothing: an allocation written and read back around them. */
static void test_serve_bad_messages(void **state) {
    (void)state;
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    tp_serve *sv = NULL;
    ASSERT_OK(seer_tp_serve_init(be, &sv));
    tp_wbuf w = {0}, out = {0};
    seer_tp_w_int(&w, 3);
    seer_tp_w_int(&w, 64);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_ALLOC, 0, w.buf, w.len, &out));
    float vals[16];
    for (int i = 0; i < 16; i++)
        vals[i] = (float)i * 0.5f;
    seer_tp_w_reset(&w);
    seer_tp_w_ptr(&w, 3, 0);
    seer_tp_w_bytes(&w, vals, sizeof vals);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_UPLOAD, 0, w.buf, w.len, &out));
    struct {
        uint32_t op;
        int64_t h, off, n;
    } bad[] = {
        {TP_OP_UPLOAD, 4, 0, 4},   /* no such handle */
        {TP_OP_UPLOAD, 3, 60, 8},  /* past the allocation */
        {TP_OP_DOWNLOAD, 3, 0, 65}, /* likewise */
        {TP_OP_ALLOC, 3, 0, 8},    /* the handle taken */
        {TP_OP_COUNT + 5, 3, 0, 8}, /* no such op */
        {TP_OP_RMSNORM, 3, 0, 8},  /* the wrong fields */
        {TP_OP_DEALLOC, -1, 0, 0}, /* memory of no rank */
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        seer_tp_w_reset(&w);
        if (bad[k].op == TP_OP_ALLOC) {
            seer_tp_w_int(&w, bad[k].h);
            seer_tp_w_int(&w, bad[k].n);
        } else if (bad[k].op == TP_OP_DOWNLOAD) {
            seer_tp_w_ptr(&w, bad[k].h, (uint64_t)bad[k].off);
            seer_tp_w_int(&w, bad[k].n);
        } else if (bad[k].op == TP_OP_DEALLOC) {
            seer_tp_w_ptr(&w, bad[k].h, 0);
        } else {
            seer_tp_w_ptr(&w, bad[k].h, (uint64_t)bad[k].off);
            seer_tp_w_bytes(&w, vals, (size_t)bad[k].n);
        }
        seer_tp_w_reset(&out);
        assert_int_equal(seer_tp_serve_msg(sv, bad[k].op, 0, w.buf, w.len, &out), SEER_ERR_FORMAT);
    }
    /* an instance that does not exist */
    assert_int_equal(seer_tp_serve_msg(sv, TP_OP_SYNC, 77, NULL, 0, &out), SEER_ERR_FORMAT);
    seer_tp_w_reset(&w);
    seer_tp_w_ptr(&w, 3, 0);
    seer_tp_w_int(&w, 64);
    seer_tp_w_reset(&out);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_DOWNLOAD, 0, w.buf, w.len, &out));
    tp_msg m;
    ASSERT_OK(seer_tp_msg_parse(out.buf, out.len, &m));
    ASSERT_OK(seer_tp_msg_check(&m, "b", "download"));
    assert_memory_equal(m.f[0].data, vals, sizeof vals);
    seer_tp_w_free(&w);
    seer_tp_w_free(&out);
    seer_tp_serve_free(sv); /* frees what it holds */
    be->ops->free(be);
}

/* A backend that joins weights as the CUDA one does: the parts become views into the joined
 * weight, which the rank's table must then hold for them. */
static seer_backend_ops concat_ops;
static void *concat_data;
static int concat_views_freed;

static seer_status test_concat(seer_backend *be, seer_weight *parts, int n, bool interleave, seer_weight *out) {
    (void)be;
    memset(out, 0, sizeof *out);
    out->data = concat_data = calloc(1, 64);
    out->rows = 0;
    out->cols = parts[0].cols;
    out->dtype = parts[0].dtype;
    out->owned = true;
    out->n_seg = n;
    out->interleaved = interleave;
    for (int j = 0; j < n; j++) {
        out->rows += parts[j].rows;
        out->seg_rows[j] = parts[j].rows;
        if (parts[j].owned)
            free(parts[j].data);
        parts[j].data = concat_data;
        parts[j].owned = false;
    }
    return SEER_OK;
}

static void (*cpu_weight_free_fn)(seer_backend *, seer_weight *);

static void test_weight_free(seer_backend *be, seer_weight *w) {
    if (w->data == concat_data && !w->owned)
        concat_views_freed++;
    cpu_weight_free_fn(be, w);
}

/* A joined weight whose handle grows the rank's table: the parts' new state lands in the
 * table, not in the table it had before growing. */
static void test_serve_concat_grows_table(void **state) {
    (void)state;
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    const seer_backend_ops *cpu_ops = be->ops;
    concat_ops = *cpu_ops;
    concat_ops.weight_concat = test_concat;
    concat_ops.weight_free = test_weight_free;
    cpu_weight_free_fn = cpu_ops->weight_free;
    be->ops = &concat_ops;
    concat_views_freed = 0;
    tp_serve *sv = NULL;
    ASSERT_OK(seer_tp_serve_init(be, &sv));
    tp_wbuf w = {0}, out = {0};
    float vals[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int64_t h = 1; h <= 2; h++) { /* two 2 x 4 f32 weights */
        seer_tp_w_reset(&w);
        seer_tp_w_int(&w, h);
        seer_tp_w_int(&w, 0);
        seer_tp_w_bytes(&w, "w", 1);
        seer_tp_w_int(&w, 2);
        seer_tp_w_int(&w, 4);
        seer_tp_w_int(&w, 2);
        seer_tp_w_int(&w, 1);
        seer_tp_w_int(&w, 1);
        seer_tp_w_int(&w, GGML_TYPE_F32);
        seer_tp_w_bytes(&w, vals, sizeof vals);
        seer_tp_w_reset(&out);
        ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_WLOAD, 0, w.buf, w.len, &out));
    }
    seer_tp_w_reset(&w);
    seer_tp_w_int(&w, 5000); /* past the table's 256 entries */
    seer_tp_w_int(&w, 0);
    seer_tp_w_ptr(&w, 1, 0);
    seer_tp_w_ptr(&w, 2, 0);
    seer_tp_w_reset(&out);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_WCONCAT, 0, w.buf, w.len, &out));
    seer_tp_w_free(&w);
    seer_tp_w_free(&out);
    seer_tp_serve_free(sv);
    assert_int_equal(concat_views_freed, 2); /* both parts freed as the views they became */
    be->ops = cpu_ops;
    be->ops->free(be);
}

static void w_geom(tp_wbuf *w, int n_pages, int n_kv_heads, int head_dim) {
    const int g[7] = {n_pages, 16, 2, n_kv_heads, head_dim, 0, 0}; /* page size 16, 2 layers */
    for (int k = 0; k < 7; k++)
        seer_tp_w_int(w, g[k]);
}

/* KV ops name their storage's geometry; one other than the storage was made with (rows of
 * another size, more pages, a read's size that overflows) is refused, not run. */
static void test_serve_kv_geometry(void **state) {
    (void)state;
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    tp_serve *sv = NULL;
    ASSERT_OK(seer_tp_serve_init(be, &sv));
    tp_wbuf w = {0}, out = {0};
    seer_tp_w_int(&w, 1);
    w_geom(&w, 4, 2, 8);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_KV_ALLOC, 0, w.buf, w.len, &out));
    seer_tp_w_reset(&w);
    seer_tp_w_ptr(&w, 1, 0);
    w_geom(&w, 4, 2, 8);
    seer_tp_w_int(&w, 4);
    seer_tp_w_reset(&out);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_KV_RESERVE, 0, w.buf, w.len, &out));
    enum { N = 16 };
    int32_t page[N] = {0}, row[N] = {0};
    const int bad[][3] = {{4, 1 << 30, 1 << 30}, {4, 2, 1 << 20}, {1 << 20, 2, 8}};
    for (int t = 0; t <= 3; t++) {
        seer_tp_w_reset(&w);
        seer_tp_w_ptr(&w, 1, 0);
        if (t < 3)
            w_geom(&w, bad[t][0], bad[t][1], bad[t][2]);
        else
            w_geom(&w, 4, 2, 8);
        seer_tp_w_int(&w, 1);
        seer_tp_w_int(&w, 0);
        seer_tp_w_int(&w, N);
        if (t == 2)
            page[N - 1] = 1000; /* within the message's pages, past the storage's */
        else
            page[N - 1] = 3;
        seer_tp_w_bytes(&w, page, sizeof page);
        seer_tp_w_bytes(&w, row, sizeof row);
        seer_tp_w_reset(&out);
        const seer_status s = seer_tp_serve_msg(sv, TP_OP_KV_READ, 0, w.buf, w.len, &out);
        if (t < 3) {
            assert_int_equal(s, SEER_ERR_FORMAT);
        } else {
            ASSERT_OK(s);
            tp_msg m;
            ASSERT_OK(seer_tp_msg_parse(out.buf, out.len, &m));
            ASSERT_OK(seer_tp_msg_check(&m, "b", "kv_read"));
            assert_int_equal(m.f[0].len, (size_t)N * 2 * 8 * sizeof(float));
        }
    }
    seer_tp_w_free(&w);
    seer_tp_w_free(&out);
    seer_tp_serve_free(sv);
    be->ops->free(be);
}

/* A weight's bytes must be its whole shape's: dimensions past the second (which the CPU
 * backend multiplies into the rows; an f32 weight is used in place) are 1. */
static void test_serve_weight_shape(void **state) {
    (void)state;
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    tp_serve *sv = NULL;
    ASSERT_OK(seer_tp_serve_init(be, &sv));
    tp_wbuf w = {0}, out = {0};
    float row[32] = {0}; /* one row of 32 */
    const int64_t ne[][4] = {{32, 1, 1 << 20, 1}, {32, 1, 1, 1 << 20}, {32, 1, 0, 1}, {32, 1, 1, 1}};
    for (int t = 0; t < 4; t++) {
        seer_tp_w_reset(&w);
        seer_tp_w_int(&w, 1);
        seer_tp_w_int(&w, 0);
        seer_tp_w_bytes(&w, "w", 1);
        seer_tp_w_int(&w, 2);
        for (int k = 0; k < 4; k++)
            seer_tp_w_int(&w, ne[t][k]);
        seer_tp_w_int(&w, GGML_TYPE_F32);
        seer_tp_w_bytes(&w, row, sizeof row);
        seer_tp_w_reset(&out);
        const seer_status s = seer_tp_serve_msg(sv, TP_OP_WLOAD, 0, w.buf, w.len, &out);
        if (t < 3) {
            assert_int_equal(s, SEER_ERR_FORMAT);
            continue;
        }
        ASSERT_OK(s);
        tp_msg m;
        ASSERT_OK(seer_tp_msg_parse(out.buf, out.len, &m));
        ASSERT_OK(seer_tp_msg_check(&m, "iiii", "weight_load"));
        assert_int_equal(m.f[0].i, 1); /* rows */
        assert_int_equal(m.f[1].i, 32);
    }
    seer_tp_w_free(&w);
    seer_tp_w_free(&out);
    seer_tp_serve_free(sv);
    be->ops->free(be);
}

/* An attention batch's view lists: their index counts, summed over the sequences, must not
 * wrap (1024 views of 2^30 x 4096 x 4096 indices sum to 2^64, which is 0). */
static void test_serve_attention_views(void **state) {
    (void)state;
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    tp_serve *sv = NULL;
    ASSERT_OK(seer_tp_serve_init(be, &sv));
    tp_wbuf w = {0}, out = {0};
    seer_tp_w_int(&w, 1);
    w_geom(&w, 4, 2, 8);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_KV_ALLOC, 0, w.buf, w.len, &out));
    seer_tp_w_reset(&w);
    seer_tp_w_int(&w, 2);
    seer_tp_w_int(&w, 1024);
    seer_tp_w_reset(&out);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_ALLOC, 0, w.buf, w.len, &out));
    enum { NS = 1024 };
    static int32_t off[NS + 1], meta[NS * 5];
    for (int wrap = 1; wrap >= 0; wrap--) {
        for (int i = 0; i < NS; i++) {
            const int32_t v[5] = {1, wrap ? 1 << 30 : 1, wrap ? 4096 : 1, wrap ? 4096 : 0, 0};
            memcpy(meta + i * 5, v, sizeof v);
        }
        seer_tp_w_reset(&w);
        seer_tp_w_ptr(&w, 2, 0); /* out */
        seer_tp_w_ptr(&w, 2, 0); /* q */
        seer_tp_w_ptr(&w, 1, 0); /* kv */
        w_geom(&w, 4, 2, 8);
        seer_tp_w_int(&w, 0);                   /* layer */
        seer_tp_w_int(&w, 0);                   /* T */
        seer_tp_w_int(&w, 2);                   /* heads */
        seer_tp_w_int(&w, 2);                   /* key/value heads */
        seer_tp_w_int(&w, 8);                   /* head_dim */
        seer_tp_w_dbl(&w, 1.0);                 /* scale */
        seer_tp_w_int(&w, 16);                  /* page size */
        seer_tp_w_int(&w, NS);                  /* sequences */
        seer_tp_w_int(&w, 0);                   /* max pages */
        seer_tp_w_bytes(&w, NULL, 0);           /* pages */
        seer_tp_w_bytes(&w, off, NS * 4);       /* lengths */
        seer_tp_w_bytes(&w, off, (NS + 1) * 4); /* token offsets */
        for (int k = 0; k < 3; k++)
            seer_tp_w_bytes(&w, NULL, 0);       /* tokens, their sequences, slots */
        seer_tp_w_int(&w, 0);                   /* no mask */
        seer_tp_w_bytes(&w, NULL, 0);
        seer_tp_w_int(&w, 0);                   /* kv_quant */
        seer_tp_w_int(&w, 0);                   /* no prompt counts */
        seer_tp_w_bytes(&w, NULL, 0);
        seer_tp_w_int(&w, 0);                   /* window */
        seer_tp_w_int(&w, 0);                   /* no positions */
        seer_tp_w_bytes(&w, NULL, 0);
        seer_tp_w_dbl(&w, 0.0);                 /* softcap */
        seer_tp_w_bytes(&w, meta, sizeof meta); /* the views */
        seer_tp_w_bytes(&w, NULL, 0);           /* their indices: none, as the sum wrapped */
        seer_tp_w_reset(&out);
        const seer_status s = seer_tp_serve_msg(sv, TP_OP_ATTENTION, 0, w.buf, w.len, &out);
        if (wrap)
            assert_int_equal(s, SEER_ERR_FORMAT);
        else
            ASSERT_OK(s); /* views of no indices: the batch is well formed */
    }
    seer_tp_w_free(&w);
    seer_tp_w_free(&out);
    seer_tp_serve_free(sv);
    be->ops->free(be);
}

/* The rank's side of the same: the first failure is kept (a second one is not), later posted
 * ops of the instance are refused but its frees run, and a waited message reports it once. */
static void test_serve_posted(void **state) {
    (void)state;
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    tp_serve *sv = NULL;
    ASSERT_OK(seer_tp_serve_init(be, &sv));
    tp_wbuf w = {0}, out = {0};
    for (int64_t h = 1; h <= 2; h++) {
        seer_tp_w_reset(&w);
        seer_tp_w_int(&w, h);
        seer_tp_w_int(&w, 64);
        ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_ALLOC, 0, w.buf, w.len, &out));
    }
    float vals[16] = {1, 2, 3}, before[16] = {4, 5, 6};
    seer_tp_w_reset(&w);
    seer_tp_w_ptr(&w, 1, 0);
    seer_tp_w_bytes(&w, before, sizeof before);
    ASSERT_OK(seer_tp_serve_post(sv, TP_OP_UPLOAD, 0, w.buf, w.len));
    seer_tp_w_reset(&w);
    seer_tp_w_ptr(&w, 9, 0); /* no such memory */
    seer_tp_w_bytes(&w, vals, sizeof vals);
    assert_int_equal(seer_tp_serve_post(sv, TP_OP_UPLOAD, 0, w.buf, w.len), SEER_ERR_FORMAT);
    seer_tp_w_reset(&w);
    seer_tp_w_int(&w, 3); /* the wrong fields: a second failure, not kept over the first */
    assert_int_not_equal(seer_tp_serve_post(sv, TP_OP_RMSNORM, 0, w.buf, w.len), SEER_OK);
    seer_tp_w_reset(&w);
    seer_tp_w_ptr(&w, 1, 0);
    seer_tp_w_bytes(&w, vals, sizeof vals);
    assert_int_not_equal(seer_tp_serve_post(sv, TP_OP_UPLOAD, 0, w.buf, w.len), SEER_OK); /* refused */
    seer_tp_w_reset(&w);
    seer_tp_w_ptr(&w, 2, 0);
    ASSERT_OK(seer_tp_serve_post(sv, TP_OP_DEALLOC, 0, w.buf, w.len)); /* a free still runs */
    seer_tp_w_reset(&w);
    seer_tp_w_ptr(&w, 1, 0);
    seer_tp_w_int(&w, 64);
    seer_tp_w_reset(&out);
    assert_int_equal(seer_tp_serve_msg(sv, TP_OP_DOWNLOAD, 0, w.buf, w.len, &out), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "upload (sent without waiting"));
    seer_tp_w_reset(&out);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_DOWNLOAD, 0, w.buf, w.len, &out));
    tp_msg m;
    ASSERT_OK(seer_tp_msg_parse(out.buf, out.len, &m));
    ASSERT_OK(seer_tp_msg_check(&m, "b", "download"));
    assert_memory_equal(m.f[0].data, before, sizeof before); /* the refused upload never ran */
    /* the freed handle is free again */
    seer_tp_w_reset(&w);
    seer_tp_w_int(&w, 2);
    seer_tp_w_int(&w, 64);
    ASSERT_OK(seer_tp_serve_msg(sv, TP_OP_ALLOC, 0, w.buf, w.len, &out));
    seer_tp_w_free(&w);
    seer_tp_w_free(&out);
    seer_tp_serve_free(sv);
    be->ops->free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire),
        cmocka_unit_test(test_serve_bad_messages),
        cmocka_unit_test(test_serve_concat_grows_table),
        cmocka_unit_test(test_serve_kv_geometry),
        cmocka_unit_test(test_serve_weight_shape),
        cmocka_unit_test(test_serve_attention_views),
        cmocka_unit_test(test_serve_posted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
