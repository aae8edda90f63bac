/*
 * profile.cu: where the device time of forward calls goes, op by op. With
 * SEER_CUDA_PROFILE=FILE the backend runs without recorded graphs, records an event after
 * every op (matmuls keyed by their weight's shape, attention by its kernels) and, when the
 * backend instance that ran them is freed, writes to FILE each op's calls, total and mean
 * time and share (one table per instance, in the order they are freed). An op's time is the
 * interval between the events before and after it on the stream, so it includes the launch
 * gap in front of its kernels: what a decode step really pays for the op.
 * Not for: normal runs (the events cost time) or timing recorded (graph) replays.
 */
#include "backend/cuda/cuda_common.cuh"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROF_EVENTS 2048
#define PROF_KEYS 96

struct seer_cuda_prof {
    char path[1024];
    cudaEvent_t ev[PROF_EVENTS];
    int key[PROF_EVENTS]; /* key of the interval ending at ev[i]; ev[0] is a base */
    int n, n_created;
    char name[PROF_KEYS][48];
    double ms[PROF_KEYS];
    long calls[PROF_KEYS];
    int n_keys;
};

seer_status seer_cuda_prof_init(seer_cuda *c, const char *path) {
    seer_cuda_prof *p = (seer_cuda_prof *)calloc(1, sizeof *p);
    if (!p)
        return seer_err(SEER_ERR_OOM, "out of memory");
    snprintf(p->path, sizeof p->path, "%s", path);
    c->prof = p;
    return SEER_OK;
}

const char *seer_cuda_prof_path(const seer_cuda *c) { return c->prof ? c->prof->path : ""; }

static int prof_key(seer_cuda_prof *p, const char *name) {
    for (int i = 0; i < p->n_keys; i++)
        if (!strcmp(p->name[i], name))
            return i;
    if (p->n_keys == PROF_KEYS)
        return PROF_KEYS - 1; /* the last key collects the overflow */
    snprintf(p->name[p->n_keys], sizeof p->name[0], "%s", name);
    return p->n_keys++;
}

static void prof_flush(seer_cuda_prof *p) {
    if (p->n < 2)
        return;
    if (cudaEventSynchronize(p->ev[p->n - 1]) != cudaSuccess) {
        (void)cudaGetLastError();
        p->n = 0;
        return;
    }
    for (int i = 1; i < p->n; i++) {
        float ms = 0.f;
        if (cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]) == cudaSuccess) {
            p->ms[p->key[i]] += ms;
            p->calls[p->key[i]]++;
        } else {
            (void)cudaGetLastError();
        }
    }
    /* the last event is the base of the next intervals */
    cudaEvent_t last = p->ev[p->n - 1];
    p->ev[p->n - 1] = p->ev[0];
    p->ev[0] = last;
    p->n = 1;
}

/* Ends the interval of the op named name (printf-style) at this point of the stream.
 * base = true starts a new chain instead (nothing before it is attributed). */
void seer_cuda_prof_mark(seer_cuda *c, bool base, const char *fmt, ...) {
    seer_cuda_prof *p = c->prof;
    if (!p)
        return;
    if (base) {
        prof_flush(p);
        p->n = 0;
    }
    if (p->n == PROF_EVENTS)
        prof_flush(p);
    if (p->n == p->n_created) {
        if (cudaEventCreate(&p->ev[p->n]) != cudaSuccess) {
            (void)cudaGetLastError();
            return;
        }
        p->n_created++;
    }
    char name[48];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    p->key[p->n] = prof_key(p, name);
    if (cudaEventRecord(p->ev[p->n], c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    p->n++;
}

void seer_cuda_prof_free(seer_cuda *c) {
    seer_cuda_prof *p = c->prof;
    if (!p)
        return;
    prof_flush(p);
    double total = 0;
    for (int i = 0; i < p->n_keys; i++)
        total += p->ms[i];
    /* Each context has its own instance: each that ran ops writes its table to FILE, the
     * process's first over what FILE held, later ones after it. */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int written;
    pthread_mutex_lock(&mu);
    FILE *f = p->n_keys ? fopen(p->path, written ? "a" : "w") : NULL;
    if (f) {
        if (written)
            fputc('\n', f);
        written = 1;
        fprintf(f, "%-32s %8s %10s %10s %7s\n", "op", "calls", "total ms", "mean us", "share");
        for (int i = 0; i < p->n_keys; i++)
            fprintf(f, "%-32s %8ld %10.3f %10.2f %6.1f%%\n", p->name[i], p->calls[i], p->ms[i],
                    p->calls[i] ? 1000.0 * p->ms[i] / p->calls[i] : 0.0,
                    total > 0 ? 100.0 * p->ms[i] / total : 0.0);
        fprintf(f, "%-32s %8s %10.3f\n", "all", "", total);
        fclose(f);
    }
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < p->n_created; i++)
        if (cudaEventDestroy(p->ev[i]) != cudaSuccess)
            (void)cudaGetLastError();
    free(p);
    c->prof = NULL;
}
