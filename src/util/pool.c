// pool.c: the worker threads (see pool.h).
//
// Decode at batch 1 posts a few hundred short jobs per token, so waking a worker must take
// microseconds, not a trip through the scheduler: after each job a worker spins on the job
// counter (with a pause hint) for up to POOL_SPIN_NS (0.5 ms) before it sleeps on the condition
// variable, and the caller spins until the workers are done. A job is posted under the mutex,
// and a worker going to sleep re-checks the counter under it, so no wake-up is lost; the
// broadcast is skipped while no worker sleeps.
#include "pool.h"
#include "util.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

// How long an idle worker spins before sleeping: covers the gaps between the ops of a token
// (single-threaded element-wise work of a few microseconds to a fraction of a millisecond).
#define POOL_SPIN_NS 500000

struct ft_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    _Atomic uint64_t generation; // bumped for each job (under mu)
    _Atomic int pending;         // workers still running the current job
    _Atomic int sleeping;        // workers waiting on work_cv
    _Atomic bool quit;
    ft_pool_fn fn; // the current job, written before generation is bumped
    void *ctx;
    ft_pool_trace *trace;     // set by ft_pool_set_trace, or NULL
    ft_pool_job_times *times; // the current job's record while tracing, else NULL
};

typedef struct {
    ft_pool *pool;
    int ith;
} worker_arg;

uint64_t ft_pool_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Waits until the generation differs from seen (or quit); returns the new generation.
static uint64_t wait_for_job(ft_pool *p, uint64_t seen) {
    uint64_t t0 = ft_pool_now_ns();
    for (int i = 1;; i++) {
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->quit, memory_order_relaxed)) return g;
        _mm_pause();
        if (i % 256 == 0 && ft_pool_now_ns() - t0 > POOL_SPIN_NS) break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleeping, 1);
    while (atomic_load(&p->generation) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->work_cv, &p->mu);
    atomic_fetch_sub(&p->sleeping, 1);
    uint64_t g = atomic_load(&p->generation);
    pthread_mutex_unlock(&p->mu);
    return g;
}

// Runs thread ith's part of the job, timed while tracing.
static void run_part(ft_pool *p, ft_pool_fn fn, void *ctx, int ith) {
    ft_pool_job_times *t = p->times;
    if (t) t->begin_ns[ith] = ft_pool_now_ns();
    fn(ctx, ith, p->n_threads);
    if (t) t->end_ns[ith] = ft_pool_now_ns();
}

static void *worker(void *arg) {
    worker_arg *w = arg;
    ft_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->quit)) break;
        run_part(p, p->fn, p->ctx, w->ith);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
    free(w);
    return NULL;
}

ft_pool *ft_pool_init(int n_threads) {
    FT_ASSERT(n_threads >= 1);
    ft_pool *p = ft_calloc(1, sizeof(*p));
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    p->threads = ft_calloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *w = ft_malloc(sizeof(*w));
        w->pool = p;
        w->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker, w) != 0)
            ft_abort(__FILE__, __LINE__, "cannot start worker thread %d", i);
    }
    return p;
}

void ft_pool_free(ft_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, true);
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    free(p->threads);
    free(p);
}

int ft_pool_threads(const ft_pool *p) { return p->n_threads; }

// Posts the job to the workers, runs part 0 and waits for the others.
static void run_shared(ft_pool *p, ft_pool_fn fn, void *ctx) {
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    if (atomic_load(&p->sleeping) > 0) pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    run_part(p, fn, ctx, 0);
    // the workers finish within the job's time; yield now and then in case one of them
    // is not running (a machine busier than its cores)
    for (int i = 1; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) {
        _mm_pause();
        if (i % 4096 == 0) sched_yield();
    }
}

void ft_pool_set_trace(ft_pool *p, ft_pool_trace *t) {
    FT_ASSERT(!t || p->n_threads <= FT_POOL_TRACE_THREADS);
    p->trace = t;
}

void ft_pool_run(ft_pool *p, ft_pool_fn fn, void *ctx) {
    ft_pool_trace *tr = p->trace;
    p->times = tr && tr->n < tr->cap ? &tr->jobs[tr->n] : NULL;
    if (p->times) p->times->post_ns = ft_pool_now_ns();
    if (p->n_threads == 1)
        run_part(p, fn, ctx, 0);
    else
        run_shared(p, fn, ctx);
    if (p->times) {
        p->times->done_ns = ft_pool_now_ns();
        tr->n++;
        p->times = NULL;
    }
}
