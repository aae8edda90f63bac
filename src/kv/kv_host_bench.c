/*
 * kv_host_bench.c: seer_kv_host_time_copies (seer_bench.h), the host tier's copies of one
 * sequence timed for `seer bench --resume`.
 * Not for: the engine's use of the tier (kv_host.c, sched/offload.c).
 */
#include "kv/kv_host.h"
#include "seer_bench.h"
#include "util/error.h"

#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

seer_status seer_kv_host_time_copies(seer_context *ctx, seer_seq_id seq, double *save_s, double *load_s,
                                     double *bytes, seer_seq_id *restored) {
    SEER_CHECK_ARG(ctx);
    SEER_CHECK_ARG(save_s && load_s && bytes && restored);
    const int len = seer_seq_len(ctx, seq);
    if (len < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "kv host timing: sequence %d holds no tokens", (int)seq);
    const int np = (len + ctx->kv->page_size - 1) / ctx->kv->page_size;
    const seer_backend_ops *o = ctx->be->ops;
    if (!o->kv_page_bytes)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend has no host tier for the KV cache", o->name);
    seer_kv_host *h = NULL;
    SEER_TRY(seer_kv_host_init(ctx, (uint64_t)np * o->kv_page_bytes(ctx->be, &ctx->geom), &h));
    seer_kv_host_ref ref;
    seer_status st = o->sync ? o->sync(ctx->be) : SEER_OK; /* the work before is not the copy's */
    double t0 = now_s();
    if (st == SEER_OK)
        st = seer_kv_host_save(h, seq, len, 0, &ref);
    double t1 = now_s();
    uint64_t ticket = 0;
    if (st == SEER_OK)
        st = seer_kv_host_load(h, ref, len, 1, restored, &ticket);
    if (st == SEER_OK && (st = seer_kv_host_wait(h, ticket)) != SEER_OK)
        seer_seq_free(ctx, *restored);
    double t2 = now_s();
    if (st == SEER_OK) {
        *save_s = t1 - t0;
        *load_s = t2 - t1;
        *bytes = (double)h->bytes_to_host;
    }
    seer_kv_host_free(h);
    return st;
}
