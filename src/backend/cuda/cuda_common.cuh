// cuda_common.cuh: what every .cu of the CUDA backend shares (internal to src/backend/cuda/).
//
// - CUDA_CHECK(call): aborts with the statement, file, line and CUDA's message on failure.
// - CUDA_CHECK_LAUNCH(): checks the launch just made (bad geometry, missing kernel image) and
//   marks it for FT_CUDA_PROFILE.
// - ft_launch / ft_pdl_begin: launches with programmatic dependent launch (below).
// - the block size of the decode kernels and a few warp reductions.
#ifndef FT_CUDA_COMMON_CUH
#define FT_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <utility>

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

// Programmatic dependent launch (sm_90 and later; FT_CUDA_PDL=0 turns it off). A decode step
// is hundreds of short kernels, and each one's launch and CTA dispatch used to start only once
// the kernel before it had drained. A kernel launched with ft_launch may be dispatched while its
// predecessor on the stream still runs. ft_pdl_begin() waits until the predecessor has completed
// and its writes are visible (griddepcontrol.wait), then lets the next kernel be dispatched in
// turn (griddepcontrol.launch_dependents). Before it a kernel may only read what no kernel of the
// step writes: weights (ft_prefetch_l2), and the decode attention's cache rows of earlier steps
// (every kernel before the predecessor has completed: the predecessor began with its own wait).
// Without the launch attribute (older GPUs, FT_CUDA_PDL=0) both instructions are no-ops.
__device__ __forceinline__ void ft_pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Element j of an array held in a kernel's parameters, read with constant indices only: an
// index known only at run time (blockIdx, a loop) makes the compiler copy the whole parameter
// struct into each thread's stack (local memory, backed by L2 and DRAM), which `ptxas -v`
// shows as a stack frame; a prefill launch of thousands of CTAs then writes hundreds of MB.
template <typename T, int N>
__device__ __forceinline__ T ft_param_pick(const T (&a)[N], int j) {
    T r = a[0];
#pragma unroll
    for (int i = 1; i < N; i++)
        if (j == i) r = a[i];
    return r;
}

// Requests the 128-byte lines of [p, p + bytes) into L2, dealt over n threads (this is thread
// i): for constant data (weights) a kernel reads, issued before its ft_pdl_begin() so that the
// loads overlap the kernel before it.
__device__ __forceinline__ void ft_prefetch_l2(const void *p, size_t bytes, int i, int n) {
    for (size_t o = (size_t)i * 128; o < bytes; o += (size_t)n * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)p + o));
}

// Whether launches carry the programmatic-serialization attribute (cuda_runtime.cu): the
// current device is sm_90 or later and FT_CUDA_PDL is not "0". Read once.
bool ft_cuda_pdl_enabled(void);

// kernel<<<grid, block, smem, stream>>>(args...), with the attribute where enabled.
template <typename... Params, typename... Args>
static inline void ft_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args &&...args) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = ft_cuda_pdl_enabled() ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// SMs of the current device (asked once: one device per process).
static inline int ft_cuda_sm_count(void) {
    static int n;
    if (!n) {
        int dev;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    }
    return n;
}

// How many splits over its input a GEMM of ctas tiles takes (gemm_q.cu, gemm_f.cu): where the
// tiles alone leave SMs idle, enough for about two CTAs per SM, at most one per chunk of the
// input (n_chunks) and as many as part_floats floats hold partials of out floats; 1: no split.
// *per gets the chunks of each split.
static inline int ft_cuda_gemm_splits(int64_t ctas, int64_t n_chunks, size_t part_floats, int64_t out, int64_t *per) {
    const int64_t sms = ft_cuda_sm_count();
    *per = n_chunks;
    if (ctas >= sms) return 1;
    const int64_t want = (2 * sms + ctas - 1) / ctas, room = (int64_t)(part_floats / (size_t)out);
    const int64_t splits = std::min(std::min(want, n_chunks), room);
    if (splits <= 1) return 1;
    *per = (n_chunks + splits - 1) / splits;
    return (int)((n_chunks + *per - 1) / *per);
}

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

// Matrices of one input in one launch (ft_cuda_matvec_multi): segment s owns CTAs seg_cta[s] ..
// seg_cta[s + 1] - 1, enough for its seg_rows[s] rows at rows_per_cta each. Returns the CTAs.
static inline int ft_seg_ctas(int n_seg, const int *seg_rows, int rows_per_cta, int *seg_cta) {
    seg_cta[0] = 0;
    for (int i = 0; i < n_seg; i++) seg_cta[i + 1] = seg_cta[i] + (seg_rows[i] + rows_per_cta - 1) / rows_per_cta;
    return seg_cta[n_seg];
}

// Float-weight path of ft_cuda_matvec (matvec_f.cu).
void ft_cuda_matvec_f(const ft_cuda_matvec_params *p, const ft_cuda_matvec_ids_params *ip,
                      cudaStream_t stream);
// n_seg matrices of one input in one launch (ft_cuda_matvec_multi's float form); ip NULL then.
void ft_cuda_matvec_f_multi(const ft_cuda_matvec_params *p, int n_seg, const ft_cuda_matvec_ids_params *ip,
                            cudaStream_t stream);

#endif
