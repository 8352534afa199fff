// test_gguf_bad.c: a corpus of crafted bad GGUF files, each built from a small valid one by
// changing one thing. Each must be refused with a message that names its problem: from a
// buffer, from a file (mmap), and through `ft inspect` in a child process (no crash).
#include "../src/gguf/gguf.h"
#include "fixtures.h"

#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Building files

// Which key/values the file holds: the valid set, or the valid set with one defect.
enum kvs {
    KVS_VALID,
    KVS_HUGE_KEY_LEN, // a key's length is 2^60
    KVS_HUGE_STR_LEN, // a string value's length is 2^60
    KVS_EMPTY_KEY,
    KVS_DUP_KEY,
    KVS_ALIGN_0,
    KVS_ALIGN_3,
    KVS_ALIGN_I32, // general.alignment stored as int32
    KVS_ARRAY_OF_ARRAYS,
    KVS_UNKNOWN_TYPE, // value type 13
    KVS_UNKNOWN_ELEM, // array element type 99
    KVS_BOOL_2,
    KVS_BOOL_ARRAY_2,
    KVS_HUGE_ARRAY,     // a uint32 array of 2^61 elements
    KVS_HUGE_STR_ARRAY, // a string array of 2^40 elements
};

typedef struct tinfo {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t offset;
} tinfo;

typedef struct spec {
    const char *magic;
    uint32_t version;
    uint64_t n_tensors, n_kv; // as written in the header; UINT64_MAX: the true counts
    enum kvs kvs;
    tinfo t[2];
    uint64_t data_bytes; // size of the data section
} spec;

// The valid file: 4 key/values, a q8_0 tensor (68 bytes, padded to 96) and an f32 one (32
// bytes) that ends exactly at the end of the file, so that every shorter prefix is invalid.
static spec valid_spec(void) {
    return (spec){
        .magic = "GGUF",
        .version = 3,
        .n_tensors = UINT64_MAX,
        .n_kv = UINT64_MAX,
        .kvs = KVS_VALID,
        .t = {{"tok.weight", 2, {32, 2}, FT_TYPE_Q8_0, 0}, {"out.weight", 1, {8}, FT_TYPE_F32, 96}},
        .data_bytes = 128,
    };
}

static uint64_t put_kvs(fixture_buf *b, enum kvs v) {
    fixture_buf_str(b, v == KVS_EMPTY_KEY ? "" : "general.architecture");
    fixture_buf_u32(b, GGUF_VALUE_TYPE_STRING);
    if (v == KVS_HUGE_STR_LEN) {
        fixture_buf_u64(b, 1ull << 60);
        fixture_buf_put(b, "llama", 5);
    } else {
        fixture_buf_str(b, "llama");
    }
    if (v == KVS_HUGE_KEY_LEN) {
        fixture_buf_u64(b, 1ull << 60);
        fixture_buf_put(b, "general.alignment", 17);
    } else {
        fixture_buf_str(b, "general.alignment");
    }
    fixture_buf_u32(b, v == KVS_ALIGN_I32 ? GGUF_VALUE_TYPE_INT32 : GGUF_VALUE_TYPE_UINT32);
    fixture_buf_u32(b, v == KVS_ALIGN_0 ? 0 : v == KVS_ALIGN_3 ? 3 : 32);
    fixture_buf_str(b, "tokenizer.ggml.tokens");
    fixture_buf_u32(b, GGUF_VALUE_TYPE_ARRAY);
    fixture_buf_u32(b, GGUF_VALUE_TYPE_STRING);
    fixture_buf_u64(b, v == KVS_HUGE_STR_ARRAY ? 1ull << 40 : 2);
    fixture_buf_str(b, "a");
    fixture_buf_str(b, "bc");
    fixture_buf_str(b, "x.flags");
    fixture_buf_u32(b, GGUF_VALUE_TYPE_ARRAY);
    fixture_buf_u32(b, GGUF_VALUE_TYPE_BOOL);
    fixture_buf_u64(b, 2);
    fixture_buf_u8(b, 0);
    fixture_buf_u8(b, v == KVS_BOOL_ARRAY_2 ? 2 : 1);
    switch (v) { // a fifth key/value for the defects that need one
    case KVS_DUP_KEY:
        fixture_buf_str(b, "general.architecture");
        fixture_buf_u32(b, GGUF_VALUE_TYPE_UINT32);
        fixture_buf_u32(b, 1);
        return 5;
    case KVS_ARRAY_OF_ARRAYS:
        fixture_buf_str(b, "x.nested");
        fixture_buf_u32(b, GGUF_VALUE_TYPE_ARRAY);
        fixture_buf_u32(b, GGUF_VALUE_TYPE_ARRAY);
        fixture_buf_u64(b, 1);
        fixture_buf_u32(b, GGUF_VALUE_TYPE_UINT8);
        fixture_buf_u64(b, 1);
        fixture_buf_u8(b, 0);
        return 5;
    case KVS_UNKNOWN_TYPE:
    case KVS_UNKNOWN_ELEM:
        fixture_buf_str(b, "x.odd");
        if (v == KVS_UNKNOWN_ELEM) fixture_buf_u32(b, GGUF_VALUE_TYPE_ARRAY);
        fixture_buf_u32(b, v == KVS_UNKNOWN_TYPE ? 13 : 99);
        fixture_buf_u64(b, 1);
        return 5;
    case KVS_BOOL_2:
        fixture_buf_str(b, "x.flag");
        fixture_buf_u32(b, GGUF_VALUE_TYPE_BOOL);
        fixture_buf_u8(b, 2);
        return 5;
    case KVS_HUGE_ARRAY:
        fixture_buf_str(b, "x.many");
        fixture_buf_u32(b, GGUF_VALUE_TYPE_ARRAY);
        fixture_buf_u32(b, GGUF_VALUE_TYPE_UINT32);
        fixture_buf_u64(b, 1ull << 61);
        fixture_buf_u32(b, 7);
        return 5;
    default: return 4;
    }
}

static fixture_buf build(const spec *s) {
    fixture_buf b = {0};
    fixture_buf_put(&b, s->magic, 4);
    fixture_buf_u32(&b, s->version);
    size_t counts_at = b.n;
    fixture_buf_u64(&b, 0);
    fixture_buf_u64(&b, 0);
    uint64_t n_kv = put_kvs(&b, s->kvs);
    for (int i = 0; i < 2; i++) {
        const tinfo *t = &s->t[i];
        fixture_buf_str(&b, t->name);
        fixture_buf_u32(&b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            fixture_buf_u64(&b, t->ne[d]);
        fixture_buf_u32(&b, t->type);
        fixture_buf_u64(&b, t->offset);
    }
    uint64_t n_tensors = s->n_tensors == UINT64_MAX ? 2 : s->n_tensors;
    n_kv = s->n_kv == UINT64_MAX ? n_kv : s->n_kv;
    memcpy(b.p + counts_at, &n_tensors, 8);
    memcpy(b.p + counts_at + 8, &n_kv, 8);
    while (b.n % 32)
        fixture_buf_u8(&b, 0);
    for (uint64_t i = 0; i < s->data_bytes; i++)
        fixture_buf_u8(&b, (uint8_t)(i * 7 + 1));
    return b;
}

// ---------------------------------------------------------------------------------------------
// Checking

static int g_case;

static bool has(const char *msg, const char *expect, const char *also) {
    return strstr(msg, expect) && (!also || strstr(msg, also));
}

// A file that must be refused with a message containing `expect` (and `also`, if not NULL).
static void expect_bad2(const spec *s, const char *label, const char *expect, const char *also) {
    fixture_buf b = build(s);
    ft_err err = {{0}};
    gguf_file *f = gguf_open_buffer(b.p, b.n, &err);
    CHECK(!f, "%s: opened", label);
    gguf_close(f);
    CHECK(has(err.msg, expect, also), "%s: message \"%s\" lacks \"%s\"", label, err.msg, expect);

    // From a file, through mmap: the same message after the path.
    char name[64];
    snprintf(name, sizeof(name), "bad%02d.gguf", g_case++);
    const char *path = test_path(name);
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp && fwrite(b.p, 1, b.n, fp) == b.n && fclose(fp) == 0);
    free(b.p);
    memset(&err, 0, sizeof(err));
    f = gguf_open(path, &err);
    CHECK(!f, "%s: opened from a file", label);
    gguf_close(f);
    CHECK(strstr(err.msg, path) && has(err.msg, expect, also), "%s: %s", label, err.msg);

    // Across the process boundary: ft inspect reports it and exits with an error, no crash.
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof(cmd), "%s inspect '%s' 2>&1", test_ft_bin(), path);
    int rc = test_run(cmd, out, sizeof(out));
    CHECK(rc > 0 && rc < 128, "%s: ft inspect exited with %d: %s", label, rc, out);
    CHECK(!strstr(out, "Sanitizer") && !strstr(out, "runtime error") && !strstr(out, "internal error"),
          "%s: %s", label, out);
    CHECK(has(out, expect, also), "%s: ft inspect said: %s", label, out);
}

static void expect_bad(const spec *s, const char *label, const char *expect) {
    expect_bad2(s, label, expect, NULL);
}

TEST(gguf_bad_valid_base) {
    spec s = valid_spec();
    fixture_buf b = build(&s);
    ft_err err = {{0}};
    gguf_file *f = gguf_open_buffer(b.p, b.n, &err);
    REQUIRE(f, "%s", err.msg);
    CHECK(gguf_n_kv(f) == 4 && gguf_n_tensors(f) == 2);
    const gguf_tensor *t = gguf_find_tensor(f, "out.weight");
    CHECK(t && t->bytes == 32 && (const uint8_t *)t->data + t->bytes == b.p + b.n);
    gguf_close(f);
    free(b.p);
}

// Every prefix of the valid file is refused cleanly (with ASan watching the reads).
TEST(gguf_bad_truncated_everywhere) {
    spec s = valid_spec();
    fixture_buf b = build(&s);
    int opened = 0, silent = 0;
    for (size_t n = 0; n < b.n; n++) {
        // A copy of exactly n bytes, so that ASan sees any read past the end.
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, b.p, n);
        ft_err err = {{0}};
        gguf_file *f = gguf_open_buffer(n ? p : NULL, n, &err);
        opened += f != NULL;
        silent += !f && err.msg[0] == 0;
        gguf_close(f);
        free(p);
    }
    CHECK(opened == 0, "%d prefixes opened", opened);
    CHECK(silent == 0, "%d prefixes failed without a message", silent);
    // The messages say where the file ended.
    ft_err err = {{0}};
    CHECK(b.n == 448, "%zu", b.n);
    CHECK(!gguf_open_buffer(b.p, 30, &err) && strstr(err.msg, "n_tensors 2 at offset 8 is more than"), "%s",
          err.msg);
    CHECK(!gguf_open_buffer(b.p, 250, &err) &&
              strstr(err.msg, "tensor 1 of 2: unexpected end of file at offset 249 reading the "
                              "tensor name length (8 bytes needed, 1 left)"),
          "%s", err.msg);
    CHECK(!gguf_open_buffer(b.p, b.n - 1, &err) && strstr(err.msg, "'out.weight'") &&
              strstr(err.msg, "past the end of the file"),
          "%s", err.msg);
    free(b.p);
}

TEST(gguf_bad_header) {
    spec s = valid_spec();
    s.magic = "GGUX";
    expect_bad(&s, "bad magic", "bad magic 'GGUX'");
    s = valid_spec();
    s.magic = "\x00\x01GG";
    expect_bad(&s, "binary magic", "bad magic '\\x00\\x01GG'");
    s = valid_spec();
    s.version = 0;
    expect_bad(&s, "version 0", "unsupported GGUF version 0");
    s.version = 1;
    expect_bad(&s, "version 1", "GGUF version 1 at offset 4 is not supported");
    s.version = 4;
    expect_bad(&s, "version 4", "unsupported GGUF version 4");
    s.version = 3u << 24;
    expect_bad(&s, "big-endian", "big-endian");
    s = valid_spec();
    s.n_tensors = 1ull << 62;
    expect_bad(&s, "n_tensors 2^62", "n_tensors 4611686018427387904 at offset 8 is more than");
    s = valid_spec();
    s.n_kv = 1ull << 62;
    expect_bad(&s, "n_kv 2^62", "n_kv 4611686018427387904 at offset 16 is more than");
    s = valid_spec();
    s.n_kv = UINT64_MAX - 1;
    expect_bad(&s, "n_kv 2^64-2", "n_kv 18446744073709551614");
    s = valid_spec();
    s.n_kv = 3; // the fourth key is read as a tensor info
    expect_bad(&s, "n_kv too small", "tensor 'x.flags'");
}

TEST(gguf_bad_kvs) {
    static const struct {
        enum kvs kvs;
        const char *label, *expect, *also;
    } cases[] = {
        {KVS_HUGE_KEY_LEN, "huge key length", "key 1 of 4: key length 1152921504606846976 at offset 69",
         "exceeds the remaining"},
        {KVS_HUGE_STR_LEN, "huge string length", "'general.architecture' at offset 24: ",
         "string length 1152921504606846976 at offset 56 exceeds the remaining"},
        {KVS_EMPTY_KEY, "empty key", "key 0 at offset 24: empty key", NULL},
        {KVS_DUP_KEY, "duplicate key", "key 'general.architecture' at offset 199",
         "duplicate key (first at offset 24)"},
        {KVS_ALIGN_0, "alignment 0", "key 'general.alignment' at offset 69", "0 is not a power of two"},
        {KVS_ALIGN_3, "alignment 3", "key 'general.alignment' at offset 69", "3 is not a power of two"},
        {KVS_ALIGN_I32, "alignment int32", "key 'general.alignment' at offset 69",
         "must be of type uint32, not int32"},
        {KVS_ARRAY_OF_ARRAYS, "array of arrays", "key 'x.nested' at offset 199", "array of arrays"},
        {KVS_UNKNOWN_TYPE, "unknown value type", "key 'x.odd' at offset 199", "unknown value type 13"},
        {KVS_UNKNOWN_ELEM, "unknown element type", "key 'x.odd' at offset 199",
         "unknown array element type 99"},
        {KVS_BOOL_2, "bool 2", "key 'x.flag' at offset 199", "bool value 2 at offset 217"},
        {KVS_BOOL_ARRAY_2, "bool array 2", "key 'x.flags' at offset 166", "bool value 2 at offset 198"},
        {KVS_HUGE_ARRAY, "huge array", "key 'x.many' at offset 199",
         "array length 2305843009213693952 at offset 221 is more than"},
        {KVS_HUGE_STR_ARRAY, "huge string array", "key 'tokenizer.ggml.tokens' at offset 102",
         "array length 1099511627776 at offset 139 is more than"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        spec s = valid_spec();
        s.kvs = cases[i].kvs;
        expect_bad2(&s, cases[i].label, cases[i].expect, cases[i].also);
    }
}

TEST(gguf_bad_tensor_infos) {
    spec s = valid_spec();
    s.t[0].n_dims = 0;
    expect_bad2(&s, "n_dims 0", "tensor 'tok.weight' at offset", "n_dims 0 at offset");
    s = valid_spec();
    s.t[1].n_dims = 5;
    s.t[1].ne[1] = s.t[1].ne[2] = s.t[1].ne[3] = s.t[1].ne[4] = 1;
    expect_bad2(&s, "n_dims 5", "tensor 'out.weight' at offset", "n_dims 5 at offset");
    s = valid_spec();
    s.t[0].ne[1] = 0;
    expect_bad2(&s, "zero dimension", "dimension 1 at offset", "is 0");
    s = valid_spec();
    s.t[1].ne[0] = 1ull << 63;
    expect_bad(&s, "dimension over INT64_MAX", "more than INT64_MAX");
    s = valid_spec();
    s.t[1].n_dims = 3;
    s.t[1].ne[0] = s.t[1].ne[1] = 1ull << 32;
    s.t[1].ne[2] = 2;
    expect_bad(&s, "element count overflow", "element count overflows int64");
    s = valid_spec();
    s.t[1].n_dims = 2;
    s.t[1].ne[0] = s.t[1].ne[1] = 1ull << 31; // 2^62 f32 elements: 2^64 bytes
    expect_bad(&s, "byte size overflow", "size in bytes overflows");
    static const uint32_t bad_types[] = {4, 31, 99};
    for (int i = 0; i < 3; i++) {
        s = valid_spec();
        s.t[1].type = bad_types[i];
        char want[64];
        snprintf(want, sizeof(want), "unknown type id %u at offset", bad_types[i]);
        expect_bad(&s, "unknown type", want);
    }
    s = valid_spec();
    s.t[0].type = FT_TYPE_Q4_K;
    s.t[0].ne[0] = 100;
    expect_bad(&s, "row not whole blocks", "row length 100 is not a multiple of q4_K's block size 256");
    s = valid_spec();
    s.t[1].name = s.t[0].name;
    expect_bad(&s, "duplicate tensor name", "duplicate tensor name");
}

TEST(gguf_bad_data_layout) {
    spec s = valid_spec();
    s.t[1].offset = 97;
    expect_bad2(&s, "misaligned offset", "data offset 97 at offset", "is not a multiple of the alignment 32");
    s = valid_spec();
    s.t[1].offset = 128;
    expect_bad2(&s, "past the end", "tensor 'out.weight': data [offset ",
                "32 bytes] extends past the end of the file");
    s = valid_spec();
    s.t[1].offset = 1ull << 63;
    expect_bad(&s, "offset overflow", "extends past the end of the file");
    s = valid_spec();
    s.t[1].offset = 64;
    expect_bad2(&s, "overlap", "tensors 'tok.weight' [offset 320, 68 bytes]",
                "and 'out.weight' [offset 384, 32 bytes] overlap");
    s = valid_spec();
    s.t[0].offset = 96; // swapped places: still valid
    s.t[1].offset = 0;
    s.data_bytes = 96 + 68;
    fixture_buf b = build(&s);
    ft_err err = {{0}};
    gguf_file *f = gguf_open_buffer(b.p, b.n, &err);
    CHECK(f, "%s", err.msg);
    gguf_close(f);
    free(b.p);
    s = valid_spec();
    s.data_bytes = 0;
    expect_bad(&s, "no data section", "past the end of the file");
}
