/*
 * test_spec_tree.c: token-tree speculation (SpecInfer, Sequoia).
 *
 *   - Bad settings are refused; a batch's query capture needs room and fills it.
 *   - Shapes: the default shape is breadth-first with the asked nodes and depth, a chain when
 *     nodes == depth; the check refuses parents out of order and trees too deep.
 *   - The multi-draft rule (the CPU backend's accept_trees) on small vocabularies: with the
 *     children of each node drawn without replacement from the draft's q, the first two
 *     tokens emitted follow the target's joint distribution (chi-square at tail 1e-6 over
 *     the cells), for trees of depth 2 with 3 children at the root and 2 below each; the same
 *     test fails for the wrong rule (rejections not replaced by the residual).
 *   - End to end: greedy output with trees over every base drafter (streaming, retrieval,
 *     snapkv, draft) equals plain decoding on random models (one sequence and a ragged batch
 *     of three, pages of 4, so that the accepted path's KV rows move across pages), equals
 *     stories260K's golden ids (alone and in a batch of five), and equals them through the
 *     scheduler; trees accept more drafts per round than the chain they contain. Under
 *     sampling (T > 0 with top-k, top-p, min-p) the joint distribution of the first three
 *     tokens passes the chi-square test with four children at the root, and fails it with
 *     the wrong rule.
 *   - Shapes planned online (Sequoia): greedy output with the shape re-planned every 3 rounds,
 *     at a fixed size and at an automatic size (cost table given, or measured at init), equals
 *     plain decoding on a random model and stories260K's golden ids over every base drafter;
 *     the plan follows acceptance (a draft that is the target turns the small prior shape into
 *     the chain of the full depth; a draft of random weights turns the default shape into a
 *     wide, shallow tree); the chi-square test passes with online shapes.
 *   - Bad settings for online shapes are refused (a size below -1, a negative re-plan period,
 *     a cost table out of order or without the draft's cost).
 */
#include "testutil.h"

#include "backend/backend.h"
#include "spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_shapes(void **state) {
    (void)state;
    int32_t par[64], dep[64];
    /* a chain when nodes == depth */
    seer_tree_shape_default(5, 5, par);
    for (int j = 0; j < 5; j++)
        assert_int_equal(par[j], j - 1);
    ASSERT_OK(seer_tree_shape_check(par, 5, 5, dep));
    assert_int_equal(dep[4], 5);
    const int cases[][2] = {{8, 2}, {6, 3}, {16, 4}, {40, 6}, {64, 1}, {3, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int n = cases[c][0], d = cases[c][1];
        seer_tree_shape_default(n, d, par);
        ASSERT_OK(seer_tree_shape_check(par, n, d, dep));
        int maxd = 0, root_kids = 0;
        for (int j = 0; j < n; j++) {
            maxd = dep[j] > maxd ? dep[j] : maxd;
            root_kids += par[j] == -1;
        }
        assert_int_equal(maxd, d);
        /* the extras spread shallowest first: the root has about (n - d) / d + 1 children */
        assert_int_equal(root_kids, 1 + (n - d + d - 1) / d);
        /* the main chain: node 0 and the first node of each level */
        assert_int_equal(par[0], -1);
    }
    /* refused: a parent after its child, and a tree deeper than allowed */
    const int32_t bad1[] = {-1, 2, 0};
    assert_int_equal(seer_tree_shape_check(bad1, 3, 3, dep), SEER_ERR_INVALID_ARG);
    const int32_t bad2[] = {-1, 0, 1};
    assert_int_equal(seer_tree_shape_check(bad2, 3, 2, dep), SEER_ERR_INVALID_ARG);
    const int32_t bad3[] = {-1, 0, -1}; /* a shallower node after a deeper one */
    assert_int_equal(seer_tree_shape_check(bad3, 3, 3, dep), SEER_ERR_INVALID_ARG);
}

/* ---- the rule on small vocabularies ------------------------------------------------------ */

#define RV 6

static void rand_dist(float *p, int n, uint64_t *rng, int zeros) {
    double z = 0;
    for (int i = 0; i < n; i++) {
        p[i] = (float)(tu_rand_u64(rng) % 1000 + 1);
        z += p[i];
    }
    for (int k = 0; k < zeros; k++) { /* some tokens outside the support */
        int i = (int)(tu_rand_u64(rng) % n);
        z -= p[i];
        p[i] = 0;
    }
    for (int i = 0; i < n; i++)
        p[i] = (float)(p[i] / z);
}

static double unif(uint64_t *rng) { return (double)(tu_rand_u64(rng) >> 11) * 0x1.0p-53; }

/* k draws without replacement from q [RV] (fewer when its support runs out) */
static int draw_k(const float *q, int k, uint64_t *rng, int32_t *out) {
    float w[RV];
    memcpy(w, q, sizeof w);
    int n = 0;
    for (; n < k; n++) {
        double z = 0;
        for (int i = 0; i < RV; i++)
            z += w[i];
        if (!(z > 0))
            break;
        double t = unif(rng) * z, c = 0;
        int x = -1;
        for (int i = 0; i < RV; i++)
            if (w[i] > 0) {
                x = i;
                c += w[i];
                if (t < c)
                    break;
            }
        out[n] = x;
        w[x] = 0;
    }
    return n;
}

/* Chi-square / critical of the first two emitted tokens over n_runs trials. */
static double rule_chi2(bool wrong, uint64_t seed) {
    seer_backend *be;
    ASSERT_OK(seer_backend_cpu_init(1, &be));
    uint64_t rng = seed;
    float P0[RV], Q0[RV], P1[RV][RV], Q1[RV][RV], flat[RV];
    rand_dist(P0, RV, &rng, 1);
    rand_dist(Q0, RV, &rng, 1);
    for (int x = 0; x < RV; x++) {
        rand_dist(P1[x], RV, &rng, 1);
        rand_dist(Q1[x], RV, &rng, 2);
        flat[x] = 1.f / RV;
    }
    const int n_runs = 30000;
    long count[RV][RV] = {{0}};
    float p[16][RV], q[16][RV];
    int32_t tok[16], par[16], path[16];
    double u[17];
    for (int r = 0; r < n_runs; r++) {
        /* root: up to 3 children from Q0; each child x: up to 2 from Q1[x] */
        int32_t kids[3], n = 0;
        const int nk = draw_k(Q0, 3, &rng, kids);
        for (int c = 0; c < nk; c++)
            tok[n] = kids[c], par[n++] = -1;
        for (int c = 0; c < nk; c++) {
            int32_t g2[2];
            const int ng = draw_k(Q1[kids[c]], 2, &rng, g2);
            for (int j = 0; j < ng; j++)
                tok[n] = g2[j], par[n++] = c;
        }
        memcpy(p[0], P0, sizeof P0);
        memcpy(q[0], Q0, sizeof Q0);
        for (int j = 0; j < n; j++) {
            const bool top = par[j] < 0;
            memcpy(p[j + 1], top ? P1[tok[j]] : flat, sizeof flat);
            memcpy(q[j + 1], top ? Q1[tok[j]] : flat, sizeof flat);
        }
        for (int j = 0; j <= n; j++)
            u[j] = unif(&rng);
        seer_accept_tree t = {.n = n, .tok = tok, .parent = par, .p = &p[0][0], .q = &q[0][0], .u = u,
                              .resample_from_p = wrong};
        int32_t acc, next, used;
        ASSERT_OK(be->ops->accept_trees(be, &t, 1, RV, 16, &acc, path, &next, &used));
        assert_true(used >= 1 && used <= n + 1);
        int a, b;
        if (acc == 0) { /* the second token would come from the next round: the target's */
            a = next;
            float cdf = 0, v = (float)unif(&rng);
            b = RV - 1;
            for (int y = 0; y < RV; y++)
                if (P1[a][y] > 0 && v < (cdf += P1[a][y])) {
                    b = y;
                    break;
                }
        } else {
            a = tok[path[0]];
            b = acc >= 2 ? tok[path[1]] : next;
            assert_int_equal(par[path[0]], -1);
            if (acc >= 2)
                assert_int_equal(par[path[1]], path[0]);
        }
        assert_true(a >= 0 && a < RV && b >= 0 && b < RV);
        count[a][b]++;
    }
    double chi = 0;
    int cells = 0;
    for (int a = 0; a < RV; a++)
        for (int b = 0; b < RV; b++) {
            const double e = (double)P0[a] * P1[a][b] * n_runs;
            if (e == 0) {
                if (count[a][b])
                    fail_msg("token pair (%d, %d) outside the target's support came out", a, b);
                continue;
            }
            chi += (count[a][b] - e) * (count[a][b] - e) / e;
            cells++;
        }
    be->ops->free(be);
    return chi / tu_chi2_crit(cells - 1);
}

static void test_rule_distribution(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double r = rule_chi2(false, seed);
        print_message("tree rule, seed %d: chi2 / critical = %.3f\n", (int)seed, r);
        assert_true(r < 1);
    }
    double r = rule_chi2(true, 1);
    print_message("tree rule, wrong rule: chi2 / critical = %.3f\n", r);
    assert_true(r > 1);
}

/* ---- end to end ---------------------------------------------------------------------------- */

static const char *gen_model(const char *name, const char *arch, int vocab, int dim, int layers,
                             int heads, int kv, uint64_t seed, float scale) {
    static char paths[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(paths[k], sizeof paths[k], "%s", tu_tmp_path(name));
    seer_gen_params p = seer_gen_default_params();
    p.arch = arch;
    p.n_vocab = vocab;
    p.dim = dim;
    p.n_layers = layers;
    p.n_heads = heads;
    p.n_kv_heads = kv;
    p.ffn_dim = dim * 2;
    p.ctx = 512;
    p.seed = seed;
    p.scale = scale;
    ASSERT_OK(seer_gen_model(&p, paths[k]));
    return paths[k];
}

static int n_batch = 128; /* the contexts' batch limit */

static seer_spec_stats run(seer_model *m, seer_spec_params spec, int32_t prompts[][64], const int *plen,
                           int n_prompts, int max_new, seer_sampler_params sp, int n_ctx, int page,
                           tu_output *out) {
    /* the quantised-KV draft's copy */
    tu_gen_ctx cx = {.n_ctx = n_ctx, .page_size = page, .n_batch_max = n_batch,
                     .kv_quant_bits = spec.kind == SEER_SPEC_QUANTKV ? 8 : 0};
    return tu_gen_run(m, spec, prompts[0], 64, plen, n_prompts, max_new, sp, cx, out, NULL);
}

static const seer_spec_kind BASES[] = {SEER_SPEC_STREAMING, SEER_SPEC_RETRIEVAL, SEER_SPEC_SNAPKV,
                                       SEER_SPEC_DRAFT, SEER_SPEC_QUANTKV};

static seer_spec_params tree_of(seer_spec_kind k, seer_model *draft, int size, int depth, int budget) {
    seer_spec_params sp = seer_spec_default_params();
    sp.kind = k;
    sp.gamma = depth;
    sp.tree_size = size;
    sp.tree_depth = depth;
    tu_spec_set(&sp, "budget", budget);
    tu_spec_set(&sp, "sinks", 4);
    tu_spec_set(&sp, "chunk", 4);
    tu_spec_set(&sp, "snap_window", 4);
    tu_spec_set(&sp, "refresh_every", 3);
    sp.draft_model = draft;
    tu_spec_set(&sp, "draft_budget", k == SEER_SPEC_DRAFT ? 24 : 0);
    return sp;
}

static void test_greedy_identical_random(void **state) {
    (void)state;
    const char *path = gen_model("tr1.gguf", "llama", 300, 64, 2, 4, 2, 11, 0.3f);
    seer_model *m = tu_load_cpu(path), *d = tu_load_cpu(path);
    uint64_t rng = 17;
    int32_t prompts[3][64];
    int plen[3] = {40, 7, 23};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = j >= 10 && (tu_rand_u64(&rng) & 1) ? prompts[i][j - 10]
                                                                : (int32_t)(tu_rand_u64(&rng) % 300);
    tu_output plain[3], got[3];
    for (int i = 0; i < 3; i++)
        run(m, seer_spec_default_params(), &prompts[i], &plen[i], 1, 60, tu_greedy(), 160, 4, &plain[i]);
    const int shapes[][3] = {{8, 3, 8}, {12, 4, 20}}; /* nodes, depth, budget */
    for (size_t k = 0; k < sizeof BASES / sizeof *BASES; k++)
        for (int s = 0; s < 2; s++) {
            seer_spec_params sp = tree_of(BASES[k], d, shapes[s][0], shapes[s][1], shapes[s][2]);
            char what[128];
            seer_spec_stats st = run(m, sp, prompts, plen, 3, 60, tu_greedy(), 160, 4, got);
            for (int i = 0; i < 3; i++) {
                snprintf(what, sizeof what, "tree %s n=%d d=%d batch seq %d", seer_spec_kind_name(BASES[k]),
                         sp.tree_size, sp.tree_depth, i);
                tu_assert_same(&got[i], &plain[i], what);
            }
            assert_true(st.drafted > 0);
            if (!(st.accepted > 0 && st.accepted < st.drafted))
                fail_msg("%s: accepted %lld of %lld", what, (long long)st.accepted, (long long)st.drafted);
            run(m, sp, &prompts[1], &plen[1], 1, 60, tu_greedy(), 160, 4, got);
            snprintf(what, sizeof what, "tree %s single", seer_spec_kind_name(BASES[k]));
            tu_assert_same(&got[0], &plain[1], what);
        }
    /* a batch limit below three trees: drafting and verification in several calls */
    n_batch = 16;
    for (size_t k = 0; k < sizeof BASES / sizeof *BASES; k++) {
        run(m, tree_of(BASES[k], d, 12, 4, 20), prompts, plen, 3, 60, tu_greedy(), 160, 4, got);
        for (int i = 0; i < 3; i++)
            tu_assert_same(&got[i], &plain[i], "trees in calls of 16 tokens");
    }
    n_batch = 128;
    /* with penalties: each node's history is its own path (repetition; then frequency and
     * presence over the same window) */
    static const struct {
        float rep, freq, pres;
        const char *what;
    } pens[] = {{1.3f, 0, 0, "tree with a repetition penalty"},
                {1.0f, 0.4f, 0.3f, "tree with frequency and presence penalties"}};
    for (size_t k = 0; k < sizeof pens / sizeof *pens; k++) {
        seer_sampler_params pen = tu_greedy();
        pen.repeat_penalty = pens[k].rep;
        pen.frequency_penalty = pens[k].freq;
        pen.presence_penalty = pens[k].pres;
        pen.repeat_last_n = 16;
        run(m, seer_spec_default_params(), prompts, plen, 3, 50, pen, 160, 4, plain);
        run(m, tree_of(SEER_SPEC_STREAMING, d, 10, 3, 12), prompts, plen, 3, 50, pen, 160, 4, got);
        for (int i = 0; i < 3; i++)
            tu_assert_same(&got[i], &plain[i], pens[k].what);
    }
    seer_model_free(d);
    seer_model_free(m);
}

/* stories260K: every base drafter under trees reproduces the golden ids, alone and as a
 * batch; the tree accepts more per round than its main chain alone would. */
static void test_greedy_golden_stories(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    for (size_t k = 0; k < sizeof BASES / sizeof *BASES; k++) {
        seer_spec_params sp = tree_of(BASES[k], d, 10, 4, 48);
        tu_spec_set(&sp, "draft_budget", 32);
        seer_spec_params chain = sp;
        chain.tree_size = 0;
        chain.gamma = 4;
        seer_spec_stats tt = {0}, tc = {0};
        for (int i = 0; i < 5; i++) {
            seer_spec_stats a = run(m, sp, &prompts[i], &plen[i], 1, 257 - plen[i], tu_greedy(), 512, 16, &got[i]);
            char what[96];
            snprintf(what, sizeof what, "stories tree %s prompt %d", seer_spec_kind_name(BASES[k]), i);
            tu_assert_same(&got[i], &gold[i], what);
            seer_spec_stats b = run(m, chain, &prompts[i], &plen[i], 1, 257 - plen[i], tu_greedy(), 512, 16, &got[i]);
            tu_assert_same(&got[i], &gold[i], "stories chain");
            tt.rounds += a.rounds, tt.emitted += a.emitted;
            tc.rounds += b.rounds, tc.emitted += b.emitted;
        }
        print_message("stories %s: tokens per round %.3f (tree of 10, depth 4) vs %.3f (chain of 4)\n",
                      seer_spec_kind_name(BASES[k]), (double)tt.emitted / tt.rounds, (double)tc.emitted / tc.rounds);
        /* the tree contains the chain: never fewer rounds */
        assert_true(tt.rounds <= tc.rounds);
        run(m, sp, prompts, plen, 5, 256, tu_greedy(), 512, 16, got);
        for (int i = 0; i < 5; i++) {
            char what[96];
            snprintf(what, sizeof what, "stories tree batch %s prompt %d", seer_spec_kind_name(BASES[k]), i);
            tu_output g2 = got[i];
            if (g2.n > gold[i].n)
                g2.n = gold[i].n;
            tu_assert_same(&g2, &gold[i], what);
        }
    }
    seer_model_free(d);
    seer_model_free(m);
}

/* The scheduler: golden requests with trees of every base, together in one context (ragged
 * rounds, mixed with a chain class and prefill chunks under the tree mask). */
static void test_greedy_golden_sched(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = 5;
    cp.n_batch_max = 64;
    cp.page_size = 16;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_sched_params spm = {.max_batch_tokens = 48, .prefill_chunk = 4};
    seer_sched *s = NULL;
    ASSERT_OK(seer_sched_init(c, spm, &s));
    seer_request *r[5];
    for (int i = 0; i < 5; i++) {
        seer_request_params p = seer_request_default_params();
        p.sampler.temperature = 0;
        p.max_tokens = gold[i].n;
        p.spec = tree_of(i < 4 ? BASES[i] : SEER_SPEC_STREAMING, m, 9, 3, 24);
        if (i == 4)
            p.spec.tree_size = 0; /* a chain class beside the trees */
        ASSERT_OK(seer_request_new(m, prompts[i], plen[i], &p, &r[i]));
        ASSERT_OK(seer_sched_submit(s, r[i]));
    }
    int active = 1;
    for (int steps = 0; active; steps++) {
        ASSERT_OK(seer_sched_step(s, &active));
        assert_true(steps < 100000);
    }
    for (int i = 0; i < 5; i++) {
        const int32_t *ids;
        tu_output o;
        o.n = seer_request_tokens(r[i], &ids);
        memcpy(o.ids, ids, sizeof(int32_t) * o.n);
        char what[64];
        snprintf(what, sizeof what, "scheduler tree request %d", i);
        tu_assert_same(&o, &gold[i], what);
        seer_request_stats rs;
        seer_request_get_stats(r[i], &rs);
        assert_true(rs.drafted > 0 && rs.accepted > 0);
        seer_request_free(r[i]);
    }
    seer_sched_free(s);
    seer_context_free(c);
    seer_model_free(m);
}

/* ---- shapes planned online (plan.c) --------------------------------------------------------- */

/* A cost table where every verified token costs a quarter of a step more than the last. */
static const int COST_N[] = {1, 2, 4, 8, 16, 32};
static const double COST_C[] = {1, 1.25, 1.75, 2.75, 4.75, 8.75};

static seer_spec_params online(seer_spec_params sp, bool autosize) {
    sp.tree_replan = 3;
    if (autosize) {
        sp.tree_size = -1;
        sp.tree_cost_points = 6, sp.tree_cost_n = COST_N, sp.tree_cost = COST_C;
        sp.tree_draft_cost = 0.05f;
    }
    return sp;
}

/* Greedy output with shapes re-planned every 3 rounds (fixed size, and automatic size from a
 * given table) equals plain decoding on a random model, alone and as a ragged batch. */
static void test_online_greedy_random(void **state) {
    (void)state;
    const char *path = gen_model("tr2.gguf", "llama", 300, 64, 2, 4, 2, 13, 0.3f);
    seer_model *m = tu_load_cpu(path), *d = tu_load_cpu(path);
    uint64_t rng = 19;
    int32_t prompts[3][64];
    int plen[3] = {33, 9, 21};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = j >= 8 && (tu_rand_u64(&rng) & 1) ? prompts[i][j - 8] : (int32_t)(tu_rand_u64(&rng) % 300);
    tu_output plain[3], got[3];
    for (int i = 0; i < 3; i++)
        run(m, seer_spec_default_params(), &prompts[i], &plen[i], 1, 60, tu_greedy(), 160, 4, &plain[i]);
    for (size_t k = 0; k < sizeof BASES / sizeof *BASES; k++)
        for (int a = 0; a < 2; a++) {
            seer_spec_params sp = online(tree_of(BASES[k], d, 12, 4, 20), a);
            char what[128];
            seer_spec_stats st = run(m, sp, prompts, plen, 3, 60, tu_greedy(), 160, 4, got);
            for (int i = 0; i < 3; i++) {
                snprintf(what, sizeof what, "online tree %s auto=%d batch seq %d", seer_spec_kind_name(BASES[k]), a, i);
                tu_assert_same(&got[i], &plain[i], what);
            }
            assert_true(st.drafted > 0);
            run(m, sp, &prompts[0], &plen[0], 1, 60, tu_greedy(), 160, 4, got);
            snprintf(what, sizeof what, "online tree %s auto=%d single", seer_spec_kind_name(BASES[k]), a);
            tu_assert_same(&got[0], &plain[0], what);
        }
    seer_model_free(d);
    seer_model_free(m);
}

/* stories260K's golden ids with online shapes over every base drafter, alone and as a batch
 * of five; the automatic size with the cost table measured at init. */
static void test_online_golden_stories(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_model *d = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got[5];
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    for (size_t k = 0; k < sizeof BASES / sizeof *BASES; k++)
        for (int a = 0; a < 2; a++) {
            seer_spec_params sp = online(tree_of(BASES[k], d, 10, 4, 48), false);
            tu_spec_set(&sp, "draft_budget", 32);
            if (a) /* measured table, draft cost measured online */
                sp.tree_size = -1;
            for (int i = 0; i < 5; i++) {
                run(m, sp, &prompts[i], &plen[i], 1, 257 - plen[i], tu_greedy(), 512, 16, &got[i]);
                char what[96];
                snprintf(what, sizeof what, "stories online tree %s auto=%d prompt %d", seer_spec_kind_name(BASES[k]), a, i);
                tu_assert_same(&got[i], &gold[i], what);
            }
            run(m, sp, prompts, plen, 5, 256, tu_greedy(), 512, 16, got);
            for (int i = 0; i < 5; i++) {
                tu_output g2 = got[i];
                if (g2.n > gold[i].n)
                    g2.n = gold[i].n;
                tu_assert_same(&g2, &gold[i], "stories online tree batch");
            }
        }
    seer_model_free(d);
    seer_model_free(m);
}

/* Runs one golden prompt to its end on generator g (greedy); returns the output. */
static void run_on(seer_gen *g, const int32_t *prompt, int n, tu_output *out) {
    int h, active = 1;
    ASSERT_OK(seer_gen_add(g, prompt, n, 200, tu_greedy(), false, &h));
    while (active)
        ASSERT_OK(seer_gen_step(g, &active));
    const int32_t *ids;
    out->n = seer_gen_output(g, h, &ids);
    memcpy(out->ids, ids, sizeof(int32_t) * out->n);
    seer_gen_remove(g, h);
}

static int root_children(const int32_t *parent, int n) {
    int r = 0;
    for (int j = 0; j < n; j++)
        r += parent[j] == -1;
    return r;
}

/* The plan follows the measured acceptance. A draft that is the target itself (its first
 * child always accepted) under an automatic size: the first shape, from the prior (every
 * rank accepted half the time), is small; the measured one is the chain of the full depth. A draft of random weights (every child
 * almost always rejected) at a fixed size: the shape turns from the default's main chain to
 * a wide tree, most of its nodes children of the pending token. */
static void test_online_follows_acceptance(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    int32_t prompts[5][64];
    int plen[5];
    tu_output gold[5], got;
    assert_int_equal(tu_read_golden(prompts, plen, gold), 5);
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 512;
    cp.page_size = 16;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));

    const int D = 6;
    seer_spec_params sp = online(tree_of(SEER_SPEC_DRAFT, m, 12, D, 48), true);
    tu_spec_set(&sp, "draft_budget", 0); /* the draft's full cache: its argmax is the target's */
    seer_gen *g = NULL;
    ASSERT_OK(seer_gen_init(c, sp, &g));
    const int32_t *par;
    int n = seer_gen_tree_shape(g, &par);
    print_message("automatic size, prior: %d nodes, %d at the root\n", n, root_children(par, n));
    assert_true(n < D);
    run_on(g, prompts[0], plen[0], &got);
    n = seer_gen_tree_shape(g, &par);
    print_message("automatic size, measured: %d nodes, %d at the root\n", n, root_children(par, n));
    assert_int_equal(n, D);
    for (int j = 0; j < n; j++)
        assert_int_equal(par[j], j - 1);
    seer_gen_free(g);
    seer_context_free(c);

    /* a random target and an unrelated random draft of its vocabulary */
    seer_model *rt = tu_load_cpu(gen_model("trt.gguf", "llama", 300, 64, 2, 4, 2, 31, 0.3f));
    seer_model *bad = tu_load_cpu(gen_model("tbad.gguf", "llama", 300, 32, 1, 4, 2, 5, 1.0f));
    int32_t prompt[24];
    uint64_t rng = 7;
    for (int j = 0; j < 24; j++)
        prompt[j] = (int32_t)(tu_rand_u64(&rng) % 300);
    tu_output plain;
    ASSERT_OK(seer_context_init(rt, cp, &c));
    ASSERT_OK(seer_gen_init(c, seer_spec_default_params(), &g));
    run_on(g, prompt, 24, &plain);
    seer_gen_free(g);
    sp = online(tree_of(SEER_SPEC_DRAFT, bad, 12, 4, 48), false);
    tu_spec_set(&sp, "draft_budget", 0);
    ASSERT_OK(seer_gen_init(c, sp, &g));
    n = seer_gen_tree_shape(g, &par);
    int32_t deflt[12], dd[12];
    seer_tree_shape_default(12, 4, deflt);
    assert_int_equal(n, 12);
    assert_memory_equal(par, deflt, sizeof deflt);
    run_on(g, prompt, 24, &got);
    tu_assert_same(&got, &plain, "random draft, online shape");
    n = seer_gen_tree_shape(g, &par);
    ASSERT_OK(seer_tree_shape_check(par, n, 4, dd));
    print_message("random draft: %d nodes, %d at the root (default: %d), depth %d\n", n, root_children(par, n),
                  root_children(deflt, 12), dd[n - 1]);
    assert_true(root_children(par, n) > root_children(deflt, 12));
    assert_true(dd[n - 1] < 4);
    seer_gen_free(g);
    seer_context_free(c);
    seer_model_free(bad);
    seer_model_free(rt);
    seer_model_free(m);
}

/* Bad tree settings are refused, changing nothing. */
static void test_bad_settings(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(tu_data_path("models/stories260K.gguf"));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch_max = 32;
    seer_context *c = NULL;
    ASSERT_OK(seer_context_init(m, cp, &c));
    seer_gen *g = NULL;
    seer_spec_params sp = tree_of(SEER_SPEC_STREAMING, NULL, 40, 4, 16); /* over the batch limit */
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_null(g);
    sp = tree_of(SEER_SPEC_STREAMING, NULL, 4, 6, 16); /* deeper than its nodes */
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    sp = tree_of(SEER_SPEC_STREAMING, NULL, -2, 2, 16);
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    sp.tree_size = 8;
    sp.tree_replan = -1;
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    /* an automatic size: a given cost table must ascend and come with the draft's cost */
    const int cn[] = {1, 4, 2};
    const double cc[] = {1, 1.2, 1.1};
    sp = tree_of(SEER_SPEC_STREAMING, NULL, -1, 3, 16);
    sp.tree_cost_points = 3, sp.tree_cost_n = cn, sp.tree_cost = cc, sp.tree_draft_cost = 0.1f;
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    sp.tree_cost_points = 2, sp.tree_draft_cost = 0;
    assert_int_equal(seer_gen_init(c, sp, &g), SEER_ERR_INVALID_ARG);
    assert_null(g);
    sp = tree_of(SEER_SPEC_STREAMING, NULL, 8, 3, 16);
    ASSERT_OK(seer_gen_init(c, sp, &g));
    seer_gen_free(g);
    /* a batch that asks for its queries but gives no room for them */
    seer_seq_id q;
    ASSERT_OK(seer_seq_new(c, &q));
    int32_t tok = 1, pos = 0;
    uint8_t one = 1;
    seer_batch b = {.n_tokens = 1, .token = &tok, .seq = &q, .pos = &pos, .capture = &one};
    assert_int_equal(seer_decode(c, &b, NULL), SEER_ERR_INVALID_ARG);
    assert_int_equal(seer_seq_len(c, q), 0);
    /* with room: one row of H*Dh per layer, the same queries twice over (deterministic) */
    seer_model_info in;
    seer_model_get_info(m, &in);
    const size_t qn = (size_t)in.n_layers * in.n_heads * in.head_dim;
    float *q1 = malloc(sizeof(float) * qn), *q2 = malloc(sizeof(float) * qn);
    for (size_t i = 0; i < qn; i++)
        q1[i] = q2[i] = NAN;
    b.queries = q1;
    ASSERT_OK(seer_decode(c, &b, NULL));
    ASSERT_OK(seer_seq_rewind(c, q, 0));
    b.queries = q2;
    ASSERT_OK(seer_decode(c, &b, NULL));
    for (size_t i = 0; i < qn; i++)
        assert_true(isfinite(q1[i]) && q1[i] == q2[i]);
    free(q1), free(q2);
    seer_seq_free(c, q);
    seer_context_free(c);
    seer_model_free(m);
}

static void test_distribution(void **state) {
    (void)state;
    seer_model *m = tu_load_cpu(gen_model("tdist.gguf", "llama", 260, 32, 2, 4, 2, 21, 0.6f));
    seer_model *d = tu_load_cpu(gen_model("tdistd.gguf", "llama", 260, 16, 1, 2, 1, 22, 0.6f));
    tu_dist dist;
    tu_dist_init(&dist, m);
    const int runs = 4000;
    /* 8 nodes of depth 2: four children at the root (all of q's support under top-k 4) */
    const seer_spec_kind kinds[] = {SEER_SPEC_STREAMING, SEER_SPEC_DRAFT};
    for (int k = 0; k < 2; k++) {
        seer_spec_params spec = tree_of(kinds[k], d, 8, 2, 6);
        tu_spec_set(&spec, "sinks", 2);
        tu_dist_expect(&dist, spec, runs, NULL, "tree distribution %s", seer_spec_kind_name(kinds[k]));
    }
    /* shapes re-planned every 3 rounds, of fixed and of automatic size, as runs go by */
    for (int a = 0; a < 2; a++) {
        seer_spec_params spec = online(tree_of(SEER_SPEC_DRAFT, d, 8, 2, 6), a);
        tu_spec_set(&spec, "sinks", 2);
        tu_dist_expect(&dist, spec, runs, NULL, "tree distribution, online shape (auto=%d)", a);
    }
    seer_spec_params spec = tree_of(SEER_SPEC_STREAMING, d, 8, 2, 6);
    tu_spec_set(&spec, "sinks", 2);
    tu_dist_expect(&dist, spec, runs, &seer_verify_wrong_rule_for_tests, "tree distribution with the wrong rule");
    seer_model_free(d);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_rule_distribution),
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_greedy_identical_random),
        cmocka_unit_test(test_greedy_golden_stories),
        cmocka_unit_test(test_greedy_golden_sched),
        cmocka_unit_test(test_online_greedy_random),
        cmocka_unit_test(test_online_golden_stories),
        cmocka_unit_test(test_online_follows_acceptance),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
