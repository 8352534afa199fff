// anthropic.c: POST /v1/messages, the Anthropic Messages API: request parsing (system,
// messages, max_tokens, sampling, stop_sequences, thinking, stream) and the responses: one
// message object, or the event sequence message_start, content_block_start,
// content_block_delta..., content_block_stop, message_delta, message_stop. A thinking model's
// <think>...</think> (gpt-oss: its analysis channel) becomes a thinking block before the text
// block. Errors use Anthropic's error shape.
#include "srv_impl.h"
#include "tool_call.h"

#include <event2/http.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The request's prompt and settings; max_tokens required for a generation (not for counting).
static bool parse_request(const srv_params *p, const tok_vocab *v, json_t *body, srv_job *j, bool generate,
                          ft_err *err) {
    j->api = SRV_API_MESSAGES;
    j->split_think = true;
    // an output constraint is never dropped, not even with --lenient: a client relying on it
    // would parse whatever came
    static const char *const constraints[] = {"output_format", "response_format", "grammar", "json_schema"};
    for (size_t i = 0; i < FT_ARRAY_LEN(constraints); i++) {
        json_t *x = json_object_get(body, constraints[i]);
        if (x && !json_is_null(x))
            return ft_err_set(err, "'%s': structured output is served on /v1/chat/completions, /v1/completions and "
                                   "/completion, not on /v1/messages",
                              constraints[i]);
    }
    int64_t mt = -1;
    srv_buf sys = {0};
    bool have_sys = false, ok = false;
    char *tools = NULL;
    if (!srv_parse_tools(p, body, true, j, &tools, err)) return false;
    json_t *msgs = json_object_get(body, "messages");
    if (generate && !json_object_get(body, "max_tokens")) {
        ft_err_set(err, "'max_tokens' is required");
        goto out;
    }
    if (!srv_get_int(body, "max_tokens", 1, INT32_MAX, &mt, err) ||
        !srv_get_bool(body, "stream", &j->stream, err) || !srv_parse_sampling(p, body, j, "stop_sequences", err))
        goto out;
    j->n_predict = (int)mt;
    bool thinking = !j->grammar; // absent: the chat template's default (off where a call is forced)
    json_t *th = json_object_get(body, "thinking");
    if (th && !json_is_null(th)) {
        json_t *type = json_object_get(th, "type");
        if (!json_is_object(th) || !json_is_string(type) ||
            (strcmp(json_string_value(type), "enabled") && strcmp(json_string_value(type), "disabled"))) {
            ft_err_set(err, "'thinking' must be {\"type\": \"enabled\" or \"disabled\"}");
            goto out;
        }
        int64_t budget = 0;
        if (!srv_get_int(th, "budget_tokens", 0, INT32_MAX, &budget, err)) goto out;
        thinking = !strcmp(json_string_value(type), "enabled");
        if (thinking && j->grammar) {
            ft_err_set(err, "'thinking': a 'tool_choice' that forces a call has no reasoning (leave thinking disabled)");
            goto out;
        }
    }
    json_t *s = json_object_get(body, "system");
    if (json_is_string(s)) {
        srv_buf_add(&sys, json_string_value(s), json_string_length(s));
        have_sys = true;
    } else if (json_is_array(s)) {
        size_t i;
        json_t *b;
        json_array_foreach(s, i, b) {
            json_t *t = json_object_get(b, "text");
            if (!json_is_string(t)) {
                ft_err_set(err, "system[%zu] must be a text block", i);
                goto out;
            }
            if (i) srv_buf_add(&sys, "\n", 1);
            srv_buf_add(&sys, json_string_value(t), json_string_length(t));
        }
        have_sys = true;
    } else if (s && !json_is_null(s)) {
        ft_err_set(err, "'system' must be a string or an array of text blocks");
        goto out;
    }
    // Anthropic content blocks are {"type":"text","text":...} like OpenAI's parts
    if (json_is_array(msgs)) {
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m) {
            json_t *r = json_object_get(m, "role");
            if (json_is_string(r) && strcmp(json_string_value(r), "user") &&
                strcmp(json_string_value(r), "assistant")) {
                ft_err_set(err, "messages[%zu]: role must be 'user' or 'assistant'", i);
                goto out;
            }
        }
    }
    if (!srv_chat_prompt(p, v, msgs, have_sys ? sys.p : NULL, thinking, NULL, NULL, tools, j, err)) goto out;
    ok = true;
out:
    srv_buf_free(&sys);
    free(tools);
    return ok;
}

bool srv_anthropic_parse(const srv_params *p, const tok_vocab *v, json_t *body, srv_job *j, ft_err *err) {
    return parse_request(p, v, body, j, true, err);
}

static bool parse_count(srv_http *h, json_t *body, srv_job *j, ft_err *err) {
    return parse_request(srv_http_params(h), srv_http_vocab(h), body, j, false, err);
}

// POST /v1/messages/count_tokens: the prompt's tokens as /v1/messages would render them.
void srv_anthropic_count_tokens(srv_http *h, struct evhttp_request *req, json_t *body) {
    srv_job *j = srv_job_new();
    j->req = req;
    srv_http_prepare_count(h, j, body, parse_count);
}

static bool parse_messages(srv_http *h, json_t *body, srv_job *j, ft_err *err) {
    return srv_anthropic_parse(srv_http_params(h), srv_http_vocab(h), body, j, err);
}

void srv_anthropic_messages(srv_http *h, struct evhttp_request *req, json_t *body) {
    srv_http_prepare(h, srv_http_new_job(h, req, "msg_ft"), body, parse_messages, true);
}

static const char *stop_reason(const srv_job *j) {
    if (j->finish == SRV_FINISH_LENGTH) return "max_tokens";
    if (j->tools && srv_tools_n_calls(j->tools)) return "tool_use";
    return j->stop_matched ? "stop_sequence" : "end_turn";
}

// The stop sequence that ended the message, or null.
static json_t *stop_sequence(const srv_job *j, bool done) {
    return done && j->stop_matched ? json_string(j->stop_matched) : json_null();
}

static json_t *message(const srv_job *j, bool done, json_t *content) {
    // as Anthropic counts: input_tokens are those not read from the cache
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:{s:i,s:i,s:i}}", "id", j->rid, "type", "message", "role",
                     "assistant", "model", j->model_name, "content", content, "stop_reason",
                     done ? json_string(stop_reason(j)) : json_null(), "stop_sequence", stop_sequence(j, done),
                     "usage", "input_tokens", (json_int_t)j->prompt.n - j->n_cached, "cache_read_input_tokens",
                     (json_int_t)j->n_cached, "output_tokens", (json_int_t)(done ? j->n_gen : 0));
}

// Non-streamed reply: content is [thinking block,] text block.
static void reply_message(srv_job *j) {
    struct evhttp_request *req = srv_job_take_req(j);
    if (srv_job_cut_short(j)) {
        srv_reply_error_anthropic(req, j->finish == SRV_FINISH_CANCEL ? 503 : 500, "api_error", srv_job_cut_message(j));
        return;
    }
    json_t *content = json_array();
    if (j->reasoning.n)
        json_array_append_new(content, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                                 srv_json_str(j->reasoning.p, j->reasoning.n), "signature", ""));
    // the text block, unless the reply is calls alone
    if (j->content.n || !j->n_calls)
        json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text",
                                                 srv_json_str(j->content.p ? j->content.p : "", j->content.n)));
    for (int i = 0; i < j->n_calls; i++) {
        // a call cut short or broken has no input object to give: its text goes to the client as text
        // (invalid UTF-8 in the model's text as U+FFFD, as everywhere in the replies)
        json_t *text = srv_json_str(j->calls[i].args.p, j->calls[i].args.n);
        json_t *input = j->calls[i].broken ? NULL
                                           : json_loadb(json_string_value(text), json_string_length(text),
                                                        JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
        json_decref(text);
        if (json_is_object(input))
            json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", j->calls[i].id,
                                                     "name", j->calls[i].name, "input", input));
        else {
            json_decref(input);
            json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text",
                                                     srv_json_str(j->calls[i].args.p, j->calls[i].args.n)));
        }
    }
    srv_reply_json(req, 200, message(j, true, content));
}

static void close_block(srv_job *j, srv_event_fn emit, void *ctx) {
    if (j->msg_open == SRV_BLOCK_NONE) return;
    emit(ctx, j, "content_block_stop",
         json_pack("{s:s,s:i}", "type", "content_block_stop", "index", j->msg_blocks - 1));
    j->msg_open = SRV_BLOCK_NONE;
}

// Sends text into a block of the given kind, closing the open one and starting a new one when
// the kind changes.
static void block_text(srv_job *j, bool thinking, const char *s, size_t n, srv_event_fn emit, void *ctx) {
    if (!n) return;
    int want = thinking ? SRV_BLOCK_THINKING : SRV_BLOCK_TEXT;
    const char *kind = thinking ? "thinking" : "text";
    if ((int)j->msg_open != want) {
        close_block(j, emit, ctx);
        emit(ctx, j, "content_block_start",
             json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", j->msg_blocks,
                       "content_block", "type", kind, kind, ""));
        j->msg_blocks++;
        j->msg_open = want;
    }
    emit(ctx, j, "content_block_delta",
         json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", j->msg_blocks - 1, "delta",
                   "type", thinking ? "thinking_delta" : "text_delta", kind, srv_json_str(s, n)));
}

// A reply with tools, streamed: text into text blocks, each call a tool_use block whose input
// comes as input_json_delta pieces.
typedef struct msg_events {
    srv_job *j;
    srv_event_fn emit;
    void *ctx;
    srv_buf *reasoning; // sent before the first event of a piece
} msg_events;

static void msg_event(void *ctx, const srv_tc_event *e) {
    msg_events *a = ctx;
    srv_job *j = a->j;
    if (a->reasoning->n) {
        block_text(j, true, a->reasoning->p, a->reasoning->n, a->emit, a->ctx);
        a->reasoning->n = 0;
    }
    switch (e->kind) {
    case SRV_TC_TEXT: block_text(j, false, e->s, e->n, a->emit, a->ctx); break;
    case SRV_TC_START:
        close_block(j, a->emit, a->ctx);
        a->emit(a->ctx, j, "content_block_start",
                json_pack("{s:s,s:i,s:{s:s,s:s,s:s,s:{}}}", "type", "content_block_start", "index", j->msg_blocks,
                          "content_block", "type", "tool_use", "id", e->id, "name", e->name, "input"));
        j->msg_blocks++;
        j->msg_open = SRV_BLOCK_TOOL;
        break;
    case SRV_TC_ARGS:
        a->emit(a->ctx, j, "content_block_delta",
                json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", j->msg_blocks - 1, "delta",
                          "type", "input_json_delta", "partial_json", srv_json_str(e->s, e->n)));
        break;
    case SRV_TC_END: close_block(j, a->emit, a->ctx); break;
    }
}

void srv_anthropic_stream(srv_job *j, const char *text, size_t n, bool done, srv_event_fn emit, void *ctx) {
    if (!j->msg_started) {
        j->msg_started = true;
        emit(ctx, j, "message_start",
             json_pack("{s:s,s:o}", "type", "message_start", "message", message(j, false, json_array())));
    }
    srv_buf content = {0}, reasoning = {0};
    if (j->tools) {
        msg_events a = {j, emit, ctx, &reasoning};
        srv_tools_feed_reply(j->tools, &j->think, text, n, &reasoning, msg_event, &a);
        if (done) srv_tools_flush_reply(j->tools, &j->think, &reasoning, msg_event, &a);
    } else {
        srv_think_feed(&j->think, text, n, &content, &reasoning);
        if (done) srv_think_flush(&j->think, &content, &reasoning);
    }
    // within one piece the reasoning comes first: it ends where the answer begins
    block_text(j, true, reasoning.p, reasoning.n, emit, ctx);
    block_text(j, false, content.p, content.n, emit, ctx);
    srv_buf_free(&content);
    srv_buf_free(&reasoning);
    if (!done) return;
    if (srv_job_cut_short(j)) { // Anthropic's error event ends the stream: no message_delta or message_stop
        emit(ctx, j, "error",
             json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error", "message", srv_job_cut_message(j)));
        return;
    }
    if (j->msg_blocks == 0) { // an empty answer still has one (empty) text block
        emit(ctx, j, "content_block_start",
             json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0, "content_block",
                       "type", "text", "text", ""));
        j->msg_blocks = 1;
        j->msg_open = SRV_BLOCK_TEXT;
    }
    close_block(j, emit, ctx);
    emit(ctx, j, "message_delta",
         json_pack("{s:s,s:{s:s,s:o},s:{s:i}}", "type", "message_delta", "delta", "stop_reason", stop_reason(j),
                   "stop_sequence", stop_sequence(j, true), "usage", "output_tokens", (json_int_t)j->n_gen));
    emit(ctx, j, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void emit_sse(void *ctx, srv_job *j, const char *event, json_t *data) {
    (void)ctx;
    srv_sse_send(j, event, data);
}

static void keep_event(void *ctx, const srv_tc_event *e) {
    srv_job *j = ctx;
    if (e->kind == SRV_TC_TEXT) srv_buf_add(&j->content, e->s, e->n);
    else srv_calls_record(j, e);
}

void srv_anthropic_output(srv_job *j, const char *text, size_t n, bool done) {
    if (!j->stream) {
        if (j->tools) {
            srv_tools_feed_reply(j->tools, &j->think, text, n, &j->reasoning, keep_event, j);
            if (done) srv_tools_flush_reply(j->tools, &j->think, &j->reasoning, keep_event, j);
        } else {
            srv_think_feed(&j->think, text, n, &j->content, &j->reasoning);
            if (done) srv_think_flush(&j->think, &j->content, &j->reasoning);
        }
        if (!done || !j->req) return;
        reply_message(j);
        return;
    }
    srv_anthropic_stream(j, text, n, done, emit_sse, NULL);
    if (done) srv_sse_end(j);
}
