// elementwise.cu: the small element-wise ops (one concept: a thread per element, no
// reductions): add, add_bias, softplus output gate, SwiGLU, and the sigmoid-gated add of
// qwen2moe's shared expert. Launch: 256 threads, a grid covering the elements.
#include "cuda_common.cuh"
#include "cuda_ops.h"

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

// softplus as the CPU op: x for x > 20, else log(1 + e^x)
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

// x *= act(g), g per element or per head; act as enum ft_act (backend.h), as the CPU op
__global__ void gate_mul_kernel(float *x, const float *g, int64_t n_total, int width, int head_dim, int g_width,
                                int act) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= n_total) return;
    const int64_t t = i / width;
    const int c = (int)(i % width);
    const float gv = g_width == width ? g[t * g_width + c] : g[t * g_width + c / head_dim];
    x[i] *= act == 0 ? softplus_f(gv) : act == 1 ? 1.0f / (1.0f + expf(-gv)) : silu_f(gv);
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

__global__ void swiglu_kernel(float *g, const float *u, int64_t n) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) g[i] = silu_f(g[i]) * u[i];
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

extern "C" void ft_cuda_add_bias(float *y, const float *b, int n_rows, int n, ft_cuda_stream *s) {
    const int64_t total = (int64_t)n_rows * n;
    if (!total) return;
    ft_launch(add_bias_kernel, ew_grid(total), EW_THREADS, 0, ft_cuda_stream_handle(s), y, b, total, n);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_gate_mul(float *x, const float *g, int n_tok, int n_head, int head_dim, int g_width,
                                 int act, ft_cuda_stream *s) {
    const int width = n_head * head_dim;
    FT_CUDA_ASSERT(g_width == n_head || g_width == width);
    const int64_t total = (int64_t)n_tok * width;
    if (!total) return;
    ft_launch(gate_mul_kernel, ew_grid(total), EW_THREADS, 0, ft_cuda_stream_handle(s), x, g, total, width, head_dim,
              g_width, act);
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

extern "C" void ft_cuda_swiglu(float *g, const float *u, size_t n, ft_cuda_stream *s) {
    if (!n) return;
    ft_launch(swiglu_kernel, ew_grid((int64_t)n), EW_THREADS, 0, ft_cuda_stream_handle(s), g, u, (int64_t)n);
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
