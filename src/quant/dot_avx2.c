// dot_avx2.c: AVX2 dot products of the float formats and the 32-element block formats.
//
// Compiled with -mavx2 -mfma -mf16c and entered only through ft_quant_ops_find() after the
// CPUID check in ops.c. The K-quants and iq4_xs are in dot_k_avx2.c.
//
// The block kernels follow one shape: decode the 32 weight codes of a block into a 256-bit
// vector of bytes, multiply them with the 32 int8 activation codes into 16 int16 pair sums
// (_mm256_maddubs_epi16), widen to 8 int32 sums, convert to float and accumulate d_x * d_y
// times them in a float vector. maddubs multiplies unsigned by signed bytes, so signed codes
// go through the sign trick: |x| times (y with x's sign). No pair sum can saturate: the
// largest is 2 * 127 * 127 = 32258 < 32767 (activations never hold -128). Two blocks per loop
// iteration into two accumulators hide the FMA latency; an odd last block takes the same path.
//
// The float formats keep four 8-lane FMA accumulators over 32 elements per iteration, then
// 8-lane steps and a scalar tail, so any n works.
#include "dot.h"
#include "quant.h"
#include "codec.h"
#include "fp16.h"
#include "tables.h"

#include <immintrin.h>
#include <string.h>

// Also compile for AVX2 where the build did not pass -mavx2 (the fuzz build compiles every
// source with one set of flags); the run-time check in ops.c is what guards these functions.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

// ---------------------------------------------------------------------------------------------
// Helpers

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float half(ft_half h) { return _cvtsh_ss(h); }

// The 32 nibbles of a q4_0-packed block as bytes 0..15, in element order: bytes 0..15 are the
// low nibbles of qs[0..15], bytes 16..31 the high nibbles.
static inline __m256i unpack_nibbles(const uint8_t *qs) {
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Byte j is 0xff where bit j of the 32-bit little-endian qh is set, else 0.
static inline __m256i bits_to_bytes(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, sizeof(h));
    // byte j takes byte j / 8 of h, then is tested against bit j % 8
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

// acc + d * (x . y) over one block: x holds 32 unsigned codes (< 128), qy 32 int8 codes.
static inline __m256 fma_block_u8(__m256i x, const int8_t *qy, float d, __m256 acc) {
    __m256i y = _mm256_loadu_si256((const __m256i *)qy);
    __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p32), acc);
}

// As fma_block_u8 for 32 signed codes, through |x| . (y * sign(x)).
static inline __m256 fma_block_i8(__m256i x, const int8_t *qy, float d, __m256 acc) {
    __m256i y = _mm256_loadu_si256((const __m256i *)qy);
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p32), acc);
}

// ---------------------------------------------------------------------------------------------
// Float formats

float ft_vec_dot_f32_avx2(int64_t n, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += x[i] * y[i];
    return sum;
}

static inline __m256 load_f16(const ft_half *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

float ft_vec_dot_f16_avx2(int64_t n, const void *vx, const void *vy) {
    const ft_half *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16(x + i + 8), load_f16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16(x + i + 16), load_f16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16(x + i + 24), load_f16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += half(x[i]) * half(y[i]);
    return sum;
}

// bf16 is the top half of a float: widen to 32 bits and shift into place.
static inline __m256 load_bf16(const ft_bf16 *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

float ft_vec_dot_bf16_avx2(int64_t n, const void *vx, const void *vy) {
    const ft_bf16 *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16(x + i + 8), load_bf16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16(x + i + 16), load_bf16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16(x + i + 24), load_bf16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += ft_bf16_to_fp32(x[i]) * ft_bf16_to_fp32(y[i]);
    return sum;
}

// ---------------------------------------------------------------------------------------------
// 32-element block formats. Each has a decoder of one block's codes and the two-block loop.

static inline __m256i codes_q4_0(const block_q4_0 *b) {
    return _mm256_sub_epi8(unpack_nibbles(b->qs), _mm256_set1_epi8(8));
}

float ft_vec_dot_q4_0_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q4_0 *x = vx;
    const block_q8_0 *y = vy;
    const int64_t nb = n / QK4_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        acc0 = fma_block_i8(codes_q4_0(x + b), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
        acc1 = fma_block_i8(codes_q4_0(x + b + 1), y[b + 1].qs,
                            half(x[b + 1].d) * half(y[b + 1].d), acc1);
    }
    if (b < nb) acc0 = fma_block_i8(codes_q4_0(x + b), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

// q4_1: unsigned codes; the min term m * s is summed in scalar alongside.
float ft_vec_dot_q4_1_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q4_1 *x = vx;
    const block_q8_1 *y = vy;
    const int64_t nb = n / QK4_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float mins0 = 0, mins1 = 0;
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        acc0 = fma_block_u8(unpack_nibbles(x[b].qs), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
        acc1 = fma_block_u8(unpack_nibbles(x[b + 1].qs), y[b + 1].qs,
                            half(x[b + 1].d) * half(y[b + 1].d), acc1);
        mins0 += half(x[b].m) * half(y[b].s);
        mins1 += half(x[b + 1].m) * half(y[b + 1].s);
    }
    if (b < nb) {
        acc0 = fma_block_u8(unpack_nibbles(x[b].qs), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
        mins0 += half(x[b].m) * half(y[b].s);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + (mins0 + mins1);
}

// q5_0: code - 16 as a signed byte is the nibble with 0xf0 or-ed in where the fifth bit is clear.
static inline __m256i codes_q5_0(const block_q5_0 *b) {
    __m256i clear = _mm256_andnot_si256(bits_to_bytes(b->qh), _mm256_set1_epi8((char)0xf0));
    return _mm256_or_si256(unpack_nibbles(b->qs), clear);
}

float ft_vec_dot_q5_0_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q5_0 *x = vx;
    const block_q8_0 *y = vy;
    const int64_t nb = n / QK5_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        acc0 = fma_block_i8(codes_q5_0(x + b), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
        acc1 = fma_block_i8(codes_q5_0(x + b + 1), y[b + 1].qs,
                            half(x[b + 1].d) * half(y[b + 1].d), acc1);
    }
    if (b < nb) acc0 = fma_block_i8(codes_q5_0(x + b), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

static inline __m256i codes_q5_1(const block_q5_1 *b) {
    __m256i fifth = _mm256_and_si256(bits_to_bytes(b->qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(unpack_nibbles(b->qs), fifth);
}

float ft_vec_dot_q5_1_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q5_1 *x = vx;
    const block_q8_1 *y = vy;
    const int64_t nb = n / QK5_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float mins0 = 0, mins1 = 0;
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        acc0 = fma_block_u8(codes_q5_1(x + b), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
        acc1 = fma_block_u8(codes_q5_1(x + b + 1), y[b + 1].qs,
                            half(x[b + 1].d) * half(y[b + 1].d), acc1);
        mins0 += half(x[b].m) * half(y[b].s);
        mins1 += half(x[b + 1].m) * half(y[b + 1].s);
    }
    if (b < nb) {
        acc0 = fma_block_u8(codes_q5_1(x + b), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
        mins0 += half(x[b].m) * half(y[b].s);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + (mins0 + mins1);
}

static inline __m256i codes_q8_0(const block_q8_0 *b) {
    return _mm256_loadu_si256((const __m256i *)b->qs);
}

float ft_vec_dot_q8_0_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q8_0 *x = vx;
    const block_q8_0 *y = vy;
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        acc0 = fma_block_i8(codes_q8_0(x + b), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
        acc1 = fma_block_i8(codes_q8_0(x + b + 1), y[b + 1].qs,
                            half(x[b + 1].d) * half(y[b + 1].d), acc1);
    }
    if (b < nb) acc0 = fma_block_i8(codes_q8_0(x + b), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

// iq4_nl and mxfp4: one byte shuffle looks the 32 nibbles up in the 16-entry code book
// (broadcast to both 128-bit lanes, as vpshufb indexes within a lane).
static inline __m256i codes_book(const uint8_t *qs, __m256i book) {
    return _mm256_shuffle_epi8(book, unpack_nibbles(qs));
}

static inline __m256i load_book(const int8_t *book) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)book));
}

float ft_vec_dot_iq4_nl_avx2(int64_t n, const void *vx, const void *vy) {
    const block_iq4_nl *x = vx;
    const block_q8_0 *y = vy;
    const int64_t nb = n / QK4_NL;
    const __m256i book = load_book(ft_kvalues_iq4nl);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        acc0 = fma_block_i8(codes_book(x[b].qs, book), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
        acc1 = fma_block_i8(codes_book(x[b + 1].qs, book), y[b + 1].qs,
                            half(x[b + 1].d) * half(y[b + 1].d), acc1);
    }
    if (b < nb)
        acc0 = fma_block_i8(codes_book(x[b].qs, book), y[b].qs, half(x[b].d) * half(y[b].d), acc0);
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

float ft_vec_dot_mxfp4_avx2(int64_t n, const void *vx, const void *vy) {
    const block_mxfp4 *x = vx;
    const block_q8_0 *y = vy;
    const int64_t nb = n / QK_MXFP4;
    const __m256i book = load_book(ft_kvalues_mxfp4);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        acc0 = fma_block_i8(codes_book(x[b].qs, book), y[b].qs, half(y[b].d) * ft_e8m0_to_fp32_half(x[b].e),
                            acc0);
        acc1 = fma_block_i8(codes_book(x[b + 1].qs, book), y[b + 1].qs,
                            half(y[b + 1].d) * ft_e8m0_to_fp32_half(x[b + 1].e), acc1);
    }
    if (b < nb)
        acc0 = fma_block_i8(codes_book(x[b].qs, book), y[b].qs, half(y[b].d) * ft_e8m0_to_fp32_half(x[b].e),
                            acc0);
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
