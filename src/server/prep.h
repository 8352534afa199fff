// prep: work that would stall the event loop (rendering a chat template, tokenizing a prompt of
// megabytes), run on threads of its own with its answer handed back to the loop.
//
// srv_prep_submit queues (work, done, ctx): a prep thread calls work(ctx), then the loop calls
// done(ctx) (from an event of base). Tasks run in the order given on each thread, several at once
// across threads. srv_prep_free stops the threads once the queue is empty, then runs the done
// callbacks still due on the calling thread (the loop's, after it has stopped dispatching).
#ifndef FT_SERVER_PREP_H
#define FT_SERVER_PREP_H

#include "../util/util.h"

struct event_base;
typedef struct srv_prep srv_prep;
typedef void (*srv_prep_fn)(void *ctx);

srv_prep *srv_prep_init(struct event_base *base, int n_threads, ft_err *err);
void srv_prep_submit(srv_prep *p, srv_prep_fn work, srv_prep_fn done, void *ctx);
int srv_prep_pending(srv_prep *p); // tasks queued or running: for /metrics and tests
void srv_prep_free(srv_prep *p);   // NULL is a no-op

#endif
