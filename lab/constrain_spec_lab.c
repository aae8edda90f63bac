/*
 * constrain_spec_lab.c: structured output's cost and gain inside decoding, measured on the
 * same request with one thing changed.
 *
 *   build/lab_constrain_spec jf MODEL.gguf PROMPT.txt [N_PROMPT] [MAX_NEW] [GAMMA]
 *     Greedy, n-gram speculation (GAMMA, 8), a JSON schema (a document's title and sections),
 *     the prompt's first N_PROMPT tokens (7400) in the model's chat template: the request with
 *     forced drafts (jump-forward) and without (SEER_CONSTRAINT_NO_FORCED_DRAFTS). Prints
 *     rounds, drafted, accepted and tokens per verification of each; the outputs must agree.
 *
 *   build/lab_constrain_spec overlap MODEL.gguf PROMPT.txt [N_PROMPT] [MAX_NEW] [N_THREADS]
 *     Greedy without speculation, the same schema: the wall time per step with the rows'
 *     masks computed before the forward call (SEER_CONSTRAINT_MASKS_BEFORE_CALL) and after it
 *     is issued (the default: on a GPU, while the device computes), against the same number
 *     of steps without a constraint; the masks' own cost (the output replayed through a fresh
 *     copy of the constraint, every step's mask timed) and the calling thread's mask time
 *     (seer_spec_stats.t_mask_s). The best of two runs each. N_THREADS: the CPU backend's
 *     threads (0: all cores).
 *
 *   build/lab_constrain_spec synthetic VOCAB.gguf [SHAPE] [MAX_NEW] [N_CTX] [N_THREADS]
 *     The same overlap measurement on a random-weight model of SHAPE (llama-3.1-8b; small for
 *     a check on the CPU) with the
 *     vocabulary cut or taken whole from VOCAB.gguf (tests/fixtures/...): its size replaces
 *     the shape's, and the constraint is built over its real token strings, so the masks
 *     cost what they cost for a real model while the step costs what the shape's does (on a
 *     GPU: bf16 weights). The KV cache holds N_CTX (4096) random tokens first.
 */
#include "constrain/grammar.h"
#include "gguf/gguf.h"
#include "seer.h"
#include "seer_bench.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int n_threads; /* the model's CPU threads (0: all cores) */

static seer_model_params model_params(void) {
    seer_model_params mp = seer_model_default_params();
    mp.n_threads = n_threads;
    return mp;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"},"
    "\"sections\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},\"summary\":{\"type\":\"string\"}},"
    "\"required\":[\"name\",\"summary\"],\"additionalProperties\":false}}},"
    "\"required\":[\"title\",\"sections\"],\"additionalProperties\":false}";

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != SEER_OK) {                                                                      \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, seer_last_error());                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    int32_t *ids;
    int n;
    seer_spec_stats st;
    double wall_s, steps;
} run_out;

/* One greedy request of prompt [n] under con on a fresh context and generator. */
static void run(seer_model *m, const int32_t *prompt, int n, int max_new, seer_spec_params spec,
                const seer_constraint *con, run_out *out) {
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = n + max_new + 64;
    cp.n_seq_max = 1;
    cp.n_batch_max = 512;
    seer_context *c = NULL;
    CHECK(seer_context_init(m, cp, &c));
    seer_gen *g = NULL;
    CHECK(seer_gen_init(c, spec, &g));
    seer_gen_seq_params xp = seer_gen_seq_default_params();
    xp.constraint = con;
    seer_sampler_params sp = seer_sampler_default_params();
    sp.temperature = 0;
    int h;
    CHECK(seer_gen_add_ext(g, prompt, n, max_new, sp, false, &xp, &h));
    seer_spec_stats st0;
    seer_gen_stats(g, &st0);
    int active = 1, steps = 0;
    const double t0 = now();
    while (active) {
        CHECK(seer_gen_step(g, &active));
        steps++;
    }
    out->wall_s = now() - t0;
    out->steps = steps;
    seer_gen_stats(g, &out->st);
    const int32_t *ids;
    out->n = seer_gen_output(g, h, &ids);
    out->ids = malloc(sizeof(int32_t) * (out->n > 0 ? out->n : 1));
    memcpy(out->ids, ids, sizeof(int32_t) * out->n);
    seer_gen_free(g);
    seer_context_free(c);
}

/* The prompt: the file's text cut to n_prompt tokens, asked for its outline as JSON in the
 * model's chat template. */
static int32_t *chat_prompt(seer_model *m, const char *path, int n_prompt, int *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    const long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)sz + 1);
    text[fread(text, 1, (size_t)sz, f)] = 0;
    fclose(f);
    int32_t *toks = malloc(sizeof(int32_t) * ((size_t)sz + 16));
    int nt = 0;
    CHECK(seer_tokenize(m, text, strlen(text), false, false, toks, (int)sz + 16, &nt));
    if (nt > n_prompt)
        nt = n_prompt;
    char *cut = malloc((size_t)sz + 1024);
    size_t cl = 0;
    for (int i = 0; i < nt; i++) { /* pieces are the text's own bytes */
        const int l = seer_token_piece(m, toks[i], cut + cl, 1000);
        cl += l > 0 ? (size_t)l : 0;
    }
    cut[cl] = 0;
    const char *ask = "\n\nGive this document's title and the names of its sections, each with a one-line "
                      "summary, as JSON.";
    char *user = malloc(cl + strlen(ask) + 1);
    sprintf(user, "%s%s", cut, ask);
    seer_chat_template t;
    CHECK(seer_chat_template_init(m, NULL, &t));
    seer_chat_message msg = {.role = "user", .content = user};
    const size_t cap = cl + 4096;
    char *buf = malloc(cap);
    uint8_t *special = malloc(cap);
    size_t len = 0;
    CHECK(seer_chat_render_marked(&t, &msg, 1, true, buf, special, cap, &len));
    int32_t *ids = malloc(sizeof(int32_t) * (len + 16));
    CHECK(seer_tokenize_marked(m, buf, special, len, true, ids, (int)len + 16, n));
    free(text), free(toks), free(cut), free(user), free(buf), free(special);
    return ids;
}

static void same(const run_out *a, const run_out *b, const char *what) {
    if (a->n != b->n || memcmp(a->ids, b->ids, sizeof(int32_t) * a->n) != 0) {
        fprintf(stderr, "%s: outputs differ\n", what);
        exit(1);
    }
}

static void print_run(const char *name, const run_out *r) {
    printf("%-34s %4d tokens, %4lld verifications, %4lld drafted, %4lld accepted, %.2f tokens/verification, "
           "%.1f s (%.2f ms a step)\n",
           name, r->n, (long long)r->st.rounds, (long long)r->st.drafted, (long long)r->st.accepted,
           r->st.rounds ? (double)r->st.emitted / r->st.rounds : 0, r->wall_s, r->wall_s / r->steps * 1e3);
}

/* The masks of out's path replayed through a fresh copy of con: seconds in total. */
static double replay_masks(const seer_constraint *con, const run_out *r) {
    seer_constraint *c = NULL;
    CHECK(seer_constraint_clone(con, &c));
    double t = 0;
    for (int i = 0; i < r->n; i++) {
        const double a = now();
        if (!seer_constraint_mask_after(c, NULL, 0))
            exit(1);
        t += now() - a;
        if (seer_constraint_accept(c, r->ids[i]) != SEER_OK)
            break; /* an end-of-generation token ends the walk */
    }
    seer_constraint_free(c);
    return t;
}

/* Before the call vs overlapped, each twice (best of the two), and the replayed mask cost. */
static void overlap(seer_model *m, const int32_t *prompt, int n, int max_new, seer_constraint *con) {
    seer_spec_params none = seer_spec_default_params();
    seer_constraint *before = NULL;
    CHECK(seer_constraint_clone(con, &before));
    seer_constraint_set_options(before, SEER_CONSTRAINT_MASKS_BEFORE_CALL);
    run_out a[2], b[2], u;
    for (int r = 0; r < 2; r++) {
        run(m, prompt, n, max_new, none, before, &b[r]);
        run(m, prompt, n, max_new, none, con, &a[r]);
        same(&a[r], &b[r], "overlapped vs before the call");
    }
    run(m, prompt, n, a[0].n > 0 ? a[0].n : 1, none, NULL, &u);
    const run_out *bb = b[0].wall_s < b[1].wall_s ? &b[0] : &b[1], *ab = a[0].wall_s < a[1].wall_s ? &a[0] : &a[1];
    print_run("masks before the call", bb);
    print_run("masks after the call is issued", ab);
    print_run("no constraint (same length)", &u);
    const double mask = replay_masks(con, ab), steps = ab->steps;
    const double ws = u.wall_s / u.steps, wb = bb->wall_s / bb->steps, wa = ab->wall_s / ab->steps;
    printf("mask (replayed, one thread) %.3f ms a step; on the calling thread: %.3f ms a step before the call, "
           "%.3f ms a step after it is issued\n",
           mask / steps * 1e3, bb->st.t_mask_s / bb->steps * 1e3, ab->st.t_mask_s / ab->steps * 1e3);
    printf("wall per step: masks before the call %.3f ms, after it is issued %.3f ms, no constraint %.3f ms: "
           "the constraint adds %.3f and %.3f ms (%.1f %% and %.1f %% of a step)\n",
           wb * 1e3, wa * 1e3, ws * 1e3, (wb - ws) * 1e3, (wa - ws) * 1e3, (wb - ws) / ws * 100, (wa - ws) / ws * 100);
    seer_constraint_free(before);
}

/* The random-weight model of shape with vocab's size, and the constraint over vocab's strings. */
static void synthetic(const char *vocab_path, const char *shape, int max_new, int n_ctx) {
    gguf_file *f = NULL;
    seer_vocab *v = NULL;
    CHECK(seer_gguf_file_open(vocab_path, &f));
    CHECK(seer_vocab_load(f, &v));
    const int V = seer_vocab_size(v);
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
    seer_constraint *con = NULL;
    CHECK(seer_constraint_from_pieces(SEER_CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), pieces, lens, V, eog,
                                      n_eog, &con));
    /* the shape's preset with the vocabulary's size */
    seer_gen_params p = seer_gen_default_params();
    if (strcmp(shape, "llama-3.1-8b") == 0) {
        p.dim = 4096, p.n_layers = 32, p.n_heads = 32, p.n_kv_heads = 8, p.ffn_dim = 14336;
    } else if (strcmp(shape, "small") == 0) { /* a CPU check of this path */
        p.dim = 256, p.n_layers = 4, p.n_heads = 4, p.n_kv_heads = 2, p.ffn_dim = 768;
    } else {
        fprintf(stderr, "shape %s: llama-3.1-8b or small\n", shape);
        exit(2);
    }
    p.arch = "llama", p.ctx = 131072, p.rope_base = 500000.f, p.norm_eps = 1e-5f, p.n_vocab = V;
    seer_model *m = NULL;
    CHECK(seer_model_synthetic(NULL, &p, model_params(), &m));
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_ctx);
    for (int i = 0; i < n_ctx; i++)
        prompt[i] = (int32_t)(1000 + (i * 7919) % (V - 2000));
    printf("%s with a %d-token vocabulary (%s), %d-token context, %d tokens\n", shape, V, vocab_path, n_ctx, max_new);
    overlap(m, prompt, n_ctx, max_new, con);
    seer_constraint_free(con);
    seer_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s jf|overlap MODEL.gguf PROMPT.txt [N_PROMPT] [MAX_NEW] [GAMMA]\n"
                        "       %s synthetic VOCAB.gguf [SHAPE] [MAX_NEW] [N_CTX]\n",
                argv[0], argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "synthetic") == 0) {
        n_threads = argc > 6 ? atoi(argv[6]) : 0;
        synthetic(argv[2], argc > 3 ? argv[3] : "llama-3.1-8b", argc > 4 ? atoi(argv[4]) : 128,
                  argc > 5 ? atoi(argv[5]) : 4096);
        return 0;
    }
    if (argc < 4)
        return 2;
    const int n_prompt = argc > 4 ? atoi(argv[4]) : 7400, max_new = argc > 5 ? atoi(argv[5]) : 200;
    const int gamma = argc > 6 ? atoi(argv[6]) : 8; /* jf: GAMMA; overlap: N_THREADS */
    if (strcmp(argv[1], "overlap") == 0)
        n_threads = argc > 6 ? atoi(argv[6]) : 0;
    seer_model *m = NULL;
    CHECK(seer_model_load(argv[2], model_params(), &m));
    int n = 0;
    int32_t *prompt = chat_prompt(m, argv[3], n_prompt, &n);
    seer_constraint *con = NULL;
    CHECK(seer_constraint_new(m, SEER_CONSTRAINT_JSON_SCHEMA, SCHEMA, strlen(SCHEMA), &con));
    printf("%s, %d-token prompt, up to %d tokens\n", argv[2], n, max_new);
    if (strcmp(argv[1], "overlap") == 0) {
        overlap(m, prompt, n, max_new, con);
    } else {
        seer_spec_params spec = seer_spec_default_params();
        spec.kind = SEER_SPEC_NGRAM;
        spec.gamma = gamma;
        seer_constraint *off = NULL;
        CHECK(seer_constraint_clone(con, &off));
        seer_constraint_set_options(off, SEER_CONSTRAINT_NO_FORCED_DRAFTS);
        run_out on, no, plain;
        run(m, prompt, n, max_new, spec, con, &on);
        print_run("forced drafts (jump-forward)", &on);
        printf("output: ");
        for (int i = 0; i < on.n; i++) {
            char b[256];
            const int l = seer_token_piece(m, on.ids[i], b, (int)sizeof b);
            printf("%.*s", l > 0 ? l : 0, b);
        }
        printf("\n");
        run(m, prompt, n, max_new, spec, off, &no);
        print_run("no forced drafts", &no);
        same(&on, &no, "jump-forward on vs off");
        run(m, prompt, n, max_new, spec, NULL, &plain);
        print_run("unconstrained (another text)", &plain);
        seer_constraint_free(off);
    }
    seer_constraint_free(con);
    seer_model_free(m);
    return 0;
}
