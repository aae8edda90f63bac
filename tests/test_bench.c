/*
 * test_bench.c: what `seer bench` stands on: synthetic models generated on the backend
 * (shapes, weight statistics, determinism, bad input), synthetic KV fill (the values the
 * contract promises, lengths and pages, copy-on-write, the context left unchanged on
 * failure), the floor's inputs (footprint, bandwidth probe), and the `seer bench` command
 * itself (table, JSON fields, bad flags, a GGUF's stored weight types, a peer's decode
 * timings merged by (L, B) and its prefill by prompt size, malformed peer files refused, and
 * scripts/peer_llamacpp_run.py's conversion of llama.cpp's output into a peer file). With a
 * CUDA device: the same synthetic model and KV on the GPU give the CPU's logits within the
 * bf16 tolerance. No timing assertions.
 */
#include "testutil.h"

#include "backend/synth_hash.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>

static seer_model *synth(const char *shape, seer_backend_kind kind, uint64_t seed) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = kind;
    mp.n_threads = 2;
    seer_gen_params gp = seer_gen_default_params();
    gp.seed = seed;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_synthetic(shape, &gp, mp, &m));
    return m;
}

static seer_context *mkctx(seer_model *m, int n_ctx, int n_seq, int page, int n_pages) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    cp.n_batch_max = 16;
    cp.page_size = page;
    cp.n_pages = n_pages;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    return c;
}

/* Decodes one token at the end of seq; logits into out [V]. */
static void decode_one(seer_context *c, seer_seq_id seq, int32_t token, float *out) {
    int32_t pos = seer_seq_len(c, seq);
    uint8_t want = 1;
    seer_batch b = {.n_tokens = 1, .token = &token, .seq = &seq, .pos = &pos, .logits = &want};
    ASSERT_OK(seer_decode(c, &b, out));
}

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* ---- synthetic models ------------------------------------------------------------------ */

static void test_presets_and_footprint(void **state) {
    const char *const *names = seer_synthetic_shapes();
    const char *want[] = {"llama-3.1-8b", "llama-2-7b", "qwen2.5-7b", "tiny"};
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        bool found = false;
        for (int i = 0; names[i]; i++)
            found |= !strcmp(names[i], want[k]);
        assert_true(found);
    }
    /* The big shapes without weights: hyper-parameters as published. */
    seer_model_params mp = seer_model_default_params();
    mp.vocab_only = true;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_synthetic("llama-3.1-8b", NULL, mp, &m));
    seer_model_info in;
    seer_model_get_info(m, &in);
    assert_int_equal(in.dim, 4096);
    assert_int_equal(in.n_layers, 32);
    assert_int_equal(in.n_heads, 32);
    assert_int_equal(in.n_kv_heads, 8);
    assert_int_equal(in.head_dim, 128);
    assert_int_equal(in.ffn_dim, 14336);
    assert_int_equal(in.n_vocab, 128256);
    assert_int_equal(in.ctx_train, 131072);
    assert_true(in.rope_base == 500000.f);
    assert_string_equal(in.arch, "llama");
    seer_context *c = NULL;
    seer_context_params cp = seer_context_default_params();
    assert_int_equal(seer_context_init(m, cp, &c), SEER_ERR_INVALID_ARG); /* no weights */
    seer_model_free(m);
    ASSERT_OK(seer_model_synthetic("qwen2.5-7b", NULL, mp, &m));
    seer_model_get_info(m, &in);
    assert_int_equal(in.dim, 3584);
    assert_int_equal(in.n_kv_heads, 4);
    assert_int_equal(in.n_vocab, 152064);
    assert_string_equal(in.arch, "qwen2");
    assert_int_equal(in.rope_neox, 1);
    seer_model_free(m);
    /* Gemma 3's head size is not D / H */
    ASSERT_OK(seer_model_synthetic("gemma-3-4b", NULL, mp, &m));
    seer_model_get_info(m, &in);
    assert_int_equal(in.dim, 2560);
    assert_int_equal(in.n_heads, 8);
    assert_int_equal(in.head_dim, 256);
    assert_string_equal(in.arch, "gemma3");
    seer_model_free(m);

    /* A windowed family's floor counts a windowed layer's reads as its window: a small
     * Gemma 3 of 6 layers (5 windowed, the last global) with a window of 8 and Dh 24 != D / H. */
    seer_gen_params gw = seer_gen_default_params();
    gw.arch = "gemma3";
    gw.n_vocab = 300;
    gw.dim = 32;
    gw.n_heads = 2;
    gw.n_kv_heads = 1;
    gw.head_dim = 24;
    gw.ffn_dim = 48;
    gw.n_layers = 6;
    gw.window = 8;
    seer_model_params mc = seer_model_default_params();
    mc.backend = SEER_BACKEND_CPU;
    mc.n_threads = 1;
    ASSERT_OK(seer_model_synthetic(NULL, &gw, mc, &m));
    seer_model_footprint fw;
    seer_model_get_footprint(m, &fw);
    assert_int_equal(fw.n_layers, 6);
    assert_int_equal(fw.windowed_layers, 5);
    assert_int_equal(fw.window, 8);
    assert_int_equal(fw.kv_bytes_per_token, 2 * 6 * 1 * 24 * 4);
    const double per_layer_tok = 2 * 24 * 4;
    assert_true(seer_footprint_kv_read(&fw, 100, 0) == per_layer_tok * (100 + 5 * 8));
    assert_true(seer_footprint_kv_read(&fw, 100, 4) == per_layer_tok * (4 + 5 * 4));
    assert_true(seer_footprint_kv_read(&fw, 6, 0) == per_layer_tok * 6 * 6);
    seer_model_free(m);

    /* The floor's inputs on the CPU (f32) for tiny: D 64, 2 layers, H 4, Hkv 2, Dh 16, F 192. */
    m = synth("tiny", SEER_BACKEND_CPU, 1);
    seer_model_footprint fp;
    seer_model_get_footprint(m, &fp);
    const uint64_t per_layer = 64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 192 * 64;
    assert_int_equal(fp.weight_bytes, (2 * per_layer + 512 * 64) * 4);
    assert_int_equal(fp.kv_bytes_per_token, 2 * 2 * 2 * 16 * 4);
    assert_int_equal(fp.weight_elem_bytes, 4);
    assert_int_equal(fp.kv_elem_bytes, 4);
    assert_int_equal(fp.weight_elems, 2 * per_layer + 512 * 64);
    assert_int_equal(fp.n_weight_types, 1);
    assert_string_equal(fp.weight_types[0].name, "f32");
    assert_int_equal(fp.weight_types[0].bytes, fp.weight_bytes);
    assert_string_equal(fp.file_type, ""); /* synthetic: no file */
    /* W counts each weight as stored: a layer's wq held as q4_K blocks (144 bytes per 256
     * elements) instead of f32 shrinks W by exactly the difference and shows as its own
     * dtype. Only the dtype field is changed, for the sum; nothing decodes with it. */
    seer_weight *wq = &m->layers[0].wq;
    const int dtype = wq->dtype;
    wq->dtype = GGML_TYPE_Q4_K;
    seer_model_footprint fq;
    seer_model_get_footprint(m, &fq);
    wq->dtype = dtype;
    assert_int_equal(fq.weight_bytes, fp.weight_bytes - 64 * 64 * 4 + 64 * 64 / 256 * 144);
    assert_int_equal(fq.weight_elems, fp.weight_elems);
    assert_int_equal(fq.n_weight_types, 2);
    assert_string_equal(fq.weight_types[0].name, "f32"); /* largest first */
    assert_string_equal(fq.weight_types[1].name, "q4_K");
    assert_int_equal(fq.weight_types[1].bytes, 64 * 64 / 256 * 144);
    assert_int_equal(fq.weight_types[0].bytes + fq.weight_types[1].bytes, fq.weight_bytes);
    seer_model_get_info(m, &in);
    assert_string_equal(in.backend, "cpu");
    assert_int_equal(in.file_size, 0);
    /* The vocabulary works: text encodes (byte fallback) and the pieces come back. */
    int32_t ids[64];
    int n = 0;
    ASSERT_OK(seer_tokenize(m, "hi!", 3, true, false, ids, 64, &n));
    assert_true(n >= 2);
    assert_int_equal(ids[0], seer_token_bos(m));
    char buf[64] = "";
    int len = 0;
    for (int i = 1; i < n; i++)
        len += seer_token_piece(m, ids[i], buf + len, (int)sizeof buf - len);
    assert_non_null(strstr(buf, "hi!"));
    seer_model_free(m);
}

static void test_weights_and_determinism(void **state) {
    seer_model *a = synth("tiny", SEER_BACKEND_CPU, 7), *b = synth("tiny", SEER_BACKEND_CPU, 7),
               *d = synth("tiny", SEER_BACKEND_CPU, 8);
    /* Statistics of a linear weight: mean 0, deviation 1/sqrt(cols), uniform bounds. */
    const seer_weight *w = &a->layers[1].w_gate;
    const float *x = w->data;
    const size_t n = (size_t)w->rows * w->cols;
    double s1 = 0, s2 = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        s1 += x[i];
        s2 += (double)x[i] * x[i];
        mx = fmax(mx, fabs(x[i]));
    }
    const double sd = 1 / sqrt((double)w->cols), mean = s1 / n, dev = sqrt(s2 / n - mean * mean);
    assert_true(fabs(mean) < 0.05 * sd);
    assert_true(fabs(dev / sd - 1) < 0.05);
    assert_true(mx <= sqrt(3.0) * sd * 1.0001 && mx > 1.6 * sd);
    /* Norm weights near 1. */
    float norm[64];
    memcpy(norm, a->layers[0].attn_norm, sizeof norm);
    for (int i = 0; i < 64; i++)
        assert_true(fabsf(norm[i] - 1) < 0.05f);

    const int V = a->info.n_vocab;
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V), *ld = malloc(sizeof(float) * V);
    seer_model *ms[] = {a, b, d};
    float *ls[] = {la, lb, ld};
    for (int k = 0; k < 3; k++) {
        seer_context *c = mkctx(ms[k], 256, 1, 16, 0);
        seer_seq_id q;
        ASSERT_OK(seer_seq_new(c, &q));
        ASSERT_OK(seer_seq_fill_synthetic(c, q, 40, 3));
        decode_one(c, q, 300, ls[k]);
        assert_true(all_finite(ls[k], V));
        seer_context_free(c);
    }
    assert_memory_equal(la, lb, sizeof(float) * V); /* same seed: the same model */
    assert_memory_not_equal(la, ld, sizeof(float) * V);
    free(la), free(lb), free(ld);
    seer_model_free(a), seer_model_free(b), seer_model_free(d);

    /* qwen2 (biases, tied output) and a custom shape decode too. */
    seer_model *q2 = synth("tiny-qwen2", SEER_BACKEND_CPU, 1);
    assert_non_null(q2->layers[0].bq);
    assert_true(q2->info.tied_output);
    seer_model_free(q2);
    seer_gen_params gp = seer_gen_default_params();
    gp.arch = "qwen2";
    gp.n_vocab = 300;
    gp.dim = 48;
    gp.n_heads = 6;
    gp.n_kv_heads = 3;
    gp.ffn_dim = 40;
    gp.n_layers = 3;
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    seer_model *cu = NULL;
    ASSERT_OK(seer_model_synthetic(NULL, &gp, mp, &cu));
    assert_int_equal(cu->info.head_dim, 8);
    seer_context *c = mkctx(cu, 64, 1, 4, 0);
    seer_seq_id sq;
    ASSERT_OK(seer_seq_new(c, &sq));
    ASSERT_OK(seer_seq_fill_synthetic(c, sq, 9, 1));
    float lg[300];
    decode_one(c, sq, 5, lg);
    assert_true(all_finite(lg, 300));
    seer_context_free(c);
    seer_model_free(cu);
}

static void test_bad_shapes(void **state) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    seer_model *m = (seer_model *)0x1;
    assert_int_equal(seer_model_synthetic("llama-9000", NULL, mp, &m), SEER_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(seer_last_error(), "llama-3.1-8b"));
    assert_int_equal(seer_model_synthetic(NULL, NULL, mp, &m), SEER_ERR_INVALID_ARG);
    seer_gen_params gp = seer_gen_default_params();
    gp.n_heads = 3; /* does not divide dim 64 */
    assert_int_equal(seer_model_synthetic(NULL, &gp, mp, &m), SEER_ERR_INVALID_ARG);
    gp = seer_gen_default_params();
    gp.n_kv_heads = 3;
    assert_int_equal(seer_model_synthetic(NULL, &gp, mp, &m), SEER_ERR_INVALID_ARG);
    gp = seer_gen_default_params();
    gp.n_vocab = 100; /* no room for the byte tokens */
    assert_int_equal(seer_model_synthetic(NULL, &gp, mp, &m), SEER_ERR_INVALID_ARG);
    gp = seer_gen_default_params();
    gp.arch = "gpt-neox";
    assert_int_equal(seer_model_synthetic(NULL, &gp, mp, &m), SEER_ERR_INVALID_ARG);
    gp = seer_gen_default_params();
    gp.scale = -1;
    assert_int_equal(seer_model_synthetic(NULL, &gp, mp, &m), SEER_ERR_INVALID_ARG);
    assert_null(m);
}

/* ---- synthetic KV ---------------------------------------------------------------------- */

/* The value the contract promises for (layer, which, i-th slot of a fill of n, e). */
static float expect_kv(uint64_t seed, int layer, int which, int i, int n, int e, int kvd) {
    uint64_t idx = (((uint64_t)layer * 2 + which) * n + i) * kvd + e;
    return seer_synth_value(seed, idx, seer_synth_mul(1.f));
}

static void test_fill(void **state) {
    seer_model *m = synth("tiny", SEER_BACKEND_CPU, 1);
    const int kvd = 2 * 16, V = m->info.n_vocab;
    seer_context *c = mkctx(m, 200, 4, 16, 10);
    seer_seq_id a;
    ASSERT_OK(seer_seq_new(c, &a));
    ASSERT_OK(seer_seq_fill_synthetic(c, a, 0, 1)); /* nothing */
    assert_int_equal(seer_seq_len(c, a), 0);
    assert_int_equal(seer_kv_free_pages(c), 10);
    ASSERT_OK(seer_seq_fill_synthetic(c, a, 5, 11));
    assert_int_equal(seer_seq_len(c, a), 5);
    assert_int_equal(seer_kv_free_pages(c), 9);
    ASSERT_OK(seer_seq_fill_synthetic(c, a, 20, 12)); /* continues in the partial page */
    assert_int_equal(seer_seq_len(c, a), 25);
    assert_int_equal(seer_kv_free_pages(c), 8);
    /* The stored values are the contract's, on both sides of the page boundary. */
    float *row = malloc(sizeof(float) * 25 * kvd);
    for (int layer = 0; layer < 2; layer++)
        for (int which = 0; which < 2; which++) {
            ASSERT_OK(seer_context_read_kv(c, a, layer, which, 0, 25, row));
            for (int s = 0; s < 25; s++)
                for (int e = 0; e < kvd; e += 7) {
                    float want = s < 5 ? expect_kv(11, layer, which, s, 5, e, kvd)
                                       : expect_kv(12, layer, which, s - 5, 20, e, kvd);
                    assert_true(row[s * kvd + e] == want);
                }
        }
    float *lg = malloc(sizeof(float) * V);
    decode_one(c, a, 77, lg);
    assert_true(all_finite(lg, V));
    assert_int_equal(seer_seq_len(c, a), 26);

    /* Copy-on-write: filling a fork leaves the original's slots as they were. */
    float *before = malloc(sizeof(float) * 26 * kvd), *after = malloc(sizeof(float) * 26 * kvd);
    ASSERT_OK(seer_context_read_kv(c, a, 1, 1, 0, 26, before));
    seer_seq_id f;
    ASSERT_OK(seer_seq_fork(c, a, &f));
    ASSERT_OK(seer_seq_fill_synthetic(c, f, 3, 99));
    assert_int_equal(seer_seq_len(c, f), 29);
    assert_int_equal(seer_seq_len(c, a), 26);
    ASSERT_OK(seer_context_read_kv(c, a, 1, 1, 0, 26, after));
    assert_memory_equal(before, after, sizeof(float) * 26 * kvd);
    ASSERT_OK(seer_context_read_kv(c, f, 1, 1, 0, 26, after));
    assert_memory_equal(before, after, sizeof(float) * 26 * kvd);
    decode_one(c, f, 78, lg);
    assert_true(all_finite(lg, V));

    /* Exhaustion and the context limit leave everything as it was. */
    int free0 = seer_kv_free_pages(c);
    seer_seq_id e;
    ASSERT_OK(seer_seq_new(c, &e));
    assert_int_equal(seer_seq_fill_synthetic(c, e, free0 * 16 + 1, 5), SEER_ERR_KV_FULL);
    assert_int_equal(seer_seq_len(c, e), 0);
    assert_int_equal(seer_kv_free_pages(c), free0);
    assert_int_equal(seer_seq_fill_synthetic(c, a, 175, 5), SEER_ERR_CONTEXT); /* 26 + 175 > 200 */
    assert_int_equal(seer_seq_len(c, a), 26);
    assert_int_equal(seer_kv_free_pages(c), free0);
    assert_int_equal(seer_seq_fill_synthetic(c, a, -1, 5), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_seq_fill_synthetic(c, 3, 4, 5), SEER_ERR_INVALID_ARG); /* not alive */
    assert_int_equal(seer_seq_fill_synthetic(c, 77, 4, 5), SEER_ERR_INVALID_ARG);
    ASSERT_OK(seer_context_read_kv(c, a, 1, 1, 0, 26, after));
    assert_memory_equal(before, after, sizeof(float) * 26 * kvd);
    /* What fits still fits afterwards. */
    ASSERT_OK(seer_seq_fill_synthetic(c, e, 2 * 16, 5));
    assert_int_equal(seer_kv_free_pages(c), free0 - 2);
    free(row), free(lg), free(before), free(after);
    seer_context_free(c);
    seer_model_free(m);
}

static void test_bandwidth_and_sync(void **state) {
    seer_model *m = synth("tiny", SEER_BACKEND_CPU, 1);
    double bw = 0;
    ASSERT_OK(seer_model_measure_bandwidth(m, &bw));
    assert_true(isfinite(bw) && bw > 1e6); /* any machine copies more than 1 MB/s */
    ASSERT_OK(seer_model_sync(m));
    seer_model_free(m);
}

/* ---- the command ----------------------------------------------------------------------- */

/* Runs a shell command; captures its stdout (and its stderr unless the command redirects
 * it) into out; returns the exit code. */
static int sh(char *out, size_t cap, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4200];
    snprintf(full, sizeof full, "%s%s", cmd, strstr(cmd, "2>") ? "" : " 2>&1");
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char buf[1 << 20];

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_bench_json(void **state) {
    int rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 64,128 "
                "--batch-list 1,2 --steps 3 --json --prefill 32 2>/dev/null", SEER_CLI);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    const char *fields[] = {"\"model\":{", "\"synthetic_weights\":true", "\"weight_bytes\":",
                            "\"kv_bytes_per_token\":512", "\"bandwidth_bytes_per_s\":",
                            "\"backend\":\"cpu\"", "\"prefill\":[{\"tokens\":32", "\"points\":[",
                            "\"ctx\":64", "\"ctx\":128", "\"batch\":2", "\"ms_per_step\":",
                            "\"tok_per_s\":", "\"floor_ms\":", "\"fraction_of_floor\":",
                            "\"logits_finite\":true", "\"steps\":3",
                            "\"weight_types\":[{\"dtype\":\"f32\"", "\"file_type\":\"\""};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (!strstr(buf, fields[i]))
            fail_msg("no %s in: %s", fields[i], buf);
    assert_int_equal(count(buf, "\"plain\":{"), 4);
    assert_int_equal(count(buf, "\"error\""), 0);
    assert_int_equal(buf[0], '{');

    /* A speculative point: every number is labelled synthetic. */
    rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 96 --batch-list 2 "
            "--steps 4 --warmup 1 --prefill 0 --spec streaming --spec-budget-list 32 "
            "--spec-gamma-list 2,3 --synthetic-accept 0.75 --json 2>/dev/null", SEER_CLI);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    const char *sf[] = {"\"kind\":\"streaming\"", "\"gamma\":3", "\"budget\":32",
                        "\"synthetic_acceptance_alpha\":0.75", "SYNTHETIC ACCEPTANCE",
                        "\"draft_step_ms\":", "\"verify_ms\":", "\"acceptance_synthetic\":",
                        "\"speedup_measured_synthetic\":", "\"speedup_projected_at_alpha\":",
                        "\"plain_gen_tok_per_s\":"};
    for (size_t i = 0; i < sizeof sf / sizeof *sf; i++)
        if (!strstr(buf, sf[i]))
            fail_msg("no %s in: %s", sf[i], buf);
    assert_int_equal(count(buf, "SYNTHETIC ACCEPTANCE"), 2);
    assert_null(strstr(buf, "\"prefill\""));

    /* auto beside a fixed setting, under acceptance replayed from a trace */
    const char *tp = tu_tmp_path("bench.trace");
    const char *trace = "seer-accept-trace 1\nseq streaming 32 1/2 2/2 0/2\nend\n";
    assert_int_equal(tu_write_file(tp, trace, strlen(trace)), 0);
    rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 96 --batch-list 2 "
            "--steps 4 --warmup 1 --prefill 0 --spec streaming,auto --spec-budget-list 32 "
            "--spec-gamma-list 2 --accept-trace %s --json 2>/dev/null", SEER_CLI, tp);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    const char *af[] = {"\"kind\":\"auto\"", "\"auto\":{", "\"plain_fraction\":", "\"mean_gamma\":",
                        "\"best_fixed_speedup\":", "\"auto_over_best_fixed\":", "\"calibration_s\":",
                        "\"acceptance_replayed_from\":"};
    for (size_t i = 0; i < sizeof af / sizeof *af; i++)
        if (!strstr(buf, af[i]))
            fail_msg("no %s in: %s", af[i], buf);
    /* the replayed chain of 2 accepts 1/2, 2/2, 0/2 in turn: 3 of 6 drafts */
    const char *a = strstr(buf, "\"acceptance_synthetic\":");
    assert_non_null(a);
    const double acc = atof(a + strlen("\"acceptance_synthetic\":"));
    assert_true(acc > 0.3 && acc < 0.7);
    /* the draft model's drafters: their rows with a draft model, refused without one */
    rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --draft-synthetic tiny --backend cpu --ctx-list 96 "
            "--batch-list 2 --steps 3 --warmup 1 --prefill 0 --spec draft,hierarchy --spec-budget-list 32 "
            "--spec-gamma-list 3 --json 2>/dev/null", SEER_CLI);
    if (rc != 0 || !strstr(buf, "\"kind\":\"draft\"") || !strstr(buf, "\"kind\":\"hierarchy\"") ||
        strstr(buf, "\"error\""))
        fail_msg("rc %d: %s", rc, buf);
    rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --spec hierarchy", SEER_CLI);
    if (rc != 2 || !strstr(buf, "draft model"))
        fail_msg("rc %d: %s", rc, buf);
    /* a malformed trace is refused before anything is measured */
    const char *bad = "seer-accept-trace 1\nseq streaming 32 3/2\nend\n";
    assert_int_equal(tu_write_file(tp, bad, strlen(bad)), 0);
    rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 96 --prefill 0 "
            "--spec streaming --accept-trace %s 2>&1", SEER_CLI, tp);
    assert_int_equal(rc, 1);
    if (!strstr(buf, "line 2") || strstr(buf, "plain decode"))
        fail_msg("rc %d: %s", rc, buf);
}

/* --json-out writes what --json prints; --replot draws it (when gnuplot is installed). */
static void test_bench_json_out_and_replot(void **state) {
    char js[1024], png[1024];
    snprintf(js, sizeof js, "%s", tu_tmp_path("run.json"));
    snprintf(png, sizeof png, "%s", tu_tmp_path("run.png"));
    int rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 40,80 --steps 2 "
                "--prefill 0 --spec streaming --spec-budget-list 16 --spec-gamma-list 2 --json-out %s",
                SEER_CLI, js);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    assert_non_null(strstr(buf, "of floor")); /* the table still goes to stdout */
    size_t n = 0;
    char *text = (char *)tu_read_file(js, &n);
    assert_non_null(text);
    assert_true(n > 100 && text[0] == '{' && text[n - 1] == '\n');
    assert_non_null(strstr(text, "\"ctx\":80"));
    assert_non_null(strstr(text, "\"speedup_measured_synthetic\":"));
    free(text);
    rc = sh(buf, sizeof buf, "%s bench --replot %s --plot %s", SEER_CLI, js, png);
    if (strstr(buf, "gnuplot is not installed")) {
        assert_int_equal(rc, 0);
        return;
    }
    if (rc != 0)
        fail_msg("replot rc %d: %s", rc, buf);
    uint8_t *img = tu_read_file(png, &n);
    assert_non_null(img);
    assert_true(n > 8 && !memcmp(img, "\x89PNG", 4));
    free(img);
}

static void test_bench_table_and_errors(void **state) {
    int rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 32 --steps 2 "
                "--prefill 16 --spec streaming --spec-budget-list 16 --spec-gamma-list 2", SEER_CLI);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    assert_non_null(strstr(buf, "of floor"));
    assert_non_null(strstr(buf, "copy bandwidth"));
    assert_non_null(strstr(buf, "prefill: one prompt of P tokens"));
    assert_non_null(strstr(buf, "\n      16 "));
    assert_non_null(strstr(buf, "SYNTHETIC ACCEPTANCE"));
    assert_non_null(strstr(buf, "SYNTHETIC 0.80"));
    struct {
        const char *args;
        int rc;
        const char *msg;
    } cases[] = {
        {"bench", 2, "--synthetic SHAPE or -m MODEL"},
        {"bench --synthetic tiny -m x.gguf", 2, "exactly one"},
        {"bench --synthetic nope --backend cpu", 1, "unknown synthetic shape"},
        {"bench --synthetic tiny --synthetic-accept 1.5", 2, "out of range"},
        {"bench --synthetic tiny --synthetic-accept 0", 2, "(0, 1)"},
        {"bench --synthetic tiny --spec draft", 2, "draft model"},
        {"bench --synthetic tiny --spec magic", 2, "unknown speculation"},
        {"bench --synthetic tiny --ctx-list 64,,x", 2, "not an integer"},
        {"bench --synthetic tiny --batch-list 0", 2, "out of range"},
        {"bench --synthetic tiny --prefill 64,0", 2, "cannot be one of several"},
        {"bench --synthetic tiny --steps 0", 2, "out of range"},
        {"bench --synthetic tiny --prefill-reps 0", 2, "out of range"},
        {"bench -m /nonexistent.gguf --backend cpu", 1, "nonexistent"},
        {"bench --replot x.json", 2, "--replot takes --plot"},
        {"bench --replot /nonexistent.json --plot /nonexistent.png", 1, "nonexistent.json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rc = sh(buf, sizeof buf, "%s %s", SEER_CLI, cases[i].args);
        if (rc != cases[i].rc || !strstr(buf, cases[i].msg))
            fail_msg("'seer %s': rc %d (want %d), output: %s", cases[i].args, rc, cases[i].rc, buf);
    }
}

/* A number that follows key after from in s (0 and a failed test when it is not there). */
static double num_after(const char *s, const char *from, const char *key) {
    const char *p = strstr(s, from);
    if (!p)
        fail_msg("no %s in: %s", from, s);
    p = strstr(p, key);
    if (!p)
        fail_msg("no %s after %s in: %s", key, from, s);
    return strtod(p + strlen(key), NULL);
}

static const char k_peer_model[] =
    "\"model\": {\"dim\": 64, \"n_layers\": 2, \"n_heads\": 4, \"n_kv_heads\": 2, \"ffn_dim\": 192, "
    "\"n_vocab\": 512}";

static void write_peer(const char *path, const char *model, const char *points) {
    char text[2048];
    snprintf(text, sizeof text, "{\"peer\": \"HF transformers\", \"description\": \"test peer\", %s, "
             "\"points\": [%s]}\n", model, points);
    assert_int_equal(tu_write_file(path, text, strlen(text)), 0);
}

/* --peer puts a hand-written peer's numbers beside the points with the same (L, B): in the
 * JSON (speedup = peer ms / seer ms), the table and a replot; other points are left alone. */
static void test_bench_peer(void **state) {
    char peer[1024], js[1024], png[1024];
    snprintf(peer, sizeof peer, "%s", tu_tmp_path("peer.json"));
    snprintf(js, sizeof js, "%s", tu_tmp_path("peer-run.json"));
    snprintf(png, sizeof png, "%s", tu_tmp_path("peer-run.png"));
    write_peer(peer, k_peer_model,
               "{\"ctx\": 40, \"batch\": 1, \"ms_per_step\": 1000.0, \"tok_per_s\": 1.0},"
               "{\"ctx\": 80, \"batch\": 1, \"error\": \"oom\"},"
               "{\"ctx\": 40, \"batch\": 4, \"ms_per_step\": 5.0}");
    int rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 40,80,120 "
                "--steps 2 --warmup 0 --prefill 0 --peer %s --json --json-out %s 2>/dev/null",
                SEER_CLI, peer, js);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    assert_non_null(strstr(buf, "\"peer\":{\"label\":\"HF transformers\",\"version\":\"\",\"description\":\"test peer\",\"prefill\":[]}"));
    assert_int_equal(count(buf, "\"peer\":{"), 3); /* the run, L=40 and L=80; none at 120 */
    assert_non_null(strstr(buf, "\"ctx\":80,\"batch\":1,\"peer\":{\"error\":\"oom\"}"));
    assert_null(strstr(buf, "\"batch\":4")); /* the peer's extra point is not a point of the run */
    const double seer_ms = num_after(buf, "\"ctx\":40,", "\"plain\":{\"ms_per_step\":");
    const double speedup = num_after(buf, "\"ctx\":40,", "\"speedup\":");
    assert_true(seer_ms > 0);
    assert_true(fabs(speedup * seer_ms / 1000.0 - 1) < 1e-9);
    assert_true(num_after(buf, "\"ctx\":40,", "\"peer\":{\"ms_per_step\":") == 1000.0);
    assert_true(num_after(buf, "\"ctx\":40,", "\"tok_per_s\":") == 1.0);

    /* The table: the two columns, "oom" where the peer ran out of memory, "-" where it has no
     * point; without --peer the table has no such columns. */
    rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 40,80,120 --steps 2 "
            "--warmup 0 --prefill 0 --peer %s 2>/dev/null", SEER_CLI, peer);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    assert_non_null(strstr(buf, "peer ms"));
    assert_non_null(strstr(buf, "test peer"));
    int L, B;
    double ms, f[6], pms, sp;
    const char *row = strstr(buf, "\n      40 ");
    assert_non_null(row);
    assert_int_equal(sscanf(row, "%d %d %lf %lf %lf %lf %lf %lf %lf%% %lf %lfx", &L, &B, &ms, &f[0],
                            &f[1], &f[2], &f[3], &f[4], &f[5], &pms, &sp), 11);
    assert_true(pms == 1000.0);
    assert_true(fabs(sp - 1000.0 / ms) <= 0.01 * sp + 0.01); /* ms is printed to 3 decimals */
    row = strstr(buf, "\n      80 ");
    assert_non_null(row);
    assert_non_null(strstr(row, " oom "));
    row = strstr(buf, "\n     120 ");
    assert_non_null(row);
    assert_int_equal(count(row, " - "), 1);
    rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 40 --steps 1 "
            "--prefill 0 2>/dev/null", SEER_CLI);
    assert_int_equal(rc, 0);
    assert_null(strstr(buf, "peer"));

    /* The run's JSON replots with the peer's line, and a run without one takes --peer then. */
    rc = sh(buf, sizeof buf, "%s bench --replot %s --plot %s", SEER_CLI, js, png);
    if (strstr(buf, "gnuplot is not installed")) {
        assert_int_equal(rc, 0);
    } else {
        if (rc != 0)
            fail_msg("replot rc %d: %s", rc, buf);
        size_t n = 0;
        uint8_t *img = tu_read_file(png, &n);
        assert_non_null(img);
        assert_true(n > 8 && !memcmp(img, "\x89PNG", 4));
        free(img);
    }
    rc = sh(buf, sizeof buf, "%s bench --replot %s --peer %s --plot %s", SEER_CLI, js, peer, png);
    assert_int_equal(rc, 0);
}

/* A GGUF file: the floor's W and the weight types in the table and the JSON are the weights
 * as the backend holds them (with --weights f32 the CPU backend dequantizes q8_0 and q4_0 to
 * f32; as stored it keeps their blocks), with the file's type beside them. */
static void test_bench_gguf_weight_types(void **state) {
    const char *types[] = {"q8_0", "Q8_0", "q4_0", "Q4_0", "f32", "F32"};
    char path[1024];
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s", tu_tmp_path("bench-model.gguf"));
        int rc = sh(buf, sizeof buf, "%s gen-model --vocab 512 --dim 64 --layers 2 --heads 4 --kv-heads 2 "
                    "--ffn 192 --dtype %s -o %s", SEER_CLI, types[2 * k], path);
        if (rc != 0)
            fail_msg("gen-model: %s", buf);
        rc = sh(buf, sizeof buf, "%s bench -m %s --backend cpu --ctx-list 32 --steps 1 --warmup 0 "
                "--prefill 0 --json 2>/dev/null", SEER_CLI, path);
        if (rc != 0)
            fail_msg("rc %d: %s", rc, buf);
        char stored[96];
        snprintf(stored, sizeof stored, "\"weight_types\":[{\"dtype\":\"%s\",", types[2 * k]);
        if (!strstr(buf, stored))
            fail_msg("no %s in: %s", stored, buf);
        rc = sh(buf, sizeof buf, "%s bench -m %s --backend cpu --weights f32 --ctx-list 32 --steps 1 --warmup 0 "
                "--prefill 0 --json 2>/dev/null", SEER_CLI, path);
        if (rc != 0)
            fail_msg("rc %d: %s", rc, buf);
        char want[160];
        snprintf(want, sizeof want, "\"file_type\":\"%s\"", types[2 * k + 1]);
        if (!strstr(buf, want) || !strstr(buf, "\"weight_types\":[{\"dtype\":\"f32\",\"bytes\":"))
            fail_msg("no %s or f32 weights in: %s", want, buf);
        const uint64_t per_layer = 64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 192 * 64;
        assert_true(num_after(buf, "\"model\":", "\"weight_bytes\":") == (2 * per_layer + 512 * 64) * 4.0);
        rc = sh(buf, sizeof buf, "%s bench -m %s --backend cpu --weights f32 --ctx-list 32 --steps 1 --warmup 0 "
                "--prefill 0 2>/dev/null", SEER_CLI, path);
        snprintf(want, sizeof want, "weights as stored there: %s: f32 100%% of W = ", types[2 * k + 1]);
        if (rc != 0 || !strstr(buf, want))
            fail_msg("rc %d, no '%s' in: %s", rc, want, buf);
    }
}

/* The extended peer file (scripts/peer-llamacpp.sh): a version, and prefill runs put beside
 * seer's of the same size (speedup = seer tok/s / peer tok/s), an error shown as such, and
 * the peer's batched prefill listed as its own. */
static void test_bench_peer_prefill(void **state) {
    char peer[1024];
    snprintf(peer, sizeof peer, "%s", tu_tmp_path("peer-prefill.json"));
    char text[2048];
    snprintf(text, sizeof text,
             "{\"peer\": \"llama.cpp\", \"version\": \"llama.cpp abc (build 1)\", \"description\": "
             "\"llama-bench -fa 1\", %s, \"points\": [{\"ctx\": 32, \"batch\": 1, \"ms_per_step\": 500}],"
             " \"prefill\": [{\"tokens\": 64, \"tok_per_s\": 10.0}, {\"tokens\": 96, \"batch\": 1, "
             "\"error\": \"oom\"}, {\"tokens\": 64, \"batch\": 3, \"tok_per_s\": 7.5}]}\n", k_peer_model);
    assert_int_equal(tu_write_file(peer, text, strlen(text)), 0);
    int rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 32 --steps 1 "
                "--warmup 0 --prefill 64,96,128 --peer %s --json 2>/dev/null", SEER_CLI, peer);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    const double tok_s = num_after(buf, "\"prefill\":[{\"tokens\":64,", "\"tok_per_s\":");
    const double sp = num_after(buf, "\"prefill\":[{\"tokens\":64,", "\"speedup\":");
    assert_true(tok_s > 0);
    assert_true(fabs(sp * 10.0 / tok_s - 1) < 1e-9);
    assert_true(num_after(buf, "\"prefill\":[{\"tokens\":64,", "\"peer\":{\"tok_per_s\":") == 10.0);
    assert_non_null(strstr(buf, "\"peer\":{\"error\":\"oom\"}},{\"tokens\":128,")); /* 96: oom */
    assert_int_equal(count(buf, "\"tokens\":128,"), 1); /* the peer has no 128: no "peer" there */
    const char *p128 = strstr(buf, "\"tokens\":128,");
    char e128[256];
    snprintf(e128, sizeof e128, "%.*s", (int)(strchr(p128, '}') - p128), p128);
    assert_null(strstr(e128, "peer"));
    assert_non_null(strstr(buf, "\"version\":\"llama.cpp abc (build 1)\""));
    assert_non_null(strstr(buf, "\"prefill\":[{\"tokens\":64,\"batch\":3,\"tok_per_s\":7.5"));
    assert_true(num_after(buf, "\"ctx\":32,", "\"peer\":{\"ms_per_step\":") == 500.0);

    rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 32 --steps 1 "
            "--warmup 0 --prefill 64,96,128 --peer %s 2>/dev/null", SEER_CLI, peer);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    const char *want[] = {"peer    llama.cpp abc (build 1)", "llama-bench -fa 1", "peer tok/s",
                          "llama.cpp alone, B=3: 8 tok/s"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(buf, want[i]))
            fail_msg("no '%s' in: %s", want[i], buf);
    int P;
    double ms, ts, tf, pts, spd;
    const char *row = strstr(buf, "\n      64 ");
    assert_non_null(row);
    assert_int_equal(sscanf(row, "%d %lf %lf %lf %lf %lfx", &P, &ms, &ts, &tf, &pts, &spd), 6);
    assert_true(pts == 10.0);
    assert_true(fabs(spd - ts / 10.0) <= 0.01 * spd + 0.01);
    row = strstr(buf, "\n      96 ");
    assert_non_null(row);
    assert_non_null(strstr(row, " oom "));
}

/* scripts/peer_llamacpp_run.py (peer-llamacpp.sh run) turns llama-bench's JSON and
 * llama-batched-bench's jsonl into a peer file seer bench takes. The two tools are stand-ins
 * here that check the flags they are given and print what the real ones print (the formats of
 * tools/llama-bench/llama-bench.cpp's json_printer and tools/batched-bench's jsonl line), so
 * the conversion is checked: ms/token = median sample / n_gen, prefill tok/s = P / median,
 * batched ms/step = t_tg / tg, an out-of-memory exit recorded as "oom". */
static void test_peer_llamacpp_run(void **state) {
    if (system("command -v python3 >/dev/null 2>&1") != 0) {
        printf("skipped: no python3\n");
        skip();
    }
    char bin[600], model[600], out[600], tool[700];
    snprintf(bin, sizeof bin, "%s", tu_tmp_path("fake-llama"));
    snprintf(model, sizeof model, "%s", tu_tmp_path("peer-model.gguf"));
    snprintf(out, sizeof out, "%s", tu_tmp_path("llama-peer.json"));
    assert_int_equal(mkdir(bin, 0700) == 0 || errno == EEXIST, 1);
    static const char bench[] =
        "#!/bin/sh\n"
        "case \" $* \" in *' -fa 1 '*) ;; *) echo 'no -fa 1' >&2; exit 3 ;; esac\n"
        "case \" $* \" in *' -o json '*) ;; *) echo 'no -o json' >&2; exit 3 ;; esac\n"
        "n=0 p=0 d=0\n"
        "while [ $# -gt 0 ]; do case $1 in -n) n=$2; shift ;; -p) p=$2; shift ;; -d) d=$2; shift ;; esac; shift; done\n"
        "echo 'llama_model_loader: loaded meta data' >&2\n"
        "if [ \"$d\" = 999 ]; then echo 'cudaMalloc failed: out of memory' >&2; exit 1; fi\n"
        "printf '[\\n  {\\n    \"build_commit\": \"abc1234\",\\n    \"build_number\": 7,\\n"
        "    \"cpu_info\": \"test cpu\",\\n    \"gpu_info\": \"\",\\n    \"model_type\": \"llama ?B Q8_0\",\\n"
        "    \"model_size\": 1000,\\n    \"n_prompt\": %d,\\n    \"n_gen\": %d,\\n    \"n_depth\": %d,\\n"
        "    \"samples_ns\": [ 4000000, 2000000, 2600000 ],\\n    \"samples_ts\": [ 1, 2, 3 ]\\n  }\\n]\\n'"
        " \"$p\" \"$n\" \"$d\"\n";
    static const char batched[] =
        "#!/bin/sh\n"
        "case \" $* \" in *' -pps -c 80 -npp 32,1 '*' --output-format jsonl '*) ;;\n"
        "  *' -kvu -c 80 -npp 32,1 '*' --output-format jsonl '*) ;; *) echo \"flags: $*\" >&2; exit 3 ;; esac\n"
        "pp=0 tg=0 pl=0\n"
        "while [ $# -gt 0 ]; do case $1 in -npp) pp=${2%%,*}; shift ;; -ntg) tg=$2; shift ;; -npl) pl=$2; shift ;; esac; shift; done\n"
        "echo 'main: n_kv_max = 80' >&2\n"
        "printf '{\"n_kv_max\": 80, \"n_batch\": 2048, \"n_ubatch\": 512, \"flash_attn\": 1, \"is_pp_shared\": 0, "
        "\"n_gpu_layers\": 0, \"n_threads\": 2, \"n_threads_batch\": 2, \"pp\": %d, \"tg\": %d, \"pl\": %d, "
        "\"n_kv\": 80, \"t_pp\": 0.5, \"speed_pp\": 128.0, \"t_tg\": 0.016, \"speed_tg\": 1000.0, "
        "\"t\": 0.516, \"speed\": 1.0}\\n' \"$pp\" \"$tg\" \"$pl\"\n";
    snprintf(tool, sizeof tool, "%s/llama-bench", bin);
    assert_int_equal(tu_write_file(tool, bench, strlen(bench)), 0);
    assert_int_equal(chmod(tool, 0700), 0);
    snprintf(tool, sizeof tool, "%s/llama-batched-bench", bin);
    assert_int_equal(tu_write_file(tool, batched, strlen(batched)), 0);
    assert_int_equal(chmod(tool, 0700), 0);
    int rc = sh(buf, sizeof buf, "%s gen-model --vocab 512 --dim 64 --layers 2 --heads 4 --kv-heads 2 "
                "--ffn 192 --dtype q8_0 -o %s", SEER_CLI, model);
    if (rc != 0)
        fail_msg("gen-model: %s", buf);
    rc = sh(buf, sizeof buf, "python3 %s/scripts/peer_llamacpp_run.py --bin %s -m %s --out %s "
            "--ctx-list 32,999 --prefill-list 64 --batched 2x32 --gen 4 --batched-gen 8",
            SEER_SOURCE_DIR, bin, model, out);
    assert_int_equal(rc, 1); /* one point failed */
    size_t n = 0;
    char *js = (char *)tu_read_file(out, &n);
    if (!js)
        fail_msg("no %s: %s", out, buf);
    /* json.dump(indent=1): the points in order, B = 1 first */
    assert_true(num_after(js, "\"ctx\": 32,", "\"ms_per_step\": ") == 0.65); /* not the mean */
    const char *e999 = strstr(js, "\"ctx\": 999,");
    assert_non_null(e999);
    assert_int_equal(strncmp(strstr(e999, "\"error\": "), "\"error\": \"oom\"", strlen("\"error\": \"oom\"")), 0);
    assert_true(fabs(num_after(js, "\"tokens\": 64,", "\"tok_per_s\": ") - 64 / 2.6e-3) < 1e-6);
    assert_true(num_after(js, "\"batch\": 2,", "\"ms_per_step\": ") == 2.0);
    /* one shared prompt copied into per-sequence streams by default: no batched prefill */
    assert_null(strstr(js, "\"tokens\": 32,"));
    assert_non_null(strstr(js, "-pps -c B*(L+8)"));
    assert_non_null(strstr(js, "\"version\": \"llama.cpp abc1234 (build 7), from llama-cpp-python 0.3.36\""));
    assert_non_null(strstr(js, "\"file_type\": \"Q8_0\""));
    assert_non_null(strstr(js, "-fa 1 -ngl 0"));
    free(js);
    /* B prompts in one unified cache: the batched run's prefill is kept too */
    char out_u[640];
    snprintf(out_u, sizeof out_u, "%s", tu_tmp_path("llama-peer-unified.json"));
    rc = sh(buf, sizeof buf, "python3 %s/scripts/peer_llamacpp_run.py --bin %s -m %s --out %s "
            "--ctx-list '' --batched 2x32 --batched-gen 8 --batched-cache unified",
            SEER_SOURCE_DIR, bin, model, out_u);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    js = (char *)tu_read_file(out_u, &n);
    assert_non_null(js);
    assert_true(num_after(js, "\"batch\": 2,", "\"ms_per_step\": ") == 2.0);
    assert_true(num_after(js, "\"tokens\": 32,", "\"tok_per_s\": ") == 128.0);
    assert_non_null(strstr(js, "-kvu -c B*(L+8)"));
    free(js);
    /* seer bench takes it: the model's shape matches, and its numbers land at their points. */
    rc = sh(buf, sizeof buf, "%s bench -m %s --backend cpu --ctx-list 32 --batch-list 1,2 --steps 1 "
            "--warmup 0 --prefill 64 --peer %s 2>/dev/null", SEER_CLI, model, out);
    if (rc != 0 || !strstr(buf, "      0.650 ") || !strstr(buf, "      2.000 ") ||
        !strstr(buf, "   24615 ") || !strstr(buf, "peer    llama.cpp abc1234"))
        fail_msg("rc %d: %s", rc, buf);
}

/* Malformed peer files: exit 1 with a message that names the file and the fault, before
 * anything is measured; never a crash. */
static void test_bench_peer_errors(void **state) {
    char peer[1024];
    snprintf(peer, sizeof peer, "%s", tu_tmp_path("bad-peer.json"));
    const char *ok_pt = "{\"ctx\": 32, \"batch\": 1, \"ms_per_step\": 2.5}";
    char other[512];
    snprintf(other, sizeof other, "%s", k_peer_model);
    memcpy(strstr(other, "\"dim\": 64"), "\"dim\": 96", strlen("\"dim\": 96"));
    struct {
        const char *text;   /* the whole file, or NULL: write_peer(model, points) */
        const char *model, *points;
        const char *msg;
    } cases[] = {
        {"{\"peer\": \"HF\", \"points\": [", NULL, NULL, "--peer"},
        {"[1, 2, 3]\n", NULL, NULL, "is not a peer file"},
        {"{\"points\": []}\n", NULL, NULL, "is not a peer file"},
        {"", NULL, NULL, "--peer"},
        {NULL, "\"model\": {\"dim\": 64}", "", "model.n_layers is missing"},
        {NULL, "\"model\": {\"dim\": \"64\", \"n_layers\": 2}", "", "model.dim is missing"},
        {NULL, k_peer_model, "{\"ctx\": 32, \"batch\": 1}", "neither"},
        {NULL, k_peer_model, "{\"ctx\": 32, \"batch\": 1, \"ms_per_step\": \"fast\"}", "neither"},
        {NULL, k_peer_model, "{\"ctx\": 32, \"batch\": 1, \"ms_per_step\": -3}", "neither"},
        {NULL, k_peer_model, "{\"ctx\": -5, \"batch\": 1, \"ms_per_step\": 1}", "positive integers"},
        {NULL, k_peer_model, "{\"ctx\": 32.5, \"batch\": 1, \"ms_per_step\": 1}", "positive integers"},
        {NULL, k_peer_model, "7", "positive integers"},
        {NULL, k_peer_model, "{\"ctx\": 32, \"batch\": 1, \"ms_per_step\": 2.5}, "
                            "{\"ctx\": 32, \"batch\": 1, \"error\": \"oom\"}", "appears twice"},
        {NULL, other, "", "ran another shape: D 96"},
        {NULL, k_peer_model, "], \"prefill\": {\"tokens\": 64}, \"x\": [", "\"prefill\" must be an array"},
        {NULL, k_peer_model, "], \"prefill\": [{\"tok_per_s\": 5}", "prefill[0]: \"tokens\""},
        {NULL, k_peer_model, "], \"prefill\": [{\"tokens\": 64, \"batch\": 0, \"tok_per_s\": 5}",
         "prefill[0]: \"tokens\""},
        {NULL, k_peer_model, "], \"prefill\": [{\"tokens\": 64, \"tok_per_s\": -5}", "neither a \"tok_per_s\""},
        {NULL, k_peer_model, "], \"prefill\": [{\"tokens\": 64, \"tok_per_s\": 5}, "
                            "{\"tokens\": 64, \"batch\": 1, \"error\": \"oom\"}", "appears twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (cases[i].text)
            assert_int_equal(tu_write_file(peer, cases[i].text, strlen(cases[i].text)), 0);
        else
            write_peer(peer, cases[i].model, cases[i].points);
        int rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 32 --steps 1 "
                    "--prefill 0 --peer %s", SEER_CLI, peer);
        if (rc != 1 || !strstr(buf, cases[i].msg) || !strstr(buf, peer) || strstr(buf, "plain decode"))
            fail_msg("case %zu: rc %d (want 1 and '%s'), output: %s", i, rc, cases[i].msg, buf);
        rc = sh(buf, sizeof buf, "%s bench --replot /nonexistent.json --plot /nonexistent.png --peer %s",
                SEER_CLI, peer);
        assert_int_equal(rc, 1);
    }
    int rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --peer /nonexistent-peer.json",
                SEER_CLI);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(buf, "/nonexistent-peer.json"));
    /* A good file is still good after all that (the cases above failed for their own fault). */
    write_peer(peer, k_peer_model, ok_pt);
    rc = sh(buf, sizeof buf, "%s bench --synthetic tiny --backend cpu --ctx-list 32 --steps 1 "
            "--prefill 0 --peer %s", SEER_CLI, peer);
    if (rc != 0 || !strstr(buf, "      2.500 "))
        fail_msg("rc %d: %s", rc, buf);
}

/* ---- the GPU ----------------------------------------------------------------------------- */

static void test_gpu_matches_cpu(void **state) {
#ifdef SEER_HAVE_CUDA
    if (!seer_backend_cuda_available()) {
        printf("skipped: no CUDA device\n");
        skip();
    }
    const char *shapes[] = {"tiny", "tiny-qwen2"};
    for (int k = 0; k < 2; k++) {
        seer_model *mc = synth(shapes[k], SEER_BACKEND_CPU, 5), *mg = synth(shapes[k], SEER_BACKEND_CUDA, 5);
        const int V = mc->info.n_vocab, kvd = mc->info.n_kv_heads * mc->info.head_dim;
        float *lc = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V);
        float *kc = malloc(sizeof(float) * 70 * kvd), *kg = malloc(sizeof(float) * 70 * kvd);
        seer_context *cc = mkctx(mc, 256, 1, 16, 0), *cg = mkctx(mg, 256, 1, 16, 0);
        seer_seq_id a, b;
        ASSERT_OK(seer_seq_new(cc, &a));
        ASSERT_OK(seer_seq_new(cg, &b));
        ASSERT_OK(seer_seq_fill_synthetic(cc, a, 37, 9));
        ASSERT_OK(seer_seq_fill_synthetic(cg, b, 37, 9));
        ASSERT_OK(seer_seq_fill_synthetic(cc, a, 33, 10));
        ASSERT_OK(seer_seq_fill_synthetic(cg, b, 33, 10));
        ASSERT_OK(seer_context_read_kv(cc, a, 1, 0, 0, 70, kc));
        ASSERT_OK(seer_context_read_kv(cg, b, 1, 0, 0, 70, kg));
        double kerr = 0;
        for (int i = 0; i < 70 * kvd; i++)
            kerr = fmax(kerr, fabs(kc[i] - kg[i]) / fmax(fabs(kc[i]), 1e-3));
        printf("bench_gpu: %s kv fill max rel diff %.2e\n", shapes[k], kerr);
        assert_true(kerr <= 1.0 / 256); /* bf16 rounding */
        decode_one(cc, a, 300, lc);
        decode_one(cg, b, 300, lg);
        double mx = 0, d = 0;
        for (int i = 0; i < V; i++) {
            mx = fmax(mx, fabs(lc[i]));
            d = fmax(d, fabs(lc[i] - lg[i]));
        }
        printf("bench_gpu: %s logits max |cuda - cpu| / max |cpu| = %.2e\n", shapes[k], d / mx);
        assert_true(d <= 3e-2 * mx);
        seer_model_footprint fp;
        seer_model_get_footprint(mg, &fp);
        assert_int_equal(fp.weight_elem_bytes, 2);
        assert_int_equal(fp.kv_elem_bytes, 2);
        double bw = 0;
        ASSERT_OK(seer_model_measure_bandwidth(mg, &bw));
        printf("bench_gpu: copy bandwidth %.3f TB/s\n", bw * 1e-12);
        assert_true(bw > 1e10);
        ASSERT_OK(seer_model_sync(mg));
        seer_context_free(cc), seer_context_free(cg);
        seer_model_free(mc), seer_model_free(mg);
        free(lc), free(lg), free(kc), free(kg);
    }
#else
    printf("skipped: no CUDA device (built without CUDA)\n");
    skip();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets_and_footprint),
        cmocka_unit_test(test_weights_and_determinism),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_fill),
        cmocka_unit_test(test_bandwidth_and_sync),
        cmocka_unit_test(test_bench_json),
        cmocka_unit_test(test_bench_json_out_and_replot),
        cmocka_unit_test(test_bench_table_and_errors),
        cmocka_unit_test(test_bench_peer),
        cmocka_unit_test(test_bench_peer_errors),
        cmocka_unit_test(test_bench_gguf_weight_types),
        cmocka_unit_test(test_bench_peer_prefill),
        cmocka_unit_test(test_peer_llamacpp_run),
        cmocka_unit_test(test_gpu_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
