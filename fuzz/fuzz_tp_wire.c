/*
 * fuzz_tp_wire.c: libFuzzer target for the op stream's messages between ranks in separate
 * processes (src/parallel/tp_wire.c, tp_serve.c).
 *
 * The input is a run of messages, each [kind u32][instance u32][bytes u32][payload]; the
 * kind's top bit says the message is posted (rank 0 waits for no answer, so a failure is kept
 * for the instance's next waited message). Every payload that parses must write back to the
 * same bytes; messages of the ops whose arguments the rank checks in full (memory, weights,
 * instances, the recorded-call pair) then run on a CPU backend, whose state must stay usable
 * whatever came before. Compute ops are parsed, not run: the rank trusts
 * their extents to rank 0 (tp_serve.c says so).
 */
#include "parallel/tp_remote.h"

#include <stdlib.h>
#include <string.h>

/* What the payload's fields write back as. */
static void rewrite(const tp_msg *m, tp_wbuf *w) {
    seer_tp_w_reset(w);
    for (int k = 0; k < m->n; k++) {
        const tp_field *f = &m->f[k];
        if (f->type == TP_F_INT)
            seer_tp_w_int(w, f->i);
        else if (f->type == TP_F_DBL)
            seer_tp_w_dbl(w, f->f);
        else if (f->type == TP_F_BYTES)
            seer_tp_w_bytes(w, f->data, f->len);
        else
            seer_tp_w_ptr(w, f->i, f->off);
    }
}

static bool runs(uint32_t kind, const tp_msg *m) {
    switch (kind) {
    case TP_OP_ALLOC: /* small allocations only: the fuzzer's memory is bounded */
        return m->n == 2 && m->f[1].type == TP_F_INT && m->f[1].i >= 0 && m->f[1].i <= (1 << 20);
    case TP_OP_DEALLOC:
    case TP_OP_UPLOAD:
    case TP_OP_DOWNLOAD:
    case TP_OP_SYNC:
    case TP_OP_CLONE:
    case TP_OP_FREE:
    case TP_OP_WLOAD:
    case TP_OP_WFREE:
    case TP_OP_WCONCAT:
    case TP_OP_WQUANT:
    case TP_OP_KV_PAGE_BYTES:
    case TP_OP_BATCH_BEGIN: /* the CPU has none: checked, then nothing to do */
    case TP_OP_FWD_BEGIN:
    case TP_OP_FWD_END:
    case TP_OP_FWD_LAUNCH:
        return true;
    case TP_OP_WRANDOM: /* small weights only */
        return m->n == 5 && m->f[1].type == TP_F_INT && m->f[2].type == TP_F_INT && m->f[1].i >= 0 &&
               m->f[2].i >= 0 && m->f[1].i <= (1 << 10) && m->f[2].i <= (1 << 10);
    default:
        return false;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static seer_backend *be;
    if (!be && seer_backend_cpu_init(1, &be) != SEER_OK)
        abort();
    tp_serve *sv = NULL;
    if (seer_tp_serve_init(be, &sv) != SEER_OK)
        return 0;
    tp_wbuf out = {0}, again = {0};
    tp_msg *m = malloc(sizeof *m);
    while (m && size >= 12) {
        uint32_t kind, inst, len;
        memcpy(&kind, data, 4);
        memcpy(&inst, data + 4, 4);
        memcpy(&len, data + 8, 4);
        data += 12;
        size -= 12;
        if (len > size)
            len = (uint32_t)size;
        /* the payload on a heap block of its own, so that a read past it is seen */
        uint8_t *p = malloc(len ? len : 1);
        if (!p)
            break;
        memcpy(p, data, len);
        if (seer_tp_msg_parse(p, len, m) == SEER_OK) {
            rewrite(m, &again);
            if (again.len != len || (len && memcmp(again.buf, p, len)))
                abort();
            const uint32_t op = (kind & 0x7fffffffu) % (TP_OP_COUNT + 1);
            if (runs(op, m) && (kind & 0x80000000u)) {
                (void)seer_tp_serve_post(sv, op, inst % 64, p, len);
            } else if (runs(op, m)) {
                seer_tp_w_reset(&out);
                (void)seer_tp_serve_msg(sv, op, inst % 64, p, len, &out);
            }
        }
        free(p);
        data += len;
        size -= len;
    }
    free(m);
    seer_tp_w_free(&out);
    seer_tp_w_free(&again);
    seer_tp_serve_free(sv);
    return 0;
}
