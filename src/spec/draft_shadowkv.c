/*
 * draft_shadowkv.c: the ShadowKV selection (Sun et al. 2024, arXiv 2410.21465) as a lossless
 * draft view. The target drafts for itself attending, per layer and KV head, to the sinks,
 * the outlier chunks, the chunks whose landmark scores best against the query and a recent
 * window; verification reads the full cache, so the output is the target's.
 *
 *   landmarks: the cache is cut into chunks of `chunk` slots; a chunk's landmark is the mean
 *     of its keys, kept per layer and KV head, computed once when the chunk is complete (at
 *     the first proposal for the prompt, then as verified text fills further chunks);
 *   outliers: the chunks a landmark represents worst, by the lowest cosine similarity between
 *     any key of the chunk and its landmark, are always visible (ShadowKV keeps them exact);
 *     chunks completed after prefill are ranked with the prompt's;
 *   selection: per layer and KV head, q . landmark summed over the group's query heads ranks
 *     the other chunks; the best fill the budget after sinks, window and outliers.
 *
 * Landmarks are means of the keys as the cache holds them, after RoPE: the space the query
 * is scored in; the cache keeps no pre-RoPE keys. ShadowKV's low-rank factor of the pre-RoPE
 * keys is not built: a draft view reads the exact cache, and the factor would only save
 * memory where the target attends through the selection (a lossy mode seer does not have).
 * The selection follows the query of the previous round's pending token (select_view.h), not
 * the current token's, since the view is set before the call that computes it.
 */
#include "spec/select_view.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int chunk, outliers, window; /* own settings (OPTS) */
    int budget, sinks;           /* the streaming view's, read (OPTS) */
    int n_layers, Hkv, H, Dh;
} shadow_cfg;

typedef struct {
    int n_chunks, cap; /* complete chunks indexed, room */
    float *mark;       /* [cap][n_layers][Hkv][Dh] landmarks */
    float *fit;        /* [cap][n_layers][Hkv] lowest cosine of a key of the chunk to its landmark */
    struct rank { float v; int32_t c; } *rk; /* [cap] scratch of a selection */
    uint8_t *taken;    /* [cap] scratch of a selection */
} shadow_ix;

static void *shadow_seq_new(const void *cfg, const seer_model_info *in) {
    (void)cfg, (void)in;
    return calloc(1, sizeof(shadow_ix));
}

static void shadow_seq_free(void *p) {
    shadow_ix *x = p;
    free(x->mark), free(x->fit), free(x->rk), free(x->taken);
    free(x);
}

static seer_status grow(const shadow_cfg *cf, shadow_ix *x, int need) {
    if (need <= x->cap)
        return SEER_OK;
    int cap = x->cap ? x->cap : 64;
    while (cap < need)
        cap *= 2;
    const size_t per = (size_t)cf->n_layers * cf->Hkv;
    float *m = realloc(x->mark, (size_t)cap * per * cf->Dh * sizeof(float));
    if (m)
        x->mark = m;
    float *f = realloc(x->fit, (size_t)cap * per * sizeof(float));
    if (f)
        x->fit = f;
    struct rank *r = realloc(x->rk, (size_t)cap * sizeof *r);
    if (r)
        x->rk = r;
    uint8_t *t = realloc(x->taken, cap);
    if (t)
        x->taken = t;
    if (!m || !f || !r || !t)
        return seer_err(SEER_ERR_OOM, "out of memory for ShadowKV landmarks");
    x->cap = cap;
    return SEER_OK;
}

/* Landmarks and fits of the chunks complete in slots < to. */
static seer_status shadow_extend(const void *cfgp, void *ixp, seer_context *c, seer_seq_id seq, int from, int to) {
    (void)from; /* chunks are indexed whole: from the first incomplete one */
    const shadow_cfg *cf = cfgp;
    shadow_ix *x = ixp;
    const int C = cf->chunk, Dh = cf->Dh, Hkv = cf->Hkv, kvd = Hkv * Dh, NL = cf->n_layers;
    const int c0 = x->n_chunks, c1 = to / C;
    if (c1 <= c0)
        return SEER_OK;
    SEER_TRY(grow(cf, x, c1));
    float *keys = seer_malloc_array((size_t)(c1 - c0) * C * kvd, sizeof(float));
    if (!keys)
        return seer_err(SEER_ERR_OOM, "out of memory for ShadowKV landmarks");
    seer_status st = SEER_OK;
    for (int l = 0; l < NL && st == SEER_OK; l++) {
        st = seer_context_read_kv(c, seq, l, 0, c0 * C, (c1 - c0) * C, keys);
        for (int ch = c0; ch < c1 && st == SEER_OK; ch++)
            for (int h = 0; h < Hkv; h++) {
                float *m = x->mark + (((size_t)ch * NL + l) * Hkv + h) * Dh;
                const float *k0 = keys + (size_t)(ch - c0) * C * kvd + h * Dh;
                double mn = 0;
                for (int e = 0; e < Dh; e++) {
                    double a = 0;
                    for (int t = 0; t < C; t++)
                        a += k0[(size_t)t * kvd + e];
                    m[e] = (float)(a / C);
                    mn += (double)m[e] * m[e];
                }
                float worst = 1.f;
                for (int t = 0; t < C; t++) {
                    double d = 0, kn = 0;
                    for (int e = 0; e < Dh; e++)
                        d += (double)k0[(size_t)t * kvd + e] * m[e], kn += (double)k0[(size_t)t * kvd + e] * k0[(size_t)t * kvd + e];
                    float cs = kn > 0 && mn > 0 ? (float)(d / sqrt(kn * mn)) : 1.f;
                    worst = cs < worst ? cs : worst;
                }
                x->fit[((size_t)ch * NL + l) * Hkv + h] = worst;
            }
    }
    free(keys);
    if (st == SEER_OK)
        x->n_chunks = c1;
    return st;
}

/* Best first; ties to the earlier chunk (deterministic). */
static int cmp_rank(const void *a, const void *b) {
    const struct rank *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return (x->c > y->c) - (x->c < y->c);
}

/* Adds chunk ch's slots within [lo, lim) to out while room remains; returns the new count. */
static int add_chunk(int ch, int C, int lo, int lim, int32_t *out, int k, int n_pick) {
    for (int s = ch * C; s < ch * C + C && k < n_pick; s++)
        if (s >= lo && s < lim)
            out[k++] = s;
    return k;
}

static seer_status shadow_select(const void *cfgp, void *ixp, const float *q, int lo, int lim, int indexed,
                                 int n_pick, int32_t *out, int *cnt) {
    (void)indexed;
    const shadow_cfg *cf = cfgp;
    shadow_ix *x = ixp;
    const int C = cf->chunk, Dh = cf->Dh, Hkv = cf->Hkv, NL = cf->n_layers, grp = cf->H / Hkv;
    /* chunks meeting [lo, lim) */
    const int e0 = lo / C, e_lim = (lim + C - 1) / C, e1 = e_lim < x->n_chunks ? e_lim : x->n_chunks;
    const int n_el = e1 > e0 ? e1 - e0 : 0;
    const int n_out = cf->outliers < n_pick / C / 2 ? cf->outliers : n_pick / C / 2;
    if (n_el == 0) { /* no complete chunk to choose from yet */
        memset(cnt, 0, sizeof(int) * (size_t)NL * Hkv);
        return SEER_OK;
    }
    for (int l = 0; l < NL; l++)
        for (int h = 0; h < Hkv; h++) {
            int32_t *o = out + ((size_t)l * Hkv + h) * n_pick;
            int k = 0;
            memset(x->taken, 0, (size_t)x->n_chunks);
            /* outliers: the worst fits, kept whatever the query */
            for (int i = 0; i < n_el; i++)
                x->rk[i] = (struct rank){-x->fit[((size_t)(e0 + i) * NL + l) * Hkv + h], e0 + i};
            qsort(x->rk, n_el, sizeof *x->rk, cmp_rank);
            for (int i = 0; i < n_el && i < n_out; i++) {
                x->taken[x->rk[i].c] = 1;
                k = add_chunk(x->rk[i].c, C, lo, lim, o, k, n_pick);
            }
            /* the rest by q . landmark over the group's query heads */
            for (int i = 0; i < n_el; i++) {
                const float *m = x->mark + (((size_t)(e0 + i) * NL + l) * Hkv + h) * Dh;
                double sc = 0;
                for (int qh = h * grp; qh < (h + 1) * grp; qh++) {
                    const float *qv = q + ((size_t)l * cf->H + qh) * Dh;
                    for (int e = 0; e < Dh; e++)
                        sc += (double)qv[e] * m[e];
                }
                x->rk[i] = (struct rank){(float)sc, e0 + i};
            }
            qsort(x->rk, n_el, sizeof *x->rk, cmp_rank);
            for (int i = 0; i < n_el && k < n_pick; i++)
                if (!x->taken[x->rk[i].c])
                    k = add_chunk(x->rk[i].c, C, lo, lim, o, k, n_pick);
            cnt[l * Hkv + h] = k;
        }
    return SEER_OK;
}

static const seer_selector SHADOWKV = {shadow_seq_new, shadow_seq_free, shadow_extend, shadow_select};

extern const seer_drafter_desc seer_drafter_shadowkv_desc;

static seer_status shadowkv_init(const seer_draft_env *env, const seer_spec_params *p, void **impl) {
    shadow_cfg *cf = calloc(1, sizeof *cf);
    if (!cf)
        return seer_err(SEER_ERR_OOM, "out of memory for the ShadowKV draft");
    seer_drafter_settings(&seer_drafter_shadowkv_desc, p, cf);
    if (cf->chunk < 1 || cf->outliers < 0 || cf->window < 0) {
        free(cf);
        return seer_err(SEER_ERR_INVALID_ARG, "shadowkv chunk must be positive, outliers and window not negative");
    }
    const seer_model_info *in = &env->model->info;
    cf->n_layers = in->n_layers, cf->Hkv = in->n_kv_heads, cf->H = in->n_heads, cf->Dh = in->head_dim;
    seer_select_settings set = {.budget = cf->budget, .sinks = cf->sinks, .window = cf->window,
                                .draft_weights = p->draft_weights};
    return seer_select_init(env, set, &SHADOWKV, cf, impl);
}

static const seer_drafter_ops seer_drafter_shadowkv = {
    .name = "shadowkv",
    .init = shadowkv_init,
    .free = seer_select_free,
    .seq_released = seer_select_released,
    .propose = seer_select_propose,
    .prefill_q_rows = seer_select_q_rows,
    .prefill_q = seer_select_prefill_q,
    .has_q = true,
    .view = seer_select_view,
};

/* Its own settings; the budget and sinks are the streaming view's (spec-budget, spec-sinks). */
static const seer_drafter_option OPTS[] = {
    SEER_DRAFTER_READS(SEER_DRAFTER_BUDGET, offsetof(shadow_cfg, budget)),
    SEER_DRAFTER_READS("spec-sinks", offsetof(shadow_cfg, sinks)),
    {{.flag = "spec-shadow-chunk", .json = "shadow_chunk", .metavar = "C", .type = SEER_SPEC_OPT_INT, .def = 8,
      .lo = 1, .hi = 4096, .help = "tokens per ShadowKV chunk (its landmark is their keys' mean)"},
     SEER_DRAFTER_OPT_EXT, offsetof(shadow_cfg, chunk)},
    {{.flag = "spec-shadow-outliers", .json = "shadow_outliers", .metavar = "N", .type = SEER_SPEC_OPT_INT,
      .def = 4, .lo = 0, .hi = 1 << 20, .help = "chunks their landmark fits worst, always visible"},
     SEER_DRAFTER_OPT_EXT, offsetof(shadow_cfg, outliers)},
    {{.flag = "spec-shadow-window", .json = "shadow_window", .metavar = "W", .type = SEER_SPEC_OPT_INT,
      .def = 32, .lo = 0, .hi = 1 << 20, .help = "recent slots ShadowKV keeps visible"},
     SEER_DRAFTER_OPT_EXT, offsetof(shadow_cfg, window)},
};

const seer_drafter_desc seer_drafter_shadowkv_desc = {
    .name = "shadowkv", .kind = SEER_SPEC_NONE, .ops = &seer_drafter_shadowkv,
    .help = "self-draft through outlier chunks + the top chunks by landmark score per KV head (ShadowKV)",
    .flags = SEER_DRAFTER_BUDGETED | SEER_DRAFTER_AUTO | SEER_DRAFTER_SPARSE_SELF | SEER_DRAFTER_TREE_BASE |
             SEER_DRAFTER_DRAFT_WEIGHTS,
    .options = OPTS, .n_options = (int)(sizeof OPTS / sizeof *OPTS),
};
