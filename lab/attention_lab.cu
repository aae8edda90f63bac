/*
 * attention_lab.cu: the attention op (attention.cu, attention_tc.cu) on its own, in the manner
 * of llm.c's dev/cuda: decode steps and verification chains over the paged bf16 cache at the
 * Llama-3.1-8B head shape (32 query heads over 8 KV heads of 128), one layer. Each case is
 * checked against the CPU backend on random inputs (the output poisoned first) where the CPU
 * can run it in seconds, then timed in a recorded CUDA graph of back-to-back calls against the
 * copy-bandwidth floor of the K and V bytes it must read.
 *
 *   lab_attention [--cases 8x32768+1,14x32768+5,...] [--reps N] [--check-max ROWS] [--layers N]
 *
 * --layers N: the cache holds N layers (the same rows in each) and the timed calls cycle
 * through them, so that K and V come from memory as in a forward pass rather than from L2
 * (which holds the one layer of a 1 x 4K case whole).
 *
 * A case BxL+n is B sequences of L cached slots, each with n new tokens (1: a decode step;
 * G + 1: a verification chain). SEER_CUDA_ATTN picks a kernel family (lab/cuda_env.h).
 * Not for: correctness of record (test_backend_ops owns that).
 */
#include "cuda_env.h"
#include "backend/cuda/cuda_common.cuh"
#include "lab_util.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                \
    do {                                                                                     \
        seer_status s_ = (x);                                                                \
        if (s_ != SEER_OK) {                                                                 \
            fprintf(stderr, "lab_attention: %s: %s\n", #x, seer_last_error());               \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#define CU(x)                                                                                \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "lab_attention: %s: %s\n", #x, cudaGetErrorString(e_));          \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static void fill_rand(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = lab_frand() * scale;
}

typedef struct {
    int B, L, n;
} lab_case;

static int parse_cases(const char *s, lab_case *out, int max) {
    int k = 0;
    while (s && *s && k < max) {
        lab_case c = {1, 4096, 1};
        if (sscanf(s, "%dx%d+%d", &c.B, &c.L, &c.n) < 2)
            return -1;
        out[k++] = c;
        s = strchr(s, ',');
        if (s)
            s++;
    }
    return k;
}

enum { H = 32, HKV = 8, DH = 128, PS = 16, CH = 8192 };

int main(int argc, char **argv) {
    const char *cases = "1x4096+1,1x32768+1,1x131072+1,3x131072+1,8x32768+1,14x32768+1,8x32768+5,14x32768+5,"
                        "3x131072+5,1x32768+5";
    int reps = 20;
    long long check_max = 70000;
    int layers = 1;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--cases") && v)
            cases = argv[++i];
        else if (!strcmp(argv[i], "--reps") && v)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check-max") && v)
            check_max = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && v)
            layers = atoi(argv[++i]) < 1 ? 1 : atoi(argv[i]);
        else {
            fprintf(stderr, "usage: lab_attention [--cases BxL+n,...] [--reps N] [--check-max ROWS] [--layers N]\n");
            return 2;
        }
    }
    lab_case cs[32];
    const int n_cases = parse_cases(cases, cs, 32);
    if (n_cases < 1) {
        fprintf(stderr, "lab_attention: cannot parse --cases %s\n", cases);
        return 2;
    }
    seer_backend *gpu = NULL, *cpu = NULL;
    const seer_cuda_tuning tuning = lab_cuda_tuning_from_env(); /* SEER_CUDA_* */
    CK(seer_backend_cuda_init_tuned(0, &tuning, &gpu));
    CK(seer_backend_cpu_init(0, &cpu));
    seer_cuda *c = seer_cuda_of(gpu);
    double bw = 0;
    CK(gpu->ops->copy_bandwidth(gpu, &bw));
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, c->device));
    printf("# lab_attention: %s, %d SMs, copy bandwidth %.0f GB/s; H %d, Hkv %d, Dh %d, page %d; graph of %d "
           "calls over %d layer(s), median of 5\n",
           prop.name, c->n_sm, bw / 1e9, H, HKV, DH, PS, reps, layers);
    printf("%-14s %10s %10s %7s %8s %9s\n", "case", "us", "floor_us", "%floor", "TFLOP/s", "rel_err");
    const size_t kvd = (size_t)HKV * DH;
    float *hk = (float *)malloc(CH * kvd * sizeof(float)), *hv = (float *)malloc(CH * kvd * sizeof(float));
    float *dk = NULL, *dv = NULL;
    CK(gpu->ops->alloc(gpu, CH * kvd * sizeof(float), (void **)&dk));
    CK(gpu->ops->alloc(gpu, CH * kvd * sizeof(float), (void **)&dv));
    for (int ci = 0; ci < n_cases; ci++) {
        const lab_case lc = cs[ci];
        const int B = lc.B, L = lc.L, n = lc.n, T = B * n;
        const bool check = (long long)B * (L + n) <= check_max;
        const int per = (L + n + PS - 1) / PS, n_pages = B * per + 1;
        seer_kv_geom g = {.n_pages = n_pages, .page_size = PS, .n_layers = layers, .n_kv_heads = HKV, .head_dim = DH};
        seer_kv_geom g1 = g; /* the CPU reference's: layer 0 alone */
        g1.n_layers = 1;
        void *kg = NULL, *kc = NULL;
        int committed = 0;
        CK(gpu->ops->kv_alloc(gpu, &g, &kg));
        CK(gpu->ops->kv_reserve(gpu, kg, &g, n_pages, &committed));
        if (check) {
            CK(cpu->ops->kv_alloc(cpu, &g1, &kc));
            CK(cpu->ops->kv_reserve(cpu, kc, &g1, n_pages, &committed));
        }
        /* pages in a shuffled order, as a pool hands them out after some churn */
        int32_t *perm = (int32_t *)malloc(n_pages * sizeof(int32_t));
        for (int i = 0; i < n_pages; i++)
            perm[i] = i;
        for (int i = n_pages - 1; i > 0; i--) {
            lab_frand();
            const int j = (int)((lab_rng >> 33) % (uint64_t)(i + 1));
            const int32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        int32_t *seq_pages = (int32_t *)malloc((size_t)B * per * sizeof(int32_t));
        for (int i = 0; i < B * per; i++)
            seq_pages[i] = perm[i];
        /* the cached slots: fresh random rows where checked, else a few random chunks again */
        int32_t *page = (int32_t *)malloc(CH * sizeof(int32_t)), *row = (int32_t *)malloc(CH * sizeof(int32_t));
        bool have = false;
        for (int b = 0; b < B; b++)
            for (int s0 = 0; s0 < L; s0 += CH) {
                const int m = L - s0 < CH ? L - s0 : CH;
                if (check || !have) {
                    fill_rand(hk, (size_t)m * kvd, 1.f);
                    fill_rand(hv, (size_t)m * kvd, 1.f);
                    CK(gpu->ops->upload(gpu, dk, hk, (size_t)m * kvd * sizeof(float)));
                    CK(gpu->ops->upload(gpu, dv, hv, (size_t)m * kvd * sizeof(float)));
                    have = m == CH;
                }
                for (int i = 0; i < m; i++) {
                    page[i] = seq_pages[(size_t)b * per + (s0 + i) / PS];
                    row[i] = (s0 + i) % PS;
                }
                for (int l = 0; l < layers; l++)
                    CK(gpu->ops->kv_store(gpu, kg, &g, l, dk, dv, page, row, m));
                if (check)
                    CK(cpu->ops->kv_store(cpu, kc, &g1, 0, hk, hv, page, row, m));
            }
        /* the batch: n new tokens per sequence, sequence by sequence */
        int32_t *tok_seq = (int32_t *)malloc(T * sizeof(int32_t)), *tok_slot = (int32_t *)malloc(T * sizeof(int32_t));
        int32_t *seq_toks = (int32_t *)malloc(T * sizeof(int32_t)), *tpage = (int32_t *)malloc(T * sizeof(int32_t));
        int32_t *trow = (int32_t *)malloc(T * sizeof(int32_t)), *off = (int32_t *)malloc((B + 1) * sizeof(int32_t));
        int32_t *len0 = (int32_t *)malloc(B * sizeof(int32_t));
        for (int b = 0; b < B; b++) {
            len0[b] = L;
            off[b] = b * n;
            for (int j = 0; j < n; j++) {
                const int t = b * n + j;
                tok_seq[t] = b;
                tok_slot[t] = L + j;
                seq_toks[t] = t;
                tpage[t] = seq_pages[(size_t)b * per + (L + j) / PS];
                trow[t] = (L + j) % PS;
            }
        }
        off[B] = T;
        seer_attn_batch ab = {.T = T, .n_heads = H, .n_kv_heads = HKV, .head_dim = DH,
                              .scale = 1.f / sqrtf((float)DH), .page_size = PS, .n_seq = B,
                              .max_pages = per, .seq_pages = seq_pages, .seq_len0 = len0,
                              .seq_tok_off = off, .seq_toks = seq_toks, .seq_view = NULL,
                              .tok_seq = tok_seq, .tok_slot = tok_slot, .mask = NULL};
        const size_t nq = (size_t)T * H * DH;
        float *q = (float *)malloc(nq * sizeof(float)), *out = (float *)malloc(nq * sizeof(float));
        fill_rand(q, nq, 3.f); /* far from a uniform softmax */
        fill_rand(hk, (size_t)T * kvd, 1.f);
        fill_rand(hv, (size_t)T * kvd, 1.f);
        float *dq = NULL, *dout = NULL;
        CK(gpu->ops->alloc(gpu, nq * sizeof(float), (void **)&dq));
        CK(gpu->ops->alloc(gpu, nq * sizeof(float), (void **)&dout));
        CK(gpu->ops->upload(gpu, dq, q, nq * sizeof(float)));
        CK(gpu->ops->upload(gpu, dk, hk, (size_t)T * kvd * sizeof(float)));
        CK(gpu->ops->upload(gpu, dv, hv, (size_t)T * kvd * sizeof(float)));
        CU(cudaMemsetAsync(dout, 0xff, nq * sizeof(float), c->stream)); /* NaN: unwritten shows */
        CK(gpu->ops->batch_begin(gpu, &ab, NULL, NULL, tpage, trow, NULL, 0));
        for (int l = 0; l < layers; l++)
            CK(gpu->ops->kv_store(gpu, kg, &g, l, dk, dv, tpage, trow, T));
        CK(gpu->ops->attention(gpu, dout, dq, kg, &g, 0, &ab));
        CK(gpu->ops->download(gpu, out, dout, nq * sizeof(float)));
        double rel = -1;
        if (check) {
            float *ref = (float *)malloc(nq * sizeof(float));
            CK(cpu->ops->kv_store(cpu, kc, &g1, 0, hk, hv, tpage, trow, T));
            CK(cpu->ops->attention(cpu, ref, q, kc, &g1, 0, &ab));
            double num = 0, den = 0;
            for (size_t i = 0; i < nq; i++) {
                const double d = (double)out[i] - ref[i];
                num += d * d;
                den += (double)ref[i] * ref[i];
            }
            rel = isnan(num) ? INFINITY : sqrt(num / den);
            free(ref);
        } else {
            for (size_t i = 0; i < nq; i++)
                if (isnan(out[i])) {
                    rel = INFINITY;
                    break;
                }
        }
        /* batch invariance: every token alone (its sequence's first new token as a decode step
         * gives the same output as inside the batch) -- checked on the first sequence; a
         * prefill (more new tokens than SEER_INVARIANT_NEW_TOKENS) need not be */
        bool inv = true;
        if (n <= SEER_INVARIANT_NEW_TOKENS) {
            seer_attn_batch a1 = ab;
            int32_t one_off[2] = {0, 1}, one_seq = 0, one_slot = L, one_tok = 0;
            a1.T = 1;
            a1.n_seq = 1;
            a1.seq_tok_off = one_off;
            a1.seq_toks = &one_tok;
            a1.tok_seq = &one_seq;
            a1.tok_slot = &one_slot;
            float *o1 = (float *)malloc((size_t)H * DH * sizeof(float));
            CK(gpu->ops->batch_begin(gpu, &a1, NULL, NULL, tpage, trow, NULL, 0));
            CK(gpu->ops->attention(gpu, dout, dq, kg, &g, 0, &a1));
            CK(gpu->ops->download(gpu, o1, dout, (size_t)H * DH * sizeof(float)));
            inv = !memcmp(o1, out, (size_t)H * DH * sizeof(float));
            free(o1);
        }
        /* time: reps calls in one graph */
        CK(gpu->ops->batch_begin(gpu, &ab, NULL, NULL, tpage, trow, NULL, 0));
        int call = 0;
        const double us = lab_graph_us(c->stream, reps, [&] {
            CK(gpu->ops->attention(gpu, dout, dq, kg, &g, call++ % layers, &ab));
        });
        /* the graph's replays must reproduce the first run's bits */
        float *o2 = (float *)malloc(nq * sizeof(float));
        CK(gpu->ops->download(gpu, o2, dout, nq * sizeof(float)));
        const bool same = !memcmp(o2, out, nq * sizeof(float));
        free(o2);
        const double bytes = (double)B * (L + n) * kvd * 2 * 2;
        const double floor_us = bytes / bw * 1e6;
        char name[64];
        snprintf(name, sizeof name, "%dx%d+%d", B, L, n);
        /* scores and weighted sums: token j of a sequence sees L + j + 1 keys */
        const double flops = 4.0 * B * H * DH * ((double)n * L + (double)n * (n + 1) / 2);
        printf("%-14s %10.2f %10.2f %6.1f%% %8.1f %9.2e%s%s%s\n", name, us, floor_us, 100.0 * floor_us / us,
               flops / us * 1e-6, rel,
               rel > 1e-2 ? "  WRONG" : "", inv ? "" : "  NOT-INVARIANT", same ? "" : "  REPLAY-CHANGES-BITS");
        fflush(stdout);
        gpu->ops->dealloc(gpu, dq);
        gpu->ops->dealloc(gpu, dout);
        gpu->ops->kv_free(gpu, kg);
        if (kc)
            cpu->ops->kv_free(cpu, kc);
        free(q), free(out), free(perm), free(seq_pages), free(page), free(row);
        free(tok_seq), free(tok_slot), free(seq_toks), free(tpage), free(trow), free(off), free(len0);
    }
    gpu->ops->dealloc(gpu, dk);
    gpu->ops->dealloc(gpu, dv);
    free(hk), free(hv);
    gpu->ops->free(gpu);
    cpu->ops->free(cpu);
    return 0;
}
