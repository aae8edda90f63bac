/*
 * kv_quant.h: the quantised copy of the KV cache that a quantised-KV self-draft attends
 * through (--spec quantkv). Beside the full-precision rows, a pool with kv_bits 4 or 8 keeps
 * every K and V row a second time, quantised in groups of SEER_KVQ_GROUP consecutive values of
 * the row [Hkv*Dh] (the last group may be shorter), each group with an f32 scale and minimum:
 *
 *   x ~ min + q * scale,  q in [0, 2^bits - 1],  scale = (max - min) / (2^bits - 1)
 *
 * so every value comes back within scale / 2 of what was stored (asymmetric min-max
 * quantisation as in KIVI / llama.cpp's Q4_1, with finer groups for the draft's sake).
 *
 * A row is [n_groups][2] f32 (scale, min) followed by the codes (4 bits: element e in byte
 * e / 2, the low nibble for even e; 8 bits: one byte each), padded to 8 bytes. The copy of a
 * page is [n_layers][2 (K, V)][page_size][row bytes], and the copy of the pool
 * [n_pages][page bytes], stored by each backend beside (not inside) its full-precision pages
 * so that their layout, and the kernels that read it, do not change.
 *
 * Not for: where the copy lives (the backends) or when it is read (seer_batch.kv_quant).
 */
#ifndef SEER_KV_QUANT_H
#define SEER_KV_QUANT_H

#include <stddef.h>
#include <stdint.h>

#define SEER_KVQ_GROUP 32

static inline int seer_kvq_groups(int kvd) { return (kvd + SEER_KVQ_GROUP - 1) / SEER_KVQ_GROUP; }

/* Bytes of one quantised row of kvd values; 0 when bits is 0 (no copy). */
static inline size_t seer_kvq_row_bytes(int kvd, int bits) {
    if (bits == 0)
        return 0;
    const size_t codes = ((size_t)kvd * (size_t)bits + 7) / 8;
    return (size_t)seer_kvq_groups(kvd) * 8 + (codes + 7) / 8 * 8;
}

/* Bytes of one page's copy. */
static inline size_t seer_kvq_page_bytes(int n_layers, int page_size, int kvd, int bits) {
    return (size_t)n_layers * 2 * (size_t)page_size * seer_kvq_row_bytes(kvd, bits);
}

/* Byte offset of (page, layer, which, row)'s copy from the start of the pool's copy. */
static inline size_t seer_kvq_row_off(int n_layers, int page_size, int kvd, int bits, int page,
                                      int layer, int which, int row) {
    return ((((size_t)page * n_layers + layer) * 2 + which) * page_size + row) *
           seer_kvq_row_bytes(kvd, bits);
}

/* Quantises x [kvd] into dst [seer_kvq_row_bytes(kvd, bits)]; bits is 4 or 8. */
void seer_kvq_quantize_row(const float *x, int kvd, int bits, uint8_t *dst);
/* Dequantises values [e0, e0 + n) of a quantised row of kvd values into out [n]. */
void seer_kvq_dequantize(const uint8_t *src, int kvd, int bits, int e0, int n, float *out);

#endif
