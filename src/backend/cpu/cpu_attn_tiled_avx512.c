// cpu_attn_tiled_avx512.c: the tiled prefill attention's kernel for AVX-512 (cpu_attn_tiled.h:
// the tiles and the item loop): cpu_attn_tiled_avx2.c's steps and arithmetic with 16 rows in
// each vector, so both give the same bits.
//
//   1. scores ST[k][r] = scale * sum_d K[k][d] qT[d][r], 4 keys x 64 rows per step;
//   2. the keys past a row's position or before its window masked to -inf; the block's maximum
//      per row; the row's sums rescaled by e^(old max - new max); P = e^(S - max), the
//      denominator += the sum of P over the keys;
//   3. accT[d][r] += sum_k V[k][d] P[k][r], 4 elements of the head x 64 rows per step.
#include "cpu_attn_tiled.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"))), \
                             apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#endif

#include "cpu_avx512.h"

enum { ROWS = CPU_ATTN_TILE_ROWS, KEYS = CPU_ATTN_TILE_KEYS, RV = ROWS / 16 };

// The register tiles' loops fully unrolled (their accumulators then stay in registers).
#if defined(__clang__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

// ST[k][r] = scale * K[k] . q_r for keys [0, nk), every row: K row-major (KEYS, hd) in f32,
// qT (hd, ROWS).
static void scores(const float *qT, const float *kb, int nk, int hd, float scale, float *ST) {
    const __m512 sc = _mm512_set1_ps(scale);
    int k = 0;
    for (; k + 4 <= nk; k += 4) {
        __m512 a[4][RV];
        UNROLL
        for (int j = 0; j < 4; j++)
            UNROLL
            for (int v = 0; v < RV; v++) a[j][v] = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++) {
            __m512 q[RV];
            UNROLL
            for (int v = 0; v < RV; v++) q[v] = _mm512_loadu_ps(qT + (size_t)d * ROWS + 16 * v);
            UNROLL
            for (int j = 0; j < 4; j++) {
                const __m512 kv = _mm512_set1_ps(kb[(size_t)(k + j) * hd + d]);
                UNROLL
                for (int v = 0; v < RV; v++) a[j][v] = _mm512_fmadd_ps(kv, q[v], a[j][v]);
            }
        }
        UNROLL
        for (int j = 0; j < 4; j++)
            UNROLL
            for (int v = 0; v < RV; v++) _mm512_storeu_ps(ST + (size_t)(k + j) * ROWS + 16 * v, _mm512_mul_ps(a[j][v], sc));
    }
    for (; k < nk; k++) {
        __m512 a[RV];
        UNROLL
        for (int v = 0; v < RV; v++) a[v] = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++) {
            const __m512 kv = _mm512_set1_ps(kb[(size_t)k * hd + d]);
            UNROLL
            for (int v = 0; v < RV; v++) a[v] = _mm512_fmadd_ps(kv, _mm512_loadu_ps(qT + (size_t)d * ROWS + 16 * v), a[v]);
        }
        UNROLL
        for (int v = 0; v < RV; v++) _mm512_storeu_ps(ST + (size_t)k * ROWS + 16 * v, _mm512_mul_ps(a[v], sc));
    }
}

// accT[d][r] += sum_k V[k][d] P[k][r] over keys [0, nk), every row: V row-major (KEYS, hd).
static void add_values(const float *PT, const float *vb, int nk, int hd, float *accT) {
    for (int d = 0; d < hd; d += 4) {
        __m512 a[4][RV];
        UNROLL
        for (int j = 0; j < 4; j++)
            UNROLL
            for (int v = 0; v < RV; v++) a[j][v] = _mm512_loadu_ps(accT + (size_t)(d + j) * ROWS + 16 * v);
        for (int k = 0; k < nk; k++) {
            __m512 p[RV];
            UNROLL
            for (int v = 0; v < RV; v++) p[v] = _mm512_loadu_ps(PT + (size_t)k * ROWS + 16 * v);
            UNROLL
            for (int j = 0; j < 4; j++) {
                const __m512 vv = _mm512_set1_ps(vb[(size_t)k * hd + d + j]);
                UNROLL
                for (int v = 0; v < RV; v++) a[j][v] = _mm512_fmadd_ps(vv, p[v], a[j][v]);
            }
        }
        UNROLL
        for (int j = 0; j < 4; j++)
            UNROLL
            for (int v = 0; v < RV; v++) _mm512_storeu_ps(accT + (size_t)(d + j) * ROWS + 16 * v, a[j][v]);
    }
}

// A tile's state: the common part, then per row (in vectors of 16) the running maximum and
// the softmax denominator, its position and its window's first key.
typedef struct {
    cpu_attn_tile t;
    __m512 M[RV], L[RV];
    __m512i qpos[RV], qlo[RV];
} tile_state;
_Static_assert(sizeof(tile_state) <= CPU_ATTN_TILE_STATE_BYTES, "the item loop's room for a tile");

// Starts a tile (its common part started): the rows' vectors (rows past nr see no key:
// position -1).
static void tile_start(cpu_attn_tile *t, const ft_attn_params *p) {
    tile_state *ts = (tile_state *)t;
    const int group = p->n_head / p->n_head_kv;
    for (int v = 0; v < RV; v++) {
        ts->M[v] = _mm512_set1_ps(-INFINITY);
        ts->L[v] = _mm512_setzero_ps();
        int32_t pos[16], lo[16];
        for (int i = 0; i < 16; i++) {
            int r = 16 * v + i;
            pos[i] = r < t->nr ? p->pos0 + t->t0 + r / group : -1;
            lo[i] = p->window > 0 ? pos[i] - p->window + 1 : INT32_MIN;
        }
        ts->qpos[v] = _mm512_loadu_si512(pos);
        ts->qlo[v] = _mm512_loadu_si512(lo);
    }
}

// The tile against keys k0 .. k0 + nk - 1 (kb, vb in f32): scores, masks, the online softmax,
// the values (ST: the block's scores, then P).
static void tile_block(cpu_attn_tile *t, const float *kb, const float *vb, int k0, int nk, int hd, float scale,
                       float *ST) {
    tile_state *ts = (tile_state *)t;
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    scores(t->qT, kb, nk, hd, scale, ST);
    for (int v = 0; v < RV; v++) {
        // the keys each row sees: [its window's start, its own position]
        __m512 bmax = neg_inf;
        for (int k = 0; k < nk; k++) {
            float *s = ST + (size_t)k * ROWS + 16 * v;
            const __m512i kp = _mm512_set1_epi32(k0 + k);
            const __mmask16 hide = _mm512_cmpgt_epi32_mask(kp, ts->qpos[v]) | _mm512_cmplt_epi32_mask(kp, ts->qlo[v]);
            const __m512 sv = _mm512_mask_mov_ps(_mm512_loadu_ps(s), hide, neg_inf);
            _mm512_storeu_ps(s, sv);
            bmax = _mm512_max_ps(bmax, sv);
        }
        const __m512 mx = _mm512_max_ps(ts->M[v], bmax);
        // e^(old - new): 1 where nothing is visible yet (both -inf), 0 from -inf
        const __mmask16 none = _mm512_cmp_ps_mask(mx, neg_inf, _CMP_EQ_OQ);
        const __m512 ms = _mm512_mask_mov_ps(exp16_nonpositive(_mm512_sub_ps(ts->M[v], mx)), none, one);
        ts->M[v] = mx;
        __m512 sum = _mm512_mul_ps(ts->L[v], ms);
        for (int d = 0; d < hd; d++) {
            float *a = t->accT + (size_t)d * ROWS + 16 * v;
            _mm512_storeu_ps(a, _mm512_mul_ps(_mm512_loadu_ps(a), ms));
        }
        for (int k = 0; k < nk; k++) {
            float *s = ST + (size_t)k * ROWS + 16 * v;
            const __m512 e = exp16_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s), mx));
            _mm512_storeu_ps(s, e);
            sum = _mm512_add_ps(sum, e);
        }
        ts->L[v] = sum;
    }
    add_values(ST, vb, nk, hd, t->accT);
}

static void tile_stats(const cpu_attn_tile *t, float *M, float *L) {
    const tile_state *ts = (const tile_state *)t;
    for (int v = 0; v < RV; v++) {
        _mm512_storeu_ps(M + 16 * v, ts->M[v]);
        _mm512_storeu_ps(L + 16 * v, ts->L[v]);
    }
}

bool cpu_attention_tiled_avx512(cpu_backend *c, const ft_attn_params *p) {
    static const cpu_attn_tiled_kernel k = {tile_start, tile_block, tile_stats};
    return cpu_attn_tiled_run(c, p, &k);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
