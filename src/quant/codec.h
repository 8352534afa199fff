// codec.h: small pieces of the block formats shared by the quantizers and dequantizers
// (internal to quant/; plain inline C, usable from CUDA as well).
//
// - ft_nearest_int: round to nearest, ties to even, exactly as llama.cpp's quantizers round
//   (a magic-number addition), including what it returns outside its range, so the codes
//   chosen here are the codes llama.cpp chooses.
// - ft_trunc_int: a float-to-int conversion defined for every float, as x86 converts.
// - ft_e8m0_to_fp32_half: the scale of an MXFP4 block.
// - ft_k4_scale_min: the 6-bit scale and min of a q4_K / q5_K sub-block.
// - ft_q3_K_scale: the 6-bit signed scale of a q3_K sub-block.
#ifndef FT_QUANT_CODEC_H
#define FT_QUANT_CODEC_H

#include <stdint.h>
#include <string.h>

#include "fp16.h"

// Rounds x to the nearest integer, ties to even, for |x| < 2^22. Adding 1.5 * 2^23 moves the
// binary point so that the FPU's own rounding leaves round(x) + 2^22 in the low 23 bits of the
// sum. Outside that range the result is meaningless but defined (no UB), as in llama.cpp.
FT_HOST_DEVICE static inline int ft_nearest_int(float x) {
    float v = x + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &v, sizeof(bits));
    return (bits & 0x007fffff) - 0x00400000;
}

// (int)x for every float x: truncates toward zero, and gives INT32_MIN for NaN and values out
// of int range, which is what x86's conversion instruction returns. llama.cpp's quantizers cast
// floats to integers directly (undefined behaviour out of range, INT32_MIN on x86), so this
// keeps a row that holds NaN or overflows its scale defined here and equal to theirs.
FT_HOST_DEVICE static inline int32_t ft_trunc_int(float x) {
    return x >= -2147483648.0f && x < 2147483648.0f ? (int32_t)x : INT32_MIN;
}

// Half the value of an E8M0 exponent byte, 2^(e - 128), exactly: the MXFP4 code book is stored
// doubled, so the block scale is halved to compensate. e = 0 and 1 give the subnormals 2^-128
// and 2^-127; e = 255 gives 2^127 (E8M0's NaN code is not treated specially, as in llama.cpp).
FT_HOST_DEVICE static inline float ft_e8m0_to_fp32_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return ft_f32_from_bits(bits);
}

// Scale *sc and min *m (both 0..63) of sub-block j (0..7) of a q4_K / q5_K block, whose
// 12 scale bytes hold: bytes 0-3 the low 6 bits of scales 0-3, bytes 4-7 the low 6 bits of
// mins 0-3; bytes 8-11 the low 4 bits of scale j (low nibble) and min j (high nibble) for
// j = 4..7, whose top 2 bits sit in the top 2 bits of bytes j-4 (scale) and j (min).
FT_HOST_DEVICE static inline void ft_k4_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// Signed scale (-32..31) of sub-block j (0..15) of a q3_K block. Its 12 scale bytes hold the
// low 4 bits of scale j in the low (j < 8) or high (j >= 8) nibble of byte j % 8, and the top 2
// bits in bits 2*(j/4) of byte 8 + j%4.
FT_HOST_DEVICE static inline int ft_q3_K_scale(int j, const uint8_t *s) {
    int lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

#endif
