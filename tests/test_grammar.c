// test_grammar.c: constrained decoding (src/engine/grammar.h): GBNF parsing and its errors, the
// matcher against the plain reference matcher (grammar_ref.c) on written and random grammars,
// token masks against the brute-force answer (each token's bytes fed to a copy of the
// reference) over a synthetic vocabulary and qwen2's 151,936 tokens, JSON Schema compiled into
// grammars (documents valid under the schema accepted, invalid ones refused, as the
// independent validator json_check.c judges them; unsupported keywords refused with where), and
// the limits that stop a hostile grammar or schema.
#include "fixtures.h"
#include "json_check.h"
#include "../src/engine/grammar.h"
#include "../src/engine/json_schema.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ft_grammar *parse(const char *text) {
    ft_err err = {{0}};
    ft_grammar *g = ft_grammar_parse_gbnf(text, strlen(text), &err);
    if (!g) test_fail(__FILE__, __LINE__, "the grammar did not parse: %s\n%s", err.msg, text);
    return g;
}

// Whether g accepts s whole, by the matcher; records a failure where the reference disagrees
// (on the end, or on the byte where either dies).
static bool accepts(const ft_grammar *g, const char *s, size_t n) {
    ft_grammar_matcher *m = ft_grammar_matcher_init(g, NULL, NULL);
    ft_grammar_ref *r = ft_grammar_ref_init(g);
    bool ok = true;
    size_t i = 0;
    for (; i < n && ok; i++) {
        bool a = ft_grammar_matcher_feed(m, s + i, 1), b = ft_grammar_ref_feed(r, s + i, 1);
        if (a != b) test_fail(__FILE__, __LINE__, "byte %zu of '%.*s': matcher %d, reference %d", i, (int)n, s, a, b);
        ok = a;
    }
    bool acc = ok && ft_grammar_matcher_accepting(m);
    if (ok && acc != ft_grammar_ref_accepting(r))
        test_fail(__FILE__, __LINE__, "'%.*s': matcher accepting %d, reference %d", (int)n, s, acc,
                  ft_grammar_ref_accepting(r));
    ft_grammar_matcher_free(m);
    ft_grammar_ref_free(r);
    return acc;
}

static bool accepts_str(const ft_grammar *g, const char *s) { return accepts(g, s, strlen(s)); }

// ---------------------------------------------------------------------------------------------
// GBNF

static const struct {
    const char *gbnf;
    const char *yes[8], *no[8];
} g_gbnf_cases[] = {
    {"root ::= expr\n"
     "expr ::= term ((\"+\" | \"-\") term)*\n"
     "term ::= factor ((\"*\" | \"/\") factor)*\n"
     "factor ::= [0-9]+ | \"(\" expr \")\"\n",
     {"1", "12+3*(4-5)", "((7))", "1/2/3-4"},
     {"", "1+", "(1", "a", "1++2", "()"}},
    // bounded and unbounded repetition
    {"root ::= \"a\"{2} \"b\"{1,3} \"c\"{2,} \"d\"? \"e\"*",
     {"aabcc", "aabbbccccd", "aabcceee", "aabccdee"},
     {"abcc", "aabbbbcc", "aabc", "aabccdd", "aaabcc"}},
    {"root ::= ( \"x\" [0-9] ){0,3} \"!\"", {"!", "x1!", "x1x2x3!"}, {"x1x2x3x4!", "x!", "x12!"}},
    // classes over code points, negated, ranges past one byte, '.'
    {"root ::= [a-zà-ÿ]+ \"-\" [^a-z] [\\U0001F600-\\U0001F64F]",
     {"àbc-Z\xf0\x9f\x98\x80", "a-\xc3\xa9\xf0\x9f\x98\x83", "\xc3\xbf-\xe4\xb8\xad\xf0\x9f\x99\x8f"},
     {"A-Z\xf0\x9f\x98\x80", "a-b\xf0\x9f\x98\x80", "a-\xff\xf0\x9f\x98\x80", "a-\xed\xa0\x80\xf0\x9f\x98\x80",
      "a-Z\xf0\x9f\x98\x80x", "a-Z\xf0\x9f\x99\x90", "a-Z\xf0\x9f\x98"}},
    {"root ::= \"<\" .* \">\"", {"<>", "<a>b>", "<\xc3\xa9\xe2\x82\xac>"}, {"<", "a", "<\xc3>", "<\xc0\x80>"}},
    // escapes, comments, alternatives over several lines
    {"# a comment\n"
     "root ::= \"\\x41\\u00e9\\t\\\"\" | # after '|', a newline goes on\n"
     "  ( \"x\"\n"
     "      \"y\" ) |\n"
     "  [\\]\\[\\-] \"\\\\\"\n",
     {"A\xc3\xa9\t\"", "xy", "]\\", "[\\", "-\\"},
     {"x", "a\\", "A\xc3\xa9\t"}},
    // the empty literal, nullable groups
    {"root ::= (\"\" | \"a\") ( (\"b\" | \"\") \"c\" )*", {"", "a", "c", "abcbc", "cc"}, {"b", "ab", "ca"}},
    // recursion through a rule in the middle of an alternative
    {"root ::= item (\",\" item)*\nitem ::= \"[\" root? \"]\" | \"x\"",
     {"x", "[x,[]]", "[[[x]]],x", "[]"},
     {"[", "x,", "[]]", ""}},
    // alternatives that derive no string are left out: x never ends, [^...] has no character
    {"root ::= \"a\" | \"b\" x | \"c\" [^\\x00-\\U0010FFFF]\nx ::= \"c\" x", {"a"}, {"b", "bc", "c", ""}},
    // rules used before they are defined, names with digits and dashes
    {"root ::= a-1 b2\nb2 ::= \"b\" | a-1 b2\na-1 ::= \"a\"", {"ab", "aaab"}, {"a", "b", "aba"}},
};

TEST(grammar_gbnf_accepts_what_it_says) {
    for (size_t c = 0; c < FT_ARRAY_LEN(g_gbnf_cases); c++) {
        ft_grammar *g = parse(g_gbnf_cases[c].gbnf);
        if (!g) continue;
        for (int i = 0; i < 8 && g_gbnf_cases[c].yes[i]; i++)
            CHECK(accepts_str(g, g_gbnf_cases[c].yes[i]), "case %zu refuses '%s'", c, g_gbnf_cases[c].yes[i]);
        for (int i = 0; i < 8 && g_gbnf_cases[c].no[i]; i++)
            CHECK(!accepts_str(g, g_gbnf_cases[c].no[i]), "case %zu accepts '%s'", c, g_gbnf_cases[c].no[i]);
        ft_grammar_free(g);
    }
}

static const struct {
    const char *gbnf, *error;
} g_gbnf_errors[] = {
    {"root ::= \"a", "line 1, column 12: unexpected end of input"},
    {"root ::= [a-", "line 1, column 13: unexpected end of input"},
    {"root ::= foo", "rule 'foo' is not defined"},
    {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: a rule defined twice"},
    {"root ::= a\na ::= \"\"? a \"x\" | \"y\"", "rule 'a' is left-recursive"},
    {"root ::= \"a\"{10001}", "line 1, column 19: repetition count above 10000"},
    {"root ::= \"a\"{3,2}", "line 1, column 17: a repetition {m,n} with n < m"},
    {"root ::= \"\\q\"", "line 1, column 12: unknown escape"},
    {"root ::= [z-a]", "line 1, column 14: a character range that goes backwards"},
    {"root ::= <[123]>", "line 1, column 10: token references"},
    {"foo ::= \"a\"", "no rule 'root'"},
    {"root ::= * \"a\"", "line 1, column 10: a repetition with nothing before it"},
    {"root := \"a\"", "line 1, column 6: expecting '::='"},
    {"root ::= \"a\" )", "line 1, column 14: expecting a newline or the end"},
    {"root ::= \"\\xZZ\"", "line 1, column 13: expecting a hex digit"},
    {"root ::= \"\xff\"", "line 1, column 11: invalid UTF-8"},
    {"root ::= \"\\uD800\"", "code point without a UTF-8 encoding"},
    {"\n\nroot ::= (\"a\"\n  | \"b\"", "line 4, column 8: expecting ')'"},
    {"::= \"a\"", "line 1, column 1: expecting a rule name"},
    {"root ::= \"a\" {1,", "line 1, column 17: expecting '}'"},
    {"root ::= \"a\" {x}", "line 1, column 15: expecting an integer"},
    {"root ::= [^\\x00-\\U0010FFFF]", "the grammar matches no string at all"},
    {"root ::= \"a\" root", "the grammar matches no string at all"},
};

TEST(grammar_gbnf_errors_say_where) {
    for (size_t c = 0; c < FT_ARRAY_LEN(g_gbnf_errors); c++) {
        ft_err err = {{0}};
        const char *t = g_gbnf_errors[c].gbnf;
        ft_grammar *g = ft_grammar_parse_gbnf(t, strlen(t), &err);
        CHECK(!g && strstr(err.msg, g_gbnf_errors[c].error), "'%s': got '%s', want '%s'", t,
              g ? "(parsed)" : err.msg, g_gbnf_errors[c].error);
        ft_grammar_free(g);
    }
    // a NUL byte inside the text, and nesting past the parser's depth
    ft_err err = {{0}};
    CHECK(!ft_grammar_parse_gbnf("root ::= \"a\0\"", 14, &err) && strstr(err.msg, "NUL"), "%s", err.msg);
    char deep[1024] = "root ::= ";
    for (int i = 0; i < 200; i++) strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (int i = 0; i < 200; i++) strcat(deep, ")");
    CHECK(!ft_grammar_parse_gbnf(deep, strlen(deep), &err) && strstr(err.msg, "nested too deep"), "%s", err.msg);
}

// ---------------------------------------------------------------------------------------------
// The matcher against the reference

// Compares matcher and reference over random walks from g's start: at each step the set of
// bytes each allows next (every few steps), whether each may end, then one byte: mostly one
// the matcher allows, sometimes any byte of alphabet (which both must refuse or take alike).
// Returns false when the reference gave up (its cap of stacks): the grammar is too ambiguous
// for it and says nothing.
static bool walk_compare(const ft_grammar *g, ft_rng *rng, int n_walks, int n_steps, const char *alphabet,
                         const ft_grammar_matcher_params *mp, const char *what) {
    int n_alpha = (int)strlen(alphabet);
    for (int w = 0; w < n_walks; w++) {
        ft_grammar_matcher *m = ft_grammar_matcher_init(g, NULL, mp);
        ft_grammar_ref *r = ft_grammar_ref_init(g);
        if (ft_grammar_ref_overflow(r)) {
            ft_grammar_matcher_free(m);
            ft_grammar_ref_free(r);
            return false;
        }
        ft_err err = {{0}};
        if (ft_grammar_matcher_failed(m, &err)) { // a grammar of no string at all
            CHECK(!ft_grammar_ref_alive(r), "%s: the matcher fails (%s), the reference does not", what, err.msg);
            ft_grammar_matcher_free(m);
            ft_grammar_ref_free(r);
            return true;
        }
        char path[512];
        int n_path = 0;
        for (int step = 0; step < n_steps && !test_failed(); step++) {
            CHECK(ft_grammar_matcher_accepting(m) == ft_grammar_ref_accepting(r), "%s: after '%.*s': accepting %d, ref %d",
                  what, n_path, path, ft_grammar_matcher_accepting(m), ft_grammar_ref_accepting(r));
            uint8_t allowed[256];
            int n_allowed = 0;
            bool full = step % 3 == 0;
            for (int b = 0; b < 256; b++) {
                uint8_t c = (uint8_t)b;
                bool a = ft_grammar_matcher_allows_bytes(m, &c, 1);
                if (a) allowed[n_allowed++] = c;
                if (!full) continue;
                ft_grammar_ref *x = ft_grammar_ref_clone(r);
                bool e = ft_grammar_ref_feed(x, &c, 1) && ft_grammar_ref_alive(x);
                if (ft_grammar_ref_overflow(x)) e = a;
                ft_grammar_ref_free(x);
                CHECK(a == e, "%s: after '%.*s', byte 0x%02x: matcher %d, reference %d", what, n_path, path, b, a, e);
            }
            uint8_t c;
            if (n_allowed && ft_rng_uniform(rng) < 0.85f)
                c = allowed[ft_rng_next(rng) % (uint64_t)n_allowed];
            else
                c = (uint8_t)alphabet[ft_rng_next(rng) % (uint64_t)n_alpha];
            ft_grammar_ref *x = ft_grammar_ref_clone(r);
            bool rb = ft_grammar_ref_feed(x, &c, 1) && ft_grammar_ref_alive(x);
            bool overflow = ft_grammar_ref_overflow(x);
            bool mb = ft_grammar_matcher_feed(m, &c, 1);
            if (overflow) {
                ft_grammar_ref_free(x);
                ft_grammar_matcher_free(m);
                ft_grammar_ref_free(r);
                return false;
            }
            CHECK(mb == rb, "%s: after '%.*s', feeding 0x%02x: matcher %d, reference %d", what, n_path, path, c, mb, rb);
            if (rb) {
                ft_grammar_ref_free(r);
                r = x;
                if (n_path < (int)sizeof(path)) path[n_path++] = (char)c;
            } else {
                ft_grammar_ref_free(x);
            }
            if (!n_allowed && !ft_grammar_matcher_accepting(m)) break;
            if (!n_allowed) break; // only the end may follow
        }
        ft_grammar_matcher_free(m);
        ft_grammar_ref_free(r);
    }
    return true;
}

TEST(grammar_matcher_equals_reference_on_written_grammars) {
    ft_rng rng = ft_rng_init(7);
    ft_grammar_matcher_params tiny = ft_grammar_matcher_default_params();
    tiny.memo_bytes = 1; // the memo dropped before every byte: states rebuilt from the stacks
    for (size_t c = 0; c < FT_ARRAY_LEN(g_gbnf_cases); c++) {
        ft_grammar *g = parse(g_gbnf_cases[c].gbnf);
        if (!g) continue;
        char what[32];
        snprintf(what, sizeof(what), "case %zu", c);
        CHECK(walk_compare(g, &rng, 30, 40, "ab()+*[]x,0123456789\"<>!-\xc3\xa9\x80\xff", NULL, what));
        CHECK(walk_compare(g, &rng, 5, 40, "ab()+*[]x,0123456789\"<>!-\xc3\xa9\x80\xff", &tiny, what));
        ft_grammar_free(g);
    }
}

// A random grammar over the bytes a, b, c: n rules of 1 to 3 alternatives of up to 4 symbols,
// each a random set of those bytes or a rule (built with ft_gb_*, so every shape the builder
// takes occurs: empty alternatives, nullable rules, recursion anywhere).
static ft_grammar *random_grammar(ft_rng *rng, ft_err *err) {
    ft_gb *b = ft_gb_init();
    int n = 1 + (int)(ft_rng_next(rng) % 6), rules[6];
    for (int i = 0; i < n; i++) rules[i] = ft_gb_rule(b, "r");
    for (int i = 0; i < n; i++) {
        int n_alt = 1 + (int)(ft_rng_next(rng) % 3);
        for (int a = 0; a < n_alt; a++) {
            ft_gsym q[4];
            int len = (int)(ft_rng_next(rng) % 5);
            for (int k = 0; k < len; k++) {
                if (ft_rng_uniform(rng) < 0.35f) {
                    q[k] = ft_gb_ref(rules[ft_rng_next(rng) % (uint64_t)n]);
                } else {
                    uint64_t set[4] = {0};
                    int bits = 1 + (int)(ft_rng_next(rng) % 7);
                    for (int x = 0; x < 3; x++)
                        if (bits >> x & 1) set[1] |= 1ull << ('a' + x - 64);
                    q[k] = ft_gb_bytes(b, set);
                }
            }
            ft_gb_alt(b, rules[i], q, len);
        }
    }
    ft_grammar *g = ft_gb_finish(b, rules[0], err);
    ft_gb_free(b);
    return g;
}

TEST(grammar_matcher_equals_reference_on_random_grammars) {
    ft_rng rng = ft_rng_init(11);
    int n_compared = 0, n_refused = 0, n_ambiguous = 0;
    for (int i = 0; i < 400 && !test_failed(); i++) {
        ft_err err = {{0}};
        ft_grammar *g = random_grammar(&rng, &err);
        if (!g) { // left recursion and no string at all are what the builder refuses here
            CHECK(strstr(err.msg, "left-recursive") || strstr(err.msg, "matches no string"), "%s", err.msg);
            n_refused++;
            continue;
        }
        char what[32];
        snprintf(what, sizeof(what), "random grammar %d", i);
        if (walk_compare(g, &rng, 4, 24, "abcd", NULL, what))
            n_compared++;
        else
            n_ambiguous++;
        ft_grammar_free(g);
    }
    CHECK(n_compared > 200, "compared %d (refused %d, too ambiguous for the reference %d)", n_compared, n_refused,
          n_ambiguous);
}

// ---------------------------------------------------------------------------------------------
// Token masks

// Checks the matcher's mask against each token's bytes fed to a copy of ref (EOG tokens: whether
// ref may end). Only the tokens in [0, n) where pick(t) is true. Returns the mismatches.
static int mask_compare(ft_grammar_matcher *m, const ft_grammar_ref *ref, int n_vocab, const char *const *piece,
                        const size_t *len, const bool *eog, ft_rng *sample, int n_sample, const char *what) {
    const uint64_t *mask = ft_grammar_matcher_mask(m);
    if (!mask) {
        ft_err err = {{0}};
        ft_grammar_matcher_failed(m, &err);
        test_fail(__FILE__, __LINE__, "%s: no mask: %s", what, err.msg);
        return 1;
    }
    int bad = 0;
    int n = sample ? n_sample : n_vocab;
    for (int i = 0; i < n; i++) {
        int t = sample ? (int)(ft_rng_next(sample) % (uint64_t)n_vocab) : i;
        bool want;
        if (eog[t]) {
            want = ft_grammar_ref_accepting(ref);
        } else if (!len[t]) {
            want = false;
        } else {
            ft_grammar_ref *x = ft_grammar_ref_clone(ref);
            want = ft_grammar_ref_feed(x, piece[t], len[t]) && ft_grammar_ref_alive(x);
            ft_grammar_ref_free(x);
        }
        bool got = mask[t >> 6] >> (t & 63) & 1;
        if (got != want && bad++ < 5)
            test_fail(__FILE__, __LINE__, "%s: token %d '%.*s': mask %d, reference %d", what, t, (int)len[t], piece[t],
                      got, want);
        if (got != ft_grammar_matcher_allows(m, t) && bad++ < 5)
            test_fail(__FILE__, __LINE__, "%s: token %d: mask %d, allows %d", what, t, got, !got);
    }
    return bad;
}

// Random paths through g by tokens the mask allows (an EOG token only at the end), comparing
// each state's mask with the brute-force answer: every token at the steps in full[], a sample
// of n_sample at the others. A second matcher with a memo of one byte (dropped before every
// token) must give the same masks.
static void mask_walks(const ft_grammar *g, const ft_grammar_vocab *gv, int n_vocab, const char *const *piece,
                       const size_t *len, const bool *eog, int n_walks, int n_steps, uint32_t full_steps,
                       int n_sample, const char *what) {
    ft_rng rng = ft_rng_init(5);
    ft_grammar_matcher_params tiny = ft_grammar_matcher_default_params();
    tiny.memo_bytes = 1;
    size_t n_words = ((size_t)n_vocab + 63) / 64;
    for (int w = 0; w < n_walks && !test_failed(); w++) {
        ft_grammar_matcher *m = ft_grammar_matcher_init(g, gv, NULL), *m2 = ft_grammar_matcher_init(g, gv, &tiny);
        ft_grammar_ref *r = ft_grammar_ref_init(g);
        for (int step = 0; step < n_steps && !test_failed(); step++) {
            char at[96];
            snprintf(at, sizeof(at), "%s, walk %d step %d", what, w, step);
            bool full = full_steps >> step & 1;
            mask_compare(m, r, n_vocab, piece, len, eog, full ? NULL : &rng, n_sample, at);
            const uint64_t *a = ft_grammar_matcher_mask(m), *b = ft_grammar_matcher_mask(m2);
            REQUIRE(a && b);
            CHECK(!memcmp(a, b, n_words * sizeof(uint64_t)), "%s: the matcher with a tiny memo masks otherwise", at);
            // the next token: a random allowed one that is not an end
            int n_allowed = 0, pick = -1;
            for (int t = 0; t < n_vocab; t++)
                if ((a[t >> 6] >> (t & 63) & 1) && !eog[t] && ft_rng_next(&rng) % (uint64_t)++n_allowed == 0) pick = t;
            if (pick < 0) break;
            CHECK(ft_grammar_matcher_accept(m, pick) && ft_grammar_matcher_accept(m2, pick), "%s: token %d", at, pick);
            CHECK(ft_grammar_ref_feed(r, piece[pick], len[pick]));
        }
        ft_grammar_matcher_stats st;
        ft_grammar_matcher_stats_get(m2, &st);
        CHECK(st.compactions > 0, "%s: the tiny memo was never dropped", what);
        ft_grammar_matcher_free(m);
        ft_grammar_matcher_free(m2);
        ft_grammar_ref_free(r);
    }
}

// A small vocabulary with every awkward kind of token: single bytes, pieces of a UTF-8 character
// and whole ones, two tokens with the same bytes, prefixes of each other, a token of no bytes, an
// end-of-generation token, escapes, long runs.
TEST(grammar_masks_equal_brute_force_small_vocab) {
    static const char *const pieces[] = {
        "{", "}", "\"", "\"a", "a", "ab", "abc", "a\"", ":", ",", " ", "\n", "\\", "\\n", "\\u00", "e9", "\xc3",
        "\xa9", "\xc3\xa9", "\xe4\xb8\xad", "\xe4", "\xb8\xad", "1", "12", "-", ".", "0", "true", "tr", "ue", "null",
        "[", "]", "], ", "\"}", "a", "", "<eog>", "{\"", "\":", "\xf0\x9f\x98\x80", "\x80", "xyz", "   ", "\t"};
    enum { N = sizeof(pieces) / sizeof(pieces[0]) };
    size_t len[N];
    bool eog[N];
    for (int i = 0; i < N; i++) {
        len[i] = strlen(pieces[i]);
        eog[i] = !strcmp(pieces[i], "<eog>");
    }
    ft_grammar_vocab *gv = ft_grammar_vocab_from_pieces(N, pieces, len, eog);
    ft_err err = {{0}};
    json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"ab\":"
                                "{\"type\":\"array\",\"items\":{\"type\":\"number\"}}},\"required\":[\"a\"]}",
                                0, NULL);
    ft_grammar *g = ft_json_schema_grammar(schema, false, &err);
    json_decref(schema);
    REQUIRE(g, "%s", err.msg);
    mask_walks(g, gv, N, pieces, len, eog, 40, 30, ~0u, 0, "small vocab, schema");
    ft_grammar_free(g);
    g = parse("root ::= [^\"]{0,5} \"\\\"\" | \"ab\"+ \"c\"");
    if (g) mask_walks(g, gv, N, pieces, len, eog, 40, 10, ~0u, 0, "small vocab, gbnf");
    ft_grammar_free(g);
    ft_grammar_vocab_free(gv);
}

// qwen2's vocabulary (151,936 tokens, 151,643 of them with bytes) as generation emits them.
typedef struct {
    tok_vocab *v;
    int n;
    const char **piece;
    size_t *len;
    bool *eog;
    ft_grammar_vocab *gv;
} real_vocab;

static bool real_vocab_load(real_vocab *rv) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-qwen2.gguf", test_shared_dir());
    memset(rv, 0, sizeof(*rv));
    if (!(rv->v = fixture_vocab(path))) return false;
    rv->n = tok_n_tokens(rv->v);
    rv->piece = ft_calloc((size_t)rv->n, sizeof(char *));
    rv->len = ft_calloc((size_t)rv->n, sizeof(size_t));
    rv->eog = ft_calloc((size_t)rv->n, sizeof(bool));
    for (int t = 0; t < rv->n; t++) {
        rv->piece[t] = tok_piece(rv->v, t, false, &rv->len[t]);
        rv->eog[t] = tok_is_eog(rv->v, t);
    }
    rv->gv = ft_grammar_vocab_init(rv->v, rv->n);
    return true;
}

static void real_vocab_free(real_vocab *rv) {
    ft_grammar_vocab_free(rv->gv);
    free(rv->piece);
    free(rv->len);
    free(rv->eog);
    tok_vocab_free(rv->v);
}

TEST(grammar_masks_equal_brute_force_qwen2_vocab) {
    real_vocab rv;
    REQUIRE(real_vocab_load(&rv));
    CHECK(rv.n == 151936 && ft_grammar_vocab_n(rv.gv) == rv.n, "%d tokens", rv.n);
    ft_err err = {{0}};
    json_t *schema = json_loads(
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",\"blue\"]},\"maxItems\":3},"
        "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"note\":{\"type\":\"string\"}},"
        "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
        0, NULL);
    ft_grammar *g = ft_json_schema_grammar(schema, false, &err);
    json_decref(schema);
    REQUIRE(g, "%s", err.msg);
    // every token at steps 0, 2, 5 and 9 (outside and inside strings), 2,000 sampled at the rest
    mask_walks(g, rv.gv, rv.n, rv.piece, rv.len, rv.eog, 2, 16, 1u << 0 | 1u << 2 | 1u << 5 | 1u << 9, 2000,
               "qwen2, schema");
    ft_grammar_free(g);
    // strings of 2 to 40 characters: the chain of counting states decides the plain tokens
    schema = json_loads("{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":40},"
                        "\"maxItems\":4}",
                        0, NULL);
    g = ft_json_schema_grammar(schema, false, &err);
    json_decref(schema);
    REQUIRE(g, "%s", err.msg);
    mask_walks(g, rv.gv, rv.n, rv.piece, rv.len, rv.eog, 2, 24, 1u << 3 | 1u << 11, 2000, "qwen2, bounded strings");
    ft_grammar_free(g);
    // characters of one script only, and a free string (the plain-token shortcut)
    g = parse("root ::= [\\u4e00-\\u9fff]{1,6} \"\\n\" ( [^\"\\\\] | \"\\\\\" [nt] )* \"\\\"\"");
    if (g) mask_walks(g, rv.gv, rv.n, rv.piece, rv.len, rv.eog, 2, 12, 1u << 0 | 1u << 3 | 1u << 8, 2000, "qwen2, gbnf");
    ft_grammar_free(g);
    real_vocab_free(&rv);
}

// ---------------------------------------------------------------------------------------------
// JSON Schema

static ft_grammar *schema_grammar(const char *text, ft_err *err) {
    json_error_t je;
    json_t *s = json_loads(text, JSON_DECODE_ANY, &je);
    if (!s) {
        test_fail(__FILE__, __LINE__, "schema is not JSON: %s: %s", je.text, text);
        return NULL;
    }
    ft_grammar *g = ft_json_schema_grammar(s, false, err);
    json_decref(s);
    return g;
}

static const struct {
    const char *schema;
    const char *valid[10], *invalid[10];
} g_schema_cases[] = {
    // types
    {"{\"type\":\"integer\"}", {"0", "-12", "1234567890123456", " 7 "}, {"1.5", "01", "\"1\"", "", "-", "1e3x"}},
    {"{\"type\":\"number\"}", {"0", "-1.25", "3e10", "1E-2", "0.5e+07"}, {".5", "1.", "+1", "NaN", "1e", "--1"}},
    {"{\"type\":\"string\"}",
     {"\"\"", "\"a b\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u00e9\\uD83D\\uDE00\"", "\"\xc3\xa9\""},
     {"\"\\x\"", "\"\\uD83D\"", "\"\n\"", "'a'", "\"a", "\"\\uDE00\\uD83D\""}},
    {"{\"type\":[\"boolean\",\"null\"]}", {"true", "false", "null"}, {"0", "\"true\"", "nul", "True"}},
    {"true", {"{\"a\":[1,{\"b\":null}]}", "\"x\"", "-0.5"}, {"{a:1}", "[1,]", "{\"a\" 1}"}},
    // objects: properties in order, required, additionalProperties
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},"
     "\"required\":[\"a\"],\"additionalProperties\":false}",
     {"{\"a\":1}", "{\"a\":1,\"b\":\"x\"}", "{ \"a\" : 1 , \"b\" : \"\" }", "{\n  \"a\": 2,\n  \"b\": \"y\"\n}"},
     {"{}", "{\"b\":\"x\"}", "{\"a\":\"1\"}", "{\"a\":1,\"c\":2}", "{\"a\":1,\"b\":2}", "[]"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":"
     "\"boolean\"}}",
     {"{}", "{\"a\":1,\"x\":true}", "{\"x\":false,\"y\":true}", "{\"ab\":true}", "{\"\":true}"},
     {"{\"x\":1}", "{\"a\":true}", "{\"a\":1,\"b\":null}"}},
    {"{\"type\":\"object\"}", {"{}", "{\"k\":[1,2],\"v\":{}}"}, {"[]", "{\"k\"}", "null"}},
    // arrays
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
     {"[1]", "[1,2,3]", "[ 1 , 2 ]"},
     {"[]", "[1,2,3,4]", "[1,\"2\"]", "[1,]"}},
    {"{\"type\":\"array\",\"maxItems\":0}", {"[]", "[ ]"}, {"[1]"}},
    {"{\"type\":\"array\",\"minItems\":2}", {"[1,\"a\"]", "[null,[],{}]"}, {"[]", "[1]"}},
    // enum and const
    {"{\"enum\":[\"red\",1,null,[1,2],{\"a\":true}]}",
     {"\"red\"", "1", "null", "[1,2]", "{\"a\":true}"},
     {"\"blue\"", "2", "[2,1]", "{\"a\":false}", "\"Red\""}},
    {"{\"type\":\"string\",\"enum\":[\"a\",1,\"b\"]}", {"\"a\"", "\"b\""}, {"1", "\"c\""}},
    {"{\"const\":\"x\\\"y\"}", {"\"x\\\"y\""}, {"\"xy\"", "\"x\""}},
    // anyOf, oneOf, allOf
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}",
     {"1", "\"ab\""},
     {"\"abc\"", "true", "1.5"}},
    {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},"
     "\"required\":[\"kind\",\"x\"],\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"kind\":"
     "{\"const\":\"b\"},\"y\":{\"type\":\"string\"}},\"required\":[\"kind\",\"y\"],\"additionalProperties\":false}]}",
     {"{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\",\"y\":\"z\"}"},
     {"{\"kind\":\"a\",\"y\":\"z\"}", "{\"kind\":\"c\",\"x\":1}", "{\"x\":1}"}},
    {"{\"oneOf\":[{\"type\":\"null\"},{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}]}",
     {"null", "[true,false]"},
     {"[1]", "false"}},
    {"{\"allOf\":[{\"type\":\"boolean\"}]}", {"true"}, {"1"}},
    // $ref and $defs, recursion through objects and arrays
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":"
     "\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],\"additionalProperties\":false}},"
     "\"$ref\":\"#/$defs/node\"}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"},
     {"{\"v\":1,\"kids\":[{}]}", "{\"kids\":[]}"}},
    {"{\"definitions\":{\"a~b/c\":{\"type\":\"boolean\"}},\"type\":\"array\",\"items\":{\"$ref\":"
     "\"#/definitions/a~0b~1c\"}}",
     {"[true]"},
     {"[1]"}},
    // strings: lengths in characters, formats
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
     {"\"ab\"", "\"abc\"", "\"\xc3\xa9\xc3\xa9\"", "\"\\n\\u0041\"", "\"\\uD83D\\uDE00x\""},
     {"\"a\"", "\"abcd\"", "\"\""}},
    {"{\"type\":\"string\",\"format\":\"date\"}",
     {"\"2024-02-29\"", "\"2000-02-29\"", "\"1999-12-31\"", "\"2023-04-30\""},
     {"\"2023-02-29\"", "\"1900-02-29\"", "\"2024-04-31\"", "\"2024-13-01\"", "\"2024-1-01\"", "\"24-01-01\""}},
    {"{\"type\":\"string\",\"format\":\"time\"}",
     {"\"23:59:59Z\"", "\"00:00:00.123+05:30\"", "\"12:00:00-01:00\""},
     {"\"24:00:00Z\"", "\"12:00:00\"", "\"12:60:00Z\"", "\"12:00:00+5:00\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}",
     {"\"2024-01-02T03:04:05Z\"", "\"2024-01-02T03:04:05.5+01:00\""},
     {"\"2024-01-02 03:04:05Z\"", "\"2024-01-02T03:04Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}",
     {"\"123e4567-e89b-12d3-a456-426614174000\"", "\"ABCDEF01-2345-6789-abcd-ef0123456789\""},
     {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""}},
    // integers within bounds
    {"{\"type\":\"integer\",\"minimum\":-15,\"maximum\":120}",
     {"-15", "-9", "0", "7", "99", "100", "120"},
     {"-16", "-100", "121", "200", "1000", "-"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1000}",
     {"1", "999", "500"},
     {"0", "1000", "-1"}},
    {"{\"type\":\"integer\",\"minimum\":1.5}", {"2", "10", "1234567890"}, {"1", "0", "-3"}},
    {"{\"type\":\"integer\",\"maximum\":-250}", {"-250", "-251", "-1000000"}, {"-249", "0", "5"}},
    {"{\"type\":\"integer\",\"minimum\":37,\"maximum\":4321}",
     {"37", "38", "99", "100", "999", "1000", "4299", "4321", "4320"},
     {"36", "4322", "5000", "9999", "0"}},
};

// A JSON document g accepts (parsed; NULL where jansson cannot read it).
static json_t *load(const char *doc) { return json_loads(doc, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL); }

TEST(grammar_json_schema_accepts_valid_and_refuses_invalid) {
    for (size_t c = 0; c < FT_ARRAY_LEN(g_schema_cases); c++) {
        const char *text = g_schema_cases[c].schema;
        ft_err err = {{0}};
        ft_grammar *g = schema_grammar(text, &err);
        CHECK(g, "case %zu: %s", c, err.msg);
        if (!g) continue;
        json_t *schema = json_loads(text, JSON_DECODE_ANY, NULL);
        for (int i = 0; i < 10 && g_schema_cases[c].valid[i]; i++) {
            const char *d = g_schema_cases[c].valid[i];
            json_t *v = load(d);
            // the table itself, against the validator
            CHECK(v && json_check(schema, schema, v), "case %zu: '%s' is not valid under the schema", c, d);
            CHECK(accepts_str(g, d), "case %zu refuses '%s'", c, d);
            json_decref(v);
        }
        for (int i = 0; i < 10 && g_schema_cases[c].invalid[i]; i++) {
            const char *d = g_schema_cases[c].invalid[i];
            json_t *v = load(d);
            CHECK(!v || !json_check(schema, schema, v), "case %zu: '%s' is valid under the schema", c, d);
            CHECK(!accepts_str(g, d), "case %zu accepts '%s'", c, d);
            json_decref(v);
        }
        json_decref(schema);
        ft_grammar_free(g);
    }
}

static const struct {
    const char *schema, *error;
} g_schema_errors[] = {
    {"{\"type\":\"string\",\"pattern\":\"^a\"}", "at #: the keyword 'pattern' is not supported"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":"
     "\"email\"}}}}",
     "at #/properties/a/items: 'format' \"email\" is not supported"},
    {"{\"$ref\":\"#/$defs/missing\"}", "'$ref' \"#/$defs/missing\" does not name a schema"},
    {"{\"$ref\":\"http://example.com/s.json\"}", "only \"#...\" pointers are supported"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "'maxItems' 2 is below 'minItems' 3"},
    {"{\"type\":\"string\",\"maxLength\":10001}", "'maxLength' above 10000 is not supported"},
    {"{\"type\":\"string\",\"minLength\":-1}", "'minLength' must be a non-negative integer"},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "'oneOf': schemas 0 and 1 may match the same value"},
    {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}}},{\"type\":\"object\"}]}",
     "'oneOf': schemas 0 and 1 may match"},
    {"{\"type\":\"number\",\"minimum\":0}", "bounds on a \"number\" are not supported"},
    {"{\"minimum\":0}", "'minimum' or 'maximum' without 'type'"},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "the bounds leave no integer"},
    {"{\"type\":\"integer\",\"minimum\":\"0\"}", "'minimum' must be a number"},
    {"{\"type\":\"decimal\"}", "'type' must be a type name"},
    {"{\"type\":\"object\",\"properties\":{\"a\":true},\"required\":[\"b\"]}",
     "'required' names \"b\", which 'properties' does not define"},
    {"{\"type\":\"object\",\"additionalProperties\":1}", "'additionalProperties' must be a boolean or a schema"},
    {"{\"type\":\"string\",\"items\":{}}", "'items' does not apply to the schema's type"},
    {"{\"properties\":{},\"items\":{}}", "keywords of several types without 'type'"},
    {"{\"type\":\"array\",\"items\":[{}]}", "'items' as an array (a tuple) is not supported"},
    {"{\"type\":\"array\",\"prefixItems\":[{}]}", "the keyword 'prefixItems' is not supported"},
    {"{\"anyOf\":[]}", "'anyOf' must be a non-empty array"},
    {"{\"anyOf\":[{}],\"type\":\"string\"}", "'anyOf' beside 'type' is not supported"},
    {"{\"allOf\":[{},{}]}", "'allOf' is supported with exactly one schema"},
    {"{\"enum\":[1,2],\"type\":\"string\"}", "no value of 'enum' has the schema's 'type'"},
    {"false", "the schema false accepts no value"},
    {"{\"$ref\":\"#\"}", "matches no string"},
    {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "left-recursive"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"properties\":{\"$id\":1}}}}",
     "at #/properties/a/properties/$id: a schema must be an object or a boolean"},
    {"{\"not\":{}}", "the keyword 'not' is not supported"},
    {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":3}", "beside 'format' \"date\" is not supported"},
};

TEST(grammar_json_schema_refuses_what_it_cannot_enforce) {
    for (size_t c = 0; c < FT_ARRAY_LEN(g_schema_errors); c++) {
        ft_err err = {{0}};
        ft_grammar *g = schema_grammar(g_schema_errors[c].schema, &err);
        CHECK(!g && strstr(err.msg, g_schema_errors[c].error), "%s: got '%s', want '%s'", g_schema_errors[c].schema,
              g ? "(compiled)" : err.msg, g_schema_errors[c].error);
        ft_grammar_free(g);
    }
    // nesting past the compiler's depth
    char deep[4096] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++) strcat(deep, "}");
    ft_err err = {{0}};
    ft_grammar *g = schema_grammar(deep, &err);
    CHECK(!g && strstr(err.msg, "schemas nested deeper than 64"), "%s", err.msg);
    ft_grammar_free(g);
    // lenient: an unknown keyword is ignored (with a log line), not refused
    json_t *s = json_loads("{\"type\":\"string\",\"pattern\":\"^a\"}", 0, NULL);
    fixture_stderr_mute();
    g = ft_json_schema_grammar(s, true, &err);
    fixture_stderr_restore();
    CHECK(g && accepts_str(g, "\"b\""));
    ft_grammar_free(g);
    json_decref(s);
}

// ---------------------------------------------------------------------------------------------
// Random schemas: documents the grammar generates validate; documents the validator finds
// invalid, the grammar refuses

static const char *const k_names[] = {"a", "b", "ab", "name", "id", "x y", "\xc3\xa9t\xc3\xa9", "a\"q"};

static json_t *random_scalar(ft_rng *rng) {
    switch (ft_rng_next(rng) % 6) {
    case 0: return json_string(k_names[ft_rng_next(rng) % FT_ARRAY_LEN(k_names)]);
    case 1: return json_integer((json_int_t)(ft_rng_next(rng) % 2001) - 1000);
    case 2: return json_real((double)((int)(ft_rng_next(rng) % 400) - 200) / 8);
    case 3: return json_boolean(ft_rng_next(rng) & 1);
    case 4: return json_null();
    default: return json_pack("{s:i}", "k", (json_int_t)(ft_rng_next(rng) % 3));
    }
}

static json_t *random_schema(ft_rng *rng, int depth) {
    int kind = (int)(ft_rng_next(rng) % (depth < 3 ? 11 : 7));
    json_t *s = json_object();
    switch (kind) {
    case 0: { // string
        json_object_set_new(s, "type", json_string("string"));
        int f = (int)(ft_rng_next(rng) % 8);
        static const char *const formats[] = {"date", "time", "date-time", "uuid"};
        if (f < 4) {
            json_object_set_new(s, "format", json_string(formats[f]));
        } else if (f < 6) {
            int lo = (int)(ft_rng_next(rng) % 3);
            json_object_set_new(s, "minLength", json_integer(lo));
            json_object_set_new(s, "maxLength", json_integer(lo + (int)(ft_rng_next(rng) % 6)));
        }
        break;
    }
    case 1: { // integer, maybe bounded
        json_object_set_new(s, "type", json_string("integer"));
        long long lo = (long long)(ft_rng_next(rng) % 20001) - 10000;
        if (ft_rng_next(rng) & 1) json_object_set_new(s, "minimum", json_integer(lo));
        if (ft_rng_next(rng) & 1)
            json_object_set_new(s, "maximum", json_integer(lo + (long long)(ft_rng_next(rng) % 5000)));
        break;
    }
    case 2: json_object_set_new(s, "type", json_string("number")); break;
    case 3: json_object_set_new(s, "type", json_string(ft_rng_next(rng) & 1 ? "boolean" : "null")); break;
    case 4: { // enum of distinct values
        json_t *e = json_array();
        int n = 1 + (int)(ft_rng_next(rng) % 4);
        for (int i = 0; i < n; i++) {
            json_t *x = random_scalar(rng);
            bool dup = false;
            for (size_t k = 0; k < json_array_size(e); k++) dup |= json_equal(json_array_get(e, k), x);
            if (dup)
                json_decref(x);
            else
                json_array_append_new(e, x);
        }
        json_object_set_new(s, "enum", e);
        break;
    }
    case 5: json_object_set_new(s, "const", random_scalar(rng)); break;
    case 6: { // a list of types
        json_object_set_new(s, "type", json_pack("[s,s]", "string", ft_rng_next(rng) & 1 ? "null" : "integer"));
        break;
    }
    case 7:
    case 8: { // object
        json_object_set_new(s, "type", json_string("object"));
        json_t *props = json_object(), *req = json_array();
        int n = (int)(ft_rng_next(rng) % 4);
        for (int i = 0; i < n; i++) {
            const char *name = k_names[ft_rng_next(rng) % FT_ARRAY_LEN(k_names)];
            if (json_object_get(props, name)) continue;
            json_object_set_new(props, name, random_schema(rng, depth + 1));
            if (ft_rng_next(rng) % 3) json_array_append_new(req, json_string(name));
        }
        json_object_set_new(s, "properties", props);
        json_object_set_new(s, "required", req);
        int add = (int)(ft_rng_next(rng) % 4);
        if (add < 2)
            json_object_set_new(s, "additionalProperties", json_false());
        else if (add == 2)
            json_object_set_new(s, "additionalProperties", random_schema(rng, depth + 1));
        break;
    }
    case 9: { // array
        json_object_set_new(s, "type", json_string("array"));
        json_object_set_new(s, "items", random_schema(rng, depth + 1));
        int lo = (int)(ft_rng_next(rng) % 3);
        if (ft_rng_next(rng) & 1) json_object_set_new(s, "minItems", json_integer(lo));
        json_object_set_new(s, "maxItems", json_integer(lo + (int)(ft_rng_next(rng) % 4)));
        break;
    }
    default: { // anyOf, or oneOf of different types
        bool one = ft_rng_next(rng) & 1;
        json_t *a = json_array();
        if (one) {
            json_array_append_new(a, json_pack("{s:s}", "type", "null"));
            json_array_append_new(a, json_pack("{s:s,s:o}", "type", "array", "items", random_schema(rng, depth + 1)));
        } else {
            json_array_append_new(a, random_schema(rng, depth + 1));
            json_array_append_new(a, random_schema(rng, depth + 1));
        }
        json_object_set_new(s, one ? "oneOf" : "anyOf", a);
    }
    }
    return s;
}

// A random document the matcher allows, byte by byte: mostly printable bytes, closing ones
// preferred once it is long; ends where the grammar may end, by chance or past 200 bytes.
// Returns false if it is not done within cap bytes.
static bool random_document(const ft_grammar *g, ft_rng *rng, char *out, size_t cap) {
    ft_grammar_matcher *m = ft_grammar_matcher_init(g, NULL, NULL);
    size_t n = 0;
    bool done = false;
    while (n + 1 < cap) {
        if (ft_grammar_matcher_accepting(m) && (ft_rng_uniform(rng) < 0.15f || n > 200)) {
            done = true;
            break;
        }
        uint8_t allowed[256];
        float weight[256], total = 0;
        int k = 0;
        for (int b = 0; b < 256; b++) {
            uint8_t c = (uint8_t)b;
            if (!ft_grammar_matcher_allows_bytes(m, &c, 1)) continue;
            float w = c >= 0x20 && c < 0x7F ? 10.0f : 1.0f;
            if (n > 100 && (c == '"' || c == ']' || c == '}')) w = 1000;
            if (n > 100 && (c == '[' || c == '{' || c == ',' || c == ' ' || c == '\n')) w = 0.01f;
            allowed[k] = c;
            weight[k++] = w;
            total += w;
        }
        if (!k) break;
        float r = ft_rng_uniform(rng) * total;
        int pick = 0;
        while (pick < k - 1 && (r -= weight[pick]) > 0) pick++;
        ft_grammar_matcher_feed(m, &allowed[pick], 1);
        out[n++] = (char)allowed[pick];
    }
    if (!done) done = ft_grammar_matcher_accepting(m);
    out[n] = 0;
    ft_grammar_matcher_free(m);
    return done;
}

TEST(grammar_json_schema_random_documents_validate) {
    ft_rng rng = ft_rng_init(2024);
    int n_docs = 0, n_unfinished = 0, n_mutants = 0, n_schemas = 300;
    static char doc[8192], mut[8200];
    for (int i = 0; i < n_schemas && !test_failed(); i++) {
        json_t *schema = random_schema(&rng, 0);
        char *text = json_dumps(schema, JSON_COMPACT);
        ft_err err = {{0}};
        ft_grammar *g = ft_json_schema_grammar(schema, false, &err);
        CHECK(g, "schema %d %s: %s", i, text, err.msg);
        for (int d = 0; g && d < 6 && !test_failed(); d++) {
            if (!random_document(g, &rng, doc, sizeof(doc))) {
                n_unfinished++;
                continue;
            }
            n_docs++;
            json_error_t je;
            json_t *v = json_loads(doc, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            CHECK(v, "schema %s: the document '%s' is not JSON: %s", text, doc, je.text);
            CHECK(!v || json_check(schema, schema, v), "schema %s: the document '%s' is not valid", text, doc);
            json_decref(v);
            // mutants: a byte dropped, doubled or replaced; where the validator says invalid (or
            // it is not JSON), the grammar must refuse it
            size_t n = strlen(doc);
            for (int k = 0; k < 8 && n; k++) {
                size_t at = ft_rng_next(&rng) % n;
                int op = (int)(ft_rng_next(&rng) % 3);
                size_t m = 0;
                memcpy(mut, doc, at);
                m = at;
                if (op == 1) mut[m++] = doc[at], mut[m++] = doc[at];
                if (op == 2) mut[m++] = "{}[]\",:0a-.9 en"[ft_rng_next(&rng) % 15];
                memcpy(mut + m, doc + at + 1, n - at - 1);
                m += n - at - 1;
                mut[m] = 0;
                json_t *mv = json_loads(mut, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
                bool valid = mv && json_check(schema, schema, mv);
                json_decref(mv);
                if (valid) continue;
                n_mutants++;
                CHECK(!accepts(g, mut, m), "schema %s: accepts the invalid '%s'", text, mut);
            }
        }
        ft_grammar_free(g);
        free(text);
        json_decref(schema);
    }
    fprintf(stderr, "  %d schemas, %d documents (%d unfinished), %d invalid mutants refused\n", n_schemas, n_docs,
            n_unfinished, n_mutants);
    CHECK(n_docs > 5 * n_schemas * 8 / 10, "%d documents, %d unfinished", n_docs, n_unfinished);
    CHECK(n_mutants > n_docs, "%d invalid mutants", n_mutants);
}

// ---------------------------------------------------------------------------------------------
// Limits

TEST(grammar_hostile_grammars_fail_within_bounds) {
    // stacks that double with every byte: each 'a' may close later with 'b' or with 'c'
    ft_grammar *g = parse("root ::= \"a\" root \"b\" | \"a\" root \"c\" | \"\"");
    REQUIRE(g);
    ft_grammar_matcher *m = ft_grammar_matcher_init(g, NULL, NULL);
    double t0 = now_s();
    int n = 0;
    while (n < 64 && ft_grammar_matcher_feed(m, "a", 1)) n++;
    ft_err err = {{0}};
    CHECK(ft_grammar_matcher_failed(m, &err) && strstr(err.msg, "stacks in one state"), "after %d bytes: %s", n,
          err.msg);
    CHECK(n >= 14 && n <= 20, "failed after %d bytes", n);
    CHECK(!ft_grammar_matcher_feed(m, "b", 1) && !ft_grammar_matcher_accepting(m) && !ft_grammar_matcher_mask(m));
    CHECK(now_s() - t0 < 5, "%.1f s", now_s() - t0);
    ft_grammar_matcher_free(m);
    ft_grammar_free(g);

    // a token's mask that would build one state per trie node of a long token: the matcher's
    // memory within one token is capped
    static const char *const long_tok[] = {"", "a", "b"};
    char *big = ft_malloc(20001);
    memset(big, 'a', 20000);
    big[20000] = 0;
    const char *pieces[4] = {long_tok[1], long_tok[2], big, "<e>"};
    size_t len[4] = {1, 1, 20000, 3};
    bool eog[4] = {false, false, false, true};
    ft_grammar_vocab *gv = ft_grammar_vocab_from_pieces(4, pieces, len, eog);
    g = parse("root ::= \"a\" root \"b\" | \"a\" root \"a\" | \"\"");
    REQUIRE(g);
    ft_grammar_matcher_params p = ft_grammar_matcher_default_params();
    p.memo_bytes = 1 << 20;
    m = ft_grammar_matcher_init(g, gv, &p);
    t0 = now_s();
    const uint64_t *mask = ft_grammar_matcher_mask(m);
    CHECK(!mask && ft_grammar_matcher_failed(m, &err) &&
              (strstr(err.msg, "MiB for one token") || strstr(err.msg, "stacks in one state")),
          "%s", mask ? "(a mask)" : err.msg);
    CHECK(now_s() - t0 < 10, "%.1f s", now_s() - t0);
    ft_grammar_matcher_free(m);
    ft_grammar_free(g);
    ft_grammar_vocab_free(gv);
    free(big);

    // repetition past the builder's bounds, nested or not
    ft_err e2 = {{0}};
    const char *nested = "root ::= ((((\"a\"{10000}){10000}){10000}){10000}){10000}";
    g = ft_grammar_parse_gbnf(nested, strlen(nested), &e2);
    // each level is one rule of 10,000 references: the grammar stays small
    CHECK(g && ft_grammar_n_symbols(g) < 200000, "%s", g ? "" : e2.msg);
    ft_grammar_free(g);
    // a schema of very many values: fails on the builder's symbol limit, not memory
    json_t *en = json_array();
    for (int i = 0; i < 300000; i++) json_array_append_new(en, json_sprintf("value number %d", i));
    json_t *s = json_pack("{s:o}", "enum", en);
    t0 = now_s();
    g = ft_json_schema_grammar(s, false, &e2);
    CHECK(!g && strstr(e2.msg, "symbols"), "%s", g ? "(compiled)" : e2.msg);
    CHECK(now_s() - t0 < 10, "%.1f s", now_s() - t0);
    ft_grammar_free(g);
    json_decref(s);
}
