// norm_rope.cu: the per-head RMSNorm of Q or K followed by RoPE, in one launch (qwen3moe and
// laguna normalise each head of q and k before rotating it: two launches each otherwise).
//
// Steps, one 256-thread CTA per (token, head) row of head_dim <= 256 floats:
//   1. thread d loads element d; the sum of squares is reduced over the CTA exactly as
//      rms_norm_kernel<1> reduces it (same threads, same order), and y_d = (x_d * scale) * w_d
//      goes to shared memory;
//   2. thread i < n_rot / 2 rotates pair i (ft_rope_pair, rope.cu's arithmetic) and writes
//      it; dimensions past n_rot are written as normalised.
// So the result has the bits of rms_norm then rope.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "rope.cuh"

enum { NR_THREADS = 256 };

__global__ void __launch_bounds__(NR_THREADS)
norm_rope_kernel(float *x, const float *w, int n_head, int head_dim, float eps, int pos0, const ft_cuda_rope_params p) {
    __shared__ float red[32];
    __shared__ float ys[NR_THREADS];
    const int row = blockIdx.x, t = row / n_head, d = threadIdx.x;
    float *xr = x + (int64_t)row * head_dim;
    const float v = d < head_dim ? xr[d] : 0.0f;
    const float wd = d < head_dim ? w[d] : 0.0f; // loaded with x, not after the reduction
    const float sum = ft_block_sum(v * v, red);
    const float scale = 1.0f / sqrtf(sum / head_dim + eps);
    if (d < head_dim) ys[d] = (v * scale) * wd;
    __syncthreads();
    const int half = p.n_rot / 2;
    if (d < half) {
        const int a = p.neox ? d : 2 * d, b = p.neox ? d + half : 2 * d + 1;
        ft_rope_pair(ys[a], ys[b], pos0 + (p.pos_dev ? *p.pos_dev : 0) + t, d, p, &xr[a], &xr[b]);
    } else if (d >= p.n_rot && d < head_dim) {
        xr[d] = ys[d];
    }
}

extern "C" void ft_cuda_norm_rope(float *x, const float *w, int n_tok, int n_head, int head_dim, float eps, int pos0,
                                  const ft_cuda_rope_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(head_dim >= 1 && head_dim <= NR_THREADS && p->n_rot % 2 == 0 && p->n_rot <= head_dim);
    const int64_t rows = (int64_t)n_tok * n_head;
    FT_CUDA_ASSERT(rows <= INT32_MAX);
    if (rows == 0) return;
    norm_rope_kernel<<<(unsigned)rows, NR_THREADS, 0, ft_cuda_stream_handle(s)>>>(x, w, n_head, head_dim, eps, pos0, *p);
    CUDA_CHECK_LAUNCH();
}
