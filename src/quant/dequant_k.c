// dequant_k.c: dequantization of the 256-element super-block formats (q2_K .. q6_K, q8_K,
// iq4_xs).
//
// As in dequant.c, the arithmetic is exact and ordered as llama.cpp's: the sub-block scale is
// formed first (super-scale times the small integer scale, one rounding), then each element is
// that times its code, minus the sub-block min where the format has one. Results equal
// llama.cpp's bit for bit.
//
// Layout shared by q2_K and q3_K: the 256 elements are two halves of 128; in each half, byte l
// (0..31) of the half's 32 code bytes holds elements l, l+32, l+64, l+96 in its bit pairs
// 0-1, 2-3, 4-5, 6-7 ("planes"). Sub-blocks are 16 consecutive elements.
#include "quant.h"
#include "codec.h"
#include "fp16.h"
#include "tables.h"
#include "../util/util.h"

void ft_dequantize_row_q2_K(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    const block_q2_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ft_fp16_to_fp32(x[i].d);
        const float dmin = ft_fp16_to_fp32(x[i].dmin);
        for (int half = 0; half < 2; half++) {
            const uint8_t *q = x[i].qs + 32 * half;
            for (int plane = 0; plane < 4; plane++) {
                const int shift = 2 * plane;
                for (int s = 0; s < 2; s++, y += 16) {
                    const uint8_t sc = x[i].scales[8 * half + 2 * plane + s];
                    const float dl = d * (float)(sc & 0xf);
                    const float ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        y[l] = dl * (float)((q[16 * s + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

// Element e of a q3_K block: 2 low bits as in q2_K, the third bit is bit e / 32 of
// hmask[e % 32]; a clear bit means the code is 4 lower (codes are -4..3).
void ft_dequantize_row_q3_K(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    const block_q3_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ft_fp16_to_fp32(x[i].d);
        for (int half = 0; half < 2; half++) {
            const uint8_t *q = x[i].qs + 32 * half;
            for (int plane = 0; plane < 4; plane++) {
                const int shift = 2 * plane;
                const uint8_t hbit = (uint8_t)(1u << (4 * half + plane));
                for (int s = 0; s < 2; s++, y += 16) {
                    const float dl = d * (float)ft_q3_K_scale(8 * half + 2 * plane + s, x[i].scales);
                    const uint8_t *hm = x[i].hmask + 16 * s;
                    for (int l = 0; l < 16; l++) {
                        int code = ((q[16 * s + l] >> shift) & 3) - ((hm[l] & hbit) ? 0 : 4);
                        y[l] = dl * (float)code;
                    }
                }
            }
        }
    }
}

// q4_K: four chunks of 64 elements; byte l of a chunk's 32 code bytes holds element l (low
// nibble, sub-block 2c) and element l + 32 (high nibble, sub-block 2c + 1).
void ft_dequantize_row_q4_K(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    const block_q4_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ft_fp16_to_fp32(x[i].d);
        const float dmin = ft_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < 4; c++, q += 32, y += 64) {
            uint8_t sc, m;
            ft_k4_scale_min(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            ft_k4_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                y[l] = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++)
                y[l + 32] = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

// q5_K: q4_K's layout, plus a fifth bit per element: for chunk c, bit 2c of qh[l] belongs to
// element l and bit 2c + 1 to element l + 32.
void ft_dequantize_row_q5_K(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    const block_q5_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ft_fp16_to_fp32(x[i].d);
        const float dmin = ft_fp16_to_fp32(x[i].dmin);
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        for (int c = 0; c < 4; c++, ql += 32, y += 64) {
            uint8_t sc, m;
            ft_k4_scale_min(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            ft_k4_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int code = (ql[l] & 0xf) | ((qh[l] >> (2 * c)) & 1) << 4;
                y[l] = d1 * (float)code - m1;
            }
            for (int l = 0; l < 32; l++) {
                int code = (ql[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4;
                y[l + 32] = d2 * (float)code - m2;
            }
        }
    }
}

// q6_K: two halves of 128. In a half, ql byte l holds the low 4 bits of elements l (low
// nibble) and l + 64 (high nibble), ql byte l + 32 those of l + 32 and l + 96; qh byte l holds
// the top 2 bits of l, l + 32, l + 64, l + 96 in its bit pairs. Codes are 0..63 minus 32.
void ft_dequantize_row_q6_K(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    const block_q6_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ft_fp16_to_fp32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                const int s = l / 16;
                int q1 = ((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[s] * (float)q1;
                y[l + 32] = d * (float)sc[s + 2] * (float)q2;
                y[l + 64] = d * (float)sc[s + 4] * (float)q3;
                y[l + 96] = d * (float)sc[s + 6] * (float)q4;
            }
        }
    }
}

void ft_dequantize_row_q8_K(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    const block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = x[i].d;
        for (int j = 0; j < QK_K; j++)
            y[j] = d * (float)x[i].qs[j];
    }
}

// iq4_xs: eight sub-blocks of 32, each with 16 code bytes in q4_0's nibble order.
void ft_dequantize_row_iq4_xs(const void *restrict vx, float *restrict y, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    const block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = ft_fp16_to_fp32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, y += 32) {
            const int lo = (x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
            const int hi = (x[i].scales_h >> (2 * ib)) & 3;
            const int ls = lo | hi << 4;
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)ft_kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * (float)ft_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}
