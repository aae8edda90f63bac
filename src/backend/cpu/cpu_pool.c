/*
 * cpu_pool.c: the CPU backend's thread pool. Every parallel op hands it a range of items;
 * the calling thread and the workers take chunks of it from one atomic counter until none
 * is left.
 *
 * Why not OpenMP: libgomp's threads spin at every barrier (OMP_WAIT_POLICY is read once,
 * when the library loads, and there is no call to change it), and a static split makes the
 * whole op wait for the thread whose core is busy with another process. On a loaded 2-core
 * machine that took decode from 36 to 2.5-4.4 tok/s. Here chunks are taken dynamically, so
 * a thread that is not running simply takes fewer of them, and idle threads spin only for a
 * bounded time (SPIN_NS) before they sleep on a futex.
 *
 * Results do not depend on which thread runs a chunk: every op computes each output element
 * by one fixed sequence of operations, so the thread count changes no output bit.
 *
 * Not for: nested parallelism (a task must not call seer_cpu_pool_run) or running two jobs
 * at once on one pool (one backend is driven by one thread at a time).
 */
#define _GNU_SOURCE
#include "backend/cpu/cpu.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long an idle thread spins before it sleeps: long enough to bridge the gap between
 * two ops of one forward call (microseconds), short enough that a thread whose core another
 * process wants gives it back. */
#define SPIN_NS 50000

/* One job. Jobs alternate between two slots so that a worker that read generation g's state
 * and is descheduled never sees g's slot rewritten while g can still hand out chunks: slot
 * g & 1 is next written for g + 2, after g is complete. The fields are atomics because a
 * stale worker may read a slot while it is being rewritten; it then fails its claim. */
typedef struct {
    _Atomic(seer_cpu_task) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n, chunk;
    _Atomic uint32_t n_chunks;
} pool_job;

struct seer_cpu_pool {
    int n_workers;
    pthread_t *th;
    /* generation << 32 | next chunk to hand out */
    _Atomic uint64_t state;
    pool_job job[2];
    _Atomic uint32_t done;     /* chunks finished in the current generation (futex word) */
    _Atomic uint32_t wake;     /* low 32 bits of the generation (futex word) */
    _Atomic int sleepers;      /* workers asleep on wake */
    _Atomic int main_waiting;  /* the caller asleep on done */
    _Atomic int stop;
};

static void futex_wait(_Atomic uint32_t *w, uint32_t expect) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, expect, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Claims and runs chunks of the generation in s while any is left; returns false when the
 * generation has none left (or moved on). */
static bool run_chunks(seer_cpu_pool *p, uint64_t s, bool is_main) {
    for (;;) {
        const pool_job *j = &p->job[(s >> 32) & 1];
        uint32_t idx = (uint32_t)s;
        uint32_t nch = atomic_load_explicit(&j->n_chunks, memory_order_relaxed);
        if (idx >= nch)
            return false;
        seer_cpu_task fn = atomic_load_explicit(&j->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&j->ctx, memory_order_relaxed);
        int64_t n = atomic_load_explicit(&j->n, memory_order_relaxed);
        int64_t chunk = atomic_load_explicit(&j->chunk, memory_order_relaxed);
        if (!atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* s now holds the current state */
        /* The claim succeeded, so this generation was current and incomplete after the
         * fields were read: they are this generation's. */
        int64_t i0 = (int64_t)idx * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        fn(ctx, i0, i1);
        uint32_t d = atomic_fetch_add(&p->done, 1) + 1; /* seq_cst: pairs with main_waiting */
        if (!is_main && d == nch && atomic_load(&p->main_waiting))
            futex_wake(&p->done);
        s += 1;
    }
}

static void *worker_main(void *arg) {
    seer_cpu_pool *p = arg;
    for (;;) {
        uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        run_chunks(p, s, false);
        /* Nothing left in generation s >> 32: wait for the next one. */
        const uint32_t gen = (uint32_t)(s >> 32);
        int64_t t0 = now_ns();
        for (int k = 0;; k++) {
            if ((uint32_t)(atomic_load_explicit(&p->state, memory_order_acquire) >> 32) != gen ||
                atomic_load_explicit(&p->stop, memory_order_relaxed))
                break;
            cpu_relax();
            if ((k & 63) == 63 && now_ns() - t0 > SPIN_NS) {
                atomic_fetch_add(&p->sleepers, 1);
                if (atomic_load(&p->wake) == gen && !atomic_load(&p->stop))
                    futex_wait(&p->wake, gen);
                atomic_fetch_sub(&p->sleepers, 1);
                t0 = now_ns();
            }
        }
    }
}

void seer_cpu_pool_run(seer_cpu_pool *p, int64_t n, int64_t chunk, seer_cpu_task fn, void *ctx) {
    if (n <= 0)
        return;
    if (chunk < 1)
        chunk = 1;
    int64_t nch = (n + chunk - 1) / chunk;
    if (!p || p->n_workers == 0 || nch == 1 || nch > UINT32_MAX) {
        fn(ctx, 0, n);
        return;
    }
    uint64_t s = atomic_load_explicit(&p->state, memory_order_relaxed);
    uint64_t gen = (s >> 32) + 1;
    pool_job *j = &p->job[gen & 1];
    atomic_store_explicit(&j->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&j->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&j->n, n, memory_order_relaxed);
    atomic_store_explicit(&j->chunk, chunk, memory_order_relaxed);
    atomic_store_explicit(&j->n_chunks, (uint32_t)nch, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    s = gen << 32;
    atomic_store_explicit(&p->state, s, memory_order_release);
    atomic_store(&p->wake, (uint32_t)gen);
    if (atomic_load(&p->sleepers) > 0)
        futex_wake(&p->wake);
    run_chunks(p, s, true);
    /* Wait for chunks other threads still run. */
    int64_t t0 = now_ns();
    for (int k = 0;; k++) {
        uint32_t d = atomic_load_explicit(&p->done, memory_order_acquire);
        if (d == (uint32_t)nch)
            break;
        cpu_relax();
        if ((k & 63) == 63 && now_ns() - t0 > SPIN_NS) {
            atomic_store(&p->main_waiting, 1);
            d = atomic_load(&p->done);
            if (d != (uint32_t)nch)
                futex_wait(&p->done, d);
            atomic_store(&p->main_waiting, 0);
        }
    }
}

seer_status seer_cpu_pool_init(int n_threads, seer_cpu_pool **out) {
    seer_cpu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return seer_err(SEER_ERR_OOM, "thread pool: out of memory");
    p->n_workers = n_threads > 1 ? n_threads - 1 : 0;
    if (p->n_workers) {
        p->th = calloc((size_t)p->n_workers, sizeof *p->th);
        if (!p->th) {
            free(p);
            return seer_err(SEER_ERR_OOM, "thread pool: out of memory");
        }
    }
    for (int i = 0; i < p->n_workers; i++) {
        int e = pthread_create(&p->th[i], NULL, worker_main, p);
        if (e) {
            p->n_workers = i;
            seer_cpu_pool_free(p);
            return seer_err(SEER_ERR_OOM, "thread pool: cannot start thread %d of %d (error %d)",
                            i + 1, n_threads, e);
        }
    }
    *out = p;
    return SEER_OK;
}

void seer_cpu_pool_free(seer_cpu_pool *p) {
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->wake, 1);
    futex_wake(&p->wake);
    for (int i = 0; i < p->n_workers; i++)
        pthread_join(p->th[i], NULL);
    free(p->th);
    free(p);
}

/* Cores this process may run on: its affinity mask, capped by a cgroup v2 CPU quota. */
int seer_cpu_default_threads(void) {
    int n = 1;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    else {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        char quota[32] = {0};
        long long period = 0;
        if (fscanf(f, "%31s %lld", quota, &period) == 2 && period > 0) {
            char *end = NULL;
            long long q = strtoll(quota, &end, 10);
            if (end != quota && *end == '\0' && q > 0) {
                long long c = (q + period - 1) / period;
                if (c < n)
                    n = (int)c;
            }
        }
        fclose(f);
    }
    return n > 0 ? n : 1;
}
