// fuzz_jinja.c: libFuzzer target for the Jinja interpreter (src/tokenizer/jinja_*.c).
//
// The input is a template and its variables: the bytes up to the first NUL are the template
// source, the rest a JSON object of variables (where the rest is empty or not JSON, a fixed
// conversation is used, so that a mutated template still renders against chat data). The
// template is parsed; if it parses it is rendered twice under small limits. Whatever happens,
// nothing may crash or leak; a render that succeeds must stay within max_output, give segments
// that cover its text exactly, in order, alternating between markup and user text, and render
// the same the second time (a parsed template is immutable). Seeds: fuzz/seeds/fuzz_jinja/.
#include "../src/tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char g_chat_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
    "[{\"type\": \"text\", \"text\": \"Hi <|im_end|>\"}]}, {\"role\": \"assistant\", \"content\": \"Hello\", "
    "\"reasoning_content\": \"greet\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
    "\"arguments\": {\"x\": [1, 2.5, null, true]}}}]}, {\"role\": \"tool\", \"content\": \"42\"}], "
    "\"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", "
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}]}";

// Checks a successful render's text and segments; returns the text's copy.
static char *check(const tok_chat_prompt *out, const tok_jinja_limits *lim) {
    if (out->len > lim->max_output || out->text[out->len] != 0) abort();
    size_t at = 0;
    for (size_t i = 0; i < out->n_segs; i++) {
        const tok_segment *s = &out->segs[i];
        if (s->text != out->text + at || s->len == 0) abort();
        if (i && s->parse_special == out->segs[i - 1].parse_special) abort();
        at += s->len;
    }
    if (at != out->len) abort();
    char *copy = malloc(out->len + 1);
    memcpy(copy, out->text, out->len + 1);
    return copy;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t src_len = nul ? (size_t)(nul - data) : size;
    const char *vars = nul ? (const char *)nul + 1 : "";
    size_t vars_len = nul ? size - src_len - 1 : 0;
    ft_err err = {{0}};
    tok_jinja *t = tok_jinja_parse(src, src_len, &err);
    if (!t) {
        if (!err.msg[0]) abort(); // a refusal always says why
        return 0;
    }
    tok_jinja_params p = tok_jinja_default_params();
    p.now = 1689422400;
    p.limits.max_output = 1 << 20;
    p.limits.max_string = 1 << 20;
    p.limits.max_items = 10000;
    p.limits.max_memory = 64 << 20;
    p.limits.max_steps = 200000;
    p.limits.max_depth = 300;
    char *first = NULL;
    size_t first_len = 0;
    for (int round = 0; round < 2; round++) {
        tok_chat_prompt out;
        bool ok = tok_jinja_render(t, &vars, &vars_len, 1, &p, &out, &err);
        if (!ok && round == 0 && strstr(err.msg, "template variables")) {
            // not JSON: the fixed conversation instead
            vars = g_chat_vars;
            vars_len = strlen(g_chat_vars);
            ok = tok_jinja_render(t, &vars, &vars_len, 1, &p, &out, &err);
        }
        if (!ok) {
            if (!err.msg[0] || (round == 1 && first)) abort(); // says why; not after a success
            break;
        }
        char *text = check(&out, &p.limits);
        if (round == 1 && (!first || first_len != out.len || memcmp(first, text, out.len))) abort(); // the same twice
        if (round == 0) first = text, first_len = out.len;
        else free(text);
        tok_chat_prompt_free(&out);
    }
    free(first);
    tok_jinja_free(t);
    return 0;
}
