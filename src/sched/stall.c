/*
 * stall.c: the time budget of prompt tokens beside decoding requests (free cuts; sched.c).
 *
 * Sarathi-Serve (Agrawal et al., OSDI 2024) bounds the stall a prefill puts on running
 * streams by a token budget per step picked offline for a latency target. Here the budget is
 * measured online: a moving average of a step of rounds alone (t_rounds) and of what a
 * prompt token adds to a step (t_tok), and the prompt tokens planned beside rounds are those
 * that add about stall x t_rounds, so a stream's gap between tokens stays near
 * (1 + stall) x its idle one. A prompt token's cost grows as the prompt gets longer (its
 * attention reads every earlier key); the average follows it step by step. Until both
 * times are known the budget is a probe of 16 tokens.
 */
#include "sched/sched.h"

int seer_stall_tokens(const seer_stall *st) {
    if (st->stall <= 0)
        return st->chunk;
    if (st->t_rounds <= 0 || st->t_tok <= 0)
        return st->chunk < 16 ? st->chunk : 16;
    const double n = st->stall * st->t_rounds / st->t_tok + 1e-6; /* 9.9999999 is 10 */
    return n < 1 ? 1 : n >= st->chunk ? st->chunk : (int)n;
}

void seer_stall_observe(seer_stall *st, double dt, int prompt_tokens, int rounds) {
    if (!(dt >= 0))
        return;
    if (prompt_tokens == 0 && rounds > 0) {
        st->t_rounds = st->t_rounds > 0 ? 0.7 * st->t_rounds + 0.3 * dt : dt;
    } else if (prompt_tokens > 0 && (rounds == 0 || st->t_rounds > 0)) {
        /* beside rounds: the step less the rounds' own; a fall in one step at most halves
         * the average, so one quick step at most doubles the next budget */
        const double extra = rounds ? dt - st->t_rounds : dt;
        const double per = (extra > 0 ? extra : 0) / prompt_tokens;
        st->t_tok = st->t_tok > 0 ? 0.5 * st->t_tok + 0.5 * per : per;
    }
}
