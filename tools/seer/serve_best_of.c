/*
 * serve_best_of.c: OpenAI's best_of on /v1/completions. best_of candidates are generated as
 * choices of one job (requests of their own, seeds seed + i as n's choices are, so that the
 * scheduler batches them), each keeping the log-probabilities of its tokens; the response
 * returns the n with the highest cumulative log-probability of their generated tokens.
 *
 * Not for: generating the candidates (serve_api.c's job) or writing the response.
 */
#include "serve.h"

#include <stdlib.h>

bool serve_best_of_parse(json_t *root, int n, int *best, serve_error *e) {
    long long b = n; /* absent: n candidates, all returned */
    bool stream = false;
    *best = n;
    if (serve_get_int(root, "best_of", 1, SERVE_MAX_CHOICES, &b, e) < 0)
        return false;
    if (b < n) {
        serve_fail(e, 400, "best_of", "invalid_value", "'best_of' (%lld) must be at least 'n' (%d)", b, n);
        return false;
    }
    /* candidates left out cannot be streamed (best_of n is n's choices, which can) */
    if (b > n && serve_get_bool(root, "stream", &stream, e) >= 0 && stream) {
        serve_fail(e, 400, "best_of", "invalid_value", "'best_of' cannot be used with 'stream'");
        return false;
    }
    *best = (int)b;
    return true;
}

/* The cumulative log-probability of c's generated tokens. */
static double total(const serve_choice *c) {
    double s = 0;
    for (int i = 0; i < c->n_lp; i++)
        s += c->lp[i].logprob;
    return s;
}

void serve_best_of_order(const serve_job *j, int *order) {
    const int n = j->n_choices;
    double score[SERVE_MAX_CHOICES];
    int idx[SERVE_MAX_CHOICES];
    for (int i = 0; i < n; i++) {
        idx[i] = i;
        score[i] = j->n_return < n ? total(&j->choices[i]) : 0;
    }
    /* insertion sort, stable: the likeliest first, ties in index order */
    for (int i = 1; i < n && j->n_return < n; i++)
        for (int k = i; k > 0 && score[idx[k]] > score[idx[k - 1]]; k--) {
            const int t = idx[k];
            idx[k] = idx[k - 1];
            idx[k - 1] = t;
        }
    for (int i = 0; i < j->n_return; i++)
        order[i] = idx[i];
}
