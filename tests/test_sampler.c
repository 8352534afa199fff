// test_sampler.c: the sampling chain against what each step must do.
#include "test.h"
#include "../src/engine/sampler.h"
#include "../src/engine/stop.h"

#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST(sampler_greedy_and_penalties) {
    float lg[5] = {1.0f, 3.0f, 2.9f, -1.0f, 0.0f};
    ft_sampler_params p = ft_sampler_default_params();
    p.temp = 0;
    ft_sampler *s = ft_sampler_init(&p, 5);
    CHECK(ft_sampler_sample(s, lg) == 1);
    ft_sampler_free(s);
    // token 1 seen: repetition penalty 1.5 divides its logit (3 -> 2), 2.9 wins
    p.repeat_penalty = 1.5f;
    s = ft_sampler_init(&p, 5);
    ft_sampler_accept(s, 1);
    CHECK(ft_sampler_sample(s, lg) == 2);
    ft_sampler_free(s);
    // presence penalty subtracts once, frequency per occurrence
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.05f;
    s = ft_sampler_init(&p, 5);
    ft_sampler_accept(s, 1);
    CHECK(ft_sampler_sample(s, lg) == 1, "3 - 0.05 still beats 2.9");
    ft_sampler_free(s);
    p.presence_penalty = 0;
    p.frequency_penalty = 0.06f;
    s = ft_sampler_init(&p, 5);
    ft_sampler_accept(s, 1);
    CHECK(ft_sampler_sample(s, lg) == 1, "one occurrence: 3 - 0.06");
    ft_sampler_accept(s, 1);
    CHECK(ft_sampler_sample(s, lg) == 2, "two occurrences: 3 - 0.12 < 2.9");
    ft_sampler_free(s);
    // negative logits are multiplied by the repetition penalty (pushed further down)
    float neg[3] = {-1.0f, -1.2f, -5.0f};
    p = ft_sampler_default_params();
    p.temp = 0;
    p.repeat_penalty = 1.5f;
    s = ft_sampler_init(&p, 3);
    ft_sampler_accept(s, 0);
    CHECK(ft_sampler_sample(s, neg) == 1, "-1 * 1.5 = -1.5 < -1.2");
    ft_sampler_free(s);
}

// With temperature, the draws follow the filtered distribution: top-k, top-p and min-p cut
// the tail, and the frequencies match the softmax of the rest.
TEST(sampler_filters_and_frequencies) {
    float lg[6] = {2.0f, 1.5f, 1.0f, 0.0f, -1.0f, -3.0f};
    int count[6];
    ft_sampler_params p = ft_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 3;
    p.top_p = 1.0f;
    p.min_p = 0;
    p.seed = 3;
    ft_sampler *s = ft_sampler_init(&p, 6);
    memset(count, 0, sizeof(count));
    enum { N = 20000 };
    for (int i = 0; i < N; i++) count[ft_sampler_sample(s, lg)]++;
    CHECK(count[3] == 0 && count[4] == 0 && count[5] == 0, "top-k 3 let the tail through");
    double z = exp(2.0) + exp(1.5) + exp(1.0);
    for (int i = 0; i < 3; i++) {
        double want = exp(lg[i]) / z;
        CHECK(fabs((double)count[i] / N - want) < 0.015, "token %d: %.3f vs %.3f", i, (double)count[i] / N, want);
    }
    ft_sampler_free(s);
    // min-p 0.5: only tokens with p >= 0.5 * p_max survive (tokens 0 and 1)
    p.top_k = 0;
    p.min_p = 0.5f;
    s = ft_sampler_init(&p, 6);
    memset(count, 0, sizeof(count));
    for (int i = 0; i < 2000; i++) count[ft_sampler_sample(s, lg)]++;
    CHECK(count[0] > 0 && count[1] > 0 && count[2] + count[3] + count[4] + count[5] == 0);
    ft_sampler_free(s);
    // top-p 0.5: the first token alone holds ~0.47 of the mass, the first two pass 0.5
    p.min_p = 0;
    p.top_p = 0.5f;
    s = ft_sampler_init(&p, 6);
    memset(count, 0, sizeof(count));
    for (int i = 0; i < 2000; i++) count[ft_sampler_sample(s, lg)]++;
    CHECK(count[0] > 0 && count[1] > 0 && count[2] == 0, "top-p kept %d %d %d", count[0], count[1], count[2]);
    ft_sampler_free(s);
    // the same seed gives the same sequence
    p.top_p = 1.0f;
    ft_sampler *a = ft_sampler_init(&p, 6), *b = ft_sampler_init(&p, 6);
    bool same = true;
    for (int i = 0; i < 100; i++) same &= ft_sampler_sample(a, lg) == ft_sampler_sample(b, lg);
    CHECK(same);
    ft_sampler_free(a);
    ft_sampler_free(b);
}

// A grammar's mask: only allowed tokens come out, greedy or drawn, whatever the filters (top-k
// wider than the allowed set, the default min-p, penalties on a masked token), and drawn ones
// follow the softmax of the allowed logits alone.
TEST(sampler_masked_draws_only_allowed_tokens) {
    enum { V = 300, N = 30000 };
    float lg[V];
    ft_rng rng = ft_rng_init(9);
    for (int i = 0; i < V; i++) lg[i] = 4 * ft_rng_normal(&rng);
    uint64_t allowed[(V + 63) / 64] = {0};
    static const int keep[] = {3, 64, 65, 130, 299};
    for (size_t i = 0; i < FT_ARRAY_LEN(keep); i++) allowed[keep[i] >> 6] |= 1ull << (keep[i] & 63);
    int best = keep[0];
    for (size_t i = 0; i < FT_ARRAY_LEN(keep); i++) best = lg[keep[i]] > lg[best] ? keep[i] : best;
    ft_sampler_params p = ft_sampler_default_params();
    p.temp = 0;
    ft_sampler *s = ft_sampler_init(&p, V);
    CHECK(ft_sampler_sample_masked(s, lg, allowed) == best);
    ft_sampler_free(s);
    p = ft_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 50;
    p.top_p = 1.0f;
    p.min_p = 0;
    p.repeat_penalty = 1.3f;
    s = ft_sampler_init(&p, V);
    ft_sampler_accept(s, 7); // a penalty on a masked token changes nothing
    int count[V] = {0};
    for (int i = 0; i < N; i++) count[ft_sampler_sample_masked(s, lg, allowed)]++;
    double z = 0;
    for (size_t i = 0; i < FT_ARRAY_LEN(keep); i++) z += exp(lg[keep[i]]);
    int outside = N;
    for (size_t i = 0; i < FT_ARRAY_LEN(keep); i++) {
        int t = keep[i];
        outside -= count[t];
        double want = exp(lg[t]) / z;
        CHECK(fabs((double)count[t] / N - want) < 0.01, "token %d: %.3f vs %.3f", t, (double)count[t] / N, want);
    }
    CHECK(outside == 0, "%d draws outside the mask", outside);
    ft_sampler_free(s);
    // one allowed token whose logit is far below the rest: it is the only answer, also with the
    // default filters (min-p against the raw maximum would cut it)
    uint64_t one[(V + 63) / 64] = {0};
    int lowest = 0;
    for (int i = 0; i < V; i++) lowest = lg[i] < lg[lowest] ? i : lowest;
    one[lowest >> 6] |= 1ull << (lowest & 63);
    p = ft_sampler_default_params();
    s = ft_sampler_init(&p, V);
    bool only = true;
    for (int i = 0; i < 200; i++) only &= ft_sampler_sample_masked(s, lg, one) == lowest;
    CHECK(only);
    ft_sampler_free(s);
}

// The chain as written first (every candidate sorted with qsort, then cut), the reference the
// selection of the first k (a heap) and the full sort (a radix sort) must match draw for draw.
typedef struct {
    int32_t id;
    float logit, p;
} ref_cand;

static int ref_desc(const void *a, const void *b) {
    float x = ((const ref_cand *)a)->logit, y = ((const ref_cand *)b)->logit;
    return x < y ? 1 : x > y ? -1 : (((const ref_cand *)a)->id - ((const ref_cand *)b)->id);
}

static void ref_softmax(ref_cand *c, int n) {
    float mx = c[0].logit;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += c[i].p = expf(c[i].logit - mx);
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

static int32_t ref_sample(const ft_sampler_params *p, ft_rng *rng, const int32_t *hist, int n_hist,
                          const float *logits, int n, ref_cand *c) {
    for (int i = 0; i < n; i++) c[i] = (ref_cand){i, logits[i], 0};
    bool pen = p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0;
    for (int i = 0; pen && i < n_hist; i++) {
        bool first = true;
        int count = 0;
        for (int j = 0; j < n_hist; j++) {
            count += hist[j] == hist[i];
            if (j < i && hist[j] == hist[i]) first = false;
        }
        if (!first) continue;
        float *l = &c[hist[i]].logit;
        *l = *l <= 0 ? *l * p->repeat_penalty : *l / p->repeat_penalty;
        *l -= (float)count * p->frequency_penalty + p->presence_penalty;
    }
    if (p->temp <= 0) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i;
        return best;
    }
    qsort(c, (size_t)n, sizeof(ref_cand), ref_desc);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    ref_softmax(c, n);
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < n; i++)
            if ((cum += c[i].p) >= p->top_p) {
                n = i + 1;
                break;
            }
    }
    if (p->min_p > 0) {
        int keep = 1;
        while (keep < n && c[keep].p >= c[0].p * p->min_p) keep++;
        n = keep;
    }
    for (int i = 0; i < n; i++) c[i].logit /= p->temp;
    ref_softmax(c, n);
    float r = ft_rng_uniform(rng);
    double cum = 0;
    for (int i = 0; i < n; i++)
        if (r < (cum += c[i].p)) return c[i].id;
    return c[n - 1].id;
}

// Random logits with many ties (values on a coarse grid, and -0 beside +0), every filter
// setting and penalties on and off: the sampler draws exactly what the reference draws.
TEST(sampler_matches_the_sorting_reference) {
    const int vocabs[] = {1, 7, 300, 4099};
    const int top_ks[] = {0, 1, 5, 40, 298, 300, 1000};
    const float top_ps[] = {1.0f, 0.9f, 0.3f}, min_ps[] = {0, 0.05f, 0.5f}, temps[] = {0, 0.7f, 1.5f};
    ft_rng data = ft_rng_init(0x5A3);
    int cases = 0, mismatches = 0;
    for (size_t vi = 0; vi < FT_ARRAY_LEN(vocabs); vi++) {
        int n = vocabs[vi];
        float *lg = malloc((size_t)n * sizeof(float));
        ref_cand *c = malloc((size_t)n * sizeof(ref_cand));
        for (size_t ki = 0; ki < FT_ARRAY_LEN(top_ks); ki++)
            for (size_t pi = 0; pi < FT_ARRAY_LEN(top_ps); pi++)
                for (size_t mi = 0; mi < FT_ARRAY_LEN(min_ps); mi++)
                    for (size_t ti = 0; ti < FT_ARRAY_LEN(temps); ti++)
                        for (int pen = 0; pen < 2; pen++) {
                            ft_sampler_params p = ft_sampler_default_params();
                            p.top_k = top_ks[ki];
                            p.top_p = top_ps[pi];
                            p.min_p = min_ps[mi];
                            p.temp = temps[ti];
                            p.repeat_penalty = pen ? 1.3f : 1.0f;
                            p.frequency_penalty = pen ? 0.25f : 0;
                            p.penalty_last_n = 8;
                            p.seed = (uint64_t)cases;
                            ft_sampler *s = ft_sampler_init(&p, n);
                            ft_rng rng = ft_rng_init(p.seed);
                            int32_t hist[8];
                            int n_hist = 0, at = 0;
                            for (int step = 0; step < 12; step++) {
                                for (int i = 0; i < n; i++) {
                                    float x = ft_rng_normal(&data);
                                    lg[i] = step % 2 ? roundf(x * 4) / 4 : x; // ties on odd steps
                                    if (lg[i] == 0 && (i & 1)) lg[i] = -0.0f;
                                }
                                int32_t got = ft_sampler_sample(s, lg);
                                int32_t want = ref_sample(&p, &rng, hist, n_hist, lg, n, c);
                                if (got != want && mismatches++ < 5)
                                    CHECK(got == want, "vocab %d top-k %d top-p %g min-p %g temp %g pen %d step %d: %d, "
                                          "reference %d", n, p.top_k, p.top_p, p.min_p, p.temp, pen, step, got, want);
                                ft_sampler_accept(s, want);
                                hist[at] = want;
                                at = (at + 1) % 8;
                                n_hist = n_hist < 8 ? n_hist + 1 : 8;
                            }
                            ft_sampler_free(s);
                            cases++;
                        }
        free(lg);
        free(c);
    }
    CHECK(mismatches == 0, "%d draws differ over %d cases", mismatches, cases);
}

// Greedy is the first index of the largest logit, NaNs skipped, as the plain loop has it: at
// lengths around the vector width, with the maximum anywhere (the tail too), ties, -0 beside
// +0, infinities and NaNs (first, or among the rest).
TEST(sampler_greedy_is_the_first_maximum) {
    ft_sampler_params p = ft_sampler_default_params();
    p.temp = 0;
    ft_rng rng = ft_rng_init(0x6EED);
    enum { MAX_N = 300 };
    float v[MAX_N];
    int cases = 0, wrong = 0;
    for (int n = 1; n <= MAX_N; n += n < 40 ? 1 : 37)
        for (int kind = 0; kind < 6; kind++) {
            for (int i = 0; i < n; i++) v[i] = roundf(ft_rng_normal(&rng) * 2) / 2; // ties
            int at = (int)(ft_rng_next(&rng) % (uint64_t)n);
            if (kind == 1) v[at] = 1e30f;
            if (kind == 2) v[at] = INFINITY, v[n - 1] = INFINITY;
            if (kind == 3) v[at] = NAN;
            if (kind == 4) v[0] = NAN;
            if (kind == 5)
                for (int i = 0; i < n; i++) v[i] = i % 3 ? -0.0f : 0.0f; // all zeros, both signs
            int want = 0;
            for (int i = 1; i < n; i++)
                if (v[i] > v[want]) want = i;
            ft_sampler *s = ft_sampler_init(&p, n);
            int got = ft_sampler_sample(s, v);
            ft_sampler_free(s);
            if (got != want && wrong++ < 5) CHECK(got == want, "n %d kind %d: %d, want %d", n, kind, got, want);
            cases++;
        }
    CHECK(wrong == 0, "%d of %d wrong", wrong, cases);
}

typedef struct {
    char buf[256];
    size_t n;
} sink;

static void collect(void *ctx, const char *text, size_t len) {
    sink *s = ctx;
    memcpy(s->buf + s->n, text, len);
    s->n += len;
    s->buf[s->n] = 0;
}

TEST(stop_strings_hold_back_and_cut) {
    const char *stops[] = {"</end>", "STOP"};
    ft_stop *st = ft_stop_init(stops, 2);
    sink out = {{0}, 0};
    const char *pieces[] = {"Hello <", "/en", "d wait", "</e", "nd> never"};
    bool stopped = false;
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]) && !stopped; i++) {
        stopped = ft_stop_feed(st, pieces[i], strlen(pieces[i]), collect, &out);
        if (i == 0) CHECK(!strcmp(out.buf, "Hello "), "a possible stop start is held back: '%s'", out.buf);
    }
    CHECK(stopped);
    CHECK(!strcmp(out.buf, "Hello </end wait"), "got '%s'", out.buf);
    ft_stop_free(st);
    // no stop: everything comes out, held text on flush
    st = ft_stop_init(stops, 2);
    out.n = 0;
    out.buf[0] = 0;
    CHECK(!ft_stop_feed(st, "abc ST", 6, collect, &out));
    CHECK(!strcmp(out.buf, "abc "), "got '%s'", out.buf);
    ft_stop_flush(st, collect, &out);
    CHECK(!strcmp(out.buf, "abc ST"), "got '%s'", out.buf);
    ft_stop_free(st);
}
