/*
 * tp_serve.c: a rank's process running rank 0's op stream (tp_remote.h) on its own backend.
 * Every message is parsed (seer_tp_msg_parse), checked against its op's signature, its handles
 * looked up in this process's table, then run; the answer is the op's status (with the
 * message on failure) and what it returns. A bad message is answered with its reason and
 * changes nothing. A KV op's geometry must be the one its storage was made with. What it
 * does not check: that an op's extents (rows, page ids) lie within
 * the memory the handles name; rank 0 is trusted there, as a backend trusts its caller.
 * Not for: sockets (tp_serve_loop.c) or the sending side (tp_remote.c).
 */
#include "parallel/comm.h"
#include "parallel/tp_remote.h"
#include "util/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { H_NONE = 0, H_MEM, H_WEIGHT, H_KV, H_INST } h_kind;

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

typedef struct {
    seer_backend *be;
    int cur;
    att_slot slot[2];
} att_cache;

struct tp_serve {
    seer_backend *root;
    sv_comm comm[SV_COMMS];
    att_cache att[SV_ATT]; /* op_attention's, one per instance */
    unsigned att_next;
    h_entry *tab; /* [cap], indexed by handle */
    int64_t cap;
};

seer_status seer_tp_serve_init(seer_backend *be, tp_serve **out) {
    *out = calloc(1, sizeof **out);
    if (!*out)
        return seer_err(SEER_ERR_OOM, "out of memory");
    (*out)->root = be;
    return SEER_OK;
}

static void entry_free(h_entry *e) {
    switch (e->kind) {
    case H_MEM:
        e->be->ops->dealloc(e->be, e->p);
        break;
    case H_KV:
        e->be->ops->kv_free(e->be, e->p);
        break;
    case H_WEIGHT:
        if (e->w.data)
            e->be->ops->weight_free(e->be, &e->w);
        free(e->host);
        break;
    case H_INST:
        ((seer_backend *)e->p)->ops->free(e->p);
        break;
    default:
        break;
    }
    memset(e, 0, sizeof *e);
}

static void att_slot_free(att_slot *a);

void seer_tp_serve_free(tp_serve *sv) {
    if (!sv)
        return;
    for (int i = 0; i < SV_ATT; i++)
        for (int j = 0; j < 2; j++)
            att_slot_free(&sv->att[i].slot[j]);
    for (int i = 0; i < SV_COMMS; i++)
        if (sv->comm[i].c)
            sv->comm[i].c->free(sv->comm[i].c);
    /* weights and memory first, then the instances that made them */
    for (int pass = 0; pass < 2; pass++)
        for (int64_t h = 0; h < sv->cap; h++)
            if (sv->tab[h].kind != H_NONE && (sv->tab[h].kind == H_INST) == (pass == 1))
                entry_free(&sv->tab[h]);
    free(sv->tab);
    free(sv);
}

/* A new entry for handle h (which must be free). */
static seer_status fresh(tp_serve *sv, int64_t h, h_entry **out) {
    if (h < 1 || h > TP_FAKE_MAX_HANDLE)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: handle %lld out of range", (long long)h);
    if (h >= sv->cap) {
        int64_t cap = sv->cap ? sv->cap : 256;
        while (cap <= h)
            cap *= 2;
        h_entry *nt = realloc(sv->tab, (size_t)cap * sizeof *nt);
        if (!nt)
            return seer_err(SEER_ERR_OOM, "out of memory");
        memset(nt + sv->cap, 0, (size_t)(cap - sv->cap) * sizeof *nt);
        sv->tab = nt;
        sv->cap = cap;
    }
    if (sv->tab[h].kind != H_NONE)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: handle %lld is in use", (long long)h);
    *out = &sv->tab[h];
    return SEER_OK;
}

/* The entry of field k (a pointer) of kind want; NULL pointers allowed where null_ok. */
static seer_status entry(tp_serve *sv, const tp_msg *m, int k, h_kind want, bool null_ok, h_entry **out) {
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
static seer_status mem(tp_serve *sv, const tp_msg *m, int k, float **out) {
    h_entry *e;
    SEER_TRY(entry(sv, m, k, H_MEM, true, &e));
    if (e && m->f[k].off > e->bytes)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: field %d's offset %llu is past %zu bytes", k,
                        (unsigned long long)m->f[k].off, e->bytes);
    *out = e ? (float *)((char *)e->p + m->f[k].off) : NULL;
    return SEER_OK;
}

static seer_status weight(tp_serve *sv, const tp_msg *m, int k, seer_weight **out) {
    h_entry *e;
    SEER_TRY(entry(sv, m, k, H_WEIGHT, false, &e));
    *out = &e->w;
    return SEER_OK;
}

static seer_kv_geom geom(const tp_msg *m, int k) {
    return (seer_kv_geom){(int)m->f[k].i,     (int)m->f[k + 1].i, (int)m->f[k + 2].i, (int)m->f[k + 3].i,
                          (int)m->f[k + 4].i, (int)m->f[k + 5].i, (int)m->f[k + 6].i};
}

/* KV storage from field k, and the geometry in fields k + 1 to k + 7 (every KV op's), which
 * must be the one it was made with: the backend computes the storage's extents from it. */
static seer_status kv(tp_serve *sv, const tp_msg *m, int k, void **out) {
    h_entry *e;
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
static seer_status num(const tp_msg *m, int k, int64_t lo, int64_t hi, int *out) {
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

static void put_weight(tp_wbuf *w, const seer_weight *x, bool has) {
    seer_tp_w_int(w, x->rows);
    seer_tp_w_int(w, x->cols);
    seer_tp_w_int(w, x->dtype);
    seer_tp_w_int(w, x->owned);
    if (has)
        seer_tp_w_int(w, x->data != NULL);
}

static seer_status op_memory(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w) {
    h_entry *e;
    float *p;
    int n;
    switch (op) {
    case TP_OP_CLONE:
        TRY(seer_tp_msg_check(m, "i", "clone"));
        if (!be->ops->exec_clone)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend has no instances per context");
        TRY(fresh(sv, m->f[0].i, &e));
        TRY(be->ops->exec_clone(be, (seer_backend **)&e->p));
        e->kind = H_INST;
        return SEER_OK;
    case TP_OP_FREE:
        return SEER_OK; /* seer_tp_serve_msg frees the instance */
    case TP_OP_ALLOC:
        TRY(seer_tp_msg_check(m, "ii", "alloc"));
        if (m->f[1].i < 0 || (uint64_t)m->f[1].i >= 1ull << TP_FAKE_OFF_BITS)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: an allocation of %lld bytes", (long long)m->f[1].i);
        TRY(fresh(sv, m->f[0].i, &e));
        TRY(be->ops->alloc(be, (size_t)m->f[1].i, &e->p));
        *e = (h_entry){.kind = H_MEM, .p = e->p, .bytes = (size_t)m->f[1].i, .be = be};
        return SEER_OK;
    case TP_OP_DEALLOC:
        TRY(seer_tp_msg_check(m, "p", "dealloc"));
        TRY(entry(sv, m, 0, H_MEM, false, &e));
        entry_free(e);
        return SEER_OK;
    case TP_OP_UPLOAD:
        TRY(seer_tp_msg_check(m, "pb", "upload"));
        TRY(entry(sv, m, 0, H_MEM, false, &e));
        if (m->f[0].off > e->bytes || m->f[1].len > e->bytes - m->f[0].off)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: an upload past its allocation");
        return be->ops->upload(be, (char *)e->p + m->f[0].off, m->f[1].data, m->f[1].len);
    case TP_OP_DOWNLOAD: {
        TRY(seer_tp_msg_check(m, "pi", "download"));
        TRY(entry(sv, m, 0, H_MEM, false, &e));
        if (m->f[0].off > e->bytes || m->f[1].i < 0 || (uint64_t)m->f[1].i > e->bytes - m->f[0].off)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a download past its allocation");
        const size_t bytes = (size_t)m->f[1].i;
        void *buf = malloc(bytes ? bytes : 1);
        if (!buf)
            return seer_err(SEER_ERR_OOM, "out of memory");
        seer_status s = be->ops->download(be, buf, (char *)e->p + m->f[0].off, bytes);
        if (s == SEER_OK)
            seer_tp_w_bytes(w, buf, bytes);
        free(buf);
        return s;
    }
    case TP_OP_SYNC:
        TRY(seer_tp_msg_check(m, "", "sync"));
        return be->ops->sync ? be->ops->sync(be) : SEER_OK;
    case TP_OP_KV_ALLOC: {
        TRY(seer_tp_msg_check(m, "i" GEOM, "kv_alloc"));
        const seer_kv_geom g = geom(m, 1);
        TRY(fresh(sv, m->f[0].i, &e));
        TRY(be->ops->kv_alloc(be, &g, &e->p));
        e->kind = H_KV;
        e->be = be;
        e->g = g;
        return SEER_OK;
    }
    case TP_OP_KV_RESERVE: {
        void *k;
        TRY(seer_tp_msg_check(m, "p" GEOM "i", "kv_reserve"));
        TRY(kv(sv, m, 0, &k));
        const seer_kv_geom g = geom(m, 1);
        int nc = 0;
        TRY(num(m, 8, 0, g.n_pages, &n));
        TRY(be->ops->kv_reserve(be, k, &g, n, &nc));
        seer_tp_w_int(w, nc);
        return SEER_OK;
    }
    case TP_OP_KV_MEM: {
        TRY(seer_tp_msg_check(m, "", "kv_mem_available"));
        uint64_t b = 0;
        if (be->ops->kv_mem_available)
            TRY(be->ops->kv_mem_available(be, &b));
        else
            b = UINT64_MAX / 2;
        seer_tp_w_int(w, (int64_t)(b > INT64_MAX ? INT64_MAX : b));
        return SEER_OK;
    }
    case TP_OP_KV_FREE:
        TRY(seer_tp_msg_check(m, "p", "kv_free"));
        TRY(entry(sv, m, 0, H_KV, false, &e));
        entry_free(e);
        return SEER_OK;
    default:
        (void)p;
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: unknown op %u", op);
    }
}

static seer_status op_weights(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w) {
    h_entry *e;
    if (op == TP_OP_WLOAD) {
        TRY(seer_tp_msg_check(m, "iibiiiiiib", "weight_load"));
        TRY(fresh(sv, m->f[0].i, &e));
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(m->f[2].len < 127 ? m->f[2].len : 127), (const char *)m->f[2].data);
        gguf_tensor t = {.name = name, .n_dims = (int)m->f[3].i, .type = (ggml_type)m->f[8].i, .nbytes = m->f[9].len};
        for (int k = 0; k < 4; k++)
            t.ne[k] = (uint64_t)m->f[4 + k].i;
        const int be_ = seer_ggml_type_block_elems(t.type), bb = seer_ggml_type_block_bytes(t.type);
        if (t.n_dims < 1 || t.n_dims > 2 || be_ <= 0 || m->f[4].i < 1 || m->f[5].i < 1 || m->f[6].i != 1 ||
            m->f[7].i != 1 || m->f[4].i > BIG ||
            m->f[5].i > BIG || m->f[4].i % be_ || (uint64_t)m->f[4].i / be_ * bb * (uint64_t)m->f[5].i != t.nbytes)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: tensor %s's shape and %zu bytes disagree", name,
                            t.nbytes);
        void *host = malloc(t.nbytes ? t.nbytes : 1);
        if (!host)
            return seer_err(SEER_ERR_OOM, "out of memory for tensor %s", name);
        memcpy(host, m->f[9].data, t.nbytes);
        t.data = host;
        seer_status s = be->ops->weight_load(be, &t, (seer_weights_kind)m->f[1].i, &e->w);
        if (s != SEER_OK) {
            free(host);
            memset(&e->w, 0, sizeof e->w);
            return s;
        }
        const char *d = e->w.data;
        if (!(d >= (char *)host && d < (char *)host + t.nbytes)) { /* the backend keeps a copy of its own */
            free(host);
            host = NULL;
        }
        e->kind = H_WEIGHT;
        e->host = host;
        e->be = be;
        put_weight(w, &e->w, false);
        return SEER_OK;
    }
    if (op == TP_OP_WFREE) {
        TRY(seer_tp_msg_check(m, "p", "weight_free"));
        TRY(entry(sv, m, 0, H_WEIGHT, false, &e));
        entry_free(e);
        return SEER_OK;
    }
    /* WCONCAT: handle, interleave, the parts */
    if (m->n < 3 || m->n > 2 + SEER_WEIGHT_MAX_SEG)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: weight_concat of %d fields", m->n);
    char sig[8] = "ii";
    for (int j = 2; j < m->n; j++)
        strcat(sig, "p");
    TRY(seer_tp_msg_check(m, sig, "weight_concat"));
    if (!be->ops->weight_concat)
        return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend cannot join weights");
    const int n = m->n - 2;
    seer_weight parts[SEER_WEIGHT_MAX_SEG];
    seer_weight *pp[SEER_WEIGHT_MAX_SEG];
    /* the new entry first: growing the table moves every entry, so the parts' pointers are
     * taken after it */
    TRY(fresh(sv, m->f[0].i, &e));
    for (int j = 0; j < n; j++) {
        TRY(weight(sv, m, 2 + j, &pp[j]));
        for (int k = 0; k < j; k++)
            if (pp[k] == pp[j])
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a weight joined to itself");
        parts[j] = *pp[j];
    }
    TRY(be->ops->weight_concat(be, parts, n, m->f[1].i != 0, &e->w));
    e->kind = H_WEIGHT;
    e->be = be;
    put_weight(w, &e->w, false);
    seer_tp_w_int(w, e->w.n_seg);
    seer_tp_w_int(w, e->w.interleaved);
    for (int j = 0; j < n; j++) {
        *pp[j] = parts[j];
        put_weight(w, &parts[j], true);
    }
    return SEER_OK;
}

static seer_status tp_serve_compute(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w);

static sv_comm *comm_of(tp_serve *sv, uint32_t inst) {
    for (int i = 0; i < SV_COMMS; i++)
        if (sv->comm[i].c && sv->comm[i].inst == inst)
            return &sv->comm[i];
    return NULL;
}

/* The collectives of a group with one rank per process (tp_remote_comm.c's proc_comm). */
static seer_status op_comm(tp_serve *sv, seer_backend *be, uint32_t kind, uint32_t inst, const tp_msg *m,
                           tp_wbuf *w) {
    sv_comm *c = comm_of(sv, inst);
    if (kind == TP_OP_COMM_INIT) {
        TRY(seer_tp_msg_check(m, "bii", "comm_init"));
        if (m->f[0].len != SEER_COMM_ID_BYTES || c)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a communicator's id of %zu bytes, or a second one",
                            m->f[0].len);
        int n, rank;
        TRY(num(m, 1, 1, SEER_TP_MAX, &n));
        TRY(num(m, 2, 0, n - 1, &rank));
        if (!be->ops->comm_init_rank)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's %s backend has no communicator between processes",
                            be->ops->name);
        for (int i = 0; i < SV_COMMS; i++)
            if (!sv->comm[i].c) {
                TRY(be->ops->comm_init_rank(be, n, rank, m->f[0].data, &sv->comm[i].c));
                sv->comm[i].inst = inst;
                sv->comm[i].rank = rank;
                return SEER_OK;
            }
        return seer_err(SEER_ERR_OOM, "more than %d communicators on one rank", SV_COMMS);
    }
    if (!c)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a collective before its communicator");
    if (kind == TP_OP_COMM_FREE) {
        c->c->free(c->c);
        memset(c, 0, sizeof *c);
        return SEER_OK;
    }
    seer_comm *cc = c->c;
    if (kind == TP_OP_PEER_EXPORT || kind == TP_OP_PEER_IMPORT || kind == TP_OP_PEER_ENABLE) {
        if (!cc->peer_bytes || !cc->peer_export)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's communicator maps no peer buffers");
        if (kind == TP_OP_PEER_ENABLE) {
            TRY(seer_tp_msg_check(m, "i", "peer_enable"));
            cc->peer_enable(cc, m->f[0].i != 0);
            return SEER_OK;
        }
        if (kind == TP_OP_PEER_IMPORT) {
            TRY(seer_tp_msg_check(m, "b", "peer_import"));
            const void *all;
            TRY(seer_tp_msg_array(m, 0, (size_t)cc->n, cc->peer_bytes, &all, "peer_import"));
            return cc->peer_import(cc, all);
        }
        TRY(seer_tp_msg_check(m, "", "peer_export"));
        char *blob = malloc(cc->peer_bytes);
        if (!blob)
            return seer_err(SEER_ERR_OOM, "out of memory");
        seer_status s = cc->peer_export(cc, blob);
        if (s == SEER_OK)
            seer_tp_w_bytes(w, blob, cc->peer_bytes);
        free(blob);
        return s;
    }
    float *buf;
    if (kind == TP_OP_ALLREDUCE) {
        TRY(seer_tp_msg_check(m, "pii", "all_reduce"));
        TRY(mem(sv, m, 0, &buf));
        if (m->f[1].i < 0)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a negative size");
        return c->c->all_reduce(c->c, c->rank, buf, (size_t)m->f[1].i, m->f[2].i != 0);
    }
    TRY(seer_tp_msg_check(m, "piibb", "gather_cols"));
    TRY(mem(sv, m, 0, &buf));
    const int n = c->c->n;
    const int *col0, *ncols;
    int rows;
    TRY(num(m, 2, 0, BIG, &rows));
    TRY(seer_tp_msg_array(m, 3, (size_t)n, sizeof *col0, (const void **)&col0, "gather_cols"));
    TRY(seer_tp_msg_array(m, 4, (size_t)n, sizeof *ncols, (const void **)&ncols, "gather_cols"));
    if (m->f[1].i < 0)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a negative pitch");
    return c->c->gather_cols(c->c, c->rank, NULL, (size_t)m->f[1].i, rows, buf, col0, ncols);
}

/* An instance and what it still holds (its communicator, memory it allocated), those first. */
static void free_instance(tp_serve *sv, uint32_t inst) {
    seer_backend *be = sv->tab[inst].p;
    for (int i = 0; i < SV_ATT; i++)
        if (sv->att[i].be == be) {
            for (int j = 0; j < 2; j++)
                att_slot_free(&sv->att[i].slot[j]);
            sv->att[i].be = NULL;
        }
    for (int i = 0; i < SV_COMMS; i++)
        if (sv->comm[i].c && sv->comm[i].inst == inst) {
            sv->comm[i].c->free(sv->comm[i].c);
            memset(&sv->comm[i], 0, sizeof sv->comm[i]);
        }
    for (int64_t h = 0; h < sv->cap; h++)
        if (sv->tab[h].kind != H_NONE && sv->tab[h].kind != H_INST && sv->tab[h].be == be)
            entry_free(&sv->tab[h]);
    entry_free(&sv->tab[inst]);
}

seer_status seer_tp_serve_msg(tp_serve *sv, uint32_t kind, uint32_t inst, const void *payload, size_t len, tp_wbuf *w) {
    tp_msg *m = malloc(sizeof *m);
    if (!m)
        return seer_err(SEER_ERR_OOM, "out of memory");
    seer_status s = seer_tp_msg_parse(payload, len, m);
    seer_backend *be = sv->root;
    if (s == SEER_OK && inst != 0) {
        if ((int64_t)inst >= sv->cap || sv->tab[inst].kind != H_INST)
            s = seer_err(SEER_ERR_FORMAT, "tensor-parallel message: no instance %u", inst);
        else
            be = sv->tab[inst].p;
    }
    if (s == SEER_OK) {
        if (kind == TP_OP_FREE && inst != 0)
            free_instance(sv, inst);
        else if (kind >= TP_OP_COMM_INIT && kind <= TP_OP_COMM_FREE)
            s = op_comm(sv, be, kind, inst, m, w);
        else if (kind == TP_OP_WLOAD || kind == TP_OP_WFREE || kind == TP_OP_WCONCAT)
            s = op_weights(sv, be, kind, m, w);
        else if (kind >= TP_OP_KV_COPY && kind <= TP_OP_KV_READ)
            s = tp_serve_compute(sv, be, kind, m, w);
        else
            s = op_memory(sv, be, kind, m, w);
    }
    free(m);
    return s;
}
/* ---- the compute ops ------------------------------------------------------------------ */

static seer_status ids(const tp_msg *m, int k, int64_t n, const int32_t **out, const char *what) {
    return seer_tp_msg_array(m, k, n < 0 ? SIZE_MAX : (size_t)n, 4, (const void **)out, what);
}

static seer_status op_split(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m) {
    /* x, weight, T, nseg, (y, bias) x 4, has biases [, h, w_norm, eps] */
    const bool norm = op == TP_OP_NORM_MATMUL_SPLIT;
    TRY(seer_tp_msg_check(m, norm ? "ppiippppppppippf" : "ppiippppppppi", norm ? "norm_matmul_split" : "matmul_split"));
    float *x, *ys[SEER_WEIGHT_MAX_SEG], *bs[SEER_WEIGHT_MAX_SEG];
    seer_weight *wt;
    int T, nseg;
    TRY(mem(sv, m, 0, &x));
    TRY(weight(sv, m, 1, &wt));
    TRY(num(m, 2, 0, BIG, &T));
    TRY(num(m, 3, 1, SEER_WEIGHT_MAX_SEG, &nseg));
    if (nseg != (wt->n_seg ? wt->n_seg : 1))
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: %d outputs for a weight of %d segments", nseg,
                        wt->n_seg);
    for (int j = 0; j < SEER_WEIGHT_MAX_SEG; j++) {
        TRY(mem(sv, m, 4 + 2 * j, &ys[j]));
        TRY(mem(sv, m, 5 + 2 * j, &bs[j]));
    }
    const float *const *b = m->f[12].i ? (const float *const *)bs : NULL;
    if (!norm)
        return be->ops->matmul_split(be, ys, x, wt, b, T);
    float *h, *wn;
    TRY(mem(sv, m, 13, &h));
    TRY(mem(sv, m, 14, &wn));
    return be->ops->norm_matmul_split(be, ys, h, x, wn, (float)m->f[15].f, wt, b, T);
}

/* An attention batch from field k on (tp_remote_ops.c's w_batch); views and idx are the
 * caller's to free. */
static seer_status batch(const tp_msg *m, int k, seer_attn_batch *ab, seer_attn_view **views,
                         const seer_attn_view ***seq_view) {
    int T, ns, mp;
    TRY(num(m, k, 0, BIG, &T));
    memset(ab, 0, sizeof *ab);
    ab->T = T;
    TRY(num(m, k + 1, 0, BIG, &ab->n_heads));
    TRY(num(m, k + 2, 0, BIG, &ab->n_kv_heads));
    TRY(num(m, k + 3, 0, BIG, &ab->head_dim));
    ab->scale = (float)m->f[k + 4].f;
    TRY(num(m, k + 5, 1, BIG, &ab->page_size));
    TRY(num(m, k + 6, 0, 1 << 20, &ns));
    TRY(num(m, k + 7, 0, 1 << 20, &mp));
    ab->n_seq = ns;
    ab->max_pages = mp;
    TRY(ids(m, k + 8, (int64_t)ns * mp, &ab->seq_pages, "attention's pages"));
    TRY(ids(m, k + 9, ns, &ab->seq_len0, "attention's lengths"));
    TRY(ids(m, k + 10, ns + 1, &ab->seq_tok_off, "attention's offsets"));
    TRY(ids(m, k + 11, T, &ab->seq_toks, "attention's tokens"));
    TRY(ids(m, k + 12, T, &ab->tok_seq, "attention's sequences"));
    TRY(ids(m, k + 13, T, &ab->tok_slot, "attention's slots"));
    if (m->f[k + 14].i)
        TRY(seer_tp_msg_array(m, k + 15, (size_t)T * (size_t)T, 1, (const void **)&ab->mask, "attention's mask"));
    ab->kv_quant = m->f[k + 16].i != 0;
    if (m->f[k + 17].i)
        TRY(ids(m, k + 18, ns, &ab->seq_prompt, "attention's prompt counts"));
    TRY(num(m, k + 19, 0, INT32_MAX, &ab->window));
    if (m->f[k + 20].i)
        TRY(ids(m, k + 21, T, &ab->tok_pos, "attention's positions"));
    ab->softcap = (float)m->f[k + 22].f;
    for (int s = 0; s < ns; s++) /* the offsets must lie within the tokens */
        if (ab->seq_tok_off[s] < 0 || ab->seq_tok_off[s] > ab->seq_tok_off[s + 1] || ab->seq_tok_off[s + 1] > T)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: attention's token offsets are not ascending");
    const int32_t *meta = NULL;
    if (m->f[k + 23].len == 0 && ns == 0)
        return SEER_OK;
    TRY(ids(m, k + 23, (int64_t)ns * 5, &meta, "attention's views"));
    size_t n_idx = 0;
    for (int s = 0; s < ns; s++) {
        const int32_t *v = meta + s * 5;
        if (v[0] && (v[1] < 0 || v[2] < 0 || v[3] < 0 || v[1] > BIG || v[2] > 4096 || v[3] > 4096))
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a view of bad shape");
        if (v[0])
            n_idx += (size_t)v[1] * v[2] * v[3];
        if (n_idx > BIG) /* each term is below 2^55: the sum cannot wrap before this */
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: attention's views hold over %d indices", BIG);
    }
    const int32_t *idx;
    TRY(ids(m, k + 24, (int64_t)n_idx, &idx, "attention's view indices"));
    *views = calloc((size_t)ns + 1, sizeof **views);
    *seq_view = calloc((size_t)ns + 1, sizeof **seq_view);
    if (!*views || !*seq_view)
        return seer_err(SEER_ERR_OOM, "out of memory");
    size_t at = 0;
    for (int s = 0; s < ns; s++) {
        const int32_t *v = meta + s * 5;
        if (!v[0])
            continue;
        (*views)[s] = (seer_attn_view){idx + at, v[1], v[2], v[3], v[4]};
        (*seq_view)[s] = &(*views)[s];
        at += (size_t)v[1] * v[2] * v[3];
    }
    ab->seq_view = *seq_view;
    return SEER_OK;
}

static void att_slot_free(att_slot *a) {
    free(a->bytes);
    free(a->m);
    free(a->views);
    free(a->sview);
    memset(a, 0, sizeof *a);
}

static att_cache *att_of(tp_serve *sv, seer_backend *be) {
    for (int i = 0; i < SV_ATT; i++)
        if (sv->att[i].be == be)
            return &sv->att[i];
    att_cache *c = &sv->att[sv->att_next++ % SV_ATT]; /* an instance's cache, or the oldest */
    for (int j = 0; j < 2; j++)
        att_slot_free(&c->slot[j]);
    c->be = be;
    c->cur = 0;
    return c;
}

static seer_status op_attention(tp_serve *sv, seer_backend *be, const tp_msg *m) {
    TRY(seer_tp_msg_check(m, "ppp" GEOM "i" "iiiifiiibbbbbbibiibiibfbb", "attention"));
    float *out, *q;
    void *k;
    TRY(mem(sv, m, 0, &out));
    TRY(mem(sv, m, 1, &q));
    TRY(kv(sv, m, 2, &k));
    const seer_kv_geom g = geom(m, 3);
    int layer;
    TRY(num(m, 10, 0, g.n_layers - 1, &layer));
    /* the batch's fields, 11 to 35, lie together: eight numbers of 16 bytes and a string's
     * header before field 19's bytes, field 35's padded bytes last */
    const char *b0 = (const char *)m->f[19].data - 8 * 16 - 16;
    const char *b1 = (const char *)m->f[35].data + m->f[35].len + (8 - m->f[35].len % 8) % 8;
    const size_t n = (size_t)(b1 - b0);
    att_cache *c = att_of(sv, be);
    att_slot *a = &c->slot[c->cur];
    if (!(a->bytes && a->len == n && !memcmp(a->bytes, b0, n))) {
        a = &c->slot[c->cur ^ 1];
        att_slot_free(a);
        a->bytes = malloc(n ? n : 1);
        a->m = malloc(sizeof *a->m);
        if (!a->bytes || !a->m) {
            att_slot_free(a);
            return seer_err(SEER_ERR_OOM, "out of memory");
        }
        memcpy(a->bytes, b0, n);
        a->len = n;
        seer_status s = seer_tp_msg_parse(a->bytes, n, a->m);
        if (s == SEER_OK)
            s = batch(a->m, 0, &a->ab, &a->views, &a->sview);
        if (s != SEER_OK) {
            att_slot_free(a);
            return s;
        }
        c->cur ^= 1;
    }
    return be->ops->attention(be, out, q, k, &g, layer, &a->ab);
}

static seer_status op_kv(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w) {
    void *k;
    int n, T, layer;
    if (op == TP_OP_KV_COPY) {
        TRY(seer_tp_msg_check(m, "p" GEOM "ib", "kv_copy_pages"));
        TRY(kv(sv, m, 0, &k));
        const seer_kv_geom g = geom(m, 1);
        const seer_kv_copy *c;
        TRY(num(m, 8, 0, BIG, &n));
        TRY(seer_tp_msg_array(m, 9, (size_t)n, sizeof *c, (const void **)&c, "kv_copy_pages"));
        for (int i = 0; i < n; i++)
            if (c[i].src < 0 || c[i].src >= g.n_pages || c[i].dst < 0 || c[i].dst >= g.n_pages)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a page copy outside the pool");
        return be->ops->kv_copy_pages(be, k, &g, c, n);
    }
    if (op == TP_OP_KV_MOVE) {
        TRY(seer_tp_msg_check(m, "p" GEOM "ibbbb", "kv_move_rows"));
        TRY(kv(sv, m, 0, &k));
        const seer_kv_geom g = geom(m, 1);
        const int32_t *a[4];
        TRY(num(m, 8, 0, BIG, &n));
        for (int j = 0; j < 4; j++)
            TRY(ids(m, 9 + j, n, &a[j], "kv_move_rows"));
        return be->ops->kv_move_rows(be, k, &g, a[0], a[1], a[2], a[3], n);
    }
    if (op == TP_OP_KV_READ) {
        TRY(seer_tp_msg_check(m, "p" GEOM "iiibb", "kv_read"));
        TRY(kv(sv, m, 0, &k));
        const seer_kv_geom g = geom(m, 1);
        const int32_t *page, *row;
        int which;
        TRY(num(m, 8, 0, g.n_layers - 1, &layer));
        TRY(num(m, 9, 0, 1, &which));
        TRY(num(m, 10, 0, BIG, &n));
        TRY(ids(m, 11, n, &page, "kv_read"));
        TRY(ids(m, 12, n, &row, "kv_read"));
        for (int i = 0; i < n; i++)
            if (page[i] < 0 || page[i] >= g.n_pages || row[i] < 0 || row[i] >= g.page_size)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a row read outside the pool");
        if (!be->ops->kv_read)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend has no kv_read");
        const size_t cnt = (size_t)n * g.n_kv_heads * g.head_dim;
        float *out = malloc(cnt * sizeof *out + 1);
        if (!out)
            return seer_err(SEER_ERR_OOM, "out of memory");
        seer_status s = be->ops->kv_read(be, k, &g, layer, which, page, row, n, out);
        if (s == SEER_OK)
            seer_tp_w_bytes(w, out, cnt * sizeof *out);
        free(out);
        return s;
    }
    /* KV_STORE: kv, geom, layer, k, v, T, page, row */
    TRY(seer_tp_msg_check(m, "p" GEOM "ippibb", "kv_store"));
    TRY(kv(sv, m, 0, &k));
    const seer_kv_geom g = geom(m, 1);
    float *kk, *vv;
    const int32_t *page, *row;
    TRY(num(m, 8, 0, g.n_layers - 1, &layer));
    TRY(mem(sv, m, 9, &kk));
    TRY(mem(sv, m, 10, &vv));
    TRY(num(m, 11, 0, BIG, &T));
    TRY(ids(m, 12, T, &page, "kv_store"));
    TRY(ids(m, 13, T, &row, "kv_store"));
    if (!be->ops->kv_store)
        return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend has no kv_store");
    return be->ops->kv_store(be, k, &g, layer, kk, vv, page, row, T);
}

static seer_status op_rope(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m) {
    int T, H, Hkv, Dh, neox, layer;
    const int32_t *pos, *page, *row;
    float *q, *k, *v, *fr;
    void *kvp;
    if (op == TP_OP_ROPE) {
        TRY(seer_tp_msg_check(m, "pibiipi", "rope"));
        TRY(mem(sv, m, 0, &q));
        TRY(num(m, 1, 0, BIG, &T));
        TRY(ids(m, 2, T, &pos, "rope"));
        TRY(num(m, 3, 0, BIG, &H));
        TRY(num(m, 4, 0, BIG, &Dh));
        TRY(mem(sv, m, 5, &fr));
        return be->ops->rope(be, q, pos, T, H, Dh, fr, (int)m->f[6].i);
    }
    TRY(seer_tp_msg_check(m, "pppibiiipip" GEOM "ibb", "rope_kv_store"));
    TRY(mem(sv, m, 0, &q));
    TRY(mem(sv, m, 1, &k));
    TRY(mem(sv, m, 2, &v));
    TRY(num(m, 3, 0, BIG, &T));
    TRY(ids(m, 4, T, &pos, "rope_kv_store"));
    TRY(num(m, 5, 0, BIG, &H));
    TRY(num(m, 6, 0, BIG, &Hkv));
    TRY(num(m, 7, 0, BIG, &Dh));
    TRY(mem(sv, m, 8, &fr));
    neox = (int)m->f[9].i;
    TRY(kv(sv, m, 10, &kvp));
    const seer_kv_geom g = geom(m, 11);
    TRY(num(m, 18, 0, g.n_layers - 1, &layer));
    TRY(ids(m, 19, T, &page, "rope_kv_store"));
    TRY(ids(m, 20, T, &row, "rope_kv_store"));
    return be->ops->rope_kv_store(be, q, k, v, pos, T, H, Hkv, Dh, fr, neox, kvp, &g, layer, page, row);
}

static seer_status op_elementwise(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m) {
    float *y, *a, *b;
    if (op == TP_OP_SCALE || op == TP_OP_SOFTCAP) {
        TRY(seer_tp_msg_check(m, "pfi", "scale"));
        TRY(mem(sv, m, 0, &y));
        if (m->f[2].i < 0)
            return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a negative size");
        if (op == TP_OP_SCALE)
            return be->ops->scale(be, y, (float)m->f[1].f, (size_t)m->f[2].i);
        return be->ops->softcap(be, y, (float)m->f[1].f, (size_t)m->f[2].i);
    }
    TRY(seer_tp_msg_check(m, "pppi", "an elementwise op"));
    TRY(mem(sv, m, 0, &y));
    TRY(mem(sv, m, 1, &a));
    TRY(mem(sv, m, 2, &b));
    if (m->f[3].i < 0)
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: a negative size");
    const size_t n = (size_t)m->f[3].i;
    if (op == TP_OP_ADD)
        return be->ops->add(be, y, a, n);
    if (op == TP_OP_SWIGLU)
        return be->ops->swiglu(be, y, a, b, n);
    return be->ops->geglu(be, y, a, b, n);
}

static seer_status op_matmul(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m) {
    float *y, *x, *b, *h, *g;
    seer_weight *w, *w2;
    int T;
    switch (op) {
    case TP_OP_MATMUL:
        TRY(seer_tp_msg_check(m, "pppp" "i", "matmul"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &x));
        TRY(weight(sv, m, 2, &w));
        TRY(mem(sv, m, 3, &b));
        TRY(num(m, 4, 0, BIG, &T));
        return be->ops->matmul(be, y, x, w, b, T);
    case TP_OP_MATMUL_ADD:
    case TP_OP_MATMUL_GLU:
        TRY(seer_tp_msg_check(m, "pppi", "matmul_add"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &x));
        TRY(weight(sv, m, 2, &w));
        TRY(num(m, 3, 0, BIG, &T));
        return op == TP_OP_MATMUL_ADD ? be->ops->matmul_add(be, y, x, w, T) : be->ops->matmul_glu(be, y, x, w, T);
    case TP_OP_FFN_GLU:
        TRY(seer_tp_msg_check(m, "pppfpppi", "ffn_glu"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &h));
        TRY(mem(sv, m, 2, &x)); /* the norm's weight */
        TRY(weight(sv, m, 4, &w));
        TRY(weight(sv, m, 5, &w2));
        TRY(mem(sv, m, 6, &g));
        TRY(num(m, 7, 0, BIG, &T));
        return be->ops->ffn_glu(be, y, h, x, (float)m->f[3].f, w, w2, g, T);
    default:
        return op_split(sv, be, op, m);
    }
}

static seer_status tp_serve_compute(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w) {
    float *y, *x;
    int T, D, n, V;
    const int32_t *rows;
    seer_weight *wt;
    switch (op) {
    case TP_OP_KV_COPY:
    case TP_OP_KV_MOVE:
    case TP_OP_KV_STORE:
    case TP_OP_KV_READ:
        return op_kv(sv, be, op, m, w);
    case TP_OP_EMBED:
        TRY(seer_tp_msg_check(m, "ppib", "embed"));
        TRY(mem(sv, m, 0, &y));
        TRY(weight(sv, m, 1, &wt));
        TRY(num(m, 2, 0, BIG, &T));
        TRY(ids(m, 3, T, &rows, "embed"));
        for (int i = 0; i < T; i++)
            if (rows[i] < 0 || rows[i] >= wt->rows)
                return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: token %d outside the embedding", rows[i]);
        return be->ops->embed(be, y, wt, rows, T);
    case TP_OP_RMSNORM:
        TRY(seer_tp_msg_check(m, "pppiif", "rmsnorm"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &x));
        float *wn;
        TRY(mem(sv, m, 2, &wn));
        TRY(num(m, 3, 0, BIG, &T));
        TRY(num(m, 4, 1, BIG, &D));
        return be->ops->rmsnorm(be, y, x, wn, T, D, (float)m->f[5].f);
    case TP_OP_MATMUL:
    case TP_OP_MATMUL_ADD:
    case TP_OP_MATMUL_GLU:
    case TP_OP_FFN_GLU:
    case TP_OP_MATMUL_SPLIT:
    case TP_OP_NORM_MATMUL_SPLIT:
        return op_matmul(sv, be, op, m);
    case TP_OP_ROPE:
    case TP_OP_ROPE_KV_STORE:
        return op_rope(sv, be, op, m);
    case TP_OP_ATTENTION:
        return op_attention(sv, be, m);
    case TP_OP_SWIGLU:
    case TP_OP_GEGLU:
    case TP_OP_ADD:
    case TP_OP_SCALE:
    case TP_OP_SOFTCAP:
        return op_elementwise(sv, be, op, m);
    case TP_OP_GATHER_ROWS:
        TRY(seer_tp_msg_check(m, "ppibi", "gather_rows"));
        TRY(mem(sv, m, 0, &y));
        TRY(mem(sv, m, 1, &x));
        TRY(num(m, 2, 0, BIG, &n));
        TRY(ids(m, 3, n, &rows, "gather_rows"));
        TRY(num(m, 4, 1, BIG, &D));
        return be->ops->gather_rows(be, y, x, rows, n, D);
    case TP_OP_ARGMAX: {
        TRY(seer_tp_msg_check(m, "pii", "argmax_rows"));
        TRY(mem(sv, m, 0, &x));
        TRY(num(m, 1, 0, BIG, &n));
        TRY(num(m, 2, 1, BIG, &V));
        int32_t *out = malloc((size_t)n * 4 + 4);
        if (!out)
            return seer_err(SEER_ERR_OOM, "out of memory");
        seer_status s = be->ops->argmax_rows(be, out, x, n, V);
        if (s == SEER_OK)
            seer_tp_w_bytes(w, out, (size_t)n * 4);
        free(out);
        return s;
    }
    default:
        return seer_err(SEER_ERR_FORMAT, "tensor-parallel message: unknown op %u", op);
    }
}
