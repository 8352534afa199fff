// cpu_attn_avx2.c: the fast path of the attention op (cpu_attn.c holds the reference).
//
// Same steps as the reference (see the comment above attn_worker in cpu_attn.c), reorganised:
//   1. one work item is a (token, KV head) pair and computes every query head of that KV
//      head's group, so each key and value row is read and converted once per group, not once
//      per query head; items are dealt to threads round-robin in token order, which balances
//      the causal triangle (later tokens see more keys);
//   2. scores: the query of each head is converted once per item to the key type's
//      vec_dot_type and scored with the same dot product as the reference (bit-identical; an
//      f16 key is converted to f32 once for the whole group and dotted in that product's
//      order), or, on llama.cpp's tiled path (f16 cache, 64 queries or more), in f32 against
//      the f16 key converted in registers (F16C), 8-lane FMAs (another summation order than
//      the reference's sequential one); the rows of keys a few ahead are prefetched;
//   3. values: the row is converted in registers (F16C for f16, int8 times the block scale for
//      q8_0) and added to each head's accumulator with a separate multiply and add, rounded
//      to f16 after every key where the reference does (vcvtps2ph rounds to nearest even, as
//      ft_fp32_to_fp16), so this step agrees with the reference to the bit;
//   4. attention sinks as the reference applies them (cpu_attn_sink), once per head after its keys.
// No buffers per key: the per-thread workspace (sized in cpu_reserve) holds the group's
// converted queries and accumulators.
#include "cpu_impl.h"
#include "../../quant/fp16.h"

#include <immintrin.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

#include "cpu_avx2.h"

typedef struct {
    cpu_backend *c;
    const ft_attn_params *p;
    bool tiled;
    int n_sub; // parts a group's heads are split into (cpu_attn_head_parts)
} attn_fast_job;

// 8 values of a cache row starting at element d (a multiple of 8): f16, or q8_0 (code times
// the block's scale, the product the reference's dequantization rounds once).
static inline __m256 load_row8(const uint8_t *row, enum ft_type type, int d) {
    if (type == FT_TYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * (size_t)d)));
    const block_q8_0 *b = (const block_q8_0 *)row + d / 32;
    __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + d % 32)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(_cvtsh_ss(b->d)));
}

static inline __m256 round_f16(__m256 x) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// f32 query . f16 key, in 8 lanes (hd a multiple of 8).
static inline float dot_f32_f16(const float *q, const uint8_t *k, int hd) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_row8(k, FT_TYPE_F16, d), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load_row8(k, FT_TYPE_F16, d + 8), a1);
    }
    if (d < hd) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_row8(k, FT_TYPE_F16, d), a0);
    return hsum8(_mm256_add_ps(a0, a1));
}

// k . q over rows of f32 holding f16 values (hd a multiple of 32), in the f16 dot product's
// order (dot_avx2.c's tile_float: four 8-lane accumulators over steps of 32, then their sum):
// the bits of `dot` on the f16 rows, with the key converted once for all the heads of a group.
static inline float dot_f16_values(const float *k, const float *q, int hd) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d), _mm256_loadu_ps(q + d), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d + 8), _mm256_loadu_ps(q + d + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d + 16), _mm256_loadu_ps(q + d + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d + 24), _mm256_loadu_ps(q + d + 24), a3);
    }
    return hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

enum { ATTN_MAX_GROUP = 64, PREFETCH_KEYS = 8 };

static void attn_fast_worker(void *ctx, int ith, int nth) {
    attn_fast_job *j = ctx;
    const ft_attn_params *p = j->p;
    cpu_backend *c = j->c;
    enum ft_type kt = p->k_cache->type, vt = p->v_cache->type;
    enum ft_type kvdt = ft_quant_ops_find(kt)->vec_dot_type;
    ft_vec_dot_fn dot = cpu_vec_dot(c, kt);
    int hd = p->head_dim, full = p->n_head / p->n_head_kv; // the whole group of a KV head
    bool v16 = vt == FT_TYPE_F16 && !j->tiled;
    size_t q_bytes = ft_row_bytes(kvdt, hd);
    float *acc = c->attn_ws + (size_t)ith * c->attn_ws_per_thread; // (full, hd)
    float *qf = acc + (size_t)full * hd;                           // (full, hd): f16 queries as f32
    float *kf = qf + (size_t)full * hd;                            // (hd): a f16 key as f32
    uint8_t *qbuf = (uint8_t *)(kf + hd);                          // (full, q_bytes)
    // an f16 cache below the tiled threshold: keys converted once per group (dot_f16_values)
    bool f16_dot = kt == FT_TYPE_F16 && !j->tiled;
    size_t krow = ft_row_bytes(kt, hd), vrow = ft_row_bytes(vt, hd);
    const float *sinks = cpu_attn_sinks(p);
    // per head: the softmax denominator and maximum; per key: the scores, rescales and weights
    // (8 past the group: the exponentials run 8 heads at a time)
    float S[ATTN_MAX_GROUP], M[ATTN_MAX_GROUP + 8], sc[ATTN_MAX_GROUP + 8], ms[ATTN_MAX_GROUP + 8],
        vs[ATTN_MAX_GROUP + 8];

    // an item is a token, a KV head and a part of its group's heads (j->n_sub parts)
    const int n_sub = j->n_sub, per_sub = (p->n_head / p->n_head_kv + n_sub - 1) / n_sub;
    int64_t n_items = (int64_t)p->n_tok * p->n_head_kv * n_sub;
    for (int64_t it = ith; it < n_items; it += nth) {
        int t = (int)(it / ((int64_t)p->n_head_kv * n_sub)), hk = (int)(it / n_sub % p->n_head_kv);
        int h0 = (int)(it % n_sub) * per_sub, group = FT_MIN(per_sub, p->n_head / p->n_head_kv - h0);
        if (group <= 0) continue;
        int qpos = p->pos0 + t;
        int kmin = p->window > 0 ? FT_MAX(0, qpos - p->window + 1) : 0;
        const float *q0 = p->q + ((size_t)t * p->n_head + (size_t)hk * full + h0) * hd; // (group, hd)
        if (f16_dot)
            for (size_t i = 0; i < (size_t)group * hd; i += 8)
                _mm256_storeu_ps(qf + i, round_f16(_mm256_loadu_ps(q0 + i)));
        else if (!j->tiled)
            for (int g = 0; g < group; g++) cpu_quantize_row(kvdt, q0 + (size_t)g * hd, qbuf + g * q_bytes, hd);
        for (int g = 0; g < group; g++) {
            S[g] = 0;
            M[g] = -INFINITY;
        }
        for (int g = group; g < ((group + 7) & ~7); g++) M[g] = sc[g] = -INFINITY; // lanes past the group
        memset(acc, 0, (size_t)group * hd * sizeof(float));
        int64_t off = 0, last = -1, pf_off = 0, pf_last = -1;
        for (int k = kmin; k <= qpos; k++) {
            size_t row = (size_t)ft_kv_row_walk(p->blocks, k, &off, &last);
            if (k + PREFETCH_KEYS <= qpos) // the rows a few keys ahead (cpu_attn_prefetch_row)
                cpu_attn_prefetch_row(p, (size_t)ft_kv_row_walk(p->blocks, k + PREFETCH_KEYS, &pf_off, &pf_last), hk,
                                      krow, vrow);
            const uint8_t *kr = (const uint8_t *)p->k_cache->data + row * p->k_cache->row_bytes + hk * krow;
            const uint8_t *vr = (const uint8_t *)p->v_cache->data + row * p->v_cache->row_bytes + hk * vrow;
            // the online softmax step of each head, as the reference; a new maximum rescales
            // that head's accumulator first. The exponentials of 8 heads at a time: a head whose
            // maximum moves takes e^(old - s) as its rescale (and 1 as its weight), another
            // e^(s - max) as its weight (lanes past the group see -inf and give 0)
            if (f16_dot) {
                for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(kf + d, load_row8(kr, FT_TYPE_F16, d));
                for (int g = 0; g < group; g++) sc[g] = dot_f16_values(kf, qf + (size_t)g * hd, hd) * p->scale;
            } else {
                for (int g = 0; g < group; g++)
                    sc[g] = j->tiled ? dot_f32_f16(q0 + (size_t)g * hd, kr, hd) * p->scale
                                     : dot(hd, kr, qbuf + g * q_bytes) * p->scale;
            }
            for (int g0 = 0; g0 < group; g0 += 8) {
                const __m256 s8 = _mm256_loadu_ps(sc + g0), m8 = _mm256_loadu_ps(M + g0);
                const __m256 up = _mm256_cmp_ps(s8, m8, _CMP_GT_OQ);
                const __m256 e = exp8_nonpositive(_mm256_blendv_ps(_mm256_sub_ps(s8, m8), _mm256_sub_ps(m8, s8), up));
                const __m256 one = _mm256_set1_ps(1.0f);
                _mm256_storeu_ps(ms + g0, _mm256_blendv_ps(one, e, up));
                _mm256_storeu_ps(vs + g0, _mm256_blendv_ps(e, one, up));
                _mm256_storeu_ps(M + g0, _mm256_blendv_ps(m8, s8, up));
            }
            for (int g = 0; g < group; g++) {
                if (ms[g] != 1.0f) {
                    float *a = acc + (size_t)g * hd;
                    __m256 m8 = _mm256_set1_ps(ms[g]);
                    for (int d = 0; d < hd; d += 8) {
                        __m256 x = _mm256_mul_ps(_mm256_loadu_ps(a + d), m8);
                        _mm256_storeu_ps(a + d, v16 ? round_f16(x) : x);
                    }
                }
                S[g] = S[g] * ms[g] + vs[g];
            }
            // acc_g += v * vs_g, the value row converted once for the whole group
            for (int d = 0; d < hd; d += 8) {
                __m256 v = load_row8(vr, vt, d);
                for (int g = 0; g < group; g++) {
                    float *a = acc + (size_t)g * hd + d;
                    __m256 x = _mm256_add_ps(_mm256_loadu_ps(a), _mm256_mul_ps(v, _mm256_set1_ps(vs[g])));
                    _mm256_storeu_ps(a, v16 ? round_f16(x) : x);
                }
            }
        }
        if (sinks)
            for (int g = 0; g < group; g++) cpu_attn_sink(sinks[hk * full + h0 + g], M[g], &S[g], acc + (size_t)g * hd, hd);
        for (int g = 0; g < group; g++) {
            float inv = S[g] == 0.0f ? 0.0f : 1.0f / S[g];
            const float *a = acc + (size_t)g * hd;
            float *o = p->out + ((size_t)t * p->n_head + (size_t)hk * full + h0 + g) * hd;
            for (int d = 0; d < hd; d++) o[d] = a[d] * inv;
        }
    }
}

bool cpu_attention_fast(cpu_backend *c, const ft_attn_params *p, bool tiled) {
    int group = p->n_head / p->n_head_kv;
    enum ft_type kt = p->k_cache->type, vt = p->v_cache->type;
    bool types_ok = (kt == FT_TYPE_F16 || kt == FT_TYPE_Q8_0) && (vt == FT_TYPE_F16 || vt == FT_TYPE_Q8_0);
    if (!types_ok || group > ATTN_MAX_GROUP || p->head_dim % 32 != 0) return false;
    if (tiled && kt != FT_TYPE_F16) return false;
    // the workspace holds the group's accumulators, its queries as f32 and converted, and a key
    size_t need = (size_t)group * p->head_dim * 3 + p->head_dim + 16;
    if (need > c->attn_ws_per_thread) return false;
    attn_fast_job j = {c, p, tiled, cpu_attn_head_parts(c, p)};
    cpu_run(c, attn_fast_worker, &j);
    return true;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
