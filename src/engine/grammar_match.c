// grammar_match.c: the matcher over bytes (see grammar.h): hash-consed stacks, interned states
// and their transitions, computed once each.
//
// One transition (gm_compute) of state s on byte b: every top whose byte set holds b moves past
// its symbol, and the result is expanded until every stack has a byte set on top again: a rule
// pushes where its caller resumes and goes on at each of its alternatives; the end of an
// alternative pops back to the caller (or, on the empty stack, marks that the grammar may end).
// A rule that is the last symbol of its alternative pushes nothing (a tail call), so right
// recursion such as `chars ::= char chars | ` runs in constant stack depth and its states
// repeat. Each (position, stack) is expanded once per transition.
#include "grammar_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Hard caps (a failure, not a compaction): they bound the work of one transition and of one
// trie walk however adversarial the grammar.
#define MAX_TOPS (1 << 16)   // stacks in one state
#define MAX_NODES (1u << 26) // stack nodes
#define MAX_STATES (1u << 23)
#define MAX_STEPS (1l << 25) // expansion steps for one token (its mask or its bytes): ~0.3 s
#define MIN_HARD_BYTES ((size_t)16 << 20)

ft_grammar_matcher_params ft_grammar_matcher_default_params(void) {
    return (ft_grammar_matcher_params){.memo_bytes = (size_t)64 << 20};
}

int32_t gm_fail(ft_grammar_matcher *m, const char *fmt, ...) {
    if (!m->failed) {
        m->failed = true;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->errmsg, sizeof(m->errmsg), fmt, ap);
        va_end(ap);
    }
    return MS_DEAD;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

// ---------------------------------------------------------------------------------------------
// Stack nodes

static void node_hash_grow(ft_grammar_matcher *m) {
    uint32_t cap = m->nhash_cap ? 2 * m->nhash_cap : 1024;
    uint32_t *t = ft_calloc(cap, sizeof(uint32_t));
    for (uint32_t i = 0; i < m->nhash_cap; i++) {
        uint32_t id = m->nhash[i];
        if (!id) continue;
        uint64_t h = mix64((uint64_t)m->npos[id] << 32 | m->npar[id]) & (cap - 1);
        while (t[h]) h = (h + 1) & (cap - 1);
        t[h] = id;
    }
    m->bytes += (size_t)(cap - m->nhash_cap) * sizeof(uint32_t);
    free(m->nhash);
    m->nhash = t;
    m->nhash_cap = cap;
}

// The node (pos, par), made if new; 0 (with the matcher failed) past the cap.
static uint32_t node_get(ft_grammar_matcher *m, uint32_t pos, uint32_t par) {
    if (2 * (m->n_nodes + 1) > m->nhash_cap) node_hash_grow(m);
    uint32_t mask = m->nhash_cap - 1;
    uint64_t h = mix64((uint64_t)pos << 32 | par) & mask;
    for (uint32_t id; (id = m->nhash[h]); h = (h + 1) & mask)
        if (m->npos[id] == pos && m->npar[id] == par) return id;
    if (m->n_nodes >= MAX_NODES) return gm_fail(m, "grammar: more than %u stack nodes", MAX_NODES), 0;
    if (m->n_nodes == m->cap_nodes) {
        uint32_t cap = m->cap_nodes * 2;
        m->npos = ft_realloc(m->npos, cap * sizeof(uint32_t));
        m->npar = ft_realloc(m->npar, cap * sizeof(uint32_t));
        m->bytes += (size_t)(cap - m->cap_nodes) * 2 * sizeof(uint32_t);
        m->cap_nodes = cap;
    }
    uint32_t id = m->n_nodes++;
    m->npos[id] = pos;
    m->npar[id] = par;
    m->nhash[h] = id;
    return id;
}

// ---------------------------------------------------------------------------------------------
// States

static uint64_t state_hash(bool accept, const uint32_t *tops, uint32_t n) {
    uint64_t h = accept ? 0x9e3779b97f4a7c15ull : 0x51ed270b27c1a5d3ull;
    for (uint32_t i = 0; i < n; i++) h = mix64(h ^ tops[i]) + i;
    return h;
}

static void state_hash_grow(ft_grammar_matcher *m) {
    uint32_t cap = m->shash_cap ? 2 * m->shash_cap : 256;
    uint32_t *t = ft_calloc(cap, sizeof(uint32_t));
    for (uint32_t i = 0; i < m->shash_cap; i++) {
        uint32_t id = m->shash[i];
        if (!id) continue;
        const mstate *x = &m->st[id - 1];
        uint64_t h = state_hash(x->accept, m->tops + x->top_off, x->n_top) & (cap - 1);
        while (t[h]) h = (h + 1) & (cap - 1);
        t[h] = id;
    }
    m->bytes += (size_t)(cap - m->shash_cap) * sizeof(uint32_t);
    free(m->shash);
    m->shash = t;
    m->shash_cap = cap;
}

// The state of these (sorted) tops, made if new.
static int32_t state_get(ft_grammar_matcher *m, bool accept, const uint32_t *tops, uint32_t n) {
    if (2 * (m->n_st + 1) > m->shash_cap) state_hash_grow(m);
    uint32_t mask = m->shash_cap - 1;
    uint64_t h = state_hash(accept, tops, n) & mask;
    for (uint32_t id; (id = m->shash[h]); h = (h + 1) & mask) {
        const mstate *x = &m->st[id - 1];
        if (x->accept == accept && x->n_top == n && (!n || !memcmp(m->tops + x->top_off, tops, n * sizeof(uint32_t))))
            return (int32_t)id - 1;
    }
    if (m->n_st >= MAX_STATES) return gm_fail(m, "grammar: more than %u states", MAX_STATES);
    // the memo is dropped between tokens past its budget; within one token it may grow to four
    // times that before the grammar is given up
    size_t hard = FT_MAX(4 * m->p.memo_bytes, MIN_HARD_BYTES);
    if (m->bytes > hard)
        return gm_fail(m, "grammar: the matcher needs more than %zu MiB for one token", hard >> 20);
    if (m->n_st == m->cap_st) {
        uint32_t cap = m->cap_st ? 2 * m->cap_st : 256;
        m->st = ft_realloc(m->st, cap * sizeof(mstate));
        m->bytes += (size_t)(cap - m->cap_st) * sizeof(mstate);
        m->cap_st = cap;
    }
    if (m->n_tops + n > m->cap_tops) {
        size_t cap = FT_MAX(2 * m->cap_tops, m->n_tops + n);
        m->tops = ft_realloc(m->tops, cap * sizeof(uint32_t));
        m->bytes += (cap - m->cap_tops) * sizeof(uint32_t);
        m->cap_tops = cap;
    }
    uint32_t id = m->n_st++;
    mstate *x = &m->st[id];
    memset(x, 0, sizeof(*x));
    x->top_off = (uint32_t)m->n_tops;
    x->n_top = n;
    x->accept = accept;
    x->mask = -1;
    if (n) memcpy(m->tops + m->n_tops, tops, n * sizeof(uint32_t));
    m->n_tops += n;
    x->plain_uniform = -1;
    // transitions: unknown for the bytes some top accepts, dead for the rest
    const ft_grammar *g = m->g;
    uint64_t valid[4] = {0};
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t *set = g->set[GSYM_ARG(g->sym[m->npos[tops[i]]])];
        for (int w = 0; w < 4; w++) valid[w] |= set[w];
    }
    x->next = ft_malloc(256 * sizeof(int32_t));
    for (int b = 0; b < 256; b++) x->next[b] = gset_has(valid, (uint8_t)b) ? MS_UNKNOWN : MS_DEAD;
    m->bytes += 256 * sizeof(int32_t);
    m->shash[h] = id + 1;
    return (int32_t)id;
}

// ---------------------------------------------------------------------------------------------
// One transition

// Marks (pos, par) seen in this transition; false if it already was.
static bool visit(ft_grammar_matcher *m, uint32_t pos, uint32_t par) {
    if (2 * (m->vis_n + 1) > m->vis_cap) { // grow, keeping this transition's entries
        uint32_t cap = m->vis_cap ? 2 * m->vis_cap : 1024;
        uint64_t *k = ft_malloc(cap * sizeof(uint64_t));
        uint32_t *gn = ft_calloc(cap, sizeof(uint32_t));
        for (uint32_t i = 0; i < m->vis_cap; i++) {
            if (m->vis_gen[i] != m->gen) continue;
            uint64_t h = mix64(m->vis_key[i]) & (cap - 1);
            while (gn[h] == m->gen) h = (h + 1) & (cap - 1);
            k[h] = m->vis_key[i];
            gn[h] = m->gen;
        }
        free(m->vis_key);
        free(m->vis_gen);
        m->vis_key = k;
        m->vis_gen = gn;
        m->vis_cap = cap;
    }
    uint64_t key = (uint64_t)pos << 32 | par, h = mix64(key) & (m->vis_cap - 1);
    for (; m->vis_gen[h] == m->gen; h = (h + 1) & (m->vis_cap - 1))
        if (m->vis_key[h] == key) return false;
    m->vis_key[h] = key;
    m->vis_gen[h] = m->gen;
    m->vis_n++;
    return true;
}

static void work_push(ft_grammar_matcher *m, uint32_t pos, uint32_t par) {
    if (m->n_work + 2 > m->cap_work) {
        m->cap_work = m->cap_work ? 2 * m->cap_work : 256;
        m->work = ft_realloc(m->work, m->cap_work * sizeof(uint32_t));
    }
    m->work[m->n_work++] = pos;
    m->work[m->n_work++] = par;
}

static void begin(ft_grammar_matcher *m) {
    if (++m->gen == 0) { // the stamps wrapped: clear them once
        memset(m->vis_gen, 0, m->vis_cap * sizeof(uint32_t));
        m->gen = 1;
    }
    m->vis_n = 0;
    m->n_work = 0;
    m->n_out = 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

// Expands the work list (see the file comment) and interns the state it reaches; MS_DEAD when
// no stack survives and the grammar may not end.
static int32_t expand(ft_grammar_matcher *m) {
    const ft_grammar *g = m->g;
    bool accept = false;
    while (m->n_work && !m->failed) {
        uint32_t par = m->work[--m->n_work], pos = m->work[--m->n_work];
        if (!visit(m, pos, par)) continue;
        if (++m->steps > MAX_STEPS)
            return gm_fail(m, "grammar: more than %ld expansion steps for one token (an ambiguous grammar)", MAX_STEPS);
        uint32_t x = g->sym[pos];
        switch (GSYM_KIND(x)) {
        case FT_GSYM_BYTES:
            if (m->n_out == MAX_TOPS) return gm_fail(m, "grammar: more than %d stacks in one state (ambiguous grammar)", MAX_TOPS);
            if (m->n_out == m->cap_out) {
                m->cap_out = m->cap_out ? 2 * m->cap_out : 64;
                m->out = ft_realloc(m->out, m->cap_out * sizeof(uint32_t));
            }
            m->out[m->n_out++] = node_get(m, pos, par);
            break;
        case GSYM_END:
            if (par == 0)
                accept = true;
            else
                work_push(m, m->npos[par], m->npar[par]);
            break;
        default: { // a rule: its alternatives over where this one resumes
            uint32_t r = GSYM_ARG(x), ret = g->sym[pos + 1] == GSYM_END ? par : node_get(m, pos + 1, par);
            for (uint32_t a = g->rule_alt[r + 1]; a-- > g->rule_alt[r];) work_push(m, g->alt_pos[a], ret);
        }
        }
    }
    if (m->failed) return MS_DEAD;
    if (!m->n_out && !accept) return MS_DEAD;
    if (m->n_out > 1) qsort(m->out, m->n_out, sizeof(uint32_t), cmp_u32);
    return state_get(m, accept, m->out, (uint32_t)m->n_out);
}

int32_t gm_compute(ft_grammar_matcher *m, int32_t s, uint8_t b) {
    if (m->failed) return MS_DEAD;
    begin(m);
    const ft_grammar *g = m->g;
    uint32_t off = m->st[s].top_off, n = m->st[s].n_top;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = m->tops[off + i], pos = m->npos[t];
        if (gset_has(g->set[GSYM_ARG(g->sym[pos])], b)) work_push(m, pos + 1, m->npar[t]);
    }
    int32_t r = expand(m);
    if (m->failed) return MS_DEAD;
    m->st[s].next[b] = r; // (st may have moved)
    return r;
}

// The start: the root's alternatives over the empty stack.
static int32_t start_state(ft_grammar_matcher *m) {
    begin(m);
    const ft_grammar *g = m->g;
    for (uint32_t a = g->rule_alt[g->root + 1]; a-- > g->rule_alt[g->root];) work_push(m, g->alt_pos[a], 0);
    return expand(m);
}

// ---------------------------------------------------------------------------------------------
// Memo

static void memo_clear(ft_grammar_matcher *m) {
    for (uint32_t i = 0; i < m->n_st; i++) free(m->st[i].next);
    for (int i = 0; i < m->n_masks; i++) free(m->masks[i]);
    m->n_masks = 0;
    m->n_st = 0;
    m->n_tops = 0;
    m->n_nodes = 1; // the empty stack
    memset(m->nhash, 0, m->nhash_cap * sizeof(uint32_t));
    memset(m->shash, 0, m->shash_cap * sizeof(uint32_t));
}

// Gives the cleared memo's arrays back, so a memo that grew past its budget starts small again.
static void memo_shrink(ft_grammar_matcher *m) {
    free(m->npos);
    free(m->npar);
    free(m->nhash);
    free(m->st);
    free(m->tops);
    free(m->shash);
    m->nhash = m->shash = NULL;
    m->st = NULL;
    m->tops = NULL;
    m->nhash_cap = m->shash_cap = m->cap_st = 0;
    m->cap_tops = 0;
    m->cap_nodes = 1024;
    m->npos = ft_malloc(m->cap_nodes * sizeof(uint32_t));
    m->npar = ft_malloc(m->cap_nodes * sizeof(uint32_t));
    m->npos[0] = m->npar[0] = UINT32_MAX; // the empty stack
    m->n_nodes = 1;
    node_hash_grow(m);
    state_hash_grow(m);
}

// Recomputes the memo's size from what it holds now (its arrays keep their capacity).
static void memo_measure(ft_grammar_matcher *m) {
    size_t n_words = m->v ? ((size_t)m->v->n_vocab + 63) / 64 : 0;
    m->bytes = (size_t)m->cap_nodes * 2 * sizeof(uint32_t) + (size_t)m->nhash_cap * sizeof(uint32_t) +
               (size_t)m->cap_st * sizeof(mstate) + m->cap_tops * sizeof(uint32_t) +
               (size_t)m->shash_cap * sizeof(uint32_t) + (size_t)m->n_masks * n_words * sizeof(uint64_t);
    m->bytes += (size_t)m->n_st * 256 * sizeof(int32_t);
}

void gm_maybe_compact(ft_grammar_matcher *m) {
    if (m->failed || m->bytes <= m->p.memo_bytes) return;
    // the current state's stacks, each as its length then its positions from the top down
    const mstate *x = &m->st[m->cur];
    bool accept = x->accept;
    size_t n_top = x->n_top, cap = 64, n = 0;
    uint32_t *chain = ft_malloc(cap * sizeof(uint32_t));
    for (size_t i = 0; i < n_top; i++) {
        size_t at = n++; // the count goes first
        if (n >= cap) chain = ft_realloc(chain, (cap *= 2) * sizeof(uint32_t));
        uint32_t len = 0;
        for (uint32_t t = m->tops[x->top_off + i]; t; t = m->npar[t], len++) {
            if (n >= cap) chain = ft_realloc(chain, (cap *= 2) * sizeof(uint32_t));
            chain[n++] = m->npos[t];
        }
        chain[at] = len;
    }
    memo_clear(m);
    memo_shrink(m);
    uint32_t *tops = ft_malloc(FT_MAX(n_top, 1) * sizeof(uint32_t));
    size_t at = 0;
    for (size_t i = 0; i < n_top; i++) {
        uint32_t len = chain[at++], par = 0;
        for (uint32_t k = len; k-- > 0;) par = node_get(m, chain[at + k], par);
        at += len;
        tops[i] = par;
    }
    if (n_top > 1) qsort(tops, n_top, sizeof(uint32_t), cmp_u32);
    m->cur = state_get(m, accept, tops, (uint32_t)n_top);
    free(tops);
    free(chain);
    memo_measure(m);
    m->stats.compactions++;
}

// ---------------------------------------------------------------------------------------------
// Interface (bytes; tokens and masks are in token_mask.c)

ft_grammar_matcher *ft_grammar_matcher_init(const ft_grammar *g, const ft_grammar_vocab *v,
                                            const ft_grammar_matcher_params *p) {
    ft_grammar_matcher *m = ft_calloc(1, sizeof(*m));
    m->g = g;
    m->v = v;
    m->p = p ? *p : ft_grammar_matcher_default_params();
    memo_shrink(m); // (allocates the memo's arrays)
    if (v) {
        m->walk_st = ft_malloc(((size_t)v->max_depth + 1) * sizeof(int32_t));
        m->walk_row = ft_malloc(((size_t)v->max_depth + 1) * sizeof(int32_t *));
        m->scratch_mask = ft_malloc(((size_t)v->n_vocab + 63) / 64 * sizeof(uint64_t));
    }
    m->steps = 0;
    m->cur = start_state(m);
    if (m->cur < 0 && !m->failed) // an empty language: nothing, not even the end
        gm_fail(m, "grammar: the grammar matches nothing");
    memo_measure(m);
    return m;
}

void ft_grammar_matcher_free(ft_grammar_matcher *m) {
    if (!m) return;
    memo_clear(m);
    free(m->npos);
    free(m->npar);
    free(m->nhash);
    free(m->st);
    free(m->tops);
    free(m->shash);
    free(m->masks);
    free(m->scratch_mask);
    free(m->walk_st);
    free(m->walk_row);
    free(m->vis_key);
    free(m->vis_gen);
    free(m->work);
    free(m->out);
    free(m);
}

bool ft_grammar_matcher_feed(ft_grammar_matcher *m, const void *bytes, size_t n) {
    if (m->failed) return false;
    gm_maybe_compact(m);
    m->steps = 0;
    const uint8_t *p = bytes;
    int32_t s = m->cur;
    for (size_t i = 0; i < n && s >= 0; i++) s = gm_step(m, s, p[i]);
    if (s < 0) return false;
    m->cur = s;
    return true;
}

bool ft_grammar_matcher_allows_bytes(ft_grammar_matcher *m, const void *bytes, size_t n) {
    if (m->failed) return false;
    gm_maybe_compact(m);
    m->steps = 0;
    const uint8_t *p = bytes;
    int32_t s = m->cur;
    for (size_t i = 0; i < n && s >= 0; i++) s = gm_step(m, s, p[i]);
    return s >= 0;
}

bool ft_grammar_matcher_accepting(const ft_grammar_matcher *m) { return !m->failed && m->st[m->cur].accept; }

bool ft_grammar_matcher_done(const ft_grammar_matcher *m) {
    return !m->failed && m->st[m->cur].accept && m->st[m->cur].n_top == 0;
}

bool ft_grammar_matcher_failed(const ft_grammar_matcher *m, ft_err *err) {
    if (m->failed) ft_err_set(err, "%s", m->errmsg);
    return m->failed;
}

void ft_grammar_matcher_stats_get(const ft_grammar_matcher *m, ft_grammar_matcher_stats *out) {
    *out = m->stats;
    out->states = m->n_st;
    out->nodes = m->n_nodes;
    out->memo_bytes = m->bytes;
}
