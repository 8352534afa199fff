// tok_impl.h: structures shared by the files of src/tokenizer/ (not for use outside it).
#ifndef FT_TOK_IMPL_H
#define FT_TOK_IMPL_H

#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

// ---------------------------------------------------------------------------------------------
// unicode.c: code points as llama.cpp's pre-tokenizers see them

// General category of a code point (one bit), as in Unicode 15.1, the version of llama.cpp's
// tables; UCAT_UNDEFINED for unassigned code points.
enum {
    UCAT_UNDEFINED = 0x01,
    UCAT_NUMBER = 0x02,    // \p{N}
    UCAT_LETTER = 0x04,    // \p{L}
    UCAT_SEPARATOR = 0x08, // \p{Z}
    UCAT_MARK = 0x10,      // \p{M}
    UCAT_PUNCT = 0x20,     // \p{P}
    UCAT_SYMBOL = 0x40,    // \p{S}
    UCAT_CONTROL = 0x80,   // \p{C} other than Cn
    UCAT_MASK = 0xFF,
    UFLAG_WHITESPACE = 0x100, // the White_Space property (\s in llama.cpp's splitters)
};

// Category bits | UFLAG_WHITESPACE of a code point. Thread-safe; the first call for a block of
// code points classifies the block (with PCRE2's Unicode tables).
uint16_t ucp_flags(uint32_t cpt);

// Decodes the code point at s[*i] (*i < n) the way llama.cpp does and advances *i: a lead byte
// with its continuation bytes gives their value (overlong forms included); anything else is
// U+FFFD for one byte. Values above U+10FFFF (where llama.cpp aborts) are U+FFFD too.
uint32_t utf8_decode_lenient(const uint8_t *s, size_t n, size_t *i);
// Encodes any value below 0x110000 (surrogates included, as llama.cpp does); returns 1..4.
int utf8_encode(uint32_t cpt, char out[4]);
// Length of a UTF-8 sequence from its lead byte alone (llama.cpp's unicode_len_utf8).
int utf8_lead_len(uint8_t b);

// The byte-level BPE alphabet: each byte is written as one code point (printable Latin-1
// characters as themselves, the rest from U+0100 on). Returns its UTF-8 (1 or 2 bytes).
const char *gpt2_byte_char(uint8_t b, int *len);
// The byte a code point of that alphabet stands for, or -1.
int gpt2_char_byte(uint32_t cpt);

// ---------------------------------------------------------------------------------------------
// pretok.c: pre-tokenizers (splitting text into words before BPE)

enum pretok_kind {
    PRETOK_END = 0,  // end of the step list
    PRETOK_GPT2,     // hand-written splitters, as llama.cpp runs them for these patterns
    PRETOK_LLAMA3,
    PRETOK_QWEN2,
    PRETOK_QWEN35,
    PRETOK_NEWLINES, // runs of '\n' and runs of anything else
    PRETOK_REGEX,    // a regular expression, run as llama.cpp runs it with std::regex
};

#define PRETOK_MAX_STEPS 6

typedef struct pretok_step {
    enum pretok_kind kind;
    const char *regex; // the pattern (for PRETOK_REGEX; documentation for the others)
} pretok_step;

typedef struct pretok_def {
    const char *names; // '|'-separated tokenizer.ggml.pre values
    pretok_step steps[PRETOK_MAX_STEPS];
    bool clean_spaces;  // detokenizer clean-up (" ," -> ",")
    bool ignore_merges; // a word that is a token is taken whole
    bool add_bos;       // default of add_bos_token
    bool no_bos;        // BOS id defaults to none (chatglm)
    // SentencePiece-style BPE (Gemma 4): words in raw UTF-8 with each ' ' written "▁" instead of
    // the byte-level alphabet, a word of newlines that is a token taken whole, a byte without a
    // token of its own as "<0xXX>"; BOS always added; pieces with "▁" read as ' '
    bool spm_bpe;
} pretok_def;

// A compiled step: PCRE2 code for PRETOK_REGEX.
typedef struct pretok_compiled {
    const pretok_def *def;
    pcre2_code *re[PRETOK_MAX_STEPS];
    bool collapsed[PRETOK_MAX_STEPS]; // run on the one-byte-per-code-point category text
} pretok_compiled;

// The definition for a tokenizer.ggml.pre value, or NULL.
const pretok_def *pretok_find(const char *name);
// Compiles the regex steps. False and *err if PCRE2 rejects one (a bug in the table).
bool pretok_compile(pretok_compiled *pc, const pretok_def *def, ft_err *err);
void pretok_release(pretok_compiled *pc);

// Growable scratch reused across the words of one encode call.
typedef struct tok_scratch {
    uint32_t *cpts;   // code points of the fragment
    size_t n_cpts, cap_cpts;
    size_t *words;    // word lengths in code points
    size_t n_words, cap_words;
    size_t *tmp;      // second offsets buffer
    size_t cap_tmp;
    char *bytes;      // text buffers
    size_t cap_bytes;
    size_t *byte_off; // code point index -> byte offset in bytes (regex on UTF-8)
    size_t cap_byte_off;
    char *word;       // one word, byte-level encoded
    size_t cap_word;
    void *sym;        // bpe.c / spm.c symbols and heap
    size_t cap_sym;
    void *heap;
    size_t cap_heap;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
} tok_scratch;

void tok_scratch_free(tok_scratch *s);

// Splits text into words: fills s->cpts (the decoded code points) and s->words (the length of
// each word in code points, in order, covering all of s->cpts).
void pretok_split(const pretok_compiled *pc, const char *text, size_t len, tok_scratch *s);

// ---------------------------------------------------------------------------------------------
// vocab.c: the vocabulary

typedef struct tok_strmap {
    uint32_t *slots; // id + 1, 0 = empty
    uint32_t *hashes;
    uint32_t mask;
} tok_strmap;

struct tok_vocab {
    enum tok_kind kind;
    char pre_name[64];
    pretok_compiled pre; // BPE only
    int32_t n_tokens;

    char *text;          // all token texts, back to back
    uint64_t *text_off;  // (n_tokens + 1)
    float *scores;       // (n_tokens)
    uint32_t *attr;      // (n_tokens) enum tok_attr bits
    tok_strmap by_text;  // text -> id

    // BPE merges: "left right" -> rank (the index of its first occurrence)
    char *merges;        // all merge strings, back to back
    uint64_t *merge_off; // (n_merges + 1)
    uint32_t *merge_split; // (n_merges) length of the left part
    uint32_t n_merges;
    uint32_t *merge_slots; // rank + 1, 0 = empty
    uint32_t merge_mask;

    // pieces (token_to_piece with special = true)
    char *piece;
    uint64_t *piece_off; // (n_tokens + 1)
    size_t max_piece;

    tok_id bos, eos, eot, eom, unk, sep, pad, mask;
    char *bos_text, *eos_text; // NUL-terminated copies ("" if none), for chat templates
    tok_id fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    uint8_t *eog;        // (n_tokens) 1 = ends generation

    tok_id *specials;    // control / user-defined / unknown tokens, longest text first
    int32_t n_specials;
    tok_id byte_tok[256]; // SPM byte fallback tokens, TOK_NULL where absent

    bool add_bos, add_eos, add_space_prefix, clean_spaces, ignore_merges;
};

static inline const char *vocab_text(const tok_vocab *v, tok_id id, size_t *len) {
    *len = (size_t)(v->text_off[id + 1] - v->text_off[id]);
    return v->text + v->text_off[id];
}

// Exact-text lookup, TOK_NULL if absent.
tok_id vocab_lookup(const tok_vocab *v, const char *s, size_t len);
// Rank of the merge (left, right), -1 if absent.
int32_t vocab_merge_rank(const tok_vocab *v, const char *l, size_t ll, const char *r, size_t rl);
// 64-bit FNV-1a, the hash of the maps.
uint64_t tok_hash(const char *s, size_t len, uint64_t h);
#define TOK_HASH_SEED 0xcbf29ce484222325ull

// decode.c: fills v->piece / piece_off / max_piece from the texts and attributes.
void vocab_build_pieces(tok_vocab *v);

// ---------------------------------------------------------------------------------------------
// bpe.c / spm.c: tokenize one raw-text fragment (no special tokens in it), appending ids.

void bpe_encode_fragment(const tok_vocab *v, const char *text, size_t len, tok_scratch *s,
                         tok_ids *out);
// SPM: prefix_space puts a space before the text (llama.cpp: at the start and after a special
// token, where add_space_prefix).
void spm_encode_fragment(const tok_vocab *v, const char *text, size_t len, bool prefix_space,
                         tok_scratch *s, tok_ids *out);

// The merge loop shared by BPE and SPM: symbols in a linked list over one buffer, and a
// priority queue of candidate merges (smallest key first, then leftmost).
typedef struct tok_symbol {
    int32_t prev, next;
    uint32_t off, n; // bytes of the buffer; n = 0 once merged into the left neighbour
} tok_symbol;

typedef struct tok_bigram {
    double key; // BPE: merge rank; SPM: minus the token score
    int32_t left, right;
    uint32_t size; // bytes of the merged pair when queued (stale entries no longer match)
} tok_bigram;

void bigram_push(tok_scratch *s, size_t *n, tok_bigram b);
tok_bigram bigram_pop(tok_scratch *s, size_t *n);
// Splits buf[0..len) into one symbol per UTF-8 sequence (by lead byte, llama.cpp's way) in
// s->sym; returns their number.
int32_t symbols_split(tok_scratch *s, const char *buf, size_t len);
// Merges the pair of a popped bigram if it is still current; true if it did.
bool symbols_merge(tok_symbol *sym, tok_bigram b);

// Queues the pair (left, right) of word w if it may merge (BPE: it has a rank; SPM: it forms a
// token); either index may be -1 (no neighbour).
typedef void (*tok_pair_fn)(const tok_vocab *v, tok_scratch *s, const char *w, size_t *n_heap,
                            int32_t left, int32_t right);
// Splits w[0..len) into symbols and merges adjacent pairs, best queued first, until none is
// left; the result is the linked list s->sym from index 0. Returns the number of symbols split.
int32_t symbols_merge_all(const tok_vocab *v, tok_scratch *s, const char *w, size_t len,
                          tok_pair_fn add_pair);

// encode.c
void tok_ids_push(tok_ids *t, tok_id id);

// Ensures *buf holds at least n elements of size elem (grows geometrically).
void tok_grow(void **buf, size_t *cap, size_t n, size_t elem);

#endif
