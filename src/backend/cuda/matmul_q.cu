/*
 * matmul_q.cu: y [T][rows] = x [T][cols] * W^T with W in a GGUF block encoding (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; planes as qweights.cuh lays them out), f32 output.
 *
 * Up to SEER_CUDA_INVARIANT_MAX_T rows: a batch-invariant kernel in the shape of the bf16 one
 * (matmul.cu): 32 rows of W per block, 8 warps over slices of K, the same split over KB
 * blocks and the same fixed-order reduction (matmul.cuh), tokens as the mma's n dimension.
 * A K step is a quad of 128 columns; for each group of 32 a lane turns its codes into exact
 * bf16 integers (a mask and an OR give 128 + code, one packed subtraction the signed code),
 * the tensor cores sum code * x over the group (two m16n8k16 steps; Q6_K one per scale
 * half), and the group's f32 scale is applied to that sum (and the min to the group's sum of
 * x, from an mma against ones). So the weights enter exactly, x as bf16, every sum in f32,
 * in an order that depends on the element's row and column alone.
 *
 * Above it (prefill): rows of W are dequantised to bf16 a slice at a time into scratch and
 * multiplied by cuBLAS, as bf16 weights are.
 * Also: the rows of a quantised embedding table (embed.cu).
 * Weights in row blocks (the default for the types of qt_formats.cuh whose rows are whole
 * blocks of 256 columns, seer_cuda.qt) go to matmul_qt.cu instead.
 */
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/qweights.cuh"

#include <stdlib.h>
#include <string.h>

#include <type_traits>

#define MMQ_KSTEP 128 /* columns per K step: one quad */

/* ---- reading codes and scales ---------------------------------------------------------- */

static __device__ __forceinline__ uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
    __nv_bfloat162 r = __hsub2(*(const __nv_bfloat162 *)&a, *(const __nv_bfloat162 *)&b);
    return *(uint32_t *)&r;
}

/* 128 + k as bf16, for 0 <= k < 128 */
#define BF16_128 0x4300u

static __device__ __forceinline__ float half_lo(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xFFFF))); }
static __device__ __forceinline__ float half_hi(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }

static __device__ __forceinline__ uint32_t byte_of(uint4 v, int i) {
    const uint32_t w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;
    return (w >> (8 * (i & 3))) & 0xFF;
}

/* Q4_K / Q5_K sub-block j's 6-bit scale and min from the 12 packed bytes (ggml's
 * get_scale_min_k4), the header's words y, z, w. */
static __device__ __forceinline__ void k4_scale_min(uint4 h, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = (int)(byte_of(h, 4 + j) & 63);
        *m = (int)(byte_of(h, 8 + j) & 63);
    } else {
        *sc = (int)((byte_of(h, 8 + j) & 0xF) | ((byte_of(h, j) >> 6) << 4));
        *m = (int)((byte_of(h, 8 + j) >> 4) | ((byte_of(h, 4 + j) >> 6) << 4));
    }
}

template <int QT> struct qtraits {
    static constexpr int lo = QT == GGML_TYPE_Q8_0 ? 8 : 4;
    static constexpr int hi = (QT == GGML_TYPE_Q5_0 || QT == GGML_TYPE_Q5_1 || QT == GGML_TYPE_Q5_K) ? 1
                              : QT == GGML_TYPE_Q6_K                                                  ? 2
                                                                                                      : 0;
    static constexpr bool min = QT == GGML_TYPE_Q4_1 || QT == GGML_TYPE_Q5_1 || QT == GGML_TYPE_Q4_K ||
                                QT == GGML_TYPE_Q5_K;
    /* bf16 pair subtracted from (128 + code): 128 - the type's offset */
    static constexpr uint32_t sub = QT == GGML_TYPE_Q4_0   ? 0x43084308u  /* 136 */
                                    : QT == GGML_TYPE_Q5_0 ? 0x43104310u  /* 144 */
                                    : QT == GGML_TYPE_Q6_K ? 0x43204320u  /* 160 */
                                                           : 0x43004300u; /* 128 */
};

/* One row's share of a quad for this lane: its codes, high bits and scale words. */
template <int QT> struct qraw {
    uint4 lo[qtraits<QT>::lo / 4];
    uint32_t hi[2];
    uint4 sc;
    uint32_t d6;
};

template <int QT>
static __device__ __forceinline__ void q_load(qraw<QT> &r, const mm_w &w, int row, int s, int c4) {
    using tr = qtraits<QT>;
    if (row >= w.rows || s * MMQ_KSTEP >= w.cols) {
        memset(&r, 0, sizeof r);
        return;
    }
    const uint8_t *lo = w.p[0] + (size_t)row * w.stride[0] + (size_t)s * 16 * tr::lo + c4 * 4 * tr::lo;
#pragma unroll
    for (int i = 0; i < tr::lo / 4; i++)
        r.lo[i] = ld_stream16(lo + 16 * i);
    if constexpr (tr::hi == 1) {
        r.hi[0] = __ldg((const uint32_t *)(w.p[1] + (size_t)row * w.stride[1] + (size_t)s * 16 + c4 * 4));
    } else if constexpr (tr::hi == 2) {
        const uint2 h = __ldg((const uint2 *)(w.p[1] + (size_t)row * w.stride[1] + (size_t)s * 32 + c4 * 8));
        r.hi[0] = h.x;
        r.hi[1] = h.y;
    }
    const uint8_t *sc = w.p[2] + (size_t)row * w.stride[2];
    if constexpr (QT == GGML_TYPE_Q4_0 || QT == GGML_TYPE_Q5_0 || QT == GGML_TYPE_Q8_0) {
        const uint2 v = __ldg((const uint2 *)(sc + (size_t)s * 8));
        r.sc = make_uint4(v.x, v.y, 0, 0);
    } else if constexpr (QT == GGML_TYPE_Q4_1 || QT == GGML_TYPE_Q5_1) {
        r.sc = __ldg((const uint4 *)(sc + (size_t)s * 16));
    } else if constexpr (QT == GGML_TYPE_Q4_K || QT == GGML_TYPE_Q5_K) {
        r.sc = __ldg((const uint4 *)(sc + (size_t)(s >> 1) * 16));
    } else { /* Q6_K: this quad's 8 int8 scales, the super-block's d */
        const uint2 v = __ldg((const uint2 *)(sc + (size_t)s * 8));
        r.sc = make_uint4(v.x, v.y, 0, 0);
        r.d6 = __ldg((const unsigned short *)(w.p[3] + (size_t)row * w.stride[3] + (size_t)(s >> 1) * 2));
    }
}

/* The four code pairs (bf16x2 of the signed codes) of group j of a row; Q8_0: pairs of the
 * low nibbles in a[], of the signed high nibbles in a8[]. */
template <int QT>
static __device__ __forceinline__ void q_pairs(const qraw<QT> &r, int j, uint32_t (&a)[4], uint32_t (&a8)[4]) {
    using tr = qtraits<QT>;
    if constexpr (tr::lo == 8) {
        const uint4 v = r.lo[j >> 1];
        const uint32_t w0 = j & 1 ? v.z : v.x, w1 = j & 1 ? v.w : v.y;
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const uint32_t w = p < 2 ? w0 : w1;
            const int sh = 8 * (p & 1);
            a[p] = bf16x2_sub(((w >> sh) & 0x000F000Fu) | 0x43004300u, 0x43004300u);
            a8[p] = bf16x2_sub(((w >> (sh + 4)) & 0x000F000Fu) | 0x43004300u, 0x43084308u);
        }
    } else {
        const uint4 v = r.lo[0];
        const uint32_t u = j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
        uint32_t t = 0;
        if constexpr (tr::hi == 1) {
            const uint32_t h = (r.hi[0] >> (8 * j)) & 0xFF;
            t = h | (h << 12);
        } else if constexpr (tr::hi == 2) {
            const uint32_t h = (r.hi[j >> 1] >> (16 * (j & 1))) & 0xFFFF;
            t = (h & 0xFF) | ((h & 0xFF00) << 8);
        }
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t code = (u >> (4 * p)) & 0x000F000Fu;
            if constexpr (tr::hi == 1)
                code |= ((t >> p) & 0x00010001u) << 4;
            else if constexpr (tr::hi == 2)
                code |= ((t >> (2 * p)) & 0x00030003u) << 4;
            a[p] = bf16x2_sub(code | 0x43004300u, tr::sub);
        }
    }
}

/* Group j's scales: ds[h] multiplies the code sums of half h (the same for both halves except
 * Q6_K), mn the group's sum of x (0 without a min). The arithmetic is the CPU dequantiser's. */
template <int QT, int PAR = -1>
static __device__ __forceinline__ void q_scales(const qraw<QT> &r, int s, int j, float (&ds)[2], float &mn) {
    mn = 0.f;
    if constexpr (QT == GGML_TYPE_Q4_0 || QT == GGML_TYPE_Q5_0 || QT == GGML_TYPE_Q8_0) {
        const uint32_t w = j < 2 ? r.sc.x : r.sc.y;
        ds[0] = ds[1] = j & 1 ? half_hi(w) : half_lo(w);
    } else if constexpr (QT == GGML_TYPE_Q4_1 || QT == GGML_TYPE_Q5_1) {
        const uint32_t w = j == 0 ? r.sc.x : j == 1 ? r.sc.y : j == 2 ? r.sc.z : r.sc.w;
        ds[0] = ds[1] = half_lo(w);
        mn = half_hi(w);
    } else if constexpr (QT == GGML_TYPE_Q4_K || QT == GGML_TYPE_Q5_K) {
        int sc, m;
        /* PAR: the step's parity when the caller knows it at compile time, so the scale
         * bytes are picked by constant shifts rather than by selects */
        k4_scale_min(r.sc, (PAR < 0 ? s & 1 : PAR) * 4 + j, &sc, &m);
        ds[0] = ds[1] = half_lo(r.sc.x) * (float)sc;
        mn = -(half_hi(r.sc.x) * (float)m);
    } else {
        const float d = half_lo(r.d6);
        const uint32_t w = j < 2 ? r.sc.x : r.sc.y;
        ds[0] = d * (float)(int8_t)((w >> (16 * (j & 1))) & 0xFF);
        ds[1] = d * (float)(int8_t)((w >> (16 * (j & 1) + 8)) & 0xFF);
    }
}

/* Four f32 of token t of x from column col as two bf16 pairs (zeros outside). */
template <bool VEC>
static __device__ __forceinline__ uint2 x_pairs(const float *x, int T, int cols, int t, int col) {
    if (t >= T || col >= cols)
        return make_uint2(0, 0);
    const float *p = x + (size_t)t * cols + col;
    if constexpr (VEC) {
        const float4 a = __ldg((const float4 *)p);
        return make_uint2(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w));
    } else {
        return make_uint2(pack_bf16(__ldg(p), __ldg(p + 1)), pack_bf16(__ldg(p + 2), __ldg(p + 3)));
    }
}

/* ---- the batch-invariant kernel --------------------------------------------------------- */

template <int QT, int NT, bool VEC>
__global__ void __launch_bounds__(MM_WARPS * 32, NT <= 4 ? 2 : 1)
mmq_kernel(mm_out out, mm_w wd, const float *__restrict__ x, float *__restrict__ part,
           int *__restrict__ cnt, int T, int kb_n, int n_steps, int nz, int tile) {
    using tr = qtraits<QT>;
    const int rows = wd.rows, cols = wd.cols;
    const int lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
    const mm_pos ps = mm_position(kb_n, n_steps, nz, tile);
    const int row0 = ps.row0, tok0 = ps.tok0, s0 = ps.s0, s1 = ps.s1;

    float acc[2][NT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[m][n][e] = 0.f;

    /* rq[q]: row row0 + q*8 + g (q = 0, 1: m-tile 0; 2, 3: m-tile 1) */
    qraw<QT> ra[4], rb[4];
    auto load_step = [&](qraw<QT> (&rq)[4], int s) {
#pragma unroll
        for (int q = 0; q < 4; q++)
            q_load<QT>(rq[q], wd, row0 + q * 8 + g, s, c4);
    };
    auto compute_step = [&](const qraw<QT> (&rq)[4], int s, auto par) {
        constexpr int PAR = decltype(par)::value;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int col = s * MMQ_KSTEP + j * 32 + c4 * 4;
            uint2 xb[NT][2];
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int t = tok0 + n * 8 + g;
                xb[n][0] = x_pairs<VEC>(x, T, cols, t, col);
                xb[n][1] = x_pairs<VEC>(x, T, cols, t, col + 16);
            }
            [[maybe_unused]] float xs[NT][2]; /* x's group sums: types with a min */
            if constexpr (tr::min) {
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    float o[4] = {0.f, 0.f, 0.f, 0.f};
                    const uint32_t one = 0x3F803F80u;
                    mma_bf16(o, one, one, one, one, xb[n][0].x, xb[n][0].y);
                    mma_bf16(o, one, one, one, one, xb[n][1].x, xb[n][1].y);
                    xs[n][0] = o[0];
                    xs[n][1] = o[1];
                }
            }
#pragma unroll
            for (int m = 0; m < 2; m++) {
                uint32_t a0[4], a1[4], h0[4], h1[4];
                q_pairs<QT>(rq[2 * m], j, a0, h0);
                q_pairs<QT>(rq[2 * m + 1], j, a1, h1);
                float d0[2], d1[2], m0, m1;
                q_scales<QT, PAR>(rq[2 * m], s, j, d0, m0);
                q_scales<QT, PAR>(rq[2 * m + 1], s, j, d1, m1);
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    float *A = acc[m][n];
                    if constexpr (QT == GGML_TYPE_Q6_K) {
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            float o[4] = {0.f, 0.f, 0.f, 0.f};
                            mma_bf16(o, a0[2 * h], a1[2 * h], a0[2 * h + 1], a1[2 * h + 1], xb[n][h].x, xb[n][h].y);
                            A[0] += d0[h] * o[0];
                            A[1] += d0[h] * o[1];
                            A[2] += d1[h] * o[2];
                            A[3] += d1[h] * o[3];
                        }
                    } else {
                        float o[4] = {0.f, 0.f, 0.f, 0.f};
                        mma_bf16(o, a0[0], a1[0], a0[1], a1[1], xb[n][0].x, xb[n][0].y);
                        mma_bf16(o, a0[2], a1[2], a0[3], a1[3], xb[n][1].x, xb[n][1].y);
                        if constexpr (QT == GGML_TYPE_Q8_0) {
                            float oh[4] = {0.f, 0.f, 0.f, 0.f};
                            mma_bf16(oh, h0[0], h1[0], h0[1], h1[1], xb[n][0].x, xb[n][0].y);
                            mma_bf16(oh, h0[2], h1[2], h0[3], h1[3], xb[n][1].x, xb[n][1].y);
#pragma unroll
                            for (int e = 0; e < 4; e++)
                                o[e] += 16.f * oh[e];
                        }
                        A[0] += d0[0] * o[0];
                        A[1] += d0[0] * o[1];
                        A[2] += d1[0] * o[2];
                        A[3] += d1[0] * o[3];
                        if constexpr (tr::min) {
                            A[0] += m0 * xs[n][0];
                            A[1] += m0 * xs[n][1];
                            A[2] += m1 * xs[n][0];
                            A[3] += m1 * xs[n][1];
                        }
                    }
                }
            }
        }
    };
    /* As in matmul.cu: the next kernel may start, the first two steps' weights go in flight
     * before waiting for the kernel that writes x. */
    pdl_trigger();
    if (s0 < s1)
        load_step(ra, s0);
    if (s0 + 1 < s1)
        load_step(rb, s0 + 1);
    pdl_wait();
    /* ra holds the steps of s0's parity, rb the others: one loop per parity of s0 */
    auto steps = [&](auto p0) {
        constexpr int P0 = decltype(p0)::value;
        for (int s = s0; s < s1; s += 2) {
            compute_step(ra, s, std::integral_constant<int, P0>());
            if (s + 2 < s1)
                load_step(ra, s + 2);
            if (s + 1 < s1) {
                compute_step(rb, s + 1, std::integral_constant<int, 1 - P0>());
                if (s + 3 < s1)
                    load_step(rb, s + 3);
            }
        }
    };
    if constexpr (QT == GGML_TYPE_Q4_K || QT == GGML_TYPE_Q5_K) { /* scales picked by parity */
        if (s0 & 1)
            steps(std::integral_constant<int, 1>());
        else
            steps(std::integral_constant<int, 0>());
    } else {
        steps(std::integral_constant<int, 0>());
    }
    mm_finish<NT>(acc, out, part, cnt, rows, T, ps.kb, kb_n, ps.rg, ps.z, nz, tok0, row0);
}

template <int QT, bool VEC>
static mm_kernel_fn mmq_pick_nt(int nt) {
    switch (nt) {
    case 1: return mmq_kernel<QT, 1, VEC>;
    case 2: return mmq_kernel<QT, 2, VEC>;
    case 3: return mmq_kernel<QT, 3, VEC>;
    case 4: return mmq_kernel<QT, 4, VEC>;
    case 5: return mmq_kernel<QT, 5, VEC>;
    case 6: return mmq_kernel<QT, 6, VEC>;
    case 7: return mmq_kernel<QT, 7, VEC>;
    default: return mmq_kernel<QT, 8, VEC>;
    }
}

/* x is read as float4: callers' activation rows are 16-byte aligned (matmul_any sends
 * others to the cuBLAS route), so there is no scalar variant to compile. */
template <int QT>
static mm_kernel_fn mmq_pick(int nt, bool vec) {
    return mmq_pick_nt<QT, true>(nt);
}

static mm_kernel_fn (*mmq_picker(int type))(int, bool) {
    switch (type) {
    case GGML_TYPE_Q4_0: return mmq_pick<GGML_TYPE_Q4_0>;
    case GGML_TYPE_Q4_1: return mmq_pick<GGML_TYPE_Q4_1>;
    case GGML_TYPE_Q5_0: return mmq_pick<GGML_TYPE_Q5_0>;
    case GGML_TYPE_Q5_1: return mmq_pick<GGML_TYPE_Q5_1>;
    case GGML_TYPE_Q8_0: return mmq_pick<GGML_TYPE_Q8_0>;
    case GGML_TYPE_Q4_K: return mmq_pick<GGML_TYPE_Q4_K>;
    case GGML_TYPE_Q5_K: return mmq_pick<GGML_TYPE_Q5_K>;
    case GGML_TYPE_Q6_K: return mmq_pick<GGML_TYPE_Q6_K>;
    default: return NULL;
    }
}

mm_w seer_cuda_qweight_planes(const seer_weight *w) {
    seer_qlayout L;
    mm_w wd = {};
    seer_qlayout_of(w->dtype, w->rows, w->cols, &L);
    for (int i = 0; i < 4; i++) {
        wd.p[i] = (const uint8_t *)w->data + L.off[i];
        wd.stride[i] = L.stride[i];
    }
    wd.rows = w->rows;
    wd.cols = w->cols;
    wd.type = w->dtype;
    return wd;
}

seer_status seer_cuda_matmul_q_invariant(seer_cuda *c, const mm_out &out, const float *x,
                                         const seer_weight *w, int T) {
    mm_kernel_fn (*pick)(int, bool) = mmq_picker(w->dtype);
    if (!pick)
        return seer_err(SEER_ERR_UNSUPPORTED, "matmul: no CUDA kernel for weights of type %s",
                        seer_ggml_type_name((ggml_type)w->dtype));
    if ((uintptr_t)x % 16)
        return seer_err(SEER_ERR_INTERNAL, "matmul: activations not 16-byte aligned");
    if (seer_cuda_qt_of(c, w->dtype, w->cols))
        return seer_cuda_qt_matmul(c, out, x, w, T);
    const mm_w wd = seer_cuda_qweight_planes(w);
    seer_qlayout L;
    seer_qlayout_of(w->dtype, w->rows, w->cols, &L);
    return seer_cuda_mm_launch(c, out, wd, x, T, L.n_quad, pick, true, c->mm_tile);
}

/* ---- dequantisation (prefill, embedding rows) ----------------------------------------- */

/* The eight values of lane c4's slot of group j of a loaded quad (step s): columns
 * 4c4..4c4+3 and 16+4c4..16+4c4+3 of the group, in f32 as the CPU's dequantisers compute
 * them. */
template <int QT>
static __device__ __forceinline__ void q_slot_values(const qraw<QT> &r, int s, int j, float (&v)[8]) {
    using tr = qtraits<QT>;
    uint32_t a[4], a8[4];
    q_pairs<QT>(r, j, a, a8);
    float ds[2], mn;
    q_scales<QT>(r, s, j, ds, mn);
#pragma unroll
    for (int p = 0; p < 4; p++) {
        const __nv_bfloat162 b = *(const __nv_bfloat162 *)&a[p];
        float q0 = __low2float(b), q1 = __high2float(b);
        if constexpr (tr::lo == 8) {
            const __nv_bfloat162 h = *(const __nv_bfloat162 *)&a8[p];
            q0 += 16.f * __low2float(h);
            q1 += 16.f * __high2float(h);
        }
        const float d = ds[p >> 1];
        if constexpr (tr::min) {
            v[2 * p] = d * q0 + mn;
            v[2 * p + 1] = d * q1 + mn;
        } else {
            v[2 * p] = q0 * d;
            v[2 * p + 1] = q1 * d;
        }
    }
}

/* Four values to o[0..3]: one 8-byte (bf16) or 16-byte (f32) store where o is aligned. */
static __device__ __forceinline__ void store4(bf16 *o, const float *v, bool vec) {
    if (vec) {
        *(uint2 *)o = make_uint2(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]));
        return;
    }
    for (int k = 0; k < 4; k++)
        o[k] = __float2bfloat16_rn(v[k]);
}

static __device__ __forceinline__ void store4(float *o, const float *v, bool vec) {
    if (vec) {
        *(float4 *)o = make_float4(v[0], v[1], v[2], v[3]);
        return;
    }
    for (int k = 0; k < 4; k++)
        o[k] = v[k];
}

/* out [n_rows][cols] (bf16 or f32) = rows row0.. of W (or rows row_ids[]); one thread per
 * (row, quad, lane): one load of the lane's codes serves the quad's four groups. vec: out
 * is 16-byte aligned (every store is then aligned, as cols is a multiple of 32). */
template <int QT, typename OUT>
__global__ void q_dequant_kernel(OUT *out, mm_w w, const int32_t *row_ids, int row0, int n_rows, bool vec) {
    const int n_groups = w.cols / 32, n_quads = (n_groups + 3) / 4;
    const long long total = (long long)n_rows * n_quads * 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int c4 = (int)(i & 3);
        const long long rq = i >> 2;
        const int s = (int)(rq % n_quads), rr = (int)(rq / n_quads);
        const int row = row_ids ? row_ids[rr] : row0 + rr;
        OUT *o = out + (size_t)rr * w.cols + (size_t)s * MMQ_KSTEP + 4 * c4;
        const bool bad = row < 0 || row >= w.rows;
        qraw<QT> r;
        if (!bad)
            q_load<QT>(r, w, row, s, c4);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (s * 4 + j >= n_groups)
                break;
            float v[8];
            if (bad) {
#pragma unroll
                for (int k = 0; k < 8; k++)
                    v[k] = __int_as_float(0x7fc00000);
            } else {
                q_slot_values<QT>(r, s, j, v);
            }
            store4(o + j * 32, v, vec);
            store4(o + j * 32 + 16, v + 4, vec);
        }
    }
}

template <typename OUT>
static seer_status q_dequant(seer_cuda *c, OUT *out, const seer_weight *w, const int32_t *row_ids,
                             int row0, int n_rows) {
    const mm_w wd = seer_cuda_qweight_planes(w);
    const size_t n = (size_t)n_rows * ((w->cols / 32 + 3) / 4) * 4;
    const unsigned grid = seer_cuda_grid(n, 256);
    const bool vec = (uintptr_t)out % 16 == 0;
    switch (w->dtype) {
#define CASE(T)                                                                               \
    case T:                                                                                   \
        q_dequant_kernel<T, OUT><<<grid, 256, 0, c->stream>>>(out, wd, row_ids, row0, n_rows, vec); \
        break;
        CASE(GGML_TYPE_Q4_0) CASE(GGML_TYPE_Q4_1) CASE(GGML_TYPE_Q5_0) CASE(GGML_TYPE_Q5_1)
        CASE(GGML_TYPE_Q8_0) CASE(GGML_TYPE_Q4_K) CASE(GGML_TYPE_Q5_K) CASE(GGML_TYPE_Q6_K)
#undef CASE
    default:
        return seer_err(SEER_ERR_UNSUPPORTED, "no CUDA dequantiser for type %s",
                        seer_ggml_type_name((ggml_type)w->dtype));
    }
    LAUNCH_TRY("q_dequant_kernel");
    return SEER_OK;
}

seer_status seer_cuda_q_rows_bf16(seer_cuda *c, bf16 *out, const seer_weight *w, int row0, int n_rows) {
    if (seer_cuda_qt_of(c, w->dtype, w->cols))
        return seer_cuda_qt_rows_bf16(c, out, w, row0, n_rows);
    return q_dequant<bf16>(c, out, w, NULL, row0, n_rows);
}

seer_status seer_cuda_q_gather_f32(seer_cuda *c, float *out, const seer_weight *w, const int32_t *rows,
                                   int n_rows) {
    if (seer_cuda_qt_of(c, w->dtype, w->cols))
        return seer_cuda_qt_gather_f32(c, out, w, rows, n_rows);
    return q_dequant<float>(c, out, w, rows, 0, n_rows);
}
