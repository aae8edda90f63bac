/*
 * gguf.h: reading and writing GGUF v2/v3 files, and the ggml block formats of their tensors.
 *
 * The reader copies the file into private memory (seer_gguf_file_open_mapped maps it instead) and
 * validates everything before handing out pointers: every
 * count, length, dimension and offset is checked against the file size, so a corrupt or
 * hostile file gives an error naming the problem, never a crash or an absurd allocation.
 * Not for: binding tensors to a model (src/model/) or interpreting tokenizer metadata.
 */
#ifndef SEER_GGUF_H
#define SEER_GGUF_H

#include "seer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Metadata value types, as numbered in the GGUF specification. */
typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

/* Tensor types, as numbered by ggml. */
typedef enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_COUNT = 40
} ggml_type;

typedef struct gguf_value gguf_value;
struct gguf_value {
    gguf_type type;
    union {
        uint64_t u64;  /* UINT8/16/32/64 */
        int64_t i64;   /* INT8/16/32/64 */
        double f64;    /* FLOAT32/64 */
        bool b;        /* BOOL */
        struct {
            const char *s; /* points into the mapping; NOT NUL-terminated */
            uint64_t len;
        } str;
        struct {
            gguf_type type;    /* element type */
            uint64_t n;        /* element count */
            gguf_value *items; /* [n] decoded elements (any element type, nested arrays too) */
        } arr;
    };
};

typedef struct {
    const char *key; /* NUL-terminated copy */
    gguf_value val;
} gguf_kv;

typedef struct {
    const char *name;  /* NUL-terminated copy */
    int n_dims;        /* 1..4 */
    uint64_t ne[4];    /* elements per dimension, ne[0] fastest; unused dims are 1 */
    ggml_type type;
    uint64_t offset;   /* relative to the data section */
    const void *data;  /* into the mapping */
    size_t nbytes;
} gguf_tensor;

typedef struct {
    uint32_t version; /* 2 or 3 */
    uint64_t n_kv;
    gguf_kv *kv;      /* [n_kv] */
    uint64_t n_tensors;
    gguf_tensor *tensors; /* [n_tensors] */
    size_t alignment;
    size_t data_offset;   /* start of the tensor data section in the file */
    const uint8_t *base;  /* private copy or mapping (or the caller's buffer) */
    size_t size;
    bool mapped;          /* base is ours to unmap */
    bool data_dropped;    /* seer_gguf_drop_tensor_data ran: tensor bytes read as zeros */
    /* internal allocation arena for decoded values */
    void *arena;
} gguf_file;

/* Reads and parses a file. The file's bytes are copied into private anonymous memory with
 * read(), not mapped: a file truncated or rewritten while the model is in use can then
 * neither crash the process (SIGBUS on a mapped page past the new end) nor change its
 * weights. On failure *out is NULL and the message names the problem (and
 * the key or tensor). Tensor types whose block size is unknown fail here with
 * SEER_ERR_UNSUPPORTED "unsupported tensor type T in tensor NAME"; types of known size
 * without a dequantiser (q8_1, q2_K, q3_K, q8_K) open, and fail in seer_gguf_tensor_dequant.
 * Arrays may nest at most 8 deep; keys and tensor names must be unique and free of NUL. */
seer_status seer_gguf_file_open(const char *path, gguf_file **out);
/* seer_gguf_file_open over a read-only mapping of the file instead of a copy: for a short look at
 * the metadata of a large file (seer info), where reading every byte would be slow. The file
 * must not shrink while it is open (a page past the new end faults). */
seer_status seer_gguf_file_open_mapped(const char *path, gguf_file **out);
/* Gives the memory of the tensor data section of a seer_gguf_file_open copy back to the system once
 * nothing reads it any more (a backend that uploaded every weight); metadata stays.
 * Afterwards tensor data reads as zeros. No effect on other files. */
void seer_gguf_drop_tensor_data(gguf_file *f);
/* Parses a buffer the caller keeps alive until seer_gguf_file_close (used by the fuzzer and tests). */
seer_status seer_gguf_file_open_memory(const void *data, size_t size, gguf_file **out);
void seer_gguf_file_close(gguf_file *f);

const gguf_kv *seer_gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *seer_gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. Integers of any width convert when the value fits; SEER_ERR_FORMAT if the
 * key exists with an incompatible type, SEER_ERR_FORMAT "missing required metadata KEY" if
 * absent. The _opt variants return the default when the key is absent (still an error on a
 * wrong type). seer_gguf_get_f32 also takes integer values (some converters write e.g.
 * rope.freq_base as one). On failure *out is unchanged. */
seer_status seer_gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
seer_status seer_gguf_get_i64_opt(const gguf_file *f, const char *key, int64_t def, int64_t *out);
seer_status seer_gguf_get_f32(const gguf_file *f, const char *key, float *out);
seer_status seer_gguf_get_f32_opt(const gguf_file *f, const char *key, float def, float *out);
seer_status seer_gguf_get_bool_opt(const gguf_file *f, const char *key, bool def, bool *out);
/* Copies a string value NUL-terminated into buf (error if it does not fit). */
seer_status seer_gguf_get_str(const gguf_file *f, const char *key, char *buf, size_t cap);
seer_status seer_gguf_get_str_opt(const gguf_file *f, const char *key, const char *def, char *buf,
                             size_t cap);
/* Returns the array value of key (error if absent or not an array of elem_type;
 * elem_type GGUF_TYPE_COUNT accepts any element type). */
seer_status seer_gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem_type,
                         const gguf_value **out);

/* ggml block formats. */
const char *seer_ggml_type_name(ggml_type t);      /* "f32", "q4_0", ...; "type<N>" if unknown */
bool seer_ggml_type_supported(ggml_type t);        /* can be dequantised by seer_gguf_dequant */
int seer_ggml_type_block_elems(ggml_type t);       /* elements per block; 0 if unknown */
int seer_ggml_type_block_bytes(ggml_type t);       /* bytes per block; 0 if unknown */
/* Bytes of n elements (n must be a multiple of the block size). */
seer_status seer_ggml_nbytes(ggml_type t, uint64_t n, size_t *out);
/* Dequantises n elements (multiple of the block size) of type t to f32. */
seer_status seer_gguf_dequant(ggml_type t, const void *src, float *dst, uint64_t n);
/* Quantises/converts n f32 values to type t (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q4_K, Q5_K, Q6_K; the block formats byte-identical to ggml's reference). Non-finite
 * inputs to the block formats are rejected (SEER_ERR_INVALID_ARG). */
seer_status seer_gguf_quant(ggml_type t, const float *src, void *dst, uint64_t n);

/* Elements of a tensor (product of ne[0..n_dims-1]; the reader guarantees no overflow). */
uint64_t seer_gguf_tensor_nelements(const gguf_tensor *t);
/* Dequantises the first n elements of t (n a multiple of the block size, at most the
 * tensor's element count). Unlike seer_gguf_dequant its errors name the tensor, e.g.
 * "unsupported tensor type q5_0 (6) in tensor blk.0.attn_q.weight". */
seer_status seer_gguf_tensor_dequant(const gguf_tensor *t, float *dst, uint64_t n);

float seer_f16_to_f32(uint16_t h);
uint16_t seer_f32_to_f16(float f);
float seer_bf16_to_f32(uint16_t h);
uint16_t seer_f32_to_bf16(float f); /* round to nearest even */

/* Writer: collects metadata and tensors in memory and writes a GGUF v3 file. */
typedef struct gguf_writer gguf_writer;
gguf_writer *seer_gguf_writer_init(void);
void seer_gguf_writer_free(gguf_writer *w);
void seer_gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void seer_gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void seer_gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
void seer_gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void seer_gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void seer_gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
void seer_gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
void seer_gguf_writer_set_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
void seer_gguf_writer_set_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Any value, nested arrays included, in the form the reader gives (copies a read file's
 * metadata; writes the types the typed setters do not cover). Strings are copied. */
seer_status seer_gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *v);
/* Setting a key that is already set replaces its value. The setters returning void record
 * a failure (out of memory, bad argument) that seer_gguf_writer_write / _to_buffer then report. */
/* Adds a tensor; data (nbytes, as seer_ggml_nbytes gives for the shape) is copied. */
seer_status seer_gguf_writer_add_tensor(gguf_writer *w, const char *name, ggml_type type, int n_dims,
                                   const uint64_t *ne, const void *data);
/* Declares a tensor without data: its bytes come from the fill function of
 * seer_gguf_writer_write_stream, which such a writer needs (seer_gguf_writer_write and _to_buffer
 * refuse it). Same checks as seer_gguf_writer_add_tensor. */
seer_status seer_gguf_writer_declare_tensor(gguf_writer *w, const char *name, ggml_type type,
                                       int n_dims, const uint64_t *ne);
/* Fills dst with the nbytes of declared tensor `index` (its position among all tensors);
 * a failure (with its seer_err message) stops the write. */
typedef seer_status (*gguf_fill_fn)(void *ctx, size_t index, const char *name, void *dst,
                                    size_t nbytes);
seer_status seer_gguf_writer_write(gguf_writer *w, const char *path);
/* Writes the file, asking fill for each declared tensor's bytes in file order; one buffer
 * of the largest declared tensor is held. On any failure the file is removed. */
seer_status seer_gguf_writer_write_stream(gguf_writer *w, const char *path, gguf_fill_fn fill,
                                     void *ctx);
/* Serialises to a malloc'd buffer (tests build corrupt variants from it). */
seer_status seer_gguf_writer_to_buffer(gguf_writer *w, uint8_t **buf, size_t *size);

#endif
