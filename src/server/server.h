// server: `ft serve`, an OpenAI- and Anthropic-compatible HTTP server over one loaded model.
//
// Threads: the caller's thread runs the HTTP side (libevent's evhttp: parsing, routes, JSON
// with jansson, SSE); one inference thread runs the scheduler (scheduler.c), which decodes up
// to max_running sequences together in batched steps (continuous batching) on the shared model.
// The two sides meet only through the scheduler's queue (requests in) and a wake-up event
// (output out); the HTTP thread never waits on inference.
//
// Memory: srv_run borrows the model and vocabulary for its whole run; the caller frees them
// after it returns. Everything else the server allocates it frees before returning.
#ifndef FT_SERVER_H
#define FT_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "../engine/engine.h"
#include "../engine/sampler.h"
#include "../tokenizer/tokenizer.h"

typedef struct srv_params {
    const char *host;       // address to bind (default 127.0.0.1)
    int port;               // default 1919; 0 picks a free port (printed at start-up)
    int max_running;        // sequences decoding at once, batched (default 4)
    int max_queue;          // requests waiting beyond those; one more is a 429 (default 64)
    size_t max_body;        // request body limit in bytes (default 4 MiB)
    size_t max_headers;     // request header limit in bytes (default 16 KiB)
    int timeout_s;          // idle / stalled client timeout (default 600)
    int max_connections;    // open client connections at most; 0: from the open-file limit
    int default_max_tokens; // when a request names none (default: the room left in context)
    ft_sampler_params sampling; // the fields in sampling_set: defaults of requests naming none
    unsigned sampling_set;      // FT_SAMPLE_* bits (0: each API's own defaults)
    const char *model_name; // served model id (required)
    const char *model_path; // the GGUF served (GET /props), or NULL
    const char *api_key;    // NULL: no authentication
    const char *admin_key;  // the admin routes' key (/v1/cache/rebuild); NULL: those routes are off
    bool lenient;           // request fields ft does not implement are ignored (logged), not refused
    bool no_slots;          // GET /slots answers 501 (llama-server's --no-slots)
    const tok_chat *chat;    // the chat template; NULL: chat routes answer 400 (none known)
    ft_engine_params engine; // per sequence; engine.n_ctx must be set
    const char *ready_file;  // if set, the bound port is written there once listening
} srv_params;

srv_params srv_default_params(void);

// Serves until SIGINT or SIGTERM (running requests are cancelled, their clients get the end
// of their stream). Returns false and sets *err when the server cannot start (the address is
// in use, an engine does not fit); true after a clean shutdown.
bool srv_run(const srv_params *p, const ft_model *m, const tok_vocab *v, ft_err *err);

#endif
