// rope.cu: rotary position embedding in place, NeoX or adjacent pairs, with YaRN, computed as
// the CPU op (cpu_attn.c) does: the angle of pair i is pos * theta_scale^i built by repeated
// float multiplication (theta_scale from the host, so both sides start from the same bits).
//
// Launch: one thread per (token, head, pair); grid.x covers pairs * heads, grid.y tokens (of one
// sequence, or of several: p.rows).
// Dimensions past n_rot are left untouched.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "rope.cuh"

enum { ROPE_THREADS = 128 };

__global__ void rope_kernel(float *x, int n_head, int head_dim, int pos0, const ft_cuda_rope_params p) {
    ft_pdl_begin();
    const int half = p.n_rot / 2;
    const int idx = blockIdx.x * ROPE_THREADS + threadIdx.x;
    if (idx >= n_head * half) return;
    const int h = idx / half, i = idx % half, t = blockIdx.y;
    float *v = x + ((int64_t)t * n_head + h) * head_dim;
    const int a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
    ft_rope_pair(v[a], v[b], ft_rope_pos(p, pos0, t), i, p, &v[a], &v[b]);
}

extern "C" void ft_cuda_rope(float *x, int n_tok, int n_head, int head_dim, int pos0,
                             const ft_cuda_rope_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(p->n_rot % 2 == 0 && p->n_rot <= head_dim && n_tok <= 65535);
    if (n_tok == 0 || p->n_rot == 0) return;
    const dim3 grid((unsigned)((n_head * (p->n_rot / 2) + ROPE_THREADS - 1) / ROPE_THREADS), (unsigned)n_tok);
    ft_launch(rope_kernel, grid, ROPE_THREADS, 0, ft_cuda_stream_handle(s), x, n_head, head_dim, pos0, *p);
    CUDA_CHECK_LAUNCH();
}
