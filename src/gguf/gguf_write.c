// gguf_write.c: writing GGUF v3 files.
//
// Key/values are kept serialized (value type + value, exactly the on-disk bytes), so a value
// copied from another file is one memcpy, however many strings its array holds. Tensor infos
// are kept until gguf_writer_begin, which lays the data out as llama.cpp expects it: each
// tensor at the running offset, padded to the alignment (the padding follows the last tensor
// too). Then the data is streamed tensor by tensor, so it never has to sit in memory at once.
//
// Misuse (a key set after begin, data of the wrong size, a duplicate tensor name) is a
// programmer error and aborts; I/O failures return false with the path and the reason.
#include "gguf_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define GGUF_WRITE_VERSION 3
#define WRITE_BUFFER_BYTES (1 << 20)

typedef struct bytebuf {
    uint8_t *p;
    size_t len, cap;
} bytebuf;

static void buf_put(bytebuf *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = FT_MAX(b->len + n, 2 * b->cap);
        b->p = ft_realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void buf_u32(bytebuf *b, uint32_t v) {
    buf_put(b, &v, sizeof(v));
}
static void buf_u64(bytebuf *b, uint64_t v) {
    buf_put(b, &v, sizeof(v));
}

static void buf_str(bytebuf *b, const char *s, uint64_t len) {
    buf_u64(b, len);
    buf_put(b, s, len);
}

typedef struct wkv {
    char *key; // NUL-terminated, but may hold a NUL (copied from a file): key_len counts
    size_t key_len;
    bytebuf raw; // value type + value, as on disk
} wkv;

typedef struct wtensor {
    char *name;
    enum ft_type type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t bytes;
    uint64_t offset; // in the data section, set by begin
} wtensor;

enum writer_state {
    WRITER_STATE_COLLECTING, // setting keys, adding tensors
    WRITER_STATE_WRITING,    // header written, streaming tensor data
    WRITER_STATE_DONE,
    WRITER_STATE_FAILED, // an I/O error; every later call fails
};

struct gguf_writer {
    wkv *kv;
    int64_t n_kv, cap_kv;
    gguf_index kv_index;
    wtensor *tensors;
    int64_t n_tensors, cap_tensors;
    gguf_index tensor_index;

    enum writer_state state;
    FILE *fp;
    char *path;
    uint32_t alignment;
    uint64_t pos;        // bytes written so far
    int64_t next_tensor; // whose data comes next
};

static gguf_str kv_name(const void *owner, int64_t i) {
    const wkv *kv = &((const gguf_writer *)owner)->kv[i];
    return (gguf_str){kv->key, kv->key_len};
}

static gguf_str tensor_name(const void *owner, int64_t i) {
    const char *n = ((const gguf_writer *)owner)->tensors[i].name;
    return (gguf_str){n, strlen(n)};
}

gguf_writer *gguf_writer_init(void) {
    gguf_writer *w = ft_calloc(1, sizeof(*w));
    gguf_index_init(&w->kv_index, kv_name, w, 0);
    gguf_index_init(&w->tensor_index, tensor_name, w, 0);
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].raw.p);
    }
    for (int64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->kv);
    free(w->tensors);
    gguf_index_free(&w->kv_index);
    gguf_index_free(&w->tensor_index);
    if (w->fp) fclose(w->fp);
    free(w->path);
    free(w);
}

// ---------------------------------------------------------------------------------------------
// Key/values

// The value of key[0..len), emptied for a new value: the existing entry, or a new one at the
// end.
static bytebuf *value_slot_n(gguf_writer *w, const char *key, size_t len) {
    FT_ASSERT(w->state == WRITER_STATE_COLLECTING);
    FT_ASSERT(len > 0);
    int64_t i = gguf_index_find(&w->kv_index, key, len);
    if (i < 0) {
        if (w->n_kv == w->cap_kv) {
            w->cap_kv = FT_MAX(16, 2 * w->cap_kv);
            w->kv = ft_realloc(w->kv, (size_t)w->cap_kv * sizeof(*w->kv));
        }
        i = w->n_kv++;
        char *copy = ft_malloc(len + 1);
        memcpy(copy, key, len);
        copy[len] = 0;
        w->kv[i] = (wkv){copy, len, {0}};
        gguf_index_add(&w->kv_index, i);
    }
    w->kv[i].raw.len = 0;
    return &w->kv[i].raw;
}

static bytebuf *value_slot(gguf_writer *w, const char *key) {
    FT_ASSERT(key);
    return value_slot_n(w, key, strlen(key));
}

static void set_scalar(gguf_writer *w, const char *key, enum gguf_value_type t, const void *v) {
    bytebuf *b = value_slot(w, key);
    buf_u32(b, t);
    buf_put(b, v, gguf_value_size(t));
}

void gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_UINT8, &v);
}
void gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_INT8, &v);
}
void gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_UINT16, &v);
}
void gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_INT16, &v);
}
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_INT32, &v);
}
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_UINT32, &v);
}
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_UINT64, &v);
}
void gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_INT64, &v);
}
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_FLOAT32, &v);
}
void gguf_writer_set_f64(gguf_writer *w, const char *key, double v) {
    set_scalar(w, key, GGUF_VALUE_TYPE_FLOAT64, &v);
}
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    set_scalar(w, key, GGUF_VALUE_TYPE_BOOL, &b);
}

void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    FT_ASSERT(v);
    bytebuf *b = value_slot(w, key);
    buf_u32(b, GGUF_VALUE_TYPE_STRING);
    buf_str(b, v, strlen(v));
}

void gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_value_type elem_type, const void *data,
                         uint64_t count) {
    size_t width = gguf_value_size(elem_type);
    FT_ASSERT(width > 0); // a numeric or bool type; strings go through gguf_writer_set_arr_str
    FT_ASSERT(data || count == 0);
    if (elem_type == GGUF_VALUE_TYPE_BOOL) // a reader rejects any other byte
        for (uint64_t i = 0; i < count; i++)
            FT_ASSERT(((const uint8_t *)data)[i] <= 1);
    bytebuf *b = value_slot(w, key);
    buf_u32(b, GGUF_VALUE_TYPE_ARRAY);
    buf_u32(b, elem_type);
    buf_u64(b, count);
    buf_put(b, data, count * width);
}

void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t count) {
    FT_ASSERT(strs || count == 0);
    bytebuf *b = value_slot(w, key);
    buf_u32(b, GGUF_VALUE_TYPE_ARRAY);
    buf_u32(b, GGUF_VALUE_TYPE_STRING);
    buf_u64(b, count);
    for (uint64_t i = 0; i < count; i++)
        buf_str(b, strs[i], strlen(strs[i]));
}

void gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f, int64_t i) {
    FT_ASSERT(i >= 0 && i < f->n_kv);
    const gguf_kv *kv = &f->kv[i];
    buf_put(value_slot_n(w, kv->key.ptr, kv->key.len), kv->raw, kv->raw_len);
}

// ---------------------------------------------------------------------------------------------
// Tensors

int64_t gguf_writer_add_tensor(gguf_writer *w, const char *name, enum ft_type type, uint32_t n_dims,
                               const int64_t *ne) {
    FT_ASSERT(w->state == WRITER_STATE_COLLECTING);
    FT_ASSERT(name && n_dims >= 1 && n_dims <= GGUF_MAX_DIMS);
    const ft_type_traits *tr = ft_type_traits_find(type);
    FT_ASSERT(tr);
    wtensor t = {.name = ft_strdup(name), .type = type, .n_dims = n_dims};
    uint64_t n_elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
        FT_ASSERT(t.ne[d] > 0);
        FT_ASSERT(ft_mul_u64(n_elems, (uint64_t)t.ne[d], &n_elems));
    }
    FT_ASSERT(t.ne[0] % tr->block_elems == 0);
    t.bytes = n_elems / (uint64_t)tr->block_elems * (uint64_t)tr->block_bytes;

    if (w->n_tensors == w->cap_tensors) {
        w->cap_tensors = FT_MAX(16, 2 * w->cap_tensors);
        w->tensors = ft_realloc(w->tensors, (size_t)w->cap_tensors * sizeof(*w->tensors));
    }
    int64_t i = w->n_tensors++;
    w->tensors[i] = t;
    if (gguf_index_add(&w->tensor_index, i) >= 0)
        ft_abort(__FILE__, __LINE__, "gguf writer: duplicate tensor name '%s'", name);
    return i;
}

// ---------------------------------------------------------------------------------------------
// Writing

static bool write_fail(gguf_writer *w, ft_err *err, const char *what) {
    ft_err_set(err, "%s: %s: %s", w->path, what, errno ? strerror(errno) : "I/O error");
    if (w->fp) fclose(w->fp);
    w->fp = NULL;
    w->state = WRITER_STATE_FAILED;
    return false;
}

static bool put(gguf_writer *w, const void *data, size_t n, ft_err *err) {
    errno = 0;
    if (n && fwrite(data, 1, n, w->fp) != n) return write_fail(w, err, "write failed");
    w->pos += n;
    return true;
}

static bool pad(gguf_writer *w, ft_err *err) {
    static const uint8_t zeros[256];
    while (w->pos % w->alignment != 0) {
        size_t n = FT_MIN(sizeof(zeros), w->alignment - w->pos % w->alignment);
        if (!put(w, zeros, n, err)) return false;
    }
    return true;
}

// general.alignment if the caller set it (as a uint32), else the default.
static uint32_t chosen_alignment(const gguf_writer *w) {
    static const char key[] = "general.alignment";
    int64_t i = gguf_index_find(&w->kv_index, key, sizeof(key) - 1);
    if (i < 0) return GGUF_DEFAULT_ALIGNMENT;
    const bytebuf *raw = &w->kv[i].raw;
    uint32_t type, a;
    memcpy(&type, raw->p, sizeof(type));
    FT_ASSERT(type == GGUF_VALUE_TYPE_UINT32 && raw->len == 8);
    memcpy(&a, raw->p + 4, sizeof(a));
    FT_ASSERT(a != 0 && (a & (a - 1)) == 0);
    return a;
}

static bool write_header(gguf_writer *w, ft_err *err) {
    bytebuf h = {0};
    buf_put(&h, GGUF_MAGIC, 4);
    buf_u32(&h, GGUF_WRITE_VERSION);
    buf_u64(&h, (uint64_t)w->n_tensors);
    buf_u64(&h, (uint64_t)w->n_kv);
    bool ok = put(w, h.p, h.len, err);
    for (int64_t i = 0; ok && i < w->n_kv; i++) {
        h.len = 0;
        buf_str(&h, w->kv[i].key, w->kv[i].key_len);
        ok = put(w, h.p, h.len, err) && put(w, w->kv[i].raw.p, w->kv[i].raw.len, err);
    }
    for (int64_t i = 0; ok && i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        h.len = 0;
        buf_str(&h, t->name, strlen(t->name));
        buf_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            buf_u64(&h, (uint64_t)t->ne[d]);
        buf_u32(&h, (uint32_t)t->type);
        buf_u64(&h, t->offset);
        ok = put(w, h.p, h.len, err);
    }
    free(h.p);
    return ok && pad(w, err);
}

void *gguf_writer_kv_image(const gguf_writer *w, size_t *size) {
    bytebuf h = {0};
    buf_put(&h, GGUF_MAGIC, 4);
    buf_u32(&h, GGUF_WRITE_VERSION);
    buf_u64(&h, 0);
    buf_u64(&h, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv; i++) {
        buf_str(&h, w->kv[i].key, w->kv[i].key_len);
        buf_put(&h, w->kv[i].raw.p, w->kv[i].raw.len);
    }
    static const uint8_t zero;
    for (uint32_t a = chosen_alignment(w); h.len % a;) buf_put(&h, &zero, 1);
    *size = h.len;
    return h.p;
}

bool gguf_writer_begin(gguf_writer *w, const char *path, ft_err *err) {
    FT_ASSERT(w->state == WRITER_STATE_COLLECTING);
    w->alignment = chosen_alignment(w);
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        t->offset = off;
        off += t->bytes;
        off += (w->alignment - off % w->alignment) % w->alignment;
    }
    w->path = ft_strdup(path);
    errno = 0;
    w->fp = fopen(path, "wb");
    if (!w->fp) return write_fail(w, err, "cannot create");
    setvbuf(w->fp, NULL, _IOFBF, WRITE_BUFFER_BYTES);
    w->state = WRITER_STATE_WRITING;
    return write_header(w, err);
}

bool gguf_writer_tensor_data(gguf_writer *w, const void *data, uint64_t bytes, ft_err *err) {
    if (w->state == WRITER_STATE_FAILED) return ft_err_set(err, "%s: an earlier write failed", w->path);
    FT_ASSERT(w->state == WRITER_STATE_WRITING);
    if (w->next_tensor >= w->n_tensors)
        ft_abort(__FILE__, __LINE__, "gguf writer: data for more than the %" PRId64 " tensors", w->n_tensors);
    const wtensor *t = &w->tensors[w->next_tensor];
    if (bytes != t->bytes)
        ft_abort(__FILE__, __LINE__, "gguf writer: tensor '%s' is %" PRIu64 " bytes, not %" PRIu64, t->name,
                 t->bytes, bytes);
    w->next_tensor++;
    return put(w, data, bytes, err) && pad(w, err);
}

bool gguf_writer_finish(gguf_writer *w, ft_err *err) {
    if (w->state == WRITER_STATE_FAILED) return ft_err_set(err, "%s: an earlier write failed", w->path);
    FT_ASSERT(w->state == WRITER_STATE_WRITING);
    if (w->next_tensor != w->n_tensors) {
        ft_err_set(err, "%s: only %" PRId64 " of %" PRId64 " tensors got their data", w->path, w->next_tensor,
                   w->n_tensors);
        fclose(w->fp);
        w->fp = NULL;
        w->state = WRITER_STATE_FAILED;
        return false;
    }
    errno = 0;
    if (fflush(w->fp) != 0 || ferror(w->fp)) return write_fail(w, err, "write failed");
    FILE *fp = w->fp;
    w->fp = NULL;
    errno = 0;
    if (fclose(fp) != 0) return write_fail(w, err, "close failed");
    w->state = WRITER_STATE_DONE;
    return true;
}
