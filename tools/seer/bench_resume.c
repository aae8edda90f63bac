/*
 * bench_resume.c: `seer bench --resume L,...`: a preempted request of L cached tokens resumed
 * by recomputation (its L + 1 tokens prefilled again, as the scheduler does without a host
 * tier) against resumed from the host tier (its pages copied back, then its pending token
 * decoded over them; the copy to the host, paid at preemption, is shown beside). Random
 * weights as the other shapes: the times are the shape's, whatever the numbers.
 * Not for: the tier itself (src/kv/kv_host.c).
 */
#include "bench.h"
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool bench_opt_resume(const char *a, cli_common *c, void *opts) {
    bench_opts *o = opts;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", a);
    o->n_resume = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > (1 << 20) || o->n_resume == BENCH_MAX_LIST) {
            fprintf(stderr, "seer: --resume: '%s' is not a list of at most %d sizes in [1, %d]\n", a,
                    BENCH_MAX_LIST, 1 << 20);
            return false;
        }
        o->resume[o->n_resume++] = (int)v;
    }
    if (!o->n_resume) {
        fprintf(stderr, "seer: --resume: no size given\n");
        return false;
    }
    return true;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Feeds tokens [from, to) of tok to seq in calls of at most chunk tokens (logits of the last). */
static seer_status feed(seer_context *ctx, seer_seq_id sq, const int32_t *tok, int from, int to, int chunk,
                        int32_t *pos, int32_t *seq, uint8_t *want, float *logits) {
    seer_status s = SEER_OK;
    for (int i = from; i < to && s == SEER_OK; i += chunk) {
        const int k = to - i < chunk ? to - i : chunk;
        for (int j = 0; j < k; j++)
            pos[j] = i + j, seq[j] = sq, want[j] = i + j == to - 1;
        seer_batch b = {.n_tokens = k, .token = tok + i, .seq = seq, .pos = pos, .logits = want};
        s = seer_decode(ctx, &b, want[k - 1] ? logits : NULL);
    }
    return s;
}

#define MAXR 16

void bench_run_resume(const bench_opts *o, seer_model *m, const bench_result *r, bench_resume *br) {
    const int L = br->tokens, chunk = L + 1 < o->prefill_chunk ? L + 1 : o->prefill_chunk;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = L + 2;
    cp.n_seq_max = 2;
    cp.n_batch_max = chunk;
    cp.page_size = o->page_size;
    seer_context *ctx = NULL;
    int32_t *tok = malloc(sizeof *tok * (L + 1)), *pos = malloc(sizeof *pos * chunk), *seq = malloc(sizeof *seq * chunk);
    uint8_t *want = calloc(chunk, 1);
    float *logits = NULL;
    (void)seer_host_alloc(m, sizeof *logits * r->info.n_vocab, (void **)&logits);
    seer_status s = SEER_OK;
    if (!tok || !pos || !seq || !want || !logits) {
        snprintf(br->err, sizeof br->err, "out of memory");
        goto done;
    }
    if ((s = seer_context_init(m, cp, &ctx)) != SEER_OK) {
        snprintf(br->err, sizeof br->err, "context: %s", seer_last_error());
        goto done;
    }
    for (int i = 0; i <= L; i++)
        tok[i] = (int32_t)((uint64_t)(i + o->seed) * 2654435761u % (uint64_t)r->info.n_vocab);
    const int reps = o->prefill_reps < MAXR ? o->prefill_reps : MAXR;
    double rec[MAXR], sv[MAXR], ld[MAXR], stp[MAXR];
    for (int rep = -1; rep < reps && s == SEER_OK; rep++) { /* rep -1: warm-up */
        seer_seq_id a = -1, b = -1;
        double t0 = 0, t1 = 0, t2 = 0, save = 0, load = 0;
        /* recomputation: the whole context again, pending token included */
        if ((s = seer_seq_new(ctx, &a)) == SEER_OK && (s = seer_model_sync(m)) == SEER_OK) {
            t0 = cli_now_s();
            s = feed(ctx, a, tok, 0, L + 1, chunk, pos, seq, want, logits);
            if (s == SEER_OK)
                s = seer_model_sync(m);
            t1 = cli_now_s();
        }
        /* by copy: the first L tokens' pages to the host and back, then the pending token */
        if (s == SEER_OK)
            s = seer_seq_rewind(ctx, a, L);
        if (s == SEER_OK)
            s = seer_kv_host_time_copies(ctx, a, &save, &load, &br->bytes, &b);
        if (s == SEER_OK) {
            seer_seq_free(ctx, a);
            a = -1;
            t2 = cli_now_s();
            s = feed(ctx, b, tok, L, L + 1, chunk, pos, seq, want, logits);
            if (s == SEER_OK)
                s = seer_model_sync(m);
        }
        const double t3 = cli_now_s();
        if (a >= 0)
            seer_seq_free(ctx, a);
        if (b >= 0)
            seer_seq_free(ctx, b);
        if (rep >= 0 && s == SEER_OK)
            rec[rep] = t1 - t0, sv[rep] = save, ld[rep] = load, stp[rep] = t3 - t2;
    }
    if (s != SEER_OK) {
        snprintf(br->err, sizeof br->err, "%s", seer_last_error());
        goto done;
    }
    double *all[] = {rec, sv, ld, stp};
    for (int k = 0; k < 4; k++)
        qsort(all[k], reps, sizeof(double), cmp_double);
    br->recompute_ms = rec[reps / 2] * 1e3;
    br->save_ms = sv[reps / 2] * 1e3;
    br->load_ms = ld[reps / 2] * 1e3;
    br->step_ms = stp[reps / 2] * 1e3;
    br->ok = true;
done:
    seer_context_free(ctx);
    free(tok), free(pos), free(seq), free(want);
    seer_host_free(m, logits);
}

void bench_print_resume(FILE *f, const bench_opts *o, const bench_result *r) {
    if (!r->n_resume)
        return;
    fprintf(f, "\nresume of a preempted request of L cached tokens, median of %d after a warm-up:\n"
               "recomputed (L + 1 tokens prefilled, %d per call) or copied back from the host tier\n"
               "(its pages, then the pending token's step); to host: the copy paid at preemption\n",
            o->prefill_reps, o->prefill_chunk);
    fprintf(f, "%8s %12s %10s %10s %10s %12s %9s %9s\n", "L", "recompute ms", "load ms", "step ms", "resume ms",
            "to host ms", "GB/s in", "speedup");
    for (int i = 0; i < r->n_resume; i++) {
        const bench_resume *p = &r->resume[i];
        if (!p->ok) {
            fprintf(f, "%8d  error: %s\n", p->tokens, p->err);
            continue;
        }
        const double resume = p->load_ms + p->step_ms;
        fprintf(f, "%8d %12.2f %10.2f %10.2f %10.2f %12.2f %9.2f %8.2fx\n", p->tokens, p->recompute_ms,
                p->load_ms, p->step_ms, resume, p->save_ms, p->bytes / (p->load_ms * 1e-3) * 1e-9,
                p->recompute_ms / resume);
    }
}

json_t *bench_resume_json(const bench_result *r) {
    json_t *a = json_array();
    for (int i = 0; i < r->n_resume; i++) {
        const bench_resume *p = &r->resume[i];
        json_array_append_new(a, p->ok ? json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "tokens", p->tokens,
                                                   "recompute_ms", p->recompute_ms, "save_ms", p->save_ms,
                                                   "load_ms", p->load_ms, "step_ms", p->step_ms, "bytes", p->bytes,
                                                   "speedup", p->recompute_ms / (p->load_ms + p->step_ms))
                                       : json_pack("{s:i, s:s}", "tokens", p->tokens, "error", p->err));
    }
    return a;
}
