/*
 * tp_remote.h: ranks of tensor parallelism in other processes (docs/tensor-parallel.md).
 * Rank 0's process holds, for each other rank, a remote backend (tp_remote.c): an instance
 * whose every op is sent over the rank's socket as one message (tp_wire.h) and run, in the
 * order sent, by the rank's process on its own backend (tp_serve.c). Ops that return data
 * (downloads, allocations, syncs) wait for the answer (the status and what the op returns);
 * the others are posted, and a failure among them comes back with the instance's next
 * waited op. The tensor-parallel backend (tp_backend.c) drives remote and local ranks alike, on
 * one thread per rank: the op stream is the ranks' op calls themselves, serialised. The
 * collectives of such a group stage each rank's buffer through rank 0's host memory
 * (tp_remote_comm.c) and sum it there in rank order, as the CPU's communicator does.
 * Not for: the meeting of ranks with a blob each (tp_bootstrap.h), which the CUDA
 * communicators between processes would use.
 */
#ifndef SEER_PARALLEL_TP_REMOTE_H
#define SEER_PARALLEL_TP_REMOTE_H

#include "backend/backend.h"
#include "parallel/tp_wire.h"

/* The ops of the stream; a reply carries the status as its kind. */
enum {
    TP_OP_HELLO = 1, TP_OP_BYE, TP_OP_FREE, TP_OP_CLONE, TP_OP_ALLOC, TP_OP_DEALLOC, TP_OP_UPLOAD, TP_OP_DOWNLOAD,
    TP_OP_SYNC, TP_OP_WLOAD, TP_OP_WFREE, TP_OP_WCONCAT, TP_OP_KV_ALLOC, TP_OP_KV_RESERVE, TP_OP_KV_FREE,
    TP_OP_KV_MEM, TP_OP_KV_COPY, TP_OP_KV_MOVE, TP_OP_KV_STORE, TP_OP_EMBED, TP_OP_RMSNORM, TP_OP_MATMUL,
    TP_OP_MATMUL_ADD, TP_OP_MATMUL_SPLIT, TP_OP_NORM_MATMUL_SPLIT, TP_OP_MATMUL_GLU, TP_OP_FFN_GLU, TP_OP_ROPE,
    TP_OP_ROPE_KV_STORE, TP_OP_ATTENTION, TP_OP_SWIGLU, TP_OP_GEGLU, TP_OP_ADD, TP_OP_SCALE, TP_OP_SOFTCAP,
    TP_OP_GATHER_ROWS, TP_OP_ARGMAX, TP_OP_KV_READ, TP_OP_COMM_INIT, TP_OP_ALLREDUCE, TP_OP_GATHER, TP_OP_PEER_EXPORT,
    TP_OP_PEER_IMPORT, TP_OP_PEER_ENABLE, TP_OP_COMM_FREE, TP_OP_WRANDOM, TP_OP_KV_FILL, TP_OP_WQUANT,
    TP_OP_BATCH_BEGIN, TP_OP_FWD_BEGIN, TP_OP_FWD_END, TP_OP_FWD_LAUNCH, TP_OP_KV_PAGE_BYTES, TP_OP_KV_HOST_OUT,
    TP_OP_KV_HOST_IN,
    TP_OP_COUNT
};

/* A pointer into a remote rank's memory as rank 0 holds it: a handle of the rank's allocation
 * (weight, KV storage, instance) and an offset, in an address no process can map (bit 62). */
#define TP_FAKE_BIT (1ull << 62)
#define TP_FAKE_OFF_BITS 40
#define TP_FAKE_MAX_HANDLE ((1ll << 22) - 1)

/* Writers of the stream's arguments (tp_remote.c, tp_remote_ops.c): a pointer into a remote
 * rank's memory as its handle and offset (NULL: handle 0; memory of no rank: -1, which the
 * rank refuses); a KV geometry as its seven integers; a host array's bytes; an optional one as
 * present-or-not and its bytes. */
static inline void tp_w_rptr(tp_wbuf *w, const void *p) {
    const uintptr_t u = (uintptr_t)p;
    if (!p)
        seer_tp_w_ptr(w, 0, 0);
    else if (!(u & TP_FAKE_BIT))
        seer_tp_w_ptr(w, -1, 0);
    else
        seer_tp_w_ptr(w, (int64_t)((u & ~TP_FAKE_BIT) >> TP_FAKE_OFF_BITS), u & ((1ull << TP_FAKE_OFF_BITS) - 1));
}

static inline void tp_w_geom(tp_wbuf *w, const seer_kv_geom *g) {
    const int v[7] = {g->n_pages, g->page_size, g->n_layers, g->n_kv_heads, g->head_dim, g->kv_bits, g->kv_type};
    for (int k = 0; k < 7; k++)
        seer_tp_w_int(w, v[k]);
}

static inline void tp_w_arr(tp_wbuf *w, const void *p, size_t n, size_t elem) { seer_tp_w_bytes(w, p, p ? n * elem : 0); }

static inline void tp_w_opt(tp_wbuf *w, const void *p, size_t n, size_t elem) {
    seer_tp_w_int(w, p != NULL);
    tp_w_arr(w, p, n, elem);
}

/* Sends op with w's fields (w freed) to be's rank, waits for the answer and checks that its
 * fields are sig's; on success *pl holds them (the caller frees it). A failed link fails every
 * later call at once with its first reason. */
seer_status seer_tp_remote_rpc(seer_backend *be, uint32_t op, tp_wbuf *w, const char *sig, tp_msg *m, void **pl);
/* Sends op with w's fields (w freed) to be's rank without waiting for an answer: the rank runs
 * it in order and keeps a failure for the instance's next waited op (seer_tp_remote_rpc) to
 * report. Fails only where the link does (at once once it is dead). */
seer_status seer_tp_remote_post(seer_backend *be, uint32_t op, tp_wbuf *w);

/* Rank 0: listens at addr (HOST:PORT) and takes ranks 1 .. n-1's connections, each saying its
 * rank, into fds[1..n) (fds[0] -1); SEER_ERR_IO when a rank is missing after timeout_ms,
 * SEER_ERR_INVALID_ARG for a bad address or a peer that disagrees (rank twice, another n). */
seer_status seer_tp_remote_accept(const char *addr, int n, int timeout_ms, int *fds);
/* A remote backend for rank rank over connection fd (which it takes over), each reply waited
 * for at most timeout_ms; ops (what rank 0's backend has) fixes its name and sizes. */
seer_status seer_backend_remote_init(int fd, int rank, int timeout_ms, const seer_backend_ops *ops,
                                     seer_backend **out);
bool seer_backend_is_remote(const seer_backend *be);
/* The op table of rank 0's backend, which a remote rank's backend is taken to be alike. */
const seer_backend_ops *seer_tp_remote_rank0(const seer_backend *be);
/* batch_begin's index arrays (tokens, pos, page, row, out rows: TP_IDX_*), kept by the
 * remote backend be with their lengths; tp_w_idx writes an op's array a of T entries from
 * them: where a is batch_begin's own and T runs past it (a call padded to a recorded shape),
 * its entries and then the padding's (token 0 at position 0, no KV row: page -1, gathering
 * row 0), as the CUDA backend pads, never reading past the caller's array. */
enum { TP_IDX_TOKENS, TP_IDX_POS, TP_IDX_PAGE, TP_IDX_ROW, TP_IDX_OUT, TP_IDX_N };
void seer_tp_remote_keep_idx(seer_backend *be, const int32_t *const *a, const int *n);
void seer_tp_w_idx(tp_wbuf *w, seer_backend *be, int role, const int32_t *a, int T);
/* Clears in ops (a copy of rank 0's table) each op a remote rank cannot run. */
void seer_tp_remote_mask_ops(seer_backend_ops *ops);

/* The communicator of a group with remote ranks (tp_remote_comm.c): where rank 0's backend
 * has comm_init_rank (CUDA: NCCL), each rank's process holds its own rank of one group and a
 * remote rank's collective is a message to it; otherwise (the CPU) each rank's buffer is staged
 * through rank 0's host memory and summed there in rank order. */
seer_status seer_tp_remote_comm_init(seer_backend *const *ranks, int n, seer_comm **out);

/* A rank's process: connects to rank 0 at addr (again until it listens, for up to
 * timeout_ms), then runs rank 0's op stream on be until rank 0 says goodbye or the
 * connection closes. Returns SEER_OK after a goodbye, else the reason. be stays the caller's. */
seer_status seer_tp_worker_run(const char *addr, int rank, int n, seer_backend *be, int timeout_ms);

/* One message of the stream on the rank's side (tp_serve.c), for the fuzzer and the tests:
 * the state over be, a message handled (reply into *w, its status as the result), freed. */
typedef struct tp_serve tp_serve;
seer_status seer_tp_serve_init(seer_backend *be, tp_serve **out);
/* A message rank 0 waits for: a failure of one posted before for the same instance is the
 * answer instead (reported once), else the op's own. */
seer_status seer_tp_serve_msg(tp_serve *sv, uint32_t kind, uint32_t inst, const void *payload, size_t len,
                         tp_wbuf *w);
/* A message rank 0 posted (no answer): run in order; its failure, the instance's first, is kept
 * for the next waited message of the instance, and until then the instance's later posted
 * ops are refused (frees excepted). Returns the op's status (for the tests). */
seer_status seer_tp_serve_post(tp_serve *sv, uint32_t kind, uint32_t inst, const void *payload, size_t len);
void seer_tp_serve_free(tp_serve *sv);
/* The backend op a message kind stands for ("matmul"), for messages. */
const char *seer_tp_op_name(uint32_t op);

#endif
