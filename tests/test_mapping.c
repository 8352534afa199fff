// test_mapping.c: file mappings whose pages become anonymous memory in place (src/util/mapping.h)
// and the engine's copy of the weights the CPU streams (model.h: ft_model_copy_into_memory).
#include "fixtures.h"
#include "../src/engine/engine.h"
#include "../src/gguf/gguf.h"
#include "../src/util/mapping.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// A file of n bytes of a position-dependent pattern; returns its path.
static const char *pattern_file(const char *name, size_t n) {
    const char *path = test_path(name);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    for (size_t i = 0; i < n; i++) fputc((int)((i * 2654435761u) >> 13 & 0xff), f);
    fclose(f);
    return path;
}

static bool pattern_holds(const uint8_t *p, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (p[i] != (uint8_t)((i * 2654435761u) >> 13 & 0xff)) return false;
    return true;
}

// The whole huge pages of a range move, from the file (pread) or from the mapping itself, and
// every byte of the file reads the same afterwards, moved or not, at the same address.
TEST(mapping_moves_whole_huge_pages_in_place) {
    const size_t n = 8 * FT_HUGE_PAGE + 123;
    const char *path = pattern_file("mapping.bin", n);
    REQUIRE(path);
    for (int from_fd = 0; from_fd < 2; from_fd++) {
        int fd = open(path, O_RDONLY);
        REQUIRE(fd >= 0);
        uint8_t *p = ft_mapping_open(fd, n);
        REQUIRE(p);
        bool aligned = ((uintptr_t)p & (FT_HUGE_PAGE - 1)) == 0;
        CHECK(aligned, "the mapping starts at %p", (void *)p);
        // [100, 7 huge pages + 5): the pages 1..6 are whole inside it
        size_t lo = 100, hi = 7 * FT_HUGE_PAGE + 5;
        CHECK(ft_mapping_movable(p + lo, hi - lo) == 6 * FT_HUGE_PAGE);
        size_t anon, huge;
        ft_mapping_usage(p, n, &anon, &huge);
        CHECK(anon == 0, "anonymous before: %zu", anon);
        size_t moved = ft_mapping_to_anonymous(p, from_fd ? fd : -1, p + lo, hi - lo);
        CHECK(moved == 6 * FT_HUGE_PAGE, "moved %zu", moved);
        CHECK(pattern_holds(p, 0, n), "the bytes changed (from the %s)", from_fd ? "file" : "mapping");
        ft_mapping_usage(p, n, &anon, &huge);
        CHECK(anon == 6 * FT_HUGE_PAGE, "anonymous after: %zu", anon);
        CHECK(huge <= anon);
        ft_mapping_close(p, n);
        close(fd);
    }
}

// A range holding no whole huge page moves nothing.
TEST(mapping_short_range_moves_nothing) {
    const size_t n = 3 * FT_HUGE_PAGE;
    const char *path = pattern_file("mapping_short.bin", n);
    REQUIRE(path);
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    uint8_t *p = ft_mapping_open(fd, n);
    REQUIRE(p);
    uint8_t *q = p + FT_HUGE_PAGE - 4096;
    CHECK(ft_mapping_movable(q, FT_HUGE_PAGE + 4095) == 0);
    CHECK(ft_mapping_to_anonymous(p, fd, q, FT_HUGE_PAGE + 4095) == 0);
    CHECK(pattern_holds(p, 0, n));
    ft_mapping_close(p, n);
    close(fd);
}

// A model big enough to span huge pages: 2 layers of 16 f16 experts of 256 x 512.
static const char *copy_model(void) {
    ft_synth_params sp = fixture_moe_params(2, 16);
    sp.n_ff_exp = 512;
    fixture_expert_types(&sp, "f16", NULL);
    return fixture_write(&sp, "mapping_model.gguf");
}

static float *eval_copy(const char *path, enum ft_weights_memory wm, size_t *anon) {
    ft_err err = {{0}};
    ft_model *m = ft_model_load(path, &err);
    if (!m) return NULL;
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 2;
    ep.weights_memory = wm;
    ft_engine *e = ft_engine_init(m, &ep, &err);
    float *out = NULL;
    if (e) {
        size_t huge;
        ft_mapping_usage(gguf_file_base(m->file), (size_t)gguf_file_size(m->file), anon, &huge);
        const int32_t toks[5] = {3, 141, 59, 26, 53};
        const float *lg = ft_engine_eval(e, toks, 5, &err);
        if (lg) {
            out = ft_malloc((size_t)m->hp.n_vocab * sizeof(float));
            memcpy(out, lg, (size_t)m->hp.n_vocab * sizeof(float));
        }
        ft_engine_free(e);
    }
    ft_model_free(m);
    return out;
}

// The CPU engine computes the same bits from weights copied into memory (the default where
// they fit, and --no-mmap) as from the file's mapping (--mmap).
TEST(mapping_engine_copied_weights_equal_mapped) {
    const char *path = copy_model();
    REQUIRE(path);
    ft_err err = {{0}};
    ft_model *m = ft_model_load(path, &err);
    REQUIRE(m, "%s", err.msg);
    size_t all = ft_model_copy_bytes(m, false), experts = ft_model_copy_bytes(m, true);
    int n_vocab = m->hp.n_vocab;
    CHECK(all >= 4 * FT_HUGE_PAGE && experts > 0 && experts <= all, "copy bytes: all %zu, experts %zu", all, experts);
    ft_model_free(m);
    size_t anon[3];
    float *mapped = eval_copy(path, FT_WEIGHTS_MAPPED, &anon[0]);
    float *copied = eval_copy(path, FT_WEIGHTS_COPIED, &anon[1]);
    float *dflt = eval_copy(path, FT_WEIGHTS_AUTO, &anon[2]);
    REQUIRE(mapped && copied && dflt);
    CHECK(anon[0] == 0, "--mmap: %zu bytes anonymous", anon[0]);
    // the default copies where the kernel gives huge pages (else the copy would gain nothing)
    size_t want_default = ft_huge_pages_available() ? all : 0;
    CHECK(anon[1] == all && anon[2] == want_default, "copied: %zu and %zu of %zu bytes anonymous", anon[1], anon[2],
          all);
    CHECK(!memcmp(mapped, copied, (size_t)n_vocab * sizeof(float)), "copied weights gave other logits");
    CHECK(!memcmp(mapped, dflt, (size_t)n_vocab * sizeof(float)), "the default gave other logits");
    free(mapped);
    free(copied);
    free(dflt);
}

// cpu mode copies the routed experts alone (the rest lives on the GPU; here the small tensors
// between them are copied too, as the gaps between two experts' huge pages).
TEST(mapping_model_copies_experts_alone) {
    const char *path = copy_model();
    REQUIRE(path);
    ft_err err = {{0}};
    ft_model *m = ft_model_load(path, &err);
    REQUIRE(m, "%s", err.msg);
    size_t want = ft_model_copy_bytes(m, true);
    CHECK(ft_model_copy_into_memory(m, true, 2, NULL, NULL) == want);
    size_t anon, huge;
    ft_mapping_usage(gguf_file_base(m->file), (size_t)gguf_file_size(m->file), &anon, &huge);
    CHECK(anon == want, "%zu of %zu bytes anonymous", anon, want);
    CHECK(want > 0 && ft_model_copy_bytes(m, false) >= want);
    ft_model_free(m);
}
