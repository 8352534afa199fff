// token_mask.c: the vocabulary as a trie of the tokens' bytes, and the matcher's token-level
// interface: which tokens may come next (the mask), whether one may, and advancing over one.
//
// The mask of a state walks the trie in preorder with the matcher's transitions: the state
// after a node's bytes is one table lookup from its parent's, a node whose prefix no stack
// accepts skips its whole subtree (outside a string most of the vocabulary dies at its first
// byte), and every token ending at a live node is allowed. A whole walk visits every live node
// (qwen2's 151,936 tokens make 333,627 nodes); masks are cached per state, and states repeat.
//
// Inside a string nearly every token is allowed, and a whole walk would be the worst case. So
// the vocabulary also sorts out its plain tokens: 1 to 16 whole UTF-8 characters, none of them
// a control character, DEL, '"' or '\' (about 145,700 of qwen2's tokens), by their number of
// characters. A state where every plain character leads to one state (checked once per state
// over the UTF-8 byte structure) starts a chain: s0 -> s1 -> ... A token of c plain characters
// goes from s0 to s_c, so where the chain ends in no state after s_c, loops back, or reaches 16
// characters, the plain tokens allowed are exactly those of at most so many characters (a
// string's body: all of them; a string of at most n characters: those of at most the n - k
// left), a precomputed bitset, and only the other tokens' trie (about 6,200 tokens) is walked.
#include "grammar_impl.h"

#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Vocabulary

typedef struct {
    const char *p;
    uint32_t n;
    int32_t id;
} tok_ent;

static int by_bytes(const void *a, const void *b) {
    const tok_ent *x = a, *y = b;
    int c = memcmp(x->p, y->p, FT_MIN(x->n, y->n));
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

// The number of characters of s if it is whole plain characters (valid UTF-8 without control
// characters, DEL, '"', '\\'), else 0.
static int plain_chars(const uint8_t *s, size_t n) {
    int chars = 0;
    for (size_t i = 0; i < n; chars++) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7F || c == '"' || c == '\\') return 0;
            i++;
            continue;
        }
        int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!len || i + (size_t)len > n) return 0;
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += (size_t)len;
    }
    return chars;
}

// The trie of the sorted entries e[0..n) in preorder: a sorted list of strings is the trie's
// depth-first order, so each entry adds the nodes past its common prefix with the one before
// and closes the nodes below that prefix. Tokens with the same bytes chain through dup_next
// (when chain_dups: the second trie of the same tokens finds the chains made).
static gv_node *build_trie(ft_grammar_vocab *gv, const tok_ent *e, int n, bool chain_dups, uint32_t *n_nodes,
                           int *max_depth) {
    size_t cap = 1024;
    uint32_t count = 0, depth = 0;
    gv_node *nodes = ft_malloc(cap * sizeof(gv_node));
    uint32_t *path = ft_malloc((GV_MAX_DEPTH + 1) * sizeof(uint32_t)); // the open node at each depth
    for (int i = 0; i < n; i++) {
        uint32_t lcp = 0;
        if (i) {
            uint32_t m = FT_MIN(e[i].n, e[i - 1].n);
            while (lcp < m && e[i].p[lcp] == e[i - 1].p[lcp]) lcp++;
        }
        for (; depth > lcp; depth--) nodes[path[depth]].end = count;
        if (lcp == e[i].n) { // the same bytes as the token before
            if (!chain_dups) continue;
            int32_t t = nodes[path[depth]].tok;
            while (gv->dup_next[t] >= 0) t = gv->dup_next[t];
            gv->dup_next[t] = e[i].id;
            continue;
        }
        for (uint32_t k = lcp; k < e[i].n; k++) {
            if (count == cap) nodes = ft_realloc(nodes, (cap *= 2) * sizeof(gv_node));
            nodes[count] = (gv_node){(uint8_t)e[i].p[k], 0, (uint16_t)(k + 1), 0, -1};
            path[++depth] = count++;
        }
        nodes[path[depth]].tok = e[i].id;
        *max_depth = FT_MAX(*max_depth, (int)e[i].n);
    }
    for (; depth > 0; depth--) nodes[path[depth]].end = count;
    free(path);
    *n_nodes = count;
    return nodes;
}

ft_grammar_vocab *ft_grammar_vocab_from_pieces(int n_vocab, const char *const *piece, const size_t *len,
                                               const bool *eog) {
    ft_grammar_vocab *gv = ft_calloc(1, sizeof(*gv));
    gv->n_vocab = n_vocab;
    gv->dup_next = ft_malloc((size_t)FT_MAX(n_vocab, 1) * sizeof(int32_t));
    gv->is_eog = ft_calloc((size_t)FT_MAX(n_vocab, 1), 1);
    gv->eog = ft_malloc((size_t)FT_MAX(n_vocab, 1) * sizeof(int32_t));
    gv->tok_len = ft_calloc((size_t)FT_MAX(n_vocab, 1), sizeof(uint32_t));
    gv->tok_off = ft_calloc((size_t)FT_MAX(n_vocab, 1), sizeof(uint32_t));
    tok_ent *e = ft_malloc((size_t)FT_MAX(n_vocab, 1) * sizeof(tok_ent));
    size_t n_bytes = 0;
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        gv->dup_next[i] = -1;
        if (eog && eog[i]) {
            gv->is_eog[i] = 1;
            gv->eog[gv->n_eog++] = i;
        } else if (len[i] > 0 && len[i] <= GV_MAX_DEPTH) {
            e[n++] = (tok_ent){piece[i], (uint32_t)len[i], i};
            n_bytes += len[i];
        }
    }
    // the tokens' own bytes, so the vocabulary does not depend on the pieces' lifetime
    gv->bytes = ft_malloc(FT_MAX(n_bytes, 1));
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        memcpy(gv->bytes + at, e[i].p, e[i].n);
        gv->tok_off[e[i].id] = (uint32_t)at;
        gv->tok_len[e[i].id] = e[i].n;
        e[i].p = gv->bytes + at;
        at += e[i].n;
    }
    qsort(e, (size_t)n, sizeof(tok_ent), by_bytes);
    gv->nodes = build_trie(gv, e, n, true, &gv->n_nodes, &gv->max_depth);
    // the plain tokens by their characters (plain_le[c]: those of at most c), and the trie of
    // the rest
    size_t n_words = ((size_t)FT_MAX(n_vocab, 1) + 63) / 64;
    for (int c = 0; c <= GV_MAX_CHARS; c++) gv->plain_le[c] = ft_calloc(n_words, sizeof(uint64_t));
    int n_np = 0, np_depth = 0;
    for (int i = 0; i < n; i++) {
        int chars = plain_chars((const uint8_t *)e[i].p, e[i].n);
        if (chars >= 1 && chars <= GV_MAX_CHARS)
            for (int c = chars; c <= GV_MAX_CHARS; c++) gv->plain_le[c][e[i].id >> 6] |= 1ull << (e[i].id & 63);
        else
            e[n_np++] = e[i];
    }
    gv->np_nodes = build_trie(gv, e, n_np, false, &gv->n_np_nodes, &np_depth);
    free(e);
    return gv;
}

ft_grammar_vocab *ft_grammar_vocab_init(const tok_vocab *v, int n_vocab) {
    int n_tok = tok_n_tokens(v);
    const char **piece = ft_calloc((size_t)FT_MAX(n_vocab, 1), sizeof(char *));
    size_t *len = ft_calloc((size_t)FT_MAX(n_vocab, 1), sizeof(size_t));
    bool *eog = ft_calloc((size_t)FT_MAX(n_vocab, 1), sizeof(bool));
    for (int i = 0; i < n_vocab && i < n_tok; i++) {
        piece[i] = tok_piece(v, i, false, &len[i]);
        eog[i] = tok_is_eog(v, i);
    }
    ft_grammar_vocab *gv = ft_grammar_vocab_from_pieces(n_vocab, piece, len, eog);
    free(piece);
    free(len);
    free(eog);
    return gv;
}

void ft_grammar_vocab_free(ft_grammar_vocab *gv) {
    if (!gv) return;
    free(gv->nodes);
    free(gv->np_nodes);
    for (int c = 0; c <= GV_MAX_CHARS; c++) free(gv->plain_le[c]);
    free(gv->dup_next);
    free(gv->eog);
    free(gv->is_eog);
    free(gv->tok_len);
    free(gv->tok_off);
    free(gv->bytes);
    free(gv);
}

int ft_grammar_vocab_n(const ft_grammar_vocab *gv) { return gv->n_vocab; }
size_t ft_grammar_vocab_n_nodes(const ft_grammar_vocab *gv) { return gv->n_nodes; }

// ---------------------------------------------------------------------------------------------
// Tokens

// The state after token tok's bytes from the current state (MS_DEAD: not allowed); an
// end-of-generation token gives the current state where the grammar may end.
static int32_t after_token(ft_grammar_matcher *m, int32_t tok) {
    const ft_grammar_vocab *v = m->v;
    if (m->failed || !v || tok < 0 || tok >= v->n_vocab) return MS_DEAD;
    if (v->is_eog[tok]) return m->st[m->cur].accept ? m->cur : MS_DEAD;
    uint32_t n = v->tok_len[tok];
    if (!n) return MS_DEAD;
    const uint8_t *p = (const uint8_t *)v->bytes + v->tok_off[tok];
    int32_t s = m->cur;
    for (uint32_t i = 0; i < n && s >= 0; i++) s = gm_step(m, s, p[i]);
    return s;
}

bool ft_grammar_matcher_allows(ft_grammar_matcher *m, int32_t tok) {
    if (m->failed) return false;
    gm_maybe_compact(m);
    m->steps = 0;
    return after_token(m, tok) >= 0;
}

bool ft_grammar_matcher_accept(ft_grammar_matcher *m, int32_t tok) {
    if (m->failed) return false;
    gm_maybe_compact(m);
    m->steps = 0;
    int32_t s = after_token(m, tok);
    if (s < 0) return false;
    m->cur = s;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Masks

// Sets the bit of every token of the trie nodes[0..n) allowed from state s.
static void walk(ft_grammar_matcher *m, const gv_node *nodes, uint32_t n, int32_t s, uint64_t *bits) {
    const int32_t *dup = m->v->dup_next;
    int32_t *at = m->walk_st;       // the state after the path to the node at each depth
    const int32_t **row = m->walk_row; // and its transitions
    at[0] = s;
    row[0] = m->st[s].next;
    for (uint32_t i = 0; i < n;) {
        const gv_node *x = &nodes[i];
        int d = x->depth;
        int32_t t = row[d - 1][x->byte];
        if (t == MS_UNKNOWN) t = gm_compute(m, at[d - 1], x->byte);
        if (t < 0) {
            i = x->end;
            continue;
        }
        at[d] = t;
        row[d] = t == at[d - 1] ? row[d - 1] : m->st[t].next;
        for (int32_t k = x->tok; k >= 0; k = dup[k]) bits[k >> 6] |= 1ull << (k & 63);
        i++;
    }
}

// From state t (MS_DEAD: none), whether every continuation byte in [lo, hi] and then need - 1
// more in [80, BF] ends in state target (MS_DEAD: in no state). The memo remembers the states
// already checked for a full range.
typedef struct {
    int32_t st[16];
    int8_t need[16];
    int n;
} loop_memo;

static bool cont_to(ft_grammar_matcher *m, int32_t t, int need, unsigned lo, unsigned hi, int32_t target,
                    loop_memo *memo) {
    if (t < 0) return target < 0;
    bool full = lo == 0x80 && hi == 0xBF;
    if (full)
        for (int i = 0; i < memo->n; i++)
            if (memo->st[i] == t && memo->need[i] == need) return true;
    for (unsigned c = lo; c <= hi; c++) {
        int32_t u = gm_step(m, t, (uint8_t)c);
        if (need == 1 ? u != target : !cont_to(m, u, need - 1, 0x80, 0xBF, target, memo)) return false;
    }
    if (full && memo->n < 16) memo->st[memo->n] = t, memo->need[memo->n++] = (int8_t)need;
    return true;
}

// Whether every plain character (see the file comment) leads from s to one state, *next
// (MS_DEAD: none takes one): each ASCII one, and each UTF-8 sequence followed through the
// transitions by lead byte and then per continuation range (the states after a continuation byte
// repeat, so few are checked). Computed once per state.
static bool plain_uniform(ft_grammar_matcher *m, int32_t s, int32_t *next) {
    if (m->st[s].plain_uniform < 0) {
        int32_t t = gm_step(m, s, 'a');
        bool ok = true;
        for (unsigned c = 0x20; c < 0x7F && ok; c++)
            if (c != '"' && c != '\\') ok = gm_step(m, s, (uint8_t)c) == t;
        loop_memo memo = {.n = 0};
        for (unsigned c = 0xC2; c <= 0xF4 && ok; c++) {
            int32_t u = gm_step(m, s, (uint8_t)c);
            int need = c <= 0xDF ? 1 : c <= 0xEF ? 2 : 3;
            unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            ok = cont_to(m, u, need, lo, hi, t, &memo);
        }
        m->st[s].plain_uniform = ok && !m->failed;
        m->st[s].plain_next = t;
    }
    *next = m->st[s].plain_next;
    return m->st[s].plain_uniform == 1;
}

// The bitset of the plain tokens allowed from s when the chain of plain_uniform states decides
// them all (see the file comment), else NULL.
static const uint64_t *plain_allowed(ft_grammar_matcher *m, int32_t s) {
    int32_t chain[GV_MAX_CHARS + 1];
    chain[0] = s;
    for (int c = 0; c < GV_MAX_CHARS; c++) {
        int32_t next;
        if (!plain_uniform(m, chain[c], &next)) return NULL;
        if (next < 0) return m->v->plain_le[c]; // tokens of more than c characters die
        for (int k = 0; k <= c; k++)
            if (chain[k] == next) return m->v->plain_le[GV_MAX_CHARS]; // a loop: every count lives
        chain[c + 1] = next;
    }
    return m->v->plain_le[GV_MAX_CHARS];
}

const uint64_t *ft_grammar_matcher_mask(ft_grammar_matcher *m) {
    if (m->failed || !m->v) return NULL;
    gm_maybe_compact(m);
    m->steps = 0;
    int32_t s = m->cur;
    if (m->st[s].mask >= 0) {
        m->stats.masks_cached++;
        return m->masks[m->st[s].mask];
    }
    const ft_grammar_vocab *v = m->v;
    size_t n_words = ((size_t)v->n_vocab + 63) / 64, size = n_words * sizeof(uint64_t);
    // cache it while the budget allows; past it, the scratch mask (the memo is dropped before
    // the next token anyway)
    bool keep = m->bytes + size <= m->p.memo_bytes;
    uint64_t *bits = keep ? ft_malloc(size) : m->scratch_mask;
    const uint64_t *plain = plain_allowed(m, s);
    if (plain && !m->failed) {
        memcpy(bits, plain, size);
        walk(m, v->np_nodes, v->n_np_nodes, s, bits);
    } else {
        memset(bits, 0, size);
        walk(m, v->nodes, v->n_nodes, s, bits);
    }
    if (m->st[s].accept)
        for (int i = 0; i < v->n_eog; i++) bits[v->eog[i] >> 6] |= 1ull << (v->eog[i] & 63);
    m->stats.masks_computed++;
    if (m->failed) {
        if (keep) free(bits);
        return NULL;
    }
    if (keep) {
        if (m->n_masks == m->cap_masks) {
            m->cap_masks = m->cap_masks ? 2 * m->cap_masks : 16;
            m->masks = ft_realloc(m->masks, (size_t)m->cap_masks * sizeof(uint64_t *));
        }
        m->st[s].mask = m->n_masks;
        m->masks[m->n_masks++] = bits;
        m->bytes += size;
    }
    return bits;
}
