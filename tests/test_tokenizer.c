// test_tokenizer.c: the tokenizer against llama.cpp's test vectors and against properties
// that need no oracle (round trips, segments, streaming UTF-8, errors).
#include "oracle.h"
#include "fixtures.h"
#include "../src/gguf/gguf.h"
#include "../src/tokenizer/tokenizer.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static bool ids_equal(const tok_ids *a, const int32_t *b, size_t nb) {
    if (a->n != nb) return false;
    for (size_t i = 0; i < nb; i++)
        if (a->ids[i] != b[i]) return false;
    return true;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "      %s:", what);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

// Runs the .inp/.out pairs of a vocab file (llama.cpp's test-tokenizer-0 format: inputs
// separated by "\n__ggml_vocab_test__\n", one line of ids per input, no BOS, no special
// parsing). Returns the number of cases, or -1 if the files are missing.
static int run_vectors(const tok_vocab *v, const char *gguf_path, int *n_fail) {
    char path[1200];
    size_t inp_len, out_len;
    snprintf(path, sizeof(path), "%s.inp", gguf_path);
    char *inp = fixture_read_file(path, &inp_len);
    snprintf(path, sizeof(path), "%s.out", gguf_path);
    char *out = fixture_read_file(path, &out_len);
    if (!inp || !out) {
        free(inp);
        free(out);
        return -1;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n = 0;
    *n_fail = 0;
    char *p = inp, *line = out;
    while (p < inp + inp_len && line < out + out_len) {
        char *next = strstr(p, sep);
        size_t len = next ? (size_t)(next - p) : strlen(p);
        char *eol = strchr(line, '\n');
        if (eol) *eol = 0;
        int32_t want[4096];
        size_t n_want = 0;
        for (char *t = strtok(line, " \r"); t && n_want < 4096; t = strtok(NULL, " \r"))
            want[n_want++] = (int32_t)atoi(t);
        tok_ids got = {0};
        tok_encode(v, p, len, false, false, &got);
        if (!ids_equal(&got, want, n_want)) {
            if (++*n_fail <= 5) {
                fprintf(stderr, "    %s case %d: '%.*s'\n", gguf_path, n, (int)FT_MIN(len, 80), p);
                print_ids("want", want, n_want);
                print_ids("got ", got.ids, got.n);
            }
        }
        tok_ids_free(&got);
        n++;
        if (!next) break;
        p = next + strlen(sep);
        line = eol ? eol + 1 : out + out_len;
    }
    free(inp);
    free(out);
    return n;
}

static void shared_vectors(const char *name) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    tok_vocab *v = fixture_vocab(path);
    REQUIRE(v);
    int n_fail = 0;
    int n = run_vectors(v, path, &n_fail);
    REQUIRE(n > 0, "no vectors for %s", name);
    CHECK(n_fail == 0, "%s: %d of %d vectors differ", name, n_fail, n);
    fprintf(stderr, "    %s: %d vectors, %d differ\n", name, n, n_fail);
    tok_vocab_free(v);
}

TEST(tokenizer_vectors_qwen2) { shared_vectors("qwen2"); }
TEST(tokenizer_vectors_llama_bpe) { shared_vectors("llama-bpe"); }
TEST(tokenizer_vectors_gpt2) { shared_vectors("gpt-2"); }
TEST(tokenizer_vectors_llama_spm) { shared_vectors("llama-spm"); }

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// The vectors of llama.cpp's own repository (models/ggml-vocab-*.gguf.inp/.out, unpacked from
// node-llama-cpp's bundle): every vocabulary whose tokenizer ft supports must pass exactly
// (deepseek-coder, deepseek-llm, qwen35, falcon, starcoder, ...); the others must be refused
// with a message naming what is unsupported.
TEST(tokenizer_vectors_llama_repo) {
    const char *src = oracle_llama_src();
    if (!src) return;
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/models", src);
    DIR *d = opendir(dir);
    REQUIRE(d, "cannot open %s", dir);
    char *names[256];
    int n_names = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n_names < 256) {
        size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, "ggml-vocab-", 11) && len > 5 && !strcmp(e->d_name + len - 5, ".gguf"))
            names[n_names++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n_names, sizeof(char *), by_name);
    int n_files = 0;
    for (int i = 0; i < n_names; i++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        ft_err err = {{0}};
        gguf_file *f = gguf_open(path, &err);
        tok_vocab *v = f ? tok_vocab_load(f, &err) : NULL;
        gguf_close(f);
        if (!v) {
            bool refused = strstr(err.msg, "unsupported tokenizer model") ||
                           strstr(err.msg, "unknown pre-tokenizer");
            CHECK(refused, "%s: %s", names[i], err.msg);
            fprintf(stderr, "    %s: not supported (%s)\n", names[i], err.msg);
            continue;
        }
        int n_fail = 0;
        int n = run_vectors(v, path, &n_fail);
        if (n >= 0) {
            n_files++;
            CHECK(n_fail == 0, "%s: %d of %d vectors differ", names[i], n_fail, n);
            fprintf(stderr, "    %s (%s): %d vectors, %d differ\n", names[i],
                    tok_vocab_kind(v) == TOK_KIND_SPM ? "spm" : tok_vocab_pre(v), n, n_fail);
        }
        tok_vocab_free(v);
    }
    for (int i = 0; i < n_names; i++) free(names[i]);
    CHECK(n_files >= 8, "only %d vocabularies with vectors ran", n_files);
}

// ---------------------------------------------------------------------------------------------
// Properties that need no oracle

static tok_vocab *shared(const char *name) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    return fixture_vocab(path);
}

static char *pieces_of(const tok_vocab *v, const tok_ids *ids, size_t *len) {
    size_t cap = 16, n = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i < ids->n; i++) {
        size_t pl;
        const char *p = tok_piece(v, ids->ids[i], true, &pl);
        while (n + pl + 1 > cap) s = realloc(s, cap *= 2);
        memcpy(s + n, p, pl);
        n += pl;
    }
    s[n] = 0;
    *len = n;
    return s;
}

static const char *const g_texts[] = {
    "Hello world",
    "  leading and trailing  ",
    "naïve café — Привет, мир! 你好，世界 🦙🚀 e\u0301",
    "def f(x):\n\treturn x**2  # comment\r\n\n\n",
    "1234567890 3.14159 ١٢٣",
    "I'm sure they'LL say we've done it",
    "\u00a0\u3000\u2028 mixed spaces",
};

// BPE is lossless: the pieces of the tokens of valid UTF-8 are the text itself.
TEST(tokenizer_round_trip_bpe) {
    static const char *const names[] = {"qwen2", "llama-bpe", "gpt-2"};
    for (size_t k = 0; k < FT_ARRAY_LEN(names); k++) {
        tok_vocab *v = shared(names[k]);
        REQUIRE(v);
        for (size_t i = 0; i < FT_ARRAY_LEN(g_texts); i++) {
            tok_ids ids = {0};
            tok_encode(v, g_texts[i], strlen(g_texts[i]), false, false, &ids);
            size_t len;
            char *back = pieces_of(v, &ids, &len);
            CHECK(len == strlen(g_texts[i]) && !memcmp(back, g_texts[i], len), "%s: '%s' -> '%s'",
                  names[k], g_texts[i], back);
            free(back);
            tok_ids_free(&ids);
        }
        tok_vocab_free(v);
    }
}

// SentencePiece is lossless too, invalid bytes included (byte fallback), up to the space it
// puts in front.
TEST(tokenizer_round_trip_spm) {
    tok_vocab *v = shared("llama-spm");
    REQUIRE(v);
    // (a lead byte that claims more bytes than follow before a space swallows part of its "▁",
    // as in llama.cpp: not lossless there)
    static const char bad[] = "ok \x80\xc3x \xed\xa0\x80 end";
    for (size_t i = 0; i <= FT_ARRAY_LEN(g_texts); i++) {
        const char *t = i < FT_ARRAY_LEN(g_texts) ? g_texts[i] : bad;
        tok_ids ids = {0};
        tok_encode(v, t, strlen(t), false, false, &ids);
        size_t len;
        char *back = pieces_of(v, &ids, &len);
        CHECK(len == strlen(t) + 1 && back[0] == ' ' && !memcmp(back + 1, t, len - 1), "'%s' -> '%s'",
              t, back);
        free(back);
        tok_ids_free(&ids);
    }
    tok_vocab_free(v);
}

// Invalid UTF-8 in BPE: each byte that does not start a sequence llama.cpp accepts reads as
// U+FFFD; overlong forms read as the code point they spell.
TEST(tokenizer_invalid_utf8_bpe) {
    tok_vocab *v = shared("qwen2");
    REQUIRE(v);
    static const struct {
        const char *in, *as;
    } cases[] = {
        {"a\xff" "b", "a\xef\xbf\xbd" "b"},
        {"\xe4\xb8", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc1\x81", "A"}, // overlong 'A'
        {"x\xf8\x88\x80\x80\x80", "x\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf7\xbf\xbf\xbf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, // > U+10FFFF
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        tok_ids a = {0}, b = {0};
        tok_encode(v, cases[i].in, strlen(cases[i].in), false, false, &a);
        tok_encode(v, cases[i].as, strlen(cases[i].as), false, false, &b);
        CHECK(a.n == b.n && !memcmp(a.ids, b.ids, a.n * sizeof(tok_id)), "case %zu", i);
        tok_ids_free(&a);
        tok_ids_free(&b);
    }
    tok_vocab_free(v);
}

// BOS/EOS follow the vocabulary: SPM and Llama 3 add BOS, Qwen2 and GPT-2 nothing.
TEST(tokenizer_bos_defaults) {
    static const struct {
        const char *name;
        tok_id first;
    } cases[] = {{"llama-spm", 1}, {"llama-bpe", 128000}, {"qwen2", 9707}, {"gpt-2", 15496}};
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        tok_vocab *v = shared(cases[i].name);
        REQUIRE(v);
        tok_ids ids = {0};
        tok_encode(v, "Hello", 5, true, false, &ids);
        CHECK(ids.n >= 1 && ids.ids[0] == cases[i].first, "%s: first id %d", cases[i].name,
              ids.n ? ids.ids[0] : -1);
        CHECK(!tok_adds_eos(v) && ids.ids[ids.n - 1] != tok_eos(v), "%s adds EOS", cases[i].name);
        tok_ids_free(&ids);
        tok_encode(v, "", 0, true, false, &ids);
        CHECK(ids.n == (tok_adds_bos(v) ? 1u : 0u), "%s: empty text gave %zu ids", cases[i].name, ids.n);
        tok_ids_free(&ids);
        tok_vocab_free(v);
    }
}

// Control tokens are parsed only where allowed; user-defined ones always (llama.cpp's rule).
TEST(tokenizer_special_tokens_only_when_asked) {
    tok_vocab *v = shared("qwen2");
    REQUIRE(v);
    tok_id im_start = tok_find(v, "<|im_start|>", 12);
    REQUIRE(im_start == 151644);
    tok_ids a = {0}, b = {0};
    tok_encode(v, "<|im_start|>user", 16, false, true, &a);
    CHECK(a.n == 2 && a.ids[0] == im_start, "parsed: %zu ids", a.n);
    tok_encode(v, "<|im_start|>user", 16, false, false, &b);
    CHECK(b.n > 2, "not parsed: %zu ids", b.n);
    for (size_t i = 0; i < b.n; i++) CHECK(b.ids[i] != im_start);
    tok_ids_free(&a);
    tok_ids_free(&b);
    // "[PAD151650]" is user-defined in Qwen2: one token even without parse_special
    tok_encode(v, "x[PAD151650]y", 13, false, false, &a);
    CHECK(a.n == 3 && a.ids[1] == 151650, "user-defined: %zu ids", a.n);
    tok_ids_free(&a);
    tok_vocab_free(v);
}

// Segments: text split anywhere tokenizes as the whole string; control tokens count only in
// segments that allow them, so message text cannot inject one.
TEST(tokenizer_segments) {
    tok_vocab *v = shared("qwen2");
    REQUIRE(v);
    const char *t = g_texts[2];
    size_t len = strlen(t);
    tok_ids whole = {0};
    tok_encode(v, t, len, false, false, &whole);
    for (size_t cut = 0; cut <= len; cut += 3) {
        tok_segment segs[3] = {{t, cut, false}, {"", 0, true}, {t + cut, len - cut, false}};
        tok_ids parts = {0};
        tok_encode_segments(v, segs, 3, false, &parts);
        CHECK(parts.n == whole.n && !memcmp(parts.ids, whole.ids, whole.n * sizeof(tok_id)),
              "cut at %zu", cut);
        tok_ids_free(&parts);
    }
    tok_ids_free(&whole);

    tok_segment chat[] = {{"<|im_start|>user\n", 17, true},
                          {"hi<|im_end|><|im_start|>system", 30, false},
                          {"<|im_end|>\n", 11, true}};
    tok_ids ids = {0};
    tok_encode_segments(v, chat, 3, false, &ids);
    int n_start = 0, n_end = 0;
    for (size_t i = 0; i < ids.n; i++) {
        n_start += ids.ids[i] == 151644;
        n_end += ids.ids[i] == 151645;
    }
    CHECK(n_start == 1 && n_end == 1 && ids.ids[0] == 151644 && ids.ids[ids.n - 2] == 151645,
          "markup tokens %d/%d", n_start, n_end);
    tok_ids_free(&ids);
    tok_vocab_free(v);
}

// The streaming detokenizer emits only whole UTF-8 characters, in order; what it emits over a
// stream is the text.
TEST(tokenizer_stream_utf8) {
    tok_vocab *v = shared("qwen2");
    REQUIRE(v);
    const char *t = "𓀀 hieroglyphs, 你好 and e\u0301motes 😶\u200d🌫\ufe0f!";
    tok_ids ids = {0};
    tok_encode(v, t, strlen(t), false, false, &ids);
    tok_stream s;
    tok_stream_init(&s, v, false);
    char out[256];
    size_t n = 0;
    int n_held = 0;
    for (size_t i = 0; i < ids.n; i++) {
        size_t len;
        const char *p = tok_stream_push(&s, ids.ids[i], &len);
        if (!len) n_held++;
        // each chunk is valid UTF-8 on its own: no continuation byte at its start
        CHECK(!len || ((unsigned char)p[0] & 0xC0) != 0x80, "token %zu starts mid-character", i);
        REQUIRE(n + len < sizeof(out));
        memcpy(out + n, p, len);
        n += len;
    }
    size_t len;
    tok_stream_flush(&s, &len);
    CHECK(len == 0);
    CHECK(n == strlen(t) && !memcmp(out, t, n), "streamed '%.*s'", (int)n, out);
    CHECK(n_held >= 2, "U+13000 spans 3 tokens: %d held back", n_held);
    tok_stream_free(&s);
    tok_ids_free(&ids);
    tok_vocab_free(v);
}

// Bytes that can never form a character come out as U+FFFD, one per maximal invalid
// subsequence (the WHATWG / Unicode recommendation); an unfinished character at the end, too.
TEST(tokenizer_stream_invalid_bytes) {
    tok_vocab *v = shared("llama-spm"); // byte tokens <0xXX> give any byte sequence
    REQUIRE(v);
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"a\xff" "b", "a\xef\xbf\xbd" "b"},
        {"\xe2\x82" "a", "\xef\xbf\xbd" "a"},
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, // a surrogate
        {"\xc0\x80", "\xef\xbf\xbd\xef\xbf\xbd"},                 // overlong
        {"\xf0\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, // > U+10FFFF
        {"\xf0\x9f\xa6\x99", "\xf0\x9f\xa6\x99"},
        {"\xf0\x9f\xa6", "\xef\xbf\xbd"}, // cut short at the end
    };
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        tok_stream s;
        tok_stream_init(&s, v, false);
        char out[64];
        size_t n = 0, len;
        for (const char *p = cases[c].in; *p; p++) {
            char name[8];
            snprintf(name, sizeof(name), "<0x%02X>", (unsigned char)*p);
            const char *o = tok_stream_push(&s, tok_find(v, name, 6), &len);
            memcpy(out + n, o, len);
            n += len;
        }
        const char *o = tok_stream_flush(&s, &len);
        memcpy(out + n, o, len);
        n += len;
        CHECK(n == strlen(cases[c].out) && !memcmp(out, cases[c].out, n), "case %zu", c);
        tok_stream_free(&s);
    }
    tok_vocab_free(v);
}

// Tokenizing 100 KB of mixed text (prose in several scripts, code, digits, emoji) takes well
// under a second.
TEST(tokenizer_speed_100kb) {
    static const char *const names[] = {"qwen2", "llama-bpe", "llama-spm"};
    size_t cap = 110 * 1024, n = 0;
    char *text = malloc(cap);
    for (size_t i = 0; n < 100 * 1024; i++) {
        const char *t = g_texts[i % FT_ARRAY_LEN(g_texts)];
        size_t len = strlen(t);
        if (n + len + 1 > cap) break;
        memcpy(text + n, t, len);
        n += len;
        text[n++] = ' ';
    }
    for (size_t k = 0; k < FT_ARRAY_LEN(names); k++) {
        tok_vocab *v = shared(names[k]);
        REQUIRE(v);
        tok_ids ids = {0};
        double t0 = ft_time_s();
        tok_encode(v, text, n, false, false, &ids);
        double dt = ft_time_s() - t0;
        fprintf(stderr, "    %s: %zu bytes -> %zu tokens in %.1f ms\n", names[k], n, ids.n, dt * 1e3);
        CHECK(dt < 1.0, "%s: %.3f s", names[k], dt);
        tok_ids_free(&ids);
        tok_vocab_free(v);
    }
    free(text);
}

// ---------------------------------------------------------------------------------------------
// Malformed vocabularies are refused with a message saying what is wrong

typedef void (*vocab_edit)(gguf_writer *w);

// A copy of a shared vocabulary's keys without `drop`, then `edit` applied; returns the load
// error ("" if it loaded).
static const char *load_variant(const char *name, const char *drop, vocab_edit edit) {
    static ft_err err;
    char src[1024];
    snprintf(src, sizeof(src), "%s/vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    memset(&err, 0, sizeof(err));
    gguf_file *f = gguf_open(src, &err);
    if (!f) return err.msg;
    gguf_writer *w = gguf_writer_init();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_kv_key(f, i);
        if (drop && gguf_str_eq(k, drop)) continue;
        gguf_writer_copy_kv(w, f, i);
    }
    if (edit) edit(w);
    const char *path = test_path("variant.gguf");
    bool ok = gguf_writer_begin(w, path, &err) && gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    gguf_close(f);
    if (!ok) return err.msg;
    f = gguf_open(path, &err);
    tok_vocab *v = f ? tok_vocab_load(f, &err) : NULL;
    gguf_close(f);
    tok_vocab_free(v);
    return v ? "" : err.msg;
}

static void pre_unknown(gguf_writer *w) { gguf_writer_set_str(w, "tokenizer.ggml.pre", "foo-bar"); }
static void model_bert(gguf_writer *w) { gguf_writer_set_str(w, "tokenizer.ggml.model", "bert"); }
static void tokens_ints(gguf_writer *w) {
    int32_t x[3] = {1, 2, 3};
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_VALUE_TYPE_INT32, x, 3);
}
static void few_scores(gguf_writer *w) {
    float x[3] = {0, 0, 0};
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VALUE_TYPE_FLOAT32, x, 3);
}
static void types_float(gguf_writer *w) {
    float x[3] = {0, 0, 0};
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_FLOAT32, x, 3);
}
static void duplicate_tokens(gguf_writer *w) {
    const char *t[] = {"a", "b", "a"};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", t, 3);
    int32_t types[3] = {1, 1, 1};
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, types, 3);
}
static void bos_out_of_range(gguf_writer *w) {
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 4000000000u);
}

TEST(tokenizer_rejects_bad_vocab) {
    static const struct {
        const char *name, *drop;
        vocab_edit edit;
        const char *want; // part of the message; "" = loads
    } cases[] = {
        {"qwen2", NULL, pre_unknown, "unknown pre-tokenizer 'foo-bar'"},
        {"qwen2", "tokenizer.ggml.model", NULL, "tokenizer.ggml.model missing"},
        {"qwen2", NULL, model_bert, "unsupported tokenizer model 'bert'"},
        {"qwen2", "tokenizer.ggml.merges", NULL, "tokenizer.ggml.merges missing"},
        {"qwen2", "tokenizer.ggml.tokens", NULL, "tokenizer.ggml.tokens missing"},
        {"qwen2", NULL, tokens_ints, "not of strings"},
        {"llama-spm", NULL, few_scores, "3 scores for 32000 tokens"},
        {"llama-spm", NULL, types_float, "token_type is not an array of int32"},
        {"gpt-2", NULL, duplicate_tokens, "tokens 0 and 2 have the same text 'a'"},
        {"gpt-2", NULL, bos_out_of_range, ""},
        {"qwen2", "tokenizer.ggml.pre", NULL, ""}, // llama.cpp's "default"
        {"llama-spm", "tokenizer.ggml.token_type", NULL, ""},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        const char *got = load_variant(cases[i].name, cases[i].drop, cases[i].edit);
        bool ok = cases[i].want[0] ? strstr(got, cases[i].want) != NULL : !got[0];
        CHECK(ok, "case %zu: wanted '%s', got '%s'", i, cases[i].want, got);
    }
}

// ---------------------------------------------------------------------------------------------
// ft tokenize

TEST(tokenizer_cli) {
    char cmd[2048], out[4096];
    const char *ft = test_ft_bin();
    const char *dir = test_shared_dir();
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-qwen2.gguf --json 'Hello world'", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && !strcmp(out, "[9707,1879]\n"), "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-llama-spm.gguf 'Hello world'", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && !strcmp(out, "1 15043 3186\n"), "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-llama-spm.gguf --no-bos 'Hello world'", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && !strcmp(out, "15043 3186\n"), "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-qwen2.gguf --special --json '<|im_start|>'", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && !strcmp(out, "[151644]\n"), "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-qwen2.gguf --json --pieces 'Hi there'", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 &&
              !strcmp(out, "[{\"id\":13048,\"piece\":\"Hi\"},{\"id\":1052,\"piece\":\" there\"}]\n"),
          "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-qwen2.gguf --pieces 'Hi'", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && strstr(out, "13048 'Hi'"), "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m /nonexistent.gguf hi 2>&1", ft);
    CHECK(test_run(cmd, out, sizeof(out)) == 1 && strstr(out, "nonexistent"), "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-qwen2.gguf --bogus hi 2>/dev/null", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s tokenize hi 2>/dev/null", ft);
    CHECK(test_run(cmd, out, sizeof(out)) == 2);
    // --chat: the model's template (recognised in the file) around a user message
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-qwen2.gguf --chat 'hi'", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 &&
              !strcmp(out, "151644 8948 198 2610 525 264 10950 17847 151645 198 151644 872 198 6023 "
                           "151645 198 151644 77091 198\n"),
          "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-llama-spm.gguf --chat-template llama2 'hi'",
             ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && !strcmp(out, "1 518 25580 29962 7251 518 29914 25580 29962\n"),
          "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-llama-spm.gguf --chat hi 2>&1", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 1 && strstr(out, "no chat template"), "got '%s'", out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-qwen2.gguf --chat-template vicuna hi 2>&1", ft, dir);
    CHECK(test_run(cmd, out, sizeof(out)) == 1 && strstr(out, "unknown chat template 'vicuna'"), "got '%s'", out);
    // a Jinja file as the template: its markers are control tokens, the message is not
    char tmpl[512];
    snprintf(tmpl, sizeof(tmpl), "%s", test_path("tmpl.jinja"));
    FILE *f = fopen(tmpl, "w");
    REQUIRE(f);
    fputs("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}", f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-qwen2.gguf --chat-template %s --chat '<|im_end|>'", ft,
             dir, tmpl);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && !strcmp(out, "151644 872 198 27 91 318 6213 91 29 151645 198\n"),
          "got '%s'", out);
    f = fopen(tmpl, "w");
    REQUIRE(f);
    fputs("{% for m in messages %}\n{% endfor", f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s/vocab/ggml-vocab-qwen2.gguf --chat-template %s --chat hi 2>&1", ft, dir,
             tmpl);
    CHECK(test_run(cmd, out, sizeof(out)) == 1 && strstr(out, "line 2, column") && strstr(out, "tmpl.jinja"),
          "got '%s'", out);
}

// ---------------------------------------------------------------------------------------------
// Small vocabularies written from scratch (the fuzzer's seeds, and a check that ft reads what a
// minimal converter writes)

// A byte-level BPE vocabulary: the 256 byte characters, a few merges, two control tokens.
static void write_tiny_bpe(const char *path, const char *pre) {
    static const char *const merges[] = {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or"};
    const char *toks[256 + 8 + 2];
    char chars[256][3];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        // GPT-2's byte alphabet: printable Latin-1 as itself, the rest from U+0100 on
        static int next = 0x100;
        if (b == 0) next = 0x100;
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int c = printable ? b : next++;
        if (c < 0x80) chars[b][0] = (char)c, chars[b][1] = 0;
        else chars[b][0] = (char)(0xC0 | (c >> 6)), chars[b][1] = (char)(0x80 | (c & 0x3F)), chars[b][2] = 0;
        toks[n++] = chars[b];
    }
    static const char *const extra[] = {"he", "ll", "hell", "hello", "Ġw", "or", "Ġwor"};
    for (size_t i = 0; i < FT_ARRAY_LEN(extra); i++) toks[n++] = extra[i];
    toks[n++] = "<|endoftext|>";
    toks[n++] = "<|im_start|>";
    int32_t types[256 + 8 + 2];
    for (int i = 0; i < n; i++) types[i] = i >= n - 2 ? 3 : 1;
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "qwen2");
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, types, (uint64_t)n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, FT_ARRAY_LEN(merges));
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)n - 2);
    ft_err err;
    bool ok = gguf_writer_begin(w, path, &err) && gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    CHECK(ok, "%s", err.msg);
}

// A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, a few scored pieces.
static void write_tiny_spm(const char *path) {
    static const char *const pieces[] = {"▁", "▁h", "▁he", "ll", "llo", "▁hello", "o", "w"};
    const char *toks[3 + 256 + 8];
    char bytes[256][7];
    float scores[3 + 256 + 8];
    int32_t types[3 + 256 + 8];
    int n = 0;
    static const char *const ctl[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) scores[n] = 0, types[n] = i ? 3 : 2, toks[n++] = ctl[i];
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
        scores[n] = 0, types[n] = 6, toks[n++] = bytes[b];
    }
    for (size_t i = 0; i < FT_ARRAY_LEN(pieces); i++)
        scores[n] = -(float)i, types[n] = 1, toks[n++] = pieces[i];
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VALUE_TYPE_FLOAT32, scores, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, types, (uint64_t)n);
    ft_err err;
    bool ok = gguf_writer_begin(w, path, &err) && gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    CHECK(ok, "%s", err.msg);
}

TEST(tokenizer_tiny_vocabs) {
    const char *bpe = test_path("tiny-bpe.gguf"), *spm = test_path("tiny-spm.gguf");
    write_tiny_bpe(bpe, "qwen2");
    write_tiny_spm(spm);
    tok_vocab *v = fixture_vocab(bpe);
    REQUIRE(v);
    tok_ids ids = {0};
    tok_encode(v, "hello world", 11, false, false, &ids);
    // "hello" merges fully (259); " world" -> "Ġwor" (262) + the byte tokens of 'l' and 'd'
    CHECK(ids.n == 4 && ids.ids[0] == 259 && ids.ids[1] == 262 && ids.ids[2] == 'l' && ids.ids[3] == 'd',
          "%zu ids", ids.n);
    tok_ids_free(&ids);
    tok_vocab_free(v);
    v = fixture_vocab(spm);
    REQUIRE(v);
    tok_encode(v, "hello w", 7, true, false, &ids);
    // BOS, "▁hello", "▁" + "w"
    CHECK(ids.n == 4 && ids.ids[0] == 1 && ids.ids[1] == 259 + 5 && ids.ids[2] == 259 && ids.ids[3] == 259 + 7,
          "%zu ids", ids.n);
    tok_ids_free(&ids);
    tok_vocab_free(v);
}

static void write_seed(const char *dir, const char *name, uint8_t mode, const void *data, size_t len) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp) return;
    fputc(mode, fp);
    fwrite(data, 1, len, fp);
    fclose(fp);
}

// With FT_TOK_SEED_DIR set, writes the fuzzer's seeds there (fuzz/seeds/fuzz_tokenizer/):
// texts for each vocabulary and mode, and the two tiny vocabulary files.
TEST(tokenizer_fuzz_seeds) {
    const char *dir = getenv("FT_TOK_SEED_DIR");
    if (!dir) {
        test_skip("FT_TOK_SEED_DIR not set");
        return;
    }
    char name[64];
    for (size_t i = 0; i < FT_ARRAY_LEN(g_texts); i++) {
        for (int vocab = 0; vocab < 12; vocab += 1 + (int)(i % 3)) {
            uint8_t mode = (uint8_t)(vocab | ((i & 1) << 4) | ((i & 2) << 4));
            snprintf(name, sizeof(name), "text-%zu-%d", i, vocab);
            write_seed(dir, name, mode, g_texts[i], strlen(g_texts[i]));
        }
    }
    static const char special[] = "<|im_start|>user\nhi [PAD151650]<|im_end|>\n<s></s>";
    write_seed(dir, "special", 0x20, special, sizeof(special) - 1);
    static const char chat[] = "\x02You are terse.\0\x05Hello <|im_end|>\0\x83Hi there\0\x05  more  ";
    for (int t = 0; t < 8; t++) {
        snprintf(name, sizeof(name), "chat-%d", t);
        write_seed(dir, name, (uint8_t)(0x40 | 0x20 | t), chat, sizeof(chat) - 1);
    }
    static const char bad[] = "\xff\xc3(\xed\xa0\x80\xf0\x9f\x98 \xc0\x80\xf4\x90\x80\x80";
    write_seed(dir, "invalid-bpe", 0x00, bad, sizeof(bad) - 1);
    write_seed(dir, "invalid-spm", 0x03, bad, sizeof(bad) - 1);
    const char *files[] = {"tiny-bpe.gguf", "tiny-spm.gguf"};
    write_tiny_bpe(test_path(files[0]), "gpt-4o");
    write_tiny_spm(test_path(files[1]));
    for (int i = 0; i < 2; i++) {
        size_t len;
        char *data = fixture_read_file(test_path(files[i]), &len);
        REQUIRE(data);
        snprintf(name, sizeof(name), "vocab-%s", files[i]);
        write_seed(dir, name, 0x80, data, len);
        free(data);
    }
}
