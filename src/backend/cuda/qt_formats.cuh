/*
 * qt_formats.cuh: the quantised types that matmul_qt.cu keeps in row blocks, one description
 * per type, and what the descriptions share: where a block's bytes lie, how a group's codes
 * are packed and become int8 words in x's byte order, and small helpers that run on the host
 * as on the device (matmul_qt_check.cu runs the same code on the host).
 *
 * A row block is 32 rows x 256 columns (8 groups of 32 columns) in four sections, each
 * [unit][row 0..31][bytes]:
 *   codes  [group 0..7][row][LO]   a group's 32 codes in 4 slots of LO / 4 bytes;
 *   high   [group 0..7][row][HI]   the codes' bits above the fourth (Q5_*, Q6_K), per slot;
 *   scales [half 0..1][row][SC]    the scale bytes of the half's 4 groups (a K step);
 *   block  [row][SB]               the super-block's own (Q4_K, Q5_K: d and dmin; Q6_K: d).
 * Slot c (0..3) of a group holds columns 4c..4c+3 and 16+4c..16+4c+3. It becomes two int8
 * words, e (byte i: column 4c + i) and o (byte i: column 16 + 4c + i): words 2c and 2c + 1 of
 * x's 32 bytes for the group (matmul_qt.cu rounds x to that order), so word k of a row pairs
 * with word k of x in a dp4a, and (e, o) of rows g and g + 8 are lane (g, c)'s A fragment of
 * an mma.m16n8k32 (two m16n8k16 for e and o apart, where a group has two scales).
 *
 * How codes are kept (qt_codes, by LO and HI):
 *   8 bits (Q8_0): the signed codes as they are, in x's byte order (8 bytes a slot);
 *   4 bits: one word a slot, byte i = column 4c+i in the low nibble, 16+4c+i in the high one;
 *   5 bits: those nibbles, and a byte a slot: bit i the fifth bit of e's byte i, bit 4+i of o's;
 *   6 bits (Q6_K): the nibbles, and 16 bits a slot: nibble n_i = e's byte i's two high bits |
 *     o's << 2, stored in the order n0 n2 n1 n3 so that (h | h << 12) & 0x0F0F0F0F puts n_i
 *     in byte i; the codes are made signed (q - 32) by (w + 0x60606060) ^ 0x80808080.
 * Every value of the file is kept: codes, d, dmin, the 6-bit (K4) or 8-bit (Q6_K) scales
 * (unpacked to bytes), as f16 / integers as stored. Bytes per block and bits per weight read:
 *   Q4_K 4736 (4.625; file 4.5)   Q5_K 5760 (5.625; file 5.5)   Q6_K 6720 (6.5625, the file's)
 *   Q8_0 8704 (8.5)   Q4_0 4608 (4.5)   Q4_1 5120 (5.0)   Q5_0 5632 (5.5)   Q5_1 6144 (6.0)
 * (the 32-column types as in the file).
 *
 * A type's description (qt_fmt<TYPE>): its section sizes (qt_layout), the GGUF bytes of 256
 * columns of a row, the 32 codes of group j of those (codes), its scale and block bytes
 * (scales, block), the group's scales as the kernels use them (group, from the K step's scale
 * words and the block's), the f32 chain that adds a group's exact integer sum(s) to a row's
 * total (chain; the same function in every kernel, so a row's bits do not depend on which
 * kernel ran), and the CPU's value of one code (value, for the dequantiser).
 * Adding a type: its description here and its name in QT_FORMATS.
 * Not for: the kernels (matmul_qt.cu) or the planes of the other types (qweights.cuh).
 */
#ifndef SEER_CUDA_QT_FORMATS_CUH
#define SEER_CUDA_QT_FORMATS_CUH

#include "backend/cuda/cuda_common.cuh"

#include <cuda_fp16.h>
#include <string.h>

#define QT_ROWS 32  /* rows of a block */
#define QT_COLS 256 /* columns of a block */
#define QT_STEP 128 /* columns of a K step: half a block, 4 groups */

#define QT_HD static __host__ __device__ __forceinline__
/* loops unrolled on the device (the host compiler knows no such pragma) */
#ifdef __CUDA_ARCH__
#define QT_UNROLL _Pragma("unroll")
#else
#define QT_UNROLL
#endif

/* The types in row blocks (registering one: its description below and its name here). */
#define QT_FORMATS(X)                                                                          \
    X(GGML_TYPE_Q4_K) X(GGML_TYPE_Q5_K) X(GGML_TYPE_Q6_K) X(GGML_TYPE_Q8_0) X(GGML_TYPE_Q4_0) \
    X(GGML_TYPE_Q4_1) X(GGML_TYPE_Q5_0) X(GGML_TYPE_Q5_1)

/* ---- helpers for host and device ------------------------------------------------------ */

QT_HD float qt_f16(uint32_t bits) {
    __half_raw r;
    r.x = (unsigned short)(bits & 0xFFFF);
    return __half2float(__half(r));
}

QT_HD float qt_as_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* byte j of w as the float 2^23 + byte */
QT_HD float qt_byte_f(uint32_t w, int j) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | j));
#else
    return qt_as_float(0x4B000000u | ((w >> (8 * j)) & 0xFF));
#endif
}

/* c + the four signed byte products of a and b */
QT_HD int qt_dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a((int)a, (int)b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}

/* An integer sum started from 0x4B400000 (2^23 + 2^22 read as a float) as a float: exact for
 * |sum| < 2^22. */
QT_HD float qt_isum(int is) { return qt_as_float((uint32_t)is) - 12582912.f; }
#define QT_ISUM0 0x4B400000

/* Products and sums rounded one at a time (the CPU dequantisers' arithmetic). */
QT_HD float qt_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

QT_HD float qt_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

QT_HD uint32_t qt_rd16(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8; }
QT_HD uint32_t qt_rd32(const uint8_t *p) { return qt_rd16(p) | qt_rd16(p + 2) << 16; }

/* ---- codes ------------------------------------------------------------------------------ */

/* How a group's 32 codes q[] (column order, as the type's descriptor gives them) are packed
 * into a row's LO code bytes and HI high bytes (pack), where slot c's high bits are among a
 * row's high words (hi_of), and how a slot (its LO / 16 code words and high bits) becomes the
 * int8 words e, o (words). */
template <int LO, int HI> struct qt_codes;

template <> struct qt_codes<32, 0> { /* 8 bits, signed, in x's byte order */
    QT_HD void pack(const uint8_t (&q)[32], uint8_t *lo, uint8_t *hi) {
        for (int c = 0; c < 4; c++)
            for (int i = 0; i < 4; i++) {
                lo[8 * c + i] = q[4 * c + i];
                lo[8 * c + 4 + i] = q[16 + 4 * c + i];
            }
    }
    QT_HD uint32_t hi_of(const uint32_t *hi, int c) { return 0; }
    QT_HD void words(const uint32_t *lw, uint32_t h, uint32_t &e, uint32_t &o) {
        e = lw[0];
        o = lw[1];
    }
};

/* the low nibbles of a slot: byte i = column 4c + i | column 16 + 4c + i << 4 */
QT_HD void qt_pack_nibbles(const uint8_t (&q)[32], uint8_t *lo) {
    for (int c = 0; c < 4; c++)
        for (int i = 0; i < 4; i++)
            lo[4 * c + i] = (uint8_t)((q[4 * c + i] & 15) | (q[16 + 4 * c + i] & 15) << 4);
}

template <> struct qt_codes<16, 0> { /* 4 bits */
    QT_HD void pack(const uint8_t (&q)[32], uint8_t *lo, uint8_t *hi) { qt_pack_nibbles(q, lo); }
    QT_HD uint32_t hi_of(const uint32_t *hi, int c) { return 0; }
    QT_HD void words(const uint32_t *lw, uint32_t h, uint32_t &e, uint32_t &o) {
        e = lw[0] & 0x0F0F0F0Fu;
        o = (lw[0] >> 4) & 0x0F0F0F0Fu;
    }
};

template <> struct qt_codes<16, 4> { /* 5 bits */
    QT_HD void pack(const uint8_t (&q)[32], uint8_t *lo, uint8_t *hi) {
        qt_pack_nibbles(q, lo);
        for (int c = 0; c < 4; c++) {
            uint32_t h = 0;
            for (int i = 0; i < 4; i++)
                h |= ((q[4 * c + i] >> 4) & 1u) << i | ((q[16 + 4 * c + i] >> 4) & 1u) << (4 + i);
            hi[c] = (uint8_t)h;
        }
    }
    QT_HD uint32_t hi_of(const uint32_t *hi, int c) { return (hi[0] >> (8 * c)) & 0xFF; }
    /* bit i of h & 15 to bit 8i + 4 (four copies of h, 7 bits apart, never overlap); the
     * same for bits 4..7 */
    QT_HD void words(const uint32_t *lw, uint32_t h, uint32_t &e, uint32_t &o) {
        e = (lw[0] & 0x0F0F0F0Fu) | (((h & 0x0Fu) * 0x02040810u) & 0x10101010u);
        o = ((lw[0] >> 4) & 0x0F0F0F0Fu) | (((h & 0xF0u) * 0x00204081u) & 0x10101010u);
    }
};

template <> struct qt_codes<16, 8> { /* 6 bits, made signed: q - 32 */
    QT_HD void pack(const uint8_t (&q)[32], uint8_t *lo, uint8_t *hi) {
        qt_pack_nibbles(q, lo);
        for (int c = 0; c < 4; c++) {
            uint32_t n[4];
            for (int i = 0; i < 4; i++)
                n[i] = ((q[4 * c + i] >> 4) & 3u) | ((q[16 + 4 * c + i] >> 4) & 3u) << 2;
            const uint32_t h = n[0] | n[2] << 4 | n[1] << 8 | n[3] << 12;
            hi[2 * c] = (uint8_t)h;
            hi[2 * c + 1] = (uint8_t)(h >> 8);
        }
    }
    QT_HD uint32_t hi_of(const uint32_t *hi, int c) { return (hi[c >> 1] >> (16 * (c & 1))) & 0xFFFF; }
    QT_HD void words(const uint32_t *lw, uint32_t h, uint32_t &e, uint32_t &o) {
        const uint32_t t = (h | h << 12) & 0x0F0F0F0Fu; /* byte i: n_i */
        const uint32_t ue = (lw[0] & 0x0F0F0F0Fu) | ((t << 4) & 0x30303030u);
        const uint32_t uo = ((lw[0] >> 4) & 0x0F0F0F0Fu) | ((t << 2) & 0x30303030u);
        /* per byte q + 96 (no carry), then the top bit flipped: q - 32 as a signed byte */
        e = (ue + 0x60606060u) ^ 0x80808080u;
        o = (uo + 0x60606060u) ^ 0x80808080u;
    }
};

/* ---- where a block's bytes lie -------------------------------------------------------------- */

template <int LO_, int HI_, int SC_, int SB_> struct qt_layout {
    static constexpr int LO = LO_, HI = HI_, SC = SC_, SB = SB_;
    static constexpr int LW = LO / 16; /* code words of a slot */
    static constexpr int HI_OFF = 256 * LO, SC_OFF = 256 * (LO + HI), SB_OFF = SC_OFF + 64 * SC;
    static constexpr int BYTES = SB_OFF + 32 * SB;
    typedef qt_codes<LO, HI> codes_t;
    QT_HD int lo_at(int j, int r) { return (j * QT_ROWS + r) * LO; }
    QT_HD int hi_at(int j, int r) { return HI_OFF + (j * QT_ROWS + r) * HI; }
    QT_HD int sc_at(int h, int r) { return SC_OFF + (h * QT_ROWS + r) * SC; }
    QT_HD int sb_at(int r) { return SB_OFF + r * SB; }
};

/* ---- the types ------------------------------------------------------------------------------- */

template <int TYPE> struct qt_fmt; /* no description: not in row blocks */

/* f16 d of 32-column block k (of blocks of bb bytes, d first) to sc[2k], sc[2k + 1] */
QT_HD void qt_d16_scales(const uint8_t *b, int bb, int h, uint8_t *sc) {
    for (int k = 0; k < 4; k++) {
        sc[2 * k] = b[(4 * h + k) * bb];
        sc[2 * k + 1] = b[(4 * h + k) * bb + 1];
    }
}

/* f16 d of group j of a step from its scale words (two per word) */
QT_HD float qt_d16(const uint32_t *sc, int j) { return qt_f16(sc[j >> 1] >> (16 * (j & 1))); }

/* ggml's get_scale_min_k4: sub-block j's 6-bit scale and min from the 12 packed bytes q */
QT_HD void qt_k4_sm(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K and Q5_K: scale bytes [sc of the half's 4 groups][m of them], block bytes d, dmin;
 * value d sc q - dmin m, with d sc and dmin m exact in f32 (an f16 times a 6-bit integer):
 *   acc = fma(dx, fma(d sc, isum, -(dmin m) sum q_x), acc) */
struct qt_k4 {
    static constexpr bool SPLIT = false;
    QT_HD void scales(const uint8_t *b, int h, uint8_t *sc) {
        for (int k = 0; k < 4; k++) {
            int s, m;
            qt_k4_sm(4 * h + k, b + 4, &s, &m);
            sc[k] = (uint8_t)s;
            sc[4 + k] = (uint8_t)m;
        }
    }
    QT_HD void block(const uint8_t *b, uint8_t *sb) {
        for (int k = 0; k < 4; k++)
            sb[k] = b[k];
    }
    struct gs {
        float ds, dm;
    };
    /* d * sc as fma(d, 2^23 + sc, -d 2^23): exact, without a conversion */
    QT_HD gs group(const uint32_t *sc, const uint32_t *sb, int j) {
        const float d = qt_f16(sb[0]), dmin = qt_f16(sb[0] >> 16);
        return {fmaf(d, qt_byte_f(sc[0], j), d * -8388608.f), fmaf(dmin, qt_byte_f(sc[1], j), dmin * -8388608.f)};
    }
    QT_HD float chain(const gs &s, float v0, float v1, float2 x, float acc) {
        return fmaf(x.x, fmaf(s.ds, v0, -(s.dm * x.y)), acc);
    }
    QT_HD float value(const uint32_t *sc, const uint32_t *sb, int j, int e, int q) {
        const gs s = group(sc, sb, j);
        return qt_add(qt_mul(s.ds, (float)q), -s.dm);
    }
};

/* Group j's 32 codes of Q4_K and Q5_K: nibbles of the 32 bytes at QS + 32 (j / 2) (low ones
 * for even j, high for odd) and, with FIFTH, bit j of the 32 bytes at 16 (Q5_K's qh). */
template <int QS, bool FIFTH> QT_HD void qt_codes_k4(const uint8_t *b, int j, uint8_t (&q)[32]) {
    const uint8_t *ql = b + QS + 32 * (j >> 1), *qh = b + 16;
    for (int e = 0; e < 32; e++)
        q[e] = (uint8_t)(((ql[e] >> (4 * (j & 1))) & 15) | (FIFTH ? ((qh[e] >> j) & 1) << 4 : 0));
}

template <> struct qt_fmt<GGML_TYPE_Q4_K> : qt_layout<16, 0, 8, 4>, qt_k4 {
    static constexpr int GGUF = 144;
    QT_HD void codes(const uint8_t *b, int j, uint8_t (&q)[32]) { qt_codes_k4<16, false>(b, j, q); }
};

template <> struct qt_fmt<GGML_TYPE_Q5_K> : qt_layout<16, 4, 8, 4>, qt_k4 {
    static constexpr int GGUF = 176;
    QT_HD void codes(const uint8_t *b, int j, uint8_t (&q)[32]) { qt_codes_k4<48, true>(b, j, q); }
};

/* Q6_K: value d sc (q - 32), sc an int8 per 16 columns: scale bytes the half's 8 sub-scales
 * (group j's: 2j for columns 0..15, the e words; 2j + 1 for 16..31, the o words), block bytes
 * d. The codes enter signed, each half's integer sum apart; d sc is exact in f32:
 *   acc = fma(dx, fma(d sc0, isum0, (d sc1) isum1), acc) */
template <> struct qt_fmt<GGML_TYPE_Q6_K> : qt_layout<16, 8, 8, 2> {
    static constexpr int GGUF = 210;
    static constexpr bool SPLIT = true;
    QT_HD void codes(const uint8_t *b, int j, uint8_t (&q)[32]) {
        const int h = j >> 2, k = j & 3;
        const uint8_t *ql = b + 64 * h + 32 * (k & 1), *qh = b + 128 + 32 * h;
        for (int e = 0; e < 32; e++)
            q[e] = (uint8_t)(((ql[e] >> (4 * (k >> 1))) & 15) | ((qh[e] >> (2 * k)) & 3) << 4);
    }
    QT_HD void scales(const uint8_t *b, int h, uint8_t *sc) {
        for (int k = 0; k < 8; k++)
            sc[k] = b[192 + 8 * h + k];
    }
    QT_HD void block(const uint8_t *b, uint8_t *sb) {
        sb[0] = b[208];
        sb[1] = b[209];
    }
    struct gs {
        float ds0, ds1;
    };
    QT_HD gs group(const uint32_t *sc, const uint32_t *sb, int j) {
        const float d = qt_f16(sb[0]);
        const uint32_t w = sc[j >> 1] >> (16 * (j & 1));
        return {d * (float)(int8_t)(w & 0xFF), d * (float)(int8_t)((w >> 8) & 0xFF)};
    }
    QT_HD float chain(const gs &s, float v0, float v1, float2 x, float acc) {
        return fmaf(x.x, fmaf(s.ds0, v0, s.ds1 * v1), acc);
    }
    /* q: the signed code (q - 32) */
    QT_HD float value(const uint32_t *sc, const uint32_t *sb, int j, int e, int q) {
        const gs s = group(sc, sb, j);
        return qt_mul(e < 16 ? s.ds0 : s.ds1, (float)q);
    }
};

/* The 32-column types: 8 GGUF blocks of bb bytes per 256 columns, scale bytes the half's
 * four blocks' f16 d (and m); value d (q - off) or d q + m. */

/* Q8_0: acc = fma(dx, d isum, acc) */
template <> struct qt_fmt<GGML_TYPE_Q8_0> : qt_layout<32, 0, 8, 0> {
    static constexpr int GGUF = 8 * 34;
    static constexpr bool SPLIT = false;
    QT_HD void codes(const uint8_t *b, int j, uint8_t (&q)[32]) {
        for (int e = 0; e < 32; e++)
            q[e] = b[34 * j + 2 + e];
    }
    QT_HD void scales(const uint8_t *b, int h, uint8_t *sc) { qt_d16_scales(b, 34, h, sc); }
    QT_HD void block(const uint8_t *b, uint8_t *sb) {}
    struct gs {
        float d;
    };
    QT_HD gs group(const uint32_t *sc, const uint32_t *sb, int j) { return {qt_d16(sc, j)}; }
    QT_HD float chain(const gs &s, float v0, float v1, float2 x, float acc) { return fmaf(x.x, s.d * v0, acc); }
    QT_HD float value(const uint32_t *sc, const uint32_t *sb, int j, int e, int q) {
        return qt_mul((float)q, qt_d16(sc, j));
    }
};

/* Group j's 32 codes of Q4_0, Q4_1, Q5_0 and Q5_1: GGUF blocks of BB bytes that end in 16
 * bytes of nibbles (column e low, e + 16 high), after, with FIFTH, the 32 fifth bits as a
 * little-endian word (bit e: column e). */
template <int BB, bool FIFTH> QT_HD void qt_codes_32(const uint8_t *b, int j, uint8_t (&q)[32]) {
    const uint8_t *qs = b + BB * j + BB - 16;
    const uint32_t qh = FIFTH ? qt_rd32(qs - 4) : 0;
    for (int e = 0; e < 16; e++) {
        q[e] = (uint8_t)((qs[e] & 15) | ((qh >> e) & 1) << 4);
        q[e + 16] = (uint8_t)((qs[e] >> 4) | ((qh >> (e + 16)) & 1) << 4);
    }
}

/* Q4_0, Q5_0: unsigned codes, the offset through x's sum (exact: |isum - off sum q_x| < 2^24):
 *   acc = fma(dx, d fma(-off, sum q_x, isum), acc) */
template <int OFF> struct qt_d_off {
    static constexpr bool SPLIT = false;
    struct gs {
        float d;
    };
    QT_HD gs group(const uint32_t *sc, const uint32_t *sb, int j) { return {qt_d16(sc, j)}; }
    QT_HD float chain(const gs &s, float v0, float v1, float2 x, float acc) {
        return fmaf(x.x, s.d * fmaf((float)-OFF, x.y, v0), acc);
    }
    QT_HD float value(const uint32_t *sc, const uint32_t *sb, int j, int e, int q) {
        return qt_mul((float)(q - OFF), qt_d16(sc, j));
    }
    QT_HD void block(const uint8_t *b, uint8_t *sb) {}
};

template <> struct qt_fmt<GGML_TYPE_Q4_0> : qt_layout<16, 0, 8, 0>, qt_d_off<8> {
    static constexpr int GGUF = 8 * 18;
    QT_HD void codes(const uint8_t *b, int j, uint8_t (&q)[32]) { qt_codes_32<18, false>(b, j, q); }
    QT_HD void scales(const uint8_t *b, int h, uint8_t *sc) { qt_d16_scales(b, 18, h, sc); }
};

template <> struct qt_fmt<GGML_TYPE_Q5_0> : qt_layout<16, 4, 8, 0>, qt_d_off<16> {
    static constexpr int GGUF = 8 * 22;
    QT_HD void codes(const uint8_t *b, int j, uint8_t (&q)[32]) { qt_codes_32<22, true>(b, j, q); }
    QT_HD void scales(const uint8_t *b, int h, uint8_t *sc) { qt_d16_scales(b, 22, h, sc); }
};

/* Q4_1, Q5_1: scale bytes the half's (d, m) pairs; value d q + m:
 *   acc = fma(dx, fma(d, isum, m sum q_x), acc) */
struct qt_dm {
    static constexpr bool SPLIT = false;
    struct gs {
        float d, m;
    };
    QT_HD gs group(const uint32_t *sc, const uint32_t *sb, int j) { return {qt_f16(sc[j]), qt_f16(sc[j] >> 16)}; }
    QT_HD float chain(const gs &s, float v0, float v1, float2 x, float acc) {
        return fmaf(x.x, fmaf(s.d, v0, s.m * x.y), acc);
    }
    QT_HD float value(const uint32_t *sc, const uint32_t *sb, int j, int e, int q) {
        const gs s = group(sc, sb, j);
        return qt_add(qt_mul((float)q, s.d), s.m);
    }
    QT_HD void dm_scales(const uint8_t *b, int bb, int h, uint8_t *sc) {
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 4; i++)
                sc[4 * k + i] = b[(4 * h + k) * bb + i];
    }
    QT_HD void block(const uint8_t *b, uint8_t *sb) {}
};

template <> struct qt_fmt<GGML_TYPE_Q4_1> : qt_layout<16, 0, 16, 0>, qt_dm {
    static constexpr int GGUF = 8 * 20;
    QT_HD void codes(const uint8_t *b, int j, uint8_t (&q)[32]) { qt_codes_32<20, false>(b, j, q); }
    QT_HD void scales(const uint8_t *b, int h, uint8_t *sc) { dm_scales(b, 20, h, sc); }
};

template <> struct qt_fmt<GGML_TYPE_Q5_1> : qt_layout<16, 4, 16, 0>, qt_dm {
    static constexpr int GGUF = 8 * 24;
    QT_HD void codes(const uint8_t *b, int j, uint8_t (&q)[32]) { qt_codes_32<24, true>(b, j, q); }
    QT_HD void scales(const uint8_t *b, int h, uint8_t *sc) { dm_scales(b, 24, h, sc); }
};

/* the sizes the header states */
static_assert(qt_fmt<GGML_TYPE_Q4_K>::BYTES == 4736 && qt_fmt<GGML_TYPE_Q5_K>::BYTES == 5760 &&
                  qt_fmt<GGML_TYPE_Q6_K>::BYTES == 6720 && qt_fmt<GGML_TYPE_Q8_0>::BYTES == 8704 &&
                  qt_fmt<GGML_TYPE_Q4_0>::BYTES == 4608 && qt_fmt<GGML_TYPE_Q4_1>::BYTES == 5120 &&
                  qt_fmt<GGML_TYPE_Q5_0>::BYTES == 5632 && qt_fmt<GGML_TYPE_Q5_1>::BYTES == 6144,
              "row block sizes");

/* ---- making a block ------------------------------------------------------------------------ */

/* Row rr of a block from the row's 256 columns in GGUF blocks (b). */
template <class F> QT_HD void qt_repack_row(uint8_t *blk, const uint8_t *b, int rr) {
    for (int j = 0; j < 8; j++) {
        uint8_t q[32];
        F::codes(b, j, q);
        F::codes_t::pack(q, blk + F::lo_at(j, rr), F::HI ? blk + F::hi_at(j, rr) : NULL);
    }
    for (int h = 0; h < 2; h++)
        F::scales(b, h, blk + F::sc_at(h, rr));
    F::block(b, blk + F::sb_at(rr));
}

#endif
