/*
 * synthetic.c: acceptance drawn instead of decided, for timing runs on random weights
 * (seer_gen_set_synthetic, seer_bench.h). A round's accepted path is its first children, each
 * accepted at the rate alpha or as the replayed trace recorded for the round's drafter kind
 * and budget; the verifier takes that path in place of the rule's (verify.c, tree.c), and
 * everything after it (rows, rewinds, the next round) runs as in a real round.
 *
 * Not for: generation of real output (never lossless), recording traces (accept_trace.c).
 */
#include "spec/accept_trace.h"
#include "spec/spec.h"
#include "util/error.h"

#include <math.h>
#include <string.h>

seer_status seer_gen_set_synthetic(seer_gen *g, float alpha, const seer_accept_trace *trace) {
    SEER_CHECK_ARG(g);
    if (!(alpha >= 0 && alpha < 1))
        return seer_err(SEER_ERR_INVALID_ARG, "synthetic acceptance %g must be in [0, 1)", alpha);
    g->synth_alpha = alpha;
    g->synth_trace = trace;
    for (int h = 0; h < g->n_seqs; h++) /* the replay starts afresh */
        g->seqs[h].n_trace = 0;
    return SEER_OK;
}

/* The next draft token of handle h in a synthetic run: accepted or not. */
static bool synthetic_accept(seer_gen *g, int h) {
    seer_gen_seq *s = &g->seqs[h];
    const seer_accept_trace *t = g->synth_trace;
    if (t) {
        int budget;
        const seer_spec_kind k = seer_gen_round_drafter(g, &budget);
        if (seer_drafter_of_kind(k)) {
            /* a line per kind and budget: auto's rounds at K 2048 replay what a view of 2048
             * accepted, not the line its first round at K 512 picked */
            int i = 0;
            while (i < s->n_trace && !(s->trace[i].kind == k && s->trace[i].budget == budget))
                i++;
            if (i == s->n_trace) {
                if (s->n_trace < SEER_GEN_TRACE_SLOTS)
                    s->n_trace++;
                else /* the oldest slot goes */
                    memmove(s->trace, s->trace + 1, sizeof s->trace[0] * --i);
                s->trace[i].kind = k;
                s->trace[i].budget = budget;
                s->trace[i].line = seer_accept_trace_pick(t, k, budget, h, &s->trace[i].pos);
            }
            if (s->trace[i].line >= 0)
                return seer_accept_trace_next(t, s->trace[i].line, &s->trace[i].pos);
        }
    }
    return seer_sampler_uniform(s->smp) < g->synth_alpha;
}

int seer_gen_synthetic_path(seer_gen *g, int k, int32_t *path, int *last) {
    const int nd = g->nd[k];
    const int32_t *p = g->par + (size_t)k * g->G;
    int node = -1, a = 0;
    for (;;) {
        int c = node + 1;
        while (c < nd && p[c] != node)
            c++;
        if (c == nd || !synthetic_accept(g, g->hs[k]))
            break;
        path[a++] = c;
        node = c;
    }
    *last = node;
    return a;
}
