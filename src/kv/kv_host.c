/*
 * kv_host.c: the host tier of a context's KV cache (kv_host.h): its slots, its entries and
 * their least-recently-used eviction, and the page copies through the backend.
 */
#include "kv/kv_host.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

static const seer_backend_ops *ops_of(const seer_kv_host *h) { return h->c->be->ops; }

seer_status seer_kv_host_init(seer_context *c, uint64_t bytes, seer_kv_host **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    SEER_CHECK_ARG(c);
    seer_backend *be = c->be;
    if (!be->ops->kv_host_copy || !be->ops->kv_page_bytes)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend has no host tier for the KV cache", be->ops->name);
    const size_t pb = be->ops->kv_page_bytes(be, &c->geom);
    if (pb == 0 || bytes < pb)
        return seer_err(SEER_ERR_INVALID_ARG, "a host tier of %llu bytes holds no KV page of %zu bytes",
                        (unsigned long long)bytes, pb);
    const uint64_t n = bytes / pb;
    if (n > INT32_MAX / 2)
        return seer_err(SEER_ERR_INVALID_ARG, "a host tier of %llu pages is too many", (unsigned long long)n);
    seer_kv_host *h = calloc(1, sizeof *h);
    if (!h)
        return seer_err(SEER_ERR_OOM, "out of memory for the KV host tier");
    h->c = c;
    h->page_bytes = pb;
    h->n_slots = h->n_free = (int)n;
    h->free_slots = seer_malloc_array((size_t)n, sizeof(int32_t));
    seer_status st = h->free_slots ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory for the KV host tier");
    if (st == SEER_OK && be->ops->host_alloc)
        st = be->ops->host_alloc(be, (size_t)n * pb, (void **)&h->buf);
    else if (st == SEER_OK && !(h->buf = malloc((size_t)n * pb)))
        st = seer_err(SEER_ERR_OOM, "cannot allocate %.1f GiB of host memory for the KV host tier",
                      (double)n * pb / 1073741824.0);
    if (st != SEER_OK) {
        free(h->free_slots);
        free(h);
        return st;
    }
    for (int i = 0; i < h->n_slots; i++) /* popped from the top: slot 0 first */
        h->free_slots[i] = h->n_slots - 1 - i;
    *out = h;
    return SEER_OK;
}

/* Waits for the entry's copies, then gives its slots back. */
static void release(seer_kv_host *h, int i) {
    seer_kv_host_entry *e = &h->e[i];
    if (ops_of(h)->kv_host_wait(h->c->be, e->ticket) != SEER_OK) {
        /* the device failed: its copies can no longer be waited for, nor the slots reused */
        e->n_pages = 0;
    }
    for (int p = e->n_pages - 1; p >= 0; p--)
        h->free_slots[h->n_free++] = e->slots[p];
    free(e->slots);
    e->slots = NULL;
    e->used = false;
    e->gen++;
}

void seer_kv_host_free(seer_kv_host *h) {
    if (!h)
        return;
    for (int i = 0; i < h->n_e; i++)
        if (h->e[i].used)
            release(h, i);
    seer_backend *be = h->c->be;
    if (be->ops->host_alloc && be->ops->host_free)
        be->ops->host_free(be, h->buf);
    else
        free(h->buf);
    free(h->free_slots);
    free(h->e);
    free(h);
}

bool seer_kv_host_valid(const seer_kv_host *h, seer_kv_host_ref ref) {
    return h && ref.i >= 0 && ref.i < h->n_e && h->e[ref.i].used && h->e[ref.i].gen == ref.gen;
}

int seer_kv_host_pages(const seer_kv_host *h, seer_kv_host_ref ref) {
    return seer_kv_host_valid(h, ref) ? h->e[ref.i].n_pages : 0;
}

void seer_kv_host_drop(seer_kv_host *h, seer_kv_host_ref ref) {
    if (seer_kv_host_valid(h, ref))
        release(h, ref.i);
}

/* An unused entry's index (-1: out of memory). */
static int entry_new(seer_kv_host *h) {
    for (int i = 0; i < h->n_e; i++)
        if (!h->e[i].used)
            return i;
    if (h->n_e == h->cap_e) {
        const int cap = h->cap_e ? 2 * h->cap_e : 16;
        seer_kv_host_entry *e = realloc(h->e, sizeof *e * cap);
        if (!e)
            return -1;
        h->e = e;
        h->cap_e = cap;
    }
    memset(&h->e[h->n_e], 0, sizeof *h->e);
    return h->n_e++;
}

seer_status seer_kv_host_save(seer_kv_host *h, seer_seq_id seq, int len, uint64_t now, seer_kv_host_ref *out) {
    SEER_CHECK_ARG(h);
    SEER_CHECK_ARG(out);
    *out = SEER_KV_HOST_NONE;
    seer_context *c = h->c;
    if (seer_seq_len(c, seq) < len || len < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "kv host: %d tokens of sequence %d (length %d)", len, (int)seq,
                        seer_seq_len(c, seq));
    const int np = (len + c->kv->page_size - 1) / c->kv->page_size;
    if (np > h->n_slots)
        return seer_err(SEER_ERR_KV_FULL, "kv host: %d pages do not fit the tier of %d", np, h->n_slots);
    int32_t *slots = seer_malloc_array(np, sizeof(int32_t));
    const int i = slots ? entry_new(h) : -1;
    if (i < 0) {
        free(slots);
        return seer_err(SEER_ERR_OOM, "out of memory for the KV host tier");
    }
    while (h->n_free < np) { /* the least recently used entries make room */
        int lru = -1;
        for (int j = 0; j < h->n_e; j++)
            if (h->e[j].used && (lru < 0 || h->e[j].last_used < h->e[lru].last_used))
                lru = j;
        release(h, lru);
        h->evictions++;
    }
    for (int p = 0; p < np; p++)
        slots[p] = h->free_slots[--h->n_free];
    seer_backend *be = c->be;
    uint64_t ticket = 0;
    seer_status st = be->ops->kv_host_copy(be, c->kv_data, &c->geom, h->buf, h->page_bytes, c->kv->seqs[seq].pages,
                                           slots, np, true, &ticket);
    if (st == SEER_OK) /* the pages go back to the pool once the caller frees the sequence */
        st = be->ops->kv_host_wait(be, ticket);
    if (st != SEER_OK) {
        for (int p = np - 1; p >= 0; p--)
            h->free_slots[h->n_free++] = slots[p];
        free(slots);
        return st;
    }
    seer_kv_host_entry *e = &h->e[i];
    e->used = true;
    e->n_pages = np;
    e->slots = slots;
    e->last_used = now;
    e->ticket = ticket;
    h->bytes_to_host += (int64_t)np * (int64_t)h->page_bytes;
    *out = (seer_kv_host_ref){i, e->gen};
    return SEER_OK;
}

seer_status seer_kv_host_load(seer_kv_host *h, seer_kv_host_ref ref, int len, uint64_t now, seer_seq_id *seq,
                              uint64_t *ticket) {
    SEER_CHECK_ARG(h);
    SEER_CHECK_ARG(seq);
    SEER_CHECK_ARG(ticket);
    if (!seer_kv_host_valid(h, ref))
        return seer_err(SEER_ERR_INVALID_ARG, "kv host: no such entry");
    seer_kv_host_entry *e = &h->e[ref.i];
    seer_context *c = h->c;
    const int ps = c->kv->page_size, np = (len + ps - 1) / ps;
    if (len < 1 || np > e->n_pages)
        return seer_err(SEER_ERR_INVALID_ARG, "kv host: %d tokens of an entry of %d pages", len, e->n_pages);
    int id, n_new = len, n_copies = 0;
    seer_kv_copy copy;
    SEER_TRY(seer_kv_seq_new(c->kv, &id));
    seer_status st = seer_kv_prepare_append(c->kv, 1, &id, &n_new, &copy, &n_copies);
    seer_backend *be = c->be;
    uint64_t t = 0;
    if (st == SEER_OK)
        st = be->ops->kv_host_copy(be, c->kv_data, &c->geom, h->buf, h->page_bytes, c->kv->seqs[id].pages, e->slots,
                                   np, false, &t);
    if (st != SEER_OK) {
        seer_kv_seq_free(c->kv, id);
        return st;
    }
    seer_kv_commit_append(c->kv, id, len);
    e->last_used = now;
    e->ticket = t;
    h->bytes_from_host += (int64_t)np * (int64_t)h->page_bytes;
    *seq = id;
    *ticket = t;
    return SEER_OK;
}

seer_status seer_kv_host_ready(seer_kv_host *h, uint64_t ticket, bool *ready) {
    return ops_of(h)->kv_host_done(h->c->be, ticket, ready);
}

seer_status seer_kv_host_wait(seer_kv_host *h, uint64_t ticket) {
    return ops_of(h)->kv_host_wait(h->c->be, ticket);
}
