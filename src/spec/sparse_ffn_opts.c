/*
 * sparse_ffn_opts.c: the sparse FFN's settings (ffn_mode, ffn_density, ffn_refresh) and where a
 * generator turns it on. A sparse FFN is a property of the draft steps that read the target's
 * weights (the self-drafts, quantkv, the hierarchy's middle level), as the draft weights are,
 * not a drafter: it composes with every view of the cache, with trees and with the draft
 * weights, each of which stays its drafter's. Its settings are listed by the registry after
 * the built-in drafters' (seer_spec_option_at names "sparse-ffn" as their owner) and kept in
 * seer_spec_params.ext.
 * Not for: choosing the neurons or gathering the copy (src/model/sparse_ffn.c).
 */
#include "spec/drafter.h"
#include "util/error.h"

#include <stddef.h>

typedef struct {
    float density;
    int refresh;
    int mode; /* seer_sffn_mode: MODES' index */
} sparse_ffn_settings;

/* In seer_sffn_mode's order. */
static const char *const MODES[] = {"griffin", "cats", NULL};

static const seer_drafter_option OPTS[] = {
    {{.flag = "spec-ffn-density", .json = "ffn_density", .metavar = "D", .type = SEER_SPEC_OPT_FLOAT, .def = 1,
      .lo = 0.01, .hi = 1,
      .help = "draft steps multiply each FFN by this share of its neurons, chosen as --spec-ffn-mode says "
              "(1: all)"},
     SEER_DRAFTER_OPT_EXT, offsetof(sparse_ffn_settings, density)},
    {{.flag = "spec-ffn-refresh", .json = "ffn_refresh", .metavar = "N", .type = SEER_SPEC_OPT_INT, .def = 16,
      .lo = 0, .hi = 1000000,
      .help = "choose the sparse FFN's neurons (cats: thresholds) again after N full forward calls (0: once, "
              "from the prompts)"},
     SEER_DRAFTER_OPT_EXT, offsetof(sparse_ffn_settings, refresh)},
    {{.flag = "spec-ffn-mode", .json = "ffn_mode", .metavar = "M", .type = SEER_SPEC_OPT_CHOICE, .def = 0,
      .choices = MODES,
      .help = "how the sparse FFN's neurons are chosen: per layer those most active over the context "
              "(griffin), or per token those whose |SiLU(gate)| reaches the layer's threshold (cats)"},
     SEER_DRAFTER_OPT_EXT, offsetof(sparse_ffn_settings, mode)},
};

const seer_drafter_desc seer_sparse_ffn_desc = {
    .name = "sparse-ffn",
    .help = "contextual sparsity of the draft steps' FFN (a property of the drafters that read the target)",
    .options = OPTS, .n_options = 3,
};

seer_status seer_spec_sparse_ffn_apply(seer_context *ctx, const seer_spec_params *p, bool *on) {
    sparse_ffn_settings set;
    seer_drafter_settings(&seer_sparse_ffn_desc, p, &set);
    *on = false;
    if (set.density >= 1 || p->kind == SEER_SPEC_NONE)
        return SEER_OK;
    if (p->kind == SEER_SPEC_AUTO)
        return seer_err(SEER_ERR_UNSUPPORTED, "ffn_density %g: automatic speculation has no sparse FFN candidates",
                        (double)set.density);
    if (!seer_drafter_has(p->kind, SEER_DRAFTER_DRAFT_WEIGHTS)) {
        char names[256];
        seer_drafter_names(SEER_DRAFTER_DRAFT_WEIGHTS, names, sizeof names);
        return seer_err(SEER_ERR_INVALID_ARG, "ffn_density %g: a sparse FFN is for drafters that read the "
                                              "target's weights (%s), not %s",
                        (double)set.density, names, seer_spec_kind_name(p->kind));
    }
    SEER_TRY(seer_sparse_ffn_init(ctx, (seer_sffn_mode)set.mode, set.density, set.refresh));
    *on = true;
    return SEER_OK;
}
