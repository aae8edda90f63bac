/*
 * tp_serve.h: what the two halves of a rank's side of the op stream share (tp_serve.c: the
 * handle table, memory, weights, instances, collectives and the order of the stream;
 * tp_serve_ops.c: the compute and KV ops): the table's entries and the checks of a message's
 * fields against it.
 * Not for: anything outside src/parallel/tp_serve*.c.
 */
#ifndef SEER_PARALLEL_TP_SERVE_H
#define SEER_PARALLEL_TP_SERVE_H

#include "parallel/comm.h"
#include "parallel/tp_remote.h"
#include "util/error.h"

#include <stdint.h>
#include <string.h>

typedef enum { H_NONE = 0, H_MEM, H_WEIGHT, H_KV, H_INST } h_kind;

/* The first failure of an instance's op that rank 0 did not wait for: every later op of the
 * instance is refused (frees excepted) until a waited op reports it. */
typedef struct {
    uint32_t inst;
    seer_status s; /* SEER_OK: none */
    char *msg;     /* what failed and why (NULL: out of memory for it) */
} sv_fail;

typedef struct {
    h_kind kind;
    void *p;          /* MEM, KV: the backend's pointer; INST: a seer_backend */
    size_t bytes;     /* MEM */
    seer_weight w;    /* WEIGHT */
    void *host;       /* WEIGHT: the tensor's bytes, kept while the weight may point into them */
    seer_kv_geom g;   /* KV: the geometry it was made with */
    seer_backend *be; /* the instance that made it (frees it) */
} h_entry;

/* A rank's collectives: one communicator per instance of rank 0's (its model's, each
 * context's), made by comm_init_rank. */
typedef struct {
    uint32_t inst;
    int rank;
    seer_comm *c;
} sv_comm;

#define SV_COMMS 64
#define SV_ATT 8

/* One instance's attention batches (att_cache): the bytes of the last two, decoded, kept
 * alive. A backend that plans attention once per batch (CUDA) compares the batch's arrays by
 * address and most of them by content, but not the view lists; so an unchanged batch must
 * come at the same addresses (its plan is reused, layer after layer) and a changed one at
 * others (its plan is rebuilt), which a fresh payload per message does not promise. */
typedef struct {
    char *bytes; /* the batch's fields, copied out of the message */
    size_t len;
    tp_msg *m;
    seer_attn_batch ab;
    seer_attn_view *views;
    const seer_attn_view **sview;
} att_slot;

/* batch_begin's index arrays, by their role in the ops after it */
enum { SV_IDX_TOKENS, SV_IDX_POS, SV_IDX_PAGE, SV_IDX_ROW, SV_IDX_OUT, SV_IDX_N };

/* ... and the index arrays of the instance's last batch_begin (tp_serve_fwd.c), copied at
 * fixed addresses with room for a padded call's rows: a backend with its own copies of them
 * (CUDA) knows an op's array as batch_begin's by its address and first entries, which a
 * fresh payload per message would not keep. */
typedef struct {
    seer_backend *be;
    int cur;
    att_slot slot[2];
    int32_t *idx[SV_IDX_N];
    int idx_n[SV_IDX_N], idx_cap[SV_IDX_N];
} att_cache;

struct tp_serve {
    seer_backend *root;
    sv_fail fail0; /* the root instance's */
    sv_fail *fails; /* [n_fails] the other instances' (a few: one per context) */
    int n_fails;
    sv_comm comm[SV_COMMS];
    att_cache att[SV_ATT]; /* op_attention's, one per instance */
    unsigned att_next;
    h_entry *tab; /* [cap], indexed by handle */
    int64_t cap;
};

/* The entry of field k (a pointer) of kind want; NULL pointers allowed where null_ok. */
static inline seer_status entry(tp_serve *sv, const tp_msg *m, int k, h_kind want, bool null_ok, h_entry **out) {
    const tp_field *f = &m->f[k];
    *out = NULL;
    if (f->i == 0 && f->off == 0 && null_ok)
        return SEER_OK;
    if (f->i < 1 || f->i >= sv->cap || sv->tab[f->i].kind != want)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d names no %s (handle %lld)", k,
                        want == H_MEM ? "memory" : want == H_WEIGHT ? "weight" : want == H_KV ? "KV storage" : "instance",
                        (long long)f->i);
    if (want != H_MEM && f->off != 0)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d points inside a weight or storage", k);
    *out = &sv->tab[f->i];
    return SEER_OK;
}

/* Field k as a float pointer into the rank's memory (NULL where the handle is 0). */
static inline seer_status mem(tp_serve *sv, const tp_msg *m, int k, float **out) {
    h_entry *e;
    *out = NULL;
    SEER_TRY(entry(sv, m, k, H_MEM, true, &e));
    if (e && m->f[k].off > e->bytes)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d's offset %llu is past %zu bytes", k,
                        (unsigned long long)m->f[k].off, e->bytes);
    *out = e ? (float *)((char *)e->p + m->f[k].off) : NULL;
    return SEER_OK;
}

static inline seer_status weight(tp_serve *sv, const tp_msg *m, int k, seer_weight **out) {
    h_entry *e;
    *out = NULL;
    SEER_TRY(entry(sv, m, k, H_WEIGHT, false, &e));
    *out = &e->w;
    return SEER_OK;
}

static inline seer_kv_geom geom(const tp_msg *m, int k) {
    return (seer_kv_geom){(int)m->f[k].i,     (int)m->f[k + 1].i, (int)m->f[k + 2].i, (int)m->f[k + 3].i,
                          (int)m->f[k + 4].i, (int)m->f[k + 5].i, (int)m->f[k + 6].i};
}

/* KV storage from field k, and the geometry in fields k + 1 to k + 7 (every KV op's), which
 * must be the one it was made with: the backend computes the storage's extents from it. */
static inline seer_status kv(tp_serve *sv, const tp_msg *m, int k, void **out) {
    h_entry *e;
    *out = NULL;
    SEER_TRY(entry(sv, m, k, H_KV, false, &e));
    const seer_kv_geom g = geom(m, k + 1);
    for (int j = 0; j < 7; j++)
        if (m->f[k + 1 + j].i < INT32_MIN || m->f[k + 1 + j].i > INT32_MAX || memcmp(&g, &e->g, sizeof g))
            return seer_err(SEER_ERR_FORMAT,
                            "tensor-parallel message: field %d's geometry is not its KV storage's", k + 1);
    *out = e->p;
    return SEER_OK;
}

/* Integer field k within [lo, hi]. */
static inline seer_status num(const tp_msg *m, int k, int64_t lo, int64_t hi, int *out) {
    *out = 0;
    if (m->f[k].i < lo || m->f[k].i > hi)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d (%lld) outside [%lld, %lld]", k,
                        (long long)m->f[k].i, (long long)lo, (long long)hi);
    *out = (int)m->f[k].i;
    return SEER_OK;
}

#define GEOM "iiiiiii"
#define BIG (1 << 30)

#define TRY SEER_TRY

static inline seer_status ids(const tp_msg *m, int k, int64_t n, const int32_t **out, const char *what) {
    *out = NULL;
    return seer_tp_msg_array(m, k, n < 0 ? SIZE_MAX : (size_t)n, 4, (const void **)out, what);
}

/* The compute and KV ops (tp_serve_ops.c). */
seer_status seer_tp_serve_compute(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w);
/* What an instance's att_cache holds, freed (the cache left empty, its instance forgotten). */
void seer_tp_att_clear(att_cache *c);
/* The attention batch of m's fields k0 .. k0 + 24 (tp_remote_ops.c's w_batch), decoded into
 * be's att_cache: the one at the addresses of the last time these bytes came, where they did. */
seer_status seer_tp_att_batch(tp_serve *sv, seer_backend *be, const tp_msg *m, int k0, const seer_attn_batch **ab);
/* An op's index array a [n] of role (SV_IDX_*): batch_begin's copy where a begins with it (its
 * entries past batch_begin's made the message's), else a itself. */
const int32_t *seer_tp_kept_idx(tp_serve *sv, seer_backend *be, int role, const int32_t *a, int n);
/* Keeps a[k] [n[k]] (SV_IDX_N roles, NULL: none) as be's batch_begin arrays. */
seer_status seer_tp_kept_set(tp_serve *sv, seer_backend *be, const int32_t *const *a, const int *n);
/* batch_begin and the forward pair (tp_serve_fwd.c). fail: a failure of an earlier posted op
 * that forward_end is to end a recording with (SEER_OK: none). */
seer_status seer_tp_serve_forward(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w,
                                  seer_status fail);

#endif
