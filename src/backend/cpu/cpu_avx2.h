// cpu_avx2.h: small AVX2 helpers the CPU backend's AVX2 code shares. Include it after a target
// pragma (avx2; cpu_quant.c's covers the include alone), so that these functions are compiled
// for AVX2 too.
#ifndef FT_CPU_AVX2_H
#define FT_CPU_AVX2_H

#include <immintrin.h>

// The sum of the 8 lanes.
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// The largest of the 8 lanes (none NaN).
static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// e^x for x <= 0 (-inf and NaN give 0) in 8 lanes: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by Cephes'
// polynomial (about 1 ulp), times 2^n from the exponent bits; below -87 (where e^x leaves the
// normal floats) 0.
static inline __m256 exp8_nonpositive(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    const __m256 zero_mask = _mm256_cmp_ps(x, lo, _CMP_GE_OQ); // false for -inf, NaN and tiny
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), zero_mask);
}

#endif
