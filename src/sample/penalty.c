/*
 * penalty.c: the arithmetic of the sampling penalties on one logit, shared by the CPU's
 * sampler and CUDA's (which forms the same value on the device with rounded operations from
 * seer_penalty_sub's result). Compiled with -ffp-contract=off (CMakeLists.txt): a fused
 * multiply-add would round differently from the device's separate operations.
 *
 * Also the penalty window (which ids are penalised and how often they occur), the one
 * definition both samplers use on the host.
 */
#include "sample/sample.h"

float seer_penalty_sub(const seer_sampler_params *p, int count) {
    return (float)count * p->frequency_penalty + p->presence_penalty;
}

float seer_penalty_apply(float v, float rep, float sub) {
    const float r = v > 0 ? v / rep : v * rep;
    return r - sub;
}

int seer_penalty_window(const seer_sampler_params *p, const int32_t *hist, int n_hist, int V, uint8_t *mark,
                        int32_t *count, int32_t *ids) {
    if (!seer_sampler_penalised(p) || !hist || n_hist <= 0)
        return 0;
    const int n = n_hist < p->repeat_last_n ? n_hist : p->repeat_last_n;
    const int32_t *h = hist + (n_hist - n);
    /* marks and counts are cleared for the window's ids first, so the scratch needs no
     * initialisation */
    for (int i = 0; i < n; i++)
        if (h[i] >= 0 && h[i] < V)
            mark[h[i]] = 0, count[h[i]] = 0;
    for (int i = 0; i < n; i++)
        if (h[i] >= 0 && h[i] < V)
            count[h[i]]++;
    int m = 0;
    for (int i = 0; i < n; i++) {
        const int32_t id = h[i];
        if (id < 0 || id >= V || mark[id])
            continue;
        mark[id] = 1;
        ids[m++] = id;
    }
    return m;
}
