/*
 * registry.c: the drafters, the one list of them. A drafter is one file under src/spec/ with
 * its seer_drafter_ops and seer_drafter_desc (drafter.h); adding one adds a line here and
 * its tests. The kind names, the speculation kinds seer.h enumerates (seer_spec_kind_info_at)
 * and so the CLI's help, the server's accepted values, /metrics and auto's candidates all
 * come from this list.
 *
 * Not for: choosing a drafter per round (auto.c) or running one (gen.c, round.c).
 */
#include "spec/drafter.h"
#include "util/error.h"

#include <stdio.h>
#include <string.h>

/* Each declared in its drafter's file. */
extern const seer_drafter_desc seer_drafter_streaming_desc, seer_drafter_retrieval_desc, seer_drafter_snapkv_desc,
    seer_drafter_model_desc, seer_drafter_ngram_desc, seer_drafter_quantkv_desc, seer_drafter_hierarchy_desc,
    seer_drafter_shadowkv_desc, seer_drafter_magicpig_desc;

static const seer_drafter_desc *const BUILTIN[] = {
    &seer_drafter_streaming_desc, /* one implementation, three views (draft_self.c) */
    &seer_drafter_retrieval_desc,
    &seer_drafter_snapkv_desc,
    &seer_drafter_model_desc,
    &seer_drafter_ngram_desc,
    &seer_drafter_quantkv_desc,
    &seer_drafter_hierarchy_desc,
    &seer_drafter_shadowkv_desc, /* per-round selection views (select_view.c) */
    &seer_drafter_magicpig_desc,
};
#define N_BUILTIN ((int)(sizeof BUILTIN / sizeof *BUILTIN))

/* Settings of no drafter (drafter.h), listed after the built-in drafters'. */
static const seer_drafter_desc *const SETTINGS[] = {&seer_sparse_ffn_desc};
#define N_SETTINGS ((int)(sizeof SETTINGS / sizeof *SETTINGS))

/* Drafters registered at run time, with the kinds they were given. */
static struct {
    const seer_drafter_desc *d;
    seer_spec_kind kind;
} extra[SEER_SPEC_KIND_MAX];
static int n_extra;

const seer_drafter_desc *seer_drafter_at(int i) {
    if (i >= 0 && i < N_BUILTIN)
        return BUILTIN[i];
    return i >= N_BUILTIN && i < N_BUILTIN + n_extra ? extra[i - N_BUILTIN].d : NULL;
}

const seer_drafter_desc *seer_settings_owner_at(int i) {
    if (i >= N_BUILTIN && i < N_BUILTIN + N_SETTINGS)
        return SETTINGS[i - N_BUILTIN];
    return seer_drafter_at(i < N_BUILTIN ? i : i - N_SETTINGS);
}

/* The kind of the i-th drafter: its own, or for a built-in one without, the next after
 * seer.h's kinds (those given to the built-in ones before it). */
static seer_spec_kind kind_at(int i) {
    if (i >= N_BUILTIN)
        return extra[i - N_BUILTIN].kind;
    if (BUILTIN[i]->kind != SEER_SPEC_NONE)
        return BUILTIN[i]->kind;
    int k = SEER_SPEC_AUTO + 1;
    for (int j = 0; j < i; j++)
        k += BUILTIN[j]->kind == SEER_SPEC_NONE;
    return (seer_spec_kind)k;
}

const seer_drafter_desc *seer_drafter_of_kind(seer_spec_kind k) {
    for (int i = 0; seer_drafter_at(i); i++)
        if (kind_at(i) == k)
            return seer_drafter_at(i);
    return NULL;
}

const seer_drafter_desc *seer_drafter_of_name(const char *name) {
    for (int i = 0; name && seer_drafter_at(i); i++)
        if (!strcmp(seer_drafter_at(i)->name, name))
            return seer_drafter_at(i);
    return NULL;
}

bool seer_drafter_has(seer_spec_kind k, unsigned flags) {
    const seer_drafter_desc *d = seer_drafter_of_kind(k);
    return d && (d->flags & flags) == flags;
}

void seer_drafter_names(unsigned flags, char *buf, size_t cap) {
    int n = 0, m = 0;
    for (int i = 0; seer_drafter_at(i); i++)
        n += (seer_drafter_at(i)->flags & flags) == flags;
    size_t used = 0;
    if (cap)
        buf[0] = 0;
    for (int i = 0; seer_drafter_at(i) && used < cap; i++)
        if ((seer_drafter_at(i)->flags & flags) == flags) {
            const char *sep = m == 0 ? "" : m == n - 1 ? " or " : ", ";
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", sep, seer_drafter_at(i)->name);
            m++;
        }
}

const seer_drafter_ops *seer_drafter_find(const char *name) {
    const seer_drafter_desc *d = seer_drafter_of_name(name);
    return d ? d->ops : NULL;
}

/* Whether kind k is taken: none, auto or a registered drafter's. */
static bool kind_taken(seer_spec_kind k) {
    return k == SEER_SPEC_NONE || k == SEER_SPEC_AUTO || seer_drafter_of_kind(k) != NULL;
}

seer_status seer_drafter_register(const seer_drafter_desc *d, seer_spec_kind *kind) {
    SEER_CHECK_ARG(d);
    if (!d->name || !d->name[0] || !d->ops || !d->ops->init || !d->ops->free || !d->ops->propose)
        return seer_err(SEER_ERR_INVALID_ARG, "a drafter needs a name and init, free and propose");
    if (seer_drafter_of_name(d->name) || !strcmp(d->name, "none") || !strcmp(d->name, "auto") ||
        !strcmp(d->name, "tree"))
        return seer_err(SEER_ERR_INVALID_ARG, "a speculation kind named '%s' exists already", d->name);
    int n_ext = 0;
    for (int i = 0; seer_settings_owner_at(i); i++)
        for (int j = 0; j < seer_settings_owner_at(i)->n_options; j++)
            n_ext += seer_settings_owner_at(i)->options[j].offset == SEER_DRAFTER_OPT_EXT;
    for (int j = 0; j < d->n_options; j++) {
        const seer_spec_option *o = &d->options[j].o;
        seer_spec_params p = {0};
        double v;
        if (d->options[j].offset == SEER_DRAFTER_OPT_READ) {
            if (seer_spec_get(&p, o->flag, &v) != SEER_OK)
                return seer_err(SEER_ERR_INVALID_ARG, "drafter '%s': it reads a setting '%s' no drafter declares",
                                d->name, o->flag ? o->flag : "(null)");
            continue;
        }
        if (d->options[j].offset != SEER_DRAFTER_OPT_EXT)
            return seer_err(SEER_ERR_INVALID_ARG, "drafter '%s': a setting is declared (SEER_DRAFTER_OPT_EXT) "
                                                  "or read (SEER_DRAFTER_OPT_READ)", d->name);
        int n_ch = 0;
        while (o->type == SEER_SPEC_OPT_CHOICE && o->choices && o->choices[n_ch])
            n_ch++;
        const bool number = (o->type == SEER_SPEC_OPT_INT || o->type == SEER_SPEC_OPT_FLOAT) && o->def >= o->lo &&
                            o->def <= o->hi;
        const bool choice = n_ch > 0 && o->def >= 0 && o->def < n_ch && o->def == (double)(int)o->def;
        if (!o->flag || !o->flag[0] || !o->json || !o->json[0] || !(number || choice))
            return seer_err(SEER_ERR_INVALID_ARG, "drafter '%s': setting %d needs a flag, a json name and a "
                                                  "number type with its default in its range, or choices "
                                                  "with its default's index", d->name, j);
        if (seer_spec_get(&p, o->flag, &v) == SEER_OK || seer_spec_get(&p, o->json, &v) == SEER_OK)
            return seer_err(SEER_ERR_INVALID_ARG, "drafter '%s': a setting named '%s' exists already", d->name,
                            o->flag);
        if (++n_ext > SEER_SPEC_EXT_MAX)
            return seer_err(SEER_ERR_INVALID_ARG, "drafter '%s': at most %d drafter settings in all", d->name,
                            SEER_SPEC_EXT_MAX);
    }
    seer_spec_kind k = d->kind;
    if (k == SEER_SPEC_NONE)
        for (k = (seer_spec_kind)1; k < SEER_SPEC_KIND_MAX && kind_taken(k); k++)
            ;
    if (k <= SEER_SPEC_NONE || k >= SEER_SPEC_KIND_MAX || kind_taken(k) || n_extra == SEER_SPEC_KIND_MAX)
        return seer_err(SEER_ERR_INVALID_ARG, "no speculation kind free for drafter '%s' (at most %d kinds)",
                        d->name, SEER_SPEC_KIND_MAX);
    extra[n_extra].d = d;
    extra[n_extra++].kind = k;
    if (kind)
        *kind = k;
    return SEER_OK;
}

/* ---- the speculation kinds of seer.h: none, the drafters, auto ------------------------- */

static const char *const AUTO_HELP = "every round the drafter, K and G (or plain) a calibrated cost model "
                                     "predicts fastest";

bool seer_spec_kind_info_at(int i, seer_spec_kind_info *out) {
    if (!out || i < 0)
        return false;
    const seer_drafter_desc *d = i > 0 ? seer_drafter_at(i - 1) : NULL;
    if (i == 0)
        *out = (seer_spec_kind_info){.kind = SEER_SPEC_NONE, .name = "none", .help = "plain decoding"};
    else if (d)
        *out = (seer_spec_kind_info){.kind = kind_at(i - 1), .name = d->name, .help = d->help, .drafter = true,
                                     .needs_draft_model = (d->flags & SEER_DRAFTER_DRAFT_MODEL) != 0,
                                     .tree_base = (d->flags & SEER_DRAFTER_TREE_BASE) != 0,
                                     .hier_base = (d->flags & SEER_DRAFTER_HIER_BASE) != 0,
                                     .draft_weights = (d->flags & SEER_DRAFTER_DRAFT_WEIGHTS) != 0};
    else if (!seer_drafter_at(i - 2)) /* past auto */
        return false;
    else
        *out = (seer_spec_kind_info){.kind = SEER_SPEC_AUTO, .name = "auto", .help = AUTO_HELP};
    return true;
}

seer_status seer_spec_kind_parse(const char *name, seer_spec_kind *out) {
    SEER_CHECK_ARG(out);
    seer_spec_kind_info in;
    for (int i = 0; name && seer_spec_kind_info_at(i, &in); i++)
        if (!strcmp(name, in.name)) {
            *out = in.kind;
            return SEER_OK;
        }
    char list[512];
    size_t n = 0;
    list[0] = 0;
    for (int i = 0; seer_spec_kind_info_at(i, &in) && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", in.name);
    return seer_err(SEER_ERR_INVALID_ARG, "unknown speculation '%s' (%s)", name ? name : "(null)", list);
}

const char *seer_spec_kind_name(seer_spec_kind k) {
    if (k == SEER_SPEC_NONE)
        return "none";
    if (k == SEER_SPEC_AUTO)
        return "auto";
    const seer_drafter_desc *d = seer_drafter_of_kind(k);
    return d ? d->name : "?";
}
