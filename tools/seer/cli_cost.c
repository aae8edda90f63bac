/*
 * cli_cost.c: the cost table `--spec auto` needs, for the subcommands that generate: read
 * from the cache file when one for this model and device is there, else calibrated on the
 * context within a bounded time (--spec-calibrate-budget; 10 s on the CPU, 2 s on a GPU by
 * default) with its progress on stderr, and saved for the next run. A partial table (the
 * budget ran out; the rest estimated) is used, and measured further at the next start until
 * it is whole. Never fatal: without a table the generation runs plain, and says so.
 */
#include "cli.h"
#include <jansson.h>

#include <stdio.h>
#include <string.h>

static double g_budget_s; /* --spec-calibrate-budget; 0: the library's default */

void cli_cost_set_budget(double seconds) { g_budget_s = seconds; }

typedef struct {
    const char *cmd;
    double t_last; /* when the last progress line was printed */
} progress_state;

/* A line about once a second: a calibration of a large model on a slow CPU takes long enough
 * that silence looks like a hang. */
static void progress(void *user, const seer_spec_calibrate_progress *p) {
    progress_state *ps = user;
    if (p->done)
        return;
    const double now = cli_now_s();
    if (now - ps->t_last < 1.0)
        return;
    ps->t_last = now;
    fprintf(stderr, "seer %s: spec auto: calibrating: %d of %d times measured, %.1f s of %.0f s\n", ps->cmd,
            p->measured, p->total, p->elapsed_s, p->budget_s);
}

seer_spec_cost *cli_auto_cost(const char *cmd, seer_context *ctx, seer_model *draft, const char *path) {
    char def[1024];
    const char *file = path;
    if (!file && seer_spec_cost_default_path(ctx, def, sizeof def) == SEER_OK)
        file = def;
    seer_spec_cost *c = NULL, *prev = NULL;
    if (file && seer_spec_cost_load(file, ctx, &c) == SEER_OK) {
        /* a table without the draft model's row was measured without it: measure again */
        if (!draft || seer_spec_cost_has(c, SEER_SPEC_DRAFT)) {
            int m, n;
            seer_spec_cost_count(c, &m, &n);
            if (m == n) {
                fprintf(stderr, "seer %s: spec auto: cost table from %s\n", cmd, file);
                return c;
            }
            prev = c; /* partial: measure what it lacks */
        } else
            seer_spec_cost_free(c);
        c = NULL;
    }
    seer_spec_calibrate_params p = seer_spec_calibrate_default_params();
    p.budget_s = g_budget_s;
    p.draft_model = draft;
    p.prev = prev;
    p.progress = progress;
    progress_state ps = {cmd, cli_now_s()};
    p.progress_user = &ps;
    const double budget = g_budget_s > 0 ? g_budget_s : seer_spec_cost_default_budget(ctx);
    fprintf(stderr, "seer %s: spec auto: calibrating the cost model (%s), at most %.3g s "
                    "(--spec-calibrate-budget S to change; cached for the next start)\n",
            cmd, prev ? "the cached table is partial: measuring more" : "step times of this model on this device", budget);
    const double t0 = cli_now_s();
    seer_status s = seer_spec_cost_measure(ctx, p, &c);
    if (s != SEER_OK) {
        fprintf(stderr, "seer %s: spec auto: cannot calibrate the cost model (%s); decoding plain\n", cmd,
                seer_last_error());
        if (prev) /* what was measured before still stands */
            fprintf(stderr, "seer %s: spec auto: using the partial table from %s\n", cmd, file);
        return prev;
    }
    seer_spec_cost_free(prev);
    const double sec = cli_now_s() - t0;
    int m, n;
    seer_spec_cost_count(c, &m, &n);
    char what[160];
    if (m < n)
        snprintf(what, sizeof what, "%d of %d times measured, the rest estimated (trusted less; measured "
                 "further at the next start)", m, n);
    else
        snprintf(what, sizeof what, "all %d times measured", n);
    if (file && seer_spec_cost_save(c, file) == SEER_OK)
        fprintf(stderr, "seer %s: spec auto: cost model calibrated in %.2f s, %s; saved to %s\n", cmd, sec, what,
                file);
    else
        fprintf(stderr, "seer %s: spec auto: cost model calibrated in %.2f s, %s (not saved: %s)\n", cmd, sec,
                what, file ? seer_last_error() : "no cache directory");
    return c;
}

bool cli_cost_file_ok(const char *cmd, const char *path) {
    if (!path || seer_spec_cost_check_path(path) == SEER_OK)
        return true;
    fprintf(stderr, "seer %s: --spec-cost-file: %s (cost files are only read and written as regular files)\n",
            cmd, seer_last_error());
    return false;
}

json_t *cli_auto_json(const seer_spec_auto_stats *st) {
    json_t *dec = json_object();
    double pred, meas;
    seer_spec_auto_speedups(st, &pred, &meas);
    int64_t rounds = 0;
    for (int k = 0; k < SEER_SPEC_KIND_MAX; k++) {
        rounds += st->decisions[k];
        if (st->decisions[k])
            json_object_set_new(dec, seer_spec_kind_name((seer_spec_kind)k), json_integer(st->decisions[k]));
    }
    const int64_t spec_rounds = rounds - st->decisions[SEER_SPEC_NONE];
    return json_pack("{s:b, s:o, s:f, s:f, s:f}", "calibrated", st->has_table, "decisions", dec,
                     "mean_gamma", spec_rounds ? (double)st->gamma_sum / spec_rounds : 0.0,
                     "predicted_speedup", pred, "measured_speedup", meas);
}

void cli_auto_print(const char *cmd, const seer_spec_auto_stats *st) {
    double pred, meas;
    seer_spec_auto_speedups(st, &pred, &meas);
    char buf[512];
    int n = 0;
    for (int k = 0; k < SEER_SPEC_KIND_MAX && n < (int)sizeof buf - 64; k++)
        if (st->decisions[k])
            n += snprintf(buf + n, sizeof buf - n, "%s%s %lld", n ? ", " : "",
                          k == SEER_SPEC_NONE ? "plain" : seer_spec_kind_name((seer_spec_kind)k),
                          (long long)st->decisions[k]);
    if (!st->has_table)
        fprintf(stderr, "seer %s: spec auto: no cost table, every round plain (%s)\n", cmd, n ? buf : "no rounds");
    else
        fprintf(stderr, "seer %s: spec auto: rounds by choice: %s; speedup over plain predicted %.2fx, measured %.2fx\n",
                cmd, n ? buf : "none", pred, meas);
}
