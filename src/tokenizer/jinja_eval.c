// jinja_eval.c: rendering a parsed template: scopes, statements, expressions, and the render's
// entry point.
//
// Scopes follow llama.cpp's engine: a for loop and a macro call open a scope (a loop's
// variables, `set` inside it included, stay in the loop; a namespace's attributes are set in the
// namespace, which outlives it); if does not. A macro body runs in a scope opened on its
// caller's (llama.cpp copies the calling context), so it sees the caller's variables. A loop's
// `else` runs when no iteration completed (none ran, or each was cut by break or continue).
// Statements write straight into the output (or into the string a macro, a set block or a
// filter block captures); {{ value }} writes strings, numbers and booleans, and lists flattened.
#include "jinja_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EX_OK, EX_ERR, EX_BREAK, EX_CONTINUE };

_Thread_local size_t jinja_last_swept;

// ---------------------------------------------------------------------------------------------
// Scopes

static jv *scope_find(jscope *s, int32_t sym) {
    for (; s; s = s->parent)
        for (uint32_t i = s->n; i-- > 0;)
            if (s->syms[i] == sym) return &s->vals[i];
    return NULL;
}

// Sets sym in s (not in a parent), taking the reference to v.
static void scope_set(jrender *r, jscope *s, int32_t sym, jv v) {
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->syms[i] == sym) {
            jv old = s->vals[i];
            s->vals[i] = v;
            jv_release(r, old);
            return;
        }
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->syms = ft_realloc(s->syms, s->cap * sizeof(int32_t));
        s->vals = ft_realloc(s->vals, s->cap * sizeof(jv));
    }
    s->syms[s->n] = sym;
    s->vals[s->n++] = v;
}

static void scope_free(jrender *r, jscope *s) {
    for (uint32_t i = 0; i < s->n; i++) jv_release(r, s->vals[i]);
    free(s->syms);
    free(s->vals);
}

static int32_t sym_find(const tok_jinja *t, const char *name, size_t len) {
    for (int32_t i = 0; i < t->n_syms; i++)
        if (strlen(t->syms[i]) == len && !memcmp(t->syms[i], name, len)) return i;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Expressions

static jv eval(jrender *r, const jnode *n, jscope *s);
static int exec_body(jrender *r, jnode *const *items, uint32_t n, jscope *s);

static bool enter(jrender *r, long pos) {
    if (!jr_step(r, 1)) return false;
    if (++r->depth > r->lim.max_depth) {
        jr_fail(r, pos, "the template nests evaluations deeper than %u levels (max_depth): recursion too deep",
                r->lim.max_depth);
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Output
//
// llama.cpp collects the values a block (if, for, a macro's body, the template) writes and turns
// them into text when the block ends. The text is the same as written at once, but for two
// things kept here: a list written by {{ }} shows what it holds when the block ends, and a
// break or continue leaving an if drops what that if wrote.

// Writes v to the output.
static bool emit(jrender *r, jv v) {
    if (v.t != JV_LIST && v.t != JV_TUPLE) return jv_write_output(r, r->out, v);
    jsb *b = r->out;
    if (b->n_defer == b->cap_defer) {
        b->cap_defer = b->cap_defer ? 2 * b->cap_defer : 4;
        b->defer = ft_realloc(b->defer, b->cap_defer * sizeof(jdefer));
    }
    b->defer[b->n_defer++] = (jdefer){b->len, jv_retain(v)};
    return true;
}

// Writes out the lists deferred since the block began, in their places: the text from the
// first of them on is written again, with the lists between (one pass, however many lists).
static bool block_end(jrender *r, size_t n_defer) {
    jsb *b = r->out;
    if (b->n_defer <= n_defer || r->failed) return !r->failed;
    size_t first = b->defer[n_defer].at, at = first;
    jsb tail = {.is_output = b->is_output};
    for (size_t i = n_defer; i < b->n_defer && !r->failed; i++) {
        jsb_put_sb(r, &tail, b, at, b->defer[i].at);
        jv_write_output(r, &tail, b->defer[i].v);
        at = b->defer[i].at;
    }
    jsb_put_sb(r, &tail, b, at, b->len);
    jsb_truncate(r, b, first, n_defer);
    jsb_put_sb(r, b, &tail, 0, tail.len);
    jsb_free(r, &tail);
    return !r->failed;
}

// Runs body into a new string (a macro's, a set block's or a filter block's text). *st: EX_OK,
// EX_ERR, or a break or continue leaving the body (llama.cpp lets them reach an enclosing loop).
static jv capture(jrender *r, jnode *const *items, uint32_t n, jscope *s, int *st) {
    jsb b = {0}, *saved = r->out;
    r->out = &b;
    *st = exec_body(r, items, n, s);
    if (*st == EX_OK) block_end(r, 0);
    r->out = saved;
    if (*st != EX_OK || r->failed) {
        jsb_free(r, &b);
        return jv_err();
    }
    return jsb_done(r, &b);
}

static const char *sym_name(jrender *r, const jnode *n) { return r->t->syms[n->sym]; }

// A name's value: a variable, else a global function or test, else undefined.
static jv eval_name(jrender *r, const jnode *n, jscope *s) {
    jv *v = scope_find(s, n->sym);
    if (v && v->t != JV_UNDEF) return jv_retain(*v);
    const char *name = sym_name(r, n);
    const jbuiltin *b = jinja_global(name, strlen(name));
    if (b) return jv_func_new(r, b, NULL, NULL);
    return jv_undef(name);
}

// A method of v bound to it, or undefined (hint: the name).
static jv bound_method(jrender *r, jv v, const char *name, size_t len, const char *hint) {
    const jbuiltin *b = jinja_method(v, name, len);
    return b ? jv_func_new(r, b, NULL, &v) : jv_undef(hint);
}

static jv eval_member(jrender *r, const jnode *n, jscope *s) {
    jv obj = eval(r, n->a, s);
    if (obj.t == JV_ERR) return obj;
    jv prop = jv_undef(NULL), res = jv_err();
    const char *key = NULL; // a static member's name
    if (n->kind == JN_INDEX && n->b->kind == JN_SLICE) {
        const jnode *sl = n->b;
        int64_t size = obj.t == JV_STR ? (int64_t)JSTR(obj)->len : jv_is_seq(obj) ? (int64_t)JLIST(obj)->n : 0;
        jv step = sl->c ? eval(r, sl->c, s) : jv_int(1), start = jv_undef(NULL), stop = jv_undef(NULL);
        int64_t st = 1, a, b;
        if (step.t == JV_ERR) goto slice_out;
        if (!jv_as_int(step, &st)) {
            jr_fail(r, n->pos, "%s is not an int value", jv_type_name(step));
            goto slice_out;
        }
        start = sl->a ? eval(r, sl->a, s) : jv_int(st < 0 ? size - 1 : 0);
        if (start.t == JV_ERR) goto slice_out;
        stop = sl->b ? eval(r, sl->b, s) : jv_int(st < 0 ? -1 : size);
        if (stop.t == JV_ERR) goto slice_out;
        if (obj.t != JV_STR && !jv_is_seq(obj)) {
            jr_fail(r, n->pos, "unknown filter 'slice' for type %s", jv_type_name(obj));
            goto slice_out;
        }
        if (start.t != JV_INT) {
            jr_fail(r, n->pos, "a slice's start must be an integer, got %s", jv_type_name(start));
            goto slice_out;
        }
        a = start.i;
        if (!jv_as_int(stop, &b) || !jv_as_int(step, &st)) {
            jr_fail(r, n->pos, "%s is not an int value", jv_type_name(jv_as_int(stop, &b) ? step : stop));
            goto slice_out;
        }
        if (st == 0) {
            jr_fail(r, n->pos, "slice step cannot be zero");
            goto slice_out;
        }
        res = jinja_slice(r, obj, a, b, st);
    slice_out:
        jv_release(r, step), jv_release(r, start), jv_release(r, stop);
        jv_release(r, obj);
        return res;
    }
    if (n->kind == JN_INDEX) {
        prop = eval(r, n->b, s);
        if (prop.t == JV_ERR) goto out;
    } else {
        if (n->b->kind != JN_NAME) {
            jr_fail(r, n->pos, "static member property must be an identifier");
            goto out;
        }
        key = sym_name(r, n->b);
        if (!jinja_has_methods(obj)) {
            jr_fail(r, n->pos, "%s has no attributes", jv_type_name(obj));
            goto out;
        }
        const jbuiltin *m = jinja_method(obj, key, strlen(key));
        if (m) {
            res = jv_func_new(r, m, NULL, &obj);
            goto out;
        }
    }
    if (!key && prop.t == JV_UNDEF) {
        res = jv_undef("object_property");
        goto out;
    }
    if (!key && !jv_hashable(prop)) {
        jr_fail(r, n->pos, "type %s is not allowed as an object key", jv_type_name(prop));
        goto out;
    }
    if (obj.t == JV_UNDEF) {
        res = jv_undef("object_property");
    } else if (obj.t == JV_DICT) {
        jv *v;
        if (key) {
            v = jv_dict_get_cstr(JDICT(obj), key, strlen(key));
        } else {
            if (!jv_immutable(prop)) {
                jr_fail(r, n->pos, "object key of unhashable type: %s", jv_type_name(prop));
                goto out;
            }
            v = jv_dict_get(JDICT(obj), prop);
        }
        if (v) {
            res = jv_retain(*v);
        } else if (key) {
            res = bound_method(r, obj, key, strlen(key), key);
        } else {
            // a missing key reads as the method of that name (d['items'] when there is no 'items')
            jv ks = jv_to_str(r, prop, n->pos);
            if (ks.t == JV_ERR) goto out;
            res = bound_method(r, obj, JSTR(ks)->s, JSTR(ks)->len, prop.t == JV_STR ? "object_property" : NULL);
            jv_release(r, ks);
        }
    } else if (obj.t == JV_STR || jv_is_seq(obj)) {
        if (key || prop.t == JV_STR) {
            const char *k = key ? key : JSTR(prop)->s;
            size_t kl = key ? strlen(key) : JSTR(prop)->len;
            res = bound_method(r, obj, k, kl, "object_property");
        } else if (prop.t == JV_INT) {
            int64_t i = prop.i;
            res = jv_undef("object_property");
            if (obj.t == JV_STR) {
                const jstr *str = JSTR(obj);
                if (i >= 0 && (uint64_t)i < str->len) res = jv_str(r, str->s + i, 1, jstr_is_user(str, (size_t)i));
            } else {
                jlist *l = JLIST(obj);
                if (i < 0) i += (int64_t)l->n;
                if (i >= 0 && (uint64_t)i < l->n) res = jv_retain(l->v[i]);
            }
        } else {
            jr_fail(r, n->pos, "cannot access property with non-string/non-number: got %s", jv_type_name(prop));
        }
    } else {
        if (!key && prop.t != JV_STR) {
            jr_fail(r, n->pos, "cannot access property with non-string: got %s", jv_type_name(prop));
            goto out;
        }
        if (!jinja_has_methods(obj)) {
            jr_fail(r, n->pos, "%s has no attributes", jv_type_name(obj));
            goto out;
        }
        const char *k = key ? key : JSTR(prop)->s;
        size_t kl = key ? strlen(key) : JSTR(prop)->len;
        res = bound_method(r, obj, k, kl, "object_property");
    }
out:
    jv_release(r, prop);
    jv_release(r, obj);
    return r->failed ? (jv_release(r, res), jv_err()) : res;
}

// Evaluates call arguments into args (owned). False (the render failed) on an error.
static bool eval_args(jrender *r, jnode *const *items, uint32_t n, jscope *s, jv *args) {
    for (uint32_t i = 0; i < n; i++) {
        if (items[i]->kind == JN_SPREAD) {
            jr_fail(r, items[i]->pos, "argument unpacking (*args) is not supported");
            args[i] = jv_err();
        } else {
            args[i] = eval(r, items[i], s);
        }
        if (args[i].t == JV_ERR) {
            for (uint32_t k = 0; k < i; k++) jv_release(r, args[k]);
            return false;
        }
    }
    return true;
}

static void release_args(jrender *r, jv *args, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) jv_release(r, args[i]);
}

// Room for a call's arguments: on the stack for the common few.
#define ARGS_ON_STACK 8

static jv eval_call(jrender *r, const jnode *n, jscope *s) {
    jv stack[ARGS_ON_STACK], *args = n->n_items <= ARGS_ON_STACK ? stack : ft_malloc(n->n_items * sizeof(jv));
    jv res = jv_err();
    if (!eval_args(r, n->items, n->n_items, s, args)) goto out_free;
    jv fn = eval(r, n->a, s); // after the arguments, as llama.cpp
    if (fn.t != JV_ERR) {
        if (fn.t != JV_FUNC) jr_fail(r, n->pos, "callee is not a function: got %s", jv_type_name(fn));
        else res = jinja_call(r, fn, args, n->n_items, s, n->pos);
        jv_release(r, fn);
    }
    release_args(r, args, n->n_items);
out_free:
    if (args != stack) free(args);
    return res;
}

// A filter's or test's name and argument nodes: NAME or NAME(args).
static bool callee_name(jrender *r, const jnode *f, const char *what, const char **name, jnode *const **items,
                        uint32_t *n_items) {
    *items = NULL, *n_items = 0;
    if (f->kind == JN_NAME) {
        *name = sym_name(r, f);
        return true;
    }
    if (f->kind == JN_CALL && f->a->kind == JN_NAME) {
        *name = sym_name(r, f->a);
        *items = f->items, *n_items = f->n_items;
        return true;
    }
    jr_fail(r, f->pos, "invalid %s expression", what);
    return false;
}

static bool coerced_by(const char *name) {
    static const char *const names[] = {"capitalize", "lower", "replace", "strip", "title", "upper", "wordcount"};
    for (size_t i = 0; i < FT_ARRAY_LEN(names); i++)
        if (!strcmp(name, names[i])) return true;
    return false;
}

// Applies filter node f to input (owned; released).
static jv apply_filter(jrender *r, const jnode *f, jv input, jscope *s, long pos) {
    const char *name;
    jnode *const *items;
    uint32_t n_items;
    if (!callee_name(r, f, "filter", &name, &items, &n_items)) {
        jv_release(r, input);
        return jv_err();
    }
    static const char *const alias[][2] = {{"count", "length"}, {"d", "default"}, {"e", "escape"}, {"trim", "strip"}};
    for (size_t i = 0; i < FT_ARRAY_LEN(alias); i++)
        if (!strcmp(name, alias[i][0])) name = alias[i][1];
    // (llama.cpp reads a non-string as its str() for these only when they have no arguments)
    if (f->kind == JN_NAME && input.t != JV_UNDEF && input.t != JV_STR && coerced_by(name)) {
        jv str = jv_to_str(r, input, pos);
        jv_release(r, input);
        if (str.t == JV_ERR) return str;
        input = str;
    }
    uint32_t n = n_items + 1;
    jv stack[ARGS_ON_STACK], *args = n <= ARGS_ON_STACK ? stack : ft_malloc(n * sizeof(jv));
    jv res = jv_err();
    args[0] = input;
    if (eval_args(r, items, n_items, s, args + 1)) {
        const jbuiltin *b = jinja_has_methods(input) ? jinja_method(input, name, strlen(name)) : NULL;
        if (!jinja_has_methods(input)) jr_fail(r, pos, "%s has no filters", jv_type_name(input));
        else if (!b) jr_fail(r, pos, "unknown filter '%s' for type %s", name, jv_type_name(input));
        else res = b->fn(r, &(jargs){args, n, b->name, pos});
        release_args(r, args + 1, n_items);
    }
    jv_release(r, input);
    if (args != stack) free(args);
    return r->failed ? (jv_release(r, res), jv_err()) : res;
}

static jv eval_test(jrender *r, const jnode *n, jscope *s) {
    jv input = eval(r, n->a, s);
    if (input.t == JV_ERR) return input;
    const char *name;
    jnode *const *items;
    uint32_t n_items;
    if (!callee_name(r, n->b, "test", &name, &items, &n_items)) {
        jv_release(r, input);
        return jv_err();
    }
    uint32_t na = n_items + 1;
    jv stack[ARGS_ON_STACK], *args = na <= ARGS_ON_STACK ? stack : ft_malloc(na * sizeof(jv));
    jv res = jv_err();
    args[0] = input;
    if (eval_args(r, items, n_items, s, args + 1)) {
        const jbuiltin *b = jinja_test(name, strlen(name));
        if (!b) jr_fail(r, n->pos, "unknown test '%s'", name);
        else res = b->fn(r, &(jargs){args, na, b->name, n->pos});
        release_args(r, args + 1, n_items);
    }
    jv_release(r, input);
    if (args != stack) free(args);
    if (res.t != JV_ERR && n->op) {
        int t = jv_truthy(r, res, n->pos);
        jv_release(r, res);
        res = t < 0 ? jv_err() : jv_bool(!t);
    }
    return r->failed ? (jv_release(r, res), jv_err()) : res;
}

static const char *op_name(jop op) {
    static const char *const names[] = {
        [JOP_AND] = "and", [JOP_OR] = "or", [JOP_EQ] = "==", [JOP_NE] = "!=", [JOP_LT] = "<",
        [JOP_GT] = ">",    [JOP_LE] = "<=", [JOP_GE] = ">=", [JOP_IN] = "in", [JOP_NOT_IN] = "not in",
        [JOP_ADD] = "+",   [JOP_SUB] = "-", [JOP_CONCAT] = "~", [JOP_MUL] = "*", [JOP_DIV] = "/",
        [JOP_FLOORDIV] = "//", [JOP_MOD] = "%",
    };
    return names[op];
}

// llama.cpp turns a float result of integer operands back into an integer by a C cast.
static int64_t to_int(double d) {
    if (d >= -9223372036854775808.0 && d < 9223372036854775808.0) return (int64_t)d;
    return INT64_MIN; // x86's answer for NaN and out of range
}

// a + b for strings (either side may be None or undefined: empty).
static jv concat(jrender *r, jv a, jv b, long pos) {
    jsb sb = {0};
    if (a.t != JV_NONE && a.t != JV_UNDEF && !jv_write_str(r, &sb, a, pos)) goto fail;
    if (b.t != JV_NONE && b.t != JV_UNDEF && !jv_write_str(r, &sb, b, pos)) goto fail;
    return jsb_done(r, &sb);
fail:
    jsb_free(r, &sb);
    return jv_err();
}

static jv binary_values(jrender *r, jop op, jv l, jv rv, long pos) {
    if (op == JOP_EQ || op == JOP_NE) {
        int e = jv_equal(r, l, rv);
        return e < 0 ? jv_err() : jv_bool(op == JOP_EQ ? e : !e);
    }
    bool l_null = l.t == JV_NONE || l.t == JV_UNDEF, r_null = rv.t == JV_NONE || rv.t == JV_UNDEF;
    bool l_str = l.t == JV_STR, r_str = rv.t == JV_STR;
    if (l.t == JV_UNDEF || rv.t == JV_UNDEF || l.t == JV_NONE || rv.t == JV_NONE) {
        if (rv.t == JV_UNDEF && (op == JOP_IN || op == JOP_NOT_IN)) return jv_bool(op == JOP_NOT_IN);
        if ((op == JOP_ADD || op == JOP_CONCAT) && ((l_null && r_str) || (r_null && l_str))) return concat(r, l, rv, pos);
        if (l.t == JV_UNDEF || rv.t == JV_UNDEF)
            return jr_fail(r, pos, "cannot perform operation %s on undefined values", op_name(op));
        return jr_fail(r, pos, "cannot perform operation %s on null values", op_name(op));
    }
    if (jv_is_num(l) && jv_is_num(rv)) {
        double a, b;
        jv_as_float(l, &a), jv_as_float(rv, &b);
        bool fl = l.t == JV_FLOAT || rv.t == JV_FLOAT;
        switch (op) {
        case JOP_ADD: return fl ? jv_float(a + b) : jv_int(to_int(a + b));
        case JOP_SUB: return fl ? jv_float(a - b) : jv_int(to_int(a - b));
        case JOP_MUL: return fl ? jv_float(a * b) : jv_int(to_int(a * b));
        case JOP_DIV: return jv_float(a / b);
        case JOP_MOD: return fl ? jv_float(fmod(a, b)) : jv_int(to_int(fmod(a, b)));
        case JOP_FLOORDIV:
            if (!fl) {
                if (rv.i == 0) return jr_fail(r, pos, "integer division by zero");
                if (rv.i == -1) return jv_int(l.i == INT64_MIN ? INT64_MIN : -l.i);
                int64_t q = l.i / rv.i;
                return jv_int(q - ((l.i % rv.i != 0) && ((l.i < 0) != (rv.i < 0))));
            }
            return jv_float(floor(a / b));
        case JOP_LT: return jv_bool(a < b);
        case JOP_GT: return jv_bool(a > b);
        case JOP_GE: return jv_bool(a >= b);
        case JOP_LE: return jv_bool(a <= b);
        default: break;
        }
    }
    if (jv_is_seq(l) && jv_is_seq(rv)) {
        if (op == JOP_ADD) {
            jlist *x = JLIST(l), *y = JLIST(rv);
            if (x->n + y->n > r->lim.max_items)
                return jr_fail(r, pos, "a list grew past %zu items (max_items)", r->lim.max_items);
            jv out = jv_list_new(r, x->n + y->n, false);
            if (out.t == JV_ERR || !jr_step(r, (x->n + y->n) >> 4)) return jv_err();
            for (size_t i = 0; i < x->n; i++) JLIST(out)->v[JLIST(out)->n++] = jv_retain(x->v[i]);
            for (size_t i = 0; i < y->n; i++) JLIST(out)->v[JLIST(out)->n++] = jv_retain(y->v[i]);
            return out;
        }
    } else if (jv_is_seq(rv) && (op == JOP_IN || op == JOP_NOT_IN)) {
        jv m = jinja_in(r, l, rv, pos);
        return m.t == JV_ERR ? m : jv_bool(op == JOP_IN ? m.b : !m.b);
    }
    if ((l_str || r_str) && (op == JOP_CONCAT || op == JOP_ADD)) return concat(r, l, rv, pos);
    if (op == JOP_MUL && ((l_str && rv.t == JV_INT) || (l.t == JV_INT && r_str))) {
        const jstr *str = l_str ? JSTR(l) : JSTR(rv);
        int64_t times = l_str ? rv.i : l.i;
        if (times <= 0) return jv_str(r, "", 0, false);
        if (str->len && (uint64_t)times > r->lim.max_string / str->len)
            return jr_fail(r, pos, "a string grew past %zu bytes (max_string)", r->lim.max_string);
        jsb sb = {0};
        for (int64_t i = 0; i < times && !r->failed; i++) jsb_put_str(r, &sb, str, 0, str->len);
        return jsb_done(r, &sb);
    }
    if (l_str && r_str && (op == JOP_IN || op == JOP_NOT_IN)) {
        jv m = jinja_in(r, l, rv, pos);
        return m.t == JV_ERR ? m : jv_bool(op == JOP_IN ? m.b : !m.b);
    }
    if (rv.t == JV_DICT && (op == JOP_IN || op == JOP_NOT_IN)) {
        jv m = jinja_in(r, l, rv, pos);
        return m.t == JV_ERR ? m : jv_bool(op == JOP_IN ? m.b : !m.b);
    }
    return jr_fail(r, pos, "unknown operator \"%s\" between %s and %s", op_name(op), jv_type_name(l),
                   jv_type_name(rv));
}

static jv eval_binary(jrender *r, const jnode *n, jscope *s) {
    jv l = eval(r, n->a, s);
    if (l.t == JV_ERR) return l;
    if (n->op == JOP_AND || n->op == JOP_OR) {
        int t = jv_truthy(r, l, n->pos);
        if (t < 0) {
            jv_release(r, l);
            return jv_err();
        }
        if ((n->op == JOP_AND) == (t == 1)) {
            jv_release(r, l);
            return eval(r, n->b, s);
        }
        return l;
    }
    jv rv = eval(r, n->b, s);
    if (rv.t == JV_ERR) {
        jv_release(r, l);
        return rv;
    }
    jv res = binary_values(r, n->op, l, rv, n->pos);
    jv_release(r, l);
    jv_release(r, rv);
    return res;
}

static jv eval_collection(jrender *r, const jnode *n, jscope *s) {
    if (n->kind == JN_DICT) {
        jv d = jv_dict_new(r, JDICT_PLAIN);
        for (uint32_t i = 0; d.t != JV_ERR && i + 1 < n->n_items; i += 2) {
            jv k = eval(r, n->items[i], s);
            jv v = k.t == JV_ERR ? k : eval(r, n->items[i + 1], s);
            if (v.t != JV_ERR && (!jv_immutable(k) || !jv_hashable(k))) {
                jr_fail(r, n->items[i]->pos, "object key of unhashable type: %s", jv_type_name(k));
                jv_release(r, v);
                v = jv_err();
            }
            if (v.t == JV_ERR || !jv_dict_set(r, d, k, v)) {
                jv_release(r, k);
                jv_release(r, d);
                return jv_err();
            }
            jv_release(r, k);
        }
        return d;
    }
    jv l = jv_list_new(r, n->n_items, n->kind == JN_TUPLE);
    for (uint32_t i = 0; l.t != JV_ERR && i < n->n_items; i++) {
        jv v = eval(r, n->items[i], s);
        if (v.t == JV_ERR || !jv_list_push(r, l, v)) {
            jv_release(r, l);
            return jv_err();
        }
    }
    return l;
}

static jv eval_inner(jrender *r, const jnode *n, jscope *s) {
    switch (n->kind) {
    case JN_INT: return jv_int(n->i);
    case JN_FLOAT: return jv_float(n->f);
    case JN_STR: return (jv){.t = JV_STR, .o = &n->str->h};
    case JN_NAME: return eval_name(r, n, s);
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT: return eval_collection(r, n, s);
    case JN_MEMBER:
    case JN_INDEX: return eval_member(r, n, s);
    case JN_CALL: return eval_call(r, n, s);
    case JN_KWARG: {
        if (n->a->kind != JN_NAME) return jr_fail(r, n->pos, "keyword argument key must be an identifier");
        jv v = eval(r, n->b, s);
        return v.t == JV_ERR ? v : jv_kwarg_new(r, sym_name(r, n->a), v);
    }
    case JN_SPREAD: return jr_fail(r, n->pos, "argument unpacking (*args) is not supported");
    case JN_FILTER: {
        jv input = eval(r, n->a, s);
        return input.t == JV_ERR ? input : apply_filter(r, n->b, input, s, n->pos);
    }
    case JN_TEST: return eval_test(r, n, s);
    case JN_BINARY: return eval_binary(r, n, s);
    case JN_NOT: {
        jv v = eval(r, n->a, s);
        if (v.t == JV_ERR) return v;
        int t = jv_truthy(r, v, n->pos);
        jv_release(r, v);
        return t < 0 ? jv_err() : jv_bool(!t);
    }
    case JN_TERNARY:
    case JN_SELECT: {
        jv c = eval(r, n->a, s);
        if (c.t == JV_ERR) return c;
        int t = jv_truthy(r, c, n->pos);
        jv_release(r, c);
        if (t < 0) return jv_err();
        if (t) return eval(r, n->b, s);
        return n->kind == JN_TERNARY ? eval(r, n->c, s) : jv_undef(NULL);
    }
    case JN_BLANK: return jv_undef(NULL);
    default: return jr_fail(r, n->pos, "cannot evaluate this here");
    }
}

static jv eval(jrender *r, const jnode *n, jscope *s) {
    if (!enter(r, n->pos)) return jv_err();
    jv v = eval_inner(r, n, s);
    r->depth--;
    if (v.t != JV_ERR && r->failed) {
        jv_release(r, v);
        v = jv_err();
    }
    return v;
}

// ---------------------------------------------------------------------------------------------
// Macros

jv jinja_call_macro(jrender *r, const jfunc *f, jv *args, size_t n, jscope *s, long pos) {
    const jnode *m = f->macro;
    const char *name = m->a->kind == JN_NAME ? sym_name(r, m->a) : "macro";
    jscope ms = {.parent = s};
    jv res = jv_err();
    for (uint32_t i = 0; i < m->n_alt; i++) {
        const jnode *p = m->alt[i];
        const jnode *id = p->kind == JN_KWARG ? p->a : p;
        if (id->kind != JN_NAME) {
            jr_fail(r, p->pos, "invalid parameter in macro '%s'", name);
            goto out;
        }
        jv v;
        if (i < n) {
            // by name, else the argument at this position unless it is a keyword argument
            v = jv_undef(NULL);
            for (size_t k = 0; k < n; k++) {
                if (args[k].t == JV_KWARG && !strcmp(JKWARG(args[k])->name, sym_name(r, id))) {
                    v = jv_retain(JKWARG(args[k])->v);
                    break;
                }
            }
            if (v.t == JV_UNDEF && args[i].t != JV_KWARG) v = jv_retain(args[i]);
        } else if (p->kind == JN_KWARG) {
            v = eval(r, p->b, s); // a default, in the caller's scope
            if (v.t == JV_ERR) goto out;
        } else {
            jr_fail(r, pos, "not enough arguments provided to '%s'", name);
            goto out;
        }
        scope_set(r, &ms, id->sym, v);
    }
    int st;
    res = capture(r, m->items, m->n_items, &ms, &st);
    if (st == EX_BREAK || st == EX_CONTINUE) jr_fail(r, pos, "break or continue outside a loop (in macro '%s')", name);
out:
    scope_free(r, &ms);
    return res;
}

// ---------------------------------------------------------------------------------------------
// Statements

static int exec_stmt(jrender *r, const jnode *n, jscope *s);

static int exec_body(jrender *r, jnode *const *items, uint32_t n, jscope *s) {
    for (uint32_t i = 0; i < n; i++) {
        int st = exec_stmt(r, items[i], s);
        if (st != EX_OK) return st;
    }
    return EX_OK;
}

// Binds a loop item to the loop's names (a name, or names unpacking it).
static bool bind_loop_var(jrender *r, const jnode *var, jv item, jscope *s) {
    if (var->kind == JN_NAME) {
        scope_set(r, s, var->sym, jv_retain(item));
        return true;
    }
    for (uint32_t k = 0; k < var->n_items; k++) {
        if (var->items[k]->kind != JN_NAME) {
            jr_fail(r, var->items[k]->pos, "cannot unpack to a non-identifier");
            return false;
        }
        scope_set(r, s, var->items[k]->sym, jv_retain(JLIST(item)->v[k]));
    }
    return true;
}

static int exec_for(jrender *r, const jnode *n, jscope *s) {
    const jnode *var = n->a, *iter = n->b, *test = NULL;
    size_t n_defer = r->out->n_defer;
    if (iter->kind == JN_SELECT) test = iter->a, iter = iter->b;
    if (var->kind != JN_NAME && var->kind != JN_TUPLE) {
        jr_fail(r, var->pos, "invalid loop variable");
        return EX_ERR;
    }
    jscope ls = {.parent = s};
    int status = EX_ERR;
    jv seq = eval(r, iter, &ls), items = jv_undef(NULL), kept = jv_undef(NULL);
    if (seq.t == JV_ERR) goto out;
    bool dict = seq.t == JV_DICT;
    if (seq.t != JV_UNDEF && !jv_is_seq(seq) && !dict) {
        jr_fail(r, iter->pos, "expected an iterable or an object in a for loop: got %s", jv_type_name(seq));
        goto out;
    }
    size_t count = seq.t == JV_UNDEF ? 0 : dict ? JDICT(seq)->n : JLIST(seq)->n;
    // the items as they are now (the loop may change the list), a dict's as (key, value) tuples
    items = jv_list_new(r, count, false);
    if (items.t == JV_ERR || !jr_step(r, count >> 4)) goto out;
    for (size_t i = 0; i < count; i++) {
        jv it;
        if (dict) {
            it = jv_list_new(r, 2, true);
            if (it.t == JV_ERR) goto out;
            JLIST(it)->v[0] = jv_retain(JDICT(seq)->k[i]);
            JLIST(it)->v[1] = jv_retain(JDICT(seq)->v[i]);
            JLIST(it)->n = 2;
        } else {
            it = jv_retain(JLIST(seq)->v[i]);
        }
        JLIST(items)->v[JLIST(items)->n++] = it;
    }
    // the loop's values: a dict's keys for one name; unpacked items checked first
    kept = jv_list_new(r, count, false);
    if (kept.t == JV_ERR) goto out;
    jv *pick = ft_malloc((count ? count : 1) * sizeof(jv)); // item bound to the names, per kept value
    size_t n_kept = 0;
    for (size_t i = 0; i < count; i++) {
        jv it = JLIST(items)->v[i], cur = it;
        if (var->kind == JN_NAME) {
            if (dict) cur = JLIST(it)->v[0];
        } else {
            if (!jv_is_seq(it)) {
                jr_fail(r, var->pos, "cannot unpack non-iterable type: %s", jv_type_name(it));
                free(pick);
                goto out;
            }
            if (JLIST(it)->n != var->n_items) {
                jr_fail(r, var->pos, "too %s items to unpack", var->n_items > JLIST(it)->n ? "few" : "many");
                free(pick);
                goto out;
            }
        }
        if (test) {
            jscope ts = {.parent = &ls};
            bool ok = bind_loop_var(r, var, var->kind == JN_NAME ? cur : it, &ts);
            jv t = ok ? eval(r, test, &ts) : jv_err();
            int truth = t.t == JV_ERR ? -1 : jv_truthy(r, t, test->pos);
            jv_release(r, t);
            scope_free(r, &ts);
            if (truth < 0) {
                free(pick);
                goto out;
            }
            if (!truth) continue;
        }
        JLIST(kept)->v[JLIST(kept)->n++] = jv_retain(cur);
        pick[n_kept++] = var->kind == JN_NAME ? cur : it;
    }
    bool none_completed = true;
    status = EX_OK;
    int32_t loop_sym = sym_find(r->t, "loop", 4);
    for (size_t i = 0; i < n_kept; i++) {
        if (!jr_step(r, 1)) {
            status = EX_ERR;
            break;
        }
        if (loop_sym >= 0) {
            jv loop = jv_dict_new(r, JDICT_LOOP);
            jv vals[9] = {jv_int((int64_t)i + 1),
                          jv_int((int64_t)i),
                          jv_int((int64_t)(n_kept - i)),
                          jv_int((int64_t)(n_kept - i - 1)),
                          jv_bool(i == 0),
                          jv_bool(i == n_kept - 1),
                          jv_int((int64_t)n_kept),
                          i > 0 ? jv_retain(JLIST(kept)->v[i - 1]) : jv_undef("previtem"),
                          i + 1 < n_kept ? jv_retain(JLIST(kept)->v[i + 1]) : jv_undef("nextitem")};
            for (int k = 0; k < 9; k++) {
                if (loop.t == JV_ERR || !jv_dict_set(r, loop, (jv){.t = JV_STR, .o = &r->t->loop_keys[k]->h}, vals[k])) {
                    for (int q = k + 1; q < 9; q++) jv_release(r, vals[q]);
                    loop = jv_err();
                    break;
                }
            }
            if (loop.t == JV_ERR) {
                status = EX_ERR;
                break;
            }
            scope_set(r, &ls, loop_sym, loop);
        }
        if (!bind_loop_var(r, var, pick[i], &ls)) {
            status = EX_ERR;
            break;
        }
        int st = exec_body(r, n->items, n->n_items, &ls);
        if (st == EX_ERR) {
            status = EX_ERR;
            break;
        }
        if (st == EX_CONTINUE) continue;
        if (st == EX_BREAK) break;
        none_completed = false;
    }
    free(pick);
    if (status == EX_OK && none_completed && n->n_alt) status = exec_body(r, n->alt, n->n_alt, s);
    if (status == EX_OK) block_end(r, n_defer);
out:
    jv_release(r, kept);
    jv_release(r, items);
    jv_release(r, seq);
    scope_free(r, &ls);
    return r->failed ? EX_ERR : status;
}

static int exec_set(jrender *r, const jnode *n, jscope *s) {
    const jnode *target = n->a;
    int st = EX_OK;
    jv v = n->b ? eval(r, n->b, s) : capture(r, n->items, n->n_items, s, &st);
    if (v.t == JV_ERR) return st == EX_OK ? EX_ERR : st;
    switch (target->kind) {
    case JN_NAME: scope_set(r, s, target->sym, v); return EX_OK;
    case JN_TUPLE: {
        if (!jv_is_seq(v)) {
            jr_fail(r, n->pos, "cannot unpack non-iterable type in set: %s", jv_type_name(v));
            break;
        }
        if (JLIST(v)->n != target->n_items) {
            jr_fail(r, n->pos, "too %s items to unpack in set", target->n_items > JLIST(v)->n ? "few" : "many");
            break;
        }
        for (uint32_t i = 0; i < target->n_items; i++) {
            if (target->items[i]->kind != JN_NAME) {
                jr_fail(r, target->items[i]->pos, "cannot unpack to a non-identifier in set");
                break;
            }
            scope_set(r, s, target->items[i]->sym, jv_retain(JLIST(v)->v[i]));
        }
        break;
    }
    case JN_MEMBER: {
        if (target->b->kind != JN_NAME) {
            jr_fail(r, n->pos, "cannot assign to a member with a non-identifier property");
            break;
        }
        jv obj = eval(r, target->a, s);
        if (obj.t == JV_ERR) break;
        if (obj.t != JV_DICT) {
            jr_fail(r, n->pos, "cannot assign to a member of %s", jv_type_name(obj));
        } else {
            const char *key = sym_name(r, target->b);
            jv k = jv_str(r, key, strlen(key), false);
            if (k.t != JV_ERR) {
                jv_dict_set(r, obj, k, v);
                v = jv_undef(NULL);
                jv_release(r, k);
            }
        }
        jv_release(r, obj);
        break;
    }
    case JN_INDEX: jr_fail(r, n->pos, "cannot assign to a computed member"); break;
    default: jr_fail(r, n->pos, "invalid target of set"); break;
    }
    jv_release(r, v);
    return r->failed ? EX_ERR : EX_OK;
}

static int exec_inner(jrender *r, const jnode *n, jscope *s) {
    switch (n->kind) {
    case JN_TEXT: jsb_put_str(r, r->out, n->str, 0, n->str->len); return r->failed ? EX_ERR : EX_OK;
    case JN_NOOP: return EX_OK;
    case JN_BREAK: return EX_BREAK;
    case JN_CONTINUE: return EX_CONTINUE;
    case JN_EMIT: {
        jv v = eval(r, n->a, s);
        if (v.t == JV_ERR) return EX_ERR;
        emit(r, v);
        jv_release(r, v);
        return r->failed ? EX_ERR : EX_OK;
    }
    case JN_IF: {
        jv c = eval(r, n->a, s);
        if (c.t == JV_ERR) return EX_ERR;
        int t = jv_truthy(r, c, n->pos);
        jv_release(r, c);
        if (t < 0) return EX_ERR;
        size_t len = r->out->len, n_defer = r->out->n_defer;
        int st = t ? exec_body(r, n->items, n->n_items, s) : exec_body(r, n->alt, n->n_alt, s);
        if (st == EX_BREAK || st == EX_CONTINUE) jsb_truncate(r, r->out, len, n_defer);
        else if (st == EX_OK) block_end(r, n_defer);
        return r->failed ? EX_ERR : st;
    }
    case JN_FOR: return exec_for(r, n, s);
    case JN_SET: return exec_set(r, n, s);
    case JN_MACRO:
        if (n->a->kind != JN_NAME) {
            jr_fail(r, n->pos, "a macro's name must be an identifier");
            return EX_ERR;
        } else {
            jv f = jv_func_new(r, NULL, n, NULL);
            if (f.t == JV_ERR) return EX_ERR;
            scope_set(r, s, n->a->sym, f);
            return EX_OK;
        }
    case JN_FILTER_BLOCK: {
        int st;
        jv body = capture(r, n->items, n->n_items, s, &st);
        if (body.t == JV_ERR) return st == EX_OK ? EX_ERR : st;
        jv v = apply_filter(r, n->a, body, s, n->pos);
        if (v.t == JV_ERR) return EX_ERR;
        emit(r, v);
        jv_release(r, v);
        return r->failed ? EX_ERR : EX_OK;
    }
    default: jr_fail(r, n->pos, "cannot execute this here"); return EX_ERR;
    }
}

static int exec_stmt(jrender *r, const jnode *n, jscope *s) {
    if (!enter(r, n->pos)) return EX_ERR;
    int st = exec_inner(r, n, s);
    r->depth--;
    return r->failed ? EX_ERR : st;
}

// ---------------------------------------------------------------------------------------------
// Entry

tok_jinja_limits tok_jinja_default_limits(void) {
    return (tok_jinja_limits){
        .max_output = 64u << 20,
        .max_string = 64u << 20,
        .max_items = 1000000,
        .max_memory = 512u << 20,
        .max_steps = 50000000,
        .max_depth = 1000,
    };
}

tok_jinja_params tok_jinja_default_params(void) {
    return (tok_jinja_params){.limits = tok_jinja_default_limits(), .now = (int64_t)time(NULL)};
}

static void set_var(jrender *r, jscope *root, const char *name, size_t len, jv v) {
    int32_t sym = sym_find(r->t, name, len);
    if (sym >= 0) scope_set(r, root, sym, v);
    else jv_release(r, v);
}

bool tok_jinja_render(const tok_jinja *t, const char *const *vars, const size_t *var_lens, size_t n,
                      const tok_jinja_params *p, tok_chat_prompt *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    jrender r = {.t = t, .lim = p->limits, .now = (time_t)p->now, .err = err};
    r.live.next = r.live.prev = &r.live;
    jscope root = {0};
    jsb text = {.is_output = true};
    r.out = &text;
    static const struct {
        const char *name;
        int v;
    } consts[] = {{"true", 1}, {"True", 1}, {"false", 0}, {"False", 0}, {"none", -1}, {"None", -1}};
    for (size_t i = 0; i < FT_ARRAY_LEN(consts); i++)
        set_var(&r, &root, consts[i].name, strlen(consts[i].name), consts[i].v < 0 ? jv_none() : jv_bool(consts[i].v));
    for (size_t i = 0; i < n && !r.failed; i++) {
        jv d = jv_from_json(&r, vars[i], var_lens[i], i == 0);
        if (d.t == JV_ERR) break;
        jdict *dd = JDICT(d);
        for (size_t k = 0; k < dd->n; k++)
            set_var(&r, &root, JSTR(dd->k[k])->s, JSTR(dd->k[k])->len, jv_retain(dd->v[k]));
        jv_release(&r, d);
    }
    int st = r.failed ? EX_ERR : exec_body(&r, t->body, t->n_body, &root);
    if (st == EX_BREAK || st == EX_CONTINUE) jr_fail(&r, -1, "break or continue outside a loop");
    if (st == EX_OK) block_end(&r, 0);
    scope_free(&r, &root);
    bool ok = !r.failed;
    if (ok) {
        out->text = ft_malloc(text.len + 1);
        memcpy(out->text, text.s ? text.s : "", text.len);
        out->text[text.len] = 0;
        out->len = text.len;
        // markup between the user-text ranges
        out->segs = ft_malloc((2 * text.n_spans + 1) * sizeof(tok_segment));
        size_t at = 0;
        for (size_t k = 0; k <= text.n_spans; k++) {
            size_t from = k < text.n_spans ? text.spans[2 * k] : text.len;
            if (from > at) out->segs[out->n_segs++] = (tok_segment){out->text + at, from - at, true};
            if (k < text.n_spans) {
                size_t to = text.spans[2 * k + 1];
                out->segs[out->n_segs++] = (tok_segment){out->text + from, to - from, false};
                at = to;
            }
        }
    }
    jsb_free(&r, &text);
    // what is left: objects that hold each other (a namespace holding itself)
    size_t swept = 0;
    while (r.live.next != &r.live) {
        jobj *o = r.live.next;
        o->prev->next = o->next;
        o->next->prev = o->prev;
        if (o->kind == JOBJ_LIST) free(((jlist *)o)->v);
        if (o->kind == JOBJ_DICT) free(((jdict *)o)->k), free(((jdict *)o)->v);
        free(o);
        swept++;
    }
    jinja_last_swept = swept;
    return ok;
}
