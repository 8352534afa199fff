// tool_call.c: tool calls parsed out of a model's reply as it streams (see tool_call.h).
//
// A byte-wise machine over the reply's answer text:
//   CONTENT   answer text, scanned for the format's opener ("<tool_call>", "[TOOL_CALLS]", ...);
//             bytes that may begin it are held until they prove not to.
//   HEADER    a call's header up to its arguments (the name, and for some formats an id or a
//             fence), collected and parsed again at every byte by the format's header function,
//             which answers "need more", "not a call" (the text so far is answer text) or "done"
//             (the call starts: its name must be one of the request's tools).
//   ARGS      the arguments' JSON object, checked byte by byte (jscan) and passed on as it comes;
//             a byte that is not JSON breaks the call.
//   TRAILER   the markup after the arguments, parsed like the header: the call ends, then the
//             reply goes back to answer text or on to the next call of a section.
//   KV, VALUE formats that write arguments as key/value markup (glm4.5, qwen3-coder): each pair
//             becomes `"key": value` of the JSON object when its value ends, typed by the tool's
//             schema (a string parameter is a string; another is the value's JSON where it reads
//             as JSON, else a string), as llama.cpp converts them.
// Headers and trailers are short, so parsing them again per byte costs little; arguments, which
// may be long (a file's content), are passed through once.
#include "tool_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEADER 512   // bytes of a header or trailer: longer is not a call
#define MAX_NAME 128
#define MAX_DEPTH 128    // nesting of the arguments' JSON
#define MAX_KEY 256

// ---------------------------------------------------------------------------------------------
// jscan: whether bytes are a JSON object, byte by byte

enum {
    J_START,   // before the object: white space, then '{'
    J_VALUE,   // a value expected
    J_KEY0,    // after '{': a key or '}'
    J_KEY,     // after ',' in an object: a key
    J_COLON,
    J_ELEM0,   // after '[': a value or ']'
    J_AFTER,   // after a value: ',' or the container's end
    J_STR,     // in a string (key set: a key's)
    J_ESC,
    J_HEX,
    J_NUM,     // in a number: sub says where
    J_LIT,     // in true / false / null
    J_DONE,
};
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

typedef struct jscan {
    int st, sub, depth;
    bool key;
    const char *lit;
    char stack[MAX_DEPTH];
} jscan;

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool num_may_end(int sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

// Takes byte c: 1 taken (*skip: white space before the object, not part of the arguments), 0
// not JSON.
static int jscan_byte(jscan *j, char c, bool *skip) {
    *skip = false;
again:
    switch (j->st) {
    case J_START:
        if (is_ws(c)) return *skip = true, 1;
        if (c != '{') return 0;
        j->stack[j->depth++] = '{';
        j->st = J_KEY0;
        return 1;
    case J_VALUE:
    case J_ELEM0:
        if (is_ws(c)) return 1;
        if (j->st == J_ELEM0 && c == ']') {
            j->depth--;
            j->st = j->depth ? J_AFTER : J_DONE;
            return 1;
        }
        if (c == '{' || c == '[') {
            if (j->depth == MAX_DEPTH) return 0;
            j->stack[j->depth++] = c;
            j->st = c == '{' ? J_KEY0 : J_ELEM0;
        } else if (c == '"') {
            j->st = J_STR, j->key = false;
        } else if (c == '-' || is_digit(c)) {
            j->st = J_NUM, j->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        } else if (c == 't' || c == 'f' || c == 'n') {
            j->st = J_LIT, j->lit = c == 't' ? "true" : c == 'f' ? "false" : "null", j->sub = 1;
        } else
            return 0;
        return 1;
    case J_KEY0:
    case J_KEY:
        if (is_ws(c)) return 1;
        if (c == '"') return j->st = J_STR, j->key = true, 1;
        if (j->st == J_KEY0 && c == '}') {
            j->depth--;
            j->st = j->depth ? J_AFTER : J_DONE;
            return 1;
        }
        return 0;
    case J_COLON:
        if (is_ws(c)) return 1;
        return c == ':' ? (j->st = J_VALUE, 1) : 0;
    case J_AFTER:
        if (is_ws(c)) return 1;
        if (c == ',') return j->st = j->stack[j->depth - 1] == '{' ? J_KEY : J_VALUE, 1;
        if ((c == '}' && j->stack[j->depth - 1] == '{') || (c == ']' && j->stack[j->depth - 1] == '[')) {
            j->depth--;
            j->st = j->depth ? J_AFTER : J_DONE;
            return 1;
        }
        return 0;
    case J_STR:
        if (c == '"') return j->st = j->key ? J_COLON : J_AFTER, 1;
        if (c == '\\') return j->st = J_ESC, 1;
        return (unsigned char)c >= 0x20;
    case J_ESC:
        if (c == 'u') return j->st = J_HEX, j->sub = 0, 1;
        if (!strchr("\"\\/bfnrt", c) || !c) return 0;
        return j->st = J_STR, 1;
    case J_HEX:
        if (!is_digit(c) && !((c | 0x20) >= 'a' && (c | 0x20) <= 'f')) return 0;
        if (++j->sub == 4) j->st = J_STR;
        return 1;
    case J_NUM:
        switch (j->sub) {
        case N_MINUS:
            if (!is_digit(c)) return 0;
            j->sub = c == '0' ? N_ZERO : N_INT;
            return 1;
        case N_ZERO:
        case N_INT:
            if (is_digit(c) && j->sub == N_INT) return 1;
            if (c == '.') return j->sub = N_DOT, 1;
            if (c == 'e' || c == 'E') return j->sub = N_E, 1;
            break;
        case N_DOT:
        case N_FRAC:
            if (is_digit(c)) return j->sub = N_FRAC, 1;
            if (j->sub == N_FRAC && (c == 'e' || c == 'E')) return j->sub = N_E, 1;
            break;
        case N_E:
            if (c == '+' || c == '-') return j->sub = N_ESIGN, 1;
            if (is_digit(c)) return j->sub = N_EXP, 1;
            return 0;
        case N_ESIGN:
        case N_EXP:
            if (is_digit(c)) return j->sub = N_EXP, 1;
            break;
        }
        if (!num_may_end(j->sub)) return 0;
        j->st = J_AFTER; // the number ended before c: c is the next token's
        goto again;
    case J_LIT:
        if (c != j->lit[j->sub]) return 0;
        if (!j->lit[++j->sub]) j->st = J_AFTER;
        return 1;
    }
    return 0; // J_DONE: nothing after the object
}

// ---------------------------------------------------------------------------------------------
// Parsing headers and trailers: a cursor over the collected bytes

enum { NEED = 0, FAIL = -1 }; // else: bytes used (> 0), or OK_* for trailers
enum { OK_CONTENT = 1, OK_NEXT = 2 }; // trailers: back to answer text, or another call's header

typedef struct cur {
    const char *s;
    size_t n, i;
} cur;

static void c_ws(cur *c) {
    while (c->i < c->n && is_ws(c->s[c->i])) c->i++;
}

// The literal next: 1, NEED where the bytes end inside it, FAIL where they differ.
static int c_lit(cur *c, const char *lit) {
    size_t k = strlen(lit), have = c->n - c->i < k ? c->n - c->i : k;
    if (memcmp(c->s + c->i, lit, have)) return FAIL;
    if (have < k) return NEED;
    c->i += k;
    return 1;
}

// Whether the literal is next (or may be: NEED), without taking it.
static int c_peek(const cur *c, const char *lit) {
    cur d = *c;
    return c_lit(&d, lit);
}

// The end of a section's call: another call (`next` follows: OK_NEXT, not taken) or the
// section's end (`end`, taken: OK_CONTENT); NEED while the bytes may still begin either.
static int c_next_or_end(cur *c, const char *next, const char *end) {
    int a = c_peek(c, next), b = c_lit(c, end);
    if (a == 1) return OK_NEXT;
    if (b == 1) return OK_CONTENT;
    return a == NEED || b == NEED ? NEED : FAIL;
}

static bool name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || is_digit(ch) || ch == '_' || ch == '-' || ch == '.';
}

// A tool name's characters (letters, digits, _ - .) up to the first other byte, into out; NEED
// where the bytes end first, FAIL where it is empty or too long.
static int c_name(cur *c, char *out) {
    size_t k = 0;
    while (c->i + k < c->n && name_char(c->s[c->i + k])) k++;
    if (c->i + k == c->n) return k >= MAX_NAME ? FAIL : NEED;
    if (k == 0 || k >= MAX_NAME) return FAIL;
    memcpy(out, c->s + c->i, k);
    out[k] = 0;
    c->i += k;
    return 1;
}

// A JSON string holding a tool name ("get_weather"; no escapes).
static int c_json_name(cur *c, char *out) {
    int r = c_lit(c, "\"");
    if (r != 1) return r;
    if ((r = c_name(c, out)) != 1) return r;
    return c_lit(c, "\"");
}

// A JSON string of any content (skipped), for Mistral's "id".
static int c_json_string(cur *c) {
    int r = c_lit(c, "\"");
    if (r != 1) return r;
    for (; c->i < c->n; c->i++) {
        if (c->s[c->i] == '\\') {
            if (++c->i == c->n) return NEED;
        } else if (c->s[c->i] == '"') {
            c->i++;
            return 1;
        } else if ((unsigned char)c->s[c->i] < 0x20)
            return FAIL;
    }
    return NEED;
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        int r_ = (x);                                                                                                  \
        if (r_ != 1) return r_;                                                                                        \
    } while (0)

// `"name": "NAME", "KEY":` (KEY, or ALT where given), blanks allowed between: the head of the
// JSON call objects (hermes, llama3, mistral) after their opening brace.
static int c_name_then_args(cur *c, char *name, const char *key, const char *alt) {
    c_ws(c);
    TRY(c_lit(c, "\"name\""));
    c_ws(c);
    TRY(c_lit(c, ":"));
    c_ws(c);
    TRY(c_json_name(c, name));
    c_ws(c);
    TRY(c_lit(c, ","));
    c_ws(c);
    int r = c_lit(c, key);
    if (r == FAIL && alt) r = c_lit(c, alt);
    if (r != 1) return r;
    c_ws(c);
    return c_lit(c, ":");
}

// ---------------------------------------------------------------------------------------------
// The parser

enum { P_CONTENT, P_HEADER, P_ARGS, P_TRAILER, P_KV, P_VALUE, P_HARMONY, P_SKIP };

struct srv_tools {
    enum tok_tool_format f;
    json_t *tools;
    char id_prefix[16];
    uint64_t seed;
    int state;
    bool first;       // mistral: the section's first call (its '[' comes first)
    bool after_call;  // white space after a call is held (dropped before the next call or at the end)
    bool opener_seen; // llama3: the reply's start is past (no call can begin later)
    int style;        // deepseek: 0 "function<sep>NAME\n```json\n", 1 "NAME<sep>"
    srv_buf hold;     // CONTENT: bytes that may begin the opener; HEADER, TRAILER, KV: the bytes so far
    srv_buf raw;      // HEADER: the call's text from its opener (answer text if it is not a call)
    srv_buf ws;       // white space held after a call
    srv_buf text;     // answer text to hand on
    srv_buf args;     // argument bytes to hand on
    jscan js;
    int n_calls;
    bool in_call;
    json_t *fn;       // the called tool's "function" object
    char name[MAX_NAME], id[MAX_NAME + 32];
    char key[MAX_KEY];
    int n_pairs;
    bool harmony_done; // harmony: the arguments' object closed
    bool single;       // one call at most: text after it is answer text (parallel_tool_calls false)
};

static const char *opener(enum tok_tool_format f) {
    switch (f) {
    case TOK_TOOLS_HERMES:
    case TOK_TOOLS_QWEN3_CODER:
    case TOK_TOOLS_GLM45: return "<tool_call>";
    case TOK_TOOLS_DEEPSEEK: return "<｜tool▁calls▁begin｜>";
    case TOK_TOOLS_KIMI_K2: return "<|tool_calls_section_begin|>";
    case TOK_TOOLS_MISTRAL:
    case TOK_TOOLS_MISTRAL_ARGS: return "[TOOL_CALLS]";
    default: return NULL; // llama3: only the reply's start; harmony: its channels
    }
}

static void buf_clear(srv_buf *b) { b->n = 0; }

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void make_id(srv_tools *p) {
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    if (p->f == TOK_TOOLS_KIMI_K2) {
        snprintf(p->id, sizeof(p->id), "functions.%s:%d", p->name, p->n_calls);
        return;
    }
    bool mistral = p->f == TOK_TOOLS_MISTRAL || p->f == TOK_TOOLS_MISTRAL_ARGS;
    size_t k = mistral ? 0 : (size_t)snprintf(p->id, sizeof(p->id), "%s", p->id_prefix);
    uint64_t x = mix(p->seed ^ mix((uint64_t)p->n_calls + 1));
    for (int i = 0; i < (mistral ? 9 : 24); i++) {
        if (i % 10 == 0) x = mix(x + (uint64_t)i);
        p->id[k++] = alnum[x % 62];
        x /= 62;
    }
    p->id[k] = 0;
}

static json_t *find_tool(const srv_tools *p, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(p->tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        json_t *nm = json_object_get(fn, "name");
        if (json_is_string(nm) && !strcmp(json_string_value(nm), name)) return fn;
    }
    return NULL;
}

static void flush_text(srv_tools *p, srv_tc_emit emit, void *ctx) {
    if (!p->text.n) return;
    srv_tc_event e = {.kind = SRV_TC_TEXT, .s = p->text.p, .n = p->text.n};
    emit(ctx, &e);
    buf_clear(&p->text);
}

static void flush_args(srv_tools *p, srv_tc_emit emit, void *ctx) {
    if (!p->args.n) return;
    srv_tc_event e = {.kind = SRV_TC_ARGS, .index = p->n_calls - 1, .id = p->id, .name = p->name, .s = p->args.p,
                      .n = p->args.n};
    emit(ctx, &e);
    buf_clear(&p->args);
}

static void text_add(srv_tools *p, const char *s, size_t n) {
    if (p->after_call && p->ws.n) srv_buf_add(&p->text, p->ws.p, p->ws.n);
    buf_clear(&p->ws);
    p->after_call = false;
    srv_buf_add(&p->text, s, n);
}

// The header parsed: the call starts, if its tool is the request's.
static bool start_call(srv_tools *p, srv_tc_emit emit, void *ctx) {
    json_t *fn = find_tool(p, p->name);
    if (!fn) return false;
    p->fn = fn;
    flush_text(p, emit, ctx);
    buf_clear(&p->ws);
    make_id(p);
    p->n_calls++;
    p->in_call = true;
    p->n_pairs = 0;
    p->js = (jscan){0};
    srv_tc_event e = {.kind = SRV_TC_START, .index = p->n_calls - 1, .id = p->id, .name = p->name};
    emit(ctx, &e);
    return true;
}

static void end_call(srv_tools *p, bool broken, srv_tc_emit emit, void *ctx) {
    flush_args(p, emit, ctx);
    srv_tc_event e = {.kind = SRV_TC_END, .index = p->n_calls - 1, .id = p->id, .name = p->name, .broken = broken};
    emit(ctx, &e);
    p->in_call = false;
    p->after_call = !broken;
}

// ---------------------------------------------------------------------------------------------
// Headers per format: bytes after the opener (or after the call before, in a section) up to the
// arguments. Return the bytes used, NEED or FAIL; set p->name.

static int header(srv_tools *p, cur *c) {
    switch (p->f) {
    case TOK_TOOLS_HERMES: // {"name": "NAME", "arguments":
        c_ws(c);
        TRY(c_lit(c, "{"));
        TRY(c_name_then_args(c, p->name, "\"arguments\"", "\"parameters\""));
        return (int)c->i;
    case TOK_TOOLS_LLAMA3: // [<|python_tag|>]{["type": "function",] "name": "NAME", "parameters":
        c_ws(c);
        if (c_peek(c, "<") != FAIL) TRY(c_lit(c, "<|python_tag|>"));
        c_ws(c);
        TRY(c_lit(c, "{"));
        c_ws(c);
        if (c_peek(c, "\"t") != FAIL) {
            TRY(c_lit(c, "\"type\""));
            c_ws(c);
            TRY(c_lit(c, ":"));
            c_ws(c);
            TRY(c_lit(c, "\"function\""));
            c_ws(c);
            TRY(c_lit(c, ","));
        }
        TRY(c_name_then_args(c, p->name, "\"parameters\"", "\"arguments\""));
        return (int)c->i;
    case TOK_TOOLS_QWEN3_CODER: // <function=NAME>
        c_ws(c);
        TRY(c_lit(c, "<function="));
        TRY(c_name(c, p->name));
        TRY(c_lit(c, ">"));
        return (int)c->i;
    case TOK_TOOLS_GLM45: // NAME, up to a newline or the first <arg_key> / </tool_call>
        c_ws(c);
        TRY(c_name(c, p->name));
        if (c->s[c->i] != '\n' && c->s[c->i] != '<') return FAIL;
        return (int)c->i;
    case TOK_TOOLS_DEEPSEEK: // <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n, or NAME<｜tool▁sep｜>
        c_ws(c);
        TRY(c_lit(c, "<｜tool▁call▁begin｜>"));
        TRY(c_name(c, p->name));
        TRY(c_lit(c, "<｜tool▁sep｜>"));
        if (strcmp(p->name, "function")) return p->style = 1, (int)c->i;
        {
            cur d = *c;
            int r = c_name(&d, p->name);
            if (r == NEED) return NEED;
            if (r == FAIL || c_peek(&d, "\n") == FAIL) { // a tool called "function", V3.1's way
                strcpy(p->name, "function");
                return p->style = 1, (int)c->i;
            }
            *c = d;
        }
        TRY(c_lit(c, "\n```json"));
        p->style = 0;
        return (int)c->i;
    case TOK_TOOLS_KIMI_K2: // <|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>
        c_ws(c);
        TRY(c_lit(c, "<|tool_call_begin|>"));
        c_ws(c);
        if (c_peek(c, "functions.") != FAIL) TRY(c_lit(c, "functions."));
        {
            // NAME:I, the name's own characters up to its last ':'
            size_t start = c->i;
            TRY(c_name(c, p->name));
            if (c->s[c->i] != ':') return FAIL;
            c->i++;
            while (c->i < c->n && is_digit(c->s[c->i])) c->i++;
            if (c->i == c->n) return NEED;
            if (c->i == start) return FAIL;
        }
        c_ws(c);
        TRY(c_lit(c, "<|tool_call_argument_begin|>"));
        return (int)c->i;
    case TOK_TOOLS_MISTRAL: // [{"name": "NAME", "arguments": (the first call), {"name": ... (the next)
        c_ws(c);
        if (p->first) {
            TRY(c_lit(c, "["));
            c_ws(c);
        }
        TRY(c_lit(c, "{"));
        TRY(c_name_then_args(c, p->name, "\"arguments\"", NULL));
        return (int)c->i;
    case TOK_TOOLS_MISTRAL_ARGS: // NAME[ARGS], or NAME[CALL_ID]ID[ARGS]
        TRY(c_name(c, p->name));
        if (c_peek(c, "[C") != FAIL) {
            TRY(c_lit(c, "[CALL_ID]"));
            char id[MAX_NAME];
            TRY(c_name(c, id));
        }
        TRY(c_lit(c, "[ARGS]"));
        return (int)c->i;
    default: return FAIL;
    }
}

// Trailers: the bytes after the arguments' object. OK_CONTENT / OK_NEXT (c->i: where what
// follows begins), NEED or FAIL.
static int trailer(srv_tools *p, cur *c) {
    switch (p->f) {
    case TOK_TOOLS_HERMES:
        c_ws(c);
        TRY(c_lit(c, "}"));
        c_ws(c);
        TRY(c_lit(c, "</tool_call>"));
        return OK_CONTENT;
    case TOK_TOOLS_LLAMA3:
        c_ws(c);
        TRY(c_lit(c, "}"));
        return OK_CONTENT;
    case TOK_TOOLS_DEEPSEEK:
        c_ws(c);
        if (p->style == 0) {
            TRY(c_lit(c, "```"));
            c_ws(c);
        }
        TRY(c_lit(c, "<｜tool▁call▁end｜>"));
        c_ws(c);
        return c_next_or_end(c, "<｜tool▁call▁begin｜>", "<｜tool▁calls▁end｜>");
    case TOK_TOOLS_KIMI_K2:
        c_ws(c);
        TRY(c_lit(c, "<|tool_call_end|>"));
        c_ws(c);
        return c_next_or_end(c, "<|tool_call_begin|>", "<|tool_calls_section_end|>");
    case TOK_TOOLS_MISTRAL:
        c_ws(c);
        if (c_peek(c, ",") != FAIL) { // , "id": "..."
            cur d = *c;
            TRY(c_lit(&d, ","));
            c_ws(&d);
            if (c_peek(&d, "\"id\"") != FAIL) {
                TRY(c_lit(&d, "\"id\""));
                c_ws(&d);
                TRY(c_lit(&d, ":"));
                c_ws(&d);
                TRY(c_json_string(&d));
                c_ws(&d);
                *c = d;
            }
        }
        TRY(c_lit(c, "}"));
        c_ws(c);
        if (c_peek(c, ",") == 1) {
            c->i++;
            return OK_NEXT;
        }
        TRY(c_lit(c, "]"));
        return OK_CONTENT;
    case TOK_TOOLS_MISTRAL_ARGS: return OK_CONTENT;
    default: return FAIL;
    }
}

// ---------------------------------------------------------------------------------------------
// Key/value arguments (glm4.5, qwen3-coder)

// Between pairs: a pair's opening up to its value (1, the key in p->key), the call's end (2),
// NEED or FAIL.
static int kv_between(srv_tools *p, cur *c) {
    c_ws(c);
    bool glm = p->f == TOK_TOOLS_GLM45;
    const char *end = glm ? "</tool_call>" : "</function>";
    int r = c_peek(c, end);
    if (r == NEED) return NEED;
    if (r == 1) {
        c->i += strlen(end);
        if (!glm) {
            c_ws(c);
            TRY(c_lit(c, "</tool_call>"));
        }
        return 2;
    }
    TRY(c_lit(c, glm ? "<arg_key>" : "<parameter="));
    const char *close = glm ? "</arg_key>" : ">";
    const char *at = memmem(c->s + c->i, c->n - c->i, close, strlen(close));
    if (!at) return c->n - c->i > MAX_KEY ? FAIL : NEED;
    size_t k = (size_t)(at - (c->s + c->i));
    if (k == 0 || k >= MAX_KEY || memchr(c->s + c->i, '<', k) || memchr(c->s + c->i, '\n', k)) return FAIL;
    memcpy(p->key, c->s + c->i, k);
    p->key[k] = 0;
    c->i += k + strlen(close);
    if (glm) {
        c_ws(c);
        TRY(c_lit(c, "<arg_value>"));
    }
    return 1;
}

// Whether the tool's schema makes parameter key a string.
static bool string_param(const srv_tools *p, const char *key) {
    json_t *type = json_object_get(json_object_get(json_object_get(json_object_get(p->fn, "parameters"), "properties"), key),
                                   "type");
    if (json_is_string(type)) return !strcmp(json_string_value(type), "string");
    return false;
}

// A value's text as JSON: a string parameter's as a string; another's as itself where it reads
// as JSON, else as a string.
static void kv_value(srv_tools *p, const char *v, size_t n) {
    json_t *k = srv_json_str(p->key, strlen(p->key));
    char *ks = json_dumps(k, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(k);
    srv_buf_add(&p->args, p->n_pairs ? ", " : "{", p->n_pairs ? 2 : 1);
    srv_buf_add(&p->args, ks, strlen(ks));
    srv_buf_add(&p->args, ": ", 2);
    free(ks);
    p->n_pairs++;
    json_t *j = NULL;
    size_t a = 0, b = n;
    while (a < b && is_ws(v[a])) a++;
    while (b > a && is_ws(v[b - 1])) b--;
    if (!string_param(p, p->key) && b > a) j = json_loadb(v + a, b - a, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
    if (j) {
        srv_buf_add(&p->args, v + a, b - a);
        json_decref(j);
        return;
    }
    json_t *s = srv_json_str(v, n);
    char *ss = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT);
    srv_buf_add(&p->args, ss, strlen(ss));
    free(ss);
    json_decref(s);
}

// ---------------------------------------------------------------------------------------------
// The machine

static void feed(srv_tools *p, const char *s, size_t n, srv_tc_emit emit, void *ctx);

// Not a call after all: the text from the opener on is answer text (not looked at again).
static void not_a_call(srv_tools *p) {
    text_add(p, p->raw.p, p->raw.n);
    buf_clear(&p->raw);
    buf_clear(&p->hold);
    p->state = P_CONTENT;
    p->opener_seen = true;
}

// A broken call: it ends, and the bytes from the one that broke it on are answer text again
// (the caller feeds them on).
static void broken(srv_tools *p, srv_tc_emit emit, void *ctx) {
    end_call(p, true, emit, ctx);
    p->state = P_CONTENT;
    p->opener_seen = true;
    buf_clear(&p->hold);
}

static void begin_header(srv_tools *p) {
    p->state = P_HEADER;
    buf_clear(&p->hold);
}

static void content_byte(srv_tools *p, char c) {
    const char *op = p->single && p->n_calls ? NULL : opener(p->f);
    if (p->after_call && !p->hold.n && is_ws(c)) {
        srv_buf_add(&p->ws, &c, 1);
        return;
    }
    if (!op) { // llama3 past its start, or harmony
        text_add(p, &c, 1);
        return;
    }
    srv_buf_add(&p->hold, &c, 1);
    size_t k = strlen(op);
    if (memcmp(p->hold.p, op, p->hold.n)) {
        // not the opener: its first byte is text, the rest may begin it
        char tmp[64];
        size_t m = p->hold.n;
        memcpy(tmp, p->hold.p, m);
        buf_clear(&p->hold);
        text_add(p, tmp, 1);
        for (size_t i = 1; i < m; i++) content_byte(p, tmp[i]);
    } else if (p->hold.n == k) {
        buf_clear(&p->ws); // white space between calls is dropped
        buf_clear(&p->raw);
        srv_buf_add(&p->raw, op, k);
        p->first = true;
        begin_header(p);
    }
}

static void feed(srv_tools *p, const char *s, size_t n, srv_tc_emit emit, void *ctx) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
    again: // c again, in the state it led to
        switch (p->state) {
        case P_CONTENT:
            if (p->f == TOK_TOOLS_LLAMA3 && !p->opener_seen) { // the reply's start: a call or not
                p->opener_seen = true;
                buf_clear(&p->raw);
                begin_header(p);
                goto again;
            }
            content_byte(p, c);
            break;
        case P_HEADER: {
            srv_buf_add(&p->hold, &c, 1);
            srv_buf_add(&p->raw, &c, 1);
            cur cu = {p->hold.p, p->hold.n, 0};
            int r = p->hold.n > MAX_HEADER ? FAIL : header(p, &cu);
            if (r == NEED) break;
            if (r == FAIL || !start_call(p, emit, ctx)) {
                not_a_call(p);
                break;
            }
            p->first = false;
            // the header's last byte ended it: what follows it is the arguments
            size_t used = (size_t)r, left = p->hold.n - used;
            char tmp[MAX_HEADER + 8];
            memcpy(tmp, p->hold.p + used, left);
            buf_clear(&p->hold);
            buf_clear(&p->raw);
            p->state = p->f == TOK_TOOLS_GLM45 || p->f == TOK_TOOLS_QWEN3_CODER ? P_KV : P_ARGS;
            feed(p, tmp, left, emit, ctx);
            break;
        }
        case P_ARGS: {
            bool skip;
            if (!jscan_byte(&p->js, c, &skip)) {
                broken(p, emit, ctx);
                goto again;
            }
            if (!skip) srv_buf_add(&p->args, &c, 1);
            if (p->js.st == J_DONE) {
                flush_args(p, emit, ctx);
                p->state = P_TRAILER;
                buf_clear(&p->hold);
            }
            break;
        }
        case P_TRAILER: {
            srv_buf_add(&p->hold, &c, 1);
            cur cu = {p->hold.p, p->hold.n, 0};
            int r = p->hold.n > MAX_HEADER ? FAIL : trailer(p, &cu);
            if (r == NEED) break;
            end_call(p, false, emit, ctx);
            char tmp[MAX_HEADER + 8];
            size_t used = r == FAIL ? 0 : cu.i, left = p->hold.n - used;
            memcpy(tmp, p->hold.p + used, left);
            buf_clear(&p->hold);
            if (r == OK_NEXT && !p->single) {
                buf_clear(&p->raw);
                begin_header(p);
            } else {
                p->state = P_CONTENT;
                if (r == FAIL) p->after_call = false; // the markup after it is answer text
            }
            feed(p, tmp, left, emit, ctx);
            break;
        }
        case P_KV: {
            srv_buf_add(&p->hold, &c, 1);
            cur cu = {p->hold.p, p->hold.n, 0};
            int r = p->hold.n > MAX_HEADER ? FAIL : kv_between(p, &cu);
            if (r == NEED) break;
            if (r == FAIL) {
                char tmp[MAX_HEADER + 8];
                size_t m = p->hold.n;
                memcpy(tmp, p->hold.p, m);
                broken(p, emit, ctx);
                feed(p, tmp, m, emit, ctx); // (c among them)
                break;
            }
            char tmp[MAX_HEADER + 8];
            size_t left = p->hold.n - cu.i;
            memcpy(tmp, p->hold.p + cu.i, left);
            buf_clear(&p->hold);
            if (r == 2) {
                srv_buf_add(&p->args, p->n_pairs ? "}" : "{}", p->n_pairs ? 1 : 2);
                end_call(p, false, emit, ctx);
                p->state = P_CONTENT;
            } else
                p->state = P_VALUE;
            feed(p, tmp, left, emit, ctx);
            break;
        }
        case P_VALUE: {
            srv_buf_add(&p->hold, &c, 1);
            const char *close = p->f == TOK_TOOLS_GLM45 ? "</arg_value>" : "</parameter>";
            size_t k = strlen(close);
            if (p->hold.n < k || memcmp(p->hold.p + p->hold.n - k, close, k)) break;
            const char *v = p->hold.p;
            size_t m = p->hold.n - k;
            if (p->f == TOK_TOOLS_QWEN3_CODER) { // the template's newlines around the value
                if (m && v[0] == '\n') v++, m--;
                if (m && v[m - 1] == '\n') m--;
            }
            kv_value(p, v, m);
            flush_args(p, emit, ctx);
            buf_clear(&p->hold);
            p->state = P_KV;
            break;
        }
        case P_SKIP: break;
        }
    }
}

srv_tools *srv_tools_init(enum tok_tool_format f, json_t *tools, const char *id_prefix, uint64_t seed) {
    if (f == TOK_TOOLS_NONE || f >= TOK_TOOLS_COUNT) return NULL;
    srv_tools *p = ft_calloc(1, sizeof(*p));
    p->f = f;
    p->tools = json_incref(tools);
    snprintf(p->id_prefix, sizeof(p->id_prefix), "%s", id_prefix);
    p->seed = seed;
    p->state = P_CONTENT;
    return p;
}

void srv_tools_free(srv_tools *p) {
    if (!p) return;
    json_decref(p->tools);
    srv_buf_free(&p->hold);
    srv_buf_free(&p->raw);
    srv_buf_free(&p->ws);
    srv_buf_free(&p->text);
    srv_buf_free(&p->args);
    free(p);
}

int srv_tools_n_calls(const srv_tools *p) { return p->n_calls; }

void srv_tools_single(srv_tools *p) { p->single = true; }

void srv_tools_feed(srv_tools *p, const char *s, size_t n, srv_tc_emit emit, void *ctx) {
    feed(p, s, n, emit, ctx);
    flush_text(p, emit, ctx);
    flush_args(p, emit, ctx);
}

void srv_tools_harmony(srv_tools *p, enum tok_channel ch, const char *s, size_t n, srv_tc_emit emit, void *ctx) {
    if (ch == TOK_CHANNEL_CALL_HEADER) {
        // " to=functions.NAME<|channel|>commentary json", "<|channel|>commentary to=functions.NAME <|constrain|>json"
        const char *to = memmem(s, n, " to=functions.", 14);
        p->state = P_SKIP;
        if (!to || (p->single && p->n_calls)) return;
        size_t a = (size_t)(to - s) + 14, k = 0;
        while (a + k < n && name_char(s[a + k])) k++;
        if (k == 0 || k >= MAX_NAME) return;
        memcpy(p->name, s + a, k);
        p->name[k] = 0;
        if (!start_call(p, emit, ctx)) return;
        p->state = P_HARMONY;
        p->harmony_done = false;
    } else if (ch == TOK_CHANNEL_CALL && p->state == P_HARMONY) {
        for (size_t i = 0; i < n && !p->harmony_done; i++) {
            bool skip;
            if (!jscan_byte(&p->js, s[i], &skip)) {
                flush_args(p, emit, ctx);
                end_call(p, true, emit, ctx);
                p->state = P_SKIP;
                return;
            }
            if (!skip) srv_buf_add(&p->args, s + i, 1);
            p->harmony_done = p->js.st == J_DONE;
        }
        flush_args(p, emit, ctx);
    } else if (ch == TOK_CHANNEL_CALL_END && p->state == P_HARMONY) {
        end_call(p, !p->harmony_done, emit, ctx);
        p->state = P_SKIP;
    } else if (ch == TOK_CHANNEL_CONTENT) {
        text_add(p, s, n);
        flush_text(p, emit, ctx);
    }
}

void srv_tools_flush(srv_tools *p, srv_tc_emit emit, void *ctx) {
    switch (p->state) {
    case P_CONTENT:
        if (p->hold.n) text_add(p, p->hold.p, p->hold.n);
        break;
    case P_HEADER: not_a_call(p); break;
    case P_ARGS:
    case P_KV:
    case P_VALUE:
    case P_HARMONY: end_call(p, true, emit, ctx); break; // cut short
    case P_TRAILER: {
        // the arguments are whole: a call, whatever of its closing markup came
        cur cu = {p->hold.p, p->hold.n, 0};
        int r = trailer(p, &cu);
        end_call(p, false, emit, ctx);
        if (r == FAIL) text_add(p, p->hold.p, p->hold.n);
        break;
    }
    }
    buf_clear(&p->hold);
    buf_clear(&p->ws); // white space after the last call
    p->state = P_SKIP;
    flush_text(p, emit, ctx);
}

// ---------------------------------------------------------------------------------------------
// The reply: reasoning split off first

typedef struct reply_ctx {
    srv_tools *p;
    srv_buf *reasoning;
    srv_tc_emit emit;
    void *ctx;
} reply_ctx;

static void harmony_channel(void *ctx, enum tok_channel ch, const char *s, size_t n) {
    reply_ctx *r = ctx;
    if (ch == TOK_CHANNEL_REASONING) srv_buf_add(r->reasoning, s, n);
    else if (ch != TOK_CHANNEL_NONE) srv_tools_harmony(r->p, ch, s, n, r->emit, r->ctx);
}

void srv_tools_feed_reply(srv_tools *p, srv_think *t, const char *s, size_t n, srv_buf *reasoning, srv_tc_emit emit,
                          void *ctx) {
    if (t->harmony) {
        reply_ctx r = {p, reasoning, emit, ctx};
        tok_harmony_feed(&t->h, s, n, harmony_channel, &r);
        return;
    }
    srv_buf content = {0};
    srv_think_feed(t, s, n, &content, reasoning);
    srv_tools_feed(p, content.p, content.n, emit, ctx);
    srv_buf_free(&content);
}

void srv_tools_flush_reply(srv_tools *p, srv_think *t, srv_buf *reasoning, srv_tc_emit emit, void *ctx) {
    if (t->harmony) {
        reply_ctx r = {p, reasoning, emit, ctx};
        tok_harmony_flush(&t->h, harmony_channel, &r);
    } else {
        srv_buf content = {0};
        srv_think_flush(t, &content, reasoning);
        srv_tools_feed(p, content.p, content.n, emit, ctx);
        srv_buf_free(&content);
    }
    srv_tools_flush(p, emit, ctx);
}
