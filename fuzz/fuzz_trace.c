/*
 * fuzz_trace.c: libFuzzer target for the acceptance trace file (src/spec/accept_trace.c).
 *
 * Parses the input; what parses must save and parse back to the same counts, and replay
 * must give outcomes for every line it picks, whatever the handle.
 */
#include "spec/accept_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    seer_accept_trace *t = NULL;
    if (seer_accept_trace_parse((const char *)data, size, &t) != SEER_OK)
        return 0;
    int64_t r0, d0, a0, r1, d1, a1;
    seer_accept_trace_counts(t, SEER_SPEC_NONE, &r0, &d0, &a0);
    if (r0 < 0 || a0 < 0 || a0 > d0) /* a trace may hold no rounds at all: comments, then end */
        abort();
    char path[] = "/tmp/fuzz_trace_XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0)
        abort();
    close(fd);
    seer_accept_trace *u = NULL;
    if (seer_accept_trace_save(t, path) != SEER_OK || seer_accept_trace_load(path, &u) != SEER_OK)
        abort(); /* the writer's text must read back */
    unlink(path);
    seer_accept_trace_counts(u, SEER_SPEC_NONE, &r1, &d1, &a1);
    if (r1 != r0 || d1 != d0 || a1 != a0)
        abort();
    for (int k = SEER_SPEC_STREAMING; k < SEER_SPEC_AUTO; k++)
        for (int h = 0; h < 3; h++) {
            int64_t pos = 0;
            const int line = seer_accept_trace_pick(u, (seer_spec_kind)k, 256, h * 1000003, &pos);
            for (int i = 0; line >= 0 && i < 200; i++)
                (void)seer_accept_trace_next(u, line, &pos);
        }
    seer_accept_trace_free(u);
    seer_accept_trace_free(t);
    return 0;
}
