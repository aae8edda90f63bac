/*
 * cuda_env.h: the SEER_CUDA_* variables read into the CUDA backend's variants
 * (seer_cuda_tuning, seer_bench.h), for the lab, `seer bench` and the tests of a variant. The
 * library reads no environment; these programs pass what this gives at creation.
 *
 *   SEER_CUDA_GRAPHS=0          decode steps op by op, no graphs
 *   SEER_CUDA_PROFILE=FILE      the device time of every op into FILE (graphs off)
 *   SEER_CUDA_MATMUL=cublas     every bf16 matmul through cuBLAS
 *   SEER_CUDA_PDL=0             no programmatic dependent launch
 *   SEER_CUDA_MM_XB_MIN=N       fewest tokens for the x-blocked matmul
 *   SEER_CUDA_MM_TILE=N         the matmuls' token tile (8 .. 64)
 *   SEER_CUDA_QT=0              quantised weights in planes, not row blocks
 *   SEER_CUDA_QT_GEMV_MAX=N     most tokens of a row-block GEMV call
 *   SEER_CUDA_ATTN=mma|scalar   attention without the wgmma kernel, or scalar for every shape
 *   SEER_CUDA_ALLREDUCE=nccl    tensor parallelism's all-reduces all through NCCL
 *   SEER_CUDA_KV_ROWS_TC=1      quantised KV rows through the tensor-core kernel (off by default)
 *
 * Not for: the library (src/), which takes the struct.
 */
#ifndef SEER_LAB_CUDA_ENV_H
#define SEER_LAB_CUDA_ENV_H

#include "seer_bench.h"

#include <stdlib.h>

static inline seer_cuda_tuning lab_cuda_tuning_from_env(void) {
    static const char *const vars[][2] = {
        {"SEER_CUDA_GRAPHS", "graphs"}, {"SEER_CUDA_PROFILE", "profile"},   {"SEER_CUDA_MATMUL", "matmul"},
        {"SEER_CUDA_PDL", "pdl"},       {"SEER_CUDA_MM_XB_MIN", "mm_xb_min"}, {"SEER_CUDA_MM_TILE", "mm_tile"},
        {"SEER_CUDA_QT", "qt"},         {"SEER_CUDA_QT_GEMV_MAX", "qt_gemv_max"}, {"SEER_CUDA_ATTN", "attn"},
        {"SEER_CUDA_QT_NORM", "qt_norm"},     {"SEER_CUDA_KV_ROWS_TC", "kv_rows_tc"},
        {"SEER_CUDA_ALLREDUCE", "allreduce"},
    };
    seer_cuda_tuning t = seer_cuda_default_tuning();
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i][0]);
        if (v)
            (void)seer_cuda_tuning_set(&t, vars[i][1], v); /* every name is known */
    }
    return t;
}

#endif
