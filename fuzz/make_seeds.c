/*
 * make_seeds.c: writes the seed corpora of the fuzzers. Into GGUF_DIR (fuzz_gguf and
 * fuzz_model): tiny random models in several dtypes, a file with every metadata value type
 * and nested arrays, and files with unusual layouts (custom alignment, q5_0 / K-quant
 * tensors, version 2). Into TOKENIZER_DIR (fuzz_tokenizer, whose input layout its header
 * describes): texts for each fixed vocabulary, and texts followed by a generated model's
 * SentencePiece vocabulary. Each stays under the fuzzers' 64 KiB input limit.
 * Not for: tests (tests/test_gguf.c builds its own files).
 */
#include "gguf/gguf.h"
#include "seer_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_dir;

static const char *path_of(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

static int check(seer_status s, const char *what) {
    if (s != SEER_OK) {
        fprintf(stderr, "make_seeds: %s: %s\n", what, seer_last_error());
        return 1;
    }
    return 0;
}

static int gen_models(void) {
    static const struct {
        const char *arch, *dtype;
        bool tied;
    } v[] = {{"llama", "q8_0", false}, {"qwen2", "q4_0", true}, {"llama", "q4_1", true},
             {"qwen2", "f16", true},   {"llama", "bf16", true}};
    int bad = 0;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        seer_gen_params p = seer_gen_default_params();
        p.arch = v[i].arch;
        p.dtype = v[i].dtype;
        p.tied = v[i].tied;
        p.n_vocab = 259 + 16;
        p.dim = 32;
        p.n_heads = 2;
        p.n_kv_heads = 1;
        p.ffn_dim = 64;
        p.n_layers = 1;
        p.seed = i + 1;
        char name[64];
        snprintf(name, sizeof name, "gen-%s-%s.gguf", v[i].arch, v[i].dtype);
        bad |= check(seer_gen_model(&p, path_of(name)), name);
    }
    return bad;
}

static int rich_file(void) {
    gguf_writer *w = seer_gguf_writer_init();
    gguf_value v = {.type = GGUF_TYPE_UINT8, .u64 = 7};
    seer_gguf_writer_set_value(w, "u8", &v);
    v = (gguf_value){.type = GGUF_TYPE_INT16, .i64 = -3};
    seer_gguf_writer_set_value(w, "i16", &v);
    v = (gguf_value){.type = GGUF_TYPE_INT64, .i64 = -1};
    seer_gguf_writer_set_value(w, "i64", &v);
    v = (gguf_value){.type = GGUF_TYPE_FLOAT64, .f64 = 0.25};
    seer_gguf_writer_set_value(w, "f64", &v);
    seer_gguf_writer_set_u64(w, "u64", 1ull << 40);
    seer_gguf_writer_set_bool(w, "b", true);
    seer_gguf_writer_set_f32(w, "f", 1.5f);
    seer_gguf_writer_set_str(w, "s", "text");
    gguf_value s1[2], a1[2], a2[1];
    s1[0] = (gguf_value){.type = GGUF_TYPE_STRING, .str = {"ab", 2}};
    s1[1] = (gguf_value){.type = GGUF_TYPE_STRING, .str = {"", 0}};
    a1[0] = (gguf_value){.type = GGUF_TYPE_ARRAY, .arr = {GGUF_TYPE_STRING, 2, s1}};
    a1[1] = (gguf_value){.type = GGUF_TYPE_ARRAY, .arr = {GGUF_TYPE_STRING, 0, NULL}};
    a2[0] = (gguf_value){.type = GGUF_TYPE_ARRAY, .arr = {GGUF_TYPE_ARRAY, 2, a1}};
    v = (gguf_value){.type = GGUF_TYPE_ARRAY, .arr = {GGUF_TYPE_ARRAY, 1, a2}};
    seer_gguf_writer_set_value(w, "nested", &v);
    const int32_t is[] = {1, 2, 3};
    seer_gguf_writer_set_arr_i32(w, "ints", is, 3);
    float d[64];
    for (int i = 0; i < 64; i++)
        d[i] = (float)i * 0.5f - 8.f;
    uint8_t q[64 * 4];
    uint64_t ne2[2] = {32, 2};
    int bad = check(seer_gguf_quant(GGML_TYPE_Q4_1, d, q, 64), "quant");
    bad |= check(seer_gguf_writer_add_tensor(w, "q41", GGML_TYPE_Q4_1, 2, ne2, q), "q41");
    uint64_t ne1 = 5;
    bad |= check(seer_gguf_writer_add_tensor(w, "f32", GGML_TYPE_F32, 1, &ne1, d), "f32");
    bad |= check(seer_gguf_writer_write(w, path_of("rich.gguf")), "rich.gguf");

    /* the same, as version 2 */
    uint8_t *buf;
    size_t size;
    if (seer_gguf_writer_to_buffer(w, &buf, &size) == SEER_OK) {
        buf[4] = 2;
        FILE *fp = fopen(path_of("rich-v2.gguf"), "wb");
        if (fp) {
            fwrite(buf, 1, size, fp);
            fclose(fp);
        }
        free(buf);
    }
    seer_gguf_writer_free(w);
    return bad;
}

static int odd_layouts(void) {
    gguf_writer *w = seer_gguf_writer_init();
    seer_gguf_writer_set_u32(w, "general.alignment", 8);
    uint8_t zeros[1024] = {0};
    uint64_t ne_k[1] = {256}, ne_5[2] = {32, 3}, ne_h[3] = {3, 1, 2};
    int bad = check(seer_gguf_writer_add_tensor(w, "k", GGML_TYPE_Q6_K, 1, ne_k, zeros), "q6_K");
    bad |= check(seer_gguf_writer_add_tensor(w, "q5", GGML_TYPE_Q5_0, 2, ne_5, zeros), "q5_0");
    bad |= check(seer_gguf_writer_add_tensor(w, "h", GGML_TYPE_F16, 3, ne_h, zeros), "f16");
    bad |= check(seer_gguf_writer_add_tensor(w, "b", GGML_TYPE_BF16, 1, ne_h, zeros), "bf16");
    bad |= check(seer_gguf_writer_write(w, path_of("odd.gguf")), "odd.gguf");
    seer_gguf_writer_free(w);
    return bad;
}

static int write_seed(const char *name, const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    FILE *fp = fopen(path_of(name), "wb");
    if (!fp || fwrite(a, 1, na, fp) != na || (nb && fwrite(b, 1, nb, fp) != nb)) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path_of(name));
        if (fp)
            fclose(fp);
        return 1;
    }
    return fclose(fp) != 0;
}

/* Seeds for fuzz_tokenizer; gguf_dir holds the generated models already. */
static int tokenizer_seeds(const char *gguf_dir) {
    static const char *const texts[] = {
        "Hello, world! It's 2024 and   spaces\tand\nnewlines.",
        "<s>special</s> <|im_start|>user\nhi<|im_end|>",
        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 don't I'll 12345",
        "def f(x):\n    return x ** 2  # code\n",
    };
    int bad = 0;
    char name[64];
    uint8_t head[3];
    for (int vocab = 0; vocab < 3; vocab++)
        for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
            head[0] = (uint8_t)(vocab | (t & 1 ? 4 : 0) | (t == 1 ? 8 : 0));
            snprintf(name, sizeof name, "fixed-%d-%zu", vocab, t);
            bad |= write_seed(name, head, 1, (const uint8_t *)texts[t], strlen(texts[t]));
        }
    /* vocabulary from the input: a generated model's file carries a SentencePiece one */
    char src[4096];
    snprintf(src, sizeof src, "%s/gen-llama-q8_0.gguf", gguf_dir);
    FILE *fp = fopen(src, "rb");
    if (!fp) {
        fprintf(stderr, "make_seeds: cannot read %s\n", src);
        return 1;
    }
    static uint8_t file[1 << 16];
    size_t n = fread(file, 1, sizeof file, fp);
    fclose(fp);
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        size_t len = strlen(texts[t]);
        uint8_t *seed = malloc(3 + len + n);
        if (!seed)
            return 1;
        seed[0] = (uint8_t)(3 | (t & 1 ? 4 : 0) | (t == 1 ? 8 : 0));
        seed[1] = (uint8_t)(len & 0xff);
        seed[2] = (uint8_t)(len >> 8);
        memcpy(seed + 3, texts[t], len);
        memcpy(seed + 3 + len, file, n);
        snprintf(name, sizeof name, "input-vocab-%zu", t);
        bad |= write_seed(name, seed, 3 + len + n, NULL, 0);
        free(seed);
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: make_seeds GGUF_DIR TOKENIZER_DIR\n");
        return 2;
    }
    g_dir = argv[1];
    int bad = gen_models();
    bad |= rich_file();
    bad |= odd_layouts();
    g_dir = argv[2];
    bad |= tokenizer_seeds(argv[1]);
    return bad ? 1 : 0;
}
