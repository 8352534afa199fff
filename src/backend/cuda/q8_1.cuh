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

// ft_q8_1_warp_store with four consecutive values a lane: x holds values 4 lane8 .. 4 lane8 + 3
// of block b, the block's 8 lanes an aligned group of the warp (lane8 = lane % 8); every lane of
// the warp calls it (the sums shuffle within each group), and a group whose live is false
// stores nothing. The same bits: the block's largest magnitude and the codes' sum do not
// depend on which lane holds what.
__device__ __forceinline__ void ft_q8_1_store4(const float x[4], block_q8_1 *b, int lane8, bool live) {
    float amax = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    uint32_t codes = 0;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int q = __float2int_rn(x[c] * id);
        sum += q;
        codes |= (uint32_t)(uint8_t)(int8_t)q << (8 * c);
    }
#pragma unroll
    for (int o = 1; o < 8; o <<= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (!live) return;
    *(uint32_t *)&b->qs[4 * lane8] = codes;
    if (lane8 == 0) {
        b->d = ft_fp32_to_fp16(d);
        b->s = ft_fp32_to_fp16((float)sum * d);
    }
}

#endif
