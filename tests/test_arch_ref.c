/*
 * test_arch_ref.c: each family against llama.cpp on a small random-weight file.
 *
 * A fixture (tests/fixtures/arch/NAME.tsv, remade by scripts/ref-arch.sh) holds the
 * `seer gen-model` arguments of the file, the context size, the prompt ids, llama.cpp's
 * greedy ids and every row of its logits: the prompt's rows (one batch), then one per greedy
 * token fed back. Here the same arguments make the same file; seer evaluates the prompt in
 * one call and the greedy tokens one call each (teacher forcing: llama.cpp's ids, so the rows
 * stay comparable however the picks go), on the CPU with f32 weights, as llama.cpp did.
 *
 * Checked per family: every logit within the tolerance of llama.cpp's, and seer's greedy pick
 * equal to llama.cpp's wherever llama.cpp's top two are more than twice the tolerance apart
 * (a closer pair is a tie at this precision); and, where a case tests a block, that taking
 * the block away from the loaded model moves the logits by more than ten tolerances. The cases cover Qwen3 (per-head q/k norms, a head dimension other than
 * D/H), Qwen3 with YaRN, Gemma 2 (soft-capping of attention and final logits, a window on
 * every other layer; weights scaled up so that the caps bend the logits), Gemma 3, Phi-3 with
 * fused tensors and LongRoPE below and above the trained context (short and long tables),
 * and Llama with linear scaling. Prompts are longer than the windows and the YaRN context.
 */
#include "testutil.h"

#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Both engines compute in f32 and differ in the order of their sums: on the SiLU families
 * the logits (|logit| up to about 4) agree to 5e-6. llama.cpp's CPU GELU looks the value up
 * in a table of f16 inputs and outputs (ggml's GGML_GELU_FP16), which seer does not copy: on
 * the GeGLU families (Gemma) the logits (up to about 4, and 24 with Gemma 2's scaled-up
 * weights) differ by up to 3e-3. */
#define TOL_SILU 1e-4
#define TOL_GELU 1e-2

enum { MAX_TOK = 64, MAX_ROWS = 64 };

typedef struct {
    char gen[512];
    int ctx, n_prompt, n_greedy, n_rows, V;
    int32_t prompt[MAX_TOK], greedy[MAX_TOK];
    float *rows; /* [n_rows][V] */
} fixture;

/* The ints after the tab-separated key of line, into out (at most cap); their count. */
static int read_ints(char *line, int32_t *out, int cap) {
    int n = 0;
    for (char *t = strtok(strchr(line, '\t'), "\t\n"); t && n < cap; t = strtok(NULL, "\t\n"))
        out[n++] = (int32_t)atoi(t);
    return n;
}

static void load_fixture(const char *name, fixture *f) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/arch/%s.tsv", SEER_SOURCE_DIR, name);
    size_t size = 0;
    char *text = (char *)tu_read_file(path, &size);
    if (!text)
        fail_msg("missing fixture %s (scripts/ref-arch.sh makes it)", path);
    memset(f, 0, sizeof *f);
    f->rows = NULL;
    int cap_v = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "gen\t", 4)) {
            snprintf(f->gen, sizeof f->gen, "%s", line + 4);
        } else if (!strncmp(line, "ctx\t", 4)) {
            f->ctx = atoi(line + 4);
        } else if (!strncmp(line, "prompt\t", 7)) {
            f->n_prompt = read_ints(line, f->prompt, MAX_TOK);
        } else if (!strncmp(line, "greedy\t", 7)) {
            f->n_greedy = read_ints(line, f->greedy, MAX_TOK);
        } else if (!strncmp(line, "row\t", 4)) {
            char *p = line + 4;
            const int i = (int)strtol(p, &p, 10);
            assert_int_equal(i, f->n_rows);
            assert_true(i < MAX_ROWS);
            if (!f->rows) { /* the first row gives V */
                for (char *q = p; *q; q++)
                    cap_v += *q == '\t';
                f->V = cap_v;
                f->rows = malloc(sizeof(float) * (size_t)MAX_ROWS * (size_t)f->V);
            }
            for (int v = 0; v < f->V; v++)
                f->rows[(size_t)i * f->V + v] = strtof(p, &p);
            f->n_rows++;
        }
    }
    free(text);
    assert_true(f->ctx > 0 && f->n_prompt > 0 && f->n_greedy > 0 && f->V > 0);
    assert_int_equal(f->n_rows, f->n_prompt + f->n_greedy - 1);
}

static int argmax(const float *l, int V) {
    int b = 0;
    for (int v = 1; v < V; v++)
        if (l[v] > l[b])
            b = v;
    return b;
}

/* llama.cpp's margin between its top two logits of a row. */
static double margin(const float *l, int V) {
    const int b = argmax(l, V);
    double second = -INFINITY;
    for (int v = 0; v < V; v++)
        if (v != b && l[v] > second)
            second = l[v];
    return (double)l[b] - second;
}

/* seer's rows for f's tokens on the model at path, tweak (NULL: none) applied after loading;
 * out [n_rows][V]. */
static void eval_rows(const fixture *f, const char *path, void (*tweak)(seer_model *), float *out) {
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    mp.n_threads = 2;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_load(path, mp, &m));
    if (tweak)
        tweak(m);
    const int V = seer_n_vocab(m);
    assert_int_equal(V, f->V);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = f->ctx;
    cp.n_seq_max = 1;
    cp.n_batch_max = MAX_TOK;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_seq_id seq;
    ASSERT_OK(seer_seq_new(c, &seq));
    int32_t pos[MAX_TOK];
    seer_seq_id sq[MAX_TOK];
    uint8_t y[MAX_TOK];
    for (int i = 0; i < f->n_prompt; i++)
        pos[i] = i, sq[i] = seq, y[i] = 1;
    seer_batch b = {.n_tokens = f->n_prompt, .token = f->prompt, .seq = sq, .pos = pos, .logits = y};
    ASSERT_OK(seer_decode(c, &b, out));
    for (int g = 0; g + 1 < f->n_greedy; g++) {
        int32_t p = f->n_prompt + g;
        uint8_t one = 1;
        seer_batch bg = {.n_tokens = 1, .token = &f->greedy[g], .seq = &seq, .pos = &p, .logits = &one};
        ASSERT_OK(seer_decode(c, &bg, out + (size_t)p * V));
    }
    seer_context_free(c);
    seer_model_free(m);
}

static double max_diff(const fixture *f, const float *ours, int *row) {
    double worst = 0;
    for (int r = 0; r < f->n_rows; r++)
        for (int v = 0; v < f->V; v++) {
            const float got = ours[(size_t)r * f->V + v];
            assert_true(isfinite(got));
            const double d = fabs((double)got - f->rows[(size_t)r * f->V + v]);
            if (d > worst)
                worst = d, *row = r;
        }
    return worst;
}

/* Checks family case name within tol; with tweak, also that the tweaked model (a block taken
 * away) is more than 10 tol off, so the case tests that block. */
static void check_family(const char *name, double tol, void (*tweak)(seer_model *)) {
    fixture f;
    load_fixture(name, &f);
    const char *path = tu_tmp_path(name);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' gen-model %s -o '%s'", SEER_CLI, f.gen, path);
    assert_int_equal(system(cmd), 0);
    const int V = f.V;
    float *ours = malloc(sizeof(float) * (size_t)f.n_rows * V);
    eval_rows(&f, path, NULL, ours);
    int worst_row = 0, agree = 0, decided = 0;
    const double worst = max_diff(&f, ours, &worst_row);
    /* the greedy picks: row n_prompt - 1 + g predicts greedy[g] */
    for (int g = 0; g < f.n_greedy; g++) {
        const float *ref = f.rows + (size_t)(f.n_prompt - 1 + g) * V;
        const float *got = ours + (size_t)(f.n_prompt - 1 + g) * V;
        assert_int_equal(argmax(ref, V), f.greedy[g]);
        const bool same = argmax(got, V) == f.greedy[g];
        agree += same;
        if (margin(ref, V) > 2 * tol) {
            decided++;
            if (!same)
                fail_msg("%s: greedy step %d: seer picks %d, llama.cpp %d", name, g, argmax(got, V), f.greedy[g]);
        }
    }
    printf("%-13s max |dlogit| %.3g (row %d) over %d rows x %d; greedy %d/%d equal (%d beyond ties)\n", name,
           worst, worst_row, f.n_rows, V, agree, f.n_greedy, decided);
    assert_true(worst < tol);
    if (tweak) {
        eval_rows(&f, path, tweak, ours);
        const double off = max_diff(&f, ours, &worst_row);
        printf("%-13s without the block: max |dlogit| %.3g\n", name, off);
        assert_true(off > 10 * tol);
    }
    free(ours);
    free(f.rows);
}

static void no_attn_cap(seer_model *m) { m->attn_softcap = 0; }
static void no_final_cap(seer_model *m) { m->final_softcap = 0; }
static void no_long(seer_model *m) {
    m->be->ops->dealloc(m->be, m->inv_freq_long);
    m->inv_freq_long = NULL;
}
static void no_mscale(seer_model *m) { m->attn_scale = 1.f / sqrtf((float)m->info.head_dim); }
static void no_qk_norm(seer_model *m) {
    for (int l = 0; l < m->info.n_layers; l++) {
        m->be->ops->dealloc(m->be, m->layers[l].q_norm);
        m->be->ops->dealloc(m->be, m->layers[l].k_norm);
        m->layers[l].q_norm = m->layers[l].k_norm = NULL;
    }
}

static void test_qwen3(void **s) { (void)s; check_family("qwen3", TOL_SILU, no_qk_norm); }
static void test_qwen3_yarn(void **s) { (void)s; check_family("qwen3-yarn", TOL_SILU, no_mscale); }
static void test_gemma2(void **s) {
    (void)s;
    check_family("gemma2", TOL_GELU, no_attn_cap);
    check_family("gemma2", TOL_GELU, no_final_cap);
}
static void test_gemma3(void **s) { (void)s; check_family("gemma3", TOL_GELU, NULL); }
static void test_phi3_short(void **s) { (void)s; check_family("phi3-short", TOL_SILU, no_mscale); }
static void test_phi3_long(void **s) { (void)s; check_family("phi3-long", TOL_SILU, no_long); }
static void test_llama_linear(void **s) { (void)s; check_family("llama-linear", TOL_SILU, NULL); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),      cmocka_unit_test(test_qwen3_yarn),
        cmocka_unit_test(test_gemma2),     cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_phi3_short), cmocka_unit_test(test_phi3_long),
        cmocka_unit_test(test_llama_linear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
