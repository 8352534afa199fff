// cpu_quant.c: quantizing activations the way llama.cpp's CPU backend does.
//
// llama.cpp quantizes matmul inputs (and q8_0 KV-cache rows) with its x86 SIMD routines, not
// its scalar reference: for q8_0 and q8_1 the inverse scale is 127 / amax (the reference uses
// 1 / (amax / 127), which differs in the last bit) and values round half to even (the
// reference rounds half away from zero). One code in a block off by one moves logits by about
// 1e-2 on our test models, so we reproduce that arithmetic here in plain C. Other formats
// (q8_K, f16, bf16, f32) use the reference arithmetic, as llama.cpp does; q8_K (every K-quant
// matvec's input) in AVX2 and f16 (KV rows) with F16C where the CPU has them, equal to the
// reference byte for byte.
#include "cpu_impl.h"
#include "../../quant/fp16.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include "cpu_avx2.h"
#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

void cpu_quantize_q8_scalar(const float *x, void *vy, int64_t n, bool with_sum) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
        int8_t *qs;
        if (with_sum) {
            block_q8_1 *y = (block_q8_1 *)vy + b;
            y->d = ft_fp32_to_fp16(d);
            qs = y->qs;
        } else {
            block_q8_0 *y = (block_q8_0 *)vy + b;
            y->d = ft_fp32_to_fp16(d);
            qs = y->qs;
        }
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            // round half to even, as _mm256_round_ps; what _mm256_cvtps_epi32 and the saturating
            // packs give beyond int8 (an all-denormal block makes 127 / amax infinite): -128 for
            // NaN and anything past int32, else the value clamped
            float v = nearbyintf(xb[i] * id);
            int c = v >= -2147483648.0f && v < 2147483648.0f ? (int)v : INT32_MIN;
            qs[i] = (int8_t)FT_MAX(-128, FT_MIN(127, c));
            sum += qs[i];
        }
        if (with_sum) ((block_q8_1 *)vy + b)->s = ft_fp32_to_fp16(d * (float)sum);
    }
}

// cpu_quantize_q8_scalar's steps, 8 floats at a time: the same amax (max of |x|), the same
// scalar d and 127 / amax, the same products rounded half to even, the codes packed in order.
__attribute__((target("avx2,fma"))) static void quantize_q8_avx2(const float *x, void *vy, int64_t n, bool with_sum) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(xb + 8 * k);
        // maxps keeps its second operand where one is NaN, as fmaxf skips NaN
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) m = _mm256_max_ps(_mm256_and_ps(v[k], abs_mask), m);
        const float amax = hmax8(m);
        const float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
        const __m256 s = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) { // clamped as the packs saturate, so the sum is the codes'
            q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            q[k] = _mm256_max_epi32(_mm256_min_epi32(q[k], _mm256_set1_epi32(127)), _mm256_set1_epi32(-128));
        }
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, order);
        int8_t *qs;
        if (with_sum) {
            block_q8_1 *y = (block_q8_1 *)vy + b;
            y->d = ft_fp32_to_fp16(d);
            qs = y->qs;
            __m256i t = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4e));
            t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xb1));
            y->s = ft_fp32_to_fp16(d * (float)_mm_cvtsi128_si32(t4));
        } else {
            block_q8_0 *y = (block_q8_0 *)vy + b;
            y->d = ft_fp32_to_fp16(d);
            qs = y->qs;
        }
        _mm256_storeu_si256((__m256i *)qs, p);
    }
}

// ft_quantize_row_q8_K_ref's steps, 8 floats at a time: the first element of largest
// magnitude sets iscale = -127 / it; each code is the low byte of min(127, nearest(iscale * x))
// with the reference's own rounding (adding 1.5 * 2^23, ties to even) and cast (the low byte,
// kept here by masking before the unsigned packs), so every input, NaN and infinities included,
// gives the reference's bytes; the sums of 16 codes add those bytes sign-extended back to int32.
__attribute__((target("avx2,fma"))) static void quantize_q8_K_avx2(const float *x, block_q8_K *y, int64_t n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i byte_mask = _mm256_set1_epi32(0xff), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        // maxps keeps its second operand where one is NaN, as the reference skips NaN; four
        // chains, so the loop is not one long dependency
        __m256 mc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int j = 0; j < QK_K; j += 32)
            for (int k = 0; k < 4; k++) mc[k] = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j + 8 * k), abs_mask), mc[k]);
        const __m256 m = _mm256_max_ps(_mm256_max_ps(mc[0], mc[1]), _mm256_max_ps(mc[2], mc[3]));
        const float amax = hmax8(m);
        float max = 0.0f; // the first element of that magnitude (none for an all-NaN block)
        const __m256 am = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask), am, _CMP_EQ_OQ));
            if (eq) {
                max = x[j + __builtin_ctz((unsigned)eq)];
                break;
            }
        }
        if (max == 0.0f) {
            memset(&y[b], 0, sizeof(y[b]));
            continue;
        }
        const float iscale = -127.0f / max;
        const __m256 s = _mm256_set1_ps(iscale), magic = _mm256_set1_ps(12582912.0f);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q[4], code[4];
            for (int k = 0; k < 4; k++) {
                __m256i bits = _mm256_castps_si256(_mm256_add_ps(_mm256_mul_ps(s, _mm256_loadu_ps(x + j + 8 * k)), magic));
                bits = _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
                bits = _mm256_min_epi32(bits, _mm256_set1_epi32(127));
                q[k] = _mm256_and_si256(bits, byte_mask);
                code[k] = _mm256_srai_epi32(_mm256_slli_epi32(bits, 24), 24); // the stored int8, widened
            }
            // unsigned packs of values 0..255 saturate nothing; the 32-bit groups come out as
            // q0 q1 q2 q3 (low halves) then the high halves, put back in order
            __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(y[b].qs + j), _mm256_permutevar8x32_epi32(p, order));
            // the sums of codes j..j+15 and j+16..j+31
            __m256i s01 = _mm256_hadd_epi32(_mm256_add_epi32(code[0], code[1]), _mm256_add_epi32(code[2], code[3]));
            s01 = _mm256_hadd_epi32(s01, s01); // per 128-bit lane: [g0 part, g1 part, ...]
            __m128i g = _mm_add_epi32(_mm256_castsi256_si128(s01), _mm256_extracti128_si256(s01, 1));
            y[b].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(g);
            y[b].bsums[j / 16 + 1] = (int16_t)_mm_extract_epi32(g, 1);
        }
        y[b].d = 1.0f / iscale;
    }
}

// f16 rows (the KV cache's) with F16C's round-to-nearest-even conversion, which is
// ft_fp32_to_fp16's for every number; NaN lanes take its canonical NaN (F16C keeps payload bits).
__attribute__((target("avx2,f16c"))) static void quantize_f16_f16c(const float *x, void *vy, int64_t n) {
    ft_half *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        int nan = _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        _mm_storeu_si128((__m128i *)(y + i), h);
        for (int k = 0; nan && k < 8; k++)
            if (nan >> k & 1) y[i + k] = ft_fp32_to_fp16(x[i + k]);
    }
    for (; i < n; i++) y[i] = ft_fp32_to_fp16(x[i]);
}

void cpu_quantize_row(enum ft_type vdt, const float *x, void *y, int64_t n) {
    if (vdt == FT_TYPE_Q8_0 || vdt == FT_TYPE_Q8_1) {
        if (cpu_has_avx2())
            quantize_q8_avx2(x, y, n, vdt == FT_TYPE_Q8_1);
        else
            cpu_quantize_q8_scalar(x, y, n, vdt == FT_TYPE_Q8_1);
    }
    else if (vdt == FT_TYPE_F16 && cpu_has_avx2())
        quantize_f16_f16c(x, y, n);
    else if (vdt == FT_TYPE_Q8_K && cpu_has_avx2()) {
        FT_ASSERT(n % QK_K == 0);
        quantize_q8_K_avx2(x, y, n);
    } else
        ft_quant_ops_find(vdt)->from_float_ref(x, y, n);
}
