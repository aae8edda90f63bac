/*
 * model.c: loading a model from GGUF as its family's descriptor (arch/arch.h) declares it:
 * hyper-parameters, RoPE frequencies, weight binding on the chosen backend, the
 * vocabulary; and the public accessors.
 * Not for: the forward pass (decoder.c) or the KV cache and batches (context.c).
 */
#include "model/model.h"
#include "parallel/tp.h"
#include "parallel/tp_remote.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

seer_model_params seer_model_default_params(void) {
    seer_model_params p = {.backend = SEER_BACKEND_AUTO, .n_threads = 0, .gpu_layers = -1};
    return p;
}

static seer_status get_u(const gguf_file *f, const char *arch, const char *key, int min, int max,
                         int *out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t v;
    SEER_TRY(seer_gguf_get_i64(f, k, &v));
    if (v < min || v > max)
        return seer_err(SEER_ERR_FORMAT, "metadata %s = %lld is out of range [%d, %d]", k,
                        (long long)v, min, max);
    *out = (int)v;
    return SEER_OK;
}

static seer_status get_u_opt(const gguf_file *f, const char *arch, const char *key, int def,
                             int min, int max, int *out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (!seer_gguf_find_kv(f, k)) {
        *out = def;
        return SEER_OK;
    }
    return get_u(f, arch, key, min, max, out);
}

static seer_status get_f_opt(const gguf_file *f, const char *arch, const char *key, float def,
                             float *out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    SEER_TRY(seer_gguf_get_f32_opt(f, k, def, out));
    if (!isfinite(*out))
        return seer_err(SEER_ERR_FORMAT, "metadata %s is not finite", k);
    return SEER_OK;
}

/* The family's own keys (seer_arch_key) into m->hp, defaults where the file has none. */
static seer_status read_family_keys(seer_model *m) {
    const seer_arch_desc *d = m->desc;
    const char *a = m->info.arch;
    seer_arch_defaults(d, &m->hp);
    for (int i = 0; i < d->n_keys; i++) {
        const seer_arch_key *k = &d->keys[i];
        double v;
        if (k->integer) {
            int iv = 0;
            SEER_TRY(get_u_opt(m->gguf, a, k->key, (int)k->def, (int)k->min, (int)k->max, &iv));
            v = iv;
        } else {
            float fv;
            SEER_TRY(get_f_opt(m->gguf, a, k->key, (float)k->def, &fv));
            if (fv < k->min || (k->max > k->min && fv > k->max))
                return seer_err(SEER_ERR_FORMAT, "metadata %s.%s = %g is out of range", a, k->key, fv);
            v = fv;
        }
        m->hp.v[k->hp] = v;
    }
    m->attn_softcap = (float)m->hp.v[SEER_HP_ATTN_SOFTCAP];
    m->final_softcap = (float)m->hp.v[SEER_HP_FINAL_SOFTCAP];
    m->window = (int)m->hp.v[SEER_HP_WINDOW];
    return SEER_OK;
}

static seer_status read_hparams(seer_model *m) {
    const gguf_file *f = m->gguf;
    seer_model_info *in = &m->info;
    SEER_TRY(seer_gguf_get_str(f, "general.architecture", in->arch, sizeof in->arch));
    m->desc = seer_arch_find(in->arch);
    if (!m->desc) {
        char list[256];
        seer_arch_list(list, sizeof list);
        return seer_err(SEER_ERR_UNSUPPORTED, "unsupported architecture '%s' (supported: %s)", in->arch, list);
    }
    const seer_arch_desc *d = m->desc;
    SEER_TRY(seer_gguf_get_str_opt(f, "general.name", "", in->name, sizeof in->name));
    const char *a = in->arch;
    const int big = 1 << 20;
    SEER_TRY(get_u(f, a, "embedding_length", 1, big, &in->dim));
    SEER_TRY(get_u(f, a, "block_count", 1, 4096, &in->n_layers));
    SEER_TRY(get_u(f, a, "feed_forward_length", 1, big, &in->ffn_dim));
    SEER_TRY(get_u(f, a, "attention.head_count", 1, 4096, &in->n_heads));
    SEER_TRY(get_u_opt(f, a, "attention.head_count_kv", in->n_heads, 1, 4096, &in->n_kv_heads));
    SEER_TRY(get_u_opt(f, a, "context_length", d->ctx_default, 1, 1 << 24, &in->ctx_train));
    if (in->n_heads % in->n_kv_heads)
        return seer_err(SEER_ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d",
                        in->n_heads, in->n_kv_heads);
    int dh_default = in->dim % in->n_heads ? 0 : in->dim / in->n_heads;
    SEER_TRY(get_u_opt(f, a, "attention.key_length", dh_default, 0, 4096, &in->head_dim));
    int vl;
    SEER_TRY(get_u_opt(f, a, "attention.value_length", in->head_dim, 0, 4096, &vl));
    if (in->head_dim <= 0 || in->head_dim % 2 || vl != in->head_dim)
        return seer_err(SEER_ERR_UNSUPPORTED, "unsupported head dimension (key %d, value %d)",
                        in->head_dim, vl);
    int n_rot;
    SEER_TRY(get_u_opt(f, a, "rope.dimension_count", in->head_dim, 0, 4096, &n_rot));
    if (n_rot != in->head_dim)
        return seer_err(SEER_ERR_UNSUPPORTED, "partial rotary embeddings (%d of %d dims) are not supported",
                        n_rot, in->head_dim);
    SEER_TRY(get_f_opt(f, a, "rope.freq_base", d->rope_base_default, &in->rope_base));
    SEER_TRY(get_f_opt(f, a, "attention.layer_norm_rms_epsilon", d->norm_eps_default, &in->norm_eps));
    if (in->rope_base <= 0 || in->norm_eps < 0)
        return seer_err(SEER_ERR_FORMAT, "invalid rope.freq_base %g or rms epsilon %g",
                        in->rope_base, in->norm_eps);
    in->rope_neox = d->rope_neox;
    return read_family_keys(m);
}

seer_status seer_rope_llama3(float *fr, int half, float factor, float lo, float hi, int orig) {
    if (!(factor > 0) || !(hi > lo) || !(lo > 0) || orig < 1)
        return seer_err(SEER_ERR_FORMAT, "invalid llama3 rope scaling (factor %g, low %g, high %g)",
                        factor, lo, hi);
    /* Llama 3.1: long wavelengths are slowed by factor, short ones kept, a smooth blend between */
    double lo_wl = orig / lo, hi_wl = orig / hi;
    for (int i = 0; i < half; i++) {
        double wl = 2 * M_PI / fr[i];
        if (wl < hi_wl)
            continue;
        if (wl > lo_wl) {
            fr[i] /= factor;
        } else {
            double smooth = (orig / wl - lo) / (hi - lo);
            fr[i] = (float)((1 - smooth) * fr[i] / factor + smooth * fr[i]);
        }
    }
    return SEER_OK;
}

/* Divides fr [half] by the f32 [half] factors of tensor name (llama.cpp's freq_factors);
 * *found says whether the file has it. */
static seer_status rope_divide(const seer_model *m, const char *name, float *fr, int half, bool *found) {
    const gguf_tensor *ft = seer_gguf_find_tensor(m->gguf, name);
    *found = ft != NULL;
    if (!ft)
        return SEER_OK;
    if (ft->ne[0] != (uint64_t)half || ft->n_dims != 1 || ft->type != GGML_TYPE_F32)
        return seer_err(SEER_ERR_FORMAT, "%s must be f32 [%d]", name, half);
    for (int i = 0; i < half; i++) {
        float d = ((const float *)ft->data)[i];
        if (!(d > 0) || !isfinite(d))
            return seer_err(SEER_ERR_FORMAT, "%s[%d] = %g is not positive", name, i, d);
        fr[i] /= d;
    }
    return SEER_OK;
}

/* YaRN (Peng et al. 2023) as ggml computes it (rope_yarn, ggml_rope_yarn_corr_dims, with
 * llama.cpp's beta_fast 32 and beta_slow 1): frequency i keeps ramp(i) of its own rotation
 * and takes the rest interpolated by 1/factor, where the ramp falls from 1 to 0 between the
 * dimensions whose wavelengths fit beta_fast and beta_slow turns into orig positions. */
void seer_rope_yarn(float *fr, int head_dim, float base, float factor, int orig) {
    const float fs = 1.f / factor, two_pi = 6.28318530717958647692f;
    const float lo_f = head_dim * logf(orig / (32.f * two_pi)) / (2 * logf(base));
    const float hi_f = head_dim * logf(orig / (1.f * two_pi)) / (2 * logf(base));
    const float lo = fmaxf(0.f, floorf(lo_f)), hi = fminf((float)(head_dim - 1), ceilf(hi_f));
    for (int i = 0; i < head_dim / 2; i++) {
        const float y = (i - lo) / fmaxf(0.001f, hi - lo);
        const float ramp = 1.f - fminf(1.f, fmaxf(0.f, y));
        fr[i] *= fs * (1 - ramp) + ramp;
    }
}

/* RoPE inverse frequencies, with the file's context scaling (the keys llama.cpp reads):
 * rope.scaling.type linear, yarn or longrope with rope.scaling.factor,
 * .original_context_length and .attn_factor; per-frequency divisors rope_freqs (Llama 3)
 * or rope_factors_short and rope_factors_long (LongRoPE); "llama3" with its own keys. */
static seer_status rope_freqs(seer_model *m) {
    const gguf_file *f = m->gguf;
    const seer_model_info *in = &m->info;
    const char *a = in->arch;
    const int half = in->head_dim / 2;
    float *fr = seer_malloc_array(half, sizeof *fr);
    if (!fr)
        return seer_err(SEER_ERR_OOM, "out of memory");
    m->inv_freq_host = fr;
    seer_rope_base_freqs(fr, in->head_dim, in->rope_base);

    char key[128], type[32];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    /* llama.cpp reads a file without the key as linear scaling by rope.scaling.factor */
    SEER_TRY(seer_gguf_get_str_opt(f, key, "linear", type, sizeof type));
    float factor, attn_factor;
    SEER_TRY(get_f_opt(f, a, "rope.scaling.factor", 0.f, &factor));
    SEER_TRY(get_f_opt(f, a, "rope.scaling.attn_factor", 1.f, &attn_factor));
    SEER_TRY(get_u_opt(f, a, "rope.scaling.original_context_length", in->ctx_train, 1, 1 << 24,
                       &m->rope_orig_ctx));
    if (factor == 0)
        factor = 1.f;
    if (!(factor > 0) || !(attn_factor > 0))
        return seer_err(SEER_ERR_FORMAT, "invalid rope scaling factor %g or attn_factor %g", factor, attn_factor);
    m->rope_mscale = attn_factor;
    const bool linear = !strcmp(type, "linear") || !strcmp(type, "longrope");
    bool divided;
    SEER_TRY(rope_divide(m, "rope_freqs.weight", fr, half, &divided));
    if (!divided)
        SEER_TRY(rope_divide(m, "rope_factors_short.weight", fr, half, &divided));
    if (!strcmp(type, "llama3") && !divided) {
        float lo, hi;
        int orig;
        SEER_TRY(get_f_opt(f, a, "rope.scaling.factor", 8.f, &factor));
        SEER_TRY(get_f_opt(f, a, "rope.scaling.low_freq_factor", 1.f, &lo));
        SEER_TRY(get_f_opt(f, a, "rope.scaling.high_freq_factor", 4.f, &hi));
        SEER_TRY(get_u_opt(f, a, "rope.scaling.original_context_length", 8192, 1, 1 << 24, &orig));
        SEER_TRY(seer_rope_llama3(fr, half, factor, lo, hi, orig));
    } else if (linear) {
        for (int i = 0; i < half; i++)
            fr[i] /= factor;
    } else if (!strcmp(type, "yarn")) {
        seer_rope_yarn(fr, in->head_dim, in->rope_base, factor, m->rope_orig_ctx);
        /* YaRN's attention temperature: 1 + 0.1 ln(factor) on q and k */
        if (factor > 1)
            m->rope_mscale *= 1.f + 0.1f * logf(factor);
    } else if (strcmp(type, "none") && strcmp(type, "llama3")) {
        return seer_err(SEER_ERR_UNSUPPORTED, "unsupported rope scaling type '%s'", type);
    }
    SEER_TRY(m->be->ops->alloc(m->be, half * sizeof(float), (void **)&m->inv_freq));
    SEER_TRY(m->be->ops->upload(m->be, m->inv_freq, fr, half * sizeof(float)));
    if (seer_gguf_find_tensor(f, "rope_factors_long.weight") && !seer_gguf_find_tensor(f, "rope_freqs.weight")) {
        float *fl = seer_malloc_array(half, sizeof *fl);
        if (!fl)
            return seer_err(SEER_ERR_OOM, "out of memory");
        m->inv_freq_long_host = fl;
        seer_rope_base_freqs(fl, in->head_dim, in->rope_base);
        SEER_TRY(rope_divide(m, "rope_factors_long.weight", fl, half, &divided));
        for (int i = 0; linear && i < half; i++) /* the long table takes the same scaling */
            fl[i] /= factor;
        SEER_TRY(m->be->ops->alloc(m->be, half * sizeof(float), (void **)&m->inv_freq_long));
        SEER_TRY(m->be->ops->upload(m->be, m->inv_freq_long, fl, half * sizeof(float)));
    }
    return seer_model_finish_rope(m);
}

void seer_rope_base_freqs(float *fr, int head_dim, float base) {
    for (int i = 0; i < head_dim / 2; i++)
        fr[i] = (float)pow(base, -2.0 * i / head_dim);
}

seer_status seer_model_finish_rope(seer_model *m) {
    const seer_model_info *in = &m->info;
    const seer_arch_desc *d = m->desc;
    m->attn_scale = 1.f / sqrtf((float)in->head_dim);
    if ((d->qscale == SEER_QSCALE_GEMMA3 && in->n_layers == 62) ||
        (d->qscale == SEER_QSCALE_GEMMA2 && in->n_layers == 46))
        m->attn_scale = 1.f / sqrtf((float)(in->dim / in->n_heads));
    /* the RoPE scaling's factor on q and on k multiplies their dot products twice over */
    if (m->rope_mscale > 0)
        m->attn_scale *= m->rope_mscale * m->rope_mscale;
    if (!m->window || m->hp.v[SEER_HP_ROPE_BASE_LOCAL] <= 0)
        return SEER_OK;
    /* the windowed layers: their own base, unscaled (llama.cpp's freq_scale_swa is 1) */
    const int half = in->head_dim / 2;
    float *fr = seer_malloc_array(half, sizeof *fr);
    if (!fr)
        return seer_err(SEER_ERR_OOM, "out of memory");
    m->inv_freq_local_host = fr;
    seer_rope_base_freqs(fr, in->head_dim, (float)m->hp.v[SEER_HP_ROPE_BASE_LOCAL]);
    SEER_TRY(m->be->ops->alloc(m->be, half * sizeof(float), (void **)&m->inv_freq_local));
    return m->be->ops->upload(m->be, m->inv_freq_local, fr, half * sizeof(float));
}

seer_status seer_model_check_blocks(const seer_model *m) {
    const seer_backend_ops *op = m->be->ops;
    const char *need = NULL;
    if (m->desc->embed_scale && !op->scale)
        need = "the scaled embedding";
    else if (m->desc->act == SEER_ACT_GELU_TANH && !op->geglu)
        need = "the GeGLU feed-forward block";
    else if (m->window && !op->attn_window)
        need = "sliding-window attention";
    else if (seer_arch_has(m->desc, SEER_LT_Q_NORM, NULL) && !op->qk_norm)
        need = "per-head q/k RMSNorm";
    else if (m->attn_softcap > 0 && !op->attn_softcap)
        need = "attention-logit soft-capping";
    else if (m->final_softcap > 0 && !op->softcap)
        need = "final-logit soft-capping";
    else if ((seer_arch_has(m->desc, SEER_LT_QKV, NULL) || seer_arch_has(m->desc, SEER_LT_GATE_UP, NULL)) &&
             !op->weight_rows && !op->weight_load_split)
        need = "fused q|k|v and gate|up tensors";
    if (need)
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend lacks %s, which %s models need", op->name,
                        need, m->desc->name);
    return SEER_OK;
}

static seer_status check_shape(const gguf_tensor *t, uint64_t ne0, uint64_t ne1) {
    int nd = ne1 ? 2 : 1;
    if (t->n_dims != nd || t->ne[0] != ne0 || (nd == 2 && t->ne[1] != ne1)) {
        char want[64];
        if (nd == 2)
            snprintf(want, sizeof want, "[%llu, %llu]", (unsigned long long)ne0, (unsigned long long)ne1);
        else
            snprintf(want, sizeof want, "[%llu]", (unsigned long long)ne0);
        return seer_err(SEER_ERR_FORMAT, "tensor %s has shape [%llu, %llu] (%d dims), expected %s",
                        t->name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                        t->n_dims, want);
    }
    return SEER_OK;
}

static seer_status find(const seer_model *m, const char *name, const gguf_tensor **out) {
    *out = seer_gguf_find_tensor(m->gguf, name);
    if (!*out)
        return seer_err(SEER_ERR_FORMAT, "missing tensor %s", name);
    return SEER_OK;
}

/* A weight, divided as split says where the backend divides weights (tensor parallelism). */
static seer_status bind_weight_split(seer_model *m, const char *name, int rows, int cols,
                                     seer_weight_split split, seer_weight *w) {
    const gguf_tensor *t;
    SEER_TRY(find(m, name, &t));
    SEER_TRY(check_shape(t, (uint64_t)cols, (uint64_t)rows));
    m->info.n_params += (uint64_t)rows * cols;
    const seer_backend_ops *op = m->be->ops;
    if (op->weight_load_split)
        return op->weight_load_split(m->be, t, m->weights, split, w);
    return op->weight_load(m->be, t, m->weights, w);
}

static seer_status bind_weight(seer_model *m, const char *name, int rows, int cols, seer_weight *w) {
    return bind_weight_split(m, name, rows, cols, (seer_weight_split){SEER_SPLIT_NONE, 1}, w);
}

static int ffn_unit(const seer_model *m);

/* The parts of a fused tensor (q|k|v, gate|up) each loaded and divided as the separate tensor
 * of a file without fusion would be: rows [r0, r0 + rows of the part) of the file's tensor. */
static seer_status bind_fused_parts(seer_model *m, const char *name, int rows, int cols,
                                    const seer_layer_tensor *parts, int np, seer_layer *L) {
    const gguf_tensor *t;
    SEER_TRY(find(m, name, &t));
    SEER_TRY(check_shape(t, (uint64_t)cols, (uint64_t)rows));
    const int be_ = seer_ggml_type_block_elems(t->type), bb = seer_ggml_type_block_bytes(t->type);
    if (be_ <= 0 || cols % be_)
        return seer_err(SEER_ERR_FORMAT, "tensor %s: %d columns of type %s", name, cols,
                        seer_ggml_type_name(t->type));
    const size_t row_bytes = (size_t)cols / be_ * bb;
    const seer_model_info *in = &m->info;
    const int qd = in->n_heads * in->head_dim, kvd = in->n_kv_heads * in->head_dim;
    for (int k = 0, r0 = 0; k < np; k++) {
        int pr, pc;
        seer_arch_shape(parts[k], in->dim, in->ffn_dim, qd, kvd, in->head_dim, &pr, &pc);
        if (r0 + pr > rows)
            return seer_err(SEER_ERR_FORMAT, "tensor %s: %d rows hold no part %d", name, rows, k);
        gguf_tensor sub = *t;
        sub.ne[1] = (uint64_t)pr;
        sub.data = (const char *)t->data + (size_t)r0 * row_bytes;
        sub.offset = t->offset + (uint64_t)r0 * row_bytes;
        sub.nbytes = (size_t)pr * row_bytes;
        const seer_weight_split sp = seer_div_split(seer_layer_tensor_get(parts[k])->div, in->head_dim, ffn_unit(m));
        SEER_TRY(m->be->ops->weight_load_split(m->be, &sub, m->weights, sp, seer_layer_weight(L, parts[k])));
        r0 += pr;
    }
    m->info.n_params += (uint64_t)rows * cols;
    return SEER_OK;
}

/* The FFN's unit of division: the down projection's block, so that its column parts are
 * whole blocks (and the gate and up rows follow the same boundaries). */
static int ffn_unit(const seer_model *m) {
    const gguf_tensor *t = seer_gguf_find_tensor(m->gguf, "blk.0.ffn_down.weight");
    const int b = t ? seer_ggml_type_block_elems(t->type) : 1;
    return b > 0 ? b : 1;
}

/* A small f32 vector (norm weight, bias) copied to the backend. */
static seer_status bind_vec(seer_model *m, const char *name, int n, bool required, float **out) {
    *out = NULL;
    const gguf_tensor *t = seer_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (required)
            return seer_err(SEER_ERR_FORMAT, "missing tensor %s", name);
        return SEER_OK;
    }
    SEER_TRY(check_shape(t, (uint64_t)n, 0));
    float *host = seer_malloc_array(n, sizeof *host);
    if (!host)
        return seer_err(SEER_ERR_OOM, "out of memory");
    seer_status s = seer_gguf_tensor_dequant(t, host, (uint64_t)n);
    if (s != SEER_OK) {
        free(host);
        return s;
    }
    s = m->be->ops->alloc(m->be, n * sizeof(float), (void **)out);
    if (s == SEER_OK)
        s = m->be->ops->upload(m->be, *out, host, n * sizeof(float));
    free(host);
    m->info.n_params += (uint64_t)n;
    return s;
}

/* The tensors outside the layers, and the layers' table. */
static seer_status bind_weights(seer_model *m) {
    const seer_model_info *in = &m->info;
    const int D = in->dim, V = in->n_vocab;
    const seer_weight_split vocab = {SEER_SPLIT_VOCAB, 1};
    SEER_TRY(bind_weight(m, "token_embd.weight", V, D, &m->tok_embd));
    SEER_TRY(bind_vec(m, "output_norm.weight", D, true, &m->output_norm));
    if (!m->desc->output_tied && seer_gguf_find_tensor(m->gguf, "output.weight")) {
        SEER_TRY(bind_weight_split(m, "output.weight", V, D, vocab, &m->output));
    } else if (m->be->ops->weight_load_split) {
        /* tied, on a backend that divides the LM head by vocabulary: its own divided copy */
        SEER_TRY(bind_weight_split(m, "token_embd.weight", V, D, vocab, &m->output));
        m->info.n_params -= (uint64_t)V * D;
        m->info.tied_output = true;
    } else {
        m->output = m->tok_embd;
        m->output.owned = false;
        m->info.tied_output = true;
    }
    m->layers = seer_calloc_array(in->n_layers, sizeof *m->layers);
    if (!m->layers)
        return seer_err(SEER_ERR_OOM, "out of memory");
    return SEER_OK;
}

/* Binds layer l's tensors. */
static seer_status bind_layer(seer_model *m, int l) {
    const seer_model_info *in = &m->info;
    const int D = in->dim, F = in->ffn_dim;
    const int qd = in->n_heads * in->head_dim, kvd = in->n_kv_heads * in->head_dim;
    const int Dh = in->head_dim, fu = ffn_unit(m);
    const seer_arch_desc *d = m->desc;
    {
        seer_layer *L = &m->layers[l];
        for (int i = 0; i < d->n_tensors; i++) {
            const seer_arch_tensor *t = &d->tensors[i];
            const seer_layer_tensor_info *ti = seer_layer_tensor_get(t->role);
            char n[96];
            snprintf(n, sizeof n, "blk.%d.%s", l, t->name);
            int rows, cols;
            seer_arch_shape(t->role, D, F, qd, kvd, Dh, &rows, &cols);
            if (ti->vec) {
                SEER_TRY(bind_vec(m, n, cols, t->required, seer_layer_vec(L, t->role)));
                continue;
            }
            const seer_weight_split sp = seer_div_split(ti->div, Dh, fu);
            seer_layer_tensor parts[3];
            const int np = seer_arch_fused_parts(t->role, parts);
            if (!np) {
                SEER_TRY(bind_weight_split(m, n, rows, cols, sp, seer_layer_weight(L, t->role)));
                continue;
            }
            /* a fused tensor on a backend that divides weights: each part divided as its own
             * tensor would be (its rows of the file's tensor) */
            if (m->be->ops->weight_load_split) {
                SEER_TRY(bind_fused_parts(m, n, rows, cols, parts, np, L));
                continue;
            }
            /* a fused tensor: bound whole, its parts as row views */
            seer_weight *whole = t->role == SEER_LT_QKV ? &L->file_qkv : &L->file_gu;
            SEER_TRY(bind_weight(m, n, rows, cols, whole));
            for (int k = 0, r0 = 0; k < np; k++) {
                int pr, pc;
                seer_arch_shape(parts[k], D, F, qd, kvd, Dh, &pr, &pc);
                SEER_TRY(m->be->ops->weight_rows(m->be, whole, r0, pr, seer_layer_weight(L, parts[k])));
                r0 += pr;
            }
        }
    }
    return SEER_OK;
}

/* The layers: where they stay (seer_host_plan, from the file's tensor sizes), then each bound,
 * fused and, past the resident ones, moved to host memory before the next is bound, so that a
 * model larger than the device loads. */
static seer_status bind_layers(seer_model *m, seer_model_params p, bool draft) {
    const int nl = m->info.n_layers;
    uint64_t *est = seer_calloc_array((size_t)nl, sizeof *est);
    if (!est)
        return seer_err(SEER_ERR_OOM, "out of memory");
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        int l;
        if (sscanf(t->name, "blk.%d.", &l) == 1 && l >= 0 && l < nl && t->ne[1] > 1)
            est[l] += seer_host_tensor_est(m, t);
    }
    seer_status s = seer_host_plan(m, p.gpu_layers, p.tp, est);
    free(est);
    SEER_TRY(s);
    if (draft && m->n_resident < nl)
        return seer_err(SEER_ERR_UNSUPPORTED, "draft weights do not combine with layers in host memory "
                        "(%d of %d layers on the device)", m->n_resident, nl);
    for (int l = 0; l < nl; l++) {
        s = bind_layer(m, l);
        if (s == SEER_OK)
            s = seer_model_fuse_layer(m, l);
        if (s == SEER_OK && l >= m->n_resident)
            s = seer_host_layer_offload(m, l);
        if (s == SEER_OK)
            continue;
        if (s != SEER_ERR_OOM || l >= m->n_resident || l == 0)
            return s;
        /* out of device memory among the resident layers: name what would fit */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", seer_last_error());
        return seer_err(s, "layer %d of %d: %s (gpu_layers %d or fewer keeps the rest in host memory)", l, nl,
                        msg, l - 1);
    }
    m->info.n_layers_resident = m->n_resident;
    return SEER_OK;
}

/* One rank's backend of the kind p asks for (rank: its device). */
static seer_status pick_one(seer_model_params p, const seer_cuda_tuning *t, int rank, seer_backend **out) {
    switch (p.backend) {
    case SEER_BACKEND_CPU:
        return seer_backend_cpu_init(p.n_threads, out);
    case SEER_BACKEND_CUDA:
#ifdef SEER_HAVE_CUDA
        return seer_backend_cuda_init_tuned(rank, t, out);
#else
        return seer_err(SEER_ERR_UNSUPPORTED, "this build of seer has no CUDA backend");
#endif
    case SEER_BACKEND_AUTO:
#ifdef SEER_HAVE_CUDA
        if (seer_backend_cuda_available())
            return seer_backend_cuda_init_tuned(rank, t, out);
#endif
        return seer_backend_cpu_init(p.n_threads, out);
    }
    (void)t; /* the CPU backend has no variants */
    return seer_err(SEER_ERR_INVALID_ARG, "unknown backend %d", (int)p.backend);
}

seer_status seer_model_check_tp(int H, int Hkv, int tp) {
    if (tp > 0 && !seer_tp_heads_divide(H, Hkv, tp))
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "%d attention heads with %d key/value heads do not divide over %d ranks (the ranks "
                        "must divide the heads, and divide or be divided by the key/value heads)",
                        H, Hkv, tp);
    return SEER_OK;
}

/* Rank 0 here, the other ranks in the processes that connect to p.tp_addr. */
static seer_status pick_remote(seer_model_params p, const seer_cuda_tuning *t, seer_backend **out) {
    const int wait = p.tp_timeout_ms > 0 ? p.tp_timeout_ms : 60000, op = p.tp_timeout_ms > 0 ? p.tp_timeout_ms : 600000;
    if (p.tp < 2)
        return seer_err(SEER_ERR_INVALID_ARG, "ranks in other processes need tp 2 or more (tp %d)", p.tp);
    seer_backend *ranks[SEER_TP_MAX] = {0};
    if (p.n_threads > 0) /* as in one process: the threads given are the group's (workers take theirs) */
        p.n_threads = p.n_threads / p.tp > 0 ? p.n_threads / p.tp : 1;
    SEER_TRY(pick_one(p, t, 0, &ranks[0]));
    int fds[SEER_TP_MAX];
    seer_status s = seer_tp_remote_accept(p.tp_addr, p.tp, wait, fds);
    for (int r = 1; r < p.tp && s == SEER_OK; r++) {
        s = seer_backend_remote_init(fds[r], r, op, ranks[0]->ops, &ranks[r]);
        fds[r] = -1;
    }
    if (s != SEER_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", seer_last_error());
        for (int r = 0; r < p.tp; r++) {
            if (ranks[r])
                ranks[r]->ops->free(ranks[r]);
            if (r > 0 && fds[r] >= 0)
                close(fds[r]);
        }
        return seer_err(s, "tensor parallelism over %d processes: %s", p.tp, msg);
    }
    return seer_backend_tp_init(ranks, p.tp, out);
}

seer_status seer_tp_worker(const char *addr, int rank, int n, seer_model_params p) {
    if (p.tp_timeout_ms < 0)
        return seer_err(SEER_ERR_INVALID_ARG, "tp_timeout_ms %d", p.tp_timeout_ms);
    seer_backend *be = NULL;
    SEER_TRY(pick_one(p, NULL, rank, &be));
    const seer_status s = seer_tp_worker_run(addr, rank, n, be, p.tp_timeout_ms > 0 ? p.tp_timeout_ms : 60000);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", seer_last_error());
    be->ops->free(be);
    return s == SEER_OK ? SEER_OK : seer_err(s, "%s", msg);
}

seer_status seer_model_pick_backend(seer_model_params p, const seer_cuda_tuning *t, seer_backend **out) {
    if (p.tp < 0 || p.tp > SEER_TP_MAX)
        return seer_err(SEER_ERR_INVALID_ARG, "tp %d is out of range [0, %d]", p.tp, SEER_TP_MAX);
    if (p.tp == 0)
        return pick_one(p, t, 0, out);
    if (p.tp_addr && p.tp_addr[0])
        return pick_remote(p, t, out);
    /* the CPU's threads are shared among its ranks */
    if (p.n_threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        p.n_threads = (int)(cores > 0 ? cores : 1);
    }
    p.n_threads = p.n_threads / p.tp > 0 ? p.n_threads / p.tp : 1;
    seer_backend *ranks[SEER_TP_MAX] = {0};
    for (int r = 0; r < p.tp; r++) {
        seer_status s = pick_one(p, t, r, &ranks[r]);
        if (s == SEER_OK && r > 0 && ranks[r]->ops != ranks[0]->ops)
            s = seer_err(SEER_ERR_BACKEND, "rank %d got the %s backend, rank 0 the %s one", r,
                         ranks[r]->ops->name, ranks[0]->ops->name);
        if (s != SEER_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", seer_last_error());
            for (int k = 0; k <= r; k++)
                if (ranks[k])
                    ranks[k]->ops->free(ranks[k]);
            return seer_err(s, "tensor parallelism over %d ranks: rank %d: %s", p.tp, r, msg);
        }
    }
    return seer_backend_tp_init(ranks, p.tp, out);
}

seer_status seer_model_fuse(seer_model *m) {
    for (int l = 0; l < m->info.n_layers; l++)
        SEER_TRY(seer_model_fuse_layer(m, l));
    return SEER_OK;
}

seer_status seer_model_fuse_layer(seer_model *m, int l) {
    const seer_backend_ops *op = m->be->ops;
    if (!op->weight_concat || !op->matmul_split)
        return SEER_OK;
    {
        seer_layer *L = &m->layers[l];
        /* Only weights of one dtype join (a mixed file may hold attn_v at higher precision
         * than attn_q and attn_k): the others stay separate matmuls. */
        seer_weight qkv[3] = {L->wq, L->wk, L->wv};
        if (qkv[0].dtype == qkv[1].dtype && qkv[1].dtype == qkv[2].dtype) {
            SEER_TRY(op->weight_concat(m->be, qkv, 3, false, &L->wqkv));
            L->wq = qkv[0], L->wk = qkv[1], L->wv = qkv[2];
            /* the parts no longer view the file's fused tensor: it goes */
            op->weight_free(m->be, &L->file_qkv);
        }
        /* with matmul_glu the gate and up rows alternate and the SiLU product comes out whole */
        seer_weight gu[2] = {L->w_gate, L->w_up};
        if (gu[0].dtype == gu[1].dtype) {
            const bool glu = op->matmul_glu != NULL && m->desc->act == SEER_ACT_SILU;
            SEER_TRY(op->weight_concat(m->be, gu, 2, glu, &L->wgu));
            L->w_gate = gu[0], L->w_up = gu[1];
            op->weight_free(m->be, &L->file_gu);
        }
    }
    return SEER_OK;
}

seer_status seer_model_load(const char *path, seer_model_params params, seer_model **out) {
    return seer_model_load_tuned(path, params, NULL, out);
}

seer_status seer_model_load_tuned(const char *path, seer_model_params params, const seer_cuda_tuning *t,
                                  seer_model **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    if (!path)
        return seer_err(SEER_ERR_INVALID_ARG, "no model path");
    if ((unsigned)params.weights > SEER_WEIGHTS_F32)
        return seer_err(SEER_ERR_INVALID_ARG, "unknown weights kind %d", (int)params.weights);
    if (params.n_threads < 0 || params.n_threads > 1024)
        return seer_err(SEER_ERR_INVALID_ARG, "n_threads %d is out of range [0, 1024]", params.n_threads);
    if (params.tp < 0 || params.tp > SEER_TP_MAX)
        return seer_err(SEER_ERR_INVALID_ARG, "tp %d is out of range [0, %d]", params.tp, SEER_TP_MAX);
    int draft = 0;
    SEER_TRY(seer_draft_dtype_parse(params.draft_weights, &draft));
    seer_model *m = calloc(1, sizeof *m);
    if (!m)
        return seer_err(SEER_ERR_OOM, "out of memory");
    m->weights = params.weights;
    seer_status s = seer_gguf_file_open(path, &m->gguf);
    if (s == SEER_OK)
        s = read_hparams(m);
    if (s == SEER_OK)
        s = seer_vocab_load(m->gguf, &m->vocab);
    if (s == SEER_OK) {
        m->info.n_vocab = seer_vocab_size(m->vocab);
        m->info.token_bos = seer_vocab_bos(m->vocab);
        m->info.token_eos = seer_vocab_eos(m->vocab);
        snprintf(m->info.tokenizer, sizeof m->info.tokenizer, "%s", seer_vocab_model_name(m->vocab));
        m->info.file_size = m->gguf->size;
        m->info.backend = "none";
        if (!params.vocab_only)
            s = seer_model_check_tp(m->info.n_heads, m->info.n_kv_heads, params.tp);
        if (s == SEER_OK && !params.vocab_only)
            s = seer_model_pick_backend(params, t, &m->be);
    }
    if (s == SEER_OK && m->be) {
        m->info.backend = m->be->ops->name;
        s = seer_model_check_blocks(m);
        if (s == SEER_OK)
            s = rope_freqs(m);
        if (s == SEER_OK)
            s = bind_weights(m);
        if (s == SEER_OK)
            s = bind_layers(m, params, draft != 0);
        if (s == SEER_OK)
            s = seer_model_make_draft(m, draft);
        /* The CUDA backend has copied every weight to the device (the CPU backend and the
         * tensor-parallel one over it use the tensors in place): the host copy of the file's
         * tensor data is no longer read, so its memory goes back; the metadata (vocabulary,
         * chat template) stays. */
        if (s == SEER_OK && !strcmp(m->be->ops->name, "cuda"))
            seer_gguf_drop_tensor_data(m->gguf);
    }
    if (s != SEER_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", seer_last_error());
        seer_model_free(m);
        return seer_err(s, "%s: %s", path, msg);
    }
    *out = m;
    return SEER_OK;
}

static void model_free_body(seer_model *m) {
    if (!m)
        return;
    seer_backend *be = m->be;
    if (be) {
        seer_model_free_draft(m);
        seer_host_layers_free(m);
        if (m->layers) {
            for (int l = 0; l < m->info.n_layers; l++) {
                seer_layer *L = &m->layers[l];
                seer_weight *ws[] = {&L->wq,     &L->wk,   &L->wv,     &L->wo,  &L->w_gate,
                                     &L->w_up,   &L->w_down, &L->wqkv, &L->wgu,
                                     &L->file_qkv, &L->file_gu};
                for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
                    be->ops->weight_free(be, ws[i]);
                float *vs[] = {L->attn_norm, L->ffn_norm,       L->bq,          L->bk,
                               L->bv,        L->q_norm, L->k_norm, L->attn_post_norm, L->ffn_post_norm};
                for (size_t i = 0; i < sizeof vs / sizeof *vs; i++)
                    if (vs[i])
                        be->ops->dealloc(be, vs[i]);
            }
        }
        if (m->output.data != m->tok_embd.data)
            be->ops->weight_free(be, &m->output);
        be->ops->weight_free(be, &m->tok_embd);
        if (m->output_norm)
            be->ops->dealloc(be, m->output_norm);
        if (m->inv_freq)
            be->ops->dealloc(be, m->inv_freq);
        if (m->inv_freq_local)
            be->ops->dealloc(be, m->inv_freq_local);
        if (m->inv_freq_long)
            be->ops->dealloc(be, m->inv_freq_long);
        be->ops->free(be);
    }
    free(m->layers);
    free(m->inv_freq_host);
    free(m->inv_freq_local_host);
    free(m->inv_freq_long_host);
    seer_vocab_free(m->vocab);
    seer_gguf_file_close(m->gguf);
    free(m);
}

/* the failure that led here stays the one the caller reads */
void seer_model_free(seer_model *m) { SEER_ERR_KEPT(model_free_body(m)); }

void seer_model_get_info(const seer_model *m, seer_model_info *info) {
    if (m && info)
        *info = m->info;
    else if (info)
        memset(info, 0, sizeof *info);
}

const seer_vocab *seer_model_vocab(const seer_model *m) { return m->vocab; }

seer_status seer_tokenize(const seer_model *m, const char *text, size_t len, bool add_bos,
                          bool parse_special, int32_t *out, int cap, int *n_out) {
    SEER_CHECK_ARG(m);
    SEER_CHECK_ARG(text);
    SEER_CHECK_ARG(n_out);
    if (!out && cap > 0)
        return seer_err(SEER_ERR_INVALID_ARG, "seer_tokenize: out is NULL with cap %d", cap);
    return seer_vocab_encode(m->vocab, text, len, add_bos, parse_special, out, cap, n_out);
}

seer_status seer_tokenize_marked(const seer_model *m, const char *text, const uint8_t *special_ok,
                                 size_t len, bool add_bos, int32_t *out, int cap, int *n_out) {
    return seer_vocab_encode_marked(m->vocab, text, special_ok, len, add_bos, out, cap, n_out);
}

int seer_token_piece(const seer_model *m, int32_t token, char *buf, int cap) {
    return m ? seer_vocab_piece(m->vocab, token, buf, cap) : -1;
}

int seer_token_bos(const seer_model *m) { return m ? m->info.token_bos : -1; }
int seer_token_eos(const seer_model *m) { return m ? m->info.token_eos : -1; }
int seer_n_vocab(const seer_model *m) { return m ? m->info.n_vocab : 0; }

/* Whether the model's backend has host memory of its own (else malloc's serves). */
static bool own_host_memory(const seer_model *m) {
    return m->be && m->be->ops->host_alloc && m->be->ops->host_free;
}

seer_status seer_host_alloc(const seer_model *m, size_t bytes, void **out) {
    SEER_CHECK_ARG(out);
    *out = NULL;
    SEER_CHECK_ARG(m);
    if (bytes == 0)
        return seer_err(SEER_ERR_INVALID_ARG, "host memory of 0 bytes asked for");
    if (own_host_memory(m))
        return m->be->ops->host_alloc(m->be, bytes, out);
    *out = malloc(bytes);
    return *out ? SEER_OK : seer_err(SEER_ERR_OOM, "cannot allocate %zu bytes of host memory", bytes);
}

void seer_host_free(const seer_model *m, void *p) {
    if (!m || !p)
        return;
    if (own_host_memory(m))
        m->be->ops->host_free(m->be, p);
    else
        free(p);
}
