/*
 * lab_util.cuh: what the CUDA kernel labs share: the random inputs (xorshift, the same
 * sequence in every lab) and the timing of an op as a recorded graph of back-to-back calls.
 * A lab is a tool: on a CUDA error it says which call failed and exits.
 */
#ifndef SEER_LAB_UTIL_CUH
#define SEER_LAB_UTIL_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define LAB_CU(x)                                                                            \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "lab: %s: %s\n", #x, cudaGetErrorString(e_));                    \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static uint64_t lab_rng = 0x9E3779B97F4A7C15ull;

/* Uniform in [-1, 1). */
static float lab_frand(void) {
    lab_rng ^= lab_rng << 13;
    lab_rng ^= lab_rng >> 7;
    lab_rng ^= lab_rng << 17;
    return (float)((lab_rng >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

/* Microseconds per call of what issue() puts on stream: reps calls recorded in one graph,
 * replayed once to warm up, then the median of five timed replays. */
template <typename F> static double lab_graph_us(cudaStream_t stream, int reps, F issue) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    LAB_CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int r = 0; r < reps; r++)
        issue();
    LAB_CU(cudaStreamEndCapture(stream, &graph));
    LAB_CU(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    LAB_CU(cudaEventCreate(&e0));
    LAB_CU(cudaEventCreate(&e1));
    LAB_CU(cudaGraphLaunch(exec, stream));
    float ms[5];
    for (int r = 0; r < 5; r++) {
        LAB_CU(cudaEventRecord(e0, stream));
        LAB_CU(cudaGraphLaunch(exec, stream));
        LAB_CU(cudaEventRecord(e1, stream));
        LAB_CU(cudaEventSynchronize(e1));
        LAB_CU(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    for (int a = 0; a < 5; a++)
        for (int b = a + 1; b < 5; b++)
            if (ms[b] < ms[a]) {
                const float t = ms[a];
                ms[a] = ms[b];
                ms[b] = t;
            }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return ms[2] * 1e3 / reps;
}

#endif
