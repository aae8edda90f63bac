/*
 * merge_queue.h: the priority queue of candidate merges that both subword encoders use
 * (SentencePiece: highest score first; byte-level BPE: lowest merge rank first, as key
 * -rank). Ties go to the leftmost pair. An entry records the pair's byte length when it was
 * queued, so the caller can recognise and skip entries made stale by later merges.
 * seer_merge_run is the merge loop over a linked list of symbols that both run; the caller
 * says which adjacent pairs may merge and with what key.
 */
#ifndef SEER_MERGE_QUEUE_H
#define SEER_MERGE_QUEUE_H

#include "util/error.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    double key;          /* higher merges first */
    int32_t left, right; /* symbol indices */
    uint32_t len;        /* left.len + right.len when queued */
} seer_merge;

typedef struct {
    seer_merge *a;
    size_t n, cap;
} seer_merge_queue;

static inline bool seer_merge_before(const seer_merge *x, const seer_merge *y) {
    return x->key > y->key || (x->key == y->key && x->left < y->left);
}

static inline seer_status seer_merge_push(seer_merge_queue *q, seer_merge m) {
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        seer_merge *p = realloc(q->a, cap * sizeof *p);
        if (!p)
            return seer_err(SEER_ERR_OOM, "out of memory while encoding");
        q->a = p;
        q->cap = cap;
    }
    size_t i = q->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!seer_merge_before(&m, &q->a[parent]))
            break;
        q->a[i] = q->a[parent];
        i = parent;
    }
    q->a[i] = m;
    return SEER_OK;
}

/* Removes and returns the first entry (q->n must be > 0). */
static inline seer_merge seer_merge_pop(seer_merge_queue *q) {
    seer_merge top = q->a[0];
    seer_merge last = q->a[--q->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && seer_merge_before(&q->a[c + 1], &q->a[c]))
            c++;
        if (!seer_merge_before(&q->a[c], &last))
            break;
        q->a[i] = q->a[c];
        i = c;
    }
    if (q->n > 0)
        q->a[i] = last;
    return top;
}

/* A stretch of the text being encoded; len 0 once merged into its left neighbour. */
typedef struct {
    int32_t prev, next; /* -1 at the ends */
    uint32_t off, len;  /* bytes of the caller's buffer */
} seer_merge_sym;

/* Queues the pair (left, right) if it may merge (either may be -1: nothing to do). */
typedef seer_status (*seer_merge_pair_fn)(void *ctx, int32_t left, int32_t right);

/* Merges sym[0 .. n) (linked in order) by the queue q, best pair first, until no queued pair
 * can merge; try_pair queues candidates. The merged symbols stay linked from sym[0]. */
static inline seer_status seer_merge_run(seer_merge_queue *q, seer_merge_sym *sym, int32_t n,
                                         seer_merge_pair_fn try_pair, void *ctx) {
    q->n = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        SEER_TRY(try_pair(ctx, i, i + 1));
    while (q->n > 0) {
        seer_merge b = seer_merge_pop(q);
        seer_merge_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.len)
            continue; /* one side was merged elsewhere since this pair was queued */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        SEER_TRY(try_pair(ctx, l->prev, b.left));
        SEER_TRY(try_pair(ctx, b.left, l->next));
    }
    return SEER_OK;
}

#endif
