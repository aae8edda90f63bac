/*
 * comm_nccl.cu: the CUDA backend's communicator for tensor parallelism (parallel/comm.h) over
 * NCCL: one NCCL communicator per rank, each called only from its rank's thread (no group
 * spans devices: NCCL refuses a group whose communicators are not all being captured into a
 * graph, and advises one GPU per thread under capture), and the make_current op that such a
 * thread needs. NCCL is loaded at run time (dlopen), so that seer builds and runs
 * without it: only a tensor-parallel model asks for it, and is refused clearly when it is
 * missing.
 * Not for: deciding what the ranks hold or when they talk (src/parallel/tp_backend.c).
 */
#include "backend/cuda/comm_oneshot.cuh"

extern "C" {
#include "parallel/comm.h"
}

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The gathered parts of an ordered all-reduce [n][count], and rank 0's staging of gather_cols. */
struct seer_cuda_comm {
    seer_cuda_buf tmp;
};

seer_status seer_cuda_comm_state_init(seer_cuda *c) {
    c->comm = (seer_cuda_comm *)calloc(1, sizeof *c->comm);
    return c->comm ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

void seer_cuda_comm_state_free(seer_cuda *c) {
    if (!c->comm)
        return;
    seer_cuda_buf_free(c, &c->comm->tmp);
    free(c->comm);
    c->comm = NULL;
}

/* ---- the part of NCCL's ABI used here ----------------------------------------------------- */

/* Declared here rather than taken from nccl.h, so that the build needs no NCCL headers.
 * Checked against nccl.h 2.28.9 (/usr/local/cuda/include/nccl.h): ncclComm_t is
 * `struct ncclComm *`; ncclResult_t, ncclDataType_t and ncclRedOp_t are plain C enums (passed
 * as int); ncclSuccess = 0, ncclFloat = ncclFloat32 = 7, ncclSum = 0. These values have not
 * changed since NCCL 2.0; ncclSend and ncclRecv arrived in 2.7. */
typedef struct ncclComm *nccl_comm_t;
enum { NCCL_SUCCESS = 0, NCCL_FLOAT = 7, NCCL_SUM = 0 };
/* ncclUniqueId: `typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;`, 128
 * bytes, passed by value to ncclCommInitRank. */
typedef struct {
    char internal[SEER_COMM_ID_BYTES];
} nccl_unique_id;

static struct {
    const char *(*get_error_string)(int result);
    int (*comm_init_all)(nccl_comm_t *comms, int ndev, const int *devlist);
    int (*get_unique_id)(nccl_unique_id *id);
    int (*comm_init_rank)(nccl_comm_t *comm, int nranks, nccl_unique_id id, int rank);
    int (*comm_destroy)(nccl_comm_t comm);
    int (*all_reduce)(const void *send, void *recv, size_t count, int type, int op, nccl_comm_t comm,
                      cudaStream_t stream);
    int (*all_gather)(const void *send, void *recv, size_t count, int type, nccl_comm_t comm,
                      cudaStream_t stream);
    int (*send)(const void *buf, size_t count, int type, int peer, nccl_comm_t comm, cudaStream_t stream);
    int (*recv)(void *buf, size_t count, int type, int peer, nccl_comm_t comm, cudaStream_t stream);
    int (*group_start)(void);
    int (*group_end)(void);
} nccl;
/* Never closed: NCCL's proxy threads and the runtime's registration of its kernels may outlive
 * the last communicator, and unloading the library under them (or from an exit-time
 * destructor, in whatever order those run) crashes. One mapping per process costs nothing. */
static void *nccl_lib;
static pthread_mutex_t nccl_mu = PTHREAD_MUTEX_INITIALIZER;

static seer_status nccl_fail(int r, const char *call) {
    return seer_err(SEER_ERR_BACKEND, "NCCL: %s failed: %s", call, nccl.get_error_string(r));
}

#define NCCL_TRY(name, call)                           \
    do {                                               \
        int nccl_try_r_ = (call);                      \
        if (nccl_try_r_ != NCCL_SUCCESS)               \
            return nccl_fail(nccl_try_r_, name);       \
    } while (0)

static seer_status nccl_open(void) {
    static const char hint[] = "install NCCL (Debian: libnccl2; PyPI: nvidia-nccl-cu13, then put its "
                               "lib/ on LD_LIBRARY_PATH) or set SEER_NCCL_LIB";
    const char *env = getenv("SEER_NCCL_LIB");
    const bool named = env && *env;
    const char *name = named ? env : "libnccl.so.2";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        char why[512];
        snprintf(why, sizeof why, "%s", e ? e : "unknown error");
        if (named)
            return seer_err(SEER_ERR_UNSUPPORTED,
                            "tensor parallelism over CUDA needs NCCL: cannot load SEER_NCCL_LIB=%s (%s)",
                            name, why);
        /* Only the development package installs the unversioned name; the first error says more. */
        h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
        if (!h)
            return seer_err(SEER_ERR_UNSUPPORTED,
                            "tensor parallelism over CUDA needs NCCL: cannot load libnccl.so.2 (%s); %s",
                            why, hint);
        name = "libnccl.so";
    }
    const struct {
        const char *sym;
        void **slot;
    } syms[] = {
        {"ncclGetErrorString", (void **)&nccl.get_error_string},
        {"ncclCommInitAll", (void **)&nccl.comm_init_all},
        {"ncclGetUniqueId", (void **)&nccl.get_unique_id},
        {"ncclCommInitRank", (void **)&nccl.comm_init_rank},
        {"ncclCommDestroy", (void **)&nccl.comm_destroy},
        {"ncclAllReduce", (void **)&nccl.all_reduce},
        {"ncclAllGather", (void **)&nccl.all_gather},
        {"ncclSend", (void **)&nccl.send},
        {"ncclRecv", (void **)&nccl.recv},
        {"ncclGroupStart", (void **)&nccl.group_start},
        {"ncclGroupEnd", (void **)&nccl.group_end},
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        *syms[i].slot = dlsym(h, syms[i].sym);
        if (!*syms[i].slot) {
            const bool p2p = !strcmp(syms[i].sym, "ncclSend") || !strcmp(syms[i].sym, "ncclRecv");
            memset(&nccl, 0, sizeof nccl);
            dlclose(h); /* nothing of it has run yet */
            return seer_err(SEER_ERR_UNSUPPORTED, "NCCL: %s has no %s%s; %s", name, syms[i].sym,
                            p2p ? " (it needs NCCL 2.7 or newer)" : "", hint);
        }
    }
    nccl_lib = h;
    return SEER_OK;
}

/* Loads NCCL once per process; a failed attempt is tried again next time (SEER_NCCL_LIB may
 * have been set since). */
static seer_status nccl_load(void) {
    pthread_mutex_lock(&nccl_mu);
    const seer_status s = nccl_lib ? SEER_OK : nccl_open();
    pthread_mutex_unlock(&nccl_mu);
    return s;
}

/* The first failing call of a group. The group is closed before that is reported: NCCL keeps a
 * per-thread group depth, and a group left open would swallow the thread's later calls. */
typedef struct {
    const char *call;
    int r;
} nccl_first;

static bool nccl_ok(nccl_first *f, const char *call, int r) {
    if (r != NCCL_SUCCESS && !f->call) {
        f->call = call;
        f->r = r;
    }
    return !f->call;
}

static seer_status nccl_group_end(const nccl_first *f) {
    const int r = nccl.group_end();
    if (f->call)
        return nccl_fail(f->r, f->call);
    if (r != NCCL_SUCCESS)
        return nccl_fail(r, "ncclGroupEnd");
    return SEER_OK;
}

/* ---- the communicator --------------------------------------------------------------------- */

/* Puts the caller's current device back on every return, so that a caller driving one device
 * never finds another one current. A failure to restore it cannot be reported from a
 * destructor; the next CUDA call of that caller reports whatever is wrong with the device. */
struct device_restore {
    int prev = -1;
    device_restore() {
        if (cudaGetDevice(&prev) != cudaSuccess) {
            (void)cudaGetLastError();
            prev = -1;
        }
    }
    ~device_restore() {
        if (prev >= 0 && cudaSetDevice(prev) != cudaSuccess)
            (void)cudaGetLastError();
    }
};

/* The ranks' instances are borrowed: their streams and staging buffers are used by every
 * call, so the communicator must be freed before them. */
typedef struct {
    seer_comm base;   /* first: callers hold a pointer to it */
    seer_cuda **rank; /* [n]; with ranks in other processes only this process's (the others NULL) */
    nccl_comm_t *nc;  /* [n] NCCL's communicator of rank r, on rank r's device */
    seer_oneshot *os; /* small messages over peer memory; NULL: NCCL takes them all */
    seer_oneshot *os_pending; /* between processes: mapped, not yet on (peer_enable) */
    int me;                   /* between processes: this process's rank */
} nccl_comm;

/* The largest all-reduce the one-shot kernel takes: 16 rows of verification over 8 ranks of
 * an 8B model's residual stream are 16 x 5 x 16 KiB; prefill's larger messages go to NCCL. */
#define ONESHOT_MAX_BYTES (1u << 20)

/* y[i] = ((t[0][i] + t[1][i]) + t[2][i]) ... over t [n][count]: the CPU reference's order, and
 * the same bits on every rank, since every rank sums the same gathered values. */
static __global__ void comm_sum_ordered(float *y, const float *t, size_t count, int n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = t[i];
        for (int k = 1; k < n; k++)
            s += t[(size_t)k * count + i];
        y[i] = s;
    }
}

static seer_status nccl_all_reduce(seer_comm *base, int r, float *buf, size_t count, bool ordered) {
    nccl_comm *c = (nccl_comm *)base;
    const int n = base->n;
    if (count == 0)
        return SEER_OK;
    device_restore keep;
    seer_cuda *cr = c->rank[r];
    CUDA_TRY(cudaSetDevice(cr->device));
    /* the one-shot kernel sums in rank order: ordered or not, the bits of the ordered sum */
    if (seer_oneshot_takes(c->os, count))
        return seer_oneshot_all_reduce(c->os, r, buf, count);
    if (!ordered) {
        NCCL_TRY("ncclAllReduce", nccl.all_reduce(buf, buf, count, NCCL_FLOAT, NCCL_SUM, c->nc[r], cr->stream));
        return SEER_OK;
    }
    /* Ordered: NCCL's ring or tree sums in an order that depends on count and the topology, so
     * every rank gathers all the parts and sums them itself in rank order. */
    if (count > SIZE_MAX / sizeof(float) / (size_t)n)
        return seer_err(SEER_ERR_INVALID_ARG, "NCCL: an all-reduce of %zu floats over %d ranks is too large",
                        count, n);
    /* During a graph capture a growth fails, and the forward call runs again op by op. Every
     * rank's staging has grown through the same calls, so every rank fails here alike and
     * none is left waiting in the gather. */
    SEER_TRY(seer_cuda_reserve(cr, &cr->comm->tmp, (size_t)n * count * sizeof(float),
                               "the tensor-parallel all-reduce's staging"));
    NCCL_TRY("ncclAllGather", nccl.all_gather(buf, cr->comm->tmp.p, count, NCCL_FLOAT, c->nc[r], cr->stream));
    comm_sum_ordered<<<seer_cuda_grid(count, 256), 256, 0, cr->stream>>>(buf, (const float *)cr->comm->tmp.p,
                                                                         count, n);
    LAUNCH_TRY("comm_sum_ordered");
    return SEER_OK;
}

/* Rank 0's side of gather_cols: its own block copied, the others' received. */
static seer_status gather_root(nccl_comm *c, float *dst, size_t ld, int rows, const float *src,
                               const int *col0, const int *ncols) {
    const int n = c->base.n;
    seer_cuda *c0 = c->rank[0];
    const size_t fs = sizeof(float);
    /* Rank r's block [rows][ncols[r]] arrives whole; with one row it is already the row's
     * columns and lands in dst directly, otherwise it is staged and copied with dst's pitch.
     * Rank 0's own block is staged too: it may lie in dst itself (the logits gathered in
     * place), where widening its rows would overwrite rows not yet moved. */
    size_t staged = 0;
    if (rows > 1)
        for (int r = 0; r < n; r++)
            staged += (size_t)rows * (size_t)ncols[r];
    if (staged)
        SEER_TRY(seer_cuda_reserve(c0, &c0->comm->tmp, staged * fs, "the tensor-parallel gather's staging"));
    float *tmp = (float *)c0->comm->tmp.p;
    if (ncols[0] > 0 && rows == 1 && dst + col0[0] != src)
        CUDA_TRY(cudaMemcpyAsync(dst + col0[0], src, (size_t)ncols[0] * fs, cudaMemcpyDeviceToDevice, c0->stream));
    if (ncols[0] > 0 && rows > 1) {
        const size_t w = (size_t)ncols[0] * fs;
        CUDA_TRY(cudaMemcpyAsync(tmp, src, (size_t)rows * w, cudaMemcpyDeviceToDevice, c0->stream));
        CUDA_TRY(cudaMemcpy2DAsync(dst + col0[0], ld * fs, tmp, w, w, (size_t)rows, cudaMemcpyDeviceToDevice,
                                   c0->stream));
    }
    if (n == 1)
        return SEER_OK;
    /* one group over rank 0's own communicator: its receives from every rank together */
    nccl_first f = {};
    NCCL_TRY("ncclGroupStart", nccl.group_start());
    size_t off = rows > 1 ? (size_t)rows * (size_t)ncols[0] : 0;
    for (int r = 1; r < n; r++) {
        if (ncols[r] <= 0)
            continue;
        const size_t cnt = (size_t)rows * (size_t)ncols[r];
        float *into = rows == 1 ? dst + col0[r] : tmp + off;
        if (rows > 1)
            off += cnt;
        if (!nccl_ok(&f, "ncclRecv", nccl.recv(into, cnt, NCCL_FLOAT, r, c->nc[0], c0->stream)))
            break;
    }
    SEER_TRY(nccl_group_end(&f));
    if (rows == 1)
        return SEER_OK;
    off = (size_t)rows * (size_t)ncols[0];
    for (int r = 1; r < n; r++) {
        if (ncols[r] <= 0)
            continue;
        const size_t w = (size_t)ncols[r] * fs;
        CUDA_TRY(cudaMemcpy2DAsync(dst + col0[r], ld * fs, tmp + off, w, w, (size_t)rows,
                                   cudaMemcpyDeviceToDevice, c0->stream));
        off += (size_t)rows * (size_t)ncols[r];
    }
    return SEER_OK;
}

static seer_status nccl_gather_cols(seer_comm *base, int r, float *dst, size_t ld, int rows, const float *src,
                                    const int *col0, const int *ncols) {
    nccl_comm *c = (nccl_comm *)base;
    if (rows <= 0)
        return SEER_OK;
    device_restore keep;
    seer_cuda *cr = c->rank[r];
    CUDA_TRY(cudaSetDevice(cr->device));
    if (r == 0)
        return gather_root(c, dst, ld, rows, src, col0, ncols);
    if (ncols[r] > 0)
        NCCL_TRY("ncclSend", nccl.send(src, (size_t)rows * (size_t)ncols[r], NCCL_FLOAT, 0, c->nc[r], cr->stream));
    return SEER_OK;
}

static void nccl_comm_delete(nccl_comm *c) {
    if (c) {
        free(c->nc);
        free(c->rank);
    }
    free(c);
}

static void nccl_comm_free(seer_comm *base) {
    if (!base)
        return;
    nccl_comm *c = (nccl_comm *)base;
    device_restore keep;
    int devs[SEER_TP_MAX], nd = 0;
    for (int r = 0; r < base->n && r < SEER_TP_MAX; r++)
        if (c->rank[r])
            devs[nd++] = c->rank[r]->device;
    seer_cuda_unsafe_guard unsafe(devs, nd);
    /* ncclCommDestroy flushes the rank's outstanding NCCL work first. A failure here cannot be
     * reported (free returns nothing) and leaves nothing the caller could fix. */
    for (int r = 0; r < base->n; r++)
        if (c->nc[r])
            (void)nccl.comm_destroy(c->nc[r]);
    seer_oneshot_free(c->os);
    seer_oneshot_free(c->os_pending);
    (void)cudaGetLastError();
    nccl_comm_delete(c);
}

extern "C" seer_status seer_cuda_comm_init(seer_backend *const *ranks, int n, seer_comm **out) {
    *out = NULL;
    if (n < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "a communicator needs at least one rank (%d)", n);
    for (int r = 0; r < n; r++) {
        if (!ranks[r] || !ranks[r]->ops || !ranks[r]->ops->name || strcmp(ranks[r]->ops->name, "cuda"))
            return seer_err(SEER_ERR_INVALID_ARG, "NCCL: rank %d is not a CUDA backend", r);
        for (int q = 0; q < r; q++)
            if (seer_cuda_of(ranks[q])->device == seer_cuda_of(ranks[r])->device)
                return seer_err(SEER_ERR_INVALID_ARG,
                                "tensor parallelism needs one CUDA device per rank: ranks %d and %d "
                                "are both on device %d", q, r, seer_cuda_of(ranks[r])->device);
    }
    /* NVLink multicast (NVLS) reserves device memory per communicator for little gain at
     * these sizes; the seer tool turns it off in its environment (tools/seer/main.c) unless
     * the user set it. The library leaves the environment as the process has it. */
    SEER_TRY(nccl_load());

    nccl_comm *c = (nccl_comm *)calloc(1, sizeof *c);
    int *devs = (int *)calloc((size_t)n, sizeof *devs);
    if (c) {
        c->rank = (seer_cuda **)calloc((size_t)n, sizeof *c->rank);
        c->nc = (nccl_comm_t *)calloc((size_t)n, sizeof *c->nc);
    }
    if (!c || !devs || !c->rank || !c->nc) {
        nccl_comm_delete(c);
        free(devs);
        return seer_err(SEER_ERR_OOM, "out of memory");
    }
    c->base.n = n;
    c->base.all_reduce = nccl_all_reduce;
    c->base.gather_cols = nccl_gather_cols;
    c->base.free = nccl_comm_free;
    for (int r = 0; r < n; r++) {
        c->rank[r] = seer_cuda_of(ranks[r]);
        devs[r] = c->rank[r]->device;
    }
    int rc;
    /* NCCL's set-up and the one-shot kernel's allocate and synchronise devices: not beside
     * another thread's graph capture (cuda_common.cuh) */
    seer_cuda_unsafe_guard unsafe(devs, n);
    {
        device_restore keep; /* ncclCommInitAll visits every device */
        rc = nccl.comm_init_all(c->nc, n, devs);
    }
    free(devs);
    if (rc != NCCL_SUCCESS) {
        nccl_comm_delete(c);
        return nccl_fail(rc, "ncclCommInitAll");
    }
    seer_status s;
    {
        device_restore keep;
        s = seer_oneshot_init(c->rank, n, ONESHOT_MAX_BYTES, &c->os);
    }
    if (s != SEER_OK) {
        nccl_comm_free(&c->base);
        return s;
    }
    *out = &c->base;
    return SEER_OK;
}

/* ---- ranks in separate processes ---------------------------------------------------------- */

extern "C" seer_status seer_cuda_comm_unique_id(seer_backend *be, void *id) {
    (void)be;
    SEER_TRY(nccl_load());
    nccl_unique_id u;
    const int rc = nccl.get_unique_id(&u);
    if (rc != NCCL_SUCCESS)
        return nccl_fail(rc, "ncclGetUniqueId");
    memcpy(id, u.internal, sizeof u.internal);
    return SEER_OK;
}

static seer_status nccl_peer_export(seer_comm *base, void *blob) {
    nccl_comm *c = (nccl_comm *)base;
    if (c->os_pending || c->os)
        return seer_err(SEER_ERR_INVALID_ARG, "the one-shot all-reduce's buffers are exported once");
    device_restore keep;
    return seer_oneshot_ipc_init(c->rank[c->me], base->n, c->me, ONESHOT_MAX_BYTES, blob, &c->os_pending);
}

static seer_status nccl_peer_import(seer_comm *base, const void *all) {
    nccl_comm *c = (nccl_comm *)base;
    if (!c->os_pending)
        return seer_err(SEER_ERR_INVALID_ARG, "the one-shot all-reduce's buffers were not exported");
    device_restore keep;
    int dev = c->rank[c->me]->device;
    seer_cuda_unsafe_guard unsafe(&dev, 1);
    return seer_oneshot_ipc_open(c->os_pending, all);
}

static void nccl_peer_enable(seer_comm *base, bool on) {
    nccl_comm *c = (nccl_comm *)base;
    if (on && !c->os) {
        c->os = c->os_pending;
    } else {
        device_restore keep;
        seer_oneshot_free(c->os_pending);
    }
    c->os_pending = NULL;
}

/* This process's rank of a group of n over NCCL (ncclCommInitRank, which returns once every
 * rank's process has called it): a communicator whose calls are made with r = rank alone.
 * The one-shot kernel's peer buffers are mapped afterwards through CUDA IPC (peer_export,
 * peer_import, peer_enable, which tp_remote_comm.c drives); until then, or where that fails on
 * any rank, every message goes through NCCL. */
extern "C" seer_status seer_cuda_comm_init_rank(seer_backend *be, int n, int rank, const void *id, seer_comm **out) {
    *out = NULL;
    if (n < 1 || n > SEER_TP_MAX || rank < 0 || rank >= n)
        return seer_err(SEER_ERR_INVALID_ARG, "NCCL: rank %d of %d ranks", rank, n);
    if (!be || !be->ops || !be->ops->name || strcmp(be->ops->name, "cuda"))
        return seer_err(SEER_ERR_INVALID_ARG, "NCCL: rank %d is not a CUDA backend", rank);
    SEER_TRY(nccl_load());
    nccl_comm *c = (nccl_comm *)calloc(1, sizeof *c);
    if (c) {
        c->rank = (seer_cuda **)calloc((size_t)n, sizeof *c->rank);
        c->nc = (nccl_comm_t *)calloc((size_t)n, sizeof *c->nc);
    }
    if (!c || !c->rank || !c->nc) {
        nccl_comm_delete(c);
        return seer_err(SEER_ERR_OOM, "out of memory");
    }
    c->base.n = n;
    c->base.all_reduce = nccl_all_reduce;
    c->base.gather_cols = nccl_gather_cols;
    c->base.free = nccl_comm_free;
    c->rank[rank] = seer_cuda_of(be);
    c->me = rank;
    c->base.peer_bytes = SEER_ONESHOT_IPC_BYTES;
    c->base.peer_export = nccl_peer_export;
    c->base.peer_import = nccl_peer_import;
    c->base.peer_enable = nccl_peer_enable;
    nccl_unique_id u;
    memcpy(u.internal, id, sizeof u.internal);
    int dev = c->rank[rank]->device, rc;
    seer_cuda_unsafe_guard unsafe(&dev, 1);
    {
        device_restore keep;
        if (cudaSetDevice(dev) != cudaSuccess) {
            nccl_comm_delete(c);
            return seer_err(SEER_ERR_BACKEND, "CUDA: cannot make device %d current", dev);
        }
        rc = nccl.comm_init_rank(&c->nc[rank], n, u, rank);
    }
    if (rc != NCCL_SUCCESS) {
        nccl_comm_delete(c);
        return nccl_fail(rc, "ncclCommInitRank");
    }
    *out = &c->base;
    return SEER_OK;
}

extern "C" seer_status seer_cuda_make_current(seer_backend *be) {
    CUDA_TRY(cudaSetDevice(seer_cuda_of(be)->device));
    return SEER_OK;
}
