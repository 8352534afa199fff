// test_cuda_matvec_fused.c: the fused expert kernels of ft_cuda_matvec_ids (matvec_q.cu) for
// every quantized format: GLU (gate and up banks, silu(gate) * up) and SUM (the weighted sum
// of each token's k experts), against the plain expert matvec (itself checked against a
// double-precision reference in test_cuda_matvec.c) combined on the host; GLU with y_q (its
// q8_1 output too) bit for bit against GLU then ft_cuda_quantize_q8_1.
//
// The fused kernels deal each row's parts to the lanes as the plain one does, so their dot
// products have the same bits; what may differ is the device expf against the host's in the
// SiLU (a few ulp) and nothing in the sum (same order, same products). Tolerance: 1e-5 of the
// largest |value| of the case for GLU, 1e-6 of sum |w h| per element for SUM. Outputs start as
// NaN. Shapes: 130 rows (not a multiple of the 4 rows of a CTA), 3 tokens, k = 3, 5 experts.
// The models' extras (biases, scales, the clamped SwiGLU and GELU) the same way: extras_case.
#include "gpu_data.h"
#include "gpu_test.h"

#include "../src/backend/backend.h"
#include "../src/quant/fp16.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N_MAT = 5, N_ROWS = 130, N_TOK = 3, K = 3, N_PAIRS = N_TOK * K };

// A random bank of N_MAT (N_ROWS, n_cols) matrices on the device; returns its matrix bytes.
static void *random_bank(enum ft_type t, int64_t n_cols, ft_rng *rng, size_t *mat_bytes) {
    *mat_bytes = ft_row_bytes(t, n_cols) * N_ROWS;
    return gpu_random_rows(t, (int64_t)N_ROWS * N_MAT, n_cols, rng);
}

// Runs p (y NaN-filled first) and returns y (n floats) on the host.
static float *run_ids(const ft_cuda_matvec_ids_params *p, size_t n) {
    ft_cuda_memset(p->y, 0xFF, n * sizeof(float), NULL);
    ft_cuda_matvec_ids(p, NULL);
    float *y = ft_malloc(n * sizeof(float));
    ft_cuda_memcpy_d2h(y, p->y, n * sizeof(float), NULL);
    ft_cuda_device_sync();
    return y;
}

// The SUM kernel's output s (N_TOK, N_ROWS) against the plain products h (N_PAIRS, N_ROWS)
// weighted on the host in slot order, each product first times sc[gids[pair]] and plus
// db[gids[pair]] where given (the extras); returns the worst error relative to sum |w h|.
static double check_sum(enum ft_type t, const float *h, const float *s, const float *w, const int32_t *gids,
                        const float *sc, const float *db, int *bad) {
    double worst = 0;
    for (int tk = 0; tk < N_TOK; tk++)
        for (int r = 0; r < N_ROWS; r++) {
            float ref = 0;
            double mag = 0;
            for (int j = 0; j < K; j++) {
                int pr = tk * K + j;
                float hv = h[(size_t)pr * N_ROWS + r];
                if (sc) hv *= sc[gids[pr]];
                if (db) hv += db[gids[pr] * N_ROWS + r];
                float v = hv * w[pr];
                ref = j ? ref + v : v;
                mag += fabs(v);
            }
            double err = fabs(s[tk * N_ROWS + r] - ref) / (mag > 0 ? mag : 1);
            if (!(err <= 1e-6) && (*bad)++ < 6)
                CHECK(err <= 1e-6, "%s sum token %d row %d: %g vs %g", ft_type_name(t), tk, r, s[tk * N_ROWS + r], ref);
            if (!(err <= worst)) worst = err;
        }
    return worst;
}

// The plain gate and up products of p's pairs (p.w: the gate bank) into *g and *u, and the GLU
// with ex's extras into *f (ny floats each); p is left on the GLU.
static void run_glu(ft_cuda_matvec_ids_params *p, void *up, const ft_cuda_expert_extras *ex, size_t ny, float **g,
                    float **u, float **f) {
    const void *gate = p->w;
    *g = run_ids(p, ny);
    p->w = up;
    *u = run_ids(p, ny);
    p->w = gate;
    p->w_up = up;
    p->ex = *ex;
    *f = run_ids(p, ny);
}

static void fused_case(enum ft_type t) {
    int64_t n_cols = ft_type_traits_find(t)->block_elems == 256 ? 768 : 2080;
    ft_rng rng = ft_rng_init(0xF05E + (uint64_t)t);
    size_t mat_bytes;
    void *gate = random_bank(t, n_cols, &rng, &mat_bytes), *up = random_bank(t, n_cols, &rng, &mat_bytes);
    void *xq = gpu_random_q8_1(n_cols, N_TOK, &rng), *hq = gpu_random_q8_1(n_cols, N_PAIRS, &rng);
    int32_t ids[N_PAIRS];
    float w[N_PAIRS];
    for (int i = 0; i < N_PAIRS; i++) {
        ids[i] = (int32_t)(ft_rng_next(&rng) % N_MAT);
        w[i] = ft_rng_uniform(&rng);
    }
    int32_t *d_ids = ft_cuda_malloc(sizeof(ids));
    float *d_w = ft_cuda_malloc(sizeof(w)), *d_y = ft_cuda_malloc((size_t)N_PAIRS * N_ROWS * sizeof(float));
    FT_ASSERT(d_ids && d_w && d_y);
    ft_cuda_memcpy_h2d(d_ids, ids, sizeof(ids), NULL);
    ft_cuda_memcpy_h2d(d_w, w, sizeof(w), NULL);
    ft_cuda_device_sync();
    const size_t ny = (size_t)N_PAIRS * N_ROWS;

    // GLU against plain gate and up
    ft_cuda_matvec_ids_params p = {.type = t, .w = gate, .mat_bytes = mat_bytes, .n_rows = N_ROWS, .n_cols = n_cols,
                                   .x = xq, .ids = d_ids, .x_div = K, .y = d_y, .n_pairs = N_PAIRS};
    float *g, *u, *f;
    run_glu(&p, up, &(ft_cuda_expert_extras){0}, ny, &g, &u, &f);
    double big = 0, worst = 0;
    for (size_t i = 0; i < ny; i++) big = fmax(big, fabs(g[i] / (1.0f + expf(-g[i])) * u[i]));
    int bad = 0;
    for (size_t i = 0; i < ny; i++) {
        double ref = g[i] / (1.0f + expf(-g[i])) * u[i], err = fabs(f[i] - ref) / big;
        if (!(err <= 1e-5) && bad++ < 3) CHECK(err <= 1e-5, "%s glu pair %zu row %zu: %g vs %g", ft_type_name(t), i / N_ROWS, i % N_ROWS, f[i], ref);
        if (!(err <= worst)) worst = err;
    }

    // GLU with y_q (rows a multiple of 32: the first 128 rows of each matrix): y has the bits
    // of the GLU above, y_q those of ft_cuda_quantize_q8_1 of that y
    {
        enum { RQ = 128 };
        const size_t nq = (size_t)N_PAIRS * RQ, qb = ft_cuda_q8_1_bytes(RQ, N_PAIRS);
        uint8_t *d_yq = ft_cuda_malloc(qb), *d_ref = ft_cuda_malloc(qb);
        FT_ASSERT(d_yq && d_ref);
        p.n_rows = RQ;
        p.y_q = NULL;
        float *plain = run_ids(&p, nq);
        ft_cuda_memset(d_yq, 0xFF, qb, NULL);
        p.y_q = d_yq;
        float *fq = run_ids(&p, nq);
        ft_cuda_quantize_q8_1(d_y, d_ref, RQ, N_PAIRS, NULL);
        uint8_t *q = ft_malloc(qb), *qref = ft_malloc(qb);
        ft_cuda_memcpy_d2h(q, d_yq, qb, NULL);
        ft_cuda_memcpy_d2h(qref, d_ref, qb, NULL);
        ft_cuda_device_sync();
        CHECK(memcmp(plain, fq, nq * sizeof(float)) == 0, "%s glu with y_q: y differs from the plain GLU's", ft_type_name(t));
        CHECK(memcmp(q, qref, qb) == 0, "%s glu y_q differs from ft_cuda_quantize_q8_1 of y", ft_type_name(t));
        p.n_rows = N_ROWS;
        p.y_q = NULL;
        free(plain); free(fq); free(q); free(qref);
        ft_cuda_free(d_yq); ft_cuda_free(d_ref);
    }

    // SUM against the plain down matvec and the combine on the host
    p = (ft_cuda_matvec_ids_params){.type = t, .w = gate, .mat_bytes = mat_bytes, .n_rows = N_ROWS, .n_cols = n_cols,
                                    .x = hq, .ids = d_ids, .x_div = 1, .y = d_y, .n_pairs = N_PAIRS};
    float *h = run_ids(&p, ny);
    p.sum_w = d_w;
    p.k = K;
    float *s = run_ids(&p, (size_t)N_TOK * N_ROWS);
    double worst_sum = check_sum(t, h, s, w, NULL, NULL, NULL, &bad);
    fprintf(stderr, "    %-7s glu worst %.2g, sum worst %.2g\n", ft_type_name(t), worst, worst_sum);
    free(g); free(u); free(f); free(h); free(s);
    ft_cuda_free(gate); ft_cuda_free(up); ft_cuda_free(xq); ft_cuda_free(hq);
    ft_cuda_free(d_ids); ft_cuda_free(d_w); ft_cuda_free(d_y);
}

// The host's act(g, u): cpu_impl.h's steps (the clamped SwiGLU; GELU on the f16-rounded gate,
// its value rounded to f16).
static float host_glu(int act, float g, float u) {
    if (act == FT_CUDA_GLU_SWIGLU_OAI) {
        const float lim = FT_SWIGLU_OAI_LIMIT;
        float gc = lim < g ? lim : g, uc = u < -lim ? -lim : (lim < u ? lim : u);
        return gc / (1.0f + expf(FT_SWIGLU_OAI_ALPHA * -gc)) * (uc + 1.0f);
    }
    if (act == FT_CUDA_GLU_GELU) {
        if (g <= -10.0f) return 0.0f;
        if (g >= 10.0f) return g * u;
        float x = ft_fp16_to_fp32(ft_fp32_to_fp16(g));
        float gelu = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
        return ft_fp16_to_fp32(ft_fp32_to_fp16(gelu)) * u;
    }
    return g / (1.0f + expf(-g)) * u;
}

// A device copy of n floats.
static float *to_device(const float *h, size_t n) { return gpu_copy_to_device(h, n * sizeof(float)); }

// The fused kernels with a model's extras (gpt-oss: gate, up and down biases, the clamped
// SwiGLU; gemma4: GELU, per-expert down scales), indexed by bias_ids (global experts of
// N_GLOBAL, not the weights' ids: cache slots), against the plain kernels' products with the
// extras applied on the host in the CPU op's steps. The dot products have the same bits, so
// the GLU differs by the device's expf/tanhf (and GELU by an f16 rounding they may flip) and
// the SUM not at all beyond float order, which is the same.
static void extras_case(enum ft_type t, int act, bool biases, bool scales) {
    enum { N_GLOBAL = 7 };
    int64_t n_cols = ft_type_traits_find(t)->block_elems == 256 ? 256 : 160;
    ft_rng rng = ft_rng_init(0xE7A5 + (uint64_t)t * 8 + (uint64_t)act);
    size_t mat_bytes;
    void *gate = random_bank(t, n_cols, &rng, &mat_bytes), *up = random_bank(t, n_cols, &rng, &mat_bytes);
    size_t down_mat;
    void *xq = gpu_random_q8_1(n_cols, N_TOK, &rng);
    int32_t ids[N_PAIRS], gids[N_PAIRS];
    float w[N_PAIRS], gb[N_GLOBAL * N_ROWS], ub[N_GLOBAL * N_ROWS], db[N_GLOBAL * N_ROWS], sc[N_GLOBAL];
    for (int i = 0; i < N_PAIRS; i++) {
        ids[i] = (int32_t)(ft_rng_next(&rng) % N_MAT);
        gids[i] = (int32_t)(ft_rng_next(&rng) % N_GLOBAL);
        w[i] = ft_rng_uniform(&rng);
    }
    for (int i = 0; i < N_GLOBAL * N_ROWS; i++) {
        gb[i] = 0.5f * ft_rng_normal(&rng);
        ub[i] = 0.5f * ft_rng_normal(&rng);
        db[i] = 0.5f * ft_rng_normal(&rng);
    }
    for (int i = 0; i < N_GLOBAL; i++) sc[i] = 0.5f + ft_rng_uniform(&rng);
    int32_t *d_ids = ft_cuda_malloc(sizeof(ids)), *d_gids = ft_cuda_malloc(sizeof(gids));
    FT_ASSERT(d_ids && d_gids);
    ft_cuda_memcpy_h2d(d_ids, ids, sizeof(ids), NULL);
    ft_cuda_memcpy_h2d(d_gids, gids, sizeof(gids), NULL);
    float *d_w = to_device(w, N_PAIRS), *d_gb = to_device(gb, N_GLOBAL * N_ROWS), *d_ub = to_device(ub, N_GLOBAL * N_ROWS);
    float *d_db = to_device(db, N_GLOBAL * N_ROWS), *d_sc = to_device(sc, N_GLOBAL);
    float *d_y = ft_cuda_malloc((size_t)N_PAIRS * N_ROWS * sizeof(float));
    FT_ASSERT(d_y);
    const size_t ny = (size_t)N_PAIRS * N_ROWS;
    ft_cuda_expert_extras ex = {.glu = {act, FT_SWIGLU_OAI_ALPHA, FT_SWIGLU_OAI_LIMIT}, .bias_ids = d_gids};
    if (biases) ex.gate_bias = d_gb, ex.up_bias = d_ub, ex.down_bias = d_db;
    if (scales) ex.down_scale = d_sc;

    // GLU: plain gate and up, then act(g + gb, u + ub) on the host
    ft_cuda_matvec_ids_params p = {.type = t, .w = gate, .mat_bytes = mat_bytes, .n_rows = N_ROWS, .n_cols = n_cols,
                                   .x = xq, .ids = d_ids, .x_div = K, .y = d_y, .n_pairs = N_PAIRS};
    float *g, *u, *f;
    run_glu(&p, up, &ex, ny, &g, &u, &f);
    float *ref = ft_malloc(ny * sizeof(float));
    double big = 0;
    for (size_t i = 0; i < ny; i++) {
        int e = gids[i / N_ROWS], r = (int)(i % N_ROWS);
        float gi = g[i] + (biases ? gb[e * N_ROWS + r] : 0.0f), ui = u[i] + (biases ? ub[e * N_ROWS + r] : 0.0f);
        ref[i] = host_glu(act, gi, ui);
        big = fmax(big, fabs(ref[i]));
    }
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < ny; i++) {
        double lim = act == FT_CUDA_GLU_GELU ? fmax(1e-5 * big, 1e-3 * fabs(ref[i])) : 1e-5 * big;
        double err = fabs(f[i] - ref[i]);
        if (!(err <= lim) && bad++ < 3)
            CHECK(err <= lim, "%s act %d glu pair %zu row %zu: %g vs %g", ft_type_name(t), act, i / N_ROWS, i % N_ROWS,
                  f[i], ref[i]);
        if (!(err / big <= worst)) worst = err / big;
    }

    // GLU with y_q: y as the GLU's above
    {
        enum { RQ = 128 };
        const size_t nq = (size_t)N_PAIRS * RQ;
        uint8_t *d_yq = ft_cuda_malloc(ft_cuda_q8_1_bytes(RQ, N_PAIRS));
        FT_ASSERT(d_yq);
        p.n_rows = RQ;
        float *plain = run_ids(&p, nq);
        p.y_q = d_yq;
        float *fq = run_ids(&p, nq);
        CHECK(memcmp(plain, fq, nq * sizeof(float)) == 0, "%s act %d glu with y_q: y differs from the GLU's",
              ft_type_name(t), act);
        p.n_rows = N_ROWS;
        p.y_q = NULL;
        free(plain); free(fq);
        ft_cuda_free(d_yq);
    }

    // SUM: the plain down products, scaled and biased per global expert, weighted on the host
    void *down = random_bank(t, n_cols, &rng, &down_mat), *hq = gpu_random_q8_1(n_cols, N_PAIRS, &rng);
    p = (ft_cuda_matvec_ids_params){.type = t, .w = down, .mat_bytes = down_mat, .n_rows = N_ROWS, .n_cols = n_cols,
                                    .x = hq, .ids = d_ids, .x_div = 1, .y = d_y, .n_pairs = N_PAIRS};
    float *h = run_ids(&p, ny);
    p.sum_w = d_w;
    p.k = K;
    p.ex = ex;
    float *s = run_ids(&p, (size_t)N_TOK * N_ROWS);
    double worst_sum = check_sum(t, h, s, w, gids, scales ? sc : NULL, biases ? db : NULL, &bad);
    fprintf(stderr, "    %-7s act %d%s%s: glu worst %.2g, sum worst %.2g\n", ft_type_name(t), act,
            biases ? " biases" : "", scales ? " scales" : "", worst, worst_sum);
    free(g); free(u); free(f); free(ref); free(h); free(s);
    ft_cuda_free(gate); ft_cuda_free(up); ft_cuda_free(down); ft_cuda_free(xq); ft_cuda_free(hq);
    ft_cuda_free(d_ids); ft_cuda_free(d_gids); ft_cuda_free(d_w); ft_cuda_free(d_gb); ft_cuda_free(d_ub);
    ft_cuda_free(d_db); ft_cuda_free(d_sc); ft_cuda_free(d_y);
}

TEST(test_cuda_matvec_ids_fused_extras) {
    GPU_TEST_REQUIRE_DEVICE();
    extras_case(FT_TYPE_MXFP4, FT_CUDA_GLU_SWIGLU_OAI, true, false); // gpt-oss
    extras_case(FT_TYPE_Q4_K, FT_CUDA_GLU_SWIGLU_OAI, true, false);
    extras_case(FT_TYPE_Q4_K, FT_CUDA_GLU_GELU, false, true);        // gemma4
    extras_case(FT_TYPE_Q6_K, FT_CUDA_GLU_GELU, false, true);
    extras_case(FT_TYPE_Q8_0, FT_CUDA_GLU_SILU, true, true);         // both extras with SiLU
}

TEST(test_cuda_matvec_ids_fused) {
    GPU_TEST_REQUIRE_DEVICE();
    const enum ft_type types[] = {FT_TYPE_Q4_0, FT_TYPE_Q4_1, FT_TYPE_Q5_0, FT_TYPE_Q5_1, FT_TYPE_Q8_0,
                                  FT_TYPE_Q2_K, FT_TYPE_Q3_K, FT_TYPE_Q4_K, FT_TYPE_Q5_K, FT_TYPE_Q6_K,
                                  FT_TYPE_IQ4_NL, FT_TYPE_IQ4_XS, FT_TYPE_MXFP4};
    for (size_t i = 0; i < FT_ARRAY_LEN(types); i++) fused_case(types[i]);
}

// ft_cuda_matvec_multi: three matrices of one input in one launch give the bits of three
// ft_cuda_matvec launches, for both kernel geometries (forced) and 1, 3 and 8 tokens; rows
// 130, 7 and 64 leave CTAs of each segment partly filled. Outputs start as NaN.
TEST(test_cuda_matvec_multi) {
    GPU_TEST_REQUIRE_DEVICE();
    const enum ft_type types[] = {FT_TYPE_Q4_0, FT_TYPE_Q8_0, FT_TYPE_Q4_K, FT_TYPE_Q6_K, FT_TYPE_IQ4_XS};
    const int64_t rows[3] = {130, 7, 64};
    const int toks[] = {1, 3, 8};
    const int tprs[] = {32, 128};
    for (size_t ti = 0; ti < FT_ARRAY_LEN(types); ti++) {
        enum ft_type t = types[ti];
        int64_t n_cols = ft_type_traits_find(t)->block_elems == 256 ? 768 : 2080;
        ft_rng rng = ft_rng_init(0x3417 + (uint64_t)t);
        void *w[3];
        for (int i = 0; i < 3; i++) w[i] = gpu_random_rows(t, rows[i], n_cols, &rng);
        void *xq = gpu_random_q8_1(n_cols, 8, &rng);
        float *dy = ft_cuda_malloc(2 * 8 * 201 * sizeof(float));
        FT_ASSERT(dy);
        for (size_t ki = 0; ki < FT_ARRAY_LEN(toks); ki++)
            for (size_t gi = 0; gi < FT_ARRAY_LEN(tprs); gi++) {
                int n_tok = toks[ki];
                ft_cuda_matvec_force_tpr(tprs[gi]);
                ft_cuda_matvec_params ps[3];
                size_t off = 0;
                for (int i = 0; i < 3; i++) {
                    ps[i] = (ft_cuda_matvec_params){.type = t, .w = w[i], .n_rows = rows[i], .n_cols = n_cols, .x = xq,
                                                    .y = dy + off, .n_tok = n_tok};
                    off += (size_t)rows[i] * n_tok;
                }
                ft_cuda_memset(dy, 0xFF, 2 * off * sizeof(float), NULL);
                for (int i = 0; i < 3; i++) ft_cuda_matvec(&ps[i], NULL);
                for (int i = 0; i < 3; i++) ps[i].y += off; // the second half
                ft_cuda_matvec_multi(ps, 3, NULL);
                float *h = ft_malloc(2 * off * sizeof(float));
                ft_cuda_memcpy_d2h(h, dy, 2 * off * sizeof(float), NULL);
                ft_cuda_device_sync();
                ft_cuda_matvec_force_tpr(0);
                bool nan = false;
                for (size_t i = 0; i < 2 * off; i++) nan |= h[i] != h[i];
                CHECK(!nan && !memcmp(h, h + off, off * sizeof(float)), "%s n_tok %d tpr %d: multi differs from single%s",
                      ft_type_name(t), n_tok, tprs[gi], nan ? " (NaN: unwritten)" : "");
                free(h);
            }
        for (int i = 0; i < 3; i++) ft_cuda_free(w[i]);
        ft_cuda_free(xq);
        ft_cuda_free(dy);
    }
}

// Biases in the matvec's epilogue (gpt-oss's bq, bk, bv, bo: the backend hands the add_bias that
// follows a waiting matmul to its kernel): ft_cuda_matvec_multi with a bias per segment (one
// without) equals the same launch without biases then an f32 add on the host, bit for bit, for
// 1 and 3 tokens and both geometries.
TEST(test_cuda_matvec_bias) {
    GPU_TEST_REQUIRE_DEVICE();
    const int64_t rows[3] = {130, 7, 64}, n_cols = 2048;
    const enum ft_type t = FT_TYPE_Q8_0;
    ft_rng rng = ft_rng_init(0xB1A5);
    void *w[3];
    float *b[3], *db[3];
    for (int i = 0; i < 3; i++) {
        w[i] = gpu_random_rows(t, rows[i], n_cols, &rng);
        b[i] = ft_malloc((size_t)rows[i] * sizeof(float));
        for (int64_t r = 0; r < rows[i]; r++) b[i][r] = ft_rng_normal(&rng);
        db[i] = to_device(b[i], (size_t)rows[i]);
    }
    void *xq = gpu_random_q8_1(n_cols, 3, &rng);
    float *dy = ft_cuda_malloc(2 * 3 * 201 * sizeof(float));
    FT_ASSERT(dy);
    const int toks[] = {1, 3}, tprs[] = {32, 128};
    for (size_t ki = 0; ki < FT_ARRAY_LEN(toks); ki++)
        for (size_t gi = 0; gi < FT_ARRAY_LEN(tprs); gi++) {
            int n_tok = toks[ki];
            ft_cuda_matvec_force_tpr(tprs[gi]);
            ft_cuda_matvec_params ps[3];
            size_t off = 0, seg[3];
            for (int i = 0; i < 3; i++) {
                seg[i] = off;
                ps[i] = (ft_cuda_matvec_params){.type = t, .w = w[i], .n_rows = rows[i], .n_cols = n_cols, .x = xq,
                                                .y = dy + off, .n_tok = n_tok};
                off += (size_t)rows[i] * n_tok;
            }
            ft_cuda_memset(dy, 0xFF, 2 * off * sizeof(float), NULL);
            ft_cuda_matvec_multi(ps, 3, NULL);
            for (int i = 0; i < 3; i++) {
                ps[i].y += off;
                ps[i].bias = i == 1 ? NULL : db[i];
            }
            ft_cuda_matvec_multi(ps, 3, NULL);
            float *h = ft_malloc(2 * off * sizeof(float));
            ft_cuda_memcpy_d2h(h, dy, 2 * off * sizeof(float), NULL);
            ft_cuda_device_sync();
            ft_cuda_matvec_force_tpr(0);
            int bad = 0;
            for (int i = 0; i < 3; i++)
                for (int c = 0; c < n_tok; c++)
                    for (int64_t r = 0; r < rows[i]; r++) {
                        size_t at = seg[i] + (size_t)c * rows[i] + r;
                        float want = i == 1 ? h[at] : h[at] + b[i][r];
                        if (memcmp(&h[off + at], &want, sizeof(float)) && bad++ < 3)
                            CHECK(0, "segment %d token %d row %lld tpr %d: %g, want %g", i, c, (long long)r, tprs[gi],
                                  h[off + at], want);
                    }
            free(h);
        }
    for (int i = 0; i < 3; i++) {
        ft_cuda_free(w[i]);
        ft_cuda_free(db[i]);
        free(b[i]);
    }
    ft_cuda_free(xq);
    ft_cuda_free(dy);
}
