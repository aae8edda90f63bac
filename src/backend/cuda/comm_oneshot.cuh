/*
 * comm_oneshot.cuh: the one-shot all-reduce over peer memory (comm_oneshot.cu), which the NCCL
 * communicator (comm_nccl.cu) uses for small messages.
 */
#ifndef SEER_CUDA_COMM_ONESHOT_CUH
#define SEER_CUDA_COMM_ONESHOT_CUH

#include "backend/cuda/cuda_common.cuh"

typedef struct seer_oneshot seer_oneshot;

/* The receive areas and flags of n ranks (one device each, every pair reaching the other's
 * memory), for messages up to max_bytes. *out is NULL, and the status OK, where it cannot be
 * used (one rank, no peer access, seer_cuda_tuning.allreduce_nccl): NCCL then takes every message. */
seer_status seer_oneshot_init(seer_cuda *const *rank, int n, size_t max_bytes, seer_oneshot **out);
void seer_oneshot_free(seer_oneshot *o);
/* Whether a message of count floats goes through it (o may be NULL). */
bool seer_oneshot_takes(const seer_oneshot *o, size_t count);
/* Rank r's part, queued on its stream, called from its thread: buf [count] becomes the sum
 * over the ranks in rank order. Every rank makes the same calls in the same order. */
seer_status seer_oneshot_all_reduce(seer_oneshot *o, int r, float *buf, size_t count);

/* Ranks in separate processes: rank r's own buffers on c's device, with their CUDA IPC
 * handles written into blob [SEER_ONESHOT_IPC_BYTES]; then every rank's blobs all
 * [n][SEER_ONESHOT_IPC_BYTES] open the others' buffers in this process
 * (cudaIpcOpenMemHandle). Only rank r's calls are made on such an instance. */
#define SEER_ONESHOT_IPC_BYTES (2 * sizeof(cudaIpcMemHandle_t))
seer_status seer_oneshot_ipc_init(seer_cuda *c, int n, int r, size_t max_bytes, void *blob, seer_oneshot **out);
seer_status seer_oneshot_ipc_open(seer_oneshot *o, const void *all);

#endif
