/*
 * kv_host.h: the host tier of a context's KV cache. A bounded pool of page slots in host
 * memory (the backend's host_alloc: page-locked on CUDA) holds copies of sequences' first
 * pages, as entries: a preempted request's cache, a prefix cache entry spilled from the
 * device. An entry's pages come back into a new sequence of the context by a copy instead of
 * a recomputation (vLLM's KV offloading, SGLang's HiCache). Pages are opaque bytes of the
 * backend's kv_page_bytes, so every storage format (a quantised copy, a quantised pool) is
 * carried as it is: a page restored holds the very bits it held.
 *
 * Entries are evicted least recently used first when a save needs slots. They are named by
 * a reference that an eviction invalidates (its generation moves), so an owner learns that
 * its entry is gone by seer_kv_host_valid and then recomputes.
 *
 * Copies to the host complete before the save returns (the pages are about to be handed to
 * other sequences); copies from the host run on the backend's copy stream while other
 * sequences compute, and the new sequence is used only once seer_kv_host_ready says so.
 *
 * Not for: when to save or restore (the scheduler, src/sched/) or the copies themselves
 * (backend.h kv_host_copy).
 */
#ifndef SEER_KV_HOST_H
#define SEER_KV_HOST_H

#include "model/model.h"

#include <stdint.h>

typedef struct {
    int32_t i;    /* entry index, -1: none */
    uint32_t gen; /* the entry's generation when the reference was made */
} seer_kv_host_ref;

#define SEER_KV_HOST_NONE ((seer_kv_host_ref){-1, 0})

typedef struct {
    uint32_t gen;
    bool used;
    int n_pages;
    int32_t *slots;     /* [n_pages] host slots of the sequence's pages 0..n_pages) */
    uint64_t last_used; /* the owner's clock */
    uint64_t ticket;    /* the latest copy into or out of the slots */
} seer_kv_host_entry;

typedef struct {
    seer_context *c;
    uint8_t *buf;        /* [n_slots][page_bytes] host memory */
    size_t page_bytes;
    int n_slots, n_free;
    int32_t *free_slots; /* [n_slots] stack */
    seer_kv_host_entry *e;
    int n_e, cap_e;
    int64_t bytes_to_host, bytes_from_host, evictions;
} seer_kv_host;

/* A tier of the most pages bytes holds on c's backend (SEER_ERR_INVALID_ARG when bytes hold
 * no page, SEER_ERR_UNSUPPORTED when the backend has no host copies, SEER_ERR_OOM when the
 * host memory cannot be had). */
seer_status seer_kv_host_init(seer_context *c, uint64_t bytes, seer_kv_host **out);
/* Waits for copies in flight and frees the memory; entries are gone. */
void seer_kv_host_free(seer_kv_host *h);

/* Copies the pages holding the first len tokens of seq into a new entry used at now, after
 * evicting least recently used entries for room; complete when it returns. SEER_ERR_KV_FULL
 * (nothing changed) when the whole tier holds fewer pages. */
seer_status seer_kv_host_save(seer_kv_host *h, seer_seq_id seq, int len, uint64_t now, seer_kv_host_ref *out);
/* Whether ref names a live entry, and its pages. */
bool seer_kv_host_valid(const seer_kv_host *h, seer_kv_host_ref ref);
int seer_kv_host_pages(const seer_kv_host *h, seer_kv_host_ref ref);
/* A new sequence of c holding the first len tokens of ref's entry (len within its pages),
 * their pages copied from the host on the copy stream (*ticket); the entry is marked used at
 * now. The sequence may be used once seer_kv_host_ready says so, and freed only after
 * seer_kv_host_wait. On failure nothing changes. */
seer_status seer_kv_host_load(seer_kv_host *h, seer_kv_host_ref ref, int len, uint64_t now, seer_seq_id *seq,
                              uint64_t *ticket);
/* *ready: the copies of ticket are complete. */
seer_status seer_kv_host_ready(seer_kv_host *h, uint64_t ticket, bool *ready);
seer_status seer_kv_host_wait(seer_kv_host *h, uint64_t ticket);
/* Frees ref's entry (after its copies); no-op for a stale reference. */
void seer_kv_host_drop(seer_kv_host *h, seer_kv_host_ref ref);
/* Slots in use. */
static inline int seer_kv_host_used(const seer_kv_host *h) { return h ? h->n_slots - h->n_free : 0; }

#endif
