/*
 * gemma3.c: the Gemma 3 family (text decoder). Against the Llama layer it adds, as
 * llama.cpp's gemma3 graph computes them:
 *   - the embedding times sqrt(D);
 *   - RMSNorm of each query and key head (attn_q_norm, attn_k_norm, [Dh]) before RoPE;
 *   - sandwich norms: the attention output and the FFN output are RMS-normalised
 *     (attn_post_norm, ffn_post_norm) before their residual adds;
 *   - a GeGLU FFN with the tanh approximation of GELU;
 *   - sliding-window attention (attention.sliding_window) on five layers of every six
 *     (attention.sliding_window_pattern, default 6: the last of each group is global),
 *     the windowed layers with RoPE base rope.freq_base_swa (default 10000), the global ones
 *     with rope.freq_base and the file's RoPE scaling;
 *   - RoPE on half-split pairs; the query scale 1/sqrt(Dh) (1/sqrt(D/H) for the 27B model,
 *     as llama.cpp has it; no Gemma 3 GGUF carries query_pre_attn_scalar).
 * The norm weights in a GGUF already include Gemma's "1 +": plain RMSNorm applies them.
 * final_logit_softcapping is read (Gemma 3 files leave it out) and applied where a file
 * sets it, as llama.cpp does.
 */
#include "model/arch/arch.h"

static const seer_arch_tensor k_tensors[] = {
    {SEER_LT_ATTN_NORM, "attn_norm.weight", true},
    {SEER_LT_Q, "attn_q.weight", true},
    {SEER_LT_K, "attn_k.weight", true},
    {SEER_LT_V, "attn_v.weight", true},
    {SEER_LT_O, "attn_output.weight", true},
    {SEER_LT_ATTN_POST_NORM, "post_attention_norm.weight", true},
    {SEER_LT_K_NORM, "attn_k_norm.weight", true},
    {SEER_LT_Q_NORM, "attn_q_norm.weight", true},
    {SEER_LT_FFN_NORM, "ffn_norm.weight", true},
    {SEER_LT_GATE, "ffn_gate.weight", true},
    {SEER_LT_UP, "ffn_up.weight", true},
    {SEER_LT_DOWN, "ffn_down.weight", true},
    {SEER_LT_FFN_POST_NORM, "post_ffw_norm.weight", true},
};

static const seer_arch_key k_keys[] = {
    {"attention.sliding_window", SEER_HP_WINDOW, 0, true, 0, 1 << 24},
    {"attention.sliding_window_pattern", SEER_HP_WINDOW_PATTERN, 6, true, 0, 4096},
    {"rope.freq_base_swa", SEER_HP_ROPE_BASE_LOCAL, 10000., false, 1e-3, 1e12},
    {"final_logit_softcapping", SEER_HP_FINAL_SOFTCAP, 0., false, 0, 1e6},
};

const seer_arch_desc seer_arch_gemma3 = {
    .name = "gemma3",
    .ctx_default = 131072,
    .rope_base_default = 1000000.f,
    .norm_eps_default = 1e-6f,
    .rope_neox = 1,
    .embed_scale = true,
    .act = SEER_ACT_GELU_TANH,
    .qscale = SEER_QSCALE_GEMMA3,
    .tensors = k_tensors,
    .n_tensors = sizeof k_tensors / sizeof *k_tensors,
    .keys = k_keys,
    .n_keys = sizeof k_keys / sizeof *k_keys,
};
