// rope.cuh: the rotation of one pair of a head by RoPE (with YaRN), computed as the CPU op
// (cpu_attn.c) does: the angle of pair i is pos * theta_scale^i built by repeated float
// multiplication. Shared by rope.cu and norm_rope.cu. Internal to src/backend/cuda/.
#ifndef FT_CUDA_ROPE_CUH
#define FT_CUDA_ROPE_CUH

#include "cuda_common.cuh"
#include "cuda_ops.h"

// The position of a launch's token t: its own (p.rows), or t past the launch's first.
__device__ __forceinline__ int ft_rope_pos(const ft_cuda_rope_params &p, int pos0, int t) {
    return p.rows.pos ? p.rows.pos[t] : pos0 + (p.pos_dev ? *p.pos_dev : 0) + t;
}

// (o0, o1) = pair (x0, x1) of pair index i rotated for position pos (o0, o1 may alias x0, x1).
__device__ __forceinline__ void ft_rope_pair(float x0, float x1, int pos, int i, const ft_cuda_rope_params &p,
                                             float *o0, float *o1) {
    const int i0 = 2 * i;
    float theta_extrap = (float)pos;
    for (int k = 0; k < i; k++) theta_extrap *= p.theta_scale;
    if (p.sect_dims > 0) {
        // imrope for text: pairs outside the t, h and w sections' slots sit at position 0
        const int sector = i % p.sect_dims;
        const bool at_pos = (sector % 3 == 0 && sector < 3 * p.sections[0]) ||
                            (sector % 3 == 1 && sector < 3 * p.sections[1]) ||
                            (sector % 3 == 2 && sector < 3 * p.sections[2]);
        if (!at_pos) theta_extrap = 0.0f;
    }
    if (p.freq_factors) theta_extrap /= p.freq_factors[i]; // gemma4's proportional RoPE
    float theta = p.freq_scale * theta_extrap, mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
        const float y = (i0 / 2 - p.corr0) / fmaxf(0.001f, p.corr1 - p.corr0);
        const float ramp_mix = (1 - fminf(1.0f, fmaxf(0.0f, y))) * p.ext_factor;
        // unfused, as the CPU computes it: theta is large and an FMA would round it differently
        theta = __fadd_rn(__fmul_rn(theta, 1 - ramp_mix), __fmul_rn(theta_extrap, ramp_mix));
        mscale *= 1.0f + 0.1f * logf(1.0f / p.freq_scale);
    }
    const float cos_t = cosf(theta) * mscale, sin_t = sinf(theta) * mscale;
    *o0 = x0 * cos_t - x1 * sin_t;
    *o1 = x0 * sin_t + x1 * cos_t;
}

#endif
