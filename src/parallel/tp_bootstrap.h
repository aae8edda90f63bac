/*
 * tp_bootstrap.h: the meeting of ranks in separate processes, on one host or several: an
 * all-gather of one blob per rank over TCP at rank 0's HOST:PORT. It is the first of the
 * three things ranks in separate processes need (docs/tensor-parallel.md); the op stream and
 * the communicators built from its blobs are not written.
 */
#ifndef SEER_PARALLEL_TP_BOOTSTRAP_H
#define SEER_PARALLEL_TP_BOOTSTRAP_H

#include "seer.h"

#include <stddef.h>

/* Rank rank of n contributes blob [bytes] and receives every rank's in all [n][bytes] (its
 * own included), in rank order; every rank gives the same addr, n and bytes. Rank 0 listens
 * at addr (HOST:PORT), the others connect to it, trying again until it listens or timeout_ms
 * passes. SEER_ERR_INVALID_ARG for a bad address, rank or size, or a peer that disagrees (a
 * rank twice, another n or size); SEER_ERR_IO when a rank is missing at the deadline or a
 * connection fails. all is undefined after a failure. */
seer_status seer_tp_bootstrap(const char *addr, int rank, int n, const void *blob, size_t bytes, void *all,
                              int timeout_ms);

/* The sockets of the op stream between processes (tp_remote.h), at the same HOST:PORT form.
 * seer_tp_listen: a listening socket at addr. seer_tp_connect: a connection to addr, tried
 * again until it is taken or timeout_ms passes. seer_tp_accept_one: the next connection to ls
 * within timeout_ms. SEER_ERR_INVALID_ARG for a bad address, SEER_ERR_IO otherwise. */
seer_status seer_tp_listen(const char *addr, int backlog, int *fd);
seer_status seer_tp_connect(const char *addr, int timeout_ms, int *fd);
seer_status seer_tp_accept_one(int ls, int timeout_ms, int *fd);

#endif
