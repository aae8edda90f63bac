/*
 * seer_bench.h: what benchmarks and tests use beside the engine's interface (seer.h):
 * random-weight model files and models made on the backend, K/V filled without a forward
 * pass, acceptance traces recorded from a real model and replayed on random weights, the
 * footprint the decode floor is computed from, and the device's copy bandwidth. The library
 * implements them; an application that serves models needs none of it.
 * Not for: anything an inference application calls (seer.h).
 */
#ifndef SEER_BENCH_API_H
#define SEER_BENCH_API_H

#include "seer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Synthetic acceptance and acceptance traces                                               */

/* Records the acceptance of every later round of g into t (which the caller keeps alive
 * while g runs, and saves); NULL stops recording. */
seer_status seer_gen_record_trace(seer_gen *g, seer_accept_trace *t);

/* Timing runs on random weights, where real acceptance means nothing. From the next round
 * on, g's draft tokens are accepted as trace recorded for the round's drafter kind and budget
 * (each sequence replays its own line from its own offset; trace kept alive by the caller),
 * and where trace is NULL or has no line of the kind, each independently with probability
 * alpha, in [0, 1). The ragged batches, rows and rewinds run as they would at that acceptance.
 * NOT lossless: output is not the target's; label every number so obtained. alpha 0 and
 * trace NULL: the verification rule decides again. */
seer_status seer_gen_set_synthetic(seer_gen *g, float alpha, const seer_accept_trace *trace);

seer_status seer_accept_trace_new(seer_accept_trace **out);
/* SEER_ERR_FORMAT (with the line) when malformed, SEER_ERR_IO when unreadable. */
seer_status seer_accept_trace_load(const char *path, seer_accept_trace **out);
seer_status seer_accept_trace_parse(const char *text, size_t len, seer_accept_trace **out);
seer_status seer_accept_trace_save(const seer_accept_trace *t, const char *path);
/* Rounds, drafted and accepted tokens of kind's lines (SEER_SPEC_NONE: all lines). */
void seer_accept_trace_counts(const seer_accept_trace *t, seer_spec_kind kind, int64_t *rounds,
                              int64_t *drafted, int64_t *accepted);
void seer_accept_trace_free(seer_accept_trace *t);

/* ---------------------------------------------------------------------------------------- */
/* Kernel variants and tuning of the CUDA backend                                           */

/* The CUDA backend's variants, for A/B runs in the lab, benchmarks and the tests of each
 * variant; the engine runs with the defaults. The library reads no environment: lab/, `seer
 * bench` and the tests that need a variant fill this (lab/cuda_env.h reads the SEER_CUDA_*
 * variables into it) and pass it at creation (seer_model_load_tuned,
 * seer_model_synthetic_tuned). The CPU backend ignores it. */
typedef struct {
    bool graphs;          /* decode steps as CUDA graphs (default true) */
    const char *profile;  /* a file for the device time of every op (NULL or "": none); graphs
                             are then off (events go between the ops) */
    bool matmul_cublas;   /* every bf16 matmul through cuBLAS */
    bool pdl;             /* programmatic dependent launch in the matmuls (default true) */
    int mm_xb_min;        /* fewest tokens for the x-blocked matmul (default 40) */
    int mm_tile;          /* token tile of the matmuls, a multiple of 8 in [8, 64] (0: the
                             default, 32, and 48 for long calls) */
    bool qt;              /* quantised weights in row blocks (default true; false: planes) */
    int qt_gemv_max;      /* most tokens of a row-block GEMV call (default 1) */
    bool qt_norm;         /* a norm before a row-block product writes its 8-bit x at once
                             (default true; false: the norm in f32, then the x kernel) */
    const char *attn;     /* the attention kernels: NULL or "" (the planner's choice), "mma"
                             (no wgmma kernel) or "scalar" (the scalar kernel for every shape) */
    bool allreduce_nccl;  /* tensor parallelism: every all-reduce through NCCL, none through
                             the one-shot kernel over peer memory */
    bool kv_rows_tc;      /* quantised KV rows (kv_type q8 / q4) through the tensor-core kernel
                             (default false until it has run on a GPU: attention_qkv.cu's
                             plain kernel for every call over such rows) */
} seer_cuda_tuning;

seer_cuda_tuning seer_cuda_default_tuning(void);
/* Sets the field named name ("graphs", "profile", "matmul", "pdl", "mm_xb_min", "mm_tile",
 * "qt", "qt_gemv_max", "qt_norm", "attn", "allreduce") from its text as the lab's variables
 * give it (SEER_CUDA_GRAPHS and so on, lab/cuda_env.h): "0" turns graphs, pdl, qt and qt_norm
 * off, "cublas" sends matmuls to cuBLAS, "nccl" every all-reduce to NCCL, numbers as numbers
 * (mm_xb_min <= 0: the default; an mm_tile outside [8, 64]: 32).
 * SEER_ERR_INVALID_ARG for an unknown name. value may be stored (profile, attn): the
 * caller keeps it alive while the tuning is used. */
seer_status seer_cuda_tuning_set(seer_cuda_tuning *t, const char *name, const char *value);

/* seer_model_load and seer_model_synthetic (below) with the CUDA backend's variants t (NULL:
 * the defaults). */
seer_status seer_model_load_tuned(const char *path, seer_model_params params, const seer_cuda_tuning *t,
                                  seer_model **out);

/* ---------------------------------------------------------------------------------------- */
/* Random-weight files                                                                      */

/* Writes a GGUF file with random weights of a registered family's shape (tests, benchmarks). */
typedef struct {
    const char *arch;  /* a registered family: "llama", "qwen2", "qwen3", "gemma2", "gemma3",
                          "phi3" */
    int n_vocab, dim, n_layers, n_heads, n_kv_heads, ffn_dim, ctx;
    int head_dim;      /* 0 = dim / n_heads */
    float rope_base;
    float norm_eps;
    bool tied;         /* no output.weight: the output shares token_embd */
    const char *dtype; /* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k",
                          "q5_k", "q6_k" for the linear weights, or the llama.cpp mixes
                          "q4_k_m", "q5_k_m" */
    uint64_t seed;
    float scale;       /* std of the random weights; 0 = 1/sqrt(dim) */
    int window;        /* families with sliding-window layers: its size (0: the family's
                          default, none for gemma3) */
    const char *rope_scaling; /* NULL or "none", "linear", "yarn", "longrope" (which also
                                 writes random rope_factors_short/_long tables) */
    float rope_factor;        /* rope.scaling.factor; 0: not written */
    int rope_orig_ctx;        /* rope.scaling.original_context_length; 0: not written */
    float rope_attn_factor;   /* rope.scaling.attn_factor; 0: not written */
} seer_gen_params;

seer_gen_params seer_gen_default_params(void);
seer_status seer_gen_model(const seer_gen_params *p, const char *path);

/* ---------------------------------------------------------------------------------------- */
/* Models and caches made up for timings                                                    */

/* A model with random weights of a Llama-family shape generated directly on the backend (no
 * file), for timings at real shapes; what it computes is noise. shape names a preset (see
 * seer_synthetic_shapes: "llama-3.1-8b", "llama-2-7b", "qwen2.5-7b", "tiny", ...); p may then
 * be NULL or give the seed and scale (its other fields are ignored). With shape NULL, p gives
 * the shape (p->dtype is ignored: weights take the backend's dtype, f32 on the CPU, bf16 on
 * CUDA). Weights are uniform with standard deviation scale (0: 1/sqrt(input dim) of each
 * weight), norm weights near 1, qwen2 biases small. The vocabulary is synthetic
 * (SentencePiece-style: <unk>, <s>, </s>, 256 byte tokens, filler pieces). The same shape and
 * seed give the same model on every backend, up to the rounding of its dtype. */
seer_status seer_model_synthetic(const char *shape, const seer_gen_params *p,
                                 seer_model_params mp, seer_model **out);
seer_status seer_model_synthetic_tuned(const char *shape, const seer_gen_params *p, seer_model_params mp,
                                       const seer_cuda_tuning *t, seer_model **out);
/* The preset names, NULL-terminated. */
const char *const *seer_synthetic_shapes(void);

/* Benchmark-only: appends len slots of random K/V (all layers, standard deviation 1, fixed
 * by seed) to seq without computing them, as if len tokens had been decoded. Afterwards the
 * sequence is len longer; its new slots hold no real tokens' KV. Errors as seer_decode
 * (SEER_ERR_KV_FULL, SEER_ERR_CONTEXT), leaving the context unchanged. */
seer_status seer_seq_fill_synthetic(seer_context *ctx, seer_seq_id seq, int len, uint64_t seed);
/* The KV host tier's copies of one sequence timed (`seer bench --resume`): seq's pages copied
 * to a host tier of their size (page-locked memory on CUDA) and back into a new sequence
 * *restored of the same length, each copy waited for: *save_s and *load_s seconds, *bytes the
 * bytes of either copy. The restored sequence holds seq's bits (a preempted request's resume
 * by copy); the caller frees it. */
seer_status seer_kv_host_time_copies(seer_context *ctx, seer_seq_id seq, double *save_s, double *load_s,
                                     double *bytes, seer_seq_id *restored);

/* What the decode floor of docs/performance.md is computed from. */
#define SEER_FOOTPRINT_MAX_TYPES 8
typedef struct {
    uint64_t weight_bytes;       /* W: all linear weights + the LM head as stored on the
                                    backend (the embedding table, of which a step reads only
                                    B rows, counts only when it is the tied LM head) */
    uint64_t kv_bytes_per_token; /* c: 2 * layers * Hkv * Dh * bytes of a stored KV element */
    int weight_elem_bytes;       /* bytes per stored weight element (4 f32, 2 bf16); 0 when
                                    the weights are stored in blocks of under a byte each
                                    (q4_0, q4_K, ...): W and weight_types hold their size */
    int kv_elem_bytes;
    uint64_t weight_elems;       /* elements of the weights W counts */
    /* W by stored dtype (each weight as the backend holds it: quantized where it keeps the
     * GGUF's blocks, bf16 or f32 where it dequantized them), largest first; dtypes past
     * SEER_FOOTPRINT_MAX_TYPES - 1 are summed into the last entry, named "other". */
    int n_weight_types;
    struct {
        char name[16];           /* ggml's name of the dtype: "bf16", "q8_0", "q4_K", ... */
        uint64_t bytes;
    } weight_types[SEER_FOOTPRINT_MAX_TYPES];
    uint64_t draft_weight_bytes; /* the draft weights' copy of W (seer_model_params.
                                    draft_weights), 0 without one */
    char draft_weights[16];      /* their dtype's name ("q4_0"), "" without */
    char file_type[16];          /* the GGUF's general.file_type as llama.cpp names it
                                    ("BF16", "Q4_0", "Q4_K_M"), "" when absent or synthetic */
    int n_layers;                /* layers c counts */
    int windowed_layers, window; /* layers with sliding-window attention and their window
                                    (0, 0 without): such a layer reads at most window slots */
} seer_model_footprint;

/* KV bytes one sequence's step reads at L cached slots, every layer at most view slots (0:
 * no view, such as a sparse self-draft's budget) and a windowed layer at most its window. */
static inline double seer_footprint_kv_read(const seer_model_footprint *fp, long long L, long long view) {
    const long long v = view > 0 && view < L ? view : L;
    const long long w = fp->window > 0 && fp->window < v ? fp->window : v;
    const int n = fp->n_layers > 0 ? fp->n_layers : 1;
    return (double)fp->kv_bytes_per_token / n * ((double)(n - fp->windowed_layers) * v + (double)fp->windowed_layers * w);
}

/* Neurons per layer a sparse FFN of density (spec setting ffn_density) keeps of an FFN of F:
 * whole blocks of 32 where F is (so that its copy of down can be quantised). What a draft step
 * at that density reads of each FFN, for the floor of benchmarks. */
int seer_sparse_ffn_keep(int F, float density);

void seer_model_get_footprint(const seer_model *model, seer_model_footprint *out);
/* Tokens of KV (every layer's K and V rows, stored as type) that the free memory of model's
 * device holds now: the most B x L a context of that type could be given. SEER_ERR_UNSUPPORTED
 * where the backend cannot tell its free memory or has no such type. */
seer_status seer_model_kv_capacity(const seer_model *model, seer_kv_type type, uint64_t *tokens);
/* Measures the copy bandwidth of the model's backend device (bytes read + written per
 * second of a large copy, median of several; allocates and frees its buffers). */
seer_status seer_model_measure_bandwidth(const seer_model *model, double *bytes_per_s);
/* The host-to-device bandwidth of model's backend: bytes per second of a large copy from
 * page-locked host memory to the device (median of several). With layers in host memory
 * (seer_model_params.gpu_layers) a forward call cannot beat host_weight_bytes over it: the
 * "PCIe floor". */
seer_status seer_model_measure_h2d_bandwidth(const seer_model *model, double *bytes_per_s);

/* Tensor parallelism (seer_model_params.tp >= 1): the mean time in seconds of one all-reduce
 * of rows rows of the residual stream (rows x D floats), made as a forward call makes two per
 * layer, over reps after a warm-up. SEER_ERR_UNSUPPORTED for a model not divided. */
seer_status seer_model_time_all_reduce(const seer_model *model, int rows, int reps, double *seconds);
#ifdef __cplusplus
}
#endif

#endif
