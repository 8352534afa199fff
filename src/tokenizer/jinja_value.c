// jinja_value.c: the values a render works with: reference-counted strings (with their
// user-text ranges), lists, dicts, functions; equality, truthiness and the text forms (str,
// repr, output, JSON) as llama.cpp's Jinja engine defines them; JSON input.
#include "jinja_impl.h"
#include "tok_impl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Failure and work accounting

jv jr_fail(jrender *r, long pos, const char *fmt, ...) {
    if (r->failed) return jv_err();
    r->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (pos >= 0) {
        int line, col;
        jinja_line_col(r->t->src, r->t->len, (size_t)pos, &line, &col);
        ft_err_set(r->err, "line %d, column %d: %s", line, col, msg);
    } else {
        ft_err_set(r->err, "%s", msg);
    }
    return jv_err();
}

bool jr_step(jrender *r, uint64_t n) {
    if (r->failed) return false;
    r->steps += n;
    if (r->steps > r->lim.max_steps) {
        jr_fail(r, -1, "the template ran more than %llu steps (max_steps): a loop too long, or too much work",
                (unsigned long long)r->lim.max_steps);
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Objects

static bool account(jrender *r, size_t bytes) {
    if (r->mem + bytes > r->lim.max_memory || r->mem + bytes < r->mem) {
        jr_fail(r, -1, "the template's values need more than %zu MiB (max_memory)", r->lim.max_memory >> 20);
        return false;
    }
    r->mem += bytes;
    return true;
}

static jobj *obj_new(jrender *r, uint8_t kind, size_t bytes) {
    if (r->failed || !account(r, bytes)) return NULL;
    jobj *o = ft_calloc(1, bytes);
    o->kind = kind;
    o->rc = 1;
    o->bytes = bytes;
    o->next = r->live.next;
    o->prev = &r->live;
    r->live.next->prev = o;
    r->live.next = o;
    return o;
}

static void obj_unlink_free(jrender *r, jobj *o) {
    o->prev->next = o->next;
    o->next->prev = o->prev;
    r->mem -= o->bytes;
    if (o->kind == JOBJ_LIST) free(((jlist *)o)->v);
    if (o->kind == JOBJ_DICT) free(((jdict *)o)->k), free(((jdict *)o)->v);
    free(o);
}

// Releasing never recurses (a list nested a million deep is freed in a loop): objects whose
// count drops to zero go on a stack, and their children are released from there.
typedef struct freelist {
    jobj **v;
    size_t n, cap;
} freelist;

static void drop(freelist *fl, jv v) {
    if (!jv_has_obj(v) || v.o->is_static) return;
    FT_ASSERT(v.o->rc > 0);
    if (--v.o->rc) return;
    if (fl->n == fl->cap) {
        fl->cap = fl->cap ? 2 * fl->cap : 16;
        fl->v = ft_realloc(fl->v, fl->cap * sizeof(jobj *));
    }
    fl->v[fl->n++] = v.o;
}

void jv_release(jrender *r, jv v) {
    if (!jv_has_obj(v) || v.o->is_static) return;
    if (v.o->rc > 1) {
        v.o->rc--;
        return;
    }
    freelist fl = {0};
    drop(&fl, v);
    while (fl.n) {
        jobj *o = fl.v[--fl.n];
        switch (o->kind) {
        case JOBJ_LIST: {
            jlist *l = (jlist *)o;
            for (size_t i = 0; i < l->n; i++) drop(&fl, l->v[i]);
            break;
        }
        case JOBJ_DICT: {
            jdict *d = (jdict *)o;
            for (size_t i = 0; i < d->n; i++) drop(&fl, d->k[i]), drop(&fl, d->v[i]);
            break;
        }
        case JOBJ_FUNC: drop(&fl, ((jfunc *)o)->self); break;
        case JOBJ_KWARG: drop(&fl, ((jkwarg *)o)->v); break;
        default: break;
        }
        obj_unlink_free(r, o);
    }
    free(fl.v);
}

// ---------------------------------------------------------------------------------------------
// Strings

static jv str_alloc(jrender *r, size_t len, size_t n_spans, jstr **out) {
    if (len > r->lim.max_string) {
        return jr_fail(r, -1, "a string grew past %zu bytes (max_string)", r->lim.max_string);
    }
    jstr *s = (jstr *)obj_new(r, JOBJ_STR, sizeof(jstr) + n_spans * 2 * sizeof(size_t) + len + 1);
    if (!s) return jv_err();
    s->len = len;
    s->n_spans = n_spans;
    s->spans = (size_t *)(s + 1);
    s->s = (char *)(s->spans + 2 * n_spans);
    s->s[len] = 0;
    *out = s;
    return (jv){.t = JV_STR, .o = &s->h};
}

jv jv_str(jrender *r, const char *s, size_t len, bool user) {
    jstr *j;
    jv v = str_alloc(r, len, user && len ? 1 : 0, &j);
    if (v.t == JV_ERR) return v;
    memcpy(j->s, s, len);
    if (j->n_spans) j->spans[0] = 0, j->spans[1] = len;
    return v;
}

bool jstr_is_user(const jstr *s, size_t i) {
    for (size_t k = 0; k < s->n_spans; k++)
        if (i >= s->spans[2 * k] && i < s->spans[2 * k + 1]) return true;
    return false;
}

static bool sb_reserve(jrender *r, jsb *b, size_t extra) {
    if (b->overflow || r->failed) return false;
    size_t limit = b->is_output ? r->lim.max_output : r->lim.max_string;
    if (b->len + extra > limit || b->len + extra < b->len) {
        b->overflow = true;
        if (b->is_output)
            jr_fail(r, -1, "the rendered text grew past %zu bytes (max_output)", r->lim.max_output);
        else
            jr_fail(r, -1, "a string grew past %zu bytes (max_string)", r->lim.max_string);
        return false;
    }
    if (b->len + extra + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + extra + 1) cap *= 2;
        if (!account(r, cap - b->cap)) {
            b->overflow = true;
            return false;
        }
        b->s = ft_realloc(b->s, cap);
        b->cap = cap;
    }
    return true;
}

static void sb_span(jsb *b, size_t from, size_t to) {
    if (from == to) return;
    if (b->n_spans && b->spans[2 * b->n_spans - 1] == from) {
        b->spans[2 * b->n_spans - 1] = to;
        return;
    }
    if (b->n_spans == b->cap_spans) {
        b->cap_spans = b->cap_spans ? 2 * b->cap_spans : 4;
        b->spans = ft_realloc(b->spans, b->cap_spans * 2 * sizeof(size_t));
    }
    b->spans[2 * b->n_spans] = from;
    b->spans[2 * b->n_spans + 1] = to;
    b->n_spans++;
}

void jsb_put(jrender *r, jsb *b, const char *s, size_t len, bool user) {
    if (!len || !sb_reserve(r, b, len)) return;
    if (len >= 256) jr_step(r, len >> 8);
    memcpy(b->s + b->len, s, len);
    if (user) sb_span(b, b->len, b->len + len);
    b->len += len;
    b->s[b->len] = 0;
}

void jsb_put_str(jrender *r, jsb *b, const jstr *s, size_t from, size_t to) {
    if (to <= from || !sb_reserve(r, b, to - from)) return;
    if (to - from >= 256) jr_step(r, (to - from) >> 8);
    size_t at = b->len;
    memcpy(b->s + at, s->s + from, to - from);
    for (size_t k = 0; k < s->n_spans; k++) {
        size_t a = FT_MAX(s->spans[2 * k], from), e = FT_MIN(s->spans[2 * k + 1], to);
        if (a < e) sb_span(b, at + a - from, at + e - from);
    }
    b->len += to - from;
    b->s[b->len] = 0;
}

static void sb_free(jrender *r, jsb *b) {
    r->mem -= b->cap;
    for (size_t i = 0; i < b->n_defer; i++) jv_release(r, b->defer[i].v);
    free(b->s);
    free(b->spans);
    free(b->defer);
    *b = (jsb){0};
}

void jsb_put_sb(jrender *r, jsb *b, const jsb *src, size_t from, size_t to) {
    if (to <= from || !sb_reserve(r, b, to - from)) return;
    if (to - from >= 256) jr_step(r, (to - from) >> 8);
    size_t at = b->len;
    memcpy(b->s + at, src->s + from, to - from);
    for (size_t k = 0; k < src->n_spans; k++) {
        size_t a = FT_MAX(src->spans[2 * k], from), e = FT_MIN(src->spans[2 * k + 1], to);
        if (a < e) sb_span(b, at + a - from, at + e - from);
    }
    b->len += to - from;
    b->s[b->len] = 0;
}

void jsb_truncate(jrender *r, jsb *b, size_t len, size_t n_defer) {
    while (b->n_defer > n_defer) jv_release(r, b->defer[--b->n_defer].v);
    if (len >= b->len) return;
    b->len = len;
    b->s[len] = 0;
    while (b->n_spans && b->spans[2 * b->n_spans - 2] >= len) b->n_spans--;
    if (b->n_spans && b->spans[2 * b->n_spans - 1] > len) b->spans[2 * b->n_spans - 1] = len;
}

void jsb_free(jrender *r, jsb *b) { sb_free(r, b); }

jv jsb_done(jrender *r, jsb *b) {
    jv v = jv_err();
    if (!b->overflow && !r->failed) {
        jstr *s;
        v = str_alloc(r, b->len, b->n_spans, &s);
        if (v.t != JV_ERR) {
            if (b->len) memcpy(s->s, b->s, b->len);
            if (b->n_spans) memcpy(s->spans, b->spans, b->n_spans * 2 * sizeof(size_t));
        }
    }
    sb_free(r, b);
    return v;
}

// ---------------------------------------------------------------------------------------------
// Lists, dicts, functions

jv jv_list_new(jrender *r, size_t cap, bool tuple) {
    if (cap > r->lim.max_items) return jr_fail(r, -1, "a list grew past %zu items (max_items)", r->lim.max_items);
    jlist *l = (jlist *)obj_new(r, JOBJ_LIST, sizeof(jlist));
    if (!l) return jv_err();
    jv v = {.t = tuple ? JV_TUPLE : JV_LIST, .o = &l->h};
    if (cap) {
        if (!account(r, cap * sizeof(jv))) {
            jv_release(r, v);
            return jv_err();
        }
        l->h.bytes += cap * sizeof(jv);
        l->v = ft_malloc(cap * sizeof(jv));
        l->cap = cap;
    }
    return v;
}

static bool grow(jrender *r, jobj *h, void **arr, void **arr2, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return true;
    if (n >= r->lim.max_items) {
        jr_fail(r, -1, "a %s grew past %zu items (max_items)", h->kind == JOBJ_DICT ? "dict" : "list",
                r->lim.max_items);
        return false;
    }
    size_t nc = *cap ? 2 * *cap : 4;
    size_t add = (nc - *cap) * elem * (arr2 ? 2 : 1);
    if (!account(r, add)) return false;
    h->bytes += add;
    *arr = ft_realloc(*arr, nc * elem);
    if (arr2) *arr2 = ft_realloc(*arr2, nc * elem);
    *cap = nc;
    return true;
}

bool jv_list_push(jrender *r, jv list, jv v) {
    jlist *l = JLIST(list);
    if (r->failed || !grow(r, &l->h, (void **)&l->v, NULL, &l->cap, l->n, sizeof(jv))) {
        jv_release(r, v);
        return false;
    }
    l->v[l->n++] = v;
    return true;
}

jv jv_dict_new(jrender *r, uint8_t flavour) {
    jdict *d = (jdict *)obj_new(r, JOBJ_DICT, sizeof(jdict));
    if (!d) return jv_err();
    d->flavour = flavour;
    return (jv){.t = JV_DICT, .o = &d->h};
}

// Numbers as llama.cpp keeps them: an integer reading and a float reading of each.
static void num_parts(jv v, int64_t *i, double *f) {
    if (v.t == JV_INT) {
        *i = v.i;
        double d = (double)v.i;
        bool exact = d >= -9223372036854775808.0 && d < 9223372036854775808.0 && (int64_t)d == v.i;
        *f = exact ? d : (v.i < 0 ? -INFINITY : INFINITY);
    } else if (v.t == JV_FLOAT) {
        *f = v.f;
        if (!isfinite(v.f)) *i = 0;
        else if (v.f >= -9223372036854775808.0 && v.f < 9223372036854775808.0) *i = (int64_t)v.f;
        else *i = INT64_MIN; // what x86's conversion gives llama.cpp
    } else {
        *i = v.b, *f = v.b;
    }
}

static bool is_numeric(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }

// Key equality (hash-equal and equivalent in llama.cpp's map): no failure, shallow for depth.
static bool key_equal(jv a, jv b, int depth) {
    if (a.t == JV_STR || b.t == JV_STR) {
        if (a.t != b.t) return false;
        return JSTR(a)->len == JSTR(b)->len && !memcmp(JSTR(a)->s, JSTR(b)->s, JSTR(a)->len);
    }
    if (is_numeric(a)) {
        if (!is_numeric(b)) return false;
        int64_t ia, ib;
        double fa, fb;
        num_parts(a, &ia, &fa), num_parts(b, &ib, &fb);
        return ia == ib && fa == fb;
    }
    if (a.t != b.t || depth > 64) return false;
    if (a.t == JV_NONE) return true;
    if (a.t == JV_TUPLE) {
        jlist *x = JLIST(a), *y = JLIST(b);
        if (x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++)
            if (!key_equal(x->v[i], y->v[i], depth + 1)) return false;
        return true;
    }
    return a.o == b.o;
}

jv *jv_dict_get(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (key_equal(d->k[i], key, 0)) return &d->v[i];
    return NULL;
}

jv *jv_dict_get_cstr(const jdict *d, const char *key, size_t len) {
    for (size_t i = 0; i < d->n; i++) {
        if (d->k[i].t != JV_STR) continue;
        const jstr *k = JSTR(d->k[i]);
        if (k->len == len && !memcmp(k->s, key, len)) return &d->v[i];
    }
    return NULL;
}

bool jv_dict_set(jrender *r, jv dict, jv key, jv v) {
    jdict *d = JDICT(dict);
    jv *slot = jv_dict_get(d, key);
    if (slot) {
        jv old = *slot;
        *slot = v;
        jv_release(r, old);
        return true;
    }
    if (r->failed || !grow(r, &d->h, (void **)&d->k, (void **)&d->v, &d->cap, d->n, sizeof(jv))) {
        jv_release(r, v);
        return false;
    }
    d->k[d->n] = jv_retain(key);
    d->v[d->n++] = v;
    return true;
}

jv jv_dict_set_cstr(jrender *r, jv dict, const char *key, jv v) {
    jv k = jv_str(r, key, strlen(key), false);
    if (k.t == JV_ERR) {
        jv_release(r, v);
        return k;
    }
    bool ok = jv_dict_set(r, dict, k, v);
    jv_release(r, k);
    return ok ? jv_none() : jv_err();
}

jv jv_func_new(jrender *r, const jbuiltin *b, const jnode *macro, const jv *self) {
    jfunc *f = (jfunc *)obj_new(r, JOBJ_FUNC, sizeof(jfunc));
    if (!f) return jv_err();
    f->b = b;
    f->macro = macro;
    f->bound = self != NULL;
    f->self = self ? jv_retain(*self) : jv_undef(NULL);
    return (jv){.t = JV_FUNC, .o = &f->h};
}

jv jv_kwarg_new(jrender *r, const char *name, jv v) {
    jkwarg *k = (jkwarg *)obj_new(r, JOBJ_KWARG, sizeof(jkwarg));
    if (!k) {
        jv_release(r, v);
        return jv_err();
    }
    k->name = name;
    k->v = v;
    return (jv){.t = JV_KWARG, .o = &k->h};
}

// ---------------------------------------------------------------------------------------------
// Comparisons

bool jv_immutable(jv v) { return v.t != JV_LIST && v.t != JV_DICT; }

static bool hashable(jv v, int depth) {
    switch (v.t) {
    case JV_INT:
    case JV_FLOAT:
    case JV_STR:
    case JV_BOOL:
    case JV_NONE:
    case JV_KWARG: return true;
    case JV_LIST:
    case JV_TUPLE:
        if (depth > 64) return false;
        for (size_t i = 0; i < JLIST(v)->n; i++)
            if (!jv_immutable(JLIST(v)->v[i]) || !hashable(JLIST(v)->v[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (depth > 64) return false;
        for (size_t i = 0; i < JDICT(v)->n; i++)
            if (!jv_immutable(JDICT(v)->v[i]) || !hashable(JDICT(v)->v[i], depth + 1)) return false;
        return true;
    default: return false;
    }
}

bool jv_hashable(jv v) { return hashable(v, 0); }

static int equal(jrender *r, jv a, jv b, uint32_t depth) {
    if (depth > r->lim.max_depth) {
        jr_fail(r, -1, "values nested deeper than %u levels (max_depth), or holding themselves", r->lim.max_depth);
        return -1;
    }
    if (is_numeric(a)) {
        if (!is_numeric(b)) return 0;
        int64_t ia, ib;
        double fa, fb;
        num_parts(a, &ia, &fa), num_parts(b, &ib, &fb);
        return ia == ib && fa == fb;
    }
    switch (a.t) {
    case JV_STR:
        return b.t == JV_STR && JSTR(a)->len == JSTR(b)->len && !memcmp(JSTR(a)->s, JSTR(b)->s, JSTR(a)->len);
    case JV_NONE: return b.t == JV_NONE;
    case JV_UNDEF: return b.t == JV_UNDEF;
    case JV_LIST:
    case JV_TUPLE: {
        if (a.t != b.t || !jv_hashable(a) || !jv_hashable(b)) return 0;
        jlist *x = JLIST(a), *y = JLIST(b);
        if (x->n != y->n) return 0;
        for (size_t i = 0; i < x->n; i++) {
            int e = equal(r, x->v[i], y->v[i], depth + 1);
            if (e != 1) return e;
        }
        return 1;
    }
    case JV_DICT: {
        if (b.t != JV_DICT || !jv_hashable(a) || !jv_hashable(b)) return 0;
        jdict *x = JDICT(a), *y = JDICT(b);
        if (x->n != y->n) return 0;
        for (size_t i = 0; i < x->n; i++) {
            int e = equal(r, x->k[i], y->k[i], depth + 1);
            if (e == 1) e = equal(r, x->v[i], y->v[i], depth + 1);
            if (e != 1) return e;
        }
        return 1;
    }
    case JV_FUNC:
        return b.t == JV_FUNC && JFUNC(a)->b == JFUNC(b)->b && JFUNC(a)->macro == JFUNC(b)->macro;
    case JV_KWARG:
        return b.t == JV_KWARG && !strcmp(JKWARG(a)->name, JKWARG(b)->name) && a.o == b.o;
    default: return 0;
    }
}

int jv_equal(jrender *r, jv a, jv b) { return equal(r, a, b, 0); }

int jv_truthy(jrender *r, jv v, long pos) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return JSTR(v)->len > 0;
    case JV_LIST:
    case JV_TUPLE: return JLIST(v)->n > 0;
    case JV_DICT: return JDICT(v)->n > 0;
    default:
        jr_fail(r, pos, "%s is not a bool value", jv_type_name(v));
        return -1;
    }
}

bool jv_as_int(jv v, int64_t *out) {
    if (v.t == JV_INT || v.t == JV_BOOL) {
        *out = v.t == JV_INT ? v.i : v.b;
        return true;
    }
    if (v.t == JV_FLOAT) {
        double f;
        num_parts(v, out, &f);
        return true;
    }
    return false;
}

bool jv_as_float(jv v, double *out) {
    if (!is_numeric(v)) return false;
    int64_t i;
    num_parts(v, &i, out);
    return true;
}

const char *jv_type_name(jv v) {
    static const char *const names[] = {
        [JV_UNDEF] = "Undefined", [JV_NONE] = "None",   [JV_BOOL] = "Boolean", [JV_INT] = "Integer",
        [JV_FLOAT] = "Float",     [JV_STR] = "String",  [JV_LIST] = "Array",   [JV_TUPLE] = "Tuple",
        [JV_DICT] = "Object",     [JV_FUNC] = "Function", [JV_KWARG] = "KwArg", [JV_ERR] = "Error",
    };
    return names[v.t];
}

// ---------------------------------------------------------------------------------------------
// Text forms

// A float as str() writes it: std::to_string ("%f") without trailing zeros, one kept after the point.
static void jfmt_float(double f, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%f", f);
    if (n < 0 || (size_t)n >= cap) {
        snprintf(buf, cap, "%g", f);
        return;
    }
    while (n > 0 && buf[n - 1] == '0') n--;
    if (n > 0 && buf[n - 1] == '.') buf[n++] = '0';
    buf[n] = 0;
}

static bool enter(jrender *r, long pos) {
    if (++r->depth > r->lim.max_depth) {
        jr_fail(r, pos, "values nested deeper than %u levels (max_depth), or holding themselves", r->lim.max_depth);
        return false;
    }
    return true;
}

static void write_json_string(jrender *r, jsb *b, const jstr *s, const char *raw, size_t len, bool ensure_ascii);

static bool write_repr(jrender *r, jsb *b, jv v, long pos);

bool jv_write_str(jrender *r, jsb *b, jv v, long pos) {
    char buf[512];
    switch (v.t) {
    case JV_STR: jsb_put_str(r, b, JSTR(v), 0, JSTR(v)->len); return !r->failed;
    case JV_INT: snprintf(buf, sizeof(buf), "%lld", (long long)v.i); break;
    case JV_FLOAT: jfmt_float(v.f, buf, sizeof(buf)); break;
    case JV_BOOL: snprintf(buf, sizeof(buf), "%s", v.b ? "True" : "False"); break;
    case JV_NONE: snprintf(buf, sizeof(buf), "None"); break;
    case JV_LIST:
    case JV_TUPLE: {
        if (!enter(r, pos)) return false;
        jlist *l = JLIST(v);
        jsb_puts(r, b, v.t == JV_TUPLE ? "(" : "[");
        for (size_t i = 0; i < l->n && !r->failed; i++) {
            if (i) jsb_puts(r, b, ", ");
            write_repr(r, b, l->v[i], pos);
        }
        if (v.t == JV_TUPLE && l->n == 1) jsb_puts(r, b, ",");
        jsb_puts(r, b, v.t == JV_TUPLE ? ")" : "]");
        r->depth--;
        return !r->failed;
    }
    case JV_DICT: {
        if (!enter(r, pos)) return false;
        jdict *d = JDICT(v);
        jsb_puts(r, b, "{");
        for (size_t i = 0; i < d->n && !r->failed; i++) {
            if (i) jsb_puts(r, b, ", ");
            write_repr(r, b, d->k[i], pos);
            jsb_puts(r, b, ": ");
            write_repr(r, b, d->v[i], pos);
        }
        jsb_puts(r, b, "}");
        r->depth--;
        return !r->failed;
    }
    default:
        jr_fail(r, pos, "%s is not a string value", jv_type_name(v));
        return false;
    }
    jsb_puts(r, b, buf);
    return !r->failed;
}

// llama.cpp's value_to_string_repr: strings quoted ('...', or as JSON when they hold a quote),
// the rest as str(), undefined values and functions by their type.
static bool write_repr(jrender *r, jsb *b, jv v, long pos) {
    if (v.t == JV_STR) {
        const jstr *s = JSTR(v);
        if (memchr(s->s, '\'', s->len)) {
            write_json_string(r, b, s, s->s, s->len, false);
        } else {
            jsb_puts(r, b, "'");
            jsb_put_str(r, b, s, 0, s->len);
            jsb_puts(r, b, "'");
        }
        return !r->failed;
    }
    if (v.t == JV_UNDEF) {
        jsb_puts(r, b, "Undefined");
        if (v.hint) {
            jsb_puts(r, b, " (hint: '");
            jsb_puts(r, b, v.hint);
            jsb_puts(r, b, "')");
        }
        return !r->failed;
    }
    if (v.t == JV_FUNC) {
        jfunc *f = JFUNC(v);
        jsb_puts(r, b, "Function<");
        jsb_puts(r, b, f->b ? f->b->name : "macro");
        jsb_puts(r, b, ">(");
        if (f->bound && !write_repr(r, b, f->self, pos)) return false;
        jsb_puts(r, b, ")");
        return !r->failed;
    }
    if (v.t == JV_KWARG) {
        jsb_puts(r, b, "KwArg");
        return !r->failed;
    }
    return jv_write_str(r, b, v, pos);
}

jv jv_to_str(jrender *r, jv v, long pos) {
    if (v.t == JV_STR) return jv_retain(v);
    jsb b = {0};
    if (!jv_write_str(r, &b, v, pos)) {
        sb_free(r, &b);
        return jv_err();
    }
    return jsb_done(r, &b);
}

bool jv_write_output(jrender *r, jsb *b, jv v) {
    switch (v.t) {
    case JV_STR:
    case JV_INT:
    case JV_FLOAT:
    case JV_BOOL: return jv_write_str(r, b, v, -1);
    case JV_LIST:
    case JV_TUPLE:
        if (!enter(r, -1)) return false;
        for (size_t i = 0; i < JLIST(v)->n && !r->failed; i++) jv_write_output(r, b, JLIST(v)->v[i]);
        r->depth--;
        return !r->failed;
    default: return true;
    }
}

// ---------------------------------------------------------------------------------------------
// JSON out

// Lenient UTF-8 reading for ensure_ascii (llama.cpp's common_parse_utf8_codepoint): a lead byte
// and its continuation bytes, overlong forms accepted; 0 when invalid or cut short.
static int utf8_read(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    int len;
    if (!(c & 0x40)) return 0;
    if (!(c & 0x20)) len = 2, *cp = c & 0x1f;
    else if (!(c & 0x10)) len = 3, *cp = c & 0x0f;
    else if (!(c & 0x08)) len = 4, *cp = c & 0x07;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        *cp = (*cp << 6) | (s[i] & 0x3f);
    }
    return len;
}

// raw[0..len) as a JSON string; s (may be NULL) gives its user-text ranges: an escape stands
// for its byte(s) and is user text where they are.
static void write_json_string(jrender *r, jsb *b, const jstr *s, const char *raw, size_t len, bool ensure_ascii) {
    jsb_puts(r, b, "\"");
    size_t i = 0;
    while (i < len && !r->failed) {
        // a run of bytes written as they are
        size_t j = i;
        while (j < len) {
            unsigned char c = (unsigned char)raw[j];
            if (c == '"' || c == '\\' || c < 0x20 || (ensure_ascii && c >= 0x80)) break;
            j++;
        }
        if (j > i) {
            if (s) jsb_put_str(r, b, s, i, j);
            else jsb_put(r, b, raw + i, j - i, false);
            i = j;
            continue;
        }
        unsigned char c = (unsigned char)raw[i];
        char esc[16];
        size_t used = 1;
        switch (c) {
        case '"': strcpy(esc, "\\\""); break;
        case '\\': strcpy(esc, "\\\\"); break;
        case '\b': strcpy(esc, "\\b"); break;
        case '\f': strcpy(esc, "\\f"); break;
        case '\n': strcpy(esc, "\\n"); break;
        case '\r': strcpy(esc, "\\r"); break;
        case '\t': strcpy(esc, "\\t"); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
            } else {
                uint32_t cp;
                int n = utf8_read((const unsigned char *)raw + i, len - i, &cp);
                if (!n) {
                    strcpy(esc, "\\ufffd");
                } else {
                    used = (size_t)n;
                    if (cp <= 0xFFFF) {
                        snprintf(esc, sizeof(esc), "\\u%04x", cp);
                    } else {
                        cp -= 0x10000;
                        snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xD800 + ((cp >> 10) & 0x3FF),
                                 0xDC00 + (cp & 0x3FF));
                    }
                }
            }
        }
        jsb_put(r, b, esc, strlen(esc), s && jstr_is_user(s, i));
        i += used;
    }
    jsb_puts(r, b, "\"");
}

static void json_indent(jrender *r, jsb *b, int indent, int level) {
    if (indent <= 0) return;
    for (int i = 0; i < level * indent && !r->failed; i++) jsb_put(r, b, " ", 1, false);
}

static bool write_json(jrender *r, jsb *b, jv v, int level, int indent, const jstr *item_sep,
                       const jstr *key_sep, bool ascii) {
    char buf[64];
    switch (v.t) {
    case JV_BOOL: jsb_puts(r, b, v.b ? "true" : "false"); break;
    case JV_INT:
        snprintf(buf, sizeof(buf), "%lld", (long long)v.i);
        jsb_puts(r, b, buf);
        break;
    case JV_FLOAT:
        snprintf(buf, sizeof(buf), "%g", v.f);
        jsb_puts(r, b, buf);
        break;
    case JV_STR: write_json_string(r, b, JSTR(v), JSTR(v)->s, JSTR(v)->len, ascii); break;
    case JV_LIST:
    case JV_TUPLE:
    case JV_DICT: {
        if (!enter(r, -1)) return false;
        bool dict = v.t == JV_DICT;
        size_t n = dict ? JDICT(v)->n : JLIST(v)->n;
        jsb_puts(r, b, dict ? "{" : "[");
        if (n) {
            if (indent >= 0) jsb_puts(r, b, "\n");
            for (size_t i = 0; i < n && !r->failed; i++) {
                json_indent(r, b, indent, level + 1);
                if (dict) {
                    jv key = JDICT(v)->k[i];
                    if (key.t == JV_STR) {
                        write_json_string(r, b, JSTR(key), JSTR(key)->s, JSTR(key)->len, ascii);
                    } else {
                        jv ks = jv_to_str(r, key, -1);
                        if (ks.t == JV_ERR) break;
                        write_json_string(r, b, JSTR(ks), JSTR(ks)->s, JSTR(ks)->len, ascii);
                        jv_release(r, ks);
                    }
                    jsb_put_str(r, b, key_sep, 0, key_sep->len);
                    write_json(r, b, JDICT(v)->v[i], level + 1, indent, item_sep, key_sep, ascii);
                } else {
                    write_json(r, b, JLIST(v)->v[i], level + 1, indent, item_sep, key_sep, ascii);
                }
                if (i + 1 < n) jsb_put_str(r, b, item_sep, 0, item_sep->len);
                if (indent >= 0) jsb_puts(r, b, "\n");
            }
            json_indent(r, b, indent, level);
        }
        jsb_puts(r, b, dict ? "}" : "]");
        r->depth--;
        break;
    }
    default: jsb_puts(r, b, "null"); break;
    }
    return !r->failed;
}

bool jv_write_json(jrender *r, jsb *b, jv v, int indent, const jstr *item_sep, const jstr *key_sep,
                   bool ensure_ascii) {
    return write_json(r, b, v, 0, indent, item_sep, key_sep, ensure_ascii);
}

// ---------------------------------------------------------------------------------------------
// JSON in

typedef struct jparse {
    jrender *r;
    const char *s;
    size_t n, i;
    int depth;
} jparse;

#define JSON_MAX_DEPTH 256

static jv json_fail(jparse *p, const char *what) {
    return jr_fail(p->r, -1, "template variables: %s at byte %zu of the JSON", what, p->i);
}

static void json_ws(jparse *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(const char *s) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
}

static jv json_string(jparse *p, bool user) {
    p->i++; // the opening quote
    jsb b = {0};
    for (;;) {
        if (p->i >= p->n) {
            sb_free(p->r, &b);
            return json_fail(p, "unterminated string");
        }
        char c = p->s[p->i];
        if (c == '"') break;
        if ((unsigned char)c < 0x20) {
            sb_free(p->r, &b);
            return json_fail(p, "control character in a string");
        }
        if (c != '\\') {
            size_t j = p->i;
            while (j < p->n && p->s[j] != '"' && p->s[j] != '\\' && (unsigned char)p->s[j] >= 0x20) j++;
            jsb_put(p->r, &b, p->s + p->i, j - p->i, user);
            p->i = j;
            continue;
        }
        if (p->i + 1 >= p->n) {
            sb_free(p->r, &b);
            return json_fail(p, "unterminated string");
        }
        char e = p->s[p->i + 1];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *k = e ? strchr(from, e) : NULL;
        if (k) {
            jsb_put(p->r, &b, to + (k - from), 1, user);
            p->i += 2;
            continue;
        }
        if (e != 'u' || p->i + 6 > p->n || hex4(p->s + p->i + 2) < 0) {
            sb_free(p->r, &b);
            return json_fail(p, "bad escape in a string");
        }
        uint32_t cp = (uint32_t)hex4(p->s + p->i + 2);
        p->i += 6;
        if (cp >= 0xD800 && cp < 0xDC00 && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
            int lo = hex4(p->s + p->i + 2);
            if (lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                p->i += 6;
            }
        }
        char u[4];
        int len = utf8_encode(cp, u);
        jsb_put(p->r, &b, u, (size_t)len, user);
    }
    p->i++;
    return jsb_done(p->r, &b);
}

// Where a value sits, for the rule of which strings are the protocol's (see tok_jinja_render).
enum { AT_USER, AT_TOP, AT_MESSAGES, AT_MESSAGE };

static jv json_value(jparse *p, int at, bool markup_string);

static jv json_container(jparse *p, int at) {
    if (++p->depth > JSON_MAX_DEPTH) return json_fail(p, "values nested too deeply");
    bool dict = p->s[p->i] == '{';
    p->i++;
    jv c = dict ? jv_dict_new(p->r, JDICT_PLAIN) : jv_list_new(p->r, 0, false);
    if (c.t == JV_ERR) return c;
    json_ws(p);
    if (p->i < p->n && p->s[p->i] == (dict ? '}' : ']')) {
        p->i++;
        p->depth--;
        return c;
    }
    for (;;) {
        json_ws(p);
        if (dict) {
            if (p->i >= p->n || p->s[p->i] != '"') {
                jv_release(p->r, c);
                return json_fail(p, "expected a string key");
            }
            jv key = json_string(p, true); // a key is the caller's text too, should a template write it
            if (key.t == JV_ERR) {
                jv_release(p->r, c);
                return key;
            }
            json_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                jv_release(p->r, key), jv_release(p->r, c);
                return json_fail(p, "expected ':'");
            }
            p->i++;
            size_t klen = JSTR(key)->len;
            const char *k = JSTR(key)->s;
            bool markup = (at == AT_TOP && ((klen == 9 && (!memcmp(k, "bos_token", 9) || !memcmp(k, "eos_token", 9))))) ||
                          (at == AT_MESSAGE && klen == 4 && !memcmp(k, "role", 4));
            int child = at == AT_TOP && klen == 8 && !memcmp(k, "messages", 8) ? AT_MESSAGES : AT_USER;
            jv v = json_value(p, child, markup);
            if (v.t == JV_ERR || !jv_dict_set(p->r, c, key, v)) {
                jv_release(p->r, key), jv_release(p->r, c);
                return jv_err();
            }
            jv_release(p->r, key);
        } else {
            jv v = json_value(p, at == AT_MESSAGES ? AT_MESSAGE : AT_USER, false);
            if (v.t == JV_ERR || !jv_list_push(p->r, c, v)) {
                jv_release(p->r, c);
                return jv_err();
            }
        }
        json_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == (dict ? '}' : ']')) {
            p->i++;
            break;
        }
        jv_release(p->r, c);
        return json_fail(p, dict ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    p->depth--;
    return c;
}

static jv json_value(jparse *p, int at, bool markup_string) {
    json_ws(p);
    if (p->i >= p->n) return json_fail(p, "unexpected end");
    char c = p->s[p->i];
    if (c == '{' || c == '[') return json_container(p, c == '{' && at == AT_TOP ? AT_TOP : at);
    if (c == '"') return json_string(p, !markup_string);
    static const struct {
        const char *w;
        int v;
    } words[] = {{"true", 1}, {"false", 0}, {"null", -1}};
    for (size_t k = 0; k < FT_ARRAY_LEN(words); k++) {
        size_t l = strlen(words[k].w);
        if (p->i + l <= p->n && !memcmp(p->s + p->i, words[k].w, l)) {
            p->i += l;
            return words[k].v < 0 ? jv_none() : jv_bool(words[k].v);
        }
    }
    // a number: an integer where it is one and fits, else a double
    size_t j = p->i;
    if (j < p->n && p->s[j] == '-') j++;
    size_t digits = j;
    while (j < p->n && p->s[j] >= '0' && p->s[j] <= '9') j++;
    if (j == digits) return json_fail(p, "unexpected character");
    bool is_float = false;
    if (j < p->n && p->s[j] == '.') {
        is_float = true;
        j++;
        while (j < p->n && p->s[j] >= '0' && p->s[j] <= '9') j++;
    }
    if (j < p->n && (p->s[j] == 'e' || p->s[j] == 'E')) {
        is_float = true;
        j++;
        if (j < p->n && (p->s[j] == '+' || p->s[j] == '-')) j++;
        while (j < p->n && p->s[j] >= '0' && p->s[j] <= '9') j++;
    }
    char buf[128];
    size_t len = FT_MIN(j - p->i, sizeof(buf) - 1);
    memcpy(buf, p->s + p->i, len);
    buf[len] = 0;
    p->i = j;
    if (!is_float) {
        char *end;
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (errno != ERANGE) return jv_int(v);
    }
    return jv_float(strtod(buf, NULL));
}

jv jv_from_json(jrender *r, const char *s, size_t len, bool protocol) {
    jparse p = {.r = r, .s = s, .n = len};
    json_ws(&p);
    if (p.i >= p.n || s[p.i] != '{') return json_fail(&p, "expected an object");
    jv v = json_value(&p, protocol ? AT_TOP : AT_USER, false);
    if (v.t == JV_ERR) return v;
    json_ws(&p);
    if (p.i != p.n) {
        jv_release(r, v);
        return json_fail(&p, "text after the value");
    }
    return v;
}
