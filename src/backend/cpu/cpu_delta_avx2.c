// cpu_delta_avx2.c: the fast path of the gated DeltaNet op (cpu_delta.c holds the reference).
//
// Same steps as the reference, reorganised for 8-lane FMAs:
//   1. the conv runs token by token over a block of 8 channels, the block's taps held in
//      registers (the reference walks each channel's tokens with a stride of a whole row);
//      the L2 norms sum their squares in f32 lanes (the reference in double);
//   2. the delta rule takes four state rows at a time: one pass decays them and dots them with
//      k, the second adds k·d and dots the new rows with q, so k and q are loaded once per four
//      rows and each row twice per token (the reference passes over the whole matrix four
//      times). Rows are independent within a token, which is what makes this order legal.
// Both change summation orders (the sums are split over lanes), not the roundings' meaning:
// the differential test (tests/test_cpu_delta.c) bounds the difference.
#include "cpu_impl.h"

#include <immintrin.h>
#include <math.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma")
#endif

#include "cpu_avx2.h"

bool cpu_delta_fast_fits(int head_dim, int d_conv) {
    return head_dim % 8 == 0 && d_conv >= 1 && d_conv <= CPU_DELTA_MAX_CONV;
}

void cpu_delta_conv_avx2(const float *qkv, const float *hist, bool fresh, const float *w, int C, int K,
                         int n_tok, int c0, int c1, float *out) {
    for (int c = c0; c < c1; c += 8) {
        __m256 taps[CPU_DELTA_MAX_CONV];
        for (int i = 0; i < K; i++)
            taps[i] = _mm256_setr_ps(w[(size_t)c * K + i], w[(size_t)(c + 1) * K + i],
                                     w[(size_t)(c + 2) * K + i], w[(size_t)(c + 3) * K + i],
                                     w[(size_t)(c + 4) * K + i], w[(size_t)(c + 5) * K + i],
                                     w[(size_t)(c + 6) * K + i], w[(size_t)(c + 7) * K + i]);
        for (int t = 0; t < n_tok; t++) {
            __m256 sum = _mm256_setzero_ps();
            for (int i = 0; i < K; i++) {
                int row = t + i; // in concat(state (K - 1 rows), qkv), as the reference
                __m256 x = row < K - 1
                               ? (fresh ? _mm256_setzero_ps() : _mm256_loadu_ps(hist + (size_t)row * C + c))
                               : _mm256_loadu_ps(qkv + (size_t)(row - (K - 1)) * C + c);
                sum = _mm256_fmadd_ps(x, taps[i], sum);
            }
            float s[8], *o = out + (size_t)t * C + c;
            _mm256_storeu_ps(s, sum);
            for (int l = 0; l < 8; l++)
                o[l] = cpu_silu(s[l]);
        }
    }
}

void cpu_delta_l2norm_avx2(float *x, int hd, float eps) {
    __m256 ss = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        ss = _mm256_fmadd_ps(v, v, ss);
    }
    __m256 scale = _mm256_set1_ps(1.0f / fmaxf(sqrtf(hsum8(ss)), eps));
    for (int i = 0; i < hd; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), scale));
}

void cpu_delta_rule_avx2(float *S, int hd, const float *q, const float *k, const float *v, float decay,
                         float b, float *o, float scale) {
    const __m256 dv = _mm256_set1_ps(decay);
    for (int r = 0; r < hd; r += 4) {
        float *s0 = S + (size_t)r * hd, *s1 = s0 + hd, *s2 = s1 + hd, *s3 = s2 + hd;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < hd; j += 8) {
            __m256 kj = _mm256_loadu_ps(k + j);
            a0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(s0 + j), dv), kj, a0);
            a1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(s1 + j), dv), kj, a1);
            a2 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(s2 + j), dv), kj, a2);
            a3 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(s3 + j), dv), kj, a3);
        }
        __m256 d0 = _mm256_set1_ps((v[r] - hsum8(a0)) * b), d1 = _mm256_set1_ps((v[r + 1] - hsum8(a1)) * b),
               d2 = _mm256_set1_ps((v[r + 2] - hsum8(a2)) * b),
               d3 = _mm256_set1_ps((v[r + 3] - hsum8(a3)) * b);
        a0 = a1 = a2 = a3 = _mm256_setzero_ps();
        for (int j = 0; j < hd; j += 8) {
            __m256 kj = _mm256_loadu_ps(k + j), qj = _mm256_loadu_ps(q + j);
            __m256 n0 = _mm256_fmadd_ps(kj, d0, _mm256_mul_ps(_mm256_loadu_ps(s0 + j), dv));
            __m256 n1 = _mm256_fmadd_ps(kj, d1, _mm256_mul_ps(_mm256_loadu_ps(s1 + j), dv));
            __m256 n2 = _mm256_fmadd_ps(kj, d2, _mm256_mul_ps(_mm256_loadu_ps(s2 + j), dv));
            __m256 n3 = _mm256_fmadd_ps(kj, d3, _mm256_mul_ps(_mm256_loadu_ps(s3 + j), dv));
            _mm256_storeu_ps(s0 + j, n0);
            _mm256_storeu_ps(s1 + j, n1);
            _mm256_storeu_ps(s2 + j, n2);
            _mm256_storeu_ps(s3 + j, n3);
            a0 = _mm256_fmadd_ps(n0, qj, a0);
            a1 = _mm256_fmadd_ps(n1, qj, a1);
            a2 = _mm256_fmadd_ps(n2, qj, a2);
            a3 = _mm256_fmadd_ps(n3, qj, a3);
        }
        o[r] = hsum8(a0) * scale;
        o[r + 1] = hsum8(a1) * scale;
        o[r + 2] = hsum8(a2) * scale;
        o[r + 3] = hsum8(a3) * scale;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
