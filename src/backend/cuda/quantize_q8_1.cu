// quantize_q8_1.cu: float activations -> q8_1 blocks, the activation format of the MMVQ
// kernels (matvec_q.cu).
//
// Steps, one warp per 32-float block (lane i owns element i):
//   1. load x[i] (one coalesced 128-byte read per warp);
//   2. amax = warp max of |x|; d = amax / 127; id = 127 / amax (0 for an all-zero block);
//   3. q = x * id rounded half to even, as the CPU backend's quantizer (cpu_quant.c);
//   4. sum = warp sum of q; lane 0 writes d and s = d * sum as fp16, every lane its code.
// The result equals the CPU backend's q8_1 rows (cpu_quantize_row) bit for bit; it differs
// from the scalar ft_quantize_row_q8_1_ref (id = 1 / d, half away from zero) in rare codes.
// Launch: 256 threads (8 warps, 8 blocks) per CTA, ceil(n_tok * n_cols / 32 / 8) CTAs.
#include "cuda_common.cuh"
#include "q8_1.cuh"

#include <cuda_fp16.h>

#include "../../quant/codec.h"

enum { Q8_1_WARPS = 8 };

__global__ void __launch_bounds__(Q8_1_WARPS * FT_WARP)
quantize_q8_1_kernel(const float *__restrict__ x, block_q8_1 *__restrict__ y, int64_t n_blocks) {
    ft_pdl_begin();
    const int64_t b = (int64_t)blockIdx.x * Q8_1_WARPS + threadIdx.x / FT_WARP;
    if (b >= n_blocks) return; // whole warps leave together
    const int lane = threadIdx.x % FT_WARP;
    ft_q8_1_warp_store(x[b * QK8_1 + lane], &y[b], lane);
}

extern "C" size_t ft_cuda_q8_1_bytes(int64_t n_cols, int n_tok) {
    return (size_t)(n_cols / QK8_1) * (size_t)n_tok * sizeof(block_q8_1);
}

extern "C" void ft_cuda_quantize_q8_1(const float *x, void *y, int64_t n_cols, int n_tok,
                                      ft_cuda_stream *s) {
    FT_CUDA_ASSERT(n_cols > 0 && n_cols % QK8_1 == 0 && n_tok >= 1);
    const int64_t n_blocks = n_cols / QK8_1 * n_tok;
    const int64_t grid = (n_blocks + Q8_1_WARPS - 1) / Q8_1_WARPS;
    FT_CUDA_ASSERT(grid <= INT32_MAX);
    ft_launch(quantize_q8_1_kernel, (unsigned)grid, Q8_1_WARPS * FT_WARP, 0, ft_cuda_stream_handle(s), 
        x, (block_q8_1 *)y, n_blocks);
    CUDA_CHECK_LAUNCH();
}
