// gemm_q.cuh: the prefill GEMM's view of the quantized weight formats (internal to
// src/backend/cuda/; used by gemm_q.cu).
//
// The GEMM (gemm_q.cu) multiplies int8 weight codes by int8 q8_1 activation codes on the
// tensor cores, one 32-element k-block at a time, and applies the scales to the int32 results.
// So each format only has to say how one 32-element unit of a row becomes int8 codes and
// float factors:
//
//   element = sc[e / SUB] * code[e] - mn        (e = 0..31 within the unit)
//
//   - code: 32 signed 8-bit codes, as 8 words of 4 (element 4i + j in byte j of word i), with
//     the format's offset already taken out where it fits in int8 (q4_0: q - 8, q5_0: q - 16,
//     q6_K: q - 32, q3_K: q - 4 where the high bit is clear) and code books looked up
//     (iq4_nl, iq4_xs, mxfp4);
//   - sc: the float scale of each sub-block of SUB elements (SUB = 32, or 16 for q3_K and
//     q6_K, whose scales change every 16 elements: those take two k16 MMAs per unit);
//   - mn: the unit's float min (q4_K, q5_K: dmin * m; q4_1, q5_1: -m), 0 where there is none;
//     the GEMM applies it with the exact integer sum of the unit's activation codes.
//
// Each format is a struct gq<T> with QK (elements per block), BB (bytes per block), SUB,
// HAS_MIN and unit(blk, u, code, sc, mn), which decodes unit u (0..QK/32-1) of the block at
// blk. The scale products are formed as the CPU dequantizers form them (d * sub-scale first),
// so the only roundings left are the float products with the activation scale and the sums.
//
// Loads: blocks sit back to back, so a block is 4-byte aligned only when its size is a
// multiple of 4 (q4_1, q5_1, q4_K, q5_K, iq4_xs), 2-byte aligned for the even sizes and
// 1-byte for mxfp4; the loads below use the widest access each format allows (vecdot_q.cuh's
// ld_mxfp4 / ld_w2 / ld_w4, and 16-byte loads of the q4_K / q5_K code bytes, which sit at a
// 16-byte offset of 16-byte multiple blocks).
#ifndef FT_GEMM_Q_CUH
#define FT_GEMM_Q_CUH

#include <cuda_runtime.h>

#include "vecdot_q.cuh"

#define GQ_M4 0x0F0F0F0F
#define GQ_ONES 0x01010101

template <int T> struct gq;

// 4-bit codes of the 32-element formats: word i of qs holds elements 4i.. (low nibbles) and
// 16 + 4i.. (high nibbles). off: the per-byte offset to subtract (0x08080808 for q4_0).
__device__ __forceinline__ void gq_nibbles(const int v[4], uint32_t off, int code[8]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        code[i] = (int)__vsub4((uint32_t)v[i] & GQ_M4, off);
        code[4 + i] = (int)__vsub4(((uint32_t)v[i] >> 4) & GQ_M4, off);
    }
}

// 5-bit codes (q5_0, q5_1): the nibbles plus bit e of qh for element e.
__device__ __forceinline__ void gq_nibbles5(const int v[4], uint32_t qh, uint32_t off, int code[8]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        code[i] = (int)__vsub4(((uint32_t)v[i] & GQ_M4) | (uint32_t)spread4_bit4(qh >> (4 * i)), off);
        code[4 + i] = (int)__vsub4((((uint32_t)v[i] >> 4) & GQ_M4) | (uint32_t)spread4_bit4(qh >> (16 + 4 * i)), off);
    }
}

// Code-book formats: nibbles looked up in a 16-entry signed table.
__device__ __forceinline__ void gq_lut(const int v[4], uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3,
                                       int code[8]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        lut16x8((uint32_t)v[i], t0, t1, t2, t3, &code[i], &code[4 + i]);
    }
}

template <> struct gq<FT_TYPE_Q4_0> {
    static constexpr int QK = QK4_0, BB = sizeof(block_q4_0), SUB = 32;
    static constexpr bool HAS_MIN = false;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_q4_0 *b = (const block_q4_0 *)blk;
        int v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = ld_w2(b->qs, i);
        gq_nibbles(v, 0x08080808u, code);
        sc[0] = ld_half(&b->d);
        *mn = 0.0f;
    }
};

template <> struct gq<FT_TYPE_Q4_1> {
    static constexpr int QK = QK4_1, BB = sizeof(block_q4_1), SUB = 32;
    static constexpr bool HAS_MIN = true;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_q4_1 *b = (const block_q4_1 *)blk;
        int v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = ld_w4(b->qs, i);
        gq_nibbles(v, 0u, code);
        sc[0] = ld_half(&b->d);
        *mn = -ld_half(&b->m);
    }
};

template <> struct gq<FT_TYPE_Q5_0> {
    static constexpr int QK = QK5_0, BB = sizeof(block_q5_0), SUB = 32;
    static constexpr bool HAS_MIN = false;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_q5_0 *b = (const block_q5_0 *)blk;
        int v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = ld_w2(b->qs, i);
        gq_nibbles5(v, (uint32_t)ld_w2(b->qh, 0), 0x10101010u, code);
        sc[0] = ld_half(&b->d);
        *mn = 0.0f;
    }
};

template <> struct gq<FT_TYPE_Q5_1> {
    static constexpr int QK = QK5_1, BB = sizeof(block_q5_1), SUB = 32;
    static constexpr bool HAS_MIN = true;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_q5_1 *b = (const block_q5_1 *)blk;
        int v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = ld_w4(b->qs, i);
        gq_nibbles5(v, (uint32_t)ld_w4(b->qh, 0), 0u, code);
        sc[0] = ld_half(&b->d);
        *mn = -ld_half(&b->m);
    }
};

template <> struct gq<FT_TYPE_Q8_0> {
    static constexpr int QK = QK8_0, BB = sizeof(block_q8_0), SUB = 32;
    static constexpr bool HAS_MIN = false;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_q8_0 *b = (const block_q8_0 *)blk;
#pragma unroll
        for (int i = 0; i < 8; i++) code[i] = ld_w2((const uint8_t *)b->qs, i);
        sc[0] = ld_half(&b->d);
        *mn = 0.0f;
    }
};

template <> struct gq<FT_TYPE_IQ4_NL> {
    static constexpr int QK = QK4_NL, BB = sizeof(block_iq4_nl), SUB = 32;
    static constexpr bool HAS_MIN = false;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_iq4_nl *b = (const block_iq4_nl *)blk;
        int v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = ld_w2(b->qs, i);
        gq_lut(v, IQ4NL_T0, IQ4NL_T1, IQ4NL_T2, IQ4NL_T3, code);
        sc[0] = ld_half(&b->d);
        *mn = 0.0f;
    }
};

template <> struct gq<FT_TYPE_MXFP4> {
    static constexpr int QK = QK_MXFP4, BB = sizeof(block_mxfp4), SUB = 32;
    static constexpr bool HAS_MIN = false;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        int v[4];
        const uint8_t e = ld_mxfp4(blk, v);
        gq_lut(v, MXFP4_T0, MXFP4_T1, MXFP4_T2, MXFP4_T3, code);
        sc[0] = ft_e8m0_to_fp32_half(e);
        *mn = 0.0f;
    }
};

// q3_K: unit u = 4h + j is plane j of half h: element 32u + l has its 2 low bits at bits
// 2j..2j+1 of qs[32h + l] and its high bit at bit u of hmask[l]; sub-block (16) 2u + l / 16.
template <> struct gq<FT_TYPE_Q3_K> {
    static constexpr int QK = QK_K, BB = sizeof(block_q3_K), SUB = 16;
    static constexpr bool HAS_MIN = false;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_q3_K *b = (const block_q3_K *)blk;
        const int h = u / 4, j = u % 4;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t q = ((uint32_t)ld_w2(b->qs, 8 * h + i) >> (2 * j)) & 0x03030303u;
            const uint32_t hb = ((uint32_t)ld_w2(b->hmask, i) >> u) & GQ_ONES;
            code[i] = (int)__vsub4(q, (hb ^ GQ_ONES) << 2); // q - 4 where the high bit is clear
        }
        const float d = ld_half(&b->d);
        sc[0] = d * (float)ft_q3_K_scale(2 * u, b->scales);
        sc[1] = d * (float)ft_q3_K_scale(2 * u + 1, b->scales);
        *mn = 0.0f;
    }
};

// q4_K / q5_K: unit u is sub-block u: chunk c = u / 2 of 64 elements, low nibbles of its 32
// code bytes for even u, high nibbles for odd u (q5_K: fifth bit u of qh[l]).
__device__ __forceinline__ void gq_k4_factors(const uint8_t *blk, const uint8_t *scales, int u, float sc[2],
                                              float *mn) {
    uint8_t s[2], m[2];
    k4_scales(scales, u / 2, s, m);
    float d, dmin;
    k4_dm(blk, &d, &dmin);
    sc[0] = d * (float)(u % 2 ? s[1] : s[0]); // (a select, not a local-memory index)
    *mn = dmin * (float)(u % 2 ? m[1] : m[0]);
}

template <> struct gq<FT_TYPE_Q4_K> {
    static constexpr int QK = QK_K, BB = sizeof(block_q4_K), SUB = 32;
    static constexpr bool HAS_MIN = true;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_q4_K *b = (const block_q4_K *)blk;
        const int shift = 4 * (u % 2);
        int w[8];
        ld_k4w(b->qs + 32 * (u / 2), w);
        ld_k4w(b->qs + 32 * (u / 2) + 16, w + 4);
#pragma unroll
        for (int i = 0; i < 8; i++) code[i] = (w[i] >> shift) & GQ_M4;
        gq_k4_factors(blk, b->scales, u, sc, mn);
    }
};

template <> struct gq<FT_TYPE_Q5_K> {
    static constexpr int QK = QK_K, BB = sizeof(block_q5_K), SUB = 32;
    static constexpr bool HAS_MIN = true;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_q5_K *b = (const block_q5_K *)blk;
        const int shift = 4 * (u % 2);
        int w[8], hw[8];
        ld_k4w(b->qs + 32 * (u / 2), w);
        ld_k4w(b->qs + 32 * (u / 2) + 16, w + 4);
        ld_k4w(b->qh, hw);
        ld_k4w(b->qh + 16, hw + 4);
#pragma unroll
        for (int i = 0; i < 8; i++)
            code[i] = ((w[i] >> shift) & GQ_M4) | (int)((((uint32_t)hw[i] >> u) & GQ_ONES) << 4);
        gq_k4_factors(blk, b->scales, u, sc, mn);
    }
};

// q6_K: unit u = 4h + j: element 32u + l takes its low 4 bits from ql[64h + 32 (j % 2) + l]
// (low nibble for j < 2, high for j >= 2) and its top 2 bits from bits 2j.. of qh[32h + l];
// sub-block (16) 2u + l / 16.
template <> struct gq<FT_TYPE_Q6_K> {
    static constexpr int QK = QK_K, BB = sizeof(block_q6_K), SUB = 16;
    static constexpr bool HAS_MIN = false;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_q6_K *b = (const block_q6_K *)blk;
        const int h = u / 4, j = u % 4;
        const uint8_t *ql = b->ql + 64 * h + 32 * (j % 2);
        const int ls = 4 * (j / 2);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = ((uint32_t)ld_w2(ql, i) >> ls) & GQ_M4;
            const uint32_t hi = ((uint32_t)ld_w2(b->qh + 32 * h, i) >> (2 * j)) & 0x03030303u;
            code[i] = (int)__vsub4(lo | (hi << 4), 0x20202020u);
        }
        const float d = ld_half(&b->d);
        sc[0] = d * (float)b->scales[2 * u];
        sc[1] = d * (float)b->scales[2 * u + 1];
        *mn = 0.0f;
    }
};

// iq4_xs: unit u is sub-block u, laid out as an iq4_nl block's 16 code bytes at qs + 16u.
template <> struct gq<FT_TYPE_IQ4_XS> {
    static constexpr int QK = QK_K, BB = sizeof(block_iq4_xs), SUB = 32;
    static constexpr bool HAS_MIN = false;
    static __device__ __forceinline__ void unit(const uint8_t *blk, int u, int code[8], float sc[2], float *mn) {
        const block_iq4_xs *b = (const block_iq4_xs *)blk;
        int v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = ld_w4(b->qs, 4 * u + i);
        gq_lut(v, IQ4NL_T0, IQ4NL_T1, IQ4NL_T2, IQ4NL_T3, code);
        const int ls = ((b->scales_l[u / 2] >> (4 * (u % 2))) & 0xF) | (((b->scales_h >> (2 * u)) & 3) << 4);
        sc[0] = ld_half(&b->d) * (float)(ls - 32);
        *mn = 0.0f;
    }
};

#undef GQ_M4
#undef GQ_ONES

// ---------------------------------------------------------------------------------------------
// The kernel's arguments and the grouped launcher (gemm_q.cu), for moe_gemm.cu.

// Tokens per CTA tile: dense prefill (hundreds of tokens), and the grouped form (a few dozen
// tokens per expert at 512 tokens x 8 of 128 experts).
enum { GM_GEMM_BN = 64, GM_GROUP_BN = 32 };

// Positions: the dense form computes n_pos token rows in order; the grouped form computes
// the positions of the tile table's entries (expert-sorted (token, slot) pairs).
typedef struct gemm_q_args {
    const uint8_t *w0;        // (n_expert or 1, n_out, n_in) weights, mat_bytes apart
    const uint8_t *w1;        // the up weights of the fused gate/up form (same shape), or NULL
    size_t mat_bytes;         // bytes of one (n_out, n_in) matrix (0 for the dense form)
    size_t row_bytes;         // bytes of one row: ft_row_bytes(type, n_in)
    int n_out, n_in;          // n_in a multiple of the type's block
    const block_q8_1 *x;      // activation rows of n_in / 32 q8_1 blocks
    float *y;                 // output rows of n_out floats
    int n_pos;                // dense: tokens
    const int32_t *tiles;     // grouped: (max_tiles, 3) {expert or -1, first position, count}
    const int32_t *x_map;     // activation row of position p: x_map[p] / x_div, or p if NULL
    int x_div;
    const int32_t *y_map;     // output row of position p: y_map[p], or p if NULL
    // dense form, split over the input (grid.z splits of kb_split k-blocks, a multiple of the
    // chunk): split z writes its partial products to part + z * n_pos * n_out instead of y
    float *part;
    int kb_split;
    // grouped form: the tile expert's extras (expert_extras.cuh): the fused gate/up form's
    // activation and gate/up biases, the single form's scale and bias (down); zeroed: none
    ft_cuda_expert_extras ex;
} gemm_q_args;

// The grouped form: grid (ceil(n_out / 64), max_tiles); a->tiles on the device. Aborts on a
// bad shape or an unsupported type.
void ft_cuda_gemm_grouped(uint32_t type, const gemm_q_args *a, int max_tiles, cudaStream_t stream);

#endif
