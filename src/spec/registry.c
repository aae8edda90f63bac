/*
 * registry.c: the drafters by name. A drafter is one file under src/spec/ with its
 * seer_drafter_ops; adding one adds a line here and its tests.
 */
#include "spec/spec.h"

#include <string.h>

static const struct {
    const char *name;
    const seer_drafter_ops *ops;
    bool has_q; /* proposals carry the distributions they were drawn from */
} DRAFTERS[] = {
    {"streaming", &seer_drafter_self, true},
    {"retrieval", &seer_drafter_self, true},
    {"snapkv", &seer_drafter_self, true},
    {"draft", &seer_drafter_model, true},
    {"ngram", &seer_drafter_ngram, false},
};

const seer_drafter_ops *seer_drafter_find(const char *name) {
    for (size_t i = 0; name && i < sizeof DRAFTERS / sizeof *DRAFTERS; i++)
        if (!strcmp(DRAFTERS[i].name, name))
            return DRAFTERS[i].ops;
    return NULL;
}

bool seer_drafter_has_q(const seer_drafter_ops *ops) {
    for (size_t i = 0; i < sizeof DRAFTERS / sizeof *DRAFTERS; i++)
        if (DRAFTERS[i].ops == ops)
            return DRAFTERS[i].has_q;
    return false;
}
