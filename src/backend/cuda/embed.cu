/*
 * embed.cu: token embedding lookup: rows of the table as f32 activations (bf16 widened here,
 * rows of a quantised table dequantised by matmul_q.cu).
 * Not for: the output projection (matmul.cu), even when it shares the table.
 */
#include "backend/cuda/matmul.cuh"

/* One block per token. A token outside the table (the model validates them, so never from
 * there) gives a NaN row rather than a read out of bounds. */
__global__ void embed_kernel(float *y, const bf16 *emb, const int32_t *tokens, int V, int D) {
    const int t = blockIdx.x;
    const int tok = tokens[t];
    float *yr = y + (size_t)t * D;
    if (tok < 0 || tok >= V) {
        for (int i = threadIdx.x; i < D; i += blockDim.x)
            yr[i] = __int_as_float(0x7fc00000);
        return;
    }
    const bf16 *er = emb + (size_t)tok * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        yr[i] = __bfloat162float(er[i]);
}

seer_status seer_cuda_embed(seer_backend *be, float *y, const seer_weight *emb,
                            const int32_t *tokens, int T) {
    seer_cuda *c = seer_cuda_of(be);
    if (T <= 0)
        return SEER_OK;
    const int32_t *dt;
    SEER_TRY(seer_cuda_index(c, SEER_IDX_TOKENS, tokens, T, 0, &dt));
    if (emb->dtype != GGML_TYPE_BF16)
        return seer_cuda_q_gather_f32(c, y, emb, dt, T);
    embed_kernel<<<(unsigned)T, 256, 0, c->stream>>>(y, (const bf16 *)emb->data, dt, emb->rows,
                                                     emb->cols);
    LAUNCH_TRY("embed_kernel");
    return SEER_OK;
}
