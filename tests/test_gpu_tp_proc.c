/*
 * test_gpu_tp_proc.c: tensor parallelism with ranks in separate processes on GPUs (skipped
 * without CUDA or with fewer than two GPUs): rank 0 here on device 0, rank 1 a `seer worker
 * --backend cuda` on device 1, NCCL between them from ncclCommInitRank (the id sent over the
 * op stream). Greedy ids of the golden prompts equal the in-process group's at tp 2, and
 * greedy speculation on vs off gives the same ids. The CPU's side is test_tp_proc.c.
 */
#include "backend/backend.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#ifdef SEER_HAVE_CUDA
static int gpu_count(void) {
    int n = 0;
    for (; n < 2; n++) {
        seer_backend *b = NULL;
        if (seer_backend_cuda_init(n, &b) != SEER_OK)
            break;
        b->ops->free(b);
    }
    return n;
}

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

static void test_gpu_two_procs(void **state) {
    (void)state;
    if (!seer_backend_cuda_available() || gpu_count() < 2) {
        skip();
        return;
    }
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], threads[3], procs[3], spec[3];
    tu_read_golden(prompts, plen, gold);
    tu_gen_ctx cx = {.n_ctx = 512, .page_size = 16, .n_batch_max = 128};
    seer_model *ref = tu_load_tp(tu_data_path("models/stories260K.gguf"), SEER_BACKEND_CUDA, 2);
    tu_gen_run(ref, seer_spec_default_params(), prompts[0], 64, plen, 3, -1, tu_greedy(), cx, threads, NULL);
    seer_model_free(ref);

    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    char *argv[] = {"seer", "worker", "--tp", "2", "--tp-rank", "1", "--tp-addr", addr, "--backend", "cuda",
                    "--timeout-ms", "60000", NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, SEER_CLI, NULL, NULL, argv, environ), 0);
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CUDA;
    mp.tp = 2;
    mp.tp_addr = addr;
    mp.tp_timeout_ms = 60000;
    seer_model *m = NULL;
    if (seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &m) != SEER_OK) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("two processes on two GPUs: %s", seer_last_error());
    }
    tu_gen_run(m, seer_spec_default_params(), prompts[0], 64, plen, 3, -1, tu_greedy(), cx, procs, NULL);
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof what, "two GPU processes against two GPU threads, prompt %d", i);
        tu_assert_same(&procs[i], &threads[i], what);
    }
    seer_spec_stats st = tu_gen_run(m, tu_spec(SEER_SPEC_STREAMING, 4, 24), prompts[0], 64, plen, 3, -1, tu_greedy(),
                                    cx, spec, NULL);
    assert_true(st.drafted > 0);
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof what, "two GPU processes, streaming, prompt %d", i);
        tu_assert_same(&spec[i], &procs[i], what);
    }
    seer_model_free(m);
    int wst = 0;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
}
#else
static void test_gpu_two_procs(void **state) { skip(); }
#endif

int main(void) {
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* as the seer tool does (tools/seer/main.c) */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_two_procs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
