// jinja_builtins.c: filters and methods of each type, tests, and global functions, with the
// names, arguments and checks of llama.cpp's Jinja engine (value.cpp). A filter `x | f(a)` and a
// method `x.f(a)` are the same function called with x first.
//
// Where llama.cpp's behaviour is its own (and is what a template meets there), it is kept:
// `split()` without a separator splits on " ", `length` counts bytes, `1.0 | string` is "1"
// (numbers' string filter is tojson), `select('x')` reads attribute x, `d.get(k)` wants a
// string key, `{}.default` does not exist, `xs.append(x)` returns xs. Functions llama.cpp lists
// but has not implemented (string join, dict join, replace with a count, tojson sort_keys,
// min/max by attribute, map with a filter) fail as there. Beyond it: `unique` (Jinja's: first
// occurrences, strings compared case-insensitively unless case_sensitive) and `loop.cycle`.
//
// User text: results made of an argument's bytes keep that argument's user-text ranges (a case
// change, a strip, a slice, split pieces, replace, join, format, indent, tojson).
#include "jinja_impl.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SSTR(lit) {.h = {.kind = JOBJ_STR, .is_static = true}, .len = sizeof(lit) - 1, .s = (char *)(lit)}
static jstr g_comma_space = SSTR(", "), g_comma = SSTR(","), g_colon_space = SSTR(": "), g_space = SSTR(" "),
            g_empty = SSTR(""), g_four_spaces = SSTR("    ");

// ---------------------------------------------------------------------------------------------
// Argument checks

static bool need(jrender *r, const jargs *a, size_t min, size_t max) {
    if (a->n >= min && a->n <= max) return true;
    jr_fail(r, a->pos, "function '%s' expected between %zu and %zu arguments, got %zu", a->name, min, max, a->n);
    return false;
}

static bool is_type(jv v, jv_type t) { return t == JV_LIST ? jv_is_seq(v) : v.t == t; }

static const char *type_word(jv_type t) {
    return jv_type_name((jv){.t = t});
}

// Argument i has type t (JV_LIST accepts tuples).
static bool arg_is(jrender *r, const jargs *a, size_t i, jv_type t) {
    if (i < a->n && is_type(a->v[i], t)) return true;
    if (i >= a->n) return need(r, a, i + 1, 999);
    jr_fail(r, a->pos, "function '%s' expected a value of type %s, got %s", a->name, type_word(t),
            jv_type_name(a->v[i]));
    return false;
}

// At least n arguments, the first of type t.
static bool first_is(jrender *r, const jargs *a, jv_type t) { return need(r, a, 1, 999) && arg_is(r, a, 0, t); }

// A keyword argument named key, else the positional argument pos unless it is a keyword one.
static jv kw(const jargs *a, const char *key, size_t pos) {
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].t == JV_KWARG && !strcmp(JKWARG(a->v[i])->name, key)) {
            if (JKWARG(a->v[i])->v.t != JV_UNDEF) return JKWARG(a->v[i])->v;
            break;
        }
    if (pos < a->n && a->v[pos].t != JV_KWARG) return a->v[pos];
    return jv_undef(NULL);
}

static jv raise(jrender *r, const jargs *a, const char *what) { return jr_fail(r, a->pos, "%s", what); }

static jv not_implemented(jrender *r, const jargs *a) {
    return jr_fail(r, a->pos, "'%s' is not implemented for %s", a->name, a->n ? jv_type_name(a->v[0]) : "this");
}

static int truthy(jrender *r, const jargs *a, jv v) { return jv_truthy(r, v, a->pos); }

static bool as_int(jrender *r, const jargs *a, jv v, int64_t *out) {
    if (jv_as_int(v, out)) return true;
    jr_fail(r, a->pos, "%s is not an int value", jv_type_name(v));
    return false;
}

// ---------------------------------------------------------------------------------------------
// Comparisons (llama.cpp's value_compare: numbers as floats, a string with a number or a string
// as strings, booleans for == and != only; anything else compares false)

enum cmp { CMP_EQ, CMP_GE, CMP_GT, CMP_LT, CMP_NE };

static int compare(jrender *r, jv x, jv y, enum cmp op, long pos) {
    if (jv_is_num(x) && jv_is_num(y)) {
        double a, b;
        jv_as_float(x, &a), jv_as_float(y, &b);
        switch (op) {
        case CMP_EQ: return a == b;
        case CMP_GE: return a >= b;
        case CMP_GT: return a > b;
        case CMP_LT: return a < b;
        default: return a != b;
        }
    }
    if ((x.t == JV_STR && (jv_is_num(y) || y.t == JV_STR)) || (y.t == JV_STR && jv_is_num(x))) {
        jv sa = jv_to_str(r, x, pos), sb = sa.t == JV_ERR ? sa : jv_to_str(r, y, pos);
        if (sb.t == JV_ERR) {
            jv_release(r, sa);
            return -1;
        }
        const jstr *p = JSTR(sa), *q = JSTR(sb);
        int c = memcmp(p->s, q->s, FT_MIN(p->len, q->len));
        if (!c) c = p->len < q->len ? -1 : p->len > q->len;
        jv_release(r, sa), jv_release(r, sb);
        switch (op) {
        case CMP_EQ: return c == 0;
        case CMP_GE: return c >= 0;
        case CMP_GT: return c > 0;
        case CMP_LT: return c < 0;
        default: return c != 0;
        }
    }
    if (x.t == JV_BOOL && y.t == JV_BOOL) {
        if (op == CMP_EQ) return x.b == y.b;
        if (op == CMP_NE) return x.b != y.b;
        jr_fail(r, pos, "unsupported comparison operator for bool type");
        return -1;
    }
    return 0;
}

// Stable merge sort of v[0..n) by less(a, b) (compare lt, or gt to reverse); false on a failure.
typedef struct sort_key {
    jv key;  // what is compared
    jv item; // what is sorted
} sort_key;

static bool merge_sort(jrender *r, sort_key *v, size_t n, sort_key *tmp, enum cmp op, long pos) {
    if (n < 2) return true;
    size_t h = n / 2;
    if (!merge_sort(r, v, h, tmp, op, pos) || !merge_sort(r, v + h, n - h, tmp, op, pos)) return false;
    if (!jr_step(r, n >> 4)) return false;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int less = compare(r, v[j].key, v[i].key, op, pos); // take the right one only if strictly first
        if (less < 0) return false;
        tmp[k++] = less ? v[j++] : v[i++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof(sort_key));
    return true;
}

// ---------------------------------------------------------------------------------------------
// `in`

jv jinja_in(jrender *r, jv needle, jv hay, long pos) {
    if (hay.t == JV_UNDEF) return jv_bool(false);
    if (jv_is_seq(hay)) {
        jlist *l = JLIST(hay);
        if (!jr_step(r, l->n >> 4)) return jv_err();
        for (size_t i = 0; i < l->n; i++) {
            int e = jv_equal(r, needle, l->v[i]);
            if (e < 0) return jv_err();
            if (e) return jv_bool(true);
        }
        return jv_bool(false);
    }
    if (hay.t == JV_STR) {
        if (needle.t != JV_STR)
            return jr_fail(r, pos, "'in' expects a string when searching a string, got %s", jv_type_name(needle));
        const jstr *h = JSTR(hay), *nd = JSTR(needle);
        if (!jr_step(r, h->len >> 8)) return jv_err();
        if (nd->len == 0) return jv_bool(true);
        return jv_bool(h->len >= nd->len && memmem(h->s, h->len, nd->s, nd->len) != NULL);
    }
    if (hay.t == JV_DICT) {
        if (!jv_immutable(needle) || !jv_hashable(needle))
            return jr_fail(r, pos, "object key of unhashable type: %s", jv_type_name(needle));
        return jv_bool(jv_dict_get(JDICT(hay), needle) != NULL);
    }
    return jr_fail(r, pos, "'in' expects a list, a string or an object, got %s", jv_type_name(hay));
}

// ---------------------------------------------------------------------------------------------
// Slicing (Python's, with llama.cpp's bounds)

jv jinja_slice(jrender *r, jv v, int64_t start, int64_t stop, int64_t step) {
    int64_t len = v.t == JV_STR ? (int64_t)JSTR(v)->len : (int64_t)JLIST(v)->n;
    int64_t a, b;
    if (step > 0) {
        a = start < 0 ? FT_MAX(len + start, 0) : FT_MIN(start, len);
        b = stop < 0 ? FT_MAX(len + stop, 0) : FT_MIN(stop, len);
    } else {
        a = start < 0 ? FT_MAX(len + start, 0) : FT_MIN(start, len - 1);
        b = stop < -1 ? FT_MAX(len + stop, -1) : FT_MIN(stop, len - 1);
    }
    int64_t dir = step > 0 ? 1 : -1;
    if (v.t == JV_STR) {
        const jstr *s = JSTR(v);
        jsb sb = {0};
        if (step == 1) {
            if (a < b) jsb_put_str(r, &sb, s, (size_t)a, (size_t)b);
        } else {
            for (int64_t i = a; dir * i < dir * b && !r->failed; i += step)
                if (i >= 0 && i < len) jsb_put_str(r, &sb, s, (size_t)i, (size_t)i + 1);
        }
        return jsb_done(r, &sb);
    }
    jlist *l = JLIST(v);
    jv out = jv_list_new(r, 0, v.t == JV_TUPLE);
    for (int64_t i = a; out.t != JV_ERR && dir * i < dir * b; i += step) {
        if (i >= 0 && i < len && !jv_list_push(r, out, jv_retain(l->v[i]))) {
            jv_release(r, out);
            return jv_err();
        }
    }
    return out;
}

static jv b_slice(jrender *r, const jargs *a) {
    jv_type t = a->n && a->v[0].t == JV_STR ? JV_STR : JV_LIST;
    if (!need(r, a, 2, 4) || !arg_is(r, a, 0, t) || !arg_is(r, a, 1, JV_INT)) return jv_err();
    int64_t start = a->v[1].i, stop, step = 1;
    if (!as_int(r, a, a->n > 2 ? a->v[2] : jv_undef(NULL), &stop)) return jv_err();
    if (a->n > 3 && !as_int(r, a, a->v[3], &step)) return jv_err();
    if (step == 0) return raise(r, a, "slice step cannot be zero");
    return jinja_slice(r, a->v[0], start, stop, step);
}

// ---------------------------------------------------------------------------------------------
// Shared

static jv b_default(jrender *r, const jargs *a) {
    if (!need(r, a, 2, 3)) return jv_err();
    int check_bool = truthy(r, a, kw(a, "boolean", 2));
    if (check_bool < 0) return jv_err();
    bool missing;
    if (check_bool) {
        int t = truthy(r, a, a->v[0]);
        if (t < 0) return jv_err();
        missing = !t;
    } else {
        missing = a->v[0].t == JV_UNDEF || a->v[0].t == JV_NONE;
    }
    return jv_retain(missing ? a->v[1] : a->v[0]);
}

static jv b_tojson(jrender *r, const jargs *a) {
    if (!need(r, a, 1, 5)) return jv_err();
    jv ascii = kw(a, "ensure_ascii", 1), ind = kw(a, "indent", 2), seps = kw(a, "separators", 3);
    int indent = ind.t == JV_INT ? (int)(int32_t)(uint32_t)ind.i : -1;
    int sort = truthy(r, a, kw(a, "sort_keys", 4));
    if (sort < 0) return jv_err();
    if (sort) return jr_fail(r, a->pos, "tojson sort_keys=true is not implemented");
    int ensure_ascii = truthy(r, a, ascii);
    if (ensure_ascii < 0) return jv_err();
    jv item = jv_undef(NULL), key = jv_undef(NULL), res = jv_err();
    const jstr *item_sep = indent < 0 ? &g_comma_space : &g_comma, *key_sep = &g_colon_space;
    if (jv_is_seq(seps)) {
        if (JLIST(seps)->n > 0) {
            item = jv_to_str(r, JLIST(seps)->v[0], a->pos);
            if (item.t == JV_ERR) goto out;
            item_sep = JSTR(item);
        }
        if (JLIST(seps)->n > 1) {
            key = jv_to_str(r, JLIST(seps)->v[1], a->pos);
            if (key.t == JV_ERR) goto out;
            key_sep = JSTR(key);
        }
    }
    jsb b = {0};
    if (jv_write_json(r, &b, a->v[0], indent, item_sep, key_sep, ensure_ascii)) res = jsb_done(r, &b);
    else jsb_free(r, &b);
out:
    jv_release(r, item), jv_release(r, key);
    return res;
}

static jv b_repr(jrender *r, const jargs *a) { return jv_to_str(r, a->v[0], a->pos); }

static jv empty_list(jrender *r, const jargs *a) { return jv_list_new(r, 0, false); }
static jv empty_str(jrender *r, const jargs *a) { return jv_str(r, "", 0, false); }
static jv empty_int(jrender *r, const jargs *a) { return jv_int(0); }
static jv empty_undef(jrender *r, const jargs *a) { return jv_undef(NULL); }
static jv none_str(jrender *r, const jargs *a) { return jv_str(r, "None", 4, false); }

// ---------------------------------------------------------------------------------------------
// Numbers and booleans

static jv int_abs(jrender *r, const jargs *a) {
    if (!first_is(r, a, JV_INT)) return jv_err();
    return jv_int(a->v[0].i < 0 ? (int64_t)(0 - (uint64_t)a->v[0].i) : a->v[0].i);
}
static jv int_int(jrender *r, const jargs *a) { return first_is(r, a, JV_INT) ? a->v[0] : jv_err(); }
static jv int_float(jrender *r, const jargs *a) {
    return first_is(r, a, JV_INT) ? jv_float((double)a->v[0].i) : jv_err();
}
static jv float_abs(jrender *r, const jargs *a) {
    return first_is(r, a, JV_FLOAT) ? jv_float(fabs(a->v[0].f)) : jv_err();
}
static jv float_int(jrender *r, const jargs *a) {
    if (!first_is(r, a, JV_FLOAT)) return jv_err();
    int64_t i;
    jv_as_int(a->v[0], &i);
    return jv_int(i);
}
static jv float_float(jrender *r, const jargs *a) { return first_is(r, a, JV_FLOAT) ? a->v[0] : jv_err(); }
static jv bool_int(jrender *r, const jargs *a) { return first_is(r, a, JV_BOOL) ? jv_int(a->v[0].b) : jv_err(); }
static jv bool_float(jrender *r, const jargs *a) {
    return first_is(r, a, JV_BOOL) ? jv_float(a->v[0].b) : jv_err();
}
static jv bool_str(jrender *r, const jargs *a) {
    if (!first_is(r, a, JV_BOOL)) return jv_err();
    return a->v[0].b ? jv_str(r, "True", 4, false) : jv_str(r, "False", 5, false);
}

// ---------------------------------------------------------------------------------------------
// Strings

static const jstr *S0(const jargs *a) { return JSTR(a->v[0]); }

// The string with each byte mapped by how(position, byte, state); user ranges kept.
static jv str_map(jrender *r, const jargs *a, int how) {
    if (!first_is(r, a, JV_STR)) return jv_err();
    const jstr *s = S0(a);
    jsb b = {0};
    jsb_put_str(r, &b, s, 0, s->len);
    bool next_upper = true;
    for (size_t i = 0; i < b.len; i++) {
        unsigned char c = (unsigned char)b.s[i];
        switch (how) {
        case 0: c = (unsigned char)toupper(c); break;
        case 1: c = (unsigned char)tolower(c); break;
        case 2: c = (unsigned char)(i == 0 ? toupper(c) : tolower(c)); break; // capitalize
        default: // title: a letter after white space upper-cased, the others lower-cased
            if (isspace(c)) {
                next_upper = true;
            } else {
                c = (unsigned char)(next_upper ? toupper(c) : tolower(c));
                next_upper = false;
            }
        }
        b.s[i] = (char)c;
    }
    return jsb_done(r, &b);
}
static jv str_upper(jrender *r, const jargs *a) { return str_map(r, a, 0); }
static jv str_lower(jrender *r, const jargs *a) { return str_map(r, a, 1); }
static jv str_capitalize(jrender *r, const jargs *a) { return str_map(r, a, 2); }
static jv str_title(jrender *r, const jargs *a) { return str_map(r, a, 3); }

static jv str_strip_impl(jrender *r, const jargs *a, bool left, bool right) {
    jv chars = kw(a, "chars", 1), cs = jv_undef(NULL);
    if (chars.t != JV_UNDEF) {
        cs = jv_to_str(r, chars, a->pos);
        if (cs.t == JV_ERR) return cs;
    }
    const jstr *s = S0(a);
    size_t from = 0, to = s->len;
#define STRIPPED(c) (cs.t == JV_STR ? memchr(JSTR(cs)->s, (c), JSTR(cs)->len) != NULL : isspace((unsigned char)(c)))
    if (left)
        while (from < to && STRIPPED(s->s[from])) from++;
    if (right)
        while (to > from && STRIPPED(s->s[to - 1])) to--;
#undef STRIPPED
    jv_release(r, cs);
    if (from == 0 && to == s->len) return jv_retain(a->v[0]);
    jsb b = {0};
    jsb_put_str(r, &b, s, from, to);
    return jsb_done(r, &b);
}
static jv str_strip(jrender *r, const jargs *a) {
    if (a->v[0].t != JV_STR) return raise(r, a, "strip() first argument must be a string");
    return str_strip_impl(r, a, true, true);
}
static jv str_lstrip(jrender *r, const jargs *a) {
    return first_is(r, a, JV_STR) ? str_strip_impl(r, a, true, false) : jv_err();
}
static jv str_rstrip(jrender *r, const jargs *a) {
    return first_is(r, a, JV_STR) ? str_strip_impl(r, a, false, true) : jv_err();
}

static jv str_length(jrender *r, const jargs *a) {
    return first_is(r, a, JV_STR) ? jv_int((int64_t)S0(a)->len) : jv_err();
}

static jv str_affix(jrender *r, const jargs *a, bool end) {
    if (!need(r, a, 2, 999) || !arg_is(r, a, 0, JV_STR) || !arg_is(r, a, 1, JV_STR)) return jv_err();
    const jstr *s = S0(a), *p = JSTR(a->v[1]);
    if (p->len > s->len) return jv_bool(false);
    return jv_bool(!memcmp(s->s + (end ? s->len - p->len : 0), p->s, p->len));
}
static jv str_startswith(jrender *r, const jargs *a) { return str_affix(r, a, false); }
static jv str_endswith(jrender *r, const jargs *a) { return str_affix(r, a, true); }

static const char *rfind(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (!memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

static bool push_piece(jrender *r, jv list, const jstr *s, size_t from, size_t to) {
    jsb b = {0};
    jsb_put_str(r, &b, s, from, to);
    jv piece = jsb_done(r, &b);
    return piece.t != JV_ERR && jv_list_push(r, list, piece);
}

static jv str_split_impl(jrender *r, const jargs *a, bool from_right) {
    if (!need(r, a, 1, 3)) return jv_err();
    if (a->v[0].t != JV_STR)
        return raise(r, a, from_right ? "rsplit() first argument must be a string" : "split() first argument must be a string");
    jv delim = a->n > 1 ? jv_to_str(r, a->v[1], a->pos) : (jv){.t = JV_STR, .o = &g_space.h};
    if (delim.t == JV_ERR) return delim;
    jv out = jv_err();
    int64_t maxsplit = -1;
    const jstr *s = S0(a), *d = JSTR(delim);
    if (d->len == 0) {
        raise(r, a, "empty separator");
        goto done;
    }
    if (a->n > 2 && !as_int(r, a, a->v[2], &maxsplit)) goto done;
    if (!jr_step(r, s->len >> 8)) goto done;
    out = jv_list_new(r, 0, false);
    if (out.t == JV_ERR) goto done;
    if (!from_right) {
        size_t at = 0;
        const char *hit;
        while (maxsplit != 0 && (hit = memmem(s->s + at, s->len - at, d->s, d->len))) {
            size_t pos = (size_t)(hit - s->s);
            if (!push_piece(r, out, s, at, pos)) goto fail;
            at = pos + d->len;
            maxsplit--;
        }
        if (!push_piece(r, out, s, at, s->len)) goto fail;
    } else {
        size_t end = s->len;
        const char *hit;
        while (maxsplit != 0 && (hit = rfind(s->s, end, d->s, d->len))) {
            size_t pos = (size_t)(hit - s->s);
            if (!push_piece(r, out, s, pos + d->len, end)) goto fail;
            end = pos;
            maxsplit--;
        }
        if (!push_piece(r, out, s, 0, end)) goto fail;
        jlist *l = JLIST(out);
        for (size_t i = 0; i < l->n / 2; i++) {
            jv t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
    }
    goto done;
fail:
    jv_release(r, out);
    out = jv_err();
done:
    jv_release(r, delim);
    return out;
}
static jv str_split(jrender *r, const jargs *a) { return str_split_impl(r, a, false); }
static jv str_rsplit(jrender *r, const jargs *a) { return str_split_impl(r, a, true); }

static jv str_replace(jrender *r, const jargs *a) {
    if (!need(r, a, 3, 999) || !arg_is(r, a, 0, JV_STR) || !arg_is(r, a, 1, JV_STR) || !arg_is(r, a, 2, JV_STR))
        return jv_err();
    int64_t count = -1;
    if (a->n > 3 && !as_int(r, a, a->v[3], &count)) return jv_err();
    if (count > 0) return raise(r, a, "replace with a count is not implemented");
    const jstr *s = S0(a), *old = JSTR(a->v[1]), *rep = JSTR(a->v[2]);
    if (old->len == rep->len && !memcmp(old->s, rep->s, old->len)) return jv_retain(a->v[0]);
    jsb b = {0};
    if (old->len == 0) {
        if (!jr_step(r, s->len)) return jv_err();
        jsb_put_str(r, &b, rep, 0, rep->len);
        for (size_t i = 0; i < s->len && !r->failed; i++) {
            jsb_put_str(r, &b, s, i, i + 1);
            jsb_put_str(r, &b, rep, 0, rep->len);
        }
    } else {
        size_t at = 0;
        const char *hit;
        while (!r->failed && (hit = memmem(s->s + at, s->len - at, old->s, old->len))) {
            size_t pos = (size_t)(hit - s->s);
            jsb_put_str(r, &b, s, at, pos);
            jsb_put_str(r, &b, rep, 0, rep->len);
            at = pos + old->len;
        }
        jsb_put_str(r, &b, s, at, s->len);
    }
    return jsb_done(r, &b);
}

// "{}" placeholders filled with the arguments' str() in turn.
static jv str_format(jrender *r, const jargs *a) {
    if (a->v[0].t != JV_STR) return raise(r, a, "format() first argument must be a string");
    const jstr *f = S0(a);
    jsb b = {0};
    size_t arg = 1, lit = 0;
    for (size_t i = 0; i < f->len && !r->failed; i++) {
        if (f->s[i] != '{') continue;
        if (i + 1 >= f->len || f->s[i + 1] != '}') {
            jsb_free(r, &b);
            return raise(r, a, "format() only supports simple '{}' placeholders");
        }
        jsb_put_str(r, &b, f, lit, i);
        if (arg >= a->n) {
            jsb_free(r, &b);
            return jr_fail(r, a->pos, "format() has more placeholders than arguments");
        }
        if (!jv_write_str(r, &b, a->v[arg++], a->pos)) {
            jsb_free(r, &b);
            return jv_err();
        }
        lit = ++i + 1;
    }
    jsb_put_str(r, &b, f, lit, f->len);
    return jsb_done(r, &b);
}

// int(): C's strtol in the base (0: from the prefix), as std::stoi: leading white space, a
// sign, digits up to the first other character; none, or out of int's range: the default.
static jv str_int(jrender *r, const jargs *a) {
    jv def = kw(a, "default", 1), base_v = kw(a, "base", 2);
    int64_t base = 10, d = 0;
    if (base_v.t != JV_UNDEF && !as_int(r, a, base_v, &base)) return jv_err();
    if (base != 0 && (base < 2 || base > 36)) return raise(r, a, "int() base must be 0 or between 2 and 36");
    if (a->v[0].t != JV_STR) return raise(r, a, "int() first argument must be a string");
    errno = 0;
    char *end;
    long v = strtol(S0(a)->s, &end, (int)base);
    if (end != S0(a)->s && errno != ERANGE && v >= INT_MIN && v <= INT_MAX) return jv_int(v);
    if (def.t != JV_UNDEF && !as_int(r, a, def, &d)) return jv_err();
    return jv_int(d);
}

static jv str_float(jrender *r, const jargs *a) {
    if (!first_is(r, a, JV_STR)) return jv_err();
    jv def = kw(a, "default", 1);
    errno = 0;
    char *end;
    double v = strtod(S0(a)->s, &end);
    if (end != S0(a)->s && errno != ERANGE) return jv_float(v);
    double d = 0;
    if (def.t != JV_UNDEF && !jv_as_float(def, &d)) return jr_fail(r, a->pos, "%s is not a float value", jv_type_name(def));
    return jv_float(d);
}

static jv str_self(jrender *r, const jargs *a) { return first_is(r, a, JV_STR) ? jv_retain(a->v[0]) : jv_err(); }

// Jinja's indent, as llama.cpp writes it: lines after the first indented (the first with first),
// blank lines only with blank; a line that is empty while nothing is written yet counts as the
// first line again.
static jv str_indent(jrender *r, const jargs *a) {
    if (!need(r, a, 1, 4)) return jv_err();
    jv width = kw(a, "width", 1);
    int first = truthy(r, a, kw(a, "first", 2)), blank = truthy(r, a, kw(a, "blank", 3));
    if (first < 0 || blank < 0) return jv_err();
    if (a->v[0].t != JV_STR) return raise(r, a, "indent() first argument must be a string");
    jv ind = (jv){.t = JV_STR, .o = &g_four_spaces.h};
    if (width.t == JV_INT) {
        if (width.i < 0 || (uint64_t)width.i > r->lim.max_string)
            return jr_fail(r, a->pos, "indent width %lld is out of range", (long long)width.i);
        jsb w = {0};
        for (int64_t i = 0; i < width.i && !r->failed; i++) jsb_put(r, &w, " ", 1, false);
        ind = jsb_done(r, &w);
        if (ind.t == JV_ERR) return ind;
    } else if (width.t == JV_STR) {
        ind = jv_retain(width);
    }
    const jstr *s = S0(a), *is = JSTR(ind);
    jsb b = {0};
    for (size_t at = 0; at < s->len && !r->failed;) {
        const char *nl = memchr(s->s + at, '\n', s->len - at);
        size_t end = nl ? (size_t)(nl - s->s) : s->len;
        if (b.len) jsb_put(r, &b, "\n", 1, jstr_is_user(s, at ? at - 1 : 0));
        if (b.len == 0 ? first : (end > at || blank)) jsb_put_str(r, &b, is, 0, is->len);
        jsb_put_str(r, &b, s, at, end);
        at = end + 1;
    }
    if (s->len && s->s[s->len - 1] == '\n') {
        jsb_put(r, &b, "\n", 1, jstr_is_user(s, s->len - 1));
        if (blank) jsb_put_str(r, &b, is, 0, is->len);
    }
    jv_release(r, ind);
    return jsb_done(r, &b);
}

// ---------------------------------------------------------------------------------------------
// Lists

static jlist *L0(const jargs *a) { return JLIST(a->v[0]); }

static jv list_copy(jrender *r, const jargs *a, jv_type t, bool reverse) {
    jlist *l = L0(a);
    jv out = jv_list_new(r, l->n, t == JV_TUPLE);
    if (out.t == JV_ERR || !jr_step(r, l->n >> 4)) return jv_err();
    for (size_t i = 0; i < l->n; i++) JLIST(out)->v[i] = jv_retain(l->v[reverse ? l->n - 1 - i : i]);
    JLIST(out)->n = l->n;
    return out;
}

static jv list_list(jrender *r, const jargs *a) { return first_is(r, a, JV_LIST) ? list_copy(r, a, JV_LIST, false) : jv_err(); }
static jv list_reverse(jrender *r, const jargs *a) {
    return first_is(r, a, JV_LIST) ? list_copy(r, a, a->v[0].t, true) : jv_err();
}
static jv list_first(jrender *r, const jargs *a) {
    if (!first_is(r, a, JV_LIST)) return jv_err();
    return L0(a)->n ? jv_retain(L0(a)->v[0]) : jv_undef(NULL);
}
static jv list_last(jrender *r, const jargs *a) {
    if (!first_is(r, a, JV_LIST)) return jv_err();
    return L0(a)->n ? jv_retain(L0(a)->v[L0(a)->n - 1]) : jv_undef(NULL);
}
static jv list_length(jrender *r, const jargs *a) {
    return first_is(r, a, JV_LIST) ? jv_int((int64_t)L0(a)->n) : jv_err();
}
static jv list_string(jrender *r, const jargs *a) { return first_is(r, a, JV_LIST) ? b_repr(r, a) : jv_err(); }

// The value of an item's attribute (a dict key, or an index where attr is an integer): borrowed.
static jv item_attr(jv item, jv attr, jv def) {
    if (attr.t == JV_INT) {
        if (!jv_is_seq(item)) return def;
        jlist *l = JLIST(item);
        int64_t i = attr.i < 0 ? attr.i + (int64_t)l->n : attr.i;
        return i >= 0 && (uint64_t)i < l->n ? l->v[i] : def;
    }
    if (item.t != JV_DICT) return def;
    jv *v = jv_dict_get(JDICT(item), attr);
    return v ? *v : def;
}

// selectattr / select / rejectattr / reject: (attr), (test, value) or (attr, test, value).
static jv list_select_impl(jrender *r, const jargs *a, bool reject) {
    if (!need(r, a, 2, 4) || !arg_is(r, a, 0, JV_LIST) || !arg_is(r, a, 1, JV_STR)) return jv_err();
    jlist *l = L0(a);
    const jbuiltin *test = NULL;
    jv extra = jv_undef(NULL);
    if (a->n >= 3) {
        jv name = jv_to_str(r, a->v[a->n == 3 ? 1 : 2], a->pos);
        if (name.t == JV_ERR) return name;
        test = jinja_test(JSTR(name)->s, JSTR(name)->len);
        if (!test) jr_fail(r, a->pos, "%s: unknown test '%.40s'", a->name, JSTR(name)->s);
        jv_release(r, name);
        if (!test) return jv_err();
        extra = a->v[a->n - 1];
    }
    jv out = jv_list_new(r, 0, false);
    if (out.t == JV_ERR || !jr_step(r, l->n >> 4)) return jv_err();
    for (size_t i = 0; i < l->n; i++) {
        jv item = l->v[i], subject = item;
        if (a->n != 3) {
            if (item.t != JV_DICT) {
                jv_release(r, out);
                return jr_fail(r, a->pos, "%s: item is not an object", a->name);
            }
            subject = item_attr(item, a->v[1], jv_undef(NULL));
        }
        int t;
        if (test) {
            jv targs[2] = {subject, extra};
            jv res = test->fn(r, &(jargs){targs, 2, test->name, a->pos});
            t = res.t == JV_ERR ? -1 : truthy(r, a, res);
            jv_release(r, res);
        } else {
            t = truthy(r, a, subject);
        }
        if (t < 0 || ((t != reject) && !jv_list_push(r, out, jv_retain(item)))) {
            jv_release(r, out);
            return jv_err();
        }
    }
    return out;
}
static jv list_select(jrender *r, const jargs *a) { return list_select_impl(r, a, false); }
static jv list_reject(jrender *r, const jargs *a) { return list_select_impl(r, a, true); }

static jv list_join(jrender *r, const jargs *a) {
    if (!need(r, a, 1, 3)) return jv_err();
    if (!jv_is_seq(a->v[0])) return raise(r, a, "join() first argument must be an array");
    jv d = kw(a, "d", 1), attr = kw(a, "attribute", 2);
    if (attr.t != JV_UNDEF && attr.t != JV_STR && attr.t != JV_INT)
        return raise(r, a, "join() attribute must be string or integer");
    jv delim = d.t == JV_UNDEF ? (jv){.t = JV_STR, .o = &g_empty.h} : jv_to_str(r, d, a->pos);
    if (delim.t == JV_ERR) return delim;
    jlist *l = L0(a);
    jsb b = {0};
    for (size_t i = 0; i < l->n && !r->failed; i++) {
        jv v = l->v[i];
        if (attr.t == JV_INT && jv_is_seq(v)) {
            jlist *x = JLIST(v);
            int64_t k = attr.i < 0 ? attr.i + (int64_t)x->n : attr.i;
            if (k < 0 || (uint64_t)k >= x->n) {
                jr_fail(r, a->pos, "join(): index %lld out of bounds for an array of size %zu", (long long)attr.i, x->n);
                break;
            }
            v = x->v[k];
        } else if (attr.t == JV_STR && v.t == JV_DICT) {
            jv *x = jv_dict_get(JDICT(v), attr);
            if (!x) {
                jr_fail(r, a->pos, "join(): key '%.40s' not found", JSTR(attr)->s);
                break;
            }
            v = *x;
        }
        if (v.t != JV_STR && v.t != JV_INT && v.t != JV_FLOAT) {
            raise(r, a, "join() can only join arrays of strings or numerics");
            break;
        }
        jv_write_str(r, &b, v, a->pos);
        if (i + 1 < l->n) jsb_put_str(r, &b, JSTR(delim), 0, JSTR(delim)->len);
    }
    jv_release(r, delim);
    if (r->failed) {
        jsb_free(r, &b);
        return jv_err();
    }
    return jsb_done(r, &b);
}

static jv list_map(jrender *r, const jargs *a) {
    if (!need(r, a, 2, 999)) return jv_err();
    if (!jv_is_seq(a->v[0])) return raise(r, a, "map: first argument must be an array");
    if (a->v[1].t != JV_KWARG) return raise(r, a, "map: mapping with a filter is not implemented");
    jv attr = kw(a, "attribute", 1), def = jv_undef(NULL);
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].t == JV_KWARG && !strcmp(JKWARG(a->v[i])->name, "default")) def = JKWARG(a->v[i])->v;
    if (attr.t != JV_STR && attr.t != JV_INT) return raise(r, a, "map: attribute must be string or integer");
    jlist *l = L0(a);
    jv out = jv_list_new(r, l->n, a->v[0].t == JV_TUPLE);
    if (out.t == JV_ERR || !jr_step(r, l->n >> 4)) return jv_err();
    for (size_t i = 0; i < l->n; i++) JLIST(out)->v[JLIST(out)->n++] = jv_retain(item_attr(l->v[i], attr, def));
    return out;
}

static jv list_append(jrender *r, const jargs *a) {
    if (!need(r, a, 2, 999)) return jv_err();
    if (!jv_is_seq(a->v[0])) return raise(r, a, "append: first argument must be an array");
    if (a->v[0].t == JV_TUPLE) return raise(r, a, "attempting to modify an immutable tuple");
    if (!jv_list_push(r, a->v[0], jv_retain(a->v[1]))) return jv_err();
    return jv_retain(a->v[0]);
}

static jv list_pop(jrender *r, const jargs *a) {
    if (!need(r, a, 1, 2) || !arg_is(r, a, 0, JV_LIST)) return jv_err();
    int64_t i = -1;
    if (a->n == 2 && !as_int(r, a, a->v[1], &i)) return jv_err();
    if (a->v[0].t == JV_TUPLE) return raise(r, a, "attempting to modify an immutable tuple");
    jlist *l = L0(a);
    if (i < 0) i += (int64_t)l->n;
    if (i < 0 || (uint64_t)i >= l->n)
        return jr_fail(r, a->pos, "index %lld out of bounds for an array of size %zu", (long long)i, l->n);
    jv v = l->v[i];
    memmove(l->v + i, l->v + i + 1, (l->n - (size_t)i - 1) * sizeof(jv));
    l->n--;
    return v;
}

// The key an item sorts by (sort's attribute): borrowed, or JV_ERR.
static jv sort_attr(jrender *r, const jargs *a, jv item, jv attr, bool all_seq, bool all_dict) {
    if (attr.t == JV_UNDEF) return item;
    if (attr.t == JV_INT && all_seq) {
        jlist *l = JLIST(item);
        int64_t i = attr.i < 0 ? attr.i + (int64_t)l->n : attr.i;
        if (i >= 0 && (uint64_t)i < l->n) return l->v[i];
        return jr_fail(r, a->pos, "sort: index %lld out of bounds", (long long)attr.i);
    }
    if (attr.t != JV_INT && all_dict) {
        jv *v = (jv_immutable(attr) && jv_hashable(attr)) ? jv_dict_get(JDICT(item), attr) : NULL;
        if (v) return *v;
        return jr_fail(r, a->pos, "sort: key not found");
    }
    return jr_fail(r, a->pos, "sort: unsupported attribute comparison");
}

static jv list_sort(jrender *r, const jargs *a) {
    if (!need(r, a, 1, 4)) return jv_err();
    if (!jv_is_seq(a->v[0])) return raise(r, a, "sort: first argument must be an array");
    int reverse = truthy(r, a, kw(a, "reverse", 1));
    if (reverse < 0) return jv_err();
    jv attr = kw(a, "attribute", 3);
    jlist *l = L0(a);
    bool all_seq = true, all_dict = true;
    for (size_t i = 0; i < l->n; i++) all_seq &= jv_is_seq(l->v[i]), all_dict &= l->v[i].t == JV_DICT;
    sort_key *k = ft_malloc((l->n + 1) * 2 * sizeof(sort_key));
    jv out = jv_err();
    for (size_t i = 0; i < l->n; i++) {
        k[i].item = l->v[i];
        k[i].key = l->n > 1 ? sort_attr(r, a, l->v[i], attr, all_seq, all_dict) : l->v[i];
        if (k[i].key.t == JV_ERR) goto out;
    }
    if (merge_sort(r, k, l->n, k + l->n + 1, reverse ? CMP_GT : CMP_LT, a->pos)) {
        out = jv_list_new(r, l->n, a->v[0].t == JV_TUPLE);
        if (out.t != JV_ERR) {
            for (size_t i = 0; i < l->n; i++) JLIST(out)->v[i] = jv_retain(k[i].item);
            JLIST(out)->n = l->n;
        }
    }
out:
    free(k);
    return out;
}

static jv list_minmax(jrender *r, const jargs *a, enum cmp op) {
    if (!need(r, a, 1, 4) || !arg_is(r, a, 0, JV_LIST)) return jv_err();
    if (kw(a, "attribute", 2).t != JV_UNDEF) return jr_fail(r, a->pos, "%s with an attribute is not implemented", a->name);
    jlist *l = L0(a);
    if (!l->n) return jv_undef(NULL);
    jv best = l->v[0];
    for (size_t i = 1; i < l->n; i++) {
        int c = compare(r, l->v[i], best, op, a->pos);
        if (c < 0) return jv_err();
        if (c) best = l->v[i];
    }
    return jv_retain(best);
}
static jv list_min(jrender *r, const jargs *a) { return list_minmax(r, a, CMP_LT); }
static jv list_max(jrender *r, const jargs *a) { return list_minmax(r, a, CMP_GT); }

// Jinja's unique: first occurrences; strings compared without case unless case_sensitive.
static jv list_unique(jrender *r, const jargs *a) {
    if (!need(r, a, 1, 3) || !arg_is(r, a, 0, JV_LIST)) return jv_err();
    int cs = truthy(r, a, kw(a, "case_sensitive", 1));
    if (cs < 0) return jv_err();
    jv attr = kw(a, "attribute", 2);
    jlist *l = L0(a);
    jv out = jv_list_new(r, 0, false), keys = jv_list_new(r, 0, false);
    if (out.t == JV_ERR || keys.t == JV_ERR || !jr_step(r, (l->n * l->n) >> 4)) goto fail;
    for (size_t i = 0; i < l->n; i++) {
        jv key = attr.t == JV_UNDEF ? jv_retain(l->v[i]) : jv_retain(item_attr(l->v[i], attr, jv_undef(NULL)));
        if (key.t == JV_STR && !cs) {
            jv lower = str_lower(r, &(jargs){&key, 1, "lower", a->pos});
            jv_release(r, key);
            key = lower;
            if (key.t == JV_ERR) goto fail;
        }
        jv seen = jinja_in(r, key, keys, a->pos);
        if (seen.t == JV_ERR) {
            jv_release(r, key);
            goto fail;
        }
        if (seen.b) {
            jv_release(r, key);
            continue;
        }
        if (!jv_list_push(r, keys, key) || !jv_list_push(r, out, jv_retain(l->v[i]))) goto fail;
    }
    jv_release(r, keys);
    return out;
fail:
    jv_release(r, out), jv_release(r, keys);
    return jv_err();
}

// ---------------------------------------------------------------------------------------------
// Dicts

static jdict *D0(const jargs *a) { return JDICT(a->v[0]); }

static jv dict_get(jrender *r, const jargs *a) {
    if (!need(r, a, 2, 3)) return jv_err();
    if (a->v[0].t != JV_DICT) return raise(r, a, "get: first argument must be an object");
    if (a->v[1].t != JV_STR) return raise(r, a, "get: second argument must be a string (key)");
    jv *v = jv_dict_get(D0(a), a->v[1]);
    return jv_retain(v ? *v : a->n == 3 ? a->v[2] : jv_none());
}

static jv dict_parts(jrender *r, const jargs *a, int which) {
    if (!first_is(r, a, JV_DICT)) return jv_err();
    jdict *d = D0(a);
    jv out = jv_list_new(r, d->n, false);
    if (out.t == JV_ERR || !jr_step(r, d->n >> 4)) return jv_err();
    for (size_t i = 0; i < d->n; i++) {
        jv v;
        if (which == 2) {
            v = jv_list_new(r, 2, true);
            if (v.t == JV_ERR) {
                jv_release(r, out);
                return v;
            }
            JLIST(v)->v[0] = jv_retain(d->k[i]);
            JLIST(v)->v[1] = jv_retain(d->v[i]);
            JLIST(v)->n = 2;
        } else {
            v = jv_retain(which ? d->v[i] : d->k[i]);
        }
        JLIST(out)->v[JLIST(out)->n++] = v;
    }
    return out;
}
static jv dict_keys(jrender *r, const jargs *a) { return dict_parts(r, a, 0); }
static jv dict_values(jrender *r, const jargs *a) { return dict_parts(r, a, 1); }
static jv dict_items(jrender *r, const jargs *a) { return dict_parts(r, a, 2); }
static jv dict_length(jrender *r, const jargs *a) {
    return first_is(r, a, JV_DICT) ? jv_int((int64_t)D0(a)->n) : jv_err();
}
static jv dict_string(jrender *r, const jargs *a) { return first_is(r, a, JV_DICT) ? b_repr(r, a) : jv_err(); }

static jv dict_dictsort(jrender *r, const jargs *a) {
    if (a->v[0].t != JV_DICT) return jr_fail(r, a->pos, "dictsort: not an object");
    jv by = kw(a, "by", 2);
    int reverse = truthy(r, a, kw(a, "reverse", 3));
    if (reverse < 0) return jv_err();
    bool by_value = by.t == JV_STR && JSTR(by)->len == 5 && !memcmp(JSTR(by)->s, "value", 5);
    jdict *d = D0(a);
    sort_key *k = ft_malloc((2 * d->n + 1) * sizeof(sort_key));
    jv out = jv_err();
    for (size_t i = 0; i < d->n; i++) k[i].key = by_value ? d->v[i] : d->k[i], k[i].item = jv_int((int64_t)i);
    if (merge_sort(r, k, d->n, k + d->n, reverse ? CMP_GT : CMP_LT, a->pos)) {
        out = jv_dict_new(r, JDICT_PLAIN);
        for (size_t i = 0; out.t != JV_ERR && i < d->n; i++) {
            size_t at = (size_t)k[i].item.i;
            if (!jv_dict_set(r, out, d->k[at], jv_retain(d->v[at]))) {
                jv_release(r, out);
                out = jv_err();
            }
        }
    }
    free(k);
    return out;
}

// loop.cycle(a, b, ...): the argument at the loop's index modulo their count.
static jv loop_cycle(jrender *r, const jargs *a) {
    if (a->n < 2) return jr_fail(r, a->pos, "loop.cycle() needs at least one value");
    jv *i = jv_dict_get_cstr(D0(a), "index0", 6);
    int64_t k = i && i->t == JV_INT ? i->i : 0;
    return jv_retain(a->v[1 + (size_t)(k % (int64_t)(a->n - 1))]);
}

// ---------------------------------------------------------------------------------------------
// Tables of methods

#define B(name, fn) {name, fn}
static const jbuiltin g_int[] = {B("default", b_default), B("abs", int_abs), B("int", int_int),
                                 B("float", int_float), B("safe", b_tojson), B("string", b_tojson),
                                 B("tojson", b_tojson)};
static const jbuiltin g_float[] = {B("default", b_default), B("abs", float_abs), B("int", float_int),
                                   B("float", float_float), B("safe", b_tojson), B("string", b_tojson),
                                   B("tojson", b_tojson)};
static const jbuiltin g_bool[] = {B("default", b_default), B("int", bool_int), B("float", bool_float),
                                  B("safe", bool_str), B("string", bool_str), B("tojson", b_tojson)};
static const jbuiltin g_str[] = {
    B("default", b_default), B("upper", str_upper),   B("lower", str_lower),       B("strip", str_strip),
    B("rstrip", str_rstrip), B("lstrip", str_lstrip), B("title", str_title),       B("capitalize", str_capitalize),
    B("length", str_length), B("startswith", str_startswith), B("endswith", str_endswith),
    B("split", str_split),   B("rsplit", str_rsplit), B("replace", str_replace),   B("format", str_format),
    B("int", str_int),       B("float", str_float),   B("string", str_self),       B("slice", b_slice),
    B("safe", str_self),     B("tojson", b_tojson),   B("indent", str_indent),     B("join", not_implemented),
};
static const jbuiltin g_list[] = {
    B("default", b_default),   B("list", list_list),     B("first", list_first),   B("last", list_last),
    B("length", list_length),  B("slice", b_slice),      B("selectattr", list_select), B("select", list_select),
    B("rejectattr", list_reject), B("reject", list_reject), B("join", list_join),  B("string", list_string),
    B("tojson", b_tojson),     B("map", list_map),       B("append", list_append), B("pop", list_pop),
    B("sort", list_sort),      B("reverse", list_reverse), B("min", list_min),     B("max", list_max),
    B("unique", list_unique),
};
static const jbuiltin g_dict[] = {
    B("get", dict_get),       B("keys", dict_keys),     B("values", dict_values), B("items", dict_items),
    B("tojson", b_tojson),    B("string", dict_string), B("length", dict_length), B("dictsort", dict_dictsort),
    B("join", not_implemented),
};
static const jbuiltin g_loop[] = {B("cycle", loop_cycle)};
static const jbuiltin g_none[] = {
    B("default", b_default),  B("tojson", b_tojson),    B("string", none_str),    B("safe", none_str),
    B("items", empty_list),   B("map", empty_list),     B("reject", empty_list),  B("rejectattr", empty_list),
    B("select", empty_list),  B("selectattr", empty_list), B("unique", empty_list),
};
static const jbuiltin g_undef[] = {
    B("default", b_default), B("capitalize", empty_str), B("first", empty_undef), B("items", empty_list),
    B("join", empty_str),    B("last", empty_undef),     B("length", empty_int),  B("list", empty_list),
    B("lower", empty_str),   B("map", empty_list),       B("max", empty_undef),   B("min", empty_undef),
    B("reject", empty_list), B("rejectattr", empty_list), B("replace", empty_str), B("reverse", empty_list),
    B("safe", empty_str),    B("select", empty_list),    B("selectattr", empty_list), B("sort", empty_list),
    B("string", empty_str),  B("strip", empty_str),      B("sum", empty_int),     B("title", empty_str),
    B("truncate", empty_str), B("unique", empty_list),   B("upper", empty_str),   B("wordcount", empty_int),
};

static const jbuiltin *find(const jbuiltin *t, size_t n, const char *name, size_t len) {
    for (size_t i = 0; i < n; i++)
        if (strlen(t[i].name) == len && !memcmp(t[i].name, name, len)) return &t[i];
    return NULL;
}
#define FIND(t) find(t, FT_ARRAY_LEN(t), name, len)

bool jinja_has_methods(jv v) { return v.t != JV_FUNC && v.t != JV_KWARG && v.t != JV_ERR; }

const jbuiltin *jinja_method(jv v, const char *name, size_t len) {
    switch (v.t) {
    case JV_INT: return FIND(g_int);
    case JV_FLOAT: return FIND(g_float);
    case JV_BOOL: return FIND(g_bool);
    case JV_STR: return FIND(g_str);
    case JV_LIST:
    case JV_TUPLE: return FIND(g_list);
    case JV_DICT: return JDICT(v)->flavour == JDICT_LOOP ? FIND(g_loop) : FIND(g_dict);
    case JV_NONE: return FIND(g_none);
    case JV_UNDEF: return FIND(g_undef);
    default: return NULL;
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

static jv t_type(jrender *r, const jargs *a, int mask) {
    if (!need(r, a, 1, 999)) return jv_err();
    return jv_bool((mask >> a->v[0].t) & 1);
}
#define TYPE_TEST(fn, mask) \
    static jv fn(jrender *r, const jargs *a) { return t_type(r, a, (mask)); }
TYPE_TEST(t_boolean, 1 << JV_BOOL)
TYPE_TEST(t_callable, 1 << JV_FUNC)
TYPE_TEST(t_string, 1 << JV_STR)
TYPE_TEST(t_integer, 1 << JV_INT)
TYPE_TEST(t_float, 1 << JV_FLOAT)
TYPE_TEST(t_number, (1 << JV_INT) | (1 << JV_FLOAT))
TYPE_TEST(t_iterable, (1 << JV_LIST) | (1 << JV_TUPLE) | (1 << JV_STR) | (1 << JV_UNDEF))
TYPE_TEST(t_mapping, 1 << JV_DICT)
TYPE_TEST(t_none, 1 << JV_NONE)
TYPE_TEST(t_undefined, 1 << JV_UNDEF)

static jv t_defined(jrender *r, const jargs *a) {
    return need(r, a, 1, 999) ? jv_bool(a->v[0].t != JV_UNDEF) : jv_err();
}
static jv t_odd(jrender *r, const jargs *a) { return first_is(r, a, JV_INT) ? jv_bool(a->v[0].i % 2 != 0) : jv_err(); }
static jv t_even(jrender *r, const jargs *a) { return first_is(r, a, JV_INT) ? jv_bool(a->v[0].i % 2 == 0) : jv_err(); }
static jv t_true(jrender *r, const jargs *a) {
    return need(r, a, 1, 999) ? jv_bool(a->v[0].t == JV_BOOL && a->v[0].b) : jv_err();
}
static jv t_false(jrender *r, const jargs *a) {
    return need(r, a, 1, 999) ? jv_bool(a->v[0].t == JV_BOOL && !a->v[0].b) : jv_err();
}
static jv t_divisibleby(jrender *r, const jargs *a) {
    if (!need(r, a, 2, 999) || !arg_is(r, a, 0, JV_INT) || !arg_is(r, a, 1, JV_INT)) return jv_err();
    if (a->v[1].i == 0) return jr_fail(r, a->pos, "divisibleby(0)");
    if (a->v[1].i == -1) return jv_bool(true);
    return jv_bool(a->v[0].i % a->v[1].i == 0);
}
static jv t_case(jrender *r, const jargs *a, bool lower) {
    if (!first_is(r, a, JV_STR)) return jv_err();
    for (size_t i = 0; i < S0(a)->len; i++) {
        unsigned char c = (unsigned char)S0(a)->s[i];
        if (lower ? isupper(c) : islower(c)) return jv_bool(false);
    }
    return jv_bool(true);
}
static jv t_lower(jrender *r, const jargs *a) { return t_case(r, a, true); }
static jv t_upper(jrender *r, const jargs *a) { return t_case(r, a, false); }

static jv t_compare(jrender *r, const jargs *a, enum cmp op) {
    if (!need(r, a, 2, 2)) return jv_err();
    int c = compare(r, a->v[0], a->v[1], op, a->pos);
    return c < 0 ? jv_err() : jv_bool(c);
}
static jv t_eq(jrender *r, const jargs *a) { return t_compare(r, a, CMP_EQ); }
static jv t_ne(jrender *r, const jargs *a) { return t_compare(r, a, CMP_NE); }
static jv t_ge(jrender *r, const jargs *a) { return t_compare(r, a, CMP_GE); }
static jv t_gt(jrender *r, const jargs *a) { return t_compare(r, a, CMP_GT); }
static jv t_lt(jrender *r, const jargs *a) { return t_compare(r, a, CMP_LT); }
static jv t_in(jrender *r, const jargs *a) {
    return need(r, a, 2, 999) ? jinja_in(r, a->v[0], a->v[1], a->pos) : jv_err();
}
static jv t_test(jrender *r, const jargs *a) {
    if (!first_is(r, a, JV_STR)) return jv_err();
    return jv_bool(jinja_test(S0(a)->s, S0(a)->len) != NULL);
}

static const jbuiltin g_tests[] = {
    B("boolean", t_boolean), B("callable", t_callable), B("odd", t_odd),       B("even", t_even),
    B("false", t_false),     B("true", t_true),         B("divisibleby", t_divisibleby),
    B("string", t_string),   B("integer", t_integer),   B("float", t_float),   B("number", t_number),
    B("iterable", t_iterable), B("sequence", t_iterable), B("mapping", t_mapping), B("lower", t_lower),
    B("upper", t_upper),     B("none", t_none),         B("defined", t_defined), B("undefined", t_undefined),
    B("eq", t_eq),           B("equalto", t_eq),        B("ge", t_ge),         B("gt", t_gt),
    B("greaterthan", t_gt),  B("lt", t_lt),             B("lessthan", t_lt),   B("ne", t_ne),
    B("in", t_in),           B("test", t_test),         B("sameas", not_implemented),
    B("escaped", not_implemented), B("filter", not_implemented),
};

const jbuiltin *jinja_test(const char *name, size_t len) { return FIND(g_tests); }

// ---------------------------------------------------------------------------------------------
// Global functions

static jv g_raise(jrender *r, const jargs *a) {
    if (!first_is(r, a, JV_STR)) return jv_err();
    return jr_fail(r, a->pos, "the template raised an error: %.300s", S0(a)->s);
}

static jv g_namespace(jrender *r, const jargs *a) {
    jv d = jv_dict_new(r, JDICT_PLAIN);
    for (size_t i = 0; d.t != JV_ERR && i < a->n; i++) {
        if (a->v[i].t != JV_KWARG) {
            jv_release(r, d);
            return raise(r, a, "namespace() arguments must be keyword arguments");
        }
        const jkwarg *k = JKWARG(a->v[i]);
        if (jv_dict_set_cstr(r, d, k->name, jv_retain(k->v)).t == JV_ERR) {
            jv_release(r, d);
            return jv_err();
        }
    }
    return d;
}

static jv g_strftime_now(jrender *r, const jargs *a) {
    if (!first_is(r, a, JV_STR)) return jv_err();
    struct tm tm;
    char buf[100];
    if (!localtime_r(&r->now, &tm)) return raise(r, a, "strftime_now: failed to format time");
    size_t n = strftime(buf, sizeof(buf), S0(a)->s, &tm);
    if (!n) return raise(r, a, "strftime_now: failed to format time");
    return jv_str(r, buf, n, false);
}

static jv g_range(jrender *r, const jargs *a) {
    if (!need(r, a, 1, 3) || !arg_is(r, a, 0, JV_INT)) return jv_err();
    int64_t start = 0, stop = a->v[0].i, step = 1;
    if (a->n >= 2) {
        start = a->v[0].i;
        if (!as_int(r, a, a->v[1], &stop)) return jv_err();
    }
    if (a->n == 3 && !as_int(r, a, a->v[2], &step)) return jv_err();
    if (step == 0) return raise(r, a, "range() step argument must not be zero");
    // the count, in unsigned arithmetic (no overflow for any int64 bounds)
    uint64_t count = 0;
    if (step > 0 && start < stop) count = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
    if (step < 0 && start > stop) count = ((uint64_t)start - (uint64_t)stop - 1) / (0 - (uint64_t)step) + 1;
    if (count > r->lim.max_items) return jr_fail(r, a->pos, "a list grew past %zu items (max_items)", r->lim.max_items);
    jv out = jv_list_new(r, (size_t)count, false);
    if (out.t == JV_ERR || !jr_step(r, count >> 4)) return jv_err();
    for (uint64_t i = 0; i < count; i++) JLIST(out)->v[i] = jv_int((int64_t)((uint64_t)start + i * (uint64_t)step));
    JLIST(out)->n = (size_t)count;
    return out;
}

static const jbuiltin g_globals[] = {
    B("raise_exception", g_raise), B("namespace", g_namespace), B("strftime_now", g_strftime_now),
    B("range", g_range),           B("tojson", b_tojson),
};

const jbuiltin *jinja_global(const char *name, size_t len) {
    const jbuiltin *b = FIND(g_globals);
    if (b) return b;
    if (len > 8 && !memcmp(name, "test_is_", 8)) return jinja_test(name + 8, len - 8);
    return NULL;
}

// ---------------------------------------------------------------------------------------------

jv jinja_call(jrender *r, jv fn, jv *args, size_t n, jscope *s, long pos) {
    const jfunc *f = JFUNC(fn);
    if (f->macro) return jinja_call_macro(r, f, args, n, s, pos);
    if (!f->bound) return f->b->fn(r, &(jargs){args, n, f->b->name, pos});
    jv stack[9], *all = n < 9 ? stack : ft_malloc((n + 1) * sizeof(jv));
    all[0] = f->self;
    memcpy(all + 1, args, n * sizeof(jv));
    jv res = f->b->fn(r, &(jargs){all, n + 1, f->b->name, pos});
    if (all != stack) free(all);
    return res;
}
