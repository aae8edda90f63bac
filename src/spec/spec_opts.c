/*
 * spec_opts.c: the drafters' settings by name. Each drafter declares its settings in its own
 * file (seer_drafter_desc.options: names, type, range, default, help, and where the value
 * lives); this file enumerates them in registry order (seer_spec_option_at), fills the
 * defaults (seer_spec_default_params) and reads and writes them by name (seer_spec_set,
 * seer_spec_get), so that the CLI's options and the server's fields need no list of their own.
 *
 * Why a setter by name: a drafter keeps its settings in a struct of its own file, which no
 * public header can list, so their values travel in seer_spec_params.ext, set and read by
 * name and copied into the drafter's struct at init (seer_drafter_settings), the settings it
 * reads from another drafter (the views' budget) included. No tool, and no public struct,
 * lists any drafter's settings.
 *
 * Not for: checking settings against each other or against a context (the drafters' init).
 */
#include "spec/drafter.h"
#include "util/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The i-th setting declared in the registry, with its drafter and its ext slot (the
 * settings a drafter reads from another are not counted: they are that one's). */
static const seer_drafter_option *opt_at(int i, const seer_drafter_desc **owner, int *slot) {
    int ext = 0;
    for (int d = 0; seer_settings_owner_at(d); d++) {
        const seer_drafter_desc *dd = seer_settings_owner_at(d);
        for (int j = 0; j < dd->n_options; j++) {
            if (dd->options[j].offset != SEER_DRAFTER_OPT_EXT)
                continue;
            if (i-- == 0) {
                *owner = dd;
                *slot = ext;
                return &dd->options[j];
            }
            ext++;
        }
    }
    return NULL;
}

static const seer_drafter_option *opt_named(const char *name, int *slot) {
    const seer_drafter_desc *d;
    const seer_drafter_option *o;
    for (int i = 0; name && (o = opt_at(i, &d, slot)); i++)
        if (!strcmp(o->o.flag, name) || (o->o.json && !strcmp(o->o.json, name)))
            return o;
    return NULL;
}

bool seer_spec_option_at(int i, seer_spec_option *out) {
    const seer_drafter_desc *d;
    int slot;
    const seer_drafter_option *o = out && i >= 0 ? opt_at(i, &d, &slot) : NULL;
    if (!o)
        return false;
    *out = o->o;
    out->drafter = d->name;
    return true;
}

static void store(seer_spec_params *p, int slot, double v) {
    p->ext[slot] = v;
    p->ext_set |= 1u << slot;
}

static double load(const seer_spec_params *p, const seer_drafter_option *o, int slot) {
    return p->ext_set >> slot & 1 ? p->ext[slot] : o->o.def;
}

void seer_drafter_settings(const seer_drafter_desc *d, const seer_spec_params *p, void *out) {
    for (int j = 0; j < d->n_options; j++) {
        const seer_drafter_option *mine = &d->options[j];
        int slot;
        const seer_drafter_option *o = opt_named(mine->o.flag, &slot);
        if (!o) /* a read setting whose drafter is not registered (refused at registration) */
            continue;
        const double v = load(p, o, slot);
        char *field = (char *)out + mine->own;
        if (o->o.type == SEER_SPEC_OPT_INT || o->o.type == SEER_SPEC_OPT_CHOICE)
            *(int *)field = (int)v;
        else if (o->o.type == SEER_SPEC_OPT_FLOAT)
            *(float *)field = (float)v;
        else
            *(seer_spec_kind *)field = (seer_spec_kind)(int)v;
    }
}

int seer_spec_value_int(const seer_spec_params *p, const char *name) {
    int slot;
    const seer_drafter_option *o = opt_named(name, &slot);
    return o ? (int)load(p, o, slot) : 0;
}

seer_spec_params seer_spec_default_params(void) {
    /* every drafter setting unset: it reads as its declared default */
    return (seer_spec_params){.kind = SEER_SPEC_NONE, .gamma = 4};
}

/* Whether kind k is one of o's choices. */
static bool kind_ok(const seer_drafter_option *o, int k) {
    seer_spec_kind kk;
    for (int i = 0; o->o.choices && o->o.choices[i]; i++)
        if (seer_spec_kind_parse(o->o.choices[i], &kk) == SEER_OK && (int)kk == k)
            return true;
    return false;
}

/* The number of o's choices (CHOICE). */
static int n_choices(const seer_drafter_option *o) {
    int n = 0;
    while (o->o.choices && o->o.choices[n])
        n++;
    return n;
}

/* SEER_ERR_INVALID_ARG naming o's choices, for text that is none of them. */
static seer_status not_a_choice(const seer_drafter_option *o, const char *name, const char *text) {
    char list[256];
    size_t n = 0;
    list[0] = 0;
    for (int i = 0; o->o.choices && o->o.choices[i] && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", o->o.choices[i]);
    return seer_err(SEER_ERR_INVALID_ARG, "%s: '%s' is not one of %s", name, text, list);
}

static seer_status unknown(const char *name) {
    return seer_err(SEER_ERR_INVALID_ARG, "unknown speculation setting '%s'", name ? name : "(null)");
}

seer_status seer_spec_set_num(seer_spec_params *p, const char *name, double v) {
    SEER_CHECK_ARG(p);
    int slot;
    const seer_drafter_option *o = opt_named(name, &slot);
    if (!o)
        return unknown(name);
    if (o->o.type == SEER_SPEC_OPT_KIND) {
        if (v != floor(v) || !kind_ok(o, (int)v))
            return seer_err(SEER_ERR_INVALID_ARG, "%s: kind %g is not one of its choices", name, v);
    } else if (o->o.type == SEER_SPEC_OPT_CHOICE) {
        if (v != floor(v) || !(v >= 0 && v < n_choices(o)))
            return seer_err(SEER_ERR_INVALID_ARG, "%s: %g is not the index of one of its %d choices", name, v,
                            n_choices(o));
    } else if (!(v >= o->o.lo && v <= o->o.hi)) {
        return seer_err(SEER_ERR_INVALID_ARG, "%s: %g is out of range [%g, %g]", name, v, o->o.lo, o->o.hi);
    } else if (o->o.type == SEER_SPEC_OPT_INT && v != floor(v)) {
        return seer_err(SEER_ERR_INVALID_ARG, "%s: %g is not an integer", name, v);
    }
    store(p, slot, v);
    return SEER_OK;
}

seer_status seer_spec_set(seer_spec_params *p, const char *name, const char *text) {
    SEER_CHECK_ARG(p && text);
    int slot;
    const seer_drafter_option *o = opt_named(name, &slot);
    if (!o)
        return unknown(name);
    if (o->o.type == SEER_SPEC_OPT_KIND) {
        seer_spec_kind k;
        if (seer_spec_kind_parse(text, &k) != SEER_OK || !kind_ok(o, k))
            return not_a_choice(o, name, text);
        return seer_spec_set_num(p, name, (double)k);
    }
    if (o->o.type == SEER_SPEC_OPT_CHOICE) {
        for (int i = 0; i < n_choices(o); i++)
            if (!strcmp(text, o->o.choices[i]))
                return seer_spec_set_num(p, name, (double)i);
        return not_a_choice(o, name, text);
    }
    char *end;
    errno = 0;
    double v;
    if (o->o.type == SEER_SPEC_OPT_INT) {
        long long x = strtoll(text, &end, 10);
        v = (double)x;
        if (!*text || *end || errno)
            return seer_err(SEER_ERR_INVALID_ARG, "%s: '%s' is not an integer", name, text);
        if (x < (long long)o->o.lo || x > (long long)o->o.hi)
            return seer_err(SEER_ERR_INVALID_ARG, "%s: %lld is out of range [%lld, %lld]", name, x,
                            (long long)o->o.lo, (long long)o->o.hi);
    } else {
        v = strtod(text, &end);
        if (!*text || *end || errno || !isfinite(v))
            return seer_err(SEER_ERR_INVALID_ARG, "%s: '%s' is not a number", name, text);
    }
    return seer_spec_set_num(p, name, v);
}

seer_status seer_spec_get(const seer_spec_params *p, const char *name, double *v) {
    SEER_CHECK_ARG(p && v);
    int slot;
    const seer_drafter_option *o = opt_named(name, &slot);
    if (!o)
        return unknown(name);
    *v = load(p, o, slot);
    return SEER_OK;
}
