// spm.c: SentencePiece (BPE by token score), as llama.cpp runs it for Llama 2 / Mistral GGUFs.
//
// Spaces become "▁" (U+2581), with one added in front where the vocabulary asks for a prefix
// space. The text is split into one symbol per UTF-8 sequence, and the adjacent pair whose
// concatenation is the highest-scoring token is merged first (leftmost on ties), until no pair
// forms a token. A final symbol that is not a token falls back to the byte tokens <0xXX> of its
// bytes. No pre-tokenizer: the whole fragment is one word.
#include "tok_impl.h"

#include <string.h>

static void add_pair(const tok_vocab *v, tok_scratch *s, const char *w, size_t *n_heap,
                     int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const tok_symbol *sym = s->sym;
    uint32_t size = sym[left].n + sym[right].n; // left and right are adjacent in the buffer
    tok_id id = vocab_lookup(v, w + sym[left].off, size);
    if (id == TOK_NULL) return;
    bigram_push(s, n_heap, (tok_bigram){-(double)v->scores[id], left, right, size});
}

void spm_encode_fragment(const tok_vocab *v, const char *text, size_t len, bool prefix_space,
                         tok_scratch *s, tok_ids *out) {
    // escape: ' ' -> "▁"
    tok_grow((void **)&s->word, &s->cap_word, 3 * (len + 1) + 1, 1);
    char *w = s->word;
    size_t n = 0;
    if (prefix_space) {
        memcpy(w + n, "\xE2\x96\x81", 3);
        n += 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(w + n, "\xE2\x96\x81", 3);
            n += 3;
        } else {
            w[n++] = text[i];
        }
    }

    int32_t n_sym = symbols_merge_all(v, s, w, n, add_pair);
    const tok_symbol *sym = s->sym;
    for (int32_t i = 0; i != -1 && n_sym > 0; i = sym[i].next) {
        tok_id id = vocab_lookup(v, w + sym[i].off, sym[i].n);
        if (id != TOK_NULL) {
            tok_ids_push(out, id);
            continue;
        }
        // byte fallback; a vocabulary without the byte token gets UNK there (llama.cpp aborts)
        for (uint32_t k = 0; k < sym[i].n; k++) {
            tok_id b = v->byte_tok[(uint8_t)w[sym[i].off + k]];
            if (b == TOK_NULL) b = v->unk;
            if (b != TOK_NULL) tok_ids_push(out, b);
        }
    }
}
