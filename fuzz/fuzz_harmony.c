// fuzz_harmony.c: libFuzzer target for gpt-oss's reply splitter (src/tokenizer/harmony.c).
//
// The first two input bytes pick two cut points and, by its low bit, whether the reply
// continues the final channel (a prefill); the rest is the reply. Fed whole and fed in three
// pieces at those cuts it must give the same text to each channel, and each channel's text must
// be taken from the reply in order (nothing invented); under ASan nothing is read or written out
// of bounds however long the headers and markers.
#include "../src/tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define N_CHANNELS 6 // enum tok_channel's values

typedef struct {
    char *buf[N_CHANNELS];
    size_t n[N_CHANNELS], cap[N_CHANNELS];
} outs;

static void collect(void *ctx, enum tok_channel ch, const char *s, size_t n) {
    outs *o = ctx;
    if ((unsigned)ch >= N_CHANNELS) abort();
    if (!n) return; // (a call's end)
    if (o->n[ch] + n > o->cap[ch]) {
        o->cap[ch] = 2 * (o->n[ch] + n);
        o->buf[ch] = realloc(o->buf[ch], o->cap[ch]);
        if (!o->buf[ch]) abort();
    }
    memcpy(o->buf[ch] + o->n[ch], s, n);
    o->n[ch] += n;
}

static void split(const char *s, size_t n, size_t a, size_t b, bool in_final, outs *o) {
    memset(o, 0, sizeof(*o));
    tok_harmony h;
    tok_harmony_init(&h, in_final);
    tok_harmony_feed(&h, s, a, collect, o);
    tok_harmony_feed(&h, s + a, b - a, collect, o);
    tok_harmony_feed(&h, s + b, n - b, collect, o);
    tok_harmony_flush(&h, collect, o);
}

static bool subsequence(const char *sub, size_t m, const char *s, size_t n) {
    size_t j = 0;
    for (size_t i = 0; i < n && j < m; i++) j += s[i] == sub[j];
    return j == m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const char *s = (const char *)data + 2;
    size_t n = size - 2, a = n ? data[0] % (n + 1) : 0, b = n ? data[1] % (n + 1) : 0;
    if (a > b) {
        size_t t = a;
        a = b;
        b = t;
    }
    bool in_final = data[0] & 1;
    outs whole, cut;
    split(s, n, n, n, in_final, &whole);
    split(s, n, a, b, in_final, &cut);
    for (int c = 0; c < N_CHANNELS; c++) {
        if (whole.n[c] != cut.n[c] || (whole.n[c] && memcmp(whole.buf[c], cut.buf[c], whole.n[c]))) abort();
        if (!subsequence(whole.buf[c], whole.n[c], s, n)) abort();
        free(whole.buf[c]);
        free(cut.buf[c]);
    }
    return 0;
}
