/*
 * draft_magicpig.c: MagicPIG's sampling (Chen et al. 2024, arXiv 2410.16207) as a lossless
 * draft view. Every cached key is hashed by SimHash into `tables` tables of `bits` bits (the
 * signs of its dot products with random Gaussian hyperplanes, per layer, shared by the KV
 * heads); the draft attends, per layer and KV head, to the sinks, a recent window and the
 * keys that collide with the query in at least `collide` tables, for any query head of the
 * group. The tables live on the host, built at the first proposal (the prompt's keys) and
 * extended as verified text is appended (select_view.h).
 *
 * MagicPIG's estimator reweights each sampled key by its collision probability so that the
 * sparse attention is an unbiased estimate of the full one; a draft needs none of that: the
 * verification reads the full cache and the rule is exact whatever q the draft had, so the
 * draft attends over the sampled keys with their plain softmax. When more keys collide than
 * the budget holds, the ones colliding in the most tables are kept (ties: the more recent);
 * when fewer do, the view reads fewer than K slots.
 *
 * The hyperplanes are drawn from a fixed seed, so a run is reproducible; the query is the
 * previous round's pending token's (select_view.h).
 */
#include "spec/select_view.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int bits, tables, collide, window; /* own settings (OPTS) */
    int budget, sinks;                 /* the streaming view's, read (OPTS) */
    int n_layers, Hkv, H, Dh;
    float planes[]; /* [n_layers][tables * bits][Dh] */
} pig_cfg;

typedef struct {
    int n, cap;       /* slots hashed, room */
    uint16_t *code;   /* [cap][n_layers][Hkv][tables] */
    uint16_t *score;  /* [cap] scratch of a selection */
    uint16_t *qcode;  /* [grp][tables] scratch of a selection */
} pig_ix;

static void *pig_seq_new(const void *cfgp, const seer_model_info *in) {
    const pig_cfg *cf = cfgp;
    pig_ix *x = calloc(1, sizeof *x);
    if (x)
        x->qcode = seer_malloc_array((size_t)(in->n_heads / in->n_kv_heads) * cf->tables, sizeof(uint16_t));
    if (x && !x->qcode) {
        free(x);
        return NULL;
    }
    return x;
}

static void pig_seq_free(void *p) {
    pig_ix *x = p;
    free(x->code), free(x->score), free(x->qcode);
    free(x);
}

/* SimHash of v [Dh] in each table of layer l, to out [tables]. */
static void simhash(const pig_cfg *cf, int l, const float *v, uint16_t *out) {
    const float *pl = cf->planes + (size_t)l * cf->tables * cf->bits * cf->Dh;
    for (int t = 0; t < cf->tables; t++) {
        unsigned c = 0;
        for (int b = 0; b < cf->bits; b++, pl += cf->Dh) {
            float d = 0;
            for (int e = 0; e < cf->Dh; e++)
                d += pl[e] * v[e];
            c |= (unsigned)(d > 0) << b;
        }
        out[t] = (uint16_t)c;
    }
}

static seer_status pig_extend(const void *cfgp, void *ixp, seer_context *c, seer_seq_id seq, int from, int to) {
    const pig_cfg *cf = cfgp;
    pig_ix *x = ixp;
    const int NL = cf->n_layers, Hkv = cf->Hkv, kvd = Hkv * cf->Dh, T = cf->tables;
    if (to > x->cap) {
        int cap = x->cap ? x->cap : 256;
        while (cap < to)
            cap *= 2;
        uint16_t *cd = realloc(x->code, (size_t)cap * NL * Hkv * T * sizeof(uint16_t));
        if (cd)
            x->code = cd;
        uint16_t *sc = realloc(x->score, (size_t)cap * sizeof(uint16_t));
        if (sc)
            x->score = sc;
        if (!cd || !sc)
            return seer_err(SEER_ERR_OOM, "out of memory for MagicPIG's hash tables");
        x->cap = cap;
    }
    float *keys = seer_malloc_array((size_t)(to - from) * kvd, sizeof(float));
    if (!keys)
        return seer_err(SEER_ERR_OOM, "out of memory for MagicPIG's hash tables");
    seer_status st = SEER_OK;
    for (int l = 0; l < NL && st == SEER_OK; l++) {
        st = seer_context_read_kv(c, seq, l, 0, from, to - from, keys);
        for (int s = from; s < to && st == SEER_OK; s++)
            for (int h = 0; h < Hkv; h++)
                simhash(cf, l, keys + (size_t)(s - from) * kvd + h * cf->Dh,
                        x->code + (((size_t)s * NL + l) * Hkv + h) * T);
    }
    free(keys);
    if (st == SEER_OK)
        x->n = to;
    return st;
}

static seer_status pig_select(const void *cfgp, void *ixp, const float *q, int lo, int lim, int indexed,
                              int n_pick, int32_t *out, int *cnt) {
    (void)indexed;
    const pig_cfg *cf = cfgp;
    pig_ix *x = ixp;
    const int NL = cf->n_layers, Hkv = cf->Hkv, T = cf->tables, grp = cf->H / Hkv;
    const int hi = lim < x->n ? lim : x->n;
    int hist[T + 1];
    for (int l = 0; l < NL; l++)
        for (int h = 0; h < Hkv; h++) {
            for (int g = 0; g < grp; g++)
                simhash(cf, l, q + ((size_t)l * cf->H + h * grp + g) * cf->Dh, x->qcode + (size_t)g * T);
            memset(hist, 0, sizeof hist);
            /* a key's collisions: the most tables it shares with any query head of the group */
            for (int s = lo; s < hi; s++) {
                const uint16_t *kc = x->code + (((size_t)s * NL + l) * Hkv + h) * T;
                int best = 0;
                for (int g = 0; g < grp; g++) {
                    const uint16_t *qc = x->qcode + (size_t)g * T;
                    int m = 0;
                    for (int t = 0; t < T; t++)
                        m += kc[t] == qc[t];
                    best = m > best ? m : best;
                }
                x->score[s] = (uint16_t)best;
                hist[best]++;
            }
            /* the threshold: every key above it fits, the ones at it fill the rest */
            int thr = T, above = 0;
            while (thr > cf->collide && above + hist[thr] < n_pick)
                above += hist[thr--];
            int32_t *o = out + ((size_t)l * Hkv + h) * n_pick;
            int k = 0, at = n_pick - above;
            for (int s = hi - 1; s >= lo && k < n_pick; s--) /* recent first at the threshold */
                if (x->score[s] > thr || (x->score[s] == thr && thr >= cf->collide && at-- > 0))
                    o[k++] = s;
            cnt[l * Hkv + h] = k;
        }
    return SEER_OK;
}

static const seer_selector MAGICPIG = {pig_seq_new, pig_seq_free, pig_extend, pig_select};

/* splitmix64, then Box-Muller: Gaussian hyperplanes from a fixed seed. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float gaussian(uint64_t *s) {
    double u1 = ((next_u64(s) >> 11) + 1.0) / 9007199254740993.0, u2 = (next_u64(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

extern const seer_drafter_desc seer_drafter_magicpig_desc;

static seer_status magicpig_init(const seer_draft_env *env, const seer_spec_params *p, void **impl) {
    pig_cfg own;
    seer_drafter_settings(&seer_drafter_magicpig_desc, p, &own);
    if (own.bits < 1 || own.bits > 16 || own.tables < 1 || own.tables > 1024 || own.collide < 1 ||
        own.collide > own.tables || own.window < 0)
        return seer_err(SEER_ERR_INVALID_ARG,
                        "magicpig bits %d must be in [1, 16], tables %d in [1, 1024], collide %d in [1, tables], "
                        "window %d not negative",
                        own.bits, own.tables, own.collide, own.window);
    const seer_model_info *in = &env->model->info;
    const size_t n_planes = (size_t)in->n_layers * own.tables * own.bits * in->head_dim;
    pig_cfg *cf = malloc(sizeof *cf + n_planes * sizeof(float));
    if (!cf)
        return seer_err(SEER_ERR_OOM, "out of memory for MagicPIG's hyperplanes");
    *cf = own;
    cf->n_layers = in->n_layers, cf->Hkv = in->n_kv_heads, cf->H = in->n_heads, cf->Dh = in->head_dim;
    uint64_t rng = 0x5eedULL;
    for (size_t i = 0; i < n_planes; i++)
        cf->planes[i] = gaussian(&rng);
    seer_select_settings set = {.budget = cf->budget, .sinks = cf->sinks, .window = cf->window,
                                .draft_weights = p->draft_weights};
    return seer_select_init(env, set, &MAGICPIG, cf, impl);
}

static const seer_drafter_ops seer_drafter_magicpig = {
    .name = "magicpig",
    .init = magicpig_init,
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
    SEER_DRAFTER_READS(SEER_DRAFTER_BUDGET, offsetof(pig_cfg, budget)),
    SEER_DRAFTER_READS("spec-sinks", offsetof(pig_cfg, sinks)),
    {{.flag = "spec-pig-bits", .json = "pig_bits", .metavar = "K", .type = SEER_SPEC_OPT_INT, .def = 8, .lo = 1,
      .hi = 16, .help = "SimHash bits per MagicPIG table"},
     SEER_DRAFTER_OPT_EXT, offsetof(pig_cfg, bits)},
    {{.flag = "spec-pig-tables", .json = "pig_tables", .metavar = "L", .type = SEER_SPEC_OPT_INT, .def = 75,
      .lo = 1, .hi = 1024, .help = "MagicPIG hash tables"},
     SEER_DRAFTER_OPT_EXT, offsetof(pig_cfg, tables)},
    {{.flag = "spec-pig-collide", .json = "pig_collide", .metavar = "N", .type = SEER_SPEC_OPT_INT, .def = 2,
      .lo = 1, .hi = 1024, .help = "tables a key must share with the query to be sampled"},
     SEER_DRAFTER_OPT_EXT, offsetof(pig_cfg, collide)},
    {{.flag = "spec-pig-window", .json = "pig_window", .metavar = "W", .type = SEER_SPEC_OPT_INT, .def = 64,
      .lo = 0, .hi = 1 << 20, .help = "recent slots MagicPIG keeps visible"},
     SEER_DRAFTER_OPT_EXT, offsetof(pig_cfg, window)},
};

const seer_drafter_desc seer_drafter_magicpig_desc = {
    .name = "magicpig", .kind = SEER_SPEC_NONE, .ops = &seer_drafter_magicpig,
    .help = "self-draft through the keys colliding with the query in SimHash tables (MagicPIG)",
    .flags = SEER_DRAFTER_BUDGETED | SEER_DRAFTER_AUTO | SEER_DRAFTER_SPARSE_SELF | SEER_DRAFTER_TREE_BASE |
             SEER_DRAFTER_DRAFT_WEIGHTS,
    .options = OPTS, .n_options = (int)(sizeof OPTS / sizeof *OPTS),
};
