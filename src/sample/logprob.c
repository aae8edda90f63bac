/*
 * logprob.c: the reference log-softmax at a token and the top-k of a row (logprob.h).
 *
 * Not for: sampling; the transform a sampler applies before drawing is sample.c's.
 */
#include "sample/logprob.h"

#include <math.h>

/* a ranks before b: larger value, ties to the lower id */
static int before(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }

void seer_logprob_row_ref(const float *x, int V, int32_t token, int k, float *lp, int32_t *top_id,
                          float *top_lp) {
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (x[i] > mx) /* NaN compares false */
            mx = x[i];
    double sum = 0;
    if (mx > -INFINITY)
        for (int i = 0; i < V; i++)
            if (x[i] > -INFINITY)
                sum += exp((double)x[i] - mx);
    const double lse = mx > -INFINITY ? mx + log(sum) : INFINITY;
#define LP(v) ((v) > -INFINITY ? (float)((double)(v) - lse) : -INFINITY)
    *lp = token >= 0 && token < V ? LP(x[token]) : -INFINITY;
    /* insertion into a sorted list of k: k <= 20, so this is one pass over the row */
    int n = 0;
    for (int i = 0; i < V && k > 0; i++) {
        const float v = isnan(x[i]) ? -INFINITY : x[i];
        if (n == k && !before(v, i, top_lp[n - 1], top_id[n - 1]))
            continue;
        int j = n < k ? n++ : k - 1;
        for (; j > 0 && before(v, i, top_lp[j - 1], top_id[j - 1]); j--) {
            top_lp[j] = top_lp[j - 1];
            top_id[j] = top_id[j - 1];
        }
        top_lp[j] = v;
        top_id[j] = i;
    }
    for (int j = 0; j < n; j++)
        top_lp[j] = LP(top_lp[j]);
#undef LP
}
