// gemm_f.cu: y = x · wᵀ for float weights w (n_out, n_in) in f32, f16 or bf16 and any number of
// float activation rows x (n_tok, n_in): the prefill form of matvec_f.cu, for the small float
// matrices of a model (an MoE router: 128 x 2048 f32), which the matvec kernel would read once
// per 8 tokens in 64-CTA launches (512 tokens: 64 launches).
//
// Steps, one 256-thread CTA per tile of 32 tokens x 32 outputs:
//   1. the tile's x and w rows are read GF_BK columns at a time (coalesced along the row,
//      weights converted to float) into shared memory, k-major; the next chunk's loads are
//      issued into registers before the current chunk is used (one chunk in flight);
//   2. thread (ty, tx) keeps 2 tokens x 2 outputs: acc = fmaf(w_k, x_k, acc) for k ascending,
//      one float FMA chain per output (deterministic; columns past n_in add 0 * 0);
//   3. each thread writes its outputs that lie inside (n_tok, n_out).
// Geometry: grid (ceil(n_out / 32), ceil(n_tok / 32)); where that leaves SMs idle (a router's
// 128 rows for a decode step of a few dozen tokens: 4 CTAs) and scratch is given, grid.z splits
// the columns, each split writing its partial products, which ft_cuda_sum_splits adds in order.
#include "cuda_common.cuh"
#include "cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../../quant/quant.h"

enum { GF_TILE = 32, GF_BK = 32, GF_THREADS = 256, GF_LOADS = GF_TILE * GF_BK / GF_THREADS };

template <int T> __device__ __forceinline__ float gf_load(const void *w, size_t i);
template <> __device__ __forceinline__ float gf_load<FT_TYPE_F32>(const void *w, size_t i) {
    return ((const float *)w)[i];
}
template <> __device__ __forceinline__ float gf_load<FT_TYPE_F16>(const void *w, size_t i) {
    return __half2float(__ushort_as_half(((const ft_half *)w)[i]));
}
template <> __device__ __forceinline__ float gf_load<FT_TYPE_BF16>(const void *w, size_t i) {
    return __uint_as_float((uint32_t)((const ft_bf16 *)w)[i] << 16);
}

typedef struct gemm_f_args {
    const void *w;  // (n_out, n_in)
    const float *x; // (n_tok, n_in)
    float *y;       // (n_tok, n_out)
    int n_out, n_in, n_tok;
    float *part;    // split z's partial products at part + z * n_tok * n_out, or NULL: no split
    int k_split;    // columns of each split, a multiple of GF_BK
} gemm_f_args;

template <int T>
__global__ void __launch_bounds__(GF_THREADS) gemm_f_kernel(const gemm_f_args a) {
    // k-major, padded by one column: a warp's stores (32 k of one tile row) and its reads (one
    // k of 2 tokens, 32 outputs) touch distinct banks
    __shared__ float xs[GF_BK][GF_TILE + 1];
    __shared__ float ws[GF_BK][GF_TILE + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int o0 = blockIdx.x * GF_TILE, t0 = blockIdx.y * GF_TILE;
    // element i of a chunk: tile row i / GF_BK, column i % GF_BK (a warp reads 32 consecutive
    // columns of one row)
    float xr[GF_LOADS], wr[GF_LOADS];
    auto load = [&](int k0) {
#pragma unroll
        for (int j = 0; j < GF_LOADS; j++) {
            const int i = tid + j * GF_THREADS, r = i / GF_BK, k = k0 + i % GF_BK;
            const bool kin = k < a.n_in;
            xr[j] = kin && t0 + r < a.n_tok ? a.x[(size_t)(t0 + r) * a.n_in + k] : 0.0f;
            wr[j] = kin && o0 + r < a.n_out ? gf_load<T>(a.w, (size_t)(o0 + r) * a.n_in + k) : 0.0f;
        }
    };
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    const int kbeg = a.part ? (int)blockIdx.z * a.k_split : 0;
    const int kend = a.part ? min(a.n_in, kbeg + a.k_split) : a.n_in;
    float *y = a.part ? a.part + (size_t)blockIdx.z * a.n_tok * a.n_out : a.y;
    load(kbeg);
    for (int k0 = kbeg; k0 < kend; k0 += GF_BK) {
#pragma unroll
        for (int j = 0; j < GF_LOADS; j++) {
            const int i = tid + j * GF_THREADS;
            xs[i % GF_BK][i / GF_BK] = xr[j];
            ws[i % GF_BK][i / GF_BK] = wr[j];
        }
        __syncthreads();
        if (k0 + GF_BK < kend) load(k0 + GF_BK); // in flight while this chunk is summed
#pragma unroll
        for (int kk = 0; kk < GF_BK; kk++) {
            const float x0 = xs[kk][2 * ty], x1 = xs[kk][2 * ty + 1];
            const float w0 = ws[kk][tx], w1 = ws[kk][tx + 16];
            acc[0][0] = fmaf(w0, x0, acc[0][0]);
            acc[0][1] = fmaf(w1, x0, acc[0][1]);
            acc[1][0] = fmaf(w0, x1, acc[1][0]);
            acc[1][1] = fmaf(w1, x1, acc[1][1]);
        }
        __syncthreads(); // xs and ws are rewritten next
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int t = t0 + 2 * ty + i;
        if (t >= a.n_tok) break;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int o = o0 + tx + 16 * j;
            if (o < a.n_out) y[(size_t)t * a.n_out + o] = acc[i][j];
        }
    }
}

extern "C" void ft_cuda_gemm_f(const ft_cuda_matvec_params *p, ft_cuda_stream *stream) {
    FT_CUDA_ASSERT(p->n_tok >= 1 && p->n_tok <= 65535 * GF_TILE);
    FT_CUDA_ASSERT(p->n_rows >= 1 && p->n_rows <= INT32_MAX && p->n_cols >= 1 && p->n_cols <= INT32_MAX);
    gemm_f_args a = {p->w, (const float *)p->x, p->y, (int)p->n_rows, (int)p->n_cols, p->n_tok, NULL, 0};
    dim3 grid((unsigned)((a.n_out + GF_TILE - 1) / GF_TILE), (unsigned)((a.n_tok + GF_TILE - 1) / GF_TILE));
    const cudaStream_t s = ft_cuda_stream_handle(stream);
    // fewer tiles than SMs: split the columns so that about two CTAs per SM stream the weights
    const int64_t out = (int64_t)a.n_tok * a.n_out, chunks = (a.n_in + GF_BK - 1) / GF_BK;
    int64_t per;
    const int splits = p->part ? ft_cuda_gemm_splits((int64_t)grid.x * grid.y, chunks, p->part_floats, out, &per) : 1;
    if (splits > 1) {
        a.part = p->part;
        a.k_split = (int)per * GF_BK;
        grid.z = (unsigned)splits;
    }
    switch (p->type) {
    case FT_TYPE_F32: gemm_f_kernel<FT_TYPE_F32><<<grid, GF_THREADS, 0, s>>>(a); break;
    case FT_TYPE_F16: gemm_f_kernel<FT_TYPE_F16><<<grid, GF_THREADS, 0, s>>>(a); break;
    case FT_TYPE_BF16: gemm_f_kernel<FT_TYPE_BF16><<<grid, GF_THREADS, 0, s>>>(a); break;
    default: FT_CUDA_ASSERT(!"ft_cuda_gemm_f: not a float type");
    }
    CUDA_CHECK_LAUNCH();
    if (splits > 1) ft_cuda_sum_splits(p->part, p->y, out, splits, stream);
}
