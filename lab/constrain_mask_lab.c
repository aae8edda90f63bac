/*
 * constrain_mask_lab.c: the constraint engine's token-mask cost per decoding step, on a real
 * vocabulary (a vocab.gguf from tests/fixtures/, or a model), at its full size and cut to its
 * first N tokens (a 128K-token vocabulary from Qwen2.5's 152K): a JSON document of the shape
 * of a structured output is tokenized, and the constraint is walked through it token by token
 * with the whole vocabulary's mask computed at every step (what a decode step pays).
 *
 *   build/lab_constrain_mask VOCAB.gguf [N_VOCAB] [REPS]
 *
 * Prints the trie build time, the mean, median and worst mask time per token (thread CPU time)
 * and the mean over steps inside strings and outside. Correctness is tests/test_constrain.c's.
 */
#include "constrain/grammar.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"name\":{\"type\":\"string\"},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},\"role\":{\"enum\":[\"admin\",\"editor\",\"viewer\"]},"
    "\"address\":{\"$ref\":\"#/$defs/addr\"},\"orders\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
    "\"properties\":{\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":999},"
    "\"price\":{\"type\":\"number\"},\"note\":{\"type\":\"string\"}},\"required\":[\"sku\",\"qty\",\"price\"]}},"
    "\"active\":{\"type\":\"boolean\"}},\"required\":[\"id\",\"name\",\"role\",\"orders\",\"active\"],"
    "\"$defs\":{\"addr\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":"
    "{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\"]}}}";

static const char *const DOC =
    "{\"id\": 12345, \"name\": \"Ada Lovelace\", \"email\": \"ada@example.org\", \"role\": \"editor\", "
    "\"address\": {\"street\": \"12 St James's Square\", \"city\": \"London\", \"zip\": \"10001\"}, "
    "\"orders\": [{\"sku\": \"AB-1200\", \"qty\": 2, \"price\": 19.99, \"note\": \"gift wrap, please\"}, "
    "{\"sku\": \"ZX-0042\", \"qty\": 10, \"price\": 3.5}], \"active\": true}";

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s VOCAB.gguf [N_VOCAB] [REPS]\n", argv[0]);
        return 2;
    }
    gguf_file *f = NULL;
    seer_vocab *v = NULL;
    if (seer_gguf_file_open(argv[1], &f) != SEER_OK || seer_vocab_load(f, &v) != SEER_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], seer_last_error());
        return 1;
    }
    const int V_all = seer_vocab_size(v);
    const int V = argc > 2 && atoi(argv[2]) > 0 && atoi(argv[2]) < V_all ? atoi(argv[2]) : V_all;
    const int reps = argc > 3 ? atoi(argv[3]) : 3;
    const char **pieces = calloc((size_t)V, sizeof *pieces);
    int *lens = calloc((size_t)V, sizeof *lens);
    int32_t *eog = malloc((size_t)V * sizeof *eog);
    int n_eog = 0;
    for (int i = 0; i < V; i++) {
        if (seer_vocab_is_eog(v, i)) {
            eog[n_eog++] = i;
            continue;
        }
        const int t = seer_vocab_type(v, i);
        if (t == SEER_TOKEN_CONTROL || t == SEER_TOKEN_UNUSED || t == SEER_TOKEN_UNKNOWN)
            continue;
        char buf[1100];
        const int l = seer_vocab_piece(v, i, buf, (int)sizeof buf);
        if (l > 0 && l < (int)sizeof buf) {
            char *p = malloc((size_t)l);
            memcpy(p, buf, (size_t)l);
            pieces[i] = p;
            lens[i] = l;
        }
    }
    /* the document's tokens, those of the cut vocabulary only (ids >= V re-tokenized as bytes
     * would differ; with Qwen's merges the document's tokens are common ones) */
    struct {
        int32_t ids[4096];
        int n;
    } ids;
    if (seer_vocab_encode(v, DOC, strlen(DOC), false, false, ids.ids, 4096, &ids.n) != SEER_OK) {
        fprintf(stderr, "encode: %s\n", seer_last_error());
        return 1;
    }
    double t0 = now();
    seer_constraint *c = NULL;
    if (seer_constraint_from_pieces(SEER_CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), pieces, lens, V, eog,
                                    n_eog, &c) != SEER_OK) {
        fprintf(stderr, "constraint: %s\n", seer_last_error());
        return 1;
    }
    const double t_build = now() - t0;
    uint32_t *bits = malloc(((size_t)V + 31) / 32 * sizeof *bits);
    const int n = ids.n;
    double *best = malloc(((size_t)n + 1) * sizeof *best);
    int *allowed = malloc(((size_t)n + 1) * sizeof *allowed);
    for (int i = 0; i <= n; i++)
        best[i] = 1e9;
    for (int r = 0; r < reps; r++) {
        seer_constraint_rollback(c, seer_constraint_n_accepted(c));
        for (int i = 0; i <= n; i++) {
            const double a = now();
            allowed[i] = seer_constraint_mask(c, bits);
            const double b = now() - a;
            best[i] = b < best[i] ? b : best[i];
            if (i == n)
                break;
            if (ids.ids[i] >= V || seer_constraint_accept(c, ids.ids[i]) != SEER_OK) {
                fprintf(stderr, "token %d (%d) of the document refused: %s\n", i, ids.ids[i], seer_last_error());
                return 1;
            }
        }
    }
    double sum = 0, sum_wide = 0, sum_narrow = 0;
    int n_wide = 0, n_narrow = 0;
    for (int i = 0; i <= n; i++) {
        sum += best[i];
        if (allowed[i] > V / 2)
            sum_wide += best[i], n_wide++;
        else
            sum_narrow += best[i], n_narrow++;
    }
    double *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    memcpy(sorted, best, ((size_t)n + 1) * sizeof *sorted);
    qsort(sorted, (size_t)n + 1, sizeof *sorted, cmp_d);
    printf("vocabulary %d tokens (of %d), document %d tokens, trie + grammar %.1f ms\n", V, V_all, n, t_build * 1e3);
    printf("mask per token: mean %.3f ms, median %.3f ms, max %.3f ms\n", sum / (n + 1) * 1e3,
           sorted[(n + 1) / 2] * 1e3, sorted[n] * 1e3);
    printf("  in strings (more than half the vocabulary allowed, %d steps): mean %.3f ms\n", n_wide,
           n_wide ? sum_wide / n_wide * 1e3 : 0);
    printf("  elsewhere (%d steps): mean %.3f ms\n", n_narrow, n_narrow ? sum_narrow / n_narrow * 1e3 : 0);
    seer_constraint_free(c);
    for (int i = 0; i < V; i++)
        free((void *)pieces[i]);
    free(pieces), free(lens), free(eog), free(bits), free(best), free(allowed), free(sorted);
    seer_vocab_free(v);
    seer_gguf_file_close(f);
    return 0;
}
