/*
 * rng.c: the sampler's random generator, xoshiro256** seeded by splitmix64 (see sample.h
 * for why this one). Written from the published algorithm descriptions. Not a source of
 * cryptographic randomness.
 */
#include "sample/sample.h"

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
 * 2014): consecutive outputs are well mixed even from seed 0, so xoshiro's state is never
 * all zero and nearby seeds give unrelated streams. */
static uint64_t splitmix64_next(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void seer_rng_seed(seer_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64_next(&x);
}

uint64_t seer_rng_next(seer_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double seer_rng_uniform(seer_rng *r) {
    /* The high bits of xoshiro256** are its best; 2^-53 spacing is exact in a double. */
    return (double)(seer_rng_next(r) >> 11) * 0x1.0p-53;
}
