// fuzz_tool_call.c: libFuzzer target for the tool-call parser (src/server/tool_call.c), the
// reader of model output, which is untrusted.
//
// The first byte picks the format (and by its high bit at most one call), the next two two cut
// points; the rest is the reply. Parsed whole and in three pieces at those cuts it must give the
// same events; events come in order (a call starts, takes argument bytes, ends; text only
// between calls); every call that ends whole has arguments that are one JSON object (once
// invalid UTF-8 is replaced, as the APIs write them); the answer
// text is taken from the reply in order (nothing invented); under ASan nothing is read or
// written out of bounds.
#include "../src/server/tool_call.h"

#include <stdlib.h>
#include <string.h>

static const char k_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"location\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"function\", \"parameters\": {}}}]";

typedef struct run {
    srv_buf text, log; // the answer text; every call event, written out
    int n_calls;
    bool open;
} run;

static void on_event(void *ctx, const srv_tc_event *e) {
    run *r = ctx;
    char head[400];
    switch (e->kind) {
    case SRV_TC_TEXT:
        if (r->open || !e->n) abort();
        srv_buf_add(&r->text, e->s, e->n);
        return;
    case SRV_TC_START:
        if (r->open || e->index != r->n_calls) abort();
        r->open = true;
        r->n_calls++;
        snprintf(head, sizeof(head), "S%d %s %s\n", e->index, e->id, e->name);
        srv_buf_add(&r->log, head, strlen(head));
        return;
    case SRV_TC_ARGS:
        if (!r->open || e->index != r->n_calls - 1 || !e->n) abort();
        srv_buf_add(&r->log, e->s, e->n);
        return;
    case SRV_TC_END:
        if (!r->open || e->index != r->n_calls - 1) abort();
        r->open = false;
        snprintf(head, sizeof(head), "\nE%d %d\n", e->index, e->broken);
        srv_buf_add(&r->log, head, strlen(head));
        return;
    }
    abort();
}

static void parse(enum tok_tool_format f, bool single, json_t *tools, const char *s, size_t n, size_t a, size_t b,
                  run *r) {
    memset(r, 0, sizeof(*r));
    srv_buf_add(&r->text, "", 0);
    srv_buf_add(&r->log, "", 0);
    srv_tools *p = srv_tools_init(f, tools, "call_", 1);
    if (single) srv_tools_single(p);
    srv_think t = {0};
    t.state = 2;
    if (f == TOK_TOOLS_HARMONY) {
        t.harmony = true;
        tok_harmony_init(&t.h, false);
    }
    srv_buf reasoning = {0};
    srv_tools_feed_reply(p, &t, s, a, &reasoning, on_event, r);
    srv_tools_feed_reply(p, &t, s + a, b - a, &reasoning, on_event, r);
    srv_tools_feed_reply(p, &t, s + b, n - b, &reasoning, on_event, r);
    srv_tools_flush_reply(p, &t, &reasoning, on_event, r);
    if (r->open) abort(); // every call ends by the reply's end
    srv_buf_free(&reasoning);
    srv_tools_free(p);
}

// Each whole call's arguments (between its start and end lines) are one JSON object.
static void check_args(const run *r) {
    const char *p = r->log.p, *end = r->log.p + r->log.n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || *p != 'S') abort();
        const char *args = nl + 1, *e = NULL;
        for (const char *q = args; q + 2 <= end; q++)
            if (q[0] == '\n' && q[1] == 'E') { // the last "\nE" before the next start: arguments never hold it raw
                e = q;
                const char *enl = memchr(q + 1, '\n', (size_t)(end - q - 1));
                if (!enl) abort();
                if (enl + 1 == end || enl[1] == 'S') break;
            }
        if (!e) abort();
        const char *enl = memchr(e + 1, '\n', (size_t)(end - e - 1));
        bool broken = enl[-1] == '1';
        if (!broken) { // as the APIs send it: invalid UTF-8 as U+FFFD (srv_json_str)
            json_t *text = srv_json_str(args, (size_t)(e - args));
            json_error_t je;
            json_t *v = json_loadb(json_string_value(text), json_string_length(text),
                                   JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
            // (JSON has no bound on numbers; jansson's doubles do: 1e999 is JSON it will not read)
            if (!json_is_object(v) && !strstr(je.text, "overflow")) abort();
            json_decref(v);
            json_decref(text);
        }
        p = enl + 1;
    }
}

static bool subsequence(const char *sub, size_t m, const char *s, size_t n) {
    size_t j = 0;
    for (size_t i = 0; i < n && j < m; i++) j += s[i] == sub[j];
    return j == m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *tools;
    if (!tools && !(tools = json_loads(k_tools, 0, NULL))) abort();
    if (size < 3) return 0;
    enum tok_tool_format f = (enum tok_tool_format)(1 + (data[0] & 0x7f) % (TOK_TOOLS_COUNT - 1));
    bool single = data[0] & 0x80;
    const char *s = (const char *)data + 3;
    size_t n = size - 3, a = data[1] % (n + 1), b = data[2] % (n + 1);
    if (a > b) {
        size_t t = a;
        a = b;
        b = t;
    }
    run whole, cut;
    parse(f, single, tools, s, n, n, n, &whole);
    parse(f, single, tools, s, n, a, b, &cut);
    if (whole.text.n != cut.text.n || memcmp(whole.text.p, cut.text.p, whole.text.n)) abort();
    if (whole.log.n != cut.log.n || memcmp(whole.log.p, cut.log.p, whole.log.n)) abort();
    if (f != TOK_TOOLS_HARMONY && !subsequence(whole.text.p, whole.text.n, s, n)) abort();
    check_args(&whole);
    srv_buf_free(&whole.text);
    srv_buf_free(&whole.log);
    srv_buf_free(&cut.text);
    srv_buf_free(&cut.log);
    return 0;
}
