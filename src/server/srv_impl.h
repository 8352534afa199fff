// srv_impl.h: what the files of src/server share (internal to the module).
//
// A srv_job is one generation request. The HTTP thread fills its request part, submits it to
// the scheduler and keeps one reference; the scheduler keeps another until the job is done.
// The inference thread appends output (text, per-token logprobs) under job->mu and calls the
// notify hook; the HTTP thread drains it under the same lock. `cancel` is the one field both
// sides write without the lock.
#ifndef FT_SERVER_IMPL_H
#define FT_SERVER_IMPL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "server.h"
#include "../engine/grammar.h"

#define SRV_MAX_STOPS 8
#define SRV_MAX_TOP_LOGPROBS 20

struct evhttp_request;

// SRV_API_REBUILD: POST /v1/cache/rebuild, run by the inference thread between steps.
enum srv_api {
    SRV_API_CHAT,
    SRV_API_COMPLETION,
    SRV_API_MESSAGES,
    SRV_API_LLAMA_COMPLETION,
    SRV_API_REBUILD
};

enum srv_finish {
    SRV_FINISH_NONE = 0,
    SRV_FINISH_STOP,   // end-of-generation token or stop string
    SRV_FINISH_LENGTH, // max_tokens or the context is full
    SRV_FINISH_CANCEL, // client gone or server shutting down
    SRV_FINISH_ERROR,
};

// Log-probabilities of one generated token (raw distribution, before sampling filters).
typedef struct srv_tokinfo {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_lp[SRV_MAX_TOP_LOGPROBS];
} srv_tokinfo;

typedef struct srv_buf {
    char *p;
    size_t n, cap;
} srv_buf;
void srv_buf_add(srv_buf *b, const char *s, size_t n);
void srv_buf_free(srv_buf *b);

// Reasoning splitter: text inside a leading <think>...</think> (or the tags open and close name:
// Gemma 4's thought channel, "<|channel>thought" ... "<channel|>") is reasoning; with harmony set
// (gpt-oss's template), the reply's channels decide instead (tok_harmony: analysis is reasoning,
// final the answer).
typedef struct srv_think {
    int state; // 0 deciding, 1 in think, 2 content, 3 content after think (strip leading ws)
    const char *open, *close; // NULL: "<think>" and "</think>" (at most 31 bytes)
    char hold[32];
    size_t n_hold;
    char ws[64]; // state 0: white space before a possible <think>, content if none follows
    size_t n_ws;
    bool harmony;
    tok_harmony h;
} srv_think;
void srv_think_feed(srv_think *t, const char *s, size_t n, srv_buf *content, srv_buf *reasoning);
void srv_think_flush(srv_think *t, srv_buf *content, srv_buf *reasoning);

// A compiled output constraint (constraint.c), shared by reference count between the jobs that
// use it and the cache of compiled grammars. Immutable; any thread.
typedef struct srv_grammar srv_grammar;
const ft_grammar *srv_grammar_get(const srv_grammar *sg);
void srv_grammar_unref(srv_grammar *sg); // NULL is a no-op

typedef struct srv_job srv_job;
struct srv_job {
    // request (written by the HTTP thread before submit; read-only afterwards)
    uint64_t id;
    enum srv_api api;
    tok_ids prompt;
    int n_predict;
    ft_sampler_params sp;
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    int n_logprobs; // -1: off; else top alternatives per token (0..20)
    bool ignore_eos; // end-of-generation tokens are never sampled (llama-server's ignore_eos)
    bool stream;
    int rebuild_slots; // SRV_API_REBUILD: the new --moe-cache-size
    srv_grammar *grammar; // the output's constraint (a reference), NULL: none (a forced tool call's included)
    struct srv_tools *tools; // the reply's tool-call parser (tool_call.h), NULL: no tools to call
    const ft_grammar_vocab *gvocab; // the server's grammar view of the vocabulary, set with grammar

    atomic_bool cancel;
    atomic_int refs;

    // output (inference thread appends, HTTP thread drains; under mu)
    pthread_mutex_t mu;
    srv_buf out;
    srv_tokinfo *toks;
    int n_toks, cap_toks;
    bool done;
    bool queued_notify; // already in the HTTP side's ready list
    enum srv_finish finish;
    char *stop_matched; // the stop string it finished on (owned), else NULL (an end-of-generation token)
    char errmsg[512];
    int n_gen;
    int n_cached; // prompt tokens whose KV came from the prefix cache (set at start, under mu)
    double t_submit, t_start, t_first, t_end; // wall clock (ft_time_s)
    // the expert cache's counters from its start to its end (offload; other sequences' steps in
    // that time included: they share the cache), set before done
    bool has_moe;
    ft_moe_counts moe;

    // HTTP side only
    struct evhttp_request *req;
    struct event *ev_watch; // the client's socket, watched for EOF while we compute
    struct srv_http *http;
    bool disconnected;
    bool done_seen; // the end was delivered (a later wake-up of the job finds nothing new)
    bool head_sent; // stream: headers / first events sent
    bool include_usage;
    bool echo;
    bool split_think;
    srv_think think;
    // Messages API stream: message_start sent, content blocks started, the open one
    bool msg_started;
    int msg_blocks;
    enum { SRV_BLOCK_NONE, SRV_BLOCK_THINKING, SRV_BLOCK_TEXT, SRV_BLOCK_TOOL } msg_open;
    srv_buf content, reasoning; // accumulated (non-streaming) or per-drain scratch
    // the reply's tool calls as parsed (non-streamed replies)
    struct srv_call *calls;
    int n_calls, cap_calls;
    json_t *logprobs;           // accumulated logprob entries (non-streaming)
    int text_offset;
    char rid[48]; // response id: chatcmpl-..., cmpl-..., msg_...
    long created;
    const char *model_name;
};

srv_job *srv_job_new(void);
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j); // frees at zero

// ---------------------------------------------------------------------------------------------
// Scheduler: owns the inference thread and one batch engine (src/engine/batch.h). Up to
// max_running sequences run at once; each step evaluates the next token of every decoding
// sequence together with prefill chunks of joining ones, up to engine.n_batch tokens
// (continuous batching). The rest wait in the queue.

typedef struct srv_sched srv_sched;

// Called on the inference thread when a job has new output or is done. Must not block.
typedef void (*srv_notify_fn)(void *ctx, srv_job *j);

typedef struct srv_sched_stats {
    int running, queued;
    long kv_used, kv_total; // positions held by sequences / in the pool they share
    long kv_cached;         // positions the prefix cache keeps (some also held by sequences)
    bool prefix_cache;
    // counted by the inference thread as it goes (the metrics count a request when it ends)
    long steps;             // forward steps run
    long tokens_generated;  // tokens generated (as usage counts them), running requests' included
    long prompt_evaluated;  // prompt tokens run through the model (not those the prefix cache had)
    const char *device;     // "cpu" or "cuda"
    const char *moe_backend; // the --moe-backend placed ("fused" on the CPU)
} srv_sched_stats;

// The router's selections per MoE block and expert, cumulative since start-up, as the
// inference thread last read them (ft_batch_route_counts).
typedef struct srv_routes {
    int n_moe;          // MoE blocks
    int n_expert, n_expert_used;
    int *block;         // (n_moe) block index of each
    uint64_t *counts;   // (n_moe, n_expert) selections of each expert
} srv_routes;
void srv_routes_free(srv_routes *r); // a zeroed one is a no-op

srv_sched *srv_sched_init(const ft_model *m, const tok_vocab *v, const srv_params *p, srv_notify_fn notify,
                          void *ctx, ft_err *err);
// Cancels everything, joins the thread, frees the batch engine. NULL is a no-op.
void srv_sched_free(srv_sched *s);
// Queues a job (takes a reference). Returns false when the queue is full.
bool srv_sched_submit(srv_sched *s, srv_job *j);
void srv_sched_stats_get(srv_sched *s, srv_sched_stats *out);
// One sequence slot as the inference thread last published it (after every step): its job now,
// else the last it ran (id 0: none yet). For llama-server's GET /slots.
typedef struct srv_slot_info {
    bool busy;
    uint64_t id;              // the job's id
    int n_prompt, n_cached;   // prompt tokens, and of those from the prefix cache
    int n_prefilled;          // prompt tokens evaluated so far (the cached ones included)
    int n_decoded, n_predict; // tokens generated, and the most it may generate
    ft_sampler_params sp;
} srv_slot_info;
int srv_sched_n_slots(const srv_sched *s);
void srv_sched_slots_get(srv_sched *s, srv_slot_info *out); // (srv_sched_n_slots) entries
// Room for a prompt: n_ctx of every sequence.
int srv_sched_n_ctx(const srv_sched *s);
// The expert cache (--moe-backend offload): is there one, and a copy of its counters as the
// inference thread last read them (between steps: after each finished request, when it goes
// idle, and at most every 200 ms while it runs). srv_sched_moe_stats returns false without a
// cache; free *out with ft_moe_stats_free.
bool srv_sched_has_moe_cache(const srv_sched *s);
bool srv_sched_moe_stats(srv_sched *s, ft_moe_stats *out);
// A copy of the route counters (read as the expert cache's counters are); returns false, *out
// zeroed, where the model has no experts or its backend does not count them. Free *out with
// srv_routes_free.
bool srv_sched_routes(srv_sched *s, srv_routes *out);
// Queues a cache resize (j->api SRV_API_REBUILD, j->rebuild_slots; takes a reference), run
// between two steps; j ends done with finish STOP (resized), ERROR (errmsg says why) or CANCEL
// (shutting down). Returns false when a resize is already waiting.
bool srv_sched_rebuild(srv_sched *s, srv_job *j);

// ---------------------------------------------------------------------------------------------
// Metrics (HTTP thread only).

typedef struct srv_metrics srv_metrics;
srv_metrics *srv_metrics_init(void);
void srv_metrics_free(srv_metrics *m);
void srv_metrics_request(srv_metrics *m); // one HTTP request received
void srv_metrics_job(srv_metrics *m, const srv_job *j);
// Prometheus text and /v1/stats JSON (caller frees). moe: the expert cache's counters, per pool
// and per layer, or NULL when there is no cache.
char *srv_metrics_prometheus(const srv_metrics *m, const srv_sched_stats *s, const ft_moe_stats *moe);
// routes: the route counters, or NULL where there are none.
json_t *srv_metrics_json(const srv_metrics *m, const srv_sched_stats *s, const ft_moe_stats *moe,
                         const srv_routes *routes);
// The expert cache as JSON: slots, layout, bytes, totals, pools and layers (cumulative).
json_t *srv_metrics_moe_json(const ft_moe_stats *moe);

// ---------------------------------------------------------------------------------------------
// JSON helpers (json.c)

// A JSON string from bytes; invalid UTF-8 becomes U+FFFD. Never NULL.
json_t *srv_json_str(const char *s, size_t n);
// Reads optional fields with type checks. Each returns false and writes a message into err
// when the field is present with a wrong type or out of [lo, hi].
bool srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, ft_err *err);
bool srv_get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, ft_err *err);
bool srv_get_bool(json_t *o, const char *key, bool *out, ft_err *err);
// Reads request sampling fields common to the APIs into j (temperature, top_p, top_k, min_p,
// seed, stop, penalties, max_tokens and the given alias). A field the request leaves out takes
// the server's default (p->sampling, where p->sampling_set has it), else OpenAI's.
bool srv_parse_sampling(const srv_params *p, json_t *body, srv_job *j, const char *stop_key, ft_err *err);
// The same over other defaults than OpenAI's (llama-server's /completion: ft_sampler_default_params).
bool srv_parse_sampling_from(const srv_params *p, json_t *body, srv_job *j, const char *stop_key,
                             ft_sampler_params base, ft_err *err);
// Whether a finished job ended before its answer did (cancelled by the server's shutdown or for
// a client gone, or failed), which neither API has a stop reason for, and what to tell its client.
bool srv_job_cut_short(const srv_job *j);
const char *srv_job_cut_message(const srv_job *j);
// Reads the request's output constraint into j->grammar: OpenAI's response_format (text,
// json_object, json_schema) or llama-server's grammar (GBNF) or json_schema, at most one of
// them, compiled or taken from the cache of compiled grammars. Returns false with a message for
// a 400 (a field malformed, a schema or grammar that does not compile, saying where).
bool srv_parse_constraint(const srv_params *p, json_t *body, srv_job *j, ft_err *err);
// Reads the request's tools and tool_choice (OpenAI's shape, or with anthropic the Messages
// API's, converted to OpenAI's function shape templates read) into *tools_text (the template's
// `tools`, a JSON array; NULL: none; caller frees), j->tools (the reply's parser, unless the
// choice is "none") and, for a choice that forces a call ("required", Anthropic's "any", a named
// tool), j->grammar. Returns false with a message for a 400: a malformed tool or choice, a
// forced call beside another constraint, tools with a template whose tool-call format ft does
// not know, a schema that does not compile.
bool srv_parse_tools(const srv_params *p, json_t *body, bool anthropic, srv_job *j, char **tools_text, ft_err *err);
// The grammar forcing a call (tool_grammar.c), from the cache of compiled grammars.
srv_grammar *srv_grammar_tools(const srv_params *p, enum tok_tool_format f, json_t *tools, const char *only,
                               bool parallel, ft_err *err);
// Drops the cache of compiled grammars (the server's end; jobs keep their references).
void srv_constraint_cache_clear(void);
// Refuses a request that sets one of fields (NULL-terminated), which ft does not implement yet,
// naming it; with p->lenient it is ignored, with a log line. null, [] and {} count as unset.
bool srv_refuse_unimplemented(const srv_params *p, json_t *body, const char *const *fields, ft_err *err);

// ---------------------------------------------------------------------------------------------
// The HTTP side (http.c) as the API files see it.

typedef struct srv_http srv_http;
const srv_params *srv_http_params(const srv_http *h);
const tok_vocab *srv_http_vocab(const srv_http *h);
int srv_http_n_ctx(const srv_http *h);
uint64_t srv_http_next_id(srv_http *h);
// The vocabulary as constrained decoding sees it (ft_grammar_vocab), made on first use (about
// 0.2 s for 152k tokens, on the prep thread that asks first); it lives as long as the server.
const ft_grammar_vocab *srv_http_grammar_vocab(srv_http *h);
// A job for the request req, its id the next one and its response id rid_prefix followed by it.
srv_job *srv_http_new_job(srv_http *h, struct evhttp_request *req, const char *rid_prefix);

// Replies with a JSON body (takes ownership of body).
void srv_reply_json(struct evhttp_request *req, int status, json_t *body);
// OpenAI error shape {"error":{"message","type","param","code"}}.
void srv_reply_error(struct evhttp_request *req, int status, const char *type, const char *msg);
// Anthropic error shape {"type":"error","error":{"type","message"}}.
void srv_reply_error_anthropic(struct evhttp_request *req, int status, const char *type, const char *msg);
// Takes the request out of the job for the final reply: stops watching the client.
struct evhttp_request *srv_job_take_req(srv_job *j);
// Starts an SSE response / sends one event (NULL event name: data only) / ends it.
void srv_sse_begin(srv_job *j);
void srv_sse_send(srv_job *j, const char *event, json_t *data); // takes ownership of data
void srv_sse_send_raw(srv_job *j, const char *text);
void srv_sse_end(srv_job *j);
// Tokenizes, checks the context, submits. On failure replies with an error and returns false.
bool srv_http_submit(srv_http *h, srv_job *j, bool anthropic);

// ---------------------------------------------------------------------------------------------
// The chat prompt (chat_prompt.c), shared by both APIs.

// Renders messages (an array of {"role", "content", "reasoning_content"}; content a string,
// null or text/thinking parts) through p's chat template and tokenizes them into j->prompt.
// system: an extra leading system message, or NULL. reasoning_effort: "low", "medium" or
// "high" for a template that takes one (tok_chat_takes_effort: gpt-oss's), else NULL. kwargs:
// chat_template_kwargs (an object whose members a Jinja template sees as variables), or NULL.
// Sets up j->think for the template's reasoning (harmony channels where tok_chat_harmony says
// so: gpt-oss's built-in or its own Jinja text). Returns false with a message for a 400
// (no template, a bad message, an effort the template does not take (ignored with --lenient),
// a template that fails to render).
// Assistant messages may carry tool calls (OpenAI's "tool_calls"; Anthropic's "tool_use"
// blocks), and tool results come as "tool" messages (OpenAI) or "tool_result" blocks (Anthropic:
// each its own tool message, before the user's text). tools: the template's `tools` (JSON text)
// or NULL.
bool srv_chat_prompt(const srv_params *p, const tok_vocab *v, json_t *msgs, const char *system,
                     bool enable_thinking, const char *reasoning_effort, json_t *kwargs, const char *tools,
                     srv_job *j, ft_err *err);

// A tool call of a reply as parsed (tool_call.c's events), for the non-streamed answers.
typedef struct srv_call {
    char id[160], name[128];
    srv_buf args;
    bool broken;
} srv_call;

// ---------------------------------------------------------------------------------------------
// The APIs (openai.c, anthropic.c, llama_api.c).

// Request parsing (no I/O: what the fuzz target drives). Each fills the job's request part
// (prompt tokens, sampling, limits, stream flags) from a JSON object body, or returns false
// with a message for a 400.
bool srv_openai_parse_chat(const srv_params *p, const tok_vocab *v, json_t *body, srv_job *j, ft_err *err);
bool srv_openai_parse_completion(const srv_params *p, const tok_vocab *v, json_t *body, srv_job *j,
                                 ft_err *err);
bool srv_anthropic_parse(const srv_params *p, const tok_vocab *v, json_t *body, srv_job *j, ft_err *err);
// llama-server's POST /completion (llama_api.c); n_ctx: the context a sequence gets.
bool srv_llama_parse_completion(const srv_params *p, const tok_vocab *v, int n_ctx, json_t *body, srv_job *j,
                                ft_err *err);
// A completion's prompt: a string (tokenized with the model's special tokens) or token ids.
bool srv_parse_completion_prompt(const tok_vocab *v, json_t *pr, srv_job *j, ft_err *err);

// Parses a request's body into its job (templating and tokenizing: the slow part of a request
// before it runs). Called on a prep thread: reads only the server's parameters and vocabulary.
typedef bool (*srv_parse_fn)(srv_http *h, json_t *body, srv_job *j, ft_err *err);
// Runs parse on a prep thread, then on the loop answers its error with a 400 (in the Anthropic
// shape when anthropic) or submits the job (srv_http_submit). Takes the HTTP side's reference
// to j; body is kept until then.
void srv_http_prepare(srv_http *h, srv_job *j, json_t *body, srv_parse_fn parse, bool anthropic);
// The same, answering {"input_tokens": N} (Anthropic's count_tokens) instead of submitting.
void srv_http_prepare_count(srv_http *h, srv_job *j, json_t *body, srv_parse_fn parse);

// Route handlers: parse the body, build a job, submit it. Output arrives in *_output.
void srv_openai_chat(srv_http *h, struct evhttp_request *req, json_t *body);
void srv_openai_completion(srv_http *h, struct evhttp_request *req, json_t *body);
void srv_anthropic_messages(srv_http *h, struct evhttp_request *req, json_t *body);
void srv_anthropic_count_tokens(srv_http *h, struct evhttp_request *req, json_t *body); // answers at once
void srv_llama_completion(srv_http *h, struct evhttp_request *req, json_t *body);
// New output of a job (text, tokens drained into the arguments); done at the end.
void srv_openai_output(srv_job *j, const char *text, size_t n, const srv_tokinfo *toks, int n_toks,
                       bool done);
void srv_anthropic_output(srv_job *j, const char *text, size_t n, bool done);
void srv_llama_output(srv_job *j, const char *text, size_t n, bool done);
// The Messages API's stream events for new output of j (thinking and text blocks split at
// <think>...</think>), each handed to emit (which takes ownership of data). The server's emit
// sends SSE; tests collect the events.
typedef void (*srv_event_fn)(void *ctx, srv_job *j, const char *event, json_t *data);
void srv_anthropic_stream(srv_job *j, const char *text, size_t n, bool done, srv_event_fn emit, void *ctx);

#endif
