// test_sampler.c: the sampling chain against what each step must do.
#include "test.h"
#include "../src/engine/sampler.h"
#include "../src/engine/stop.h"

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
