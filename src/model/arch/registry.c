/*
 * registry.c: the families seer loads, and what every family shares about a layer's tensors
 * (shape, division over tensor-parallel ranks, how gen-model and the synthetic builder make
 * them). A family's own file says which of them its layers have and what they are called.
 */
#include "model/arch/arch.h"

#include <stdio.h>
#include <string.h>

static const seer_arch_desc *const k_families[] = {
    &seer_arch_llama,
    &seer_arch_qwen2,
    &seer_arch_qwen3,
    &seer_arch_gemma2,
    &seer_arch_gemma3,
    &seer_arch_phi3,
};

#define N_FAMILIES ((int)(sizeof k_families / sizeof *k_families))

const seer_arch_desc *seer_arch_find(const char *name) {
    for (int i = 0; name && i < N_FAMILIES; i++)
        if (!strcmp(k_families[i]->name, name))
            return k_families[i];
    return NULL;
}

void seer_arch_list(char *buf, size_t cap) {
    if (!cap)
        return;
    buf[0] = 0;
    for (int i = 0; i < N_FAMILIES; i++) {
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", k_families[i]->name);
    }
}

/* The synthetic sub-streams of the first twelve roles are those seer has always used (the
 * same seed gives the same llama and qwen2 models as before); later roles draw from a range
 * of their own. */
#define NEW_ID(k) (((uint64_t)1 << 40) + (k))

static const seer_layer_tensor_info k_info[SEER_LT_COUNT] = {
    [SEER_LT_ATTN_NORM] = {SEER_DIM_ONE, SEER_DIM_D, true, SEER_DIV_NONE, SEER_FILL_NORM_WEIGHT, SEER_QROLE_NONE, 7, 1.f},
    [SEER_LT_Q] = {SEER_DIM_QD, SEER_DIM_D, false, SEER_DIV_HEADS, SEER_FILL_NORMAL, SEER_QROLE_ATTN_Q, 0, 0.f},
    [SEER_LT_K] = {SEER_DIM_KVD, SEER_DIM_D, false, SEER_DIV_HEADS, SEER_FILL_NORMAL, SEER_QROLE_ATTN_K, 1, 0.f},
    [SEER_LT_V] = {SEER_DIM_KVD, SEER_DIM_D, false, SEER_DIV_HEADS, SEER_FILL_NORMAL, SEER_QROLE_ATTN_V, 2, 0.f},
    [SEER_LT_BQ] = {SEER_DIM_ONE, SEER_DIM_QD, true, SEER_DIV_NONE, SEER_FILL_BIAS, SEER_QROLE_NONE, 9, 0.f},
    [SEER_LT_BK] = {SEER_DIM_ONE, SEER_DIM_KVD, true, SEER_DIV_NONE, SEER_FILL_BIAS, SEER_QROLE_NONE, 10, 0.f},
    [SEER_LT_BV] = {SEER_DIM_ONE, SEER_DIM_KVD, true, SEER_DIV_NONE, SEER_FILL_BIAS, SEER_QROLE_NONE, 11, 0.f},
    [SEER_LT_O] = {SEER_DIM_D, SEER_DIM_QD, false, SEER_DIV_HEADS_IN, SEER_FILL_NORMAL, SEER_QROLE_ATTN_OUT, 3, 0.f},
    [SEER_LT_Q_NORM] = {SEER_DIM_ONE, SEER_DIM_DH, true, SEER_DIV_NONE, SEER_FILL_NORM_WEIGHT, SEER_QROLE_NONE, NEW_ID(0), 1.f},
    [SEER_LT_K_NORM] = {SEER_DIM_ONE, SEER_DIM_DH, true, SEER_DIV_NONE, SEER_FILL_NORM_WEIGHT, SEER_QROLE_NONE, NEW_ID(1), 1.f},
    [SEER_LT_ATTN_POST_NORM] = {SEER_DIM_ONE, SEER_DIM_D, true, SEER_DIV_NONE, SEER_FILL_NORM_WEIGHT, SEER_QROLE_NONE, NEW_ID(2), 1.f},
    [SEER_LT_FFN_NORM] = {SEER_DIM_ONE, SEER_DIM_D, true, SEER_DIV_NONE, SEER_FILL_NORM_WEIGHT, SEER_QROLE_NONE, 8, 1.f},
    [SEER_LT_GATE] = {SEER_DIM_F, SEER_DIM_D, false, SEER_DIV_FFN, SEER_FILL_NORMAL, SEER_QROLE_FFN_GATE, 4, 0.f},
    [SEER_LT_UP] = {SEER_DIM_F, SEER_DIM_D, false, SEER_DIV_FFN, SEER_FILL_NORMAL, SEER_QROLE_FFN_UP, 5, 0.f},
    [SEER_LT_DOWN] = {SEER_DIM_D, SEER_DIM_F, false, SEER_DIV_FFN_IN, SEER_FILL_NORMAL, SEER_QROLE_FFN_DOWN, 6, 0.f},
    [SEER_LT_FFN_POST_NORM] = {SEER_DIM_ONE, SEER_DIM_D, true, SEER_DIV_NONE, SEER_FILL_NORM_WEIGHT, SEER_QROLE_NONE, NEW_ID(3), 1.f},
    /* the fused tensors do not divide over tensor-parallel ranks as one block of heads (the
     * backends that divide weights refuse them: seer_model_check_blocks) */
    [SEER_LT_QKV] = {SEER_DIM_QKVD, SEER_DIM_D, false, SEER_DIV_NONE, SEER_FILL_NORMAL, SEER_QROLE_ATTN_Q, NEW_ID(4), 0.f},
    [SEER_LT_GATE_UP] = {SEER_DIM_F2, SEER_DIM_D, false, SEER_DIV_NONE, SEER_FILL_NORMAL, SEER_QROLE_FFN_UP, NEW_ID(5), 0.f},
};

const seer_layer_tensor_info *seer_layer_tensor_get(seer_layer_tensor t) {
    return (unsigned)t < SEER_LT_COUNT ? &k_info[t] : NULL;
}

bool seer_arch_has(const seer_arch_desc *d, seer_layer_tensor t, bool *required) {
    for (int i = 0; i < d->n_tensors; i++)
        if (d->tensors[i].role == t) {
            if (required)
                *required = d->tensors[i].required;
            return true;
        }
    return false;
}

static int dim_of(seer_arch_dim d, int D, int F, int QD, int KVD, int Dh) {
    switch (d) {
    case SEER_DIM_ONE: return 1;
    case SEER_DIM_D: return D;
    case SEER_DIM_F: return F;
    case SEER_DIM_QD: return QD;
    case SEER_DIM_KVD: return KVD;
    case SEER_DIM_DH: return Dh;
    case SEER_DIM_QKVD: return QD + 2 * KVD;
    case SEER_DIM_F2: return 2 * F;
    }
    return 0;
}

void seer_arch_shape(seer_layer_tensor t, int D, int F, int QD, int KVD, int Dh, int *rows, int *cols) {
    const seer_layer_tensor_info *in = &k_info[t];
    *rows = dim_of(in->rows, D, F, QD, KVD, Dh);
    *cols = dim_of(in->cols, D, F, QD, KVD, Dh);
}

int seer_arch_fused_parts(seer_layer_tensor t, seer_layer_tensor parts[3]) {
    switch (t) {
    case SEER_LT_QKV:
        parts[0] = SEER_LT_Q, parts[1] = SEER_LT_K, parts[2] = SEER_LT_V;
        return 3;
    case SEER_LT_GATE_UP:
        parts[0] = SEER_LT_GATE, parts[1] = SEER_LT_UP;
        return 2;
    default:
        return 0;
    }
}

void seer_arch_defaults(const seer_arch_desc *d, seer_arch_hparams *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < d->n_keys; i++)
        out->v[d->keys[i].hp] = d->keys[i].def;
}

bool seer_arch_layer_windowed(const seer_arch_hparams *hp, int l) {
    if (hp->v[SEER_HP_WINDOW] <= 0)
        return false;
    const int p = (int)hp->v[SEER_HP_WINDOW_PATTERN];
    return p <= 1 || l % p < p - 1;
}
