/* cmd_gen_model.c: `seer gen-model`: a GGUF file with random weights of a chosen shape. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: seer gen-model -o OUT.gguf [options]\n"
            "  --arch llama|qwen2|qwen3|gemma2|gemma3|phi3 (default llama)\n"
            "  --window N           sliding window of the windowed layers (gemma2: default 4096;\n"
            "                       gemma3: default none)\n"
            "  --rope-scaling none|linear|yarn|longrope  (longrope: random factor tables)\n"
            "  --rope-factor F --rope-orig-ctx N --rope-attn-factor F\n"
            "  --vocab N            (default 512, at least 259)\n"
            "  --dim N --layers N --heads N --kv-heads N --ffn N --head-dim N\n"
            "  --ctx N              trained context length (default 2048)\n"
            "  --rope-base F        (default 10000)\n"
            "  --dtype T            f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k,\n"
            "                       q6_k, or llama.cpp's mixes q4_k_m, q5_k_m (default f32)\n"
            "  --tied               share the output projection with the embedding\n"
            "  --seed N             (default 1)\n"
            "  --scale F            std of the weights (default 1/sqrt(fan-in))\n");
}

int cmd_gen_model(int argc, char **argv) {
    seer_gen_params p = seer_gen_default_params();
    const char *outp = NULL;
    enum { O_ARCH = 256, O_VOCAB, O_DIM, O_LAYERS, O_HEADS, O_KV, O_FFN, O_HD, O_CTX, O_ROPE, O_DTYPE, O_TIED, O_SEED, O_SCALE, O_WINDOW,
           O_RS, O_RF, O_RO, O_RA };
    static const struct option opts[] = {
        {"arch", required_argument, 0, O_ARCH},     {"vocab", required_argument, 0, O_VOCAB},
        {"dim", required_argument, 0, O_DIM},       {"layers", required_argument, 0, O_LAYERS},
        {"heads", required_argument, 0, O_HEADS},   {"kv-heads", required_argument, 0, O_KV},
        {"ffn", required_argument, 0, O_FFN},       {"head-dim", required_argument, 0, O_HD},
        {"ctx", required_argument, 0, O_CTX},       {"rope-base", required_argument, 0, O_ROPE},
        {"dtype", required_argument, 0, O_DTYPE},   {"tied", no_argument, 0, O_TIED},
        {"seed", required_argument, 0, O_SEED},     {"scale", required_argument, 0, O_SCALE},
        {"window", required_argument, 0, O_WINDOW}, {"output", required_argument, 0, 'o'},
        {"rope-scaling", required_argument, 0, O_RS}, {"rope-factor", required_argument, 0, O_RF},
        {"rope-orig-ctx", required_argument, 0, O_RO}, {"rope-attn-factor", required_argument, 0, O_RA},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    long long v;
    double d;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': outp = optarg; break;
        case O_ARCH: p.arch = optarg; break;
        case O_VOCAB: if (!cli_int("--vocab", optarg, 1, 1 << 22, &v)) return 2; p.n_vocab = (int)v; break;
        case O_DIM: if (!cli_int("--dim", optarg, 1, 1 << 16, &v)) return 2; p.dim = (int)v; break;
        case O_LAYERS: if (!cli_int("--layers", optarg, 1, 1024, &v)) return 2; p.n_layers = (int)v; break;
        case O_HEADS: if (!cli_int("--heads", optarg, 1, 1024, &v)) return 2; p.n_heads = (int)v; break;
        case O_KV: if (!cli_int("--kv-heads", optarg, 1, 1024, &v)) return 2; p.n_kv_heads = (int)v; break;
        case O_FFN: if (!cli_int("--ffn", optarg, 1, 1 << 18, &v)) return 2; p.ffn_dim = (int)v; break;
        case O_HD: if (!cli_int("--head-dim", optarg, 2, 1024, &v)) return 2; p.head_dim = (int)v; break;
        case O_CTX: if (!cli_int("--ctx", optarg, 1, 1 << 24, &v)) return 2; p.ctx = (int)v; break;
        case O_ROPE: if (!cli_float("--rope-base", optarg, 1, 1e9, &d)) return 2; p.rope_base = (float)d; break;
        case O_DTYPE: p.dtype = optarg; break;
        case O_TIED: p.tied = true; break;
        case O_SEED: if (!cli_int("--seed", optarg, 0, INT64_MAX, &v)) return 2; p.seed = (uint64_t)v; break;
        case O_SCALE: if (!cli_float("--scale", optarg, 0, 100, &d)) return 2; p.scale = (float)d; break;
        case O_WINDOW: if (!cli_int("--window", optarg, 0, 1 << 24, &v)) return 2; p.window = (int)v; break;
        case O_RS: p.rope_scaling = optarg; break;
        case O_RF: if (!cli_float("--rope-factor", optarg, 0, 1e6, &d)) return 2; p.rope_factor = (float)d; break;
        case O_RO: if (!cli_int("--rope-orig-ctx", optarg, 0, 1 << 24, &v)) return 2; p.rope_orig_ctx = (int)v; break;
        case O_RA: if (!cli_float("--rope-attn-factor", optarg, 0, 1e6, &d)) return 2; p.rope_attn_factor = (float)d; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !outp) {
        usage(stderr);
        return 2;
    }
    seer_status s = seer_gen_model(&p, outp);
    if (s != SEER_OK) {
        cli_error("gen-model", s);
        return 1;
    }
    return 0;
}
