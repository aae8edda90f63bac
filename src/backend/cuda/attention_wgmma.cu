/*
 * attention_wgmma.cu: the prefill kind of the tensor-core attention (attention_tc.cu) for head
 * size 128 on Hopper (sm_90a), in the FlashAttention-3 design (Shah et al. 2024): the same
 * items, visible sets and result per row as that kind, computed by asynchronous warpgroup
 * products that read their operands from shared memory.
 *
 * A block is three warpgroups and holds one item (up to 128 rows: tokens x query heads of one
 * KV head) at a time:
 *  - the producer (warpgroup 0) finds where each key of a 128-key tile lives in the paged
 *    cache and copies the K and V tiles there with cp.async into a two-stage ring, in the
 *    128-byte swizzled layout the products read; an mbarrier per stage says "full" once its
 *    copies have landed, another "empty" once both consumers are done with it;
 *  - each consumer (warpgroups 1 and 2) owns 64 rows: S = Q K^T as eight wgmma m64n128k16
 *    from shared memory, the mask where a tile is not seen whole, the online softmax in
 *    registers (Milakov & Gimelshein 2018), then O += P V with P in registers as the A
 *    operand. While one consumer runs its softmax the other's products keep the tensor cores
 *    busy, and the producer's copies of the next tile are in flight throughout.
 * Register budgets are moved from the producer to the consumers (setmaxnreg).
 *
 * A row's result depends on its query, its visible keys and its item's tiles, like the kind
 * it stands in for: prefill need not be batch-invariant (backend.h). The builds without
 * sm_90a features compile an empty kernel, which attn_wg_init finds out: the mma.sync kernel
 * of attention_tc.cu then serves. seer_cuda_tuning.attn "mma" asks for that kernel on any device.
 */
#include "backend/cuda/attention.cuh"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define WG_THREADS 384 /* producer, two consumers */
#define WG_DH 128
#define WG_TK 128      /* keys per tile */
#define WG_ROWS 128    /* rows of an item, 64 per consumer */
#define WG_STAGES 2

/* Shared memory, in bytes from a 1024-aligned base (the swizzle pattern repeats every 1024):
 * Q [2 consumers][2 column halves][64 rows][128 B]; per stage K and V [2 halves][128 keys]
 * [128 B]; per stage the keys' cache offsets, what each key is, the producer warps' "whole"
 * ballots; the full and empty barriers; the item's tokens. */
enum : unsigned {
    WG_Q = 0,
    WG_KV = WG_Q + WG_ROWS * WG_DH * 2,
    WG_TILE = WG_TK * WG_DH * 2, /* one K or V tile */
    WG_KOFF = WG_KV + WG_STAGES * 2 * WG_TILE,
    WG_KINFO = WG_KOFF + WG_STAGES * WG_TK * 8,
    WG_OKM = WG_KINFO + WG_STAGES * WG_TK * 4,
    WG_BARS = WG_OKM + WG_STAGES * 4 * 4,
    WG_TOK = WG_BARS + 2 * WG_STAGES * 8,
    WG_RED = WG_TOK + 3 * WG_ROWS * 4,
    WG_SMEM = WG_RED + 2 * 4 * 3 * 4 + 1024, /* + room to align the base */
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

static __device__ __forceinline__ uint32_t wg_smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- PTX ------------------------------------------------------------------------------ */

static __device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n"
                 "}" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* The barrier's phase also waits for this thread's cp.async copies issued so far. */
static __device__ __forceinline__ void mbar_track_copies(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

static __device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

static __device__ __forceinline__ void wg_cp16(uint32_t dst, const void *src, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}

/* Matrix descriptor of a 128-byte swizzled operand in shared memory. */
static __device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 |
           1ull << 62;
}

static __device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

/* Keeps the compiler from moving accesses of an accumulator across the asynchronous products. */
static __device__ __forceinline__ void wg_pin(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

#define WG_D4(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3])
#define WG_D16(b) WG_D4(b), WG_D4(b + 4), WG_D4(b + 8), WG_D4(b + 12)
#define WG_D64 WG_D16(0), WG_D16(16), WG_D16(32), WG_D16(48)
#define WG_R64                                                                                     \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
    "%56, %57, %58, %59, %60, %61, %62, %63}"

/* d (+)= A B for 64 rows x 128 columns x 16: A and B K-major in shared memory. */
static __device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_R64 ", %64, %65, p, 1, 1, 0, 0;\n"
                 "}"
                 : WG_D64
                 : "l"(da), "l"(db), "r"(accumulate));
}

/* d += A B: A (16 columns of 64 rows) in registers, B MN-major in shared memory. */
static __device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_R64
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"
                 "}"
                 : WG_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

static __device__ __forceinline__ float wg_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ float wg_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* Byte offset of 16-byte chunk ch (of 16) of row r in a [2 halves][rows][128 B] operand. */
static __device__ __forceinline__ uint32_t wg_swz(int r, int ch, int rows) {
    return (uint32_t)((ch >> 3) * rows * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

/* What an item is: its group (the last with gitem <= item), first token, tokens, KV head. */
struct wg_item {
    int first, ntok, kvh;
};

static __device__ __forceinline__ wg_item wg_item_of(const att_desc &a, int item, int Hkv) {
    const int lo = att_last_le(a.gitem, a.n_grp_chain, a.n_grp - 1, item);
    const int32_t *gr = a.grp + 4 * lo;
    wg_item w;
    w.first = gr[0];
    w.ntok = gr[1];
    w.kvh = (item - a.gitem[lo]) % Hkv;
    return w;
}

/* ---- the kernel's pieces -------------------------------------------------------------- */

/* The producer (warpgroup 0): for each of the block's items, where each key of a tile lives and
 * whether every row sees it, then the tile's K and V into the ring, stage by stage. */
static __device__ __forceinline__ void wg_producer(const att_desc &a, const attn_params &p, long long *koff,
                                                   int *kinfo, uint32_t *okm, int *red, uint32_t base_s,
                                                   uint32_t bar_full, uint32_t bar_empty) {
    const int tid = threadIdx.x, lane = tid & 31;
    int tile_n = 0; /* tiles through the ring so far: stage and phase */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;" ::: "memory");
    const int pt = tid, warp = pt >> 5;
    int parity = 0;
    for (int item = a.n_work_chain + blockIdx.x; item < a.n_work_tc; item += gridDim.x, parity ^= 1) {
        const wg_item w = wg_item_of(a, item, p.Hkv);
        const att_tok t0 = att_token(a, a.cand_tok[w.first], p.layer, w.kvh);
        /* the tokens' visible counts and slots: largest count, smallest count and slot */
        int vmax = 0, vmin = INT_MAX, smin = INT_MAX;
        if (pt < w.ntok) {
            const att_tok tk = pt ? att_token(a, a.cand_tok[w.first + pt], p.layer, w.kvh) : t0;
            vmax = vmin = tk.n_vis;
            smin = tk.slot;
        }
        for (int o = 16; o > 0; o >>= 1) {
            vmax = max(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
            vmin = min(vmin, __shfl_xor_sync(0xffffffffu, vmin, o));
            smin = min(smin, __shfl_xor_sync(0xffffffffu, smin, o));
        }
        int *rd = red + parity * 12;
        if (lane == 0) {
            rd[warp * 3] = vmax;
            rd[warp * 3 + 1] = vmin;
            rd[warp * 3 + 2] = smin;
        }
        named_sync(1, 128);
        for (int k = 0; k < 4; k++) {
            vmax = max(vmax, rd[k * 3]);
            vmin = min(vmin, rd[k * 3 + 1]);
            smin = min(smin, rd[k * 3 + 2]);
        }
        const int end = vmax, full_end = min(vmin, t0.C);
        const int32_t *pages = a.pages + a.page_off[t0.b];
        const size_t head_off = p.layer_off + (size_t)w.kvh * p.head_stride;
        const int n_tiles = (end + WG_TK - 1) / WG_TK;
        for (int t = 0; t < n_tiles; t++, tile_n++) {
            const int st = tile_n % WG_STAGES, ph = (tile_n / WG_STAGES) & 1;
            mbar_wait(bar_empty + 8 * st, ph ^ 1);
            /* where key k of the tile lives, and whether every row sees it */
            const int k = t * WG_TK + pt;
            int ci = -1;
            const int slot = k < end ? att_key_slot(a, t0, k, &ci) : -1;
            koff[st * WG_TK + pt] = slot < 0 ? -1
                                             : (long long)((size_t)pages[slot / p.page_size] * p.page_stride +
                                                           head_off + (size_t)(slot % p.page_size) * WG_DH);
            kinfo[st * WG_TK + pt] = slot < 0 ? -2 : ci;
            const bool ok = slot >= 0 && (k < full_end || (ci >= 0 && k < vmin && !a.mask && slot <= smin));
            const uint32_t b = __ballot_sync(0xffffffffu, ok);
            if (lane == 0)
                okm[st * 4 + warp] = b;
            named_sync(1, 128);
            /* 16-byte chunk ch of key kk: two keys' 512 contiguous bytes per warp and copy */
            const uint32_t kdst = base_s + WG_KV + (uint32_t)st * 2 * WG_TILE;
#pragma unroll 4
            for (int j = 0; j < WG_TK * 16 / 128; j++) {
                const int e = pt + 128 * j, kk = e >> 4, ch = e & 15;
                const long long o = koff[st * WG_TK + kk];
                const uint32_t dst = kdst + wg_swz(kk, ch, WG_TK);
                const bf16 *src = o >= 0 ? p.kv + o + ch * 8 : p.kv;
                const int n = o >= 0 ? 16 : 0; /* no key: zeros (its scores are masked) */
                wg_cp16(dst, src, n);
                wg_cp16(dst + WG_TILE, o >= 0 ? src + p.kv_stride : p.kv, n);
            }
            mbar_track_copies(bar_full + 8 * st);
            mbar_arrive(bar_full + 8 * st);
        }
    }
}

/* A consumer's mask of the scores S of the tile at key t * WG_TK that some row does not see
 * whole: ki says what each key is (-2: none, -1: a cached slot, else its candidate), r_ok,
 * r_nvis, r_slot, r_i what this thread's rows g and g + 8 are. */
static __device__ __forceinline__ void wg_mask(const att_desc &a, const int *ki, int t, int c, const int (&r_ok)[2],
                                               const int (&r_nvis)[2], const int (&r_slot)[2], const int (&r_i)[2],
                                               float (&S)[64]) {
#pragma unroll
    for (int n = 0; n < 16; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int kl = n * 8 + 2 * c + e, kidx = t * WG_TK + kl, ci = ki[kl];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                bool vis = r_ok[hr] && ci != -2 && kidx < r_nvis[hr];
                if (vis && ci >= 0)
                    vis = a.mask ? a.mask[(size_t)r_i[hr] * a.T + a.cand_tok[ci]] != 0
                                 : a.cand_slot[ci] <= r_slot[hr];
                if (!vis)
                    S[4 * n + 2 * hr + e] = -INFINITY;
            }
        }
}

/* The online softmax step of this thread's rows over a tile: S from scores to weights, (m, l)
 * updated, alpha the factor O is to be scaled by. The scaling of O stays in the kernel: here,
 * the compiler would place the accumulators' zeroing otherwise (the same operations). */
static __device__ __forceinline__ void wg_softmax(float (&S)[64], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                                  float sl2) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 16; n++)
            mx = fmaxf(mx, fmaxf(S[4 * n + 2 * hr], S[4 * n + 2 * hr + 1]));
        mx = wg_quad_max(mx * sl2);
        const float m_new = fmaxf(m[hr], mx);
        float sum = 0.f;
        if (m_new == -INFINITY) { /* nothing seen yet */
            alpha[hr] = 1.f;
#pragma unroll
            for (int n = 0; n < 16; n++)
                S[4 * n + 2 * hr] = S[4 * n + 2 * hr + 1] = 0.f;
        } else {
            alpha[hr] = wg_exp2(m[hr] - m_new);
#pragma unroll
            for (int n = 0; n < 16; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float pv = wg_exp2(fmaf(S[4 * n + 2 * hr + e], sl2, -m_new));
                    S[4 * n + 2 * hr + e] = pv;
                    sum += pv;
                }
        }
        m[hr] = m_new;
        l[hr] = l[hr] * alpha[hr] + sum; /* this thread's columns; the quad sums at the end */
    }
}

/* A consumer's result: this thread's rows g and g + 8 of warp warp (O over the quad's sum of
 * l), those of the item (r_ok) written as token r_i's, query head kvh * ng + row % ng. */
static __device__ __forceinline__ void wg_write_rows(const attn_params &p, const float (&O)[64], const float (&l)[2],
                                                     const int (&r_ok)[2], const int (&r_i)[2], int cw, int warp,
                                                     int g, int c, int kvh, int ng) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float lt = l[hr];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        if (!r_ok[hr])
            continue;
        const int R = cw * 64 + warp * 16 + g + 8 * hr;
        const float inv = lt > 0.f ? 1.f / lt : 0.f;
        float *dst = p.out + ((size_t)r_i[hr] * p.H + kvh * ng + R % ng) * WG_DH + 2 * c;
#pragma unroll
        for (int n = 0; n < 16; n++)
            *(float2 *)(dst + n * 8) = make_float2(O[4 * n + 2 * hr] * inv, O[4 * n + 2 * hr + 1] * inv);
    }
}

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */


__global__ void __launch_bounds__(WG_THREADS, 1) attn_wg_kernel(attn_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char wg_raw[];
    const uint32_t raw_s = wg_smem_u32(wg_raw), base_s = (raw_s + 1023u) & ~1023u;
    unsigned char *base = wg_raw + (base_s - raw_s);
    long long *koff = (long long *)(base + WG_KOFF);
    int *kinfo = (int *)(base + WG_KINFO); /* -2: no key, -1: a cached slot, else the candidate */
    uint32_t *okm = (uint32_t *)(base + WG_OKM);
    const uint32_t bar_full = base_s + WG_BARS, bar_empty = bar_full + WG_STAGES * 8;
    int *t_i = (int *)(base + WG_TOK), *t_nvis = t_i + WG_ROWS, *t_slot = t_nvis + WG_ROWS;
    int *red = (int *)(base + WG_RED);

    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    if (tid == 0) {
        for (int s = 0; s < WG_STAGES; s++) {
            mbar_init(bar_full + 8 * s, 128);  /* the producer's threads, and their copies */
            mbar_init(bar_empty + 8 * s, 256); /* the consumers' threads */
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    pdl_trigger();
    const att_desc a = att_desc_load(p.desc);
    pdl_wait(); /* q, the cache and the outputs: written by the kernels before */
    const int ng = p.group;
    int tile_n = 0; /* tiles through the ring so far: stage and phase */

    if (wg == 0) {
        wg_producer(a, p, koff, kinfo, okm, red, base_s, bar_full, bar_empty);
        return;
    }

    /* ---- consumers ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;" ::: "memory");
    const int cw = wg - 1, ct = tid - 128, wt = tid & 127, warp = wt >> 5, g = lane >> 2, c = lane & 3;
    const float sl2 = p.scale * 1.4426950408889634f; /* scores to the exp2 domain */
    const uint32_t q_s = base_s + WG_Q + (uint32_t)cw * (WG_ROWS / 2) * WG_DH * 2;
    for (int item = a.n_work_chain + blockIdx.x; item < a.n_work_tc; item += gridDim.x) {
        const wg_item w = wg_item_of(a, item, p.Hkv);
        const int rows = w.ntok * ng;
        named_sync(2, 256); /* both consumers are done with the last item's tokens */
        if (ct < w.ntok) {
            const int i = a.cand_tok[w.first + ct];
            const att_tok tk = att_token(a, i, p.layer, w.kvh);
            t_i[ct] = i;
            t_nvis[ct] = tk.n_vis;
            t_slot[ct] = tk.slot;
        }
        /* this consumer's 64 Q rows as bf16, swizzled; rows past the item's are zeros */
#pragma unroll 2
        for (int j = 0; j < 8; j++) {
            const int e = wt + 128 * j, r = e >> 4, ch = e & 15, R = cw * 64 + r;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (R < rows) {
                const int i = a.cand_tok[w.first + R / ng];
                const float *src = p.q + ((size_t)i * p.H + w.kvh * ng + R % ng) * WG_DH + ch * 8;
                const float4 x0 = *(const float4 *)src, x1 = *(const float4 *)(src + 4);
                v = make_uint4(pack_bf16(x0.x, x0.y), pack_bf16(x0.z, x0.w), pack_bf16(x1.x, x1.y),
                               pack_bf16(x1.z, x1.w));
            }
            *(uint4 *)(base + (q_s - base_s) + wg_swz(r, ch, 64)) = v;
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        named_sync(2, 256);
        int end = 0;
        for (int k = 0; k < w.ntok; k++)
            end = max(end, t_nvis[k]);
        const int n_tiles = (end + WG_TK - 1) / WG_TK;
        const bool active = cw * 64 < rows;

        /* this thread's rows: g and g + 8 of its warp's 16 */
        int r_ok[2], r_nvis[2], r_slot[2], r_i[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int R = cw * 64 + warp * 16 + g + 8 * hr;
            r_ok[hr] = R < rows;
            const int tt = r_ok[hr] ? R / ng : 0;
            r_nvis[hr] = r_ok[hr] ? t_nvis[tt] : 0;
            r_slot[hr] = t_slot[tt];
            r_i[hr] = t_i[tt];
        }
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, O[64], S[64];
#pragma unroll
        for (int e = 0; e < 64; e++)
            O[e] = S[e] = 0.f;

        for (int t = 0; t < n_tiles; t++, tile_n++) {
            const int st = tile_n % WG_STAGES, ph = (tile_n / WG_STAGES) & 1;
            mbar_wait(bar_full + 8 * st, ph);
            if (active) {
                const uint32_t k_s = base_s + WG_KV + (uint32_t)st * 2 * WG_TILE, v_s = k_s + WG_TILE;
                wg_pin(S);
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < WG_DH / 16; kk++) {
                    const uint32_t off = (uint32_t)(kk & 3) * 32; /* 16 columns of a 128-byte row */
                    wgmma_ss(S, wg_desc(q_s + (kk >> 2) * 64 * 128 + off, 16, 1024),
                             wg_desc(k_s + (kk >> 2) * WG_TK * 128 + off, 16, 1024), kk > 0);
                }
                wg_commit();
                wg_wait0();
                wg_pin(S);
                const uint32_t *ok = okm + st * 4;
                if ((ok[0] & ok[1] & ok[2] & ok[3]) != 0xffffffffu)
                    wg_mask(a, kinfo + st * WG_TK, t, c, r_ok, r_nvis, r_slot, r_i, S);
                /* online softmax, in the exp2 domain: scores x = s * scale * log2(e) */
                float alpha[2];
                wg_softmax(S, m, l, alpha, sl2);
                if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
                    for (int n = 0; n < 16; n++) {
                        O[4 * n] *= alpha[0];
                        O[4 * n + 1] *= alpha[0];
                        O[4 * n + 2] *= alpha[1];
                        O[4 * n + 3] *= alpha[1];
                    }
                }
                uint32_t P[8][4];
#pragma unroll
                for (int kk = 0; kk < 8; kk++) {
                    P[kk][0] = pack_bf16(S[8 * kk], S[8 * kk + 1]);
                    P[kk][1] = pack_bf16(S[8 * kk + 2], S[8 * kk + 3]);
                    P[kk][2] = pack_bf16(S[8 * kk + 4], S[8 * kk + 5]);
                    P[kk][3] = pack_bf16(S[8 * kk + 6], S[8 * kk + 7]);
                }
                wg_pin(O);
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < 8; kk++) /* keys 16 kk..: two 8-key groups of both halves */
                    wgmma_rs(O, P[kk], wg_desc(v_s + kk * 16 * 128, WG_TK * 128, 1024));
                wg_commit();
                wg_wait0();
                wg_pin(O);
            }
            mbar_arrive(bar_empty + 8 * st);
        }
        if (!active)
            continue;
        wg_write_rows(p, O, l, r_ok, r_i, cw, warp, g, c, w.kvh, ng);
    }
#endif
}

/* Whether this build has the kernel's body (sm_90a features): the probe writes it here. */
__device__ int attn_wg_body;

__global__ void attn_wg_probe() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    attn_wg_body = 1;
#else
    attn_wg_body = 0;
#endif
}

/* ---- host side ------------------------------------------------------------------------ */

/* The probe's answer for a device, asked once per process (by its first context's
 * initialisation): a later context must not run it while another records a CUDA graph. */
static seer_status wg_has_body(seer_cuda *c, bool *out) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static signed char known[64]; /* 0: not asked, 1: no, 2: yes */
    const int dev = c->device >= 0 && c->device < 64 ? c->device : 0;
    pthread_mutex_lock(&mu);
    cudaError_t err = cudaSuccess;
    if (!known[dev]) {
        int h = 0;
        attn_wg_probe<<<1, 1, 0, c->stream>>>();
        err = cudaGetLastError();
        if (err == cudaSuccess)
            err = cudaMemcpyFromSymbolAsync(&h, attn_wg_body, sizeof h, 0, cudaMemcpyDeviceToHost, c->stream);
        if (err == cudaSuccess)
            err = cudaStreamSynchronize(c->stream);
        if (err == cudaSuccess)
            known[dev] = h ? 2 : 1;
    }
    *out = known[dev] == 2;
    pthread_mutex_unlock(&mu);
    CUDA_TRY(err);
    return SEER_OK;
}

seer_status attn_wg_init(seer_cuda *c) {
    c->attn->wg = 0;
    if (c->attn_variant != 0) /* seer_cuda_tuning.attn: mma or scalar */
        return SEER_OK;
    int major = 0;
    CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c->device));
    if (major != 9 || WG_SMEM > c->smem_optin)
        return SEER_OK;
    bool body = false;
    SEER_TRY(wg_has_body(c, &body));
    if (!body)
        return SEER_OK;
    CUDA_TRY(cudaFuncSetAttribute(attn_wg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM));
    c->attn->wg = 1;
    return SEER_OK;
}

bool attn_wg_serves(const seer_cuda *c, int Dh) { return c->attn->wg && Dh == WG_DH; }

seer_status attn_wg_capacity(seer_cuda *c, int *out) {
    int n = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attn_wg_kernel, WG_THREADS, WG_SMEM));
    *out = (n > 0 ? n : 1) * c->n_sm;
    return SEER_OK;
}

seer_status attn_wg_launch(seer_cuda *c, const attn_params &p, int grid) {
    CUDA_TRY(seer_cuda_launch(c, attn_wg_kernel, dim3((unsigned)grid), dim3(WG_THREADS), (size_t)WG_SMEM, p));
    LAUNCH_TRY("attn_wg_kernel");
    return SEER_OK;
}
