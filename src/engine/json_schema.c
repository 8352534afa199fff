// json_schema.c: JSON Schema into grammar rules (see json_schema.h). The fixed JSON rules are
// GBNF text; objects, arrays, bounded strings, enums and references are built per schema.
#include "json_schema.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64 // schemas nested inside each other

// Whitespace as llama.cpp's json-schema-to-grammar allows it; numbers with at most 16 digits per
// part; \u escapes of surrogates only as a high-low pair (JSON parsers refuse lone ones).
static const char k_json_gbnf[] =
    "json-ws ::= \"\" | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
    "json-sep ::= json-ws \",\" json-ws\n"
    "json-hex ::= [0-9a-fA-F]\n"
    "json-u4 ::= [0-9a-cA-Ce-fE-F] json-hex{3} | [dD] [0-7] json-hex{2} |\n"
    "            [dD] [89abAB] json-hex{2} \"\\\\u\" [dD] [c-fC-F] json-hex{2}\n"
    "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" json-u4)\n"
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
    "json-int ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "json-integer ::= \"-\"? json-int\n"
    "json-number ::= \"-\"? json-int (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n"
    "json-boolean ::= \"true\" | \"false\"\n"
    "json-null ::= \"null\"\n"
    "json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null\n"
    "json-kv ::= json-string json-ws \":\" json-ws json-value\n"
    "json-object ::= \"{\" json-ws (json-kv (json-sep json-kv)* json-ws)? \"}\"\n"
    "json-array ::= \"[\" json-ws (json-value (json-sep json-value)* json-ws)? \"]\"\n"
    "json-day28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
    "json-md ::= (\"0\" [13578] | \"1\" [02]) \"-\" (json-day28 | \"29\" | \"3\" [01]) |\n"
    "            (\"0\" [469] | \"11\") \"-\" (json-day28 | \"29\" | \"30\") | \"02-\" json-day28\n"
    "json-div4 ::= [02468] [048] | [13579] [26]\n"
    "json-leap ::= [0-9] [0-9] ([02468] [48] | [2468] \"0\" | [13579] [26]) | json-div4 \"00\"\n"
    "json-date ::= [0-9]{4} \"-\" json-md | json-leap \"-02-29\"\n"
    "json-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? json-offset\n"
    "json-offset ::= \"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9]\n"
    "json-date-string ::= \"\\\"\" json-date \"\\\"\"\n"
    "json-time-string ::= \"\\\"\" json-time \"\\\"\"\n"
    "json-date-time-string ::= \"\\\"\" json-date \"T\" json-time \"\\\"\"\n"
    "json-uuid-string ::= \"\\\"\" json-hex{8} \"-\" json-hex{4} \"-\" json-hex{4} \"-\" json-hex{4} \"-\" "
    "json-hex{12} \"\\\"\"\n";

// Keywords by what they constrain. Annotations and containers constrain nothing.
enum { KW_ANNOT = 0, KW_CORE = 1, KW_STRING = 2, KW_ARRAY = 4, KW_OBJECT = 8, KW_DEFS = 16, KW_NUMBER = 32 };
#define KW_TYPED (KW_STRING | KW_ARRAY | KW_OBJECT | KW_NUMBER)
static const struct {
    const char *name;
    int kind;
} k_keywords[] = {
    {"type", KW_CORE},           {"enum", KW_CORE},        {"const", KW_CORE},        {"anyOf", KW_CORE},
    {"allOf", KW_CORE},          {"oneOf", KW_CORE},       {"$ref", KW_CORE},        {"properties", KW_OBJECT}, {"required", KW_OBJECT},
    {"additionalProperties", KW_OBJECT}, {"items", KW_ARRAY}, {"minItems", KW_ARRAY}, {"maxItems", KW_ARRAY},
    {"minLength", KW_STRING},    {"maxLength", KW_STRING}, {"format", KW_STRING},     {"title", KW_ANNOT},
    {"description", KW_ANNOT},   {"default", KW_ANNOT},    {"examples", KW_ANNOT},    {"deprecated", KW_ANNOT},
    {"readOnly", KW_ANNOT},      {"writeOnly", KW_ANNOT},  {"$comment", KW_ANNOT},    {"$schema", KW_ANNOT},
    {"$id", KW_ANNOT},           {"$defs", KW_DEFS},       {"definitions", KW_DEFS},
    {"minimum", KW_NUMBER},      {"maximum", KW_NUMBER},   {"exclusiveMinimum", KW_NUMBER},
    {"exclusiveMaximum", KW_NUMBER},
};

static const char *const k_types[] = {"null", "boolean", "object", "array", "number", "string", "integer"};
enum { T_NULL, T_BOOLEAN, T_OBJECT, T_ARRAY, T_NUMBER, T_STRING, T_INTEGER, N_TYPES };
static const int k_type_family[N_TYPES] = {0, 0, KW_OBJECT, KW_ARRAY, KW_NUMBER, KW_STRING, KW_NUMBER};

typedef struct ref_entry {
    char *ptr;
    int rule;
} ref_entry;

struct ft_json_rules {
    ft_gb *b;
    bool lenient;
    bool base_ok; // the fixed rules parsed
    char base_err[512];
    json_t *root; // the document $ref resolves in
    ref_entry *refs;
    int n_refs, cap_refs;
    int depth;
    char path[1024]; // where the compiler is, as a JSON pointer ("#/properties/a")
    size_t path_len;
    ft_err *err;
    bool failed;
};

// ---------------------------------------------------------------------------------------------
// Helpers

static int named(ft_json_rules *j, const char *name) { return ft_gb_named(j->b, name, strlen(name)); }

static int fail(ft_json_rules *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ft_json_rules *j, const char *fmt, ...) {
    if (j->failed) return -1;
    j->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ft_err_set(j->err, "at %s: %s", j->path, msg);
    return -1;
}

// Appends "/seg" (escaped as a JSON pointer) to the path; returns the length to restore.
static size_t path_push(ft_json_rules *j, const char *seg) {
    size_t at = j->path_len, n = at;
    if (n + 1 < sizeof(j->path)) j->path[n++] = '/';
    for (const char *s = seg; *s && n + 3 < sizeof(j->path); s++) {
        if (*s == '~' || *s == '/') {
            j->path[n++] = '~';
            j->path[n++] = *s == '~' ? '0' : '1';
        } else {
            j->path[n++] = *s;
        }
    }
    j->path[n] = 0;
    j->path_len = n;
    return at;
}

static void path_pop(ft_json_rules *j, size_t at) {
    j->path_len = at;
    j->path[at] = 0;
}

// A rule of the one alternative q (freed).
static int rule_of(ft_json_rules *j, const char *hint, ft_gseq *q) {
    int r = ft_gb_rule(j->b, hint);
    ft_gb_alt(j->b, r, q->s, q->n);
    ft_gseq_free(q);
    return r;
}

static void push_lit(ft_json_rules *j, ft_gseq *q, const char *s) { ft_gb_lit(j->b, q, s, strlen(s)); }
static void push_rule(ft_gseq *q, int r) { ft_gseq_push(q, ft_gb_ref(r)); }

// A rule of exactly v's JSON text, as jansson writes it compactly.
static int literal(ft_json_rules *j, json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return fail(j, "a value that cannot be written as JSON");
    ft_gseq q = {0};
    push_lit(j, &q, s);
    free(s);
    return rule_of(j, "literal", &q);
}

static int type_of(const char *name) {
    for (int t = 0; t < N_TYPES; t++)
        if (!strcmp(name, k_types[t])) return t;
    return -1;
}

static bool value_has_type(json_t *v, int t) {
    switch (t) {
    case T_NULL: return json_is_null(v);
    case T_BOOLEAN: return json_is_boolean(v);
    case T_OBJECT: return json_is_object(v);
    case T_ARRAY: return json_is_array(v);
    case T_NUMBER: return json_is_number(v);
    case T_STRING: return json_is_string(v);
    default: return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    }
}

// A non-negative integer keyword (absent: def) up to the grammar's bound.
static bool bound(ft_json_rules *j, json_t *s, const char *key, int def, int *out) {
    json_t *v = json_object_get(s, key);
    *out = def;
    if (!v) return true;
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (!json_is_number(v) || !(d >= 0) || d != floor(d)) return fail(j, "'%s' must be a non-negative integer", key), false;
    if (d > FT_GRAMMAR_MAX_REPEAT) return fail(j, "'%s' above %d is not supported", key, FT_GRAMMAR_MAX_REPEAT), false;
    *out = (int)d;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Schemas

static int compile(ft_json_rules *j, json_t *s);

static int compile_at(ft_json_rules *j, json_t *s, const char *seg1, const char *seg2) {
    size_t at = path_push(j, seg1);
    if (seg2) path_push(j, seg2);
    int r = compile(j, s);
    path_pop(j, at);
    return r;
}

// The JSON pointer ref ("#", "#/a/b~1c", percent-encoded as a URI fragment) inside the root.
static json_t *resolve(ft_json_rules *j, const char *ref) {
    if (ref[0] != '#') return NULL;
    json_t *at = j->root;
    const char *p = ref + 1;
    if (*p && *p != '/') return NULL;
    char seg[512];
    while (*p == '/') {
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && (p[1] == '0' || p[1] == '1')) {
                c = p[1] == '0' ? '~' : '/';
                p++;
            } else if (c == '%' && p[1] && p[2]) {
                char hex[3] = {p[1], p[2], 0}, *end;
                long v = strtol(hex, &end, 16);
                if (*end || v <= 0) return NULL;
                c = (char)v;
                p += 2;
            }
            if (n + 1 >= sizeof(seg)) return NULL;
            seg[n++] = c;
        }
        seg[n] = 0;
        if (json_is_object(at)) {
            at = json_object_get(at, seg);
        } else if (json_is_array(at)) {
            char *end;
            long i = strtol(seg, &end, 10);
            at = *end || !n || i < 0 ? NULL : json_array_get(at, (size_t)i);
        } else {
            at = NULL;
        }
        if (!at) return NULL;
    }
    return at;
}

// The rule of a $ref: made once per pointer (before its target is compiled, so a schema may
// refer to itself inside its own objects and arrays).
static int compile_ref(ft_json_rules *j, json_t *ref) {
    if (!json_is_string(ref)) return fail(j, "'$ref' must be a string");
    const char *ptr = json_string_value(ref);
    for (int i = 0; i < j->n_refs; i++)
        if (!strcmp(j->refs[i].ptr, ptr)) return j->refs[i].rule;
    json_t *target = resolve(j, ptr);
    if (!target)
        return fail(j, "'$ref' \"%.200s\" does not name a schema in this document (only \"#...\" pointers are "
                       "supported)",
                    ptr);
    char hint[96];
    snprintf(hint, sizeof(hint), "ref:%.80s", ptr);
    int r = ft_gb_rule(j->b, hint);
    if (j->n_refs == j->cap_refs) {
        j->cap_refs = j->cap_refs ? 2 * j->cap_refs : 8;
        j->refs = ft_realloc(j->refs, (size_t)j->cap_refs * sizeof(ref_entry));
    }
    j->refs[j->n_refs++] = (ref_entry){ft_strdup(ptr), r};
    char saved[sizeof(j->path)];
    size_t saved_len = j->path_len;
    memcpy(saved, j->path, sizeof(saved));
    snprintf(j->path, sizeof(j->path), "%s", ptr);
    j->path_len = strlen(j->path);
    int t = compile(j, target);
    memcpy(j->path, saved, sizeof(saved));
    j->path_len = saved_len;
    if (t < 0) return -1;
    ft_gsym x = ft_gb_ref(t);
    ft_gb_alt(j->b, r, &x, 1);
    return r;
}

// A JSON string that is none of names (the declared properties), for further keys: a trie of
// the names' characters, each node a rule. At a node the key may end (unless a name ends
// there), go on with a child's character, or leave the trie with any other character (no
// escape: an escape could spell a name's character), after which it is any string.
typedef struct kn {
    uint32_t cp;
    int first_child, next_sibling;
    bool end;
} kn;

static int utf8_next(const unsigned char *s, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) return *cp = c, 1;
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    uint32_t v = c & (0x3F >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return *cp = 0xFFFD, 1; // (jansson's strings are valid UTF-8)
        v = v << 6 | (s[i] & 0x3F);
    }
    return *cp = v, n;
}

// The rule of trie node i, its children's rules made already (rule[c]).
static int not_names_node(ft_json_rules *j, const kn *t, int i, const int *rule, int rest) {
    int r = ft_gb_rule(j->b, "key");
    if (!t[i].end) {
        ft_gsym q = ft_gb_byte(j->b, '"');
        ft_gb_alt(j->b, r, &q, 1);
    }
    int n = 3;
    for (int c = t[i].first_child; c >= 0; c = t[c].next_sibling) n++;
    uint32_t *ex = ft_malloc((size_t)n * 2 * sizeof(uint32_t)); // '"', '\\', controls, the children
    uint32_t fixed[6] = {'"', '"', '\\', '\\', 0, 0x1F};
    memcpy(ex, fixed, sizeof(fixed));
    int k = 3;
    for (int c = t[i].first_child; c >= 0; c = t[c].next_sibling) {
        uint32_t cp = t[c].cp;
        ex[2 * k] = ex[2 * k + 1] = cp, k++;
        if (cp == '"' || cp == '\\' || cp < 0x20) continue; // a name that needs escapes is never spelled raw
        uint32_t one[2] = {cp, cp};
        ft_gsym q[2] = {ft_gb_chars(j->b, one, 1, false), ft_gb_ref(rule[c])};
        ft_gb_alt(j->b, r, q, 2);
    }
    ft_gsym q[2] = {ft_gb_chars(j->b, ex, k, true), ft_gb_ref(rest)};
    ft_gb_alt(j->b, r, q, 2);
    free(ex);
    return r;
}

static int not_names(ft_json_rules *j, const char *const *names, int n) {
    int cap = 1, count = 1;
    for (int i = 0; i < n; i++) cap += (int)strlen(names[i]);
    kn *t = ft_malloc((size_t)cap * sizeof(kn));
    t[0] = (kn){0, -1, -1, false};
    for (int i = 0; i < n; i++) {
        int at = 0;
        for (const unsigned char *s = (const unsigned char *)names[i]; *s;) {
            uint32_t cp;
            s += utf8_next(s, &cp);
            int c = t[at].first_child;
            while (c >= 0 && t[c].cp != cp) c = t[c].next_sibling;
            if (c < 0) {
                c = count++;
                t[c] = (kn){cp, -1, t[at].first_child, false};
                t[at].first_child = c;
            }
            at = c;
        }
        t[at].end = true;
    }
    // the rest of a string after it left the trie: json-char* then the closing quote
    ft_gseq q = {0};
    ft_gsym ch = ft_gb_ref(named(j, "json-char"));
    ft_gseq_push(&q, ft_gb_repeat(j->b, &ch, 1, 0, -1, "key-rest"));
    ft_gseq_push(&q, ft_gb_byte(j->b, '"'));
    int rest = rule_of(j, "key-rest", &q);
    // a child comes after its parent in t: its rule is made first going backwards (no recursion
    // however long a name)
    int *rule = ft_malloc((size_t)count * sizeof(int));
    for (int i = count - 1; i >= 0; i--) rule[i] = not_names_node(j, t, i, rule, rest);
    ft_gseq_push(&q, ft_gb_byte(j->b, '"'));
    push_rule(&q, rule[0]);
    free(rule);
    free(t);
    return rule_of(j, "key", &q);
}

static int compile_object(ft_json_rules *j, json_t *s) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
           *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(j, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(j, "'required' must be an array of property names");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return fail(j, "'additionalProperties' must be a boolean or a schema");
    int n = props ? (int)json_object_size(props) : 0;
    const char **names = ft_calloc((size_t)FT_MAX(n, 1), sizeof(char *));
    bool *required = ft_calloc((size_t)FT_MAX(n, 1), sizeof(bool));
    int *kv = ft_calloc((size_t)FT_MAX(n, 1), sizeof(int));
    int ws = named(j, "json-ws"), sep = named(j, "json-sep"), result = -1, akv = -1;
    const char *key;
    json_t *sub;
    int i = 0;
    json_object_foreach(props, key, sub) {
        names[i] = key;
        int v = compile_at(j, sub, "properties", key);
        if (v < 0) goto out;
        json_t *ks = json_string(key);
        char *lit = json_dumps(ks, JSON_ENCODE_ANY);
        json_decref(ks);
        ft_gseq q = {0};
        push_lit(j, &q, lit);
        free(lit);
        push_rule(&q, ws);
        push_lit(j, &q, ":");
        push_rule(&q, ws);
        push_rule(&q, v);
        kv[i++] = rule_of(j, "kv", &q);
    }
    size_t k;
    json_t *x;
    json_array_foreach(req, k, x) {
        if (!json_is_string(x)) {
            fail(j, "'required' must be an array of property names");
            goto out;
        }
        int at = 0;
        while (at < n && strcmp(names[at], json_string_value(x))) at++;
        if (at == n) {
            fail(j, "'required' names \"%.100s\", which 'properties' does not define", json_string_value(x));
            goto out;
        }
        required[at] = true;
    }
    if (!json_is_false(add)) { // further keys: never a declared name
        int v = add && json_is_object(add) ? compile_at(j, add, "additionalProperties", NULL) : named(j, "json-value");
        if (v < 0) goto out;
        ft_gseq q = {0};
        push_rule(&q, n ? not_names(j, names, n) : named(j, "json-string"));
        push_rule(&q, ws);
        push_lit(j, &q, ":");
        push_rule(&q, ws);
        push_rule(&q, v);
        akv = rule_of(j, "akv", &q);
    }
    // tail[i]: the members from property i on, each after a separator (something came before);
    // head[i]: the same where nothing came before, at least one member (-1: none can come)
    int tail = ft_gb_rule(j->b, "tail"), head = -1;
    if (akv >= 0) {
        ft_gsym q[2] = {ft_gb_ref(sep), ft_gb_ref(akv)};
        ft_gsym more = ft_gb_repeat(j->b, q, 2, 0, -1, "more");
        ft_gb_alt(j->b, tail, &more, 1);
        head = ft_gb_rule(j->b, "head");
        ft_gsym h[2] = {ft_gb_ref(akv), more};
        ft_gb_alt(j->b, head, h, 2);
    } else {
        ft_gb_alt(j->b, tail, NULL, 0);
    }
    for (i = n - 1; i >= 0; i--) {
        int t = ft_gb_rule(j->b, "tail"), h = ft_gb_rule(j->b, "head");
        ft_gsym q[3] = {ft_gb_ref(sep), ft_gb_ref(kv[i]), ft_gb_ref(tail)};
        ft_gb_alt(j->b, t, q, 3);
        ft_gb_alt(j->b, h, q + 1, 2);
        if (!required[i]) { // or skipped
            ft_gsym skip = ft_gb_ref(tail);
            ft_gb_alt(j->b, t, &skip, 1);
            if (head >= 0) {
                ft_gsym hs = ft_gb_ref(head);
                ft_gb_alt(j->b, h, &hs, 1);
            }
        }
        tail = t;
        head = h;
    }
    bool any_required = false;
    for (i = 0; i < n; i++) any_required |= required[i];
    ft_gseq q = {0};
    push_lit(j, &q, "{");
    push_rule(&q, ws);
    if (head >= 0) {
        ft_gsym body[2] = {ft_gb_ref(head), ft_gb_ref(ws)};
        if (any_required) {
            ft_gseq_push(&q, body[0]);
            ft_gseq_push(&q, body[1]);
        } else {
            ft_gseq_push(&q, ft_gb_repeat(j->b, body, 2, 0, 1, "members"));
        }
    }
    push_lit(j, &q, "}");
    result = rule_of(j, "object", &q);
out:
    free(names);
    free(required);
    free(kv);
    return j->failed ? -1 : result;
}

static int compile_array(ft_json_rules *j, json_t *s) {
    json_t *items = json_object_get(s, "items");
    if (items && json_is_array(items))
        return fail(j, "'items' as an array (a tuple) is not supported: give one schema for every item");
    int min, max;
    if (!bound(j, s, "minItems", 0, &min) || !bound(j, s, "maxItems", -1, &max)) return -1;
    if (max >= 0 && max < min) return fail(j, "'maxItems' %d is below 'minItems' %d: no array is valid", max, min);
    int item = items ? compile_at(j, items, "items", NULL) : named(j, "json-value");
    if (item < 0) return -1;
    int ws = named(j, "json-ws"), sep = named(j, "json-sep");
    ft_gseq q = {0};
    push_lit(j, &q, "[");
    push_rule(&q, ws);
    if (max != 0) {
        // item (sep item){min-1, max-1} ws, optional when min is 0
        ft_gsym more[2] = {ft_gb_ref(sep), ft_gb_ref(item)};
        ft_gsym body[3] = {ft_gb_ref(item),
                           ft_gb_repeat(j->b, more, 2, min > 0 ? min - 1 : 0, max > 0 ? max - 1 : -1, "items"),
                           ft_gb_ref(ws)};
        if (min > 0) {
            for (int i = 0; i < 3; i++) ft_gseq_push(&q, body[i]);
        } else {
            ft_gseq_push(&q, ft_gb_repeat(j->b, body, 3, 0, 1, "items"));
        }
    }
    push_lit(j, &q, "]");
    return rule_of(j, "array", &q);
}

static int compile_string(ft_json_rules *j, json_t *s) {
    json_t *format = json_object_get(s, "format");
    if (format && !json_is_string(format)) return fail(j, "'format' must be a string");
    bool lengths = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if (format) {
        static const char *const enforced[] = {"date", "time", "date-time", "uuid"};
        for (size_t i = 0; i < FT_ARRAY_LEN(enforced); i++) {
            if (strcmp(json_string_value(format), enforced[i])) continue;
            if (lengths) return fail(j, "'minLength' or 'maxLength' beside 'format' \"%s\" is not supported", enforced[i]);
            char name[64];
            snprintf(name, sizeof(name), "json-%s-string", enforced[i]);
            return named(j, name);
        }
        // other formats (email, uri, ...) would be annotations only: refused, so a client does
        // not take a string it asked a format of for checked
        if (!j->lenient)
            return fail(j, "'format' \"%.60s\" is not supported (date, time, date-time and uuid are; ft serve "
                           "--lenient takes any string for it)",
                        json_string_value(format));
        FT_LOG_INFO("json schema: 'format' \"%s\" at %s taken as any string (--lenient)", json_string_value(format),
                    j->path);
    }
    if (!lengths) return named(j, "json-string");
    int min, max;
    if (!bound(j, s, "minLength", 0, &min) || !bound(j, s, "maxLength", -1, &max)) return -1;
    if (max >= 0 && max < min) return fail(j, "'maxLength' %d is below 'minLength' %d: no string is valid", max, min);
    ft_gseq q = {0};
    ft_gsym ch = ft_gb_ref(named(j, "json-char"));
    push_lit(j, &q, "\"");
    ft_gseq_push(&q, ft_gb_repeat(j->b, &ch, 1, min, max, "chars"));
    push_lit(j, &q, "\"");
    return rule_of(j, "string", &q);
}

// Integers in [lo, hi] of n digits each (x and y: the bounds' digits, leading ones included),
// as alternatives of rule after the symbols in prefix: equal leading digits are one byte; where
// they part, x's first digit before anything from x's rest up, the digits between before any
// digits, and y's before anything up to y's rest (a run of zeros or nines is a whole range).
static void digits_range(ft_json_rules *j, int rule, ft_gseq *pre, const char *x, const char *y, int n) {
    if (n == 0) {
        ft_gb_alt(j->b, rule, pre->s, pre->n);
        return;
    }
    int at = pre->n;
    if (x[0] == y[0]) {
        ft_gseq_push(pre, ft_gb_byte(j->b, (uint8_t)x[0]));
        digits_range(j, rule, pre, x + 1, y + 1, n - 1);
        pre->n = at;
        return;
    }
    static const char nines[] = "9999999999999999", zeros[] = "0000000000000000";
    bool low_full = !strncmp(x + 1, zeros, (size_t)n - 1), high_full = !strncmp(y + 1, nines, (size_t)n - 1);
    int lo = low_full ? x[0] : x[0] + 1, hi = high_full ? y[0] : y[0] - 1;
    if (!low_full) {
        ft_gseq_push(pre, ft_gb_byte(j->b, (uint8_t)x[0]));
        digits_range(j, rule, pre, x + 1, nines, n - 1);
        pre->n = at;
    }
    if (lo <= hi) {
        uint64_t set[4] = {0}, any[4] = {0};
        for (int c = lo; c <= hi; c++) set[c >> 6] |= 1ull << (c & 63);
        for (int c = '0'; c <= '9'; c++) any[c >> 6] |= 1ull << (c & 63);
        ft_gseq_push(pre, ft_gb_bytes(j->b, set));
        for (int i = 1; i < n; i++) ft_gseq_push(pre, ft_gb_bytes(j->b, any));
        ft_gb_alt(j->b, rule, pre->s, pre->n);
        pre->n = at;
    }
    if (!high_full) {
        ft_gseq_push(pre, ft_gb_byte(j->b, (uint8_t)y[0]));
        digits_range(j, rule, pre, zeros, y + 1, n - 1);
        pre->n = at;
    }
}

// The magnitudes in [a, b] (1 <= a <= b), written without leading zeros, as alternatives of
// rule after the symbols in prefix: one digits_range per number of digits.
static void magnitude_range(ft_json_rules *j, int rule, ft_gseq *pre, long long a, long long b) {
    long long lo_d = 1; // 10^(d - 1)
    for (int d = 1; d <= 16; d++, lo_d *= 10) {
        long long hi_d = lo_d * 10 - 1, x = FT_MAX(a, lo_d), y = FT_MIN(b, hi_d);
        if (x > y) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof(xs), "%lld", x);
        snprintf(ys, sizeof(ys), "%lld", y);
        digits_range(j, rule, pre, xs, ys, d);
    }
}

// A bound keyword of an integer schema as the integer it implies (minimum 1.5: 2), clamped to
// the 16 digits integers are written with; false (failed) for a value that is not a number.
#define INT_MAG 9999999999999999LL
static bool int_bound(ft_json_rules *j, json_t *s, const char *key, bool lower, bool exclusive, long long *out) {
    json_t *v = json_object_get(s, key);
    if (!v) return true;
    if (!json_is_number(v)) return fail(j, "'%s' must be a number", key), false;
    double d = json_number_value(v);
    if (json_is_integer(v)) {
        long long x = json_integer_value(v);
        if (exclusive) x = lower ? (x == LLONG_MAX ? x : x + 1) : (x == LLONG_MIN ? x : x - 1);
        d = (double)x;
        if (x > -INT_MAG && x < INT_MAG) { // exact
            *out = lower ? FT_MAX(*out, x) : FT_MIN(*out, x);
            return true;
        }
    } else if (lower) {
        d = exclusive ? floor(d) + 1 : ceil(d);
    } else {
        d = exclusive ? ceil(d) - 1 : floor(d);
    }
    long long x = d <= (double)-INT_MAG ? -INT_MAG : d >= (double)INT_MAG ? INT_MAG : (long long)d;
    *out = lower ? FT_MAX(*out, x) : FT_MIN(*out, x);
    return true;
}

// An integer, within the schema's minimum, maximum, exclusiveMinimum and exclusiveMaximum.
static int compile_integer(ft_json_rules *j, json_t *s) {
    long long lo = -INT_MAG, hi = INT_MAG;
    if (!int_bound(j, s, "minimum", true, false, &lo) || !int_bound(j, s, "exclusiveMinimum", true, true, &lo) ||
        !int_bound(j, s, "maximum", false, false, &hi) || !int_bound(j, s, "exclusiveMaximum", false, true, &hi))
        return -1;
    if (lo == -INT_MAG && hi == INT_MAG) return named(j, "json-integer");
    if (lo > hi) return fail(j, "the bounds leave no integer (between %lld and %lld)", lo, hi);
    int r = ft_gb_rule(j->b, "integer");
    ft_gseq pre = {0};
    if (lo <= -1) { // "-" and the magnitudes of [lo, min(hi, -1)]
        ft_gseq_push(&pre, ft_gb_byte(j->b, '-'));
        magnitude_range(j, r, &pre, hi <= -1 ? -hi : 1, -lo);
        pre.n = 0;
    }
    if (lo <= 0 && hi >= 0) {
        ft_gsym zero = ft_gb_byte(j->b, '0');
        ft_gb_alt(j->b, r, &zero, 1);
    }
    if (hi >= 1) magnitude_range(j, r, &pre, FT_MAX(lo, 1), hi);
    ft_gseq_free(&pre);
    return r;
}

static int compile_type(ft_json_rules *j, json_t *s, int t) {
    switch (t) {
    case T_NULL: return named(j, "json-null");
    case T_BOOLEAN: return named(j, "json-boolean");
    case T_INTEGER: return compile_integer(j, s);
    case T_NUMBER:
        if (json_object_get(s, "minimum") || json_object_get(s, "maximum") || json_object_get(s, "exclusiveMinimum") ||
            json_object_get(s, "exclusiveMaximum"))
            return fail(j, "bounds on a \"number\" are not supported (they are on an \"integer\")");
        return named(j, "json-number");
    case T_STRING: return compile_string(j, s);
    case T_ARRAY: return compile_array(j, s);
    default: return compile_object(j, s);
    }
}

// A rule whose alternatives are the rules r[0..n).
static int any_of(ft_json_rules *j, const int *r, int n) {
    if (n == 1) return r[0];
    int a = ft_gb_rule(j->b, "anyof");
    for (int i = 0; i < n; i++) {
        ft_gsym x = ft_gb_ref(r[i]);
        ft_gb_alt(j->b, a, &x, 1);
    }
    return a;
}

// Names the keywords of s other than annotations, $defs and those in allow (a mask of kinds
// plus the names listed), for "X beside Y is not supported".
static const char *other_keyword(json_t *s, int allow_kinds, const char *allow1, const char *allow2) {
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if ((allow1 && !strcmp(key, allow1)) || (allow2 && !strcmp(key, allow2))) continue;
        for (size_t i = 0; i < FT_ARRAY_LEN(k_keywords); i++)
            if (!strcmp(key, k_keywords[i].name) && k_keywords[i].kind != KW_ANNOT && k_keywords[i].kind != KW_DEFS &&
                !(k_keywords[i].kind & allow_kinds))
                return k_keywords[i].name;
    }
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// oneOf: whether two schemas can match the same value, decided conservatively (false: maybe)

enum { K_NULL = 1, K_BOOL = 2, K_OBJECT = 4, K_ARRAY = 8, K_STRING = 16, K_INT = 32, K_FRAC = 64, K_ALL = 127 };

static int kind_of_value(json_t *v) {
    if (json_is_null(v)) return K_NULL;
    if (json_is_boolean(v)) return K_BOOL;
    if (json_is_object(v)) return K_OBJECT;
    if (json_is_array(v)) return K_ARRAY;
    if (json_is_string(v)) return K_STRING;
    return value_has_type(v, T_INTEGER) ? K_INT : K_FRAC;
}

// s with its $ref followed (a few times at most), or NULL.
static json_t *deref(ft_json_rules *j, json_t *s) {
    for (int i = 0; i < 8 && json_is_object(s) && json_object_get(s, "$ref"); i++) {
        json_t *r = json_object_get(s, "$ref");
        s = json_is_string(r) ? resolve(j, json_string_value(r)) : NULL;
    }
    return json_is_object(s) && json_object_get(s, "$ref") ? NULL : s;
}

// The kinds of value s accepts: its types, or its enum's or const's values; any for the rest.
static int kinds_of(json_t *s, json_t **values) {
    *values = NULL;
    if (!json_is_object(s)) return K_ALL;
    int k = K_ALL;
    json_t *type = json_object_get(s, "type"), *x;
    if (json_is_string(type) || json_is_array(type)) {
        k = 0;
        json_t *list = json_is_string(type) ? json_pack("[O]", type) : json_incref(type);
        size_t i;
        json_array_foreach(list, i, x) {
            int t = json_is_string(x) ? type_of(json_string_value(x)) : -1;
            static const int kinds[N_TYPES] = {K_NULL, K_BOOL, K_OBJECT, K_ARRAY, K_INT | K_FRAC, K_STRING, K_INT};
            k |= t < 0 ? K_ALL : kinds[t];
        }
        json_decref(list);
    }
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (json_is_array(en) || cn) {
        *values = en ? json_incref(en) : json_pack("[O]", cn);
        int kv = 0;
        size_t i;
        json_array_foreach(*values, i, x) kv |= kind_of_value(x);
        k &= kv;
    }
    return k;
}

static bool same_value(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    return json_equal(a, b);
}

static bool disjoint(ft_json_rules *j, json_t *a, json_t *b, int depth) {
    if (depth > 8 || !(a = deref(j, a)) || !(b = deref(j, b))) return false;
    json_t *va, *vb;
    int ka = kinds_of(a, &va), kb = kinds_of(b, &vb);
    bool apart = !(ka & kb);
    if (!apart && va && vb) { // both list their values: none shared
        apart = true;
        size_t p, q;
        json_t *x, *y;
        json_array_foreach(va, p, x) json_array_foreach(vb, q, y) apart &= !same_value(x, y);
    }
    json_decref(va);
    json_decref(vb);
    if (apart || (ka & kb) != K_OBJECT) return apart;
    // objects only: a property both require whose schemas are disjoint
    json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required"), *x, *y;
    size_t p, q;
    json_array_foreach(ra, p, x) json_array_foreach(rb, q, y) {
        if (!json_is_string(x) || !json_equal(x, y)) continue;
        json_t *sa = json_object_get(pa, json_string_value(x)), *sb = json_object_get(pb, json_string_value(x));
        if (sa && sb && disjoint(j, sa, sb, depth + 1)) return true;
    }
    return false;
}

static int compile_body(ft_json_rules *j, json_t *s) {
    if (json_is_true(s)) return named(j, "json-value");
    if (json_is_false(s)) return fail(j, "the schema false accepts no value");
    if (!json_is_object(s)) return fail(j, "a schema must be an object or a boolean");
    // every keyword known, or refused (ignored with lenient)
    int families = 0;
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        int kind = -1;
        for (size_t i = 0; i < FT_ARRAY_LEN(k_keywords) && kind < 0; i++)
            if (!strcmp(key, k_keywords[i].name)) kind = k_keywords[i].kind;
        if (kind < 0) {
            if (!j->lenient) return fail(j, "the keyword '%.100s' is not supported", key);
            FT_LOG_INFO("json schema: ignoring the keyword '%s' at %s (--lenient)", key, j->path);
            continue;
        }
        if (!strcmp(key, "$id") && strcmp(j->path, "#")) return fail(j, "'$id' is supported at the root only");
        families |= kind & KW_TYPED;
    }
    json_t *x;
    const char *other;
    if ((x = json_object_get(s, "$ref"))) {
        if ((other = other_keyword(s, 0, "$ref", NULL)))
            return fail(j, "'$ref' beside '%s' is not supported", other);
        return compile_ref(j, x);
    }
    if ((x = json_object_get(s, "allOf"))) {
        if (!json_is_array(x) || json_array_size(x) != 1)
            return fail(j, "'allOf' is supported with exactly one schema");
        if ((other = other_keyword(s, 0, "allOf", NULL)))
            return fail(j, "'allOf' beside '%s' is not supported", other);
        return compile_at(j, json_array_get(x, 0), "allOf", "0");
    }
    const char *alt_key = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
    if (alt_key && json_object_get(s, "anyOf") && json_object_get(s, "oneOf"))
        return fail(j, "'anyOf' beside 'oneOf' is not supported");
    if (alt_key) { // oneOf: as anyOf where no value can match two of the schemas
        x = json_object_get(s, alt_key);
        if (!json_is_array(x) || !json_array_size(x))
            return fail(j, "'%s' must be a non-empty array of schemas", alt_key);
        if ((other = other_keyword(s, 0, alt_key, NULL)))
            return fail(j, "'%s' beside '%s' is not supported", alt_key, other);
        int n = (int)json_array_size(x), *r = ft_malloc((size_t)n * sizeof(int));
        if (alt_key[0] == 'o')
            for (int a = 0; a < n; a++)
                for (int b = a + 1; b < n; b++)
                    if (!disjoint(j, json_array_get(x, (size_t)a), json_array_get(x, (size_t)b), 0))
                        return free(r), fail(j,
                                             "'oneOf': schemas %d and %d may match the same value (ft supports "
                                             "'oneOf' whose schemas differ in type, in enum or const values, or "
                                             "in such a value of a property both require; else use 'anyOf')",
                                             a, b);
        for (int i = 0; i < n; i++) {
            char idx[16];
            snprintf(idx, sizeof(idx), "%d", i);
            if ((r[i] = compile_at(j, json_array_get(x, (size_t)i), alt_key, idx)) < 0) return free(r), -1;
        }
        int a = any_of(j, r, n);
        free(r);
        return a;
    }
    // the types: listed, else implied by the keywords
    bool types[N_TYPES] = {0};
    json_t *type = json_object_get(s, "type");
    bool has_type = type != NULL;
    if (type) {
        if (!json_is_string(type) && !(json_is_array(type) && json_array_size(type)))
            return fail(j, "'type' must be a type name or a non-empty array of type names");
        json_t *list = json_is_string(type) ? json_pack("[O]", type) : json_incref(type);
        size_t i;
        json_array_foreach(list, i, x) {
            int t = json_is_string(x) ? type_of(json_string_value(x)) : -1;
            if (t < 0 || types[t]) {
                json_decref(list);
                return fail(j, "'type' must be a type name or an array of different type names (null, boolean, "
                               "object, array, number, string, integer)");
            }
            types[t] = true;
        }
        json_decref(list);
    } else if (families) {
        if (families & (families - 1))
            return fail(j, "keywords of several types without 'type' (say which type the value has)");
        if (families == KW_NUMBER)
            return fail(j, "'minimum' or 'maximum' without 'type' (say \"integer\")");
        types[families == KW_STRING ? T_STRING : families == KW_ARRAY ? T_ARRAY : T_OBJECT] = true;
    }
    // a keyword for a type the value cannot have constrains nothing: refused, not ignored
    json_object_foreach(s, key, v) {
        for (size_t i = 0; i < FT_ARRAY_LEN(k_keywords); i++) {
            int kind = k_keywords[i].kind;
            if (strcmp(key, k_keywords[i].name) || !(kind & KW_TYPED)) continue;
            bool applies = false;
            for (int t = 0; t < N_TYPES; t++) applies |= types[t] && k_type_family[t] == kind;
            if (!applies) return fail(j, "'%s' does not apply to the schema's type", key);
        }
    }
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) { // the listed values (of the listed types)
        if (en && cn) return fail(j, "'enum' beside 'const' is not supported");
        if ((other = other_keyword(s, 0, en ? "enum" : "const", "type")))
            return fail(j, "'%s' beside '%s' is not supported", en ? "enum" : "const", other);
        if (en && (!json_is_array(en) || !json_array_size(en))) return fail(j, "'enum' must be a non-empty array");
        json_t *vals = en ? json_incref(en) : json_pack("[O]", cn);
        int n = (int)json_array_size(vals), m = 0, *r = ft_malloc((size_t)n * sizeof(int));
        for (int i = 0; i < n; i++) {
            json_t *val = json_array_get(vals, (size_t)i);
            bool ok = !has_type;
            for (int t = 0; t < N_TYPES && !ok; t++) ok = types[t] && value_has_type(val, t);
            if (ok && (r[m] = literal(j, val)) >= 0) m++;
        }
        json_decref(vals);
        int a = m ? any_of(j, r, m) : -1;
        free(r);
        if (j->failed) return -1;
        if (!m) return fail(j, "no value of '%s' has the schema's 'type'", en ? "enum" : "const");
        return a;
    }
    int r[N_TYPES], n = 0;
    for (int t = 0; t < N_TYPES; t++)
        if (types[t] && (r[n++] = compile_type(j, s, t)) < 0) return -1;
    return n ? any_of(j, r, n) : named(j, "json-value");
}

static int compile(ft_json_rules *j, json_t *s) {
    if (j->failed) return -1;
    if (++j->depth > MAX_DEPTH) {
        j->depth--;
        return fail(j, "schemas nested deeper than %d", MAX_DEPTH);
    }
    int r = compile_body(j, s);
    j->depth--;
    return r;
}

// ---------------------------------------------------------------------------------------------
// Interface

ft_json_rules *ft_json_rules_init(ft_gb *b, bool lenient) {
    ft_json_rules *j = ft_calloc(1, sizeof(*j));
    j->b = b;
    j->lenient = lenient;
    ft_err err = {{0}};
    j->base_ok = ft_gb_gbnf(b, k_json_gbnf, sizeof(k_json_gbnf) - 1, &err);
    snprintf(j->base_err, sizeof(j->base_err), "%s", err.msg);
    return j;
}

void ft_json_rules_free(ft_json_rules *j) {
    if (!j) return;
    for (int i = 0; i < j->n_refs; i++) free(j->refs[i].ptr);
    free(j->refs);
    free(j);
}

int ft_json_rules_ws(ft_json_rules *j) { return named(j, "json-ws"); }
int ft_json_rules_any_object(ft_json_rules *j) { return named(j, "json-object"); }

int ft_json_rules_schema(ft_json_rules *j, json_t *schema, ft_err *err) {
    if (!j->base_ok) return ft_err_set(err, "json rules: %s", j->base_err), -1;
    // $ref resolves in this document: references of an earlier one mean something else
    for (int i = 0; i < j->n_refs; i++) free(j->refs[i].ptr);
    j->n_refs = 0;
    j->root = schema;
    j->err = err;
    j->failed = false;
    j->depth = 0;
    snprintf(j->path, sizeof(j->path), "#");
    j->path_len = 1;
    int r = compile(j, schema);
    j->root = NULL;
    j->err = NULL;
    return r;
}

ft_grammar *ft_json_schema_grammar(json_t *schema, bool lenient, ft_err *err) {
    ft_gb *b = ft_gb_init();
    ft_json_rules *j = ft_json_rules_init(b, lenient);
    ft_grammar *g = NULL;
    int v = schema ? ft_json_rules_schema(j, schema, err) : ft_json_rules_any_object(j);
    if (v >= 0) {
        int ws = ft_json_rules_ws(j), root = ft_gb_rule(b, "root");
        ft_gsym q[3] = {ft_gb_ref(ws), ft_gb_ref(v), ft_gb_ref(ws)};
        ft_gb_alt(b, root, q, 3);
        g = ft_gb_finish(b, root, err);
    }
    ft_json_rules_free(j);
    ft_gb_free(b);
    return g;
}
