/*
 * kv_type.c: the reference quantiser of the target's quantised KV rows (format in kv_type.h).
 * The CPU backend stores and reads through it; another backend's kernels follow it step for
 * step and are tested against it.
 */
#include "kv/kv_type.h"

#include <math.h>
#include <string.h>

void seer_kvt_quantize_row(int type, const float *x, int n_kv_heads, int head_dim, uint8_t *dst) {
    const int kvd = n_kv_heads * head_dim, G = seer_kvt_group(type, head_dim);
    const int bits = seer_kvt_bits(type), qmax = bits == 8 ? 127 : 7;
    const size_t cb = seer_kvt_scales_off(type, kvd);
    float *scales = (float *)(dst + cb);
    /* the padding too, so that a stored row's every byte is defined (page copies compare) */
    memset(dst, 0, seer_kvt_row_bytes(type, n_kv_heads, head_dim));
    for (int g0 = 0; g0 < kvd; g0 += G) {
        float amax = 0.f;
        for (int e = g0; e < g0 + G; e++)
            amax = fabsf(x[e]) > amax ? fabsf(x[e]) : amax;
        const float s = amax / (float)qmax, inv = amax > 0.f ? (float)qmax / amax : 0.f;
        scales[g0 / G] = s;
        for (int e = g0; e < g0 + G; e++) {
            float qf = rintf(x[e] * inv);
            if (!(qf >= (float)-qmax)) /* NaN too: a defined code */
                qf = (float)-qmax;
            if (qf > (float)qmax)
                qf = (float)qmax;
            const int q = (int)qf;
            if (bits == 8)
                dst[e] = (uint8_t)(int8_t)q;
            else
                dst[e / 2] |= (uint8_t)((q + 8) << (4 * (e & 1)));
        }
    }
}

void seer_kvt_dequantize_head(int type, const uint8_t *src, int n_kv_heads, int head_dim, int kvh,
                              float *out) {
    const int kvd = n_kv_heads * head_dim, G = seer_kvt_group(type, head_dim);
    const float *scales = (const float *)(src + seer_kvt_scales_off(type, kvd));
    const int e0 = kvh * head_dim;
    if (seer_kvt_bits(type) == 8) {
        for (int i = 0; i < head_dim; i++)
            out[i] = (float)(int8_t)src[e0 + i] * scales[(e0 + i) / G];
        return;
    }
    for (int i = 0; i < head_dim; i++) {
        const int e = e0 + i;
        out[i] = (float)(((src[e / 2] >> (4 * (e & 1))) & 15) - 8) * scales[e / G];
    }
}
