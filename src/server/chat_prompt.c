// chat_prompt.c: the prompt of a chat request, shared by the OpenAI chat route and the
// Anthropic Messages route: their messages (role and content parts, reasoning of earlier
// assistant turns) rendered through the server's chat template and tokenized into the job.
#include "srv_impl.h"

#include <stdlib.h>
#include <string.h>

// Message content: a string, null, or an array of {"type":"text","text":...} parts. An
// assistant turn sent back by an Anthropic client may also hold {"type":"thinking",
// "thinking":...} parts (its reasoning, rendered where the template puts reasoning) and
// "redacted_thinking" parts (opaque to us: skipped).
static bool content_text(json_t *c, srv_buf *out, srv_buf *reasoning, ft_err *err) {
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
        } else if (!*t) {
            return ft_err_set(err, "content part %zu: no \"type\"", i);
        } else if (strcmp(t, "redacted_thinking")) {
            // named, so a client sending tool results or images learns what ft lacks
            return ft_err_set(err, "content part %zu: '%.40s' parts are not supported yet (text and thinking are)", i,
                              t);
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
                     bool enable_thinking, const char *reasoning_effort, json_t *kwargs, srv_job *j,
                     ft_err *err) {
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
    size_t n = json_array_size(msgs) + (system ? 1 : 0);
    if (n > 100000) return ft_err_set(err, "too many messages");
    tok_chat_msg *cm = ft_calloc(n, sizeof(*cm));
    srv_buf *texts = ft_calloc(2 * n, sizeof(srv_buf));
    bool ok = false;
    size_t k = 0;
    if (system) cm[k++] = (tok_chat_msg){.role = "system", .content = system};
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
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
            ft_err_set(err, "messages[%zu]: role '%.40s' is not supported (system, user, assistant)", i, r);
            goto out;
        }
        if (!content_text(json_object_get(m, "content"), &texts[2 * k], &texts[2 * k + 1], err)) {
            ft_err_prefix(err, "messages[%zu]", i);
            goto out;
        }
        cm[k].role = r;
        cm[k].content = texts[2 * k].p;
        json_t *rc = json_object_get(m, "reasoning_content");
        if (json_is_string(rc)) srv_buf_add(&texts[2 * k + 1], json_string_value(rc), json_string_length(rc));
        if (json_is_string(rc) || texts[2 * k + 1].n) cm[k].reasoning = texts[2 * k + 1].p;
        k++;
    }
    tok_chat_params cp = tok_chat_default_params(v);
    cp.enable_thinking = enable_thinking;
    cp.reasoning_effort = reasoning_effort;
    // a conversation that ends with the assistant's words (a prefill) is continued from them:
    // rendered without a generation prompt and cut where that text ends
    bool prefill = !strcmp(cm[k - 1].role, "assistant") && !blank(cm[k - 1].content);
    cp.add_generation_prompt = !prefill;
    tok_chat_prompt rendered = {0};
    tok_chat_extra extra = {0};
    char *kw_text = kwargs ? json_dumps(kwargs, JSON_COMPACT) : NULL;
    extra.kwargs = kw_text;
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
    for (size_t q = 0; q < 2 * n; q++)
        srv_buf_free(&texts[q]);
    free(texts);
    free(cm);
    return ok;
}
