/*
 * tp_bootstrap.c: how ranks in separate processes would meet (tp_bootstrap.h). Rank 0 listens
 * at HOST:PORT; every other rank connects (trying again until rank 0 listens or the time is
 * up) and sends a header (magic, its rank, the number of ranks, its blob's size) and its blob;
 * rank 0 checks them (each rank once, all of one size and group) and answers every rank with
 * every blob in rank order. What the blobs hold is the caller's: NCCL's unique id in rank 0's,
 * CUDA IPC handles of the one-shot all-reduce's buffers in each rank's.
 * Not for: the op stream the ranks would then replay (docs/tensor-parallel.md says what is
 * missing), or authentication: the port is to be reachable only by the group's processes.
 */
#include "parallel/tp_bootstrap.h"
#include "util/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BOOT_MAGIC 0x73656572747030ull /* "seertp0" */

typedef struct {
    uint64_t magic;
    int32_t rank, n;
    uint64_t bytes;
} boot_hdr;

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until fd can be read (or written); false when the deadline passes first. */
static bool wait_fd(int fd, short ev, long long deadline) {
    for (;;) {
        const long long left = deadline - now_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = fd, .events = ev};
        const int r = poll(&p, 1, (int)(left < 1000 ? left : 1000));
        if (r > 0)
            return true;
        if (r < 0 && errno != EINTR)
            return false;
    }
}

static seer_status io_all(int fd, void *buf, size_t n, bool wr, long long deadline, const char *what) {
    char *p = buf;
    while (n > 0) {
        if (!wait_fd(fd, wr ? POLLOUT : POLLIN, deadline))
            return seer_err(SEER_ERR_IO, "tensor-parallel bootstrap: timed out %s", what);
        const ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return seer_err(SEER_ERR_IO, "tensor-parallel bootstrap: %s: %s", what,
                            k == 0 ? "the peer closed the connection" : strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return SEER_OK;
}

/* HOST:PORT (HOST a name or an address; [v6]:PORT) into host and port. */
static seer_status parse_addr(const char *addr, char *host, size_t cap, char *port, size_t pcap) {
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!colon || colon == addr || !colon[1])
        return seer_err(SEER_ERR_INVALID_ARG, "tensor-parallel bootstrap: '%s' is not HOST:PORT", addr ? addr : "(null)");
    size_t hl = (size_t)(colon - addr);
    const char *h = addr;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']')
        h++, hl -= 2;
    char *end = NULL;
    const long pn = strtol(colon + 1, &end, 10);
    if (*end || pn < 1 || pn > 65535 || hl >= cap)
        return seer_err(SEER_ERR_INVALID_ARG, "tensor-parallel bootstrap: '%s' is not HOST:PORT (port 1 to 65535)", addr);
    memcpy(host, h, hl);
    host[hl] = 0;
    snprintf(port, pcap, "%ld", pn);
    return SEER_OK;
}

static seer_status resolve(const char *addr, struct addrinfo **out, bool passive) {
    char host[256], port[16];
    SEER_TRY(parse_addr(addr, host, sizeof host, port, sizeof port));
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    const int e = getaddrinfo(host, port, &hints, out);
    if (e != 0)
        return seer_err(SEER_ERR_INVALID_ARG, "tensor-parallel bootstrap: cannot resolve %s: %s", addr, gai_strerror(e));
    return SEER_OK;
}

/* Rank 0: listens, takes the others' blobs, answers each with all of them. */
static seer_status serve(const char *addr, int n, size_t bytes, char *all, long long deadline) {
    struct addrinfo *ai = NULL;
    SEER_TRY(resolve(addr, &ai, true));
    int ls = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    const int one = 1;
    seer_status s = SEER_OK;
    if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, n) != 0)
        s = seer_err(SEER_ERR_IO, "tensor-parallel bootstrap: cannot listen at %s: %s", addr, strerror(errno));
    freeaddrinfo(ai);
    int fd[SEER_TP_MAX];
    for (int r = 0; r < SEER_TP_MAX; r++)
        fd[r] = -1;
    for (int got = 1; got < n && s == SEER_OK; got++) {
        if (!wait_fd(ls, POLLIN, deadline)) {
            s = seer_err(SEER_ERR_IO, "tensor-parallel bootstrap: %d of %d ranks arrived at %s in time", got, n, addr);
            break;
        }
        const int c = accept(ls, NULL, NULL);
        if (c < 0) {
            s = seer_err(SEER_ERR_IO, "tensor-parallel bootstrap: accept: %s", strerror(errno));
            break;
        }
        boot_hdr h;
        s = io_all(c, &h, sizeof h, false, deadline, "reading a rank's header");
        if (s == SEER_OK && (h.magic != BOOT_MAGIC || h.n != n || h.bytes != bytes || h.rank < 1 || h.rank >= n ||
                             fd[h.rank] >= 0))
            s = seer_err(SEER_ERR_INVALID_ARG,
                         "tensor-parallel bootstrap: a peer sent rank %d of %d with %llu bytes; rank 0 expects "
                         "ranks 1 to %d, each once, of %d with %zu bytes",
                         (int)h.rank, (int)h.n, (unsigned long long)h.bytes, n - 1, n, bytes);
        if (s == SEER_OK)
            s = io_all(c, all + (size_t)h.rank * bytes, bytes, false, deadline, "reading a rank's blob");
        if (s == SEER_OK)
            fd[h.rank] = c;
        else
            close(c);
    }
    for (int r = 1; r < n && s == SEER_OK; r++)
        s = io_all(fd[r], all, (size_t)n * bytes, true, deadline, "sending the blobs");
    for (int r = 1; r < n; r++)
        if (fd[r] >= 0)
            close(fd[r]);
    if (ls >= 0)
        close(ls);
    return s;
}

/* Rank r > 0: connects (again until rank 0 listens), sends its blob, reads all of them. */
static seer_status join(const char *addr, int rank, int n, size_t bytes, char *all, long long deadline) {
    for (;;) {
        struct addrinfo *ai = NULL;
        SEER_TRY(resolve(addr, &ai, false));
        int c = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        const bool ok = c >= 0 && connect(c, ai->ai_addr, ai->ai_addrlen) == 0;
        freeaddrinfo(ai);
        if (ok) {
            const boot_hdr h = {BOOT_MAGIC, rank, n, bytes};
            seer_status s = io_all(c, (void *)&h, sizeof h, true, deadline, "sending the header");
            if (s == SEER_OK)
                s = io_all(c, all + (size_t)rank * bytes, bytes, true, deadline, "sending the blob");
            if (s == SEER_OK)
                s = io_all(c, all, (size_t)n * bytes, false, deadline, "reading the blobs");
            close(c);
            return s;
        }
        const int e = errno;
        if (c >= 0)
            close(c);
        if (now_ms() >= deadline)
            return seer_err(SEER_ERR_IO, "tensor-parallel bootstrap: rank %d cannot reach rank 0 at %s: %s", rank,
                            addr, strerror(e));
        usleep(20000); /* rank 0 not listening yet */
    }
}

seer_status seer_tp_bootstrap(const char *addr, int rank, int n, const void *blob, size_t bytes, void *all,
                              int timeout_ms) {
    if (n < 1 || n > SEER_TP_MAX || rank < 0 || rank >= n)
        return seer_err(SEER_ERR_INVALID_ARG, "tensor-parallel bootstrap: rank %d of %d ranks (1 to %d ranks)", rank, n,
                        SEER_TP_MAX);
    if (!all || (bytes && !blob) || bytes > ((size_t)1 << 20) || timeout_ms <= 0)
        return seer_err(SEER_ERR_INVALID_ARG, "tensor-parallel bootstrap: a blob of %zu bytes (at most 1 MiB), "
                        "a timeout of %d ms", bytes, timeout_ms);
    char *a = all;
    memmove(a + (size_t)rank * bytes, blob, bytes);
    if (n == 1)
        return SEER_OK;
    const long long deadline = now_ms() + timeout_ms;
    return rank == 0 ? serve(addr, n, bytes, a, deadline) : join(addr, rank, n, bytes, a, deadline);
}

seer_status seer_tp_listen(const char *addr, int backlog, int *fd) {
    *fd = -1;
    struct addrinfo *ai = NULL;
    SEER_TRY(resolve(addr, &ai, true));
    int ls = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    const int one = 1;
    seer_status s = SEER_OK;
    if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, backlog) != 0)
        s = seer_err(SEER_ERR_IO, "tensor parallelism: cannot listen at %s: %s", addr, strerror(errno));
    freeaddrinfo(ai);
    if (s != SEER_OK) {
        if (ls >= 0)
            close(ls);
        return s;
    }
    *fd = ls;
    return SEER_OK;
}

seer_status seer_tp_connect(const char *addr, int timeout_ms, int *fd) {
    *fd = -1;
    const long long deadline = now_ms() + timeout_ms;
    for (;;) {
        struct addrinfo *ai = NULL;
        SEER_TRY(resolve(addr, &ai, false));
        int c = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        const bool ok = c >= 0 && connect(c, ai->ai_addr, ai->ai_addrlen) == 0;
        freeaddrinfo(ai);
        if (ok) {
            const int one = 1; /* ops are small messages answered one by one */
            (void)setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            *fd = c;
            return SEER_OK;
        }
        const int e = errno;
        if (c >= 0)
            close(c);
        if (now_ms() >= deadline)
            return seer_err(SEER_ERR_IO, "tensor parallelism: cannot reach rank 0 at %s: %s", addr, strerror(e));
        usleep(20000); /* rank 0 not listening yet */
    }
}

seer_status seer_tp_accept_one(int ls, int timeout_ms, int *fd) {
    *fd = -1;
    const long long deadline = now_ms() + timeout_ms;
    if (!wait_fd(ls, POLLIN, deadline))
        return seer_err(SEER_ERR_IO, "tensor parallelism: no rank connected in %d ms", timeout_ms);
    const int c = accept(ls, NULL, NULL);
    if (c < 0)
        return seer_err(SEER_ERR_IO, "tensor parallelism: accept: %s", strerror(errno));
    const int one = 1;
    (void)setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd = c;
    return SEER_OK;
}
