/* cpu_qmatmul.h: what the quantised matmul's per-instruction-set files share (the job's
 * arguments, the quantised activations, how a block format's groups combine). */
#ifndef SEER_BACKEND_CPU_QMATMUL_H
#define SEER_BACKEND_CPU_QMATMUL_H

#include "gguf/gguf.h"

#include <stddef.h>
#include <stdint.h>

#define QK 32 /* elements per activation group and per weight group */

/* How a format's groups combine: codes signed with one scale, codes unsigned with a scale
 * and a min, or signed with one scale per 16-element half (Q6_K). */
enum { KIND_SYM, KIND_MIN, KIND_HALVES };

static inline int type_kind(int type) {
    switch (type) {
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
        return KIND_MIN;
    case GGML_TYPE_Q6_K:
        return KIND_HALVES;
    default:
        return KIND_SYM;
    }
}

typedef struct {
    float *y;            /* [T, rows] */
    const uint8_t *W;    /* [rows, row_bytes], the GGUF blocks */
    const int8_t *xq;    /* [T, cols] activation codes */
    const float *xd;     /* [T, cols/32] activation scales */
    const int32_t *xs;   /* [T, cols/32] code sums of each group */
    const int32_t *xh;   /* [T, cols/32] code sums of each group's first 16 elements */
    const float *bias;   /* [rows] or NULL */
    int type, rows, cols, T;
    size_t row_bytes;
    int blk_elems, blk_bytes;
} qmm_args;

/* cpu_qmatmul_avx512.c. Whether this CPU runs it (AVX-512 F/BW/VL/DQ and VNNI). */
int seer_cpu_qmm_avx512_ok(void);
/* Output rows [o0, o1) for all T tokens, in runs of 16 rows; returns the first row it did
 * not do (the rows past the last whole run, or o0 when it cannot take this matrix). */
int64_t seer_cpu_qmm_avx512_rows(const qmm_args *a, int64_t o0, int64_t o1);
/* The activations of tokens [t0, t1) of x [T][cols] quantised as cpu_qmatmul.c's scalar code
 * does it (codes q, scales d, code sums s and first-half sums h), with the same values. */
void seer_cpu_xquant_avx512(const float *x, int8_t *q, float *d, int32_t *s, int32_t *h,
                            int cols, int64_t t0, int64_t t1);

#endif
