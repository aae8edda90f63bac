/*
 * cli_cost.c: the cost table `--spec auto` needs, for the subcommands that generate: read
 * from the cache file when one for this model and device is there, else calibrated on the
 * context (a few hundred ms) and saved for the next run. Never fatal: without a table the
 * generation runs plain, and says so.
 */
#include "cli.h"
#include <jansson.h>

#include <stdio.h>
#include <string.h>

seer_spec_cost *cli_auto_cost(const char *cmd, seer_context *ctx, seer_model *draft, const char *path) {
    char def[1024];
    const char *file = path;
    if (!file && seer_spec_cost_default_path(ctx, def, sizeof def) == SEER_OK)
        file = def;
    seer_spec_cost *c = NULL;
    if (file && seer_spec_cost_load(file, ctx, &c) == SEER_OK) {
        /* a table without the draft model's row was measured without it: measure again */
        if (!draft || seer_spec_cost_has(c, SEER_SPEC_DRAFT)) {
            fprintf(stderr, "seer %s: spec auto: cost table from %s\n", cmd, file);
            return c;
        }
        seer_spec_cost_free(c);
        c = NULL;
    }
    const double t0 = cli_now_s();
    seer_status s = seer_spec_cost_calibrate(ctx, draft, 0.3, &c);
    if (s != SEER_OK) {
        fprintf(stderr, "seer %s: spec auto: cannot calibrate the cost model (%s); decoding plain\n", cmd,
                seer_last_error());
        return NULL;
    }
    const double ms = (cli_now_s() - t0) * 1e3;
    if (file && seer_spec_cost_save(c, file) == SEER_OK)
        fprintf(stderr, "seer %s: spec auto: cost model calibrated in %.0f ms, saved to %s\n", cmd, ms, file);
    else
        fprintf(stderr, "seer %s: spec auto: cost model calibrated in %.0f ms (not saved: %s)\n", cmd, ms,
                file ? seer_last_error() : "no cache directory");
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
    for (int k = 0; k < SEER_SPEC_AUTO; k++) {
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
    for (int k = 0; k < SEER_SPEC_AUTO && n < (int)sizeof buf - 64; k++)
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
