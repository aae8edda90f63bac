/*
 * matmul_qt.cuh: what a lane of matmul_qt.cu's kernels does with a K step of row blocks,
 * written once for every type of qt_formats.cuh and for host and device alike (the kernels
 * run it on the GPU, matmul_qt_check.cu on the host): the loads of a row's step (the GEMV, a
 * lane per row) or of a slot of four rows (the tensor-core kernel, lane (g, c)), a group's
 * int8 words and scales from them, the GEMV's step, and a group's 32 values as the CPU
 * dequantises them.
 * Not for: the kernels, their launch and the split over K (matmul_qt.cu).
 */
#ifndef SEER_CUDA_MATMUL_QT_CUH
#define SEER_CUDA_MATMUL_QT_CUH

#include "backend/cuda/matmul.cuh"
#include "backend/cuda/qt_formats.cuh"

/* N bytes at p (N = 1, 2, 4, 8, 16 or 32, p aligned to N) to the words w (the last one
 * zero-extended); STREAM: bytes read once (past L1). */
template <int N, bool STREAM = false> QT_HD void qt_ld(uint32_t *w, const uint8_t *p) {
#ifdef __CUDA_ARCH__
    if constexpr (N == 1) {
        w[0] = __ldg(p);
    } else if constexpr (N == 2) {
        w[0] = __ldg((const unsigned short *)p);
    } else if constexpr (N == 4) {
        w[0] = __ldg((const uint32_t *)p);
    } else if constexpr (N == 8) {
        const uint2 v = __ldg((const uint2 *)p);
        w[0] = v.x;
        w[1] = v.y;
    } else {
        static_assert(N == 16 || N == 32, "qt_ld: 1, 2, 4, 8, 16 or 32 bytes");
QT_UNROLL
        for (int k = 0; k < N / 16; k++) {
            const uint4 v = STREAM ? ld_stream16(p + 16 * k) : __ldg((const uint4 *)(p + 16 * k));
            w[4 * k] = v.x;
            w[4 * k + 1] = v.y;
            w[4 * k + 2] = v.z;
            w[4 * k + 3] = v.w;
        }
    }
#else
    w[(N - 1) / 4] = 0;
    memcpy(w, p, N);
#endif
}

template <typename V> QT_HD V qt_ldv(const V *p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

/* ---- the GEMV: one row's K step -------------------------------------------------------- */

template <class F> struct qt_row {
    uint32_t lo[4][F::LO / 4];               /* the step's 4 groups' codes */
    uint32_t hi[4][F::HI ? F::HI / 4 : 1];   /* their high bits */
    uint32_t sc[F::SC / 4];                  /* the step's scale bytes */
    uint32_t sb[F::SB ? (F::SB + 3) / 4 : 1]; /* the block's */
};

/* Row rr's half h (a K step) of block blk. */
template <class F> QT_HD void qt_load_row(qt_row<F> &r, const uint8_t *blk, int h, int rr) {
QT_UNROLL
    for (int j = 0; j < 4; j++) {
        qt_ld<F::LO, true>(r.lo[j], blk + F::lo_at(4 * h + j, rr));
        if constexpr (F::HI > 0)
            qt_ld<F::HI>(r.hi[j], blk + F::hi_at(4 * h + j, rr));
        else
            r.hi[j][0] = 0;
    }
    qt_ld<F::SC>(r.sc, blk + F::sc_at(h, rr));
    if constexpr (F::SB > 0)
        qt_ld<F::SB>(r.sb, blk + F::sb_at(rr));
    else
        r.sb[0] = 0;
}

/* acc[t] += row . token t over the step's groups (step s of the row, tokens t < T of x in 8
 * bits: xq [T][cols], xd [T][cols / 32] = (dx, sum of q)). Per group the integer sums are
 * exact (dp4a from QT_ISUM0; two, over e and o words, where the type has two scales a group),
 * then the type's chain. */
template <class F, int NTOK>
QT_HD void qt_step(const qt_row<F> &r, int s, float (&acc)[NTOK], const int8_t *__restrict__ xq,
                   const float2 *__restrict__ xd, int T, int cols) {
    const int groups = cols / 32;
QT_UNROLL
    for (int j = 0; j < 4; j++) {
        const int gi = s * 4 + j;
        const typename F::gs sc = F::group(r.sc, r.sb, j);
        uint32_t e[4], o[4];
QT_UNROLL
        for (int c = 0; c < 4; c++)
            F::codes_t::words(r.lo[j] + c * F::LW, F::codes_t::hi_of(r.hi[j], c), e[c], o[c]);
QT_UNROLL
        for (int t = 0; t < NTOK; t++) {
            if (t >= T)
                break;
            uint32_t xw[8];
            qt_ld<32>(xw, (const uint8_t *)(xq + (size_t)t * cols + (size_t)gi * 32));
            int i0 = QT_ISUM0, i1 = QT_ISUM0;
QT_UNROLL
            for (int c = 0; c < 4; c++) {
                i0 = qt_dp4a(e[c], xw[2 * c], i0);
                if constexpr (F::SPLIT)
                    i1 = qt_dp4a(o[c], xw[2 * c + 1], i1);
                else
                    i0 = qt_dp4a(o[c], xw[2 * c + 1], i0);
            }
            const float2 dx = qt_ldv(xd + (size_t)t * groups + gi);
            acc[t] = F::chain(sc, qt_isum(i0), F::SPLIT ? qt_isum(i1) : 0.f, dx, acc[t]);
        }
    }
}

/* ---- the tensor-core kernel: lane (g, c)'s slot of rows g + 8q ------------------------------ */

template <class F> struct qt_lane {
    uint32_t lo[4][4][F::LW];                 /* [group][q]: slot c's code words */
    uint32_t hi[4][4];                        /* [group][q]: slot c's high bits */
    uint32_t sc[4][F::SC / 4];                /* [q] */
    uint32_t sb[4][F::SB ? (F::SB + 3) / 4 : 1];
};

template <class F> QT_HD void qt_load_lane(qt_lane<F> &r, const uint8_t *blk, int h, int g, int c) {
QT_UNROLL
    for (int j = 0; j < 4; j++)
QT_UNROLL
        for (int q = 0; q < 4; q++) {
            const int rr = g + 8 * q;
            qt_ld<F::LO / 4>(r.lo[j][q], blk + F::lo_at(4 * h + j, rr) + c * (F::LO / 4));
            if constexpr (F::HI > 0)
                qt_ld<F::HI / 4>(&r.hi[j][q], blk + F::hi_at(4 * h + j, rr) + c * (F::HI / 4));
            else
                r.hi[j][q] = 0;
        }
QT_UNROLL
    for (int q = 0; q < 4; q++) {
        qt_ld<F::SC>(r.sc[q], blk + F::sc_at(h, g + 8 * q));
        if constexpr (F::SB > 0)
            qt_ld<F::SB>(r.sb[q], blk + F::sb_at(g + 8 * q));
        else
            r.sb[q][0] = 0;
    }
}

/* Group j of the step for the lane's rows g + 8q: the words e[q], o[q] (the A fragments:
 * rows g, g + 8 of m tile m are q = 2m, 2m + 1) and the scales. */
template <class F>
QT_HD void qt_lane_group(const qt_lane<F> &r, int j, uint32_t (&e)[4], uint32_t (&o)[4], typename F::gs (&s)[4]) {
QT_UNROLL
    for (int q = 0; q < 4; q++) {
        F::codes_t::words(r.lo[j][q], r.hi[j][q], e[q], o[q]);
        s[q] = F::group(r.sc[q], r.sb[q], j);
    }
}

/* ---- dequantisation -------------------------------------------------------------------------- */

/* v [32] = the values of group j (0..7) of row rr of block blk, as the CPU dequantises them. */
template <class F> QT_HD void qt_group_values(const uint8_t *blk, int j, int rr, float (&v)[32]) {
    uint32_t lo[F::LO / 4], hi[F::HI ? F::HI / 4 : 1], sc[F::SC / 4], sb[F::SB ? (F::SB + 3) / 4 : 1];
    qt_ld<F::LO>(lo, blk + F::lo_at(j, rr));
    hi[0] = 0;
    if constexpr (F::HI > 0)
        qt_ld<F::HI>(hi, blk + F::hi_at(j, rr));
    qt_ld<F::SC>(sc, blk + F::sc_at(j >> 2, rr));
    sb[0] = 0;
    if constexpr (F::SB > 0)
        qt_ld<F::SB>(sb, blk + F::sb_at(rr));
QT_UNROLL
    for (int c = 0; c < 4; c++) {
        uint32_t e, o;
        F::codes_t::words(lo + c * F::LW, F::codes_t::hi_of(hi, c), e, o);
QT_UNROLL
        for (int i = 0; i < 4; i++) {
            v[4 * c + i] = F::value(sc, sb, j & 3, 4 * c + i, (int8_t)(e >> (8 * i)));
            v[16 + 4 * c + i] = F::value(sc, sb, j & 3, 16 + 4 * c + i, (int8_t)(o >> (8 * i)));
        }
    }
}

#endif
