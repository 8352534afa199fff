// moe_gemm.cu: the MoE FFN of a prefill batch, tokens grouped by expert (see ft_cuda.h).
//
// Steps, all on stream s, no host synchronisation (the routing stays on the device):
//   1. ft_moe_group (moe_group.cu): the n_pairs = n_tok * k (token, slot) pairs sorted by
//      expert (perm[position] = pair) and cut into tiles of GM_GROUP_BN positions; the grid of
//      the GEMMs has ft_moe_group_max_tiles rows, the unused ones leave at once.
//   2. gate/up: the fused grouped GEMM (gemm_q.cu): position p reads token perm[p] / k of xq
//      and writes h row p = act(x · gateᵀ, x · upᵀ) for its expert (SiLU, or the extras'
//      activation after their biases).
//   3. h -> q8_1 (quantize_q8_1.cu), n_pairs rows.
//   4. down: the grouped GEMM reads h row p and writes out row perm[p] (pair order), scaled
//      and biased per expert where the extras say.
//   5. ft_cuda_moe_combine: y[t] = sum_j w[t][j] * out[t * k + j].
#include "cuda_common.cuh"

extern "C" {
#include "../../quant/quant.h" // ft_row_bytes
}
#include "cuda_ops.h"
#include "gemm_q.cuh"
#include "moe_group.cuh"

extern "C" bool ft_cuda_moe_gemm_supported(uint32_t gate_type, uint32_t up_type, uint32_t down_type) {
    return gate_type == up_type && ft_cuda_gemm_supported(gate_type) && ft_cuda_gemm_supported(down_type);
}

extern "C" size_t ft_cuda_moe_gemm_work_bytes(int n_pairs, int n_expert) {
    return ft_moe_group_work_bytes(n_pairs, n_expert, GM_GROUP_BN);
}

extern "C" void ft_cuda_moe_gemm(const ft_cuda_moe_gemm_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(ft_cuda_moe_gemm_supported(p->gate_type, p->gate_type, p->down_type));
    FT_CUDA_ASSERT(p->n_tok >= 1 && p->k >= 1 && p->n_expert >= 1 && p->n_expert <= MOE_GROUP_MAX_EXPERT);
    FT_CUDA_ASSERT(p->n_embd > 0 && p->n_ff > 0 && p->n_embd <= INT32_MAX && p->n_ff <= INT32_MAX);
    FT_CUDA_ASSERT((int64_t)p->n_tok * p->k <= INT32_MAX);
    const int n_pairs = p->n_tok * p->k;
    const int n_tiles = ft_moe_group_max_tiles(n_pairs, p->n_expert, GM_GROUP_BN);
    FT_CUDA_ASSERT(n_tiles <= 65535); // grid.y
    const cudaStream_t st = ft_cuda_stream_handle(s);

    // 1. grouping
    int32_t *perm, *tiles;
    ft_moe_group(p->sel, NULL, n_pairs, p->n_expert, GM_GROUP_BN, p->work, &perm, &tiles, st);

    // 2. h = act(x · gateᵀ, x · upᵀ), positions in expert order
    gemm_q_args a = {};
    a.w0 = (const uint8_t *)p->gate;
    a.w1 = (const uint8_t *)p->up;
    a.mat_bytes = p->gate_mat_bytes;
    a.row_bytes = ft_row_bytes((enum ft_type)p->gate_type, p->n_embd);
    a.n_out = (int)p->n_ff;
    a.n_in = (int)p->n_embd;
    a.x = (const block_q8_1 *)p->xq;
    a.y = p->h;
    a.n_pos = n_pairs;
    a.tiles = tiles;
    a.x_map = perm;
    a.x_div = p->k;
    a.ex = p->ex;
    a.ex.down_scale = a.ex.down_bias = NULL;
    FT_CUDA_ASSERT(p->gate_mat_bytes == a.row_bytes * (size_t)p->n_ff);
    ft_cuda_gemm_grouped(p->gate_type, &a, n_tiles, st);

    // 3. h -> q8_1
    ft_cuda_quantize_q8_1(p->h, p->hq, p->n_ff, n_pairs, s);

    // 4. out row perm[p] = h row p · downᵀ
    gemm_q_args b = {};
    b.w0 = (const uint8_t *)p->down;
    b.mat_bytes = p->down_mat_bytes;
    b.row_bytes = ft_row_bytes((enum ft_type)p->down_type, p->n_ff);
    b.n_out = (int)p->n_embd;
    b.n_in = (int)p->n_ff;
    b.x = (const block_q8_1 *)p->hq;
    b.y = p->out;
    b.n_pos = n_pairs;
    b.tiles = tiles;
    b.x_div = 1;
    b.y_map = perm;
    b.ex = p->ex;
    b.ex.gate_bias = b.ex.up_bias = NULL;
    FT_CUDA_ASSERT(p->down_mat_bytes == b.row_bytes * (size_t)p->n_embd);
    ft_cuda_gemm_grouped(p->down_type, &b, n_tiles, st);

    // 5. weighted sum
    ft_cuda_moe_combine(p->out, p->sel_w, p->y, p->n_tok, p->k, (int)p->n_embd, s);
}
