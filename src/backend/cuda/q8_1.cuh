// q8_1.cuh: one warp quantizes 32 floats to a block_q8_1 (lane i holds element i), shared by
// quantize_q8_1.cu and the kernels that quantize their own output (rms_norm.cu) so that every
// path writes the same bits. Internal to src/backend/cuda/.
#ifndef FT_CUDA_Q8_1_CUH
#define FT_CUDA_Q8_1_CUH

#include "cuda_common.cuh"

#include "../../quant/fp16.h"

// amax = warp max of |v|; d = amax / 127; code = v * (127 / amax) rounded half to even (the CPU
// backend's arithmetic, cpu_quant.c: both backends see the same codes); s = d * sum of codes.
// Every lane of the warp must call it.
__device__ __forceinline__ void ft_q8_1_warp_store(float v, block_q8_1 *b, int lane) {
    const float amax = ft_warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int8_t q = (int8_t)__float2int_rn(v * id);
    const int sum = ft_warp_sum_int(q);
    b->qs[lane] = q;
    if (lane == 0) {
        b->d = ft_fp32_to_fp16(d);
        b->s = ft_fp32_to_fp16((float)sum * d);
    }
}

#endif
