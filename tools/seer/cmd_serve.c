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
#include "cli_cmds.h"
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

static int parse(int argc, char **argv, serve_opts *o) {
    const int rc = cli_parse(cli_table, CLI_SERVE, "serve", argc, argv, &o->c, o);
    if (rc >= 0)
        return rc;
    if (optind < argc) {
        fprintf(stderr, "seer serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->c.model) {
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
    if (!cli_spec_weights("serve", o->c.spec_weights, &o->c.spec) || !cli_cost_file_ok("serve", o->c.cost_file))
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
    mp.backend = o->c.backend;
    mp.weights = o->c.weights;
    mp.n_threads = (int)o->c.threads;
    mp.tp = (int)o->c.tp;
    if (!cli_tp_setup("serve", (cli_common *)&o->c, &mp))
        goto fail;
    mp.gpu_layers = (int)o->c.gpu_layers;
    mp.draft_weights = o->c.spec_weights;
    seer_status s = seer_model_load(o->c.model, mp, &srv->model);
    if (s != SEER_OK) {
        cli_error("loading model", s);
        goto fail;
    }
    seer_model_info info;
    seer_model_get_info(srv->model, &info);
    if (!cli_ctx_ok(o->c.ctx, info.ctx_train, o->c.ctx_beyond))
        goto fail;
    if ((s = seer_chat_template_init(srv->model, o->c.chat_template, &srv->tmpl)) != SEER_OK) {
        if (o->c.chat_template) {
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
    cp.n_ctx = (int)o->c.ctx;
    cp.n_seq_max = (int)(o->parallel + o->prefix); /* the cache's sequences are its own */
    cp.n_batch_max = (int)o->c.batch;
    cp.n_pages = (int)o->pages;
    cp.kv_type = o->c.kv_type;
    cp.kv_quant_bits = o->c.kv_bits ? (int)o->c.kv_bits : o->c.spec.kind == SEER_SPEC_QUANTKV ? 4 : 0;
    if ((s = seer_context_init(srv->model, cp, &srv->ctx)) != SEER_OK) {
        cli_error("creating context", s);
        goto fail;
    }
    srv->n_ctx = seer_context_n_ctx(srv->ctx);
    if (!o->c.ctx && srv->n_ctx < info.ctx_train)
        ctx_note(o, &cp, srv, info.ctx_train);
    /* measured while every sequence is free; any request may ask for auto, whatever the
     * default */
    srv->spec.cost = ld->cost = cli_auto_cost("serve", srv->ctx, NULL, o->c.cost_file);
    seer_sched_params sp = seer_sched_default_params();
    sp.prefill_chunk = (int)o->chunk;
    sp.mix_max_tokens = (int)o->mix;
    sp.prefill_stall = (float)o->stall;
    sp.prefix_cache = (int)o->prefix;
    sp.kv_host_bytes = (int64_t)(o->c.kv_host_gb * 1073741824.0);
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
                    .parallel = 16, .drain = 30, .prefix = 8,
                    .max_conns = -1, .per_client = -1, .header_timeout = 10, .cors = "*"};
    cli_common_init(&o.c);
    o.c.n_predict = 256;
    o.c.batch = 256;
    o.c.sp.temperature = 1.f;
    o.c.sp.top_p = 1.f;
    o.c.sp.top_k = 0;
    o.c.sp.min_p = 0.f;
    o.c.spec.kind = SEER_SPEC_AUTO; /* plain unless a calibrated cost model predicts a gain */
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
    srv.model_path = o.c.model;
    srv.model_id = o.alias ? o.alias : base_name(o.c.model, id, sizeof id);
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
    srv.default_max_tokens = (int)o.c.n_predict;
    srv.sampler = o.c.sp;
    srv.spec = o.c.spec;
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
                    "until it is ready)\n", o.c.model, srv.host, ld.port);
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
    cli_tp_reap(o.c.tp_pids, true); /* after the model's goodbye, or when it never came */
    free(srv.inbox);
    serve_metrics_destroy(&srv.metrics);
    pthread_cond_destroy(&srv.wake);
    pthread_mutex_destroy(&srv.mu);
    if (rc == 0)
        fprintf(stderr, "seer serve: stopped\n");
    return rc;
}
