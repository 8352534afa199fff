// sampler.c: the sampling chain (see sampler.h).
#include "sampler.h"
#include "../util/rng.h"
#include "../util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef struct {
    int32_t id;
    float logit, p;
} cand;

struct ft_sampler {
    ft_sampler_params p;
    int n_vocab;
    ft_rng rng;
    cand *c;          // (n_vocab) candidates, in the chain's order (logit descending, then id)
    float *pen;       // (n_vocab) the logits with the penalties applied
    float *masked;    // (n_vocab) the logits of allowed tokens, -inf for the rest
    uint64_t *order[2]; // (n_vocab) each: sort key << 32 | id, the radix sort's two buffers
    int32_t *hist;    // (penalty_last_n) ring of recent tokens
    int n_hist, hist_pos;
    int32_t *count;   // (n_vocab) occurrences in the window, rebuilt per sample
};

ft_sampler_params ft_sampler_default_params(void) {
    ft_sampler_params p = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.0f,
                           .penalty_last_n = 64, .seed = 0};
    return p;
}

ft_sampler_params ft_sampler_overlay(ft_sampler_params base, const ft_sampler_params *over, unsigned fields) {
#define TAKE(bit, field) \
    if (fields & (bit)) base.field = over->field;
    TAKE(FT_SAMPLE_TEMP, temp)
    TAKE(FT_SAMPLE_TOP_K, top_k)
    TAKE(FT_SAMPLE_TOP_P, top_p)
    TAKE(FT_SAMPLE_MIN_P, min_p)
    TAKE(FT_SAMPLE_REPEAT_PENALTY, repeat_penalty)
    TAKE(FT_SAMPLE_PRESENCE_PENALTY, presence_penalty)
    TAKE(FT_SAMPLE_FREQUENCY_PENALTY, frequency_penalty)
    TAKE(FT_SAMPLE_PENALTY_LAST_N, penalty_last_n)
    TAKE(FT_SAMPLE_SEED, seed)
#undef TAKE
    return base;
}

ft_sampler *ft_sampler_init(const ft_sampler_params *p, int n_vocab) {
    FT_ASSERT(n_vocab > 0);
    ft_sampler *s = ft_calloc(1, sizeof(*s));
    s->p = *p;
    if (s->p.penalty_last_n < 0) s->p.penalty_last_n = 0;
    s->n_vocab = n_vocab;
    s->rng = ft_rng_init(p->seed);
    s->c = ft_malloc((size_t)n_vocab * sizeof(cand));
    s->pen = ft_malloc((size_t)n_vocab * sizeof(float));
    s->masked = ft_malloc((size_t)n_vocab * sizeof(float));
    for (int i = 0; i < 2; i++) s->order[i] = ft_malloc((size_t)n_vocab * sizeof(uint64_t));
    s->hist = ft_calloc((size_t)FT_MAX(s->p.penalty_last_n, 1), sizeof(int32_t));
    s->count = ft_calloc((size_t)n_vocab, sizeof(int32_t));
    return s;
}

void ft_sampler_free(ft_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->pen);
    free(s->masked);
    free(s->order[0]);
    free(s->order[1]);
    free(s->hist);
    free(s->count);
    free(s);
}

void ft_sampler_reset(ft_sampler *s) {
    s->n_hist = s->hist_pos = 0;
    s->rng = ft_rng_init(s->p.seed);
}

void ft_sampler_accept(ft_sampler *s, int32_t token) {
    if (s->p.penalty_last_n == 0) return;
    s->hist[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->p.penalty_last_n;
    if (s->n_hist < s->p.penalty_last_n) s->n_hist++;
}

static int by_logit_desc(const void *a, const void *b) {
    float x = ((const cand *)a)->logit, y = ((const cand *)b)->logit;
    return x < y ? 1 : x > y ? -1 : (((const cand *)a)->id - ((const cand *)b)->id);
}

// Penalties as llama.cpp applies them: a repeated token's positive logit is divided by the
// repetition penalty and a negative one multiplied; then count * frequency + presence is
// subtracted. Returns the logits to sample from: logits itself without penalties, else s->pen
// (a copy with the window's tokens penalised).
static const float *apply_penalties(ft_sampler *s, const float *logits) {
    const ft_sampler_params *p = &s->p;
    if (s->n_hist == 0 || (p->repeat_penalty == 1.0f && p->presence_penalty == 0 && p->frequency_penalty == 0))
        return logits;
    memcpy(s->pen, logits, (size_t)s->n_vocab * sizeof(float));
    for (int i = 0; i < s->n_hist; i++) s->count[s->hist[i]]++;
    for (int i = 0; i < s->n_hist; i++) {
        int32_t id = s->hist[i];
        int n = s->count[id];
        if (n == 0) continue; // already applied
        float *l = &s->pen[id];
        *l = *l <= 0 ? *l * p->repeat_penalty : *l / p->repeat_penalty;
        *l -= (float)n * p->frequency_penalty + p->presence_penalty;
        s->count[id] = 0;
    }
    return s->pen;
}

// Does (va, ia) come before (vb, ib) in the chain's order (larger logit first, then smaller id,
// as by_logit_desc)?
static inline bool before(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

// s->c[0..k) = the k first tokens of v in the chain's order, in order: a heap of the best k so
// far (its root the last of them), one pass over v, then a sort of the k. The same tokens in
// the same order as sorting all of v and cutting at k, for O(n_vocab) instead of O(n log n)
// (a sort of a 152k vocabulary per token capped generation speed: docs/performance.md).
static void select_top_k(ft_sampler *s, const float *v, int k) {
    cand *h = s->c;
    int n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (n == k && !before(v[i], i, h[0].logit, h[0].id)) continue;
        int at;
        if (n < k) { // sift the new one up from the end
            at = n++;
            while (at > 0 && before(h[(at - 1) / 2].logit, h[(at - 1) / 2].id, v[i], i)) {
                h[at] = h[(at - 1) / 2];
                at = (at - 1) / 2;
            }
        } else { // replace the root and sift it down
            at = 0;
            for (;;) {
                int l = 2 * at + 1, r = l + 1, last = at;
                float lv = v[i];
                int32_t li = i;
                if (l < n && before(lv, li, h[l].logit, h[l].id)) last = l, lv = h[l].logit, li = h[l].id;
                if (r < n && before(lv, li, h[r].logit, h[r].id)) last = r;
                if (last == at) break;
                h[at] = h[last];
                at = last;
            }
        }
        h[at] = (cand){i, v[i], 0};
    }
    qsort(h, (size_t)k, sizeof(cand), by_logit_desc);
}

// Greedy: the first index of the largest of v, NaNs skipped (the scalar loop below: an index
// wins only by a strictly larger value, so NaN never wins, nor anything after a NaN v[0]).
static int argmax_scalar(const float *v, int n) {
    int best = 0;
    float bv = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] > bv) bv = v[i], best = i;
    return best;
}

#if defined(__x86_64__)
// The same in two AVX2 passes: the largest value (maxps keeps its second operand where one is
// NaN, so NaNs drop out; -0 and +0 compare equal below either way), then the first index
// equal to it.
__attribute__((target("avx2"))) static int argmax_avx2(const float *v, int n) {
    if (isnan(v[0]) || n < 16) return argmax_scalar(v, n);
    __m256 m0 = _mm256_set1_ps(v[0]), m1 = m0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(v + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(v + i + 8), m1);
    }
    float lanes[8], m;
    _mm256_storeu_ps(lanes, _mm256_max_ps(m0, m1));
    m = lanes[0];
    for (int k = 1; k < 8; k++) m = lanes[k] > m ? lanes[k] : m;
    for (; i < n; i++) m = v[i] > m ? v[i] : m;
    const __m256 mv = _mm256_set1_ps(m);
    for (i = 0; i + 8 <= n; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + i), mv, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
        if (v[i] == m) return i;
    return 0; // unreachable: m is one of v
}
#endif

static int argmax(const float *v, int n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return argmax_avx2(v, n);
#endif
    return argmax_scalar(v, n);
}

// Radix sort key: ascending keys are descending logits (-0 and +0 tie, as in by_logit_desc).
static uint32_t desc_key(float f) {
    if (f == 0.0f) f = 0.0f;
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    u = (u & 0x80000000u) ? ~u : u | 0x80000000u; // order of the floats as unsigned
    return ~u;
}

// s->c = every token of v in the chain's order: a stable LSD radix sort on the keys (11-bit
// digits, three passes) of entries that start in id order, so equal logits stay by id: the
// order qsort with by_logit_desc gives, in O(n_vocab).
static void sort_all(ft_sampler *s, const float *v) {
    int n = s->n_vocab;
    uint64_t *a = s->order[0], *b = s->order[1];
    for (int32_t i = 0; i < n; i++) a[i] = (uint64_t)desc_key(v[i]) << 32 | (uint32_t)i;
    for (int shift = 32; shift < 64; shift += 11) {
        size_t bucket[2048] = {0};
        for (int i = 0; i < n; i++) bucket[(a[i] >> shift) & 2047]++;
        size_t at = 0;
        for (int d = 0; d < 2048; d++) {
            size_t c = bucket[d];
            bucket[d] = at;
            at += c;
        }
        for (int i = 0; i < n; i++) b[bucket[(a[i] >> shift) & 2047]++] = a[i];
        uint64_t *t = a;
        a = b;
        b = t;
    }
    for (int i = 0; i < n; i++) {
        int32_t id = (int32_t)(uint32_t)a[i];
        s->c[i] = (cand){id, v[id], 0};
    }
}

static void softmax(cand *c, int n) {
    float mx = c[0].logit; // sorted: the first is the largest
    double sum = 0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf(c[i].logit - mx);
        sum += c[i].p;
    }
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

int32_t ft_sampler_sample(ft_sampler *s, const float *logits) {
    const ft_sampler_params *p = &s->p;
    int n = s->n_vocab;
    const float *v = apply_penalties(s, logits);
    if (p->temp <= 0) return argmax(v, n);
    if (p->top_k > 0 && p->top_k < n) {
        n = p->top_k;
        select_top_k(s, v, n);
    } else {
        sort_all(s, v);
    }
    // masked-out tokens (-inf) never come out of the draw, even where rounding leaves the sum
    // of the others' probabilities short of the uniform number drawn
    while (n > 1 && s->c[n - 1].logit == -INFINITY) n--;
    softmax(s->c, n);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += s->c[i].p;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0) {
        float floor_p = s->c[0].p * p->min_p;
        int keep = 1;
        while (keep < n && s->c[keep].p >= floor_p) keep++;
        n = keep;
    }
    for (int i = 0; i < n; i++) s->c[i].logit /= p->temp;
    softmax(s->c, n);
    float r = ft_rng_uniform(&s->rng);
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += s->c[i].p;
        if (r < cum) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

int32_t ft_sampler_sample_masked(ft_sampler *s, const float *logits, const uint64_t *allowed) {
    if (!allowed) return ft_sampler_sample(s, logits);
    float *v = s->masked;
    int n = s->n_vocab;
    bool any = false;
    for (int w = 0; w * 64 < n; w++) {
        uint64_t bits = allowed[w];
        int lo = w * 64, hi = FT_MIN(lo + 64, n);
        any |= bits != 0;
        if (bits == ~0ull && hi - lo == 64) {
            memcpy(v + lo, logits + lo, 64 * sizeof(float));
            continue;
        }
        for (int t = lo; t < hi; t++) v[t] = bits >> (t - lo) & 1 ? logits[t] : -INFINITY;
    }
    if (!any) return argmax(logits, n);
    int32_t t = ft_sampler_sample(s, v);
    if (allowed[t >> 6] >> (t & 63) & 1) return t;
    // every allowed logit -inf or NaN: the first allowed token
    for (t = 0; !(allowed[t >> 6] >> (t & 63) & 1); t++) {
    }
    return t;
}
