/*
 * test_backend_ops_q.c: the CUDA ops on weights kept in their GGUF block encodings (Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) against the CPU reference, which dequantises the
 * same blocks to f32. Blocks are random bytes with sane scales, so every code pattern occurs.
 * Outputs are poisoned with NaN; the error measure and summary are test_backend_ops.c's.
 *
 * Checked: matmul below and above the cuBLAS switch, with bias, odd row counts and rows that
 * end inside a 128-column quad; the row blocks (matmul_qt.cu, the default for every type but
 * where rows are not whole blocks of 256 columns) at T = 1, 2, 5, 8 and the invariant limit,
 * their GEMV and tensor-core kernels giving a row the same bits at every T and whichever of
 * the two computes it; the fused forms (matmul_split, matmul_add, matmul_glu); batch
 * invariance (a token's row bit-identical alone and in any batch); embedding rows; and that
 * the encoding is kept (dtype) or dequantised on request (SEER_WEIGHTS_BF16). The matmul,
 * fused, invariance and embedding tests run on both layouts: the default backend's and one
 * with seer_cuda_tuning.qt false (every type in matmul_q.cu's planes).
 *
 * Also, without a GPU: the row blocks computed on the host with the kernels' lane code
 * (seer_cuda_qt_host_check) against the CPU's dequantisation and product.
 *
 * Skips the GPU tests when built without CUDA or when no CUDA device is present.
 */
#include "ops_harness.h"

#ifdef SEER_HAVE_CUDA

static const ggml_type qtypes[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                   GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
#define N_QTYPES (int)(sizeof qtypes / sizeof *qtypes)

/* the types kept in row blocks (qt_formats.cuh) */
static const ggml_type qt_types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q6_K,
                                     GGML_TYPE_Q5_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_1, GGML_TYPE_Q5_K};
#define N_QT_TYPES (int)(sizeof qt_types / sizeof *qt_types)

static bool is_k(ggml_type t) { return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K; }

/* ---- the two layouts ---------------------------------------------------------------------- */

/* The harness's helpers (dev_copy, dev_fetch, ...) go through `gpu`, which names the backend
 * under test: the harness's own (row blocks where they apply), or one with seer_cuda_tuning.qt false. */
static seer_backend *gpu_default;

static void gpu_restore(void) {
    if (!gpu_default)
        gpu_default = gpu;
    gpu = gpu_default;
}

/* cases(lname) on the default backend, then (lname " planes") on one with every type in the
 * planes. */
static void on_both_layouts(void (*cases)(const char *lname)) {
    gpu_restore();
    cases("");
    seer_cuda_tuning tu = lab_cuda_tuning_from_env();
    tu.qt = false;
    seer_backend *planes = NULL;
    ASSERT_OK(seer_backend_cuda_init_tuned(0, &tu, &planes));
    gpu = planes;
    cases(" planes");
    gpu_restore();
    planes->ops->free(planes);
}

static void put_f16(uint8_t *p, float v) {
    uint16_t h = seer_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* A [rows][cols] tensor of type t: random bytes, then each block's f16 scales (and mins) set
 * to values of the size a quantiser gives (a random f16 is often inf or NaN). */
static void make_qtensor(host_tensor *ht, const char *name, ggml_type t, int rows, int cols,
                         uint64_t *rng) {
    size_t nb = 0;
    ASSERT_OK(seer_ggml_nbytes(t, (uint64_t)rows * cols, &nb));
    uint8_t *d = malloc(nb);
    assert_non_null(d);
    for (size_t i = 0; i < nb; i++)
        d[i] = (uint8_t)tu_rand_u64(rng);
    const int bb = seer_ggml_type_block_bytes(t);
    for (size_t off = 0; off + (size_t)bb <= nb; off += (size_t)bb) {
        uint8_t *b = d + off;
        const float s = 0.002f + 0.01f * (float)(tu_rand_u64(rng) % 1000) / 1000.f;
        switch (t) {
        case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1:
            put_f16(b, s);
            put_f16(b + 2, -0.05f + 0.1f * (float)(tu_rand_u64(rng) % 1000) / 1000.f);
            break;
        case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
            put_f16(b, s / 8);
            put_f16(b + 2, s / 16);
            break;
        case GGML_TYPE_Q6_K: put_f16(b + 208, s / 16); break;
        default: put_f16(b, s); break;
        }
    }
    memset(&ht->t, 0, sizeof ht->t);
    ht->data = d;
    ht->t.name = name;
    ht->t.n_dims = 2;
    ht->t.ne[0] = (uint64_t)cols;
    ht->t.ne[1] = (uint64_t)rows;
    ht->t.ne[2] = ht->t.ne[3] = 1;
    ht->t.type = t;
    ht->t.data = d;
    ht->t.nbytes = nb;
}

/* ---- matmul ------------------------------------------------------------------------------- */

/* Tolerance 1e-2, as for bf16 weights: the weights enter exactly, x is rounded to bf16 in the
 * planes (2^-9 relative: below the bf16 weights' ~3e-3 in practice) and to 8 bits per group of
 * 32 in the row blocks (about 4e-3). */
static void matmul_q_cases(const char *lname) {
    static const struct {
        int T, rows, cols, bias;
    } shapes[] = {
        {1, 96, 256, 0},  {3, 200, 512, 1},  {17, 512, 768, 0},   {64, 256, 1280, 1},
        {1, 4096, 4096, 0}, {9, 1024, 4096, 0}, {300, 384, 512, 1}, {5, 40, 96, 0},
    };
    int k = 0;
    for (int qi = 0; qi < N_QTYPES; qi++) {
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++, k++) {
            const ggml_type type = qtypes[qi];
            const int T = shapes[si].T, R = shapes[si].rows, C = shapes[si].cols;
            if (is_k(type) && C % 256)
                continue;
            uint64_t rng = 7000 + (uint64_t)k;
            host_tensor ht;
            make_qtensor(&ht, "w", type, R, C, &rng);
            seer_weight wc, wg;
            ASSERT_OK(cpu->ops->weight_load(cpu, &ht.t, SEER_WEIGHTS_F32, &wc));
            ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wg));
            assert_int_equal(wg.dtype, type); /* kept as stored */
            float *x = rand_array((size_t)T * C, 1.f, &rng);
            float *bias = shapes[si].bias ? rand_array(R, 1.f, &rng) : NULL;
            float *ref = nan_array((size_t)T * R);
            ASSERT_OK(cpu->ops->matmul(cpu, ref, x, &wc, bias, T));
            float *dx = dev_copy(x, (size_t)T * C), *db = bias ? dev_copy(bias, R) : NULL;
            float *dy = dev_nan((size_t)T * R);
            ASSERT_OK(gpu->ops->matmul(gpu, dy, dx, &wg, db, T));
            float *out = dev_fetch(dy, (size_t)T * R);
            char shape[128];
            snprintf(shape, sizeof shape, "T=%d rows=%d cols=%d %s%s%s", T, R, C, seer_ggml_type_name(type),
                     bias ? " bias" : "", lname);
            record("matmul_q", shape, out, ref, (size_t)T * R, 1e-2);
            cpu->ops->weight_free(cpu, &wc);
            gpu->ops->weight_free(gpu, &wg);
            dev_free(dx), dev_free(dy);
            if (db)
                dev_free(db);
            free(x), free(bias), free(ref), free(out), free(ht.data);
        }
    }
}

static void test_matmul_q(void **state) {
    (void)state;
    on_both_layouts(matmul_q_cases);
    assert_op_passed("matmul_q");
}

/* A token's output row is bit-identical whether it is computed alone, in a verification-sized
 * batch or in the largest batch the invariant kernel takes (greedy speculation relies on it). */
static void matmul_q_invariant_cases(const char *lname) {
    for (int qi = 0; qi < N_QTYPES; qi++) {
        const ggml_type type = qtypes[qi];
        const int R = 1000, C = 2048, Ts[] = {1, 5, 40, 256};
        uint64_t rng = 8000 + (uint64_t)qi;
        host_tensor ht;
        make_qtensor(&ht, "w", type, R, C, &rng);
        seer_weight wg;
        ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wg));
        float *x = rand_array((size_t)256 * C, 1.f, &rng);
        float *dx = dev_copy(x, (size_t)256 * C);
        float *alone = NULL;
        int differ = 0;
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            const int T = Ts[ti];
            float *dy = dev_nan((size_t)T * R);
            ASSERT_OK(gpu->ops->matmul(gpu, dy, dx, &wg, NULL, T));
            float *out = dev_fetch(dy, (size_t)T * R);
            if (!alone)
                alone = out; /* token 0 alone */
            else {
                differ += memcmp(out, alone, (size_t)R * sizeof *out) != 0;
                free(out);
            }
            dev_free(dy);
        }
        /* and the last token of a batch of 40 against itself alone */
        float *dy = dev_nan((size_t)R);
        ASSERT_OK(gpu->ops->matmul(gpu, dy, dx + (size_t)39 * C, &wg, NULL, 1));
        float *last = dev_fetch(dy, (size_t)R);
        float *d40 = dev_nan((size_t)40 * R);
        ASSERT_OK(gpu->ops->matmul(gpu, d40, dx, &wg, NULL, 40));
        float *b40 = dev_fetch(d40, (size_t)40 * R);
        differ += memcmp(b40 + (size_t)39 * R, last, (size_t)R * sizeof *last) != 0;
        printf("matmul_q invariance %s%s: %d of 4 batch sizes differ from the token alone\n",
               seer_ggml_type_name(type), lname, differ);
        assert_int_equal(differ, 0);
        gpu->ops->weight_free(gpu, &wg);
        dev_free(dx), dev_free(dy), dev_free(d40);
        free(x), free(alone), free(last), free(b40), free(ht.data);
    }
}

static void test_matmul_q_invariant(void **state) {
    (void)state;
    on_both_layouts(matmul_q_invariant_cases);
}

/* One type in row blocks (matmul_qt.cu): the GEMV (T <= seer_cuda_tuning.qt_gemv_max, 1 by default)
 * and the tensor-core kernel above it against the CPU at T = 1, 2, 5, 8 and the invariant
 * limit, a row count not a multiple of the 32-row block; then every token's row at T = n bit
 * for bit against the same token alone (T = 1, the GEMV), and against a second backend whose
 * GEMV takes up to 8 tokens (the same sums by another kernel must give the same bits). The
 * outputs start as NaN. Returns the token rows that differ from the token alone. */
static int matmul_qt_type(ggml_type type, seer_backend *gpu8, uint64_t seed) {
    static const int Ts[] = {1, 2, 5, 8, 256};
    const int R = 328, C = 1024;
    uint64_t rng = seed;
    host_tensor ht;
    make_qtensor(&ht, "w", type, R, C, &rng);
    seer_weight wc, wg, wg8;
    ASSERT_OK(cpu->ops->weight_load(cpu, &ht.t, SEER_WEIGHTS_F32, &wc));
    ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wg));
    assert_int_equal(wg.dtype, type);
    ASSERT_OK(gpu8->ops->weight_load(gpu8, &ht.t, SEER_WEIGHTS_STORED, &wg8));
    const int maxT = 256;
    float *x = rand_array((size_t)maxT * C, 1.f, &rng);
    float *dx = dev_copy(x, (size_t)maxT * C);
    /* each token alone */
    float *alone = malloc(sizeof(float) * (size_t)maxT * R);
    assert_non_null(alone);
    for (int t = 0; t < maxT; t++) {
        float *dy = dev_nan((size_t)R);
        ASSERT_OK(gpu->ops->matmul(gpu, dy, dx + (size_t)t * C, &wg, NULL, 1));
        float *o = dev_fetch(dy, (size_t)R);
        memcpy(alone + (size_t)t * R, o, sizeof(float) * R);
        free(o);
        dev_free(dy);
    }
    int differ = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        const int T = Ts[ti];
        float *ref = nan_array((size_t)T * R);
        ASSERT_OK(cpu->ops->matmul(cpu, ref, x, &wc, NULL, T));
        for (int k = 0; k < 2; k++) {
            /* each backend has its own stream: its output goes through its own copies */
            seer_backend *be = k ? gpu8 : gpu;
            const size_t bytes = sizeof(float) * (size_t)T * R;
            float *dy = NULL, *out = nan_array((size_t)T * R);
            ASSERT_OK(be->ops->alloc(be, bytes, (void **)&dy));
            ASSERT_OK(be->ops->upload(be, dy, out, bytes));
            ASSERT_OK(be->ops->matmul(be, dy, dx, k ? &wg8 : &wg, NULL, T));
            ASSERT_OK(be->ops->download(be, out, dy, bytes));
            be->ops->dealloc(be, dy);
            char shape[96];
            snprintf(shape, sizeof shape, "T=%d rows=%d cols=%d %s rows%s", T, R, C, seer_ggml_type_name(type),
                     k ? " gemv<=8" : "");
            record("matmul_qt", shape, out, ref, (size_t)T * R, 1e-2);
            int d = 0;
            for (int t = 0; t < T; t++)
                d += memcmp(out + (size_t)t * R, alone + (size_t)t * R, sizeof(float) * R) != 0;
            if (d)
                printf("matmul_qt %s: %d of %d token rows differ from the token alone\n", shape, d, T);
            differ += d;
            free(out);
        }
        free(ref);
    }
    gpu8->ops->weight_free(gpu8, &wg8);
    cpu->ops->weight_free(cpu, &wc);
    gpu->ops->weight_free(gpu, &wg);
    dev_free(dx);
    free(x), free(alone), free(ht.data);
    return differ;
}

/* Every type in row blocks, as matmul_qt_type checks it. */
static void test_matmul_qt(void **state) {
    (void)state;
    gpu_restore();
    seer_cuda_tuning tu = lab_cuda_tuning_from_env();
    tu.qt_gemv_max = 8;
    seer_backend *gpu8 = NULL;
    ASSERT_OK(seer_backend_cuda_init_tuned(0, &tu, &gpu8));
    int differ = 0;
    for (int qi = 0; qi < N_QT_TYPES; qi++)
        differ += matmul_qt_type(qt_types[qi], gpu8, 8500 + (uint64_t)qi);
    printf("matmul_qt invariance: %d token rows differ from the token alone\n", differ);
    gpu8->ops->free(gpu8);
    assert_int_equal(differ, 0);
    assert_op_passed("matmul_qt");
}

/* matmul_split over three joined parts, matmul_add, and matmul_glu over an interleaved
 * (gate, up) pair, each of a quantised type, against the CPU. */
static void matmul_q_fused_cases(const char *lname) {
    static const int Ts[] = {1, 7, 300};
    for (int qi = 0; qi < N_QTYPES; qi++) {
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            const ggml_type type = qtypes[qi];
            const int T = Ts[ti], C = 512, rows[3] = {512, 128, 128}, F = 384;
            uint64_t rng = 9000 + (uint64_t)qi * 16 + ti;
            float *x = rand_array((size_t)T * C, 1.f, &rng);
            float *dx = dev_copy(x, (size_t)T * C);
            host_tensor ht[3];
            seer_weight wc[3], parts[3], fused;
            float *ref[3], *dy[3], *bias[3], *db[3];
            for (int j = 0; j < 3; j++) {
                make_qtensor(&ht[j], "w", type, rows[j], C, &rng);
                ASSERT_OK(cpu->ops->weight_load(cpu, &ht[j].t, SEER_WEIGHTS_F32, &wc[j]));
                ASSERT_OK(gpu->ops->weight_load(gpu, &ht[j].t, SEER_WEIGHTS_STORED, &parts[j]));
                bias[j] = rand_array(rows[j], 1.f, &rng);
                db[j] = dev_copy(bias[j], rows[j]);
                ref[j] = nan_array((size_t)T * rows[j]);
                ASSERT_OK(cpu->ops->matmul(cpu, ref[j], x, &wc[j], bias[j], T));
                dy[j] = dev_nan((size_t)T * rows[j]);
            }
            ASSERT_OK(gpu->ops->weight_concat(gpu, parts, 3, false, &fused));
            assert_int_equal(fused.dtype, type);
            ASSERT_OK(gpu->ops->matmul_split(gpu, dy, dx, &fused, (const float *const *)db, T));
            char shape[128];
            for (int j = 0; j < 3; j++) {
                float *out = dev_fetch(dy[j], (size_t)T * rows[j]);
                snprintf(shape, sizeof shape, "T=%d part %d/3 rows=%d cols=%d %s bias%s", T, j, rows[j], C,
                         seer_ggml_type_name(type), lname);
                record("matmul_q_split", shape, out, ref[j], (size_t)T * rows[j], 1e-2);
                free(out);
            }
            /* matmul_add with the first part alone: y = r + x W0^T */
            seer_weight w0;
            ASSERT_OK(gpu->ops->weight_load(gpu, &ht[0].t, SEER_WEIGHTS_STORED, &w0));
            float *r = rand_array((size_t)T * rows[0], 1.f, &rng), *sum = nan_array((size_t)T * rows[0]);
            ASSERT_OK(cpu->ops->matmul(cpu, sum, x, &wc[0], NULL, T));
            for (size_t i = 0; i < (size_t)T * rows[0]; i++)
                sum[i] += r[i];
            float *dr = dev_copy(r, (size_t)T * rows[0]);
            ASSERT_OK(gpu->ops->matmul_add(gpu, dr, dx, &w0, T));
            float *got = dev_fetch(dr, (size_t)T * rows[0]);
            snprintf(shape, sizeof shape, "T=%d rows=%d cols=%d %s%s", T, rows[0], C, seer_ggml_type_name(type),
                     lname);
            record("matmul_q_add", shape, got, sum, (size_t)T * rows[0], 1e-2);
            free(r), free(sum), free(got);
            dev_free(dr);
            gpu->ops->weight_free(gpu, &w0);

            /* matmul_glu: gate and up interleaved */
            host_tensor hg[2];
            seer_weight gc[2], ga[2], inter;
            for (int j = 0; j < 2; j++) {
                make_qtensor(&hg[j], "w", type, F, C, &rng);
                ASSERT_OK(cpu->ops->weight_load(cpu, &hg[j].t, SEER_WEIGHTS_F32, &gc[j]));
                ASSERT_OK(gpu->ops->weight_load(gpu, &hg[j].t, SEER_WEIGHTS_STORED, &ga[j]));
            }
            ASSERT_OK(gpu->ops->weight_concat(gpu, ga, 2, true, &inter));
            float *g = nan_array((size_t)T * F), *u = nan_array((size_t)T * F), *gref = nan_array((size_t)T * F);
            ASSERT_OK(cpu->ops->matmul(cpu, g, x, &gc[0], NULL, T));
            ASSERT_OK(cpu->ops->matmul(cpu, u, x, &gc[1], NULL, T));
            ASSERT_OK(cpu->ops->swiglu(cpu, gref, g, u, (size_t)T * F));
            float *dgl = dev_nan((size_t)T * F);
            ASSERT_OK(gpu->ops->matmul_glu(gpu, dgl, dx, &inter, T));
            float *gout = dev_fetch(dgl, (size_t)T * F);
            snprintf(shape, sizeof shape, "T=%d F=%d D=%d %s%s", T, F, C, seer_ggml_type_name(type), lname);
            record("matmul_q_glu", shape, gout, gref, (size_t)T * F, 1e-2);
            free(g), free(u), free(gref), free(gout);
            dev_free(dgl);
            for (int j = 0; j < 2; j++) {
                cpu->ops->weight_free(cpu, &gc[j]);
                gpu->ops->weight_free(gpu, &ga[j]);
                free(hg[j].data);
            }
            gpu->ops->weight_free(gpu, &inter);
            for (int j = 0; j < 3; j++) {
                cpu->ops->weight_free(cpu, &wc[j]);
                gpu->ops->weight_free(gpu, &parts[j]);
                dev_free(dy[j]), dev_free(db[j]);
                free(ref[j]), free(bias[j]), free(ht[j].data);
            }
            gpu->ops->weight_free(gpu, &fused);
            dev_free(dx);
            free(x);
        }
    }
}

static void test_matmul_q_fused(void **state) {
    (void)state;
    on_both_layouts(matmul_q_fused_cases);
    assert_op_passed("matmul_q_split");
    assert_op_passed("matmul_q_add");
    assert_op_passed("matmul_q_glu");
}

/* Rows of a quantised embedding table: the GPU dequantises in f32 as the CPU does (the same
 * products; only contraction into FMAs may differ). */
static void embed_q_cases(const char *lname) {
    for (int qi = 0; qi < N_QTYPES; qi++) {
        const ggml_type type = qtypes[qi];
        const int V = 3000, D = 768, T = 33;
        uint64_t rng = 9500 + (uint64_t)qi;
        host_tensor ht;
        make_qtensor(&ht, "token_embd", type, V, D, &rng);
        seer_weight wc, wg;
        ASSERT_OK(cpu->ops->weight_load(cpu, &ht.t, SEER_WEIGHTS_F32, &wc));
        ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wg));
        int32_t tok[33];
        for (int t = 0; t < T; t++)
            tok[t] = t == 0 ? V - 1 : (int32_t)(tu_rand_u64(&rng) % (uint64_t)V);
        float *ref = nan_array((size_t)T * D);
        ASSERT_OK(cpu->ops->embed(cpu, ref, &wc, tok, T));
        float *dy = dev_nan((size_t)T * D);
        ASSERT_OK(gpu->ops->embed(gpu, dy, &wg, tok, T));
        float *out = dev_fetch(dy, (size_t)T * D);
        char shape[96];
        snprintf(shape, sizeof shape, "V=%d D=%d T=%d %s%s", V, D, T, seer_ggml_type_name(type), lname);
        record("embed_q", shape, out, ref, (size_t)T * D, 1e-6);
        cpu->ops->weight_free(cpu, &wc);
        gpu->ops->weight_free(gpu, &wg);
        dev_free(dy);
        free(ref), free(out), free(ht.data);
    }
}

static void test_embed_q(void **state) {
    (void)state;
    on_both_layouts(embed_q_cases);
    assert_op_passed("embed_q");
}

/* SEER_WEIGHTS_BF16 dequantises at load (the old path), and the two agree within bf16's
 * rounding of the weights; f32 weights are no CUDA option. */
static void test_weights_kind(void **state) {
    (void)state;
    gpu_restore();
    uint64_t rng = 9900;
    host_tensor ht;
    make_qtensor(&ht, "w", GGML_TYPE_Q4_K, 256, 1024, &rng);
    seer_weight wq, wb, wf;
    ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_STORED, &wq));
    ASSERT_OK(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_BF16, &wb));
    assert_int_equal(wq.dtype, GGML_TYPE_Q4_K);
    assert_int_equal(wb.dtype, GGML_TYPE_BF16);
    assert_int_not_equal(gpu->ops->weight_load(gpu, &ht.t, SEER_WEIGHTS_F32, &wf), SEER_OK);
    const int T = 4, R = 256, C = 1024;
    float *x = rand_array((size_t)T * C, 1.f, &rng);
    float *dx = dev_copy(x, (size_t)T * C), *d1 = dev_nan((size_t)T * R), *d2 = dev_nan((size_t)T * R);
    ASSERT_OK(gpu->ops->matmul(gpu, d1, dx, &wq, NULL, T));
    ASSERT_OK(gpu->ops->matmul(gpu, d2, dx, &wb, NULL, T));
    float *a = dev_fetch(d1, (size_t)T * R), *b = dev_fetch(d2, (size_t)T * R);
    record("weights_bf16_vs_q", "T=4 rows=256 cols=1024 q4_K", b, a, (size_t)T * R, 1e-2);
    assert_op_passed("weights_bf16_vs_q");
    gpu->ops->weight_free(gpu, &wq);
    gpu->ops->weight_free(gpu, &wb);
    dev_free(dx), dev_free(d1), dev_free(d2);
    free(x), free(a), free(b), free(ht.data);
}

/* weight_quantize: a bf16 weight's copy quantised on the device gives the same products, bit
 * for bit, as the blocks seer_gguf_quant writes on the host from the same values, loaded as stored
 * (so the bytes are the host's: a quantiser that rounds one code differently shows); a fused
 * weight quantised whole gives the fused quantised parts' products (matmul_glu); the CPU's
 * copy computes the same products within the reference's tolerance; a non-finite value is
 * refused. Odd row counts; rows ending inside a 128-column quad (planes) or whole blocks of 256
 * columns (row blocks). */
static void test_weight_quantize(void **state) {
    (void)state;
    gpu_restore();
    static const ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
    for (int qi = 0; qi < 4; qi++) {
        const ggml_type type = types[qi % 2];
        const int R = 203, C = qi < 2 ? 320 : 512, T = 5;
        uint64_t rng = 12000 + (uint64_t)qi;
        host_tensor hb, hq;
        make_tensor(&hb, "w", GGML_TYPE_BF16, R, C, &rng);
        /* the host's blocks from the same bf16 values */
        float *f = malloc(sizeof(float) * R * C);
        assert_non_null(f);
        ASSERT_OK(seer_gguf_dequant(GGML_TYPE_BF16, hb.data, f, (uint64_t)R * C));
        size_t nb = 0;
        ASSERT_OK(seer_ggml_nbytes(type, (uint64_t)R * C, &nb));
        hq = hb;
        hq.data = malloc(nb);
        assert_non_null(hq.data);
        ASSERT_OK(seer_gguf_quant(type, f, hq.data, (uint64_t)R * C));
        hq.t.type = type;
        hq.t.data = hq.data;
        hq.t.nbytes = nb;
        seer_weight wb, wq, wr, cf, cq;
        ASSERT_OK(gpu->ops->weight_load(gpu, &hb.t, SEER_WEIGHTS_STORED, &wb));
        assert_int_equal(wb.dtype, GGML_TYPE_BF16);
        ASSERT_OK(gpu->ops->weight_quantize(gpu, &wb, type, &wq));
        assert_int_equal(wq.dtype, type);
        assert_true(wq.owned && wq.rows == R && wq.cols == C);
        ASSERT_OK(gpu->ops->weight_load(gpu, &hq.t, SEER_WEIGHTS_STORED, &wr));
        ASSERT_OK(cpu->ops->weight_load(cpu, &hb.t, SEER_WEIGHTS_F32, &cf));
        ASSERT_OK(cpu->ops->weight_quantize(cpu, &cf, type, &cq));
        float *x = rand_array((size_t)T * C, 1.f, &rng);
        float *dx = dev_copy(x, (size_t)T * C), *d1 = dev_nan((size_t)T * R), *d2 = dev_nan((size_t)T * R);
        float *ref = nan_array((size_t)T * R);
        ASSERT_OK(gpu->ops->matmul(gpu, d1, dx, &wq, NULL, T));
        ASSERT_OK(gpu->ops->matmul(gpu, d2, dx, &wr, NULL, T));
        ASSERT_OK(cpu->ops->matmul(cpu, ref, x, &cq, NULL, T));
        float *a = dev_fetch(d1, (size_t)T * R), *b = dev_fetch(d2, (size_t)T * R);
        if (memcmp(a, b, sizeof(float) * T * R))
            fail_msg("%s: the device's quantised copy differs from the host's blocks", seer_ggml_type_name(type));
        char shape[96];
        snprintf(shape, sizeof shape, "T=%d rows=%d cols=%d bf16 -> %s", T, R, C, seer_ggml_type_name(type));
        record("weight_quantize", shape, a, ref, (size_t)T * R, 1e-2);
        assert_op_passed("weight_quantize");

        /* fused and interleaved (gate|up for matmul_glu): whole = the fusion of the parts */
        host_tensor hp[2];
        seer_weight pb[2], pq[2], fb, fq, fqq;
        for (int j = 0; j < 2; j++) {
            make_tensor(&hp[j], "p", GGML_TYPE_BF16, 96, C, &rng);
            ASSERT_OK(gpu->ops->weight_load(gpu, &hp[j].t, SEER_WEIGHTS_STORED, &pb[j]));
            ASSERT_OK(gpu->ops->weight_quantize(gpu, &pb[j], type, &pq[j]));
        }
        ASSERT_OK(gpu->ops->weight_concat(gpu, pb, 2, true, &fb));
        ASSERT_OK(gpu->ops->weight_quantize(gpu, &fb, type, &fq));
        assert_true(fq.n_seg == 2 && fq.interleaved && fq.seg_rows[0] == 96);
        ASSERT_OK(gpu->ops->weight_concat(gpu, pq, 2, true, &fqq));
        float *g1 = dev_nan((size_t)T * 96), *g2 = dev_nan((size_t)T * 96);
        ASSERT_OK(gpu->ops->matmul_glu(gpu, g1, dx, &fq, T));
        ASSERT_OK(gpu->ops->matmul_glu(gpu, g2, dx, &fqq, T));
        float *ga = dev_fetch(g1, (size_t)T * 96), *gb = dev_fetch(g2, (size_t)T * 96);
        if (memcmp(ga, gb, sizeof(float) * T * 96))
            fail_msg("%s: a fused weight quantised whole differs from its quantised parts fused",
                     seer_ggml_type_name(type));

        /* a value that is not finite: refused, nothing made */
        ((uint16_t *)hb.data)[7 * C + 3] = 0x7F80; /* +inf */
        seer_weight wi, bad = {0};
        ASSERT_OK(gpu->ops->weight_load(gpu, &hb.t, SEER_WEIGHTS_STORED, &wi));
        assert_int_equal(gpu->ops->weight_quantize(gpu, &wi, type, &bad), SEER_ERR_INVALID_ARG);
        assert_null(bad.data);
        assert_int_equal(gpu->ops->weight_quantize(gpu, &wq, GGML_TYPE_Q4_0, &bad), SEER_ERR_UNSUPPORTED);
        assert_int_equal(gpu->ops->weight_quantize(gpu, &wb, GGML_TYPE_Q4_K, &bad), SEER_ERR_UNSUPPORTED);

        seer_weight *ws[] = {&wb, &wq, &wr, &fb, &fq, &fqq, &wi, &pb[0], &pb[1], &pq[0], &pq[1]};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
            gpu->ops->weight_free(gpu, ws[i]);
        cpu->ops->weight_free(cpu, &cf);
        cpu->ops->weight_free(cpu, &cq);
        dev_free(dx), dev_free(d1), dev_free(d2), dev_free(g1), dev_free(g2);
        free(x), free(a), free(b), free(ref), free(ga), free(gb), free(f);
        free(hb.data), free(hq.data), free(hp[0].data), free(hp[1].data);
    }
}

/* ---- without a GPU ------------------------------------------------------------------------ */

/* The row blocks on the host (seer_cuda_qt_host_check runs the kernels' lane code on the
 * CPU), per type: every value of the file comes back as the CPU dequantises it (the same
 * products; only contraction into FMAs may differ), the GEMV's and the tensor-core kernel's
 * products agree bit for bit, and both are within 1e-2 of the CPU's f32 product (x rounded to
 * 8 bits per group of 32). Rows not a multiple of 32, tokens not a multiple of 8; a width that
 * is not whole blocks of 256 is refused. */
static void test_qt_host(void **state) {
    (void)state;
    seer_backend *cb = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &cb));
    for (int qi = 0; qi < N_QT_TYPES; qi++) {
        const ggml_type type = qt_types[qi];
        const int R = 72, C = 768, T = 11;
        uint64_t rng = 13000 + (uint64_t)qi;
        host_tensor ht;
        make_qtensor(&ht, "w", type, R, C, &rng);
        float *x = rand_array((size_t)T * C, 1.f, &rng), *want = nan_array((size_t)R * C);
        float *deq = nan_array((size_t)R * C), *y1 = nan_array((size_t)T * R), *ym = nan_array((size_t)T * R);
        float *ref = nan_array((size_t)T * R);
        ASSERT_OK(seer_gguf_dequant(type, ht.data, want, (uint64_t)R * C));
        ASSERT_OK(seer_cuda_qt_host_check(type, ht.data, R, C, x, T, deq, y1, ym));
        seer_weight wc;
        ASSERT_OK(cb->ops->weight_load(cb, &ht.t, SEER_WEIGHTS_F32, &wc));
        ASSERT_OK(cb->ops->matmul(cb, ref, x, &wc, NULL, T));
        char shape[96];
        snprintf(shape, sizeof shape, "rows=%d cols=%d %s", R, C, seer_ggml_type_name(type));
        record("qt_host_values", shape, deq, want, (size_t)R * C, 1e-6);
        snprintf(shape, sizeof shape, "T=%d rows=%d cols=%d %s gemv", T, R, C, seer_ggml_type_name(type));
        record("qt_host_matmul", shape, y1, ref, (size_t)T * R, 1e-2);
        snprintf(shape, sizeof shape, "T=%d rows=%d cols=%d %s mma", T, R, C, seer_ggml_type_name(type));
        record("qt_host_matmul", shape, ym, ref, (size_t)T * R, 1e-2);
        if (memcmp(y1, ym, sizeof(float) * T * R))
            fail_msg("%s: the GEMV's and the tensor-core kernel's products differ", seer_ggml_type_name(type));
        assert_int_equal(seer_cuda_qt_host_check(type, ht.data, R, 320, x, T, deq, y1, ym), SEER_ERR_UNSUPPORTED);
        cb->ops->weight_free(cb, &wc);
        free(x), free(want), free(deq), free(y1), free(ym), free(ref), free(ht.data);
    }
    assert_int_equal(seer_cuda_qt_host_check(GGML_TYPE_BF16, NULL, 32, 256, NULL, 1, NULL, NULL, NULL),
                     SEER_ERR_UNSUPPORTED);
    cb->ops->free(cb);
    assert_op_passed("qt_host_values");
    assert_op_passed("qt_host_matmul");
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    const struct CMUnitTest host[] = {cmocka_unit_test(test_qt_host)};
    const int rh = cmocka_run_group_tests(host, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_q),   cmocka_unit_test(test_matmul_q_invariant),
        cmocka_unit_test(test_matmul_qt),
        cmocka_unit_test(test_matmul_q_fused), cmocka_unit_test(test_embed_q),
        cmocka_unit_test(test_weights_kind), cmocka_unit_test(test_weight_quantize),
    };
    const int rd = ops_run(tests, sizeof tests / sizeof *tests);
    return rh ? rh : rd;
#else
    return ops_run(NULL, 0);
#endif
}
