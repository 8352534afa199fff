// rope.cu: rotary position embedding in place, NeoX or adjacent pairs, with YaRN, computed as
// the CPU op (cpu_attn.c) does: the angle of pair i is pos * theta_scale^i built by repeated
// float multiplication (theta_scale from the host, so both sides start from the same bits).
//
// Launch: one thread per (token, head, pair); grid.x covers pairs * heads, grid.y tokens.
// Dimensions past n_rot are left untouched.
#include "cuda_common.cuh"
#include "cuda_ops.h"

enum { ROPE_THREADS = 128 };

__global__ void rope_kernel(float *x, int n_head, int head_dim, int pos0, const ft_cuda_rope_params p) {
    const int half = p.n_rot / 2;
    const int idx = blockIdx.x * ROPE_THREADS + threadIdx.x;
    if (idx >= n_head * half) return;
    const int h = idx / half, i = idx % half, i0 = 2 * i, t = blockIdx.y;
    float theta_extrap = (float)(pos0 + (p.pos_dev ? *p.pos_dev : 0) + t);
    for (int k = 0; k < i; k++) theta_extrap *= p.theta_scale;
    float theta = p.freq_scale * theta_extrap, mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
        const float y = (i0 / 2 - p.corr0) / fmaxf(0.001f, p.corr1 - p.corr0);
        const float ramp_mix = (1 - fminf(1.0f, fmaxf(0.0f, y))) * p.ext_factor;
        // unfused, as the CPU computes it: theta is large and an FMA would round it differently
        theta = __fadd_rn(__fmul_rn(theta, 1 - ramp_mix), __fmul_rn(theta_extrap, ramp_mix));
        mscale *= 1.0f + 0.1f * logf(1.0f / p.freq_scale);
    }
    const float cos_t = cosf(theta) * mscale, sin_t = sinf(theta) * mscale;
    float *v = x + ((int64_t)t * n_head + h) * head_dim;
    const int a = p.neox ? i : i0, b = p.neox ? i + half : i0 + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * cos_t - x1 * sin_t;
    v[b] = x0 * sin_t + x1 * cos_t;
}

extern "C" void ft_cuda_rope(float *x, int n_tok, int n_head, int head_dim, int pos0,
                             const ft_cuda_rope_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(p->n_rot % 2 == 0 && p->n_rot <= head_dim && n_tok <= 65535);
    if (n_tok == 0 || p->n_rot == 0) return;
    const dim3 grid((unsigned)((n_head * (p->n_rot / 2) + ROPE_THREADS - 1) / ROPE_THREADS), (unsigned)n_tok);
    rope_kernel<<<grid, ROPE_THREADS, 0, ft_cuda_stream_handle(s)>>>(x, n_head, head_dim, pos0, *p);
    CUDA_CHECK_LAUNCH();
}
