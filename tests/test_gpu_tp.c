/*
 * test_gpu_tp.c: tensor parallelism on a GPU (skipped without one): NCCL's communicator of one
 * rank against its definition; the model divided over one rank, through that communicator,
 * bit-identical to plain CUDA decoding (logits, greedy output, greedy speculation), its calls
 * recorded and replayed as several ranks record them; a missing NCCL is a clear error that
 * leaves the sequence as it was. With several GPUs: the all-reduce (one-shot kernel over peer
 * memory for small messages, NCCL for large ones) against the CPU's sum in rank order, each
 * rank on its own thread; the model over 2 and 4 GPUs against one, greedy speculation on vs
 * off identical.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "model/model.h"
#include "parallel/comm.h"
#include "parallel/tp_internal.h"

#include <math.h>
#include <pthread.h>
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

/* The CUDA devices present, up to SEER_TP_MAX (each opened once). */
static int gpu_count(void) {
    int n = 0;
    for (; n < SEER_TP_MAX; n++) {
        seer_backend *b = NULL;
        if (seer_backend_cuda_init(n, &b) != SEER_OK)
            break;
        b->ops->free(b);
    }
    return n;
}

enum { AR_SIZES = 6 };
static const size_t ar_count[AR_SIZES] = {1, 37, 4096, 81920, 262144, 300000};

typedef struct {
    seer_backend *be;
    seer_comm *c;
    int r;
    const float *in; /* [AR_SIZES][2 orders][3 calls][count], this rank's inputs */
    float *out;      /* the same, what came back */
    seer_status s;
} ar_rank;

/* One rank's calls, from its own thread, as the tensor-parallel backend makes them: three
 * calls of each size back to back (the one-shot kernel's slots and flags turn over). */
static void *ar_rank_main(void *p) {
    ar_rank *a = p;
    seer_backend *be = a->be;
    float *d = NULL;
    a->s = be->ops->make_current(be);
    if (a->s == SEER_OK)
        a->s = be->ops->alloc(be, 3 * 300000 * sizeof(float), (void **)&d);
    size_t off = 0;
    for (int k = 0; k < AR_SIZES && a->s == SEER_OK; k++)
        for (int o = 0; o < 2 && a->s == SEER_OK; o++) {
            const size_t C = ar_count[k];
            for (int i = 0; i < 3 && a->s == SEER_OK; i++)
                a->s = be->ops->upload(be, d + i * C, a->in + off + i * C, C * sizeof(float));
            for (int i = 0; i < 3 && a->s == SEER_OK; i++)
                a->s = a->c->all_reduce(a->c, a->r, d + i * C, C, o);
            if (a->s == SEER_OK)
                a->s = be->ops->download(be, a->out + off, d, 3 * C * sizeof(float));
            off += 3 * C;
        }
    if (d)
        be->ops->dealloc(be, d);
    return NULL;
}

/* The all-reduce over every GPU present (up to 4), each rank on its own thread: small messages
 * through the one-shot kernel over peer memory, large ones through NCCL; the sum in rank
 * order bit for bit against the CPU's wherever the order is fixed (the one-shot kernel's
 * sizes, an ordered call, or two ranks). */
static void test_gpu_allreduce_ranks(void **state) {
    (void)state;
    const int n = gpu_count() < 4 ? gpu_count() : 4;
    if (n < 2) {
        skip();
        return;
    }
    seer_backend *be[4];
    for (int r = 0; r < n; r++)
        ASSERT_OK(seer_backend_cuda_init(r, &be[r]));
    seer_comm *c = NULL;
    if (be[0]->ops->comm_init(be, n, &c) != SEER_OK)
        fail_msg("NCCL: %s", seer_last_error());
    size_t total = 0;
    for (int k = 0; k < AR_SIZES; k++)
        total += 2 * 3 * ar_count[k];
    float *in[4], *out[4];
    uint64_t rs = 17;
    ar_rank a[4];
    pthread_t th[4];
    for (int r = 0; r < n; r++) {
        in[r] = malloc(total * sizeof(float));
        out[r] = malloc(total * sizeof(float));
        tu_fill_random(in[r], total, &rs);
        a[r] = (ar_rank){.be = be[r], .c = c, .r = r, .in = in[r], .out = out[r]};
    }
    for (int r = 0; r < n; r++)
        assert_int_equal(pthread_create(&th[r], NULL, ar_rank_main, &a[r]), 0);
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++)
        if (a[r].s != SEER_OK)
            fail_msg("rank %d failed", r);
    size_t off = 0;
    for (int k = 0; k < AR_SIZES; k++)
        for (int o = 0; o < 2; o++) {
            const size_t C = 3 * ar_count[k];
            const bool exact = ar_count[k] <= 262144 || o || n == 2;
            for (size_t i = 0; i < C; i++) {
                float s = in[0][off + i];
                for (int r = 1; r < n; r++)
                    s += in[r][off + i];
                for (int r = 0; r < n; r++) {
                    const float g = out[r][off + i];
                    if (exact ? memcmp(&g, &s, sizeof g) != 0 : !(fabsf(g - s) <= 1e-5f * (1 + fabsf(s))))
                        fail_msg("%d ranks, %zu floats, %s: rank %d element %zu is %.9g, the sum in rank order %.9g",
                                 n, ar_count[k], o ? "ordered" : "unordered", r, i, g, s);
                }
            }
            off += C;
        }
    printf("gpu_tp: all-reduce over %d GPUs: %d sizes, both orders, equal to the CPU's sum\n", n, AR_SIZES);
    c->free(c);
    for (int r = 0; r < n; r++) {
        be[r]->ops->free(be[r]);
        free(in[r]);
        free(out[r]);
    }
}

/* The logits over several GPUs against one: the partial sums are added in another order, and
 * on the bf16 path a residual that moves by an f32 rounding can round a matmul's input to the
 * neighbouring bf16 value; bounded as the bf16 path is against the CPU (test_gpu_model.c).
 * A wrong division moves logits by their own size. */
#define TP_GPU_TOL 3e-2

/* The model over 2 and 4 GPUs (as many as there are), each rank on its own thread: logits
 * against one GPU within TP_GPU_TOL, greedy output
 * with speculation on and off identical in batches of three ragged prompts, the calls
 * recorded and replayed on every rank. */
static void test_gpu_tp_multi(void **state) {
    (void)state;
    const int g = gpu_count();
    if (g < 2) {
        skip();
        return;
    }
    char path[4096]; /* tu_data_path's buffer is reused by tu_read_golden below */
    snprintf(path, sizeof path, "%s", tu_data_path("models/stories260K.gguf"));
    seer_model *ref = tu_load_tp(path, SEER_BACKEND_CUDA, 0);
    const int V = seer_n_vocab(ref), n = 40;
    int32_t tok[40];
    uint64_t rs = 23;
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)(tu_rand_u64(&rs) % (uint64_t)V);
    float *want = malloc(sizeof(float) * n * V), *got = malloc(sizeof(float) * n * V);
    tu_prefill_logits(ref, tok, n, want, NULL, NULL);
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], plain[3], got3[3];
    tu_read_golden(prompts, plen, gold);
    tu_gen_ctx cx = {.n_ctx = 512, .page_size = 16, .n_batch_max = 128};
    for (int tp = 2; tp <= 4 && tp <= g; tp *= 2) {
        seer_model *m = tu_load_tp(path, SEER_BACKEND_CUDA, tp);
        memset(got, 0xff, sizeof(float) * n * V);
        tu_prefill_logits(m, tok, n, got, NULL, NULL);
        const double e = tu_rel_err(got, want, (size_t)n * V);
        printf("gpu_tp: tp %d: logits rel err %.2e against one GPU\n", tp, e);
        assert_true(e <= TP_GPU_TOL);
        tu_gen_run(m, seer_spec_default_params(), prompts[0], 64, plen, 3, 100, tu_greedy(), cx, plain, NULL);
        const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV};
        for (size_t d = 0; d < 3; d++) {
            tu_gen_run(m, tu_spec(kinds[d], 4, 32), prompts[0], 64, plen, 3, 100, tu_greedy(), cx, got3, NULL);
            for (int i = 0; i < 3; i++)
                tu_assert_same(&got3[i], &plain[i], seer_spec_kind_name(kinds[d]));
        }
        seer_model_free(m);
    }
    free(want);
    free(got);
    seer_model_free(ref);
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
static void test_gpu_allreduce_ranks(void **state) { skip(); }
static void test_gpu_tp_multi(void **state) { skip(); }
#endif

int main(void) {
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* as the seer tool does (tools/seer/main.c) */
    const struct CMUnitTest tests[] = {
        /* first: once NCCL is loaded the process keeps it, and SEER_NCCL_LIB is not read again */
        cmocka_unit_test(test_gpu_nccl_missing),
        cmocka_unit_test(test_gpu_nccl_one_rank),
        cmocka_unit_test(test_gpu_tp1_identical),
        cmocka_unit_test(test_gpu_tp1_graphs),
        cmocka_unit_test(test_gpu_allreduce_ranks),
        cmocka_unit_test(test_gpu_tp_multi),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
