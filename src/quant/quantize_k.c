// quantize_k.c: reference quantization to the K-quant formats q2_K, q3_K, q4_K, q5_K, q6_K.
//
// Every format goes the same three steps per 256-element super-block:
//   1. each sub-block (16 or 32 elements) gets a float scale, and a min for the affine
//      formats, from a small search that minimizes a weighted error (the fit_* functions);
//   2. the sub-block scales (and mins) are quantized to 4, 6 or 8 bits against the block's
//      fp16 super-scale(s): the largest maps to the top of the range;
//   3. the codes are recomputed against the scales as stored, so they match what dequantizes.
// The searches, weights and roundings are llama.cpp's (quantize_row_*_ref, which use its
// make_qkx2_quants / make_q3_quants / make_qx_quants), with every float operation in the same
// order, so the blocks written equal llama.cpp's bit for bit. Nothing allocates; the scratch
// of a row lives on the stack.
#include "quant.h"
#include "codec.h"
#include "fp16.h"
#include "../util/util.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

// Below this largest magnitude a sub-block counts as all zero.
#define GROUP_MAX_EPS 1e-15f

static inline int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

// The element of largest magnitude, with its sign (the first one on a tie); *amax gets its
// magnitude.
static float signed_absmax(const float *x, int n, float *amax) {
    float max = 0.0f, a = 0.0f;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > a) {
            a = ax;
            max = x[i];
        }
    }
    *amax = a;
    return max;
}

// ---------------------------------------------------------------------------------------------
// Sub-block fits

// How fit_affine searches: candidate inverse scales (nmax + rmin + rdelta * k) / (max - min)
// for k = 0..nstep, each followed by a weighted least-squares solve for scale and min.
typedef struct affine_search {
    float rmin;
    float rdelta;
    int nstep;
    bool use_mad; // minimize the weighted absolute error instead of the squared error
} affine_search;

// Fits x[i] ~ scale * L[i] - min with codes L[i] in 0..nmax and min >= 0 for n <= 32 elements
// weighted by w. Returns scale and stores min in *out_min; a sub-block of one constant c <= 0
// gets scale 0 and min -c. (llama.cpp's make_qkx2_quants.)
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *out_min,
                        affine_search p) {
    uint8_t Laux[32];
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0; // the min term only ever subtracts
    if (max == min) {
        memset(L, 0, (size_t)n);
        *out_min = -min;
        return 0.0f;
    }

    // Start from the plain range fit, then try the candidate scales.
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clamp_int(ft_nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = p.use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    for (int k = 0; k <= p.nstep; k++) {
        iscale = (p.rmin + p.rdelta * (float)k + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(ft_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        // Weighted least squares for (scale, min) given these codes.
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = p.use_mad ? fabsf(diff) : diff * diff;
                err += w[i] * diff;
            }
            if (err < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *out_min = -min;
    return scale;
}

// Fits x[i] ~ scale * (L[i] - nmax) with codes L[i] in 0..2*nmax-1, weighting each element by
// x[i]^2: starts from the scale that maps the largest element onto -nmax, then tries 18
// nearby ones and keeps the best least-squares scale. Returns scale; 0 for an all-zero
// sub-block (with all codes 0). (llama.cpp's make_qx_quants with rmse_type 1.)
static float fit_symmetric(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(ft_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)k) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(ft_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        // sumlx^2 / suml2 is the error reduction of the least-squares scale: larger is better
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(clamp_int(ft_nearest_int(iscale * x[i]), -nmax, nmax - 1) + nmax);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// As fit_symmetric's start (weights x[i]^2), then up to 5 passes of coordinate descent: each
// code moves to the value that is best for the least-squares scale of all the others, if that
// improves the fit. Codes end in 0..2*nmax-1. (llama.cpp's make_q3_quants with do_rmse.)
static float fit_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = (float)(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(ft_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int new_l = clamp_int(ft_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Packs 2-bit codes L[0..256) in the q2_K / q3_K plane layout: in each half of 128, byte l
// holds elements l, l+32, l+64, l+96 in bit pairs 0-1, 2-3, 4-5, 6-7.
static void pack_2bit_planes(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < QK_K; h += 128) {
        for (int l = 0; l < 32; l++) {
            qs[h / 4 + l] =
                (uint8_t)(L[h + l] | L[h + l + 32] << 2 | L[h + l + 64] << 4 | L[h + l + 96] << 6);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// q2_K: 16 sub-blocks of 16, 2-bit codes, 4-bit scales and mins.

void ft_quantize_row_q2_K_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    block_q2_K *y = vy;
    uint8_t L[QK_K];
    float weights[16], scales[QK_K / 16], mins[QK_K / 16];
    const affine_search search = {.rmin = -0.5f, .rdelta = 0.1f, .nstep = 15, .use_mad = true};

    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        block_q2_K *b = &y[i];
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_affine(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], search);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }

        memset(b->scales, 0, sizeof(b->scales));
        b->d = ft_fp32_to_fp16(0.0f);
        b->dmin = ft_fp32_to_fp16(0.0f);
        if (max_scale > 0) {
            const float iscale = 15.0f / max_scale;
            for (int j = 0; j < QK_K / 16; j++)
                b->scales[j] = (uint8_t)ft_nearest_int(iscale * scales[j]);
            b->d = ft_fp32_to_fp16(max_scale / 15.0f);
        }
        if (max_min > 0) {
            const float imin = 15.0f / max_min;
            for (int j = 0; j < QK_K / 16; j++)
                b->scales[j] |= (uint8_t)((unsigned)ft_nearest_int(imin * mins[j]) << 4);
            b->dmin = ft_fp32_to_fp16(max_min / 15.0f);
        }

        // Codes against the stored scales; a sub-block with scale 0 keeps its fitted codes.
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = ft_fp16_to_fp32(b->d) * (float)(b->scales[j] & 0xf);
            if (d == 0) continue;
            const float dm = ft_fp16_to_fp32(b->dmin) * (float)(b->scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clamp_int(ft_nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit_planes(L, b->qs);
    }
}

// ---------------------------------------------------------------------------------------------
// q3_K: 16 sub-blocks of 16, 3-bit codes (-4..3), 6-bit signed scales.

void ft_quantize_row_q3_K_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    block_q3_K *y = vy;
    int8_t L[QK_K];
    float scales[QK_K / 16];

    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        block_q3_K *b = &y[i];
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }

        // Scale j: low 4 bits in a nibble of byte j % 8, top 2 bits in byte 8 + j % 4.
        memset(b->scales, 0, sizeof(b->scales));
        if (max_scale != 0) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                int l = clamp_int(ft_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    b->scales[j] = (uint8_t)(l & 0xf);
                else
                    b->scales[j - 8] |= (uint8_t)((l & 0xf) << 4);
                b->scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            b->d = ft_fp32_to_fp16(1 / iscale);
        } else {
            b->d = ft_fp32_to_fp16(0.0f);
        }

        for (int j = 0; j < QK_K / 16; j++) {
            const float d = ft_fp16_to_fp32(b->d) * (float)ft_q3_K_scale(j, b->scales);
            if (d == 0) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clamp_int(ft_nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }

        // Bit 2 of code e goes to bit e / 32 of hmask[e % 32]; the low 2 bits to the planes.
        uint8_t low[QK_K];
        memset(b->hmask, 0, sizeof(b->hmask));
        for (int e = 0; e < QK_K; e++) {
            if (L[e] > 3) b->hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            low[e] = (uint8_t)(L[e] & 3);
        }
        pack_2bit_planes(low, b->qs);
    }
}

// ---------------------------------------------------------------------------------------------
// q4_K and q5_K: 8 sub-blocks of 32, 4- or 5-bit codes, 6-bit scales and mins.

// Steps 1 and 2 for q4_K / q5_K (codes 0..nmax): fits the sub-blocks of x, writes d, dmin and
// the packed scales, and leaves the final codes in L.
static void quantize_k4_scales(const float *x, int nmax, affine_search search, ft_half *d_out,
                               ft_half *dmin_out, uint8_t packed[K_SCALE_SIZE], uint8_t *L) {
    float weights[32], scales[QK_K / 32], mins[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        const float *xs = x + 32 * j;
        // weight each element by the sub-block's RMS plus its own magnitude
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            weights[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_affine(32, nmax, xs, weights, L + 32 * j, &mins[j], search);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }

    // Packing: see ft_k4_scale_min.
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < QK_K / 32; j++) {
        // a negative fitted scale wraps to a large byte and clamps to 63, as in llama.cpp
        uint8_t ls = (uint8_t)ft_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)ft_nearest_int(inv_min * mins[j]);
        ls = FT_MIN(63, ls);
        lm = FT_MIN(63, lm);
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xf) | (lm & 0xf) << 4);
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = ft_fp32_to_fp16(max_scale / 63.0f);
    *dmin_out = ft_fp32_to_fp16(max_min / 63.0f);

    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, m;
        ft_k4_scale_min(j, packed, &sc, &m);
        const float d = ft_fp16_to_fp32(*d_out) * (float)sc;
        if (d == 0) continue;
        const float dm = ft_fp16_to_fp32(*dmin_out) * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clamp_int(ft_nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void ft_quantize_row_q4_K_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    block_q4_K *y = vy;
    uint8_t L[QK_K];
    const affine_search search = {.rmin = -1.0f, .rdelta = 0.1f, .nstep = 20, .use_mad = false};
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k4_scales(x, 15, search, &y[i].d, &y[i].dmin, y[i].scales, L);
        // chunk c of 64: byte l holds element l (low nibble) and l + 32 (high nibble)
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + l + 32] << 4);
    }
}

void ft_quantize_row_q5_K_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    block_q5_K *y = vy;
    uint8_t L[QK_K];
    const affine_search search = {.rmin = -0.5f, .rdelta = 0.1f, .nstep = 15, .use_mad = false};
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k4_scales(x, 31, search, &y[i].d, &y[i].dmin, y[i].scales, L);
        // as q4_K for the low 4 bits; bit 4 of element l (l + 32) of chunk c goes to bit 2c
        // (2c + 1) of qh[l]
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = L[64 * c + l], hi = L[64 * c + l + 32];
                y[i].qs[32 * c + l] = (uint8_t)((lo & 0xf) | (hi & 0xf) << 4);
                y[i].qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// q6_K: 16 sub-blocks of 16, 6-bit codes (-32..31), 8-bit signed scales.

void ft_quantize_row_q6_K_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    block_q6_K *y = vy;
    int8_t L[QK_K];
    float scales[QK_K / 16];

    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        block_q6_K *b = &y[i];
        float max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(b, 0, sizeof(*b));
            continue;
        }

        const float iscale = -128.0f / max_scale;
        b->d = ft_fp32_to_fp16(1 / iscale);
        for (int j = 0; j < QK_K / 16; j++)
            b->scales[j] = (int8_t)FT_MIN(127, ft_nearest_int(iscale * scales[j]));

        for (int j = 0; j < QK_K / 16; j++) {
            const float d = ft_fp16_to_fp32(b->d) * (float)b->scales[j];
            if (d == 0) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clamp_int(ft_nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }

        // Per half of 128: ql byte l gets the low nibbles of elements l and l + 64, byte
        // l + 32 those of l + 32 and l + 96; qh byte l the top 2 bits of all four.
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = (uint8_t)Lh[l], q2 = (uint8_t)Lh[l + 32];
                const uint8_t q3 = (uint8_t)Lh[l + 64], q4 = (uint8_t)Lh[l + 96];
                ql[l] = (uint8_t)((q1 & 0xf) | (q3 & 0xf) << 4);
                ql[l + 32] = (uint8_t)((q2 & 0xf) | (q4 & 0xf) << 4);
                qh[l] = (uint8_t)(q1 >> 4 | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
            }
        }
    }
}
