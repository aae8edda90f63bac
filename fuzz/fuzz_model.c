/*
 * fuzz_model.c: libFuzzer target for model loading: metadata -> hyper-parameters ->
 * vocabulary -> weight binding, on the CPU backend with one thread.
 *
 * The input is a GGUF file; it is written to a file (seer_model_load takes a path) and
 * loaded. Loading must either fail with a message or give a model whose info is
 * consistent; a model that loads then runs a forward call of two tokens in a context of 8
 * (every shape the hyper-parameters promised is used once), tokenizes a short text and
 * detokenizes the ids. The input size (scripts/fuzz.sh: -max_len) bounds every tensor, and
 * -malloc_limit_mb catches a header that makes the loader allocate more than the file
 * justifies. Not for: numerical checks (tests/test_model.c).
 */
#include "seer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_path[64];

static void remove_file(void) { unlink(g_path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(g_path, sizeof g_path, "/tmp/seer-fuzz-model-%d.gguf", (int)getpid());
    atexit(remove_file);
    return 0;
}

static void run(seer_model *m) {
    seer_model_info in;
    seer_model_get_info(m, &in);
    if (in.n_vocab < 1 || in.dim < 1 || in.n_layers < 1 || in.n_heads < 1 || in.n_kv_heads < 1 ||
        in.head_dim < 1 || seer_n_vocab(m) != in.n_vocab)
        abort(); /* a model that loads has usable dimensions */
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 8;
    cp.n_seq_max = 1;
    cp.n_batch_max = 8;
    cp.page_size = 4;
    seer_context *ctx = NULL;
    if (seer_context_init(m, cp, &ctx) != SEER_OK)
        return;
    seer_seq_id sq;
    if (seer_seq_new(ctx, &sq) == SEER_OK) {
        int32_t tok[2] = {0, in.n_vocab - 1}, pos[2] = {0, 1};
        seer_seq_id seqs[2] = {sq, sq};
        uint8_t want[2] = {0, 1};
        float *logits = malloc(sizeof *logits * (size_t)in.n_vocab);
        seer_batch b = {.n_tokens = 2, .token = tok, .seq = seqs, .pos = pos, .logits = want};
        if (logits && seer_decode(ctx, &b, logits) == SEER_OK && seer_seq_len(ctx, sq) != 2)
            abort();
        free(logits);
    }
    seer_context_free(ctx);

    int32_t ids[64];
    int n = 0;
    if (seer_tokenize(m, "Hello, world! 123", 17, true, true, ids, 64, &n) == SEER_OK) {
        seer_detok *d = NULL;
        if (seer_detok_init(m, &d) == SEER_OK) {
            char buf[1 << 12];
            for (int i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= in.n_vocab)
                    abort();
                else
                    (void)seer_detok_push(d, ids[i], buf, sizeof buf);
            (void)seer_detok_flush(d, buf, sizeof buf);
        }
        seer_detok_free(d);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(g_path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 1;
    seer_model *m = (seer_model *)0x1;
    seer_status s = seer_model_load(g_path, mp, &m);
    if (s != SEER_OK) {
        if (m || !seer_last_error()[0])
            abort(); /* a failure leaves *out NULL and says why */
        return 0;
    }
    run(m);
    seer_model_free(m);
    return 0;
}
