// openai.c: POST /v1/chat/completions and /v1/completions: request parsing into a job, and
// the responses (one JSON object, or SSE chunks ending in `data: [DONE]`).
#include "srv_impl.h"
#include "tool_call.h"

#include <event2/http.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse_max_tokens(json_t *body, srv_job *j, ft_err *err) {
    int64_t mt = -1;
    if (!srv_get_int(body, "max_tokens", 0, INT32_MAX, &mt, err)) return false;
    if (!srv_get_int(body, "max_completion_tokens", 0, INT32_MAX, &mt, err)) return false;
    if (!srv_get_int(body, "n_predict", -1, INT32_MAX, &mt, err)) return false;
    j->n_predict = (int)mt;
    return true;
}

static bool parse_stream(json_t *body, srv_job *j, ft_err *err) {
    if (!srv_get_bool(body, "stream", &j->stream, err)) return false;
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return ft_err_set(err, "'stream_options' must be an object");
        if (!srv_get_bool(so, "include_usage", &j->include_usage, err)) return false;
    }
    int64_t n = 1;
    if (!srv_get_int(body, "n", INT64_MIN, INT64_MAX, &n, err)) return false;
    if (n != 1) return ft_err_set(err, "'n' must be 1: ft generates one choice per request");
    return true;
}

// Fields of each route ft does not implement yet (srv_refuse_unimplemented).
static const char *const k_chat_unimplemented[] = {"functions", "function_call", "logit_bias", "audio", "prediction",
                                                   NULL};
static const char *const k_completion_unimplemented[] = {"logit_bias", "suffix", NULL};

// reasoning_effort (OpenAI's field, or chat_template_kwargs' as llama-server takes it): "low",
// "medium" or "high" into *out, NULL where absent or null.
static bool parse_effort(json_t *obj, const char **out, ft_err *err) {
    json_t *e = json_object_get(obj, "reasoning_effort");
    if (!e || json_is_null(e)) return true;
    const char *s = json_is_string(e) ? json_string_value(e) : "";
    if (strcmp(s, "low") && strcmp(s, "medium") && strcmp(s, "high"))
        return ft_err_set(err, "'reasoning_effort' must be \"low\", \"medium\" or \"high\"");
    *out = s;
    return true;
}

bool srv_openai_parse_chat(const srv_params *p, const tok_vocab *v, json_t *body, srv_job *j, ft_err *err) {
    j->api = SRV_API_CHAT;
    if (!srv_refuse_unimplemented(p, body, k_chat_unimplemented, err) || !srv_parse_constraint(p, body, j, err))
        return false;
    // a constrained reply is the answer alone: the template's thinking is off (a reply that
    // opened <think> could not close it under the grammar), and nothing is split off; a forced
    // tool call is constrained too, but still split (gpt-oss's channels carry the call)
    j->split_think = !j->grammar;
    char *tools = NULL;
    if (!srv_parse_tools(p, body, false, j, &tools, err)) return false;
    bool ok = false, logprobs = false, thinking = !j->grammar;
    int64_t top = 0;
    const char *effort = NULL;
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (!parse_stream(body, j, err) || !parse_max_tokens(body, j, err) ||
        !srv_parse_sampling(p, body, j, "stop", err) || !srv_get_bool(body, "logprobs", &logprobs, err) ||
        !srv_get_int(body, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &top, err) ||
        !srv_get_bool(body, "enable_thinking", &thinking, err) ||
        (json_is_object(kw) && !srv_get_bool(kw, "enable_thinking", &thinking, err)) ||
        !parse_effort(body, &effort, err) || (json_is_object(kw) && !parse_effort(kw, &effort, err)))
        goto out;
    if (j->grammar && thinking) {
        ft_err_set(err, "'enable_thinking': a reply under 'response_format', 'grammar', 'json_schema' or a "
                        "'tool_choice' that forces a call has no reasoning (leave thinking off)");
        goto out;
    }
    if (!srv_chat_prompt(p, v, json_object_get(body, "messages"), NULL, thinking, effort, json_is_object(kw) ? kw : NULL,
                         tools, j, err))
        goto out;
    j->n_logprobs = logprobs ? (int)top : -1;
    ok = true;
out:
    free(tools);
    return ok;
}

bool srv_parse_completion_prompt(const tok_vocab *v, json_t *pr, srv_job *j, ft_err *err) {
    if (json_is_array(pr) && json_array_size(pr) == 1 && json_is_string(json_array_get(pr, 0)))
        pr = json_array_get(pr, 0);
    if (json_is_string(pr)) {
        tok_encode(v, json_string_value(pr), json_string_length(pr), true, true, &j->prompt);
    } else if (json_is_array(pr) && json_array_size(pr) > 0) {
        int32_t nv = tok_n_tokens(v);
        size_t i;
        json_t *x;
        json_array_foreach(pr, i, x) {
            if (json_is_string(x) || json_is_array(x))
                return ft_err_set(err, "'prompt' holds %zu prompts: ft answers one prompt per request (send "
                                       "them as separate requests; they run concurrently)",
                                  json_array_size(pr));
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= nv)
                return ft_err_set(err, "'prompt'[%zu] is not a token id in [0, %d)", i, nv);
            if (j->prompt.n == j->prompt.cap) {
                j->prompt.cap = j->prompt.cap ? 2 * j->prompt.cap : 64;
                j->prompt.ids = ft_realloc(j->prompt.ids, j->prompt.cap * sizeof(tok_id));
            }
            j->prompt.ids[j->prompt.n++] = (tok_id)json_integer_value(x);
        }
    } else
        return ft_err_set(err, "'prompt' must be a string, or a non-empty array of token ids");
    return true;
}

bool srv_openai_parse_completion(const srv_params *p, const tok_vocab *v, json_t *body, srv_job *j,
                                 ft_err *err) {
    j->api = SRV_API_COMPLETION;
    if (!srv_refuse_unimplemented(p, body, k_completion_unimplemented, err) || !srv_parse_constraint(p, body, j, err))
        return false;
    int64_t lp = -1;
    if (!parse_stream(body, j, err) || !parse_max_tokens(body, j, err) ||
        !srv_parse_sampling(p, body, j, "stop", err) || !srv_get_bool(body, "echo", &j->echo, err) ||
        !srv_get_int(body, "logprobs", 0, 5, &lp, err))
        return false;
    if (j->n_predict < 0) j->n_predict = 16; // OpenAI's default for completions
    if (!srv_parse_completion_prompt(v, json_object_get(body, "prompt"), j, err)) return false;
    j->n_logprobs = (int)lp;
    return true;
}

static bool parse_chat(srv_http *h, json_t *body, srv_job *j, ft_err *err) {
    return srv_openai_parse_chat(srv_http_params(h), srv_http_vocab(h), body, j, err);
}

static bool parse_completion(srv_http *h, json_t *body, srv_job *j, ft_err *err) {
    return srv_openai_parse_completion(srv_http_params(h), srv_http_vocab(h), body, j, err);
}

void srv_openai_chat(srv_http *h, struct evhttp_request *req, json_t *body) {
    srv_http_prepare(h, srv_http_new_job(h, req, "chatcmpl-ft"), body, parse_chat, false);
}
void srv_openai_completion(srv_http *h, struct evhttp_request *req, json_t *body) {
    srv_http_prepare(h, srv_http_new_job(h, req, "cmpl-ft"), body, parse_completion, false);
}

// ---------------------------------------------------------------------------------------------
// Output

// "tool_calls" where the reply ended with whole calls.
static const char *finish_reason(const srv_job *j) {
    if (j->finish == SRV_FINISH_LENGTH) return "length";
    return j->tools && srv_tools_n_calls(j->tools) ? "tool_calls" : "stop";
}

// A job cut short (srv_job_cut_short) answers an error: 503 after a shutdown, 500 on a failure.
static int cut_status(const srv_job *j) { return j->finish == SRV_FINISH_CANCEL ? 503 : 500; }

// The end of a cut-short stream: an error in the API's shape ({"error": {...}}, which the SDKs
// raise), then [DONE].
static void stream_cut(srv_job *j) {
    srv_sse_send(j, NULL,
                 json_pack("{s:{s:s,s:s,s:n,s:i}}", "error", "message", srv_job_cut_message(j), "type", "server_error",
                           "param", "code", cut_status(j)));
    srv_sse_send_raw(j, "data: [DONE]\n\n");
    srv_sse_end(j);
}

static json_t *usage(const srv_job *j) {
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", (json_int_t)j->prompt.n, "completion_tokens",
                     (json_int_t)j->n_gen, "total_tokens", (json_int_t)(j->prompt.n + (size_t)j->n_gen),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)j->n_cached);
}

// Finishes a non-streamed response: adds the usage and sends it, or a 500 if the job failed.
static void reply_result(srv_job *j, json_t *res) {
    json_object_set_new(res, "usage", usage(j));
    struct evhttp_request *req = srv_job_take_req(j);
    if (srv_job_cut_short(j)) {
        json_decref(res);
        srv_reply_error(req, cut_status(j), "server_error", srv_job_cut_message(j));
    } else
        srv_reply_json(req, 200, res);
}

static json_t *bytes_of(const char *p, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

// Chat logprob entries ({"token","logprob","bytes","top_logprobs"}) appended to arr.
static void chat_logprobs(const srv_job *j, const srv_tokinfo *t, int n, json_t *arr) {
    const tok_vocab *v = srv_http_vocab(j->http);
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *p = tok_piece(v, t[i].id, false, &len);
        json_t *top = json_array();
        for (int k = 0; k < t[i].n_top; k++) {
            size_t l2;
            const char *p2 = tok_piece(v, t[i].top_id[k], false, &l2);
            json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", srv_json_str(p2, l2), "logprob",
                                                 (double)t[i].top_lp[k], "bytes", bytes_of(p2, l2)));
        }
        json_array_append_new(arr, json_pack("{s:o,s:f,s:o,s:o}", "token", srv_json_str(p, len), "logprob",
                                             (double)t[i].logprob, "bytes", bytes_of(p, len), "top_logprobs",
                                             top));
    }
}

// Legacy completion logprobs: {"tokens","token_logprobs","top_logprobs","text_offset"}.
static json_t *completion_logprobs(srv_job *j, const srv_tokinfo *t, int n) {
    const tok_vocab *v = srv_http_vocab(j->http);
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *p = tok_piece(v, t[i].id, false, &len);
        json_array_append_new(toks, srv_json_str(p, len));
        json_array_append_new(lps, json_real(t[i].logprob));
        json_t *top = json_object();
        for (int k = 0; k < t[i].n_top; k++) {
            size_t l2;
            const char *p2 = tok_piece(v, t[i].top_id[k], false, &l2);
            json_t *key = srv_json_str(p2, l2);
            json_object_set_new(top, json_string_value(key), json_real(t[i].top_lp[k]));
            json_decref(key);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer(j->text_offset));
        j->text_offset += (int)len;
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

static void merge_completion_logprobs(json_t *acc, json_t *add) {
    const char *keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    for (int i = 0; i < 4; i++)
        json_array_extend(json_object_get(acc, keys[i]), json_object_get(add, keys[i]));
    json_decref(add);
}

static json_t *chunk(const srv_job *j, const char *object) {
    return json_pack("{s:s,s:s,s:i,s:s,s:s}", "id", j->rid, "object", object, "created",
                     (json_int_t)j->created, "model", j->model_name, "system_fingerprint", "ft");
}

// A stream's first chunk, before any content: the assistant's role and empty content.
static void send_role_chunk(srv_job *j) {
    if (j->head_sent) return;
    json_t *ch = chunk(j, "chat.completion.chunk");
    json_object_set_new(ch, "choices",
                        json_pack("[{s:i,s:{s:s,s:s},s:n,s:n}]", "index", 0, "delta", "role", "assistant", "content",
                                  "", "logprobs", "finish_reason"));
    srv_sse_send(j, NULL, ch);
}

// A reply with tools: its events as deltas in order (streamed), or kept in the job.
typedef struct chat_events {
    srv_job *j;
    srv_buf *content; // answer text not yet in a delta (streamed), or all of it
    json_t *deltas;   // streamed: the deltas to send, in order
} chat_events;

static void push_content(chat_events *a) {
    if (!a->content->n) return;
    json_array_append_new(a->deltas, json_pack("{s:o}", "content", srv_json_str(a->content->p, a->content->n)));
    a->content->n = 0;
}

static void chat_event(void *ctx, const srv_tc_event *e) {
    chat_events *a = ctx;
    if (e->kind == SRV_TC_TEXT) {
        srv_buf_add(a->content, e->s, e->n);
        return;
    }
    if (!a->j->stream) {
        srv_calls_record(a->j, e);
        return;
    }
    push_content(a);
    if (e->kind == SRV_TC_START)
        json_array_append_new(a->deltas, json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", e->index,
                                                   "id", e->id, "type", "function", "function", "name", e->name,
                                                   "arguments", ""));
    else if (e->kind == SRV_TC_ARGS)
        json_array_append_new(a->deltas, json_pack("{s:[{s:i,s:{s:o}}]}", "tool_calls", "index", e->index, "function",
                                                   "arguments", srv_json_str(e->s, e->n)));
}

static void chat_output(srv_job *j, const char *text, size_t n, const srv_tokinfo *toks, int n_toks,
                        bool done) {
    srv_buf content = {0}, reasoning = {0};
    json_t *deltas = NULL;
    if (j->tools) { // the reply's calls parsed out of its answer
        chat_events a = {j, j->stream ? &content : &j->content, j->stream ? json_array() : NULL};
        srv_buf *r = j->stream ? &reasoning : &j->reasoning;
        srv_buf_add(a.content, "", 0);
        srv_buf_add(r, "", 0);
        srv_tools_feed_reply(j->tools, &j->think, text, n, r, chat_event, &a);
        if (done) srv_tools_flush_reply(j->tools, &j->think, r, chat_event, &a);
        if (j->stream) {
            push_content(&a);
            deltas = a.deltas;
        }
    }
    srv_buf *c = j->stream ? &content : &j->content, *r = j->stream ? &reasoning : &j->reasoning;
    srv_buf_add(c, "", 0);
    srv_buf_add(r, "", 0);
    if (!j->tools) {
        srv_think_feed(&j->think, text, n, c, r);
        if (done) srv_think_flush(&j->think, c, r);
    }
    if (j->stream && deltas) {
        // reasoning first (it ends where the answer begins), then the answer's deltas in order;
        // this drain's logprobs ride on the first chunk
        send_role_chunk(j);
        if (reasoning.n)
            json_array_insert_new(deltas, 0, json_pack("{s:o}", "reasoning_content", srv_json_str(reasoning.p, reasoning.n)));
        if (!json_array_size(deltas) && n_toks && j->n_logprobs >= 0)
            json_array_append_new(deltas, json_pack("{s:s}", "content", ""));
        size_t i;
        json_t *d;
        json_array_foreach(deltas, i, d) {
            json_t *lp = json_null();
            if (i == 0 && n_toks && j->n_logprobs >= 0) {
                json_t *arr = json_array();
                chat_logprobs(j, toks, n_toks, arr);
                json_decref(lp);
                lp = json_pack("{s:o}", "content", arr);
            }
            json_t *ch = chunk(j, "chat.completion.chunk");
            json_object_set_new(ch, "choices",
                                json_pack("[{s:i,s:O,s:o,s:n}]", "index", 0, "delta", d, "logprobs", lp, "finish_reason"));
            srv_sse_send(j, NULL, ch);
        }
        json_decref(deltas);
        content.n = reasoning.n = 0;
        n_toks = 0;
    }
    if (j->stream) {
        send_role_chunk(j);
        if (content.n || reasoning.n || n_toks) {
            json_t *delta = json_object();
            if (reasoning.n)
                json_object_set_new(delta, "reasoning_content", srv_json_str(reasoning.p, reasoning.n));
            if (content.n || !reasoning.n)
                json_object_set_new(delta, "content", srv_json_str(content.p, content.n));
            json_t *ch = chunk(j, "chat.completion.chunk");
            json_t *lp = json_null();
            if (n_toks && j->n_logprobs >= 0) {
                json_t *arr = json_array();
                chat_logprobs(j, toks, n_toks, arr);
                json_decref(lp);
                lp = json_pack("{s:o}", "content", arr);
            }
            json_object_set_new(ch, "choices",
                                json_pack("[{s:i,s:o,s:o,s:n}]", "index", 0, "delta", delta, "logprobs", lp,
                                          "finish_reason"));
            srv_sse_send(j, NULL, ch);
        }
        if (done && srv_job_cut_short(j)) {
            stream_cut(j);
        } else if (done) {
            json_t *ch = chunk(j, "chat.completion.chunk");
            json_object_set_new(ch, "choices",
                                json_pack("[{s:i,s:{},s:n,s:s}]", "index", 0, "delta", "logprobs",
                                          "finish_reason", finish_reason(j)));
            srv_sse_send(j, NULL, ch);
            if (j->include_usage) {
                ch = chunk(j, "chat.completion.chunk");
                json_object_set_new(ch, "choices", json_array());
                json_object_set_new(ch, "usage", usage(j));
                srv_sse_send(j, NULL, ch);
            }
            srv_sse_send_raw(j, "data: [DONE]\n\n");
            srv_sse_end(j);
        }
        srv_buf_free(&content);
        srv_buf_free(&reasoning);
        return;
    }
    if (n_toks && j->n_logprobs >= 0) {
        if (!j->logprobs) j->logprobs = json_array();
        chat_logprobs(j, toks, n_toks, j->logprobs);
    }
    if (!done || !j->req) return;
    // with calls and no text, content is null (as OpenAI answers)
    json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                            j->n_calls && !j->content.n ? json_null() : srv_json_str(j->content.p, j->content.n));
    if (j->reasoning.n)
        json_object_set_new(msg, "reasoning_content", srv_json_str(j->reasoning.p, j->reasoning.n));
    if (j->n_calls) {
        json_t *calls = json_array();
        for (int i = 0; i < j->n_calls; i++)
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", j->calls[i].id, "type", "function",
                                                   "function", "name", j->calls[i].name, "arguments",
                                                   srv_json_str(j->calls[i].args.p, j->calls[i].args.n)));
        json_object_set_new(msg, "tool_calls", calls);
    }
    json_t *lp = j->n_logprobs >= 0 ? json_pack("{s:O}", "content", j->logprobs ? j->logprobs : json_array())
                                    : json_null();
    json_t *res = chunk(j, "chat.completion");
    json_object_set_new(res, "choices",
                        json_pack("[{s:i,s:o,s:o,s:s}]", "index", 0, "message", msg, "logprobs", lp,
                                  "finish_reason", finish_reason(j)));
    reply_result(j, res);
}

static void completion_output(srv_job *j, const char *text, size_t n, const srv_tokinfo *toks, int n_toks,
                              bool done) {
    srv_buf echo = {0};
    if (j->echo) { // the prompt's text leads the first output
        j->echo = false;
        size_t len;
        char *s = tok_detokenize(srv_http_vocab(j->http), j->prompt.ids, j->prompt.n, false, false, &len);
        srv_buf_add(&echo, s, len);
        free(s);
        j->text_offset = (int)len;
    }
    json_t *lp = NULL;
    if (j->n_logprobs >= 0 && (n_toks || !j->logprobs)) lp = completion_logprobs(j, toks, n_toks);
    if (j->stream) {
        srv_buf_add(&echo, text, n);
        if (!j->head_sent || echo.n || lp) {
            json_t *ch = chunk(j, "text_completion");
            json_object_set_new(ch, "choices",
                                json_pack("[{s:i,s:o,s:o,s:n}]", "index", 0, "text",
                                          srv_json_str(echo.p ? echo.p : "", echo.n), "logprobs",
                                          lp ? lp : json_null(), "finish_reason"));
            srv_sse_send(j, NULL, ch);
        }
        if (done && srv_job_cut_short(j)) {
            stream_cut(j);
        } else if (done) {
            json_t *ch = chunk(j, "text_completion");
            json_object_set_new(ch, "choices",
                                json_pack("[{s:i,s:s,s:n,s:s}]", "index", 0, "text", "", "logprobs",
                                          "finish_reason", finish_reason(j)));
            if (j->include_usage) json_object_set_new(ch, "usage", usage(j));
            srv_sse_send(j, NULL, ch);
            srv_sse_send_raw(j, "data: [DONE]\n\n");
            srv_sse_end(j);
        }
        srv_buf_free(&echo);
        return;
    }
    if (echo.n) srv_buf_add(&j->content, echo.p, echo.n);
    srv_buf_free(&echo);
    srv_buf_add(&j->content, text, n);
    if (lp) {
        if (!j->logprobs)
            j->logprobs = lp;
        else
            merge_completion_logprobs(j->logprobs, lp);
    }
    if (!done || !j->req) return;
    json_t *res = chunk(j, "text_completion");
    json_object_set_new(
        res, "choices",
        json_pack("[{s:i,s:o,s:O,s:s}]", "index", 0, "text", srv_json_str(j->content.p, j->content.n),
                  "logprobs", j->logprobs ? j->logprobs : json_null(), "finish_reason", finish_reason(j)));
    reply_result(j, res);
}

void srv_openai_output(srv_job *j, const char *text, size_t n, const srv_tokinfo *toks, int n_toks,
                       bool done) {
    if (j->api == SRV_API_CHAT)
        chat_output(j, text, n, toks, n_toks, done);
    else
        completion_output(j, text, n, toks, n_toks, done);
}
