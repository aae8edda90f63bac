/*
 * cli_opts.c: the parser and the help of the option table (cli_opts.h). getopt_long reads
 * argv against the rows of one command plus the drafters' settings from the library's
 * registry; each value is checked and stored as its row says.
 *
 * Not for: the rows themselves (cli_table.c: the parser takes the table as an argument, so that
 * a test can run it on a table of its own) or checks between options (cmd_*.c, main.c).
 */
#include "cli_opts.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The help's column: options on the left, their help from here on. */
#define HELP_COL 24

void cli_common_init(cli_common *c) {
    *c = (cli_common){.n_predict = -1, .gpu_layers = -1, .backend = SEER_BACKEND_AUTO, .sp = seer_sampler_default_params(),
                      .spec = seer_spec_default_params()};
}

static bool int_arg(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno) {
        fprintf(stderr, "seer: --%s: '%s' is not an integer\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "seer: --%s: %lld is out of range [%lld, %lld]\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

static bool real_arg(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) {
        fprintf(stderr, "seer: --%s: '%s' is not a number\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "seer: --%s: %g is out of range [%g, %g]\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

/* Stores arg as row o says. */
static bool take(const cli_opt *o, const char *arg, cli_common *c, void *cmd) {
    char *field = (o->dest == CLI_D_COMMON ? (char *)c : (char *)cmd) + o->off;
    long long v;
    double d;
    switch (o->type) {
    case CLI_V_FLAG: *(bool *)field = true; return true;
    case CLI_V_STR: *(const char **)field = arg; return true;
    case CLI_V_I64: return int_arg(o->name, arg, o->lo, o->hi, (long long *)field);
    case CLI_V_I32:
        if (!int_arg(o->name, arg, o->lo, o->hi, &v))
            return false;
        *(int *)field = (int)v;
        return true;
    case CLI_V_U64:
        if (!int_arg(o->name, arg, o->lo, o->hi, &v))
            return false;
        *(uint64_t *)field = (uint64_t)v;
        return true;
    case CLI_V_F32:
        if (!real_arg(o->name, arg, o->flo, o->fhi, &d))
            return false;
        *(float *)field = (float)d;
        return true;
    case CLI_V_F64: return real_arg(o->name, arg, o->flo, o->fhi, (double *)field);
    case CLI_V_FN: return o->fn(arg, c, cmd);
    case CLI_V_TEXT:
    case CLI_V_HELP: break;
    }
    return false;
}

static int n_spec_options(void) {
    seer_spec_option so;
    int n = 0;
    while (seer_spec_option_at(n, &so))
        n++;
    return n;
}

/* getopt_long's val: a row of the table, or (>= SPEC_VAL) a setting of the registry. */
enum { ROW_VAL = 256, SPEC_VAL = 1 << 16 };

int cli_parse(const cli_opt *table, unsigned cmd, const char *name, int argc, char **argv, cli_common *c,
              void *cmd_opts) {
    int n_rows = 0;
    while (table[n_rows].cmds)
        n_rows++;
    const int n_spec = n_spec_options();
    struct option *lo = calloc((size_t)(n_rows + n_spec + 1), sizeof *lo);
    char shorts[64];
    size_t ns = 0;
    if (!lo) {
        fprintf(stderr, "seer %s: out of memory\n", name);
        return 2;
    }
    int k = 0;
    for (int i = 0; i < n_rows; i++) {
        const cli_opt *o = &table[i];
        if (!(o->cmds & cmd) || o->type == CLI_V_TEXT)
            continue;
        const bool has_arg = o->type != CLI_V_FLAG && o->type != CLI_V_HELP;
        lo[k++] = (struct option){o->name, has_arg ? required_argument : no_argument, NULL, ROW_VAL + i};
        if (o->shortc && ns + 3 < sizeof shorts) {
            shorts[ns++] = o->shortc;
            if (has_arg)
                shorts[ns++] = ':';
        }
    }
    /* the drafters' settings go with every command that runs speculation, and bench (whose
     * budget and gamma come from its lists) */
    seer_spec_option so;
    for (int i = 0; i < n_spec && seer_spec_option_at(i, &so); i++)
        lo[k++] = (struct option){so.flag, required_argument, NULL, SPEC_VAL + i};
    shorts[ns] = 0;
    int rc = -1, ch;
    optind = 1;
    while (rc < 0 && (ch = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        const cli_opt *o = NULL;
        if (ch >= SPEC_VAL && seer_spec_option_at(ch - SPEC_VAL, &so)) {
            if (seer_spec_set(&c->spec, so.flag, optarg) != SEER_OK) {
                fprintf(stderr, "seer: --%s\n", seer_last_error());
                rc = 2;
            } else if (ch - SPEC_VAL < 64) {
                c->spec_set |= 1ull << (ch - SPEC_VAL);
            }
            continue;
        }
        if (ch >= ROW_VAL && ch < ROW_VAL + n_rows)
            o = &table[ch - ROW_VAL];
        for (int i = 0; !o && ch > 0 && ch < ROW_VAL && i < n_rows; i++)
            if (table[i].shortc == ch && (table[i].cmds & cmd))
                o = &table[i];
        if (!o) { /* getopt_long said why */
            cli_help(table, stderr, cmd);
            rc = 2;
        } else if (o->type == CLI_V_HELP) {
            cli_help(table, stdout, cmd);
            rc = 0;
        } else if (!take(o, optarg, c, cmd_opts)) {
            rc = 2;
        }
    }
    free(lo);
    return rc;
}

/* Prints text with every line after the first indented to the help's column. */
static void help_lines(FILE *f, const char *text) {
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        const int n = nl ? (int)(nl - p) : (int)strlen(p);
        if (p != text)
            fprintf(f, "%*s", HELP_COL, "");
        fprintf(f, "%.*s\n", n, p);
        p += n + (nl != NULL);
    }
}

/* "  -x, --name META" or "      --name META", then the help at its column. */
static void help_option(FILE *f, char shortc, const char *name, const char *metavar, const char *help) {
    char left[96];
    if (shortc)
        snprintf(left, sizeof left, "  -%c, --%s%s%s", shortc, name, metavar ? " " : "", metavar ? metavar : "");
    else
        snprintf(left, sizeof left, "      --%s%s%s", name, metavar ? " " : "", metavar ? metavar : "");
    const int w = (int)strlen(left);
    fprintf(f, "%s%*s", left, w <= HELP_COL - 2 ? HELP_COL - w : 2, "");
    help_lines(f, help);
}

void cli_help_spec_options(FILE *f, unsigned cmd) {
    (void)cmd;
    seer_spec_option so;
    for (int i = 0; seer_spec_option_at(i, &so); i++) {
        char help[512], def[64];
        char names[128] = "";
        if (so.type == SEER_SPEC_OPT_KIND)
            snprintf(def, sizeof def, "%s", seer_spec_kind_name((seer_spec_kind)(int)so.def));
        else if (so.type == SEER_SPEC_OPT_CHOICE)
            snprintf(def, sizeof def, "%s", so.choices[(int)so.def]);
        else
            snprintf(def, sizeof def, "%g", so.def);
        for (int k = 0; so.type == SEER_SPEC_OPT_CHOICE && so.choices[k]; k++) /* "; a, b or c" */
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? so.choices[k + 1] ? ", " : " or " : "; ",
                     so.choices[k]);
        snprintf(help, sizeof help, "%s (%s%s; default %s)", so.help, so.drafter, names, def);
        help_option(f, 0, so.flag, so.metavar, help);
    }
}

void cli_help(const cli_opt *table, FILE *f, unsigned cmd) {
    for (const cli_opt *o = table; o->cmds; o++) {
        if (!(o->cmds & cmd))
            continue;
        if (o->type == CLI_V_TEXT) {
            if (o->help)
                fputs(o->help, f);
        } else if (o->help) {
            help_option(f, o->shortc, o->name, o->metavar, o->help);
        }
        if (o->more)
            o->more(f, cmd);
    }
}
