// test_tool_call.c: tool calls parsed out of replies (src/server/tool_call.c) per format, on
// replies written as each model family writes them: whole, cut in two at every byte, and a byte
// at a time (all must give the same events); malformed and cut-short replies; and replies drawn
// at random from the grammar that forces a call (tool_grammar.c), each parsed back into calls
// whose arguments are valid JSON that validates against the tool's schema.
#include "test.h"
#include "json_check.h"
#include "../src/server/tool_call.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

// (the cases' table leaves its trailing fields out where they are false / NULL)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static const char g_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"location\": {\"type\": \"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"C\", \"F\"]}}, "
    "\"required\": [\"location\"], \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"number\"}}, \"required\": [\"a\", \"b\"], "
    "\"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"search\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"query\": {\"type\": \"string\"}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": "
    "\"string\"}}, \"safe\": {\"type\": \"boolean\"}}, \"required\": [\"query\"], \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {}, \"additionalProperties\": false}}}]";

// What a reply parsed into: its answer text and calls, as the events said.
typedef struct parsed {
    srv_buf text, reasoning;
    int n_calls;
    char name[64][64], id[64][64];
    srv_buf args[64];
    bool ended[64], broken[64];
    int order_errors; // events out of order (args or end of a call not started, ...)
} parsed;

static void on_event(void *ctx, const srv_tc_event *e) {
    parsed *p = ctx;
    switch (e->kind) {
    case SRV_TC_TEXT:
        if (!e->n) p->order_errors++;
        if (p->n_calls && !p->ended[p->n_calls - 1]) p->order_errors++;
        srv_buf_add(&p->text, e->s, e->n);
        break;
    case SRV_TC_START:
        if (e->index != p->n_calls || p->n_calls == 64 || (p->n_calls && !p->ended[p->n_calls - 1])) {
            p->order_errors++;
            break;
        }
        snprintf(p->name[p->n_calls], 64, "%s", e->name);
        snprintf(p->id[p->n_calls], 64, "%s", e->id);
        srv_buf_add(&p->args[p->n_calls], "", 0);
        p->n_calls++;
        break;
    case SRV_TC_ARGS:
        if (e->index != p->n_calls - 1 || p->ended[e->index] || !e->n) {
            p->order_errors++;
            break;
        }
        srv_buf_add(&p->args[e->index], e->s, e->n);
        break;
    case SRV_TC_END:
        if (e->index != p->n_calls - 1 || p->ended[e->index]) {
            p->order_errors++;
            break;
        }
        p->ended[e->index] = true;
        p->broken[e->index] = e->broken;
        break;
    }
}

static void parsed_free(parsed *p) {
    srv_buf_free(&p->text);
    srv_buf_free(&p->reasoning);
    for (int i = 0; i < 64; i++) srv_buf_free(&p->args[i]);
}

// Parses reply in pieces cut at the given offsets (cuts[0..n_cuts), increasing).
static void parse(enum tok_tool_format f, json_t *tools, const char *reply, size_t n, const size_t *cuts, int n_cuts,
                  parsed *out) {
    memset(out, 0, sizeof(*out));
    srv_buf_add(&out->text, "", 0);
    srv_tools *p = srv_tools_init(f, tools, "call_", 7);
    srv_think t = {0};
    t.state = 2; // the answer (no reasoning): these replies open with their text
    if (f == TOK_TOOLS_HARMONY) {
        t.harmony = true;
        tok_harmony_init(&t.h, false);
    }
    size_t at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        srv_tools_feed_reply(p, &t, reply + at, to - at, &out->reasoning, on_event, out);
        at = to;
    }
    srv_tools_flush_reply(p, &t, &out->reasoning, on_event, out);
    srv_tools_free(p);
}

// Whether two parses say the same.
static bool same(const parsed *a, const parsed *b) {
    if (a->text.n != b->text.n || memcmp(a->text.p, b->text.p, a->text.n)) return false;
    if (a->reasoning.n != b->reasoning.n || (a->reasoning.n && memcmp(a->reasoning.p, b->reasoning.p, a->reasoning.n)))
        return false;
    if (a->n_calls != b->n_calls || a->order_errors || b->order_errors) return false;
    for (int i = 0; i < a->n_calls; i++)
        if (strcmp(a->name[i], b->name[i]) || strcmp(a->id[i], b->id[i]) || a->args[i].n != b->args[i].n ||
            memcmp(a->args[i].p, b->args[i].p, a->args[i].n) || a->broken[i] != b->broken[i] ||
            a->ended[i] != b->ended[i])
            return false;
    return true;
}

typedef struct tc_case {
    enum tok_tool_format f;
    const char *reply;
    const char *text;       // the answer text
    const char *calls[3][2]; // name and arguments (JSON, compared as values; a broken call: its bytes)
    int n_calls;
    bool broken;            // the last call is broken
    const char *reasoning;  // harmony: the analysis channel
} tc_case;

static const tc_case g_cases[] = {
    // Hermes / Qwen2.5 / Qwen3
    {TOK_TOOLS_HERMES,
     "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"C\"}}\n"
     "</tool_call>",
     "I'll check.\n", {{"get_weather", "{\"location\": \"Paris\", \"unit\": \"C\"}"}}, 1},
    {TOK_TOOLS_HERMES,
     "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": -12, \"b\": 3.5e2}}\n</tool_call>\n<tool_call>\n"
     "{\"name\": \"search\", \"arguments\": {\"query\": \"caf\\u00e9 \\\"</tool_call>\\\"\", \"tags\": [], \"safe\": "
     "true}}\n</tool_call>\n",
     "", {{"add", "{\"a\": -12, \"b\": 3.5e2}"}, {"search", "{\"query\": \"café \\\"</tool_call>\\\"\", \"tags\": [], \"safe\": true}"}}, 2},
    {TOK_TOOLS_HERMES, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call> done", " done", {{"now", "{}"}}, 1},
    // an unknown tool, a header off the format, an opener that is not one: answer text
    {TOK_TOOLS_HERMES, "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>", {{0}}, 0},
    {TOK_TOOLS_HERMES, "<tool_call>\n{\"arguments\": {}, \"name\": \"now\"}</tool_call>",
     "<tool_call>\n{\"arguments\": {}, \"name\": \"now\"}</tool_call>", {{0}}, 0},
    {TOK_TOOLS_HERMES, "a <tool_cal b <tool_call", "a <tool_cal b <tool_call", {{0}}, 0},
    // arguments that stop being JSON: the call ends broken, the rest is text
    {TOK_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": Paris}}\n</tool_call>",
     "Paris}}\n</tool_call>", {{"get_weather", "{\"location\": "}}, 1, true},
    // cut short inside the arguments
    {TOK_TOOLS_HERMES, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1", "", {{"add", "{\"a\": 1"}}, 1, true},
    {TOK_TOOLS_HERMES, "Sure <tool_call>\n{\"na", "Sure <tool_call>\n{\"na", {{0}}, 0},
    // the closing markup missing at the end: the arguments are whole, so it is a call
    {TOK_TOOLS_HERMES, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}", "", {{"now", "{}"}}, 1},
    // Qwen3-Coder / Qwen3.5
    {TOK_TOOLS_QWEN3_CODER,
     "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=location>\nSão Paulo\n</parameter>\n"
     "<parameter=unit>\nC\n</parameter>\n</function>\n</tool_call>",
     "Let me look.\n", {{"get_weather", "{\"location\": \"São Paulo\", \"unit\": \"C\"}"}}, 1},
    {TOK_TOOLS_QWEN3_CODER,
     "<tool_call>\n<function=search>\n<parameter=query>\nmulti\nline \"q\"\n</parameter>\n<parameter=tags>\n[\"a\", "
     "\"b\"]\n</parameter>\n<parameter=safe>\nfalse\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
     "<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n0.5\n</parameter>\n</function>\n</tool_call>",
     "", {{"search", "{\"query\": \"multi\\nline \\\"q\\\"\", \"tags\": [\"a\", \"b\"], \"safe\": false}"},
          {"add", "{\"a\": 2, \"b\": 0.5}"}}, 2},
    {TOK_TOOLS_QWEN3_CODER, "<tool_call>\n<function=now>\n</function>\n</tool_call>", "", {{"now", "{}"}}, 1},
    {TOK_TOOLS_QWEN3_CODER, "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<oops>",
     "\n<oops>", {{"add", "{\"a\": 2"}}, 1, true},
    // GLM-4.5 / 4.6
    {TOK_TOOLS_GLM45,
     "\n<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
     "\n", {{"get_weather", "{\"location\": \"Paris\"}"}}, 1},
    {TOK_TOOLS_GLM45,
     "<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>7</arg_value>\n<arg_key>b</arg_key>\n<arg_value>1.25</arg_value>\n"
     "</tool_call><tool_call>search\n<arg_key>query</arg_key>\n<arg_value>42</arg_value>\n<arg_key>tags</arg_key>\n"
     "<arg_value>[\"x\"]</arg_value>\n</tool_call>",
     "", {{"add", "{\"a\": 7, \"b\": 1.25}"}, {"search", "{\"query\": \"42\", \"tags\": [\"x\"]}"}}, 2},
    {TOK_TOOLS_GLM45, "<tool_call>now</tool_call>", "", {{"now", "{}"}}, 1},
    {TOK_TOOLS_GLM45, "<tool_call>nope\n<arg_key>a</arg_key>", "<tool_call>nope\n<arg_key>a</arg_key>", {{0}}, 0},
    // DeepSeek V3 / R1, and V3.1's way
    {TOK_TOOLS_DEEPSEEK,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Paris\"}\n"
     "```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": 1, \"b\": 2}\n```"
     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "", {{"get_weather", "{\"location\": \"Paris\"}"}, {"add", "{\"a\": 1, \"b\": 2}"}}, 2},
    {TOK_TOOLS_DEEPSEEK,
     "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Oslo\"}"
     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "Checking.", {{"get_weather", "{\"location\": \"Oslo\"}"}}, 1},
    {TOK_TOOLS_DEEPSEEK, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\"",
     "", {{"get_weather", "{\"location\""}}, 1, true},
    // Kimi-K2
    {TOK_TOOLS_KIMI_K2,
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
     "{\"location\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.add:1<|tool_call_argument_begin|>"
     "{\"a\":1,\"b\":2}<|tool_call_end|><|tool_calls_section_end|>",
     "", {{"get_weather", "{\"location\": \"Paris\"}"}, {"add", "{\"a\": 1, \"b\": 2}"}}, 2},
    {TOK_TOOLS_KIMI_K2, "ok <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather<|tool_call_end|>",
     "ok <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather<|tool_call_end|>", {{0}}, 0},
    // Mistral Nemo, and the [ARGS] way (Mistral Small 3.2, Devstral)
    {TOK_TOOLS_MISTRAL,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": \"abcDEF123\"}, "
     "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
     "", {{"get_weather", "{\"location\": \"Paris\"}"}, {"add", "{\"a\": 1, \"b\": 2}"}}, 2},
    {TOK_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": {}}]", "", {{"now", "{}"}}, 1},
    {TOK_TOOLS_MISTRAL_ARGS,
     "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]add[CALL_ID]x1Y2z3W4v[ARGS]{\"a\": 1, \"b\": 2}",
     "", {{"get_weather", "{\"location\": \"Paris\"}"}, {"add", "{\"a\": 1, \"b\": 2}"}}, 2},
    {TOK_TOOLS_MISTRAL_ARGS, "Hello [TOOL_CALLS]now[ARGS]{} bye", "Hello  bye", {{"now", "{}"}}, 1},
    // Llama 3.x: the whole reply
    {TOK_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}",
     "", {{"get_weather", "{\"location\": \"Paris\"}"}}, 1},
    {TOK_TOOLS_LLAMA3, "<|python_tag|>{\"type\": \"function\", \"name\": \"now\", \"parameters\": {}}\n", "", {{"now", "{}"}}, 1},
    {TOK_TOOLS_LLAMA3, "{\"answer\": 42}", "{\"answer\": 42}", {{0}}, 0},
    {TOK_TOOLS_LLAMA3, "The weather {\"name\": \"now\", \"parameters\": {}}",
     "The weather {\"name\": \"now\", \"parameters\": {}}", {{0}}, 0},
    {TOK_TOOLS_LLAMA3, "{\"name\": \"now\", \"parameters\": {}} and more", " and more", {{"now", "{}"}}, 1},
    // gpt-oss: a commentary message to functions.NAME
    {TOK_TOOLS_HARMONY,
     "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Paris\"}",
     "", {{"get_weather", "{\"location\": \"Paris\"}"}}, 1, false, "Need weather."},
    {TOK_TOOLS_HARMONY,
     " to=functions.add<|channel|>commentary json<|message|>{\"a\": 1, \"b\": 2}<|end|><|start|>assistant"
     "<|channel|>final<|message|>Done.",
     "Done.", {{"add", "{\"a\": 1, \"b\": 2}"}}, 1},
    {TOK_TOOLS_HARMONY, "<|channel|>commentary to=browser.search<|message|>{\"q\": 1}<|end|>", "", {{0}}, 0},
    {TOK_TOOLS_HARMONY, "<|channel|>commentary to=functions.add<|message|>{\"a\": 1,", "", {{"add", "{\"a\": 1,"}}, 1, true},
};

// The case parsed whole says what it should; cut anywhere, and a byte at a time, it says the
// same.
TEST(tool_call_formats_however_cut) {
    json_t *tools = json_loads(g_tools, 0, NULL);
    REQUIRE(tools);
    for (size_t c = 0; c < FT_ARRAY_LEN(g_cases); c++) {
        const tc_case *k = &g_cases[c];
        parsed whole;
        parse(k->f, tools, k->reply, strlen(k->reply), NULL, 0, &whole);
        const char *fmt = tok_tool_format_name(k->f);
        CHECK(whole.order_errors == 0, "%s case %zu: events out of order", fmt, c);
        CHECK(strlen(k->text) == whole.text.n && !memcmp(whole.text.p, k->text, whole.text.n),
              "%s case %zu: text '%.*s', want '%s'", fmt, c, (int)whole.text.n, whole.text.p, k->text);
        if (k->reasoning)
            CHECK(whole.reasoning.n == strlen(k->reasoning) && !memcmp(whole.reasoning.p, k->reasoning, whole.reasoning.n),
                  "%s case %zu: reasoning", fmt, c);
        CHECK(whole.n_calls == k->n_calls, "%s case %zu: %d calls, want %d", fmt, c, whole.n_calls, k->n_calls);
        for (int i = 0; i < whole.n_calls && i < k->n_calls; i++) {
            bool brk = k->broken && i == k->n_calls - 1;
            CHECK(!strcmp(whole.name[i], k->calls[i][0]) && whole.ended[i] && whole.broken[i] == brk,
                  "%s case %zu call %d: %s ended %d broken %d", fmt, c, i, whole.name[i], whole.ended[i], whole.broken[i]);
            if (brk) {
                CHECK(whole.args[i].n == strlen(k->calls[i][1]) && !memcmp(whole.args[i].p, k->calls[i][1], whole.args[i].n),
                      "%s case %zu call %d: args '%.*s'", fmt, c, i, (int)whole.args[i].n, whole.args[i].p);
            } else {
                json_t *got = json_loadb(whole.args[i].p, whole.args[i].n, 0, NULL), *want = json_loads(k->calls[i][1], 0, NULL);
                CHECK(got && want && json_equal(got, want), "%s case %zu call %d: args '%.*s', want %s", fmt, c, i,
                      (int)whole.args[i].n, whole.args[i].p, k->calls[i][1]);
                json_decref(got);
                json_decref(want);
            }
            for (int q = 0; q < i; q++) CHECK(strcmp(whole.id[q], whole.id[i]), "%s case %zu: ids repeat", fmt, c);
            if (k->f == TOK_TOOLS_MISTRAL || k->f == TOK_TOOLS_MISTRAL_ARGS)
                CHECK(strlen(whole.id[i]) == 9, "%s: id '%s' (Mistral's templates take 9 characters)", fmt, whole.id[i]);
            else if (k->f == TOK_TOOLS_KIMI_K2) {
                char want_id[96];
                snprintf(want_id, sizeof(want_id), "functions.%s:%d", k->calls[i][0], i);
                CHECK(!strcmp(whole.id[i], want_id), "%s: id '%s'", fmt, whole.id[i]);
            } else
                CHECK(!strncmp(whole.id[i], "call_", 5) && strlen(whole.id[i]) == 29, "%s: id '%s'", fmt, whole.id[i]);
        }
        size_t n = strlen(k->reply);
        size_t *cuts = malloc((n + 1) * sizeof(size_t));
        for (size_t at = 1; at < n; at++) {
            parsed two;
            parse(k->f, tools, k->reply, n, &at, 1, &two);
            CHECK(same(&whole, &two), "%s case %zu: cut at %zu parses otherwise", fmt, c, at);
            parsed_free(&two);
        }
        for (size_t at = 0; at + 1 < n; at++) cuts[at] = at + 1;
        parsed bytes;
        parse(k->f, tools, k->reply, n, cuts, n ? (int)n - 1 : 0, &bytes);
        CHECK(same(&whole, &bytes), "%s case %zu: a byte at a time parses otherwise", fmt, c);
        parsed_free(&bytes);
        free(cuts);
        parsed_free(&whole);
    }
    json_decref(tools);
}

// Draws a reply from grammar g at random: each byte among those it allows (structural bytes
// preferred as the reply grows, so it ends), stopping where it may end.
static bool draw(const ft_grammar *g, ft_rng *r, srv_buf *out) {
    ft_grammar_matcher *m = ft_grammar_matcher_init(g, NULL, NULL);
    static const char closing[] = "\"}]<\n,:0123456789|>";
    bool ok = false;
    for (int len = 0; len < 20000; len++) {
        if (ft_grammar_matcher_done(m) || (ft_grammar_matcher_accepting(m) && ft_rng_next(r) % 4 == 0)) {
            ok = true;
            break;
        }
        uint8_t allowed[256];
        int n = 0, n_close = 0;
        uint8_t close[32];
        for (int b = 0; b < 256; b++) {
            uint8_t c = (uint8_t)b;
            if (!ft_grammar_matcher_allows_bytes(m, &c, 1)) continue;
            allowed[n++] = c;
            if (c && strchr(closing, c)) close[n_close++] = c;
        }
        if (!n) break;
        uint8_t c = len > 24 && n_close && ft_rng_next(r) % 8 ? close[ft_rng_next(r) % (uint64_t)n_close]
                                                              : allowed[ft_rng_next(r) % (uint64_t)n];
        ft_grammar_matcher_feed(m, &c, 1);
        srv_buf_add(out, (char *)&c, 1);
    }
    ft_grammar_matcher_free(m);
    srv_buf_add(out, "", 0); // (NUL-terminated, also when empty)
    return ok;
}

// Every format's forcing grammar writes calls its parser reads back: 60 replies drawn from each
// (parallel calls allowed), fed in random pieces; every call ends whole, with arguments that
// are JSON valid against its tool's schema.
TEST(tool_call_grammar_round_trip) {
    json_t *tools = json_loads(g_tools, 0, NULL);
    REQUIRE(tools);
    ft_rng r = ft_rng_init(2024);
    for (int f = TOK_TOOLS_HERMES; f < TOK_TOOLS_COUNT; f++) {
        ft_err err = {{0}};
        ft_grammar *g = srv_tools_grammar((enum tok_tool_format)f, tools, NULL, true, false, &err);
        REQUIRE(g, "%s: %s", tok_tool_format_name((enum tok_tool_format)f), err.msg);
        int n_calls = 0;
        for (int i = 0; i < 60; i++) {
            srv_buf reply = {0};
            REQUIRE(draw(g, &r, &reply), "%s: a draw did not end", tok_tool_format_name((enum tok_tool_format)f));
            size_t cuts[8];
            int n_cuts = 0;
            for (int k = 0; k < 8 && reply.n > 1; k++) {
                size_t at = 1 + ft_rng_next(&r) % (reply.n - 1);
                if (!n_cuts || at > cuts[n_cuts - 1]) cuts[n_cuts++] = at;
            }
            parsed p;
            parse((enum tok_tool_format)f, tools, reply.p, reply.n, cuts, n_cuts, &p);
            bool ok = p.n_calls >= 1 && p.order_errors == 0;
            for (int k = 0; k < p.n_calls && ok; k++) {
                json_t *args = json_loadb(p.args[k].p, p.args[k].n, JSON_ALLOW_NUL, NULL);
                json_t *schema = NULL;
                size_t ti;
                json_t *t;
                json_array_foreach(tools, ti, t) {
                    json_t *fn = json_object_get(t, "function");
                    if (!strcmp(json_string_value(json_object_get(fn, "name")), p.name[k]))
                        schema = json_object_get(fn, "parameters");
                }
                ok = p.ended[k] && !p.broken[k] && args && schema && json_check(schema, schema, args);
                if (!ok) fprintf(stderr, "    call %d (%s): '%.*s'\n", k, p.name[k], (int)p.args[k].n, p.args[k].p);
                json_decref(args);
            }
            for (size_t q = 0; q < p.text.n && ok; q++) ok = p.text.p[q] == '\n';
            CHECK(ok, "%s: reply %d parses into %d calls, text '%.*s': %s", tok_tool_format_name((enum tok_tool_format)f),
                  i, p.n_calls, (int)p.text.n, p.text.p, reply.p);
            n_calls += p.n_calls;
            parsed_free(&p);
            srv_buf_free(&reply);
        }
        fprintf(stderr, "    %s: 60 replies, %d calls\n", tok_tool_format_name((enum tok_tool_format)f), n_calls);
        ft_grammar_free(g);
    }
    // a named tool only, and its refusals
    ft_err err = {{0}};
    ft_grammar *g = srv_tools_grammar(TOK_TOOLS_HERMES, tools, "add", false, false, &err);
    REQUIRE(g, "%s", err.msg);
    ft_grammar_matcher *m = ft_grammar_matcher_init(g, NULL, NULL);
    static const char want[] = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
    static const char other[] = "<tool_call>\n{\"name\": \"now\"";
    CHECK(ft_grammar_matcher_allows_bytes(m, want, strlen(want)) && !ft_grammar_matcher_allows_bytes(m, other, strlen(other)));
    ft_grammar_matcher_free(m);
    ft_grammar_free(g);
    CHECK(!srv_tools_grammar(TOK_TOOLS_HERMES, tools, "nope", false, false, &err) && strstr(err.msg, "nope"), "%s", err.msg);
    CHECK(!srv_tools_grammar(TOK_TOOLS_NONE, tools, NULL, false, false, &err));
    json_t *bad = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                             "\"object\", \"properties\": {\"x\": {\"type\": \"string\", \"pattern\": \"^a\"}}}}}]",
                             0, NULL);
    CHECK(!srv_tools_grammar(TOK_TOOLS_HERMES, bad, NULL, false, false, &err) && strstr(err.msg, "tools[0] ('f')"),
          "%s", err.msg);
    ft_grammar *lenient = srv_tools_grammar(TOK_TOOLS_HERMES, bad, NULL, false, true, &err);
    CHECK(lenient, "%s", err.msg);
    ft_grammar_free(lenient);
    json_decref(bad);
    json_decref(tools);
}
