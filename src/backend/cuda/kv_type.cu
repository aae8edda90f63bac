/*
 * kv_type.cu: a KV storage whose rows are quantised (geom kv_type q8 / q4, format
 * kv/kv_type.h) on the device: the store that quantises a forward call's K/V rows (kv_store,
 * rope_kv_store), kv_read's dequantisation, and kv_fill_random's rows. The quantiser follows
 * kv_type.c step for step (the same f32 operations, rounded the same way), so the device's
 * rows are the host's bytes; test_backend_ops_qkv checks them. Attention over such rows is
 * attention_qkv.cu's; page copies and row moves are kv.cu's, by the geometry's row bytes.
 *
 * Not for: the draft's quantised copy beside bf16 rows (attention_qkv.cu's store).
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/synth_hash.h"

/* kv_type.c's group_exp. */
static __device__ int kvt_group_exp(float amax, int qmax) {
    if (!(amax > 0.f))
        return amax == 0.f ? -128 : 127;
    int e;
    (void)frexpf(__fdiv_rn(amax, (float)qmax), &e);
    if (ldexpf((float)qmax, e - 1) >= amax)
        e--;
    else if (ldexpf((float)qmax, e) < amax)
        e++;
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

/* Quantises group g0 .. g0 + G of x (values got through val(i)) into row, as
 * seer_kvt_quantize_row: its amax in element order, then the codes. */
template <typename F>
static __device__ void kvt_quantize_group(F val, int g0, int G, int bits, uint8_t *row, int soff) {
    const int qmax = bits == 8 ? 127 : 7;
    float amax = 0.f;
    for (int e = g0; e < g0 + G; e++) {
        const float a = fabsf(val(e));
        amax = a > amax || isnan(a) ? a : amax;
    }
    const int ex = kvt_group_exp(amax, qmax);
    row[soff + g0 / G] = (uint8_t)(int8_t)ex;
    const float inv = ex == -128 ? 0.f : ldexpf(1.f, -ex);
    for (int e = g0; e < g0 + G; e += bits == 8 ? 1 : 2) {
        int q[2];
        for (int j = 0; j < (bits == 8 ? 1 : 2); j++) {
            float qf = rintf(__fmul_rn(val(e + j), inv));
            if (!(qf >= (float)-qmax))
                qf = (float)-qmax;
            if (qf > (float)qmax)
                qf = (float)qmax;
            q[j] = (int)qf;
        }
        if (bits == 8)
            row[e] = (uint8_t)(int8_t)q[0];
        else /* G is even: a byte never holds two groups */
            row[e / 2] = (uint8_t)((q[0] + 8) | ((q[1] + 8) << 4));
    }
}

/* Zeroes a row's padding past its exponents (the host's memset), thread 0 of the block. */
static __device__ void kvt_zero_pad(uint8_t *row, int soff, int ng, size_t rb) {
    if (threadIdx.x == 0)
        for (size_t b = (size_t)soff + ng; b < rb; b++)
            row[b] = 0;
}

/* One block per (token, K or V); a thread per group. */
__global__ void kvt_store_kernel(uint8_t *kv, const float *k, const float *v, const int32_t *page,
                                 const int32_t *row, int layer, int n_layers, int n_pages, int page_size, int kvd,
                                 int G, int bits, int soff, size_t rb) {
    const int t = blockIdx.x, which = blockIdx.y, pg = page[t], r = row[t];
    if (pg < 0 || pg >= n_pages || r < 0 || r >= page_size)
        return; /* never from the model code; a bad index must not write elsewhere */
    const float *src = (which ? v : k) + (size_t)t * kvd;
    uint8_t *dst = kv + ((((size_t)pg * n_layers + layer) * 2 + which) * page_size + r) * rb;
    const int ng = kvd / G;
    for (int gi = threadIdx.x; gi < ng; gi += blockDim.x)
        kvt_quantize_group([src](int e) { return src[e]; }, gi * G, G, bits, dst, soff);
    kvt_zero_pad(dst, soff, ng, rb);
}

/* The geometry's quantisation: group, code bits, exponents' offset and row bytes. */
struct kvt_shape {
    int kvd, G, bits, soff;
    size_t rb;
};

static kvt_shape kvt_shape_of(const seer_kv_geom *g) {
    const int kvd = g->n_kv_heads * g->head_dim;
    return {kvd, seer_kvt_group(g->kv_type, g->head_dim), seer_kvt_bits(g->kv_type),
            (int)seer_kvt_scales_off(g->kv_type, kvd), seer_kvt_row_bytes(g->kv_type, g->n_kv_heads, g->head_dim)};
}

seer_status seer_cuda_kvt_store(seer_cuda *c, void *kv, const seer_kv_geom *g, int layer, const float *k,
                                const float *v, const int32_t *dpage, const int32_t *drow, int T) {
    const kvt_shape s = kvt_shape_of(g);
    kvt_store_kernel<<<dim3((unsigned)T, 2), 64, 0, c->stream>>>((uint8_t *)kv, k, v, dpage, drow, layer,
                                                                g->n_layers, g->n_pages, g->page_size, s.kvd, s.G,
                                                                s.bits, s.soff, s.rb);
    LAUNCH_TRY("kvt_store_kernel");
    return SEER_OK;
}

/* One block per row asked for (kv_read_kernel's rule: a bad index gives a NaN row). */
__global__ void kvt_read_kernel(float *out, const uint8_t *kv, const int32_t *page, const int32_t *row, int layer,
                                int which, int n_layers, int n_pages, int page_size, int kvd, int G, int bits,
                                int soff, size_t rb) {
    const int i = blockIdx.x, pg = page[i], r = row[i];
    float *o = out + (size_t)i * kvd;
    const bool ok = pg >= 0 && pg < n_pages && r >= 0 && r < page_size;
    const uint8_t *src = kv + ((((size_t)(ok ? pg : 0) * n_layers + layer) * 2 + which) * page_size + (ok ? r : 0)) * rb;
    for (int e = threadIdx.x; e < kvd; e += blockDim.x)
        o[e] = ok ? kvt_value(src, e, G, bits, soff) : __int_as_float(0x7fc00000);
}

seer_status seer_cuda_kvt_read(seer_cuda *c, float *out, const void *kv, const seer_kv_geom *g, int layer, int which,
                               const int32_t *dpage, const int32_t *drow, int n) {
    const kvt_shape s = kvt_shape_of(g);
    kvt_read_kernel<<<(unsigned)n, 128, 0, c->stream>>>(out, (const uint8_t *)kv, dpage, drow, layer, which,
                                                       g->n_layers, g->n_pages, g->page_size, s.kvd, s.G, s.bits,
                                                       s.soff, s.rb);
    LAUNCH_TRY("kvt_read_kernel");
    return SEER_OK;
}

/* One block per (layer * 2 + K/V, slot i0 + y of the n filled); a thread per group: the values
 * kv_fill_kernel (synthetic.cu) would store, quantised as the host's fill quantises its f32
 * rows. */
__global__ void kvt_fill_kernel(uint8_t *kv, const int32_t *pages, int row0, int n, int i0, int n_layers,
                                int page_size, int kvd, int G, int bits, int soff, size_t rb, uint64_t seed,
                                float mul) {
    const int lw = blockIdx.x, i = i0 + (int)blockIdx.y, slot = row0 + i;
    const int pg = pages[slot / page_size], r = slot % page_size;
    uint8_t *dst = kv + ((((size_t)pg * n_layers + lw / 2) * 2 + lw % 2) * page_size + r) * rb;
    const uint64_t base = ((uint64_t)lw * n + i) * kvd;
    const int ng = kvd / G;
    for (int gi = threadIdx.x; gi < ng; gi += blockDim.x)
        kvt_quantize_group([=](int e) { return seer_synth_value(seed, base + e, mul); }, gi * G, G, bits, dst, soff);
    kvt_zero_pad(dst, soff, ng, rb);
}

seer_status seer_cuda_kvt_fill(seer_cuda *c, void *kv, const seer_kv_geom *g, const int32_t *dpages, int row0, int n,
                               uint64_t seed, float mul) {
    const kvt_shape s = kvt_shape_of(g);
    for (int i0 = 0; i0 < n; i0 += 65535) { /* a grid's y is at most 65535 */
        const int m = n - i0 < 65535 ? n - i0 : 65535;
        kvt_fill_kernel<<<dim3((unsigned)g->n_layers * 2, (unsigned)m), 64, 0, c->stream>>>(
            (uint8_t *)kv, dpages, row0, n, i0, g->n_layers, g->page_size, s.kvd, s.G, s.bits, s.soff, s.rb, seed,
            mul);
        LAUNCH_TRY("kvt_fill_kernel");
    }
    return SEER_OK;
}
