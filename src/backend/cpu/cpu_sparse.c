/*
 * cpu_sparse.c: the CPU's ops of contextual sparsity (backend.h: ffn_act_stats, weight_gather,
 * ffn_act_hist, weight_transpose, ffn_cats), the reference of every other backend's. Griffin's
 * per-neuron statistic and the gather of the chosen rows and columns into its compact copy;
 * CATS's histogram of |silu(gate)|, the transpose of down, and the thresholded FFN itself.
 * Not for: choosing the neurons or the thresholds, or running the draft (src/model/sparse_ffn.c).
 */
#include "backend/act_hist.h"
#include "backend/cpu/cpu.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

seer_status seer_cpu_ffn_act_stats(seer_backend *be, float *stats, const float *g, int T, int F,
                                   float *tmp) {
    (void)be, (void)tmp;
    for (int t = 0; t < T; t++) {
        const float *r = g + (size_t)t * F;
        double ss = 0;
        for (int j = 0; j < F; j++)
            ss += (double)r[j] * r[j];
        if (!(ss > 0))
            continue;
        const double inv = 1.0 / ss;
        for (int j = 0; j < F; j++)
            stats[j] += (float)((double)r[j] * r[j] * inv);
    }
    return SEER_OK;
}

/* Row r of w as f32 into out [w->cols]. */
static seer_status row_f32(const seer_weight *w, int r, float *out) {
    if (w->dtype == GGML_TYPE_F32) {
        memcpy(out, (const float *)w->data + (size_t)r * w->cols, (size_t)w->cols * sizeof(float));
        return SEER_OK;
    }
    size_t row_bytes = 0;
    SEER_TRY(seer_ggml_nbytes((ggml_type)w->dtype, (uint64_t)w->cols, &row_bytes));
    return seer_gguf_dequant((ggml_type)w->dtype, (const char *)w->data + (size_t)r * row_bytes, out,
                             (uint64_t)w->cols);
}

/* The f32 weight [rows][cols] at dst (malloc'd) as *out, which owns it; dst freed where s
 * says its filling failed. */
static seer_status owned_f32(seer_status s, float *dst, int rows, int cols, seer_weight *out) {
    if (s != SEER_OK) {
        free(dst);
        return s;
    }
    memset(out, 0, sizeof *out);
    out->data = dst;
    out->rows = rows;
    out->cols = cols;
    out->dtype = GGML_TYPE_F32;
    out->owned = true;
    return SEER_OK;
}

seer_status seer_cpu_weight_gather(seer_backend *be, const seer_weight *w, const int32_t *idx, int n, bool cols,
                                   seer_weight *out) {
    (void)be;
    if (!w->data || (w->dtype != GGML_TYPE_F32 && !seer_ggml_type_supported((ggml_type)w->dtype)))
        return seer_err(SEER_ERR_UNSUPPORTED, "weight_gather: from a %s weight",
                        seer_ggml_type_name((ggml_type)w->dtype));
    const int lim = cols ? w->cols : w->rows;
    if (n < 1 || !idx)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_gather: %d indices", n);
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= lim)
            return seer_err(SEER_ERR_INVALID_ARG, "weight_gather: index %d (%d) outside the %d %s of the weight",
                            i, idx[i], lim, cols ? "columns" : "rows");
    const int R = cols ? w->rows : n, C = cols ? n : w->cols;
    float *dst = malloc((size_t)R * C * sizeof(float));
    float *row = cols ? malloc((size_t)w->cols * sizeof(float)) : NULL;
    if (!dst || (cols && !row)) {
        free(dst);
        free(row);
        return seer_err(SEER_ERR_OOM, "weight_gather: out of memory for a [%d][%d] weight", R, C);
    }
    seer_status s = SEER_OK;
    for (int r = 0; r < R && s == SEER_OK; r++) {
        if (!cols) {
            s = row_f32(w, idx[r], dst + (size_t)r * C);
            continue;
        }
        s = row_f32(w, r, row);
        for (int i = 0; i < n && s == SEER_OK; i++)
            dst[(size_t)r * C + i] = row[idx[i]];
    }
    free(row);
    return owned_f32(s, dst, R, C, out);
}

static bool readable(const seer_weight *w) {
    return w->data && (w->dtype == GGML_TYPE_F32 || seer_ggml_type_supported((ggml_type)w->dtype));
}

seer_status seer_cpu_weight_transpose(seer_backend *be, const seer_weight *w, seer_weight *out) {
    (void)be;
    if (!readable(w) || w->interleaved)
        return seer_err(SEER_ERR_UNSUPPORTED, "weight_transpose: from a %s%s weight",
                        w->interleaved ? "interleaved " : "", seer_ggml_type_name((ggml_type)w->dtype));
    const int R = w->rows, C = w->cols;
    float *dst = malloc((size_t)R * C * sizeof(float)), *row = malloc((size_t)C * sizeof(float));
    if (!dst || !row) {
        free(dst);
        free(row);
        return seer_err(SEER_ERR_OOM, "weight_transpose: out of memory for a [%d][%d] weight", C, R);
    }
    seer_status s = SEER_OK;
    for (int r = 0; r < R && s == SEER_OK; r++) {
        s = row_f32(w, r, row);
        for (int c = 0; c < C && s == SEER_OK; c++)
            dst[(size_t)c * R + r] = row[c];
    }
    free(row);
    return owned_f32(s, dst, C, R, out);
}

static inline float silu(float g) { return g / (1.f + expf(-g)); }

/* The neurons F of a gate given as backend.h's ffn_act_hist and ffn_cats take it (with up,
 * or interleaved with up); 0 for a shape that is neither. */
static int gate_neurons(const seer_weight *gate, const seer_weight *up) {
    if (up)
        return gate->interleaved ? 0 : gate->rows;
    return gate->interleaved && gate->rows % 2 == 0 ? gate->rows / 2 : 0;
}

/* One pass over neuron rows of a weight: the gate's (a[t][j] = its dot with h_t, silu'd and
 * kept at thr when act) or up's (a[t][j] *= its dot with h_t where a[t][j] != 0). */
typedef struct {
    float *a;             /* [T][F] */
    const float *h;       /* [T][D] */
    const seer_weight *w; /* neuron j is row step j + off of w */
    int step, off;
    const int32_t *list;  /* the neurons to read, n of them (NULL: 0 .. n - 1) */
    int T, F, D;
    bool gate, act;
    float thr;
    atomic_int fail;      /* a row that did not dequantise (its status) */
} rows_pass;

static void rows_range(void *ctx, int64_t i0, int64_t i1) {
    rows_pass *p = ctx;
    const int D = p->D;
    float *buf = p->w->dtype == GGML_TYPE_F32 ? NULL : malloc((size_t)D * sizeof *buf);
    if (p->w->dtype != GGML_TYPE_F32 && !buf) {
        atomic_store(&p->fail, SEER_ERR_OOM);
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        const int j = p->list ? p->list[i] : (int)i, r = p->step * j + p->off;
        const float *row = (const float *)p->w->data + (size_t)r * D;
        if (buf) {
            seer_status s = row_f32(p->w, r, buf);
            if (s != SEER_OK) {
                atomic_store(&p->fail, s);
                break;
            }
            row = buf;
        }
        for (int t = 0; t < p->T; t++) {
            float *at = p->a + (size_t)t * p->F + j;
            if (!p->gate && *at == 0.f)
                continue;
            const float *ht = p->h + (size_t)t * D;
            float acc = 0.f;
            for (int d = 0; d < D; d++)
                acc += row[d] * ht[d];
            if (!p->gate)
                *at *= acc;
            else if (!p->act)
                *at = acc;
            else
                *at = fabsf(silu(acc)) >= p->thr ? silu(acc) : 0.f; /* NaN: not kept */
        }
    }
    free(buf);
}

static seer_status run_rows(seer_backend *be, rows_pass *p, int64_t n) {
    atomic_init(&p->fail, SEER_OK);
    seer_cpu_for(be, n * p->D * p->T > ((int64_t)1 << 16), n, rows_range, p);
    const int f = atomic_load(&p->fail);
    return f == SEER_OK ? SEER_OK : seer_err((seer_status)f, "a sparse FFN op: a weight's row did not dequantise");
}

/* a [T][F] = h gate^T, the gate's pre-activation, then silu and the threshold when act. */
static seer_status gate_pass(seer_backend *be, float *a, const float *h, const seer_weight *gate, bool fused, int T,
                             int F, bool act, float thr) {
    if (!fused) {
        SEER_TRY(seer_cpu_matmul(be, a, h, gate, NULL, T));
        for (size_t i = 0; act && i < (size_t)T * F; i++)
            a[i] = fabsf(silu(a[i])) >= thr ? silu(a[i]) : 0.f;
        return SEER_OK;
    }
    rows_pass p = {.a = a, .h = h, .w = gate, .step = 2, .T = T, .F = F, .D = gate->cols, .gate = true,
                   .act = act, .thr = thr};
    return run_rows(be, &p, F);
}

seer_status seer_cpu_ffn_act_hist(seer_backend *be, double *hist, float *g, const float *h, const seer_weight *gate,
                                  int T, int F) {
    if (gate && (!readable(gate) || (gate->interleaved ? gate_neurons(gate, NULL) : gate->rows) != F))
        return seer_err(SEER_ERR_INVALID_ARG, "ffn_act_hist: a gate of %d rows for %d neurons", gate->rows, F);
    if (T <= 0 || F <= 0)
        return SEER_OK;
    if (gate)
        SEER_TRY(gate_pass(be, g, h, gate, gate->interleaved, T, F, false, 0.f));
    uint64_t n[SEER_ACT_HIST_BINS] = {0};
    for (size_t i = 0; i < (size_t)T * F; i++)
        n[seer_act_hist_bin(fabsf(silu(g[i])))]++;
    for (int b = 0; b < SEER_ACT_HIST_BINS; b++)
        hist[b] += (double)n[b];
    return SEER_OK;
}

/* x[t] += sum over the kept neurons j (ascending) of a[t][j] down_t[j], 64 columns a unit. */
typedef struct {
    float *x;
    const float *a, *dt; /* [T][F], [F][D] */
    const int32_t *list; /* [T][F]: token t's kept neurons, n[t] of them */
    const int *n;
    int T, F, D;
} down_pass;

enum { DOWN_COLS = 64 };

static void down_range(void *ctx, int64_t u0, int64_t u1) {
    const down_pass *p = ctx;
    for (int64_t u = u0; u < u1; u++) {
        const int d0 = (int)u * DOWN_COLS, nd = p->D - d0 < DOWN_COLS ? p->D - d0 : DOWN_COLS;
        for (int t = 0; t < p->T; t++) {
            float acc[DOWN_COLS] = {0};
            const int32_t *l = p->list + (size_t)t * p->F;
            for (int k = 0; k < p->n[t]; k++) {
                const float v = p->a[(size_t)t * p->F + l[k]];
                const float *row = p->dt + (size_t)l[k] * p->D + d0;
                for (int d = 0; d < nd; d++)
                    acc[d] += v * row[d];
            }
            float *xt = p->x + (size_t)t * p->D + d0;
            for (int d = 0; d < nd; d++)
                xt[d] += acc[d];
        }
    }
}

seer_status seer_cpu_ffn_cats(seer_backend *be, float *x, float *a, const float *h, const seer_weight *gate,
                              const seer_weight *up, const seer_weight *down_t, float thr, int T) {
    const int F = gate_neurons(gate, up), D = gate->cols;
    if (!F || (up && (up->rows != F || up->cols != D)) || down_t->rows != F || down_t->cols != D)
        return seer_err(SEER_ERR_INVALID_ARG, "ffn_cats: gate [%d][%d]%s, up [%d][%d] and down_t [%d][%d] do not agree",
                        gate->rows, D, gate->interleaved ? " interleaved" : "", up ? up->rows : 0,
                        up ? up->cols : 0, down_t->rows, down_t->cols);
    if (!readable(gate) || (up && !readable(up)) || !down_t->data || down_t->dtype != GGML_TYPE_F32)
        return seer_err(SEER_ERR_UNSUPPORTED, "ffn_cats: gate %s, up %s, down_t %s (down_t f32)",
                        seer_ggml_type_name((ggml_type)gate->dtype),
                        seer_ggml_type_name((ggml_type)(up ? up : gate)->dtype),
                        seer_ggml_type_name((ggml_type)down_t->dtype));
    if (!(thr >= 0))
        return seer_err(SEER_ERR_INVALID_ARG, "ffn_cats: threshold %g", (double)thr);
    if (T <= 0)
        return SEER_OK;
    SEER_TRY(gate_pass(be, a, h, gate, !up, T, F, true, thr));
    /* the kept neurons: per token (down), and their union (up: a row read once) */
    int32_t *list = malloc(((size_t)T + 1) * F * sizeof *list);
    int *n = malloc(((size_t)T + 1) * sizeof *n);
    if (!list || !n) {
        free(list);
        free(n);
        return seer_err(SEER_ERR_OOM, "ffn_cats: out of memory for %d x %d neuron lists", T + 1, F);
    }
    int32_t *all = list + (size_t)T * F;
    n[T] = 0;
    for (int j = 0; j < F; j++) {
        bool any = false;
        for (int t = 0; t < T; t++)
            any |= a[(size_t)t * F + j] != 0.f;
        if (any)
            all[n[T]++] = j;
    }
    for (int t = 0; t < T; t++) {
        n[t] = 0;
        for (int j = 0; j < F; j++)
            if (a[(size_t)t * F + j] != 0.f)
                list[(size_t)t * F + n[t]++] = j;
    }
    rows_pass p = {.a = a, .h = h, .w = up ? up : gate, .step = up ? 1 : 2, .off = up ? 0 : 1, .list = all,
                   .T = T, .F = F, .D = D};
    seer_status s = run_rows(be, &p, n[T]);
    if (s == SEER_OK) {
        down_pass q = {x, a, (const float *)down_t->data, list, n, T, F, D};
        const int64_t units = (D + DOWN_COLS - 1) / DOWN_COLS;
        seer_cpu_for(be, (int64_t)n[T] * D * T > ((int64_t)1 << 16), units, down_range, &q);
    }
    free(list);
    free(n);
    return s;
}
