// kv_store.cuh: one float into a KV-cache row as f16 or q8_0, with the CPU op's arithmetic
// (cpu_quant.c): f16 round-to-nearest-even; q8_0 with d = amax / 127 stored as f16, codes
// round-half-even(x * (127 / amax)), as llama.cpp's x86 quantizer. Shared by set_rows.cu and
// the cache rows norm_rope.cu writes, so both give the same bits.
#ifndef FT_CUDA_KV_STORE_CUH
#define FT_CUDA_KV_STORE_CUH

#include "cuda_common.cuh"

#include "../../quant/fp16.h"
#include "../../quant/quant.h"

// Element i of an f16 row.
__device__ __forceinline__ void ft_kv_store_f16(uint8_t *row, int64_t i, float v) {
    ((ft_half *)row)[i] = ft_fp32_to_fp16(v);
}

// A warp's 32 lanes hold the elements of block b of a q8_0 row, lane j element 32 b + j; every
// lane must call.
__device__ __forceinline__ void ft_kv_store_q8_0(uint8_t *row, int64_t b, float v, int lane) {
    const float amax = ft_warp_max(fabsf(v));
    const float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
    block_q8_0 *blk = (block_q8_0 *)row + b;
    blk->qs[lane] = (int8_t)__float2int_rn(v * id);
    if (lane == 0) blk->d = ft_fp32_to_fp16(d);
}

#endif
