/*
 * match.c: the byte-level pushdown matcher over a compiled grammar: sets of stacks, advanced
 * one byte at a time (the scheme of llama.cpp's grammar sampler). Every stack's top is a byte
 * set; a rule reference on top is expanded into one stack per alternative at once, so that
 * the next byte is checked against sets only. Duplicate stacks are merged, which keeps
 * ambiguous grammars from multiplying them.
 *
 * Not for: token masks (mask.c) or the per-request history (constrain.c).
 *
 * Bounds: at most SEER_G_MAX_STACKS stacks and SEER_G_MAX_DEPTH elements per stack; a byte
 * whose result would pass either is rejected, so hostile grammars cost bounded work per byte.
 * Expansion ends because grammar.c refuses left recursion.
 */
#include "constrain/grammar.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

void seer_gset_free(seer_gset *s) {
    free(s->data);
    memset(s, 0, sizeof *s);
}

static bool reserve(seer_gset *s, int words) {
    if (s->n_words + words <= s->cap_words)
        return true;
    int cap = s->cap_words ? s->cap_words : 64;
    while (cap < s->n_words + words)
        cap *= 2;
    uint32_t *d = realloc(s->data, (size_t)cap * sizeof *d);
    if (!d)
        return false;
    s->data = d;
    s->cap_words = cap;
    return true;
}

seer_status seer_gset_copy(seer_gset *dst, const seer_gset *src) {
    dst->n_words = 0;
    dst->n_stacks = 0;
    if (!reserve(dst, src->n_words))
        return seer_err(SEER_ERR_OOM, "constraint: out of memory");
    if (src->n_words)
        memcpy(dst->data, src->data, (size_t)src->n_words * sizeof *dst->data);
    dst->n_words = src->n_words;
    dst->n_stacks = src->n_stacks;
    return SEER_OK;
}

typedef struct {
    const seer_grammar *g;
    seer_gset *out;
    int calls;
    bool overflow, oom;
} expander;

static void add_stack(expander *x, const uint32_t *stk, int len) {
    seer_gset *o = x->out;
    for (int w = 0, k = 0; k < o->n_stacks; k++) { /* merge duplicates */
        const int l = (int)o->data[w];
        if (l == len && memcmp(o->data + w + 1, stk, (size_t)len * sizeof *stk) == 0)
            return;
        w += l + 1;
    }
    if (o->n_stacks >= SEER_G_MAX_STACKS) {
        x->overflow = true;
        return;
    }
    if (!reserve(o, len + 1)) {
        x->oom = true;
        return;
    }
    o->data[o->n_words] = (uint32_t)len;
    memcpy(o->data + o->n_words + 1, stk, (size_t)len * sizeof *stk);
    o->n_words += len + 1;
    o->n_stacks++;
}

/* Expands work [len] (top last) until every resulting stack has a set on top. work has room
 * for SEER_G_MAX_DEPTH + 2 entries; entries at index len - 1 and above may be overwritten and
 * are restored before returning. */
static void expand(expander *x, uint32_t *work, int len, int depth) {
    if (len == 0) {
        add_stack(x, work, 0);
        return;
    }
    const seer_grammar *g = x->g;
    const uint32_t top = work[len - 1];
    if (g->kind[top] == SEER_GE_SET) {
        add_stack(x, work, len);
        return;
    }
    /* a chain of expansions is bounded by the rules (no left recursion) plus the stack, and
     * the total work per byte by the call budget */
    if (depth > SEER_G_MAX_DEPTH + 64 || ++x->calls > 64 * SEER_G_MAX_STACKS) {
        x->overflow = true;
        return;
    }
    const uint32_t r = g->val[top];
    for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
        const uint32_t start = g->alt_off[a];
        int l = len - 1;
        if (g->kind[top + 1] != SEER_GE_END)
            work[l++] = top + 1;
        if (g->kind[start] != SEER_GE_END)
            work[l++] = start;
        if (l > SEER_G_MAX_DEPTH)
            x->overflow = true;
        else
            expand(x, work, l, depth + 1);
        work[len - 1] = top;
    }
}

seer_status seer_gset_start(const seer_grammar *g, seer_gset *out) {
    out->n_words = 0;
    out->n_stacks = 0;
    uint32_t *work = malloc((SEER_G_MAX_DEPTH + 2) * sizeof *work);
    if (!work)
        return seer_err(SEER_ERR_OOM, "constraint: out of memory");
    expander x = {.g = g, .out = out};
    for (uint32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        const uint32_t start = g->alt_off[a];
        int l = 0;
        if (g->kind[start] != SEER_GE_END)
            work[l++] = start;
        expand(&x, work, l, 0);
    }
    free(work);
    if (x.oom)
        return seer_err(SEER_ERR_OOM, "constraint: out of memory");
    if (x.overflow || out->n_stacks == 0)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "grammar: its start needs more than %d stacks or a depth above %d",
                        SEER_G_MAX_STACKS, SEER_G_MAX_DEPTH);
    return SEER_OK;
}

bool seer_gset_advance(const seer_grammar *g, const seer_gset *in, uint8_t b, seer_gset *out,
                       seer_status *st) {
    out->n_words = 0;
    out->n_stacks = 0;
    uint32_t work[SEER_G_MAX_DEPTH + 2];
    expander x = {.g = g, .out = out};
    for (int w = 0, k = 0; k < in->n_stacks; k++) {
        const int len = (int)in->data[w];
        const uint32_t *stk = in->data + w + 1;
        w += len + 1;
        if (len == 0)
            continue;
        const uint32_t top = stk[len - 1];
        if (!(g->sets[g->val[top]][b >> 3] >> (b & 7) & 1))
            continue;
        memcpy(work, stk, (size_t)(len - 1) * sizeof *work);
        int l = len - 1;
        if (g->kind[top + 1] != SEER_GE_END)
            work[l++] = top + 1;
        expand(&x, work, l, 0);
        if (x.overflow || x.oom)
            break;
    }
    if (x.oom && st)
        *st = seer_err(SEER_ERR_OOM, "constraint: out of memory");
    if (x.overflow || x.oom) {
        out->n_stacks = 0;
        out->n_words = 0;
        return false;
    }
    return out->n_stacks > 0;
}

bool seer_gset_accepting(const seer_gset *s) {
    for (int w = 0, k = 0; k < s->n_stacks; k++) {
        if (s->data[w] == 0)
            return true;
        w += (int)s->data[w] + 1;
    }
    return false;
}

bool seer_grammar_accepts(const seer_grammar *g, const char *bytes, size_t n, bool complete) {
    seer_gset a = {0}, b = {0};
    bool ok = seer_gset_start(g, &a) == SEER_OK;
    for (size_t i = 0; ok && i < n; i++) {
        ok = seer_gset_advance(g, &a, (uint8_t)bytes[i], &b, NULL);
        seer_gset t = a;
        a = b;
        b = t;
    }
    if (ok && complete)
        ok = seer_gset_accepting(&a);
    seer_gset_free(&a);
    seer_gset_free(&b);
    return ok;
}
