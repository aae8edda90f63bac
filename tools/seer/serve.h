/*
 * serve.h: what the parts of `seer serve` share: the server state, one job per generating
 * HTTP request, the request parser and response writers (serve_api.c), the HTTP layer
 * (serve_http.c), metrics (serve_metrics.c) and the scheduler loop (cmd_serve.c).
 *
 * Threads: libmicrohttpd runs one thread per connection; one scheduler thread owns the
 * seer_sched and every seer_request in it. They meet in a job (one request per choice, OpenAI's
 * n): the HTTP thread fills it and queues it in the inbox; the scheduler thread submits its
 * choices and, on each update, copies the new text under the job's mutex and signals; a
 * client that goes away cancels its requests
 * (seer_request_cancel is the one library call safe from any thread). The connection table
 * (serve_conn.c) has a watchdog thread of its own that ends connections which do not send
 * their request in time.
 */
#ifndef SEER_SERVE_H
#define SEER_SERVE_H

#include "seer.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

enum { SERVE_HIST_BUCKETS = 14 };
/* A client that takes none of its answer for this long is disconnected (libmicrohttpd's
 * inactivity timeout; the time spent generating does not count). */
enum { SERVE_SEND_TIMEOUT_S = 300 };

/* Why a connection ended before its answer was whole (seer_http_connections_closed_total). */
typedef enum {
    SERVE_CLOSE_CLIENT,         /* the client hung up, or its socket failed */
    SERVE_CLOSE_HEADER_TIMEOUT, /* no whole request within --header-timeout */
    SERVE_CLOSE_EVICTED,        /* made room for a newer connection (connection limits) */
    SERVE_CLOSE_SEND_TIMEOUT,   /* the client read nothing of its answer for too long */
    SERVE_CLOSE_N
} serve_close_why;

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
    uint64_t conn_closed[SERVE_CLOSE_N];      /* connections ended early, by serve_close_why */
    serve_hist ttft, itl;
    seer_sched_stats sched;      /* snapshot after each scheduler step */
} serve_metrics;

typedef struct serve_job serve_job;
typedef struct serve_conns serve_conns;

typedef struct {
    /* settings */
    const char *model_path, *model_id, *api_key, *host;
    const char *cors_origin;     /* Access-Control-Allow-Origin: "*", one origin, or NULL (none) */
    int port, max_requests, max_prompt, n_ctx;
    int max_conns, max_conns_per_client, header_timeout_s;
    bool verbose;                /* log HTTP-level events (hang-ups, timeouts) */
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
    int n_jobs;                  /* jobs alive (their answers not yet all sent) */
    int n_answers;               /* generation requests whose answer libmicrohttpd has not
                                  * finished sending (a job may be gone before that) */
    int n_slots;                 /* generations holding one of --max-requests slots */
    bool draining, stop;
    bool ready;                  /* the model is loaded and calibration done: until then
                                    /health answers 503 "loading" and every other route 503 */
    uint64_t next_id;
    serve_metrics metrics;
    serve_conns *conns;
} serve_state;

typedef enum { JOB_COMPLETION, JOB_CHAT } serve_kind;

/* Most choices one request may ask for (OpenAI's n). */
enum { SERVE_MAX_CHOICES = 16 };

/* One choice of a job: its own generation (seer_request) and what it has produced. */
typedef struct {
    serve_job *job;
    int index;                   /* its place in "choices" */
    seer_request *req;
    bool slot;                   /* holds a slot (srv->n_slots), under srv->mu */
    /* from the scheduler thread, under the job's mu */
    char *text;                  /* visible text so far */
    size_t text_len, text_cap;
    int32_t *ids;                /* generated ids */
    int n_ids, cap_ids;
    bool done;
    seer_finish_reason finish;
    seer_request_stats st;
    double t_last;               /* time of the latest update (inter-token latency) */
    /* log-probabilities (job->logprobs), from the scheduler thread under the job's mu: one
     * per generated id, with the offset of its text in the generated text (serve_logprobs.c) */
    seer_token_logprob *lp;
    size_t *lp_off;
    int n_lp, cap_lp;
    seer_detok *lp_dt;           /* the text of the ids so far, for the offsets */
    size_t lp_bytes;
    int sent_lp;                 /* HTTP side: tokens whose log-probabilities are sent */
    seer_token_logprob *plp;     /* echo with logprobs: the prompt's (j->n_prompt), once known */
    bool tools_done, called;     /* HTTP side, chats with tools: its end parsed; it made calls */
    /* HTTP side: streaming progress */
    size_t sent_text;            /* bytes of text already sent as events */
    bool sent_final;             /* its final chunk (finish_reason) is sent */
} serve_choice;

/* One HTTP request's generations: n choices (OpenAI's n), each a request of its own. */
struct serve_job {
    serve_state *srv;
    serve_kind kind;
    bool stream, include_usage;
    bool tools;                  /* chat with tools (tool_choice auto): outputs parsed for calls */
    json_t *tool_defs;           /* then the request's tools (a reference) */
    bool logprobs;               /* choices report log-probabilities */
    int top_logprobs;            /* with this many alternatives */
    char *echo;                  /* /v1/completions with echo: the prompt's text, sent first */
    size_t echo_len;
    int32_t *echo_ids;           /* echo with logprobs: the prompt's ids [n_prompt] and the offset */
    size_t *echo_off;            /* of each one's text in the echo (serve_logprobs_echo) */
    int n_return;                /* choices returned: n_choices, or OpenAI's n of best_of candidates
                                    (the n likeliest by cumulative log-probability, serve_best_of.c) */
    bool rank_lp;                /* the choices keep log-probabilities to rank them (best_of) */
    char id[48];
    long long created;
    int n_prompt;
    seer_spec_kind spec_kind;    /* the speculation asked for (the server's default or seer.spec) */
    serve_choice *choices;       /* [n_choices] */
    int n_choices;
    /* from the scheduler thread, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_done;                  /* choices finished */
    bool done;                   /* every choice finished */
    bool error;                  /* a choice finished with SEER_FINISH_ERROR */
    bool failed;                 /* could not be submitted: error_msg says why */
    char error_msg[256];
    int refs;                    /* HTTP side + one per choice in the scheduler */
    /* HTTP side: streaming progress */
    char *pending;               /* SSE bytes not yet handed to libmicrohttpd */
    size_t pending_len, pending_off, pending_cap;
    int phase;                   /* 0: role chunks (chat) or echo, 1: text, 2: final chunks (and the usage
                                  * chunk, if asked for) sent, 3: [DONE] sent */
    int fd;                      /* the client's socket, to notice it is gone */
    struct MHD_Connection *conn; /* its connection, to reset the send timeout while waiting */
    bool read_closed;            /* the client half-closed (or closed): probe before cancelling */
    double t_sent;               /* when stream bytes were last handed over (probes) */
};

/* serve_api.c */
typedef struct {
    int status;                  /* 0 = ok; else the HTTP status of the error */
    char message[256];
    const char *param, *code;
    char param_buf[128];         /* param's text when it names no field of seer's (unknown ones) */
} serve_error;

/* serve_structured.c: response_format, grammar and logit_bias. */
typedef struct {
    seer_constraint *con;  /* the request's constraint (NULL: none); each choice clones it */
    seer_logit_bias *bias; /* what p->sampler.logit_bias points to */
} serve_structured;
/* Reads the three fields of root into p (constraint, logit_bias), owned by *out until
 * serve_structured_free (after the job's requests are made: they copy both). False with e
 * set on a bad or unsupported value. */
bool serve_structured_read(serve_state *srv, json_t *root, seer_request_params *p, serve_structured *out,
                           serve_error *e);
void serve_structured_free(serve_structured *s);

/* serve_fields.c: the top-level request fields, each honoured or refused. */
/* Fills e and returns NULL (for `return serve_fail(...)` in functions returning a job). */
serve_job *serve_fail(serve_error *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A field of o: absent or null (returns 0), valid (1, *out set) or an error (-1, e filled). */
int serve_get_num(json_t *o, const char *key, double lo, double hi, double *out, serve_error *e);
int serve_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, serve_error *e);
int serve_get_bool(json_t *o, const char *key, bool *out, serve_error *e);
/* The drafters' settings of the "seer" object x, by the json names their drafters declare,
 * into spec: false with e filled for a bad one. */
bool serve_fields_spec(json_t *x, seer_spec_params *spec, serve_error *e);
/* Refuses (400, e filled, false) a top-level field the endpoint does not know and a value
 * seer cannot honour; the fields seer honours are read by serve_job_from_json. */
bool serve_fields_check(json_t *root, serve_kind kind, serve_error *e);

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

/* serve_tokens.c: POST /tokenize and /detokenize; the answer's JSON (malloc'd), or NULL with
 * e filled (400 for a bad request). */
char *serve_tokenize_json(serve_state *srv, const char *body, size_t len, serve_error *e);
char *serve_detokenize_json(serve_state *srv, const char *body, size_t len, serve_error *e);
/* The text of token ids [n] as the detokenizer writes generated text (control tokens have
 * none; a BOS drops the space SentencePiece puts before the first word): what `echo` sends of
 * a prompt given as ids. malloc'd, *len its length; NULL when out of memory. */
char *serve_ids_text(serve_state *srv, const int32_t *ids, int n, size_t *len);
/* A finish reason as /metrics labels it (cancelled and error included). */
const char *serve_finish_name(seer_finish_reason f);
/* A finish reason as the API reports it: one of OpenAI's ("stop", "length"); a request cut
 * short by the server (the drain timeout) reports "length", as its output was truncated. */
const char *serve_finish_api(seer_finish_reason f);
/* Gives back a choice's --max-requests slot, once: when its answer is final. */
void serve_choice_release_slot(serve_choice *c);
/* Cancels every choice of the job not finished yet (any thread; j->mu held or not). */
void serve_job_cancel(serve_job *j);
/* Marks a choice that could not be submitted as finished, the job as failed (msg says why),
 * and drops the scheduler's reference to it (scheduler thread). */
void serve_choice_fail(serve_choice *c, const char *msg);

/* serve_logprobs.c: OpenAI's logprobs objects. */
/* Takes the log-probabilities of r's new ids into c, with their text offsets (scheduler
 * thread, c->job->mu held). Out of memory leaves c as it was (they come with a later call). */
void serve_choice_take_logprobs(serve_choice *c, seer_request *r);
/* Tokens of c whose text starts before byte text_len of its visible text (end-of-text tokens
 * have none): what a response covering that text reports. */
int serve_logprobs_count(const serve_choice *c, size_t text_len);
/* The logprobs object of c's tokens [from, to): chat's {"content": [...], "refusal": null}, or
 * completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"} with offsets
 * counted from base (an echoed prompt's length), led when from is 0 by the echoed prompt's
 * tokens (the first one's logprob and top_logprobs null, as OpenAI's). NULL when out of
 * memory. */
json_t *serve_logprobs_json(const serve_job *j, const serve_choice *c, int from, int to, size_t base);
void serve_choice_free_logprobs(serve_choice *c);
/* Reads logprobs (chat: a boolean, with top_logprobs 0..20; completions: an integer 0..5)
 * into p; with echo the prompt's too (p->prompt_logprobs). False with e filled on a bad value. */
bool serve_logprobs_parse(json_t *root, serve_kind kind, bool echo, seer_request_params *p, serve_error *e);
/* Echo with logprobs: keeps the prompt's ids [n] in j and the offset of each one's text in
 * the echo (the detokenizer's pieces, cut to the echo's length). False when out of memory. */
bool serve_logprobs_echo(serve_job *j, const int32_t *ids, int n);

/* serve_best_of.c: best_of. */
/* Reads best_of (1..SERVE_MAX_CHOICES, at least n, above n not with stream) into *best (n
 * when absent). False with e filled on a bad value. */
bool serve_best_of_parse(json_t *root, int n, int *best, serve_error *e);
/* The indices of the choices a response returns, into order [j->n_return]: all in order, or
 * of best_of candidates the n_return with the highest cumulative log-probability of their
 * generated tokens, the likeliest first (ties to the lower index). */
void serve_best_of_order(const serve_job *j, int *order);

/* serve_metrics.c */
void serve_metrics_init(serve_metrics *m);
void serve_metrics_destroy(serve_metrics *m);
void serve_hist_observe(serve_hist *h, double v);
char *serve_metrics_text(serve_state *srv);

/* serve_conn.c: every open connection, its phase and deadline. A connection is "reading"
 * from its accept (or the end of its previous answer) until its request is whole, then
 * "busy" until its answer is sent. Reading connections past --header-timeout are shut down
 * by a watchdog; when a client has more than --max-connections-per-client connections, or
 * all have more than --max-connections, the oldest reading one (of that client first) is
 * shut down to make room. Busy connections are never evicted. */
serve_conns *serve_conns_new(serve_state *srv);
void serve_conns_free(serve_conns *t);    /* after the HTTP daemon stopped */
int serve_conns_open(serve_conns *t);     /* connections open, evicted ones not counted */
/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls: the serve_conns). */
void serve_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe);
void serve_conn_busy(struct MHD_Connection *c);    /* its request is whole */
/* Its request ended (libmicrohttpd's MHD_OPTION_NOTIFY_COMPLETED): it reads the next one;
 * a request cut short is counted by why (but not twice when the table evicted it). */
void serve_conn_done(struct MHD_Connection *c, enum MHD_RequestTerminationCode toe);
/* Restarts libmicrohttpd's inactivity timer of the connection: the time a handler spends
 * waiting for tokens is not the client's inactivity. Call from the connection's thread. */
void serve_conn_touch(struct MHD_Connection *c);
/* libmicrohttpd's log: only with --verbose (a hang-up is not an error of the server). */
void serve_conn_log(void *cls, const char *fmt, va_list ap);

/* serve_page.c: GET /, the chat page (tools/seer/chat.html) with its headers; NULL: out of
 * memory. */
struct MHD_Response *serve_page_response(void);

/* serve_http.c */
struct MHD_Daemon *serve_http_start(serve_state *srv);

/* serve_loop.c */
/* Queues a job (all its choices) for the scheduler thread; false (job untouched) when the
 * server drains. */
bool serve_enqueue(serve_state *srv, serve_job *j);
/* The scheduler thread (pthread_create's start routine; arg: the serve_state). */
void *serve_sched_loop(void *arg);

#endif
