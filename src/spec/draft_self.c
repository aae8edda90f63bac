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
#include "spec/drafter.h"
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

/* The views' settings (STREAMING_OPTS, RETRIEVAL_OPTS and SNAPKV_OPTS below), filled at init
 * from the options of the view drafted. */
typedef struct {
    int budget, sinks, chunk, refresh_every, snap_window, snap_kernel;
    float refresh_below;
} self_settings;

extern const seer_drafter_desc seer_drafter_streaming_desc, seer_drafter_retrieval_desc, seer_drafter_snapkv_desc;

typedef struct {
    seer_spec_kind kind; /* streaming, retrieval or snapkv */
    self_settings set;   /* the view's settings (sinks: at most the budget) */
    bool draft_weights;
    seer_context *ctx;   /* the target's: the draft reads its cache */
    const seer_model_info *in;
    int n_seq_max;
    self_seq *ss;  /* [n_seq_max] */
    int32_t *view; /* scratch for streaming views */
    float *qbuf;   /* [n_layers][B][H*Dh] captured queries of one call */
} self_impl;

/* The settings of view kind from p, checked; the ones the view does not read stay 0. */
static seer_status self_settings_of(seer_spec_kind kind, const seer_spec_params *p, int n_batch_max,
                                    self_settings *own) {
    *own = (self_settings){0};
    const seer_drafter_desc *d = kind == SEER_SPEC_RETRIEVAL ? &seer_drafter_retrieval_desc
                                 : kind == SEER_SPEC_SNAPKV  ? &seer_drafter_snapkv_desc
                                                             : &seer_drafter_streaming_desc;
    seer_drafter_settings(d, p, own);
    if (own->budget < 1)
        return seer_err(SEER_ERR_INVALID_ARG, "spec budget %d must be positive", own->budget);
    if (own->sinks < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "spec sinks %d is negative", own->sinks);
    if (kind == SEER_SPEC_RETRIEVAL && (own->chunk < 1 || own->chunk > 4096))
        return seer_err(SEER_ERR_INVALID_ARG, "spec chunk %d is out of range [1, 4096]", own->chunk);
    if (kind == SEER_SPEC_RETRIEVAL &&
        (own->refresh_every < 0 || !(own->refresh_below >= 0 && own->refresh_below <= 1)))
        return seer_err(SEER_ERR_INVALID_ARG, "spec refresh settings out of range");
    if (kind == SEER_SPEC_SNAPKV && (own->snap_window < 1 || own->snap_window > n_batch_max ||
                                     own->snap_kernel < 1 || own->snap_kernel % 2 == 0))
        return seer_err(SEER_ERR_INVALID_ARG,
                        "snapkv window %d must be in [1, n_batch_max %d], kernel %d odd and positive",
                        own->snap_window, n_batch_max, own->snap_kernel);
    own->sinks = own->sinks < own->budget ? own->sinks : own->budget;
    return SEER_OK;
}

static seer_status self_init(const seer_draft_env *env, const seer_spec_params *p, void **out) {
    seer_context *ctx = env->ctx;
    self_settings own;
    SEER_TRY(self_settings_of(p->kind, p, ctx->params.n_batch_max, &own));
    self_impl *im = calloc(1, sizeof *im);
    const seer_model_info *in = &env->model->info;
    int B = ctx->params.n_seq_max;
    if (im) {
        im->kind = p->kind;
        im->set = own;
        im->draft_weights = p->draft_weights;
        im->ctx = ctx;
        im->in = in;
        im->n_seq_max = B;
        im->ss = calloc(B, sizeof *im->ss);
        im->view = seer_malloc_array((size_t)own.budget + 1, sizeof(int32_t));
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

static void self_free(const seer_draft_env *env, void *impl) {
    self_impl *im = impl;
    for (int i = 0; i < im->n_seq_max; i++)
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

/* TriForce selection over slots [0, L) of sequence seq (state h) from queries q
 * [n_layers][H*Dh]. */
static seer_status build_retrieval(self_impl *im, int h, seer_seq_id seq, const float *q, int L) {
    self_seq *ss = &im->ss[h];
    const seer_model_info *in = im->in;
    const int C = im->set.chunk, K = im->set.budget;
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
        st = seer_context_read_kv(im->ctx, seq, l, 0, 0, n_chunks * C, keys);
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

/* SnapKV selection at prefill of s (its n_prompt tokens) from the window's queries q
 * [n_layers][W][H*Dh]. */
static seer_status build_snapkv(self_impl *im, const seer_draft_seq *s, const float *q, int W) {
    self_seq *ss = &im->ss[s->slot];
    const seer_model_info *in = im->in;
    const int n = s->n_prompt, K = im->set.budget, ker = im->set.snap_kernel;
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
        st = seer_context_read_kv(im->ctx, s->seq, l, 0, 0, n, keys);
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

static int self_prefill_q_rows(void *impl, int n_prompt) {
    const self_impl *im = impl;
    if (im->kind == SEER_SPEC_SNAPKV)
        return im->set.snap_window < n_prompt ? im->set.snap_window : n_prompt;
    if (im->kind == SEER_SPEC_RETRIEVAL)
        return 1;
    return 0;
}

static seer_status self_prefill_q(const seer_draft_env *env, void *impl, seer_draft_seq *s, const float *q,
                                  int rows) {
    self_impl *im = impl;
    if (im->kind == SEER_SPEC_SNAPKV)
        return build_snapkv(im, s, q, rows);
    return build_retrieval(im, s->slot, s->seq, q, s->n_prompt);
}

static void self_seq_released(const seer_draft_env *env, void *impl, int slot) {
    self_seq_clear(&((self_impl *)impl)->ss[slot]);
}

/* A view of the first `sinks` slots and the most recent K - sinks of L. */
static void sinks_and_recent(self_impl *im, seer_view *v, int sinks, int L, int K) {
    for (int i = 0; i < sinks; i++)
        im->view[i] = i;
    v->idx = im->view;
    v->n = sinks;
    v->tail_start = L - (K - sinks);
}

/* Sets the draft view of s whose cache holds L slots. */
static seer_status set_view(self_impl *im, const seer_draft_seq *s, int L) {
    const self_seq *ss = &im->ss[s->slot];
    const int K = im->set.budget;
    const seer_model_info *in = im->in;
    if (L <= K) {
        seer_seq_clear_view(im->ctx, s->seq);
        return SEER_OK;
    }
    seer_view v = {.n_layers_view = 1, .n_heads_view = 1};
    switch (im->kind) {
    case SEER_SPEC_STREAMING:
        sinks_and_recent(im, &v, im->set.sinks < L ? im->set.sinks : L, L, K);
        break;
    case SEER_SPEC_RETRIEVAL:
        if (!ss->sel) { /* nothing selected yet (short prompt): chunk 0 + recent slots */
            sinks_and_recent(im, &v, im->set.chunk < K ? im->set.chunk : K / 2, L, K);
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
            seer_seq_clear_view(im->ctx, s->seq);
            return SEER_OK;
        }
        v.idx = ss->sel;
        v.n = ss->n_sel;
        v.n_layers_view = in->n_layers;
        v.n_heads_view = in->n_kv_heads;
        v.tail_start = ss->snap_tail;
        break;
    }
    return seer_seq_set_view(im->ctx, s->seq, &v);
}

static seer_status self_propose(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs) {
    self_impl *im = impl;
    seer_context *c = im->ctx;
    const seer_model_info *in = im->in;
    const size_t qd = (size_t)in->n_heads * in->head_dim;
    seer_status st = SEER_OK;
    seer_seq_id dseq[n > 0 ? n : 1];
    uint8_t cap0[n > 0 ? n : 1];
    int n_cap = 0;
    for (int i = 0; i < n && st == SEER_OK; i++) {
        dseq[i] = seqs[i].seq;
        cap0[i] = seqs[i].max_nodes > 0 && im->ss[seqs[i].slot].refresh;
        st = set_view(im, &seqs[i], seqs[i].n_tokens - 1);
    }
    if (st == SEER_OK)
        st = seer_draft_expand(env, c, n, seqs, dseq, NULL, cap0, im->qbuf, NULL,
                               (seer_draft_reads){.draft_weights = im->draft_weights});
    for (int i = 0; i < n; i++)
        n_cap += cap0[i];
    /* keep the captured queries for the rebuild in self_verified (flagged rows in order) */
    for (int i = 0, k = 0; i < n && st == SEER_OK && n_cap; i++) {
        if (!cap0[i])
            continue;
        self_seq *ss = &im->ss[seqs[i].slot];
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
        seer_status r = seer_draft_leave(c, &seqs[i]);
        if (st == SEER_OK)
            st = r;
        seqs[i].onehot = false;
    }
    return st;
}

static seer_status self_view(const seer_draft_env *env, void *impl, const seer_draft_seq *s,
                             seer_draft_reads *reads) {
    (void)env;
    *reads = (seer_draft_reads){.draft_weights = ((self_impl *)impl)->draft_weights};
    return set_view(impl, s, s->n_tokens - 1);
}

static seer_status self_verified(const seer_draft_env *env, void *impl, seer_draft_seq *s) {
    self_impl *im = impl;
    self_seq *ss = &im->ss[s->slot];
    if (im->kind != SEER_SPEC_RETRIEVAL)
        return SEER_OK;
    if (ss->refresh && ss->qcap) { /* the query was captured this round: rebuild now */
        ss->refresh = false;
        s->rounds = 0;
        SEER_TRY(build_retrieval(im, s->slot, s->seq, ss->qcap, s->n_tokens - 1));
    }
    bool due = (!ss->sel && s->n_tokens - 1 > im->set.budget) ||
               (im->set.refresh_every > 0 && s->rounds >= im->set.refresh_every) ||
               (im->set.refresh_below > 0 && s->accept_avg < im->set.refresh_below);
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
    .seq_released = self_seq_released,
    .propose = self_propose,
    .verified = self_verified,
    .prefill_q_rows = self_prefill_q_rows,
    .prefill_q = self_prefill_q,
    .has_q = true,
    .view = self_view,
};

/* The three views this one implementation drafts under, and their settings: the budget K
 * and the sinks are declared by the streaming view and read by the others (and by quantkv and
 * the draft model's own view), the rest are each view's own. */
static const seer_drafter_option STREAMING_OPTS[] = {
    {{.flag = SEER_DRAFTER_BUDGET, .json = "budget", .metavar = "K", .type = SEER_SPEC_OPT_INT, .def = 256, .lo = 1,
      .hi = 1 << 24, .help = "KV slots a sparse self-draft reads"},
     SEER_DRAFTER_OPT_EXT, offsetof(self_settings, budget)},
    {{.flag = "spec-sinks", .json = "sinks", .metavar = "S", .type = SEER_SPEC_OPT_INT, .def = 16, .lo = 0,
      .hi = 1 << 24, .help = "first tokens the streaming view keeps"},
     SEER_DRAFTER_OPT_EXT, offsetof(self_settings, sinks)},
};
static const seer_drafter_option RETRIEVAL_OPTS[] = {
    SEER_DRAFTER_READS(SEER_DRAFTER_BUDGET, offsetof(self_settings, budget)),
    {{.flag = "spec-chunk", .json = "chunk", .metavar = "C", .type = SEER_SPEC_OPT_INT, .def = 8, .lo = 1,
      .hi = 4096, .help = "tokens per chunk"},
     SEER_DRAFTER_OPT_EXT, offsetof(self_settings, chunk)},
    {{.flag = "spec-refresh", .json = "refresh_every", .metavar = "N", .type = SEER_SPEC_OPT_INT, .def = 0,
      .lo = 0, .hi = 1 << 24, .help = "rebuild the selection every N rounds (0 = never)"},
     SEER_DRAFTER_OPT_EXT, offsetof(self_settings, refresh_every)},
    {{.flag = "spec-refresh-below", .json = "refresh_below", .metavar = "A", .type = SEER_SPEC_OPT_FLOAT,
      .def = 0, .lo = 0, .hi = 1, .help = "rebuild when the running acceptance drops below A (0 = off)"},
     SEER_DRAFTER_OPT_EXT, offsetof(self_settings, refresh_below)},
};
static const seer_drafter_option SNAPKV_OPTS[] = {
    SEER_DRAFTER_READS(SEER_DRAFTER_BUDGET, offsetof(self_settings, budget)),
    {{.flag = "spec-window", .json = "snap_window", .metavar = "W", .type = SEER_SPEC_OPT_INT, .def = 32,
      .lo = 1, .hi = 4096, .help = "observation window: the prompt's last queries that vote"},
     SEER_DRAFTER_OPT_EXT, offsetof(self_settings, snap_window)},
    {{.flag = "spec-snap-kernel", .json = "snap_kernel", .metavar = "P", .type = SEER_SPEC_OPT_INT, .def = 5,
      .lo = 1, .hi = 255, .help = "width of the votes' average pooling (odd)"},
     SEER_DRAFTER_OPT_EXT, offsetof(self_settings, snap_kernel)},
};

#define SELF_FLAGS                                                                                          \
    (SEER_DRAFTER_BUDGETED | SEER_DRAFTER_AUTO | SEER_DRAFTER_SPARSE_SELF | SEER_DRAFTER_TREE_BASE |          \
     SEER_DRAFTER_HIER_BASE | SEER_DRAFTER_DRAFT_WEIGHTS)

const seer_drafter_desc seer_drafter_streaming_desc = {
    .name = "streaming", .kind = SEER_SPEC_STREAMING, .ops = &seer_drafter_self,
    .help = "self-draft through sinks + a recent window of the cache (MagicDec, StreamingLLM)",
    .flags = SELF_FLAGS, .options = STREAMING_OPTS, .n_options = 2,
};
const seer_drafter_desc seer_drafter_retrieval_desc = {
    .name = "retrieval", .kind = SEER_SPEC_RETRIEVAL, .ops = &seer_drafter_self,
    .help = "self-draft through the top chunks by key-mean score per KV head (TriForce)",
    .flags = SELF_FLAGS, .options = RETRIEVAL_OPTS, .n_options = 4,
};
const seer_drafter_desc seer_drafter_snapkv_desc = {
    .name = "snapkv", .kind = SEER_SPEC_SNAPKV, .ops = &seer_drafter_self,
    .help = "self-draft through positions the prompt's last queries chose (SnapKV)",
    .flags = SELF_FLAGS, .options = SNAPKV_OPTS, .n_options = 3,
};
