/*
 * serve_metrics.c: /metrics of `seer serve` in the Prometheus text format (version 0.0.4):
 * requests running and waiting, HTTP connections open and cut short, tokens in and out, KV
 * pages used and free, prefix-cache hits, speculation drafted and accepted per drafter, and
 * histograms of the time to first token and of inter-token latency. Scheduler numbers are the snapshot taken after its latest step.
 */
#include "serve.h"
#include "spec_kinds.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds (seconds): 1 ms to about 30 s, by roughly 2.2x. */
static const double BOUNDS[SERVE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                  0.25, 0.5, 1, 2.5, 5, 10, 30};

void serve_metrics_init(serve_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void serve_metrics_destroy(serve_metrics *m) { pthread_mutex_destroy(&m->mu); }

void serve_hist_observe(serve_hist *h, double v) {
    int b = 0;
    while (b < SERVE_HIST_BUCKETS && v > BOUNDS[b])
        b++;
    h->count[b]++;
    h->sum += v;
    h->n++;
}

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = b->oom ? 0 : vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (b->oom || k < 0)
            return;
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)k;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
}

static void metric(buf *b, const char *name, const char *type, const char *help) {
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(buf *b, const char *name, const char *help, const serve_hist *h) {
    metric(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < SERVE_HIST_BUCKETS; i++) {
        cum += h->count[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, BOUNDS[i], (unsigned long long)cum);
    }
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)h->n,
        name, h->sum, name, (unsigned long long)h->n);
}

char *serve_metrics_text(serve_state *srv) {
    buf b = {.cap = 4096};
    b.s = malloc(b.cap);
    if (!b.s)
        return NULL;
    b.s[0] = 0;
    pthread_mutex_lock(&srv->metrics.mu);
    const serve_metrics m = srv->metrics;
    pthread_mutex_unlock(&srv->metrics.mu);
    const seer_sched_stats *st = &m.sched;
    metric(&b, "seer_requests_running", "gauge", "Requests holding KV pages in the scheduler.");
    put(&b, "seer_requests_running %d\n", st->n_running);
    metric(&b, "seer_requests_waiting", "gauge", "Requests queued for admission.");
    put(&b, "seer_requests_waiting %d\n", st->n_waiting);
    metric(&b, "seer_requests_finished_total", "counter", "Generations finished, by reason.");
    for (int f = SEER_FINISH_STOP; f <= SEER_FINISH_ERROR; f++)
        put(&b, "seer_requests_finished_total{reason=\"%s\"} %llu\n", serve_finish_name((seer_finish_reason)f),
            (unsigned long long)m.finished[f]);
    metric(&b, "seer_http_requests_total", "counter", "HTTP responses by status class.");
    for (int c = 1; c <= 5; c++)
        put(&b, "seer_http_requests_total{code=\"%dxx\"} %llu\n", c, (unsigned long long)m.http_requests[c]);
    metric(&b, "seer_http_connections_open", "gauge", "HTTP connections open.");
    put(&b, "seer_http_connections_open %d\n", serve_conns_open(srv->conns));
    metric(&b, "seer_http_connections_closed_total", "counter",
           "HTTP connections ended before their answer was whole, by why: the client hung up, sent no whole "
           "request within --header-timeout, was evicted for a newer connection, or read nothing for too long.");
    static const char *const why[SERVE_CLOSE_N] = {"client", "header_timeout", "evicted", "send_timeout"};
    for (int k = 0; k < SERVE_CLOSE_N; k++)
        put(&b, "seer_http_connections_closed_total{reason=\"%s\"} %llu\n", why[k],
            (unsigned long long)m.conn_closed[k]);
    metric(&b, "seer_prompt_tokens_total", "counter", "Prompt tokens of submitted requests.");
    put(&b, "seer_prompt_tokens_total %lld\n", (long long)st->tokens_prompt);
    metric(&b, "seer_generated_tokens_total", "counter", "Tokens generated.");
    put(&b, "seer_generated_tokens_total %lld\n", (long long)st->tokens_generated);
    metric(&b, "seer_computed_tokens_total", "counter", "Tokens through the model (prefill, rounds, recomputation).");
    put(&b, "seer_computed_tokens_total %lld\n", (long long)st->tokens_computed);
    metric(&b, "seer_scheduler_steps_total", "counter", "Forward calls planned by the scheduler.");
    put(&b, "seer_scheduler_steps_total %lld\n", (long long)st->n_steps);
    metric(&b, "seer_scheduler_calls_alone_total", "counter",
           "Forward calls that held one large prefill chunk alone, so as not to mix it with other requests.");
    put(&b, "seer_scheduler_calls_alone_total %lld\n", (long long)st->n_calls_alone);
    metric(&b, "seer_preemptions_total", "counter", "Requests whose KV pages were taken back (recomputed later, or copied back from the host tier).");
    put(&b, "seer_preemptions_total %lld\n", (long long)st->n_preemptions);
    metric(&b, "seer_kv_pages_used", "gauge", "KV pages in use.");
    put(&b, "seer_kv_pages_used %d\n", st->kv_pages_total - st->kv_pages_free);
    metric(&b, "seer_kv_pages_free", "gauge", "KV pages free.");
    put(&b, "seer_kv_pages_free %d\n", st->kv_pages_free);
    metric(&b, "seer_kv_pages_total", "gauge", "KV pages in the pool.");
    put(&b, "seer_kv_pages_total %d\n", st->kv_pages_total);
    metric(&b, "seer_kv_pages_cached", "gauge", "KV pages held by the prefix cache (counted in used).");
    put(&b, "seer_kv_pages_cached %d\n", st->kv_pages_cached);
    metric(&b, "seer_prefix_cache_entries", "gauge", "Prompt prefixes in the prefix cache.");
    put(&b, "seer_prefix_cache_entries %d\n", st->prefix_entries);
    metric(&b, "seer_prefix_cache_hits_total", "counter", "Prompt pages reused from the prefix cache.");
    put(&b, "seer_prefix_cache_hits_total %lld\n", (long long)st->prefix_hits);
    metric(&b, "seer_kv_host_pages", "gauge", "KV pages in the host tier (--kv-host-mem).");
    put(&b, "seer_kv_host_pages %d\n", st->kv_host_pages);
    metric(&b, "seer_kv_host_pages_total", "gauge", "KV pages the host tier holds at most.");
    put(&b, "seer_kv_host_pages_total %d\n", st->kv_host_pages_total);
    metric(&b, "seer_kv_host_bytes_total", "counter", "Bytes copied between the KV pool and the host tier, by direction.");
    put(&b, "seer_kv_host_bytes_total{direction=\"to_host\"} %lld\n", (long long)st->kv_host_bytes_out);
    put(&b, "seer_kv_host_bytes_total{direction=\"from_host\"} %lld\n", (long long)st->kv_host_bytes_in);
    metric(&b, "seer_kv_host_hits_total", "counter",
           "Admissions whose KV pages were copied back from the host tier (a preempted request, a spilled prefix).");
    put(&b, "seer_kv_host_hits_total %lld\n", (long long)st->kv_host_hits);
    metric(&b, "seer_kv_host_saves_total", "counter", "Preempted requests whose KV pages went to the host tier.");
    put(&b, "seer_kv_host_saves_total %lld\n", (long long)st->kv_host_saves);
    metric(&b, "seer_kv_host_evictions_total", "counter", "Host tier entries evicted, least recently used first.");
    put(&b, "seer_kv_host_evictions_total %lld\n", (long long)st->kv_host_evictions);
    char *spec = spec_kinds_metrics(st); /* per drafter, from the registry */
    if (spec)
        put(&b, "%s", spec);
    else
        b.oom = true;
    free(spec);
    hist(&b, "seer_time_to_first_token_seconds", "Seconds from submission to the first token.", &m.ttft);
    hist(&b, "seer_inter_token_latency_seconds", "Seconds between tokens of a request.", &m.itl);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
