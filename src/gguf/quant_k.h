/*
 * quant_k.h: the ggml block formats that real GGUF files mix in beside Q8_0/Q4_0/Q4_1: the
 * K-quants Q4_K, Q5_K, Q6_K (256-element super-blocks) and the 5-bit Q5_0/Q5_1 that K-quant
 * files use for rows too short for a super-block. Dequantisers in quant_k.c, quantisers in
 * quant_k_write.c. Not for: fast kernels (the backends have those).
 */
#ifndef SEER_QUANT_K_H
#define SEER_QUANT_K_H

#include "gguf/gguf.h"

/* Whether seer_dequant_k handles type t. */
bool seer_dequant_k_supported(ggml_type t);

/* Dequantises n elements (a multiple of the type's block size) of type t from src to dst.
 * SEER_ERR_UNSUPPORTED for other types, SEER_ERR_INVALID_ARG for a bad n. The values are
 * those of ggml's reference dequantize_row_* functions. */
seer_status seer_dequant_k(ggml_type t, const void *src, float *dst, uint64_t n);

/* Whether seer_quant_k handles type t (the same five types). */
bool seer_quant_k_supported(ggml_type t);

/* Quantises n f32 values (a multiple of the type's block size) to type t. The bytes are
 * those of ggml's reference quantize_row_*_ref functions (no importance matrix).
 * SEER_ERR_UNSUPPORTED for other types; SEER_ERR_INVALID_ARG for a bad n or a non-finite
 * value (dst then holds nothing meaningful). Runs over blocks on OpenMP threads. */
seer_status seer_quant_k(ggml_type t, const float *src, void *dst, uint64_t n);

#endif
