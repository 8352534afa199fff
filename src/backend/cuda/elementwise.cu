// elementwise.cu: the small element-wise ops (one concept: a thread per element, no
// reductions): add, add_bias, softplus output gate, the gated activations (SwiGLU, GELU), the
// sigmoid-gated add of qwen2moe's shared expert, and gemma4's scale and soft-capping. Launch:
// 256 threads, a grid covering the elements.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "expert_extras.cuh"
#include "gate_act.cuh"
#include "q8_1.cuh"

enum { EW_THREADS = 256 };

static unsigned ew_grid(int64_t n) {
    const int64_t g = (n + EW_THREADS - 1) / EW_THREADS;
    FT_CUDA_ASSERT(g <= INT32_MAX);
    return (unsigned)(g ? g : 1);
}

__global__ void add_kernel(float *y, const float *x, int64_t n) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void add_bias_kernel(float *y, const float *b, int64_t n_total, int n) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n_total) y[i] += b[i % n];
}

// x *= act(g), g per element or per head; act as enum ft_act (backend.h), as the CPU op; with
// xq, each warp also writes its 32 outputs' q8_1 block (n_total % 32 == 0: whole warps)
__global__ void gate_mul_kernel(float *x, const float *g, block_q8_1 *xq, int64_t n_total, int width, int head_dim,
                                int g_width, int act) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= n_total) return;
    const int64_t t = i / width;
    const int c = (int)(i % width);
    const float gv = g_width == width ? g[t * g_width + c] : g[t * g_width + c / head_dim];
    const float o = x[i] * ft_gate_act(act, gv);
    x[i] = o;
    if (xq) ft_q8_1_warp_store(o, &xq[i / QK8_1], threadIdx.x % FT_WARP);
}

__global__ void split_heads_kernel(const float *x, float *a, float *b, int64_t n_total, int width, int head_dim) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= n_total) return;
    const int64_t row = i / width;
    const int c = (int)(i % width), h = c / head_dim, d = c % head_dim;
    const float *src = x + row * 2 * width + (int64_t)h * 2 * head_dim + d;
    a[i] = src[0];
    b[i] = src[head_dim];
}

// with gq, each warp also writes its 32 outputs' q8_1 block (n % 32 == 0: whole warps)
__global__ void glu_kernel(float *g, const float *u, block_q8_1 *gq, int64_t n, const ft_cuda_glu act) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= n) return;
    const float h = ft_glu_apply(act, g[i], u[i]);
    g[i] = h;
    if (gq) ft_q8_1_warp_store(h, &gq[i / QK8_1], threadIdx.x % FT_WARP);
}

__global__ void scale_kernel(float *x, int64_t n, float s) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) x[i] *= s;
}

// the CPU op's steps (ggml's scale, tanh, scale): a product by the reciprocal, not a division
__global__ void softcap_kernel(float *x, int64_t n, float inv, float cap) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) x[i] = tanhf(x[i] * inv) * cap;
}

__global__ void sigmoid_scale_add_kernel(float *y, const float *src, const float *logit,
                                         int64_t n_total, int n_embd) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= n_total) return;
    const float l = logit[i / n_embd];
    y[i] += src[i] * (silu_f(l) / l);
}

extern "C" void ft_cuda_add(float *y, const float *x, size_t n, ft_cuda_stream *s) {
    if (!n) return;
    ft_launch(add_kernel, ew_grid((int64_t)n), EW_THREADS, 0, ft_cuda_stream_handle(s), y, x, (int64_t)n);
    CUDA_CHECK_LAUNCH();
}

// y[i] = part[0][i] + part[1][i] + ... in split order: the splits of a GEMM split over its input.
__global__ void sum_splits_kernel(const float *__restrict__ part, float *__restrict__ y, int64_t n, int splits) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= n) return;
    float v = part[i];
    for (int z = 1; z < splits; z++) v += part[(int64_t)z * n + i];
    y[i] = v;
}

extern "C" void ft_cuda_sum_splits(const float *part, float *y, int64_t n, int splits, ft_cuda_stream *s) {
    if (!n) return;
    ft_launch(sum_splits_kernel, ew_grid(n), EW_THREADS, 0, ft_cuda_stream_handle(s), part, y, n, splits);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_add_bias(float *y, const float *b, int n_rows, int n, ft_cuda_stream *s) {
    const int64_t total = (int64_t)n_rows * n;
    if (!total) return;
    ft_launch(add_bias_kernel, ew_grid(total), EW_THREADS, 0, ft_cuda_stream_handle(s), y, b, total, n);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_gate_mul(float *x, const float *g, void *xq, int n_tok, int n_head, int head_dim,
                                 int g_width, int act, ft_cuda_stream *s) {
    const int width = n_head * head_dim;
    FT_CUDA_ASSERT(g_width == n_head || g_width == width);
    FT_CUDA_ASSERT(!xq || width % QK8_1 == 0);
    const int64_t total = (int64_t)n_tok * width;
    if (!total) return;
    ft_launch(gate_mul_kernel, ew_grid(total), EW_THREADS, 0, ft_cuda_stream_handle(s), x, g, (block_q8_1 *)xq, total,
              width, head_dim, g_width, act);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_split_heads(const float *x, float *a, float *b, int n_rows, int n_head, int head_dim,
                                    ft_cuda_stream *s) {
    const int width = n_head * head_dim;
    const int64_t total = (int64_t)n_rows * width;
    if (!total) return;
    ft_launch(split_heads_kernel, ew_grid(total), EW_THREADS, 0, ft_cuda_stream_handle(s), x, a, b, total, width,
              head_dim);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_glu_act(float *g, const float *u, size_t n, const ft_cuda_glu *act, ft_cuda_stream *s) {
    ft_cuda_glu_act_q(g, u, NULL, n, act, s);
}

extern "C" void ft_cuda_glu_act_q(float *g, const float *u, void *gq, size_t n, const ft_cuda_glu *act,
                                  ft_cuda_stream *s) {
    FT_CUDA_ASSERT(!gq || n % QK8_1 == 0);
    if (!n) return;
    ft_launch(glu_kernel, ew_grid((int64_t)n), EW_THREADS, 0, ft_cuda_stream_handle(s), g, u, (block_q8_1 *)gq,
              (int64_t)n, *act);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_swiglu(float *g, const float *u, size_t n, ft_cuda_stream *s) {
    const ft_cuda_glu silu = {FT_CUDA_GLU_SILU, 0.0f, 0.0f};
    ft_cuda_glu_act(g, u, n, &silu, s);
}

extern "C" void ft_cuda_scale(float *x, size_t n, float scale, ft_cuda_stream *s) {
    if (!n) return;
    ft_launch(scale_kernel, ew_grid((int64_t)n), EW_THREADS, 0, ft_cuda_stream_handle(s), x, (int64_t)n, scale);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_softcap(float *x, size_t n, float cap, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(cap > 0);
    if (!n) return;
    ft_launch(softcap_kernel, ew_grid((int64_t)n), EW_THREADS, 0, ft_cuda_stream_handle(s), x, (int64_t)n, 1.0f / cap,
              cap);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_sigmoid_scale_add(float *y, const float *src, const float *logit, int n_tok,
                                          int n_embd, ft_cuda_stream *s) {
    const int64_t total = (int64_t)n_tok * n_embd;
    if (!total) return;
    ft_launch(sigmoid_scale_add_kernel, ew_grid(total), EW_THREADS, 0, ft_cuda_stream_handle(s), y, src, logit, total,
                                                                                          n_embd);
    CUDA_CHECK_LAUNCH();
}
