// fuzz_gguf.c: libFuzzer target for the GGUF reader.
//
// Opens the input with gguf_open_buffer and, when it is accepted, walks every accessor: each
// key (found again by name, printed, read through every typed getter, every array element),
// each tensor (found by name, first and last data byte) and gguf_writer_copy_kv. Whatever the
// reader accepts must be safe to use this way. Seeds: fuzz/seeds/fuzz_gguf/ (written by the
// gguf_fuzz_seeds test with FT_GGUF_SEED_DIR set).
#include "../src/gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

static volatile uint64_t g_sink; // keeps the reads from being optimized away

// A NUL-terminated copy of s (a name with a NUL inside is simply not found by it).
static char *cstr(gguf_str s) {
    char *c = malloc(s.len + 1);
    memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    return c;
}

static void walk_array(const gguf_file *f, const char *key) {
    enum gguf_value_type et;
    uint64_t n;
    if (!gguf_get_arr(f, key, &et, &n)) return;
    const void *data = gguf_arr_data(f, key);
    for (uint64_t i = 0; i < n; i++) {
        switch (et) {
        case GGUF_VALUE_TYPE_STRING: {
            gguf_str s = gguf_arr_str(f, key, i);
            if (s.len) g_sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
            break;
        }
        case GGUF_VALUE_TYPE_FLOAT32:
        case GGUF_VALUE_TYPE_FLOAT64: g_sink += (uint64_t)(gguf_arr_float(f, key, i) != 0); break;
        case GGUF_VALUE_TYPE_BOOL: g_sink += ((const uint8_t *)data)[i]; break;
        default: g_sink += (uint64_t)gguf_arr_int(f, key, i); break;
        }
    }
}

static void walk_kvs(const gguf_file *f) {
    gguf_writer *w = gguf_writer_init();
    char text[256], tiny[5];
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        char *key = cstr(gguf_kv_key(f, i));
        int64_t found = gguf_find_key(f, key);
        if (found >= 0 && found != i && strlen(key) == gguf_kv_key(f, i).len) abort();
        gguf_kv_format(f, i, text, sizeof(text));
        gguf_kv_format(f, i, tiny, sizeof(tiny));
        g_sink += strlen(text) + strlen(tiny) + (uint64_t)gguf_kv_type(f, i);
        int64_t iv;
        uint64_t uv;
        double dv;
        bool bv;
        gguf_str sv;
        if (gguf_get_int(f, key, &iv)) g_sink += (uint64_t)iv;
        if (gguf_get_uint(f, key, &uv)) g_sink += uv;
        if (gguf_get_float(f, key, &dv)) g_sink += dv != 0;
        if (gguf_get_bool(f, key, &bv)) g_sink += bv;
        if (gguf_get_str(f, key, &sv) && sv.len) g_sink += (uint8_t)sv.ptr[sv.len - 1];
        if (found == i) walk_array(f, key);
        gguf_writer_copy_kv(w, f, i);
        free(key);
    }
    gguf_writer_free(w);
}

static void walk_tensors(const gguf_file *f) {
    const uint8_t *base = gguf_file_base(f);
    uint64_t size = gguf_file_size(f);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const uint8_t *p = t->data;
        if (t->bytes == 0 || p < base || p + t->bytes > base + size) abort();
        g_sink += p[0] + p[t->bytes - 1] + (uint64_t)t->n_elems + t->type;
        char *name = cstr(t->name);
        const gguf_tensor *found = gguf_find_tensor(f, name);
        if (strlen(name) == t->name.len && found != t) abort();
        free(name);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open_buffer(data, size, &err);
    if (!f) {
        if (!err.msg[0]) abort(); // every refusal says why
        return 0;
    }
    g_sink += gguf_version(f) + gguf_alignment(f) + gguf_data_offset(f);
    walk_kvs(f);
    walk_tensors(f);
    gguf_close(f);
    return 0;
}
