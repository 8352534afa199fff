// bench_sampler.c: the time to pick one token from a 151,936-token vocabulary (Qwen's), ft's
// sampler against llama.cpp's sampler chain (libllama from the npm package, loaded with
// dlopen) on the same logits: greedy, and the default chain of both (top-k 40, top-p 0.95,
// min-p 0.05, temperature 0.8, a seeded draw), and the same without top-k (every candidate
// ordered). Each arm samples a new set of logits per call (random normal, as a model's are
// not: the cost does not depend on their shape); arms take turns in rounds and the figure is
// the median round, in microseconds per token. llama.cpp's figure includes filling its
// candidate array from the logits, as llama_sampler_sample does. A measurement, not a test:
// it prints a table on stdout and asserts nothing.
//
// Usage: bench_sampler [vocab]. FT_LLAMA_LIB_DIR overrides the library folder.
#include "../src/engine/sampler.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <dlfcn.h>
#include <llama.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SETS = 16, PER_ROUND = 32, ROUNDS = 9 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    __typeof__(&llama_sampler_chain_default_params) chain_params;
    __typeof__(&llama_sampler_chain_init) chain_init;
    __typeof__(&llama_sampler_chain_add) chain_add;
    __typeof__(&llama_sampler_init_greedy) greedy;
    __typeof__(&llama_sampler_init_top_k) top_k;
    __typeof__(&llama_sampler_init_top_p) top_p;
    __typeof__(&llama_sampler_init_min_p) min_p;
    __typeof__(&llama_sampler_init_temp) temp;
    __typeof__(&llama_sampler_init_dist) dist;
    __typeof__(&llama_sampler_apply) apply;
    __typeof__(&llama_sampler_free) free;
} llama_api;

static bool load_llama(llama_api *a) {
    const char *dir = getenv("FT_LLAMA_LIB_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/libllama.v0.4.0.so",
             dir ? dir : "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64");
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "bench_sampler: llama.cpp not loaded (%s); ft alone\n", dlerror());
        return false;
    }
#define SYM(f, name) (a->f = (__typeof__(a->f))dlsym(h, name))
    return SYM(chain_params, "llama_sampler_chain_default_params") && SYM(chain_init, "llama_sampler_chain_init") &&
           SYM(chain_add, "llama_sampler_chain_add") && SYM(greedy, "llama_sampler_init_greedy") &&
           SYM(top_k, "llama_sampler_init_top_k") && SYM(top_p, "llama_sampler_init_top_p") &&
           SYM(min_p, "llama_sampler_init_min_p") && SYM(temp, "llama_sampler_init_temp") &&
           SYM(dist, "llama_sampler_init_dist") && SYM(apply, "llama_sampler_apply") &&
           SYM(free, "llama_sampler_free");
#undef SYM
}

// llama.cpp's chain for an arm: greedy, or top-k (when k > 0), top-p, min-p, temperature, draw.
static struct llama_sampler *llama_chain(const llama_api *a, int top_k, bool greedy) {
    struct llama_sampler *c = a->chain_init(a->chain_params());
    if (greedy) {
        a->chain_add(c, a->greedy());
        return c;
    }
    if (top_k > 0) a->chain_add(c, a->top_k(top_k));
    a->chain_add(c, a->top_p(0.95f, 1));
    a->chain_add(c, a->min_p(0.05f, 1));
    a->chain_add(c, a->temp(0.8f));
    a->chain_add(c, a->dist(1));
    return c;
}

int main(int argc, char **argv) {
    int n_vocab = argc > 1 ? atoi(argv[1]) : 151936;
    if (n_vocab < 1) return fprintf(stderr, "usage: bench_sampler [vocab]\n"), 2;
    float *logits = ft_malloc((size_t)SETS * (size_t)n_vocab * sizeof(float));
    ft_rng rng = ft_rng_init(7);
    for (size_t i = 0; i < (size_t)SETS * (size_t)n_vocab; i++) logits[i] = 3.0f * ft_rng_normal(&rng);
    llama_api api;
    bool have_llama = load_llama(&api);
    llama_token_data *cand = ft_malloc((size_t)n_vocab * sizeof(llama_token_data));

    const struct {
        const char *name;
        bool greedy;
        int top_k;
    } arms[] = {{"greedy", true, 0}, {"default chain", false, 40}, {"chain without top-k", false, 0}};
    printf("sampling one token of %d (us per token, median of %d rounds of %d)\n", n_vocab, ROUNDS, PER_ROUND);
    printf("%-22s %10s %10s %9s\n", "", "ft", "llama.cpp", "ft/llama");
    for (size_t a = 0; a < FT_ARRAY_LEN(arms); a++) {
        ft_sampler_params p = ft_sampler_default_params();
        p.seed = 1;
        if (arms[a].greedy) p.temp = 0;
        p.top_k = arms[a].top_k;
        ft_sampler *s = ft_sampler_init(&p, n_vocab);
        struct llama_sampler *l = have_llama ? llama_chain(&api, arms[a].top_k, arms[a].greedy) : NULL;
        double ft_us[ROUNDS], ll_us[ROUNDS];
        int64_t sink = 0;
        for (int r = 0; r < ROUNDS; r++) {
            double t0 = now_s();
            for (int i = 0; i < PER_ROUND; i++) sink += ft_sampler_sample(s, logits + (size_t)(i % SETS) * n_vocab);
            ft_us[r] = (now_s() - t0) / PER_ROUND * 1e6;
            ll_us[r] = 0;
            if (!l) continue;
            t0 = now_s();
            for (int i = 0; i < PER_ROUND; i++) {
                const float *lg = logits + (size_t)(i % SETS) * n_vocab;
                for (int t = 0; t < n_vocab; t++) cand[t] = (llama_token_data){t, lg[t], 0.0f};
                llama_token_data_array cur = {cand, (size_t)n_vocab, -1, false};
                api.apply(l, &cur);
                sink += cur.data[cur.selected].id;
            }
            ll_us[r] = (now_s() - t0) / PER_ROUND * 1e6;
        }
        qsort(ft_us, ROUNDS, sizeof(double), by_double);
        qsort(ll_us, ROUNDS, sizeof(double), by_double);
        double f = ft_us[ROUNDS / 2], g = ll_us[ROUNDS / 2];
        if (l)
            printf("%-22s %10.1f %10.1f %8.2fx\n", arms[a].name, f, g, g / f);
        else
            printf("%-22s %10.1f %10s %9s\n", arms[a].name, f, "-", "-");
        if (sink == 42) printf("\n"); // keeps the draws from being optimised away
        ft_sampler_free(s);
        if (l) api.free(l);
    }
    printf("(ft/llama: llama.cpp's time over ft's; above 1, ft is faster)\n");
    free(cand);
    free(logits);
    return 0;
}
