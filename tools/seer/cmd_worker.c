/*
 * cmd_worker.c: `seer worker`: one rank of a tensor-parallel group in a process of its own
 * (docs/tensor-parallel.md). It connects to rank 0 (`seer generate|chat|serve --tp N
 * --tp-addr HOST:PORT`, or `--tp-procs`, which starts its workers itself) and runs the ops
 * rank 0 sends until rank 0 ends. It reads no model: rank 0 sends each rank its part.
 * Also: starting the workers of `--tp-procs` and waiting for them (cli_tp_spawn, cli_tp_reap).
 */
#include "cli.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void usage(FILE *f) {
    fprintf(f, "usage: seer worker --tp N --tp-rank R --tp-addr HOST:PORT [options]\n"
               "  --tp N               ranks of the group (2 to %d)\n"
               "  --tp-rank R          this process's rank (1 to N-1; rank 0 is the one with the model)\n"
               "  --tp-addr HOST:PORT  where rank 0 listens (its --tp-addr)\n"
               "  --backend B          cpu, cuda or auto (default auto; CUDA: device R)\n"
               "  -t, --threads N      CPU threads (default: all cores)\n"
               "  --timeout-ms N       how long to try to reach rank 0 (default 60000)\n",
            SEER_TP_MAX);
}

int cmd_worker(int argc, char **argv) {
    seer_model_params mp = seer_model_default_params();
    long long n = 0, rank = -1, v;
    const char *addr = NULL;
    enum { O_TP = 256, O_RANK, O_ADDR, O_BACKEND, O_TIMEOUT };
    static const struct option opts[] = {{"tp", required_argument, 0, O_TP},
                                         {"tp-rank", required_argument, 0, O_RANK},
                                         {"tp-addr", required_argument, 0, O_ADDR},
                                         {"backend", required_argument, 0, O_BACKEND},
                                         {"threads", required_argument, 0, 't'},
                                         {"timeout-ms", required_argument, 0, O_TIMEOUT},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:h", opts, NULL)) != -1) {
        switch (c) {
        case O_TP: if (!cli_int("--tp", optarg, 2, SEER_TP_MAX, &n)) return 2; break;
        case O_RANK: if (!cli_int("--tp-rank", optarg, 1, SEER_TP_MAX - 1, &rank)) return 2; break;
        case O_ADDR: addr = optarg; break;
        case O_BACKEND: if (!cli_backend(optarg, &mp.backend)) return 2; break;
        case 't': if (!cli_int("--threads", optarg, 1, 1024, &v)) return 2; mp.n_threads = (int)v; break;
        case O_TIMEOUT: if (!cli_int("--timeout-ms", optarg, 1, 1 << 30, &v)) return 2; mp.tp_timeout_ms = (int)v; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!n || rank < 0 || !addr || rank >= n) {
        fprintf(stderr, "seer worker: --tp N, --tp-rank R (1 to N-1) and --tp-addr HOST:PORT are needed\n");
        usage(stderr);
        return 2;
    }
    const seer_status s = seer_tp_worker(addr, (int)rank, (int)n, mp);
    if (s != SEER_OK) {
        cli_error("worker", s);
        return 1;
    }
    return 0;
}

/* A port of 127.0.0.1 free now (the kernel's choice), for the workers to meet rank 0 at. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

bool cli_tp_spawn(const cli_common *c, char *addr, size_t cap, int *pids) {
    for (int r = 0; r < SEER_TP_MAX; r++)
        pids[r] = -1;
    const int port = free_port();
    if (port < 0) {
        fprintf(stderr, "seer: --tp-procs: no free port on 127.0.0.1\n");
        return false;
    }
    snprintf(addr, cap, "127.0.0.1:%d", port);
    char n_s[16], t_s[24], r_s[16];
    snprintf(n_s, sizeof n_s, "%lld", c->tp);
    snprintf(t_s, sizeof t_s, "%lld", c->threads > 0 ? (c->threads / c->tp > 0 ? c->threads / c->tp : 1) : 0);
    const char *be = c->backend == SEER_BACKEND_CPU ? "cpu" : c->backend == SEER_BACKEND_CUDA ? "cuda" : "auto";
    /* A worker starts with no signal blocked and SIGINT, SIGTERM and SIGHUP at their default:
     * `seer serve` blocks them in every thread (it takes them with sigwait), and a worker that
     * inherited that would ignore cli_tp_reap's SIGTERM and the terminal's Ctrl-C. */
    posix_spawnattr_t at;
    sigset_t none, def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGTERM);
    sigaddset(&def, SIGHUP);
    int e = posix_spawnattr_init(&at);
    if (e == 0 && ((e = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)) != 0 ||
                   (e = posix_spawnattr_setsigmask(&at, &none)) != 0 ||
                   (e = posix_spawnattr_setsigdefault(&at, &def)) != 0))
        posix_spawnattr_destroy(&at);
    if (e != 0) {
        fprintf(stderr, "seer: --tp-procs: cannot set up the workers' start: %s\n", strerror(e));
        return false;
    }
    for (int r = 1; r < c->tp; r++) {
        snprintf(r_s, sizeof r_s, "%d", r);
        char *argv[16];
        int k = 0;
        argv[k++] = "seer";
        argv[k++] = "worker";
        argv[k++] = "--tp";
        argv[k++] = n_s;
        argv[k++] = "--tp-rank";
        argv[k++] = r_s;
        argv[k++] = "--tp-addr";
        argv[k++] = addr;
        argv[k++] = "--backend";
        argv[k++] = (char *)be;
        if (c->threads > 0) {
            argv[k++] = "--threads";
            argv[k++] = t_s;
        }
        argv[k] = NULL;
        pid_t pid;
        e = posix_spawn(&pid, "/proc/self/exe", NULL, &at, argv, environ);
        if (e != 0) {
            fprintf(stderr, "seer: --tp-procs: cannot start rank %d: %s\n", r, strerror(e));
            posix_spawnattr_destroy(&at);
            cli_tp_reap(pids, true);
            return false;
        }
        pids[r] = pid;
    }
    posix_spawnattr_destroy(&at);
    return true;
}

void cli_tp_reap(int *pids, bool kill_them) {
    for (int r = 1; r < SEER_TP_MAX; r++) {
        if (pids[r] <= 0)
            continue;
        if (kill_them)
            kill(pids[r], SIGTERM);
        int st;
        (void)waitpid(pids[r], &st, 0);
        pids[r] = -1;
    }
}

bool cli_tp_setup(const char *cmd, cli_common *c, seer_model_params *mp) {
    if ((c->tp_procs || c->tp_addr) && c->tp < 2) {
        fprintf(stderr, "seer %s: --tp-addr and --tp-procs need --tp 2 or more\n", cmd);
        return false;
    }
    if (c->tp_procs && c->tp_addr) {
        fprintf(stderr, "seer %s: --tp-procs picks its own address; leave --tp-addr out\n", cmd);
        return false;
    }
    mp->tp_addr = c->tp_addr;
    if (!c->tp_procs)
        return true;
    if (!cli_tp_spawn(c, c->tp_addr_buf, sizeof c->tp_addr_buf, c->tp_pids))
        return false;
    mp->tp_addr = c->tp_addr_buf;
    return true;
}
