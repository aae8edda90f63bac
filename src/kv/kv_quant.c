/*
 * kv_quant.c: the reference quantiser of the KV copy (format in kv_quant.h). The CPU backend
 * stores and reads through it; the CUDA kernels (attention_qkv.cu) follow it step for step
 * and are tested against it.
 */
#include "kv/kv_quant.h"

#include <math.h>
#include <string.h>

void seer_kvq_quantize_row(const float *x, int kvd, int bits, uint8_t *dst) {
    const int ng = seer_kvq_groups(kvd), levels = (1 << bits) - 1;
    float *par = (float *)dst;
    uint8_t *codes = dst + (size_t)ng * 8;
    if (bits == 4)
        memset(codes, 0, ((size_t)kvd + 1) / 2);
    for (int gi = 0; gi < ng; gi++) {
        const int e0 = gi * SEER_KVQ_GROUP, e1 = e0 + SEER_KVQ_GROUP < kvd ? e0 + SEER_KVQ_GROUP : kvd;
        float mn = x[e0], mx = x[e0];
        for (int e = e0 + 1; e < e1; e++) {
            mn = x[e] < mn ? x[e] : mn;
            mx = x[e] > mx ? x[e] : mx;
        }
        const float scale = (mx - mn) / (float)levels;
        const float inv = scale > 0.f ? 1.f / scale : 0.f;
        par[2 * gi] = scale;
        par[2 * gi + 1] = mn;
        for (int e = e0; e < e1; e++) {
            float qf = rintf((x[e] - mn) * inv);
            int q = qf < 0.f ? 0 : qf > (float)levels ? levels : (int)qf;
            if (bits == 8)
                codes[e] = (uint8_t)q;
            else
                codes[e / 2] |= (uint8_t)(q << (4 * (e & 1)));
        }
    }
}

void seer_kvq_dequantize(const uint8_t *src, int kvd, int bits, int e0, int n, float *out) {
    const float *par = (const float *)src;
    const uint8_t *codes = src + (size_t)seer_kvq_groups(kvd) * 8;
    for (int i = 0; i < n; i++) {
        const int e = e0 + i, gi = e / SEER_KVQ_GROUP;
        const int q = bits == 8 ? codes[e] : (codes[e / 2] >> (4 * (e & 1))) & 15;
        out[i] = par[2 * gi + 1] + (float)q * par[2 * gi];
    }
}
