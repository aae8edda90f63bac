/*
 * constrain.c: seer_constraint_*, one generation's matcher state over a compiled grammar and
 * a vocabulary trie, with a ring of the states after each of the last SEER_C_HISTORY tokens so
 * that speculation can take rejected draft tokens back in O(1).
 *
 * Not for: compiling (grammar.c, schema.c, regex.c), the trie walk (mask.c), or how masks
 * enter sampling (src/sample/, src/spec/).
 *
 * The compiled grammar is shared between clones (n choices of one request), and the trie
 * between every constraint made from one (seer_constraint_new_sharing), through reference
 * counts; the states are each constraint's own.
 */
#include "constrain/grammar.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SEER_C_HISTORY 256

typedef struct {
    atomic_int refs;
    seer_vocab_trie *t;
} trie_part;

typedef struct {
    atomic_int refs;
    seer_grammar *g;
    seer_vocab_trie *trie; /* tp's */
    trie_part *tp;         /* shared further: constraints made with seer_constraint_new_sharing */
} shared_part;

typedef struct {
    int n;
    int32_t *path;  /* [n] */
    uint32_t *bits; /* [(V + 31) / 32] */
} mask_entry;

struct seer_constraint {
    shared_part *sh;
    bool failed;                    /* a token was refused: generation must end */
    mask_entry *mc;                 /* masks after paths from the current state (speculation's
                                     * rows), valid until the next accept or rollback */
    int n_mc, cap_mc;
    seer_gset ring[SEER_C_HISTORY]; /* state after accepted token k is ring[k % SEER_C_HISTORY] */
    int pos;                        /* tokens accepted */
    int lo;                         /* oldest pos whose state is still held */
    seer_gset tmp[2];
    seer_mask_scratch scratch;
    unsigned options;               /* SEER_CONSTRAINT_* flags (seer_constraint_set_options) */
};

static void shared_release(shared_part *sh) {
    if (sh && atomic_fetch_sub(&sh->refs, 1) == 1) {
        seer_grammar_free(sh->g);
        if (atomic_fetch_sub(&sh->tp->refs, 1) == 1) {
            seer_vocab_trie_free(sh->tp->t);
            free(sh->tp);
        }
        free(sh);
    }
}

void seer_constraint_free(seer_constraint *c) {
    if (!c)
        return;
    for (int i = 0; i < SEER_C_HISTORY; i++)
        seer_gset_free(&c->ring[i]);
    seer_gset_free(&c->tmp[0]);
    seer_gset_free(&c->tmp[1]);
    seer_mask_scratch_free(&c->scratch);
    for (int i = 0; i < c->cap_mc; i++) {
        free(c->mc[i].path);
        free(c->mc[i].bits);
    }
    free(c->mc);
    shared_release(c->sh);
    free(c);
}

seer_status seer_constraint_grammar_text(seer_constraint_kind kind, const char *text, size_t len,
                                         char **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    if (!text && len)
        return seer_err(SEER_ERR_INVALID_ARG, "constraint: text is NULL");
    switch (kind) {
    case SEER_CONSTRAINT_GRAMMAR: {
        if (len > SEER_G_MAX_TEXT)
            return seer_err(SEER_ERR_INVALID_ARG, "grammar: longer than %d bytes", SEER_G_MAX_TEXT);
        char *s = malloc(len + 1);
        if (!s)
            return seer_err(SEER_ERR_OOM, "constraint: out of memory");
        if (len)
            memcpy(s, text, len);
        s[len] = 0;
        *out = s;
        return SEER_OK;
    }
    case SEER_CONSTRAINT_JSON_SCHEMA:
        return seer_schema_to_grammar(text, len, out);
    case SEER_CONSTRAINT_JSON_OBJECT:
        return seer_json_object_grammar(out);
    case SEER_CONSTRAINT_REGEX:
        return seer_regex_to_grammar(text, len, out);
    }
    return seer_err(SEER_ERR_INVALID_ARG, "constraint: unknown kind %d", (int)kind);
}

/* A constraint over g and the trie of tp (whose reference it takes over; a new tp when NULL,
 * made from t). Frees what it was given on failure. */
static seer_status make(seer_grammar *g, seer_vocab_trie *t, trie_part *tp, seer_constraint **out) {
    seer_constraint *c = calloc(1, sizeof *c);
    shared_part *sh = calloc(1, sizeof *sh);
    if (!tp && (tp = calloc(1, sizeof *tp)) != NULL) {
        atomic_init(&tp->refs, 1);
        tp->t = t;
        t = NULL;
    }
    if (!c || !sh || !tp) {
        free(c);
        free(sh);
        seer_grammar_free(g);
        seer_vocab_trie_free(t);
        if (tp && atomic_fetch_sub(&tp->refs, 1) == 1) {
            seer_vocab_trie_free(tp->t);
            free(tp);
        }
        return seer_err(SEER_ERR_OOM, "constraint: out of memory");
    }
    atomic_init(&sh->refs, 1);
    sh->g = g;
    sh->tp = tp;
    sh->trie = tp->t;
    c->sh = sh;
    const seer_status st = seer_gset_start(g, &c->ring[0]);
    if (st != SEER_OK) {
        seer_constraint_free(c);
        return st;
    }
    *out = c;
    return SEER_OK;
}

static seer_status compile(seer_constraint_kind kind, const char *text, size_t len, seer_grammar **g) {
    char *src = NULL;
    SEER_TRY(seer_constraint_grammar_text(kind, text, len, &src));
    const seer_status st = seer_grammar_parse(src, strlen(src), g);
    free(src);
    return st;
}

seer_status seer_constraint_from_pieces(seer_constraint_kind kind, const char *text, size_t len,
                                        const char *const *pieces, const int *lens, int n_vocab,
                                        const int32_t *eog, int n_eog, seer_constraint **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    seer_grammar *g = NULL;
    SEER_TRY(compile(kind, text, len, &g));
    seer_vocab_trie *t = NULL;
    const seer_status st = seer_vocab_trie_build(pieces, lens, n_vocab, eog, n_eog, &t);
    if (st != SEER_OK) {
        seer_grammar_free(g);
        return st;
    }
    return make(g, t, NULL, out);
}

seer_status seer_constraint_new(const seer_model *model, seer_constraint_kind kind, const char *text,
                                size_t len, seer_constraint **out) {
    SEER_CHECK_ARG(model);
    SEER_CHECK_ARG(out);
    *out = NULL;
    const seer_vocab *v = seer_model_vocab(model);
    const int n = seer_n_vocab(model);
    if (!v || n <= 0)
        return seer_err(SEER_ERR_INVALID_ARG, "constraint: the model has no vocabulary");
    seer_grammar *g = NULL;
    SEER_TRY(compile(kind, text, len, &g));
    const char **pieces = calloc((size_t)n, sizeof *pieces);
    int *lens = calloc((size_t)n, sizeof *lens);
    int32_t *eog = malloc((size_t)n * sizeof *eog);
    int n_eog = 0;
    if (!pieces || !lens || !eog) {
        free(pieces);
        free(lens);
        free(eog);
        seer_grammar_free(g);
        return seer_err(SEER_ERR_OOM, "constraint: out of memory");
    }
    const int nv = seer_vocab_size(v);
    for (int i = 0; i < n; i++) {
        if (i < nv && seer_vocab_is_eog(v, i)) {
            eog[n_eog++] = i;
            continue;
        }
        const int type = i < nv ? seer_vocab_type(v, i) : 0;
        if (i >= nv || type == SEER_TOKEN_CONTROL || type == SEER_TOKEN_UNUSED || type == SEER_TOKEN_UNKNOWN)
            continue; /* padding rows of the output layer and control tokens are never text */
        /* the decoded bytes the token stands for, as detokenizing writes them */
        char buf[1100];
        const int l = seer_vocab_piece(v, i, buf, (int)sizeof buf);
        if (l > 0 && l < (int)sizeof buf) {
            char *p = malloc((size_t)l);
            if (p)
                memcpy(p, buf, (size_t)l);
            pieces[i] = p;
            lens[i] = p ? l : 0;
        }
    }
    seer_vocab_trie *t = NULL;
    seer_status st = seer_vocab_trie_build(pieces, lens, n, eog, n_eog, &t);
    for (int i = 0; i < n; i++)
        free((void *)pieces[i]);
    free(pieces);
    free(lens);
    free(eog);
    if (st != SEER_OK) {
        seer_grammar_free(g);
        return st;
    }
    return make(g, t, NULL, out);
}

seer_status seer_constraint_new_sharing(const seer_constraint *base, seer_constraint_kind kind, const char *text,
                                        size_t len, seer_constraint **out) {
    SEER_CHECK_ARG(base);
    SEER_CHECK_ARG(out);
    *out = NULL;
    seer_grammar *g = NULL;
    SEER_TRY(compile(kind, text, len, &g));
    atomic_fetch_add(&base->sh->tp->refs, 1);
    return make(g, NULL, base->sh->tp, out);
}

seer_status seer_constraint_clone(const seer_constraint *c, seer_constraint **out) {
    SEER_CHECK_ARG(c);
    SEER_CHECK_ARG(out);
    *out = NULL;
    seer_constraint *d = calloc(1, sizeof *d);
    if (!d)
        return seer_err(SEER_ERR_OOM, "constraint: out of memory");
    d->sh = c->sh;
    atomic_fetch_add(&d->sh->refs, 1);
    d->pos = c->pos;
    d->lo = c->lo;
    d->options = c->options;
    for (int k = c->lo; k <= c->pos; k++) {
        const int i = k % SEER_C_HISTORY;
        if (seer_gset_copy(&d->ring[i], &c->ring[i]) != SEER_OK) {
            seer_constraint_free(d);
            return seer_err(SEER_ERR_OOM, "constraint: out of memory");
        }
    }
    *out = d;
    return SEER_OK;
}

int seer_constraint_n_vocab(const seer_constraint *c) {
    return c ? seer_vocab_trie_n_vocab(c->sh->trie) : 0;
}

int seer_constraint_n_accepted(const seer_constraint *c) {
    return c ? c->pos : 0;
}

static const seer_gset *cur(const seer_constraint *c) {
    return &c->ring[c->pos % SEER_C_HISTORY];
}

bool seer_constraint_done(const seer_constraint *c) {
    return c && seer_gset_accepting(cur(c));
}

int seer_constraint_mask(seer_constraint *c, uint32_t *bits) {
    if (!c || !bits) {
        seer_err(SEER_ERR_INVALID_ARG, "seer_constraint_mask: NULL argument");
        return -1;
    }
    const int n = seer_mask_compute(c->sh->g, c->sh->trie, cur(c), bits, &c->scratch);
    if (n < 0)
        seer_err(SEER_ERR_OOM, "constraint: out of memory");
    return n;
}

/* The state after tokens path [n] from the current one, into c->tmp[*which]; false if one
 * is not allowed. An end-of-generation token leaves a state with no stacks. */
static bool walk(seer_constraint *c, const int32_t *path, int n, int *which, seer_status *st) {
    const seer_vocab_trie *t = c->sh->trie;
    const seer_gset *s = cur(c);
    int w = 0;
    *which = -1;
    for (int k = 0; k < n; k++) {
        if (seer_vocab_trie_is_eog(t, path[k])) {
            if (!seer_gset_accepting(s))
                return false;
            c->tmp[w].n_stacks = 0; /* after the end nothing more may come */
            c->tmp[w].n_words = 0;
            s = &c->tmp[w];
            w ^= 1;
            continue;
        }
        int len;
        const char *p = seer_vocab_trie_piece(t, path[k], &len);
        if (!p)
            return false;
        for (int i = 0; i < len; i++) {
            if (!seer_gset_advance(c->sh->g, s, (uint8_t)p[i], &c->tmp[w], st))
                return false;
            s = &c->tmp[w];
            w ^= 1;
        }
    }
    *which = n > 0 ? w ^ 1 : -1;
    return true;
}

static bool step(seer_constraint *c, int32_t token, int *which, seer_status *st) {
    return walk(c, &token, 1, which, st);
}

const uint32_t *seer_constraint_mask_after(seer_constraint *c, const int32_t *path, int n) {
    if (!c || n < 0 || (n && !path))
        return NULL;
    const int V = seer_vocab_trie_n_vocab(c->sh->trie), W = (V + 31) / 32;
    for (int i = 0; i < c->n_mc; i++)
        if (c->mc[i].n == n && (n == 0 || memcmp(c->mc[i].path, path, (size_t)n * sizeof *path) == 0))
            return c->mc[i].bits;
    if (c->n_mc == c->cap_mc) {
        const int cap = c->cap_mc ? 2 * c->cap_mc : 8;
        mask_entry *e = realloc(c->mc, (size_t)cap * sizeof *e);
        if (!e)
            return NULL;
        memset(e + c->cap_mc, 0, (size_t)(cap - c->cap_mc) * sizeof *e);
        c->mc = e;
        c->cap_mc = cap;
    }
    mask_entry *e = &c->mc[c->n_mc];
    int32_t *pp = realloc(e->path, ((size_t)n + 1) * sizeof *pp);
    if (pp)
        e->path = pp;
    if (!e->bits)
        e->bits = malloc((size_t)W * sizeof *e->bits);
    if (!pp || !e->bits)
        return NULL;
    if (n)
        memcpy(e->path, path, (size_t)n * sizeof *path);
    e->n = n;
    int w;
    seer_status st = SEER_OK;
    if (!walk(c, path, n, &w, &st)) {
        if (st != SEER_OK)
            return NULL;
        memset(e->bits, 0, (size_t)W * sizeof *e->bits); /* a path the grammar refuses: nothing */
    } else if (seer_mask_compute(c->sh->g, c->sh->trie, w < 0 ? cur(c) : &c->tmp[w], e->bits,
                                 &c->scratch) < 0) {
        return NULL;
    }
    c->n_mc++;
    return e->bits;
}

const char *seer_constraint_piece(const seer_constraint *c, int32_t id, int *len) {
    return seer_vocab_trie_piece(c->sh->trie, id, len);
}

bool seer_constraint_finished(const seer_constraint *c) {
    return c && (c->failed || cur(c)->n_stacks == 0);
}

bool seer_constraint_allows(seer_constraint *c, int32_t token) {
    int w;
    return c && step(c, token, &w, NULL);
}

seer_status seer_constraint_accept(seer_constraint *c, int32_t token) {
    SEER_CHECK_ARG(c);
    int w;
    seer_status st = SEER_OK;
    if (!step(c, token, &w, &st)) {
        c->failed = true;
        return st != SEER_OK ? st
                             : seer_err(SEER_ERR_INVALID_ARG, "constraint: token %d is not allowed here",
                                        (int)token);
    }
    c->n_mc = 0;
    seer_gset *dst = &c->ring[(c->pos + 1) % SEER_C_HISTORY];
    SEER_TRY(seer_gset_copy(dst, &c->tmp[w]));
    c->pos++;
    if (c->pos - c->lo >= SEER_C_HISTORY)
        c->lo = c->pos - SEER_C_HISTORY + 1;
    return SEER_OK;
}

seer_status seer_constraint_rollback(seer_constraint *c, int n) {
    SEER_CHECK_ARG(c);
    if (n < 0 || c->pos - n < c->lo)
        return seer_err(SEER_ERR_INVALID_ARG, "constraint: cannot take back %d tokens (%d held)", n,
                        c->pos - c->lo);
    c->pos -= n;
    c->n_mc = 0;
    c->failed = false;
    return SEER_OK;
}

void seer_constraint_set_options(seer_constraint *c, unsigned options) {
    if (c)
        c->options = options;
}

unsigned seer_constraint_options(const seer_constraint *c) {
    return c ? c->options : 0;
}

bool seer_constraint_allows_after(seer_constraint *c, const int32_t *path, int n, int32_t token) {
    if (!c || n < 0 || n >= 256 || (n && !path))
        return false;
    int32_t p[256];
    if (n)
        memcpy(p, path, (size_t)n * sizeof *p);
    p[n] = token;
    int w;
    return walk(c, p, n + 1, &w, NULL);
}

int seer_constraint_forced_after(seer_constraint *c, const int32_t *path, int n, seer_forced *out) {
    *out = (seer_forced){.tok = -1};
    if (!c || n < 0 || (n && !path))
        return -1;
    int w;
    seer_status st = SEER_OK;
    if (!walk(c, path, n, &w, &st))
        return st != SEER_OK ? -1 : 0;
    return seer_mask_forced(c->sh->g, c->sh->trie, w < 0 ? cur(c) : &c->tmp[w], &c->scratch, out);
}
