/*
 * qwen2.c: the Qwen2 family (Qwen2, Qwen2.5): the Llama layer with biases on q, k and v,
 * and RoPE on half-split pairs.
 */
#include "model/arch/arch.h"

static const seer_arch_tensor k_tensors[] = {
    {SEER_LT_ATTN_NORM, "attn_norm.weight", true},
    {SEER_LT_Q, "attn_q.weight", true},
    {SEER_LT_K, "attn_k.weight", true},
    {SEER_LT_V, "attn_v.weight", true},
    {SEER_LT_BQ, "attn_q.bias", true},
    {SEER_LT_BK, "attn_k.bias", true},
    {SEER_LT_BV, "attn_v.bias", true},
    {SEER_LT_O, "attn_output.weight", true},
    {SEER_LT_FFN_NORM, "ffn_norm.weight", true},
    {SEER_LT_GATE, "ffn_gate.weight", true},
    {SEER_LT_UP, "ffn_up.weight", true},
    {SEER_LT_DOWN, "ffn_down.weight", true},
};

const seer_arch_desc seer_arch_qwen2 = {
    .name = "qwen2",
    .ctx_default = 2048,
    .rope_base_default = 10000.f,
    .norm_eps_default = 1e-5f,
    .rope_neox = 1,
    .act = SEER_ACT_SILU,
    .qscale = SEER_QSCALE_HEAD_DIM,
    .tensors = k_tensors,
    .n_tensors = sizeof k_tensors / sizeof *k_tensors,
};
