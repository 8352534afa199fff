// set_rows.cu: writes float rows into a KV-cache tensor as f16 or q8_0, with the CPU op's
// arithmetic (kv_store.cuh).
//
// Launch: q8_0: one warp per block of 32, 8 warps per CTA; f16: a thread per element; grid.y
// the destination (a layer's k and v rows in one launch).
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "kv_store.cuh"

enum { SR_WARPS = 8 };

// The destinations of one launch (blockIdx.y picks one).
typedef struct set_rows_args {
    uint8_t *dst[FT_CUDA_SET_ROWS_MAX_DST];
    size_t row_bytes[FT_CUDA_SET_ROWS_MAX_DST];
    const float *x[FT_CUDA_SET_ROWS_MAX_DST];
    const int32_t *blocks, *pos_dev;
    ft_cuda_seq_rows rows;
    int pos;
    int64_t n;
} set_rows_args;

// The cache row of the launch's row r.
__device__ __forceinline__ int64_t set_rows_row(const set_rows_args &a, int64_t r) {
    if (a.rows.pos) return ft_kv_row(a.rows.blocks[r], a.rows.pos[r]);
    return ft_kv_row(a.blocks, (a.pos_dev ? *a.pos_dev : 0) + a.pos + r);
}

__global__ void set_rows_f16_kernel(const set_rows_args a, int64_t total) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (i >= total) return;
    const int j = blockIdx.y;
    ft_kv_store_f16(ft_param_pick(a.dst, j) + (size_t)set_rows_row(a, i / a.n) * ft_param_pick(a.row_bytes, j), i % a.n,
                    ft_param_pick(a.x, j)[i]);
}

__global__ void __launch_bounds__(SR_WARPS * FT_WARP) set_rows_q8_0_kernel(const set_rows_args a, int64_t n_groups) {
    ft_pdl_begin();
    const int64_t g = (int64_t)blockIdx.x * SR_WARPS + threadIdx.x / FT_WARP;
    if (g >= n_groups) return; // whole warps leave together
    const int j = blockIdx.y;
    const int lane = threadIdx.x % FT_WARP;
    const int64_t per_row = a.n / 32, r = g / per_row, b = g % per_row;
    const float v = ft_param_pick(a.x, j)[r * a.n + b * 32 + lane];
    ft_kv_store_q8_0(ft_param_pick(a.dst, j) + (size_t)set_rows_row(a, r) * ft_param_pick(a.row_bytes, j), b, v, lane);
}

extern "C" void ft_cuda_set_rows(uint32_t type, const ft_cuda_set_rows_dst *d, int n_dst, const int32_t *blocks,
                                 const ft_cuda_seq_rows *rows, const int32_t *pos_dev, int pos, int n_rows, int64_t n,
                                 ft_cuda_stream *s) {
    FT_CUDA_ASSERT(type == FT_TYPE_F16 || (type == FT_TYPE_Q8_0 && n % 32 == 0));
    FT_CUDA_ASSERT(n_dst >= 1 && n_dst <= FT_CUDA_SET_ROWS_MAX_DST);
    set_rows_args a;
    for (int j = 0; j < n_dst; j++) {
        a.dst[j] = (uint8_t *)d[j].dst;
        a.row_bytes[j] = d[j].row_bytes;
        a.x[j] = d[j].x;
    }
    a.blocks = blocks;
    a.pos_dev = pos_dev;
    a.rows = rows ? *rows : ft_cuda_seq_rows{NULL, NULL};
    a.pos = pos;
    a.n = n;
    const cudaStream_t st = ft_cuda_stream_handle(s);
    if (type == FT_TYPE_F16) {
        const int64_t total = (int64_t)n_rows * n;
        if (total == 0) return;
        ft_launch(set_rows_f16_kernel, dim3((unsigned)((total + 255) / 256), (unsigned)n_dst), 256, 0, st, a, total);
        CUDA_CHECK_LAUNCH();
        return;
    }
    const int64_t groups = (int64_t)n_rows * (n / 32);
    if (groups == 0) return;
    const unsigned grid = (unsigned)((groups + SR_WARPS - 1) / SR_WARPS);
    ft_launch(set_rows_q8_0_kernel, dim3(grid, (unsigned)n_dst), SR_WARPS * FT_WARP, 0, st, a, groups);
    CUDA_CHECK_LAUNCH();
}
