/*
 * tp_serve_fwd.c: a rank's side of the ops around a forward call (backend.h): batch_begin,
 * whose batch and index arrays the rank keeps at fixed addresses for the ops that follow
 * (tp_serve.h's att_cache), and the recorded-call pair forward_begin / forward_end (plain or
 * held) with forward_launch, so that a rank in another process records and replays its own
 * graphs (CUDA) as a rank thread does. A backend without batch_begin takes it as nothing to do;
 * one without the pair refuses it (rank 0 sends it only where its own backend has it).
 * Not for: the ops of the call itself (tp_serve_ops.c).
 */
#include "parallel/tp_serve.h"

/* batch_begin: the batch (fields 0 to 24, as attention's), then tokens, pos, page, row and
 * out_rows each as present-or-not and its bytes, then n_out. */
#define BATCH_SIG "iiiifiiibbbbbbibiibiibfbb" "ibibibibib" "i"

static seer_status op_batch_begin(tp_serve *sv, seer_backend *be, const tp_msg *m) {
    TRY(seer_tp_msg_check(m, BATCH_SIG, "batch_begin"));
    if (!be->ops->batch_begin)
        return SEER_OK; /* optional: the ops upload their arrays themselves */
    const seer_attn_batch *ab;
    TRY(seer_tp_att_batch(sv, be, m, 0, &ab));
    int n_out;
    TRY(num(m, 35, 0, BIG, &n_out));
    const int32_t *a[SV_IDX_N] = {0};
    int n[SV_IDX_N] = {0};
    for (int k = 0; k < SV_IDX_N; k++) {
        if (!m->f[25 + 2 * k].i)
            continue;
        n[k] = k == SV_IDX_OUT ? n_out : ab->T;
        TRY(ids(m, 26 + 2 * k, n[k], &a[k], "batch_begin"));
    }
    TRY(seer_tp_kept_set(sv, be, a, n));
    for (int k = 0; k < SV_IDX_N; k++)
        a[k] = seer_tp_kept_idx(sv, be, k, a[k], n[k]);
    return be->ops->batch_begin(be, ab, a[SV_IDX_TOKENS], a[SV_IDX_POS], a[SV_IDX_PAGE], a[SV_IDX_ROW],
                                a[SV_IDX_OUT], n_out);
}

seer_status seer_tp_serve_forward(tp_serve *sv, seer_backend *be, uint32_t op, const tp_msg *m, tp_wbuf *w,
                                  seer_status fail) {
    const seer_backend_ops *o = be->ops;
    if (op == TP_OP_BATCH_BEGIN)
        return op_batch_begin(sv, be, m);
    if (op == TP_OP_FWD_LAUNCH) {
        TRY(seer_tp_msg_check(m, "i", "forward_launch"));
        if (!o->forward_launch)
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend records no forward calls");
        return o->forward_launch(be, m->f[0].i != 0);
    }
    if (op == TP_OP_FWD_BEGIN) { /* key, T_cap, T, n_out, hold: answered with T, n_out, done */
        TRY(seer_tp_msg_check(m, "iiiii", "forward_begin"));
        int T_cap, T, n_out;
        TRY(num(m, 1, 0, BIG, &T_cap));
        TRY(num(m, 2, 0, BIG, &T));
        TRY(num(m, 3, 0, BIG, &n_out));
        const bool hold = m->f[4].i != 0;
        if (!(hold ? o->forward_begin_hold : o->forward_begin))
            return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend records no forward calls");
        /* the key only names rank 0's buffers, whose copies here are the same every call */
        const void *key = (const void *)(uintptr_t)m->f[0].i;
        bool done = false;
        TRY((hold ? o->forward_begin_hold : o->forward_begin)(be, key, T_cap, &T, &n_out, &done));
        seer_tp_w_int(w, T);
        seer_tp_w_int(w, n_out);
        seer_tp_w_int(w, done);
        return SEER_OK;
    }
    /* FWD_END: the call's status, hold; answered with redo. A failure of the rank's own kept
     * from a posted op ends the recording as failed. */
    TRY(seer_tp_msg_check(m, "ii", "forward_end"));
    int st;
    TRY(num(m, 0, INT32_MIN, INT32_MAX, &st));
    const bool hold = m->f[1].i != 0;
    if (!(hold ? o->forward_end_hold : o->forward_end))
        return seer_err(SEER_ERR_UNSUPPORTED, "the rank's backend records no forward calls");
    bool redo = false;
    TRY((hold ? o->forward_end_hold : o->forward_end)(be, fail != SEER_OK ? fail : (seer_status)st, &redo));
    seer_tp_w_int(w, redo);
    return SEER_OK;
}
