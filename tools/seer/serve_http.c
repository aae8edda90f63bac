/*
 * serve_http.c: the HTTP side of `seer serve`, on libmicrohttpd (Debian's libmicrohttpd-dev:
 * maintained, small, HTTP/1.1 with chunked responses, one thread per connection so that a
 * handler may block until its request has output).
 *
 * Routes: GET / (the chat page, serve_page.c; no key needed, even while the model loads),
 * GET /health, GET /metrics, and under /v1: GET /v1/models, POST /v1/completions,
 * POST /v1/chat/completions; /v1 and /metrics are behind --api-key when it is given; OPTIONS
 * on any route answers a CORS preflight (--cors-origin). A body over --max-body is read and
 * dropped, then answered 413; a request with two Content-Length headers, or one beside a
 * Transfer-Encoding, is refused 400 and its connection closed (its body cannot be told
 * apart from the next request). More than --max-requests generations at once get 429 (a
 * request with n choices needs n slots); a generation gives its slot back as soon as its
 * answer is final, before the client can have it. A draining server answers 503.
 *
 * A client whose socket reads as closed may have half-closed it (shutdown(SHUT_WR): it waits
 * for its answer) or have gone; the two look the same until something is written to it. So
 * it gets a probe it may ignore (an interim "HTTP/1.1 100 Continue" before a whole answer, an
 * SSE comment in a stream): a client that is gone makes the next write fail, and its request
 * is cancelled, which frees its KV pages at the scheduler's next step. Connection limits and
 * timeouts are serve_conn.c's.
 */
#include "cli.h"
#include "serve.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

typedef struct {
    char *body;
    size_t len, cap;
    bool too_big;
    bool answering; /* a generation request, counted in serve_state.n_answers */
} conn_state;

/* Probes of a client that reads as closed: how many, how far apart. */
enum { PROBES = 3 };
static const double PROBE_EVERY_S = 0.5;

static void count_status(serve_state *srv, int status) {
    pthread_mutex_lock(&srv->metrics.mu);
    if (status >= 100 && status < 600)
        srv->metrics.http_requests[status / 100]++;
    pthread_mutex_unlock(&srv->metrics.mu);
}

/* Access-Control-Allow-Origin: "*" for any origin, or the one origin configured. */
static void add_cors(struct MHD_Connection *c, serve_state *srv, struct MHD_Response *r) {
    if (!srv->cors_origin)
        return;
    if (!strcmp(srv->cors_origin, "*")) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        return;
    }
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    MHD_add_response_header(r, "Vary", "Origin");
    if (o && !strcmp(o, srv->cors_origin))
        MHD_add_response_header(r, "Access-Control-Allow-Origin", o);
}

static enum MHD_Result queue(struct MHD_Connection *c, serve_state *srv, int status, struct MHD_Response *r) {
    add_cors(c, srv, r);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    count_status(srv, status);
    return ret;
}

/* A response owning body (freed here when none can be made), with its Content-Type. */
static struct MHD_Response *body_response(char *body, const char *type) {
    if (!body)
        return NULL;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", type);
    return r;
}

static enum MHD_Result send_body(struct MHD_Connection *c, serve_state *srv, int status, char *body,
                                 const char *type, bool close) {
    struct MHD_Response *r = body_response(body, type);
    if (!r)
        return MHD_NO;
    if (close)
        MHD_add_response_header(r, "Connection", "close");
    return queue(c, srv, status, r);
}

static enum MHD_Result send_error(struct MHD_Connection *c, serve_state *srv, const serve_error *e) {
    return send_body(c, srv, e->status, serve_error_json(e), "application/json", false);
}

static enum MHD_Result send_errorf(struct MHD_Connection *c, serve_state *srv, int status, const char *code,
                                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_errorf(struct MHD_Connection *c, serve_state *srv, int status, const char *code,
                                   const char *fmt, ...) {
    serve_error e = {.status = status, .code = code};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return send_error(c, srv, &e);
}

/* 503 with Retry-After while the model loads: nothing but /health is served before it is. */
static enum MHD_Result send_loading(struct MHD_Connection *c, serve_state *srv) {
    const serve_error e = {.status = 503, .code = "loading",
                           .message = "the model is loading (and speculation calibrating); retry shortly"};
    struct MHD_Response *r = body_response(serve_error_json(&e), "application/json");
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Retry-After", "5");
    return queue(c, srv, 503, r);
}

/* What a peek at the client's socket says: 0 nothing new, 1 its side is closed (a half-close
 * or a hang-up), 2 the connection failed (reset). */
static int peer_state(int fd) {
    if (fd < 0)
        return 0;
    char ch;
    ssize_t k = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0)
        return 1;
    return k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR ? 2 : 0;
}

static void wait_a_little(serve_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000)
        ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* Whether the client is still there (j->mu held): when its socket reads as closed, up to
 * PROBES probes it ignores, one each PROBE_EVERY_S; a client that is gone makes a later write,
 * or the peek, fail. stream: the probe is an SSE comment among the job's pending bytes; else
 * probe is written straight to the socket (NULL: none may be sent, and a client that reads as
 * closed is taken as waiting for its answer). Returns false when the client is gone. */
static bool client_alive(serve_job *j, int *probes, double *t_probe, const char *probe, bool stream) {
    const int ps = peer_state(j->fd);
    if (ps == 2)
        return false;
    if (ps == 1)
        j->read_closed = true;
    if (!j->read_closed || *probes >= PROBES || cli_now_s() - *t_probe < PROBE_EVERY_S)
        return true;
    (*probes)++;
    *t_probe = cli_now_s();
    if (stream) {
        /* an SSE comment: clients skip it; a write to a client that is gone fails */
        static const char ping[] = ": ping\n\n";
        if (j->pending_len + sizeof ping > j->pending_cap) {
            size_t cap = j->pending_len + sizeof ping + 256;
            char *p = realloc(j->pending, cap);
            if (!p)
                return true;
            j->pending = p;
            j->pending_cap = cap;
        }
        memcpy(j->pending + j->pending_len, ping, sizeof ping - 1);
        j->pending_len += sizeof ping - 1;
        return true;
    }
    if (!probe)
        return true;
    ssize_t k = send(j->fd, probe, strlen(probe), MSG_NOSIGNAL | MSG_DONTWAIT);
    return k >= 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    serve_job *j = cls;
    (void)pos;
    int probes = 0;
    double t_probe = 0;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->pending_off < j->pending_len) {
            size_t n = j->pending_len - j->pending_off;
            n = n < max ? n : max;
            memcpy(buf, j->pending + j->pending_off, n);
            j->pending_off += n;
            if (j->pending_off == j->pending_len)
                j->pending_off = j->pending_len = 0;
            pthread_mutex_unlock(&j->mu);
            serve_conn_touch(j->conn); /* waiting for tokens is not the client idling */
            return (ssize_t)n;
        }
        if (j->phase == 3) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (serve_job_next_events(j))
            continue;
        wait_a_little(j);
        if (!j->done && !client_alive(j, &probes, &t_probe, NULL, true)) {
            pthread_mutex_unlock(&j->mu);
            serve_job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* The response is gone (sent, or the connection closed): choices not done are cancelled. */
static void stream_free(void *cls) {
    serve_job *j = cls;
    pthread_mutex_lock(&j->mu);
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    if (!done)
        serve_job_cancel(j);
    serve_job_unref(j);
}

static int connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Takes k of --max-requests slots, all or none: 0, or the HTTP status why not (429, 503). */
static int take_slots(serve_state *srv, int k, int *n_busy) {
    int why = 0;
    pthread_mutex_lock(&srv->mu);
    *n_busy = srv->n_slots;
    if (srv->draining)
        why = 503;
    else if (srv->n_slots + k > srv->max_requests)
        why = 429;
    else
        srv->n_slots += k;
    pthread_mutex_unlock(&srv->mu);
    return why;
}

/* A whole (non-streamed) answer, once every choice is done. An HTTP/1.1 client that reads as
 * closed gets interim 100 responses as probes; one that is gone has its choices cancelled. */
static enum MHD_Result answer_whole(struct MHD_Connection *c, serve_state *srv, serve_job *j, bool http11) {
    int probes = 0;
    double t_probe = 0;
    bool gone = false;
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        wait_a_little(j);
        if (!gone && !j->done && !client_alive(j, &probes, &t_probe, http11 ? "HTTP/1.1 100 Continue\r\n\r\n" : NULL, false)) {
            gone = true;
            serve_job_cancel(j); /* the scheduler finishes them at its next step */
        }
    }
    pthread_mutex_unlock(&j->mu);
    serve_conn_touch(c);
    enum MHD_Result ret;
    if (gone)
        ret = MHD_NO;
    else if (j->failed)
        ret = send_errorf(c, srv, 400, "invalid_value", "%s", j->error_msg);
    else if (j->error)
        ret = send_errorf(c, srv, 500, "generation_failed", "the generation failed");
    else
        ret = send_body(c, srv, 200, serve_job_response(j), "application/json", false);
    serve_job_unref(j);
    return ret;
}

static enum MHD_Result generate(struct MHD_Connection *c, serve_state *srv, serve_kind kind, conn_state *cs,
                                bool http11) {
    if (cs->too_big)
        return send_errorf(c, srv, 413, "body_too_large", "the body is larger than %lld bytes", srv->max_body);
    /* one slot first, as a request of one choice needs, so that a full server answers 429
     * before the body is read; the other choices' once the body says how many */
    int n_busy;
    const int why = take_slots(srv, 1, &n_busy);
    if (why == 503)
        return send_errorf(c, srv, 503, "shutting_down", "the server is shutting down");
    if (why == 429)
        return send_errorf(c, srv, 429, "too_many_requests", "%d requests are running; try again later", n_busy);
    /* counted until completed() hears that the answer is sent: a drain waits for that, not
     * only for the job, whose answer may still be queued when the job ends */
    pthread_mutex_lock(&srv->mu);
    srv->n_answers++;
    pthread_mutex_unlock(&srv->mu);
    cs->answering = true;
    serve_error e;
    serve_job *j = serve_job_from_json(srv, kind, cs->body ? cs->body : "", cs->len, &e);
    const int more = j ? take_slots(srv, j->n_choices - 1, &n_busy) : 0;
    if (!j || more) {
        pthread_mutex_lock(&srv->mu);
        srv->n_slots--;
        pthread_mutex_unlock(&srv->mu);
        if (!j)
            return send_error(c, srv, &e);
        const int n_choices = j->n_choices;
        serve_job_unref(j);
        if (more == 503)
            return send_errorf(c, srv, 503, "shutting_down", "the server is shutting down");
        if (n_choices > srv->max_requests) { /* would never fit */
            serve_error en = {.status = 400, .param = "n", .code = "invalid_value"};
            snprintf(en.message, sizeof en.message, "'n' is %d; this server runs at most %d generations at once",
                     n_choices, srv->max_requests);
            return send_error(c, srv, &en);
        }
        return send_errorf(c, srv, 429, "too_many_requests",
                           "%d generations are running; %d choices do not fit; try again later", n_busy - 1,
                           n_choices);
    }
    for (int i = 0; i < j->n_choices; i++)
        j->choices[i].slot = true;
    j->fd = connection_fd(c);
    j->conn = c;
    if (!serve_enqueue(srv, j)) {
        serve_job_unref(j);
        return send_errorf(c, srv, 503, "shutting_down", "the server is shutting down");
    }
    if (!j->stream)
        return answer_whole(c, srv, j, http11);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
    if (!r) {
        stream_free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return queue(c, srv, 200, r);
}

/* Constant-time comparison, so that the key cannot be guessed byte by byte from timings. */
static bool key_ok(const char *got, const char *want) {
    size_t n = strlen(want), m = got ? strlen(got) : 0;
    unsigned char d = n != m;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(want[i] ^ (i < m ? got[i] : 0));
    return d == 0;
}

static bool authorized(struct MHD_Connection *c, const serve_state *srv) {
    if (!srv->api_key)
        return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return key_ok(auth && !strncmp(auth, "Bearer ", 7) ? auth + 7 : NULL, srv->api_key);
}

/* A header list a preflight may echo back: names, commas and spaces only. */
static bool header_list_ok(const char *h) {
    size_t n = strlen(h);
    if (n == 0 || n > 1024)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = h[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
              ch == '_' || ch == ',' || ch == ' '))
            return false;
    }
    return true;
}

/* OPTIONS: the methods, and a CORS preflight's answer (no key needed: browsers send none). */
static enum MHD_Result preflight(struct MHD_Connection *c, serve_state *srv) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Allow", "GET, POST, OPTIONS");
    if (srv->cors_origin) {
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                h && header_list_ok(h) ? h : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    }
    return queue(c, srv, 204, r);
}

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    int *n = cls;
    (void)kind, (void)value;
    if (!strcasecmp(key, "Content-Length"))
        n[0]++;
    else if (!strcasecmp(key, "Transfer-Encoding"))
        n[1]++;
    return MHD_YES;
}

/* Where the body ends must be clear (request smuggling): one Content-Length or one
 * Transfer-Encoding, not both, not twice. */
static bool framing_ok(struct MHD_Connection *c) {
    int n[2] = {0, 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, n);
    return n[0] + n[1] <= 1;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    serve_state *srv = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs)
            return MHD_NO;
        *con_cls = cs;
        if (!framing_ok(c)) {
            serve_conn_busy(c);
            serve_error e = {.status = 400, .code = "invalid_request"};
            snprintf(e.message, sizeof e.message,
                     "the request has more than one Content-Length or Transfer-Encoding header");
            return send_body(c, srv, 400, serve_error_json(&e), "application/json", true);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->too_big && cs->len + *upload_size > (size_t)srv->max_body) {
            cs->too_big = true;
            free(cs->body);
            cs->body = NULL;
            cs->len = cs->cap = 0;
        }
        if (!cs->too_big) {
            if (cs->len + *upload_size + 1 > cs->cap) {
                size_t cap = cs->cap ? cs->cap : 4096;
                while (cap < cs->len + *upload_size + 1)
                    cap *= 2;
                char *p = realloc(cs->body, cap);
                if (!p)
                    return MHD_NO;
                cs->body = p;
                cs->cap = cap;
            }
            memcpy(cs->body + cs->len, upload, *upload_size);
            cs->len += *upload_size;
            cs->body[cs->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    serve_conn_busy(c); /* the request is whole: no header timeout while it is answered */
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS"))
        return preflight(c, srv);
    pthread_mutex_lock(&srv->mu);
    const bool draining = srv->draining, ready = srv->ready;
    pthread_mutex_unlock(&srv->mu);
    if (!strcmp(url, "/health")) {
        if (!get)
            return send_errorf(c, srv, 405, "method_not_allowed", "use GET for %s", url);
        /* as llama-server: 503 while the model loads (here also while speculation calibrates) */
        return send_body(c, srv, draining || !ready ? 503 : 200,
                         strdup(draining ? "{\"status\":\"draining\"}"
                                : !ready ? "{\"status\":\"loading\"}" : "{\"status\":\"ok\"}"),
                         "application/json", false);
    }
    if (!strcmp(url, "/")) {
        if (!get)
            return send_errorf(c, srv, 405, "method_not_allowed", "use GET for %s", url);
        struct MHD_Response *r = serve_page_response();
        return r ? queue(c, srv, 200, r) : MHD_NO;
    }
    if (!ready)
        return send_loading(c, srv);
    const bool metrics = !strcmp(url, "/metrics");
    const bool tok = !strcmp(url, "/tokenize"), detok = !strcmp(url, "/detokenize");
    if ((metrics || tok || detok || !strncmp(url, "/v1/", 4)) && !authorized(c, srv))
        return send_errorf(c, srv, 401, "invalid_api_key", "a valid API key is required (Authorization: Bearer KEY)");
    if (metrics) {
        if (!get)
            return send_errorf(c, srv, 405, "method_not_allowed", "use GET for %s", url);
        return send_body(c, srv, 200, serve_metrics_text(srv), "text/plain; version=0.0.4", false);
    }
    if (tok || detok) {
        if (!post)
            return send_errorf(c, srv, 405, "method_not_allowed", "use POST for %s", url);
        if (cs->too_big)
            return send_errorf(c, srv, 413, "body_too_large", "the body is larger than %lld bytes", srv->max_body);
        serve_error e = {0};
        const char *b = cs->body ? cs->body : "";
        char *json = tok ? serve_tokenize_json(srv, b, cs->len, &e) : serve_detokenize_json(srv, b, cs->len, &e);
        return json ? send_body(c, srv, 200, json, "application/json", false) : send_error(c, srv, &e);
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get)
            return send_errorf(c, srv, 405, "method_not_allowed", "use GET for %s", url);
        return send_body(c, srv, 200, serve_models_json(srv), "application/json", false);
    }
    const bool chat = !strcmp(url, "/v1/chat/completions"), cmpl = !strcmp(url, "/v1/completions");
    if (chat || cmpl) {
        if (!post)
            return send_errorf(c, srv, 405, "method_not_allowed", "use POST for %s", url);
        return generate(c, srv, chat ? JOB_CHAT : JOB_COMPLETION, cs, version && !strcmp(version, "HTTP/1.1"));
    }
    return send_errorf(c, srv, 404, "not_found", "no route for %s %.200s", method, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    serve_state *srv = cls;
    conn_state *cs = *con_cls;
    if (cs) {
        if (cs->answering) {
            pthread_mutex_lock(&srv->mu);
            srv->n_answers--;
            pthread_cond_broadcast(&srv->wake);
            pthread_mutex_unlock(&srv->mu);
        }
        free(cs->body);
        free(cs);
        *con_cls = NULL;
    }
    serve_conn_done(c, toe);
}

/* Every connection is a descriptor (and a thread): the soft limit on descriptors is raised
 * to what the connection limit needs, as far as the hard limit allows. */
static void raise_fd_limit(unsigned need) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need)
        return;
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need ? rl.rlim_max : need;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need)
        fprintf(stderr, "seer serve: warning: the descriptor limit (%llu) is below what --max-connections needs (%u)\n",
                (unsigned long long)rl.rlim_cur, need);
}

struct MHD_Daemon *serve_http_start(serve_state *srv) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV},
                    *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", srv->port);
    int rc = getaddrinfo(srv->host, port, &hints, &ai);
    if (rc != 0) {
        fprintf(stderr, "seer serve: --host %s: %s\n", srv->host, gai_strerror(rc));
        return NULL;
    }
    /* poll(), not select(): descriptors past FD_SETSIZE are fine */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* libmicrohttpd's own limit is a backstop above ours: evicted connections count until
     * their threads have closed them */
    const unsigned hard = (unsigned)srv->max_conns + (unsigned)(srv->max_conns / 4 > 64 ? srv->max_conns / 4 : 64);
    raise_fd_limit(hard + 64);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)srv->port, NULL, NULL, handler, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, completed, srv, MHD_OPTION_NOTIFY_CONNECTION, serve_conns_notify, srv->conns,
        MHD_OPTION_CONNECTION_LIMIT, hard, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SERVE_SEND_TIMEOUT_S,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_EXTERNAL_LOGGER, serve_conn_log, srv, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d)
        fprintf(stderr, "seer serve: cannot listen on %s:%d\n", srv->host, srv->port);
    return d;
}
