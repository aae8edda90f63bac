/*
 * offload.c: the scheduler's use of the KV cache's host tier (kv/kv_host.h) for preemption.
 * A request preempted while the tier is on has its cache copied to the host before its pages
 * are freed; admitted again, its pages are copied back into a new sequence on the copy stream
 * (REQ_LOADING) while the other requests compute, and it goes on with its prefill once the
 * copy is complete: only the rows a recomputation would not skip are computed again (the
 * pending token, and the prompt rows whose queries its drafter wants), as after a prefix
 * cache hit. The restored rows are the very bits the request computed, so what it generates
 * does not change. Where the tier cannot hold the cache (or the copy fails) the request is
 * recomputed as without one.
 *
 * Not for: the prefix cache's spills (prefix.c), the slots and copies (kv/kv_host.c).
 */
#include "sched/sched.h"
#include "util/error.h"

void seer_offload_save(seer_kv_host *h, seer_context *c, seer_request *r, uint64_t now, seer_sched_stats *st) {
    if (!h || r->state == REQ_LOADING) /* loading: its copy on the host is still there */
        return;
    seer_kv_host_drop(h, r->saved);
    r->saved = SEER_KV_HOST_NONE;
    const int len = seer_seq_len(c, r->seq);
    if (len < 1 || seer_kv_host_save(h, r->seq, len, now, &r->saved) != SEER_OK)
        return; /* recomputed when admitted again */
    r->saved_len = len;
    st->kv_host_saves++;
}

seer_status seer_offload_restore(seer_kv_host *h, seer_context *c, seer_request *r, int limit, uint64_t now,
                                 seer_seq_id *seq, int *m, bool *loading, uint64_t *ticket) {
    *loading = false;
    *m = 0;
    if (!seer_kv_host_valid(h, r->saved))
        return SEER_OK;
    const int n = r->saved_len < limit ? r->saved_len : limit;
    if (n < 1) {
        seer_kv_host_drop(h, r->saved);
        r->saved = SEER_KV_HOST_NONE;
        return SEER_OK;
    }
    if (seer_kv_host_load(h, r->saved, n, now, seq, ticket) != SEER_OK)
        return SEER_OK; /* (the pool short of the pages) recomputed instead */
    *m = n;
    *loading = true;
    return SEER_OK;
}

void seer_offload_settle(seer_kv_host *h, seer_request *r) {
    if (h && r->state == REQ_LOADING)
        (void)seer_kv_host_wait(h, r->load_ticket);
}

seer_status seer_offload_poll(seer_kv_host *h, seer_request **running, int n) {
    if (!h)
        return SEER_OK;
    bool runnable = false;
    for (int i = 0; i < n && !runnable; i++)
        runnable = running[i]->state != REQ_LOADING;
    for (int i = 0; i < n; i++) {
        seer_request *r = running[i];
        if (r->state != REQ_LOADING)
            continue;
        bool ready = false;
        /* nothing else to compute: wait for the copy rather than spin */
        SEER_TRY(runnable ? seer_kv_host_ready(h, r->load_ticket, &ready) : seer_kv_host_wait(h, r->load_ticket));
        if (!runnable || ready) {
            r->state = REQ_PREFILL;
            seer_kv_host_drop(h, r->saved);
            r->saved = SEER_KV_HOST_NONE;
        }
    }
    return SEER_OK;
}
