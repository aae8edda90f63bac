/*
 * seer.h: the one public header of libseer.
 *
 * Objects:
 *   seer_model    weights, hyper-parameters and tokenizer; read-only, shared.
 *   seer_context  a paged KV pool, the sequences living in it and the scratch memory of one
 *                 backend; one forward call (seer_decode) runs a batch of tokens spread over
 *                 several sequences.
 *   seer_sampler  logits -> probabilities -> token, seedable.
 *   seer_detok    streaming detokenizer that only ever emits complete UTF-8.
 *
 * Dimension letters used in comments: B batch (sequences), T tokens in a forward call,
 * L cache length, D model dim, H / Hkv query / KV heads, Dh head dim, V vocabulary,
 * K draft budget, G gamma (tokens speculated per round).
 *
 * Threads: a model is read-only after loading and may be shared by contexts. Each context
 * has its own execution state (CPU: scratch and thread pool; CUDA: stream, recorded graphs,
 * staging and scratch, beside the device allocator all contexts share under a lock), so
 * contexts of one model may run in different threads at once (tests/test_threads.c: the CPU
 * under ThreadSanitizer, and CUDA on a GPU). A context, and a scheduler with its requests,
 * is used by one thread at a time (seer_request_cancel excepted); tokenization is safe from
 * any thread.
 *
 * Errors: every function that can fail returns a seer_status; on failure the state of the
 * objects it was given is unchanged and seer_last_error() describes the problem. The
 * library never exits or aborts on bad input.
 */
#ifndef SEER_H
#define SEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SEER_OK = 0,
    SEER_ERR_IO,          /* file could not be opened, read or mapped */
    SEER_ERR_FORMAT,      /* malformed or corrupt input (GGUF, UTF-8, ...) */
    SEER_ERR_UNSUPPORTED, /* well-formed but not supported (tensor type, architecture) */
    SEER_ERR_INVALID_ARG, /* a parameter is out of range or inconsistent */
    SEER_ERR_OOM,         /* memory allocation failed or would be absurd */
    SEER_ERR_KV_FULL,     /* the KV page pool has no room for the request */
    SEER_ERR_CONTEXT,     /* a sequence would grow past the context length */
    SEER_ERR_BACKEND,     /* the compute backend failed (e.g. a CUDA error) */
    SEER_ERR_INTERNAL,
} seer_status;

/* The message of the last error on this thread ("" if none). */
const char *seer_last_error(void);
/* A short constant name of a status ("SEER_ERR_IO", ...). */
const char *seer_status_str(seer_status s);
/* Copies text s to buf for printing, NUL-terminated and cut (between characters) to fit in
 * cap: control characters (C0, DEL, the C1 range U+0080..U+009F) and bytes that are not
 * UTF-8 become \n, \t, \r, \xNN or \uNNNN, so that names and strings read from a file
 * cannot drive a terminal. Messages behind seer_last_error() are escaped this way already.
 * Returns buf. */
const char *seer_text_escape(const char *s, char *buf, size_t cap);

/* ---------------------------------------------------------------------------------------- */
/* Model                                                                                    */

typedef struct seer_model seer_model;

typedef enum { SEER_BACKEND_AUTO = 0, SEER_BACKEND_CPU, SEER_BACKEND_CUDA } seer_backend_kind;

/* How linear weights are held on the backend. STORED: in their GGUF blocks where the backend
 * computes on them (CPU and CUDA: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; the CPU with
 * 8-bit activations, CUDA with bf16 ones), other dtypes dequantised to the backend's float type;
 * BF16: dequantised to bf16 (CUDA); F32: dequantised to f32 (the CPU reference path). */
typedef enum { SEER_WEIGHTS_STORED = 0, SEER_WEIGHTS_BF16, SEER_WEIGHTS_F32 } seer_weights_kind;

/* The most ranks of tensor parallelism (seer_model_params.tp). */
#define SEER_TP_MAX 16

typedef struct {
    seer_backend_kind backend; /* AUTO: CUDA when built with it and a GPU is present */
    seer_weights_kind weights; /* STORED by default */
    int n_threads;             /* CPU threads; 0 = all cores (with tp: shared among the ranks) */
    /* Tensor parallelism: 0 = none; N >= 1 divides the model over N ranks (CUDA: devices
     * 0..N-1 through NCCL; CPU: N thread pools), Megatron style: heads and FFN columns split,
     * an all-reduce after the attention output and the FFN, the LM head split by vocabulary.
     * 1 runs the same machinery over one rank. Greedy decoding is bit-identical to plain
     * decoding at the same N; against N = 1 the logits differ by the order of the sums. */
    int tp;                    /* 0 .. SEER_TP_MAX */
    /* Ranks in other processes (docs/tensor-parallel.md): with tp >= 2 and tp_addr set
     * ("HOST:PORT"), this process is rank 0 (device 0; the CPU: n_threads threads of its own)
     * and listens there for ranks 1 .. tp-1, each a process of its own (seer_tp_worker;
     * `seer worker`) that runs the ops rank 0 sends it. tp_timeout_ms bounds the wait for the
     * ranks to connect and for the answer to each op (0: 60 s and 600 s); a rank that dies
     * fails the call that meets it, and every later one, with its reason. NULL or "": every
     * rank in this process. */
    const char *tp_addr;
    int tp_timeout_ms;
    bool vocab_only;           /* read hyper-parameters and vocabulary only: no weights,
                                  no backend (for inspection and tokenisation) */
    /* Draft weights: "q8_0" or "q4_0" makes, at load, a copy of every linear weight and of
     * the LM head quantised to that type (ggml's rule) from the weights as held (f32 or bf16;
     * with tp each rank quantises its part), which forward calls with seer_batch.draft_weights
     * multiply by: draft steps of self-drafts (seer_spec_params.draft_weights) then read a
     * quarter to a half of the bytes. Its size is seer_model_footprint.draft_weight_bytes. NULL or "": none. */
    const char *draft_weights;
    /* Layers whose weights stay in device memory (llama.cpp's -ngl counts the same way); the
     * others keep theirs in host memory, in the layout the device reads, and every forward
     * call streams them through two staging buffers, the copy of the next layer overlapped
     * with the current one's compute: a model larger than the device runs, at the speed of
     * the host-to-device link. Layers 0..N-1 stay; the embedding, the LM head and the norms
     * always do. -1 (the default): from free memory, every layer where the model fits (the
     * CPU backend, whose device is the host: every layer); >= n_layers: every layer. Not
     * with tp or draft_weights. */
    int gpu_layers;
} seer_model_params;

seer_model_params seer_model_default_params(void);

/* Rank rank (1 .. n-1) of a tensor-parallel group whose rank 0 listens at addr
 * (seer_model_params.tp_addr), run in this process until rank 0 says goodbye: connects
 * (trying for p.tp_timeout_ms, 0: 60 s), then runs every op rank 0 sends on a backend of
 * p.backend (CUDA: device rank; the CPU: p.n_threads threads). SEER_OK after rank 0's goodbye;
 * otherwise the reason (rank 0 unreachable or refusing, the connection lost). */
seer_status seer_tp_worker(const char *addr, int rank, int n, seer_model_params p);

/* Loads a GGUF model. Returns SEER_OK and sets *out, or an error and leaves *out NULL. */
seer_status seer_model_load(const char *path, seer_model_params params, seer_model **out);
void seer_model_free(seer_model *model);

typedef struct {
    char arch[32];        /* "llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3" */
    char name[128];       /* general.name, may be "" */
    int n_vocab;          /* V */
    int dim;              /* D */
    int n_layers;
    int n_heads;          /* H */
    int n_kv_heads;       /* Hkv */
    int head_dim;         /* Dh */
    int ffn_dim;
    int ctx_train;        /* trained context length */
    float rope_base;
    float norm_eps;
    bool tied_output;     /* output projection shares the token embedding */
    int rope_neox;        /* 1: half-split pairs (qwen2), 0: adjacent pairs (llama) */
    char tokenizer[16];   /* "llama" (SentencePiece) or "gpt2" (byte-level BPE) */
    int token_bos, token_eos; /* -1 when absent */
    uint64_t n_params;
    uint64_t file_size;
    const char *backend;  /* "cpu" or "cuda" */
    int n_layers_resident; /* layers whose weights are in device memory (gpu_layers) */
    uint64_t host_weight_bytes; /* bytes of the other layers' weights, in host memory and
                                   copied to the device once per forward call */
} seer_model_info;

void seer_model_get_info(const seer_model *model, seer_model_info *info);

/* ---------------------------------------------------------------------------------------- */
/* Tokenizer                                                                                */

/* Encodes UTF-8 text. add_bos prepends BOS when the vocabulary has one; parse_special lets
 * control-token texts such as "<s>" in the input become those tokens. Writes at most cap ids
 * to out and sets *n_out to the number the text needs (which may exceed cap: then
 * SEER_ERR_INVALID_ARG). Invalid UTF-8 is rejected with SEER_ERR_FORMAT naming the offset. */
seer_status seer_tokenize(const seer_model *model, const char *text, size_t len, bool add_bos,
                          bool parse_special, int32_t *out, int cap, int *n_out);

/* seer_tokenize with parse_special, except that a control token (such as "<|im_end|>") is
 * recognised only where every byte of its text is marked in special_ok [len]: text from
 * elsewhere (what a user typed) stays text even when it spells one. special_ok comes from
 * seer_chat_render_marked. */
seer_status seer_tokenize_marked(const seer_model *model, const char *text, const uint8_t *special_ok,
                                 size_t len, bool add_bos, int32_t *out, int cap, int *n_out);

/* The raw piece of one token, as bytes (byte-fallback tokens give their byte, the
 * SentencePiece space marker becomes ' '). Returns the piece length, or -1 for a bad id. */
int seer_token_piece(const seer_model *model, int32_t token, char *buf, int cap);

int seer_token_bos(const seer_model *model);
int seer_token_eos(const seer_model *model);
int seer_n_vocab(const seer_model *model);

/* Streaming detokenizer: feed tokens one at a time, get back only complete UTF-8 (partial
 * multi-byte sequences are held until completed; bytes that can never form valid UTF-8 are
 * emitted as U+FFFD). */
typedef struct seer_detok seer_detok;
seer_status seer_detok_init(const seer_model *model, seer_detok **out);
void seer_detok_free(seer_detok *d);
/* Appends the text of token to buf (NUL-terminated, at most cap-1 bytes + NUL); returns the
 * number of bytes written, or -1 if cap is too small (nothing is consumed then). */
int seer_detok_push(seer_detok *d, int32_t token, char *buf, int cap);
/* Emits whatever is held back (as U+FFFD where incomplete). */
int seer_detok_flush(seer_detok *d, char *buf, int cap);

/* ---------------------------------------------------------------------------------------- */
/* Context: KV pool, sequences, forward pass                                                */

typedef struct seer_context seer_context;
typedef int32_t seer_seq_id;

/* How the target's own K/V rows are stored (seer_context_params.kv_type; src/kv/kv_type.h).
 * FULL: the backend's full precision (bf16 on CUDA, f32 on the CPU). Q8 / Q4: only a quantised
 * row, symmetric, one f32 scale per head row of Dh values (q8) or per 32 values (q4): about
 * 1.9x / 3.2x the tokens of bf16 in the same memory. Lossy with respect to the full-precision
 * model; speculation stays exact with respect to the quantised-KV model. */
typedef enum { SEER_KV_FULL = 0, SEER_KV_Q8, SEER_KV_Q4 } seer_kv_type;

/* "bf16", "q8", "q4" (the --kv-type names), or NULL for another value. */
const char *seer_kv_type_name(seer_kv_type type);
/* The type a --kv-type name stands for; SEER_ERR_INVALID_ARG (out untouched) for another. */
seer_status seer_kv_type_parse(const char *name, seer_kv_type *out);

typedef struct {
    int n_ctx;       /* most tokens one sequence may hold; 0 = the model's trained context,
                      * less where the KV pool of n_seq_max such sequences would not fit in
                      * the device's free memory. An n_ctx whose pool can never fit is
                      * refused (SEER_ERR_OOM) before anything is allocated. */
    int n_seq_max;   /* most sequences alive at once */
    int n_batch_max; /* most tokens in one seer_decode call */
    int page_size;   /* tokens per KV page */
    int n_pages;     /* pages in the pool; 0 = n_seq_max * ceil(n_ctx / page_size) */
    int kv_quant_bits; /* 0, 4 or 8: the pool also keeps every K/V row quantised to this many
                        * bits (groups of 32 values with an f32 scale and minimum), written
                        * with the row; a batch with kv_quant attends through it (the
                        * quantised-KV self-draft, SEER_SPEC_QUANTKV). Counted in the pool's
                        * size (seer_kv_memory). Needs kv_type SEER_KV_FULL */
    seer_kv_type kv_type; /* how the pool stores the K/V rows (SEER_KV_FULL by default); a
                           * backend without the type refuses it (SEER_ERR_UNSUPPORTED) */
} seer_context_params;

seer_context_params seer_context_default_params(void);

seer_status seer_context_init(seer_model *model, seer_context_params params, seer_context **out);
void seer_context_free(seer_context *ctx);
const seer_model *seer_context_model(const seer_context *ctx);
int seer_context_n_ctx(const seer_context *ctx);

/* Sequences. A new sequence is empty. Fork makes dst share src's pages (copy-on-write).
 * Rewind shortens a sequence to new_len tokens (speculation rollback). */
seer_status seer_seq_new(seer_context *ctx, seer_seq_id *out);
seer_status seer_seq_fork(seer_context *ctx, seer_seq_id src, seer_seq_id *out);
seer_status seer_seq_rewind(seer_context *ctx, seer_seq_id seq, int new_len);
void seer_seq_free(seer_context *ctx, seer_seq_id seq);
/* Tokens in the cache of seq, or -1 if seq is not alive. */
int seer_seq_len(const seer_context *ctx, seer_seq_id seq);
/* Pages in the pool not used by any sequence. */
int seer_kv_free_pages(const seer_context *ctx);

/* The KV pool's size. The pool is reserved whole but given storage in chunks as its pages
 * are first used, so committed bytes follow the longest the sequences have been. */
typedef struct {
    int n_pages;              /* capacity */
    int n_pages_committed;    /* pages with storage */
    uint64_t bytes_reserved;  /* storage of all n_pages */
    uint64_t bytes_committed; /* storage in use by seer for the pool now */
    int quant_bits;             /* kv_quant_bits of the context */
    uint64_t quant_bytes_reserved;  /* the part of bytes_reserved that is the quantised copy */
    uint64_t quant_bytes_committed; /* the part of bytes_committed that is the quantised copy */
    seer_kv_type kv_type;           /* the context's */
} seer_kv_memory;
void seer_context_kv_memory(const seer_context *ctx, seer_kv_memory *out);
/* Bytes a quantised KV copy of bits (4 or 8; kv_quant_bits) adds per cached token of model,
 * every layer's K and V rows; 0 for other bits. */
uint64_t seer_kv_quant_bytes_per_token(const seer_model *model, int bits);
/* Bytes of the K/V rows of one cached token (every layer) as model's backend stores them in
 * type; 0 for a type the backend does not have. */
uint64_t seer_kv_bytes_per_token(const seer_model *model, seer_kv_type type);

/* A restricted attention view for a sequence (sparse self-drafts). While set, a token of
 * this sequence attends to the cached slots listed in idx plus every slot >= tail_start, and
 * to the new tokens of its own forward call under the batch's mask. Keys keep their absolute
 * RoPE positions. idx is [n_layers_view][n_heads_view][n] sorted ascending slot indices,
 * where n_layers_view is 1 (same for all layers) or the model's n_layers, and n_heads_view
 * is 1 (same for all KV heads) or the model's n_kv_heads. The data is copied. */
typedef struct {
    const int32_t *idx;
    int n;
    int n_layers_view;
    int n_heads_view;
    int32_t tail_start;
} seer_view;

seer_status seer_seq_set_view(seer_context *ctx, seer_seq_id seq, const seer_view *view);
void seer_seq_clear_view(seer_context *ctx, seer_seq_id seq);

/* One forward call over T tokens spread over several sequences. The tokens of a sequence are
 * appended to its cache in batch order (slot = length before the call + rank within the
 * call); pos gives each token's RoPE position (normally its slot). Without a mask a new token
 * attends to its sequence's cached slots (under its view) and to the new tokens of the same
 * sequence up to itself. With mask ([T][T] bytes, mask[i*T+j] != 0: token i may attend new
 * token j; only same-sequence pairs are honoured) the attention among new tokens follows the
 * mask instead (tree verification). Each token must attend at least to itself. */
typedef struct {
    int n_tokens;            /* T */
    const int32_t *token;    /* [T] */
    const seer_seq_id *seq;  /* [T] */
    const int32_t *pos;      /* [T] */
    const uint8_t *logits;   /* [T] nonzero: return logits for this token; NULL: none */
    const uint8_t *mask;     /* [T][T] or NULL (causal) */
    const uint8_t *capture;  /* [T] nonzero: copy this token's post-RoPE queries (every layer)
                                to queries; NULL: none (selection heuristics of sparse drafts) */
    float *queries;          /* host [n_layers][n_captured][H*Dh], the flagged tokens in batch
                                order; needed when capture is given */
    bool kv_quant;           /* attend through the pool's quantised copy of K/V instead of the
                              * full-precision rows (the context needs kv_quant_bits); the
                              * rows this call writes are stored in full precision as always */
    bool draft_weights;      /* multiply by the model's draft weights (seer_model_params.
                              * draft_weights; the model needs them) instead of its weights */
    bool sparse_ffn;         /* multiply each FFN by the context's compact copy of its chosen
                              * neurons (a draft step of a context whose generator runs a
                              * sparse FFN: spec settings ffn_density, ffn_refresh) */
    const uint8_t *prompt;   /* [T] nonzero: a prompt token. A sequence's leading flagged
                              * tokens in the call (attending causally, under a full view) may
                              * be computed another way than decode steps (the CPU: in tiles,
                              * faster); where seer_context_prompt_cuts_free says so, each of
                              * them the same whatever call it is in and however the prompt is
                              * cut into calls. Unflagged tokens are computed as decode and
                              * verification steps are. NULL: a sequence's run of more than
                              * SEER_INVARIANT_NEW_TOKENS new tokens (no mask) counts as prompt */
} seer_batch;

/* Whether the context's backend computes every prompt token (seer_batch.prompt) the same
 * whatever call it is in and however its prompt is cut, in calls of up to the tokens it
 * computes batch-invariantly (seer_sched_params.mix_max_tokens's default: the CPU any, CUDA
 * 256; CUDA's longer calls take other kernels). Where it does, a scheduler may cut prompts
 * anywhere, e.g. to the time left beside running streams. */
bool seer_context_prompt_cuts_free(const seer_context *ctx);

/* Runs the batch. logits_out receives [n_out][V] floats in batch order of the flagged
 * tokens, where n_out is the number of flagged tokens (logits_out may be NULL if none).
 * On error no sequence changes length. */
seer_status seer_decode(seer_context *ctx, const seer_batch *batch, float *logits_out);

/* Host memory that the model's backend downloads logits into fastest, for logits_out:
 * page-locked on a GPU, where a download into ordinary memory is staged and copied again on
 * the host (on an H100, 7 MB of logits took 0.70 ms that way and 0.14 ms into page-locked
 * memory); ordinary memory on the CPU. Free it with seer_host_free on the same model, before
 * the model is freed. */
seer_status seer_host_alloc(const seer_model *model, size_t bytes, void **out);
void seer_host_free(const seer_model *model, void *p);

/* ---------------------------------------------------------------------------------------- */
/* Sampling                                                                                 */

typedef struct {
    float temperature;    /* 0 = greedy (argmax, ties -> lowest id) */
    int top_k;            /* 0 = off */
    float top_p;          /* 1 = off */
    float min_p;          /* 0 = off */
    float repeat_penalty; /* 1 = off */
    int repeat_last_n;    /* tokens of history the penalties look at */
    float frequency_penalty; /* 0 = off: subtracted from a logit once per occurrence of its
                                token in the window, after repeat_penalty (as llama.cpp) */
    float presence_penalty;  /* 0 = off: subtracted once from the logit of a token in the window */
    uint64_t seed;
    /* OpenAI's logit_bias: n_logit_bias entries (at most SEER_MAX_LOGIT_BIAS, distinct tokens,
     * biases in [-100, 100]) added to those tokens' logits before everything else (before the
     * penalties); ids outside [0, V) are ignored. Borrowed: the sampler and the request copy
     * the entries, a caller's own params must keep them alive while it uses them. */
    const struct seer_logit_bias *logit_bias;
    int n_logit_bias;
} seer_sampler_params;

#define SEER_MAX_LOGIT_BIAS 1024
typedef struct seer_logit_bias {
    int32_t token;
    float bias;
} seer_logit_bias;

seer_sampler_params seer_sampler_default_params(void);

typedef struct seer_sampler seer_sampler;
seer_status seer_sampler_init(seer_sampler_params params, int n_vocab, seer_sampler **out);
void seer_sampler_free(seer_sampler *s);
/* Adds a token to the history the repetition penalty looks at. */
void seer_sampler_accept(seer_sampler *s, int32_t token);
void seer_sampler_reset(seer_sampler *s);

/* Applies penalties, temperature and the truncations to logits [V] and writes the final
 * probability vector to probs [V] (zeros outside the kept set; one-hot under greedy).
 * logits is not modified. */
void seer_sampler_probs(const seer_sampler *s, const float *logits, float *probs);
/* Samples one token from logits; if probs is not NULL it receives the final distribution.
 * Returns -1 when s or logits is NULL. */
int32_t seer_sampler_sample(seer_sampler *s, const float *logits, float *probs);
/* A uniform draw in [0, 1) from the sampler's generator (0 when s is NULL). */
double seer_sampler_uniform(seer_sampler *s);

/* ---------------------------------------------------------------------------------------- */
/* Generation with lossless speculative decoding                                            */

/* Drafters. All are lossless: the target verifies every proposal (greedy: bit-identical to
 * plain decoding; sampling: exact rejection sampling, identically distributed). */
typedef enum {
    SEER_SPEC_NONE = 0,  /* plain decoding */
    SEER_SPEC_STREAMING, /* self-draft, sinks + recent window (MagicDec, StreamingLLM view) */
    SEER_SPEC_RETRIEVAL, /* self-draft, top chunks by key-mean score per KV head (TriForce) */
    SEER_SPEC_SNAPKV,    /* self-draft, positions chosen at prefill by the last queries (SnapKV) */
    SEER_SPEC_DRAFT,     /* a standalone small draft model sharing the vocabulary */
    SEER_SPEC_NGRAM,     /* prompt lookup: continue the latest earlier match of the last n tokens */
    SEER_SPEC_QUANTKV,   /* self-draft through the pool's quantised KV copy (kv_quant_bits),
                          * optionally under the streaming view (kv_view) */
    SEER_SPEC_HIERARCHY, /* TriForce's hierarchy: the draft model (draft_model) drafts chains of
                          * hier_gamma for the target under a sparse view (hier_base), which
                          * verifies them exactly and proposes the result to the full target */
    SEER_SPEC_AUTO,      /* every round, the drafter, K and G (or plain decoding) that the
                          * calibrated cost model (seer_spec_cost) predicts fastest for the
                          * batch; plain decoding throughout when no cost table is given */
} seer_spec_kind;

/* Kinds are below this: the ones above and any drafter registered later (arrays per kind are
 * of this size). */
#define SEER_SPEC_KIND_MAX 16

/* A speculation kind this build knows: none, each drafter of the registry, auto. */
typedef struct {
    seer_spec_kind kind;
    const char *name;        /* its name for seer_spec_kind_parse (static storage) */
    const char *help;        /* one line saying what it is */
    bool drafter;            /* a drafter (not none or auto) */
    bool needs_draft_model;  /* drafts with seer_spec_params.draft_model */
    bool tree_base;          /* fills token trees (tree_size) */
    bool hier_base;          /* may be the hierarchy's middle level (hier_base) */
    bool draft_weights;      /* its steps may multiply by the model's draft weights
                                (seer_spec_params.draft_weights) */
} seer_spec_kind_info;
/* The i-th kind (0: none, then the drafters in the registry's order, auto last) into *out;
 * false past the last. Lists of kinds (help, accepted values, metrics) enumerate this. */
bool seer_spec_kind_info_at(int i, seer_spec_kind_info *out);

/* A calibrated cost table for SEER_SPEC_AUTO: measured times of the target's decode and
 * verification calls and of each drafter's step, per batch size and cache length, for one
 * model on one device. */
typedef struct seer_spec_cost seer_spec_cost;

/* An acceptance trace: what drafters accepted, round by round, per sequence, recorded from
 * a real model (seer_gen_record_trace) and replayed by benchmarks on random weights
 * (seer_gen_set_synthetic, seer_bench.h). Its file format is in src/spec/accept_trace.c. */
typedef struct seer_accept_trace seer_accept_trace;

/* Drafters' settings. Each drafter declares its own (src/spec/draft_*.c: the option's names,
 * type, range, default and help), and the registry lists them all: the CLI's options, the
 * server's "seer" fields and the scheduler's grouping of requests enumerate
 * seer_spec_option_at, so a drafter's settings are named in its file alone. A library user
 * sets them by name through seer_spec_set (the CLI flag without dashes or the server's field:
 * "budget", "sinks", "chunk", "refresh_every", "snap_window", "draft_budget", "kv_view",
 * "hier_base", "hier_gamma", "ngram_max", ...), which checks the range the drafter declared,
 * and reads them with seer_spec_get; their values travel in seer_spec_params.ext and each
 * drafter copies the ones it uses into a struct of its own. A setting several drafters use
 * (the sparse views' budget K and sinks) is one setting. */
typedef enum {
    SEER_SPEC_OPT_INT,   /* an integer */
    SEER_SPEC_OPT_FLOAT, /* a real number */
    SEER_SPEC_OPT_KIND,  /* a speculation kind's name, one of the option's choices */
    SEER_SPEC_OPT_CHOICE, /* one of the option's choices by name; its value is the name's index */
} seer_spec_opt_type;

typedef struct {
    const char *drafter;  /* the kind name of the drafter that declares it */
    const char *flag;     /* its command-line option without the dashes ("spec-budget") */
    const char *json;     /* its field in the server's "seer" object ("budget") */
    const char *metavar;  /* the value's name in the help ("K") */
    const char *help;     /* what it does, without its default (one line) */
    seer_spec_opt_type type;
    double def, lo, hi;   /* default and range (INT, FLOAT; KIND: the default kind; CHOICE:
                             the default's index) */
    const char *const *choices; /* KIND, CHOICE: the accepted names, NULL-terminated */
    bool own_only;        /* means something only with its drafter's kind (the CLI refuses it
                             with another) */
} seer_spec_option;

/* Drafter settings kept by name (seer_spec_params.ext), at most this many in all. */
#define SEER_SPEC_EXT_MAX 32

typedef struct {
    seer_spec_kind kind;
    int gamma;             /* G: tokens drafted per round */
    seer_model *draft_model; /* draft, hierarchy: the draft model (same vocabulary) */
    int tree_size;         /* > 0: each round proposes a token tree of this many nodes (SpecInfer,
                              Sequoia) instead of a chain of gamma; its depth is at most
                              tree_depth (0: gamma). One-hot drafters (ngram) still propose
                              chains, the degenerate tree. -1: the size is chosen online
                              (Sequoia's hardware-aware choice, up to SEER_TREE_AUTO_MAX nodes)
                              from the acceptance measured so far and the verification cost
                              table below; implies tree_replan (8 when 0) */
    int tree_depth;
    int tree_replan;       /* trees: every this many rounds re-plan the shape with Sequoia's
                              dynamic program from the positional acceptance measured online
                              (same node count, depth <= tree_depth); 0: the fixed default
                              shape. Greedy output is unchanged: shapes only change proposals */
    int tree_cost_points;  /* tree_size -1: the verification cost of n tokens relative to one, */
    const int *tree_cost_n;      /* at tree_cost_points ascending sizes n (>= 1); 0 points: */
    const double *tree_cost;     /* measured once at init (n = 1, 2, 4, .. 32 on the target) */
    float tree_draft_cost; /* tree_size -1: one draft step relative to a decode step (> 0), or
                              0: measured online from the rounds' timings (needs the measured
                              cost table) */
    const seer_spec_cost *cost; /* auto: the table the choice per round reads (kept alive by the
                                   caller while the generator or scheduler runs); NULL: plain */
    bool draft_weights;    /* self-drafts (streaming, retrieval, snapkv, quantkv, and the
                              hierarchy's middle level): draft steps multiply by the model's
                              quantised draft weights (seer_model_params.draft_weights).
                              auto's sparse self-drafts do so whenever the model holds them,
                              as its cost table was calibrated */
    /* The drafters' settings (seer_spec_set / seer_spec_get by name; a setting not set reads
     * as its default). */
    double ext[SEER_SPEC_EXT_MAX];
    uint32_t ext_set;      /* bit i: ext[i] was set */
} seer_spec_params;

/* Most nodes of a tree whose size is chosen online (tree_size -1). */
#define SEER_TREE_AUTO_MAX 32

/* Kind SEER_SPEC_NONE, gamma 4, every drafter setting at the default its drafter declares. */
seer_spec_params seer_spec_default_params(void);
/* The i-th drafter setting (drafters in registry order, each's in its order) into *out;
 * false past the last. */
bool seer_spec_option_at(int i, seer_spec_option *out);
/* Sets the setting named name (its flag or its json name) from text: an integer, a number,
 * a kind's name or one of its choices as its type says, within its range. SEER_ERR_INVALID_ARG with a message
 * naming the setting (p unchanged) for an unknown name or a bad value. */
seer_status seer_spec_set(seer_spec_params *p, const char *name, const char *text);
/* The same with a number (KIND: the kind's value; CHOICE: the choice's index). */
seer_status seer_spec_set_num(seer_spec_params *p, const char *name, double value);
/* The setting's value in p (KIND: the kind's value; CHOICE: the choice's index);
 * SEER_ERR_INVALID_ARG for an unknown name. */
seer_status seer_spec_get(const seer_spec_params *p, const char *name, double *value);
/* Parses a kind's name (seer_spec_kind_info_at: "none", a drafter's, "auto"). */
seer_status seer_spec_kind_parse(const char *name, seer_spec_kind *out);
const char *seer_spec_kind_name(seer_spec_kind k);

typedef struct {
    int64_t rounds;        /* verification passes */
    int64_t drafted;       /* draft tokens proposed */
    int64_t accepted;      /* draft tokens accepted */
    int64_t emitted;       /* tokens emitted (accepted + one per round) */
    double t_draft_s, t_verify_s, t_prefill_s;
    double t_mask_s; /* of t_verify_s: the calling thread's time on the verification rows'
                        constraint masks (computed after the forward call is issued, so that
                        on an asynchronous backend they run while the device computes; before
                        it under SEER_CONSTRAINT_MASKS_BEFORE_CALL) */
    int64_t verify_calls;  /* the target's forward calls that verified them (seer_gen: one per
                              call of sequences together; a best-first tree larger than a call
                              takes several) */
} seer_spec_stats;

/* A generator: several sequences in one context decoding together, one speculation round
 * (or one plain step) per seer_gen_step for every unfinished sequence. */
typedef struct seer_gen seer_gen;

seer_status seer_gen_init(seer_context *ctx, seer_spec_params spec, seer_gen **out);
void seer_gen_free(seer_gen *g);
/* Adds a sequence: prefills prompt (n >= 1 tokens), then generates up to max_new tokens
 * (-1 = until the context is full) with its own sampler. Stops after an end-of-generation
 * token (EOS or BOS, included in the output) unless ignore_eos. Returns a handle. */
seer_status seer_gen_add(seer_gen *g, const int32_t *prompt, int n, int max_new,
                         seer_sampler_params sp, bool ignore_eos, int *handle);
/* Adds a sequence whose cache already holds tokens[0 .. n-1) (seer_seq_len(seq) == n - 1),
 * e.g. filled by another generator or synthetically for a benchmark; tokens[n-1] is the
 * pending token the next round starts from. The generator takes ownership of seq. Drafters
 * that select at prefill (SnapKV, retrieval) start without a selection. */
seer_status seer_gen_adopt(seer_gen *g, seer_seq_id seq, const int32_t *tokens, int n,
                           int max_new, seer_sampler_params sp, bool ignore_eos, int *handle);
/* Runs one round for every unfinished sequence. *n_active receives how many remain. */
seer_status seer_gen_step(seer_gen *g, int *n_active);
/* Tokens generated so far for a handle (valid until the next call on g); -1 (and *ids NULL)
 * for a handle that holds no sequence. */
int seer_gen_output(const seer_gen *g, int handle, const int32_t **ids);
bool seer_gen_finished(const seer_gen *g, int handle);
/* Releases a finished (or unwanted) sequence's KV pages; its output stays readable. */
void seer_gen_release(seer_gen *g, int handle);
/* Releases the sequence and forgets its output: the handle may be reused by seer_gen_add. */
void seer_gen_remove(seer_gen *g, int handle);
void seer_gen_stats(const seer_gen *g, seer_spec_stats *out);

/* Recording and reading acceptance traces: seer_bench.h. */

/* What SEER_SPEC_AUTO decided, per round of the generator (or of a scheduler's auto class). */
typedef struct {
    bool has_table;         /* a cost table was given (else every round is plain) */
    int64_t decisions[SEER_SPEC_KIND_MAX]; /* [kind] rounds run with each drafter, [NONE]: plain */
    int64_t drafted[SEER_SPEC_KIND_MAX], accepted[SEER_SPEC_KIND_MAX]; /* [kind] draft tokens */
    int64_t gamma_sum;      /* G summed over speculating rounds */
    int64_t probes;         /* speculating rounds run to measure a drafter's acceptance (the
                               planner had seen too little of it to choose it) */
    double predicted_tokens; /* tokens the chosen options were predicted to emit */
    double predicted_s;     /* seconds they were predicted to take */
    double plain_tok_s_sum; /* the table's plain decoding rate, summed over rounds */
    int64_t emitted;        /* tokens the rounds emitted */
    double measured_s;      /* seconds the rounds took */
} seer_spec_auto_stats;
void seer_gen_auto_stats(const seer_gen *g, seer_spec_auto_stats *out);
/* Predicted speedup (predicted tokens per second over the table's plain rate) and measured
 * speedup (tokens per second measured over the same plain rate), from stats st; 0 when no
 * round was counted. */
void seer_spec_auto_speedups(const seer_spec_auto_stats *st, double *predicted, double *measured);

/* Cost tables. Calibration measures one on ctx within time_s seconds (0: the default
 * budget; a few hundred ms suffice for the whole table of a small model); it needs ctx's
 * sequences free (up to 4 of them are used), a context of at least 73 tokens, and the draft
 * model (may be NULL) in a context of its own that it makes and frees. The file is a small
 * text cache keyed by model and device. */
seer_status seer_spec_cost_calibrate(seer_context *ctx, seer_model *draft_model, double time_s,
                                     seer_spec_cost **out);
/* Calibration with its options. budget_s bounds the measuring: no call starts that is
 * predicted to end past it; the most informative cells are measured first, then the cheapest,
 * and the rest are estimated from them (time = a + b * tokens + c * KV rows read) and marked,
 * so that auto trusts them less (an option that reads an estimated cell must win by a margin;
 * a drafter with nothing measured gets no row). A table with estimated cells is partial
 * (seer_spec_cost_count); given as prev to a later calibration of the same model and
 * context shape, its measured cells are kept and the budget goes to the rest. progress, when
 * set, is called after every measured cell and once at the end (done). */
typedef struct {
    int measured, total;   /* cells of the table measured (this run and prev's) and in all */
    double elapsed_s, budget_s;
    bool done;
} seer_spec_calibrate_progress;
typedef struct {
    double budget_s;             /* seconds; 0: seer_spec_cost_default_budget */
    seer_model *draft_model;     /* measure its step too (NULL: none) */
    const seer_spec_cost *prev;  /* a partial table to continue (NULL: none) */
    void (*progress)(void *user, const seer_spec_calibrate_progress *p);
    void *progress_user;
} seer_spec_calibrate_params;
seer_spec_calibrate_params seer_spec_calibrate_default_params(void);
seer_status seer_spec_cost_measure(seer_context *ctx, seer_spec_calibrate_params p, seer_spec_cost **out);
/* The default bound on calibration: 10 s on the CPU, 2 s on a GPU. */
double seer_spec_cost_default_budget(const seer_context *ctx);
/* Cells of the table measured and in all; measured < total: partial, the rest estimated. */
void seer_spec_cost_count(const seer_spec_cost *c, int *measured, int *total);
/* A table of one operating point, measured in about time_s seconds (at most 30 times that) on the caller's n_seq
 * sequences of ctx as they are (each holding the same number of tokens L; rewound to L after
 * every call, left as found): the target's step, verification of up to 17 tokens per sequence
 * (as many as the batch limit holds), the sparse-view draft step at each budget below L
 * (none: no row for the sparse self-drafts) and, when ngram, the n-gram drafter's row.
 * For a benchmark or a server that knows the batch and length it runs at. */
seer_status seer_spec_cost_calibrate_seqs(seer_context *ctx, const seer_seq_id *seqs, int n_seq,
                                          const int *budgets, int n_budgets, bool ngram, double time_s,
                                          seer_spec_cost **out);
/* Reads a table; SEER_ERR_FORMAT when it is malformed or was measured for another model or
 * device than ctx's (model's key), SEER_ERR_IO when it cannot be read. */
seer_status seer_spec_cost_load(const char *path, const seer_context *ctx, seer_spec_cost **out);
/* A table from text (the file's format: see docs/spec-planning.md), any key. */
seer_status seer_spec_cost_parse(const char *text, size_t len, seer_spec_cost **out);
/* Writes the table to path through a temporary file beside it renamed over it. Cost files
 * are regular files only: load and save refuse (SEER_ERR_IO, path untouched) a path that is
 * a symbolic link, device, FIFO, socket or directory. */
seer_status seer_spec_cost_save(const seer_spec_cost *c, const char *path);
/* SEER_ERR_IO, naming what it is, when path exists and is not a regular file (what load and
 * save refuse); SEER_OK otherwise. For checking a path a person gave, at start. */
seer_status seer_spec_cost_check_path(const char *path);
/* The default cache file of ctx's model on its device: $XDG_CACHE_HOME/seer/<key>.cost (or
 * $HOME/.cache/seer/...); the directory is created. SEER_ERR_IO when neither is set. */
seer_status seer_spec_cost_default_path(const seer_context *ctx, char *buf, size_t cap);
/* Whether the table has a row for kind's drafter (calibration measured it). */
bool seer_spec_cost_has(const seer_spec_cost *c, seer_spec_kind kind);
void seer_spec_cost_free(seer_spec_cost *c);

/* ---------------------------------------------------------------------------------------- */
/* Requests and a scheduler                                                                 */

typedef struct seer_constraint seer_constraint; /* structured output: see "Constraints" below */

/* A request is one generation: its prompt and emitted tokens, sampler, stop set (the
 * vocabulary's end-of-generation tokens and stop strings), token limit, speculation settings
 * and statistics. A scheduler serves many requests on one context: each seer_sched_step
 * plans ONE forward call on the target under a token budget, mixing chunked prefill of new
 * requests with decode steps and verification chains of running ones; requests join and
 * leave between steps.
 *
 * Thread safety: a scheduler, its context and the requests submitted to it are used by one
 * thread at a time (the one that steps it); seer_request_cancel alone may be called from any
 * thread at any time. Requests of different schedulers are independent. */
typedef struct seer_request seer_request;
typedef struct seer_sched seer_sched;

typedef enum {
    SEER_FINISH_NONE = 0,  /* still generating (or not submitted) */
    SEER_FINISH_STOP,      /* an end-of-generation token or a stop string */
    SEER_FINISH_LENGTH,    /* max_tokens, the context length, or a KV pool too small for it */
    SEER_FINISH_CANCELLED, /* seer_request_cancel */
    SEER_FINISH_ERROR,     /* a drafter failed on this request alone (seer_request_error) */
} seer_finish_reason;

/* Most alternatives per token seer_request_params.logprobs may ask for (OpenAI's bound). */
#define SEER_TOP_LOGPROBS_MAX 20

/* A generated token's log-probability under the target model's raw distribution (the
 * log-softmax of its logits at that position: no temperature, penalties or truncation, as
 * OpenAI and vLLM report by default), also when the token was accepted from a draft, and the
 * n_top most likely tokens there, largest first (ties to the lower id). */
typedef struct {
    float logprob;
    int n_top;
    int32_t top_id[SEER_TOP_LOGPROBS_MAX];
    float top_logprob[SEER_TOP_LOGPROBS_MAX];
} seer_token_logprob;

typedef struct {
    seer_sampler_params sampler;
    int max_tokens;          /* most tokens to generate (> 0); the context may end it sooner */
    bool ignore_eos;         /* do not stop at end-of-generation tokens */
    const char *const *stop; /* n_stop stop strings (copied; each 1..256 bytes): generation
                                ends where the text first contains one, which is cut off */
    int n_stop;
    seer_spec_params spec;   /* this request's speculation (verified losslessly) */
    bool logprobs;           /* every generated token's seer_token_logprob with top_logprobs
                                (0..SEER_TOP_LOGPROBS_MAX) alternatives (seer_request_logprobs).
                                Costs one small backend call per step, and the steps keep the
                                call's logits (no argmax-only calls) */
    int top_logprobs;
    bool prompt_logprobs;    /* also the prompt's tokens' seer_token_logprob, with top_logprobs
                                alternatives (seer_request_prompt_logprobs): the prefill keeps
                                the logits of every prompt row, and the prompt is computed
                                whole (no prefix taken from the prefix cache) */
    /* Structured output (NULL: none): the request takes its own copy of the constraint's
     * state at seer_request_new (the caller keeps and frees c); every row the target and the
     * drafters sample from is masked by it, and generation stops when it is finished. */
    const seer_constraint *constraint;
    /* Called on the stepping thread at the end of each seer_sched_step in which r emitted
     * tokens or finished (after the last call for r, the scheduler no longer holds it). */
    void (*on_update)(seer_request *r, void *user);
    void *user;
} seer_request_params;

seer_request_params seer_request_default_params(void);

/* A request for prompt [n >= 1] (copied). Parameters are checked here; the context-dependent
 * ones (prompt length, speculation) again at seer_sched_submit. */
seer_status seer_request_new(const seer_model *model, const int32_t *prompt, int n,
                             const seer_request_params *params, seer_request **out);
/* Frees a request that is not in a scheduler (never submitted, or finished). */
void seer_request_free(seer_request *r);
/* Asks the scheduler to drop r at its next step (also inside a long prefill: prefill runs in
 * chunks); it then finishes with SEER_FINISH_CANCELLED and its KV pages are free. */
void seer_request_cancel(seer_request *r);
seer_finish_reason seer_request_finish_reason(const seer_request *r);
bool seer_request_finished(const seer_request *r);
/* Tokens generated so far; *ids valid until the next step. */
int seer_request_tokens(const seer_request *r, const int32_t **ids);
/* Text of the generated tokens so far that can be shown: complete UTF-8, stop strings cut
 * off, and a tail that may still become a stop string held back until it is decided.
 * NUL-terminated; *len (may be NULL) its length. End-of-generation tokens have no text. */
const char *seer_request_text(const seer_request *r, size_t *len);
/* The log-probabilities of the tokens generated so far (seer_request_params.logprobs), one
 * per id of seer_request_tokens, in order; *out valid until the next step. 0 and *out NULL
 * when the request asked for none. */
int seer_request_logprobs(const seer_request *r, const seer_token_logprob **out);
/* The log-probabilities of the prompt's tokens (seer_request_params.prompt_logprobs), one per
 * prompt token, once the prompt is computed (before that, or when none were asked for: 0 and
 * *out NULL): entry i is token i's under the model after tokens 0 .. i-1; entry 0, which no
 * token precedes, has logprob NAN and no alternatives. *out valid while r lives. */
int seer_request_prompt_logprobs(const seer_request *r, const seer_token_logprob **out);
void *seer_request_user(const seer_request *r);
int seer_request_n_prompt(const seer_request *r);

typedef struct {
    int n_prompt;          /* prompt tokens */
    int n_generated;       /* tokens generated */
    int64_t n_computed;    /* tokens this request put through the target (prefill, rounds,
                              recomputation after preemption) */
    int64_t rounds;        /* decode or verification rounds */
    int64_t drafted, accepted;
    int n_preempted;       /* times its KV pages were taken back, to be recomputed */
    int n_prefix_reused;   /* prompt tokens taken from the prefix cache instead of computed */
    int n_host_restored;   /* tokens copied back from the KV host tier (its own cache after a
                              preemption, or a spilled prefix) instead of computed */
    double t_first_token_s; /* seconds from submission to the first token; -1: none yet */
    double t_last_token_s;  /* seconds from submission to the latest token; -1: none yet */
} seer_request_stats;
void seer_request_get_stats(const seer_request *r, seer_request_stats *out);

typedef struct {
    int max_batch_tokens; /* token budget of one forward call; 0 = the context's n_batch_max */
    int prefill_chunk;    /* most prompt tokens per prefill chunk; 0 = min(256, budget). On a
                             backend whose prompt tokens do not depend on the cuts
                             (seer_context_prompt_cuts_free: the CPU, and CUDA where the chunk
                             and mix_max_tokens stay within its 256), a chunk beside decoding
                             requests is cut to prefill_stall; elsewhere a prompt is always
                             cut at the same multiples of it, whatever else runs, so its
                             numerics do not depend on the other traffic */
    int prefix_cache;     /* sequences of the context kept for cached prompt prefixes (0: no
                             cache); requests run in the other n_seq_max - prefix_cache */
    int mix_max_tokens;   /* most tokens of a forward call that mixes requests; 0 = the most the
                             backend computes batch-invariantly (CUDA: 256; CPU: any). A larger
                             prefill chunk runs alone in its call, taking turns with calls of the
                             other requests, so that greedy ids do not depend on the traffic */
    float prefill_stall;  /* where cuts are free: the prompt tokens planned beside decoding
                             requests are those the step times measured so far say take about
                             this many times a step of their rounds alone, so a stream's gap
                             between tokens stays near (1 + prefill_stall) times its idle one
                             while prompts are read (Sarathi-Serve's stall-free batching with
                             a time budget). 0 = 1; negative: fixed cuts, as elsewhere */
    int64_t kv_host_bytes; /* the KV cache's host tier (0: none): host memory (page-locked on
                              CUDA) of at most this many bytes, allocated at init, that keeps
                              the pages of preempted requests and of evicted prefix cache
                              entries, least recently used evicted first; they are copied back
                              instead of recomputed, on a stream of their own. Negative, or
                              less than one page: refused */
} seer_sched_params;

seer_sched_params seer_sched_default_params(void);
/* A scheduler on ctx, which it then uses alone (no other sequences may live in it). */
seer_status seer_sched_init(seer_context *ctx, seer_sched_params params, seer_sched **out);
/* Frees the scheduler; requests still in it are detached unfinished (no callbacks) and may be
 * freed by their owner afterwards. */
void seer_sched_free(seer_sched *s);
/* Queues r (not yet submitted anywhere). Fails, changing nothing, on a prompt of n_ctx tokens
 * or more, a token outside the vocabulary or speculation settings the context cannot run. */
seer_status seer_sched_submit(seer_sched *s, seer_request *r);
/* Runs one step: drops cancelled requests, admits waiting ones while sequences are free,
 * plans one forward call under the budget (preempting the most recently admitted request
 * when the KV pool cannot hold the step: its pages are freed and it is recomputed later),
 * drafts, runs the call, verifies and emits. *n_active (may be NULL) receives the requests
 * still running or waiting. On an error (of the backend) every request is left as it was. */
seer_status seer_sched_step(seer_sched *s, int *n_active);

typedef struct {
    int n_running, n_waiting;
    int64_t n_steps;
    int64_t tokens_prompt;    /* prompt tokens of submitted requests */
    int64_t tokens_computed;  /* tokens through the target */
    int64_t tokens_generated; /* tokens emitted */
    int64_t n_preemptions;
    int64_t n_finished;
    int64_t prefix_hits;      /* prompt pages reused from the prefix cache */
    int64_t n_calls_alone;    /* steps whose call held one prefill chunk alone (mix_max_tokens) */
    int max_mixed_tokens;     /* most tokens of a step's call that held several requests */
    int prefix_entries;       /* prompt prefixes cached */
    int kv_pages_total, kv_pages_free;
    int kv_pages_cached;      /* pages the prefix cache holds (shared ones included) */
    int kv_host_pages, kv_host_pages_total; /* pages in the host tier, and its capacity */
    int64_t kv_host_bytes_out, kv_host_bytes_in; /* bytes copied to and from the host tier */
    int64_t kv_host_hits;     /* admissions that copied pages back from the host tier */
    int64_t kv_host_saves;    /* preempted requests whose cache went to the host tier */
    int64_t kv_host_evictions; /* host tier entries evicted (least recently used) for room */
    int64_t spec_drafted[SEER_SPEC_KIND_MAX];  /* per seer_spec_kind */
    int64_t spec_accepted[SEER_SPEC_KIND_MAX];
    int64_t spec_auto_decisions[SEER_SPEC_KIND_MAX]; /* rounds of requests with auto speculation,
                                                           per kind chosen ([NONE]: plain) */
} seer_sched_stats;
void seer_sched_get_stats(const seer_sched *s, seer_sched_stats *out);

/* ---------------------------------------------------------------------------------------- */
/* Model files                                                                              */

/* Inspection of a GGUF file's metadata and tensor table, without loading weights: the file
 * is mapped, not read (seer_model_load reads it), so it must not shrink while open. */
typedef struct seer_gguf seer_gguf;
seer_status seer_gguf_open(const char *path, seer_gguf **out);
void seer_gguf_close(seer_gguf *g);
/* Out-of-range indices (and a NULL g) give 0, NULL, "" or a zeroed seer_tensor_info. */
int seer_gguf_version(const seer_gguf *g);
int seer_gguf_n_kv(const seer_gguf *g);
const char *seer_gguf_key(const seer_gguf *g, int i);
/* The value of metadata entry i as text (arrays summarised as "[type x n] first items"). */
void seer_gguf_value_text(const seer_gguf *g, int i, char *buf, int cap);
int seer_gguf_n_tensors(const seer_gguf *g);
typedef struct {
    const char *name;
    const char *type; /* "f32", "q4_0", ... */
    int n_dims;
    uint64_t ne[4];
    uint64_t nbytes;
    uint64_t offset;
} seer_tensor_info;
void seer_gguf_tensor(const seer_gguf *g, int i, seer_tensor_info *out);

/* Waits until all work queued on the model's backend has finished. */
seer_status seer_model_sync(const seer_model *model);

/* ---------------------------------------------------------------------------------------- */
/* Chat templates (proposed; see src/tokenizer/chat.h)                                      */

/* A tool call of an assistant message, as a template writes it back into the conversation. */
typedef struct {
    const char *name;
    const char *arguments; /* the arguments object as JSON text */
} seer_chat_tool_call;

/* The tool calls of one message (seer_chat_render_tools; only an assistant's may be any). */
typedef struct {
    const seer_chat_tool_call *calls;
    int n;
} seer_chat_calls;

/* One message of a conversation. role is "system", "user" or "assistant" (and "tool" for
 * seer_chat_render_tools: a tool's result). */
typedef struct {
    const char *role;
    const char *content;
} seer_chat_message;

typedef enum {
    SEER_CHAT_CHATML = 1, /* <|im_start|>ROLE\nTEXT<|im_end|>\n (Qwen2, SmolLM2) */
    SEER_CHAT_LLAMA3,     /* <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|> */
    SEER_CHAT_LLAMA2,     /* [INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nTEXT [/INST] ANSWER </s> */
    SEER_CHAT_GEMMA,      /* <start_of_turn>ROLE\nTEXT<end_of_turn>\n, ROLE user or model */
    SEER_CHAT_PHI3,       /* <|ROLE|>\nTEXT<|end|>\n (Phi-3, Phi-3.5) */
} seer_chat_kind;

/* A recognised chat format. default_system is the system prompt the model's own template
 * inserts when a conversation has none (Qwen2.5's "You are Qwen, ...", SmolLM2's "You are
 * a helpful AI assistant named SmolLM, ..."), "" when it inserts none. */
typedef struct {
    seer_chat_kind kind;
    char default_system[512];
    bool thinking;  /* ChatML with Qwen3's reasoning switch (its template reads enable_thinking):
                       earlier replies lose their <think>...</think> part as the template
                       renders them */
    bool no_think;  /* the caller's (per request; false from seer_chat_template_init): with
                       thinking, open the assistant's turn with an empty <think></think>, as
                       Qwen3's template does for enable_thinking=false */
} seer_chat_template;

/* Picks the chat format. name NULL: recognised from the model's tokenizer.chat_template by
 * distinctive substrings; otherwise "chatml", "llama3", "llama2", "gemma" or "phi3" (a ChatML
 * model's default system prompt and thinking switch are still taken from its template).
 * SEER_ERR_UNSUPPORTED when the model has no template, the template is not recognised, or
 * name is unknown: the message says to choose one with --chat-template. */
seer_status seer_chat_template_init(const seer_model *model, const char *name,
                                    seer_chat_template *out);
/* "chatml", "llama3", "llama2", "gemma", "phi3". */
const char *seer_chat_kind_name(seer_chat_kind kind);

/* Renders n messages as the prompt text the model was trained on, to be tokenized with
 * add_bos (the BOS of Llama 2/3 comes from tokenization, not the text) and special tokens
 * parsed where the template wrote them (seer_chat_render_marked, seer_tokenize_marked).
 * add_assistant: end with the opening of the assistant's turn. Writes the text and a NUL to
 * buf when it fits in cap and sets *len to the text's length; SEER_ERR_INVALID_ARG when it
 * does not fit (*len still says how long it is) or a role is not one of the three. */
seer_status seer_chat_render(const seer_chat_template *t, const seer_chat_message *msgs, int n,
                             bool add_assistant, char *buf, size_t cap, size_t *len);
/* seer_chat_render that also marks in special_ok [cap] (may be NULL) the bytes the template
 * wrote (1) apart from those copied from message contents (0); tokenized with
 * seer_tokenize_marked, only the template's own special tokens become special tokens. */
seer_status seer_chat_render_marked(const seer_chat_template *t, const seer_chat_message *msgs, int n,
                                    bool add_assistant, char *buf, uint8_t *special_ok, size_t cap,
                                    size_t *len);

/* seer_chat_render_marked of a conversation with tools: tools [n_tools] are the JSON texts
 * of the tool definitions as the template lists them ({"type": "function", "function": {...}}),
 * calls [n] (may be NULL: none) the tool calls of each message (assistants' only), and "tool"
 * messages hold a tool's result. The
 * format is Qwen2.5's (Hermes style), which is ChatML's: the tools inside <tools></tools> in
 * the system message (the conversation's own, else the template's default one) with the
 * instruction to answer with <tool_call>{"name": ..., "arguments": ...}</tool_call>, each call
 * of an assistant message on lines of its own after its text, and a run of tool messages as
 * one user turn of <tool_response>...</tool_response> blocks. Templates without a tool format
 * of their own (llama3, llama2, gemma, phi3) get the same text inside their own turns. With
 * no tools and no tool messages or calls it is seer_chat_render_marked. */
seer_status seer_chat_render_tools(const seer_chat_template *t, const seer_chat_message *msgs,
                                   const seer_chat_calls *calls, int n, const char *const *tools, int n_tools, bool add_assistant, char *buf,
                                   uint8_t *special_ok, size_t cap, size_t *len);

/* Whether token ends a turn or a text: EOS and tokens such as <|im_end|>, <|eot_id|>,
 * <|endoftext|> (the list llama.cpp uses). */
bool seer_token_is_eog(const seer_model *model, int32_t token);

/* ---------------------------------------------------------------------------------------- */
/* Structured output: constraints                                                           */

/* A constraint restricts generation to the texts of a grammar: GBNF-like text
 * (src/constrain/grammar.c documents it), a JSON schema (the subset OpenAI's structured
 * outputs accept: objects, arrays, enum, const, anyOf, strings with a few formats and pattern,
 * integers and numbers, booleans, null, $ref to $defs; src/constrain/schema.c), any JSON
 * object, or a regular expression. It holds the matcher's state for one generation: which
 * tokens may come next (a mask over the vocabulary) after the tokens accepted so far. The
 * same mask applies to the target's and the drafter's distributions, which keeps speculation
 * exact. Hostile text gets an error, never a crash; work per byte is bounded. */
typedef enum {
    SEER_CONSTRAINT_GRAMMAR = 0,
    SEER_CONSTRAINT_JSON_SCHEMA,
    SEER_CONSTRAINT_JSON_OBJECT, /* text is ignored */
    SEER_CONSTRAINT_REGEX,
} seer_constraint_kind;

/* Compiles text [len] for model's vocabulary. SEER_ERR_INVALID_ARG for malformed text,
 * SEER_ERR_UNSUPPORTED for a schema feature not covered; seer_last_error() says which. */
seer_status seer_constraint_new(const seer_model *model, seer_constraint_kind kind, const char *text,
                                size_t len, seer_constraint **out);
/* seer_constraint_new for the vocabulary base was made for, sharing base's token trie (which
 * costs a pass over the vocabulary to build): for servers that compile one per request. */
seer_status seer_constraint_new_sharing(const seer_constraint *base, seer_constraint_kind kind, const char *text,
                                        size_t len, seer_constraint **out);
/* An independent copy of c's state (the compiled grammar and vocabulary are shared). */
seer_status seer_constraint_clone(const seer_constraint *c, seer_constraint **out);
void seer_constraint_free(seer_constraint *c);
int seer_constraint_n_vocab(const seer_constraint *c);
/* bits [(V + 31) / 32]: bit t % 32 of word t / 32 set when token t may come next.
 * End-of-generation tokens are allowed exactly when the text may end there. Returns the
 * number of allowed tokens (0: none, generation must stop), or -1 on error. */
int seer_constraint_mask(seer_constraint *c, uint32_t *bits);
/* Whether token may come next (cheaper than a mask for one token). */
bool seer_constraint_allows(seer_constraint *c, int32_t token);
/* Advances by token; SEER_ERR_INVALID_ARG (state unchanged) if it is not allowed. */
seer_status seer_constraint_accept(seer_constraint *c, int32_t token);
/* Whether generation must end: an end-of-generation token was accepted, or a token was
 * refused (a mask with nothing allowed left the sampler no choice). */
bool seer_constraint_finished(const seer_constraint *c);
/* Takes back the last n accepted tokens (at most the last 256 can be taken back). */
seer_status seer_constraint_rollback(seer_constraint *c, int n);
/* Tokens accepted so far (minus those taken back). */
int seer_constraint_n_accepted(const seer_constraint *c);
/* Whether the text may end here. */
bool seer_constraint_done(const seer_constraint *c);
/* Options of a constraint (copied by seer_constraint_clone, so a request or a generator's
 * sequence takes them with its copy):
 *   SEER_CONSTRAINT_NO_FORCED_DRAFTS: speculation does not draft the tokens the grammar
 *     forces (jump-forward off); output is the same, only drafts change;
 *   SEER_CONSTRAINT_MASKS_BEFORE_CALL: the masks of a verification's rows are computed on the
 *     calling thread before the forward call, not on a helper thread while it runs (for a
 *     caller that wants no second thread); output is the same. */
#define SEER_CONSTRAINT_NO_FORCED_DRAFTS 1u
#define SEER_CONSTRAINT_MASKS_BEFORE_CALL 2u
void seer_constraint_set_options(seer_constraint *c, unsigned options);
unsigned seer_constraint_options(const seer_constraint *c);
/* The grammar text a schema (or JSON object mode, or a regex) compiles to, for inspection;
 * malloc'd into *out. */
seer_status seer_constraint_grammar_text(seer_constraint_kind kind, const char *text, size_t len,
                                         char **out);

/* ---------------------------------------------------------------------------------------- */
/* A generator's sequence with structured output and log-probabilities                      */

/* What a sequence of a generator may ask for beyond its sampler: the same as a request's
 * (seer_request_params), run by the same round code. */
typedef struct {
    bool logprobs;     /* every generated token's seer_token_logprob (seer_gen_logprobs) */
    int top_logprobs;  /* with this many alternatives (0..SEER_TOP_LOGPROBS_MAX) */
    const seer_constraint *constraint; /* NULL: none; the sequence takes its own copy of its
                                          state (the caller keeps and frees it): every row the
                                          target and the drafter sample from is masked by it,
                                          and the sequence ends when it is finished */
} seer_gen_seq_params;
seer_gen_seq_params seer_gen_seq_default_params(void);
/* seer_gen_add with xp (NULL: the defaults, as seer_gen_add). SEER_ERR_INVALID_ARG for
 * top_logprobs out of range or a constraint of another vocabulary (nothing added). */
seer_status seer_gen_add_ext(seer_gen *g, const int32_t *prompt, int n, int max_new, seer_sampler_params sp,
                             bool ignore_eos, const seer_gen_seq_params *xp, int *handle);
/* The log-probabilities of handle's generated tokens (xp->logprobs), one per id of
 * seer_gen_output, in order; *out valid until the next call on g. 0 and *out NULL when the
 * sequence asked for none; -1 (and *out NULL) for a handle that holds no sequence. */
int seer_gen_logprobs(const seer_gen *g, int handle, const seer_token_logprob **out);

#ifdef __cplusplus
}
#endif
#endif
