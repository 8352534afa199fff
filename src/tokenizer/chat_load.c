// chat_load.c: the chat template a model is served with (the GGUF's own Jinja template, a
// built-in, or a Jinja file), and a conversation given to a Jinja template as its variables.
#include "tok_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct tok_chat {
    int builtin; // enum tok_chat_template, or -1
    tok_jinja *jinja;
    bool harmony; // gpt-oss's format (tok_chat_harmony)
    bool thought; // Gemma 4's thought channel (tok_chat_thought_channel)
    bool effort;  // takes a reasoning effort (tok_chat_takes_effort)
    bool object_args; // tool-call arguments as objects (tok_chat_object_arguments)
    enum tok_tool_format tools; // tok_chat_tool_format
    char desc[600];
};

// ---------------------------------------------------------------------------------------------
// Variables as JSON

typedef struct jbuf {
    char *s;
    size_t n, cap;
} jbuf;

static void put(jbuf *b, const char *s, size_t n) {
    tok_grow((void **)&b->s, &b->cap, b->n + n + 1, 1);
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void puts_(jbuf *b, const char *s) { put(b, s, strlen(s)); }

static void put_json_string(jbuf *b, const char *s) {
    puts_(b, "\"");
    if (s) {
        const char *run = s;
        for (; *s; s++) {
            unsigned char c = (unsigned char)*s;
            if (c != '"' && c != '\\' && c >= 0x20) continue;
            put(b, run, (size_t)(s - run));
            char esc[8];
            if (c == '"' || c == '\\') snprintf(esc, sizeof(esc), "\\%c", c);
            else snprintf(esc, sizeof(esc), "\\u%04x", c);
            puts_(b, esc);
            run = s + 1;
        }
        put(b, run, (size_t)(s - run));
    }
    puts_(b, "\"");
}

// {"messages": [...], "add_generation_prompt": ..., "enable_thinking": ..., "bos_token": ...,
//  "eos_token": ..., "reasoning_effort": ..., "reasoning_strength": ..., "tools": ...}. harmony:
// reasoning also as "thinking", the field gpt-oss's template reads (llama.cpp copies it there).
static char *chat_vars(const tok_chat_msg *m, size_t n, const tok_chat_params *p, const char *tools, bool harmony) {
    jbuf b = {0};
    puts_(&b, "{\"messages\": [");
    for (size_t i = 0; i < n; i++) {
        puts_(&b, i ? ", {\"role\": " : "{\"role\": ");
        put_json_string(&b, m[i].role);
        puts_(&b, ", \"content\": ");
        put_json_string(&b, m[i].content);
        if (m[i].reasoning) {
            puts_(&b, ", \"reasoning_content\": ");
            put_json_string(&b, m[i].reasoning);
        }
        if (m[i].reasoning && harmony) {
            puts_(&b, ", \"thinking\": ");
            put_json_string(&b, m[i].reasoning);
        }
        // in llama.cpp's order (common_chat_msg::to_json_oaicompat): name, tool_call_id, tool_calls
        if (m[i].name) {
            puts_(&b, ", \"name\": ");
            put_json_string(&b, m[i].name);
        }
        if (m[i].tool_call_id) {
            puts_(&b, ", \"tool_call_id\": ");
            put_json_string(&b, m[i].tool_call_id);
        }
        if (m[i].tool_calls) { // JSON text the caller made (tok_chat_msg)
            puts_(&b, ", \"tool_calls\": ");
            puts_(&b, m[i].tool_calls);
        }
        puts_(&b, "}");
    }
    puts_(&b, "], \"add_generation_prompt\": ");
    puts_(&b, p->add_generation_prompt ? "true" : "false");
    puts_(&b, ", \"enable_thinking\": ");
    puts_(&b, p->enable_thinking ? "true" : "false");
    puts_(&b, ", \"bos_token\": ");
    put_json_string(&b, p->bos_text);
    puts_(&b, ", \"eos_token\": ");
    put_json_string(&b, p->eos_text);
    // both names, as llama.cpp sets them
    if (p->reasoning_effort) {
        puts_(&b, ", \"reasoning_effort\": ");
        put_json_string(&b, p->reasoning_effort);
        puts_(&b, ", \"reasoning_strength\": ");
        put_json_string(&b, p->reasoning_effort);
    }
    if (tools) {
        puts_(&b, ", \"tools\": ");
        puts_(&b, tools);
    }
    puts_(&b, "}");
    return b.s;
}

static bool render_jinja(const tok_jinja *t, bool harmony, const tok_chat_msg *msgs, size_t n,
                         const tok_chat_params *p, const tok_chat_extra *extra, tok_chat_prompt *out, ft_err *err) {
    char *vars = chat_vars(msgs, n, p, extra ? extra->tools : NULL, harmony);
    const char *texts[2] = {vars, extra ? extra->kwargs : NULL};
    size_t lens[2] = {strlen(vars), texts[1] ? strlen(texts[1]) : 0};
    tok_jinja_params jp = tok_jinja_default_params();
    bool ok = tok_jinja_render(t, texts, lens, texts[1] ? 2 : 1, &jp, out, err);
    free(vars);
    if (!ok) ft_err_prefix(err, "chat template");
    return ok;
}

// ---------------------------------------------------------------------------------------------
// Choosing the template

static void names(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int t = 0; t < TOK_CHAT_COUNT && n < cap; t++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", t ? ", " : "", tok_chat_name((enum tok_chat_template)t));
}

// Parses a Jinja template and renders a one-message conversation with it: a template the
// interpreter cannot render is refused when the model loads, not at its first request.
static tok_jinja *load_jinja(const char *src, size_t len, ft_err *err) {
    tok_jinja *t = tok_jinja_parse(src, len, err);
    if (!t) return NULL;
    tok_chat_msg hello = {.role = "user", .content = "Hello"};
    tok_chat_params p = tok_chat_default_params(NULL);
    tok_chat_prompt out;
    if (!render_jinja(t, false, &hello, 1, &p, NULL, &out, err)) {
        ft_err_prefix(err, "rendering a one-message conversation");
        tok_jinja_free(t);
        return NULL;
    }
    tok_chat_prompt_free(&out);
    return t;
}

static tok_chat *chat_builtin(enum tok_chat_template t, const char *why) {
    tok_chat *c = ft_calloc(1, sizeof(*c));
    c->builtin = (int)t;
    c->harmony = c->effort = t == TOK_CHAT_GPT_OSS;
    c->thought = t == TOK_CHAT_GEMMA4 || t == TOK_CHAT_GEMMA4_INTERLEAVED || t == TOK_CHAT_GEMMA4_V1;
    snprintf(c->desc, sizeof(c->desc), "built-in %s%s", tok_chat_name(t), why);
    return c;
}

// llama.cpp's capability check for object arguments (jinja/caps.cpp) renders a conversation
// with a tool call whose arguments are {"arg": "value"} and asks whether the template used the
// member "arg" (read it, iterated it, or passed the object through tojson). ft asks the same of
// the output: the render succeeds and prints the member's value, other than as part of the
// object's own repr (a template that prints the arguments as they are expects a string).
static bool object_arguments(const tok_jinja *t, bool harmony) {
    static const char mark[] = "ft-arg-7f3a9c";
    char calls[256];
    snprintf(calls, sizeof(calls),
             "[{\"type\": \"function\", \"function\": {\"name\": \"tool1\", \"arguments\": {\"arg\": \"%s\"}}, "
             "\"id\": \"call00001\"}]",
             mark);
    tok_chat_msg m[5] = {
        {.role = "user", .content = "User message"},
        {.role = "assistant", .content = "", .tool_calls = calls},
        {.role = "tool", .content = "Tool response", .tool_call_id = "call00001"},
        {.role = "assistant", .content = "The tool response was 'tool response'"},
        {.role = "user", .content = "User message"},
    };
    static const char tools[] =
        "[{\"name\": \"tool\", \"type\": \"function\", \"function\": {\"name\": \"tool1\", \"description\": "
        "\"Tool description\", \"parameters\": {\"type\": \"object\", \"properties\": {\"arg\": {\"type\": "
        "\"string\", \"description\": \"Arg description\"}}, \"required\": [\"arg\"]}}}]";
    tok_chat_params p = tok_chat_default_params(NULL);
    p.bos_text = p.eos_text = "";
    tok_chat_extra extra = {.tools = tools};
    tok_chat_prompt out;
    ft_err err = {{0}};
    if (!render_jinja(t, harmony, m, 5, &p, &extra, &out, &err)) return false;
    char repr[64];
    snprintf(repr, sizeof(repr), "{'arg': '%s'}", mark);
    bool used = false;
    for (const char *q = strstr(out.text, mark); q && !used; q = strstr(q + 1, mark))
        used = !(q >= out.text + 9 && !strncmp(q - 9, repr, strlen(repr)));
    tok_chat_prompt_free(&out);
    return used;
}

static const char *const k_tool_format_names[TOK_TOOLS_COUNT] = {
    "none", "hermes", "qwen3-coder", "harmony", "glm4.5", "deepseek", "kimi-k2", "mistral", "mistral-args", "llama3",
};

const char *tok_tool_format_name(enum tok_tool_format f) {
    return (unsigned)f < TOK_TOOLS_COUNT ? k_tool_format_names[f] : "?";
}

static bool has(const char *s, size_t n, const char *marker) { return memmem(s, n, marker, strlen(marker)) != NULL; }

// The markers are those llama.cpp tells the formats by (common/chat.cpp's specialised templates
// and the markup its differential analysis finds), checked most specific first.
enum tok_tool_format tok_tool_format_detect(const char *src, size_t len) {
    if (has(src, len, "<|channel|>")) return TOK_TOOLS_HARMONY;
    if (has(src, len, "<|tool_calls_section_begin|>") && has(src, len, "<|tool_call_begin|>")) return TOK_TOOLS_KIMI_K2;
    if (has(src, len, "dsml_token")) return TOK_TOOLS_NONE; // DeepSeek V3.2's DSML markup: not parsed
    if (has(src, len, "<｜tool▁calls▁begin｜>") && has(src, len, "<｜tool▁sep｜>")) return TOK_TOOLS_DEEPSEEK;
    if (has(src, len, "<arg_key>") && has(src, len, "<arg_value>")) return TOK_TOOLS_GLM45;
    if (has(src, len, "<tool_call>") && has(src, len, "<function=") && has(src, len, "<parameter="))
        return TOK_TOOLS_QWEN3_CODER;
    if (has(src, len, "<tool_call>")) return TOK_TOOLS_HERMES;
    if (has(src, len, "[TOOL_CALLS]") && has(src, len, "[ARGS]")) return TOK_TOOLS_MISTRAL_ARGS;
    if (has(src, len, "[TOOL_CALLS]")) return TOK_TOOLS_MISTRAL;
    if (has(src, len, "<|start_header_id|>") && has(src, len, "\"parameters\"") && has(src, len, "tool_calls"))
        return TOK_TOOLS_LLAMA3;
    return TOK_TOOLS_NONE;
}

static tok_chat *chat_jinja(tok_jinja *t, const char *src, size_t len) {
    tok_chat *c = ft_calloc(1, sizeof(*c));
    c->builtin = -1;
    c->jinja = t;
    c->harmony = memmem(src, len, "<|channel|>", 11) != NULL;
    c->thought = memmem(src, len, "'<|tool_call>call:'", 19) != NULL;
    c->effort = tok_jinja_names(t, "reasoning_effort") || tok_jinja_names(t, "reasoning_strength");
    c->object_args = object_arguments(t, c->harmony);
    c->tools = tok_tool_format_detect(src, len);
    return c;
}

// A Jinja template from a file: 1 and *out, 0 (and *err) when it does not load, -1 when the file
// cannot be read.
static int chat_file(const char *path, tok_chat **out, ft_err *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    size_t cap = 65536, n = 0, got;
    char *src = ft_malloc(cap);
    while ((got = fread(src + n, 1, cap - n, fp)) > 0) {
        n += got;
        if (n < cap) continue;
        if (cap >= (64u << 20)) {
            fclose(fp);
            free(src);
            ft_err_set(err, "--chat-template %s: larger than 64 MiB", path);
            return 0;
        }
        src = ft_realloc(src, cap *= 2);
    }
    fclose(fp);
    tok_jinja *t = load_jinja(src, n, err);
    if (!t) {
        free(src);
        ft_err_prefix(err, "--chat-template %s", path);
        return 0;
    }
    tok_chat *c = chat_jinja(t, src, n);
    free(src);
    snprintf(c->desc, sizeof(c->desc), "%.400s (Jinja, %zu bytes)", path, n);
    *out = c;
    return 1;
}

tok_chat *tok_chat_load(const gguf_file *f, const char *spec, ft_err *err) {
    char list[256];
    names(list, sizeof(list));
    if (spec) {
        enum tok_chat_template t;
        if (tok_chat_from_name(spec, &t, NULL)) return chat_builtin(t, " (--chat-template)");
        tok_chat *c = NULL;
        int got = chat_file(spec, &c, err);
        if (got >= 0) return c;
        ft_err_set(err, "unknown chat template '%s': neither a built-in (%s) nor a readable file (%s)", spec, list,
                   strerror(errno));
        return NULL;
    }
    gguf_str src;
    if (!f || !gguf_get_str(f, "tokenizer.chat_template", &src)) {
        ft_err_set(err, "the model has no chat template (tokenizer.chat_template); use --chat-template NAME|FILE (%s)",
                   list);
        return NULL;
    }
    ft_err why = {{0}};
    tok_jinja *t = load_jinja(src.ptr, (size_t)src.len, &why);
    if (t) {
        tok_chat *c = chat_jinja(t, src.ptr, (size_t)src.len);
        snprintf(c->desc, sizeof(c->desc), "the GGUF's own (Jinja, %llu bytes)", (unsigned long long)src.len);
        return c;
    }
    enum tok_chat_template b;
    if (tok_chat_detect(src.ptr, (size_t)src.len, &b, NULL)) {
        FT_LOG_WARN("chat template: the GGUF's cannot be rendered (%s); using the built-in %s", why.msg,
                    tok_chat_name(b));
        char because[sizeof(why.msg) + 40];
        snprintf(because, sizeof(because), " (the GGUF's template: %s)", why.msg);
        return chat_builtin(b, because);
    }
    ft_err_set(err, "the model's chat template cannot be rendered (%s); use --chat-template NAME|FILE (%s)", why.msg,
               list);
    return NULL;
}

void tok_chat_free(tok_chat *c) {
    if (!c) return;
    tok_jinja_free(c->jinja);
    free(c);
}

const char *tok_chat_describe(const tok_chat *c) { return c->desc; }

int tok_chat_builtin(const tok_chat *c) { return c->builtin; }

bool tok_chat_harmony(const tok_chat *c) { return c->harmony; }

bool tok_chat_takes_effort(const tok_chat *c) { return c->effort; }

bool tok_chat_thought_channel(const tok_chat *c) { return c->thought; }

bool tok_chat_object_arguments(const tok_chat *c) { return c->object_args; }

enum tok_tool_format tok_chat_tool_format(const tok_chat *c) { return c->tools; }

bool tok_chat_apply(const tok_chat *c, const tok_chat_msg *msgs, size_t n_msgs, tok_chat_params p,
                    const tok_chat_extra *extra, tok_chat_prompt *out, ft_err *err) {
    if (c->builtin >= 0) {
        // the built-ins render no tools: refused rather than dropped
        if (extra && extra->tools)
            return ft_err_set(err, "chat template: the built-in %s renders no tools (serve the model's own Jinja "
                                   "template, or --chat-template FILE)", tok_chat_name((enum tok_chat_template)c->builtin));
        for (size_t i = 0; i < n_msgs; i++)
            if (msgs[i].tool_calls || msgs[i].tool_call_id || msgs[i].name)
                return ft_err_set(err, "chat template: the built-in %s renders no tool calls or tool results (serve "
                                       "the model's own Jinja template, or --chat-template FILE)",
                                  tok_chat_name((enum tok_chat_template)c->builtin));
        return tok_chat_render((enum tok_chat_template)c->builtin, msgs, n_msgs, p, out, err);
    }
    memset(out, 0, sizeof(*out));
    if (!p.bos_text) p.bos_text = "";
    if (!p.eos_text) p.eos_text = "";
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role) return ft_err_set(err, "chat template: message %zu has no role", i);
    return render_jinja(c->jinja, c->harmony, msgs, n_msgs, &p, extra, out, err);
}
