/*
 * context.c: a context owns the KV pool of one model on its backend, the sequences in it,
 * their attention views and the activation scratch; seer_decode places a batch in the cache
 * and runs the forward pass.
 * Not for: the layers themselves (llama.c) or page bookkeeping (src/kv/).
 */
#include "kv/kv_quant.h"
#include "model/model.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

seer_context_params seer_context_default_params(void) {
    seer_context_params p = {.n_ctx = 0, .n_seq_max = 1, .n_batch_max = 512, .page_size = 16, .n_pages = 0};
    return p;
}

static void free_scratch(seer_backend *be, seer_scratch *s) {
    float *bufs[] = {s->x, s->h, s->q, s->att, s->k, s->v, s->g, s->u, s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            be->ops->dealloc(be, bufs[i]);
    memset(s, 0, sizeof *s);
}

static seer_status alloc_scratch(seer_backend *be, const seer_model_info *in, int T,
                                 seer_scratch *s) {
    const size_t qd = (size_t)in->n_heads * in->head_dim, kvd = (size_t)in->n_kv_heads * in->head_dim;
    struct {
        float **p;
        size_t n;
    } want[] = {
        {&s->x, (size_t)T * in->dim}, {&s->h, T * ((size_t)in->dim > qd ? (size_t)in->dim : qd)},
        {&s->q, T * qd},              {&s->att, T * qd},
        {&s->k, T * kvd},             {&s->v, T * kvd},
        {&s->g, (size_t)T * in->ffn_dim}, {&s->u, (size_t)T * in->ffn_dim},
        {&s->logits, (size_t)T * in->n_vocab},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        SEER_TRY(be->ops->alloc(be, want[i].n * sizeof(float), (void **)want[i].p));
    return SEER_OK;
}

/* Bytes of one page's quantised copy (0 without one). */
static uint64_t page_qbytes(const seer_model *m, int page_size, int bits) {
    const seer_model_info *in = &m->info;
    return seer_kvq_page_bytes(in->n_layers, page_size, in->n_kv_heads * in->head_dim, bits);
}

/* Bytes of one KV page's rows of type as the backend stores them (the storage's geometry). */
static uint64_t page_row_bytes(const seer_model *m, int page_size, seer_kv_type type) {
    const seer_model_info *in = &m->info;
    const int eb = m->be->ops->kv_elem_bytes ? m->be->ops->kv_elem_bytes : (int)sizeof(float);
    const seer_kv_geom g = {.n_pages = 1, .page_size = page_size, .n_layers = in->n_layers,
                            .n_kv_heads = in->n_kv_heads, .head_dim = in->head_dim, .kv_type = type};
    return seer_kv_geom_page_bytes(&g, eb);
}

/* Bytes of one KV page as the backend stores it, its quantised copy included. */
static uint64_t page_bytes(const seer_model *m, const seer_context_params *p) {
    return page_row_bytes(m, p->page_size, p->kv_type) + page_qbytes(m, p->page_size, p->kv_quant_bits);
}

static const char *const KV_TYPE_NAMES[] = {[SEER_KV_FULL] = "bf16", [SEER_KV_Q8] = "q8", [SEER_KV_Q4] = "q4"};

const char *seer_kv_type_name(seer_kv_type type) {
    return (unsigned)type < sizeof KV_TYPE_NAMES / sizeof *KV_TYPE_NAMES ? KV_TYPE_NAMES[type] : NULL;
}

seer_status seer_kv_type_parse(const char *name, seer_kv_type *out) {
    SEER_CHECK_ARG(out);
    for (unsigned t = 0; name && t < sizeof KV_TYPE_NAMES / sizeof *KV_TYPE_NAMES; t++)
        if (!strcmp(name, KV_TYPE_NAMES[t])) {
            *out = (seer_kv_type)t;
            return SEER_OK;
        }
    return seer_err(SEER_ERR_INVALID_ARG, "KV type '%s': expected bf16, q8 or q4", name ? name : "(null)");
}

/* Whether m's backend stores rows of type. */
static bool kv_type_supported(const seer_model *m, seer_kv_type type) {
    return type == SEER_KV_FULL || (seer_kv_type_name(type) && (m->be->ops->kv_types >> type & 1u));
}

seer_status seer_model_kv_capacity(const seer_model *m, seer_kv_type type, uint64_t *tokens) {
    SEER_CHECK_ARG(m && m->be && tokens);
    *tokens = 0;
    uint64_t avail = 0;
    if (!kv_type_supported(m, type))
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot store the KV cache as %s", m->be->ops->name,
                        seer_kv_type_name(type) ? seer_kv_type_name(type) : "that type");
    if (!m->be->ops->kv_mem_available)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot tell its free memory", m->be->ops->name);
    SEER_TRY(m->be->ops->kv_mem_available(m->be, &avail));
    *tokens = avail / page_row_bytes(m, 1, type);
    return SEER_OK;
}

uint64_t seer_kv_bytes_per_token(const seer_model *m, seer_kv_type type) {
    if (!m || !m->be || !kv_type_supported(m, type))
        return 0;
    return page_row_bytes(m, 1, type);
}

/* The default n_ctx: the trained context, shortened to what the free memory holds for
 * n_seq_max sequences (a model trained at 1M tokens must still open on a small device). */
static seer_status fit_default_ctx(const seer_model *m, seer_context_params *p) {
    uint64_t avail = 0;
    if (!m->be->ops->kv_mem_available || m->be->ops->kv_mem_available(m->be, &avail) != SEER_OK)
        return SEER_OK; /* unknown: the allocation itself will say */
    const uint64_t pb = page_bytes(m, p);
    const uint64_t pages_per_seq = avail / pb / (uint64_t)p->n_seq_max;
    const long long want = ((long long)p->n_ctx + p->page_size - 1) / p->page_size;
    if ((long long)pages_per_seq >= want)
        return SEER_OK;
    if (pages_per_seq == 0)
        return seer_err(SEER_ERR_OOM, "%d sequences of one KV page (%.1f MiB each) do not fit in %.1f MiB of free memory",
                        p->n_seq_max, pb / 1048576.0, avail / 1048576.0);
    p->n_ctx = (int)pages_per_seq * p->page_size;
    return SEER_OK;
}

/* Refuses a pool whose storage could never fit before anything is allocated: the pool only
 * commits what it uses, but a context that fails a thousand tokens in is worse than one
 * refused at once. */
static seer_status check_pool_fits(const seer_model *m, const seer_context_params *p) {
    uint64_t avail = 0;
    if (!m->be->ops->kv_mem_available || m->be->ops->kv_mem_available(m->be, &avail) != SEER_OK)
        return SEER_OK;
    const uint64_t need = page_bytes(m, p) * (uint64_t)p->n_pages;
    if (need > avail)
        return seer_err(SEER_ERR_OOM,
                        "a KV cache of %d tokens x %d sequences needs %.1f MiB; %.1f MiB of memory is "
                        "free (use a smaller context)",
                        p->n_ctx, p->n_seq_max, need / 1048576.0, avail / 1048576.0);
    return SEER_OK;
}

/* The KV layer's grow hook: the backend commits storage for the pages about to be used. */
static seer_status grow_kv(void *user, int n_pages, int *n_committed) {
    seer_context *c = user;
    seer_backend *be = c->be;
    return be->ops->kv_reserve(be, c->kv_data, &c->geom, n_pages, n_committed);
}

uint64_t seer_kv_quant_bytes_per_token(const seer_model *m, int bits) {
    if (!m || (bits != 4 && bits != 8))
        return 0;
    return page_qbytes(m, 1, bits);
}

void seer_context_kv_memory(const seer_context *c, seer_kv_memory *out) {
    const int bits = c->params.kv_quant_bits;
    const uint64_t pb = page_bytes(c->model, &c->params);
    const uint64_t qb = page_qbytes(c->model, c->params.page_size, bits);
    out->n_pages = c->kv->n_pages;
    out->n_pages_committed = c->kv->n_committed;
    out->bytes_reserved = pb * (uint64_t)c->kv->n_pages;
    out->bytes_committed = pb * (uint64_t)c->kv->n_committed;
    out->quant_bits = bits;
    out->quant_bytes_reserved = qb * (uint64_t)c->kv->n_pages;
    out->quant_bytes_committed = qb * (uint64_t)c->kv->n_committed;
    out->kv_type = c->params.kv_type;
}

static void context_free_body(seer_context *c) {
    if (!c)
        return;
    /* the KV storage and scratch went through the context's instance: they go before it */
    seer_backend *be = c->be;
    if (be) {
        seer_sparse_ffn_free(c);
        free_scratch(be, &c->s);
        seer_host_slots_free(c);
        if (c->kv_data)
            be->ops->kv_free(be, c->kv_data);
        if (be != c->model->be)
            be->ops->free(be);
    }
    if (c->views)
        for (int i = 0; i < c->params.n_seq_max; i++)
            free(c->views[i].idx);
    free(c->views);
    seer_kv_free(c->kv);
    void *host[] = {c->tok_seq, c->tok_slot, c->tok_page, c->tok_row, c->seq_toks, c->seq_tok_off,
                    c->seq_len0, c->seq_prompt, c->seq_ids, c->seq_ntok, c->seq_pages, c->out_rows,
                    (void *)c->seq_view, c->copies};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
    free(c);
}

/* the failure that led here stays the one the caller reads */
void seer_context_free(seer_context *c) { SEER_ERR_KEPT(context_free_body(c)); }

seer_status seer_context_init(seer_model *m, seer_context_params p, seer_context **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    SEER_CHECK_ARG(m);
    if (!m->be)
        return seer_err(SEER_ERR_INVALID_ARG, "the model was loaded with vocab_only: no weights");
    const bool n_ctx_default = p.n_ctx == 0;
    if (n_ctx_default)
        p.n_ctx = m->info.ctx_train;
    if (p.n_ctx < 1 || p.n_ctx > (1 << 24))
        return seer_err(SEER_ERR_INVALID_ARG, "n_ctx %d is out of range [1, %d]", p.n_ctx, 1 << 24);
    if (p.n_seq_max < 1 || p.n_seq_max > 65536)
        return seer_err(SEER_ERR_INVALID_ARG, "n_seq_max %d is out of range [1, 65536]", p.n_seq_max);
    if (p.n_batch_max < 1 || p.n_batch_max > 65536)
        return seer_err(SEER_ERR_INVALID_ARG, "n_batch_max %d is out of range [1, 65536]", p.n_batch_max);
    if (p.page_size < 1 || p.page_size > 4096)
        return seer_err(SEER_ERR_INVALID_ARG, "page_size %d is out of range [1, 4096]", p.page_size);
    if (p.kv_quant_bits != 0 && p.kv_quant_bits != 4 && p.kv_quant_bits != 8)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_quant_bits %d must be 0, 4 or 8", p.kv_quant_bits);
    if (!seer_kv_type_name(p.kv_type))
        return seer_err(SEER_ERR_INVALID_ARG, "kv_type %d is not a KV type", (int)p.kv_type);
    if (!kv_type_supported(m, p.kv_type))
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot store the KV cache as %s",
                        m->be->ops->name, seer_kv_type_name(p.kv_type));
    if (p.kv_type != SEER_KV_FULL && p.kv_quant_bits)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_quant_bits %d keeps a quantised copy beside full-precision "
                                              "rows; with kv_type %s there are none",
                        p.kv_quant_bits, seer_kv_type_name(p.kv_type));
    if (n_ctx_default && p.n_pages == 0)
        SEER_TRY(fit_default_ctx(m, &p));
    long long pages_per_seq = (p.n_ctx + p.page_size - 1) / p.page_size;
    if (p.n_pages == 0) {
        long long need = pages_per_seq * p.n_seq_max;
        if (need > (1 << 24))
            return seer_err(SEER_ERR_INVALID_ARG, "%d sequences of %d tokens need %lld pages; set n_pages",
                            p.n_seq_max, p.n_ctx, need);
        p.n_pages = (int)need;
    }
    if (p.n_pages < 1 || p.n_pages > (1 << 24))
        return seer_err(SEER_ERR_INVALID_ARG, "n_pages %d is out of range [1, %d]", p.n_pages, 1 << 24);

    SEER_TRY(check_pool_fits(m, &p));

    seer_context *c = calloc(1, sizeof *c);
    if (!c)
        return seer_err(SEER_ERR_OOM, "out of memory");
    c->model = m;
    c->params = p;
    const seer_model_info *in = &m->info;
    c->geom = (seer_kv_geom){.n_pages = p.n_pages, .page_size = p.page_size,
                             .n_layers = in->n_layers, .n_kv_heads = in->n_kv_heads,
                             .head_dim = in->head_dim, .kv_bits = p.kv_quant_bits,
                             .kv_type = p.kv_type};
    c->be = m->be;
    seer_status s = m->be->ops->exec_clone ? m->be->ops->exec_clone(m->be, &c->be) : SEER_OK;
    if (s != SEER_OK)
        c->be = NULL;
    if (s == SEER_OK)
        s = seer_kv_init(p.n_pages, p.page_size, p.n_seq_max, p.n_ctx, &c->kv);
    if (s == SEER_OK)
        s = c->be->ops->kv_alloc(c->be, &c->geom, &c->kv_data);
    if (s == SEER_OK)
        seer_kv_set_grow(c->kv, grow_kv, c, 0);
    /* Rows for n_batch_max rounded up to 8: a backend that pads a call to a shape it has
     * recorded (CUDA: 1, 2, 4, 8, then multiples of 8) then has room to pad any call, also one
     * of exactly n_batch_max tokens (a verification of B x (G + 1)). */
    c->rows_cap = (p.n_batch_max + 7) / 8 * 8;
    if (s == SEER_OK)
        s = alloc_scratch(c->be, in, c->rows_cap, &c->s);
    if (s == SEER_OK)
        s = seer_host_slots_alloc(c);
    if (s == SEER_OK) {
        int T = c->rows_cap, B = p.n_seq_max < p.n_batch_max ? p.n_seq_max : p.n_batch_max;
        c->views = seer_calloc_array(p.n_seq_max, sizeof *c->views);
        c->tok_seq = seer_malloc_array(T, sizeof(int32_t));
        c->tok_slot = seer_malloc_array(T, sizeof(int32_t));
        c->tok_page = seer_malloc_array(T, sizeof(int32_t));
        c->tok_row = seer_malloc_array(T, sizeof(int32_t));
        c->seq_toks = seer_malloc_array(T, sizeof(int32_t));
        c->out_rows = seer_malloc_array(T, sizeof(int32_t));
        c->seq_tok_off = seer_malloc_array(B + 1, sizeof(int32_t));
        c->seq_len0 = seer_malloc_array(B, sizeof(int32_t));
        c->seq_prompt = seer_malloc_array(B, sizeof(int32_t));
        c->seq_ids = seer_malloc_array(B, sizeof(int32_t));
        c->seq_ntok = seer_malloc_array(B, sizeof(int32_t));
        c->seq_view = seer_malloc_array(B, sizeof(void *));
        c->copies = seer_malloc_array(B, sizeof(seer_kv_copy));
        c->seq_pages = seer_malloc_array((size_t)B * c->kv->max_pages_per_seq, sizeof(int32_t));
        if (!c->views || !c->tok_seq || !c->tok_slot || !c->tok_page || !c->tok_row ||
            !c->seq_toks || !c->out_rows || !c->seq_tok_off || !c->seq_len0 || !c->seq_prompt || !c->seq_ids ||
            !c->seq_ntok || !c->seq_view || !c->copies || !c->seq_pages)
            s = seer_err(SEER_ERR_OOM, "out of memory for context bookkeeping");
    }
    if (s != SEER_OK) {
        seer_context_free(c);
        return s;
    }
    *out = c;
    return SEER_OK;
}

const seer_model *seer_context_model(const seer_context *c) { return c ? c->model : NULL; }
int seer_context_n_ctx(const seer_context *c) { return c ? c->params.n_ctx : 0; }

static seer_status check_seq(const seer_context *c, seer_seq_id seq) {
    SEER_CHECK_ARG(c);
    if (seq < 0 || seq >= c->params.n_seq_max || !seer_kv_seq_alive(c->kv, seq))
        return seer_err(SEER_ERR_INVALID_ARG, "sequence %d does not exist", (int)seq);
    return SEER_OK;
}

seer_status seer_seq_new(seer_context *c, seer_seq_id *out) {
    SEER_CHECK_ARG(c);
    SEER_CHECK_ARG(out);
    int id;
    SEER_TRY(seer_kv_seq_new(c->kv, &id));
    *out = id;
    return SEER_OK;
}

seer_status seer_seq_fork(seer_context *c, seer_seq_id src, seer_seq_id *out) {
    SEER_CHECK_ARG(out);
    SEER_TRY(check_seq(c, src));
    int id;
    SEER_TRY(seer_kv_seq_fork(c->kv, src, &id));
    *out = id;
    return SEER_OK;
}

seer_status seer_seq_rewind(seer_context *c, seer_seq_id seq, int new_len) {
    SEER_TRY(check_seq(c, seq));
    return seer_kv_rewind(c->kv, seq, new_len);
}

void seer_seq_free(seer_context *c, seer_seq_id seq) {
    if (check_seq(c, seq) != SEER_OK)
        return;
    seer_seq_clear_view(c, seq);
    seer_kv_seq_free(c->kv, seq);
}

int seer_seq_len(const seer_context *c, seer_seq_id seq) {
    if (!c || seq < 0 || seq >= c->params.n_seq_max || !seer_kv_seq_alive(c->kv, seq))
        return -1;
    return c->kv->seqs[seq].len;
}

int seer_kv_free_pages(const seer_context *c) { return c ? c->kv->n_free : 0; }

seer_status seer_seq_set_view(seer_context *c, seer_seq_id seq, const seer_view *v) {
    SEER_TRY(check_seq(c, seq));
    const seer_model_info *in = &c->model->info;
    if (!v || v->n < 0 || (v->n > 0 && !v->idx))
        return seer_err(SEER_ERR_INVALID_ARG, "view: need idx for n = %d", v ? v->n : -1);
    if (v->n_layers_view != 1 && v->n_layers_view != in->n_layers)
        return seer_err(SEER_ERR_INVALID_ARG, "view: n_layers_view %d must be 1 or %d",
                        v->n_layers_view, in->n_layers);
    if (v->n_heads_view != 1 && v->n_heads_view != in->n_kv_heads)
        return seer_err(SEER_ERR_INVALID_ARG, "view: n_heads_view %d must be 1 or %d",
                        v->n_heads_view, in->n_kv_heads);
    if (v->tail_start < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "view: tail_start %d is negative", v->tail_start);
    size_t n = (size_t)v->n_layers_view * v->n_heads_view * v->n;
    for (size_t r = 0; r < n / (v->n ? v->n : 1) && v->n; r++) {
        const int32_t *row = v->idx + r * v->n;
        for (int k = 0; k < v->n; k++)
            if (row[k] < 0 || (k && row[k] <= row[k - 1]))
                return seer_err(SEER_ERR_INVALID_ARG, "view: slot lists must be ascending and non-negative");
    }
    int32_t *idx = seer_malloc_array(n ? n : 1, sizeof *idx);
    if (!idx)
        return seer_err(SEER_ERR_OOM, "out of memory");
    if (n)
        memcpy(idx, v->idx, n * sizeof *idx);
    seer_seq_view *sv = &c->views[seq];
    free(sv->idx);
    sv->set = true;
    sv->idx = idx;
    sv->n = v->n;
    sv->n_layers_view = v->n_layers_view;
    sv->n_heads_view = v->n_heads_view;
    sv->tail_start = v->tail_start;
    sv->av = (seer_attn_view){.idx = idx, .n = v->n, .n_layers_view = v->n_layers_view,
                              .n_heads_view = v->n_heads_view, .tail_start = v->tail_start};
    return SEER_OK;
}

void seer_seq_clear_view(seer_context *c, seer_seq_id seq) {
    if (!c || seq < 0 || seq >= c->params.n_seq_max)
        return;
    free(c->views[seq].idx);
    memset(&c->views[seq], 0, sizeof c->views[seq]);
}


seer_status seer_context_read_kv(seer_context *c, seer_seq_id seq, int layer, int which, int slot0,
                                 int n, float *out) {
    SEER_TRY(check_seq(c, seq));
    const seer_kv_seq *sq = &c->kv->seqs[seq];
    if (slot0 < 0 || n < 0 || slot0 + n > sq->len || layer < 0 || layer >= c->model->info.n_layers)
        return seer_err(SEER_ERR_INVALID_ARG, "read_kv: slots [%d, %d) of a sequence of %d", slot0,
                        slot0 + n, sq->len);
    enum { CH = 256 };
    int32_t page[CH], row[CH];
    size_t kvd = (size_t)c->geom.n_kv_heads * c->geom.head_dim;
    for (int i = 0; i < n; i += CH) {
        int k = n - i < CH ? n - i : CH;
        for (int j = 0; j < k; j++) {
            int s = slot0 + i + j;
            page[j] = sq->pages[s / c->kv->page_size];
            row[j] = s % c->kv->page_size;
        }
        seer_backend *be = c->be;
        SEER_TRY(be->ops->kv_read(be, c->kv_data, &c->geom, layer, which, page, row, k, out + i * kvd));
    }
    return SEER_OK;
}

seer_status seer_seq_move_slots(seer_context *c, seer_seq_id seq, const int32_t *src,
                                const int32_t *dst, int n) {
    SEER_TRY(check_seq(c, seq));
    if (n <= 0)
        return SEER_OK;
    const seer_kv_seq *sq = &c->kv->seqs[seq];
    const int ps = c->kv->page_size;
    int32_t *idx = seer_malloc_array((size_t)4 * n, sizeof(int32_t));
    if (!idx)
        return seer_err(SEER_ERR_OOM, "out of memory");
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= sq->len || dst[i] < 0 || dst[i] >= sq->len ||
            c->kv->refcount[sq->pages[dst[i] / ps]] != 1) {
            free(idx);
            return seer_err(SEER_ERR_INVALID_ARG,
                            "move_slots: slot %d -> %d in a sequence of %d (or into a shared page)",
                            src[i], dst[i], sq->len);
        }
        if (src[i] == dst[i])
            continue;
        idx[m] = sq->pages[src[i] / ps];
        idx[n + m] = src[i] % ps;
        idx[2 * n + m] = sq->pages[dst[i] / ps];
        idx[3 * n + m] = dst[i] % ps;
        m++;
    }
    seer_status st = m ? c->be->ops->kv_move_rows(c->be, c->kv_data, &c->geom, idx, idx + n, idx + 2 * n,
                                                  idx + 3 * n, m)
                       : SEER_OK;
    free(idx);
    return st;
}

static seer_status validate_batch(const seer_context *c, const seer_batch *b) {
    SEER_CHECK_ARG(c);
    if (!b || !b->token || !b->seq || !b->pos)
        return seer_err(SEER_ERR_INVALID_ARG, "batch needs token, seq and pos arrays");
    const int T = b->n_tokens;
    if (T < 1 || T > c->params.n_batch_max)
        return seer_err(SEER_ERR_INVALID_ARG, "batch of %d tokens; must be 1..%d (n_batch_max)", T,
                        c->params.n_batch_max);
    if (b->capture && !b->queries)
        return seer_err(SEER_ERR_INVALID_ARG, "batch asks to capture queries but gives no room for them");
    if (b->kv_quant && !c->params.kv_quant_bits)
        return seer_err(SEER_ERR_INVALID_ARG, "batch asks for the quantised KV copy; the context keeps none "
                                              "(kv_quant_bits 0)");
    if (b->draft_weights && !c->model->draft_layers)
        return seer_err(SEER_ERR_INVALID_ARG, "batch asks for the draft weights; the model has none "
                                              "(seer_model_params.draft_weights)");
    if (b->sparse_ffn && !c->sffn)
        return seer_err(SEER_ERR_INVALID_ARG, "batch asks for the sparse FFN; the context has none");
    const int V = c->model->info.n_vocab;
    for (int i = 0; i < T; i++) {
        if (b->token[i] < 0 || b->token[i] >= V)
            return seer_err(SEER_ERR_INVALID_ARG, "token %d at batch index %d is outside the vocabulary [0, %d)",
                            b->token[i], i, V);
        SEER_TRY(check_seq(c, b->seq[i]));
        if (b->pos[i] < 0)
            return seer_err(SEER_ERR_INVALID_ARG, "negative position %d at batch index %d", b->pos[i], i);
        if (b->mask && !b->mask[(size_t)i * T + i])
            return seer_err(SEER_ERR_INVALID_ARG, "mask: token %d must attend to itself", i);
    }
    return SEER_OK;
}

seer_status seer_context_accept_trees(seer_context *c, const seer_accept_tree *trees, int n, int stride,
                                      int32_t *n_acc, int32_t *path, int32_t *next, int32_t *n_u) {
    seer_backend *be = c->be;
    if (!be->ops->accept_trees)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot verify sampled token trees", be->ops->name);
    return be->ops->accept_trees(be, trees, n, c->model->info.n_vocab, stride, n_acc, path, next, n_u);
}

static seer_status decode(seer_context *c, const seer_batch *b, float *logits_out, int32_t *ids_out,
                          float **dev_out);

seer_status seer_decode(seer_context *c, const seer_batch *b, float *logits_out) {
    /* logits asked for with nowhere to put them is a caller's mistake, not a discard */
    for (int i = 0; !logits_out && b && b->logits && i < b->n_tokens; i++)
        if (b->logits[i])
            return seer_err(SEER_ERR_INVALID_ARG, "seer_decode: logits asked for token %d, "
                                                  "logits_out is NULL", i);
    return decode(c, b, logits_out, NULL, NULL);
}

seer_status seer_decode_argmax(seer_context *c, const seer_batch *b, int32_t *ids_out) {
    return decode(c, b, NULL, ids_out, NULL);
}

seer_status seer_decode_keep(seer_context *c, const seer_batch *b, float **logits) {
    *logits = NULL;
    return decode(c, b, NULL, NULL, logits);
}

seer_status seer_context_sample(seer_context *c, const seer_sample_row *rows, int n, int32_t *ids) {
    seer_backend *be = c->be;
    return be->ops->sample_rows(be, rows, n, c->model->info.n_vocab, ids);
}

seer_status seer_context_logprobs(seer_context *c, const seer_logprob_row *rows, int n, int k, float *lp,
                                  int32_t *top_id, float *top_lp) {
    seer_backend *be = c->be;
    if (!be->ops->logprob_rows)
        return seer_err(SEER_ERR_UNSUPPORTED, "this backend computes no log-probabilities");
    if (n <= 0)
        return SEER_OK;
    return be->ops->logprob_rows(be, rows, n, c->model->info.n_vocab, k, lp, top_id, top_lp);
}

seer_status seer_context_accept(seer_context *c, const seer_accept_chain *chains, int n,
                                int32_t *n_acc, int32_t *next) {
    seer_backend *be = c->be;
    return be->ops->accept_chains(be, chains, n, c->model->info.n_vocab, n_acc, next);
}

/* Sequence k's leading new tokens that are prompt tokens (seer_batch.prompt): the flagged
 * run, cut where a mask lets a token see other than the new tokens up to itself; without
 * flags, every new token of a run longer than SEER_INVARIANT_NEW_TOKENS with no mask. */
static int prompt_run(const seer_context *c, const seer_batch *b, int k) {
    const int off = c->seq_tok_off[k], n = c->seq_tok_off[k + 1] - off, T = b->n_tokens;
    if (!b->prompt)
        return n > SEER_INVARIANT_NEW_TOKENS && !b->mask ? n : 0;
    int m = 0;
    while (m < n && b->prompt[c->seq_toks[off + m]])
        m++;
    for (int x = 0; x < m && b->mask; x++) {
        const uint8_t *row = b->mask + (size_t)c->seq_toks[off + x] * T;
        for (int y = 0; y < n; y++)
            if (!row[c->seq_toks[off + y]] != (y > x)) {
                m = x;
                break;
            }
    }
    return m;
}

bool seer_context_prompt_cuts_free(const seer_context *c) { return c && c->be->ops->prompt_cuts_free; }

static seer_status decode(seer_context *c, const seer_batch *b, float *logits_out, int32_t *ids_out,
                          float **dev_out) {
    SEER_TRY(validate_batch(c, b));
    const int T = b->n_tokens;
    seer_kv *kv = c->kv;

    /* Group tokens by sequence, in order of first appearance. */
    int n_seq = 0;
    for (int i = 0; i < T; i++) {
        int k = 0;
        while (k < n_seq && c->seq_ids[k] != b->seq[i])
            k++;
        if (k == n_seq) {
            c->seq_ids[n_seq] = b->seq[i];
            c->seq_ntok[n_seq++] = 0;
        }
        c->tok_seq[i] = k;
        c->tok_slot[i] = kv->seqs[b->seq[i]].len + c->seq_ntok[k]++;
    }
    int n_copies = 0;
    SEER_TRY(seer_kv_prepare_append(kv, n_seq, c->seq_ids, c->seq_ntok, c->copies, &n_copies));

    seer_backend *be = c->be;
    seer_status s = be->ops->kv_copy_pages(be, c->kv_data, &c->geom, c->copies, n_copies);

    const int mp = kv->max_pages_per_seq;
    c->seq_tok_off[0] = 0;
    for (int k = 0; k < n_seq; k++) {
        const seer_kv_seq *sq = &kv->seqs[c->seq_ids[k]];
        c->seq_len0[k] = sq->len;
        c->seq_tok_off[k + 1] = c->seq_tok_off[k] + c->seq_ntok[k];
        memcpy(c->seq_pages + (size_t)k * mp, sq->pages, sq->n_pages * sizeof(int32_t));
        const seer_seq_view *v = &c->views[c->seq_ids[k]];
        c->seq_view[k] = v->set ? &v->av : NULL;
    }
    int n_out = 0;
    for (int k = 0; k < n_seq; k++)
        c->seq_ntok[k] = 0; /* reused as a fill counter */
    for (int i = 0; i < T; i++) {
        int k = c->tok_seq[i];
        c->seq_toks[c->seq_tok_off[k] + c->seq_ntok[k]++] = i;
        const seer_kv_seq *sq = &kv->seqs[b->seq[i]];
        c->tok_page[i] = sq->pages[c->tok_slot[i] / kv->page_size];
        c->tok_row[i] = c->tok_slot[i] % kv->page_size;
        if (b->logits && b->logits[i])
            c->out_rows[n_out++] = i;
    }
    const seer_model_info *in = &c->model->info;
    seer_attn_batch ab = {
        .T = T, .n_heads = in->n_heads, .n_kv_heads = in->n_kv_heads, .head_dim = in->head_dim,
        .scale = c->model->attn_scale, .softcap = c->model->attn_softcap,
        .page_size = kv->page_size, .n_seq = n_seq,
        .max_pages = mp, .seq_pages = c->seq_pages, .seq_len0 = c->seq_len0,
        .seq_tok_off = c->seq_tok_off, .seq_toks = c->seq_toks, .seq_view = c->seq_view,
        .tok_seq = c->tok_seq, .tok_slot = c->tok_slot, .mask = b->mask, .kv_quant = b->kv_quant,
        .seq_prompt = c->seq_prompt, .tok_pos = b->pos,
    };
    for (int k = 0; k < n_seq; k++)
        c->seq_prompt[k] = prompt_run(c, b, k);
    c->cap_rows = b->capture;
    c->draft_call = b->draft_weights;
    c->cap_out = b->queries;
    if (s == SEER_OK)
        s = seer_sparse_ffn_begin(c, b->sparse_ffn, b->draft_weights);
    if (s == SEER_OK)
        s = seer_decoder_forward(c, b->token, b->pos, &ab, c->out_rows, n_out);
    c->cap_rows = NULL;
    c->draft_call = false;
    c->cap_out = NULL;
    c->ffn_layers = NULL;
    c->ffn_stats = NULL;
    if (s == SEER_OK && n_out && logits_out)
        s = be->ops->download(be, logits_out, c->s.logits, (size_t)n_out * in->n_vocab * sizeof(float));
    if (s == SEER_OK && n_out && ids_out)
        s = be->ops->argmax_rows(be, ids_out, c->s.logits, n_out, in->n_vocab);
    if (s == SEER_OK && dev_out)
        *dev_out = c->s.logits;
    for (int k = 0; k < n_seq; k++) {
        /* Pages gained for a failed call go back; lengths move only on success. */
        if (s == SEER_OK)
            seer_kv_commit_append(kv, c->seq_ids[k], c->seq_tok_off[k + 1] - c->seq_tok_off[k]);
        else
            seer_kv_trim(kv, c->seq_ids[k]);
    }
    return s;
}
