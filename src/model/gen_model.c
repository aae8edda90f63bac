/*
 * gen_model.c: writes GGUF files of any registered family (arch/arch.h: "llama", "qwen2",
 * "qwen3", "gemma2", "gemma3", "phi3") with random weights and a synthetic SentencePiece
 * vocabulary, for tests and benchmarks. RoPE scaling (linear, YaRN, LongRoPE with random
 * factor tables) is written with the keys llama.cpp reads.
 *
 * The file carries everything the family's GGUF loader reads: hyper-parameters under the
 * architecture prefix (the family's own keys at their defaults), a tokenizer.ggml.* vocabulary (specials, 256 byte-fallback tokens,
 * then merge-consistent pieces) and every weight tensor in GGUF order (ne[0] = input dim).
 * Output depends only on the parameters: the same seed gives a byte-identical file, and
 * the same weights (up to rounding) in every dtype, since each value is drawn by its place
 * in one random sequence. The weight matrices take the dtype, or for the llama.cpp mixes
 * (q4_k_m, q5_k_m) the type llama.cpp's rule gives each tensor (weight_type); tensors are
 * generated and quantised in parallel while the file is written, one at a time.
 * Not for: anything resembling trained weights; the text such a model writes is noise.
 */
#include "seer_bench.h"
#include "gguf/gguf.h"
#include "model/arch/arch.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

seer_gen_params seer_gen_default_params(void) {
    return (seer_gen_params){
        .arch = "llama",
        .n_vocab = 512,
        .dim = 64,
        .n_layers = 2,
        .n_heads = 4,
        .n_kv_heads = 2,
        .ffn_dim = 192,
        .ctx = 2048,
        .head_dim = 0,
        .rope_base = 10000.f,
        .norm_eps = 1e-5f,
        .tied = false,
        .dtype = "f32",
        .seed = 1,
        .scale = 0.f,
    };
}

/* ---- random numbers ------------------------------------------------------------------ */

/* splitmix64 and integer/float arithmetic only (no libm), so the bytes of a generated file
 * do not depend on the platform's math library. */
static uint64_t rng_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The k-th draw (k from 0) of the splitmix64 sequence seeded with seed: the generator only
 * adds a constant to its state, so any draw can be computed directly, and threads can fill
 * disjoint ranges of one sequence. */
static uint64_t rng_at(uint64_t seed, uint64_t k) {
    return rng_mix(seed + (k + 1) * 0x9E3779B97F4A7C15ull);
}

static double rng_uniform(uint64_t r) { /* [-1, 1) */
    return (double)(r >> 11) * 0x1p-52 - 1.0;
}

/* Sum of four uniforms (Irwin-Hall), scaled to unit variance: bell-shaped and bounded.
 * The four come from the 16-bit quarters of one draw; models have 10^9 weights. */
static double rng_normalish(uint64_t r) {
    uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                   (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    /* each quarter is uniform on [0, 65536): centre the sum and scale each to [-1, 1) */
    double x = ((double)sum + 2.0 - 131072.0) / 32768.0;
    return x * 0.8660254037844386; /* sqrt(3)/2: each uniform has variance 1/3 */
}

/* ---- vocabulary ---------------------------------------------------------------------- */

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space marker */

/* Lower-case letters by English frequency, so the earliest (highest-scored) multi-letter
 * pieces are made of common letters. */
static const char k_letters[] = "etaoinshrdlcumwfgypbvkjxqz";

typedef struct {
    char **tok;     /* [V] */
    float *score;   /* [V] */
    int32_t *type;  /* [V] */
    char *text;     /* backing store of the strings */
    size_t text_used, text_cap;
    int n, cap;
} vocab_build;

static bool vb_add(vocab_build *vb, const char *piece, float score, int32_t type) {
    size_t len = strlen(piece) + 1;
    if (vb->n >= vb->cap || vb->text_cap - vb->text_used < len)
        return false;
    char *dst = vb->text + vb->text_used;
    memcpy(dst, piece, len);
    vb->text_used += len;
    vb->tok[vb->n] = dst;
    vb->score[vb->n] = score;
    vb->type[vb->n] = type;
    vb->n++;
    return true;
}

/* Normal pieces in order of decreasing score. Every piece longer than one character is an
 * earlier piece plus one character that is itself a piece, so a score-driven BPE can build
 * it by merges. */
static void vb_add_normal(vocab_build *vb) {
    int k = 0;
    char buf[64];
#define ADD(str)                                         \
    do {                                                 \
        if (vb->n >= vb->cap)                            \
            return;                                      \
        vb_add(vb, (str), -(float)(k++), 1);             \
    } while (0)
    ADD(SPM_SPACE);
    for (int c = 0x21; c < 0x7f; c++) {
        buf[0] = (char)c;
        buf[1] = 0;
        ADD(buf);
    }
    for (int i = 0; i < 26; i++) {
        snprintf(buf, sizeof buf, SPM_SPACE "%c", k_letters[i]);
        ADD(buf);
    }
    for (int c = 'A'; c <= 'Z'; c++) {
        snprintf(buf, sizeof buf, SPM_SPACE "%c", c);
        ADD(buf);
    }
    for (int c = '0'; c <= '9'; c++) {
        snprintf(buf, sizeof buf, SPM_SPACE "%c", c);
        ADD(buf);
    }
    /* words of length L over the letters, then the same words after the space marker */
    for (int len = 2; len < 8; len++) { /* 26^7 pieces: far beyond any vocabulary size */
        uint64_t count = 1;
        for (int i = 0; i < len; i++)
            count *= 26;
        for (uint64_t idx = 0; idx < count; idx++) {
            char w[20];
            uint64_t x = idx;
            for (int i = len - 1; i >= 0; i--) {
                w[i] = k_letters[x % 26];
                x /= 26;
            }
            w[len] = 0;
            ADD(w);
            snprintf(buf, sizeof buf, SPM_SPACE "%s", w);
            ADD(buf);
        }
    }
#undef ADD
}

static seer_status build_vocab(int n_vocab, vocab_build *vb) {
    memset(vb, 0, sizeof *vb);
    vb->cap = n_vocab;
    /* the longest piece is a few bytes; 24 per token is ample */
    vb->text_cap = (size_t)n_vocab * 24;
    vb->tok = seer_calloc_array((size_t)n_vocab, sizeof(char *));
    vb->score = seer_calloc_array((size_t)n_vocab, sizeof(float));
    vb->type = seer_calloc_array((size_t)n_vocab, sizeof(int32_t));
    vb->text = seer_malloc_array((size_t)n_vocab, 24);
    if (!vb->tok || !vb->score || !vb->type || !vb->text)
        return seer_err(SEER_ERR_OOM, "out of memory for a vocabulary of %d", n_vocab);
    vb_add(vb, "<unk>", 0.f, 2);
    vb_add(vb, "<s>", 0.f, 3);
    vb_add(vb, "</s>", 0.f, 3);
    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        vb_add(vb, buf, 0.f, 6);
    }
    vb_add_normal(vb);
    if (vb->n != n_vocab)
        return seer_err(SEER_ERR_INTERNAL, "vocabulary generator made %d of %d pieces", vb->n,
                        n_vocab);
    return SEER_OK;
}

static void vocab_free(vocab_build *vb) {
    free(vb->tok);
    free(vb->score);
    free(vb->type);
    free(vb->text);
}

/* ---- parameters ---------------------------------------------------------------------- */

typedef enum { MIX_NONE, MIX_Q4_K_M, MIX_Q5_K_M } quant_mix;

typedef struct {
    const char *name;
    ggml_type type;     /* of the weight matrices, unless the mix says otherwise */
    uint32_t file_type; /* llama.cpp's general.file_type (enum llama_ftype) numbering */
    quant_mix mix;
} dtype_info;

/* llama.cpp has no ftype for an all-Q4_K (or all-Q5_K) file: `llama-quantize --pure Q4_K_S`
 * writes one and labels it with the ftype asked for, as q4_k and q5_k do here. */
static const dtype_info k_dtypes[] = {
    {"f32", GGML_TYPE_F32, 0, MIX_NONE},          {"f16", GGML_TYPE_F16, 1, MIX_NONE},
    {"bf16", GGML_TYPE_BF16, 32, MIX_NONE},       {"q8_0", GGML_TYPE_Q8_0, 7, MIX_NONE},
    {"q4_0", GGML_TYPE_Q4_0, 2, MIX_NONE},        {"q4_1", GGML_TYPE_Q4_1, 3, MIX_NONE},
    {"q5_0", GGML_TYPE_Q5_0, 8, MIX_NONE},        {"q5_1", GGML_TYPE_Q5_1, 9, MIX_NONE},
    {"q4_k", GGML_TYPE_Q4_K, 14, MIX_NONE},       {"q5_k", GGML_TYPE_Q5_K, 16, MIX_NONE},
    {"q6_k", GGML_TYPE_Q6_K, 18, MIX_NONE},       {"q4_k_m", GGML_TYPE_Q4_K, 15, MIX_Q4_K_M},
    {"q5_k_m", GGML_TYPE_Q5_K, 17, MIX_Q5_K_M},
};

static const dtype_info *find_dtype(const char *name) {
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (strcmp(k_dtypes[i].name, name) == 0)
            return &k_dtypes[i];
    return NULL;
}

static bool is_k_type(ggml_type t) {
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K;
}

typedef enum {
    W_TOKEN_EMBD, W_OUTPUT, W_ATTN_Q, W_ATTN_K, W_ATTN_V, W_ATTN_OUT, W_FFN_GATE, W_FFN_UP,
    W_FFN_DOWN
} weight_role;

/* The type of one weight matrix (ne0 = its row length) in a file of dtype dt, after
 * llama.cpp's llama_tensor_get_type (src/llama-quant.cpp) for LLAMA_FTYPE_MOSTLY_Q4_K_M and
 * _Q5_K_M on a dense Llama/Qwen2 model without an importance matrix:
 *   - output.weight (or token_embd.weight when it doubles as the output) at Q6_K, or Q8_0
 *     when its rows are not a multiple of 256;
 *   - attn_v and ffn_down at Q6_K in the "use_more_bits" layers: the first and last eighth
 *     of the layers and every third layer in between;
 *   - everything else, token_embd included, at the ftype's base type (Q4_K or Q5_K).
 * Left out: the 70B rule (attn_v one step up for LLM_TYPE_70B), which needs the model's
 * size class. Then, as its tensor_type_fallback, for every dtype with 256-element blocks:
 * rows that are not a multiple of 256 take Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and
 * F16 when even 32 does not divide them. Norms and biases are not weights here: f32. */
static ggml_type weight_type(const dtype_info *dt, weight_role role, int layer, int n_layers,
                             bool tied, uint64_t ne0) {
    ggml_type t = dt->type;
    if (dt->mix != MIX_NONE) {
        const int n = n_layers;
        bool more_bits = layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
        if (role == W_OUTPUT || (tied && role == W_TOKEN_EMBD))
            t = ne0 % 256 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q6_K;
        else if ((role == W_ATTN_V || role == W_FFN_DOWN) && more_bits)
            t = GGML_TYPE_Q6_K;
    }
    if (is_k_type(t) && ne0 % 256) {
        t = t == GGML_TYPE_Q4_K ? GGML_TYPE_Q5_0
            : t == GGML_TYPE_Q5_K ? GGML_TYPE_Q5_1
                                  : GGML_TYPE_Q8_0;
        if (ne0 % 32)
            t = GGML_TYPE_F16;
    }
    return t;
}

/* Sizes beyond this are refused up front rather than failing deep in an allocation. */
#define GEN_MAX_DIM (1 << 20)

static seer_status check_params(const seer_gen_params *p, const dtype_info **dt, int *head_dim) {
#define BAD(...) return seer_err(SEER_ERR_INVALID_ARG, "gen-model: " __VA_ARGS__)
    if (!seer_arch_find(p->arch)) {
        char list[256];
        seer_arch_list(list, sizeof list);
        BAD("unknown architecture %s (%s)", p->arch ? p->arch : "(null)", list);
    }
    if (p->window < 0)
        BAD("window %d must be >= 0", p->window);
    const char *rs = p->rope_scaling;
    if (rs && strcmp(rs, "none") && strcmp(rs, "linear") && strcmp(rs, "yarn") && strcmp(rs, "longrope"))
        BAD("unknown rope scaling %s (none, linear, yarn, longrope)", rs);
    if (!(p->rope_factor >= 0) || !(p->rope_attn_factor >= 0) || p->rope_orig_ctx < 0 ||
        !isfinite(p->rope_factor) || !isfinite(p->rope_attn_factor))
        BAD("rope factor %g, attn_factor %g and original context %d must be >= 0",
            (double)p->rope_factor, (double)p->rope_attn_factor, p->rope_orig_ctx);
    if (!p->dtype || !(*dt = find_dtype(p->dtype)))
        BAD("unknown dtype %s (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, "
            "q6_k, q4_k_m, q5_k_m)",
            p->dtype ? p->dtype : "(null)");
    if (p->n_vocab < 259 || p->n_vocab > (1 << 24))
        BAD("n_vocab %d out of range (259 .. 2^24: 3 specials and 256 byte tokens come first)",
            p->n_vocab);
    if (p->dim <= 0 || p->dim > GEN_MAX_DIM)
        BAD("dim %d out of range", p->dim);
    if (p->n_layers <= 0 || p->n_layers > 4096)
        BAD("n_layers %d out of range", p->n_layers);
    if (p->n_heads <= 0 || p->n_kv_heads <= 0 || p->n_heads > GEN_MAX_DIM)
        BAD("head counts must be positive (n_heads %d, n_kv_heads %d)", p->n_heads,
            p->n_kv_heads);
    if (p->n_heads % p->n_kv_heads)
        BAD("n_kv_heads %d does not divide n_heads %d", p->n_kv_heads, p->n_heads);
    if (p->ffn_dim <= 0 || p->ffn_dim > 4 * GEN_MAX_DIM)
        BAD("ffn_dim %d out of range", p->ffn_dim);
    if (p->ctx <= 0)
        BAD("ctx %d must be positive", p->ctx);
    if (p->head_dim < 0 || p->head_dim > GEN_MAX_DIM)
        BAD("head_dim %d out of range", p->head_dim);
    if (p->head_dim == 0 && p->dim % p->n_heads)
        BAD("n_heads %d does not divide dim %d (set head_dim)", p->n_heads, p->dim);
    *head_dim = p->head_dim ? p->head_dim : p->dim / p->n_heads;
    if (*head_dim % 2)
        BAD("head_dim %d must be even (RoPE rotates pairs)", *head_dim);
    if ((int64_t)p->n_heads * *head_dim > GEN_MAX_DIM)
        BAD("n_heads * head_dim too large");
    if (!(p->rope_base > 0) || !isfinite(p->rope_base))
        BAD("rope_base %g must be positive", (double)p->rope_base);
    if (!(p->norm_eps > 0) || !isfinite(p->norm_eps))
        BAD("norm_eps %g must be positive", (double)p->norm_eps);
    if (!(p->scale >= 0) || !isfinite(p->scale))
        BAD("scale %g must be >= 0", (double)p->scale);
    /* the 256-element formats fall back per tensor (weight_type); the others need whole
     * blocks in every row */
    int blk = is_k_type((*dt)->type) ? 1 : seer_ggml_type_block_elems((*dt)->type);
    int q_dim = p->n_heads * *head_dim;
    if (p->dim % blk || q_dim % blk || p->ffn_dim % blk)
        BAD("dtype %s needs dim (%d), n_heads*head_dim (%d) and ffn_dim (%d) divisible by %d",
            (*dt)->name, p->dim, q_dim, p->ffn_dim, blk);
#undef BAD
    return SEER_OK;
}

/* ---- tensors ------------------------------------------------------------------------- */

/* Tensors are declared first (the header needs every shape and type) and generated while
 * the file is written, one at a time and in parallel over rows: memory holds one tensor's
 * output bytes, never the model. */

typedef enum { FILL_NORMAL, FILL_NORM_WEIGHT, FILL_BIAS, FILL_ROPE_SHORT, FILL_ROPE_LONG } fill_kind;

typedef struct {
    ggml_type type;
    uint64_t ne0, ne1;
    fill_kind fill;
    float std;
    uint64_t first_draw; /* index of its first value in the seed's random sequence */
} gen_tensor;

typedef struct {
    gguf_writer *w;
    uint64_t seed;
    uint64_t draws;  /* values of the tensors declared so far: one draw each */
    gen_tensor *t;   /* [n], in file order */
    size_t n, cap;
} gen_state;

static seer_status add_tensor(gen_state *g, const char *name, ggml_type type, uint64_t ne0,
                              uint64_t ne1, fill_kind fill, float std) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 64;
        gen_tensor *t = seer_malloc_array(cap, sizeof *t);
        if (!t)
            return seer_err(SEER_ERR_OOM, "gen-model: out of memory");
        if (g->n)
            memcpy(t, g->t, g->n * sizeof *t);
        free(g->t);
        g->t = t;
        g->cap = cap;
    }
    uint64_t ne[2] = {ne0, ne1};
    SEER_TRY(seer_gguf_writer_declare_tensor(g->w, name, type, ne1 > 1 ? 2 : 1, ne));
    g->t[g->n++] = (gen_tensor){.type = type, .ne0 = ne0, .ne1 = ne1, .fill = fill,
                                .std = std, .first_draw = g->draws};
    g->draws += ne0 * ne1;
    return SEER_OK;
}

/* gguf_fill_fn: the values of tensor `index` (every tensor is declared, so the index is its
 * place in g->t), quantised row by row. The values depend only on the seed and their place
 * in the sequence, so the bytes do not depend on the thread count. */
static seer_status fill_tensor(void *ctx, size_t index, const char *name, void *dst,
                               size_t nbytes) {
    const gen_state *g = ctx;
    const gen_tensor *t = &g->t[index];
    const size_t row_bytes = nbytes / t->ne1;
    const int64_t rows = (int64_t)t->ne1;
    int oom = 0, bad = 0;
#pragma omp parallel
    {
        float *row = seer_malloc_array(t->ne0, sizeof(float));
        if (!row) {
#pragma omp atomic write
            oom = 1;
        }
#pragma omp for schedule(dynamic, 8)
        for (int64_t r = 0; r < rows; r++) {
            if (!row)
                continue;
            const uint64_t k0 = t->first_draw + (uint64_t)r * t->ne0;
            for (uint64_t i = 0; i < t->ne0; i++) {
                uint64_t u = rng_at(g->seed, k0 + i);
                /* LongRoPE tables: divisors of the frequencies, short near 1, long up to 9 */
                double v = t->fill == FILL_NORMAL        ? t->std * rng_normalish(u)
                           : t->fill == FILL_NORM_WEIGHT ? 1.0 + 0.1 * rng_uniform(u)
                           : t->fill == FILL_ROPE_SHORT  ? 1.25 + 0.25 * rng_uniform(u)
                           : t->fill == FILL_ROPE_LONG   ? 5.0 + 4.0 * rng_uniform(u)
                                                         : 0.1 * rng_uniform(u);
                row[i] = (float)v;
            }
            if (seer_gguf_quant(t->type, row, (uint8_t *)dst + (size_t)r * row_bytes, t->ne0) !=
                SEER_OK) {
#pragma omp atomic write
                bad = 1;
            }
        }
        free(row);
    }
    if (oom)
        return seer_err(SEER_ERR_OOM, "gen-model: out of memory generating %s", name);
    if (bad) /* the values are finite and the shapes checked: not reachable from input */
        return seer_err(SEER_ERR_INTERNAL, "gen-model: cannot quantise %s to %s", name,
                        seer_ggml_type_name(t->type));
    return SEER_OK;
}

static seer_status add_linear(gen_state *g, const seer_gen_params *p, const dtype_info *dt,
                              weight_role role, int layer, const char *name, uint64_t in_dim,
                              uint64_t out_dim) {
    float std = p->scale > 0 ? p->scale : (float)(1.0 / sqrt((double)in_dim));
    const bool tied = p->tied || seer_arch_find(p->arch)->output_tied;
    ggml_type type = weight_type(dt, role, layer, p->n_layers, tied, in_dim);
    return add_tensor(g, name, type, in_dim, out_dim, FILL_NORMAL, std);
}

static seer_status add_weights(gen_state *g, const seer_gen_params *p, const dtype_info *dt,
                               int head_dim) {
    uint64_t D = (uint64_t)p->dim, V = (uint64_t)p->n_vocab, F = (uint64_t)p->ffn_dim;
    uint64_t QD = (uint64_t)p->n_heads * (uint64_t)head_dim;
    uint64_t KD = (uint64_t)p->n_kv_heads * (uint64_t)head_dim;
    const seer_arch_desc *d = seer_arch_find(p->arch);
    SEER_TRY(add_linear(g, p, dt, W_TOKEN_EMBD, 0, "token_embd.weight", D, V));
    SEER_TRY(add_tensor(g, "output_norm.weight", GGML_TYPE_F32, D, 1, FILL_NORM_WEIGHT, 0));
    if (!p->tied && !d->output_tied)
        SEER_TRY(add_linear(g, p, dt, W_OUTPUT, 0, "output.weight", D, V));
    if (p->rope_scaling && !strcmp(p->rope_scaling, "longrope")) {
        SEER_TRY(add_tensor(g, "rope_factors_long.weight", GGML_TYPE_F32, (uint64_t)head_dim / 2, 1, FILL_ROPE_LONG, 0));
        SEER_TRY(add_tensor(g, "rope_factors_short.weight", GGML_TYPE_F32, (uint64_t)head_dim / 2, 1, FILL_ROPE_SHORT, 0));
    }
    static const weight_role roles[] = {
        [SEER_QROLE_ATTN_Q] = W_ATTN_Q,     [SEER_QROLE_ATTN_K] = W_ATTN_K,
        [SEER_QROLE_ATTN_V] = W_ATTN_V,     [SEER_QROLE_ATTN_OUT] = W_ATTN_OUT,
        [SEER_QROLE_FFN_GATE] = W_FFN_GATE, [SEER_QROLE_FFN_UP] = W_FFN_UP,
        [SEER_QROLE_FFN_DOWN] = W_FFN_DOWN,
    };
    char name[96];
    for (int l = 0; l < p->n_layers; l++) {
        for (int i = 0; i < d->n_tensors; i++) {
            const seer_arch_tensor *t = &d->tensors[i];
            const seer_layer_tensor_info *ti = seer_layer_tensor_get(t->role);
            if (!t->required)
                continue;
            snprintf(name, sizeof name, "blk.%d.%s", l, t->name);
            int rows, cols;
            seer_arch_shape(t->role, (int)D, (int)F, (int)QD, (int)KD, head_dim, &rows, &cols);
            if (ti->vec)
                SEER_TRY(add_tensor(g, name, GGML_TYPE_F32, (uint64_t)cols, 1,
                                    ti->fill == SEER_FILL_BIAS ? FILL_BIAS : FILL_NORM_WEIGHT, 0));
            else
                SEER_TRY(add_linear(g, p, dt, roles[ti->qrole], l, name, (uint64_t)cols, (uint64_t)rows));
        }
    }
    return SEER_OK;
}

static void add_metadata(gguf_writer *w, const seer_gen_params *p, const dtype_info *dt,
                         int head_dim, const vocab_build *vb) {
    char key[128], name[160];
    const char *a = p->arch;
#define K(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    seer_gguf_writer_set_str(w, "general.architecture", a);
    /* no family in the name: llama.cpp sets token attributes by general.name (a "phi3" in it
     * has it look up Phi-3's special tokens, which the synthetic vocabulary does not have) */
    snprintf(name, sizeof name, "random-d%d-l%d-%s", p->dim, p->n_layers, dt->name);
    seer_gguf_writer_set_str(w, "general.name", name);
    seer_gguf_writer_set_u32(w, "general.file_type", dt->file_type);
    seer_gguf_writer_set_u32(w, K("context_length"), (uint32_t)p->ctx);
    seer_gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)p->dim);
    seer_gguf_writer_set_u32(w, K("block_count"), (uint32_t)p->n_layers);
    seer_gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)p->ffn_dim);
    seer_gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)p->n_heads);
    seer_gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)p->n_kv_heads);
    seer_gguf_writer_set_u32(w, K("attention.key_length"), (uint32_t)head_dim);
    seer_gguf_writer_set_u32(w, K("attention.value_length"), (uint32_t)head_dim);
    seer_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), p->norm_eps);
    seer_gguf_writer_set_f32(w, K("rope.freq_base"), p->rope_base);
    seer_gguf_writer_set_u32(w, K("rope.dimension_count"), (uint32_t)head_dim);
    seer_gguf_writer_set_u32(w, K("vocab_size"), (uint32_t)p->n_vocab);
    if (p->rope_scaling)
        seer_gguf_writer_set_str(w, K("rope.scaling.type"), p->rope_scaling);
    if (p->rope_factor > 0)
        seer_gguf_writer_set_f32(w, K("rope.scaling.factor"), p->rope_factor);
    if (p->rope_orig_ctx > 0)
        seer_gguf_writer_set_u32(w, K("rope.scaling.original_context_length"), (uint32_t)p->rope_orig_ctx);
    if (p->rope_attn_factor > 0)
        seer_gguf_writer_set_f32(w, K("rope.scaling.attn_factor"), p->rope_attn_factor);
#undef K
    /* the family's own keys, at their defaults (the window as asked); zeros are left out */
    const seer_arch_desc *d = seer_arch_find(a);
    for (int i = 0; i < d->n_keys; i++) {
        const seer_arch_key *k = &d->keys[i];
        double v = k->hp == SEER_HP_WINDOW && p->window ? p->window : k->def;
        if (v == 0)
            continue;
        snprintf(key, sizeof key, "%s.%s", a, k->key);
        if (k->integer)
            seer_gguf_writer_set_u32(w, key, (uint32_t)v);
        else
            seer_gguf_writer_set_f32(w, key, (float)v);
    }
    seer_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    seer_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)vb->tok,
                            (uint64_t)vb->n);
    seer_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", vb->score, (uint64_t)vb->n);
    seer_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", vb->type, (uint64_t)vb->n);
    seer_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    seer_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    seer_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    seer_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    seer_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
}

seer_status seer_gen_model(const seer_gen_params *p, const char *path) {
    if (!p || !path)
        return seer_err(SEER_ERR_INVALID_ARG, "gen-model: NULL argument");
    const dtype_info *dt = NULL;
    int head_dim = 0;
    SEER_TRY(check_params(p, &dt, &head_dim));

    vocab_build vb;
    gen_state g = {.seed = p->seed};
    seer_status s = build_vocab(p->n_vocab, &vb);
    if (s == SEER_OK) {
        g.w = seer_gguf_writer_init();
        if (!g.w)
            s = seer_err(SEER_ERR_OOM, "gen-model: out of memory");
    }
    if (s == SEER_OK) {
        add_metadata(g.w, p, dt, head_dim, &vb);
        s = add_weights(&g, p, dt, head_dim);
    }
    if (s == SEER_OK)
        s = seer_gguf_writer_write_stream(g.w, path, fill_tensor, &g);
    seer_gguf_writer_free(g.w);
    free(g.t);
    vocab_free(&vb);
    return s;
}
