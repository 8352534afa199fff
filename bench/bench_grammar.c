// bench_grammar.c: what constrained decoding costs per token: the grammar's token mask (and
// advancing the matcher over the chosen token) for a JSON schema over a real vocabulary
// (Qwen2's 151,936 tokens by default), and the sampler's masked draw beside the plain one.
//
// Each request starts a fresh matcher, as ft serve does (a matcher and its cached masks belong
// to one sequence), so a request pays for every state it reaches the first time. Workloads:
//   documents  JSON replies valid under the schema (compact and pretty-printed), tokenized with
//              the vocabulary as a model would write them, fed token by token: per token the
//              mask, a check that it allows the token, then accept;
//   random     tokens drawn uniformly from each mask (no end before 200 tokens): states a model
//              rarely reaches (long keys of additional objects, odd escapes);
//   object     the documents again under response_format json_object (any object).
// Per workload: tokens, mean, median, p99 and worst microseconds per token, masks walked and
// answered from the cache. Single-threaded (run it under taskset -c N for one core); times are
// the thread's CPU time. A measurement, not a test: it prints a table and fails only if a
// document is refused.
//
// Usage: bench_grammar [--vocab FILE.gguf] [--requests N] [--seed S]
#include "../src/engine/grammar.h"
#include "../src/engine/json_schema.h"
#include "../src/engine/sampler.h"
#include "../src/gguf/gguf.h"
#include "../src/tokenizer/tokenizer.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The thread's CPU time: on a shared machine, time the scheduler gave other processes is not
// counted (their effect on the caches is).
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"email\":{\"type\":\"string\",\"maxLength\":80},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":"
    "\"string\"},\"zip\":{\"type\":\"string\"}},\"required\":[\"street\",\"city\"],\"additionalProperties\":false},"
    "\"status\":{\"enum\":[\"active\",\"inactive\",\"pending\"]},"
    "\"score\":{\"type\":\"number\"},"
    "\"created\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"notes\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"at\":{\"type\":\"string\","
    "\"format\":\"date\"},\"text\":{\"type\":\"string\"}},\"required\":[\"at\",\"text\"]}}"
    "},\"required\":[\"name\",\"age\",\"tags\",\"status\"],\"additionalProperties\":false}";

static const char *const k_docs[] = {
    "{\"name\":\"Ada Lovelace\",\"age\":36,\"email\":\"ada@example.org\",\"tags\":[\"math\",\"engines\",\"poetry\"],"
    "\"address\":{\"street\":\"12 St James's Square\",\"city\":\"London\"},\"status\":\"inactive\",\"score\":98.5,"
    "\"created\":\"1843-09-05T10:30:00Z\",\"notes\":[{\"at\":\"1843-07-01\",\"text\":\"Note G: the first "
    "published program, for Bernoulli numbers.\"}]}",
    "{\n  \"name\": \"\xe6\x9d\x8e\xe5\x9b\x9b (Li Si)\",\n  \"age\": 28,\n  \"tags\": [\n    \"\xe5\x8c\x97\xe4\xba\xac\",\n"
    "    \"engineer\"\n  ],\n  \"address\": {\n    \"street\": \"\xe9\x95\xbf\xe5\xae\x89\xe8\xa1\x97 1\xe5\x8f\xb7\",\n"
    "    \"city\": \"Beijing\",\n    \"zip\": \"100000\"\n  },\n  \"status\": \"active\",\n  \"score\": -0.25e-3\n}",
    "{\"name\": \"Quote \\\"Q\\\" Backslash \\\\ tab\\t and \\u00e9\", \"age\": 150, \"tags\": [], \"status\": "
    "\"pending\", \"notes\": [{\"at\": \"2024-02-29\", \"text\": \"leap day\"}, {\"at\": \"2023-12-31\", \"text\": "
    "\"A longer note with several sentences. It goes on for a while, as model output often does, with numbers "
    "like 3.14159 and lists: one, two, three.\"}]}",
};

typedef struct {
    double *us;
    int n, cap;
    long walked, cached;
} stats;

static void add(stats *s, double us) {
    if (s->n == s->cap) s->us = ft_realloc(s->us, (size_t)(s->cap = s->cap ? 2 * s->cap : 1024) * sizeof(double));
    s->us[s->n++] = us;
}

static void report(const char *name, stats *s) {
    qsort(s->us, (size_t)s->n, sizeof(double), by_double);
    double sum = 0;
    for (int i = 0; i < s->n; i++) sum += s->us[i];
    printf("%-10s %8d %10.1f %10.1f %10.1f %10.1f %10ld %10ld\n", name, s->n, sum / s->n, s->us[s->n / 2],
           s->us[(int)(0.99 * (s->n - 1))], s->us[s->n - 1], s->walked, s->cached);
}

static void count_masks(stats *s, ft_grammar_matcher *m) {
    ft_grammar_matcher_stats st;
    ft_grammar_matcher_stats_get(m, &st);
    s->walked += st.masks_computed;
    s->cached += st.masks_cached;
}

// The documents through g, token by token, requests times each; false if one is refused.
static bool run_docs(const ft_grammar *g, const ft_grammar_vocab *gv, const tok_vocab *v, int requests, stats *s) {
    for (int r = 0; r < requests; r++)
        for (size_t d = 0; d < FT_ARRAY_LEN(k_docs); d++) {
            tok_ids ids = {0};
            tok_encode(v, k_docs[d], strlen(k_docs[d]), false, false, &ids);
            ft_grammar_matcher *m = ft_grammar_matcher_init(g, gv, NULL);
            for (size_t i = 0; i <= ids.n; i++) {
                double t0 = now_s();
                const uint64_t *mask = ft_grammar_matcher_mask(m);
                bool ok = mask != NULL;
                if (ok && i < ids.n) {
                    tok_id t = ids.ids[i];
                    ok = (mask[t >> 6] >> (t & 63) & 1) && ft_grammar_matcher_accept(m, t);
                }
                add(s, (now_s() - t0) * 1e6);
                if (!ok) {
                    fprintf(stderr, "bench_grammar: document %zu refused at token %zu\n", d, i);
                    return false;
                }
            }
            if (!ft_grammar_matcher_accepting(m)) {
                fprintf(stderr, "bench_grammar: document %zu does not end the grammar\n", d);
                return false;
            }
            count_masks(s, m);
            ft_grammar_matcher_free(m);
            tok_ids_free(&ids);
        }
    return true;
}

// Tokens drawn uniformly from each mask, up to 400 per request (an end allowed after 200).
static void run_random(const ft_grammar *g, const ft_grammar_vocab *gv, const tok_vocab *v, int requests,
                       uint64_t seed, stats *s) {
    ft_rng rng = ft_rng_init(seed);
    int n_vocab = ft_grammar_vocab_n(gv);
    int32_t *cand = ft_malloc((size_t)n_vocab * sizeof(int32_t));
    for (int r = 0; r < requests; r++) {
        ft_grammar_matcher *m = ft_grammar_matcher_init(g, gv, NULL);
        for (int i = 0; i < 400; i++) {
            double t0 = now_s();
            const uint64_t *mask = ft_grammar_matcher_mask(m);
            double t1 = now_s();
            if (!mask) break;
            int n = 0;
            for (int t = 0; t < n_vocab; t++)
                if ((mask[t >> 6] >> (t & 63) & 1) && (i >= 200 || !tok_is_eog(v, t))) cand[n++] = t;
            if (!n) break;
            int32_t t = cand[ft_rng_next(&rng) % (uint64_t)n];
            if (tok_is_eog(v, t)) break;
            double t2 = now_s();
            ft_grammar_matcher_accept(m, t);
            add(s, (t1 - t0 + now_s() - t2) * 1e6); // the choice itself is not the grammar's cost
        }
        count_masks(s, m);
        ft_grammar_matcher_free(m);
    }
    free(cand);
}

// The sampler's draw from 151,936 logits with and without a mask (the default chain).
static void sampler_cost(int n_vocab, const ft_grammar *g, const ft_grammar_vocab *gv) {
    ft_rng rng = ft_rng_init(1);
    float *logits = ft_malloc((size_t)n_vocab * sizeof(float));
    for (int i = 0; i < n_vocab; i++) logits[i] = 3 * ft_rng_normal(&rng);
    ft_sampler_params p = ft_sampler_default_params();
    ft_sampler *s = ft_sampler_init(&p, n_vocab);
    ft_grammar_matcher *m = ft_grammar_matcher_init(g, gv, NULL);
    const char *inside = "{\"name\":\"Ada";
    ft_grammar_matcher_feed(m, inside, strlen(inside)); // inside a string: nearly every token allowed
    const uint64_t *in_string = ft_grammar_matcher_mask(m);
    ft_grammar_matcher *m2 = ft_grammar_matcher_init(g, gv, NULL);
    const uint64_t *at_start = ft_grammar_matcher_mask(m2); // a few tokens allowed
    enum { N = 400 };
    double t0 = now_s();
    for (int i = 0; i < N; i++) ft_sampler_sample(s, logits);
    double plain = (now_s() - t0) * 1e6 / N;
    t0 = now_s();
    for (int i = 0; i < N; i++) ft_sampler_sample_masked(s, logits, in_string);
    double wide = (now_s() - t0) * 1e6 / N;
    t0 = now_s();
    for (int i = 0; i < N; i++) ft_sampler_sample_masked(s, logits, at_start);
    double narrow = (now_s() - t0) * 1e6 / N;
    printf("\nsampler (default chain, %d logits): plain %.1f us, masked inside a string %.1f us, masked at the "
           "start %.1f us\n",
           n_vocab, plain, wide, narrow);
    ft_grammar_matcher_free(m);
    ft_grammar_matcher_free(m2);
    ft_sampler_free(s);
    free(logits);
}

int main(int argc, char **argv) {
    char vocab_path[1024];
    const char *shared = getenv("FT_SHARED");
    snprintf(vocab_path, sizeof(vocab_path), "%s/vocab/ggml-vocab-qwen2.gguf", shared ? shared : "../shared");
    int requests = 20;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
            snprintf(vocab_path, sizeof(vocab_path), "%s", argv[++i]);
        else if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            requests = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_grammar [--vocab FILE.gguf] [--requests N] [--seed S]\n");
            return 2;
        }
    }
    ft_err err = {{0}};
    gguf_file *f = gguf_open(vocab_path, &err);
    tok_vocab *v = f ? tok_vocab_load(f, &err) : NULL;
    gguf_close(f);
    if (!v) {
        fprintf(stderr, "bench_grammar: %s: %s\n", vocab_path, err.msg);
        return 1;
    }
    int n_vocab = tok_n_tokens(v);
    double t0 = now_s();
    ft_grammar_vocab *gv = ft_grammar_vocab_init(v, n_vocab);
    double t_vocab = now_s() - t0;
    json_t *schema = json_loads(k_schema, 0, NULL);
    t0 = now_s();
    ft_grammar *g = ft_json_schema_grammar(schema, false, &err);
    double t_schema = now_s() - t0;
    ft_grammar *any = ft_json_schema_grammar(NULL, false, &err);
    json_decref(schema);
    if (!g || !any) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    printf("vocabulary %s: %d tokens, trie of %zu nodes built in %.1f ms; schema compiled in %.2f ms (%zu "
           "symbols)\n\n",
           vocab_path, n_vocab, ft_grammar_vocab_n_nodes(gv), t_vocab * 1e3, t_schema * 1e3, ft_grammar_n_symbols(g));
    printf("%-10s %8s %10s %10s %10s %10s %10s %10s\n", "workload", "tokens", "mean us", "p50 us", "p99 us", "max us",
           "walked", "cached");
    stats docs = {0}, rnd = {0}, obj = {0};
    bool ok = run_docs(g, gv, v, requests, &docs);
    if (ok) report("documents", &docs);
    run_random(g, gv, v, requests, seed, &rnd);
    report("random", &rnd);
    ok = ok && run_docs(any, gv, v, requests, &obj);
    if (ok) report("object", &obj);
    sampler_cost(n_vocab, g, gv);
    free(docs.us);
    free(rnd.us);
    free(obj.us);
    ft_grammar_free(g);
    ft_grammar_free(any);
    ft_grammar_vocab_free(gv);
    tok_vocab_free(v);
    return ok ? 0 : 1;
}
