/*
 * cmd_serve.c: `seer serve`: an OpenAI-compatible HTTP server on the request scheduler.
 * Options, loading and the signal-driven shutdown live here; the scheduler thread is
 * serve_loop.c, the HTTP layer serve_http.c, the JSON of the API serve_api.c, /metrics
 * serve_metrics.c.
 *
 * The HTTP listener starts first, so that a client (or a load balancer's health check) can
 * tell a server that is loading from one that is not there: until the model is loaded, the
 * context made and speculation calibrated (a loader thread does that), /health answers 503
 * {"status":"loading"} and every other route 503 with Retry-After. A signal while loading
 * stops the process at once (loading cannot be cut short; nothing is being served).
 *
 * SIGINT, SIGTERM or SIGHUP drains: new
 * generations get 503, those in flight finish (up to --drain-timeout seconds, then they are
 * cancelled: their answers end as truncated ones, finish_reason "length", and are let out
 * for a few seconds more), then the HTTP daemon stops and everything is freed; the exit
 * status is 0.
 */
#include "cli.h"
#include "serve.h"

#include <getopt.h>
#include <microhttpd.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* After the drain timeout: how long cancelled requests have to send the end of their answers. */
enum { DRAIN_FLUSH_S = 5 };

static void usage(FILE *f) {
    fprintf(f,
            "usage: seer serve -m MODEL.gguf [options]\n"
            "An OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions\n"
            "(\"stream\": true for server-sent events), GET /v1/models, /health, /metrics.\n"
            "      --host H          address to listen on (default 127.0.0.1)\n"
            "      --port P          port (default 8080; 0 = any free one, printed at start)\n"
            "      --api-key KEY     require \"Authorization: Bearer KEY\" on /v1/ routes and /metrics\n"
            "                        (an empty KEY is refused)\n"
            "      --cors-origin O   the origin browsers may call from: * (default, any), one origin\n"
            "                        (https://app.example), or none\n"
            "      --max-body N      largest request body in bytes (default 1048576)\n"
            "      --max-requests N  most generations at once; more get 429 (default 64)\n"
            "      --max-connections N  most open connections (default 1024, at least --max-requests\n"
            "                        + 64); past it the oldest one still sending its request is closed\n"
            "      --max-connections-per-client N  most open connections of one IP address, the same\n"
            "                        way (default 64, at least --max-requests + 16; 0 = no limit)\n"
            "      --header-timeout S  seconds a client has to send a whole request, headers and\n"
            "                        body, from its connection or previous answer (default 10)\n"
            "      --max-prompt N    most prompt tokens (default: the context)\n"
            "      --alias NAME      the model's id in the API (default: the file's base name)\n"
            "      --chat-template NAME  chatml, llama3 or llama2 (default: from the model;\n"
            "                        llama2 when the model has none)\n"
            "  -n, --n-predict N     max_tokens when a request gives none (default 256)\n"
            "  -c, --ctx N           context length per sequence (default: the trained context)\n"
            "      --ctx-beyond-trained  allow --ctx past the trained context (with a warning)\n"
            "      --parallel N      sequences decoding at once (default 16)\n"
            "      --batch N         token budget of one forward call (default 256)\n"
            "      --prefill-chunk N most prompt tokens per prefill chunk (default min(256, batch))\n"
            "      --prefill-stall R beside decoding streams, read prompts in pieces that add about\n"
            "                        R times a stream's step, sized by the measured step times,\n"
            "                        so a stream's gap between tokens stays near (1 + R) times\n"
            "                        its idle one (default 1; on CUDA while --prefill-chunk and\n"
            "                        --mix-max-tokens stay within 256); -1: fixed chunks\n"
            "      --mix-max-tokens N  most tokens of a forward call that mixes requests; a larger\n"
            "                        prefill chunk runs alone (default: what the backend computes\n"
            "                        batch-invariantly, 256 on CUDA, any on the CPU, so that greedy\n"
            "                        output does not depend on the traffic; --batch: mix freely)\n"
            "      --kv-pages N      KV pool pages of 16 tokens (default: enough for every sequence)\n"
            "      --prefix-cache N  prompt prefixes kept for reuse, LRU (default 8; 0 = off)\n"
            "      --spec KIND       default speculation (default auto, its cost model calibrated at start),\n"
            "                        one of these but those that draft with a draft model (serve has none):\n");
    spec_kinds_help(f, "                          ", SPEC_KINDS_ALL);
    fprintf(f,
            "      --spec-cost-file F  auto: the cost table's cache file (default under $XDG_CACHE_HOME/seer)\n"
            CLI_CALIBRATE_HELP
            "      --spec-gamma G    tokens drafted per round (default 4)\n"
            "      --spec-budget K   KV slots a sparse self-draft reads (default 256)\n"
            "      --spec-kv-bits B  keep a B-bit (4 or 8) copy of the KV cache, so that requests may\n"
            "                        use quantkv (default: 4 with --spec quantkv, else none)\n"
            CLI_SPEC_WEIGHTS_HELP
            "      --drain-timeout S seconds to let requests finish at SIGINT/SIGTERM/SIGHUP (default 30)\n"
            "  -v, --verbose         also log HTTP events: hang-ups, timeouts, evictions\n"
            "  -t, --threads N       CPU threads (default: all cores)\n"
            "      --tp N            tensor parallelism: the model divided over N GPUs (NCCL)\n"
            "      --backend B       cpu, cuda or auto (default auto)\n"
            "      --weights W       stored (default), bf16 or f32\n"
            "Sampling defaults for fields a request leaves out: --temp, --top-k, --top-p, --min-p,\n"
            "--repeat-penalty, --frequency-penalty, --presence-penalty, --seed (as in seer generate;\n"
            "default temperature 1, top-p 1).\n"
            "A request's \"seer\" object sets speculation for it alone: {\"spec\": \"ngram\",\n"
            "\"gamma\": 4, \"budget\": 256, \"sinks\": 16, \"ngram_min\": 1, \"ngram_max\": 4}.\n");
}

typedef struct {
    const char *model, *host, *api_key, *alias, *tmpl, *cost_file, *spec_weights, *cors;
    long long port, max_body, max_requests, max_prompt, n_predict, ctx, parallel, batch, chunk, pages;
    long long threads, drain, prefix, kv_bits, mix, tp, max_conns, per_client, header_timeout;
    bool ctx_beyond, verbose;
    double stall;
    seer_backend_kind backend;
    seer_weights_kind weights;
    seer_sampler_params sp;
    seer_spec_params spec;
} serve_opts;

static int parse(int argc, char **argv, serve_opts *o) {
    enum { O_HOST = 256, O_TP, O_PORT, O_KEY, O_BODY, O_MAXR, O_MAXP, O_ALIAS, O_TMPL, O_PAR, O_BATCH, O_CHUNK,
           O_PAGES, O_SPEC, O_SG, O_SK, O_DRAIN, O_BACKEND, O_WEIGHTS, O_PREFIX, O_KVB, O_COST, O_MIX, O_SWT,
           O_CORS, O_MAXC, O_MAXCC, O_HTO, O_CTXB, O_CALB, O_STALL };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},        {"host", required_argument, 0, O_HOST},
        {"port", required_argument, 0, O_PORT},      {"api-key", required_argument, 0, O_KEY},
        {"max-body", required_argument, 0, O_BODY},  {"max-requests", required_argument, 0, O_MAXR},
        {"max-prompt", required_argument, 0, O_MAXP}, {"alias", required_argument, 0, O_ALIAS},
        {"chat-template", required_argument, 0, O_TMPL}, {"n-predict", required_argument, 0, 'n'},
        {"ctx", required_argument, 0, 'c'},          {"parallel", required_argument, 0, O_PAR},
        {"batch", required_argument, 0, O_BATCH},    {"prefill-chunk", required_argument, 0, O_CHUNK},
        {"mix-max-tokens", required_argument, 0, O_MIX}, {"prefill-stall", required_argument, 0, O_STALL},
        {"kv-pages", required_argument, 0, O_PAGES}, {"spec", required_argument, 0, O_SPEC},
        {"prefix-cache", required_argument, 0, O_PREFIX},
        {"spec-gamma", required_argument, 0, O_SG},  {"spec-budget", required_argument, 0, O_SK},
        {"spec-kv-bits", required_argument, 0, O_KVB}, {"spec-cost-file", required_argument, 0, O_COST},
        {"spec-weights", required_argument, 0, O_SWT}, {"spec-calibrate-budget", required_argument, 0, O_CALB},
        {"drain-timeout", required_argument, 0, O_DRAIN}, {"threads", required_argument, 0, 't'}, {"tp", required_argument, 0, O_TP},
        {"backend", required_argument, 0, O_BACKEND}, {"weights", required_argument, 0, O_WEIGHTS},
        {"temp", required_argument, 0, CLI_O_TEMP},  {"top-k", required_argument, 0, CLI_O_TOPK},
        {"top-p", required_argument, 0, CLI_O_TOPP}, {"min-p", required_argument, 0, CLI_O_MINP},
        {"repeat-penalty", required_argument, 0, CLI_O_REP}, {"seed", required_argument, 0, CLI_O_SEED},
        {"frequency-penalty", required_argument, 0, CLI_O_FREQ}, {"presence-penalty", required_argument, 0, CLI_O_PRES},
        {"cors-origin", required_argument, 0, O_CORS}, {"max-connections", required_argument, 0, O_MAXC},
        {"max-connections-per-client", required_argument, 0, O_MAXCC},
        {"header-timeout", required_argument, 0, O_HTO}, {"ctx-beyond-trained", no_argument, 0, O_CTXB},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},               {0, 0, 0, 0}};
    int c;
    long long v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:n:c:t:hv", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case O_HOST: o->host = optarg; break;
        case O_PORT: if (!cli_int("--port", optarg, 0, 65535, &o->port)) return 2; break;
        case O_KEY:
            if (!*optarg) {
                fprintf(stderr, "seer serve: --api-key is empty (an unset variable?); give a key, or leave "
                                "--api-key out to serve without one\n");
                return 2;
            }
            o->api_key = optarg;
            break;
        case O_CORS: o->cors = optarg; break;
        case O_MAXC: if (!cli_int("--max-connections", optarg, 1, 65536, &o->max_conns)) return 2; break;
        case O_MAXCC:
            if (!cli_int("--max-connections-per-client", optarg, 0, 65536, &o->per_client))
                return 2;
            break;
        case O_HTO: if (!cli_int("--header-timeout", optarg, 1, 3600, &o->header_timeout)) return 2; break;
        case O_CTXB: o->ctx_beyond = true; break;
        case 'v': o->verbose = true; break;
        case O_BODY: if (!cli_int("--max-body", optarg, 64, 1LL << 30, &o->max_body)) return 2; break;
        case O_MAXR: if (!cli_int("--max-requests", optarg, 1, 4096, &o->max_requests)) return 2; break;
        case O_MAXP: if (!cli_int("--max-prompt", optarg, 1, 1 << 24, &o->max_prompt)) return 2; break;
        case O_ALIAS: o->alias = optarg; break;
        case O_TMPL: o->tmpl = optarg; break;
        case 'n': if (!cli_int("--n-predict", optarg, 1, 1 << 24, &o->n_predict)) return 2; break;
        case 'c': if (!cli_int("--ctx", optarg, 2, 1 << 24, &o->ctx)) return 2; break;
        case O_PAR: if (!cli_int("--parallel", optarg, 1, 1024, &o->parallel)) return 2; break;
        case O_BATCH: if (!cli_int("--batch", optarg, 1, 1 << 16, &o->batch)) return 2; break;
        case O_CHUNK: if (!cli_int("--prefill-chunk", optarg, 1, 1 << 16, &o->chunk)) return 2; break;
        case O_MIX: if (!cli_int("--mix-max-tokens", optarg, 1, 1 << 16, &o->mix)) return 2; break;
        case O_STALL:
            if (!cli_float("--prefill-stall", optarg, -1, 1000, &o->stall))
                return 2;
            if (o->stall < 0 && o->stall != -1) {
                fprintf(stderr, "seer serve: --prefill-stall: '%s' is neither -1 nor in (0, 1000]\n", optarg);
                return 2;
            }
            if (o->stall == 0) {
                fprintf(stderr, "seer serve: --prefill-stall: 0 would stop prompts beside streams; give a "
                                "positive ratio or -1\n");
                return 2;
            }
            break;
        case O_PAGES: if (!cli_int("--kv-pages", optarg, 1, 1 << 24, &o->pages)) return 2; break;
        case O_PREFIX: if (!cli_int("--prefix-cache", optarg, 0, 1024, &o->prefix)) return 2; break;
        case O_SPEC: {
            char why[640]; /* the server's accepted values */
            if (!spec_kinds_serve_parse(optarg, false, &o->spec.kind, why, sizeof why)) {
                fprintf(stderr, "seer serve: --spec %s\n", why);
                return 2;
            }
            break;
        }
        case O_COST: o->cost_file = optarg; break;
        case O_CALB: {
            double sec;
            if (!cli_float("--spec-calibrate-budget", optarg, 0.01, 3600, &sec))
                return 2;
            cli_cost_set_budget(sec);
            break;
        }
        case O_SWT: o->spec_weights = optarg; break;
        case O_SG: if (!cli_int("--spec-gamma", optarg, 1, 16, &v)) return 2; o->spec.gamma = (int)v; break;
        case O_SK: if (!cli_int("--spec-budget", optarg, 1, 1 << 24, &v)) return 2; o->spec.budget = (int)v; break;
        case O_KVB:
            if (!cli_int("--spec-kv-bits", optarg, 4, 8, &o->kv_bits) || (o->kv_bits != 4 && o->kv_bits != 8)) {
                fprintf(stderr, "seer serve: --spec-kv-bits must be 4 or 8\n");
                return 2;
            }
            break;
        case O_DRAIN: if (!cli_int("--drain-timeout", optarg, 0, 86400, &o->drain)) return 2; break;
        case 't': if (!cli_int("--threads", optarg, 1, 1024, &o->threads)) return 2; break;
        case O_TP: if (!cli_int("--tp", optarg, 1, SEER_TP_MAX, &o->tp)) return 2; break;
        case O_BACKEND: if (!cli_backend(optarg, &o->backend)) return 2; break;
        case O_WEIGHTS: if (!cli_weights(optarg, &o->weights)) return 2; break;
        case 'h': usage(stdout); return 0;
        default: {
            const int r = cli_sampler_opt(c, optarg, &o->sp);
            if (r < 0)
                return 2;
            if (r == 0) {
                usage(stderr);
                return 2;
            }
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "seer serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "seer serve: -m MODEL is required\n");
        return 2;
    }
    /* generations are never evicted: the connection limit leaves room beside them */
    if (o->max_conns < 0)
        o->max_conns = o->max_requests + 64 > 1024 ? o->max_requests + 64 : 1024;
    else if (o->max_conns <= o->max_requests) {
        fprintf(stderr, "seer serve: --max-connections %lld must exceed --max-requests %lld, so that /health is "
                        "answered while every request slot is taken\n", o->max_conns, o->max_requests);
        return 2;
    }
    if (o->per_client < 0)
        o->per_client = o->max_requests + 16 > 64 ? o->max_requests + 16 : 64;
    if (!cli_spec_weights("serve", o->spec_weights, &o->spec) || !cli_cost_file_ok("serve", o->cost_file))
        return 2;
    return -1;
}

static const char *base_name(const char *path, char *buf, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(buf, cap, "%s", b);
    char *dot = strrchr(buf, '.');
    if (dot && !strcmp(dot, ".gguf"))
        *dot = 0;
    return buf;
}

/* Why the context is shorter than the model's (the pool of every sequence at the trained
 * length did not fit the free memory) and how to get more, on stderr. */
static void ctx_note(const serve_opts *o, const seer_context_params *cp, const serve_state *srv, int ctx_train) {
    seer_kv_memory km;
    seer_context_kv_memory(srv->ctx, &km);
    if (km.n_pages <= 0 || cp->page_size <= 0)
        return;
    const double per_tok = (double)km.bytes_reserved / ((double)km.n_pages * cp->page_size); /* one sequence */
    const double gib = 1024.0 * 1024.0 * 1024.0, free_b = (double)km.bytes_reserved;
    const double need = per_tok * ctx_train * cp->n_seq_max;
    const long long full_seqs = (long long)(free_b / (per_tok * ctx_train));
    fprintf(stderr,
            "seer serve: context %d tokens, not the model's %d: a KV cache of %d tokens for each of %d sequences "
            "(--parallel %lld + --prefix-cache %lld) needs %.1f GiB, and %.1f GiB of memory is free for it.\n",
            srv->n_ctx, ctx_train, ctx_train, cp->n_seq_max, o->parallel, o->prefix, need / gib, free_b / gib);
    if (full_seqs >= 1)
        fprintf(stderr, "seer serve:   for the whole context: fewer sequences (--parallel and --prefix-cache "
                        "adding up to %lld or less);\n", full_seqs);
    fprintf(stderr,
            "seer serve:   or --ctx %d --kv-pages %d: one pool of %d pages of %d tokens that the sequences share "
            "(a long one takes what it needs; when the pool runs out a request is preempted);\n"
            "seer serve:   or --ctx N for another length%s.\n",
            ctx_train, km.n_pages, km.n_pages, cp->page_size,
            km.quant_bits ? ", or without --spec-kv-bits (its copy of the cache costs memory too)" : "");
}

/* What the loader thread makes; the main thread waits for signals meanwhile. */
typedef struct {
    serve_state *srv;
    const serve_opts *o;
    int port;
    seer_spec_cost *cost;
    pthread_t loop;
    bool loop_started;
    bool ok;
} loader;

static void *load_all(void *arg) {
    loader *ld = arg;
    serve_state *srv = ld->srv;
    const serve_opts *o = ld->o;
    seer_model_params mp = seer_model_default_params();
    mp.backend = o->backend;
    mp.weights = o->weights;
    mp.n_threads = (int)o->threads;
    mp.tp = (int)o->tp;
    mp.draft_weights = o->spec_weights;
    seer_status s = seer_model_load(o->model, mp, &srv->model);
    if (s != SEER_OK) {
        cli_error("loading model", s);
        goto fail;
    }
    seer_model_info info;
    seer_model_get_info(srv->model, &info);
    if (!cli_ctx_ok(o->ctx, info.ctx_train, o->ctx_beyond))
        goto fail;
    if ((s = seer_chat_template_init(srv->model, o->tmpl, &srv->tmpl)) != SEER_OK) {
        if (o->tmpl) {
            cli_error("chat template", s);
            goto fail;
        }
        fprintf(stderr, "seer serve: the model has no chat template it recognises; chat uses llama2's\n");
        if ((s = seer_chat_template_init(srv->model, "llama2", &srv->tmpl)) != SEER_OK) {
            cli_error("chat template", s);
            goto fail;
        }
    }
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = (int)o->ctx;
    cp.n_seq_max = (int)(o->parallel + o->prefix); /* the cache's sequences are its own */
    cp.n_batch_max = (int)o->batch;
    cp.n_pages = (int)o->pages;
    cp.kv_quant_bits = o->kv_bits ? (int)o->kv_bits : o->spec.kind == SEER_SPEC_QUANTKV ? 4 : 0;
    if ((s = seer_context_init(srv->model, cp, &srv->ctx)) != SEER_OK) {
        cli_error("creating context", s);
        goto fail;
    }
    srv->n_ctx = seer_context_n_ctx(srv->ctx);
    if (!o->ctx && srv->n_ctx < info.ctx_train)
        ctx_note(o, &cp, srv, info.ctx_train);
    /* measured while every sequence is free; any request may ask for auto, whatever the
     * default */
    srv->spec.cost = ld->cost = cli_auto_cost("serve", srv->ctx, NULL, o->cost_file);
    seer_sched_params sp = seer_sched_default_params();
    sp.prefill_chunk = (int)o->chunk;
    sp.mix_max_tokens = (int)o->mix;
    sp.prefill_stall = (float)o->stall;
    sp.prefix_cache = (int)o->prefix;
    if ((s = seer_sched_init(srv->ctx, sp, &srv->sched)) != SEER_OK) {
        cli_error("creating scheduler", s);
        goto fail;
    }
    if (pthread_create(&ld->loop, NULL, serve_sched_loop, srv) != 0) {
        fprintf(stderr, "seer serve: cannot start the scheduler thread\n");
        goto fail;
    }
    ld->loop_started = true;
    ld->ok = true;
    pthread_mutex_lock(&srv->mu);
    srv->ready = true;
    pthread_mutex_unlock(&srv->mu);
    fprintf(stderr, "seer serve: %s on http://%s:%d (context %d, %d sequences, batch %d)\n", srv->model_id,
            srv->host, ld->port, srv->n_ctx, (int)o->parallel, cp.n_batch_max);
    return NULL;
fail:
    kill(getpid(), SIGUSR1); /* wakes the main thread's sigwait */
    return NULL;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o = {.host = "127.0.0.1", .port = 8080, .max_body = 1 << 20, .max_requests = 64,
                    .n_predict = 256, .parallel = 16, .batch = 256, .drain = 30, .prefix = 8,
                    .max_conns = -1, .per_client = -1, .header_timeout = 10, .cors = "*",
                    .backend = SEER_BACKEND_AUTO, .weights = SEER_WEIGHTS_STORED};
    o.sp = seer_sampler_default_params();
    o.sp.temperature = 1.f;
    o.sp.top_p = 1.f;
    o.sp.top_k = 0;
    o.sp.min_p = 0.f;
    o.spec = seer_spec_default_params();
    o.spec.kind = SEER_SPEC_AUTO; /* plain unless a calibrated cost model predicts a gain */
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    /* SIGINT, SIGTERM and SIGHUP (a closed terminal, or a service manager's reload) are taken
     * by sigwait below: blocked here, before any thread starts, so that every thread inherits
     * the mask. A client that closes early must not kill us. SIGUSR1: the loader failed. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    serve_state srv = {0};
    char id[256];
    srv.model_path = o.model;
    srv.model_id = o.alias ? o.alias : base_name(o.model, id, sizeof id);
    srv.api_key = o.api_key;
    srv.cors_origin = !*o.cors || !strcmp(o.cors, "none") ? NULL : o.cors;
    srv.max_conns = (int)o.max_conns;
    srv.max_conns_per_client = (int)o.per_client;
    srv.header_timeout_s = (int)o.header_timeout;
    srv.verbose = o.verbose;
    srv.host = o.host;
    srv.port = (int)o.port;
    srv.max_requests = (int)o.max_requests;
    srv.max_body = o.max_body;
    srv.max_prompt = (int)o.max_prompt;
    srv.default_max_tokens = (int)o.n_predict;
    srv.sampler = o.sp;
    srv.spec = o.spec;
    pthread_mutex_init(&srv.mu, NULL);
    pthread_cond_init(&srv.wake, NULL);
    serve_metrics_init(&srv.metrics);
    rc = 1;
    loader ld = {.srv = &srv, .o = &o};
    pthread_t load_thread;
    bool loading = false;
    struct MHD_Daemon *d = NULL;
    if (!(srv.conns = serve_conns_new(&srv))) {
        fprintf(stderr, "seer serve: cannot start the connection watchdog\n");
        goto done;
    }
    if (!(d = serve_http_start(&srv)))
        goto done;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    ld.port = di ? di->port : srv.port;
    fprintf(stderr, "seer serve: loading %s; listening at http://%s:%d (/health answers 503 \"loading\" "
                    "until it is ready)\n", o.model, srv.host, ld.port);
    if (pthread_create(&load_thread, NULL, load_all, &ld) != 0) {
        fprintf(stderr, "seer serve: cannot start the loader thread\n");
        goto done;
    }
    loading = true;
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGUSR1) /* the loader failed and said why */
        goto done;
    pthread_mutex_lock(&srv.mu);
    const bool ready = srv.ready;
    pthread_mutex_unlock(&srv.mu);
    if (!ready) {
        /* nothing is served yet, and loading cannot be cut short */
        fprintf(stderr, "seer serve: %s while loading: stopped\n",
                sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM");
        fflush(stderr);
        _exit(0);
    }
    pthread_join(load_thread, NULL);
    loading = false;
    fprintf(stderr, "seer serve: %s: draining\n", sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM");
    pthread_mutex_lock(&srv.mu);
    srv.draining = true;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += o.drain;
    while (srv.n_jobs > 0 && pthread_cond_timedwait(&srv.wake, &srv.mu, &until) == 0)
        ;
    if (srv.n_jobs > 0)
        fprintf(stderr, "seer serve: %d requests still running after %llds: cancelled\n", srv.n_jobs, o.drain);
    srv.stop = true;
    pthread_cond_broadcast(&srv.wake);
    pthread_mutex_unlock(&srv.mu);
    rc = 0;
done:
    if (loading)
        pthread_join(load_thread, NULL); /* it failed: it is ending */
    if (ld.loop_started) {
        pthread_mutex_lock(&srv.mu);
        srv.stop = true;
        pthread_cond_broadcast(&srv.wake);
        pthread_mutex_unlock(&srv.mu);
        pthread_join(ld.loop, NULL);
    }
    if (d) {
        /* every request is finished now; their answers (a cancelled stream's final chunk and
         * [DONE]) get a few seconds to be sent before the connections are closed */
        pthread_mutex_lock(&srv.mu);
        struct timespec flush_until;
        clock_gettime(CLOCK_REALTIME, &flush_until);
        flush_until.tv_sec += DRAIN_FLUSH_S;
        while ((srv.n_jobs > 0 || srv.n_answers > 0) &&
               pthread_cond_timedwait(&srv.wake, &srv.mu, &flush_until) == 0)
            ;
        pthread_mutex_unlock(&srv.mu);
        MHD_stop_daemon(d); /* waits for the connection threads */
    }
    serve_conns_free(srv.conns);
    seer_sched_free(srv.sched);
    seer_spec_cost_free(ld.cost);
    seer_context_free(srv.ctx);
    seer_model_free(srv.model);
    free(srv.inbox);
    serve_metrics_destroy(&srv.metrics);
    pthread_cond_destroy(&srv.wake);
    pthread_mutex_destroy(&srv.mu);
    if (rc == 0)
        fprintf(stderr, "seer serve: stopped\n");
    return rc;
}
