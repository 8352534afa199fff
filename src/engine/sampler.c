// sampler.c: the sampling chain (see sampler.h).
#include "sampler.h"
#include "../util/rng.h"
#include "../util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t id;
    float logit, p;
} cand;

struct ft_sampler {
    ft_sampler_params p;
    int n_vocab;
    ft_rng rng;
    cand *c;          // (n_vocab) candidates
    int32_t *hist;    // (penalty_last_n) ring of recent tokens
    int n_hist, hist_pos;
    int32_t *count;   // (n_vocab) occurrences in the window, rebuilt per sample
};

ft_sampler_params ft_sampler_default_params(void) {
    ft_sampler_params p = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.0f,
                           .penalty_last_n = 64, .seed = 0};
    return p;
}

ft_sampler *ft_sampler_init(const ft_sampler_params *p, int n_vocab) {
    FT_ASSERT(n_vocab > 0);
    ft_sampler *s = ft_calloc(1, sizeof(*s));
    s->p = *p;
    if (s->p.penalty_last_n < 0) s->p.penalty_last_n = 0;
    s->n_vocab = n_vocab;
    s->rng = ft_rng_init(p->seed);
    s->c = ft_malloc((size_t)n_vocab * sizeof(cand));
    s->hist = ft_calloc((size_t)FT_MAX(s->p.penalty_last_n, 1), sizeof(int32_t));
    s->count = ft_calloc((size_t)n_vocab, sizeof(int32_t));
    return s;
}

void ft_sampler_free(ft_sampler *s) {
    if (!s) return;
    free(s->c);
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
// subtracted.
static void apply_penalties(ft_sampler *s) {
    const ft_sampler_params *p = &s->p;
    if (s->n_hist == 0 || (p->repeat_penalty == 1.0f && p->presence_penalty == 0 && p->frequency_penalty == 0))
        return;
    for (int i = 0; i < s->n_hist; i++) s->count[s->hist[i]]++;
    for (int i = 0; i < s->n_hist; i++) {
        int32_t id = s->hist[i];
        int n = s->count[id];
        if (n == 0) continue; // already applied
        float *l = &s->c[id].logit;
        *l = *l <= 0 ? *l * p->repeat_penalty : *l / p->repeat_penalty;
        *l -= (float)n * p->frequency_penalty + p->presence_penalty;
        s->count[id] = 0;
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
    for (int i = 0; i < n; i++) s->c[i] = (cand){i, logits[i], 0};
    apply_penalties(s);
    if (p->temp <= 0) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (s->c[i].logit > s->c[best].logit) best = i;
        return s->c[best].id;
    }
    qsort(s->c, (size_t)n, sizeof(cand), by_logit_desc);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
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
