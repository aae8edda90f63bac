/*
 * dfa.c: the matcher's stack sets interned as states of a lazily built automaton, with a
 * transition table filled on first use. Token masks walk the vocabulary trie through it, so
 * a byte costs a table lookup once the state and byte have been seen (inside a JSON string the
 * state returns to itself after every character, and the same few states recur token after
 * token). Bounded: at most SEER_DFA_MAX states; past that the automaton starts over empty.
 *
 * Not for: deciding what a byte does (match.c) or walking the trie (mask.c).
 */
#include "constrain/grammar.h"

#include <stdlib.h>
#include <string.h>

void seer_dfa_reset(seer_dfa *d) {
    for (int i = 0; i < d->n; i++)
        seer_gset_free(&d->st[i]);
    d->n = 0;
    d->gen++;
    if (d->tab)
        memset(d->tab, 0xff, (size_t)d->tab_cap * sizeof *d->tab);
}

void seer_dfa_free(seer_dfa *d) {
    seer_dfa_reset(d);
    free(d->st);
    free(d->hash);
    free(d->trans);
    free(d->tab);
    seer_gset_free(&d->tmp);
    memset(d, 0, sizeof *d);
}

static uint32_t hash_of(const seer_gset *s) {
    uint32_t h = 2166136261u ^ (uint32_t)s->n_stacks;
    for (int i = 0; i < s->n_words; i++)
        h = (h ^ s->data[i]) * 16777619u;
    return h;
}

static bool same(const seer_gset *a, const seer_gset *b) {
    return a->n_stacks == b->n_stacks && a->n_words == b->n_words &&
           (a->n_words == 0 || memcmp(a->data, b->data, (size_t)a->n_words * sizeof *a->data) == 0);
}

int seer_dfa_intern(seer_dfa *d, const seer_gset *s) {
    if (!d->tab) {
        d->tab_cap = 2 * SEER_DFA_MAX;
        d->tab = malloc((size_t)d->tab_cap * sizeof *d->tab);
        if (!d->tab)
            return -1;
        memset(d->tab, 0xff, (size_t)d->tab_cap * sizeof *d->tab);
    }
    const uint32_t h = hash_of(s);
    int slot = (int)(h % (uint32_t)d->tab_cap);
    for (; d->tab[slot] >= 0; slot = (slot + 1) % d->tab_cap) {
        const int id = d->tab[slot];
        if (d->hash[id] == h && same(&d->st[id], s))
            return id;
    }
    if (d->n >= SEER_DFA_MAX)
        return -1;
    if (d->n == d->cap) {
        const int cap = d->cap ? 2 * d->cap : 64;
        seer_gset *st = realloc(d->st, (size_t)cap * sizeof *st);
        if (st)
            d->st = st;
        uint32_t *hs = st ? realloc(d->hash, (size_t)cap * sizeof *hs) : NULL;
        if (hs)
            d->hash = hs;
        int32_t *tr = hs ? realloc(d->trans, (size_t)cap * 256 * sizeof *tr) : NULL;
        if (!tr)
            return -1;
        d->trans = tr;
        d->cap = cap;
    }
    const int id = d->n;
    memset(&d->st[id], 0, sizeof d->st[id]);
    if (seer_gset_copy(&d->st[id], s) != SEER_OK) {
        seer_gset_free(&d->st[id]);
        return -1;
    }
    d->hash[id] = h;
    memset(d->trans + (size_t)id * 256, 0xff, 256 * sizeof *d->trans); /* SEER_DFA_UNKNOWN */
    d->tab[slot] = id;
    d->n++;
    return id;
}

int seer_dfa_step(const seer_grammar *g, seer_dfa *d, int id, uint8_t b) {
    int32_t *t = &d->trans[(size_t)id * 256 + b];
    if (*t != SEER_DFA_UNKNOWN)
        return *t;
    seer_status st = SEER_OK;
    if (!seer_gset_advance(g, &d->st[id], b, &d->tmp, &st)) {
        if (st != SEER_OK)
            return -3;
        return *t = SEER_DFA_DEAD;
    }
    const int nid = seer_dfa_intern(d, &d->tmp);
    if (nid < 0)
        return -3;
    d->trans[(size_t)id * 256 + b] = nid; /* interning may have moved trans */
    return nid;
}
