/*
 * qweights.cuh: GGUF block-quantised weights as the CUDA backend keeps them. The bits are the
 * file's (codes, scales, mins: the same bytes per row as stored, rows padded to whole groups
 * of 128 columns), rearranged into planes so that a lane of the matmul kernel reads its codes
 * with one 16-byte load and turns two codes into a bf16 pair with one mask:
 *
 *   lo: the low 4 bits of every code (Q8_0: all 8 bits), [rows][quads][4 lanes][4 groups]
 *   hi: the 5th bit (Q5_0, Q5_1, Q5_K) or 5th and 6th bits (Q6_K) of every code
 *   sc: per group of 32: f16 d (Q4_0, Q5_0, Q8_0), f16 d and m (Q4_1, Q5_1); per super-block
 *       of 256: the 16-byte header d, dmin, scales[12] (Q4_K, Q5_K), the 16 int8 scales (Q6_K)
 *   d:  Q6_K only: f16 d per super-block
 *
 * A group is 32 consecutive columns of a row (a block, or a K-quant sub-block); a quad is 4
 * groups. Lane c (0..3) of a group holds its "slot": the 8 codes of columns 4c..4c+3 and
 * 16+4c..16+4c+3, which are what an mma.m16n8k16 A fragment needs for k = 2c, 2c+1, 2c+8,
 * 2c+9 of the group's two k16 halves (columns 0-15 and 16-31; Q6_K's scales follow the same
 * halves). Slot value i = 4 (e / 16) + e % 4 for column e of the group; the pair p = i / 2
 * (values 2p, 2p+1) sits at nibbles p and 4 + p of the slot's 32 bits, so
 * (slot >> 4p) & 0x000F000F is the pair, low code in the low half.
 *
 * Codes are kept unsigned as stored (Q8_0: q + 128); the kernels subtract the type's offset
 * exactly in bf16 and apply the scales in f32 after each group's products: the weights enter
 * the sums exactly, unlike a bf16 dequantisation.
 * Weights whose rows are whole blocks of 256 columns are kept in matmul_qt.cu's row blocks
 * instead (qt_formats.cuh; unless SEER_CUDA_QT=0).
 * Not for: the kernels (matmul_q.cu) or the loading (weights.cu).
 */
#ifndef SEER_CUDA_QWEIGHTS_CUH
#define SEER_CUDA_QWEIGHTS_CUH

#include "backend/cuda/cuda_common.cuh"

#include <cuda_fp16.h>
#include <string.h>

enum { QSC_D16, QSC_DM16, QSC_K4, QSC_K6 };

/* Where each plane of a weight of this type and shape lies. */
typedef struct {
    int type;
    int lo_bits, hi_bits, sc_kind;
    int n_quad;           /* quads per row: cols / 128 rounded up */
    int code_off;         /* added to a code (in bf16) to get the signed weight code: -8, -16, ... */
    int stride[4];        /* bytes per row of lo, hi, sc, d */
    size_t off[4];        /* byte offset of each plane in the allocation */
    size_t bytes;         /* the whole allocation */
} seer_qlayout;

/* Whether the CUDA backend keeps weights of type t as stored. */
static __host__ __device__ inline bool seer_qtype_supported(int t) {
    switch (t) {
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

static __host__ __device__ inline bool seer_qtype_k(int t) {
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K;
}

/* The layout of a [rows][cols] weight of a supported type; false when the shape does not fit
 * the type's blocks. */
static inline bool seer_qlayout_of(int type, long long rows, long long cols, seer_qlayout *L) {
    memset(L, 0, sizeof *L);
    L->type = type;
    const int group = seer_qtype_k(type) ? 256 : 32;
    if (!seer_qtype_supported(type) || rows < 1 || cols < 1 || cols % group)
        return false;
    L->n_quad = (int)((cols + 127) / 128);
    L->lo_bits = type == GGML_TYPE_Q8_0 ? 8 : 4;
    switch (type) {
    case GGML_TYPE_Q4_0: L->sc_kind = QSC_D16; L->code_off = -8; break;
    case GGML_TYPE_Q4_1: L->sc_kind = QSC_DM16; break;
    case GGML_TYPE_Q5_0: L->sc_kind = QSC_D16; L->hi_bits = 1; L->code_off = -16; break;
    case GGML_TYPE_Q5_1: L->sc_kind = QSC_DM16; L->hi_bits = 1; break;
    case GGML_TYPE_Q8_0: L->sc_kind = QSC_D16; L->code_off = -128; break;
    case GGML_TYPE_Q4_K: L->sc_kind = QSC_K4; break;
    case GGML_TYPE_Q5_K: L->sc_kind = QSC_K4; L->hi_bits = 1; break;
    case GGML_TYPE_Q6_K: L->sc_kind = QSC_K6; L->hi_bits = 2; L->code_off = -32; break;
    }
    const int nq = L->n_quad;
    L->stride[0] = nq * 16 * L->lo_bits;
    L->stride[1] = nq * 16 * L->hi_bits;
    L->stride[2] = L->sc_kind == QSC_D16 ? nq * 8 : L->sc_kind == QSC_DM16 ? nq * 16 : nq * 8;
    L->stride[3] = L->sc_kind == QSC_K6 ? nq : 0; /* Q6_K's d: 2 bytes per super-block */
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        L->off[i] = off;
        off += ((size_t)rows * L->stride[i] + 255) / 256 * 256;
    }
    L->bytes = off;
    return true;
}

/* ---- the position of a code in the planes --------------------------------------------- */

/* Column e (0..31) of a group: its lane c and its place in the slot (nibble/bit index 4b + p,
 * b = which of the pair). */
static __host__ __device__ __forceinline__ void q_slot_pos(int e, int *c, int *pos) {
    const int p = 2 * (e >> 4) + ((e >> 1) & 1), b = e & 1;
    *c = (e >> 2) & 3;
    *pos = 4 * b + p;
}

/* Q8_0's 8-bit slot is two words [v0 v2 v1 v3] [v4 v6 v5 v7]: byte of place pos = 4b + p. */
static __host__ __device__ __forceinline__ int q8_byte(int pos) {
    const int b = pos >> 2, p = pos & 3;
    return 4 * (p >> 1) + 2 * b + (p & 1);
}

#endif
