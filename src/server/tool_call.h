// tool_call.h: a model's tool calls, parsed out of its reply as it streams (tool_call.c), and
// the grammar that forces a call in the model's own syntax (tool_grammar.c). Internal to
// src/server.
//
// The parser is fed the reply's text in pieces cut anywhere (a token's text at a time) and hands
// back, in order, events: answer text, and for each call its start (index, id, name), fragments
// of its arguments' JSON text (together one JSON object), and its end. Reasoning is split off
// before (srv_think), as for a reply without tools; gpt-oss's calls come from its harmony
// channels. The format is the template's (tok_chat_tool_format); a call's name must be one of
// the request's tools. Model output is untrusted: text that leaves the format before a call
// started is answer text, never an error; a call whose arguments stop being JSON ends there,
// marked broken (the rest of the reply is answer text), and so does one the reply ends inside.
//
// One parser per job, used by one thread at a time.
#ifndef FT_SERVER_TOOL_CALL_H
#define FT_SERVER_TOOL_CALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "srv_impl.h"

enum srv_tc_kind {
    SRV_TC_TEXT,  // answer text: s, n
    SRV_TC_START, // a call begins: index, id, name
    SRV_TC_ARGS,  // the next bytes of its arguments' JSON text: index, s, n
    SRV_TC_END,   // it ends: index, broken (its arguments are not one whole JSON object)
};

typedef struct srv_tc_event {
    enum srv_tc_kind kind;
    int index; // the call's number in the reply, from 0
    const char *id, *name;
    const char *s;
    size_t n;
    bool broken;
} srv_tc_event;

typedef void (*srv_tc_emit)(void *ctx, const srv_tc_event *e);

typedef struct srv_tools srv_tools;

// A parser for format f. tools: the request's tools in OpenAI's shape ([{"type": "function",
// "function": {"name", "parameters"}}, ...]; a reference is taken): the names a call may have,
// and the types of parameters that formats writing values bare (glm4.5, qwen3-coder) need.
// id_prefix: the ids made for calls ("call_", "toolu_"; Mistral's formats take 9 letters and
// digits, which their templates require; Kimi-K2's are its own "functions.NAME:I"). seed makes
// the ids. Returns NULL for TOK_TOOLS_NONE.
srv_tools *srv_tools_init(enum tok_tool_format f, json_t *tools, const char *id_prefix, uint64_t seed);
void srv_tools_free(srv_tools *p); // NULL is a no-op

// At most one call (parallel_tool_calls false): after it, the reply is answer text.
void srv_tools_single(srv_tools *p);
// Feeds the next piece of the reply's answer text (what srv_think leaves as content); events go
// to emit before it returns (text coalesced per call).
void srv_tools_feed(srv_tools *p, const char *s, size_t n, srv_tc_emit emit, void *ctx);
// gpt-oss: a harmony message to a recipient (tok_harmony's TOK_CHANNEL_CALL_*): its header,
// text and end. A recipient other than "functions.NAME" with NAME a tool of the request is not a
// call: its text is dropped, as without tools.
void srv_tools_harmony(srv_tools *p, enum tok_channel ch, const char *s, size_t n, srv_tc_emit emit, void *ctx);
// The reply's end: what was held back goes out (text, or the end of a call cut short).
void srv_tools_flush(srv_tools *p, srv_tc_emit emit, void *ctx);
// The whole reply as the APIs see it: reasoning split off by t (srv_think: <think>, a thought
// channel, or gpt-oss's harmony channels, whose calls come to the parser) into *reasoning, the
// rest parsed for calls. The reply's end: srv_tools_flush_reply.
void srv_tools_feed_reply(srv_tools *p, srv_think *t, const char *s, size_t n, srv_buf *reasoning, srv_tc_emit emit,
                          void *ctx);
void srv_tools_flush_reply(srv_tools *p, srv_think *t, srv_buf *reasoning, srv_tc_emit emit, void *ctx);
// Calls started so far.
int srv_tools_n_calls(const srv_tools *p);

// A call's events kept in the job (j->calls), for the non-streamed answers; the number of
// calls that ended whole.
void srv_calls_record(srv_job *j, const srv_tc_event *e);
int srv_calls_whole(const srv_job *j);

// A grammar that makes the reply one call (parallel: one or more) of the tools in format f, in
// the template's syntax, each call's arguments following its tool's parameters schema; only
// tools named by `only` (NULL: all) may be called. Returns NULL and sets *err where a schema
// does not compile, or f has no syntax to force.
ft_grammar *srv_tools_grammar(enum tok_tool_format f, json_t *tools, const char *only, bool parallel, bool lenient,
                              ft_err *err);

#endif
