/*
 * draft_self.c: self-speculation: the target model drafts for itself while attending to a
 * sparse view of its own KV cache (no copy: a list of slots per layer and KV head).
 *
 *   streaming (MagicDec / StreamingLLM): the first `sinks` slots + the most recent
 *     budget - sinks slots (+ the tokens drafted this round, which are always recent);
 *   retrieval (TriForce): the cache is cut into chunks; a chunk's summary is the mean of its
 *     keys; per layer and KV head, chunk 0 plus the chunks with the highest q . mean_key
 *     (summed over the group's query heads) fill budget - recent, and the last `recent` =
 *     budget / 4 slots are kept. Built after prefill from the last prompt query; rebuilt
 *     every refresh_every rounds or when acceptance falls below refresh_below, from the
 *     query of the pending token's first draft step;
 *   snapkv (MagicDec's SnapKV drafts): at prefill the last `window` prompt queries vote:
 *     softmax attention summed over the window and the group's query heads, average-pooled
 *     over `kernel` slots; the top budget - window positions per layer and KV head plus the
 *     window itself. Fixed after prefill; generated tokens stay visible.
 *
 * The draft writes its KV for drafted slots into the cache; the verification pass rewrites
 * them with full attention, so after rollback the cache holds only exact target KV.
 * When budget covers the whole cache the view is the full view: the draft is the target.
 */
#include "spec/spec.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *sel;  /* [n_layers][Hkv][n_sel] ascending slots, or NULL */
    int n_sel;
    int sel_end;   /* the selection covers slots < sel_end */
    int tail_keep; /* recent slots always visible (retrieval) */
    int snap_tail; /* snapkv: first slot of the window (everything after is visible) */
    bool refresh;  /* rebuild the retrieval selection this round */
    float *qcap;   /* [n_layers][H*Dh] captured query for a rebuild */
} self_seq;

typedef struct {
    self_seq *ss;  /* [n_seq_max] */
    int32_t *view; /* scratch for streaming views */
    float *qbuf;   /* [n_layers][B][H*Dh] captured queries of one call */
} self_impl;

static seer_status self_init(seer_gen *g, void **out) {
    self_impl *im = calloc(1, sizeof *im);
    const seer_model_info *in = &g->model->info;
    int B = g->ctx->params.n_seq_max;
    if (im) {
        im->ss = calloc(B, sizeof *im->ss);
        im->view = seer_malloc_array((size_t)g->spec.budget + 1, sizeof(int32_t));
        im->qbuf = seer_malloc_array((size_t)in->n_layers * B * in->n_heads * in->head_dim, sizeof(float));
    }
    if (!im || !im->ss || !im->view || !im->qbuf) {
        if (im)
            free(im->ss), free(im->view), free(im->qbuf);
        free(im);
        return seer_err(SEER_ERR_OOM, "out of memory for the self-draft");
    }
    *out = im;
    return SEER_OK;
}

static void self_seq_clear(self_seq *s) {
    free(s->sel);
    free(s->qcap);
    memset(s, 0, sizeof *s);
}

static void self_free(seer_gen *g, void *impl) {
    self_impl *im = impl;
    for (int i = 0; i < g->ctx->params.n_seq_max; i++)
        self_seq_clear(&im->ss[i]);
    free(im->ss), free(im->view), free(im->qbuf);
    free(im);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Indices of the k largest scores among n (ties: lower index), written ascending. */
static void top_k_sorted(const float *score, int n, int k, int32_t *out, int32_t *scratch) {
    for (int i = 0; i < n; i++)
        scratch[i] = i;
    /* partial selection sort is O(n k); k and n are chunk counts or prompt lengths of the
     * CPU reference, so a full sort by score is simpler and fast enough */
    for (int i = 0; i < k; i++) {
        int best = i;
        for (int j = i + 1; j < n; j++) {
            float a = score[scratch[j]], b = score[scratch[best]];
            if (a > b || (a == b && scratch[j] < scratch[best]))
                best = j;
        }
        int32_t t = scratch[i];
        scratch[i] = scratch[best];
        scratch[best] = t;
    }
    memcpy(out, scratch, sizeof(int32_t) * k);
    qsort(out, k, sizeof(int32_t), cmp_i32);
}

/* TriForce selection over slots [0, L) from queries q [n_layers][H*Dh]. */
static seer_status build_retrieval(seer_gen *g, int h, const float *q, int L) {
    self_impl *im = g->dimpl;
    self_seq *ss = &im->ss[h];
    const seer_model_info *in = &g->model->info;
    const int C = g->spec.chunk, K = g->spec.budget;
    const int Hkv = in->n_kv_heads, Dh = in->head_dim, grp = in->n_heads / Hkv, kvd = Hkv * Dh;
    int recent = K / 4 > C ? K / 4 : C;
    int n_chunks = L / C, n_pick = (K - recent) / C;
    if (n_pick < 1)
        n_pick = 1;
    if (n_pick > n_chunks)
        n_pick = n_chunks;
    free(ss->sel);
    ss->sel = NULL;
    ss->tail_keep = recent;
    ss->sel_end = L;
    if (n_chunks == 0)
        return SEER_OK;
    ss->n_sel = n_pick * C;
    ss->sel = seer_malloc_array((size_t)in->n_layers * Hkv * ss->n_sel, sizeof(int32_t));
    float *keys = seer_malloc_array((size_t)n_chunks * C * kvd, sizeof(float));
    float *score = seer_malloc_array(n_chunks, sizeof(float));
    int32_t *pick = seer_malloc_array(n_chunks, sizeof(int32_t)), *scr = seer_malloc_array(n_chunks, sizeof(int32_t));
    double *mean = seer_malloc_array(Dh, sizeof(double));
    seer_status st = ss->sel && keys && score && pick && scr && mean ? SEER_OK
                                                                     : seer_err(SEER_ERR_OOM, "out of memory for retrieval selection");
    for (int l = 0; l < in->n_layers && st == SEER_OK; l++) {
        st = seer_context_read_kv(g->ctx, g->seqs[h].seq, l, 0, 0, n_chunks * C, keys);
        for (int kh = 0; kh < Hkv && st == SEER_OK; kh++) {
            for (int c = 0; c < n_chunks; c++) {
                for (int e = 0; e < Dh; e++)
                    mean[e] = 0;
                for (int t = 0; t < C; t++)
                    for (int e = 0; e < Dh; e++)
                        mean[e] += keys[((size_t)c * C + t) * kvd + kh * Dh + e];
                double sc = 0;
                for (int qh = kh * grp; qh < (kh + 1) * grp; qh++)
                    for (int e = 0; e < Dh; e++)
                        sc += q[(size_t)l * in->n_heads * Dh + qh * Dh + e] * mean[e] / C;
                score[c] = c == 0 ? INFINITY : (float)sc; /* chunk 0 holds the sinks */
            }
            top_k_sorted(score, n_chunks, n_pick, pick, scr);
            int32_t *row = ss->sel + ((size_t)l * Hkv + kh) * ss->n_sel;
            for (int k = 0; k < n_pick; k++)
                for (int t = 0; t < C; t++)
                    row[k * C + t] = pick[k] * C + t;
        }
    }
    free(keys), free(score), free(pick), free(scr), free(mean);
    return st;
}

/* SnapKV selection at prefill from the window's queries q [n_layers][W][H*Dh]. */
static seer_status build_snapkv(seer_gen *g, int h, const float *q, int W) {
    self_impl *im = g->dimpl;
    self_seq *ss = &im->ss[h];
    const seer_model_info *in = &g->model->info;
    const int n = g->seqs[h].n_prompt, K = g->spec.budget, ker = g->spec.snap_kernel;
    const int H = in->n_heads, Hkv = in->n_kv_heads, Dh = in->head_dim, grp = H / Hkv, kvd = Hkv * Dh;
    ss->snap_tail = n - W;
    int keep = K - W, pool = n - W;
    if (keep <= 0 || pool <= keep) { /* everything fits: full view */
        ss->snap_tail = 0;
        return SEER_OK;
    }
    ss->n_sel = keep;
    ss->sel = seer_malloc_array((size_t)in->n_layers * Hkv * keep, sizeof(int32_t));
    float *keys = seer_malloc_array((size_t)n * kvd, sizeof(float));
    float *vote = seer_malloc_array(pool, sizeof(float)), *pooled = seer_malloc_array(pool, sizeof(float));
    float *att = seer_malloc_array(n, sizeof(float));
    int32_t *scr = seer_malloc_array(pool, sizeof(int32_t));
    seer_status st = ss->sel && keys && vote && pooled && att && scr ? SEER_OK
                                                                     : seer_err(SEER_ERR_OOM, "out of memory for SnapKV selection");
    const float scale = 1.f / sqrtf((float)Dh);
    for (int l = 0; l < in->n_layers && st == SEER_OK; l++) {
        st = seer_context_read_kv(g->ctx, g->seqs[h].seq, l, 0, 0, n, keys);
        for (int kh = 0; kh < Hkv && st == SEER_OK; kh++) {
            memset(vote, 0, sizeof(float) * pool);
            for (int w = 0; w < W; w++) {
                int qpos = n - W + w; /* attends causally to [0, qpos] */
                for (int qh = kh * grp; qh < (kh + 1) * grp; qh++) {
                    const float *qv = q + (((size_t)l * W + w) * H + qh) * Dh;
                    float mx = -INFINITY;
                    for (int s = 0; s <= qpos; s++) {
                        float d = 0;
                        for (int e = 0; e < Dh; e++)
                            d += qv[e] * keys[(size_t)s * kvd + kh * Dh + e];
                        att[s] = d * scale;
                        mx = att[s] > mx ? att[s] : mx;
                    }
                    double sum = 0;
                    for (int s = 0; s <= qpos; s++)
                        sum += att[s] = expf(att[s] - mx);
                    for (int s = 0; s < pool; s++)
                        vote[s] += (float)(att[s] / sum);
                }
            }
            for (int s = 0; s < pool; s++) {
                double a = 0;
                int lo = s - ker / 2 < 0 ? 0 : s - ker / 2, hi = s + ker / 2 >= pool ? pool - 1 : s + ker / 2;
                for (int t = lo; t <= hi; t++)
                    a += vote[t];
                pooled[s] = (float)(a / ker);
            }
            top_k_sorted(pooled, pool, keep, ss->sel + ((size_t)l * Hkv + kh) * keep, scr);
        }
    }
    free(keys), free(vote), free(pooled), free(att), free(scr);
    return st;
}

static int self_prefill_q_rows(seer_gen *g, void *impl, int n_prompt) {
    if (g->spec.kind == SEER_SPEC_SNAPKV)
        return g->spec.snap_window < n_prompt ? g->spec.snap_window : n_prompt;
    if (g->spec.kind == SEER_SPEC_RETRIEVAL)
        return 1;
    return 0;
}

static seer_status self_prefill_q(seer_gen *g, void *impl, int h, const float *q, int rows) {
    if (g->spec.kind == SEER_SPEC_SNAPKV)
        return build_snapkv(g, h, q, rows);
    return build_retrieval(g, h, q, g->seqs[h].n_prompt);
}

static seer_status self_seq_added(seer_gen *g, void *impl, int h) { return SEER_OK; }

static void self_seq_released(seer_gen *g, void *impl, int h) {
    self_seq_clear(&((self_impl *)impl)->ss[h]);
}

/* A view of the first `sinks` slots and the most recent K - sinks of L. */
static void sinks_and_recent(self_impl *im, seer_view *v, int sinks, int L, int K) {
    for (int i = 0; i < sinks; i++)
        im->view[i] = i;
    v->idx = im->view;
    v->n = sinks;
    v->tail_start = L - (K - sinks);
}

/* Sets the draft view of handle h whose cache holds L slots. */
static seer_status set_view(seer_gen *g, self_impl *im, int h, int L) {
    const seer_gen_seq *s = &g->seqs[h];
    const self_seq *ss = &im->ss[h];
    const int K = g->spec.budget;
    const seer_model_info *in = &g->model->info;
    if (L <= K) {
        seer_seq_clear_view(g->ctx, s->seq);
        return SEER_OK;
    }
    seer_view v = {.n_layers_view = 1, .n_heads_view = 1};
    switch (g->spec.kind) {
    case SEER_SPEC_STREAMING:
        sinks_and_recent(im, &v, g->spec.sinks < L ? g->spec.sinks : L, L, K);
        break;
    case SEER_SPEC_RETRIEVAL:
        if (!ss->sel) { /* nothing selected yet (short prompt): chunk 0 + recent slots */
            sinks_and_recent(im, &v, g->spec.chunk < K ? g->spec.chunk : K / 2, L, K);
            break;
        }
        v.idx = ss->sel;
        v.n = ss->n_sel;
        v.n_layers_view = in->n_layers;
        v.n_heads_view = in->n_kv_heads;
        v.tail_start = L - ss->tail_keep > 0 ? L - ss->tail_keep : 0;
        break;
    default: /* snapkv */
        if (!ss->sel) {
            seer_seq_clear_view(g->ctx, s->seq);
            return SEER_OK;
        }
        v.idx = ss->sel;
        v.n = ss->n_sel;
        v.n_layers_view = in->n_layers;
        v.n_heads_view = in->n_kv_heads;
        v.tail_start = ss->snap_tail;
        break;
    }
    return seer_seq_set_view(g->ctx, s->seq, &v);
}

static seer_status self_propose(seer_gen *g, void *impl, int n, const int *hs, const int *gam,
                                int32_t *draft, float *q, bool *onehot, int *nd) {
    self_impl *im = impl;
    seer_context *c = g->ctx;
    const seer_model_info *in = &g->model->info;
    const size_t qd = (size_t)in->n_heads * in->head_dim;
    seer_status st = SEER_OK;
    seer_seq_id dseq[n > 0 ? n : 1];
    uint8_t cap0[n > 0 ? n : 1];
    int n_cap = 0;
    for (int i = 0; i < n && st == SEER_OK; i++) {
        dseq[i] = g->seqs[hs[i]].seq;
        cap0[i] = gam[i] > 0 && im->ss[hs[i]].refresh;
        st = set_view(g, im, hs[i], g->seqs[hs[i]].n_tokens - 1);
    }
    if (st == SEER_OK)
        st = seer_gen_expand(g, c, n, hs, dseq, cap0, im->qbuf, q, NULL);
    for (int i = 0; i < n; i++)
        n_cap += cap0[i];
    /* keep the captured queries for the rebuild in self_verified (flagged rows in order) */
    for (int i = 0, k = 0; i < n && st == SEER_OK && n_cap; i++) {
        if (!cap0[i])
            continue;
        self_seq *ss = &im->ss[hs[i]];
        if (!ss->qcap)
            ss->qcap = seer_malloc_array((size_t)in->n_layers * qd, sizeof(float));
        if (!ss->qcap) {
            st = seer_err(SEER_ERR_OOM, "out of memory");
            break;
        }
        for (int l = 0; l < in->n_layers; l++)
            memcpy(ss->qcap + l * qd, im->qbuf + ((size_t)l * n_cap + k) * qd, qd * sizeof(float));
        k++;
    }
    for (int i = 0; i < n; i++) {
        const seer_gen_seq *s = &g->seqs[hs[i]];
        seer_seq_clear_view(c, s->seq);
        seer_status r = seer_seq_rewind(c, s->seq, s->n_tokens - 1);
        if (st == SEER_OK)
            st = r;
        onehot[i] = false;
    }
    return st;
}

static seer_status self_verified(seer_gen *g, void *impl, int h, int n_acc, int nd) {
    self_impl *im = impl;
    self_seq *ss = &im->ss[h];
    seer_gen_seq *s = &g->seqs[h];
    if (g->spec.kind != SEER_SPEC_RETRIEVAL)
        return SEER_OK;
    if (ss->refresh && ss->qcap) { /* the query was captured this round: rebuild now */
        ss->refresh = false;
        s->rounds = 0;
        SEER_TRY(build_retrieval(g, h, ss->qcap, s->n_tokens - 1));
    }
    bool due = (!ss->sel && s->n_tokens - 1 > g->spec.budget) || (g->spec.refresh_every > 0 && s->rounds >= g->spec.refresh_every) ||
               (g->spec.refresh_below > 0 && s->accept_avg < g->spec.refresh_below);
    if (due) {
        ss->refresh = true;
        s->accept_avg = 1.f; /* fresh state: judge the new selection on its own rounds */
    }
    return SEER_OK;
}

const seer_drafter_ops seer_drafter_self = {
    .name = "self",
    .init = self_init,
    .free = self_free,
    .seq_added = self_seq_added,
    .seq_released = self_seq_released,
    .propose = self_propose,
    .verified = self_verified,
    .prefill_q_rows = self_prefill_q_rows,
    .prefill_q = self_prefill_q,
};
