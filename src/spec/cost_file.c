/*
 * cost_file.c: the cost table's text file (format in cost.h), its cache key and path.
 *
 * The file is a cache a person may edit or a disk may truncate, so the parser trusts nothing:
 * it reads from a buffer with an explicit length (NUL bytes are an error, not an end), copies
 * each token into a bounded buffer before converting it, checks every number's range, every
 * record's order and count, and fills a scratch table that reaches the caller only whole.
 * fuzz/ drives seer_cost_parse with arbitrary bytes. Version 2 added the est records of a
 * partial table; a version 1 file is read as a whole table, a later version refused (and so
 * measured again by the tools).
 *
 * The path may be one a person named, so the file is only ever a regular file: one that is
 * a symlink, device, FIFO or directory is neither read nor replaced (as root, renaming over
 * /dev/null would have replaced the device), and the new text goes to a fresh mkstemp file
 * beside it that is then renamed into place, so a crash never leaves half a table.
 */
#define _POSIX_C_SOURCE 200809L /* lstat, mkstemp, O_NOFOLLOW under -std=c11 */
#include "model/model.h"
#include "spec/cost.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_MAX_BYTES 65536
#define FILE_MAX_BYTES (1 << 20)

typedef struct {
    const char *p, *end; /* the rest of the current line */
    int line;
} cursor;

static bool is_space(char c) { return c == ' ' || c == '\t'; }

/* The next space-separated token into buf [64]; false at the end of the line. A token that
 * does not fit is returned cut, with *long_tok set. */
static bool next_tok(cursor *c, char *buf, bool *long_tok) {
    while (c->p < c->end && is_space(*c->p))
        c->p++;
    if (c->p == c->end)
        return false;
    size_t n = 0;
    *long_tok = false;
    while (c->p < c->end && !is_space(*c->p)) {
        if (n < 63)
            buf[n++] = *c->p;
        else
            *long_tok = true;
        c->p++;
    }
    buf[n] = 0;
    return true;
}

static seer_status bad(const cursor *c, const char *what) {
    return seer_err(SEER_ERR_FORMAT, "cost file line %d: %s", c->line, what);
}

static seer_status read_int(cursor *c, long lo, long hi, const char *what, int *out) {
    char tok[64];
    bool lt;
    if (!next_tok(c, tok, &lt))
        return seer_err(SEER_ERR_FORMAT, "cost file line %d: %s missing", c->line, what);
    char *e;
    errno = 0;
    const long v = strtol(tok, &e, 10);
    if (lt || e == tok || *e || errno || v < lo || v > hi)
        return seer_err(SEER_ERR_FORMAT,
                        "cost file line %d: %s '%s' is not an integer in [%ld, %ld]", c->line,
                        what, tok, lo, hi);
    *out = (int)v;
    return SEER_OK;
}

static seer_status read_row(cursor *c, const seer_cost_table *t, bool zero_ok,
                            double (*row)[SEER_COST_MAX_L]) {
    char tok[64];
    bool lt;
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++) {
            if (!next_tok(c, tok, &lt))
                return seer_err(SEER_ERR_FORMAT, "cost file line %d: %d times expected, %d given",
                                c->line, t->n_b * t->n_l, i * t->n_l + j);
            char *e;
            const double v = strtod(tok, &e);
            if (lt || e == tok || *e || !(v >= 0 && v <= SEER_COST_MAX_TIME_S) ||
                (!zero_ok && v == 0))
                return seer_err(SEER_ERR_FORMAT, "cost file line %d: time '%s' is not in %s%g]",
                                c->line, tok, zero_ok ? "[0, " : "(0, ", SEER_COST_MAX_TIME_S);
            row[i][j] = v;
        }
    return SEER_OK;
}

static seer_status read_flags(cursor *c, const seer_cost_table *t, uint8_t (*row)[SEER_COST_MAX_L]) {
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++) {
            int v;
            SEER_TRY(read_int(c, 0, 1, "estimate flag", &v));
            row[i][j] = (uint8_t)v;
        }
    return SEER_OK;
}

static seer_status read_grid(cursor *c, const char *name, int *v, int *n, int max, int lo) {
    if (*n)
        return seer_err(SEER_ERR_FORMAT, "cost file line %d: second '%s' grid", c->line, name);
    char tok[64];
    bool lt;
    int k = 0;
    for (cursor peek = *c; next_tok(&peek, tok, &lt);) {
        if (k == max)
            return seer_err(SEER_ERR_FORMAT, "cost file line %d: more than %d %s values", c->line,
                            max, name);
        SEER_TRY(read_int(c, lo, 1 << 24, name, &v[k]));
        if (k > 0 && v[k] <= v[k - 1])
            return seer_err(SEER_ERR_FORMAT, "cost file line %d: %s values must ascend", c->line,
                            name);
        peek = *c;
        k++;
    }
    if (k == 0)
        return seer_err(SEER_ERR_FORMAT, "cost file line %d: empty '%s' grid", c->line, name);
    *n = k;
    return SEER_OK;
}

static seer_status read_key(cursor *c, char *key) {
    while (c->p < c->end && is_space(*c->p))
        c->p++;
    const char *e = c->end;
    while (e > c->p && is_space(e[-1]))
        e--;
    const size_t n = (size_t)(e - c->p);
    if (n == 0 || n >= SEER_COST_KEY_MAX)
        return seer_err(SEER_ERR_FORMAT, "cost file line %d: key of %zu bytes (1..%d)", c->line,
                        n, SEER_COST_KEY_MAX - 1);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)c->p[i] < 0x20 || c->p[i] == 0x7f)
            return bad(c, "control character in the key");
    memcpy(key, c->p, n);
    key[n] = 0;
    c->p = c->end;
    return SEER_OK;
}

/* Which rows were given estimate flags (each at most once). */
typedef struct {
    bool target;
    bool verify[SEER_COST_MAX_N];
    bool draft[SEER_COST_MAX_DRAFTERS][SEER_COST_MAX_K];
} est_seen;

/* "est <row> <flags>": the flags of a row already read. */
static seer_status est_record(cursor *c, seer_cost_table *t, bool have_target,
                              const bool *have_verify, est_seen *seen) {
    char what[64];
    bool lt;
    if (!next_tok(c, what, &lt) || lt)
        return bad(c, "est: which row");
    if (!strcmp(what, "target")) {
        if (!have_target)
            return bad(c, "est target before the target row");
        if (seen->target)
            return bad(c, "second est target");
        seen->target = true;
        return read_flags(c, t, t->est_target);
    }
    if (!strcmp(what, "verify")) {
        int n, i = 0;
        SEER_TRY(read_int(c, 2, 1 << 24, "verification size", &n));
        while (i < t->n_n && t->n[i] != n)
            i++;
        if (i == t->n_n || !have_verify[i])
            return bad(c, "est verify before its verify row");
        if (seen->verify[i])
            return bad(c, "second est for this verify row");
        seen->verify[i] = true;
        return read_flags(c, t, t->est_verify[i]);
    }
    if (!strcmp(what, "draft")) {
        char name[64];
        seer_spec_kind kind;
        if (!next_tok(c, name, &lt))
            return bad(c, "drafter name missing");
        if (lt || seer_spec_kind_parse(name, &kind) != SEER_OK || kind == SEER_SPEC_NONE)
            return seer_err(SEER_ERR_FORMAT, "cost file line %d: unknown drafter '%s'", c->line, name);
        const int d = seer_cost_find_drafter(t, kind);
        int k, ki = 0;
        SEER_TRY(read_int(c, 0, 1 << 24, "budget", &k));
        while (d >= 0 && ki < t->drafter[d].n_k && t->drafter[d].k[ki] != k)
            ki++;
        if (d < 0 || ki == t->drafter[d].n_k)
            return bad(c, "est draft before its draft row");
        if (seen->draft[d][ki])
            return bad(c, "second est for this draft row");
        seen->draft[d][ki] = true;
        return read_flags(c, t, t->drafter[d].est[ki]);
    }
    return bad(c, "est: not a target, verify or draft row");
}

/* One record (the line's first token is word) into t. */
static seer_status record(cursor *c, const char *word, seer_cost_table *t, bool *have_target,
                          bool *have_verify, est_seen *seen) {
    if (!strcmp(word, "key"))
        return t->key[0] ? bad(c, "second key") : read_key(c, t->key);
    if (!strcmp(word, "b"))
        return read_grid(c, "b", t->b, &t->n_b, SEER_COST_MAX_B, 1);
    if (!strcmp(word, "l"))
        return read_grid(c, "l", t->l, &t->n_l, SEER_COST_MAX_L, 1);
    if (!strcmp(word, "n")) {
        if (*have_target || t->n_drafters)
            return bad(c, "the n grid must come before the times");
        return read_grid(c, "n", t->n, &t->n_n, SEER_COST_MAX_N, 2);
    }
    if (!t->n_b || !t->n_l)
        return bad(c, "times before the b and l grids");
    if (!strcmp(word, "est"))
        return est_record(c, t, *have_target, have_verify, seen);
    if (!strcmp(word, "target")) {
        if (*have_target)
            return bad(c, "second target row");
        *have_target = true;
        return read_row(c, t, false, t->t_target);
    }
    if (!strcmp(word, "verify")) {
        int n, i = 0;
        SEER_TRY(read_int(c, 2, 1 << 24, "verification size", &n));
        while (i < t->n_n && t->n[i] != n)
            i++;
        if (i == t->n_n)
            return bad(c, "verification size not in the n grid");
        if (have_verify[i])
            return bad(c, "second verify row for this size");
        have_verify[i] = true;
        return read_row(c, t, false, t->t_verify[i]);
    }
    if (!strcmp(word, "draft")) {
        char name[64];
        bool lt;
        seer_spec_kind kind;
        if (!next_tok(c, name, &lt))
            return bad(c, "drafter name missing");
        if (lt || seer_spec_kind_parse(name, &kind) != SEER_OK || kind == SEER_SPEC_NONE)
            return seer_err(SEER_ERR_FORMAT, "cost file line %d: unknown drafter '%s'", c->line,
                            name);
        int d = seer_cost_find_drafter(t, kind);
        if (d < 0) {
            if (t->n_drafters == SEER_COST_MAX_DRAFTERS)
                return bad(c, "too many drafters");
            d = t->n_drafters++;
            t->drafter[d].kind = kind;
        }
        seer_cost_drafter *dr = &t->drafter[d];
        int k;
        SEER_TRY(read_int(c, 0, 1 << 24, "budget", &k));
        if (dr->n_k == SEER_COST_MAX_K)
            return bad(c, "too many budgets for this drafter");
        if (dr->n_k > 0 && k <= dr->k[dr->n_k - 1])
            return bad(c, "budgets of a drafter must ascend");
        dr->k[dr->n_k] = k;
        SEER_TRY(read_row(c, t, true, dr->t[dr->n_k]));
        dr->n_k++;
        return SEER_OK;
    }
    return bad(c, "unknown record");
}

seer_status seer_cost_parse(const char *text, size_t len, seer_cost_table *out) {
    SEER_CHECK_ARG(text);
    SEER_CHECK_ARG(out);
    if (len > FILE_MAX_BYTES)
        return seer_err(SEER_ERR_FORMAT, "cost file: %zu bytes (at most %d)", len, FILE_MAX_BYTES);
    if (memchr(text, 0, len))
        return seer_err(SEER_ERR_FORMAT, "cost file: NUL byte");
    seer_cost_table *t = calloc(1, sizeof *t);
    if (!t)
        return seer_err(SEER_ERR_OOM, "cost file: out of memory");
    bool have_header = false, have_target = false, have_end = false;
    bool have_verify[SEER_COST_MAX_N] = {false};
    est_seen seen;
    memset(&seen, 0, sizeof seen);
    int version = 0;
    seer_status st = SEER_OK;
    cursor c = {text, text, 0};
    for (const char *p = text, *end = text + len; p < end && st == SEER_OK;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        c.p = p, c.end = le > p && le[-1] == '\r' ? le - 1 : le, c.line++;
        p = nl ? nl + 1 : end;
        if (le - c.p > LINE_MAX_BYTES) {
            st = bad(&c, "line too long");
            break;
        }
        char word[64];
        bool lt;
        if (!next_tok(&c, word, &lt) || word[0] == '#')
            continue;
        if (have_end)
            st = bad(&c, "text after 'end'");
        else if (!have_header) {
            int v;
            /* version 1 has no est records: read, it is a table measured throughout */
            st = strcmp(word, "seer-cost") ? bad(&c, "not a seer cost file (no 'seer-cost 2')")
                                           : read_int(&c, 1, SEER_COST_FILE_VERSION, "version", &v);
            version = v;
            have_header = true;
        } else if (!strcmp(word, "end"))
            have_end = true;
        else if (version < 2 && !strcmp(word, "est"))
            st = bad(&c, "est record in a version 1 file");
        else
            st = record(&c, word, t, &have_target, have_verify, &seen);
        if (st == SEER_OK && next_tok(&c, word, &lt))
            st = seer_err(SEER_ERR_FORMAT, "cost file line %d: unexpected '%s'", c.line, word);
    }
    if (st == SEER_OK) {
        if (!have_header || !have_end)
            st = seer_err(SEER_ERR_FORMAT, "cost file: %s", have_header ? "truncated (no 'end')"
                                                                        : "empty");
        else if (!t->key[0] || !have_target)
            st = seer_err(SEER_ERR_FORMAT, "cost file: no %s", t->key[0] ? "target row" : "key");
        for (int i = 0; st == SEER_OK && i < t->n_n; i++)
            if (!have_verify[i])
                st = seer_err(SEER_ERR_FORMAT, "cost file: no verify row for n = %d", t->n[i]);
        if (st == SEER_OK && seer_cost_table_check(t) != SEER_OK) {
            char msg[512]; /* the message is rewritten from itself: copy it first */
            snprintf(msg, sizeof msg, "%s", seer_last_error());
            st = seer_err(SEER_ERR_FORMAT, "cost file: %s", msg);
        }
    }
    if (st == SEER_OK)
        *out = *t;
    free(t);
    return st;
}

/* snprintf at *pos that counts what does not fit, so that one pass sizes the text. */
static void appendf(char *buf, size_t cap, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t cap, size_t *pos, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(*pos < cap ? buf + *pos : NULL, *pos < cap ? cap - *pos : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        *pos += (size_t)n;
}

static void append_row(char *buf, size_t cap, size_t *pos, const seer_cost_table *t,
                       const double (*row)[SEER_COST_MAX_L]) {
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++)
            appendf(buf, cap, pos, " %.17g", row[i][j]);
    appendf(buf, cap, pos, "\n");
}

/* "est <what> <flags>" when any cell of the row was estimated; nothing for a measured row. */
static void append_est(char *buf, size_t cap, size_t *pos, const seer_cost_table *t,
                       const uint8_t (*f)[SEER_COST_MAX_L], const char *what) {
    bool any = false;
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++)
            any |= f[i][j] != 0;
    if (!any)
        return;
    appendf(buf, cap, pos, "est %s", what);
    for (int i = 0; i < t->n_b; i++)
        for (int j = 0; j < t->n_l; j++)
            appendf(buf, cap, pos, " %d", f[i][j]);
    appendf(buf, cap, pos, "\n");
}

seer_status seer_cost_format(const seer_cost_table *t, char *buf, size_t cap, size_t *len) {
    SEER_TRY(seer_cost_table_check(t));
    if (!t->key[0] || strpbrk(t->key, "\n\r"))
        return seer_err(SEER_ERR_INVALID_ARG, "cost table: the key must be one non-empty line");
    size_t pos = 0;
    appendf(buf, cap, &pos, "seer-cost %d\nkey %s\nb", SEER_COST_FILE_VERSION, t->key);
    for (int i = 0; i < t->n_b; i++)
        appendf(buf, cap, &pos, " %d", t->b[i]);
    appendf(buf, cap, &pos, "\nl");
    for (int i = 0; i < t->n_l; i++)
        appendf(buf, cap, &pos, " %d", t->l[i]);
    appendf(buf, cap, &pos, "\n");
    if (t->n_n) {
        appendf(buf, cap, &pos, "n");
        for (int i = 0; i < t->n_n; i++)
            appendf(buf, cap, &pos, " %d", t->n[i]);
        appendf(buf, cap, &pos, "\n");
    }
    int measured, total;
    seer_cost_table_count(t, &measured, &total);
    appendf(buf, cap, &pos, "# seconds per call, rows B-major over the l grid\n");
    if (measured < total)
        appendf(buf, cap, &pos, "# partial: %d of %d times measured, the rest estimated (est rows)\n",
                measured, total);
    appendf(buf, cap, &pos, "target");
    append_row(buf, cap, &pos, t, t->t_target);
    append_est(buf, cap, &pos, t, t->est_target, "target");
    for (int i = 0; i < t->n_n; i++) {
        appendf(buf, cap, &pos, "verify %d", t->n[i]);
        append_row(buf, cap, &pos, t, t->t_verify[i]);
        char what[32];
        snprintf(what, sizeof what, "verify %d", t->n[i]);
        append_est(buf, cap, &pos, t, t->est_verify[i], what);
    }
    for (int d = 0; d < t->n_drafters; d++)
        for (int k = 0; k < t->drafter[d].n_k; k++) {
            const char *name = seer_spec_kind_name(t->drafter[d].kind);
            appendf(buf, cap, &pos, "draft %s %d", name, t->drafter[d].k[k]);
            append_row(buf, cap, &pos, t, t->drafter[d].t[k]);
            char what[96];
            snprintf(what, sizeof what, "draft %s %d", name, t->drafter[d].k[k]);
            append_est(buf, cap, &pos, t, t->drafter[d].est[k], what);
        }
    appendf(buf, cap, &pos, "end\n");
    if (len)
        *len = pos;
    if (pos >= cap)
        return seer_err(SEER_ERR_INVALID_ARG, "cost table: text of %zu bytes, buffer of %zu", pos,
                        cap);
    return SEER_OK;
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "directory" : S_ISLNK(m) ? "symbolic link" : S_ISFIFO(m) ? "FIFO"
         : S_ISCHR(m) ? "character device" : S_ISBLK(m) ? "block device"
         : S_ISSOCK(m) ? "socket" : "special file";
}

/* SEER_OK when path names a regular file (not a symlink to one) or nothing that lstat can
 * see (creating the file then fails, or not): the only things a cost file may replace. */
seer_status seer_cost_check_path(const char *path) {
    SEER_CHECK_ARG(path);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return seer_err(SEER_ERR_IO, "cost file: %s is a %s, not a regular file", path,
                        file_kind(st.st_mode));
    return SEER_OK;
}

/* 0, or the errno of the write that failed. */
static int write_all(int fd, const char *text, size_t len) {
    while (len > 0) {
        const ssize_t n = write(fd, text, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        text += n, len -= (size_t)n;
    }
    return 0;
}

seer_status seer_cost_save(const seer_cost_table *t, const char *path) {
    SEER_CHECK_ARG(path);
    size_t len = 0;
    char probe[1];
    seer_status st = seer_cost_format(t, probe, 0, &len);
    if (st != SEER_OK && len == 0)
        return st; /* the table itself is bad */
    SEER_TRY(seer_cost_check_path(path));
    char *text = malloc(len + 1);
    char *tmp = malloc(strlen(path) + 16);
    if (!text || !tmp) {
        free(text);
        free(tmp);
        return seer_err(SEER_ERR_OOM, "cost file: out of memory");
    }
    st = seer_cost_format(t, text, len + 1, NULL);
    /* the temporary file in the same directory (rename stays within one file system);
     * mkstemp creates it with O_EXCL, so nothing already at that name is followed */
    sprintf(tmp, "%s.XXXXXX", path);
    const int fd = st == SEER_OK ? mkstemp(tmp) : -1;
    if (st == SEER_OK && fd < 0)
        st = seer_err(SEER_ERR_IO, "cost file: cannot create a file beside %s: %s", path,
                      strerror(errno));
    if (fd >= 0) {
        int werr = write_all(fd, text, len);
        if (close(fd) != 0 && !werr)
            werr = errno;
        if (werr)
            st = seer_err(SEER_ERR_IO, "cost file: writing %s failed: %s", tmp, strerror(werr));
        /* checked again just before the rename: what path names may have changed */
        if (st == SEER_OK)
            st = seer_cost_check_path(path);
        if (st == SEER_OK && rename(tmp, path) != 0)
            st = seer_err(SEER_ERR_IO, "cost file: cannot rename to %s: %s", path, strerror(errno));
        if (st != SEER_OK)
            unlink(tmp);
    }
    free(text);
    free(tmp);
    return st;
}

seer_status seer_cost_load(const char *path, const char *want_key, seer_cost_table *out) {
    SEER_CHECK_ARG(path);
    SEER_CHECK_ARG(out);
    /* O_NOFOLLOW: a symlink is refused (ELOOP); O_NONBLOCK: a FIFO does not wait for a writer
     * before fstat refuses it */
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return seer_err(SEER_ERR_IO, "cost file: cannot open %s: %s", path,
                        errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        return seer_err(SEER_ERR_IO, "cost file: cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return seer_err(SEER_ERR_IO, "cost file: %s is a %s, not a regular file", path,
                        file_kind(sb.st_mode));
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return seer_err(SEER_ERR_OOM, "cost file: out of memory");
    }
    char *text = malloc(FILE_MAX_BYTES + 1);
    if (!text) {
        fclose(f);
        return seer_err(SEER_ERR_OOM, "cost file: out of memory");
    }
    const size_t n = fread(text, 1, FILE_MAX_BYTES + 1, f);
    const bool err = ferror(f);
    fclose(f);
    seer_status st;
    seer_cost_table *t = malloc(sizeof *t);
    if (err)
        st = seer_err(SEER_ERR_IO, "cost file: cannot read %s", path);
    else if (!t)
        st = seer_err(SEER_ERR_OOM, "cost file: out of memory");
    else
        st = seer_cost_parse(text, n, t); /* past FILE_MAX_BYTES it refuses the size */
    if (st == SEER_OK && want_key && strcmp(t->key, want_key))
        st = seer_err(SEER_ERR_FORMAT, "cost file %s was measured on '%s', not '%s'", path,
                      t->key, want_key);
    if (st == SEER_OK)
        *out = *t;
    free(t);
    free(text);
    return st;
}

void seer_cost_key(const seer_model *model, const char *device, char *buf, size_t cap) {
    if (!buf || cap == 0)
        return;
    seer_model_info mi;
    seer_model_get_info(model, &mi);
    /* a model holding draft weights drafts through them (auto.c): its own table */
    char dw[32] = "";
    if (model->draft_layers)
        snprintf(dw, sizeof dw, "+dw-%s", seer_ggml_type_name((ggml_type)model->draft_dtype));
    snprintf(buf, cap, "%s-%s-%llu-%llu%s@%s", mi.arch, mi.name[0] ? mi.name : "unnamed",
             (unsigned long long)mi.n_params, (unsigned long long)mi.file_size, dw,
             device ? device : mi.backend);
    for (char *p = buf; *p; p++) /* the key is one line of a text file */
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '_';
}

seer_status seer_cost_cache_path(const char *dir, const char *key, char *buf, size_t cap) {
    SEER_CHECK_ARG(dir);
    SEER_CHECK_ARG(key);
    SEER_CHECK_ARG(buf);
    const int n = snprintf(buf, cap, "%s/%s.cost", dir, key);
    if (n < 0 || (size_t)n >= cap || !key[0])
        return seer_err(SEER_ERR_INVALID_ARG, "cost cache path for '%s' does not fit", key);
    for (char *p = buf + strlen(dir) + 1; *p && p < buf + n - 5; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-' || *p == '_'))
            *p = '_';
    return SEER_OK;
}
