// cpu_attn_tiled_avx2.c: the tiled prefill attention's kernel for AVX2 (cpu_attn_tiled.h: the
// tiles and the item loop), over an f16 cache in blocks, for batches of FT_ATTN_TILED_MIN_TOK
// queries or more (llama.cpp's tiled path: scores and sums in f32); and the blocks' loading,
// which both kernels use.
//
// A tile's queries are transposed (qT: head_dim x ROWS), so every step is a broadcast of one key
// or value element times a vector of 8 rows, with no horizontal sums. Per block of KEYS keys:
//   1. scores ST[k][r] = scale * sum_d K[k][d] qT[d][r], 4 keys x 16 rows per step;
//   2. the keys past a row's position or before its window masked to -inf by a compare of
//      the key's position with the rows' positions; the block's maximum per row is a running
//      vector maximum over its keys; a row's sum of values and denominator are multiplied by
//      e^(old max - new max) (exactly 1 where the maximum did not move), then
//      P = e^(S - max), the denominator += the sum of P over the keys;
//   3. accT[d][r] += sum_k V[k][d] P[k][r], 4 elements of the head x 16 rows per step;
// after the last block, each row's attention sink where there are sinks (cpu_attn_sink).
// Each lane's arithmetic is its own row's, in key order within blocks that start at multiples
// of KEYS, so a row's result does not depend on the tile (or call) that holds it, and it is
// the AVX-512 kernel's (cpu_attn_tiled_avx512.c: the same operations in 16 lanes) to the bit.
#include "cpu_attn_tiled.h"
#include "../../quant/fp16.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

#include "cpu_avx2.h"

enum { ROWS = CPU_ATTN_TILE_ROWS, KEYS = CPU_ATTN_TILE_KEYS, RV = ROWS / 8 };
_Static_assert(RV % 2 == 0, "the register tiles take rows 16 at a time");

// The register tiles' loops fully unrolled (their accumulators then stay in registers).
#if defined(__clang__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

// ST[k][r] = scale * K[k] . q_r for keys [0, nk), every row: K row-major (KEYS, hd) in f32,
// qT (hd, ROWS). 4 keys x 2 vectors of rows a step: 8 accumulators in 16 registers.
static void scores(const float *qT, const float *kb, int nk, int hd, float scale, float *ST) {
    const __m256 sc = _mm256_set1_ps(scale);
    int k = 0;
    for (; k + 4 <= nk; k += 4)
        for (int v0 = 0; v0 < RV; v0 += 2) {
            __m256 a[4][2];
            UNROLL
            for (int j = 0; j < 4; j++)
                UNROLL
                for (int v = 0; v < 2; v++) a[j][v] = _mm256_setzero_ps();
            for (int d = 0; d < hd; d++) {
                const float *qd = qT + (size_t)d * ROWS + 8 * v0;
                const __m256 q0 = _mm256_loadu_ps(qd), q1 = _mm256_loadu_ps(qd + 8);
                UNROLL
                for (int j = 0; j < 4; j++) {
                    const __m256 kv = _mm256_broadcast_ss(kb + (size_t)(k + j) * hd + d);
                    a[j][0] = _mm256_fmadd_ps(kv, q0, a[j][0]);
                    a[j][1] = _mm256_fmadd_ps(kv, q1, a[j][1]);
                }
            }
            UNROLL
            for (int j = 0; j < 4; j++)
                UNROLL
                for (int v = 0; v < 2; v++)
                    _mm256_storeu_ps(ST + (size_t)(k + j) * ROWS + 8 * (v0 + v), _mm256_mul_ps(a[j][v], sc));
        }
    for (; k < nk; k++)
        for (int v0 = 0; v0 < RV; v0 += 2) {
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            for (int d = 0; d < hd; d++) {
                const float *qd = qT + (size_t)d * ROWS + 8 * v0;
                const __m256 kv = _mm256_broadcast_ss(kb + (size_t)k * hd + d);
                a0 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(qd), a0);
                a1 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(qd + 8), a1);
            }
            _mm256_storeu_ps(ST + (size_t)k * ROWS + 8 * v0, _mm256_mul_ps(a0, sc));
            _mm256_storeu_ps(ST + (size_t)k * ROWS + 8 * v0 + 8, _mm256_mul_ps(a1, sc));
        }
}

// accT[d][r] += sum_k V[k][d] P[k][r] over keys [0, nk), every row: V row-major (KEYS, hd).
// 4 elements of the head x 2 vectors of rows a step.
static void add_values(const float *PT, const float *vb, int nk, int hd, float *accT) {
    for (int d = 0; d < hd; d += 4)
        for (int v0 = 0; v0 < RV; v0 += 2) {
            __m256 a[4][2];
            UNROLL
            for (int j = 0; j < 4; j++)
                UNROLL
                for (int v = 0; v < 2; v++) a[j][v] = _mm256_loadu_ps(accT + (size_t)(d + j) * ROWS + 8 * (v0 + v));
            for (int k = 0; k < nk; k++) {
                const float *pk = PT + (size_t)k * ROWS + 8 * v0;
                const __m256 p0 = _mm256_loadu_ps(pk), p1 = _mm256_loadu_ps(pk + 8);
                UNROLL
                for (int j = 0; j < 4; j++) {
                    const __m256 vv = _mm256_broadcast_ss(vb + (size_t)k * hd + d + j);
                    a[j][0] = _mm256_fmadd_ps(vv, p0, a[j][0]);
                    a[j][1] = _mm256_fmadd_ps(vv, p1, a[j][1]);
                }
            }
            UNROLL
            for (int j = 0; j < 4; j++)
                UNROLL
                for (int v = 0; v < 2; v++) _mm256_storeu_ps(accT + (size_t)(d + j) * ROWS + 8 * (v0 + v), a[j][v]);
        }
}

// An f16 row of hd (a multiple of 8) to f32.
static inline void row_to_f32(const uint8_t *src, float *dst, int hd) {
    for (int d = 0; d < hd; d += 8)
        _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * (size_t)d))));
}

void cpu_attn_tiled_load_block(const ft_attn_params *p, int hk, int k0, int nk, float *kb, float *vb, int64_t *off,
                               int64_t *walked) {
    const int hd = p->head_dim;
    const size_t krow = ft_row_bytes(p->k_cache->type, hd), vrow = ft_row_bytes(p->v_cache->type, hd);
    for (int i = 0; i < nk; i++) {
        size_t row = (size_t)ft_kv_row_walk(p->blocks, k0 + i, off, walked);
        row_to_f32((const uint8_t *)p->k_cache->data + row * p->k_cache->row_bytes + hk * krow, kb + (size_t)i * hd,
                   hd);
        row_to_f32((const uint8_t *)p->v_cache->data + row * p->v_cache->row_bytes + hk * vrow, vb + (size_t)i * hd,
                   hd);
    }
}

// A tile's state: the common part, then per row (in vectors of 8) the running maximum and
// the softmax denominator, its position and its window's first key.
typedef struct {
    cpu_attn_tile t;
    __m256 M[RV], L[RV];
    __m256i qpos[RV], qlo[RV];
} tile_state;
_Static_assert(sizeof(tile_state) <= CPU_ATTN_TILE_STATE_BYTES, "the item loop's room for a tile");

// Starts a tile (its common part started): the rows' vectors (rows past nr see no key:
// position -1).
static void tile_start(cpu_attn_tile *t, const ft_attn_params *p) {
    tile_state *ts = (tile_state *)t;
    const int group = p->n_head / p->n_head_kv;
    for (int v = 0; v < RV; v++) {
        ts->M[v] = _mm256_set1_ps(-INFINITY);
        ts->L[v] = _mm256_setzero_ps();
        int32_t pos[8], lo[8];
        for (int i = 0; i < 8; i++) {
            int r = 8 * v + i;
            pos[i] = r < t->nr ? p->pos0 + t->t0 + r / group : -1;
            lo[i] = p->window > 0 ? pos[i] - p->window + 1 : INT32_MIN;
        }
        ts->qpos[v] = _mm256_loadu_si256((const __m256i *)pos);
        ts->qlo[v] = _mm256_loadu_si256((const __m256i *)lo);
    }
}

// The tile against keys k0 .. k0 + nk - 1 (kb, vb in f32): scores, masks, the online softmax,
// the values (ST: the block's scores, then P).
static void tile_block(cpu_attn_tile *t, const float *kb, const float *vb, int k0, int nk, int hd, float scale,
                       float *ST) {
    tile_state *ts = (tile_state *)t;
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY), one = _mm256_set1_ps(1.0f);
    scores(t->qT, kb, nk, hd, scale, ST);
    for (int v = 0; v < RV; v++) {
        // the keys each row sees: [its window's start, its own position]
        __m256 bmax = neg_inf;
        for (int k = 0; k < nk; k++) {
            float *s = ST + (size_t)k * ROWS + 8 * v;
            const __m256i kp = _mm256_set1_epi32(k0 + k);
            const __m256i hide = _mm256_or_si256(_mm256_cmpgt_epi32(kp, ts->qpos[v]), _mm256_cmpgt_epi32(ts->qlo[v], kp));
            const __m256 sv = _mm256_blendv_ps(_mm256_loadu_ps(s), neg_inf, _mm256_castsi256_ps(hide));
            _mm256_storeu_ps(s, sv);
            bmax = _mm256_max_ps(bmax, sv);
        }
        const __m256 mx = _mm256_max_ps(ts->M[v], bmax);
        // e^(old - new): 1 where nothing is visible yet (both -inf), 0 from -inf
        const __m256 none = _mm256_cmp_ps(mx, neg_inf, _CMP_EQ_OQ);
        const __m256 ms = _mm256_blendv_ps(exp8_nonpositive(_mm256_sub_ps(ts->M[v], mx)), one, none);
        ts->M[v] = mx;
        __m256 sum = _mm256_mul_ps(ts->L[v], ms);
        for (int d = 0; d < hd; d++) {
            float *a = t->accT + (size_t)d * ROWS + 8 * v;
            _mm256_storeu_ps(a, _mm256_mul_ps(_mm256_loadu_ps(a), ms));
        }
        for (int k = 0; k < nk; k++) {
            float *s = ST + (size_t)k * ROWS + 8 * v;
            const __m256 e = exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s), mx));
            _mm256_storeu_ps(s, e);
            sum = _mm256_add_ps(sum, e);
        }
        ts->L[v] = sum;
    }
    add_values(ST, vb, nk, hd, t->accT);
}

static void tile_stats(const cpu_attn_tile *t, float *M, float *L) {
    const tile_state *ts = (const tile_state *)t;
    for (int v = 0; v < RV; v++) {
        _mm256_storeu_ps(M + 8 * v, ts->M[v]);
        _mm256_storeu_ps(L + 8 * v, ts->L[v]);
    }
}

bool cpu_attention_tiled(cpu_backend *c, const ft_attn_params *p) {
    static const cpu_attn_tiled_kernel k = {tile_start, tile_block, tile_stats};
    return cpu_attn_tiled_run(c, p, &k);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
