// fuzz_grammar.c: libFuzzer target for constrained decoding (src/engine/grammar.h): the GBNF
// parser (or, for an input that starts with '{', the JSON Schema compiler), then the matcher
// against the plain reference matcher.
//
// The input is a grammar, then "\n%%\n", then a subject (at most 256 bytes are used). A grammar
// that parses is matched against the subject byte by byte by the matcher (twice: with its memo,
// and with a memo of one byte, dropped before every step) and by grammar_ref: after each byte
// they must agree on whether it was taken and whether the grammar may end, and at the start and
// the end on every next byte's fate and on the token mask of a small fixed vocabulary (each
// token's bytes fed to a copy of the reference). Where the reference gives up (its cap of
// stacks) or the matcher fails on a limit, the input says nothing more. Under ASan and UBSan
// nothing may be read or written out of bounds however hostile the grammar.
#include "../src/engine/grammar.h"
#include "../src/engine/json_schema.h"

#include <stdlib.h>
#include <string.h>

static const char *const k_pieces[] = {"a", "b", "ab", "abc", "{", "}", "\"", "\":", ",", " ", "\n", "0", "12", "-",
                                       ".", "e", "true", "null", "[", "]", "\\", "\\u", "\xc3", "\xa9", "\xc3\xa9",
                                       "\xe4\xb8\xad", "x", "xyz", "ab", "", "<end>"};
enum { N_PIECES = sizeof(k_pieces) / sizeof(k_pieces[0]) };

static ft_grammar_vocab *g_vocab;
static size_t g_len[N_PIECES];
static bool g_eog[N_PIECES];

static void vocab_once(void) {
    if (g_vocab) return;
    for (int i = 0; i < N_PIECES; i++) {
        g_len[i] = strlen(k_pieces[i]);
        g_eog[i] = !strcmp(k_pieces[i], "<end>");
    }
    g_vocab = ft_grammar_vocab_from_pieces(N_PIECES, k_pieces, g_len, g_eog);
}

// Every next byte and every token as the reference sees them, against the matcher. Returns
// false when the reference overflowed on the way (nothing to compare).
static bool compare_next(ft_grammar_matcher *m, const ft_grammar_ref *r) {
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        ft_grammar_ref *x = ft_grammar_ref_clone(r);
        bool e = ft_grammar_ref_feed(x, &c, 1) && ft_grammar_ref_alive(x), over = ft_grammar_ref_overflow(x);
        ft_grammar_ref_free(x);
        if (over) return false;
        bool a = ft_grammar_matcher_allows_bytes(m, &c, 1);
        if (ft_grammar_matcher_failed(m, NULL)) return false;
        if (a != e) abort();
    }
    const uint64_t *mask = ft_grammar_matcher_mask(m);
    if (!mask) {
        if (!ft_grammar_matcher_failed(m, NULL)) abort(); // no mask only after a limit
        return false;
    }
    for (int t = 0; t < N_PIECES; t++) {
        bool want;
        if (g_eog[t]) {
            want = ft_grammar_ref_accepting(r);
        } else if (!g_len[t]) {
            want = false;
        } else {
            ft_grammar_ref *x = ft_grammar_ref_clone(r);
            want = ft_grammar_ref_feed(x, k_pieces[t], g_len[t]) && ft_grammar_ref_alive(x);
            bool over = ft_grammar_ref_overflow(x);
            ft_grammar_ref_free(x);
            if (over) return false;
        }
        if ((bool)(mask[t >> 6] >> (t & 63) & 1) != want) abort();
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vocab_once();
    const char *text = (const char *)data, *sep = memmem(data, size, "\n%%\n", 4);
    size_t n_text = sep ? (size_t)(sep - text) : size;
    const uint8_t *subj = sep ? (const uint8_t *)sep + 4 : NULL;
    size_t n_subj = sep ? size - n_text - 4 : 0;
    if (n_subj > 256) n_subj = 256;

    ft_err err = {{0}};
    ft_grammar *g = NULL;
    if (n_text && text[0] == '{') {
        json_t *schema = json_loadb(text, n_text, 0, NULL);
        if (!schema) return 0;
        g = ft_json_schema_grammar(schema, false, &err);
        json_decref(schema);
    } else {
        g = ft_grammar_parse_gbnf(text, n_text, &err);
    }
    if (!g) {
        if (!err.msg[0]) abort(); // a refusal always says why
        return 0;
    }
    ft_grammar_matcher_params tiny = ft_grammar_matcher_default_params();
    tiny.memo_bytes = 1;
    ft_grammar_matcher *m = ft_grammar_matcher_init(g, g_vocab, NULL), *m2 = ft_grammar_matcher_init(g, g_vocab, &tiny);
    ft_grammar_ref *r = ft_grammar_ref_init(g);
    bool ok = !ft_grammar_ref_overflow(r) && !ft_grammar_matcher_failed(m, NULL);
    if (ok && !compare_next(m, r)) ok = false;
    for (size_t i = 0; ok && i < n_subj; i++) {
        ft_grammar_ref *x = ft_grammar_ref_clone(r);
        bool e = ft_grammar_ref_feed(x, subj + i, 1) && ft_grammar_ref_alive(x);
        if (ft_grammar_ref_overflow(x)) {
            ft_grammar_ref_free(x);
            ok = false;
            break;
        }
        bool a = ft_grammar_matcher_feed(m, subj + i, 1), a2 = ft_grammar_matcher_feed(m2, subj + i, 1);
        if (ft_grammar_matcher_failed(m, NULL) || ft_grammar_matcher_failed(m2, NULL)) {
            ft_grammar_ref_free(x);
            ok = false;
            break;
        }
        if (a != e || a2 != e) abort();
        if (e) {
            ft_grammar_ref_free(r);
            r = x;
        } else {
            ft_grammar_ref_free(x);
        }
        if (ft_grammar_matcher_accepting(m) != ft_grammar_ref_accepting(r)) abort();
        if (ft_grammar_matcher_accepting(m2) != ft_grammar_ref_accepting(r)) abort();
    }
    if (ok) compare_next(m, r);
    ft_grammar_ref_free(r);
    ft_grammar_matcher_free(m);
    ft_grammar_matcher_free(m2);
    ft_grammar_free(g);
    return 0;
}
