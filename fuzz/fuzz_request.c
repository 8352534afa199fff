// fuzz_request.c: libFuzzer target for the server's request parsing.
//
// The input is an HTTP request body. It is parsed as JSON the way the server does
// (json_loadb, duplicates rejected); an object goes through the three request parsers
// (chat completions, completions, Anthropic messages) with the Qwen2 vocabulary and a chat
// template the first byte picks: a built-in, or the vocabulary's own Jinja template (which sees
// chat_template_kwargs). Whatever a parser accepts must give a
// job with in-range token ids and sane limits. The raw bytes also go through the <think>
// splitter (whose two outputs must add up to the input, less stripped tags and white space)
// An output constraint a parser accepts (response_format, grammar, json_schema) must give a
// grammar the matcher can start.
// and the UTF-8-safe JSON string builder (which must always give a valid string).
// Vocabulary: $FT_SHARED/vocab/ggml-vocab-qwen2.gguf (default ../shared). Seeds:
// fuzz/seeds/fuzz_request/.
#include "../src/gguf/gguf.h"
#include "../src/server/srv_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tok_vocab *g_vocab;
static tok_chat *g_chats[TOK_CHAT_COUNT + 1]; // the built-ins, then the GGUF's own

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *shared = getenv("FT_SHARED");
    char path[1024];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-qwen2.gguf", shared ? shared : "../shared");
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    g_vocab = f ? tok_vocab_load(f, &err) : NULL;
    for (int t = 0; g_vocab && t <= TOK_CHAT_COUNT; t++) {
        g_chats[t] = tok_chat_load(f, t < TOK_CHAT_COUNT ? tok_chat_name((enum tok_chat_template)t) : NULL, &err);
        if (!g_chats[t]) break;
    }
    gguf_close(f);
    if (!g_vocab || !g_chats[TOK_CHAT_COUNT]) {
        fprintf(stderr, "fuzz_request: %s: %s\n", path, err.msg);
        abort();
    }
    return 0;
}

static void check_job(const srv_job *j) {
    int32_t nv = tok_n_tokens(g_vocab);
    for (size_t i = 0; i < j->prompt.n; i++)
        if (j->prompt.ids[i] < 0 || j->prompt.ids[i] >= nv) abort();
    if (j->n_logprobs > SRV_MAX_TOP_LOGPROBS || j->n_stops > SRV_MAX_STOPS) abort();
    if (!(j->sp.temp >= 0) || !(j->sp.top_p >= 0 && j->sp.top_p <= 1)) abort();
    if (j->grammar) { // an accepted output constraint is a grammar the matcher can start
        ft_grammar_matcher *m = ft_grammar_matcher_init(srv_grammar_get(j->grammar), NULL, NULL);
        if (ft_grammar_matcher_failed(m, NULL)) abort();
        ft_grammar_matcher_free(m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    srv_params p = srv_default_params();
    p.chat = g_chats[(size ? data[0] : 0) % (TOK_CHAT_COUNT + 1)];
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (json_is_object(body)) {
        bool (*parsers[])(const srv_params *, const tok_vocab *, json_t *, srv_job *, ft_err *) = {
            srv_openai_parse_chat, srv_openai_parse_completion, srv_anthropic_parse};
        for (size_t k = 0; k < sizeof(parsers) / sizeof(parsers[0]); k++) {
            srv_job *j = srv_job_new();
            ft_err err = {{0}};
            if (parsers[k](&p, g_vocab, body, j, &err))
                check_job(j);
            else if (!err.msg[0])
                abort(); // a refusal always says why
            srv_job_unref(j);
        }
        srv_job *j = srv_job_new(); // llama-server's /completion also takes the context size
        ft_err err = {{0}};
        if (srv_llama_parse_completion(&p, g_vocab, 4096, body, j, &err))
            check_job(j);
        else if (!err.msg[0])
            abort();
        srv_job_unref(j);
    }
    json_decref(body);

    srv_think t = {0};
    srv_buf c = {0}, r = {0};
    for (size_t i = 0; i < size; i += 7) // in pieces, as tokens arrive
        srv_think_feed(&t, (const char *)data + i, size - i < 7 ? size - i : 7, &c, &r);
    srv_think_flush(&t, &c, &r);
    if (c.n + r.n > size) abort();
    srv_buf_free(&c);
    srv_buf_free(&r);

    json_t *s = srv_json_str((const char *)data, size);
    if (!json_is_string(s)) abort();
    char *dump = json_dumps(s, JSON_ENCODE_ANY);
    if (!dump) abort();
    free(dump);
    json_decref(s);
    return 0;
}
