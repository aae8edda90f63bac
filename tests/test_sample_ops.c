/*
 * test_sample_ops.c: the CPU backend's sampling ops (sample_rows, accept_chains) are the host
 * sampler itself: on random logits, every configuration of the transform (penalty with
 * duplicate and out-of-range history, temperature 0, top-k with ties, top-p, min-p, -inf and
 * NaN logits), kept, in place and not kept, their probabilities are bit-identical to
 * seer_sampler_probs_with_history and their ids to seer_argmax / seer_sample_from_probs;
 * accept_chains equals the sequential rule of speculative sampling written out here with
 * the same uniforms (vector and one-hot q, the wrong-rule hook). Bad parameters are refused.
 * Other backends are checked against these ops (test_gpu_sample.c).
 */
#include "testutil.h"

#include "backend/backend.h"
#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float t;
    int k;
    float p, min_p, pen;
} cfg;

static const cfg CFGS[] = {
    {0.8f, 40, 0.95f, 0.05f, 1.0f}, {1.0f, 0, 1.0f, 0.0f, 1.0f},  {0.7f, 0, 0.9f, 0.0f, 1.0f},
    {1.3f, 0, 1.0f, 0.1f, 1.0f},    {0.9f, 100, 0.5f, 0.0f, 1.3f}, {0.0f, 40, 0.95f, 0.05f, 1.2f},
    {0.0f, 0, 1.0f, 0.0f, 1.0f},    {1.0f, 1, 1.0f, 0.0f, 1.0f},   {100.f, 5, 0.99f, 0.0f, 0.7f},
};
#define N_CFG ((int)(sizeof CFGS / sizeof *CFGS))

static seer_sampler_params params_of(const cfg *c) {
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = c->t;
    sp.top_k = c->k;
    sp.top_p = c->p;
    sp.min_p = c->min_p;
    sp.repeat_penalty = c->pen;
    sp.repeat_last_n = 16;
    sp.frequency_penalty = c->pen != 1.0f ? 0.35f : 0.0f;
    sp.presence_penalty = c->pen != 1.0f ? -0.6f : 0.0f;
    return sp;
}

/* Logits of kind 0 peaked, 1 a few levels (large ties), 2 all equal, 3 with -inf and NaN. */
static void fill_logits(float *x, int V, int kind, uint64_t *rng) {
    for (int i = 0; i < V; i++) {
        float v = 3.f * tu_rand_uniform(rng);
        if (kind == 1)
            v = roundf(v);
        if (kind == 2)
            v = 0.25f;
        if (kind == 3 && tu_rand_u64(rng) % 3 == 0)
            v = tu_rand_u64(rng) % 7 == 0 ? NAN : -INFINITY;
        x[i] = v;
    }
}

static void test_sample_rows_equal_host(void **state) {
    (void)state;
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    uint64_t rng = 5;
    const int Vs[] = {1, 7, 300, 5000};
    for (size_t vi = 0; vi < sizeof Vs / sizeof *Vs; vi++) {
        const int V = Vs[vi];
        float *lg = malloc(sizeof(float) * V), *want = malloc(sizeof(float) * V);
        float *got = malloc(sizeof(float) * V), *inpl = malloc(sizeof(float) * V);
        void *scratch = malloc(seer_sampler_scratch_bytes(V));
        int32_t hist[24];
        for (int c = 0; c < N_CFG; c++)
            for (int kind = 0; kind < 4; kind++) {
                fill_logits(lg, V, kind, &rng);
                for (int i = 0; i < 24; i++) /* duplicates and ids outside [0, V) */
                    hist[i] = i % 5 == 4 ? (i % 2 ? -3 : V + 2) : (int32_t)(tu_rand_u64(&rng) % (uint64_t)V);
                seer_sampler_params sp = params_of(&CFGS[c]);
                seer_sampler_probs_with_history(&sp, hist, 24, lg, want, V, scratch);
                const double u = (double)(tu_rand_u64(&rng) >> 11) * 0x1.0p-53;
                const int32_t want_id = sp.temperature > 0 ? seer_sample_from_probs(want, V, u) : seer_argmax(want, V);
                memcpy(inpl, lg, sizeof(float) * V);
                seer_sample_row rows[3] = {
                    {.logits = lg, .probs = got, .sp = &sp, .hist = hist, .n_hist = 24, .u = u},
                    {.logits = inpl, .probs = inpl, .sp = &sp, .hist = hist, .n_hist = 24, .u = u},
                    {.logits = lg, .probs = NULL, .sp = &sp, .hist = hist, .n_hist = 24, .u = -1},
                };
                int32_t ids[3];
                ASSERT_OK(be->ops->sample_rows(be, rows, 3, V, ids));
                assert_memory_equal(got, want, sizeof(float) * V);
                assert_memory_equal(inpl, want, sizeof(float) * V);
                assert_int_equal(ids[0], want_id);
                assert_int_equal(ids[1], want_id);
                assert_int_equal(ids[2], sp.temperature > 0 ? -1 : want_id);
                ASSERT_OK(be->ops->sample_rows(be, rows, 1, V, NULL)); /* no ids wanted */
                assert_memory_equal(got, want, sizeof(float) * V);
            }
        free(lg), free(want), free(got), free(inpl), free(scratch);
    }
    /* bad parameters: refused with a message, nothing written */
    float lg[4] = {1, 2, 3, 4}, pr[4] = {9, 9, 9, 9};
    seer_sampler_params bad = seer_sampler_default_params();
    bad.top_p = 0;
    seer_sample_row r = {.logits = lg, .probs = pr, .sp = &bad, .u = 0.5};
    int32_t id = 77;
    assert_int_equal(be->ops->sample_rows(be, &r, 1, 4, &id), SEER_ERR_INVALID_ARG);
    assert_int_equal(id, 77);
    assert_true(pr[0] == 9.f);
    be->ops->free(be);
}

/* The sequential rule of src/spec/verify.c, with the uniform of each step given. */
static int ref_rule(const float *p, const float *q, const int32_t *d, int nd, const double *u,
                    bool wrong, int V, int32_t *next) {
    float *oh = malloc(sizeof(float) * V), *tmp = malloc(sizeof(float) * V);
    int i = 0;
    for (;; i++) {
        const float *pi = p + (size_t)i * V;
        if (i == nd) {
            *next = seer_sample_from_probs(pi, V, u[i]);
            break;
        }
        const float *qi = oh;
        if (q)
            qi = q + (size_t)i * V;
        else
            seer_probs_one_hot(oh, V, d[i]);
        if (qi[d[i]] > 0 && u[i] * qi[d[i]] < pi[d[i]])
            continue;
        *next = wrong ? seer_sample_from_probs(pi, V, u[i + 1]) : seer_sample_residual(pi, qi, V, u[i + 1], tmp);
        break;
    }
    free(oh), free(tmp);
    return i;
}

static void test_accept_chains_equal_rule(void **state) {
    (void)state;
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    enum { V = 200, G = 5, N = 400 };
    uint64_t rng = 9;
    void *scratch = malloc(seer_sampler_scratch_bytes(V));
    float *p = malloc(sizeof(float) * N * (G + 1) * V), *q = malloc(sizeof(float) * N * G * V);
    float *lg = malloc(sizeof(float) * V);
    int32_t *d = malloc(sizeof(int32_t) * N * G);
    double *u = malloc(sizeof(double) * N * (G + 1));
    seer_accept_chain *ch = malloc(sizeof *ch * N);
    seer_sampler_params sp = seer_sampler_default_params();
    sp.top_k = 20;
    int total_acc = 0, total_d = 0;
    for (int k = 0; k < N; k++) {
        const int nd = k % (G + 1);
        const bool onehot = k % 3 == 0, wrong = k % 7 == 0;
        for (int i = 0; i <= nd; i++) {
            fill_logits(lg, V, 0, &rng);
            seer_sampler_probs_with_history(&sp, NULL, 0, lg, p + ((size_t)k * (G + 1) + i) * V, V, scratch);
            if (i == nd)
                break;
            float *qi = q + ((size_t)k * G + i) * V;
            for (int j = 0; j < V; j++) /* a draft that agrees with the target often */
                lg[j] += 0.7f * tu_rand_uniform(&rng);
            seer_sampler_probs_with_history(&sp, NULL, 0, lg, qi, V, scratch);
            const double ud = (double)(tu_rand_u64(&rng) >> 11) * 0x1.0p-53;
            d[k * G + i] = onehot && i % 2 ? (int32_t)(tu_rand_u64(&rng) % V) : seer_sample_from_probs(qi, V, ud);
        }
        for (int i = 0; i <= nd; i++)
            u[k * (G + 1) + i] = (double)(tu_rand_u64(&rng) >> 11) * 0x1.0p-53;
        ch[k] = (seer_accept_chain){.nd = nd, .draft = d + k * G, .p = p + (size_t)k * (G + 1) * V,
                                    .q = onehot ? NULL : q + (size_t)k * G * V, .u = u + k * (G + 1),
                                    .resample_from_p = wrong};
    }
    int32_t *acc = malloc(sizeof(int32_t) * N), *nx = malloc(sizeof(int32_t) * N);
    ASSERT_OK(be->ops->accept_chains(be, ch, N, V, acc, nx));
    for (int k = 0; k < N; k++) {
        int32_t want_next;
        const int want = ref_rule(ch[k].p, ch[k].q, ch[k].draft, ch[k].nd, ch[k].u, ch[k].resample_from_p, V, &want_next);
        if (acc[k] != want || nx[k] != want_next)
            fail_msg("chain %d: accepted %d next %d, the rule gives %d and %d", k, acc[k], nx[k], want, want_next);
        total_acc += acc[k];
        total_d += ch[k].nd;
    }
    /* the chains exercise both outcomes */
    assert_true(total_acc > total_d / 10 && total_acc < total_d);
    free(scratch), free(p), free(q), free(lg), free(d), free(u), free(ch), free(acc), free(nx);
    be->ops->free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_rows_equal_host),
        cmocka_unit_test(test_accept_chains_equal_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
