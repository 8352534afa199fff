// gguf_access.c: the accessors of an opened file.
//
// gguf_open validated everything, so these are plain lookups: index arithmetic, a hash probe,
// an unaligned load. A bad index or a wrong-kind array access is a programmer error (FT_ASSERT);
// nothing here depends on the file being well-formed beyond what gguf_open checked.
#include "gguf_impl.h"

size_t gguf_value_size(enum gguf_value_type t) {
    switch (t) {
    case GGUF_VALUE_TYPE_UINT8:
    case GGUF_VALUE_TYPE_INT8:
    case GGUF_VALUE_TYPE_BOOL: return 1;
    case GGUF_VALUE_TYPE_UINT16:
    case GGUF_VALUE_TYPE_INT16: return 2;
    case GGUF_VALUE_TYPE_UINT32:
    case GGUF_VALUE_TYPE_INT32:
    case GGUF_VALUE_TYPE_FLOAT32: return 4;
    case GGUF_VALUE_TYPE_UINT64:
    case GGUF_VALUE_TYPE_INT64:
    case GGUF_VALUE_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

const char *gguf_value_type_name(enum gguf_value_type t) {
    static const char *const names[GGUF_VALUE_TYPE_COUNT] = {
        "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
        "bool",  "string", "array",  "uint64", "int64",  "float64",
    };
    return (unsigned)t < GGUF_VALUE_TYPE_COUNT ? names[t] : "unknown";
}

bool gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

// ---------------------------------------------------------------------------------------------
// File

uint32_t gguf_version(const gguf_file *f) {
    return f->version;
}
uint32_t gguf_alignment(const gguf_file *f) {
    return f->alignment;
}
uint64_t gguf_data_offset(const gguf_file *f) {
    return f->data_offset;
}
uint64_t gguf_file_size(const gguf_file *f) {
    return f->size;
}
const void *gguf_file_base(const gguf_file *f) {
    return f->base;
}
bool gguf_is_mapped(const gguf_file *f) {
    return f->mapped;
}
int gguf_fd(const gguf_file *f) {
    return f->fd;
}

// ---------------------------------------------------------------------------------------------
// Key/values

int64_t gguf_n_kv(const gguf_file *f) {
    return f->n_kv;
}

static const gguf_kv *kv_at(const gguf_file *f, int64_t i) {
    FT_ASSERT(i >= 0 && i < f->n_kv);
    return &f->kv[i];
}

gguf_str gguf_kv_key(const gguf_file *f, int64_t i) {
    return kv_at(f, i)->key;
}
enum gguf_value_type gguf_kv_type(const gguf_file *f, int64_t i) {
    return kv_at(f, i)->type;
}

int64_t gguf_find_key(const gguf_file *f, const char *key) {
    return gguf_index_find(&f->kv_index, key, strlen(key));
}

static const gguf_kv *find_kv(const gguf_file *f, const char *key) {
    int64_t i = gguf_find_key(f, key);
    return i < 0 ? NULL : &f->kv[i];
}

// An integer of any width and signedness, as read.
typedef struct gguf_int {
    bool is_signed;
    int64_t s;
    uint64_t u;
} gguf_int;

static bool load_int(enum gguf_value_type t, const uint8_t *p, gguf_int *v) {
    *v = (gguf_int){0};
    switch (t) {
    case GGUF_VALUE_TYPE_UINT8: v->u = p[0]; return true;
    case GGUF_VALUE_TYPE_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        v->u = x;
        return true;
    }
    case GGUF_VALUE_TYPE_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        v->u = x;
        return true;
    }
    case GGUF_VALUE_TYPE_UINT64: memcpy(&v->u, p, 8); return true;
    default: break;
    }
    v->is_signed = true;
    switch (t) {
    case GGUF_VALUE_TYPE_INT8: v->s = (int8_t)p[0]; return true;
    case GGUF_VALUE_TYPE_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        v->s = x;
        return true;
    }
    case GGUF_VALUE_TYPE_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        v->s = x;
        return true;
    }
    case GGUF_VALUE_TYPE_INT64: memcpy(&v->s, p, 8); return true;
    default: return false;
    }
}

static bool load_float(enum gguf_value_type t, const uint8_t *p, double *out) {
    if (t == GGUF_VALUE_TYPE_FLOAT32) {
        float x;
        memcpy(&x, p, sizeof(x));
        *out = x;
        return true;
    }
    if (t == GGUF_VALUE_TYPE_FLOAT64) {
        memcpy(out, p, sizeof(*out));
        return true;
    }
    return false;
}

bool gguf_get_int(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = find_kv(f, key);
    gguf_int v;
    if (!kv || !load_int(kv->type, kv->value, &v)) return false;
    if (v.is_signed) {
        *out = v.s;
        return true;
    }
    if (v.u > INT64_MAX) return false;
    *out = (int64_t)v.u;
    return true;
}

bool gguf_get_uint(const gguf_file *f, const char *key, uint64_t *out) {
    const gguf_kv *kv = find_kv(f, key);
    gguf_int v;
    if (!kv || !load_int(kv->type, kv->value, &v)) return false;
    if (!v.is_signed) {
        *out = v.u;
        return true;
    }
    if (v.s < 0) return false;
    *out = (uint64_t)v.s;
    return true;
}

bool gguf_get_float(const gguf_file *f, const char *key, double *out) {
    const gguf_kv *kv = find_kv(f, key);
    return kv && load_float(kv->type, kv->value, out);
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = find_kv(f, key);
    if (!kv || kv->type != GGUF_VALUE_TYPE_BOOL) return false;
    *out = kv->value[0] != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = find_kv(f, key);
    if (!kv || kv->type != GGUF_VALUE_TYPE_STRING) return false;
    *out = gguf_str_at(kv->value);
    return true;
}

// ---------------------------------------------------------------------------------------------
// Arrays

bool gguf_get_arr(const gguf_file *f, const char *key, enum gguf_value_type *elem_type, uint64_t *count) {
    const gguf_kv *kv = find_kv(f, key);
    if (!kv || kv->type != GGUF_VALUE_TYPE_ARRAY) return false;
    *elem_type = kv->elem_type;
    *count = kv->count;
    return true;
}

// Element i of array key; the caller must have checked that it exists (programmer error).
static const gguf_kv *arr_kv(const gguf_file *f, const char *key, uint64_t i) {
    const gguf_kv *kv = find_kv(f, key);
    FT_ASSERT(kv && kv->type == GGUF_VALUE_TYPE_ARRAY);
    FT_ASSERT(i < kv->count);
    return kv;
}

// A uint64 element above INT64_MAX comes back wrapped, as its bits read as int64.
int64_t gguf_arr_int(const gguf_file *f, const char *key, uint64_t i) {
    const gguf_kv *kv = arr_kv(f, key, i);
    gguf_int v;
    bool ok = load_int(kv->elem_type, kv->value + i * gguf_value_size(kv->elem_type), &v);
    FT_ASSERT(ok); // not an integer array
    return v.is_signed ? v.s : (int64_t)v.u;
}

double gguf_arr_float(const gguf_file *f, const char *key, uint64_t i) {
    const gguf_kv *kv = arr_kv(f, key, i);
    double v;
    bool ok = load_float(kv->elem_type, kv->value + i * gguf_value_size(kv->elem_type), &v);
    FT_ASSERT(ok); // not a float array
    return v;
}

gguf_str gguf_arr_str(const gguf_file *f, const char *key, uint64_t i) {
    const gguf_kv *kv = arr_kv(f, key, i);
    FT_ASSERT(kv->elem_type == GGUF_VALUE_TYPE_STRING);
    return gguf_str_at(kv->value + kv->str_offs[i]);
}

const void *gguf_arr_data(const gguf_file *f, const char *key) {
    const gguf_kv *kv = find_kv(f, key);
    if (!kv || kv->type != GGUF_VALUE_TYPE_ARRAY || kv->elem_type == GGUF_VALUE_TYPE_STRING) return NULL;
    return kv->value;
}

// ---------------------------------------------------------------------------------------------
// Tensors

int64_t gguf_n_tensors(const gguf_file *f) {
    return f->n_tensors;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i) {
    FT_ASSERT(i >= 0 && i < f->n_tensors);
    return &f->tensors[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i = gguf_index_find(&f->tensor_index, name, strlen(name));
    return i < 0 ? NULL : &f->tensors[i];
}
