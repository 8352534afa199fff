// fuzz_tokenizer.c: libFuzzer target for the tokenizer.
//
// The first input byte picks the mode:
//   - bit 7 clear: the rest is text, tokenized with one of the vocabularies (byte % N_VOCABS:
//     the four of ../shared/vocab, and the Qwen2 vocabulary under every other pre-tokenizer),
//     bit 4 = add_special, bit 5 = parse_special. Every id must be in range; detokenizing and
//     streaming must work; and where the tokenizer is lossless the pieces give the text back:
//     BPE on valid UTF-8, SPM on valid UTF-8 without "▁" or '<' (after its prefix space).
//   - bit 7 set: the rest is a GGUF file, loaded as a vocabulary (untrusted metadata); if it
//     loads, a few strings are tokenized and every token decoded.
//   - bit 6 set (bit 7 clear): the rest is a conversation, messages separated by NUL bytes, the
//     first byte of each naming its role; rendered with chat template (byte % TOK_CHAT_COUNT):
//     the segments must cover the text exactly, and tokenize.
// Vocabularies come from $FT_SHARED/vocab (default ../shared/vocab). Seeds:
// fuzz/seeds/fuzz_tokenizer/ (written by the tokenizer_fuzz_seeds test with FT_TOK_SEED_DIR).
#include "../src/gguf/gguf.h"
#include "../src/tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const g_shared[] = {"qwen2", "llama-bpe", "gpt-2", "llama-spm"};
static const char *const g_pres[] = {"qwen35", "llama3", "deepseek-llm", "deepseek-coder",
                                     "deepseek-v3", "gpt-4o", "laguna", "default"};
#define N_VOCABS (sizeof(g_shared) / sizeof(g_shared[0]) + sizeof(g_pres) / sizeof(g_pres[0]))

static tok_vocab *g_vocabs[N_VOCABS];

static tok_vocab *load_path(const char *path) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    tok_vocab *v = f ? tok_vocab_load(f, &err) : NULL;
    gguf_close(f);
    if (!v) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, err.msg);
        abort();
    }
    return v;
}

// The Qwen2 vocabulary with another pre-tokenizer, through a temporary file.
static tok_vocab *load_with_pre(const char *qwen2_path, const char *pre) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open(qwen2_path, &err);
    if (!f) abort();
    gguf_writer *w = gguf_writer_init();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) gguf_writer_copy_kv(w, f, i);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    char path[256];
    snprintf(path, sizeof(path), "/tmp/fuzz_tokenizer-%d-%s.gguf", (int)getpid(), pre);
    if (!gguf_writer_begin(w, path, &err) || !gguf_writer_finish(w, &err)) abort();
    gguf_writer_free(w);
    gguf_close(f);
    tok_vocab *v = load_path(path);
    unlink(path);
    return v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *shared = getenv("FT_SHARED");
    if (!shared) shared = "../shared";
    char path[1024];
    size_t k = 0;
    for (size_t i = 0; i < sizeof(g_shared) / sizeof(g_shared[0]); i++) {
        snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf", shared, g_shared[i]);
        g_vocabs[k++] = load_path(path);
    }
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-qwen2.gguf", shared);
    for (size_t i = 0; i < sizeof(g_pres) / sizeof(g_pres[0]); i++)
        g_vocabs[k++] = load_with_pre(path, g_pres[i]);
    return 0;
}

// Strict UTF-8 (no overlong forms, surrogates or values above U+10FFFF).
static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        size_t len = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3
                                  : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        if (len == 3 && b == 0xE0 && s[i + 1] < 0xA0) return false;
        if (len == 3 && b == 0xED && s[i + 1] > 0x9F) return false;
        if (len == 4 && b == 0xF0 && s[i + 1] < 0x90) return false;
        if (len == 4 && b == 0xF4 && s[i + 1] > 0x8F) return false;
        i += len;
    }
    return true;
}

static void exercise_decoding(const tok_vocab *v, const tok_ids *ids) {
    for (int m = 0; m < 4; m++) {
        size_t len;
        char *s = tok_detokenize(v, ids->ids, ids->n, m & 1, m & 2, &len);
        if (strlen(s) > len) abort(); // NUL-terminated at len
        free(s);
    }
    tok_stream st;
    tok_stream_init(&st, v, true);
    for (size_t i = 0; i < ids->n; i++) {
        size_t len;
        const char *p = tok_stream_push(&st, ids->ids[i], &len);
        if (!valid_utf8((const uint8_t *)p, len)) abort();
    }
    size_t len;
    const char *p = tok_stream_flush(&st, &len);
    if (!valid_utf8((const uint8_t *)p, len)) abort();
    tok_stream_free(&st);
}

static void fuzz_text(const tok_vocab *v, const uint8_t *data, size_t size, bool add_special,
                      bool parse_special) {
    tok_ids ids = {0};
    tok_encode(v, (const char *)data, size, add_special, parse_special, &ids);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= tok_n_tokens(v)) abort();
    exercise_decoding(v, &ids);

    // round trip where lossless
    bool spm = tok_vocab_kind(v) == TOK_KIND_SPM;
    bool check = !add_special && valid_utf8(data, size);
    if (spm && check)
        check = !memchr(data, '<', size) && !memmem(data, size, "\xE2\x96\x81", 3);
    if (check) {
        char *back = malloc(size + 2);
        size_t n = 0;
        for (size_t i = 0; i < ids.n; i++) {
            size_t len;
            const char *p = tok_piece(v, ids.ids[i], true, &len);
            if (n + len > size + 1) abort();
            memcpy(back + n, p, len);
            n += len;
        }
        size_t skip = spm && size ? 1 : 0; // SPM's prefix space
        if (n != size + skip || (skip && back[0] != ' ') || memcmp(back + skip, data, size)) abort();
        free(back);
    }
    tok_ids_free(&ids);
}

static void fuzz_vocab_file(const uint8_t *data, size_t size) {
    ft_err err;
    gguf_file *f = gguf_open_buffer(data, size, &err);
    if (!f) return;
    tok_vocab *v = tok_vocab_load(f, &err);
    gguf_close(f);
    if (!v) return;
    static const char *const texts[] = {"Hello world", " <|im_start|>x\n\n 123 🦙", "\xff\xc3", ""};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        tok_ids ids = {0};
        tok_encode(v, texts[i], strlen(texts[i]), i & 1, true, &ids);
        for (size_t k = 0; k < ids.n; k++)
            if (ids.ids[k] < 0 || ids.ids[k] >= tok_n_tokens(v)) abort();
        exercise_decoding(v, &ids);
        tok_ids_free(&ids);
    }
    for (tok_id id = 0; id < tok_n_tokens(v); id++) {
        size_t len;
        tok_piece(v, id, true, &len);
        if (len > tok_max_piece_len(v)) abort();
    }
    tok_vocab_free(v);
}

static void fuzz_chat(enum tok_chat_template t, const uint8_t *data, size_t size, bool gen) {
    static const char *const roles[] = {"user", "assistant", "system", "tool", "other"};
    char *copy = malloc(size + 1);
    memcpy(copy, data, size);
    copy[size] = 0;
    tok_chat_msg msgs[16];
    size_t n = 0;
    for (char *p = copy; p < copy + size && n < 16; p += strlen(p) + 1) {
        const char *role = roles[(uint8_t)p[0] % 5];
        bool reasoning = p[0] && ((uint8_t)p[0] & 0x80);
        msgs[n++] =
            (tok_chat_msg){.role = role, .content = p[0] ? p + 1 : p, .reasoning = reasoning ? "why" : NULL};
    }
    tok_chat_params prm = tok_chat_default_params(g_vocabs[0]);
    prm.add_generation_prompt = gen;
    prm.enable_thinking = !gen;
    tok_chat_prompt out;
    ft_err err;
    if (tok_chat_render(t, msgs, n, prm, &out, &err)) {
        size_t at = 0;
        for (size_t i = 0; i < out.n_segs; i++) {
            if (out.segs[i].text != out.text + at) abort();
            at += out.segs[i].len;
        }
        if (at != out.len || strlen(out.text) > out.len) abort();
        tok_ids ids = {0};
        tok_encode_segments(g_vocabs[0], out.segs, out.n_segs, false, &ids);
        tok_ids_free(&ids);
        tok_chat_prompt_free(&out);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    if (mode & 0x80) fuzz_vocab_file(data + 1, size - 1);
    else if (mode & 0x40) fuzz_chat((enum tok_chat_template)(mode % TOK_CHAT_COUNT), data + 1, size - 1, mode & 0x20);
    else fuzz_text(g_vocabs[mode % N_VOCABS], data + 1, size - 1, mode & 0x10, mode & 0x20);
    return 0;
}
