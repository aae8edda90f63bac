/*
 * cmd_bench.c: `seer bench`: decode speed against the memory-bandwidth floor
 * (docs/performance.md) over a sweep of context depth L, batch size B and speculation
 * settings, on a synthetic model at a real shape (weights generated on the device) or a GGUF.
 *
 * Every point starts from B sequences whose caches hold L slots of synthetic KV (timing does
 * not depend on the values, and filling 128K real tokens would take longer than the run).
 * Plain decode: one token per sequence per step through seer_decode, the logits of every
 * sequence downloaded into the backend's host memory (seer_host_alloc: page-locked on a GPU,
 * as llama.cpp's output buffer is; a step is not done before its logits are on the host), the sequences
 * rewound after each step so every step sees exactly L cached slots; median over --steps
 * after --warmup, the device synchronised before each clock reading.
 * Speculation: on random weights real acceptance means nothing, so every speculative run
 * uses the generator's SYNTHETIC ACCEPTANCE (each draft token accepted independently with
 * probability alpha): the real drafting, ragged verification and rollback run, their speed
 * is measured, and the output says so on every line. Plain decoding through the same
 * generator runs right before it on forks of the same sequences, so the speedup compares
 * like with like; the cost-model projection (§1 of the speculative-decoding reference) comes
 * from the measured per-phase times.
 * With --peer, another implementation's decode and prefill of the same model
 * (scripts/peer-llamacpp.sh for llama.cpp, scripts/hf_peer.py) is read from its file and
 * shown beside seer's at the same (L, B) and prompt size (bench_peer.c).
 * Not for: acceptance of real models (seer generate, scripts/spec-acceptance.sh).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"
#include "cli.h"
#include "cuda_env.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Parses "a,b,c" into out (at most BENCH_MAX_LIST values in [lo, hi]). */
static bool parse_int_list(const char *flag, const char *s, long long lo, long long hi, int *out,
                           int *n) {
    char buf[1024];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "seer: %s: list too long\n", flag);
        return false;
    }
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long v;
        if (*n == BENCH_MAX_LIST) {
            fprintf(stderr, "seer: %s: at most %d values\n", flag, BENCH_MAX_LIST);
            return false;
        }
        if (!cli_int(flag, tok, lo, hi, &v))
            return false;
        out[(*n)++] = (int)v;
    }
    if (*n == 0) {
        fprintf(stderr, "seer: %s: empty list\n", flag);
        return false;
    }
    return true;
}

static bool parse_spec_list(const char *s, bench_opts *o) {
    char buf[1024];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "seer: --spec: list too long\n");
        return false;
    }
    snprintf(buf, sizeof buf, "%s", s);
    o->n_spec = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        seer_spec_kind k;
        if (seer_spec_kind_parse(tok, &k) != SEER_OK) {
            fprintf(stderr, "seer: --spec: %s\n", seer_last_error());
            return false;
        }
        if (k == SEER_SPEC_QUANTKV) {
            fprintf(stderr, "seer: --spec: '%s' needs the KV copy at context creation, which seer bench does not make\n", tok);
            return false;
        }
        if (o->n_spec == BENCH_MAX_LIST) {
            fprintf(stderr, "seer: --spec: at most %d values\n", BENCH_MAX_LIST);
            return false;
        }
        if (k != SEER_SPEC_NONE) /* plain decoding is measured at every point anyway */
            o->spec[o->n_spec++] = k;
        for (int i = 0; i + 1 < o->n_spec; i++)
            if (o->spec[i] == k) {
                fprintf(stderr, "seer: --spec: '%s' twice\n", tok);
                return false;
            }
    }
    return true;
}

/* --spec-weights: none and at most one quantised type, each once. */
static bool parse_weights_list(const char *s, bench_opts *o) {
    char buf[256];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "seer: --spec-weights: list too long\n");
        return false;
    }
    snprintf(buf, sizeof buf, "%s", s);
    o->n_dweights = 0;
    o->spec_weights = NULL;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const bool q = strcmp(tok, "none") != 0;
        if (q && strcmp(tok, "q8_0") && strcmp(tok, "q4_0")) {
            fprintf(stderr, "seer: --spec-weights: '%s' is not one of none, q8_0, q4_0\n", tok);
            return false;
        }
        for (int i = 0; i < o->n_dweights; i++)
            if (o->dweights[i] == q) {
                fprintf(stderr, "seer: --spec-weights: %s\n", q ? "one quantised type at most" : "'none' twice");
                return false;
            }
        if (q)
            o->spec_weights = strcmp(tok, "q8_0") ? "q4_0" : "q8_0";
        o->dweights[o->n_dweights++] = q;
    }
    if (o->n_dweights == 0) {
        fprintf(stderr, "seer: --spec-weights: empty list\n");
        return false;
    }
    return true;
}

/* The list options of the table (cli_table.c). */
bool bench_opt_ctx_list(const char *a, cli_common *c, void *o) {
    return parse_int_list("--ctx-list", a, 1, 1 << 22, ((bench_opts *)o)->ctx, &((bench_opts *)o)->n_ctx);
}
bool bench_opt_batch_list(const char *a, cli_common *c, void *o) {
    return parse_int_list("--batch-list", a, 1, 4096, ((bench_opts *)o)->batch, &((bench_opts *)o)->n_batch);
}
bool bench_opt_budget_list(const char *a, cli_common *c, void *o) {
    return parse_int_list("--spec-budget-list", a, 1, 1 << 22, ((bench_opts *)o)->budget, &((bench_opts *)o)->n_budget);
}
bool bench_opt_gamma_list(const char *a, cli_common *c, void *o) {
    return parse_int_list("--spec-gamma-list", a, 1, 64, ((bench_opts *)o)->gamma, &((bench_opts *)o)->n_gamma);
}
bool bench_opt_spec_list(const char *a, cli_common *c, void *o) { return parse_spec_list(a, o); }
bool bench_opt_weights_list(const char *a, cli_common *c, void *o) { return parse_weights_list(a, o); }

bool bench_opt_prefill(const char *a, cli_common *c, void *opts) {
    bench_opts *o = opts;
    if (!parse_int_list("--prefill", a, 0, 1 << 20, o->prefill, &o->n_prefill))
        return false;
    if (o->n_prefill == 1 && o->prefill[0] == 0)
        o->n_prefill = 0;
    for (int k = 0; k < o->n_prefill; k++)
        if (o->prefill[k] == 0) {
            fprintf(stderr, "seer: --prefill: 0 (skip) cannot be one of several sizes\n");
            return false;
        }
    return true;
}

bool bench_opt_alpha(const char *a, cli_common *c, void *o) {
    double d;
    if (!cli_float("--synthetic-accept", a, 0, 1, &d))
        return false;
    if (!(d > 0 && d < 1)) {
        fprintf(stderr, "seer: --synthetic-accept: %g must be in (0, 1)\n", d);
        return false;
    }
    ((bench_opts *)o)->alpha = d;
    return true;
}

static int parse(int argc, char **argv, bench_opts *o) {
    cli_common c;
    cli_common_init(&c);
    c.weights = o->weights;
    const int rc = cli_parse(cli_table, CLI_BENCH, "bench", argc, argv, &c, o);
    if (rc >= 0)
        return rc;
    o->model_path = c.model;
    o->threads = (int)c.threads;
    o->tp = (int)c.tp;
    o->tpc = c;
    o->gpu_layers = (int)c.gpu_layers;
    o->backend = c.backend;
    o->weights = c.weights;
    o->drafters = c.spec;
    o->kv_type = c.kv_type;
    if (optind < argc) {
        fprintf(stderr, "seer bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (o->replot) {
        if (!o->plot || o->synthetic || o->model_path) {
            fprintf(stderr, "seer bench: --replot takes --plot FILE.png and no model\n");
            return 2;
        }
        return -1;
    }
    if (!o->synthetic == !o->model_path) {
        fprintf(stderr, "seer bench: give exactly one of --synthetic SHAPE or -m MODEL\n");
        return 2;
    }
    bool needs_draft = false;
    for (int k = 0; k < o->n_spec; k++) {
        seer_spec_kind_info in;
        needs_draft |= spec_kinds_info(o->spec[k], &in) && in.needs_draft_model;
    }
    if (o->draft_synthetic && o->draft_path) {
        fprintf(stderr, "seer bench: give at most one of --draft-synthetic and --draft-model\n");
        return 2;
    }
    if (needs_draft != (o->draft_synthetic || o->draft_path)) {
        fprintf(stderr, "seer bench: a --spec that drafts with a draft model takes one (--draft-synthetic SHAPE or "
                        "--draft-model FILE), and a draft model needs one of them\n");
        return 2;
    }
    return -1;
}

static int max_of(const int *a, int n) {
    int m = 0;
    for (int i = 0; i < n; i++)
        m = a[i] > m ? a[i] : m;
    return m;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Ordinary tokens (past the specials and the byte tokens when the vocabulary is that big). */
static int32_t rand_token(uint64_t *s, int V) {
    int lo = V > 1024 ? 259 : 3;
    return lo + (int32_t)(rng_next(s) % (uint64_t)(V - lo));
}

const char *bench_spec_label(const bench_spec *s) {
    static char buf[4][48];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s%s", seer_spec_kind_name(s->kind), s->draft_weights ? "/dw" : "");
    if (s->tree_size)
        snprintf(buf[k] + strlen(buf[k]), sizeof buf[k] - strlen(buf[k]), "+tree%d", s->tree_size);
    if (s->best_first) /* SpecExec's best-first search, K children a node at most */
        snprintf(buf[k] + strlen(buf[k]), sizeof buf[k] - strlen(buf[k]), "/bf%d", s->best_first);
    if (s->ffn_density > 0 && s->ffn_density < 1)
        snprintf(buf[k] + strlen(buf[k]), sizeof buf[k] - strlen(buf[k]), "/%s%.2f", s->ffn_cats ? "cats" : "ffn",
                 (double)s->ffn_density);
    return buf[k];
}

double bench_best_fixed(const bench_point *p, int *idx) {
    double best = 1;
    *idx = -1;
    for (int k = 0; k < p->n_spec; k++)
        if (p->spec[k].ok && p->spec[k].kind != SEER_SPEC_AUTO && p->spec[k].speedup > best)
            best = p->spec[k].speedup, *idx = k;
    return best;
}

double bench_omega(int gamma, double alpha) {
    return (1 - pow(alpha, gamma + 1)) / (1 - alpha);
}

#define FAIL(buf, ...) snprintf((buf), sizeof(buf), __VA_ARGS__)

/* ---- prefill ------------------------------------------------------------------------- */

static void run_prefill(const bench_opts *o, seer_model *m, const bench_result *r, bench_prefill *pf) {
    const int P = pf->tokens, chunk = P < o->prefill_chunk ? P : o->prefill_chunk;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = P + 1;
    cp.n_seq_max = 1;
    cp.n_batch_max = chunk;
    cp.page_size = o->page_size;
    cp.kv_type = o->kv_type;
    seer_context *ctx = NULL;
    int32_t *tok = malloc(sizeof *tok * P), *pos = malloc(sizeof *pos * chunk),
            *seq = malloc(sizeof *seq * chunk);
    uint8_t *want = calloc(chunk, 1);
    float *logits = NULL; /* the backend's fastest host memory (NULL on failure) */
    (void)seer_host_alloc(m, sizeof *logits * r->info.n_vocab, (void **)&logits);
    seer_status s = SEER_OK;
    if (!tok || !pos || !seq || !want || !logits) {
        FAIL(pf->err, "out of memory");
        goto done;
    }
    if ((s = seer_context_init(m, cp, &ctx)) != SEER_OK) {
        FAIL(pf->err, "context: %s", seer_last_error());
        goto done;
    }
    uint64_t rs = o->seed ^ 0x5EEDull;
    for (int i = 0; i < P; i++)
        tok[i] = rand_token(&rs, r->info.n_vocab);
    const int reps = o->prefill_reps;
    double t[BENCH_MAX_PREFILL_REPS];
    for (int rep = -1; rep < reps; rep++) { /* rep -1: warm-up */
        seer_seq_id sq;
        if ((s = seer_seq_new(ctx, &sq)) != SEER_OK)
            break;
        if ((s = seer_model_sync(m)) != SEER_OK)
            break;
        double t0 = cli_now_s();
        /* the warm-up's first chunks already run every kernel and allocation the timed runs
         * use: a 128K prompt need not be prefilled twice */
        const int n = rep < 0 && P > 2 * chunk ? 2 * chunk : P;
        for (int i = 0; i < n && s == SEER_OK; i += chunk) {
            int k = n - i < chunk ? n - i : chunk;
            for (int j = 0; j < k; j++) {
                pos[j] = i + j;
                seq[j] = sq;
                want[j] = i + j == n - 1;
            }
            seer_batch b = {.n_tokens = k, .token = tok + i, .seq = seq, .pos = pos, .logits = want};
            s = seer_decode(ctx, &b, want[k - 1] ? logits : NULL);
        }
        if (s == SEER_OK)
            s = seer_model_sync(m);
        double t1 = cli_now_s();
        seer_seq_free(ctx, sq);
        if (rep >= 0)
            t[rep] = t1 - t0;
    }
    if (s != SEER_OK) {
        FAIL(pf->err, "%s", seer_last_error());
        goto done;
    }
    qsort(t, reps, sizeof *t, cmp_double);
    const seer_model_info *in = &r->info;
    /* The layers see every prompt token, the LM head only the last one. */
    const double head = (double)in->n_vocab * in->dim;
    const double params = (double)r->fp.weight_elems;
    double flops = 2 * (params - head) * P + 2 * head +
                   2.0 * in->n_layers * in->n_heads * in->head_dim * (double)P * P;
    pf->ok = true;
    pf->ms = t[reps / 2] * 1e3;
    pf->tok_s = P / t[reps / 2];
    pf->tflops = flops / t[reps / 2] * 1e-12;
done:
    seer_context_free(ctx);
    free(tok), free(pos), free(seq), free(want);
    seer_host_free(m, logits);
}

/* ---- one point ----------------------------------------------------------------------- */

typedef struct {
    seer_model *m;
    seer_context *ctx;
    seer_seq_id *base; /* [B] sequences holding L synthetic slots */
    int L, B, V;
    int32_t **toks;    /* [B][L + 1] token history the generator adopts */
} point_state;

typedef struct {
    seer_spec_stats d; /* over the timed rounds */
    double wall_s;
    seer_spec_auto_stats as; /* auto: its decisions over the timed rounds */
} gen_run;

/* A generator over forks of the base sequences: warm-up rounds, then timed rounds. On
 * failure err gets the message and false comes back. */
static bool run_gen(const bench_opts *o, point_state *ps, seer_spec_params sp, gen_run *out,
                    char *err, size_t cap) {
    memset(&out->as, 0, sizeof out->as);
    seer_gen *g = NULL;
    seer_status s = seer_gen_init(ps->ctx, sp, &g);
    if (s == SEER_OK && sp.kind != SEER_SPEC_NONE)
        s = seer_gen_set_synthetic(g, (float)o->alpha, o->trace);
    if (s != SEER_OK) {
        snprintf(err, cap, "generator: %s", seer_last_error());
        seer_gen_free(g);
        return false;
    }
    seer_sampler_params smp = seer_sampler_default_params();
    smp.temperature = 0;
    for (int b = 0; b < ps->B && s == SEER_OK; b++) {
        seer_seq_id f;
        if ((s = seer_seq_fork(ps->ctx, ps->base[b], &f)) != SEER_OK)
            break;
        int h;
        smp.seed = o->seed * 7919u + (uint64_t)b; /* its own stream: acceptance is ragged */
        s = seer_gen_adopt(g, f, ps->toks[b], ps->L + 1, -1, smp, true, &h);
        if (s != SEER_OK)
            seer_seq_free(ps->ctx, f); /* adopt leaves the sequence to us on failure */
    }
    int active = 0;
    bool early = false;
    for (int i = 0; i < o->warmup && s == SEER_OK; i++)
        s = seer_gen_step(g, &active);
    seer_spec_stats s0, s1;
    seer_spec_auto_stats a0, a1;
    seer_gen_stats(g, &s0);
    seer_gen_auto_stats(g, &a0);
    double t0 = cli_now_s();
    for (int i = 0; i < o->steps && s == SEER_OK && !early; i++) {
        s = seer_gen_step(g, &active);
        early = active < ps->B;
    }
    double t1 = cli_now_s();
    seer_gen_stats(g, &s1);
    seer_gen_auto_stats(g, &a1);
    for (int k = 0; k < SEER_SPEC_KIND_MAX; k++)
        out->as.decisions[k] = a1.decisions[k] - a0.decisions[k];
    out->as.gamma_sum = a1.gamma_sum - a0.gamma_sum;
    out->as.predicted_tokens = a1.predicted_tokens - a0.predicted_tokens;
    out->as.predicted_s = a1.predicted_s - a0.predicted_s;
    out->as.plain_tok_s_sum = a1.plain_tok_s_sum - a0.plain_tok_s_sum;
    if (s != SEER_OK)
        snprintf(err, cap, "%s", seer_last_error());
    else if (early)
        snprintf(err, cap, "a sequence finished early (context too small)");
    seer_gen_free(g); /* releases the forks */
    if (s != SEER_OK || early)
        return false;
    out->wall_s = t1 - t0;
    out->d = (seer_spec_stats){
        .rounds = s1.rounds - s0.rounds, .drafted = s1.drafted - s0.drafted,
        .accepted = s1.accepted - s0.accepted, .emitted = s1.emitted - s0.emitted,
        .t_draft_s = s1.t_draft_s - s0.t_draft_s, .t_verify_s = s1.t_verify_s - s0.t_verify_s,
        .verify_calls = s1.verify_calls - s0.verify_calls};
    return true;
}

/* Whether the drafters' sparse FFN is CATS's (--spec-ffn-mode cats), by the choice's name. */
static bool ffn_mode_cats(const seer_spec_params *p) {
    double v = 0;
    seer_spec_option so;
    if (seer_spec_get(p, "ffn_mode", &v) != SEER_OK)
        return false;
    for (int i = 0; seer_spec_option_at(i, &so); i++)
        if (!strcmp(so.json, "ffn_mode"))
            return so.type == SEER_SPEC_OPT_CHOICE && !strcmp(so.choices[(int)v], "cats");
    return false;
}

static void run_spec(const bench_opts *o, point_state *ps, const bench_point *pt, bench_spec *bs) {
    seer_spec_params none = seer_spec_default_params();
    seer_spec_params sp = o->drafters; /* the drafters' settings (--spec-sinks ...) */
    sp.kind = bs->kind;
    sp.gamma = bs->gamma;
    /* auto's row has no budget (its candidates have theirs) */
    if (bs->budget > 0 && seer_spec_set_num(&sp, "budget", bs->budget) != SEER_OK) {
        snprintf(bs->err, sizeof bs->err, "%s", seer_last_error());
        return;
    }
    sp.tree_size = bs->tree_size;
    sp.tree_depth = bs->tree_size ? bs->gamma : 0;
    sp.draft_model = o->draft;
    sp.draft_weights = bs->draft_weights;
    if (bs->kind != SEER_SPEC_AUTO) /* only the drafters that read the target's weights */
        seer_spec_set_num(&sp, "ffn_density", bs->ffn_density > 0 ? bs->ffn_density : 1);
    seer_spec_cost *table = NULL;
    if (bs->kind == SEER_SPEC_AUTO) {
        /* the table of this point, measured on its own caches (the plain step, verification
         * of 2-17 tokens, the view step at each budget) */
        const double t0 = cli_now_s();
        /* auto chooses among the fixed settings' kinds: the sparse views (timed as the
         * streaming view of each budget) and n-gram when asked for */
        bool views = false, ngram = false;
        for (int k = 0; k < o->n_spec; k++) {
            views |= o->spec[k] == SEER_SPEC_STREAMING;
            ngram |= o->spec[k] == SEER_SPEC_NGRAM;
        }
        if (!views && !ngram)
            views = true;
        if (seer_spec_cost_calibrate_seqs(ps->ctx, ps->base, ps->B, o->budget, views ? o->n_budget : 0, ngram,
                                          1.0, &table) != SEER_OK) {
            snprintf(bs->err, sizeof bs->err, "calibration: %s", seer_last_error());
            return;
        }
        bs->calibrate_s = cli_now_s() - t0;
        sp.cost = table;
        sp.tree_size = sp.tree_depth = 0;
    }
    gen_run plain, spec;
    const bool ran = run_gen(o, ps, none, &plain, bs->err, sizeof bs->err) &&
                     run_gen(o, ps, sp, &spec, bs->err, sizeof bs->err);
    seer_spec_cost_free(table);
    if (!ran)
        return;
    const int steps = o->steps;
    bs->gen_plain_tok_s = plain.d.emitted / plain.wall_s;
    bs->spec_tok_s = spec.d.emitted / spec.wall_s;
    bs->speedup = bs->spec_tok_s / bs->gen_plain_tok_s;
    bs->round_ms = spec.wall_s / steps * 1e3;
    if (bs->kind == SEER_SPEC_AUTO) {
        int64_t rounds = 0;
        for (int k = 0; k < SEER_SPEC_KIND_MAX; k++)
            rounds += spec.as.decisions[k];
        const int64_t drafting = rounds - spec.as.decisions[SEER_SPEC_NONE];
        bs->auto_plain_frac = rounds ? (double)spec.as.decisions[SEER_SPEC_NONE] / rounds : 0;
        bs->auto_mean_gamma = drafting ? (double)spec.as.gamma_sum / drafting : 0;
        bs->gamma = (int)(bs->auto_mean_gamma + 0.5);
        seer_spec_auto_speedups(&spec.as, &bs->auto_predicted, &(double){0});
        bs->draft_step_ms = drafting && bs->auto_mean_gamma > 0
                                ? spec.d.t_draft_s / (drafting * bs->auto_mean_gamma) * 1e3 : 0;
        bs->verify_ms = spec.d.t_verify_s / steps * 1e3;
        bs->acceptance = spec.d.drafted ? (double)spec.d.accepted / spec.d.drafted : 0;
        bs->tok_per_verify = spec.d.rounds ? (double)spec.d.emitted / spec.d.rounds : 0;
        bs->projected = bs->auto_predicted;
        bs->ok = true;
        return;
    }
    bs->draft_step_ms = spec.d.t_draft_s / steps / bs->gamma * 1e3;
    bs->verify_ms = spec.d.t_verify_s / steps * 1e3;
    bs->acceptance = spec.d.drafted ? (double)spec.d.accepted / spec.d.drafted : 0;
    bs->tok_per_verify = spec.d.rounds ? (double)spec.d.emitted / spec.d.rounds : 0;
    bs->calls_per_verify = spec.d.rounds ? (double)spec.d.verify_calls * pt->B / spec.d.rounds : 0;
    const double tt = pt->step_ms;
    bs->projected = bench_omega(bs->gamma, o->alpha) /
                    (bs->gamma * bs->draft_step_ms / tt + bs->verify_ms / tt);
    bs->ok = true;
}

static void run_point(const bench_opts *o, seer_model *m, const bench_result *r, bench_point *pt) {
    const int L = pt->L, B = pt->B, V = r->info.n_vocab, ps_ = o->page_size;
    int gmax = o->n_spec ? max_of(o->gamma, o->n_gamma) : 0;
    if (o->n_spec && o->tree_size > gmax) /* a tree's rows: its nodes */
        gmax = o->tree_size;
    for (int k = 0; k < o->n_spec; k++)
        if (o->spec[k] == SEER_SPEC_AUTO && gmax < 16) /* auto's longest chain */
            gmax = 16;
    /* Room for the generator runs: warm-up and timed rounds of up to G+1 tokens each. */
    const int margin = (o->warmup + o->steps + 2) * (gmax + 1) + 16;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = L + margin;
    cp.n_seq_max = 2 * B; /* the base sequences and the generator's forks of them */
    /* The generator checks SnapKV's window against the batch limit whatever the drafter. */
    cp.n_batch_max = B * (gmax + 1) > 64 ? B * (gmax + 1) : 64;
    cp.page_size = ps_;
    cp.kv_type = o->kv_type;
    cp.n_pages = B * ((L + ps_ - 1) / ps_ + (margin + ps_ - 1) / ps_ + 4);
    point_state st = {.m = m, .L = L, .B = B, .V = V};
    int32_t *tok = malloc(sizeof *tok * B), *pos = malloc(sizeof *pos * B);
    uint8_t *want = malloc(B);
    float *logits = NULL; /* downloaded each step: the backend's fastest host memory (NULL on failure) */
    (void)seer_host_alloc(m, sizeof *logits * (size_t)B * V, (void **)&logits);
    double *times = malloc(sizeof *times * o->steps);
    st.base = malloc(sizeof *st.base * B);
    st.toks = calloc(B, sizeof *st.toks);
    int n_base = 0;
    seer_status s = SEER_OK;
    if (!tok || !pos || !want || !logits || !times || !st.base || !st.toks) {
        FAIL(pt->err, "out of host memory");
        goto done;
    }
    if ((s = seer_context_init(m, cp, &st.ctx)) != SEER_OK) {
        FAIL(pt->err, "context for B=%d x L=%d: %s", B, L, seer_last_error());
        goto done;
    }
    uint64_t rs = o->seed * 1000003u + (uint64_t)L * 31 + B;
    for (; n_base < B; n_base++) {
        if ((s = seer_seq_new(st.ctx, &st.base[n_base])) != SEER_OK ||
            (s = seer_seq_fill_synthetic(st.ctx, st.base[n_base], L, o->seed + 7919u * n_base)) != SEER_OK) {
            FAIL(pt->err, "filling sequence %d with %d slots: %s", n_base, L, seer_last_error());
            goto done;
        }
        if (o->n_spec) {
            st.toks[n_base] = malloc(sizeof(int32_t) * (L + 1));
            if (!st.toks[n_base]) {
                FAIL(pt->err, "out of host memory");
                goto done;
            }
            for (int i = 0; i <= L; i++)
                st.toks[n_base][i] = rand_token(&rs, V);
        }
    }
    for (int b = 0; b < B; b++) {
        tok[b] = rand_token(&rs, V);
        pos[b] = L;
        want[b] = 1;
    }
    seer_batch batch = {.n_tokens = B, .token = tok, .seq = st.base, .pos = pos, .logits = want};
    for (int i = -o->warmup; i < o->steps; i++) {
        if ((s = seer_model_sync(m)) != SEER_OK)
            break;
        double t0 = cli_now_s();
        if ((s = seer_decode(st.ctx, &batch, logits)) != SEER_OK)
            break;
        if ((s = seer_model_sync(m)) != SEER_OK)
            break;
        double t1 = cli_now_s();
        if (i == -o->warmup) {
            pt->finite = true;
            for (size_t k = 0; k < (size_t)B * V; k++)
                pt->finite &= isfinite(logits[k]) != 0;
        }
        for (int b = 0; b < B && s == SEER_OK; b++)
            s = seer_seq_rewind(st.ctx, st.base[b], L);
        if (i >= 0)
            times[i] = t1 - t0;
    }
    if (s != SEER_OK) {
        FAIL(pt->err, "decode: %s", seer_last_error());
        goto done;
    }
    qsort(times, o->steps, sizeof *times, cmp_double);
    pt->step_ms = times[o->steps / 2] * 1e3;
    pt->step_min_ms = times[0] * 1e3;
    pt->step_max_ms = times[o->steps - 1] * 1e3;
    pt->tok_s = B / (pt->step_ms * 1e-3);
    pt->bytes = (double)r->fp.weight_bytes + (double)B * seer_footprint_kv_read(&r->fp, L, 0);
    /* each of the ranks reads its 1/ranks of the bytes at the bandwidth of one device */
    pt->floor_ms = r->bandwidth > 0 ? pt->bytes / (r->bandwidth * r->ranks) * 1e3 : 0;
    /* layers in host memory: their bytes cross the host-to-device link once a step */
    pt->pcie_floor_ms = r->h2d_bandwidth > 0 ? (double)r->info.host_weight_bytes / r->h2d_bandwidth * 1e3 : 0;
    if (pt->pcie_floor_ms > pt->floor_ms)
        pt->floor_ms = pt->pcie_floor_ms;
    pt->floor_tok_s = pt->floor_ms > 0 ? B / (pt->floor_ms * 1e-3) : 0;
    pt->fraction = pt->floor_ms / pt->step_ms;
    pt->ok = true;
    for (int k = 0; k < pt->n_spec; k++) {
        if (o->trace)
            fprintf(stderr, "seer bench: L=%d B=%d spec %s K=%d G=%d (acceptance replayed from %s)\n", L, B,
                    bench_spec_label(&pt->spec[k]), pt->spec[k].budget, pt->spec[k].gamma, o->trace_path);
        else
            fprintf(stderr, "seer bench: L=%d B=%d spec %s K=%d G=%d (synthetic acceptance %.2f)\n", L, B,
                    bench_spec_label(&pt->spec[k]), pt->spec[k].budget, pt->spec[k].gamma, o->alpha);
        run_spec(o, &st, pt, &pt->spec[k]);
    }
done:
    for (int b = 0; b < n_base && st.ctx; b++)
        seer_seq_free(st.ctx, st.base[b]);
    seer_context_free(st.ctx);
    if (st.toks)
        for (int b = 0; b < B; b++)
            free(st.toks[b]);
    free(st.toks), free(st.base), free(tok), free(pos), free(want), free(times);
    seer_host_free(m, logits);
}

/* ---- the command --------------------------------------------------------------------- */

int cmd_bench(int argc, char **argv) {
    bench_opts o = {.backend = SEER_BACKEND_AUTO, .page_size = 16, .steps = 20, .warmup = 3,
                    .prefill = {2048}, .n_prefill = 1, .prefill_reps = 3, .prefill_chunk = 2048, .seed = 1, .alpha = 0.8,
                    .ctx = {4096, 32768}, .n_ctx = 2, .batch = {1}, .n_batch = 1,
                    .budget = {512}, .n_budget = 1, .gamma = {4}, .n_gamma = 1,
                    .dweights = {false}, .n_dweights = 1};
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    /* A bad peer file is refused before minutes go into generating a model and measuring. */
    bench_peer peer = {0};
    if (o.peer && bench_peer_load(o.peer, &peer) != 0)
        return 1;
    if (o.trace_path && !o.replot) {
        seer_status ts = seer_accept_trace_load(o.trace_path, &o.trace);
        if (ts != SEER_OK) {
            cli_error("acceptance trace", ts);
            bench_peer_free(&peer);
            return 1;
        }
    }
    if (o.replot) {
        bench_result rr;
        memset(&rr, 0, sizeof rr);
        rc = bench_load_json(o.replot, &o, &rr) || (o.peer && bench_peer_merge(o.peer, &peer, &rr)) ||
             bench_plot(&o, &rr);
        bench_result_free(&rr);
        bench_peer_free(&peer);
        return rc;
    }
    /* the CUDA backend's variants of an A/B run (SEER_CUDA_PROFILE, SEER_CUDA_QT ...):
     * benchmarks read them, the library does not */
    const seer_cuda_tuning tuning = lab_cuda_tuning_from_env();
    seer_model_params mp = seer_model_default_params();
    mp.backend = o.backend;
    mp.weights = o.weights;
    mp.n_threads = o.threads;
    mp.tp = o.tp;
    mp.gpu_layers = o.gpu_layers;
    mp.draft_weights = o.spec_weights;
    seer_model *m = NULL;
    bench_result r;
    memset(&r, 0, sizeof r);
    seer_status s;
    if (!cli_tp_setup("bench", &o.tpc, &mp)) {
        bench_peer_free(&peer);
        seer_accept_trace_free(o.trace);
        return 1;
    }
    if (o.synthetic) {
        seer_gen_params gp = seer_gen_default_params();
        gp.seed = o.seed;
        s = seer_model_synthetic_tuned(o.synthetic, &gp, mp, &tuning, &m);
    } else {
        s = seer_model_load_tuned(o.model_path, mp, &tuning, &m);
    }
    if (s != SEER_OK) {
        cli_error(o.synthetic ? "synthetic model" : "loading model", s);
        bench_peer_free(&peer);
        seer_accept_trace_free(o.trace);
        cli_tp_reap(o.tpc.tp_pids, true);
        return 1;
    }
    seer_model_get_info(m, &r.info);
    seer_model_get_footprint(m, &r.fp);
    rc = 1;
    /* the floor counts the bytes of the KV rows as this run stores them */
    r.kv_type = o.kv_type;
    if (!(r.fp.kv_bytes_per_token = seer_kv_bytes_per_token(m, o.kv_type))) {
        fprintf(stderr, "seer bench: the %s backend cannot store the KV cache as %s\n", r.info.backend,
                seer_kv_type_name(o.kv_type));
        goto done;
    }
    if (seer_model_kv_capacity(m, o.kv_type, &r.kv_capacity) != SEER_OK)
        r.kv_capacity = 0;
    mp.draft_weights = NULL;
    mp.tp_addr = NULL; /* a draft model's ranks are threads of this process */
    if (o.draft_synthetic || o.draft_path) {
        if (o.draft_synthetic) {
            seer_gen_params gp = seer_gen_default_params();
            gp.seed = o.seed + 1;
            s = seer_model_synthetic_tuned(o.draft_synthetic, &gp, mp, &tuning, &o.draft);
        } else {
            s = seer_model_load_tuned(o.draft_path, mp, &tuning, &o.draft);
        }
        if (s != SEER_OK) {
            cli_error("draft model", s);
            goto done;
        }
        if (seer_n_vocab(o.draft) != r.info.n_vocab) {
            fprintf(stderr, "seer bench: the draft model's vocabulary (%d) is not the model's (%d)\n",
                    seer_n_vocab(o.draft), r.info.n_vocab);
            goto done;
        }
    }
    /* The peer's shape is checked against this model before anything is measured (a merge
     * into no points); its numbers are merged once every point exists. */
    bench_result shape = {.info = r.info};
    const bool shape_bad = o.peer && bench_peer_merge(o.peer, &peer, &shape) != 0;
    bench_result_free(&shape);
    if (shape_bad)
        goto done;
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(r.date, sizeof r.date, "%Y-%m-%d", &tmv);
    r.ranks = o.tp > 0 ? o.tp : 1;
    if ((s = seer_model_measure_bandwidth(m, &r.bandwidth)) != SEER_OK) {
        cli_error("measuring bandwidth", s);
        goto done;
    }
    if (r.info.host_weight_bytes && (s = seer_model_measure_h2d_bandwidth(m, &r.h2d_bandwidth)) != SEER_OK) {
        cli_error("measuring host-to-device bandwidth", s);
        goto done;
    }
    if (r.info.host_weight_bytes)
        fprintf(stderr, "seer bench: %d of %d layers on the device, %.3f GB streamed a step at %.1f GB/s "
                "host-to-device\n", r.info.n_layers_resident, r.info.n_layers, r.info.host_weight_bytes * 1e-9,
                r.h2d_bandwidth * 1e-9);
    char shown_name[256];
    fprintf(stderr, "seer bench: %s on %s, copy bandwidth %.3f TB/s\n",
            seer_text_escape(r.info.name, shown_name, sizeof shown_name), r.info.backend,
            r.bandwidth * 1e-12);
    /* the all-reduces a divided step makes, two per layer, timed apart from the steps */
    for (int k = 0; o.tp >= 1 && k < o.n_batch; k++)
        if ((s = seer_model_time_all_reduce(m, o.batch[k], 200, &r.allreduce_s[k])) != SEER_OK) {
            cli_error("timing the all-reduce", s);
            goto done;
        }
    for (int k = 0; k < o.n_prefill; k++) {
        bench_prefill *pf = &r.prefill[r.n_prefill++];
        pf->tokens = o.prefill[k];
        fprintf(stderr, "seer bench: prefill of %d tokens\n", pf->tokens);
        run_prefill(&o, m, &r, pf);
        if (!pf->ok)
            fprintf(stderr, "seer bench: prefill of %d tokens: %s\n", pf->tokens, pf->err);
    }
    for (int k = 0; k < o.n_resume; k++) {
        bench_resume *br = &r.resume[r.n_resume++];
        br->tokens = o.resume[k];
        fprintf(stderr, "seer bench: resume of %d cached tokens, recomputed and copied back\n", br->tokens);
        bench_run_resume(&o, m, &r, br);
        if (!br->ok)
            fprintf(stderr, "seer bench: resume of %d tokens: %s\n", br->tokens, br->err);
    }
    int n_auto = 0;
    for (int a = 0; a < o.n_spec; a++)
        n_auto += o.spec[a] == SEER_SPEC_AUTO;
    /* auto is one setting: it picks its own K (from the budget list) and G */
    const int n_settings = (o.n_spec - n_auto) * o.n_budget * o.n_gamma * o.n_dweights + n_auto;
    r.pts = calloc((size_t)o.n_ctx * o.n_batch, sizeof *r.pts);
    if (!r.pts) {
        fprintf(stderr, "seer bench: out of memory\n");
        goto done;
    }
    for (int i = 0; i < o.n_ctx; i++)
        for (int j = 0; j < o.n_batch; j++) {
            bench_point *pt = &r.pts[r.n_pts++];
            pt->L = o.ctx[i];
            pt->B = o.batch[j];
            if (n_settings) {
                pt->spec = calloc(n_settings, sizeof *pt->spec);
                if (!pt->spec) {
                    fprintf(stderr, "seer bench: out of memory\n");
                    goto done;
                }
                for (int a = 0; a < o.n_spec; a++) {
                    const seer_spec_kind sk = o.spec[a];
                    const bool fixed = sk != SEER_SPEC_AUTO;
                    /* the draft weights are the self-drafts' (and the hierarchy's middle level's) */
                    const bool reads = sk == SEER_SPEC_STREAMING || sk == SEER_SPEC_RETRIEVAL ||
                                       sk == SEER_SPEC_SNAPKV || sk == SEER_SPEC_HIERARCHY;
                    double ffn_density = 1; /* the sparse FFN is the self-drafts' too */
                    seer_spec_get(&o.drafters, "ffn_density", &ffn_density);
                    double bf = 0; /* the draft model's best-first trees */
                    if (sk == SEER_SPEC_DRAFT)
                        seer_spec_get(&o.drafters, "draft-best-first", &bf);
                    const int best_first = (int)bf;
                    for (int w = 0; w < (reads ? o.n_dweights : 1); w++)
                        for (int k = 0; k < (fixed ? o.n_budget : 1); k++)
                            for (int g = 0; g < (fixed ? o.n_gamma : 1); g++)
                                pt->spec[pt->n_spec++] = fixed
                                    ? (bench_spec){.kind = o.spec[a], .budget = o.budget[k], .gamma = o.gamma[g],
                                                   .tree_size = o.tree_size,
                                                   .draft_weights = reads && o.dweights[w],
                                                   .ffn_density = reads ? ffn_density : 1,
                                                   .ffn_cats = ffn_mode_cats(&o.drafters),
                                                   .best_first = best_first}
                                    /* auto's views draft through the draft weights when the
                                     * model holds them (any --spec-weights type) */
                                    : (bench_spec){.kind = SEER_SPEC_AUTO, .draft_weights = o.spec_weights != NULL};
                }
            }
            fprintf(stderr, "seer bench: L=%d B=%d plain decode\n", pt->L, pt->B);
            run_point(&o, m, &r, pt);
            if (!pt->ok)
                fprintf(stderr, "seer bench: L=%d B=%d: %s\n", pt->L, pt->B, pt->err);
        }
    rc = 0;
    if (o.peer && bench_peer_merge(o.peer, &peer, &r) != 0)
        rc = 1;
    if (o.json)
        rc |= bench_print_json(stdout, &o, &r);
    else
        bench_print_table(&o, &r);
    if (o.json_out) {
        FILE *jf = fopen(o.json_out, "w");
        if (!jf || bench_print_json(jf, &o, &r) != 0) {
            fprintf(stderr, "seer bench: cannot write %s\n", o.json_out);
            rc = 1;
        }
        if (jf && fclose(jf) != 0)
            rc = 1;
    }
    if (o.plot && bench_plot(&o, &r) != 0)
        rc = 1;
    for (int i = 0; i < r.n_resume; i++)
        rc |= !r.resume[i].ok;
    for (int i = 0; i < r.n_pts; i++) {
        rc |= !r.pts[i].ok;
        for (int k = 0; k < r.pts[i].n_spec && r.pts[i].ok; k++)
            rc |= !r.pts[i].spec[k].ok;
    }
done:
    bench_result_free(&r);
    seer_model_free(o.draft);
    seer_model_free(m);
    cli_tp_reap(o.tpc.tp_pids, true); /* after the model's goodbye */
    bench_peer_free(&peer);
    seer_accept_trace_free(o.trace);
    return rc;
}
