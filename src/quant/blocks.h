// blocks.h: the quantized block formats of GGUF tensors, shared by C and CUDA.
//
// A quantized row of n elements is n / BLOCK_ELEMS consecutive blocks. Each block holds its
// own scale(s) and packed integer codes; the layouts below are the on-disk GGUF layouts and
// must never change. Half-precision fields are stored as raw uint16_t bit patterns (IEEE
// binary16); see fp16.h for conversion. Every struct is followed by a static assert on its size
// and a comment giving its bits per weight.
//
// Naming: QK_* is the number of elements a block covers. K-quants ("_K") use 256-element
// super-blocks split into 16 or 32 element sub-blocks with their own small scales.
#ifndef FT_QUANT_BLOCKS_H
#define FT_QUANT_BLOCKS_H

#include <stdint.h>

#ifdef __cplusplus
#define FT_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define FT_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

typedef uint16_t ft_half; // IEEE binary16 bits
typedef uint16_t ft_bf16; // bfloat16 bits (upper half of an IEEE binary32)

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_MXFP4 32
#define QK_K 256
#define K_SCALE_SIZE 12

// ---------------------------------------------------------------------------------------------
// Simple formats: one scale (and maybe a min) per 32 elements.

// 4.5 bpw. x = d * (q - 8), q in [0, 15]. Element j in the low nibble of qs[j], element j+16
// in the high nibble.
typedef struct {
    ft_half d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
FT_STATIC_ASSERT(sizeof(block_q4_0) == 18, "block_q4_0 size");

// 5.0 bpw. x = d * q + m, q in [0, 15]; nibble order as q4_0.
typedef struct {
    ft_half d;
    ft_half m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
FT_STATIC_ASSERT(sizeof(block_q4_1) == 20, "block_q4_1 size");

// 5.5 bpw. x = d * (q - 16), q in [0, 31]; low 4 bits as q4_0, bit 4 of element j is bit j of
// the little-endian 32-bit qh.
typedef struct {
    ft_half d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
FT_STATIC_ASSERT(sizeof(block_q5_0) == 22, "block_q5_0 size");

// 6.0 bpw. x = d * q + m, q in [0, 31]; bits as q5_0.
typedef struct {
    ft_half d;
    ft_half m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
FT_STATIC_ASSERT(sizeof(block_q5_1) == 24, "block_q5_1 size");

// 8.5 bpw. x = d * q, q in [-127, 127]. Also the KV-cache format and the activation format
// of q4_0, q5_0, q8_0, iq4_nl and mxfp4 dot products.
typedef struct {
    ft_half d;
    int8_t qs[QK8_0];
} block_q8_0;
FT_STATIC_ASSERT(sizeof(block_q8_0) == 34, "block_q8_0 size");

// 9.0 bpw. Activation format of q4_1 and q5_1 dot products: s = d * sum(qs) lets the dot
// product add the weight block's min term without touching the codes.
typedef struct {
    ft_half d;
    ft_half s;
    int8_t qs[QK8_1];
} block_q8_1;
FT_STATIC_ASSERT(sizeof(block_q8_1) == 36, "block_q8_1 size");

// 4.5 bpw. Non-linear 4-bit: x = d * kvalues_iq4nl[q]; nibble order as q4_0.
typedef struct {
    ft_half d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
FT_STATIC_ASSERT(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

// 4.25 bpw. OCP microscaling FP4: x = 2^(e - 127) * kvalues_mxfp4[q] / 2 (E2M1 codes, stored
// doubled as integers); nibble order as q4_0.
typedef struct {
    uint8_t e; // E8M0 shared exponent
    uint8_t qs[QK_MXFP4 / 2];
} block_mxfp4;
FT_STATIC_ASSERT(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

// ---------------------------------------------------------------------------------------------
// K-quants: 256-element super-blocks.

// 2.625 bpw. 16 sub-blocks of 16: x = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4).
typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    ft_half d;
    ft_half dmin;
} block_q2_K;
FT_STATIC_ASSERT(sizeof(block_q2_K) == 84, "block_q2_K size");

// 3.4375 bpw. 16 sub-blocks of 16 with 6-bit signed scales packed in 12 bytes:
// x = d * (scale - 32) * (q - 4 if the hmask bit is clear else q).
typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    ft_half d;
} block_q3_K;
FT_STATIC_ASSERT(sizeof(block_q3_K) == 110, "block_q3_K size");

// 4.5 bpw. 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes:
// x = d * sc * q - dmin * m.
typedef struct {
    ft_half d;
    ft_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
FT_STATIC_ASSERT(sizeof(block_q4_K) == 144, "block_q4_K size");

// 5.5 bpw. As q4_K with a fifth bit per element in qh.
typedef struct {
    ft_half d;
    ft_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
FT_STATIC_ASSERT(sizeof(block_q5_K) == 176, "block_q5_K size");

// 6.5625 bpw. 16 sub-blocks of 16 with 8-bit signed scales: x = d * scales[i] * (q - 32).
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    ft_half d;
} block_q6_K;
FT_STATIC_ASSERT(sizeof(block_q6_K) == 210, "block_q6_K size");

// 9.125 bpw. Activation format of the K-quant and iq4_xs dot products: float scale and the
// sums of each group of 16 codes (so the min terms of q2_K/q4_K/q5_K cost one multiply).
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
FT_STATIC_ASSERT(sizeof(block_q8_K) == 292, "block_q8_K size");

// 4.25 bpw. Non-linear 4-bit with 8 sub-blocks of 32 and 6-bit scales:
// x = d * (ls - 32) * kvalues_iq4nl[q], ls = low 4 bits from scales_l, high 2 from scales_h.
typedef struct {
    ft_half d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
FT_STATIC_ASSERT(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

#endif
