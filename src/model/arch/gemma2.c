/*
 * gemma2.c: the Gemma 2 family. Against the Llama layer it adds, as llama.cpp's gemma2 graph
 * computes them:
 *   - the embedding times sqrt(D), and the output always the embedding (llama.cpp reads no
 *     output.weight for Gemma 2);
 *   - sandwich norms: the attention and FFN outputs are RMS-normalised (post_attention_norm,
 *     post_ffw_norm) before their residual adds;
 *   - a GeGLU FFN with the tanh approximation of GELU;
 *   - attention-logit soft-capping, s -> c tanh(s / c) with c = attn_logit_softcapping
 *     (default 50), and the same on the final logits with final_logit_softcapping (default
 *     30);
 *   - sliding-window attention (attention.sliding_window, default 4096) on every other
 *     layer, the first windowed (attention.sliding_window_pattern, default 2); the windowed
 *     layers take rope.freq_base_swa where the file has it, else the global base;
 *   - RoPE on half-split pairs; the query scale 1/sqrt(Dh), 1/sqrt(D/H) for the 46-layer
 *     (27B) model (the query_pre_attn_scalar of the Hugging Face config is not in the GGUF;
 *     llama.cpp decides by the layer count, and so does this).
 * The norm weights in a GGUF already include Gemma's "1 +": plain RMSNorm applies them.
 */
#include "model/arch/arch.h"

static const seer_arch_tensor k_tensors[] = {
    {SEER_LT_ATTN_NORM, "attn_norm.weight", true},
    {SEER_LT_Q, "attn_q.weight", true},
    {SEER_LT_K, "attn_k.weight", true},
    {SEER_LT_V, "attn_v.weight", true},
    {SEER_LT_O, "attn_output.weight", true},
    {SEER_LT_ATTN_POST_NORM, "post_attention_norm.weight", true},
    {SEER_LT_FFN_NORM, "ffn_norm.weight", true},
    {SEER_LT_GATE, "ffn_gate.weight", true},
    {SEER_LT_UP, "ffn_up.weight", true},
    {SEER_LT_DOWN, "ffn_down.weight", true},
    {SEER_LT_FFN_POST_NORM, "post_ffw_norm.weight", true},
};

static const seer_arch_key k_keys[] = {
    {"attention.sliding_window", SEER_HP_WINDOW, 4096, true, 0, 1 << 24},
    {"attention.sliding_window_pattern", SEER_HP_WINDOW_PATTERN, 2, true, 0, 4096},
    {"rope.freq_base_swa", SEER_HP_ROPE_BASE_LOCAL, 0., false, 0, 1e12},
    {"attn_logit_softcapping", SEER_HP_ATTN_SOFTCAP, 50., false, 0, 1e6},
    {"final_logit_softcapping", SEER_HP_FINAL_SOFTCAP, 30., false, 0, 1e6},
};

const seer_arch_desc seer_arch_gemma2 = {
    .name = "gemma2",
    .ctx_default = 8192,
    .rope_base_default = 10000.f,
    .norm_eps_default = 1e-6f,
    .rope_neox = 1,
    .embed_scale = true,
    .act = SEER_ACT_GELU_TANH,
    .qscale = SEER_QSCALE_GEMMA2,
    .output_tied = true,
    .tensors = k_tensors,
    .n_tensors = sizeof k_tensors / sizeof *k_tensors,
    .keys = k_keys,
    .n_keys = sizeof k_keys / sizeof *k_keys,
};
