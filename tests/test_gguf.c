// test_gguf.c: the GGUF reader and writer against round trips, hand-made v2 files, llama.cpp's
// vocabulary files and llama.cpp's own GGUF reader and writer (loaded from libggml-base).
#include "../src/gguf/gguf.h"
#include "oracle.h"
#include "fixtures.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// ---------------------------------------------------------------------------------------------
// Helpers

static bool write_whole(const char *path, const void *data, size_t size) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return false;
    bool ok = fwrite(data, 1, size, fp) == size;
    return fclose(fp) == 0 && ok;
}

// Deterministic bytes, different per seed.
static void fill_bytes(uint8_t *p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

static bool str_is(gguf_str s, const char *c) {
    return gguf_str_eq(s, c);
}

// ---------------------------------------------------------------------------------------------
// The round-trip file: every value type and several tensor types and ranks.

typedef struct tspec {
    const char *name;
    enum ft_type type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t bytes; // by hand: elements / block * block bytes
} tspec;

static const tspec k_tensors[] = {
    {"t.f32", FT_TYPE_F32, 1, {7, 1, 1, 1}, 7 * 4},
    {"t.f16", FT_TYPE_F16, 2, {16, 3, 1, 1}, 48 * 2},
    {"blk.0.ffn_down_exps.weight", FT_TYPE_Q4_K, 3, {256, 2, 3, 1}, 6 * 144},
    {"t.q8_0", FT_TYPE_Q8_0, 4, {64, 2, 2, 2}, 16 * 34},
    {"t.bf16", FT_TYPE_BF16, 4, {5, 1, 1, 2}, 10 * 2},
};
#define N_TENSORS ((int)FT_ARRAY_LEN(k_tensors))

static const uint8_t k_u8s[] = {0, 1, 255};
static const int8_t k_i8s[] = {-128, 0, 127};
static const uint16_t k_u16s[] = {0, 65535};
static const int16_t k_i16s[] = {-32768, 7};
static const uint32_t k_u32s[] = {1, 2, 4000000000u};
static const int32_t k_i32s[] = {-1, 0, 2147483647};
static const float k_f32s[] = {0.5f, -1e-5f, 3e38f};
static const uint8_t k_bools[] = {1, 0, 1};
static const uint64_t k_u64s[] = {UINT64_MAX, 0};
static const int64_t k_i64s[] = {INT64_MIN, 42};
static const double k_f64s[] = {1e300, -0.25};
static const char *const k_strs[] = {"", "hello", "quote \" and \\ and \xc4\xa0", "last"};

// Writes the round-trip file; tensor i's data is fill_bytes(..., i).
static bool write_round_trip(const char *path, uint32_t alignment, ft_err *err) {
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "test");
    if (alignment) gguf_writer_set_u32(w, "general.alignment", alignment);
    gguf_writer_set_u8(w, "s.u8", 200);
    gguf_writer_set_i8(w, "s.i8", -100);
    gguf_writer_set_u16(w, "s.u16", 60000);
    gguf_writer_set_i16(w, "s.i16", -30000);
    gguf_writer_set_u32(w, "s.u32", 4000000000u);
    gguf_writer_set_i32(w, "s.i32", -2000000000);
    gguf_writer_set_f32(w, "s.f32", 0.1f);
    gguf_writer_set_bool(w, "s.bool", true);
    gguf_writer_set_str(w, "s.str", "h\xc3\xa9llo");
    gguf_writer_set_u64(w, "s.u64", UINT64_MAX);
    gguf_writer_set_i64(w, "s.i64", INT64_MIN);
    gguf_writer_set_f64(w, "s.f64", 0.1);
    gguf_writer_set_str(w, "s.empty_str", "");
    gguf_writer_set_arr(w, "a.u8", GGUF_VALUE_TYPE_UINT8, k_u8s, 3);
    gguf_writer_set_arr(w, "a.i8", GGUF_VALUE_TYPE_INT8, k_i8s, 3);
    gguf_writer_set_arr(w, "a.u16", GGUF_VALUE_TYPE_UINT16, k_u16s, 2);
    gguf_writer_set_arr(w, "a.i16", GGUF_VALUE_TYPE_INT16, k_i16s, 2);
    gguf_writer_set_arr(w, "a.u32", GGUF_VALUE_TYPE_UINT32, k_u32s, 3);
    gguf_writer_set_arr(w, "a.i32", GGUF_VALUE_TYPE_INT32, k_i32s, 3);
    gguf_writer_set_arr(w, "a.f32", GGUF_VALUE_TYPE_FLOAT32, k_f32s, 3);
    gguf_writer_set_arr(w, "a.bool", GGUF_VALUE_TYPE_BOOL, k_bools, 3);
    gguf_writer_set_arr(w, "a.u64", GGUF_VALUE_TYPE_UINT64, k_u64s, 2);
    gguf_writer_set_arr(w, "a.i64", GGUF_VALUE_TYPE_INT64, k_i64s, 2);
    gguf_writer_set_arr(w, "a.f64", GGUF_VALUE_TYPE_FLOAT64, k_f64s, 2);
    gguf_writer_set_arr_str(w, "a.str", k_strs, 4);
    gguf_writer_set_arr(w, "a.empty_i32", GGUF_VALUE_TYPE_INT32, NULL, 0);
    gguf_writer_set_arr_str(w, "a.empty_str", NULL, 0);
    for (int i = 0; i < N_TENSORS; i++)
        gguf_writer_add_tensor(w, k_tensors[i].name, k_tensors[i].type, k_tensors[i].n_dims, k_tensors[i].ne);
    bool ok = gguf_writer_begin(w, path, err);
    for (int i = 0; ok && i < N_TENSORS; i++) {
        uint8_t *data = malloc(k_tensors[i].bytes);
        fill_bytes(data, k_tensors[i].bytes, (uint32_t)i);
        ok = gguf_writer_tensor_data(w, data, k_tensors[i].bytes, err);
        free(data);
    }
    ok = ok && gguf_writer_finish(w, err);
    gguf_writer_free(w);
    return ok;
}

#define N_ROUND_TRIP_KV 28

static void check_arr_ints(const gguf_file *f, const char *key, enum gguf_value_type t, const int64_t *want,
                           uint64_t n) {
    enum gguf_value_type et;
    uint64_t count;
    REQUIRE(gguf_get_arr(f, key, &et, &count), "%s", key);
    CHECK(et == t && count == n, "%s: type %d count %llu", key, et, (unsigned long long)count);
    for (uint64_t i = 0; i < n && i < count; i++)
        CHECK(gguf_arr_int(f, key, i) == want[i], "%s[%llu]", key, (unsigned long long)i);
}

static void check_round_trip_kvs(const gguf_file *f) {
    CHECK(gguf_n_kv(f) == N_ROUND_TRIP_KV + (gguf_find_key(f, "general.alignment") >= 0));
    int64_t i64;
    uint64_t u64;
    double d;
    bool b;
    gguf_str s;
    CHECK(gguf_get_str(f, "general.architecture", &s) && str_is(s, "test"));
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.u8")) == GGUF_VALUE_TYPE_UINT8);
    CHECK(gguf_get_uint(f, "s.u8", &u64) && u64 == 200);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.i8")) == GGUF_VALUE_TYPE_INT8);
    CHECK(gguf_get_int(f, "s.i8", &i64) && i64 == -100);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.u16")) == GGUF_VALUE_TYPE_UINT16);
    CHECK(gguf_get_uint(f, "s.u16", &u64) && u64 == 60000);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.i16")) == GGUF_VALUE_TYPE_INT16);
    CHECK(gguf_get_int(f, "s.i16", &i64) && i64 == -30000);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.u32")) == GGUF_VALUE_TYPE_UINT32);
    CHECK(gguf_get_uint(f, "s.u32", &u64) && u64 == 4000000000u);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.i32")) == GGUF_VALUE_TYPE_INT32);
    CHECK(gguf_get_int(f, "s.i32", &i64) && i64 == -2000000000);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.f32")) == GGUF_VALUE_TYPE_FLOAT32);
    CHECK(gguf_get_float(f, "s.f32", &d) && (float)d == 0.1f);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.bool")) == GGUF_VALUE_TYPE_BOOL);
    CHECK(gguf_get_bool(f, "s.bool", &b) && b);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.str")) == GGUF_VALUE_TYPE_STRING);
    CHECK(gguf_get_str(f, "s.str", &s) && str_is(s, "h\xc3\xa9llo"));
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.u64")) == GGUF_VALUE_TYPE_UINT64);
    CHECK(gguf_get_uint(f, "s.u64", &u64) && u64 == UINT64_MAX);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.i64")) == GGUF_VALUE_TYPE_INT64);
    CHECK(gguf_get_int(f, "s.i64", &i64) && i64 == INT64_MIN);
    CHECK(gguf_kv_type(f, gguf_find_key(f, "s.f64")) == GGUF_VALUE_TYPE_FLOAT64);
    CHECK(gguf_get_float(f, "s.f64", &d) && d == 0.1);
    CHECK(gguf_get_str(f, "s.empty_str", &s) && s.len == 0);

    check_arr_ints(f, "a.u8", GGUF_VALUE_TYPE_UINT8, (int64_t[]){0, 1, 255}, 3);
    check_arr_ints(f, "a.i8", GGUF_VALUE_TYPE_INT8, (int64_t[]){-128, 0, 127}, 3);
    check_arr_ints(f, "a.u16", GGUF_VALUE_TYPE_UINT16, (int64_t[]){0, 65535}, 2);
    check_arr_ints(f, "a.i16", GGUF_VALUE_TYPE_INT16, (int64_t[]){-32768, 7}, 2);
    check_arr_ints(f, "a.u32", GGUF_VALUE_TYPE_UINT32, (int64_t[]){1, 2, 4000000000}, 3);
    check_arr_ints(f, "a.i32", GGUF_VALUE_TYPE_INT32, (int64_t[]){-1, 0, 2147483647}, 3);
    check_arr_ints(f, "a.i64", GGUF_VALUE_TYPE_INT64, (int64_t[]){INT64_MIN, 42}, 2);
    check_arr_ints(f, "a.empty_i32", GGUF_VALUE_TYPE_INT32, NULL, 0);
    CHECK(gguf_arr_int(f, "a.u64", 1) == 0);
    const void *p = gguf_arr_data(f, "a.u64");
    CHECK(p && memcmp(p, k_u64s, sizeof(k_u64s)) == 0);
    p = gguf_arr_data(f, "a.bool");
    CHECK(p && memcmp(p, k_bools, sizeof(k_bools)) == 0);
    p = gguf_arr_data(f, "a.f32");
    CHECK(p && memcmp(p, k_f32s, sizeof(k_f32s)) == 0);
    for (int i = 0; i < 3; i++)
        CHECK((float)gguf_arr_float(f, "a.f32", (uint64_t)i) == k_f32s[i]);
    for (int i = 0; i < 2; i++)
        CHECK(gguf_arr_float(f, "a.f64", (uint64_t)i) == k_f64s[i]);

    enum gguf_value_type et;
    uint64_t n;
    CHECK(gguf_get_arr(f, "a.str", &et, &n) && et == GGUF_VALUE_TYPE_STRING && n == 4);
    for (uint64_t i = 0; i < 4 && i < n; i++)
        CHECK(str_is(gguf_arr_str(f, "a.str", i), k_strs[i]), "a.str[%llu]", (unsigned long long)i);
    CHECK(gguf_arr_data(f, "a.str") == NULL);
    CHECK(gguf_get_arr(f, "a.empty_str", &et, &n) && et == GGUF_VALUE_TYPE_STRING && n == 0);
    CHECK(gguf_find_key(f, "absent") == -1 && gguf_find_key(f, "s.u") == -1);
}

static void check_round_trip_tensors(const gguf_file *f, uint32_t alignment) {
    REQUIRE(gguf_n_tensors(f) == N_TENSORS);
    CHECK(gguf_alignment(f) == alignment);
    CHECK((gguf_data_offset(f) & (alignment - 1)) == 0);
    const uint8_t *base = gguf_file_base(f);
    uint64_t expect_offset = 0;
    for (int i = 0; i < N_TENSORS; i++) {
        const tspec *e = &k_tensors[i];
        const gguf_tensor *t = gguf_tensor_at(f, i);
        CHECK(str_is(t->name, e->name), "tensor %d", i);
        CHECK(gguf_find_tensor(f, e->name) == t, "%s", e->name);
        CHECK(t->type == e->type && t->n_dims == e->n_dims, "%s", e->name);
        int64_t n_elems = 1;
        for (int d = 0; d < 4; d++) {
            CHECK(t->ne[d] == e->ne[d], "%s ne[%d]", e->name, d);
            n_elems *= e->ne[d];
        }
        CHECK(t->n_elems == n_elems && t->bytes == e->bytes, "%s", e->name);
        // The layout llama.cpp expects: declaration order, running aligned offsets.
        CHECK(t->offset == expect_offset, "%s offset %llu", e->name, (unsigned long long)t->offset);
        expect_offset += (e->bytes + alignment - 1) / alignment * alignment;
        CHECK((const uint8_t *)t->data == base + gguf_data_offset(f) + t->offset);
        uint8_t *want = malloc(e->bytes);
        fill_bytes(want, e->bytes, (uint32_t)i);
        CHECK(memcmp(t->data, want, e->bytes) == 0, "%s data", e->name);
        free(want);
    }
    CHECK(gguf_file_size(f) == gguf_data_offset(f) + expect_offset);
    CHECK(gguf_find_tensor(f, "t.f3") == NULL && gguf_find_tensor(f, "") == NULL);
}

TEST(gguf_round_trip) {
    ft_err err = {{0}};
    const char *path = test_path("round_trip.gguf");
    REQUIRE(write_round_trip(path, 0, &err), "%s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    CHECK(gguf_version(f) == 3);
    check_round_trip_kvs(f);
    check_round_trip_tensors(f, GGUF_DEFAULT_ALIGNMENT);
    gguf_close(f);

    // The same bytes through a caller's buffer.
    size_t size;
    uint8_t *buf = (uint8_t *)fixture_read_file(path, &size);
    f = gguf_open_buffer(buf, size, &err);
    REQUIRE(f, "%s", err.msg);
    CHECK(gguf_file_base(f) == buf && gguf_file_size(f) == size);
    check_round_trip_kvs(f);
    check_round_trip_tensors(f, GGUF_DEFAULT_ALIGNMENT);
    gguf_close(f);
    free(buf);
}

TEST(gguf_round_trip_alignment) {
    ft_err err = {{0}};
    const char *path = test_path("align64.gguf");
    REQUIRE(write_round_trip(path, 64, &err), "%s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    check_round_trip_kvs(f);
    check_round_trip_tensors(f, 64);
    gguf_close(f);
}

TEST(gguf_getters_convert) {
    ft_err err = {{0}};
    const char *path = test_path("getters.gguf");
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_i32(w, "neg", -3);
    gguf_writer_set_u64(w, "big", UINT64_MAX);
    gguf_writer_set_u8(w, "small", 7);
    gguf_writer_set_f32(w, "f", 2.5f);
    gguf_writer_set_str(w, "s", "x");
    gguf_writer_set_u32(w, "replaced", 1);
    gguf_writer_set_str(w, "after", "y");
    gguf_writer_set_str(w, "replaced", "now a string"); // keeps its place, changes type
    REQUIRE(gguf_writer_begin(w, path, &err) && gguf_writer_finish(w, &err), "%s", err.msg);
    gguf_writer_free(w);
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    int64_t i = 99;
    uint64_t u = 99;
    double d = 99;
    bool b = false;
    gguf_str s;
    CHECK(gguf_get_int(f, "neg", &i) && i == -3);
    CHECK(!gguf_get_uint(f, "neg", &u) && u == 99); // negative does not fit, out untouched
    CHECK(gguf_get_uint(f, "big", &u) && u == UINT64_MAX);
    CHECK(!gguf_get_int(f, "big", &i) && i == -3);
    CHECK(gguf_get_int(f, "small", &i) && i == 7);
    CHECK(gguf_get_uint(f, "small", &u) && u == 7);
    CHECK(gguf_get_float(f, "f", &d) && d == 2.5);
    CHECK(!gguf_get_float(f, "small", &d) && !gguf_get_int(f, "f", &i));
    CHECK(!gguf_get_str(f, "small", &s) && !gguf_get_bool(f, "small", &b));
    CHECK(!gguf_get_int(f, "s", &i) && !gguf_get_int(f, "absent", &i));
    enum gguf_value_type et;
    CHECK(!gguf_get_arr(f, "s", &et, &u));
    CHECK(gguf_arr_data(f, "small") == NULL && gguf_arr_data(f, "absent") == NULL);
    REQUIRE(gguf_n_kv(f) == 7);
    CHECK(str_is(gguf_kv_key(f, 5), "replaced") && gguf_kv_type(f, 5) == GGUF_VALUE_TYPE_STRING);
    CHECK(str_is(gguf_kv_key(f, 6), "after"));
    CHECK(gguf_n_tensors(f) == 0 && gguf_data_offset(f) <= gguf_file_size(f));
    gguf_close(f);
}

// ---------------------------------------------------------------------------------------------
// Version 2, written by hand: the same 64-bit layout as v3.

TEST(gguf_v2_by_hand) {
    fixture_buf b = {0};
    fixture_buf_put(&b, "GGUF", 4);
    fixture_buf_u32(&b, 2);
    fixture_buf_u64(&b, 1); // n_tensors
    fixture_buf_u64(&b, 2); // n_kv
    fixture_buf_str(&b, "general.name");
    fixture_buf_u32(&b, GGUF_VALUE_TYPE_STRING);
    fixture_buf_str(&b, "v2 model");
    fixture_buf_str(&b, "x.ids");
    fixture_buf_u32(&b, GGUF_VALUE_TYPE_ARRAY);
    fixture_buf_u32(&b, GGUF_VALUE_TYPE_INT32);
    fixture_buf_u64(&b, 2);
    fixture_buf_u32(&b, 5);
    fixture_buf_u32(&b, (uint32_t)-6);
    fixture_buf_str(&b, "w");
    fixture_buf_u32(&b, 2); // n_dims
    fixture_buf_u64(&b, 2);
    fixture_buf_u64(&b, 3);
    fixture_buf_u32(&b, FT_TYPE_F32);
    fixture_buf_u64(&b, 0); // offset
    size_t data_at = (b.n + 31) / 32 * 32;
    while (b.n < data_at)
        fixture_buf_u8(&b, 0);
    for (int i = 0; i < 6; i++) {
        float v = (float)i + 0.5f;
        fixture_buf_put(&b, &v, 4);
    }
    ft_err err = {{0}};
    gguf_file *f = gguf_open_buffer(b.p, b.n, &err);
    REQUIRE(f, "%s", err.msg);
    CHECK(gguf_version(f) == 2);
    gguf_str s;
    CHECK(gguf_get_str(f, "general.name", &s) && str_is(s, "v2 model"));
    CHECK(gguf_arr_int(f, "x.ids", 0) == 5 && gguf_arr_int(f, "x.ids", 1) == -6);
    const gguf_tensor *t = gguf_find_tensor(f, "w");
    REQUIRE(t);
    CHECK(t->n_dims == 2 && t->ne[0] == 2 && t->ne[1] == 3 && t->type == FT_TYPE_F32);
    CHECK(gguf_data_offset(f) == data_at && t->bytes == 24);
    float v;
    memcpy(&v, (const uint8_t *)t->data + 20, 4);
    CHECK(v == 5.5f);
    gguf_close(f);
    fixture_buf_free(&b);
}

// ---------------------------------------------------------------------------------------------
// Printing values

static void check_format(const gguf_file *f, const char *key, const char *want) {
    char buf[256];
    int64_t i = gguf_find_key(f, key);
    REQUIRE(i >= 0, "%s", key);
    gguf_kv_format(f, i, buf, sizeof(buf));
    CHECK(strcmp(buf, want) == 0, "%s: got <%s> want <%s>", key, buf, want);
}

TEST(gguf_kv_format_values) {
    ft_err err = {{0}};
    const char *path = test_path("format.gguf");
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_u32(w, "u32", 42);
    gguf_writer_set_i8(w, "i8", -5);
    gguf_writer_set_f32(w, "f32", 0.1f);
    gguf_writer_set_f32(w, "rope", 1000000.0f);
    gguf_writer_set_f64(w, "f64", 0.1);
    gguf_writer_set_bool(w, "bool", false);
    gguf_writer_set_str(w, "str", "say \"hi\"\n");
    char longs[201];
    memset(longs, 'a', 200);
    longs[200] = 0;
    gguf_writer_set_str(w, "long", longs);
    gguf_writer_set_arr(w, "ints", GGUF_VALUE_TYPE_INT32, (int32_t[]){1, -2, 3}, 3);
    gguf_writer_set_arr(w, "none", GGUF_VALUE_TYPE_FLOAT32, NULL, 0);
    const char *toks[] = {"!", "\"", "#", "$", "%", "&", "'", "(", ")", "*"};
    gguf_writer_set_arr_str(w, "toks", toks, 10);
    REQUIRE(gguf_writer_begin(w, path, &err) && gguf_writer_finish(w, &err), "%s", err.msg);
    gguf_writer_free(w);
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    check_format(f, "u32", "42");
    check_format(f, "i8", "-5");
    check_format(f, "f32", "0.1");
    check_format(f, "rope", "1000000");
    check_format(f, "f64", "0.1");
    check_format(f, "bool", "false");
    check_format(f, "str", "\"say \\\"hi\\\"\\n\"");
    check_format(f, "ints", "[3 int32: 1, -2, 3]");
    check_format(f, "none", "[0 float32]");
    check_format(f, "toks", "[10 strings: \"!\", \"\\\"\", \"#\", \"$\", \"%\", \"&\", \"'\", \"(\", ...]");
    char buf[256];
    gguf_kv_format(f, gguf_find_key(f, "long"), buf, sizeof(buf));
    size_t n = strlen(buf);
    CHECK(n > 20 && n < 100 && strncmp(buf, "\"aaaa", 5) == 0 && strcmp(buf + n - 4, "...\"") == 0, "%s",
          buf);
    // A small buffer is cut, never overrun.
    for (size_t size = 1; size < 12; size++) {
        memset(buf, 'X', sizeof(buf));
        gguf_kv_format(f, gguf_find_key(f, "toks"), buf, size);
        CHECK(strlen(buf) < size && buf[size] == 'X', "size %zu", size);
    }
    gguf_close(f);
}

// ---------------------------------------------------------------------------------------------
// Real files: llama.cpp's vocabulary-only GGUFs.

static void check_vocab_file(const char *path) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    gguf_str model;
    CHECK(gguf_get_str(f, "tokenizer.ggml.model", &model) && model.len > 0, "%s", path);
    enum gguf_value_type et;
    uint64_t n_tokens = 0, n;
    REQUIRE(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n_tokens), "%s", path);
    CHECK(et == GGUF_VALUE_TYPE_STRING && n_tokens > 1000, "%s", path);
    // Indexing every token is O(1) each; they are non-empty.
    uint64_t empty = 0;
    for (uint64_t i = 0; i < n_tokens; i++)
        empty += gguf_arr_str(f, "tokenizer.ggml.tokens", i).len == 0;
    CHECK(empty == 0, "%s: %llu empty tokens", path, (unsigned long long)empty);
    if (gguf_get_arr(f, "tokenizer.ggml.scores", &et, &n))
        CHECK(et == GGUF_VALUE_TYPE_FLOAT32 && n == n_tokens, "%s scores", path);
    if (gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n))
        CHECK(et == GGUF_VALUE_TYPE_INT32 && n == n_tokens, "%s token_type", path);
    if (gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n)) {
        CHECK(et == GGUF_VALUE_TYPE_STRING && n > 0, "%s merges", path);
        gguf_str m = gguf_arr_str(f, "tokenizer.ggml.merges", n - 1);
        CHECK(memchr(m.ptr, ' ', m.len) != NULL, "%s: a merge is two tokens and a space", path);
    }
    uint64_t id;
    if (gguf_get_uint(f, "tokenizer.ggml.bos_token_id", &id)) CHECK(id < n_tokens, "%s", path);
    if (gguf_get_uint(f, "tokenizer.ggml.eos_token_id", &id)) CHECK(id < n_tokens, "%s", path);
    char buf[256], want[64];
    gguf_kv_format(f, gguf_find_key(f, "tokenizer.ggml.tokens"), buf, sizeof(buf));
    snprintf(want, sizeof(want), "[%llu strings: \"", (unsigned long long)n_tokens);
    CHECK(strncmp(buf, want, strlen(want)) == 0, "%s", buf);
    // Every key formats.
    for (int64_t i = 0; i < gguf_n_kv(f); i++)
        gguf_kv_format(f, i, buf, sizeof(buf));

    // <arch>.vocab_size, where present, counts the tokens.
    gguf_str arch;
    if (gguf_get_str(f, "general.architecture", &arch)) {
        char key[128];
        snprintf(key, sizeof(key), "%.*s.vocab_size", (int)FT_MIN(arch.len, 100), arch.ptr);
        if (gguf_get_uint(f, key, &id)) CHECK(id == n_tokens, "%s: %s", path, key);
    }
    // Known facts of these tokenizers.
    static const struct {
        const char *file, *model, *first_token;
        uint64_t n_tokens, n_merges, bos;
    } known[] = {
        {"ggml-vocab-qwen2.gguf", "gpt2", "!", 151936, 151387, 151643},
        {"ggml-vocab-gpt-2.gguf", "gpt2", "!", 50257, 50000, 50256},
        {"ggml-vocab-llama-bpe.gguf", "gpt2", "!", 128256, 280147, 128000},
        {"ggml-vocab-llama-spm.gguf", "llama", "<unk>", 32000, 0, 1},
    };
    for (size_t k = 0; k < FT_ARRAY_LEN(known); k++) {
        if (!strstr(path, known[k].file)) continue;
        CHECK(gguf_str_eq(model, known[k].model), "%s", path);
        CHECK(n_tokens == known[k].n_tokens, "%s: %llu tokens", path, (unsigned long long)n_tokens);
        CHECK(str_is(gguf_arr_str(f, "tokenizer.ggml.tokens", 0), known[k].first_token), "%s", path);
        n = 0;
        gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n);
        CHECK(n == known[k].n_merges, "%s: %llu merges", path, (unsigned long long)n);
        CHECK(gguf_get_uint(f, "tokenizer.ggml.bos_token_id", &id) && id == known[k].bos, "%s", path);
    }
    gguf_close(f);
}

TEST(gguf_vocab_files) {
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/vocab", test_shared_dir());
    DIR *d = opendir(dir);
    if (!d) {
        test_skip("no %s", dir);
        return;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        check_vocab_file(path);
        n++;
    }
    closedir(d);
    CHECK(n >= 4, "found %d vocab files", n);
}

// Copying a tokenizer from a real file: every key, arrays of strings included.
TEST(gguf_copy_tokenizer) {
    char src[512];
    snprintf(src, sizeof(src), "%s/vocab/ggml-vocab-qwen2.gguf", test_shared_dir());
    ft_err err = {{0}};
    gguf_file *a = gguf_open(src, &err);
    if (!a) {
        test_skip("%s", err.msg);
        return;
    }
    const char *path = test_path("copied.gguf");
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "qwen3moe");
    for (int64_t i = 0; i < gguf_n_kv(a); i++)
        gguf_writer_copy_kv(w, a, i);
    int64_t ne[2] = {32, 4};
    gguf_writer_add_tensor(w, "token_embd.weight", FT_TYPE_Q8_0, 2, ne);
    uint8_t data[4 * 34];
    fill_bytes(data, sizeof(data), 9);
    REQUIRE(gguf_writer_begin(w, path, &err) && gguf_writer_tensor_data(w, data, sizeof(data), &err) &&
                gguf_writer_finish(w, &err),
            "%s", err.msg);
    gguf_writer_free(w);
    gguf_file *b = gguf_open(path, &err);
    REQUIRE(b, "%s", err.msg);
    CHECK(gguf_n_kv(b) == gguf_n_kv(a) + (gguf_find_key(a, "general.architecture") < 0));
    for (int64_t i = 0; i < gguf_n_kv(a); i++) {
        gguf_str k = gguf_kv_key(a, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)k.len, k.ptr);
        int64_t j = gguf_find_key(b, key);
        REQUIRE(j >= 0, "%s", key);
        CHECK(gguf_kv_type(a, i) == gguf_kv_type(b, j), "%s", key);
        char fa[256], fb[256];
        gguf_kv_format(a, i, fa, sizeof(fa));
        gguf_kv_format(b, j, fb, sizeof(fb));
        CHECK(strcmp(fa, fb) == 0, "%s", key);
        enum gguf_value_type et;
        uint64_t n;
        if (gguf_get_arr(a, key, &et, &n) && et == GGUF_VALUE_TYPE_STRING) {
            uint64_t diff = 0;
            for (uint64_t e = 0; e < n; e++) {
                gguf_str x = gguf_arr_str(a, key, e), y = gguf_arr_str(b, key, e);
                diff += x.len != y.len || memcmp(x.ptr, y.ptr, x.len) != 0;
            }
            CHECK(diff == 0, "%s: %llu strings differ", key, (unsigned long long)diff);
        }
    }
    const gguf_tensor *t = gguf_find_tensor(b, "token_embd.weight");
    CHECK(t && memcmp(t->data, data, sizeof(data)) == 0);
    gguf_close(a);
    gguf_close(b);
}

// Many tensors and a 150k-string array: every lookup works (and stays fast enough to run here).
TEST(gguf_many_entries) {
    ft_err err = {{0}};
    const char *path = test_path("many.gguf");
    enum { N_T = 3000, N_S = 150000 };
    gguf_writer *w = gguf_writer_init();
    char **strs = malloc(N_S * sizeof(*strs));
    for (int i = 0; i < N_S; i++) {
        strs[i] = malloc(16);
        snprintf(strs[i], 16, "tok%d", i);
    }
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)strs, N_S);
    for (int i = 0; i < N_T; i++) {
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.weight", i);
        int64_t ne[1] = {1};
        CHECK(gguf_writer_add_tensor(w, name, FT_TYPE_F32, 1, ne) == i);
    }
    REQUIRE(gguf_writer_begin(w, path, &err), "%s", err.msg);
    float one = 1;
    for (int i = 0; i < N_T; i++)
        REQUIRE(gguf_writer_tensor_data(w, &one, 4, &err), "%s", err.msg);
    REQUIRE(gguf_writer_finish(w, &err), "%s", err.msg);
    gguf_writer_free(w);
    double t0 = ft_time_s();
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    int missing = 0;
    for (int i = N_T - 1; i >= 0; i--) {
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.weight", i);
        const gguf_tensor *t = gguf_find_tensor(f, name);
        missing += !t || t != gguf_tensor_at(f, i);
    }
    CHECK(missing == 0);
    int wrong = 0;
    for (int i = N_S - 1; i >= 0; i--)
        wrong += !str_is(gguf_arr_str(f, "tokenizer.ggml.tokens", (uint64_t)i), strs[i]);
    CHECK(wrong == 0);
    CHECK(ft_time_s() - t0 < 5.0, "open and lookups took %.2f s", ft_time_s() - t0);
    gguf_close(f);
    for (int i = 0; i < N_S; i++)
        free(strs[i]);
    free(strs);
}

// ---------------------------------------------------------------------------------------------
// Writer errors

TEST(gguf_writer_io_errors) {
    ft_err err = {{0}};
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_u32(w, "k", 1);
    CHECK(!gguf_writer_begin(w, "/nonexistent-ft-dir/x.gguf", &err));
    CHECK(strstr(err.msg, "/nonexistent-ft-dir/x.gguf") && strstr(err.msg, "No such file"), "%s", err.msg);
    CHECK(!gguf_writer_finish(w, &err) && strstr(err.msg, "earlier"), "%s", err.msg);
    gguf_writer_free(w);

    // A directory is not writable as a file.
    w = gguf_writer_init();
    CHECK(!gguf_writer_begin(w, test_tmpdir(), &err) && strstr(err.msg, "cannot create"), "%s", err.msg);
    gguf_writer_free(w);

    // A full disk shows at the latest when the file is flushed.
    struct stat st;
    if (stat("/dev/full", &st) == 0) {
        w = gguf_writer_init();
        int64_t ne[1] = {1 << 20};
        gguf_writer_add_tensor(w, "big", FT_TYPE_F32, 1, ne);
        float *data = calloc(1 << 20, sizeof(float));
        bool ok = gguf_writer_begin(w, "/dev/full", &err) &&
                  gguf_writer_tensor_data(w, data, 4u << 20, &err) && gguf_writer_finish(w, &err);
        CHECK(!ok && strstr(err.msg, "No space left"), "%s", err.msg);
        free(data);
        gguf_writer_free(w);
    }

    // Data missing for a tensor.
    w = gguf_writer_init();
    int64_t ne[1] = {4};
    gguf_writer_add_tensor(w, "a", FT_TYPE_F32, 1, ne);
    gguf_writer_add_tensor(w, "b", FT_TYPE_F32, 1, ne);
    float four[4] = {0};
    CHECK(gguf_writer_begin(w, test_path("short.gguf"), &err) &&
          gguf_writer_tensor_data(w, four, sizeof(four), &err));
    CHECK(!gguf_writer_finish(w, &err) && strstr(err.msg, "1 of 2 tensors"), "%s", err.msg);
    gguf_writer_free(w);
}

TEST(gguf_open_errors) {
    ft_err err = {{0}};
    CHECK(!gguf_open("/nonexistent-ft-dir/x.gguf", &err) && strstr(err.msg, "No such file"), "%s", err.msg);
    CHECK(!gguf_open(test_tmpdir(), &err) && strstr(err.msg, "not a regular file"), "%s", err.msg);
    const char *empty = test_path("empty.gguf");
    REQUIRE(write_whole(empty, "", 0));
    CHECK(!gguf_open(empty, &err) && strstr(err.msg, empty) && strstr(err.msg, "end of file"), "%s", err.msg);
    CHECK(!gguf_open_buffer(NULL, 0, &err) && strstr(err.msg, "magic"), "%s", err.msg);
    CHECK(!gguf_open_buffer(NULL, 0, NULL)); // err may be NULL
}

// ---------------------------------------------------------------------------------------------
// llama.cpp as the truth: its own GGUF reader and writer from libggml-base.

struct ggml_context;
struct gguf_context;
struct gguf_init_params {
    bool no_alloc;
    struct ggml_context **ctx;
};

typedef struct llama_gguf {
    struct gguf_context *(*init_from_file)(const char *, struct gguf_init_params);
    struct gguf_context *(*init_empty)(void);
    void (*free)(struct gguf_context *);
    uint32_t (*version)(const struct gguf_context *);
    size_t (*alignment)(const struct gguf_context *);
    size_t (*data_offset)(const struct gguf_context *);
    int64_t (*n_kv)(const struct gguf_context *);
    int64_t (*find_key)(const struct gguf_context *, const char *);
    const char *(*key)(const struct gguf_context *, int64_t);
    int (*kv_type)(const struct gguf_context *, int64_t);
    int (*arr_type)(const struct gguf_context *, int64_t);
    const void *(*val_data)(const struct gguf_context *, int64_t);
    const char *(*val_str)(const struct gguf_context *, int64_t);
    size_t (*arr_n)(const struct gguf_context *, int64_t);
    const void *(*arr_data)(const struct gguf_context *, int64_t);
    const char *(*arr_str)(const struct gguf_context *, int64_t, size_t);
    int64_t (*n_tensors)(const struct gguf_context *);
    const char *(*tensor_name)(const struct gguf_context *, int64_t);
    int (*tensor_type)(const struct gguf_context *, int64_t);
    size_t (*tensor_offset)(const struct gguf_context *, int64_t);
    const int64_t *(*tensor_ne)(const struct gguf_context *, int64_t);
    size_t (*tensor_size)(const struct gguf_context *, int64_t);
    void (*set_u8)(struct gguf_context *, const char *, uint8_t);
    void (*set_i8)(struct gguf_context *, const char *, int8_t);
    void (*set_u16)(struct gguf_context *, const char *, uint16_t);
    void (*set_i16)(struct gguf_context *, const char *, int16_t);
    void (*set_u32)(struct gguf_context *, const char *, uint32_t);
    void (*set_i32)(struct gguf_context *, const char *, int32_t);
    void (*set_f32)(struct gguf_context *, const char *, float);
    void (*set_u64)(struct gguf_context *, const char *, uint64_t);
    void (*set_i64)(struct gguf_context *, const char *, int64_t);
    void (*set_f64)(struct gguf_context *, const char *, double);
    void (*set_bool)(struct gguf_context *, const char *, bool);
    void (*set_str)(struct gguf_context *, const char *, const char *);
    void (*set_arr_data)(struct gguf_context *, const char *, int, const void *, size_t);
    void (*set_arr_str)(struct gguf_context *, const char *, const char **, size_t);
    bool (*write_to_file)(const struct gguf_context *, const char *, bool);
} llama_gguf;

static bool load_llama_gguf(llama_gguf *g) {
    void *lib = oracle_ggml_base();
    if (!lib) return false;
    struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&g->init_from_file, "gguf_init_from_file"},
        {(void **)&g->init_empty, "gguf_init_empty"},
        {(void **)&g->free, "gguf_free"},
        {(void **)&g->version, "gguf_get_version"},
        {(void **)&g->alignment, "gguf_get_alignment"},
        {(void **)&g->data_offset, "gguf_get_data_offset"},
        {(void **)&g->n_kv, "gguf_get_n_kv"},
        {(void **)&g->find_key, "gguf_find_key"},
        {(void **)&g->key, "gguf_get_key"},
        {(void **)&g->kv_type, "gguf_get_kv_type"},
        {(void **)&g->arr_type, "gguf_get_arr_type"},
        {(void **)&g->val_data, "gguf_get_val_data"},
        {(void **)&g->val_str, "gguf_get_val_str"},
        {(void **)&g->arr_n, "gguf_get_arr_n"},
        {(void **)&g->arr_data, "gguf_get_arr_data"},
        {(void **)&g->arr_str, "gguf_get_arr_str"},
        {(void **)&g->n_tensors, "gguf_get_n_tensors"},
        {(void **)&g->tensor_name, "gguf_get_tensor_name"},
        {(void **)&g->tensor_type, "gguf_get_tensor_type"},
        {(void **)&g->tensor_offset, "gguf_get_tensor_offset"},
        {(void **)&g->tensor_ne, "gguf_get_tensor_ne"},
        {(void **)&g->tensor_size, "gguf_get_tensor_size"},
        {(void **)&g->set_u8, "gguf_set_val_u8"},
        {(void **)&g->set_i8, "gguf_set_val_i8"},
        {(void **)&g->set_u16, "gguf_set_val_u16"},
        {(void **)&g->set_i16, "gguf_set_val_i16"},
        {(void **)&g->set_u32, "gguf_set_val_u32"},
        {(void **)&g->set_i32, "gguf_set_val_i32"},
        {(void **)&g->set_f32, "gguf_set_val_f32"},
        {(void **)&g->set_u64, "gguf_set_val_u64"},
        {(void **)&g->set_i64, "gguf_set_val_i64"},
        {(void **)&g->set_f64, "gguf_set_val_f64"},
        {(void **)&g->set_bool, "gguf_set_val_bool"},
        {(void **)&g->set_str, "gguf_set_val_str"},
        {(void **)&g->set_arr_data, "gguf_set_arr_data"},
        {(void **)&g->set_arr_str, "gguf_set_arr_str"},
        {(void **)&g->write_to_file, "gguf_write_to_file"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(syms); i++) {
        *syms[i].fn = oracle_sym(lib, syms[i].name);
        if (!*syms[i].fn) return false;
    }
    return true;
}

// Bytes of a fixed-size value type, by the GGUF spec.
static size_t width_of(enum gguf_value_type t) {
    static const size_t w[GGUF_VALUE_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return w[t];
}

// A scalar (not a string) as llama.cpp holds it against our typed getters.
static void compare_scalar(const void *theirs, enum gguf_value_type t, const gguf_file *f, const char *key) {
    int64_t si;
    uint64_t ui;
    double d;
    bool b;
    if (t == GGUF_VALUE_TYPE_FLOAT32 || t == GGUF_VALUE_TYPE_FLOAT64) {
        double ld;
        if (t == GGUF_VALUE_TYPE_FLOAT32) {
            float lf;
            memcpy(&lf, theirs, 4);
            ld = lf;
        } else {
            memcpy(&ld, theirs, 8);
        }
        CHECK(gguf_get_float(f, key, &d) && d == ld, "%s", key);
    } else if (t == GGUF_VALUE_TYPE_BOOL) {
        CHECK(gguf_get_bool(f, key, &b) && b == (*(const uint8_t *)theirs != 0), "%s", key);
    } else {
        // Integers: our value truncated to the width must be their bytes (little-endian).
        uint64_t mine = 0, raw = 0;
        if (gguf_get_int(f, key, &si))
            memcpy(&mine, &si, width_of(t));
        else
            CHECK(gguf_get_uint(f, key, &ui) && (memcpy(&mine, &ui, width_of(t)), true), "%s", key);
        memcpy(&raw, theirs, width_of(t));
        CHECK(mine == raw, "%s", key);
    }
}

// Does llama.cpp see in key i of its context what we see in key i of ours?
static void compare_kv(const llama_gguf *g, const struct gguf_context *ctx, const gguf_file *f, int64_t i) {
    const char *key = g->key(ctx, i);
    REQUIRE(str_is(gguf_kv_key(f, i), key), "key %lld: llama.cpp sees '%s'", (long long)i, key);
    enum gguf_value_type t = gguf_kv_type(f, i);
    REQUIRE(g->kv_type(ctx, i) == (int)t, "%s: type %d vs %d", key, g->kv_type(ctx, i), t);
    if (t == GGUF_VALUE_TYPE_STRING) {
        gguf_str s;
        CHECK(gguf_get_str(f, key, &s) && str_is(s, g->val_str(ctx, i)), "%s", key);
        return;
    }
    if (t != GGUF_VALUE_TYPE_ARRAY) {
        compare_scalar(g->val_data(ctx, i), t, f, key);
        return;
    }
    enum gguf_value_type et;
    uint64_t n;
    REQUIRE(gguf_get_arr(f, key, &et, &n));
    CHECK(g->arr_type(ctx, i) == (int)et && g->arr_n(ctx, i) == n, "%s", key);
    if (et == GGUF_VALUE_TYPE_STRING) {
        uint64_t diff = 0;
        for (uint64_t e = 0; e < n; e++)
            diff += !str_is(gguf_arr_str(f, key, e), g->arr_str(ctx, i, e));
        CHECK(diff == 0, "%s: %llu strings differ", key, (unsigned long long)diff);
    } else if (n > 0) {
        CHECK(memcmp(gguf_arr_data(f, key), g->arr_data(ctx, i), n * width_of(et)) == 0, "%s", key);
    }
}

static void compare_with_llama(const llama_gguf *g, const char *path) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    struct gguf_context *ctx = g->init_from_file(path, (struct gguf_init_params){true, NULL});
    if (!ctx) {
        test_fail(__FILE__, __LINE__, "llama.cpp could not read %s", path);
        gguf_close(f);
        return;
    }
    CHECK(g->version(ctx) == gguf_version(f));
    CHECK(g->alignment(ctx) == gguf_alignment(f));
    CHECK(g->data_offset(ctx) == gguf_data_offset(f), "%zu vs %llu", g->data_offset(ctx),
          (unsigned long long)gguf_data_offset(f));
    CHECK(g->n_kv(ctx) == gguf_n_kv(f));
    for (int64_t i = 0; i < gguf_n_kv(f) && i < g->n_kv(ctx); i++)
        compare_kv(g, ctx, f, i);
    CHECK(g->n_tensors(ctx) == gguf_n_tensors(f));
    for (int64_t i = 0; i < gguf_n_tensors(f) && i < g->n_tensors(ctx); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const char *name = g->tensor_name(ctx, i);
        CHECK(str_is(t->name, name), "tensor %lld: %s", (long long)i, name);
        CHECK(g->tensor_type(ctx, i) == (int)t->type, "%s", name);
        CHECK(g->tensor_offset(ctx, i) == t->offset, "%s", name);
        CHECK(g->tensor_size(ctx, i) == t->bytes, "%s", name);
        const int64_t *ne = g->tensor_ne(ctx, i);
        for (int d = 0; d < 4; d++)
            CHECK(ne[d] == t->ne[d], "%s ne[%d]", name, d);
    }
    g->free(ctx);
    gguf_close(f);
}

TEST(gguf_oracle_reads_ours) {
    llama_gguf g;
    if (!load_llama_gguf(&g)) return;
    ft_err err = {{0}};
    const char *a = test_path("oracle_default.gguf"), *b = test_path("oracle_align64.gguf");
    REQUIRE(write_round_trip(a, 0, &err), "%s", err.msg);
    REQUIRE(write_round_trip(b, 64, &err), "%s", err.msg);
    compare_with_llama(&g, a);
    compare_with_llama(&g, b);
}

// llama.cpp's view of its own vocabulary files (150k-string arrays) matches ours, key by key.
TEST(gguf_oracle_vocab_files) {
    llama_gguf g;
    if (!load_llama_gguf(&g)) return;
    static const char *const files[] = {"ggml-vocab-qwen2.gguf", "ggml-vocab-llama-spm.gguf"};
    for (size_t i = 0; i < FT_ARRAY_LEN(files); i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/vocab/%s", test_shared_dir(), files[i]);
        struct stat st;
        if (stat(path, &st) != 0) {
            test_skip("no %s", path);
            continue;
        }
        compare_with_llama(&g, path);
    }
}

TEST(gguf_oracle_writes_we_read) {
    llama_gguf g;
    if (!load_llama_gguf(&g)) return;
    struct gguf_context *ctx = g.init_empty();
    g.set_u8(ctx, "s.u8", 200);
    g.set_i8(ctx, "s.i8", -100);
    g.set_u16(ctx, "s.u16", 60000);
    g.set_i16(ctx, "s.i16", -30000);
    g.set_u32(ctx, "s.u32", 4000000000u);
    g.set_i32(ctx, "s.i32", -2000000000);
    g.set_f32(ctx, "s.f32", 0.1f);
    g.set_bool(ctx, "s.bool", true);
    g.set_str(ctx, "s.str", "h\xc3\xa9llo");
    g.set_u64(ctx, "s.u64", UINT64_MAX);
    g.set_i64(ctx, "s.i64", INT64_MIN);
    g.set_f64(ctx, "s.f64", 0.1);
    g.set_arr_data(ctx, "a.i16", GGUF_VALUE_TYPE_INT16, k_i16s, 2);
    g.set_arr_data(ctx, "a.f32", GGUF_VALUE_TYPE_FLOAT32, k_f32s, 3);
    g.set_arr_data(ctx, "a.u64", GGUF_VALUE_TYPE_UINT64, k_u64s, 2);
    g.set_arr_data(ctx, "a.bool", GGUF_VALUE_TYPE_BOOL, k_bools, 3);
    g.set_arr_str(ctx, "a.str", (const char **)k_strs, 4);
    g.set_arr_str(ctx, "a.empty", NULL, 0);
    const char *path = test_path("by_llama.gguf");
    REQUIRE(g.write_to_file(ctx, path, false));
    g.free(ctx);

    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    REQUIRE(gguf_n_kv(f) == 18);
    int64_t i;
    uint64_t u;
    double d;
    bool b;
    gguf_str s;
    CHECK(gguf_get_uint(f, "s.u8", &u) && u == 200);
    CHECK(gguf_get_int(f, "s.i8", &i) && i == -100);
    CHECK(gguf_get_uint(f, "s.u16", &u) && u == 60000);
    CHECK(gguf_get_int(f, "s.i16", &i) && i == -30000);
    CHECK(gguf_get_uint(f, "s.u32", &u) && u == 4000000000u);
    CHECK(gguf_get_int(f, "s.i32", &i) && i == -2000000000);
    CHECK(gguf_get_float(f, "s.f32", &d) && (float)d == 0.1f);
    CHECK(gguf_get_bool(f, "s.bool", &b) && b);
    CHECK(gguf_get_str(f, "s.str", &s) && str_is(s, "h\xc3\xa9llo"));
    CHECK(gguf_get_uint(f, "s.u64", &u) && u == UINT64_MAX);
    CHECK(gguf_get_int(f, "s.i64", &i) && i == INT64_MIN);
    CHECK(gguf_get_float(f, "s.f64", &d) && d == 0.1);
    CHECK(gguf_arr_int(f, "a.i16", 0) == -32768 && gguf_arr_int(f, "a.i16", 1) == 7);
    CHECK(memcmp(gguf_arr_data(f, "a.f32"), k_f32s, sizeof(k_f32s)) == 0);
    CHECK(memcmp(gguf_arr_data(f, "a.u64"), k_u64s, sizeof(k_u64s)) == 0);
    CHECK(memcmp(gguf_arr_data(f, "a.bool"), k_bools, sizeof(k_bools)) == 0);
    for (uint64_t e = 0; e < 4; e++)
        CHECK(str_is(gguf_arr_str(f, "a.str", e), k_strs[e]));
    enum gguf_value_type et;
    CHECK(gguf_get_arr(f, "a.empty", &et, &u) && et == GGUF_VALUE_TYPE_STRING && u == 0);
    gguf_close(f);
}

// ---------------------------------------------------------------------------------------------
// Fuzzing seeds: small valid files. With FT_GGUF_SEED_DIR set, they are also written there
// (that is how fuzz/seeds/fuzz_gguf/ was made; no .gguf suffix, which .gitignore ignores).

static bool write_seed(const char *dir, const char *name, int kind, ft_err *err) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    gguf_writer *w = gguf_writer_init();
    static const char *const toks[] = {"<s>", "</s>", "a", "b", "ab", "\xc4\xa0", "\"", ""};
    static const char *const merges[] = {"a b", "\xc4\xa0 a"};
    static const float scores[] = {0, 0, -1, -2, -3, -4, -5, -6};
    static const int32_t ttype[] = {3, 3, 1, 1, 1, 1, 1, 1};
    if (kind == 0) { // every value type
        gguf_writer_set_str(w, "general.architecture", "qwen3moe");
        gguf_writer_set_u8(w, "u8", 1);
        gguf_writer_set_i8(w, "i8", -1);
        gguf_writer_set_u16(w, "u16", 2);
        gguf_writer_set_i16(w, "i16", -2);
        gguf_writer_set_u32(w, "u32", 3);
        gguf_writer_set_i32(w, "i32", -3);
        gguf_writer_set_f32(w, "f32", 0.5f);
        gguf_writer_set_bool(w, "bool", true);
        gguf_writer_set_u64(w, "u64", 4);
        gguf_writer_set_i64(w, "i64", -4);
        gguf_writer_set_f64(w, "f64", 0.25);
        gguf_writer_set_arr(w, "a.bool", GGUF_VALUE_TYPE_BOOL, k_bools, 3);
        gguf_writer_set_arr(w, "a.u16", GGUF_VALUE_TYPE_UINT16, k_u16s, 2);
        gguf_writer_set_arr_str(w, "a.str", toks, 3);
    } else if (kind == 1) { // a tokenizer, no tensors
        gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 8);
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VALUE_TYPE_FLOAT32, scores, 8);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, ttype, 8);
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 2);
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0);
    } else if (kind == 2) { // tensors of several types and ranks, alignment 64
        gguf_writer_set_u32(w, "general.alignment", 64);
        gguf_writer_add_tensor(w, "a", FT_TYPE_F32, 1, (int64_t[]){3});
        gguf_writer_add_tensor(w, "b", FT_TYPE_Q8_0, 2, (int64_t[]){32, 2});
        gguf_writer_add_tensor(w, "c", FT_TYPE_F16, 3, (int64_t[]){2, 2, 2});
        gguf_writer_add_tensor(w, "d", FT_TYPE_BF16, 4, (int64_t[]){1, 2, 1, 3});
        gguf_writer_add_tensor(w, "e", FT_TYPE_Q4_K, 1, (int64_t[]){256});
    } // kind 3: empty
    bool ok = gguf_writer_begin(w, path, err);
    for (int64_t i = 0; ok && kind == 2 && i < 5; i++) {
        static const uint64_t sizes[] = {12, 68, 16, 12, 144};
        uint8_t data[144];
        fill_bytes(data, sizes[i], (uint32_t)i);
        ok = gguf_writer_tensor_data(w, data, sizes[i], err);
    }
    ok = ok && gguf_writer_finish(w, err);
    gguf_writer_free(w);
    return ok;
}

static void check_seed_dir(const char *dir, int want_at_least) {
    DIR *d = opendir(dir);
    REQUIRE(d, "%s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        size_t size;
        uint8_t *buf = (uint8_t *)fixture_read_file(path, &size);
        REQUIRE(buf, "%s", path);
        ft_err err = {{0}};
        gguf_file *f = gguf_open_buffer(buf, size, &err);
        CHECK(f, "%s: %s", path, err.msg);
        CHECK(size < 4096, "%s is %zu bytes", path, size);
        gguf_close(f);
        free(buf);
        n++;
    }
    closedir(d);
    CHECK(n >= want_at_least, "%s: %d seeds", dir, n);
}

TEST(gguf_fuzz_seeds) {
    static const char *const names[] = {"all_types", "vocab", "tensors", "empty"};
    const char *dirs[2] = {test_tmpdir(), getenv("FT_GGUF_SEED_DIR")};
    for (int d = 0; d < 2; d++) {
        if (!dirs[d]) continue;
        char sub[512];
        snprintf(sub, sizeof(sub), "%s/seeds", dirs[d]);
        if (d == 0) mkdir(sub, 0755);
        const char *dir = d == 0 ? sub : dirs[d];
        for (int k = 0; k < 4; k++) {
            ft_err err = {{0}};
            CHECK(write_seed(dir, names[k], k, &err), "%s", err.msg);
        }
        if (d == 0) check_seed_dir(dir, 4);
    }
    // The committed seeds are valid too.
    struct stat st;
    if (stat("fuzz/seeds/fuzz_gguf", &st) == 0) check_seed_dir("fuzz/seeds/fuzz_gguf", 4);
}
