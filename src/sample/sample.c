/*
 * sample.c: logits -> probabilities -> token (seer_sampler_*), and the probability-vector
 * helpers the speculative verifier uses. The pipeline order and rules are documented once,
 * in sample.h, at seer_sampler_probs_with_history.
 *
 * Not for: acceptance tests of drafts (src/spec/), GPU sampling. CPU only, single-threaded;
 * a sampler must not be used from two threads at once (seer_sampler_probs writes into the
 * sampler's scratch even though the sampler is passed as const).
 *
 * Cost for V tokens: O(V) to copy and penalise, O(V log k) for top-k, softmax only over the
 * top-k survivors, and top-p sorts only the tokens above a mass threshold (O(V log V) in the
 * worst case of a flat distribution). With top-k off the V exponentials dominate (about a
 * millisecond for 150K tokens); with a small top-k a draw is a few passes over memory. No
 * allocation after seer_sampler_init.
 */
#include "sample/sample.h"

#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* repeat_last_n above this is refused rather than allocated: the history buffer is
 * 2 * repeat_last_n ids and no context is this long. */
#define SEER_SAMPLE_MAX_REPEAT_LAST_N (1 << 24)

typedef struct {
    float v;    /* a logit, later an unnormalised probability */
    int32_t id;
} cand;

struct seer_sampler {
    seer_sampler_params params;
    int n_vocab;      /* V */
    seer_rng rng;
    int32_t *hist;    /* [hist_cap] accepted ids, oldest first; n_hist valid */
    int n_hist;
    int hist_cap;     /* 2 * repeat_last_n (>= 1): shifting once per repeat_last_n accepts */
    float *probs;     /* [V] where seer_sampler_sample puts probs when the caller gives none */
    void *scratch;    /* seer_sampler_scratch_bytes(V) */
    seer_logit_bias *bias; /* [params.n_logit_bias] the sampler's copy */
};

seer_sampler_params seer_sampler_default_params(void) {
    seer_sampler_params p;
    memset(&p, 0, sizeof p); /* penalties and logit_bias off */
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.seed = 0; /* a fixed seed like any other: runs are reproducible by default */
    return p;
}

seer_status seer_sampler_params_check(const seer_sampler_params *p) {
    if (!p)
        return seer_err(SEER_ERR_INVALID_ARG, "sampler: params is NULL");
    /* Written so that NaN fails every test. */
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return seer_err(SEER_ERR_INVALID_ARG,
                        "sampler: temperature must be finite and >= 0 (got %g)",
                        (double)p->temperature);
    if (p->top_k < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "sampler: top_k must be >= 0 (got %d)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return seer_err(SEER_ERR_INVALID_ARG, "sampler: top_p must be in (0, 1] (got %g)",
                        (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return seer_err(SEER_ERR_INVALID_ARG, "sampler: min_p must be in [0, 1] (got %g)",
                        (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        return seer_err(SEER_ERR_INVALID_ARG,
                        "sampler: repeat_penalty must be finite and > 0 (got %g)",
                        (double)p->repeat_penalty);
    if (!isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return seer_err(SEER_ERR_INVALID_ARG, "sampler: frequency_penalty and presence_penalty must be finite "
                        "(got %g, %g)", (double)p->frequency_penalty, (double)p->presence_penalty);
    if (p->n_logit_bias < 0 || p->n_logit_bias > SEER_MAX_LOGIT_BIAS || (p->n_logit_bias && !p->logit_bias))
        return seer_err(SEER_ERR_INVALID_ARG, "sampler: logit_bias must hold 0..%d entries (got %d)",
                        SEER_MAX_LOGIT_BIAS, p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++)
        if (!(p->logit_bias[i].bias >= -100.0f && p->logit_bias[i].bias <= 100.0f))
            return seer_err(SEER_ERR_INVALID_ARG, "sampler: logit_bias of token %d must be in [-100, 100] (got %g)",
                            (int)p->logit_bias[i].token, (double)p->logit_bias[i].bias);
    if (p->repeat_last_n < 0 || p->repeat_last_n > SEER_SAMPLE_MAX_REPEAT_LAST_N)
        return seer_err(SEER_ERR_INVALID_ARG, "sampler: repeat_last_n must be in [0, %d] (got %d)",
                        SEER_SAMPLE_MAX_REPEAT_LAST_N, p->repeat_last_n);
    return SEER_OK;
}

seer_status seer_logit_bias_check_distinct(const seer_sampler_params *p) {
    for (int i = 0; i < p->n_logit_bias; i++)
        for (int j = 0; j < i; j++)
            if (p->logit_bias[i].token == p->logit_bias[j].token)
                return seer_err(SEER_ERR_INVALID_ARG, "sampler: logit_bias lists token %d twice",
                                (int)p->logit_bias[i].token);
    return SEER_OK;
}

size_t seer_sampler_scratch_bytes(int n_vocab) {
    if (n_vocab <= 0)
        return 0;
    /* cand [V], working logits [V], penalty marks [V]; cand first keeps everything aligned */
    return (size_t)n_vocab * (sizeof(cand) + sizeof(float) + sizeof(uint8_t));
}

/* ---- The stateless pipeline ----------------------------------------------------------- */

/* a is a worse candidate than b: smaller value, or equal value and higher id. */
static int cand_worse(cand a, cand b) { return a.v < b.v || (a.v == b.v && a.id > b.id); }

/* Min-heap on "worse": the root is the worst kept candidate. */
static void heap_sift_down(cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && cand_worse(h[l], h[m]))
            m = l;
        if (r < n && cand_worse(h[r], h[m]))
            m = r;
        if (m == i)
            return;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* The k best of x [n] (1 <= k < n) into c [k], in heap order. */
static void select_top_k(const float *x, int n, int k, cand *c) {
    for (int i = 0; i < k; i++) {
        c[i].v = x[i];
        c[i].id = i;
    }
    for (int i = k / 2 - 1; i >= 0; i--)
        heap_sift_down(c, k, i);
    int i = k;
    while (i < n) {
        /* Once the heap holds good values almost nothing beats its root; a branch-free test
         * of a whole block (which the compiler vectorises) skips those blocks cheaply. */
        if (i + 32 <= n) {
            const float thr = c[0].v;
            int any = 0;
            for (int j = 0; j < 32; j++)
                any |= x[i + j] > thr;
            if (!any) {
                i += 32;
                continue;
            }
        }
        const int end = i + 32 < n ? i + 32 : n;
        for (; i < end; i++) {
            /* i is above every id in the heap, so an equal value loses: strictly greater */
            if (x[i] > c[0].v) {
                c[0].v = x[i];
                c[0].id = i;
                heap_sift_down(c, k, 0);
            }
        }
    }
}

/* Descending value, ascending id: the order top-p walks in. */
static int cand_cmp_desc(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Keeps the entries of c [n] with v >= t, in order; returns how many. */
static int keep_at_least(cand *c, int n, double t) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if ((double)c[i].v >= t)
            c[m++] = c[i];
    return m;
}

static double mass_at_least(const cand *c, int n, double t) {
    double s = 0;
    for (int i = 0; i < n; i++)
        if ((double)c[i].v >= t)
            s += c[i].v;
    return s;
}

/* Top-p over c [n] (unnormalised probabilities, possibly already cut by min-p, which keeps
 * a prefix of the same order): the shortest prefix in descending order whose mass reaches
 * top_p * z, where z is the mass before min-p, or all of c if it never does. Returns the
 * kept count; c is reordered. */
static int top_p_filter(cand *c, int n, double z, float top_p) {
    const double target = (double)top_p * z;
    /* Sorting everything is wasteful for a large V: the tokens above a threshold t form a
     * prefix of the sorted order, so if their mass already reaches the target the answer
     * lies among them. Tokens below t carry less than n * t, so t = (1 - top_p) z / n
     * always works when nothing was cut before; the first, bolder guess keeps at most
     * 64 / (1 - top_p) tokens and usually works on real logits. The margin covers the
     * rounding difference between summing in id order here and in sorted order below
     * (< n * 2^-52 * z, far below 1e-9 z for any vocabulary). */
    if (n > 256) {
        const double margin = 1e-9 * z;
        const double guesses[2] = {(1.0 - top_p) * z / 64.0, (1.0 - top_p) * z / n};
        for (int g = 0; g < 2; g++) {
            if (mass_at_least(c, n, guesses[g]) >= target + margin) {
                n = keep_at_least(c, n, guesses[g]);
                break;
            }
        }
    }
    qsort(c, (size_t)n, sizeof *c, cand_cmp_desc);
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += c[i].v;
        if (cum >= target)
            return i + 1;
    }
    return n;
}

/* The pipeline of seer_sampler_probs_with_history. Also leaves the kept set in the scratch's
 * cand [0, n) (any order) and returns n, so that a draw need not scan all V probs. */
static int probs_pipeline(const seer_sampler_params *p, const int32_t *history, int n_history,
                          const uint32_t *mask, const float *logits, float *probs, int V, void *scratch) {
    cand *c = (cand *)scratch;
    float *work = (float *)(c + V);
    uint8_t *mark = (uint8_t *)(work + V);

    for (int i = 0; i < V; i++) {
        const float x = logits[i];
        work[i] = x == x ? x : -INFINITY; /* NaN; written so that it vectorises */
    }
    /* logit_bias, then the constraint's mask: both before the penalties, which keep -inf */
    for (int i = 0; i < p->n_logit_bias; i++) {
        const int32_t id = p->logit_bias[i].token;
        if (id >= 0 && id < V)
            work[id] = work[id] + p->logit_bias[i].bias;
    }
    if (mask)
        for (int i = 0; i < V; i++)
            if (!(mask[i >> 5] >> (i & 31) & 1))
                work[i] = -INFINITY;

    /* The penalties (penalty.c): the repetition penalty as in the CTRL paper (Keskar et al.
     * 2019) and llama.cpp, each distinct id once however often it occurs in the window, then
     * frequency and presence by its count. The counts and the window's ids lie in cand, filled
     * later. */
    {
        int32_t *count = (int32_t *)c, *ids = (int32_t *)c + V;
        const int m = seer_penalty_window(p, history, n_history, V, mark, count, ids);
        for (int i = 0; i < m; i++)
            work[ids[i]] = seer_penalty_apply(work[ids[i]], p->repeat_penalty, seer_penalty_sub(p, count[ids[i]]));
    }

    if (!(p->temperature > 0.0f)) {
        c[0].id = seer_argmax(work, V);
        c[0].v = 1.0f;
        seer_probs_one_hot(probs, V, c[0].id);
        return 1;
    }

    int n;
    if (p->top_k > 0 && p->top_k < V) {
        n = p->top_k;
        select_top_k(work, V, n, c);
    } else {
        n = V;
        for (int i = 0; i < V; i++) {
            c[i].v = work[i];
            c[i].id = i;
        }
    }

    /* Softmax numerators. The max gets exactly 1, which also gives sensible limits when the
     * max is +inf (mass shared by the +inf tokens) or every logit is -inf (uniform). */
    float m = c[0].v;
    for (int i = 1; i < n; i++)
        if (c[i].v > m)
            m = c[i].v;
    const double inv_t = 1.0 / (double)p->temperature;
    double z = 0;
    float e_max = 0;
    for (int i = 0; i < n; i++) {
        const float e = c[i].v == m ? 1.0f : (float)exp(((double)c[i].v - (double)m) * inv_t);
        c[i].v = e;
        z += e;
        if (e > e_max)
            e_max = e;
    }

    /* min-p and top-p both keep a prefix of the descending order, so min-p may go first
     * (it is a cheap linear cut that usually leaves a handful of tokens to sort) as long as
     * top-p measures its mass against z, the total before min-p. */
    if (p->min_p > 0.0f)
        n = keep_at_least(c, n, (double)p->min_p * (double)e_max);
    if (p->top_p < 1.0f)
        n = top_p_filter(c, n, z, p->top_p);

    double zk = 0;
    for (int i = 0; i < n; i++)
        zk += c[i].v;
    memset(probs, 0, (size_t)V * sizeof *probs);
    const double inv_z = 1.0 / zk;
    for (int i = 0; i < n; i++)
        probs[c[i].id] = (float)((double)c[i].v * inv_z);
    return n;
}

void seer_sampler_probs_with_history(const seer_sampler_params *p, const int32_t *history,
                                     int n_history, const float *logits, float *probs,
                                     int n_vocab, void *scratch) {
    if (n_vocab > 0)
        probs_pipeline(p, history, n_history, NULL, logits, probs, n_vocab, scratch);
}

void seer_sampler_probs_masked(const seer_sampler_params *p, const int32_t *history, int n_history,
                               const uint32_t *mask, const float *logits, float *probs, int n_vocab,
                               void *scratch) {
    if (n_vocab > 0)
        probs_pipeline(p, history, n_history, mask, logits, probs, n_vocab, scratch);
}

static int cand_cmp_id(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

/* ---- The sampler object ---------------------------------------------------------------- */

seer_status seer_sampler_init(seer_sampler_params params, int n_vocab, seer_sampler **out) {
    if (!out)
        return seer_err(SEER_ERR_INVALID_ARG, "sampler: out is NULL");
    *out = NULL;
    if (n_vocab <= 0)
        return seer_err(SEER_ERR_INVALID_ARG, "sampler: n_vocab must be > 0 (got %d)", n_vocab);
    SEER_TRY(seer_sampler_params_check(&params));
    SEER_TRY(seer_logit_bias_check_distinct(&params));

    seer_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return seer_err(SEER_ERR_OOM, "sampler: out of memory");
    s->params = params;
    if (params.n_logit_bias > 0) { /* the sampler's own copy */
        s->bias = seer_malloc_array((size_t)params.n_logit_bias, sizeof *s->bias);
        if (!s->bias) {
            free(s);
            return seer_err(SEER_ERR_OOM, "sampler: out of memory");
        }
        memcpy(s->bias, params.logit_bias, (size_t)params.n_logit_bias * sizeof *s->bias);
        s->params.logit_bias = s->bias;
    }
    s->n_vocab = n_vocab;
    s->hist_cap = params.repeat_last_n > 0 ? 2 * params.repeat_last_n : 1;
    s->hist = seer_malloc_array((size_t)s->hist_cap, sizeof *s->hist);
    s->probs = seer_malloc_array((size_t)n_vocab, sizeof *s->probs);
    s->scratch = seer_malloc_array(seer_sampler_scratch_bytes(n_vocab), 1);
    if (!s->hist || !s->probs || !s->scratch) {
        seer_sampler_free(s);
        return seer_err(SEER_ERR_OOM, "sampler: out of memory for a vocabulary of %d", n_vocab);
    }
    seer_rng_seed(&s->rng, params.seed);
    *out = s;
    return SEER_OK;
}

void seer_sampler_free(seer_sampler *s) {
    if (!s)
        return;
    free(s->hist);
    free(s->probs);
    free(s->scratch);
    free(s->bias);
    free(s);
}

void seer_sampler_accept(seer_sampler *s, int32_t token) {
    if (!s)
        return;
    const int w = s->params.repeat_last_n;
    if (w <= 0)
        return;
    if (s->n_hist == s->hist_cap) {
        /* keep the w - 1 newest; amortised O(1) per accept */
        memmove(s->hist, s->hist + (s->n_hist - (w - 1)), (size_t)(w - 1) * sizeof *s->hist);
        s->n_hist = w - 1;
    }
    s->hist[s->n_hist++] = token;
}

/* Back to the state seer_sampler_init left: empty history and the generator reseeded. */
void seer_sampler_reset(seer_sampler *s) {
    if (!s)
        return;
    s->n_hist = 0;
    seer_rng_seed(&s->rng, s->params.seed);
}

void seer_sampler_probs(const seer_sampler *s, const float *logits, float *probs) {
    if (!s || !logits || !probs)
        return;
    seer_sampler_probs_with_history(&s->params, s->hist, s->n_hist, logits, probs, s->n_vocab,
                                    s->scratch);
}

/* Greedy draws no uniform, so switching temperature does not shift other streams. The token
 * is not added to the penalty history: the caller decides what was emitted (speculation may
 * emit a different token) and calls seer_sampler_accept. */
int32_t seer_sampler_sample(seer_sampler *s, const float *logits, float *probs) {
    if (!s || !logits)
        return -1;
    float *out = probs ? probs : s->probs;
    const int V = s->n_vocab;
    int n = probs_pipeline(&s->params, s->hist, s->n_hist, NULL, logits, out, V, s->scratch);
    cand *c = (cand *)s->scratch;
    if (!(s->params.temperature > 0.0f))
        return c[0].id;
    const double u = seer_rng_uniform(&s->rng);
    if (n > V / 16)
        return seer_sample_from_probs(out, V, u);
    /* The same walk as seer_sample_from_probs (id order, same sums, same fallback), over
     * the kept ids only: every other entry of out is zero and adds nothing. */
    qsort(c, (size_t)n, sizeof *c, cand_cmp_id);
    double cum = 0;
    int32_t last = c[0].id;
    for (int i = 0; i < n; i++) {
        const float x = out[c[i].id];
        if (!(x > 0.0f))
            continue;
        cum += x;
        last = c[i].id;
        if (u < cum)
            return last;
    }
    return last;
}

double seer_sampler_uniform(seer_sampler *s) { return s ? seer_rng_uniform(&s->rng) : 0.0; }

seer_rng *seer_sampler_rng(seer_sampler *s) { return &s->rng; }

const seer_sampler_params *seer_sampler_get_params(const seer_sampler *s) { return &s->params; }

int seer_sampler_n_vocab(const seer_sampler *s) { return s->n_vocab; }

int seer_sampler_history(const seer_sampler *s, const int32_t **tokens) {
    const int w = s->params.repeat_last_n;
    const int n = s->n_hist < w ? s->n_hist : w;
    *tokens = s->hist + (s->n_hist - n);
    return n;
}

/* ---- Helpers over probability vectors -------------------------------------------------- */

int32_t seer_sample_from_probs(const float *probs, int n, double u) {
    double cum = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (!(probs[i] > 0.0f))
            continue;
        cum += probs[i];
        last = i;
        if (u < cum)
            return i;
    }
    return last;
}

int32_t seer_argmax(const float *x, int n) {
    if (n <= 0)
        return -1;
    int32_t best = -1;
    float bv = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i]))
            continue;
        if (best < 0 || x[i] > bv) {
            best = i;
            bv = x[i];
        }
    }
    return best < 0 ? 0 : best;
}

static float residual_at(const float *p, const float *q, int i) {
    const float d = p[i] - q[i];
    return d > 0.0f ? d : 0.0f; /* NaN -> 0 */
}

int32_t seer_sample_residual(const float *p, const float *q, int n, double u, float *scratch) {
    double total = 0;
    for (int i = 0; i < n; i++) {
        const float d = residual_at(p, q, i);
        if (scratch)
            scratch[i] = d;
        total += d;
    }
    if (!(total > 0))
        return seer_sample_from_probs(p, n, u);
    /* u scaled by the total instead of normalising: one rounding fewer */
    const double target = u * total;
    double cum = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        const float d = scratch ? scratch[i] : residual_at(p, q, i);
        if (!(d > 0.0f))
            continue;
        cum += d;
        last = i;
        if (target < cum)
            return i;
    }
    return last;
}

void seer_probs_one_hot(float *probs, int n, int32_t tok) {
    if (n <= 0)
        return;
    memset(probs, 0, (size_t)n * sizeof *probs);
    if (tok >= 0 && tok < n)
        probs[tok] = 1.0f;
}
