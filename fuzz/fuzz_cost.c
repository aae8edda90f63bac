/*
 * fuzz_cost.c: libFuzzer target for the speculation cost file (src/spec/cost_file.c).
 *
 * Parses the input; what parses must be a valid table, must format and parse back to the
 * same text, and must interpolate to finite positive times anywhere. Not for: checking the
 * planner's choices (tests/test_cost.c does that).
 */
#include "spec/cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static seer_cost_table t, u;
    if (seer_cost_parse((const char *)data, size, &t) != SEER_OK)
        return 0;
    if (seer_cost_table_check(&t) != SEER_OK)
        abort();
    size_t len = 0, len2 = 0;
    char probe[1];
    seer_cost_format(&t, probe, 0, &len);
    char *a = malloc(len + 1), *b = malloc(len + 1);
    if (!a || !b || seer_cost_format(&t, a, len + 1, NULL) != SEER_OK ||
        seer_cost_parse(a, len, &u) != SEER_OK || seer_cost_format(&u, b, len + 1, &len2) != SEER_OK ||
        len2 != len || memcmp(a, b, len))
        abort(); /* the writer's text must read back to itself */
    free(a);
    free(b);
    const double Bs[] = {0.5, 1, 3, 1e6}, Ls[] = {1, 777, 1e9};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            const double v = seer_cost_verify(&t, 1 + i * 5, Bs[i], Ls[j]);
            if (!(seer_cost_target(&t, Bs[i], Ls[j]) > 0) || !(v > 0) || !isfinite(v))
                abort();
            for (int d = 0; d < t.n_drafters; d++)
                if (!(seer_cost_draft(&t, d, 0, Bs[i], Ls[j]) >= 0))
                    abort();
        }
    return 0;
}
