// jinja_parse.c: tokens to an AST, with llama.cpp's grammar and precedence (lowest first):
//
//   expression := or ["if" or ["else" expression]]      (no else: a select, undefined if false)
//   or := and ("or" and)*        and := not ("and" not)*        not := "not" not | comparison
//   comparison := additive (("in" | "not in" | == != < > <= >=) additive)*
//   additive := multiplicative ((+ - ~) multiplicative)*
//   multiplicative := test ((* / // %) test)*
//   test := filter ("is" ["not"] primary [call])*
//   filter := call_member ("|" primary [call])*
//   call_member := primary member* [call]     call := "(" args ")" member* [call]
//   member := "." primary | "[" (expression | slice | nothing) "]"
//   primary := number | string+ | name | "(" expression ("," expression)* ")" | list | dict
//
// Statements: set (a name, names, or a.b; "= value" or a block up to endset), if/elif/else,
// for NAME[, NAME...] in ITERABLE [if TEST] ... [else] ... endfor, macro NAME(params), filter,
// break, continue, generation/endgeneration (ignored). {% call %} is not supported.
#include "jinja_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// How deep statements and expressions may nest (the parser recurses once per level).
#define JINJA_MAX_NESTING 256

// ---------------------------------------------------------------------------------------------
// Arena

struct jarena {
    jarena *next;
    size_t used, cap;
    _Alignas(16) char data[];
};

void *jarena_alloc(jarena **a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (!*a || (*a)->used + size > (*a)->cap) {
        size_t cap = size > 65536 ? size : 65536;
        jarena *b = ft_malloc(sizeof(jarena) + cap);
        b->next = *a;
        b->used = 0;
        b->cap = cap;
        *a = b;
    }
    void *p = (*a)->data + (*a)->used;
    (*a)->used += size;
    memset(p, 0, size);
    return p;
}

void jarena_free(jarena *a) {
    while (a) {
        jarena *next = a->next;
        free(a);
        a = next;
    }
}

// A static string in the arena (a template literal): never counted or freed by a render.
static jstr *jstr_static(jarena **a, const char *s, size_t len) {
    jstr *j = jarena_alloc(a, sizeof(jstr) + len + 1);
    j->h.is_static = true;
    j->h.kind = JOBJ_STR;
    j->len = len;
    j->s = (char *)(j + 1);
    memcpy(j->s, s, len);
    j->s[len] = 0;
    return j;
}

void jinja_line_col(const char *src, size_t len, size_t pos, int *line, int *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < pos && i < len; i++) {
        if (src[i] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

// ---------------------------------------------------------------------------------------------
// Parser state

typedef struct parser {
    tok_jinja *t;
    const jtok *toks;
    size_t n, cur;
    int depth;
    ft_err *err;
    bool failed;
} parser;

static const jtok g_eof = {JT_EOF, "", 0, 0};

static const jtok *peek(parser *P, size_t k) { return P->cur + k < P->n ? &P->toks[P->cur + k] : &g_eof; }

static void *fail(parser *P, const jtok *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void *fail(parser *P, const jtok *at, const char *fmt, ...) {
    if (P->failed) return NULL;
    P->failed = true;
    size_t pos = at == &g_eof ? P->t->len : at->pos;
    int line, col;
    jinja_line_col(P->t->src, P->t->len, pos, &line, &col);
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ft_err_set(P->err, "line %d, column %d: %s", line, col, msg);
    return NULL;
}

static bool is(parser *P, jtok_type t) { return peek(P, 0)->t == t; }

static bool tok_is_word(const jtok *t, const char *w) {
    return t->t == JT_IDENT && t->n == strlen(w) && !memcmp(t->s, w, t->n);
}
static bool is_word(parser *P, const char *w) { return tok_is_word(peek(P, 0), w); }

static const char *tok_desc(const jtok *t) {
    static const char *const names[] = {
        [JT_EOF] = "the end of the template", [JT_TEXT] = "text", [JT_NUM] = "a number",
        [JT_STR] = "a string", [JT_IDENT] = "a name", [JT_EQUALS] = "'='", [JT_LPAREN] = "'('",
        [JT_RPAREN] = "')'", [JT_OPEN_STMT] = "'{%'", [JT_CLOSE_STMT] = "'%}'", [JT_OPEN_EXPR] = "'{{'",
        [JT_CLOSE_EXPR] = "'}}'", [JT_LBRACKET] = "'['", [JT_RBRACKET] = "']'", [JT_LBRACE] = "'{'",
        [JT_RBRACE] = "'}'", [JT_COMMA] = "','", [JT_DOT] = "'.'", [JT_COLON] = "':'", [JT_PIPE] = "'|'",
        [JT_ADD] = "an operator", [JT_MUL] = "an operator", [JT_CMP] = "a comparison",
        [JT_UNARY] = "a unary operator", [JT_COMMENT] = "a comment",
    };
    return names[t->t];
}

static bool expect(parser *P, jtok_type t, const char *what) {
    if (P->failed) return false;
    if (!is(P, t)) {
        fail(P, peek(P, 0), "expected %s, got %s", what, tok_desc(peek(P, 0)));
        return false;
    }
    P->cur++;
    return true;
}

static bool expect_word(parser *P, const char *w) {
    if (P->failed) return false;
    if (!is_word(P, w)) {
        fail(P, peek(P, 0), "expected '%s', got %s", w, tok_desc(peek(P, 0)));
        return false;
    }
    P->cur++;
    return true;
}

// {% NAME where NAME is one of names (NULL-terminated)
static bool is_statement(parser *P, const char *const *names) {
    if (peek(P, 0)->t != JT_OPEN_STMT || peek(P, 1)->t != JT_IDENT) return false;
    for (; *names; names++)
        if (tok_is_word(peek(P, 1), *names)) return true;
    return false;
}

static jnode *node(parser *P, jnode_kind kind, const jtok *at) {
    jnode *n = jarena_alloc(&P->t->arena, sizeof(jnode));
    n->kind = (uint8_t)kind;
    n->pos = at->pos;
    return n;
}

// A growable node list, copied into the arena when done.
typedef struct nlist {
    jnode **v;
    uint32_t n, cap;
} nlist;

static void nl_push(nlist *l, jnode *x) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->v = ft_realloc(l->v, l->cap * sizeof(jnode *));
    }
    l->v[l->n++] = x;
}

static jnode **nl_done(parser *P, nlist *l, uint32_t *n) {
    *n = l->n;
    jnode **out = l->n ? jarena_alloc(&P->t->arena, l->n * sizeof(jnode *)) : NULL;
    if (l->n) memcpy(out, l->v, l->n * sizeof(jnode *));
    free(l->v);
    *l = (nlist){0};
    return out;
}

static int32_t intern(parser *P, const char *s, size_t n) {
    tok_jinja *t = P->t;
    for (int32_t i = 0; i < t->n_syms; i++)
        if (strlen(t->syms[i]) == n && !memcmp(t->syms[i], s, n)) return i;
    if ((t->n_syms & (t->n_syms - 1)) == 0) // grow at powers of two
        t->syms = ft_realloc(t->syms, (size_t)(t->n_syms ? 2 * t->n_syms : 16) * sizeof(char *));
    char *c = jarena_alloc(&t->arena, n + 1);
    memcpy(c, s, n);
    t->syms[t->n_syms] = c;
    return t->n_syms++;
}

static bool enter(parser *P) {
    if (++P->depth > JINJA_MAX_NESTING) {
        fail(P, peek(P, 0), "the template nests deeper than %d levels", JINJA_MAX_NESTING);
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Expressions

static jnode *parse_expression(parser *P);
static jnode *parse_primary(parser *P);
static jnode *parse_statement_or_text(parser *P);

static jnode *parse_expression_sequence(parser *P, bool primary) {
    const jtok *start = peek(P, 0);
    nlist l = {0};
    jnode *e = primary ? parse_primary(P) : parse_expression(P);
    if (!e) return NULL;
    if (!is(P, JT_COMMA)) return e;
    nl_push(&l, e);
    while (is(P, JT_COMMA)) {
        P->cur++;
        e = primary ? parse_primary(P) : parse_expression(P);
        if (!e) {
            free(l.v);
            return NULL;
        }
        nl_push(&l, e);
    }
    jnode *n = node(P, JN_TUPLE, start);
    n->items = nl_done(P, &l, &n->n_items);
    return n;
}

// "(" args ")": expressions, name=value, *expression
static bool parse_args(parser *P, jnode ***items, uint32_t *n_items) {
    if (!expect(P, JT_LPAREN, "'('")) return false;
    nlist l = {0};
    while (!is(P, JT_RPAREN)) {
        jnode *arg;
        if (is(P, JT_MUL) && peek(P, 0)->n == 1 && peek(P, 0)->s[0] == '*') {
            const jtok *at = peek(P, 0);
            P->cur++;
            jnode *e = parse_expression(P);
            if (!e) break;
            arg = node(P, JN_SPREAD, at);
            arg->a = e;
        } else {
            arg = parse_expression(P);
            if (!arg) break;
            if (is(P, JT_EQUALS)) {
                const jtok *at = peek(P, 0);
                P->cur++;
                jnode *v = parse_expression(P);
                if (!v) break;
                jnode *kw = node(P, JN_KWARG, at);
                kw->a = arg, kw->b = v;
                arg = kw;
            }
        }
        nl_push(&l, arg);
        if (is(P, JT_COMMA)) P->cur++;
    }
    if (P->failed || !expect(P, JT_RPAREN, "')'")) {
        free(l.v);
        return false;
    }
    *items = nl_done(P, &l, n_items);
    return true;
}

// Inside [ ]: an expression, a slice a:b:c (parts optional), or nothing.
static jnode *parse_subscript(parser *P) {
    const jtok *start = peek(P, 0);
    jnode *parts[3] = {NULL, NULL, NULL};
    size_t n = 0;
    bool slice = false;
    while (!is(P, JT_RBRACKET)) {
        jnode *e = NULL;
        if (is(P, JT_COLON)) {
            P->cur++;
            slice = true;
        } else {
            e = parse_expression(P);
            if (!e) return NULL;
            if (is(P, JT_COLON)) P->cur++, slice = true;
        }
        if (n < 3) parts[n] = e;
        n++;
    }
    if (slice) {
        jnode *s = node(P, JN_SLICE, start);
        s->a = parts[0], s->b = parts[1], s->c = parts[2];
        return s;
    }
    if (n == 0) return node(P, JN_BLANK, start);
    return parts[0];
}

static jnode *parse_member(parser *P, jnode *obj) {
    while (obj && (is(P, JT_DOT) || is(P, JT_LBRACKET))) {
        const jtok *op = peek(P, 0);
        P->cur++;
        jnode *m;
        if (op->t == JT_LBRACKET) {
            jnode *prop = parse_subscript(P);
            if (!prop || !expect(P, JT_RBRACKET, "']'")) return NULL;
            m = node(P, JN_INDEX, op);
            m->b = prop;
        } else {
            jnode *prop = parse_primary(P);
            if (!prop) return NULL;
            m = node(P, JN_MEMBER, op);
            m->b = prop;
        }
        m->a = obj;
        obj = m;
    }
    return obj;
}

static jnode *parse_call(parser *P, jnode *callee) {
    while (callee) {
        jnode *c = node(P, JN_CALL, peek(P, 0));
        c->a = callee;
        if (!parse_args(P, &c->items, &c->n_items)) return NULL;
        callee = parse_member(P, c);
        if (!callee || !is(P, JT_LPAREN)) return callee;
    }
    return NULL;
}

static jnode *parse_call_member(parser *P) {
    jnode *m = parse_member(P, parse_primary(P));
    if (m && is(P, JT_LPAREN)) return parse_call(P, m);
    return m;
}

static jnode *parse_filter(parser *P) {
    jnode *operand = parse_call_member(P);
    while (operand && is(P, JT_PIPE)) {
        const jtok *at = peek(P, 0);
        P->cur++;
        jnode *f = parse_primary(P);
        if (f && is(P, JT_LPAREN)) f = parse_call(P, f);
        if (!f) return NULL;
        jnode *n = node(P, JN_FILTER, at);
        n->a = operand, n->b = f;
        operand = n;
    }
    return operand;
}

static jnode *parse_test(parser *P) {
    jnode *operand = parse_filter(P);
    while (operand && is_word(P, "is")) {
        const jtok *at = peek(P, 0);
        P->cur++;
        bool negate = false;
        if (is_word(P, "not")) P->cur++, negate = true;
        jnode *t = parse_primary(P);
        if (t && is(P, JT_LPAREN)) t = parse_call(P, t);
        if (!t) return NULL;
        jnode *n = node(P, JN_TEST, at);
        n->a = operand, n->b = t, n->op = negate;
        operand = n;
    }
    return operand;
}

static jop op_of(const jtok *t) {
    static const struct {
        const char *s;
        jop op;
    } ops[] = {{"==", JOP_EQ}, {"!=", JOP_NE}, {"<", JOP_LT},  {">", JOP_GT},      {"<=", JOP_LE},
               {">=", JOP_GE}, {"+", JOP_ADD}, {"-", JOP_SUB}, {"~", JOP_CONCAT},  {"*", JOP_MUL},
               {"/", JOP_DIV}, {"//", JOP_FLOORDIV},           {"%", JOP_MOD}};
    for (size_t i = 0; i < FT_ARRAY_LEN(ops); i++)
        if (t->n == strlen(ops[i].s) && !memcmp(t->s, ops[i].s, t->n)) return ops[i].op;
    return 0;
}

static jnode *binary(parser *P, const jtok *at, jop op, jnode *a, jnode *b) {
    if (!a || !b) return NULL;
    jnode *n = node(P, JN_BINARY, at);
    n->op = (uint8_t)op;
    n->a = a, n->b = b;
    return n;
}

static jnode *parse_multiplicative(parser *P) {
    jnode *left = parse_test(P);
    while (left && is(P, JT_MUL)) {
        const jtok *op = peek(P, 0);
        P->cur++;
        left = binary(P, op, op_of(op), left, parse_test(P));
    }
    return left;
}

static jnode *parse_additive(parser *P) {
    jnode *left = parse_multiplicative(P);
    while (left && is(P, JT_ADD)) {
        const jtok *op = peek(P, 0);
        P->cur++;
        left = binary(P, op, op_of(op), left, parse_multiplicative(P));
    }
    return left;
}

static jnode *parse_comparison(parser *P) {
    jnode *left = parse_additive(P);
    while (left) {
        const jtok *at = peek(P, 0);
        jop op;
        if (is_word(P, "not") && tok_is_word(peek(P, 1), "in")) {
            op = JOP_NOT_IN;
            P->cur += 2;
        } else if (is_word(P, "in")) {
            op = JOP_IN;
            P->cur++;
        } else if (is(P, JT_CMP)) {
            op = op_of(at);
            P->cur++;
        } else {
            break;
        }
        left = binary(P, at, op, left, parse_additive(P));
    }
    return left;
}

static jnode *parse_not(parser *P) {
    if (is_word(P, "not")) {
        const jtok *at = peek(P, 0);
        P->cur++;
        if (!enter(P)) return NULL;
        jnode *a = parse_not(P);
        P->depth--;
        if (!a) return NULL;
        jnode *n = node(P, JN_NOT, at);
        n->a = a;
        return n;
    }
    return parse_comparison(P);
}

static jnode *parse_and(parser *P) {
    jnode *left = parse_not(P);
    while (left && is_word(P, "and")) {
        const jtok *at = peek(P, 0);
        P->cur++;
        left = binary(P, at, JOP_AND, left, parse_not(P));
    }
    return left;
}

static jnode *parse_or(parser *P) {
    jnode *left = parse_and(P);
    while (left && is_word(P, "or")) {
        const jtok *at = peek(P, 0);
        P->cur++;
        left = binary(P, at, JOP_OR, left, parse_and(P));
    }
    return left;
}

static jnode *parse_expression(parser *P) {
    if (!enter(P)) return NULL;
    jnode *a = parse_or(P), *res = a;
    if (a && is_word(P, "if")) {
        const jtok *at = peek(P, 0);
        P->cur++;
        jnode *test = parse_or(P);
        if (!test) {
            res = NULL;
        } else if (is_word(P, "else")) {
            at = peek(P, 0);
            P->cur++;
            jnode *no = parse_expression(P);
            res = NULL;
            if (no) {
                res = node(P, JN_TERNARY, at);
                res->a = test, res->b = a, res->c = no;
            }
        } else {
            res = node(P, JN_SELECT, at);
            res->a = test, res->b = a;
        }
    }
    P->depth--;
    return res;
}

static jnode *parse_primary(parser *P) {
    if (P->failed) return NULL;
    const jtok *t = peek(P, 0);
    if (t->t == JT_EOF) return fail(P, t, "unexpected end of template");
    P->cur++;
    switch (t->t) {
    case JT_NUM: {
        char buf[64];
        if (t->n >= sizeof(buf)) return fail(P, t, "number out of range");
        memcpy(buf, t->s, t->n);
        buf[t->n] = 0;
        char *end;
        errno = 0;
        jnode *n;
        if (memchr(t->s, '.', t->n)) {
            n = node(P, JN_FLOAT, t);
            n->f = strtod(buf, &end);
        } else {
            n = node(P, JN_INT, t);
            n->i = strtoll(buf, &end, 10);
            if (errno == ERANGE) return fail(P, t, "number out of range");
        }
        return n;
    }
    case JT_STR: {
        // adjacent string literals are one string
        size_t len = t->n, k = P->cur;
        while (k < P->n && P->toks[k].t == JT_STR) len += P->toks[k++].n;
        jnode *n = node(P, JN_STR, t);
        char *buf = ft_malloc(len + 1);
        memcpy(buf, t->s, t->n);
        size_t at = t->n;
        for (; P->cur < k; P->cur++) {
            memcpy(buf + at, P->toks[P->cur].s, P->toks[P->cur].n);
            at += P->toks[P->cur].n;
        }
        n->str = jstr_static(&P->t->arena, buf, len);
        free(buf);
        return n;
    }
    case JT_IDENT: {
        jnode *n = node(P, JN_NAME, t);
        n->sym = intern(P, t->s, t->n);
        return n;
    }
    case JT_LPAREN: {
        if (!enter(P)) return NULL;
        jnode *e = parse_expression_sequence(P, false);
        P->depth--;
        if (!e || !expect(P, JT_RPAREN, "')'")) return NULL;
        return e;
    }
    case JT_LBRACKET: {
        if (!enter(P)) return NULL;
        nlist l = {0};
        while (!is(P, JT_RBRACKET)) {
            jnode *e = parse_expression(P);
            if (!e) {
                free(l.v);
                return NULL;
            }
            nl_push(&l, e);
            if (is(P, JT_COMMA)) P->cur++;
        }
        P->cur++;
        P->depth--;
        jnode *n = node(P, JN_LIST, t);
        n->items = nl_done(P, &l, &n->n_items);
        return n;
    }
    case JT_LBRACE: {
        if (!enter(P)) return NULL;
        nlist l = {0};
        while (!is(P, JT_RBRACE)) {
            jnode *k = parse_expression(P);
            jnode *v = k && expect(P, JT_COLON, "':'") ? parse_expression(P) : NULL;
            if (!v) {
                free(l.v);
                return NULL;
            }
            nl_push(&l, k);
            nl_push(&l, v);
            if (is(P, JT_COMMA)) P->cur++;
        }
        P->cur++;
        P->depth--;
        jnode *n = node(P, JN_DICT, t);
        n->items = nl_done(P, &l, &n->n_items);
        return n;
    }
    default:
        return fail(P, t, "unexpected %s", tok_desc(t));
    }
}

// ---------------------------------------------------------------------------------------------
// Statements

// Statements up to one of the closing tags in ends (not consumed).
static bool parse_body(parser *P, const char *const *ends, jnode ***items, uint32_t *n_items) {
    nlist l = {0};
    while (!is_statement(P, ends)) {
        if (is(P, JT_EOF)) {
            fail(P, peek(P, 0), "unexpected end of template: expected {%% %s %%}", ends[0]);
            break;
        }
        jnode *s = parse_statement_or_text(P);
        if (!s) break;
        nl_push(&l, s);
    }
    if (P->failed) {
        free(l.v);
        return false;
    }
    *items = nl_done(P, &l, n_items);
    return true;
}

// {% end %}
static bool parse_end(parser *P, const char *word) {
    return expect(P, JT_OPEN_STMT, "'{%'") && expect_word(P, word) && expect(P, JT_CLOSE_STMT, "'%}'");
}

static jnode *parse_if(parser *P, const jtok *at) {
    jnode *n = node(P, JN_IF, at);
    n->a = parse_expression(P);
    if (!n->a || !expect(P, JT_CLOSE_STMT, "'%}'")) return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (!parse_body(P, ends, &n->items, &n->n_items)) return NULL;
    if (is_statement(P, (const char *const[]){"elif", NULL})) {
        const jtok *elif = peek(P, 0);
        P->cur += 2;
        if (!enter(P)) return NULL;
        jnode *e = parse_if(P, elif);
        P->depth--;
        if (!e) return NULL;
        n->alt = jarena_alloc(&P->t->arena, sizeof(jnode *));
        n->alt[0] = e;
        n->n_alt = 1;
    } else if (is_statement(P, (const char *const[]){"else", NULL})) {
        P->cur += 2;
        static const char *const endif[] = {"endif", NULL};
        if (!expect(P, JT_CLOSE_STMT, "'%}'") || !parse_body(P, endif, &n->alt, &n->n_alt)) return NULL;
    }
    return n;
}

static jnode *parse_statement(parser *P) {
    if (!expect(P, JT_OPEN_STMT, "'{%'")) return NULL;
    const jtok *name = peek(P, 0);
    if (name->t != JT_IDENT) return fail(P, name, "expected a statement name, got %s", tok_desc(name));
    P->cur++;
    if (!enter(P)) return NULL;
    jnode *n = NULL;
    if (tok_is_word(name, "set")) {
        n = node(P, JN_SET, name);
        n->a = parse_expression_sequence(P, false);
        if (!n->a) goto out;
        if (is(P, JT_EQUALS)) {
            P->cur++;
            n->b = parse_expression_sequence(P, false);
            if (!n->b) goto out;
        } else {
            static const char *const ends[] = {"endset", NULL};
            if (!expect(P, JT_CLOSE_STMT, "'%}'") || !parse_body(P, ends, &n->items, &n->n_items) ||
                !expect(P, JT_OPEN_STMT, "'{%'") || !expect_word(P, "endset"))
                goto out;
        }
        if (!expect(P, JT_CLOSE_STMT, "'%}'")) goto out;
    } else if (tok_is_word(name, "if")) {
        n = parse_if(P, name);
        if (!n || !parse_end(P, "endif")) goto out;
    } else if (tok_is_word(name, "macro")) {
        n = node(P, JN_MACRO, name);
        n->a = parse_primary(P);
        static const char *const ends[] = {"endmacro", NULL};
        if (!n->a || !parse_args(P, &n->alt, &n->n_alt) || !expect(P, JT_CLOSE_STMT, "'%}'") ||
            !parse_body(P, ends, &n->items, &n->n_items) || !parse_end(P, "endmacro"))
            goto out;
    } else if (tok_is_word(name, "for")) {
        n = node(P, JN_FOR, name);
        n->a = parse_expression_sequence(P, true);
        if (!n->a) goto out;
        if (!is_word(P, "in")) {
            fail(P, peek(P, 0), "expected 'in', got %s", tok_desc(peek(P, 0)));
            goto out;
        }
        P->cur++;
        n->b = parse_expression(P);
        static const char *const ends[] = {"endfor", "else", NULL};
        if (!n->b || !expect(P, JT_CLOSE_STMT, "'%}'") || !parse_body(P, ends, &n->items, &n->n_items)) goto out;
        if (is_statement(P, (const char *const[]){"else", NULL})) {
            P->cur += 2;
            static const char *const endfor[] = {"endfor", NULL};
            if (!expect(P, JT_CLOSE_STMT, "'%}'") || !parse_body(P, endfor, &n->alt, &n->n_alt)) goto out;
        }
        if (!parse_end(P, "endfor")) goto out;
    } else if (tok_is_word(name, "break") || tok_is_word(name, "continue")) {
        if (!expect(P, JT_CLOSE_STMT, "'%}'")) goto out;
        n = node(P, tok_is_word(name, "break") ? JN_BREAK : JN_CONTINUE, name);
    } else if (tok_is_word(name, "filter")) {
        n = node(P, JN_FILTER_BLOCK, name);
        n->a = parse_primary(P);
        if (n->a && n->a->kind == JN_NAME && is(P, JT_LPAREN)) n->a = parse_call(P, n->a);
        static const char *const ends[] = {"endfilter", NULL};
        if (!n->a || !expect(P, JT_CLOSE_STMT, "'%}'") || !parse_body(P, ends, &n->items, &n->n_items) ||
            !parse_end(P, "endfilter"))
            goto out;
    } else if (tok_is_word(name, "generation") || tok_is_word(name, "endgeneration")) {
        // transformers' markers of assistant text: ignored, as llama.cpp does (with the next token)
        n = node(P, JN_NOOP, name);
        P->cur++;
    } else {
        fail(P, name, "unknown statement '%.*s'", (int)FT_MIN(name->n, 40), name->s);
    }
out:
    P->depth--;
    return P->failed ? NULL : n;
}

static jnode *parse_statement_or_text(parser *P) {
    const jtok *t = peek(P, 0);
    switch (t->t) {
    case JT_COMMENT: {
        P->cur++;
        return node(P, JN_NOOP, t);
    }
    case JT_TEXT: {
        P->cur++;
        jnode *n = node(P, JN_TEXT, t);
        n->str = jstr_static(&P->t->arena, t->s, t->n);
        return n;
    }
    case JT_OPEN_STMT:
        return parse_statement(P);
    case JT_OPEN_EXPR: {
        P->cur++;
        jnode *n = node(P, JN_EMIT, t);
        n->a = parse_expression(P);
        if (!n->a || !expect(P, JT_CLOSE_EXPR, "'}}'")) return NULL;
        return n;
    }
    default:
        return fail(P, t, "unexpected %s", tok_desc(t));
    }
}

bool jinja_parse(tok_jinja *t, const jtok *toks, size_t n_toks, ft_err *err) {
    parser P = {.t = t, .toks = toks, .n = n_toks, .err = err};
    nlist body = {0};
    while (P.cur < P.n) {
        jnode *s = parse_statement_or_text(&P);
        if (!s) break;
        nl_push(&body, s);
    }
    if (P.failed) {
        free(body.v);
        return false;
    }
    t->body = nl_done(&P, &body, &t->n_body);
    return true;
}

// ---------------------------------------------------------------------------------------------

tok_jinja *tok_jinja_parse(const char *src, size_t len, ft_err *err) {
    if (len > (size_t)UINT32_MAX - 1) {
        ft_err_set(err, "the template is larger than 4 GiB");
        return NULL;
    }
    tok_jinja *t = ft_calloc(1, sizeof(*t));
    // "\r\n" and "\r" read as "\n"; one trailing newline dropped (as llama.cpp's lexer does)
    t->src = ft_malloc(len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            t->src[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            t->src[n++] = src[i];
        }
    }
    if (len && src[len - 1] == '\n') n--;
    t->src[n] = 0;
    t->len = n;
    jtok *toks = NULL;
    size_t n_toks = 0;
    bool ok = jinja_lex(t, &toks, &n_toks, err) && jinja_parse(t, toks, n_toks, err);
    free(toks);
    static const char *const loop_keys[] = {"index", "index0", "revindex", "revindex0", "first",
                                            "last",  "length", "previtem", "nextitem"};
    for (int k = 0; ok && k < 9; k++) t->loop_keys[k] = jstr_static(&t->arena, loop_keys[k], strlen(loop_keys[k]));
    if (!ok) {
        tok_jinja_free(t);
        return NULL;
    }
    return t;
}

bool tok_jinja_names(const tok_jinja *t, const char *name) {
    for (int32_t i = 0; i < t->n_syms; i++)
        if (!strcmp(t->syms[i], name)) return true;
    return false;
}

void tok_jinja_free(tok_jinja *t) {
    if (!t) return;
    jarena_free(t->arena);
    free(t->syms);
    free(t->src);
    free(t);
}
