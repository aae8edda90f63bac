/*
 * tp_weights.c: weights on the tensor-parallel backend: each rank's part of a GGUF tensor or of
 * a random weight (seer_weight_split's rule), joined weights, quantised copies, freeing.
 * Not for: what a weight's division means to the ops (tp_ops.c).
 */
#include "parallel/tp_internal.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- weights ----------------------------------------------------------------------------- */

/* Frees each rank's part that has data, the column copies and tw itself. */
static void parts_free(tp_be *t, tp_weight *tw) {
    for (int r = 0; r < t->n; r++) {
        if (tw->part[r].data && !tw->borrowed[r]) {
            (void)seer_tp_bind(t, r);
            t->rank[r]->ops->weight_free(t->rank[r], &tw->part[r]);
        }
        free(tw->host[r]);
    }
    free(tw);
}

/* out takes tw's parts of a rows x cols weight, or on failure (s) they are freed. */
static seer_status parts_bind(tp_be *t, tp_weight *tw, seer_status s, int rows, int cols, seer_weight *out) {
    if (s != SEER_OK) {
        parts_free(t, tw);
        return s;
    }
    out->data = tw;
    out->rows = rows;
    out->cols = cols;
    out->dtype = tw->part[0].dtype;
    out->owned = true;
    return SEER_OK;
}

/* Rows or columns [*x0, *x0 + *nx) of a dimension of size dim held by rank r. */
static seer_status split_range(const tp_be *t, int dim, seer_weight_split sp, const char *name,
                               int r, int *x0, int *nx) {
    const int unit = sp.unit > 0 ? sp.unit : 1;
    if (dim % unit)
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor parallelism: %s's %d %s are not a whole number of units of %d",
                        name, dim, sp.kind == SEER_SPLIT_COLS ? "columns" : "rows", unit);
    const int U = dim / unit;
    if (sp.kind == SEER_SPLIT_COLS && U < t->n)
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor parallelism: %s's %d units of %d columns do not divide over %d ranks",
                        name, U, unit, t->n);
    int u0, nu;
    seer_tp_units(U, t->n, r, &u0, &nu);
    *x0 = u0 * unit;
    *nx = nu * unit;
    return SEER_OK;
}

static seer_status tp_weight_load_split(seer_backend *be, const gguf_tensor *tt, seer_weights_kind how,
                                        seer_weight_split sp, seer_weight *out) {
    tp_be *t = tp_of(be);
    memset(out, 0, sizeof *out);
    if (tt->n_dims > 2)
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor parallelism: %s has %d dimensions", tt->name, tt->n_dims);
    tp_weight *tw = calloc(1, sizeof *tw);
    if (!tw)
        return seer_err(SEER_ERR_OOM, "out of memory");
    tw->split = sp;
    const int cols = (int)tt->ne[0], rows = (int)tt->ne[1];
    const int be_ = seer_ggml_type_block_elems(tt->type), bb = seer_ggml_type_block_bytes(tt->type);
    seer_status s = be_ > 0 && cols % be_ == 0
                        ? SEER_OK
                        : seer_err(SEER_ERR_FORMAT, "tensor %s: %d columns of type %s", tt->name, cols,
                                   seer_ggml_type_name(tt->type));
    const size_t row_bytes = be_ > 0 ? (size_t)cols / be_ * bb : 0;
    for (int r = 0; r < t->n && s == SEER_OK; r++) {
        gguf_tensor sub = *tt;
        if (sp.kind == SEER_SPLIT_ROWS || sp.kind == SEER_SPLIT_VOCAB) {
            s = split_range(t, rows, sp, tt->name, r, &tw->r0[r], &tw->nr[r]);
            if (s != SEER_OK)
                break;
            sub.ne[1] = (uint64_t)tw->nr[r];
            sub.data = (const char *)tt->data + (size_t)tw->r0[r] * row_bytes;
            sub.offset = tt->offset + (uint64_t)tw->r0[r] * row_bytes;
            sub.nbytes = (size_t)tw->nr[r] * row_bytes;
        } else if (sp.kind == SEER_SPLIT_COLS) {
            s = split_range(t, cols, sp, tt->name, r, &tw->r0[r], &tw->nr[r]);
            if (s == SEER_OK && (tw->r0[r] % be_ || tw->nr[r] % be_))
                s = seer_err(SEER_ERR_UNSUPPORTED, "tensor parallelism: %s's columns [%d, %d) split %s blocks of %d",
                             tt->name, tw->r0[r], tw->r0[r] + tw->nr[r], seer_ggml_type_name(tt->type), be_);
            if (s != SEER_OK)
                break;
            const size_t cb = (size_t)tw->nr[r] / be_ * bb, c0 = (size_t)tw->r0[r] / be_ * bb;
            char *h = malloc((size_t)rows * cb + 1);
            if (!h) {
                s = seer_err(SEER_ERR_OOM, "out of memory for a part of %s", tt->name);
                break;
            }
            for (int i = 0; i < rows; i++)
                memcpy(h + (size_t)i * cb, (const char *)tt->data + (size_t)i * row_bytes + c0, cb);
            tw->host[r] = h;
            sub.ne[0] = (uint64_t)tw->nr[r];
            sub.data = h;
            sub.nbytes = (size_t)rows * cb;
        } else {
            tw->r0[r] = 0;
            tw->nr[r] = rows;
        }
        s = seer_tp_bind(t, r);
        if (s == SEER_OK)
            s = t->rank[r]->ops->weight_load(t->rank[r], &sub, how, &tw->part[r]);
        /* the copy stays only where the rank's part points into it (the CPU's f32 parts) */
        if (s == SEER_OK && tw->host[r]) {
            const char *d = tw->part[r].data, *h = tw->host[r];
            if (!(d >= h && d < h + sub.nbytes)) {
                free(tw->host[r]);
                tw->host[r] = NULL;
            }
        }
    }
    return parts_bind(t, tw, s, rows, cols, out);
}

static seer_status tp_weight_load(seer_backend *be, const gguf_tensor *tt, seer_weights_kind how,
                                  seer_weight *out) {
    return tp_weight_load_split(be, tt, how, (seer_weight_split){SEER_SPLIT_NONE, 1}, out);
}

/* A weight that does not own its data (draft weights sharing the model's) frees nothing. */
static void tp_weight_free(seer_backend *be, seer_weight *w) {
    if (w->data && w->owned)
        parts_free(tp_of(be), w->data);
    w->data = NULL;
}

/* Each rank quantises its own part: rows and whole blocks of 32 columns quantise
 * independently, so the parts are the parts of the undivided weight's copy. A part that is
 * not whole blocks (columns divided finer than 32) stays the weight's own, unquantised, as
 * draft_weights.c shares such a weight whole. */
static seer_status tp_weight_quantize(seer_backend *be, const seer_weight *w, int dtype, seer_weight *out) {
    tp_be *t = tp_of(be);
    const seer_weight src = *w; /* out may be w */
    const tp_weight *sw = src.data;
    memset(out, 0, sizeof *out);
    if (!sw)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_quantize: a weight without data");
    tp_weight *tw = calloc(1, sizeof *tw);
    if (!tw)
        return seer_err(SEER_ERR_OOM, "out of memory");
    tw->split = sw->split;
    memcpy(tw->r0, sw->r0, sizeof tw->r0);
    memcpy(tw->nr, sw->nr, sizeof tw->nr);
    memcpy(tw->seg_r0, sw->seg_r0, sizeof tw->seg_r0);
    seer_status s = SEER_OK;
    for (int r = 0; r < t->n && s == SEER_OK; r++) {
        const seer_weight *p = &sw->part[r];
        if (!p->data || p->cols % 32) {
            tw->part[r] = *p;
            tw->part[r].owned = false;
            tw->borrowed[r] = true;
            continue;
        }
        s = seer_tp_bind(t, r);
        if (s == SEER_OK)
            s = t->rank[r]->ops->weight_quantize(t->rank[r], p, dtype, &tw->part[r]);
    }
    s = parts_bind(t, tw, s, src.rows, src.cols, out);
    if (s == SEER_OK) { /* the segments as the source's */
        out->n_seg = src.n_seg;
        out->interleaved = src.interleaved;
        memcpy(out->seg_rows, src.seg_rows, sizeof out->seg_rows);
    }
    return s;
}

static seer_status tp_weight_concat(seer_backend *be, seer_weight *parts, int n, bool interleave,
                                    seer_weight *out) {
    tp_be *t = tp_of(be);
    memset(out, 0, sizeof *out);
    if (n < 1 || n > SEER_WEIGHT_MAX_SEG)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_concat of %d parts", n);
    tp_weight *pw[SEER_WEIGHT_MAX_SEG];
    for (int j = 0; j < n; j++) {
        pw[j] = parts[j].data;
        if (!pw[j] || pw[j]->split.kind != pw[0]->split.kind || pw[j]->split.kind == SEER_SPLIT_COLS)
            return seer_err(SEER_ERR_INVALID_ARG, "weight_concat: parts divided differently");
    }
    tp_weight *tw = calloc(1, sizeof *tw);
    if (!tw)
        return seer_err(SEER_ERR_OOM, "out of memory");
    tw->split = pw[0]->split;
    seer_status s = SEER_OK;
    for (int r = 0; r < t->n && s == SEER_OK; r++) {
        seer_weight rp[SEER_WEIGHT_MAX_SEG];
        for (int j = 0; j < n; j++) {
            rp[j] = pw[j]->part[r];
            tw->seg_r0[j][r] = pw[j]->r0[r];
        }
        tw->r0[r] = pw[0]->r0[r];
        tw->nr[r] = pw[0]->nr[r];
        s = seer_tp_bind(t, r);
        if (s == SEER_OK)
            s = t->rank[r]->ops->weight_concat(t->rank[r], rp, n, interleave, &tw->part[r]);
        if (s == SEER_OK)
            for (int j = 0; j < n; j++)
                pw[j]->part[r] = rp[j];
    }
    /* On failure past rank 0 the earlier ranks' parts are views of their joined weights: out
     * keeps those, so that freeing the model frees each once. */
    out->data = tw;
    out->rows = 0;
    for (int j = 0; j < n; j++) {
        out->rows += parts[j].rows;
        out->seg_rows[j] = parts[j].rows;
    }
    out->cols = parts[0].cols;
    out->dtype = tw->part[0].dtype;
    out->owned = true;
    out->n_seg = n;
    out->interleaved = interleave;
    if (s != SEER_OK)
        return s;
    /* a part whose ranks kept no data is usable through out alone */
    for (int j = 0; j < n; j++)
        if (!pw[j]->part[0].data) {
            free(pw[j]);
            parts[j].data = NULL;
        }
    return SEER_OK;
}

static seer_status tp_weight_random_split(seer_backend *be, int rows, int cols, uint64_t seed,
                                          float scale, seer_weight_split sp, seer_weight *out) {
    tp_be *t = tp_of(be);
    memset(out, 0, sizeof *out);
    tp_weight *tw = calloc(1, sizeof *tw);
    if (!tw)
        return seer_err(SEER_ERR_OOM, "out of memory");
    tw->split = sp;
    seer_status s = SEER_OK;
    for (int r = 0; r < t->n && s == SEER_OK; r++) {
        int pr = rows, pc = cols;
        uint64_t sd = seed;
        if (sp.kind == SEER_SPLIT_NONE) {
            tw->nr[r] = rows;
        } else {
            s = split_range(t, sp.kind == SEER_SPLIT_COLS ? cols : rows, sp, "a random weight", r,
                            &tw->r0[r], &tw->nr[r]);
            if (sp.kind == SEER_SPLIT_COLS)
                pc = tw->nr[r];
            else
                pr = tw->nr[r];
            sd = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(r + 1));
        }
        if (s == SEER_OK)
            s = seer_tp_bind(t, r);
        if (s == SEER_OK)
            s = t->rank[r]->ops->weight_random(t->rank[r], pr, pc, sd, scale, &tw->part[r]);
    }
    return parts_bind(t, tw, s, rows, cols, out);
}

static seer_status tp_weight_random(seer_backend *be, int rows, int cols, uint64_t seed, float scale,
                                    seer_weight *out) {
    return tp_weight_random_split(be, rows, cols, seed, scale, (seer_weight_split){SEER_SPLIT_NONE, 1}, out);
}

void seer_tp_fill_weight_ops(seer_backend_ops *o, const seer_backend_ops *in) {
    o->weight_load = tp_weight_load;
    o->weight_load_split = tp_weight_load_split;
    o->weight_free = tp_weight_free;
    o->weight_concat = in->weight_concat ? tp_weight_concat : NULL;
    o->weight_quantize = in->weight_quantize ? tp_weight_quantize : NULL;
    o->weight_random = in->weight_random ? tp_weight_random : NULL;
    o->weight_random_split = in->weight_random ? tp_weight_random_split : NULL;
}
