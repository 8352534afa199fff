// pool: a fixed pool of worker threads that runs one parallel job at a time.
//
// Created once by its owner (the CPU backend, cpu mode's overlay) and reused by every job,
// so no thread is started on the per-token path. ft_pool_run(pool, fn, ctx) calls fn(ctx, i, n) for i in 0..n-1 (n = the
// pool's thread count, the caller being thread 0) and returns when all have finished.
// Not reentrant: one job at a time, from one caller thread.
//
// For benchmarks, a trace (ft_pool_set_trace) records the times of each job: when the caller
// posted it and saw it done, and when each thread began and ended its part. It costs one
// branch per job while unset.
#ifndef FT_UTIL_POOL_H
#define FT_UTIL_POOL_H

#include <stdint.h>

typedef struct ft_pool ft_pool;
typedef void (*ft_pool_fn)(void *ctx, int ith, int nth);

// A pool of n_threads (>= 1) including the caller.
ft_pool *ft_pool_init(int n_threads);
void ft_pool_free(ft_pool *p); // NULL is a no-op
int ft_pool_threads(const ft_pool *p);
void ft_pool_run(ft_pool *p, ft_pool_fn fn, void *ctx);

enum { FT_POOL_TRACE_THREADS = 64 };

// CLOCK_MONOTONIC nanoseconds of one job; thread i's times are begin_ns[i] / end_ns[i].
typedef struct {
    uint64_t post_ns, done_ns;
    uint64_t begin_ns[FT_POOL_TRACE_THREADS], end_ns[FT_POOL_TRACE_THREADS];
} ft_pool_job_times;

// The caller's array of cap jobs; n counts the jobs recorded (those past cap are dropped).
typedef struct {
    ft_pool_job_times *jobs;
    int cap, n;
} ft_pool_trace;

// Records every later job into t until called with NULL (the pool's threads <= 64).
void ft_pool_set_trace(ft_pool *p, ft_pool_trace *t);

// CLOCK_MONOTONIC in nanoseconds, the trace's clock.
uint64_t ft_pool_now_ns(void);

// The [begin, end) share of n items for thread ith of nth.
static inline void ft_pool_split(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    int64_t per = (n + nth - 1) / nth;
    *begin = per * ith < n ? per * ith : n;
    *end = *begin + per < n ? *begin + per : n;
}

#endif
