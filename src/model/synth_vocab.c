// synth_vocab.c: a small byte-level BPE vocabulary built into ft, for the demo model.
//
// Tokens 0..255 are the 256 bytes in GPT-2's byte-to-unicode mapping (so every text encodes),
// then one token per merge, then the special tokens. The merges build each word of a short
// list from left to right ("Ġ t" -> "Ġt", "Ġt h" -> "Ġth", ...), a valid BPE merge table in
// which every merge result is a token.
#include "synth_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_words[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its",
    "may", "these", "what", "them", "than", "some", "him", "time", "into", "only", "do", "such",
    "my", "new", "about", "out", "also", "two", "any", "up", "first", "could", "our", "then",
    "most", "see", "me", "should", "after", "said", "your", "very", "between", "many", "made",
    "model", "expert", "token", "hello", "world", "cache", "memory", "fast", "return", "int",
    "void", "def", "function", "const", "class", "import", "print", "while", "else", "true",
    "false", "null", "self", "value", "data", "file", "list", "string", "number", "user",
    "assistant", "system", "question", "answer", "think", "why", "how", "where", "here",
};

// The code point GPT-2's byte-level BPE uses for byte b.
static unsigned byte_to_codepoint(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    unsigned n = 0; // index among the bytes that are remapped
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) n++;
    return 256 + n;
}

static size_t utf8_put(char *out, unsigned cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2; // every code point here is below 0x800
}

// Byte-level spelling of bytes s[0..n): each byte as its mapped code point.
static char *byte_level(const char *s, size_t n) {
    char *out = ft_malloc(2 * n + 1), *p = out;
    for (size_t i = 0; i < n; i++) p += utf8_put(p, byte_to_codepoint((unsigned char)s[i]));
    *p = 0;
    return out;
}

typedef struct {
    char **items;
    int64_t n, cap;
} str_list;

static int64_t list_find(const str_list *l, const char *s) {
    for (int64_t i = 0; i < l->n; i++)
        if (!strcmp(l->items[i], s)) return i;
    return -1;
}

static void list_push(str_list *l, char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 512;
        l->items = ft_realloc(l->items, (size_t)l->cap * sizeof(char *));
    }
    l->items[l->n++] = s;
}

// Qwen2's own chat template, byte for byte, so the tokenizer recognises it (as "qwen2").
static const char g_chatml_template[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

int64_t synth_vocab_write_builtin(gguf_writer *w) {
    str_list tokens = {0}, merges = {0};
    for (unsigned b = 0; b < 256; b++) {
        char *t = ft_malloc(3);
        t[utf8_put(t, byte_to_codepoint(b))] = 0;
        list_push(&tokens, t);
    }
    for (size_t i = 0; i < FT_ARRAY_LEN(g_words); i++) {
        // " word": the space is part of the word, as GPT-2-style pre-tokenizers split it
        char word[64];
        size_t n = (size_t)snprintf(word, sizeof(word), " %s", g_words[i]);
        char *prefix = byte_level(word, 1);
        for (size_t k = 1; k < n; k++) {
            char *next = byte_level(word + k, 1);
            char *joined = byte_level(word, k + 1);
            if (list_find(&tokens, joined) < 0) {
                size_t ml = strlen(prefix) + 1 + strlen(next) + 1;
                char *merge = ft_malloc(ml);
                snprintf(merge, ml, "%s %s", prefix, next);
                list_push(&merges, merge);
                list_push(&tokens, joined);
            } else {
                free(joined);
            }
            free(prefix);
            free(next);
            prefix = byte_level(word, k + 1);
        }
        free(prefix);
    }
    static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                           "<think>", "</think>"};
    int64_t first_special = tokens.n;
    for (size_t i = 0; i < FT_ARRAY_LEN(specials); i++) list_push(&tokens, ft_strdup(specials[i]));

    int32_t *types = ft_malloc((size_t)tokens.n * sizeof(int32_t));
    for (int64_t i = 0; i < tokens.n; i++) types[i] = 1;           // normal
    for (int64_t i = first_special; i < first_special + 3; i++) types[i] = 3; // control
    types[first_special + 3] = types[first_special + 4] = 4;        // user-defined

    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens.items, (uint64_t)tokens.n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, types, (uint64_t)tokens.n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges.items, (uint64_t)merges.n);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)first_special + 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)first_special);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)first_special);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_writer_set_str(w, "tokenizer.chat_template", g_chatml_template);

    int64_t n = tokens.n;
    for (int64_t i = 0; i < tokens.n; i++) free(tokens.items[i]);
    for (int64_t i = 0; i < merges.n; i++) free(merges.items[i]);
    free(tokens.items);
    free(merges.items);
    free(types);
    return n;
}
