/*
 * kv_type.h: the formats the target's own KV rows may be stored in (seer_context_params.
 * kv_type). SEER_KV_FULL keeps the backend's full-precision rows (bf16 on CUDA, f32 on the CPU
 * reference); SEER_KV_Q8 and SEER_KV_Q4 keep only a quantised row, and every reader (attention
 * of every call kind, the self-drafts' views, kv_read) sees its dequantised values, so a
 * quantised-KV target is the model speculation is exact against.
 *
 * A row of kvd = Hkv * Dh values is quantised symmetrically in groups of G consecutive values
 * (G = Dh for q8: one scale per head row; G = 32 for q4, or Dh where Dh is not a multiple of
 * 32), each group with an f32 scale s = amax / qmax:
 *
 *   x ~ q * s,  q = round(x / s) in [-qmax, qmax],  qmax = 127 (q8) or 7 (q4)
 *
 * Stored as the codes (q8: one int8 each; q4: q + 8 in a nibble, element e in byte e / 2, the
 * low nibble for even e), then (4-byte aligned) the kvd / G scales, padded to 16 bytes. A head row's codes are
 * contiguous (Dh bytes, or Dh / 2), which a tile load reads in 16-byte pieces. For the
 * Llama-3.1-8B shape (Hkv 8, Dh 128) a row takes 1056 bytes in q8 and 640 in q4 against 2048
 * in bf16: 1.94x and 3.2x the tokens per byte. llama.cpp's q8_0 (one f16 scale per 32 values,
 * 34 bytes per 32) gives 1.88x; these are not its formats and are not named after them.
 *
 * Not for: the draft's quantised copy beside full-precision rows (kv_quant.h), or where the
 * rows live (the backends; the page geometry is seer_kv_geom's, backend/backend.h).
 */
#ifndef SEER_KV_TYPE_H
#define SEER_KV_TYPE_H

#include "seer.h"

#include <stddef.h>
#include <stdint.h>

/* Bits of a code (0 for SEER_KV_FULL). */
static inline int seer_kvt_bits(int type) {
    return type == SEER_KV_Q8 ? 8 : type == SEER_KV_Q4 ? 4 : 0;
}

/* Values per scale. */
static inline int seer_kvt_group(int type, int head_dim) {
    return type == SEER_KV_Q4 && head_dim % 32 == 0 ? 32 : head_dim;
}

/* Byte offset of the scales in a row of kvd values: after the codes, 4-byte aligned. */
static inline size_t seer_kvt_scales_off(int type, int kvd) {
    return (((size_t)kvd * (size_t)seer_kvt_bits(type) + 7) / 8 + 3) / 4 * 4;
}

/* Bytes of one stored row of n_kv_heads * head_dim values; 0 for SEER_KV_FULL. */
static inline size_t seer_kvt_row_bytes(int type, int n_kv_heads, int head_dim) {
    if (!seer_kvt_bits(type))
        return 0;
    const int kvd = n_kv_heads * head_dim;
    const size_t b = seer_kvt_scales_off(type, kvd) + (size_t)(kvd / seer_kvt_group(type, head_dim)) * 4;
    return (b + 15) / 16 * 16;
}

/* Quantises x [Hkv * Dh] into dst [seer_kvt_row_bytes]; type is SEER_KV_Q8 or SEER_KV_Q4. */
void seer_kvt_quantize_row(int type, const float *x, int n_kv_heads, int head_dim, uint8_t *dst);
/* Dequantises head kvh's Dh values of a stored row into out [Dh]. */
void seer_kvt_dequantize_head(int type, const uint8_t *src, int n_kv_heads, int head_dim, int kvh,
                              float *out);

#endif
