/*
 * matmul_qt_check.cu: matmul_qt.cu's row blocks computed on the host with the kernels' own
 * lane code (qt_formats.cuh, matmul_qt.cuh), so that a test checks the layout, the codes'
 * words, the scales and the chains on a machine without a GPU: the repack, the dequantised
 * values, and both kernels' products (the GEMV's lane per row; the tensor-core kernel's lanes
 * (g, c) with the mma fragments put together as PTX defines them), in the split over K that
 * one block gives (8 warps, their sums added in warp order).
 * Not for: anything the backend runs.
 */
#include "backend/cuda/matmul_qt.cuh"

#include <math.h>
#include <stdlib.h>

/* x [T][cols] in 8 bits as qt_xprep_kernel rounds it */
static void qt_xprep_host(int8_t *xq, float2 *xd, const float *x, int T, int cols) {
    const int groups = cols / 32;
    for (int t = 0; t < T; t++)
        for (int g = 0; g < groups; g++) {
            const float *v = x + (size_t)t * cols + (size_t)g * 32;
            float amax = 0.f;
            for (int l = 0; l < 32; l++)
                amax = fmaxf(amax, fabsf(v[l]));
            const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
            int s = 0;
            for (int l = 0; l < 32; l++) {
                const int q = (int)roundf(v[l] * id), c = (l & 15) >> 2;
                s += q;
                xq[(size_t)t * cols + (size_t)g * 32 + 8 * c + 4 * (l >> 4) + (l & 3)] = (int8_t)q;
            }
            xd[(size_t)t * groups + g] = make_float2(d, (float)s);
        }
}

/* warp w's K steps [s0, s1) with one block over K */
static void qt_warp_steps(int n_steps, int w, int *s0, int *s1) {
    *s0 = n_steps * w / MM_WARPS;
    *s1 = n_steps * (w + 1) / MM_WARPS;
}

template <class F>
static void qt_gemv_host(const uint8_t *W, int rows, int cols, const int8_t *xq, const float2 *xd, int T, float *y) {
    const int n_sb = cols / QT_COLS, n_steps = cols / QT_STEP, groups = cols / 32;
    for (int r = 0; r < rows; r++) {
        const uint8_t *Wr = W + (size_t)(r / QT_ROWS) * n_sb * F::BYTES;
        for (int t = 0; t < T; t++) {
            float sum = 0.f;
            for (int w = 0; w < MM_WARPS; w++) {
                float acc[1] = {0.f};
                int s0, s1;
                qt_warp_steps(n_steps, w, &s0, &s1);
                for (int s = s0; s < s1; s++) {
                    qt_row<F> rr;
                    qt_load_row<F>(rr, Wr + (size_t)(s >> 1) * F::BYTES, s & 1, r % QT_ROWS);
                    qt_step<F, 1>(rr, s, acc, xq + (size_t)t * cols, xd + (size_t)t * groups, 1, cols);
                }
                sum = w ? sum + acc[0] : acc[0];
            }
            y[(size_t)t * rows + r] = sum;
        }
    }
}

/* A warp's lanes for one group of one K step. */
template <class F> struct qt_warp_group {
    uint32_t e[32][4], o[32][4], bx[32], by[32];
    typename F::gs sc[32][4];
    float2 x0[32], x1[32];
};

/* The signed byte i of w */
static int qt_byte_s(uint32_t w, int i) { return (int8_t)(w >> (8 * i)); }

/* Element el of lane l's D fragment of m tile m: row g + 8 (el >> 1), token 2c + (el & 1) of
 * lane (g, c) = (l >> 2, l & 3), summed from QT_ISUM0 over k 0..31 (i1: k 16..31 apart where
 * the type splits a group). A's k of a row is byte k & 3 of the e (k < 16) or o word of lane
 * (row & 7, (k & 15) >> 2) for its row g + 8q; B's k of a token byte k & 3 of b.x or b.y of
 * lane (token, (k & 15) >> 2). */
template <class F> static void qt_frag_sum(const qt_warp_group<F> *G, int m, int l, int el, int *i0, int *i1) {
    const int rowl = (l >> 2) + 8 * (el >> 1), tokl = 2 * (l & 3) + (el & 1), q = 2 * m + (rowl >> 3);
    *i0 = *i1 = QT_ISUM0;
    for (int k = 0; k < 32; k++) {
        const int kk = k & 15, la = (rowl & 7) * 4 + (kk >> 2), lb = tokl * 4 + (kk >> 2);
        const int a = qt_byte_s(k < 16 ? G->e[la][q] : G->o[la][q], kk & 3);
        const int b = qt_byte_s(k < 16 ? G->bx[lb] : G->by[lb], kk & 3);
        if (F::SPLIT && k >= 16)
            *i1 += a * b;
        else
            *i0 += a * b;
    }
}

template <class F>
static void qt_mma_host(const uint8_t *W, int rows, int cols, const int8_t *xq, const float2 *xd, int T, float *y) {
    const int n_sb = cols / QT_COLS, n_steps = cols / QT_STEP, groups = cols / 32;
    qt_lane<F> *L = (qt_lane<F> *)malloc(32 * sizeof *L);
    qt_warp_group<F> *G = (qt_warp_group<F> *)malloc(sizeof *G);
    for (int rg = 0; rg < (rows + QT_ROWS - 1) / QT_ROWS; rg++) {
        const uint8_t *Wr = W + (size_t)rg * n_sb * F::BYTES;
        for (int tok0 = 0; tok0 < T; tok0 += 8) {
            float tot[QT_ROWS][8];
            for (int w = 0; w < MM_WARPS; w++) {
                float acc[32][2][4] = {};
                int s0, s1;
                qt_warp_steps(n_steps, w, &s0, &s1);
                for (int s = s0; s < s1; s++) {
                    for (int l = 0; l < 32; l++)
                        qt_load_lane<F>(L[l], Wr + (size_t)(s >> 1) * F::BYTES, s & 1, l >> 2, l & 3);
                    for (int j = 0; j < 4; j++) {
                        const int gi = s * 4 + j;
                        for (int l = 0; l < 32; l++) {
                            const int g = l >> 2, c = l & 3, tb = tok0 + g, t0 = tok0 + 2 * c;
                            qt_lane_group<F>(L[l], j, G->e[l], G->o[l], G->sc[l]);
                            uint32_t b[2] = {0, 0};
                            if (tb < T)
                                memcpy(b, xq + (size_t)tb * cols + (size_t)gi * 32 + 8 * c, 8);
                            G->bx[l] = b[0];
                            G->by[l] = b[1];
                            G->x0[l] = t0 < T ? xd[(size_t)t0 * groups + gi] : make_float2(0.f, 0.f);
                            G->x1[l] = t0 + 1 < T ? xd[(size_t)(t0 + 1) * groups + gi] : make_float2(0.f, 0.f);
                        }
                        for (int m = 0; m < 2; m++)
                            for (int l = 0; l < 32; l++)
                                for (int el = 0; el < 4; el++) {
                                    int i0, i1;
                                    qt_frag_sum<F>(G, m, l, el, &i0, &i1);
                                    acc[l][m][el] = F::chain(G->sc[l][2 * m + (el >> 1)], qt_isum(i0),
                                                             F::SPLIT ? qt_isum(i1) : 0.f, el & 1 ? G->x1[l] : G->x0[l],
                                                             acc[l][m][el]);
                                }
                    }
                }
                for (int l = 0; l < 32; l++)
                    for (int m = 0; m < 2; m++)
                        for (int el = 0; el < 4; el++) {
                            const int r = m * 16 + (l >> 2) + 8 * (el >> 1), t = 2 * (l & 3) + (el & 1);
                            tot[r][t] = w ? tot[r][t] + acc[l][m][el] : acc[l][m][el];
                        }
            }
            for (int r = 0; r < QT_ROWS; r++)
                for (int t = 0; t < 8; t++)
                    if (rg * QT_ROWS + r < rows && tok0 + t < T)
                        y[(size_t)(tok0 + t) * rows + rg * QT_ROWS + r] = tot[r][t];
        }
    }
    free(L);
    free(G);
}

template <class F>
static seer_status qt_check(const uint8_t *blocks, int rows, int cols, const float *x, int T, float *deq, float *y1,
                            float *ym) {
    const int n_sb = cols / QT_COLS, groups = cols / 32;
    const size_t bytes = (size_t)((rows + QT_ROWS - 1) / QT_ROWS) * n_sb * F::BYTES;
    uint8_t *W = (uint8_t *)calloc(bytes, 1);
    int8_t *xq = (int8_t *)malloc((size_t)T * cols);
    float2 *xd = (float2 *)malloc(sizeof(float2) * (size_t)T * groups);
    if (!W || !xq || !xd) {
        free(W), free(xq), free(xd);
        return seer_err(SEER_ERR_OOM, "row blocks on the host: out of memory");
    }
    for (int r = 0; r < rows; r++)
        for (int sb = 0; sb < n_sb; sb++)
            qt_repack_row<F>(W + ((size_t)(r / QT_ROWS) * n_sb + sb) * F::BYTES,
                             blocks + ((size_t)r * n_sb + sb) * F::GGUF, r % QT_ROWS);
    for (int r = 0; r < rows; r++)
        for (int gi = 0; gi < groups; gi++) {
            float v[32];
            qt_group_values<F>(W + ((size_t)(r / QT_ROWS) * n_sb + gi / 8) * F::BYTES, gi % 8, r % QT_ROWS, v);
            memcpy(deq + (size_t)r * cols + (size_t)gi * 32, v, sizeof v);
        }
    qt_xprep_host(xq, xd, x, T, cols);
    qt_gemv_host<F>(W, rows, cols, xq, xd, T, y1);
    qt_mma_host<F>(W, rows, cols, xq, xd, T, ym);
    free(W), free(xq), free(xd);
    return SEER_OK;
}

seer_status seer_cuda_qt_host_check(int dtype, const void *blocks, int rows, int cols, const float *x, int T,
                                    float *deq, float *y1, float *ym) {
    if (rows < 1 || T < 1 || cols < QT_COLS || cols % QT_COLS)
        return seer_err(SEER_ERR_UNSUPPORTED, "row blocks: %d x %d", rows, cols);
    switch (dtype) {
#define QT_CASE(TYPE) case TYPE: return qt_check<qt_fmt<TYPE>>((const uint8_t *)blocks, rows, cols, x, T, deq, y1, ym);
        QT_FORMATS(QT_CASE)
#undef QT_CASE
    default:
        return seer_err(SEER_ERR_UNSUPPORTED, "row blocks: no %s", seer_ggml_type_name((ggml_type)dtype));
    }
}
