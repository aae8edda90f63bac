/*
 * cuda_tuning.c: the CUDA backend's variants (seer_cuda_tuning, seer_bench.h) and their
 * setter by name. Plain C so that builds without CUDA have it too (the tools and tests fill
 * one before they know which backend they get). The values take the lab's variables' forms;
 * reading those variables is lab/cuda_env.h's, never the library's.
 *
 * Not for: applying them (cuda_backend.cu's cuda_start, attention_tc.cu, attention_wgmma.cu).
 */
#include "seer_bench.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

seer_cuda_tuning seer_cuda_default_tuning(void) {
    return (seer_cuda_tuning){.graphs = true, .pdl = true, .mm_xb_min = 40, .qt = true, .qt_gemv_max = 1,
                             .qt_norm = true};
}

seer_status seer_cuda_tuning_set(seer_cuda_tuning *t, const char *name, const char *value) {
    SEER_CHECK_ARG(t && name && value);
    const bool off = !strcmp(value, "0");
    if (!strcmp(name, "graphs"))
        t->graphs = !off;
    else if (!strcmp(name, "profile"))
        t->profile = value;
    else if (!strcmp(name, "matmul"))
        t->matmul_cublas = !strcmp(value, "cublas");
    else if (!strcmp(name, "pdl"))
        t->pdl = !off;
    else if (!strcmp(name, "allreduce"))
        t->allreduce_nccl = !strcmp(value, "nccl");
    else if (!strcmp(name, "mm_xb_min"))
        t->mm_xb_min = atoi(value) > 0 ? atoi(value) : 40;
    else if (!strcmp(name, "mm_tile")) {
        const int v = atoi(value) / 8 * 8;
        t->mm_tile = v >= 8 && v <= 64 ? v : 32;
    } else if (!strcmp(name, "qt"))
        t->qt = !off;
    else if (!strcmp(name, "qt_gemv_max"))
        t->qt_gemv_max = atoi(value);
    else if (!strcmp(name, "qt_norm"))
        t->qt_norm = !off;
    else if (!strcmp(name, "attn"))
        t->attn = value;
    else if (!strcmp(name, "kv_rows_tc"))
        t->kv_rows_tc = !off;
    else
        return seer_err(SEER_ERR_INVALID_ARG, "unknown CUDA tuning setting '%s'", name);
    return SEER_OK;
}
