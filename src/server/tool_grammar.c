// tool_grammar.c: the grammar that forces a tool call (tool_choice "required", Anthropic's "any"
// or a named tool): the reply is one call, or with parallel calls one or more, written in the
// template's syntax exactly as tool_call.c parses it, each call's arguments following its
// tool's parameters schema (json_schema.h). Formats that write arguments as key/value markup
// (glm4.5, qwen3-coder) take each property in the schema's order, the required ones always and
// the others optionally, a string property as text without '<' (or one of its enum's values), any
// other as its schema's JSON.
#include "tool_call.h"

#include "../engine/json_schema.h"

#include <stdio.h>
#include <string.h>

typedef struct gctx {
    ft_gb *b;
    ft_json_rules *j;
    ft_err *err;
} gctx;

static void lit(gctx *g, ft_gseq *q, const char *s) { ft_gb_lit(g->b, q, s, strlen(s)); }

static void ref(ft_gseq *q, int rule) { ft_gseq_push(q, ft_gb_ref(rule)); }

// A rule of one alternative, q (freed).
static int seq_rule(gctx *g, ft_gseq *q, const char *hint) {
    int r = ft_gb_rule(g->b, hint);
    ft_gb_alt(g->b, r, q->s, q->n);
    ft_gseq_free(q);
    return r;
}

static int lit_rule(gctx *g, const char *s, const char *hint) {
    ft_gseq q = {0};
    lit(g, &q, s);
    return seq_rule(g, &q, hint);
}

// A key/value format's value of a string property: one of its enum's strings, or text without '<'.
static int kv_string(gctx *g, json_t *schema) {
    json_t *en = json_object_get(schema, "enum");
    int r = ft_gb_rule(g->b, "kv-string");
    if (json_is_array(en) && json_array_size(en)) {
        size_t i;
        json_t *v;
        json_array_foreach(en, i, v) {
            if (!json_is_string(v) || strchr(json_string_value(v), '<')) continue;
            ft_gseq q = {0};
            lit(g, &q, json_string_value(v));
            ft_gb_alt(g->b, r, q.s, q.n);
            ft_gseq_free(&q);
        }
        return r;
    }
    static const uint32_t lt[2] = {'<', '<'};
    ft_gsym ch = ft_gb_chars(g->b, lt, 1, true);
    ft_gsym rep = ft_gb_repeat(g->b, &ch, 1, 0, -1, "kv-text");
    ft_gb_alt(g->b, r, &rep, 1);
    return r;
}

static bool is_string_schema(json_t *schema) {
    json_t *t = json_object_get(schema, "type");
    return json_is_string(t) && !strcmp(json_string_value(t), "string");
}

// glm4.5: (<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n)*; qwen3-coder:
// (<parameter=K>\nV\n</parameter>\n)*: the properties in order, each required one always.
static int kv_args(gctx *g, enum tok_tool_format f, json_t *params, const char *where) {
    json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    ft_gseq all = {0};
    const char *key;
    json_t *schema;
    json_object_foreach(props, key, schema) {
        if (strchr(key, '<') || strchr(key, '>') || strchr(key, '\n')) {
            ft_gseq_free(&all);
            return ft_err_set(g->err, "%s: property '%.60s' cannot be written in this template's markup", where, key), -1;
        }
        int v = is_string_schema(schema) ? kv_string(g, schema) : ft_json_rules_schema(g->j, schema, g->err);
        if (v < 0) {
            ft_gseq_free(&all);
            return ft_err_prefix(g->err, "%s, property '%.60s'", where, key), -1;
        }
        ft_gseq q = {0};
        char open[600];
        if (f == TOK_TOOLS_GLM45) {
            snprintf(open, sizeof(open), "<arg_key>%s</arg_key>\n<arg_value>", key);
            lit(g, &q, open);
            ref(&q, v);
            lit(g, &q, "</arg_value>\n");
        } else {
            snprintf(open, sizeof(open), "<parameter=%s>\n", key);
            lit(g, &q, open);
            ref(&q, v);
            lit(g, &q, "\n</parameter>\n");
        }
        bool required = false;
        size_t i;
        json_t *r;
        json_array_foreach(req, i, r) required |= json_is_string(r) && !strcmp(json_string_value(r), key);
        ft_gsym pair = ft_gb_group(g->b, q.s, q.n, "kv-pair");
        ft_gseq_free(&q);
        ft_gseq_push(&all, required ? pair : ft_gb_repeat(g->b, &pair, 1, 0, 1, "kv-opt"));
    }
    return seq_rule(g, &all, "kv-args");
}

// One call of the tool fn in format f.
static int call_rule(gctx *g, enum tok_tool_format f, json_t *fn, const char *where) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *params = json_object_get(fn, "parameters");
    int args;
    if (f == TOK_TOOLS_GLM45 || f == TOK_TOOLS_QWEN3_CODER)
        args = kv_args(g, f, params, where);
    else if (!params || json_is_null(params))
        args = ft_json_rules_any_object(g->j);
    else {
        args = ft_json_rules_schema(g->j, params, g->err);
        if (args < 0) ft_err_prefix(g->err, "%s", where);
    }
    if (args < 0) return -1;
    char pre[400];
    ft_gseq q = {0};
    switch (f) {
    case TOK_TOOLS_HERMES:
        snprintf(pre, sizeof(pre), "<tool_call>\n{\"name\": \"%s\", \"arguments\": ", name);
        lit(g, &q, pre);
        ref(&q, args);
        lit(g, &q, "}\n</tool_call>");
        break;
    case TOK_TOOLS_QWEN3_CODER:
        snprintf(pre, sizeof(pre), "<tool_call>\n<function=%s>\n", name);
        lit(g, &q, pre);
        ref(&q, args);
        lit(g, &q, "</function>\n</tool_call>");
        break;
    case TOK_TOOLS_GLM45:
        snprintf(pre, sizeof(pre), "<tool_call>%s\n", name);
        lit(g, &q, pre);
        ref(&q, args);
        lit(g, &q, "</tool_call>");
        break;
    case TOK_TOOLS_HARMONY:
        snprintf(pre, sizeof(pre), "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>", name);
        lit(g, &q, pre);
        ref(&q, args);
        break;
    case TOK_TOOLS_DEEPSEEK: { // R1's fenced way or V3.1's
        ft_gseq r1 = {0}, v31 = {0};
        snprintf(pre, sizeof(pre), "<｜tool▁call▁begin｜>function<｜tool▁sep｜>%s\n```json\n", name);
        lit(g, &r1, pre);
        ref(&r1, args);
        lit(g, &r1, "\n```<｜tool▁call▁end｜>");
        snprintf(pre, sizeof(pre), "<｜tool▁call▁begin｜>%s<｜tool▁sep｜>", name);
        lit(g, &v31, pre);
        ref(&v31, args);
        lit(g, &v31, "<｜tool▁call▁end｜>");
        int r = ft_gb_rule(g->b, "call");
        ft_gb_alt(g->b, r, r1.s, r1.n);
        ft_gb_alt(g->b, r, v31.s, v31.n);
        ft_gseq_free(&r1);
        ft_gseq_free(&v31);
        return r;
    }
    case TOK_TOOLS_KIMI_K2: {
        snprintf(pre, sizeof(pre), "<|tool_call_begin|>functions.%s:", name);
        lit(g, &q, pre);
        uint64_t digits[4] = {0};
        digits[0] = 0x03ff000000000000ull; // '0'..'9'
        ft_gsym d = ft_gb_bytes(g->b, digits);
        ft_gseq_push(&q, ft_gb_repeat(g->b, &d, 1, 1, 3, "index"));
        lit(g, &q, "<|tool_call_argument_begin|>");
        ref(&q, args);
        lit(g, &q, "<|tool_call_end|>");
        break;
    }
    case TOK_TOOLS_MISTRAL:
        snprintf(pre, sizeof(pre), "{\"name\": \"%s\", \"arguments\": ", name);
        lit(g, &q, pre);
        ref(&q, args);
        lit(g, &q, "}");
        break;
    case TOK_TOOLS_MISTRAL_ARGS:
        snprintf(pre, sizeof(pre), "[TOOL_CALLS]%s[ARGS]", name);
        lit(g, &q, pre);
        ref(&q, args);
        break;
    case TOK_TOOLS_LLAMA3:
        snprintf(pre, sizeof(pre), "{\"name\": \"%s\", \"parameters\": ", name);
        lit(g, &q, pre);
        ref(&q, args);
        lit(g, &q, "}");
        break;
    default: ft_gseq_free(&q); return ft_err_set(g->err, "no tool-call syntax to force"), -1;
    }
    return seq_rule(g, &q, "call");
}

ft_grammar *srv_tools_grammar(enum tok_tool_format f, json_t *tools, const char *only, bool parallel, bool lenient,
                              ft_err *err) {
    if (f == TOK_TOOLS_NONE || f >= TOK_TOOLS_COUNT)
        return ft_err_set(err, "the chat template has no tool-call format ft can force"), NULL;
    // one call a message: gpt-oss ends its reply at the call; Llama 3's is the whole reply
    if (f == TOK_TOOLS_HARMONY || f == TOK_TOOLS_LLAMA3) parallel = false;
    gctx g = {ft_gb_init(), NULL, err};
    g.j = ft_json_rules_init(g.b, lenient);
    ft_grammar *out = NULL;
    int any = ft_gb_rule(g.b, "any-call");
    size_t i, n_alts = 0;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (only && strcmp(only, name))) continue;
        char where[200];
        snprintf(where, sizeof(where), "tools[%zu] ('%.60s') parameters", i, name);
        int c = call_rule(&g, f, fn, where);
        if (c < 0) goto out;
        ft_gsym s = ft_gb_ref(c);
        ft_gb_alt(g.b, any, &s, 1);
        n_alts++;
    }
    if (!n_alts) {
        ft_err_set(err, only ? "no tool named '%.60s' among 'tools'" : "no tools to call", only);
        goto out;
    }
    // the reply: [\n] calls, in the format's section markup
    int root = ft_gb_rule(g.b, "root");
    ft_gseq q = {0};
    static const uint64_t nl[4] = {1ull << '\n'};
    ft_gsym lead = ft_gb_bytes(g.b, nl);
    if (f != TOK_TOOLS_HARMONY) ft_gseq_push(&q, ft_gb_repeat(g.b, &lead, 1, 0, 1, "lead")); // (a header opens it)
    const char *sep = f == TOK_TOOLS_MISTRAL ? ", " : f == TOK_TOOLS_HERMES || f == TOK_TOOLS_QWEN3_CODER || f == TOK_TOOLS_GLM45 ? "\n" : "";
    ft_gsym more[2] = {ft_gb_ref(lit_rule(&g, sep, "sep")), ft_gb_ref(any)};
    if (f == TOK_TOOLS_DEEPSEEK) lit(&g, &q, "<｜tool▁calls▁begin｜>");
    if (f == TOK_TOOLS_KIMI_K2) lit(&g, &q, "<|tool_calls_section_begin|>");
    if (f == TOK_TOOLS_MISTRAL) lit(&g, &q, "[TOOL_CALLS][");
    ref(&q, any);
    if (parallel) ft_gseq_push(&q, ft_gb_repeat(g.b, more, 2, 0, -1, "more-calls"));
    if (f == TOK_TOOLS_DEEPSEEK) lit(&g, &q, "<｜tool▁calls▁end｜>");
    if (f == TOK_TOOLS_KIMI_K2) lit(&g, &q, "<|tool_calls_section_end|>");
    if (f == TOK_TOOLS_MISTRAL) lit(&g, &q, "]");
    ft_gb_alt(g.b, root, q.s, q.n);
    ft_gseq_free(&q);
    out = ft_gb_finish(g.b, root, err);
out:
    ft_json_rules_free(g.j);
    ft_gb_free(g.b);
    return out;
}
