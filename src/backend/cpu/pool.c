// pool.c: the worker threads (see pool.h). Workers sleep on a condition variable between
// jobs; a generation counter tells them a new job has been posted.
#include "pool.h"
#include "../../util/util.h"

#include <pthread.h>
#include <stdlib.h>

struct ft_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    uint64_t generation; // bumped for each job
    int pending;         // workers still running the current job
    bool quit;
    ft_pool_fn fn;
    void *ctx;
};

typedef struct {
    ft_pool *pool;
    int ith;
} worker_arg;

static void *worker(void *arg) {
    worker_arg *w = arg;
    ft_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->generation == seen && !p->quit) pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        seen = p->generation;
        ft_pool_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, w->ith, p->n_threads);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
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
    pthread_cond_init(&p->done_cv, NULL);
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
    p->quit = true;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p->threads);
    free(p);
}

int ft_pool_threads(const ft_pool *p) { return p->n_threads; }

void ft_pool_run(ft_pool *p, ft_pool_fn fn, void *ctx) {
    if (p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->pending = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n_threads);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
