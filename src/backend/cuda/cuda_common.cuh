// cuda_common.cuh: what every .cu of the CUDA backend shares (internal to src/backend/cuda/).
//
// - CUDA_CHECK(call): aborts with the statement, file, line and CUDA's message on failure.
// - CUDA_CHECK_LAUNCH(): checks the launch just made (bad geometry, missing kernel image) and
//   marks it for FT_CUDA_PROFILE.
// - the block size of the decode kernels and a few warp reductions.
#ifndef FT_CUDA_COMMON_CUH
#define FT_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "ft_cuda.h"

#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: CUDA error in %s: %s (%s)\n", __FILE__, __LINE__, #call, \
                    cudaGetErrorString(err_), cudaGetErrorName(err_));                       \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

#define CUDA_CHECK_LAUNCH()                                                                  \
    do {                                                                                     \
        CUDA_CHECK(cudaGetLastError());                                                      \
        ft_cuda_profile_launch(__FILE__, __LINE__);                                          \
    } while (0)

// Marks a launch for FT_CUDA_PROFILE (launch_profile.cu); returns at once when it is off.
void ft_cuda_profile_launch(const char *file, int line);

// Programmer errors in the host code of the kernels (shapes, types).
#define FT_CUDA_ASSERT(cond)                                                                 \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);     \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static inline cudaStream_t ft_cuda_stream_handle(ft_cuda_stream *s) { return (cudaStream_t)s; }

#define FT_WARP 32

__device__ __forceinline__ float ft_warp_sum(float v) {
#pragma unroll
    for (int o = FT_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ int ft_warp_sum_int(int v) {
#pragma unroll
    for (int o = FT_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float ft_warp_max(float v) {
#pragma unroll
    for (int o = FT_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum (or max) of v over the whole CTA (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. red is __shared__ float[32]. Contains __syncthreads.
__device__ __forceinline__ float ft_block_sum(float v, float *red) {
    const int lane = threadIdx.x % FT_WARP, warp = threadIdx.x / FT_WARP, nw = blockDim.x / FT_WARP;
    v = ft_warp_sum(v);
    __syncthreads(); // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return ft_warp_sum(v);
}

__device__ __forceinline__ float ft_block_max(float v, float *red) {
    const int lane = threadIdx.x % FT_WARP, warp = threadIdx.x / FT_WARP, nw = blockDim.x / FT_WARP;
    v = ft_warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INFINITY;
    return ft_warp_max(v);
}

// Float-weight path of ft_cuda_matvec (matvec_f.cu).
void ft_cuda_matvec_f(const ft_cuda_matvec_params *p, const ft_cuda_matvec_ids_params *ip,
                      cudaStream_t stream);

#endif
