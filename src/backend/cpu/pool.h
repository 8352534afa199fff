// pool: a fixed pool of worker threads that runs one parallel job at a time.
//
// Created once with the backend and reused by every op, so no thread is started on the
// per-token path. ft_pool_run(pool, fn, ctx) calls fn(ctx, i, n) for i in 0..n-1 (n = the
// pool's thread count, the caller being thread 0) and returns when all have finished.
// Not reentrant: one job at a time, from one caller thread.
#ifndef FT_CPU_POOL_H
#define FT_CPU_POOL_H

#include <stdint.h>

typedef struct ft_pool ft_pool;
typedef void (*ft_pool_fn)(void *ctx, int ith, int nth);

// A pool of n_threads (>= 1) including the caller.
ft_pool *ft_pool_init(int n_threads);
void ft_pool_free(ft_pool *p); // NULL is a no-op
int ft_pool_threads(const ft_pool *p);
void ft_pool_run(ft_pool *p, ft_pool_fn fn, void *ctx);

// The [begin, end) share of n items for thread ith of nth.
static inline void ft_pool_split(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    int64_t per = (n + nth - 1) / nth;
    *begin = per * ith < n ? per * ith : n;
    *end = *begin + per < n ? *begin + per : n;
}

#endif
