/*
 * tp.h: tensor parallelism as a backend. seer_backend_tp_init wraps N instances of one
 * backend (the ranks, one per device) into a backend whose op table the model code calls as
 * it calls any other: weights bound with a division (seer_weight_split) are held in parts,
 * one per rank; ops run on every rank over its part; an all-reduce follows the ops whose
 * parts are partial sums (the attention output and the FFN's down projection); the LM head's
 * logits stay divided by vocabulary until an op needs whole rows.
 * Not for: the collectives themselves (comm.h and the backends' communicators).
 */
#ifndef SEER_PARALLEL_TP_H
#define SEER_PARALLEL_TP_H

#include "backend/backend.h"

/* A backend over ranks[0..n) (instances of one backend, each on a device of its own), which
 * it takes over (freed with it, also on failure). The communicator is made on first use. */
seer_status seer_backend_tp_init(seer_backend *const *ranks, int n, seer_backend **out);

/* Whether be is a tensor-parallel backend (seer_backend_tp_init's). */
bool seer_backend_is_tp(const seer_backend *be);

/* The benchmark's measure (seer_model_time_all_reduce, seer_bench.h): the mean time in
 * seconds of one all-reduce of T rows of cols floats over be's ranks, made as a forward call
 * makes it, over reps of them after one warm-up. */
seer_status seer_tp_time_all_reduce(seer_backend *be, int T, int cols, int reps, double *sec);

/* Units [*u0, *u0 + *nu) of U held by rank r of n (seer_weight_split's rule). */
static inline void seer_tp_units(int U, int n, int r, int *u0, int *nu) {
    *u0 = (int)((long long)r * U / n);
    *nu = U >= n ? (int)((long long)(r + 1) * U / n) - *u0 : 1;
}

/* Whether H query heads with Hkv key/value heads divide over n ranks so that every rank's
 * query heads are whole groups, or lie in one group (its key/value head then replicated). */
static inline bool seer_tp_heads_divide(int H, int Hkv, int n) {
    return n >= 1 && H % n == 0 && (Hkv % n == 0 || n % Hkv == 0);
}

#endif
