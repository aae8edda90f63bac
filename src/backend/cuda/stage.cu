/*
 * stage.cu: the host tier of the weights (src/model/host_weights.c): stage copies a layer's
 * bytes from page-locked host memory into a staging slot on a copy stream of the instance's
 * own, after the compute stream's work so far (an event the copy stream waits on) and beside
 * what the compute stream does next; stage_wait makes the compute stream wait for the slot's
 * copy. Both are stream operations, so a recorded forward call (graph.cu) records them as a
 * fork and a join of its graph. Also the benchmark's host-to-device bandwidth.
 * Not for: the weights' layout (weights.cu) or the index arrays' staging (cuda_backend.cu).
 */
#include "backend/cuda/cuda_common.cuh"

#include <stdlib.h>
#include <string.h>

struct seer_cuda_stg {
    cudaStream_t copy;
    cudaEvent_t fork[2], done[2];
    bool pending[2]; /* a copy into the slot was issued and not yet waited for */
};

seer_status seer_cuda_stg_init(seer_cuda *c) {
    seer_cuda_stg *g = (seer_cuda_stg *)calloc(1, sizeof *g);
    if (!g)
        return seer_err(SEER_ERR_OOM, "out of memory");
    c->stg = g;
    CUDA_TRY(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking));
    for (int b = 0; b < 2; b++) {
        CUDA_TRY(cudaEventCreateWithFlags(&g->fork[b], cudaEventDisableTiming));
        CUDA_TRY(cudaEventCreateWithFlags(&g->done[b], cudaEventDisableTiming));
    }
    return SEER_OK;
}

void seer_cuda_stg_free(seer_cuda *c) {
    seer_cuda_stg *g = c->stg;
    if (!g)
        return;
    if (g->copy && cudaStreamSynchronize(g->copy) != cudaSuccess)
        (void)cudaGetLastError();
    for (int b = 0; b < 2; b++) {
        if (g->fork[b])
            cudaEventDestroy(g->fork[b]);
        if (g->done[b])
            cudaEventDestroy(g->done[b]);
    }
    if (g->copy)
        cudaStreamDestroy(g->copy);
    free(g);
    c->stg = NULL;
}

seer_status seer_cuda_stage(seer_backend *be, int slot, void *dst, const void *src, size_t bytes) {
    seer_cuda *c = seer_cuda_of(be);
    seer_cuda_stg *g = c->stg;
    if (slot < 0 || slot > 1)
        return seer_err(SEER_ERR_INVALID_ARG, "stage: slot %d is not 0 or 1", slot);
    CUDA_TRY(cudaEventRecord(g->fork[slot], c->stream));
    CUDA_TRY(cudaStreamWaitEvent(g->copy, g->fork[slot], 0));
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g->copy));
    CUDA_TRY(cudaEventRecord(g->done[slot], g->copy));
    g->pending[slot] = true;
    return SEER_OK;
}

seer_status seer_cuda_stage_wait(seer_backend *be, int slot) {
    seer_cuda *c = seer_cuda_of(be);
    seer_cuda_stg *g = c->stg;
    if (slot < 0 || slot > 1)
        return seer_err(SEER_ERR_INVALID_ARG, "stage_wait: slot %d is not 0 or 1", slot);
    if (!g->pending[slot])
        return SEER_OK;
    CUDA_TRY(cudaStreamWaitEvent(c->stream, g->done[slot], 0));
    g->pending[slot] = false;
    return SEER_OK;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* h2d_bandwidth: bytes per second of a large copy from page-locked host memory to the device,
 * the median of several (1 GiB, less when memory is short). */
seer_status seer_cuda_h2d_bandwidth(seer_backend *be, double *bytes_per_s) {
    seer_cuda *c = seer_cuda_of(be);
    size_t bytes = (size_t)1 << 30;
    void *dst = NULL, *src = NULL;
    for (; bytes >= ((size_t)64 << 20); bytes /= 2) {
        if (seer_cuda_malloc(c, bytes, "the host-to-device probe", &dst) != SEER_OK)
            continue;
        if (cudaHostAlloc(&src, bytes, cudaHostAllocPortable) == cudaSuccess)
            break;
        (void)cudaGetLastError();
        src = NULL;
        seer_cuda_free(c, dst);
        dst = NULL;
    }
    if (!src)
        return seer_err(SEER_ERR_OOM, "h2d_bandwidth: no memory for two 64 MiB buffers");
    enum { REPS = 7 };
    float ms[REPS];
    memset(src, 1, bytes);
    const seer_status s = seer_cuda_time_copies(c, dst, src, bytes, cudaMemcpyHostToDevice, ms, REPS);
    cudaFreeHost(src);
    seer_cuda_free(c, dst);
    if (s != SEER_OK)
        return s;
    qsort(ms, REPS, sizeof *ms, cmp_float);
    *bytes_per_s = ms[REPS / 2] > 0 ? (double)bytes / (ms[REPS / 2] * 1e-3) : 0;
    return SEER_OK;
}
