/*
 * registry.c: the drafters by name. A drafter is one file under src/spec/ with its
 * seer_drafter_ops (drafter.h); adding one adds a line here and its tests.
 */
#include "spec/drafter.h"

#include <string.h>

static const struct {
    const char *name;
    const seer_drafter_ops *ops;
} DRAFTERS[] = {
    {"streaming", &seer_drafter_self}, /* one implementation, three views (draft_self.c) */
    {"retrieval", &seer_drafter_self},
    {"snapkv", &seer_drafter_self},
    {"draft", &seer_drafter_model},
    {"ngram", &seer_drafter_ngram},
    {"quantkv", &seer_drafter_quantkv},
    {"hierarchy", &seer_drafter_hierarchy},
};

const seer_drafter_ops *seer_drafter_find(const char *name) {
    for (size_t i = 0; name && i < sizeof DRAFTERS / sizeof *DRAFTERS; i++)
        if (!strcmp(DRAFTERS[i].name, name))
            return DRAFTERS[i].ops;
    return NULL;
}
