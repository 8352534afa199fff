// vecdot_q.cuh: integer dot products of one quantized weight block (or a part of it) with the
// matching q8_1 activation blocks, for every quantized weight format (internal to
// src/backend/cuda/; used by matvec_q.cu, and by the prefill kernels later).
//
// Two layers per format, kept apart so that kernels with other load patterns (shared-memory
// tiles in a GEMM) reuse the arithmetic:
//   - `*_math`: register math only. It takes 32-bit words of packed codes exactly as they sit
//     in the block, the activation words (4 int8 each) and the scales, and returns the float
//     partial dot product. Codes are unpacked with masks and shifts and multiplied with dp4a
//     (4 int8 products summed into an int32 per instruction).
//   - `vd_*`: loads. They read the words of part `part` of a block from global memory with
//     the widest access the block's alignment allows, and call the math.
//
// Each weight block is split into NPART parts handled by different threads (traits below);
// the kernel sums the parts. Every partial sum is exact in integers inside a sub-block, and
// the offsets of the unsigned formats (q - 8, q - 16, q6_K's q - 32, q3_K's missing high bit)
// and the mins (q4_1, q5_1, q2_K, q4_K, q5_K) are applied with the exact integer sum of the
// activation codes (a dp4a with 0x01010101), not with the fp16 s field of q8_1: the only
// roundings are the float scale products and the float accumulation.
//
// Alignment: blocks are packed back to back, so a block starts 4-byte aligned only when its
// size is a multiple of 4 (q4_1, q5_1, q2_K, q4_K, q5_K, iq4_xs), 2-byte for the even sizes
// (q4_0, q5_0, q8_0, q3_K, q6_K, iq4_nl) and 1-byte for mxfp4 (17 bytes: read as the aligned
// words around the block, vd_mxfp4).
#ifndef FT_VECDOT_Q_CUH
#define FT_VECDOT_Q_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "../../quant/blocks.h"
#include "../../quant/codec.h"

// ---------------------------------------------------------------------------------------------
// Loads of one 32-bit word at byte offset 4 * i from p, by the alignment p is known to have.

__device__ __forceinline__ int ld_w2(const uint8_t *p, int i) {
    const uint16_t *q = (const uint16_t *)p + 2 * i;
    return (int)((uint32_t)q[0] | (uint32_t)q[1] << 16);
}

__device__ __forceinline__ int ld_w4(const uint8_t *p, int i) { return ((const int *)p)[i]; }

__device__ __forceinline__ float ld_half(const ft_half *h) {
    return __half2float(__ushort_as_half(*h));
}

// Word i (0..7) of the codes of a q8_1 block and its scale.
__device__ __forceinline__ int ld_u(const block_q8_1 *y, int i) { return ld_w4((const uint8_t *)y->qs, i); }
__device__ __forceinline__ float ld_d8(const block_q8_1 *y) { return ld_half(&y->d); }

#define M4 0x0F0F0F0F
#define ONES 0x01010101

__device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }

// Bits 4k..4k+3 of a nibble-sized group of 4 high bits, spread to bit 4 of byte k: the fifth
// bit of 4 consecutive 5-bit codes (q5_0, q5_1).
__device__ __forceinline__ int spread4_bit4(uint32_t b) {
    return (int)(((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25));
}

// Table lookup of the 8 nibble codes of a word of a 32-element block (the low nibbles are
// elements 4i..4i+3, the high ones 16+4i..) in a 16-entry code book held as 4 words t0..t3
// (byte k of word j = entry 4j + k): *lo gets the low nibbles' entries, *hi the high ones'.
// __byte_perm selects with the low 3 bits of each selector nibble, so each half of the book
// is looked up with the codes themselves, bit 3 of each code picks the half, and the bytes,
// which come out in nibble order (element 0, 16, 1, 17, ...), are then sorted apart.
__device__ __forceinline__ void lut16x8(uint32_t q, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3,
                                        int *lo, int *hi) {
    const uint32_t half = 0x32103210u | ((q & 0x88888888u) >> 1); // byte k from the upper half where code k >= 8
    const uint32_t r0 = __byte_perm(__byte_perm(t0, t1, q), __byte_perm(t2, t3, q), half);
    const uint32_t r1 = __byte_perm(__byte_perm(t0, t1, q >> 16), __byte_perm(t2, t3, q >> 16), half >> 16);
    *lo = (int)__byte_perm(r0, r1, 0x6420);
    *hi = (int)__byte_perm(r0, r1, 0x7531);
}

// Code books as words (byte k of word j = entry 4j + k), mirroring tables.h.
#define PACK4(a, b, c, d) \
    ((uint32_t)(uint8_t)(a) | (uint32_t)(uint8_t)(b) << 8 | (uint32_t)(uint8_t)(c) << 16 | (uint32_t)(uint8_t)(d) << 24)
#define IQ4NL_T0 PACK4(-127, -104, -83, -65)
#define IQ4NL_T1 PACK4(-49, -35, -22, -10)
#define IQ4NL_T2 PACK4(1, 13, 25, 38)
#define IQ4NL_T3 PACK4(53, 69, 89, 113)
#define MXFP4_T0 PACK4(0, 1, 2, 3)
#define MXFP4_T1 PACK4(4, 6, 8, 12)
#define MXFP4_T2 PACK4(0, -1, -2, -3)
#define MXFP4_T3 PACK4(-4, -6, -8, -12)

// ---------------------------------------------------------------------------------------------
// Formats with 32-element blocks: 2 parts of 16 elements. Part p holds code words 2p, 2p+1
// (bytes 8p..8p+7): low nibbles are elements 8p..8p+7 (activation words 2p, 2p+1), high
// nibbles elements 16+8p.. (activation words 4+2p, 5+2p).

enum { NPART_32 = 2 };

// sum over the part of q * u, and of u (for offsets and mins). v: 2 words of 4-bit codes.
__device__ __forceinline__ void nib_dot(const int v[2], const int u[4], int *sq, int *su) {
    int s = 0, t = 0;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        s = dp4a(v[i] & M4, u[i], s);
        s = dp4a((v[i] >> 4) & M4, u[2 + i], s);
        t = dp4a(ONES, u[i], t);
        t = dp4a(ONES, u[2 + i], t);
    }
    *sq = s;
    *su = t;
}

__device__ __forceinline__ void load_u32(const block_q8_1 *y, int part, int u[4]) {
    u[0] = ld_u(y, 2 * part);
    u[1] = ld_u(y, 2 * part + 1);
    u[2] = ld_u(y, 4 + 2 * part);
    u[3] = ld_u(y, 5 + 2 * part);
}

// q4_0: x = d * (q - 8)
__device__ __forceinline__ float q4_0_math(const int v[2], const int u[4], float d, float d8) {
    int sq, su;
    nib_dot(v, u, &sq, &su);
    return d * d8 * (float)(sq - 8 * su);
}

__device__ __forceinline__ float vd_q4_0(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q4_0 *b = (const block_q4_0 *)blk;
    const int v[2] = {ld_w2(b->qs, 2 * part), ld_w2(b->qs, 2 * part + 1)};
    int u[4];
    load_u32(y, part, u);
    return q4_0_math(v, u, ld_half(&b->d), ld_d8(y));
}

// q4_1: x = d * q + m
__device__ __forceinline__ float q4_1_math(const int v[2], const int u[4], float d, float m, float d8) {
    int sq, su;
    nib_dot(v, u, &sq, &su);
    return d8 * (d * (float)sq + m * (float)su);
}

__device__ __forceinline__ float vd_q4_1(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q4_1 *b = (const block_q4_1 *)blk;
    const int v[2] = {ld_w4(b->qs, 2 * part), ld_w4(b->qs, 2 * part + 1)};
    int u[4];
    load_u32(y, part, u);
    return q4_1_math(v, u, ld_half(&b->d), ld_half(&b->m), ld_d8(y));
}

// 5-bit codes: low nibbles as q4_0 plus bit e of qh for element e.
__device__ __forceinline__ void nib5_dot(const int v[2], uint32_t qh, int part, const int u[4],
                                         int *sq, int *su) {
    int s = 0, t = 0;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int w = 2 * part + i; // elements 4w..4w+3 and 16+4w..
        const int lo = (v[i] & M4) | spread4_bit4(qh >> (4 * w));
        const int hi = ((v[i] >> 4) & M4) | spread4_bit4(qh >> (16 + 4 * w));
        s = dp4a(lo, u[i], s);
        s = dp4a(hi, u[2 + i], s);
        t = dp4a(ONES, u[i], t);
        t = dp4a(ONES, u[2 + i], t);
    }
    *sq = s;
    *su = t;
}

// q5_0: x = d * (q - 16)
__device__ __forceinline__ float q5_0_math(const int v[2], uint32_t qh, int part, const int u[4],
                                           float d, float d8) {
    int sq, su;
    nib5_dot(v, qh, part, u, &sq, &su);
    return d * d8 * (float)(sq - 16 * su);
}

__device__ __forceinline__ float vd_q5_0(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q5_0 *b = (const block_q5_0 *)blk;
    const int v[2] = {ld_w2(b->qs, 2 * part), ld_w2(b->qs, 2 * part + 1)};
    int u[4];
    load_u32(y, part, u);
    return q5_0_math(v, (uint32_t)ld_w2(b->qh, 0), part, u, ld_half(&b->d), ld_d8(y));
}

// q5_1: x = d * q + m
__device__ __forceinline__ float q5_1_math(const int v[2], uint32_t qh, int part, const int u[4],
                                           float d, float m, float d8) {
    int sq, su;
    nib5_dot(v, qh, part, u, &sq, &su);
    return d8 * (d * (float)sq + m * (float)su);
}

__device__ __forceinline__ float vd_q5_1(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q5_1 *b = (const block_q5_1 *)blk;
    const int v[2] = {ld_w4(b->qs, 2 * part), ld_w4(b->qs, 2 * part + 1)};
    int u[4];
    load_u32(y, part, u);
    return q5_1_math(v, (uint32_t)ld_w4(b->qh, 0), part, u, ld_half(&b->d), ld_half(&b->m), ld_d8(y));
}

// q8_0: x = d * q. Part p holds elements 16p..16p+15: code and activation words 4p..4p+3.
__device__ __forceinline__ float q8_0_math(const int v[4], const int u[4], float d, float d8) {
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) s = dp4a(v[i], u[i], s);
    return d * d8 * (float)s;
}

__device__ __forceinline__ float vd_q8_0(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q8_0 *b = (const block_q8_0 *)blk;
    const uint8_t *qs = (const uint8_t *)b->qs;
    int v[4], u[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[i] = ld_w2(qs, 4 * part + i);
        u[i] = ld_u(y, 4 * part + i);
    }
    return q8_0_math(v, u, ld_half(&b->d), ld_d8(y));
}

// iq4_nl and mxfp4: codes index a signed code book; no offset.
__device__ __forceinline__ int lut_dot(const int v[2], const int u[4], uint32_t t0, uint32_t t1,
                                       uint32_t t2, uint32_t t3) {
    int s = 0;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int lo, hi;
        lut16x8((uint32_t)v[i], t0, t1, t2, t3, &lo, &hi);
        s = dp4a(lo, u[i], s);
        s = dp4a(hi, u[2 + i], s);
    }
    return s;
}

__device__ __forceinline__ float iq4_nl_math(const int v[2], const int u[4], float d, float d8) {
    return d * d8 * (float)lut_dot(v, u, IQ4NL_T0, IQ4NL_T1, IQ4NL_T2, IQ4NL_T3);
}

__device__ __forceinline__ float vd_iq4_nl(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_iq4_nl *b = (const block_iq4_nl *)blk;
    const int v[2] = {ld_w2(b->qs, 2 * part), ld_w2(b->qs, 2 * part + 1)};
    int u[4];
    load_u32(y, part, u);
    return iq4_nl_math(v, u, ld_half(&b->d), ld_d8(y));
}

// mxfp4: x = 2^(e-128) * doubled E2M1 value, over a whole block (v: its 4 code words, u: the
// 8 activation words), as the two halves lut_dot takes.
__device__ __forceinline__ float mxfp4_math(const int v[4], const int u[8], float d, float d8) {
    const int u0[4] = {u[0], u[1], u[4], u[5]}, u1[4] = {u[2], u[3], u[6], u[7]};
    const int s = lut_dot(v, u0, MXFP4_T0, MXFP4_T1, MXFP4_T2, MXFP4_T3) +
                  lut_dot(v + 2, u1, MXFP4_T0, MXFP4_T1, MXFP4_T2, MXFP4_T3);
    return d * d8 * (float)s;
}

// The scale and the 4 code words of a 17-byte mxfp4 block, which may start at any byte: the 5
// aligned words that cover it are loaded and the fields shifted out of them (5 loads instead of
// 17 byte loads). The last word may reach up to 3 bytes past the block, never past the 4-byte
// granule that holds the block's last byte.
__device__ __forceinline__ uint8_t ld_mxfp4(const uint8_t *blk, int v[4]) {
    const uint32_t *w = (const uint32_t *)((uintptr_t)blk & ~(uintptr_t)3);
    const int sh = (int)((uintptr_t)blk & 3) * 8;
    uint32_t a[5];
#pragma unroll
    for (int i = 0; i < 5; i++) a[i] = w[i];
#pragma unroll
    for (int i = 0; i < 4; i++) v[i] = (int)__funnelshift_rc(a[i], a[i + 1], sh + 8);
    return (uint8_t)(a[0] >> sh);
}

// A whole block per call (one part: its 5 word loads serve 32 elements).
enum { NPART_MXFP4 = 1 };

__device__ __forceinline__ float vd_mxfp4(const uint8_t *blk, const block_q8_1 *y, int part) {
    (void)part;
    int v[4], u[8];
    const uint8_t e = ld_mxfp4(blk, v);
#pragma unroll
    for (int i = 0; i < 8; i++) u[i] = ld_u(y, i);
    return mxfp4_math(v, u, ft_e8m0_to_fp32_half(e), ld_d8(y));
}

// ---------------------------------------------------------------------------------------------
// K-quants and iq4_xs: 256-element super-blocks in 16 parts of 16 elements (q4_K and q5_K:
// NPART_K4 parts, below). y points at the 8 q8_1 blocks of the super-block.

enum { NPART_K = 16 };

// q2_K and q3_K: part p = 8h + w covers code word w of half h (bytes 32h + 4w..+3); each of
// its 4 bit-pair planes j is 4 elements of q8_1 block 4h + j (word w), sub-block 8h + 2j + w/4.

// q2_K: x = d * (sc & 15) * q - dmin * (sc >> 4). sc[j]: the 4 sub-block scale bytes.
__device__ __forceinline__ float q2_K_math(int v, const int u[4], const float d8[4],
                                           const uint8_t sc[4], float d, float dmin) {
    float fd = 0.0f, fm = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int sq = dp4a((v >> (2 * j)) & 0x03030303, u[j], 0);
        const int su = dp4a(ONES, u[j], 0);
        fd += d8[j] * (float)(sq * (sc[j] & 0xF));
        fm += d8[j] * (float)(su * (sc[j] >> 4));
    }
    return d * fd - dmin * fm;
}

__device__ __forceinline__ float vd_q2_K(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q2_K *b = (const block_q2_K *)blk;
    const int h = part / 8, w = part % 8;
    const int v = ld_w4(b->qs, 8 * h + w);
    int u[4];
    float d8[4];
    uint8_t sc[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        u[j] = ld_u(y + 4 * h + j, w);
        d8[j] = ld_d8(y + 4 * h + j);
        sc[j] = b->scales[8 * h + 2 * j + w / 4];
    }
    return q2_K_math(v, u, d8, sc, ld_half(&b->d), ld_half(&b->dmin));
}

// q3_K: x = d * (sc - 32) * (q - 4 * (high bit clear)). hm: the 4 hmask bytes of the part's
// elements; bit 4h + j is the high bit of plane j.
__device__ __forceinline__ float q3_K_math(int v, uint32_t hm, int h, const int u[4],
                                           const float d8[4], const int sc[4], float d) {
    float f = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int q = (v >> (2 * j)) & 0x03030303;
        const int sub = (int)(((~hm >> (4 * h + j)) & 0x01010101u) << 2); // 4 where the bit is clear
        const int s = dp4a(q, u[j], 0) - dp4a(sub, u[j], 0);
        f += d8[j] * (float)(s * sc[j]);
    }
    return d * f;
}

__device__ __forceinline__ float vd_q3_K(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q3_K *b = (const block_q3_K *)blk;
    const int h = part / 8, w = part % 8;
    const int v = ld_w2(b->qs, 8 * h + w);
    const uint32_t hm = (uint32_t)ld_w2(b->hmask, w);
    int u[4], sc[4];
    float d8[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        u[j] = ld_u(y + 4 * h + j, w);
        d8[j] = ld_d8(y + 4 * h + j);
        sc[j] = ft_q3_K_scale(8 * h + 2 * j + w / 4, b->scales);
    }
    return q3_K_math(v, hm, h, u, d8, sc, ld_half(&b->d));
}

// q4_K and q5_K: each 64-element chunk c (0..3) has 32 code bytes; byte l holds element
// 64c + l (low nibble, sub-block 2c) and 64c + 32 + l (high nibble, sub-block 2c + 1). A part
// is K4W code words (K4W = 4: 16 bytes, one 16-byte load; 2 was slower at 1 token on large
// matrices), so NPART_K4 = 32 / K4W parts per block: part p = (8 / K4W) c + k covers
// code words 8c + K4W k.. (low nibbles: q8_1 block 2c, words K4W k..; high nibbles: block
// 2c + 1, same words).
enum { K4W = 4, NPART_K4 = 32 / K4W };

__device__ __forceinline__ float k4_math(const int lo[K4W], const int hi[K4W], const int u0[K4W],
                                         const int u1[K4W], float d80, float d81, const uint8_t sc[2],
                                         const uint8_t mn[2], float d, float dmin) {
    int s0 = 0, s1 = 0, t0 = 0, t1 = 0;
#pragma unroll
    for (int i = 0; i < K4W; i++) {
        s0 = dp4a(lo[i], u0[i], s0);
        s1 = dp4a(hi[i], u1[i], s1);
        t0 = dp4a(ONES, u0[i], t0);
        t1 = dp4a(ONES, u1[i], t1);
    }
    return d * (d80 * (float)(s0 * sc[0]) + d81 * (float)(s1 * sc[1])) -
           dmin * (d80 * (float)(t0 * mn[0]) + d81 * (float)(t1 * mn[1]));
}

__device__ __forceinline__ void k4_load_act(const block_q8_1 *y, int c, int k, int u0[K4W],
                                            int u1[K4W], float *d80, float *d81) {
#pragma unroll
    for (int i = 0; i < K4W; i++) {
        u0[i] = ld_u(y + 2 * c, K4W * k + i);
        u1[i] = ld_u(y + 2 * c + 1, K4W * k + i);
    }
    *d80 = ld_d8(y + 2 * c);
    *d81 = ld_d8(y + 2 * c + 1);
}

// K4W words from p (16-byte aligned: the codes of q4_K and q5_K sit at offsets 16 and 48 of
// blocks of 144 and 176 bytes, and their qh at 16).
__device__ __forceinline__ void ld_k4w(const uint8_t *p, int w[K4W]) {
    const uint4 v = *(const uint4 *)p;
    w[0] = (int)v.x;
    w[1] = (int)v.y;
    w[2] = (int)v.z;
    w[3] = (int)v.w;
}

// Scales and mins of sub-blocks 2c and 2c+1 of a q4_K / q5_K block (see ft_k4_scale_min),
// from its 12 scale bytes read as 3 words (the field is 4-byte aligned in both formats).
__device__ __forceinline__ void k4_scales(const uint8_t *scales, int c, uint8_t sc[2], uint8_t mn[2]) {
    const uint32_t w0 = (uint32_t)ld_w4(scales, 0), w1 = (uint32_t)ld_w4(scales, 1);
    const uint32_t w2 = (uint32_t)ld_w4(scales, 2);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int sh = 8 * ((2 * c + i) % 4); // byte (j % 4) of each word
        const uint32_t b0 = w0 >> sh, b1 = w1 >> sh, b2 = w2 >> sh;
        if (c < 2) {
            sc[i] = (uint8_t)(b0 & 63);
            mn[i] = (uint8_t)(b1 & 63);
        } else {
            sc[i] = (uint8_t)((b2 & 0xF) | ((b0 >> 6) & 3) << 4);
            mn[i] = (uint8_t)(((b2 >> 4) & 0xF) | ((b1 >> 6) & 3) << 4);
        }
    }
}

// d and dmin of a q4_K / q5_K block: its first word.
__device__ __forceinline__ void k4_dm(const uint8_t *blk, float *d, float *dmin) {
    const uint32_t dm = (uint32_t)ld_w4(blk, 0);
    *d = __half2float(__ushort_as_half((unsigned short)(dm & 0xFFFF)));
    *dmin = __half2float(__ushort_as_half((unsigned short)(dm >> 16)));
}

__device__ __forceinline__ float vd_q4_K(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q4_K *b = (const block_q4_K *)blk;
    const int c = part / (8 / K4W), k = part % (8 / K4W);
    int w[K4W], lo[K4W], hi[K4W];
    ld_k4w(b->qs + 32 * c + 4 * K4W * k, w);
#pragma unroll
    for (int i = 0; i < K4W; i++) {
        lo[i] = w[i] & M4;
        hi[i] = (w[i] >> 4) & M4;
    }
    uint8_t sc[2], mn[2];
    k4_scales(b->scales, c, sc, mn);
    float d, dmin;
    k4_dm(blk, &d, &dmin);
    int u0[K4W], u1[K4W];
    float d80, d81;
    k4_load_act(y, c, k, u0, u1, &d80, &d81);
    return k4_math(lo, hi, u0, u1, d80, d81, sc, mn, d, dmin);
}

// q5_K: the fifth bit of element 64c + l (low nibble) is bit 2c of qh[l], of element
// 64c + 32 + l bit 2c + 1.
__device__ __forceinline__ float vd_q5_K(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q5_K *b = (const block_q5_K *)blk;
    const int c = part / (8 / K4W), k = part % (8 / K4W);
    int w[K4W], h[K4W], lo[K4W], hi[K4W];
    ld_k4w(b->qs + 32 * c + 4 * K4W * k, w);
    ld_k4w(b->qh + 4 * K4W * k, h);
#pragma unroll
    for (int i = 0; i < K4W; i++) {
        lo[i] = (w[i] & M4) | (int)((((uint32_t)h[i] >> (2 * c)) & 0x01010101u) << 4);
        hi[i] = ((w[i] >> 4) & M4) | (int)((((uint32_t)h[i] >> (2 * c + 1)) & 0x01010101u) << 4);
    }
    uint8_t sc[2], mn[2];
    k4_scales(b->scales, c, sc, mn);
    float d, dmin;
    k4_dm(blk, &d, &dmin);
    int u0[K4W], u1[K4W];
    float d80, d81;
    k4_load_act(y, c, k, u0, u1, &d80, &d81);
    return k4_math(lo, hi, u0, u1, d80, d81, sc, mn, d, dmin);
}

// q6_K: x = d * sc * (q - 32), q = 4 low bits from ql, 2 high bits from qh. Part p = 8h + w:
// in half h, ql words a (bytes 64h + 4w..) and b (64h + 32 + 4w..) and qh word (32h + 4w..)
// give 4 code words: a low / b low / a high / b high nibbles with qh bit pairs 0/1/2/3, which
// are elements 128h + 32j + 4w.. (q8_1 block 4h + j, word w, sub-block 8h + 2j + w/4).
__device__ __forceinline__ float q6_K_math(const int q[4], const int u[4], const float d8[4],
                                           const int sc[4], float d) {
    float f = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int s = dp4a(q[j], u[j], 0) - dp4a(0x20202020, u[j], 0);
        f += d8[j] * (float)(s * sc[j]);
    }
    return d * f;
}

__device__ __forceinline__ float vd_q6_K(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_q6_K *b = (const block_q6_K *)blk;
    const int h = part / 8, w = part % 8;
    const int a = ld_w2(b->ql, 16 * h + w);
    const int c = ld_w2(b->ql, 16 * h + 8 + w);
    const int hb = ld_w2(b->qh, 8 * h + w);
    int q[4];
    q[0] = (a & M4) | ((hb & 0x03030303) << 4);
    q[1] = (c & M4) | (((hb >> 2) & 0x03030303) << 4);
    q[2] = ((a >> 4) & M4) | (((hb >> 4) & 0x03030303) << 4);
    q[3] = ((c >> 4) & M4) | (((hb >> 6) & 0x03030303) << 4);
    int u[4], sc[4];
    float d8[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        u[j] = ld_u(y + 4 * h + j, w);
        d8[j] = ld_d8(y + 4 * h + j);
        sc[j] = b->scales[8 * h + 2 * j + w / 4];
    }
    return q6_K_math(q, u, d8, sc, ld_half(&b->d));
}

// iq4_xs: 8 sub-blocks of 32 laid out like iq4_nl blocks (16 code bytes each); part p = 2s + k
// is half k of sub-block s, with scale ls - 32 (6 bits: low 4 in scales_l, high 2 in scales_h).
__device__ __forceinline__ float vd_iq4_xs(const uint8_t *blk, const block_q8_1 *y, int part) {
    const block_iq4_xs *b = (const block_iq4_xs *)blk;
    const int s = part / 2, k = part % 2;
    const int v[2] = {ld_w4(b->qs, 4 * s + 2 * k), ld_w4(b->qs, 4 * s + 2 * k + 1)};
    int u[4];
    load_u32(y + s, k, u);
    const int ls = ((b->scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b->scales_h >> (2 * s)) & 3) << 4);
    return iq4_nl_math(v, u, ld_half(&b->d) * (float)(ls - 32), ld_d8(y + s));
}

#undef M4
#undef ONES

#endif
