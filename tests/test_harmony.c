// test_harmony.c: gpt-oss's replies split by channel (src/tokenizer/harmony.c), on strings as
// the detokenizer gives them (the harmony markers are tokens rendered as their text): each
// reply fed whole, in pieces of every size, and cut at every pair of points, must give the same
// reasoning and answer, written out here from the format (and llama.cpp's parser of it).
#include "test.h"
#include "../src/tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char content[512], reasoning[512], dropped[512];
} split;

static void add(char *dst, const char *s, size_t n) {
    size_t have = strlen(dst);
    if (have + n >= 512) n = 511 - have;
    memcpy(dst + have, s, n);
    dst[have + n] = 0;
}

static void collect(void *ctx, enum tok_channel ch, const char *s, size_t n) {
    split *o = ctx;
    add(ch == TOK_CHANNEL_CONTENT ? o->content : ch == TOK_CHANNEL_REASONING ? o->reasoning : o->dropped, s, n);
}

static const struct {
    const char *in, *reasoning, *content;
    bool in_final; // the reply continues the final channel's text (a prefill)
} g_cases[] = {
    // the usual reply: reasoning, then the answer up to <|return|> (not in the text)
    {"<|channel|>analysis<|message|>The user asks 2+2.<|end|><|start|>assistant<|channel|>final<|message|>4",
     "The user asks 2+2.", "4", false},
    // the answer alone; white space and markup look-alikes inside text are text
    {"<|channel|>final<|message|>  a <|en d|> b <|end| <|start|>x\n", "", "  a <|en d|> b <|end| <|start|>x\n",
     false},
    // several analysis messages, a preamble in commentary (answer), then the final answer
    {"<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis<|message|> two<|end|>"
     "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final"
     "<|message|>done",
     "one two", "Checking.done", false},
    // gpt-oss-20b's stray commentary before the channel; the last named counts
    {"<|channel|>commentary<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>commentary to=assistant"
     "<|channel|>final<|message|>c",
     "r", "c", false},
    // a tool call (recipient in the header) goes nowhere; a constrained final message is answer
    {"<|channel|>analysis<|message|>call it<|end|><|start|>assistant to=functions.get<|channel|>commentary "
     "<|constrain|>json<|message|>{\"a\":1}<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{}",
     "call it", "{}", false},
    {"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}", "", "", false},
    // cut short: inside the reasoning, inside a header, right after <|end|>
    {"<|channel|>analysis<|message|>thinking <|en", "thinking <|en", "", false},
    {"<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>fi", "a", "", false},
    {"<|channel|>analysis<|message|>a<|end|><|start|>assist", "a", "", false},
    // a header without <|start|>assistant after <|end|>
    {"<|channel|>analysis<|message|>a<|end|><|channel|>final<|message|>b", "a", "b", false},
    // off the format: plain text is the answer, from its first byte
    {"Hello <|channel|>final<|message|>x", "", "Hello <|channel|>final<|message|>x", false},
    {"", "", "", false},
    // a prefill continuing the answer
    {" more of it<|end|><|start|>assistant<|channel|>analysis<|message|>hm", "hm", " more of it", true},
};

static void run(const char *in, size_t n, const size_t *cuts, int n_cuts, bool in_final, split *o) {
    memset(o, 0, sizeof(*o));
    tok_harmony h;
    tok_harmony_init(&h, in_final);
    size_t at = 0;
    for (int c = 0; c <= n_cuts; c++) {
        size_t to = c < n_cuts ? cuts[c] : n;
        tok_harmony_feed(&h, in + at, to - at, collect, o);
        at = to;
    }
    tok_harmony_flush(&h, collect, o);
}

static bool same(const split *o, const char *reasoning, const char *content) {
    return !strcmp(o->reasoning, reasoning) && !strcmp(o->content, content);
}

TEST(harmony_splits_channels_however_cut) {
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cases); i++) {
        const char *in = g_cases[i].in;
        size_t n = strlen(in);
        split o;
        run(in, n, NULL, 0, g_cases[i].in_final, &o);
        CHECK(same(&o, g_cases[i].reasoning, g_cases[i].content), "case %zu whole: reasoning '%s' content '%s'", i,
              o.reasoning, o.content);
        // pieces of every size
        for (size_t step = 1; step < n; step++) {
            size_t cuts[1024];
            int k = 0;
            for (size_t at = step; at < n && k < 1024; at += step) cuts[k++] = at;
            run(in, n, cuts, k, g_cases[i].in_final, &o);
            CHECK(same(&o, g_cases[i].reasoning, g_cases[i].content),
                  "case %zu in pieces of %zu: reasoning '%s' content '%s'", i, step, o.reasoning, o.content);
        }
        // every pair of cut points (markers split across tokens anywhere)
        int bad = 0;
        for (size_t a = 1; a < n && bad < 3; a++)
            for (size_t b = a + 1; b < n && bad < 3; b++) {
                size_t cuts[2] = {a, b};
                run(in, n, cuts, 2, g_cases[i].in_final, &o);
                if (!same(&o, g_cases[i].reasoning, g_cases[i].content)) {
                    bad++;
                    CHECK(false, "case %zu cut at %zu and %zu: reasoning '%s' content '%s'", i, a, b, o.reasoning,
                          o.content);
                }
            }
    }
}

static bool subsequence(const char *sub, const char *s) {
    for (; *sub; sub++) {
        s = strchr(s, *sub);
        if (!s) return false;
        s++;
    }
    return true;
}

// Random replies of markers, marker beginnings and text: cut anywhere, they split as they do
// whole, and each channel's text is taken from the reply in order (nothing invented).
TEST(harmony_random_replies_split_alike_wherever_cut) {
    static const char *const parts[] = {"<|channel|>analysis<|message|>", "<|end|>", "<|start|>assistant",
                                        "<|channel|>final<|message|>", "<", "<|", "<|e", "<|en", "<|end",
                                        "<|end|", "<|start|", "x", "\n", " to=f", "\xc3\xa9"};
    unsigned seed = 7;
    int n_reasoning = 0, n_content = 0;
    for (int round = 0; round < 3000; round++) {
        char in[512] = "<|channel|>analysis<|message|>";
        int k = 1 + (int)(((seed = seed * 1103515245u + 12345u) >> 16) % 12);
        for (int i = 0; i < k; i++) {
            const char *p = parts[((seed = seed * 1103515245u + 12345u) >> 16) % FT_ARRAY_LEN(parts)];
            if (strlen(in) + strlen(p) < sizeof(in)) strcat(in, p);
        }
        size_t n = strlen(in), cut = ((seed = seed * 1103515245u + 12345u) >> 16) % n;
        split whole, cutted;
        run(in, n, NULL, 0, false, &whole);
        size_t cuts[1] = {cut};
        run(in, n, cuts, cut ? 1 : 0, false, &cutted);
        REQUIRE(same(&cutted, whole.reasoning, whole.content) && !strcmp(cutted.dropped, whole.dropped),
                "'%s' cut at %zu: '%s'/'%s' whole, '%s'/'%s' cut", in, cut, whole.reasoning, whole.content,
                cutted.reasoning, cutted.content);
        CHECK(subsequence(whole.reasoning, in) && subsequence(whole.content, in) && subsequence(whole.dropped, in),
              "'%s': output not taken from the reply", in);
        n_reasoning += whole.reasoning[0] != 0;
        n_content += whole.content[0] != 0;
    }
    CHECK(n_reasoning > 1000 && n_content > 200, "the replies barely reach the channels: %d, %d", n_reasoning,
          n_content);
}
