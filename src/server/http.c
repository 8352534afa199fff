// http.c: the HTTP side. evhttp parses requests (with body, header and idle-time limits);
// this file routes them through one table (method, path, handler, whether the API key is
// needed), answers the small routes (the web page, /health, /v1/models, /metrics, /v1/stats,
// /tokenize, /detokenize, /v1/cache/rebuild), hands generation requests to the API files, and delivers
// what the inference thread produces: the scheduler's notify hook puts a job on a ready list
// and activates an event; the event's callback (on this thread) drains the job and writes SSE
// events or the final response.
#include "srv_impl.h"
#include "deadline.h"
#include "prep.h"
#include "web.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h> // the request's HTTP version (major, minor)
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include <errno.h>
#include <signal.h>
#include <dirent.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_http {
    srv_params p;
    const ft_model *m;
    const tok_vocab *v;
    srv_sched *sched;
    srv_metrics *metrics;
    struct event_base *base;
    struct evhttp *http;
    struct event *ev_notify, *ev_int, *ev_term;
    srv_prep *prep; // prompt templating and tokenizing, off the loop
    srv_deadlines *deadlines; // each request's deadline to arrive whole (--timeout)
    struct evconnlistener *listener;
    struct event *ev_accept_resume; // re-enables the listener after an accept error
    int accept_pause_ms;            // the current pause; 0: accepting normally
    int max_conn;                   // client connections at most (srv_params.max_connections)
    int base_fds;                   // descriptors open before any client connected
    bool at_max_conn;               // accepting is paused at max_conn (logged once per episode)
    pthread_mutex_t ready_mu;
    srv_job **ready;
    int n_ready, cap_ready;
    uint64_t next_id;
    int n_ctx;
    bool stopping;
    pthread_mutex_t gvocab_mu;
    ft_grammar_vocab *gvocab; // made by the first constrained request (srv_http_grammar_vocab)
};

const srv_params *srv_http_params(const srv_http *h) {
    return &h->p;
}
const tok_vocab *srv_http_vocab(const srv_http *h) {
    return h->v;
}
int srv_http_n_ctx(const srv_http *h) {
    return h->n_ctx;
}

const ft_grammar_vocab *srv_http_grammar_vocab(srv_http *h) {
    pthread_mutex_lock(&h->gvocab_mu);
    if (!h->gvocab) {
        double t0 = ft_time_s();
        h->gvocab = ft_grammar_vocab_init(h->v, h->m->hp.n_vocab);
        FT_LOG_INFO("ft serve: the vocabulary's trie for structured output: %zu nodes, %.0f ms",
                    ft_grammar_vocab_n_nodes(h->gvocab), (ft_time_s() - t0) * 1e3);
    }
    pthread_mutex_unlock(&h->gvocab_mu);
    return h->gvocab;
}

srv_params srv_default_params(void) {
    srv_params p = {
        .host = "127.0.0.1",
        .port = 1919,
        .max_running = 4,
        .max_queue = 64,
        .max_body = 4u << 20,
        .max_headers = 16u << 10,
        .timeout_s = 600,
        .engine = ft_engine_default_params(),
    };
    p.engine.prefix_cache = true;
    return p;
}

// ---------------------------------------------------------------------------------------------
// Writing replies
//
// evhttp turns reading on whenever it is given reply bytes to write (evhttp_write_buffer), to
// learn of a client that closed, and drops the connection at EOF. But a client that half-closed
// after its request (shutdown(SHUT_WR)) reads as EOF too, and still waits for its answer: a
// stream would be cut, a non-streamed answer lost. So every write below turns reading off again
// while the reply goes out; evhttp turns it on for the connection's next request (where EOF is
// an end indeed, after the answer went out). A client that really left is found by a failed
// write, or by the socket watch while its request runs (on_readable).

// The connection's bufferevent, referenced (the write may free the connection), or NULL.
static struct bufferevent *reply_bev(struct evhttp_request *req) {
    struct evhttp_connection *c = req ? evhttp_request_get_connection(req) : NULL;
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    if (bev) bufferevent_incref(bev);
    return bev;
}

// After a write: reading off while evhttp still writes the reply (it has no read callback then;
// once the reply is out, its next request's reading is on; a freed connection has no callbacks).
static void reply_written(struct bufferevent *bev) {
    if (!bev) return;
    bufferevent_data_cb readcb = NULL;
    bufferevent_event_cb eventcb = NULL;
    bufferevent_getcb(bev, &readcb, NULL, &eventcb, NULL);
    if (!readcb && eventcb) bufferevent_disable(bev, EV_READ);
    bufferevent_decref(bev);
}

static void send_reply(struct evhttp_request *req, int status, const char *reason, struct evbuffer *b) {
    struct bufferevent *bev = reply_bev(req);
    evhttp_send_reply(req, status, reason, b);
    reply_written(bev);
}

static void send_reply_start(struct evhttp_request *req, int status, const char *reason) {
    struct bufferevent *bev = reply_bev(req);
    evhttp_send_reply_start(req, status, reason);
    reply_written(bev);
}

static void send_reply_chunk(struct evhttp_request *req, struct evbuffer *b) {
    struct bufferevent *bev = reply_bev(req);
    evhttp_send_reply_chunk(req, b);
    reply_written(bev);
}

// Frees req, also when the client is gone.
static void send_reply_end(struct evhttp_request *req) {
    struct bufferevent *bev = reply_bev(req);
    evhttp_send_reply_end(req);
    reply_written(bev);
}

// ---------------------------------------------------------------------------------------------
// Replies

static void add_common_headers(struct evhttp_request *req, const char *ctype) {
    struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
    evhttp_add_header(hd, "Content-Type", ctype);
    evhttp_add_header(hd, "Access-Control-Allow-Origin", "*");
}

static void reply_text(struct evhttp_request *req, int status, const char *ctype, const char *text,
                       size_t n) {
    add_common_headers(req, ctype);
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, text, n);
    send_reply(req, status, NULL, b);
    evbuffer_free(b);
}

void srv_reply_json(struct evhttp_request *req, int status, json_t *body) {
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!s) s = ft_strdup("{}");
    reply_text(req, status, "application/json", s, strlen(s));
    free(s);
}

void srv_reply_error(struct evhttp_request *req, int status, const char *type, const char *msg) {
    json_t *e = json_pack("{s:{s:o,s:s,s:n,s:n}}", "error", "message", srv_json_str(msg, strlen(msg)), "type",
                          type, "param", "code");
    json_object_set_new(json_object_get(e, "error"), "code", json_integer(status));
    srv_reply_json(req, status, e);
}

void srv_reply_error_anthropic(struct evhttp_request *req, int status, const char *type, const char *msg) {
    json_t *e = json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", type, "message",
                          srv_json_str(msg, strlen(msg)));
    srv_reply_json(req, status, e);
}

static void reply_err(struct evhttp_request *req, bool anthropic, int status, const char *msg) {
    struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
    if (status == 401) evhttp_add_header(hd, "WWW-Authenticate", "Bearer");
    if (status == 429) evhttp_add_header(hd, "Retry-After", "1"); // a sequence frees within seconds
    const char *type = status == 401   ? "authentication_error"
                       : status == 403 ? "permission_error"
                       : status == 404 ? "not_found_error"
                       : status == 413 ? "request_too_large"
                       : status == 429 ? "rate_limit_error"
                       : status >= 500 ? "api_error"
                                       : "invalid_request_error";
    if (anthropic)
        srv_reply_error_anthropic(req, status, type, msg);
    else
        srv_reply_error(req, status,
                        status == 429   ? "rate_limit_exceeded"
                        : status >= 500 ? "server_error"
                                        : type,
                        msg);
}

// ---------------------------------------------------------------------------------------------
// SSE

void srv_sse_begin(srv_job *j) {
    if (j->head_sent || !j->req) return;
    j->head_sent = true;
    if (j->disconnected) return;
    struct evkeyvalq *hd = evhttp_request_get_output_headers(j->req);
    evhttp_add_header(hd, "Content-Type", "text/event-stream");
    evhttp_add_header(hd, "Cache-Control", "no-cache");
    evhttp_add_header(hd, "Access-Control-Allow-Origin", "*");
    send_reply_start(j->req, 200, "OK");
}

void srv_sse_send_raw(srv_job *j, const char *text) {
    srv_sse_begin(j);
    if (!j->req || j->disconnected) return;
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, text, strlen(text));
    send_reply_chunk(j->req, b);
    evbuffer_free(b);
}

void srv_sse_send(srv_job *j, const char *event, json_t *data) {
    char *s = json_dumps(data, JSON_COMPACT);
    json_decref(data);
    if (!s) return;
    srv_sse_begin(j);
    if (j->req && !j->disconnected) {
        struct evbuffer *b = evbuffer_new();
        if (event) evbuffer_add_printf(b, "event: %s\n", event);
        evbuffer_add_printf(b, "data: %s\n\n", s);
        send_reply_chunk(j->req, b);
        evbuffer_free(b);
    }
    free(s);
}

// Ends the HTTP side of a job: the response is complete (or the client is gone).
struct evhttp_request *srv_job_take_req(srv_job *j) {
    struct evhttp_request *req = j->req;
    if (!req) return NULL;
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    if (c) evhttp_connection_set_closecb(c, NULL, NULL);
    if (j->ev_watch) {
        event_free(j->ev_watch);
        j->ev_watch = NULL;
    }
    j->req = NULL;
    return req;
}

void srv_sse_end(srv_job *j) {
    if (!j->req) return;
    struct evhttp_request *req = j->req;
    srv_job_take_req(j);
    send_reply_end(req);
}

// ---------------------------------------------------------------------------------------------
// From the inference thread

static void sched_notify(void *ctx, srv_job *j) {
    srv_http *h = ctx;
    pthread_mutex_lock(&h->ready_mu);
    if (!j->queued_notify) {
        j->queued_notify = true;
        srv_job_ref(j);
        if (h->n_ready == h->cap_ready) {
            h->cap_ready = h->cap_ready ? 2 * h->cap_ready : 16;
            h->ready = ft_realloc(h->ready, (size_t)h->cap_ready * sizeof(*h->ready));
        }
        h->ready[h->n_ready++] = j;
    }
    pthread_mutex_unlock(&h->ready_mu);
    event_active(h->ev_notify, EV_READ, 0);
}

static void route_cache_rebuild_done(srv_http *h, srv_job *j);

static const char *finish_name(enum srv_finish f) {
    static const char *names[] = {"none", "stop", "length", "cancelled", "error"};
    return names[f];
}

static void job_done(srv_http *h, srv_job *j) {
    srv_metrics_job(h->metrics, j);
    double ttft = j->t_first > 0 ? (j->t_first - j->t_submit) * 1e3 : 0;
    double dec = j->t_first > 0 && j->n_gen > 1 ? (j->n_gen - 1) / (j->t_end - j->t_first) : 0;
    static const char *api[] = {"chat", "completion", "messages", "llama completion", "rebuild"};
    _Static_assert(sizeof(api) / sizeof(api[0]) == SRV_API_REBUILD + 1, "a name per enum srv_api");
    char moe[160] = "";
    if (j->has_moe)
        snprintf(moe, sizeof(moe), ", expert cache hit %.1f%% (%llu misses, %.1f MiB H2D at %.1f GB/s)",
                 100 * ft_moe_hit_rate(&j->moe), (unsigned long long)j->moe.misses,
                 (double)j->moe.bytes_copied / 1048576.0, ft_moe_copy_gbps(&j->moe));
    FT_LOG_INFO("req %llu %s: prompt %zu tok, gen %d tok, ttft %.1f ms, %.1f tok/s%s, %s%s%s",
                (unsigned long long)j->id, api[j->api], j->prompt.n, j->n_gen, ttft, dec, moe,
                finish_name(j->finish), j->errmsg[0] ? ": " : "", j->errmsg);
}

static void on_notify(evutil_socket_t fd, short what, void *arg) {
    srv_http *h = arg;
    for (;;) {
        pthread_mutex_lock(&h->ready_mu);
        int n = h->n_ready;
        srv_job **list = h->ready;
        h->ready = NULL;
        h->n_ready = h->cap_ready = 0;
        for (int i = 0; i < n; i++)
            list[i]->queued_notify = false;
        pthread_mutex_unlock(&h->ready_mu);
        if (n == 0) {
            free(list);
            return;
        }
        for (int i = 0; i < n; i++) {
            srv_job *j = list[i];
            pthread_mutex_lock(&j->mu);
            srv_buf text = j->out;
            j->out = (srv_buf){0};
            int n_toks = j->n_toks;
            srv_tokinfo *toks = NULL;
            if (n_toks) {
                toks = ft_malloc((size_t)n_toks * sizeof(*toks));
                memcpy(toks, j->toks, (size_t)n_toks * sizeof(*toks));
                j->n_toks = 0;
            }
            bool done = j->done;
            pthread_mutex_unlock(&j->mu);
            if (j->done_seen) { // queued again before its end was handled: that was the last
                srv_buf_free(&text);
                free(toks);
                srv_job_unref(j); // the ready list's reference
                continue;
            }
            j->done_seen = done;
            if (j->api == SRV_API_REBUILD) { // no output but its end
                if (done) {
                    route_cache_rebuild_done(h, j);
                    srv_job_unref(j); // the HTTP side's reference
                }
                srv_buf_free(&text);
                free(toks);
                srv_job_unref(j); // the ready list's reference
                continue;
            }
            if (!j->disconnected || done) {
                // after done, the job is never notified again: deliver exactly once
                if (j->api == SRV_API_MESSAGES)
                    srv_anthropic_output(j, text.p ? text.p : "", text.n, done);
                else if (j->api == SRV_API_LLAMA_COMPLETION)
                    srv_llama_output(j, text.p ? text.p : "", text.n, done);
                else
                    srv_openai_output(j, text.p ? text.p : "", text.n, toks, n_toks, done);
            }
            if (done) {
                if (j->req) { // the API file did not end it (client gone): free the request
                    struct evhttp_request *req = j->req;
                    srv_job_take_req(j);
                    if (j->head_sent)
                        send_reply_end(req);
                    else
                        reply_err(req, j->api == SRV_API_MESSAGES, 500, "request ended");
                }
                job_done(h, j);
                srv_job_unref(j); // the HTTP side's reference
            }
            srv_buf_free(&text);
            free(toks);
            srv_job_unref(j); // the ready list's reference
        }
        free(list);
    }
}

// The client is gone: its request is cancelled (its sequence ends at the next step).
static void client_gone(srv_job *j) {
    j->disconnected = true;
    atomic_store(&j->cancel, true);
    if (j->ev_watch) {
        event_free(j->ev_watch);
        j->ev_watch = NULL;
    }
}

static void on_close(struct evhttp_connection *c, void *arg) {
    client_gone(arg); // (its socket is closed now)
}

// How often a half-closed client's socket is polled for a reset.
enum { HALF_CLOSED_POLL_MS = 100 };

static void on_half_closed_poll(evutil_socket_t fd, short what, void *arg) {
    struct pollfd p = {.fd = fd};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL))) client_gone(arg);
}

// The client's socket while its request runs (evhttp reads nothing then, nor while it writes
// the reply). This watch peeks: an error (a reset) means the client is gone; bytes (a pipelined
// request) end the watch; EOF means it closed, or only half-closed (shutdown(SHUT_WR) after its
// request: it still reads, and gets its answer). The two differ only once something is written:
// a closed socket's kernel answers it with a reset. So on EOF, unless the reply has begun (its
// next bytes will tell), the client is sent an interim "100 Continue" response (HTTP/1.1: a
// client reads past it; an HTTP/1.0 client may not be sent one, and its EOF counts as gone), and
// the socket is then polled for the reset (POLLHUP or POLLERR).
static void on_readable(evutil_socket_t fd, short what, void *arg) {
    srv_job *j = arg;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n > 0) {
        event_del(j->ev_watch);
        return;
    }
    if (n < 0) {
        client_gone(j);
        return;
    }
    struct evhttp_connection *conn = j->req ? evhttp_request_get_connection(j->req) : NULL;
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    if (!bev) {
        client_gone(j);
        return;
    }
    if (!j->head_sent && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        // nothing of the reply written or waiting: the interim response goes first
        static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
        bool http11 = j->req->major > 1 || (j->req->major == 1 && j->req->minor >= 1);
        ssize_t sent = http11 ? send(fd, probe, sizeof(probe) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
        if (sent != (ssize_t)(sizeof(probe) - 1)) {
            if (sent > 0) shutdown(fd, SHUT_RDWR); // a part (unseen: the buffer is empty) spoils the reply
            client_gone(j);
            return;
        }
    }
    struct event_base *base = event_get_base(j->ev_watch);
    event_free(j->ev_watch);
    struct timeval tv = {0, HALF_CLOSED_POLL_MS * 1000};
    if ((j->ev_watch = event_new(base, fd, EV_PERSIST, on_half_closed_poll, j))) event_add(j->ev_watch, &tv);
}

// A request's parse (templating, tokenizing) on a prep thread, then back on the loop.
typedef struct prep_req {
    srv_http *h;
    srv_job *j;
    json_t *body;
    srv_parse_fn parse;
    bool anthropic, count, ok; // count: answer the prompt's token count, run nothing
    ft_err err;
} prep_req;

static void prep_parse(void *ctx) {
    prep_req *r = ctx;
    r->ok = r->parse(r->h, r->body, r->j, &r->err);
    if (r->ok && r->j->grammar) r->j->gvocab = srv_http_grammar_vocab(r->h);
}

static void prep_parsed(void *ctx) {
    prep_req *r = ctx;
    json_decref(r->body);
    if (!r->ok) {
        reply_err(r->j->req, r->anthropic, 400, r->err.msg);
        srv_job_unref(r->j);
    } else if (r->count) {
        srv_reply_json(r->j->req, 200, json_pack("{s:i}", "input_tokens", (json_int_t)r->j->prompt.n));
        srv_job_unref(r->j);
    } else if (!srv_http_submit(r->h, r->j, r->anthropic)) {
        srv_job_unref(r->j);
    }
    free(r);
}

static void prepare(srv_http *h, srv_job *j, json_t *body, srv_parse_fn parse, bool anthropic, bool count) {
    prep_req *r = ft_malloc(sizeof(*r));
    *r = (prep_req){
        .h = h, .j = j, .body = json_incref(body), .parse = parse, .anthropic = anthropic, .count = count};
    srv_prep_submit(h->prep, prep_parse, prep_parsed, r);
}

void srv_http_prepare(srv_http *h, srv_job *j, json_t *body, srv_parse_fn parse, bool anthropic) {
    prepare(h, j, body, parse, anthropic, false);
}

void srv_http_prepare_count(srv_http *h, srv_job *j, json_t *body, srv_parse_fn parse) {
    prepare(h, j, body, parse, true, true);
}

bool srv_http_submit(srv_http *h, srv_job *j, bool anthropic) {
    struct evhttp_request *req = j->req;
    if (j->prompt.n == 0) {
        reply_err(req, anthropic, 400, "the prompt is empty");
        return false;
    }
    if (j->prompt.n >= (size_t)h->n_ctx) {
        char msg[200];
        snprintf(
            msg, sizeof(msg),
            "the prompt has %zu tokens, but the context holds %d tokens (prompt and completion together)",
            j->prompt.n, h->n_ctx);
        reply_err(req, anthropic, 400, msg);
        return false;
    }
    int room = h->n_ctx - (int)j->prompt.n;
    if (j->n_predict < 0) j->n_predict = h->p.default_max_tokens > 0 ? h->p.default_max_tokens : room;
    j->n_predict = FT_MIN(j->n_predict, room);
    j->http = h;
    j->model_name = h->p.model_name;
    j->created = (long)time(NULL);
    if (h->stopping || !h->sched) {
        reply_err(req, anthropic, 503, "the server is shutting down");
        return false;
    }
    if (!srv_sched_submit(h->sched, j)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "server busy: %d requests running and %d waiting; retry later",
                 h->p.max_running, h->p.max_queue);
        reply_err(req, anthropic, 429, msg);
        return false;
    }
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    if (c) {
        evhttp_connection_set_closecb(c, on_close, j);
        struct bufferevent *bev = evhttp_connection_get_bufferevent(c);
        evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
        if (fd >= 0 && (j->ev_watch = event_new(h->base, fd, EV_READ | EV_PERSIST, on_readable, j)))
            event_add(j->ev_watch, NULL);
    }
    return true; // the HTTP side's reference now belongs to the in-flight request
}

// ---------------------------------------------------------------------------------------------
// Small routes

// POST /v1/cache/rebuild {"moe_cache_size": N}: resizes the GPU expert cache between two
// steps of the inference thread; the reply (route_cache_rebuild_done) comes when it is done.
static void route_cache_rebuild(srv_http *h, struct evhttp_request *req, json_t *body) {
    ft_err err = {{0}};
    int64_t n = 0;
    if (!json_object_get(body, "moe_cache_size")) {
        reply_err(req, false, 400, "moe_cache_size (expert slots) is required");
        return;
    }
    if (!srv_get_int(body, "moe_cache_size", 1, 1 << 24, &n, &err)) {
        reply_err(req, false, 400, err.msg);
        return;
    }
    if (h->stopping || !h->sched) {
        reply_err(req, false, 503, "the server is shutting down");
        return;
    }
    if (!srv_sched_has_moe_cache(h->sched)) {
        reply_err(req, false, 400, "no expert cache to resize: the server does not run --moe-backend offload");
        return;
    }
    srv_job *j = srv_job_new();
    j->api = SRV_API_REBUILD;
    j->rebuild_slots = (int)n;
    j->req = req;
    j->http = h;
    j->id = srv_http_next_id(h);
    if (!srv_sched_rebuild(h->sched, j)) {
        j->req = NULL;
        srv_job_unref(j);
        reply_err(req, false, 409, "a cache rebuild is already waiting; retry when it is done");
        return;
    }
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    if (c) evhttp_connection_set_closecb(c, on_close, j);
}

// The reply to a finished resize: the cache as it is now, or why it stayed as it was.
static void route_cache_rebuild_done(srv_http *h, srv_job *j) {
    struct evhttp_request *req = srv_job_take_req(j);
    FT_LOG_INFO("req %llu cache rebuild to %d slots: %s%s%s", (unsigned long long)j->id, j->rebuild_slots,
                j->finish == SRV_FINISH_STOP ? "done" : finish_name(j->finish), j->errmsg[0] ? ": " : "", j->errmsg);
    if (!req) return;
    if (j->finish == SRV_FINISH_CANCEL) {
        reply_err(req, false, 503, "the server is shutting down");
        return;
    }
    if (j->finish != SRV_FINISH_STOP) {
        reply_err(req, false, 400, j->errmsg[0] ? j->errmsg : "the cache could not be resized");
        return;
    }
    ft_moe_stats moe = {0};
    json_t *cache = srv_sched_moe_stats(h->sched, &moe) ? srv_metrics_moe_json(&moe) : json_null();
    ft_moe_stats_free(&moe);
    srv_reply_json(req, 200, json_pack("{s:i,s:o}", "moe_cache_size", j->rebuild_slots, "moe_cache", cache));
}

static void route_health(srv_http *h, struct evhttp_request *req, json_t *body) {
    srv_reply_json(req, 200, json_pack("{s:s}", "status", h->stopping ? "stopping" : "ok"));
}

static json_t *model_object(srv_http *h) {
    return json_pack("{s:s,s:s,s:i,s:s,s:{s:i,s:i}}", "id", h->p.model_name, "object", "model", "created",
                     (json_int_t)time(NULL), "owned_by", "ft", "meta", "n_ctx", h->n_ctx, "n_vocab",
                     h->m->hp.n_vocab);
}

static void route_models(srv_http *h, struct evhttp_request *req, json_t *body) {
    srv_reply_json(req, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_object(h)));
}

// GET /props: llama-server's description of itself, which its web UI and scripts read: the
// context, the slots, the model file, and the defaults of POST /completion (those ft implements).
// GET /slots: llama-server's view of its slots (ft's sequences), as the inference thread last
// published them: the job running (or that ran last), its prompt and cache counts, its
// progress and sampling parameters. Off with --no-slots (501, as llama-server).
static void route_slots(srv_http *h, struct evhttp_request *req, json_t *body) {
    if (h->p.no_slots) {
        reply_err(req, false, 501, "the slots endpoint is off (ft serve --no-slots)");
        return;
    }
    int n = srv_sched_n_slots(h->sched);
    srv_slot_info *info = ft_malloc((size_t)n * sizeof(*info));
    srv_sched_slots_get(h->sched, info);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        const srv_slot_info *in = &info[i];
        json_t *o = json_pack("{s:i,s:i,s:b,s:b}", "id", i, "n_ctx", h->n_ctx, "speculative", 0,
                              "is_processing", in->busy);
        if (in->id) {
            const ft_sampler_params *sp = &in->sp;
            json_object_set_new(o, "id_task", json_integer((json_int_t)in->id));
            json_object_set_new(o, "n_prompt_tokens", json_integer(in->n_prompt));
            json_object_set_new(o, "n_prompt_tokens_processed", json_integer(in->n_prefilled - in->n_cached));
            json_object_set_new(o, "n_prompt_tokens_cache", json_integer(in->n_cached));
            json_object_set_new(o, "params",
                                json_pack("{s:i,s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:i,s:I}", "n_predict",
                                          in->n_predict, "temperature", (double)sp->temp, "top_k", sp->top_k,
                                          "top_p", (double)sp->top_p, "min_p", (double)sp->min_p,
                                          "presence_penalty", (double)sp->presence_penalty,
                                          "frequency_penalty", (double)sp->frequency_penalty,
                                          "repeat_penalty", (double)sp->repeat_penalty, "repeat_last_n",
                                          sp->penalty_last_n, "seed", (json_int_t)sp->seed));
            json_object_set_new(o, "next_token",
                                json_pack("[{s:b,s:i,s:i}]", "has_next_token", in->busy, "n_remain",
                                          in->busy ? in->n_predict - in->n_decoded : 0, "n_decoded",
                                          in->n_decoded));
        }
        json_array_append_new(arr, o);
    }
    free(info);
    srv_reply_json(req, 200, arr);
}

static void route_props(srv_http *h, struct evhttp_request *req, json_t *body) {
    const ft_sampler_params sp = ft_sampler_overlay(ft_sampler_default_params(), &h->p.sampling, h->p.sampling_set);
    json_t *params = json_pack(
        "{s:i,s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:i,s:[],s:b}", "n_predict",
        h->p.default_max_tokens > 0 ? h->p.default_max_tokens : -1, "temperature", (double)sp.temp, "top_k",
        sp.top_k, "top_p", (double)sp.top_p, "min_p", (double)sp.min_p, "presence_penalty",
        (double)sp.presence_penalty, "frequency_penalty", (double)sp.frequency_penalty, "repeat_penalty",
        (double)sp.repeat_penalty, "repeat_last_n", sp.penalty_last_n, "stop", "ignore_eos", 0);
    json_t *props = json_pack("{s:{s:i,s:o},s:i,s:s,s:{s:b},s:s,s:b}", "default_generation_settings", "n_ctx",
                              h->n_ctx, "params", params, "total_slots", h->p.max_running, "model_path",
                              h->p.model_path ? h->p.model_path : "", "modalities", "vision", 0, "build_info",
                              "ft " FT_VERSION, "is_sleeping", 0);
    srv_reply_json(req, 200, props);
}

// POST /v1/embeddings: a clear refusal (clients probe it), not a 404.
static void route_embeddings(srv_http *h, struct evhttp_request *req, json_t *body) {
    reply_err(req, false, 400, "embeddings are not supported: ft serves text generation only");
}

// GET /v1/models/{id} (the OpenAI SDKs' models.retrieve): the served model, or 404.
static void route_model(srv_http *h, struct evhttp_request *req, json_t *body) {
    const struct evhttp_uri *eu = evhttp_request_get_evhttp_uri(req);
    const char *path = eu ? evhttp_uri_get_path(eu) : "";
    char *id = evhttp_uridecode(path + strlen("/v1/models/"), 0, NULL);
    if (id && !strcmp(id, h->p.model_name)) srv_reply_json(req, 200, model_object(h));
    else reply_err(req, false, 404, "no such model (GET /v1/models lists the one served)");
    free(id);
}

// The web page's policy: its own scripts and styles only (none inline), requests to this server
// only, no frames, no forms posted anywhere.
#define WEB_CSP                                                                                           \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// GET / and the web page's files (web.h), built into the binary. Open: the page holds no secret,
// and its own requests carry the API key the user gives it. Revalidated on each load (no-cache
// with an ETag: a 304 when unchanged), so a new ft serves its own page at once.
static void route_web(srv_http *h, struct evhttp_request *req, json_t *body) {
    const struct evhttp_uri *eu = evhttp_request_get_evhttp_uri(req);
    const char *path = eu ? evhttp_uri_get_path(eu) : NULL;
    const srv_web_file *f = srv_web_find(path && *path ? path : "/");
    if (!f) { // a route of the table without a file: the build left one out
        reply_err(req, false, 404, "no such file in this build");
        return;
    }
    struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
    evhttp_add_header(hd, "ETag", f->etag);
    evhttp_add_header(hd, "Cache-Control", "no-cache");
    evhttp_add_header(hd, "Content-Security-Policy", WEB_CSP);
    evhttp_add_header(hd, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(hd, "Referrer-Policy", "no-referrer");
    const char *inm = evhttp_find_header(evhttp_request_get_input_headers(req), "If-None-Match");
    if (inm && (strstr(inm, f->etag) || !strcmp(inm, "*"))) {
        send_reply(req, 304, "Not Modified", NULL);
        return;
    }
    evhttp_add_header(hd, "Content-Type", f->ctype);
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_reference(b, f->data, f->size, NULL, NULL);
    send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

// GET /metrics (Prometheus text) and GET /v1/stats (JSON): the same counters.
static void reply_stats(srv_http *h, struct evhttp_request *req, bool prometheus) {
    srv_sched_stats st = {0};
    ft_moe_stats moe = {0};
    srv_routes routes = {0};
    bool has_moe = false, has_routes = false;
    if (h->sched) {
        srv_sched_stats_get(h->sched, &st);
        has_moe = srv_sched_moe_stats(h->sched, &moe);
        has_routes = !prometheus && srv_sched_routes(h->sched, &routes);
    }
    if (prometheus) {
        char *s = srv_metrics_prometheus(h->metrics, &st, has_moe ? &moe : NULL);
        reply_text(req, 200, "text/plain; version=0.0.4", s, strlen(s));
        free(s);
    } else
        srv_reply_json(req, 200,
                       srv_metrics_json(h->metrics, &st, has_moe ? &moe : NULL, has_routes ? &routes : NULL));
    ft_moe_stats_free(&moe);
    srv_routes_free(&routes);
}

static void route_metrics(srv_http *h, struct evhttp_request *req, json_t *body) {
    reply_stats(h, req, true);
}

static void route_stats(srv_http *h, struct evhttp_request *req, json_t *body) {
    reply_stats(h, req, false);
}

// /tokenize with pieces answers at most this many tokens: a piece costs a JSON object, and a
// 4 MiB body of digits would otherwise build gigabytes of them.
enum { TOKENIZE_MAX_PIECES = 1 << 17 };

typedef struct tokenize_req {
    srv_http *h;
    struct evhttp_request *req;
    json_t *body, *reply; // reply NULL: err holds the 400's message
    ft_err err;
} tokenize_req;

static void tokenize_work(void *ctx) {
    tokenize_req *t = ctx;
    json_t *c = json_object_get(t->body, "content");
    bool add_special = false, pieces = false;
    if (!json_is_string(c)) {
        ft_err_set(&t->err, "'content' must be a string");
        return;
    }
    if (!srv_get_bool(t->body, "add_special", &add_special, &t->err) ||
        !srv_get_bool(t->body, "with_pieces", &pieces, &t->err))
        return;
    const tok_vocab *v = t->h->v;
    tok_ids ids = {0};
    tok_encode(v, json_string_value(c), json_string_length(c), add_special, true, &ids);
    if (pieces && ids.n > TOKENIZE_MAX_PIECES) {
        ft_err_set(&t->err,
                   "'with_pieces' answers at most %d tokens and this content has %zu; ask without it",
                   TOKENIZE_MAX_PIECES, ids.n);
        tok_ids_free(&ids);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < ids.n; i++) {
        if (!pieces) {
            json_array_append_new(arr, json_integer(ids.ids[i]));
            continue;
        }
        size_t len;
        const char *p = tok_piece(v, ids.ids[i], true, &len);
        json_t *piece = json_stringn(p, len);
        if (!piece) { // not valid UTF-8 alone: the bytes, as llama-server does
            piece = json_array();
            for (size_t k = 0; k < len; k++)
                json_array_append_new(piece, json_integer((unsigned char)p[k]));
        }
        json_array_append_new(arr, json_pack("{s:i,s:o}", "id", (json_int_t)ids.ids[i], "piece", piece));
    }
    tok_ids_free(&ids);
    t->reply = json_pack("{s:o}", "tokens", arr);
}

static void tokenize_done(void *ctx) {
    tokenize_req *t = ctx;
    json_decref(t->body);
    if (t->reply)
        srv_reply_json(t->req, 200, t->reply);
    else
        reply_err(t->req, false, 400, t->err.msg);
    free(t);
}

// POST /tokenize: tokenized on a prep thread (a large content takes seconds).
static void route_tokenize(srv_http *h, struct evhttp_request *req, json_t *body) {
    tokenize_req *t = ft_calloc(1, sizeof(*t));
    *t = (tokenize_req){.h = h, .req = req, .body = json_incref(body)};
    srv_prep_submit(h->prep, tokenize_work, tokenize_done, t);
}

static void route_detokenize(srv_http *h, struct evhttp_request *req, json_t *body) {
    json_t *t = json_object_get(body, "tokens");
    if (!json_is_array(t)) {
        reply_err(req, false, 400, "'tokens' must be an array of token ids");
        return;
    }
    size_t n = json_array_size(t);
    tok_id *ids = ft_malloc((n + 1) * sizeof(tok_id));
    int32_t nv = FT_MIN(tok_n_tokens(h->v), h->m->hp.n_vocab);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(t, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= nv) {
            free(ids);
            char msg[120];
            snprintf(msg, sizeof(msg), "'tokens'[%zu] is not a token id in [0, %d)", i, nv);
            reply_err(req, false, 400, msg);
            return;
        }
        ids[i] = (tok_id)json_integer_value(x);
    }
    size_t len;
    char *s = tok_detokenize(h->v, ids, n, false, false, &len);
    free(ids);
    srv_reply_json(req, 200, json_pack("{s:o}", "content", srv_json_str(s, len)));
    free(s);
}

// ---------------------------------------------------------------------------------------------
// Dispatch

// Constant-time comparison of a presented key with the configured one.
static bool key_ok(const char *given, const char *want) {
    size_t gn = strlen(given), wn = strlen(want);
    unsigned diff = (unsigned)(gn ^ wn);
    for (size_t i = 0; i < wn; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < gn ? given[i] : 0);
    return diff == 0;
}

// Whether the request carries key (NULL: none is needed) as a bearer token or x-api-key.
static bool carries_key(struct evhttp_request *req, const char *key) {
    if (!key) return true;
    struct evkeyvalq *hd = evhttp_request_get_input_headers(req);
    const char *a = evhttp_find_header(hd, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7)) return key_ok(a + 7, key);
    const char *x = evhttp_find_header(hd, "x-api-key");
    if (x) return key_ok(x, key);
    return false;
}

// The routes. A POST handler gets the body parsed as a JSON object; a GET handler gets NULL.
// Flags: ROUTE_OPEN, answered without the API key (every other route needs it when the server
// has one); ROUTE_ANTHROPIC, errors in the Anthropic shape (else the OpenAI one); ROUTE_ADMIN,
// an action on the whole server: off without --admin-key, else that key in place of the API key;
// ROUTE_PREFIX, the path ends in "/" and takes one more segment (an id), not empty.
enum { ROUTE_OPEN = 1, ROUTE_ANTHROPIC = 2, ROUTE_ADMIN = 4, ROUTE_PREFIX = 8 };
typedef void (*route_fn)(srv_http *h, struct evhttp_request *req, json_t *body);
typedef struct route {
    enum evhttp_cmd_type method;
    const char *path;
    route_fn fn;
    unsigned flags;
} route;

static const route routes[] = {
    {EVHTTP_REQ_GET, "/", route_web, ROUTE_OPEN},
    {EVHTTP_REQ_GET, "/index.html", route_web, ROUTE_OPEN},
    {EVHTTP_REQ_GET, "/app.js", route_web, ROUTE_OPEN},
    {EVHTTP_REQ_GET, "/app.css", route_web, ROUTE_OPEN},
    {EVHTTP_REQ_GET, "/health", route_health, ROUTE_OPEN},
    {EVHTTP_REQ_GET, "/v1/models", route_models, 0},
    {EVHTTP_REQ_GET, "/v1/models/", route_model, ROUTE_PREFIX},
    {EVHTTP_REQ_GET, "/models", route_models, 0},
    {EVHTTP_REQ_GET, "/metrics", route_metrics, 0},
    {EVHTTP_REQ_GET, "/v1/stats", route_stats, 0},
    {EVHTTP_REQ_GET, "/props", route_props, 0},
    {EVHTTP_REQ_GET, "/slots", route_slots, 0},
    {EVHTTP_REQ_POST, "/completion", srv_llama_completion, 0},
    {EVHTTP_REQ_POST, "/v1/chat/completions", srv_openai_chat, 0},
    {EVHTTP_REQ_POST, "/chat/completions", srv_openai_chat, 0},
    {EVHTTP_REQ_POST, "/v1/completions", srv_openai_completion, 0},
    {EVHTTP_REQ_POST, "/completions", srv_openai_completion, 0},
    {EVHTTP_REQ_POST, "/v1/messages", srv_anthropic_messages, ROUTE_ANTHROPIC},
    {EVHTTP_REQ_POST, "/v1/messages/count_tokens", srv_anthropic_count_tokens, ROUTE_ANTHROPIC},
    {EVHTTP_REQ_POST, "/v1/embeddings", route_embeddings, 0},
    {EVHTTP_REQ_POST, "/tokenize", route_tokenize, 0},
    {EVHTTP_REQ_POST, "/detokenize", route_detokenize, 0},
    {EVHTTP_REQ_POST, "/v1/cache/rebuild", route_cache_rebuild, ROUTE_ADMIN},
};

static const route *route_find(const char *path) {
    for (size_t i = 0; i < FT_ARRAY_LEN(routes); i++) {
        size_t n = strlen(routes[i].path);
        if ((routes[i].flags & ROUTE_PREFIX) ? !strncmp(path, routes[i].path, n) && path[n] : !strcmp(path, routes[i].path))
            return &routes[i];
    }
    return NULL;
}

// A POST's body parsed as a JSON object: body, or NULL with code and msg the reply to make.
typedef struct body_parse {
    srv_http *h;
    struct evhttp_request *req;
    const route *r;
    bool anthropic;
    const char *data; // the request's input buffer, made contiguous (untouched while the request
    size_t n;         // is ours: evhttp reads nothing more from the connection meanwhile)
    json_t *body;
    int code;
    char msg[300];
} body_parse;

static void body_parse_run(body_parse *b) {
    if (b->n > b->h->p.max_body) {
        b->code = 413;
        snprintf(b->msg, sizeof(b->msg), "request body too large");
        return;
    }
    json_error_t je;
    b->body = json_loadb(b->data, b->n, JSON_REJECT_DUPLICATES, &je);
    if (b->body && json_is_object(b->body)) return;
    b->code = 400;
    if (!b->body)
        snprintf(b->msg, sizeof(b->msg), "invalid JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
    else
        snprintf(b->msg, sizeof(b->msg), "the request body must be a JSON object");
    json_decref(b->body);
    b->body = NULL;
}

// The route with its parsed body, or the parse's error reply.
static void body_parse_finish(body_parse *b) {
    if (!b->body) {
        reply_err(b->req, b->anthropic, b->code, b->msg);
        return;
    }
    b->r->fn(b->h, b->req, b->body);
    json_decref(b->body);
}

static void body_parse_work(void *ctx) { body_parse_run(ctx); }

static void body_parse_done(void *ctx) {
    body_parse_finish(ctx);
    free(ctx);
}

// Bodies from this size on are parsed on a prep thread: jansson takes about 25 ms a MiB, which
// on the loop would hold up every stream; smaller ones are parsed at once, in arrival order.
#define BODY_PARSE_OFF_LOOP (256u << 10)

// Parses a POST's body and runs its route with it (the route's reply for a bad body: 413, 400).
static void run_with_body(srv_http *h, struct evhttp_request *req, const route *r, bool anthropic) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    body_parse b = {.h = h, .req = req, .r = r, .anthropic = anthropic, .n = n};
    if (n > h->p.max_body) {
        body_parse_run(&b); // refused by its size alone
        body_parse_finish(&b);
        return;
    }
    b.data = n ? (const char *)evbuffer_pullup(in, (ev_ssize_t)n) : "";
    if (n < BODY_PARSE_OFF_LOOP) {
        body_parse_run(&b);
        body_parse_finish(&b);
        return;
    }
    body_parse *q = ft_malloc(sizeof(*q));
    *q = b;
    srv_prep_submit(h->prep, body_parse_work, body_parse_done, q);
}

// An accept that fails for want of file descriptors (EMFILE, ENFILE) or memory leaves the
// connection queued, so the listener would fire again at once, spinning a core and logging each
// failure. Instead accepting pauses, 50 ms doubling up to 1 s while the errors last, with one
// log line when it starts and one when a request arrives again.
// libevent calls the error callback with the argument evhttp gave its listener (the evhttp),
// so the process's one listening server is found here.
static srv_http *g_listening;

static void on_accept_error(struct evconnlistener *lev, void *arg) {
    (void)arg;
    srv_http *h = g_listening;
    int e = EVUTIL_SOCKET_ERROR();
    evconnlistener_disable(lev);
    if (!h->accept_pause_ms)
        FT_LOG_WARN("ft serve: cannot accept connections (%s): pausing accepts while it lasts",
                    evutil_socket_error_to_string(e));
    h->accept_pause_ms = h->accept_pause_ms ? FT_MIN(2 * h->accept_pause_ms, 1000) : 50;
    struct timeval tv = {h->accept_pause_ms / 1000, (h->accept_pause_ms % 1000) * 1000};
    event_add(h->ev_accept_resume, &tv);
}

// Descriptors this process has open (the directory's own one not counted).
static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

// Client connections open now: each holds one descriptor beyond those open at start.
static int open_connections(const srv_http *h) {
    int n = open_fds();
    return n < 0 ? 0 : n - h->base_fds;
}

// evhttp's connection constructor, as its default, after counting: at max_conn connections the
// listener pauses (new clients wait in the kernel's queue) until one closes.
static struct bufferevent *on_new_connection(struct event_base *base, void *arg) {
    srv_http *h = arg;
    if (open_connections(h) >= h->max_conn && !h->at_max_conn) {
        h->at_max_conn = true;
        evconnlistener_disable(h->listener);
        FT_LOG_WARN("ft serve: %d client connections open (--max-connections): new ones wait until one closes",
                    h->max_conn);
        struct timeval tv = {0, 50000};
        event_add(h->ev_accept_resume, &tv);
    }
    return srv_deadlines_watch(h->deadlines, bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE));
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    srv_http *h = arg;
    if (h->stopping) return;
    if (h->at_max_conn) {
        if (open_connections(h) >= h->max_conn) { // still full: look again soon
            struct timeval tv = {0, 50000};
            event_add(h->ev_accept_resume, &tv);
            return;
        }
        h->at_max_conn = false;
    }
    evconnlistener_enable(h->listener);
}

// In this order: OPTIONS (CORS preflight, any path) 204; an admin route's 403 (off) or its key's
// 401; the API key 401 (open and admin routes skip it);
// an unknown path 404; another method than the route's 405; then the route.
static void on_request(struct evhttp_request *req, void *arg) {
    srv_http *h = arg;
    const char *uri = evhttp_request_get_uri(req);
    const struct evhttp_uri *eu = evhttp_request_get_evhttp_uri(req);
    const char *path = eu ? evhttp_uri_get_path(eu) : NULL;
    if (!path || !*path) path = uri ? uri : "/";
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    const route *r = route_find(path);
    bool anthropic = r && (r->flags & ROUTE_ANTHROPIC);
    srv_metrics_request(h->metrics);
    srv_deadlines_request(h->deadlines, req);
    if (h->accept_pause_ms) {
        FT_LOG_INFO("ft serve: accepting connections again");
        h->accept_pause_ms = 0;
    }

    if (cmd == EVHTTP_REQ_OPTIONS) { // CORS preflight of browser chat UIs
        struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
        evhttp_add_header(hd, "Access-Control-Allow-Origin", "*");
        evhttp_add_header(hd, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        // named: the "*" wildcard does not cover Authorization
        evhttp_add_header(hd, "Access-Control-Allow-Headers",
                          "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
        send_reply(req, 204, "No Content", NULL);
        return;
    }
    if (r && (r->flags & ROUTE_ADMIN)) {
        if (!h->p.admin_key) {
            reply_err(req, anthropic, 403, "admin routes are off: start ft serve with --admin-key KEY");
            return;
        }
        if (!carries_key(req, h->p.admin_key)) {
            reply_err(req, anthropic, 401, "invalid or missing admin key");
            return;
        }
    } else if (!(r && (r->flags & ROUTE_OPEN)) && !carries_key(req, h->p.api_key)) {
        reply_err(req, anthropic, 401, "invalid or missing API key");
        return;
    }
    if (!r) {
        reply_err(req, anthropic, 404, "no such route");
        return;
    }
    if (cmd == EVHTTP_REQ_HEAD && r->method == EVHTTP_REQ_GET) cmd = EVHTTP_REQ_GET; // libevent sends no body
    if (cmd != r->method) {
        reply_err(req, anthropic, 405, r->method == EVHTTP_REQ_GET ? "use GET" : "use POST");
        return;
    }
    if (r->method != EVHTTP_REQ_POST) {
        r->fn(h, req, NULL);
        return;
    }
    run_with_body(h, req, r, anthropic);
}

uint64_t srv_http_next_id(srv_http *h) {
    return ++h->next_id;
}

srv_job *srv_http_new_job(srv_http *h, struct evhttp_request *req, const char *rid_prefix) {
    srv_job *j = srv_job_new();
    j->id = srv_http_next_id(h);
    j->req = req;
    snprintf(j->rid, sizeof(j->rid), "%s%llu", rid_prefix, (unsigned long long)j->id);
    return j;
}

// ---------------------------------------------------------------------------------------------
// Start and stop

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    srv_http *h = arg;
    if (h->stopping) return;
    h->stopping = true;
    FT_LOG_INFO("ft serve: signal %d: cancelling running requests and stopping", (int)sig);
    srv_sched_free(h->sched); // cancels every job; their ends are on the ready list
    h->sched = NULL;
    on_notify(-1, 0, h);
    struct timeval tv = {0, 200000}; // let the last bytes go out
    event_base_loopexit(h->base, &tv);
}

bool srv_run(const srv_params *p, const ft_model *m, const tok_vocab *v, ft_err *err) {
    FT_ASSERT(p->model_name && p->max_running > 0 && p->max_queue > 0);
    signal(SIGPIPE, SIG_IGN);
    if (evthread_use_pthreads() != 0) return ft_err_set(err, "libevent without thread support");
    srv_http *h = ft_calloc(1, sizeof(*h));
    h->p = *p;
    h->m = m;
    h->v = v;
    pthread_mutex_init(&h->ready_mu, NULL);
    pthread_mutex_init(&h->gvocab_mu, NULL);
    h->metrics = srv_metrics_init();
    bool ok = false;
    h->base = event_base_new();
    h->http = h->base ? evhttp_new(h->base) : NULL;
    if (!h->http) {
        ft_err_set(err, "cannot create the HTTP server");
        goto done;
    }
    h->ev_notify = event_new(h->base, -1, 0, on_notify, h);
    if (!(h->prep = srv_prep_init(h->base, 2, err))) goto done;
    h->ev_int = evsignal_new(h->base, SIGINT, on_signal, h);
    h->ev_term = evsignal_new(h->base, SIGTERM, on_signal, h);
    event_add(h->ev_int, NULL);
    event_add(h->ev_term, NULL);
    // libevent answers a body over its own limit with an HTML page before we see the request;
    // its limit sits above ours so that ordinary oversized requests reach on_request and get
    // a 413 in the API's error shape. Only a body beyond 4x the limit (and 1 MiB more) gets
    // libevent's page (still status 413).
    evhttp_set_max_body_size(h->http, (ev_ssize_t)(4 * p->max_body + (1u << 20)));
    evhttp_set_max_headers_size(h->http, (ev_ssize_t)p->max_headers);
    evhttp_set_timeout(h->http, p->timeout_s);
    h->deadlines = srv_deadlines_init(h->base, p->timeout_s);
    evhttp_set_allowed_methods(h->http,
                               EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_HEAD);
    evhttp_set_gencb(h->http, on_request, h);
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(h->http, p->host, (uint16_t)p->port);
    if (!bs) {
        ft_err_set(err, "cannot listen on %s:%d (in use, or not an address of this machine)", p->host,
                   p->port);
        goto done;
    }
    h->listener = evhttp_bound_socket_get_listener(bs);
    h->ev_accept_resume = evtimer_new(h->base, on_accept_resume, h);
    if (!h->ev_accept_resume) {
        ft_err_set(err, "cannot create the HTTP server");
        goto done;
    }
    g_listening = h;
    evconnlistener_set_error_cb(h->listener, on_accept_error);
    // the connection cap: by default what the open-file limit leaves beside the descriptors open
    // now and a margin for the process's own (the model's file, logs, the ready file)
    h->base_fds = open_fds();
    struct rlimit rl;
    int room = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                   ? (int)FT_MIN((rlim_t)INT32_MAX, rl.rlim_cur) - h->base_fds - 32
                   : INT32_MAX;
    h->max_conn = p->max_connections > 0 ? p->max_connections : FT_MAX(room, 1);
    evhttp_set_bevcb(h->http, on_new_connection, h);
    // the port actually bound (port 0: the kernel's choice)
    int port = p->port;
    struct sockaddr_storage ss;
    ev_socklen_t sl = sizeof(ss);
    if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    if (!(h->sched = srv_sched_init(m, v, p, sched_notify, h, err))) goto done;
    h->n_ctx = srv_sched_n_ctx(h->sched);
    // KV cache per sequence: K and V rows of n_head_kv * head_dim per position of each layer that
    // keeps its own (not a recurrent one, nor one reading an earlier layer's)
    double row = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const ft_layer *L = &m->layers[l];
        if (!L->is_recurrent && L->kv_from == l) row += 2.0 * L->n_head_kv * L->head_dim;
    }
    double kv_mib = row * h->n_ctx * (p->engine.kv_type == FT_TYPE_Q8_0 ? 34.0 / 32 : 2.0) / (1 << 20);
    FT_LOG_INFO("ft serve: model '%s'; %d sequences of %d tokens (KV about %.1f MiB each, %.1f MiB in all); "
                "queue %d",
                p->model_name, p->max_running, h->n_ctx, kv_mib, kv_mib * p->max_running, p->max_queue);
    FT_LOG_INFO("ft serve: listening on http://%s:%d", p->host, port);
    if (p->ready_file) {
        FILE *f = fopen(p->ready_file, "w");
        if (f) {
            fprintf(f, "%d\n", port);
            fclose(f);
        }
    }
    event_base_dispatch(h->base);
    ok = true;
done:
    if (g_listening == h) g_listening = NULL;
    h->stopping = true;
    srv_prep_free(h->prep); // requests still in preparation are answered 503
    srv_sched_free(h->sched);
    h->sched = NULL;
    if (h->ev_notify) on_notify(-1, 0, h);
    if (h->http) evhttp_free(h->http);
    srv_deadlines_free(h->deadlines); // after evhttp_free: it holds a reference on each connection
    if (h->ev_notify) event_free(h->ev_notify);
    if (h->ev_int) event_free(h->ev_int);
    if (h->ev_term) event_free(h->ev_term);
    if (h->ev_accept_resume) event_free(h->ev_accept_resume);
    if (h->base) event_base_free(h->base);
    srv_metrics_free(h->metrics);
    free(h->ready);
    pthread_mutex_destroy(&h->ready_mu);
    ft_grammar_vocab_free(h->gvocab); // no job is left to use it
    pthread_mutex_destroy(&h->gvocab_mu);
    srv_constraint_cache_clear();
    free(h);
    return ok;
}
