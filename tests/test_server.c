// test_server.c: drives a real `ft serve` over loopback with curl (and, where node_modules
// has them, the official openai and @anthropic-ai/sdk clients: tests/server/*.mjs).
//
// Each test starts its own server on a free port (--port 0 --ready-file) with a small
// synthetic model written by `ft synth`, and stops it with SIGTERM, which must exit 0.
#include "fixtures.h"
#include "json_check.h"
#include "oracle.h"
#include "../src/backend/backend.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct server {
    pid_t pid;
    int port;
    char log[512];
} server;

// The server tests' model (written once per run; "" when ft synth failed, which is recorded).
static const char *model_path(void) {
    const char *path = fixture_cli_model("server-model.gguf", "--name srv-test");
    return path ? path : "";
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// The open-file limit of the next server started (0: inherited).
static int g_server_nofile;
// The next server started renders the GGUF's own chat template (no --chat-template chatml).
static bool g_server_own_template;

// Starts `ft serve` on a model with arguments (a space-separated list, no quoting). Returns
// false if it did not come up within 20 s.
static bool server_start_on(server *s, const char *model, const char *extra) {
    static int n_started;
    memset(s, 0, sizeof(*s));
    char ready[512];
    snprintf(ready, sizeof(ready), "%s", test_path("server-ready"));
    snprintf(s->log, sizeof(s->log), "%s/server-%d.log", test_tmpdir(), n_started++);
    unlink(ready);
    if (!model || !model[0]) return false;
    char args[2048];
    snprintf(args, sizeof(args), "serve -m %s --port 0 --ready-file %s -t 1 %s", model, ready, extra ? extra : "");
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)test_ft_bin();
    for (char *tok = strtok(args, " "); tok && argc < 63; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    fflush(NULL); // else the child's freopen writes the suite's buffered output a second time
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        if (!freopen(s->log, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(127);
        struct rlimit rl = {(rlim_t)g_server_nofile, (rlim_t)g_server_nofile};
        if (g_server_nofile && setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(127);
        execv(argv[0], argv);
        _exit(127);
    }
    s->pid = pid;
    for (int i = 0; i < 400; i++) {
        FILE *f = fopen(ready, "r");
        if (f) {
            int ok = fscanf(f, "%d", &s->port) == 1;
            fclose(f);
            if (ok && s->port > 0) return true;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            return false;
        }
        sleep_ms(50);
    }
    return false;
}

// Starts `ft serve` on the server tests' model with extra arguments, and the chatml template
// unless g_server_own_template.
static bool server_start(server *s, const char *extra) {
    char args[1536];
    snprintf(args, sizeof(args), "%s %s", g_server_own_template ? "" : "--chat-template chatml", extra ? extra : "");
    return server_start_on(s, model_path(), args);
}

// SIGTERM; returns the exit status (-1: killed or did not stop within 10 s).
static int server_stop(server *s) {
    if (!s->pid) return -1;
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            s->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        sleep_ms(50);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
    return -1;
}

// curl: POST body (NULL: GET) to path; writes the body into out and returns the HTTP status.
static int http(const server *s, const char *method, const char *path, const char *body, const char *headers,
                char *out, size_t cap) {
    char bodyfile[512], cmd[2048];
    snprintf(bodyfile, sizeof(bodyfile), "%s", test_path("server-body"));
    if (body) {
        FILE *f = fopen(bodyfile, "wb");
        if (!f) return -1;
        fwrite(body, 1, strlen(body), f);
        fclose(f);
    }
    snprintf(cmd, sizeof(cmd),
             "curl -sS -N -m 30 -X %s %s %s%s%s -w '\\n%%{http_code}' http://127.0.0.1:%d%s", method,
             headers ? headers : "", body ? "-H 'Content-Type: application/json' --data-binary @" : "",
             body ? bodyfile : "", "", s->port, path);
    static char buf[1 << 20];
    if (test_run(cmd, buf, sizeof(buf)) != 0) return -1;
    char *nl = strrchr(buf, '\n');
    if (!nl) return -1;
    int code = atoi(nl + 1);
    *nl = 0;
    if (out && cap) {
        size_t l = strlen(buf) < cap - 1 ? strlen(buf) : cap - 1;
        memcpy(out, buf, l);
        out[l] = 0;
    }
    return code;
}

static json_t *get_json(const server *s, const char *path) {
    static char buf[1 << 16];
    if (http(s, "GET", path, NULL, NULL, buf, sizeof(buf)) != 200) return NULL;
    return json_loads(buf, JSON_ALLOW_NUL, NULL);
}

static long stat_int(const server *s, const char *a, const char *b) {
    json_t *st = get_json(s, "/v1/stats");
    json_t *x = json_object_get(st, a);
    if (b) x = json_object_get(x, b);
    long v = json_is_integer(x) ? (long)json_integer_value(x) : -1;
    json_decref(st);
    return v;
}

static bool have_curl(void) {
    return test_run("curl --version >/dev/null 2>&1", NULL, 0) == 0;
}

#define SERVER_OR_SKIP(s, extra)                                                                             \
    if (!have_curl()) {                                                                                      \
        test_skip("curl is not installed (scripts/install-deps.sh)");                                        \
        return;                                                                                              \
    }                                                                                                        \
    server s;                                                                                                \
    REQUIRE(server_start(&s, extra), "ft serve did not start (log: %s)", s.log);

// ---------------------------------------------------------------------------------------------

TEST(server_routes) {
    SERVER_OR_SKIP(s, NULL);
    static char out[1 << 16];
    CHECK(http(&s, "GET", "/health", NULL, NULL, out, sizeof(out)) == 200);
    json_t *m = get_json(&s, "/v1/models");
    CHECK(m &&
          !strcmp(json_string_value(json_object_get(json_array_get(json_object_get(m, "data"), 0), "id")),
                  "srv-test"));
    json_decref(m);
    // tokenize / detokenize round trip
    CHECK(http(&s, "POST", "/tokenize", "{\"content\":\"Hello world\"}", NULL, out, sizeof(out)) == 200, "%s",
          out);
    json_t *t = json_loads(out, JSON_ALLOW_NUL, NULL);
    json_t *toks = json_object_get(t, "tokens");
    CHECK(json_array_size(toks) >= 2);
    char *dump = json_dumps(toks, JSON_COMPACT);
    char body[4096];
    snprintf(body, sizeof(body), "{\"tokens\":%s}", dump);
    free(dump);
    json_decref(t);
    CHECK(http(&s, "POST", "/detokenize", body, NULL, out, sizeof(out)) == 200);
    t = json_loads(out, JSON_ALLOW_NUL, NULL);
    CHECK(t && !strcmp(json_string_value(json_object_get(t, "content")), "Hello world"), "%s", out);
    json_decref(t);
    CHECK(http(&s, "POST", "/tokenize", "{\"content\":\"Hi\",\"with_pieces\":true}", NULL, out,
               sizeof(out)) == 200);
    CHECK(strstr(out, "\"piece\"") != NULL, "%s", out);
    // non-streaming responses of the three APIs
    CHECK(http(&s, "POST", "/v1/chat/completions",
               "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"system\",\"content\":\"Be "
               "brief.\"},{\"role\":\"user\","
               "\"content\":\"Hello\"}],\"max_tokens\":5,\"temperature\":0,\"logprobs\":true,\"top_"
               "logprobs\":3}",
               NULL, out, sizeof(out)) == 200,
          "%s", out);
    json_t *r = json_loads(out, JSON_ALLOW_NUL, NULL);
    json_t *ch = json_array_get(json_object_get(r, "choices"), 0);
    CHECK(json_is_string(json_object_get(json_object_get(ch, "message"), "content")), "%s", out);
    CHECK(json_integer_value(json_object_get(json_object_get(r, "usage"), "completion_tokens")) <= 5);
    json_t *lp = json_object_get(json_object_get(ch, "logprobs"), "content");
    CHECK(json_array_size(lp) ==
          (size_t)json_integer_value(json_object_get(json_object_get(r, "usage"), "completion_tokens")));
    CHECK(json_array_size(json_object_get(json_array_get(lp, 0), "top_logprobs")) == 3);
    json_decref(r);
    CHECK(http(&s, "POST", "/v1/messages",
               "{\"model\":\"claude\",\"system\":\"Be "
               "brief.\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
               "\"text\",\"text\":\"Hello\"}]}],\"max_tokens\":5}",
               NULL, out, sizeof(out)) == 200,
          "%s", out);
    r = json_loads(out, JSON_ALLOW_NUL, NULL);
    CHECK(!strcmp(json_string_value(json_object_get(r, "type")), "message"), "%s", out);
    CHECK(json_integer_value(json_object_get(json_object_get(r, "usage"), "output_tokens")) <= 5);
    json_decref(r);
    // thinking turned off, and an assistant turn carrying a thinking block (as Anthropic clients
    // send back), are accepted
    CHECK(http(&s, "POST", "/v1/messages",
               "{\"model\":\"claude\",\"thinking\":{\"type\":\"disabled\"},\"messages\":["
               "{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":[{\"type\":"
               "\"thinking\",\"thinking\":\"hmm\",\"signature\":\"\"},{\"type\":\"text\",\"text\":\"Hello\"}]},"
               "{\"role\":\"user\",\"content\":\"More\"}],\"max_tokens\":3}",
               NULL, out, sizeof(out)) == 200,
          "%s", out);
    CHECK(http(&s, "POST", "/v1/completions",
               "{\"prompt\":\"Hello\",\"max_tokens\":3,\"echo\":true,\"logprobs\":2}", NULL, out,
               sizeof(out)) == 200,
          "%s", out);
    r = json_loads(out, JSON_ALLOW_NUL, NULL);
    ch = json_array_get(json_object_get(r, "choices"), 0);
    CHECK(!strncmp(json_string_value(json_object_get(ch, "text")), "Hello", 5), "%s", out);
    CHECK(json_array_size(json_object_get(json_object_get(ch, "logprobs"), "tokens")) ==
          (size_t)json_integer_value(json_object_get(json_object_get(r, "usage"), "completion_tokens")));
    json_decref(r);
    CHECK(http(&s, "POST", "/v1/completions", "{\"prompt\":[72,101,108],\"max_tokens\":2}", NULL, out,
               sizeof(out)) == 200,
          "%s", out);
    // metrics
    CHECK(http(&s, "GET", "/metrics", NULL, NULL, out, sizeof(out)) == 200);
    CHECK(strstr(out, "ft_time_to_first_token_seconds_bucket") && strstr(out, "ft_kv_cache_used_tokens"),
          "%s", out);
    CHECK(stat_int(&s, "generation_tokens", NULL) > 0);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// Checks an OpenAI SSE stream: events separated by blank lines, each `data: JSON`, the last
// `data: [DONE]`. Appends the concatenated delta text (chat content or completion text) to
// text. Returns false when malformed.
static bool sse_openai(const char *body, char *text, size_t cap, size_t *text_len) {
    size_t n = 0;
    *text_len = 0;
    text[0] = 0;
    const char *p = body;
    bool done = false;
    int events = 0;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        if (!end || done) return false; // unterminated event, or anything after [DONE]
        if (strncmp(p, "data: ", 6)) return false;
        const char *d = p + 6;
        size_t len = (size_t)(end - d);
        events++;
        if (len == 6 && !strncmp(d, "[DONE]", 6)) {
            done = true;
        } else {
            json_t *j = json_loadb(d, len, JSON_ALLOW_NUL, NULL);
            if (!j) return false;
            json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
            json_t *t = json_object_get(json_object_get(ch, "delta"), "content");
            if (!t) t = json_object_get(ch, "text");
            if (json_is_string(t)) {
                size_t l = json_string_length(t);
                if (n + l < cap) memcpy(text + n, json_string_value(t), l), n += l, text[n] = 0;
            }
            json_decref(j);
        }
        p = end + 2;
    }
    *text_len = n;
    return done && events >= 2;
}

// `ft run` greedy text for a prompt (special tokens parsed), without the trailing newline.
static bool run_greedy(const char *prompt, int n, char *out, size_t cap, size_t *out_len) {
    char pf[512], cmd[2048];
    snprintf(pf, sizeof(pf), "%s", test_path("server-prompt"));
    FILE *f = fopen(pf, "w");
    if (!f) return false;
    fputs(prompt, f);
    fclose(f);
    // (the x keeps the prompt's trailing newlines from $(...))
    snprintf(cmd, sizeof(cmd),
             "p=\"$(cat '%s'; printf x)\"; %s run -m '%s' -p \"${p%%x}\" -n %d --temp 0 -t 1 -c 4096 "
             "2>/dev/null >'%s'",
             pf, test_ft_bin(), model_path(), n, test_path("server-run-out"));
    if (test_run(cmd, NULL, 0) != 0) return false;
    f = fopen(test_path("server-run-out"), "rb");
    if (!f) return false;
    size_t l = fread(out, 1, cap - 1, f);
    fclose(f);
    if (l && out[l - 1] == '\n') l--; // ft run ends the text with a newline
    out[l] = 0;
    *out_len = l;
    return true;
}

TEST(server_greedy_matches_run) {
    SERVER_OR_SKIP(s, NULL);
    static char out[1 << 16], want[1 << 16], got[1 << 16];
    size_t want_n, got_n;
    // completions: the same prompt text as `ft run -p`
    REQUIRE(run_greedy("The quick brown fox", 24, want, sizeof(want), &want_n));
    CHECK(http(&s, "POST", "/v1/completions",
               "{\"prompt\":\"The quick brown fox\",\"max_tokens\":24,\"temperature\":0}", NULL, out,
               sizeof(out)) == 200);
    json_t *r = json_loads(out, JSON_ALLOW_NUL, NULL);
    json_t *text = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "text");
    CHECK(json_is_string(text) && json_string_length(text) == want_n &&
              !memcmp(json_string_value(text), want, want_n),
          "server '%s' vs ft run '%s'", json_is_string(text) ? json_string_value(text) : out, want);
    json_decref(r);
    // chat, streamed: the chatml rendering of the conversation through `ft run`
    REQUIRE(run_greedy("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n", 20, want,
                       sizeof(want), &want_n));
    CHECK(http(&s, "POST", "/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello "
               "there\"}],\"max_tokens\":20,\"temperature\":0,"
               "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
               NULL, out, sizeof(out)) == 200);
    CHECK(sse_openai(out, got, sizeof(got), &got_n), "malformed stream: %s", out);
    CHECK(got_n == want_n && !memcmp(got, want, want_n), "server '%s' vs ft run '%s'", got, want);
    CHECK(strstr(out, "\"usage\"") != NULL);
    // a conversation ending with the assistant's words is continued from them (both APIs)
    REQUIRE(run_greedy("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\nSure, here", 12, want,
                       sizeof(want), &want_n));
    const char *conv = "\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"},"
                       "{\"role\":\"assistant\",\"content\":\"Sure, here\"}],\"max_tokens\":12,\"temperature\":0";
    char body[512];
    snprintf(body, sizeof(body), "{%s}", conv);
    CHECK(http(&s, "POST", "/v1/chat/completions", body, NULL, out, sizeof(out)) == 200);
    r = json_loads(out, JSON_ALLOW_NUL, NULL);
    text = json_object_get(json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message"), "content");
    CHECK(json_is_string(text) && json_string_length(text) == want_n && !memcmp(json_string_value(text), want, want_n),
          "openai prefill: server '%s' vs ft run '%s'", json_is_string(text) ? json_string_value(text) : out, want);
    json_decref(r);
    CHECK(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 200);
    r = json_loads(out, JSON_ALLOW_NUL, NULL);
    text = json_object_get(json_array_get(json_object_get(r, "content"), 0), "text");
    CHECK(json_is_string(text) && json_string_length(text) == want_n && !memcmp(json_string_value(text), want, want_n),
          "anthropic prefill: server '%s' vs ft run '%s'", json_is_string(text) ? json_string_value(text) : out, want);
    json_decref(r);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

TEST(server_malformed_requests) {
    SERVER_OR_SKIP(s, "--max-body-bytes 65536 -c 256");
    static char out[1 << 16];
    static const struct {
        const char *path, *body;
    } bad[] = {
        {"/v1/chat/completions", "{"},
        {"/v1/chat/completions", "[]"},
        {"/v1/chat/completions", "null"},
        {"/v1/chat/completions", ""},
        {"/v1/chat/completions", "{\"messages\":\"hi\"}"},
        {"/v1/chat/completions", "{\"messages\":[]}"},
        {"/v1/chat/completions", "{}"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\"}],\"max_tokens\":\"5\"}"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1e300}"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":-1}"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":1e308}"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":7,\"content\":\"x\"}]}"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1,2]}"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":99}"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"},
        {"/v1/chat/completions", "{\"a\":1,\"a\":2}"},
        {"/v1/completions", "{\"prompt\":5}"},
        {"/v1/completions", "{\"prompt\":[1,-5]}"},
        {"/v1/completions", "{\"prompt\":[99999999999]}"},
        {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":true}"},
        {"/v1/messages", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}"},
        {"/v1/messages", "{\"messages\":[{\"role\":\"system\",\"content\":\"x\"}],\"max_tokens\":5}"},
        {"/v1/messages", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}"},
        {"/v1/messages",
         "{\"system\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5}"},
        {"/v1/messages",
         "{\"thinking\":{\"type\":\"maybe\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"max_tokens\":5}"},
        {"/v1/messages", "{\"thinking\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5}"},
        {"/tokenize", "{\"content\":5}"},
        {"/detokenize", "{\"tokens\":[\"a\"]}"},
        {"/detokenize", "{\"tokens\":[1e400]}"},
        {"/nowhere", "{}"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int code = http(&s, "POST", bad[i].path, bad[i].body, NULL, out, sizeof(out));
        CHECK(code >= 400 && code < 500, "%s %s -> %d %s", bad[i].path, bad[i].body, code, out);
        if (!strcmp(bad[i].path, "/v1/messages"))
            CHECK(strstr(out, "\"type\":\"error\"") != NULL, "anthropic shape: %s", out);
        else if (code != 413)
            CHECK(strstr(out, "{\"error\":{") == out, "openai shape: %s", out);
    }
    // fields ft does not implement yet: refused by name, not ignored (the defaults pass)
    static const struct {
        const char *path, *body, *field;
    } unimpl[] = {
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[{\"name\":\"f\"}]}", "functions"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"5\":-100}}", "logit_bias"},
        {"/v1/completions", "{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(unimpl); i++) {
        char want[64];
        snprintf(want, sizeof(want), "'%s' is not supported yet", unimpl[i].field);
        CHECK(http(&s, "POST", unimpl[i].path, unimpl[i].body, NULL, out, sizeof(out)) == 400 && strstr(out, want),
              "%s %s: %s", unimpl[i].path, unimpl[i].body, out);
    }
    CHECK(http(&s, "POST", "/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1,\"tools\":[],"
               "\"response_format\":{\"type\":\"text\"},\"logit_bias\":{}}",
               NULL, out, sizeof(out)) == 200,
          "defaults must pass: %s", out);
    // several prompts in one request: refused, saying so
    CHECK(http(&s, "POST", "/v1/completions", "{\"prompt\":[\"a\",\"b\"]}", NULL, out, sizeof(out)) == 400 &&
              strstr(out, "2 prompts"),
          "%s", out);
    // Anthropic's image blocks: 400 naming the block type; a tool_result without its id
    CHECK(http(&s, "POST", "/v1/messages",
               "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}", NULL, out,
               sizeof(out)) == 400 &&
              strstr(out, "'image' parts are not supported"),
          "%s", out);
    CHECK(http(&s, "POST", "/v1/messages",
               "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
               NULL, out, sizeof(out)) == 400 &&
              strstr(out, "tool_result needs a 'tool_use_id'"),
          "%s", out);
    // a prompt longer than the context: 400 naming the numbers
    static char big[1 << 17];
    int n = snprintf(big, sizeof(big), "{\"prompt\":\"");
    for (int i = 0; i < 2000; i++)
        n += snprintf(big + n, sizeof(big) - (size_t)n, "word%d ", i);
    snprintf(big + n, sizeof(big) - (size_t)n, "\"}");
    CHECK(http(&s, "POST", "/v1/completions", big, NULL, out, sizeof(out)) == 400);
    CHECK(strstr(out, "256") != NULL, "%s", out);
    // a body over the limit: 413
    static char huge[100000];
    memset(huge, ' ', sizeof(huge) - 1);
    huge[0] = '{';
    huge[sizeof(huge) - 2] = '}';
    CHECK(http(&s, "POST", "/v1/completions", huge, NULL, out, sizeof(out)) == 413);
    CHECK(strstr(out, "{\"error\":{") == out, "openai shape: %s", out);
    CHECK(http(&s, "POST", "/v1/messages", huge, NULL, out, sizeof(out)) == 413);
    CHECK(strstr(out, "\"type\":\"error\"") != NULL, "anthropic shape: %s", out);
    // wrong method
    CHECK(http(&s, "GET", "/v1/chat/completions", NULL, NULL, out, sizeof(out)) == 405);
    // still serving
    CHECK(http(&s, "POST", "/v1/completions", "{\"prompt\":\"ok\",\"max_tokens\":2}", NULL, out,
               sizeof(out)) == 200);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

TEST(server_api_key) {
    SERVER_OR_SKIP(s, "--api-key sekrit");
    static char out[4096];
    CHECK(http(&s, "GET", "/health", NULL, NULL, out, sizeof(out)) == 200);
    CHECK(http(&s, "GET", "/v1/models", NULL, NULL, out, sizeof(out)) == 401);
    CHECK(http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer sekri'", out, sizeof(out)) == 401);
    CHECK(http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer sekrit2'", out, sizeof(out)) == 401);
    CHECK(http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer sekrit'", out, sizeof(out)) == 200);
    CHECK(http(&s, "GET", "/v1/models", NULL, "-H 'x-api-key: sekrit'", out, sizeof(out)) == 200);
    CHECK(http(&s, "POST", "/v1/messages", "{}", NULL, out, sizeof(out)) == 401);
    CHECK(strstr(out, "authentication_error") != NULL, "%s", out);
    CHECK(http(&s, "GET", "/props", NULL, NULL, out, sizeof(out)) == 401);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// llama-server's POST /completion: the text /v1/completions gives for the same greedy request,
// streamed as {"content", "stop"} events ending with the totals; a sampler ft lacks is refused
// unless it is switched off.
TEST(server_llama_completion) {
    SERVER_OR_SKIP(s, NULL);
    static char out[1 << 16], ref[1 << 16];
    CHECK(http(&s, "POST", "/v1/completions",
               "{\"prompt\": \"hello world\", \"max_tokens\": 8, \"temperature\": 0}", NULL, out,
               sizeof(out)) == 200);
    json_t *o = json_loads(out, 0, NULL);
    snprintf(ref, sizeof(ref), "%s",
             json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "text"))
                 ?: "");
    long prompt_tokens =
        (long)json_integer_value(json_object_get(json_object_get(o, "usage"), "prompt_tokens"));
    json_decref(o);
    CHECK(ref[0], "no reference text");
    CHECK(http(&s, "POST", "/completion",
               "{\"prompt\": \"hello world\", \"n_predict\": 8, \"temperature\": 0}", NULL, out,
               sizeof(out)) == 200,
          "%s", out);
    o = json_loads(out, 0, NULL);
    const char *c = json_string_value(json_object_get(o, "content"));
    CHECK(c && !strcmp(c, ref), "content '%s' against /v1/completions' '%s'", c ? c : "(none)", ref);
    CHECK(json_is_true(json_object_get(o, "stop")) &&
              !strcmp(json_string_value(json_object_get(o, "stop_type")) ?: "", "limit") &&
              json_integer_value(json_object_get(o, "tokens_predicted")) == 8 &&
              json_integer_value(json_object_get(o, "tokens_evaluated")) == prompt_tokens,
          "%s", out);
    json_decref(o);
    // streamed: the events' contents join to the same text, the last says stop
    CHECK(http(&s, "POST", "/completion",
               "{\"prompt\": \"hello world\", \"n_predict\": 8, \"temperature\": 0, \"stream\": true}", NULL,
               out, sizeof(out)) == 200);
    static char joined[1 << 16];
    size_t jn = 0;
    int n_stop = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6)) continue;
        json_t *e = json_loads(line + 6, 0, NULL);
        const char *t = json_string_value(json_object_get(e, "content"));
        if (t) jn += (size_t)snprintf(joined + jn, sizeof(joined) - jn, "%s", t);
        n_stop += json_is_true(json_object_get(e, "stop"));
        json_decref(e);
    }
    CHECK(!strcmp(joined, ref) && n_stop == 1, "streamed '%s' (%d stop events) against '%s'", joined, n_stop,
          ref);
    CHECK(http(&s, "POST", "/completion", "{\"prompt\": \"hi\", \"mirostat\": 2}", NULL, out, sizeof(out)) ==
                  400 &&
              strstr(out, "mirostat"),
          "%s", out);
    const char *switched_off = "{\"prompt\": \"hi\", \"n_predict\": 2, \"mirostat\": 0, \"typical_p\": 1, "
                               "\"grammar\": \"\", \"cache_prompt\": true}";
    CHECK(http(&s, "POST", "/completion", switched_off, NULL, out, sizeof(out)) == 200, "%s", out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// GET /props as llama-server answers it (its web UI and scripts read it): the context and
// slots the server runs, the model file, and the defaults of POST /completion.
TEST(server_props_like_llama_server) {
    SERVER_OR_SKIP(s, "--parallel 3");
    json_t *pr = get_json(&s, "/props"), *m = get_json(&s, "/v1/models");
    json_t *gs = json_object_get(pr, "default_generation_settings"), *params = json_object_get(gs, "params");
    json_t *meta = json_object_get(json_array_get(json_object_get(m, "data"), 0), "meta");
    CHECK(json_integer_value(json_object_get(pr, "total_slots")) == 3, "total_slots");
    CHECK(json_integer_value(json_object_get(gs, "n_ctx")) ==
                  json_integer_value(json_object_get(meta, "n_ctx")) &&
              json_integer_value(json_object_get(gs, "n_ctx")) > 0,
          "n_ctx");
    const char *path = json_string_value(json_object_get(pr, "model_path"));
    CHECK(path && !strcmp(path, model_path()), "model_path %s", path ? path : "(none)");
    CHECK(json_real_value(json_object_get(params, "temperature")) == (double)0.8f &&
              json_integer_value(json_object_get(params, "top_k")) == 40 &&
              json_integer_value(json_object_get(params, "n_predict")) == -1,
          "the defaults of POST /completion (llama-server's)");
    CHECK(json_is_false(json_object_get(json_object_get(pr, "modalities"), "vision")), "modalities");
    CHECK(json_string_value(json_object_get(pr, "build_info")) != NULL, "build_info");
    json_decref(pr);
    json_decref(m);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// GET /slots as llama-server answers it: one entry per sequence, idle at first; after a greedy
// request, the slot that ran it shows its task id, prompt and decoded counts and parameters.
// --no-slots turns it off (501).
TEST(server_slots_like_llama_server) {
    SERVER_OR_SKIP(s, "--parallel 2");
    json_t *sl = get_json(&s, "/slots");
    CHECK(json_array_size(sl) == 2, "two slots");
    for (size_t i = 0; i < json_array_size(sl); i++) {
        json_t *o = json_array_get(sl, i);
        CHECK(json_integer_value(json_object_get(o, "id")) == (json_int_t)i &&
                  json_is_false(json_object_get(o, "is_processing")) && !json_object_get(o, "id_task") &&
                  json_integer_value(json_object_get(o, "n_ctx")) > 0,
              "slot %zu idle before any request", i);
    }
    json_decref(sl);
    static char out[1 << 16];
    CHECK(http(&s, "POST", "/completion",
               "{\"prompt\":\"Hello there\",\"n_predict\":5,\"temperature\":0.5,"
               "\"ignore_eos\":true}",
               NULL, out, sizeof(out)) == 200,
          "%s", out);
    json_t *done = json_loads(out, 0, NULL);
    json_int_t n_prompt = json_integer_value(json_object_get(done, "tokens_evaluated"));
    json_decref(done);
    sl = get_json(&s, "/slots");
    int ran = 0;
    for (size_t i = 0; i < json_array_size(sl); i++) {
        json_t *o = json_array_get(sl, i), *params = json_object_get(o, "params");
        if (!json_object_get(o, "id_task")) continue;
        ran++;
        json_t *next = json_array_get(json_object_get(o, "next_token"), 0);
        CHECK(json_is_false(json_object_get(o, "is_processing")) &&
                  json_integer_value(json_object_get(o, "n_prompt_tokens")) == n_prompt && n_prompt > 0 &&
                  json_integer_value(json_object_get(next, "n_decoded")) == 5 &&
                  json_integer_value(json_object_get(params, "n_predict")) == 5 &&
                  json_real_value(json_object_get(params, "temperature")) == (double)0.5f,
              "the slot that ran it: %s", json_dumps(o, JSON_COMPACT));
    }
    CHECK(ran == 1, "%d slots show the request", ran);
    json_decref(sl);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
    server off;
    REQUIRE(server_start(&off, "--no-slots"), "log: %s", off.log);
    CHECK(http(&off, "GET", "/slots", NULL, NULL, out, sizeof(out)) == 501, "%s", out);
    CHECK(server_stop(&off) == 0, "log: %s", off.log);
}

// The params GET /slots shows for the one slot that ran a request (NULL: none or several).
static json_t *ran_params(const server *s) {
    json_t *sl = get_json(s, "/slots"), *found = NULL;
    int ran = 0;
    for (size_t i = 0; i < json_array_size(sl); i++) {
        json_t *o = json_array_get(sl, i);
        if (json_object_get(o, "id_task") && ran++ == 0) found = json_incref(json_object_get(o, "params"));
    }
    json_decref(sl);
    if (ran != 1) json_decref(found);
    return ran == 1 ? found : NULL;
}

static void add_sampling(gguf_writer *w, void *ctx) {
    (void)ctx;
    gguf_writer_set_f32(w, "general.sampling.temp", 0.25f);
    gguf_writer_set_i32(w, "general.sampling.top_k", 11);
}

// A copy of the server tests' model with a sampling recommendation in its metadata
// (general.sampling.temp 0.25, top_k 11), written as test_path(name); NULL after a recorded failure.
static const char *model_with_sampling(const char *name) {
    const char *path = test_path(name);
    return fixture_gguf_rewrite(model_path(), path, NULL, add_sampling, NULL) ? path : NULL;
}

// The sampling flags of ft serve are the defaults of requests that name no value (over each
// API's own), a request's own values win, and /props shows them over llama-server's; a model's
// general.sampling.* fills in the flags not given, as llama-server does. With them, llama-server's
// -n, --alias, --jinja and --metrics.
TEST(server_sampling_defaults) {
    SERVER_OR_SKIP(s, "--temp 0.3 --top-k 7 --seed 42 --parallel 1 --alias my-model -n 3 --jinja --metrics");
    static char out[1 << 16];
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":2";
    char body[512];
    snprintf(body, sizeof(body), "%s}", chat);
    CHECK(http(&s, "POST", "/v1/chat/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
    json_t *pr = ran_params(&s);
    CHECK(pr && json_real_value(json_object_get(pr, "temperature")) == (double)0.3f &&
              json_integer_value(json_object_get(pr, "top_k")) == 7 &&
              json_integer_value(json_object_get(pr, "seed")) == 42 &&
              json_real_value(json_object_get(pr, "top_p")) == 1.0,
          "the server's temp, top-k and seed over OpenAI's defaults (top-p 1): %s",
          pr ? json_dumps(pr, JSON_COMPACT) : "no slot");
    json_decref(pr);
    snprintf(body, sizeof(body), "%s,\"temperature\":0.9,\"seed\":5}", chat);
    CHECK(http(&s, "POST", "/v1/chat/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
    pr = ran_params(&s);
    CHECK(pr && json_real_value(json_object_get(pr, "temperature")) == (double)0.9f &&
              json_integer_value(json_object_get(pr, "seed")) == 5 &&
              json_integer_value(json_object_get(pr, "top_k")) == 7,
          "the request's temperature and seed win: %s", pr ? json_dumps(pr, JSON_COMPACT) : "no slot");
    json_decref(pr);
    // llama-server's -n (a request naming no max_tokens) and --alias; --jinja and --metrics accepted
    CHECK(http(&s, "POST", "/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"ignore_eos\":true}", NULL, out,
               sizeof(out)) == 200,
          "%s", out);
    json_t *r = json_loads(out, 0, NULL);
    CHECK(json_integer_value(json_object_get(json_object_get(r, "usage"), "completion_tokens")) == 3 &&
              !strcmp(json_string_value(json_object_get(r, "model")) ? json_string_value(json_object_get(r, "model")) : "",
                      "my-model"),
          "-n 3 and --alias my-model: %s", out);
    json_decref(r);
    json_t *props = get_json(&s, "/props");
    json_t *dp = json_object_get(json_object_get(props, "default_generation_settings"), "params");
    CHECK(json_integer_value(json_object_get(dp, "n_predict")) == 3, "/props n_predict");
    CHECK(json_real_value(json_object_get(dp, "temperature")) == (double)0.3f &&
              json_integer_value(json_object_get(dp, "top_k")) == 7 &&
              json_real_value(json_object_get(dp, "top_p")) == (double)0.95f,
          "/props: the server's over llama-server's: %s", json_dumps(dp, JSON_COMPACT));
    json_decref(props);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);

    const char *m = model_with_sampling("server-sampling.gguf");
    REQUIRE(m);
    server t;
    REQUIRE(server_start_on(&t, m, "--chat-template chatml --top-k 3"), "log: %s", t.log);
    props = get_json(&t, "/props");
    dp = json_object_get(json_object_get(props, "default_generation_settings"), "params");
    CHECK(json_real_value(json_object_get(dp, "temperature")) == (double)0.25f &&
              json_integer_value(json_object_get(dp, "top_k")) == 3,
          "the model's temp, the flag's top-k: %s", json_dumps(dp, JSON_COMPACT));
    json_decref(props);
    CHECK(server_stop(&t) == 0, "log: %s", t.log);
    char *log = fixture_read_file(t.log, NULL);
    CHECK(log && strstr(log, "sampling defaults of requests that name none: temp 0.25 (the model's), top-k 3 (--top-k)"),
          "the start-up line (log: %s)", t.log);
    free(log);
}

// count_tokens: the prompt's tokens as /v1/messages counts them (its usage.input_tokens).
TEST(server_anthropic_count_tokens) {
    SERVER_OR_SKIP(s, NULL);
    static char out[1 << 16];
    const char *msgs = "\"system\":\"Be brief.\",\"messages\":[{\"role\":\"user\",\"content\":\"Count these words\"}]";
    char body[512];
    snprintf(body, sizeof(body), "{%s}", msgs);
    REQUIRE(http(&s, "POST", "/v1/messages/count_tokens", body, NULL, out, sizeof(out)) == 200, "%s", out);
    json_t *c = json_loads(out, 0, NULL);
    json_int_t counted = json_integer_value(json_object_get(c, "input_tokens"));
    json_decref(c);
    snprintf(body, sizeof(body), "{%s,\"max_tokens\":1}", msgs);
    REQUIRE(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 200, "%s", out);
    json_t *m = json_loads(out, 0, NULL);
    json_int_t used = json_integer_value(json_object_get(json_object_get(m, "usage"), "input_tokens"));
    json_decref(m);
    CHECK(counted > 5 && counted == used, "count_tokens %lld, the message used %lld", (long long)counted,
          (long long)used);
    CHECK(http(&s, "POST", "/v1/messages/count_tokens", "{\"messages\":[]}", NULL, out, sizeof(out)) == 400 &&
              strstr(out, "\"type\":\"error\""),
          "%s", out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// A browser's preflight with a key set: answered without the key, naming Authorization (which
// the "*" wildcard does not cover); the request itself still needs the key.
TEST(server_cors_preflight_names_authorization) {
    SERVER_OR_SKIP(s, "--api-key sekrit");
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof(cmd),
             "curl -sS -i -m 10 -X OPTIONS -H 'Origin: http://localhost:3000' "
             "-H 'Access-Control-Request-Headers: authorization' http://127.0.0.1:%d/v1/chat/completions",
             s.port);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && strstr(out, " 204") && strstr(out, "Authorization"), "%s", out);
    static char body[4096];
    CHECK(http(&s, "GET", "/v1/models", NULL, NULL, body, sizeof(body)) == 401);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// --lenient: the fields ft does not implement are ignored (and logged) instead of refused.
TEST(server_lenient_ignores_unimplemented_fields) {
    SERVER_OR_SKIP(s, "--lenient");
    static char out[1 << 16];
    CHECK(http(&s, "POST", "/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1,"
               "\"logit_bias\":{\"5\":-100}}",
               NULL, out, sizeof(out)) == 200,
          "%s", out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
    char *log = fixture_read_file(s.log, NULL);
    CHECK(log && strstr(log, "ignoring the request's 'logit_bias'"), "log: %s", log ? log : "(none)");
    free(log);
}

// A port in use: a second server says so and exits before it loads anything onto a device.
TEST(server_busy_port_fails_early) {
    SERVER_OR_SKIP(s, NULL);
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof(cmd), "%s serve -m '%s' --port %d -t 1 --device cpu 2>&1", test_ft_bin(), model_path(), s.port);
    CHECK(test_run(cmd, out, sizeof(out)) != 0 && strstr(out, "cannot listen") && !strstr(out, "KV cache"), "%s", out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// Beyond loopback without a key: it serves, and says so in the log once.
TEST(server_warns_when_exposed_without_a_key) {
    SERVER_OR_SKIP(s, "--host 0.0.0.0");
    static char out[4096];
    CHECK(http(&s, "GET", "/health", NULL, NULL, out, sizeof(out)) == 200);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
    char *log = fixture_read_file(s.log, NULL);
    CHECK(log && strstr(log, "without --api-key"), "log: %s", log ? log : "(none)");
    free(log);
}

// The routing answers, to the byte: /health is open and checks its method first; every other
// path checks the key, then whether it exists (404), then the method (405); errors of
// /v1/messages take the Anthropic shape. Written down from the server before its route table.
TEST(server_route_errors) {
    SERVER_OR_SKIP(s, "--api-key sekrit");
    static char out[4096];
    const char *key = "-H 'x-api-key: sekrit'";
#define OAI_ERR(msg, type, code) "{\"error\":{\"message\":\"" msg "\",\"type\":\"" type "\",\"param\":null,\"code\":" #code "}}"
#define ANT_ERR(msg, type) "{\"type\":\"error\",\"error\":{\"type\":\"" type "\",\"message\":\"" msg "\"}}"
    const char *e401 = OAI_ERR("invalid or missing API key", "authentication_error", 401);
    const char *e404 = OAI_ERR("no such route", "not_found_error", 404);
#define E403 OAI_ERR("admin routes are off: start ft serve with --admin-key KEY", "permission_error", 403)
    const char *get405 = OAI_ERR("use GET", "invalid_request_error", 405);
    const char *post405 = OAI_ERR("use POST", "invalid_request_error", 405);
    static const struct {
        const char *method, *path;
        bool with_key;
        int code;
        const char *body; // exact; NULL: not compared
    } cases[] = {
        {"OPTIONS", "/nowhere", false, 204, ""},
        {"GET", "/health", false, 200, "{\"status\":\"ok\"}"},
        {"POST", "/health", false, 405, NULL},
        {"GET", "/nowhere", false, 401, NULL},
        {"GET", "/nowhere", true, 404, NULL},
        {"POST", "/nowhere", true, 404, NULL},
        {"GET", "/v1/models/", true, 404, NULL},
        {"POST", "/v1/models", false, 401, NULL},
        {"POST", "/v1/models", true, 405, NULL},
        {"POST", "/models", true, 405, NULL},
        {"POST", "/metrics", true, 405, NULL},
        {"POST", "/v1/stats", true, 405, NULL},
        {"GET", "/v1/chat/completions", true, 405, NULL},
        {"GET", "/chat/completions", true, 405, NULL},
        {"GET", "/v1/completions", true, 405, NULL},
        {"GET", "/completions", true, 405, NULL},
        {"GET", "/tokenize", true, 405, NULL},
        {"GET", "/detokenize", true, 405, NULL},
        {"GET", "/v1/cache/rebuild", true, 403, E403},
        {"POST", "/v1/cache/rebuild", false, 403, E403},
        {"GET", "/v1/messages", false, 401, ANT_ERR("invalid or missing API key", "authentication_error")},
        {"GET", "/v1/messages", true, 405, ANT_ERR("use POST", "invalid_request_error")},
        {"POST", "/v1/messages", true, 400,
         ANT_ERR("invalid JSON body: '[' or '{' expected near end of file (line 1, column 0)",
                 "invalid_request_error")},
    };
#undef E403
#undef OAI_ERR
#undef ANT_ERR
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *want = cases[i].body;
        if (!want && cases[i].code == 401) want = e401;
        if (!want && cases[i].code == 404) want = e404;
        if (!want && cases[i].code == 405) want = !strcmp(cases[i].method, "GET") ? post405 : get405;
        int code = http(&s, cases[i].method, cases[i].path, NULL, cases[i].with_key ? key : NULL, out, sizeof(out));
        CHECK(code == cases[i].code && !strcmp(out, want), "%s %s%s: %d %s (want %d %s)", cases[i].method,
              cases[i].path, cases[i].with_key ? " with the key" : "", code, out, cases[i].code, want);
    }
    // HEAD on a GET route: its status and headers, no body
    CHECK(http(&s, "HEAD", "/health", NULL, "-I", out, sizeof(out)) == 200 && !strstr(out, "status"), "%s", out);
    CHECK(http(&s, "HEAD", "/v1/models", NULL, "-I", out, sizeof(out)) == 401, "%s", out);
    // models.retrieve: the served model by its id, 404 for another; 401 says how to authenticate;
    // a full queue says when to retry (server_queue_full)
    CHECK(http(&s, "GET", "/v1/models/srv-test", NULL, key, out, sizeof(out)) == 200 && strstr(out, "\"id\":\"srv-test\""),
          "%s", out);
    CHECK(http(&s, "GET", "/v1/models/other", NULL, key, out, sizeof(out)) == 404, "%s", out);
    CHECK(http(&s, "POST", "/v1/embeddings", "{\"input\":\"x\"}", key, out, sizeof(out)) == 400 &&
              strstr(out, "embeddings are not supported"),
          "%s", out);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "curl -sS -i -m 10 http://127.0.0.1:%d/v1/models", s.port);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && strstr(out, "WWW-Authenticate: Bearer"), "%s", out);
    // the two metrics routes answer in their own types, with the key only
    CHECK(http(&s, "GET", "/metrics", NULL, NULL, out, sizeof(out)) == 401);
    CHECK(http(&s, "GET", "/metrics", NULL, key, out, sizeof(out)) == 200 && strstr(out, "# TYPE "), "%s", out);
    CHECK(http(&s, "GET", "/v1/stats", NULL, key, out, sizeof(out)) == 200 && out[0] == '{', "%s", out);
    CHECK(http(&s, "GET", "/models", NULL, key, out, sizeof(out)) == 200 && strstr(out, "\"srv-test\""), "%s", out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// One running, one queued: a third request is refused with 429 in the OpenAI shape.
TEST(server_queue_full) {
    SERVER_OR_SKIP(s, "-c 4096 --max-running-requests 1 --max-queued-requests 1");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "for i in 1 2; do curl -sN -m 10 http://127.0.0.1:%d/v1/completions -d "
             "'{\"prompt\":\"Go\",\"max_tokens\":4000,"
             "\"temperature\":0,\"stream\":true}' >/dev/null 2>&1 & done",
             s.port);
    test_run(cmd, NULL, 0);
    bool full = false;
    for (int i = 0; i < 100 && !full; i++) {
        full = stat_int(&s, "running", NULL) == 1 && stat_int(&s, "queued", NULL) == 1;
        if (!full) sleep_ms(50);
    }
    REQUIRE(full, "the two long requests did not fill the server: running %ld, queued %ld, finished %ld/%ld/%ld",
            stat_int(&s, "running", NULL), stat_int(&s, "queued", NULL), stat_int(&s, "requests", "stop"),
            stat_int(&s, "requests", "length"), stat_int(&s, "requests", "cancelled"));
    static char out[4096];
    CHECK(http(&s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}", NULL, out,
               sizeof(out)) == 429);
    CHECK(strstr(out, "rate_limit_exceeded") != NULL, "%s", out);
    snprintf(cmd, sizeof(cmd), "curl -sS -i -m 10 http://127.0.0.1:%d/v1/completions -d '{\"prompt\":\"x\",\"max_tokens\":1}'",
             s.port);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && strstr(out, "Retry-After: 1"), "%s", out);
    CHECK(http(&s, "POST", "/v1/messages",
               "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", NULL, out,
               sizeof(out)) == 429);
    CHECK(strstr(out, "rate_limit_error") != NULL, "%s", out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log); // SIGTERM with a stream running and one queued
}

// A client that goes away mid-stream: its sequence is cancelled and its KV freed.
TEST(server_disconnect_frees_kv) {
    SERVER_OR_SKIP(s, "-c 4096");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "curl -sN -m 0.5 http://127.0.0.1:%d/v1/completions -d '{\"prompt\":\"Go\",\"max_tokens\":4000,"
             "\"stream\":true,\"temperature\":0,\"ignore_eos\":true}' >/dev/null 2>&1",
             s.port);
    for (int round = 1; round <= 2; round++) {
        // not streaming: nothing is written until the end, the socket is watched (4000 tokens
        // with end-of-generation masked last far longer than the client's 0.5 s)
        if (round == 2)
            snprintf(cmd, sizeof(cmd),
                     "curl -s -m 0.5 http://127.0.0.1:%d/v1/chat/completions -d "
                     "'{\"messages\":[{\"role\":\"user\","
                     "\"content\":\"Go\"}],\"max_tokens\":4000,\"temperature\":0,\"ignore_eos\":true}' "
                     ">/dev/null 2>&1",
                     s.port);
        test_run(cmd, NULL, 0); // times out (-m): the client disconnects
        long used = -1, cancelled = -1, running = -1;
        for (int i = 0; i < 100; i++) { // up to 5 s; the request's end is reported before its
                                        // slot is counted free, so wait for all three
            used = stat_int(&s, "kv_cache", "used_tokens");
            cancelled = stat_int(&s, "requests", "cancelled");
            running = stat_int(&s, "running", NULL);
            if (used == 0 && cancelled == round && running == 0) break;
            sleep_ms(50);
        }
        CHECK(cancelled == round, "round %d: cancelled %ld", round, cancelled);
        CHECK(used == 0, "round %d: KV positions still in use: %ld", round, used);
    }
    CHECK(stat_int(&s, "running", NULL) == 0);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// 8 concurrent streams (4 running, 4 queued): every stream well-formed, greedy text equal to
// the same request alone.
TEST(server_concurrent_streams) {
    SERVER_OR_SKIP(s, "--max-running-requests 4");
    static char out[1 << 16], alone[2][1 << 14], got[1 << 14];
    size_t alone_n[2], got_n;
    const char *prompts[2] = {"Once upon a time", "In the beginning"};
    for (int k = 0; k < 2; k++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"stream\":true}", prompts[k],
                 24 + 8 * k);
        REQUIRE(http(&s, "POST", "/v1/completions", body, NULL, out, sizeof(out)) == 200);
        REQUIRE(sse_openai(out, alone[k], sizeof(alone[k]), &alone_n[k]), "%s", out);
    }
    char cmd[8192];
    int n = 0;
    for (int i = 0; i < 8; i++)
        n += snprintf(
            cmd + n, sizeof(cmd) - (size_t)n,
            "(curl -sN -m 60 http://127.0.0.1:%d/v1/completions -d '{\"prompt\":\"%s\",\"max_tokens\":%d,"
            "\"temperature\":0,\"stream\":true}' > '%s/conc-%d.sse') & ",
            s.port, prompts[i % 2], 24 + 8 * (i % 2), test_tmpdir(), i);
    snprintf(cmd + n, sizeof(cmd) - (size_t)n, "wait");
    CHECK(test_run(cmd, NULL, 0) == 0);
    for (int i = 0; i < 8; i++) {
        char name[64];
        snprintf(name, sizeof(name), "conc-%d.sse", i);
        FILE *f = fopen(test_path(name), "rb");
        REQUIRE(f);
        size_t len = fread(out, 1, sizeof(out) - 1, f);
        out[len] = 0;
        fclose(f);
        CHECK(sse_openai(out, got, sizeof(got), &got_n), "stream %d malformed: %s", i, out);
        int k = i & 1;
        CHECK(got_n == alone_n[k] && !memcmp(got, alone[k], got_n), "stream %d: '%s' vs alone '%s'", i, got,
              alone[k]);
    }
    CHECK(stat_int(&s, "kv_cache", "used_tokens") == 0);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// SIGTERM while streams run: each ends with an error in its API's terms (OpenAI: an error object,
// then [DONE]; Anthropic: an error event, no stop_reason), the server exits 0.
TEST(server_sigterm_cancels) {
    SERVER_OR_SKIP(s, "-c 4096 --max-running-requests 2");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "curl -sN -m 20 http://127.0.0.1:%d/v1/completions -d '{\"prompt\":\"Go\",\"max_tokens\":4000,"
             "\"stream\":true,\"ignore_eos\":true}' > '%s' 2>/dev/null &",
             s.port, test_path("sigterm.sse"));
    test_run(cmd, NULL, 0);
    snprintf(cmd, sizeof(cmd),
             "curl -sN -m 20 http://127.0.0.1:%d/v1/messages -d '{\"max_tokens\":4000,\"stream\":true,"
             "\"ignore_eos\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Go\"}]}' > '%s' 2>/dev/null &",
             s.port, test_path("sigterm-anthropic.sse"));
    test_run(cmd, NULL, 0);
    for (int i = 0; i < 100 && stat_int(&s, "running", NULL) < 2; i++)
        sleep_ms(50);
    sleep_ms(100); // some tokens streamed
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
    sleep_ms(200);
    static char out[1 << 20], got[1 << 16];
    size_t got_n;
    FILE *f = fopen(test_path("sigterm.sse"), "rb");
    REQUIRE(f);
    size_t len = fread(out, 1, sizeof(out) - 1, f);
    out[len] = 0;
    fclose(f);
    CHECK(sse_openai(out, got, sizeof(got), &got_n), "stream not ended cleanly: ...%s",
          len > 300 ? out + len - 300 : out);
    CHECK(strstr(out, "{\"error\":{\"message\":\"the server is shutting down") && !strstr(out, "abort"),
          "no error at the end: ...%s", len > 300 ? out + len - 300 : out);
    f = fopen(test_path("sigterm-anthropic.sse"), "rb");
    REQUIRE(f);
    len = fread(out, 1, sizeof(out) - 1, f);
    out[len] = 0;
    fclose(f);
    CHECK(strstr(out, "event: error") && strstr(out, "shutting down") && !strstr(out, "end_turn") &&
              !strstr(out, "message_stop"),
          "no error event at the end: ...%s", len > 300 ? out + len - 300 : out);
}

// The official SDKs (node): tests/server/*.mjs, where node_modules has them.
TEST(server_sdk_clients) {
    struct stat st;
    if (stat("node_modules/openai/package.json", &st) != 0 ||
        stat("node_modules/@anthropic-ai/sdk/package.json", &st) != 0) {
        test_skip("node_modules has no openai / @anthropic-ai/sdk (npm ci)");
        return;
    }
    SERVER_OR_SKIP(s, NULL);
    static char out[1 << 16];
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "node tests/server/openai.mjs %d 2>&1", s.port);
    CHECK(test_run(cmd, out, sizeof(out)) == 0, "openai.mjs: %s", out);
    snprintf(cmd, sizeof(cmd), "node tests/server/anthropic.mjs %d 2>&1", s.port);
    CHECK(test_run(cmd, out, sizeof(out)) == 0, "anthropic.mjs: %s", out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// The load test (tests/server/load.mjs, plain fetch): 16 concurrent streaming clients, 200
// requests of mixed lengths batched 8 at a time, some cancelled mid-stream; greedy outputs
// equal the requests alone up to a near-tie; KV use back to zero; the server keeps serving.
// Prefill chunks of 16 tokens (-b 16): the prompts (45 to 89 tokens) then join in
// several steps beside the others' decode tokens.
TEST(server_load) {
    if (test_run("node --version >/dev/null 2>&1", NULL, 0) != 0) {
        test_skip("node is not installed");
        return;
    }
    SERVER_OR_SKIP(s, "-c 1024 --max-running-requests 8 -b 16");
    static char out[1 << 16];
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "node tests/server/load.mjs %d 16 200 0.15 2>&1", s.port);
    CHECK(test_run(cmd, out, sizeof(out)) == 0, "load.mjs: %s", out);
    fprintf(stderr, "  %s", out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// A huge prompt does not stall other clients (tests/server/stall.mjs): two chat requests of
// 4,000,000 characters (4 million tokens of the demo vocabulary, far past the context), sent by
// curl while a stream runs, are each refused with a 400 naming the context, and the stream's
// largest gap between events meanwhile stays under 300 ms: their JSON parse, templating and
// tokenizing run on the prep threads. (With that work on the event loop the gap was 540-580 ms
// here, and about 45 ms without.)
TEST(server_huge_prompt_does_not_stall_streams) {
    if (test_run("node --version >/dev/null 2>&1", NULL, 0) != 0) {
        test_skip("node is not installed");
        return;
    }
    SERVER_OR_SKIP(s, "-c 4096");
    static char out[1 << 14];
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "node tests/server/stall.mjs %d 2 300 2>&1", s.port);
    CHECK(test_run(cmd, out, sizeof(out)) == 0, "stall.mjs: %s", out);
    fprintf(stderr, "  %s", out);
    // a large body that is not JSON (parsed on a prep thread too): a 400 in the route's shape
    enum { BIG = 300 << 10 };
    char *body = ft_malloc(BIG + 1);
    memset(body, '{', BIG);
    body[BIG] = 0;
    CHECK(http(&s, "POST", "/v1/chat/completions", body, NULL, out, sizeof(out)) == 400 &&
              strstr(out, "{\"error\":{") == out && strstr(out, "invalid JSON"),
          "%.300s", out);
    CHECK(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 400 &&
              strstr(out, "\"type\":\"error\""),
          "%.300s", out);
    free(body);
    CHECK(http(&s, "GET", "/health", NULL, NULL, out, sizeof(out)) == 200);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// Stop strings: the text ends before the first occurrence, finish_reason "stop".
TEST(server_stop_strings) {
    SERVER_OR_SKIP(s, NULL);
    static char out[1 << 16];
    const char *req = "{\"prompt\":\"The quick brown fox\",\"max_tokens\":32,\"temperature\":0}";
    REQUIRE(http(&s, "POST", "/v1/completions", req, NULL, out, sizeof(out)) == 200);
    json_t *r = json_loads(out, JSON_ALLOW_NUL, NULL);
    const char *text =
        json_string_value(json_object_get(json_array_get(json_object_get(r, "choices"), 0), "text"));
    REQUIRE(text);
    char stop[3] = {0};
    size_t len = strlen(text);
    for (size_t k = 3; k + 1 < len && !stop[0]; k++)
        if (text[k] > ' ' && text[k] < 127 && text[k + 1] > ' ' && text[k + 1] < 127 && text[k] != '"' &&
            text[k + 1] != '"' && text[k] != '\\' && text[k + 1] != '\\')
            stop[0] = text[k], stop[1] = text[k + 1];
    if (!stop[0]) {
        json_decref(r);
        test_skip("no ASCII pair in the greedy text to stop on");
        server_stop(&s);
        return;
    }
    size_t want = (size_t)(strstr(text, stop) - text);
    char body[512];
    snprintf(body, sizeof(body),
             "{\"prompt\":\"The quick brown fox\",\"max_tokens\":32,\"temperature\":0,\"stop\":[\"%s\"]}",
             stop);
    REQUIRE(http(&s, "POST", "/v1/completions", body, NULL, out, sizeof(out)) == 200);
    json_t *r2 = json_loads(out, JSON_ALLOW_NUL, NULL);
    json_t *c2 = json_array_get(json_object_get(r2, "choices"), 0);
    json_t *t2 = json_object_get(c2, "text");
    CHECK(json_string_length(t2) == want && !memcmp(json_string_value(t2), text, want),
          "stop '%s': '%s' of '%s'", stop, json_string_value(t2), text);
    CHECK(!strcmp(json_string_value(json_object_get(c2, "finish_reason")), "stop"), "%s", out);
    json_decref(r);
    json_decref(r2);
    // Anthropic names the stop sequence that matched (of two), in the reply and in the stream
    const char *msg = "{\"max_tokens\":32,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]";
    snprintf(body, sizeof(body), "%s}", msg);
    REQUIRE(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 200);
    r = json_loads(out, JSON_ALLOW_NUL, NULL);
    text = json_string_value(json_object_get(json_array_get(json_object_get(r, "content"), 0), "text"));
    REQUIRE(text, "%s", out);
    stop[0] = 0;
    len = strlen(text);
    for (size_t k = 2; k + 1 < len && !stop[0]; k++)
        if (text[k] > ' ' && text[k] < 127 && text[k + 1] > ' ' && text[k + 1] < 127 && text[k] != '"' &&
            text[k + 1] != '"' && text[k] != '\\' && text[k + 1] != '\\')
            stop[0] = text[k], stop[1] = text[k + 1];
    CHECK(stop[0], "no ASCII pair to stop on in '%s'", text);
    json_decref(r);
    if (stop[0]) {
        for (int stream = 0; stream < 2; stream++) {
            snprintf(body, sizeof(body), "%s,\"stream\":%s,\"stop_sequences\":[\"zq-never\",\"%s\"]}", msg,
                     stream ? "true" : "false", stop);
            REQUIRE(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 200);
            char want_seq[64];
            snprintf(want_seq, sizeof(want_seq), "\"stop_sequence\":\"%s\"", stop);
            CHECK(strstr(out, "\"stop_reason\":\"stop_sequence\"") && strstr(out, want_seq), "stop '%s': %s", stop,
                  out);
        }
    }
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

#include "../src/server/srv_impl.h"

// Feeds in to the splitter t in pieces of step bytes (the last one shorter), then flushes it: the
// answer into *content, the reasoning into *reasoning (both NUL-terminated; the caller frees them).
static void think_in_pieces(srv_think t, const char *in, size_t step, srv_buf *content, srv_buf *reasoning) {
    size_t n = strlen(in);
    *content = *reasoning = (srv_buf){0};
    srv_buf_add(content, "", 0);
    srv_buf_add(reasoning, "", 0);
    for (size_t i = 0; i < n; i += step) srv_think_feed(&t, in + i, n - i < step ? n - i : step, content, reasoning);
    srv_think_flush(&t, content, reasoning);
}

// The <think> splitter, fed in pieces of every size; started inside the reasoning (state 1)
// where the prompt opened <think> (Qwen3.5).
TEST(server_think_split) {
    static const struct {
        const char *in, *content, *reasoning;
        int start;
    } cases[] = {
        {"<think>\nabc</think>\n\nanswer", "answer", "\nabc", 0},
        {"\n<think>a<b</thi</think>x", "x", "a<b</thi", 0},
        {"hello <think>x</think>", "hello <think>x</think>", "", 0},
        {"<thin", "<thin", "", 0},
        {"<think>unfinished</th", "", "unfinished</th", 0},
        {"", "", "", 0},
        {"reason\n</think>\n\nanswer", "answer", "reason\n", 1},
        {"  hello", "  hello", "", 0},
        {"\n", "\n", "", 0},
        {" <b>", " <b>", "", 0},
        {"no end <think>", "", "no end <think>", 1},
        {"\n answer <think>x</think>", "answer <think>x</think>", "", 3},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t n = strlen(cases[c].in);
        for (size_t step = 1; step <= n + 1; step++) {
            srv_buf content, reasoning;
            think_in_pieces((srv_think){.state = cases[c].start}, cases[c].in, step, &content, &reasoning);
            CHECK(!strcmp(content.p, cases[c].content) && !strcmp(reasoning.p, cases[c].reasoning),
                  "'%s' in pieces of %zu: content '%s' reasoning '%s'", cases[c].in, step, content.p,
                  reasoning.p);
            srv_buf_free(&content);
            srv_buf_free(&reasoning);
        }
    }
    // Gemma 4's thought channel: the same splitter on its tags, started deciding (thinking on) or
    // at the answer (thinking off: the prompt closed an empty channel)
    static const struct {
        const char *in, *content, *reasoning;
        int start;
    } gemma[] = {
        {"<|channel>thought\nplan<channel|>answer", "answer", "\nplan", 0},
        {"<|channel>thought\nx<chan<channel|>\n\nok", "ok", "\nx<chan", 0},
        {"plain answer", "plain answer", "", 0},
        {"<|channel>though", "<|channel>though", "", 0},
        {"<think>x</think>", "<think>x</think>", "", 0},
        {"\nanswer<|channel>thought", "answer<|channel>thought", "", 3},
    };
    for (size_t c = 0; c < FT_ARRAY_LEN(gemma); c++) {
        size_t n = strlen(gemma[c].in);
        for (size_t step = 1; step <= n + 1; step++) {
            srv_buf content, reasoning;
            srv_think t = {.state = gemma[c].start, .open = "<|channel>thought", .close = "<channel|>"};
            think_in_pieces(t, gemma[c].in, step, &content, &reasoning);
            CHECK(!strcmp(content.p, gemma[c].content) && !strcmp(reasoning.p, gemma[c].reasoning),
                  "'%s' in pieces of %zu: content '%s' reasoning '%s'", gemma[c].in, step, content.p, reasoning.p);
            srv_buf_free(&content);
            srv_buf_free(&reasoning);
        }
    }
    // invalid UTF-8 becomes U+FFFD in JSON strings, valid text is kept
    json_t *sj = srv_json_str("a\xff"
                              "b\xe2\x82",
                              5);
    CHECK(!strcmp(json_string_value(sj), "a\xEF\xBF\xBD"
                                         "b\xEF\xBF\xBD\xEF\xBF\xBD"),
          "%s", json_string_value(sj));
    json_decref(sj);
}

// Where the splitter starts, from the chat prompt: inside the reasoning when the prompt opens
// <think> (Qwen3.5 thinking), at the answer with the white space before it dropped when it
// closes an empty think (thinking off: Qwen3's "<think>\n\n</think>\n\n", GLM's
// "<|assistant|>\n<think></think>", whose replies open with a newline), deciding otherwise (GLM
// thinking: "\n<think>..." may follow); gpt-oss's template takes the harmony splitter instead,
// Gemma 4's the splitter on its thought channel's tags.
TEST(server_chat_prompt_think_state) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-qwen2.gguf", test_shared_dir());
    tok_vocab *v = fixture_vocab(path);
    REQUIRE(v);
    ft_err err = {{0}};
    static const struct {
        enum tok_chat_template t;
        bool thinking;
        int state;
    } cases[] = {
        {TOK_CHAT_QWEN35, true, 1}, {TOK_CHAT_QWEN35, false, 3}, {TOK_CHAT_QWEN3, true, 0},
        {TOK_CHAT_QWEN3, false, 3}, {TOK_CHAT_GLM45, true, 0},   {TOK_CHAT_GLM45, false, 3},
        {TOK_CHAT_CHATML, true, 0}, {TOK_CHAT_GPT_OSS, true, 0},
        {TOK_CHAT_GEMMA4, true, 0}, {TOK_CHAT_GEMMA4, false, 3}, {TOK_CHAT_GEMMA4_V1, false, 3},
    };
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"Hi\"}]", 0, NULL);
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        srv_params sp = {0};
        tok_chat *chat = tok_chat_load(NULL, tok_chat_name(cases[c].t), &err);
        REQUIRE(chat, "%s", err.msg);
        sp.chat = chat;
        srv_job j = {0};
        j.split_think = true;
        CHECK(srv_chat_prompt(&sp, v, msgs, NULL, cases[c].thinking, NULL, NULL, NULL, &j, &err), "%s", err.msg);
        tok_chat_free(chat);
        CHECK(j.think.state == cases[c].state, "%s, thinking %d: state %d", tok_chat_name(cases[c].t),
              cases[c].thinking, j.think.state);
        CHECK(j.think.harmony == (cases[c].t == TOK_CHAT_GPT_OSS), "%s: harmony %d", tok_chat_name(cases[c].t),
              j.think.harmony);
        bool gemma = cases[c].t == TOK_CHAT_GEMMA4 || cases[c].t == TOK_CHAT_GEMMA4_V1;
        CHECK(gemma == (j.think.open && !strcmp(j.think.open, "<|channel>thought") && j.think.close &&
                        !strcmp(j.think.close, "<channel|>")),
              "%s: the thought channel's tags", tok_chat_name(cases[c].t));
        tok_ids_free(&j.prompt);
    }
    json_decref(msgs);
    tok_vocab_free(v);
}

// The Messages API stream: a <think> section becomes a thinking block before the text block,
// whatever the pieces the text arrives in; the events follow Anthropic's order.
typedef struct events {
    char names[64][24];
    json_t *data[64];
    int n;
} events;

static void collect(void *ctx, srv_job *j, const char *event, json_t *data) {
    (void)j;
    events *e = ctx;
    if (e->n == 64) {
        json_decref(data);
        return;
    }
    snprintf(e->names[e->n], sizeof(e->names[0]), "%s", event);
    e->data[e->n++] = data;
}

TEST(server_messages_thinking_blocks) {
    static const struct {
        const char *in, *thinking, *text, *order;
    } cases[] = {
        {"<think>\nabc</think>\n\nanswer", "\nabc", "answer", "thinking,text"},
        {"plain answer", "", "plain answer", "text"},
        {"", "", "", "text"},
        {"<think>only thoughts", "only thoughts", "", "thinking"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t n = strlen(cases[c].in);
        for (size_t step = 1; step <= n + 1; step++) {
            srv_job *j = srv_job_new();
            j->model_name = "m";
            j->split_think = true;
            events e = {0};
            for (size_t i = 0; i < n; i += step)
                srv_anthropic_stream(j, cases[c].in + i, n - i < step ? n - i : step, false, collect, &e);
            srv_anthropic_stream(j, "", 0, true, collect, &e);
            char thinking[256] = "", text[256] = "", order[64] = "";
            int open = -1, next = 0;
            bool ok = e.n >= 3 && !strcmp(e.names[0], "message_start") &&
                      !strcmp(e.names[e.n - 2], "message_delta") && !strcmp(e.names[e.n - 1], "message_stop");
            for (int k = 1; k < e.n - 2 && ok; k++) {
                int idx = (int)json_integer_value(json_object_get(e.data[k], "index"));
                if (!strcmp(e.names[k], "content_block_start")) {
                    const char *type =
                        json_string_value(json_object_get(json_object_get(e.data[k], "content_block"), "type"));
                    ok = open < 0 && idx == next++ && type;
                    if (ok) snprintf(order + strlen(order), sizeof(order) - strlen(order), "%s%s", *order ? "," : "", type);
                    open = idx;
                } else if (!strcmp(e.names[k], "content_block_delta")) {
                    json_t *d = json_object_get(e.data[k], "delta");
                    const char *type = json_string_value(json_object_get(d, "type"));
                    ok = idx == open && type;
                    if (ok && !strcmp(type, "thinking_delta"))
                        strncat(thinking, json_string_value(json_object_get(d, "thinking")), 100);
                    else if (ok && !strcmp(type, "text_delta"))
                        strncat(text, json_string_value(json_object_get(d, "text")), 100);
                    else
                        ok = false;
                } else {
                    ok = !strcmp(e.names[k], "content_block_stop") && idx == open;
                    open = -1;
                }
            }
            CHECK(ok && open < 0, "'%s' in pieces of %zu: bad event sequence", cases[c].in, step);
            CHECK(!strcmp(thinking, cases[c].thinking) && !strcmp(text, cases[c].text) &&
                      !strcmp(order, cases[c].order),
                  "'%s' in pieces of %zu: blocks %s, thinking '%s', text '%s'", cases[c].in, step, order,
                  thinking, text);
            for (int k = 0; k < e.n; k++)
                json_decref(e.data[k]);
            srv_job_unref(j);
        }
    }
}

// gpt-oss's replies in the server (harmony channels, src/tokenizer/harmony.c): through the
// reasoning splitter of both APIs in pieces of every size (analysis to reasoning, final and a
// preamble to the answer, a tool call nowhere); the Messages API stream's thinking block before
// its text block; the chat request's reasoning_effort rendered into the prompt for gpt-oss's
// template, refused for another template (or ignored with --lenient), checked for its values.
TEST(server_gpt_oss_channels) {
    static const struct {
        const char *in, *content, *reasoning;
    } cases[] = {
        {"<|channel|>analysis<|message|>Adding.<|end|><|start|>assistant<|channel|>final<|message|>4", "4", "Adding."},
        {"<|channel|>commentary<|message|>Let me see.<|end|><|start|>assistant<|channel|>analysis<|message|>hm<|end|>"
         "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|end|><|start|>assistant"
         "<|channel|>final<|message|>ok",
         "Let me see.ok", "hm"},
        {"no channels at all", "no channels at all", ""},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t n = strlen(cases[c].in);
        for (size_t step = 1; step <= n; step++) {
            srv_think t = {.harmony = true};
            tok_harmony_init(&t.h, false);
            srv_buf content, reasoning;
            think_in_pieces(t, cases[c].in, step, &content, &reasoning);
            CHECK(!strcmp(content.p, cases[c].content) && !strcmp(reasoning.p, cases[c].reasoning),
                  "case %zu in pieces of %zu: content '%s' reasoning '%s'", c, step, content.p, reasoning.p);
            srv_buf_free(&content);
            srv_buf_free(&reasoning);
        }
    }
    // the Messages API: a thinking block, then the text block
    const char *reply = cases[0].in;
    for (size_t step = 1; step <= strlen(reply); step += 3) {
        srv_job *j = srv_job_new();
        j->model_name = "m";
        j->split_think = true;
        j->think.harmony = true;
        tok_harmony_init(&j->think.h, false);
        events e = {0};
        for (size_t i = 0; i < strlen(reply); i += step)
            srv_anthropic_stream(j, reply + i, FT_MIN(step, strlen(reply) - i), false, collect, &e);
        srv_anthropic_stream(j, "", 0, true, collect, &e);
        char order[128] = "", thinking[64] = "", text[64] = "";
        for (int k = 0; k < e.n; k++) {
            if (!strcmp(e.names[k], "content_block_start"))
                snprintf(order + strlen(order), sizeof(order) - strlen(order), "%s%s", *order ? "," : "",
                         json_string_value(json_object_get(json_object_get(e.data[k], "content_block"), "type")));
            json_t *d = json_object_get(e.data[k], "delta");
            if (json_is_string(json_object_get(d, "thinking"))) strncat(thinking, json_string_value(json_object_get(d, "thinking")), 30);
            if (json_is_string(json_object_get(d, "text"))) strncat(text, json_string_value(json_object_get(d, "text")), 30);
        }
        CHECK(!strcmp(order, "thinking,text") && !strcmp(thinking, "Adding.") && !strcmp(text, "4"),
              "pieces of %zu: blocks %s, thinking '%s', text '%s'", step, order, thinking, text);
        for (int k = 0; k < e.n; k++) json_decref(e.data[k]);
        srv_job_unref(j);
    }
    // reasoning_effort into the prompt (a vocabulary without harmony tokens: the markup as text),
    // with the built-ins and with Jinja templates as a GGUF's own is served: gpt-oss's own text
    // (llama.cpp's copy; harmony, its reasoning passed as "thinking"), one that names
    // reasoning_effort, and one that does not
    char path[1024];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-qwen2.gguf", test_shared_dir());
    tok_vocab *v = fixture_vocab(path);
    REQUIRE(v);
    ft_err err = {{0}};
    srv_params p = srv_default_params();
    const char *llama_src = oracle_llama_src();
    char gpt_oss[1024] = "", named[1024], plain[1024];
    if (llama_src) snprintf(gpt_oss, sizeof(gpt_oss), "%s/models/templates/openai-gpt-oss-120b.jinja", llama_src);
    snprintf(named, sizeof(named), "%s", test_path("effort.jinja"));
    snprintf(plain, sizeof(plain), "%s", test_path("no-effort.jinja"));
    static const char turns[] = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
    FILE *fp = fopen(named, "w");
    REQUIRE(fp && fputs(turns, fp) >= 0 && fputs("effort={{ reasoning_effort }}", fp) >= 0 && fclose(fp) == 0);
    fp = fopen(plain, "w");
    REQUIRE(fp && fputs(turns, fp) >= 0 && fclose(fp) == 0);
    static const char hi[] = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    static const char prefill[] = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
                                  "\"content\":\"The answer\",\"reasoning_content\":\"Adding.\"}]";
    const struct {
        const char *spec; // a built-in's name or a Jinja file ("": the file is missing, skipped)
        bool harmony, lenient;
        const char *body, *want; // want: in the prompt, or (after "400:") in the error
    } reqs[] = {
        {"gpt-oss", true, false, "{%s,\"reasoning_effort\":\"high\"}", "Reasoning: high\n\n"},
        {"gpt-oss", true, false, "{%s,\"chat_template_kwargs\":{\"reasoning_effort\":\"low\"}}", "Reasoning: low\n\n"},
        {"gpt-oss", true, false, "{%s}", "Reasoning: medium\n\n"},
        {"gpt-oss", true, false, "{%s,\"reasoning_effort\":\"max\"}",
         "400:'reasoning_effort' must be \"low\", \"medium\" or \"high\""},
        {"qwen3", false, false, "{%s,\"reasoning_effort\":\"low\"}",
         "400:the chat template in use (built-in qwen3 (--chat-template)) has no reasoning effort"},
        {"qwen3", false, true, "{%s,\"reasoning_effort\":\"low\"}", "<|im_start|>user\nhi<|im_end|>"},
        {gpt_oss, true, false, "{%s,\"reasoning_effort\":\"high\"}", "Reasoning: high\n\n"},
        {gpt_oss, true, false, "{%s,\"chat_template_kwargs\":{\"reasoning_effort\":\"low\"}}", "Reasoning: low\n\n"},
        {gpt_oss, true, false, "{%s}", "Reasoning: medium\n\n"},
        {named, false, false, "{%s,\"reasoning_effort\":\"low\"}", "<|im_start|>user\nhi<|im_end|>\neffort=low"},
        {plain, false, false, "{%s,\"reasoning_effort\":\"low\"}", "400:has no reasoning effort"},
        {plain, false, true, "{%s,\"reasoning_effort\":\"low\"}", "<|im_start|>user\nhi<|im_end|>"},
    };
    for (size_t r = 0; r < sizeof(reqs) / sizeof(reqs[0]); r++) {
        if (!*reqs[r].spec) continue;
        tok_chat *chat = tok_chat_load(NULL, reqs[r].spec, &err);
        REQUIRE(chat, "%s", err.msg);
        p.chat = chat;
        p.lenient = reqs[r].lenient;
        char text_body[512];
        snprintf(text_body, sizeof(text_body), reqs[r].body, hi);
        json_t *body = json_loads(text_body, 0, NULL);
        srv_job *j = srv_job_new();
        bool ok = srv_openai_parse_chat(&p, v, body, j, &err);
        bool want_err = !strncmp(reqs[r].want, "400:", 4);
        if (want_err) {
            CHECK(!ok && strstr(err.msg, reqs[r].want + 4), "request %zu: %s", r, ok ? "accepted" : err.msg);
        } else {
            char *text = ok ? tok_detokenize(v, j->prompt.ids, j->prompt.n, false, true, NULL) : NULL;
            CHECK(ok && text && strstr(text, reqs[r].want), "request %zu: %s", r, ok ? text : err.msg);
            CHECK(j->think.harmony == reqs[r].harmony, "request %zu: harmony %d", r, j->think.harmony);
            free(text);
        }
        srv_job_unref(j);
        json_decref(body);
        // gpt-oss's templates continue a prefill in the final channel, its reasoning kept before it
        if (reqs[r].harmony && !reqs[r].lenient && !want_err && strstr(reqs[r].body, "high")) {
            snprintf(text_body, sizeof(text_body), reqs[r].body, prefill);
            body = json_loads(text_body, 0, NULL);
            j = srv_job_new();
            ok = srv_openai_parse_chat(&p, v, body, j, &err);
            char *text = ok ? tok_detokenize(v, j->prompt.ids, j->prompt.n, false, true, NULL) : NULL;
            static const char tail[] = "<|start|>assistant<|channel|>analysis<|message|>Adding.<|end|>"
                                       "<|start|>assistant<|channel|>final<|message|>The answer";
            size_t n = text ? strlen(text) : 0;
            CHECK(ok && n >= strlen(tail) && !strcmp(text + n - strlen(tail), tail), "request %zu, prefill: %s", r,
                  ok ? text : err.msg);
            srv_buf content = {0}, reasoning = {0};
            srv_think_feed(&j->think, " is 4", 5, &content, &reasoning);
            srv_think_flush(&j->think, &content, &reasoning);
            CHECK(j->think.harmony && content.n == 5 && !memcmp(content.p, " is 4", 5) && !reasoning.n,
                  "request %zu, prefill: harmony %d, the reply's text as content '%.*s', reasoning '%.*s'", r,
                  j->think.harmony, (int)content.n, content.p ? content.p : "", (int)reasoning.n,
                  reasoning.p ? reasoning.p : "");
            srv_buf_free(&content);
            srv_buf_free(&reasoning);
            free(text);
            srv_job_unref(j);
            json_decref(body);
        }
        tok_chat_free(chat);
    }
    tok_vocab_free(v);
}

// A client that sends half a request and nothing more is dropped after --timeout; others are
// served meanwhile.
TEST(server_idle_timeout) {
    if (test_run("bash -c 'exit 0' 2>/dev/null", NULL, 0) != 0) {
        test_skip("bash is not installed");
        return;
    }
    SERVER_OR_SKIP(s, "--timeout 1");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; printf \"GET /health HTTP/1.1\\r\\n\" >&3; "
             "timeout 6 cat <&3 >/dev/null; echo $?' > '%s' 2>/dev/null &",
             s.port, test_path("idle.out"));
    test_run(cmd, NULL, 0);
    static char out[4096];
    CHECK(http(&s, "GET", "/health", NULL, NULL, out, sizeof(out)) == 200); // not blocked by the idle one
    char rc[16] = {0};
    for (int i = 0; i < 80 && !rc[0]; i++) { // up to 4 s
        sleep_ms(50);
        FILE *f = fopen(test_path("idle.out"), "r");
        if (f) {
            if (!fgets(rc, sizeof(rc), f)) rc[0] = 0;
            fclose(f);
        }
    }
    CHECK(!strcmp(rc, "0\n"), "the idle connection was not closed by the server (cat: '%s')", rc);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

static char *read_log(const server *s) {
    static char buf[1 << 16];
    buf[0] = 0;
    FILE *f = fopen(s->log, "r");
    if (!f) return buf;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

// CPU seconds a process has used (user and system), from /proc; -1 where unreadable.
static double cpu_seconds(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); // the command name may hold spaces
    unsigned long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

// Past the open-file limit accepting pauses, instead of spinning on the queued connection and
// logging every failed accept, and serving resumes once connections close (issue 18, item 3).
// Descriptors a process has open, or -1.
static int proc_fds(pid_t pid) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

// 100 idle connections to a server limited to 64 open files: with the default connection cap
// (what the limit leaves) the listener pauses before descriptors run out, with a cap above the
// limit accepting fails (EMFILE) and backs off; either way the log says so once, the server
// stays idle and answers again once the connections close.
static void fd_flood_case(const char *extra, const char *want_log) {
    g_server_nofile = 64;
    SERVER_OR_SKIP(s, extra);
    g_server_nofile = 0;
    int fds_idle = proc_fds(s.pid);
    enum { N_CONN = 100 };
    int fds[N_CONN], n = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (; n < N_CONN; n++) { // connections beyond the limit wait in the listen queue
        fds[n] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[n] < 0 || connect(fds[n], (struct sockaddr *)&a, sizeof(a)) != 0) break;
    }
    CHECK(n == N_CONN, "only %d connections opened", n);
    double c0 = cpu_seconds(s.pid);
    sleep_ms(2000);
    double c1 = cpu_seconds(s.pid);
    int fds_full = proc_fds(s.pid);
    struct stat st = {0};
    stat(s.log, &st);
    CHECK(c0 >= 0 && c1 - c0 < 0.25, "%s: the server spent %.2f s of CPU in 2 s with %d idle connections", extra,
          c1 - c0, n);
    CHECK(st.st_size < 4096, "%s: the log grew to %ld bytes", extra, (long)st.st_size);
    CHECK(strstr(read_log(&s), want_log), "%s: no log line says '%s' (%s)", extra, want_log, s.log);
    // the cap leaves descriptors free (32 beside those open at start); EMFILE leaves none
    if (!strstr(extra, "--max-connections"))
        CHECK(fds_idle > 0 && fds_full <= 64 - 16, "%d descriptors open at the cap (%d idle)", fds_full, fds_idle);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    static char out[4096];
    int status = 0;
    for (int i = 0; i < 30 && status != 200; i++) { // the pause is at most 1 s
        status = http(&s, "GET", "/health", NULL, NULL, out, sizeof(out));
        if (status != 200) sleep_ms(100);
    }
    CHECK(status == 200, "%s: /health after the connections closed: %d", extra, status);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

TEST(server_fd_exhaustion_pauses_accepts) {
    if (access("/proc/self/stat", R_OK) != 0) {
        test_skip("no /proc");
        return;
    }
    fd_flood_case("", "new ones wait until one closes");
    fd_flood_case("--max-connections 10000", "pausing accepts");
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A loopback connection to the server, or -1.
static int connect_server(const server *s) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// Sends req a few bytes every step_ms until the server closes the connection or all is sent;
// returns the seconds from the first byte to the close (-1: never closed, the reply read into
// out).
static double trickle(const server *s, const char *req, int chunk, int step_ms, char *out, size_t cap) {
    int fd = connect_server(s);
    if (fd < 0) return -2;
    struct timeval tv = {0, 20000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    double t0 = mono_s(), closed = -1;
    size_t len = strlen(req), sent = 0, got = 0;
    out[0] = 0;
    while (closed < 0) {
        if (sent < len) {
            size_t n = FT_MIN((size_t)chunk, len - sent);
            if (send(fd, req + sent, n, MSG_NOSIGNAL) != (ssize_t)n) closed = mono_s() - t0;
            sent += n;
        }
        ssize_t r = recv(fd, out + got, cap - 1 - got, 0);
        if (r == 0) closed = mono_s() - t0;
        if (r > 0) got += (size_t)r, out[got] = 0;
        if (sent == len && strstr(out, "\r\n\r\n") && strstr(out, "}")) break; // a whole reply
        if (mono_s() - t0 > 10) break;
        sleep_ms(step_ms);
    }
    close(fd);
    return closed;
}

// A client that trickles its request is closed at --timeout (evhttp's own timeout restarts with
// every byte), while others are served meanwhile and a slow but whole request within the deadline
// is answered (issue 18, item 3).
TEST(server_trickled_request_closed_at_timeout) {
    SERVER_OR_SKIP(s, "--timeout 2");
    static char out[8192], other[4096];
    const char *body = "{\"prompt\":\"hi\",\"max_tokens\":1,\"temperature\":0}";
    char req[512];
    snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    // headers: a byte every 200 ms would take 30 s
    double t = trickle(&s, req, 1, 200, out, sizeof(out));
    CHECK(t >= 1.5 && t < 4.5, "trickled headers: closed after %.2f s (--timeout 2)", t);
    // the body: headers at once, then a byte every 200 ms
    size_t head = (size_t)(strstr(req, "\r\n\r\n") - req) + 4;
    int fd = connect_server(&s);
    REQUIRE(fd >= 0, "connect");
    CHECK(send(fd, req, head, MSG_NOSIGNAL) == (ssize_t)head, "send");
    double t0 = mono_s(), closed = -1;
    struct timeval tv = {0, 20000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (size_t i = head; closed < 0 && mono_s() - t0 < 10; i++) {
        if (i < strlen(req)) send(fd, req + i, 1, MSG_NOSIGNAL);
        char c;
        if (recv(fd, &c, 1, 0) == 0) closed = mono_s() - t0;
        // meanwhile another client is served at once
        if (i == head + 3) CHECK(http(&s, "GET", "/health", NULL, NULL, other, sizeof(other)) == 200, "%s", other);
        sleep_ms(200);
    }
    close(fd);
    CHECK(closed >= 1.5 && closed < 4.5, "trickled body: closed after %.2f s (--timeout 2)", closed);
    // keep-alive: after a stream that outlasts the watch's sweeps, the connection's next request
    // has its deadline too
    const char *sbody = "{\"prompt\":\"Go\",\"max_tokens\":3000,\"temperature\":0,\"stream\":true,\"ignore_eos\":true}";
    char sreq[512];
    snprintf(sreq, sizeof(sreq), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s", strlen(sbody), sbody);
    fd = connect_server(&s);
    REQUIRE(fd >= 0, "connect");
    CHECK(send(fd, sreq, strlen(sreq), MSG_NOSIGNAL) == (ssize_t)strlen(sreq), "send");
    double ts = mono_s();
    size_t got = 0;
    out[0] = 0;
    while (!strstr(out, "data: [DONE]") || !strstr(strstr(out, "data: [DONE]"), "\r\n0\r\n\r\n")) {
        if (mono_s() - ts > 20) break;
        if (got > sizeof(out) - 512) { // keep the tail only
            memmove(out, out + got - 64, 64);
            got = 64;
            out[got] = 0;
        }
        ssize_t r = recv(fd, out + got, sizeof(out) - 1 - got, 0);
        if (r == 0) break;
        if (r > 0) got += (size_t)r, out[got] = 0;
    }
    double stream_s = mono_s() - ts;
    CHECK(strstr(out, "data: [DONE]") != NULL, "the stream ended (%.2f s)", stream_s);
    t0 = mono_s();
    closed = -1;
    for (size_t i = 0; closed < 0 && mono_s() - t0 < 10; i++) {
        if (i < strlen(req)) send(fd, req + i, 1, MSG_NOSIGNAL);
        char c;
        if (recv(fd, &c, 1, 0) == 0) closed = mono_s() - t0;
        sleep_ms(200);
    }
    close(fd);
    CHECK(stream_s > 0.5, "the stream took %.2f s: too short to cross a sweep", stream_s);
    CHECK(closed >= 1.5 && closed < 4.5, "keep-alive, trickled after a %.2f s stream: closed after %.2f s", stream_s,
          closed);
    // a whole request in pieces over about a second is answered
    t = trickle(&s, req, 40, 150, out, sizeof(out));
    CHECK(t < 0 && strstr(out, " 200 ") && strstr(out, "\"choices\""), "slow request within the deadline: %.2f s, %.200s",
          t, out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
    const char *log = read_log(&s), *line = "sent no whole request within --timeout 2 s";
    const char *at = strstr(log, line);
    CHECK(at && !strstr(at + strlen(line), line), "one log line for both closes: %s", log);
}

// ---------------------------------------------------------------------------------------------
// Half-closed clients (issue 18, item 4): a client may shut down its sending side once its
// request is out (shutdown(SHUT_WR)); it still reads, and gets its whole answer.

// One HTTP response in raw[at..n): interim 1xx responses skipped, the body (de-chunked) into
// body, NUL-terminated. Returns the offset past it, or 0 when raw holds no whole response.
static size_t parse_response(const char *raw, size_t n, size_t at, int *status, char *body, size_t cap) {
    for (;;) {
        const char *p = raw + at;
        const char *end = at < n ? memmem(p, n - at, "\r\n\r\n", 4) : NULL;
        if (!end || strncmp(p, "HTTP/1.", 7) || n - at < 12) return 0;
        int code = atoi(p + 9);
        size_t b = (size_t)(end - raw) + 4;
        if (code >= 100 && code < 200) { // interim: a client reads past it
            at = b;
            continue;
        }
        *status = code;
        bool chunked = false;
        long clen = -1;
        for (const char *h = strstr(p, "\r\n") + 2; h < end; h = strstr(h, "\r\n") + 2) {
            if (!strncasecmp(h, "Transfer-Encoding: chunked", 26)) chunked = true;
            if (!strncasecmp(h, "Content-Length:", 15)) clen = atol(h + 15);
        }
        size_t len = 0;
        if (chunked) {
            for (;;) {
                const char *eol = b < n ? memmem(raw + b, n - b, "\r\n", 2) : NULL;
                if (!eol) return 0;
                size_t sz = (size_t)strtoul(raw + b, NULL, 16);
                b = (size_t)(eol - raw) + 2;
                if (n - b < sz + 2) return 0;
                if (sz == 0) { // no trailers
                    b += 2;
                    break;
                }
                if (len + sz < cap) memcpy(body + len, raw + b, sz), len += sz;
                b += sz + 2;
            }
        } else {
            size_t sz = clen >= 0 ? (size_t)clen : n - b;
            if (n - b < sz) return 0;
            len = sz < cap ? sz : cap - 1;
            memcpy(body, raw + b, len);
            b += sz;
        }
        body[len] = 0;
        return b;
    }
}

// A POST of body to path (HTTP/1.1), with Connection: close when asked.
static void post_request(char *out, size_t cap, const char *path, const char *body, bool close_after) {
    snprintf(out, cap,
             "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %zu\r\n\r\n%s", path,
             close_after ? "Connection: close\r\n" : "", strlen(body), body);
}

enum { HALF_CLOSE_NONE, HALF_CLOSE_AT_ONCE, HALF_CLOSE_AFTER_FIRST_BYTES };

// Sends reqs (one or more whole requests) on a new connection, half-closes it when asked (right
// after sending, or once the reply's first bytes are in), and reads until the server closes the
// connection, at most 30 s. Returns the bytes read into raw (NUL-terminated), or -1 when the
// server did not close the connection.
static long raw_exchange(const server *s, const char *reqs, int half_close, char *raw, size_t cap) {
    int fd = connect_server(s);
    if (fd < 0) return -1;
    struct timeval tv = {0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    size_t len = strlen(reqs), got = 0;
    if (send(fd, reqs, len, MSG_NOSIGNAL) != (ssize_t)len) {
        close(fd);
        return -1;
    }
    if (half_close == HALF_CLOSE_AT_ONCE) shutdown(fd, SHUT_WR);
    double t0 = mono_s();
    bool closed = false;
    while (!closed && got < cap - 1 && mono_s() - t0 < 30) {
        ssize_t r = recv(fd, raw + got, cap - 1 - got, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) closed = true;
        if (r > 0) {
            if (half_close == HALF_CLOSE_AFTER_FIRST_BYTES && got == 0) shutdown(fd, SHUT_WR);
            got += (size_t)r;
        }
    }
    raw[got] = 0;
    close(fd);
    return closed ? (long)got : -1;
}

// The generated text of a reply of any of the four APIs, streamed (SSE) or not, into text;
// returns whether the reply is whole (a stream's last event, a non-streamed answer's end).
static void add_text(json_t *o, char *text, size_t cap, size_t *n) {
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    json_t *t = json_object_get(json_object_get(ch, "message"), "content"); // OpenAI chat
    if (!t) t = json_object_get(json_object_get(ch, "delta"), "content");    // its stream
    if (!t) t = json_object_get(ch, "text");                                  // OpenAI completions
    if (!t) t = json_object_get(o, "content");                                // llama-server; Anthropic's blocks
    if (json_is_array(t)) t = json_object_get(json_array_get(t, 0), "text");
    if (!t) t = json_object_get(json_object_get(o, "delta"), "text"); // Anthropic's stream
    if (json_is_string(t) && *n + json_string_length(t) < cap) {
        memcpy(text + *n, json_string_value(t), json_string_length(t));
        *n += json_string_length(t);
        text[*n] = 0;
    }
}

static bool answer_text(const char *body, bool stream, char *text, size_t cap) {
    size_t n = 0;
    text[0] = 0;
    if (!stream) {
        json_t *o = json_loads(body, 0, NULL);
        if (o) add_text(o, text, cap, &n);
        bool whole = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "finish_reason") ||
                     json_object_get(o, "stop_reason") || json_is_true(json_object_get(o, "stop"));
        json_decref(o);
        return whole;
    }
    bool last = false;
    for (const char *p = body; (p = strstr(p, "data: ")); p += 6) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p - 6) : strlen(p + 6);
        if (len == 6 && !strncmp(p + 6, "[DONE]", 6)) last = true; // OpenAI
        json_t *o = json_loadb(p + 6, len, 0, NULL);
        if (!o) continue;
        add_text(o, text, cap, &n);
        last = last || json_is_true(json_object_get(o, "stop")) || // llama-server
               !strcmp(json_string_value(json_object_get(o, "type")) ?: "", "message_stop"); // Anthropic
        json_decref(o);
    }
    return last;
}

// A client that half-closes once its request is out, or while the answer streams in, gets the
// same whole answer as one that does not (greedy), on every generation route, streamed or not,
// also for two requests sent at once; the server closes the connection after the last answer.
TEST(server_half_closed_client_served) {
    SERVER_OR_SKIP(s, NULL);
    static const struct {
        const char *path, *body;
    } cases[] = {
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":16,\"temperature\":0%s}"},
        {"/v1/completions", "{\"prompt\":\"The quick brown fox\",\"max_tokens\":16,\"temperature\":0%s}"},
        {"/v1/messages",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":16,\"temperature\":0%s}"},
        {"/completion", "{\"prompt\":\"The quick brown fox\",\"n_predict\":16,\"temperature\":0%s}"},
    };
    static char raw[1 << 18], body[1 << 17], want[8][4096], got[4096], req[4096], two[8192];
    int status = 0;
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        for (int stream = 0; stream < 2; stream++) {
            char b[512];
            snprintf(b, sizeof(b), cases[c].body, stream ? ",\"stream\":true" : "");
            char *w = want[2 * c + (size_t)stream];
            post_request(req, sizeof(req), cases[c].path, b, true);
            long n = raw_exchange(&s, req, HALF_CLOSE_NONE, raw, sizeof(raw));
            REQUIRE(n > 0 && parse_response(raw, (size_t)n, 0, &status, body, sizeof(body)) && status == 200,
                    "%s: %.300s", b, raw);
            CHECK(answer_text(body, stream, w, sizeof(want[0])) && w[0], "%s %s: %.300s", cases[c].path, b, body);
            for (int when = HALF_CLOSE_AT_ONCE; when <= HALF_CLOSE_AFTER_FIRST_BYTES; when++) {
                post_request(req, sizeof(req), cases[c].path, b, false);
                n = raw_exchange(&s, req, when, raw, sizeof(raw));
                status = 0;
                got[0] = 0;
                size_t end = n > 0 ? parse_response(raw, (size_t)n, 0, &status, body, sizeof(body)) : 0;
                CHECK(n >= 0, "%s %s (half-closed %s): the server kept the connection open", cases[c].path, b,
                      when == HALF_CLOSE_AT_ONCE ? "at once" : "mid-answer");
                CHECK(end && status == 200 && answer_text(body, stream, got, sizeof(got)) && !strcmp(got, w),
                      "%s %s (half-closed %s): status %d, '%s' against '%s': %.300s", cases[c].path, b,
                      when == HALF_CLOSE_AT_ONCE ? "at once" : "mid-answer", status, got, w, raw);
            }
        }
    }
    // two requests at once (a streamed chat after a completion), then the half-close
    char b1[512], b2[512];
    snprintf(b1, sizeof(b1), cases[1].body, "");
    snprintf(b2, sizeof(b2), cases[0].body, ",\"stream\":true");
    post_request(req, sizeof(req), cases[1].path, b1, false);
    post_request(two, sizeof(two), cases[0].path, b2, false);
    memmove(two + strlen(req), two, strlen(two) + 1);
    memcpy(two, req, strlen(req));
    long n = raw_exchange(&s, two, HALF_CLOSE_AT_ONCE, raw, sizeof(raw));
    status = 0;
    got[0] = 0;
    size_t end = n > 0 ? parse_response(raw, (size_t)n, 0, &status, body, sizeof(body)) : 0;
    CHECK(end && status == 200 && answer_text(body, false, got, sizeof(got)) && !strcmp(got, want[2]),
          "pipelined, first: status %d, '%s' against '%s': %.300s", status, got, want[2], raw);
    status = 0;
    got[0] = 0;
    end = end ? parse_response(raw, (size_t)n, end, &status, body, sizeof(body)) : 0;
    CHECK(end && status == 200 && answer_text(body, true, got, sizeof(got)) && !strcmp(got, want[1]),
          "pipelined, second: status %d, '%s' against '%s': %.300s", status, got, want[1], raw);
    // HTTP/1.0: a stream half-closed once it began is served; a client may not be sent an
    // interim response, so one half-closed before its answer began counts as gone
    const char *long_one = "{\"prompt\":\"Go\",\"max_tokens\":4000,\"temperature\":0,\"ignore_eos\":true}";
    snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.0\r\nContent-Length: %zu\r\n\r\n%s", strlen(long_one),
             long_one);
    n = raw_exchange(&s, req, HALF_CLOSE_AT_ONCE, raw, sizeof(raw));
    status = 0;
    end = n > 0 ? parse_response(raw, (size_t)n, 0, &status, body, sizeof(body)) : 0;
    CHECK(end && status == 503 && strstr(body, "the client closed the connection"), "HTTP/1.0: %.300s", raw);
    snprintf(b2, sizeof(b2), cases[1].body, ",\"stream\":true");
    snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.0\r\nContent-Length: %zu\r\n\r\n%s", strlen(b2), b2);
    n = raw_exchange(&s, req, HALF_CLOSE_AFTER_FIRST_BYTES, raw, sizeof(raw));
    status = 0;
    got[0] = 0;
    end = n > 0 ? parse_response(raw, (size_t)n, 0, &status, body, sizeof(body)) : 0;
    CHECK(end && status == 200 && answer_text(body, true, got, sizeof(got)) && !strcmp(got, want[3]),
          "HTTP/1.0 stream: status %d, '%s' against '%s': %.300s", status, got, want[3], raw);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// Sends req on a new connection and half-closes it; for a stream, reads until its first event
// is in; then, after wait_ms, closes the connection (what it left unread, if any, unread).
static bool half_close_then_close(const server *s, const char *req, bool stream, int wait_ms) {
    int fd = connect_server(s);
    if (fd < 0) return false;
    size_t len = strlen(req);
    bool ok = send(fd, req, len, MSG_NOSIGNAL) == (ssize_t)len && shutdown(fd, SHUT_WR) == 0;
    if (ok && stream) {
        struct timeval tv = {0, 100000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        static char in[1 << 16];
        size_t got = 0;
        in[0] = 0;
        double t0 = mono_s();
        while (!strstr(in, "data: ") && got < sizeof(in) - 1 && mono_s() - t0 < 10) {
            ssize_t r = recv(fd, in + got, sizeof(in) - 1 - got, 0);
            if (r == 0) break;
            if (r > 0) got += (size_t)r, in[got] = 0;
        }
        ok = strstr(in, "data: ") != NULL;
    }
    sleep_ms(wait_ms);
    close(fd);
    return ok;
}

// A half-closed client that then closes (it gave up) is still found gone: its request is
// cancelled and its KV freed, streamed (the next event meets the reset) or not (the close of a
// socket with the interim response unread is a reset).
TEST(server_half_closed_then_closed_is_cancelled) {
    SERVER_OR_SKIP(s, "-c 4096");
    static const char *bodies[] = {
        "{\"prompt\":\"Go\",\"max_tokens\":4000,\"stream\":true,\"temperature\":0,\"ignore_eos\":true}",
        "{\"prompt\":\"Go\",\"max_tokens\":4000,\"temperature\":0,\"ignore_eos\":true}",
    };
    for (int round = 1; round <= 2; round++) {
        char req[1024];
        post_request(req, sizeof(req), "/v1/completions", bodies[round - 1], false);
        CHECK(half_close_then_close(&s, req, round == 1, 300), "round %d: no stream", round);
        long used = -1, cancelled = -1, running = -1;
        for (int i = 0; i < 100; i++) { // up to 5 s (4000 tokens take far longer)
            used = stat_int(&s, "kv_cache", "used_tokens");
            cancelled = stat_int(&s, "requests", "cancelled");
            running = stat_int(&s, "running", NULL);
            if (used == 0 && cancelled == round && running == 0) break;
            sleep_ms(50);
        }
        CHECK(cancelled == round, "round %d: cancelled %ld", round, cancelled);
        CHECK(used == 0 && running == 0, "round %d: KV positions still in use: %ld, running %ld", round, used,
              running);
    }
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// ---------------------------------------------------------------------------------------------
// Expert cache flags and endpoints on a machine without a GPU

// FreeToken's command line of the A/B, as written, with a GGUF path. Without a GPU the MoE
// flags get one notice and the CPU serves; with one, the expert cache serves.
TEST(server_freetoken_command_line) {
    char extra[1024];
    snprintf(extra, sizeof(extra),
             "--model %s --tp-size 1 --attn triton --kv-cache-dtype q8_0 --num-tokens 8192 --kv-reserve-tokens 8192 "
             "--max-running-requests 1 --cuda-graph-max-bs 0 --memory-ratio 0.95 --moe-backend offload "
             "--moe-cache-size 480 --disable-moe-prefill-overlap",
             model_path());
    SERVER_OR_SKIP(s, extra);
    static char out[1 << 16];
    CHECK(http(&s, "POST", "/v1/completions", "{\"prompt\":\"hello\",\"max_tokens\":4,\"temperature\":0}", NULL, out,
               sizeof(out)) == 200, "%s", out);
    long cap = stat_int(&s, "kv_cache", "capacity_tokens");
    CHECK(cap > 0 && cap <= 8192, "one sequence of at most --num-tokens positions: %ld", cap);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
    const char *log = read_log(&s);
    CHECK(strstr(log, "--tp-size 1: ft runs the model on one GPU") != NULL, "%s", log);
    CHECK(strstr(log, "--attn triton: ignored") != NULL, "%s", log);
    if (ft_backend_device_count(FT_PLACEMENT_CUDA) == 0) {
        const char *phrase = "so the CPU runs the whole model", *notice = strstr(log, phrase);
        CHECK(notice && !strstr(notice + strlen(phrase), phrase), "exactly one notice: %s", log);
        CHECK(strstr(log, "no GPU was found") != NULL, "%s", log);
        CHECK(strstr(log, "--moe-backend") && strstr(log, "--moe-cache-size") && strstr(log, "--kv-reserve-tokens"),
              "the notice names the flags: %s", log);
    }
}

// --num-tokens is the KV capacity over all sequences, in whole blocks of 64 positions.
TEST(server_num_tokens_shared_by_sequences) {
    SERVER_OR_SKIP(s, "--num-tokens 200 --max-running-requests 2 --device cpu");
    CHECK(stat_int(&s, "kv_cache", "capacity_tokens") == 256, "%ld", stat_int(&s, "kv_cache", "capacity_tokens"));
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// Without an expert cache: /v1/stats says so, /metrics has no cache series, and a resize is
// refused with an error in the OpenAI shape (bad bodies too), the server carrying on.
TEST(server_cache_endpoints_without_a_cache) {
    SERVER_OR_SKIP(s, "--device cpu --moe-backend offload --api-key sekrit --admin-key adm");
    const char *admin = "-H 'Authorization: Bearer adm'";
    static char out[1 << 16];
    REQUIRE(http(&s, "GET", "/v1/stats", NULL, "-H 'x-api-key: sekrit'", out, sizeof(out)) == 200);
    json_t *st = json_loads(out, 0, NULL);
    REQUIRE(st, "/v1/stats is not JSON");
    CHECK(json_is_null(json_object_get(st, "moe_cache")), "moe_cache must be null without a cache");
    json_decref(st);
    REQUIRE(http(&s, "GET", "/metrics", NULL, "-H 'x-api-key: sekrit'", out, sizeof(out)) == 200);
    CHECK(strstr(out, "ft_kv_cache_capacity_tokens") && !strstr(out, "ft_moe_"), "%s", out);
    // the admin route takes the admin key, not the API key
    CHECK(http(&s, "POST", "/v1/cache/rebuild", "{}", "-H 'x-api-key: sekrit'", out, sizeof(out)) == 401, "%s", out);
    static const struct {
        const char *body, *msg;
    } cases[] = {
        {"{\"moe_cache_size\":64}", "no expert cache to resize"},
        {"{}", "moe_cache_size (expert slots) is required"},
        {"{\"moe_cache_size\":0}", "moe_cache_size"},
        {"{\"moe_cache_size\":\"64\"}", "moe_cache_size"},
        {"{\"moe_cache_size\":1.5}", "moe_cache_size"},
        {"[64]", "JSON object"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        int code = http(&s, "POST", "/v1/cache/rebuild", cases[i].body, admin, out, sizeof(out));
        CHECK(code == 400, "%s: %d %s", cases[i].body, code, out);
        json_t *e = json_loads(out, 0, NULL);
        const char *msg = json_string_value(json_object_get(json_object_get(e, "error"), "message"));
        CHECK(msg && strstr(msg, cases[i].msg), "%s: %s", cases[i].body, out);
        json_decref(e);
    }
    CHECK(http(&s, "GET", "/v1/cache/rebuild", NULL, admin, out, sizeof(out)) == 405);
    CHECK(http(&s, "GET", "/health", NULL, NULL, out, sizeof(out)) == 200 && strstr(out, "ok"));
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// The token ids of text (no quotes or backslashes in it) as a completion's prompt reads them,
// into ids (cap of them); returns how many (-1 on failure).
static long tokenize_ids(const server *s, const char *text, int32_t *ids, long cap) {
    static char body[16384], out[1 << 17];
    snprintf(body, sizeof(body), "{\"content\":\"%s\",\"add_special\":true}", text);
    if (http(s, "POST", "/tokenize", body, NULL, out, sizeof(out)) != 200) return -1;
    json_t *o = json_loads(out, 0, NULL), *t = json_object_get(o, "tokens");
    long n = json_is_array(t) ? (long)json_array_size(t) : -1;
    for (long i = 0; i < n && i < cap; i++) ids[i] = (int32_t)json_integer_value(json_array_get(t, (size_t)i));
    json_decref(o);
    return n;
}

// A prompt that starts like an earlier one reuses its KV blocks, and the leading rows of the
// block where the two part: usage says how many tokens came from the cache (both APIs), all
// those the two prompts share; /v1/stats and /metrics count them, and the reply is the one a
// server without the cache gives (greedy: the CPU's bits are the same).
static void long_prompt(char *p, size_t cap, const char *tail) {
    size_t n = 0;
    for (int i = 0; i < 40 && n + 64 < cap; i++)
        n += (size_t)snprintf(p + n, cap - n, "Line %d of the system prompt says the tool is ready. ", i);
    snprintf(p + n, cap - n, "%s", tail);
}

static long usage_int(const char *body, const char *a, const char *b) {
    json_t *o = json_loads(body, 0, NULL);
    json_t *x = json_object_get(json_object_get(o, "usage"), a);
    if (b) x = json_object_get(x, b);
    long v = json_is_integer(x) ? (long)json_integer_value(x) : -1;
    json_decref(o);
    return v;
}

TEST(server_prefix_cache_reuses_prompts) {
    static char p1[8192], p2[8192], body[16384], out[1 << 16], plain[1 << 16];
    long_prompt(p1, sizeof(p1), "First question: what is one plus one?");
    long_prompt(p2, sizeof(p2), "Second question: name a colour.");
    SERVER_OR_SKIP(s, "--device cpu -c 2048");
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":8,\"temperature\":0}", p1);
    REQUIRE(http(&s, "POST", "/v1/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
    CHECK(usage_int(out, "prompt_tokens_details", "cached_tokens") == 0, "nothing cached yet: %s", out);
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":8,\"temperature\":0}", p2);
    REQUIRE(http(&s, "POST", "/v1/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
    long prompt = usage_int(out, "prompt_tokens", NULL), cached = usage_int(out, "prompt_tokens_details", "cached_tokens");
    // the tokens both prompts start with, which end inside a block (the first prompt's blocks,
    // computed in whole chunks of 256, are kept past them; the second's last chunk is over 64)
    static int32_t t1[4096], t2[4096];
    long n1 = tokenize_ids(&s, p1, t1, 4096), n2 = tokenize_ids(&s, p2, t2, 4096), common = 0;
    while (common < n1 && common < n2 && t1[common] == t2[common]) common++;
    bool inside_block = common % 64 != 0, long_last_chunk = n2 - (n2 - 1) / 256 * 256 >= 64;
    CHECK(n2 == prompt && inside_block && long_last_chunk, "%ld and %ld tokens, %ld shared", n1, n2, common);
    CHECK(cached == common && cached >= 256 && cached < prompt, "%ld of %ld prompt tokens cached, %ld shared", cached,
          prompt, common);
    CHECK(stat_int(&s, "prompt_tokens_cached", NULL) == cached, "/v1/stats");
    CHECK(stat_int(&s, "kv_cache", "prefix_cache_tokens") > 0 && stat_int(&s, "kv_cache", "used_tokens") == 0);
    static char metrics[1 << 16];
    REQUIRE(http(&s, "GET", "/metrics", NULL, NULL, metrics, sizeof(metrics)) == 200);
    char line[128];
    snprintf(line, sizeof(line), "ft_prompt_tokens_cached_total %ld\n", cached);
    CHECK(strstr(metrics, line) != NULL, "%s", metrics);
    // the Messages API counts input_tokens without the cached ones, as Anthropic does
    snprintf(body, sizeof(body),
             "{\"model\":\"m\",\"max_tokens\":4,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
             p2);
    REQUIRE(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 200, "%s", out);
    REQUIRE(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 200, "%s", out);
    long read = usage_int(out, "cache_read_input_tokens", NULL), input = usage_int(out, "input_tokens", NULL);
    CHECK(read >= 256 && input > 0, "the same message again: %ld read from the cache, %ld input", read, input);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);

    // the same second prompt on a server without the cache: the same reply
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":8,\"temperature\":0}", p2);
    SERVER_OR_SKIP(t, "--device cpu -c 2048 --no-prefix-cache");
    REQUIRE(http(&t, "POST", "/v1/completions", body, NULL, plain, sizeof(plain)) == 200, "%s", plain);
    CHECK(usage_int(plain, "prompt_tokens_details", "cached_tokens") == 0);
    CHECK(stat_int(&t, "kv_cache", "prefix_cache_tokens") == 0);
    CHECK(server_stop(&t) == 0, "log: %s", t.log);
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":8,\"temperature\":0}", p1);
    SERVER_OR_SKIP(u, "--device cpu -c 2048");
    REQUIRE(http(&u, "POST", "/v1/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":8,\"temperature\":0}", p2);
    REQUIRE(http(&u, "POST", "/v1/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
    json_t *a = json_loads(out, 0, NULL), *b = json_loads(plain, 0, NULL);
    const char *ta = json_string_value(json_object_get(json_array_get(json_object_get(a, "choices"), 0), "text"));
    const char *tb = json_string_value(json_object_get(json_array_get(json_object_get(b, "choices"), 0), "text"));
    CHECK(ta && tb && !strcmp(ta, tb), "with the cache '%s', without '%s'", ta ? ta : "?", tb ? tb : "?");
    json_decref(a);
    json_decref(b);
    CHECK(server_stop(&u) == 0, "log: %s", u.log);
}

// /v1/stats' live figures: the engine's counters and the route counters (routing) move while a
// request runs, and once the requests are done every MoE layer has counted n_expert_used
// selections for each token the model evaluated: the prompt tokens, and each generated token
// but the last (ignore_eos: every request ends on max_tokens, its last token never evaluated).
static json_t *stat_obj(json_t *st, const char *a) {
    return json_object_get(st, a);
}

static long json_int_at(json_t *o, const char *key) {
    json_t *x = json_object_get(o, key);
    return json_is_integer(x) ? (long)json_integer_value(x) : -1;
}

TEST(server_stats_count_routing) {
    SERVER_OR_SKIP(s, "--device cpu --no-prefix-cache -c 4096");
    static char out[1 << 16];
    json_t *st = get_json(&s, "/v1/stats");
    REQUIRE(st, "/v1/stats");
    json_t *eng = stat_obj(st, "engine"), *rt = stat_obj(st, "routing");
    CHECK(eng && !strcmp(json_string_value(json_object_get(eng, "device")), "cpu") &&
              json_int_at(eng, "tokens_generated") == 0 && json_int_at(eng, "steps") == 0,
          "engine before any request");
    REQUIRE(json_is_object(rt), "routing: the CPU counts its routing");
    CHECK(json_int_at(rt, "n_expert") == 8 && json_int_at(rt, "n_expert_used") == 2 && json_int_at(rt, "total") == 0);
    json_t *layers = json_object_get(rt, "layers");
    CHECK(json_array_size(layers) == 4 && json_integer_value(json_array_get(layers, 3)) == 3, "the 4 MoE blocks");
    json_decref(st);

    // a long stream: its figures appear in /v1/stats before it ends
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "curl -s -m 120 http://127.0.0.1:%d/v1/completions -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":3000,"
             "\"temperature\":0,\"ignore_eos\":true,\"stream\":true}' > %s &",
             s.port, test_path("routing-stream"));
    REQUIRE(test_run(cmd, NULL, 0) == 0);
    bool seen_live = false;
    for (int i = 0; i < 400 && !seen_live; i++) {
        sleep_ms(25);
        st = get_json(&s, "/v1/stats");
        long running = json_int_at(st, "running"), gen = json_int_at(stat_obj(st, "engine"), "tokens_generated");
        long total = json_int_at(stat_obj(st, "routing"), "total"), done = json_int_at(st, "generation_tokens");
        seen_live = running == 1 && gen > 0 && total > 0 && done == 0;
        json_decref(st);
    }
    CHECK(seen_live, "no live figures while the stream ran");
    for (int i = 0; i < 2400 && stat_int(&s, "running", NULL) != 0; i++) sleep_ms(50);
    CHECK(stat_int(&s, "running", NULL) == 0, "the stream did not end");

    static const char *const reqs[] = {
        "{\"prompt\":\"Hello there friend\",\"max_tokens\":10,\"temperature\":0,\"ignore_eos\":true}",
        "{\"prompt\":\"The quick brown fox jumps\",\"max_tokens\":5,\"temperature\":0,\"ignore_eos\":true}",
    };
    // the stream's prompt, as the finished requests' metrics count it
    long prompt = stat_int(&s, "prompt_tokens", NULL), gen = 3000, evaluated = prompt + 3000 - 1;
    CHECK(prompt > 0 && stat_int(&s, "generation_tokens", NULL) == 3000);
    for (size_t i = 0; i < FT_ARRAY_LEN(reqs); i++) {
        REQUIRE(http(&s, "POST", "/v1/completions", reqs[i], NULL, out, sizeof(out)) == 200, "%s", out);
        long p = usage_int(out, "prompt_tokens", NULL), n = usage_int(out, "completion_tokens", NULL);
        CHECK(strstr(out, "\"finish_reason\":\"length\"") != NULL, "%s", out);
        prompt += p;
        gen += n;
        evaluated += p + n - 1;
    }
    st = get_json(&s, "/v1/stats");
    eng = stat_obj(st, "engine");
    rt = stat_obj(st, "routing");
    CHECK(json_int_at(eng, "tokens_generated") == gen, "%ld generated, %ld counted", gen,
          json_int_at(eng, "tokens_generated"));
    CHECK(json_int_at(eng, "prompt_tokens_evaluated") == prompt, "%ld prompt tokens, %ld counted", prompt,
          json_int_at(eng, "prompt_tokens_evaluated"));
    CHECK(json_int_at(st, "generation_tokens") == gen, "the finished requests' count agrees");
    json_t *rows = json_object_get(rt, "selections");
    REQUIRE(json_array_size(rows) == 4);
    long all = 0;
    for (size_t l = 0; l < 4; l++) {
        json_t *row = json_array_get(rows, l);
        long sum = 0, used = 0;
        for (size_t e = 0; e < json_array_size(row); e++) {
            long c = (long)json_integer_value(json_array_get(row, e));
            sum += c;
            used += c > 0;
        }
        CHECK(json_array_size(row) == 8 && sum == 2 * evaluated, "layer %zu: %ld selections for %ld tokens", l, sum,
              evaluated);
        CHECK(used >= 2, "layer %zu: %ld experts ever selected", l, used);
        all += sum;
    }
    CHECK(json_int_at(rt, "total") == all);
    json_decref(st);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// Two requests that together need more KV blocks than the pool has (--num-tokens 256: 4
// blocks; each prompt of ~160 tokens grows to 4 of them): in chunks of 64 both prompts take
// blocks until neither can go on, the younger goes back to the queue, and again when the other
// decodes past its blocks; both finish with their whole reply and the blocks are all back.
TEST(server_kv_pool_shared_under_pressure) {
    static char p[4096];
    size_t n = 0;
    for (int i = 0; i < 12; i++) n += (size_t)snprintf(p + n, sizeof(p) - n, "Item %d of the list is here. ", i);
    SERVER_OR_SKIP(s, "--device cpu -c 256 --num-tokens 256 -b 64 --max-running-requests 2 --no-prefix-cache");
    char cmd[8192];
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof(cmd),
                 "curl -s -m 60 http://127.0.0.1:%d/v1/completions -d '{\"prompt\":\"%s %d\",\"max_tokens\":60,"
                 "\"temperature\":0,\"ignore_eos\":true}' > %s &",
                 s.port, p, k, test_path(k ? "pressure-1" : "pressure-0"));
        CHECK(test_run(cmd, NULL, 0) == 0);
    }
    test_run("sleep 0.2; wait", NULL, 0);
    for (int i = 0; i < 600 && stat_int(&s, "requests", "length") < 2; i++) sleep_ms(50);
    for (int k = 0; k < 2; k++) {
        static char out[1 << 16];
        FILE *f = fopen(test_path(k ? "pressure-1" : "pressure-0"), "r");
        REQUIRE(f);
        size_t got = fread(out, 1, sizeof(out) - 1, f);
        out[got] = 0;
        fclose(f);
        CHECK(usage_int(out, "completion_tokens", NULL) == 60, "request %d: %s", k, out);
    }
    CHECK(stat_int(&s, "requests", "length") == 2 && stat_int(&s, "requests", "error") == 0);
    CHECK(stat_int(&s, "kv_cache", "used_tokens") == 0, "all blocks back");
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// /tokenize runs on the prep threads: four large contents at once, each answered whole (the
// same token count: 140,000, a digit each in the demo vocabulary); with pieces, a content over
// the cap (TOKENIZE_MAX_PIECES, 131072) is a 400 naming the field, and the server goes on.
TEST(server_tokenize_large_and_capped) {
    SERVER_OR_SKIP(s, NULL);
    enum { N_DIGITS = 140000 };
    char *body = ft_malloc(N_DIGITS + 64);
    int n = snprintf(body, 64, "{\"content\":\"");
    memset(body + n, '7', N_DIGITS);
    snprintf(body + n + N_DIGITS, 64, "\"}");
    FILE *f = fopen(test_path("tok-big.json"), "wb");
    REQUIRE(f);
    fputs(body, f);
    fclose(f);
    char cmd[4096];
    int k = 0;
    for (int i = 0; i < 4; i++)
        k +=
            snprintf(cmd + k, sizeof(cmd) - (size_t)k,
                     "(curl -s -m 60 http://127.0.0.1:%d/tokenize --data-binary @'%s' > '%s/tok-%d.json') & ",
                     s.port, test_path("tok-big.json"), test_tmpdir(), i);
    snprintf(cmd + k, sizeof(cmd) - (size_t)k, "wait");
    CHECK(test_run(cmd, NULL, 0) == 0);
    size_t counts[4];
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof(name), "tok-%d.json", i);
        json_t *t = json_load_file(test_path(name), 0, NULL);
        counts[i] = json_array_size(json_object_get(t, "tokens"));
        json_decref(t);
        CHECK(counts[i] > 0 && counts[i] == counts[0], "reply %d: %zu tokens (first: %zu)", i, counts[i],
              counts[0]);
    }
    // the same content with pieces: over the cap when it has more tokens than that
    snprintf(body + n + N_DIGITS, 64, "\",\"with_pieces\":true}");
    static char out[1 << 16];
    int code = http(&s, "POST", "/tokenize", body, NULL, out, sizeof(out));
    CHECK(counts[0] > (1 << 17), "the demo vocabulary cuts digits one by one: %zu tokens", counts[0]);
    CHECK(code == 400 && strstr(out, "with_pieces"), "%d: %.300s", code, out);
    CHECK(http(&s, "GET", "/health", NULL, NULL, out, sizeof(out)) == 200);
    free(body);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// The tokens /tokenize gives text (special tokens parsed), or -1.
static long token_count(const server *s, const char *text) {
    json_t *req = json_pack("{s:s}", "content", text);
    char *body = json_dumps(req, 0), out[1 << 14];
    json_decref(req);
    int code = http(s, "POST", "/tokenize", body, NULL, out, sizeof(out));
    free(body);
    json_t *o = code == 200 ? json_loads(out, 0, NULL) : NULL;
    long n = json_is_array(json_object_get(o, "tokens")) ? (long)json_array_size(json_object_get(o, "tokens")) : -1;
    json_decref(o);
    return n;
}

// The chat template by default is the GGUF's own, rendered by the Jinja interpreter; a Jinja file
// given to --chat-template replaces it and sees chat_template_kwargs as variables; a template that
// raises answers 400 with its message; one that does not parse stops the server, naming where.
TEST(server_chat_template_jinja) {
    char out[1 << 14];
    server s;
    // the synthetic model's own template: ChatML with a default system prompt
    g_server_own_template = true;
    bool up = server_start(&s, NULL);
    g_server_own_template = false;
    REQUIRE(up, "log: %s", s.log);
    CHECK(strstr(read_log(&s), "chat template: the GGUF's own (Jinja, "), "log: %s", read_log(&s));
    long own = token_count(&s, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi"
                               "<|im_end|>\n<|im_start|>assistant\n");
    int code = http(&s, "POST", "/v1/chat/completions",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 1}", NULL, out,
                    sizeof(out));
    CHECK(own > 0 && code == 200 && usage_int(out, "prompt_tokens", NULL) == own, "%ld: %d %s", own, code, out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
    char tmpl[512];
    snprintf(tmpl, sizeof(tmpl), "%s", test_path("chat-template.jinja"));
    FILE *f = fopen(tmpl, "w");
    REQUIRE(f);
    fputs("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system prompts here') }}"
          "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}{{ suffix }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}\n",
          f);
    fclose(f);
    char extra[600];
    snprintf(extra, sizeof(extra), "--chat-template %s", tmpl);
    REQUIRE(server_start(&s, extra), "log: %s", s.log);
    CHECK(strstr(read_log(&s), "chat template: ") && strstr(read_log(&s), "(Jinja, "), "log: %s", read_log(&s));
    long plain = token_count(&s, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    long with_kwarg = token_count(&s, "<|im_start|>user\nHi, please<|im_end|>\n<|im_start|>assistant\n");
    CHECK(plain > 0 && with_kwarg > plain, "%ld %ld", plain, with_kwarg);
    code = http(&s, "POST", "/v1/chat/completions",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 1}", NULL, out,
                sizeof(out));
    CHECK(code == 200 && usage_int(out, "prompt_tokens", NULL) == plain, "%d %s", code, out);
    code = http(&s, "POST", "/v1/chat/completions",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 1, "
                "\"chat_template_kwargs\": {\"suffix\": \", please\"}}",
                NULL, out, sizeof(out));
    CHECK(code == 200 && usage_int(out, "prompt_tokens", NULL) == with_kwarg, "%d %s", code, out);
    code = http(&s, "POST", "/v1/chat/completions",
                "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi\"}], "
                "\"max_tokens\": 1}",
                NULL, out, sizeof(out));
    CHECK(code == 400 && strstr(out, "no system prompts here"), "%d %s", code, out);
    // tools stay refused until tool calls are parsed
    code = http(&s, "POST", "/v1/chat/completions",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tools\": [{\"type\": \"function\", "
                "\"function\": {\"name\": \"f\"}}]}",
                NULL, out, sizeof(out));
    CHECK(code == 400 && strstr(out, "tools"), "%d %s", code, out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
    f = fopen(tmpl, "w");
    REQUIRE(f);
    fputs("{% for m in messages %}\n{{ m.content | }}{% endfor %}", f);
    fclose(f);
    CHECK(!server_start(&s, extra), "a template that does not parse must stop the server");
    CHECK(strstr(read_log(&s), "line 2, column 16"), "log: %s", read_log(&s));
    server_stop(&s);
}

// ---------------------------------------------------------------------------------------------
// The web page (src/server/web/, built into the binary)

// curl: GET path with extra curl arguments; the headers (lower-cased names) into hdr and the
// body into a file whose bytes go to body (cap of them); returns the status, -1 on failure.
static int http_get_full(const server *s, const char *path, const char *args, char *hdr, size_t hcap,
                         unsigned char *body, size_t bcap, size_t *blen) {
    char cmd[2048], hfile[512], bfile[512];
    snprintf(hfile, sizeof(hfile), "%s", test_path("web-headers"));
    snprintf(bfile, sizeof(bfile), "%s", test_path("web-body"));
    unlink(bfile); // curl writes no file for an empty body
    snprintf(cmd, sizeof(cmd), "curl -s -m 30 %s -D '%s' -o '%s' -w '%%{http_code}' http://127.0.0.1:%d%s", args ? args : "",
             hfile, bfile, s->port, path);
    char code[16];
    if (test_run(cmd, code, sizeof(code)) != 0) return -1;
    FILE *f = fopen(hfile, "rb");
    if (!f) return -1;
    size_t n = fread(hdr, 1, hcap - 1, f);
    fclose(f);
    hdr[n] = 0;
    for (size_t i = 0; i < n; i++) hdr[i] = (char)(hdr[i] >= 'A' && hdr[i] <= 'Z' ? hdr[i] + 32 : hdr[i]);
    *blen = 0;
    if ((f = fopen(bfile, "rb"))) {
        *blen = fread(body, 1, bcap, f);
        fclose(f);
    }
    return atoi(code);
}

// A header's value (lower-cased, without the line end) from curl's header dump, into out.
static const char *header_value(const char *hdr, const char *name, char *out, size_t cap) {
    char key[128];
    snprintf(key, sizeof(key), "\n%s: ", name);
    const char *p = strstr(hdr, key);
    out[0] = 0;
    if (!p) return NULL;
    p += strlen(key);
    size_t n = strcspn(p, "\r\n");
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return out;
}

// Each file of src/server/web/ is served at /NAME byte for byte (and index.html at /), with its
// type, a policy that allows nothing but the page itself (no inline code, requests to this
// server only), revalidation (no-cache, ETag; 304 for a known ETag); without the API key (the
// page is open, /v1/stats is not), and only by GET.
TEST(server_web_files) {
    SERVER_OR_SKIP(s, "--api-key sekrit");
    static char hdr[8192];
    static unsigned char body[1 << 20], want[1 << 20];
    char val[512];
    size_t n;
    DIR *d = opendir("src/server/web");
    REQUIRE(d, "src/server/web (the tests run from the repository root)");
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[600], url[600];
        snprintf(path, sizeof(path), "src/server/web/%s", e->d_name);
        FILE *f = fopen(path, "rb");
        REQUIRE(f, "%s", path);
        size_t wn = fread(want, 1, sizeof(want), f);
        fclose(f);
        const char *type = strstr(e->d_name, ".html") ? "text/html; charset=utf-8"
                           : strstr(e->d_name, ".js")  ? "text/javascript; charset=utf-8"
                           : strstr(e->d_name, ".css") ? "text/css; charset=utf-8"
                                                       : "?";
        for (int root = 0; root < 2; root++) {
            if (root && strcmp(e->d_name, "index.html")) continue;
            snprintf(url, sizeof(url), "/%s", root ? "" : e->d_name);
            int code = http_get_full(&s, url, NULL, hdr, sizeof(hdr), body, sizeof(body), &n);
            CHECK(code == 200 && n == wn && !memcmp(body, want, wn), "%s: %d, %zu bytes served of %zu", url, code, n, wn);
            CHECK(header_value(hdr, "content-type", val, sizeof(val)) && !strcmp(val, type), "%s: %s", url, val);
            header_value(hdr, "content-security-policy", val, sizeof(val));
            CHECK(strstr(val, "default-src 'none'") && strstr(val, "script-src 'self'") &&
                      strstr(val, "connect-src 'self'") && !strstr(val, "unsafe") && !strstr(val, "http"),
                  "%s: policy '%s'", url, val);
            CHECK(header_value(hdr, "cache-control", val, sizeof(val)) && !strcmp(val, "no-cache"), "%s", url);
            CHECK(header_value(hdr, "x-content-type-options", val, sizeof(val)) && !strcmp(val, "nosniff"), "%s", url);
            char etag[128], args[256];
            REQUIRE(header_value(hdr, "etag", etag, sizeof(etag)) && etag[0] == '"', "%s: no ETag", url);
            snprintf(args, sizeof(args), "-H 'If-None-Match: %s'", etag);
            code = http_get_full(&s, url, args, hdr, sizeof(hdr), body, sizeof(body), &n);
            CHECK(code == 304 && n == 0, "%s with its ETag: %d, %zu bytes", url, code, n);
            code = http_get_full(&s, url, "-H 'If-None-Match: \"0-0\"'", hdr, sizeof(hdr), body, sizeof(body), &n);
            CHECK(code == 200 && n == wn, "%s with another ETag: %d", url, code);
        }
        files++;
    }
    closedir(d);
    CHECK(files >= 3, "%d files in src/server/web", files);
    // the page's own requests need the key; other methods and unknown files are refused
    static char out[4096];
    CHECK(http(&s, "GET", "/v1/stats", NULL, NULL, out, sizeof(out)) == 401);
    CHECK(http(&s, "POST", "/", "{}", NULL, out, sizeof(out)) == 405, "%s", out);
    CHECK(http(&s, "GET", "/app.jsx", NULL, "-H 'x-api-key: sekrit'", out, sizeof(out)) == 404);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// The page in headless Chromium (tests/server/web.mjs): it loads, streams a reply as folded
// reasoning and one as content, shows live rates and the server's figures, draws the expert map
// in colour after the requests, stops a request; the page's console and the browser's log stay
// free of errors. A random-weight model of 12 MoE layers of 32 experts (4 per token) with the
// qwen3.5 template, whose replies open in reasoning unless thinking is off. Skips without node
// or Chromium, unless FT_REQUIRE_CHROMIUM is set (CI). The screenshot lands in the scratch
// folder (web-ui.png; FT_KEEP_TMP keeps it): docs/web-ui.png is one.
TEST(server_web_page_in_chromium) {
    const char *req = getenv("FT_REQUIRE_CHROMIUM");
    bool required = req && *req && strcmp(req, "0");
    const char *chromium = getenv("CHROMIUM") ? getenv("CHROMIUM") : "chromium";
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "node --version >/dev/null 2>&1 && %s --version >/dev/null 2>&1", chromium);
    if (test_run(cmd, NULL, 0) != 0) {
        if (required)
            test_fail(__FILE__, __LINE__, "FT_REQUIRE_CHROMIUM: node or %s is missing (scripts/install-deps.sh)", chromium);
        else
            test_skip("node or %s is missing (scripts/install-deps.sh installs Debian's chromium)", chromium);
        return;
    }
    const char *model = fixture_cli_model("web-model.gguf", "--name web-demo --layers 12 --experts 32 --top-k 4 "
                                                            "--ff 128 --expert-types q8_0");
    REQUIRE(model, "ft synth");
    server s;
    REQUIRE(server_start_on(&s, model, "--device cpu -c 4096 --chat-template qwen3.5"), "ft serve did not start (log: %s)",
            s.log);
    static char out[1 << 14];
    snprintf(cmd, sizeof(cmd), "node tests/server/web.mjs %d '%s' 2>&1", s.port, test_path("web-ui.png"));
    CHECK(test_run(cmd, out, sizeof(out)) == 0, "web.mjs: %s", out);
    fprintf(stderr, "  %s", out);
    struct stat st;
    CHECK(stat(test_path("web-ui.png"), &st) == 0 && st.st_size > 10000, "no screenshot");
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// Structured output (src/server/constraint.c): every way a request names a constraint, through
// curl, each reply parsed and validated (json_check.c); malformed constraints and schemas ft
// cannot enforce are a 400 in each route's shape, saying where; then the official openai
// client with 200 random schemas (tests/server/structured.mjs), where node has it.
TEST(server_structured_output) {
    SERVER_OR_SKIP(s, "-c 4096");
    static char out[1 << 16], text[1 << 16];
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":16},\"n\":{\"type\":"
        "\"integer\",\"minimum\":1,\"maximum\":99},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},"
        "\"maxItems\":3},\"when\":{\"type\":\"string\",\"format\":\"date\"}},\"required\":[\"name\",\"n\",\"tags\"],"
        "\"additionalProperties\":false}";
    json_t *sch = json_loads(schema, 0, NULL);
    REQUIRE(sch);
    char body[4096];
    // the same schema by every route and field that takes one, streamed and not
    static const struct {
        const char *path, *fmt;
        bool stream;
    } forms[] = {
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1000,\"seed\":%d,\"response_format\":"
         "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"strict\":true,\"schema\":%s}}}",
         false},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1000,\"seed\":%d,\"stream\":true,"
         "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"schema\":%s}}}",
         true},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1000,\"seed\":%d,\"response_format\":"
         "{\"type\":\"json_object\",\"schema\":%s}}",
         false},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1000,\"seed\":%d,\"json_schema\":%s}",
         false},
        {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1000,\"seed\":%d,\"stream\":true,\"json_schema\":%s}",
         true},
        {"/completion", "{\"prompt\":\"x\",\"n_predict\":1000,\"seed\":%d,\"json_schema\":%s}", false},
    };
    for (size_t f = 0; f < FT_ARRAY_LEN(forms); f++)
        for (int seed = 1; seed <= 3; seed++) {
            snprintf(body, sizeof(body), forms[f].fmt, seed, schema);
            int code = http(&s, "POST", forms[f].path, body, NULL, out, sizeof(out));
            REQUIRE(code == 200, "%s: %d %s", forms[f].path, code, out);
            size_t n = 0;
            if (forms[f].stream) {
                CHECK(sse_openai(out, text, sizeof(text), &n), "%s: a broken stream: %s", forms[f].path, out);
            } else {
                json_t *r = json_loads(out, 0, NULL), *ch = json_array_get(json_object_get(r, "choices"), 0);
                json_t *t = json_object_get(json_object_get(ch, "message"), "content");
                if (!t) t = json_object_get(ch, "text");
                if (!t) t = json_object_get(r, "content");
                snprintf(text, sizeof(text), "%s", json_string_value(t) ? json_string_value(t) : "");
                json_decref(r);
            }
            json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
            CHECK(v && json_check(sch, sch, v), "%s seed %d: not valid under the schema: '%s'", forms[f].path, seed,
                  text);
            json_decref(v);
        }
    json_decref(sch);
    // json_object: any object; a GBNF grammar on /completion and /v1/chat/completions
    CHECK(http(&s, "POST", "/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":3000,\"seed\":1,"
               "\"response_format\":{\"type\":\"json_object\"}}",
               NULL, out, sizeof(out)) == 200,
          "%s", out);
    json_t *r = json_loads(out, 0, NULL);
    json_t *c = json_object_get(json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message"), "content");
    json_t *obj = json_string_value(c) ? json_loads(json_string_value(c), 0, NULL) : NULL;
    CHECK(json_is_object(obj), "not an object: %s", out);
    json_decref(obj);
    json_decref(r);
    for (int seed = 1; seed <= 4; seed++) {
        snprintf(body, sizeof(body),
                 "{\"prompt\":\"x\",\"n_predict\":50,\"seed\":%d,\"grammar\":\"root ::= (\\\"yes\\\" | \\\"no\\\") "
                 "\\\"!\\\"\"}",
                 seed);
        CHECK(http(&s, "POST", "/completion", body, NULL, out, sizeof(out)) == 200 &&
                  (strstr(out, "\"content\":\"yes!\"") || strstr(out, "\"content\":\"no!\"")),
              "%s", out);
    }
    // malformed or unenforceable: a 400 in the route's shape, saying what and where
    static const struct {
        const char *path, *body, *want;
    } bad[] = {
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
         "\"json_schema\":{\"name\":\"t\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
         "\"pattern\":\"x\"}}}}}}",
         "'response_format.json_schema.schema': at #/properties/a: the keyword 'pattern' is not supported"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
         "\"json_schema\":{\"name\":\"t\"}}}",
         "needs a 'schema'"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"xml\"}}",
         "type 'xml' is not one of"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":\"json\"}",
         "'response_format' must be an object"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"},"
         "\"grammar\":\"root ::= \\\"a\\\"\"}",
         "'grammar' beside 'response_format': give one constraint"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"},"
         "\"enable_thinking\":true}",
         "has no reasoning"},
        {"/v1/completions", "{\"prompt\":\"x\",\"json_schema\":{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}}",
         "'json_schema': at #: the bounds leave no integer"},
        {"/completion", "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\"\\nroot ::= \\\"b\\\"\"}",
         "'grammar': line 2, column 1: a rule defined twice"},
        {"/completion", "{\"prompt\":\"x\",\"grammar\":\"root ::= [^\\\\x00-\\\\U0010FFFF]\"}",
         "'grammar': the grammar matches no string at all"},
        {"/completion", "{\"prompt\":\"x\",\"grammar\":5}", "'grammar' must be a string"},
        {"/v1/messages",
         "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"output_format\":{\"type\":"
         "\"json_schema\",\"schema\":{}}}",
         "'output_format': structured output is served on /v1/chat/completions"},
        {"/v1/messages",
         "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
         "\"json_object\"}}",
         "not on /v1/messages"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) {
        int code = http(&s, "POST", bad[i].path, bad[i].body, NULL, out, sizeof(out));
        bool anthropic = !strcmp(bad[i].path, "/v1/messages");
        CHECK(code == 400 && strstr(out, anthropic ? "{\"type\":\"error\"" : "{\"error\":{") == out &&
                  strstr(out, bad[i].want),
              "%s %s: %d %s", bad[i].path, bad[i].body, code, out);
    }
    // the official client with random schemas
    struct stat st;
    if (stat("node_modules/openai/package.json", &st) == 0) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "node tests/server/structured.mjs %d 200 2>&1", s.port);
        CHECK(test_run(cmd, out, sizeof(out)) == 0, "structured.mjs: %s", out);
        fprintf(stderr, "  %s", out);
    } else {
        fprintf(stderr, "  node_modules has no openai client: structured.mjs not run\n");
    }
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// ---------------------------------------------------------------------------------------------
// Tool calls

static const char g_weather_tool[] =
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Current weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\",\"maxLength\":20},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"C\",\"F\"]}},\"required\":[\"location\",\"unit\"],"
    "\"additionalProperties\":false}}}";

// Whether args (JSON text) validate under the weather tool's parameters.
static bool weather_args_ok(const char *args, size_t n) {
    json_t *tool = json_loads(g_weather_tool, 0, NULL);
    json_t *schema = json_object_get(json_object_get(tool, "function"), "parameters");
    json_t *v = json_loadb(args, n, 0, NULL);
    bool ok = v && json_check(schema, schema, v);
    json_decref(v);
    json_decref(tool);
    return ok;
}

// The SSE events of an OpenAI stream: each call's id, name and the concatenation of its argument
// fragments (by index), the finish reason, the text.
typedef struct sse_calls {
    int n;
    char id[4][64], name[4][64];
    char args[4][2048];
    char finish[32];
    int n_text;
} sse_calls;

static bool sse_tool_calls(const char *body, sse_calls *c) {
    memset(c, 0, sizeof(*c));
    for (const char *p = body; *p;) {
        const char *end = strstr(p, "\n\n");
        if (!end || strncmp(p, "data: ", 6)) return false;
        const char *d = p + 6;
        size_t len = (size_t)(end - d);
        p = end + 2;
        if (len == 6 && !strncmp(d, "[DONE]", 6)) continue;
        json_t *j = json_loadb(d, len, JSON_ALLOW_NUL, NULL);
        if (!j) return false;
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *delta = json_object_get(ch, "delta");
        json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr)) snprintf(c->finish, sizeof(c->finish), "%s", json_string_value(fr));
        json_t *t = json_object_get(delta, "content");
        if (json_is_string(t)) c->n_text += (int)json_string_length(t);
        size_t i;
        json_t *tc;
        json_array_foreach(json_object_get(delta, "tool_calls"), i, tc) {
            int k = (int)json_integer_value(json_object_get(tc, "index"));
            if (k < 0 || k >= 4) continue;
            json_t *fn = json_object_get(tc, "function"), *id = json_object_get(tc, "id");
            if (json_is_string(id)) {
                if (k != c->n) return json_decref(j), false; // a call starts once, in order
                c->n++;
                snprintf(c->id[k], 64, "%s", json_string_value(id));
                snprintf(c->name[k], 64, "%s", json_string_value(json_object_get(fn, "name")));
            }
            json_t *a = json_object_get(fn, "arguments");
            if (json_is_string(a) && strlen(c->args[k]) + json_string_length(a) < sizeof(c->args[k]))
                strcat(c->args[k], json_string_value(a));
        }
        json_decref(j);
    }
    return true;
}

// Tools through both APIs on a random-weight model served with llama.cpp's Qwen3 template
// (Hermes calls): tool_choice forcing a call makes even random weights write a whole call, which
// comes back as OpenAI tool_calls and Anthropic tool_use blocks, streamed and not, its
// arguments valid under the tool's schema; "none" renders the tools but parses nothing; the
// fields' errors; and the SDKs' tool loop (tests/server/tools.mjs).
TEST(server_tools) {
    const char *src = oracle_llama_src();
    if (!src || !have_curl()) return;
    char extra[1024];
    snprintf(extra, sizeof(extra), "--chat-template %s/models/templates/Qwen-Qwen3-0.6B.jinja -c 4096", src);
    server s;
    g_server_own_template = true;
    bool up = server_start(&s, extra);
    g_server_own_template = false;
    REQUIRE(up, "log: %s", s.log);
    CHECK(strstr(read_log(&s), "tool calls: hermes"), "log: %s", read_log(&s));
    static char out[1 << 18], body[8192];
    // forced, not streamed, each seed a different random call
    for (int seed = 1; seed <= 4; seed++) {
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"max_tokens\":300,\"seed\":%d,"
                 "\"tools\":[%s],\"tool_choice\":%s,\"parallel_tool_calls\":%s}",
                 seed, g_weather_tool, seed % 2 ? "\"required\"" : "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}",
                 seed <= 2 ? "false" : "true");
        REQUIRE(http(&s, "POST", "/v1/chat/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
        json_t *r = json_loads(out, JSON_ALLOW_NUL, NULL);
        json_t *ch = json_array_get(json_object_get(r, "choices"), 0), *msg = json_object_get(ch, "message");
        json_t *calls = json_object_get(msg, "tool_calls");
        CHECK(!strcmp(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls") && json_array_size(calls) >= 1 &&
                  (seed > 2 || json_array_size(calls) == 1),
              "%s", out);
        size_t i;
        json_t *c;
        json_array_foreach(calls, i, c) {
            json_t *fn = json_object_get(c, "function");
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            CHECK(!strcmp(json_string_value(json_object_get(fn, "name")), "get_weather") && args &&
                      weather_args_ok(args, strlen(args)) && !strncmp(json_string_value(json_object_get(c, "id")), "call_", 5),
                  "%s", out);
        }
        json_decref(r);
    }
    // forced, streamed: the id and name once, then the arguments in fragments
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"max_tokens\":300,\"stream\":true,"
             "\"tools\":[%s],\"tool_choice\":\"required\",\"parallel_tool_calls\":false}",
             g_weather_tool);
    REQUIRE(http(&s, "POST", "/v1/chat/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
    sse_calls sc;
    CHECK(sse_tool_calls(out, &sc) && sc.n == 1 && !strcmp(sc.name[0], "get_weather") && !strcmp(sc.finish, "tool_calls") &&
              weather_args_ok(sc.args[0], strlen(sc.args[0])) && sc.n_text == 0,
          "%s", out);
    // the Messages API: a tool_use block with its input, streamed as input_json_delta
    static const char anth_tool[] =
        "{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":"
        "\"string\",\"maxLength\":20},\"unit\":{\"type\":\"string\",\"enum\":[\"C\",\"F\"]}},\"required\":[\"location\","
        "\"unit\"],\"additionalProperties\":false}}";
    snprintf(body, sizeof(body),
             "{\"max_tokens\":300,\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":[%s],"
             "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true}}",
             anth_tool);
    REQUIRE(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 200, "%s", out);
    json_t *r = json_loads(out, JSON_ALLOW_NUL, NULL);
    json_t *use = json_array_get(json_object_get(r, "content"), 0);
    char *input = json_dumps(json_object_get(use, "input"), JSON_COMPACT);
    CHECK(!strcmp(json_string_value(json_object_get(r, "stop_reason")), "tool_use") &&
              !strcmp(json_string_value(json_object_get(use, "type")), "tool_use") && input &&
              weather_args_ok(input, strlen(input)) && json_array_size(json_object_get(r, "content")) == 1,
          "%s", out);
    free(input);
    json_decref(r);
    snprintf(body, sizeof(body),
             "{\"max_tokens\":300,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],"
             "\"tools\":[%s],\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"}}",
             anth_tool);
    REQUIRE(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 200, "%s", out);
    {
        // per tool_use block: content_block_start, input_json_delta pieces, content_block_stop. Parallel
        // calls are allowed here, so random weights may write several blocks and run out of tokens in
        // the last: every block but a cut-off last one holds valid arguments.
        static char partial[4][2048];
        int index[4], n_blocks = 0, n_stopped = 0;
        bool ids_ok = true;
        const char *stop = "";
        static char stop_buf[32];
        for (const char *p = strstr(out, "data: "); p; p = strstr(p + 1, "data: ")) {
            const char *e = strstr(p, "\n\n");
            json_t *ev = e ? json_loadb(p + 6, (size_t)(e - p - 6), JSON_ALLOW_NUL, NULL) : NULL;
            const char *type = json_string_value(json_object_get(ev, "type"));
            json_t *cb = json_object_get(ev, "content_block"), *delta = json_object_get(ev, "delta");
            int at = (int)json_integer_value(json_object_get(ev, "index")), k = -1;
            for (int b = 0; b < n_blocks; b++)
                if (index[b] == at) k = b;
            if (type && !strcmp(type, "content_block_start") && !strcmp(json_string_value(json_object_get(cb, "type")), "tool_use") &&
                n_blocks < 4) {
                ids_ok = ids_ok && !strncmp(json_string_value(json_object_get(cb, "id")), "toolu_", 6);
                index[n_blocks] = at;
                partial[n_blocks++][0] = 0;
            }
            if (type && !strcmp(type, "content_block_delta") && k >= 0 &&
                !strcmp(json_string_value(json_object_get(delta, "type")), "input_json_delta") &&
                strlen(partial[k]) + strlen(json_string_value(json_object_get(delta, "partial_json"))) < sizeof(partial[k]))
                strcat(partial[k], json_string_value(json_object_get(delta, "partial_json")));
            if (type && !strcmp(type, "content_block_stop") && k >= 0) n_stopped++;
            if (type && !strcmp(type, "message_delta")) {
                snprintf(stop_buf, sizeof(stop_buf), "%s", json_string_value(json_object_get(delta, "stop_reason")));
                stop = stop_buf;
            }
            json_decref(ev);
        }
        bool cut = !strcmp(stop, "max_tokens");
        bool args_ok = n_blocks >= 1;
        for (int b = 0; b < n_blocks; b++)
            args_ok = args_ok && (weather_args_ok(partial[b], strlen(partial[b])) || (cut && b == n_blocks - 1));
        CHECK(ids_ok && args_ok && n_stopped == n_blocks && (cut || !strcmp(stop, "tool_use")), "%s", out);
    }
    // "none": the tools are rendered (a longer prompt), nothing is parsed
    long plain = -1, with = -1;
    for (int k = 0; k < 2; k++) {
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"max_tokens\":4%s%s%s}",
                 k ? ",\"tool_choice\":\"none\",\"tools\":[" : "", k ? g_weather_tool : "", k ? "]" : "");
        REQUIRE(http(&s, "POST", "/v1/chat/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
        json_t *rr = json_loads(out, JSON_ALLOW_NUL, NULL);
        long pt = (long)json_integer_value(json_object_get(json_object_get(rr, "usage"), "prompt_tokens"));
        json_t *m = json_object_get(json_array_get(json_object_get(rr, "choices"), 0), "message");
        CHECK(!json_object_get(m, "tool_calls") && json_is_string(json_object_get(m, "content")), "%s", out);
        *(k ? &with : &plain) = pt;
        json_decref(rr);
    }
    CHECK(with > plain + 20, "tools not rendered: %ld prompt tokens with them, %ld without", with, plain);
    // a conversation with a call and its result renders and runs (both APIs' shapes)
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":null,"
             "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
             "\"arguments\":\"{\\\"location\\\":\\\"Paris\\\",\\\"unit\\\":\\\"C\\\"}\"}}]},{\"role\":\"tool\","
             "\"tool_call_id\":\"call_1\",\"content\":\"21\"}],\"max_tokens\":2,\"tools\":[%s]}",
             g_weather_tool);
    CHECK(http(&s, "POST", "/v1/chat/completions", body, NULL, out, sizeof(out)) == 200, "%s", out);
    snprintf(body, sizeof(body),
             "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\","
             "\"content\":[{\"type\":\"text\",\"text\":\"Checking.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":"
             "\"get_weather\",\"input\":{\"location\":\"Paris\",\"unit\":\"C\"}}]},{\"role\":\"user\",\"content\":[{\"type\":"
             "\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"21\"},{\"type\":\"text\",\"text\":\"Thanks\"}]}],"
             "\"tools\":[%s]}",
             anth_tool);
    CHECK(http(&s, "POST", "/v1/messages", body, NULL, out, sizeof(out)) == 200, "%s", out);
    // invalid fields: 400 with a message naming them
    static const struct {
        const char *path, *body, *want;
    } bad[] = {
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
         "no 'tools'"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "'tools' must be an array"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}",
         "tools[0] must be"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
         "\"a b\"}}]}",
         "name 'a b'"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
         "\"f\"}}],\"tool_choice\":\"sometimes\"}",
         "'tool_choice' must be"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
         "\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
         "names 'g'"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
         "\"f\"}}],\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
         "itself a constraint"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
         "\"f\"}}],\"tool_choice\":\"required\",\"enable_thinking\":true}",
         "no reasoning"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
         "\"f\"}}],\"parallel_tool_calls\":1}",
         "parallel_tool_calls"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"content\":\"1\"}]}", "tool_call_id"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"1\",\"type\":\"function\","
         "\"function\":{\"name\":\"f\",\"arguments\":\"{oops\"}}]}]}",
         "'arguments' must be"},
        {"/v1/messages",
         "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"t\"}]}",
         "input_schema"},
        {"/v1/messages",
         "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
         "\"web_search_20250305\",\"name\":\"web_search\"}]}",
         "Anthropic's servers"},
        {"/v1/messages",
         "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"t\","
         "\"input_schema\":{}}],\"tool_choice\":{\"type\":\"sometimes\"}}",
         "'tool_choice' type"},
        {"/v1/messages",
         "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"t\","
         "\"input_schema\":{}}],\"tool_choice\":{\"type\":\"any\"},\"thinking\":{\"type\":\"enabled\"}}",
         "no reasoning"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) {
        int code = http(&s, "POST", bad[i].path, bad[i].body, NULL, out, sizeof(out));
        CHECK(code == 400 && strstr(out, bad[i].want), "%s -> %d %s (want '%s')", bad[i].body, code, out, bad[i].want);
    }
    // the official SDKs' tool loop
    struct stat st;
    if (stat("node_modules/openai/package.json", &st) == 0 && stat("node_modules/@anthropic-ai/sdk/package.json", &st) == 0) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "node tests/server/tools.mjs %d 2>&1", s.port);
        CHECK(test_run(cmd, out, sizeof(out)) == 0, "tools.mjs: %s", out);
        fprintf(stderr, "    %s", out);
    }
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}

// A template with no tool-call format ft parses (the test model's own ChatML one) refuses tools,
// unless tool_choice is "none".
TEST(server_tools_refused_without_a_format) {
    SERVER_OR_SKIP(s, NULL);
    static char out[1 << 14];
    CHECK(strstr(read_log(&s), "tool calls: none"), "log: %s", read_log(&s));
    static const char tools[] = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    char body[1024];
    snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1,%s}", tools);
    CHECK(http(&s, "POST", "/v1/chat/completions", body, NULL, out, sizeof(out)) == 400 && strstr(out, "renders no tools"),
          "%s", out);
    CHECK(server_stop(&s) == 0, "log: %s", s.log);
}
