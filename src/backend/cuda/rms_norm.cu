// rms_norm.cu: y = x / sqrt(mean(x^2) + eps) * w for rows of n floats (y may alias x).
//
// Steps, one 256-thread CTA per row: 1. each thread sums the squares of its strided
// elements; 2. CTA reduction; 3. y = (x * scale) * w, the CPU op's order of products; fused:
// 4. when yq is given, each warp also quantizes its 32 consecutive outputs to q8_1 (the input
// format of the next quantized matmul, which then skips its own quantize launch).
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "q8_1.cuh"

enum { RMS_THREADS = 256 };

__global__ void __launch_bounds__(RMS_THREADS)
rms_norm_kernel(const float *x, const float *w, float *y, block_q8_1 *yq, int n, float eps) {
    __shared__ float red[32];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += RMS_THREADS) sum += xr[i] * xr[i];
    sum = ft_block_sum(sum, red);
    const float scale = 1.0f / sqrtf(sum / n + eps);
    if (!yq) {
        for (int i = threadIdx.x; i < n; i += RMS_THREADS) yr[i] = (xr[i] * scale) * w[i];
        return;
    }
    // n % 32 == 0: a warp's 32 lanes hold the 32 elements of one q8_1 block at each step
    block_q8_1 *qr = yq + (int64_t)blockIdx.x * (n / QK8_1);
    for (int i = threadIdx.x; i < n; i += RMS_THREADS) {
        const float v = (xr[i] * scale) * w[i];
        yr[i] = v;
        ft_q8_1_warp_store(v, &qr[i / QK8_1], threadIdx.x % FT_WARP);
    }
}

extern "C" void ft_cuda_rms_norm(const float *x, const float *w, float *y, void *yq, int n_rows, int n,
                                 float eps, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(n_rows >= 0 && n > 0 && (!yq || n % QK8_1 == 0));
    if (n_rows == 0) return;
    rms_norm_kernel<<<n_rows, RMS_THREADS, 0, ft_cuda_stream_handle(s)>>>(x, w, y, (block_q8_1 *)yq, n, eps);
    CUDA_CHECK_LAUNCH();
}
