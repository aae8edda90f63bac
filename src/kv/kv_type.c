/*
 * kv_type.c: the reference quantiser of the target's quantised KV rows (format in kv_type.h).
 * The CPU backend stores and reads through it; another backend's kernels follow it step for
 * step and are tested against it.
 */
#include "kv/kv_type.h"

#include <math.h>
#include <string.h>

/* The least e with amax <= qmax 2^e (clamped to [-127, 127]); -128 for a group of zeros. */
static int group_exp(float amax, int qmax) {
    if (!(amax > 0.f))
        return amax == 0.f ? -128 : 127; /* NaN: the largest scale, a defined code */
    int e;
    (void)frexpf(amax / (float)qmax, &e); /* amax / qmax = m 2^e, m in [0.5, 1): <= 2^e */
    if (ldexpf((float)qmax, e - 1) >= amax) /* the division rounded up across a power of two */
        e--;
    else if (ldexpf((float)qmax, e) < amax) /* ... or down */
        e++;
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

void seer_kvt_quantize_row(int type, const float *x, int n_kv_heads, int head_dim, uint8_t *dst) {
    const int kvd = n_kv_heads * head_dim, G = seer_kvt_group(type, head_dim);
    const int bits = seer_kvt_bits(type), qmax = bits == 8 ? 127 : 7;
    int8_t *exps = (int8_t *)(dst + seer_kvt_scales_off(type, kvd));
    /* the padding too, so that a stored row's every byte is defined */
    memset(dst, 0, seer_kvt_row_bytes(type, n_kv_heads, head_dim));
    for (int g0 = 0; g0 < kvd; g0 += G) {
        float amax = 0.f;
        for (int e = g0; e < g0 + G; e++)
            amax = fabsf(x[e]) > amax || isnan(x[e]) ? fabsf(x[e]) : amax;
        const int ex = group_exp(amax, qmax);
        exps[g0 / G] = (int8_t)ex;
        const float inv = ex == -128 ? 0.f : ldexpf(1.f, -ex); /* exact: a power of two */
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
    const int8_t *exps = (const int8_t *)(src + seer_kvt_scales_off(type, kvd));
    const int e0 = kvh * head_dim;
    for (int i = 0; i < head_dim; i += G) {
        const int ex = exps[(e0 + i) / G];
        const float s = ex == -128 ? 0.f : ldexpf(1.f, ex);
        if (seer_kvt_bits(type) == 8) {
            for (int j = i; j < i + G; j++)
                out[j] = (float)(int8_t)src[e0 + j] * s;
        } else {
            for (int j = i; j < i + G; j++) {
                const int e = e0 + j;
                out[j] = (float)(((src[e / 2] >> (4 * (e & 1))) & 15) - 8) * s;
            }
        }
    }
}
