// prep.c: the prep threads (see prep.h). One mutex guards both lists; a finished task goes to
// the done list and wakes the loop with event_active (libevent's thread support is on).
#include "prep.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct task {
    srv_prep_fn work, done;
    void *ctx;
    struct task *next;
} task;

struct srv_prep {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task *todo, *todo_tail; // FIFO
    task *finished;         // LIFO: done callbacks are independent
    int pending;            // queued or running
    bool stop;
    struct event *ev_done;
    pthread_t *threads;
    int n_threads;
};

static void *prep_thread(void *arg) {
    srv_prep *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->todo && !p->stop)
            pthread_cond_wait(&p->cv, &p->mu);
        task *t = p->todo;
        if (!t) break; // stopping with nothing left
        p->todo = t->next;
        if (!p->todo) p->todo_tail = NULL;
        pthread_mutex_unlock(&p->mu);
        t->work(t->ctx);
        pthread_mutex_lock(&p->mu);
        t->next = p->finished;
        p->finished = t;
        if (p->ev_done) event_active(p->ev_done, EV_READ, 0);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void run_finished(srv_prep *p) {
    pthread_mutex_lock(&p->mu);
    task *t = p->finished;
    p->finished = NULL;
    pthread_mutex_unlock(&p->mu);
    while (t) {
        task *next = t->next;
        t->done(t->ctx);
        free(t);
        pthread_mutex_lock(&p->mu);
        p->pending--;
        pthread_mutex_unlock(&p->mu);
        t = next;
    }
}

static void on_done(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    run_finished(arg);
}

srv_prep *srv_prep_init(struct event_base *base, int n_threads, ft_err *err) {
    FT_ASSERT(n_threads >= 1);
    srv_prep *p = ft_calloc(1, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (!(p->ev_done = event_new(base, -1, 0, on_done, p))) {
        srv_prep_free(p);
        return ft_err_set(err, "cannot create the prep threads' event"), NULL;
    }
    p->threads = ft_calloc((size_t)n_threads, sizeof(pthread_t));
    for (; p->n_threads < n_threads; p->n_threads++)
        if (pthread_create(&p->threads[p->n_threads], NULL, prep_thread, p) != 0) {
            srv_prep_free(p);
            return ft_err_set(err, "cannot start the prep threads"), NULL;
        }
    return p;
}

void srv_prep_submit(srv_prep *p, srv_prep_fn work, srv_prep_fn done, void *ctx) {
    task *t = ft_malloc(sizeof(*t));
    *t = (task){work, done, ctx, NULL};
    pthread_mutex_lock(&p->mu);
    if (p->todo_tail)
        p->todo_tail->next = t;
    else
        p->todo = t;
    p->todo_tail = t;
    p->pending++;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

int srv_prep_pending(srv_prep *p) {
    pthread_mutex_lock(&p->mu);
    int n = p->pending;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void srv_prep_free(srv_prep *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    run_finished(p);
    if (p->ev_done) event_free(p->ev_done);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}
