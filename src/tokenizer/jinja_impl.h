// jinja_impl.h: the Jinja interpreter's pieces, shared by src/tokenizer/jinja_*.c (not for use
// outside src/tokenizer/).
//
// A template is lexed (jinja_lex.c) and parsed (jinja_parse.c) once into an AST owned by the
// tok_jinja; rendering (jinja_eval.c) walks the AST with values (jinja_value.c) and built-in
// filters, tests, methods and functions (jinja_builtins.c). The language is the subset chat
// templates use, with the semantics of llama.cpp's Jinja engine (common/jinja/), quirks included,
// so that a template renders here as it does there.
//
// Values: a jv is a small tagged value passed by value. Strings, lists, dicts, functions and
// keyword arguments live on the render's heap as reference-counted objects (jobj); a jv that
// holds one owns a reference unless said otherwise. Every function returning a jv returns an
// owned reference; arguments are borrowed. Objects alive at the end of a render (cycles such as
// a namespace holding itself) are freed by the render's sweep. String literals of the template
// are static objects (never counted or freed by a render), so a parsed template can be rendered
// by several threads at once.
//
// User text: each string carries the byte ranges that came from user text (message contents and
// other caller data), kept through concatenation, slicing, case changes, replace, join, format,
// indent and tojson. The rendered output's user-text ranges become segments that are tokenized
// without special tokens (tok_segment.parse_special = false); everything else is template markup.
#ifndef FT_JINJA_IMPL_H
#define FT_JINJA_IMPL_H

#include "tokenizer.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

// ---------------------------------------------------------------------------------------------
// Values

typedef enum jv_type {
    JV_UNDEF = 0, // undefined (a missing variable, attribute or item)
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_TUPLE, // an immutable list (dict items, tuple literals)
    JV_DICT,
    JV_FUNC,  // a built-in, a bound method or a macro
    JV_KWARG, // name=value in a call's arguments
    JV_ERR,   // not a value: an evaluation failed (the message is in the render)
} jv_type;

typedef struct jobj jobj;
typedef struct jv {
    jv_type t;
    union {
        bool b;
        int64_t i;
        double f;
        jobj *o;          // JV_STR .. JV_KWARG
        const char *hint; // JV_UNDEF: the name that was missing (static, may be NULL)
    };
} jv;

enum jobj_kind { JOBJ_STR, JOBJ_LIST, JOBJ_DICT, JOBJ_FUNC, JOBJ_KWARG };

struct jobj {
    jobj *prev, *next; // the render's list of live objects (NULL for static ones)
    uint32_t rc;
    uint8_t kind;
    bool is_static; // a template literal: no reference counting, owned by the template
    size_t bytes;   // counted against the render's memory limit
};

// A string: immutable bytes (NUL-terminated) and the ranges of them that are user text, sorted,
// disjoint, not adjacent: [spans[2k], spans[2k+1]).
typedef struct jstr {
    jobj h;
    size_t len;
    size_t n_spans;
    size_t *spans;
    char *s;
} jstr;

typedef struct jlist {
    jobj h;
    size_t n, cap;
    jv *v;
} jlist;

// Dict flavours: a namespace or a JSON object has built-in methods (d.items()...), a loop
// object has only loop.cycle.
enum { JDICT_PLAIN, JDICT_LOOP };

typedef struct jdict {
    jobj h;
    size_t n, cap;
    jv *k, *v; // keys and values in insertion order
    uint8_t flavour;
} jdict;

struct jrender;
typedef struct jargs {
    jv *v; // borrowed; a bound method's object first
    size_t n;
    const char *name; // for messages
    long pos;         // where the call is, for messages
} jargs;
typedef jv (*jbuiltin_fn)(struct jrender *r, const jargs *a);

typedef struct jbuiltin {
    const char *name;
    jbuiltin_fn fn;
} jbuiltin;

struct jnode;
typedef struct jfunc {
    jobj h;
    const jbuiltin *b;         // a built-in, or
    const struct jnode *macro; // a macro (its node)
    bool bound;                // a method bound to self (its first argument)
    jv self;
} jfunc;

typedef struct jkwarg {
    jobj h;
    const char *name; // the template's (static)
    jv v;
} jkwarg;

static inline jstr *JSTR(jv v) { return (jstr *)v.o; }
static inline jlist *JLIST(jv v) { return (jlist *)v.o; }
static inline jdict *JDICT(jv v) { return (jdict *)v.o; }
static inline jfunc *JFUNC(jv v) { return (jfunc *)v.o; }
static inline jkwarg *JKWARG(jv v) { return (jkwarg *)v.o; }

static inline jv jv_undef(const char *hint) { return (jv){.t = JV_UNDEF, .hint = hint}; }
static inline jv jv_none(void) { return (jv){.t = JV_NONE}; }
static inline jv jv_bool(bool b) { return (jv){.t = JV_BOOL, .b = b}; }
static inline jv jv_int(int64_t i) { return (jv){.t = JV_INT, .i = i}; }
static inline jv jv_float(double f) { return (jv){.t = JV_FLOAT, .f = f}; }
static inline jv jv_err(void) { return (jv){.t = JV_ERR}; }
static inline bool jv_is_seq(jv v) { return v.t == JV_LIST || v.t == JV_TUPLE; }
static inline bool jv_is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT; }
static inline bool jv_has_obj(jv v) { return v.t >= JV_STR && v.t <= JV_KWARG; }

// ---------------------------------------------------------------------------------------------
// The AST (jinja_parse.c)

typedef enum jnode_kind {
    // statements
    JN_TEXT,     // template text: str
    JN_EMIT,     // {{ a }}
    JN_IF,       // if a: body else alt (an elif is an if alone in alt)
    JN_FOR,      // for a (a name or a tuple of names) in b [if c]: body else alt
    JN_SET,      // set a = b, or set a ... endset (body)
    JN_MACRO,    // macro name(params: items) body
    JN_BREAK,
    JN_CONTINUE,
    JN_FILTER_BLOCK, // filter a (a filter: a name or a call) body
    JN_NOOP,         // a comment, generation / endgeneration
    // expressions
    JN_INT,     // i
    JN_FLOAT,   // f
    JN_STR,     // str (a static string)
    JN_NAME,    // sym
    JN_LIST,    // [items]
    JN_TUPLE,   // (items)
    JN_DICT,    // {items[2k]: items[2k+1]}
    JN_MEMBER,  // a.b (b a node; an identifier when well formed)
    JN_INDEX,   // a[b] (b may be JN_SLICE or JN_BLANK)
    JN_SLICE,   // a:b:c (each may be NULL)
    JN_BLANK,   // a[] (evaluates to undefined)
    JN_CALL,    // a(items)
    JN_KWARG,   // name=b (a is the name's node)
    JN_SPREAD,  // *a (parsed, refused when evaluated, as llama.cpp)
    JN_FILTER,  // a | b (b: a name or a call)
    JN_TEST,    // a is [not] b (b: a name or a call); negate in flags
    JN_BINARY,  // a op b
    JN_NOT,     // not a
    JN_TERNARY, // b if a else c
    JN_SELECT,  // b if a (no else)
} jnode_kind;

typedef enum jop {
    JOP_AND = 1, JOP_OR, JOP_EQ, JOP_NE, JOP_LT, JOP_GT, JOP_LE, JOP_GE, JOP_IN, JOP_NOT_IN,
    JOP_ADD, JOP_SUB, JOP_CONCAT, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD,
} jop;

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;
    uint8_t op;    // JN_BINARY: jop; JN_TEST: 1 = negated
    uint32_t pos;  // byte offset in the template (normalised newlines), for messages
    jnode *a, *b, *c;
    jnode **items; // statement bodies, arguments, elements
    uint32_t n_items;
    jnode **alt; // else / elif branch, for-else
    uint32_t n_alt;
    union {
        int64_t i;
        double f;
        jstr *str;  // JN_TEXT, JN_STR: a static string
        int32_t sym; // JN_NAME: index in the template's symbols
    };
};

// A parsed template. Immutable after tok_jinja_parse.
struct tok_jinja {
    char *src; // the source with "\r\n" and "\r" read as "\n" (positions refer to it)
    size_t len;
    jnode **body;
    uint32_t n_body;
    char **syms; // names of identifiers, each once (JN_NAME.sym indexes them)
    int32_t n_syms;
    struct jstr *loop_keys[9]; // index, index0, revindex, revindex0, first, last, length,
                               // previtem, nextitem: the loop object's keys
    struct jarena *arena;      // nodes, strings and arrays of the AST
};

typedef struct jarena jarena;
void *jarena_alloc(jarena **a, size_t size);
void jarena_free(jarena *a);

// Line and column (1-based) of a byte offset.
void jinja_line_col(const char *src, size_t len, size_t pos, int *line, int *col);

// ---------------------------------------------------------------------------------------------
// Lexer (jinja_lex.c)

typedef enum jtok_type {
    JT_EOF, JT_TEXT, JT_NUM, JT_STR, JT_IDENT, JT_EQUALS, JT_LPAREN, JT_RPAREN, JT_OPEN_STMT,
    JT_CLOSE_STMT, JT_OPEN_EXPR, JT_CLOSE_EXPR, JT_LBRACKET, JT_RBRACKET, JT_LBRACE, JT_RBRACE,
    JT_COMMA, JT_DOT, JT_COLON, JT_PIPE, JT_ADD, JT_MUL, JT_CMP, JT_UNARY, JT_COMMENT,
} jtok_type;

typedef struct jtok {
    jtok_type t;
    const char *s; // its text (JT_STR: unescaped, in the arena; JT_TEXT: trimmed, in src)
    size_t n;
    uint32_t pos;
} jtok;

// Tokenizes t->src. Returns false and sets *err ("line L, column C: ...") on a lexical error.
bool jinja_lex(tok_jinja *t, jtok **toks, size_t *n_toks, ft_err *err);

// Parses tokens into t->body. Returns false and sets *err on a syntax error.
bool jinja_parse(tok_jinja *t, const jtok *toks, size_t n_toks, ft_err *err);

// ---------------------------------------------------------------------------------------------
// The render (jinja_eval.c) and the heap of values (jinja_value.c)

typedef struct jscope jscope;
struct jscope {
    jscope *parent;
    int32_t *syms;
    jv *vals;
    uint32_t n, cap;
};

// A list written by {{ }} into a block's text, written out where the block ends (llama.cpp
// gathers a block's values then, so a list changed later in the block shows its last state).
typedef struct jdefer {
    size_t at; // where in the text
    jv v;
} jdefer;

// A string being built: bytes and user-text ranges; as a block's output, its deferred lists.
typedef struct jsb {
    char *s;
    size_t len, cap;
    size_t *spans; // [start, end) pairs
    size_t n_spans, cap_spans;
    jdefer *defer;
    size_t n_defer, cap_defer;
    bool overflow;  // grew past its limit: the render has failed
    bool is_output; // the render's output (max_output), else a string (max_string)
} jsb;

typedef struct jrender {
    const tok_jinja *t;
    tok_jinja_limits lim;
    time_t now;
    ft_err *err;
    bool failed;
    uint64_t steps;
    uint32_t depth;
    size_t mem;   // bytes of live objects
    jobj live;    // sentinel of the list of live objects
    jsb *out;     // where statements write
    size_t n_swept; // objects the final sweep freed (cycles)
} jrender;

// Fails the render: formats the message (the first failure's message is kept) and returns
// JV_ERR. pos < 0: no position.
jv jr_fail(jrender *r, long pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Counts work against max_steps; false (the render failed) past it.
bool jr_step(jrender *r, uint64_t n);

// References
static inline jv jv_retain(jv v) {
    if (jv_has_obj(v) && !v.o->is_static) v.o->rc++;
    return v;
}
void jv_release(jrender *r, jv v);

// Objects. Each returns JV_ERR (the render failed) past a limit.
jv jv_str(jrender *r, const char *s, size_t len, bool user);
jv jv_list_new(jrender *r, size_t cap, bool tuple);
bool jv_list_push(jrender *r, jv list, jv v); // takes the reference to v (released on failure)
jv jv_dict_new(jrender *r, uint8_t flavour);
// Sets key to v in the dict (replacing in place). Takes the reference to v, not to key.
bool jv_dict_set(jrender *r, jv dict, jv key, jv v);
jv jv_dict_set_cstr(jrender *r, jv dict, const char *key, jv v); // JV_ERR on failure, else JV_NONE
jv jv_func_new(jrender *r, const jbuiltin *b, const jnode *macro, const jv *self); // self: NULL, or bound
jv jv_kwarg_new(jrender *r, const char *name, jv v); // takes v

// String builder
void jsb_put(jrender *r, jsb *b, const char *s, size_t len, bool user);
static inline void jsb_puts(jrender *r, jsb *b, const char *s) { jsb_put(r, b, s, strlen(s), false); }
void jsb_put_str(jrender *r, jsb *b, const jstr *s, size_t from, size_t to); // with its user ranges
void jsb_free(jrender *r, jsb *b);
// Appends src's bytes [from, to) with their user ranges.
void jsb_put_sb(jrender *r, jsb *b, const jsb *src, size_t from, size_t to);
// Cuts b back to len bytes (user ranges, deferred lists after it dropped).
void jsb_truncate(jrender *r, jsb *b, size_t len, size_t n_defer);
jv jsb_done(jrender *r, jsb *b); // the string built (the builder is emptied)
bool jstr_is_user(const jstr *s, size_t i); // is byte i user text

// Lookups and comparisons
// The value for key in a dict, borrowed, or NULL.
jv *jv_dict_get(const jdict *d, jv key);
jv *jv_dict_get_cstr(const jdict *d, const char *key, size_t len);
bool jv_hashable(jv v);  // usable as a dict key or `in` needle (llama.cpp's is_hashable)
bool jv_immutable(jv v); // not a list or dict
// ==, as llama.cpp's value equivalence (1 == 1.0 == true; lists and dicts by items, tuples
// never equal lists). May fail (depth): returns -1.
int jv_equal(jrender *r, jv a, jv b);
// Truthiness. -1 (and the render failed) for values without one (functions).
int jv_truthy(jrender *r, jv v, long pos);
// Integer and float readings of numbers and bools (llama.cpp's as_int / as_float).
bool jv_as_int(jv v, int64_t *out);
bool jv_as_float(jv v, double *out);
const char *jv_type_name(jv v);

// Text forms
// str(): numbers, bools, None as llama.cpp writes them; strings as they are; lists, tuples and
// dicts as Python's repr. Appends to b. False (the render failed) for undefined values,
// functions and keyword arguments, or too deep.
bool jv_write_str(jrender *r, jsb *b, jv v, long pos);
jv jv_to_str(jrender *r, jv v, long pos);
// The render output's form of a value ({{ v }}): strings, numbers and bools written, lists
// flattened, anything else nothing.
bool jv_write_output(jrender *r, jsb *b, jv v);
// JSON (llama.cpp's value_to_json: Python json.dumps spacing, %g numbers, keys as strings).
bool jv_write_json(jrender *r, jsb *b, jv v, int indent, const jstr *item_sep, const jstr *key_sep,
                   bool ensure_ascii);

// Parses JSON text (an object) into a dict. Strings are user text; with protocol, except its
// "bos_token", "eos_token" and the "role" of each object in its "messages". Returns JV_ERR and
// fails the render on malformed JSON or nesting deeper than 256.
jv jv_from_json(jrender *r, const char *s, size_t len, bool protocol);

// ---------------------------------------------------------------------------------------------
// Built-ins (jinja_builtins.c)

// A filter or method of a value's type, or NULL. Bound to the value when called.
const jbuiltin *jinja_method(jv v, const char *name, size_t len);
// Whether values of this type have methods at all (functions and keyword arguments do not).
bool jinja_has_methods(jv v);
// A global function (raise_exception, namespace, range, strftime_now, tojson) or test
// (test_is_NAME), or NULL.
const jbuiltin *jinja_global(const char *name, size_t len);
const jbuiltin *jinja_test(const char *name, size_t len);
// Calls a function value with args (borrowed); macros run through jinja_call_macro.
jv jinja_call(jrender *r, jv fn, jv *args, size_t n, jscope *s, long pos);
jv jinja_call_macro(jrender *r, const jfunc *f, jv *args, size_t n, jscope *s, long pos);
// Python slicing of a list or string with llama.cpp's bounds.
jv jinja_slice(jrender *r, jv v, int64_t start, int64_t stop, int64_t step);
// `needle in haystack` for a list, string or dict haystack: a JV_BOOL, or JV_ERR.
jv jinja_in(jrender *r, jv needle, jv hay, long pos);

// Objects the last render on this thread freed in its final sweep (values holding each other):
// 0 for a template without such cycles (tests check it to catch a missed release).
extern _Thread_local size_t jinja_last_swept;

#endif
