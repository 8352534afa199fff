// deadline.h: a deadline for each request to arrive whole, headers and body (--timeout).
//
// evhttp's timeout restarts with every byte read, so a client that trickles a byte a second
// would hold its connection forever. Each connection is watched from its creation: a request
// must arrive whole within the deadline of the connection's start or of the previous reply's
// end (keep-alive); past it the connection is closed (the first such close is logged, the rest
// counted). Requests in hand (their reply not yet sent, a long stream included) have none.
#ifndef FT_SERVER_DEADLINE_H
#define FT_SERVER_DEADLINE_H

#include <event2/event.h>
#include <event2/http.h>
#include <stdint.h>

typedef struct srv_deadlines srv_deadlines;

// Watches on base's loop, timeout_s seconds per request; free after evhttp_free.
srv_deadlines *srv_deadlines_init(struct event_base *base, int timeout_s);
void srv_deadlines_free(srv_deadlines *d);

// From evhttp's connection constructor: watches bev (and returns it; NULL stays NULL).
struct bufferevent *srv_deadlines_watch(srv_deadlines *d, struct bufferevent *bev);

// A whole request arrived on its connection: no deadline until its reply has been sent.
void srv_deadlines_request(srv_deadlines *d, struct evhttp_request *req);

// Connections closed for their deadline so far.
int64_t srv_deadlines_closed(const srv_deadlines *d);

#endif
