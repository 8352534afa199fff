// quantize.c: reference quantization to the float formats, the 32-element block formats
// (q4_0, q4_1, q5_0, q5_1) and the activation formats (q8_0, q8_1, q8_K).
//
// The activation quantizers run on the input of every matrix-vector product and on the KV
// cache, so they are also the truth the SIMD quantizers are tested against. Each follows llama.cpp's
// quantize_row_*_ref step for step (the same scale formula, the same rounding: truncation of
// x + 0.5 or of x + offset + 0.5 for the 4/5-bit formats, roundf for q8_0/q8_1, ties-to-even
// nearest for q8_K, and the same narrowing of the result to a byte), so the bytes written
// equal llama.cpp's, for garbage (NaN, infinite, scale-overflowing) rows too, where the float
// to int conversions follow x86 (ft_trunc_int). n is a multiple of the block size (asserted);
// nothing allocates.
#include "quant.h"
#include "codec.h"
#include "fp16.h"
#include "../util/util.h"

#include <float.h>
#include <math.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Float formats

void ft_quantize_row_f32_ref(const float *x, void *y, int64_t n) {
    FT_ASSERT(n >= 0);
    memcpy(y, x, (size_t)n * sizeof(float));
}

void ft_quantize_row_f16_ref(const float *x, void *vy, int64_t n) {
    ft_half *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = ft_fp32_to_fp16(x[i]);
}

void ft_quantize_row_bf16_ref(const float *x, void *vy, int64_t n) {
    ft_bf16 *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = ft_fp32_to_bf16(x[i]);
}

// ---------------------------------------------------------------------------------------------
// Symmetric 4/5-bit formats: d = -max / 2^(bits-1) where max is the element of largest
// magnitude (with its sign), so that element maps exactly onto the extreme code 0 and the
// opposite side gets one code less of range. Codes are trunc(x/d + 2^(bits-1) + 0.5), narrowed
// to a signed byte and capped at the top code.

// The element of largest magnitude in x[0..n), with its sign (the first one on a tie).
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

void ft_quantize_row_q4_0_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK4_0 == 0);
    block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        const float d = signed_absmax(x, QK4_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            uint8_t lo = (uint8_t)FT_MIN(15, (int8_t)ft_trunc_int(x[j] * id + 8.5f));
            uint8_t hi = (uint8_t)FT_MIN(15, (int8_t)ft_trunc_int(x[j + QK4_0 / 2] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

void ft_quantize_row_q5_0_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK5_0 == 0);
    block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            uint8_t lo = (uint8_t)FT_MIN(31, (int8_t)ft_trunc_int(x[j] * id + 16.5f));
            uint8_t hi = (uint8_t)FT_MIN(31, (int8_t)ft_trunc_int(x[j + QK5_0 / 2] * id + 16.5f));
            y[i].qs[j] = (uint8_t)((lo & 0xf) | (hi & 0xf) << 4);
            qh |= (uint32_t)((lo >> 4) & 1) << j;
            qh |= (uint32_t)((hi >> 4) & 1) << (j + QK5_0 / 2);
        }
        for (int b = 0; b < 4; b++)
            y[i].qh[b] = (uint8_t)(qh >> (8 * b));
    }
}

// ---------------------------------------------------------------------------------------------
// Affine 4/5-bit formats: x = d * q + m with m the block minimum and d = (max - min) / (2^bits
// - 1); codes are trunc((x - m) / d + 0.5), capped at the top code (q4_1) or not (q5_1).

static void block_min_max(const float *x, int n, float *min, float *max) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *min = lo;
    *max = hi;
}

void ft_quantize_row_q4_1_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK4_1 == 0);
    block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float min, max;
        block_min_max(x, QK4_1, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_fp32_to_fp16(d);
        y[i].m = ft_fp32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            uint8_t lo = (uint8_t)FT_MIN(15, (int8_t)ft_trunc_int((x[j] - min) * id + 0.5f));
            uint8_t hi = (uint8_t)FT_MIN(15, (int8_t)ft_trunc_int((x[j + QK4_1 / 2] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

void ft_quantize_row_q5_1_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK5_1 == 0);
    block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float min, max;
        block_min_max(x, QK5_1, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_fp32_to_fp16(d);
        y[i].m = ft_fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            // (x - min) / d never exceeds 31 by more than rounding: no clamp (llama.cpp has none)
            uint8_t lo = (uint8_t)ft_trunc_int((x[j] - min) * id + 0.5f);
            uint8_t hi = (uint8_t)ft_trunc_int((x[j + QK5_1 / 2] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((lo & 0xf) | (hi & 0xf) << 4);
            qh |= (uint32_t)((lo >> 4) & 1) << j;
            qh |= (uint32_t)((hi >> 4) & 1) << (j + QK5_1 / 2);
        }
        for (int b = 0; b < 4; b++)
            y[i].qh[b] = (uint8_t)(qh >> (8 * b));
    }
}

// ---------------------------------------------------------------------------------------------
// 8-bit activation formats: d = amax / 127, codes round(x / d) in -127..127 (roundf: ties away
// from zero).

static float block_absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++)
        amax = FT_MAX(amax, fabsf(x[j]));
    return amax;
}

void ft_quantize_row_q8_0_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK8_0 == 0);
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        const float d = block_absmax(x, QK8_0) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = (int8_t)ft_trunc_int(roundf(x[j] * id));
    }
}

// As q8_0, plus s = d * sum(codes) (d in float, before its rounding to fp16).
void ft_quantize_row_q8_1_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK8_1 == 0);
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        const float d = block_absmax(x, QK8_1) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ft_fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = (int8_t)ft_trunc_int(roundf(x[j] * id));
            sum += y[i].qs[j];
        }
        y[i].s = ft_fp32_to_fp16((float)sum * d);
    }
}

// q8_K keeps d in float and maps the element of largest magnitude to -127 or 127 (scale
// -127 / max, ties to even), and stores the sum of each 16 codes for the K-quant dot products.
// An all-zero block gets d = 0 and zero codes and sums (llama.cpp leaves its sums unwritten).
void ft_quantize_row_q8_K_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float max = signed_absmax(x, QK_K);
        if (max == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++)
            y[i].qs[j] = (int8_t)FT_MIN(127, ft_nearest_int(iscale * x[j]));
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++)
                sum += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}
