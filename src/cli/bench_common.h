// bench_common: what ft bench's modes share: a monotonic clock, the median of a run's figures,
// and the deterministic token ids both engines are fed.
#ifndef FT_CLI_BENCH_COMMON_H
#define FT_CLI_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_MAX_REPS 100

static inline double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The median of n <= BENCH_MAX_REPS figures.
static inline double bench_median(const double *v, int n) {
    double s[BENCH_MAX_REPS];
    memcpy(s, v, (size_t)n * sizeof(double));
    qsort(s, (size_t)n, sizeof(double), bench_cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

// The id of the token at position i: spread over the vocabulary, the same in llama_bench.mjs.
// salt moves a whole sequence's ids (parallel sequences share no prefix); 0 for llama_bench.mjs's.
static inline int32_t bench_token_salted(int i, int salt, int n_vocab) {
    int mod = n_vocab < 32000 ? n_vocab : 32000;
    return (int32_t)(((int64_t)i * 7919 + 13 + (int64_t)salt * 104729) % mod);
}

// s as the body of a JSON string on stdout (a path is plain text but may hold quotes).
static inline void bench_print_json_text(const char *s) {
    for (const char *c = s; *c; c++)
        printf(*c == '"' || *c == '\\' ? "\\%c" : (unsigned char)*c < 0x20 ? "?" : "%c", *c);
}

#endif
