/*
 * cmd_info.c: `seer info MODEL.gguf`: what a GGUF file holds, without loading weights.
 * Every name and string that comes from the file is printed through seer_text_escape, so
 * a hostile file cannot send control sequences to the terminal.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool meta = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--meta"))
            meta = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: seer info MODEL.gguf [--meta]\n  --meta  also list every metadata entry\n");
            return 0;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "seer info: unexpected argument '%s'\nusage: seer info MODEL.gguf [--meta]\n", argv[i]);
            return 2;
        } else
            path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: seer info MODEL.gguf [--meta]\n");
        return 2;
    }
    seer_gguf *g;
    seer_status s = seer_gguf_open(path, &g);
    if (s != SEER_OK) {
        cli_error("reading model", s);
        return 1;
    }
    seer_model_params mp = seer_model_default_params();
    mp.vocab_only = true;
    seer_model *m = NULL;
    s = seer_model_load(path, mp, &m);

    char e1[1024], e2[1024];
    printf("file          %s\n", seer_text_escape(path, e1, sizeof e1));
    printf("gguf version  %d, %d metadata entries, %d tensors\n", seer_gguf_version(g), seer_gguf_n_kv(g),
           seer_gguf_n_tensors(g));
    uint64_t n_params = 0, n_bytes = 0;
    for (int i = 0; i < seer_gguf_n_tensors(g); i++) {
        seer_tensor_info t;
        seer_gguf_tensor(g, i, &t);
        n_params += t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
        n_bytes += t.nbytes;
    }
    if (s == SEER_OK) {
        seer_model_info in;
        seer_model_get_info(m, &in);
        printf("file size     %.2f MiB\n", in.file_size / 1048576.0);
        printf("name          %s\n", in.name[0] ? seer_text_escape(in.name, e1, sizeof e1) : "(none)");
        printf("architecture  %s\n", seer_text_escape(in.arch, e1, sizeof e1));
        printf("parameters    %" PRIu64 " (%.2f MiB of tensor data)\n", n_params, n_bytes / 1048576.0);
        printf("dim           %d\n", in.dim);
        printf("layers        %d\n", in.n_layers);
        printf("heads         %d query, %d kv (head dim %d)\n", in.n_heads, in.n_kv_heads, in.head_dim);
        printf("ffn dim       %d\n", in.ffn_dim);
        printf("context       %d\n", in.ctx_train);
        printf("kv copy       %.2f / %.2f KiB per token at 4 / 8 bits (--spec quantkv)\n",
               seer_kv_quant_bytes_per_token(m, 4) / 1024.0, seer_kv_quant_bytes_per_token(m, 8) / 1024.0);
        printf("rope          base %g, %s pairs\n", in.rope_base, in.rope_neox ? "half-split (neox)" : "adjacent");
        printf("rms eps       %g\n", in.norm_eps);
        printf("tokenizer     %s, %d tokens (bos %d, eos %d)\n", seer_text_escape(in.tokenizer, e1, sizeof e1),
               in.n_vocab, in.token_bos,
               in.token_eos);
        seer_model_free(m);
    } else {
        printf("model         not loadable: %s\n", seer_last_error());
    }
    if (meta) {
        printf("\nmetadata:\n");
        char buf[512];
        for (int i = 0; i < seer_gguf_n_kv(g); i++) {
            seer_gguf_value_text(g, i, buf, sizeof buf);
            printf("  %-44s %s\n", seer_text_escape(seer_gguf_key(g, i), e1, sizeof e1),
                   seer_text_escape(buf, e2, sizeof e2));
        }
    }
    printf("\n%-36s %-6s %-24s %12s\n", "tensor", "type", "shape", "bytes");
    for (int i = 0; i < seer_gguf_n_tensors(g); i++) {
        seer_tensor_info t;
        seer_gguf_tensor(g, i, &t);
        char shape[64];
        int k = snprintf(shape, sizeof shape, "[%" PRIu64, t.ne[0]);
        for (int d = 1; d < t.n_dims; d++)
            k += snprintf(shape + k, sizeof shape - k, ", %" PRIu64, t.ne[d]);
        snprintf(shape + k, sizeof shape - k, "]");
        printf("%-36s %-6s %-24s %12" PRIu64 "\n", seer_text_escape(t.name, e1, sizeof e1), t.type, shape,
               t.nbytes);
    }
    seer_gguf_close(g);
    return s == SEER_OK ? 0 : 1;
}
