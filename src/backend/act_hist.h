/*
 * act_hist.h: the bins of CATS's statistic (backend ffn_act_hist; Lee et al. 2024), the
 * histogram of |silu(gate)| that the sparse FFN's per-layer threshold is read from. One
 * definition for the host and the CUDA kernels: a bin is a function of the value's bits
 * (its exponent and the top four bits of its mantissa), so every backend puts a value in the
 * same bin, with no logarithm to round differently.
 * Not for: choosing the threshold (src/model/sparse_ffn.c).
 */
#ifndef SEER_ACT_HIST_H
#define SEER_ACT_HIST_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SEER_HIST_FN __host__ __device__ static inline
#else
#define SEER_HIST_FN static inline
#endif

/* Bin 0: below 2^-24 (zero included); bins 1 .. 512: sixteen per octave from 2^-24 to 2^8,
 * each [edge(b), edge(b + 1)); bin 513: 2^8 and above, infinities and NaN. */
#define SEER_ACT_HIST_BINS 514
#define SEER_ACT_HIST_KEY_LO ((127u - 24u) << 4) /* bits >> 19 of 2^-24 */
#define SEER_ACT_HIST_KEY_HI ((127u + 8u) << 4)  /* ... of 2^8 */

/* The bin of v >= 0 (the caller's |a|; a negative v counts as its magnitude). */
SEER_HIST_FN int seer_act_hist_bin(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    const uint32_t key = (u & 0x7fffffffu) >> 19;
    if (key < SEER_ACT_HIST_KEY_LO)
        return 0;
    if (key >= SEER_ACT_HIST_KEY_HI)
        return SEER_ACT_HIST_BINS - 1;
    return 1 + (int)(key - SEER_ACT_HIST_KEY_LO);
}

/* The lower edge of bin b (1 .. SEER_ACT_HIST_BINS - 1); 0 for bin 0. */
SEER_HIST_FN float seer_act_hist_edge(int b) {
    if (b <= 0)
        return 0.f;
    const uint32_t u = (SEER_ACT_HIST_KEY_LO + (uint32_t)(b - 1)) << 19;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

#endif
