/* testutil.h: small helpers shared by the cmocka tests (paths, temp files, random data). */
#ifndef SEER_TESTUTIL_H
#define SEER_TESTUTIL_H

#include <setjmp.h> /* cmocka needs these before its header */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "seer.h"
#include "seer_bench.h"

/* Skipped tests reach CTest's summary: skip() is counted, and a group in which something
 * was skipped and nothing failed exits with TU_SKIP_CODE, which CMakeLists.txt declares as
 * CTest's SKIP_RETURN_CODE (cmocka itself exits 0 then). CTest's unit is the executable:
 * one skipped test marks its whole file skipped; cmocka's output names which tests were. */
#define TU_SKIP_CODE 77
void tu_note_skip(void);
int tu_group_result(int n_failed);
#undef skip
#define skip() (tu_note_skip(), _skip(__FILE__, __LINE__))
#undef cmocka_run_group_tests
#define cmocka_run_group_tests(group_tests, group_setup, group_teardown)                      \
    tu_group_result(_cmocka_run_group_tests(#group_tests, group_tests,                        \
                                            sizeof(group_tests) / sizeof((group_tests)[0]),    \
                                            group_setup, group_teardown))

/* tests/data/<rel> (or $SEER_DATA_DIR/<rel>, a folder of the same layout) as a path in a
 * static buffer. */
const char *tu_data_path(const char *rel);
/* A fresh path under a per-process temp directory, name given by the caller. */
const char *tu_tmp_path(const char *name);
/* Deterministic xorshift random numbers. */
uint64_t tu_rand_u64(uint64_t *state);
float tu_rand_uniform(uint64_t *state); /* [-1, 1) */
void tu_fill_random(float *x, size_t n, uint64_t *state);
/* Max |a-b| / max(1, max|b|) over n. */
double tu_rel_err(const float *a, const float *b, size_t n);
/* Reads a whole file; returns a malloc'd buffer or NULL. */
uint8_t *tu_read_file(const char *path, size_t *size); /* NUL after the data (not counted) */
int tu_write_file(const char *path, const void *data, size_t size);

/* ---- generation (the speculation tests) ---- */

/* A CPU model with two threads, loaded or the test failed. */
seer_model *tu_load_cpu(const char *path);
/* Greedy sampler parameters (temperature 0). */
seer_sampler_params tu_greedy(void);
/* A model on the given backend with two threads and tp ranks (0: none), loaded or the test
 * failed. */
seer_model *tu_load_tp(const char *path, seer_backend_kind kind, int tp);
/* Speculation of kind with G = gamma and budget K, and the small sinks, chunks, SnapKV window
 * and refresh period the tiny models' tests use. */
seer_spec_params tu_spec(seer_spec_kind kind, int gamma, int budget);
/* A drafter setting by name (seer_spec_set_num), failing the test when it is refused. */
void tu_spec_set(seer_spec_params *sp, const char *name, double value);
/* A drafter setting's value by name (seer_spec_get). */
double tu_spec_get(const seer_spec_params *sp, const char *name);
/* The logits [n][V] of every position of a prompt of n (<= 128) tokens in one call of a fresh
 * context, and the queries of the positions flagged in cap into q (host [n_layers][n_cap][H*Dh])
 * unless q is NULL. */
void tu_prefill_logits(seer_model *m, const int32_t *tok, int n, float *logits, const uint8_t *cap, float *q);

/* Feeds toks[0..n) (n <= 256 a call) to a new sequence of c in calls of cuts[] tokens (the
 * last repeats), those before index upto flagged as prompt tokens, the logits of every token
 * to out [n][V] (the buffer poisoned with NaN before each call, so a row left unwritten
 * fails a comparison). Beside each call, a second sequence `other` (when >= 0) decodes one
 * token first, so the prompt never has a call to itself. The new sequence is freed after. */
void tu_feed_cuts(seer_context *c, const int32_t *toks, int n, const int *cuts, int n_cuts, int upto,
                  seer_seq_id other, float *out, int V);

/* One sequence's emitted tokens. */
typedef struct {
    int n;
    int32_t ids[600];
} tu_output;

/* The context tu_gen_run makes (its n_seq_max is the number of prompts). */
typedef struct {
    int n_ctx;
    int page_size;
    int n_batch_max;
    int kv_quant_bits;
    seer_kv_type kv_type;                    /* how the pool stores K/V (0: full precision) */
    float synthetic_accept;                  /* seer_gen_set_synthetic's (0, NULL: none) */
    const seer_accept_trace *synthetic_trace;
} tu_gen_ctx;

/* Generates from n (<= 8) prompts together in one seer_gen with spec: prompt i is
 * prompts[i * stride ..] of plen[i] tokens, sampled with seed sp.seed + i. Steps until none is
 * active, copies each output to out[i] and checks it finished, and checks that freeing the
 * generator gives every KV page back. Returns the generator's stats, and its auto stats in
 * *as unless as is NULL. */
seer_spec_stats tu_gen_run(seer_model *m, seer_spec_params spec, const int32_t *prompts, int stride,
                           const int *plen, int n, int max_new, seer_sampler_params sp, tu_gen_ctx cx,
                           tu_output *out, seer_spec_auto_stats *as);
/* Fails, naming what, unless a equals the plain decoding b token for token. */
void tu_assert_same(const tu_output *a, const tu_output *b, const char *what);
/* The first five prompts of tests/data/golden/stories260K-greedy.tsv and their reference
 * ids; returns how many rows it read. */
int tu_read_golden(int32_t prompts[5][64], int *plen, tu_output *gold);

/* Speculative sampling in distribution (test_spec, test_spec_tree and test_spec_hier on the
 * CPU, test_gpu_sample on the GPU): the exact joint distribution of the first three emitted
 * tokens (the first from the prefill, the next two from the first speculation round)
 * computed from the target alone, against n_runs seeded generations with speculation. */
typedef struct {
    int32_t t[3];
    double p;
} tu_cell;
/* Upper critical value of chi-square with k degrees of freedom at tail probability 1e-6
 * (Wilson-Hilferty). */
double tu_chi2_crit(int k);
/* The setting every distribution test shares: the target m; a prompt of 24 tokens that
 * repeats with period 6 (the n-gram draft finds matches in it); sampling at
 * temperature 0.9 with top-k 4, top-p 0.9 and min-p 0.02 (peaked, yet several tokens left at
 * each step); and the exact cells of the first three tokens (tu_dist_init checks there are at
 * least 8: the distribution is not degenerate). */
typedef struct {
    seer_model *m;
    int32_t prompt[24];
    seer_sampler_params sp;
    tu_cell cells[64]; /* top-k 4: at most 4 * 4 * 4 */
    int nc;
    int kv_bits; /* kv_quant_bits of the runs' context (0 unless a test sets it) */
    int max_new; /* tokens each run generates (3 unless a test sets more: the first three are
                  * counted, and the first round then drafts past the third) */
    seer_kv_type kv_type; /* the KV type of the target the cells and the runs use */
} tu_dist;
void tu_dist_init(tu_dist *d, seer_model *m);
/* The target with its KV stored as t: the exact cells computed again from it. */
void tu_dist_set_kv_type(tu_dist *d, seer_kv_type t);
/* Runs n_runs generations with spec (seeds 1000, 1001, ...) and computes the chi-square
 * statistic of their first three tokens against the exact cells, divided by the critical
 * value: it asserts that no run left the target's support and that the ratio is < 1 (the test
 * passes). With wrong_rule not NULL, *wrong_rule (a flag of the library that breaks a rule on
 * purpose) is 1 during the runs, and it asserts the ratio is > 1 instead: the same test can
 * tell a wrong rule. Prints what (printf-style) with the ratio; returns the ratio. */
double tu_dist_expect(const tu_dist *d, seer_spec_params spec, int n_runs, int *wrong_rule, const char *what,
                      ...) __attribute__((format(printf, 5, 6)));

/* The test builds' hooks: tests that use them compile src/spec/verify.c,
 * src/spec/draft_hierarchy.c and src/sched/sched.c into themselves with SEER_TEST_HOOKS
 * (CMakeLists.txt), and the library's copies of those files have no hooks.
 *   seer_verify_wrong_rule_for_tests: nonzero, a rejected draft token is replaced by a sample
 *     from p instead of the residual (NOT exact);
 *   seer_hier_wrong_rule_for_tests: likewise at the hierarchy's middle level;
 *   seer_sched_fail_for_tests: > 0, counts down once per scheduler step that reaches the end
 *     of its forward call and verification; the step at which it reaches 0 fails there. */
extern int seer_verify_wrong_rule_for_tests;
extern int seer_hier_wrong_rule_for_tests;
/* seer_constrain_wrong_rule_for_tests: nonzero, the target's rows lose a constraint's mask
 * (the drafter's keep it), which is NOT exact (test_spec_constrain). */
extern int seer_constrain_wrong_rule_for_tests;
extern int seer_sched_fail_for_tests;

#define ASSERT_OK(expr)                                                                   \
    do {                                                                                  \
        seer_status s_ = (expr);                                                          \
        if (s_ != SEER_OK)                                                                \
            fail_msg("%s -> %s: %s", #expr, seer_status_str(s_), seer_last_error());      \
    } while (0)

#endif
