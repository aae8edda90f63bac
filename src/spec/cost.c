/*
 * cost.c: the table of measured phase times and how it is read between its grid points
 * (see cost.h). The file format is cost_file.c's, the choice per round cost_plan.c's.
 *
 * Interpolation is bilinear in (log B, log L): a decode step's time is roughly affine in B
 * and in L (weights once, KV per token), and on a log grid (1, 2, 4, ...; 1K, 4K, 16K, ...)
 * the log keeps the cells even. Within the grid this errs by the curvature only; outside it
 * the nearest edge is used rather than extrapolating a noisy slope.
 */
#include "spec/cost.h"
#include "spec/drafter.h"
#include "util/error.h"

#include <math.h>
#include <string.h>

static seer_status check_grid(const char *name, const int *v, int n, int max, int lo) {
    if (n < 1 || n > max)
        return seer_err(SEER_ERR_INVALID_ARG, "cost table: %d %s values (1..%d)", n, name, max);
    for (int i = 0; i < n; i++)
        if (v[i] < lo || v[i] > (1 << 24) || (i > 0 && v[i] <= v[i - 1]))
            return seer_err(SEER_ERR_INVALID_ARG,
                            "cost table: %s values must ascend from %d (value %d is %d)", name, lo,
                            i, v[i]);
    return SEER_OK;
}

static seer_status check_times(const char *what, const double (*t)[SEER_COST_MAX_L], int nb, int nl,
                               bool zero_ok) {
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < nl; j++)
            if (!(t[i][j] >= 0 && t[i][j] <= SEER_COST_MAX_TIME_S) || (!zero_ok && t[i][j] == 0))
                return seer_err(SEER_ERR_INVALID_ARG, "cost table: %s time [%d][%d] is %g", what,
                                i, j, t[i][j]);
    return SEER_OK;
}

static seer_status check_flags(const char *what, const uint8_t (*f)[SEER_COST_MAX_L], int nb, int nl) {
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < nl; j++)
            if (f[i][j] > 1)
                return seer_err(SEER_ERR_INVALID_ARG, "cost table: %s estimate flag [%d][%d] is %d",
                                what, i, j, f[i][j]);
    return SEER_OK;
}

seer_status seer_cost_table_check(const seer_cost_table *t) {
    SEER_CHECK_ARG(t);
    if (!memchr(t->key, 0, sizeof t->key))
        return seer_err(SEER_ERR_INVALID_ARG, "cost table: key is not terminated");
    SEER_TRY(check_grid("B", t->b, t->n_b, SEER_COST_MAX_B, 1));
    SEER_TRY(check_grid("L", t->l, t->n_l, SEER_COST_MAX_L, 1));
    if (t->n_n != 0)
        SEER_TRY(check_grid("n", t->n, t->n_n, SEER_COST_MAX_N, 2));
    SEER_TRY(check_times("target", t->t_target, t->n_b, t->n_l, false));
    SEER_TRY(check_flags("target", t->est_target, t->n_b, t->n_l));
    bool measured = false; /* estimates need something measured to stand on */
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++)
            measured |= !t->est_target[i][j];
    if (!measured)
        return seer_err(SEER_ERR_INVALID_ARG, "cost table: no target time was measured");
    for (int i = 0; i < t->n_n; i++) {
        SEER_TRY(check_times("verify", t->t_verify[i], t->n_b, t->n_l, false));
        SEER_TRY(check_flags("verify", t->est_verify[i], t->n_b, t->n_l));
    }
    if (t->n_drafters < 0 || t->n_drafters > SEER_COST_MAX_DRAFTERS)
        return seer_err(SEER_ERR_INVALID_ARG, "cost table: %d drafters (0..%d)", t->n_drafters,
                        SEER_COST_MAX_DRAFTERS);
    for (int d = 0; d < t->n_drafters; d++) {
        const seer_cost_drafter *dr = &t->drafter[d];
        if (dr->kind >= SEER_COST_KINDS || !seer_drafter_of_kind(dr->kind))
            return seer_err(SEER_ERR_INVALID_ARG, "cost table: drafter %d has kind %d", d,
                            (int)dr->kind);
        for (int e = 0; e < d; e++)
            if (t->drafter[e].kind == dr->kind)
                return seer_err(SEER_ERR_INVALID_ARG, "cost table: drafter %s appears twice",
                                seer_spec_kind_name(dr->kind));
        SEER_TRY(check_grid("K", dr->k, dr->n_k, SEER_COST_MAX_K, 0));
        for (int k = 0; k < dr->n_k; k++) {
            SEER_TRY(check_times(seer_spec_kind_name(dr->kind), dr->t[k], t->n_b, t->n_l, true));
            SEER_TRY(check_flags(seer_spec_kind_name(dr->kind), dr->est[k], t->n_b, t->n_l));
        }
    }
    return SEER_OK;
}

static int count_flags(const uint8_t (*f)[SEER_COST_MAX_L], int nb, int nl) {
    int n = 0;
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < nl; j++)
            n += f[i][j] != 0;
    return n;
}

void seer_cost_table_count(const seer_cost_table *t, int *measured, int *total) {
    const int cells = t->n_b * t->n_l;
    int all = cells, est = count_flags(t->est_target, t->n_b, t->n_l);
    for (int i = 0; i < t->n_n; i++)
        all += cells, est += count_flags(t->est_verify[i], t->n_b, t->n_l);
    for (int d = 0; d < t->n_drafters; d++) /* n-gram's row is zero by rule, not measured */
        for (int k = 0; k < t->drafter[d].n_k && t->drafter[d].kind != SEER_SPEC_NGRAM; k++)
            all += cells, est += count_flags(t->drafter[d].est[k], t->n_b, t->n_l);
    if (measured)
        *measured = all - est;
    if (total)
        *total = all;
}

/* The cell of x in grid v [n] and the weight of its upper end, in log space, clamped. */
static void locate(const int *v, int n, double x, int *i0, double *w) {
    if (n == 1 || x <= v[0]) {
        *i0 = 0, *w = 0.0;
        return;
    }
    if (x >= v[n - 1]) {
        *i0 = n - 2, *w = 1.0;
        return;
    }
    int i = 0;
    while (x > v[i + 1])
        i++;
    *i0 = i;
    *w = (log(x) - log(v[i])) / (log(v[i + 1]) - log(v[i]));
}

static double lerp(double a, double b, double w) {
    return w == 0 ? a : w == 1 ? b : (1 - w) * a + w * b;
}

/* f (may be NULL): the cells' estimate flags; *est (may be NULL) is or-ed with those of the
 * cells read with a weight above 0. */
static double bilinear(const seer_cost_table *t, const double (*z)[SEER_COST_MAX_L],
                       const uint8_t (*f)[SEER_COST_MAX_L], double B, double L, bool *est) {
    int ib, il;
    double wb, wl;
    locate(t->b, t->n_b, B, &ib, &wb);
    locate(t->l, t->n_l, L, &il, &wl);
    const int jb = t->n_b > 1 ? ib + 1 : ib, jl = t->n_l > 1 ? il + 1 : il;
    if (f && est)
        *est = *est || (wb < 1 && wl < 1 && f[ib][il]) || (wb < 1 && wl > 0 && f[ib][jl]) ||
               (wb > 0 && wl < 1 && f[jb][il]) || (wb > 0 && wl > 0 && f[jb][jl]);
    /* weights 0 and 1 are exact, so grid points come back bit for bit */
    const double lo = lerp(z[ib][il], z[ib][jl], wl), hi = lerp(z[jb][il], z[jb][jl], wl);
    return lerp(lo, hi, wb);
}

double seer_cost_target_est(const seer_cost_table *t, double B, double L, bool *est) {
    if (est)
        *est = false;
    return bilinear(t, t->t_target, t->est_target, B, L, est);
}

double seer_cost_target(const seer_cost_table *t, double B, double L) {
    return seer_cost_target_est(t, B, L, NULL);
}

double seer_cost_verify_est(const seer_cost_table *t, int n, double B, double L, bool *est) {
    double n0 = 1, v0 = seer_cost_target_est(t, B, L, est);
    if (n <= 1 || t->n_n == 0)
        return v0;
    double n1 = n0, v1 = v0;
    bool e0 = est && *est, e1 = e0;
    for (int i = 0; i < t->n_n; i++) {
        n0 = n1, v0 = v1, e0 = e1;
        e1 = false;
        n1 = t->n[i], v1 = bilinear(t, t->t_verify[i], t->est_verify[i], B, L, &e1);
        if (n <= n1) {
            const double w = (n - n0) / (n1 - n0);
            if (est)
                *est = w == 1 ? e1 : e0 || e1;
            return w == 1 ? v1 : v0 + w * (v1 - v0);
        }
    }
    if (est)
        *est = e0 || e1;
    const double slope = (v1 - v0) / (n1 - n0);
    return v1 + (slope > 0 ? slope * (n - n1) : 0.0);
}

double seer_cost_verify(const seer_cost_table *t, int n, double B, double L) {
    return seer_cost_verify_est(t, n, B, L, NULL);
}

int seer_cost_find_drafter(const seer_cost_table *t, seer_spec_kind kind) {
    for (int d = 0; d < t->n_drafters; d++)
        if (t->drafter[d].kind == kind)
            return d;
    return -1;
}

double seer_cost_draft_est(const seer_cost_table *t, int d, int ki, double B, double L, bool *est) {
    if (est)
        *est = false;
    return bilinear(t, t->drafter[d].t[ki], t->drafter[d].est[ki], B, L, est);
}

double seer_cost_draft(const seer_cost_table *t, int d, int ki, double B, double L) {
    return seer_cost_draft_est(t, d, ki, B, L, NULL);
}
