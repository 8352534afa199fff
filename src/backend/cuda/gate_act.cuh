// gate_act.cuh: the output gates' activations (backend.h's enum ft_act) as the CPU op takes
// them, for the kernels that apply a gate (elementwise.cu's gate_mul, rms_norm.cu's gated norm).
#ifndef FT_CUDA_GATE_ACT_CUH
#define FT_CUDA_GATE_ACT_CUH

// softplus as the CPU op: x for x > 20, else log(1 + e^x)
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

// act 0: softplus, 1: sigmoid, 2: SiLU (enum ft_act's order)
__device__ __forceinline__ float ft_gate_act(int act, float g) {
    return act == 0 ? softplus_f(g) : act == 1 ? 1.0f / (1.0f + expf(-g)) : silu_f(g);
}

#endif
