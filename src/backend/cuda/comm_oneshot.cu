/*
 * comm_oneshot.cu: a one-shot all-reduce for the small messages of decoding (a few rows of
 * the residual stream, 8 to 256 KiB), over peer memory between the GPUs of one host: each rank
 * writes its buffer into every rank's receive area, raises a flag in every rank's memory,
 * waits for every rank's flag, and sums the n copies in rank order, (b0 + b1) + b2 ..., in
 * one kernel. NCCL's ring takes about 20 us for such a message; one NVLink round trip is a
 * few. The sum is the CPU reference's (cpu_comm.c), bit for bit, whatever the message's
 * size: a row's bits do not depend on what else is in the call.
 * The peers' addresses come from cudaDeviceEnablePeerAccess within one process, and from CUDA
 * IPC handles between processes (seer_oneshot_ipc_init / _open; not yet run on a GPU). Larger messages, and GPUs without
 * peer access, go through NCCL (comm_nccl.cu).
 * Not for: NCCL itself, or deciding when to reduce (src/parallel/).
 */
#include "backend/cuda/comm_oneshot.cuh"

#include <stdlib.h>
#include <string.h>

/* A fixed grid, the same on every rank and every call: block b of each rank meets block b of
 * the others, and its call counter (which picks the receive slot) stays in step with theirs
 * only if every block runs in every call. */
#define OS_BLOCKS 32
#define OS_THREADS 512

struct seer_oneshot {
    int n;
    size_t cap;                          /* floats per message */
    seer_cuda *rank[SEER_TP_MAX];        /* borrowed: freed after this */
    float *recv[SEER_TP_MAX];            /* rank r's [2 slots][n senders][cap], in its memory */
    unsigned *flag[SEER_TP_MAX];         /* rank r's [n senders][OS_BLOCKS] */
    unsigned *calls[SEER_TP_MAX];        /* rank r's [OS_BLOCKS]: calls so far, per block */
    int me;                              /* between processes: the rank this process holds */
    bool opened[SEER_TP_MAX];            /* ... recv and flag of rank k mapped by CUDA IPC */
};

typedef struct {
    float *buf;
    size_t count, cap;
    int n, r;
    float *recv[SEER_TP_MAX];
    unsigned *flag[SEER_TP_MAX];
    unsigned *calls; /* this rank's */
} oneshot_args;

static __device__ __forceinline__ void flag_release(unsigned *p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ unsigned flag_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __global__ void __launch_bounds__(OS_THREADS) oneshot_kernel(oneshot_args a) {
    __shared__ unsigned call;
    const int b = blockIdx.x;
    if (threadIdx.x == 0)
        call = ++a.calls[b];
    __syncthreads();
    const size_t slot = call & 1u; /* a peer is at most one call ahead: it cannot reach this
                                    * slot again before every rank has left this call */
    const size_t per = (a.count + OS_BLOCKS - 1) / OS_BLOCKS;
    const size_t i0 = per * (size_t)b, i1 = i0 + per < a.count ? i0 + per : a.count;
    /* push this block's share into every rank's receive area, at this rank's place */
    for (int k = 0; k < a.n; k++) {
        float *dst = a.recv[k] + (slot * a.n + a.r) * a.cap;
        for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
            dst[i] = a.buf[i];
    }
    __syncthreads();
    if (threadIdx.x < a.n) {
        __threadfence_system();
        flag_release(a.flag[threadIdx.x] + a.r * OS_BLOCKS + b, call);
        /* every rank's share of this block has arrived once its flag reaches this call */
        const unsigned *f = a.flag[a.r] + threadIdx.x * OS_BLOCKS + b;
        while ((int)(flag_acquire(f) - call) < 0)
            ;
    }
    __syncthreads();
    const float *in = a.recv[a.r] + slot * a.n * a.cap;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        float s = __ldcg(in + i);
        for (int k = 1; k < a.n; k++)
            s += __ldcg(in + (size_t)k * a.cap + i);
        a.buf[i] = s;
    }
}

void seer_oneshot_free(seer_oneshot *o) {
    if (!o)
        return;
    for (int r = 0; r < o->n; r++) {
        if (o->opened[r]) {
            (void)cudaIpcCloseMemHandle(o->recv[r]);
            (void)cudaIpcCloseMemHandle(o->flag[r]);
            (void)cudaGetLastError();
        }
        if (!o->rank[r])
            continue;
        if (cudaSetDevice(o->rank[r]->device) != cudaSuccess)
            (void)cudaGetLastError();
        seer_cuda_free(o->rank[r], o->recv[r]);
        seer_cuda_free(o->rank[r], o->flag[r]);
        seer_cuda_free(o->rank[r], o->calls[r]);
    }
    free(o);
}

/* Whether every pair of the ranks' devices reaches the other's memory. */
static bool peers_reach(seer_cuda *const *rank, int n) {
    for (int r = 0; r < n; r++)
        for (int k = 0; k < n; k++) {
            int ok = 0;
            if (r != k && (cudaDeviceCanAccessPeer(&ok, rank[r]->device, rank[k]->device) != cudaSuccess || !ok)) {
                (void)cudaGetLastError();
                return false;
            }
        }
    return true;
}

/* Rank r's receive area, flags and counters, zeroed. */
static seer_status alloc_rank(seer_oneshot *o, seer_cuda *c, int r) {
    const size_t flags = (size_t)o->n * OS_BLOCKS * sizeof(unsigned);
    SEER_TRY(seer_cuda_malloc(c, 2 * (size_t)o->n * o->cap * sizeof(float), "the one-shot all-reduce's receive area",
                              (void **)&o->recv[r]));
    SEER_TRY(seer_cuda_malloc(c, flags, "the one-shot all-reduce's flags", (void **)&o->flag[r]));
    SEER_TRY(seer_cuda_malloc(c, OS_BLOCKS * sizeof(unsigned), "the one-shot all-reduce's counters",
                              (void **)&o->calls[r]));
    CUDA_TRY(cudaMemset(o->flag[r], 0, flags));
    CUDA_TRY(cudaMemset(o->calls[r], 0, OS_BLOCKS * sizeof(unsigned)));
    CUDA_TRY(cudaDeviceSynchronize()); /* zeroed before any peer writes a flag */
    return SEER_OK;
}

/* Rank r's device reaching the others' memory, and its receive area, flags and counters. */
static seer_status setup_rank(seer_oneshot *o, seer_cuda *const *rank, int r) {
    seer_cuda *c = rank[r];
    const int n = o->n;
    CUDA_TRY(cudaSetDevice(c->device));
    for (int k = 0; k < n; k++) {
        if (k == r)
            continue;
        const cudaError_t e = cudaDeviceEnablePeerAccess(rank[k]->device, 0);
        (void)cudaGetLastError(); /* "already enabled" is no failure, and not sticky */
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
            return seer_err(SEER_ERR_BACKEND, "CUDA: device %d cannot map device %d's memory: %s", c->device,
                            rank[k]->device, cudaGetErrorString(e));
    }
    return alloc_rank(o, c, r);
}

seer_status seer_oneshot_init(seer_cuda *const *rank, int n, size_t max_bytes, seer_oneshot **out) {
    *out = NULL;
    if (n < 2 || n > SEER_TP_MAX || rank[0]->allreduce_nccl || !peers_reach(rank, n))
        return SEER_OK; /* NCCL alone */
    seer_oneshot *o = (seer_oneshot *)calloc(1, sizeof *o);
    if (!o)
        return seer_err(SEER_ERR_OOM, "out of memory");
    o->n = n;
    o->cap = max_bytes / sizeof(float);
    for (int r = 0; r < n; r++)
        o->rank[r] = rank[r];
    for (int r = 0; r < n; r++) {
        const seer_status s = setup_rank(o, rank, r);
        if (s != SEER_OK) {
            seer_oneshot_free(o);
            return s;
        }
    }
    *out = o;
    return SEER_OK;
}

bool seer_oneshot_takes(const seer_oneshot *o, size_t count) { return o && count > 0 && count <= o->cap; }

seer_status seer_oneshot_all_reduce(seer_oneshot *o, int r, float *buf, size_t count) {
    seer_cuda *c = o->rank[r];
    oneshot_args a = {};
    a.buf = buf;
    a.count = count;
    a.cap = o->cap;
    a.n = o->n;
    a.r = r;
    for (int k = 0; k < o->n; k++) {
        a.recv[k] = o->recv[k];
        a.flag[k] = o->flag[k];
    }
    a.calls = o->calls[r];
    oneshot_kernel<<<OS_BLOCKS, OS_THREADS, 0, c->stream>>>(a);
    LAUNCH_TRY("oneshot_kernel");
    return SEER_OK;
}

/* ---- between processes: CUDA IPC ---------------------------------------------------------- */

seer_status seer_oneshot_ipc_init(seer_cuda *c, int n, int r, size_t max_bytes, void *blob, seer_oneshot **out) {
    *out = NULL;
    if (n < 2 || n > SEER_TP_MAX || r < 0 || r >= n || c->allreduce_nccl)
        return seer_err(SEER_ERR_UNSUPPORTED, "the one-shot all-reduce is off (one rank, or allreduce_nccl)");
    seer_oneshot *o = (seer_oneshot *)calloc(1, sizeof *o);
    if (!o)
        return seer_err(SEER_ERR_OOM, "out of memory");
    o->n = n;
    o->cap = max_bytes / sizeof(float);
    o->me = r;
    o->rank[r] = c;
    seer_status s = SEER_OK;
    if (cudaSetDevice(c->device) != cudaSuccess)
        s = seer_err(SEER_ERR_BACKEND, "CUDA: cannot make device %d current", c->device);
    if (s == SEER_OK)
        s = alloc_rank(o, c, r);
    cudaIpcMemHandle_t h[2];
    if (s == SEER_OK && (cudaIpcGetMemHandle(&h[0], o->recv[r]) != cudaSuccess ||
                         cudaIpcGetMemHandle(&h[1], o->flag[r]) != cudaSuccess)) {
        const cudaError_t e = cudaGetLastError();
        s = seer_err(SEER_ERR_BACKEND, "CUDA: no IPC handle for the one-shot all-reduce's buffers: %s",
                     cudaGetErrorString(e));
    }
    if (s != SEER_OK) {
        seer_oneshot_free(o);
        return s;
    }
    memcpy(blob, h, sizeof h);
    *out = o;
    return SEER_OK;
}

seer_status seer_oneshot_ipc_open(seer_oneshot *o, const void *all) {
    const char *b = (const char *)all;
    CUDA_TRY(cudaSetDevice(o->rank[o->me]->device));
    for (int k = 0; k < o->n; k++) {
        if (k == o->me || o->opened[k])
            continue;
        cudaIpcMemHandle_t h[2];
        memcpy(h, b + (size_t)k * SEER_ONESHOT_IPC_BYTES, sizeof h);
        void *recv = NULL, *flag = NULL;
        cudaError_t e = cudaIpcOpenMemHandle(&recv, h[0], cudaIpcMemLazyEnablePeerAccess);
        if (e == cudaSuccess) {
            e = cudaIpcOpenMemHandle(&flag, h[1], cudaIpcMemLazyEnablePeerAccess);
            if (e != cudaSuccess)
                (void)cudaIpcCloseMemHandle(recv);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return seer_err(SEER_ERR_BACKEND, "CUDA: cannot map rank %d's one-shot buffers: %s", k,
                            cudaGetErrorString(e));
        }
        o->recv[k] = (float *)recv;
        o->flag[k] = (unsigned *)flag;
        o->opened[k] = true;
    }
    return SEER_OK;
}
