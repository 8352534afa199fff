// dot_ref.c: the scalar reference dot products, one per weight type (see dot.h).
//
// Each function decodes a block's integer codes, forms the exact integer dot product with the
// activation codes of each (sub-)block, and only then applies the float scales, once per
// block as llama.cpp's kernels do: sum += (d_x * d_y) * isum (- or + the min term). So the
// only rounding is in the float scale products and the running float sum; integer sums are
// exact (the largest, q6_K's 256 * 128 * 32 * 127 < 2^31, fits an int).
//
// f32, f16 and bf16 accumulate in double and round once at the end, as llama.cpp's scalar
// path does. Plain loops, no SIMD: this file is what the AVX2 kernels are tested against.
#include "dot.h"
#include "quant.h"
#include "codec.h"
#include "fp16.h"
#include "tables.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// Helpers

// Sum of a[i] * b[i] over n int8 codes.
static int dot_i8(const int8_t *a, const int8_t *b, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// The 4-bit codes of a 32-element block packed as in q4_0: element j in the low nibble of
// qs[j], element j + 16 in the high nibble.
static void unpack_nibbles32(const uint8_t qs[16], int q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = qs[j] & 0x0f;
        q[j + 16] = qs[j] >> 4;
    }
}

// ---------------------------------------------------------------------------------------------
// Float formats

float ft_vec_dot_f32_ref(int64_t n, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * y[i];
    return (float)sum;
}

float ft_vec_dot_f16_ref(int64_t n, const void *vx, const void *vy) {
    const ft_half *x = vx, *y = vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)ft_fp16_to_fp32(x[i]) * ft_fp16_to_fp32(y[i]);
    return (float)sum;
}

float ft_vec_dot_bf16_ref(int64_t n, const void *vx, const void *vy) {
    const ft_bf16 *x = vx, *y = vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)ft_bf16_to_fp32(x[i]) * ft_bf16_to_fp32(y[i]);
    return (float)sum;
}

// ---------------------------------------------------------------------------------------------
// 32-element formats with q8_0 / q8_1 activations

float ft_vec_dot_q4_0_ref(int64_t n, const void *vx, const void *vy) {
    const block_q4_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK4_0; b++) {
        int q[32], isum = 0;
        unpack_nibbles32(x[b].qs, q);
        for (int j = 0; j < 32; j++) isum += (q[j] - 8) * y[b].qs[j];
        sum += (ft_fp16_to_fp32(x[b].d) * ft_fp16_to_fp32(y[b].d)) * (float)isum;
    }
    return sum;
}

// x = d * q + m, so x . y = d * dy * sum(q * qy) + m * (dy * sum(qy)), and q8_1 stores
// dy * sum(qy) as s.
float ft_vec_dot_q4_1_ref(int64_t n, const void *vx, const void *vy) {
    const block_q4_1 *x = vx;
    const block_q8_1 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK4_1; b++) {
        int q[32], isum = 0;
        unpack_nibbles32(x[b].qs, q);
        for (int j = 0; j < 32; j++) isum += q[j] * y[b].qs[j];
        sum += (ft_fp16_to_fp32(x[b].d) * ft_fp16_to_fp32(y[b].d)) * (float)isum +
               ft_fp16_to_fp32(x[b].m) * ft_fp16_to_fp32(y[b].s);
    }
    return sum;
}

// Fifth bit of element j of a q5_0 / q5_1 block: bit j of the little-endian qh.
static void add_fifth_bits(const uint8_t qh[4], int q[32]) {
    uint32_t h;
    memcpy(&h, qh, sizeof(h));
    for (int j = 0; j < 32; j++) q[j] |= (int)((h >> j) & 1) << 4;
}

float ft_vec_dot_q5_0_ref(int64_t n, const void *vx, const void *vy) {
    const block_q5_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK5_0; b++) {
        int q[32], isum = 0;
        unpack_nibbles32(x[b].qs, q);
        add_fifth_bits(x[b].qh, q);
        for (int j = 0; j < 32; j++) isum += (q[j] - 16) * y[b].qs[j];
        sum += (ft_fp16_to_fp32(x[b].d) * ft_fp16_to_fp32(y[b].d)) * (float)isum;
    }
    return sum;
}

float ft_vec_dot_q5_1_ref(int64_t n, const void *vx, const void *vy) {
    const block_q5_1 *x = vx;
    const block_q8_1 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK5_1; b++) {
        int q[32], isum = 0;
        unpack_nibbles32(x[b].qs, q);
        add_fifth_bits(x[b].qh, q);
        for (int j = 0; j < 32; j++) isum += q[j] * y[b].qs[j];
        sum += (ft_fp16_to_fp32(x[b].d) * ft_fp16_to_fp32(y[b].d)) * (float)isum +
               ft_fp16_to_fp32(x[b].m) * ft_fp16_to_fp32(y[b].s);
    }
    return sum;
}

float ft_vec_dot_q8_0_ref(int64_t n, const void *vx, const void *vy) {
    const block_q8_0 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int isum = dot_i8(x[b].qs, y[b].qs, 32);
        sum += (ft_fp16_to_fp32(x[b].d) * ft_fp16_to_fp32(y[b].d)) * (float)isum;
    }
    return sum;
}

// Shared by iq4_nl and mxfp4: 4-bit indices into a 16-entry int8 code book.
static int dot_codebook32(const uint8_t qs[16], const int8_t book[16], const int8_t *qy) {
    int q[32], isum = 0;
    unpack_nibbles32(qs, q);
    for (int j = 0; j < 32; j++) isum += book[q[j]] * qy[j];
    return isum;
}

float ft_vec_dot_iq4_nl_ref(int64_t n, const void *vx, const void *vy) {
    const block_iq4_nl *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        int isum = dot_codebook32(x[b].qs, ft_kvalues_iq4nl, y[b].qs);
        sum += (ft_fp16_to_fp32(y[b].d) * ft_fp16_to_fp32(x[b].d)) * (float)isum;
    }
    return sum;
}

float ft_vec_dot_mxfp4_ref(int64_t n, const void *vx, const void *vy) {
    const block_mxfp4 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK_MXFP4; b++) {
        int isum = dot_codebook32(x[b].qs, ft_kvalues_mxfp4, y[b].qs);
        sum += (ft_fp16_to_fp32(y[b].d) * ft_e8m0_to_fp32_half(x[b].e)) * (float)isum;
    }
    return sum;
}

// ---------------------------------------------------------------------------------------------
// K-quants and iq4_xs with q8_K activations: 256-element super-blocks. Each decodes its codes
// into q[256] (element order), then sums sub-block by sub-block.

// q2_K: 16 sub-blocks of 16; element 128 * h + 32 * k + l (l < 32) is bits 2k..2k+1 of
// qs[32 * h + l]. The min term uses the activation's per-16 sums (bsums).
float ft_vec_dot_q2_K_ref(int64_t n, const void *vx, const void *vy) {
    const block_q2_K *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int8_t q[QK_K];
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++)
                    q[128 * h + 32 * k + l] = (int8_t)((x[b].qs[32 * h + l] >> (2 * k)) & 3);
        int isum = 0, msum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (x[b].scales[j] & 0x0f) * dot_i8(q + 16 * j, y[b].qs + 16 * j, 16);
            msum += (x[b].scales[j] >> 4) * y[b].bsums[j];
        }
        sum += (y[b].d * ft_fp16_to_fp32(x[b].d)) * (float)isum -
               (y[b].d * ft_fp16_to_fp32(x[b].dmin)) * (float)msum;
    }
    return sum;
}

// q3_K: as q2_K for the low two bits; the third bit of element 128 * h + 32 * k + l is bit
// 4h + k of hmask[l], and a clear bit means subtract 4.
float ft_vec_dot_q3_K_ref(int64_t n, const void *vx, const void *vy) {
    const block_q3_K *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int8_t q[QK_K];
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    int lo = (x[b].qs[32 * h + l] >> (2 * k)) & 3;
                    int high = (x[b].hmask[l] >> (4 * h + k)) & 1;
                    q[128 * h + 32 * k + l] = (int8_t)(lo - (high ? 0 : 4));
                }
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += ft_q3_K_scale(j, x[b].scales) * dot_i8(q + 16 * j, y[b].qs + 16 * j, 16);
        sum += (y[b].d * ft_fp16_to_fp32(x[b].d)) * (float)isum;
    }
    return sum;
}

// q4_K / q5_K: 8 sub-blocks of 32; element 64 * c + l is the low nibble of qs[32 * c + l],
// element 64 * c + 32 + l its high nibble. q5_K adds bit 2c (resp. 2c + 1) of qh[l] as 16.
static float dot_q45_K(int64_t n, const block_q4_K *x4, const block_q5_K *x5,
                       const block_q8_K *y) {
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const uint8_t *qs = x4 ? x4[b].qs : x5[b].qs;
        const uint8_t *scales = x4 ? x4[b].scales : x5[b].scales;
        ft_half d = x4 ? x4[b].d : x5[b].d, dmin = x4 ? x4[b].dmin : x5[b].dmin;
        int8_t q[QK_K];
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = (int8_t)(qs[32 * c + l] & 0x0f);
                q[64 * c + 32 + l] = (int8_t)(qs[32 * c + l] >> 4);
                if (x5) {
                    q[64 * c + l] += (int8_t)(((x5[b].qh[l] >> (2 * c)) & 1) << 4);
                    q[64 * c + 32 + l] += (int8_t)(((x5[b].qh[l] >> (2 * c + 1)) & 1) << 4);
                }
            }
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            ft_k4_scale_min(j, scales, &sc, &m);
            isum += sc * dot_i8(q + 32 * j, y[b].qs + 32 * j, 32);
            msum += m * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
        }
        sum += (y[b].d * ft_fp16_to_fp32(d)) * (float)isum -
               (y[b].d * ft_fp16_to_fp32(dmin)) * (float)msum;
    }
    return sum;
}

float ft_vec_dot_q4_K_ref(int64_t n, const void *vx, const void *vy) {
    return dot_q45_K(n, vx, NULL, vy);
}

float ft_vec_dot_q5_K_ref(int64_t n, const void *vx, const void *vy) {
    return dot_q45_K(n, NULL, vx, vy);
}

// q6_K: 16 sub-blocks of 16 with int8 scales; codes offset by 32. In each half h, element
// 128h + 32k + l takes its low four bits from ql[64h + 32(k % 2) + l] (low nibble for k < 2,
// high nibble for k >= 2) and its top two bits from bits 2k..2k+1 of qh[32h + l].
float ft_vec_dot_q6_K_ref(int64_t n, const void *vx, const void *vy) {
    const block_q6_K *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int8_t q[QK_K];
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    int ql = x[b].ql[64 * h + 32 * (k % 2) + l];
                    int lo = k < 2 ? ql & 0x0f : ql >> 4;
                    int hi = (x[b].qh[32 * h + l] >> (2 * k)) & 3;
                    q[128 * h + 32 * k + l] = (int8_t)((lo | (hi << 4)) - 32);
                }
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += x[b].scales[j] * dot_i8(q + 16 * j, y[b].qs + 16 * j, 16);
        sum += (y[b].d * ft_fp16_to_fp32(x[b].d)) * (float)isum;
    }
    return sum;
}

// iq4_xs: 8 sub-blocks of 32, each packed like an iq4_nl block, with 6-bit scales offset by
// 32: the low four bits are nibble ib % 2 of scales_l[ib / 2], the top two are bits 2ib..2ib+1
// of scales_h.
float ft_vec_dot_iq4_xs_ref(int64_t n, const void *vx, const void *vy) {
    const block_iq4_xs *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int lo = (x[b].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
            int hi = (x[b].scales_h >> (2 * ib)) & 3;
            int ls = (lo | (hi << 4)) - 32;
            isum += ls * dot_codebook32(x[b].qs + 16 * ib, ft_kvalues_iq4nl, y[b].qs + 32 * ib);
        }
        sum += (ft_fp16_to_fp32(x[b].d) * y[b].d) * (float)isum;
    }
    return sum;
}
