/*
 * accept_trace.c: acceptance traces, what a drafter accepted round by round, recorded from a
 * real model and replayed by benchmarks on random weights (seer_gen_set_synthetic),
 * so that real, uneven acceptance drives a timing run instead of a constant rate.
 *
 * The file, text, one sequence's run with one drafter per line:
 *
 *   seer-accept-trace 1
 *   seq streaming 256 3/4 4/4 0/4 2/4 ...     kind, budget K, then a/n per round: a of the
 *   seq retrieval 256 ...                     n drafted tokens accepted (0 <= a <= n <= 64)
 *   end
 *
 * Lines starting with '#' are comments. A run under auto switches drafters between rounds;
 * each (sequence, drafter, K) gets its own line.
 *
 * Replay reads a line as a stream of per-token outcomes: a round a/n is a ones, then a zero
 * when a < n (the first rejection; nothing is known past it). A replayed round of n' drafts
 * takes outcomes until a zero or n' ones, so a round of another length (or a tree's first
 * children) still follows the recorded text: a run of accepted tokens continues into the
 * next round. Each sequence of a batch replays its own line of the drafter's kind (the same
 * budget where there is one) from its own offset, and a line is read cyclically.
 */
#include "seer_bench.h"
#include "spec/accept_trace.h"
#include "spec/drafter.h"
#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_MAX_LINES 65536
#define TRACE_MAX_N 64

typedef struct {
    seer_spec_kind kind;
    int budget;
    int n_rounds, cap_rounds;
    uint8_t *a, *n;     /* [n_rounds] accepted of drafted */
    int64_t n_out;      /* outcomes in the stream */
    uint8_t *out;       /* [n_out] the outcome stream replay reads (built by the parser) */
    int owner;          /* recording: the handle that writes it (-1: closed) */
    int epoch;          /* recording: the generator run it belongs to */
} trace_line;

static seer_status build_stream(trace_line *l);

struct seer_accept_trace {
    trace_line *line;
    int n_lines, cap_lines;
    int epoch;
};

seer_status seer_accept_trace_new(seer_accept_trace **out) {
    SEER_CHECK_ARG(out);
    *out = calloc(1, sizeof **out);
    return *out ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory for an acceptance trace");
}

void seer_accept_trace_free(seer_accept_trace *t) {
    if (!t)
        return;
    for (int i = 0; i < t->n_lines; i++)
        free(t->line[i].a), free(t->line[i].n), free(t->line[i].out);
    free(t->line);
    free(t);
}

static trace_line *add_line(seer_accept_trace *t, seer_spec_kind kind, int budget) {
    if (t->n_lines == TRACE_MAX_LINES) {
        seer_err(SEER_ERR_INVALID_ARG, "an acceptance trace holds at most %d lines", TRACE_MAX_LINES);
        return NULL;
    }
    if (t->n_lines == t->cap_lines) {
        const int cap = t->cap_lines ? 2 * t->cap_lines : 16;
        trace_line *l = realloc(t->line, sizeof *l * (size_t)cap);
        if (!l) {
            seer_err(SEER_ERR_OOM, "out of memory for an acceptance trace");
            return NULL;
        }
        t->line = l;
        t->cap_lines = cap;
    }
    trace_line *l = &t->line[t->n_lines++];
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->budget = budget;
    l->owner = -1;
    return l;
}

static seer_status add_round(trace_line *l, int a, int n) {
    if (l->n_rounds == l->cap_rounds) {
        const int cap = l->cap_rounds ? 2 * l->cap_rounds : 64;
        uint8_t *na = realloc(l->a, (size_t)cap);
        if (na)
            l->a = na;
        uint8_t *nn = na ? realloc(l->n, (size_t)cap) : NULL;
        if (nn)
            l->n = nn;
        if (!na || !nn)
            return seer_err(SEER_ERR_OOM, "out of memory for an acceptance trace");
        l->cap_rounds = cap;
    }
    l->a[l->n_rounds] = (uint8_t)a;
    l->n[l->n_rounds++] = (uint8_t)n;
    free(l->out); /* replay reads parsed traces; a recorded line has no stream */
    l->out = NULL;
    l->n_out = 0;
    return SEER_OK;
}

static bool traced_kind(seer_spec_kind k) { return seer_drafter_of_kind(k) != NULL; }

/* ---- text ------------------------------------------------------------------------------- */

seer_status seer_accept_trace_parse(const char *text, size_t len, seer_accept_trace **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    if (!text)
        return seer_err(SEER_ERR_INVALID_ARG, "acceptance trace: no text");
    char *buf = malloc(len + 1);
    if (!buf)
        return seer_err(SEER_ERR_OOM, "out of memory for an acceptance trace");
    memcpy(buf, text, len);
    buf[len] = 0;
    if (strlen(buf) != len) {
        free(buf);
        return seer_err(SEER_ERR_FORMAT, "acceptance trace: a NUL byte in the text");
    }
    seer_accept_trace *t = NULL;
    seer_status st = seer_accept_trace_new(&t);
    int lineno = 0;
    bool header = false, end = false;
    char *save = NULL;
    for (char *ln = strtok_r(buf, "\n", &save); ln && st == SEER_OK; ln = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char *s2 = NULL, *w = strtok_r(ln, " \t\r", &s2);
        if (!w || w[0] == '#')
            continue;
        if (end) {
            st = seer_err(SEER_ERR_FORMAT, "acceptance trace line %d: text after 'end'", lineno);
        } else if (!header) {
            char *v = strtok_r(NULL, " \t\r", &s2);
            if (strcmp(w, "seer-accept-trace") || !v || strcmp(v, "1") || strtok_r(NULL, " \t\r", &s2))
                st = seer_err(SEER_ERR_FORMAT, "acceptance trace: the first line must be 'seer-accept-trace 1'");
            header = true;
        } else if (!strcmp(w, "end")) {
            end = true;
        } else if (!strcmp(w, "seq")) {
            char *kn = strtok_r(NULL, " \t\r", &s2), *kb = strtok_r(NULL, " \t\r", &s2), *e = NULL;
            seer_spec_kind kind;
            long budget = kb ? (errno = 0, strtol(kb, &e, 10)) : -1;
            if (!kn || seer_spec_kind_parse(kn, &kind) != SEER_OK || !traced_kind(kind)) {
                st = seer_err(SEER_ERR_FORMAT, "acceptance trace line %d: '%s' is not a drafter", lineno,
                              kn ? kn : "");
                break;
            }
            if (!kb || *e || errno || budget < 0 || budget > (1 << 30)) {
                st = seer_err(SEER_ERR_FORMAT, "acceptance trace line %d: budget '%s'", lineno, kb ? kb : "");
                break;
            }
            trace_line *l = add_line(t, kind, (int)budget);
            if (!l) {
                st = SEER_ERR_OOM;
                break;
            }
            for (char *r = strtok_r(NULL, " \t\r", &s2); r && st == SEER_OK; r = strtok_r(NULL, " \t\r", &s2)) {
                char *slash = NULL;
                errno = 0;
                long a = strtol(r, &slash, 10), n = -1;
                if (slash != r && *slash == '/') {
                    char *e2 = NULL;
                    n = strtol(slash + 1, &e2, 10);
                    if (e2 == slash + 1 || *e2)
                        n = -1;
                }
                if (errno || n < 1 || n > TRACE_MAX_N || a < 0 || a > n)
                    st = seer_err(SEER_ERR_FORMAT, "acceptance trace line %d: round '%s' (a/n, 0 <= a <= n <= %d)",
                                  lineno, r, TRACE_MAX_N);
                else
                    st = add_round(l, (int)a, (int)n);
            }
            if (st == SEER_OK && l->n_rounds == 0)
                st = seer_err(SEER_ERR_FORMAT, "acceptance trace line %d: a sequence without rounds", lineno);
            if (st == SEER_OK)
                st = build_stream(l);
        } else {
            st = seer_err(SEER_ERR_FORMAT, "acceptance trace line %d: unknown record '%s'", lineno, w);
        }
    }
    if (st == SEER_OK && !header)
        st = seer_err(SEER_ERR_FORMAT, "acceptance trace: empty");
    else if (st == SEER_OK && !end)
        st = seer_err(SEER_ERR_FORMAT, "acceptance trace: no 'end' line (cut short?)");
    free(buf);
    if (st != SEER_OK) {
        seer_accept_trace_free(t);
        return st;
    }
    *out = t;
    return SEER_OK;
}

seer_status seer_accept_trace_load(const char *path, seer_accept_trace **out) {
    SEER_CHECK_ARG(path);
    SEER_CHECK_ARG(out);
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return seer_err(SEER_ERR_IO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    seer_status st = buf ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory reading %s", path);
    while (st == SEER_OK) {
        if (n == cap) {
            if (cap >= (size_t)1 << 30) {
                st = seer_err(SEER_ERR_FORMAT, "%s: larger than 1 GiB", path);
                break;
            }
            char *b = realloc(buf, cap * 2);
            if (!b) {
                st = seer_err(SEER_ERR_OOM, "out of memory reading %s", path);
                break;
            }
            buf = b;
            cap *= 2;
        }
        const size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f))
                st = seer_err(SEER_ERR_IO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (st == SEER_OK) {
        st = seer_accept_trace_parse(buf, n, out);
        if (st != SEER_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", seer_last_error());
            seer_err(st, "%s: %s", path, msg);
        }
    }
    free(buf);
    return st;
}

seer_status seer_accept_trace_save(const seer_accept_trace *t, const char *path) {
    SEER_CHECK_ARG(t);
    SEER_CHECK_ARG(path);
    FILE *f = fopen(path, "w");
    if (!f)
        return seer_err(SEER_ERR_IO, "%s: %s", path, strerror(errno));
    fprintf(f, "seer-accept-trace 1\n");
    for (int i = 0; i < t->n_lines; i++) {
        const trace_line *l = &t->line[i];
        if (l->n_rounds == 0)
            continue;
        fprintf(f, "seq %s %d", seer_spec_kind_name(l->kind), l->budget);
        for (int r = 0; r < l->n_rounds; r++)
            fprintf(f, " %d/%d", l->a[r], l->n[r]);
        fputc('\n', f);
    }
    fprintf(f, "end\n");
    if (fclose(f) != 0)
        return seer_err(SEER_ERR_IO, "%s: write error", path);
    return SEER_OK;
}

void seer_accept_trace_counts(const seer_accept_trace *t, seer_spec_kind kind, int64_t *rounds,
                              int64_t *drafted, int64_t *accepted) {
    int64_t r = 0, d = 0, a = 0;
    for (int i = 0; t && i < t->n_lines; i++) {
        const trace_line *l = &t->line[i];
        if (kind != SEER_SPEC_NONE && l->kind != kind)
            continue;
        r += l->n_rounds;
        for (int j = 0; j < l->n_rounds; j++)
            d += l->n[j], a += l->a[j];
    }
    if (rounds)
        *rounds = r;
    if (drafted)
        *drafted = d;
    if (accepted)
        *accepted = a;
}

/* ---- recording -------------------------------------------------------------------------- */

int seer_accept_trace_begin(seer_accept_trace *t) {
    return ++t->epoch;
}

seer_status seer_accept_trace_record(seer_accept_trace *t, int epoch, int handle, seer_spec_kind kind,
                                     int budget, int accepted, int drafted) {
    if (!traced_kind(kind) || drafted < 1 || drafted > TRACE_MAX_N || accepted < 0 || accepted > drafted)
        return SEER_OK; /* nothing a trace can hold (plain rounds, empty proposals) */
    trace_line *l = NULL;
    for (int i = t->n_lines - 1; i >= 0 && !l; i--) {
        trace_line *c = &t->line[i];
        if (c->epoch == epoch && c->owner == handle && c->kind == kind && c->budget == budget)
            l = c;
    }
    if (!l) {
        if (!(l = add_line(t, kind, budget)))
            return SEER_ERR_OOM;
        l->owner = handle;
        l->epoch = epoch;
    }
    return add_round(l, accepted, drafted);
}

void seer_accept_trace_close(seer_accept_trace *t, int epoch, int handle) {
    for (int i = 0; t && i < t->n_lines; i++)
        if (t->line[i].epoch == epoch && t->line[i].owner == handle)
            t->line[i].owner = -1;
}

/* ---- replay ----------------------------------------------------------------------------- */

/* The outcome stream of a line (a ones, then a zero when a < n, per round). */
static seer_status build_stream(trace_line *l) {
    int64_t n = 0;
    for (int r = 0; r < l->n_rounds; r++)
        n += l->a[r] + (l->a[r] < l->n[r]);
    uint8_t *o = malloc(n > 0 ? (size_t)n : 1);
    if (!o)
        return seer_err(SEER_ERR_OOM, "out of memory for an acceptance trace");
    int64_t k = 0;
    for (int r = 0; r < l->n_rounds; r++) {
        memset(o + k, 1, l->a[r]);
        k += l->a[r];
        if (l->a[r] < l->n[r])
            o[k++] = 0;
    }
    free(l->out);
    l->out = o;
    l->n_out = n;
    return SEER_OK;
}

int seer_accept_trace_pick(const seer_accept_trace *t, seer_spec_kind kind, int budget, int handle,
                           int64_t *start) {
    int exact = 0, any = 0;
    for (int i = 0; i < t->n_lines; i++)
        if (t->line[i].kind == kind && t->line[i].n_rounds > 0) {
            any++;
            exact += t->line[i].budget == budget;
        }
    if (!any)
        return -1;
    const bool by_budget = exact > 0;
    const int want = (handle < 0 ? -handle : handle) % (by_budget ? exact : any);
    for (int i = 0, c = 0; i < t->n_lines; i++) {
        const trace_line *l = &t->line[i];
        if (l->kind != kind || l->n_rounds == 0 || (by_budget && l->budget != budget))
            continue;
        if (c++ == want) {
            const int64_t n = l->n_out;
            /* sequences sharing a line start apart, so that a batch's acceptance is ragged */
            *start = n > 0 ? (int64_t)((uint64_t)handle * 7919u % (uint64_t)n) : 0;
            return i;
        }
    }
    return -1;
}

bool seer_accept_trace_next(const seer_accept_trace *t, int line, int64_t *pos) {
    const trace_line *l = &t->line[line];
    const int64_t n = l->n_out;
    const uint8_t *o = l->out;
    if (!o || n == 0)
        return false;
    if (*pos < 0 || *pos >= n)
        *pos = 0;
    return o[(*pos)++] != 0;
}
