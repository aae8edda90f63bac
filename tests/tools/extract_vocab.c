/*
 * extract_vocab.c: writes a GGUF file holding only the metadata of a model (architecture,
 * hyper-parameters, tokenizer), no tensors: a small fixture with which tokenizer tests run
 * without the model's weights. Built and run by scripts/make-vocab-fixture.sh.
 */
#include "gguf/gguf.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: extract_vocab MODEL.gguf OUT.gguf\n");
        return 2;
    }
    gguf_file *f;
    if (seer_gguf_file_open(argv[1], &f) != SEER_OK) {
        fprintf(stderr, "extract_vocab: %s\n", seer_last_error());
        return 1;
    }
    gguf_writer *w = seer_gguf_writer_init();
    /* everything but general.* (licences, URLs, alignment), keeping the architecture */
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const char *k = f->kv[i].key;
        if (strncmp(k, "general.", 8) || !strcmp(k, "general.architecture") || !strcmp(k, "general.name"))
            seer_gguf_writer_set_value(w, k, &f->kv[i].val);
    }
    seer_status s = seer_gguf_writer_write(w, argv[2]);
    seer_gguf_writer_free(w);
    seer_gguf_file_close(f);
    if (s != SEER_OK) {
        fprintf(stderr, "extract_vocab: %s\n", seer_last_error());
        return 1;
    }
    return 0;
}
