/*
 * serve_http.c: the HTTP side of `seer serve`, on libmicrohttpd (Debian's libmicrohttpd-dev:
 * maintained, small, HTTP/1.1 with chunked responses, one thread per connection so that a
 * handler may block until its request has output).
 *
 * Routes: GET /health, GET /metrics, and under /v1 (behind --api-key when given): GET
 * /v1/models, POST /v1/completions, POST /v1/chat/completions. A body over --max-body is
 * read and dropped, then answered 413; more than --max-requests generations at once get 429;
 * a draining server answers 503. A client that closes its connection is noticed by a peek at
 * its socket while its handler waits, and by a failed write while it streams: its request is
 * cancelled, which frees its KV pages at the scheduler's next step.
 */
#include "serve.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct {
    char *body;
    size_t len, cap;
    bool too_big;
} conn_state;

static void count_status(serve_state *srv, int status) {
    pthread_mutex_lock(&srv->metrics.mu);
    if (status >= 100 && status < 600)
        srv->metrics.http_requests[status / 100]++;
    pthread_mutex_unlock(&srv->metrics.mu);
}

static enum MHD_Result send_body(struct MHD_Connection *c, serve_state *srv, int status, char *body,
                                 const char *type) {
    if (!body)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    count_status(srv, status);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, serve_state *srv, const serve_error *e) {
    return send_body(c, srv, e->status, serve_error_json(e), "application/json");
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

/* Whether the peer has closed its side: a pending EOF (or an error) on the socket. */
static bool client_gone(int fd) {
    if (fd < 0)
        return false;
    char ch;
    ssize_t k = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void wait_a_little(serve_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000)
        ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    serve_job *j = cls;
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
            return (ssize_t)n;
        }
        if (j->phase == 3) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (serve_job_next_events(j))
            continue;
        wait_a_little(j);
        if (!j->done && client_gone(j->fd)) {
            pthread_mutex_unlock(&j->mu);
            seer_request_cancel(j->req);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* The response is gone (sent, or the connection closed): a request not done is cancelled. */
static void stream_free(void *cls) {
    serve_job *j = cls;
    pthread_mutex_lock(&j->mu);
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    if (!done)
        seer_request_cancel(j->req);
    serve_job_unref(j);
}

static int connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static enum MHD_Result generate(struct MHD_Connection *c, serve_state *srv, serve_kind kind, conn_state *cs) {
    if (cs->too_big)
        return send_errorf(c, srv, 413, "body_too_large", "the body is larger than %lld bytes", srv->max_body);
    pthread_mutex_lock(&srv->mu);
    const bool draining = srv->draining;
    const int n_jobs = srv->n_jobs;
    pthread_mutex_unlock(&srv->mu);
    if (draining)
        return send_errorf(c, srv, 503, "shutting_down", "the server is shutting down");
    if (n_jobs >= srv->max_requests)
        return send_errorf(c, srv, 429, "too_many_requests", "%d requests are running; try again later", n_jobs);
    serve_error e;
    serve_job *j = serve_job_from_json(srv, kind, cs->body ? cs->body : "", cs->len, &e);
    if (!j)
        return send_error(c, srv, &e);
    j->fd = connection_fd(c);
    if (!serve_enqueue(srv, j)) {
        serve_job_unref(j);
        return send_errorf(c, srv, 503, "shutting_down", "the server is shutting down");
    }
    if (j->stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
        if (!r) {
            stream_free(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        count_status(srv, 200);
        return ret;
    }
    pthread_mutex_lock(&j->mu);
    bool gone = false;
    while (!j->done) {
        wait_a_little(j);
        if (!gone && !j->done && client_gone(j->fd)) {
            gone = true;
            seer_request_cancel(j->req); /* the scheduler finishes it at its next step */
        }
    }
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result ret;
    if (gone) {
        ret = MHD_NO;
    } else if (j->failed) {
        ret = send_errorf(c, srv, 400, "invalid_value", "%s", j->error_msg);
    } else {
        ret = send_body(c, srv, 200, serve_job_response(j), "application/json");
    }
    serve_job_unref(j);
    return ret;
}

/* Constant-time comparison, so that the key cannot be guessed byte by byte from timings. */
static bool key_ok(const char *got, const char *want) {
    size_t n = strlen(want), m = got ? strlen(got) : 0;
    unsigned char d = n != m;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(want[i] ^ (i < m ? got[i] : 0));
    return d == 0;
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
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get)
            return send_errorf(c, srv, 405, "method_not_allowed", "use GET for %s", url);
        pthread_mutex_lock(&srv->mu);
        bool draining = srv->draining;
        pthread_mutex_unlock(&srv->mu);
        return send_body(c, srv, draining ? 503 : 200,
                         strdup(draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}"), "application/json");
    }
    if (!strcmp(url, "/metrics")) {
        if (!get)
            return send_errorf(c, srv, 405, "method_not_allowed", "use GET for %s", url);
        return send_body(c, srv, 200, serve_metrics_text(srv), "text/plain; version=0.0.4");
    }
    if (!strncmp(url, "/v1/", 4) && srv->api_key) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        const char *key = auth && !strncmp(auth, "Bearer ", 7) ? auth + 7 : NULL;
        if (!key_ok(key, srv->api_key))
            return send_errorf(c, srv, 401, "invalid_api_key", "a valid API key is required (Authorization: Bearer KEY)");
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get)
            return send_errorf(c, srv, 405, "method_not_allowed", "use GET for %s", url);
        return send_body(c, srv, 200, serve_models_json(srv), "application/json");
    }
    const bool chat = !strcmp(url, "/v1/chat/completions"), cmpl = !strcmp(url, "/v1/completions");
    if (chat || cmpl) {
        if (!post)
            return send_errorf(c, srv, 405, "method_not_allowed", "use POST for %s", url);
        return generate(c, srv, chat ? JOB_CHAT : JOB_COMPLETION, cs);
    }
    return send_errorf(c, srv, 404, "not_found", "no route for %s %.200s", method, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn_state *cs = *con_cls;
    if (cs) {
        free(cs->body);
        free(cs);
        *con_cls = NULL;
    }
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
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)srv->port, NULL, NULL, handler, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(srv->max_requests + 16), MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d)
        fprintf(stderr, "seer serve: cannot listen on %s:%d\n", srv->host, srv->port);
    return d;
}
