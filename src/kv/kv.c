/*
 * kv.c: bookkeeping of the paged KV cache (see kv.h): page pool, page tables, reference
 * counts and copy-on-write planning. It never touches K/V data; the backend performs the
 * copies recorded by seer_kv_prepare_append.
 *
 * Fork shares only the pages that hold tokens; pages a sequence keeps past its length
 * (room made by a prepare whose forward was not committed) stay private to it. Of the pages
 * an append writes into, only the one holding slot len can carry earlier tokens, so a
 * prepare records at most one copy per sequence; any other shared page it writes into is
 * replaced by a fresh one without a copy.
 */
#include "kv/kv.h"

#include "util/error.h"

/* The asserts below are invariants of this file's bookkeeping (a commit always follows its
 * own successful prepare; pages are popped only after count_needed found them): no input
 * reaches them. Release builds compile them out (NDEBUG); the sanitizer build checks them. */
#include <assert.h>
#include <stdlib.h>

/* The public struct plus scratch memory for prepare_append, so that a decode step never
 * allocates. kv must be the first member: seer_kv pointers are converted back. */
typedef struct {
    seer_kv kv;
    int32_t *seq_mark;  /* [n_seq_max] 1 while a sequence is listed in the current prepare */
    int32_t *saved_ref; /* [n_pages] refcount before the dry run, -1 when untouched */
    int32_t *touched;   /* [n_pages] pages whose refcount the dry run lowered */
    int32_t *table_mem; /* [n_seq_max * max_pages_per_seq] backing of every seqs[i].pages */
    seer_kv_grow_fn grow;
    void *grow_user;
} kv_impl;

static kv_impl *impl_of(seer_kv *kv) { return (kv_impl *)kv; }

static int pages_for(const seer_kv *kv, int len) { return (len + kv->page_size - 1) / kv->page_size; }

static bool seq_ok(const seer_kv *kv, int seq) {
    return kv && seq >= 0 && seq < kv->n_seq_max && kv->seqs[seq].alive;
}

static int32_t page_pop(seer_kv *kv) {
    assert(kv->n_free > 0);
    int32_t p = kv->free_list[--kv->n_free];
    if (kv->n_fresh > kv->n_free)
        kv->n_fresh = kv->n_free; /* p was the lowest never-used page */
    assert(p < kv->n_committed);
    assert(kv->refcount[p] == 0);
    kv->refcount[p] = 1;
    return p;
}

static void page_release(seer_kv *kv, int32_t p) {
    assert(p >= 0 && p < kv->n_pages && kv->refcount[p] > 0);
    if (--kv->refcount[p] == 0) {
        assert(kv->n_free < kv->n_pages);
        kv->free_list[kv->n_free++] = p;
    }
}

/* Drops the pages of seq from index keep on. Released last-to-first, so the stack top is
 * the lowest index and a sequence that grows again gets its old pages back in order. */
static void release_from(seer_kv *kv, seer_kv_seq *s, int keep) {
    for (int k = s->n_pages - 1; k >= keep; k--)
        page_release(kv, s->pages[k]);
    if (s->n_pages > keep)
        s->n_pages = keep;
}

static int lowest_dead(const seer_kv *kv) {
    for (int i = 0; i < kv->n_seq_max; i++)
        if (!kv->seqs[i].alive)
            return i;
    return -1;
}

seer_status seer_kv_init(int n_pages, int page_size, int n_seq_max, int max_len, seer_kv **out) {
    if (!out)
        return seer_err(SEER_ERR_INVALID_ARG, "kv: NULL output pointer");
    *out = NULL;
    if (n_pages < 1 || page_size < 1 || n_seq_max < 1 || max_len < 1)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "kv: n_pages (%d), page_size (%d), n_seq_max (%d) and max_len (%d) "
                        "must all be positive",
                        n_pages, page_size, n_seq_max, max_len);
    int max_pages = (max_len - 1) / page_size + 1; /* ceil without overflow */

    kv_impl *im = calloc(1, sizeof *im);
    if (!im)
        return seer_err(SEER_ERR_OOM, "kv: out of memory");
    seer_kv *kv = &im->kv;
    kv->n_pages = n_pages;
    kv->page_size = page_size;
    kv->n_seq_max = n_seq_max;
    kv->max_len = max_len;
    kv->max_pages_per_seq = max_pages;
    kv->free_list = seer_malloc_array((size_t)n_pages, sizeof(int32_t));
    kv->refcount = seer_calloc_array((size_t)n_pages, sizeof(int32_t));
    kv->seqs = seer_calloc_array((size_t)n_seq_max, sizeof(seer_kv_seq));
    im->seq_mark = seer_calloc_array((size_t)n_seq_max, sizeof(int32_t));
    im->saved_ref = seer_malloc_array((size_t)n_pages, sizeof(int32_t));
    im->touched = seer_malloc_array((size_t)n_pages, sizeof(int32_t));
    size_t table_n = (size_t)max_pages * (size_t)n_seq_max; /* both < 2^31: no overflow */
    im->table_mem = seer_malloc_array(table_n, sizeof(int32_t));
    if (!kv->free_list || !kv->refcount || !kv->seqs || !im->seq_mark || !im->saved_ref ||
        !im->touched || !im->table_mem) {
        seer_kv_free(kv);
        return seer_err(SEER_ERR_OOM,
                        "kv: out of memory for %d pages and %d sequences of %d pages",
                        n_pages, n_seq_max, max_pages);
    }
    /* Reversed so that a fresh pool hands out pages 0, 1, 2, ... */
    for (int i = 0; i < n_pages; i++) {
        kv->free_list[i] = n_pages - 1 - i;
        im->saved_ref[i] = -1;
    }
    kv->n_free = n_pages;
    kv->n_fresh = n_pages;
    kv->n_committed = n_pages;
    for (int i = 0; i < n_seq_max; i++)
        kv->seqs[i].pages = im->table_mem + (size_t)i * (size_t)max_pages;
    *out = kv;
    return SEER_OK;
}

void seer_kv_free(seer_kv *kv) {
    if (!kv)
        return;
    kv_impl *im = impl_of(kv);
    free(kv->free_list);
    free(kv->refcount);
    free(kv->seqs);
    free(im->seq_mark);
    free(im->saved_ref);
    free(im->touched);
    free(im->table_mem);
    free(im);
}

void seer_kv_set_grow(seer_kv *kv, seer_kv_grow_fn fn, void *user, int n_committed) {
    kv_impl *im = impl_of(kv);
    im->grow = fn;
    im->grow_user = user;
    kv->n_committed = fn ? (n_committed < kv->n_pages ? n_committed : kv->n_pages) : kv->n_pages;
}

bool seer_kv_seq_alive(const seer_kv *kv, int seq) { return seq_ok(kv, seq); }

seer_status seer_kv_seq_new(seer_kv *kv, int *out) {
    if (!kv || !out)
        return seer_err(SEER_ERR_INVALID_ARG, "kv: NULL argument");
    int id = lowest_dead(kv);
    if (id < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "kv: all %d sequences are in use", kv->n_seq_max);
    seer_kv_seq *s = &kv->seqs[id];
    s->alive = true;
    s->len = 0;
    s->n_pages = 0;
    *out = id;
    return SEER_OK;
}

seer_status seer_kv_seq_fork(seer_kv *kv, int src, int *out) {
    if (!kv || !out)
        return seer_err(SEER_ERR_INVALID_ARG, "kv: NULL argument");
    if (!seq_ok(kv, src))
        return seer_err(SEER_ERR_INVALID_ARG, "kv: cannot fork sequence %d: not alive", src);
    int id = lowest_dead(kv);
    if (id < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "kv: all %d sequences are in use", kv->n_seq_max);
    const seer_kv_seq *a = &kv->seqs[src];
    seer_kv_seq *b = &kv->seqs[id];
    /* Only pages holding tokens are shared: pages kept past len stay private to src (the
     * invariant in the file header). */
    int n = pages_for(kv, a->len);
    for (int k = 0; k < n; k++) {
        b->pages[k] = a->pages[k];
        kv->refcount[a->pages[k]]++;
    }
    b->alive = true;
    b->len = a->len;
    b->n_pages = n;
    *out = id;
    return SEER_OK;
}

seer_status seer_kv_rewind(seer_kv *kv, int seq, int new_len) {
    if (!seq_ok(kv, seq))
        return seer_err(SEER_ERR_INVALID_ARG, "kv: cannot rewind sequence %d: not alive", seq);
    seer_kv_seq *s = &kv->seqs[seq];
    if (new_len < 0 || new_len > s->len)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "kv: cannot rewind sequence %d to %d tokens: it holds %d", seq,
                        new_len, s->len);
    release_from(kv, s, pages_for(kv, new_len));
    s->len = new_len;
    return SEER_OK;
}

void seer_kv_seq_free(seer_kv *kv, int seq) {
    if (!seq_ok(kv, seq))
        return;
    seer_kv_seq *s = &kv->seqs[seq];
    release_from(kv, s, 0);
    s->len = 0;
    s->alive = false;
}

void seer_kv_trim(seer_kv *kv, int seq) {
    if (!seq_ok(kv, seq))
        return;
    seer_kv_seq *s = &kv->seqs[seq];
    release_from(kv, s, pages_for(kv, s->len));
}

void seer_kv_commit_append(seer_kv *kv, int seq, int n_new) {
    /* Committing slots that no prepare covered is a bug of the caller inside the library,
     * never user input; in a release build it is refused rather than corrupting tables. */
    bool ok = seq_ok(kv, seq) && n_new >= 0 && n_new <= kv->max_len - kv->seqs[seq].len &&
              (int64_t)kv->seqs[seq].len + n_new <=
                  (int64_t)kv->seqs[seq].n_pages * kv->page_size;
    assert(ok);
    if (!ok)
        return;
    kv->seqs[seq].len += n_new;
}

/* Validates one entry of a prepare; marks the sequence to catch duplicates. */
static seer_status check_entry(seer_kv *kv, int seq, int n_new) {
    if (seq < 0 || seq >= kv->n_seq_max)
        return seer_err(SEER_ERR_INVALID_ARG, "kv: sequence id %d out of range [0, %d)", seq,
                        kv->n_seq_max);
    if (!kv->seqs[seq].alive)
        return seer_err(SEER_ERR_INVALID_ARG, "kv: sequence %d is not alive", seq);
    if (n_new < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "kv: negative token count %d for sequence %d",
                        n_new, seq);
    kv_impl *im = impl_of(kv);
    if (im->seq_mark[seq])
        return seer_err(SEER_ERR_INVALID_ARG, "kv: sequence %d listed twice in one append",
                        seq);
    im->seq_mark[seq] = 1;
    int len = kv->seqs[seq].len;
    if (n_new > kv->max_len - len)
        return seer_err(SEER_ERR_CONTEXT,
                        "sequence %d would hold %lld tokens, more than the context length %d",
                        seq, (long long)len + n_new, kv->max_len);
    return SEER_OK;
}

/* Pages seq needs to take n_new more tokens: fresh pages past its table, plus one per page
 * of the write range that is shared. The dry run lowers the refcount of each shared page it
 * counts (remembering the old value), so that when several sequences of one prepare share a
 * page, the last of them is seen writing in place, exactly as the real pass will do. */
static int count_needed(seer_kv *kv, int seq, int n_new, int *n_touched) {
    if (n_new == 0)
        return 0;
    kv_impl *im = impl_of(kv);
    const seer_kv_seq *s = &kv->seqs[seq];
    int first = s->len / kv->page_size;
    int last = (s->len + n_new - 1) / kv->page_size;
    int need = 0;
    for (int k = first; k <= last; k++) {
        if (k >= s->n_pages) {
            need += last - k + 1;
            break;
        }
        int32_t p = s->pages[k];
        if (kv->refcount[p] > 1) {
            if (im->saved_ref[p] < 0) {
                im->saved_ref[p] = kv->refcount[p];
                im->touched[(*n_touched)++] = p;
            }
            kv->refcount[p]--;
            need++;
        }
    }
    return need;
}

/* Gives seq private pages for its write range; appends copies for shared pages that hold
 * tokens. Only called once count_needed has shown the free stack suffices. */
static void make_room(seer_kv *kv, int seq, int n_new, seer_kv_copy *copies, int *n_copies) {
    if (n_new == 0)
        return;
    seer_kv_seq *s = &kv->seqs[seq];
    int first = s->len / kv->page_size;
    int last = (s->len + n_new - 1) / kv->page_size;
    for (int k = first; k <= last; k++) {
        if (k >= s->n_pages) {
            assert(k == s->n_pages && k < kv->max_pages_per_seq);
            s->pages[s->n_pages++] = page_pop(kv);
            continue;
        }
        int32_t old = s->pages[k];
        if (kv->refcount[old] <= 1)
            continue;
        int32_t p = page_pop(kv);
        /* A shared page past the tokens holds nothing worth copying. */
        if ((int64_t)k * kv->page_size < s->len)
            copies[(*n_copies)++] = (seer_kv_copy){old, p};
        kv->refcount[old]--;
        s->pages[k] = p;
    }
}

seer_status seer_kv_prepare_append(seer_kv *kv, int n, const int *seqs, const int *n_new,
                                   seer_kv_copy *copies, int *n_copies) {
    if (!kv || n < 0 || !n_copies || (n > 0 && (!seqs || !n_new || !copies)))
        return seer_err(SEER_ERR_INVALID_ARG, "kv: bad arguments to prepare_append");
    kv_impl *im = impl_of(kv);

    seer_status st = SEER_OK;
    int checked = 0;
    for (; checked < n && st == SEER_OK; checked++)
        st = check_entry(kv, seqs[checked], n_new[checked]);
    for (int i = 0; i < checked; i++)
        if (seqs[i] >= 0 && seqs[i] < kv->n_seq_max)
            im->seq_mark[seqs[i]] = 0;
    if (st != SEER_OK)
        return st;

    /* 64-bit: n sequences of up to max_pages_per_seq pages each may exceed INT_MAX. */
    int64_t need = 0;
    int n_touched = 0;
    for (int i = 0; i < n; i++)
        need += count_needed(kv, seqs[i], n_new[i], &n_touched);
    for (int i = 0; i < n_touched; i++) {
        int32_t p = im->touched[i];
        kv->refcount[p] = im->saved_ref[p];
        im->saved_ref[p] = -1;
    }
    if (need > kv->n_free)
        return seer_err(SEER_ERR_KV_FULL, "KV cache full: need %lld pages, %d free",
                        (long long)need, kv->n_free);
    /* Freed pages are reused first; the rest come from the never-used ones, in id order. */
    int64_t reused = kv->n_free - kv->n_fresh;
    int64_t mark = seer_kv_high_water(kv) + (need > reused ? need - reused : 0);
    if (mark > kv->n_committed) {
        int got = 0;
        assert(im->grow);
        if (!im->grow)
            return seer_err(SEER_ERR_INTERNAL, "kv: pages past %d have no storage", kv->n_committed);
        SEER_TRY(im->grow(im->grow_user, (int)mark, &got));
        if (got < mark)
            return seer_err(SEER_ERR_INTERNAL, "kv: storage grew to %d pages, %lld needed", got,
                            (long long)mark);
        kv->n_committed = got < kv->n_pages ? got : kv->n_pages;
    }

    int nc = 0;
    for (int i = 0; i < n; i++)
        make_room(kv, seqs[i], n_new[i], copies, &nc);
    assert(nc <= n);
    *n_copies = nc;
    return SEER_OK;
}
