// test_dot.c: the dot products of every weight type (src/quant/dot_ref.c and dot_avx2.c),
// checked three ways on rows of 1, 2, 3, 7, 33, 45 blocks and two long rows
// (4096 elements + 1 block, and 8192 elements), from fixed seeds:
//
//   1. ref vs truth: x and y dequantized by llama.cpp's own dequantizers and summed in double.
//   2. avx2 vs ref, with ordinary and with saturating (+-127) activations.
//   3. ref and avx2 vs llama.cpp's AVX2 CPU kernels (libggml-cpu-haswell.so), whose
//      vec_dot_type must also match ours.
//
// Weight rows are random bytes (every code and sub-block scale pattern occurs) with random
// fp16 / E8M0 block scales of either sign; activations are random normal floats (a few of them
// outliers) quantized by ft's own quantizer of the activation format.
//
// Tolerances are relative to S, the sum of |x_i * y_i| over the dequantized rows. For the
// formats with a min term (q4_1, q5_1, q2_K, q4_K, q5_K) the kernels round the scale part and
// the min part separately, so S also counts 2 * sum |min_i * y_i| (min_i: the element with
// the block's main scale set to 0), which bounds both parts.
#include "oracle.h"
#include "test.h"

#include "../src/quant/dot.h"
#include "../src/quant/fp16.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

// Ref vs truth: the ref's float sum of nb block results rounds at most (nb + 4) times, each
// within 2^-24 of a partial sum bounded by S; 2^-23 leaves a factor 2. The float formats sum
// in double and round once. q8_1's s = fp16(d * sum(qs)) carries its own rounding, allowed
// for separately.
#define TOL_TRUTH_PER_BLOCK 0x1p-23
#define TOL_TRUTH_FLOAT 0x1p-22
// Two float orders of the same exact integer block sums (avx2 vs ref, ft vs llama.cpp).
#define TOL_REL 1e-5
#define TOL_ABS 1e-6

typedef struct {
    enum ft_type type;
    enum ft_type act;          // activation format
    ft_vec_dot_fn ref, avx2;
    const char *oracle_dequant; // llama.cpp's dequantizer of the weight type
    bool has_min;               // a min term: q4_1, q5_1, q2_K, q4_K, q5_K
} dot_case;

#define CASE(t, T, A, deq, min)                                                                   \
    {FT_TYPE_##T, FT_TYPE_##A, ft_vec_dot_##t##_ref, ft_vec_dot_##t##_avx2, deq, min}
static const dot_case g_cases[] = {
    CASE(f32, F32, F32, NULL, false),
    CASE(f16, F16, F16, "ggml_fp16_to_fp32_row", false),
    CASE(bf16, BF16, BF16, "ggml_bf16_to_fp32_row", false),
    CASE(q4_0, Q4_0, Q8_0, "dequantize_row_q4_0", false),
    CASE(q4_1, Q4_1, Q8_1, "dequantize_row_q4_1", true),
    CASE(q5_0, Q5_0, Q8_0, "dequantize_row_q5_0", false),
    CASE(q5_1, Q5_1, Q8_1, "dequantize_row_q5_1", true),
    CASE(q8_0, Q8_0, Q8_0, "dequantize_row_q8_0", false),
    CASE(q2_K, Q2_K, Q8_K, "dequantize_row_q2_K", true),
    CASE(q3_K, Q3_K, Q8_K, "dequantize_row_q3_K", false),
    CASE(q4_K, Q4_K, Q8_K, "dequantize_row_q4_K", true),
    CASE(q5_K, Q5_K, Q8_K, "dequantize_row_q5_K", true),
    CASE(q6_K, Q6_K, Q8_K, "dequantize_row_q6_K", false),
    CASE(iq4_nl, IQ4_NL, Q8_0, "dequantize_row_iq4_nl", false),
    CASE(iq4_xs, IQ4_XS, Q8_K, "dequantize_row_iq4_xs", false),
    CASE(mxfp4, MXFP4, Q8_0, "dequantize_row_mxfp4", false),
};
#undef CASE

enum { N_LENGTHS = 8 };

// Row lengths in elements: 1, 2, 3, 7, 33 and 45 blocks (odd counts exercise the tails of the
// two-block and 32-element loops), 4096 elements + 1 block, and 8192 elements.
static int64_t row_length(enum ft_type t, int k) {
    const int64_t blk = ft_type_traits_find(t)->block_elems;
    const int64_t blocks[N_LENGTHS] = {1, 2, 3, 7, 33, 45, 4096 / blk + 1, 8192 / blk};
    return blocks[k] * blk;
}

// ---------------------------------------------------------------------------------------------
// Inputs

static float rand_sign(ft_rng *r, float v) { return ft_rng_next(r) & 1 ? -v : v; }

// A random fp16 scale of magnitude in [mag / 2, 3 mag / 2) and random sign.
static ft_half rand_scale(ft_rng *r, float mag) {
    return ft_fp32_to_fp16(rand_sign(r, mag * (0.5f + ft_rng_uniform(r))));
}

// A weight row of n elements of type t from seed: normal floats for the float formats; for the
// block formats random bytes with the fp16 / E8M0 block scales replaced by sane random values.
// With min_only, the main scale d of every block is then set to 0, leaving only the min term.
static void random_weights(enum ft_type t, uint64_t seed, void *row, int64_t n, bool min_only) {
    ft_rng r = ft_rng_init(seed);
    if (t == FT_TYPE_F32 || t == FT_TYPE_F16 || t == FT_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float v = ft_rng_normal(&r);
            if (t == FT_TYPE_F32) ((float *)row)[i] = v;
            if (t == FT_TYPE_F16) ((ft_half *)row)[i] = ft_fp32_to_fp16(v);
            if (t == FT_TYPE_BF16) ((ft_bf16 *)row)[i] = ft_fp32_to_bf16(v);
        }
        return;
    }
    const ft_type_traits *tr = ft_type_traits_find(t);
    const int64_t nb = n / tr->block_elems;
    uint8_t *bytes = row;
    for (int64_t i = 0; i < nb * tr->block_bytes; i++) bytes[i] = (uint8_t)(ft_rng_next(&r) >> 56);
    const ft_half zero = 0;
    for (int64_t b = 0; b < nb; b++) {
        void *blk = bytes + b * tr->block_bytes;
        ft_half d = rand_scale(&r, 0.05f), m = rand_scale(&r, 0.05f);
        if (min_only) d = zero;
        switch (t) {
        case FT_TYPE_Q4_0: ((block_q4_0 *)blk)->d = d; break;
        case FT_TYPE_Q4_1: ((block_q4_1 *)blk)->d = d, ((block_q4_1 *)blk)->m = m; break;
        case FT_TYPE_Q5_0: ((block_q5_0 *)blk)->d = d; break;
        case FT_TYPE_Q5_1: ((block_q5_1 *)blk)->d = d, ((block_q5_1 *)blk)->m = m; break;
        case FT_TYPE_Q8_0: ((block_q8_0 *)blk)->d = d; break;
        case FT_TYPE_IQ4_NL: ((block_iq4_nl *)blk)->d = d; break;
        case FT_TYPE_MXFP4: ((block_mxfp4 *)blk)->e = (uint8_t)(120 + ft_rng_next(&r) % 16); break;
        case FT_TYPE_Q2_K: ((block_q2_K *)blk)->d = d, ((block_q2_K *)blk)->dmin = m; break;
        case FT_TYPE_Q3_K: ((block_q3_K *)blk)->d = d; break;
        case FT_TYPE_Q4_K: ((block_q4_K *)blk)->d = d, ((block_q4_K *)blk)->dmin = m; break;
        case FT_TYPE_Q5_K: ((block_q5_K *)blk)->d = d, ((block_q5_K *)blk)->dmin = m; break;
        case FT_TYPE_Q6_K: ((block_q6_K *)blk)->d = d; break;
        case FT_TYPE_IQ4_XS: ((block_iq4_xs *)blk)->d = d; break;
        default: FT_ASSERT(!"random_weights: type without a dot product");
        }
    }
}

enum act_kind {
    ACT_NORMAL,    // normal floats with 1 in 64 scaled by 20
    ACT_SATURATED, // +-1: every code quantizes to +-127, the worst case for int16 pair sums
};

// An activation row of n floats from seed, quantized to format act by ft's quantizer.
static void random_activations(enum ft_type act, enum act_kind kind, uint64_t seed, void *row,
                               float *tmp, int64_t n) {
    ft_rng r = ft_rng_init(seed ^ 0xac71u);
    for (int64_t i = 0; i < n; i++) {
        float v = ft_rng_normal(&r);
        if (kind == ACT_NORMAL && (ft_rng_next(&r) & 63) == 0) v *= 20;
        tmp[i] = kind == ACT_SATURATED ? rand_sign(&r, 1.0f) : v;
    }
    ft_quant_ops_find(act)->from_float_ref(tmp, row, n);
}

// One test input: weight row x of type c->type, activation row y of format c->act.
typedef struct {
    int64_t n;
    void *x, *x_min; // x_min: x with every main scale 0 (only for has_min)
    void *y;
    float *fx, *fy, *tmp; // n floats each
} dot_input;

static void input_make(dot_input *in, const dot_case *c, int64_t n, uint64_t seed,
                       enum act_kind kind) {
    in->n = n;
    in->x = malloc(ft_row_bytes(c->type, n));
    in->x_min = malloc(ft_row_bytes(c->type, n));
    in->y = malloc(ft_row_bytes(c->act, n));
    in->fx = malloc((size_t)n * sizeof(float));
    in->fy = malloc((size_t)n * sizeof(float));
    in->tmp = malloc((size_t)n * sizeof(float));
    random_weights(c->type, seed, in->x, n, false);
    if (c->has_min) random_weights(c->type, seed, in->x_min, n, true);
    random_activations(c->act, kind, seed, in->y, in->tmp, n);
}

static void input_free(dot_input *in) {
    free(in->x);
    free(in->x_min);
    free(in->y);
    free(in->fx);
    free(in->fy);
    free(in->tmp);
}

typedef void (*to_float_fn)(const void *x, float *y, int64_t n);

// S (see the top of the file) and the exact sum of products, from rows dequantized by
// deq_x (weights) and deq_y (activations); fx and fy keep the dequantized rows.
static double magnitude(const dot_case *c, dot_input *in, to_float_fn deq_x, to_float_fn deq_y,
                        double *exact) {
    deq_x(in->x, in->fx, in->n);
    deq_y(in->y, in->fy, in->n);
    double s = 0, e = 0;
    for (int64_t i = 0; i < in->n; i++) {
        e += (double)in->fx[i] * in->fy[i];
        s += fabs((double)in->fx[i] * in->fy[i]);
    }
    if (c->has_min) {
        deq_x(in->x_min, in->tmp, in->n);
        for (int64_t i = 0; i < in->n; i++) s += 2 * fabs((double)in->tmp[i] * in->fy[i]);
    }
    if (exact) *exact = e;
    return s;
}

static bool cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

static uint64_t case_seed(const dot_case *c, int k) {
    return 1000u * (uint64_t)c->type + (uint64_t)k;
}

// ---------------------------------------------------------------------------------------------
// The ops table hands out these functions: the ref always, AVX2 exactly when the CPU has it;
// the name says avx512 where the CPU has AVX-512BW (its tiles are in use too, except on Zen 4).

TEST(dot_ops_dispatch) {
    const char *force = getenv("FT_SIMD");
    bool avx2 = cpu_has_avx2() && !(force && strcmp(force, "scalar") == 0);
    __builtin_cpu_init();
    bool avx2_only = force && (strcmp(force, "avx2") == 0 || strcmp(force, "avxvnni") == 0);
    bool avx512 = avx2 && !avx2_only && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                  __builtin_cpu_supports("avx512dq");
    CHECK(strcmp(ft_quant_simd_name(), avx512 ? "avx512" : avx2 ? "avx2" : "scalar") == 0, "simd %s",
          ft_quant_simd_name());
    // decode's q8_0 matvec: VNNI where the CPU has it, and never when FT_SIMD=avx2 or avxvnni forces AVX2;
    // Zen 4 keeps the AVX2 tiles unless FT_SIMD=avx512
    bool tiles512 = avx512 && (!ft_quant_zen4() || (force && strcmp(force, "avx512") == 0));
    bool vnni = tiles512 && __builtin_cpu_supports("avx512vnni");
    CHECK((ft_quant_ops_find(FT_TYPE_Q8_0)->vec_dot_tile == ft_vec_dot_tile_q8_0_vnni) == vnni, "q8_0 tile");
    CHECK((ft_quant_ops_find(FT_TYPE_Q4_K)->vec_dot_tile == ft_vec_dot_tile_q4_K_vnni) == vnni, "q4_K tile");
    CHECK((ft_quant_ops_find(FT_TYPE_MXFP4)->vec_dot_tile == ft_vec_dot_tile_mxfp4_vnni) == vnni, "mxfp4 tile");
    if (avx2 && !tiles512)
        CHECK(ft_quant_ops_find(FT_TYPE_Q8_0)->vec_dot_tile == ft_vec_dot_tile_q8_0_avx2 &&
                  ft_quant_ops_find(FT_TYPE_Q4_K)->vec_dot_tile == ft_vec_dot_tile_q4_K_avx2,
              "AVX2 tiles (zen4 %d)", ft_quant_zen4());
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cases); i++) {
        const dot_case *c = &g_cases[i];
        const ft_quant_ops *ops = ft_quant_ops_find(c->type);
        REQUIRE(ops != NULL, "%s", ft_type_name(c->type));
        CHECK(ops->vec_dot_ref == c->ref, "%s", ft_type_name(c->type));
        CHECK(ops->vec_dot == (avx2 ? c->avx2 : c->ref), "%s", ft_type_name(c->type));
        CHECK(ops->vec_dot_type == c->act, "%s", ft_type_name(c->type));
    }
}

// ---------------------------------------------------------------------------------------------
// 1. ref vs the dequantized rows summed in double, dequantized by llama.cpp.

typedef void (*oracle_row_fn)(const void *x, float *y, int64_t n);

static void copy_f32(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

// q8_1 has no exported dequantizer in llama.cpp; its value is d * qs (s is a derived sum).
static void deq_q8_1(const void *vx, float *y, int64_t n) {
    const block_q8_1 *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = ft_fp16_to_fp32(x[i / 32].d) * x[i / 32].qs[i % 32];
}

static oracle_row_fn oracle_dequantizer(void *lib, enum ft_type t) {
    switch (t) {
    case FT_TYPE_F32: return copy_f32;
    case FT_TYPE_F16: return (oracle_row_fn)oracle_sym(lib, "ggml_fp16_to_fp32_row");
    case FT_TYPE_BF16: return (oracle_row_fn)oracle_sym(lib, "ggml_bf16_to_fp32_row");
    case FT_TYPE_Q8_0: return (oracle_row_fn)oracle_sym(lib, "dequantize_row_q8_0");
    case FT_TYPE_Q8_1: return deq_q8_1;
    case FT_TYPE_Q8_K: return (oracle_row_fn)oracle_sym(lib, "dequantize_row_q8_K");
    default: return NULL;
    }
}

TEST(dot_ref_vs_dequantized_llama) {
    void *base = oracle_ggml_base();
    if (!base) return;
    double worst = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cases); i++) {
        const dot_case *c = &g_cases[i];
        oracle_row_fn deq_x =
            c->oracle_dequant ? (oracle_row_fn)oracle_sym(base, c->oracle_dequant) : copy_f32;
        oracle_row_fn deq_y = oracle_dequantizer(base, c->act);
        REQUIRE(deq_x && deq_y);
        const bool float_type = ft_type_traits_find(c->type)->block_elems == 1;
        for (int k = 0; k < N_LENGTHS; k++) {
            dot_input in;
            input_make(&in, c, row_length(c->type, k), case_seed(c, k), ACT_NORMAL);
            double exact;
            double s = magnitude(c, &in, deq_x, deq_y, &exact);
            int64_t nb = in.n / ft_type_traits_find(c->type)->block_elems;
            double tol = float_type ? TOL_TRUTH_FLOAT * s : (nb + 4) * TOL_TRUTH_PER_BLOCK * s;
            if (c->act == FT_TYPE_Q8_1) {
                // m * s per block, s rounded to fp16: within 2^-11 |s|, allowed 2^-10
                const block_q8_1 *y = in.y;
                deq_x(in.x_min, in.tmp, in.n);
                for (int64_t b = 0; b < nb; b++)
                    tol += 0x1p-10 * fabs((double)in.tmp[32 * b] * ft_fp16_to_fp32(y[b].s));
            }
            float got = c->ref(in.n, in.x, in.y);
            double err = fabs(got - exact);
            CHECK(err <= tol, "%s n=%lld: ref %.9g, dequantized %.9g, |diff| %.3g > tol %.3g (S %.4g)",
                  ft_type_name(c->type), (long long)in.n, got, exact, err, tol, s);
            if (err / s > worst) worst = err / s, worst_name = ft_type_name(c->type);
            input_free(&in);
        }
    }
    fprintf(stderr, "    worst |ref - truth| / S: %.3g (%s)\n", worst, worst_name);
}

// ---------------------------------------------------------------------------------------------
// 2. avx2 vs ref. S comes from ft's own dequantizers here (no oracle needed).

TEST(dot_avx2_vs_ref) {
    if (!cpu_has_avx2()) {
        test_skip("the CPU has no AVX2");
        return;
    }
    double worst = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cases); i++) {
        const dot_case *c = &g_cases[i];
        to_float_fn deq_x = ft_quant_ops_find(c->type)->to_float;
        to_float_fn deq_y = ft_quant_ops_find(c->act)->to_float;
        for (int kind = ACT_NORMAL; kind <= ACT_SATURATED; kind++)
            for (int k = 0; k < N_LENGTHS; k++) {
                dot_input in;
                input_make(&in, c, row_length(c->type, k), case_seed(c, k), (enum act_kind)kind);
                double s = magnitude(c, &in, deq_x, deq_y, NULL);
                float ref = c->ref(in.n, in.x, in.y);
                float avx2 = c->avx2(in.n, in.x, in.y);
                double err = fabs((double)avx2 - ref), tol = TOL_REL * s + TOL_ABS;
                CHECK(err <= tol, "%s n=%lld act %d: avx2 %.9g, ref %.9g, |diff| %.3g > tol %.3g",
                      ft_type_name(c->type), (long long)in.n, kind, avx2, ref, err, tol);
                if (err / s > worst) worst = err / s, worst_name = ft_type_name(c->type);
                input_free(&in);
            }
    }
    fprintf(stderr, "    worst |avx2 - ref| / S: %.3g (%s)\n", worst, worst_name);
}

// ---------------------------------------------------------------------------------------------
// 2b. Tiles (vec_dot_tile) against the per-row dot products: equal to vec_dot to the bit (the
// same arithmetic per column) and so within the avx2-vs-ref tolerance of the reference, for
// column counts on both sides of the kernels' group of 4 (tails of 1..3 columns), several
// rows, and an output stride wider than the row count whose gaps must stay untouched.

TEST(dot_tile_vs_rows) {
    if (!cpu_has_avx2()) {
        test_skip("the CPU has no AVX2");
        return;
    }
    enum { NR = 5, MAX_NC = 9, LS = NR + 2 };
    // the formats prefill reads most must have a tile kernel
    const enum ft_type must[] = {FT_TYPE_Q4_0, FT_TYPE_Q8_0, FT_TYPE_Q4_K, FT_TYPE_Q5_K, FT_TYPE_Q6_K};
    for (size_t i = 0; i < FT_ARRAY_LEN(must); i++)
        CHECK(ft_quant_ops_find(must[i])->vec_dot_tile != NULL, "%s has no tile kernel", ft_type_name(must[i]));
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cases); i++) {
        const dot_case *c = &g_cases[i];
        const ft_quant_ops *q = ft_quant_ops_find(c->type);
        if (!q->vec_dot_tile) continue;
        for (int k = 1; k <= 6; k += 3) {
            int64_t n = row_length(c->type, k);
            size_t bx = ft_row_bytes(c->type, n), by = ft_row_bytes(c->act, n);
            uint8_t *x = malloc(bx * NR), *y = malloc(by * MAX_NC);
            float *tmp = malloc((size_t)n * sizeof(float)), s[MAX_NC * LS];
            for (int r = 0; r < NR; r++) random_weights(c->type, case_seed(c, k) + 17 * (uint64_t)r, x + r * bx, n, false);
            for (int col = 0; col < MAX_NC; col++)
                random_activations(c->act, col % 3 == 2 ? ACT_SATURATED : ACT_NORMAL, case_seed(c, k) + 31 * (uint64_t)col,
                                   y + col * by, tmp, n);
            for (int nc = 1; nc <= MAX_NC; nc++) {
                for (int e = 0; e < MAX_NC * LS; e++) s[e] = NAN;
                q->vec_dot_tile(n, x, bx, NR, y, by, nc, s, LS);
                for (int col = 0; col < MAX_NC; col++)
                    for (int r = 0; r < LS; r++) {
                        float got = s[col * LS + r];
                        if (col >= nc || r >= NR) {
                            CHECK(isnan(got), "%s nc=%d: wrote outside the tile at (%d, %d)", ft_type_name(c->type), nc, col, r);
                            continue;
                        }
                        float row = q->vec_dot(n, x + r * bx, y + col * by);
                        float ref = q->vec_dot_ref(n, x + r * bx, y + col * by);
                        CHECK(got == row, "%s n=%lld nc=%d (%d, %d): tile %.9g, vec_dot %.9g", ft_type_name(c->type),
                              (long long)n, nc, col, r, got, row);
                        CHECK(fabsf(got - ref) <= 1e-3f * (fabsf(ref) + 1.0f), "%s n=%lld nc=%d: tile %.9g, ref %.9g",
                              ft_type_name(c->type), (long long)n, nc, got, ref);
                    }
            }
            free(x);
            free(y);
            free(tmp);
        }
    }
}

// 2c. Decode's tiles: one activation row and 1..9 weight rows, so kernels that take several
// rows per pass (with AVX-512 VNNI q8_0 and mxfp4 take 4, q4_K 2) meet full groups and every tail; equal to
// vec_dot to the bit, and the rows must land at their own places in the output.

TEST(dot_tile_matvec_rows) {
    if (!cpu_has_avx2()) {
        test_skip("the CPU has no AVX2");
        return;
    }
    enum { MAX_NR = 9 };
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cases); i++) {
        const dot_case *c = &g_cases[i];
        const ft_quant_ops *q = ft_quant_ops_find(c->type);
        if (!q->vec_dot_tile) continue;
        for (int k = 0; k < N_LENGTHS; k += 3) {
            int64_t n = row_length(c->type, k);
            size_t bx = ft_row_bytes(c->type, n), by = ft_row_bytes(c->act, n);
            uint8_t *x = malloc(bx * MAX_NR), *y = malloc(by);
            float *tmp = malloc((size_t)n * sizeof(float)), s[MAX_NR + 1];
            for (int r = 0; r < MAX_NR; r++) random_weights(c->type, case_seed(c, k) + 13 * (uint64_t)r, x + r * bx, n, false);
            random_activations(c->act, k % 2 ? ACT_SATURATED : ACT_NORMAL, case_seed(c, k) + 5, y, tmp, n);
            for (int nr = 1; nr <= MAX_NR; nr++) {
                for (int e = 0; e <= MAX_NR; e++) s[e] = NAN;
                q->vec_dot_tile(n, x, bx, nr, y, by, 1, s, MAX_NR);
                for (int r = 0; r <= MAX_NR; r++) {
                    if (r >= nr) {
                        CHECK(isnan(s[r]), "%s nr=%d: wrote row %d", ft_type_name(c->type), nr, r);
                        continue;
                    }
                    float row = q->vec_dot(n, x + r * bx, y);
                    CHECK(s[r] == row, "%s n=%lld nr=%d row %d: tile %.9g, vec_dot %.9g", ft_type_name(c->type),
                          (long long)n, nr, r, s[r], row);
                }
            }
            free(x);
            free(y);
            free(tmp);
        }
    }
}

// 2d. Prefill's GEMMs (AMX, AVX-512 VNNI and BF16, AVX-VNNI, AVX2; each where the CPU runs it): q8_0, q4_0, q5_0,
// iq4_nl, mxfp4, q4_K, q5_K and q6_K equal to the reference dot products to the bit (exact integer block sums, the reference's float
// steps in its order); bf16 within n * 2^-24 * S of the reference's double sum (S = sum |x_i y_i|:
// float sums with at most one rounding per element, each within 2^-24 of a partial sum bounded
// by S; AMX rounds once per 32-element step, VDPBF16PS and AVX2's FMA at most once per product). Each output also equals, to the bit, the same output
// of the largest call: it depends on its own rows only (a prefill chunk's token that its expert
// shares with none takes the GEMM alone). For weight-row and token counts from 1, on both sides
// of the 16 x 16 tile, of the VNNI GEMMs' 8-row passes and 16-token vectors, of AVX2's 4-row
// passes and 8-token vectors, and of bf16's pairs
// of tiles (tails of both), rows of 1 to 45 blocks (bf16: 32 to 1440 elements, and one of 48
// that is not a multiple of the 32-element step), saturated activations, and an output stride
// whose gaps must stay untouched.

enum gemm_kind { GEMM_AMX, GEMM_VNNI, GEMM_AVXVNNI, GEMM_AVX2, GEMM_KINDS };
static const char *const g_gemm_kinds[GEMM_KINDS] = {"amx", "vnni", "avxvnni", "avx2"};

// The GEMM of kind k for type t, where this CPU can run it (dispatched or not).
static ft_vec_dot_tile_fn gemm_kernel(enum ft_type t, enum gemm_kind k) {
    if (!cpu_has_avx2()) return NULL;
    if (k == GEMM_AVX2)
        return t == FT_TYPE_Q8_0     ? ft_gemm_q8_0_avx2
               : t == FT_TYPE_Q4_K   ? ft_gemm_q4_K_avx2
               : t == FT_TYPE_Q5_K   ? ft_gemm_q5_K_avx2
               : t == FT_TYPE_Q6_K   ? ft_gemm_q6_K_avx2
               : t == FT_TYPE_Q4_0   ? ft_gemm_q4_0_avx2
               : t == FT_TYPE_Q5_0   ? ft_gemm_q5_0_avx2
               : t == FT_TYPE_IQ4_NL ? ft_gemm_iq4_nl_avx2
               : t == FT_TYPE_MXFP4  ? ft_gemm_mxfp4_avx2
               : t == FT_TYPE_BF16   ? ft_gemm_bf16_avx2
                                     : NULL;
    if (k == GEMM_AVXVNNI) {
        if (!ft_gemm_avxvnni_supported()) return NULL;
        return t == FT_TYPE_Q8_0     ? ft_gemm_q8_0_avxvnni
               : t == FT_TYPE_Q4_K   ? ft_gemm_q4_K_avxvnni
               : t == FT_TYPE_Q5_K   ? ft_gemm_q5_K_avxvnni
               : t == FT_TYPE_Q6_K   ? ft_gemm_q6_K_avxvnni
               : t == FT_TYPE_Q4_0   ? ft_gemm_q4_0_avxvnni
               : t == FT_TYPE_Q5_0   ? ft_gemm_q5_0_avxvnni
               : t == FT_TYPE_IQ4_NL ? ft_gemm_iq4_nl_avxvnni
               : t == FT_TYPE_MXFP4  ? ft_gemm_mxfp4_avxvnni
                                     : NULL;
    }
    if (k == GEMM_VNNI) {
        if (!ft_gemm_vnni_supported()) return NULL;
        return t == FT_TYPE_Q8_0   ? ft_gemm_q8_0_vnni
               : t == FT_TYPE_Q4_K ? ft_gemm_q4_K_vnni
               : t == FT_TYPE_Q5_K ? ft_gemm_q5_K_vnni
               : t == FT_TYPE_Q6_K ? ft_gemm_q6_K_vnni
               : t == FT_TYPE_Q4_0 ? ft_gemm_q4_0_vnni
               : t == FT_TYPE_Q5_0 ? ft_gemm_q5_0_vnni
               : t == FT_TYPE_IQ4_NL ? ft_gemm_iq4_nl_vnni
               : t == FT_TYPE_MXFP4 ? ft_gemm_mxfp4_vnni
               : t == FT_TYPE_BF16 && ft_gemm_bf16_avx512_supported() ? ft_gemm_bf16_avx512
                                                                      : NULL;
    }
    if (!__builtin_cpu_supports("avx512bw") || !ft_amx_init()) return NULL;
    return t == FT_TYPE_Q8_0                        ? ft_gemm_q8_0_amx
           : t == FT_TYPE_Q4_K                      ? ft_gemm_q4_K_amx
           : t == FT_TYPE_BF16 && ft_amx_has_bf16() ? ft_gemm_bf16_amx
                                                    : NULL;
}

TEST(dot_gemm_vs_ref) {
    const char *force = getenv("FT_SIMD");
    bool scalar = force && !strcmp(force, "scalar");
    const char *amx = getenv("FT_AMX");
    bool avx2 = force && !strcmp(force, "avx2"), avxvnni = force && !strcmp(force, "avxvnni");
    bool amx_off = (amx && !strcmp(amx, "0")) || avx2 || avxvnni || (force && !strcmp(force, "avx512"));
    // every kind but "none" has a GEMM for each of these formats (AMX's missing ones from VNNI or
    // AVX2, the VNNI kinds' bf16 from AVX2)
    const char *kind = ft_quant_gemm_name();
    const char *want_kind = scalar || !cpu_has_avx2()                           ? "none"
                            : ft_quant_amx()                                    ? "amx"
                            : ft_gemm_vnni_supported() && !avx2 && !avxvnni     ? "vnni"
                            : ft_gemm_avxvnni_supported() && !avx2              ? "avxvnni"
                                                                                : "avx2";
    CHECK(!strcmp(kind, want_kind), "gemm %s, want %s (FT_SIMD=%s)", kind, want_kind, force);
    CHECK(!(amx_off && ft_quant_amx()), "FT_SIMD=%s FT_AMX=%s: AMX on", force, amx);
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cases); i++) {
        enum ft_type t = g_cases[i].type;
        bool has = t == FT_TYPE_Q4_K || t == FT_TYPE_Q8_0 || t == FT_TYPE_Q5_K || t == FT_TYPE_Q6_K ||
                   t == FT_TYPE_Q4_0 || t == FT_TYPE_Q5_0 || t == FT_TYPE_IQ4_NL || t == FT_TYPE_MXFP4 ||
                   t == FT_TYPE_BF16;
        bool want = strcmp(kind, "none") && has;
        CHECK((ft_quant_ops_find(t)->gemm != NULL) == want, "%s gemm (%s)", ft_type_name(t), kind);
    }
    // the kernels are tested wherever the CPU runs them, dispatched or not (FT_AMX=0, FT_SIMD)
    if (!cpu_has_avx2()) {
        test_skip("no AVX2 on this CPU");
        return;
    }
    enum { MAX_NR = 37, MAX_NC = 70, LS = MAX_NR + 3 };
    const int nrs[] = {MAX_NR, 1, 5, 8, 16, 17}, ncs[] = {MAX_NC, 1, 2, 3, 7, 16, 19, 35};
    float *s = malloc(sizeof(float) * MAX_NC * LS), *whole = malloc(sizeof(float) * MAX_NC * LS);
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cases); i++) {
        for (int kk = 0; kk < GEMM_KINDS; kk++) {
            const dot_case *c = &g_cases[i];
            const ft_quant_ops *q = ft_quant_ops_find(c->type);
            ft_vec_dot_tile_fn gemm = gemm_kernel(c->type, (enum gemm_kind)kk);
            if (!gemm) continue;
            for (int k = 0; k < 7; k += 2) {
                // bf16's rows: 32 x the blocks (its block is 1 element), and 48 for the fallback
                bool bf16 = c->type == FT_TYPE_BF16;
                int64_t n =
                    k == 6 ? (bf16 ? 48 : row_length(c->type, 1)) : row_length(c->type, k) * (bf16 ? 32 : 1);
                size_t bx = ft_row_bytes(c->type, n), by = ft_row_bytes(c->act, n);
                uint8_t *x = malloc(bx * MAX_NR), *y = malloc(by * MAX_NC);
                float *tmp = malloc((size_t)n * sizeof(float)), *fx = malloc((size_t)n * sizeof(float));
                for (int r = 0; r < MAX_NR; r++)
                    random_weights(c->type, case_seed(c, k) + 19 * (uint64_t)r, x + r * bx, n, false);
                // q8_0: the first half of the rows without a code of -128 (what its quantizer
                // writes), the rest random (a file may hold one): the AVX2 sign trick's two forms
                if (c->type == FT_TYPE_Q8_0)
                    for (int r = 0; r < MAX_NR / 2; r++)
                        for (int64_t b = 0; b < n / QK8_0; b++) {
                            block_q8_0 *blk = (block_q8_0 *)(x + r * bx) + b;
                            for (int j = 0; j < QK8_0; j++)
                                if (blk->qs[j] == -128) blk->qs[j] = -127;
                        }
                for (int col = 0; col < MAX_NC; col++)
                    random_activations(c->act, col % 4 == 3 ? ACT_SATURATED : ACT_NORMAL,
                                       case_seed(c, k) + 37 * (uint64_t)col, y + col * by, tmp, n);
                for (size_t a = 0; a < FT_ARRAY_LEN(nrs); a++)
                    for (size_t b = 0; b < FT_ARRAY_LEN(ncs); b++) {
                        int nr = nrs[a], nc = ncs[b];
                        for (int e = 0; e < MAX_NC * LS; e++)
                            s[e] = NAN;
                        gemm(n, x, bx, nr, y, by, nc, s, LS);
                        // the first call (every row) is what each smaller one must repeat to the bit:
                        // an output depends on its own rows only, not on the call's others
                        if (a == 0 && b == 0) memcpy(whole, s, sizeof(float) * MAX_NC * LS);
                        int bad = 0, moved = 0;
                        for (int col = 0; col < MAX_NC; col++)
                            for (int r = 0; r < LS; r++) {
                                float got = s[col * LS + r];
                                if (col >= nc || r >= nr) {
                                    bad += !isnan(got);
                                    continue;
                                }
                                moved += memcmp(&got, &whole[col * LS + r], sizeof(float)) != 0;
                                float ref = q->vec_dot_ref(n, x + r * bx, y + col * by);
                                double tol = 0;
                                if (bf16) {
                                    q->to_float(x + r * bx, fx, n);
                                    q->to_float(y + col * by, tmp, n);
                                    for (int64_t e = 0; e < n; e++)
                                        tol += fabs((double)fx[e] * tmp[e]);
                                    tol *= (double)n * 0x1p-24;
                                }
                                if (fabs((double)got - ref) > tol && bad++ < 3)
                                    CHECK(false,
                                          "%s %s n=%lld nr=%d nc=%d (%d, %d): gemm %.9g, ref %.9g, tol %.3g",
                                          g_gemm_kinds[kk], ft_type_name(c->type), (long long)n, nr, nc, col, r, got, ref,
                                          tol);
                            }
                        CHECK(bad == 0, "%s %s n=%lld nr=%d nc=%d: %d outputs wrong or outside the tile",
                              g_gemm_kinds[kk], ft_type_name(c->type), (long long)n, nr, nc, bad);
                        CHECK(moved == 0,
                              "%s n=%lld nr=%d nc=%d: %d outputs differ from the same rows' in a call of %d "
                              "x %d",
                              ft_type_name(c->type), (long long)n, nr, nc, moved, MAX_NR, MAX_NC);
                    }
                free(x);
                free(y);
                free(tmp);
                free(fx);
            }
        }
    }
    free(s);
    free(whole);
}

// ---------------------------------------------------------------------------------------------
// 3. ref and avx2 vs llama.cpp's AVX2 kernels, reached through ggml_get_type_traits_cpu.

typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                size_t by, int nrc);
struct ggml_type_traits_cpu { // ggml-cpu.h
    void (*from_float)(const float *x, void *y, int64_t k);
    ggml_vec_dot_fn vec_dot;
    int vec_dot_type; // enum ggml_type: the same ids as enum ft_type
    int64_t nrows;
};
typedef const struct ggml_type_traits_cpu *(*get_traits_fn)(int type);

// libggml-cpu-haswell.so (llama.cpp's AVX2 + FMA + F16C + BMI2 build), or NULL after the
// current test was skipped (a CPU without those, or no oracle) or failed (a broken install).
static void *oracle_cpu_haswell(void) {
    static void *h;
    static bool tried;
    static char why[1024];
    __builtin_cpu_init();
    if (!cpu_has_avx2() || !__builtin_cpu_supports("bmi2")) {
        test_skip("the CPU cannot run llama.cpp's AVX2 build");
        return NULL;
    }
    if (!oracle_ggml_base()) return NULL;
    if (!tried) {
        tried = true;
        char path[1024];
        snprintf(path, sizeof(path), "%s/libggml-cpu-haswell.so", oracle_lib_dir());
        h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (h) {
            void (*cpu_init)(void) = (void (*)(void))oracle_sym(h, "ggml_cpu_init");
            if (cpu_init) cpu_init();
        } else {
            snprintf(why, sizeof(why), "%s", dlerror());
        }
    }
    if (!h) test_fail(__FILE__, __LINE__, "cannot load llama.cpp's CPU backend: %s", why);
    return h;
}

TEST(dot_vs_llama_cpu) {
    void *cpu = oracle_cpu_haswell();
    if (!cpu) return;
    get_traits_fn get_traits = (get_traits_fn)oracle_sym(cpu, "ggml_get_type_traits_cpu");
    REQUIRE(get_traits);
    double worst = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < FT_ARRAY_LEN(g_cases); i++) {
        const dot_case *c = &g_cases[i];
        const struct ggml_type_traits_cpu *tr = get_traits(c->type);
        REQUIRE(tr && tr->vec_dot, "%s", ft_type_name(c->type));
        CHECK(tr->vec_dot_type == (int)c->act, "%s: llama.cpp's vec_dot_type %d, ours %d",
              ft_type_name(c->type), tr->vec_dot_type, (int)c->act);
        to_float_fn deq_x = ft_quant_ops_find(c->type)->to_float;
        to_float_fn deq_y = ft_quant_ops_find(c->act)->to_float;
        for (int k = 0; k < N_LENGTHS; k++) {
            dot_input in;
            input_make(&in, c, row_length(c->type, k), case_seed(c, k), ACT_NORMAL);
            double s = magnitude(c, &in, deq_x, deq_y, NULL);
            float llama = NAN;
            tr->vec_dot((int)in.n, &llama, 0, in.x, 0, in.y, 0, 1);
            float ours[2] = {c->ref(in.n, in.x, in.y), c->avx2(in.n, in.x, in.y)};
            for (int v = 0; v < 2; v++) {
                double err = fabs((double)ours[v] - llama), tol = TOL_REL * s + TOL_ABS;
                CHECK(err <= tol, "%s n=%lld: %s %.9g, llama.cpp %.9g, |diff| %.3g > tol %.3g",
                      ft_type_name(c->type), (long long)in.n, v ? "avx2" : "ref", ours[v], llama, err, tol);
                if (err / s > worst) worst = err / s, worst_name = ft_type_name(c->type);
            }
            input_free(&in);
        }
    }
    fprintf(stderr, "    worst |ft - llama.cpp| / S: %.3g (%s)\n", worst, worst_name);
}
