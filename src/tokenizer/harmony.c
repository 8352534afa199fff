// harmony.c: gpt-oss's replies split by channel as they stream (see tokenizer.h). A byte-wise
// state machine: a header is collected whole (it is short) and read once "<|message|>" ends it;
// in a message's text, bytes that may begin "<|end|>" are held until they prove not to.
#include "tokenizer.h"

#include <string.h>

enum {
    H_HEADER,  // collecting a message header, up to "<|message|>"
    H_TEXT,    // in a message's text, up to "<|end|>"
    H_BETWEEN, // after "<|end|>": expecting "<|start|>assistant"
    H_RAW,     // off the format: everything is answer
};

static const char k_message[] = "<|message|>", k_end[] = "<|end|>", k_start[] = "<|start|>assistant";

#define LEN(lit) (sizeof(lit) - 1)

void tok_harmony_init(tok_harmony *h, bool in_final) {
    memset(h, 0, sizeof(*h));
    h->state = in_final ? H_TEXT : H_HEADER;
    h->route = TOK_CHANNEL_CONTENT;
}

static bool ends_with(const char *s, size_t n, const char *lit, size_t len) {
    return n >= len && !memcmp(s + n - len, lit, len);
}

// The channel of a finished header (without its "<|message|>"): a call for a message to a
// recipient other than the assistant, else by the last channel named; a header naming no
// channel reads as answer.
static enum tok_channel header_channel(const char *hdr, size_t n) {
    for (size_t i = 0; i + 4 <= n; i++)
        if (!memcmp(hdr + i, " to=", 4) && !(n - i - 4 >= 9 && !memcmp(hdr + i + 4, "assistant", 9)))
            return TOK_CHANNEL_CALL;
    static const char k_channel[] = "<|channel|>";
    const char *name = NULL;
    for (size_t i = 0; i + LEN(k_channel) <= n; i++)
        if (!memcmp(hdr + i, k_channel, LEN(k_channel))) name = hdr + i + LEN(k_channel);
    if (!name) return TOK_CHANNEL_CONTENT;
    size_t len = 0;
    while (name + len < hdr + n && name[len] != ' ' && name[len] != '<') len++;
    return len == 8 && !memcmp(name, "analysis", 8) ? TOK_CHANNEL_REASONING : TOK_CHANNEL_CONTENT;
}

// Whether a header may begin so: every header opens with a marker or a recipient.
static bool header_start(char c) { return c == '<' || c == ' '; }

static void step(tok_harmony *h, char c, tok_channel_fn fn, void *ctx);

// Bytes held back that proved not to be the marker they began: the first is the state's own,
// the rest go through the machine again (they may begin a marker themselves).
static void release(tok_harmony *h, tok_channel_fn fn, void *ctx) {
    char held[TOK_HARMONY_HEADER_MAX];
    size_t m = h->n;
    memcpy(held, h->buf, m);
    h->n = 0;
    if (h->state == H_TEXT) fn(ctx, h->route, held, 1);
    else step(h, held[0], fn, ctx); // H_HEADER (from H_BETWEEN): the next header's first byte
    for (size_t k = 1; k < m; k++) step(h, held[k], fn, ctx);
}

// A message's text: bytes held while they may begin "<|end|>", which ends the message.
static void text_byte(tok_harmony *h, char c, tok_channel_fn fn, void *ctx) {
    h->buf[h->n++] = c;
    if (memcmp(h->buf, k_end, h->n)) release(h, fn, ctx);
    else if (h->n == LEN(k_end)) {
        h->n = 0, h->state = H_BETWEEN;
        if (h->route == TOK_CHANNEL_CALL) fn(ctx, TOK_CHANNEL_CALL_END, "", 0);
    }
}

// After "<|end|>": bytes held while they may begin "<|start|>assistant"; anything else begins
// the next header itself.
static void between_byte(tok_harmony *h, char c, tok_channel_fn fn, void *ctx) {
    h->buf[h->n++] = c;
    if (memcmp(h->buf, k_start, h->n)) h->state = H_HEADER, release(h, fn, ctx);
    else if (h->n == LEN(k_start)) h->n = 0, h->state = H_HEADER;
}

// A header: collected until "<|message|>", then read; a first byte no header begins with, or a
// header longer than the buffer, turns the reply into plain answer.
static void header_byte(tok_harmony *h, char c, tok_channel_fn fn, void *ctx) {
    if (h->n == 0 && !header_start(c)) {
        h->state = H_RAW;
        fn(ctx, TOK_CHANNEL_CONTENT, &c, 1);
        return;
    }
    h->buf[h->n++] = c;
    if (ends_with(h->buf, h->n, k_message, LEN(k_message))) {
        h->route = header_channel(h->buf, h->n - LEN(k_message));
        if (h->route == TOK_CHANNEL_CALL) fn(ctx, TOK_CHANNEL_CALL_HEADER, h->buf, h->n - LEN(k_message));
        h->n = 0;
        h->state = H_TEXT;
    } else if (h->n == sizeof(h->buf)) {
        fn(ctx, TOK_CHANNEL_CONTENT, h->buf, h->n);
        h->n = 0;
        h->state = H_RAW;
    }
}

static void step(tok_harmony *h, char c, tok_channel_fn fn, void *ctx) {
    switch (h->state) {
    case H_RAW: fn(ctx, TOK_CHANNEL_CONTENT, &c, 1); break;
    case H_HEADER: header_byte(h, c, fn, ctx); break;
    case H_TEXT: text_byte(h, c, fn, ctx); break;
    case H_BETWEEN: between_byte(h, c, fn, ctx); break;
    }
}

void tok_harmony_feed(tok_harmony *h, const char *s, size_t n, tok_channel_fn fn, void *ctx) {
    for (size_t i = 0; i < n; i++) {
        if (h->state == H_RAW) { // the rest at once
            fn(ctx, TOK_CHANNEL_CONTENT, s + i, n - i);
            return;
        }
        step(h, s[i], fn, ctx);
    }
}

void tok_harmony_flush(tok_harmony *h, tok_channel_fn fn, void *ctx) {
    if (h->state == H_TEXT && h->n) fn(ctx, h->route, h->buf, h->n);
    if (h->state == H_TEXT && h->route == TOK_CHANNEL_CALL) fn(ctx, TOK_CHANNEL_CALL_END, "", 0);
    h->n = 0;
    h->state = H_RAW; // nothing more after the end
}
