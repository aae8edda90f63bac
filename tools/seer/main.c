/* main.c: the seer command-line tool: dispatch to subcommands and shared helpers. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno) {
        fprintf(stderr, "seer: %s: '%s' is not an integer\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "seer: %s: %lld is out of range [%lld, %lld]\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) {
        fprintf(stderr, "seer: %s: '%s' is not a number\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "seer: %s: %g is out of range [%g, %g]\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

void cli_error(const char *what, seer_status s) {
    fprintf(stderr, "seer: %s: %s (%s)\n", what, seer_last_error(), seer_status_str(s));
}

bool cli_weights(const char *s, seer_weights_kind *out) {
    if (!strcmp(s, "stored"))
        *out = SEER_WEIGHTS_STORED;
    else if (!strcmp(s, "bf16"))
        *out = SEER_WEIGHTS_BF16;
    else if (!strcmp(s, "f32"))
        *out = SEER_WEIGHTS_F32;
    else {
        fprintf(stderr, "seer: --weights: '%s' is not one of stored, bf16, f32\n", s);
        return false;
    }
    return true;
}

bool cli_spec_weights(const char *cmd, const char *type, seer_spec_params *spec) {
    if (!type)
        return true;
    if (strcmp(type, "q8_0") && strcmp(type, "q4_0")) {
        fprintf(stderr, "seer %s: --spec-weights: '%s' is not one of q8_0, q4_0\n", cmd, type);
        return false;
    }
    seer_spec_kind_info in;
    /* auto: its sparse self-drafts' steps */
    if (spec->kind == SEER_SPEC_AUTO || (spec_kinds_info(spec->kind, &in) && in.draft_weights)) {
        spec->draft_weights = true;
        return true;
    }
    char list[512];
    spec_kinds_list(list, sizeof list, SPEC_KINDS_DRAFT_WEIGHTS);
    fprintf(stderr, "seer %s: --spec-weights goes with --spec auto or one of %s (or tree over one of them)\n", cmd,
            list);
    return false;
}

bool cli_backend(const char *s, seer_backend_kind *out) {
    if (!strcmp(s, "cpu"))
        *out = SEER_BACKEND_CPU;
    else if (!strcmp(s, "cuda"))
        *out = SEER_BACKEND_CUDA;
    else if (!strcmp(s, "auto"))
        *out = SEER_BACKEND_AUTO;
    else {
        fprintf(stderr, "seer: --backend: '%s' is not one of cpu, cuda, auto\n", s);
        return false;
    }
    return true;
}

bool cli_ctx_ok(long long ctx, int ctx_train, bool beyond) {
    if (ctx <= ctx_train)
        return true;
    if (!beyond) {
        fprintf(stderr,
                "seer: --ctx %lld is beyond the model's trained context (%d tokens); pass "
                "--ctx-beyond-trained to use it anyway\n",
                ctx, ctx_train);
        return false;
    }
    fprintf(stderr,
            "seer: warning: --ctx %lld is beyond the model's trained context (%d tokens); text "
            "past %d tokens may be poor\n",
            ctx, ctx_train, ctx_train);
    return true;
}

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool cli_spec_kind(const char *arg, seer_spec_kind *kind, cli_tree *t) {
    if (!strcmp(arg, "tree")) {
        t->on = true;
        return true;
    }
    t->on = false;
    if (seer_spec_kind_parse(arg, kind) != SEER_OK) {
        fprintf(stderr, "seer: --spec: %s, or tree\n", seer_last_error());
        return false;
    }
    return true;
}

/* Whether kind k may be the hierarchy's middle level. */
static bool hier_base(seer_spec_kind k) {
    seer_spec_kind_info in;
    return spec_kinds_info(k, &in) && in.hier_base;
}

bool cli_draft_model_ok(const char *cmd, seer_spec_kind kind, const char *draft_model) {
    seer_spec_kind_info in;
    if (draft_model || !spec_kinds_info(kind, &in) || !in.needs_draft_model)
        return true;
    fprintf(stderr, "seer %s: --spec %s needs --draft-model\n", cmd, in.name);
    return false;
}

/* A setting given that means something only with its drafter's kind, with another: false
 * after a message. */
static bool own_only_ok(const cli_common *c) {
    seer_spec_option so;
    for (int i = 0; i < 64 && seer_spec_option_at(i, &so); i++) {
        seer_spec_kind k;
        if (!(c->spec_set >> i & 1) || !so.own_only || seer_spec_kind_parse(so.drafter, &k) != SEER_OK ||
            (k == c->spec.kind && !c->tree.on))
            continue;
        fprintf(stderr, "seer: --%s goes with --spec %s\n", so.flag, so.drafter);
        return false;
    }
    return true;
}

double cli_spec_num(const seer_spec_params *spec, const char *name) {
    double v = 0;
    return seer_spec_get(spec, name, &v) == SEER_OK ? v : 0;
}

bool cli_spec_quantkv(const seer_spec_params *spec) {
    return spec->kind == SEER_SPEC_QUANTKV ||
           (spec->kind == SEER_SPEC_HIERARCHY && (int)cli_spec_num(spec, "hier_base") == SEER_SPEC_QUANTKV);
}

bool cli_tree_apply(cli_common *c) {
    const cli_tree *t = &c->tree;
    seer_spec_params *spec = &c->spec;
    if (!own_only_ok(c))
        return false;
    if (spec->kind == SEER_SPEC_HIERARCHY && !t->on) {
        if (t->size || t->depth || t->replan) {
            fprintf(stderr, "seer: --spec hierarchy proposes chains: no --spec-tree-*\n");
            return false;
        }
        if (t->base_set && !hier_base(t->base)) {
            char list[512];
            spec_kinds_list(list, sizeof list, SPEC_KINDS_HIER_BASE);
            fprintf(stderr, "seer: --spec-base: the hierarchy's middle level is one of %s\n", list);
            return false;
        }
        if (t->base_set && seer_spec_set_num(spec, "hier_base", t->base) != SEER_OK) {
            fprintf(stderr, "seer: --spec-base: %s\n", seer_last_error());
            return false;
        }
        return true;
    }
    if (!t->on) {
        if (t->base_set || t->size || t->depth || t->replan) {
            fprintf(stderr, "seer: --spec-base and --spec-tree-* go with --spec tree (--spec-base also with --spec hierarchy)\n");
            return false;
        }
        return true;
    }
    spec->kind = t->base_set ? t->base : SEER_SPEC_STREAMING;
    spec->tree_size = t->size ? t->size : 8;
    spec->tree_depth = t->depth ? t->depth : spec->gamma;
    spec->tree_replan = t->replan;
    double best_first = 0;
    (void)seer_spec_get(spec, "draft-best-first", &best_first);
    if (spec->tree_size > 64 && !(best_first > 0)) {
        fprintf(stderr, "seer: --spec-tree-size: %d is out of range [1, 64] (up to 4096 with --draft-best-first)\n",
                spec->tree_size);
        return false;
    }
    if (spec->tree_size < 0 && spec->tree_depth > SEER_TREE_AUTO_MAX && !(best_first > 0)) {
        fprintf(stderr, "seer: --spec-tree-depth %d: an automatic size plans at most %d nodes\n", spec->tree_depth,
                SEER_TREE_AUTO_MAX);
        return false;
    }
    if (spec->tree_size > 0 && spec->tree_depth > spec->tree_size) {
        fprintf(stderr, "seer: --spec-tree-depth %d exceeds the tree's %d nodes\n", spec->tree_depth, spec->tree_size);
        return false;
    }
    return true;
}

int cli_detok_append(seer_detok *dt, int32_t token, bool flush, cli_text *t) {
    /* seer_detok_push returns -1 when the text does not fit (consuming nothing): the room
     * doubles until it does. A piece is at most a GGUF string, so 1 GiB ends the loop. */
    for (size_t room = 256; room <= ((size_t)1 << 30); room *= 2) {
        if (t->cap - t->n < room) {
            size_t cap = t->n + room;
            char *s = realloc(t->s, cap);
            if (!s)
                break;
            t->s = s;
            t->cap = cap;
        }
        const int k = flush ? seer_detok_flush(dt, t->s + t->n, (int)(t->cap - t->n))
                            : seer_detok_push(dt, token, t->s + t->n, (int)(t->cap - t->n));
        if (k >= 0) {
            t->n += (size_t)k;
            return k;
        }
    }
    fprintf(stderr, "seer: out of memory for the generated text\n");
    return -1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: seer <command> [options]\n"
            "\n"
            "commands:\n"
            "  generate   generate text from a prompt (seer generate --help)\n"
            "  chat       talk with an instruct model, one message per line (seer chat --help)\n"
            "  info       describe a GGUF model file\n"
            "  gen-model  write a GGUF model with random weights of a given shape\n"
            "  bench      decode speed against the memory-bandwidth floor (seer bench --help)\n"
            "  perplexity a KV type's cost in quality: perplexity and greedy agreement with bf16 KV\n"
            "  serve      an OpenAI-compatible HTTP server (seer serve --help)\n"
            "  worker     one rank of --tp in a process of its own (seer worker --help)\n");
}

int main(int argc, char **argv) {
    /* NCCL's NVLink multicast (tensor parallelism) reserves device memory per communicator for
     * little gain at seer's message sizes, and some shared machines forbid it: off unless the
     * user set it. NCCL reads its environment when it first initialises, after this. */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate"))
        return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat"))
        return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "info"))
        return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "gen-model"))
        return cmd_gen_model(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "perplexity"))
        return cmd_perplexity(argc - 1, argv + 1);
    if (!strcmp(cmd, "worker"))
        return cmd_worker(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) {
#ifdef SEER_HAVE_SERVE
        return cmd_serve(argc - 1, argv + 1);
#else
        fprintf(stderr, "seer serve: this build has no HTTP server (libmicrohttpd-dev was not "
                        "installed when it was configured: scripts/install-deps.sh installs it)\n");
        return 1;
#endif
    }
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "seer: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
