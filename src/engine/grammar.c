// grammar.c: building a grammar (see grammar.h): rules, byte sets, UTF-8 character classes,
// repetition, and the checks that freeze it into the flat form of grammar_impl.h.
#include "grammar_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct grule {
    char *name;
    int *alts; // indices into ft_gb.alts
    int n_alts, cap_alts;
} grule;

struct ft_gb {
    grule *rules;
    int n_rules, cap_rules;
    ft_gseq *alts;
    int n_alts, cap_alts;
    long n_syms; // over all alternatives, each with its end
    uint64_t (*sets)[4];
    int n_sets, cap_sets;
    int *set_hash; // open addressing: set index + 1
    int set_hash_cap;
    int *name_hash; // open addressing: named rule index + 1
    int name_hash_cap, n_named;
    bool failed;
    char err[512];
};

void ft_gseq_push(ft_gseq *q, ft_gsym x) {
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 8;
        q->s = ft_realloc(q->s, (size_t)q->cap * sizeof(ft_gsym));
    }
    q->s[q->n++] = x;
}

void ft_gseq_free(ft_gseq *q) {
    free(q->s);
    *q = (ft_gseq){0};
}

ft_gb *ft_gb_init(void) { return ft_calloc(1, sizeof(ft_gb)); }

void ft_gb_free(ft_gb *b) {
    if (!b) return;
    for (int i = 0; i < b->n_rules; i++) {
        free(b->rules[i].name);
        free(b->rules[i].alts);
    }
    free(b->rules);
    for (int i = 0; i < b->n_alts; i++) ft_gseq_free(&b->alts[i]);
    free(b->alts);
    free(b->sets);
    free(b->set_hash);
    free(b->name_hash);
    free(b);
}

void ft_gb_fail(ft_gb *b, const char *fmt, ...) {
    if (b->failed) return;
    b->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, sizeof(b->err), fmt, ap);
    va_end(ap);
}

bool ft_gb_failed(const ft_gb *b) { return b->failed; }
const char *ft_gb_error(const ft_gb *b) { return b->err; }

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int new_rule(ft_gb *b, const char *name, size_t len) {
    if (b->n_rules >= FT_GRAMMAR_MAX_RULES) {
        ft_gb_fail(b, "more than %d rules", FT_GRAMMAR_MAX_RULES);
        return 0; // callers go on; finish reports the failure
    }
    if (b->n_rules == b->cap_rules) {
        b->cap_rules = b->cap_rules ? 2 * b->cap_rules : 64;
        b->rules = ft_realloc(b->rules, (size_t)b->cap_rules * sizeof(grule));
    }
    grule *r = &b->rules[b->n_rules];
    *r = (grule){0};
    r->name = ft_malloc(len + 1);
    memcpy(r->name, name, len);
    r->name[len] = 0;
    return b->n_rules++;
}

static void name_hash_grow(ft_gb *b) {
    int cap = b->name_hash_cap ? 2 * b->name_hash_cap : 64;
    int *t = ft_calloc((size_t)cap, sizeof(int));
    for (int i = 0; i < b->name_hash_cap; i++) {
        int r = b->name_hash[i];
        if (!r) continue;
        const char *nm = b->rules[r - 1].name;
        size_t h = hash_bytes(nm, strlen(nm)) & (size_t)(cap - 1);
        while (t[h]) h = (h + 1) & (size_t)(cap - 1);
        t[h] = r;
    }
    free(b->name_hash);
    b->name_hash = t;
    b->name_hash_cap = cap;
}

int ft_gb_named(ft_gb *b, const char *name, size_t len) {
    if (2 * (b->n_named + 1) > b->name_hash_cap) name_hash_grow(b);
    size_t mask = (size_t)b->name_hash_cap - 1, h = hash_bytes(name, len) & mask;
    for (; b->name_hash[h]; h = (h + 1) & mask) {
        const char *nm = b->rules[b->name_hash[h] - 1].name;
        if (strlen(nm) == len && !memcmp(nm, name, len)) return b->name_hash[h] - 1;
    }
    int r = new_rule(b, name, len);
    if (b->failed) return r;
    b->name_hash[h] = r + 1;
    b->n_named++;
    return r;
}

bool ft_gb_has_alts(const ft_gb *b, int rule) { return rule < b->n_rules && b->rules[rule].n_alts > 0; }

int ft_gb_rule(ft_gb *b, const char *hint) {
    char name[96];
    snprintf(name, sizeof(name), "%.64s-%d", hint ? hint : "r", b->n_rules);
    return new_rule(b, name, strlen(name));
}

void ft_gb_alt(ft_gb *b, int rule, const ft_gsym *syms, int n) {
    if (b->failed) return;
    FT_ASSERT(rule >= 0 && rule < b->n_rules && n >= 0);
    if (b->n_syms + n + 1 > FT_GRAMMAR_MAX_SYMS) {
        ft_gb_fail(b, "more than %d symbols", FT_GRAMMAR_MAX_SYMS);
        return;
    }
    b->n_syms += n + 1;
    if (b->n_alts == b->cap_alts) {
        b->cap_alts = b->cap_alts ? 2 * b->cap_alts : 64;
        b->alts = ft_realloc(b->alts, (size_t)b->cap_alts * sizeof(ft_gseq));
    }
    ft_gseq *q = &b->alts[b->n_alts];
    *q = (ft_gseq){0};
    if (n) {
        q->s = ft_malloc((size_t)n * sizeof(ft_gsym));
        memcpy(q->s, syms, (size_t)n * sizeof(ft_gsym));
        q->n = q->cap = n;
    }
    grule *r = &b->rules[rule];
    if (r->n_alts == r->cap_alts) {
        r->cap_alts = r->cap_alts ? 2 * r->cap_alts : 2;
        r->alts = ft_realloc(r->alts, (size_t)r->cap_alts * sizeof(int));
    }
    r->alts[r->n_alts++] = b->n_alts++;
}

ft_gsym ft_gb_ref(int rule) { return (ft_gsym){FT_GSYM_RULE, (uint32_t)rule}; }

// ---------------------------------------------------------------------------------------------
// Byte sets (deduplicated)

static void set_hash_grow(ft_gb *b) {
    int cap = b->set_hash_cap ? 2 * b->set_hash_cap : 64;
    int *t = ft_calloc((size_t)cap, sizeof(int));
    for (int i = 0; i < b->n_sets; i++) {
        size_t h = hash_bytes(b->sets[i], 32) & (size_t)(cap - 1);
        while (t[h]) h = (h + 1) & (size_t)(cap - 1);
        t[h] = i + 1;
    }
    free(b->set_hash);
    b->set_hash = t;
    b->set_hash_cap = cap;
}

ft_gsym ft_gb_bytes(ft_gb *b, const uint64_t set[4]) {
    if (2 * (b->n_sets + 1) > b->set_hash_cap) set_hash_grow(b);
    size_t mask = (size_t)b->set_hash_cap - 1, h = hash_bytes(set, 32) & mask;
    for (; b->set_hash[h]; h = (h + 1) & mask)
        if (!memcmp(b->sets[b->set_hash[h] - 1], set, 32)) return (ft_gsym){FT_GSYM_BYTES, (uint32_t)(b->set_hash[h] - 1)};
    if (b->n_sets == b->cap_sets) {
        b->cap_sets = b->cap_sets ? 2 * b->cap_sets : 64;
        b->sets = ft_realloc(b->sets, (size_t)b->cap_sets * sizeof(*b->sets));
    }
    memcpy(b->sets[b->n_sets], set, 32);
    b->set_hash[h] = b->n_sets + 1;
    return (ft_gsym){FT_GSYM_BYTES, (uint32_t)b->n_sets++};
}

ft_gsym ft_gb_byte(ft_gb *b, uint8_t c) {
    uint64_t set[4] = {0};
    set[c >> 6] |= 1ull << (c & 63);
    return ft_gb_bytes(b, set);
}

void ft_gb_lit(ft_gb *b, ft_gseq *q, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) ft_gseq_push(q, ft_gb_byte(b, (uint8_t)s[i]));
}

static void set_range(uint64_t set[4], unsigned lo, unsigned hi) {
    for (unsigned c = lo; c <= hi; c++) set[c >> 6] |= 1ull << (c & 63);
}

// ---------------------------------------------------------------------------------------------
// Character classes as UTF-8

typedef struct {
    uint32_t lo, hi;
} cp_range;

static int by_lo(const void *a, const void *b) {
    uint32_t x = ((const cp_range *)a)->lo, y = ((const cp_range *)b)->lo;
    return x < y ? -1 : x > y;
}

static int utf8_encode(uint32_t c, uint8_t out[4]) {
    if (c < 0x80) return out[0] = (uint8_t)c, 1;
    if (c < 0x800) return out[0] = (uint8_t)(0xC0 | c >> 6), out[1] = (uint8_t)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xE0 | c >> 12);
        out[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | c >> 18);
    out[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

// Adds to rule the alternatives matching the UTF-8 encodings of [lo, hi], split (as RE2 and
// Rust's regex-syntax do) until each piece is a product of byte ranges: first at the encoding
// lengths, then wherever lo and hi differ above a continuation byte that is not full.
static void utf8_split(ft_gb *b, int rule, uint32_t lo, uint32_t hi, uint64_t ascii[4]) {
    if (lo > hi) return;
    static const uint32_t len_max[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= len_max[i] && len_max[i] < hi) {
            utf8_split(b, rule, lo, len_max[i], ascii);
            utf8_split(b, rule, len_max[i] + 1, hi, ascii);
            return;
        }
    if (hi < 0x80) {
        set_range(ascii, lo, hi);
        return;
    }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(b, rule, lo, lo | m, ascii);
                utf8_split(b, rule, (lo | m) + 1, hi, ascii);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(b, rule, lo, (hi & ~m) - 1, ascii);
                utf8_split(b, rule, hi & ~m, hi, ascii);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, z);
    ft_gsym seq[4];
    for (int k = 0; k < n; k++) {
        uint64_t set[4] = {0};
        set_range(set, a[k], z[k]);
        seq[k] = ft_gb_bytes(b, set);
    }
    ft_gb_alt(b, rule, seq, n);
}

ft_gsym ft_gb_chars(ft_gb *b, const uint32_t *ranges, int n_pairs, bool negate) {
    cp_range *r = ft_malloc((size_t)(n_pairs + 2) * sizeof(cp_range));
    int n = 0;
    for (int i = 0; i < n_pairs; i++) {
        uint32_t lo = ranges[2 * i], hi = FT_MIN(ranges[2 * i + 1], 0x10FFFFu);
        if (lo <= hi) r[n++] = (cp_range){lo, hi};
    }
    qsort(r, (size_t)n, sizeof(cp_range), by_lo);
    int m = 0; // merged
    for (int i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            r[m - 1].hi = FT_MAX(r[m - 1].hi, r[i].hi);
        } else {
            r[m++] = r[i];
        }
    }
    n = m;
    if (negate) { // the complement in [0, 0x10FFFF]
        cp_range *c = ft_malloc((size_t)(n + 1) * sizeof(cp_range));
        int k = 0;
        uint32_t from = 0;
        for (int i = 0; i < n; i++) {
            if (r[i].lo > from) c[k++] = (cp_range){from, r[i].lo - 1};
            from = r[i].hi + 1;
        }
        if (from <= 0x10FFFF) c[k++] = (cp_range){from, 0x10FFFF};
        free(r);
        r = c;
        n = k;
    }
    int rule = -1;
    uint64_t ascii[4] = {0};
    for (int i = 0; i < n; i++) {
        // surrogates have no UTF-8 encoding: split around them
        uint32_t lo = r[i].lo, hi = r[i].hi;
        if (hi >= 0x80 && rule < 0) rule = ft_gb_rule(b, "char");
        if (lo < 0xD800 && hi >= 0xD800) {
            utf8_split(b, rule, lo, 0xD7FF, ascii);
            lo = 0xE000;
        } else if (lo >= 0xD800 && lo <= 0xDFFF) {
            lo = 0xE000;
        }
        if (lo <= hi) utf8_split(b, rule, lo, hi, ascii);
    }
    free(r);
    bool any_ascii = ascii[0] | ascii[1];
    ft_gsym a = ft_gb_bytes(b, ascii);
    if (rule < 0) {
        if (!any_ascii) { // nothing matches: a rule without a way through
            rule = ft_gb_rule(b, "nothing");
            ft_gsym never = ft_gb_bytes(b, (uint64_t[4]){0});
            ft_gb_alt(b, rule, &never, 1);
            return ft_gb_ref(rule);
        }
        return a;
    }
    if (any_ascii) ft_gb_alt(b, rule, &a, 1);
    return ft_gb_ref(rule);
}

// ---------------------------------------------------------------------------------------------
// Repetition and groups

ft_gsym ft_gb_group(ft_gb *b, const ft_gsym *x, int n, const char *hint) {
    if (n == 1) return x[0];
    int r = ft_gb_rule(b, hint);
    ft_gb_alt(b, r, x, n);
    return ft_gb_ref(r);
}

ft_gsym ft_gb_repeat(ft_gb *b, const ft_gsym *x, int n, int min, int max, const char *hint) {
    int r = ft_gb_rule(b, hint);
    if (min < 0 || min > FT_GRAMMAR_MAX_REPEAT || max > FT_GRAMMAR_MAX_REPEAT || (max >= 0 && max < min)) {
        ft_gb_fail(b, "repetition {%d,%d} outside 0 <= min <= max <= %d", min, max, FT_GRAMMAR_MAX_REPEAT);
        return ft_gb_ref(r);
    }
    ft_gsym item = ft_gb_group(b, x, n, hint);
    ft_gseq q = {0};
    for (int i = 0; i < min; i++) ft_gseq_push(&q, item);
    if (max < 0) { // star ::= item star | (empty): right recursion, which the matcher runs in place
        int star = ft_gb_rule(b, hint);
        ft_gsym two[2] = {item, ft_gb_ref(star)};
        ft_gb_alt(b, star, two, 2);
        ft_gb_alt(b, star, NULL, 0);
        ft_gseq_push(&q, ft_gb_ref(star));
    } else if (max > min) { // opt_k ::= item opt_{k-1} | (empty); opt_1 ::= item | (empty)
        int prev = -1;
        for (int k = 1; k <= max - min && !b->failed; k++) {
            int o = ft_gb_rule(b, hint);
            ft_gsym two[2] = {item, prev >= 0 ? ft_gb_ref(prev) : item};
            ft_gb_alt(b, o, two, prev >= 0 ? 2 : 1);
            ft_gb_alt(b, o, NULL, 0);
            prev = o;
        }
        ft_gseq_push(&q, ft_gb_ref(prev));
    }
    ft_gb_alt(b, r, q.s, q.n);
    ft_gseq_free(&q);
    return ft_gb_ref(r);
}

// ---------------------------------------------------------------------------------------------
// Checks and the flat form

// Rules reachable from root, in the order found; *n_out of them. ids map old -> new (-1).
static int *reachable(const ft_gb *b, int root, int *ids, int *n_out) {
    int *order = ft_malloc((size_t)b->n_rules * sizeof(int));
    for (int i = 0; i < b->n_rules; i++) ids[i] = -1;
    int n = 0;
    ids[root] = n;
    order[n++] = root;
    for (int k = 0; k < n; k++) {
        const grule *r = &b->rules[order[k]];
        for (int a = 0; a < r->n_alts; a++) {
            const ft_gseq *q = &b->alts[r->alts[a]];
            for (int i = 0; i < q->n; i++)
                if (q->s[i].kind == FT_GSYM_RULE && ids[q->s[i].id] < 0) {
                    ids[q->s[i].id] = n;
                    order[n++] = (int)q->s[i].id;
                }
        }
    }
    *n_out = n;
    return order;
}

// Whether alternative q derives some string: every symbol a byte set with a byte in it or a
// productive rule (productive[]: by the rules' new ids).
static bool alt_productive(const ft_gb *b, const ft_gseq *q, const int *ids, const bool *productive) {
    for (int i = 0; i < q->n; i++) {
        if (q->s[i].kind == FT_GSYM_RULE) {
            if (!productive[ids[q->s[i].id]]) return false;
        } else {
            const uint64_t *set = b->sets[q->s[i].id];
            if (!(set[0] | set[1] | set[2] | set[3])) return false;
        }
    }
    return true;
}

// Left recursion: an edge r -> s where s starts an alternative of r after nullable symbols
// only; a cycle of such edges would make the matcher expand forever. Iterative DFS (a deep
// chain of rules must not overflow the C stack). Returns the rule on a cycle, or -1.
static int left_cycle(const ft_gb *b, const int *order, int n, const int *ids, const bool *nullable,
                      const bool *productive) {
    // edges as lists
    int *head = ft_malloc((size_t)n * sizeof(int)), *next = NULL, *to = NULL;
    int n_edges = 0, cap = 0;
    for (int i = 0; i < n; i++) head[i] = -1;
    for (int k = 0; k < n; k++) {
        const grule *r = &b->rules[order[k]];
        for (int a = 0; a < r->n_alts; a++) {
            const ft_gseq *q = &b->alts[r->alts[a]];
            if (!alt_productive(b, q, ids, productive)) continue;
            for (int i = 0; i < q->n && q->s[i].kind == FT_GSYM_RULE; i++) {
                if (n_edges == cap) {
                    cap = cap ? 2 * cap : 64;
                    next = ft_realloc(next, (size_t)cap * sizeof(int));
                    to = ft_realloc(to, (size_t)cap * sizeof(int));
                }
                int s = ids[q->s[i].id];
                to[n_edges] = s;
                next[n_edges] = head[k];
                head[k] = n_edges++;
                if (!nullable[s]) break;
            }
        }
    }
    uint8_t *color = ft_calloc((size_t)n, 1); // 0 new, 1 on the path, 2 done
    int *stack = ft_malloc((size_t)n * sizeof(int)), *edge = ft_malloc((size_t)n * sizeof(int));
    int found = -1;
    for (int s0 = 0; s0 < n && found < 0; s0++) {
        if (color[s0]) continue;
        int sp = 0;
        stack[sp] = s0, edge[sp] = head[s0], color[s0] = 1, sp++;
        while (sp > 0 && found < 0) {
            int v = stack[sp - 1], e = edge[sp - 1];
            if (e < 0) {
                color[v] = 2;
                sp--;
                continue;
            }
            edge[sp - 1] = next[e];
            int w = to[e];
            if (color[w] == 1) found = w;
            else if (color[w] == 0) stack[sp] = w, edge[sp] = head[w], color[w] = 1, sp++;
        }
    }
    free(head);
    free(next);
    free(to);
    free(color);
    free(stack);
    free(edge);
    return found;
}

ft_grammar *ft_gb_finish(ft_gb *b, int root, ft_err *err) {
    if (b->failed) return ft_err_set(err, "%s", b->err), NULL;
    if (root < 0 || root >= b->n_rules) return ft_err_set(err, "no root rule"), NULL;
    int *ids = ft_malloc((size_t)b->n_rules * sizeof(int)), n = 0;
    int *order = reachable(b, root, ids, &n);
    ft_grammar *g = NULL;
    bool *nullable = ft_calloc((size_t)n, sizeof(bool)), *productive = ft_calloc((size_t)n, sizeof(bool));
    for (int k = 0; k < n; k++)
        if (b->rules[order[k]].n_alts == 0) {
            ft_err_set(err, "rule '%s' is not defined", b->rules[order[k]].name);
            goto out;
        }
    // productive rules (a fixed point); the alternatives that derive no string are left out, so
    // every state the matcher reaches can still be completed (a mask is never empty for a
    // vocabulary that has every byte)
    for (bool changed = true; changed;) {
        changed = false;
        for (int k = 0; k < n; k++) {
            const grule *r = &b->rules[order[k]];
            for (int a = 0; a < r->n_alts && !productive[k]; a++)
                if (alt_productive(b, &b->alts[r->alts[a]], ids, productive)) productive[k] = changed = true;
        }
    }
    if (!productive[0]) {
        ft_err_set(err, "the grammar matches no string at all");
        goto out;
    }
    for (bool changed = true; changed;) { // nullable rules: a fixed point
        changed = false;
        for (int k = 0; k < n; k++) {
            if (nullable[k]) continue;
            const grule *r = &b->rules[order[k]];
            for (int a = 0; a < r->n_alts && !nullable[k]; a++) {
                const ft_gseq *q = &b->alts[r->alts[a]];
                int i = 0;
                while (i < q->n && q->s[i].kind == FT_GSYM_RULE && nullable[ids[q->s[i].id]]) i++;
                if (i == q->n) nullable[k] = changed = true;
            }
        }
    }
    int cyc = left_cycle(b, order, n, ids, nullable, productive);
    if (cyc >= 0) {
        ft_err_set(err, "rule '%s' is left-recursive (it reaches itself before any byte)", b->rules[order[cyc]].name);
        goto out;
    }
    g = ft_calloc(1, sizeof(*g));
    g->n_rule = (uint32_t)n;
    g->rule_alt = ft_malloc(((size_t)n + 1) * sizeof(uint32_t));
    size_t n_alt = 0, n_sym = 0;
    for (int k = 0; k < n; k++) {
        const grule *r = &b->rules[order[k]];
        n_alt += (size_t)r->n_alts;
        for (int a = 0; a < r->n_alts; a++) n_sym += (size_t)b->alts[r->alts[a]].n + 1;
    }
    g->alt_pos = ft_malloc(FT_MAX(n_alt, 1) * sizeof(uint32_t));
    g->sym = ft_malloc((n_sym + 1) * sizeof(uint32_t));
    uint32_t na = 0, ns = 0;
    for (int k = 0; k < n; k++) {
        const grule *r = &b->rules[order[k]];
        g->rule_alt[k] = na;
        for (int a = 0; a < r->n_alts; a++) {
            const ft_gseq *q = &b->alts[r->alts[a]];
            if (!alt_productive(b, q, ids, productive)) continue;
            g->alt_pos[na++] = ns;
            for (int i = 0; i < q->n; i++)
                g->sym[ns++] = q->s[i].kind == FT_GSYM_RULE ? GSYM_MAKE(FT_GSYM_RULE, ids[q->s[i].id])
                                                           : GSYM_MAKE(FT_GSYM_BYTES, q->s[i].id);
            g->sym[ns++] = GSYM_END;
        }
    }
    g->sym[ns] = GSYM_END; // never read: positions stay inside alternatives
    g->rule_alt[n] = na;
    g->n_alt = na;
    g->n_sym = ns;
    g->n_set = (uint32_t)b->n_sets;
    g->set = ft_malloc(FT_MAX((size_t)b->n_sets, 1) * sizeof(*g->set));
    if (b->n_sets) memcpy(g->set, b->sets, (size_t)b->n_sets * sizeof(*g->set));
    g->root = 0;
out:
    free(ids);
    free(order);
    free(nullable);
    free(productive);
    return g;
}

void ft_grammar_free(ft_grammar *g) {
    if (!g) return;
    free(g->sym);
    free(g->alt_pos);
    free(g->rule_alt);
    free(g->set);
    free(g);
}

size_t ft_grammar_n_symbols(const ft_grammar *g) { return g->n_sym; }
