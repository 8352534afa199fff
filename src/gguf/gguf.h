// gguf: reading and writing GGUF model files.
//
// The format (v2 and v3; all integers little-endian):
//   1. magic "GGUF" (4 bytes)
//   2. version: uint32 (2 or 3; v1 used 32-bit counts and is not supported)
//   3. n_tensors: uint64
//   4. n_kv: uint64
//   5. n_kv key/value pairs: key (string), value type (uint32), value
//        string = uint64 length + that many bytes (UTF-8, no terminator)
//        array  = element type (uint32) + uint64 count + elements (arrays of arrays are
//                 rejected, as llama.cpp does)
//   6. n_tensors tensor infos: name (string), n_dims (uint32, 1..4), n_dims uint64 dims
//      (ne[0] is the row length, the fastest-varying), type (uint32, an ft_type id),
//      offset (uint64, relative to the start of the data section, a multiple of the alignment)
//   7. padding to `general.alignment` (uint32 key, default 32, a power of two)
//   8. tensor data
//
// Reader: gguf_open() maps the file read-only and validates every field before returning;
// after that, every accessor is a cheap lookup that cannot fail on the file's content. All
// strings and tensor data returned point into the mapping and live until gguf_close().
// A gguf_file is immutable after opening, so it may be read from several threads.
//
// Writer: collect key/values and tensor infos in a gguf_writer, then write the header and
// stream each tensor's data in order (so a multi-GB synthetic model never sits in memory).
#ifndef FT_GGUF_H
#define FT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../quant/quant.h"
#include "../util/util.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

enum gguf_value_type {
    GGUF_VALUE_TYPE_UINT8 = 0,
    GGUF_VALUE_TYPE_INT8 = 1,
    GGUF_VALUE_TYPE_UINT16 = 2,
    GGUF_VALUE_TYPE_INT16 = 3,
    GGUF_VALUE_TYPE_UINT32 = 4,
    GGUF_VALUE_TYPE_INT32 = 5,
    GGUF_VALUE_TYPE_FLOAT32 = 6,
    GGUF_VALUE_TYPE_BOOL = 7,
    GGUF_VALUE_TYPE_STRING = 8,
    GGUF_VALUE_TYPE_ARRAY = 9,
    GGUF_VALUE_TYPE_UINT64 = 10,
    GGUF_VALUE_TYPE_INT64 = 11,
    GGUF_VALUE_TYPE_FLOAT64 = 12,
    GGUF_VALUE_TYPE_COUNT = 13,
};

// Name of a value type ("uint32", "string", ...).
const char *gguf_value_type_name(enum gguf_value_type t);

// A string inside the file: not NUL-terminated.
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_tensor {
    gguf_str name;
    enum ft_type type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; // dims; unused ones are 1. ne[0] is the row length
    int64_t n_elems;           // product of ne
    uint64_t offset;           // from the start of the data section
    uint64_t bytes;            // size of the data
    const void *data;          // points into the mapping
} gguf_tensor;

typedef struct gguf_file gguf_file;

// ---------------------------------------------------------------------------------------------
// Reading

// Maps and validates a GGUF file. Returns NULL and sets *err ("file: what, where") if the file
// cannot be opened or any field is invalid. Never crashes on any input.
gguf_file *gguf_open(const char *path, ft_err *err);

// As gguf_open, on a buffer the caller owns and keeps alive until gguf_close (used by the
// fuzzer and the tests).
gguf_file *gguf_open_buffer(const void *data, size_t size, ft_err *err);

void gguf_close(gguf_file *f); // NULL is a no-op

uint32_t gguf_version(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);
// File offset of the data section: the header's end padded to the alignment (not padded when
// there are no tensors, as in llama.cpp).
uint64_t gguf_data_offset(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f);
const void *gguf_file_base(const gguf_file *f); // start of the mapping
// True when the bytes are gguf_open's mapping of the file (util/mapping.h: at a huge-page
// boundary), false for gguf_open_buffer's.
bool gguf_is_mapped(const gguf_file *f);
// The mapped file, open until gguf_close (-1 for a buffer): reading it with pread is faster
// than faulting the mapping in page by page.
int gguf_fd(const gguf_file *f);

// Key/values, in file order.
int64_t gguf_n_kv(const gguf_file *f);
gguf_str gguf_kv_key(const gguf_file *f, int64_t i);
enum gguf_value_type gguf_kv_type(const gguf_file *f, int64_t i);
// Index of a key, or -1 if absent.
int64_t gguf_find_key(const gguf_file *f, const char *key);

// Typed getters by key. Each returns false (leaving *out untouched) when the key is absent or
// holds a value of another kind; integers convert between widths and signedness when the
// value fits, floats between f32 and f64.
bool gguf_get_int(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_uint(const gguf_file *f, const char *key, uint64_t *out);
bool gguf_get_float(const gguf_file *f, const char *key, double *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

// Arrays: element type and count; elements by index (i < count, FT_ASSERT otherwise).
bool gguf_get_arr(const gguf_file *f, const char *key, enum gguf_value_type *elem_type,
                  uint64_t *count);
int64_t gguf_arr_int(const gguf_file *f, const char *key, uint64_t i);  // integer arrays
double gguf_arr_float(const gguf_file *f, const char *key, uint64_t i); // float arrays
gguf_str gguf_arr_str(const gguf_file *f, const char *key, uint64_t i); // string arrays
// Raw pointer to the elements of a numeric array (little-endian, packed), or NULL.
const void *gguf_arr_data(const gguf_file *f, const char *key);

// The value of key i printed for humans (arrays abbreviated), written into buf.
void gguf_kv_format(const gguf_file *f, int64_t i, char *buf, size_t size);

// Tensors, in file order.
int64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i);
// Tensor by name, or NULL if absent.
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

// True if s equals the C string c.
bool gguf_str_eq(gguf_str s, const char *c);

// ---------------------------------------------------------------------------------------------
// Writing

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_init(void);
void gguf_writer_free(gguf_writer *w); // NULL is a no-op

// Key/values are written in the order they are set; setting a key again replaces its value.
void gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v);
void gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v);
void gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_f64(gguf_writer *w, const char *key, double v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
// Numeric arrays: elements packed little-endian in elem_type's width (bool: bytes 0 or 1).
void gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_value_type elem_type,
                         const void *data, uint64_t count);
void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                             uint64_t count);
// Copies key i of an open file (any type, arrays included) into the writer.
void gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f, int64_t i);

// The key/values set so far as a GGUF image without tensors, for reading them back with
// gguf_open_buffer (ft synth reads the keys it writes as the loader will). Caller frees it.
void *gguf_writer_kv_image(const gguf_writer *w, size_t *size);

// Declares a tensor (data comes later, in declaration order). ne as in gguf_tensor; the row
// length must be a multiple of the type's block size (FT_ASSERT). Returns its index.
int64_t gguf_writer_add_tensor(gguf_writer *w, const char *name, enum ft_type type,
                               uint32_t n_dims, const int64_t *ne);

// Writes magic, counts, key/values, tensor infos and padding to path. Returns false and sets
// *err on an I/O error.
bool gguf_writer_begin(gguf_writer *w, const char *path, ft_err *err);
// Appends the data of the next tensor (bytes must equal its size: FT_ASSERT) plus alignment
// padding. After an I/O error every later call returns false.
bool gguf_writer_tensor_data(gguf_writer *w, const void *data, uint64_t bytes, ft_err *err);
// Checks every tensor got its data, flushes and closes the file.
bool gguf_writer_finish(gguf_writer *w, ft_err *err);

#endif
