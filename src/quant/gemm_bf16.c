// gemm_bf16.c: prefill's bf16 GEMM with AVX-512 BF16 (VDPBF16PS), for CPUs without AMX-BF16
// (see dot.h).
//
// Entered only through ft_quant_ops_find() after ops.c has seen the CPU support AVX512-BF16
// (with F, BW, VL, DQ). As the AMX bf16 GEMM: float sums in the instruction's order (each step
// adds two products to a float lane; inputs below FLT_MIN count as zero), not the reference's
// double sum, within n * 2^-24 * sum |x_i y_i| of it.
//
// Layout (as gemm_vnni.c): the 16 float lanes of a vector are 16 tokens. Per call the
// activations are packed once, per 16 tokens and per pair of elements: 64 bytes holding each
// token's pair in turn. A weight row's pair is broadcast straight from the row (bf16 needs no
// unpacking), ROWS rows per pass over a vector's packed pairs.
#include "dot.h"
#include "gemm_shared.h"
#include "quant.h"
#include "../util/util.h"

#include <immintrin.h>
#include <string.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

// LANES tokens per vector, ROWS weight rows per pass; a block of token vectors is packed to at
// most TOKEN_BLOCK_BYTES (L2). Any token count takes the vectors (a few tokens leave lanes
// idle): another path would sum in another order, and an output must not depend on how many
// tokens its call has.
enum { LANES = 16, ROWS = 8, TOKEN_BLOCK_BYTES = 512 << 10 };

bool ft_gemm_bf16_avx512_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bf16");
}

// Token vector [c0, c0 + 16) of y as (pair, token) words, zeros past nc.
static BF16_TARGET void pack_pairs(uint32_t *dst, const void *y, size_t by, int c0, int nc, int64_t np) {
    for (int l = 0; l < LANES; l++) {
        const int c = c0 + l;
        if (c >= nc) {
            for (int64_t k = 0; k < np; k++)
                dst[k * LANES + l] = 0;
            continue;
        }
        const uint32_t *src = (const uint32_t *)((const uint8_t *)y + (size_t)c * by);
        for (int64_t k = 0; k < np; k++) {
            uint32_t w;
            memcpy(&w, src + k, sizeof(w));
            dst[k * LANES + l] = w;
        }
    }
}

// The nr (1..ROWS) rows from x against one packed vector, into acc[0..nr).
static inline __attribute__((always_inline)) BF16_TARGET void
kernel_bf16(const uint8_t *x, size_t bx, int nr, const uint32_t *act, int64_t np, __m512 acc[ROWS]) {
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm512_setzero_ps();
    for (int64_t k = 0; k < np; k++) {
        const __m512bh a = (__m512bh)_mm512_loadu_si512((const void *)(act + k * LANES));
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) {
            if (r >= nr) break;
            int32_t w;
            memcpy(&w, x + (size_t)r * bx + (size_t)k * 4, sizeof(w));
            acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32(w), a);
        }
    }
}

BF16_TARGET void ft_gemm_bf16_avx512(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                     int nc, float *s, size_t ls) {
    if (n % 2) { // a property of the matrix, not of the call
        ft_vec_dot_tile_bf16_avx2(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    const int64_t np = n / 2;
    const int nv = (nc + LANES - 1) / LANES;
    const size_t vbytes = (size_t)np * LANES * 4;
    int nvb = (int)(TOKEN_BLOCK_BYTES / vbytes);
    nvb = nvb < 1 ? 1 : nvb > nv ? nv : nvb;
    uint8_t *p = ft_gemm_scratch((size_t)nvb * vbytes + 64);
    uint32_t *act = ft_gemm_carve(&p, (size_t)nvb * vbytes);
    for (int v0 = 0; v0 < nv; v0 += nvb) {
        const int v1 = v0 + nvb < nv ? v0 + nvb : nv;
        for (int v = v0; v < v1; v++)
            pack_pairs(act + (size_t)(v - v0) * np * LANES, y, by, v * LANES, nc, np);
        for (int r0 = 0; r0 < nr; r0 += ROWS) {
            const int mr = nr - r0 < ROWS ? nr - r0 : ROWS;
            const uint8_t *xr = (const uint8_t *)x + (size_t)r0 * bx;
            for (int v = v0; v < v1; v++) {
                __m512 acc[ROWS];
                if (mr == ROWS)
                    kernel_bf16(xr, bx, ROWS, act + (size_t)(v - v0) * np * LANES, np, acc);
                else
                    kernel_bf16(xr, bx, mr, act + (size_t)(v - v0) * np * LANES, np, acc);
                const int valid = nc - v * LANES < LANES ? nc - v * LANES : LANES;
                for (int r = 0; r < mr; r++) {
                    float t[LANES];
                    _mm512_storeu_ps(t, acc[r]);
                    for (int l = 0; l < valid; l++)
                        s[(size_t)(v * LANES + l) * ls + (size_t)(r0 + r)] = t[l];
                }
            }
        }
    }
}
