/*
 * synthetic.c: what benchmarks at real shapes need from the library: models with random
 * weights generated directly on the backend (named presets of real models' shapes, or any
 * shape of a registered family, whose descriptor says which tensors a layer has), random KV appended to a sequence without computing it, and the
 * numbers the decode floor is computed from (bytes of the weights and of a token's KV, the
 * device's copy bandwidth, a synchronisation for timing).
 * Not for: anything whose output should mean something: these models compute noise, and
 * speculation on them accepts nothing unless the acceptance is synthetic (seer_spec_params).
 */
#include "seer_bench.h"
#include "backend/synth_hash.h"
#include "model/model.h"
#include "parallel/tp.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- presets ------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *arch;
    int n_vocab, dim, n_layers, n_heads, n_kv_heads, ffn_dim, ctx;
    float rope_base, norm_eps;
    bool tied;
    bool llama3_rope; /* Llama 3.1's RoPE scaling: factor 8, low 1, high 4, original 8192 */
    int head_dim;     /* 0: dim / n_heads */
    int window;       /* a family with windowed layers: its size (0: the family's default) */
} shape_preset;

/* The published configurations of these models; the small ones are for tests and CPU runs.
 * Scaled RoPE other than Llama 3.1's (Qwen3's YaRN, Gemma 3's linear global factor, Phi-3's
 * LongRoPE tables) is left out: it changes the frequencies, not what a step reads or does. */
static const shape_preset k_presets[] = {
    {"llama-3.1-8b", "llama", 128256, 4096, 32, 32, 8, 14336, 131072, 500000.f, 1e-5f, false, true, 0, 0},
    {"llama-3.1-70b", "llama", 128256, 8192, 80, 64, 8, 28672, 131072, 500000.f, 1e-5f, false, true, 0, 0},
    {"llama-2-7b", "llama", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.f, 1e-5f, false, false, 0, 0},
    {"qwen2.5-7b", "qwen2", 152064, 3584, 28, 28, 4, 18944, 32768, 1000000.f, 1e-6f, false, false, 0, 0},
    {"llama-3.2-1b", "llama", 128256, 2048, 16, 32, 8, 8192, 131072, 500000.f, 1e-5f, true, true, 0, 0},
    {"small", "llama", 4096, 256, 4, 8, 2, 704, 32768, 10000.f, 1e-5f, false, false, 0, 0},
    {"tiny", "llama", 512, 64, 2, 4, 2, 192, 4096, 10000.f, 1e-5f, false, false, 0, 0},
    {"tiny-qwen2", "qwen2", 512, 64, 2, 4, 2, 160, 4096, 1000000.f, 1e-6f, true, false, 0, 0},
    {"qwen3-8b", "qwen3", 151936, 4096, 36, 32, 8, 12288, 40960, 1000000.f, 1e-6f, false, false, 0, 0},
    {"gemma-3-4b", "gemma3", 262208, 2560, 34, 8, 4, 10240, 131072, 1000000.f, 1e-6f, true, false, 256, 1024},
    {"gemma-3-12b", "gemma3", 262208, 3840, 48, 16, 8, 15360, 131072, 1000000.f, 1e-6f, true, false, 256, 1024},
    {"mistral-7b", "llama", 32768, 4096, 32, 32, 8, 14336, 32768, 1000000.f, 1e-5f, false, false, 0, 0},
    {"phi-3-mini-128k", "phi3", 32064, 3072, 32, 32, 32, 8192, 131072, 10000.f, 1e-5f, false, false, 0, 0},
};

#define N_PRESETS ((int)(sizeof k_presets / sizeof *k_presets))

const char *const *seer_synthetic_shapes(void) {
    static const char *names[N_PRESETS + 1];
    for (int i = 0; i < N_PRESETS; i++)
        names[i] = k_presets[i].name;
    names[N_PRESETS] = NULL;
    return names;
}

static seer_status check_shape(const shape_preset *p, float scale) {
#define BAD(...) return seer_err(SEER_ERR_INVALID_ARG, "synthetic model: " __VA_ARGS__)
    if (!seer_arch_find(p->arch)) {
        char list[256];
        seer_arch_list(list, sizeof list);
        BAD("unknown architecture %s (%s)", p->arch ? p->arch : "(null)", list);
    }
    if (p->n_vocab < 259 + 1 || p->n_vocab > (1 << 22))
        BAD("n_vocab %d out of range [260, %d] (3 specials and 256 byte tokens come first)",
            p->n_vocab, 1 << 22);
    if (p->dim < 2 || p->dim > (1 << 16) || p->n_layers < 1 || p->n_layers > 1024 ||
        p->ffn_dim < 1 || p->ffn_dim > (1 << 18))
        BAD("dim %d, n_layers %d or ffn_dim %d out of range", p->dim, p->n_layers, p->ffn_dim);
    if (p->n_heads < 1 || p->n_kv_heads < 1 || p->n_heads > 1024 || p->n_heads % p->n_kv_heads)
        BAD("n_kv_heads %d must divide n_heads %d", p->n_kv_heads, p->n_heads);
    if (!p->head_dim && (p->dim % p->n_heads || (p->dim / p->n_heads) % 2))
        BAD("head_dim = dim %d / n_heads %d must be a whole even number", p->dim, p->n_heads);
    if (p->head_dim < 0 || p->head_dim % 2 || p->head_dim > 1024)
        BAD("head_dim %d must be even, at most 1024", p->head_dim);
    if (p->ctx < 1 || p->ctx > (1 << 24))
        BAD("ctx %d out of range", p->ctx);
    if (!(p->rope_base > 0) || !isfinite(p->rope_base) || !(p->norm_eps > 0) || !isfinite(p->norm_eps))
        BAD("rope_base %g and norm_eps %g must be positive", (double)p->rope_base, (double)p->norm_eps);
    if (!(scale >= 0) || !isfinite(scale))
        BAD("scale %g must be >= 0", (double)scale);
#undef BAD
    return SEER_OK;
}

/* ---- vocabulary ---------------------------------------------------------------------- */

/* <unk>, <s>, </s>, the 256 byte-fallback tokens, then filler pieces "▁w<i>": enough for
 * tokenising and detokenising to work (every text encodes through byte fallback). */
static seer_status synthetic_vocab(int V, seer_vocab **out) {
    char **texts = seer_calloc_array((size_t)V, sizeof *texts);
    int32_t *types = seer_malloc_array((size_t)V, sizeof *types);
    float *scores = seer_malloc_array((size_t)V, sizeof *scores);
    char *store = seer_malloc_array((size_t)V, 16);
    seer_status s = SEER_OK;
    if (!texts || !types || !scores || !store)
        s = seer_err(SEER_ERR_OOM, "out of memory for a vocabulary of %d tokens", V);
    for (int i = 0; s == SEER_OK && i < V; i++) {
        char *t = store + (size_t)i * 16;
        if (i == 0)
            snprintf(t, 16, "<unk>");
        else if (i == 1)
            snprintf(t, 16, "<s>");
        else if (i == 2)
            snprintf(t, 16, "</s>");
        else if (i < 259)
            snprintf(t, 16, "<0x%02X>", i - 3);
        else
            snprintf(t, 16, "\xe2\x96\x81w%d", i - 259);
        texts[i] = t;
        types[i] = i == 0 ? SEER_TOKEN_UNKNOWN : i < 3 ? SEER_TOKEN_CONTROL
                 : i < 259 ? SEER_TOKEN_BYTE : SEER_TOKEN_NORMAL;
        scores[i] = i < 259 ? 0.f : -(float)(i - 259);
    }
    if (s == SEER_OK) {
        seer_vocab_desc d = {
            .kind = SEER_VOCAB_SPM, .model_name = "llama", .n = V, .texts = (const char *const *)texts,
            .scores = scores, .types = types, .bos = 1, .eos = 2, .unk = 0, .pad = -1,
            .add_bos = true, .add_space_prefix = true,
        };
        s = seer_vocab_from_arrays(&d, out);
    }
    free(texts), free(types), free(scores), free(store);
    return s;
}

/* ---- weights ------------------------------------------------------------------------- */

/* Sub-streams of the seed: one per tensor (a layer's: seer_layer_tensor_info.synth_id). */
#define T_PER_LAYER 12
#define T_EMBD ((uint64_t)1 << 32)
#define T_OUTPUT (T_EMBD + 1)
#define T_OUT_NORM (T_EMBD + 2)

typedef struct {
    seer_model *m;
    uint64_t seed;
    float scale; /* 0: 1/sqrt(input dim) of each weight */
} gen_ctx;

/* A random weight, divided as split says where the backend divides weights. */
static seer_status rand_weight_split(gen_ctx *g, uint64_t id, int rows, int cols, seer_weight_split split,
                                     seer_weight *w) {
    seer_backend *be = g->m->be;
    float sc = g->scale > 0 ? g->scale : 1.f / sqrtf((float)cols);
    g->m->info.n_params += (uint64_t)rows * cols;
    if (be->ops->weight_random_split)
        return be->ops->weight_random_split(be, rows, cols, seer_synth_seed(g->seed, id), sc, split, w);
    return be->ops->weight_random(be, rows, cols, seer_synth_seed(g->seed, id), sc, w);
}

static seer_status rand_weight(gen_ctx *g, uint64_t id, int rows, int cols, seer_weight *w) {
    return rand_weight_split(g, id, rows, cols, (seer_weight_split){SEER_SPLIT_NONE, 1}, w);
}

/* A small f32 vector: base + uniform noise of deviation dev, made on the host (D floats). */
static seer_status rand_vec(gen_ctx *g, uint64_t id, int n, float base, float dev, float **out) {
    seer_backend *be = g->m->be;
    float *host = seer_malloc_array((size_t)n, sizeof *host);
    if (!host)
        return seer_err(SEER_ERR_OOM, "out of memory");
    const uint64_t sd = seer_synth_seed(g->seed, id);
    const float mul = seer_synth_mul(dev);
    for (int i = 0; i < n; i++)
        host[i] = base + seer_synth_value(sd, (uint64_t)i, mul);
    seer_status s = be->ops->alloc(be, (size_t)n * sizeof(float), (void **)out);
    if (s == SEER_OK)
        s = be->ops->upload(be, *out, host, (size_t)n * sizeof(float));
    free(host);
    g->m->info.n_params += (uint64_t)n;
    return s;
}

static seer_status make_weights(gen_ctx *g) {
    seer_model *m = g->m;
    const seer_model_info *in = &m->info;
    const int D = in->dim, V = in->n_vocab;
    /* Embedding rows go straight into the residual stream: unit-scale entries would swamp
     * the first layers, so the table gets the linear weights' scale. */
    const seer_weight_split vocab = {SEER_SPLIT_VOCAB, 1};
    SEER_TRY(rand_weight(g, T_EMBD, V, D, &m->tok_embd));
    SEER_TRY(rand_vec(g, T_OUT_NORM, D, 1.f, 0.02f, &m->output_norm));
    if (in->tied_output && !m->be->ops->weight_random_split) {
        m->output = m->tok_embd;
        m->output.owned = false;
    } else {
        /* tied on a backend that divides the LM head: a divided table of its own (random
         * either way: these models are for timing) */
        SEER_TRY(rand_weight_split(g, in->tied_output ? T_EMBD : T_OUTPUT, V, D, vocab, &m->output));
        if (in->tied_output)
            m->info.n_params -= (uint64_t)V * D;
    }
    m->layers = seer_calloc_array((size_t)in->n_layers, sizeof *m->layers);
    if (!m->layers)
        return seer_err(SEER_ERR_OOM, "out of memory");
    return SEER_OK;
}

/* Layer l's weights, generated where they live. */
static seer_status make_layer(gen_ctx *g, int l) {
    seer_model *m = g->m;
    const seer_model_info *in = &m->info;
    const int D = in->dim, F = in->ffn_dim;
    const int qd = in->n_heads * in->head_dim, kvd = in->n_kv_heads * in->head_dim;
    const int Dh = in->head_dim;
    const seer_arch_desc *d = m->desc;
    {
        seer_layer *L = &m->layers[l];
        const uint64_t b = (uint64_t)l * T_PER_LAYER;
        for (int i = 0; i < d->n_tensors; i++) {
            const seer_arch_tensor *t = &d->tensors[i];
            const seer_layer_tensor_info *ti = seer_layer_tensor_get(t->role);
            if (!t->required)
                continue;
            int rows, cols;
            seer_arch_shape(t->role, D, F, qd, kvd, Dh, &rows, &cols);
            if (ti->vec) {
                SEER_TRY(rand_vec(g, b + ti->synth_id, cols, ti->synth_base, 0.02f, seer_layer_vec(L, t->role)));
                continue;
            }
            /* a fused role is generated as its parts (the forward pass sees only those) */
            seer_layer_tensor parts[3] = {t->role};
            const int np = seer_arch_fused_parts(t->role, parts);
            for (int k = 0; k < (np ? np : 1); k++) {
                const seer_layer_tensor_info *pi = seer_layer_tensor_get(parts[k]);
                seer_arch_shape(parts[k], D, F, qd, kvd, Dh, &rows, &cols);
                const seer_weight_split sp = seer_div_split(pi->div, Dh, 1);
                SEER_TRY(rand_weight_split(g, b + pi->synth_id, rows, cols, sp, seer_layer_weight(L, parts[k])));
            }
        }
    }
    return SEER_OK;
}

/* The layers as the loader makes them (model.c's bind_layers): placed by seer_host_plan,
 * each generated, fused and, past the resident ones, moved to host memory. */
static seer_status make_layers(gen_ctx *g, const seer_model_params *mp, bool draft) {
    seer_model *m = g->m;
    const seer_model_info *in = &m->info;
    const int nl = in->n_layers;
    const int qd = in->n_heads * in->head_dim, kvd = in->n_kv_heads * in->head_dim;
    uint64_t *est = seer_calloc_array((size_t)nl, sizeof *est);
    if (!est)
        return seer_err(SEER_ERR_OOM, "out of memory");
    const uint64_t elem = strcmp(m->be->ops->name, "cpu") ? 2 : 4; /* the backend's float type */
    const uint64_t per = elem * ((uint64_t)in->dim * (2 * (uint64_t)qd + 2 * (uint64_t)kvd) +
                                 3 * (uint64_t)in->dim * in->ffn_dim);
    for (int l = 0; l < nl; l++)
        est[l] = per;
    seer_status s = seer_host_plan(m, mp->gpu_layers, mp->tp, est);
    free(est);
    SEER_TRY(s);
    if (draft && m->n_resident < nl)
        return seer_err(SEER_ERR_UNSUPPORTED, "draft weights do not combine with layers in host memory "
                        "(%d of %d layers on the device)", m->n_resident, nl);
    for (int l = 0; l < nl; l++) {
        SEER_TRY(make_layer(g, l));
        SEER_TRY(seer_model_fuse_layer(m, l));
        if (l >= m->n_resident)
            SEER_TRY(seer_host_layer_offload(m, l));
    }
    m->info.n_layers_resident = m->n_resident;
    return SEER_OK;
}

static seer_status make_rope(seer_model *m, bool llama3) {
    const seer_model_info *in = &m->info;
    const int half = in->head_dim / 2;
    float *fr = seer_malloc_array((size_t)half, sizeof *fr);
    if (!fr)
        return seer_err(SEER_ERR_OOM, "out of memory");
    m->inv_freq_host = fr;
    seer_rope_base_freqs(fr, in->head_dim, in->rope_base);
    if (llama3)
        SEER_TRY(seer_rope_llama3(fr, half, 8.f, 1.f, 4.f, 8192));
    SEER_TRY(m->be->ops->alloc(m->be, (size_t)half * sizeof(float), (void **)&m->inv_freq));
    SEER_TRY(m->be->ops->upload(m->be, m->inv_freq, fr, (size_t)half * sizeof(float)));
    return seer_model_finish_rope(m);
}

seer_status seer_model_synthetic(const char *shape, const seer_gen_params *p, seer_model_params mp,
                                 seer_model **out) {
    return seer_model_synthetic_tuned(shape, p, mp, NULL, out);
}

seer_status seer_model_synthetic_tuned(const char *shape, const seer_gen_params *p, seer_model_params mp,
                                       const seer_cuda_tuning *t, seer_model **out) {
    if (!out)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_model_synthetic: out is NULL");
    *out = NULL;
    shape_preset ps;
    if (shape) {
        int k = 0;
        while (k < N_PRESETS && strcmp(k_presets[k].name, shape))
            k++;
        if (k == N_PRESETS) {
            char list[256] = "";
            for (int i = 0; i < N_PRESETS; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                         k_presets[i].name);
            return seer_err(SEER_ERR_INVALID_ARG, "unknown synthetic shape '%s' (%s)", shape, list);
        }
        ps = k_presets[k];
    } else {
        if (!p)
            return seer_err(SEER_ERR_INVALID_ARG, "synthetic model: give a shape name or parameters");
        ps = (shape_preset){"custom", p->arch, p->n_vocab, p->dim, p->n_layers, p->n_heads,
                            p->n_kv_heads, p->ffn_dim, p->ctx, p->rope_base, p->norm_eps, p->tied, false,
                            p->head_dim, p->window};
    }
    const uint64_t seed = p ? p->seed : 1;
    const float scale = p ? p->scale : 0.f;
    SEER_TRY(check_shape(&ps, scale));
    int draft = 0;
    SEER_TRY(seer_draft_dtype_parse(mp.draft_weights, &draft));
    if (mp.n_threads < 0 || mp.n_threads > 1024)
        return seer_err(SEER_ERR_INVALID_ARG, "n_threads %d is out of range [0, 1024]", mp.n_threads);

    seer_model *m = calloc(1, sizeof *m);
    if (!m)
        return seer_err(SEER_ERR_OOM, "out of memory");
    seer_model_info *in = &m->info;
    snprintf(in->arch, sizeof in->arch, "%s", ps.arch);
    snprintf(in->name, sizeof in->name, "synthetic %s", ps.name);
    m->desc = seer_arch_find(ps.arch);
    seer_arch_defaults(m->desc, &m->hp);
    if (ps.window > 0)
        m->hp.v[SEER_HP_WINDOW] = ps.window;
    m->window = (int)m->hp.v[SEER_HP_WINDOW];
    m->attn_softcap = (float)m->hp.v[SEER_HP_ATTN_SOFTCAP];
    m->final_softcap = (float)m->hp.v[SEER_HP_FINAL_SOFTCAP];
    in->n_vocab = ps.n_vocab;
    in->dim = ps.dim;
    in->n_layers = ps.n_layers;
    in->n_heads = ps.n_heads;
    in->n_kv_heads = ps.n_kv_heads;
    in->head_dim = ps.head_dim ? ps.head_dim : ps.dim / ps.n_heads;
    in->ffn_dim = ps.ffn_dim;
    in->ctx_train = ps.ctx;
    in->rope_base = ps.rope_base;
    in->norm_eps = ps.norm_eps;
    in->tied_output = ps.tied || m->desc->output_tied;
    in->rope_neox = m->desc->rope_neox;
    snprintf(in->tokenizer, sizeof in->tokenizer, "llama");
    in->token_bos = 1;
    in->token_eos = 2;
    in->backend = "none";
    seer_status s = synthetic_vocab(ps.n_vocab, &m->vocab);
    if (s == SEER_OK && !mp.vocab_only)
        s = seer_model_check_tp(ps.n_heads, ps.n_kv_heads, mp.tp);
    if (s == SEER_OK && !mp.vocab_only)
        s = seer_model_pick_backend(mp, t, &m->be);
    if (s == SEER_OK && m->be) {
        in->backend = m->be->ops->name;
        if (!m->be->ops->weight_random)
            s = seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot generate weights", in->backend);
        if (s == SEER_OK)
            s = seer_model_check_blocks(m);
        if (s == SEER_OK)
            s = make_rope(m, ps.llama3_rope);
        gen_ctx g = {.m = m, .seed = seed, .scale = scale};
        if (s == SEER_OK)
            s = make_weights(&g);
        if (s == SEER_OK)
            s = make_layers(&g, &mp, draft != 0);
        if (s == SEER_OK)
            s = seer_model_make_draft(m, draft);
    }
    if (s != SEER_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", seer_last_error());
        seer_model_free(m);
        return seer_err(s, "synthetic %s: %s", ps.name, msg);
    }
    *out = m;
    return SEER_OK;
}

/* ---- KV without computing it --------------------------------------------------------- */

seer_status seer_seq_fill_synthetic(seer_context *c, seer_seq_id seq, int len, uint64_t seed) {
    if (!c)
        return seer_err(SEER_ERR_INVALID_ARG, "fill_synthetic: no context");
    if (seq < 0 || seq >= c->params.n_seq_max || !seer_kv_seq_alive(c->kv, seq))
        return seer_err(SEER_ERR_INVALID_ARG, "sequence %d does not exist", (int)seq);
    if (len < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "fill_synthetic: negative length %d", len);
    if (len == 0)
        return SEER_OK;
    seer_backend *be = c->be;
    if (!be->ops->kv_fill_random)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot fill KV", be->ops->name);
    int id = seq, n_new = len, n_copies = 0;
    seer_kv_copy copy;
    SEER_TRY(seer_kv_prepare_append(c->kv, 1, &id, &n_new, &copy, &n_copies));
    seer_status s = be->ops->kv_copy_pages(be, c->kv_data, &c->geom, &copy, n_copies);
    const seer_kv_seq *sq = &c->kv->seqs[seq];
    const int ps = c->kv->page_size, p0 = sq->len / ps, row0 = sq->len % ps;
    const int np = (row0 + len + ps - 1) / ps;
    if (s == SEER_OK)
        s = be->ops->kv_fill_random(be, c->kv_data, &c->geom, sq->pages + p0, np, row0, len,
                                    seed, 1.f);
    /* As seer_decode: pages gained for a failed fill go back; the length moves on success. */
    if (s == SEER_OK)
        seer_kv_commit_append(c->kv, seq, len);
    else
        seer_kv_trim(c->kv, seq);
    return s;
}

/* ---- the floor ----------------------------------------------------------------------- */

/* The weight's bytes as the backend stores them: rows * cols elements of its dtype's blocks
 * (a backend that keeps Q4_K blocks holds 144 bytes per 256 elements, one that dequantized
 * them to bf16 holds 512), so W follows whatever each backend chose. */
static uint64_t weight_bytes(const seer_weight *w) {
    const int be = seer_ggml_type_block_elems((ggml_type)w->dtype);
    const int bb = seer_ggml_type_block_bytes((ggml_type)w->dtype);
    if (be <= 0 || bb <= 0)
        return 0;
    return (uint64_t)w->rows * w->cols / be * bb;
}

/* llama.cpp's names of general.file_type (enum llama_ftype), which GGUF writers follow. */
static const char *file_type_name(int64_t ft) {
    static const struct {
        int id;
        const char *name;
    } names[] = {{0, "F32"}, {1, "F16"}, {2, "Q4_0"}, {3, "Q4_1"}, {7, "Q8_0"}, {8, "Q5_0"},
                 {9, "Q5_1"}, {10, "Q2_K"}, {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"},
                 {14, "Q4_K_S"}, {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"},
                 {32, "BF16"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].id == ft)
            return names[i].name;
    return NULL;
}

static void count_type(seer_model_footprint *out, const seer_weight *w, uint64_t *by_type) {
    const uint64_t b = weight_bytes(w);
    out->weight_bytes += b;
    out->weight_elems += (uint64_t)w->rows * w->cols;
    if ((unsigned)w->dtype < GGML_TYPE_COUNT)
        by_type[w->dtype] += b;
}

/* The LM head and the layers' linear weights (a fused weight as its parts) into out and
 * by_type: the model's W, or its draft weights'. */
static void count_weights(seer_model_footprint *out, const seer_layer *layers, int n_layers,
                          const seer_weight *head, uint64_t *by_type) {
    count_type(out, head, by_type);
    for (int l = 0; l < n_layers; l++) {
        const seer_layer *L = &layers[l];
        const seer_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
            count_type(out, ws[i], by_type);
    }
}

void seer_model_get_footprint(const seer_model *m, seer_model_footprint *out) {
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!m || !m->be || !m->layers)
        return;
    const seer_model_info *in = &m->info;
    uint64_t by_type[GGML_TYPE_COUNT] = {0};
    count_weights(out, m->layers, in->n_layers, &m->output, by_type);
    /* Largest first; the tail past the table's room is summed as "other". */
    for (;;) {
        int best = -1;
        for (int t = 0; t < GGML_TYPE_COUNT; t++)
            if (by_type[t] && (best < 0 || by_type[t] > by_type[best]))
                best = t;
        if (best < 0)
            break;
        const int k = out->n_weight_types;
        if (k < SEER_FOOTPRINT_MAX_TYPES - 1) {
            snprintf(out->weight_types[k].name, sizeof out->weight_types[k].name, "%s",
                     seer_ggml_type_name((ggml_type)best));
            out->weight_types[k].bytes = by_type[best];
            out->n_weight_types++;
        } else {
            if (k == SEER_FOOTPRINT_MAX_TYPES - 1) {
                snprintf(out->weight_types[k].name, sizeof out->weight_types[k].name, "other");
                out->n_weight_types++;
            }
            out->weight_types[k].bytes += by_type[best];
        }
        by_type[best] = 0;
    }
    if (m->draft_layers) { /* counted as W is, in a footprint of their own */
        seer_model_footprint d = {0};
        uint64_t d_type[GGML_TYPE_COUNT] = {0};
        count_weights(&d, m->draft_layers, in->n_layers, &m->draft_output, d_type);
        out->draft_weight_bytes = d.weight_bytes;
        snprintf(out->draft_weights, sizeof out->draft_weights, "%s", seer_ggml_type_name((ggml_type)m->draft_dtype));
    }
    const uint64_t n_out = (uint64_t)m->output.rows * m->output.cols;
    const uint64_t b_out = weight_bytes(&m->output);
    out->weight_elem_bytes = n_out && b_out % n_out == 0 ? (int)(b_out / n_out) : 0;
    out->kv_elem_bytes = m->be->ops->kv_elem_bytes ? m->be->ops->kv_elem_bytes : (int)sizeof(float);
    out->kv_bytes_per_token = 2ull * in->n_layers * in->n_kv_heads * in->head_dim * out->kv_elem_bytes;
    out->n_layers = in->n_layers;
    for (int l = 0; m->window > 0 && l < in->n_layers; l++)
        out->windowed_layers += seer_arch_layer_windowed(&m->hp, l);
    out->window = out->windowed_layers ? m->window : 0;
    const gguf_kv *kv = m->gguf ? seer_gguf_find_kv(m->gguf, "general.file_type") : NULL;
    int64_t ft = -1;
    /* Read only when it is an integer: a footprint query reports, it does not fail. */
    if (kv && seer_gguf_get_i64_opt(m->gguf, "general.file_type", -1, &ft) == SEER_OK && file_type_name(ft))
        snprintf(out->file_type, sizeof out->file_type, "%s", file_type_name(ft));
}

seer_status seer_model_measure_bandwidth(const seer_model *m, double *bytes_per_s) {
    SEER_CHECK_ARG(bytes_per_s);
    *bytes_per_s = 0;
    SEER_CHECK_ARG(m);
    if (!m->be)
        return seer_err(SEER_ERR_INVALID_ARG, "the model was loaded with vocab_only: no backend");
    if (!m->be->ops->copy_bandwidth)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot measure bandwidth", m->be->ops->name);
    return m->be->ops->copy_bandwidth(m->be, bytes_per_s);
}

seer_status seer_model_measure_h2d_bandwidth(const seer_model *m, double *bytes_per_s) {
    SEER_CHECK_ARG(bytes_per_s);
    *bytes_per_s = 0;
    SEER_CHECK_ARG(m);
    if (!m->be)
        return seer_err(SEER_ERR_INVALID_ARG, "the model was loaded with vocab_only: no backend");
    if (!m->be->ops->h2d_bandwidth)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot measure host-to-device bandwidth",
                        m->be->ops->name);
    return m->be->ops->h2d_bandwidth(m->be, bytes_per_s);
}

seer_status seer_model_time_all_reduce(const seer_model *m, int rows, int reps, double *seconds) {
    SEER_CHECK_ARG(seconds);
    *seconds = 0;
    SEER_CHECK_ARG(m);
    if (!m->be)
        return seer_err(SEER_ERR_INVALID_ARG, "the model was loaded with vocab_only: no backend");
    return seer_tp_time_all_reduce(m->be, rows, m->info.dim, reps, seconds);
}

seer_status seer_model_sync(const seer_model *m) {
    SEER_CHECK_ARG(m);
    if (!m->be || !m->be->ops->sync)
        return SEER_OK;
    return m->be->ops->sync(m->be);
}
