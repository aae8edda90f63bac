/*
 * kv_type.h: the formats the target's own KV rows may be stored in (seer_context_params.
 * kv_type). SEER_KV_FULL keeps the backend's full-precision rows (bf16 on CUDA, f32 on the CPU
 * reference); SEER_KV_Q8 and SEER_KV_Q4 keep only a quantised row, and every reader (attention
 * of every call kind, the self-drafts' views, kv_read) sees its dequantised values, so a
 * quantised-KV target is the model speculation is exact against.
 *
 * A row of kvd = Hkv * Dh values is quantised symmetrically in groups of G = 32 consecutive
 * values (Dh where Dh is not a multiple of 32), each group with a power-of-two scale kept as
 * its exponent in one byte (the shared E8M0-style scale of the OCP microscaling formats
 * MXINT8 / MXINT4):
 *
 *   x ~ q * 2^e,  e the least with amax <= qmax 2^e,  q = round(x / 2^e) in [-qmax, qmax],
 *   qmax = 127 (q8) or 7 (q4); a group of zeros has e = -128 (scale 0)
 *
 * Stored as the codes (q8: one int8 each; q4: q + 8 in a nibble, element e in byte e / 2, the
 * low nibble for even e), then the kvd / G exponents (int8), padded to 16 bytes. A head row's
 * codes are contiguous (Dh bytes, or Dh / 2), which a tile load reads in 16-byte pieces, and
 * dequantising is a multiply by a power of two (exact). For the Llama-3.1-8B shape (Hkv 8,
 * Dh 128) a row takes 1056 bytes in q8 and 544 in q4 against 2048 in bf16: 1.94x and 3.76x
 * the tokens per byte. Why groups of 32 and one byte of scale: keys of some families carry a
 * few channels far larger than the rest (Qwen2.5's), so one scale per head row of 128 made
 * q8 cost 1.9 % perplexity on Qwen2.5-Coder-1.5B where groups of 32 cost none; an f16 scale
 * per 32 (llama.cpp's q8_0, 34 bytes per 32) gives 1.88x, under the 1.9x these formats are
 * for; a power-of-two scale costs at most one bit of the code's range. These are not
 * llama.cpp's formats and are not named after them.
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
    (void)type;
    return head_dim % 32 == 0 ? 32 : head_dim;
}

/* Byte offset of the exponents in a row of kvd values: after the codes. */
static inline size_t seer_kvt_scales_off(int type, int kvd) {
    return ((size_t)kvd * (size_t)seer_kvt_bits(type) + 7) / 8;
}

/* Bytes of one stored row of n_kv_heads * head_dim values; 0 for SEER_KV_FULL. */
static inline size_t seer_kvt_row_bytes(int type, int n_kv_heads, int head_dim) {
    if (!seer_kvt_bits(type))
        return 0;
    const int kvd = n_kv_heads * head_dim;
    const size_t b = seer_kvt_scales_off(type, kvd) + (size_t)(kvd / seer_kvt_group(type, head_dim));
    return (b + 15) / 16 * 16;
}

/* Quantises x [Hkv * Dh] into dst [seer_kvt_row_bytes]; type is SEER_KV_Q8 or SEER_KV_Q4. */
void seer_kvt_quantize_row(int type, const float *x, int n_kv_heads, int head_dim, uint8_t *dst);
/* Dequantises head kvh's Dh values of a stored row into out [Dh]. */
void seer_kvt_dequantize_head(int type, const uint8_t *src, int n_kv_heads, int head_dim, int kvh,
                              float *out);

#endif
