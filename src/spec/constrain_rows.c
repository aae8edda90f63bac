/*
 * constrain_rows.c: structured output inside speculation. Every sample row of a constrained
 * sequence, target and drafter alike, carries the constraint's mask after the tokens on its
 * path (seer_sample_row.mask): p and q are transformed the same way, so the acceptance rule
 * stays exact and greedy output equals constrained greedy decoding. Proposals are trimmed to
 * allowed tokens, and chains are extended by forced tokens (jump-forward: what the grammar
 * forces, forced_after below, is drafted without a draft model's call; the target verifies
 * it in the same call as the other drafts), and after a forced run by n-gram's lookup again.
 *
 * Not for: the grammar or masks themselves (src/constrain/), the acceptance rule (verify.c).
 */
#include "constrain/grammar.h"
#include "spec/spec.h"

#include <string.h>

/* Tokens on the path from the root to node u (tok/parent), root first, into out [<= 256];
 * returns their count, -1 if deeper than that. */
static int node_path(const int32_t *tok, const int32_t *parent, int u, int32_t *out) {
    int n = 0;
    for (int j = u; j >= 0; j = parent[j])
        if (++n > 256)
            return -1;
    int i = n;
    for (int j = u; j >= 0; j = parent[j])
        out[--i] = tok[j];
    return n;
}

const uint32_t *seer_spec_row_mask(seer_constraint *con, const int32_t *tok, const int32_t *parent, int u) {
    int32_t path[256];
    const int n = u < 0 ? 0 : node_path(tok, parent, u, path);
    return n < 0 ? NULL : seer_constraint_mask_after(con, path, n);
}

static bool bit(const uint32_t *m, int32_t t) {
    return m[t >> 5] >> (t & 31) & 1;
}

/* The token mask m [V] forces: its only allowed token, or, where every allowed token spells
 * the same bytes (SentencePiece's "0" beside its byte-fallback <0x30>), the highest id of
 * them (byte-fallback tokens come first, and a model writes the piece). -1: nothing forced. */
static int32_t forced_token(const seer_constraint *con, const uint32_t *m, int V) {
    int32_t found = -1;
    const char *bytes = NULL;
    int len = 0;
    for (int w = 0; w < (V + 31) / 32; w++) {
        for (uint32_t x = m[w]; x; x &= x - 1) {
            const int32_t t = w * 32 + __builtin_ctz(x);
            int l;
            const char *p = seer_constraint_piece(con, t, &l);
            if (found >= 0 && (!p || !bytes || l != len || memcmp(p, bytes, (size_t)l) != 0))
                return -1;
            found = t, bytes = p, len = l;
        }
    }
    return found;
}

/* Whether token t may follow node u's path: the row's mask where the masks are computed
 * before the call (or one is kept already), else a walk over the path's bytes, which leaves
 * the mask to be computed while the forward call runs (mask_ahead.c). */
static bool allowed(seer_constraint *con, const int32_t *tok, const int32_t *parent, int u, int32_t t) {
    int32_t path[256];
    const int n = u < 0 ? 0 : node_path(tok, parent, u, path);
    if (n < 0)
        return false;
    if (seer_constraint_options(con) & SEER_CONSTRAINT_MASKS_BEFORE_CALL) {
        const uint32_t *m = seer_constraint_mask_after(con, path, n);
        return m && bit(m, t);
    }
    return seer_constraint_allows_after(con, path, n, t);
}

/* Up to cap tokens the grammar forces after node u's path, into out; returns their count.
 * Where every allowed token is a prefix of the longest, that one (seer_mask_forced; where
 * the walk cannot tell, forced_token's rule over the row's mask). Where the allowed tokens
 * part only after a common string (a key's bytes, then its closing quote, where a token may
 * run on into the optional whitespace), that string as the model's tokenizer writes it,
 * less its last token, which may merge with what comes after: the model writes "title"
 * and then "\":", not "title\"". Drafts, so a guess that misses costs only the tokens after
 * it; each one is checked against the grammar. */
static int forced_after(seer_gen *g, seer_constraint *con, const int32_t *tok, const int32_t *parent, int u,
                        int32_t *out, int cap) {
    int32_t path[256];
    const int n = u < 0 ? 0 : node_path(tok, parent, u, path);
    if (n < 0 || cap <= 0)
        return 0;
    seer_forced f;
    const int r = seer_constraint_forced_after(con, path, n, &f);
    if (r < 0)
        return 0;
    if (r == 1) {
        const uint32_t *mask = seer_constraint_mask_after(con, path, n);
        out[0] = mask ? forced_token(con, mask, g->V) : -1;
        return out[0] >= 0;
    }
    if (f.tok >= 0) {
        out[0] = f.tok;
        return 1;
    }
    if (f.len == 0)
        return 0;
    int32_t ids[64];
    int nt = 0;
    if (seer_tokenize(g->model, f.bytes, (size_t)f.len, false, false, ids, 64, &nt) != SEER_OK || nt > 64)
        return 0; /* a string cut inside a character, or too long to matter */
    int m = 0, off = 0;
    for (int k = 0; k < nt - 1 && m < cap; k++) {
        int l;
        const char *p = seer_constraint_piece(con, ids[k], &l);
        /* the tokenizer's own spelling (SentencePiece's leading space) is not the string's */
        if (!p || l <= 0 || off + l > f.len || memcmp(p, f.bytes + off, (size_t)l) != 0)
            break;
        path[n + m] = ids[k];
        if (n + m + 1 > 255 || !seer_constraint_allows_after(con, path, n + m, ids[k]))
            break;
        off += l;
        out[m++] = ids[k];
    }
    return m;
}

/* Drops refused nodes (and what hangs below them) of entry k's one-hot proposal, keeping
 * breadth-first order. */
static void trim(seer_gen *g, int k, seer_gen_seq *s) {
    int32_t *tok = g->draft + (size_t)k * g->G, *par = g->par + (size_t)k * g->G;
    int32_t map[1024];
    if (g->nd[k] > 1024)
        return;
    int m = 0;
    for (int j = 0; j < g->nd[k]; j++) {
        map[j] = -1;
        if (par[j] >= 0 && map[par[j]] < 0)
            continue;
        if (!allowed(s->con, tok, par, par[j], tok[j]))
            continue;
        /* written in place: m <= j, and a parent was placed before its child */
        const int32_t p = par[j] >= 0 ? map[par[j]] : -1;
        tok[m] = tok[j];
        par[m] = p;
        map[j] = m++;
    }
    g->nd[k] = m;
}

/* Appends to entry k's chain the tokens the grammar forces, up to limit nodes. */
static void extend_forced(seer_gen *g, int k, seer_gen_seq *s, int limit) {
    int32_t *tok = g->draft + (size_t)k * g->G, *par = g->par + (size_t)k * g->G;
    int32_t run[64];
    while (g->nd[k] < limit) {
        const int room = limit - g->nd[k];
        const int m = forced_after(g, s->con, tok, par, g->nd[k] - 1, run, room < 64 ? room : 64);
        if (m == 0)
            break;
        for (int j = 0; j < m; j++) {
            tok[g->nd[k]] = run[j];
            par[g->nd[k]] = g->nd[k] - 1;
            g->nd[k]++;
        }
    }
}

/* Appends to entry k's chain n-gram's proposal after the sequence and the chain so far (the
 * chain staged after the sequence's tokens, where rows read staged tokens), the allowed part
 * of it; whether any was appended. */
static bool extend_ngram(seer_gen *g, int k, seer_gen_seq *s, int limit) {
    int32_t *tok = g->draft + (size_t)k * g->G, *par = g->par + (size_t)k * g->G;
    const int nd = g->nd[k];
    if (s->n_tokens + nd > s->cap || nd > 255)
        return false;
    memcpy(s->tokens + s->n_tokens, tok, sizeof(int32_t) * (size_t)nd);
    int32_t more[64];
    const int room = limit - nd < 64 ? limit - nd : 64;
    const int m = seer_drafter_ngram_more(g->dimpl, s->tokens, s->n_tokens + nd, room, more);
    int a = 0;
    for (; a < m && nd + a < 255; a++) {
        if (!seer_constraint_allows_after(s->con, tok, nd + a, more[a]))
            break;
        tok[nd + a] = more[a];
        par[nd + a] = nd + a - 1;
    }
    g->nd[k] = nd + a;
    return a > 0;
}

seer_status seer_gen_constrain_proposals(seer_gen *g, int n) {
    for (int k = 0; k < n; k++) {
        seer_gen_seq *s = &g->seqs[g->hs[k]];
        if (!s->con || g->gam[k] <= 0)
            continue;
        /* one-hot proposals (n-gram) know nothing of the grammar; a drafter with q drew from
         * masked rows, and its node numbering is its own state (a draft model's cache), so its
         * proposal is left as it is: a refused node is rejected like any other */
        const bool greedy = !(s->sp.temperature > 0);
        if (g->onehot[k])
            trim(g, k, s);
        else if (!greedy)
            continue; /* sampled with q: an appended node would need its q row */
        if (!seer_gen_is_chain(g, k) || (seer_constraint_options(s->con) & SEER_CONSTRAINT_NO_FORCED_DRAFTS))
            continue;
        const int limit = g->gam[k] < g->dl[k] ? g->gam[k] : g->dl[k];
        for (;;) {
            const int nd0 = g->nd[k];
            extend_forced(g, k, s, limit);
            /* after a forced run, n-gram again: its lookup over the sequence and the chain */
            if (g->nd[k] == nd0 || g->nd[k] >= limit || g->dops != &seer_drafter_ngram || !g->onehot[k] ||
                !extend_ngram(g, k, s, limit))
                break;
        }
    }
    return SEER_OK;
}
