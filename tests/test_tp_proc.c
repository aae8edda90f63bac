/*
 * test_tp_proc.c: tensor parallelism with ranks in separate processes (tp_remote.h) on the
 * CPU. Rank 0 is this process; the other ranks are `seer worker` processes started from the
 * built CLI (or, where a test needs a backend of its own there, a worker thread over a real
 * socket). Their logits equal the in-process group's bit for bit (the same ops in the same
 * order, the all-reduce summed in rank order) and the greedy ids are the reference program's;
 * greedy speculation (views, rewinds) gives the same ids; so do draft weights, a synthetic
 * model and a sequence restored from the KV host tier. A posted op's failure comes back at the
 * instance's next waited op with the state as of the failure; batch_begin's arrays reach a
 * recording worker at its addresses; a collective whose staging one rank cannot have fails on
 * every rank. A killed rank fails the call that meets it and every later one, with its
 * reason, and so does a stopped one after the time-out; an absent rank fails the load after
 * the time-out; a peer that says the wrong group is refused. The messages themselves:
 * test_tp_wire.c.
 */
#include "kv/kv_host.h"
#include "parallel/comm.h"
#include "parallel/tp_remote.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define STORIES "models/stories260K.gguf"

/* test_staged_comm_no_memory asks for more host memory than any machine has: under a
 * sanitizer that must be a null pointer, as it is without one, not a report. */
const char *__asan_default_options(void);
const char *__tsan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Starts `seer worker` for ranks 1 .. n-1 at addr. */
static void spawn_workers(const char *addr, int n, pid_t *pids) {
    for (int r = 1; r < n; r++) {
        char n_s[8], r_s[8];
        snprintf(n_s, sizeof n_s, "%d", n);
        snprintf(r_s, sizeof r_s, "%d", r);
        char *argv[] = {"seer", "worker", "--tp", n_s, "--tp-rank", r_s, "--tp-addr", (char *)addr,
                        "--backend", "cpu", "-t", "1", "--timeout-ms", "30000", NULL};
        assert_int_equal(posix_spawn(&pids[r], SEER_CLI, NULL, NULL, argv, environ), 0);
    }
}

/* Waits for the workers; each must have ended cleanly (rank 0's goodbye) where clean. */
static void reap(pid_t *pids, int n, bool clean) {
    for (int r = 1; r < n; r++) {
        int st = 0;
        assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
        if (clean && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            fail_msg("worker rank %d ended with status %#x", r, st);
    }
}

/* The tiny model at tp n with draft weights dw (NULL: none): ranks 1 .. n-1 in processes
 * when addr is given (their pids into pids), else threads of this process. */
static seer_model *load_tp(int n, char *addr, size_t cap, pid_t *pids, int timeout_ms, const char *dw) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    mp.tp = n;
    mp.draft_weights = dw;
    if (addr) {
        snprintf(addr, cap, "127.0.0.1:%d", free_port());
        spawn_workers(addr, n, pids);
        mp.tp_addr = addr;
        mp.tp_timeout_ms = timeout_ms;
    }
    seer_model *m = NULL;
    if (seer_model_load(tu_data_path(STORIES), mp, &m) != SEER_OK)
        fail_msg("loading with %d ranks%s: %s", n, addr ? " in processes" : "", seer_last_error());
    return m;
}

static seer_model *load_procs(int n, char *addr, size_t cap, pid_t *pids, int timeout_ms) {
    return load_tp(n, addr, cap, pids, timeout_ms, NULL);
}

/* ---- against the in-process group ---------------------------------------------------------- */

static void logits_against_threads(int n) {
    seer_model *ref = tu_load_tp(tu_data_path(STORIES), SEER_BACKEND_CPU, n);
    seer_model_info in;
    seer_model_get_info(ref, &in);
    const int V = in.n_vocab, T = 24, qd = in.n_heads * in.head_dim;
    int32_t tok[24];
    uint64_t seed = 5;
    for (int i = 0; i < T; i++)
        tok[i] = (int32_t)(tu_rand_u64(&seed) % (uint64_t)V);
    uint8_t cap[24] = {0};
    cap[2] = cap[20] = 1;
    float *want = malloc(sizeof(float) * T * V), *got = malloc(sizeof(float) * T * V);
    float *qw = malloc(sizeof(float) * in.n_layers * 2 * qd), *qg = malloc(sizeof(float) * in.n_layers * 2 * qd);
    tu_prefill_logits(ref, tok, T, want, cap, qw);
    seer_model_free(ref);
    char addr[64];
    pid_t pids[SEER_TP_MAX];
    seer_model *m = load_procs(n, addr, sizeof addr, pids, 30000);
    memset(got, 0xff, sizeof(float) * T * V); /* poisoned: every logit must be written */
    memset(qg, 0xff, sizeof(float) * in.n_layers * 2 * qd);
    tu_prefill_logits(m, tok, T, got, cap, qg);
    assert_memory_equal(got, want, sizeof(float) * T * V);
    assert_memory_equal(qg, qw, sizeof(float) * in.n_layers * 2 * qd);
    seer_model_free(m);
    reap(pids, n, true);
    free(want);
    free(got);
    free(qw);
    free(qg);
}

static void test_logits_2(void **state) {
    (void)state;
    logits_against_threads(2);
}

/* past two ranks the sum is taken in rank order (the CPU's communicator) */
static void test_logits_4(void **state) {
    (void)state;
    logits_against_threads(4);
}

static void test_golden_and_spec(void **state) {
    (void)state;
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], plain[3], got[3];
    const int n = tu_read_golden(prompts, plen, gold);
    assert_true(n >= 3);
    char addr[64];
    pid_t pids[SEER_TP_MAX];
    seer_model *m = load_procs(2, addr, sizeof addr, pids, 30000);
    tu_gen_ctx cx = {.n_ctx = 512, .page_size = 8, .n_batch_max = 128};
    tu_gen_run(m, seer_spec_default_params(), prompts[0], 64, plen, 3, -1, tu_greedy(), cx, plain, NULL);
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof what, "two processes, golden prompt %d", i);
        tu_output p = plain[i];
        if (p.n > gold[i].n)
            p.n = gold[i].n;
        tu_assert_same(&p, &gold[i], what);
    }
    const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL};
    for (size_t d = 0; d < sizeof kinds / sizeof *kinds; d++) {
        seer_spec_stats st =
            tu_gen_run(m, tu_spec(kinds[d], 4, 24), prompts[0], 64, plen, 3, -1, tu_greedy(), cx, got, NULL);
        assert_true(st.drafted > 0);
        for (int i = 0; i < 3; i++) {
            char what[64];
            snprintf(what, sizeof what, "two processes, %s prompt %d", seer_spec_kind_name(kinds[d]), i);
            tu_assert_same(&got[i], &plain[i], what);
        }
    }
    seer_model_free(m);
    reap(pids, 2, true);
}

/* The logits [T][V] of T tokens of a fresh sequence in one call, through the draft weights
 * where dw. */
static void draft_logits(seer_model *m, int T, int V, float *out, bool dw) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_seq_id sq;
    ASSERT_OK(seer_seq_new(c, &sq));
    int32_t tok[16], pos[16];
    seer_seq_id seqs[16];
    uint8_t want[16];
    uint64_t seed = 9;
    for (int i = 0; i < T; i++) {
        tok[i] = (int32_t)(tu_rand_u64(&seed) % (uint64_t)V);
        pos[i] = i;
        seqs[i] = sq;
        want[i] = 1;
    }
    memset(out, 0xff, sizeof(float) * (size_t)T * V);
    seer_batch b = {.n_tokens = T, .token = tok, .seq = seqs, .pos = pos, .logits = want, .draft_weights = dw};
    ASSERT_OK(seer_decode(c, &b, out));
    seer_context_free(c);
}

/* Draft weights (q4_0): each rank quantises its part of every weight (at four ranks the
 * attention output's parts of 16 columns are no whole blocks and stay unquantised; the FFN's
 * 172 columns are none either, and the model shares that weight whole). A call through them
 * gives the in-process group's logits bit for bit, and greedy speculation through them the
 * plain ids. */
static void test_draft_weights(void **state) {
    (void)state;
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[3];
    assert_true(tu_read_golden(prompts, plen, gold) >= 3);
    for (int n = 2; n <= 4; n += 2) {
        seer_model *ref = load_tp(n, NULL, 0, NULL, 0, "q4_0");
        seer_model_info in;
        seer_model_get_info(ref, &in);
        const int T = 12, V = in.n_vocab;
        float *want = malloc(sizeof(float) * T * V), *have = malloc(sizeof(float) * T * V);
        draft_logits(ref, T, V, have, false);
        draft_logits(ref, T, V, want, true);
        assert_memory_not_equal(have, want, sizeof(float) * T * V); /* the copy is in use */
        seer_model_free(ref);
        char addr[64];
        pid_t pids[SEER_TP_MAX];
        seer_model *m = load_tp(n, addr, sizeof addr, pids, 30000, "q4_0");
        draft_logits(m, T, V, have, true);
        assert_memory_equal(have, want, sizeof(float) * T * V);
        seer_spec_params sp = tu_spec(SEER_SPEC_STREAMING, 4, 24);
        sp.draft_weights = true;
        tu_gen_ctx cx = {.n_ctx = 512, .page_size = 8, .n_batch_max = 128};
        const seer_spec_stats st = tu_gen_run(m, sp, prompts[0], 64, plen, 3, 40, tu_greedy(), cx, got, NULL);
        assert_true(st.drafted > 0);
        for (int i = 0; i < 3; i++) {
            char what[96];
            snprintf(what, sizeof what, "%d processes, draft weights, golden prompt %d", n, i);
            tu_output g = gold[i];
            if (g.n > got[i].n)
                g.n = got[i].n;
            tu_assert_same(&got[i], &g, what);
        }
        seer_model_free(m);
        reap(pids, n, true);
        free(want);
        free(have);
    }
}

/* The logits [4][V] of four tokens decoded after 40 synthetic slots (kv_fill_random), on the
 * synthetic "tiny" shape at tp 2 (weight_random on each rank, from a seed of its own). */
static void synthetic_logits(const char *addr, float *out, int *V) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    mp.tp = 2;
    mp.tp_addr = addr;
    mp.tp_timeout_ms = 30000;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_synthetic("tiny", NULL, mp, &m));
    *V = seer_n_vocab(m);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_seq_id sq;
    ASSERT_OK(seer_seq_new(c, &sq));
    ASSERT_OK(seer_seq_fill_synthetic(c, sq, 40, 3));
    const int32_t tok[4] = {5, 6, 7, 8}, pos[4] = {40, 41, 42, 43};
    const seer_seq_id seqs[4] = {sq, sq, sq, sq};
    const uint8_t want[4] = {1, 1, 1, 1};
    seer_batch b = {.n_tokens = 4, .token = tok, .seq = seqs, .pos = pos, .logits = want};
    ASSERT_OK(seer_decode(c, &b, out));
    seer_context_free(c);
    seer_model_free(m);
}

/* seer bench's synthetic models: the ranks in processes draw the weights and the KV the rank
 * threads draw, so the logits are the same bits. */
static void test_synthetic(void **state) {
    (void)state;
    static float want[4 << 16], got[4 << 16];
    int V = 0, V2 = 0;
    synthetic_logits(NULL, want, &V);
    assert_true(V <= 1 << 16);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    pid_t pids[SEER_TP_MAX];
    spawn_workers(addr, 2, pids);
    memset(got, 0xff, sizeof got);
    synthetic_logits(addr, got, &V2);
    reap(pids, 2, true);
    assert_int_equal(V2, V);
    assert_memory_equal(got, want, sizeof(float) * 4 * (size_t)V);
}

/* Decodes 16 tokens into a sequence, saves its pages to the KV cache's host tier, loads them
 * into a second sequence and decodes token 16 on both: out [2][V] the two rows of logits. */
static void host_tier_logits(seer_model *m, int V, float *out) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = 2;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_seq_id a, b;
    ASSERT_OK(seer_seq_new(c, &a));
    int32_t tok[16], pos[16];
    seer_seq_id seqs[16];
    for (int i = 0; i < 16; i++) {
        tok[i] = (int32_t)(i * 7 % V);
        pos[i] = i;
        seqs[i] = a;
    }
    seer_batch bt = {.n_tokens = 16, .token = tok, .seq = seqs, .pos = pos};
    ASSERT_OK(seer_decode(c, &bt, NULL));
    seer_kv_host *h = NULL;
    ASSERT_OK(seer_kv_host_init(c, 1 << 20, &h));
    seer_kv_host_ref ref;
    uint64_t ticket = 0;
    ASSERT_OK(seer_kv_host_save(h, a, 16, 1, &ref));
    ASSERT_OK(seer_kv_host_load(h, ref, 16, 2, &b, &ticket));
    ASSERT_OK(seer_kv_host_wait(h, ticket));
    const int32_t t2[2] = {9, 9}, p2[2] = {16, 16};
    const seer_seq_id s2[2] = {a, b};
    const uint8_t want[2] = {1, 1};
    memset(out, 0xff, sizeof(float) * 2 * (size_t)V);
    seer_batch b2 = {.n_tokens = 2, .token = t2, .seq = s2, .pos = p2, .logits = want};
    ASSERT_OK(seer_decode(c, &b2, out));
    assert_true(h->bytes_to_host > 0 && h->bytes_from_host > 0);
    seer_kv_host_free(h);
    seer_context_free(c);
}

/* The KV cache's host tier (kv_page_bytes, kv_host_copy): each rank's pages go to rank 0's
 * host and back (a rank in another process's through its link); the restored sequence
 * decodes as the original does, and the logits are the rank threads'. */
static void test_kv_host_tier(void **state) {
    (void)state;
    seer_model *ref = load_tp(2, NULL, 0, NULL, 0, NULL);
    const int V = seer_n_vocab(ref);
    float *want = malloc(sizeof(float) * 2 * V), *got = malloc(sizeof(float) * 2 * V);
    host_tier_logits(ref, V, want);
    seer_model_free(ref);
    assert_memory_equal(want, want + V, sizeof(float) * V); /* restored: the very bits */
    char addr[64];
    pid_t pids[SEER_TP_MAX];
    seer_model *m = load_tp(2, addr, sizeof addr, pids, 30000, NULL);
    host_tier_logits(m, V, got);
    seer_model_free(m);
    reap(pids, 2, true);
    assert_memory_equal(got, want, sizeof(float) * 2 * V);
    free(want);
    free(got);
}

/* ---- failures -------------------------------------------------------------------------------- */

static seer_status decode_once(seer_model *m) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    seer_context *c = NULL;
    seer_status s = seer_context_init(m, cp, &c);
    if (s != SEER_OK)
        return s;
    seer_seq_id sq;
    s = seer_seq_new(c, &sq);
    const int32_t tok[2] = {1, 2}, pos[2] = {0, 1};
    seer_seq_id seqs[2] = {sq, sq};
    uint8_t want[2] = {0, 1};
    static float logits[1 << 16];
    seer_batch b = {.n_tokens = 2, .token = tok, .seq = seqs, .pos = pos, .logits = want};
    if (s == SEER_OK)
        s = seer_decode(c, &b, logits);
    seer_context_free(c);
    return s;
}

static void test_killed_rank(void **state) {
    (void)state;
    char addr[64];
    pid_t pids[SEER_TP_MAX];
    seer_model *m = load_procs(2, addr, sizeof addr, pids, 30000);
    ASSERT_OK(decode_once(m));
    assert_int_equal(kill(pids[1], SIGKILL), 0);
    reap(pids, 2, false);
    seer_status s = decode_once(m);
    assert_int_not_equal(s, SEER_OK);
    printf("a killed rank: %s\n", seer_last_error());
    assert_non_null(strstr(seer_last_error(), "rank 1"));
    /* and again, at once: the link is known dead */
    assert_int_not_equal(decode_once(m), SEER_OK);
    assert_non_null(strstr(seer_last_error(), "rank 1"));
    /* the frees' failures on the dead link leave the caller's last error as it was */
    seer_context_params bad = seer_context_default_params();
    bad.n_seq_max = -1;
    seer_context *c = NULL;
    assert_int_not_equal(seer_context_init(m, bad, &c), SEER_OK);
    char before[1024];
    snprintf(before, sizeof before, "%s", seer_last_error());
    assert_null(strstr(before, "rank 1"));
    seer_model_free(m);
    assert_string_equal(seer_last_error(), before);
}

/* A rank that stops answering (stopped, not dead: its socket stays open) fails the op after
 * tp_timeout_ms, and the later ones at once. */
static void test_stopped_rank(void **state) {
    (void)state;
    char addr[64];
    pid_t pids[SEER_TP_MAX];
    seer_model *m = load_procs(2, addr, sizeof addr, pids, 1000);
    ASSERT_OK(decode_once(m));
    assert_int_equal(kill(pids[1], SIGSTOP), 0);
    assert_int_equal(decode_once(m), SEER_ERR_IO);
    printf("a stopped rank: %s\n", seer_last_error());
    assert_non_null(strstr(seer_last_error(), "no progress"));
    assert_int_equal(decode_once(m), SEER_ERR_IO);
    seer_model_free(m); /* its goodbye fails at once: the link is dead */
    assert_int_equal(kill(pids[1], SIGKILL), 0);
    reap(pids, 2, false);
}

static void test_absent_rank(void **state) {
    (void)state;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 1;
    mp.tp = 2;
    mp.tp_addr = addr;
    mp.tp_timeout_ms = 300;
    seer_model *m = NULL;
    assert_int_equal(seer_model_load(tu_data_path(STORIES), mp, &m), SEER_ERR_IO);
    assert_null(m);
    printf("an absent rank: %s\n", seer_last_error());
    assert_non_null(strstr(seer_last_error(), "1 of 2 ranks"));
    /* the address taken by nothing: a bad one is refused as such */
    mp.tp_addr = "no-port-here";
    assert_int_equal(seer_model_load(tu_data_path(STORIES), mp, &m), SEER_ERR_INVALID_ARG);
}

typedef struct {
    const char *addr;
    int rank, n;
    int timeout_ms; /* 0: 5000 */
    seer_status s;
    char msg[512];
} peer_arg;

static void *peer_main(void *p) {
    peer_arg *a = p;
    seer_backend *be = NULL;
    a->s = seer_backend_cpu_init(1, &be);
    if (a->s == SEER_OK)
        a->s = seer_tp_worker_run(a->addr, a->rank, a->n, be, a->timeout_ms ? a->timeout_ms : 5000);
    snprintf(a->msg, sizeof a->msg, "%s", seer_last_error());
    if (be)
        be->ops->free(be);
    return NULL;
}

/* A peer of another group (3 ranks) is refused: both sides say so, neither waits. */
static void test_wrong_peer(void **state) {
    (void)state;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    peer_arg a = {.addr = addr, .rank = 2, .n = 3};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, peer_main, &a), 0);
    int fds[SEER_TP_MAX];
    const seer_status s = seer_tp_remote_accept(addr, 2, 5000, fds);
    assert_int_equal(s, SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "rank 2 of 3"));
    pthread_join(th, NULL);
    assert_int_equal(a.s, SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(a.msg, "refused"));
    for (int r = 0; r < SEER_TP_MAX; r++)
        assert_int_equal(fds[r], -1);
}

/* Rank 0 stalled in the middle of a message: the worker waits for the next message without a
 * limit, but for the rest of one begun only its time-out, then ends with the reason. */
static void test_stalled_message(void **state) {
    (void)state;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    peer_arg a = {.addr = addr, .rank = 1, .n = 2, .timeout_ms = 300};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, peer_main, &a), 0);
    int fds[SEER_TP_MAX];
    ASSERT_OK(seer_tp_remote_accept(addr, 2, 5000, fds));
    const tp_wire_hdr h = {TP_WIRE_MAGIC, TP_OP_SYNC, 0, 0, 64};
    const char part[8] = {0};
    assert_int_equal(send(fds[1], &h, sizeof h, MSG_NOSIGNAL), (ssize_t)sizeof h);
    assert_int_equal(send(fds[1], part, sizeof part, MSG_NOSIGNAL), (ssize_t)sizeof part);
    /* the worker gives up and closes its end well within 3 s */
    struct pollfd pf = {.fd = fds[1], .events = POLLIN};
    char c;
    const bool closed = poll(&pf, 1, 3000) == 1 && recv(fds[1], &c, 1, 0) == 0;
    close(fds[1]);
    pthread_join(th, NULL);
    assert_true(closed);
    assert_int_equal(a.s, SEER_ERR_IO);
    assert_non_null(strstr(a.msg, "no progress"));
}

/* ---- ops not waited for --------------------------------------------------------------------- */

/* A pointer of handle h on a remote rank, as rank 0 writes it (tp_remote.h). */
static void *fake_ptr(int64_t h) { return (void *)(uintptr_t)(TP_FAKE_BIT | (uint64_t)h << TP_FAKE_OFF_BITS); }

/* Over a real link: an upload is posted (it returns before the rank has run it); one that
 * fails is reported by the instance's next waited op, naming it, and the ops between are
 * refused, so the memory holds what it held before the failure; after the report the stream
 * runs again. Another instance (a context's) goes on meanwhile. */
static void test_posted_failure_reported(void **state) {
    (void)state;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    peer_arg a = {.addr = addr, .rank = 1, .n = 2};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, peer_main, &a), 0);
    int fds[SEER_TP_MAX];
    ASSERT_OK(seer_tp_remote_accept(addr, 2, 5000, fds));
    seer_backend *cpu = NULL, *be = NULL, *cl = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &cpu));
    ASSERT_OK(seer_backend_remote_init(fds[1], 1, 5000, cpu->ops, &be));
    ASSERT_OK(be->ops->exec_clone(be, &cl));
    void *p = NULL, *q = NULL;
    ASSERT_OK(be->ops->alloc(be, 64, &p));
    ASSERT_OK(cl->ops->alloc(cl, 64, &q));
    float v1[16], v2[16], got[16];
    for (int i = 0; i < 16; i++) {
        v1[i] = (float)i;
        v2[i] = -(float)i;
    }
    ASSERT_OK(be->ops->upload(be, p, v1, sizeof v1));
    ASSERT_OK(cl->ops->upload(cl, q, v1, sizeof v1));
    /* memory the rank never made: posted, so accepted here; then an upload the rank refuses */
    ASSERT_OK(be->ops->upload(be, fake_ptr(4000), v2, sizeof v2));
    ASSERT_OK(be->ops->upload(be, p, v2, sizeof v2));
    /* the context's instance is not held up by the root's failure */
    ASSERT_OK(cl->ops->upload(cl, q, v2, sizeof v2));
    ASSERT_OK(cl->ops->download(cl, got, q, sizeof got));
    assert_memory_equal(got, v2, sizeof v2);
    const seer_status s = be->ops->download(be, got, p, sizeof got);
    assert_int_equal(s, SEER_ERR_FORMAT);
    printf("a posted op's failure: %s\n", seer_last_error());
    assert_non_null(strstr(seer_last_error(), "rank 1"));
    assert_non_null(strstr(seer_last_error(), "upload (sent without waiting for its answer) failed"));
    assert_non_null(strstr(seer_last_error(), "names no memory"));
    /* reported once: the stream runs again, from the state before the failure */
    ASSERT_OK(be->ops->download(be, got, p, sizeof got));
    assert_memory_equal(got, v1, sizeof v1);
    ASSERT_OK(be->ops->upload(be, p, v2, sizeof v2));
    ASSERT_OK(be->ops->sync(be));
    ASSERT_OK(be->ops->download(be, got, p, sizeof got));
    assert_memory_equal(got, v2, sizeof v2);
    cl->ops->dealloc(cl, q);
    cl->ops->free(cl);
    be->ops->dealloc(be, p);
    be->ops->free(be); /* goodbye: the rank ends cleanly */
    pthread_join(th, NULL);
    ASSERT_OK(a.s);
    cpu->ops->free(cpu);
}

/* ---- batch_begin and recorded calls -------------------------------------------------------- */

/* A worker's backend with batch_begin and the held pair of recorded calls, as CUDA has them
 * (the CPU's has neither): it notes what they were given and whether the ops after
 * batch_begin got its arrays at its addresses, as a backend with its own copies needs. */
static seer_backend_ops rec_ops;
static const seer_backend_ops *rec_cpu;
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const int32_t *idx[5];
    const int32_t *seq_pages, *tok_slot;
    int batches, hits, misses, begins, ends, launches, last_run, T_cap;
    int32_t tok[8]; /* the last embed's token ids (up to 8) */
    uintptr_t key;
    seer_status end_status;
} rec;

static void rec_note(bool hit) {
    pthread_mutex_lock(&rec_mu);
    rec.hits += hit;
    rec.misses += !hit;
    pthread_mutex_unlock(&rec_mu);
}

static seer_status rec_batch_begin(seer_backend *be, const seer_attn_batch *ab, const int32_t *tokens,
                                   const int32_t *pos, const int32_t *page, const int32_t *row,
                                   const int32_t *out_rows, int n_out) {
    (void)be;
    (void)n_out;
    pthread_mutex_lock(&rec_mu);
    const int32_t *a[5] = {tokens, pos, page, row, out_rows};
    memcpy(rec.idx, a, sizeof a);
    rec.seq_pages = ab->seq_pages;
    rec.tok_slot = ab->tok_slot;
    rec.batches++;
    pthread_mutex_unlock(&rec_mu);
    return SEER_OK;
}

static seer_status rec_embed(seer_backend *be, float *y, const seer_weight *emb, const int32_t *tokens, int T) {
    rec_note(tokens == rec.idx[0]);
    pthread_mutex_lock(&rec_mu);
    memcpy(rec.tok, tokens, (size_t)(T < 8 ? T : 8) * sizeof *tokens);
    pthread_mutex_unlock(&rec_mu);
    return rec_cpu->embed(be, y, emb, tokens, T);
}

static seer_status rec_rope(seer_backend *be, float *x, const int32_t *pos, int T, int nh, int Dh,
                            const float *inv_freq, int neox) {
    rec_note(pos == rec.idx[1]);
    return rec_cpu->rope(be, x, pos, T, nh, Dh, inv_freq, neox);
}

static seer_status rec_gather_rows(seer_backend *be, float *y, const float *x, const int32_t *rows, int n, int D) {
    rec_note(rows == rec.idx[4]);
    return rec_cpu->gather_rows(be, y, x, rows, n, D);
}

static seer_status rec_attention(seer_backend *be, float *out, const float *q, const void *kv, const seer_kv_geom *g,
                                 int layer, const seer_attn_batch *ab) {
    rec_note(ab->seq_pages == rec.seq_pages && ab->tok_slot == rec.tok_slot);
    return rec_cpu->attention(be, out, q, kv, g, layer, ab);
}

/* pads to a multiple of 4; the second call and later ones replay */
static seer_status rec_begin(seer_backend *be, const void *key, int T_cap, int *T, int *n_out, bool *done) {
    (void)be;
    pthread_mutex_lock(&rec_mu);
    rec.key = (uintptr_t)key;
    rec.T_cap = T_cap;
    *T = (*T + 3) / 4 * 4;
    *n_out = (*n_out + 3) / 4 * 4;
    *done = ++rec.begins > 1;
    pthread_mutex_unlock(&rec_mu);
    return SEER_OK;
}

static seer_status rec_end(seer_backend *be, seer_status s, bool *redo) {
    (void)be;
    pthread_mutex_lock(&rec_mu);
    rec.ends++;
    rec.end_status = s;
    *redo = false;
    pthread_mutex_unlock(&rec_mu);
    return SEER_OK;
}

static seer_status rec_launch(seer_backend *be, bool run) {
    (void)be;
    pthread_mutex_lock(&rec_mu);
    rec.launches++;
    rec.last_run = run;
    pthread_mutex_unlock(&rec_mu);
    return SEER_OK;
}

static void *rec_peer_main(void *p) {
    peer_arg *a = p;
    seer_backend *be = NULL;
    a->s = seer_backend_cpu_init(1, &be);
    const seer_backend_ops *own = be ? be->ops : NULL;
    if (a->s == SEER_OK) {
        be->ops = &rec_ops;
        a->s = seer_tp_worker_run(a->addr, a->rank, a->n, be, 5000);
    }
    snprintf(a->msg, sizeof a->msg, "%s", seer_last_error());
    if (be) {
        be->ops = own;
        be->ops->free(be);
    }
    return NULL;
}

/* A forward call's ops on a rank in another process whose backend has batch_begin and
 * records calls: batch_begin's batch and arrays reach the ops at its addresses (a padded
 * call's longer arrays included; another array does not), forward_begin_hold's sizes and
 * replay come back, forward_end_hold and forward_launch reach it; a posted op's failure
 * within the call ends the recording as failed and is reported by forward_end_hold. */
static void test_batch_and_recorded_calls(void **state) {
    (void)state;
    seer_backend *cpu = NULL;
    ASSERT_OK(seer_backend_cpu_init(1, &cpu));
    rec_cpu = cpu->ops;
    rec_ops = *cpu->ops;
    rec_ops.batch_begin = rec_batch_begin;
    rec_ops.embed = rec_embed;
    rec_ops.rope = rec_rope;
    rec_ops.gather_rows = rec_gather_rows;
    rec_ops.attention = rec_attention;
    rec_ops.forward_begin_hold = rec_begin;
    rec_ops.forward_end_hold = rec_end;
    rec_ops.forward_launch = rec_launch;
    memset(&rec, 0, sizeof rec);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    peer_arg pa = {.addr = addr, .rank = 1, .n = 2};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, rec_peer_main, &pa), 0);
    int fds[SEER_TP_MAX];
    ASSERT_OK(seer_tp_remote_accept(addr, 2, 5000, fds));
    seer_backend *be = NULL;
    ASSERT_OK(seer_backend_remote_init(fds[1], 1, 5000, &rec_ops, &be));
    enum { T = 3, V = 16, D = 8, H = 2, Dh = 4 };
    float emb_v[V * D];
    for (int i = 0; i < V * D; i++)
        emb_v[i] = (float)i / 64;
    const gguf_tensor et = {.name = "emb", .n_dims = 2, .ne = {D, V, 1, 1}, .type = GGML_TYPE_F32, .data = emb_v,
                            .nbytes = sizeof emb_v};
    seer_weight emb;
    ASSERT_OK(be->ops->weight_load(be, &et, SEER_WEIGHTS_F32, &emb));
    void *x = NULL, *y = NULL, *fr = NULL, *kvd = NULL;
    ASSERT_OK(be->ops->alloc(be, 8 * D * sizeof(float), &x));
    ASSERT_OK(be->ops->alloc(be, 8 * D * sizeof(float), &y));
    ASSERT_OK(be->ops->alloc(be, Dh / 2 * sizeof(float), &fr));
    const float inv[Dh / 2] = {1.f, 0.01f};
    ASSERT_OK(be->ops->upload(be, fr, inv, sizeof inv));
    const seer_kv_geom g = {.n_pages = 2, .page_size = 16, .n_layers = 1, .n_kv_heads = 1, .head_dim = Dh};
    int nc = 0;
    ASSERT_OK(be->ops->kv_alloc(be, &g, &kvd));
    ASSERT_OK(be->ops->kv_reserve(be, kvd, &g, 2, &nc));
    const int32_t pages[1] = {0}, len0[1] = {0}, off[2] = {0, T}, toks[T] = {0, 1, 2}, tseq[T] = {0, 0, 0};
    const int32_t tokens[T] = {1, 2, 3}, pos[8] = {0, 1, 2}, page[T] = {0, 0, 0}, row[T] = {0, 1, 2};
    const int32_t out_rows[1] = {2}, other[T] = {5, 6, 7};
    const seer_attn_batch ab = {.T = T, .n_heads = H, .n_kv_heads = 1, .head_dim = Dh, .scale = 0.5f,
                                .page_size = 16, .n_seq = 1, .max_pages = 1, .seq_pages = pages, .seq_len0 = len0,
                                .seq_tok_off = off, .seq_toks = toks, .tok_seq = tseq, .tok_slot = row};
    ASSERT_OK(be->ops->batch_begin(be, &ab, tokens, pos, page, row, out_rows, 1));
    int Tp = T, np = 1;
    bool done = true, redo = true;
    ASSERT_OK(be->ops->forward_begin_hold(be, x, 8, &Tp, &np, &done));
    assert_int_equal(Tp, 4);
    assert_int_equal(np, 4);
    assert_false(done);
    /* padded: past the batch's rows, which rank 0 never reads (tokens holds T); the rank
     * sees the padding's token 0, as the CUDA backend pads */
    ASSERT_OK(be->ops->embed(be, x, &emb, tokens, Tp));
    ASSERT_OK(be->ops->rope(be, x, pos, Tp, H, Dh, fr, 0));
    ASSERT_OK(be->ops->rope(be, y, other, T, H, Dh, fr, 0)); /* not batch_begin's */
    ASSERT_OK(be->ops->kv_store(be, kvd, &g, 0, x, x, page, row, T));
    ASSERT_OK(be->ops->attention(be, y, x, kvd, &g, 0, &ab));
    ASSERT_OK(be->ops->gather_rows(be, y, x, out_rows, 1, D));
    ASSERT_OK(be->ops->forward_end_hold(be, SEER_OK, &redo));
    assert_false(redo);
    ASSERT_OK(be->ops->forward_launch(be, true));
    ASSERT_OK(be->ops->sync(be));
    pthread_mutex_lock(&rec_mu);
    assert_int_equal(rec.batches, 1);
    assert_int_equal(rec.hits, 4); /* the padded embed and rope, attention, gather_rows */
    assert_memory_equal(rec.tok, ((const int32_t[4]){1, 2, 3, 0}), 4 * sizeof(int32_t));
    assert_int_equal(rec.misses, 1);
    assert_int_equal(rec.begins, 1);
    assert_int_equal(rec.key, (uintptr_t)x);
    assert_int_equal(rec.T_cap, 8);
    assert_int_equal(rec.ends, 1);
    assert_int_equal(rec.end_status, SEER_OK);
    assert_int_equal(rec.launches, 1);
    assert_int_equal(rec.last_run, 1);
    pthread_mutex_unlock(&rec_mu);
    /* the next call replays; an op that fails inside it spoils the recording */
    Tp = T;
    np = 1;
    ASSERT_OK(be->ops->batch_begin(be, &ab, tokens, pos, page, row, out_rows, 1));
    ASSERT_OK(be->ops->forward_begin_hold(be, x, 8, &Tp, &np, &done));
    assert_true(done);
    ASSERT_OK(be->ops->upload(be, fake_ptr(4000), inv, sizeof inv));
    assert_int_equal(be->ops->forward_end_hold(be, SEER_OK, &redo), SEER_ERR_FORMAT);
    assert_non_null(strstr(seer_last_error(), "upload (sent without waiting"));
    pthread_mutex_lock(&rec_mu);
    assert_int_equal(rec.ends, 2);
    assert_int_equal(rec.end_status, SEER_ERR_FORMAT);
    pthread_mutex_unlock(&rec_mu);
    be->ops->kv_free(be, kvd);
    be->ops->dealloc(be, x);
    be->ops->dealloc(be, y);
    be->ops->dealloc(be, fr);
    be->ops->weight_free(be, &emb);
    be->ops->free(be);
    pthread_join(th, NULL);
    ASSERT_OK(pa.s);
    cpu->ops->free(cpu);
}

/* ---- the collectives staged through rank 0 ----------------------------------------------- */

typedef struct {
    seer_comm *c;
    int r;
    size_t ld;
    float *dst;
    const float *src;
    seer_status s;
    char msg[512];
} gather_arg;

static void *gather_main(void *p) {
    gather_arg *a = p;
    const int col0[2] = {0, 2}, ncols[2] = {2, 2};
    a->s = a->c->gather_cols(a->c, a->r, a->dst, a->ld, 1, a->src, col0, ncols);
    snprintf(a->msg, sizeof a->msg, "%s", seer_last_error());
    return NULL;
}

/* Both ranks' gather_cols, each on a thread of its own (rank 0 on this one). */
static void gather_both(gather_arg *a) {
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, gather_main, &a[1]), 0);
    gather_main(&a[0]);
    pthread_join(th, NULL);
}

/* Rank 0's host buffer for a gather that cannot be had (rows of 2^50 floats): rank 0 fails
 * with its reason and rank 1, which needed nothing new, fails too, naming it, instead of
 * waiting forever in the collective rank 0 never entered; the next gather runs. */
static void test_staged_comm_no_memory(void **state) {
    (void)state;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    peer_arg pa = {.addr = addr, .rank = 1, .n = 2};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, peer_main, &pa), 0);
    int fds[SEER_TP_MAX];
    ASSERT_OK(seer_tp_remote_accept(addr, 2, 5000, fds));
    seer_backend *ranks[2] = {0};
    ASSERT_OK(seer_backend_cpu_init(1, &ranks[0]));
    ASSERT_OK(seer_backend_remote_init(fds[1], 1, 5000, ranks[0]->ops, &ranks[1]));
    seer_comm *c = NULL;
    ASSERT_OK(seer_tp_remote_comm_init(ranks, 2, &c));
    void *dst = NULL, *src1 = NULL;
    ASSERT_OK(ranks[0]->ops->alloc(ranks[0], 4 * sizeof(float), &dst));
    ASSERT_OK(ranks[1]->ops->alloc(ranks[1], 2 * sizeof(float), &src1));
    const float v0[2] = {1, 2}, v1[2] = {3, 4}, want[4] = {1, 2, 3, 4};
    ASSERT_OK(ranks[0]->ops->upload(ranks[0], dst, v0, sizeof v0));
    ASSERT_OK(ranks[1]->ops->upload(ranks[1], src1, v1, sizeof v1));
    gather_arg a[2] = {{.c = c, .r = 0, .ld = 1ull << 50, .dst = dst, .src = dst},
                       {.c = c, .r = 1, .ld = 1ull << 50, .src = src1}};
    gather_both(a);
    assert_int_equal(a[0].s, SEER_ERR_OOM);
    assert_int_equal(a[1].s, SEER_ERR_OOM);
    printf("staging without memory: rank 0: %s; rank 1: %s\n", a[0].msg, a[1].msg);
    assert_non_null(strstr(a[0].msg, "out of host memory"));
    assert_non_null(strstr(a[1].msg, "rank 0 had no host memory"));
    a[0].ld = a[1].ld = 4;
    gather_both(a);
    ASSERT_OK(a[0].s);
    ASSERT_OK(a[1].s);
    float got[4];
    ASSERT_OK(ranks[0]->ops->download(ranks[0], got, dst, sizeof got));
    assert_memory_equal(got, want, sizeof want);
    c->free(c);
    ranks[1]->ops->dealloc(ranks[1], src1);
    ranks[0]->ops->dealloc(ranks[0], dst);
    ranks[1]->ops->free(ranks[1]);
    ranks[0]->ops->free(ranks[0]);
    pthread_join(th, NULL);
    ASSERT_OK(pa.s);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_posted_failure_reported),
        cmocka_unit_test(test_staged_comm_no_memory),
        cmocka_unit_test(test_batch_and_recorded_calls),
        cmocka_unit_test(test_wrong_peer),
        cmocka_unit_test(test_stalled_message),
        cmocka_unit_test(test_absent_rank),
        cmocka_unit_test(test_logits_2),
        cmocka_unit_test(test_logits_4),
        cmocka_unit_test(test_golden_and_spec),
        cmocka_unit_test(test_draft_weights),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_kv_host_tier),
        cmocka_unit_test(test_killed_rank),
        cmocka_unit_test(test_stopped_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
