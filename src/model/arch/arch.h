/*
 * arch.h: architecture descriptors. A family (llama, qwen2, gemma3, ...) is one constant
 * seer_arch_desc in a file of its own under src/model/arch/, listed in the registry
 * (registry.c). The descriptor is data, not code: the GGUF key prefix, the defaults of the
 * common hyper-parameters, the family's own keys, the tensors of a layer in file order
 * (each a role of the table below, with its GGUF name and whether a file must have it) and
 * the blocks the forward pass runs. The loader (model.c), the synthetic builder
 * (synthetic.c), gen-model (gen_model.c) and the forward pass (decoder.c) read only this;
 * none of them tests a family's name.
 *
 * Adding a family: docs/adding-an-architecture.md.
 */
#ifndef SEER_ARCH_H
#define SEER_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The tensors a layer can have. The forward pass uses a block where its tensors are bound
 * (a per-head q/k norm, biases, the post-norms), so a family picks blocks by listing them.
 * The fused roles (QKV, GATE_UP) are loaded as row views q, k, v and gate, up of the one
 * tensor the file has; the forward pass sees the parts. */
typedef enum {
    SEER_LT_ATTN_NORM,      /* [D] before attention */
    SEER_LT_Q,              /* [H*Dh][D] */
    SEER_LT_K,              /* [Hkv*Dh][D] */
    SEER_LT_V,              /* [Hkv*Dh][D] */
    SEER_LT_BQ,             /* [H*Dh] bias */
    SEER_LT_BK,             /* [Hkv*Dh] bias */
    SEER_LT_BV,             /* [Hkv*Dh] bias */
    SEER_LT_O,              /* [D][H*Dh] */
    SEER_LT_Q_NORM,         /* [Dh] RMSNorm of each query head */
    SEER_LT_K_NORM,         /* [Dh] RMSNorm of each key head */
    SEER_LT_ATTN_POST_NORM, /* [D] on the attention output before the residual add */
    SEER_LT_FFN_NORM,       /* [D] before the FFN */
    SEER_LT_GATE,           /* [F][D] */
    SEER_LT_UP,             /* [F][D] */
    SEER_LT_DOWN,           /* [D][F] */
    SEER_LT_FFN_POST_NORM,  /* [D] on the FFN output before the residual add */
    SEER_LT_QKV,            /* [H*Dh + 2*Hkv*Dh][D]: q, k, v as one tensor (rows in that order) */
    SEER_LT_GATE_UP,        /* [2F][D]: gate then up as one tensor */
    SEER_LT_COUNT
} seer_layer_tensor;

/* The dimensions a tensor's shape is made of. */
typedef enum {
    SEER_DIM_ONE, SEER_DIM_D, SEER_DIM_F, SEER_DIM_QD, SEER_DIM_KVD, SEER_DIM_DH,
    SEER_DIM_QKVD, /* QD + 2 KVD */
    SEER_DIM_F2    /* 2 F */
} seer_arch_dim;

/* How gen-model fills a tensor and which of llama.cpp's quantisation-mix roles it has. */
typedef enum { SEER_FILL_NORMAL, SEER_FILL_NORM_WEIGHT, SEER_FILL_BIAS } seer_arch_fill;
typedef enum {
    SEER_QROLE_NONE, SEER_QROLE_ATTN_Q, SEER_QROLE_ATTN_K, SEER_QROLE_ATTN_V, SEER_QROLE_ATTN_OUT,
    SEER_QROLE_FFN_GATE, SEER_QROLE_FFN_UP, SEER_QROLE_FFN_DOWN
} seer_arch_qrole;

/* What every family shares about a role: its shape (rows x cols; a vector has rows ONE and
 * its length in cols), how tensor parallelism divides it, how it is generated. */
typedef enum { SEER_DIV_NONE, SEER_DIV_HEADS, SEER_DIV_HEADS_IN, SEER_DIV_FFN, SEER_DIV_FFN_IN } seer_arch_div;
typedef struct {
    seer_arch_dim rows, cols;
    bool vec;          /* a small f32 vector (norm weight, bias), not a matrix */
    seer_arch_div div;
    seer_arch_fill fill;
    seer_arch_qrole qrole;
    uint64_t synth_id; /* the synthetic builder's sub-stream of the seed, per layer */
    float synth_base;  /* synthetic vectors: base + small noise */
} seer_layer_tensor_info;

const seer_layer_tensor_info *seer_layer_tensor_get(seer_layer_tensor t);

/* One tensor of a family's layer: its role and GGUF name (after "blk.N."). */
typedef struct {
    seer_layer_tensor role;
    const char *name;
    bool required;
} seer_arch_tensor;

/* The family hyper-parameters beyond the common ones, with their defaults (seer_arch_key). */
typedef enum {
    SEER_HP_WINDOW,          /* sliding window in positions (0: none) */
    SEER_HP_WINDOW_PATTERN,  /* with a window: layers come in groups of this many, the last
                              * of each global, the others windowed; 0 or 1: all windowed */
    SEER_HP_ROPE_BASE_LOCAL, /* RoPE base of the windowed layers */
    SEER_HP_FINAL_SOFTCAP,   /* final-logit soft-capping (0: none) */
    SEER_HP_ATTN_SOFTCAP,    /* attention-logit soft-capping (0: none) */
    SEER_HP_COUNT
} seer_arch_hp;

typedef struct {
    const char *key;  /* after "<prefix>." */
    seer_arch_hp hp;
    double def;
    bool integer;
    double min, max;
} seer_arch_key;

typedef enum { SEER_ACT_SILU, SEER_ACT_GELU_TANH } seer_arch_act;

/* How the query is scaled before attention. */
typedef enum {
    SEER_QSCALE_HEAD_DIM,       /* 1/sqrt(Dh) */
    SEER_QSCALE_GEMMA3,         /* llama.cpp's Gemma 3 rule: 1/sqrt(Dh), 1/sqrt(D/H) for the
                                 * 62-layer (27B) model */
    SEER_QSCALE_GEMMA2,         /* llama.cpp's Gemma 2 rule: 1/sqrt(Dh), 1/sqrt(D/H) for the
                                 * 46-layer (27B) model */
} seer_arch_qscale;

typedef struct seer_arch_desc {
    const char *name;           /* general.architecture, and the prefix of its keys */
    /* defaults of the common keys where a file leaves them out */
    int ctx_default;
    float rope_base_default, norm_eps_default;
    /* blocks */
    int rope_neox;              /* 1: half-split RoPE pairs, 0: adjacent pairs */
    bool embed_scale;           /* the embedding times sqrt(D) */
    seer_arch_act act;          /* FFN: act(gate) * up */
    seer_arch_qscale qscale;
    bool output_tied;           /* the output is always the embedding: an output.weight in
                                 * the file is not read (llama.cpp's Gemma 2) */
    /* the tensors of a layer, in the order gen-model writes them */
    const seer_arch_tensor *tensors;
    int n_tensors;
    /* the family's own keys */
    const seer_arch_key *keys;
    int n_keys;
} seer_arch_desc;

/* The registry: the descriptor of a general.architecture name, NULL if none. */
const seer_arch_desc *seer_arch_find(const char *name);
/* The registered names as "a, b, c" into buf. */
void seer_arch_list(char *buf, size_t cap);
/* Whether d lists role t (and *required, when not NULL, whether a file must have it). */
bool seer_arch_has(const seer_arch_desc *d, seer_layer_tensor t, bool *required);
/* rows x cols of a role (a vector: rows 1) for these dimensions. */
void seer_arch_shape(seer_layer_tensor t, int D, int F, int QD, int KVD, int Dh, int *rows, int *cols);
/* The part roles of a fused role (QKV: Q, K, V; GATE_UP: GATE, UP) into parts; their count,
 * 0 for a role that is not fused. */
int seer_arch_fused_parts(seer_layer_tensor t, seer_layer_tensor parts[3]);

/* Values of the family hyper-parameters: the descriptor's defaults. */
typedef struct {
    double v[SEER_HP_COUNT];
} seer_arch_hparams;
void seer_arch_defaults(const seer_arch_desc *d, seer_arch_hparams *out);

/* Whether layer l of n is windowed under hp. */
bool seer_arch_layer_windowed(const seer_arch_hparams *hp, int l);

extern const seer_arch_desc seer_arch_llama, seer_arch_qwen2, seer_arch_qwen3, seer_arch_gemma2,
    seer_arch_gemma3, seer_arch_phi3;

#endif
