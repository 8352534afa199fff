// fp16.h: conversions between float and the 16-bit float formats, exact and shared with CUDA.
//
// binary16 <-> binary32 follows IEEE 754 with round-to-nearest-even (as F16C's vcvtps2ph and
// llama.cpp do), so a row quantized here is bit-identical to llama.cpp's. NaN becomes a quiet
// NaN. bfloat16 rounds to nearest even from binary32; NaN is forced quiet, as llama.cpp does.
#ifndef FT_QUANT_FP16_H
#define FT_QUANT_FP16_H

#include <stdint.h>
#include <string.h>

#include "blocks.h"

#ifdef __CUDACC__
#define FT_HOST_DEVICE __host__ __device__
#else
#define FT_HOST_DEVICE
#endif

FT_HOST_DEVICE static inline uint32_t ft_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

FT_HOST_DEVICE static inline float ft_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

FT_HOST_DEVICE static inline float ft_fp16_to_fp32(ft_half h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        // zero or subnormal: mant * 2^-24, exact in float
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return ft_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return ft_f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

FT_HOST_DEVICE static inline ft_half ft_fp32_to_fp16(float f) {
    uint32_t x = ft_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00;   // NaN
    if (ax >= 0x477ff000u) return sign | 0x7c00;  // rounds to infinity (65520 and above)
    uint32_t exp = ax >> 23;
    uint32_t mant = ax & 0x7fffffu;
    uint32_t q, rem, half;
    if (exp < 113) {
        // result is subnormal (or zero): count units of 2^-24
        uint32_t shift = 126 - exp; // 14..126
        if (shift > 24) return sign;
        mant |= 0x800000u;
        q = mant >> shift;
        rem = mant & ((1u << shift) - 1);
        half = 1u << (shift - 1);
    } else {
        q = ((exp - 112) << 10) | (mant >> 13);
        rem = mant & 0x1fffu;
        half = 0x1000u;
    }
    if (rem > half || (rem == half && (q & 1))) q++; // a carry into the exponent is correct
    return (ft_half)(sign | q);
}

FT_HOST_DEVICE static inline float ft_bf16_to_fp32(ft_bf16 h) {
    return ft_f32_from_bits((uint32_t)h << 16);
}

FT_HOST_DEVICE static inline ft_bf16 ft_fp32_to_bf16(float f) {
    uint32_t u = ft_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ft_bf16)((u >> 16) | 64); // quiet NaN
    return (ft_bf16)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

#endif
