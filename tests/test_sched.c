/*
 * test_sched.c: requests and the scheduler on the tiny real model (stories260K): greedy
 * requests reproduce the golden ids alone; the same requests beside other traffic (sampled
 * requests, speculation of every kind, arrivals between steps, a small token budget and
 * chunked prefill) give identical ids; streams keep getting rounds while a long prompt is read
 * (fair scheduling); cancellation inside a prefill; preemption when the KV pool runs out; stop
 * strings; bad requests refused with nothing changed.
 */
#include "testutil.h"

#include "sched/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NG = 5, MAXI = 600 };

typedef struct {
    int32_t prompt[64];
    int np;
    int32_t gold[MAXI];
    int ng;
    char text[4096];
    char ptext[64];
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
        *f3++ = 0;
        *(f1 - 1) = 0;
        snprintf(G[n].ptext, sizeof G[n].ptext, "%s", line);
        G[n].np = parse_ids(f1, G[n].prompt, 64);
        G[n].ng = parse_ids(f2, G[n].gold, MAXI);
        snprintf(G[n].text, sizeof G[n].text, "%s", f3);
        n++;
    }
    free(tsv);
    return n == NG ? 0 : -1;
}

static int teardown(void **state) {
    seer_model_free(M);
    return 0;
}

static seer_context *mkctx(int n_seq, int n_pages) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = n_seq;
    cp.n_batch_max = 64;
    cp.page_size = 16;
    cp.n_pages = n_pages;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(M, cp, &c));
    return c;
}

static seer_request *greedy_req(int i, seer_spec_kind kind) {
    seer_request_params p = seer_request_default_params();
    p.sampler.temperature = 0;
    p.max_tokens = G[i].ng;
    p.spec.kind = kind;
    p.spec.gamma = 3;
    tu_spec_set(&p.spec, "budget", 24);
    tu_spec_set(&p.spec, "sinks", 4);
    tu_spec_set(&p.spec, "snap_window", 4);
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

static int n_updates;
static void count_update(seer_request *r, void *user) { n_updates++; }

/* Alone: each golden prompt, through a small budget and prefill chunk. */
static void test_golden_alone(void **state) {
    seer_context *c = mkctx(4, 0);
    seer_sched_params sp = {.max_batch_tokens = 16, .prefill_chunk = 2};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, sp, &s));
    for (int i = 0; i < NG; i++) {
        seer_request *r = greedy_req(i, SEER_SPEC_NONE);
        ASSERT_OK(seer_sched_submit(s, r));
        run_all(s);
        assert_true(seer_request_finished(r));
        assert_gold(r, i, "alone");
        /* text: the golden stdout has "\n" written as two characters */
        size_t len;
        const char *t = seer_request_text(r, &len);
        /* the reference prints the prompt, then the story (SentencePiece drops the space
         * the first word of a text carries) and a newline */
        char esc[4096];
        size_t o = 0, k0 = 0;
        if (G[i].np == 1 && len && t[0] == ' ')
            k0 = 1;
        for (size_t k = k0; k < len && o + 3 < sizeof esc; k++) {
            if (t[k] == '\n')
                esc[o++] = '\\', esc[o++] = 'n';
            else
                esc[o++] = t[k];
        }
        esc[o] = 0;
        char want[8300];
        snprintf(want, sizeof want, "%s%s\\n", G[i].ptext, esc);
        if (strcmp(G[i].text, want))
            fail_msg("prompt %d: text '%s' differs from the reference '%s'", i, want, G[i].text);
        assert_true(o > 100);
        seer_request_free(r);
    }
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    assert_int_equal(st.kv_pages_free, st.kv_pages_total);
    seer_sched_free(s);
    seer_context_free(c);
}

/* The quantised-KV draft through the scheduler: in a context that keeps a 4-bit copy, the
 * golden greedy requests with quantkv beside plain ones
 * reproduce the golden ids; a context without a copy refuses such a request at submit and
 * takes a plain one after it. */
static void test_quantkv_requests(void **state) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = NG;
    cp.n_batch_max = 64;
    cp.page_size = 16;
    cp.kv_quant_bits = 4;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(M, cp, &c));
    seer_sched_params spm = {.max_batch_tokens = 40, .prefill_chunk = 16};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_request *g[NG];
    for (int i = 0; i < NG; i++) {
        g[i] = greedy_req(i, i % 3 == 2 ? SEER_SPEC_NONE : SEER_SPEC_QUANTKV);
        ASSERT_OK(seer_sched_submit(s, g[i]));
    }
    run_all(s);
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    assert_true(st.spec_drafted[SEER_SPEC_QUANTKV] > 0);
    assert_true(st.spec_accepted[SEER_SPEC_QUANTKV] > 0);
    for (int i = 0; i < NG; i++) {
        assert_gold(g[i], i, i % 3 == 2 ? "plain beside quantkv" : "quantkv request");
        seer_request_free(g[i]);
    }
    seer_sched_free(s);
    seer_context_free(c);

    c = mkctx(2, 0);
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_request *r = greedy_req(0, SEER_SPEC_QUANTKV), *plain = greedy_req(1, SEER_SPEC_NONE);
    assert_int_equal(seer_sched_submit(s, r), SEER_ERR_INVALID_ARG);
    ASSERT_OK(seer_sched_submit(s, plain));
    run_all(s);
    assert_gold(plain, 1, "plain after a refused quantkv request");
    seer_request_free(r);
    seer_request_free(plain);
    seer_sched_free(s);
    seer_context_free(c);
}

/* Under load: the golden greedy requests, each with some speculation, beside sampled
 * requests, arriving over the first steps; ids equal the golden ones. */
static void test_golden_under_load(void **state) {
    const seer_spec_kind kinds[] = {SEER_SPEC_NONE, SEER_SPEC_STREAMING, SEER_SPEC_NGRAM,
                                    SEER_SPEC_SNAPKV, SEER_SPEC_RETRIEVAL};
    seer_context *c = mkctx(12, 0);
    seer_sched_params spm = {.max_batch_tokens = 24, .prefill_chunk = 2};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_request *g[NG], *noise[6];
    n_updates = 0;
    for (int k = 0; k < 6; k++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0.9f;
        p.sampler.top_p = 0.9f;
        p.sampler.seed = 100 + k;
        p.max_tokens = 40 + 13 * k;
        p.spec.kind = k % 2 ? SEER_SPEC_STREAMING : SEER_SPEC_NONE;
        tu_spec_set(&p.spec, "budget", 20);
        p.on_update = count_update;
        int32_t prompt[40];
        for (int j = 0; j < 40; j++)
            prompt[j] = 1 + (j * 37 + k * 11) % 400;
        ASSERT_OK(seer_request_new(M, prompt, 5 + 7 * k, &p, &noise[k]));
    }
    for (int k = 0; k < 3; k++)
        ASSERT_OK(seer_sched_submit(s, noise[k]));
    int active = 1;
    for (int step = 0; active; step++) {
        if (step < NG * 3 && step % 3 == 0) {
            int i = step / 3;
            g[i] = greedy_req(i, kinds[i]);
            ASSERT_OK(seer_sched_submit(s, g[i]));
        }
        if (step == 7)
            for (int k = 3; k < 6; k++)
                ASSERT_OK(seer_sched_submit(s, noise[k]));
        ASSERT_OK(seer_sched_step(s, &active));
        if (step < NG * 3)
            active = 1;
    }
    for (int i = 0; i < NG; i++) {
        char what[64];
        snprintf(what, sizeof what, "under load, %s", seer_spec_kind_name(kinds[i]));
        assert_gold(g[i], i, what);
        seer_request_free(g[i]);
    }
    for (int k = 0; k < 6; k++) {
        seer_request_stats rs;
        seer_request_get_stats(noise[k], &rs);
        assert_true(seer_request_finished(noise[k]));
        assert_true(rs.n_generated >= 1 && rs.n_generated <= 40 + 13 * k);
        seer_request_free(noise[k]);
    }
    assert_true(n_updates >= 6);
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    assert_int_equal(st.kv_pages_free, st.kv_pages_total);
    assert_int_equal(st.n_finished, NG + 6);
    assert_true(st.spec_drafted[SEER_SPEC_STREAMING] > 0);
    assert_true(st.spec_accepted[SEER_SPEC_STREAMING] > 0);
    seer_sched_free(s);
    seer_context_free(c);
}

/* A pool too small for everyone: requests are preempted and recomputed, and all finish with
 * the golden ids; every page is free at the end. */
static void test_preemption(void **state) {
    seer_context *c = mkctx(5, 24); /* 24 pages of 16: less than two full stories */
    seer_sched_params spm = {.max_batch_tokens = 32, .prefill_chunk = 4};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_request *g[NG];
    for (int i = 0; i < NG; i++) {
        g[i] = greedy_req(i, i % 2 ? SEER_SPEC_NGRAM : SEER_SPEC_NONE);
        ASSERT_OK(seer_sched_submit(s, g[i]));
    }
    run_all(s);
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    assert_true(st.n_preemptions > 0);
    int preempted = 0;
    for (int i = 0; i < NG; i++) {
        seer_request_stats rs;
        seer_request_get_stats(g[i], &rs);
        preempted += rs.n_preempted;
        assert_gold(g[i], i, "with preemption");
        seer_request_free(g[i]);
    }
    assert_int_equal(preempted, st.n_preemptions);
    assert_int_equal(st.kv_pages_free, st.kv_pages_total);
    seer_sched_free(s);
    seer_context_free(c);
}

/* Cancelled inside its prefill (a long prompt in chunks of 4): it finishes cancelled, its
 * pages are free, another request runs on unchanged. */
static void test_cancel_in_prefill(void **state) {
    seer_context *c = mkctx(4, 0);
    seer_sched_params spm = {.max_batch_tokens = 8, .prefill_chunk = 4};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    int32_t prompt[300];
    for (int j = 0; j < 300; j++)
        prompt[j] = 1 + (j * 7) % 500;
    seer_request_params p = seer_request_default_params();
    p.on_update = count_update;
    seer_request *big = NULL, *g = greedy_req(2, SEER_SPEC_NONE);
    ASSERT_OK(seer_request_new(M, prompt, 300, &p, &big));
    ASSERT_OK(seer_sched_submit(s, big));
    ASSERT_OK(seer_sched_submit(s, g));
    for (int k = 0; k < 5; k++)
        ASSERT_OK(seer_sched_step(s, NULL));
    seer_request_stats rs;
    seer_request_get_stats(big, &rs);
    assert_true(rs.n_computed > 0 && rs.n_computed < 300);
    n_updates = 0;
    seer_request_cancel(big);
    ASSERT_OK(seer_sched_step(s, NULL));
    assert_int_equal(seer_request_finish_reason(big), SEER_FINISH_CANCELLED);
    assert_int_equal(n_updates, 1);
    assert_int_equal(seer_request_tokens(big, NULL), 0);
    seer_request_free(big);
    run_all(s);
    assert_gold(g, 2, "beside a cancelled prefill");
    seer_request_free(g);
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    assert_int_equal(st.kv_pages_free, st.kv_pages_total);
    seer_sched_free(s);
    seer_context_free(c);
}

/* Runs a 200-token prompt (greedy, 8 new tokens) beside the golden request gi, or alone
 * (gi < 0), under a token budget of 64, chunks of 32 and mix_max_tokens mix; the long
 * request's ids to out, the scheduler's stats to st. */
static void run_mixed(int mix, int gi, int32_t *out, seer_sched_stats *st) {
    seer_context *c = mkctx(4, 0);
    seer_sched_params spm = {.max_batch_tokens = 64, .prefill_chunk = 32, .mix_max_tokens = mix, .prefill_stall = -1};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    int32_t prompt[200];
    for (int j = 0; j < 200; j++)
        prompt[j] = 1 + (j * 13) % 500;
    seer_request_params p = seer_request_default_params();
    p.sampler.temperature = 0;
    p.max_tokens = 8;
    seer_request *big = NULL, *g = gi >= 0 ? greedy_req(gi, SEER_SPEC_NONE) : NULL;
    ASSERT_OK(seer_request_new(M, prompt, 200, &p, &big));
    ASSERT_OK(seer_sched_submit(s, big));
    if (g) {
        ASSERT_OK(seer_sched_submit(s, g));
        if (mix) { /* a chunk alone, then the short request, then the next chunk alone */
            seer_request_stats a, b;
            ASSERT_OK(seer_sched_step(s, NULL));
            seer_request_get_stats(big, &a), seer_request_get_stats(g, &b);
            assert_true(a.n_computed == 32 && b.n_computed == 0);
            ASSERT_OK(seer_sched_step(s, NULL));
            seer_request_get_stats(big, &a), seer_request_get_stats(g, &b);
            assert_true(a.n_computed == 32 && b.n_computed == G[gi].np && b.n_generated == 1);
            ASSERT_OK(seer_sched_step(s, NULL));
            seer_request_get_stats(big, &a);
            assert_int_equal(a.n_computed, 64);
        }
    }
    run_all(s);
    const int32_t *ids;
    assert_int_equal(seer_request_tokens(big, &ids), 8);
    memcpy(out, ids, 8 * sizeof *ids);
    if (g)
        assert_gold(g, gi, "beside a long prompt");
    seer_sched_get_stats(s, st);
    assert_int_equal(st->kv_pages_free, st->kv_pages_total);
    seer_request_free(big), seer_request_free(g);
    seer_sched_free(s);
    seer_context_free(c);
}

/* mix_max_tokens: a prefill chunk above it runs alone in its call, taking turns with calls of
 * the other requests that hold at most that many tokens; without it, calls mix up to the
 * budget. The ids are the same either way on the CPU (its rows never depend on the others). */
static void test_mix_limit(void **state) {
    int gi = 0;
    for (int i = 1; i < NG; i++)
        if (G[i].np < G[gi].np)
            gi = i;
    assert_true(G[gi].np <= 16);
    int32_t alone[8], limited[8], mixed[8];
    seer_sched_stats st;
    run_mixed(16, -1, alone, &st);
    assert_int_equal(st.n_calls_alone, 0); /* nothing to mix with */
    run_mixed(16, gi, limited, &st);
    assert_int_equal(st.n_calls_alone, 6); /* six chunks of 32, the last 8 tokens mixed */
    assert_true(st.max_mixed_tokens > 0 && st.max_mixed_tokens <= 16);
    run_mixed(0, gi, mixed, &st);
    assert_int_equal(st.n_calls_alone, 0);
    assert_true(st.max_mixed_tokens > 32);
    assert_memory_equal(alone, limited, sizeof alone);
    assert_memory_equal(alone, mixed, sizeof alone);

    seer_context *c = mkctx(2, 0);
    seer_sched_params bad = {.mix_max_tokens = -1};
    seer_sched *s = (seer_sched *)&bad;
    assert_int_equal(seer_sched_init(c, bad, &s), SEER_ERR_INVALID_ARG);
    assert_null(s);
    assert_non_null(strstr(seer_last_error(), "mix_max_tokens"));
    seer_context_free(c);
}

/* A 400-token prompt (greedy, 8 new tokens) arriving while three greedy streams decode (plain,
 * ngram chains, streaming trees), under a token budget, chunk and mix_max_tokens: the most
 * steps from one round of a stream to its next while the prompt is read to *gap (1: a round
 * in every step; the step before the arrival counts as a round), the steps
 * the prompt's prefill took to *prefill_steps, its ids to out; the streams' ids must be the
 * golden ones. Without streams (alone) only the long request runs. */
static void run_arrival(int budget, int chunk, int mix, float stall, bool streams, int32_t *out, int *gap,
                        int *prefill_steps) {
    enum { NS = 3, NP = 400 };
    seer_context *c = mkctx(4, 0);
    seer_sched_params spm = {.max_batch_tokens = budget, .prefill_chunk = chunk, .mix_max_tokens = mix,
                             .prefill_stall = stall};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    const int gi[NS] = {0, 2, 3};
    seer_request *st[NS] = {0};
    for (int k = 0; k < NS && streams; k++) {
        st[k] = greedy_req(gi[k], k == 1 ? SEER_SPEC_NGRAM : k == 2 ? SEER_SPEC_STREAMING : SEER_SPEC_NONE);
        if (k == 2) { /* a tree of 6 nodes, depth 3: re-plan the request with it */
            seer_request_free(st[k]);
            seer_request_params p = seer_request_default_params();
            p.sampler.temperature = 0;
            p.max_tokens = G[gi[k]].ng;
            p.spec.kind = SEER_SPEC_STREAMING;
            tu_spec_set(&p.spec, "budget", 24);
            tu_spec_set(&p.spec, "sinks", 4);
            p.spec.gamma = 3;
            p.spec.tree_size = 6;
            p.spec.tree_depth = 3;
            ASSERT_OK(seer_request_new(M, G[gi[k]].prompt, G[gi[k]].np, &p, &st[k]));
        }
        ASSERT_OK(seer_sched_submit(s, st[k]));
    }
    /* the streams decode for a while first */
    for (int k = 0; k < NS && streams; k++)
        while (seer_request_tokens(st[k], NULL) < 8)
            ASSERT_OK(seer_sched_step(s, NULL));
    int32_t prompt[NP];
    for (int j = 0; j < NP; j++)
        prompt[j] = 1 + (j * 29) % 500;
    seer_request_params p = seer_request_default_params();
    p.sampler.temperature = 0;
    p.max_tokens = 8;
    seer_request *big = NULL;
    ASSERT_OK(seer_request_new(M, prompt, NP, &p, &big));
    ASSERT_OK(seer_sched_submit(s, big));
    int n_tok[NS], last[NS];
    for (int k = 0; k < NS && streams; k++)
        n_tok[k] = seer_request_tokens(st[k], NULL), last[k] = 0;
    *gap = 0;
    int step = 0, watched = 0; /* steps with every stream still running */
    while (seer_request_tokens(big, NULL) == 0) {
        ASSERT_OK(seer_sched_step(s, NULL));
        step++;
        assert_true(step < 10 * NP);
        bool all = true;
        for (int k = 0; k < NS && streams; k++) {
            if (seer_request_finished(st[k])) { /* free cuts: time decides how long the prompt takes */
                all = false;
                continue;
            }
            const int nt = seer_request_tokens(st[k], NULL);
            /* steps from its last round to this one, or at least to the next one */
            const int d = nt > n_tok[k] ? step - last[k] : step + 1 - last[k];
            if (nt > n_tok[k])
                n_tok[k] = nt, last[k] = step;
            if (d > *gap)
                *gap = d;
        }
        watched += all;
    }
    *prefill_steps = step;
    if (streams && stall < 0)
        assert_int_equal(watched, step); /* they decoded through the whole prefill */
    else if (streams) /* time sizes the pieces: a loaded machine may read it in whole chunks
                       * (7 of 64), but beside every stream for several steps */
        assert_true(watched >= 4);
    run_all(s);
    const int32_t *ids;
    assert_int_equal(seer_request_tokens(big, &ids), 8);
    memcpy(out, ids, 8 * sizeof *ids);
    for (int k = 0; k < NS && streams; k++) {
        assert_gold(st[k], gi[k], "a stream while a long prompt arrives");
        seer_request_free(st[k]);
    }
    seer_request_free(big);
    seer_sched_stats ss;
    seer_sched_get_stats(s, &ss);
    assert_int_equal(ss.kv_pages_free, ss.kv_pages_total);
    seer_sched_free(s);
    seer_context_free(c);
}

/* Fair scheduling with fixed cuts (CUDA's regime; prefill_stall -1 on the CPU): while a long
 * prompt is read in chunks, every decoding stream gets a round in at least every other step,
 * also when the chunk fills the whole budget (budget = chunk, mixing freely) and when a chunk
 * above mix_max_tokens fills it (CUDA's long chunks); the prompt still gets a chunk in at
 * least every other step, and a chunk that fits beside the rounds runs in every step with
 * them. Ids are the same as alone. */
static void test_fair_long_prompt(void **state) {
    const struct {
        int budget, chunk, mix, max_gap;
    } cfg[] = {{32, 32, 0, 2}, {64, 64, 16, 2}, {64, 32, 16, 2}, {48, 32, 0, 1}};
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        int32_t alone[8], loaded[8];
        int gap, steps_alone, steps;
        run_arrival(cfg[i].budget, cfg[i].chunk, cfg[i].mix, -1, false, alone, &gap, &steps_alone);
        run_arrival(cfg[i].budget, cfg[i].chunk, cfg[i].mix, -1, true, loaded, &gap, &steps);
        if (gap > cfg[i].max_gap)
            fail_msg("budget %d, chunk %d, mix_max %d: a stream waited %d steps for a round (at most %d)",
                     cfg[i].budget, cfg[i].chunk, cfg[i].mix, gap, cfg[i].max_gap);
        const int chunks = (400 + cfg[i].chunk - 1) / cfg[i].chunk;
        assert_int_equal(steps_alone, chunks);
        assert_true(steps <= 2 * chunks);
        assert_memory_equal(alone, loaded, sizeof alone);
    }
}

/* Free cuts (the CPU's default): beside decoding streams a prompt is read in pieces sized by
 * the measured step times, cut anywhere, and every stream gets a round in every step, also
 * when the chunk fills the whole budget. The prompt's ids equal those of the same prompt
 * read alone in fixed chunks of 32, and beside streams in free chunks of up to 64 or 32: its prompt tokens have the
 * same bits however they are cut (seer_context_prompt_cuts_free). */
static void test_free_cuts(void **state) {
    seer_context *c = mkctx(1, 0);
    assert_true(seer_context_prompt_cuts_free(c)); /* the CPU */
    seer_context_free(c);
    int32_t fixed[8], alone[8], loaded[8], full[8];
    int gap, steps;
    run_arrival(48, 32, 0, -1, false, fixed, &gap, &steps);
    run_arrival(48, 32, 0, 0, false, alone, &gap, &steps);
    assert_int_equal(steps, (400 + 31) / 32); /* alone: chunks of up to 32 */
    run_arrival(64, 64, 0, 0, true, full, &gap, &steps);
    assert_int_equal(gap, 1);
    run_arrival(32, 32, 0, 2.5f, true, loaded, &gap, &steps);
    assert_int_equal(gap, 1);
    assert_memory_equal(fixed, alone, sizeof alone);
    assert_memory_equal(fixed, loaded, sizeof alone);
    assert_memory_equal(fixed, full, sizeof alone);

    seer_context *c2 = mkctx(2, 0);
    seer_sched_params bad = {.prefill_stall = NAN};
    seer_sched *s = (seer_sched *)&bad;
    assert_int_equal(seer_sched_init(c2, bad, &s), SEER_ERR_INVALID_ARG);
    assert_null(s);
    bad.prefill_stall = 1e9f;
    assert_int_equal(seer_sched_init(c2, bad, &s), SEER_ERR_INVALID_ARG);
    seer_context_free(c2);
}

/* The time budget (stall.c) on given step times: a probe of 16 until both times are known,
 * then the tokens that add prefill_stall times a step of rounds alone, within [1, chunk];
 * a step quicker than the rounds' own counts as free tokens but at most halves the cost. */
static void test_stall_budget(void **state) {
    seer_stall st = {.stall = 1, .chunk = 256};
    assert_int_equal(seer_stall_tokens(&st), 16);
    seer_stall_observe(&st, 0.050, 16, 1); /* beside rounds before their time is known: ignored */
    assert_true(st.t_tok == 0);
    for (int i = 0; i < 20; i++)
        seer_stall_observe(&st, 0.010, 0, 3);
    assert_true(fabs(st.t_rounds - 0.010) < 1e-9);
    assert_int_equal(seer_stall_tokens(&st), 16);
    seer_stall_observe(&st, 0.026, 16, 3); /* 16 tokens added 16 ms: 1 ms each */
    assert_true(fabs(st.t_tok - 0.001) < 1e-12);
    assert_int_equal(seer_stall_tokens(&st), 10); /* 10 ms of prompt beside 10 ms of rounds */
    st.stall = 2.5;
    assert_int_equal(seer_stall_tokens(&st), 25);
    st.stall = 1000;
    assert_int_equal(seer_stall_tokens(&st), 256);
    st.stall = 0.01;
    assert_int_equal(seer_stall_tokens(&st), 1);
    st.stall = 1;
    seer_stall_observe(&st, 0.005, 10, 3); /* quicker than the rounds alone: halves */
    assert_true(fabs(st.t_tok - 0.0005) < 1e-12);
    assert_int_equal(seer_stall_tokens(&st), 20);
    seer_stall_observe(&st, 0.0605, 10, 0); /* a prefill alone: 6.05 ms a token, averaged */
    assert_true(fabs(st.t_tok - 0.003275) < 1e-12);
    assert_int_equal(seer_stall_tokens(&st), 3);
    seer_stall_observe(&st, NAN, 10, 0);
    assert_true(fabs(st.t_tok - 0.003275) < 1e-12);
}

/* Stop strings end generation where the text first holds one, cut off; max_tokens ends it
 * with LENGTH. */
static void test_stop_and_length(void **state) {
    seer_context *c = mkctx(4, 0);
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, seer_sched_default_params(), &s));
    /* prompt 2 ("Once upon a time"): the story's text starts ", there was a little girl" */
    const char *stops[] = {"zzz", "little girl"};
    seer_request_params p = seer_request_default_params();
    p.sampler.temperature = 0;
    p.stop = stops;
    p.n_stop = 2;
    seer_request *r = NULL;
    ASSERT_OK(seer_request_new(M, G[2].prompt, G[2].np, &p, &r));
    ASSERT_OK(seer_sched_submit(s, r));
    run_all(s);
    assert_int_equal(seer_request_finish_reason(r), SEER_FINISH_STOP);
    size_t len;
    const char *t = seer_request_text(r, &len);
    assert_string_equal(t, ", there was a ");
    assert_int_equal(len, strlen(", there was a "));
    seer_request_free(r);
    p.n_stop = 0;
    p.max_tokens = 7;
    ASSERT_OK(seer_request_new(M, G[2].prompt, G[2].np, &p, &r));
    ASSERT_OK(seer_sched_submit(s, r));
    run_all(s);
    assert_int_equal(seer_request_finish_reason(r), SEER_FINISH_LENGTH);
    assert_int_equal(seer_request_tokens(r, NULL), 7);
    seer_request_free(r);
    seer_sched_free(s);
    seer_context_free(c);
}

/* Bad requests are refused and change nothing. */
static void test_bad_requests(void **state) {
    seer_context *c = mkctx(2, 0);
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, seer_sched_default_params(), &s));
    seer_request_params p = seer_request_default_params();
    seer_request *r = NULL;
    int32_t one = 1, bad = 100000;
    p.max_tokens = 0;
    assert_int_equal(seer_request_new(M, &one, 1, &p, &r), SEER_ERR_INVALID_ARG);
    assert_null(r);
    p = seer_request_default_params();
    p.sampler.temperature = 0.f / 0.f;
    assert_int_equal(seer_request_new(M, &one, 1, &p, &r), SEER_ERR_INVALID_ARG);
    p = seer_request_default_params();
    assert_int_equal(seer_request_new(M, &bad, 1, &p, &r), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_request_new(M, &one, 0, &p, &r), SEER_ERR_INVALID_ARG);
    const char *empty[] = {""};
    p.stop = empty;
    p.n_stop = 1;
    assert_int_equal(seer_request_new(M, &one, 1, &p, &r), SEER_ERR_INVALID_ARG);
    /* a prompt of the whole context */
    p = seer_request_default_params();
    int32_t *longp = malloc(sizeof(int32_t) * 512);
    for (int j = 0; j < 512; j++)
        longp[j] = 5;
    ASSERT_OK(seer_request_new(M, longp, 512, &p, &r));
    assert_int_equal(seer_sched_submit(s, r), SEER_ERR_CONTEXT);
    seer_request_free(r);
    free(longp);
    /* speculation the context cannot run */
    p.spec.kind = SEER_SPEC_STREAMING;
    p.spec.gamma = 1000;
    ASSERT_OK(seer_request_new(M, &one, 1, &p, &r));
    assert_int_equal(seer_sched_submit(s, r), SEER_ERR_INVALID_ARG);
    /* refused requests left the scheduler as it was: a good one still runs alone */
    seer_request_free(r);
    seer_sched_stats st;
    seer_sched_get_stats(s, &st);
    assert_int_equal(st.n_waiting + st.n_running, 0);
    r = greedy_req(3, SEER_SPEC_NONE);
    ASSERT_OK(seer_sched_submit(s, r));
    assert_int_equal(seer_sched_submit(s, r), SEER_ERR_INVALID_ARG); /* twice */
    run_all(s);
    assert_gold(r, 3, "after refused requests");
    seer_request_free(r);
    seer_sched_free(s);
    seer_context_free(c);
}

/* A step that fails after its forward call (rows appended, uniforms drawn) leaves every
 * request as it was: same tokens, same KV pages, and the run goes on to the same outputs as
 * a run without the failure, sampled requests included (their generators are restored). */
static void run_mix(int fail_at, int32_t out[4][64], int n_out[4], int64_t acc[4]) {
    seer_context *c = mkctx(4, 0);
    seer_sched_params spm = {.max_batch_tokens = 16, .prefill_chunk = 4};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_request *r[4];
    for (int k = 0; k < 4; k++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = k == 0 || k == 3 ? 0.f : 0.8f;
        p.sampler.seed = 5 + k;
        p.max_tokens = 60;
        p.spec.kind = k == 1 ? SEER_SPEC_STREAMING : k == 2 ? SEER_SPEC_NGRAM : k == 3 ? SEER_SPEC_DRAFT : SEER_SPEC_NONE;
        p.spec.draft_model = M; /* the model drafts for itself: every draft is accepted */
        tu_spec_set(&p.spec, "budget", 16);
        p.spec.gamma = 3;
        ASSERT_OK(seer_request_new(M, G[k % 3 + 2].prompt, G[k % 3 + 2].np, &p, &r[k]));
        ASSERT_OK(seer_sched_submit(s, r[k]));
    }
    int active = 1;
    for (int step = 0; active; step++) {
        if (step == fail_at) {
            int before[4], free_before = seer_kv_free_pages(c);
            seer_request_stats rs[4];
            for (int k = 0; k < 4; k++) {
                before[k] = seer_request_tokens(r[k], NULL);
                seer_request_get_stats(r[k], &rs[k]);
            }
            seer_sched_fail_for_tests = 1;
            assert_int_equal(seer_sched_step(s, &active), SEER_ERR_BACKEND);
            assert_int_equal(seer_sched_fail_for_tests, 0);
            assert_int_equal(seer_kv_free_pages(c), free_before);
            for (int k = 0; k < 4; k++) {
                seer_request_stats now;
                seer_request_get_stats(r[k], &now);
                assert_int_equal(seer_request_tokens(r[k], NULL), before[k]);
                assert_int_equal(now.n_computed, rs[k].n_computed);
                assert_int_equal(now.drafted, rs[k].drafted);
            }
        }
        ASSERT_OK(seer_sched_step(s, &active));
    }
    for (int k = 0; k < 4; k++) {
        const int32_t *ids;
        n_out[k] = seer_request_tokens(r[k], &ids);
        memcpy(out[k], ids, sizeof(int32_t) * n_out[k]);
        seer_request_stats rs;
        seer_request_get_stats(r[k], &rs);
        acc[k] = rs.accepted;
        seer_request_free(r[k]);
    }
    seer_sched_free(s);
    seer_context_free(c);
}

static void test_failed_step_changes_nothing(void **state) {
    int32_t ref[4][64], got[4][64];
    int nr[4], ng[4];
    int64_t ar[4], ag[4];
    run_mix(-1, ref, nr, ar);
    assert_true(ar[3] > 0);
    for (int fail_at = 1; fail_at < 30; fail_at += 7) {
        run_mix(fail_at, got, ng, ag);
        for (int k = 0; k < 4; k++) {
            assert_int_equal(ng[k], nr[k]);
            assert_memory_equal(got[k], ref[k], sizeof(int32_t) * nr[k]);
            assert_int_equal(ag[k], ar[k]); /* the drafters drafted the same after the failure */
        }
    }
}

/* The prefix cache: a request whose prompt starts with a cached prompt forks its pages, and
 * generates exactly what it generates without the cache; entries are bounded and evicted
 * least recently used; at the end only the cache holds pages. */
static void run_prompts(int cache, int32_t (*prompts)[96], const int *np, int n, int32_t out[][48], int *reused,
                        seer_sched_stats *st_out) {
    seer_context *c = mkctx(6, 0);
    seer_sched_params spm = {.max_batch_tokens = 32, .prefill_chunk = 16, .prefix_cache = cache};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    for (int i = 0; i < n; i++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0;
        p.max_tokens = 48;
        p.ignore_eos = true;
        seer_request *r = NULL;
        ASSERT_OK(seer_request_new(M, prompts[i], np[i], &p, &r));
        ASSERT_OK(seer_sched_submit(s, r));
        run_all(s);
        const int32_t *ids;
        assert_int_equal(seer_request_tokens(r, &ids), 48);
        memcpy(out[i], ids, sizeof(int32_t) * 48);
        seer_request_stats rs;
        seer_request_get_stats(r, &rs);
        reused[i] = rs.n_prefix_reused;
        seer_request_free(r);
    }
    seer_sched_get_stats(s, st_out);
    assert_int_equal(st_out->kv_pages_free + st_out->kv_pages_cached, st_out->kv_pages_total);
    seer_sched_free(s);
    assert_int_equal(seer_kv_free_pages(c), st_out->kv_pages_total);
    seer_context_free(c);
}

static void test_prefix_cache(void **state) {
    enum { NP = 5 };
    int32_t prompts[NP][96];
    int np[NP];
    /* 0: a story's first 70 tokens; 1: the same + 9 more; 2: another text; 3: 0 + 20 more;
     * 4: 0 again */
    for (int j = 0; j < 90; j++)
        prompts[0][j] = prompts[1][j] = prompts[3][j] = prompts[4][j] = j ? G[1].gold[j] : 1;
    np[0] = np[4] = 70, np[1] = 79, np[3] = 90;
    for (int j = 0; j < 60; j++)
        prompts[2][j] = j ? G[4].gold[j] : 1;
    np[2] = 60;
    int32_t ref[NP][48], got[NP][48];
    int r0[NP], r1[NP];
    seer_sched_stats st0, st1;
    run_prompts(0, prompts, np, NP, ref, r0, &st0);
    run_prompts(2, prompts, np, NP, got, r1, &st1);
    for (int i = 0; i < NP; i++) {
        assert_int_equal(r0[i], 0);
        assert_memory_equal(got[i], ref[i], sizeof ref[i]);
    }
    assert_int_equal(r1[0], 0);
    assert_int_equal(r1[1], 64); /* 70 cut to the unit of 16 */
    assert_int_equal(r1[2], 0);
    assert_int_equal(r1[3], 64); /* then its 80 replace the 64 of the same text */
    assert_int_equal(r1[4], 64);
    assert_int_equal(st1.prefix_hits, 3 * 64 / 16);
    assert_int_equal(st1.prefix_entries, 2);
    assert_int_equal(st0.prefix_hits, 0);
    /* one slot: text 2 evicts text 0, which 3 then computes again */
    run_prompts(1, prompts, np, NP, got, r1, &st1);
    for (int i = 0; i < NP; i++)
        assert_memory_equal(got[i], ref[i], sizeof ref[i]);
    assert_int_equal(r1[1], 64);
    assert_int_equal(r1[3], 0);
    assert_int_equal(r1[4], 64);
    assert_int_equal(st1.prefix_entries, 1);
}

/* Speculation classes: up to 8 distinct settings at once (a ninth is refused, changing
 * nothing); a class whose requests are gone is reused, so settings in sequence are unbounded. */
static void test_spec_classes(void **state) {
    seer_context *c = mkctx(12, 0);
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, seer_sched_default_params(), &s));
    seer_request *r[9];
    for (int k = 0; k < 9; k++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0;
        p.max_tokens = 8;
        p.spec.kind = SEER_SPEC_NGRAM;
        p.spec.gamma = 1 + k;
        ASSERT_OK(seer_request_new(M, G[2].prompt, G[2].np, &p, &r[k]));
        seer_status st = seer_sched_submit(s, r[k]);
        assert_int_equal(st, k < 8 ? SEER_OK : SEER_ERR_INVALID_ARG);
    }
    run_all(s);
    for (int k = 0; k < 9; k++) {
        assert_int_equal(seer_request_tokens(r[k], NULL), k < 8 ? 8 : 0);
        seer_request_free(r[k]);
    }
    for (int k = 0; k < 12; k++) { /* one after the other: classes are reused */
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0;
        p.max_tokens = 4;
        p.spec.kind = SEER_SPEC_STREAMING;
        tu_spec_set(&p.spec, "budget", 8 + k);
        seer_request *q = NULL;
        ASSERT_OK(seer_request_new(M, G[2].prompt, G[2].np, &p, &q));
        ASSERT_OK(seer_sched_submit(s, q));
        run_all(s);
        assert_int_equal(seer_request_tokens(q, NULL), 4);
        seer_request_free(q);
    }
    seer_sched_free(s);
    seer_context_free(c);
}

/* Settings that differ only in the draft weights are distinct classes (a class's generator
 * multiplies its draft steps by one set of weights): with four budgets, each with and without
 * the model's draft weights, the eight classes are full and a ninth setting is refused; every
 * request's greedy tokens equal plain decoding's, with or without the draft weights. */
static void test_spec_classes_draft_weights(void **state) {
    (void)state;
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    mp.draft_weights = "q8_0";
    seer_model *md = NULL;
    ASSERT_OK(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &md));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = 10;
    cp.n_batch_max = 64;
    cp.page_size = 16;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(md, cp, &c));
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, seer_sched_default_params(), &s));
    seer_request *r[9];
    for (int k = 0; k < 9; k++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0;
        p.max_tokens = G[2].ng;
        p.spec.kind = SEER_SPEC_STREAMING;
        p.spec.gamma = 3;
        p.spec.draft_weights = k % 2 != 0;
        tu_spec_set(&p.spec, "budget", 16 + 8 * (k / 2));
        ASSERT_OK(seer_request_new(md, G[2].prompt, G[2].np, &p, &r[k]));
        assert_int_equal(seer_sched_submit(s, r[k]), k < 8 ? SEER_OK : SEER_ERR_INVALID_ARG);
    }
    run_all(s);
    for (int k = 0; k < 9; k++) {
        const int32_t *out = NULL;
        const int n = seer_request_tokens(r[k], &out);
        assert_int_equal(n, k < 8 ? G[2].ng : 0);
        if (k < 8)
            assert_memory_equal(out, G[2].gold, sizeof(int32_t) * (size_t)n);
        seer_request_free(r[k]);
    }
    seer_sched_free(s);
    seer_context_free(c);
    seer_model_free(md);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_alone),
        cmocka_unit_test(test_golden_under_load),
        cmocka_unit_test(test_quantkv_requests),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_cancel_in_prefill),
        cmocka_unit_test(test_mix_limit),
        cmocka_unit_test(test_fair_long_prompt),
        cmocka_unit_test(test_free_cuts),
        cmocka_unit_test(test_stall_budget),
        cmocka_unit_test(test_stop_and_length),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_spec_classes_draft_weights),
        cmocka_unit_test(test_failed_step_changes_nothing),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_spec_classes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
