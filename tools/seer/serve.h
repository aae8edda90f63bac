/*
 * serve.h: what the parts of `seer serve` share: the server state, one job per generating
 * HTTP request, the request parser and response writers (serve_api.c), the HTTP layer
 * (serve_http.c), metrics (serve_metrics.c) and the scheduler loop (cmd_serve.c).
 *
 * Threads: libmicrohttpd runs one thread per connection; one scheduler thread owns the
 * seer_sched and every seer_request in it. They meet in a job: the HTTP thread fills it and
 * queues it in the inbox; the scheduler thread submits it and, on each update, copies the
 * new text under the job's mutex and signals; a client that goes away cancels its request
 * (seer_request_cancel is the one library call safe from any thread).
 */
#ifndef SEER_SERVE_H
#define SEER_SERVE_H

#include "seer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

enum { SERVE_HIST_BUCKETS = 14 };

/* A Prometheus histogram with fixed upper bounds (seconds). */
typedef struct {
    uint64_t count[SERVE_HIST_BUCKETS + 1]; /* last: +Inf */
    double sum;
    uint64_t n;
} serve_hist;

typedef struct {
    pthread_mutex_t mu;
    uint64_t http_requests[6];   /* by status class: 1xx .. 5xx, [0] unused */
    uint64_t finished[SEER_FINISH_ERROR + 1]; /* generations by finish reason */
    serve_hist ttft, itl;
    seer_sched_stats sched;      /* snapshot after each scheduler step */
} serve_metrics;

typedef struct serve_job serve_job;

typedef struct {
    /* settings */
    const char *model_path, *model_id, *api_key, *host;
    int port, max_requests, max_prompt, n_ctx;
    long long max_body;
    seer_spec_params spec;       /* default speculation (--spec ...) */
    seer_sampler_params sampler; /* defaults of unset fields */
    int default_max_tokens;
    /* state */
    seer_model *model, *draft_model;
    seer_context *ctx;
    seer_sched *sched;
    seer_chat_template tmpl;
    pthread_mutex_t mu;          /* inbox, counts, draining */
    pthread_cond_t wake;         /* the scheduler loop: work arrived or stop */
    serve_job **inbox;
    int n_inbox, cap_inbox;
    int n_jobs;                  /* generating HTTP requests alive */
    bool draining, stop;
    uint64_t next_id;
    serve_metrics metrics;
} serve_state;

typedef enum { JOB_COMPLETION, JOB_CHAT } serve_kind;

/* One generation for one HTTP request. */
struct serve_job {
    serve_state *srv;
    serve_kind kind;
    bool stream, include_usage;
    char id[48];
    long long created;
    seer_request *req;
    int n_prompt;
    /* from the scheduler thread, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;                  /* visible text so far */
    size_t text_len, text_cap;
    int32_t *ids;                /* generated ids */
    int n_ids, cap_ids;
    bool done;
    seer_finish_reason finish;
    seer_request_stats st;
    bool failed;                 /* could not be submitted: error_msg says why */
    char error_msg[256];
    double t_last;               /* time of the latest update (inter-token latency) */
    int refs;                    /* HTTP side + scheduler side */
    /* HTTP side: streaming progress */
    size_t sent_text;            /* bytes of text already sent as events */
    char *pending;               /* SSE bytes not yet handed to libmicrohttpd */
    size_t pending_len, pending_off, pending_cap;
    int phase;                   /* 0: role chunk (chat), 1: text, 2: final sent, 3: [DONE] sent */
    int fd;                      /* the client's socket, to notice it is gone */
};

/* serve_api.c */
typedef struct {
    int status;                  /* 0 = ok; else the HTTP status of the error */
    char message[256];
    const char *param, *code;
} serve_error;

/* Parses a /v1/completions or /v1/chat/completions body into a job (its request made but not
 * queued). On failure fills err and returns NULL. */
serve_job *serve_job_from_json(serve_state *srv, serve_kind kind, const char *body, size_t len,
                               serve_error *err);
void serve_job_unref(serve_job *j);
/* The error body: {"error": {...}} (malloc'd). */
char *serve_error_json(const serve_error *e);
/* Whole response of a finished non-streaming job (malloc'd). */
char *serve_job_response(serve_job *j);
/* The next SSE event(s) of a streaming job given its state (j->mu held): appended to
 * j->pending. Returns false when nothing new is there. */
bool serve_job_next_events(serve_job *j);
char *serve_models_json(serve_state *srv);
const char *serve_finish_name(seer_finish_reason f);

/* serve_metrics.c */
void serve_metrics_init(serve_metrics *m);
void serve_metrics_destroy(serve_metrics *m);
void serve_hist_observe(serve_hist *h, double v);
char *serve_metrics_text(serve_state *srv);

/* serve_http.c */
struct MHD_Daemon;
struct MHD_Daemon *serve_http_start(serve_state *srv);
/* Queues a job for the scheduler thread; false (job untouched) when the server drains. */
bool serve_enqueue(serve_state *srv, serve_job *j);

#endif
