// cpu_attn_tiled_avx512.c: the tiled prefill attention of cpu_attn_tiled_avx2.c (same tiles,
// same blocks of keys, the same online softmax per block, scores and sums in f32) with the
// tile's rows in the vector lanes, for CPUs with AVX-512.
//
// A tile's queries are transposed once (qT: head_dim x ROWS), so every step is a broadcast of
// one key or value element times a vector of 16 rows, with no horizontal sums:
//   1. scores ST[k][r] = scale * sum_d K[k][d] qT[d][r], 4 keys x 64 rows per step;
//   2. the keys past a row's position or before its window masked to -inf by a compare of
//      the key's position with the rows' positions; the block's maximum per row is a running
//      vector maximum over its keys; a row's sum of values and denominator are multiplied by
//      e^(old max - new max) (exactly 1 where the maximum did not move), then
//      P = e^(S - max), the denominator += the sum of P over the keys;
//   3. accT[d][r] += sum_k V[k][d] P[k][r], 4 elements of the head x 64 rows per step.
// Each lane's arithmetic is its own row's, in key order within blocks that start at
// multiples of KEYS, so a row's result does not depend on the tile (or call) that holds it.
#include "cpu_impl.h"

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

typedef struct {
    cpu_backend *c;
    const ft_attn_params *p;
    int tile_tok; // query tokens per tile
    int group;    // tiles per item (at most CPU_ATTN_TILE_GROUP), all of one KV head
} tiled_job;

// One tile's queries, sums and softmax state.
typedef struct {
    float *qT, *accT;            // (hd, ROWS) each
    __m512 M[RV], L[RV];         // per row: the running maximum and the softmax denominator
    __m512i qpos[RV], qlo[RV];   // per row: its position, its window's first key
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
        ts->M[v] = _mm512_set1_ps(-INFINITY);
        ts->L[v] = _mm512_setzero_ps();
        int32_t pos[16], lo[16];
        for (int i = 0; i < 16; i++) {
            int r = 16 * v + i;
            pos[i] = r < ts->nr ? p->pos0 + t0 + r / group : -1;
            lo[i] = p->window > 0 ? pos[i] - p->window + 1 : INT32_MIN;
        }
        ts->qpos[v] = _mm512_loadu_si512(pos);
        ts->qlo[v] = _mm512_loadu_si512(lo);
    }
    ts->first_key = cpu_attn_tiled_first_key(p, p->pos0 + t0);
    ts->last = p->pos0 + t0 + nt - 1;
}

// The tile against keys k0 .. k0 + nk - 1 (kb, vb in f32): scores, masks, the online softmax,
// the values (ST: the block's scores, then P).
static void tile_block(tile_state *ts, const float *kb, const float *vb, int k0, int nk, int hd, float scale,
                       float *ST) {
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    scores(ts->qT, kb, nk, hd, scale, ST);
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
            float *a = ts->accT + (size_t)d * ROWS + 16 * v;
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
    add_values(ST, vb, nk, hd, ts->accT);
}

// The tile's rows of the output: the sums over the denominator (and the head's sink).
static void tile_finish(const tile_state *ts, const ft_attn_params *p, int hk, const float *sinks) {
    const int hd = p->head_dim, group = p->n_head / p->n_head_kv;
    float Ms[ROWS], Ls[ROWS], row[1024]; // (hd <= 1024)
    for (int v = 0; v < RV; v++) {
        _mm512_storeu_ps(Ms + 16 * v, ts->M[v]);
        _mm512_storeu_ps(Ls + 16 * v, ts->L[v]);
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

bool cpu_attention_tiled_avx512(cpu_backend *c, const ft_attn_params *p) {
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
