/*
 * tp_wire.c: the op stream's messages (tp_wire.h): writing fields, parsing a payload back
 * into fields, and moving a message over a socket with a time limit.
 */
#include "parallel/tp_wire.h"
#include "util/error.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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

static seer_status io_all(int fd, void *buf, size_t n, bool wr, int timeout_ms) {
    char *p = buf;
    while (n > 0) {
        struct pollfd pf = {.fd = fd, .events = wr ? POLLOUT : POLLIN};
        const int r = poll(&pf, 1, timeout_ms > 0 ? timeout_ms : -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return seer_err(SEER_ERR_IO, "tensor-parallel link: no progress %s in %d ms", wr ? "sending" : "receiving",
                            timeout_ms);
        if (r < 0)
            return seer_err(SEER_ERR_IO, "tensor-parallel link: poll: %s", strerror(errno));
        const ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return seer_err(SEER_ERR_IO, "tensor-parallel link: %s",
                            k == 0 ? "the peer closed the connection" : strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return SEER_OK;
}

seer_status seer_tp_wire_send(int fd, uint32_t kind, uint32_t inst, const tp_wbuf *w, int timeout_ms) {
    if (w->oom)
        return seer_err(SEER_ERR_OOM, "out of memory for a tensor-parallel message");
    const tp_wire_hdr h = {TP_WIRE_MAGIC, kind, inst, 0, w->len};
    SEER_TRY(io_all(fd, (void *)&h, sizeof h, true, timeout_ms));
    return w->len ? io_all(fd, w->buf, w->len, true, timeout_ms) : SEER_OK;
}

seer_status seer_tp_wire_recv(int fd, tp_wire_hdr *h, void **payload, int timeout_ms) {
    *payload = NULL;
    SEER_TRY(io_all(fd, h, sizeof *h, false, timeout_ms));
    if (h->magic != TP_WIRE_MAGIC || h->bytes > TP_WIRE_MAX_BYTES)
        return seer_err(SEER_ERR_IO, "tensor-parallel link: a bad header (magic %#x, %llu bytes)", h->magic,
                        (unsigned long long)h->bytes);
    void *p = malloc(h->bytes ? (size_t)h->bytes : 1);
    if (!p)
        return seer_err(SEER_ERR_OOM, "out of memory for a tensor-parallel message of %llu bytes",
                        (unsigned long long)h->bytes);
    seer_status s = io_all(fd, p, (size_t)h->bytes, false, timeout_ms);
    if (s != SEER_OK) {
        free(p);
        return s;
    }
    *payload = p;
    return SEER_OK;
}
