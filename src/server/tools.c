// tools.c: a request's tools and tool_choice, in OpenAI's shape (/v1/chat/completions) or the
// Messages API's (/v1/messages), read into what the template renders (OpenAI's function shape,
// as llama.cpp passes it: {"type": "function", "function": {"name", "description",
// "parameters"}}), the parser of the reply's calls, and the grammar that forces a call.
#include "srv_impl.h"
#include "tool_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOOLS 512

// A tool's name: 1 to 64 letters, digits, '_', '-' (OpenAI's and Anthropic's rule; '.' as well,
// which llama.cpp's formats carry).
static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return false;
    return true;
}

// One tool in the template's shape, from its name, description and parameters (NULL: {}).
static json_t *function_tool(const char *name, json_t *desc, json_t *params) {
    return json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function", "function", "name", name, "description",
                     json_is_string(desc) ? json_string_value(desc) : "", "parameters",
                     params && !json_is_null(params) ? json_incref(params) : json_object());
}

static bool check_tool(json_t *out, size_t i, const char *name, json_t *desc, json_t *params, const char *params_key,
                       ft_err *err) {
    if (!valid_name(name))
        return ft_err_set(err, "tools[%zu]: name '%.80s' must be 1 to 64 letters, digits, '_', '-' or '.'", i, name);
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return ft_err_set(err, "tools[%zu]: 'description' must be a string", i);
    if (params && !json_is_null(params) && !json_is_object(params))
        return ft_err_set(err, "tools[%zu]: '%s' must be a JSON Schema object", i, params_key);
    size_t k;
    json_t *t;
    json_array_foreach(out, k, t) {
        if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name))
            return ft_err_set(err, "tools[%zu]: a second tool named '%s'", i, name);
    }
    return true;
}

// OpenAI: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}].
static json_t *openai_tools(json_t *tools, ft_err *err) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") ||
            !json_is_object(fn)) {
            ft_err_set(err, "tools[%zu] must be {\"type\": \"function\", \"function\": {...}} (ft serves function tools)", i);
            goto fail;
        }
        json_t *name = json_object_get(fn, "name"), *strict = json_object_get(fn, "strict");
        if (!json_is_string(name)) {
            ft_err_set(err, "tools[%zu].function needs a string 'name'", i);
            goto fail;
        }
        if (strict && !json_is_null(strict) && !json_is_boolean(strict)) {
            ft_err_set(err, "tools[%zu].function.strict must be a boolean", i);
            goto fail;
        }
        json_t *desc = json_object_get(fn, "description"), *params = json_object_get(fn, "parameters");
        if (!check_tool(out, i, json_string_value(name), desc, params, "parameters", err)) goto fail;
        json_array_append_new(out, function_tool(json_string_value(name), desc, params));
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

// Anthropic: [{"name", "description", "input_schema"}]; server tools (a "type" such as
// "web_search_20250305") run on Anthropic's side and are refused.
static json_t *anthropic_tools(json_t *tools, ft_err *err) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *type = json_object_get(t, "type"), *name = json_object_get(t, "name");
        if (!json_is_object(t) || !json_is_string(name)) {
            ft_err_set(err, "tools[%zu] must be an object with a string 'name'", i);
            goto fail;
        }
        if (type && !json_is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "custom"))) {
            ft_err_set(err, "tools[%zu]: tools of type '%.60s' run on Anthropic's servers; ft serves client tools (with "
                            "an 'input_schema')",
                       i, json_is_string(type) ? json_string_value(type) : "?");
            goto fail;
        }
        json_t *schema = json_object_get(t, "input_schema");
        if (!json_is_object(schema)) {
            ft_err_set(err, "tools[%zu] needs an 'input_schema' object", i);
            goto fail;
        }
        json_t *desc = json_object_get(t, "description");
        if (!check_tool(out, i, json_string_value(name), desc, schema, "input_schema", err)) goto fail;
        json_array_append_new(out, function_tool(json_string_value(name), desc, schema));
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

enum choice { CHOICE_AUTO, CHOICE_NONE, CHOICE_REQUIRED, CHOICE_NAMED };

// tool_choice, OpenAI's: "none", "auto", "required", {"type": "function", "function": {"name"}};
// Anthropic's: {"type": "auto" | "any" | "tool" (with "name") | "none",
// "disable_parallel_tool_use"}. *name points into the body.
static bool parse_choice(json_t *tc, bool anthropic, enum choice *out, const char **name, bool *parallel, ft_err *err) {
    if (!tc || json_is_null(tc)) return true;
    if (!anthropic) {
        if (json_is_string(tc)) {
            const char *s = json_string_value(tc);
            if (!strcmp(s, "none")) *out = CHOICE_NONE;
            else if (!strcmp(s, "auto")) *out = CHOICE_AUTO;
            else if (!strcmp(s, "required")) *out = CHOICE_REQUIRED;
            else return ft_err_set(err, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                        "\"function\": {\"name\": ...}}");
            return true;
        }
        json_t *type = json_object_get(tc, "type"), *nm = json_object_get(json_object_get(tc, "function"), "name");
        if (!json_is_object(tc) || !json_is_string(type) || strcmp(json_string_value(type), "function") ||
            !json_is_string(nm))
            return ft_err_set(err, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                   "\"function\": {\"name\": ...}}");
        *out = CHOICE_NAMED;
        *name = json_string_value(nm);
        return true;
    }
    json_t *type = json_object_get(tc, "type");
    if (!json_is_object(tc) || !json_is_string(type))
        return ft_err_set(err, "'tool_choice' must be {\"type\": \"auto\", \"any\", \"tool\" or \"none\"}");
    const char *t = json_string_value(type);
    if (!strcmp(t, "auto")) *out = CHOICE_AUTO;
    else if (!strcmp(t, "any")) *out = CHOICE_REQUIRED;
    else if (!strcmp(t, "none")) *out = CHOICE_NONE;
    else if (!strcmp(t, "tool")) {
        json_t *nm = json_object_get(tc, "name");
        if (!json_is_string(nm)) return ft_err_set(err, "'tool_choice' of type \"tool\" needs a string 'name'");
        *out = CHOICE_NAMED;
        *name = json_string_value(nm);
    } else
        return ft_err_set(err, "'tool_choice' type '%.40s' is not one of \"auto\", \"any\", \"tool\", \"none\"", t);
    bool disable = false;
    if (!srv_get_bool(tc, "disable_parallel_tool_use", &disable, err)) return ft_err_prefix(err, "'tool_choice'"), false;
    if (disable) *parallel = false;
    return true;
}

bool srv_parse_tools(const srv_params *p, json_t *body, bool anthropic, srv_job *j, char **tools_text, ft_err *err) {
    *tools_text = NULL;
    json_t *tl = json_object_get(body, "tools"), *tc = json_object_get(body, "tool_choice");
    bool have = tl && !json_is_null(tl);
    if (have && !json_is_array(tl)) return ft_err_set(err, "'tools' must be an array");
    if (have && json_array_size(tl) > MAX_TOOLS) return ft_err_set(err, "'tools' holds more than %d tools", MAX_TOOLS);
    if (have && json_array_size(tl) == 0) have = false; // [] is no tools, as the APIs read it
    enum choice choice = CHOICE_AUTO;
    const char *name = NULL;
    bool parallel = true;
    if (!anthropic && !srv_get_bool(body, "parallel_tool_calls", &parallel, err)) return false;
    if (!parse_choice(tc, anthropic, &choice, &name, &parallel, err)) return false;
    if (!have) {
        // a choice without tools: "none" and "auto" say nothing; one that asks for a call cannot be met
        if (choice == CHOICE_REQUIRED || choice == CHOICE_NAMED)
            return ft_err_set(err, "'tool_choice' asks for a tool call, but the request has no 'tools'");
        return true;
    }
    json_t *tools = anthropic ? anthropic_tools(tl, err) : openai_tools(tl, err);
    if (!tools) return false;
    bool ok = false;
    if (name) {
        bool found = false;
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) found |= !strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name);
        if (!found) {
            ft_err_set(err, "'tool_choice' names '%.80s', which is not among 'tools'", name);
            goto out;
        }
    }
    enum tok_tool_format f = p->chat ? tok_chat_tool_format(p->chat) : TOK_TOOLS_NONE;
    if (choice != CHOICE_NONE) {
        if (!p->chat || tok_chat_builtin(p->chat) >= 0) {
            ft_err_set(err, "'tools': the chat template in use (%s) renders no tools; serve the model's own Jinja "
                            "template (or --chat-template FILE)",
                       p->chat ? tok_chat_describe(p->chat) : "none");
            goto out;
        }
        if (f == TOK_TOOLS_NONE) {
            ft_err_set(err, "'tools': the chat template in use (%s) writes tool calls in no format ft parses (hermes, "
                            "qwen3-coder, harmony, glm4.5, deepseek, kimi-k2, mistral, llama3); 'tool_choice' \"none\" "
                            "renders the tools without calls",
                       tok_chat_describe(p->chat));
            goto out;
        }
        j->tools = srv_tools_init(f, tools, anthropic ? "toolu_" : "call_", j->id * 0x9e3779b97f4a7c15ull + 1);
        if (!parallel) srv_tools_single(j->tools);
    }
    if (choice == CHOICE_REQUIRED || choice == CHOICE_NAMED) {
        if (j->grammar) {
            ft_err_set(err, "'tool_choice' forces a tool call, which is itself a constraint: drop 'response_format', "
                            "'grammar' or 'json_schema'");
            goto out;
        }
        j->grammar = srv_grammar_tools(p, f, tools, name, parallel, err);
        if (!j->grammar) goto out;
    }
    *tools_text = json_dumps(tools, JSON_COMPACT);
    ok = true;
out:
    json_decref(tools);
    return ok;
}

void srv_calls_record(srv_job *j, const srv_tc_event *e) {
    if (e->kind == SRV_TC_START) {
        if (j->n_calls == j->cap_calls) {
            j->cap_calls = j->cap_calls ? 2 * j->cap_calls : 4;
            j->calls = ft_realloc(j->calls, (size_t)j->cap_calls * sizeof(srv_call));
        }
        srv_call *c = &j->calls[j->n_calls++];
        *c = (srv_call){0};
        snprintf(c->id, sizeof(c->id), "%s", e->id);
        snprintf(c->name, sizeof(c->name), "%s", e->name);
        srv_buf_add(&c->args, "", 0);
    } else if (e->kind == SRV_TC_ARGS && j->n_calls) {
        srv_buf_add(&j->calls[j->n_calls - 1].args, e->s, e->n);
    } else if (e->kind == SRV_TC_END && j->n_calls) {
        j->calls[j->n_calls - 1].broken = e->broken;
    }
}

int srv_calls_whole(const srv_job *j) {
    int n = 0;
    for (int i = 0; i < j->n_calls; i++) n += !j->calls[i].broken;
    return n;
}
