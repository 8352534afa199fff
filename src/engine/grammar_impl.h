// grammar_impl.h: what the grammar files share (internal to src/engine/grammar*.c,
// token_mask.c and json_schema.c).
//
// A finished grammar is flat: every alternative of every rule is a run of symbols in sym[]
// ended by GSYM_END, so a grammar position is one index into sym[]. A symbol packs its kind in
// the top two bits: GSYM_END, GSYM_BYTES (the argument is a byte set's index) or GSYM_RULE (a
// rule's index; its alternatives start at alt_pos[rule_alt[r] .. rule_alt[r + 1])).
#ifndef FT_GRAMMAR_IMPL_H
#define FT_GRAMMAR_IMPL_H

#include "grammar.h"

#define GSYM_END 0u
#define GSYM_KIND(x) ((x) >> 30)
#define GSYM_ARG(x) ((x) & 0x3fffffffu)
#define GSYM_MAKE(kind, arg) ((uint32_t)(kind) << 30 | (uint32_t)(arg))

struct ft_grammar {
    uint32_t *sym;      // (n_sym)
    uint32_t n_sym;
    uint32_t *alt_pos;  // (n_alt) where each alternative starts in sym
    uint32_t n_alt;
    uint32_t *rule_alt; // (n_rule + 1)
    uint32_t n_rule;
    uint64_t (*set)[4]; // (n_set) byte sets
    uint32_t n_set;
    uint32_t root;
};

static inline bool gset_has(const uint64_t set[4], uint8_t b) { return set[b >> 6] >> (b & 63) & 1; }

// ---------------------------------------------------------------------------------------------
// The vocabulary trie (token_mask.c): nodes in preorder, children in byte order; a node's
// subtree is [its index, end). Node i stands for the byte string of the path to it; tok is the
// token with exactly those bytes (-1: none), further tokens with the same bytes chain through
// dup_next.

typedef struct gv_node {
    uint8_t byte;
    uint8_t pad;
    uint16_t depth; // 1 for a first byte
    uint32_t end;
    int32_t tok;
} gv_node;

#define GV_MAX_DEPTH 65535 // longer tokens are left out of the trie: never allowed
#define GV_MAX_CHARS 16    // plain tokens have at most this many characters (token_mask.c)

struct ft_grammar_vocab {
    int n_vocab;
    gv_node *nodes;
    uint32_t n_nodes;
    int max_depth;
    int32_t *dup_next; // (n_vocab)
    int32_t *eog;      // end-of-generation ids
    int n_eog;
    uint8_t *is_eog;   // (n_vocab)
    uint64_t *plain_le[GV_MAX_CHARS + 1]; // (n_vocab bits each) tokens of 1 to c plain characters (token_mask.c)
    gv_node *np_nodes; // the trie of the other tokens
    uint32_t n_np_nodes;
    uint32_t *tok_len; // (n_vocab) bytes of each token (0: no bytes or left out)
    uint32_t *tok_off; // (n_vocab) offset into bytes
    char *bytes;
};

// ---------------------------------------------------------------------------------------------
// The matcher (grammar_match.c). Stack nodes: node 0 is the empty stack; node i > 0 is
// (npos[i], npar[i]): a grammar position over the stack npar[i]. A top node's position is a
// GSYM_BYTES symbol; the other nodes' are where their caller resumes. A state is a sorted set
// of top nodes and whether the grammar may end (an empty stack reached).

#define MS_DEAD (-1)
#define MS_UNKNOWN (-2)

typedef struct mstate {
    int32_t *next;       // (256) the state after each byte: MS_DEAD, MS_UNKNOWN (not computed yet)
    uint32_t top_off, n_top;
    int32_t mask;        // the cached mask's index, -1: none
    uint8_t accept;
    int8_t plain_uniform; // every plain character leads to one state, plain_next (token_mask.c): 1 yes, 0 no, -1 unknown
    int32_t plain_next;   // that state (MS_DEAD: none takes a plain character)
} mstate;

struct ft_grammar_matcher {
    const ft_grammar *g;
    const ft_grammar_vocab *v;
    ft_grammar_matcher_params p;
    int32_t cur;

    uint32_t *npos, *npar;
    uint32_t n_nodes, cap_nodes;
    uint32_t *nhash; // open addressing: node id, 0 free
    uint32_t nhash_cap;

    mstate *st;
    uint32_t n_st, cap_st;
    uint32_t *tops;
    size_t n_tops, cap_tops;
    uint32_t *shash; // open addressing: state id + 1, 0 free
    uint32_t shash_cap;

    uint64_t **masks; // (n_masks) cached masks, each ft_grammar_vocab_n bits
    int n_masks, cap_masks;
    uint64_t *scratch_mask; // a mask not cached (the budget is spent)
    int32_t *walk_st;       // (max_depth + 1) the state at each depth of the trie walk
    const int32_t **walk_row; // (max_depth + 1) and its transitions

    // scratch of one transition
    uint64_t *vis_key;
    uint32_t *vis_gen;
    uint32_t vis_cap, vis_n, gen;
    uint32_t *work; // pairs (pos, par)
    size_t n_work, cap_work;
    uint32_t *out;
    size_t n_out, cap_out;

    size_t bytes; // the memo's size
    long steps;   // expansion steps since the current token's work began
    bool failed;
    char errmsg[256];
    ft_grammar_matcher_stats stats;
};

// The state after byte b from state s (MS_DEAD: none), computed on first use.
int32_t gm_compute(ft_grammar_matcher *m, int32_t s, uint8_t b);

static inline int32_t gm_step(ft_grammar_matcher *m, int32_t s, uint8_t b) {
    int32_t r = m->st[s].next[b];
    return r != MS_UNKNOWN ? r : gm_compute(m, s, b);
}

// Drops the memo if it is over budget (between tokens only: state ids change).
void gm_maybe_compact(ft_grammar_matcher *m);
// Sets the matcher failed with a message (the first stays). Returns MS_DEAD.
int32_t gm_fail(ft_grammar_matcher *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
