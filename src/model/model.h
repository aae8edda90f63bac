/*
 * model.h: the loaded model (hyper-parameters, weights bound on a backend, vocabulary) and
 * the per-context state that the forward pass uses. A family is a descriptor (arch/arch.h)
 * that the loader, the synthetic builder and the forward pass (decoder.c) read; this header
 * is what they share.
 */
#ifndef SEER_MODEL_H
#define SEER_MODEL_H

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "kv/kv.h"
#include "model/arch/arch.h"
#include "seer.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    float *attn_norm, *ffn_norm;          /* [D] backend memory */
    seer_weight wq, wk, wv, wo;           /* [H*Dh][D], [Hkv*Dh][D] x2, [D][H*Dh] */
    seer_weight w_gate, w_up, w_down;     /* [F][D], [F][D], [D][F] */
    float *bq, *bk, *bv;                  /* biases or NULL */
    float *q_norm, *k_norm;               /* [Dh] per-head RMSNorm of q and k, or NULL */
    float *attn_post_norm, *ffn_post_norm; /* [D] sandwich norms, or NULL */
    /* wq|wk|wv and w_gate|w_up joined (seer_model_fuse; then the parts are views of their
     * rows in them); data NULL where the backend cannot */
    seer_weight wqkv, wgu;
    /* the tensors a file stores fused (SEER_LT_QKV, SEER_LT_GATE_UP) as bound; wq, wk, wv
     * and w_gate, w_up are then their rows (data NULL where the file has none, and once
     * seer_model_fuse has joined the parts into wqkv, wgu) */
    seer_weight file_qkv, file_gu;
} seer_layer;

/* How tensor parallelism divides a layer tensor of division kind div: attention heads of
 * head_unit rows (or columns, _IN), FFN units of ffn_unit, or not at all. */
static inline seer_weight_split seer_div_split(seer_arch_div div, int head_unit, int ffn_unit) {
    switch (div) {
    case SEER_DIV_HEADS: return (seer_weight_split){SEER_SPLIT_ROWS, head_unit};
    case SEER_DIV_HEADS_IN: return (seer_weight_split){SEER_SPLIT_COLS, head_unit};
    case SEER_DIV_FFN: return (seer_weight_split){SEER_SPLIT_ROWS, ffn_unit};
    case SEER_DIV_FFN_IN: return (seer_weight_split){SEER_SPLIT_COLS, ffn_unit};
    default: return (seer_weight_split){SEER_SPLIT_NONE, 1};
    }
}

/* The field of L that holds role t: a weight, or (vector roles) a float pointer. */
static inline seer_weight *seer_layer_weight(seer_layer *L, seer_layer_tensor t) {
    switch (t) {
    case SEER_LT_Q: return &L->wq;
    case SEER_LT_K: return &L->wk;
    case SEER_LT_V: return &L->wv;
    case SEER_LT_O: return &L->wo;
    case SEER_LT_GATE: return &L->w_gate;
    case SEER_LT_UP: return &L->w_up;
    case SEER_LT_DOWN: return &L->w_down;
    default: return NULL;
    }
}
static inline float **seer_layer_vec(seer_layer *L, seer_layer_tensor t) {
    switch (t) {
    case SEER_LT_ATTN_NORM: return &L->attn_norm;
    case SEER_LT_FFN_NORM: return &L->ffn_norm;
    case SEER_LT_BQ: return &L->bq;
    case SEER_LT_BK: return &L->bk;
    case SEER_LT_BV: return &L->bv;
    case SEER_LT_Q_NORM: return &L->q_norm;
    case SEER_LT_K_NORM: return &L->k_norm;
    case SEER_LT_ATTN_POST_NORM: return &L->attn_post_norm;
    case SEER_LT_FFN_POST_NORM: return &L->ffn_post_norm;
    default: return NULL;
    }
}

struct seer_model {
    seer_model_info info;
    const seer_arch_desc *desc;           /* the family */
    seer_arch_hparams hp;                 /* its own hyper-parameters */
    int window;                           /* sliding window of the windowed layers, 0: none */
    float attn_scale;                     /* the query scale of attention */
    float attn_softcap, final_softcap;    /* logit soft-capping, 0: none */
    gguf_file *gguf;
    seer_vocab *vocab;
    seer_backend *be;
    seer_weights_kind weights;            /* how the backend holds the weights */
    float *inv_freq;                      /* [Dh/2] backend memory, the file's scaling applied */
    float *inv_freq_host;                 /* [Dh/2] */
    float *inv_freq_local;                /* [Dh/2] backend memory: the windowed layers' RoPE
                                           * (their own base), or NULL: as inv_freq */
    float *inv_freq_local_host;
    float *inv_freq_long;                 /* [Dh/2] backend memory: LongRoPE's long factors
                                           * applied, for contexts longer than rope_orig_ctx;
                                           * NULL: none */
    float *inv_freq_long_host;
    int rope_orig_ctx;                    /* rope.scaling.original_context_length */
    float rope_mscale;                    /* the RoPE scaling's factor on q and k (YaRN's
                                           * attention temperature, attn_factor); 1: none */
    seer_weight tok_embd;                 /* [V][D] */
    seer_weight output;                   /* [V][D]; same data as tok_embd when tied */
    float *output_norm;                   /* [D] */
    seer_layer *layers;                   /* [n_layers] */
    /* The draft weights (draft_weights.c): the layers with their linear weights quantised to
     * draft_dtype (norms and biases shared with layers), and the LM head's copy; NULL / 0
     * without */
    seer_layer *draft_layers;
    seer_weight draft_output;
    int draft_dtype;
    /* Weights in host memory (host_weights.c): layers [n_resident, n_layers) hold their
     * linear weights' data in host[l - n_resident] (one block per layer, host_alloc'd, in the
     * backend's own layout); a context streams each into a staging slot of host_slot_bytes
     * per forward call. n_resident == n_layers: none. */
    int n_resident;
    struct seer_host_layer *host;
    size_t host_slot_bytes;
};

/* One layer's weights in host memory: its linear weights' data pointers lie in block. */
typedef struct seer_host_layer {
    void *block;  /* host memory (seer_host_alloc) */
    size_t bytes;
} seer_host_layer;

/* Per-sequence attention view stored by the context. */
typedef struct {
    bool set;
    int32_t *idx;
    int n, n_layers_view, n_heads_view;
    int32_t tail_start;
    seer_attn_view av;
} seer_seq_view;

/* Activation scratch sized for n_batch_max tokens. Backend memory. */
typedef struct {
    float *x, *h;          /* [T][D] */
    float *q, *att;        /* [T][H*Dh] */
    float *k, *v;          /* [T][Hkv*Dh] */
    float *g, *u;          /* [T][F] */
    float *logits;         /* [T][V] */
} seer_scratch;

typedef struct seer_sparse_ffn seer_sparse_ffn;

struct seer_context {
    seer_model *model;
    seer_backend *be;     /* where this context's forward calls run: its own instance of the
                           * model's backend (exec_clone), or the model's where it has none */
    seer_context_params params;
    seer_kv *kv;
    seer_kv_geom geom;
    void *kv_data;
    seer_scratch s;       /* rows_cap rows */
    int rows_cap;         /* n_batch_max rounded up to 8 */
    seer_seq_view *views; /* [n_seq_max] */
    /* host scratch for building the attention batch, sized for n_batch_max */
    int32_t *tok_seq, *tok_slot, *tok_page, *tok_row, *seq_toks, *seq_tok_off, *seq_len0;
    int32_t *seq_ids, *seq_ntok, *seq_pages, *out_rows, *seq_prompt;
    const seer_attn_view **seq_view;
    seer_kv_copy *copies;
    /* the capture flags and output of the call in progress (seer_batch.capture) */
    const uint8_t *cap_rows;
    float *cap_out;
    /* the call in progress multiplies by the draft weights (seer_batch.draft_weights); the
     * address of this field keys its recordings, as the context's address keys the others */
    bool draft_call;
    /* the sparse FFN (sparse_ffn.c), NULL: none; for the call in progress: the compact layers
     * it multiplies its FFN by (ffn_dim: seer_sparse_ffn_neurons), or the statistic [n_layers]
     * [ffn_dim] (backend memory) its full FFN adds to; NULL: neither */
    seer_sparse_ffn *sffn;
    const seer_layer *ffn_layers;
    float *ffn_stats;
    /* CATS (sparse_ffn.c): a sparse call's thresholds [n_layers] (host; its ffn_layers hold
     * the target's gate and up and down transposed), or the histograms [n_layers]
     * [SEER_ACT_HIST_BINS] (backend memory) a full call adds to; NULL: neither */
    const float *ffn_thr;
    double *ffn_hist;
    /* the two staging slots of streamed layers (host_weights.c), backend memory of
     * model->host_slot_bytes each; NULL without streamed layers */
    void *stage_slot[2];
};

/* seer_decode that returns, instead of logits, the argmax id of each flagged token's logits
 * (ties to the lowest id): only ids cross from the device. */
seer_status seer_decode_argmax(seer_context *c, const seer_batch *b, int32_t *ids_out);
/* seer_decode that leaves the logits of the flagged tokens where they are: *logits [n_out][V]
 * backend memory (row r: the r-th flagged token), valid until the next decode on c. The
 * sampling entry points below take them from there, so that only ids reach the host. */
seer_status seer_decode_keep(seer_context *c, const seer_batch *b, float **logits);
/* The backend's sample_rows over rows in c's backend memory (ids [n] host, may be NULL). */
seer_status seer_context_sample(seer_context *c, const seer_sample_row *rows, int n, int32_t *ids);
/* The backend's accept_chains: per chain the accepted count and the emitted token (host). */
seer_status seer_context_accept(seer_context *c, const seer_accept_chain *chains, int n,
                                int32_t *n_acc, int32_t *next);
/* The backend's accept_trees (SEER_ERR_UNSUPPORTED where it has none). */
seer_status seer_context_accept_trees(seer_context *c, const seer_accept_tree *trees, int n, int stride,
                                      int32_t *n_acc, int32_t *path, int32_t *next, int32_t *n_u);

/* The backend's logprob_rows over rows in c's backend memory: per row the raw log-softmax
 * at its token, and the k most likely tokens (SEER_ERR_UNSUPPORTED where it has none). */
seer_status seer_context_logprobs(seer_context *c, const seer_logprob_row *rows, int n, int k, float *lp,
                                  int32_t *top_id, float *top_lp);

/* The backend params ask for (AUTO: CUDA when built with it and a device is present), CUDA
 * with the variants t (NULL: the defaults). */
seer_status seer_model_pick_backend(seer_model_params params, const seer_cuda_tuning *t, seer_backend **out);
/* SEER_ERR_UNSUPPORTED where H query heads over Hkv key/value heads do not divide over tp
 * ranks (tp 0: no division). */
seer_status seer_model_check_tp(int H, int Hkv, int tp);
/* After the weights are bound: joins the weights the forward pass multiplies by the same
 * input (q, k, v; gate, up) into one each where the backend can (weight_concat), so that one
 * pass over memory serves them. */
seer_status seer_model_fuse(seer_model *m);
/* ... of layer l alone (the loader fuses each layer as it binds it). */
seer_status seer_model_fuse_layer(seer_model *m, int l);

/* The ggml type of a draft-weights name (seer_model_params.draft_weights): 0 for NULL or "". */
seer_status seer_draft_dtype_parse(const char *name, int *dtype);
/* After seer_model_fuse: makes the draft weights of dtype (0: none). On failure the caller
 * frees the model (seer_model_free frees what was made). */
seer_status seer_model_make_draft(seer_model *m, int dtype);
void seer_model_free_draft(seer_model *m);

/* How a sparse FFN picks its neurons (sparse_ffn.c). */
typedef enum {
    SEER_SFFN_GRIFFIN, /* per context: those of the largest statistic, in a compact copy */
    SEER_SFFN_CATS,    /* per token: those whose |silu(gate)| reaches the layer's threshold */
} seer_sffn_mode;

/* The context's sparse FFN (sparse_ffn.c): density (0, 1] of every layer's FFN, chosen by
 * mode from the statistic of c's full calls, chosen again after refresh full calls (0: once);
 * replaces one c had (kept where this fails). SEER_ERR_UNSUPPORTED where the backend lacks
 * the mode's ops (Griffin: ffn_act_stats, weight_gather; CATS: ffn_act_hist,
 * weight_transpose, ffn_cats) or, for CATS, where the FFN is not a SiLU gate added to the
 * residual or the layers lie in host memory. */
seer_status seer_sparse_ffn_init(seer_context *c, seer_sffn_mode mode, float density, int refresh);
void seer_sparse_ffn_free(seer_context *c);
/* Neurons a sparse call multiplies each FFN by (CATS: all F, kept per token; 0: c has no
 * sparse FFN). */
int seer_sparse_ffn_neurons(const seer_context *c);
/* Before a forward call on c: sets c->ffn_layers (a sparse call: chooses and gathers where
 * stale; CATS: and c->ffn_thr) or the statistic a full call without draft weights adds to
 * (c->ffn_stats, or CATS's c->ffn_hist). */
seer_status seer_sparse_ffn_begin(seer_context *c, bool sparse, bool draft_weights);

/* The backend ops m's family needs beyond the common ones, checked against its backend:
 * SEER_ERR_UNSUPPORTED naming the block where the backend lacks one. */
seer_status seer_model_check_blocks(const seer_model *m);
/* The layers' 1/base^(2i/Dh) frequencies for base into fr [Dh/2]. */
void seer_rope_base_freqs(float *fr, int head_dim, float base);
/* After the hyper-parameters and the backend: the windowed layers' own RoPE frequencies
 * (when the family gives them another base), and the query scale. */
seer_status seer_model_finish_rope(seer_model *m);

/* Applies Llama-3.1 RoPE scaling to inverse frequencies fr [half] in place. */
seer_status seer_rope_llama3(float *fr, int half, float factor, float lo, float hi, int orig);
/* Applies YaRN's frequency blend (factor > 0, orig trained positions) to fr [head_dim / 2]
 * of base in place; the attention temperature is the caller's. */
void seer_rope_yarn(float *fr, int head_dim, float base, float factor, int orig);

/* Internal hooks for the speculative drafters (src/spec/). */

/* Keys (which = 0) or values (1) of layer for slots [slot0, slot0 + n) of seq, as f32 into
 * out [n][Hkv*Dh]. */
seer_status seer_context_read_kv(seer_context *c, seer_seq_id seq, int layer, int which, int slot0,
                                 int n, float *out);

/* Moves the KV rows (all layers) of seq's slots src[i] to slots dst[i], i < n, in order (a
 * move may read a slot an earlier one wrote); every slot below the sequence's length and
 * every destination in a page of its own: tree verification puts the accepted path's rows
 * into consecutive slots before the length is cut. */
seer_status seer_seq_move_slots(seer_context *c, seer_seq_id seq, const int32_t *src,
                                const int32_t *dst, int n);

/* Weights in host memory (host_weights.c). */

/* Before the layers are bound: how many stay on the device (m->n_resident) for gpu_layers
 * (seer_model_params) with tp ranks, est_layer_bytes [n_layers] the bytes each layer's
 * weights will take on the device (an estimate; used by -1 only). A clear error where the
 * backend cannot stream layers, or with tp. */
seer_status seer_host_plan(seer_model *m, int gpu_layers, int tp, const uint64_t *est_layer_bytes);
/* After layer l is bound and fused (l >= m->n_resident): moves its linear weights' data into
 * one block of host memory, in the bytes the backend holds, and frees their device memory. */
seer_status seer_host_layer_offload(seer_model *m, int l);
/* The offloaded layers' blocks (seer_model_free). */
void seer_host_layers_free(seer_model *m);
/* A context's staging slots: made when its model has streamed layers, freed with it. */
seer_status seer_host_slots_alloc(seer_context *c);
void seer_host_slots_free(seer_context *c);
/* In a forward call: stages streamed layer l into its slot (nothing for a resident layer or
 * l >= n_layers), and *out = layer l as the ops read it, waiting for its slot (the layer
 * itself where it is resident). */
seer_status seer_host_stage(seer_context *c, int l);
seer_status seer_host_layer_get(seer_context *c, int l, const seer_layer **L, seer_layer *tmp);
/* The layer tensors' device bytes a file's tensor t takes on the backend of m (an estimate
 * for seer_host_plan). */
uint64_t seer_host_tensor_est(const seer_model *m, const gguf_tensor *t);

/* Runs the family's forward pass for a batch already placed in the KV cache (ab describes
 * it). Writes logits of the rows out_rows[0..n_out) into ctx->s.logits. */
seer_status seer_decoder_forward(seer_context *ctx, const int32_t *tokens, const int32_t *pos,
                               const seer_attn_batch *ab, const int32_t *out_rows, int n_out);

#endif
