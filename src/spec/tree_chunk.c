/*
 * tree_chunk.c: verification of a tree larger than one forward call (SpecExec's trees of
 * hundreds to thousands of nodes), in calls of at most `rows` rows of the sequence.
 *
 * Nodes go in index order (a parent before its children), cut into calls. The first call
 * holds the pending token and the first nodes, as a whole-tree call would. A later call feeds
 * its nodes with their ancestors that earlier calls computed, again, under the tree mask, and
 * with a view of the sequence that shows its cache up to the pending token and hides every
 * row the earlier calls appended: so each node attends exactly the prefix, the pending token
 * and its ancestors, as in one call, and its logits are the same (a token's output depends
 * only on the slots it sees, up to SEER_INVARIANT_NEW_TOKENS new tokens of a sequence per
 * call). Each node's verified row stays where its own call put it (vslot); settling moves the
 * accepted path's rows behind the pending token and cuts the rest.
 *
 * Greedy sequences call only where the walk goes (walk_calls): the first call holds the top
 * of the tree, and each later call the subtree of the node where the walk left what is
 * verified. Sampled ones verify every node (run_calls). The rule then runs over the rows as
 * for a tree in one call: greedy from the argmax ids, sampling from the logits gathered into
 * g->vlog.
 */
#include "spec/round.h"
#include "spec/spec.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

bool seer_gen_best_first(const seer_spec_params *p) {
    return p->kind == SEER_SPEC_DRAFT && seer_spec_value_int(p, "draft-best-first") > 0;
}

int seer_gen_call_rows(const seer_gen *g) {
    const int TB = g->ctx->params.n_batch_max;
    return TB < SEER_INVARIANT_NEW_TOKENS ? TB : SEER_INVARIANT_NEW_TOKENS;
}

/* Depth of node j of a parent array (1: below the pending token). */
static int depth_of(const int32_t *par, int j) {
    int d = 0;
    for (; j >= 0; j = par[j])
        d++;
    return d;
}

/* The nodes of the call that starts at node j0 (first: with the pending token): nodes j0 ..
 * *j1 - 1, their rows in in[] (nodes and re-fed ancestors). Returns the rows. */
static int plan_call(const int32_t *par, int nd, int j0, bool first, int rows, uint8_t *in, int *j1) {
    memset(in, 0, (size_t)nd);
    int T = first ? 1 : 0, j = j0;
    for (; j < nd; j++) {
        int add = 0;
        for (int a = j; a >= 0; a = par[a])
            add += !in[a];
        if (T + add > rows)
            break;
        for (int a = j; a >= 0; a = par[a])
            in[a] = 1;
        T += add;
    }
    *j1 = j;
    return T;
}

/* Total slots the calls append for a tree of nd nodes. */
static int plan_slots(const int32_t *par, int nd, int rows, uint8_t *in) {
    int total = 0;
    for (int j0 = 0, j1; j0 < nd; j0 = j1) {
        total += plan_call(par, nd, j0, j0 == 0, rows, in, &j1);
        if (j1 == j0)
            return -1; /* a path deeper than a call */
    }
    return total;
}

typedef struct {
    int32_t *tok, *pos, *node, *view, *ids;
    seer_seq_id *sq;
    uint8_t *want, *in, *ver; /* ver [nd]: the node's logits are known */
    float *host; /* [V] */
} chunk_buf;

static void chunk_free(chunk_buf *b) {
    free(b->tok), free(b->pos), free(b->node), free(b->view), free(b->ids), free(b->sq), free(b->want), free(b->in);
    free(b->host), free(b->ver);
}

/* One call over the rows in b->in (nodes, index order; first: the pending token before them):
 * nodes not yet verified (ver) get logits, node j's to ids[j + 1] (greedy) or g->vlog row
 * j + 1 (sampling), its slot to vs[j], and are marked verified; the others are ancestors fed
 * again. Calls after the first see the cache up to the pending token only. */
static seer_status one_call(seer_gen *g, int k, bool amax, bool first, chunk_buf *b) {
    seer_context *c = g->ctx;
    seer_backend *be = g->model->be;
    seer_gen_seq *s = &g->seqs[g->hs[k]];
    const int L = s->n_tokens - 1, nd = g->nd[k], V = g->V;
    const int32_t *par = g->par + (size_t)k * g->G, *d = g->draft + (size_t)k * g->G;
    int32_t *vs = g->vslot + (size_t)k * g->G;
    const int len0 = seer_seq_len(c, s->seq);
    int T = 0;
    if (first) {
        b->tok[T] = s->tokens[L], b->pos[T] = L, b->node[T] = -1, b->want[T] = 1;
        T++;
    }
    for (int j = 0; j < nd; j++) {
        if (!b->in[j])
            continue;
        b->tok[T] = d[j], b->pos[T] = L + depth_of(par, j), b->node[T] = j, b->want[T] = !b->ver[j];
        if (!b->ver[j])
            vs[j] = len0 + T;
        T++;
    }
    if (len0 + T > c->params.n_ctx)
        return seer_err(SEER_ERR_INTERNAL, "a chunked verification past the context (%d + %d rows)", len0, T);
    for (int x = 0; x < T; x++)
        b->sq[x] = s->seq;
    uint8_t *mask = g->mask;
    memset(mask, 0, (size_t)T * T);
    for (int x = 0; x < T; x++)
        for (int y = 0; y < T; y++) {
            if (b->node[y] < 0) { /* the pending token: every row of the first call sees it */
                mask[(size_t)x * T + y] = 1;
                continue;
            }
            for (int a = b->node[x]; a >= 0; a = par[a])
                if (a == b->node[y]) {
                    mask[(size_t)x * T + y] = 1;
                    break;
                }
        }
    seer_status st = SEER_OK;
    if (!first) { /* the prefix and the pending token; the earlier calls' rows hidden */
        seer_view v = {.idx = b->view, .n = L + 1, .n_layers_view = 1, .n_heads_view = 1, .tail_start = len0};
        st = seer_seq_set_view(c, s->seq, &v);
    }
    seer_batch call = {.n_tokens = T, .token = b->tok, .seq = b->sq, .pos = b->pos, .logits = b->want, .mask = mask};
    g->stats.verify_calls++;
    if (st == SEER_OK && amax) {
        st = seer_decode_argmax(c, &call, g->ids);
        for (int x = 0, f = 0; x < T && st == SEER_OK; x++)
            if (b->want[x])
                b->ids[b->node[x] + 1] = g->ids[f++];
    } else if (st == SEER_OK) {
        float *Lg = NULL;
        st = seer_decode_keep(c, &call, &Lg);
        for (int x = 0, f = 0; x < T && st == SEER_OK; x++) {
            if (!b->want[x])
                continue;
            st = be->ops->download(be, b->host, Lg + (size_t)f++ * V, sizeof(float) * V);
            if (st == SEER_OK)
                st = be->ops->upload(be, g->vlog + (size_t)(b->node[x] + 1) * V, b->host, sizeof(float) * V);
        }
    }
    seer_seq_clear_view(c, s->seq);
    for (int x = 0; x < T && st == SEER_OK; x++)
        if (b->node[x] >= 0)
            b->ver[b->node[x]] = 1;
    return st;
}

/* Every node, calls in index order (sampling: the rule reads every row). */
static seer_status run_calls(seer_gen *g, int k, int rows, bool amax, chunk_buf *b) {
    const int nd = g->nd[k];
    const int32_t *par = g->par + (size_t)k * g->G;
    seer_status st = SEER_OK;
    for (int j0 = 0, j1; j0 < nd && st == SEER_OK; j0 = j1) {
        plan_call(par, nd, j0, j0 == 0, rows, b->in, &j1);
        st = one_call(g, k, amax, j0 == 0, b);
    }
    return st;
}

/* Greedy: only the nodes the walk reaches. The first call holds the top of the tree (the
 * likeliest nodes of a best-first tree); where the walk (the child whose token is the target's
 * argmax; a synthetic run: the first child) reaches a node not yet verified, the next call
 * holds that node's subtree. A node that finds no room in the context is dropped from the
 * proposal (its token made -1, which no argmax matches): the rule then stops above it, as
 * plain decoding would emit the same argmax. */
static seer_status walk_calls(seer_gen *g, int k, int rows, chunk_buf *b) {
    seer_context *c = g->ctx;
    const int nd = g->nd[k];
    const int32_t *par = g->par + (size_t)k * g->G;
    int32_t *d = g->draft + (size_t)k * g->G;
    int j1;
    plan_call(par, nd, 0, true, rows, b->in, &j1);
    SEER_TRY(one_call(g, k, true, true, b));
    const bool synth = seer_gen_synthetic(g);
    for (int node = -1;;) {
        int ch = node + 1;
        for (; ch < nd; ch++)
            if (par[ch] == node && d[ch] >= 0 && (synth || d[ch] == b->ids[node + 1]))
                break;
        if (ch == nd)
            return SEER_OK;
        if (!b->ver[ch]) { /* its subtree, in index order, as much as a call takes */
            memset(b->in, 0, (size_t)nd);
            int T = 0;
            for (int j = ch; j < nd; j++) {
                int a = j;
                while (a > ch)
                    a = par[a];
                if (a != ch)
                    continue;
                int add = 0;
                for (a = j; a >= 0; a = par[a])
                    add += !b->in[a];
                if (T + add > rows)
                    break;
                for (a = j; a >= 0; a = par[a])
                    b->in[a] = 1;
                T += add;
            }
            if (T == 0 || seer_seq_len(c, g->seqs[g->hs[k]].seq) + T > c->params.n_ctx) {
                d[ch] = -1; /* no room: dropped */
                continue;
            }
            SEER_TRY(one_call(g, k, true, false, b));
        }
        node = ch;
    }
}

seer_status seer_gen_verify_chunked(seer_gen *g, int k, int rows) {
    seer_context *c = g->ctx;
    seer_backend *be = g->model->be;
    seer_gen_seq *s = &g->seqs[g->hs[k]];
    const int L = s->n_tokens - 1, G = g->G, V = g->V;
    if (!g->vslot || rows < 2 || !g->mask)
        return seer_err(SEER_ERR_INTERNAL, "a tree larger than a call from a generator without best-first trees");
    const bool amax = seer_round_greedy(g, k);
    chunk_buf b = {.tok = seer_malloc_array(rows, sizeof(int32_t)), .pos = seer_malloc_array(rows, sizeof(int32_t)),
                   .node = seer_malloc_array(rows, sizeof(int32_t)), .view = seer_malloc_array((size_t)L + 1, sizeof(int32_t)),
                   .ids = seer_malloc_array((size_t)G + 1, sizeof(int32_t)), .sq = seer_malloc_array(rows, sizeof(seer_seq_id)),
                   .want = malloc(rows), .in = malloc(G), .host = seer_malloc_array(V, sizeof(float)),
                   .ver = calloc(G, 1)};
    if (!b.tok || !b.pos || !b.node || !b.view || !b.ids || !b.sq || !b.want || !b.in || !b.host || !b.ver) {
        chunk_free(&b);
        return seer_err(SEER_ERR_OOM, "out of memory for a chunked verification");
    }
    seer_status st = SEER_OK;
    if (!amax && !g->vlog)
        st = be->ops->alloc(be, ((size_t)G + 1) * V * sizeof(float), (void **)&g->vlog);
    /* the calls append more rows than the tree has (ancestors fed again): where the context
     * has no room for them, the tree is cut to a prefix of its nodes (still a tree); greedy
     * walks drop what finds no room as they go */
    const int room = c->params.n_ctx - L;
    while (st == SEER_OK && !amax && g->nd[k] > 0) {
        const int need = plan_slots(g->par + (size_t)k * G, g->nd[k], rows, b.in);
        if (need >= 0 && need <= room)
            break;
        g->nd[k]--;
    }
    const int len0 = seer_seq_len(c, s->seq);
    for (int i = 0; i <= L; i++)
        b.view[i] = i;
    if (st == SEER_OK)
        st = amax ? walk_calls(g, k, rows, &b) : run_calls(g, k, rows, false, &b);
    g->chunked[k] = true;
    g->row0[k] = 0;
    if (st == SEER_OK)
        st = seer_round_verify(g, k, k + 1, amax ? b.ids : NULL, amax ? NULL : g->vlog);
    if (st != SEER_OK) { /* as a failed call: the sequence's cache as it was */
        seer_seq_clear_view(c, s->seq);
        (void)seer_seq_rewind(c, s->seq, len0);
    }
    chunk_free(&b);
    return st;
}
