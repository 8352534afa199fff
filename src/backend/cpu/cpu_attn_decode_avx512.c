// cpu_attn_decode_avx512.c: the attention of a few queries (decode: below llama.cpp's tiled
// threshold) over an f16 or q8_0 cache, for CPUs with AVX-512, in blocks of keys.
//
// The arithmetic is the reference's (cpu_attn.c: llama.cpp's one-query flash attention): the
// query rounded to f16 (quantized to q8_0 for q8_0 keys), q.k by the key type's dot product, an
// online softmax key by key, and the running sum of values rounded to f16 after every key (kept in
// f32 for q8_0 values). What changes is the order of the work: a work item is a (token, KV head,
// heads of its group) triple, and for each block of BLK keys
//   1. f16 keys are converted to f32 and transposed once (element-major, keys in the lanes), then
//      scored against every query head of the item as broadcasts of one query element times 16
//      keys, in the summation order of the reference's dot product (so the scores are its bits:
//      the conformance with llama.cpp rests on them); q8_0 keys take the reference's integer dot
//      product, a key and head at a time;
//   2. the online softmax runs key by key with the group's heads in the 16 lanes, writing each
//      key's rescale (ms) and weight (vs) per head, and the denominators;
//   3. the values: 32 elements of the head at a time, the accumulators of 8 heads stay in
//      registers over the block's keys, each key's row converted once: acc = f16(f16(acc * ms)
//      + v * vs) (no f16 steps for q8_0 values), where the rescale runs only in a block where some
//      head's maximum moved (ms = 1 leaves the sum unchanged, so that is the reference's result
//      either way).
// So each key and value row is read once per item, no f16 dot product ends in a horizontal sum,
// and the accumulators leave the registers once per block instead of once per key. A group is
// split into several items only where the (token, KV head) pairs are fewer than the threads; a
// head's arithmetic does not depend on the heads beside it, so the split does not change a bit.
// The exponentials are cpu_avx512.h's polynomial (as on the other fast paths; the reference
// calls expf), so the outputs are the AVX2 path's to the bit (cpu_attention_decode_paths_agree).
#include "cpu_impl.h"

#include <immintrin.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"))), \
                             apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#endif

#include "cpu_avx512.h"

enum { BLK = 32, MAX_GROUP = 16, MAX_HD = 512 };

static inline __m512 round_f16(__m512 x) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// r[0..15] (rows of 16 floats) transposed in place: r[i][j] becomes r[j][i].
static inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);     // r0[0] r1[0] r0[1] r1[1] per 128-bit lane
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]); // r0[2] r1[2] r0[3] r1[3]
    }
    for (int i = 0; i < 16; i += 4)
        for (int j = 0; j < 2; j++) {
            __m512d a = _mm512_castps_pd(t[i + j]), b = _mm512_castps_pd(t[i + j + 2]);
            r[i + 2 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));     // rows i..i+3, one column a lane
            r[i + 2 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
    // r[4q + c]: rows 4q..4q+3 at columns c, c + 4, c + 8, c + 12 (one per 128-bit lane)
    for (int c = 0; c < 4; c++) {
        __m512 a0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), a1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
        __m512 b0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88), b1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        t[c] = _mm512_shuffle_f32x4(a0, b0, 0x88);      // column c
        t[c + 8] = _mm512_shuffle_f32x4(a0, b0, 0xdd);  // column c + 8
        t[c + 4] = _mm512_shuffle_f32x4(a1, b1, 0x88);  // column c + 4
        t[c + 12] = _mm512_shuffle_f32x4(a1, b1, 0xdd); // column c + 12
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

// The f16 rows kr[0..nk) (nk <= BLK; missing rows read as 0) into kT (hd, BLK): element d of
// key k at kT[d * BLK + k].
static void load_keys_transposed(const ft_half *const *kr, int nk, int hd, float *kT) {
    for (int k0 = 0; k0 < BLK; k0 += 16)
        for (int d = 0; d < hd; d += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = k0 + i < nk ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr[k0 + i] + d)))
                                   : _mm512_setzero_ps();
            transpose16(r);
            for (int i = 0; i < 16; i++) _mm512_storeu_ps(kT + (size_t)(d + i) * BLK + k0, r[i]);
        }
}

// Scores of one head against the block's keys, st[k] = scale * q . k, each dot product summed in
// the order of the f16 dot product the reference takes (dot_avx2.c's tile_float): element d adds
// into partial d mod 32 in element order, then lanes l = d mod 8 join as (p[l] + p[8 + l]) +
// (p[16 + l] + p[24 + l]), then lanes l and l + 4, then l and l + 2, then 0 and 1. So a query's
// scores are the reference's to the bit, with the keys in the lanes.
static void score_head(const float *q, const float *kT, int hd, float scale, float *st) {
    _Static_assert(BLK == 32, "two halves of 16 keys");
    __m512 b[2][8]; // [half][l]
    for (int l = 0; l < 8; l += 2) {
        // the partials of lanes l and l + 1, both halves: 16 chains in flight
        __m512 p[2][2][4];
#pragma GCC unroll 16
        for (int x = 0; x < 16; x++) p[x / 8][x / 4 % 2][x % 4] = _mm512_setzero_ps();
        for (int i = 0; i < hd; i += 32) {
#pragma GCC unroll 8
            for (int y = 0; y < 8; y++) {
                const int dl = y / 4, j = y % 4, m = 8 * j + l + dl;
                const __m512 qv = _mm512_set1_ps(q[i + m]);
                const float *kt = kT + (size_t)(i + m) * BLK;
                p[0][dl][j] = _mm512_fmadd_ps(_mm512_loadu_ps(kt), qv, p[0][dl][j]);
                p[1][dl][j] = _mm512_fmadd_ps(_mm512_loadu_ps(kt + 16), qv, p[1][dl][j]);
            }
        }
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            __m512 *pp = p[x / 2][x % 2];
            b[x / 2][l + x % 2] = _mm512_add_ps(_mm512_add_ps(pp[0], pp[1]), _mm512_add_ps(pp[2], pp[3]));
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
    for (int h = 0; h < 2; h++) {
        const __m512 c0 = _mm512_add_ps(b[h][0], b[h][4]), c1 = _mm512_add_ps(b[h][1], b[h][5]);
        const __m512 c2 = _mm512_add_ps(b[h][2], b[h][6]), c3 = _mm512_add_ps(b[h][3], b[h][7]);
        const __m512 sum = _mm512_add_ps(_mm512_add_ps(c0, c2), _mm512_add_ps(c1, c3));
        _mm512_storeu_ps(st + 16 * h, _mm512_mul_ps(sum, sc));
    }
}

// Step 3 for heads g0 .. g0 + GN - 1 (GN a constant after inlining): elements d .. d + 31 of
// their accumulators (acc rows hd apart) over the block's nk keys, value rows vr[k].
static inline __attribute__((always_inline)) void add_values(float *acc, int hd, int d, int g0, const uint8_t *const *vr,
                                                            int nk, const float *ms, const float *vs, bool rescale,
                                                            const int GN, const bool V8) {
    __m512 a[8][2];
#pragma GCC unroll 8
    for (int g = 0; g < GN; g++) {
        a[g][0] = _mm512_loadu_ps(acc + (size_t)(g0 + g) * hd + d);
        a[g][1] = _mm512_loadu_ps(acc + (size_t)(g0 + g) * hd + d + 16);
    }
    for (int k = 0; k < nk; k++) {
        __m512 v0, v1;
        if (V8) { // one q8_0 block: code times the block's scale, one rounding (the reference's)
            const block_q8_0 *b = (const block_q8_0 *)vr[k] + d / 32;
            const __m512 sd = _mm512_set1_ps(_cvtsh_ss(b->d));
            v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->qs))), sd);
            v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16)))), sd);
        } else {
            const ft_half *v = (const ft_half *)vr[k] + d;
            v0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)v));
            v1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + 16)));
        }
#pragma GCC unroll 8
        for (int g = 0; g < GN; g++) {
            // f16 values: the sums rounded to f16 after every step; q8_0: kept in f32
            if (rescale) {
                const __m512 m = _mm512_set1_ps(ms[k * MAX_GROUP + g0 + g]);
                a[g][0] = _mm512_mul_ps(a[g][0], m);
                a[g][1] = _mm512_mul_ps(a[g][1], m);
                if (!V8) a[g][0] = round_f16(a[g][0]), a[g][1] = round_f16(a[g][1]);
            }
            // a separate multiply and add, as the reference
            const __m512 w = _mm512_set1_ps(vs[k * MAX_GROUP + g0 + g]);
            a[g][0] = _mm512_add_ps(a[g][0], _mm512_mul_ps(v0, w));
            a[g][1] = _mm512_add_ps(a[g][1], _mm512_mul_ps(v1, w));
            if (!V8) a[g][0] = round_f16(a[g][0]), a[g][1] = round_f16(a[g][1]);
        }
    }
#pragma GCC unroll 8
    for (int g = 0; g < GN; g++) {
        _mm512_storeu_ps(acc + (size_t)(g0 + g) * hd + d, a[g][0]);
        _mm512_storeu_ps(acc + (size_t)(g0 + g) * hd + d + 16, a[g][1]);
    }
}

// Step 3 for heads 0 .. gn - 1, 8 at a time, then 4, 2 and 1 (V8 a constant after inlining).
static inline __attribute__((always_inline)) void add_values_heads(float *acc, int hd, int d, int gn,
                                                                  const uint8_t *const *vr, int nk, const float *ms,
                                                                  const float *vs, bool rescale, const bool V8) {
    int h = 0;
    for (; h + 8 <= gn; h += 8) add_values(acc, hd, d, h, vr, nk, ms, vs, rescale, 8, V8);
    if (h + 4 <= gn) add_values(acc, hd, d, h, vr, nk, ms, vs, rescale, 4, V8), h += 4;
    if (h + 2 <= gn) add_values(acc, hd, d, h, vr, nk, ms, vs, rescale, 2, V8), h += 2;
    if (h < gn) add_values(acc, hd, d, h, vr, nk, ms, vs, rescale, 1, V8);
}

// The K and V rows of keys k0 .. k0 + nk - 1 of KV head hk, a block ahead of their use
// (cpu_attn_prefetch_row).
static void prefetch_block(const ft_attn_params *p, int hk, size_t krow, size_t vrow, int k0, int nk, int64_t *off,
                           int64_t *walked) {
    for (int k = 0; k < nk; k++)
        cpu_attn_prefetch_row(p, (size_t)ft_kv_row_walk(p->blocks, k0 + k, off, walked), hk, krow, vrow);
}

typedef struct {
    cpu_backend *c;
    const ft_attn_params *p;
    int n_sub; // parts a group's heads are split into (cpu_attn_head_parts)
} decode_job;

static void decode_worker(void *ctx, int ith, int nth) {
    decode_job *j = ctx;
    const ft_attn_params *p = j->p;
    const int hd = p->head_dim, group = p->n_head / p->n_head_kv, n_sub = j->n_sub;
    const int per_sub = (group + n_sub - 1) / n_sub;
    const size_t krow = ft_row_bytes(p->k_cache->type, hd), vrow = ft_row_bytes(p->v_cache->type, hd);
    float *acc = j->c->attn_ws + (size_t)ith * j->c->attn_ws_per_thread; // (gn, hd)
    float *qf = acc + (size_t)MAX_GROUP * hd;                              // (gn, hd): q in f16 values
    float *kT = qf + (size_t)MAX_GROUP * hd;                               // (hd, BLK)
    uint8_t *q8 = (uint8_t *)(kT + (size_t)BLK * hd);                     // (gn) q8_0 rows: a q8_0 cache's queries
    const bool k8 = p->k_cache->type == FT_TYPE_Q8_0, v8 = p->v_cache->type == FT_TYPE_Q8_0;
    const size_t q8_bytes = ft_row_bytes(FT_TYPE_Q8_0, hd);
    const ft_vec_dot_fn dot8 = cpu_vec_dot(j->c, FT_TYPE_Q8_0);
    // per head: the block's scores (ST); per key, the heads in 16 lanes: the scores, then each
    // key's rescale and weight
    float ST[MAX_GROUP * BLK], sc[BLK * MAX_GROUP], ms[BLK * MAX_GROUP], vs[BLK * MAX_GROUP];
    const uint8_t *kr[BLK];
    const uint8_t *vr[BLK];
    const float *sinks = cpu_attn_sinks(p);
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);

    const int64_t n_items = (int64_t)p->n_tok * p->n_head_kv * n_sub;
    for (int64_t it = ith; it < n_items; it += nth) {
        const int t = (int)(it / ((int64_t)p->n_head_kv * n_sub)), hk = (int)(it / n_sub % p->n_head_kv);
        const int h0 = (int)(it % n_sub) * per_sub, gn = FT_MIN(per_sub, group - h0); // heads h0 .. h0 + gn - 1
        if (gn <= 0) continue;
        const __mmask16 lanes = (__mmask16)((1u << gn) - 1);
        const int qpos = p->pos0 + t, kmin = p->window > 0 ? FT_MAX(0, qpos - p->window + 1) : 0;
        const float *q0 = p->q + ((size_t)t * p->n_head + (size_t)hk * group + h0) * hd;
        if (k8) // the query quantized as the reference's q8_0 dot product takes it
            for (int g = 0; g < gn; g++) cpu_quantize_row(FT_TYPE_Q8_0, q0 + (size_t)g * hd, q8 + g * q8_bytes, hd);
        else
            for (size_t i = 0; i < (size_t)gn * hd; i += 16) _mm512_storeu_ps(qf + i, round_f16(_mm512_loadu_ps(q0 + i)));
        memset(acc, 0, (size_t)gn * hd * sizeof(float));
        for (int i = 0; i < MAX_GROUP * BLK; i++) ST[i] = -INFINITY; // heads past gn stay -inf
        __m512 M = neg_inf, S = _mm512_setzero_ps();
        int64_t off = 0, walked = -1, pf_off = 0, pf_walked = -1;
        prefetch_block(p, hk, krow, vrow, kmin, FT_MIN(BLK, qpos - kmin + 1), &pf_off, &pf_walked);
        for (int k0 = kmin; k0 <= qpos; k0 += BLK) {
            const int nk = FT_MIN(BLK, qpos - k0 + 1);
            if (k0 + BLK <= qpos)
                prefetch_block(p, hk, krow, vrow, k0 + BLK, FT_MIN(BLK, qpos - k0 - BLK + 1), &pf_off, &pf_walked);
            // 1. scores
            for (int k = 0; k < nk; k++) {
                const size_t row = (size_t)ft_kv_row_walk(p->blocks, k0 + k, &off, &walked);
                kr[k] = (const uint8_t *)p->k_cache->data + row * p->k_cache->row_bytes + hk * krow;
                vr[k] = (const uint8_t *)p->v_cache->data + row * p->v_cache->row_bytes + hk * vrow;
            }
            if (k8) { // q8_0 keys: the reference's integer dot product, a key and head at a time
                for (int k = 0; k < nk; k++) {
                    _mm512_storeu_ps(sc + k * MAX_GROUP, neg_inf);
                    for (int g = 0; g < gn; g++) sc[k * MAX_GROUP + g] = dot8(hd, kr[k], q8 + g * q8_bytes) * p->scale;
                }
            } else {
                load_keys_transposed((const ft_half *const *)kr, nk, hd, kT);
                for (int g = 0; g < gn; g++) score_head(qf + (size_t)g * hd, kT, hd, p->scale, ST + (size_t)g * BLK);
                for (int kk = 0; kk < BLK; kk += 16) { // ST (heads, keys) to sc (keys, heads)
                    __m512 r[16];
                    for (int g = 0; g < 16; g++) r[g] = _mm512_loadu_ps(ST + (size_t)g * BLK + kk);
                    transpose16(r);
                    for (int k = 0; k < 16; k++) _mm512_storeu_ps(sc + (size_t)(kk + k) * MAX_GROUP, r[k]);
                }
            }
            // 2. the online softmax, key by key: a head whose maximum moves takes e^(old - s) as
            // its rescale and 1 as its weight, another 1 and e^(s - max) (lanes past the heads:
            // -inf - -inf is NaN, whose exponential is 0: weight 0, rescale 1)
            __mmask16 moved = 0;
            for (int k = 0; k < nk; k++) {
                const __m512 s = _mm512_loadu_ps(sc + k * MAX_GROUP);
                const __mmask16 up = _mm512_cmp_ps_mask(s, M, _CMP_GT_OQ);
                const __m512 e = exp16_nonpositive(_mm512_mask_blend_ps(up, _mm512_sub_ps(s, M), _mm512_sub_ps(M, s)));
                const __m512 m = _mm512_mask_blend_ps(up, one, e), w = _mm512_mask_blend_ps(up, e, one);
                _mm512_storeu_ps(ms + k * MAX_GROUP, m);
                _mm512_storeu_ps(vs + k * MAX_GROUP, w);
                moved |= _mm512_cmp_ps_mask(m, one, _CMP_NEQ_UQ);
                M = _mm512_mask_blend_ps(up, M, s);
                S = _mm512_add_ps(_mm512_mul_ps(S, m), w);
            }
            // 3. the values
            const bool rescale = (moved & lanes) != 0;
            for (int d = 0; d < hd; d += 32) {
                if (v8) add_values_heads(acc, hd, d, gn, vr, nk, ms, vs, rescale, true);
                else add_values_heads(acc, hd, d, gn, vr, nk, ms, vs, rescale, false);
            }
        }
        float Ms[16], Ss[16];
        _mm512_storeu_ps(Ms, M);
        _mm512_storeu_ps(Ss, S);
        for (int g = 0; g < gn; g++) {
            float *a = acc + (size_t)g * hd;
            if (sinks) cpu_attn_sink(sinks[hk * group + h0 + g], Ms[g], &Ss[g], a, hd);
            const float inv = Ss[g] == 0.0f ? 0.0f : 1.0f / Ss[g];
            float *o = p->out + ((size_t)t * p->n_head + (size_t)hk * group + h0 + g) * hd;
            for (int d = 0; d < hd; d++) o[d] = a[d] * inv;
        }
    }
}

size_t cpu_attn_decode_ws_floats(int head_dim) {
    // acc, qf, kT, then the q8_0 queries (under 2 bytes an element)
    return (size_t)(2 * MAX_GROUP + BLK + MAX_GROUP / 2) * (size_t)head_dim + 64;
}

bool cpu_attention_decode_avx512(cpu_backend *c, const ft_attn_params *p) {
    const int group = p->n_head / p->n_head_kv;
    const enum ft_type kt = p->k_cache->type, vt = p->v_cache->type;
    if ((kt != FT_TYPE_F16 && kt != FT_TYPE_Q8_0) || (vt != FT_TYPE_F16 && vt != FT_TYPE_Q8_0)) return false;
    if (group > MAX_GROUP || p->head_dim % 32 != 0 || p->head_dim > MAX_HD) return false;
    if (cpu_attn_decode_ws_floats(p->head_dim) > c->attn_ws_per_thread) return false;
    decode_job j = {c, p, cpu_attn_head_parts(c, p)};
    cpu_run(c, decode_worker, &j);
    return true;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
