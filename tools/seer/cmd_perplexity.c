/*
 * cmd_perplexity.c: `seer perplexity`: what a KV type (--kv-type) costs in quality. Over the
 * first --ctx tokens of a text, in one sequence (each token attends to every earlier one, so
 * the KV rows of the whole window are read), the perplexity with full-precision KV and with
 * each type asked for; then, from the text's first --prompt tokens, --greedy tokens of plain
 * greedy decoding with each type against full precision: the first position where they part
 * and the share of positions that agree. docs/benchmarks.md's KV quality numbers come from it.
 * Not for: speed (seer bench).
 */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: seer perplexity -m MODEL.gguf -f TEXT [options]\n"
               "  --kv-type T,...    KV types to compare with bf16: q8, q4 (default q8,q4)\n"
               "  -c, --ctx N        tokens of the text scored (default 2048)\n"
               "  --greedy N         greedy tokens compared with bf16 KV (default 256; 0: none)\n"
               "  --prompt N         the text's leading tokens the greedy run continues (default 128)\n"
               "  -t, --threads N    CPU threads (default all)\n"
               "  --backend cpu|cuda (default: cuda when there is a GPU)\n");
}

enum { BATCH = 128 };

/* Mean negative log-likelihood of tok[1..n) given the tokens before, in one sequence. */
static seer_status score(seer_model *m, seer_kv_type type, const int32_t *tok, int n, double *nll) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = n;
    cp.n_batch_max = BATCH;
    cp.kv_type = type;
    seer_context *c = NULL;
    seer_status s = seer_context_init(m, cp, &c);
    const int V = seer_n_vocab(m);
    float *logits = s == SEER_OK ? malloc(sizeof(float) * (size_t)BATCH * V) : NULL;
    int32_t seq[BATCH] = {0}, pos[BATCH];
    uint8_t want[BATCH];
    memset(want, 1, sizeof want);
    seer_seq_id id = 0;
    if (s == SEER_OK && !logits)
        s = SEER_ERR_OOM;
    if (s == SEER_OK)
        s = seer_seq_new(c, &id);
    double sum = 0;
    for (int i0 = 0; s == SEER_OK && i0 < n - 1; i0 += BATCH) {
        const int T = n - 1 - i0 < BATCH ? n - 1 - i0 : BATCH;
        for (int j = 0; j < T; j++)
            seq[j] = id, pos[j] = i0 + j;
        seer_batch b = {.n_tokens = T, .token = tok + i0, .seq = seq, .pos = pos, .logits = want};
        s = seer_decode(c, &b, logits);
        for (int j = 0; s == SEER_OK && j < T; j++) {
            const float *l = logits + (size_t)j * V;
            double mx = -INFINITY, z = 0;
            for (int v = 0; v < V; v++)
                mx = l[v] > mx ? l[v] : mx;
            for (int v = 0; v < V; v++)
                z += exp(l[v] - mx);
            sum += mx + log(z) - l[tok[i0 + j + 1]];
        }
    }
    *nll = sum / (n - 1);
    free(logits);
    seer_context_free(c);
    return s;
}

/* n_gen tokens of greedy decoding after prompt [np] into out. */
static seer_status greedy(seer_model *m, seer_kv_type type, const int32_t *prompt, int np, int n_gen, int32_t *out) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = np + n_gen;
    cp.n_batch_max = BATCH;
    cp.kv_type = type;
    seer_context *c = NULL;
    seer_status s = seer_context_init(m, cp, &c);
    const int V = seer_n_vocab(m);
    float *logits = s == SEER_OK ? malloc(sizeof(float) * V) : NULL;
    seer_seq_id id = 0;
    if (s == SEER_OK && !logits)
        s = SEER_ERR_OOM;
    if (s == SEER_OK)
        s = seer_seq_new(c, &id);
    int32_t seq[BATCH] = {0}, pos[BATCH];
    uint8_t want[BATCH] = {0};
    for (int i0 = 0; s == SEER_OK && i0 < np; i0 += BATCH) { /* the prompt, logits of its last token */
        const int T = np - i0 < BATCH ? np - i0 : BATCH;
        for (int j = 0; j < T; j++)
            seq[j] = id, pos[j] = i0 + j, want[j] = i0 + j == np - 1;
        seer_batch b = {.n_tokens = T, .token = prompt + i0, .seq = seq, .pos = pos, .logits = want};
        s = seer_decode(c, &b, logits);
    }
    for (int i = 0; s == SEER_OK && i < n_gen; i++) {
        out[i] = 0; /* the argmax, ties to the lowest id */
        for (int v = 1; v < V; v++)
            out[i] = logits[v] > logits[out[i]] ? v : out[i];
        if (i + 1 == n_gen)
            break;
        int32_t p = np + i;
        uint8_t w = 1;
        seer_batch b = {.n_tokens = 1, .token = &out[i], .seq = &id, .pos = &p, .logits = &w};
        s = seer_decode(c, &b, logits);
    }
    free(logits);
    seer_context_free(c);
    return s;
}

/* The types named in a comma-separated list (bf16 is always the reference, first). */
static int parse_types(const char *arg, seer_kv_type *types) {
    int n = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *tok = strtok(buf, ","); tok && n < 4; tok = strtok(NULL, ","))
        if (seer_kv_type_parse(tok, &types[n++]) != SEER_OK)
            return -1;
    return n;
}

int cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL;
    long long ctx = 2048, n_greedy = 256, n_prompt = 128, threads = 0;
    seer_kv_type types[4] = {SEER_KV_Q8, SEER_KV_Q4};
    int n_types = 2;
    seer_model_params mp = seer_model_default_params();
    enum { O_KV = 256, O_GREEDY, O_PROMPT, O_BACKEND };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},  {"file", required_argument, 0, 'f'},
        {"ctx", required_argument, 0, 'c'},    {"threads", required_argument, 0, 't'},
        {"kv-type", required_argument, 0, O_KV}, {"greedy", required_argument, 0, O_GREEDY},
        {"prompt", required_argument, 0, O_PROMPT}, {"backend", required_argument, 0, O_BACKEND},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "m:f:c:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'f': text_path = optarg; break;
        case 'c': if (!cli_int("--ctx", optarg, 2, 1 << 20, &ctx)) return 2; break;
        case 't': if (!cli_int("--threads", optarg, 0, 1024, &threads)) return 2; break;
        case O_GREEDY: if (!cli_int("--greedy", optarg, 0, 1 << 16, &n_greedy)) return 2; break;
        case O_PROMPT: if (!cli_int("--prompt", optarg, 1, 1 << 20, &n_prompt)) return 2; break;
        case O_BACKEND: if (!cli_backend(optarg, &mp.backend)) return 2; break;
        case O_KV:
            if ((n_types = parse_types(optarg, types)) < 1) {
                fprintf(stderr, "seer perplexity: --kv-type takes a list of bf16, q8, q4\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model_path || !text_path || optind < argc) {
        usage(stderr);
        return 2;
    }
    FILE *f = fopen(text_path, "rb");
    if (!f) {
        fprintf(stderr, "seer perplexity: cannot open %s\n", text_path);
        return 1;
    }
    /* a few bytes per token are plenty: read at most 16 per token wanted */
    const size_t cap = (size_t)ctx * 16;
    char *text = malloc(cap + 1);
    size_t len = text ? fread(text, 1, cap, f) : 0;
    fclose(f);
    mp.n_threads = (int)threads;
    seer_model *m = NULL;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(ctx + n_greedy + 1) * 16);
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)(n_greedy + 1) * 5);
    int rc = 1, n_tok = 0;
    if (!text || !tok || !gen) {
        fprintf(stderr, "seer perplexity: out of memory\n");
        free(text), free(tok), free(gen);
        return 1;
    }
    seer_status s = seer_model_load(model_path, mp, &m);
    if (s == SEER_OK) {
        text[len] = 0;
        s = seer_tokenize(m, text, len, true, false, tok, (int)(ctx + n_greedy + 1) * 16, &n_tok);
    }
    if (s == SEER_OK && n_tok < ctx) {
        fprintf(stderr, "seer perplexity: %s holds %d tokens, fewer than --ctx %lld\n", text_path, n_tok, ctx);
        goto done;
    }
    if (s == SEER_OK && n_prompt > ctx) {
        fprintf(stderr, "seer perplexity: --prompt %lld is longer than --ctx %lld\n", n_prompt, ctx);
        goto done;
    }
    printf("%-6s %12s %10s %18s %12s\n", "kv", "tokens", "ppl", "greedy_first_diff", "greedy_agree");
    for (int t = -1; s == SEER_OK && t < n_types; t++) {
        const seer_kv_type type = t < 0 ? SEER_KV_FULL : types[t];
        double nll = 0;
        if ((s = score(m, type, tok, (int)ctx, &nll)) != SEER_OK)
            break;
        int32_t *g = gen + (size_t)(t + 1) * (n_greedy + 1);
        int first = (int)n_greedy, agree = 0;
        if (n_greedy && (s = greedy(m, type, tok, (int)n_prompt, (int)n_greedy, g)) != SEER_OK)
            break;
        for (int i = 0; i < n_greedy; i++) {
            agree += g[i] == gen[i];
            if (g[i] != gen[i] && first == n_greedy)
                first = i;
        }
        printf("%-6s %12lld %10.4f %18d %11.1f%%\n", seer_kv_type_name(type), ctx - 1, exp(nll), first,
               n_greedy ? 100.0 * agree / n_greedy : 0.0);
        fflush(stdout);
    }
    if (s == SEER_OK)
        rc = 0;
    else
        fprintf(stderr, "seer perplexity: %s\n", s == SEER_ERR_OOM && !m ? "out of memory" : seer_last_error());
done:
    seer_model_free(m);
    free(text), free(tok), free(gen);
    return rc;
}
