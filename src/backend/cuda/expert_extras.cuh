// expert_extras.cuh: the experts' gated activations and per-expert biases and scales on the
// device (ft_cuda.h's ft_cuda_expert_extras), shared by the fused expert matvecs (matvec_q.cu),
// the grouped GEMM (gemm_q.cu) and the element-wise fallback (moe_route.cu), so that every path
// takes the same steps as the CPU op (cpu_impl.h's cpu_glu).
#ifndef FT_CUDA_EXPERT_EXTRAS_CUH
#define FT_CUDA_EXPERT_EXTRAS_CUH

#include <cuda_fp16.h>

#include "ft_cuda.h"

// act(g, u). SiLU as the swiglu kernel writes it; the clamped SwiGLU with min and clamp as
// comparisons (a NaN passes through, as std::min's and std::clamp's); GELU as ggml's CPU table:
// the gate rounded to f16, GELU's tanh form of it rounded to f16, the gate itself past +-10.
__device__ __forceinline__ float ft_glu_apply(const ft_cuda_glu &a, float g, float u) {
    if (a.act == FT_CUDA_GLU_SWIGLU_OAI) {
        const float lim = a.limit;
        const float gc = lim < g ? lim : g;
        const float uc = u < -lim ? -lim : (lim < u ? lim : u);
        return gc / (1.0f + expf(a.alpha * -gc)) * (uc + 1.0f);
    }
    if (a.act == FT_CUDA_GLU_GELU) {
        if (g <= -10.0f) return 0.0f;
        if (g >= 10.0f) return g * u;
        const float coef_a = 0.044715f, sqrt_2_over_pi = 0.79788456080286535587989211986876f;
        const float x = __half2float(__float2half_rn(g));
        const float gelu = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
        return __half2float(__float2half_rn(gelu)) * u;
    }
    return g / (1.0f + expf(-g)) * u;
}

// The gated output of row c of expert e's gate and up products g, u (n_ff rows).
__device__ __forceinline__ float ft_expert_glu(const ft_cuda_expert_extras &ex, int64_t e, int64_t n_ff, int64_t c,
                                               float g, float u) {
    if (ex.gate_bias) g += ex.gate_bias[e * n_ff + c];
    if (ex.up_bias) u += ex.up_bias[e * n_ff + c];
    return ft_glu_apply(ex.glu, g, u);
}

// Row c of expert e's down product v (n_embd rows), scaled and biased, before its weight.
__device__ __forceinline__ float ft_expert_down(const ft_cuda_expert_extras &ex, int64_t e, int64_t n_embd, int64_t c,
                                                float v) {
    if (ex.down_scale) v *= ex.down_scale[e];
    if (ex.down_bias) v += ex.down_bias[e * n_embd + c];
    return v;
}

#endif
