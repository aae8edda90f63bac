/*
 * best_first_topk_lab.c: the host's cost of a greedy node's siblings in best-first search
 * (best_first.c) at a real vocabulary: step drafting's scan per sibling with the picks
 * skipped (seer_draft_top_ids) against one pass (seer_draft_top_excl), on one random row of
 * 128256 logits; the ids must be the same.
 *
 *     lab_best_first_topk [V]
 */
#include "spec/drafter.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int V = argc > 1 ? atoi(argv[1]) : 128256, reps = 50;
    if (V < 16)
        return 1;
    float *x = malloc(sizeof(float) * V);
    if (!x)
        return 1;
    uint64_t s = 1;
    for (int v = 0; v < V; v++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[v] = (float)(s >> 40) / 65536.f;
    }
    int bad = 0;
    for (int k = 2; k <= 8; k *= 2) {
        int32_t a[8] = {7}, b[8] = {7};
        /* warm-up of both */
        seer_draft_top_excl(x, V, 7, k - 1, b + 1);
        seer_draft_top_ids(x, V, a, 1, 1, &a[1]);
        const double t0 = now_s();
        for (int r = 0; r < reps; r++)
            for (int c = 1; c < k; c++)
                seer_draft_top_ids(x, V, a, c, 1, &a[c]);
        const double t1 = now_s();
        for (int r = 0; r < reps; r++)
            seer_draft_top_excl(x, V, 7, k - 1, b + 1);
        const double t2 = now_s();
        int same = 1;
        for (int c = 0; c < k; c++)
            same &= a[c] == b[c];
        bad |= !same;
        printf("V %d, %d children: a scan per sibling %.3f ms, one pass %.3f ms per node (%.1fx), same ids: %s\n", V,
               k, (t1 - t0) / reps * 1e3, (t2 - t1) / reps * 1e3, (t1 - t0) / (t2 - t1), same ? "yes" : "NO");
    }
    free(x);
    return bad;
}
