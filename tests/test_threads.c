/*
 * test_threads.c: one model, several threads, each with its own context and scheduler (and
 * tokenizing on the shared model). On the CPU every thread's greedy requests give the golden
 * ids of the tiny real model; on CUDA (where the bits differ from the CPU's) every thread's
 * greedy and sampled ids equal those of the same thread's work run alone. Contexts keep their
 * execution state (the CPU backend's scratch and thread pool; CUDA's stream, graphs and
 * staging) to themselves, so this is also the multi-threaded run scripts/test.sh gives to
 * ThreadSanitizer.
 */
#include "testutil.h"

#ifdef SEER_HAVE_CUDA
#include "backend/backend.h"
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NG = 5, NT = 3, MAXI = 600, NS = 3, SMAX = 80 };

static struct {
    int32_t prompt[64];
    int np;
    int32_t gold[MAXI];
    int ng;
    char text[64];
} G[NG];
static seer_model *M;
static bool check_gold; /* compare greedy ids with the golden file (the CPU's bits) */

static int parse_ids(char *s, int32_t *out, int cap) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ","))
        out[n++] = (int32_t)atoi(tok);
    return n;
}

typedef struct {
    int id;
    int failures;
    char why[256];
    int32_t sampled[NS][SMAX]; /* the sampled requests' ids: the same seeds in every thread */
    int n_sampled[NS];
    int32_t greedy[NG][MAXI];
    int n_greedy[NG];
} worker;

static void *work(void *arg) {
    worker *w = arg;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = 4;
    cp.n_batch_max = 32;
    seer_context *c = NULL;
    seer_sched *s = NULL;
    seer_sched_params sp = {.max_batch_tokens = 32, .prefill_chunk = 8};
    if (seer_context_init(M, cp, &c) != SEER_OK || seer_sched_init(c, sp, &s) != SEER_OK) {
        w->failures++;
        snprintf(w->why, sizeof w->why, "set-up: %s", seer_last_error());
        seer_context_free(c);
        return NULL;
    }
    seer_request *r[NG] = {0};
    for (int i = 0; i < NG; i++) {
        /* the prompt as text, tokenized here, on the shared model */
        int32_t ids[64];
        int n = 0;
        if (seer_tokenize(M, G[i].text, strlen(G[i].text), true, false, ids, 64, &n) != SEER_OK ||
            n != G[i].np || memcmp(ids, G[i].prompt, sizeof(int32_t) * n)) {
            w->failures++;
            snprintf(w->why, sizeof w->why, "prompt %d tokenized differently", i);
            continue;
        }
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0;
        p.max_tokens = G[i].ng;
        p.spec.kind = (seer_spec_kind)((i + w->id) % 3 == 1 ? SEER_SPEC_STREAMING
                                       : (i + w->id) % 3 == 2 ? SEER_SPEC_NGRAM : SEER_SPEC_NONE);
        tu_spec_set(&p.spec, "budget", 24);
        p.spec.gamma = 3;
        if (seer_request_new(M, ids, n, &p, &r[i]) != SEER_OK || seer_sched_submit(s, r[i]) != SEER_OK) {
            w->failures++;
            snprintf(w->why, sizeof w->why, "request %d: %s", i, seer_last_error());
        }
    }
    /* sampled requests (the sampler's scratch on the backend), seeded alike in every thread */
    seer_request *q[NS] = {0};
    for (int k = 0; k < NS; k++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0.9f;
        p.sampler.top_k = 40;
        p.sampler.seed = 11 + k;
        p.max_tokens = SMAX;
        p.spec.kind = k == 1 ? SEER_SPEC_STREAMING : SEER_SPEC_NONE;
        tu_spec_set(&p.spec, "budget", 24);
        if (seer_request_new(M, G[k].prompt, G[k].np, &p, &q[k]) != SEER_OK || seer_sched_submit(s, q[k]) != SEER_OK) {
            w->failures++;
            snprintf(w->why, sizeof w->why, "sampled request %d: %s", k, seer_last_error());
        }
    }
    for (int active = 1, steps = 0; active && steps < 100000; steps++)
        if (seer_sched_step(s, &active) != SEER_OK) {
            w->failures++;
            snprintf(w->why, sizeof w->why, "step: %s", seer_last_error());
            break;
        }
    for (int i = 0; i < NG; i++) {
        const int32_t *ids;
        int n = seer_request_tokens(r[i], &ids);
        if (r[i] && check_gold && (n != G[i].ng || memcmp(ids, G[i].gold, sizeof(int32_t) * n))) {
            w->failures++;
            snprintf(w->why, sizeof w->why, "prompt %d: ids differ from the reference", i);
        }
        w->n_greedy[i] = r[i] ? n : 0;
        if (r[i])
            memcpy(w->greedy[i], ids, sizeof(int32_t) * n);
        seer_request_free(r[i]);
    }
    for (int k = 0; k < NS; k++) {
        const int32_t *ids;
        w->n_sampled[k] = seer_request_tokens(q[k], &ids);
        memcpy(w->sampled[k], ids, sizeof(int32_t) * w->n_sampled[k]);
        seer_request_free(q[k]);
    }
    seer_sched_free(s);
    seer_context_free(c);
    return NULL;
}

static void load_golden(void) {
    size_t sz;
    char *tsv = (char *)tu_read_file(tu_data_path("golden/stories260K-greedy.tsv"), &sz);
    assert_non_null(tsv);
    tsv = realloc(tsv, sz + 1);
    tsv[sz] = 0;
    char *save = NULL;
    int n = 0;
    strtok_r(tsv, "\n", &save);
    for (char *line = strtok_r(NULL, "\n", &save); line && n < NG; line = strtok_r(NULL, "\n", &save)) {
        char *f1 = strchr(line, '\t') + 1, *f2 = strchr(f1, '\t');
        *f2++ = 0;
        *strchr(f2, '\t') = 0;
        *(f1 - 1) = 0;
        snprintf(G[n].text, sizeof G[n].text, "%s", line);
        G[n].np = parse_ids(f1, G[n].prompt, 64);
        G[n].ng = parse_ids(f2, G[n].gold, MAXI);
        n++;
    }
    free(tsv);
    assert_int_equal(n, NG);
}

/* NT workers at once (or one after another with !together); fails on any worker's failure. */
static void run_workers(worker *w, bool together) {
    pthread_t th[NT];
    for (int t = 0; t < NT; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].id = t;
        if (together)
            assert_int_equal(pthread_create(&th[t], NULL, work, &w[t]), 0);
        else
            work(&w[t]);
    }
    if (together)
        for (int t = 0; t < NT; t++)
            pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++)
        if (w[t].failures)
            fail_msg("thread %d: %d failures, last: %s", t, w[t].failures, w[t].why);
}

static void test_contexts_in_threads(void **state) {
    (void)state;
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    ASSERT_OK(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &M));
    load_golden();
    check_gold = true;
    static worker w[NT];
    run_workers(w, true);
    for (int t = 1; t < NT; t++)
        for (int k = 0; k < NS; k++) {
            assert_true(w[t].n_sampled[k] > 0);
            assert_int_equal(w[t].n_sampled[k], w[0].n_sampled[k]);
            assert_memory_equal(w[t].sampled[k], w[0].sampled[k], sizeof(int32_t) * w[0].n_sampled[k]);
        }
    seer_model_free(M);
}

/* CUDA: contexts of one model in threads at once, each on its own stream; every thread's ids
 * (greedy and sampled) equal its own work's alone. */
static void test_cuda_contexts_in_threads(void **state) {
    (void)state;
#ifdef SEER_HAVE_CUDA
    if (!seer_backend_cuda_available()) {
        printf("skipped: no CUDA device\n");
        return;
    }
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CUDA;
    ASSERT_OK(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &M));
    load_golden();
    check_gold = false;
    static worker alone[NT], together[NT];
    run_workers(alone, false);
    run_workers(together, true);
    int differ = 0;
    for (int t = 0; t < NT; t++) {
        for (int i = 0; i < NG; i++) {
            assert_true(alone[t].n_greedy[i] > 0);
            differ += together[t].n_greedy[i] != alone[t].n_greedy[i] ||
                      memcmp(together[t].greedy[i], alone[t].greedy[i], sizeof(int32_t) * alone[t].n_greedy[i]);
        }
        for (int k = 0; k < NS; k++)
            differ += together[t].n_sampled[k] != alone[t].n_sampled[k] ||
                      memcmp(together[t].sampled[k], alone[t].sampled[k], sizeof(int32_t) * alone[t].n_sampled[k]);
    }
    printf("threads: cuda: %d threads x %d requests, %d differ from the same work alone %s\n", NT, NG + NS,
           differ, differ ? "FAIL" : "ok");
    assert_int_equal(differ, 0);
    seer_model_free(M);
#else
    printf("skipped: no CUDA device (built without CUDA)\n");
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contexts_in_threads),
        cmocka_unit_test(test_cuda_contexts_in_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
