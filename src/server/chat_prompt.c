// chat_prompt.c: the prompt of a chat request, shared by the OpenAI chat route and the
// Anthropic Messages route: their messages (role and content parts, reasoning of earlier
// assistant turns) rendered through the server's chat template and tokenized into the job.
#include "srv_impl.h"
#include "tool_call.h"

#include <stdlib.h>
#include <string.h>

// The messages as the template gets them, and the texts they point to.
typedef struct conv {
    tok_chat_msg *m;
    size_t n, cap;
    srv_buf *bufs; // owned texts
    size_t n_bufs, cap_bufs;
} conv;

static srv_buf *conv_buf(conv *c) {
    if (c->n_bufs == c->cap_bufs) {
        c->cap_bufs = c->cap_bufs ? 2 * c->cap_bufs : 16;
        c->bufs = ft_realloc(c->bufs, c->cap_bufs * sizeof(srv_buf));
    }
    srv_buf *b = &c->bufs[c->n_bufs++];
    *b = (srv_buf){0};
    srv_buf_add(b, "", 0);
    return b;
}

static const char *conv_text(conv *c, const char *s, size_t n) {
    srv_buf *b = conv_buf(c);
    srv_buf_add(b, s, n);
    return b->p;
}

static tok_chat_msg *conv_msg(conv *c) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->m = ft_realloc(c->m, c->cap * sizeof(tok_chat_msg));
    }
    c->m[c->n] = (tok_chat_msg){0};
    return &c->m[c->n++];
}

static void conv_free(conv *c) {
    for (size_t i = 0; i < c->n_bufs; i++) srv_buf_free(&c->bufs[i]);
    free(c->bufs);
    free(c->m);
}

// A tool call as templates read it, appended to calls: {"type": "function", "function":
// {"name", "arguments"}, "id"} (llama.cpp's order), arguments an object where the template reads
// them so (tok_chat_object_arguments), else JSON text.
static bool add_call(json_t *calls, const char *id, const char *name, json_t *args, bool object_args, ft_err *err) {
    json_t *a;
    if (json_is_string(args)) {
        json_error_t je;
        json_t *parsed = json_loads(json_string_value(args), JSON_DECODE_ANY, &je);
        if (!json_is_object(parsed)) {
            json_decref(parsed);
            return ft_err_set(err, "tool call '%.60s': 'arguments' must be a JSON object's text", name);
        }
        if (object_args) a = parsed;
        else json_decref(parsed), a = json_incref(args);
    } else if (json_is_object(args)) {
        if (object_args) a = json_incref(args);
        else {
            char *t = json_dumps(args, JSON_COMPACT);
            a = json_string(t);
            free(t);
        }
    } else
        return ft_err_set(err, "tool call '%.60s': 'arguments' must be a JSON object (or its text)", name);
    json_t *c = json_pack("{s:s, s:{s:s, s:o}}", "type", "function", "function", "name", name, "arguments", a);
    if (id) json_object_set_new(c, "id", json_string(id));
    json_array_append_new(calls, c);
    return true;
}

// Message content: a string, null, or an array of parts: {"type":"text","text":...}; an
// assistant turn sent back by an Anthropic client may also hold {"type":"thinking",
// "thinking":...} parts (its reasoning, rendered where the template puts reasoning),
// "redacted_thinking" parts (opaque to us: skipped) and "tool_use" parts (its calls, into
// calls); a user turn "tool_result" parts (each a tool message, into results, before the text).
static bool content_text(conv *cv, json_t *c, srv_buf *out, srv_buf *reasoning, json_t *calls, bool object_args,
                         size_t *n_results, ft_err *err) {
    srv_buf_add(out, "", 0);
    if (!c || json_is_null(c)) return true;
    if (json_is_string(c)) {
        srv_buf_add(out, json_string_value(c), json_string_length(c));
        return true;
    }
    if (!json_is_array(c)) return ft_err_set(err, "message 'content' must be a string or an array of parts");
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type");
        const char *t = json_is_string(type) ? json_string_value(type) : "";
        json_t *text = json_object_get(part, "text"), *thought = json_object_get(part, "thinking");
        if (!strcmp(t, "text") && json_is_string(text)) {
            srv_buf_add(out, json_string_value(text), json_string_length(text));
        } else if (!strcmp(t, "thinking") && json_is_string(thought)) {
            srv_buf_add(reasoning, json_string_value(thought), json_string_length(thought));
        } else if (!strcmp(t, "tool_use") && calls) {
            json_t *id = json_object_get(part, "id"), *name = json_object_get(part, "name");
            if (!json_is_string(id) || !json_is_string(name))
                return ft_err_set(err, "content part %zu: a tool_use needs a string 'id' and 'name'", i);
            if (!add_call(calls, json_string_value(id), json_string_value(name), json_object_get(part, "input"),
                          object_args, err))
                return ft_err_prefix(err, "content part %zu", i), false;
        } else if (!strcmp(t, "tool_result") && n_results) {
            json_t *id = json_object_get(part, "tool_use_id"), *rc = json_object_get(part, "content");
            bool is_error = false;
            if (!json_is_string(id)) return ft_err_set(err, "content part %zu: a tool_result needs a 'tool_use_id'", i);
            if (!srv_get_bool(part, "is_error", &is_error, err)) return ft_err_prefix(err, "content part %zu", i), false;
            srv_buf *body = conv_buf(cv);
            // a failed tool's result says so in its text: the template has no other place for it
            if (is_error) srv_buf_add(body, "Error: ", 7);
            if (json_is_array(rc)) {
                size_t k;
                json_t *x;
                json_array_foreach(rc, k, x) {
                    json_t *xt = json_object_get(x, "type"), *xs = json_object_get(x, "text");
                    if (!json_is_string(xt) || strcmp(json_string_value(xt), "text") || !json_is_string(xs))
                        return ft_err_set(err, "content part %zu: tool_result content holds a part other than text", i);
                    srv_buf_add(body, json_string_value(xs), json_string_length(xs));
                }
            } else if (json_is_string(rc))
                srv_buf_add(body, json_string_value(rc), json_string_length(rc));
            else if (rc && !json_is_null(rc))
                return ft_err_set(err, "content part %zu: tool_result content must be a string or text parts", i);
            tok_chat_msg *m = conv_msg(cv);
            m->role = "tool";
            m->content = body->p;
            m->tool_call_id = conv_text(cv, json_string_value(id), json_string_length(id));
            (*n_results)++;
        } else if (!*t) {
            return ft_err_set(err, "content part %zu: no \"type\"", i);
        } else if (strcmp(t, "redacted_thinking")) {
            // named, so a client sending images learns what ft lacks
            return ft_err_set(err, "content part %zu: '%.40s' parts are not supported %s", i, t,
                              !strcmp(t, "tool_use") ? "in this message (an assistant's)"
                              : !strcmp(t, "tool_result") ? "in this message (a user's)"
                                                         : "yet (text, thinking, tool_use and tool_result are)");
        }
    }
    return true;
}

static bool blank(const char *s) {
    for (; s && *s; s++)
        if (*s != ' ' && *s != '\n' && *s != '\r' && *s != '\t') return false;
    return true;
}

// Drops what the template put after the last message text (its end-of-turn markup).
static void cut_after_last_text(tok_chat_prompt *r) {
    size_t n = r->n_segs;
    while (n && r->segs[n - 1].parse_special) n--;
    if (!n) return;
    r->n_segs = n;
    r->len = (size_t)(r->segs[n - 1].text + r->segs[n - 1].len - r->text);
    r->text[r->len] = 0;
}

// Whether the last open_tag ("<think>") in text comes after the last close_tag ("</think>").
static bool inside_think(const char *text, const char *open_tag, const char *close_tag) {
    const char *open = NULL, *close = NULL;
    for (const char *q = strstr(text, open_tag); q; q = strstr(q + 1, open_tag)) open = q;
    for (const char *q = strstr(text, close_tag); q; q = strstr(q + 1, close_tag)) close = q;
    return open && (!close || open > close);
}

// Whether text ends with tag ("<think>", "</think>", ...) and white space only after it.
static bool ends_in(const char *text, size_t n, const char *tag) {
    size_t k = strlen(tag);
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ' || text[n - 1] == '\r' || text[n - 1] == '\t')) n--;
    return n >= k && !memcmp(text + n - k, tag, k);
}

// Renders messages with the server's template and tokenizes them into j->prompt.
bool srv_chat_prompt(const srv_params *p, const tok_vocab *v, json_t *msgs, const char *system,
                     bool enable_thinking, const char *reasoning_effort, json_t *kwargs, const char *tools,
                     srv_job *j, ft_err *err) {
    if (!p->chat)
        return ft_err_set(
            err, "the model has no chat template ft can render; start the server with --chat-template NAME|FILE");
    bool harmony = tok_chat_harmony(p->chat);
    if (reasoning_effort && !tok_chat_takes_effort(p->chat)) {
        if (!p->lenient)
            return ft_err_set(err, "'reasoning_effort': the chat template in use (%s) has no reasoning effort "
                                   "(ft serve --lenient ignores it)", tok_chat_describe(p->chat));
        FT_LOG_INFO("ignoring the request's 'reasoning_effort' (--lenient)");
        reasoning_effort = NULL;
    }
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return ft_err_set(err, "'messages' must be a non-empty array");
    if (json_array_size(msgs) > 100000) return ft_err_set(err, "too many messages");
    conv cv = {0};
    bool ok = false;
    bool object_args = tok_chat_object_arguments(p->chat);
    if (system) {
        tok_chat_msg *sm = conv_msg(&cv);
        sm->role = "system";
        sm->content = system;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            ft_err_set(err, "messages[%zu] must be an object with a string 'role'", i);
            goto out;
        }
        const char *r = json_string_value(role);
        if (!strcmp(r, "developer")) r = "system";
        bool is_tool = !strcmp(r, "tool");
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && !is_tool) {
            ft_err_set(err, "messages[%zu]: role '%.40s' is not supported (system, user, assistant, tool)", i, r);
            goto out;
        }
        bool assistant = !strcmp(r, "assistant");
        json_t *calls = assistant ? json_array() : NULL, *tc = json_object_get(m, "tool_calls");
        srv_buf *text = conv_buf(&cv), *reasoning = conv_buf(&cv);
        size_t n_results = 0;
        bool got = content_text(&cv, json_object_get(m, "content"), text, reasoning, calls, object_args,
                                !strcmp(r, "user") ? &n_results : NULL, err);
        // OpenAI's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}]
        if (got && tc && !json_is_null(tc)) {
            if (!assistant || !json_is_array(tc)) {
                ft_err_set(err, "'tool_calls' must be an array, on an assistant message");
                got = false;
            }
            size_t k;
            json_t *c;
            json_array_foreach(tc, k, c) {
                if (!got) break;
                json_t *fn = json_object_get(c, "function"), *id = json_object_get(c, "id"),
                       *name = json_object_get(fn, "name");
                if (!json_is_object(fn) || !json_is_string(name) || (id && !json_is_null(id) && !json_is_string(id))) {
                    ft_err_set(err, "tool_calls[%zu] must be {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                                    "\"arguments\"}}",
                               k);
                    got = false;
                } else if (!add_call(calls, json_string_value(id), json_string_value(name),
                                     json_object_get(fn, "arguments"), object_args, err)) {
                    ft_err_prefix(err, "tool_calls[%zu]", k);
                    got = false;
                }
            }
        }
        if (!got) {
            json_decref(calls);
            ft_err_prefix(err, "messages[%zu]", i);
            goto out;
        }
        // tool results of a user turn (Anthropic's) come first, its text after (if any)
        if (n_results && blank(text->p) && !reasoning->n) {
            json_decref(calls);
            continue;
        }
        tok_chat_msg *cm = conv_msg(&cv);
        cm->role = r;
        cm->content = text->p;
        json_t *rc = json_object_get(m, "reasoning_content");
        if (json_is_string(rc)) srv_buf_add(reasoning, json_string_value(rc), json_string_length(rc));
        if (json_is_string(rc) || reasoning->n) cm->reasoning = reasoning->p;
        if (calls && json_array_size(calls)) {
            char *ct = json_dumps(calls, JSON_COMPACT);
            cm->tool_calls = conv_text(&cv, ct, strlen(ct));
            free(ct);
        }
        json_decref(calls);
        if (is_tool) {
            json_t *id = json_object_get(m, "tool_call_id"), *name = json_object_get(m, "name");
            if (!json_is_string(id) || (name && !json_is_null(name) && !json_is_string(name))) {
                ft_err_set(err, "messages[%zu]: a tool message needs a string 'tool_call_id' (and 'name', if any, a "
                                "string)",
                           i);
                goto out;
            }
            cm->tool_call_id = conv_text(&cv, json_string_value(id), json_string_length(id));
            if (json_is_string(name)) cm->name = conv_text(&cv, json_string_value(name), json_string_length(name));
        }
    }
    if (!cv.n) {
        ft_err_set(err, "'messages' holds no message to render");
        goto out;
    }
    tok_chat_msg *cm = cv.m;
    size_t k = cv.n;
    tok_chat_params cp = tok_chat_default_params(v);
    cp.enable_thinking = enable_thinking;
    cp.reasoning_effort = reasoning_effort;
    // a conversation that ends with the assistant's words (a prefill) is continued from them:
    // rendered without a generation prompt and cut where that text ends
    bool prefill = !strcmp(cm[k - 1].role, "assistant") && !blank(cm[k - 1].content) && !cm[k - 1].tool_calls;
    cp.add_generation_prompt = !prefill;
    tok_chat_prompt rendered = {0};
    tok_chat_extra extra = {0};
    char *kw_text = kwargs ? json_dumps(kwargs, JSON_COMPACT) : NULL;
    extra.kwargs = kw_text;
    extra.tools = tools;
    bool rendered_ok = tok_chat_apply(p->chat, cm, k, cp, &extra, &rendered, err);
    free(kw_text);
    if (!rendered_ok) goto out;
    if (prefill) cut_after_last_text(&rendered);
    // a generation prompt that opens <think> (Qwen3.5) leaves the reply inside the reasoning; one
    // that closes an empty think (thinking off) leaves it at the answer, the white space before it
    // dropped (GLM's replies then open with a newline); a prefill continues its own text (reasoning
    // where it left a <think> open), white space and all. Gemma 4's reasoning is its thought
    // channel, "<|channel>thought" ... "<channel|>".
    const char *open = "<think>", *close = "</think>";
    if (tok_chat_thought_channel(p->chat)) {
        open = j->think.open = "<|channel>thought";
        close = j->think.close = "<channel|>";
    }
    if (j->split_think && harmony) {
        // the reply opens a message's header after "<|start|>assistant", or a prefill goes on
        // with the final channel's text it was cut in
        j->think.harmony = true;
        tok_harmony_init(&j->think.h, prefill);
    } else if (j->split_think && prefill) {
        j->think.state = inside_think(rendered.text, open, close) ? 1 : 2;
    } else if (j->split_think && ends_in(rendered.text, rendered.len, open)) {
        j->think.state = 1;
    } else if (j->split_think && ends_in(rendered.text, rendered.len, close)) {
        j->think.state = 3;
    }
    bool has_bos = cp.bos_text && *cp.bos_text && !strncmp(rendered.text, cp.bos_text, strlen(cp.bos_text));
    tok_encode_segments(v, rendered.segs, rendered.n_segs, !has_bos, &j->prompt);
    tok_chat_prompt_free(&rendered);
    ok = true;
out:
    conv_free(&cv);
    return ok;
}
