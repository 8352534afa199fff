// deadline.c: a deadline for each request to arrive whole (see deadline.h).
//
// libevent 2.1's evhttp shows neither when a request starts nor when a connection goes, so the
// watch holds a reference on each connection's bufferevent: after evhttp frees one, its
// callbacks read back as NULL and the sweep drops the reference (which closes the socket). A
// connection past its deadline is shut down on the socket; evhttp then sees the client gone
// and frees it as it does any closed connection.
#include "deadline.h"
#include "../util/util.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

// How often the sweep looks: the deadline holds to within this, and a freed connection's
// socket closes within this of evhttp's free.
enum { SWEEP_MS = 250 };

typedef struct {
    struct bufferevent *bev;
    int64_t deadline_ms; // 0: a request is in hand (its reply not yet sent)
} watched;

struct srv_deadlines {
    struct event_base *base;
    struct event *sweep;
    int64_t timeout_ms;
    watched *w;
    int n, cap;
    int64_t closed; // connections shut down for their deadline
};

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Drops the watch on w[i] (the last moves into its place).
static void unwatch(srv_deadlines *d, int i) {
    bufferevent_decref(d->w[i].bev);
    d->w[i] = d->w[--d->n];
}

static void on_sweep(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    srv_deadlines *d = arg;
    int64_t now = now_ms();
    int late = 0;
    for (int i = 0; i < d->n;) {
        // evhttp keeps its event callback on a connection's bufferevent from start to free (its
        // read callback is off while it writes a reply); bufferevent_free clears them all
        bufferevent_event_cb eventcb = NULL;
        bufferevent_getcb(d->w[i].bev, NULL, NULL, &eventcb, NULL);
        if (!eventcb) { // evhttp has freed the connection
            unwatch(d, i);
            continue;
        }
        evutil_socket_t s = bufferevent_getfd(d->w[i].bev);
        if (d->w[i].deadline_ms && now > d->w[i].deadline_ms && s >= 0) {
            shutdown(s, SHUT_RDWR);
            d->w[i].deadline_ms = 0;
            late++;
        }
        i++;
    }
    if (late && d->closed == 0)
        FT_LOG_WARN("ft serve: closed a connection that sent no whole request within --timeout %lld s "
                    "(such closes are counted, not logged again)",
                    (long long)(d->timeout_ms / 1000));
    d->closed += late;
}

srv_deadlines *srv_deadlines_init(struct event_base *base, int timeout_s) {
    srv_deadlines *d = ft_calloc(1, sizeof(*d));
    d->base = base;
    d->timeout_ms = (int64_t)timeout_s * 1000;
    d->sweep = event_new(base, -1, EV_PERSIST, on_sweep, d);
    FT_ASSERT(d->sweep);
    struct timeval tv = {0, SWEEP_MS * 1000};
    event_add(d->sweep, &tv);
    return d;
}

void srv_deadlines_free(srv_deadlines *d) {
    if (!d) return;
    event_free(d->sweep);
    while (d->n > 0)
        unwatch(d, d->n - 1);
    free(d->w);
    free(d);
}

struct bufferevent *srv_deadlines_watch(srv_deadlines *d, struct bufferevent *bev) {
    if (!bev) return NULL;
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->w = ft_realloc(d->w, (size_t)d->cap * sizeof(*d->w));
    }
    bufferevent_incref(bev);
    d->w[d->n++] = (watched){bev, now_ms() + d->timeout_ms};
    return bev;
}

static watched *find(srv_deadlines *d, struct evhttp_request *req) {
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    for (int i = 0; bev && i < d->n; i++)
        if (d->w[i].bev == bev) return &d->w[i];
    return NULL;
}

// The reply has gone out: the connection's next request (keep-alive) has its own deadline.
static void on_reply_sent(struct evhttp_request *req, void *arg) {
    srv_deadlines *d = arg;
    watched *w = find(d, req);
    if (w) w->deadline_ms = now_ms() + d->timeout_ms;
}

void srv_deadlines_request(srv_deadlines *d, struct evhttp_request *req) {
    watched *w = find(d, req);
    if (!w) return;
    w->deadline_ms = 0;
    evhttp_request_set_on_complete_cb(req, on_reply_sent, d);
}

int64_t srv_deadlines_closed(const srv_deadlines *d) {
    return d->closed;
}
