// test_quant.c: the block formats of src/quant/ against llama.cpp.
//
// - Traits: elements and bytes per block of every type id 0..42 equal ggml's; ft_row_bytes
//   equals ggml_row_size.
// - Dequantization: rows of random blocks (random bytes, with the fp16 scales set to finite
//   values: ordinary magnitudes, then edge values such as 0, -0, subnormals and 65504) expand to
//   exactly llama.cpp's floats, bit for bit.
// - Quantization: rows drawn from 17 distributions (normal, uniform, outliers, all zero, one
//   huge value per 256, all positive, all negative, tiny, large, sparse, constant runs, values
//   on a half-integer grid, per-sub-block magnitudes, values exactly on rounding ties, block
//   maxima just below a power of two, float subnormals, NaN and infinities) quantize to
//   exactly llama.cpp's bytes
//   (quantize_row_*_ref). One stated exception: the codes of an all-zero iq4_nl block, which
//   llama.cpp leaves as scratch memory (see quantize_iq.c).
// - Round trip: quantize -> dequantize error relative to the data's RMS is within each
//   format's bound, on normal data (the bounds are the measured errors plus ~10%).
// Rows are 4096 elements (16 super-blocks, 128 small blocks), in exact-size heap buffers so
// that AddressSanitizer sees any write past a row; outputs start filled with a pattern so an
// unwritten element or byte fails.
#include "oracle.h"
#include "test.h"

#include "../src/quant/fp16.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define ROW 4096
#ifndef ROWS_PER_CASE
#define ROWS_PER_CASE 8 // rows per (type, distribution); -D for a longer soak
#endif

typedef void (*to_float_fn)(const void *x, float *y, int64_t n);
typedef void (*from_float_fn)(const float *x, void *y, int64_t n);

typedef struct type_case {
    enum ft_type type;
    to_float_fn dequantize;
    from_float_fn quantize;
    const char *ref_dequantize; // llama.cpp's dequantizer; NULL where it has none
    const char *ref_quantize;   // llama.cpp's reference quantizer; NULL where it has none
    double max_rel_rmse;        // round-trip bound on N(0, 1) data
} type_case;

#define CASE(T, t) FT_TYPE_##T, ft_dequantize_row_##t, ft_quantize_row_##t##_ref

static const type_case k_cases[] = {
    {CASE(F32, f32), NULL, NULL, 0.0},
    {CASE(F16, f16), "ggml_fp16_to_fp32_row", "ggml_fp32_to_fp16_row", 0.00023},
    {CASE(BF16, bf16), "ggml_bf16_to_fp32_row", "ggml_fp32_to_bf16_row_ref", 0.0018},
    {CASE(Q4_0, q4_0), "dequantize_row_q4_0", "quantize_row_q4_0_ref", 0.095},
    {CASE(Q4_1, q4_1), "dequantize_row_q4_1", "quantize_row_q4_1_ref", 0.086},
    {CASE(Q5_0, q5_0), "dequantize_row_q5_0", "quantize_row_q5_0_ref", 0.047},
    {CASE(Q5_1, q5_1), "dequantize_row_q5_1", "quantize_row_q5_1_ref", 0.042},
    {CASE(Q8_0, q8_0), "dequantize_row_q8_0", "quantize_row_q8_0_ref", 0.0059},
    {CASE(Q8_1, q8_1), NULL, "quantize_row_q8_1_ref", 0.0059},
    {CASE(Q2_K, q2_K), "dequantize_row_q2_K", "quantize_row_q2_K_ref", 0.33},
    {CASE(Q3_K, q3_K), "dequantize_row_q3_K", "quantize_row_q3_K_ref", 0.167},
    {CASE(Q4_K, q4_K), "dequantize_row_q4_K", "quantize_row_q4_K_ref", 0.079},
    {CASE(Q5_K, q5_K), "dequantize_row_q5_K", "quantize_row_q5_K_ref", 0.040},
    {CASE(Q6_K, q6_K), "dequantize_row_q6_K", "quantize_row_q6_K_ref", 0.0196},
    {CASE(Q8_K, q8_K), "dequantize_row_q8_K", "quantize_row_q8_K_ref", 0.0078},
    {CASE(IQ4_NL, iq4_nl), "dequantize_row_iq4_nl", "quantize_row_iq4_nl_ref", 0.087},
    {CASE(IQ4_XS, iq4_xs), "dequantize_row_iq4_xs", "quantize_row_iq4_xs_ref", 0.085},
    {CASE(MXFP4, mxfp4), "dequantize_row_mxfp4", "quantize_row_mxfp4_ref", 0.127},
};

static const ft_type_traits *traits_of(enum ft_type t) {
    const ft_type_traits *tr = ft_type_traits_find(t);
    FT_ASSERT(tr);
    return tr;
}

// Same bits, or both NaN.
static bool same_f32(float a, float b) {
    return ft_f32_bits(a) == ft_f32_bits(b) || (isnan(a) && isnan(b));
}

// Checks ours == theirs element for element; reports the first difference.
static bool floats_match(const char *what, const float *ours, const float *theirs, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (!same_f32(ours[i], theirs[i])) {
            CHECK(false,
                  "%s: first difference at element %lld: ours %.9g (0x%08x), llama.cpp %.9g "
                  "(0x%08x)",
                  what, (long long)i, ours[i], ft_f32_bits(ours[i]), theirs[i], ft_f32_bits(theirs[i]));
            return false;
        }
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Traits

TEST(quant_traits_match_llama) {
    void *lib = oracle_ggml_base();
    if (!lib) return;
    int64_t (*blck_size)(int) = (int64_t(*)(int))oracle_sym(lib, "ggml_blck_size");
    size_t (*type_size)(int) = (size_t(*)(int))oracle_sym(lib, "ggml_type_size");
    size_t (*row_size)(int, int64_t) = (size_t(*)(int, int64_t))oracle_sym(lib, "ggml_row_size");
    const char *(*type_name)(int) = (const char *(*)(int))oracle_sym(lib, "ggml_type_name");
    REQUIRE(blck_size && type_size && row_size && type_name);

    int valid = 0;
    for (int id = 0; id < FT_TYPE_COUNT; id++) {
        const ft_type_traits *t = ft_type_traits_find((uint32_t)id);
        int64_t blck = blck_size(id);
        if (blck == 0) { // removed id
            CHECK(t == NULL, "id %d is removed in ggml but has traits", id);
            CHECK(strcmp(ft_type_name((uint32_t)id), "unknown") == 0);
            continue;
        }
        valid++;
        REQUIRE(t, "id %d (%s) has no traits", id, type_name(id));
        CHECK(t->block_elems == blck, "%s: %d elements per block, ggml %lld", t->name, t->block_elems,
              (long long)blck);
        CHECK((size_t)t->block_bytes == type_size(id), "%s: %d bytes per block, ggml %zu", t->name,
              t->block_bytes, type_size(id));
        CHECK(strcmp(t->name, type_name(id)) == 0, "id %d: name %s, ggml %s", id, t->name, type_name(id));
        enum ft_type parsed;
        CHECK(ft_type_from_name(t->name, &parsed) && parsed == (enum ft_type)id, "%s", t->name);
        for (int64_t nb = 0; nb <= 1000; nb += 333) {
            CHECK(ft_row_bytes((enum ft_type)id, nb * blck) == row_size(id, nb * blck),
                  "%s: ft_row_bytes(%lld)", t->name, (long long)(nb * blck));
        }
    }
    CHECK(valid == 35, "%d valid ids", valid);
    CHECK(ft_type_traits_find(FT_TYPE_COUNT) == NULL);
    CHECK(ft_type_traits_find(UINT32_MAX) == NULL);
    enum ft_type parsed;
    CHECK(ft_type_from_name("Q4_K", &parsed) && parsed == FT_TYPE_Q4_K);
    CHECK(!ft_type_from_name("q4_2", &parsed));
}

// ---------------------------------------------------------------------------------------------
// Dequantization

// Byte offsets of a block's fp16 scale fields; returns how many.
static int half_fields(enum ft_type t, int off[2]) {
    switch (t) {
    case FT_TYPE_Q4_0: off[0] = offsetof(block_q4_0, d); return 1;
    case FT_TYPE_Q4_1: off[0] = offsetof(block_q4_1, d), off[1] = offsetof(block_q4_1, m); return 2;
    case FT_TYPE_Q5_0: off[0] = offsetof(block_q5_0, d); return 1;
    case FT_TYPE_Q5_1: off[0] = offsetof(block_q5_1, d), off[1] = offsetof(block_q5_1, m); return 2;
    case FT_TYPE_Q8_0: off[0] = offsetof(block_q8_0, d); return 1;
    case FT_TYPE_Q8_1: off[0] = offsetof(block_q8_1, d), off[1] = offsetof(block_q8_1, s); return 2;
    case FT_TYPE_Q2_K: off[0] = offsetof(block_q2_K, d), off[1] = offsetof(block_q2_K, dmin); return 2;
    case FT_TYPE_Q3_K: off[0] = offsetof(block_q3_K, d); return 1;
    case FT_TYPE_Q4_K: off[0] = offsetof(block_q4_K, d), off[1] = offsetof(block_q4_K, dmin); return 2;
    case FT_TYPE_Q5_K: off[0] = offsetof(block_q5_K, d), off[1] = offsetof(block_q5_K, dmin); return 2;
    case FT_TYPE_Q6_K: off[0] = offsetof(block_q6_K, d); return 1;
    case FT_TYPE_IQ4_NL: off[0] = offsetof(block_iq4_nl, d); return 1;
    case FT_TYPE_IQ4_XS: off[0] = offsetof(block_iq4_xs, d); return 1;
    default: return 0;
    }
}

// Random bytes for a row of n elements of type t, with the scales made finite: edge == false
// gives magnitudes 1e-4..1e-1 of either sign, edge == true draws from zeros, subnormals, the
// largest finite values and 1.
static void random_row(enum ft_type t, ft_rng *rng, bool edge, uint8_t *dst, int64_t n) {
    const ft_type_traits *tr = traits_of(t);
    const size_t bytes = ft_row_bytes(t, n);
    for (size_t i = 0; i < bytes; i++)
        dst[i] = (uint8_t)ft_rng_next(rng);
    if (tr->block_elems == 1) return; // float formats: every pattern, NaNs included

    static const uint16_t edge_halves[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x03ff,
                                           0x0400, 0x7bff, 0xfbff, 0x3c00, 0x1400};
    static const float edge_floats[] = {0.0f, -0.0f, 1e-40f, 0x1p-149f, 1e30f, -3.4e38f, 1.0f};
    static const uint8_t edge_exps[] = {0, 1, 2, 100, 127, 200, 254, 255};
    int off[2];
    const int nhalf = half_fields(t, off);
    for (int64_t b = 0; b < n / tr->block_elems; b++) {
        uint8_t *blk = dst + b * tr->block_bytes;
        for (int k = 0; k < nhalf; k++) {
            ft_half h;
            if (edge) {
                h = edge_halves[ft_rng_next(rng) % FT_ARRAY_LEN(edge_halves)];
            } else {
                float mag = powf(10.0f, -4.0f + 3.0f * ft_rng_uniform(rng));
                h = ft_fp32_to_fp16(ft_rng_next(rng) & 1 ? mag : -mag);
            }
            memcpy(blk + off[k], &h, sizeof(h));
        }
        if (t == FT_TYPE_Q8_K) {
            float d =
                edge ? edge_floats[ft_rng_next(rng) % FT_ARRAY_LEN(edge_floats)] : 0.01f * ft_rng_normal(rng);
            memcpy(blk + offsetof(block_q8_K, d), &d, sizeof(d));
        }
        if (t == FT_TYPE_MXFP4 && edge) blk[0] = edge_exps[ft_rng_next(rng) % FT_ARRAY_LEN(edge_exps)];
    }
}

TEST(quant_dequantize_matches_llama) {
    void *lib = oracle_ggml_base();
    if (!lib) return;
    to_float_fn ref_q8_0 = (to_float_fn)oracle_sym(lib, "dequantize_row_q8_0");
    REQUIRE(ref_q8_0);
    ft_rng rng = ft_rng_init(42);
    float *ours = malloc(ROW * sizeof(float)), *theirs = malloc(ROW * sizeof(float));
    uint8_t *src = malloc(ROW * sizeof(float));

    for (size_t c = 0; c < FT_ARRAY_LEN(k_cases); c++) {
        const type_case *tc = &k_cases[c];
        const char *name = ft_type_name(tc->type);
        to_float_fn ref = tc->ref_dequantize ? (to_float_fn)oracle_sym(lib, tc->ref_dequantize) : NULL;
        if (tc->ref_dequantize && !ref) continue;
        for (int edge = 0; edge < 2; edge++) {
            for (int r = 0; r < ROWS_PER_CASE; r++) {
                random_row(tc->type, &rng, edge, src, ROW);
                for (int i = 0; i < ROW; i++)
                    ours[i] = NAN, theirs[i] = 0.0f;
                tc->dequantize(src, ours, ROW);
                if (ref) {
                    ref(src, theirs, ROW);
                } else if (tc->type == FT_TYPE_F32) {
                    memcpy(theirs, src, ROW * sizeof(float));
                } else { // q8_1: its d and codes decode as a q8_0 block's
                    FT_ASSERT(tc->type == FT_TYPE_Q8_1);
                    static block_q8_0 as_q8_0[ROW / QK8_0];
                    const block_q8_1 *b = (const block_q8_1 *)src;
                    for (int i = 0; i < ROW / QK8_1; i++) {
                        as_q8_0[i].d = b[i].d;
                        memcpy(as_q8_0[i].qs, b[i].qs, QK8_0);
                    }
                    ref_q8_0(as_q8_0, theirs, ROW);
                }
                char what[64];
                snprintf(what, sizeof(what), "%s, %s scales, row %d", name, edge ? "edge" : "ordinary", r);
                floats_match(what, ours, theirs, ROW);
            }
        }
    }
    free(ours);
    free(theirs);
    free(src);
}

// ---------------------------------------------------------------------------------------------
// Quantization

enum dist {
    DIST_NORMAL,
    DIST_UNIFORM,
    DIST_OUTLIERS, // 1% of values 50x larger
    DIST_ZEROS,
    DIST_ONE_HUGE,   // one +-1e4 in every 256, the rest N(0, 0.01)
    DIST_POSITIVE,   // all in [0.5, 1.5)
    DIST_NEGATIVE,   // N(-3, 1)
    DIST_TINY,       // per 32, magnitudes 1e-6..1e-10: fp16 scales subnormal or flushed to 0
    DIST_LARGE,      // N(0, 3e4): fp16 scales near overflow
    DIST_SPARSE,     // 90% zeros, so some whole blocks are zero
    DIST_CONSTANT,   // runs of 16 equal values (max == min)
    DIST_GRID,       // multiples of 0.5
    DIST_SUB_SCALES, // a magnitude per 16 elements (1e-3..10), as in real weights
    DIST_TIES,       // blocks whose scale comes out exactly 1 or 1/2 and whose values sit on ties
    DIST_POW2,       // block maxima just below a power of two (log2f rounds up to it)
    DIST_SUBNORMAL,  // float subnormals: 1/d and -127/max overflow to infinity
    DIST_NONFINITE,  // NaN and +-inf among normals: garbage in, llama.cpp's garbage out
    DIST_COUNT,
};

static const char *const k_dist_names[DIST_COUNT] = {
    [DIST_NORMAL] = "normal",
    [DIST_UNIFORM] = "uniform",
    [DIST_OUTLIERS] = "outliers",
    [DIST_ZEROS] = "zeros",
    [DIST_ONE_HUGE] = "one huge",
    [DIST_POSITIVE] = "positive",
    [DIST_NEGATIVE] = "negative",
    [DIST_TINY] = "tiny",
    [DIST_LARGE] = "large",
    [DIST_SPARSE] = "sparse",
    [DIST_CONSTANT] = "constant runs",
    [DIST_GRID] = "half-integer grid",
    [DIST_SUB_SCALES] = "sub-scales",
    [DIST_TIES] = "exact ties",
    [DIST_POW2] = "max below 2^k",
    [DIST_SUBNORMAL] = "subnormal",
    [DIST_NONFINITE] = "NaN and inf",
};

// Blocks of 32 for DIST_TIES, in turn: q8_0 (max 127, so d = 1) with half-integers; iq4_nl
// (max -127, d = 1) with midpoints of its levels; mxfp4 (max 6, d = 1/2) with midpoints of its
// levels; q4_0 (max -8, d = 1) with half-integers.
static void fill_ties(ft_rng *rng, float *x, int n) {
    static const float iq4_mid[] = {-115.5f, -93.5f, -74,   -57,   -42, -28.5f, -16, -4.5f,
                                    7,       19,     31.5f, 45.5f, 61,  79,     101};
    static const float fp4_mid[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5};
    static const float lead[4] = {127, -127, 6, -8};
    for (int b = 0; b < n; b += 32) {
        const int variant = (b / 32) % 4;
        for (int i = b; i < b + 32; i++) {
            const uint64_t r = ft_rng_next(rng) >> 8;
            switch (variant) {
            case 0: x[i] = (float)(int)(r % 253) - 126.5f; break;
            case 1: x[i] = iq4_mid[r % 15]; break;
            case 2: x[i] = (r & 1 ? 1 : -1) * fp4_mid[(r >> 1) % 7]; break;
            case 3: x[i] = (float)(int)(r % 16) - 7.5f; break;
            }
        }
        x[b + (int)(ft_rng_next(rng) % 32)] = lead[variant];
    }
}

// Multiplies each run of `run` elements by 10^(lo + span * u), u uniform in [0, 1).
static void scale_runs(ft_rng *rng, float *x, int n, int run, float lo, float span) {
    for (int b = 0; b < n; b += run) {
        const float s = powf(10.0f, lo + span * ft_rng_uniform(rng));
        for (int i = b; i < b + run; i++)
            x[i] *= s;
    }
}

static void fill_dist(enum dist dist, ft_rng *rng, float *x, int n) {
    for (int i = 0; i < n; i++) {
        const float g = ft_rng_normal(rng);
        switch (dist) {
        case DIST_UNIFORM: x[i] = 2.0f * ft_rng_uniform(rng) - 1.0f; break;
        case DIST_OUTLIERS: x[i] = ft_rng_uniform(rng) < 0.01f ? 50.0f * g : g; break;
        case DIST_ZEROS: x[i] = 0.0f; break;
        case DIST_ONE_HUGE: x[i] = 0.01f * g; break;
        case DIST_POSITIVE: x[i] = 0.5f + ft_rng_uniform(rng); break;
        case DIST_NEGATIVE: x[i] = g - 3.0f; break;
        case DIST_TINY: x[i] = 1e-6f * g; break;
        case DIST_LARGE: x[i] = 3e4f * g; break;
        case DIST_SPARSE: x[i] = ft_rng_uniform(rng) < 0.9f ? 0.0f : g; break;
        case DIST_CONSTANT: x[i] = i % 16 ? x[i - 1] : g; break;
        case DIST_GRID: x[i] = roundf(4.0f * g) * 0.5f; break;
        case DIST_SUBNORMAL: x[i] = 1e-39f * g; break;
        default: x[i] = g; break;
        }
    }
    switch (dist) {
    case DIST_ONE_HUGE:
        for (int b = 0; b < n; b += 256)
            x[b + (int)(ft_rng_next(rng) % 256)] = ft_rng_next(rng) & 1 ? 1e4f : -1e4f;
        break;
    case DIST_TINY: scale_runs(rng, x, n, 32, -4.0f, 4.0f); break;
    case DIST_SUB_SCALES: scale_runs(rng, x, n, 16, -3.0f, 4.0f); break;
    case DIST_TIES: fill_ties(rng, x, n); break;
    case DIST_POW2:
        for (int b = 0; b < n; b += 32) {
            const float top = nextafterf(ldexpf(1.0f, (int)(ft_rng_next(rng) % 41) - 20), 0.0f);
            for (int i = b; i < b + 32; i++)
                x[i] = top * (2.0f * ft_rng_uniform(rng) - 1.0f);
            x[b + (int)(ft_rng_next(rng) % 32)] = ft_rng_next(rng) & 1 ? top : -top;
        }
        break;
    case DIST_NONFINITE:
        for (int i = 0; i < n; i++) {
            const uint64_t r = ft_rng_next(rng) % 64;
            if (r < 3) x[i] = r == 0 ? NAN : r == 1 ? INFINITY : -INFINITY;
        }
        break;
    default: break;
    }
}

// Block b differs in a way that counts. The codes of an all-zero iq4_nl block are exempt (they
// are llama.cpp's scratch memory; its d is 0 so they never decode to anything else).
static bool block_differs(enum ft_type t, const uint8_t *a, const uint8_t *b, size_t bytes) {
    if (t == FT_TYPE_IQ4_NL) {
        ft_half da, db;
        memcpy(&da, a, sizeof(da));
        memcpy(&db, b, sizeof(db));
        if (da == db && (da & 0x7fff) == 0) return false;
    }
    return memcmp(a, b, bytes) != 0;
}

TEST(quant_quantize_matches_llama) {
    void *lib = oracle_ggml_base();
    if (!lib) return;
    float *x = malloc(ROW * sizeof(float));
    for (size_t c = 0; c < FT_ARRAY_LEN(k_cases); c++) {
        const type_case *tc = &k_cases[c];
        const ft_type_traits *tr = traits_of(tc->type);
        from_float_fn ref = tc->ref_quantize ? (from_float_fn)oracle_sym(lib, tc->ref_quantize) : NULL;
        if (tc->ref_quantize && !ref) continue;
        const size_t bytes = ft_row_bytes(tc->type, ROW);
        uint8_t *ours = malloc(bytes), *theirs = malloc(bytes);
        int bad_blocks = 0, blocks = 0;
        for (int dist = 0; dist < DIST_COUNT; dist++) {
            ft_rng rng = ft_rng_init(1000 + (uint64_t)dist);
            for (int r = 0; r < ROWS_PER_CASE; r++) {
                fill_dist((enum dist)dist, &rng, x, ROW);
                memset(ours, 0xa5, bytes);
                memset(theirs, 0, bytes);
                tc->quantize(x, ours, ROW);
                if (ref)
                    ref(x, theirs, ROW);
                else
                    memcpy(theirs, x, bytes); // f32
                for (int b = 0; b < ROW / tr->block_elems; b++) {
                    size_t o = (size_t)b * tr->block_bytes;
                    blocks++;
                    if (!block_differs(tc->type, ours + o, theirs + o, tr->block_bytes)) continue;
                    if (bad_blocks++ == 0) {
                        size_t k = 0;
                        while (ours[o + k] == theirs[o + k])
                            k++;
                        CHECK(false,
                              "%s, %s row %d: block %d differs first at byte %zu: ours 0x%02x, "
                              "llama.cpp 0x%02x",
                              tr->name, k_dist_names[dist], r, b, k, ours[o + k], theirs[o + k]);
                    }
                }
            }
        }
        CHECK(bad_blocks == 0, "%s: %d of %d blocks differ", tr->name, bad_blocks, blocks);
        free(ours);
        free(theirs);
    }
    free(x);
}

// ---------------------------------------------------------------------------------------------
// Round trip and wiring

TEST(quant_round_trip_error) {
    const int n = 16 * ROW;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *zeros = calloc(ROW, sizeof(float));
    uint8_t *q = malloc(n * sizeof(float));
    ft_rng rng = ft_rng_init(7);
    double sx2 = 0;
    for (int i = 0; i < n; i++) {
        x[i] = ft_rng_normal(&rng);
        sx2 += (double)x[i] * x[i];
    }
    for (size_t c = 0; c < FT_ARRAY_LEN(k_cases); c++) {
        const type_case *tc = &k_cases[c];
        const char *name = ft_type_name(tc->type);
        tc->quantize(x, q, n);
        for (int i = 0; i < n; i++)
            y[i] = NAN;
        tc->dequantize(q, y, n);
        double se = 0;
        for (int i = 0; i < n; i++)
            se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        const double rel = sqrt(se / sx2);
        if (getenv("FT_TEST_VERBOSE")) fprintf(stderr, "    %-7s rel rmse %.5f\n", name, rel);
        CHECK(rel <= tc->max_rel_rmse, "%s: relative RMSE %.5f above %.5f", name, rel, tc->max_rel_rmse);

        // An all-zero row decodes to zeros (+0 or -0) in every format.
        tc->quantize(zeros, q, ROW);
        tc->dequantize(q, y, ROW);
        for (int i = 0; i < ROW; i++) {
            if (y[i] != 0.0f) {
                CHECK(false, "%s: zero row decodes to %g at %d", name, y[i], i);
                break;
            }
        }
    }
    free(x);
    free(y);
    free(zeros);
    free(q);
}

TEST(quant_ops_table_uses_references) {
    for (size_t c = 0; c < FT_ARRAY_LEN(k_cases); c++) {
        const type_case *tc = &k_cases[c];
        const ft_quant_ops *ops = ft_quant_ops_find(tc->type);
        REQUIRE(ops, "%s has no ops", ft_type_name(tc->type));
        CHECK(ops->to_float == tc->dequantize, "%s", ft_type_name(tc->type));
        CHECK(ops->from_float_ref == tc->quantize, "%s", ft_type_name(tc->type));
    }
}
