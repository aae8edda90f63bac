/*
 * mask.c: the vocabulary's token byte strings as a trie laid out in preorder, and the token
 * mask of one matcher state: a walk over the trie that advances the matcher by each node's
 * byte from its parent's state and skips a whole subtree as soon as no stack survives its
 * prefix (the layout of XGrammar's and llguidance's token tries: one array pass, the states
 * of the current path kept per depth).
 *
 * Each byte goes through dfa.c's automaton (a table lookup once seen); the plain walk over
 * stack sets is the fallback when the automaton fills up.
 *
 * Not for: the grammar (grammar.c, match.c) or which tokens a request has taken (constrain.c).
 */
#include "constrain/grammar.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

struct seer_vocab_trie {
    int n_vocab;
    int n_nodes;
    int max_depth;
    uint8_t *byte;     /* [n_nodes] the byte on the edge into the node */
    uint16_t *depth;   /* [n_nodes] 1 for children of the root */
    int32_t *skip;     /* [n_nodes] the first node after the node's subtree */
    int32_t *tok_at;   /* [n_nodes] first index into ids of the tokens ending here */
    uint16_t *tok_n;   /* [n_nodes] how many tokens end here */
    int32_t *ids;      /* token ids sorted by their bytes */
    char **piece;      /* [n_vocab] owned copies (NULL: none) */
    int *len;          /* [n_vocab] */
    uint8_t *eog;      /* [n_vocab] */
};

typedef struct {
    const char *p;
    int len;
    int32_t id;
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    const int c = memcmp(x->p, y->p, (size_t)(x->len < y->len ? x->len : y->len));
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void seer_vocab_trie_free(seer_vocab_trie *t) {
    if (!t)
        return;
    if (t->piece)
        for (int i = 0; i < t->n_vocab; i++)
            free(t->piece[i]);
    free(t->piece);
    free(t->len);
    free(t->eog);
    free(t->byte);
    free(t->depth);
    free(t->skip);
    free(t->tok_at);
    free(t->tok_n);
    free(t->ids);
    free(t);
}

/* Tokens longer than this are never allowed (no vocabulary we know of has one). */
#define TRIE_MAX_PIECE 1024

seer_status seer_vocab_trie_build(const char *const *pieces, const int *lens, int n_vocab,
                                  const int32_t *eog, int n_eog, seer_vocab_trie **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    if (n_vocab <= 0 || (!pieces && n_vocab) || !lens || n_eog < 0 || (n_eog && !eog))
        return seer_err(SEER_ERR_INVALID_ARG, "vocab trie: bad arguments");
    seer_vocab_trie *t = calloc(1, sizeof *t);
    if (!t)
        return seer_err(SEER_ERR_OOM, "vocab trie: out of memory");
    t->n_vocab = n_vocab;
    t->piece = calloc((size_t)n_vocab, sizeof *t->piece);
    t->len = calloc((size_t)n_vocab, sizeof *t->len);
    t->eog = calloc((size_t)n_vocab, 1);
    t->ids = malloc((size_t)n_vocab * sizeof *t->ids);
    long total = 0;
    int n_ids = 0;
    bool ok = t->piece && t->len && t->eog && t->ids;
    for (int i = 0; ok && i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab)
            t->eog[eog[i]] = 1;
    for (int i = 0; ok && i < n_vocab; i++) {
        if (t->eog[i] || lens[i] <= 0 || lens[i] > TRIE_MAX_PIECE || !pieces[i])
            continue;
        t->piece[i] = malloc((size_t)lens[i]);
        ok = t->piece[i] != NULL;
        if (ok) {
            memcpy(t->piece[i], pieces[i], (size_t)lens[i]);
            t->len[i] = lens[i];
            t->ids[n_ids++] = i;
            total += lens[i];
        }
    }
    if (ok) {
        entry *e = malloc(((size_t)n_ids + 1) * sizeof *e);
        ok = e != NULL;
        for (int k = 0; ok && k < n_ids; k++)
            e[k] = (entry){t->piece[t->ids[k]], t->len[t->ids[k]], t->ids[k]};
        if (ok) {
            qsort(e, (size_t)n_ids, sizeof *e, cmp_entry);
            for (int k = 0; k < n_ids; k++)
                t->ids[k] = e[k].id;
        }
        free(e);
    }
    if (ok) {
        const size_t cap = (size_t)total + 1;
        t->byte = malloc(cap);
        t->depth = malloc(cap * sizeof *t->depth);
        t->skip = malloc(cap * sizeof *t->skip);
        t->tok_at = malloc(cap * sizeof *t->tok_at);
        t->tok_n = calloc(cap, sizeof *t->tok_n);
        ok = t->byte && t->depth && t->skip && t->tok_at && t->tok_n;
    }
    int32_t path[TRIE_MAX_PIECE + 1]; /* node of each depth on the current path */
    int n = 0, prev = -1;
    for (int k = 0; ok && k < n_ids; k++) {
        const int id = t->ids[k];
        int common = 0;
        if (prev >= 0) {
            const int lp = t->len[prev];
            while (common < lp && common < t->len[id] && t->piece[prev][common] == t->piece[id][common])
                common++;
        }
        /* close the nodes of the previous path below the common prefix */
        for (int d = prev >= 0 ? t->len[prev] : 0; d > common; d--)
            t->skip[path[d]] = n;
        for (int d = common + 1; d <= t->len[id]; d++) {
            t->byte[n] = (uint8_t)t->piece[id][d - 1];
            t->depth[n] = (uint16_t)d;
            t->tok_at[n] = -1;
            path[d] = n++;
            if (d > t->max_depth)
                t->max_depth = d;
        }
        const int node = path[t->len[id]];
        if (t->tok_n[node] == 0)
            t->tok_at[node] = k;
        if (t->tok_n[node] < UINT16_MAX)
            t->tok_n[node]++;
        prev = id;
    }
    for (int d = prev >= 0 ? t->len[prev] : 0; ok && d > 0; d--)
        t->skip[path[d]] = n;
    t->n_nodes = n;
    if (!ok) {
        seer_vocab_trie_free(t);
        return seer_err(SEER_ERR_OOM, "vocab trie: out of memory");
    }
    *out = t;
    return SEER_OK;
}

int seer_vocab_trie_n_vocab(const seer_vocab_trie *t) {
    return t->n_vocab;
}

const char *seer_vocab_trie_piece(const seer_vocab_trie *t, int32_t id, int *len) {
    if (id < 0 || id >= t->n_vocab || !t->piece[id]) {
        *len = 0;
        return NULL;
    }
    *len = t->len[id];
    return t->piece[id];
}

bool seer_vocab_trie_is_eog(const seer_vocab_trie *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

void seer_mask_scratch_free(seer_mask_scratch *m) {
    for (int i = 0; i < m->n_lv; i++)
        seer_gset_free(&m->lv[i]);
    free(m->lv);
    free(m->lvid);
    seer_dfa_free(&m->dfa);
    free(m->cache);
    memset(m, 0, sizeof *m);
}

/* The walk over stack sets (match.c per byte): where the automaton is full. */
static int walk_sets(const seer_grammar *g, const seer_vocab_trie *t, const seer_gset *s, uint32_t *bits,
                     seer_mask_scratch *sc, int count) {
    seer_status st = SEER_OK;
    for (int i = 0; i < t->n_nodes;) {
        const int d = t->depth[i];
        const seer_gset *parent = d == 1 ? s : &sc->lv[d - 1];
        if (!seer_gset_advance(g, parent, t->byte[i], &sc->lv[d], &st)) {
            if (st != SEER_OK)
                return -1;
            i = t->skip[i];
            continue;
        }
        for (int k = 0; k < t->tok_n[i]; k++) {
            const int id = t->ids[t->tok_at[i] + k];
            bits[id >> 5] |= 1u << (id & 31);
            count++;
        }
        i++;
    }
    return count;
}

/* The same walk through the automaton's states; -3 when it filled up on the way. */
static int walk_dfa(const seer_grammar *g, const seer_vocab_trie *t, int id0, uint32_t *bits, seer_mask_scratch *sc,
                    int count) {
    int32_t *lvid = sc->lvid;
    lvid[0] = id0;
    for (int i = 0; i < t->n_nodes;) {
        const int d = t->depth[i];
        const int nid = seer_dfa_step(g, &sc->dfa, lvid[d - 1], t->byte[i]);
        if (nid == -3)
            return -3;
        if (nid == SEER_DFA_DEAD) {
            i = t->skip[i];
            continue;
        }
        lvid[d] = nid;
        for (int k = 0; k < t->tok_n[i]; k++) {
            const int id = t->ids[t->tok_at[i] + k];
            bits[id >> 5] |= 1u << (id & 31);
            count++;
        }
        i++;
    }
    return count;
}

/* Room in sc for a walk's per-depth states; false for memory. */
static bool levels(const seer_vocab_trie *t, seer_mask_scratch *sc) {
    if (sc->n_lv < t->max_depth + 1) {
        seer_gset *lv = realloc(sc->lv, ((size_t)t->max_depth + 1) * sizeof *lv);
        if (!lv)
            return -1;
        memset(lv + sc->n_lv, 0, ((size_t)t->max_depth + 1 - (size_t)sc->n_lv) * sizeof *lv);
        sc->lv = lv;
        int32_t *lvid = realloc(sc->lvid, ((size_t)t->max_depth + 1) * sizeof *lvid);
        if (!lvid)
            return -1;
        sc->lvid = lvid;
        sc->n_lv = t->max_depth + 1;
    }
    return true;
}

/* The bytes of trie node i (a node holding tokens): its first token's piece. */
static const char *node_bytes(const seer_vocab_trie *t, int i) {
    return t->piece[t->ids[t->tok_at[i]]];
}

int seer_mask_forced(const seer_grammar *g, const seer_vocab_trie *t, const seer_gset *s,
                     seer_mask_scratch *sc, seer_forced *out) {
    out->tok = -1;
    out->len = 0;
    out->bytes = NULL;
    if (!levels(t, sc))
        return -1;
    if (seer_gset_accepting(s))
        return 1; /* end-of-generation tokens beside others: the caller's full mask decides */
    if (sc->dfa.n > SEER_DFA_MAX / 2)
        seer_dfa_reset(&sc->dfa);
    const int id0 = seer_dfa_intern(&sc->dfa, s);
    if (id0 < 0)
        return 1;
    int32_t *lvid = sc->lvid;
    lvid[0] = id0;
    /* The tokens that no longer allowed token extends (maximal) spell strings whose common
     * prefix is the forced string; prev waits until the walk leaves its subtree. */
    int prev = -1, n_max = 0, last_max = -1, lcp = 0;
    const char *first = NULL;
    for (int i = 0; i <= t->n_nodes;) {
        const bool end = i == t->n_nodes;
        int nid = 0;
        if (!end) {
            const int d = t->depth[i];
            nid = seer_dfa_step(g, &sc->dfa, lvid[d - 1], t->byte[i]);
            if (nid == -3)
                return 1;
            if (nid == SEER_DFA_DEAD) {
                i = t->skip[i];
                continue;
            }
            lvid[d] = nid;
        }
        if ((end || t->tok_n[i]) && prev >= 0 && (end || i >= t->skip[prev])) { /* prev is maximal */
            const char *b = node_bytes(t, prev);
            if (!first) {
                first = b;
                lcp = t->depth[prev];
            } else {
                int m = 0;
                while (m < lcp && m < t->depth[prev] && first[m] == b[m])
                    m++;
                lcp = m;
            }
            n_max++;
            last_max = prev;
            if (lcp == 0)
                return 0; /* tokens branch at once: nothing forced */
        }
        if (end)
            break;
        if (t->tok_n[i])
            prev = i;
        i++;
    }
    if (!first)
        return 0;
    out->bytes = first;
    out->len = lcp;
    if (n_max == 1) /* every allowed token a prefix of the longest: that one */
        for (int k = 0; k < t->tok_n[last_max]; k++)
            if (t->ids[t->tok_at[last_max] + k] > out->tok)
                out->tok = t->ids[t->tok_at[last_max] + k];
    return 0;
}

int seer_mask_compute(const seer_grammar *g, const seer_vocab_trie *t, const seer_gset *s,
                      uint32_t *bits, seer_mask_scratch *sc) {
    memset(bits, 0, ((size_t)t->n_vocab + 31) / 32 * sizeof *bits);
    if (!levels(t, sc))
        return -1;
    int count = 0;
    if (seer_gset_accepting(s))
        for (int i = 0; i < t->n_vocab; i++)
            if (t->eog[i]) {
                bits[i >> 5] |= 1u << (i & 31);
                count++;
            }
    /* an automaton more than half full starts over, so that a walk rarely fills it */
    if (sc->dfa.n > SEER_DFA_MAX / 2)
        seer_dfa_reset(&sc->dfa);
    const int id0 = seer_dfa_intern(&sc->dfa, s);
    const int words = (t->n_vocab + 31) / 32, slot = id0 >= 0 ? id0 % SEER_MASK_CACHE : 0;
    if (id0 >= 0 && sc->cache && sc->cache_words == words && sc->cache_set[slot] && sc->cache_id[slot] == id0 &&
        sc->cache_gen[slot] == sc->dfa.gen) {
        memcpy(bits, sc->cache + (size_t)slot * words, (size_t)words * sizeof *bits);
        return sc->cache_n[slot];
    }
    if (id0 >= 0) {
        const uint32_t gen = sc->dfa.gen;
        const int n = walk_dfa(g, t, id0, bits, sc, count);
        if (n >= 0 && gen == sc->dfa.gen) { /* kept for the state's next visit */
            if (!sc->cache || sc->cache_words != words) {
                free(sc->cache);
                sc->cache = malloc((size_t)SEER_MASK_CACHE * words * sizeof *sc->cache);
                sc->cache_words = sc->cache ? words : 0;
                memset(sc->cache_set, 0, sizeof sc->cache_set);
            }
            if (sc->cache) {
                memcpy(sc->cache + (size_t)slot * words, bits, (size_t)words * sizeof *bits);
                sc->cache_id[slot] = id0;
                sc->cache_gen[slot] = gen;
                sc->cache_n[slot] = n;
                sc->cache_set[slot] = true;
            }
        }
        if (n != -3)
            return n;
        /* full on the way: start over on the slow walk (the bits so far are a subset) */
        memset(bits, 0, ((size_t)t->n_vocab + 31) / 32 * sizeof *bits);
        seer_dfa_reset(&sc->dfa);
        count = 0;
        if (seer_gset_accepting(s))
            for (int i = 0; i < t->n_vocab; i++)
                if (t->eog[i]) {
                    bits[i >> 5] |= 1u << (i & 31);
                    count++;
                }
    }
    return walk_sets(g, t, s, bits, sc, count);
}
