// dot.h: per-type dot products of a weight row with an activation row (internal to quant/).
//
// Each weight type pairs with the activation format llama.cpp's CPU backend uses for it
// (ft_quant_ops.vec_dot_type): q4_0, q5_0, q8_0, iq4_nl, mxfp4 with q8_0; q4_1, q5_1 with
// q8_1; the K-quants and iq4_xs with q8_K; f16 with f16, bf16 with bf16, f32 with f32.
// `_ref` is scalar and deterministic; `_avx2` is compiled with -mavx2 -mfma -mf16c and only
// called after ft_quant_ops_find() has seen the CPU support it. Both take n elements
// (a multiple of the block size) and return the sum in float.
#ifndef FT_QUANT_DOT_H
#define FT_QUANT_DOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FT_DOT_DECL(type)                                                        \
    float ft_vec_dot_##type##_ref(int64_t n, const void *x, const void *y);    \
    float ft_vec_dot_##type##_avx2(int64_t n, const void *x, const void *y);

FT_DOT_DECL(f32)
FT_DOT_DECL(f16)
FT_DOT_DECL(bf16)
FT_DOT_DECL(q4_0)
FT_DOT_DECL(q4_1)
FT_DOT_DECL(q5_0)
FT_DOT_DECL(q5_1)
FT_DOT_DECL(q8_0)
FT_DOT_DECL(q2_K)
FT_DOT_DECL(q3_K)
FT_DOT_DECL(q4_K)
FT_DOT_DECL(q5_K)
FT_DOT_DECL(q6_K)
FT_DOT_DECL(iq4_nl)
FT_DOT_DECL(iq4_xs)
FT_DOT_DECL(mxfp4)

#undef FT_DOT_DECL

// Tiles (see ft_vec_dot_tile_fn), for the types whose AVX2 kernel has a tile form.
#define FT_DOT_TILE_DECL(type)                                                                       \
    void ft_vec_dot_tile_##type##_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y,   \
                                       size_t by, int nc, float *s, size_t ls);

FT_DOT_TILE_DECL(f32)
FT_DOT_TILE_DECL(f16)
FT_DOT_TILE_DECL(bf16)
FT_DOT_TILE_DECL(q4_0)
FT_DOT_TILE_DECL(q4_1)
FT_DOT_TILE_DECL(q5_0)
FT_DOT_TILE_DECL(q5_1)
FT_DOT_TILE_DECL(q8_0)
FT_DOT_TILE_DECL(q4_K)
FT_DOT_TILE_DECL(q5_K)
FT_DOT_TILE_DECL(q6_K)
FT_DOT_TILE_DECL(iq4_nl)
FT_DOT_TILE_DECL(mxfp4)

#undef FT_DOT_TILE_DECL

// AVX-512BW tiles (same contract, bit-identical to the AVX2 ones), where the CPU has AVX-512BW;
// q4_K's takes several weight rows per pass when the tile has one activation row (decode).
void ft_vec_dot_tile_q4_K_avx512(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                 int nc, float *s, size_t ls);
void ft_vec_dot_tile_q8_0_avx512(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                 int nc, float *s, size_t ls);

// The AVX-512 VNNI q8_0 tile (same contract, bit-identical to the AVX2 one), where the CPU has
// AVX-512 VNNI: several weight rows per pass when the tile has one activation row.
void ft_vec_dot_tile_q8_0_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                               int nc, float *s, size_t ls);
// The AVX-512 VNNI mxfp4 tile (same contract, bit-identical to the AVX2 one): several weight rows
// per pass when the tile has one activation row; wider tiles are the AVX2 kernel's.
void ft_vec_dot_tile_mxfp4_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                int nc, float *s, size_t ls);
// The AVX-512 VNNI q4_K tile (same contract, bit-identical to the AVX2 one): two weight rows per
// pass when the tile has one activation row; wider tiles are the AVX-512BW kernel's.
void ft_vec_dot_tile_q4_K_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                               int nc, float *s, size_t ls);

// AVX-512 VNNI GEMMs (gemm_vnni.c; the gemm contract in quant.h: every one equal to the _ref dot
// products to the bit, as the AMX ones), for CPUs without AMX (all but q8_0 and q4_K: with it
// too); entered only where
// ft_gemm_vnni_supported() (AVX-512 F, BW, VL, DQ and VNNI; F16C comes with AVX2's check).
bool ft_gemm_vnni_supported(void);
#define FT_GEMM_VNNI_DECL(type)                                                                    \
    void ft_gemm_##type##_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, \
                               float *s, size_t ls);
FT_GEMM_VNNI_DECL(q8_0)
FT_GEMM_VNNI_DECL(q4_K)
FT_GEMM_VNNI_DECL(q5_K)
FT_GEMM_VNNI_DECL(q6_K)
// the 32-element formats of q8_0 activations, the same way (q8_0's GEMM on their codes)
FT_GEMM_VNNI_DECL(q4_0)
FT_GEMM_VNNI_DECL(q5_0)
FT_GEMM_VNNI_DECL(iq4_nl)
FT_GEMM_VNNI_DECL(mxfp4)
#undef FT_GEMM_VNNI_DECL

// The AVX-512 BF16 GEMM (gemm_bf16.c; bf16 within n * 2^-24 * sum |x_i y_i| of the reference,
// as the AMX one), for CPUs without AMX-BF16; entered only where ft_gemm_bf16_avx512_supported().
bool ft_gemm_bf16_avx512_supported(void);
void ft_gemm_bf16_avx512(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, float *s,
                         size_t ls);

// AVX2 GEMMs (gemm_avx2.c; the gemm contract in quant.h, the integer formats equal to the _ref
// dot products to the bit, as the VNNI ones), for CPUs without AVX-512 VNNI; entered only where
// the CPU has AVX2, FMA and F16C.
#define FT_GEMM_AVX2_DECL(type)                                                                    \
    void ft_gemm_##type##_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, \
                               float *s, size_t ls);
FT_GEMM_AVX2_DECL(q8_0)
FT_GEMM_AVX2_DECL(q4_0)
FT_GEMM_AVX2_DECL(q5_0)
FT_GEMM_AVX2_DECL(iq4_nl)
FT_GEMM_AVX2_DECL(mxfp4)
FT_GEMM_AVX2_DECL(q4_K)
FT_GEMM_AVX2_DECL(q5_K)
FT_GEMM_AVX2_DECL(q6_K)
FT_GEMM_AVX2_DECL(bf16)
#undef FT_GEMM_AVX2_DECL
// The same for the integer formats with AVX-VNNI (VPDPBUSD on 256-bit vectors), entered only
// where ft_gemm_avxvnni_supported() (with AVX2, FMA and F16C).
bool ft_gemm_avxvnni_supported(void);
#define FT_GEMM_AVXVNNI_DECL(type)                                                                  \
    void ft_gemm_##type##_avxvnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, \
                                  float *s, size_t ls);
FT_GEMM_AVXVNNI_DECL(q8_0)
FT_GEMM_AVXVNNI_DECL(q4_0)
FT_GEMM_AVXVNNI_DECL(q5_0)
FT_GEMM_AVXVNNI_DECL(iq4_nl)
FT_GEMM_AVXVNNI_DECL(mxfp4)
FT_GEMM_AVXVNNI_DECL(q4_K)
FT_GEMM_AVXVNNI_DECL(q5_K)
FT_GEMM_AVXVNNI_DECL(q6_K)
#undef FT_GEMM_AVXVNNI_DECL

// AMX GEMMs (dot_amx.c; the gemm contract in quant.h: q8_0 and q4_K equal to the _ref dot
// products to the bit), entered only after ft_amx_init() returned true. ft_amx_init checks the CPU and the
// OS and asks Linux for the tile state (once per process).
bool ft_amx_init(void);
// True where the CPU has AMX-BF16 (ft_gemm_bf16_amx; ft_amx_init must also have succeeded).
bool ft_amx_has_bf16(void);
// bf16: float sums in AMX's order, not the reference's double sum (see dot_amx.c's bound).
void ft_gemm_bf16_amx(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, float *s,
                      size_t ls);
void ft_gemm_q8_0_amx(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, float *s,
                      size_t ls);
void ft_gemm_q4_K_amx(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, float *s,
                      size_t ls);

#endif
