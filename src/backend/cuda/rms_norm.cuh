// rms_norm.cuh: rms_norm_kernel's arithmetic for kernels that normalise their own input row
// (moe_route.cu's decode router), so that the row they compute has the norm launch's bits.
// Internal to src/backend/cuda/.
//
// The order that defines the bits: a CTA of RMS_THREADS = 256 threads, thread t summing the
// squares of elements t, t + 256, t + 512, ... in turn (fmaf from 0), then ft_block_sum (each
// warp's butterfly, then the 8 warp sums' butterfly); scale = 1 / sqrt(sum / n + eps); element
// i = (x_i * scale) * w_i.
#ifndef FT_CUDA_RMS_NORM_CUH
#define FT_CUDA_RMS_NORM_CUH

#include "cuda_common.cuh"

enum { RMS_THREADS = 256 };

// One row of n floats x normalised (times w, or 1 without it) into shared memory ys, by a CTA of
// CTA threads (a multiple of 32 that divides RMS_THREADS: each thread stands for RMS_THREADS /
// CTA of the 256 and keeps their sums apart). red: __shared__ float[32]. Ends with a barrier.
template <int CTA>
__device__ __forceinline__ void rms_norm_row_smem(const float *x, const float *w, float eps, int n, float *ys,
                                                  float *red) {
    static_assert(CTA % FT_WARP == 0 && RMS_THREADS % CTA == 0, "a CTA of whole warps dividing 256");
    constexpr int V = RMS_THREADS / CTA, U = 8; // U: rows of 256 whose loads go out together (2048 at once)
    const int tid = threadIdx.x, lane = tid % FT_WARP, warp = tid / FT_WARP;
    float s[V];
#pragma unroll
    for (int j = 0; j < V; j++) s[j] = 0.0f;
    for (int i0 = 0; i0 < n; i0 += U * RMS_THREADS) {
        float v[U][V];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < V; j++) {
                const int i = i0 + u * RMS_THREADS + tid + j * CTA;
                v[u][j] = i < n ? x[i] : 0.0f;
            }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < V; j++) {
                const int i = i0 + u * RMS_THREADS + tid + j * CTA;
                s[j] = fmaf(v[u][j], v[u][j], s[j]); // (past n: 0 * 0 adds nothing)
                if (i < n) ys[i] = v[u][j];
            }
    }
    // thread tid + j * CTA of the 256 is lane `lane` of warp warp + j * CTA / 32 there
#pragma unroll
    for (int j = 0; j < V; j++) {
        const float ws = ft_warp_sum(s[j]);
        if (lane == 0) red[warp + j * (CTA / FT_WARP)] = ws;
    }
    __syncthreads();
    const float sum = ft_warp_sum(lane < RMS_THREADS / FT_WARP ? red[lane] : 0.0f);
    const float scale = 1.0f / sqrtf(sum / n + eps);
    // (each thread scales the elements it stored: no barrier between)
    for (int i = tid; i < n; i += CTA) ys[i] = (ys[i] * scale) * (w ? w[i] : 1.0f);
    __syncthreads();
}

#endif
