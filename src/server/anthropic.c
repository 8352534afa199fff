// anthropic.c: POST /v1/messages, the Anthropic Messages API: request parsing (system,
// messages, max_tokens, sampling, stop_sequences, stream) and the responses: one message
// object, or the event sequence message_start, content_block_start, content_block_delta...,
// content_block_stop, message_delta, message_stop. Errors use Anthropic's error shape.
#include "srv_impl.h"

#include <event2/http.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool srv_anthropic_parse(const srv_params *p, const tok_vocab *v, json_t *body, srv_job *j, ft_err *err) {
    j->api = SRV_API_MESSAGES;
    int64_t mt = -1;
    srv_buf sys = {0};
    bool have_sys = false, ok = false;
    json_t *msgs = json_object_get(body, "messages");
    if (!json_object_get(body, "max_tokens")) {
        ft_err_set(err, "'max_tokens' is required");
        goto out;
    }
    if (!srv_get_int(body, "max_tokens", 1, INT32_MAX, &mt, err) ||
        !srv_get_bool(body, "stream", &j->stream, err) || !srv_parse_sampling(body, j, "stop_sequences", err))
        goto out;
    j->n_predict = (int)mt;
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
    if (!srv_chat_prompt(p, v, msgs, have_sys ? sys.p : NULL, false, j, err)) goto out;
    ok = true;
out:
    srv_buf_free(&sys);
    return ok;
}

void srv_anthropic_messages(srv_http *h, struct evhttp_request *req, json_t *body) {
    srv_job *j = srv_job_new();
    j->id = srv_http_next_id(h);
    j->req = req;
    snprintf(j->rid, sizeof(j->rid), "msg_ft%llu", (unsigned long long)j->id);
    ft_err err = {{0}};
    if (!srv_anthropic_parse(srv_http_params(h), srv_http_vocab(h), body, j, &err)) {
        srv_reply_error_anthropic(req, 400, "invalid_request_error", err.msg);
        srv_job_unref(j);
        return;
    }
    if (!srv_http_submit(h, j, true)) srv_job_unref(j);
}

static const char *stop_reason(const srv_job *j) {
    if (j->finish == SRV_FINISH_LENGTH) return "max_tokens";
    return j->stop_string ? "stop_sequence" : "end_turn";
}

static json_t *message(const srv_job *j, bool done, json_t *content) {
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:n,s:{s:i,s:i}}", "id", j->rid, "type", "message", "role",
                     "assistant", "model", j->model_name, "content", content, "stop_reason",
                     done ? json_string(stop_reason(j)) : json_null(), "stop_sequence", "usage",
                     "input_tokens", (json_int_t)j->prompt.n, "output_tokens",
                     (json_int_t)(done ? j->n_gen : 0));
}

void srv_anthropic_output(srv_job *j, const char *text, size_t n, bool done) {
    if (!j->stream) {
        srv_buf_add(&j->content, text, n);
        if (!done || !j->req) return;
        struct evhttp_request *req = srv_job_take_req(j);
        if (j->finish == SRV_FINISH_ERROR) {
            srv_reply_error_anthropic(req, 500, "api_error", j->errmsg);
            return;
        }
        json_t *content = json_pack("[{s:s,s:o}]", "type", "text", "text",
                                    srv_json_str(j->content.p ? j->content.p : "", j->content.n));
        srv_reply_json(req, 200, message(j, true, content));
        return;
    }
    if (!j->head_sent) {
        srv_sse_send(
            j, "message_start",
            json_pack("{s:s,s:o}", "type", "message_start", "message", message(j, false, json_array())));
        srv_sse_send(j, "content_block_start",
                     json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0,
                               "content_block", "type", "text", "text", ""));
    }
    if (n)
        srv_sse_send(j, "content_block_delta",
                     json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", 0, "delta",
                               "type", "text_delta", "text", srv_json_str(text, n)));
    if (!done) return;
    srv_sse_send(j, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
    srv_sse_send(j, "message_delta",
                 json_pack("{s:s,s:{s:s,s:n},s:{s:i}}", "type", "message_delta", "delta", "stop_reason",
                           stop_reason(j), "stop_sequence", "usage", "output_tokens", (json_int_t)j->n_gen));
    srv_sse_send(j, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    srv_sse_end(j);
}
