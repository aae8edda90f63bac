/*
 * serve_conn.c: the connection table of `seer serve`: which connections are open, from which
 * address, and whether each is still reading its request or busy with its answer.
 *
 * It keeps idle and slow clients from shutting others out (slowloris: many connections that
 * each send a few bytes of a request and wait). A connection must send its whole request,
 * headers and body, within --header-timeout seconds of its accept or of the end of its
 * previous answer (keep-alive); a watchdog thread shuts down those that do not. When a new
 * connection takes a client (an IP address) past --max-connections-per-client, the oldest
 * of that client's connections still reading its request is shut down; when it takes the
 * server past --max-connections, the oldest reading one of anyone's is. A busy connection
 * (a request being answered, a stream in progress) is never evicted nor timed out here: its
 * limit is --max-requests and libmicrohttpd's send timeout. So no number of idle connections
 * can keep /health or a client with a key from being served: theirs are the newest.
 *
 * Not for: the HTTP routes (serve_http.c). Evicting is shutdown(2) of the socket, which
 * wakes its libmicrohttpd thread to close it; the entry stays, marked, until libmicrohttpd
 * reports the connection closed (before it closes the descriptor, so the descriptor shut
 * down is always still this connection's).
 */
#include "cli.h"
#include "serve.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct conn_entry {
    struct conn_entry *prev, *next;
    serve_conns *t;
    int fd;
    unsigned char ip[16]; /* the client's address (port left out) */
    int ip_len;
    bool busy;            /* its request is whole: answering */
    bool evicted;         /* shut down by us; closing */
    double t_phase;       /* when it began reading its current request */
} conn_entry;

struct serve_conns {
    serve_state *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    conn_entry *head, *tail; /* oldest first */
    int n_open;              /* not evicted */
    bool stop;
    pthread_t watchdog;
};

static void count_close(serve_state *srv, serve_close_why why) {
    pthread_mutex_lock(&srv->metrics.mu);
    srv->metrics.conn_closed[why]++;
    pthread_mutex_unlock(&srv->metrics.mu);
}

/* t->mu held. */
static void evict(serve_conns *t, conn_entry *e, serve_close_why why) {
    e->evicted = true;
    t->n_open--;
    shutdown(e->fd, SHUT_RDWR);
    count_close(t->srv, why);
    if (t->srv->verbose)
        fprintf(stderr, "seer serve: connection %d closed: %s\n", e->fd,
                why == SERVE_CLOSE_EVICTED ? "evicted for a newer one" : "no whole request in time");
}

static bool same_client(const conn_entry *a, const conn_entry *b) {
    return a->ip_len == b->ip_len && !memcmp(a->ip, b->ip, (size_t)a->ip_len);
}

/* The oldest connection still reading its request; of client `of` alone when not NULL. */
static conn_entry *oldest_reading(serve_conns *t, const conn_entry *of) {
    conn_entry *best = NULL;
    for (conn_entry *e = t->head; e; e = e->next)
        if (!e->evicted && !e->busy && (!of || same_client(e, of)) && (!best || e->t_phase < best->t_phase))
            best = e;
    return best;
}

static void client_address(struct MHD_Connection *c, conn_entry *e) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET) {
        memcpy(e->ip, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        e->ip_len = 4;
    } else if (sa && sa->sa_family == AF_INET6) {
        const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(a, v4mapped, 12)) {
            memcpy(e->ip, a + 12, 4);
            e->ip_len = 4;
        } else {
            memcpy(e->ip, a, 16);
            e->ip_len = 16;
        }
    }
}

/* A new connection: in the table, then room made under the limits (oldest reading first; the
 * new one itself when every other connection of the client, or of the server, is busy). */
static void conn_started(serve_conns *t, struct MHD_Connection *c, void **socket_context) {
    conn_entry *e = calloc(1, sizeof *e);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!e) {
        if (ci)
            shutdown(ci->connect_fd, SHUT_RDWR);
        return;
    }
    e->t = t;
    e->fd = ci ? ci->connect_fd : -1;
    e->t_phase = cli_now_s();
    client_address(c, e);
    *socket_context = e;
    pthread_mutex_lock(&t->mu);
    e->prev = t->tail;
    if (t->tail)
        t->tail->next = e;
    else
        t->head = e;
    t->tail = e;
    t->n_open++;
    const serve_state *srv = t->srv;
    if (srv->max_conns_per_client > 0) {
        int n = 0;
        for (conn_entry *x = t->head; x; x = x->next)
            n += !x->evicted && same_client(x, e);
        if (n > srv->max_conns_per_client) {
            conn_entry *v = oldest_reading(t, e);
            evict(t, v ? v : e, SERVE_CLOSE_EVICTED);
        }
    }
    if (!e->evicted && t->n_open > srv->max_conns) {
        conn_entry *v = oldest_reading(t, NULL);
        evict(t, v ? v : e, SERVE_CLOSE_EVICTED);
    }
    pthread_mutex_unlock(&t->mu);
}

void serve_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe) {
    serve_conns *t = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_started(t, c, socket_context);
        return;
    }
    conn_entry *e = *socket_context;
    if (!e)
        return;
    pthread_mutex_lock(&t->mu);
    if (e->prev)
        e->prev->next = e->next;
    else
        t->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        t->tail = e->prev;
    if (!e->evicted)
        t->n_open--;
    pthread_mutex_unlock(&t->mu);
    free(e);
    *socket_context = NULL;
}

static conn_entry *entry_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
    return ci ? ci->socket_context : NULL;
}

static void set_phase(struct MHD_Connection *c, bool busy) {
    conn_entry *e = entry_of(c);
    if (!e)
        return;
    pthread_mutex_lock(&e->t->mu);
    e->busy = busy;
    if (!busy)
        e->t_phase = cli_now_s();
    pthread_mutex_unlock(&e->t->mu);
}

void serve_conn_busy(struct MHD_Connection *c) { set_phase(c, true); }

void serve_conn_done(struct MHD_Connection *c, enum MHD_RequestTerminationCode toe) {
    conn_entry *e = entry_of(c);
    if (!e)
        return;
    pthread_mutex_lock(&e->t->mu);
    const bool evicted = e->evicted, busy = e->busy;
    pthread_mutex_unlock(&e->t->mu);
    set_phase(c, false);
    if (evicted || toe == MHD_REQUEST_TERMINATED_COMPLETED_OK || toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN)
        return;
    count_close(e->t->srv, toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED
                               ? (busy ? SERVE_CLOSE_SEND_TIMEOUT : SERVE_CLOSE_HEADER_TIMEOUT)
                               : SERVE_CLOSE_CLIENT);
}

void serve_conn_touch(struct MHD_Connection *c) {
    if (!c)
        return;
    /* libmicrohttpd restarts the timer when a connection's timeout goes from none to some */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)SERVE_SEND_TIMEOUT_S);
}

int serve_conns_open(serve_conns *t) {
    if (!t)
        return 0;
    pthread_mutex_lock(&t->mu);
    int n = t->n_open;
    pthread_mutex_unlock(&t->mu);
    return n;
}

/* Shuts down the connections whose request is late, about every 100 ms. */
static void *watchdog(void *arg) {
    serve_conns *t = arg;
    const double limit = t->srv->header_timeout_s;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000)
            ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        const double now = cli_now_s();
        for (conn_entry *e = t->head; e; e = e->next)
            if (!e->evicted && !e->busy && now - e->t_phase > limit)
                evict(t, e, SERVE_CLOSE_HEADER_TIMEOUT);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

serve_conns *serve_conns_new(serve_state *srv) {
    serve_conns *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->srv = srv;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (pthread_create(&t->watchdog, NULL, watchdog, t) != 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    return t;
}

void serve_conns_free(serve_conns *t) {
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->watchdog, NULL);
    for (conn_entry *e = t->head, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void serve_conn_log(void *cls, const char *fmt, va_list ap) {
    const serve_state *srv = cls;
    if (!srv->verbose)
        return;
    fputs("seer serve: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}
