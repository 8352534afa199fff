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

#endif
