// gguf_read.c: opening a GGUF file and validating every field before anything reads it.
//
// The file is untrusted. One pass walks it with a bounds-checked cursor, in the order of the
// format: header, key/values, general.alignment, tensor infos; then the tensors' data is
// placed (aligned, inside the file) and checked for overlaps. The first problem found is
// reported as "what, where" (byte offset, key or tensor name) and the open fails. Every count
// is checked against the bytes left before anything is allocated for it, so the memory used is
// bounded by a small multiple of the file size.
#include "gguf_impl.h"
#include "../util/mapping.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES 24     // magic, version, n_tensors, n_kv
#define MIN_KV_BYTES 14     // key length (8) + a 1-byte key + value type (4) + a 1-byte value
#define MIN_TENSOR_BYTES 32 // name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8)
#define NAME_CHARS 64       // how much of a key or tensor name an error message shows

// ---------------------------------------------------------------------------------------------
// Bounds-checked reading

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    ft_err *err;
} cursor;

static uint64_t bytes_left(const cursor *c) {
    return c->size - c->pos;
}

static bool need(cursor *c, uint64_t n, const char *what) {
    if (n <= bytes_left(c)) return true;
    return ft_err_set(c->err,
                      "unexpected end of file at offset %" PRIu64 " reading %s (%" PRIu64
                      " bytes needed, %" PRIu64 " left)",
                      c->pos, what, n, bytes_left(c));
}

static bool read_u32(cursor *c, uint32_t *v, const char *what) {
    if (!need(c, sizeof(*v), what)) return false;
    memcpy(v, c->base + c->pos, sizeof(*v));
    c->pos += sizeof(*v);
    return true;
}

static bool read_u64(cursor *c, uint64_t *v, const char *what) {
    if (!need(c, sizeof(*v), what)) return false;
    memcpy(v, c->base + c->pos, sizeof(*v));
    c->pos += sizeof(*v);
    return true;
}

// A string: uint64 length, then that many bytes (what names it in messages: "key", ...).
static bool read_str(cursor *c, gguf_str *s, const char *what) {
    char field[64];
    snprintf(field, sizeof(field), "the %s length", what);
    uint64_t at = c->pos;
    if (!read_u64(c, &s->len, field)) return false;
    if (s->len > bytes_left(c))
        return ft_err_set(
            c->err, "%s length %" PRIu64 " at offset %" PRIu64 " exceeds the remaining %" PRIu64 " bytes",
            what, s->len, at, bytes_left(c));
    s->ptr = (const char *)c->base + c->pos;
    c->pos += s->len;
    return true;
}

// A name from the file, made safe to print.
static const char *printable(char *buf, size_t size, gguf_str s) {
    gguf_escape(buf, size, s.ptr, s.len, NAME_CHARS);
    return buf;
}

// ---------------------------------------------------------------------------------------------
// Header

static bool check_version(cursor *c, uint32_t v) {
    if (v == 2 || v == 3) return true;
    if (v == 1)
        return ft_err_set(c->err, "GGUF version 1 at offset 4 is not supported (it used 32-bit counts; "
                                  "ft reads versions 2 and 3)");
    uint32_t swapped = __builtin_bswap32(v);
    if (swapped >= 1 && swapped <= 3)
        return ft_err_set(c->err,
                          "GGUF version %" PRIu32 " at offset 4 looks like version %" PRIu32
                          " of a big-endian file, which ft does not read",
                          v, swapped);
    return ft_err_set(c->err,
                      "unsupported GGUF version %" PRIu32 " at offset 4 (ft reads versions 2 "
                      "and 3)",
                      v);
}

// A count can't exceed what the bytes after the header could hold at the smallest encoding.
static bool check_count(cursor *c, const char *what, uint64_t at, uint64_t n, uint64_t min_bytes) {
    if (n <= bytes_left(c) / min_bytes) return true;
    return ft_err_set(c->err,
                      "%s %" PRIu64 " at offset %" PRIu64 " is more than the remaining %" PRIu64
                      " bytes could hold",
                      what, n, at, bytes_left(c));
}

static bool parse_header(gguf_file *f, cursor *c, uint64_t *n_tensors, uint64_t *n_kv) {
    if (!need(c, 4, "the magic")) return false;
    if (memcmp(c->base, GGUF_MAGIC, 4) != 0) {
        char magic[32];
        gguf_escape(magic, sizeof(magic), (const char *)c->base, 4, 4);
        return ft_err_set(c->err, "bad magic '%s' at offset 0 (expected 'GGUF'): not a GGUF file", magic);
    }
    c->pos = 4;
    if (!read_u32(c, &f->version, "the version") || !check_version(c, f->version)) return false;
    if (!read_u64(c, n_tensors, "n_tensors") || !read_u64(c, n_kv, "n_kv")) return false;
    if (!check_count(c, "n_tensors", 8, *n_tensors, MIN_TENSOR_BYTES) ||
        !check_count(c, "n_kv", 16, *n_kv, MIN_KV_BYTES))
        return false;
    // Both fit alone, so neither product overflows.
    if (*n_tensors * MIN_TENSOR_BYTES + *n_kv * MIN_KV_BYTES > bytes_left(c))
        return ft_err_set(c->err,
                          "n_tensors %" PRIu64 " and n_kv %" PRIu64
                          " together are more than the remaining %" PRIu64 " bytes could hold",
                          *n_tensors, *n_kv, bytes_left(c));
    return true;
}

// ---------------------------------------------------------------------------------------------
// Key/values

// count elements of type t (never ARRAY); the caller has bounded count by the bytes left. An
// array of strings records each element's offset from the first one in str_offs[count].
static bool parse_elems(cursor *c, enum gguf_value_type t, uint64_t count, uint64_t *str_offs) {
    if (t == GGUF_VALUE_TYPE_STRING) {
        uint64_t start = c->pos;
        for (uint64_t i = 0; i < count; i++) {
            if (str_offs) str_offs[i] = c->pos - start;
            gguf_str s;
            if (!read_str(c, &s, "string")) {
                if (str_offs) ft_err_prefix(c->err, "element %" PRIu64, i);
                return false;
            }
        }
        return true;
    }
    uint64_t bytes = count * gguf_value_size(t);
    if (!need(c, bytes, "the value")) return false;
    if (t == GGUF_VALUE_TYPE_BOOL) {
        for (uint64_t i = 0; i < count; i++) {
            uint8_t b = c->base[c->pos + i];
            if (b > 1)
                return ft_err_set(c->err, "bool value %u at offset %" PRIu64 " (must be 0 or 1)", b,
                                  c->pos + i);
        }
    }
    c->pos += bytes;
    return true;
}

static bool parse_array(cursor *c, gguf_kv *kv) {
    uint64_t at = c->pos;
    uint32_t et;
    if (!read_u32(c, &et, "the array element type")) return false;
    if (et == GGUF_VALUE_TYPE_ARRAY)
        return ft_err_set(c->err, "array of arrays at offset %" PRIu64 " (not supported)", at);
    if (et >= GGUF_VALUE_TYPE_COUNT)
        return ft_err_set(c->err, "unknown array element type %" PRIu32 " at offset %" PRIu64, et, at);
    kv->elem_type = (enum gguf_value_type)et;
    at = c->pos;
    if (!read_u64(c, &kv->count, "the array length")) return false;
    bool strings = kv->elem_type == GGUF_VALUE_TYPE_STRING;
    // A string takes at least its 8-byte length.
    size_t min_bytes = strings ? sizeof(uint64_t) : gguf_value_size(kv->elem_type);
    if (!check_count(c, "array length", at, kv->count, min_bytes)) return false;
    kv->value = c->base + c->pos;
    if (strings) kv->str_offs = ft_malloc(kv->count * sizeof(*kv->str_offs));
    return parse_elems(c, kv->elem_type, kv->count, kv->str_offs);
}

static bool parse_value(cursor *c, gguf_kv *kv) {
    uint64_t start = c->pos;
    uint32_t type;
    if (!read_u32(c, &type, "the value type")) return false;
    if (type >= GGUF_VALUE_TYPE_COUNT)
        return ft_err_set(c->err, "unknown value type %" PRIu32 " at offset %" PRIu64, type, start);
    kv->type = kv->elem_type = (enum gguf_value_type)type;
    kv->count = 1;
    bool ok;
    if (kv->type == GGUF_VALUE_TYPE_ARRAY) {
        ok = parse_array(c, kv);
    } else {
        kv->value = c->base + c->pos;
        ok = parse_elems(c, kv->type, 1, NULL);
    }
    kv->raw = c->base + start;
    kv->raw_len = c->pos - start;
    return ok;
}

static gguf_str kv_name(const void *owner, int64_t i) {
    return ((const gguf_kv *)owner)[i].key;
}

static bool parse_kvs(gguf_file *f, cursor *c, uint64_t n_kv) {
    f->kv = ft_calloc(n_kv, sizeof(*f->kv)); // n_kv was bounded by the file size
    gguf_index_init(&f->kv_index, kv_name, f->kv, (int64_t)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        kv->offset = c->pos;
        if (!read_str(c, &kv->key, "key"))
            return ft_err_prefix(c->err, "key %" PRIu64 " of %" PRIu64, i, n_kv);
        f->n_kv = (int64_t)i + 1; // from here on gguf_close frees what kv holds
        char name[NAME_CHARS * 4 + 8];
        printable(name, sizeof(name), kv->key);
        if (kv->key.len == 0)
            return ft_err_set(c->err, "key %" PRIu64 " at offset %" PRIu64 ": empty key", i, kv->offset);
        int64_t first = gguf_index_add(&f->kv_index, (int64_t)i);
        if (first >= 0)
            return ft_err_set(c->err,
                              "key '%s' at offset %" PRIu64 ": duplicate key (first at offset %" PRIu64 ")",
                              name, kv->offset, f->kv[first].offset);
        if (!parse_value(c, kv))
            return ft_err_prefix(c->err, "key '%s' at offset %" PRIu64, name, kv->offset);
    }
    return true;
}

static bool read_alignment(gguf_file *f, ft_err *err) {
    static const char key[] = "general.alignment";
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_index_find(&f->kv_index, key, sizeof(key) - 1);
    if (i < 0) return true;
    const gguf_kv *kv = &f->kv[i];
    if (kv->type != GGUF_VALUE_TYPE_UINT32)
        return ft_err_set(err, "key '%s' at offset %" PRIu64 ": must be of type uint32, not %s", key,
                          kv->offset, gguf_value_type_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->value, sizeof(a));
    if (a == 0 || (a & (a - 1)) != 0)
        return ft_err_set(err, "key '%s' at offset %" PRIu64 ": %" PRIu32 " is not a power of two", key,
                          kv->offset, a);
    f->alignment = a;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Tensor infos

static bool parse_shape(cursor *c, gguf_tensor *t) {
    uint64_t at = c->pos;
    if (!read_u32(c, &t->n_dims, "n_dims")) return false;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return ft_err_set(c->err, "n_dims %" PRIu32 " at offset %" PRIu64 " is out of range 1..%d", t->n_dims,
                          at, GGUF_MAX_DIMS);
    t->n_elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        at = c->pos;
        if (!read_u64(c, &v, "a dimension")) return false;
        if (v == 0) return ft_err_set(c->err, "dimension %" PRIu32 " at offset %" PRIu64 " is 0", d, at);
        if (v > INT64_MAX)
            return ft_err_set(
                c->err, "dimension %" PRIu32 " at offset %" PRIu64 " is %" PRIu64 ", more than INT64_MAX", d,
                at, v);
        t->ne[d] = (int64_t)v;
        if (__builtin_mul_overflow(t->n_elems, t->ne[d], &t->n_elems))
            return ft_err_set(
                c->err, "element count overflows int64 at dimension %" PRIu32 " (offset %" PRIu64 ")", d, at);
    }
    return true;
}

static bool parse_type(cursor *c, gguf_tensor *t) {
    uint64_t at = c->pos;
    uint32_t id;
    if (!read_u32(c, &id, "the type")) return false;
    const ft_type_traits *tr = ft_type_traits_find(id);
    if (!tr)
        return ft_err_set(c->err, "unknown type id %" PRIu32 " at offset %" PRIu64 " (%s)", id, at,
                          id < FT_TYPE_COUNT ? "an id removed from GGUF" : "not a GGUF type");
    t->type = (enum ft_type)id;
    if (t->ne[0] % tr->block_elems != 0)
        return ft_err_set(c->err, "row length %" PRId64 " is not a multiple of %s's block size %d", t->ne[0],
                          tr->name, tr->block_elems);
    // n_elems is a whole number of rows, so a whole number of blocks.
    uint64_t blocks = (uint64_t)t->n_elems / (uint64_t)tr->block_elems;
    if (!ft_mul_u64(blocks, (uint64_t)tr->block_bytes, &t->bytes))
        return ft_err_set(c->err, "size in bytes overflows (%" PRId64 " elements of %s)", t->n_elems,
                          tr->name);
    return true;
}

static bool parse_tensor_info(gguf_file *f, cursor *c, gguf_tensor *t) {
    if (!parse_shape(c, t) || !parse_type(c, t)) return false;
    uint64_t at = c->pos;
    if (!read_u64(c, &t->offset, "the data offset")) return false;
    if (t->offset % f->alignment != 0)
        return ft_err_set(c->err,
                          "data offset %" PRIu64 " at offset %" PRIu64
                          " is not a multiple of the alignment %" PRIu32,
                          t->offset, at, f->alignment);
    return true;
}

static gguf_str tensor_name(const void *owner, int64_t i) {
    return ((const gguf_tensor *)owner)[i].name;
}

static bool parse_tensor_infos(gguf_file *f, cursor *c, uint64_t n) {
    f->tensors = ft_calloc(n, sizeof(*f->tensors)); // n was bounded by the file size
    gguf_index_init(&f->tensor_index, tensor_name, f->tensors, (int64_t)n);
    for (uint64_t i = 0; i < n; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t at = c->pos;
        if (!read_str(c, &t->name, "tensor name"))
            return ft_err_prefix(c->err, "tensor %" PRIu64 " of %" PRIu64, i, n);
        f->n_tensors = (int64_t)i + 1;
        char name[NAME_CHARS * 4 + 8];
        printable(name, sizeof(name), t->name);
        int64_t first = gguf_index_add(&f->tensor_index, (int64_t)i);
        if (first >= 0)
            return ft_err_set(c->err,
                              "tensor '%s' at offset %" PRIu64 ": duplicate tensor name (tensors %" PRId64
                              " and %" PRIu64 ")",
                              name, at, first, i);
        if (!parse_tensor_info(f, c, t))
            return ft_err_prefix(c->err, "tensor '%s' at offset %" PRIu64, name, at);
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Data placement

// The data section starts at the first aligned offset after the header (llama.cpp pads only
// when there are tensors); each tensor must lie inside the file.
static bool place_data(gguf_file *f, uint64_t header_end, ft_err *err) {
    f->data_offset = header_end;
    if (f->n_tensors == 0) return true;
    f->data_offset += (f->alignment - header_end % f->alignment) % f->alignment;
    if (f->data_offset > f->size)
        return ft_err_set(
            err, "the data section starts at offset %" PRIu64 ", past the end of the file (size %" PRIu64 ")",
            f->data_offset, f->size);
    uint64_t avail = f->size - f->data_offset;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > avail || t->bytes > avail - t->offset) {
            char name[NAME_CHARS * 4 + 8];
            uint64_t abs;
            bool in_range = ft_add_u64(f->data_offset, t->offset, &abs);
            return ft_err_set(err,
                              "tensor '%s': data [offset %" PRIu64 "%s, %" PRIu64
                              " bytes] extends past the end of the file (size %" PRIu64 ")",
                              printable(name, sizeof(name), t->name), in_range ? abs : t->offset,
                              in_range ? "" : " in the data section", t->bytes, f->size);
        }
        t->data = f->base + f->data_offset + t->offset;
    }
    return true;
}

typedef struct span {
    uint64_t start, end;
    int64_t i;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// Sorted by start, two tensors overlap iff one starts before the furthest end seen so far.
static bool check_overlaps(gguf_file *f, ft_err *err) {
    int64_t n = f->n_tensors;
    if (n < 2) return true;
    span *s = ft_malloc((size_t)n * sizeof(*s));
    for (int64_t i = 0; i < n; i++) {
        uint64_t start = f->data_offset + f->tensors[i].offset; // inside the file: no overflow
        s[i] = (span){start, start + f->tensors[i].bytes, i};
    }
    qsort(s, (size_t)n, sizeof(*s), span_cmp);
    const span *furthest = &s[0];
    bool ok = true;
    for (int64_t k = 1; k < n && ok; k++) {
        if (s[k].start < furthest->end) {
            const gguf_tensor *a = &f->tensors[furthest->i], *b = &f->tensors[s[k].i];
            char na[NAME_CHARS * 4 + 8], nb[NAME_CHARS * 4 + 8];
            ok = ft_err_set(err,
                            "tensors '%s' [offset %" PRIu64 ", %" PRIu64 " bytes] and '%s' [offset %" PRIu64
                            ", %" PRIu64 " bytes] overlap",
                            printable(na, sizeof(na), a->name), furthest->start, a->bytes,
                            printable(nb, sizeof(nb), b->name), s[k].start, b->bytes);
        }
        if (s[k].end > furthest->end) furthest = &s[k];
    }
    free(s);
    return ok;
}

// ---------------------------------------------------------------------------------------------
// Opening and closing

static bool parse(gguf_file *f, ft_err *err) {
    cursor c = {f->base, f->size, 0, err};
    uint64_t n_tensors, n_kv;
    return parse_header(f, &c, &n_tensors, &n_kv) && parse_kvs(f, &c, n_kv) && read_alignment(f, err) &&
           parse_tensor_infos(f, &c, n_tensors) && place_data(f, c.pos, err) && check_overlaps(f, err);
}

gguf_file *gguf_open_buffer(const void *data, size_t size, ft_err *err) {
    gguf_file *f = ft_calloc(1, sizeof(*f));
    f->base = data;
    f->fd = -1;
    f->size = size;
    if (!parse(f, err)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open(const char *path, ft_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ft_err_set(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        ft_err_set(err, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        ft_err_set(err, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    void *map = NULL;
    size_t size = (size_t)st.st_size;
    if (size > 0) {
        // at a huge-page boundary, so that the weights' pages can become huge pages in place
        // (ft_model_copy_into_memory)
        map = ft_mapping_open(fd, size);
        if (!map) {
            ft_err_set(err, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
            close(fd);
            return NULL;
        }
    }
    gguf_file *f = gguf_open_buffer(map, size, err);
    if (!f) {
        ft_mapping_close(map, size);
        close(fd);
        ft_err_prefix(err, "%s", path);
        return NULL;
    }
    f->mapped = map != NULL;
    if (f->mapped) f->fd = fd; // kept: reading it is faster than faulting the mapping in
    else close(fd);
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->n_kv; i++)
        free(f->kv[i].str_offs);
    free(f->kv);
    free(f->tensors);
    gguf_index_free(&f->kv_index);
    gguf_index_free(&f->tensor_index);
    if (f->mapped) {
        ft_mapping_close((void *)f->base, f->size);
        close(f->fd);
    }
    free(f);
}
