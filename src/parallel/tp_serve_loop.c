/*
 * tp_serve_loop.c: the connections of ranks in separate processes (tp_remote.h). Rank 0
 * listens and takes each other rank's hello (its rank and the group's size); a rank's process
 * connects, says hello, then runs rank 0's ops in order (tp_serve.c), answering those rank 0
 * waits for, until goodbye.
 * Not for: what an op does (tp_serve.c) or how rank 0 sends it (tp_remote.c).
 */
#include "parallel/tp_bootstrap.h"
#include "parallel/tp_remote.h"
#include "util/error.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Answers a message with status s (and on failure the last error). */
static seer_status answer(int fd, seer_status s, tp_wbuf *w, int timeout_ms) {
    if (s != SEER_OK) {
        const char *e = seer_last_error();
        seer_tp_w_reset(w);
        seer_tp_w_bytes(w, e, strlen(e));
    }
    return seer_tp_wire_send(fd, (uint32_t)s, 0, 0, w, timeout_ms);
}

/* One rank's hello on c: its rank, which must be new and within n. */
static seer_status hello(int c, int n, const int *fds, int timeout_ms, int *rank) {
    tp_wire_hdr h;
    void *p = NULL;
    SEER_TRY(seer_tp_wire_recv(c, &h, &p, timeout_ms));
    tp_msg m;
    seer_status s = seer_tp_msg_parse(p, (size_t)h.bytes, &m);
    if (s == SEER_OK && h.kind != TP_OP_HELLO)
        s = seer_err(SEER_ERR_INVALID_ARG, "tensor parallelism: a peer began with op %u, not hello", h.kind);
    if (s == SEER_OK)
        s = seer_tp_msg_check(&m, "ii", "hello");
    if (s == SEER_OK && (m.f[1].i != n || m.f[0].i < 1 || m.f[0].i >= n || fds[m.f[0].i] >= 0))
        s = seer_err(SEER_ERR_INVALID_ARG,
                     "tensor parallelism: a peer says it is rank %lld of %lld; rank 0 expects ranks 1 to %d of %d, "
                     "each once",
                     (long long)m.f[0].i, (long long)m.f[1].i, n - 1, n);
    if (s == SEER_OK)
        *rank = (int)m.f[0].i;
    free(p);
    tp_wbuf w = {0};
    char msg[512];
    snprintf(msg, sizeof msg, "%s", s != SEER_OK ? seer_last_error() : "");
    (void)answer(c, s, &w, timeout_ms); /* the peer learns why it was refused */
    seer_tp_w_free(&w);
    if (s != SEER_OK)
        return seer_err(s, "%s", msg);
    return SEER_OK;
}

seer_status seer_tp_remote_accept(const char *addr, int n, int timeout_ms, int *fds) {
    for (int r = 0; r < SEER_TP_MAX; r++)
        fds[r] = -1;
    if (n < 2 || n > SEER_TP_MAX || timeout_ms <= 0)
        return seer_err(SEER_ERR_INVALID_ARG, "tensor parallelism over processes: %d ranks (2 to %d), %d ms", n,
                        SEER_TP_MAX, timeout_ms);
    int ls;
    SEER_TRY(seer_tp_listen(addr, n, &ls));
    const long long deadline = now_ms() + timeout_ms;
    seer_status s = SEER_OK;
    for (int got = 1; got < n && s == SEER_OK;) {
        const long long left = deadline - now_ms();
        int c = -1, r = -1;
        s = left > 0 ? seer_tp_accept_one(ls, (int)left, &c) : SEER_ERR_IO;
        if (s != SEER_OK) {
            s = seer_err(SEER_ERR_IO, "tensor parallelism: %d of %d ranks connected to %s within %d ms", got, n, addr,
                         timeout_ms);
            break;
        }
        s = hello(c, n, fds, timeout_ms, &r);
        if (s == SEER_OK) {
            fds[r] = c;
            got++;
        } else {
            close(c);
        }
    }
    close(ls);
    if (s != SEER_OK)
        for (int r = 1; r < n; r++)
            if (fds[r] >= 0) {
                close(fds[r]);
                fds[r] = -1;
            }
    return s;
}

seer_status seer_tp_worker_run(const char *addr, int rank, int n, seer_backend *be, int timeout_ms) {
    if (n < 2 || n > SEER_TP_MAX || rank < 1 || rank >= n)
        return seer_err(SEER_ERR_INVALID_ARG, "tensor parallelism: rank %d of %d (a worker is rank 1 to %d)", rank, n,
                        n - 1);
    int fd;
    SEER_TRY(seer_tp_connect(addr, timeout_ms, &fd));
    tp_wbuf w = {0};
    seer_tp_w_int(&w, rank);
    seer_tp_w_int(&w, n);
    seer_status s = seer_tp_wire_send(fd, TP_OP_HELLO, 0, 0, &w, timeout_ms);
    tp_wire_hdr h;
    void *p = NULL;
    if (s == SEER_OK)
        s = seer_tp_wire_recv(fd, &h, &p, timeout_ms);
    if (s == SEER_OK && h.kind != SEER_OK) {
        tp_msg m;
        const bool has = seer_tp_msg_parse(p, (size_t)h.bytes, &m) == SEER_OK && m.n == 1 && m.f[0].type == TP_F_BYTES;
        s = seer_err((seer_status)h.kind, "rank 0 refused rank %d: %.*s", rank,
                     has ? (int)(m.f[0].len < 1024 ? m.f[0].len : 1024) : 0,
                     has ? (const char *)m.f[0].data : "");
    }
    free(p);
    tp_serve *sv = NULL;
    if (s == SEER_OK)
        s = seer_tp_serve_init(be, &sv);
    /* Rank 0 may think for as long as it likes between ops (a user's next request): the
     * stream waits for a message's first byte without a limit, for the rest of it as for
     * anything else; a closed connection ends it. Messages run in the order they came; only
     * those rank 0 waits for are answered. */
    tp_reader rd = seer_tp_reader(fd);
    while (s == SEER_OK) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = 1;
        while (!seer_tp_reader_has(&rd) && (r = poll(&pf, 1, -1)) < 0 && errno == EINTR)
            ;
        if (r < 0) {
            s = seer_err(SEER_ERR_IO, "tensor-parallel link: poll: %s", strerror(errno));
            break;
        }
        s = seer_tp_wire_read(&rd, &h, &p, timeout_ms);
        if (s != SEER_OK)
            break;
        seer_tp_w_reset(&w);
        if (h.kind == TP_OP_BYE) {
            (void)answer(fd, SEER_OK, &w, timeout_ms);
            free(p);
            break;
        }
        if (h.flags & TP_WIRE_NO_REPLY) {
            (void)seer_tp_serve_post(sv, h.kind, h.inst, p, (size_t)h.bytes);
            free(p);
            continue;
        }
        const seer_status os = seer_tp_serve_msg(sv, h.kind, h.inst, p, (size_t)h.bytes, &w);
        free(p);
        s = answer(fd, os, &w, timeout_ms);
    }
    seer_tp_reader_free(&rd);
    seer_tp_serve_free(sv);
    seer_tp_w_free(&w);
    close(fd);
    return s;
}
