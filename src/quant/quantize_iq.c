// quantize_iq.c: reference quantization to the code-book formats iq4_nl, iq4_xs and mxfp4.
//
// Their codes index a fixed table of 16 levels (tables.h) instead of being evenly spaced, so
// quantizing an element means finding the nearest level to x / scale. iq4_nl and iq4_xs share a
// per-32-element scale fit (fit_iq4); mxfp4 takes a power-of-two scale from the block maximum.
// All three follow llama.cpp's quantize_row_*_ref operation for operation, so the blocks
// written equal llama.cpp's bit for bit (one exception, at ft_quantize_row_iq4_nl_ref). Nothing
// allocates.
#include "quant.h"
#include "codec.h"
#include "fp16.h"
#include "tables.h"
#include "../util/util.h"

#include <math.h>
#include <string.h>

#define GROUP_MAX_EPS 1e-15f

// Index of the iq4 level nearest to x (levels ascending; the upper one on a tie).
static int iq4_nearest(float x) {
    const int8_t *v = ft_kvalues_iq4nl;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15; // v[lo] < x < v[hi]
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < v[mid])
            hi = mid;
        else
            lo = mid;
    }
    return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

// Fits the 32 elements x to d * kvalues_iq4nl[L[j]], weighting each by x[j]^2: starts from the
// scale that maps the largest element onto the end level -127, then (for ntry > 0) tries the
// 2*ntry+1 scales mapping it onto -127 + k, keeping the least-squares scale of the best. Returns
// d (0 for an all-zero block, whose L is then left as it was). (llama.cpp's
// quantize_row_iq4_nl_impl, per 32 elements, with no importance weights.)
static float fit_iq4(const float *x, int ntry, uint8_t L[32]) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (amax < GROUP_MAX_EPS) return 0.0f;

    const float v0 = (float)ft_kvalues_iq4nl[0];
    float d = ntry > 0 ? -max / v0 : max / v0;
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = iq4_nearest(id * x[j]);
        L[j] = (uint8_t)l;
        float q = (float)ft_kvalues_iq4nl[l], w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int k = -ntry; k <= ntry; k++) {
        id = (float)(k + ft_kvalues_iq4nl[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = (float)ft_kvalues_iq4nl[iq4_nearest(id * x[j])], w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        // sumqx^2 / sumq2 is the error reduction of the least-squares scale: larger is better
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// Packs 32 codes in q4_0's nibble order: byte j holds element j low, element j + 16 high.
static void pack_nibbles(const uint8_t L[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

// One step of the fit only (llama.cpp's reference passes ntry = -1): d is the least-squares
// scale of the codes nearest at the scale -max / 127. Not bit-identical in one case: for an
// all-zero block (largest magnitude below 1e-15) llama.cpp writes d = 0 and leaves its codes
// as whatever its scratch held; here they are all 8 (the level nearest 0). Both decode to 0.
void ft_quantize_row_iq4_nl_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK4_NL == 0);
    block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
        uint8_t L[QK4_NL];
        memset(L, 8, sizeof(L));
        y[i].d = ft_fp32_to_fp16(fit_iq4(x, -1, L));
        pack_nibbles(L, y[i].qs);
    }
}

// Per 256: each sub-block of 32 fitted with 7 tries each way; the super-scale is
// d = -max_scale / 32 (max_scale the sub-block scale of largest magnitude, with its sign), the
// 6-bit sub-scales are round(scale / d) + 32, and the codes are recomputed against d * (ls - 32)
// with d still in float (not the fp16 it is stored as).
void ft_quantize_row_iq4_xs_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK_K == 0);
    block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        block_iq4_xs *b = &y[i];
        float scales[QK_K / 32];
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint8_t unused[32];
            scales[ib] = fit_iq4(x + 32 * ib, 7, unused);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }

        const float d = -max_scale / 32;
        const float id = d != 0 ? 1 / d : 0.0f;
        b->d = ft_fp32_to_fp16(d);
        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof(b->scales_l));
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int l = FT_MAX(-32, FT_MIN(31, ft_nearest_int(id * scales[ib])));
            const float dl = d * (float)l;
            const float idl = dl != 0 ? 1 / dl : 0.0f;
            uint8_t L[32];
            for (int j = 0; j < 32; j++)
                L[j] = (uint8_t)iq4_nearest(idl * x[32 * ib + j]);
            pack_nibbles(L, b->qs + 16 * ib);
            const int ls = l + 32;
            b->scales_l[ib / 2] |= (uint8_t)((ls & 0xf) << (4 * (ib % 2)));
            b->scales_h |= (uint16_t)((ls >> 4) << (2 * ib));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mxfp4

// Index of the mxfp4 level (times the half-scale d) nearest to x: the first one on a tie, so
// 0 is code 0, never the negative zero code 8.
static int mxfp4_nearest(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)ft_kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf((float)ft_kvalues_mxfp4[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

// The shared exponent puts the block maximum in [4, 8) times 2^(e - 127), so it lands between
// the two largest E2M1 magnitudes (4 and 6, doubled in the table). e comes from
// floorf(log2f(amax)) as in llama.cpp, libm's log2f included, so that a maximum just below a
// power of two gets the same exponent. Exponents outside 0..255 (amax below 2^-125, or
// infinite) wrap modulo 256 as llama.cpp's conversion does on x86.
void ft_quantize_row_mxfp4_ref(const float *x, void *vy, int64_t n) {
    FT_ASSERT(n % QK_MXFP4 == 0);
    block_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
        float amax = 0;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        const uint8_t e = amax > 0 ? (uint8_t)ft_trunc_int(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = ft_e8m0_to_fp32_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            y[i].qs[j] = (uint8_t)(mxfp4_nearest(x[j], d) | mxfp4_nearest(x[j + QK_MXFP4 / 2], d) << 4);
        }
    }
}
