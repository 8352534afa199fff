// rms_norm.cu: y = x / sqrt(mean(x^2) + eps) * w for rows of n floats (y may alias x; no w:
// times 1, which changes no bit: gemma4's weightless norm).
//
// Steps, one 256-thread CTA per row: 1. each thread sums the squares of its strided
// elements; 2. CTA reduction; 3. y = (x * scale) * w, the CPU op's order of products; fused:
// 4. when yq is given, each warp also quantizes its 32 consecutive outputs to q8_1 (the input
// format of the next quantized matmul, which then skips its own quantize launch).
// Fused before step 1 when d is given: x += d (the residual add that precedes the norm in a
// layer), written back to x, with the add kernel's arithmetic.
// Rows of up to 256 * 16 floats keep their elements in registers (EPT per thread, all loads
// issued at once: a decode row is latency-bound, one CTA on one SM); longer rows loop.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "q8_1.cuh"

enum { RMS_THREADS = 256 };

// EPT > 0: at most EPT elements per thread, held in registers; EPT == 0: any n, looped.
template <int EPT>
__global__ void __launch_bounds__(RMS_THREADS)
rms_norm_kernel(float *x, const float *d, const float *w, float *y, block_q8_1 *yq, int n, float eps) {
    ft_pdl_begin();
    __shared__ float red[32];
    float *xr = x + (int64_t)blockIdx.x * n;
    const float *dr = d ? d + (int64_t)blockIdx.x * n : NULL;
    float *yr = y + (int64_t)blockIdx.x * n;
    const int tid = threadIdx.x, lane = tid % FT_WARP;
    block_q8_1 *qr = yq ? yq + (int64_t)blockIdx.x * (n / QK8_1) : NULL;
    float sum = 0.0f;
    if constexpr (EPT > 0) {
        constexpr int E = EPT > 0 ? EPT : 1;
        // every load (x, d, w) is issued before the first store: a store to x or y may alias
        // them for the compiler, which would otherwise wait for each load in turn (a decode
        // row is one CTA: its time is the chain of memory round trips)
        float v[E], dv[E], wv[E];
#pragma unroll
        for (int j = 0; j < E; j++) {
            const int i = tid + j * RMS_THREADS;
            v[j] = i < n ? xr[i] : 0.0f;
            dv[j] = dr && i < n ? dr[i] : 0.0f;
            wv[j] = i < n ? (w ? w[i] : 1.0f) : 0.0f;
        }
        if (dr) {
#pragma unroll
            for (int j = 0; j < E; j++) {
                const int i = tid + j * RMS_THREADS;
                v[j] += dv[j];
                if (i < n) xr[i] = v[j];
            }
        }
#pragma unroll
        for (int j = 0; j < E; j++) sum += v[j] * v[j]; // the looped order: j ascending
        sum = ft_block_sum(sum, red);
        const float scale = 1.0f / sqrtf(sum / n + eps);
#pragma unroll
        for (int j = 0; j < E; j++) {
            const int i = tid + j * RMS_THREADS;
            if (i >= n) break; // n % 32 == 0 with yq: whole warps stop together
            const float o = (v[j] * scale) * wv[j];
            yr[i] = o;
            if (qr) ft_q8_1_warp_store(o, &qr[i / QK8_1], lane);
        }
    } else {
        if (dr) {
            for (int i = tid; i < n; i += RMS_THREADS) xr[i] += dr[i];
            __syncthreads(); // (each thread rereads only its own elements; kept for clarity)
        }
        for (int i = tid; i < n; i += RMS_THREADS) sum += xr[i] * xr[i];
        sum = ft_block_sum(sum, red);
        const float scale = 1.0f / sqrtf(sum / n + eps);
        for (int i = tid; i < n; i += RMS_THREADS) {
            const float o = (xr[i] * scale) * (w ? w[i] : 1.0f);
            yr[i] = o;
            // n % 32 == 0: a warp's 32 lanes hold the 32 elements of one q8_1 block at each step
            if (qr) ft_q8_1_warp_store(o, &qr[i / QK8_1], lane);
        }
    }
}

extern "C" void ft_cuda_rms_norm(float *x, const float *d, const float *w, float *y, void *yq, int n_rows,
                                 int n, float eps, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(n_rows >= 0 && n > 0 && (!yq || n % QK8_1 == 0));
    if (n_rows == 0) return;
    const cudaStream_t st = ft_cuda_stream_handle(s);
    block_q8_1 *q = (block_q8_1 *)yq;
    if (n <= RMS_THREADS) ft_launch(rms_norm_kernel<1>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps);
    else if (n <= 4 * RMS_THREADS) ft_launch(rms_norm_kernel<4>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps);
    else if (n <= 8 * RMS_THREADS) ft_launch(rms_norm_kernel<8>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps);
    else if (n <= 16 * RMS_THREADS) ft_launch(rms_norm_kernel<16>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps);
    else ft_launch(rms_norm_kernel<0>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps);
    CUDA_CHECK_LAUNCH();
}
