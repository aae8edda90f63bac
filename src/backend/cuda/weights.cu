/*
 * weights.cu: binding a GGUF tensor as a CUDA weight. As stored (the default): a type with
 * CUDA kernels (qweights.cuh) keeps its bits, rearranged on the device into the planes the
 * kernels read; bf16 is copied as it is. Otherwise (another type, or SEER_WEIGHTS_BF16): the
 * tensor is dequantised on the host (seer_gguf_dequant) a slice of rows at a time, rounded to bf16
 * (nearest even) and copied to device memory [rows][cols]. Also fusing weights (rows of
 * several as one, plane by plane), taking some rows of one (weight_rows: the parts of a tensor
 * a file stores fused) and a bf16 weight's quantised copy (weight_quantize).
 * The types of qt_formats.cuh go to matmul_qt.cu's row blocks instead of the planes where
 * their rows are whole blocks of 256 columns (seer_cuda.qt, the default).
 * Not for: the matmul kernels (matmul.cu, matmul_q.cu, matmul_qt.cu).
 */
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/qweights.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "gguf/gguf.h"
}

/* Elements dequantised per slice: bounds the host memory a big embedding table needs. */
#define SLICE_ELEMS ((size_t)1 << 22)

static seer_status load_rows(seer_cuda *c, const gguf_tensor *t, bf16 *dst, uint64_t rows,
                             uint64_t cols) {
    const int be = seer_ggml_type_block_elems(t->type);
    if (be <= 0 || !seer_ggml_type_supported(t->type))
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor %s: unsupported type %s (%d)", t->name,
                        seer_ggml_type_name(t->type), (int)t->type);
    /* Slices of whole rows need rows that end on a block boundary; otherwise one slice. */
    uint64_t rows_per = cols % (uint64_t)be ? rows : SLICE_ELEMS / cols;
    if (rows_per < 1)
        rows_per = 1;
    if (rows_per > rows)
        rows_per = rows;
    const size_t slice = (size_t)(rows_per * cols);
    float *f = (float *)seer_malloc_array(slice, sizeof *f);
    uint16_t *h = (uint16_t *)seer_malloc_array(slice, sizeof *h);
    seer_status s = SEER_OK;
    if (!f || !h)
        s = seer_err(SEER_ERR_OOM, "tensor %s: out of host memory for a %zu-element slice",
                     t->name, slice);
    for (uint64_t r0 = 0; s == SEER_OK && r0 < rows; r0 += rows_per) {
        const uint64_t nr = rows - r0 < rows_per ? rows - r0 : rows_per;
        const uint64_t ne = nr * cols;
        size_t off = 0;
        s = seer_ggml_nbytes(t->type, r0 * cols, &off);
        if (s == SEER_OK && off > t->nbytes)
            s = seer_err(SEER_ERR_FORMAT, "tensor %s: data shorter than its shape", t->name);
        if (s == SEER_OK)
            s = seer_gguf_dequant(t->type, (const uint8_t *)t->data + off, f, ne);
        if (s != SEER_OK) {
            s = seer_err(s, "tensor %s: %s", t->name, seer_last_error());
            break;
        }
        for (uint64_t i = 0; i < ne; i++)
            h[i] = seer_f32_to_bf16(f[i]);
        cudaError_t e = cudaMemcpyAsync(dst + r0 * cols, h, ne * sizeof *h, cudaMemcpyHostToDevice,
                                        c->stream);
        /* The next slice overwrites h: wait for this copy whatever memory h is in. */
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess)
            s = seer_cuda_fail(e, "copying a weight slice to the device", __FILE__, __LINE__);
    }
    free(f);
    free(h);
    return s;
}

/* ---- GGUF blocks -> planes --------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t rd16(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8; }

/* The 32 unsigned codes of group s of a block (s: sub-block of a K-quant super-block, 0 for
 * the others), as qweights.cuh keeps them: Q8_0 as q + 128. */
static __device__ void group_codes(int type, const uint8_t *b, int s, uint8_t (&code)[32]) {
    for (int e = 0; e < 32; e++) {
        int v = 0;
        switch (type) {
        case GGML_TYPE_Q4_0: v = e < 16 ? b[2 + e] & 15 : b[2 + e - 16] >> 4; break;
        case GGML_TYPE_Q4_1: v = e < 16 ? b[4 + e] & 15 : b[4 + e - 16] >> 4; break;
        case GGML_TYPE_Q5_0: {
            const uint32_t qh = rd16(b + 2) | rd16(b + 4) << 16;
            v = (e < 16 ? b[6 + e] & 15 : b[6 + e - 16] >> 4) | ((qh >> e) & 1) << 4;
            break;
        }
        case GGML_TYPE_Q5_1: {
            const uint32_t qh = rd16(b + 4) | rd16(b + 6) << 16;
            v = (e < 16 ? b[8 + e] & 15 : b[8 + e - 16] >> 4) | ((qh >> e) & 1) << 4;
            break;
        }
        case GGML_TYPE_Q8_0: v = b[2 + e] ^ 0x80; break;
        case GGML_TYPE_Q4_K: {
            const uint8_t q = b[16 + 32 * (s >> 1) + e];
            v = s & 1 ? q >> 4 : q & 15;
            break;
        }
        case GGML_TYPE_Q5_K: {
            const uint8_t q = b[48 + 32 * (s >> 1) + e];
            v = (s & 1 ? q >> 4 : q & 15) | ((b[16 + e] >> s) & 1) << 4;
            break;
        }
        case GGML_TYPE_Q6_K: {
            const int h = s >> 2, qd = s & 3;
            const uint8_t q = b[64 * h + e + 32 * (qd & 1)];
            v = (qd >= 2 ? q >> 4 : q & 15) | ((b[128 + 32 * h + e] >> (2 * qd)) & 3) << 4;
            break;
        }
        }
        code[e] = (uint8_t)v;
    }
}

/* One thread per (row, group) of src's rows, which are the weight's rows [row0, row0 + rows):
 * its codes into the lo/hi planes, its scales (a K-quant's super-block header by the thread of
 * its first group) into sc/d. The planes start zeroed. */
__global__ void repack_kernel(uint8_t *dst, seer_qlayout L, const uint8_t *src, size_t src_row,
                              int block_bytes, int row0, int rows, int groups) {
    const bool kq = seer_qtype_k(L.type);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)rows * groups;
         i += (long long)gridDim.x * blockDim.x) {
        const int sr = (int)(i / groups), gi = (int)(i % groups), r = row0 + sr;
        const int s = kq ? gi % 8 : 0;
        const uint8_t *b = src + (size_t)sr * src_row + (size_t)(kq ? gi / 8 : gi) * block_bytes;
        uint8_t code[32];
        group_codes(L.type, b, s, code);
        const int quad = gi >> 2, j = gi & 3;
        uint8_t *lo = dst + L.off[0] + (size_t)r * L.stride[0];
        uint8_t *hi = dst + L.off[1] + (size_t)r * L.stride[1];
        uint32_t w4[4] = {0, 0, 0, 0}, h[4] = {0, 0, 0, 0};
        uint8_t w8[4][8] = {};
        for (int e = 0; e < 32; e++) {
            int c, pos;
            q_slot_pos(e, &c, &pos);
            if (L.lo_bits == 8)
                w8[c][q8_byte(pos)] = code[e];
            else
                w4[c] |= (uint32_t)(code[e] & 15) << (4 * pos);
            if (L.hi_bits == 1)
                h[c] |= (uint32_t)((code[e] >> 4) & 1) << pos;
            else if (L.hi_bits == 2)
                h[c] |= (uint32_t)((code[e] >> 4) & 3) << (2 * pos);
        }
        for (int c = 0; c < 4; c++) {
            if (L.lo_bits == 8)
                for (int k = 0; k < 8; k++)
                    lo[(size_t)quad * 128 + c * 32 + j * 8 + k] = w8[c][k];
            else
                *(uint32_t *)(lo + (size_t)quad * 64 + c * 16 + j * 4) = w4[c];
            if (L.hi_bits == 1)
                hi[(size_t)quad * 16 + c * 4 + j] = (uint8_t)h[c];
            else if (L.hi_bits == 2)
                *(uint16_t *)(hi + (size_t)quad * 32 + c * 8 + j * 2) = (uint16_t)h[c];
        }
        uint8_t *sc = dst + L.off[2] + (size_t)r * L.stride[2];
        switch (L.sc_kind) {
        case QSC_D16: *(uint16_t *)(sc + (size_t)gi * 2) = (uint16_t)rd16(b); break;
        case QSC_DM16: *(uint32_t *)(sc + (size_t)gi * 4) = rd16(b) | rd16(b + 2) << 16; break;
        case QSC_K4:
            if (s == 0)
                for (int k = 0; k < 16; k++)
                    sc[(size_t)(gi / 8) * 16 + k] = b[k];
            break;
        case QSC_K6:
            if (s == 0) {
                for (int k = 0; k < 16; k++)
                    sc[(size_t)(gi / 8) * 16 + k] = b[192 + k];
                *(uint16_t *)(dst + L.off[3] + (size_t)r * L.stride[3] + (size_t)(gi / 8) * 2) =
                    (uint16_t)rd16(b + 208);
            }
            break;
        }
    }
}

/* The tensor's blocks to the device, rearranged into planes in d (L.bytes), or into row
 * blocks (seer_cuda_qt_bytes) where the weight takes those. */
static seer_status load_planes(seer_cuda *c, const gguf_tensor *t, const seer_qlayout *L, uint8_t *d,
                               uint64_t rows, uint64_t cols) {
    size_t row_bytes = 0;
    SEER_TRY(seer_ggml_nbytes(t->type, cols, &row_bytes));
    const size_t bytes = row_bytes * rows;
    if (t->nbytes < bytes)
        return seer_err(SEER_ERR_FORMAT, "tensor %s: data shorter than its shape", t->name);
    void *raw = NULL;
    SEER_TRY(seer_cuda_malloc(c, bytes, "a quantised weight's blocks", &raw));
    const bool qt = seer_cuda_qt_of(c, t->type, (int)cols);
    cudaError_t e = cudaMemsetAsync(d, 0, qt ? seer_cuda_qt_bytes(t->type, (int)rows, (int)cols) : L->bytes,
                                    c->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(raw, t->data, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess && qt) {
        const seer_status s = seer_cuda_qt_repack(c, t->type, d, raw, 0, (int)rows, (int)cols);
        if (s != SEER_OK) {
            (void)cudaStreamSynchronize(c->stream);
            seer_cuda_free(c, raw);
            return s;
        }
    } else if (e == cudaSuccess) {
        const int groups = (int)(cols / 32);
        repack_kernel<<<seer_cuda_grid(rows * groups, 256), 256, 0, c->stream>>>(
            d, *L, (const uint8_t *)raw, row_bytes, seer_ggml_type_block_bytes(t->type), 0, (int)rows, groups);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    seer_cuda_free(c, raw);
    if (e != cudaSuccess)
        return seer_cuda_fail(e, "rearranging a quantised weight", __FILE__, __LINE__);
    return SEER_OK;
}

/* ---- quantising a weight on the device ------------------------------------------------- */

/* f32 -> f16 bits, round to nearest even: quant.c's seer_f32_to_f16 in integers, so that the
 * scale's bytes are the host's whatever the intrinsics do. */
static __device__ uint32_t f16_bits(float f) {
    const uint32_t x = __float_as_uint(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return sign | 0x7e00 | ((ax >> 13) & 0x3ff);
    if (ax >= 0x477ff000u)
        return sign | 0x7c00;
    if (ax < 0x38800000u) {
        if (ax <= 0x33000000u)
            return sign;
        const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return sign | q;
    }
    uint32_t h = (ax - 0x38000000u) >> 13;
    const uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;
    return sign | h;
}

/* One thread per block of 32 of w's rows [row0, row0 + rows): the block's bytes into dst (rows
 * of row_bytes) as seer_gguf_quant writes them (quant.c's quant_q8_0 and quant_q4_0), with the same
 * f32 operations one at a time, never contracted, so that the bytes are the host's. A
 * non-finite value sets *bad (seer_gguf_quant refuses those). */
__global__ void quantize_kernel(uint8_t *dst, const bf16 *w, int cols, int type, size_t row_bytes,
                                long long row0, int rows, int *bad) {
    const int groups = cols / 32, bb = type == GGML_TYPE_Q8_0 ? 34 : 18;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)rows * groups;
         i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / groups), g = (int)(i % groups);
        const bf16 *x = w + (size_t)(row0 + r) * cols + (size_t)g * 32;
        float v[32], amax = 0.f, vmax = 0.f;
        for (int e = 0; e < 32; e++) {
            v[e] = __bfloat162float(x[e]);
            if (!isfinite(v[e]))
                *bad = 1;
            if (type == GGML_TYPE_Q8_0) {
                amax = fmaxf(amax, fabsf(v[e]));
            } else if (fabsf(v[e]) > amax) {
                amax = fabsf(v[e]);
                vmax = v[e];
            }
        }
        const float d = type == GGML_TYPE_Q8_0 ? __fdiv_rn(amax, 127.f) : __fdiv_rn(vmax, -8.f);
        const float id = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
        uint8_t blk[34];
        const uint32_t h = f16_bits(d);
        blk[0] = (uint8_t)(h & 0xFF);
        blk[1] = (uint8_t)(h >> 8);
        if (type == GGML_TYPE_Q8_0) {
            for (int e = 0; e < 32; e++)
                blk[2 + e] = (uint8_t)(int)roundf(fminf(127.f, fmaxf(-127.f, __fmul_rn(v[e], id))));
        } else {
            for (int e = 0; e < 16; e++) {
                const int q0 = (int)fminf(15.f, fmaxf(0.f, __fadd_rn(__fmul_rn(v[e], id), 8.5f)));
                const int q1 = (int)fminf(15.f, fmaxf(0.f, __fadd_rn(__fmul_rn(v[e + 16], id), 8.5f)));
                blk[2 + e] = (uint8_t)(q0 | q1 << 4);
            }
        }
        uint8_t *b = dst + (size_t)r * row_bytes + (size_t)g * bb;
        for (int k = 0; k < bb; k++)
            b[k] = blk[k];
    }
}

/* Blocks quantised per slice: bounds the scratch a big LM head needs. */
#define QUANT_SLICE_BYTES ((size_t)64 << 20)

seer_status seer_cuda_weight_quantize(seer_backend *be, const seer_weight *w, int dtype, seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    if (dtype != GGML_TYPE_Q8_0 && dtype != GGML_TYPE_Q4_0)
        return seer_err(SEER_ERR_UNSUPPORTED, "weight_quantize: to %s (q8_0 or q4_0)",
                        seer_ggml_type_name((ggml_type)dtype));
    if (!w->data || w->dtype != GGML_TYPE_BF16)
        return seer_err(SEER_ERR_UNSUPPORTED, "weight_quantize: from a %s weight (the CUDA backend's is bf16)",
                        seer_ggml_type_name((ggml_type)w->dtype));
    seer_qlayout L;
    if (!seer_qlayout_of(dtype, w->rows, w->cols, &L))
        return seer_err(SEER_ERR_INVALID_ARG, "weight_quantize: %d columns are not whole blocks of 32", w->cols);
    size_t row_bytes = 0;
    SEER_TRY(seer_ggml_nbytes((ggml_type)dtype, (uint64_t)w->cols, &row_bytes));
    int rows_per = (int)(QUANT_SLICE_BYTES / row_bytes);
    if (rows_per < 1)
        rows_per = 1;
    if (rows_per > w->rows)
        rows_per = w->rows;
    /* the copy's layout is what weight_load gives a stored tensor of the type and shape */
    const bool qt = seer_cuda_qt_of(c, dtype, w->cols);
    const size_t bytes = qt ? seer_cuda_qt_bytes(dtype, w->rows, w->cols) : L.bytes;
    void *d = NULL, *raw = NULL, *bad = NULL;
    seer_status s = seer_cuda_malloc(c, bytes, "a quantised copy of a weight", &d);
    if (s == SEER_OK)
        s = seer_cuda_malloc(c, row_bytes * (size_t)rows_per, "quantisation scratch", &raw);
    if (s == SEER_OK)
        s = seer_cuda_malloc(c, sizeof(int), "quantisation flag", &bad);
    cudaError_t e = cudaSuccess;
    if (s == SEER_OK) {
        e = cudaMemsetAsync(d, 0, bytes, c->stream);
        if (e == cudaSuccess)
            e = cudaMemsetAsync(bad, 0, sizeof(int), c->stream);
        const int groups = w->cols / 32;
        for (int r0 = 0; r0 < w->rows && e == cudaSuccess && s == SEER_OK; r0 += rows_per) {
            const int nr = w->rows - r0 < rows_per ? w->rows - r0 : rows_per;
            const long long n = (long long)nr * groups;
            quantize_kernel<<<seer_cuda_grid(n, 256), 256, 0, c->stream>>>(
                (uint8_t *)raw, (const bf16 *)w->data, w->cols, dtype, row_bytes, r0, nr, (int *)bad);
            if (qt)
                s = seer_cuda_qt_repack(c, dtype, d, raw, r0, nr, w->cols);
            else
                repack_kernel<<<seer_cuda_grid(n, 256), 256, 0, c->stream>>>(
                    (uint8_t *)d, L, (const uint8_t *)raw, row_bytes, seer_ggml_type_block_bytes((ggml_type)dtype),
                    r0, nr, groups);
            e = cudaGetLastError();
        }
    }
    int flag = 0;
    if (s == SEER_OK && e == cudaSuccess)
        e = cudaMemcpyAsync(&flag, bad, sizeof flag, cudaMemcpyDeviceToHost, c->stream);
    if (s == SEER_OK && e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (s == SEER_OK && e != cudaSuccess)
        s = seer_cuda_fail(e, "quantising a weight", __FILE__, __LINE__);
    if (s != SEER_OK)
        (void)cudaStreamSynchronize(c->stream); /* nothing in flight reads raw when it goes */
    if (s == SEER_OK && flag)
        s = seer_err(SEER_ERR_INVALID_ARG, "weight_quantize: the weight holds a value that is not finite");
    seer_cuda_free(c, raw);
    seer_cuda_free(c, bad);
    if (s != SEER_OK) {
        seer_cuda_free(c, d);
        return s;
    }
    *out = *w;
    out->data = d;
    out->dtype = dtype;
    out->owned = true;
    return SEER_OK;
}

seer_status seer_cuda_weight_load(seer_backend *be, const gguf_tensor *t, seer_weights_kind how,
                                  seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    const uint64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (rows > INT32_MAX || cols > INT32_MAX || rows == 0 || cols == 0)
        return seer_err(SEER_ERR_UNSUPPORTED, "tensor %s has an unsupported shape", t->name);
    if (how == SEER_WEIGHTS_F32)
        return seer_err(SEER_ERR_UNSUPPORTED, "the CUDA backend keeps weights as stored or in bf16, not in f32");
    seer_qlayout L;
    const bool keep = how == SEER_WEIGHTS_STORED && seer_qlayout_of(t->type, (long long)rows, (long long)cols, &L);
    const bool qt = keep && seer_cuda_qt_of(c, t->type, (int)cols);
    const size_t bytes = !keep ? (size_t)(rows * cols) * sizeof(bf16)
                         : qt  ? seer_cuda_qt_bytes(t->type, (int)rows, (int)cols)
                               : L.bytes;
    char what[160];
    snprintf(what, sizeof what, "weight %s", t->name);
    void *d = NULL;
    SEER_TRY(seer_cuda_malloc(c, bytes, what, &d));
    seer_status s = SEER_OK;
    if (keep) {
        s = load_planes(c, t, &L, (uint8_t *)d, rows, cols);
    } else if (t->type == GGML_TYPE_BF16) {
        if (t->nbytes < bytes)
            s = seer_err(SEER_ERR_FORMAT, "tensor %s: data shorter than its shape", t->name);
        cudaError_t e = cudaSuccess;
        if (s == SEER_OK)
            e = cudaMemcpyAsync(d, t->data, bytes, cudaMemcpyHostToDevice, c->stream);
        if (s == SEER_OK && e == cudaSuccess)
            e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess)
            s = seer_cuda_fail(e, what, __FILE__, __LINE__);
    } else {
        s = load_rows(c, t, (bf16 *)d, rows, cols);
    }
    if (s != SEER_OK) {
        seer_cuda_free(c, d);
        return s;
    }
    memset(out, 0, sizeof *out);
    out->data = d;
    out->rows = (int)rows;
    out->cols = (int)cols;
    out->dtype = keep ? t->type : GGML_TYPE_BF16;
    out->owned = true;
    return SEER_OK;
}

void seer_cuda_weight_free(seer_backend *be, seer_weight *w) {
    if (w->owned)
        seer_cuda_free(seer_cuda_of(be), w->data);
    memset(w, 0, sizeof *w);
}

/* The planes of a weight as stored on the device: one for bf16, qweights.cuh's for the rest. */
static bool planes_of(int dtype, long long rows, long long cols, size_t (&off)[4], int (&stride)[4],
                      size_t *bytes) {
    if (dtype == GGML_TYPE_BF16) {
        memset(off, 0, sizeof off);
        memset(stride, 0, sizeof stride);
        stride[0] = (int)(cols * (long long)sizeof(bf16));
        *bytes = (size_t)(rows * cols) * sizeof(bf16);
        return true;
    }
    seer_qlayout L;
    if (!seer_qlayout_of(dtype, rows, cols, &L))
        return false;
    memcpy(off, L.off, sizeof off);
    memcpy(stride, L.stride, sizeof stride);
    *bytes = L.bytes;
    return true;
}

/* weight_concat's output: out made of parts (rows in all) at p; the parts' own data go, and
 * bf16 parts not interleaved become views of their rows in p. */
static void concat_done(seer_backend *be, seer_weight *parts, int n, bool interleave, long long rows, void *p,
                        seer_weight *out) {
    const int dtype = parts[0].dtype;
    memset(out, 0, sizeof *out);
    out->data = p;
    out->rows = (int)rows;
    out->cols = parts[0].cols;
    out->dtype = dtype;
    out->owned = true;
    out->n_seg = n;
    out->interleaved = interleave;
    size_t r0 = 0;
    for (int j = 0; j < n; j++) {
        out->seg_rows[j] = parts[j].rows;
        const int pr = parts[j].rows, cols = parts[j].cols;
        seer_cuda_weight_free(be, &parts[j]);
        parts[j].data = interleave || dtype != GGML_TYPE_BF16 ? NULL : (bf16 *)p + r0 * cols;
        parts[j].rows = pr;
        parts[j].cols = cols;
        parts[j].dtype = dtype;
        parts[j].owned = false;
        r0 += (size_t)pr;
    }
}

/* weight_concat of weights in row blocks: each part's rows gathered into place. */
static seer_status concat_qt(seer_backend *be, seer_weight *parts, int n, bool interleave, long long rows,
                             seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    const int cols = parts[0].cols, dtype = parts[0].dtype;
    const size_t bytes = seer_cuda_qt_bytes(dtype, (int)rows, cols);
    void *p = NULL;
    SEER_TRY(seer_cuda_malloc(c, bytes, "a fused weight", &p));
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, c->stream);
    seer_status s = SEER_OK;
    int r0 = 0;
    for (int j = 0; j < n && s == SEER_OK && e == cudaSuccess; j++) {
        s = seer_cuda_qt_gather(c, dtype, p, parts[j].data, parts[j].rows, cols, interleave ? j : r0,
                                interleave ? 2 : 1);
        r0 += parts[j].rows;
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (s == SEER_OK && e != cudaSuccess)
        s = seer_cuda_fail(e, "gathering a weight into a fused one", __FILE__, __LINE__);
    if (s != SEER_OK) {
        (void)cudaGetLastError();
        seer_cuda_free(c, p);
        return s;
    }
    concat_done(be, parts, n, interleave, rows, p, out);
    return SEER_OK;
}

/* Rows of several weights of one dtype as one (matmul_split then reads them in one pass),
 * plane by plane. bf16 parts become views of their rows in it. Interleaved (two parts, for
 * matmul_glu): row i of part j goes to row 2 i + j; such parts, and quantised ones (whose
 * rows are no weight of their own in the planes), keep their shape without data. */
seer_status seer_cuda_weight_concat(seer_backend *be, seer_weight *parts, int n, bool interleave,
                                    seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    if (n < 1 || n > SEER_WEIGHT_MAX_SEG)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_concat: %d parts (1 to %d)", n, SEER_WEIGHT_MAX_SEG);
    if (interleave && (n != 2 || parts[0].rows != parts[1].rows))
        return seer_err(SEER_ERR_INVALID_ARG, "weight_concat: interleaving needs two parts of equal rows");
    const int dtype = parts[0].dtype;
    long long rows = 0;
    for (int j = 0; j < n; j++) {
        if (parts[j].dtype != dtype || parts[j].cols != parts[0].cols || parts[j].n_seg || !parts[j].data)
            return seer_err(SEER_ERR_INVALID_ARG,
                            "weight_concat: part %d is not a plain weight of type %s and %d columns", j,
                            seer_ggml_type_name((ggml_type)dtype), parts[0].cols);
        rows += parts[j].rows;
    }
    if (rows > INT32_MAX)
        return seer_err(SEER_ERR_INVALID_ARG, "weight_concat: %lld rows", rows);
    if (seer_cuda_qt_of(c, dtype, parts[0].cols))
        return concat_qt(be, parts, n, interleave, rows, out);
    size_t off[4], poff[4], bytes, pbytes;
    int stride[4], pstride[4];
    if (rows > INT32_MAX || !planes_of(dtype, rows, parts[0].cols, off, stride, &bytes))
        return seer_err(SEER_ERR_INVALID_ARG, "weight_concat: %lld rows of type %s", rows,
                        seer_ggml_type_name((ggml_type)dtype));
    void *p = NULL;
    SEER_TRY(seer_cuda_malloc(c, bytes, "a fused weight", &p));
    cudaError_t e = dtype == GGML_TYPE_BF16 ? cudaSuccess : cudaMemsetAsync(p, 0, bytes, c->stream);
    size_t r0 = 0;
    for (int j = 0; j < n && e == cudaSuccess; j++) {
        planes_of(dtype, parts[j].rows, parts[j].cols, poff, pstride, &pbytes);
        for (int q = 0; q < 4 && e == cudaSuccess; q++) {
            if (!stride[q])
                continue;
            const size_t sb = (size_t)stride[q];
            const uint8_t *src = (const uint8_t *)parts[j].data + poff[q];
            uint8_t *dst = (uint8_t *)p + off[q];
            /* interleaved: row i of part j at row 2 i + j */
            e = interleave ? cudaMemcpy2DAsync(dst + j * sb, 2 * sb, src, sb, sb, (size_t)parts[j].rows,
                                               cudaMemcpyDeviceToDevice, c->stream)
                           : cudaMemcpyAsync(dst + r0 * sb, src, (size_t)parts[j].rows * sb,
                                             cudaMemcpyDeviceToDevice, c->stream);
        }
        r0 += (size_t)parts[j].rows;
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        seer_cuda_free(c, p);
        return seer_cuda_fail(e, "copying a weight into a fused one", __FILE__, __LINE__);
    }
    concat_done(be, parts, n, interleave, rows, p, out);
    return SEER_OK;
}

/* Whether a row block of matmul_qt.cu's layout starts at row r (its size function shows it:
 * one more row then takes one more block). */
static bool qt_block_starts(int dtype, int r, int cols) {
    return seer_cuda_qt_bytes(dtype, r + 1, cols) > seer_cuda_qt_bytes(dtype, r, cols);
}

/* Rows [r0, r0 + n) of w. bf16, and a type in row blocks where the rows are whole blocks: a view
 * into w. A type in planes: an owned copy of the rows of each plane (a plane's rows lie after
 * all the rows of the one before, so no one pointer can view them). */
seer_status seer_cuda_weight_rows(seer_backend *be, const seer_weight *w, int r0, int n, seer_weight *out) {
    seer_cuda *c = seer_cuda_of(be);
    if (!w->data || w->n_seg || r0 < 0 || n <= 0 || r0 > w->rows - n)
        return seer_err(SEER_ERR_INVALID_ARG, "weight rows [%d, %d) of a [%d][%d] weight", r0, r0 + n, w->rows,
                        w->cols);
    memset(out, 0, sizeof *out);
    out->rows = n;
    out->cols = w->cols;
    out->dtype = w->dtype;
    if (w->dtype == GGML_TYPE_BF16) {
        out->data = (bf16 *)w->data + (size_t)r0 * w->cols;
        return SEER_OK;
    }
    if (seer_cuda_qt_of(c, w->dtype, w->cols)) {
        if (!qt_block_starts(w->dtype, r0, w->cols) ||
            (r0 + n < w->rows && !qt_block_starts(w->dtype, r0 + n, w->cols)))
            return seer_err(SEER_ERR_UNSUPPORTED,
                            "weight rows [%d, %d) of a %s weight of %d rows are no whole row blocks "
                            "(SEER_CUDA_QT=0 keeps it in planes, which take any rows)",
                            r0, r0 + n, seer_ggml_type_name((ggml_type)w->dtype), w->rows);
        out->data = (uint8_t *)w->data + seer_cuda_qt_bytes(w->dtype, r0, w->cols);
        return SEER_OK;
    }
    size_t off[4], poff[4], bytes, pbytes;
    int stride[4], pstride[4];
    if (!planes_of(w->dtype, w->rows, w->cols, off, stride, &bytes) ||
        !planes_of(w->dtype, n, w->cols, poff, pstride, &pbytes))
        return seer_err(SEER_ERR_UNSUPPORTED, "weight rows of a %s weight",
                        seer_ggml_type_name((ggml_type)w->dtype));
    void *p = NULL;
    SEER_TRY(seer_cuda_malloc(c, pbytes, "rows of a fused weight", &p));
    cudaError_t e = cudaMemsetAsync(p, 0, pbytes, c->stream);
    for (int q = 0; q < 4 && e == cudaSuccess; q++)
        if (stride[q])
            e = cudaMemcpyAsync((uint8_t *)p + poff[q], (const uint8_t *)w->data + off[q] + (size_t)r0 * stride[q],
                                (size_t)n * stride[q], cudaMemcpyDeviceToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        seer_cuda_free(c, p);
        return seer_cuda_fail(e, "copying rows of a weight", __FILE__, __LINE__);
    }
    out->data = p;
    out->owned = true;
    return SEER_OK;
}

/* weight_bytes: the bytes of w from w->data on, in the layout weight_load made (row blocks or
 * planes or bf16): what a host copy of it holds (src/model/host_weights.c). */
size_t seer_cuda_weight_bytes(seer_backend *be, const seer_weight *w) {
    if (!w->data)
        return 0;
    if (w->dtype != GGML_TYPE_BF16 && seer_cuda_qt_of(seer_cuda_of(be), w->dtype, w->cols))
        return seer_cuda_qt_bytes(w->dtype, w->rows, w->cols);
    size_t off[4], bytes = 0;
    int stride[4];
    return planes_of(w->dtype, w->rows, w->cols, off, stride, &bytes) ? bytes : 0;
}
