/*
 * phi3.c: the Phi-3 family (Phi-3, Phi-3.5 and Phi-4 mini, dense). The Llama layer with
 * fused tensors, as llama.cpp's phi3 graph reads them:
 *   - attn_qkv: q, k and v as one [H*Dh + 2*Hkv*Dh][D] tensor (the loader takes row views);
 *   - ffn_up: gate and up as one [2F][D] tensor, the gate's rows first (llama.cpp's
 *     LLM_FFN_SWIGLU on the fused output: SiLU of the first half times the second);
 *   - RoPE on half-split pairs with LongRoPE ("su") factor tables (rope_factors_short and
 *     rope_factors_long, [Dh/2], the loader reads them for every family): the long table
 *     where the context is longer than rope.scaling.original_context_length, the short one
 *     otherwise, and rope.scaling.attn_factor on q and k.
 * attention.sliding_window is left unread: llama.cpp runs Phi-3 without a window (its
 * converter writes the key for models trained without one), and this follows llama.cpp.
 */
#include "model/arch/arch.h"

static const seer_arch_tensor k_tensors[] = {
    {SEER_LT_ATTN_NORM, "attn_norm.weight", true},
    {SEER_LT_QKV, "attn_qkv.weight", true},
    {SEER_LT_O, "attn_output.weight", true},
    {SEER_LT_FFN_NORM, "ffn_norm.weight", true},
    {SEER_LT_GATE_UP, "ffn_up.weight", true},
    {SEER_LT_DOWN, "ffn_down.weight", true},
};

const seer_arch_desc seer_arch_phi3 = {
    .name = "phi3",
    .ctx_default = 4096,
    .rope_base_default = 10000.f,
    .norm_eps_default = 1e-5f,
    .rope_neox = 1,
    .act = SEER_ACT_SILU,
    .qscale = SEER_QSCALE_HEAD_DIM,
    .tensors = k_tensors,
    .n_tensors = sizeof k_tensors / sizeof *k_tensors,
};
