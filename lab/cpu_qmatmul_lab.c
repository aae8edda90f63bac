/*
 * cpu_qmatmul_lab.c: the CPU backend's quantised matmul timed alone, one thread, on random
 * blocks of the shapes the two benchmark models use, for each instruction-set level the CPU
 * has (the kernel lab for cpu_qmatmul*.c; correctness is tests/test_cpu_backend.c's job).
 *
 *   build/lab_cpu_qmatmul [REPS]
 *
 * Prints GMAC/s from the best of REPS runs of thread CPU time (CLOCK_THREAD_CPUTIME_ID), so
 * that other load on a shared machine matters less than with wall time.
 */
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    static const struct {
        const char *what;
        ggml_type type;
        int rows, cols;
    } cases[] = {
        {"smollm2 ffn_up", GGML_TYPE_Q4_1, 1536, 576},   {"smollm2 ffn_down", GGML_TYPE_Q4_1, 576, 1536},
        {"smollm2 head", GGML_TYPE_Q8_0, 49152, 576},    {"qwen ffn_up", GGML_TYPE_Q5_0, 4864, 896},
        {"qwen ffn_down", GGML_TYPE_Q6_K, 896, 4864},    {"qwen ffn_down", GGML_TYPE_Q4_K, 896, 4864},
        {"qwen head", GGML_TYPE_Q8_0, 151936, 896},
    };
    static const int Ts[] = {1, 64};
    seer_backend *be;
    if (seer_backend_cpu_init(1, &be) != SEER_OK)
        return 1;
    seer_cpu *c = be->impl;
    printf("%-18s %-5s %7s %6s %4s %8s %8s %8s\n", "matrix", "type", "rows", "cols", "T", "scalar", "avx2", "avx512");
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const int R = cases[k].rows, C = cases[k].cols;
        const size_t bytes = (size_t)R * C / seer_ggml_type_block_elems(cases[k].type) * seer_ggml_type_block_bytes(cases[k].type);
        uint8_t *blk = malloc(bytes);
        for (size_t i = 0; i < bytes; i++)
            blk[i] = (uint8_t)rnd();
        /* finite f16 scales: clear the exponent's top bit of every 16-bit word (a small
         * finite value whatever the layout) */
        for (size_t i = 1; i < bytes; i += 2)
            blk[i] &= 0x3F;
        gguf_tensor t;
        memset(&t, 0, sizeof t);
        t.name = "w", t.type = cases[k].type, t.ne[0] = C, t.ne[1] = R, t.ne[2] = t.ne[3] = 1;
        t.n_dims = 2, t.data = blk, t.nbytes = bytes;
        seer_weight w;
        if (be->ops->weight_load(be, &t, SEER_WEIGHTS_STORED, &w) != SEER_OK)
            return 1;
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            const int T = Ts[ti];
            if (T > 1 && R > 100000)
                continue;
            float *x = malloc(sizeof(float) * T * C), *y = malloc(sizeof(float) * T * R);
            for (size_t i = 0; i < (size_t)T * C; i++)
                x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.f;
            printf("%-18s %-5s %7d %6d %4d", cases[k].what, seer_ggml_type_name(cases[k].type), R, C, T);
            for (int isa = SEER_CPU_ISA_SCALAR; isa <= SEER_CPU_ISA_AVX512; isa++) {
                c->isa_cap = isa;
                double best = 1e30;
                for (int r = 0; r < (isa == SEER_CPU_ISA_SCALAR ? 1 : reps); r++) {
                    const double t0 = now();
                    be->ops->matmul(be, y, x, &w, NULL, T);
                    const double dt = now() - t0;
                    best = dt < best ? dt : best;
                }
                printf(" %8.2f", (double)R * C * T / best * 1e-9);
            }
            printf("\n");
            fflush(stdout);
            free(x), free(y);
        }
        be->ops->weight_free(be, &w);
        free(blk);
    }
    be->ops->free(be);
    return 0;
}
