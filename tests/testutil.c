/* testutil.c: see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int g_n_skipped;

void tu_note_skip(void) { g_n_skipped++; }

int tu_group_result(int n_failed) {
    if (n_failed)
        return n_failed < TU_SKIP_CODE ? n_failed : 1; /* never mistaken for a skip */
    return g_n_skipped ? TU_SKIP_CODE : 0;
}

const char *tu_data_path(const char *rel) {
    static char buf[4096];
    const char *env = getenv("SEER_DATA_DIR");
    snprintf(buf, sizeof buf, "%s/%s", env && env[0] ? env : SEER_DATA_DIR, rel);
    return buf;
}

const char *tu_tmp_path(const char *name) {
    static char dir[256];
    static char buf[4][512];
    static int k;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/seer-test-%d", (int)getpid());
        mkdir(dir, 0700);
    }
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

uint64_t tu_rand_u64(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

float tu_rand_uniform(uint64_t *s) { return (float)((tu_rand_u64(s) >> 40) / (double)(1 << 24)) * 2.f - 1.f; }

void tu_fill_random(float *x, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++)
        x[i] = tu_rand_uniform(s);
}

double tu_rel_err(const float *a, const float *b, size_t n) {
    double m = 1, e = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(b[i]) > m)
            m = fabs(b[i]);
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) /* NaN counts as infinite error */
            e = isnan(d) ? INFINITY : d;
    }
    return e / m;
}

uint8_t *tu_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* one byte more, a NUL after the data, so that a text file reads as a C string */
    uint8_t *b = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n > 0 ? n : 0] = 0;
    fclose(f);
    if (b)
        *size = (size_t)n;
    return b;
}

int tu_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, size, f);
    fclose(f);
    return w == size ? 0 : -1;
}

/* ---- generation ------------------------------------------------------------------------ */

seer_model *tu_load_cpu(const char *path) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_load(path, mp, &m));
    return m;
}

seer_model *tu_load_tp(const char *path, seer_backend_kind kind, int tp) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = kind;
    mp.n_threads = 2;
    mp.tp = tp;
    seer_model *m = NULL;
    if (seer_model_load(path, mp, &m) != SEER_OK)
        fail_msg("loading %s with tp %d: %s", path, tp, seer_last_error());
    return m;
}

void tu_spec_set(seer_spec_params *sp, const char *name, double value) {
    if (seer_spec_set_num(sp, name, value) != SEER_OK)
        fail_msg("setting %s to %g: %s", name, value, seer_last_error());
}

double tu_spec_get(const seer_spec_params *sp, const char *name) {
    double v = 0;
    if (seer_spec_get(sp, name, &v) != SEER_OK)
        fail_msg("reading %s: %s", name, seer_last_error());
    return v;
}

seer_spec_params tu_spec(seer_spec_kind kind, int gamma, int budget) {
    seer_spec_params sp = seer_spec_default_params();
    sp.kind = kind;
    sp.gamma = gamma;
    if (budget > 0) /* 0: kinds that read no budget */
        tu_spec_set(&sp, "budget", budget);
    tu_spec_set(&sp, "sinks", 4);
    tu_spec_set(&sp, "chunk", 4);
    tu_spec_set(&sp, "snap_window", 4);
    tu_spec_set(&sp, "refresh_every", 3);
    return sp;
}

void tu_prefill_logits(seer_model *m, const int32_t *tok, int n, float *logits, const uint8_t *cap, float *q) {
    assert_true(n >= 1 && n <= 128);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch_max = 128;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_seq_id sq;
    ASSERT_OK(seer_seq_new(c, &sq));
    seer_seq_id seqs[128];
    int32_t pos[128];
    uint8_t want[128];
    for (int i = 0; i < n; i++) {
        seqs[i] = sq;
        pos[i] = i;
        want[i] = 1;
    }
    seer_batch b = {.n_tokens = n, .token = tok, .seq = seqs, .pos = pos, .logits = want,
                    .capture = q ? cap : NULL, .queries = q};
    ASSERT_OK(seer_decode(c, &b, logits));
    seer_context_free(c);
}

seer_sampler_params tu_greedy(void) {
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 0;
    return sp;
}

seer_spec_stats tu_gen_run(seer_model *m, seer_spec_params spec, const int32_t *prompts, int stride,
                           const int *plen, int n, int max_new, seer_sampler_params sp, tu_gen_ctx cx,
                           tu_output *out, seer_spec_auto_stats *as) {
    assert_true(n >= 1 && n <= 8);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = cx.n_ctx;
    cp.n_seq_max = n;
    cp.n_batch_max = cx.n_batch_max;
    cp.page_size = cx.page_size;
    cp.kv_quant_bits = cx.kv_quant_bits;
    cp.kv_type = cx.kv_type;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_gen *g = NULL;
    ASSERT_OK(seer_gen_init(c, spec, &g));
    if (cx.synthetic_accept > 0 || cx.synthetic_trace)
        ASSERT_OK(seer_gen_set_synthetic(g, cx.synthetic_accept, cx.synthetic_trace));
    int h[8];
    for (int i = 0; i < n; i++) {
        seer_sampler_params spi = sp;
        spi.seed = sp.seed + i;
        ASSERT_OK(seer_gen_add(g, prompts + (size_t)i * stride, plen[i], max_new, spi, false, &h[i]));
    }
    int active = 1;
    for (int it = 0; active && it < 10000; it++)
        ASSERT_OK(seer_gen_step(g, &active));
    assert_int_equal(active, 0);
    for (int i = 0; i < n; i++) {
        const int32_t *ids;
        out[i].n = seer_gen_output(g, h[i], &ids);
        assert_true(out[i].n > 0 && out[i].n <= 600);
        memcpy(out[i].ids, ids, sizeof(int32_t) * out[i].n);
        assert_true(seer_gen_finished(g, h[i]));
    }
    seer_spec_stats st;
    seer_gen_stats(g, &st);
    if (as)
        seer_gen_auto_stats(g, as);
    seer_gen_free(g);
    assert_int_equal(seer_kv_free_pages(c), n * ((cx.n_ctx + cx.page_size - 1) / cx.page_size));
    seer_context_free(c);
    return st;
}

void tu_assert_same(const tu_output *a, const tu_output *b, const char *what) {
    if (a->n != b->n)
        fail_msg("%s: %d tokens vs %d plain", what, a->n, b->n);
    for (int i = 0; i < a->n; i++)
        if (a->ids[i] != b->ids[i])
            fail_msg("%s: token %d is %d, plain decoding gave %d", what, i, a->ids[i], b->ids[i]);
}

static int parse_ids(char *s, int32_t *out, int cap) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ","))
        out[n++] = (int32_t)atoi(tok);
    return n;
}

int tu_read_golden(int32_t prompts[5][64], int *plen, tu_output *gold) {
    size_t sz;
    char *tsv = (char *)tu_read_file(tu_data_path("golden/stories260K-greedy.tsv"), &sz);
    assert_non_null(tsv);
    int n = 0;
    char *save = NULL;
    strtok_r(tsv, "\n", &save); /* the header */
    for (char *line = strtok_r(NULL, "\n", &save); line && n < 5; line = strtok_r(NULL, "\n", &save)) {
        char *f1 = strchr(line, '\t') + 1;
        char *f2 = strchr(f1, '\t');
        *f2++ = 0;
        char *f3 = strchr(f2, '\t');
        *f3 = 0;
        plen[n] = parse_ids(f1, prompts[n], 64);
        gold[n].n = parse_ids(f2, gold[n].ids, 600);
        n++;
    }
    free(tsv);
    return n;
}

/* ---- speculative sampling in distribution ------------------------------------------- */

/* Upper critical value of chi-square with k degrees of freedom at tail probability 1e-6
 * (Wilson-Hilferty; z = 4.753). */
double tu_chi2_crit(int k) {
    double z = 4.753, a = 2.0 / (9.0 * k);
    double c = 1 - a + z * sqrt(a);
    return k * c * c * c;
}

/* Exact joint distribution of the first three emitted tokens (the first from the prefill,
 * the next two from the first speculation round), computed from the target alone. */
static int exact_cells(seer_model *m, const int32_t *prompt, int n, seer_sampler_params sp, seer_kv_type kv_type,
                       tu_cell *cells) {
    int V = seer_n_vocab(m);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    cp.kv_type = kv_type;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_sampler *smp;
    ASSERT_OK(seer_sampler_init(sp, V, &smp));
    float *lg = malloc(sizeof(float) * V), *p0 = malloc(sizeof(float) * V), *p1 = malloc(sizeof(float) * V),
          *p2 = malloc(sizeof(float) * V);
    int nc = 0;
    seer_seq_id q;
    ASSERT_OK(seer_seq_new(c, &q));
    int32_t toks[64];
    memcpy(toks, prompt, sizeof(int32_t) * n);
    /* probability vector after toks[0..len) */
    #define PROBS(len, out)                                                                   \
        do {                                                                                  \
            ASSERT_OK(seer_seq_rewind(c, q, 0));                                              \
            int32_t sq[64], pos[64];                                                          \
            uint8_t w[64] = {0};                                                              \
            for (int i_ = 0; i_ < (len); i_++)                                                \
                sq[i_] = q, pos[i_] = i_;                                                     \
            w[(len)-1] = 1;                                                                   \
            seer_batch b_ = {.n_tokens = (len), .token = toks, .seq = sq, .pos = pos, .logits = w}; \
            ASSERT_OK(seer_decode(c, &b_, lg));                                               \
            seer_sampler_probs(smp, lg, out);                                                 \
        } while (0)
    PROBS(n, p0);
    for (int a = 0; a < V; a++) {
        if (p0[a] == 0)
            continue;
        toks[n] = a;
        PROBS(n + 1, p1);
        for (int b = 0; b < V; b++) {
            if (p1[b] == 0)
                continue;
            toks[n + 1] = b;
            PROBS(n + 2, p2);
            for (int cc = 0; cc < V; cc++)
                if (p2[cc] > 0) {
                    cells[nc].t[0] = a, cells[nc].t[1] = b, cells[nc].t[2] = cc;
                    cells[nc++].p = (double)p0[a] * p1[b] * p2[cc];
                }
        }
    }
    #undef PROBS
    free(lg), free(p0), free(p1), free(p2);
    seer_sampler_free(smp);
    seer_context_free(c);
    return nc;
}

static double chi2_of_runs(const tu_dist *d, seer_spec_params spec, int n_runs) {
    seer_model *m = d->m;
    const tu_cell *cells = d->cells;
    const int nc = d->nc, max_new = d->max_new;
    seer_sampler_params sp = d->sp;
    long *count = calloc(nc, sizeof(long));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    cp.kv_quant_bits = d->kv_bits;
    cp.kv_type = d->kv_type;
    cp.n_batch_max = 32;
    seer_context *c;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_gen *g;
    ASSERT_OK(seer_gen_init(c, spec, &g));
    long other = 0;
    for (int r = 0; r < n_runs; r++) {
        sp.seed = 1000 + (uint64_t)r;
        int h, active = 1;
        ASSERT_OK(seer_gen_add(g, d->prompt, 24, max_new, sp, true, &h));
        while (active)
            ASSERT_OK(seer_gen_step(g, &active));
        const int32_t *ids;
        assert_int_equal(seer_gen_output(g, h, &ids), max_new);
        int k = 0;
        while (k < nc && memcmp(cells[k].t, ids, sizeof cells[k].t))
            k++;
        if (k < nc)
            count[k]++;
        else
            other++;
        seer_gen_remove(g, h); /* the handle and its pages are reused by the next run */
    }
    seer_gen_free(g);
    seer_context_free(c);
    assert_int_equal(other, 0); /* nothing outside the target's support */
    double chi = 0;
    int used = 0;
    double pool_e = 0, pool_o = 0;
    for (int k = 0; k < nc; k++) { /* pool cells with small expectations */
        double e = cells[k].p * n_runs;
        if (e < 5) {
            pool_e += e, pool_o += count[k];
            continue;
        }
        chi += (count[k] - e) * (count[k] - e) / e;
        used++;
    }
    if (pool_e > 0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / (pool_e > 1 ? pool_e : 1);
        used++;
    }
    free(count);
    return chi / tu_chi2_crit(used - 1); /* < 1 passes */
}

void tu_dist_init(tu_dist *d, seer_model *m) {
    memset(d, 0, sizeof *d);
    d->m = m;
    uint64_t rng = 4;
    for (int i = 0; i < 24; i++)
        d->prompt[i] = i >= 6 ? d->prompt[i - 6] : (int32_t)(tu_rand_u64(&rng) % (uint64_t)seer_n_vocab(m));
    d->sp = seer_sampler_default_params();
    d->sp.temperature = 0.9f;
    d->sp.top_k = 4;
    d->sp.top_p = 0.9f;
    d->sp.min_p = 0.02f;
    d->nc = exact_cells(m, d->prompt, 24, d->sp, SEER_KV_FULL, d->cells);
    assert_true(d->nc >= 8);
    d->max_new = 3;
}

void tu_dist_set_kv_type(tu_dist *d, seer_kv_type t) {
    d->kv_type = t;
    d->nc = exact_cells(d->m, d->prompt, 24, d->sp, t, d->cells);
    assert_true(d->nc >= 8);
}

double tu_dist_expect(const tu_dist *d, seer_spec_params spec, int n_runs, int *wrong_rule, const char *what,
                      ...) {
    char label[256];
    va_list ap;
    va_start(ap, what);
    vsnprintf(label, sizeof label, what, ap);
    va_end(ap);
    if (wrong_rule)
        *wrong_rule = 1;
    double r = chi2_of_runs(d, spec, n_runs);
    if (wrong_rule)
        *wrong_rule = 0;
    print_message("%s: chi2 / critical = %.3f over %d cells\n", label, r, d->nc);
    if (wrong_rule && !(r > 1))
        fail_msg("%s: the wrong rule passes the test (%.3f)", label, r);
    if (!wrong_rule && !(r < 1))
        fail_msg("%s: fails the test (%.3f)", label, r);
    return r;
}

void tu_feed_cuts(seer_context *c, const int32_t *toks, int n, const int *cuts, int n_cuts, int upto,
                  seer_seq_id other, float *out, int V) {
    seer_seq_id q;
    ASSERT_OK(seer_seq_new(c, &q));
    int32_t tok[260], pos[260];
    seer_seq_id sq[260];
    uint8_t lg[260], pr[260];
    float *buf = malloc(sizeof(float) * 260 * (size_t)V);
    assert_non_null(buf);
    for (int at = 0, k = 0; at < n; k++) {
        int len = cuts[k < n_cuts ? k : n_cuts - 1], T = 0;
        len = len < n - at ? len : n - at;
        if (other >= 0) { /* the other sequence's decode step first */
            tok[T] = 5 + k % 7, sq[T] = other, pos[T] = seer_seq_len(c, other), lg[T] = 0, pr[T] = 0;
            T++;
        }
        for (int i = 0; i < len; i++, T++)
            tok[T] = toks[at + i], sq[T] = q, pos[T] = at + i, lg[T] = 1, pr[T] = at + i < upto;
        memset(buf, 0xff, sizeof(float) * (size_t)len * V);
        seer_batch b = {.n_tokens = T, .token = tok, .seq = sq, .pos = pos, .logits = lg, .prompt = pr};
        ASSERT_OK(seer_decode(c, &b, buf));
        memcpy(out + (size_t)at * V, buf, sizeof(float) * (size_t)len * V);
        at += len;
    }
    free(buf);
    seer_seq_free(c, q);
}
