/*
 * cli_io.c: the text the subcommands read and write: prompts from files and arguments,
 * bounded by what the context can hold before anything is tokenized, and the output on
 * stdout, whose write errors (a full disk, a closed pipe, a closed stdout) end the command
 * with a message and a non-zero exit instead of losing the text silently.
 * Not for: the HTTP server's input (serve_http.c).
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- output ---------------------------------------------------------------------------- */

static int out_errno; /* the first write error on stdout, 0 while there is none */

bool cli_stdout_open(const char *cmd) {
    /* A closed pipe is then an EPIPE the command reports, not a silent death by SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    /* A closed fd 1 would be given to the next file opened, and the output written into it. */
    if (fcntl(STDOUT_FILENO, F_GETFD) == -1) {
        fprintf(stderr, "seer %s: stdout is closed: nowhere to write the output\n", cmd);
        return false;
    }
    return true;
}

bool cli_out(const char *s, size_t n, bool flush) {
    if (out_errno)
        return false;
    errno = 0;
    if ((n && fwrite(s, 1, n, stdout) != n) || (flush && fflush(stdout) != 0))
        out_errno = errno ? errno : EIO;
    return !out_errno;
}

bool cli_stdout_done(const char *cmd) {
    errno = 0;
    if (!out_errno && (fflush(stdout) != 0 || ferror(stdout)))
        out_errno = errno ? errno : EIO;
    if (out_errno)
        fprintf(stderr, "seer %s: cannot write the output to stdout: %s\n", cmd, strerror(out_errno));
    return !out_errno;
}

/* ---- prompts --------------------------------------------------------------------------- */

size_t cli_prompt_max_bytes(const seer_model *m, int n_ctx) {
    /* No token stands for more bytes of the text than its piece has (SentencePiece's space
     * marker is one byte of text, as its piece gives it); an unknown character, up to 4
     * bytes, is one token. */
    int most = 4;
    for (int i = 0, v = seer_n_vocab(m); i < v; i++) {
        const int n = seer_token_piece(m, i, NULL, 0);
        if (n > most)
            most = n;
    }
    return (size_t)(n_ctx > 0 ? n_ctx : 1) * (size_t)most;
}

FILE *cli_prompt_open(const char *cmd, const char *path) {
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "seer %s: cannot read prompt file '%s': %s\n", cmd, path, strerror(errno));
        if (f)
            fclose(f);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        fprintf(stderr, "seer %s: cannot read prompt file '%s': it is a directory\n", cmd, path);
        fclose(f);
        return NULL;
    }
    return f;
}

static void too_large(const char *cmd, const char *what, size_t n, bool more, size_t max, int n_ctx) {
    fprintf(stderr, "seer %s: %s is larger than the context can hold (%s%zu bytes; at most %zu for "
                    "%d tokens of this vocabulary; use --ctx)\n",
            cmd, what, more ? "more than " : "", n, max, n_ctx);
}

char *cli_prompt_read(const char *cmd, FILE *f, const char *path, size_t max, int n_ctx) {
    char what[1100];
    snprintf(what, sizeof what, "the prompt file '%s'", path);
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max) {
        too_large(cmd, what, (size_t)st.st_size, false, max, n_ctx); /* refused unread */
        return NULL;
    }
    /* Read to at most max + 1 bytes whatever the file is (a device or a pipe has no size),
     * stopping at the first NUL: a prompt is text, and a C string would end there. */
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb)
                free(b);
            if (!(b = nb))
                break;
        }
        size_t want = cap - n - 1;
        if (want > max + 1 - n)
            want = max + 1 - n;
        const size_t r = fread(b + n, 1, want, f);
        const char *z = memchr(b + n, 0, r);
        if (z) {
            fprintf(stderr, "seer %s: %s has a NUL byte (at offset %zu): a prompt is text\n", cmd, what,
                    (size_t)(z - b));
            free(b);
            return NULL;
        }
        n += r;
        if (n > max) {
            too_large(cmd, what, max, true, max, n_ctx);
            free(b);
            return NULL;
        }
        if (r < want)
            break;
    }
    if (!b) {
        fprintf(stderr, "seer %s: out of memory reading %s\n", cmd, what);
        return NULL;
    }
    if (ferror(f)) {
        fprintf(stderr, "seer %s: cannot read %s: %s\n", cmd, what, strerror(errno));
        free(b);
        return NULL;
    }
    b[n] = 0;
    return b;
}

bool cli_prompt_fits(const char *cmd, const char *what, size_t len, size_t max, int n_ctx) {
    if (len <= max)
        return true;
    too_large(cmd, what, len, false, max, n_ctx);
    return false;
}
