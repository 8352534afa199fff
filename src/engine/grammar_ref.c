// grammar_ref.c: the reference matcher (see grammar.h): llama.cpp's algorithm in its plainest
// form. A state is a list of stacks, each an array of grammar positions (the top last, always a
// byte set); a byte copies every stack whose top accepts it, moves past that symbol and expands
// the copy until a byte set is on top again, pushing a return position for every rule (no tail
// calls) and popping at the end of an alternative. No sharing, no memo: slow and obvious, the
// truth the matcher and the masks are tested against.
#include "grammar_impl.h"

#include <stdlib.h>
#include <string.h>

#define REF_MAX_STACKS 4096
#define REF_MAX_STEPS 200000 // expansions per byte

typedef struct rstack {
    uint32_t *p;
    uint32_t n;
} rstack;

struct ft_grammar_ref {
    const ft_grammar *g;
    rstack *s;
    int n;
    bool accept, overflow;
};

static rstack rs_copy(const uint32_t *p, uint32_t n, uint32_t extra) {
    rstack r = {ft_malloc((n + extra + 1) * sizeof(uint32_t)), n};
    if (n) memcpy(r.p, p, n * sizeof(uint32_t));
    return r;
}

static int rs_cmp(const void *a, const void *b) {
    const rstack *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->n ? memcmp(x->p, y->p, x->n * sizeof(uint32_t)) : 0;
}

typedef struct {
    rstack *s;
    int n, cap;
} rlist;

static void rl_push(rlist *l, rstack s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->s = ft_realloc(l->s, (size_t)l->cap * sizeof(rstack));
    }
    l->s[l->n++] = s;
}

// Expands the stacks of todo (consumed) into out: byte sets on top.
static void expand(ft_grammar_ref *r, rlist *todo, rlist *out) {
    const ft_grammar *g = r->g;
    long steps = 0;
    while (todo->n) {
        rstack s = todo->s[--todo->n];
        if (++steps > REF_MAX_STEPS || out->n >= REF_MAX_STACKS) {
            r->overflow = true;
            free(s.p);
            continue;
        }
        if (s.n == 0) { // every rule finished: the grammar may end
            r->accept = true;
            free(s.p);
            continue;
        }
        uint32_t pos = s.p[s.n - 1], x = g->sym[pos];
        if (GSYM_KIND(x) == FT_GSYM_BYTES) {
            rl_push(out, s);
        } else if (x == GSYM_END) {
            s.n--; // back to the caller's return position
            rl_push(todo, s);
        } else {
            uint32_t rule = GSYM_ARG(x);
            s.p[s.n - 1] = pos + 1; // where this alternative resumes
            for (uint32_t a = g->rule_alt[rule]; a < g->rule_alt[rule + 1]; a++) {
                rstack c = rs_copy(s.p, s.n, 1);
                c.p[c.n++] = g->alt_pos[a];
                rl_push(todo, c);
            }
            free(s.p);
        }
    }
}

// Sorts out and drops duplicate stacks into r.
static void settle(ft_grammar_ref *r, rlist *out) {
    if (out->n > 1) qsort(out->s, (size_t)out->n, sizeof(rstack), rs_cmp);
    int k = 0;
    for (int i = 0; i < out->n; i++) {
        if (k && !rs_cmp(&out->s[k - 1], &out->s[i])) {
            free(out->s[i].p);
            continue;
        }
        out->s[k++] = out->s[i];
    }
    for (int i = 0; i < r->n; i++) free(r->s[i].p);
    free(r->s);
    r->s = out->s;
    r->n = k;
}

ft_grammar_ref *ft_grammar_ref_init(const ft_grammar *g) {
    ft_grammar_ref *r = ft_calloc(1, sizeof(*r));
    r->g = g;
    rlist todo = {0}, out = {0};
    for (uint32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        rstack c = rs_copy(NULL, 0, 1);
        c.p[c.n++] = g->alt_pos[a];
        rl_push(&todo, c);
    }
    expand(r, &todo, &out);
    free(todo.s);
    settle(r, &out);
    return r;
}

ft_grammar_ref *ft_grammar_ref_clone(const ft_grammar_ref *r) {
    ft_grammar_ref *c = ft_calloc(1, sizeof(*c));
    *c = *r;
    c->s = ft_malloc((size_t)FT_MAX(r->n, 1) * sizeof(rstack));
    for (int i = 0; i < r->n; i++) c->s[i] = rs_copy(r->s[i].p, r->s[i].n, 0);
    return c;
}

void ft_grammar_ref_free(ft_grammar_ref *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) free(r->s[i].p);
    free(r->s);
    free(r);
}

bool ft_grammar_ref_feed(ft_grammar_ref *r, const void *bytes, size_t n) {
    const uint8_t *p = bytes;
    for (size_t i = 0; i < n; i++) {
        rlist todo = {0}, out = {0};
        for (int k = 0; k < r->n; k++) {
            const rstack *s = &r->s[k];
            uint32_t pos = s->p[s->n - 1];
            if (!gset_has(r->g->set[GSYM_ARG(r->g->sym[pos])], p[i])) continue;
            rstack c = rs_copy(s->p, s->n, 0);
            c.p[c.n - 1] = pos + 1;
            rl_push(&todo, c);
        }
        r->accept = false;
        expand(r, &todo, &out);
        free(todo.s);
        settle(r, &out);
        if (!r->n && !r->accept) return false;
    }
    return true;
}

bool ft_grammar_ref_accepting(const ft_grammar_ref *r) { return r->accept; }
bool ft_grammar_ref_alive(const ft_grammar_ref *r) { return r->n > 0 || r->accept; }
bool ft_grammar_ref_overflow(const ft_grammar_ref *r) { return r->overflow; }
