// test_fp16.c: the fp16 and bf16 conversions (src/quant/fp16.h) against llama.cpp's.
//
// fp16 -> fp32 and bf16 -> fp32 are checked on all 65,536 bit patterns; fp32 -> fp16 and
// fp32 -> bf16 on every rounding boundary of the 16-bit format (each value, the midpoint to
// its neighbour and the floats either side of that midpoint), on edge values and on a million
// random bit patterns. Results must be bit-identical, except that a NaN result only has to be
// a NaN with the same sign when converting to fp32 (llama.cpp quiets a signalling payload).
#include "oracle.h"
#include "test.h"

#include "../src/quant/fp16.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint16_t bits;
} oracle_bf16; // ggml_bf16_t, passed and returned by value

typedef float (*fp16_to_fp32_fn)(uint16_t);
typedef uint16_t (*fp32_to_fp16_fn)(float);
typedef float (*bf16_to_fp32_fn)(oracle_bf16);
typedef oracle_bf16 (*fp32_to_bf16_fn)(float);
typedef void (*row_fn)(const void *x, void *y, int64_t n);

// Same bits, or both NaN with the same sign.
static bool same_f32(float a, float b) {
    uint32_t ua = ft_f32_bits(a), ub = ft_f32_bits(b);
    if (ua == ub) return true;
    return isnan(a) && isnan(b) && (ua >> 31) == (ub >> 31);
}

// Floats that probe every rounding decision into a 16-bit format: for each pair of neighbouring
// non-negative finite values of it (to_f32 decodes one; patterns 0..max_finite), the midpoint
// and the floats either side of it, and the lower value and its neighbours; negated copies;
// then edge values and a million random bit patterns. Returns a malloc'd array and its length.
static float *boundary_floats(float (*to_f32)(uint16_t), uint16_t max_finite, size_t *count) {
    const size_t cap = (size_t)max_finite * 12 + 1100000;
    float *v = malloc(cap * sizeof(float));
    size_t n = 0;
    for (uint32_t h = 0; h < max_finite; h++) {
        float lo = to_f32((uint16_t)h), hi = to_f32((uint16_t)(h + 1));
        float mid = lo + (hi - lo) * 0.5f; // exact: the formats have < 24 mantissa bits
        float probes[6] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY),
                           lo,  nextafterf(lo, 0.0f),  nextafterf(lo, INFINITY)};
        for (int k = 0; k < 6; k++) {
            v[n++] = probes[k];
            v[n++] = -probes[k];
        }
    }
    const float edges[] = {
        0.0f,
        -0.0f,
        0x1p-24f,
        0x1p-25f,
        nextafterf(0x1p-25f, 1.0f),
        nextafterf(0x1p-25f, 0.0f),
        0x1.8p-25f,
        0x1p-14f,
        nextafterf(0x1p-14f, 0.0f),
        0x1.ff8p-15f,
        65504.0f,
        65519.99f,
        nextafterf(65520.0f, 0.0f),
        65520.0f,
        65536.0f,
        1e10f,
        FLT_MAX,
        FLT_MIN,
        0x1p-149f,
        0x1p-126f,
        INFINITY,
        -INFINITY,
        NAN,
        -NAN,
        ft_f32_from_bits(0x7f800001u),
        ft_f32_from_bits(0xff800001u),
        ft_f32_from_bits(0x7fbfffffu),
        ft_f32_from_bits(0x7fffffffu),
        1.0f,
        -1.0f,
        3.14159265f,
        1.0f / 3.0f,
    };
    for (size_t k = 0; k < FT_ARRAY_LEN(edges); k++)
        v[n++] = edges[k];
    ft_rng rng = ft_rng_init(1234);
    while (n < cap)
        v[n++] = ft_f32_from_bits((uint32_t)ft_rng_next(&rng));
    *count = n;
    return v;
}

static float fp16_value(uint16_t h) {
    return ft_fp16_to_fp32(h);
}
static float bf16_value(uint16_t h) {
    return ft_bf16_to_fp32(h);
}

TEST(quant_fp16_to_fp32_all_patterns) {
    void *lib = oracle_ggml_base();
    if (!lib) return;
    fp16_to_fp32_fn ref = (fp16_to_fp32_fn)oracle_sym(lib, "ggml_fp16_to_fp32");
    row_fn ref_row = (row_fn)oracle_sym(lib, "ggml_fp16_to_fp32_row");
    REQUIRE(ref && ref_row);

    // Independent anchors first, so a shared misreading of the format cannot pass.
    CHECK(ft_fp16_to_fp32(0x3c00) == 1.0f);
    CHECK(ft_fp16_to_fp32(0xc000) == -2.0f);
    CHECK(ft_fp16_to_fp32(0x7bff) == 65504.0f);
    CHECK(ft_fp16_to_fp32(0x0001) == 0x1p-24f);
    CHECK(ft_fp16_to_fp32(0x0400) == 0x1p-14f);
    CHECK(ft_fp16_to_fp32(0x7c00) == INFINITY);
    CHECK(ft_f32_bits(ft_fp16_to_fp32(0x8000)) == 0x80000000u);
    CHECK(isnan(ft_fp16_to_fp32(0x7e00)) && isnan(ft_fp16_to_fp32(0xfc01)));

    static uint16_t h[65536];
    static float ours[65536], theirs[65536];
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        h[i] = (uint16_t)i;
        float a = ft_fp16_to_fp32((uint16_t)i), b = ref((uint16_t)i);
        if (!same_f32(a, b) && bad++ < 5)
            CHECK(false, "fp16 0x%04x: ours %a (0x%08x), llama.cpp %a (0x%08x)", i, a, ft_f32_bits(a), b,
                  ft_f32_bits(b));
    }
    CHECK(bad == 0, "%d of 65536 patterns differ", bad);

    for (int i = 0; i < 65536; i++)
        ours[i] = theirs[i] = NAN;
    ft_dequantize_row_f16(h, ours, 65536);
    ref_row(h, theirs, 65536);
    for (int i = 0; i < 65536; i++) {
        if (!same_f32(ours[i], theirs[i])) {
            CHECK(false, "row: first difference at 0x%04x: %a vs %a", i, ours[i], theirs[i]);
            break;
        }
    }
}

TEST(quant_fp32_to_fp16_rounding) {
    void *lib = oracle_ggml_base();
    if (!lib) return;
    fp32_to_fp16_fn ref = (fp32_to_fp16_fn)oracle_sym(lib, "ggml_fp32_to_fp16");
    row_fn ref_row = (row_fn)oracle_sym(lib, "ggml_fp32_to_fp16_row");
    REQUIRE(ref && ref_row);

    // Anchors: ties to even at the smallest subnormal and at the overflow threshold.
    CHECK(ft_fp32_to_fp16(0x1p-25f) == 0x0000);
    CHECK(ft_fp32_to_fp16(nextafterf(0x1p-25f, 1.0f)) == 0x0001);
    CHECK(ft_fp32_to_fp16(0x1.8p-24f) == 0x0002); // 1.5 units: tie, to even
    CHECK(ft_fp32_to_fp16(65519.99f) == 0x7bff);
    CHECK(ft_fp32_to_fp16(65520.0f) == 0x7c00);
    CHECK(ft_fp32_to_fp16(-0.0f) == 0x8000);
    CHECK((ft_fp32_to_fp16(NAN) & 0x7fff) > 0x7c00);

    size_t n;
    float *x = boundary_floats(fp16_value, 0x7bff, &n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t a = ft_fp32_to_fp16(x[i]), b = ref(x[i]);
        if (a != b && bad++ < 5)
            CHECK(false, "float %a (0x%08x): ours 0x%04x, llama.cpp 0x%04x", x[i], ft_f32_bits(x[i]), a, b);
    }
    CHECK(bad == 0, "%zu of %zu floats differ", bad, n);

    uint16_t *ours = malloc(n * sizeof(uint16_t)), *theirs = malloc(n * sizeof(uint16_t));
    memset(ours, 0xa5, n * sizeof(uint16_t));
    memset(theirs, 0, n * sizeof(uint16_t));
    ft_quantize_row_f16_ref(x, ours, (int64_t)n);
    ref_row(x, theirs, (int64_t)n);
    CHECK(memcmp(ours, theirs, n * sizeof(uint16_t)) == 0, "row conversion differs");
    free(ours);
    free(theirs);
    free(x);
}

TEST(quant_bf16_conversions) {
    void *lib = oracle_ggml_base();
    if (!lib) return;
    bf16_to_fp32_fn ref_to32 = (bf16_to_fp32_fn)oracle_sym(lib, "ggml_bf16_to_fp32");
    fp32_to_bf16_fn ref_to16 = (fp32_to_bf16_fn)oracle_sym(lib, "ggml_fp32_to_bf16");
    row_fn ref_row16 = (row_fn)oracle_sym(lib, "ggml_fp32_to_bf16_row_ref");
    row_fn ref_row32 = (row_fn)oracle_sym(lib, "ggml_bf16_to_fp32_row");
    REQUIRE(ref_to32 && ref_to16 && ref_row16 && ref_row32);

    // bf16 -> fp32 on every pattern, and the round-trip rule: a non-NaN bf16 survives
    // bf16 -> fp32 -> bf16 unchanged; a NaN stays a NaN of the same sign, made quiet.
    static uint16_t h[65536];
    static float ours[65536], theirs[65536];
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        h[i] = (uint16_t)i;
        float a = ft_bf16_to_fp32((uint16_t)i), b = ref_to32((oracle_bf16){(uint16_t)i});
        if (!same_f32(a, b) && bad++ < 5) CHECK(false, "bf16 0x%04x: %a vs %a", i, a, b);
        uint16_t r = ft_fp32_to_bf16(a);
        bool is_nan = (i & 0x7fff) > 0x7f80;
        if (is_nan)
            CHECK(r == (i | 0x40), "NaN 0x%04x came back as 0x%04x", i, r);
        else
            CHECK(r == i, "0x%04x came back as 0x%04x", i, r);
    }
    CHECK(bad == 0, "%d of 65536 patterns differ", bad);
    ft_dequantize_row_bf16(h, ours, 65536);
    ref_row32(h, theirs, 65536);
    for (int i = 0; i < 65536; i++) {
        if (!same_f32(ours[i], theirs[i])) {
            CHECK(false, "row: first difference at 0x%04x", i);
            break;
        }
    }

    // fp32 -> bf16: ties to even (1 + 2^-8 is halfway between 1 and 1 + 2^-7).
    CHECK(ft_fp32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
    CHECK(ft_fp32_to_bf16(1.0f + 0x1p-7f + 0x1p-8f) == 0x3f82);
    CHECK(ft_fp32_to_bf16(nextafterf(1.0f + 0x1p-8f, 2.0f)) == 0x3f81);
    CHECK(ft_fp32_to_bf16(FLT_MAX) == 0x7f80); // rounds up to infinity
    size_t n;
    float *x = boundary_floats(bf16_value, 0x7f7f, &n);
    size_t nbad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t a = ft_fp32_to_bf16(x[i]), b = ref_to16(x[i]).bits;
        if (a != b && nbad++ < 5)
            CHECK(false, "float %a (0x%08x): ours 0x%04x, llama.cpp 0x%04x", x[i], ft_f32_bits(x[i]), a, b);
    }
    CHECK(nbad == 0, "%zu of %zu floats differ", nbad, n);
    uint16_t *o = malloc(n * sizeof(uint16_t)), *t = malloc(n * sizeof(uint16_t));
    memset(o, 0xa5, n * sizeof(uint16_t));
    memset(t, 0, n * sizeof(uint16_t));
    ft_quantize_row_bf16_ref(x, o, (int64_t)n);
    ref_row16(x, t, (int64_t)n);
    CHECK(memcmp(o, t, n * sizeof(uint16_t)) == 0, "row conversion differs");
    free(o);
    free(t);
    free(x);
}
