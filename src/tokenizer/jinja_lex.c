// jinja_lex.c: a Jinja template's text cut into tokens, as llama.cpp's Jinja lexer cuts it.
//
// Outside tags the text is kept, with the white-space rules llama.cpp applies to chat templates:
//   - one trailing newline of the template is dropped;
//   - lstrip_blocks: spaces and tabs before "{%" or "{#" (and before "{-") back to the start of
//     their line are dropped; when that walk reaches the template's first byte the whole text
//     before the tag is dropped (llama.cpp's rule, which also drops a text of one character);
//   - trim_blocks: after a tag ending in "%}", "#}" or "-}", one newline is dropped;
//   - "-%}", "-}}", "-#}" drop all white space after the tag, "{%-", "{{-", "{#-" all before it.
// Inside tags: identifiers, numbers (a '-' or '+' right after an operator, a bracket or a tag's
// start is a sign), strings with \n \t \r \b \f \v \\ \' \" escapes, and operators. "//" is
// read as floor division (llama.cpp has none).
#include "jinja_impl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    tok_jinja *t;
    const char *src;
    size_t n;
    size_t pos;
    jtok *toks;
    size_t n_toks, cap;
    ft_err *err;
} lexer;

static bool lex_fail(lexer *L, size_t pos, const char *what) {
    int line, col;
    jinja_line_col(L->src, L->n, pos, &line, &col);
    return ft_err_set(L->err, "line %d, column %d: %s", line, col, what);
}

static void push(lexer *L, jtok_type type, const char *s, size_t n, size_t pos) {
    if (L->n_toks == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 256;
        L->toks = ft_realloc(L->toks, L->cap * sizeof(jtok));
    }
    L->toks[L->n_toks++] = (jtok){type, s, n, (uint32_t)pos};
}

static jtok_type last_type(const lexer *L, jtok_type empty) {
    return L->n_toks ? L->toks[L->n_toks - 1].t : empty;
}

static bool at(const lexer *L, size_t i, char c) { return i < L->n && L->src[i] == c; }

// Whether src[pos + k] exists and is one of chars (llama.cpp's next_pos_is).
static bool next_is(const lexer *L, size_t k, const char *chars) {
    if (L->pos + k >= L->n) return false;
    return strchr(chars, L->src[L->pos + k]) != NULL && L->src[L->pos + k] != 0;
}

static bool is_word(char c) { return isalnum((unsigned char)c) || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Text between tags, with the white-space rules. Returns the token's text range.
static void lex_text(lexer *L) {
    size_t start = L->pos, end = start;
    bool rstrip_prev = false, trim_newline = false;
    if (L->pos > 3) {
        char c0 = L->src[L->pos - 3], c1 = L->src[L->pos - 2], c2 = L->src[L->pos - 1];
        rstrip_prev = c0 == '-' && (c1 == '%' || c1 == '}' || c1 == '#') && c2 == '}';
        trim_newline = (c1 == '#' || c1 == '%' || c1 == '-') && c2 == '}';
    }
    while (L->pos < L->n && !(L->src[L->pos] == '{' && next_is(L, 1, "%{#"))) end = ++L->pos;
    // lstrip_blocks
    if (at(L, L->pos, '{') && next_is(L, 1, "%#-")) {
        size_t cur = end;
        while (cur > start) {
            char c = L->src[cur - 1];
            if (cur == 1) {
                end = 0;
                break;
            }
            if (c == '\n') {
                end = cur;
                break;
            }
            if (!is_space(c)) break;
            cur--;
        }
    }
    const char *s = L->src + start;
    size_t len = end > start ? end - start : 0;
    if (trim_newline && len && s[0] == '\n') s++, len--;
    if (rstrip_prev)
        while (len && (s[0] == ' ' || s[0] == '\t' || s[0] == '\r' || s[0] == '\n')) s++, len--;
    if (at(L, L->pos, '{') && next_is(L, 1, "{%#") && next_is(L, 2, "-"))
        while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r' || s[len - 1] == '\n'))
            len--;
    if (len) push(L, JT_TEXT, s, len, start);
}

// A string literal's body up to the closing quote, unescaped into the arena.
static bool lex_string(lexer *L, char quote) {
    size_t start = L->pos++;
    size_t cap = 16, n = 0;
    char *buf = ft_malloc(cap);
    for (;;) {
        if (L->pos >= L->n) {
            free(buf);
            return lex_fail(L, start, "unterminated string");
        }
        char c = L->src[L->pos];
        if (c == quote) break;
        if (c == '\\') {
            if (++L->pos >= L->n) {
                free(buf);
                return lex_fail(L, L->pos, "unexpected end of template after escape character");
            }
            static const char from[] = "ntrbfv\\'\"", to[] = "\n\t\r\b\f\v\\'\"";
            const char *e = L->src[L->pos] ? strchr(from, L->src[L->pos]) : NULL;
            if (!e) {
                free(buf);
                return lex_fail(L, L->pos, "unknown escape character");
            }
            c = to[e - from];
        }
        if (n + 1 >= cap) buf = ft_realloc(buf, cap *= 2);
        buf[n++] = c;
        L->pos++;
    }
    L->pos++; // the closing quote
    char *s = jarena_alloc(&L->t->arena, n + 1);
    memcpy(s, buf, n);
    s[n] = 0;
    free(buf);
    push(L, JT_STR, s, n, start);
    return true;
}

// Digits, then a fraction where a '.' is followed by a digit.
static size_t lex_number_end(const lexer *L, size_t i) {
    while (i < L->n && is_digit(L->src[i])) i++;
    if (i + 1 < L->n && L->src[i] == '.' && is_digit(L->src[i + 1])) {
        i++;
        while (i < L->n && is_digit(L->src[i])) i++;
    }
    return i;
}

static const struct {
    const char *seq;
    jtok_type t;
} g_ops[] = {
    {"{%-", JT_OPEN_STMT}, {"-%}", JT_CLOSE_STMT}, {"{{-", JT_OPEN_EXPR}, {"-}}", JT_CLOSE_EXPR},
    {"{%", JT_OPEN_STMT},  {"%}", JT_CLOSE_STMT},  {"{{", JT_OPEN_EXPR},  {"}}", JT_CLOSE_EXPR},
    {"(", JT_LPAREN},      {")", JT_RPAREN},       {"{", JT_LBRACE},      {"}", JT_RBRACE},
    {"[", JT_LBRACKET},    {"]", JT_RBRACKET},     {",", JT_COMMA},       {".", JT_DOT},
    {":", JT_COLON},       {"|", JT_PIPE},         {"<=", JT_CMP},        {">=", JT_CMP},
    {"==", JT_CMP},        {"!=", JT_CMP},         {"<", JT_CMP},         {">", JT_CMP},
    {"+", JT_ADD},         {"-", JT_ADD},          {"~", JT_ADD},         {"*", JT_MUL},
    {"//", JT_MUL},        {"/", JT_MUL},          {"%", JT_MUL},         {"=", JT_EQUALS},
};

bool jinja_lex(tok_jinja *t, jtok **toks, size_t *n_toks, ft_err *err) {
    lexer L = {.t = t, .src = t->src, .n = t->len, .err = err};
    // curly brackets open inside the current {{ }} (where "}}" closes a dict, not the tag)
    size_t braces = 0;
    while (L.pos < L.n) {
        jtok_type last = last_type(&L, JT_CLOSE_STMT);
        if (last == JT_CLOSE_STMT || last == JT_CLOSE_EXPR || last == JT_COMMENT) {
            size_t before = L.n_toks;
            lex_text(&L);
            if (L.n_toks > before) continue;
        }
        if (at(&L, L.pos, '{') && next_is(&L, 1, "#")) {
            size_t start = L.pos;
            L.pos += 2;
            while (!(at(&L, L.pos, '#') && next_is(&L, 1, "}"))) {
                if (L.pos + 2 >= L.n) {
                    free(L.toks);
                    return lex_fail(&L, L.pos, "missing end of comment tag");
                }
                L.pos++;
            }
            push(&L, JT_COMMENT, L.src + start + 2, L.pos - start - 2, start);
            L.pos += 2;
            continue;
        }
        if (at(&L, L.pos, '-') && (last == JT_OPEN_EXPR || last == JT_OPEN_STMT)) {
            if (++L.pos >= L.n) break;
        }
        while (L.pos < L.n && is_space(L.src[L.pos])) L.pos++;
        if (L.pos >= L.n) break;
        char ch = L.src[L.pos];
        bool closing = ch == '-' && next_is(&L, 1, "%}");
        if (!closing && (ch == '-' || ch == '+')) {
            jtok_type prev = last_type(&L, JT_EOF);
            if (prev == JT_TEXT || prev == JT_EOF) {
                free(L.toks);
                return lex_fail(&L, L.pos, "unexpected character");
            }
            if (prev != JT_IDENT && prev != JT_NUM && prev != JT_STR && prev != JT_RPAREN &&
                prev != JT_RBRACKET) {
                // a sign: a negative (or positive) number, or a unary operator
                size_t start = L.pos++;
                size_t end = lex_number_end(&L, L.pos);
                push(&L, end > L.pos ? JT_NUM : JT_UNARY, L.src + start, end - start, start);
                L.pos = end;
                continue;
            }
        }
        bool matched = false;
        for (size_t k = 0; k < FT_ARRAY_LEN(g_ops); k++) {
            size_t m = strlen(g_ops[k].seq);
            if (braces > 0 && !strcmp(g_ops[k].seq, "}}")) continue;
            if (L.pos + m <= L.n && !memcmp(L.src + L.pos, g_ops[k].seq, m)) {
                push(&L, g_ops[k].t, L.src + L.pos, m, L.pos);
                if (g_ops[k].t == JT_OPEN_EXPR) braces = 0;
                else if (g_ops[k].t == JT_LBRACE) braces++;
                else if (g_ops[k].t == JT_RBRACE) braces--; // wraps as llama.cpp's size_t does
                L.pos += m;
                matched = true;
                break;
            }
        }
        if (matched) continue;
        if (ch == '\'' || ch == '"') {
            if (!lex_string(&L, ch)) {
                free(L.toks);
                return false;
            }
            continue;
        }
        if (is_digit(ch)) {
            size_t end = lex_number_end(&L, L.pos);
            push(&L, JT_NUM, L.src + L.pos, end - L.pos, L.pos);
            L.pos = end;
            continue;
        }
        if (is_word(ch)) {
            size_t start = L.pos;
            while (L.pos < L.n && is_word(L.src[L.pos])) L.pos++;
            push(&L, JT_IDENT, L.src + start, L.pos - start, start);
            continue;
        }
        free(L.toks);
        return lex_fail(&L, L.pos, "unexpected character");
    }
    *toks = L.toks;
    *n_toks = L.n_toks;
    return true;
}
