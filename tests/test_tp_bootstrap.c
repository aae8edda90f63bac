/*
 * test_tp_bootstrap.c: the meeting of tensor-parallel ranks in separate processes
 * (src/parallel/tp_bootstrap.c): four processes on one host exchange a blob each over TCP and
 * every one gets all four in rank order; bad addresses and ranks are refused clearly; a peer
 * that disagrees on the group (a rank twice, another size) makes rank 0 fail with the reason
 * and the others fail too, and a rank with no rank 0 to reach gives up at its deadline.
 */
#include "testutil.h"

#include "parallel/tp_bootstrap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { BLOB = 24 };

/* A port free a moment ago on the loopback (the test's processes take it at once). */
static void free_addr(char *addr, size_t cap) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
    snprintf(addr, cap, "127.0.0.1:%d", ntohs(a.sin_port));
    close(s);
}

static void blob_of(int r, unsigned char *b) {
    for (int i = 0; i < BLOB; i++)
        b[i] = (unsigned char)(31 * r + 7 * i + 1);
}

/* One rank's part; the exit status of a child: 0 all blobs right, 1 wrong, 2 failed. */
static int rank_run(const char *addr, int r, int n, size_t bytes, int timeout_ms) {
    unsigned char mine[BLOB], all[16 * BLOB], want[BLOB];
    blob_of(r, mine);
    memset(all, 0xee, sizeof all);
    if (seer_tp_bootstrap(addr, r, n, mine, bytes, all, timeout_ms) != SEER_OK)
        return 2;
    for (int k = 0; k < n; k++) {
        blob_of(k, want);
        if (memcmp(all + (size_t)k * bytes, want, bytes) != 0)
            return 1;
    }
    return 0;
}

/* Children as ranks[i] of n[i] with bytes[i]; returns their pids. */
static void spawn(pid_t *pid, const char *addr, const int *ranks, const int *ns, const size_t *bytes, int m) {
    for (int i = 0; i < m; i++) {
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0)
            _exit(rank_run(addr, ranks[i], ns[i], bytes[i], 5000));
    }
}

static int status_of(pid_t p) {
    int st = 0;
    assert_int_equal(waitpid(p, &st, 0), p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

static void test_four_processes(void **state) {
    (void)state;
    char addr[64];
    free_addr(addr, sizeof addr);
    const int ranks[3] = {3, 1, 2}, ns[3] = {4, 4, 4}; /* they arrive in any order */
    const size_t bytes[3] = {BLOB, BLOB, BLOB};
    pid_t pid[3];
    spawn(pid, addr, ranks, ns, bytes, 3);
    const int me = rank_run(addr, 0, 4, BLOB, 5000);
    if (me == 2)
        fail_msg("rank 0: %s", seer_last_error());
    assert_int_equal(me, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(status_of(pid[i]), 0);
}

static void test_disagreeing_peers(void **state) {
    (void)state;
    char addr[64];
    unsigned char mine[BLOB], all[4 * BLOB];
    blob_of(0, mine);
    /* rank 1 twice */
    free_addr(addr, sizeof addr);
    const int twice[2] = {1, 1}, n3[2] = {3, 3};
    const size_t b2[2] = {BLOB, BLOB};
    pid_t pid[2];
    spawn(pid, addr, twice, n3, b2, 2);
    assert_int_equal(seer_tp_bootstrap(addr, 0, 3, mine, BLOB, all, 5000), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "each once"));
    for (int i = 0; i < 2; i++)
        assert_int_equal(status_of(pid[i]), 2); /* neither got the blobs */
    /* another blob size */
    free_addr(addr, sizeof addr);
    const int one[1] = {1}, n2[1] = {2};
    const size_t small[1] = {BLOB / 2};
    spawn(pid, addr, one, n2, small, 1);
    assert_int_equal(seer_tp_bootstrap(addr, 0, 2, mine, BLOB, all, 5000), SEER_ERR_INVALID_ARG);
    assert_non_null(strstr(seer_last_error(), "with 12 bytes"));
    assert_int_equal(status_of(pid[0]), 2);
}

static void test_bad_input(void **state) {
    (void)state;
    unsigned char mine[BLOB], all[4 * BLOB];
    blob_of(1, mine);
    const char *bad[] = {"nocolon", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", ":5000", "127.0.0.1:5x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(seer_tp_bootstrap(bad[i], 1, 2, mine, BLOB, all, 100), SEER_ERR_INVALID_ARG);
        assert_non_null(strstr(seer_last_error(), "HOST:PORT"));
    }
    assert_int_equal(seer_tp_bootstrap("127.0.0.1:5000", 2, 2, mine, BLOB, all, 100), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_tp_bootstrap("127.0.0.1:5000", 0, SEER_TP_MAX + 1, mine, BLOB, all, 100),
                     SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_tp_bootstrap("127.0.0.1:5000", 0, 2, mine, BLOB, all, 0), SEER_ERR_INVALID_ARG);
    /* one rank: its own blob, no network */
    memset(all, 0, sizeof all);
    ASSERT_OK(seer_tp_bootstrap("unused:1", 0, 1, mine, BLOB, all, 100));
    assert_memory_equal(all, mine, BLOB);
    /* nobody listening: rank 1 gives up at its deadline */
    char addr[64];
    free_addr(addr, sizeof addr);
    assert_int_equal(seer_tp_bootstrap(addr, 1, 2, mine, BLOB, all, 300), SEER_ERR_IO);
    assert_non_null(strstr(seer_last_error(), "cannot reach rank 0"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_four_processes),
        cmocka_unit_test(test_disagreeing_peers),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
