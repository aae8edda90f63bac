/*
 * penalty.c: the arithmetic of the sampling penalties on one logit, shared by the CPU's
 * sampler and CUDA's (which forms the same value on the device with rounded operations from
 * seer_penalty_sub's result). Compiled with -ffp-contract=off (CMakeLists.txt): a fused
 * multiply-add would round differently from the device's separate operations.
 *
 * Not for: which ids are penalised, or how often they occur (sample.c, cuda/sample.cu).
 */
#include "sample/sample.h"

float seer_penalty_sub(const seer_sampler_params *p, int count) {
    return (float)count * p->frequency_penalty + p->presence_penalty;
}

float seer_penalty_apply(float v, float rep, float sub) {
    const float r = v > 0 ? v / rep : v * rep;
    return r - sub;
}
