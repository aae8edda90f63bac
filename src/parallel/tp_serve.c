/*
 * tp_serve.c: a rank's process running rank 0's op stream (tp_remote.h) on its own backend.
 * Every message is parsed (seer_tp_msg_parse), checked against its op's signature, its handles
 * looked up in this process's table, then run; the answer is the op's status (with the
 * message on failure) and what it returns. A bad message is answered with its reason and
 * changes nothing. A KV op's geometry must be the one its storage was made with. What it
 * does not check: that an op's extents (rows, page ids) lie within
 * the memory the handles name; rank 0 is trusted there, as a backend trusts its caller.
 * Not for: the compute and KV ops (tp_serve_ops.c), sockets (tp_serve_loop.c) or the sending
 * side (tp_remote.c).
 */
#include "parallel/tp_serve.h"

#include <stdio.h>
#include <stdlib.h>

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

void seer_tp_serve_free(tp_serve *sv) {
    if (!sv)
        return;
    for (int i = 0; i < SV_ATT; i++)
        seer_tp_att_clear(&sv->att[i]);
    for (int i = 0; i < SV_COMMS; i++)
        if (sv->comm[i].c)
            sv->comm[i].c->free(sv->comm[i].c);
    /* weights and memory first, then the instances that made them */
    for (int pass = 0; pass < 2; pass++)
        for (int64_t h = 0; h < sv->cap; h++)
            if (sv->tab[h].kind != H_NONE && (sv->tab[h].kind == H_INST) == (pass == 1))
                entry_free(&sv->tab[h]);
    free(sv->tab);
    free(sv->fail0.msg);
    for (int i = 0; i < sv->n_fails; i++)
        free(sv->fails[i].msg);
    free(sv->fails);
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
    if (op == TP_OP_WRANDOM) {
        TRY(seer_tp_msg_check(m, "iiiif", "weight_random"));
        int rows, cols;
        TRY(num(m, 1, 1, BIG, &rows));
        TRY(num(m, 2, 1, BIG, &cols));
        if (!be->ops->weight_random)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend has no synthetic weights");
        TRY(fresh(sv, m->f[0].i, &e));
        TRY(be->ops->weight_random(be, rows, cols, (uint64_t)m->f[3].i, (float)m->f[4].f, &e->w));
        e->kind = H_WEIGHT;
        e->be = be;
        put_weight(w, &e->w, false);
        return SEER_OK;
    }
    if (op == TP_OP_WQUANT) {
        TRY(seer_tp_msg_check(m, "ipi", "weight_quantize"));
        if (!be->ops->weight_quantize)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend cannot quantise weights");
        TRY(fresh(sv, m->f[0].i, &e)); /* first: growing the table moves the source's entry */
        seer_weight *src;
        TRY(weight(sv, m, 1, &src));
        TRY(be->ops->weight_quantize(be, src, (int)m->f[2].i, &e->w));
        e->kind = H_WEIGHT;
        e->be = be;
        put_weight(w, &e->w, false);
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
        if (sv->att[i].be == be)
            seer_tp_att_clear(&sv->att[i]);
    for (int i = 0; i < SV_COMMS; i++)
        if (sv->comm[i].c && sv->comm[i].inst == inst) {
            sv->comm[i].c->free(sv->comm[i].c);
            memset(&sv->comm[i], 0, sizeof sv->comm[i]);
        }
    for (int64_t h = 0; h < sv->cap; h++)
        if (sv->tab[h].kind != H_NONE && sv->tab[h].kind != H_INST && sv->tab[h].be == be)
            entry_free(&sv->tab[h]);
    entry_free(&sv->tab[inst]);
    for (int i = 0; i < sv->n_fails; i++) /* a failure nobody is left to hear of */
        if (sv->fails[i].inst == inst) {
            free(sv->fails[i].msg);
            sv->fails[i] = sv->fails[--sv->n_fails];
            break;
        }
}

/* One message's op on its instance; fail: an earlier failure forward_end is to end with. */
static seer_status run_msg(tp_serve *sv, uint32_t kind, uint32_t inst, const void *payload, size_t len, tp_wbuf *w,
                           seer_status fail) {
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
        else if (kind == TP_OP_WLOAD || kind == TP_OP_WFREE || kind == TP_OP_WCONCAT || kind == TP_OP_WRANDOM ||
                 kind == TP_OP_WQUANT)
            s = op_weights(sv, be, kind, m, w);
        else if ((kind >= TP_OP_KV_COPY && kind <= TP_OP_KV_READ) || kind == TP_OP_KV_FILL ||
                 (kind >= TP_OP_KV_PAGE_BYTES && kind <= TP_OP_KV_HOST_IN))
            s = seer_tp_serve_compute(sv, be, kind, m, w);
        else if (kind >= TP_OP_BATCH_BEGIN && kind <= TP_OP_FWD_LAUNCH)
            s = seer_tp_serve_forward(sv, be, kind, m, w, fail);
        else
            s = op_memory(sv, be, kind, m, w);
    }
    free(m);
    return s;
}

static const char *const op_names[TP_OP_COUNT] = {
    [TP_OP_HELLO] = "hello", [TP_OP_BYE] = "bye", [TP_OP_FREE] = "free", [TP_OP_CLONE] = "exec_clone",
    [TP_OP_ALLOC] = "alloc", [TP_OP_DEALLOC] = "dealloc", [TP_OP_UPLOAD] = "upload", [TP_OP_DOWNLOAD] = "download",
    [TP_OP_SYNC] = "sync", [TP_OP_WLOAD] = "weight_load", [TP_OP_WFREE] = "weight_free",
    [TP_OP_WCONCAT] = "weight_concat", [TP_OP_KV_ALLOC] = "kv_alloc", [TP_OP_KV_RESERVE] = "kv_reserve",
    [TP_OP_KV_FREE] = "kv_free", [TP_OP_KV_MEM] = "kv_mem_available", [TP_OP_KV_COPY] = "kv_copy_pages",
    [TP_OP_KV_MOVE] = "kv_move_rows", [TP_OP_KV_STORE] = "kv_store", [TP_OP_EMBED] = "embed",
    [TP_OP_RMSNORM] = "rmsnorm", [TP_OP_MATMUL] = "matmul", [TP_OP_MATMUL_ADD] = "matmul_add",
    [TP_OP_MATMUL_SPLIT] = "matmul_split", [TP_OP_NORM_MATMUL_SPLIT] = "norm_matmul_split",
    [TP_OP_MATMUL_GLU] = "matmul_glu", [TP_OP_FFN_GLU] = "ffn_glu", [TP_OP_ROPE] = "rope",
    [TP_OP_ROPE_KV_STORE] = "rope_kv_store", [TP_OP_ATTENTION] = "attention", [TP_OP_SWIGLU] = "swiglu",
    [TP_OP_GEGLU] = "geglu", [TP_OP_ADD] = "add", [TP_OP_SCALE] = "scale", [TP_OP_SOFTCAP] = "softcap",
    [TP_OP_GATHER_ROWS] = "gather_rows", [TP_OP_ARGMAX] = "argmax_rows", [TP_OP_KV_READ] = "kv_read",
    [TP_OP_COMM_INIT] = "comm_init", [TP_OP_ALLREDUCE] = "all_reduce", [TP_OP_GATHER] = "gather_cols",
    [TP_OP_PEER_EXPORT] = "peer_export", [TP_OP_PEER_IMPORT] = "peer_import", [TP_OP_PEER_ENABLE] = "peer_enable",
    [TP_OP_COMM_FREE] = "comm_free", [TP_OP_WRANDOM] = "weight_random", [TP_OP_KV_FILL] = "kv_fill_random",
    [TP_OP_WQUANT] = "weight_quantize", [TP_OP_BATCH_BEGIN] = "batch_begin", [TP_OP_FWD_BEGIN] = "forward_begin",
    [TP_OP_FWD_END] = "forward_end", [TP_OP_FWD_LAUNCH] = "forward_launch", [TP_OP_KV_PAGE_BYTES] = "kv_page_bytes",
    [TP_OP_KV_HOST_OUT] = "kv_host_copy (to the host)", [TP_OP_KV_HOST_IN] = "kv_host_copy (from the host)",
};

const char *seer_tp_op_name(uint32_t op) {
    return op < TP_OP_COUNT && op_names[op] ? op_names[op] : "an unknown op";
}

/* The failure kept for inst (NULL: none). */
static sv_fail *fail_of(tp_serve *sv, uint32_t inst) {
    if (inst == 0)
        return sv->fail0.s != SEER_OK ? &sv->fail0 : NULL;
    for (int i = 0; i < sv->n_fails; i++)
        if (sv->fails[i].inst == inst)
            return &sv->fails[i];
    return NULL;
}

/* Forgets f (reported, or its instance freed). */
static void fail_drop(tp_serve *sv, sv_fail *f) {
    free(f->msg);
    if (f == &sv->fail0) {
        sv->fail0 = (sv_fail){0};
        return;
    }
    *f = sv->fails[--sv->n_fails];
}

/* Keeps s (msg) as inst's failure unless it has one; an instance that does not exist is
 * rank 0's root's concern. */
static void fail_keep(tp_serve *sv, uint32_t inst, seer_status s, const char *msg) {
    if (fail_of(sv, inst))
        return;
    sv_fail *f = &sv->fail0;
    if (inst != 0 && (int64_t)inst < sv->cap && sv->tab[inst].kind == H_INST) {
        sv_fail *nf = realloc(sv->fails, (size_t)(sv->n_fails + 1) * sizeof *nf);
        if (nf) {
            sv->fails = nf;
            f = &sv->fails[sv->n_fails++];
        }
    }
    if (f == &sv->fail0 && sv->fail0.s != SEER_OK)
        return;
    *f = (sv_fail){.inst = f == &sv->fail0 ? 0 : inst, .s = s, .msg = strdup(msg)};
}

seer_status seer_tp_serve_msg(tp_serve *sv, uint32_t kind, uint32_t inst, const void *payload, size_t len, tp_wbuf *w) {
    sv_fail *f = fail_of(sv, inst);
    if (f && kind == TP_OP_FWD_END) {
        /* a recording the failure spoiled is still ended (and dropped), not left open */
        tp_wbuf scratch = {0};
        (void)run_msg(sv, kind, inst, payload, len, &scratch, f->s);
        seer_tp_w_free(&scratch);
        f = fail_of(sv, inst);
    }
    if (f) { /* reported now, in place of this op */
        const seer_status s =
            seer_err(f->s, "%s", f->msg ? f->msg : "an op sent without waiting failed (no memory for its message)");
        fail_drop(sv, f);
        return s;
    }
    return run_msg(sv, kind, inst, payload, len, w, SEER_OK);
}

/* Ops run even after a failure: those that release what rank 0 has forgotten (they cannot
 * make it worse; nothing is held longer than the instance), and the collectives, which the
 * other ranks' processes have joined or will join: a rank that skipped its part would leave
 * them waiting for it for ever (on CUDA, the one-shot all-reduce's kernel spinning on a flag
 * this rank never raises), where its part over whatever its buffer holds only gives a result
 * nobody reads, the failure being reported all the same. */
static bool runs_after_failure(uint32_t kind) {
    return kind == TP_OP_FREE || kind == TP_OP_DEALLOC || kind == TP_OP_WFREE || kind == TP_OP_KV_FREE ||
           kind == TP_OP_COMM_FREE || kind == TP_OP_ALLREDUCE || kind == TP_OP_GATHER;
}

seer_status seer_tp_serve_post(tp_serve *sv, uint32_t kind, uint32_t inst, const void *payload, size_t len) {
    const sv_fail *f = fail_of(sv, inst);
    if (f && !runs_after_failure(kind))
        return seer_err(f->s, "refused after an earlier failure of the instance");
    tp_wbuf w = {0};
    const seer_status s = run_msg(sv, kind, inst, payload, len, &w, SEER_OK);
    seer_tp_w_free(&w);
    if (s == SEER_OK)
        return SEER_OK;
    char msg[640];
    snprintf(msg, sizeof msg, "%s (sent without waiting for its answer) failed: %s", seer_tp_op_name(kind),
             seer_last_error());
    fail_keep(sv, inst, s, msg);
    return seer_err(s, "%s", msg);
}
