/*
 * test_arch.c: the architecture descriptors and the blocks that families beyond Llama use, on
 * the CPU reference.
 *
 * The registry: every family is found by its name, lists each layer role at most once, and
 * the Llama families use none of the later blocks; the fused roles' parts tile their rows;
 * Gemma 2's and Gemma 3's window patterns. The blocks: geglu against the tanh-GELU formula in
 * double, scale, softcap, and sliding-window attention against attention computed by hand (in
 * double) over the keys at positions p - window < k <= p, with cached slots, several new
 * tokens, a sparse view whose window must cut it, and soft-capped scores. A backend without a
 * block a family needs is refused at load (SEER_ERR_UNSUPPORTED), as the tensor-parallel
 * backend is for Gemma 2 and 3, Qwen3 and Phi-3 (test_tp.c). The synthetic builder
 * makes and decodes every new family. A
 * Gemma 3 file from gen-model: loads, decodes, gives the same logits token by token as in one
 * call (bit-identical), the same as a window-less copy while every position is inside the
 * window and different ones past it.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *rand_x(size_t n, uint64_t *rng) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(tu_rand_u64(rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    return x;
}

static void test_registry(void **state) {
    (void)state;
    const char *names[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"};
    for (int i = 0; i < 6; i++) {
        const seer_arch_desc *d = seer_arch_find(names[i]);
        assert_non_null(d);
        assert_string_equal(d->name, names[i]);
        int seen[SEER_LT_COUNT] = {0};
        for (int t = 0; t < d->n_tensors; t++) {
            assert_true((unsigned)d->tensors[t].role < SEER_LT_COUNT);
            assert_int_equal(seen[d->tensors[t].role]++, 0);
        }
    }
    assert_null(seer_arch_find("gpt-neox"));
    /* Qwen3: per-head norms, no biases; Phi-3: fused tensors whose parts tile their rows */
    assert_true(seer_arch_has(&seer_arch_qwen3, SEER_LT_Q_NORM, NULL) && !seer_arch_has(&seer_arch_qwen3, SEER_LT_BQ, NULL));
    assert_true(seer_arch_has(&seer_arch_phi3, SEER_LT_QKV, NULL) && !seer_arch_has(&seer_arch_phi3, SEER_LT_Q, NULL));
    seer_layer_tensor parts[3];
    assert_int_equal(seer_arch_fused_parts(SEER_LT_QKV, parts), 3);
    assert_int_equal(seer_arch_fused_parts(SEER_LT_GATE_UP, parts), 2);
    assert_int_equal(seer_arch_fused_parts(SEER_LT_Q, parts), 0);
    int r, c, sum = 0;
    seer_arch_shape(SEER_LT_QKV, 64, 96, 64, 32, 16, &r, &c);
    assert_int_equal(r, 64 + 2 * 32);
    seer_arch_shape(SEER_LT_GATE_UP, 64, 96, 64, 32, 16, &r, &c);
    assert_int_equal(r, 2 * 96);
    for (int k = 0; k < seer_arch_fused_parts(SEER_LT_GATE_UP, parts); k++) {
        int pr, pc;
        seer_arch_shape(parts[k], 64, 96, 64, 32, 16, &pr, &pc);
        sum += pr;
        assert_int_equal(pc, c);
    }
    assert_int_equal(sum, r);
    assert_null(seer_arch_find(NULL));
    for (int i = 0; i < 2; i++) {
        const seer_arch_desc *d = seer_arch_find(names[i]);
        assert_false(d->embed_scale);
        assert_int_equal(d->act, SEER_ACT_SILU);
        assert_false(seer_arch_has(d, SEER_LT_Q_NORM, NULL) || seer_arch_has(d, SEER_LT_FFN_POST_NORM, NULL));
    }
    /* Gemma 2's pattern: every other layer windowed, the first one */
    seer_arch_hparams hp;
    seer_arch_defaults(&seer_arch_gemma2, &hp);
    assert_int_equal(hp.v[SEER_HP_WINDOW], 4096);
    for (int l = 0; l < 8; l++)
        assert_int_equal(seer_arch_layer_windowed(&hp, l), l % 2 == 0);
    /* Gemma 3's pattern: five windowed layers, then a global one */
    seer_arch_defaults(&seer_arch_gemma3, &hp);
    assert_false(seer_arch_layer_windowed(&hp, 0)); /* no window by default */
    hp.v[SEER_HP_WINDOW] = 512;
    for (int l = 0; l < 18; l++)
        assert_int_equal(seer_arch_layer_windowed(&hp, l), l % 6 != 5);
}

static void test_geglu_scale(void **state) {
    (void)state;
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(2, &be));
    assert_non_null(be->ops->geglu);
    assert_non_null(be->ops->scale);
    assert_true(be->ops->attn_window);
    enum { N = 100003 }; /* over the threading threshold, not a multiple of anything */
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        g[i] = -12.f + 24.f * (float)i / N;
        u[i] = 0.5f + (float)(i % 7) / 7.f;
    }
    ASSERT_OK(be->ops->geglu(be, y, g, u, N));
    double worst = 0;
    for (int i = 0; i < N; i++) {
        const double x = g[i];
        const double ref = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
        const double d = fabs(ref - y[i]) / (fabs(ref) + 1);
        worst = d > worst ? d : worst;
    }
    printf("geglu: max error relative to 1 + |y| %.2e\n", worst);
    assert_true(worst < 1e-5);
    memcpy(y, g, sizeof(float) * N);
    ASSERT_OK(be->ops->scale(be, y, 25.298221f, N));
    for (int i = 0; i < N; i++)
        assert_true(y[i] == g[i] * 25.298221f);
    memcpy(y, g, sizeof(float) * N);
    ASSERT_OK(be->ops->softcap(be, y, 5.f, N));
    worst = 0;
    for (int i = 0; i < N; i++)
        worst = fmax(worst, fabs(5.0 * tanh(g[i] / 5.0) - y[i]));
    printf("softcap: max error %.2e\n", worst);
    assert_true(worst < 1e-5);
    free(g), free(u), free(y);
    be->ops->free(be);
}

/* Attention by hand over the slots in [lo, hi] of a layer's K/V rows k, v [slots][Hkv*Dh]. */
static void attn_ref(double *out, const float *q, const float *k, const float *v, int H, int Hkv, int Dh,
                     const int *slots, int n, float scale, float cap) {
    for (int h = 0; h < H; h++) {
        const int kvh = h / (H / Hkv);
        double mx = -1e300, sum = 0, *w = malloc(sizeof(double) * n);
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int e = 0; e < Dh; e++)
                s += (double)q[h * Dh + e] * k[(size_t)slots[j] * Hkv * Dh + kvh * Dh + e];
            w[j] = s * scale;
            if (cap > 0)
                w[j] = cap * tanh(w[j] / cap);
            mx = w[j] > mx ? w[j] : mx;
        }
        for (int j = 0; j < n; j++)
            sum += (w[j] = exp(w[j] - mx));
        for (int e = 0; e < Dh; e++) {
            double o = 0;
            for (int j = 0; j < n; j++)
                o += w[j] / sum * v[(size_t)slots[j] * Hkv * Dh + kvh * Dh + e];
            out[h * Dh + e] = o;
        }
        free(w);
    }
}

static void test_window_attention(void **state) {
    (void)state;
    enum { H = 4, Hkv = 2, Dh = 16, PS = 8, LEN0 = 37, T = 6, W = 9 };
    const int kvd = Hkv * Dh, n_slots = LEN0 + T, mp = (n_slots + PS - 1) / PS;
    seer_kv_geom g = {.n_pages = mp, .page_size = PS, .n_layers = 1, .n_kv_heads = Hkv, .head_dim = Dh};
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(2, &be));
    void *kv;
    int committed;
    ASSERT_OK(be->ops->kv_alloc(be, &g, &kv));
    ASSERT_OK(be->ops->kv_reserve(be, kv, &g, mp, &committed));
    uint64_t rng = 5;
    float *k = rand_x((size_t)n_slots * kvd, &rng), *v = rand_x((size_t)n_slots * kvd, &rng);
    float *q = rand_x((size_t)T * H * Dh, &rng);
    int32_t pages[8], pg[64], row[64];
    for (int i = 0; i < mp; i++)
        pages[i] = mp - 1 - i; /* not in order */
    for (int s = 0; s < n_slots; s++)
        pg[s] = pages[s / PS], row[s] = s % PS;
    ASSERT_OK(be->ops->kv_store(be, kv, &g, 0, k, v, pg, row, n_slots));
    int32_t tok_seq[T], tok_slot[T], seq_toks[T], pos[T], off[2] = {0, T}, len0 = LEN0;
    for (int t = 0; t < T; t++)
        tok_seq[t] = 0, tok_slot[t] = LEN0 + t, seq_toks[t] = t, pos[t] = LEN0 + t;
    /* a view of slots 3, 20, 30, 33 and a tail from 35: the window cuts some of it */
    const int32_t view_idx[] = {3, 20, 30, 33};
    const seer_attn_view view = {.idx = view_idx, .n = 4, .n_layers_view = 1, .n_heads_view = 1, .tail_start = 35};
    for (int with_view = 0; with_view < 3; with_view++) {
        const seer_attn_view *views[1] = {with_view == 1 ? &view : NULL};
        const float cap = with_view == 2 ? 0.5f : 0.f; /* soft-capping bends these scores */
        seer_attn_batch ab = {.T = T, .n_heads = H, .n_kv_heads = Hkv, .head_dim = Dh, .scale = 0.3f,
                              .page_size = PS, .n_seq = 1, .max_pages = mp, .seq_pages = pages,
                              .seq_len0 = &len0, .seq_tok_off = off, .seq_toks = seq_toks,
                              .seq_view = views, .tok_seq = tok_seq, .tok_slot = tok_slot,
                              .window = W, .tok_pos = pos, .softcap = cap};
        float out[T * H * Dh];
        ASSERT_OK(be->ops->attention(be, out, q, kv, &g, 0, &ab));
        double worst = 0;
        for (int t = 0; t < T; t++) {
            int slots[64], n = 0;
            for (int s = 0; s <= LEN0 + t; s++) {
                bool in_view = with_view != 1 || s >= LEN0 || s >= 35 || s == 3 || s == 20 || s == 30 || s == 33;
                if (in_view && pos[t] - s < W)
                    slots[n++] = s;
            }
            double ref[H * Dh];
            attn_ref(ref, q + (size_t)t * H * Dh, k, v, H, Hkv, Dh, slots, n, 0.3f, cap);
            for (int e = 0; e < H * Dh; e++) {
                const double d = fabs(ref[e] - out[t * H * Dh + e]);
                worst = d > worst ? d : worst;
            }
        }
        printf("window attention (view %d, softcap %g): max |diff| %.2e\n", with_view == 1, cap, worst);
        assert_true(worst < 1e-5);
    }
    free(k), free(v), free(q);
    be->ops->kv_free(be, kv);
    be->ops->free(be);
}

static const char *gen_gemma3(const char *name, int window) {
    static char path[2][512];
    const int i = window ? 1 : 0;
    snprintf(path[i], sizeof path[i], "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = "gemma3";
    p.n_vocab = 300;
    p.dim = 64;
    p.n_layers = 6;
    p.n_heads = 4;
    p.n_kv_heads = 1;
    p.head_dim = 32;
    p.ffn_dim = 96;
    p.ctx = 512;
    p.seed = 11;
    p.scale = 0.3f;
    p.tied = true;
    p.window = window;
    ASSERT_OK(seer_gen_model(&p, path[i]));
    return path[i];
}

static seer_context *context(seer_model *m) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = 1;
    cp.n_batch_max = 64;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    return c;
}

/* logits [n][V] of toks decoded one call each (one = true) or in one call */
static void run(seer_model *m, const int32_t *toks, int n, bool one, float *out) {
    seer_context *c = context(m);
    seer_seq_id seq;
    ASSERT_OK(seer_seq_new(c, &seq));
    const int V = seer_n_vocab(m);
    if (one) {
        for (int i = 0; i < n; i++) {
            int32_t pos = i;
            uint8_t y = 1;
            seer_batch b = {.n_tokens = 1, .token = &toks[i], .seq = &seq, .pos = &pos, .logits = &y};
            ASSERT_OK(seer_decode(c, &b, out + (size_t)i * V));
        }
    } else {
        int32_t pos[64];
        seer_seq_id sq[64];
        uint8_t y[64];
        for (int i = 0; i < n; i++)
            pos[i] = i, sq[i] = seq, y[i] = 1;
        seer_batch b = {.n_tokens = n, .token = toks, .seq = sq, .pos = pos, .logits = y};
        ASSERT_OK(seer_decode(c, &b, out));
    }
    seer_context_free(c);
}

static void test_gemma3_model(void **state) {
    (void)state;
    enum { N = 40, W = 8 };
    const char *pw = gen_gemma3("arch-gemma3-w.gguf", W), *p0 = gen_gemma3("arch-gemma3.gguf", 0);
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    seer_model *mw, *m0;
    ASSERT_OK(seer_model_load(pw, mp, &mw));
    ASSERT_OK(seer_model_load(p0, mp, &m0));
    seer_model_info in;
    seer_model_get_info(mw, &in);
    assert_string_equal(in.arch, "gemma3");
    assert_int_equal(in.rope_neox, 1);
    assert_int_equal(mw->window, W);
    assert_non_null(mw->inv_freq_local);
    assert_non_null(mw->layers[0].q_norm);
    assert_non_null(mw->layers[0].ffn_post_norm);
    assert_int_equal(m0->window, 0);
    const int V = seer_n_vocab(mw);
    int32_t toks[N];
    for (int i = 0; i < N; i++)
        toks[i] = 3 + (i * 37) % (V - 3);
    float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V), *c = malloc(sizeof(float) * N * V);
    run(mw, toks, N, true, a);
    run(mw, toks, N, false, b);
    assert_memory_equal(a, b, sizeof(float) * N * V);
    /* window-less: the same weights, and the same RoPE on the global layers; the windowed
     * layers differ in their base (10000 against rope.freq_base), so only position 0 (no
     * rotation) agrees exactly: check that, and that the window changes later positions */
    run(m0, toks, N, true, c);
    assert_memory_equal(a, c, sizeof(float) * V);
    double far = 0;
    for (size_t i = (size_t)(W + 2) * V; i < (size_t)N * V; i++)
        far = fmax(far, fabs((double)a[i] - c[i]));
    assert_true(far > 1e-3);
    for (int i = 0; i < N * V; i++)
        assert_true(isfinite(a[i]));
    free(a), free(b), free(c);
    seer_model_free(mw);
    seer_model_free(m0);
}

/* A backend without a block the family needs is refused at load: here the CPU's table with
 * geglu, then attn_window, taken away (the tensor-parallel backend lacks both). */
static seer_backend_ops g_ops;
static void test_refused_without_block(void **state) {
    (void)state;
    const char *pw = gen_gemma3("arch-gemma3-w.gguf", 8);
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    seer_model *m;
    ASSERT_OK(seer_model_load(pw, mp, &m));
    const seer_backend_ops *keep = m->be->ops;
    g_ops = *keep;
    m->be->ops = &g_ops;
    ASSERT_OK(seer_model_check_blocks(m));
    g_ops.geglu = NULL;
    assert_int_equal(seer_model_check_blocks(m), SEER_ERR_UNSUPPORTED);
    printf("refused: %s\n", seer_last_error());
    assert_non_null(strstr(seer_last_error(), "GeGLU"));
    g_ops = *keep;
    g_ops.attn_window = false;
    assert_int_equal(seer_model_check_blocks(m), SEER_ERR_UNSUPPORTED);
    assert_non_null(strstr(seer_last_error(), "sliding-window"));
    g_ops = *keep;
    g_ops.qk_norm = false;
    assert_int_equal(seer_model_check_blocks(m), SEER_ERR_UNSUPPORTED);
    assert_non_null(strstr(seer_last_error(), "q/k RMSNorm"));
    m->be->ops = keep;
    seer_model_free(m);
    /* Gemma 2's soft-capping, Phi-3's fused tensors (the tensor-parallel backend has
     * neither) */
    const char *fams[2] = {"gemma2", "phi3"};
    for (int f = 0; f < 2; f++) {
        seer_gen_params p = seer_gen_default_params();
        p.arch = fams[f];
        p.n_vocab = 300;
        const char *path = tu_tmp_path(f ? "arch-phi3.gguf" : "arch-gemma2.gguf");
        ASSERT_OK(seer_gen_model(&p, path));
        ASSERT_OK(seer_model_load(path, mp, &m));
        keep = m->be->ops;
        g_ops = *keep;
        m->be->ops = &g_ops;
        ASSERT_OK(seer_model_check_blocks(m));
        if (f == 0) {
            g_ops.attn_softcap = false;
            assert_int_equal(seer_model_check_blocks(m), SEER_ERR_UNSUPPORTED);
            assert_non_null(strstr(seer_last_error(), "attention-logit soft-capping"));
            g_ops = *keep;
            g_ops.softcap = NULL;
            assert_int_equal(seer_model_check_blocks(m), SEER_ERR_UNSUPPORTED);
            assert_non_null(strstr(seer_last_error(), "final-logit soft-capping"));
        } else {
            g_ops.weight_rows = NULL;
            assert_int_equal(seer_model_check_blocks(m), SEER_ERR_UNSUPPORTED);
            assert_non_null(strstr(seer_last_error(), "fused"));
        }
        m->be->ops = keep;
        seer_model_free(m);
    }
}

/* The synthetic builder makes every family (a fused role as its parts) and it decodes. */
static void test_synthetic_families(void **state) {
    (void)state;
    const char *fams[] = {"qwen3", "gemma2", "phi3"};
    for (int f = 0; f < 3; f++) {
        seer_gen_params p = seer_gen_default_params();
        p.arch = fams[f];
        p.n_vocab = 300;
        seer_model_params mp = seer_model_default_params();
        mp.backend = SEER_BACKEND_CPU;
        mp.n_threads = 2;
        seer_model *m = NULL;
        ASSERT_OK(seer_model_synthetic(NULL, &p, mp, &m));
        assert_non_null(m->layers[0].wq.data);
        assert_non_null(m->layers[0].w_up.data);
        const int V = seer_n_vocab(m);
        const int32_t toks[4] = {1, 100, 200, 50};
        float *a = malloc(sizeof(float) * 4 * V);
        run(m, toks, 4, false, a);
        for (int i = 0; i < 4 * V; i++)
            assert_true(isfinite(a[i]));
        free(a);
        seer_model_free(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_geglu_scale),
        cmocka_unit_test(test_window_attention),
        cmocka_unit_test(test_gemma3_model),
        cmocka_unit_test(test_refused_without_block),
        cmocka_unit_test(test_synthetic_families),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
