// gbnf.c: llama.cpp's GBNF grammar text into a builder (see grammar.h).
//
//   grammar  ::= rule*                       rule ::= name "::=" alts (newline | end)
//   alts     ::= seq ("|" seq)*              seq  ::= (primary postfix*)*
//   primary  ::= name | "literal" | [class] | [^class] | "." | "(" alts ")"
//   postfix  ::= "*" | "+" | "?" | "{" m "}" | "{" m "," "}" | "{" m "," n "}"
//
// Names are [a-zA-Z0-9-]+; white space and # comments separate items; a newline ends a rule
// except inside parentheses or after "|". Characters are code points: UTF-8 in the text or the
// escapes \xHH \uHHHH \UHHHHHHHH \t \r \n \\ \" \[ \] \-. The parser never reads past len.
#include "grammar_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NESTING 128 // parentheses inside each other

typedef struct {
    const char *s, *p, *end;
    ft_gb *b;
    char err[256];
    bool failed;
    int depth;
} parser;

static bool fail(parser *ps, const char *what) {
    if (ps->failed) return false;
    ps->failed = true;
    int line = 1, col = 1;
    for (const char *q = ps->s; q < ps->p; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    snprintf(ps->err, sizeof(ps->err), "line %d, column %d: %s", line, col, what);
    return false;
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static int peek(const parser *ps) { return ps->p < ps->end ? (unsigned char)*ps->p : -1; }

// Skips spaces, tabs and comments; newlines too when newline_ok.
static void space(parser *ps, bool newline_ok) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r') ps->p++;
        } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            ps->p++;
        } else {
            break;
        }
    }
}

static bool hex(parser *ps, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++, ps->p++) {
        int c = peek(ps), d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(ps, "expecting a hex digit");
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return true;
}

// One UTF-8 character of the text.
static bool utf8(parser *ps, uint32_t *out) {
    const unsigned char *s = (const unsigned char *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!n || (size_t)n > left) return fail(ps, "invalid UTF-8");
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return fail(ps, "invalid UTF-8");
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail(ps, "invalid UTF-8");
    ps->p += n;
    *out = v;
    return true;
}

// One character of a literal or class: an escape or a UTF-8 character.
static bool character(parser *ps, uint32_t *out) {
    if (ps->p >= ps->end) return fail(ps, "unexpected end of input");
    if (*ps->p == 0) return fail(ps, "a NUL byte in the grammar");
    if (*ps->p != '\\') return utf8(ps, out);
    ps->p++;
    int c = peek(ps);
    ps->p++;
    switch (c) {
    case 'x': return hex(ps, 2, out);
    case 'u': return hex(ps, 4, out);
    case 'U': return hex(ps, 8, out);
    case 't': *out = '\t'; return true;
    case 'r': *out = '\r'; return true;
    case 'n': *out = '\n'; return true;
    case '\\': case '"': case '[': case ']': case '-': *out = (uint32_t)c; return true;
    default: ps->p--; return fail(ps, "unknown escape");
    }
}

static bool integer(parser *ps, int *out) {
    if (peek(ps) < '0' || peek(ps) > '9') return fail(ps, "expecting an integer");
    long v = 0;
    while (peek(ps) >= '0' && peek(ps) <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > FT_GRAMMAR_MAX_REPEAT) return fail(ps, "repetition count above 10000");
    }
    *out = (int)v;
    return true;
}

static bool alternates(parser *ps, int rule, bool nested);

// The code point c appended to q as its UTF-8 bytes.
static bool literal_char(parser *ps, ft_gseq *q, uint32_t c) {
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return fail(ps, "a code point without a UTF-8 encoding");
    char buf[4];
    int n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (n == 1) {
        buf[0] = (char)c;
    } else {
        for (int i = n - 1; i > 0; i--, c >>= 6) buf[i] = (char)(0x80 | (c & 0x3F));
        buf[0] = (char)((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | c);
    }
    ft_gb_lit(ps->b, q, buf, (size_t)n);
    return true;
}

// A sequence into q; items are separated by white space (newlines too when nested).
static bool sequence(parser *ps, ft_gseq *q, bool nested) {
    int item = -1; // where the last item starts in q (what a postfix repeats)
    for (;;) {
        int c = peek(ps);
        if (c == '"') {
            ps->p++;
            item = q->n;
            while (peek(ps) != '"') {
                uint32_t ch;
                if (!character(ps, &ch) || !literal_char(ps, q, ch)) return false;
            }
            ps->p++;
            if (q->n == item) { // "" matches the empty string: a rule of it, so a postfix has an item
                int r = ft_gb_rule(ps->b, "empty");
                ft_gb_alt(ps->b, r, NULL, 0);
                ft_gseq_push(q, ft_gb_ref(r));
            }
        } else if (c == '[') {
            ps->p++;
            bool negate = peek(ps) == '^';
            if (negate) ps->p++;
            uint32_t *r = NULL;
            int n = 0, cap = 0;
            while (peek(ps) != ']') {
                uint32_t lo, hi;
                if (!character(ps, &lo)) return free(r), false;
                hi = lo;
                if (peek(ps) == '-' && ps->p + 1 < ps->end && ps->p[1] != ']') {
                    ps->p++;
                    if (!character(ps, &hi)) return free(r), false;
                    if (hi < lo) return free(r), fail(ps, "a character range that goes backwards");
                }
                if (n == cap) r = ft_realloc(r, (size_t)(cap = cap ? 2 * cap : 8) * 2 * sizeof(uint32_t));
                r[2 * n] = lo, r[2 * n + 1] = hi, n++;
            }
            ps->p++;
            item = q->n;
            ft_gseq_push(q, ft_gb_chars(ps->b, r, n, negate));
            free(r);
        } else if (c == '.') {
            ps->p++;
            item = q->n;
            ft_gseq_push(q, ft_gb_chars(ps->b, NULL, 0, true));
        } else if (c == '(') {
            if (++ps->depth > MAX_NESTING) return fail(ps, "parentheses nested too deep");
            ps->p++;
            space(ps, true);
            int r = ft_gb_rule(ps->b, "group");
            if (!alternates(ps, r, true)) return false;
            if (peek(ps) != ')') return fail(ps, "expecting ')'");
            ps->p++;
            ps->depth--;
            item = q->n;
            ft_gseq_push(q, ft_gb_ref(r));
        } else if (c >= 0 && is_word((char)c)) {
            const char *name = ps->p;
            while (ps->p < ps->end && is_word(*ps->p)) ps->p++;
            item = q->n;
            ft_gseq_push(q, ft_gb_ref(ft_gb_named(ps->b, name, (size_t)(ps->p - name))));
        } else if (c == '<' || c == '!') {
            return fail(ps, "token references (<[id]>, <token>) are not supported");
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (item < 0) return fail(ps, "a repetition with nothing before it");
            int min = 0, max = -1;
            ps->p++;
            if (c == '+') min = 1;
            if (c == '?') max = 1;
            if (c == '{') {
                space(ps, nested);
                if (!integer(ps, &min)) return false;
                space(ps, nested);
                if (peek(ps) == '}') {
                    max = min;
                } else if (peek(ps) == ',') {
                    ps->p++;
                    space(ps, nested);
                    if (peek(ps) >= '0' && peek(ps) <= '9') {
                        if (!integer(ps, &max)) return false;
                        if (max < min) return fail(ps, "a repetition {m,n} with n < m");
                        space(ps, nested);
                    }
                    if (peek(ps) != '}') return fail(ps, "expecting '}'");
                } else {
                    return fail(ps, "expecting ',' or '}'");
                }
                ps->p++;
            }
            ft_gsym rep = ft_gb_repeat(ps->b, q->s + item, q->n - item, min, max, "repeat");
            q->n = item;
            ft_gseq_push(q, rep);
        } else {
            return true;
        }
        space(ps, nested);
    }
}

static bool alternates(parser *ps, int rule, bool nested) {
    for (;;) {
        ft_gseq q = {0};
        bool ok = sequence(ps, &q, nested);
        if (ok) ft_gb_alt(ps->b, rule, q.s, q.n);
        ft_gseq_free(&q);
        if (!ok) return false;
        if (peek(ps) != '|') return true;
        ps->p++;
        space(ps, true);
    }
}

bool ft_gb_gbnf(ft_gb *b, const char *text, size_t len, ft_err *err) {
    parser ps = {.s = text, .p = text, .end = text + len, .b = b};
    space(&ps, true);
    while (ps.p < ps.end && !ps.failed && !ft_gb_failed(b)) {
        const char *name = ps.p;
        while (ps.p < ps.end && is_word(*ps.p)) ps.p++;
        if (ps.p == name) {
            fail(&ps, "expecting a rule name");
            break;
        }
        int rule = ft_gb_named(b, name, (size_t)(ps.p - name));
        if (ft_gb_has_alts(b, rule)) {
            ps.p = name;
            fail(&ps, "a rule defined twice");
            break;
        }
        space(&ps, false);
        if (ps.end - ps.p < 3 || memcmp(ps.p, "::=", 3)) {
            fail(&ps, "expecting '::='");
            break;
        }
        ps.p += 3;
        space(&ps, true);
        if (!alternates(&ps, rule, false)) break;
        int c = peek(&ps);
        if (c == '\r' || c == '\n') {
            ps.p++;
        } else if (c >= 0) {
            fail(&ps, "expecting a newline or the end");
            break;
        }
        space(&ps, true);
    }
    if (ps.failed) return ft_err_set(err, "%s", ps.err);
    if (ft_gb_failed(b)) return ft_err_set(err, "%s", ft_gb_error(b));
    return true;
}

ft_grammar *ft_grammar_parse_gbnf(const char *text, size_t len, ft_err *err) {
    ft_gb *b = ft_gb_init();
    ft_grammar *g = NULL;
    if (ft_gb_gbnf(b, text, len, err)) {
        int root = ft_gb_named(b, "root", 4);
        if (!ft_gb_has_alts(b, root))
            ft_err_set(err, "no rule 'root'");
        else
            g = ft_gb_finish(b, root, err);
    }
    ft_gb_free(b);
    return g;
}
