/*
 * test_kv.c: the paged KV cache's bookkeeping (src/kv/kv.c): page tables across page
 * boundaries, rewind, fork with copy-on-write, freeing, all-or-nothing failures, and a
 * randomized check against a reference model that simulates the page contents. No K/V
 * numbers are involved; the backend's copies are simulated on integer tokens.
 */
#include "testutil.h"

#include "kv/kv.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static seer_kv *mk(int n_pages, int page_size, int n_seq_max, int max_len) {
    seer_kv *kv = NULL;
    ASSERT_OK(seer_kv_init(n_pages, page_size, n_seq_max, max_len, &kv));
    assert_non_null(kv);
    return kv;
}

static int new_seq(seer_kv *kv) {
    int id = -1;
    ASSERT_OK(seer_kv_seq_new(kv, &id));
    return id;
}

static int fork_seq(seer_kv *kv, int src) {
    int id = -1;
    ASSERT_OK(seer_kv_seq_fork(kv, src, &id));
    return id;
}

/* prepare + commit for one sequence; returns the number of copies (written to copies). */
static int append(seer_kv *kv, int seq, int n, seer_kv_copy *copies) {
    seer_kv_copy local[1];
    int nc = -1;
    ASSERT_OK(seer_kv_prepare_append(kv, 1, &seq, &n, copies ? copies : local, &nc));
    seer_kv_commit_append(kv, seq, n);
    return nc;
}

/* The table of seq must be exactly pages[0..n). */
static void expect_table(const seer_kv *kv, int seq, int len, int n, const int32_t *pages) {
    const seer_kv_seq *s = &kv->seqs[seq];
    assert_true(s->alive);
    assert_int_equal(s->len, len);
    assert_int_equal(s->n_pages, n);
    for (int k = 0; k < n; k++)
        assert_int_equal(s->pages[k], pages[k]);
}

/* Refcounts equal table references, free pages are unreferenced and distinct, and together
 * they account for the whole pool. */
static void expect_consistent(const seer_kv *kv) {
    int *refs = calloc((size_t)kv->n_pages, sizeof *refs);
    int *in_free = calloc((size_t)kv->n_pages, sizeof *in_free);
    assert_non_null(refs);
    assert_non_null(in_free);
    for (int i = 0; i < kv->n_seq_max; i++) {
        const seer_kv_seq *s = &kv->seqs[i];
        if (!s->alive)
            continue;
        assert_true(s->n_pages >= (s->len + kv->page_size - 1) / kv->page_size);
        assert_true(s->n_pages <= kv->max_pages_per_seq);
        for (int k = 0; k < s->n_pages; k++) {
            assert_in_range(s->pages[k], 0, kv->n_pages - 1);
            for (int j = 0; j < k; j++)
                assert_int_not_equal(s->pages[j], s->pages[k]);
            refs[s->pages[k]]++;
        }
    }
    int used = 0;
    for (int p = 0; p < kv->n_pages; p++) {
        assert_int_equal(kv->refcount[p], refs[p]);
        used += refs[p] > 0;
    }
    for (int i = 0; i < kv->n_free; i++) {
        int32_t p = kv->free_list[i];
        assert_in_range(p, 0, kv->n_pages - 1);
        assert_int_equal(refs[p], 0);
        assert_int_equal(in_free[p], 0);
        in_free[p] = 1;
    }
    assert_int_equal(kv->n_free + used, kv->n_pages);
    /* Never-used pages lie at the bottom of the stack in id order, and every page in use is
     * below the high-water mark, which storage covers. */
    assert_in_range(kv->n_fresh, 0, kv->n_free);
    for (int i = 0; i < kv->n_fresh; i++)
        assert_int_equal(kv->free_list[i], kv->n_pages - 1 - i);
    for (int p = 0; p < kv->n_pages; p++)
        if (refs[p] > 0)
            assert_true(p < seer_kv_high_water(kv));
    assert_true(seer_kv_high_water(kv) <= kv->n_committed);
    free(refs);
    free(in_free);
}

/* A full copy of the bookkeeping, to prove a failed call changed nothing. */
typedef struct {
    int n_free, n_fresh, n_committed;
    int32_t *free_list, *refcount;
    bool *alive;
    int *len, *n_pages;
    int32_t *pages;
} snapshot;

static snapshot snap(const seer_kv *kv) {
    snapshot s;
    int mp = kv->max_pages_per_seq;
    s.n_free = kv->n_free;
    s.n_fresh = kv->n_fresh;
    s.n_committed = kv->n_committed;
    s.free_list = malloc(sizeof(int32_t) * kv->n_pages);
    s.refcount = malloc(sizeof(int32_t) * kv->n_pages);
    s.alive = malloc(sizeof(bool) * kv->n_seq_max);
    s.len = malloc(sizeof(int) * kv->n_seq_max);
    s.n_pages = malloc(sizeof(int) * kv->n_seq_max);
    s.pages = malloc(sizeof(int32_t) * kv->n_seq_max * mp);
    memcpy(s.free_list, kv->free_list, sizeof(int32_t) * kv->n_pages);
    memcpy(s.refcount, kv->refcount, sizeof(int32_t) * kv->n_pages);
    for (int i = 0; i < kv->n_seq_max; i++) {
        s.alive[i] = kv->seqs[i].alive;
        s.len[i] = kv->seqs[i].len;
        s.n_pages[i] = kv->seqs[i].n_pages;
        memcpy(s.pages + i * mp, kv->seqs[i].pages, sizeof(int32_t) * mp);
    }
    return s;
}

static void snap_free(snapshot *s);

/* Compares and frees the snapshot. */
static void expect_unchanged(const seer_kv *kv, snapshot *s) {
    int mp = kv->max_pages_per_seq;
    assert_int_equal(kv->n_free, s->n_free);
    assert_int_equal(kv->n_fresh, s->n_fresh);
    assert_int_equal(kv->n_committed, s->n_committed);
    assert_memory_equal(kv->free_list, s->free_list, sizeof(int32_t) * kv->n_pages);
    assert_memory_equal(kv->refcount, s->refcount, sizeof(int32_t) * kv->n_pages);
    for (int i = 0; i < kv->n_seq_max; i++) {
        assert_int_equal(kv->seqs[i].alive, s->alive[i]);
        assert_int_equal(kv->seqs[i].len, s->len[i]);
        assert_int_equal(kv->seqs[i].n_pages, s->n_pages[i]);
        assert_memory_equal(kv->seqs[i].pages, s->pages + i * mp, sizeof(int32_t) * mp);
    }
    snap_free(s);
}

static void snap_free(snapshot *s) {
    free(s->free_list);
    free(s->refcount);
    free(s->alive);
    free(s->len);
    free(s->n_pages);
    free(s->pages);
}

static void expect_msg(const char *needle) {
    if (!strstr(seer_last_error(), needle))
        fail_msg("error message \"%s\" lacks \"%s\"", seer_last_error(), needle);
}

/* ---------------------------------------------------------------------------------------- */

static void test_init_args(void **state) {
    (void)state;
    seer_kv *kv = (seer_kv *)&kv; /* must be reset to NULL on failure */
    assert_int_equal(seer_kv_init(0, 4, 1, 16, &kv), SEER_ERR_INVALID_ARG);
    assert_null(kv);
    assert_int_equal(seer_kv_init(4, 0, 1, 16, &kv), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_init(4, 4, 0, 16, &kv), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_init(4, 4, 1, -3, &kv), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_init(4, 4, 1, 16, NULL), SEER_ERR_INVALID_ARG);
    seer_kv_free(NULL);

    kv = mk(5, 4, 3, 17);
    assert_int_equal(kv->max_pages_per_seq, 5);
    assert_int_equal(kv->n_free, 5);
    for (int i = 0; i < 3; i++)
        assert_false(seer_kv_seq_alive(kv, i));
    expect_consistent(kv);
    seer_kv_free(kv);
}

static void test_append_one_by_one(void **state) {
    (void)state;
    seer_kv *kv = mk(8, 4, 2, 64);
    int a = new_seq(kv);
    assert_int_equal(a, 0);
    expect_table(kv, a, 0, 0, NULL);
    static const int32_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int len = 1; len <= 17; len++) {
        assert_int_equal(append(kv, a, 1, NULL), 0);
        int np = (len + 3) / 4;
        expect_table(kv, a, len, np, ids); /* a fresh pool hands out 0, 1, 2, ... */
        assert_int_equal(kv->n_free, 8 - np);
        assert_int_equal(seer_kv_page_of(kv, a, len - 1), (len - 1) / 4);
        expect_consistent(kv);
    }

    /* 9 at once: slots 0..8, three pages. */
    int b = new_seq(kv);
    assert_int_equal(b, 1);
    assert_int_equal(append(kv, b, 9, NULL), 0);
    expect_table(kv, b, 9, 3, ids + 5);
    assert_int_equal(kv->n_free, 0);
    /* Filling the last page needs nothing; one token more needs a page there is not. */
    assert_int_equal(append(kv, b, 3, NULL), 0);
    expect_table(kv, b, 12, 3, ids + 5);
    int n1 = 1, nc = -1;
    seer_kv_copy cp[1];
    assert_int_equal(seer_kv_prepare_append(kv, 1, &b, &n1, cp, &nc), SEER_ERR_KV_FULL);
    expect_msg("KV cache full: need 1 pages, 0 free");
    /* A zero-token append is always fine. */
    int n0 = 0;
    ASSERT_OK(seer_kv_prepare_append(kv, 1, &b, &n0, cp, &nc));
    assert_int_equal(nc, 0);
    ASSERT_OK(seer_kv_prepare_append(kv, 0, NULL, NULL, NULL, &nc));
    assert_int_equal(nc, 0);
    expect_consistent(kv);
    seer_kv_free(kv);
}

static void test_prepare_without_commit(void **state) {
    (void)state;
    seer_kv *kv = mk(6, 4, 2, 64);
    int a = new_seq(kv);
    int n = 5, nc = -1;
    seer_kv_copy cp[1];
    ASSERT_OK(seer_kv_prepare_append(kv, 1, &a, &n, cp, &nc));
    static const int32_t p01[] = {0, 1};
    expect_table(kv, a, 0, 2, p01); /* room made, length untouched */
    assert_int_equal(kv->n_free, 4);
    /* Preparing again (a retried forward) reuses the kept pages. */
    ASSERT_OK(seer_kv_prepare_append(kv, 1, &a, &n, cp, &nc));
    expect_table(kv, a, 0, 2, p01);
    assert_int_equal(kv->n_free, 4);
    /* Fork shares only pages holding tokens: none yet. */
    int c = fork_seq(kv, a);
    expect_table(kv, c, 0, 0, NULL);
    assert_int_equal(kv->refcount[0], 1);
    seer_kv_seq_free(kv, c);
    seer_kv_trim(kv, a);
    expect_table(kv, a, 0, 0, NULL);
    assert_int_equal(kv->n_free, 6);

    /* Commit fewer than prepared, then trim drops the surplus page. */
    ASSERT_OK(seer_kv_prepare_append(kv, 1, &a, &n, cp, &nc));
    seer_kv_commit_append(kv, a, 3);
    expect_table(kv, a, 3, 2, p01);
    seer_kv_trim(kv, a);
    expect_table(kv, a, 3, 1, p01);
    assert_int_equal(kv->n_free, 5);
    /* Trim of a dead or bad id is harmless. */
    seer_kv_trim(kv, 1);
    seer_kv_trim(kv, -1);
    seer_kv_trim(kv, 99);
    expect_consistent(kv);
    seer_kv_free(kv);
}

static void test_rewind(void **state) {
    (void)state;
    seer_kv *kv = mk(6, 4, 2, 64);
    int a = new_seq(kv);
    append(kv, a, 10, NULL);
    static const int32_t p012[] = {0, 1, 2};
    expect_table(kv, a, 10, 3, p012);

    snapshot s = snap(kv);
    assert_int_equal(seer_kv_rewind(kv, a, 11), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_rewind(kv, a, -1), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_rewind(kv, 1, 0), SEER_ERR_INVALID_ARG);  /* dead */
    assert_int_equal(seer_kv_rewind(kv, 7, 0), SEER_ERR_INVALID_ARG);  /* out of range */
    assert_int_equal(seer_kv_rewind(kv, -1, 0), SEER_ERR_INVALID_ARG);
    expect_unchanged(kv, &s);

    ASSERT_OK(seer_kv_rewind(kv, a, 10)); /* to its own length: nothing to release */
    expect_table(kv, a, 10, 3, p012);
    ASSERT_OK(seer_kv_rewind(kv, a, 6)); /* mid-page: keeps the page holding slot 5 */
    expect_table(kv, a, 6, 2, p012);
    assert_int_equal(kv->n_free, 4);
    ASSERT_OK(seer_kv_rewind(kv, a, 4)); /* exact boundary: keeps one full page */
    expect_table(kv, a, 4, 1, p012);
    assert_int_equal(kv->n_free, 5);
    expect_consistent(kv);

    /* Re-append over the boundary: released pages come back in order. */
    assert_int_equal(append(kv, a, 5, NULL), 0);
    expect_table(kv, a, 9, 3, p012);
    assert_int_equal(kv->n_free, 3);
    ASSERT_OK(seer_kv_rewind(kv, a, 0));
    expect_table(kv, a, 0, 0, NULL);
    assert_int_equal(kv->n_free, 6);
    assert_int_equal(append(kv, a, 2, NULL), 0);
    expect_table(kv, a, 2, 1, p012);
    expect_consistent(kv);
    seer_kv_free(kv);
}

static void test_fork_cow(void **state) {
    (void)state;
    seer_kv *kv = mk(8, 4, 4, 64);
    int a = new_seq(kv);
    append(kv, a, 6, NULL); /* pages 0 (full), 1 (2 of 4 rows) */
    int b = fork_seq(kv, a);
    assert_int_equal(b, 1);
    static const int32_t p01[] = {0, 1};
    expect_table(kv, b, 6, 2, p01);
    assert_int_equal(kv->refcount[0], 2);
    assert_int_equal(kv->refcount[1], 2);
    assert_int_equal(kv->n_free, 6); /* fork takes no page */

    /* Parent writes first: gets a private copy of the partial page. */
    seer_kv_copy cp[2];
    assert_int_equal(append(kv, a, 1, cp), 1);
    assert_int_equal(cp[0].src, 1);
    assert_int_equal(cp[0].dst, 2);
    static const int32_t p02[] = {0, 2};
    expect_table(kv, a, 7, 2, p02);
    assert_int_equal(kv->refcount[1], 1);
    assert_int_equal(kv->refcount[2], 1);
    assert_int_equal(kv->refcount[0], 2);
    /* The child, now sole owner of page 1, writes in place. */
    assert_int_equal(append(kv, b, 1, cp), 0);
    expect_table(kv, b, 7, 2, p01);
    assert_int_equal(kv->n_free, 5);

    /* Across the boundary: new pages, and the shared full page 0 is never copied. */
    assert_int_equal(append(kv, a, 3, cp), 0);
    assert_int_equal(append(kv, b, 5, cp), 0);
    static const int32_t pa[] = {0, 2, 3}, pb[] = {0, 1, 4};
    expect_table(kv, a, 10, 3, pa);
    expect_table(kv, b, 12, 3, pb);
    assert_int_equal(kv->refcount[0], 2);
    expect_consistent(kv);

    /* A fork of b, which ends on a full page: its append opens a new page, copies nothing. */
    int c = fork_seq(kv, b);
    assert_int_equal(kv->refcount[0], 3);
    assert_int_equal(append(kv, c, 1, cp), 0);
    static const int32_t pc[] = {0, 1, 4, 5};
    expect_table(kv, c, 13, 4, pc);
    assert_int_equal(kv->refcount[4], 2);
    expect_consistent(kv);
    seer_kv_free(kv);
}

/* Two holders of one partial page in the same prepare: one copy, and exactly one page
 * needed (the second writes in place once the first has left). */
static void test_fork_cow_same_batch(void **state) {
    (void)state;
    seer_kv *kv = mk(3, 4, 4, 64);
    int a = new_seq(kv);
    append(kv, a, 6, NULL);
    int b = fork_seq(kv, a);
    assert_int_equal(kv->n_free, 1);
    int seqs[2] = {b, a}, n_new[2] = {2, 1}, nc = -1;
    seer_kv_copy cp[2];
    ASSERT_OK(seer_kv_prepare_append(kv, 2, seqs, n_new, cp, &nc));
    assert_int_equal(nc, 1);
    assert_int_equal(cp[0].src, 1);
    assert_int_equal(cp[0].dst, 2);
    seer_kv_commit_append(kv, b, 2);
    seer_kv_commit_append(kv, a, 1);
    static const int32_t p01[] = {0, 1}, p02[] = {0, 2};
    expect_table(kv, b, 8, 2, p02);
    expect_table(kv, a, 7, 2, p01);
    assert_int_equal(kv->n_free, 0);
    expect_consistent(kv);

    /* Three holders, all in one prepare, with only two free pages: needs exactly two. */
    seer_kv_seq_free(kv, b);
    ASSERT_OK(seer_kv_rewind(kv, a, 5));
    int c = fork_seq(kv, a), d = fork_seq(kv, a);
    assert_int_equal(kv->refcount[1], 3);
    assert_int_equal(kv->n_free, 1);
    int s3[3] = {a, c, d}, n3[3] = {1, 1, 1};
    snapshot s = snap(kv);
    assert_int_equal(seer_kv_prepare_append(kv, 3, s3, n3, cp, &nc), SEER_ERR_KV_FULL);
    expect_msg("need 2 pages, 1 free");
    expect_unchanged(kv, &s);
    /* d alone fits: it copies, since a and c still hold the page. */
    ASSERT_OK(seer_kv_prepare_append(kv, 1, s3 + 2, n3, cp, &nc));
    assert_int_equal(nc, 1);
    seer_kv_commit_append(kv, d, 1);
    assert_int_equal(kv->n_free, 0);
    /* a and c still share page 1: a must copy, c may then write in place: one page. */
    s = snap(kv);
    assert_int_equal(seer_kv_prepare_append(kv, 2, s3, n3, cp, &nc), SEER_ERR_KV_FULL);
    expect_msg("need 1 pages, 0 free");
    expect_unchanged(kv, &s);
    seer_kv_seq_free(kv, d);
    assert_int_equal(kv->n_free, 1);
    ASSERT_OK(seer_kv_prepare_append(kv, 2, s3, n3, cp, &nc));
    assert_int_equal(nc, 1);
    assert_int_equal(cp[0].src, 1);
    assert_int_equal(kv->seqs[a].pages[1], cp[0].dst);
    assert_int_equal(kv->seqs[c].pages[1], 1);
    assert_int_equal(kv->refcount[1], 1);
    assert_int_equal(kv->n_free, 0);
    expect_consistent(kv);
    seer_kv_free(kv);
}

static void test_fork_free_parent(void **state) {
    (void)state;
    seer_kv *kv = mk(8, 4, 2, 64);
    int a = new_seq(kv);
    append(kv, a, 6, NULL);
    int b = fork_seq(kv, a);
    seer_kv_seq_free(kv, a);
    assert_false(seer_kv_seq_alive(kv, a));
    static const int32_t p01[] = {0, 1};
    expect_table(kv, b, 6, 2, p01);
    assert_int_equal(kv->refcount[0], 1);
    assert_int_equal(kv->refcount[1], 1);
    assert_int_equal(kv->n_free, 6);
    /* Sole owner now: no copy. */
    assert_int_equal(append(kv, b, 1, NULL), 0);
    expect_table(kv, b, 7, 2, p01);
    expect_consistent(kv);
    seer_kv_seq_free(kv, b);
    assert_int_equal(kv->n_free, 8);
    expect_consistent(kv);
    seer_kv_free(kv);
}

static void test_fork_rewind_into_shared(void **state) {
    (void)state;
    seer_kv *kv = mk(8, 4, 3, 64);
    int a = new_seq(kv);
    append(kv, a, 8, NULL); /* two full pages */
    int b = fork_seq(kv, a);
    ASSERT_OK(seer_kv_rewind(kv, b, 6)); /* into the shared full page 1 */
    static const int32_t p01[] = {0, 1};
    expect_table(kv, b, 6, 2, p01);
    assert_int_equal(kv->refcount[1], 2);
    seer_kv_copy cp[1];
    assert_int_equal(append(kv, b, 1, cp), 1);
    assert_int_equal(cp[0].src, 1);
    assert_int_equal(cp[0].dst, 2);
    static const int32_t p02[] = {0, 2};
    expect_table(kv, b, 7, 2, p02);
    expect_table(kv, a, 8, 2, p01);
    assert_int_equal(kv->refcount[1], 1);

    /* Rewind to a boundary of a shared page: the next page is fresh, nothing copied. */
    int c = fork_seq(kv, a);
    ASSERT_OK(seer_kv_rewind(kv, c, 4));
    assert_int_equal(kv->refcount[1], 1);
    assert_int_equal(append(kv, c, 2, cp), 0);
    static const int32_t p03[] = {0, 3};
    expect_table(kv, c, 6, 2, p03);
    assert_int_equal(kv->refcount[0], 3);

    /* Pages kept past len (an uncommitted prepare) are not shared by a fork. */
    int n = 3, nc;
    ASSERT_OK(seer_kv_prepare_append(kv, 1, &a, &n, cp, &nc));
    assert_int_equal(kv->seqs[a].n_pages, 3);
    seer_kv_seq_free(kv, b);
    int d = fork_seq(kv, a);
    expect_table(kv, d, 8, 2, p01);
    assert_int_equal(kv->refcount[kv->seqs[a].pages[2]], 1);
    expect_consistent(kv);
    seer_kv_free(kv);
}

static void test_free_and_reuse(void **state) {
    (void)state;
    seer_kv *kv = mk(40, 4, 8, 32);
    int ids[8];
    for (int i = 0; i < 8; i++) {
        ids[i] = new_seq(kv);
        assert_int_equal(ids[i], i);
        append(kv, i, 1 + 3 * i, NULL);
    }
    int used = 0;
    for (int i = 0; i < 8; i++)
        used += (1 + 3 * i + 3) / 4;
    assert_int_equal(kv->n_free, 40 - used);
    expect_consistent(kv);

    int x = 123;
    snapshot s = snap(kv);
    assert_int_equal(seer_kv_seq_new(kv, &x), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_seq_fork(kv, 0, &x), SEER_ERR_INVALID_ARG);
    expect_unchanged(kv, &s);

    seer_kv_seq_free(kv, 5);
    seer_kv_seq_free(kv, 2);
    seer_kv_seq_free(kv, 2);  /* double free */
    seer_kv_seq_free(kv, -1); /* out of range */
    seer_kv_seq_free(kv, 8);
    assert_false(seer_kv_seq_alive(kv, 2));
    assert_false(seer_kv_seq_alive(kv, 8));
    assert_false(seer_kv_seq_alive(kv, -1));
    assert_int_equal(kv->n_free, 40 - used + (7 + 3) / 4 + (16 + 3) / 4);
    expect_consistent(kv);

    /* Lowest dead id first; a reused id starts empty. */
    assert_int_equal(new_seq(kv), 2);
    expect_table(kv, 2, 0, 0, NULL);
    assert_int_equal(fork_seq(kv, 7), 5);
    assert_int_equal(kv->seqs[5].len, 22);
    assert_int_equal(seer_kv_seq_fork(kv, 2, NULL), SEER_ERR_INVALID_ARG);
    seer_kv_seq_free(kv, 3);
    assert_int_equal(seer_kv_seq_fork(kv, 3, &x), SEER_ERR_INVALID_ARG); /* dead source */
    assert_int_equal(seer_kv_seq_fork(kv, 9, &x), SEER_ERR_INVALID_ARG);

    for (int i = 0; i < 8; i++)
        seer_kv_seq_free(kv, i);
    assert_int_equal(kv->n_free, 40);
    for (int p = 0; p < 40; p++)
        assert_int_equal(kv->refcount[p], 0);
    expect_consistent(kv);
    seer_kv_free(kv);
}

static void test_exhaustion_unchanged(void **state) {
    (void)state;
    seer_kv *kv = mk(6, 4, 3, 24);
    int a = new_seq(kv), b = new_seq(kv);
    append(kv, a, 9, NULL); /* pages 0 1 2 */
    append(kv, b, 4, NULL); /* page 3 */
    assert_int_equal(kv->n_free, 2);
    seer_kv_copy cp[3];
    int nc = -7;

    /* a + 12 -> 21 tokens: 6 pages, 3 more than it has */
    snapshot s = snap(kv);
    int n = 12;
    assert_int_equal(seer_kv_prepare_append(kv, 1, &a, &n, cp, &nc), SEER_ERR_KV_FULL);
    expect_msg("KV cache full: need 3 pages, 2 free");
    assert_int_equal(nc, -7);
    expect_unchanged(kv, &s);

    /* The first sequence would fit; the second does not: neither changes. */
    int seqs[2] = {b, a}, n_new[2] = {4, 8};
    s = snap(kv);
    assert_int_equal(seer_kv_prepare_append(kv, 2, seqs, n_new, cp, &nc), SEER_ERR_KV_FULL);
    expect_msg("need 3 pages, 2 free");
    expect_unchanged(kv, &s);

    /* Context length: 9 + 16 > 24, reported before the pool is looked at. */
    n = 16;
    s = snap(kv);
    assert_int_equal(seer_kv_prepare_append(kv, 1, &a, &n, cp, &nc), SEER_ERR_CONTEXT);
    expect_msg("sequence 0 would hold 25 tokens, more than the context length 24");
    n_new[0] = 20; /* b: 4 + 20 = 24 is the most allowed; a still too long */
    n_new[1] = 16;
    assert_int_equal(seer_kv_prepare_append(kv, 2, seqs, n_new, cp, &nc), SEER_ERR_CONTEXT);
    expect_unchanged(kv, &s);

    /* Bad entries: duplicates, dead, out of range, negative counts. */
    s = snap(kv);
    int dup[2] = {a, a}, ones[2] = {1, 1};
    assert_int_equal(seer_kv_prepare_append(kv, 2, dup, ones, cp, &nc), SEER_ERR_INVALID_ARG);
    int dead = 2, bad = 3, neg = -1;
    assert_int_equal(seer_kv_prepare_append(kv, 1, &dead, ones, cp, &nc), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_prepare_append(kv, 1, &bad, ones, cp, &nc), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_prepare_append(kv, 1, &a, &neg, cp, &nc), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_prepare_append(kv, -1, &a, ones, cp, &nc), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_prepare_append(kv, 1, &a, ones, cp, NULL), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_kv_prepare_append(kv, 1, &a, ones, NULL, &nc), SEER_ERR_INVALID_ARG);
    assert_int_equal(nc, -7);
    expect_unchanged(kv, &s);
    /* A rejected duplicate leaves no trace: the same sequences are accepted afterwards. */
    int pair[2] = {b, a};
    ASSERT_OK(seer_kv_prepare_append(kv, 2, pair, ones, cp, &nc));
    assert_int_equal(nc, 0);
    seer_kv_trim(kv, b);

    /* Full because of copy-on-write alone: c shares a's partial page, the pool is empty. */
    int c = fork_seq(kv, a);
    append(kv, b, 4, NULL); /* takes page 4 */
    int extra = 4;
    ASSERT_OK(seer_kv_prepare_append(kv, 1, &b, &extra, cp, &nc)); /* takes page 5 */
    assert_int_equal(kv->n_free, 0);
    s = snap(kv);
    int one = 1;
    assert_int_equal(seer_kv_prepare_append(kv, 1, &c, &one, cp, &nc), SEER_ERR_KV_FULL);
    expect_msg("need 1 pages, 0 free");
    expect_unchanged(kv, &s);
    /* Releasing b's surplus page makes the copy possible. */
    seer_kv_trim(kv, b);
    assert_int_equal(append(kv, c, 1, cp), 1);
    assert_int_equal(cp[0].src, 2);
    assert_int_equal(cp[0].dst, 5);
    expect_consistent(kv);
    seer_kv_free(kv);
}

/* Storage that grows: pages are handed out in id order, freed pages are reused before new
 * ones, the hook is asked only past the committed pages, and a failed grow changes nothing. */
typedef struct {
    int calls, committed, fail, chunk;
    int asked[8];
} grow_log;

static seer_status log_grow(void *user, int n_pages, int *n_committed) {
    grow_log *g = user;
    if (g->calls < 8)
        g->asked[g->calls] = n_pages;
    g->calls++;
    if (g->fail)
        return seer_err(SEER_ERR_OOM, "no memory for %d pages", n_pages);
    g->committed = n_pages + g->chunk;
    *n_committed = g->committed;
    return SEER_OK;
}

static void test_grow(void **state) {
    (void)state;
    seer_kv *kv = mk(100, 4, 3, 400);
    grow_log g = {.chunk = 2};
    seer_kv_set_grow(kv, log_grow, &g, 0);
    assert_int_equal(kv->n_committed, 0);
    int a = new_seq(kv), b = new_seq(kv);
    append(kv, a, 5, NULL); /* pages 0, 1: one grow to 2 (+2) */
    assert_int_equal(g.calls, 1);
    assert_int_equal(g.asked[0], 2);
    assert_int_equal(kv->n_committed, 4);
    append(kv, b, 8, NULL); /* pages 2, 3: committed already */
    assert_int_equal(g.calls, 1);
    int32_t pa[] = {0, 1}, pb[] = {2, 3};
    expect_table(kv, a, 5, 2, pa);
    expect_table(kv, b, 8, 2, pb);
    append(kv, a, 4, NULL); /* page 4: a grow to 5 */
    assert_int_equal(g.calls, 2);
    assert_int_equal(g.asked[1], 5);
    assert_int_equal(seer_kv_high_water(kv), 5);
    /* b's pages go back; the next pages reuse them without growing. */
    seer_kv_seq_free(kv, b);
    int c = new_seq(kv);
    append(kv, c, 8, NULL);
    assert_int_equal(g.calls, 2);
    assert_int_equal(seer_kv_high_water(kv), 5);
    /* Past them, a failing grow: nothing changes, and the message is the hook's. */
    g.fail = 1;
    snapshot s = snap(kv);
    int n = 40, nc = 0;
    seer_kv_copy cp[1];
    assert_int_equal(seer_kv_prepare_append(kv, 1, &c, &n, cp, &nc), SEER_ERR_OOM);
    expect_msg("no memory for 15 pages");
    expect_unchanged(kv, &s);
    expect_consistent(kv);
    g.fail = 0;
    ASSERT_OK(seer_kv_prepare_append(kv, 1, &c, &n, cp, &nc));
    seer_kv_commit_append(kv, c, n);
    assert_int_equal(seer_kv_high_water(kv), 15);
    assert_int_equal(kv->n_committed, 17);
    expect_consistent(kv);
    /* A full pool still says so before any grow is asked for. */
    int big = 390, calls = g.calls;
    assert_int_equal(seer_kv_prepare_append(kv, 1, &a, &big, cp, &nc), SEER_ERR_KV_FULL);
    assert_int_equal(g.calls, calls);
    seer_kv_free(kv);
}

/* ---------------------------------------------------------------------------------------- */
/* Randomized check against a reference model. phys simulates the backend's storage: one
 * token value per (page, row). The module's copies are performed on it and new tokens are
 * written through the page tables; after every operation each alive sequence must read back
 * through its table exactly what the reference says it holds. */

typedef struct {
    seer_kv *kv;
    int n_pages, ps, n_seq, max_len;
    int32_t *phys;  /* [n_pages][ps] */
    int32_t *ref;   /* [n_seq][max_len] */
    int *ref_len;
    bool *ref_alive;
    int32_t next_token;
    uint64_t rng;
    int op;
    /* how often each interesting path ran, so the test proves it exercised them */
    int n_copies, n_full, n_context, n_uncommitted, n_forks, n_seq_full;
    int n_cowritten; /* prepares in which two listed sequences write one shared page */
    /* storage that grows: pages [0, committed) exist; a grow sometimes fails */
    bool grows;
    int committed, n_grows, n_grow_fail;
    bool grow_failed; /* the last prepare's grow failed */
} model;

static int rnd(model *m, int n) { return (int)(tu_rand_u64(&m->rng) % (uint64_t)n); }

#define MCHECK(cond, ...)                                                                   \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "op %d: ", m->op);                                              \
            fail_msg(__VA_ARGS__);                                                          \
        }                                                                                   \
    } while (0)

/* The backend's part of growing: storage for the pages asked for and a few more (chunks), or
 * now and then no memory. */
static seer_status model_grow(void *user, int n_pages, int *n_committed) {
    model *m = user;
    MCHECK(n_pages > m->committed && n_pages <= m->n_pages, "grow to %d pages with %d committed",
           n_pages, m->committed);
    if (rnd(m, 3) == 0) {
        m->n_grow_fail++;
        m->grow_failed = true;
        return seer_err(SEER_ERR_OOM, "simulated: no memory for %d pages", n_pages);
    }
    m->n_grows++;
    int to = n_pages + (rnd(m, 4) == 0 ? 1 + rnd(m, 2) : 0);
    m->committed = to < m->n_pages ? to : m->n_pages;
    *n_committed = m->committed;
    return SEER_OK;
}

static void model_check(model *m) {
    const seer_kv *kv = m->kv;
    if (m->grows)
        MCHECK(kv->n_committed == m->committed, "kv says %d pages committed, storage has %d",
               kv->n_committed, m->committed);
    for (int i = 0; i < m->n_seq; i++) {
        const seer_kv_seq *s = &kv->seqs[i];
        MCHECK(s->alive == m->ref_alive[i], "seq %d alive %d, expected %d", i, s->alive,
               m->ref_alive[i]);
        if (!s->alive)
            continue;
        MCHECK(s->len == m->ref_len[i], "seq %d len %d, expected %d", i, s->len, m->ref_len[i]);
        for (int t = 0; t < s->len; t++) {
            int32_t p = s->pages[t / m->ps];
            int32_t got = m->phys[p * m->ps + t % m->ps];
            MCHECK(got == m->ref[i * m->max_len + t], "seq %d slot %d reads %d, expected %d", i,
                   t, got, m->ref[i * m->max_len + t]);
        }
        /* Room kept past len is private. */
        for (int k = (s->len + m->ps - 1) / m->ps; k < s->n_pages; k++)
            MCHECK(kv->refcount[s->pages[k]] == 1, "seq %d page %d past len is shared", i, k);
    }
    expect_consistent(kv);
}

/* The pages a prepare needs, counted differently from the module: fresh pages past each
 * table, plus, for each physical page written by k listed sequences and held by r, min(k,
 * r - 1) copies (the last holder to write may do so in place). */
static int reference_need(model *m, int n, const int *seqs, const int *n_new) {
    const seer_kv *kv = m->kv;
    int need = 0;
    int *writers = calloc((size_t)m->n_pages, sizeof *writers);
    assert_non_null(writers);
    for (int i = 0; i < n; i++) {
        const seer_kv_seq *s = &kv->seqs[seqs[i]];
        if (n_new[i] == 0)
            continue;
        int first = s->len / m->ps, last = (s->len + n_new[i] - 1) / m->ps;
        for (int k = first; k <= last; k++) {
            if (k < s->n_pages)
                writers[s->pages[k]]++;
            else
                need++;
        }
    }
    for (int p = 0; p < m->n_pages; p++) {
        int r = kv->refcount[p];
        if (writers[p] > 0 && r > 1)
            need += writers[p] < r - 1 ? writers[p] : r - 1;
        m->n_cowritten += writers[p] > 1;
    }
    free(writers);
    return need;
}

static int pick_alive(model *m) {
    int alive[64], n = 0;
    for (int i = 0; i < m->n_seq; i++)
        if (m->ref_alive[i])
            alive[n++] = i;
    return n ? alive[rnd(m, n)] : -1;
}

static int lowest_dead_ref(const model *m) {
    for (int i = 0; i < m->n_seq; i++)
        if (!m->ref_alive[i])
            return i;
    return -1;
}

static void op_new_or_fork(model *m, bool fork) {
    int expect = lowest_dead_ref(m), id = -1;
    int src = fork ? (rnd(m, 8) == 0 ? rnd(m, m->n_seq + 2) - 1 : pick_alive(m)) : -1;
    bool src_ok = !fork || (src >= 0 && src < m->n_seq && m->ref_alive[src]);
    snapshot s = snap(m->kv);
    seer_status st = fork ? seer_kv_seq_fork(m->kv, src, &id) : seer_kv_seq_new(m->kv, &id);
    if (expect < 0 || !src_ok) {
        MCHECK(st == SEER_ERR_INVALID_ARG, "new/fork: status %d", st);
        expect_unchanged(m->kv, &s);
        m->n_seq_full += expect < 0;
        return;
    }
    snap_free(&s);
    MCHECK(st == SEER_OK && id == expect, "new/fork: status %d id %d, expected id %d", st, id,
           expect);
    m->ref_alive[id] = true;
    m->ref_len[id] = fork ? m->ref_len[src] : 0;
    if (fork) {
        memcpy(m->ref + id * m->max_len, m->ref + src * m->max_len,
               sizeof(int32_t) * m->max_len);
        m->n_forks++;
    }
}

static void op_append(model *m) {
    seer_kv *kv = m->kv;
    int n = 1 + rnd(m, 3), seqs[3], n_new[3];
    for (int i = 0; i < n; i++) {
        seqs[i] = pick_alive(m);
        if (seqs[i] < 0)
            return;
        n_new[i] = rnd(m, 2 * m->ps + 3);
    }
    /* Entries are validated in order; the first bad one decides the status. */
    bool dup = false, over = false;
    for (int i = 0; i < n && !dup && !over; i++) {
        for (int j = 0; j < i; j++)
            dup |= seqs[i] == seqs[j];
        over = !dup && m->ref_len[seqs[i]] + n_new[i] > m->max_len;
    }
    int need = dup || over ? 0 : reference_need(m, n, seqs, n_new);
    int free_before = kv->n_free, nc = -1;
    seer_kv_copy copies[3];
    snapshot s = snap(kv);
    m->grow_failed = false;
    seer_status st = seer_kv_prepare_append(kv, n, seqs, n_new, copies, &nc);
    if (m->grow_failed) {
        MCHECK(!dup && !over && need <= free_before, "grow asked for a refused append");
        MCHECK(st == SEER_ERR_OOM, "append with a failed grow: status %d", st);
        expect_unchanged(kv, &s);
        return;
    }
    if (dup || over || need > free_before) {
        seer_status want = dup ? SEER_ERR_INVALID_ARG : over ? SEER_ERR_CONTEXT : SEER_ERR_KV_FULL;
        MCHECK(st == want, "append: status %d, expected %d", st, want);
        m->n_context += over;
        m->n_full += want == SEER_ERR_KV_FULL;
        expect_unchanged(kv, &s);
        return;
    }
    snap_free(&s);
    MCHECK(st == SEER_OK, "append: status %d (%s)", st, seer_last_error());
    MCHECK(kv->n_free == free_before - need, "append took %d pages, expected %d",
           free_before - kv->n_free, need);
    MCHECK(nc >= 0 && nc <= n, "append: %d copies for %d sequences", nc, n);

    /* The backend's part: copies in order, then the new tokens through the tables. */
    for (int c = 0; c < nc; c++) {
        MCHECK(kv->refcount[copies[c].dst] == 1, "copy into shared page %d", copies[c].dst);
        memcpy(m->phys + copies[c].dst * m->ps, m->phys + copies[c].src * m->ps,
               sizeof(int32_t) * m->ps);
    }
    m->n_copies += nc;
    int32_t tokens[3][64];
    for (int i = 0; i < n; i++) {
        const seer_kv_seq *q = &kv->seqs[seqs[i]];
        for (int j = 0; j < n_new[i]; j++) {
            int slot = q->len + j;
            MCHECK(slot / m->ps < q->n_pages, "seq %d slot %d has no page", seqs[i], slot);
            int32_t p = seer_kv_page_of(kv, seqs[i], slot);
            MCHECK(!m->grows || p < m->committed, "seq %d writes page %d without storage (%d)",
                   seqs[i], p, m->committed);
            MCHECK(kv->refcount[p] == 1, "seq %d writes slot %d into shared page %d", seqs[i],
                   slot, p);
            tokens[i][j] = m->next_token++;
            m->phys[p * m->ps + slot % m->ps] = tokens[i][j];
        }
    }

    /* Sometimes the forward "fails": nothing is committed, and the room is kept or
     * trimmed. The tokens written into private pages must not leak into any sequence. */
    if (rnd(m, 8) == 0) {
        m->n_uncommitted++;
        if (rnd(m, 2))
            for (int i = 0; i < n; i++)
                seer_kv_trim(kv, seqs[i]);
        return;
    }
    for (int i = 0; i < n; i++) {
        seer_kv_commit_append(kv, seqs[i], n_new[i]);
        int q = seqs[i];
        memcpy(m->ref + q * m->max_len + m->ref_len[q], tokens[i], sizeof(int32_t) * n_new[i]);
        m->ref_len[q] += n_new[i];
    }
}

static void op_rewind(model *m) {
    int q = pick_alive(m);
    if (q < 0)
        return;
    if (rnd(m, 10) == 0) {
        snapshot s = snap(m->kv);
        seer_status st = seer_kv_rewind(m->kv, q, m->ref_len[q] + 1 + rnd(m, 3));
        MCHECK(st == SEER_ERR_INVALID_ARG, "rewind past len: status %d", st);
        expect_unchanged(m->kv, &s);
        return;
    }
    int new_len = rnd(m, m->ref_len[q] + 1);
    seer_status st = seer_kv_rewind(m->kv, q, new_len);
    MCHECK(st == SEER_OK, "rewind: status %d", st);
    MCHECK(m->kv->seqs[q].n_pages == (new_len + m->ps - 1) / m->ps, "rewind kept %d pages",
           m->kv->seqs[q].n_pages);
    m->ref_len[q] = new_len;
}

static void op_free(model *m) {
    int q = rnd(m, 4) == 0 ? rnd(m, m->n_seq + 2) - 1 : pick_alive(m);
    seer_kv_seq_free(m->kv, q);
    if (q >= 0 && q < m->n_seq) {
        m->ref_alive[q] = false;
        m->ref_len[q] = 0;
    }
}

static void run_model(int n_pages, int ps, int n_seq, int max_len, int n_ops, uint64_t seed,
                      bool grows) {
    model mm = {0}, *m = &mm;
    m->n_pages = n_pages;
    m->ps = ps;
    m->n_seq = n_seq;
    m->max_len = max_len;
    m->rng = seed;
    m->kv = mk(n_pages, ps, n_seq, max_len);
    m->grows = grows;
    if (grows)
        seer_kv_set_grow(m->kv, model_grow, m, 0);
    m->phys = malloc(sizeof(int32_t) * n_pages * ps);
    m->ref = calloc((size_t)n_seq * max_len, sizeof(int32_t));
    m->ref_len = calloc((size_t)n_seq, sizeof(int));
    m->ref_alive = calloc((size_t)n_seq, sizeof(bool));
    assert_non_null(m->phys);
    assert_non_null(m->ref);
    for (int i = 0; i < n_pages * ps; i++)
        m->phys[i] = -1;
    assert_true(n_seq <= 64 && 2 * ps + 3 <= 64);

    for (m->op = 0; m->op < n_ops; m->op++) {
        int r = rnd(m, 100);
        if (r < 8)
            op_new_or_fork(m, false);
        else if (r < 18)
            op_new_or_fork(m, true);
        else if (r < 60)
            op_append(m);
        else if (r < 78)
            op_rewind(m);
        else if (r < 88)
            op_free(m);
        else {
            int q = pick_alive(m);
            seer_kv_trim(m->kv, q);
        }
        model_check(m);
    }
    /* Every interesting path must have run, or the test proves little. */
    if (ps > 1) { /* one-row pages are never partly filled: nothing to copy */
        assert_true(m->n_copies > 0);
        assert_true(m->n_cowritten > 0);
    }
    assert_true(m->n_full > 0);
    assert_true(m->n_context > 0);
    assert_true(m->n_uncommitted > 0);
    assert_true(m->n_forks > 0);
    assert_true(m->n_seq_full > 0);
    if (grows) {
        assert_true(m->n_grows > 0);
        assert_true(m->n_grow_fail > 0);
    }

    for (int i = 0; i < n_seq; i++)
        seer_kv_seq_free(m->kv, i);
    assert_int_equal(m->kv->n_free, n_pages);
    seer_kv_free(m->kv);
    free(m->phys);
    free(m->ref);
    free(m->ref_len);
    free(m->ref_alive);
}

static void test_model_check(void **state) {
    (void)state;
    run_model(24, 4, 6, 40, 20000, 0x5eed0001u, false);
    run_model(16, 1, 5, 12, 20000, 0x5eed0002u, false);
    run_model(20, 3, 8, 30, 20000, 0x5eed0003u, false);
    /* The same with storage that grows as pages are first used, and sometimes cannot. */
    run_model(24, 4, 6, 40, 20000, 0x5eed0004u, true);
    run_model(20, 3, 8, 30, 20000, 0x5eed0005u, true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_args),
        cmocka_unit_test(test_append_one_by_one),
        cmocka_unit_test(test_prepare_without_commit),
        cmocka_unit_test(test_rewind),
        cmocka_unit_test(test_fork_cow),
        cmocka_unit_test(test_fork_cow_same_batch),
        cmocka_unit_test(test_fork_free_parent),
        cmocka_unit_test(test_fork_rewind_into_shared),
        cmocka_unit_test(test_free_and_reuse),
        cmocka_unit_test(test_exhaustion_unchanged),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_model_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
