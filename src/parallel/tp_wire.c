/*
 * tp_wire.c: the op stream's messages (tp_wire.h): writing fields, parsing a payload back
 * into fields, and moving a message over a socket with a time limit (a header and its payload
 * in one call; a stream of them read through a buffer).
 */
#include "parallel/tp_wire.h"
#include "util/error.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

static void put(tp_wbuf *w, const void *p, size_t n) {
    if (w->oom)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n)
            cap *= 2;
        char *nb = realloc(w->buf, cap);
        if (!nb) {
            w->oom = true;
            return;
        }
        w->buf = nb;
        w->cap = cap;
    }
    if (n)
        memcpy(w->buf + w->len, p, n);
    w->len += n;
}

/* A field's header: its type and seven zero bytes, so that every value and every string's bytes
 * start at a multiple of 8 from the payload's start (arrays of int32 and float are read in
 * place). */
static void put_tag(tp_wbuf *w, char t) {
    const char h[8] = {t};
    put(w, h, sizeof h);
}

void seer_tp_w_int(tp_wbuf *w, int64_t v) {
    put_tag(w, TP_F_INT);
    put(w, &v, sizeof v);
}

void seer_tp_w_dbl(tp_wbuf *w, double v) {
    put_tag(w, TP_F_DBL);
    put(w, &v, sizeof v);
}

void seer_tp_w_bytes(tp_wbuf *w, const void *p, size_t n) {
    const uint64_t l = n;
    static const char zero[8];
    put_tag(w, TP_F_BYTES);
    put(w, &l, sizeof l);
    put(w, p, n);
    put(w, zero, (8 - n % 8) % 8);
}

void seer_tp_w_ptr(tp_wbuf *w, int64_t handle, uint64_t off) {
    put_tag(w, TP_F_PTR);
    put(w, &handle, sizeof handle);
    put(w, &off, sizeof off);
}

void seer_tp_w_reset(tp_wbuf *w) {
    w->len = 0;
    w->oom = false;
}

void seer_tp_w_free(tp_wbuf *w) {
    free(w->buf);
    memset(w, 0, sizeof *w);
}

static bool zeros(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

seer_status seer_tp_msg_parse(const void *payload, size_t len, tp_msg *out) {
    const char *p = payload, *end = p + len;
    out->n = 0;
    while (p < end) {
        if (out->n == TP_WIRE_MAX_FIELDS)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: more than %d fields", TP_WIRE_MAX_FIELDS);
        tp_field *f = &out->f[out->n];
        memset(f, 0, sizeof *f);
        if ((size_t)(end - p) < 8 || !zeros(p + 1, 7))
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d's header is cut short or not padded",
                            out->n);
        f->type = *p;
        p += 8;
        const size_t left = (size_t)(end - p);
        switch (f->type) {
        case TP_F_INT:
        case TP_F_DBL:
            if (left < 8)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d is cut short", out->n);
            if (f->type == TP_F_INT)
                memcpy(&f->i, p, 8);
            else
                memcpy(&f->f, p, 8);
            p += 8;
            break;
        case TP_F_PTR:
            if (left < 16)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d is cut short", out->n);
            memcpy(&f->i, p, 8);
            memcpy(&f->off, p + 8, 8);
            p += 16;
            break;
        case TP_F_BYTES: {
            uint64_t l;
            if (left < 8)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d is cut short", out->n);
            memcpy(&l, p, 8);
            p += 8;
            const uint64_t padded = l + (8 - l % 8) % 8;
            if (l > (uint64_t)(end - p) || padded > (uint64_t)(end - p) || !zeros(p + l, (size_t)(padded - l)))
                return seer_err(SEER_ERR_FORMAT,
                                "tensor-parallel message: field %d's %llu bytes run past the end or are not padded",
                                out->n, (unsigned long long)l);
            f->data = p;
            f->len = (size_t)l;
            p += padded;
            break;
        }
        default:
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d has unknown type %d", out->n,
                            (int)(unsigned char)f->type);
        }
        out->n++;
    }
    return SEER_OK;
}

seer_status seer_tp_msg_check(const tp_msg *m, const char *sig, const char *what) {
    const size_t n = strlen(sig);
    bool ok = (size_t)m->n == n;
    for (size_t k = 0; ok && k < n; k++)
        ok = m->f[k].type == sig[k];
    if (!ok)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: %s expects fields '%s' (%d fields came)", what, sig,
                        m->n);
    return SEER_OK;
}

seer_status seer_tp_msg_array(const tp_msg *m, int k, size_t n, size_t elem, const void **out, const char *what) {
    const tp_field *f = &m->f[k];
    if (n > SIZE_MAX / (elem ? elem : 1) || f->len != n * elem)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: %s's field %d holds %zu bytes, not %zu of %zu", what,
                        k, f->len, n, elem);
    *out = f->data;
    return SEER_OK;
}

/* Waits until fd can take (POLLOUT) or give (POLLIN) bytes, at most timeout_ms (<= 0: forever). */
static seer_status wait_fd(int fd, short ev, int timeout_ms) {
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = ev};
        const int r = poll(&pf, 1, timeout_ms > 0 ? timeout_ms : -1);
        if (r > 0)
            return SEER_OK;
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return seer_err(SEER_ERR_IO, "tensor-parallel link: no progress %s in %d ms",
                            ev == POLLOUT ? "sending" : "receiving", timeout_ms);
        return seer_err(SEER_ERR_IO, "tensor-parallel link: poll: %s", strerror(errno));
    }
}

/* Every call is non-blocking (MSG_DONTWAIT): a socket that takes part of a message, then
 * nothing, is waited on by poll with the time-out, never inside send or recv. */
static seer_status send_iov(int fd, struct iovec *iov, int n, int timeout_ms) {
    while (n > 0 && iov->iov_len == 0) {
        iov++;
        n--;
    }
    while (n > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        const ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            SEER_TRY(wait_fd(fd, POLLOUT, timeout_ms));
            continue;
        }
        if (k < 0)
            return seer_err(SEER_ERR_IO, "tensor-parallel link: %s", strerror(errno));
        size_t left = (size_t)k;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return SEER_OK;
}

/* Up to n bytes into buf, at least one (*got). */
static seer_status recv_some(int fd, void *buf, size_t n, int timeout_ms, size_t *got) {
    for (;;) {
        const ssize_t k = recv(fd, buf, n, MSG_DONTWAIT);
        if (k > 0) {
            *got = (size_t)k;
            return SEER_OK;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            SEER_TRY(wait_fd(fd, POLLIN, timeout_ms));
            continue;
        }
        return seer_err(SEER_ERR_IO, "tensor-parallel link: %s",
                        k == 0 ? "the peer closed the connection" : strerror(errno));
    }
}

static seer_status recv_all(int fd, void *buf, size_t n, int timeout_ms) {
    char *p = buf;
    while (n > 0) {
        size_t k;
        SEER_TRY(recv_some(fd, p, n, timeout_ms, &k));
        p += k;
        n -= k;
    }
    return SEER_OK;
}

seer_status seer_tp_wire_send(int fd, uint32_t kind, uint32_t inst, uint32_t flags, const tp_wbuf *w,
                              int timeout_ms) {
    if (w->oom)
        return seer_err(SEER_ERR_OOM, "out of memory for a tensor-parallel message");
    tp_wire_hdr h = {TP_WIRE_MAGIC, kind, inst, flags, w->len};
    struct iovec iov[2] = {{&h, sizeof h}, {w->buf, w->len}};
    return send_iov(fd, iov, w->len ? 2 : 1, timeout_ms);
}

static seer_status check_hdr(const tp_wire_hdr *h) {
    if (h->magic != TP_WIRE_MAGIC || (h->flags & ~TP_WIRE_NO_REPLY) || h->bytes > TP_WIRE_MAX_BYTES)
        return seer_err(SEER_ERR_IO, "tensor-parallel link: a bad header (magic %#x, flags %#x, %llu bytes)", h->magic,
                        h->flags, (unsigned long long)h->bytes);
    return SEER_OK;
}

static seer_status payload_alloc(const tp_wire_hdr *h, void **p) {
    *p = malloc(h->bytes ? (size_t)h->bytes : 1);
    if (!*p)
        return seer_err(SEER_ERR_OOM, "out of memory for a tensor-parallel message of %llu bytes",
                        (unsigned long long)h->bytes);
    return SEER_OK;
}

seer_status seer_tp_wire_recv(int fd, tp_wire_hdr *h, void **payload, int timeout_ms) {
    *payload = NULL;
    SEER_TRY(recv_all(fd, h, sizeof *h, timeout_ms));
    SEER_TRY(check_hdr(h));
    void *p;
    SEER_TRY(payload_alloc(h, &p));
    seer_status s = recv_all(fd, p, (size_t)h->bytes, timeout_ms);
    if (s != SEER_OK) {
        free(p);
        return s;
    }
    *payload = p;
    return SEER_OK;
}

/* At least need (<= TP_READER_BYTES) bytes in rd from pos on, taking whatever else came. */
static seer_status fill(tp_reader *rd, size_t need, int timeout_ms) {
    if (!rd->buf && !(rd->buf = malloc(TP_READER_BYTES)))
        return seer_err(SEER_ERR_OOM, "out of memory for a tensor-parallel link's buffer");
    if (rd->pos == rd->len)
        rd->pos = rd->len = 0;
    if (rd->len - rd->pos >= need)
        return SEER_OK;
    if (rd->pos + need > TP_READER_BYTES) {
        memmove(rd->buf, rd->buf + rd->pos, rd->len - rd->pos);
        rd->len -= rd->pos;
        rd->pos = 0;
    }
    while (rd->len - rd->pos < need) {
        size_t k;
        SEER_TRY(recv_some(rd->fd, rd->buf + rd->len, TP_READER_BYTES - rd->len, timeout_ms, &k));
        rd->len += k;
    }
    return SEER_OK;
}

seer_status seer_tp_wire_read(tp_reader *rd, tp_wire_hdr *h, void **payload, int timeout_ms) {
    *payload = NULL;
    SEER_TRY(fill(rd, sizeof *h, timeout_ms));
    memcpy(h, rd->buf + rd->pos, sizeof *h);
    rd->pos += sizeof *h;
    SEER_TRY(check_hdr(h));
    void *p;
    SEER_TRY(payload_alloc(h, &p));
    const size_t n = (size_t)h->bytes, had = rd->len - rd->pos < n ? rd->len - rd->pos : n;
    memcpy(p, rd->buf + rd->pos, had);
    rd->pos += had;
    seer_status s = SEER_OK;
    if (n - had > TP_READER_BYTES / 2) { /* a large payload straight into its block */
        s = recv_all(rd->fd, (char *)p + had, n - had, timeout_ms);
    } else if (n > had) {
        s = fill(rd, n - had, timeout_ms);
        if (s == SEER_OK) {
            memcpy((char *)p + had, rd->buf + rd->pos, n - had);
            rd->pos += n - had;
        }
    }
    if (s != SEER_OK) {
        free(p);
        return s;
    }
    *payload = p;
    return SEER_OK;
}

void seer_tp_reader_free(tp_reader *rd) {
    free(rd->buf);
    *rd = seer_tp_reader(rd->fd);
}
