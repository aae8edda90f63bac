/*
 * gen_model.c: writes GGUF files of Llama-family shape ("llama", "qwen2") with random
 * weights and a synthetic SentencePiece vocabulary, for tests and benchmarks.
 *
 * The file carries everything a Llama-family GGUF loader reads: hyper-parameters under the
 * architecture prefix, a tokenizer.ggml.* vocabulary (specials, 256 byte-fallback tokens,
 * then merge-consistent pieces) and every weight tensor in GGUF order (ne[0] = input dim).
 * Output depends only on the parameters: the same seed gives a byte-identical file.
 * Not for: anything resembling trained weights; the text such a model writes is noise.
 */
#include "gguf/gguf.h"
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
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { /* [-1, 1) */
    return (double)(rng_next(s) >> 11) * 0x1p-52 - 1.0;
}

/* Sum of four uniforms (Irwin-Hall), scaled to unit variance: bell-shaped and bounded.
 * The four come from the 16-bit quarters of one draw; models have 10^9 weights. */
static double rng_normalish(uint64_t *s) {
    uint64_t r = rng_next(s);
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

typedef struct {
    const char *name;
    ggml_type type;
    uint32_t file_type; /* llama.cpp's general.file_type numbering */
} dtype_info;

static const dtype_info k_dtypes[] = {
    {"f32", GGML_TYPE_F32, 0},   {"f16", GGML_TYPE_F16, 1},   {"bf16", GGML_TYPE_BF16, 32},
    {"q8_0", GGML_TYPE_Q8_0, 7}, {"q4_0", GGML_TYPE_Q4_0, 2}, {"q4_1", GGML_TYPE_Q4_1, 3},
};

static const dtype_info *find_dtype(const char *name) {
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (strcmp(k_dtypes[i].name, name) == 0)
            return &k_dtypes[i];
    return NULL;
}

/* Sizes beyond this are refused up front rather than failing deep in an allocation. */
#define GEN_MAX_DIM (1 << 20)

static seer_status check_params(const seer_gen_params *p, const dtype_info **dt, int *head_dim) {
#define BAD(...) return seer_err(SEER_ERR_INVALID_ARG, "gen-model: " __VA_ARGS__)
    if (!p->arch || (strcmp(p->arch, "llama") != 0 && strcmp(p->arch, "qwen2") != 0))
        BAD("unknown architecture %s (llama or qwen2)", p->arch ? p->arch : "(null)");
    if (!p->dtype || !(*dt = find_dtype(p->dtype)))
        BAD("unknown dtype %s (f32, f16, bf16, q8_0, q4_0, q4_1)",
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
    int blk = ggml_type_block_elems((*dt)->type);
    int q_dim = p->n_heads * *head_dim;
    if (p->dim % blk || q_dim % blk || p->ffn_dim % blk)
        BAD("dtype %s needs dim (%d), n_heads*head_dim (%d) and ffn_dim (%d) divisible by %d",
            (*dt)->name, p->dim, q_dim, p->ffn_dim, blk);
#undef BAD
    return SEER_OK;
}

/* ---- tensors ------------------------------------------------------------------------- */

typedef struct {
    gguf_writer *w;
    uint64_t rng;
    float *f32;  /* scratch [largest tensor] */
    void *quant; /* scratch, quantised */
    size_t cap;  /* elements of scratch */
} gen_state;

typedef enum { FILL_NORMAL, FILL_NORM_WEIGHT, FILL_BIAS } fill_kind;

static seer_status add_tensor(gen_state *g, const char *name, ggml_type type, uint64_t ne0,
                              uint64_t ne1, fill_kind fill, float std) {
    uint64_t n = ne0 * ne1;
    if (n > g->cap)
        return seer_err(SEER_ERR_INTERNAL, "gen-model: scratch too small for %s", name);
    for (uint64_t i = 0; i < n; i++) {
        double v;
        if (fill == FILL_NORMAL)
            v = std * rng_normalish(&g->rng);
        else if (fill == FILL_NORM_WEIGHT)
            v = 1.0 + 0.1 * rng_uniform(&g->rng);
        else
            v = 0.1 * rng_uniform(&g->rng);
        g->f32[i] = (float)v;
    }
    SEER_TRY(gguf_quant(type, g->f32, g->quant, n));
    uint64_t ne[2] = {ne0, ne1};
    return gguf_writer_add_tensor(g->w, name, type, ne1 > 1 ? 2 : 1, ne, g->quant);
}

static seer_status add_linear(gen_state *g, const seer_gen_params *p, ggml_type type,
                              const char *name, uint64_t in_dim, uint64_t out_dim) {
    float std = p->scale > 0 ? p->scale : (float)(1.0 / sqrt((double)in_dim));
    return add_tensor(g, name, type, in_dim, out_dim, FILL_NORMAL, std);
}

static seer_status add_weights(gen_state *g, const seer_gen_params *p, ggml_type type,
                               int head_dim) {
    uint64_t D = (uint64_t)p->dim, V = (uint64_t)p->n_vocab, F = (uint64_t)p->ffn_dim;
    uint64_t QD = (uint64_t)p->n_heads * (uint64_t)head_dim;
    uint64_t KD = (uint64_t)p->n_kv_heads * (uint64_t)head_dim;
    bool qwen2 = strcmp(p->arch, "qwen2") == 0;
    SEER_TRY(add_linear(g, p, type, "token_embd.weight", D, V));
    SEER_TRY(add_tensor(g, "output_norm.weight", GGML_TYPE_F32, D, 1, FILL_NORM_WEIGHT, 0));
    if (!p->tied)
        SEER_TRY(add_linear(g, p, type, "output.weight", D, V));
    char name[96];
    for (int l = 0; l < p->n_layers; l++) {
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
        SEER_TRY(add_tensor(g, NAME("attn_norm.weight"), GGML_TYPE_F32, D, 1, FILL_NORM_WEIGHT,
                            0));
        SEER_TRY(add_linear(g, p, type, NAME("attn_q.weight"), D, QD));
        SEER_TRY(add_linear(g, p, type, NAME("attn_k.weight"), D, KD));
        SEER_TRY(add_linear(g, p, type, NAME("attn_v.weight"), D, KD));
        if (qwen2) {
            SEER_TRY(add_tensor(g, NAME("attn_q.bias"), GGML_TYPE_F32, QD, 1, FILL_BIAS, 0));
            SEER_TRY(add_tensor(g, NAME("attn_k.bias"), GGML_TYPE_F32, KD, 1, FILL_BIAS, 0));
            SEER_TRY(add_tensor(g, NAME("attn_v.bias"), GGML_TYPE_F32, KD, 1, FILL_BIAS, 0));
        }
        SEER_TRY(add_linear(g, p, type, NAME("attn_output.weight"), QD, D));
        SEER_TRY(add_tensor(g, NAME("ffn_norm.weight"), GGML_TYPE_F32, D, 1, FILL_NORM_WEIGHT,
                            0));
        SEER_TRY(add_linear(g, p, type, NAME("ffn_gate.weight"), D, F));
        SEER_TRY(add_linear(g, p, type, NAME("ffn_up.weight"), D, F));
        SEER_TRY(add_linear(g, p, type, NAME("ffn_down.weight"), F, D));
#undef NAME
    }
    return SEER_OK;
}

static void add_metadata(gguf_writer *w, const seer_gen_params *p, const dtype_info *dt,
                         int head_dim, const vocab_build *vb) {
    char key[128], name[160];
    const char *a = p->arch;
#define K(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    gguf_writer_set_str(w, "general.architecture", a);
    snprintf(name, sizeof name, "random-%s-d%d-l%d-%s", a, p->dim, p->n_layers, dt->name);
    gguf_writer_set_str(w, "general.name", name);
    gguf_writer_set_u32(w, "general.file_type", dt->file_type);
    gguf_writer_set_u32(w, K("context_length"), (uint32_t)p->ctx);
    gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)p->dim);
    gguf_writer_set_u32(w, K("block_count"), (uint32_t)p->n_layers);
    gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)p->ffn_dim);
    gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)p->n_heads);
    gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)p->n_kv_heads);
    gguf_writer_set_u32(w, K("attention.key_length"), (uint32_t)head_dim);
    gguf_writer_set_u32(w, K("attention.value_length"), (uint32_t)head_dim);
    gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), p->norm_eps);
    gguf_writer_set_f32(w, K("rope.freq_base"), p->rope_base);
    gguf_writer_set_u32(w, K("rope.dimension_count"), (uint32_t)head_dim);
    gguf_writer_set_u32(w, K("vocab_size"), (uint32_t)p->n_vocab);
#undef K
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)vb->tok,
                            (uint64_t)vb->n);
    gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", vb->score, (uint64_t)vb->n);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", vb->type, (uint64_t)vb->n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
}

seer_status seer_gen_model(const seer_gen_params *p, const char *path) {
    if (!p || !path)
        return seer_err(SEER_ERR_INVALID_ARG, "gen-model: NULL argument");
    const dtype_info *dt = NULL;
    int head_dim = 0;
    SEER_TRY(check_params(p, &dt, &head_dim));

    uint64_t D = (uint64_t)p->dim, F = (uint64_t)p->ffn_dim;
    uint64_t QD = (uint64_t)p->n_heads * (uint64_t)head_dim;
    uint64_t largest = D * (uint64_t)p->n_vocab;
    if (D * F > largest)
        largest = D * F;
    if (D * QD > largest)
        largest = D * QD;

    vocab_build vb;
    gen_state g = {.rng = p->seed};
    seer_status s = build_vocab(p->n_vocab, &vb);
    if (s == SEER_OK) {
        g.w = gguf_writer_init();
        g.cap = (size_t)largest;
        g.f32 = seer_malloc_array(g.cap, sizeof(float));
        g.quant = seer_malloc_array(g.cap, sizeof(float)); /* no format is wider than f32 */
        if (!g.w || !g.f32 || !g.quant)
            s = seer_err(SEER_ERR_OOM, "gen-model: out of memory (largest tensor %llu values)",
                         (unsigned long long)largest);
    }
    if (s == SEER_OK) {
        add_metadata(g.w, p, dt, head_dim, &vb);
        s = add_weights(&g, p, dt->type, head_dim);
    }
    if (s == SEER_OK)
        s = gguf_writer_write(g.w, path);
    gguf_writer_free(g.w);
    free(g.f32);
    free(g.quant);
    vocab_free(&vb);
    return s;
}
