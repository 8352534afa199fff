// test_chat_tools.c: tools in chat templates (src/tokenizer/chat_load.c): conversations with
// tool definitions, assistant tool calls and tool results, rendered by ft's Jinja interpreter
// from the real template texts of llama.cpp's models/templates, against llama.cpp's own Jinja
// engine (node-llama-cpp); which tool-call format each template is told to have; the built-ins'
// refusal.
#include "oracle.h"
#include "fixtures.h"
#include "../src/tokenizer/tokenizer.h"
#include "../src/util/rng.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

// Pools the random conversations draw from. Texts include the formats' own markup, which must
// stay user text.
static const char *const g_texts[] = {
    "Hello", "What's the weather in Paris?", "", "  padded  ", "multi\nline", "ünïcödé 你好 🦙",
    "<tool_call>\n{\"name\": \"x\"}\n</tool_call>", "[TOOL_CALLS][]", "<think>hmm</think>answer",
    "{\"temperature\": 21, \"unit\": \"C\"}", "<|tool_calls_section_begin|>", "\"quoted\" and \\backslash",
};

static const char *const g_tools[] = {
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather in a "
    "city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\", "
    "\"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"C\", \"F\"]}}, \"required\": "
    "[\"location\"]}}}",
    "{\"type\": \"function\", \"function\": {\"name\": \"add\", \"description\": \"\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"number\"}}, \"required\": "
    "[\"a\", \"b\"]}}}",
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search the web\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"query\": {\"type\": \"string\"}, \"tags\": "
    "{\"type\": \"array\", \"items\": {\"type\": \"string\"}}, \"opts\": {\"type\": \"object\", \"properties\": "
    "{\"safe\": {\"type\": \"boolean\"}}}}}}}",
    "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"description\": \"The time\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {}}}}",
};

// Each call: a name and its arguments' JSON.
static const char *const g_calls[][2] = {
    {"get_weather", "{\"location\": \"Paris\"}"},
    {"get_weather", "{\"location\": \"São Paulo\", \"unit\": \"C\"}"},
    {"add", "{\"a\": 2, \"b\": 3.5}"},
    {"search", "{\"query\": \"<tool_call> \\\"x\\\"\", \"tags\": [\"a\", \"b\"], \"opts\": {\"safe\": true}}"},
    {"now", "{}"},
    {"search", "{\"query\": \"multi\\nline\", \"tags\": []}"},
};

// Mistral Nemo's template requires ids of 9 characters; some are not, which it refuses.
static const char *const g_ids[] = {"call00001", "aB3dE5gH7", "Xy9Zz8Ww7", "call_0123456789abcdef"};

typedef struct conv {
    tok_chat_msg m[24];
    size_t n;
    char *owned[24]; // tool_calls texts
    json_t *json;    // the same messages as the oracle gets them
    bool harmony;    // reasoning also as "thinking" (what ft passes gpt-oss's template)
} conv;

static void conv_free(conv *c) {
    for (size_t i = 0; i < c->n; i++)
        free(c->owned[i]);
    json_decref(c->json);
}

static void add_msg(conv *c, tok_chat_msg m) {
    json_t *o = json_pack("{s:s, s:s}", "role", m.role, "content", m.content);
    if (m.reasoning) json_object_set_new(o, "reasoning_content", json_string(m.reasoning));
    if (m.reasoning && c->harmony) json_object_set_new(o, "thinking", json_string(m.reasoning));
    if (m.name) json_object_set_new(o, "name", json_string(m.name));
    if (m.tool_call_id) json_object_set_new(o, "tool_call_id", json_string(m.tool_call_id));
    if (m.tool_calls) json_object_set_new(o, "tool_calls", json_loads(m.tool_calls, 0, NULL));
    json_array_append_new(c->json, o);
    c->m[c->n++] = m;
}

#define PICK(r, a) (a)[ft_rng_next(r) % FT_ARRAY_LEN(a)]

// A conversation: a system prompt or not, then turns of a user message and an assistant reply
// that may call tools (1 to 3 calls, with or without text and reasoning), followed by the tools'
// results and an answer; it may end anywhere (after tool results: the model's turn to go on).
static void random_conv(ft_rng *r, conv *c, bool object_args, bool harmony) {
    memset(c, 0, sizeof(*c));
    c->json = json_array();
    c->harmony = harmony;
    if (ft_rng_next(r) % 2) add_msg(c, (tok_chat_msg){.role = "system", .content = PICK(r, g_texts)});
    int turns = 1 + (int)(ft_rng_next(r) % 3);
    for (int t = 0; t < turns && c->n < 16; t++) {
        add_msg(c, (tok_chat_msg){.role = "user", .content = PICK(r, g_texts)});
        if (ft_rng_next(r) % 5 == 0) break;
        const char *reasoning = ft_rng_next(r) % 3 == 0 ? PICK(r, g_texts) : NULL;
        if (ft_rng_next(r) % 3) {
            int n_calls = 1 + (int)(ft_rng_next(r) % 3 == 0) + (int)(ft_rng_next(r) % 5 == 0);
            json_t *calls = json_array();
            int which[3];
            const char *ids[3];
            for (int k = 0; k < n_calls; k++) {
                which[k] = (int)(ft_rng_next(r) % FT_ARRAY_LEN(g_calls));
                ids[k] = ft_rng_next(r) % 8 ? g_ids[(t * 3 + k) % 3] : g_ids[3];
                json_t *args = object_args ? json_loads(g_calls[which[k]][1], 0, NULL) : json_string(g_calls[which[k]][1]);
                json_array_append_new(calls, json_pack("{s:s, s:{s:s, s:o}, s:s}", "type", "function", "function",
                                                       "name", g_calls[which[k]][0], "arguments", args, "id", ids[k]));
            }
            char *text = json_dumps(calls, JSON_COMPACT);
            json_decref(calls);
            c->owned[c->n] = text;
            // gpt-oss's template refuses text beside reasoning in a call's message
            const char *content = ft_rng_next(r) % 2 ? "" : PICK(r, g_texts);
            if (harmony && reasoning && ft_rng_next(r) % 2) content = "";
            add_msg(c, (tok_chat_msg){.role = "assistant", .content = content, .reasoning = reasoning, .tool_calls = text});
            if (ft_rng_next(r) % 6 == 0) break;
            for (int k = 0; k < n_calls; k++) {
                bool named = ft_rng_next(r) % 2;
                add_msg(c, (tok_chat_msg){.role = "tool", .content = PICK(r, g_texts), .tool_call_id = ids[k],
                                          .name = named ? g_calls[which[k]][0] : NULL});
            }
            if (ft_rng_next(r) % 3 == 0) break;
        }
        add_msg(c, (tok_chat_msg){.role = "assistant", .content = PICK(r, g_texts), .reasoning = reasoning});
    }
}

// Renders N random conversations with tools through ft's interpreter (the template loaded as a
// model's: tok_chat_load, tok_chat_apply) and through llama.cpp's Jinja engine: each renders the
// same text, or both refuse.
static void tools_against_jinja(const char *file, enum tok_tool_format want, bool want_object_args, uint64_t seed) {
    enum { N = 300 };
    const char *src = oracle_llama_src();
    if (!src || !oracle_node_available()) return;
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/templates/%s", src, file);
    ft_err err = {{0}};
    tok_chat *chat = tok_chat_load(NULL, path, &err);
    REQUIRE(chat && tok_chat_builtin(chat) < 0, "%s: %s", file, err.msg);
    CHECK(tok_chat_tool_format(chat) == want, "%s: format %s, want %s", file,
          tok_tool_format_name(tok_chat_tool_format(chat)), tok_tool_format_name(want));
    bool object_args = tok_chat_object_arguments(chat);
    CHECK(object_args == want_object_args, "%s: object arguments %d", file, object_args);
    static conv convs[N];
    static char *tools[N];
    static tok_chat_params ps[N];
    ft_rng r = ft_rng_init(seed);
    json_t *cases = json_array();
    for (int i = 0; i < N; i++) {
        random_conv(&r, &convs[i], object_args, tok_chat_harmony(chat));
        json_t *tl = json_array();
        int n_tools = (int)(ft_rng_next(&r) % 4); // 0: a conversation without tool definitions
        for (int k = 0; k < n_tools; k++)
            json_array_append_new(tl, json_loads(g_tools[(i + k) % FT_ARRAY_LEN(g_tools)], 0, NULL));
        tools[i] = n_tools ? json_dumps(tl, JSON_COMPACT) : NULL;
        ps[i] = tok_chat_default_params(NULL);
        ps[i].bos_text = "<s>";
        ps[i].eos_text = "</s>";
        ps[i].add_generation_prompt = ft_rng_next(&r) % 4 != 0;
        ps[i].enable_thinking = ft_rng_next(&r) % 2;
        json_t *c = json_pack("{s:O, s:b, s:s, s:s, s:b}", "messages", convs[i].json, "add_generation_prompt",
                              ps[i].add_generation_prompt, "bos_token", "<s>", "eos_token", "</s>", "enable_thinking",
                              ps[i].enable_thinking);
        if (n_tools) json_object_set(c, "tools", tl);
        json_decref(tl);
        json_array_append_new(cases, c);
    }
    char *jinja = fixture_read_file(path, NULL);
    REQUIRE(jinja, "cannot read %s", path);
    json_t *job = json_pack("{s:s, s:o}", "template", jinja, "cases", cases);
    free(jinja);
    // llama.cpp's own Jinja engine renders every case (tests/oracle/jinja_render.mjs)
    json_t *jobs = json_pack("[o]", job), *all = oracle_jinja_render(jobs), *res = json_array_get(all, 0);
    json_decref(jobs);
    REQUIRE(res);
    REQUIRE(json_is_array(res) && json_array_size(res) == N, "bad output from the Jinja engine");
    int n_diff = 0, n_rendered = 0, n_calls = 0;
    for (int i = 0; i < N; i++) {
        const char *want_text = json_string_value(json_object_get(json_array_get(res, (size_t)i), "text"));
        tok_chat_extra extra = {.tools = tools[i]};
        tok_chat_prompt out;
        ft_err rerr = {{0}};
        bool ok = tok_chat_apply(chat, convs[i].m, convs[i].n, ps[i], &extra, &out, &rerr);
        bool same = want_text ? ok && !strcmp(want_text, out.text) : !ok;
        if (!same && ++n_diff <= 3) {
            char *cs = json_dumps(convs[i].json, JSON_COMPACT);
            fprintf(stderr, "    %s conversation %d differs:\n      messages: %s\n      tools: %s\n      jinja: %s\n"
                            "      ft:    %s\n",
                    file, i, cs, tools[i] ? tools[i] : "-", want_text ? want_text : "(error)", ok ? out.text : rerr.msg);
            free(cs);
        }
        if (ok) tok_chat_prompt_free(&out);
        n_rendered += want_text != NULL;
        for (size_t k = 0; k < convs[i].n; k++)
            n_calls += want_text && convs[i].m[k].tool_calls;
        free(tools[i]);
        conv_free(&convs[i]);
    }
    json_decref(all);
    fprintf(stderr, "    %s: %d conversations with tools (%d rendered, holding %d assistant turns with calls; the "
                    "rest refused by both), %d differ\n",
            file, N, n_rendered, n_calls, n_diff);
    CHECK(n_diff == 0, "%s: %d conversations differ from llama.cpp's Jinja engine", file, n_diff);
    CHECK(n_rendered >= N / 2, "%s: only %d of %d conversations rendered", file, n_rendered, N);
    tok_chat_free(chat);
}

TEST(chat_tools_qwen3) { tools_against_jinja("Qwen-Qwen3-0.6B.jinja", TOK_TOOLS_HERMES, true, 101); }
TEST(chat_tools_qwen25) { tools_against_jinja("Qwen-Qwen2.5-7B-Instruct.jinja", TOK_TOOLS_HERMES, true, 102); }
TEST(chat_tools_qwen35) { tools_against_jinja("Qwen3.5-4B.jinja", TOK_TOOLS_QWEN3_CODER, true, 103); }
TEST(chat_tools_qwen3_coder) { tools_against_jinja("Qwen3-Coder.jinja", TOK_TOOLS_QWEN3_CODER, true, 104); }
TEST(chat_tools_gpt_oss) { tools_against_jinja("openai-gpt-oss-120b.jinja", TOK_TOOLS_HARMONY, true, 105); }
TEST(chat_tools_glm45) { tools_against_jinja("GLM-4.6.jinja", TOK_TOOLS_GLM45, true, 106); }
TEST(chat_tools_deepseek_r1) {
    tools_against_jinja("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", TOK_TOOLS_DEEPSEEK, true, 107);
}
TEST(chat_tools_deepseek_v31) { tools_against_jinja("deepseek-ai-DeepSeek-V3.1.jinja", TOK_TOOLS_DEEPSEEK, true, 108); }
TEST(chat_tools_kimi_k2) { tools_against_jinja("moonshotai-Kimi-K2.jinja", TOK_TOOLS_KIMI_K2, true, 109); }
TEST(chat_tools_kimi_k2_instruct) { tools_against_jinja("Kimi-K2-Instruct.jinja", TOK_TOOLS_KIMI_K2, true, 110); }
TEST(chat_tools_llama31) {
    tools_against_jinja("meta-llama-Llama-3.1-8B-Instruct.jinja", TOK_TOOLS_LLAMA3, true, 111);
}
TEST(chat_tools_llama33) {
    tools_against_jinja("meta-llama-Llama-3.3-70B-Instruct.jinja", TOK_TOOLS_LLAMA3, true, 112);
}
TEST(chat_tools_mistral_nemo) {
    tools_against_jinja("mistralai-Mistral-Nemo-Instruct-2407.jinja", TOK_TOOLS_MISTRAL, true, 113);
}
TEST(chat_tools_mistral_small) {
    tools_against_jinja("Mistral-Small-3.2-24B-Instruct-2506.jinja", TOK_TOOLS_MISTRAL_ARGS, true, 114);
}
TEST(chat_tools_gemma4) { tools_against_jinja("google-gemma-4-31B-it.jinja", TOK_TOOLS_NONE, true, 115); }

// The built-ins render no tools: a request with tools, a call or a tool result is refused, never
// rendered without them.
TEST(chat_tools_builtin_refuses) {
    ft_err err = {{0}};
    tok_chat *c = tok_chat_load(NULL, "qwen3", &err);
    REQUIRE(c, "%s", err.msg);
    CHECK(tok_chat_tool_format(c) == TOK_TOOLS_NONE && !tok_chat_object_arguments(c));
    tok_chat_params p = tok_chat_default_params(NULL);
    tok_chat_msg user = {.role = "user", .content = "hi"};
    tok_chat_extra extra = {.tools = "[]"};
    tok_chat_prompt out;
    CHECK(!tok_chat_apply(c, &user, 1, p, &extra, &out, &err) && strstr(err.msg, "renders no tools"), "%s", err.msg);
    tok_chat_msg calls[2] = {{.role = "user", .content = "hi"},
                             {.role = "assistant", .content = "", .tool_calls = "[]"}};
    CHECK(!tok_chat_apply(c, calls, 2, p, NULL, &out, &err) && strstr(err.msg, "no tool calls"), "%s", err.msg);
    tok_chat_msg result[2] = {{.role = "user", .content = "hi"}, {.role = "tool", .content = "x", .tool_call_id = "1"}};
    CHECK(!tok_chat_apply(c, result, 2, p, NULL, &out, &err) && strstr(err.msg, "no tool calls"), "%s", err.msg);
    CHECK(tok_chat_apply(c, &user, 1, p, NULL, &out, &err), "%s", err.msg);
    tok_chat_prompt_free(&out);
    tok_chat_free(c);
}

// The formats told from template texts, beside the real ones above: look-alike texts and none.
TEST(chat_tools_format_detect) {
    static const struct {
        const char *text;
        enum tok_tool_format want;
    } cases[] = {
        {"{{ messages }}", TOK_TOOLS_NONE},
        {"<tool_call>\n{{ tool_call | tojson }}\n</tool_call>", TOK_TOOLS_HERMES},
        {"<tool_call>\n<function={{ n }}>\n<parameter={{ k }}>", TOK_TOOLS_QWEN3_CODER},
        {"<|start|>assistant<|channel|>final<|message|>", TOK_TOOLS_HARMONY},
        {"<tool_call>{{ n }}<arg_key>k</arg_key><arg_value>v</arg_value>", TOK_TOOLS_GLM45},
        {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{{ n }}<｜tool▁sep｜>", TOK_TOOLS_DEEPSEEK},
        {"{% set dsml_token = '｜DSML｜' %}<｜tool▁calls▁begin｜><｜tool▁sep｜>", TOK_TOOLS_NONE},
        {"<|tool_calls_section_begin|><|tool_call_begin|>", TOK_TOOLS_KIMI_K2},
        {"[TOOL_CALLS][{{ calls }}]", TOK_TOOLS_MISTRAL},
        {"[TOOL_CALLS]{{ name }}[ARGS]{{ args }}", TOK_TOOLS_MISTRAL_ARGS},
        {"<|start_header_id|>{% if tool_calls %}{\"name\": x, \"parameters\": y}", TOK_TOOLS_LLAMA3},
        {"<|start_header_id|>user<|end_header_id|>", TOK_TOOLS_NONE},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        enum tok_tool_format got = tok_tool_format_detect(cases[i].text, strlen(cases[i].text));
        CHECK(got == cases[i].want, "case %zu: %s, want %s", i, tok_tool_format_name(got),
              tok_tool_format_name(cases[i].want));
    }
}
