// test_tokenizer_conformance.c: ft's tokenizer against llama.cpp itself (its C API, loaded
// from node-llama-cpp): code point classes, llama.cpp's own vocabulary vectors, and a few
// thousand generated strings per vocabulary, invalid UTF-8 included.
#include "oracle.h"
#include "fixtures.h"
#include "../src/gguf/gguf.h"
#include "../src/tokenizer/tokenizer.h"
#include "../src/tokenizer/tok_impl.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

// Every code point gets llama.cpp's category and white-space flags.
TEST(tokenizer_unicode_flags_match_llama) {
    oracle_flags_fn flags = oracle_unicode_flags();
    if (!flags) return;
    int n_diff = 0;
    for (uint32_t c = 0; c < 0x110000; c++) {
        uint16_t want = flags(c) & 0x1FF, got = ucp_flags(c);
        if (want != got && ++n_diff <= 10) CHECK(want == got, "U+%04X: llama %#x, ft %#x", c, want, got);
    }
    CHECK(n_diff == 0, "%d code points differ", n_diff);
}

// ---------------------------------------------------------------------------------------------
// Generated strings

#include "../src/util/rng.h"

static const char *const g_fragments[] = {
    // words and scripts
    "Hello", "world", "HELLO", "The quick brown fox jumps over the lazy dog.", "naïve café",
    "Ærøskøbing", "straße", "Привет, мир", "Καλημέρα κόσμε", "مرحبا بالعالم", "שלום עולם",
    "नमस्ते दुनिया", "สวัสดีชาวโลก", "你好，世界", "我想在apple工作1314151天～", "こんにちは世界",
    "カタカナ", "안녕하세요 세계", "Tiếng Việt có dấu", "កាន់តែពិសេសអាចខលចេញ", "ᎣᏏᏲ",
    "e\u0301", "a\u0308\u0323", "\u0915\u094D\u0937", "Ａｂｃ１２３", "ﬁnance", "Ⅻ", "½",
    // emoji
    "🦙", "😶\u200d🌫\ufe0f", "👍🏽", "🇫🇷🇯🇵", "👨\u200d👩\u200d👧\u200d👦", "✅", "🚀 (normal)",
    "🫠", "🫸🏿",
    // code
    "def f(x):\n    return x**2\n", "if (a && b) { return -1; }", "<div class=\"x\">&amp;</div>",
    "$ ls -la | grep foo > /dev/null 2>&1", "{\"key\": [1, 2.5e-3, null, true]}",
    "#include <stdio.h>", "x+=1;y-=2;z*=3", "fn main() -> Result<(), Box<dyn Error>>",
    "SELECT * FROM t WHERE a='b';", "@decorator\nclass A(B):", "\\n\\t\\\\", "`code`", "~/.bashrc",
    // whitespace
    " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n\n", " \n ", "\t\t\n", "\r", "    \n    ",
    "\u00a0", "\u3000", "\u2028", "\u2029", "\xc2\x85", "\u200b", "\ufeff", "\u1680", "\u202f",
    // digits
    "1", "12", "123", "1234", "1234567", "3.14159", "1,000,000", "٠١٢٣", "१२३", "１２３", "²³",
    "0x1F", "v1.2.3", "2024-01-31",
    // contractions
    "'s", "'S", "'ll", "'LL", "'re", "'Ve", "'d", "'M", "don't", "I'M", "we'VE", "y'all", "'",
    "''", "' era",
    // punctuation and symbols
    "!", "?!", "...", "—", "–", "«»", "“quoted”", "¿Qué?", "¡Hola!", "©®™", "€$¥£", "±×÷≠≤",
    "→⇒", "∀x∈ℝ", "°C", "§", "¶", "•", "…", "《》", "「」", "、。", "·",
    // special-token look-alikes
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>",
    "<|start_header_id|>", "<s>", "</s>", "<unk>", "[PAD151650]", "[PAD151900]", "<|im_start",
    "|im_end|>", "<<|im_end|>>", "<|im_end|><|im_end|>", "[INST]", "[/INST]", "<think>",
    "</think>", "<|reserved_special_token_5|>", "<|end|>", "<|user|>\n", "</s>  \n",
    " \t<|assistant|> \n", "<|endoftext|> ", "<0x41>", "▁", "▁▁", "Ġ", "Ċ",
    // invalid UTF-8 and odd code points
    "\x80", "\xff", "\xc3", "\xe4\xb8", "\xf0\x9f\x98", "\xc0\x80", "\xc1\xbf", "\xe0\x80\xaf",
    "\xed\xa0\x80", "\xed\xbf\xbf", "\xf8\x88\x80\x80\x80", "\xfe\xff", "\xc3\x28", "a\x80" "b",
    "\xe2\x82", "\xf0\x90\x80", "\xf4\x8f\xbf\xbf", "\xef\xbf\xbe", "\xcd\xb8",
};

// Where llama.cpp's lenient decoder would produce a value above U+10FFFF, llama_tokenize
// throws through the C API and aborts the process: such strings stay out of the comparison
// (ft reads them as U+FFFD bytes).
static bool llama_would_abort(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        if ((b & 0xF8) != 0xF0 || i + 3 >= n) continue;
        bool cont = ((uint8_t)s[i + 1] & 0xC0) == 0x80 && ((uint8_t)s[i + 2] & 0xC0) == 0x80 &&
                    ((uint8_t)s[i + 3] & 0xC0) == 0x80;
        uint32_t c = ((uint32_t)(b & 7) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                     ((uint32_t)(s[i + 2] & 0x3F) << 6) | (uint32_t)(s[i + 3] & 0x3F);
        if (cont && c >= 0x110000) return true;
    }
    return false;
}

typedef struct {
    char *b;
    size_t n, cap;
} gen_buf;

static void gen_add(gen_buf *g, const char *s, size_t len) {
    if (g->n + len + 1 > g->cap) {
        g->cap = (g->n + len + 1) * 2;
        g->b = realloc(g->b, g->cap);
    }
    memcpy(g->b + g->n, s, len);
    g->n += len;
    g->b[g->n] = 0;
}

// A random code point from ranges that exercise the category tables: letters and marks of many
// scripts, Unicode 15/16 additions, unassigned and private-use code points, symbols, spaces.
static uint32_t random_cpt(ft_rng *r) {
    static const uint32_t ranges[][2] = {
        {0x20, 0x7E}, {0xA0, 0x24F}, {0x300, 0x36F}, {0x370, 0x3FF}, {0x400, 0x52F},
        {0x590, 0x6FF}, {0x900, 0x97F}, {0xE00, 0xE7F}, {0x1100, 0x11FF}, {0x1680, 0x1CFF},
        {0x2000, 0x206F}, {0x20A0, 0x23FF}, {0x2460, 0x27BF}, {0x2E80, 0x2FFF}, {0x3000, 0x33FF},
        {0x4E00, 0x4FFF}, {0xA000, 0xA7FF}, {0xAC00, 0xAD00}, {0xD7B0, 0xD7FF}, {0xE000, 0xE0FF},
        {0xFB00, 0xFFFF}, {0x10000, 0x1047F}, {0x11F00, 0x11F5F}, {0x13400, 0x1345F},
        {0x1D400, 0x1D7FF}, {0x1E4D0, 0x1E5FF}, {0x1F300, 0x1FAFF}, {0x20000, 0x2000F},
        {0x2EBF0, 0x2EC0F}, {0x31350, 0x3136F}, {0xE0000, 0xE007F}, {0x10FFF0, 0x10FFFF},
    };
    size_t k = ft_rng_next(r) % FT_ARRAY_LEN(ranges);
    return ranges[k][0] + (uint32_t)(ft_rng_next(r) % (ranges[k][1] - ranges[k][0] + 1));
}

static void gen_string(ft_rng *r, gen_buf *g) {
    g->n = 0;
    gen_add(g, "", 0);
    int parts = 1 + (int)(ft_rng_next(r) % 8);
    for (int p = 0; p < parts; p++) {
        uint64_t kind = ft_rng_next(r) % 10;
        if (kind < 6) {
            const char *f = g_fragments[ft_rng_next(r) % FT_ARRAY_LEN(g_fragments)];
            gen_add(g, f, strlen(f));
        } else if (kind < 8) {
            int n = 1 + (int)(ft_rng_next(r) % 6);
            for (int i = 0; i < n; i++) {
                char utf8[4];
                uint32_t c = random_cpt(r);
                if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;
                int len = utf8_encode(c, utf8);
                gen_add(g, utf8, (size_t)len);
            }
        } else if (kind < 9) {
            int n = 1 + (int)(ft_rng_next(r) % 5);
            for (int i = 0; i < n; i++) {
                char c = (char)(ft_rng_next(r) % 2 ? 0x20 + ft_rng_next(r) % 95 : ft_rng_next(r) % 256);
                gen_add(g, &c, 1);
            }
        } else {
            static const char *const seps[] = {" ", "  ", "\n", "\t", "", "\r\n", " \n", "\n\n"};
            const char *s = seps[ft_rng_next(r) % FT_ARRAY_LEN(seps)];
            gen_add(g, s, strlen(s));
        }
        if (ft_rng_next(r) % 3 == 0) gen_add(g, " ", 1);
    }
}

static bool valid_utf8(const char *p, size_t n) {
    const uint8_t *s = (const uint8_t *)p;
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        size_t len = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3
                                  : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        if ((b == 0xE0 && s[i + 1] < 0xA0) || (b == 0xED && s[i + 1] > 0x9F) ||
            (b == 0xF0 && s[i + 1] < 0x90) || (b == 0xF4 && s[i + 1] > 0x8F))
            return false;
        i += len;
    }
    return true;
}

static void show_bytes(const char *what, const char *s, size_t n) {
    fprintf(stderr, "      %s: \"", what);
    for (size_t i = 0; i < n && i < 160; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') fputc(c, stderr);
        else fprintf(stderr, "\\x%02x", c);
    }
    fprintf(stderr, "\"\n");
}

static void show_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "      %s:", what);
    for (size_t i = 0; i < n && i < 48; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

// Strings per vocabulary; fewer under AddressSanitizer, which slows llama.cpp's std::regex
// (it allocates heavily) more than it finds there.
#if defined(__SANITIZE_ADDRESS__)
enum { N_STRINGS = 300, N_REPO_VOCABS = 3 };
#else
enum { N_STRINGS = 2500, N_REPO_VOCABS = 10 };
#endif
enum { MAX_IDS = 8192 };

// Compares ft with llama.cpp on n_strings generated strings (each with one of the four
// combinations of add_special / parse_special), on every token's piece, and on detokenizing
// what was tokenized. Returns the number of strings compared.
// The vocabulary as llama.cpp loads it: special ids, add_bos/add_eos, and for every token its
// attributes (control, user-defined, ... after llama.cpp's recognition by name), whether it ends
// generation, and its piece with and without special rendering. Returns the differences.
static int compare_vocab(oracle_vocab *o, const tok_vocab *v, const char *path) {
    int n_diff = 0;
    oracle_vocab_info info = oracle_vocab_get_info(o);
    CHECK(info.n_tokens == tok_n_tokens(v), "%s: n_tokens", path);
    CHECK(info.bos == tok_bos(v), "%s: bos %d vs %d", path, info.bos, tok_bos(v));
    CHECK(info.eos == tok_eos(v), "%s: eos %d vs %d", path, info.eos, tok_eos(v));
    CHECK(info.eot == tok_eot(v), "%s: eot %d vs %d", path, info.eot, tok_eot(v));
    CHECK(info.add_bos == tok_adds_bos(v) && info.add_eos == tok_adds_eos(v), "%s: add_bos/eos", path);
    char *buf = malloc(1 << 16);
    for (tok_id id = 0; id < tok_n_tokens(v); id++) {
        uint32_t want = oracle_token_attr(o, id) & 0x1BF, got = tok_attrs(v, id);
        if (want != got && ++n_diff <= 3)
            fprintf(stderr, "    %s: token %d attributes %#x, ft %#x\n", path, id, want, got);
        if (oracle_token_is_eog(o, id) != tok_is_eog(v, id) && ++n_diff <= 3)
            fprintf(stderr, "    %s: token %d end-of-generation differs\n", path, id);
        for (int special = 0; special < 2; special++) {
            int nb = oracle_token_to_piece(o, id, special, buf, 1 << 16);
            size_t len;
            const char *p = tok_piece(v, id, special, &len);
            if (nb < 0 || (size_t)nb != len || memcmp(buf, p, len)) {
                if (++n_diff <= 3) {
                    fprintf(stderr, "    %s: piece of %d (special %d) differs\n", path, id, special);
                    show_bytes("llama", buf, nb < 0 ? 0 : (size_t)nb);
                    show_bytes("ft   ", p, len);
                }
            }
        }
    }
    free(buf);
    return n_diff;
}

static int conformance(const char *path, uint64_t seed, int n_strings, bool whole_vocab,
                       int *n_mismatch, int *n_invalid) {
    *n_mismatch = *n_invalid = 0;
    oracle_vocab *o = oracle_vocab_load(path);
    if (!o) return 0;
    tok_vocab *v = fixture_vocab(path);
    if (!v) {
        oracle_vocab_free(o);
        return 0;
    }
    int32_t *want = malloc(MAX_IDS * sizeof(int32_t));
    char *buf = malloc(1 << 16);
    ft_rng r = ft_rng_init(seed);
    gen_buf g = {0};
    int n = 0;
    for (int i = 0; i < n_strings; i++) {
        gen_string(&r, &g);
        if (llama_would_abort(g.b, g.n)) continue;
        bool add_special = i & 1, parse_special = i & 2;
        int nw = oracle_tokenize(o, g.b, g.n, add_special, parse_special, want, MAX_IDS);
        tok_ids got = {0};
        tok_encode(v, g.b, g.n, add_special, parse_special, &got);
        n++;
        *n_invalid += !valid_utf8(g.b, g.n);
        bool same = nw >= 0 && got.n == (size_t)nw &&
                    (!got.n || !memcmp(got.ids, want, got.n * sizeof(int32_t)));
        if (!same && ++*n_mismatch <= 5) {
            fprintf(stderr, "    %s: string %d (add_special %d, parse_special %d) differs\n", path,
                    i, add_special, parse_special);
            show_bytes("text", g.b, g.n);
            show_ids("llama", want, nw < 0 ? 0 : (size_t)nw);
            show_ids("ft   ", got.ids, got.n);
        }
        // detokenize the ids back, both ways of treating special tokens
        if (same) {
            for (int m = 0; m < 2; m++) {
                int nb = oracle_detokenize(o, got.ids, (int)got.n, m, !m, buf, 1 << 16);
                size_t len;
                char *text = tok_detokenize(v, got.ids, got.n, m, !m, &len);
                if (nb < 0 || (size_t)nb != len || memcmp(buf, text, len)) {
                    if (++*n_mismatch <= 5) {
                        fprintf(stderr, "    %s: string %d detokenizes differently (remove_special %d)\n",
                                path, i, m);
                        show_bytes("llama", buf, nb < 0 ? 0 : (size_t)nb);
                        show_bytes("ft   ", text, len);
                    }
                }
                free(text);
            }
        }
        tok_ids_free(&got);
    }
    if (whole_vocab) *n_mismatch += compare_vocab(o, v, path);
    free(g.b);
    free(want);
    free(buf);
    tok_vocab_free(v);
    oracle_vocab_free(o);
    return n;
}

static void conformance_file(const char *path, const char *label, uint64_t seed, int n_strings,
                             bool whole_vocab) {
    int n_mismatch, n_invalid;
    int n = conformance(path, seed, n_strings, whole_vocab, &n_mismatch, &n_invalid);
    if (test_failed() || !n) return;
    fprintf(stderr, "    %s: %d strings (%d with invalid UTF-8), %d mismatches\n", label, n,
            n_invalid, n_mismatch);
    CHECK(n_mismatch == 0, "%s: %d mismatches with llama.cpp", label, n_mismatch);
}

static void conformance_shared(const char *name) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    conformance_file(path, name, 1234, N_STRINGS, true);
}

TEST(tokenizer_conformance_qwen2) { conformance_shared("qwen2"); }
TEST(tokenizer_conformance_llama_bpe) { conformance_shared("llama-bpe"); }
TEST(tokenizer_conformance_gpt2) { conformance_shared("gpt-2"); }
TEST(tokenizer_conformance_llama_spm) { conformance_shared("llama-spm"); }

// The Qwen2 vocabulary with another tokenizer.ggml.pre: exercises every pre-tokenizer with a
// real vocabulary (llama.cpp loads such a file just as well).
static void conformance_pre(const char *pre) {
    char src[1024];
    snprintf(src, sizeof(src), "%s/vocab/ggml-vocab-qwen2.gguf", test_shared_dir());
    ft_err err = {{0}};
    gguf_file *f = gguf_open(src, &err);
    REQUIRE(f, "%s", err.msg);
    gguf_writer *w = gguf_writer_init();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) gguf_writer_copy_kv(w, f, i);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    char name[128];
    snprintf(name, sizeof(name), "vocab-qwen2-pre-%s.gguf", pre);
    const char *path = test_path(name);
    bool ok = gguf_writer_begin(w, path, &err) && gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    gguf_close(f);
    REQUIRE(ok, "%s", err.msg);
    char label[160];
    snprintf(label, sizeof(label), "qwen2 vocab, pre %s", pre);
    conformance_file(path, label, 99, N_STRINGS, false);
}

TEST(tokenizer_conformance_pre_qwen35) { conformance_pre("qwen35"); }
TEST(tokenizer_conformance_pre_llama3) { conformance_pre("llama3"); }
TEST(tokenizer_conformance_pre_deepseek_llm) { conformance_pre("deepseek-llm"); }
TEST(tokenizer_conformance_pre_deepseek_coder) { conformance_pre("deepseek-coder"); }
TEST(tokenizer_conformance_pre_deepseek_v3) { conformance_pre("deepseek-v3"); }
TEST(tokenizer_conformance_pre_gpt4o) { conformance_pre("gpt-4o"); }
TEST(tokenizer_conformance_pre_laguna) { conformance_pre("laguna"); }
TEST(tokenizer_conformance_pre_glm4) { conformance_pre("glm4"); } // GLM-4.5 / 4.6 (no BOS)
TEST(tokenizer_conformance_pre_default) { conformance_pre("default"); }

// Gemma 4's SentencePiece-style BPE (tokenizer.ggml.model "gemma4": raw UTF-8 with "▁" for
// ' ', runs of newlines, <0xXX> byte tokens, BOS always added) on as many strings as the shared
// vocabularies (the repository test below runs it on fewer, with the whole vocabulary).
TEST(tokenizer_conformance_gemma4) {
    const char *src = oracle_llama_src();
    if (!src) return;
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/ggml-vocab-gemma-4.gguf", src);
    conformance_file(path, "gemma-4", 4444, N_STRINGS, false);
}

// A small vocabulary of Gemma 4's kind where its special rules decide: "\n\n\n" is a token
// that the merges ("\n \n" makes "\n\n", no token) never reach, so only taking a run of
// newlines whole finds it; 'x' has no token and only its byte token <0x78>, 'q' neither; spaces
// are "▁". ft and llama.cpp tokenize and detokenize a list of strings alike, and the newline
// run and the byte token come out as expected.
static const char *write_tiny_gemma4(void) {
    static const char *const toks[] = {"<pad>", "<eos>", "<bos>", "<unk>", "\n", "\n\n\n", "<0x78>", "▁",
                                       "h", "e", "l", "o", "he", "ll", "▁h", "▁he", "llo", "hello", "<turn|>"};
    static const char *const merges[] = {"\n \n", "h e", "l l", "▁ h", "▁h e", "ll o", "he llo"};
    int32_t types[FT_ARRAY_LEN(toks)];
    for (size_t i = 0; i < FT_ARRAY_LEN(toks); i++) types[i] = i < 4 ? 3 : i == 6 ? 6 : 1;
    types[FT_ARRAY_LEN(toks) - 1] = 3;
    const char *path = test_path("tiny-gemma4.gguf");
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "gemma4");
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gemma4");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, FT_ARRAY_LEN(toks));
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, types, FT_ARRAY_LEN(toks));
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, FT_ARRAY_LEN(merges));
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 1);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false); // (overridden: always true)
    ft_err err = {{0}};
    bool ok = gguf_writer_begin(w, path, &err) && gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    if (!ok) test_fail(__FILE__, __LINE__, "%s", err.msg);
    return ok ? path : NULL;
}

TEST(tokenizer_gemma4_rules_against_llama) {
    const char *path = write_tiny_gemma4();
    REQUIRE(path);
    oracle_vocab *o = oracle_vocab_load(path);
    if (!o) return;
    tok_vocab *v = fixture_vocab(path);
    REQUIRE(v);
    static const char *const texts[] = {"\n\n\n", "\n\n", "\n\n\n\n", "hello\n\n\nhe", " hello he",
                                        "x q\n\n\nxx", "  \n \n\n\n ", "hello<turn|>\n\n\n", "\n\n\n\n\n\n"};
    int32_t want[64];
    char buf[256];
    for (size_t i = 0; i < FT_ARRAY_LEN(texts); i++)
        for (int mode = 0; mode < 4; mode++) {
            bool add_special = mode & 1, parse_special = mode & 2;
            size_t len = strlen(texts[i]);
            int nw = oracle_tokenize(o, texts[i], len, add_special, parse_special, want, 64);
            tok_ids got = {0};
            tok_encode(v, texts[i], len, add_special, parse_special, &got);
            bool same = nw >= 0 && got.n == (size_t)nw && (!nw || !memcmp(got.ids, want, (size_t)nw * sizeof(int32_t)));
            CHECK(same, "text %zu (mode %d): llama.cpp %d ids, ft %zu", i, mode, nw, got.n);
            if (same) {
                int nb = oracle_detokenize(o, got.ids, (int)got.n, false, true, buf, sizeof(buf));
                size_t tl;
                char *text = tok_detokenize(v, got.ids, got.n, false, true, &tl);
                CHECK(nb >= 0 && (size_t)nb == tl && !memcmp(buf, text, tl), "text %zu detokenizes differently", i);
                free(text);
            }
            tok_ids_free(&got);
        }
    // BOS (always), "\n\n\n" whole, "x" as its byte token, "▁", "q" dropped
    tok_ids got = {0};
    tok_encode(v, "\n\n\nx q", 7, true, false, &got);
    CHECK(got.n == 4 && got.ids[0] == 2 && got.ids[1] == 5 && got.ids[2] == 6 && got.ids[3] == 7, "%zu ids", got.n);
    tok_ids_free(&got);
    tok_vocab_free(v);
    oracle_vocab_free(o);
}

// The other vocabularies of llama.cpp's repository that ft supports (real deepseek-coder,
// deepseek-llm, gemma-4, qwen35, falcon, ... files), each as a whole and on fewer strings (the first
// three only under AddressSanitizer).
TEST(tokenizer_conformance_llama_repo) {
    const char *src = oracle_llama_src();
    if (!src) return;
    static const char *const names[] = {"deepseek-coder", "deepseek-llm", "gemma-4", "qwen35", "command-r",
                                        "falcon", "mpt", "refact", "starcoder", "phi-3"};
    _Static_assert(FT_ARRAY_LEN(names) >= N_REPO_VOCABS, "names");
    for (size_t i = 0; i < N_REPO_VOCABS && !test_failed(); i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/models/ggml-vocab-%s.gguf", src, names[i]);
        conformance_file(path, names[i], 7 + i, N_STRINGS / 8, true);
    }
}
