// rms_norm.cu: y = x / sqrt(mean(x^2) + eps) * w for rows of n floats (y may alias x; no w:
// times 1, which changes no bit: gemma4's weightless norm).
//
// Steps, one 256-thread CTA per row: 1. each thread sums the squares of its strided
// elements; 2. CTA reduction; 3. y = (x * scale) * w, the CPU op's order of products; fused:
// 4. when yq is given, each warp also quantizes its 32 consecutive outputs to q8_1 (the input
// format of the next quantized matmul, which then skips its own quantize launch).
// Fused before step 1 when d is given: x += d (the residual add that precedes the norm in a
// layer), written back to x, with the add kernel's arithmetic. Fused into step 3 when a gate
// is given (per-head norms then an output gate: qwen35moe's gated DeltaNet norm): y times
// act(g), gate_mul's arithmetic, before the q8_1 store.
// The order of every sum is rms_norm.cuh's, which kernels normalising their own row follow.
// Rows of up to 256 * 16 floats keep their elements in registers (EPT per thread, all loads
// issued at once: a decode row is latency-bound, one CTA on one SM); longer rows loop.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "gate_act.cuh"
#include "q8_1.cuh"
#include "rms_norm.cuh"

// Element i of row r's gate value: rows are (token, head) pairs of n_head heads of n floats.
__device__ __forceinline__ float norm_gate_value(const ft_cuda_norm_gate &gt, int64_t r, int n, int i) {
    const int64_t t = r / gt.n_head;
    const int h = (int)(r % gt.n_head);
    return gt.g_width == gt.n_head * n ? gt.g[t * gt.g_width + (int64_t)h * n + i] : gt.g[t * gt.g_width + h];
}

// EPT > 0: at most EPT elements per thread, held in registers; EPT == 0: any n, looped.
// GATED: gate.g is set (a separate instance, so the plain norm's code stays as it was).
template <int EPT, bool GATED>
__global__ void __launch_bounds__(RMS_THREADS)
rms_norm_kernel(float *x, const float *d, const float *w, float *y, block_q8_1 *yq, int n, float eps,
                const ft_cuda_norm_gate gate) {
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
        float v[E], dv[E], wv[E], gv[E];
#pragma unroll
        for (int j = 0; j < E; j++) {
            const int i = tid + j * RMS_THREADS;
            v[j] = i < n ? xr[i] : 0.0f;
            dv[j] = dr && i < n ? dr[i] : 0.0f;
            wv[j] = i < n ? (w ? w[i] : 1.0f) : 0.0f;
            gv[j] = GATED && i < n ? norm_gate_value(gate, blockIdx.x, n, i) : 0.0f;
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
        for (int j = 0; j < E; j++) sum = fmaf(v[j], v[j], sum); // the looped order: j ascending (rms_norm.cuh)
        sum = ft_block_sum(sum, red);
        const float scale = 1.0f / sqrtf(sum / n + eps);
#pragma unroll
        for (int j = 0; j < E; j++) {
            const int i = tid + j * RMS_THREADS;
            if (i >= n) break; // n % 32 == 0 with yq: whole warps stop together
            float o = (v[j] * scale) * wv[j];
            if (GATED) o *= ft_gate_act(gate.act, gv[j]);
            yr[i] = o;
            if (qr) ft_q8_1_warp_store(o, &qr[i / QK8_1], lane);
        }
    } else {
        if (dr) {
            for (int i = tid; i < n; i += RMS_THREADS) xr[i] += dr[i];
            __syncthreads(); // (each thread rereads only its own elements; kept for clarity)
        }
        for (int i = tid; i < n; i += RMS_THREADS) sum = fmaf(xr[i], xr[i], sum);
        sum = ft_block_sum(sum, red);
        const float scale = 1.0f / sqrtf(sum / n + eps);
        for (int i = tid; i < n; i += RMS_THREADS) {
            float o = (xr[i] * scale) * (w ? w[i] : 1.0f);
            if (GATED) o *= ft_gate_act(gate.act, norm_gate_value(gate, blockIdx.x, n, i));
            yr[i] = o;
            // n % 32 == 0: a warp's 32 lanes hold the 32 elements of one q8_1 block at each step
            if (qr) ft_q8_1_warp_store(o, &qr[i / QK8_1], lane);
        }
    }
}

template <bool GATED>
static void launch_norm(cudaStream_t st, float *x, const float *d, const float *w, float *y, block_q8_1 *q, int n_rows,
                        int n, float eps, const ft_cuda_norm_gate &g) {
    if (n <= RMS_THREADS) ft_launch(rms_norm_kernel<1, GATED>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps, g);
    else if (n <= 4 * RMS_THREADS) ft_launch(rms_norm_kernel<4, GATED>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps, g);
    else if (n <= 8 * RMS_THREADS) ft_launch(rms_norm_kernel<8, GATED>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps, g);
    else if (n <= 16 * RMS_THREADS) ft_launch(rms_norm_kernel<16, GATED>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps, g);
    else ft_launch(rms_norm_kernel<0, GATED>, n_rows, RMS_THREADS, 0, st, x, d, w, y, q, n, eps, g);
}

extern "C" void ft_cuda_rms_norm_gate(float *x, const float *d, const float *w, const ft_cuda_norm_gate *gate,
                                      float *y, void *yq, int n_rows, int n, float eps, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(n_rows >= 0 && n > 0 && (!yq || n % QK8_1 == 0));
    const ft_cuda_norm_gate g = gate ? *gate : ft_cuda_norm_gate{};
    FT_CUDA_ASSERT(!g.g || (g.n_head >= 1 && n_rows % g.n_head == 0 && (g.g_width == g.n_head || g.g_width == g.n_head * n)));
    if (n_rows == 0) return;
    const cudaStream_t st = ft_cuda_stream_handle(s);
    block_q8_1 *q = (block_q8_1 *)yq;
    if (g.g) launch_norm<true>(st, x, d, w, y, q, n_rows, n, eps, g);
    else launch_norm<false>(st, x, d, w, y, q, n_rows, n, eps, g);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_rms_norm(float *x, const float *d, const float *w, float *y, void *yq, int n_rows,
                                 int n, float eps, ft_cuda_stream *s) {
    ft_cuda_rms_norm_gate(x, d, w, NULL, y, yq, n_rows, n, eps, s);
}
