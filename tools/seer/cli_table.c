/*
 * cli_table.c: the one table of the options of `seer generate`, `chat`, `serve` and `bench`
 * (cli_opts.h): per option its name, argument, help, the commands that take it and where its
 * value goes. The help of each command is these rows in this order; an option whose help or
 * range differs between commands has a row per variant. The drafters' settings are not here:
 * they come from the library's registry (cli_help_spec_options, cli_parse).
 *
 * Not for: parsing (cli_opts.c) or checks between options (cmd_*.c, main.c).
 */
#include "bench.h"
#include "cli.h"
#include "cli_cmds.h"

#include <string.h>

#define COMMON(f) CLI_D_COMMON, offsetof(cli_common, f)
#define GEN(f) CLI_D_CMD, offsetof(gen_opts, f)
#define SERVE(f) CLI_D_CMD, offsetof(serve_opts, f)
#define BENCH(f) CLI_D_CMD, offsetof(bench_opts, f)
#define NOWHERE CLI_D_COMMON, 0
/* A line of help for the commands cmds. */
#define TEXT(cmds, text) {(cmds), NULL, 0, NULL, CLI_V_TEXT, NOWHERE, 0, 0, 0, 0, NULL, (text), NULL}
/* An integer or real option stored at dest (COMMON(f), GEN(f) ...) within [lo, hi]. */
#define INT(cmds, name, sc, meta, type, dest, lo, hi, help) \
    {(cmds), (name), (sc), (meta), (type), dest, (lo), (hi), 0, 0, NULL, (help), NULL}
#define REAL(cmds, name, meta, type, dest, lo, hi, help) \
    {(cmds), (name), 0, (meta), (type), dest, 0, 0, (lo), (hi), NULL, (help), NULL}
#define STR(cmds, name, sc, meta, dest, help) {(cmds), (name), (sc), (meta), CLI_V_STR, dest, 0, 0, 0, 0, NULL, (help), NULL}
#define FLAG(cmds, name, sc, dest, help) {(cmds), (name), (sc), NULL, CLI_V_FLAG, dest, 0, 0, 0, 0, NULL, (help), NULL}
#define FN(cmds, name, sc, meta, fn, help, more) \
    {(cmds), (name), (sc), (meta), CLI_V_FN, NOWHERE, 0, 0, 0, 0, (fn), (help), (more)}

/* ---- values that need more than a range ------------------------------------------------ */

static bool fn_backend(const char *a, cli_common *c, void *o) { return cli_backend(a, &c->backend); }
static bool fn_weights(const char *a, cli_common *c, void *o) { return cli_weights(a, &c->weights); }
static bool fn_spec(const char *a, cli_common *c, void *o) { return cli_spec_kind(a, &c->spec.kind, &c->tree); }

static bool fn_spec_serve(const char *a, cli_common *c, void *o) {
    char why[640]; /* the server's accepted values */
    if (spec_kinds_serve_parse(a, false, &c->spec.kind, why, sizeof why))
        return true;
    fprintf(stderr, "seer serve: --spec %s\n", why);
    return false;
}

static bool fn_spec_base(const char *a, cli_common *c, void *o) {
    if (seer_spec_kind_parse(a, &c->tree.base) != SEER_OK || c->tree.base == SEER_SPEC_NONE) {
        char list[512];
        spec_kinds_list(list, sizeof list, SPEC_KINDS_TREE_BASE);
        fprintf(stderr, "seer: --spec-base: '%s' is not one of %s\n", a, list);
        return false;
    }
    c->tree.base_set = true;
    return true;
}

static bool fn_tree_size(const char *a, cli_common *c, void *o) {
    long long v;
    if (!strcmp(a, "auto")) {
        c->tree.size = -1;
        return true;
    }
    if (!cli_int("--spec-tree-size", a, 1, 4096, &v)) /* over 64: best-first trees only (the library says) */
        return false;
    c->tree.size = (int)v;
    return true;
}

static bool fn_calibrate(const char *a, cli_common *c, void *o) {
    double sec;
    if (!cli_float("--spec-calibrate-budget", a, 0.01, 3600, &sec))
        return false;
    cli_cost_set_budget(sec);
    return true;
}

static bool fn_kv_bits(const char *a, cli_common *c, void *o) {
    if (!cli_int("--spec-kv-bits", a, 4, 8, &c->kv_bits) || (c->kv_bits != 4 && c->kv_bits != 8)) {
        fprintf(stderr, "seer: --spec-kv-bits must be 4 or 8\n");
        return false;
    }
    return true;
}

static bool fn_kv_type(const char *a, cli_common *c, void *o) {
    if (seer_kv_type_parse(a, &c->kv_type) != SEER_OK) {
        fprintf(stderr, "seer: --kv-type must be bf16, q8 or q4\n");
        return false;
    }
    return true;
}

static bool fn_api_key(const char *a, cli_common *c, void *o) {
    if (!*a) {
        fprintf(stderr, "seer serve: --api-key is empty (an unset variable?); give a key, or leave "
                        "--api-key out to serve without one\n");
        return false;
    }
    ((serve_opts *)o)->api_key = a;
    return true;
}

static bool fn_stall(const char *a, cli_common *c, void *o) {
    double *stall = &((serve_opts *)o)->stall;
    if (!cli_float("--prefill-stall", a, -1, 1000, stall))
        return false;
    if (*stall < 0 && *stall != -1) {
        fprintf(stderr, "seer serve: --prefill-stall: '%s' is neither -1 nor in (0, 1000]\n", a);
        return false;
    }
    if (*stall == 0) {
        fprintf(stderr, "seer serve: --prefill-stall: 0 would stop prompts beside streams; give a "
                        "positive ratio or -1\n");
        return false;
    }
    return true;
}

/* ---- lists from the registry in the help ---------------------------------------------- */

#define KINDS_INDENT "                          "
static void more_kinds(FILE *f, unsigned cmd) {
    spec_kinds_help(f, cmd == CLI_BENCH ? KINDS_INDENT "   " : KINDS_INDENT, SPEC_KINDS_ALL);
}
static void more_tree_base(FILE *f, unsigned cmd) { spec_kinds_help(f, KINDS_INDENT, SPEC_KINDS_TREE_BASE); }
static void more_hier_base(FILE *f, unsigned cmd) { spec_kinds_help(f, KINDS_INDENT, SPEC_KINDS_HIER_BASE); }
static void more_spec_options(FILE *f, unsigned cmd) { cli_help_spec_options(f, cmd); }

/* The fields of the server's "seer" object, wrapped at 90 columns. */
static void more_seer_fields(FILE *f, unsigned cmd) {
    static const char *const common[] = {"spec", "gamma", "tree_size", "tree_depth", "ignore_eos"};
    seer_spec_option so;
    int col = 0;
    for (int i = 0; i < 5 || seer_spec_option_at(i - 5, &so); i++) {
        const char *name = i < 5 ? common[i] : so.json;
        if (i && col + (int)strlen(name) + 4 > 90) {
            fputs(",\n", f);
            col = 0;
        } else if (i) {
            col += fprintf(f, ", ");
        }
        col += fprintf(f, "\"%s\"", name);
    }
    fputs(" (the drafters' settings\nby the names above).\n", f);
}

#define SERVE_INTRO                                                                        \
    "usage: seer serve -m MODEL.gguf [options]\n"                                          \
    "An OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions\n"       \
    "(\"stream\": true for server-sent events), GET /v1/models, /health, /metrics.\n"
#define CHAT_INTRO                                                                         \
    "usage: seer chat -m MODEL.gguf [options]\n"                                           \
    "On a terminal a message is a line: end a line with \\ to go on on the next one, or\n" \
    "write a message of many lines between \"\"\" at the start of its first line and\n"   \
    "\"\"\" at the end of its last. Piped input is one message, or several divided by\n"   \
    "lines holding only /send; its replies are divided by a blank line. A line /quit or\n" \
    "end of input (Ctrl-D) ends the chat. When the conversation outgrows the context,\n"   \
    "its oldest turns are dropped (the system message stays).\n"

const cli_opt cli_table[] = {
    TEXT(CLI_GENERATE, "usage: seer generate -m MODEL.gguf (-p PROMPT | -f FILE) [options]\n"),
    TEXT(CLI_CHAT, CHAT_INTRO),
    TEXT(CLI_SERVE, SERVE_INTRO),
    TEXT(CLI_BENCH, "usage: seer bench (--synthetic SHAPE | -m MODEL.gguf) [options]\n"),
    STR(CLI_RUNS, "model", 'm', "MODEL", COMMON(model), NULL),
    STR(CLI_GENERATE, "prompt", 'p', "PROMPT", GEN(prompt), NULL),
    STR(CLI_GENERATE, "file", 'f', "FILE", GEN(prompt_file), NULL),
    /* bench: what is measured */
    STR(CLI_BENCH, "synthetic", 0, "SHAPE", BENCH(synthetic),
        "random weights of a real shape, generated on the device:\nllama-3.1-8b, llama-3.1-70b, llama-2-7b, "
        "qwen2.5-7b, llama-3.2-1b, small, tiny,\ntiny-qwen2, qwen3-8b, gemma-3-4b, gemma-3-12b, mistral-7b,\n"
        "phi-3-mini-128k"),
    STR(CLI_BENCH, "model", 'm', "FILE", COMMON(model), "a GGUF model (its KV is filled synthetically all the same)"),
    /* serve: HTTP */
    STR(CLI_SERVE, "host", 0, "H", SERVE(host), "address to listen on (default 127.0.0.1)"),
    INT(CLI_SERVE, "port", 0, "P", CLI_V_I64, SERVE(port), 0, 65535,
        "port (default 8080; 0 = any free one, printed at start)"),
    FN(CLI_SERVE, "api-key", 0, "KEY", fn_api_key,
       "require \"Authorization: Bearer KEY\" on /v1/ routes and /metrics\n(an empty KEY is refused)", NULL),
    STR(CLI_SERVE, "cors-origin", 0, "O", SERVE(cors),
        "the origin browsers may call from: * (default, any), one origin\n(https://app.example), or none"),
    INT(CLI_SERVE, "max-body", 0, "N", CLI_V_I64, SERVE(max_body), 64, 1LL << 30,
        "largest request body in bytes (default 1048576)"),
    INT(CLI_SERVE, "max-requests", 0, "N", CLI_V_I64, SERVE(max_requests), 1, 4096,
        "most generations at once; more get 429 (default 64)"),
    INT(CLI_SERVE, "max-connections", 0, "N", CLI_V_I64, SERVE(max_conns), 1, 65536,
        "most open connections (default 1024, at least --max-requests\n+ 64); past it the oldest one still "
        "sending its request is closed"),
    INT(CLI_SERVE, "max-connections-per-client", 0, "N", CLI_V_I64, SERVE(per_client), 0, 65536,
        "most open connections of one IP address, the same\nway (default 64, at least --max-requests + 16; 0 = "
        "no limit)"),
    INT(CLI_SERVE, "header-timeout", 0, "S", CLI_V_I64, SERVE(header_timeout), 1, 3600,
        "seconds a client has to send a whole request, headers and\nbody, from its connection or previous "
        "answer (default 10)"),
    INT(CLI_SERVE, "max-prompt", 0, "N", CLI_V_I64, SERVE(max_prompt), 1, 1 << 24,
        "most prompt tokens (default: the context)"),
    STR(CLI_SERVE, "alias", 0, "NAME", SERVE(alias), "the model's id in the API (default: the file's base name)"),
    STR(CLI_SERVE, "chat-template", 0, "NAME", COMMON(chat_template),
        "chatml, llama3 or llama2 (default: from the model;\nllama2 when the model has none)"),
    /* generation */
    INT(CLI_GENERATE, "n-predict", 'n', "N", CLI_V_I64, COMMON(n_predict), -1, 1 << 24,
        "tokens to generate (default: until end of text or context)"),
    INT(CLI_CHAT, "n-predict", 'n', "N", CLI_V_I64, COMMON(n_predict), -1, 1 << 24,
        "most tokens per reply (default: until the end of the turn)"),
    INT(CLI_SERVE, "n-predict", 'n', "N", CLI_V_I64, COMMON(n_predict), 1, 1 << 24,
        "max_tokens when a request gives none (default 256)"),
    STR(CLI_CHAT, "chat-template", 0, "NAME", COMMON(chat_template),
        "chatml, llama3, llama2, gemma or phi3 (default: from the model)"),
    FLAG(CLI_CHAT, "no-think", 0, COMMON(no_think), "a model that reasons in <think> (Qwen3) answers without it"),
    STR(CLI_CHAT, "system", 0, "TEXT", COMMON(system), "a system message to start the conversation with"),
    REAL(CLI_GEN_CHAT, "temp", "T", CLI_V_F32, COMMON(sp.temperature), 0, 100, "temperature, 0 = greedy (default 0.8)"),
    INT(CLI_GEN_CHAT, "top-k", 0, "K", CLI_V_I32, COMMON(sp.top_k), 0, 1 << 24,
        "keep the K most likely tokens, 0 = off (default 40)"),
    REAL(CLI_GEN_CHAT, "top-p", "P", CLI_V_F32, COMMON(sp.top_p), 1e-9, 1, "nucleus sampling, 1 = off (default 0.95)"),
    REAL(CLI_GEN_CHAT, "min-p", "P", CLI_V_F32, COMMON(sp.min_p), 0, 1,
         "drop tokens below P * max prob, 0 = off (default 0.05)"),
    REAL(CLI_GEN_CHAT, "repeat-penalty", "R", CLI_V_F32, COMMON(sp.repeat_penalty), 1e-3, 100,
         "penalise the last --repeat-last-n tokens (default 1 = off)"),
    INT(CLI_GEN_CHAT, "repeat-last-n", 0, "N", CLI_V_I32, COMMON(sp.repeat_last_n), 0, 1 << 20,
        "tokens the penalties look back over (default 64)"),
    REAL(CLI_GEN_CHAT, "frequency-penalty", "F", CLI_V_F32, COMMON(sp.frequency_penalty), -100, 100,
         "subtract F per occurrence from the logit of a token\nin the last --repeat-last-n (default 0)"),
    REAL(CLI_GEN_CHAT, "presence-penalty", "P", CLI_V_F32, COMMON(sp.presence_penalty), -100, 100,
         "subtract P once from the logit of a token in the last\n--repeat-last-n (default 0)"),
    INT(CLI_GEN_CHAT, "seed", 0, "S", CLI_V_U64, COMMON(sp.seed), 0, INT64_MAX, "random seed (default 0)"),
    /* serve's sampling defaults: their help is the text at the end */
    REAL(CLI_SERVE, "temp", "T", CLI_V_F32, COMMON(sp.temperature), 0, 100, NULL),
    INT(CLI_SERVE, "top-k", 0, "K", CLI_V_I32, COMMON(sp.top_k), 0, 1 << 24, NULL),
    REAL(CLI_SERVE, "top-p", "P", CLI_V_F32, COMMON(sp.top_p), 1e-9, 1, NULL),
    REAL(CLI_SERVE, "min-p", "P", CLI_V_F32, COMMON(sp.min_p), 0, 1, NULL),
    REAL(CLI_SERVE, "repeat-penalty", "R", CLI_V_F32, COMMON(sp.repeat_penalty), 1e-3, 100, NULL),
    REAL(CLI_SERVE, "frequency-penalty", "F", CLI_V_F32, COMMON(sp.frequency_penalty), -100, 100, NULL),
    REAL(CLI_SERVE, "presence-penalty", "P", CLI_V_F32, COMMON(sp.presence_penalty), -100, 100, NULL),
    INT(CLI_SERVE, "seed", 0, "S", CLI_V_U64, COMMON(sp.seed), 0, INT64_MAX, NULL),
    INT(CLI_GEN_CHAT, "ctx", 'c', "N", CLI_V_I64, COMMON(ctx), 1, 1 << 24,
        "context length (default: the model's trained context, less\nwhen memory is short); the KV cache grows "
        "as it is used"),
    INT(CLI_SERVE, "ctx", 'c', "N", CLI_V_I64, COMMON(ctx), 2, 1 << 24,
        "context length per sequence (default: the trained context)"),
    FLAG(CLI_RUNS, "ctx-beyond-trained", 0, COMMON(ctx_beyond), "allow --ctx past the trained context (with a warning)"),
    INT(CLI_GENERATE, "batch", 'b', "N", CLI_V_I64, COMMON(batch), 1, 65536,
        "most tokens of one forward call: the prompt is prefilled in\nchunks of N (default 512; larger prefills "
        "faster on a GPU and\nholds N rows of every activation and of the logits)"),
    INT(CLI_SERVE, "parallel", 0, "N", CLI_V_I64, SERVE(parallel), 1, 1024, "sequences decoding at once (default 16)"),
    INT(CLI_SERVE, "batch", 0, "N", CLI_V_I64, COMMON(batch), 1, 1 << 16,
        "token budget of one forward call (default 256)"),
    INT(CLI_SERVE, "prefill-chunk", 0, "N", CLI_V_I64, SERVE(chunk), 1, 1 << 16,
        "most prompt tokens per prefill chunk (default min(256, batch))"),
    FN(CLI_SERVE, "prefill-stall", 0, "R", fn_stall,
       "beside decoding streams, read prompts in pieces that add about\nR times a stream's step, sized by the "
       "measured step times,\nso a stream's gap between tokens stays near (1 + R) times\nits idle one (default "
       "1; on CUDA while --prefill-chunk and\n--mix-max-tokens stay within 256); -1: fixed chunks",
       NULL),
    INT(CLI_SERVE, "mix-max-tokens", 0, "N", CLI_V_I64, SERVE(mix), 1, 1 << 16,
        "most tokens of a forward call that mixes requests; a larger\nprefill chunk runs alone (default: what the "
        "backend computes\nbatch-invariantly, 256 on CUDA, any on the CPU, so that greedy\noutput does not depend "
        "on the traffic; --batch: mix freely)"),
    INT(CLI_SERVE, "kv-pages", 0, "N", CLI_V_I64, SERVE(pages), 1, 1 << 24,
        "KV pool pages of 16 tokens (default: enough for every sequence)"),
    INT(CLI_SERVE, "prefix-cache", 0, "N", CLI_V_I64, SERVE(prefix), 0, 1024,
        "prompt prefixes kept for reuse, LRU (default 8; 0 = off)"),
    REAL(CLI_CHAT | CLI_SERVE, "kv-host-mem", "GB", CLI_V_F64, COMMON(kv_host_gb), 0, 1 << 20,
         "a host-memory tier of GB GiB for the KV cache (default 0: none):\npreempted requests and evicted prefix "
         "cache entries are\ncopied there and back instead of recomputed (LRU)"),
    INT(CLI_ALL, "threads", 't', "N", CLI_V_I64, COMMON(threads), 1, 1024, "CPU threads (default: all cores)"),
    INT(CLI_ALL, "tp", 0, "N", CLI_V_I64, COMMON(tp), 1, SEER_TP_MAX,
        "tensor parallelism: the model divided over N GPUs (NCCL)"),
    STR(CLI_ALL, "tp-addr", 0, "HOST:PORT", COMMON(tp_addr),
        "--tp's ranks 1..N-1 are processes of their own that connect\nhere (`seer worker --tp-addr`); this one is rank 0"),
    FLAG(CLI_ALL, "tp-procs", 0, COMMON(tp_procs),
         "start --tp's ranks 1..N-1 as processes of their own\n(`seer worker`, meeting at a free port of 127.0.0.1)"),
    INT(CLI_ALL, "gpu-layers", 0, "N", CLI_V_I64, COMMON(gpu_layers), 0, 1 << 20,
        "layers whose weights stay in GPU memory; the others stay in\nhost memory and are streamed to the GPU every forward call\n(default: every layer that fits)"),
    FN(CLI_ALL, "backend", 0, "B", fn_backend, "cpu, cuda or auto (default auto)", NULL),
    FN(CLI_ALL, "weights", 0, "W", fn_weights,
       "stored (default: quantised weights stay quantised), or\ndequantised at load: bf16 (cuda) or f32 (cpu)", NULL),
    FLAG(CLI_GENERATE, "ignore-eos", 0, GEN(ignore_eos), "keep going past end-of-text tokens"),
    FLAG(CLI_GENERATE, "no-bos", 0, GEN(no_bos), "do not prepend BOS to the prompt"),
    FLAG(CLI_GENERATE, "chat", 0, COMMON(chat), "wrap the prompt as one user message in the model's chat template"),
    STR(CLI_GENERATE, "chat-template", 0, "NAME", COMMON(chat_template),
        "chatml, llama3, llama2, gemma or phi3 instead of the model's (implies --chat)"),
    FLAG(CLI_GENERATE, "no-think", 0, COMMON(no_think),
         "a model that reasons in <think> (Qwen3) answers without it (implies --chat)"),
    STR(CLI_GENERATE, "system", 0, "TEXT", COMMON(system), "a system message before the prompt (implies --chat)"),
    FLAG(CLI_GENERATE, "json", 0, GEN(json), "print one JSON object instead of streaming text"),
    /* bench: the points measured */
    FN(CLI_BENCH, "ctx-list", 0, "L,...", bench_opt_ctx_list, "cached tokens per sequence (default 4096,32768)", NULL),
    FN(CLI_BENCH, "batch-list", 0, "B,...", bench_opt_batch_list, "sequences decoding together (default 1)", NULL),
    INT(CLI_BENCH, "steps", 0, "N", CLI_V_I32, BENCH(steps), 1, 100000,
        "timed decode steps / generator rounds per point (default 20)"),
    INT(CLI_BENCH, "warmup", 0, "N", CLI_V_I32, BENCH(warmup), 0, 100000, "untimed steps before them (default 3)"),
    FN(CLI_BENCH, "prefill", 0, "P,...", bench_opt_prefill,
       "prompt tokens of the prefill measurements, 0 = skip (default 2048)", NULL),
    INT(CLI_BENCH, "prefill-reps", 0, "N", CLI_V_I32, BENCH(prefill_reps), 1, BENCH_MAX_PREFILL_REPS,
        "timed runs per prompt size, after one warm-up (default 3; median)"),
    INT(CLI_BENCH, "prefill-chunk", 0, "N", CLI_V_I32, BENCH(prefill_chunk), 1, 65536,
        "prompt tokens per forward call of the prefill (default 2048)"),
    FN(CLI_BENCH, "resume", 0, "L,...", bench_opt_resume,
       "also time a preempted request of L cached tokens resumed by\nrecomputation against by copy from the host "
       "tier (default: none)", NULL),
    INT(CLI_BENCH, "page-size", 0, "N", CLI_V_I32, BENCH(page_size), 1, 4096, "KV page size in tokens (default 16)"),
    INT(CLI_BENCH, "seed", 0, "S", CLI_V_U64, BENCH(seed), 0, INT64_MAX, "weights, KV and tokens (default 1)"),
    /* speculation */
    TEXT(CLI_GENERATE, "speculative decoding (lossless: same output as without):\n"),
    TEXT(CLI_BENCH, "speculation (timed with SYNTHETIC ACCEPTANCE, labelled in all output):\n"),
    FN(CLI_GENERATE, "spec", 0, "KIND", fn_spec, "the speculation (default auto), one of:", more_kinds),
    FN(CLI_CHAT, "spec", 0, "KIND", fn_spec, "speculation (default auto), one of:", more_kinds),
    FN(CLI_SERVE, "spec", 0, "KIND", fn_spec_serve,
       "default speculation (default auto, its cost model calibrated at start),\none of these but those that "
       "draft with a draft model (serve has none):",
       more_kinds),
    FN(CLI_BENCH, "spec", 0, "KIND,...", bench_opt_spec_list, "the speculations timed (default none), of:",
       more_kinds),
    STR(CLI_GENERATE, "accept-trace", 0, "F", GEN(trace_file),
        "write what the drafter accepted, round by round, to F: a trace\nthat seer bench --accept-trace replays on "
        "random weights"),
    STR(CLI_RUNS, "spec-cost-file", 0, "F", COMMON(cost_file),
        "auto: the cost table's cache file (default\n$XDG_CACHE_HOME/seer/<model>@<device>.cost); calibrated when "
        "absent"),
    FN(CLI_RUNS, "spec-calibrate-budget", 0, "S", fn_calibrate,
       "auto: seconds calibration may take at most (default 10 on\nthe CPU, 2 on a GPU); cells it has no time for "
       "are estimated",
       NULL),
    INT(CLI_GEN_CHAT, "spec-gamma", 0, "G", CLI_V_I32, COMMON(spec.gamma), 1, 64, "tokens drafted per round (default 4)"),
    INT(CLI_SERVE, "spec-gamma", 0, "G", CLI_V_I32, COMMON(spec.gamma), 1, 16, "tokens drafted per round (default 4)"),
    FN(CLI_BENCH, "spec-budget-list", 0, "K,...", bench_opt_budget_list,
       "KV slots the self-draft reads (default 512)", NULL),
    FN(CLI_BENCH, "spec-gamma-list", 0, "G,...", bench_opt_gamma_list, "tokens drafted per round (default 4)", NULL),
    TEXT(CLI_GEN_CHAT, "      --spec tree       token trees over --spec-base (SpecInfer / Sequoia verification)\n"),
    FN(CLI_GEN_CHAT, "spec-base", 0, "KIND", fn_spec_base,
       "the drafter that fills the tree (default streaming), or with\n--spec hierarchy its middle level's view; "
       "trees, of:",
       more_tree_base),
    FN(CLI_GEN_CHAT, "spec-tree-size", 0, "N", fn_tree_size,
       "nodes per tree (default 8; up to 64, or 4096 with --draft-best-first);\nauto: the size and shape that pay best "
       "(Sequoia), from the acceptance\nmeasured while generating and the verification cost measured at start\n(at most "
       "32 nodes; best-first trees: up to 1024, SpecExec)",
       NULL),
    INT(CLI_BENCH, "spec-tree-size", 0, "N", CLI_V_I32, BENCH(tree_size), 1, 4096,
        "token trees of N nodes (depth: each --spec-gamma-list value):\ntimes tree drafting and tree verification "
        "(over 64 nodes: --spec draft\nwith --draft-best-first, SpecExec)"),
    INT(CLI_GEN_CHAT, "spec-tree-depth", 0, "D", CLI_V_I32, COMMON(tree.depth), 1, 64,
        "depth of a tree (default --spec-gamma)"),
    INT(CLI_GEN_CHAT, "spec-tree-replan", 0, "R", CLI_V_I32, COMMON(tree.replan), 0, 1 << 20,
        "re-plan the tree's shape every R rounds from the measured\nacceptance (Sequoia; default 0: fixed shape, 8 "
        "with auto)"),
    TEXT(CLI_GEN_CHAT, "      --spec hierarchy  TriForce's hierarchy: --draft-model drafts for the target under the\n"
                       "                        view --spec-base (default streaming), which verifies exactly and\n"
                       "                        proposes --spec-gamma tokens to the target; the views:\n"),
    {CLI_GEN_CHAT, NULL, 0, NULL, CLI_V_TEXT, NOWHERE, 0, 0, 0, 0, NULL, NULL, more_hier_base},
    STR(CLI_GEN_CHAT, "draft-model", 0, "M", COMMON(draft_model), "draft model for --spec draft (same vocabulary)"),
    FN(CLI_ALL, "kv-type", 0, "T", fn_kv_type,
       "how the KV cache stores K and V: bf16 (full precision, default),\nq8 or q4 (symmetric, a scale per head row / "
       "per 32 values;\n1.9x / 3.2x the tokens of bf16; lossy, docs/benchmarks.md)",
       NULL),
    FN(CLI_GEN_CHAT, "spec-kv-bits", 0, "B", fn_kv_bits,
       "quantkv: bits of the KV copy the draft reads, 4 or 8 (default 4)", NULL),
    FN(CLI_SERVE, "spec-kv-bits", 0, "B", fn_kv_bits,
       "keep a B-bit (4 or 8) copy of the KV cache, so that requests may\nuse quantkv (default: 4 with --spec "
       "quantkv, else none)",
       NULL),
    STR(CLI_RUNS, "spec-weights", 0, "T", COMMON(spec_weights),
        "the self-draft's steps multiply by a copy of the weights quantised\nto T (q8_0 or q4_0; made at load, from "
        "f32 or bf16 weights);\nwith auto, its sparse self-drafts' steps"),
    FN(CLI_BENCH, "spec-weights", 0, "W,...", bench_opt_weights_list,
       "the self-drafts' steps with the model's weights (none) and/or its\ndraft weights quantised to one type, "
       "q8_0 or q4_0 (default none);\nlabelled /dw; auto drafts through them when a type is listed",
       NULL),
    FN(CLI_BENCH, "synthetic-accept", 0, "A", bench_opt_alpha,
       "probability each draft token is accepted, in (0, 1) (default 0.8)", NULL),
    STR(CLI_BENCH, "draft-synthetic", 0, "SHAPE", BENCH(draft_synthetic),
        "the draft model of --spec draft and hierarchy: random weights of a\npreset (e.g. llama-3.2-1b under "
        "llama-3.1-8b: the same vocabulary)"),
    STR(CLI_BENCH, "draft-model", 0, "FILE", BENCH(draft_path), "or a GGUF draft model"),
    STR(CLI_BENCH, "accept-trace", 0, "FILE", BENCH(trace_path),
        "REPLAYED ACCEPTANCE instead: each drafter kind accepts as the\ntrace recorded from a real model (seer "
        "generate --accept-trace)\n(kinds without a line in it: --synthetic-accept)"),
    TEXT(CLI_BENCH, "  auto in --spec        every round auto's choice (plain, or a chain of G up to 16 from\n"
                    "                        the streaming view at a budget of --spec-budget-list, or n-gram,\n"
                    "                        when those are in --spec) from a cost table calibrated at the\n"
                    "                        point; shown beside the fastest fixed setting\n"),
    /* the drafters' own settings, from the registry */
    TEXT(CLI_RUNS, "drafters' settings (each declared by its drafter):\n"),
    TEXT(CLI_BENCH, "drafters' settings (as in seer generate; the budget and gamma come from the lists above;\n"
                    "on random weights the hierarchy's middle level accepts little by the exact rule):\n"),
    {CLI_ALL, NULL, 0, NULL, CLI_V_TEXT, NOWHERE, 0, 0, 0, 0, NULL, NULL, more_spec_options},
    /* serve: the rest */
    INT(CLI_SERVE, "drain-timeout", 0, "S", CLI_V_I64, SERVE(drain), 0, 86400,
        "seconds to let requests finish at SIGINT/SIGTERM/SIGHUP (default 30)"),
    FLAG(CLI_SERVE, "verbose", 'v', SERVE(verbose), "also log HTTP events: hang-ups, timeouts, evictions"),
    TEXT(CLI_SERVE, "Sampling defaults for fields a request leaves out: --temp, --top-k, --top-p, --min-p,\n"
                    "--repeat-penalty, --frequency-penalty, --presence-penalty, --seed (as in seer generate;\n"
                    "default temperature 1, top-p 1).\n"
                    "A request's \"seer\" object sets speculation for it alone, e.g. {\"spec\": \"ngram\",\n"
                    "\"gamma\": 4, \"ngram_max\": 4}; its fields:\n"),
    {CLI_SERVE, NULL, 0, NULL, CLI_V_TEXT, NOWHERE, 0, 0, 0, 0, NULL, NULL, more_seer_fields},
    /* bench: output */
    TEXT(CLI_BENCH, "output:\n"),
    FLAG(CLI_BENCH, "json", 0, BENCH(json), "one JSON object on stdout instead of the table"),
    STR(CLI_BENCH, "json-out", 0, "FILE", BENCH(json_out), "also write the JSON object to FILE"),
    STR(CLI_BENCH, "plot", 0, "FILE.png", BENCH(plot), "tok/s and speedup against context length (needs gnuplot)"),
    STR(CLI_BENCH, "replot", 0, "RUN.json", BENCH(replot),
        "with --plot: plot the --json-out of an earlier run (e.g. one\nmade on a machine without gnuplot) instead "
        "of measuring"),
    STR(CLI_BENCH, "peer", 0, "PEER.json", BENCH(peer),
        "another implementation's decode and prefill of the same model\n(scripts/peer-llamacpp.sh, "
        "scripts/hf_peer.py): its ms/step and\nseer's speedup over it at the same L and B, its prefill tok/s at\nthe "
        "same prompt sizes, in the table, the JSON and the plot"),
    {CLI_ALL, "help", 'h', NULL, CLI_V_HELP, NOWHERE, 0, 0, 0, 0, NULL, NULL, NULL},
    {0},
};
