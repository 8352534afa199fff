// test_cuda_gemm.c: the prefill GEMM (src/backend/cuda/gemm_q.cu), its float-weight form
// (gemm_f.cu) and the MoE FFN grouped by expert (moe_gemm.cu) against independent CPU
// computations in double.
//
// Dense GEMM: as test_cuda_matvec.c. Weights are random valid rows (ft_quant_random_row),
// activations normal floats with a few outliers, quantized to q8_1 on the GPU; the reference
// dequantizes those q8_1 blocks (ft_dequantize_row_q8_1) and the weights (the format's
// to_float) and sums the products in double. Outputs are NaN-filled before each launch.
// Shapes: n_out 1, 63, 130 (one row tile partial, two, three with the last one partial);
// n_in one block, a length whose last 128-element chunk is partial (32-element formats) and
// a long one; n_tok 1, 17, 64 (one whole tile), 100 and 129 (a partial last tile); each with
// both tile widths (32 and 64 tokens, ft_cuda_gemm_force_bn).
// Tolerance: |y - ref| <= TOL * S, S = sum |w_i x_i| (plus 2 sum |min_i x_i| for the formats
// with a min term, as in test_cuda_matvec.c). Inside a 32-element (or 16-element) sub-block
// the GPU sums are exact integers; what remains is the float product of each sub-block sum
// with its two scales and a sequential float sum of n_in / 32 of them (at most 72 here), below
// (72 + 3) * 2^-24 = 4.5e-6; TOL leaves a factor of about 2.
//
// MoE: random routing (k distinct experts per token, random positive weights; one case sends
// every token to the same k experts, so one expert has many tiles and most have none), random
// expert weights. The reference: per (token, slot), g = W_gate[e] · x, u = W_up[e] · x,
// h = silu(g) * u, o = W_down[e] · h, all in double from the same dequantized q8_1 x, then
// y[t] = sum_j w[t][j] * o[t][j]. The GPU quantizes h to q8_1 before the down GEMM, which the
// reference does not: each element of h is then off by at most amax(h's block) * (1/254 +
// 2^-11) (half a code step, plus the fp16 rounding of the block scale), so the tolerance per
// output is sum_j w_j * (sum_i |Wd_i| * (q_i + e_i) + TOL * sum_i |Wd_i h_i|), where q_i is
// that quantization bound and e_i bounds h_i's own error from the gate/up GEMMs
// (TOL * (1.1 |u| S_g + |silu(g)| S_u), 1.1 bounding |silu'|), times 1.5 for the roundings of
// the bound itself. A wrong expert, tile, scale or min is orders of magnitude above that.
// The models' extras the same way: g and u plus their expert's biases, act_d's activation and
// its error bound (GELU's f16 roundings added), o times its expert's scale plus its bias.
#include "gpu_test.h"

#include "../src/backend/backend.h"
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
    default: return -1;
    }
}

static void random_rows(enum ft_type t, ft_rng *rng, uint8_t *w, int64_t n_rows, int64_t n_cols) {
    const size_t rb = ft_row_bytes(t, n_cols);
    for (int64_t r = 0; r < n_rows; r++) ft_quant_random_row(t, rng, 0.05f, w + r * rb, n_cols);
}

static float *random_acts(ft_rng *rng, size_t n) {
    float *x = ft_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        x[i] = ft_rng_normal(rng);
        if (ft_rng_uniform(rng) < 0.01f) x[i] *= 20.0f;
    }
    return x;
}

// x (n_tok, n_cols) floats -> q8_1 on the GPU (into *dq, allocated here) and the dequantized
// q8_1 values as the kernels see them (returned).
static float *quantize_on_gpu(const float *x, int64_t n_cols, int n_tok, void **dq) {
    const size_t nx = (size_t)n_cols * n_tok, qb = ft_cuda_q8_1_bytes(n_cols, n_tok);
    float *dx = ft_cuda_malloc(nx * sizeof(float));
    *dq = ft_cuda_malloc(qb);
    FT_ASSERT(dx && *dq);
    ft_cuda_memcpy_h2d(dx, x, nx * sizeof(float), NULL);
    ft_cuda_quantize_q8_1(dx, *dq, n_cols, n_tok, NULL);
    uint8_t *q = ft_malloc(qb);
    ft_cuda_memcpy_d2h(q, *dq, qb, NULL);
    ft_cuda_device_sync();
    float *xr = ft_malloc(nx * sizeof(float));
    ft_dequantize_row_q8_1(q, xr, (int64_t)nx);
    free(q);
    ft_cuda_free(dx);
    return xr;
}

// Dequantized rows (wf) and, for the formats with a min term, the rows with the main scale
// zeroed (wm: the min part alone); wm is NULL for the others.
static void dequant_rows(enum ft_type t, const uint8_t *w, int64_t n_rows, int64_t n_cols, float **wf,
                         float **wm) {
    const ft_quant_ops *ops = ft_quant_ops_find(t);
    const ft_type_traits *tr = ft_type_traits_find(t);
    const size_t rb = ft_row_bytes(t, n_cols);
    const int ms = main_scale_offset(t);
    *wf = ft_malloc((size_t)(n_rows * n_cols) * sizeof(float));
    *wm = ms >= 0 ? ft_malloc((size_t)(n_rows * n_cols) * sizeof(float)) : NULL;
    uint8_t *tmp = ft_malloc(rb);
    for (int64_t r = 0; r < n_rows; r++) {
        ops->to_float(w + r * rb, *wf + r * n_cols, n_cols);
        if (ms >= 0) {
            memcpy(tmp, w + r * rb, rb);
            for (int64_t b = 0; b < n_cols / tr->block_elems; b++) memset(tmp + b * tr->block_bytes + ms, 0, sizeof(ft_half));
            ops->to_float(tmp, *wm + r * n_cols, n_cols);
        }
    }
    free(tmp);
}

// sum_i w_i x_i and the error scale S of one row.
static void ref_dot(const float *w, const float *wm, const float *x, int64_t n, double *dot, double *s) {
    double acc = 0, sa = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += (double)w[i] * x[i];
        sa += fabs((double)w[i] * x[i]);
        if (wm) sa += 2 * fabs((double)wm[i] * x[i]);
    }
    *dot = acc;
    *s = sa;
}

// ---------------------------------------------------------------------------------------------
// Dense GEMM

typedef struct {
    double worst;
    int cases;
} stats;

static void run_dense(enum ft_type t, int64_t n_out, int64_t n_in, int n_tok, ft_rng *rng, stats *st) {
    const size_t rb = ft_row_bytes(t, n_in), wb = rb * (size_t)n_out, ny = (size_t)n_out * n_tok;
    uint8_t *w = ft_malloc(wb);
    random_rows(t, rng, w, n_out, n_in);
    float *x = random_acts(rng, (size_t)n_in * n_tok);
    void *dq;
    float *xr = quantize_on_gpu(x, n_in, n_tok, &dq);
    void *dw = ft_cuda_malloc(wb);
    float *dy = ft_cuda_malloc(ny * sizeof(float));
    FT_ASSERT(dw && dy);
    ft_cuda_memcpy_h2d(dw, w, wb, NULL);
    float *wf, *wm;
    dequant_rows(t, w, n_out, n_in, &wf, &wm);
    double *ref = ft_malloc(ny * sizeof(double)), *sabs = ft_malloc(ny * sizeof(double));
    for (int tk = 0; tk < n_tok; tk++)
        for (int64_t r = 0; r < n_out; r++)
            ref_dot(wf + r * n_in, wm ? wm + r * n_in : NULL, xr + (size_t)tk * n_in, n_in,
                    &ref[(size_t)tk * n_out + r], &sabs[(size_t)tk * n_out + r]);

    // both tile widths, whatever the automatic choice for this shape on this GPU; then split
    // over the input (these shapes leave SMs idle), with the scratch a backend gives
    const int bns[] = {32, 64, 0};
    const size_t part_floats = (size_t)1 << 22;
    float *part = ft_cuda_malloc(part_floats * sizeof(float));
    float *y = ft_malloc(ny * sizeof(float));
    for (size_t b = 0; b < FT_ARRAY_LEN(bns); b++) {
        ft_cuda_memset(dy, 0xFF, ny * sizeof(float), NULL); // all-ones bytes: NaN
        ft_cuda_gemm_force_bn(bns[b]);
        ft_cuda_gemm_params p = {.type = t, .w = dw, .n_out = n_out, .n_in = n_in, .x = dq, .y = dy, .n_tok = n_tok,
                                 .part = bns[b] ? NULL : part, .part_floats = part_floats};
        ft_cuda_gemm(&p, NULL);
        ft_cuda_gemm_force_bn(0);
        ft_cuda_memcpy_d2h(y, dy, ny * sizeof(float), NULL);
        ft_cuda_device_sync();
        int bad = 0;
        for (size_t i = 0; i < ny; i++) {
            const double err = fabs((double)y[i] - ref[i]), rel = sabs[i] > 0 ? err / sabs[i] : err;
            if (!(rel <= TOL) && bad++ < 3) // NaN fails too
                CHECK(rel <= TOL, "%s n_out %lld n_in %lld n_tok %d bn %d: token %zu row %zu: got %g ref %g (err/S %.3g)",
                      ft_type_name(t), (long long)n_out, (long long)n_in, n_tok, bns[b], i / (size_t)n_out,
                      i % (size_t)n_out, y[i], ref[i], rel);
            if (rel > st->worst || rel != rel) st->worst = rel;
        }
    }
    st->cases++;
    free(w); free(x); free(xr); free(y); free(wf); free(wm); free(ref); free(sabs);
    ft_cuda_free(dw); ft_cuda_free(dy); ft_cuda_free(dq); ft_cuda_free(part);
}

static void test_dense(enum ft_type t) {
    GPU_TEST_REQUIRE_DEVICE();
    REQUIRE(ft_cuda_gemm_supported(t));
    const int blk = ft_type_traits_find(t)->block_elems;
    // 32-element formats: one block; 5 blocks (160: a chunk and a partial one); 72 blocks
    // (2304: 18 whole chunks). Super-block formats: one, 3 and 9 super-blocks.
    const int64_t cols[3] = {blk, blk == QK_K ? 768 : 160, 2304};
    const int64_t rows[] = {1, 63, 130};
    const int toks[] = {1, 17, 64, 100, 129};
    ft_rng rng = ft_rng_init(0x6E33 + (uint64_t)t);
    stats st = {0, 0};
    for (size_t ri = 0; ri < FT_ARRAY_LEN(rows); ri++)
        for (size_t ci = 0; ci < FT_ARRAY_LEN(cols); ci++)
            for (size_t ti = 0; ti < FT_ARRAY_LEN(toks); ti++) run_dense(t, rows[ri], cols[ci], toks[ti], &rng, &st);
    fprintf(stderr, "    %-7s %d shapes, worst |err|/S = %.3g (tolerance %.0e)\n", ft_type_name(t), st.cases,
            st.worst, TOL);
}

#define GEMM_TEST(name, T) \
    TEST(test_cuda_gemm_##name) { test_dense(FT_TYPE_##T); }
GEMM_TEST(q4_0, Q4_0)
GEMM_TEST(q4_1, Q4_1)
GEMM_TEST(q5_0, Q5_0)
GEMM_TEST(q5_1, Q5_1)
GEMM_TEST(q8_0, Q8_0)
GEMM_TEST(q3_K, Q3_K)
GEMM_TEST(q4_K, Q4_K)
GEMM_TEST(q5_K, Q5_K)
GEMM_TEST(q6_K, Q6_K)
GEMM_TEST(iq4_nl, IQ4_NL)
GEMM_TEST(iq4_xs, IQ4_XS)
GEMM_TEST(mxfp4, MXFP4)

TEST(test_cuda_gemm_supported_types) {
    CHECK(!ft_cuda_gemm_supported(FT_TYPE_F32) && !ft_cuda_gemm_supported(FT_TYPE_Q2_K));
    if (ft_cuda_device_count() > 0) CHECK(ft_cuda_gemm_supported(FT_TYPE_Q4_K) && ft_cuda_gemm_supported(FT_TYPE_Q8_0));
}

// ---------------------------------------------------------------------------------------------
// Float-weight GEMM (gemm_f.cu): random f32 / f16 / bf16 weights and float activations; the
// reference sums the same (exactly converted) values in double. Each output is one float FMA
// chain of n_in terms, so |y - ref| <= n_in * 2^-24 * S (S = sum |w_i x_i|, the standard bound
// for a recursive sum of products, first order), tested with a factor 1.1. Shapes: n_out 1,
// 63, 130 (tiles of 32: partial, two, five with a partial one), n_in 1, 33 (a partial
// 32-column chunk), 2048; n_tok 9 (just past the matvec's 8), 32 and 100.

static void run_gemm_f(enum ft_type t, int64_t n_out, int64_t n_in, int n_tok, ft_rng *rng, double *worst) {
    const size_t es = t == FT_TYPE_F32 ? 4 : 2, nw = (size_t)(n_out * n_in), nx = (size_t)n_in * n_tok,
                 ny = (size_t)n_out * n_tok;
    uint8_t *w = ft_malloc(nw * es);
    float *wf = ft_malloc(nw * sizeof(float));
    for (size_t i = 0; i < nw; i++) {
        const float v = 0.05f * ft_rng_normal(rng);
        if (t == FT_TYPE_F32) ((float *)w)[i] = wf[i] = v;
        else if (t == FT_TYPE_F16) wf[i] = ft_fp16_to_fp32(((ft_half *)w)[i] = ft_fp32_to_fp16(v));
        else wf[i] = ft_bf16_to_fp32(((ft_bf16 *)w)[i] = ft_fp32_to_bf16(v));
    }
    float *x = random_acts(rng, nx);
    void *dw = ft_cuda_malloc(nw * es);
    float *dx = ft_cuda_malloc(nx * sizeof(float)), *dy = ft_cuda_malloc(ny * sizeof(float));
    FT_ASSERT(dw && dx && dy);
    ft_cuda_memcpy_h2d(dw, w, nw * es, NULL);
    ft_cuda_memcpy_h2d(dx, x, nx * sizeof(float), NULL);
    const size_t part_floats = (size_t)1 << 22;
    float *part = ft_cuda_malloc(part_floats * sizeof(float));
    float *y = ft_malloc(ny * sizeof(float));
    for (int split = 0; split < 2; split++) { // one launch; split over the columns (partials summed)
        ft_cuda_memset(dy, 0xFF, ny * sizeof(float), NULL); // NaN
        ft_cuda_matvec_params p = {.type = t, .w = dw, .n_rows = n_out, .n_cols = n_in, .x = dx, .y = dy, .n_tok = n_tok,
                                   .part = split ? part : NULL, .part_floats = part_floats};
        ft_cuda_gemm_f(&p, NULL);
        ft_cuda_memcpy_d2h(y, dy, ny * sizeof(float), NULL);
        ft_cuda_device_sync();
        int bad = 0;
        for (int tk = 0; tk < n_tok; tk++)
            for (int64_t r = 0; r < n_out; r++) {
                double ref, sabs;
                ref_dot(wf + r * n_in, NULL, x + (size_t)tk * n_in, n_in, &ref, &sabs);
                const double got = y[(size_t)tk * n_out + r], err = fabs(got - ref);
                const double bound = 1.1 * (double)n_in * 0x1p-24 * sabs + 1e-30;
                if (!(err <= bound) && bad++ < 3) // NaN fails too
                    CHECK(err <= bound, "%s n_out %lld n_in %lld n_tok %d: token %d row %lld: got %g ref %g (err %.3g, bound %.3g)",
                          ft_type_name(t), (long long)n_out, (long long)n_in, n_tok, tk, (long long)r, got, ref, err, bound);
                const double rel = sabs > 0 ? err / sabs : err;
                if (rel > *worst || rel != rel) *worst = rel;
            }
    }
    free(w); free(wf); free(x); free(y);
    ft_cuda_free(dw); ft_cuda_free(dx); ft_cuda_free(dy); ft_cuda_free(part);
}

static void test_gemm_f(enum ft_type t) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_rng rng = ft_rng_init(0x9e3f + (uint64_t)t);
    const int64_t outs[] = {1, 63, 130}, ins[] = {1, 33, 2048};
    const int toks[] = {9, 32, 100};
    double worst = 0;
    for (size_t o = 0; o < FT_ARRAY_LEN(outs); o++)
        for (size_t i = 0; i < FT_ARRAY_LEN(ins); i++)
            for (size_t k = 0; k < FT_ARRAY_LEN(toks); k++) run_gemm_f(t, outs[o], ins[i], toks[k], &rng, &worst);
    fprintf(stderr, "    %-7s worst |err|/S = %.3g\n", ft_type_name(t), worst);
}

TEST(test_cuda_gemm_f_f32) { test_gemm_f(FT_TYPE_F32); }
TEST(test_cuda_gemm_f_f16) { test_gemm_f(FT_TYPE_F16); }
TEST(test_cuda_gemm_f_bf16) { test_gemm_f(FT_TYPE_BF16); }

// ---------------------------------------------------------------------------------------------
// MoE FFN grouped by expert

typedef struct moe_case {
    enum ft_type gate_type, down_type;
    int64_t n_embd, n_ff;
    int n_expert, k, n_tok;
    bool skewed;   // every token on experts 0..k-1
    int act;       // FT_CUDA_GLU_*
    bool biases;   // gate, up and down biases per expert (gpt-oss)
    bool scales;   // a down scale per expert (gemma4)
} moe_case;

static double silu_d(double v) { return v / (1 + exp(-v)); }

// act(g, u) in double, and the bound of its error for errors eg, eu of g and u (GELU: also
// the f16 roundings of the gate and of GELU, 2^-11 relative each, which a float gate may flip
// to the neighbouring f16)
static double act_d(int act, double g, double u, double eg, double eu, double *err) {
    if (act == FT_CUDA_GLU_SWIGLU_OAI) {
        const double lim = FT_SWIGLU_OAI_LIMIT, a = FT_SWIGLU_OAI_ALPHA;
        double gc = fmin(g, lim), uc = fmin(fmax(u, -lim), lim), sg = 1 / (1 + exp(-a * gc));
        *err = (1 + a * fabs(gc) / 4) * fabs(uc + 1) * eg + fabs(gc * sg) * eu;
        return gc * sg * (uc + 1);
    }
    if (act == FT_CUDA_GLU_GELU) {
        double ge = 0.5 * g * (1 + tanh(0.7978845608028654 * g * (1 + 0.044715 * g * g)));
        *err = 1.13 * fabs(u) * eg + fabs(ge) * eu + (1.13 * fabs(g) * fabs(u) + fabs(ge * u)) / 1024;
        return ge * u;
    }
    *err = 1.1 * fabs(u) * eg + fabs(silu_d(g)) * eu;
    return silu_d(g) * u;
}

static void run_moe(const moe_case *c, ft_rng *rng, double *worst) {
    const int64_t E = c->n_expert, D = c->n_embd, F = c->n_ff;
    const int k = c->k, n_tok = c->n_tok, n_pairs = n_tok * k;
    const size_t gate_mat = ft_row_bytes(c->gate_type, D) * (size_t)F;
    const size_t down_mat = ft_row_bytes(c->down_type, F) * (size_t)D;

    // weights
    uint8_t *wg = ft_malloc(gate_mat * E), *wu = ft_malloc(gate_mat * E), *wd = ft_malloc(down_mat * E);
    random_rows(c->gate_type, rng, wg, E * F, D);
    random_rows(c->gate_type, rng, wu, E * F, D);
    random_rows(c->down_type, rng, wd, E * D, F);

    // routing: k distinct experts per token, weights in (0.1, 1)
    int32_t *sel = ft_malloc((size_t)n_pairs * sizeof(int32_t));
    float *sw = ft_malloc((size_t)n_pairs * sizeof(float));
    for (int t = 0; t < n_tok; t++)
        for (int j = 0; j < k; j++) {
            int e;
            bool dup;
            do {
                e = c->skewed ? j : (int)(ft_rng_next(rng) % (uint64_t)E);
                dup = false;
                for (int i = 0; i < j; i++) dup |= sel[t * k + i] == e;
            } while (dup);
            sel[t * k + j] = e;
            sw[t * k + j] = 0.1f + 0.9f * ft_rng_uniform(rng);
        }

    // extras: per-expert biases of about 0.5 and scales in (0.5, 1.5)
    float *gb = ft_malloc((size_t)(E * F) * sizeof(float)), *ub = ft_malloc((size_t)(E * F) * sizeof(float));
    float *db = ft_malloc((size_t)(E * D) * sizeof(float)), *dsc = ft_malloc((size_t)E * sizeof(float));
    for (int64_t i = 0; i < E * F; i++) gb[i] = 0.5f * ft_rng_normal(rng), ub[i] = 0.5f * ft_rng_normal(rng);
    for (int64_t i = 0; i < E * D; i++) db[i] = 0.5f * ft_rng_normal(rng);
    for (int64_t i = 0; i < E; i++) dsc[i] = 0.5f + ft_rng_uniform(rng);

    float *x = random_acts(rng, (size_t)(n_tok * D));
    void *dxq;
    float *xr = quantize_on_gpu(x, D, n_tok, &dxq);

    // device buffers; scratch NaN-filled
    void *dg = ft_cuda_malloc(gate_mat * E), *du = ft_cuda_malloc(gate_mat * E), *dd = ft_cuda_malloc(down_mat * E);
    int32_t *dsel = ft_cuda_malloc((size_t)n_pairs * sizeof(int32_t));
    float *dsw = ft_cuda_malloc((size_t)n_pairs * sizeof(float));
    const size_t work_b = ft_cuda_moe_gemm_work_bytes(n_pairs, (int)E);
    void *dwork = ft_cuda_malloc(work_b);
    float *dh = ft_cuda_malloc((size_t)(n_pairs * F) * sizeof(float));
    void *dhq = ft_cuda_malloc(ft_cuda_q8_1_bytes(F, n_pairs));
    float *dout = ft_cuda_malloc((size_t)(n_pairs * D) * sizeof(float));
    float *dy = ft_cuda_malloc((size_t)(n_tok * D) * sizeof(float));
    float *dgb = ft_cuda_malloc((size_t)(E * F) * sizeof(float)), *dub = ft_cuda_malloc((size_t)(E * F) * sizeof(float));
    float *ddb = ft_cuda_malloc((size_t)(E * D) * sizeof(float)), *ddsc = ft_cuda_malloc((size_t)E * sizeof(float));
    FT_ASSERT(dg && du && dd && dsel && dsw && dwork && dh && dhq && dout && dy && dgb && dub && ddb && ddsc);
    ft_cuda_memcpy_h2d(dgb, gb, (size_t)(E * F) * sizeof(float), NULL);
    ft_cuda_memcpy_h2d(dub, ub, (size_t)(E * F) * sizeof(float), NULL);
    ft_cuda_memcpy_h2d(ddb, db, (size_t)(E * D) * sizeof(float), NULL);
    ft_cuda_memcpy_h2d(ddsc, dsc, (size_t)E * sizeof(float), NULL);
    ft_cuda_memcpy_h2d(dg, wg, gate_mat * E, NULL);
    ft_cuda_memcpy_h2d(du, wu, gate_mat * E, NULL);
    ft_cuda_memcpy_h2d(dd, wd, down_mat * E, NULL);
    ft_cuda_memcpy_h2d(dsel, sel, (size_t)n_pairs * sizeof(int32_t), NULL);
    ft_cuda_memcpy_h2d(dsw, sw, (size_t)n_pairs * sizeof(float), NULL);
    ft_cuda_memset(dwork, 0xFF, work_b, NULL);
    ft_cuda_memset(dh, 0xFF, (size_t)(n_pairs * F) * sizeof(float), NULL);
    ft_cuda_memset(dout, 0xFF, (size_t)(n_pairs * D) * sizeof(float), NULL);
    ft_cuda_memset(dy, 0xFF, (size_t)(n_tok * D) * sizeof(float), NULL);

    ft_cuda_moe_gemm_params p = {
        .gate_type = c->gate_type, .down_type = c->down_type, .gate = dg, .up = du, .down = dd,
        .gate_mat_bytes = gate_mat, .down_mat_bytes = down_mat, .n_embd = D, .n_ff = F,
        .n_expert = (int)E, .n_tok = n_tok, .k = k, .sel = dsel, .sel_w = dsw, .xq = dxq,
        .work = dwork, .h = dh, .hq = dhq, .out = dout, .y = dy,
        .ex = {.glu = {c->act, FT_SWIGLU_OAI_ALPHA, FT_SWIGLU_OAI_LIMIT}},
    };
    if (c->biases) p.ex.gate_bias = dgb, p.ex.up_bias = dub, p.ex.down_bias = ddb;
    if (c->scales) p.ex.down_scale = ddsc;
    ft_cuda_moe_gemm(&p, NULL);
    float *y = ft_malloc((size_t)(n_tok * D) * sizeof(float));
    ft_cuda_memcpy_d2h(y, dy, (size_t)(n_tok * D) * sizeof(float), NULL);
    ft_cuda_device_sync();

    // reference, expert by expert (dequantized once each)
    double *ref = ft_calloc((size_t)(n_tok * D), sizeof(double)), *bound = ft_calloc((size_t)(n_tok * D), sizeof(double));
    double *h = ft_malloc((size_t)F * sizeof(double)), *herr = ft_malloc((size_t)F * sizeof(double));
    float *hf = ft_malloc((size_t)F * sizeof(float));
    FT_ASSERT(ref && bound);
    for (int64_t e = 0; e < E; e++) {
        bool used = false;
        for (int i = 0; i < n_pairs; i++) used |= sel[i] == e;
        if (!used) continue;
        float *gf, *gm, *uf, *um, *df, *dm;
        dequant_rows(c->gate_type, wg + gate_mat * e, F, D, &gf, &gm);
        dequant_rows(c->gate_type, wu + gate_mat * e, F, D, &uf, &um);
        dequant_rows(c->down_type, wd + down_mat * e, D, F, &df, &dm);
        for (int pi = 0; pi < n_pairs; pi++) {
            if (sel[pi] != e) continue;
            const int t = pi / k;
            const float *xt = xr + (size_t)t * D;
            for (int64_t i = 0; i < F; i++) {
                double g, sg, u, su;
                ref_dot(gf + i * D, gm ? gm + i * D : NULL, xt, D, &g, &sg);
                ref_dot(uf + i * D, um ? um + i * D : NULL, xt, D, &u, &su);
                if (c->biases) g += gb[e * F + i], u += ub[e * F + i];
                double ea;
                h[i] = act_d(c->act, g, u, TOL * sg, TOL * su, &ea);
                herr[i] = ea;
                hf[i] = (float)h[i];
            }
            // q8_1 rounding bound per element of h: amax of its block * (1/254 + 2^-11)
            for (int64_t b = 0; b < F / 32; b++) {
                double amax = 0;
                for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(h[32 * b + i]) + herr[32 * b + i]);
                for (int i = 0; i < 32; i++) herr[32 * b + i] += amax * (1.0 / 254 + 1.0 / 2048);
            }
            for (int64_t o = 0; o < D; o++) {
                double v, s;
                ref_dot(df + o * F, dm ? dm + o * F : NULL, hf, F, &v, &s);
                double eb = TOL * s;
                for (int64_t i = 0; i < F; i++) eb += fabs((double)df[o * F + i]) * herr[i];
                if (c->scales) v *= dsc[e], eb *= dsc[e];
                if (c->biases) v += db[e * D + o];
                ref[(size_t)t * D + o] += (double)sw[pi] * v;
                bound[(size_t)t * D + o] += (double)sw[pi] * eb;
            }
        }
        free(gf); free(gm); free(uf); free(um); free(df); free(dm);
    }
    int bad = 0;
    for (size_t i = 0; i < (size_t)(n_tok * D); i++) {
        const double err = fabs((double)y[i] - ref[i]), lim = 1.5 * bound[i];
        if (!(err <= lim) && bad++ < 3)
            CHECK(err <= lim, "moe %s/%s E %lld k %d n_tok %d%s: token %zu col %zu: got %g ref %g (err %.3g, bound %.3g)",
                  ft_type_name(c->gate_type), ft_type_name(c->down_type), (long long)E, k, n_tok,
                  c->skewed ? " skewed" : "", i / (size_t)D, i % (size_t)D, y[i], ref[i], err, lim);
        const double r = lim > 0 ? err / lim : err;
        if (r > *worst || r != r) *worst = r;
    }
    free(wg); free(wu); free(wd); free(sel); free(sw); free(x); free(xr); free(y);
    free(gb); free(ub); free(db); free(dsc);
    ft_cuda_free(dgb); ft_cuda_free(dub); ft_cuda_free(ddb); ft_cuda_free(ddsc);
    free(ref); free(bound); free(h); free(herr); free(hf);
    ft_cuda_free(dg); ft_cuda_free(du); ft_cuda_free(dd); ft_cuda_free(dsel); ft_cuda_free(dsw);
    ft_cuda_free(dwork); ft_cuda_free(dh); ft_cuda_free(dhq); ft_cuda_free(dout); ft_cuda_free(dy);
    ft_cuda_free(dxq);
}

static void test_moe_extras(enum ft_type gate_type, enum ft_type down_type, int64_t n_embd, int64_t n_ff, int act,
                            bool biases, bool scales) {
    GPU_TEST_REQUIRE_DEVICE();
    REQUIRE(ft_cuda_moe_gemm_supported(gate_type, gate_type, down_type));
    ft_rng rng = ft_rng_init(0x30E + (uint64_t)gate_type * 64 + (uint64_t)down_type);
    // (experts, k, tokens, skewed): a single pair; a few tokens over many experts (most
    // empty); tiles of several tokens per expert; more than 32 pairs on some experts (several
    // tiles each); all tokens on the same k experts
    const struct { int n_expert, k, n_tok; bool skewed; } shapes[] = {
        {8, 1, 1, false}, {128, 8, 3, false}, {16, 4, 70, false}, {8, 2, 300, false}, {32, 4, 77, true},
    };
    double worst = 0;
    for (size_t i = 0; i < FT_ARRAY_LEN(shapes); i++) {
        const moe_case c = {gate_type, down_type, n_embd, n_ff, shapes[i].n_expert, shapes[i].k, shapes[i].n_tok,
                            shapes[i].skewed, act, biases, scales};
        run_moe(&c, &rng, &worst);
    }
    fprintf(stderr, "    %s/%s act %d%s%s: %zu cases, worst |err|/bound = %.3g\n", ft_type_name(gate_type),
            ft_type_name(down_type), act, biases ? " biases" : "", scales ? " scales" : "", FT_ARRAY_LEN(shapes), worst);
}

static void test_moe(enum ft_type gate_type, enum ft_type down_type, int64_t n_embd, int64_t n_ff) {
    test_moe_extras(gate_type, down_type, n_embd, n_ff, FT_CUDA_GLU_SILU, false, false);
}

// the bench model's types; a 16-element-scale format in the fused gate/up; 32-element
// formats with n_ff = 96 (a partial row tile in gate/up, a partial chunk in down) and a min
TEST(test_cuda_moe_gemm_q4_K) { test_moe(FT_TYPE_Q4_K, FT_TYPE_Q4_K, 512, 256); }
TEST(test_cuda_moe_gemm_q6_K_q5_K) { test_moe(FT_TYPE_Q6_K, FT_TYPE_Q5_K, 256, 512); }
TEST(test_cuda_moe_gemm_q8_0_q4_1) { test_moe(FT_TYPE_Q8_0, FT_TYPE_Q4_1, 160, 96); }
// the models' extras in the GEMMs' epilogues: gpt-oss (mxfp4, biases, the clamped SwiGLU),
// gemma4 (GELU, down scales), and both extras with SiLU
TEST(test_cuda_moe_gemm_extras) {
    test_moe_extras(FT_TYPE_MXFP4, FT_TYPE_MXFP4, 256, 256, FT_CUDA_GLU_SWIGLU_OAI, true, false);
    test_moe_extras(FT_TYPE_Q4_K, FT_TYPE_Q6_K, 256, 512, FT_CUDA_GLU_GELU, false, true);
    test_moe_extras(FT_TYPE_Q8_0, FT_TYPE_Q4_1, 160, 96, FT_CUDA_GLU_SILU, true, true);
}
