// json_check.c: see json_check.h.
#include "json_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool check(json_t *root, json_t *s, json_t *v, int depth);

// "#/a/b" (with ~0 ~1) inside root, or NULL.
static json_t *pointer(json_t *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    json_t *at = root;
    for (const char *p = ref + 1; *p == '/';) {
        char seg[256];
        size_t n = 0;
        for (p++; *p && *p != '/' && n + 1 < sizeof(seg); p++) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
                seg[n++] = p[1] == '0' ? '~' : '/';
                p++;
            } else {
                seg[n++] = *p;
            }
        }
        seg[n] = 0;
        at = json_is_array(at) ? json_array_get(at, (size_t)atoi(seg)) : json_object_get(at, seg);
        if (!at) return NULL;
    }
    return at;
}

static bool is_integer(json_t *v) {
    return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
}

static bool has_type(json_t *v, const char *t) {
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer")) return json_is_number(v) && is_integer(v);
    return false;
}

// JSON's equality: numbers by value (1 equals 1.0), the rest structurally.
static bool equal(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!equal(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *x;
        json_object_foreach(a, k, x) {
            json_t *y = json_object_get(b, k);
            if (!y || !equal(x, y)) return false;
        }
        return true;
    }
    return json_equal(a, b);
}

static size_t code_points(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static bool digits(const char *s, int n) {
    for (int i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

static int num(const char *s, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) v = v * 10 + (s[i] - '0');
    return v;
}

// RFC 3339 full-date: YYYY-MM-DD, a day that month has (February 29 in leap years only).
static bool is_date(const char *s, size_t n) {
    if (n != 10 || !digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' || !digits(s + 8, 2)) return false;
    int y = num(s, 4), m = num(s + 5, 2), d = num(s + 8, 2);
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return false;
    bool leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    return d <= days[m - 1] + (m == 2 && leap);
}

// RFC 3339 full-time: HH:MM:SS[.frac](Z|+HH:MM|-HH:MM), seconds up to 60 (a leap second).
static bool is_time(const char *s, size_t n) {
    if (n < 9 || !digits(s, 2) || s[2] != ':' || !digits(s + 3, 2) || s[5] != ':' || !digits(s + 6, 2)) return false;
    if (num(s, 2) > 23 || num(s + 3, 2) > 59 || num(s + 6, 2) > 60) return false;
    size_t i = 8;
    if (i < n && s[i] == '.') {
        size_t k = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == k) return false;
    }
    if (i < n && (s[i] == 'Z' || s[i] == 'z')) return i + 1 == n;
    if (i + 6 != n || (s[i] != '+' && s[i] != '-') || !digits(s + i + 1, 2) || s[i + 3] != ':' ||
        !digits(s + i + 4, 2))
        return false;
    return num(s + i + 1, 2) <= 23 && num(s + i + 4, 2) <= 59;
}

static bool is_uuid(const char *s, size_t n) {
    if (n != 36) return false;
    for (size_t i = 0; i < n; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        char c = s[i];
        if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    }
    return true;
}

static bool check_string(json_t *s, json_t *v) {
    const char *p = json_string_value(v);
    size_t n = json_string_length(v), len = code_points(p, n);
    json_t *x;
    if ((x = json_object_get(s, "minLength")) && len < (size_t)json_integer_value(x)) return false;
    if ((x = json_object_get(s, "maxLength")) && len > (size_t)json_integer_value(x)) return false;
    if ((x = json_object_get(s, "format"))) {
        const char *f = json_string_value(x);
        if (!strcmp(f, "date")) return is_date(p, n);
        if (!strcmp(f, "time")) return is_time(p, n);
        if (!strcmp(f, "uuid")) return is_uuid(p, n);
        if (!strcmp(f, "date-time")) {
            const char *t = memchr(p, 'T', n);
            if (!t) t = memchr(p, 't', n);
            return t && is_date(p, (size_t)(t - p)) && is_time(t + 1, n - (size_t)(t - p) - 1);
        }
        return false; // not in the subset
    }
    return true;
}

static bool check_number(json_t *s, json_t *v) {
    double d = json_number_value(v);
    json_t *x;
    if ((x = json_object_get(s, "minimum")) && !(d >= json_number_value(x))) return false;
    if ((x = json_object_get(s, "maximum")) && !(d <= json_number_value(x))) return false;
    if ((x = json_object_get(s, "exclusiveMinimum")) && !(d > json_number_value(x))) return false;
    if ((x = json_object_get(s, "exclusiveMaximum")) && !(d < json_number_value(x))) return false;
    return true;
}

static bool check_object(json_t *root, json_t *s, json_t *v, int depth) {
    json_t *props = json_object_get(s, "properties"), *add = json_object_get(s, "additionalProperties");
    json_t *req = json_object_get(s, "required"), *x;
    const char *k;
    size_t i;
    json_array_foreach(req, i, x) if (!json_object_get(v, json_string_value(x))) return false;
    json_object_foreach(v, k, x) {
        json_t *ps = json_object_get(props, k);
        if (ps) {
            if (!check(root, ps, x, depth + 1)) return false;
        } else if (add && !check(root, add, x, depth + 1)) {
            return false;
        }
    }
    return true;
}

static bool check_array(json_t *root, json_t *s, json_t *v, int depth) {
    json_t *items = json_object_get(s, "items"), *x;
    size_t n = json_array_size(v), i;
    if ((x = json_object_get(s, "minItems")) && n < (size_t)json_integer_value(x)) return false;
    if ((x = json_object_get(s, "maxItems")) && n > (size_t)json_integer_value(x)) return false;
    if (items) json_array_foreach(v, i, x) if (!check(root, items, x, depth + 1)) return false;
    return true;
}

static bool check(json_t *root, json_t *s, json_t *v, int depth) {
    if (depth > 200) return false;
    if (json_is_boolean(s)) return json_is_true(s);
    if (!json_is_object(s)) return false;
    json_t *x;
    size_t i;
    json_t *y;
    if ((x = json_object_get(s, "$ref"))) {
        json_t *t = pointer(root, json_string_value(x));
        if (!t || !check(root, t, v, depth + 1)) return false;
    }
    if ((x = json_object_get(s, "type"))) {
        bool ok = false;
        if (json_is_string(x)) ok = has_type(v, json_string_value(x));
        json_array_foreach(x, i, y) ok |= has_type(v, json_string_value(y));
        if (!ok) return false;
    }
    if ((x = json_object_get(s, "const")) && !equal(x, v)) return false;
    if ((x = json_object_get(s, "enum"))) {
        bool ok = false;
        json_array_foreach(x, i, y) ok |= equal(y, v);
        if (!ok) return false;
    }
    if ((x = json_object_get(s, "allOf"))) json_array_foreach(x, i, y) if (!check(root, y, v, depth + 1)) return false;
    if ((x = json_object_get(s, "anyOf"))) {
        bool ok = false;
        json_array_foreach(x, i, y) ok = ok || check(root, y, v, depth + 1);
        if (!ok) return false;
    }
    if ((x = json_object_get(s, "oneOf"))) {
        int n = 0;
        json_array_foreach(x, i, y) n += check(root, y, v, depth + 1);
        if (n != 1) return false;
    }
    if (json_is_string(v) && !check_string(s, v)) return false;
    if (json_is_number(v) && !check_number(s, v)) return false;
    if (json_is_object(v) && !check_object(root, s, v, depth)) return false;
    if (json_is_array(v) && !check_array(root, s, v, depth)) return false;
    return true;
}

bool json_check(json_t *root, json_t *schema, json_t *v) { return check(root, schema, v, 0); }
