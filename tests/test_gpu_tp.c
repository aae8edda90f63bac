/*
 * test_gpu_tp.c: tensor parallelism on a GPU (skipped without one): NCCL's communicator of one
 * rank against its definition; the model divided over one rank, through that communicator,
 * bit-identical to plain CUDA decoding (logits, greedy output, greedy speculation), its calls
 * recorded and replayed as several ranks record them; a missing
 * NCCL is a clear error that leaves the sequence as it was. More ranks need more GPUs than
 * one machine here has; their arithmetic is test_tp.c's, on the CPU.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "model/model.h"
#include "parallel/comm.h"
#include "parallel/tp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SEER_HAVE_CUDA
static void test_gpu_nccl_one_rank(void **state) {
    (void)state;
    if (!seer_backend_cuda_available()) {
        skip();
        return;
    }
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_cuda_init(0, &be));
    seer_comm *c = NULL;
    if (be->ops->comm_init(&be, 1, &c) != SEER_OK)
        fail_msg("NCCL: %s", seer_last_error());
    enum { C = 1000, ROWS = 3 };
    float h[C], back[C];
    uint64_t rs = 3;
    tu_fill_random(h, C, &rs);
    float *d = NULL;
    ASSERT_OK(be->ops->alloc(be, sizeof h, (void **)&d));
    for (int ordered = 0; ordered < 2; ordered++) {
        ASSERT_OK(be->ops->upload(be, d, h, sizeof h));
        ASSERT_OK(c->all_reduce(c, 0, d, C, ordered));
        memset(back, 0xff, sizeof back);
        ASSERT_OK(be->ops->download(be, back, d, sizeof back));
        assert_memory_equal(back, h, sizeof h); /* the sum over one rank */
    }
    /* rows of 4 widened in place to rows of 10 */
    ASSERT_OK(be->ops->upload(be, d, h, sizeof h));
    const int col0 = 0, nc = 4;
    ASSERT_OK(c->gather_cols(c, 0, d, 10, ROWS, d, &col0, &nc));
    ASSERT_OK(be->ops->download(be, back, d, sizeof back));
    for (int t = 0; t < ROWS; t++)
        assert_memory_equal(back + t * 10, h + t * 4, 4 * sizeof(float));
    c->free(c);
    be->ops->dealloc(be, d);
    be->ops->free(be);
}

static void test_gpu_tp1_identical(void **state) {
    (void)state;
    if (!seer_backend_cuda_available()) {
        skip();
        return;
    }
    const char *path = tu_data_path("models/stories260K.gguf");
    seer_model *ref = tu_load_tp(path, SEER_BACKEND_CUDA, 0), *m = tu_load_tp(path, SEER_BACKEND_CUDA, 1);
    seer_model_info in;
    seer_model_get_info(ref, &in);
    const int V = in.n_vocab, n = 40;
    int32_t tok[40];
    uint64_t rs = 21;
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)(tu_rand_u64(&rs) % (uint64_t)V);
    float *want = malloc(sizeof(float) * n * V), *got = malloc(sizeof(float) * n * V);
    tu_prefill_logits(ref, tok, n, want, NULL, NULL);
    memset(got, 0xff, sizeof(float) * n * V);
    tu_prefill_logits(m, tok, n, got, NULL, NULL);
    assert_memory_equal(got, want, sizeof(float) * n * V);
    free(want);
    free(got);
    /* greedy, plain and speculative, through the communicator of one rank */
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], plain[3], base[3], got3[3];
    tu_read_golden(prompts, plen, gold);
    tu_gen_ctx cx = {.n_ctx = 512, .page_size = 16, .n_batch_max = 128};
    tu_gen_run(ref, seer_spec_default_params(), prompts[0], 64, plen, 3, 100, tu_greedy(), cx, base, NULL);
    tu_gen_run(m, seer_spec_default_params(), prompts[0], 64, plen, 3, 100, tu_greedy(), cx, plain, NULL);
    for (int i = 0; i < 3; i++)
        tu_assert_same(&plain[i], &base[i], "cuda tp 1 greedy");
    const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV};
    for (size_t d = 0; d < 3; d++) {
        tu_gen_run(m, tu_spec(kinds[d], 4, 32), prompts[0], 64, plen, 3, 100, tu_greedy(), cx, got3, NULL);
        for (int i = 0; i < 3; i++)
            tu_assert_same(&got3[i], &plain[i], seer_spec_kind_name(kinds[d]));
    }
    seer_model_free(m);
    seer_model_free(ref);
}

/* Decode steps of two sequences, plain and over one rank: the same logits at every step, and
 * the rank's calls recorded and replayed through the held pair (forward_begin_hold,
 * forward_end_hold, forward_launch), as several ranks use it. */
static void test_gpu_tp1_graphs(void **state) {
    (void)state;
    if (!seer_backend_cuda_available()) {
        skip();
        return;
    }
    const char *path = tu_data_path("models/stories260K.gguf");
    seer_model *ms[2] = {tu_load_tp(path, SEER_BACKEND_CUDA, 0), tu_load_tp(path, SEER_BACKEND_CUDA, 1)};
    const int V = seer_n_vocab(ms[0]), steps = 8;
    float *lg[2];
    seer_context *cs[2];
    for (int k = 0; k < 2; k++) {
        lg[k] = malloc(sizeof(float) * (size_t)steps * 2 * V);
        seer_context_params cp = seer_context_default_params();
        cp.n_ctx = 64;
        cp.n_seq_max = 2;
        cp.n_batch_max = 16;
        ASSERT_OK(seer_context_init(ms[k], cp, &cs[k]));
        seer_seq_id sq[2];
        ASSERT_OK(seer_seq_new(cs[k], &sq[0]));
        ASSERT_OK(seer_seq_new(cs[k], &sq[1]));
        for (int i = 0; i < steps; i++) {
            const int32_t tok[2] = {(int32_t)(1 + 7 * i % 300), (int32_t)(2 + 11 * i % 300)};
            const int32_t pos[2] = {i, i};
            const uint8_t want[2] = {1, 1};
            seer_batch b = {.n_tokens = 2, .token = tok, .seq = sq, .pos = pos, .logits = want};
            ASSERT_OK(seer_decode(cs[k], &b, lg[k] + (size_t)i * 2 * V));
        }
    }
    assert_memory_equal(lg[0], lg[1], sizeof(float) * (size_t)steps * 2 * V);
    long rep, cap, eag, redo;
    seer_backend_cuda_graph_stats(tp_of(cs[1]->be)->rank[0], &rep, &cap, &eag, &redo);
    printf("gpu_tp: tp 1 graphs: %ld replayed, %ld recorded, %ld op by op, %ld redone\n", rep, cap, eag, redo);
    assert_true(cap >= 1);
    assert_true(rep >= steps - 3);
    assert_int_equal(redo, 0);
    for (int k = 0; k < 2; k++) {
        seer_context_free(cs[k]);
        seer_model_free(ms[k]);
        free(lg[k]);
    }
}

static void test_gpu_nccl_missing(void **state) {
    (void)state;
    if (!seer_backend_cuda_available()) {
        skip();
        return;
    }
    const char *old = getenv("SEER_NCCL_LIB");
    char *keep = old ? strdup(old) : NULL;
    setenv("SEER_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
    seer_model *m = tu_load_tp(tu_data_path("models/stories260K.gguf"), SEER_BACKEND_CUDA, 1);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_seq_id sq;
    ASSERT_OK(seer_seq_new(c, &sq));
    const int32_t tok[2] = {1, 5};
    const seer_seq_id seqs[2] = {sq, sq};
    const int32_t pos[2] = {0, 1};
    seer_batch b = {.n_tokens = 2, .token = tok, .seq = seqs, .pos = pos};
    assert_int_not_equal(seer_decode(c, &b, NULL), SEER_OK);
    assert_non_null(strstr(seer_last_error(), "NCCL"));
    assert_int_equal(seer_seq_len(c, sq), 0);
    seer_context_free(c);
    seer_model_free(m);
    if (keep) {
        setenv("SEER_NCCL_LIB", keep, 1);
        free(keep);
    } else {
        unsetenv("SEER_NCCL_LIB");
    }
}
#else
static void test_gpu_nccl_missing(void **state) { skip(); }
static void test_gpu_nccl_one_rank(void **state) { skip(); }
static void test_gpu_tp1_identical(void **state) { skip(); }
static void test_gpu_tp1_graphs(void **state) { skip(); }
#endif

int main(void) {
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* as the seer tool does (tools/seer/main.c) */
    const struct CMUnitTest tests[] = {
        /* first: once NCCL is loaded the process keeps it, and SEER_NCCL_LIB is not read again */
        cmocka_unit_test(test_gpu_nccl_missing),
        cmocka_unit_test(test_gpu_nccl_one_rank),
        cmocka_unit_test(test_gpu_tp1_identical),
        cmocka_unit_test(test_gpu_tp1_graphs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
