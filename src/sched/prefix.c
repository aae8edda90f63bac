/*
 * prefix.c: the scheduler's prefix cache. After a request's prompt is in the KV cache, its
 * first pages are kept in a sequence of their own (seer_seq_fork: the pages are shared and
 * reference-counted, nothing is copied); a later request whose prompt starts with the same
 * tokens forks that sequence instead of computing them again (a shared system prompt, a
 * long document asked about twice). Entries are evicted least recently used first, when a
 * slot is needed or the pool runs short.
 *
 * With a host tier (kv/kv_host.h) an entry evicted for room is spilled there instead: its
 * pages are copied to the host and freed on the device, and a later hit copies them back
 * (SGLang's HiCache). Entries on the device are bounded by the sequences reserved for the
 * cache, spilled ones by the tier (its own least-recently-used eviction) and by
 * SPILLED_PER_SLOT entries per sequence.
 *
 * Only prompt tokens, computed by prefill, are kept, and a match is cut to a multiple of the
 * unit (the prefill chunk and the page size): the request then goes on with the very chunks
 * it would have computed alone, so what it generates does not depend on the cache.
 */
#include "sched/sched.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

enum { SPILLED_PER_SLOT = 8 };

seer_status seer_prefix_init(seer_prefix_cache *pc, int slots, int unit, seer_kv_host *host) {
    memset(pc, 0, sizeof *pc);
    pc->unit = unit;
    pc->cap = slots;
    pc->host = host;
    pc->cap_all = host ? slots * (1 + SPILLED_PER_SLOT) : slots;
    if (slots > 0 && !(pc->e = calloc(pc->cap_all, sizeof *pc->e)))
        return seer_err(SEER_ERR_OOM, "out of memory for the prefix cache");
    return SEER_OK;
}

static void drop(seer_prefix_cache *pc, seer_context *c, int i) {
    if (pc->e[i].seq >= 0)
        seer_seq_free(c, pc->e[i].seq);
    else
        seer_kv_host_drop(pc->host, pc->e[i].host);
    free(pc->e[i].tokens);
    pc->e[i] = pc->e[--pc->n];
}

static int on_device(const seer_prefix_cache *pc) {
    int k = 0;
    for (int i = 0; i < pc->n; i++)
        k += pc->e[i].seq >= 0;
    return k;
}

/* The least recently used entry on the device (spilled: false) or spilled; -1: none. */
static int lru_of(const seer_prefix_cache *pc, bool spilled) {
    int lru = -1;
    for (int i = 0; i < pc->n; i++)
        if ((pc->e[i].seq < 0) == spilled && (lru < 0 || pc->e[i].last_used < pc->e[lru].last_used))
            lru = i;
    return lru;
}

void seer_prefix_free(seer_prefix_cache *pc, seer_context *c) {
    while (pc->n)
        drop(pc, c, pc->n - 1);
    free(pc->e);
    pc->e = NULL;
    pc->cap = 0;
}

static int common(const int32_t *a, int na, const int32_t *b, int nb) {
    int k = 0;
    while (k < na && k < nb && a[k] == b[k])
        k++;
    return k;
}

int seer_prefix_lookup(seer_prefix_cache *pc, const int32_t *t, int n, int limit, int *m, uint64_t now) {
    for (int i = pc->n - 1; i >= 0; i--) /* spilled entries the tier has evicted since */
        if (pc->e[i].seq < 0 && !seer_kv_host_valid(pc->host, pc->e[i].host))
            drop(pc, NULL, i);
    int best = -1, bm = 0;
    for (int i = 0; i < pc->n; i++) {
        int k = common(pc->e[i].tokens, pc->e[i].n, t, n);
        k = k < limit ? k : limit;
        k = k / pc->unit * pc->unit;
        if (k > bm)
            best = i, bm = k;
    }
    if (best >= 0)
        pc->e[best].last_used = now;
    *m = bm;
    return best;
}

bool seer_prefix_evict_lru(seer_prefix_cache *pc, seer_context *c) {
    const int lru = lru_of(pc, false);
    if (lru < 0)
        return false;
    seer_prefix_entry *e = &pc->e[lru];
    seer_kv_host_ref ref;
    if (!pc->host || seer_kv_host_save(pc->host, e->seq, e->n, e->last_used, &ref) != SEER_OK) {
        drop(pc, c, lru);
        return true;
    }
    seer_seq_free(c, e->seq);
    e->seq = -1;
    e->host = ref;
    return true;
}

seer_status seer_prefix_insert(seer_prefix_cache *pc, seer_context *c, seer_seq_id seq, const int32_t *t,
                               int n, uint64_t now) {
    n = n / pc->unit * pc->unit;
    if (pc->cap == 0 || n < pc->unit)
        return SEER_OK;
    for (int i = pc->n - 1; i >= 0; i--) {
        const int k = common(pc->e[i].tokens, pc->e[i].n, t, n);
        /* already there (as it is, or inside a longer entry); spilled as it is: the
         * device's copy replaces it */
        if (k == n && (pc->e[i].seq >= 0 || pc->e[i].n > n)) {
            pc->e[i].last_used = now;
            return SEER_OK;
        }
        if (k == pc->e[i].n) /* a shorter entry of the same text: the new one replaces it */
            drop(pc, c, i);
    }
    if (on_device(pc) == pc->cap)
        seer_prefix_evict_lru(pc, c);
    if (pc->n == pc->cap_all)
        drop(pc, c, lru_of(pc, true));
    seer_prefix_entry e = {.n = n, .last_used = now, .host = SEER_KV_HOST_NONE};
    e.tokens = seer_malloc_array(n, sizeof(int32_t));
    if (!e.tokens)
        return seer_err(SEER_ERR_OOM, "out of memory for the prefix cache");
    seer_status st = seer_seq_fork(c, seq, &e.seq);
    if (st == SEER_OK && (st = seer_seq_rewind(c, e.seq, n)) != SEER_OK)
        seer_seq_free(c, e.seq);
    if (st != SEER_OK) {
        free(e.tokens);
        return st;
    }
    memcpy(e.tokens, t, sizeof(int32_t) * n);
    pc->e[pc->n++] = e;
    return SEER_OK;
}

int seer_prefix_pages(const seer_prefix_cache *pc, const seer_context *c) {
    if (!pc->n)
        return 0;
    const seer_kv *kv = c->kv;
    uint8_t *seen = calloc(kv->n_pages, 1);
    int cnt = 0;
    if (!seen)
        return -1;
    for (int i = 0; i < pc->n; i++) {
        if (pc->e[i].seq < 0)
            continue;
        const seer_kv_seq *q = &kv->seqs[pc->e[i].seq];
        for (int p = 0; p < q->n_pages; p++)
            if (!seen[q->pages[p]])
                seen[q->pages[p]] = 1, cnt++;
    }
    free(seen);
    return cnt;
}
