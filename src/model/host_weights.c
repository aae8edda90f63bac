/*
 * host_weights.c: layers whose weights live in host memory and are streamed to the device
 * once per forward call (seer_model_params.gpu_layers), so that a model larger than the
 * device runs at the speed of the host-to-device link (SpecExec's setting: the target's
 * weights read from host memory once per verification, the pass amortised over its tokens).
 *
 * At load, an offloaded layer's linear weights are bound and fused on the device as usual,
 * then their bytes (the backend's own layout: CUDA's repacked quantised row blocks included,
 * so the repack happens once) move into one block of pinned host memory, and their data
 * pointers with them. In a forward call the decoder asks for each layer: a streamed layer is
 * copied into one of the context's two staging slots (backend stage), its weights rebased
 * from the block to the slot, and the copy of the layer two ahead is issued into the same
 * slot once its ops are issued, so the copy of layer l + 1 runs under the compute of layer l.
 * The matmuls see the same weight at another address: outputs are bit-identical to the
 * layer resident.
 *
 * Not for: the KV cache's host tier (src/kv, src/sched), tensor parallelism (refused), the
 * draft weights (refused).
 */
#include "model/model.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

#define HOST_ALIGN 256

/* The layer's linear weights (views and owners alike). */
static int layer_weights(seer_layer *L, seer_weight **ws) {
    seer_weight *all[] = {&L->wq, &L->wk,   &L->wv,  &L->wo,       &L->w_gate, &L->w_up,
                          &L->w_down, &L->wqkv, &L->wgu, &L->file_qkv, &L->file_gu};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        ws[n++] = all[i];
    return n;
}
#define LAYER_WEIGHTS 11

static bool streams(const seer_backend *be) {
    return be->ops->weight_bytes && be->ops->stage && be->ops->stage_wait;
}

uint64_t seer_host_tensor_est(const seer_model *m, const gguf_tensor *t) {
    /* a float tensor is held as the backend's float type (bf16 on CUDA), the rest as stored */
    const bool cpu = !strcmp(m->be->ops->name, "cpu");
    uint64_t elems = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_F16 || t->type == GGML_TYPE_BF16)
        return elems * (cpu ? 4 : 2);
    return t->nbytes;
}

seer_status seer_host_plan(seer_model *m, int gpu_layers, int tp, const uint64_t *est) {
    const int nl = m->info.n_layers;
    m->n_resident = nl;
    if (gpu_layers < -1)
        return seer_err(SEER_ERR_INVALID_ARG, "gpu_layers %d: -1 (from free memory) or a number of layers",
                        gpu_layers);
    if (gpu_layers >= 0) {
        m->n_resident = gpu_layers < nl ? gpu_layers : nl;
    } else if (streams(m->be) && strcmp(m->be->ops->name, "cpu") && m->be->ops->kv_mem_available) {
        /* from free memory: the first layers while they fit beside two staging slots and a
         * reserve for the KV cache and the scratch (a twentieth of what is free, >= 1 GiB) */
        uint64_t free_b = 0, biggest = 0, sum = 0;
        SEER_TRY(m->be->ops->kv_mem_available(m->be, &free_b));
        for (int l = 0; l < nl; l++)
            biggest = est[l] > biggest ? est[l] : biggest;
        uint64_t reserve = free_b / 20 > (1ull << 30) ? free_b / 20 : (1ull << 30);
        int n = 0;
        while (n < nl) {
            const uint64_t slots = n + 1 < nl ? 2 * biggest : 0;
            if (sum + est[n] + slots + reserve > free_b)
                break;
            sum += est[n++];
        }
        m->n_resident = n;
        if (n < nl && 2 * biggest + reserve > free_b)
            return seer_err(SEER_ERR_OOM,
                            "%.1f MiB of device memory is free beside the embedding and the LM head: too little "
                            "for two staging slots of %.1f MiB (the largest layer) and a reserve of %.1f MiB for "
                            "the KV cache; free device memory or use a device with more",
                            free_b / 1048576.0, biggest / 1048576.0, reserve / 1048576.0);
    }
    if (m->n_resident == nl)
        return SEER_OK;
    if (tp > 0)
        return seer_err(SEER_ERR_UNSUPPORTED,
                        "weights in host memory (gpu_layers %d of %d layers) do not combine with tensor "
                        "parallelism: pass gpu_layers -1 with enough ranks for the model, or no tp",
                        m->n_resident, nl);
    if (!streams(m->be))
        return seer_err(SEER_ERR_UNSUPPORTED, "the %s backend cannot stream layers from host memory (gpu_layers %d)",
                        m->be->ops->name, gpu_layers);
    m->host = seer_calloc_array((size_t)(nl - m->n_resident), sizeof *m->host);
    return m->host ? SEER_OK : seer_err(SEER_ERR_OOM, "out of memory");
}

seer_status seer_host_layer_offload(seer_model *m, int l) {
    seer_backend *be = m->be;
    seer_layer *L = &m->layers[l];
    seer_weight *ws[LAYER_WEIGHTS];
    const int n = layer_weights(L, ws);
    uintptr_t lo[LAYER_WEIGHTS], hi[LAYER_WEIGHTS];
    int order[LAYER_WEIGHTS], reg[LAYER_WEIGHTS], n_ord = 0;
    for (int i = 0; i < n; i++) {
        lo[i] = (uintptr_t)ws[i]->data;
        hi[i] = lo[i] + (ws[i]->data ? be->ops->weight_bytes(be, ws[i]) : 0);
        if (ws[i]->data && hi[i] == lo[i])
            return seer_err(SEER_ERR_BACKEND, "layer %d: the %s backend has no size for a %s weight",
                            l, be->ops->name, seer_ggml_type_name((ggml_type)ws[i]->dtype));
        if (hi[i] > lo[i]) { /* insertion sort by start */
            int k = n_ord++;
            while (k > 0 && lo[order[k - 1]] > lo[i]) {
                order[k] = order[k - 1];
                k--;
            }
            order[k] = i;
        }
    }
    /* the regions to copy: the union of overlapping ranges (a weight and the views of its
     * rows: a fused weight's parts, a file's fused tensor's) */
    uintptr_t rlo[LAYER_WEIGHTS], rhi[LAYER_WEIGHTS];
    size_t off[LAYER_WEIGHTS], total = 0;
    int nr = 0;
    for (int k = 0; k < n_ord; k++) {
        const int i = order[k];
        if (nr && lo[i] < rhi[nr - 1]) {
            rhi[nr - 1] = hi[i] > rhi[nr - 1] ? hi[i] : rhi[nr - 1];
        } else {
            rlo[nr] = lo[i];
            rhi[nr++] = hi[i];
        }
        reg[i] = nr - 1;
    }
    for (int r = 0; r < nr; r++) {
        off[r] = total;
        total += (rhi[r] - rlo[r] + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
    }
    seer_host_layer *h = &m->host[l - m->n_resident];
    if (total == 0)
        return SEER_OK;
    SEER_TRY(seer_host_alloc(m, total, &h->block));
    h->bytes = total;
    for (int r = 0; r < nr; r++) {
        seer_status s = be->ops->download(be, (char *)h->block + off[r], (const void *)rlo[r], rhi[r] - rlo[r]);
        if (s != SEER_OK) {
            seer_host_free(m, h->block);
            h->block = NULL;
            h->bytes = 0;
            return s;
        }
    }
    /* every weight now reads the block: the owners' device memory goes back */
    for (int i = 0; i < n; i++)
        if (ws[i]->owned) {
            seer_weight w = *ws[i];
            be->ops->weight_free(be, &w);
        }
    for (int i = 0; i < n; i++) {
        if (hi[i] > lo[i])
            ws[i]->data = (char *)h->block + off[reg[i]] + (lo[i] - rlo[reg[i]]);
        ws[i]->owned = false;
    }
    if (total > m->host_slot_bytes)
        m->host_slot_bytes = total;
    m->info.host_weight_bytes += total;
    return SEER_OK;
}

void seer_host_layers_free(seer_model *m) {
    if (!m->host)
        return;
    for (int i = 0; i < m->info.n_layers - m->n_resident; i++)
        seer_host_free(m, m->host[i].block);
    free(m->host);
    m->host = NULL;
}

seer_status seer_host_slots_alloc(seer_context *c) {
    const seer_model *m = c->model;
    if (m->n_resident == m->info.n_layers || m->host_slot_bytes == 0)
        return SEER_OK;
    for (int b = 0; b < 2; b++)
        SEER_TRY(c->be->ops->alloc(c->be, m->host_slot_bytes, &c->stage_slot[b]));
    return SEER_OK;
}

void seer_host_slots_free(seer_context *c) {
    for (int b = 0; b < 2; b++)
        if (c->stage_slot[b])
            c->be->ops->dealloc(c->be, c->stage_slot[b]);
    c->stage_slot[0] = c->stage_slot[1] = NULL;
}

seer_status seer_host_stage(seer_context *c, int l) {
    const seer_model *m = c->model;
    if (l < m->n_resident || l >= m->info.n_layers)
        return SEER_OK;
    const seer_host_layer *h = &m->host[l - m->n_resident];
    const int slot = (l - m->n_resident) & 1;
    if (!h->bytes)
        return SEER_OK;
    return c->be->ops->stage(c->be, slot, c->stage_slot[slot], h->block, h->bytes);
}

seer_status seer_host_layer_get(seer_context *c, int l, const seer_layer **L, seer_layer *tmp) {
    const seer_model *m = c->model;
    *L = &m->layers[l];
    if (l < m->n_resident)
        return SEER_OK;
    const seer_host_layer *h = &m->host[l - m->n_resident];
    const int slot = (l - m->n_resident) & 1;
    SEER_TRY(c->be->ops->stage_wait(c->be, slot));
    *tmp = m->layers[l];
    seer_weight *ws[LAYER_WEIGHTS];
    const int n = layer_weights(tmp, ws);
    const uintptr_t b0 = (uintptr_t)h->block, b1 = b0 + h->bytes;
    for (int i = 0; i < n; i++) {
        const uintptr_t d = (uintptr_t)ws[i]->data;
        if (d >= b0 && d < b1)
            ws[i]->data = (char *)c->stage_slot[slot] + (d - b0);
    }
    *L = tmp;
    return SEER_OK;
}
