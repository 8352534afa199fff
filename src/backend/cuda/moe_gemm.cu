// moe_gemm.cu: the MoE FFN of a prefill batch, tokens grouped by expert (see ft_cuda.h).
//
// Steps, all on stream s, no host synchronisation (the routing stays on the device):
//   1. moe_group_kernel (one CTA): a counting sort of the n_pairs = n_tok * k (token, slot)
//      pairs by expert: counts per expert (shared-memory atomics), exclusive sums, then each
//      pair's position in the sorted order (perm[position] = pair). Order inside an expert is
//      whatever the atomics give; no result depends on it, because every output element is
//      computed from its own row and token alone, in a fixed order over k. The same kernel
//      writes the tile table: expert e's count is cut into tiles of GM_GROUP_BN positions,
//      entries (e, first position, count); the slots past the last tile get expert -1. The
//      grid of the GEMMs has max_tiles >= sum over e of ceil(count_e / BN) rows (bound below).
//   2. gate/up: the fused grouped GEMM (gemm_q.cu): position p reads token perm[p] / k of xq
//      and writes h row p = act(x · gateᵀ, x · upᵀ) for its expert (SiLU, or the extras'
//      activation after their biases).
//   3. h -> q8_1 (quantize_q8_1.cu), n_pairs rows.
//   4. down: the grouped GEMM reads h row p and writes out row perm[p] (pair order), scaled
//      and biased per expert where the extras say.
//   5. ft_cuda_moe_combine: y[t] = sum_j w[t][j] * out[t * k + j].
// Workspace: perm (n_pairs int32), then the tile table (max_tiles x 3 int32).
#include "cuda_common.cuh"

extern "C" {
#include "../../quant/quant.h" // ft_row_bytes
}
#include "cuda_ops.h"
#include "gemm_q.cuh"

enum { GROUP_THREADS = 1024, GROUP_MAX_EXPERT = 2048 };

// sum over experts of ceil(count / BN) <= n_pairs / BN + (experts with a count), each at most
// min(n_expert, n_pairs)
static int max_tiles(int n_pairs, int n_expert) {
    return (n_pairs + GM_GROUP_BN - 1) / GM_GROUP_BN + (n_expert < n_pairs ? n_expert : n_pairs);
}

__global__ void __launch_bounds__(GROUP_THREADS)
moe_group_kernel(const int32_t *__restrict__ sel, int n_pairs, int n_expert, int n_tiles,
                 int32_t *__restrict__ perm, int32_t *__restrict__ tiles) {
    extern __shared__ int sh[];
    int *cnt = sh;                  // (n_expert) pairs per expert
    int *next = sh + n_expert;      // (n_expert) next free position of each expert
    int *tile0 = sh + 2 * n_expert; // (n_expert) first tile of each expert
    __shared__ int total_tiles;
    const int tid = threadIdx.x;

    for (int e = tid; e < n_expert; e += GROUP_THREADS) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < n_pairs; p += GROUP_THREADS) {
        const int e = sel[p];
        if (e < 0 || e >= n_expert) __trap(); // the router wrote an impossible expert
        atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    // exclusive sums: a serial pass over the experts (a few hundred at most), by one thread
    if (tid == 0) {
        int pos = 0, tl = 0;
        for (int e = 0; e < n_expert; e++) {
            next[e] = pos;
            tile0[e] = tl;
            pos += cnt[e];
            tl += (cnt[e] + GM_GROUP_BN - 1) / GM_GROUP_BN;
        }
        total_tiles = tl;
    }
    __syncthreads();
    for (int e = tid; e < n_expert; e += GROUP_THREADS) {
        const int nt = (cnt[e] + GM_GROUP_BN - 1) / GM_GROUP_BN;
        for (int i = 0; i < nt; i++) {
            int32_t *tl = tiles + 3 * (tile0[e] + i);
            tl[0] = e;
            tl[1] = next[e] + i * GM_GROUP_BN;
            tl[2] = min(GM_GROUP_BN, cnt[e] - i * GM_GROUP_BN);
        }
    }
    for (int i = total_tiles + tid; i < n_tiles; i += GROUP_THREADS) {
        tiles[3 * i] = -1;
        tiles[3 * i + 1] = 0;
        tiles[3 * i + 2] = 0;
    }
    __syncthreads(); // next[] is read above before the scatter advances it
    for (int p = tid; p < n_pairs; p += GROUP_THREADS) perm[atomicAdd(&next[sel[p]], 1)] = p;
}

extern "C" bool ft_cuda_moe_gemm_supported(uint32_t gate_type, uint32_t up_type, uint32_t down_type) {
    return gate_type == up_type && ft_cuda_gemm_supported(gate_type) && ft_cuda_gemm_supported(down_type);
}

extern "C" size_t ft_cuda_moe_gemm_work_bytes(int n_pairs, int n_expert) {
    return ((size_t)n_pairs + 3 * (size_t)max_tiles(n_pairs, n_expert)) * sizeof(int32_t);
}

extern "C" void ft_cuda_moe_gemm(const ft_cuda_moe_gemm_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(ft_cuda_moe_gemm_supported(p->gate_type, p->gate_type, p->down_type));
    FT_CUDA_ASSERT(p->n_tok >= 1 && p->k >= 1 && p->n_expert >= 1 && p->n_expert <= GROUP_MAX_EXPERT);
    FT_CUDA_ASSERT(p->n_embd > 0 && p->n_ff > 0 && p->n_embd <= INT32_MAX && p->n_ff <= INT32_MAX);
    FT_CUDA_ASSERT((int64_t)p->n_tok * p->k <= INT32_MAX);
    const int n_pairs = p->n_tok * p->k;
    const int n_tiles = max_tiles(n_pairs, p->n_expert);
    FT_CUDA_ASSERT(n_tiles <= 65535); // grid.y
    const cudaStream_t st = ft_cuda_stream_handle(s);
    int32_t *perm = (int32_t *)p->work;
    int32_t *tiles = perm + n_pairs;

    // 1. grouping
    const size_t shm = 3 * (size_t)p->n_expert * sizeof(int);
    moe_group_kernel<<<1, GROUP_THREADS, shm, st>>>(p->sel, n_pairs, p->n_expert, n_tiles, perm, tiles);
    CUDA_CHECK_LAUNCH();

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
