/*
 * synth_hash.h: the counter-based random numbers of synthetic weights and KV (benchmarks).
 * One definition for the host and the CUDA kernels, so that a synthetic model is the same
 * model on every backend (up to each backend's rounding of the stored dtype).
 * Not for: sampling (src/sample/rng.c) or anything that must be statistically strong.
 */
#ifndef SEER_SYNTH_HASH_H
#define SEER_SYNTH_HASH_H

#include <stdint.h>

#ifdef __CUDACC__
#define SEER_SYNTH_FN __host__ __device__ static inline
#else
#define SEER_SYNTH_FN static inline
#endif

/* splitmix64's finaliser: a bijection of 64-bit words that mixes every bit. */
SEER_SYNTH_FN uint64_t seer_synth_mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A seed for sub-stream `id` of `seed` (one per tensor, per sequence, ...). */
SEER_SYNTH_FN uint64_t seer_synth_seed(uint64_t seed, uint64_t id) {
    return seer_synth_mix(seed * 0x9E3779B97F4A7C15ull + id + 1);
}

/* Multiplier that turns the 24-bit integer below into a uniform value of standard deviation
 * scale: uniform on [-a, a) has deviation a / sqrt(3). */
SEER_SYNTH_FN float seer_synth_mul(float scale) { return scale * 1.7320508f / 8388608.f; }

/* Element i of stream seed, uniform on [-sqrt(3), sqrt(3)) * scale, given mul =
 * seer_synth_mul(scale). One exact integer times one float: the same bits on every compiler,
 * with or without fused multiply-add. */
SEER_SYNTH_FN float seer_synth_value(uint64_t seed, uint64_t i, float mul) {
    uint64_t x = seer_synth_mix(seed + i * 0x9E3779B97F4A7C15ull);
    return ((float)(int32_t)(x >> 40) - 8388608.f) * mul;
}

#endif
