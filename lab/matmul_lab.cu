/*
 * matmul_lab.cu: the weight-streaming matmul kernels (matmul.cu, matmul_q.cu) on their own,
 * in the manner of llm.c's dev/cuda: every weight type on the Llama-3.1-8B shapes, each call
 * checked against the CPU backend on random inputs, then timed in a recorded CUDA graph of
 * back-to-back calls against the copy-bandwidth floor of its stored bytes.
 *
 *   lab_matmul [--types bf16,q4_0,...] [--T 1,2,4,8] [--shapes qkv,o,gate_up,down]
 *              [--waves 1,2] [--min-steps 1,2,4] [--xb-min 1,32]
 *              [--gemv-max N] [--mm-tile N] [--reps N]
 *
 * --waves / --min-steps sweep the split over K (seer_cuda.mm_waves, mm_min_steps) and
 * --xb-min the tokens from which a bf16 weight's x is rounded to bf16 before the matmul
 * (mm_xb_min_t), so a setting can be measured before it becomes the default.
 * A type's name with _t (q4_k_t, q6_k_t, q8_0_t, q4_0_t, ...: every type of qt_formats.cuh)
 * is the type in matmul_qt.cu's row blocks (seer_cuda.qt), without it matmul_q.cu's planes;
 * --gemv-max N the most tokens the row blocks' GEMV takes (the tensor-core kernel above, the
 * same bits); --mm-tile N the most tokens a block takes (seer_cuda.mm_tile; 32 at most for the
 * row blocks). The floor is the copy time of the bytes the kernel reads: the row blocks'
 * (seer_cuda_qt_bytes) or the file's.
 * Not for: correctness of record (test_backend_ops / test_backend_ops_q own that).
 */
#include "cuda_env.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul.cuh"
#include "lab_util.cuh"
#include "gguf/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int rows, cols;
    int form; /* 0 matmul, 1 glu (interleaved pairs), 2 residual add */
} lab_shape;

static const lab_shape shapes[] = {
    {"qkv", 6144, 4096, 0},
    {"o", 4096, 4096, 2},
    {"gate_up", 28672, 4096, 1},
    {"down", 4096, 14336, 2},
    {"head", 128256, 4096, 0},
};

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (s && *s && n < max) {
        out[n++] = atoi(s);
        s = strchr(s, ',');
        if (s)
            s++;
    }
    return n;
}

static bool in_list(const char *list, const char *name) {
    if (!list)
        return true;
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return true;
    return false;
}

#define CK(x)                                                                                \
    do {                                                                                     \
        seer_status s_ = (x);                                                                \
        if (s_ != SEER_OK) {                                                                 \
            fprintf(stderr, "lab_matmul: %s: %s\n", #x, seer_last_error());                  \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#define CU(x)                                                                                \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "lab_matmul: %s: %s\n", #x, cudaGetErrorString(e_));             \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* The CPU reference of a form (the CPU backend has the plain matmul alone): wc[0], or the
 * gate and up halves wc[0], wc[1]; y starts at zero, so the residual form is the product. */
static void cpu_form(seer_backend *cpu, int form, float *y, const float *x, const seer_weight *wc, int T,
                     int out_cols) {
    if (form != 1) {
        CK(cpu->ops->matmul(cpu, y, x, &wc[0], NULL, T));
        return;
    }
    const size_t n = (size_t)T * out_cols;
    float *g = (float *)malloc(n * sizeof(float)), *u = (float *)malloc(n * sizeof(float));
    CK(cpu->ops->matmul(cpu, g, x, &wc[0], NULL, T));
    CK(cpu->ops->matmul(cpu, u, x, &wc[1], NULL, T));
    for (size_t i = 0; i < n; i++)
        y[i] = g[i] / (1.f + expf(-g[i])) * u[i];
    free(g);
    free(u);
}

static seer_status run_form(seer_backend *be, int form, float *y, const float *x, const seer_weight *w, int T) {
    if (form == 1)
        return be->ops->matmul_glu(be, y, x, w, T);
    if (form == 2)
        return be->ops->matmul_add(be, y, x, w, T);
    return be->ops->matmul(be, y, x, w, NULL, T);
}

int main(int argc, char **argv) {
    const char *types = "bf16,q4_0,q4_0_t,q8_0,q8_0_t,q4_k,q4_k_t,q6_k,q6_k_t", *shape_list = NULL;
    int Ts[16] = {1, 2, 4, 8}, nT = 4, waves[8] = {1}, n_waves = 1, mins[8] = {2}, n_mins = 1, reps = 20;
    int xbs[8] = {0}, n_xb = 0, gemv_max = -1, mm_tile = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--types") && v)
            types = argv[++i];
        else if (!strcmp(argv[i], "--T") && v)
            nT = parse_list(argv[++i], Ts, 16);
        else if (!strcmp(argv[i], "--shapes") && v)
            shape_list = argv[++i];
        else if (!strcmp(argv[i], "--waves") && v)
            n_waves = parse_list(argv[++i], waves, 8);
        else if (!strcmp(argv[i], "--min-steps") && v)
            n_mins = parse_list(argv[++i], mins, 8);
        else if (!strcmp(argv[i], "--xb-min") && v)
            n_xb = parse_list(argv[++i], xbs, 8);
        else if (!strcmp(argv[i], "--mm-tile") && v)
            mm_tile = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gemv-max") && v)
            gemv_max = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && v)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: lab_matmul [--types bf16,q4_0,..] [--T 1,2,4,8] [--shapes qkv,o,gate_up,down]"
                            " [--waves 1,2] [--min-steps 1,2,4] [--xb-min 1,32] [--gemv-max N] [--mm-tile N] [--reps N]\n");
            return 2;
        }
    }
    seer_backend *gpu = NULL, *cpu = NULL;
    const seer_cuda_tuning tuning = lab_cuda_tuning_from_env(); /* SEER_CUDA_* */
    CK(seer_backend_cuda_init_tuned(0, &tuning, &gpu));
    CK(seer_backend_cpu_init(0, &cpu));
    seer_cuda *c = seer_cuda_of(gpu);
    if (gemv_max >= 0)
        c->qt_gemv_max_t = gemv_max;
    if (mm_tile >= 8 && mm_tile <= 64)
        c->mm_tile = mm_tile / 8 * 8;
    double bw = 0;
    CK(gpu->ops->copy_bandwidth(gpu, &bw));
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, c->device));
    printf("# lab_matmul: %s, %d SMs, copy bandwidth %.0f GB/s; graph of %d calls, median of 5\n",
           prop.name, c->n_sm, bw / 1e9, reps);
    if (n_xb == 0) {
        xbs[0] = c->mm_xb_min_t;
        n_xb = 1;
    }
    printf("%-8s %-8s %3s %5s %5s %7s %9s %9s %7s %9s\n", "type", "shape", "T", "waves", "minst", "xbmin", "us",
           "floor_us", "%floor", "max_rel");

    static const struct { const char *name; ggml_type t; } tys[] = {
        {"bf16", GGML_TYPE_BF16}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1}, {"q5_0", GGML_TYPE_Q5_0},
        {"q5_1", GGML_TYPE_Q5_1}, {"q8_0", GGML_TYPE_Q8_0}, {"q4_k", GGML_TYPE_Q4_K}, {"q5_k", GGML_TYPE_Q5_K},
        {"q6_k", GGML_TYPE_Q6_K}, {"q4_0_t", GGML_TYPE_Q4_0}, {"q4_1_t", GGML_TYPE_Q4_1},
        {"q5_0_t", GGML_TYPE_Q5_0}, {"q5_1_t", GGML_TYPE_Q5_1}, {"q8_0_t", GGML_TYPE_Q8_0},
        {"q4_k_t", GGML_TYPE_Q4_K}, {"q5_k_t", GGML_TYPE_Q5_K}, {"q6_k_t", GGML_TYPE_Q6_K},
    };
    const int maxT = SEER_CUDA_INVARIANT_MAX_T;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const lab_shape *sh = &shapes[si];
        if (!in_list(shape_list, sh->name))
            continue;
        const size_t n = (size_t)sh->rows * sh->cols;
        float *wf = (float *)malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            wf[i] = lab_frand();
        const int out_cols = sh->form == 1 ? sh->rows / 2 : sh->rows;
        float *xh = (float *)malloc((size_t)maxT * sh->cols * sizeof(float));
        for (size_t i = 0; i < (size_t)maxT * sh->cols; i++)
            xh[i] = lab_frand();
        float *x = NULL, *y = NULL;
        CK(gpu->ops->alloc(gpu, (size_t)maxT * sh->cols * sizeof(float), (void **)&x));
        CK(gpu->ops->alloc(gpu, (size_t)maxT * out_cols * sizeof(float), (void **)&y));
        CK(gpu->ops->upload(gpu, x, xh, (size_t)maxT * sh->cols * sizeof(float)));
        for (size_t ti = 0; ti < sizeof tys / sizeof *tys; ti++) {
            if (!in_list(types, tys[ti].name))
                continue;
            uint64_t nb = 0;
            CK(seer_ggml_nbytes(tys[ti].t, n, &nb));
            void *raw = malloc(nb);
            CK(seer_gguf_quant(tys[ti].t, wf, raw, n));
            gguf_tensor gt;
            memset(&gt, 0, sizeof gt);
            gt.name = "w";
            gt.n_dims = 2;
            gt.ne[0] = (uint64_t)sh->cols;
            gt.ne[1] = (uint64_t)sh->rows;
            gt.ne[2] = gt.ne[3] = 1;
            gt.type = tys[ti].t;
            gt.data = raw;
            gt.nbytes = nb;
            seer_weight wg, wc[2];
            /* the layout follows it at load and in the product */
            c->qt = strlen(tys[ti].name) > 2 && !strcmp(tys[ti].name + strlen(tys[ti].name) - 2, "_t");
            if (sh->form == 1) { /* gate and up halves, rows alternating, as the model binds them */
                gguf_tensor half = gt;
                half.ne[1] = (uint64_t)(sh->rows / 2);
                half.nbytes = nb / 2;
                seer_weight pg[2];
                for (int h = 0; h < 2; h++) {
                    half.data = (uint8_t *)raw + h * (nb / 2);
                    CK(gpu->ops->weight_load(gpu, &half, SEER_WEIGHTS_STORED, &pg[h]));
                    CK(cpu->ops->weight_load(cpu, &half, SEER_WEIGHTS_F32, &wc[h]));
                }
                CK(gpu->ops->weight_concat(gpu, pg, 2, true, &wg));
                for (int h = 0; h < 2; h++)
                    gpu->ops->weight_free(gpu, &pg[h]);
            } else {
                CK(gpu->ops->weight_load(gpu, &gt, SEER_WEIGHTS_STORED, &wg));
                CK(cpu->ops->weight_load(cpu, &gt, SEER_WEIGHTS_F32, &wc[0]));
            }
            for (int wi = 0; wi < n_waves; wi++)
                for (int mi = 0; mi < n_mins; mi++)
                    for (int xi = 0; xi < n_xb; xi++)
                    for (int k = 0; k < nT; k++) {
                        const int T = Ts[k];
                        if (T < 1 || T > maxT)
                            continue;
                        c->mm_waves = waves[wi];
                        c->mm_min_steps = mins[mi];
                        c->mm_xb_min_t = xbs[xi];
                        /* check against the CPU (y starts at zero for the residual form) */
                        const size_t ny = (size_t)T * out_cols;
                        float *yh = (float *)calloc(ny, sizeof(float)), *yr = (float *)calloc(ny, sizeof(float));
                        CK(gpu->ops->upload(gpu, y, yh, ny * sizeof(float)));
                        CK(run_form(gpu, sh->form, y, x, &wg, T));
                        CK(gpu->ops->download(gpu, yh, y, ny * sizeof(float)));
                        cpu_form(cpu, sh->form, yr, xh, wc, T, out_cols);
                        double num = 0, den = 0;
                        for (size_t i = 0; i < ny; i++) {
                            num += ((double)yh[i] - yr[i]) * ((double)yh[i] - yr[i]);
                            den += (double)yr[i] * yr[i];
                        }
                        const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
                        free(yh);
                        free(yr);
                        /* time: reps calls in one graph */
                        const double us = lab_graph_us(c->stream, reps, [&] { CK(run_form(gpu, sh->form, y, x, &wg, T)); });
                        /* the bytes the kernel reads: the row blocks' (qt_formats.cuh), or the file's */
                        const double fb = c->qt ? (double)seer_cuda_qt_bytes(tys[ti].t, sh->rows, sh->cols)
                                                : (double)nb;
                        const double floor_us = fb / bw * 1e6;
                        printf("%-8s %-8s %3d %5d %5d %7d %9.2f %9.2f %6.1f%% %9.2e%s\n", tys[ti].name, sh->name,
                               T, waves[wi], mins[mi], xbs[xi], us, floor_us, 100.0 * floor_us / us, rel,
                               rel > 2e-2 ? "  WRONG" : "");
                        fflush(stdout);
                    }
            gpu->ops->weight_free(gpu, &wg);
            cpu->ops->weight_free(cpu, &wc[0]);
            if (sh->form == 1)
                cpu->ops->weight_free(cpu, &wc[1]);
            free(raw);
        }
        gpu->ops->dealloc(gpu, x);
        gpu->ops->dealloc(gpu, y);
        free(wf);
        free(xh);
    }
    gpu->ops->free(gpu);
    cpu->ops->free(cpu);
    return 0;
}
