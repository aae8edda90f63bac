/*
 * backend.h: the op table the model code calls. A backend owns device memory (weights,
 * activations, the KV page storage and its layout) and implements each op; the model code
 * never touches a kernel directly. The CPU backend (src/backend/cpu/) is the reference
 * every other backend is tested against.
 *
 * All float pointers passed to ops are backend memory (from alloc); small index arrays are
 * host memory and the backend uploads them as needed. Ops run in order on one stream;
 * download() synchronises.
 */
#ifndef SEER_BACKEND_H
#define SEER_BACKEND_H

#include "gguf/gguf.h"
#include "kv/kv.h"
#include "kv/kv_type.h"
#include "seer.h"
#include "seer_bench.h"
#include "util/error.h"

#include <stdint.h>

typedef struct seer_backend seer_backend;

/* The most new tokens of one sequence in a forward call (a verification chain: gamma + 1)
 * whose outputs a backend keeps equal to decoding them one call at a time; longer runs (a
 * prompt) may be computed another way. Greedy speculation relies on it. */
#define SEER_INVARIANT_NEW_TOKENS 65

#define SEER_WEIGHT_MAX_SEG 4

/* A linear layer's weight W[rows = out][cols = in], in a dtype the backend computes with (its
 * float type, or a GGUF block encoding it keeps as stored). */
typedef struct {
    void *data;
    int rows, cols;
    int dtype;  /* ggml_type of data as the backend stores it */
    bool owned; /* false: points into the GGUF mapping or into another weight */
    int n_seg;  /* > 0: made by weight_concat of n_seg weights of seg_rows[j] rows each */
    bool interleaved; /* ... with their rows alternating (matmul_glu) */
    int seg_rows[SEER_WEIGHT_MAX_SEG];
} seer_weight;

/* How a tensor-parallel backend (src/parallel/) divides a weight among its N ranks; other
 * backends ignore it. The divided dimension is U = (rows or cols) / unit units (heads of Dh,
 * FFN columns of a block, vocabulary rows); with U >= N rank r holds units
 * [r U / N, (r + 1) U / N), with U < N (key/value heads when Hkv < N) the one unit r U / N, so
 * that every rank's query heads find their key/value heads locally.
 * ROWS: output rows (q, k, v, gate, up): each rank computes its part of y.
 * COLS: input columns (o, down), matching a ROWS output: each rank computes a partial y over
 *   its columns and the partials are summed across ranks (needs U >= N).
 * VOCAB: output rows as ROWS, for the LM head: the logits stay divided until an op needs a
 *   whole row (an argmax moves only ids and maxima between ranks).
 * NONE: every rank holds the whole weight (the embedding). */
typedef enum { SEER_SPLIT_NONE = 0, SEER_SPLIT_ROWS, SEER_SPLIT_COLS, SEER_SPLIT_VOCAB } seer_split_kind;
typedef struct {
    seer_split_kind kind;
    int unit; /* rows or columns per unit, >= 1 (0 = 1) */
} seer_weight_split;

typedef struct seer_comm seer_comm;
#define SEER_COMM_ID_BYTES 128

/* Geometry of the KV page storage. kv_bits 4 or 8: the storage also keeps a quantised copy
 * of every K/V row (kv/kv_quant.h), written by kv_store and rope_kv_store from the same f32
 * rows (and by the CPU's kv_fill_random; CUDA's refuses such a storage), committed by
 * kv_reserve and copied by kv_copy_pages with the rows; attention reads it when the batch
 * says kv_quant. */
typedef struct {
    int n_pages, page_size, n_layers, n_kv_heads, head_dim;
    int kv_bits; /* 0: no quantised copy */
    int kv_type; /* seer_kv_type of the rows (kv/kv_type.h); not FULL only with kv_bits 0 and
                  * on a backend whose kv_types has it */
} seer_kv_geom;

/* Bytes of one stored K or V row of the geometry: Hkv * Dh elements of elem_bytes (the
 * backend's full-precision element) or one kv/kv_type.h row. With seer_kv_geom_page_bytes the
 * one place a page's size is known from: a page is [n_layers][2 (K, V)][page_size][row], the
 * pool [n_pages][page] (the draft's quantised copy, kv_bits, lives apart). */
static inline size_t seer_kv_geom_row_bytes(const seer_kv_geom *g, int elem_bytes) {
    return g->kv_type != SEER_KV_FULL ? seer_kvt_row_bytes(g->kv_type, g->n_kv_heads, g->head_dim)
                                      : (size_t)g->n_kv_heads * g->head_dim * (size_t)elem_bytes;
}
static inline size_t seer_kv_geom_page_bytes(const seer_kv_geom *g, int elem_bytes) {
    return (size_t)g->n_layers * 2 * (size_t)g->page_size * seer_kv_geom_row_bytes(g, elem_bytes);
}
/* Byte offset of (page, layer, which, row) from the start of the pool. */
static inline size_t seer_kv_geom_row_off(const seer_kv_geom *g, int elem_bytes, int page, int layer,
                                          int which, int row) {
    return ((((size_t)page * g->n_layers + layer) * 2 + which) * g->page_size + row) *
           seer_kv_geom_row_bytes(g, elem_bytes);
}

/* The view one sequence attends under (see seer_view in seer.h); NULL = full. */
typedef struct {
    const int32_t *idx; /* [n_layers_view][n_heads_view][n] */
    int n, n_layers_view, n_heads_view;
    int32_t tail_start;
} seer_attn_view;

/* Everything attention needs to know about a batch; host memory, built once per forward
 * call and valid for every layer. Sequences are numbered 0..n_seq-1 within the batch. */
typedef struct {
    int T, n_heads, n_kv_heads, head_dim;
    float scale;                 /* 1/sqrt(Dh) */
    int page_size;
    int n_seq;
    int max_pages;               /* row stride of seq_pages */
    const int32_t *seq_pages;    /* [n_seq][max_pages] physical page ids */
    const int32_t *seq_len0;     /* [n_seq] cached slots before this call */
    const int32_t *seq_tok_off;  /* [n_seq + 1] offsets into seq_toks */
    const int32_t *seq_toks;     /* [T] token indices grouped by sequence, ascending slot */
    const seer_attn_view *const *seq_view; /* [n_seq] NULL = full view */
    const int32_t *tok_seq;      /* [T] batch sequence of each token */
    const int32_t *tok_slot;     /* [T] slot each token's K/V was written to */
    const uint8_t *mask;         /* [T][T] or NULL = causal by slot among new tokens */
    bool kv_quant;               /* attend through the quantised copy (geom kv_bits != 0):
                                  * every key and value seen, cached or new, is read from it */
    const int32_t *seq_prompt;   /* [n_seq] the sequence's leading new tokens that are prompt
                                  * tokens (seer_batch.prompt; causal among themselves): a
                                  * backend may compute those another way than decode steps */
    int window;                  /* > 0: sliding-window attention (a windowed layer's call):
                                  * a token at position p sees only keys at positions
                                  * > p - window (a cached slot's position is the slot, a new
                                  * token's is tok_pos); only backends with attn_window */
    const int32_t *tok_pos;      /* [T] positions of the new tokens (NULL: their slots) */
    float softcap;               /* > 0: each scaled score s becomes softcap tanh(s / softcap)
                                  * (Gemma 2's attention-logit soft-capping); only backends
                                  * with attn_softcap */
} seer_attn_batch;

/* Most alternatives logprob_rows returns per row (OpenAI's top_logprobs bound). */
#define SEER_LOGPROB_TOP_MAX 20

/* One row of logprob_rows: a row of the target's logits and the token whose log-probability
 * is wanted there. Several rows may name the same logits with other tokens. */
typedef struct {
    const float *logits; /* [V] backend memory */
    int32_t token;       /* 0 <= token < V */
} seer_logprob_row;

/* One row of sample_rows: the sampler transform of src/sample/sample.h
 * (seer_sampler_probs_with_history) of a row of logits, then a draw from it. */
typedef struct {
    const float *logits;           /* [V] backend memory */
    float *probs;                  /* [V] backend memory receiving the probabilities (may be
                                    * logits itself: in place), or NULL: not kept */
    const seer_sampler_params *sp; /* host; must pass seer_sampler_params_check */
    const int32_t *hist;           /* host [n_hist] tokens before this position, oldest first;
                                    * the penalty uses the last repeat_last_n of them */
    int n_hist;
    double u;                      /* uniform in [0, 1) for the draw; < 0: no draw. Unused at
                                    * temperature <= 0 (the argmax) */
    const uint32_t *mask;          /* host [(V + 31) / 32] tokens allowed (bit i % 32 of word
                                    * i / 32), the others' logits -inf after logit_bias and
                                    * before the penalties (a constraint's row); NULL: all */
} seer_sample_row;

/* One chain of accept_chains: speculative sampling's acceptance rule (Leviathan et al. 2023;
 * Chen et al. 2023) over nd draft tokens, as src/spec/verify.c states it. */
typedef struct {
    int nd;               /* draft tokens, >= 0 */
    const int32_t *draft; /* host [nd] */
    const float *p;       /* [nd + 1][V] backend memory: target probabilities at the pending
                           * token and after each draft token */
    const float *q;       /* [nd][V] backend memory: the distributions the drafts were drawn
                           * from, or NULL: one-hot at each draft token */
    const double *u;      /* host [nd + 1] uniforms: u[i] tests draft i; the emitted token is
                           * drawn with u[a + 1] after a rejection at a, u[nd] if all pass */
    bool resample_from_p; /* test hook: a rejection's token comes from p, not the residual
                           * (NOT exact; shows that the distribution tests have power) */
} seer_accept_chain;

/* One tree of accept_trees: multi-draft speculative sampling over a token tree, children
 * drawn without replacement (Sequoia; SpecInfer's rule for distinct children). From the
 * root, with p the target's probabilities at the node and q the distribution its children
 * were drawn from: each child x in order passes when q(x) > 0 and u q(x) < p(x) (then the walk
 * goes on from x); a child that fails sets p <- norm(max(p - q, 0)) (unchanged where that is
 * all zero) and q <- q with x removed, renormalised (all zero when nothing is left: later
 * children then fail and leave p as it is). Where no child passes, the emitted token is
 * drawn from p. */
typedef struct {
    int n;                 /* nodes below the root, >= 0 */
    const int32_t *tok;    /* host [n] */
    const int32_t *parent; /* host [n], parents before children, -1: the root */
    const float *p;        /* [n + 1][V] backend memory: row 0 the root, row j + 1 node j */
    const float *q;        /* [n][V] backend memory: row r the distribution the children of
                            * node r - 1 (row 0: of the root) were drawn from, or NULL: one-hot
                            * at the first child */
    const double *u;       /* host [n + 1]: the tests in walk order, then the emitted token's */
    bool resample_from_p;  /* test hook: p is never replaced by the residual (NOT exact) */
} seer_accept_tree;

typedef struct {
    const char *name;
    /* The most tokens of a forward call whose every row the backend computes as it would in
     * any other call (the same bits whatever the other rows are); 0: any number. */
    int invariant_max_tokens;
    /* Prompt tokens (seer_attn_batch.seq_prompt) are computed the same whatever the call
     * around them and however the prompt is cut (seer_context_prompt_cuts_free), in calls
     * of at most invariant_max_tokens tokens (where that is not 0). */
    bool prompt_cuts_free;
    void (*free)(seer_backend *be);
    /* A backend instance for one context's execution state (CPU: scratch and thread pool;
     * CUDA: stream, graphs, staging and scratch) that computes on be's weights and memory, so
     * that contexts of one model share nothing mutable; freed with its free. A context
     * allocates its KV storage and scratch through its instance. NULL: the execution state
     * stays in be. */
    seer_status (*exec_clone)(seer_backend *be, seer_backend **out);

    seer_status (*alloc)(seer_backend *be, size_t bytes, void **out);
    void (*dealloc)(seer_backend *be, void *p);
    seer_status (*upload)(seer_backend *be, void *dst, const void *src, size_t bytes);
    seer_status (*download)(seer_backend *be, void *dst, const void *src, size_t bytes);
    /* Host memory that upload and download copy from and into fastest (CUDA: page-locked for
     * every device of the process), freed with host_free. NULL: ordinary memory is. */
    seer_status (*host_alloc)(seer_backend *be, size_t bytes, void **out);
    void (*host_free)(seer_backend *be, void *p);

    /* Binds a GGUF tensor of shape [rows][cols] as a weight. how: SEER_WEIGHTS_STORED keeps
     * the tensor's encoding where the backend has kernels for it (else its own float type);
     * BF16 / F32 dequantise to that type (SEER_ERR_UNSUPPORTED where the backend has none). */
    seer_status (*weight_load)(seer_backend *be, const gguf_tensor *t, seer_weights_kind how,
                               seer_weight *out);
    /* weight_load with the division a tensor-parallel backend applies (NULL in the others:
     * the caller uses weight_load). */
    seer_status (*weight_load_split)(seer_backend *be, const gguf_tensor *t, seer_weights_kind how,
                                     seer_weight_split split, seer_weight *out);
    void (*weight_free)(seer_backend *be, seer_weight *w);
    /* A new owned weight of w's shape (and segments) whose rows are w's rows quantised to
     * dtype (Q8_0 or Q4_0) by ggml's reference rule, seer_gguf_quant's: the same bytes as seer_gguf_quant
     * of w's values gives, held as weight_load holds a stored tensor of that type. w is f32 or
     * bf16 (SEER_ERR_UNSUPPORTED for other dtypes). May be NULL: the backend cannot. */
    seer_status (*weight_quantize)(seer_backend *be, const seer_weight *w, int dtype, seer_weight *out);

    /* KV storage: allocated per context; layout private to the backend. kv_alloc reserves
     * room for g->n_pages pages (address space) and gives storage to none of them;
     * kv_reserve gives storage to pages [0, n_pages) (NaN where new), committed in chunks,
     * and sets *n_committed to the pages that have it now (>= n_pages, <= g->n_pages). The
     * base pointer never moves: kernels index pages from it and recorded forward calls keep
     * it. A failed kv_reserve (SEER_ERR_OOM) leaves the storage as it was. Storage is not
     * given back before kv_free. kv_mem_available: bytes the device could still give the KV
     * storage (free memory now), to refuse a pool that can never fit before any work. */
    seer_status (*kv_alloc)(seer_backend *be, const seer_kv_geom *g, void **out);
    seer_status (*kv_reserve)(seer_backend *be, void *kv, const seer_kv_geom *g, int n_pages,
                              int *n_committed);
    seer_status (*kv_mem_available)(seer_backend *be, uint64_t *bytes);
    void (*kv_free)(seer_backend *be, void *kv);
    seer_status (*kv_copy_pages)(seer_backend *be, void *kv, const seer_kv_geom *g,
                                 const seer_kv_copy *copies, int n);
    /* The host tier of the KV cache (kv/kv_host.h): whole pages copied between the storage and
     * host memory from host_alloc, as opaque bytes. kv_page_bytes: the bytes one page takes
     * there (its rows and, with kv_bits, its quantised copy), however the backend stores them.
     * kv_host_copy: for i < n, page pages[i] to (to_host) or from host + slots[i] * stride
     * (stride >= kv_page_bytes), on a stream of its own, so that the copies overlap the ops
     * issued after them. They start after every op issued before them (a copy to the host
     * reads what those ops wrote; one from the host writes nothing those ops still read);
     * until they are complete the caller must not issue ops that write pages being copied to
     * the host or read pages being copied from it, nor touch the host bytes. *ticket names
     * the copies: kv_host_done sets *done when they (and every earlier copy) are complete,
     * kv_host_wait returns when they are. SEER_ERR_INVALID_ARG (nothing copied) for a page
     * outside the pool or a negative slot. A backend may copy synchronously (the CPU:
     * memcpy; its tickets are done at once). NULL: no host tier on this backend. */
    size_t (*kv_page_bytes)(seer_backend *be, const seer_kv_geom *g);
    seer_status (*kv_host_copy)(seer_backend *be, void *kv, const seer_kv_geom *g, void *host,
                                size_t stride, const int32_t *pages, const int32_t *slots, int n,
                                bool to_host, uint64_t *ticket);
    seer_status (*kv_host_done)(seer_backend *be, uint64_t ticket, bool *done);
    seer_status (*kv_host_wait)(seer_backend *be, uint64_t ticket);
    /* Moves whole KV rows (every layer, K and V) from (src_page[i], src_row[i]) to
     * (dst_page[i], dst_row[i]) for i < n, in order, as if one after another: a move may read
     * a row an earlier move wrote. Index arrays are host memory. Tree verification uses it to
     * put the accepted path's rows into consecutive slots. SEER_ERR_INVALID_ARG (nothing
     * moved) for a page or row outside the pool. */
    seer_status (*kv_move_rows)(seer_backend *be, void *kv, const seer_kv_geom *g,
                                const int32_t *src_page, const int32_t *src_row,
                                const int32_t *dst_page, const int32_t *dst_row, int n);
    /* Reads the keys (which = 0) or values (1) of layer at (page[i], row[i]) for i < n into
     * host memory out [n][Hkv*Dh] as f32 (selection heuristics of the sparse drafts). */
    seer_status (*kv_read)(seer_backend *be, const void *kv, const seer_kv_geom *g, int layer,
                           int which, const int32_t *page, const int32_t *row, int n, float *out);
    /* Writes k, v [T][Hkv*Dh] of layer into (page[t], row[t]). */
    seer_status (*kv_store)(seer_backend *be, void *kv, const seer_kv_geom *g, int layer,
                            const float *k, const float *v, const int32_t *page,
                            const int32_t *row, int T);

    /* Called once per forward call before its first op. The index arrays later ops receive
     * (tokens, pos, page/row, out_rows and everything in ab) are exactly these pointers, so
     * a backend with its own memory uploads them once here and uses its copies. May be NULL. */
    seer_status (*batch_begin)(seer_backend *be, const seer_attn_batch *ab, const int32_t *tokens,
                               const int32_t *pos, const int32_t *page, const int32_t *row,
                               const int32_t *out_rows, int n_out);
    /* Optional pair around the ops of one forward call, after batch_begin (NULL: the caller
     * issues the ops at the batch's own sizes). forward_begin lets a backend record the ops
     * once per shape and replay the recording for later batches. *T and *n_out come in as
     * the batch's sizes and go out as the sizes to issue the ops at: padded (at most T_cap,
     * the rows the caller's buffers hold; padded rows are scratch the caller ignores). key
     * identifies the caller's buffers: the same key promises the same buffers and, for the
     * same sizes, the same sequence of ops. *done = true: the backend ran the whole forward
     * itself and the caller skips the ops. forward_end follows, after the ops or the replay,
     * with their status; *redo = true asks the caller to issue the ops again at the same
     * sizes (a recording failed; nothing of it ran), then to call forward_end once more. */
    seer_status (*forward_begin)(seer_backend *be, const void *key, int T_cap, int *T, int *n_out,
                                 bool *done);
    seer_status (*forward_end)(seer_backend *be, seer_status s, bool *redo);
    /* The pair for backends that must replay or record together (the ranks of tensor
     * parallelism): a replay (*done) or a recording that succeeded is not launched but held;
     * forward_launch(run = true) then launches it, run = false drops it, and the ops are
     * issued op by op at the sizes given (after forward_begin_hold: *done is then ignored;
     * after forward_end_hold: as after *redo). NULL where the backend has none. */
    seer_status (*forward_begin_hold)(seer_backend *be, const void *key, int T_cap, int *T,
                                      int *n_out, bool *done);
    seer_status (*forward_end_hold)(seer_backend *be, seer_status s, bool *redo);
    seer_status (*forward_launch)(seer_backend *be, bool run);

    /* y [T][D] = rows tokens[T] of the embedding weight (rows = V, cols = D). */
    seer_status (*embed)(seer_backend *be, float *y, const seer_weight *emb,
                         const int32_t *tokens, int T);
    /* y [T][D] = x * w / rms(x); y may equal x. */
    seer_status (*rmsnorm)(seer_backend *be, float *y, const float *x, const float *w, int T,
                           int D, float eps);
    /* y [T][rows] = x [T][cols] * W^T (+ bias [rows]). */
    seer_status (*matmul)(seer_backend *be, float *y, const float *x, const seer_weight *w,
                          const float *bias, int T);
    /* Rotates x [T][n_heads][Dh] in place at positions pos [T] with inv_freq [Dh/2];
     * neox: pairs (i, i + Dh/2), else adjacent pairs (2i, 2i+1). */
    seer_status (*rope)(seer_backend *be, float *x, const int32_t *pos, int T, int n_heads,
                        int head_dim, const float *inv_freq, int neox);
    /* out [T][H][Dh] = softmax(q K^T * scale) V over the slots each token may see. */
    seer_status (*attention)(seer_backend *be, float *out, const float *q, const void *kv,
                             const seer_kv_geom *g, int layer, const seer_attn_batch *ab);
    /* Optional fused forms (NULL: the model issues the plain ops instead).
     * weight_concat: one weight out of the rows of parts[0..n) (same cols and dtype, n <= 4),
     * with out->n_seg = n; each part's storage is released and the part becomes a view (not
     * owned) of its rows in out, usable as before, where the dtype allows (else, and with
     * interleave, it keeps its shape but no data: use out alone). interleave (n = 2, equal
     * rows): row i of part j is row 2 i + j of out. On failure the parts are unchanged.
     * matmul_split: ys[j] [T][seg_rows[j]] = x * W_j^T (+ biases[j] unless NULL) for the
     * segments of such a weight, in one pass over it.
     * matmul_add: y [T][rows] += x * W^T (the residual connection).
     * matmul_glu: y [T][rows / 2] = silu(x W_{2i}^T) * (x W_{2i+1}^T) for an interleaved
     * (gate, up) weight, the product exactly as swiglu computes it. Above its
     * invariant_max_tokens rows a backend may round the two products to bf16 first (CUDA).
     * rope_kv_store: rope of q [T][H][Dh] and k [T][Hkv][Dh] in place, then kv_store of k and
     * v, in one pass: the same results as rope, rope, kv_store. */
    seer_status (*weight_concat)(seer_backend *be, seer_weight *parts, int n, bool interleave,
                                 seer_weight *out);
    seer_status (*matmul_split)(seer_backend *be, float *const *ys, const float *x,
                                const seer_weight *w, const float *const *biases, int T);
    seer_status (*matmul_add)(seer_backend *be, float *y, const float *x, const seer_weight *w, int T);
    seer_status (*matmul_glu)(seer_backend *be, float *y, const float *x, const seer_weight *w, int T);
    /* The pre-norm blocks, each as one op with the values of the ops it stands for, so that
     * a backend need not write the norm's output h [T][cols] (scratch, like g: contents
     * afterwards unspecified). Both may be NULL.
     * norm_matmul_split: rmsnorm of x [T][cols] with w_norm into h, then matmul_split of h
     * (for a weight of one part, n_seg 0: matmul of h into ys[0], bias biases[0]).
     * ffn_glu: x [T][D] += Wdown glu(Wgu rmsnorm(x)): rmsnorm of x with w_norm into h,
     * matmul_glu into g [T][Wgu rows / 2], then matmul_add of g with Wdown. */
    seer_status (*norm_matmul_split)(seer_backend *be, float *const *ys, float *h, const float *x,
                                     const float *w_norm, float eps, const seer_weight *w,
                                     const float *const *biases, int T);
    seer_status (*ffn_glu)(seer_backend *be, float *x, float *h, const float *w_norm, float eps,
                           const seer_weight *wgu, const seer_weight *wdown, float *g, int T);
    /* norm_matmuls: rmsnorm of x [T][cols] with w_norm into h, then ys[j] [T][ws[j].rows] =
     * h ws[j]^T (+ biases[j] unless NULL) for n (1 to SEER_WEIGHT_MAX_SEG) plain weights of
     * cols columns in any dtypes: the values of rmsnorm and n matmuls, for weights that
     * weight_concat cannot join (a file's attn_v in another type than attn_q and attn_k).
     * May be NULL. */
    seer_status (*norm_matmuls)(seer_backend *be, float *const *ys, float *h, const float *x,
                                const float *w_norm, float eps, const seer_weight *ws, int n,
                                const float *const *biases, int T);
    seer_status (*rope_kv_store)(seer_backend *be, float *q, float *k, const float *v,
                                 const int32_t *pos, int T, int H, int Hkv, int Dh,
                                 const float *inv_freq, int neox, void *kv, const seer_kv_geom *g,
                                 int layer, const int32_t *page, const int32_t *row);
    /* y [n] = silu(g) * u */
    seer_status (*swiglu)(seer_backend *be, float *y, const float *g, const float *u, size_t n);
    /* Blocks some families need (NULL where the backend lacks them; the loader refuses a model
     * that needs a missing one, seer_model_check_blocks).
     * scale: x [n] *= s (the embedding times sqrt(D)).
     * geglu: y [n] = gelu(g) * u with GELU's tanh approximation,
     *   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    seer_status (*scale)(seer_backend *be, float *x, float s, size_t n);
    seer_status (*geglu)(seer_backend *be, float *y, const float *g, const float *u, size_t n);
    /* softcap: x [n] = c tanh(x / c) (final-logit soft-capping). */
    seer_status (*softcap)(seer_backend *be, float *x, float c, size_t n);
    /* weight_rows: out = rows [r0, r0 + n) of w, a view that does not own its data (valid
     * while w is): the parts of a tensor a file stores fused (q|k|v, gate|up). */
    seer_status (*weight_rows)(seer_backend *be, const seer_weight *w, int r0, int n, seer_weight *out);
    /* Contextual sparsity (src/model/sparse_ffn.c; Griffin, Dong et al. 2024), both NULL where
     * the backend has neither.
     * ffn_act_stats: stats [F] += for each row t of g [T][F] (the FFN's hidden activation,
     * act(gate) * up), g[t][j]^2 / sum_j' g[t][j']^2: each token's activation at unit norm, so
     * that every token weighs the same; a row of zeros adds nothing. tmp [T] is scratch.
     * Backends agree within float rounding (the sums' order).
     * weight_gather: a new owned weight of w's rows idx[0..n) ([n][cols]; cols false) or of
     * its columns idx[0..n) ([rows][n]; cols true), in the backend's float type (as
     * SEER_WEIGHTS_BF16 loads: CPU f32, CUDA bf16), its values w's as the backend dequantises
     * them, no segments. idx is host memory; SEER_ERR_INVALID_ARG for an index outside w (out
     * untouched), SEER_ERR_UNSUPPORTED for a dtype the backend cannot gather from. */
    seer_status (*ffn_act_stats)(seer_backend *be, float *stats, const float *g, int T, int F, float *tmp);
    seer_status (*weight_gather)(seer_backend *be, const seer_weight *w, const int32_t *idx, int n, bool cols,
                                 seer_weight *out);
    /* CATS (src/model/sparse_ffn.c; Lee et al. 2024), all three NULL where the backend has
     * none. The FFN's gate is "gate [F][D] with up [F][D]", or "gate an interleaved (gate, up)
     * weight [2F][D] (matmul_glu's) with up NULL", whose even rows are the gate's.
     * ffn_act_hist: hist [SEER_ACT_HIST_BINS] (backend memory) += per bin of
     * seer_act_hist_bin (backend/act_hist.h) the count of the entries of g [T][F], the gate's
     * pre-activation, whose |silu(g)| falls in it. gate NULL: g as given (h unused); else g is
     * scratch that the op first sets to h gate^T over h [T][D] (the gate of a fused weight
     * that has no rows of its own). Counts are exact; backends agree but for entries whose
     * silu rounds across a bin's edge.
     * weight_transpose: a new owned weight [cols][rows], w's transpose, in the backend's float
     * type (as weight_gather; down's columns as rows, read one neuron at a time).
     * SEER_ERR_UNSUPPORTED for a dtype the backend cannot read (CUDA: bf16 only).
     * ffn_cats: CATS's FFN on h [T][D] (the normed input): a[t][j] = silu(h_t . gate_j) for
     * every neuron, kept where |a[t][j]| >= thr and 0 elsewhere; then x [T][D] += sum over
     * the kept j of a[t][j] (h_t . up_j) down_t[j], down_t [F][D] being down's transpose
     * (weight_transpose). On return a [T][F] holds the kept products a[t][j] (h_t . up_j)
     * and 0 elsewhere (the sparse FFN's hidden activation). The rows of up and down_t that no
     * row of a keeps are not read. CPU: gate and up of any type it multiplies, down_t f32;
     * CUDA: up and down_t bf16 (the gate of a plain weight any type its matmul takes). Runs
     * op by op (a CUDA backend may grow scratch in it). Backends agree within float rounding
     * (the sums' order), and at the threshold's edge a neuron may be kept by one only. */
    seer_status (*ffn_act_hist)(seer_backend *be, double *hist, float *g, const float *h, const seer_weight *gate,
                                int T, int F);
    seer_status (*weight_transpose)(seer_backend *be, const seer_weight *w, seer_weight *out);
    seer_status (*ffn_cats)(seer_backend *be, float *x, float *a, const float *h, const seer_weight *gate,
                            const seer_weight *up, const seer_weight *down_t, float thr, int T);
    /* y [n] += x */
    seer_status (*add)(seer_backend *be, float *y, const float *x, size_t n);
    /* y [n_rows][D] = x[rows[i]] */
    seer_status (*gather_rows)(seer_backend *be, float *y, const float *x, const int32_t *rows,
                               int n_rows, int D);
    /* ids [n] (host) = argmax of each row of logits [n][V]: ties to the lowest id, NaN never
     * wins (as seer_argmax). Lets greedy decoding move token ids, not logits, to the host. */
    seer_status (*argmax_rows)(seer_backend *be, int32_t *ids, const float *logits, int n, int V);
    /* For each of n rows: probabilities by the sampler transform (kept in rows[r].probs when
     * given) and ids [n] (host, NULL: none wanted) = the argmax at temperature <= 0, else the
     * inverse-CDF draw in id order with rows[r].u (seer_sample_from_probs), -1 when u < 0.
     * Lets sampled decoding move ids, not logits, to the host. Other backends agree with the
     * CPU except within float rounding of a boundary (a top-k/top-p cut or a CDF step). */
    seer_status (*sample_rows)(seer_backend *be, const seer_sample_row *rows, int n, int V,
                               int32_t *ids);
    /* For each of n rows, the log-softmax of the raw logits (no sampler transform): lp [n]
     * (host) = that of rows[r].token, and its k (0..SEER_LOGPROB_TOP_MAX) largest entries
     * into top_id and top_lp [n][k] (host; may be NULL when k is 0), largest first, ties to
     * the lower id. NaN logits count as -inf. The log-sum-exp is taken in double around the
     * row's maximum; backends agree within float rounding (the sum's order). Lets logprobs
     * move a few numbers per row, not rows of V logits, to the host. */
    seer_status (*logprob_rows)(seer_backend *be, const seer_logprob_row *rows, int n, int V, int k,
                                float *lp, int32_t *top_id, float *top_lp);
    /* For each of n chains: n_acc [n] (host) = accepted draft tokens a, next [n] (host) = the
     * token emitted after them: from norm(max(p_a - q_a, 0)) after a rejection (p_a if that is
     * all zero), from p_nd if all are accepted (draft x_i passes when q_i(x) > 0 and
     * u[i] q_i(x) < p_i(x)). Exactly the CPU's seer_sample_residual / seer_sample_from_probs. */
    seer_status (*accept_chains)(seer_backend *be, const seer_accept_chain *chains, int n, int V,
                                 int32_t *n_acc, int32_t *next);
    /* For each of n trees (seer_accept_tree's rule): n_acc [n] (host) accepted nodes, their
     * ids in path [i * stride ..] (host, root to leaf), next [n] (host) the emitted token and
     * n_u [n] (host) the uniforms used (tests + 1). NULL where the backend has none. */
    seer_status (*accept_trees)(seer_backend *be, const seer_accept_tree *trees, int n, int V,
                                int stride, int32_t *n_acc, int32_t *path,
                                int32_t *next, int32_t *n_u);

    /* Benchmarks at real shapes without a file (src/model/synthetic.c). */

    /* A new owned weight [rows][cols] in the backend's dtype, generated where it lives:
     * element i (row-major) is seer_synth_value(seed, i, seer_synth_mul(scale)) of
     * backend/synth_hash.h, uniform with standard deviation scale, rounded to the dtype. */
    seer_status (*weight_random)(seer_backend *be, int rows, int cols, uint64_t seed, float scale,
                                 seer_weight *out);
    /* weight_random with a tensor-parallel division (NULL: use weight_random). Each rank draws
     * its part from a seed of its own: the same statistics, not the undivided weight's values. */
    seer_status (*weight_random_split)(seer_backend *be, int rows, int cols, uint64_t seed,
                                       float scale, seer_weight_split split, seer_weight *out);
    /* Random K and V (standard deviation scale) of every layer for n consecutive slots: the
     * first is row row0 of pages[0], the following ones continue through pages[1..n_pages).
     * The value of (layer, which = K 0 / V 1, i-th slot, element e < Hkv*Dh) is
     * seer_synth_value(seed, ((layer * 2 + which) * n + i) * Hkv*Dh + e, mul). Other rows
     * are not touched. */
    seer_status (*kv_fill_random)(seer_backend *be, void *kv, const seer_kv_geom *g,
                                  const int32_t *pages, int n_pages, int row0, int n,
                                  uint64_t seed, float scale);
    /* The device's copy bandwidth: bytes read + bytes written per second of a large copy
     * within the backend's memory, the median of several. */
    seer_status (*copy_bandwidth)(seer_backend *be, double *bytes_per_s);
    /* The host-to-device bandwidth: bytes per second of a large copy from host memory
     * (host_alloc) into backend memory, the median of several (the PCIe floor of streamed
     * layers). NULL where the backend has none. */
    seer_status (*h2d_bandwidth)(seer_backend *be, double *bytes_per_s);
    /* Returns when all work queued so far has finished (for timing). */
    seer_status (*sync)(seer_backend *be);
    /* Tensor parallelism (src/parallel/comm.h): a communicator over ranks[0..n), instances of
     * this backend on distinct devices (NULL where the backend has none). */
    seer_status (*comm_init)(seer_backend *const *ranks, int n, seer_comm **out);
    /* ... with ranks in separate processes (src/parallel/tp_remote.h): comm_unique_id writes
     * the id the ranks of one group share (SEER_COMM_ID_BYTES; NCCL's ncclGetUniqueId), which
     * rank 0 sends the others; comm_init_rank makes this process's rank of an n-rank group
     * from it, a collective that returns once every rank's process has called it (NCCL's
     * ncclCommInitRank). The communicator's calls are made with r = rank alone. Both NULL where
     * the backend has none (the CPU: rank 0 then stages the collectives, tp_remote_comm.c). */
    seer_status (*comm_unique_id)(seer_backend *be, void *id);
    seer_status (*comm_init_rank)(seer_backend *be, int n, int rank, const void *id, seer_comm **out);
    /* Makes be's device the calling thread's before its ops are issued (NULL: nothing to do);
     * one thread may drive several devices. */
    seer_status (*make_current)(seer_backend *be);
    /* Weights in host memory (src/model/host_weights.c): a layer whose weights do not fit on
     * the device keeps them in host memory (host_alloc) in exactly the bytes the backend
     * holds on the device, and each forward call copies them into one of two staging buffers
     * of backend memory before the layer's ops run; a weight whose data is such a copy is
     * the same weight. All three are NULL where the backend has no host tier.
     * weight_bytes: the bytes of w's data as the backend holds it (its repacked layout, where
     * the backend repacks at load), from w->data on; 0 for a weight without data.
     * stage: copies bytes from src (host memory) to dst (backend memory) into staging slot
     * (0 or 1), after every op issued before it has finished (so that a slot's old contents
     * may still be read by them) and, where the backend can, concurrently with the ops issued
     * after it (CUDA: on a copy stream of its own; the CPU copies at once). Part of a recorded
     * forward call like any op. stage_wait: the ops issued after it see the copies of slot
     * done. */
    size_t (*weight_bytes)(seer_backend *be, const seer_weight *w);
    seer_status (*stage)(seer_backend *be, int slot, void *dst, const void *src, size_t bytes);
    seer_status (*stage_wait)(seer_backend *be, int slot);
    /* Bytes of one stored K or V element (the floor's c); 0 = sizeof(float). */
    int kv_elem_bytes;
    /* Bit t set: the KV storage holds rows of seer_kv_type t (geom kv_type), stored by
     * kv_store / rope_kv_store, read by attention, kv_read, kv_copy_pages and kv_move_rows,
     * filled by kv_fill_random. SEER_KV_FULL is always had; 0 = only it. */
    unsigned kv_types;
    /* attention honours seer_attn_batch.window (sliding-window layers) */
    bool attn_window;
    /* attention honours seer_attn_batch.softcap */
    bool attn_softcap;
    /* rmsnorm takes q [T][H][Dh] and k as T*H rows of Dh (the per-head q/k norms of Qwen3 and
     * Gemma 3); a backend that divides the heads over ranks cannot */
    bool qk_norm;
} seer_backend_ops;

/* kv_move_rows's arguments, as every backend checks them. */
static inline seer_status seer_kv_move_check(const seer_kv_geom *g, const int32_t *src_page,
                                             const int32_t *src_row, const int32_t *dst_page,
                                             const int32_t *dst_row, int n) {
    for (int i = 0; i < n; i++)
        if (src_page[i] < 0 || src_page[i] >= g->n_pages || dst_page[i] < 0 ||
            dst_page[i] >= g->n_pages || src_row[i] < 0 || src_row[i] >= g->page_size ||
            dst_row[i] < 0 || dst_row[i] >= g->page_size)
            return seer_err(SEER_ERR_INVALID_ARG, "kv_move_rows: move %d (%d:%d -> %d:%d) outside %d pages of %d rows",
                            i, src_page[i], src_row[i], dst_page[i], dst_row[i], g->n_pages, g->page_size);
    return SEER_OK;
}

/* kv_host_copy's arguments, as every backend checks them. */
static inline seer_status seer_kv_host_check(const seer_kv_geom *g, size_t stride, size_t page_bytes,
                                             const int32_t *pages, const int32_t *slots, int n) {
    if (stride < page_bytes)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_host_copy: host slots of %zu bytes hold no page of %zu",
                        stride, page_bytes);
    for (int i = 0; i < n; i++)
        if (pages[i] < 0 || pages[i] >= g->n_pages || slots[i] < 0)
            return seer_err(SEER_ERR_INVALID_ARG, "kv_host_copy: copy %d (page %d, slot %d) outside %d pages",
                            i, pages[i], slots[i], g->n_pages);
    return SEER_OK;
}

/* kv_fill_random's arguments, as every backend checks them: the n slots from row0 fit in the
 * pages given, and those are pages of the pool. */
static inline seer_status seer_kv_fill_check(const seer_kv_geom *g, const int32_t *pages, int n_pages,
                                             int row0, int n) {
    if (row0 < 0 || row0 >= g->page_size || (long long)row0 + n > (long long)n_pages * g->page_size)
        return seer_err(SEER_ERR_INVALID_ARG, "kv_fill_random: %d slots from row %d need more than %d pages",
                        n, row0, n_pages);
    for (int p = 0; p < n_pages; p++)
        if (pages[p] < 0 || pages[p] >= g->n_pages)
            return seer_err(SEER_ERR_INVALID_ARG, "kv_fill_random: page %d outside the pool of %d",
                            pages[p], g->n_pages);
    return SEER_OK;
}

struct seer_backend {
    const seer_backend_ops *ops;
    void *impl;
};

seer_status seer_backend_cpu_init(int n_threads, seer_backend **out);
/* ... with quantised weights kept as stored (SEER_WEIGHTS_STORED, seer_backend_cpu_init's
 * choice) or dequantised to f32 (SEER_WEIGHTS_F32, the reference; BF16 also means f32 here). */
#ifdef SEER_HAVE_CUDA
seer_status seer_backend_cuda_init(int device, seer_backend **out);
/* ... with the variants t (NULL: the defaults, as seer_backend_cuda_init). */
seer_status seer_backend_cuda_init_tuned(int device, const seer_cuda_tuning *t, seer_backend **out);
bool seer_backend_cuda_available(void);
/* Forward calls of a CUDA backend so far: run as recorded graph replays, recorded (captured),
 * and run op by op; redone: recordings that failed, whose calls ran again op by op (tests
 * check that graphs are in use). */
void seer_backend_cuda_graph_stats(const seer_backend *be, long *replayed, long *captured,
                                   long *eager, long *redone);
/* The CUDA backend's quantised row blocks (matmul_qt.cu) computed on the host with the
 * kernels' own lane code, for tests on machines without a GPU: blocks, a [rows][cols] tensor of
 * dtype in GGUF blocks, repacked as the device does it; deq [rows][cols] the values as the
 * device dequantises them; y1 and ym [T][rows] = x [T][cols] W^T (x rounded to 8 bits per 32
 * columns) as the GEMV and as the tensor-core kernel compute it with one block over K, which
 * must agree bit for bit. SEER_ERR_UNSUPPORTED: not a row-block type, or cols not whole blocks
 * of 256. */
seer_status seer_cuda_qt_host_check(int dtype, const void *blocks, int rows, int cols, const float *x, int T,
                                    float *deq, float *y1, float *ym);
#endif

#endif
