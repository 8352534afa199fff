// gguf_format.c: key/values and names printed for humans (ft inspect, error messages).
//
// Strings are quoted, escaped and cut short; arrays show their length, element type and first
// few elements: [151936 strings: "!", "\"", "#", ...]. Floats print in the fewest digits that
// read back to the same value.
#include "gguf_impl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define SCALAR_STR_BYTES 80 // a string value is cut after this many bytes
#define ELEM_STR_BYTES 32   // a string element of an array, likewise
#define MAX_ELEMS 8         // array elements shown at most
#define ARRAY_BUDGET 100    // no further array element once the text is this long

size_t gguf_escape(char *buf, size_t size, const char *s, uint64_t len, uint64_t max_bytes) {
    if (size == 0) return 0;
    uint64_t cut = len;
    bool truncated = len > max_bytes;
    if (truncated) {
        cut = max_bytes;
        // Step back over UTF-8 continuation bytes so a character is not split.
        for (int k = 0; k < 3 && cut > 0 && ((uint8_t)s[cut] & 0xC0) == 0x80; k++)
            cut--;
    }
    size_t n = 0;
    for (uint64_t i = 0; i < cut; i++) {
        uint8_t ch = (uint8_t)s[i];
        char esc[8];
        switch (ch) {
        case '"': strcpy(esc, "\\\""); break;
        case '\\': strcpy(esc, "\\\\"); break;
        case '\n': strcpy(esc, "\\n"); break;
        case '\r': strcpy(esc, "\\r"); break;
        case '\t': strcpy(esc, "\\t"); break;
        default:
            if (ch < 0x20 || ch == 0x7f) {
                snprintf(esc, sizeof(esc), "\\x%02x", ch);
            } else {
                esc[0] = (char)ch;
                esc[1] = 0;
            }
        }
        size_t e = strlen(esc);
        if (n + e >= size) { // out of room: never split an escape
            truncated = true;
            break;
        }
        memcpy(buf + n, esc, e);
        n += e;
    }
    if (truncated && n + 3 < size) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = 0;
    return n;
}

// ---------------------------------------------------------------------------------------------
// An appender into a fixed buffer that cuts silently when full.

typedef struct out {
    char *buf;
    size_t size;
    size_t len;
} out;

__attribute__((format(printf, 2, 3))) static void put(out *o, const char *fmt, ...) {
    if (o->len + 1 >= o->size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->size - o->len, fmt, ap);
    va_end(ap);
    if (n > 0) o->len = FT_MIN(o->len + (size_t)n, o->size - 1);
}

static void put_str(out *o, gguf_str s, uint64_t max_bytes) {
    put(o, "\"");
    if (o->len + 1 < o->size)
        o->len += gguf_escape(o->buf + o->len, o->size - o->len, s.ptr, s.len, max_bytes);
    put(o, "\"");
}

static void put_float(out *o, double v, bool is_f32) {
    char tmp[40] = "";
    if (v > -1e15 && v < 1e15 && v == (double)(int64_t)v) { // 1000000, not 1e+06
        put(o, "%.0f", v);
        return;
    }
    int lo = is_f32 ? 6 : 15, hi = is_f32 ? 9 : 17;
    for (int prec = lo; prec <= hi; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        double back = strtod(tmp, NULL);
        if (is_f32 ? (float)back == (float)v : back == v) break;
    }
    put(o, "%s", tmp);
}

// One fixed-size element of type t at p.
static void put_number(out *o, enum gguf_value_type t, const uint8_t *p) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } v;
    memcpy(&v, p, gguf_value_size(t));
    switch (t) {
    case GGUF_VALUE_TYPE_UINT8: put(o, "%" PRIu8, v.u8); break;
    case GGUF_VALUE_TYPE_INT8: put(o, "%" PRId8, v.i8); break;
    case GGUF_VALUE_TYPE_UINT16: put(o, "%" PRIu16, v.u16); break;
    case GGUF_VALUE_TYPE_INT16: put(o, "%" PRId16, v.i16); break;
    case GGUF_VALUE_TYPE_UINT32: put(o, "%" PRIu32, v.u32); break;
    case GGUF_VALUE_TYPE_INT32: put(o, "%" PRId32, v.i32); break;
    case GGUF_VALUE_TYPE_UINT64: put(o, "%" PRIu64, v.u64); break;
    case GGUF_VALUE_TYPE_INT64: put(o, "%" PRId64, v.i64); break;
    case GGUF_VALUE_TYPE_FLOAT32: put_float(o, v.f32, true); break;
    case GGUF_VALUE_TYPE_FLOAT64: put_float(o, v.f64, false); break;
    case GGUF_VALUE_TYPE_BOOL: put(o, "%s", v.u8 ? "true" : "false"); break;
    default: put(o, "?"); break;
    }
}

static void put_array(out *o, const gguf_kv *kv) {
    bool strings = kv->elem_type == GGUF_VALUE_TYPE_STRING;
    put(o, "[%" PRIu64 " %s", kv->count, strings ? "strings" : gguf_value_type_name(kv->elem_type));
    uint64_t shown = 0;
    for (; shown < kv->count && shown < MAX_ELEMS; shown++) {
        if (shown > 0 && o->len >= ARRAY_BUDGET) break;
        put(o, shown == 0 ? ": " : ", ");
        if (strings)
            put_str(o, gguf_str_at(kv->value + kv->str_offs[shown]), ELEM_STR_BYTES);
        else
            put_number(o, kv->elem_type, kv->value + shown * gguf_value_size(kv->elem_type));
    }
    if (shown < kv->count) put(o, ", ...");
    put(o, "]");
}

void gguf_kv_format(const gguf_file *f, int64_t i, char *buf, size_t size) {
    FT_ASSERT(i >= 0 && i < f->n_kv);
    if (size == 0) return;
    const gguf_kv *kv = &f->kv[i];
    out o = {buf, size, 0};
    buf[0] = 0;
    if (kv->type == GGUF_VALUE_TYPE_ARRAY)
        put_array(&o, kv);
    else if (kv->type == GGUF_VALUE_TYPE_STRING)
        put_str(&o, gguf_str_at(kv->value), SCALAR_STR_BYTES);
    else
        put_number(&o, kv->type, kv->value);
}
