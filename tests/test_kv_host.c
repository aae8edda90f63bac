/*
 * test_kv_host.c: the KV cache's host tier through the scheduler, on the tiny real model
 * (stories260K) and the CPU backend (whose host copies are memcpy to a second pool):
 * preempted requests copied to the host and back generate the golden ids and are not
 * recomputed (their computed rows are counted), with drafters on too (a self-draft, prompt
 * lookup, the quantised-KV draft whose pool carries a quantised copy); the prefix cache
 * spills to the host and a hit there is copied back with the same output; the tier's bound
 * holds, its least recently used entry evicted; bad sizes are refused. The backend's copies
 * themselves: every page's bytes round-trip through a poisoned host buffer.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "kv/kv_quant.h"
#include "sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NG = 5, MAXI = 600 };

typedef struct {
    int32_t prompt[64];
    int np;
    int32_t gold[MAXI];
    int ng;
} golden;

static golden G[NG];
static seer_model *M;

static int parse_ids(char *s, int32_t *out, int cap) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ","))
        out[n++] = (int32_t)atoi(tok);
    return n;
}

static int setup(void **state) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    if (seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &M) != SEER_OK)
        return -1;
    size_t sz;
    char *tsv = (char *)tu_read_file(tu_data_path("golden/stories260K-greedy.tsv"), &sz);
    if (!tsv)
        return -1;
    char *save = NULL;
    int n = 0;
    strtok_r(tsv, "\n", &save);
    for (char *line = strtok_r(NULL, "\n", &save); line && n < NG; line = strtok_r(NULL, "\n", &save)) {
        char *f1 = strchr(line, '\t') + 1, *f2 = strchr(f1, '\t');
        *f2++ = 0;
        char *f3 = strchr(f2, '\t');
        *f3 = 0;
        G[n].np = parse_ids(f1, G[n].prompt, 64);
        G[n].ng = parse_ids(f2, G[n].gold, MAXI);
        n++;
    }
    free(tsv);
    return n == NG ? 0 : -1;
}

static int teardown(void **state) {
    seer_model_free(M);
    return 0;
}

static seer_context *mkctx(int n_seq, int n_pages, int kv_bits) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = n_seq;
    cp.n_batch_max = 64;
    cp.page_size = 16;
    cp.n_pages = n_pages;
    cp.kv_quant_bits = kv_bits;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(M, cp, &c));
    return c;
}

static int64_t page_bytes(const seer_context *c) {
    return (int64_t)c->be->ops->kv_page_bytes(c->be, &c->geom);
}

static seer_request *greedy_req(int i, seer_spec_kind kind) {
    seer_request_params p = seer_request_default_params();
    p.sampler.temperature = 0;
    p.max_tokens = G[i].ng;
    p.spec.kind = kind;
    p.spec.gamma = 3;
    tu_spec_set(&p.spec, "budget", 24);
    tu_spec_set(&p.spec, "sinks", 4);
    seer_request *r = NULL;
    ASSERT_OK(seer_request_new(M, G[i].prompt, G[i].np, &p, &r));
    return r;
}

static void run_all(seer_sched *s) {
    int active = 1, steps = 0;
    while (active) {
        ASSERT_OK(seer_sched_step(s, &active));
        assert_true(++steps < 100000);
    }
}

static void assert_gold(seer_request *r, int i, const char *what) {
    const int32_t *ids;
    int n = seer_request_tokens(r, &ids);
    if (n != G[i].ng || memcmp(ids, G[i].gold, sizeof(int32_t) * n)) {
        int k = 0;
        while (k < n && k < G[i].ng && ids[k] == G[i].gold[k])
            k++;
        fail_msg("%s, prompt %d: %d ids (golden %d), first difference at %d", what, i, n, G[i].ng, k);
    }
}

/* The five golden requests in a pool of 24 pages (less than two whole stories), with the
 * drafter kinds[i % 2] and a host tier of host_pages pages (0: none). Every request must
 * give the golden ids; *st and *extra (rows computed beyond each request's prompt and
 * generated tokens, summed) come back. */
static void run_pressed(const seer_spec_kind kinds[2], int kv_bits, int host_pages, seer_sched_stats *st,
                        int64_t *extra, int *restored) {
    seer_context *c = mkctx(5, 24, kv_bits);
    seer_sched_params spm = {.max_batch_tokens = 32, .prefill_chunk = 4,
                             .kv_host_bytes = host_pages * page_bytes(c)};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_request *g[NG];
    for (int i = 0; i < NG; i++) {
        g[i] = greedy_req(i, kinds[i % 2]);
        ASSERT_OK(seer_sched_submit(s, g[i]));
    }
    run_all(s);
    seer_sched_get_stats(s, st);
    *extra = 0, *restored = 0;
    for (int i = 0; i < NG; i++) {
        seer_request_stats rs;
        seer_request_get_stats(g[i], &rs);
        assert_gold(g[i], i, host_pages ? "preempted to the host tier" : "preempted and recomputed");
        *extra += rs.n_computed - (rs.n_prompt + rs.n_generated - 1);
        *restored += rs.n_host_restored;
        if (kinds[i % 2] == SEER_SPEC_NONE && host_pages) /* nothing computed twice */
            assert_int_equal(rs.n_computed, rs.n_prompt + rs.n_generated - 1);
        seer_request_free(g[i]);
    }
    assert_int_equal(st->kv_pages_free, st->kv_pages_total);
    assert_int_equal(st->kv_host_pages, 0); /* every saved cache went back or was dropped */
    seer_sched_free(s);
    seer_context_free(c);
}

/* Plain decoding: the preempted requests come back from the host with the golden ids, and
 * compute only the pending token again where recomputation computes their whole cache. */
static void test_preempt_to_host(void **state) {
    const seer_spec_kind none[2] = {SEER_SPEC_NONE, SEER_SPEC_NONE};
    seer_sched_stats st0, st1;
    int64_t extra0, extra1;
    int rest0, rest1;
    run_pressed(none, 0, 0, &st0, &extra0, &rest0);
    run_pressed(none, 0, 256, &st1, &extra1, &rest1);
    assert_true(st0.n_preemptions > 0 && st1.n_preemptions > 0);
    assert_int_equal(st1.kv_host_saves, st1.n_preemptions);
    assert_true(st1.kv_host_hits >= st1.kv_host_saves);
    assert_true(rest1 > 0);
    assert_int_equal(rest0, 0);
    assert_int_equal(extra1, 0);
    assert_true(extra0 > 10 * st0.n_preemptions); /* recomputation: whole caches again */
    assert_true(st1.kv_host_bytes_out > 0 && st1.kv_host_bytes_in > 0);
    assert_int_equal(st0.kv_host_pages_total, 0);
    assert_int_equal(st1.kv_host_pages_total, 256);
    printf("recomputed rows: %lld without the tier (%lld preemptions), %lld with it (%lld)\n", (long long)extra0,
           (long long)st0.n_preemptions, (long long)extra1, (long long)st1.n_preemptions);
}

/* Drafters on: a self-draft (its prompt queries come from rows computed again) beside prompt
 * lookup, then the quantised-KV draft, whose pool's pages carry the quantised copy too. */
static void test_preempt_spec_to_host(void **state) {
    const seer_spec_kind a[2] = {SEER_SPEC_STREAMING, SEER_SPEC_NGRAM};
    const seer_spec_kind q[2] = {SEER_SPEC_QUANTKV, SEER_SPEC_NONE};
    seer_sched_stats st;
    int64_t extra;
    int rest;
    run_pressed(a, 0, 256, &st, &extra, &rest);
    assert_true(st.kv_host_saves > 0 && rest > 0);
    run_pressed(q, 4, 256, &st, &extra, &rest);
    assert_true(st.kv_host_saves > 0 && rest > 0);
    assert_true(st.spec_accepted[SEER_SPEC_QUANTKV] > 0);
}

/* Requests one after another with a prefix cache of one sequence and a tier of host_pages;
 * out [n][48] their ids, reused / restored their tokens from the cache / the host. */
static void run_prompts(int host_pages, int32_t (*prompts)[96], const int *np, int n, int32_t out[][48],
                        int *reused, int *restored, seer_sched_stats *st_out, int *max_host) {
    seer_context *c = mkctx(6, 0, 0);
    seer_sched_params spm = {.max_batch_tokens = 32, .prefill_chunk = 16, .prefix_cache = 1,
                             .kv_host_bytes = host_pages * page_bytes(c)};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    *max_host = 0;
    for (int i = 0; i < n; i++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0;
        p.max_tokens = 48;
        p.ignore_eos = true;
        seer_request *r = NULL;
        ASSERT_OK(seer_request_new(M, prompts[i], np[i], &p, &r));
        ASSERT_OK(seer_sched_submit(s, r));
        int active = 1;
        while (active) {
            ASSERT_OK(seer_sched_step(s, &active));
            seer_sched_stats st;
            seer_sched_get_stats(s, &st);
            assert_true(st.kv_host_pages <= st.kv_host_pages_total);
            *max_host = st.kv_host_pages > *max_host ? st.kv_host_pages : *max_host;
        }
        const int32_t *ids;
        assert_int_equal(seer_request_tokens(r, &ids), 48);
        memcpy(out[i], ids, sizeof(int32_t) * 48);
        seer_request_stats rs;
        seer_request_get_stats(r, &rs);
        reused[i] = rs.n_prefix_reused;
        restored[i] = rs.n_host_restored;
        seer_request_free(r);
    }
    seer_sched_get_stats(s, st_out);
    /* the device holds only the cache's entry: the spilled ones' pages are free there */
    assert_int_equal(st_out->kv_pages_free + st_out->kv_pages_cached, st_out->kv_pages_total);
    assert_true(st_out->kv_pages_cached <= 6);
    seer_sched_free(s);
    assert_int_equal(seer_kv_free_pages(c), st_out->kv_pages_total);
    seer_context_free(c);
}

/* Text A (70 tokens), B (60), C (60), then A again. With one sequence for the cache, B's
 * entry evicts A's: spilled to the host, A's second request copies its 64 tokens back and
 * generates what it generates without any cache. With a tier of 5 pages (an entry is 4), C's
 * spill evicts A's from the host (least recently used) and A is computed again. */
static void test_prefix_spill(void **state) {
    enum { NP = 4 };
    int32_t prompts[NP][96];
    int np[NP] = {70, 60, 60, 70};
    for (int j = 0; j < 70; j++) {
        prompts[0][j] = prompts[3][j] = j ? G[1].gold[j] : 1;
        prompts[1][j] = j ? G[4].gold[j] : 1;
        prompts[2][j] = j ? G[2].gold[j] : 1;
    }
    const int order_ab[NP] = {0, 1, 3, 3}; /* A, B, A (the last one unused) */
    int32_t pr[NP][96], ref[NP][48], got[NP][48];
    int npr[NP];
    for (int i = 0; i < NP; i++) {
        memcpy(pr[i], prompts[order_ab[i]], sizeof pr[i]);
        npr[i] = np[order_ab[i]];
    }
    int reused[NP], restored[NP], mh;
    seer_sched_stats st0, st;
    run_prompts(0, pr, npr, 3, ref, reused, restored, &st0, &mh);
    assert_int_equal(reused[2], 0); /* no tier: A was dropped */
    run_prompts(64, pr, npr, 3, got, reused, restored, &st, &mh);
    for (int i = 0; i < 3; i++)
        assert_memory_equal(got[i], ref[i], sizeof ref[i]);
    assert_int_equal(reused[2], 64);
    assert_int_equal(restored[2], 64);
    assert_int_equal(st.kv_host_hits, 1);
    /* out: A's 4 pages, then B's 3 (48 of its 60 tokens) when A's copy on the device replaced
     * the spilled entry; in: A's 4 pages */
    assert_true(st.kv_host_bytes_in > 0);
    assert_int_equal(st.kv_host_bytes_out, st.kv_host_bytes_in / 4 * 7);
    assert_int_equal(st.kv_host_pages, 3);

    /* A, B, C, A with a tier of 5 pages */
    run_prompts(0, prompts, np, NP, ref, reused, restored, &st0, &mh);
    run_prompts(5, prompts, np, NP, got, reused, restored, &st, &mh);
    for (int i = 0; i < NP; i++)
        assert_memory_equal(got[i], ref[i], sizeof ref[i]);
    assert_int_equal(st.kv_host_pages_total, 5);
    assert_true(mh <= 5);
    assert_true(st.kv_host_evictions >= 1);
    assert_int_equal(reused[3], 0);
    assert_int_equal(restored[3], 0);
    assert_int_equal(st.kv_host_hits, 0);
}

/* Sizes the tier cannot take are refused, changing nothing. */
static void test_bad_sizes(void **state) {
    seer_context *c = mkctx(2, 0, 0);
    seer_sched *s = (seer_sched *)&s;
    seer_sched_params spm = seer_sched_default_params();
    spm.kv_host_bytes = -1;
    assert_int_equal(seer_sched_init(c, spm, &s), SEER_ERR_INVALID_ARG);
    assert_null(s);
    assert_non_null(strstr(seer_last_error(), "negative"));
    spm.kv_host_bytes = page_bytes(c) - 1;
    assert_int_equal(seer_sched_init(c, spm, &s), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "holds no KV page"));
    spm.kv_host_bytes = page_bytes(c);
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    assert_int_equal(st.kv_host_pages_total, 1);
    seer_sched_free(s);
    assert_int_equal(seer_kv_free_pages(c), st.kv_pages_total);
    seer_context_free(c);
}

/* The backend's copies: pages written with random K/V (and their quantised copy) go to a
 * poisoned host buffer at scattered slots and back into other pages, bit for bit; a page
 * outside the pool is refused with nothing copied. */
static void test_backend_copies(void **state) {
    for (int bits = 0; bits <= 8; bits += 8) {
        seer_context *c = mkctx(2, 16, bits);
        seer_backend *be = c->be;
        const seer_backend_ops *o = be->ops;
        const size_t pb = o->kv_page_bytes(be, &c->geom), stride = pb + 64;
        seer_seq_id a;
        ASSERT_OK(seer_seq_new(c, &a));
        ASSERT_OK(seer_seq_fill_synthetic(c, a, 16 * 5, 7));
        const int32_t *pages = c->kv->seqs[a].pages;
        int32_t slots[5] = {6, 0, 3, 4, 9}, dst[5];
        uint8_t *host = malloc(stride * 10);
        memset(host, 0xA5, stride * 10);
        uint64_t t = 0;
        bool done = false;
        ASSERT_OK(o->kv_host_copy(be, c->kv_data, &c->geom, host, stride, pages, slots, 5, true, &t));
        ASSERT_OK(o->kv_host_wait(be, t));
        ASSERT_OK(o->kv_host_done(be, t, &done));
        assert_true(done);
        for (int i = 0; i < 10; i++) /* the bytes past a page in its slot are untouched */
            assert_int_equal(host[stride * i + pb], 0xA5);
        seer_seq_id b;
        ASSERT_OK(seer_seq_new(c, &b));
        int n_new = 16 * 5, nc = 0;
        seer_kv_copy cp;
        ASSERT_OK(seer_kv_prepare_append(c->kv, 1, &b, &n_new, &cp, &nc));
        memcpy(dst, c->kv->seqs[b].pages, sizeof dst);
        ASSERT_OK(o->kv_host_copy(be, c->kv_data, &c->geom, host, stride, dst, slots, 5, false, &t));
        ASSERT_OK(o->kv_host_wait(be, t));
        seer_kv_commit_append(c->kv, b, n_new);
        /* every layer's K and V rows read back equal */
        const int kvd = c->geom.n_kv_heads * c->geom.head_dim, n = 16 * 5;
        float *x = malloc(sizeof(float) * n * kvd), *y = malloc(sizeof(float) * n * kvd);
        int32_t pa[80], pb2[80], row[80];
        for (int i = 0; i < n; i++)
            pa[i] = pages[i / 16], pb2[i] = dst[i / 16], row[i] = i % 16;
        for (int l = 0; l < c->geom.n_layers; l++)
            for (int w = 0; w < 2; w++) {
                ASSERT_OK(o->kv_read(be, c->kv_data, &c->geom, l, w, pa, row, n, x));
                ASSERT_OK(o->kv_read(be, c->kv_data, &c->geom, l, w, pb2, row, n, y));
                assert_memory_equal(x, y, sizeof(float) * n * kvd);
            }
        if (bits) { /* the quantised copy went along: its bytes sit after the rows in a slot */
            const size_t rows = pb - seer_kvq_page_bytes(c->geom.n_layers, 16, kvd, bits);
            assert_true(rows < pb);
            bool differ = false;
            for (size_t k = rows; k < pb && !differ; k++)
                differ = host[stride * 6 + k] != 0xA5;
            assert_true(differ);
        }
        int32_t bad = c->geom.n_pages;
        uint8_t before = host[0];
        assert_int_equal(o->kv_host_copy(be, c->kv_data, &c->geom, host, stride, &bad, slots, 1, true, &t),
                         SEER_ERR_INVALID_ARG);
        assert_int_equal(host[0], before);
        free(x), free(y), free(host);
        seer_seq_free(c, a);
        seer_seq_free(c, b);
        seer_context_free(c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_copies),
        cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_preempt_to_host),
        cmocka_unit_test(test_preempt_spec_to_host),
        cmocka_unit_test(test_prefix_spill),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
