/*
 * kv.h: the paged KV cache's bookkeeping: a pool of fixed-size pages, per-sequence page
 * tables and lengths, reference counts for pages shared after a fork, copy-on-write.
 *
 * This file knows nothing of where the K/V numbers live: the backend owns the storage
 * ([n_pages][n_layers][2][page_size][Hkv*Dh]) and performs the page copies this module
 * asks for. Slot s of a sequence lives in page pages[s / page_size] at row s % page_size.
 *
 * Storage grows by pages: pages never handed out are handed out in id order (a page freed
 * goes back on top of the free stack, above the never-used ones), so the pages in use always
 * lie below a high-water mark, and the backend only needs storage for [0, mark). Before a
 * prepare hands out a page at or past n_committed it asks the grow hook for more; a grow that
 * fails fails the prepare with nothing changed.
 */
#ifndef SEER_KV_H
#define SEER_KV_H

#include "seer.h"

#include <stdint.h>

typedef struct {
    int32_t src, dst; /* physical page ids: copy all rows of src into dst */
} seer_kv_copy;

typedef struct {
    bool alive;
    int len;        /* tokens in the cache */
    int n_pages;    /* entries of pages[] in use (>= ceil(len / page_size)) */
    int32_t *pages; /* [max_pages_per_seq] physical page ids */
} seer_kv_seq;

/* Makes storage for pages [0, n_pages) exist; sets *n_committed to the pages with storage
 * now (>= n_pages, chunk-rounded, at most the pool). On failure (SEER_ERR_OOM) nothing of
 * the storage that exists changes. */
typedef seer_status (*seer_kv_grow_fn)(void *user, int n_pages, int *n_committed);

typedef struct {
    int n_pages;          /* pages in the pool (its capacity) */
    int n_committed;      /* pages [0, n_committed) have storage (all of them without a hook) */
    int n_fresh;          /* free_list[0, n_fresh): the never-used pages, highest id first */
    int page_size;        /* tokens per page */
    int n_seq_max;
    int max_len;          /* most tokens per sequence */
    int max_pages_per_seq;
    int n_free;
    int32_t *free_list;   /* [n_pages] stack of free page ids, n_free valid */
    int32_t *refcount;    /* [n_pages] sequences referencing each page */
    seer_kv_seq *seqs;    /* [n_seq_max] */
} seer_kv;

seer_status seer_kv_init(int n_pages, int page_size, int n_seq_max, int max_len, seer_kv **out);
void seer_kv_free(seer_kv *kv);
/* Installs the hook that grows storage; n_committed: the pages with storage already. */
void seer_kv_set_grow(seer_kv *kv, seer_kv_grow_fn fn, void *user, int n_committed);
/* Pages ever handed out: every page in use is below this mark. */
static inline int seer_kv_high_water(const seer_kv *kv) { return kv->n_pages - kv->n_fresh; }

/* A new empty sequence (lowest free id). SEER_ERR_INVALID_ARG if all n_seq_max are alive. */
seer_status seer_kv_seq_new(seer_kv *kv, int *out);
/* A new sequence sharing all of src's pages (refcounts raised); a shared page is copied
 * only when one of the two writes into it (see seer_kv_prepare_append). */
seer_status seer_kv_seq_fork(seer_kv *kv, int src, int *out);
/* Shortens seq to new_len (0 <= new_len <= len) and releases pages past it. */
seer_status seer_kv_rewind(seer_kv *kv, int seq, int new_len);
/* Releases all pages of seq and retires the id. No-op for a dead id. */
void seer_kv_seq_free(seer_kv *kv, int seq);
bool seer_kv_seq_alive(const seer_kv *kv, int seq);

/* Makes room for appending n_new[i] tokens to seqs[i] (i < n; a sequence appears once):
 * allocates pages to cover the new slots and, for every page the new slots fall in whose
 * refcount is > 1, gives the sequence a private copy (copy-on-write), recording the copies
 * the backend must perform, in order, in copies (capacity: n entries suffice, since only a
 * sequence's partially filled last page can be shared and written). Lengths do not change.
 * All or nothing: on SEER_ERR_KV_FULL, SEER_ERR_CONTEXT or a failed grow (SEER_ERR_OOM)
 * nothing changes. */
seer_status seer_kv_prepare_append(seer_kv *kv, int n, const int *seqs, const int *n_new,
                                   seer_kv_copy *copies, int *n_copies);
/* After a successful forward: len += n_new. */
void seer_kv_commit_append(seer_kv *kv, int seq, int n_new);
/* Releases pages past ceil(len / page_size) (after a failed forward). */
void seer_kv_trim(seer_kv *kv, int seq);

/* Physical page and row of a slot (slot < n_pages * page_size of the sequence). */
static inline int32_t seer_kv_page_of(const seer_kv *kv, int seq, int slot) {
    return kv->seqs[seq].pages[slot / kv->page_size];
}

#endif
