// dot_k_avx2.c: AVX2 dot products of the K-quants and iq4_xs with q8_K activations.
//
// Compiled for AVX2 + FMA + F16C and entered only through ft_quant_ops_find() after the CPUID
// check in ops.c. One 256-element super-block per iteration:
//   1. decode the sub-block scales into int16 lanes laid out for a byte shuffle to broadcast
//      one sub-block's scale (table k_bcast16);
//   2. per 32 weights: decode the codes to unsigned bytes, _mm256_maddubs_epi16 them with the
//      int8 activations (16 int16 pair sums; the largest, 2 * 63 * 127, cannot saturate), and
//      _mm256_madd_epi16 the pair sums with the scales, which both applies the scale and
//      widens to int32; the integer sums of a super-block are exact;
//   3. the offsets and mins (q2_K/q4_K/q5_K mins, q3_K's -4, q6_K's -32) never touch the codes:
//      they are a scale times the activation sums of 16 (bsums), one multiply-add per
//      super-block;
//   4. acc += d * float(int sums) in an 8-lane float vector; one horizontal sum at the end.
// Layout of the codes and scales: see the comments in dot_ref.c.
#include "dot.h"
#include "quant.h"
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

static inline __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

// Row j of this table, as a vpshufb control, copies int16 element j of each 128-bit lane to
// all 8 int16 elements of that lane.
#define BC2(j) 2 * (j), 2 * (j) + 1
#define BC8(j) BC2(j), BC2(j), BC2(j), BC2(j)
#define BC32(j) {BC8(j), BC8(j), BC8(j), BC8(j)}
_Alignas(32) static const uint8_t k_bcast16[8][32] = {
    BC32(0), BC32(1), BC32(2), BC32(3), BC32(4), BC32(5), BC32(6), BC32(7),
};
#undef BC2
#undef BC8
#undef BC32

// Element j of each lane of s, broadcast within the lane.
static inline __m256i bcast16(__m256i s, int j) {
    return _mm256_shuffle_epi8(s, load256(k_bcast16[j]));
}

// The 16 int8 scales of 16-element sub-blocks, widened to int16 with the even sub-blocks in
// the low lane and the odd ones in the high lane. The 32 weights at offset 32 * g cover
// sub-blocks 2g and 2g + 1, which maddubs leaves in the low and high lane: bcast16(s, g)
// gives each lane its scale.
static inline __m256i scales16_even_odd(__m128i sc8) {
    const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, even_odd));
}

// sum += (pair sums p16) * (scale lanes), widened to int32.
static inline __m256i madd_acc(__m256i sum, __m256i scale, __m256i p16) {
    return _mm256_add_epi32(sum, _mm256_madd_epi16(scale, p16));
}

// ---------------------------------------------------------------------------------------------
// q2_K: codes 0..3 in 2-bit fields; scale nibble and min nibble per 16 weights.

float ft_vec_dot_q2_K_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q2_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m15 = _mm_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = y[b].d * half(x[b].d);
        const float dmin = y[b].d * half(x[b].dmin);
        const __m128i sm = _mm_loadu_si128((const __m128i *)x[b].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m15));
        const __m256i msum = _mm256_madd_epi16(mins, load256(y[b].bsums));
        const __m256i scales = scales16_even_odd(_mm_and_si128(sm, m15));
        const int8_t *q8 = y[b].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q2 = load256(x[b].qs + 32 * h);
            __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(q2, m3), load256(q8));
            __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q2, 2), m3),
                                              load256(q8 + 32));
            __m256i p2 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q2, 4), m3),
                                              load256(q8 + 64));
            __m256i p3 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q2, 6), m3),
                                              load256(q8 + 96));
            sumi = madd_acc(sumi, bcast16(scales, 4 * h + 0), p0);
            sumi = madd_acc(sumi, bcast16(scales, 4 * h + 1), p1);
            sumi = madd_acc(sumi, bcast16(scales, 4 * h + 2), p2);
            sumi = madd_acc(sumi, bcast16(scales, 4 * h + 3), p3);
            q8 += 128;
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(msum), acc);
    }
    return hsum_ps(acc);
}

// ---------------------------------------------------------------------------------------------
// q3_K: the code is lo + 4 * hbit - 4 with lo in 2-bit fields and hbit in hmask. The kernel
// multiplies the unsigned lo + 4 * hbit (0..7) and subtracts 4 * scale * bsum per sub-block.

// The 16 signed scales (value - 32) as int8, in sub-block order.
static inline __m128i scales_q3_K(const uint8_t s[12]) {
    uint32_t hw;
    memcpy(&hw, s + 8, sizeof(hw));
    __m128i lo8 = _mm_loadl_epi64((const __m128i *)s);
    // bytes 0..7: low nibbles of s[0..7]; bytes 8..15: their high nibbles
    __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(lo8, _mm_srli_epi16(lo8, 4)), _mm_set1_epi8(0x0f));
    // byte j: bits 2(j/4)..2(j/4)+1 of s[8 + j % 4]
    __m128i hi = _mm_srlv_epi32(_mm_set1_epi32((int)hw), _mm_setr_epi32(0, 2, 4, 6));
    hi = _mm_and_si128(hi, _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

// 4 where bit `bit` of each byte of h is set, else 0. 16-bit shifts are safe: the mask keeps
// only a bit that came from the same byte.
static inline __m256i hbit_times4(__m256i h, int bit) {
    const __m256i m4 = _mm256_set1_epi8(4);
    if (bit <= 2) return _mm256_and_si256(_mm256_slli_epi16(h, 2 - bit), m4);
    return _mm256_and_si256(_mm256_srli_epi16(h, bit - 2), m4);
}

float ft_vec_dot_q3_K_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q3_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = y[b].d * half(x[b].d);
        const __m128i sc8 = scales_q3_K(x[b].scales);
        const __m256i scales = scales16_even_odd(sc8);
        // 4 * sum_j scale_j * bsum_j: the -4 of every code
        const __m256i offset = _mm256_slli_epi32(
            _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), load256(y[b].bsums)), 2);
        const __m256i hbits = load256(x[b].hmask);
        const int8_t *q8 = y[b].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i q3 = load256(x[b].qs + 32 * h);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q3, 2 * k), m3);
                __m256i code = _mm256_or_si256(lo, hbit_times4(hbits, 4 * h + k));
                __m256i p = _mm256_maddubs_epi16(code, load256(q8 + 32 * k));
                sumi = madd_acc(sumi, bcast16(scales, 4 * h + k), p);
            }
            q8 += 128;
        }
        sumi = _mm256_sub_epi32(sumi, offset);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

// ---------------------------------------------------------------------------------------------
// q4_K / q5_K: 8 sub-blocks of 32 with 6-bit scales and mins.

// The packed scales and mins as 16 bytes: bytes 0..7 the scales, 8..15 the mins. Reads 16
// bytes from s (the 12 scale bytes and the first 4 code bytes, which are ignored). As 32-bit
// words s0, s1, s2: scales 0..3 = s0 & 0x3f.., scales 4..7 = (s2 & 0x0f..) | top two bits of
// s0's bytes, mins 0..3 = s1 & 0x3f.., mins 4..7 = (s2 >> 4 & 0x0f..) | top two bits of s1's.
static inline __m128i scales_mins_k4(const uint8_t *s) {
    __m128i v = _mm_loadu_si128((const __m128i *)s);
    __m128i low = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); // s0 s2 s1 s2
    low = _mm_srlv_epi32(low, _mm_setr_epi32(0, 0, 0, 4));
    low = _mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i top = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); // s0 s0 s1 s1
    // bits 6..7 of each byte to bits 4..5, only in words 1 and 3
    top = _mm_and_si128(_mm_srli_epi32(top, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(low, top);
}

// Shared by q4_K and q5_K: exactly one of x4, x5 is non-NULL (a constant once inlined).
static inline __attribute__((always_inline)) float
dot_q45_K(int64_t n, const block_q4_K *x4, const block_q5_K *x5, const block_q8_K *y) {
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    const __m256i m16 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = y[b].d * half(x4 ? x4[b].d : x5[b].d);
        const float dmin = y[b].d * half(x4 ? x4[b].dmin : x5[b].dmin);
        const __m128i sm = scales_mins_k4(x4 ? x4[b].scales : x5[b].scales);
        // mins . (sums of 32 activations): bsums added in pairs
        const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[b].bsums),
                                          _mm_loadu_si128((const __m128i *)y[b].bsums + 1));
        const __m128i msum = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)), bs);
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(msum), accm);
        // the 8 scales as int16 in both lanes
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const uint8_t *qs = x4 ? x4[b].qs : x5[b].qs;
        const __m256i qh = x5 ? load256(x5[b].qh) : _mm256_setzero_si256();
        const int8_t *q8 = y[b].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m256i q4 = load256(qs + 32 * c);
            __m256i lo = _mm256_and_si256(q4, m15);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m15);
            if (x5) {
                // bit 2c (low nibbles) and 2c + 1 (high nibbles) of qh become bit 4
                __m256i hl = 2 * c <= 4 ? _mm256_slli_epi16(qh, 4 - 2 * c)
                                        : _mm256_srli_epi16(qh, 2 * c - 4);
                __m256i hh = 2 * c + 1 <= 4 ? _mm256_slli_epi16(qh, 3 - 2 * c)
                                            : _mm256_srli_epi16(qh, 2 * c - 3);
                lo = _mm256_or_si256(lo, _mm256_and_si256(hl, m16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(hh, m16));
            }
            __m256i pl = _mm256_maddubs_epi16(lo, load256(q8 + 64 * c));
            __m256i ph = _mm256_maddubs_epi16(hi, load256(q8 + 64 * c + 32));
            sumi = madd_acc(sumi, bcast16(scales, 2 * c), pl);
            sumi = madd_acc(sumi, bcast16(scales, 2 * c + 1), ph);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
    return hsum_ps(acc) - _mm_cvtss_f32(accm);
}

float ft_vec_dot_q4_K_avx2(int64_t n, const void *vx, const void *vy) {
    return dot_q45_K(n, vx, NULL, vy);
}

float ft_vec_dot_q5_K_avx2(int64_t n, const void *vx, const void *vy) {
    return dot_q45_K(n, NULL, vx, vy);
}

// ---------------------------------------------------------------------------------------------
// q6_K: unsigned 6-bit codes (value + 32) and int8 scales per 16; the -32 is subtracted as
// 32 * sum_j scale_j * bsum_j.

float ft_vec_dot_q6_K_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q6_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    const __m256i m48 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = y[b].d * half(x[b].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[b].scales);
        const __m256i scales = scales16_even_odd(sc8);
        const __m256i offset = _mm256_slli_epi32(
            _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), load256(y[b].bsums)), 5);
        const int8_t *q8 = y[b].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i l1 = load256(x[b].ql + 64 * h);
            const __m256i l2 = load256(x[b].ql + 64 * h + 32);
            const __m256i qh = load256(x[b].qh + 32 * h);
            // bits 2k..2k+1 of qh become bits 4..5 of code k
            __m256i c0 = _mm256_or_si256(_mm256_and_si256(l1, m15),
                                         _mm256_and_si256(_mm256_slli_epi16(qh, 4), m48));
            __m256i c1 = _mm256_or_si256(_mm256_and_si256(l2, m15),
                                         _mm256_and_si256(_mm256_slli_epi16(qh, 2), m48));
            __m256i c2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15),
                                         _mm256_and_si256(qh, m48));
            __m256i c3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15),
                                         _mm256_and_si256(_mm256_srli_epi16(qh, 2), m48));
            __m256i p0 = _mm256_maddubs_epi16(c0, load256(q8));
            __m256i p1 = _mm256_maddubs_epi16(c1, load256(q8 + 32));
            __m256i p2 = _mm256_maddubs_epi16(c2, load256(q8 + 64));
            __m256i p3 = _mm256_maddubs_epi16(c3, load256(q8 + 96));
            sumi = madd_acc(sumi, bcast16(scales, 4 * h + 0), p0);
            sumi = madd_acc(sumi, bcast16(scales, 4 * h + 1), p1);
            sumi = madd_acc(sumi, bcast16(scales, 4 * h + 2), p2);
            sumi = madd_acc(sumi, bcast16(scales, 4 * h + 3), p3);
            q8 += 128;
        }
        sumi = _mm256_sub_epi32(sumi, offset);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

// ---------------------------------------------------------------------------------------------
// iq4_xs: iq4_nl code book lookups, 8 sub-blocks of 32 with 6-bit scales offset by 32.

float ft_vec_dot_iq4_xs_avx2(int64_t n, const void *vx, const void *vy) {
    const block_iq4_xs *x = vx;
    const block_q8_K *y = vy;
    const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ft_kvalues_iq4nl));
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = half(x[b].d) * y[b].d;
        // scale ib: nibble ib of scales_l (as a 32-bit word), 2-bit field ib of scales_h
        uint32_t sl;
        memcpy(&sl, x[b].scales_l, sizeof(sl));
        __m256i lo = _mm256_srlv_epi32(_mm256_set1_epi32((int)sl),
                                       _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
        __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(x[b].scales_h),
                                       _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
        __m256i ls = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(15)),
                                     _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4));
        ls = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
        // int16 scales 0..7 in both lanes
        const __m256i scales = _mm256_permute4x64_epi64(_mm256_packs_epi32(ls, ls), 0x88);
        const uint8_t *qs = x[b].qs;
        const int8_t *q8 = y[b].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int ib = 0; ib < 8; ib++) {
            __m128i packed = _mm_loadu_si128((const __m128i *)(qs + 16 * ib));
            __m256i nib = _mm256_inserti128_si256(_mm256_castsi128_si256(packed),
                                                  _mm_srli_epi16(packed, 4), 1);
            __m256i code = _mm256_shuffle_epi8(book, _mm256_and_si256(nib, m15));
            __m256i q = load256(q8 + 32 * ib);
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(code, code), _mm256_sign_epi8(q, code));
            sumi = madd_acc(sumi, bcast16(scales, ib), p);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
