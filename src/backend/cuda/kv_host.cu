/*
 * kv_host.cu: the host tier's copies (backend.h kv_host_copy): whole KV pages between the
 * device's storage and page-locked host memory, on a copy stream of the instance's own so that
 * they overlap the forward calls on its compute stream. Each batch of copies waits for an
 * event recorded on the compute stream when it is issued (it reads what earlier ops wrote and
 * overwrites nothing they still read) and records an event of its own, its ticket; the caller
 * keeps later ops off those pages until the ticket is complete.
 *
 * A page goes to its host slot as its rows (seer_cuda_kv_rows_bytes) then, with kv_bits, its
 * quantised copy; runs of consecutive pages into consecutive slots go as one 2-D copy.
 * Not for: the tier's bookkeeping (kv/kv_host.c) or the storage itself (kv.cu).
 */
#include "backend/cuda/cuda_common.cuh"

#include <stdlib.h>

/* Events of the latest tickets; an older ticket's slot holds a later one, whose completion
 * implies its own (one stream, in order). */
#define KVH_EVENTS 64

struct seer_cuda_kvh {
    cudaStream_t stream; /* made at the first copy, on the instance's device */
    cudaEvent_t issued_at;
    cudaEvent_t ev[KVH_EVENTS];
    uint64_t ev_ticket[KVH_EVENTS];
    uint64_t issued, completed;
};

seer_status seer_cuda_kvh_init(seer_cuda *c) {
    c->kvh = (seer_cuda_kvh *)calloc(1, sizeof *c->kvh);
    return c->kvh ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

void seer_cuda_kvh_free(seer_cuda *c) {
    seer_cuda_kvh *h = c->kvh;
    if (!h)
        return;
    if (h->stream) {
        if (cudaStreamSynchronize(h->stream) != cudaSuccess)
            (void)cudaGetLastError();
        for (int i = 0; i < KVH_EVENTS; i++)
            cudaEventDestroy(h->ev[i]);
        cudaEventDestroy(h->issued_at);
        cudaStreamDestroy(h->stream);
        (void)cudaGetLastError();
    }
    free(h);
    c->kvh = NULL;
}

static seer_status kvh_start(seer_cuda_kvh *h) {
    if (h->stream)
        return SEER_OK;
    CUDA_TRY(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreateWithFlags(&h->issued_at, cudaEventDisableTiming));
    for (int i = 0; i < KVH_EVENTS; i++)
        CUDA_TRY(cudaEventCreateWithFlags(&h->ev[i], cudaEventDisableTiming));
    return SEER_OK;
}

seer_status seer_cuda_kv_host_copy(seer_backend *be, void *kv, const seer_kv_geom *g, void *host,
                                   size_t stride, const int32_t *pages, const int32_t *slots, int n,
                                   bool to_host, uint64_t *ticket) {
    seer_cuda *c = seer_cuda_of(be);
    seer_cuda_kvh *h = c->kvh;
    const size_t pb = seer_cuda_kv_rows_bytes(g), qb = seer_cuda_kvq_page_bytes(g);
    SEER_TRY(seer_kv_host_check(g, stride, pb + qb, pages, slots, n));
    uint8_t *q = g->kv_bits ? seer_cuda_kv_qdata(c, kv) : NULL;
    if (g->kv_bits && !q)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_host_copy: the storage has no quantised copy");
    SEER_TRY(kvh_start(h));
    CUDA_TRY(cudaEventRecord(h->issued_at, c->stream));
    CUDA_TRY(cudaStreamWaitEvent(h->stream, h->issued_at, 0));
    const cudaMemcpyKind kind = to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
    for (int i = 0; i < n;) {
        int run = 1;
        while (i + run < n && pages[i + run] == pages[i] + run && slots[i + run] == slots[i] + run)
            run++;
        char *hp = (char *)host + stride * (size_t)slots[i];
        char *dp = (char *)kv + pb * (size_t)pages[i];
        if (to_host)
            CUDA_TRY(cudaMemcpy2DAsync(hp, stride, dp, pb, pb, run, kind, h->stream));
        else
            CUDA_TRY(cudaMemcpy2DAsync(dp, pb, hp, stride, pb, run, kind, h->stream));
        if (q) {
            char *qp = (char *)q + qb * (size_t)pages[i];
            if (to_host)
                CUDA_TRY(cudaMemcpy2DAsync(hp + pb, stride, qp, qb, qb, run, kind, h->stream));
            else
                CUDA_TRY(cudaMemcpy2DAsync(qp, qb, hp + pb, stride, qb, run, kind, h->stream));
        }
        i += run;
    }
    const uint64_t t = ++h->issued;
    CUDA_TRY(cudaEventRecord(h->ev[t % KVH_EVENTS], h->stream));
    h->ev_ticket[t % KVH_EVENTS] = t;
    *ticket = t;
    return SEER_OK;
}

static seer_status ticket_check(const seer_cuda_kvh *h, uint64_t ticket) {
    if (ticket > h->issued)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_host: ticket %llu was never issued (%llu so far)",
                        (unsigned long long)ticket, (unsigned long long)h->issued);
    return SEER_OK;
}

seer_status seer_cuda_kv_host_done(seer_backend *be, uint64_t ticket, bool *done) {
    seer_cuda_kvh *h = seer_cuda_of(be)->kvh;
    SEER_TRY(ticket_check(h, ticket));
    *done = ticket <= h->completed;
    if (*done)
        return SEER_OK;
    const int i = (int)(ticket % KVH_EVENTS);
    const cudaError_t e = cudaEventQuery(h->ev[i]);
    if (e == cudaErrorNotReady)
        return SEER_OK;
    CUDA_TRY(e);
    if (h->ev_ticket[i] > h->completed)
        h->completed = h->ev_ticket[i];
    *done = true;
    return SEER_OK;
}

seer_status seer_cuda_kv_host_wait(seer_backend *be, uint64_t ticket) {
    seer_cuda_kvh *h = seer_cuda_of(be)->kvh;
    SEER_TRY(ticket_check(h, ticket));
    if (ticket <= h->completed)
        return SEER_OK;
    const int i = (int)(ticket % KVH_EVENTS);
    CUDA_TRY(cudaEventSynchronize(h->ev[i]));
    if (h->ev_ticket[i] > h->completed)
        h->completed = h->ev_ticket[i];
    return SEER_OK;
}
