/*
 * ref-arch.c: llama.cpp's logits for a GGUF file over given token ids, for the family
 * fixtures of tests/test_arch_ref.c (scripts/ref-arch.sh builds it against a llama.cpp build
 * and runs it).
 *
 *     ref-arch MODEL.gguf N_CTX N_GEN ID...
 *
 * Evaluates the ids (the prompt) in one batch with logits for every row, then N_GEN greedy
 * steps one token at a time (argmax, ties to the lowest id). Prints
 *     greedy <tab> id...
 *     row <tab> i <tab> logit... (V values)
 * one row per token evaluated: the prompt's rows, then one per greedy token fed back (the
 * last greedy token is not fed). The KV cache is f32 and flash attention off, as seer keeps
 * its cache, so the two engines differ in the order of their sums only.
 * Not for: seer itself (it links only llama.cpp) or anything beyond the test fixtures.
 */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

static void print_row(int i, const float *l, int V) {
    printf("row\t%d", i);
    for (int v = 0; v < V; v++)
        printf("\t%.9g", l[v]);
    printf("\n");
}

static int argmax(const float *l, int V) {
    int b = 0;
    for (int v = 1; v < V; v++)
        if (l[v] > l[b])
            b = v;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL.gguf N_CTX N_GEN ID...\n", argv[0]);
        return 2;
    }
    const int n_ctx = atoi(argv[2]), n_gen = atoi(argv[3]), n_prompt = argc - 4;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = cp.n_ubatch = (uint32_t)(n_prompt > 8 ? n_prompt : 8);
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "cannot make a context\n");
        return 1;
    }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_batch b = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_prompt; i++) {
        b.token[i] = atoi(argv[4 + i]);
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n_prompt;
    if (llama_decode(ctx, b)) {
        fprintf(stderr, "decode failed\n");
        return 1;
    }
    float *rows = malloc(sizeof(float) * (size_t)V * (size_t)(n_prompt + n_gen));
    int *gen = malloc(sizeof(int) * (size_t)(n_gen + 1));
    for (int i = 0; i < n_prompt; i++) {
        const float *l = llama_get_logits_ith(ctx, i);
        for (int v = 0; v < V; v++)
            rows[(size_t)i * V + v] = l[v];
    }
    int n_rows = n_prompt;
    for (int g = 0; g < n_gen; g++) {
        gen[g] = argmax(rows + (size_t)(n_rows - 1) * V, V);
        if (g == n_gen - 1)
            break;
        b.token[0] = gen[g];
        b.pos[0] = n_rows;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        b.n_tokens = 1;
        if (llama_decode(ctx, b)) {
            fprintf(stderr, "decode failed at step %d\n", g);
            return 1;
        }
        const float *l = llama_get_logits_ith(ctx, 0);
        for (int v = 0; v < V; v++)
            rows[(size_t)n_rows * V + v] = l[v];
        n_rows++;
    }
    printf("greedy");
    for (int g = 0; g < n_gen; g++)
        printf("\t%d", gen[g]);
    printf("\n");
    for (int i = 0; i < n_rows; i++)
        print_row(i, rows + (size_t)i * V, V);
    free(rows);
    free(gen);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
