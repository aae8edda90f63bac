/*
 * llama.c: the Llama family (Llama 2/3, SmolLM, Mistral without a sliding window): pre-norm
 * layers of RMSNorm, attention with RoPE on adjacent pairs, and a SwiGLU FFN.
 *
 *   x = embed(tokens)
 *   per layer: x += Wo · attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x))
 *              x += Wdown · (silu(Wgate·n(x)) * Wup·n(x))
 *   logits = Wout · n(x[rows asked for])
 */
#include "model/arch/arch.h"

static const seer_arch_tensor k_tensors[] = {
    {SEER_LT_ATTN_NORM, "attn_norm.weight", true},
    {SEER_LT_Q, "attn_q.weight", true},
    {SEER_LT_K, "attn_k.weight", true},
    {SEER_LT_V, "attn_v.weight", true},
    /* some converters write biases for Llama-shaped models: used where present */
    {SEER_LT_BQ, "attn_q.bias", false},
    {SEER_LT_BK, "attn_k.bias", false},
    {SEER_LT_BV, "attn_v.bias", false},
    {SEER_LT_O, "attn_output.weight", true},
    {SEER_LT_FFN_NORM, "ffn_norm.weight", true},
    {SEER_LT_GATE, "ffn_gate.weight", true},
    {SEER_LT_UP, "ffn_up.weight", true},
    {SEER_LT_DOWN, "ffn_down.weight", true},
};

const seer_arch_desc seer_arch_llama = {
    .name = "llama",
    .ctx_default = 2048,
    .rope_base_default = 10000.f,
    .norm_eps_default = 1e-5f,
    .rope_neox = 0,
    .act = SEER_ACT_SILU,
    .qscale = SEER_QSCALE_HEAD_DIM,
    .tensors = k_tensors,
    .n_tensors = sizeof k_tensors / sizeof *k_tensors,
};
