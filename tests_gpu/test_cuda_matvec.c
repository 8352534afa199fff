// test_cuda_matvec.c: ft_cuda_matvec (src/backend/cuda/matvec_q.cu, matvec_f.cu) against an
// independent reference, for every weight format it supports.
//
// Weights are random valid rows (ft_quant_random_row: every code and sub-scale pattern).
// Activations are normal floats with a few outliers. For the quantized formats the GPU
// quantizes them to q8_1 (checked separately against the CPU quantizer); the reference takes
// those same q8_1 blocks back, dequantizes them (d * q) and the weights (the format's
// to_float), and sums the products in double. For f32/f16/bf16 the reference takes the float
// activations directly. Outputs are filled with NaN before each launch, so an unwritten
// element fails.
//
// Shapes: rows 1, 7, 130, 769 (odd counts leave the last 2-row tile half full) times four row
// lengths (one block, 3 blocks of 256 or 32, a 2048+ length that is not a multiple of the
// 128-thread stride, 4096), times 1, 2, 3, 4, 5 and 8 tokens (every kernel instantiation,
// with n_tok below its NCOLS). The quantized formats run each shape three times: with the
// automatic kernel geometry, and forced to a warp and to a CTA per row group
// (ft_cuda_matvec_force_tpr), so both kernel shapes are checked whatever the GPU's SM count.
//
// Tolerance: |y - ref| <= TOL * S, S = sum |w_i * x_i| over the row (plus 2 * sum |min_i * x_i|
// for the formats with a min term, whose kernels round the scale and min parts separately:
// min_i is the element with its block's main scale set to 0). Inside a sub-block the GPU sums
// are exact integers; what remains is float rounding of the scale products and of a sum of at
// most ~50 terms per thread plus a 7-level tree, below 64 * 2^-24 = 3.8e-6; TOL leaves a factor
// of about 2.6.
#include "gpu_test.h"

#include "../src/quant/fp16.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

// Byte offset of the main scale d in a block of a format with a min term, or -1.
static int main_scale_offset(enum ft_type t) {
    switch (t) {
    case FT_TYPE_Q4_1: case FT_TYPE_Q5_1: case FT_TYPE_Q4_K: case FT_TYPE_Q5_K: return 0;
    case FT_TYPE_Q2_K: return 80; // after scales[16] and qs[64]
    default: return -1;
    }
}

static bool is_float_type(enum ft_type t) {
    return t == FT_TYPE_F32 || t == FT_TYPE_F16 || t == FT_TYPE_BF16;
}

// Worst error / S seen per type, printed at the end of each type's test.
typedef struct {
    double worst;
    int cases;
} stats;

static void run_case(enum ft_type t, int64_t n_rows, int64_t n_cols, int n_tok, ft_rng *rng,
                     stats *st) {
    const ft_quant_ops *ops = ft_quant_ops_find(t);
    const ft_type_traits *tr = ft_type_traits_find(t);
    const size_t row_bytes = ft_row_bytes(t, n_cols);
    const size_t w_bytes = row_bytes * (size_t)n_rows;
    const size_t nx = (size_t)n_cols * n_tok, ny = (size_t)n_rows * n_tok;
    const bool quantized = ft_cuda_matvec_wants_q8_1(t);

    uint8_t *w = ft_malloc(w_bytes);
    for (int64_t r = 0; r < n_rows; r++) ft_quant_random_row(t, rng, 0.05f, w + r * row_bytes, n_cols);
    float *x = ft_malloc(nx * sizeof(float));
    for (size_t i = 0; i < nx; i++) {
        x[i] = ft_rng_normal(rng);
        if (ft_rng_uniform(rng) < 0.01f) x[i] *= 20.0f;
    }

    void *dw = ft_cuda_malloc(w_bytes);
    float *dx = ft_cuda_malloc(nx * sizeof(float));
    float *dy = ft_cuda_malloc(ny * sizeof(float));
    const size_t qb = quantized ? ft_cuda_q8_1_bytes(n_cols, n_tok) : 0;
    void *dq = quantized ? ft_cuda_malloc(qb) : NULL;
    FT_ASSERT(dw && dx && dy && (!quantized || dq));
    ft_cuda_memcpy_h2d(dw, w, w_bytes, NULL);
    ft_cuda_memcpy_h2d(dx, x, nx * sizeof(float), NULL);
    if (quantized) ft_cuda_quantize_q8_1(dx, dq, n_cols, n_tok, NULL);

    // the activations as the kernel saw them
    float *xr = ft_malloc(nx * sizeof(float));
    if (quantized) {
        uint8_t *q = ft_malloc(qb);
        ft_cuda_memcpy_d2h(q, dq, qb, NULL);
        ft_cuda_device_sync();
        ft_dequantize_row_q8_1(q, xr, (int64_t)nx);
        free(q);
    } else {
        memcpy(xr, x, nx * sizeof(float));
    }

    // reference and S per (token, row)
    const int ms = main_scale_offset(t);
    float *wf = ft_malloc((size_t)n_cols * sizeof(float));
    float *wm = ms >= 0 ? ft_malloc((size_t)n_cols * sizeof(float)) : NULL;
    uint8_t *tmp = ms >= 0 ? ft_malloc(row_bytes) : NULL;
    double *ref = ft_malloc(ny * sizeof(double)), *sabs = ft_malloc(ny * sizeof(double));
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *wr = w + r * row_bytes;
        ops->to_float(wr, wf, n_cols);
        if (ms >= 0) {
            memcpy(tmp, wr, row_bytes);
            for (int64_t b = 0; b < n_cols / tr->block_elems; b++)
                memset(tmp + b * tr->block_bytes + ms, 0, sizeof(ft_half));
            ops->to_float(tmp, wm, n_cols);
        }
        for (int tk = 0; tk < n_tok; tk++) {
            const float *xt = xr + (size_t)tk * n_cols;
            double acc = 0, s = 0;
            for (int64_t i = 0; i < n_cols; i++) {
                acc += (double)wf[i] * xt[i];
                s += fabs((double)wf[i] * xt[i]);
                if (wm) s += 2 * fabs((double)wm[i] * xt[i]);
            }
            ref[(size_t)tk * n_rows + r] = acc;
            sabs[(size_t)tk * n_rows + r] = s;
        }
    }

    // every kernel geometry: automatic, a warp per row group, a CTA per row group
    const int tprs[] = {0, 32, 128};
    float *y = ft_malloc(ny * sizeof(float));
    for (size_t m = 0; m < (quantized ? FT_ARRAY_LEN(tprs) : 1); m++) {
        ft_cuda_matvec_force_tpr(tprs[m]);
        ft_cuda_memset(dy, 0xFF, ny * sizeof(float), NULL); // all-ones bytes: NaN
        ft_cuda_matvec_params p = {.type = t, .w = dw, .n_rows = n_rows, .n_cols = n_cols,
                                   .x = quantized ? dq : (const void *)dx, .y = dy, .n_tok = n_tok};
        ft_cuda_matvec(&p, NULL);
        ft_cuda_memcpy_d2h(y, dy, ny * sizeof(float), NULL);
        ft_cuda_device_sync();
        if (quantized) { // the residual add in the same launch: y's bits again, and acc + y
            float *acc = ft_malloc(ny * sizeof(float)), *acc2 = ft_malloc(ny * sizeof(float));
            float *y2 = ft_malloc(ny * sizeof(float)), *dacc = ft_cuda_malloc(ny * sizeof(float));
            for (size_t i = 0; i < ny; i++) acc[i] = 4.0f * ft_rng_normal(rng);
            ft_cuda_memcpy_h2d(dacc, acc, ny * sizeof(float), NULL);
            ft_cuda_memset(dy, 0xFF, ny * sizeof(float), NULL);
            p.acc = dacc;
            ft_cuda_matvec(&p, NULL);
            ft_cuda_memcpy_d2h(y2, dy, ny * sizeof(float), NULL);
            ft_cuda_memcpy_d2h(acc2, dacc, ny * sizeof(float), NULL);
            ft_cuda_device_sync();
            int off = 0;
            for (size_t i = 0; i < ny; i++) off += acc2[i] != acc[i] + y[i];
            CHECK(!memcmp(y, y2, ny * sizeof(float)) && off == 0, "%s rows %lld n_tok %d tpr %d: with acc, y %s, %d sums off",
                  ft_type_name(t), (long long)n_rows, n_tok, tprs[m], memcmp(y, y2, ny * sizeof(float)) ? "differs" : "equal", off);
            free(acc); free(acc2); free(y2);
            ft_cuda_free(dacc);
        }
        ft_cuda_matvec_force_tpr(0);
        int bad = 0;
        for (size_t i = 0; i < ny; i++) {
            const double err = fabs((double)y[i] - ref[i]);
            const double rel = sabs[i] > 0 ? err / sabs[i] : err;
            if (!(rel <= TOL)) { // NaN fails too
                if (bad++ < 3)
                    CHECK(rel <= TOL, "%s rows %lld cols %lld n_tok %d tpr %d: token %zu row %zu: got %g ref %g (err/S %.3g)",
                          ft_type_name(t), (long long)n_rows, (long long)n_cols, n_tok, tprs[m],
                          i / (size_t)n_rows, i % (size_t)n_rows, y[i], ref[i], rel);
            }
            if (rel > st->worst || rel != rel) st->worst = rel;
        }
    }
    free(ref);
    free(sabs);
    st->cases++;
    free(w); free(x); free(y); free(xr); free(wf); free(wm); free(tmp);
    ft_cuda_free(dw); ft_cuda_free(dx); ft_cuda_free(dy); ft_cuda_free(dq);
}

static void test_type(enum ft_type t) {
    GPU_TEST_REQUIRE_DEVICE();
    REQUIRE(ft_cuda_matvec_supported(t));
    const int blk = ft_type_traits_find(t)->block_elems;
    int64_t cols[4];
    if (is_float_type(t)) {
        // 5 and 2050: not a multiple of 4 (the scalar path); 64 and 4096: the float4 path
        const int64_t c[4] = {5, 64, 2050, 4096};
        memcpy(cols, c, sizeof(c));
    } else if (blk == QK_K) {
        const int64_t c[4] = {256, 768, 2304, 4096};
        memcpy(cols, c, sizeof(c));
    } else {
        const int64_t c[4] = {32, 96, 2080, 4096};
        memcpy(cols, c, sizeof(c));
    }
    const int64_t rows[] = {1, 7, 130, 769};
    const int toks[] = {1, 2, 3, 4, 5, 8};
    ft_rng rng = ft_rng_init(0xC0DA + (uint64_t)t);
    stats st = {0, 0};
    for (size_t ri = 0; ri < FT_ARRAY_LEN(rows); ri++)
        for (size_t ci = 0; ci < 4; ci++)
            for (size_t ti = 0; ti < FT_ARRAY_LEN(toks); ti++)
                run_case(t, rows[ri], cols[ci], toks[ti], &rng, &st);
    fprintf(stderr, "    %-7s %d shapes, worst |err|/S = %.3g (tolerance %.0e)\n", ft_type_name(t),
            st.cases, st.worst, TOL);
}

#define MATVEC_TEST(name, T) \
    TEST(test_cuda_matvec_##name) { test_type(FT_TYPE_##T); }
MATVEC_TEST(q4_0, Q4_0)
MATVEC_TEST(q4_1, Q4_1)
MATVEC_TEST(q5_0, Q5_0)
MATVEC_TEST(q5_1, Q5_1)
MATVEC_TEST(q8_0, Q8_0)
MATVEC_TEST(q2_K, Q2_K)
MATVEC_TEST(q3_K, Q3_K)
MATVEC_TEST(q4_K, Q4_K)
MATVEC_TEST(q5_K, Q5_K)
MATVEC_TEST(q6_K, Q6_K)
MATVEC_TEST(iq4_nl, IQ4_NL)
MATVEC_TEST(iq4_xs, IQ4_XS)
MATVEC_TEST(mxfp4, MXFP4)
MATVEC_TEST(f32, F32)
MATVEC_TEST(f16, F16)
MATVEC_TEST(bf16, BF16)

// A plausible regression must fail this suite: a wrong type tag (q4_0 data read as iq4_nl,
// same block size and layout) gives errors far above TOL.
TEST(test_cuda_matvec_detects_wrong_format) {
    GPU_TEST_REQUIRE_DEVICE();
    const int64_t n_rows = 16, n_cols = 256;
    const size_t rb = ft_row_bytes(FT_TYPE_Q4_0, n_cols);
    ft_rng rng = ft_rng_init(7);
    uint8_t *w = ft_malloc(rb * n_rows);
    for (int64_t r = 0; r < n_rows; r++) ft_quant_random_row(FT_TYPE_Q4_0, &rng, 0.05f, w + r * rb, n_cols);
    float x[256], y[16], wf[256], xr[256];
    for (int i = 0; i < 256; i++) x[i] = ft_rng_normal(&rng);
    void *dw = ft_cuda_malloc(rb * n_rows), *dq = ft_cuda_malloc(ft_cuda_q8_1_bytes(n_cols, 1));
    float *dx = ft_cuda_malloc(sizeof(x)), *dy = ft_cuda_malloc(sizeof(y));
    REQUIRE(dw && dq && dx && dy);
    ft_cuda_memcpy_h2d(dw, w, rb * n_rows, NULL);
    ft_cuda_memcpy_h2d(dx, x, sizeof(x), NULL);
    ft_cuda_quantize_q8_1(dx, dq, n_cols, 1, NULL);
    ft_cuda_matvec_params p = {.type = FT_TYPE_IQ4_NL, .w = dw, .n_rows = n_rows, .n_cols = n_cols,
                               .x = dq, .y = dy, .n_tok = 1};
    ft_cuda_matvec(&p, NULL);
    ft_cuda_memcpy_d2h(y, dy, sizeof(y), NULL);
    uint8_t q[sizeof(block_q8_1) * 8];
    ft_cuda_memcpy_d2h(q, dq, sizeof(q), NULL);
    ft_cuda_device_sync();
    ft_dequantize_row_q8_1(q, xr, n_cols);
    int far = 0;
    for (int r = 0; r < n_rows; r++) {
        ft_dequantize_row_q4_0(w + r * rb, wf, n_cols);
        double ref = 0, s = 0;
        for (int i = 0; i < n_cols; i++) {
            ref += (double)wf[i] * xr[i];
            s += fabs((double)wf[i] * xr[i]);
        }
        far += fabs(y[r] - ref) > TOL * s;
    }
    CHECK(far >= n_rows / 2, "only %d of %d rows differ", far, (int)n_rows);
    free(w);
    ft_cuda_free(dw); ft_cuda_free(dq); ft_cuda_free(dx); ft_cuda_free(dy);
}
