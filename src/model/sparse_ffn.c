/*
 * sparse_ffn.c: a context's sparse FFN, the contextual sparsity of draft steps, in one of two
 * forms.
 *
 * Griffin (Dong et al. 2024) and Sirius (Zhou et al. 2024): the context's full forward calls
 * (prefill, verification) add each layer's per-neuron statistic of the FFN's hidden activation
 * (backend ffn_act_stats: the sum over tokens of the squared activation, each token's at unit
 * norm, Griffin's "flocking" score); the neurons with the largest are chosen per layer, and
 * the rows of gate and up and the columns of down at those neurons are gathered into a compact
 * copy (backend weight_gather), which the calls flagged seer_batch.sparse_ffn multiply by
 * instead of the whole FFN. One selection serves every sequence of the context: the scores
 * are summed over all their tokens (one compact copy per context, not per sequence; see
 * docs/drafters.md).
 *
 * CATS (Lee et al. 2024): per token, the neurons whose |silu(gate)| reaches the layer's
 * threshold. The full calls add a histogram of |silu(gate)| per layer (backend ffn_act_hist);
 * a layer's threshold is the value that the density's share of its entries reach (the
 * paper's quantile, from the context's own text rather than calibration data). A sparse call
 * computes the gate in full and up and down at the kept neurons only (backend ffn_cats), over
 * the target's gate and up as they are stored and a copy of down transposed (backend
 * weight_transpose: a neuron's column of down as a contiguous row), made once: a new choice
 * changes the thresholds alone.
 *
 * Refresh (both): after `refresh` full calls the next sparse call chooses again from the
 * statistic so far, which is then halved, so that the text as it moves on outweighs the
 * prompt. Griffin's copy is in the backend's float type, or quantised to the model's
 * draft-weights type for calls that also ask for the draft weights (each made when first
 * needed after a choice); CATS's calls with the draft weights take those for attention and
 * the same FFN as the others (the op reads down's copy in the float type).
 *
 * Not for: deciding which calls are sparse (the drafters, src/spec/) or the settings' names
 * (src/spec/sparse_ffn_opts.c).
 */
#include "backend/act_hist.h"
#include "model/model.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

struct seer_sparse_ffn {
    seer_sffn_mode mode;
    int n_layers, F, n_keep, refresh;
    float density;
    float *stats;            /* Griffin: [n_layers][F] backend memory: the full calls' statistic */
    float *host;             /* [n_layers][F] */
    double *hist;            /* CATS: [n_layers][SEER_ACT_HIST_BINS] backend memory: the full
                              * calls' histogram of |silu(gate)| */
    double *hhist;           /* [n_layers][SEER_ACT_HIST_BINS] */
    float *thr;              /* CATS: [n_layers] the thresholds chosen */
    int32_t *idx;            /* [n_layers][n_keep] the chosen neurons, ascending */
    int32_t *ridx;           /* [2 n_keep] scratch: rows of a fused gate|up */
    struct ranked { float score; int32_t j; } *order; /* [F] scratch of the choice */
    seer_layer *compact[2];  /* [n_layers] 0: the float copy, 1: in the draft weights' type */
    bool fresh[2];           /* compact[i] holds the current choice */
    bool chosen;
    int calls;               /* full calls since the choice */
};

static seer_weight *ffn_weight(seer_layer *L, int i) {
    seer_weight *ws[] = {&L->w_gate, &L->w_up, &L->w_down, &L->wgu};
    return i < 4 ? ws[i] : NULL;
}

static void free_compact(seer_backend *be, seer_sparse_ffn *f, int k) {
    if (!f->compact[k])
        return;
    for (int l = 0; l < f->n_layers; l++)
        for (int i = 0; ffn_weight(&f->compact[k][l], i); i++)
            if (ffn_weight(&f->compact[k][l], i)->owned)
                be->ops->weight_free(be, ffn_weight(&f->compact[k][l], i));
    free(f->compact[k]);
    f->compact[k] = NULL;
    f->fresh[k] = false;
}

void seer_sparse_ffn_free(seer_context *c) {
    seer_sparse_ffn *f = c->sffn;
    if (!f)
        return;
    seer_backend *be = c->model->be;
    free_compact(be, f, 0);
    free_compact(be, f, 1);
    if (f->stats)
        c->be->ops->dealloc(c->be, f->stats);
    if (f->hist)
        c->be->ops->dealloc(c->be, f->hist);
    free(f->host);
    free(f->hhist);
    free(f->thr);
    free(f->idx);
    free(f->ridx);
    free(f->order);
    free(f);
    c->sffn = NULL;
}

int seer_sparse_ffn_keep(int F, float density) {
    int n = (int)(density * (float)F + 0.5f);
    if (F % 32 == 0) /* whole blocks of 32, so that the copy of down can be quantised */
        n = (n + 31) / 32 * 32;
    return n < 1 ? 1 : n > F ? F : n;
}

/* SEER_OK where c's model and backend can run mode. */
static seer_status mode_ok(const seer_context *c, seer_sffn_mode mode) {
    const seer_backend_ops *op = c->be->ops;
    const seer_model *m = c->model;
    if (mode == SEER_SFFN_GRIFFIN)
        return op->ffn_act_stats && op->weight_gather
                   ? SEER_OK
                   : seer_err(SEER_ERR_UNSUPPORTED, "the %s backend has no sparse FFN", op->name);
    if (mode != SEER_SFFN_CATS)
        return seer_err(SEER_ERR_INVALID_ARG, "sparse FFN: unknown mode %d", (int)mode);
    if (!op->ffn_act_hist || !op->weight_transpose || !op->ffn_cats)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend has no CATS FFN", op->name);
    bool post = false;
    for (int l = 0; l < m->info.n_layers; l++)
        post |= m->layers[l].ffn_post_norm != NULL;
    if (m->desc->act != SEER_ACT_SILU || post)
        return seer_err(SEER_ERR_UNSUPPORTED, "CATS thresholds a SiLU gate added to the residual: the %s "
                                              "family's FFN is %s", m->desc->name,
                        post ? "followed by a norm" : "GELU-gated");
    if (m->host) /* the op reads the target's gate and up where they lie */
        return seer_err(SEER_ERR_UNSUPPORTED, "CATS reads the target's gate in place: not with layers in "
                                              "host memory");
    return SEER_OK;
}

/* The statistic of mode f->mode, zeroed: its host and backend memory. */
static seer_status alloc_stats(seer_context *c, seer_sparse_ffn *f) {
    const seer_backend_ops *op = c->be->ops;
    const bool cats = f->mode == SEER_SFFN_CATS;
    const size_t n = (size_t)f->n_layers * (cats ? SEER_ACT_HIST_BINS : (size_t)f->F);
    const size_t bytes = n * (cats ? sizeof(double) : sizeof(float));
    void *host = calloc(n, cats ? sizeof(double) : sizeof(float)), *dev = NULL;
    if (cats) {
        f->hhist = host;
        f->thr = calloc((size_t)f->n_layers, sizeof *f->thr);
        if (!f->thr)
            return seer_err(SEER_ERR_OOM, "out of memory");
    } else {
        f->host = host;
        f->idx = malloc((size_t)f->n_layers * f->n_keep * sizeof *f->idx);
        f->ridx = malloc(2 * (size_t)f->n_keep * sizeof *f->ridx);
        f->order = malloc((size_t)f->F * sizeof *f->order);
        if (!f->idx || !f->ridx || !f->order)
            return seer_err(SEER_ERR_OOM, "out of memory");
    }
    if (!host)
        return seer_err(SEER_ERR_OOM, "out of memory");
    SEER_TRY(op->alloc(c->be, bytes, &dev));
    if (cats)
        f->hist = dev;
    else
        f->stats = dev;
    return op->upload(c->be, dev, host, bytes);
}

seer_status seer_sparse_ffn_init(seer_context *c, seer_sffn_mode mode, float density, int refresh) {
    SEER_CHECK_ARG(c);
    if (!(density > 0 && density <= 1) || refresh < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "sparse FFN: density %g outside (0, 1] or refresh %d < 0",
                        (double)density, refresh);
    SEER_TRY(mode_ok(c, mode));
    const int n_layers = c->model->info.n_layers, F = c->model->info.ffn_dim;
    seer_sparse_ffn *f = calloc(1, sizeof *f);
    if (!f)
        return seer_err(SEER_ERR_OOM, "out of memory");
    /* CATS multiplies by the whole FFN's shape: which neurons count is per token */
    *f = (seer_sparse_ffn){.mode = mode, .n_layers = n_layers, .F = F, .density = density, .refresh = refresh,
                           .n_keep = mode == SEER_SFFN_CATS ? F : seer_sparse_ffn_keep(F, density)};
    seer_sparse_ffn *old = c->sffn;
    c->sffn = f;
    seer_status s = alloc_stats(c, f);
    if (s != SEER_OK) {
        seer_sparse_ffn_free(c);
        c->sffn = old;
        return s;
    }
    c->sffn = old;
    seer_sparse_ffn_free(c);
    c->sffn = f;
    return SEER_OK;
}

int seer_sparse_ffn_neurons(const seer_context *c) { return c->sffn ? c->sffn->n_keep : 0; }

/* For qsort: the larger score first, ties to the lower neuron. */
static int by_score(const void *a, const void *b) {
    const struct ranked *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->j - y->j;
}
static int ascending(const void *a, const void *b) { return *(const int32_t *)a - *(const int32_t *)b; }

/* CATS's threshold of one layer's histogram: the value that the density's share of the
 * entries reach, the mass taken as spread evenly over each bin; 0 (every neuron) for an
 * empty histogram. */
static float cats_threshold(const double *h, float density) {
    double total = 0;
    for (int b = 0; b < SEER_ACT_HIST_BINS; b++)
        total += h[b];
    const double want = (double)density * total;
    double above = 0;
    for (int b = SEER_ACT_HIST_BINS - 1; b > 0 && total > 0; b--) {
        if (above + h[b] < want) {
            above += h[b];
            continue;
        }
        const float lo = seer_act_hist_edge(b);
        if (b == SEER_ACT_HIST_BINS - 1) /* no upper edge */
            return lo;
        const float hi = seer_act_hist_edge(b + 1);
        return hi - (float)((want - above) / h[b]) * (hi - lo);
    }
    return 0.f;
}

/* CATS: the thresholds from the histograms; the histograms halved. */
static seer_status choose_cats(seer_context *c, seer_sparse_ffn *f) {
    const size_t n = (size_t)f->n_layers * SEER_ACT_HIST_BINS;
    seer_backend *be = c->be;
    SEER_TRY(be->ops->download(be, f->hhist, f->hist, n * sizeof(double)));
    for (int l = 0; l < f->n_layers; l++)
        f->thr[l] = cats_threshold(f->hhist + (size_t)l * SEER_ACT_HIST_BINS, f->density);
    for (size_t i = 0; i < n; i++)
        f->hhist[i] *= 0.5;
    SEER_TRY(be->ops->upload(be, f->hist, f->hhist, n * sizeof(double)));
    f->chosen = true;
    f->calls = 0;
    return SEER_OK;
}

/* The neurons of the largest statistic per layer; the statistic halved. */
static seer_status choose(seer_context *c, seer_sparse_ffn *f) {
    if (f->mode == SEER_SFFN_CATS)
        return choose_cats(c, f);
    const size_t n_st = (size_t)f->n_layers * f->F;
    seer_backend *be = c->be;
    SEER_TRY(be->ops->download(be, f->host, f->stats, n_st * sizeof(float)));
    for (int l = 0; l < f->n_layers; l++) {
        const float *score = f->host + (size_t)l * f->F;
        for (int j = 0; j < f->F; j++) /* NaN (a broken row) ranks last */
            f->order[j] = (struct ranked){score[j] == score[j] ? score[j] : -1.f, j};
        qsort(f->order, (size_t)f->F, sizeof *f->order, by_score);
        int32_t *sel = f->idx + (size_t)l * f->n_keep;
        for (int i = 0; i < f->n_keep; i++)
            sel[i] = f->order[i].j;
        qsort(sel, (size_t)f->n_keep, sizeof *sel, ascending);
    }
    for (size_t i = 0; i < n_st; i++)
        f->host[i] *= 0.5f;
    SEER_TRY(be->ops->upload(be, f->stats, f->host, n_st * sizeof(float)));
    f->chosen = true;
    f->calls = 0;
    f->fresh[0] = f->fresh[1] = false;
    return SEER_OK;
}

/* The compact FFN of layer L at the chosen neurons sel into D (whose other fields are set). */
static seer_status gather_layer(seer_backend *be, seer_sparse_ffn *f, const seer_layer *L, const int32_t *sel,
                                int dtype, seer_layer *D) {
    const seer_backend_ops *op = be->ops;
    const int n = f->n_keep;
    if (L->wgu.data) { /* fused: the same layout over the chosen rows */
        for (int i = 0; i < n; i++) {
            f->ridx[L->wgu.interleaved ? 2 * i : i] = L->wgu.interleaved ? 2 * sel[i] : sel[i];
            f->ridx[L->wgu.interleaved ? 2 * i + 1 : n + i] = L->wgu.interleaved ? 2 * sel[i] + 1 : f->F + sel[i];
        }
        SEER_TRY(op->weight_gather(be, &L->wgu, f->ridx, 2 * n, false, &D->wgu));
        D->wgu.n_seg = 2;
        D->wgu.seg_rows[0] = D->wgu.seg_rows[1] = n;
        D->wgu.interleaved = L->wgu.interleaved;
    } else {
        SEER_TRY(op->weight_gather(be, &L->w_gate, sel, n, false, &D->w_gate));
        SEER_TRY(op->weight_gather(be, &L->w_up, sel, n, false, &D->w_up));
    }
    SEER_TRY(op->weight_gather(be, &L->w_down, sel, n, true, &D->w_down));
    if (!dtype)
        return SEER_OK;
    for (int i = 0; ffn_weight(D, i); i++) { /* the draft weights' type, where whole blocks */
        seer_weight *w = ffn_weight(D, i), q;
        if (!w->data || w->cols % 32)
            continue;
        SEER_TRY(op->weight_quantize(be, w, dtype, &q));
        op->weight_free(be, w);
        *w = q;
    }
    return SEER_OK;
}

/* CATS's layer: D's FFN is L's gate and up as they are stored (views: not owned) and down
 * transposed, made from L (k 0) or taken from the copy of k 0 (k 1, the draft weights'
 * calls: their attention, the same FFN). */
static seer_status cats_layer(seer_backend *be, const seer_layer *L, const seer_layer *made, seer_layer *D) {
    D->w_gate = L->w_gate, D->w_up = L->w_up, D->wgu = L->wgu;
    if (!D->wgu.interleaved && !(D->w_gate.data && D->w_up.data))
        return seer_err(SEER_ERR_UNSUPPORTED, "CATS: a fused gate and up that is neither interleaved nor "
                                              "readable as its two parts");
    if (!D->wgu.interleaved)
        memset(&D->wgu, 0, sizeof D->wgu);
    D->w_gate.owned = D->w_up.owned = D->wgu.owned = false;
    if (made) {
        D->w_down = made->w_down;
        D->w_down.owned = false;
        return SEER_OK;
    }
    return be->ops->weight_transpose(be, &L->w_down, &D->w_down);
}

static seer_status make_compact(seer_context *c, seer_sparse_ffn *f, int k) {
    seer_model *m = c->model;
    seer_backend *be = m->be;
    const bool cats = f->mode == SEER_SFFN_CATS;
    if (cats && k && !f->fresh[0]) /* the draft weights' calls share the transposed down */
        SEER_TRY(make_compact(c, f, 0));
    free_compact(be, f, k);
    f->compact[k] = calloc((size_t)f->n_layers, sizeof(seer_layer));
    if (!f->compact[k])
        return seer_err(SEER_ERR_OOM, "out of memory");
    for (int l = 0; l < f->n_layers; l++) {
        seer_layer *D = &f->compact[k][l];
        *D = k ? m->draft_layers[l] : m->layers[l]; /* attention as the call would have it */
        for (int i = 0; ffn_weight(D, i); i++)
            memset(ffn_weight(D, i), 0, sizeof(seer_weight));
        seer_status s = cats ? cats_layer(be, &m->layers[l], k ? &f->compact[0][l] : NULL, D)
                             : gather_layer(be, f, &m->layers[l], f->idx + (size_t)l * f->n_keep,
                                            k ? m->draft_dtype : 0, D);
        if (s != SEER_OK) {
            free_compact(be, f, k);
            return s;
        }
    }
    f->fresh[k] = true;
    return SEER_OK;
}

seer_status seer_sparse_ffn_begin(seer_context *c, bool sparse, bool draft_weights) {
    c->ffn_layers = NULL;
    c->ffn_stats = NULL;
    c->ffn_hist = NULL;
    c->ffn_thr = NULL;
    seer_sparse_ffn *f = c->sffn;
    if (!f)
        return sparse ? seer_err(SEER_ERR_INVALID_ARG, "batch asks for the sparse FFN; the context has none")
                      : SEER_OK;
    if (!sparse) {
        if (!draft_weights) { /* a full call: its activations vote */
            c->ffn_stats = f->stats;
            c->ffn_hist = f->hist;
            f->calls++;
        }
        return SEER_OK;
    }
    if (!f->chosen || (f->refresh > 0 && f->calls >= f->refresh))
        SEER_TRY(choose(c, f));
    const int k = draft_weights ? 1 : 0;
    if (!f->fresh[k])
        SEER_TRY(make_compact(c, f, k));
    c->ffn_layers = f->compact[k];
    c->ffn_thr = f->thr;
    return SEER_OK;
}
