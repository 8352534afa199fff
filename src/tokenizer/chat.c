// chat.c: chat templates of the families ft serves, rendered in C exactly as their Jinja source.
//
// Each renderer below follows one Jinja template line by line (for conversations without
// tools): the same default system prompts, the same trimming, the same errors. The known
// template sources are recognised by a 64-bit FNV-1a hash of their text with the white space at
// both ends removed; tests/test_chat_template.c renders the real sources with a Jinja engine and
// compares.
//
// Jinja's string helpers used by the templates, as llama.cpp's Jinja engine defines them: trim /
// strip() remove ASCII white space (C isspace) from both ends; strip('\n') / lstrip('\n') /
// rstrip('\n') remove newlines only.
#include "tok_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---------------------------------------------------------------------------------------------
// Names and recognition

static const char *const g_names[TOK_CHAT_COUNT] = {
    [TOK_CHAT_CHATML] = "chatml",   [TOK_CHAT_QWEN2] = "qwen2",   [TOK_CHAT_QWEN25] = "qwen2.5",
    [TOK_CHAT_QWEN3] = "qwen3",     [TOK_CHAT_LLAMA2] = "llama2", [TOK_CHAT_MISTRAL] = "mistral",
    [TOK_CHAT_LLAMA3] = "llama3",   [TOK_CHAT_LLAMA31] = "llama3.1", [TOK_CHAT_QWEN35] = "qwen3.5",
    [TOK_CHAT_GLM45] = "glm4.5",
    [TOK_CHAT_GPT_OSS] = "gpt-oss", [TOK_CHAT_GEMMA4] = "gemma4", [TOK_CHAT_GEMMA4_INTERLEAVED] = "gemma4-interleaved",
    [TOK_CHAT_GEMMA4_V1] = "gemma4-v1",
};

static const struct {
    uint64_t hash;
    enum tok_chat_template t;
    const char *source; // where the template comes from
} g_known[] = {
    {0xc867da37c989d41full, TOK_CHAT_QWEN2, "Qwen2 / Qwen1.5 chat"},
    {0xe642ce246d7f2e3dull, TOK_CHAT_QWEN25, "Qwen2.5 Instruct"},
    {0x2bfdb7aa9754484eull, TOK_CHAT_QWEN3, "Qwen3"},
    {0xf344eecf1bd3a427ull, TOK_CHAT_LLAMA2, "Llama 2 chat"},
    {0x8c734b90b4f8d84dull, TOK_CHAT_MISTRAL, "Mistral 7B Instruct v0.1/v0.2, Mixtral 8x7B Instruct"},
    {0x0e60067a5537498eull, TOK_CHAT_LLAMA3, "Llama 3 Instruct"},
    {0xcc0368e1ffb6b958ull, TOK_CHAT_LLAMA31, "Llama 3.1 / 3.3 Instruct"},
    {0xf07c510f47fbaca0ull, TOK_CHAT_QWEN35, "Qwen3.5 (llama.cpp models/templates/Qwen3.5-4B.jinja)"},
    // GLM-4.5 / GLM-4.6: three texts that render alike without tools
    {0x9462888dcdf2e29cull, TOK_CHAT_GLM45, "GLM-4.6 (llama.cpp models/templates/GLM-4.6.jinja: tool-call "
                                            "arguments checked)"},
    {0x5f4dd018f4521bc9ull, TOK_CHAT_GLM45, "GLM-4.5 / GLM-4.6 as published (tool-call arguments unchecked)"},
    {0x42acd273715300d2ull, TOK_CHAT_GLM45, "GLM-4.5 / GLM-4.6 as llama.cpp's converter wrote them into GGUFs in "
                                            "2025 (the user turn's text set once)"},
    {0x5da66262d54a9064ull, TOK_CHAT_GPT_OSS, "gpt-oss (llama.cpp models/templates/openai-gpt-oss-120b.jinja)"},
    {0xecf8ed96903a3852ull, TOK_CHAT_GEMMA4, "Gemma 4 (llama.cpp models/templates/google-gemma-4-31B-it.jinja)"},
    {0x1e244f9a64c9873full, TOK_CHAT_GEMMA4_INTERLEAVED,
     "Gemma 4 (llama.cpp models/templates/google-gemma-4-31B-it-interleaved.jinja)"},
    {0x8db03aa6cb1ffc2full, TOK_CHAT_GEMMA4_V1, "Gemma 4 as released (llama.cpp models/ggml-vocab-gemma-4.gguf)"},
};

const char *tok_chat_name(enum tok_chat_template t) {
    FT_ASSERT(t >= 0 && t < TOK_CHAT_COUNT);
    return g_names[t];
}

static void list_names(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int t = 0; t < TOK_CHAT_COUNT && n < cap; t++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", t ? ", " : "", g_names[t]);
}

bool tok_chat_from_name(const char *name, enum tok_chat_template *out, ft_err *err) {
    for (int t = 0; t < TOK_CHAT_COUNT; t++) {
        if (!strcmp(name, g_names[t])) {
            *out = (enum tok_chat_template)t;
            return true;
        }
    }
    char names[256];
    list_names(names, sizeof(names));
    return ft_err_set(err, "unknown chat template '%s' (ft knows: %s)", name, names);
}

static bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

bool tok_chat_detect(const char *jinja, size_t len, enum tok_chat_template *out, ft_err *err) {
    while (len && ascii_space(jinja[0])) jinja++, len--;
    while (len && ascii_space(jinja[len - 1])) len--;
    uint64_t h = tok_hash(jinja, len, TOK_HASH_SEED);
    for (size_t i = 0; i < FT_ARRAY_LEN(g_known); i++) {
        if (g_known[i].hash == h) {
            *out = g_known[i].t;
            return true;
        }
    }
    char names[256];
    list_names(names, sizeof(names));
    return ft_err_set(err,
                      "unknown chat template (tokenizer.chat_template, %zu bytes, begins '%.40s'): "
                      "ft renders only templates it knows exactly; use --chat-template NAME (%s)",
                      len, jinja, names);
}

tok_chat_params tok_chat_default_params(const tok_vocab *v) {
    tok_chat_params p = {true, true, "", "", NULL};
    if (v) p.bos_text = v->bos_text, p.eos_text = v->eos_text;
    return p;
}

// ---------------------------------------------------------------------------------------------
// Output: text and segments, built with offsets and pointed at the text at the end

typedef struct {
    size_t off, len;
    bool markup;
} seg_off;

typedef struct {
    char *text;
    size_t len, cap;
    seg_off *segs;
    size_t n_segs, cap_segs;
    const tok_chat_params *p;
} builder;

static void put(builder *b, const char *s, size_t len, bool markup) {
    if (!len) return;
    tok_grow((void **)&b->text, &b->cap, b->len + len + 1, 1);
    memcpy(b->text + b->len, s, len);
    if (b->n_segs && b->segs[b->n_segs - 1].markup == markup) {
        b->segs[b->n_segs - 1].len += len;
    } else {
        tok_grow((void **)&b->segs, &b->cap_segs, b->n_segs + 1, sizeof(seg_off));
        b->segs[b->n_segs++] = (seg_off){b->len, len, markup};
    }
    b->len += len;
    b->text[b->len] = 0;
}

static void markup(builder *b, const char *s) { put(b, s, strlen(s), true); }

// A string with a length: message text, a part of it, or a template literal.
typedef struct {
    const char *s;
    size_t n;
} str;

static str S(const char *s) { return (str){s ? s : "", s ? strlen(s) : 0}; }
static void content(builder *b, str s) { put(b, s.s, s.n, false); }

static str strip_ws(str s) { // trim / strip(): C isspace bytes, as llama.cpp's Jinja engine
    while (s.n && ascii_space(s.s[0])) s.s++, s.n--;
    while (s.n && ascii_space(s.s[s.n - 1])) s.n--;
    return s;
}

static str lstrip_nl(str s) {
    while (s.n && s.s[0] == '\n') s.s++, s.n--;
    return s;
}

static str rstrip_nl(str s) {
    while (s.n && s.s[s.n - 1] == '\n') s.n--;
    return s;
}

static bool role_is(const tok_chat_msg *m, const char *role) { return m->role && !strcmp(m->role, role); }

static bool starts_with(str s, const char *p) {
    size_t n = strlen(p);
    return s.n >= n && !memcmp(s.s, p, n);
}

static bool ends_with(str s, const char *p) {
    size_t n = strlen(p);
    return s.n >= n && !memcmp(s.s + s.n - n, p, n);
}

static const char *find(str s, const char *p, bool last) {
    size_t n = strlen(p);
    const char *hit = NULL;
    for (const char *q = s.s; q + n <= s.s + s.n; q++) {
        if (!memcmp(q, p, n)) {
            hit = q;
            if (!last) break;
        }
    }
    return hit;
}

static bool no_tools(const tok_chat_msg *msgs, size_t n, ft_err *err) {
    for (size_t i = 0; i < n; i++)
        if (role_is(&msgs[i], "tool") || role_is(&msgs[i], "ipython") || msgs[i].tool_calls)
            return ft_err_set(err, "chat template: the built-in templates render no tool calls or tool results");
    return true;
}

// ---------------------------------------------------------------------------------------------
// ChatML family

// Generic ChatML, Qwen2 (default system prompt before a first non-system message) and Qwen2.5
// (its own default system prompt, always a system block first).
static bool render_chatml(builder *b, enum tok_chat_template t, const tok_chat_msg *m, size_t n,
                          ft_err *err) {
    if (!no_tools(m, n, err)) return false;
    size_t first = 0;
    if (t == TOK_CHAT_QWEN25) {
        markup(b, "<|im_start|>system\n");
        if (n && role_is(&m[0], "system")) {
            content(b, S(m[0].content));
            first = 1;
        } else {
            markup(b, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
        }
        markup(b, "<|im_end|>\n");
    } else if (t == TOK_CHAT_QWEN2 && n && !role_is(&m[0], "system")) {
        markup(b, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n");
    }
    for (size_t i = first; i < n; i++) {
        if (t == TOK_CHAT_QWEN25 && !role_is(&m[i], "user") && !role_is(&m[i], "assistant") &&
            !role_is(&m[i], "system"))
            continue; // Qwen2.5 renders no other roles
        markup(b, "<|im_start|>");
        content(b, S(m[i].role));
        markup(b, "\n");
        content(b, S(m[i].content));
        markup(b, "<|im_end|>\n");
    }
    if (b->p->add_generation_prompt) markup(b, "<|im_start|>assistant\n");
    return true;
}

// The reasoning and the answer of an assistant turn whose text holds "</think>": the text
// before the first "</think>", after the last "<think>" in it, and the text after the last
// "</think>" (Jinja's split(...)[0] and [-1]), with newlines stripped where the templates do.
static void split_think(str body, str *reasoning, str *answer) {
    const char *first_end = find(body, "</think>", false), *last_end = find(body, "</think>", true);
    str before = rstrip_nl((str){body.s, (size_t)(first_end - body.s)});
    const char *open = find(before, "<think>", true);
    if (open) before = (str){open + 7, (size_t)(before.s + before.n - open - 7)};
    *reasoning = lstrip_nl(before);
    *answer = lstrip_nl((str){last_end + 8, (size_t)(body.s + body.n - last_end - 8)});
}

// Qwen3: reasoning of assistant turns after the last user query is kept in <think> blocks,
// earlier reasoning is dropped; enable_thinking = false closes an empty <think> in the prompt.
static bool render_qwen3(builder *b, const tok_chat_msg *m, size_t n, ft_err *err) {
    if (!no_tools(m, n, err)) return false;
    if (n && role_is(&m[0], "system")) {
        markup(b, "<|im_start|>system\n");
        content(b, S(m[0].content));
        markup(b, "<|im_end|>\n");
    }
    // the last user message that is not a wrapped tool response
    size_t last_query = n ? n - 1 : 0;
    for (size_t k = n; k-- > 0;) {
        str c = S(m[k].content);
        if (role_is(&m[k], "user") &&
            !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (role_is(&m[i], "user") || (role_is(&m[i], "system") && i > 0)) {
            markup(b, "<|im_start|>");
            content(b, S(m[i].role));
            markup(b, "\n");
            content(b, S(m[i].content));
            markup(b, "<|im_end|>\n");
        } else if (role_is(&m[i], "assistant")) {
            str body = S(m[i].content), reasoning = {"", 0};
            if (m[i].reasoning) {
                reasoning = S(m[i].reasoning);
            } else if (find(body, "</think>", false)) {
                split_think(body, &reasoning, &body);
            }
            markup(b, "<|im_start|>assistant\n");
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                markup(b, "<think>\n");
                content(b, rstrip_nl(lstrip_nl(reasoning)));
                markup(b, "\n</think>\n\n");
                content(b, lstrip_nl(body));
            } else {
                content(b, body);
            }
            markup(b, "<|im_end|>\n");
        }
        // other roles render nothing
    }
    if (b->p->add_generation_prompt) {
        markup(b, "<|im_start|>assistant\n");
        if (!b->p->enable_thinking) markup(b, "<think>\n\n</think>\n\n");
    }
    return true;
}

// Qwen3.5 / Qwen3.6: every message's text trimmed; each assistant turn after the last user
// query carries its (trimmed, possibly empty) reasoning in a <think> block, earlier ones do
// not; the generation prompt opens <think> (closes an empty one when thinking is off).
static bool render_qwen35(builder *b, const tok_chat_msg *m, size_t n, ft_err *err) {
    if (!no_tools(m, n, err)) return false;
    if (!n) return ft_err_set(err, "chat template: no messages provided");
    if (role_is(&m[0], "system")) {
        markup(b, "<|im_start|>system\n");
        content(b, strip_ws(S(m[0].content)));
        markup(b, "<|im_end|>\n");
    }
    // the last user message that is not a wrapped tool response
    size_t last_query = n;
    for (size_t k = n; k-- > 0;) {
        str c = strip_ws(S(m[k].content));
        if (role_is(&m[k], "user") && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    if (last_query == n) return ft_err_set(err, "chat template: no user query found in messages");
    for (size_t i = 0; i < n; i++) {
        str body = strip_ws(S(m[i].content));
        if (role_is(&m[i], "system")) {
            if (i) return ft_err_set(err, "chat template: the system message must be at the beginning");
        } else if (role_is(&m[i], "user")) {
            markup(b, "<|im_start|>user\n");
            content(b, body);
            markup(b, "<|im_end|>\n");
        } else if (role_is(&m[i], "assistant")) {
            str reasoning = {"", 0};
            if (m[i].reasoning) reasoning = S(m[i].reasoning);
            else if (find(body, "</think>", false)) split_think(body, &reasoning, &body);
            markup(b, "<|im_start|>assistant\n");
            if (i > last_query) {
                markup(b, "<think>\n");
                content(b, strip_ws(reasoning));
                markup(b, "\n</think>\n\n");
            }
            content(b, body);
            markup(b, "<|im_end|>\n");
        } else {
            return ft_err_set(err, "chat template: unexpected message role '%s'", m[i].role);
        }
    }
    if (b->p->add_generation_prompt) {
        markup(b, "<|im_start|>assistant\n");
        markup(b, b->p->enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n");
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// GLM

// GLM-4.5 / GLM-4.6: "[gMASK]<sop>", then each turn's tag and text with no end-of-turn marker:
// "<|system|>\n" or "<|user|>\n" and the text as it is, a user turn followed by "/nothink" when
// thinking is off (unless it ends so already); "<|assistant|>", "\n<think>" with the trimmed
// reasoning and "</think>" for a turn after the last user message that has reasoning (an empty
// "\n<think></think>" for any other), then "\n" and the trimmed answer if one is left. Other
// roles render nothing. The generation prompt is "<|assistant|>", and closes an empty think when
// thinking is off.
static bool render_glm45(builder *b, const tok_chat_msg *m, size_t n, ft_err *err) {
    if (!no_tools(m, n, err)) return false;
    markup(b, "[gMASK]<sop>");
    bool any_user = false;
    size_t last_user = 0;
    for (size_t k = 0; k < n; k++)
        if (role_is(&m[k], "user")) any_user = true, last_user = k;
    for (size_t i = 0; i < n; i++) {
        str text = S(m[i].content);
        if (role_is(&m[i], "user")) {
            markup(b, "<|user|>\n");
            content(b, text);
            if (!b->p->enable_thinking && !ends_with(text, "/nothink")) markup(b, "/nothink");
        } else if (role_is(&m[i], "assistant")) {
            str reasoning = {"", 0};
            if (m[i].reasoning) reasoning = S(m[i].reasoning);
            else if (find(text, "</think>", false)) split_think(text, &reasoning, &text);
            markup(b, "<|assistant|>");
            if ((!any_user || i > last_user) && reasoning.n) {
                markup(b, "\n<think>");
                content(b, strip_ws(reasoning));
                markup(b, "</think>");
            } else {
                markup(b, "\n<think></think>");
            }
            str answer = strip_ws(text);
            if (answer.n) {
                markup(b, "\n");
                content(b, answer);
            }
        } else if (role_is(&m[i], "system")) {
            markup(b, "<|system|>\n");
            content(b, text);
        }
    }
    if (b->p->add_generation_prompt) {
        markup(b, "<|assistant|>");
        if (!b->p->enable_thinking) markup(b, "\n<think></think>");
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// [INST] family

static bool alternate(const tok_chat_msg *m, size_t n, ft_err *err) {
    for (size_t i = 0; i < n; i++)
        if (role_is(&m[i], "user") != (i % 2 == 0))
            return ft_err_set(err, "chat template: conversation roles must alternate "
                                   "user/assistant/user/assistant/...");
    return true;
}

// Removes ASCII white space from the end of the text (the last segment is markup).
static void trim_markup_end(builder *b) {
    while (b->len && ascii_space(b->text[b->len - 1])) {
        b->len--;
        b->segs[b->n_segs - 1].len--;
    }
    b->text[b->len] = 0;
}

// Llama 2: an optional system message goes into the first user turn; every user turn opens with
// BOS, every assistant turn ends with EOS.
static bool render_llama2(builder *b, const tok_chat_msg *m, size_t n, ft_err *err) {
    const tok_chat_msg *sys = n && role_is(&m[0], "system") ? &m[0] : NULL;
    if (sys) m++, n--;
    if (!alternate(m, n, err)) return false;
    for (size_t i = 0; i < n; i++) {
        if (role_is(&m[i], "user")) {
            markup(b, b->p->bos_text);
            markup(b, "[INST] ");
            if (i == 0 && sys) {
                markup(b, "<<SYS>>\n");
                content(b, S(sys->content));
                markup(b, "\n<</SYS>>\n\n");
                // strip() applies to the whole "<<SYS>>...": only its end can lose white space,
                // and if the message is nothing but white space the strip reaches the markup
                str c = S(m[i].content);
                while (c.n && ascii_space(c.s[c.n - 1])) c.n--;
                if (c.n) content(b, c);
                else trim_markup_end(b);
            } else {
                content(b, strip_ws(S(m[i].content)));
            }
            markup(b, " [/INST]");
        } else if (role_is(&m[i], "assistant")) { // other roles (odd places) render nothing
            markup(b, " ");
            content(b, strip_ws(S(m[i].content)));
            markup(b, " ");
            markup(b, b->p->eos_text);
        }
    }
    return true;
}

// Mistral 7B Instruct v0.1/v0.2, Mixtral 8x7B Instruct: user and assistant only.
static bool render_mistral(builder *b, const tok_chat_msg *m, size_t n, ft_err *err) {
    markup(b, b->p->bos_text);
    for (size_t i = 0; i < n; i++) {
        if (role_is(&m[i], "user") != (i % 2 == 0))
            return ft_err_set(err, "chat template: conversation roles must alternate "
                                   "user/assistant/user/assistant/...");
        if (role_is(&m[i], "user")) {
            markup(b, "[INST] ");
            content(b, S(m[i].content));
            markup(b, " [/INST]");
        } else if (role_is(&m[i], "assistant")) {
            content(b, S(m[i].content));
            markup(b, b->p->eos_text);
        } else {
            return ft_err_set(err, "chat template: only user and assistant roles are supported");
        }
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Llama 3

static void llama3_turn(builder *b, const char *role, str text) {
    markup(b, "<|start_header_id|>");
    content(b, S(role));
    markup(b, "<|end_header_id|>\n\n");
    content(b, strip_ws(text));
    markup(b, "<|eot_id|>");
}

static bool render_llama3(builder *b, enum tok_chat_template t, const tok_chat_msg *m, size_t n,
                          ft_err *err) {
    if (!no_tools(m, n, err)) return false;
    if (t == TOK_CHAT_LLAMA31) {
        markup(b, b->p->bos_text);
        str sys = {"", 0};
        if (n && role_is(&m[0], "system")) {
            sys = strip_ws(S(m[0].content));
            m++, n--;
        }
        markup(b, "<|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        content(b, sys);
        markup(b, "<|eot_id|>");
    } else if (n) {
        markup(b, b->p->bos_text);
    }
    for (size_t i = 0; i < n; i++) llama3_turn(b, m[i].role ? m[i].role : "", S(m[i].content));
    if (b->p->add_generation_prompt) markup(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return true;
}

// ---------------------------------------------------------------------------------------------
// gpt-oss (harmony)

static bool contains(str s, const char *p) { return find(s, p, false) != NULL; }

// Its raise_exception for an assistant text that already holds channel markup.
static bool gpt_oss_channel_tags(const tok_chat_msg *m, ft_err *err) {
    static const char *const tags[] = {"<|channel|>analysis<|message|>", "<|channel|>final<|message|>"};
    for (int k = 0; k < 2; k++) {
        if (contains(S(m->content), tags[k]))
            return ft_err_set(err, "chat template: an assistant message's content holds <|channel|> tags (pass "
                                   "the analysis in its reasoning and the final text in its content)");
        if (m->reasoning && contains(S(m->reasoning), tags[k]))
            return ft_err_set(err, "chat template: an assistant message's reasoning holds <|channel|> tags");
    }
    return true;
}

// The system message (model identity, knowledge cutoff, today's local date, reasoning effort,
// channels); a first system or developer message as the developer message's instructions; user
// turns; assistant turns in the final channel, the reasoning (analysis channel) kept only for a
// last assistant turn without a generation prompt, which then ends in <|return|>; other roles
// render nothing. Tool calls and tool messages (the commentary channel) are not rendered yet.
static bool render_gpt_oss(builder *b, const tok_chat_msg *m, size_t n, ft_err *err) {
    if (!no_tools(m, n, err)) return false;
    char date[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(date, sizeof(date), "%Y-%m-%d", &tm);
    markup(b, "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
              "Knowledge cutoff: 2024-06\nCurrent date: ");
    markup(b, date);
    markup(b, "\n\nReasoning: ");
    content(b, S(b->p->reasoning_effort ? b->p->reasoning_effort : "medium"));
    markup(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>");
    size_t first = 0;
    if (n && (role_is(&m[0], "developer") || role_is(&m[0], "system"))) {
        first = 1;
        if (S(m[0].content).n) {
            markup(b, "<|start|>developer<|message|># Instructions\n\n");
            content(b, S(m[0].content));
            markup(b, "\n\n<|end|>");
        }
    }
    for (size_t i = first; i < n; i++) {
        if (role_is(&m[i], "assistant")) {
            if (!gpt_oss_channel_tags(&m[i], err)) return false;
            bool last = i == n - 1 && !b->p->add_generation_prompt;
            if (last && m[i].reasoning) {
                markup(b, "<|start|>assistant<|channel|>analysis<|message|>");
                content(b, S(m[i].reasoning));
                markup(b, "<|end|>");
            }
            markup(b, "<|start|>assistant<|channel|>final<|message|>");
            content(b, S(m[i].content));
            markup(b, last ? "<|return|>" : "<|end|>");
        } else if (role_is(&m[i], "user")) {
            markup(b, "<|start|>user<|message|>");
            content(b, S(m[i].content));
            markup(b, "<|end|>");
        }
    }
    if (b->p->add_generation_prompt) markup(b, "<|start|>assistant");
    return true;
}

// ---------------------------------------------------------------------------------------------
// Gemma 4

// An assistant text with its thought channels ("<|channel>...<channel|>") cut out, trimmed (the
// templates' strip_thinking: of each piece the text splits into at "<channel|>", what comes
// before its first "<|channel>").
static void gemma4_strip_thinking(builder *b, str text) {
    char *kept = ft_malloc(text.n + 1);
    size_t n = 0;
    str s = text;
    for (;;) {
        const char *c = find(s, "<channel|>", false);
        str part = {s.s, c ? (size_t)(c - s.s) : s.n};
        const char *o = find(part, "<|channel>", false);
        size_t k = o ? (size_t)(o - part.s) : part.n;
        memcpy(kept + n, part.s, k);
        n += k;
        if (!c) break;
        s = (str){c + 10, (size_t)(s.s + s.n - c - 10)};
    }
    content(b, strip_ws((str){kept, n}));
    free(kept);
}

// Gemma 4 (without tools): BOS; a system turn when thinking is on or the first message is a
// system or developer one ("<|think|>" at its top when thinking, that message's trimmed text);
// each other message a turn "<|turn>ROLE\n" (assistant: "model") with its trimmed text (an
// assistant's with its thought channels cut out) and "<turn|>\n", an assistant turn right after
// another continuing it without a header in the current template; earlier reasoning is not
// rendered. The generation prompt opens a model turn, with an empty thought channel when
// thinking is off.
static bool render_gemma4(builder *b, enum tok_chat_template t, const tok_chat_msg *m, size_t n, ft_err *err) {
    if (!no_tools(m, n, err)) return false;
    if (!n && !b->p->enable_thinking) return ft_err_set(err, "chat template: no messages provided");
    markup(b, b->p->bos_text);
    size_t first = 0;
    bool system = n && (role_is(&m[0], "system") || role_is(&m[0], "developer"));
    if (b->p->enable_thinking || system) {
        markup(b, "<|turn>system\n");
        if (b->p->enable_thinking) markup(b, t == TOK_CHAT_GEMMA4_V1 ? "<|think|>" : "<|think|>\n");
        if (!n) return ft_err_set(err, "chat template: no messages provided");
        if (system) {
            content(b, strip_ws(S(m[0].content)));
            first = 1;
        }
        markup(b, "<turn|>\n");
    }
    for (size_t i = first; i < n; i++) {
        bool model = role_is(&m[i], "assistant");
        if (!(t == TOK_CHAT_GEMMA4 && model && i > first && role_is(&m[i - 1], "assistant"))) {
            markup(b, "<|turn>");
            content(b, S(model ? "model" : m[i].role));
            markup(b, "\n");
        }
        if (model) gemma4_strip_thinking(b, S(m[i].content));
        else content(b, strip_ws(S(m[i].content)));
        markup(b, "<turn|>\n");
    }
    if (b->p->add_generation_prompt) {
        markup(b, "<|turn>model\n");
        if (!b->p->enable_thinking) markup(b, "<|channel>thought\n<channel|>");
    }
    return true;
}

// ---------------------------------------------------------------------------------------------

bool tok_chat_render(enum tok_chat_template t, const tok_chat_msg *msgs, size_t n_msgs,
                     tok_chat_params p, tok_chat_prompt *out, ft_err *err) {
    FT_ASSERT(t >= 0 && t < TOK_CHAT_COUNT);
    memset(out, 0, sizeof(*out));
    if (!p.bos_text) p.bos_text = "";
    if (!p.eos_text) p.eos_text = "";
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role) return ft_err_set(err, "chat template: message %zu has no role", i);
    builder b = {.p = &p};
    tok_grow((void **)&b.text, &b.cap, 1, 1);
    b.text[0] = 0;
    bool ok;
    switch (t) {
    case TOK_CHAT_QWEN3: ok = render_qwen3(&b, msgs, n_msgs, err); break;
    case TOK_CHAT_QWEN35: ok = render_qwen35(&b, msgs, n_msgs, err); break;
    case TOK_CHAT_GLM45: ok = render_glm45(&b, msgs, n_msgs, err); break;
    case TOK_CHAT_LLAMA2: ok = render_llama2(&b, msgs, n_msgs, err); break;
    case TOK_CHAT_MISTRAL: ok = render_mistral(&b, msgs, n_msgs, err); break;
    case TOK_CHAT_LLAMA3:
    case TOK_CHAT_LLAMA31: ok = render_llama3(&b, t, msgs, n_msgs, err); break;
    case TOK_CHAT_GPT_OSS: ok = render_gpt_oss(&b, msgs, n_msgs, err); break;
    case TOK_CHAT_GEMMA4:
    case TOK_CHAT_GEMMA4_INTERLEAVED:
    case TOK_CHAT_GEMMA4_V1: ok = render_gemma4(&b, t, msgs, n_msgs, err); break;
    default: ok = render_chatml(&b, t, msgs, n_msgs, err); break;
    }
    if (!ok) {
        free(b.text);
        free(b.segs);
        return false;
    }
    out->text = b.text;
    out->len = b.len;
    out->n_segs = b.n_segs;
    out->segs = ft_malloc((b.n_segs ? b.n_segs : 1) * sizeof(tok_segment));
    for (size_t i = 0; i < b.n_segs; i++)
        out->segs[i] = (tok_segment){b.text + b.segs[i].off, b.segs[i].len, b.segs[i].markup};
    free(b.segs);
    return true;
}

void tok_chat_prompt_free(tok_chat_prompt *p) {
    free(p->text);
    free(p->segs);
    memset(p, 0, sizeof(*p));
}
