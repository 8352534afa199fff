// cpu_attn_tiled_avx2.c: prefill attention over an f16 cache in blocks, for batches of
// FT_ATTN_TILED_MIN_TOK queries or more (llama.cpp's tiled path: scores and sums in f32).
//
// One tile is up to ROWS rows: every query head of one KV head's group for each of a run of
// query tokens. Its queries are transposed once (qT: head_dim x ROWS), so every step is a
// broadcast of one key or value element times a vector of 8 rows, with no horizontal sums.
// Per block of KEYS keys (gathered through the block table and converted to f32 once for all
// the tiles of an item):
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
// An item is up to CPU_ATTN_TILE_GROUP tiles of one KV head; items go to threads round-robin
// in token order, which balances the causal triangle.
#include "cpu_impl.h"
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

// (the AVX-512 kernel uses the same workspace: CPU_ATTN_TILE_GROUP tiles' queries and sums)
size_t cpu_attn_tiled_ws_floats(int head_dim) {
    return (size_t)ROWS * head_dim * 2 * CPU_ATTN_TILE_GROUP + (size_t)KEYS * head_dim * 2 + (size_t)ROWS * KEYS + 64;
}

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

typedef struct {
    cpu_backend *c;
    const ft_attn_params *p;
    int tile_tok; // query tokens per tile
    int group;    // tiles per item (at most CPU_ATTN_TILE_GROUP), all of one KV head
} tiled_job;

// One tile's queries, sums and softmax state.
typedef struct {
    float *qT, *accT;            // (hd, ROWS) each
    __m256 M[RV], L[RV];         // per row: the running maximum and the softmax denominator
    __m256i qpos[RV], qlo[RV];   // per row: its position, its window's first key
    int t0, nr, first_key, last; // first token, rows, the first block's key, the last key seen
} tile_state;

// Starts tile t0 .. t0 + nt - 1 of KV head hk: its rows' queries transposed into qT (rows
// past nr zero, seeing no key: position -1), sums zero.
static void tile_start(tile_state *ts, const ft_attn_params *p, int hk, int t0, int nt) {
    const int hd = p->head_dim, group = p->n_head / p->n_head_kv;
    ts->t0 = t0;
    ts->nr = nt * group;
    // row tl * group + g: token t0 + tl, query head hk * group + g
    for (int r = 0; r < ROWS; r++) {
        const float *q = r < ts->nr ? p->q + ((size_t)(t0 + r / group) * p->n_head + (size_t)hk * group + r % group) * hd
                                    : NULL;
        for (int d = 0; d < hd; d++) ts->qT[(size_t)d * ROWS + r] = q ? q[d] : 0.0f;
    }
    memset(ts->accT, 0, (size_t)ROWS * hd * sizeof(float));
    for (int v = 0; v < RV; v++) {
        ts->M[v] = _mm256_set1_ps(-INFINITY);
        ts->L[v] = _mm256_setzero_ps();
        int32_t pos[8], lo[8];
        for (int i = 0; i < 8; i++) {
            int r = 8 * v + i;
            pos[i] = r < ts->nr ? p->pos0 + t0 + r / group : -1;
            lo[i] = p->window > 0 ? pos[i] - p->window + 1 : INT32_MIN;
        }
        ts->qpos[v] = _mm256_loadu_si256((const __m256i *)pos);
        ts->qlo[v] = _mm256_loadu_si256((const __m256i *)lo);
    }
    ts->first_key = cpu_attn_tiled_first_key(p, p->pos0 + t0);
    ts->last = p->pos0 + t0 + nt - 1;
}

// The tile against keys k0 .. k0 + nk - 1 (kb, vb in f32): scores, masks, the online softmax,
// the values (ST: the block's scores, then P).
static void tile_block(tile_state *ts, const float *kb, const float *vb, int k0, int nk, int hd, float scale,
                       float *ST) {
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY), one = _mm256_set1_ps(1.0f);
    scores(ts->qT, kb, nk, hd, scale, ST);
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
            float *a = ts->accT + (size_t)d * ROWS + 8 * v;
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
    add_values(ST, vb, nk, hd, ts->accT);
}

// The tile's rows of the output: the sums over the denominator (and the head's sink).
static void tile_finish(const tile_state *ts, const ft_attn_params *p, int hk, const float *sinks) {
    const int hd = p->head_dim, group = p->n_head / p->n_head_kv;
    float Ms[ROWS], Ls[ROWS], row[1024]; // (hd <= 1024)
    for (int v = 0; v < RV; v++) {
        _mm256_storeu_ps(Ms + 8 * v, ts->M[v]);
        _mm256_storeu_ps(Ls + 8 * v, ts->L[v]);
    }
    for (int r = 0; r < ts->nr; r++) {
        for (int d = 0; d < hd; d++) row[d] = ts->accT[(size_t)d * ROWS + r];
        if (sinks) cpu_attn_sink(sinks[hk * group + r % group], Ms[r], &Ls[r], row, hd);
        const float inv = Ls[r] == 0.0f ? 0.0f : 1.0f / Ls[r];
        float *o = p->out + ((size_t)(ts->t0 + r / group) * p->n_head + (size_t)hk * group + r % group) * hd;
        for (int d = 0; d < hd; d++) o[d] = row[d] * inv;
    }
}

// An item: j->group consecutive tiles of one KV head. Each block of keys any of them sees is
// converted once and taken by every tile that sees it; a tile's blocks are its own either way
// (they start at multiples of KEYS), so its rows' arithmetic is that of the tile alone.
static void tiled_worker(void *ctx, int ith, int nth) {
    tiled_job *j = ctx;
    const ft_attn_params *p = j->p;
    const int hd = p->head_dim, tt = j->tile_tok;
    float *kb = j->c->attn_ws + (size_t)ith * j->c->attn_ws_per_thread; // (KEYS, hd)
    float *vb = kb + (size_t)KEYS * hd;                                  // (KEYS, hd)
    float *ST = vb + (size_t)KEYS * hd;                                  // (KEYS, ROWS): scores, then P
    float *tiles = ST + (size_t)KEYS * ROWS;                             // per tile: qT, accT
    const float *sinks = cpu_attn_sinks(p);
    tile_state ts[CPU_ATTN_TILE_GROUP];
    const int n_tiles = (p->n_tok + tt - 1) / tt, n_items = (n_tiles + j->group - 1) / j->group;
    for (int64_t it = ith; it < (int64_t)n_items * p->n_head_kv; it += nth) {
        const int tile0 = (int)(it / p->n_head_kv) * j->group, hk = (int)(it % p->n_head_kv);
        const int n = FT_MIN(j->group, n_tiles - tile0);
        int first = INT32_MAX, last = -1;
        for (int i = 0; i < n; i++) {
            const int t0 = (tile0 + i) * tt;
            ts[i].qT = tiles + (size_t)i * 2 * ROWS * hd;
            ts[i].accT = ts[i].qT + (size_t)ROWS * hd;
            tile_start(&ts[i], p, hk, t0, FT_MIN(tt, p->n_tok - t0));
            first = FT_MIN(first, ts[i].first_key);
            last = FT_MAX(last, ts[i].last);
        }
        int64_t off = 0, walked = -1;
        for (int k0 = first; k0 <= last; k0 += KEYS) {
            cpu_attn_tiled_load_block(p, hk, k0, FT_MIN(KEYS, last - k0 + 1), kb, vb, &off, &walked);
            for (int i = 0; i < n; i++)
                if (k0 >= ts[i].first_key && k0 <= ts[i].last)
                    tile_block(&ts[i], kb, vb, k0, FT_MIN(KEYS, ts[i].last - k0 + 1), hd, p->scale, ST);
        }
        for (int i = 0; i < n; i++) tile_finish(&ts[i], p, hk, sinks);
    }
}

bool cpu_attention_tiled(cpu_backend *c, const ft_attn_params *p) {
    const int group = p->n_head / p->n_head_kv;
    if (p->k_cache->type != FT_TYPE_F16 || p->v_cache->type != FT_TYPE_F16) return false;
    if (group > ROWS || p->head_dim % 16 != 0 || p->head_dim > 1024) return false;
    if (cpu_attn_tiled_ws_floats(p->head_dim) > c->attn_ws_per_thread) return false;
    // a group of tiles per item where that leaves every thread several items
    const int n_tiles = (p->n_tok + ROWS / group - 1) / (ROWS / group);
    const int tiles_per_item = FT_MAX(1, FT_MIN(CPU_ATTN_TILE_GROUP, n_tiles * p->n_head_kv / (4 * cpu_threads(c))));
    tiled_job j = {c, p, ROWS / group, tiles_per_item};
    cpu_run(c, tiled_worker, &j);
    return true;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
