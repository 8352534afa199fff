// cpu_attn_tiled_avx2.c: prefill attention over an f16 cache in blocks, for batches of
// FT_ATTN_TILED_MIN_TOK queries or more (llama.cpp's tiled path: scores and sums in f32).
//
// One work item is a tile of query tokens and one KV head: its rows are every query head of
// that head's group for each token of the tile (at most ROWS). Per block of KEYS keys (gathered
// through the block table and converted to f32 once for all rows):
//   1. scores S = q . k times the scale, 4 rows x 4 keys per step in 8-lane FMAs, masked to
//      -inf past a row's own position and before its window (blocks start at multiples of
//      KEYS, so a row's result is the same in any tile);
//   2. per row, the block's maximum; a new maximum rescales the row's sum of values and its
//      softmax denominator (as llama.cpp's tiled kernel does per block), then P = exp(S - max)
//      in 8-lane exponentials and the denominator grows by the sum of P;
//   3. the rows' sums of values += P V, 4 rows x 16 elements per step;
// after the last block, each row's attention sink where there are sinks (cpu_attn_sink).
// Items go to threads round-robin in token order, which balances the causal triangle.
#include "cpu_impl.h"
#include "../../quant/fp16.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

#include "cpu_avx2.h"

enum { ROWS = CPU_ATTN_TILE_ROWS, KEYS = CPU_ATTN_TILE_KEYS };

// The register tiles' loops fully unrolled (their accumulators then stay in registers).
#if defined(__clang__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif
_Static_assert(KEYS % 8 == 0, "the softmax runs in vectors of 8 keys");

// (this kernel uses one tile's queries and sums of it, the AVX-512 one a group's)
size_t cpu_attn_tiled_ws_floats(int head_dim) {
    return (size_t)ROWS * head_dim * 2 * CPU_ATTN_TILE_GROUP + (size_t)KEYS * head_dim * 2 + (size_t)ROWS * KEYS + 64;
}

// Four sums of 8 lanes each, as one vector of 4.
static inline __m128 hsum4x8(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    __m256 s = _mm256_hadd_ps(ab, cd); // a0+a1+a2+a3 b.. c.. d.. | the high halves
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// S[r][k] = scale * q_r . k_k for rows [0, nr) (a multiple of 4, padded) and keys [0, nk)
// (a multiple of 4, padded), q row-major (ROWS, hd), kb row-major (KEYS, hd).
static void scores(const float *q, const float *kb, int nr, int nk, int hd, float scale, float *S) {
    const __m128 sc = _mm_set1_ps(scale);
    for (int r = 0; r < nr; r += 4)
        for (int k = 0; k < nk; k += 4) {
            __m256 a[4][4];
            UNROLL
            for (int i = 0; i < 4; i++)
                UNROLL
                for (int j = 0; j < 4; j++)
                    a[i][j] = _mm256_setzero_ps();
            for (int d = 0; d < hd; d += 8) {
                __m256 kv[4], qv[4];
                UNROLL
                for (int j = 0; j < 4; j++)
                    kv[j] = _mm256_loadu_ps(kb + (size_t)(k + j) * hd + d);
                UNROLL
                for (int i = 0; i < 4; i++)
                    qv[i] = _mm256_loadu_ps(q + (size_t)(r + i) * hd + d);
                UNROLL
                for (int i = 0; i < 4; i++)
                    UNROLL
                    for (int j = 0; j < 4; j++)
                        a[i][j] = _mm256_fmadd_ps(qv[i], kv[j], a[i][j]);
            }
            UNROLL
            for (int i = 0; i < 4; i++)
                _mm_storeu_ps(S + (size_t)(r + i) * KEYS + k,
                              _mm_mul_ps(hsum4x8(a[i][0], a[i][1], a[i][2], a[i][3]), sc));
        }
}

// acc[r] += sum_k P[r][k] v_k for rows [0, nr) (a multiple of 4) over keys [0, nk).
static void add_values(const float *P, const float *vb, int nr, int nk, int hd, float *acc) {
    for (int r = 0; r < nr; r += 4)
        for (int d = 0; d < hd; d += 16) {
            __m256 a[4][2];
            UNROLL
            for (int i = 0; i < 4; i++)
                UNROLL
                for (int h = 0; h < 2; h++)
                    a[i][h] = _mm256_loadu_ps(acc + (size_t)(r + i) * hd + d + 8 * h);
            for (int k = 0; k < nk; k++) {
                __m256 v0 = _mm256_loadu_ps(vb + (size_t)k * hd + d),
                       v1 = _mm256_loadu_ps(vb + (size_t)k * hd + d + 8);
                UNROLL
                for (int i = 0; i < 4; i++) {
                    __m256 p = _mm256_broadcast_ss(P + (size_t)(r + i) * KEYS + k);
                    a[i][0] = _mm256_fmadd_ps(p, v0, a[i][0]);
                    a[i][1] = _mm256_fmadd_ps(p, v1, a[i][1]);
                }
            }
            UNROLL
            for (int i = 0; i < 4; i++)
                UNROLL
                for (int h = 0; h < 2; h++)
                    _mm256_storeu_ps(acc + (size_t)(r + i) * hd + d + 8 * h, a[i][h]);
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
    int tile_tok; // query tokens per item
} tiled_job;

static void tiled_worker(void *ctx, int ith, int nth) {
    tiled_job *j = ctx;
    const ft_attn_params *p = j->p;
    const int hd = p->head_dim, group = p->n_head / p->n_head_kv, tt = j->tile_tok;
    float *q = j->c->attn_ws + (size_t)ith * j->c->attn_ws_per_thread; // (ROWS, hd)
    float *acc = q + (size_t)ROWS * hd;                                // (ROWS, hd)
    float *kb = acc + (size_t)ROWS * hd;                               // (KEYS, hd)
    float *vb = kb + (size_t)KEYS * hd;                                // (KEYS, hd)
    float *S = vb + (size_t)KEYS * hd;                                 // (ROWS, KEYS): scores, then P
    float M[ROWS], L[ROWS]; // per row: the running maximum and softmax denominator
    int qpos[ROWS];         // per row: its token's position
    const float *sinks = cpu_attn_sinks(p);

    const int n_tiles = (p->n_tok + tt - 1) / tt;
    for (int64_t it = ith; it < (int64_t)n_tiles * p->n_head_kv; it += nth) {
        const int t0 = (int)(it / p->n_head_kv) * tt, hk = (int)(it % p->n_head_kv);
        const int nt = FT_MIN(tt, p->n_tok - t0), nr = nt * group, nr4 = (nr + 3) & ~3;
        // row tl * group + g: token t0 + tl, query head hk * group + g; rows past nr are zero
        for (int tl = 0; tl < nt; tl++)
            memcpy(q + (size_t)tl * group * hd,
                   p->q + ((size_t)(t0 + tl) * p->n_head + (size_t)hk * group) * hd,
                   (size_t)group * hd * sizeof(float));
        memset(q + (size_t)nr * hd, 0, (size_t)(nr4 - nr) * hd * sizeof(float));
        memset(acc, 0, (size_t)nr4 * hd * sizeof(float));
        for (int r = 0; r < nr4; r++) {
            M[r] = -INFINITY;
            L[r] = 0.0f;
            qpos[r] = r < nr ? p->pos0 + t0 + r / group : -1;
        }
        const int first = p->pos0 + t0, last = p->pos0 + t0 + nt - 1;
        int64_t off = 0, walked = -1;
        for (int k0 = cpu_attn_tiled_first_key(p, first); k0 <= last; k0 += KEYS) {
            // scores in steps of 4 keys, the softmax in vectors of 8 (KEYS is a multiple of both)
            const int nk = FT_MIN(KEYS, last - k0 + 1), nk4 = (nk + 3) & ~3, nk8 = (nk + 7) & ~7;
            cpu_attn_tiled_load_block(p, hk, k0, nk, kb, vb, &off, &walked);
            memset(kb + (size_t)nk * hd, 0, (size_t)(nk4 - nk) * hd * sizeof(float));
            memset(vb + (size_t)nk * hd, 0, (size_t)(nk4 - nk) * hd * sizeof(float));
            scores(q, kb, nr4, nk4, hd, p->scale, S);
            // the keys each row sees: [its window's start, its own position]
            const bool all_visible = k0 + nk - 1 <= first && (p->window <= 0 || k0 >= last - p->window + 1);
            for (int r = 0; r < nr; r++) {
                float *s = S + (size_t)r * KEYS;
                if (!all_visible) {
                    const int lo = p->window > 0 ? qpos[r] - p->window + 1 : 0;
                    for (int k = 0; k < nk; k++)
                        if (k0 + k > qpos[r] || k0 + k < lo) s[k] = -INFINITY;
                }
                for (int k = nk; k < nk8; k++) // keys past the block's end, to whole vectors
                    s[k] = -INFINITY;
                __m256 m8 = _mm256_set1_ps(-INFINITY);
                for (int k = 0; k < nk8; k += 8)
                    m8 = _mm256_max_ps(m8, _mm256_loadu_ps(s + k));
                const float bmax = hmax8(m8);
                if (bmax == -INFINITY) { // nothing visible in this block
                    memset(s, 0, (size_t)nk8 * sizeof(float));
                    continue;
                }
                if (bmax > M[r]) {
                    const float ms = expf(M[r] - bmax);
                    M[r] = bmax;
                    L[r] *= ms;
                    float *a = acc + (size_t)r * hd;
                    const __m256 f = _mm256_set1_ps(ms);
                    for (int d = 0; d < hd; d += 8)
                        _mm256_storeu_ps(a + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), f));
                }
                const __m256 mx = _mm256_set1_ps(M[r]);
                __m256 sum8 = _mm256_setzero_ps();
                for (int k = 0; k < nk8; k += 8) {
                    __m256 e = exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + k), mx));
                    _mm256_storeu_ps(s + k, e);
                    sum8 = _mm256_add_ps(sum8, e);
                }
                L[r] += hsum8(sum8);
            }
            for (int r = nr; r < nr4; r++)
                memset(S + (size_t)r * KEYS, 0, (size_t)nk4 * sizeof(float));
            add_values(S, vb, nr4, nk, hd, acc);
        }
        if (sinks) // after every block, as llama.cpp's tiled kernel applies them
            for (int r = 0; r < nr; r++)
                cpu_attn_sink(sinks[hk * group + r % group], M[r], &L[r], acc + (size_t)r * hd, hd);
        for (int r = 0; r < nr; r++) {
            const float inv = L[r] == 0.0f ? 0.0f : 1.0f / L[r];
            const float *a = acc + (size_t)r * hd;
            float *o = p->out + ((size_t)(t0 + r / group) * p->n_head + (size_t)hk * group + r % group) * hd;
            for (int d = 0; d < hd; d++)
                o[d] = a[d] * inv;
        }
    }
}

bool cpu_attention_tiled(cpu_backend *c, const ft_attn_params *p) {
    const int group = p->n_head / p->n_head_kv;
    if (p->k_cache->type != FT_TYPE_F16 || p->v_cache->type != FT_TYPE_F16) return false;
    if (group > ROWS || p->head_dim % 16 != 0) return false;
    if (cpu_attn_tiled_ws_floats(p->head_dim) > c->attn_ws_per_thread) return false;
    tiled_job j = {c, p, ROWS / group};
    cpu_run(c, tiled_worker, &j);
    return true;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
