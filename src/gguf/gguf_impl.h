// gguf_impl.h: structures private to the gguf module, shared by its .c files only.
//
// gguf_index.c  name -> index hash table (keys and tensor names, reader and writer)
// gguf_read.c   opening and validating a file (the only code that trusts nothing)
// gguf_access.c accessors of an opened, validated file
// gguf_format.c printing values and names for humans
// gguf_write.c  the writer
#ifndef FT_GGUF_IMPL_H
#define FT_GGUF_IMPL_H

#include "gguf.h"

#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf reads and writes little-endian files in place: a little-endian host is required"
#endif

// ---------------------------------------------------------------------------------------------
// Name index: open addressing with linear probing. Entries are identified by their index in
// the owner's array; the index asks the owner for an entry's name, so it stores no strings.

typedef gguf_str (*gguf_index_name_fn)(const void *owner, int64_t i);

typedef struct gguf_index_slot {
    uint64_t hash;
    int64_t i; // -1: empty
} gguf_index_slot;

typedef struct gguf_index {
    gguf_index_slot *slots;
    uint64_t cap; // a power of two, at least twice n
    int64_t n;
    gguf_index_name_fn name_of;
    const void *owner;
} gguf_index;

// Sized for `expected` entries (it grows past that as needed).
void gguf_index_init(gguf_index *ix, gguf_index_name_fn name_of, const void *owner, int64_t expected);
void gguf_index_free(gguf_index *ix);
// Adds entry i under its name. Returns -1 when added, or the index of the entry that already
// has this name (then nothing is added).
int64_t gguf_index_add(gguf_index *ix, int64_t i);
// Index of the entry named name[0..len), or -1.
int64_t gguf_index_find(const gguf_index *ix, const char *name, uint64_t len);

// ---------------------------------------------------------------------------------------------
// An opened file.

typedef struct gguf_kv {
    gguf_str key;
    uint64_t offset;                // file offset of the key (for messages)
    enum gguf_value_type type;      // GGUF_VALUE_TYPE_ARRAY for arrays
    enum gguf_value_type elem_type; // an array's element type; equals type for a scalar
    uint64_t count;                 // elements of an array; 1 for a scalar
    const uint8_t *value;           // a scalar's bytes (a string's length prefix), or the
                                    // first element of an array
    const uint8_t *raw;             // the type field: raw[0..raw_len) is the type and value
    uint64_t raw_len;               // exactly as on disk (gguf_writer_copy_kv copies it)
    uint64_t *str_offs;             // string arrays: offset from `value` of each element
} gguf_kv;

struct gguf_file {
    const uint8_t *base;
    uint64_t size;
    bool mapped; // base is our mmap, unmapped by gguf_close
    int fd;      // mapped: the file, open until gguf_close (reads beside the mapping); else -1
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    gguf_kv *kv;
    int64_t n_tensors;
    gguf_tensor *tensors;
    gguf_index kv_index;
    gguf_index tensor_index;
};

// Bytes of one element of a fixed-size value type; 0 for string, array and unknown types.
size_t gguf_value_size(enum gguf_value_type t);

// Reads a string (uint64 length + bytes) at p; the caller has validated it.
static inline gguf_str gguf_str_at(const uint8_t *p) {
    gguf_str s;
    memcpy(&s.len, p, sizeof(s.len));
    s.ptr = (const char *)p + sizeof(s.len);
    return s;
}

// Writes s[0..len) into buf (NUL-terminated, never more than size bytes) as printable text:
// quotes, backslashes and control bytes escaped; past max_bytes of s it stops (at a UTF-8
// character boundary) and appends "...". Returns the length written.
size_t gguf_escape(char *buf, size_t size, const char *s, uint64_t len, uint64_t max_bytes);

#endif
