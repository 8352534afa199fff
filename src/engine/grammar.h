// grammar: constrained decoding. A context-free grammar over bytes, a matcher that follows
// generated text through it, and the mask of the vocabulary's tokens that may come next.
//
//   ft_gb (grammar.c)         builds a grammar: rules of alternatives, each a sequence of
//                             symbols (a set of bytes, or a rule). Character classes over code
//                             points are compiled into their UTF-8 byte sequences, so the
//                             matcher works on bytes and a token that ends inside a character
//                             is simply a state in the middle of one. Finishing checks it (rules
//                             defined, no left recursion, limits) into an immutable ft_grammar.
//   GBNF (gbnf.c)             llama.cpp's grammar text format, parsed into a builder.
//   JSON Schema (json_schema.h) compiles a schema into rules of a builder.
//   ft_grammar_matcher        (grammar_match.c) follows bytes through a grammar: a pushdown
//                             automaton whose state is a set of stacks of grammar positions.
//                             Stacks are hash-consed and states interned, and the transitions of
//                             a state are computed once, on first use: a lazily built DFA over
//                             the pushdown's reachable configurations, so following a byte is a
//                             table lookup once a state was seen. Bounded memory: past its budget
//                             the memo is dropped between tokens (the current state kept).
//   ft_grammar_vocab + mask   (token_mask.c) the vocabulary as a trie of the tokens' bytes in
//                             preorder; the mask of a state walks it with the DFA, skipping
//                             every subtree whose prefix dies, and is cached per state (states
//                             repeat: inside a string every character leads back to the same
//                             one). End-of-generation tokens are allowed where the grammar may
//                             end.
//   ft_grammar_ref            (grammar_ref.c) the plain reference: llama.cpp-style explicit
//                             stacks, nothing cached, for tests and fuzzing.
//
// Memory: a grammar and a vocabulary are immutable once built and may be shared by threads; a
// matcher belongs to one sequence (one thread) and owns its memo. Nothing here asserts on its
// input: limits and bad grammars come back as errors.
#ifndef FT_GRAMMAR_H
#define FT_GRAMMAR_H

#include "../tokenizer/tokenizer.h"
#include "../util/util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ft_grammar ft_grammar;

// ---------------------------------------------------------------------------------------------
// Building

typedef struct ft_gb ft_gb;

// One symbol of an alternative: a set of bytes (matches one byte in it) or a rule.
enum ft_gsym_kind { FT_GSYM_BYTES = 1, FT_GSYM_RULE = 2 };
typedef struct ft_gsym {
    uint32_t kind; // enum ft_gsym_kind
    uint32_t id;   // the byte set's or the rule's index in the builder
} ft_gsym;

// A growable sequence of symbols (zero-initialise; ft_gseq_free releases it).
typedef struct ft_gseq {
    ft_gsym *s;
    int n, cap;
} ft_gseq;
void ft_gseq_push(ft_gseq *q, ft_gsym x);
void ft_gseq_free(ft_gseq *q);

// Limits of one grammar: past them the builder fails (ft_gb_finish says which).
#define FT_GRAMMAR_MAX_SYMS (1 << 22) // symbols over all alternatives
#define FT_GRAMMAR_MAX_RULES (1 << 20)
#define FT_GRAMMAR_MAX_REPEAT 10000   // the largest bound of x{m,n}

ft_gb *ft_gb_init(void);
void ft_gb_free(ft_gb *b); // NULL is a no-op

// The rule called name (GBNF): created with no alternatives when new.
int ft_gb_named(ft_gb *b, const char *name, size_t len);
// Whether the named rule was given alternatives (GBNF: redefinition).
bool ft_gb_has_alts(const ft_gb *b, int rule);
// A new rule named from hint ("hint-3"), with no alternatives yet.
int ft_gb_rule(ft_gb *b, const char *hint);
// Appends an alternative (copied) to rule; n may be 0 (the empty string).
void ft_gb_alt(ft_gb *b, int rule, const ft_gsym *syms, int n);
ft_gsym ft_gb_ref(int rule);

// Terminals. A set of bytes (bit b of set[b / 64]); one byte; the bytes of a literal, one
// symbol each, appended to q.
ft_gsym ft_gb_bytes(ft_gb *b, const uint64_t set[4]);
ft_gsym ft_gb_byte(ft_gb *b, uint8_t c);
void ft_gb_lit(ft_gb *b, ft_gseq *q, const char *s, size_t n);
// One character (code point, UTF-8 encoded) in the classes' ranges (pairs lo, hi, inclusive),
// or, with negate, outside them. Surrogates (U+D800..DFFF) and code points above U+10FFFF never
// match: only valid UTF-8 comes out. Returns a byte set where every match is one byte, else a
// rule of the byte sequences.
ft_gsym ft_gb_chars(ft_gb *b, const uint32_t *ranges, int n_pairs, bool negate);
// The sequence x[0..n) repeated min to max times (max < 0: without bound), as a symbol (a new
// rule; hint names it). A bound above FT_GRAMMAR_MAX_REPEAT fails the builder.
ft_gsym ft_gb_repeat(ft_gb *b, const ft_gsym *x, int n, int min, int max, const char *hint);
// The sequence x[0..n) as one symbol (itself when n == 1, else a new rule).
ft_gsym ft_gb_group(ft_gb *b, const ft_gsym *x, int n, const char *hint);

// Makes the builder fail with this message (the first one stays).
void ft_gb_fail(ft_gb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool ft_gb_failed(const ft_gb *b);
const char *ft_gb_error(const ft_gb *b); // the failure's message ("" if none)

// Checks the rules reachable from root (each has an alternative; no rule reaches itself
// without consuming a byte: left recursion) and freezes them, leaving out the alternatives that
// derive no string (a symbol of no byte, a rule that never ends), so that every prefix the
// matcher takes can be completed. Returns NULL and sets *err on a failure of the builder or of
// these checks (naming the rule), or when root derives no string. The builder stays the caller's.
ft_grammar *ft_gb_finish(ft_gb *b, int root, ft_err *err);

void ft_grammar_free(ft_grammar *g); // NULL is a no-op
size_t ft_grammar_n_symbols(const ft_grammar *g);

// Adds the rules of a GBNF text (below) to b, their names shared with ft_gb_named (a rule
// another part of the grammar refers to by name). Returns false and sets *err ("line L, column
// C: what") on a syntax error or a rule defined twice (in the text or before it).
bool ft_gb_gbnf(ft_gb *b, const char *text, size_t len, ft_err *err);

// A grammar in llama.cpp's GBNF: `name ::= alternatives` rules, "literals", [classes] with
// ranges and ^, `.`, ( groups ), * + ? {m} {m,} {m,n}, # comments; rule "root" starts. Returns
// NULL and sets *err ("line L, column C: what") on a syntax error, an undefined or redefined
// rule, left recursion or a limit. Token references (<[id]>) are refused.
ft_grammar *ft_grammar_parse_gbnf(const char *text, size_t len, ft_err *err);

// ---------------------------------------------------------------------------------------------
// Vocabulary

typedef struct ft_grammar_vocab ft_grammar_vocab;

// The model's tokens as the grammar sees them: each token's bytes as generation emits them
// (tok_piece without special rendering); tokens with no bytes (control tokens) are never
// allowed, end-of-generation tokens only where the grammar may end. n_vocab: the model's
// vocabulary (ids from tok_n_tokens(v) on are never allowed).
ft_grammar_vocab *ft_grammar_vocab_init(const tok_vocab *v, int n_vocab);
// The same from explicit pieces (tests, fuzzing): token i has len[i] bytes at piece[i]; eog[i]
// marks an end-of-generation token (its bytes are then ignored).
ft_grammar_vocab *ft_grammar_vocab_from_pieces(int n_vocab, const char *const *piece, const size_t *len,
                                               const bool *eog);
void ft_grammar_vocab_free(ft_grammar_vocab *gv); // NULL is a no-op
int ft_grammar_vocab_n(const ft_grammar_vocab *gv);
// Trie nodes (for the benchmark's report).
size_t ft_grammar_vocab_n_nodes(const ft_grammar_vocab *gv);

// ---------------------------------------------------------------------------------------------
// Matcher

typedef struct ft_grammar_matcher ft_grammar_matcher;

typedef struct ft_grammar_matcher_params {
    size_t memo_bytes; // the memo's budget (states, transitions, cached masks) before it is dropped
} ft_grammar_matcher_params;
ft_grammar_matcher_params ft_grammar_matcher_default_params(void); // 64 MiB

// A matcher at the grammar's start. v may be NULL for a matcher fed bytes only (no tokens, no
// masks). g and v must outlive it.
ft_grammar_matcher *ft_grammar_matcher_init(const ft_grammar *g, const ft_grammar_vocab *v,
                                            const ft_grammar_matcher_params *p);
void ft_grammar_matcher_free(ft_grammar_matcher *m); // NULL is a no-op

// Whether the grammar allows token tok next (an end-of-generation token: whether it may end
// here). False after a failure.
bool ft_grammar_matcher_allows(ft_grammar_matcher *m, int32_t tok);
// Advances over tok if allowed (an end-of-generation token leaves the state as it is); returns
// false, the state unchanged, if not.
bool ft_grammar_matcher_accept(ft_grammar_matcher *m, int32_t tok);
// Advances over bytes if the grammar allows all of them; returns false, the state unchanged, if
// not.
bool ft_grammar_matcher_feed(ft_grammar_matcher *m, const void *bytes, size_t n);
// Whether ft_grammar_matcher_feed would take bytes (the state stays as it is).
bool ft_grammar_matcher_allows_bytes(ft_grammar_matcher *m, const void *bytes, size_t n);
// The grammar may end here / nothing but the end may follow.
bool ft_grammar_matcher_accepting(const ft_grammar_matcher *m);
bool ft_grammar_matcher_done(const ft_grammar_matcher *m);
// The tokens allowed next: a bitset of ft_grammar_vocab_n bits (bit t of word t / 64), valid
// until the matcher changes. NULL after a failure.
const uint64_t *ft_grammar_matcher_mask(ft_grammar_matcher *m);
// Whether a limit was hit (more than 65,536 stacks in one state, more than 2^25 expansion steps
// for one token's mask or bytes, more than four times memo_bytes (16 MiB at least) held within
// one token, or the caps on states and stack nodes): the matcher then allows nothing. Sets *err
// (if non-NULL) to what happened.
bool ft_grammar_matcher_failed(const ft_grammar_matcher *m, ft_err *err);

typedef struct ft_grammar_matcher_stats {
    long states, nodes;      // interned now
    long masks_computed;     // trie walks
    long masks_cached;       // masks answered from the cache
    long compactions;        // times the memo was dropped
    size_t memo_bytes;       // held now
} ft_grammar_matcher_stats;
void ft_grammar_matcher_stats_get(const ft_grammar_matcher *m, ft_grammar_matcher_stats *out);

// ---------------------------------------------------------------------------------------------
// Reference matcher: explicit stacks copied per byte, no memo (tests and fuzzing only).

typedef struct ft_grammar_ref ft_grammar_ref;
ft_grammar_ref *ft_grammar_ref_init(const ft_grammar *g);
ft_grammar_ref *ft_grammar_ref_clone(const ft_grammar_ref *r);
void ft_grammar_ref_free(ft_grammar_ref *r); // NULL is a no-op
// Advances over bytes; returns false (and the reference is dead) when no stack survives.
bool ft_grammar_ref_feed(ft_grammar_ref *r, const void *bytes, size_t n);
bool ft_grammar_ref_accepting(const ft_grammar_ref *r);
// Whether some stack is alive (a byte may follow) or the grammar may end.
bool ft_grammar_ref_alive(const ft_grammar_ref *r);
// Whether the reference gave up (more than its cap of stacks): its answers are then void.
bool ft_grammar_ref_overflow(const ft_grammar_ref *r);

#endif
