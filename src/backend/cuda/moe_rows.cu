// moe_rows.cu: the MoE FFN of a few rows (a decode step of several sequences), each selected
// expert's weights read once for all the rows that chose it (see ft_cuda.h).
//
// The per-pair kernels (matvec_q.cu's GLU and SUM) read an expert's weights once per (token,
// slot) pair: at 32 sequences x 8 slots over 128 experts, a layer's 256 pairs re-read about 110
// distinct experts. Here, all on stream s with no host synchronisation:
//   1. ft_moe_group (moe_group.cu): the pairs sorted by expert, in tiles of up to MR_TILE pairs
//      of one expert (a hot expert takes several tiles).
//   2. GLU: CTA (32 consecutive rows of n_ff, tile) of 16 warps; warp w takes rows w and w + 16
//      of gate and up for every pair of the tile in one pass over the weights
//      (warp_rows_dot_x), then the activation (with the extras' biases) into shared memory;
//      warp c writes pair c's 32 values of h and their q8_1 block.
//   3. DOWN: CTA (16 rows of n_embd, tile) of 4 warps of 4 rows each; lane 4 c + r writes
//      pair c's product for row r, times the expert's scale plus its bias where the extras
//      have them, into out row pair (pair order).
//   4. ft_cuda_moe_combine: y[t] = sum_j w[t][j] * out[t * k + j], slot order.
// A product's lanes and order are those of the per-pair kernels (matvec_q.cuh), and the sum is
// the SUM kernel's, so the bits are theirs: batched equals alone.
#include "cuda_common.cuh"

extern "C" {
#include "../../quant/quant.h" // ft_row_bytes
}
#include "cuda_ops.h"
#include "expert_extras.cuh"
#include "matvec_q.cuh"
#include "moe_group.cuh"
#include "q8_1.cuh"

// 4 pairs a tile: 8 (the gate/up kernel at the same registers, one CTA an SM) and a 64-register
// bound for two CTAs an SM (spills) both decoded slower at 32 sequences (docs/performance.md).
enum {
    MR_TILE = 4,
    MR_DOWN_WARPS = 4,
    MR_DOWN_ROWS = 4, // rows of down per warp: lane 4 c + r writes (pair c, row r)
};
static_assert((int)GLUQ_WARPS >= (int)MR_TILE && MR_TILE * MR_DOWN_ROWS <= FT_WARP, "a GLU warp per pair; a lane per product");

typedef struct moe_rows_args {
    const uint8_t *w, *w_up;  // GLU: gate and up banks; DOWN: down (w_up NULL)
    size_t w_mat;             // bytes of one matrix
    const block_q8_1 *x;      // GLU: xq (n_tok rows); DOWN: hq (n_pairs rows)
    int x_div;                // pair p reads x row p / x_div
    int n_rows, n_cols;       // the matrices' shape
    int n_blocks;             // weight blocks per row (set by launch<T>)
    const int32_t *perm, *tiles, *sel;
    float *y;                 // GLU: h (n_pairs, n_rows); DOWN: out (n_pairs, n_rows)
    block_q8_1 *y_q;          // GLU: h's q8_1 form
    ft_cuda_expert_extras ex;
} moe_rows_args;

// The tile's pairs (the last one repeated past its count, so every pointer is valid), the
// activation rows they read, and the bank offset of its expert's matrix; false for an unused
// entry of the tile table.
template <int T, int TILE>
__device__ __forceinline__ bool tile_pairs(const moe_rows_args &a, int &pos0, int &cnt, int (&pr)[TILE],
                                           const block_q8_1 *(&xs)[TILE], size_t &base) {
    const int32_t *tl = a.tiles + MOE_TILE_INTS * blockIdx.y;
    if (tl[0] < 0) return false;
    pos0 = tl[1];
    cnt = tl[2];
    base = (size_t)tl[3] * a.w_mat; // the weights' address needs no more dependent loads
    const int64_t x_row = (int64_t)a.n_blocks * (qt<T>::qk / QK8_1);
#pragma unroll
    for (int c = 0; c < TILE; c++) {
        pr[c] = a.perm[pos0 + min(c, cnt - 1)];
        xs[c] = a.x + (int64_t)(pr[c] / a.x_div) * x_row;
    }
    return true;
}

template <int T, int TILE>
__global__ void __launch_bounds__(GLUQ_WARPS * FT_WARP) moe_rows_glu_kernel(const moe_rows_args a) {
    ft_pdl_begin();
    __shared__ float hs[TILE][QK8_1];
    const int warp = threadIdx.x / FT_WARP, lane = threadIdx.x % FT_WARP;
    int pos0, cnt, pr[TILE];
    const block_q8_1 *xs[TILE];
    size_t base;
    if (!tile_pairs<T, TILE>(a, pos0, cnt, pr, xs, base)) return; // the whole CTA, before any barrier
    const int blk = blockIdx.x, row0 = blk * QK8_1;
    const uint8_t *wr[2 * GLUQ_RPW];
    gluq_rows<T>(a.w, a.w_up, base, row0, warp, a.n_blocks, wr);
    float d[TILE][2 * GLUQ_RPW];
    warp_rows_dot_x<T, 2 * GLUQ_RPW, TILE>(wr, xs, cnt, a.n_blocks, lane, d);
    if (lane == 0) {
#pragma unroll
        for (int c = 0; c < TILE; c++) {
            if (c >= cnt) break;
            const int64_t e = a.sel[pr[c]];
#pragma unroll
            for (int i = 0; i < GLUQ_RPW; i++) {
                const int r = warp + GLUQ_WARPS * i;
                hs[c][r] = ft_expert_glu(a.ex, e, a.n_rows, row0 + r, d[c][2 * i], d[c][2 * i + 1]);
            }
        }
    }
    __syncthreads();
    if (warp < cnt) {
        const int p = a.perm[pos0 + warp];
        const float h = hs[warp][lane];
        a.y[(int64_t)p * a.n_rows + row0 + lane] = h;
        ft_q8_1_warp_store(h, a.y_q + (int64_t)p * (a.n_rows / QK8_1) + blk, lane);
    }
}

template <int T, int TILE, int DR>
__global__ void __launch_bounds__(MR_DOWN_WARPS * FT_WARP) moe_rows_down_kernel(const moe_rows_args a) {
    ft_pdl_begin();
    const int warp = threadIdx.x / FT_WARP, lane = threadIdx.x % FT_WARP;
    const int row0 = (blockIdx.x * MR_DOWN_WARPS + warp) * DR;
    if (row0 >= a.n_rows) return; // whole warps: no CTA-wide step follows
    int pos0, cnt, pr[TILE];
    const block_q8_1 *xs[TILE];
    size_t base;
    if (!tile_pairs<T, TILE>(a, pos0, cnt, pr, xs, base)) return;
    const size_t row_bytes = (size_t)a.n_blocks * qt<T>::bytes;
    const uint8_t *wr[DR];
#pragma unroll
    for (int r = 0; r < DR; r++) wr[r] = a.w + base + (size_t)min(row0 + r, a.n_rows - 1) * row_bytes;
    float d[TILE][DR] = {};
    warp_rows_dot_x<T, DR, TILE>(wr, xs, cnt, a.n_blocks, lane, d);
    // lane 4 c + r writes (pair c, row r); d is indexed by constants only, so it stays in registers
    float v = 0.0f;
#pragma unroll
    for (int c = 0; c < TILE; c++)
#pragma unroll
        for (int r = 0; r < DR; r++)
            if (lane == c * DR + r) v = d[c][r];
    const int c = lane / DR, row = row0 + lane % DR;
    if (c < cnt && row < a.n_rows) {
        const int p = a.perm[pos0 + c];
        a.y[(int64_t)p * a.n_rows + row] = ft_expert_down(a.ex, a.sel[p], a.n_rows, row, v);
    }
}

template <int T>
static void launch_glu(const moe_rows_args &a, int n_tiles, cudaStream_t s) {
    ft_launch(moe_rows_glu_kernel<T, MR_TILE>, dim3((unsigned)(a.n_rows / QK8_1), (unsigned)n_tiles),
              GLUQ_WARPS * FT_WARP, 0, s, a);
    CUDA_CHECK_LAUNCH();
}

template <int T>
static void launch_down(const moe_rows_args &a, int n_tiles, cudaStream_t s) {
    constexpr int rows_per_cta = MR_DOWN_WARPS * MR_DOWN_ROWS;
    ft_launch(moe_rows_down_kernel<T, MR_TILE, MR_DOWN_ROWS>, dim3((unsigned)((a.n_rows + rows_per_cta - 1) / rows_per_cta), (unsigned)n_tiles),
              MR_DOWN_WARPS * FT_WARP, 0, s, a);
    CUDA_CHECK_LAUNCH();
}

template <int T>
static void launch(const moe_rows_args &a0, int n_tiles, cudaStream_t s) {
    moe_rows_args a = a0;
    FT_CUDA_ASSERT(a.n_cols % qt<T>::qk == 0);
    a.n_blocks = a.n_cols / qt<T>::qk;
    if (a.w_up) launch_glu<T>(a, n_tiles, s);
    else launch_down<T>(a, n_tiles, s);
}

static void launch_type(uint32_t type, const moe_rows_args &a, int n_tiles, cudaStream_t s) {
    switch (type) {
    case FT_TYPE_Q4_0: launch<FT_TYPE_Q4_0>(a, n_tiles, s); break;
    case FT_TYPE_Q4_1: launch<FT_TYPE_Q4_1>(a, n_tiles, s); break;
    case FT_TYPE_Q5_0: launch<FT_TYPE_Q5_0>(a, n_tiles, s); break;
    case FT_TYPE_Q5_1: launch<FT_TYPE_Q5_1>(a, n_tiles, s); break;
    case FT_TYPE_Q8_0: launch<FT_TYPE_Q8_0>(a, n_tiles, s); break;
    case FT_TYPE_Q2_K: launch<FT_TYPE_Q2_K>(a, n_tiles, s); break;
    case FT_TYPE_Q3_K: launch<FT_TYPE_Q3_K>(a, n_tiles, s); break;
    case FT_TYPE_Q4_K: launch<FT_TYPE_Q4_K>(a, n_tiles, s); break;
    case FT_TYPE_Q5_K: launch<FT_TYPE_Q5_K>(a, n_tiles, s); break;
    case FT_TYPE_Q6_K: launch<FT_TYPE_Q6_K>(a, n_tiles, s); break;
    case FT_TYPE_IQ4_NL: launch<FT_TYPE_IQ4_NL>(a, n_tiles, s); break;
    case FT_TYPE_IQ4_XS: launch<FT_TYPE_IQ4_XS>(a, n_tiles, s); break;
    case FT_TYPE_MXFP4: launch<FT_TYPE_MXFP4>(a, n_tiles, s); break;
    default:
        fprintf(stderr, "ft_cuda_moe_rows: unsupported weight type %u\n", type);
        abort();
    }
}

extern "C" size_t ft_cuda_moe_rows_work_bytes(int n_pairs, int n_expert) {
    return ft_moe_group_work_bytes(n_pairs, n_expert, MR_TILE);
}

extern "C" void ft_cuda_moe_rows(const ft_cuda_moe_rows_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(ft_cuda_matvec_wants_q8_1(p->gate_type) && ft_cuda_matvec_wants_q8_1(p->down_type));
    FT_CUDA_ASSERT(p->n_tok >= 1 && p->k >= 1 && (int64_t)p->n_tok * p->k <= 65535);
    FT_CUDA_ASSERT(p->n_expert >= 1 && p->n_expert <= MOE_GROUP_MAX_EXPERT);
    FT_CUDA_ASSERT(p->n_embd > 0 && p->n_ff > 0 && p->n_ff % QK8_1 == 0 && p->n_embd <= INT32_MAX && p->n_ff <= INT32_MAX);
    FT_CUDA_ASSERT((uintptr_t)p->gate % 16 == 0 && (uintptr_t)p->up % 16 == 0 && (uintptr_t)p->down % 16 == 0);
    FT_CUDA_ASSERT(p->hq != p->xq);
    const size_t gate_row = ft_row_bytes((enum ft_type)p->gate_type, p->n_embd);
    const size_t down_row = ft_row_bytes((enum ft_type)p->down_type, p->n_ff);
    FT_CUDA_ASSERT(p->gate_mat_bytes == gate_row * (size_t)p->n_ff && p->down_mat_bytes == down_row * (size_t)p->n_embd);
    const int n_pairs = p->n_tok * p->k;
    const int n_tiles = ft_moe_group_max_tiles(n_pairs, p->n_expert, MR_TILE);
    FT_CUDA_ASSERT(n_tiles <= 65535); // grid.y
    const cudaStream_t st = ft_cuda_stream_handle(s);

    // 1. grouping
    int32_t *perm, *tiles;
    ft_moe_group(p->sel, p->ids, n_pairs, p->n_expert, MR_TILE, p->work, &perm, &tiles, st);

    // 2. h = act(x · gateᵀ, x · upᵀ) and its q8_1 form, in pair order
    moe_rows_args a = {};
    a.w = (const uint8_t *)p->gate;
    a.w_up = (const uint8_t *)p->up;
    a.w_mat = p->gate_mat_bytes;
    a.x = (const block_q8_1 *)p->xq;
    a.x_div = p->k;
    a.n_rows = (int)p->n_ff;
    a.n_cols = (int)p->n_embd;
    a.perm = perm;
    a.tiles = tiles;
    a.sel = p->sel;
    a.y = p->h;
    a.y_q = (block_q8_1 *)p->hq;
    a.ex = p->ex;
    a.ex.down_scale = a.ex.down_bias = NULL;
    launch_type(p->gate_type, a, n_tiles, st);

    // 3. out row p = h row p · downᵀ, scaled and biased
    moe_rows_args b = a;
    b.w = (const uint8_t *)p->down;
    b.w_up = NULL;
    b.w_mat = p->down_mat_bytes;
    b.x = (const block_q8_1 *)p->hq;
    b.x_div = 1;
    b.n_rows = (int)p->n_embd;
    b.n_cols = (int)p->n_ff;
    b.y = p->out;
    b.y_q = NULL;
    b.ex = p->ex;
    b.ex.gate_bias = b.ex.up_bias = NULL;
    launch_type(p->down_type, b, n_tiles, st);

    // 4. weighted sum, slot order
    ft_cuda_moe_combine(p->out, p->sel_w, p->y, p->n_tok, p->k, (int)p->n_embd, s);
}
