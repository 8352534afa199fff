// bpe.c: BPE, one word at a time.
//
// Each word from the pre-tokenizer is written in the byte-level alphabet (every byte one code
// point), split into one symbol per character, and adjacent symbols are merged by the rank of
// the pair in tokenizer.ggml.merges, lowest rank first (leftmost on ties), until no pair has a
// rank. Each final symbol is a token; one that is not (possible only with unusual vocabularies)
// is replaced by the tokens of its single bytes, and bytes without a token are dropped, as
// llama.cpp does. With ignore_merges (Llama 3) a word that is a token is taken whole.
// SentencePiece-style BPE (Gemma 4, pretok_def.spm_bpe) writes a word in UTF-8 itself, each ' '
// as "▁", takes a word of newlines that is a token whole, and spells a byte as "<0xXX>".
#include "tok_impl.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// The merge queue (a binary heap), shared with spm.c

static bool before(const tok_bigram *a, const tok_bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

void bigram_push(tok_scratch *s, size_t *n, tok_bigram b) {
    tok_grow(&s->heap, &s->cap_heap, *n + 1, sizeof(tok_bigram));
    tok_bigram *h = s->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&b, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = b;
}

tok_bigram bigram_pop(tok_scratch *s, size_t *n) {
    tok_bigram *h = s->heap;
    tok_bigram top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && before(&h[c + 1], &h[c])) c++;
        if (!before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

int32_t symbols_split(tok_scratch *s, const char *buf, size_t len) {
    tok_grow(&s->sym, &s->cap_sym, len + 1, sizeof(tok_symbol));
    tok_symbol *sym = s->sym;
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t k = FT_MIN((size_t)utf8_lead_len((uint8_t)buf[off]), len - off);
        sym[n] = (tok_symbol){n - 1, off + k == len ? -1 : n + 1, (uint32_t)off, (uint32_t)k};
        off += k;
        n++;
    }
    return n;
}

bool symbols_merge(tok_symbol *sym, tok_bigram b) {
    tok_symbol *l = &sym[b.left], *r = &sym[b.right];
    // A pair is current while neither side has grown or been merged away: sizes only grow, so
    // an unchanged total means both are as they were.
    if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) return false;
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) sym[r->next].prev = b.left;
    return true;
}

int32_t symbols_merge_all(const tok_vocab *v, tok_scratch *s, const char *w, size_t len,
                          tok_pair_fn add_pair) {
    int32_t n = symbols_split(s, w, len);
    size_t n_heap = 0;
    for (int32_t i = 1; i < n; i++) add_pair(v, s, w, &n_heap, i - 1, i);
    while (n_heap) {
        tok_bigram b = bigram_pop(s, &n_heap);
        if (!symbols_merge(s->sym, b)) continue;
        const tok_symbol *sym = s->sym;
        add_pair(v, s, w, &n_heap, sym[b.left].prev, b.left);
        add_pair(v, s, w, &n_heap, b.left, sym[b.left].next);
    }
    return n;
}

// ---------------------------------------------------------------------------------------------

static void add_pair(const tok_vocab *v, tok_scratch *s, const char *w, size_t *n_heap,
                     int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const tok_symbol *sym = s->sym;
    int32_t rank = vocab_merge_rank(v, w + sym[left].off, sym[left].n, w + sym[right].off,
                                    sym[right].n);
    if (rank < 0) return;
    bigram_push(s, n_heap, (tok_bigram){rank, left, right, sym[left].n + sym[right].n});
}

// The token of byte b where a final symbol is no token: the byte's own character, or in
// SentencePiece-style BPE its "<0xXX>" token.
static tok_id byte_token(const tok_vocab *v, const char *b, bool spm_bpe) {
    if (!spm_bpe) return vocab_lookup(v, b, 1);
    static const char hex[] = "0123456789ABCDEF";
    char name[6] = {'<', '0', 'x', hex[(uint8_t)*b >> 4], hex[(uint8_t)*b & 15], '>'};
    return vocab_lookup(v, name, sizeof(name));
}

static void encode_word(const tok_vocab *v, const char *w, size_t len, tok_scratch *s,
                        tok_ids *out) {
    bool spm_bpe = v->pre.def->spm_bpe;
    // (llama.cpp's fix for Gemma 4: a run of newlines that is a token is one, unmerged)
    if (v->ignore_merges || (spm_bpe && w[0] == '\n')) {
        tok_id id = vocab_lookup(v, w, len);
        if (id != TOK_NULL) {
            tok_ids_push(out, id);
            return;
        }
    }
    int32_t n = symbols_merge_all(v, s, w, len, add_pair);
    const tok_symbol *sym = s->sym;
    for (int32_t i = 0; i != -1 && n > 0; i = sym[i].next) {
        tok_id id = vocab_lookup(v, w + sym[i].off, sym[i].n);
        if (id != TOK_NULL) {
            tok_ids_push(out, id);
            continue;
        }
        for (uint32_t k = 0; k < sym[i].n; k++) {
            tok_id b = byte_token(v, w + sym[i].off + k, spm_bpe);
            if (b != TOK_NULL) tok_ids_push(out, b);
        }
    }
}

void bpe_encode_fragment(const tok_vocab *v, const char *text, size_t len, tok_scratch *s,
                         tok_ids *out) {
    pretok_split(&v->pre, text, len, s);
    bool spm_bpe = v->pre.def->spm_bpe;
    size_t start = 0;
    for (size_t k = 0; k < s->n_words; k++) {
        size_t n = s->words[k];
        // the word's UTF-8, each byte written in the byte-level alphabet (at most 2 bytes each),
        // or (SentencePiece-style) as it is, each ' ' as "▁"
        tok_grow((void **)&s->word, &s->cap_word, 8 * n + 1, 1);
        size_t at = 0;
        for (size_t i = start; i < start + n; i++) {
            char utf8[4];
            int m = utf8_encode(s->cpts[i], utf8);
            if (spm_bpe && s->cpts[i] == ' ') {
                memcpy(s->word + at, "\xE2\x96\x81", 3);
                at += 3;
                continue;
            }
            if (spm_bpe) {
                memcpy(s->word + at, utf8, (size_t)m);
                at += (size_t)m;
                continue;
            }
            for (int j = 0; j < m; j++) {
                int bl;
                const char *bc = gpt2_byte_char((uint8_t)utf8[j], &bl);
                memcpy(s->word + at, bc, (size_t)bl);
                at += (size_t)bl;
            }
        }
        encode_word(v, s->word, at, s, out);
        start += n;
    }
}
