/*
 * tp_wire.h: the messages of the op stream between rank 0 and a rank in another process
 * (tp_remote.c sends, tp_serve.c answers). A message is a header (magic, kind, the instance it
 * is for, payload bytes) and a payload of typed fields: integers, doubles, byte strings and
 * pointers into a rank's memory as (handle, offset). A field is an 8-byte header (its type
 * letter, then zeros) and its value; a string's bytes are padded with zeros to a multiple of
 * 8, so that every array in a payload (which starts aligned) can be read in place. seer_tp_msg_parse checks a payload's framing
 * alone and is what the fuzzer drives; an op's handler then checks the fields' count and types
 * against the op's signature (seer_tp_msg_check) before it reads them.
 * Not for: what the ops mean (backend.h) or which process sends them (tp_remote.c).
 */
#ifndef SEER_PARALLEL_TP_WIRE_H
#define SEER_PARALLEL_TP_WIRE_H

#include "seer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TP_WIRE_MAGIC 0x32505453u /* "STP2": since ops may go without an answer */
#define TP_WIRE_MAX_FIELDS 64
#define TP_WIRE_MAX_BYTES (1ull << 34) /* one message's payload, 16 GiB */

/* Field types, one letter each in a signature. */
enum { TP_F_INT = 'i', TP_F_DBL = 'f', TP_F_BYTES = 'b', TP_F_PTR = 'p' };

/* A message's flags: rank 0 waits for no answer (tp_remote.h's op stream) */
#define TP_WIRE_NO_REPLY 1u

typedef struct {
    uint32_t magic, kind, inst, flags;
    uint64_t bytes; /* payload */
} tp_wire_hdr;

typedef struct {
    char type;
    int64_t i;          /* INT; PTR: the handle (0: NULL) */
    uint64_t off;       /* PTR: the offset */
    double f;           /* DBL */
    const void *data;   /* BYTES: into the payload */
    size_t len;         /* BYTES */
} tp_field;

typedef struct {
    int n;
    tp_field f[TP_WIRE_MAX_FIELDS];
} tp_msg;

/* A message being written: its payload grows as fields are added; an allocation failure is
 * kept and reported by seer_tp_wire_send. */
typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} tp_wbuf;

void seer_tp_w_int(tp_wbuf *w, int64_t v);
void seer_tp_w_dbl(tp_wbuf *w, double v);
void seer_tp_w_bytes(tp_wbuf *w, const void *p, size_t n); /* p NULL with n 0: an empty string */
void seer_tp_w_ptr(tp_wbuf *w, int64_t handle, uint64_t off);
void seer_tp_w_reset(tp_wbuf *w);
void seer_tp_w_free(tp_wbuf *w);

/* Splits payload [len] into fields (pointing into it). SEER_ERR_FORMAT with the reason for a
 * field that runs past the end, an unknown type or too many fields. */
seer_status seer_tp_msg_parse(const void *payload, size_t len, tp_msg *out);
/* Whether m's fields are sig's (one letter per field, "pii" ...); SEER_ERR_FORMAT naming the
 * op (what) otherwise. */
seer_status seer_tp_msg_check(const tp_msg *m, const char *sig, const char *what);
/* BYTES field k as an array of n elements of size elem (n may be 0 with an empty string):
 * SEER_ERR_FORMAT when its length is not n * elem. */
seer_status seer_tp_msg_array(const tp_msg *m, int k, size_t n, size_t elem, const void **out, const char *what);

/* Sends a header (flags: TP_WIRE_NO_REPLY or 0) and w's payload on fd, in one call where the
 * socket takes it; reads one header and its payload (*payload malloc'd, the caller frees).
 * Each waits at most timeout_ms for the peer to take or give more bytes (<= 0: forever), and
 * never blocks past that in the call itself; SEER_ERR_IO names a closed connection, a
 * time-out or a bad header (another magic, unknown flags, a payload past the limit). */
seer_status seer_tp_wire_send(int fd, uint32_t kind, uint32_t inst, uint32_t flags, const tp_wbuf *w,
                              int timeout_ms);
seer_status seer_tp_wire_recv(int fd, tp_wire_hdr *h, void **payload, int timeout_ms);

/* Reading a stream of messages from one socket with fewer calls: whatever the socket holds
 * is taken at once (up to TP_READER_BYTES), and later messages come out of that. Every read of
 * fd after the first must go through the reader. */
#define TP_READER_BYTES (64 * 1024)
typedef struct {
    int fd;
    char *buf; /* [TP_READER_BYTES] once used */
    size_t pos, len;
} tp_reader;

static inline tp_reader seer_tp_reader(int fd) { return (tp_reader){.fd = fd}; }
/* As seer_tp_wire_recv, through rd. */
seer_status seer_tp_wire_read(tp_reader *rd, tp_wire_hdr *h, void **payload, int timeout_ms);
/* Whether rd holds bytes not yet read (the next message has begun). */
static inline bool seer_tp_reader_has(const tp_reader *rd) { return rd->len > rd->pos; }
void seer_tp_reader_free(tp_reader *rd);

#endif
