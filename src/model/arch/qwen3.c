/*
 * qwen3.c: the Qwen3 family (dense): the Llama layer with RMSNorm of each query and key head
 * (attn_q_norm, attn_k_norm, [Dh]) before RoPE, no biases, RoPE on half-split pairs and the
 * query scale 1/sqrt(Dh), as llama.cpp's qwen3 graph computes it. The head dimension is its
 * own key (attention.key_length: 128 while D/H is 64 in the 0.6B model). Long context comes
 * from YaRN (rope.scaling.type "yarn"), which the loader reads for every family.
 * Thinking on or off is a matter of the chat template, not of this file.
 */
#include "model/arch/arch.h"

static const seer_arch_tensor k_tensors[] = {
    {SEER_LT_ATTN_NORM, "attn_norm.weight", true},
    {SEER_LT_Q, "attn_q.weight", true},
    {SEER_LT_K, "attn_k.weight", true},
    {SEER_LT_V, "attn_v.weight", true},
    {SEER_LT_O, "attn_output.weight", true},
    {SEER_LT_K_NORM, "attn_k_norm.weight", true},
    {SEER_LT_Q_NORM, "attn_q_norm.weight", true},
    {SEER_LT_FFN_NORM, "ffn_norm.weight", true},
    {SEER_LT_GATE, "ffn_gate.weight", true},
    {SEER_LT_UP, "ffn_up.weight", true},
    {SEER_LT_DOWN, "ffn_down.weight", true},
};

const seer_arch_desc seer_arch_qwen3 = {
    .name = "qwen3",
    .ctx_default = 40960,
    .rope_base_default = 1000000.f,
    .norm_eps_default = 1e-6f,
    .rope_neox = 1,
    .act = SEER_ACT_SILU,
    .qscale = SEER_QSCALE_HEAD_DIM,
    .tensors = k_tensors,
    .n_tensors = sizeof k_tensors / sizeof *k_tensors,
};
