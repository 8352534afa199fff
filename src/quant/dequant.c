// dequant.c: dequantization of the float formats and of the 32-element block formats
// (q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, iq4_nl, mxfp4).
//
// Each function expands n elements (a multiple of the block size, asserted) into floats. The
// arithmetic is exact to the bit: codes are small integers converted exactly, times the block
// scale in one float multiply, then plus the block min where the format has one, the same
// operations in the same order as llama.cpp, so the results equal its bit for bit. The loops
// are plain enough for the compiler to vectorize; nothing allocates.
#include "quant.h"
#include "codec.h"
#include "fp16.h"
#include "tables.h"
#include "../util/util.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// Float formats

void ft_dequantize_row_f32(const void *restrict x, float *restrict y, int64_t n) {
    FT_ASSERT(n >= 0);
    memcpy(y, x, (size_t)n * sizeof(float));
}

void ft_dequantize_row_f16(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_half *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = ft_fp16_to_fp32(x[i]);
}

void ft_dequantize_row_bf16(const void *restrict vx, float *restrict y, int64_t n) {
    const ft_bf16 *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = ft_bf16_to_fp32(x[i]);
}

// ---------------------------------------------------------------------------------------------
// Block formats. In all of them byte j of qs holds element j in its low nibble and element
// j + 16 in its high nibble.

void ft_dequantize_row_q4_0(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK4_0 == 0);
    const block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float d = ft_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = (float)((x[i].qs[j] & 0xf) - 8) * d;
            y[j + QK4_0 / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void ft_dequantize_row_q4_1(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK4_1 == 0);
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        const float d = ft_fp16_to_fp32(x[i].d);
        const float m = ft_fp16_to_fp32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0xf) * d + m;
            y[j + QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

// Fifth bits of q5_0 / q5_1: bit j of the little-endian 32-bit qh belongs to element j.
static inline uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

void ft_dequantize_row_q5_0(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK5_0 == 0);
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        const float d = ft_fp16_to_fp32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            int lo = (x[i].qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (x[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(lo - 16) * d;
            y[j + QK5_0 / 2] = (float)(hi - 16) * d;
        }
    }
}

void ft_dequantize_row_q5_1(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK5_1 == 0);
    const block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
        const float d = ft_fp16_to_fp32(x[i].d);
        const float m = ft_fp16_to_fp32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            int lo = (x[i].qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (x[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)lo * d + m;
            y[j + QK5_1 / 2] = (float)hi * d + m;
        }
    }
}

void ft_dequantize_row_q8_0(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK8_0 == 0);
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float d = ft_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; j++)
            y[j] = (float)x[i].qs[j] * d;
    }
}

// The block sum s is redundant (d times the sum of the codes); only d and the codes count.
void ft_dequantize_row_q8_1(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK8_1 == 0);
    const block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
        const float d = ft_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_1; j++)
            y[j] = (float)x[i].qs[j] * d;
    }
}

void ft_dequantize_row_iq4_nl(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK4_NL == 0);
    const block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const float d = ft_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = d * (float)ft_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + QK4_NL / 2] = d * (float)ft_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void ft_dequantize_row_mxfp4(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK_MXFP4 == 0);
    const block_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
        const float d = ft_e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            y[j] = (float)ft_kvalues_mxfp4[x[i].qs[j] & 0xf] * d;
            y[j + QK_MXFP4 / 2] = (float)ft_kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}
