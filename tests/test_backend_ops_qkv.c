/*
 * test_backend_ops_qkv.c: the CUDA backend's quantised KV copy (attention_qkv.cu) against the
 * CPU reference: K/V rows stored by kv_store and by rope_kv_store on both backends, copied
 * with kv_copy_pages, then attention through the copy (a batch with kv_quant) on the GPU
 * against the CPU's over decode steps, ragged batches, chains under sparse views, tree masks,
 * forks, one-slot pages, head sizes from 6 to 256, windowed layers (under views and tree masks)
 * and soft-capped scores, at 4 and 8 bits. Both backends quantise
 * the same f32 rows with the same operations, so the copies agree and the outputs differ by
 * the order of the sums only: tolerance 1e-3 (relative L2). Refusals: a copy of 5 bits, an
 * attention through a copy the storage does not keep, a random fill of a storage with a copy.
 *
 * The same cases over a storage whose rows are quantised (kv_type q8 / q4, kv/kv_type.h;
 * kv_type.cu): the rows kv_store writes equal the CPU's bit for bit (kv_read of both), and
 * attention over them (every call kind above) agrees with the CPU's; the random fill, row
 * moves and page copies give the CPU's rows exactly. Head sizes 64, 96, 128 and 256 run on the
 * tensor-core kernel (attention_tc.cu, which dequantises in its tile loads), so the cases add
 * its kinds: prefill (in one split, and prompt tokens split at fixed positions), prefill under
 * a view and a window, long chains, a decode step of 40 splits (on 132 SMs, blocks over ranges of them),
 * head size 96's column copies, pages of one slot. There q is bf16-exact and the tolerance
 * the tensor-core kernel's against the CPU with exact K and V (3e-3, test_backend_ops'
 * "attention-x"); the other head sizes run attention_qkv.cu's kernel (1e-3). On the
 * tensor-core kernel the rows' result must also equal, bit for bit, the same call over bf16
 * rows holding the same values (kv_read's exact dequantisation, stored): the kernel after
 * its tile loads is the same code ("kv_type_tc"); except where attention_wgmma.cu takes
 * the bf16 call's prefill (head size 128, neither window nor soft-capping, a prefill not
 * split at fixed positions), which is within 3e-3 of it.
 *
 * Skips when built without CUDA or when no CUDA device is present.
 */
#include "ops_harness.h"

#ifdef SEER_HAVE_CUDA

#define MAX_SEQ 3

typedef struct {
    int Hkv, group, Dh, ps, ns, len0[MAX_SEQ], ntok[MAX_SEQ];
    bool view, mask, fork;
    int window;  /* seer_attn_batch.window, 0: none */
    float cap;   /* seer_attn_batch.softcap, 0: none */
    bool prompt; /* the new tokens are prompt tokens (seer_attn_batch.seq_prompt) */
} qkv_case;

static const qkv_case CASES[] = {
    {2, 7, 64, 16, 1, {300}, {1}, false, false, false, 0, 0.f, false},                 /* Qwen2.5-0.5B, a decode step */
    {4, 2, 8, 16, 3, {40, 3, 77}, {1, 1, 1}, false, false, false, 0, 0.f, false},      /* stories260K, ragged */
    {2, 2, 40, 4, 2, {50, 9}, {5, 2}, true, false, false, 0, 0.f, false},              /* chains under views */
    {1, 4, 48, 8, 2, {20, 31}, {4, 3}, false, true, false, 0, 0.f, false},             /* a tree mask */
    {8, 4, 128, 16, 2, {600, 600}, {5, 1}, false, false, true, 0, 0.f, false},         /* Llama-3-8B heads, a fork */
    {1, 1, 6, 1, 1, {33}, {2}, true, false, false, 0, 0.f, false},                     /* Dh 6, one-slot pages */
    {2, 1, 256, 32, 1, {90}, {3}, false, false, false, 0, 0.f, false},                 /* Dh 256 */
    {2, 4, 64, 16, 2, {300, 40}, {1, 5}, true, false, false, 50, 0.f, false},          /* a window under views */
    {1, 4, 128, 8, 2, {100, 31}, {4, 6}, false, true, false, 24, 3.f, false},          /* window, tree, softcap */
    {2, 2, 256, 16, 1, {70}, {2}, false, false, false, 0, 2.f, false},                 /* Gemma's Dh, softcap */
    /* the tensor-core kernel's kinds over quantised rows (and the copy's kernel over the same) */
    {8, 4, 128, 16, 1, {0}, {200}, false, false, false, 0, 0.f, false},                /* prefill, one split */
    {2, 4, 64, 16, 3, {1000, 0, 7}, {130, 65, 1}, false, false, false, 0, 0.f, false}, /* prefill, chain, decode */
    {2, 4, 128, 16, 1, {1500}, {40}, false, false, false, 0, 0.f, true},               /* prompt: fixed splits */
    {2, 2, 256, 16, 1, {40}, {100}, false, false, false, 0, 0.f, false},               /* prefill, Dh 256 */
    {8, 4, 128, 16, 1, {0}, {200}, false, false, false, 50, 0.f, false},               /* prefill under a window */
    {2, 4, 64, 16, 1, {300}, {80}, true, false, false, 0, 0.f, false},                 /* prefill under a view */
    {8, 4, 128, 16, 1, {20000}, {1}, false, false, false, 0, 0.f, false},              /* 40 splits of 8 heads */
    {2, 4, 64, 16, 1, {700}, {8}, false, false, false, 0, 0.f, false},                 /* a chain of 32 rows */
    {2, 4, 64, 16, 2, {300, 20}, {7, 5}, false, true, false, 0, 0.f, false},           /* a tree mask, Dh 64 */
    {2, 4, 128, 16, 2, {500, 300}, {4, 1}, true, false, false, 0, 0.f, false},         /* views, Dh 128 */
    {1, 4, 64, 1, 1, {500}, {3}, false, false, false, 0, 0.f, false},                  /* one-slot pages */
    {4, 1, 96, 16, 2, {3000, 17}, {1, 1}, false, false, false, 0, 0.f, false},         /* Dh 96, decode */
    {2, 4, 96, 16, 2, {100, 30}, {90, 5}, false, false, false, 40, 0.f, false},        /* Dh 96, prefill, window */
};

/* The same values in bf16 rows: kv_read's exact dequantisation of every slot of every
 * sequence of the case, stored into a bf16 storage of the same geometry at the same rows. */
static void *bf16_twin(const qkv_case *ac, const seer_kv_geom *g, void *kg, const int32_t *pages, int mp,
                       seer_kv_geom *gb) {
    *gb = *g;
    gb->kv_type = SEER_KV_FULL;
    gb->kv_bits = 0;
    void *kb = NULL;
    int committed = 0;
    ASSERT_OK(gpu->ops->kv_alloc(gpu, gb, &kb));
    ASSERT_OK(gpu->ops->kv_reserve(gpu, kb, gb, gb->n_pages, &committed));
    assert_int_equal(committed, gb->n_pages);
    const size_t kvd = (size_t)g->n_kv_heads * g->head_dim;
    for (int b = 0; b < ac->ns; b++) {
        const int n = ac->len0[b] + ac->ntok[b];
        int32_t *pg = malloc(sizeof(int32_t) * n), *row = malloc(sizeof(int32_t) * n);
        for (int s = 0; s < n; s++)
            pg[s] = pages[b * mp + s / g->page_size], row[s] = s % g->page_size;
        float *k = nan_array((size_t)n * kvd), *v = nan_array((size_t)n * kvd);
        for (int l = 0; l < g->n_layers; l++) {
            ASSERT_OK(gpu->ops->kv_read(gpu, kg, g, l, 0, pg, row, n, k));
            ASSERT_OK(gpu->ops->kv_read(gpu, kg, g, l, 1, pg, row, n, v));
            float *dk = dev_copy(k, (size_t)n * kvd), *dv = dev_copy(v, (size_t)n * kvd);
            ASSERT_OK(gpu->ops->kv_store(gpu, kb, gb, l, dk, dv, pg, row, n));
            dev_free(dk), dev_free(dv);
        }
        free(k), free(v), free(pg), free(row);
    }
    return kb;
}

/* The bf16 twin's tolerance against the rows' result on the tensor-core kernel (see the top):
 * exact, except where attention_wgmma.cu may take the bf16 call's prefill; < 0: no twin
 * (the scalar variant, SEER_CUDA_ATTN=scalar, runs neither on the tensor-core kernel). */
static double twin_tol(const qkv_case *ac, int T) {
    const char *v = getenv("SEER_CUDA_ATTN");
    if (v && !strcmp(v, "scalar"))
        return -1;
    bool pre = false; /* a prefill the bf16 call may give attention_wgmma.cu */
    for (int b = 0; b < ac->ns; b++)
        pre |= ac->prompt ? T > 256 /* SEER_CUDA_INVARIANT_MAX_T */ : ac->ntok[b] > SEER_INVARIANT_NEW_TOKENS;
    const bool wg = !(v && !strcmp(v, "mma")) && ac->Dh == 128 && pre && !ac->window && !(ac->cap > 0.f);
    return wg ? 3e-3 : 0;
}

/* bits: of the copy (kv_type FULL), or of the storage's own rows (kv_type q8 / q4). */
static void run_case(const qkv_case *ac, int bits, int kv_type, uint64_t *rng) {
    const int Hkv = ac->Hkv, H = Hkv * ac->group, Dh = ac->Dh, ps = ac->ps, ns = ac->ns, kvd = Hkv * Dh;
    const int L = 2;
    int T = 0, mp = 0;
    for (int b = 0; b < ns; b++) {
        T += ac->ntok[b];
        const int np = (ac->len0[b] + ac->ntok[b] + ps - 1) / ps;
        mp = np > mp ? np : mp;
    }
    seer_kv_geom g = {.n_pages = ns * mp, .page_size = ps, .n_layers = L, .n_kv_heads = Hkv,
                      .head_dim = Dh, .kv_bits = kv_type ? 0 : bits, .kv_type = kv_type};
    void *kc = NULL, *kg = NULL;
    int committed = 0;
    ASSERT_OK(cpu->ops->kv_alloc(cpu, &g, &kc));
    ASSERT_OK(gpu->ops->kv_alloc(gpu, &g, &kg));
    ASSERT_OK(cpu->ops->kv_reserve(cpu, kc, &g, g.n_pages, &committed));
    ASSERT_OK(gpu->ops->kv_reserve(gpu, kg, &g, g.n_pages, &committed));
    assert_int_equal(committed, g.n_pages);
    int32_t *pages = malloc(sizeof(int32_t) * ns * mp);
    for (int b = 0; b < ns; b++)
        for (int i = 0; i < mp; i++)
            pages[b * mp + i] = b + i * ns;
    /* inverse frequencies for rope_kv_store (layer 1): both backends rope the same keys */
    float *inv = malloc(sizeof(float) * (Dh / 2 ? Dh / 2 : 1));
    for (int i = 0; i < Dh / 2; i++)
        inv[i] = powf(10000.f, -2.f * i / Dh);
    float *dinv = dev_copy(inv, Dh / 2 ? Dh / 2 : 1);
    /* every slot of every sequence; a fork's sequence 1 gets sequence 0's pages copied */
    for (int b = 0; b < ns; b++) {
        const int n = b == 1 && ac->fork ? ac->ntok[b] : ac->len0[b] + ac->ntok[b];
        const int s0 = b == 1 && ac->fork ? ac->len0[b] : 0;
        if (b == 1 && ac->fork) {
            const int np = (ac->len0[0] + ps - 1) / ps;
            seer_kv_copy *cp = malloc(sizeof *cp * (np ? np : 1));
            for (int p = 0; p < np; p++)
                cp[p] = (seer_kv_copy){.src = pages[p], .dst = pages[mp + p]};
            ASSERT_OK(cpu->ops->kv_copy_pages(cpu, kc, &g, cp, np));
            ASSERT_OK(gpu->ops->kv_copy_pages(gpu, kg, &g, cp, np));
            free(cp);
        }
        int32_t *pg = malloc(sizeof(int32_t) * n), *row = malloc(sizeof(int32_t) * n);
        int32_t *pos = malloc(sizeof(int32_t) * n);
        for (int s = 0; s < n; s++)
            pg[s] = pages[b * mp + (s0 + s) / ps], row[s] = (s0 + s) % ps, pos[s] = s0 + s;
        for (int l = 0; l < L; l++) {
            float *k = rand_array((size_t)n * kvd, 1.f, rng), *v = rand_array((size_t)n * kvd, 1.f, rng);
            float *dk = dev_copy(k, (size_t)n * kvd), *dv = dev_copy(v, (size_t)n * kvd);
            if (l == 0 || Dh % 2) {
                ASSERT_OK(cpu->ops->kv_store(cpu, kc, &g, l, k, v, pg, row, n));
                ASSERT_OK(gpu->ops->kv_store(gpu, kg, &g, l, dk, dv, pg, row, n));
                if (kv_type) /* the same rows, bit for bit: the quantiser is the host's */
                    for (int w = 0; w < 2; w++) {
                        float *rc = nan_array((size_t)n * kvd), *rg = nan_array((size_t)n * kvd);
                        ASSERT_OK(cpu->ops->kv_read(cpu, kc, &g, l, w, pg, row, n, rc));
                        ASSERT_OK(gpu->ops->kv_read(gpu, kg, &g, l, w, pg, row, n, rg));
                        record("kv_type_store", kv_type == SEER_KV_Q8 ? "q8" : "q4", rg, rc, (size_t)n * kvd, 0);
                        free(rc), free(rg);
                    }
            } else {
                float *q1 = rand_array((size_t)n * H * Dh, 1.f, rng);
                float *dq1 = dev_copy(q1, (size_t)n * H * Dh);
                ASSERT_OK(cpu->ops->rope(cpu, k, pos, n, Hkv, Dh, inv, 1));
                ASSERT_OK(cpu->ops->kv_store(cpu, kc, &g, l, k, v, pg, row, n));
                ASSERT_OK(gpu->ops->rope_kv_store(gpu, dq1, dk, dv, pos, n, H, Hkv, Dh, dinv, 1, kg, &g, l, pg, row));
                dev_free(dq1);
                free(q1);
            }
            dev_free(dk), dev_free(dv);
            free(k), free(v);
        }
        free(pg), free(row), free(pos);
    }
    /* the batch: new tokens after the cached ones, sequence by sequence */
    int32_t *tok_seq = malloc(sizeof(int32_t) * T), *tok_slot = malloc(sizeof(int32_t) * T);
    int32_t *seq_toks = malloc(sizeof(int32_t) * T), off[MAX_SEQ + 1], len0[MAX_SEQ];
    off[0] = 0;
    for (int b = 0, t = 0; b < ns; b++) {
        len0[b] = ac->len0[b];
        for (int i = 0; i < ac->ntok[b]; i++, t++)
            tok_seq[t] = b, tok_slot[t] = len0[b] + i, seq_toks[t] = t;
        off[b + 1] = off[b] + ac->ntok[b];
    }
    int32_t vidx[MAX_SEQ][2 * 8 * 64];
    seer_attn_view views[MAX_SEQ];
    const seer_attn_view *vp[MAX_SEQ] = {NULL, NULL, NULL};
    for (int b = 0; b < ns && ac->view; b++) { /* every third slot below the tail, per row */
        const int n = len0[b] / 2 / 3;
        for (int r = 0; r < L * Hkv; r++)
            for (int k = 0; k < n; k++)
                vidx[b][r * n + k] = (b + r) % 3 + 3 * k;
        views[b] = (seer_attn_view){.idx = vidx[b], .n = n, .n_layers_view = L, .n_heads_view = Hkv,
                                    .tail_start = len0[b] / 2};
        vp[b] = &views[b];
    }
    int32_t prompt[MAX_SEQ];
    for (int b = 0; b < ns; b++)
        prompt[b] = ac->ntok[b];
    uint8_t *mask = NULL;
    if (ac->mask) {
        mask = calloc((size_t)T * T, 1);
        for (int i = 0; i < T; i++)
            for (int j = off[tok_seq[i]]; j <= i; j++)
                mask[(size_t)i * T + j] = j == i || (j - off[tok_seq[i]]) % 2 == 0;
    }
    seer_attn_batch ab = {.T = T, .n_heads = H, .n_kv_heads = Hkv, .head_dim = Dh,
                          .scale = 1.f / sqrtf((float)Dh), .page_size = ps, .n_seq = ns,
                          .max_pages = mp, .seq_pages = pages, .seq_len0 = len0,
                          .seq_tok_off = off, .seq_toks = seq_toks, .seq_view = vp,
                          .tok_seq = tok_seq, .tok_slot = tok_slot, .mask = mask, .kv_quant = !kv_type,
                          .seq_prompt = ac->prompt ? prompt : NULL, .window = ac->window, .softcap = ac->cap};
    const size_t n = (size_t)T * H * Dh;
    float *q = rand_array(n, 3.f, rng);
    /* quantised rows on the tensor-core kernel: K and V are exact in bf16, and so is q */
    const bool tc = kv_type && attn_tc_shape(Dh, ac->group);
    if (kv_type)
        to_bf16_exact(q, n);
    float *dq = dev_copy(q, n);
    seer_kv_geom gb;
    const double ttol = tc ? twin_tol(ac, T) : -1;
    void *kb = ttol >= 0 ? bf16_twin(ac, &g, kg, pages, mp, &gb) : NULL;
    for (int l = 0; l < L; l++) {
        float *ref = nan_array(n), *dout = dev_nan(n);
        ASSERT_OK(cpu->ops->attention(cpu, ref, q, kc, &g, l, &ab));
        ASSERT_OK(gpu->ops->attention(gpu, dout, dq, kg, &g, l, &ab));
        float *out = dev_fetch(dout, n);
        char shape[160];
        snprintf(shape, sizeof shape, "%sq%d Hkv=%d G=%d Dh=%d ps=%d T=%d layer %d%s%s%s%s window=%d cap=%g",
                 kv_type ? "rows " : "copy ", bits,
                 Hkv, ac->group, Dh, ps, T, l, ac->view ? " view" : "", ac->mask ? " mask" : "",
                 ac->fork ? " fork" : "", ac->prompt ? " prompt" : "", ac->window, ac->cap);
        record(kv_type ? "attention_kv_type" : "attention_qkv", shape, out, ref, n, tc ? 3e-3 : 1e-3);
        if (kb) {
            float *dtw = dev_nan(n);
            ASSERT_OK(gpu->ops->attention(gpu, dtw, dq, kb, &gb, l, &ab));
            float *tw = dev_fetch(dtw, n);
            record("kv_type_tc", shape, out, tw, n, ttol);
            dev_free(dtw);
            free(tw);
        }
        dev_free(dout);
        free(ref), free(out);
    }
    if (kb)
        gpu->ops->kv_free(gpu, kb);
    dev_free(dq), dev_free(dinv);
    free(q), free(mask), free(inv), free(pages), free(tok_seq), free(tok_slot), free(seq_toks);
    cpu->ops->kv_free(cpu, kc);
    gpu->ops->kv_free(gpu, kg);
}

static void test_attention_qkv(void **state) {
    (void)state;
    uint64_t rng = 4242;
    for (int bits = 4; bits <= 8; bits += 4)
        for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++)
            run_case(&CASES[c], bits, 0, &rng);
    assert_op_passed("attention_qkv");
}

static void test_attention_kv_type(void **state) {
    (void)state;
    uint64_t rng = 4343;
    for (int t = SEER_KV_Q8; t <= SEER_KV_Q4; t++)
        for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++)
            run_case(&CASES[c], t == SEER_KV_Q8 ? 8 : 4, t, &rng);
    assert_op_passed("kv_type_store");
    assert_op_passed("attention_kv_type");
    const char *v = getenv("SEER_CUDA_ATTN");
    if (!(v && !strcmp(v, "scalar"))) {
        assert_true(stat_of("kv_type_tc")->cases > 0);
        assert_op_passed("kv_type_tc");
    }
}

/* The random fill, row moves and page copies of quantised rows: the CPU's rows exactly. */
static void test_kv_type_rows(void **state) {
    (void)state;
    for (int t = SEER_KV_Q8; t <= SEER_KV_Q4; t++) {
        seer_kv_geom g = {.n_pages = 4, .page_size = 8, .n_layers = 2, .n_kv_heads = 2, .head_dim = 64, .kv_type = t};
        void *kc = NULL, *kg = NULL;
        int committed;
        ASSERT_OK(cpu->ops->kv_alloc(cpu, &g, &kc));
        ASSERT_OK(gpu->ops->kv_alloc(gpu, &g, &kg));
        ASSERT_OK(cpu->ops->kv_reserve(cpu, kc, &g, 4, &committed));
        ASSERT_OK(gpu->ops->kv_reserve(gpu, kg, &g, 4, &committed));
        const int32_t pages[3] = {2, 0, 1};
        ASSERT_OK(cpu->ops->kv_fill_random(cpu, kc, &g, pages, 3, 0, 24, 11, 0.5f));
        ASSERT_OK(gpu->ops->kv_fill_random(gpu, kg, &g, pages, 3, 0, 24, 11, 0.5f));
        const int32_t sp[3] = {0, 1, 2}, sr[3] = {1, 1, 3}, dp[3] = {2, 2, 2}, dr[3] = {3, 4, 5};
        ASSERT_OK(cpu->ops->kv_move_rows(cpu, kc, &g, sp, sr, dp, dr, 3));
        ASSERT_OK(gpu->ops->kv_move_rows(gpu, kg, &g, sp, sr, dp, dr, 3));
        const seer_kv_copy cp = {2, 3};
        ASSERT_OK(cpu->ops->kv_copy_pages(cpu, kc, &g, &cp, 1));
        ASSERT_OK(gpu->ops->kv_copy_pages(gpu, kg, &g, &cp, 1));
        int32_t pg[32], row[32];
        for (int i = 0; i < 32; i++)
            pg[i] = i / 8, row[i] = i % 8;
        for (int l = 0; l < 2; l++)
            for (int w = 0; w < 2; w++) {
                float *rc = nan_array(32 * 128), *rg = nan_array(32 * 128);
                ASSERT_OK(cpu->ops->kv_read(cpu, kc, &g, l, w, pg, row, 32, rc));
                ASSERT_OK(gpu->ops->kv_read(gpu, kg, &g, l, w, pg, row, 32, rg));
                /* rows nothing wrote (page 1's tail) are NaN on the CPU: compare the written */
                for (int i = 0; i < 32; i++)
                    if (isnan(rc[i * 128]))
                        for (int e = 0; e < 128; e++)
                            rc[i * 128 + e] = rg[i * 128 + e] = 0.f;
                record("kv_type_rows", t == SEER_KV_Q8 ? "q8 fill, move, copy" : "q4 fill, move, copy", rg, rc,
                       32 * 128, 0);
                free(rc), free(rg);
            }
        cpu->ops->kv_free(cpu, kc);
        gpu->ops->kv_free(gpu, kg);
        /* quantised rows with a copy beside them: refused */
        g.kv_bits = 4;
        void *bad = NULL;
        assert_int_equal(gpu->ops->kv_alloc(gpu, &g, &bad), SEER_ERR_INVALID_ARG);
        assert_null(bad);
    }
    assert_op_passed("kv_type_rows");
}

static void test_qkv_errors(void **state) {
    (void)state;
    seer_kv_geom g = {.n_pages = 2, .page_size = 4, .n_layers = 1, .n_kv_heads = 1, .head_dim = 8, .kv_bits = 5};
    void *kv = NULL;
    assert_int_equal(gpu->ops->kv_alloc(gpu, &g, &kv), SEER_ERR_INVALID_ARG);
    assert_null(kv);
    g.kv_bits = 0;
    int committed;
    ASSERT_OK(gpu->ops->kv_alloc(gpu, &g, &kv));
    ASSERT_OK(gpu->ops->kv_reserve(gpu, kv, &g, 2, &committed));
    int32_t pages[1] = {0}, len0[1] = {0}, off[2] = {0, 1}, toks[1] = {0}, ts[1] = {0}, slot[1] = {0};
    seer_attn_batch ab = {.T = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = 8, .scale = 0.35f, .page_size = 4,
                          .n_seq = 1, .max_pages = 1, .seq_pages = pages, .seq_len0 = len0, .seq_tok_off = off,
                          .seq_toks = toks, .tok_seq = ts, .tok_slot = slot, .kv_quant = true};
    float *dq = dev_nan(8), *dout = dev_nan(8);
    assert_int_equal(gpu->ops->attention(gpu, dout, dq, kv, &g, 0, &ab), SEER_ERR_INVALID_ARG);
    gpu->ops->kv_free(gpu, kv);
    g.kv_bits = 4;
    ASSERT_OK(gpu->ops->kv_alloc(gpu, &g, &kv));
    ASSERT_OK(gpu->ops->kv_reserve(gpu, kv, &g, 2, &committed));
    assert_int_equal(gpu->ops->kv_fill_random(gpu, kv, &g, pages, 1, 0, 2, 1, 1.f), SEER_ERR_UNSUPPORTED);
    gpu->ops->kv_free(gpu, kv);
    dev_free(dq), dev_free(dout);
}

#endif /* SEER_HAVE_CUDA */

int main(void) {
#ifdef SEER_HAVE_CUDA
    /* the tensor-core kernel over quantised rows, off by default until it has run on a GPU */
    setenv("SEER_CUDA_KV_ROWS_TC", "1", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_qkv),
        cmocka_unit_test(test_qkv_errors),
        cmocka_unit_test(test_attention_kv_type),
        cmocka_unit_test(test_kv_type_rows),
    };
    return ops_run(tests, sizeof tests / sizeof *tests);
#else
    return ops_run(NULL, 0);
#endif
}
