// test_cuda_moe_rows.c: ft_cuda_moe_rows (moe_rows.cu), the MoE FFN of a few rows grouped by
// expert, bit for bit against the per-pair fused kernels it replaces (ft_cuda_matvec_ids: GLU
// with y_q, then SUM), which test_cuda_matvec_fused.c checks against plain kernels and those
// against a double-precision reference. Equal bits are the point: a token's output must not
// depend on the other rows of its step (batched equals alone).
//
// Cases: every quantized format as gate/up and down (and mixed pairs, as Q4_K_M files mix
// q4_K and q6_K), 2, 5, 13 and 40 tokens x k = 3 over 6 experts with a skewed router (one
// expert chosen by most tokens, so it takes several tiles);
// the weights at cache slots (ids a permutation of the experts into a bank of 8) with the
// extras indexed by the global expert; gpt-oss's and gemma4's extras. Outputs start as NaN.
#include "gpu_data.h"
#include "gpu_test.h"

#include "../src/backend/backend.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N_EXPERT = 6, N_SLOT = 8, K = 3, N_EMBD = 512, N_FF = 256, MAX_TOK = 40 };

// A bank of N_SLOT random (n_rows, n_cols) matrices of type t on the device.
static void *random_bank(enum ft_type t, int64_t n_rows, int64_t n_cols, ft_rng *rng, size_t *mat_bytes) {
    *mat_bytes = ft_row_bytes(t, n_cols) * (size_t)n_rows;
    return gpu_random_rows(t, n_rows * N_SLOT, n_cols, rng);
}

static void *to_host(const void *d, size_t n) {
    void *h = ft_malloc(n);
    ft_cuda_memcpy_d2h(h, d, n, NULL);
    ft_cuda_device_sync();
    return h;
}

// Per token K distinct experts, expert 0 with probability 3/4 (the hot one), the rest uniform.
static void route(ft_rng *rng, int n_tok, int32_t *sel, float *w) {
    for (int t = 0; t < n_tok; t++)
        for (int j = 0; j < K; j++) {
            int e;
            bool dup;
            do {
                e = j == 0 && ft_rng_uniform(rng) < 0.75f ? 0 : (int)(ft_rng_next(rng) % N_EXPERT);
                dup = false;
                for (int i = 0; i < j; i++) dup |= sel[t * K + i] == e;
            } while (dup);
            sel[t * K + j] = e;
            w[t * K + j] = ft_rng_uniform(rng);
        }
}

typedef struct extras_host {
    int act;
    bool biases, scales;
} extras_host;

static void rows_case(enum ft_type gt, enum ft_type dt, int n_tok, bool slots, extras_host xh) {
    ft_rng rng = ft_rng_init(0x5E17 + (uint64_t)gt * 131 + (uint64_t)dt * 7 + (uint64_t)n_tok);
    size_t gate_mat, down_mat;
    void *gate = random_bank(gt, N_FF, N_EMBD, &rng, &gate_mat), *up = random_bank(gt, N_FF, N_EMBD, &rng, &gate_mat);
    void *down = random_bank(dt, N_EMBD, N_FF, &rng, &down_mat);
    void *xq = gpu_random_q8_1(N_EMBD, n_tok, &rng);
    const int n_pairs = n_tok * K;
    int32_t sel[MAX_TOK * K], ids[MAX_TOK * K];
    float w[MAX_TOK * K];
    route(&rng, n_tok, sel, w);
    for (int i = 0; i < n_pairs; i++) ids[i] = slots ? (3 * sel[i] + 5) % N_SLOT : sel[i];
    float gb[N_EXPERT * N_FF], ub[N_EXPERT * N_FF], db[N_EXPERT * N_EMBD], sc[N_EXPERT];
    for (int i = 0; i < N_EXPERT * N_FF; i++) gb[i] = 0.5f * ft_rng_normal(&rng), ub[i] = 0.5f * ft_rng_normal(&rng);
    for (int i = 0; i < N_EXPERT * N_EMBD; i++) db[i] = 0.5f * ft_rng_normal(&rng);
    for (int i = 0; i < N_EXPERT; i++) sc[i] = 0.5f + ft_rng_uniform(&rng);
    int32_t *d_sel = gpu_copy_to_device(sel, sizeof(sel)), *d_ids = gpu_copy_to_device(ids, sizeof(ids));
    float *d_w = gpu_copy_to_device(w, sizeof(w)), *d_gb = gpu_copy_to_device(gb, sizeof(gb)), *d_ub = gpu_copy_to_device(ub, sizeof(ub));
    float *d_db = gpu_copy_to_device(db, sizeof(db)), *d_sc = gpu_copy_to_device(sc, sizeof(sc));
    ft_cuda_expert_extras ex = {.glu = {xh.act, FT_SWIGLU_OAI_ALPHA, FT_SWIGLU_OAI_LIMIT}};
    if (xh.biases) ex.gate_bias = d_gb, ex.up_bias = d_ub, ex.down_bias = d_db;
    if (xh.scales) ex.down_scale = d_sc;

    const size_t nh = (size_t)n_pairs * N_FF, nhq = ft_cuda_q8_1_bytes(N_FF, n_pairs), ny = (size_t)n_tok * N_EMBD;
    float *h_ref = ft_cuda_malloc(nh * sizeof(float)), *h = ft_cuda_malloc(nh * sizeof(float));
    void *hq_ref = ft_cuda_malloc(nhq), *hq = ft_cuda_malloc(nhq);
    float *y_ref = ft_cuda_malloc(ny * sizeof(float)), *y = ft_cuda_malloc(ny * sizeof(float));
    float *out = ft_cuda_malloc((size_t)n_pairs * N_EMBD * sizeof(float));
    void *work = ft_cuda_malloc(ft_cuda_moe_rows_work_bytes(n_pairs, N_EXPERT));
    FT_ASSERT(h_ref && h && hq_ref && hq && y_ref && y && out && work);
    ft_cuda_memset(h, 0xFF, nh * sizeof(float), NULL);
    ft_cuda_memset(hq, 0xFF, nhq, NULL);
    ft_cuda_memset(y, 0xFF, ny * sizeof(float), NULL);

    // the per-pair kernels: extras by the global expert (bias_ids), weights by slot
    ft_cuda_expert_extras ex_pair = ex;
    ex_pair.bias_ids = d_sel;
    ft_cuda_matvec_ids_params glu = {.type = gt, .w = gate, .mat_bytes = gate_mat, .n_rows = N_FF, .n_cols = N_EMBD,
                                     .x = xq, .ids = d_ids, .x_div = K, .y = h_ref, .n_pairs = n_pairs,
                                     .w_up = up, .y_q = hq_ref, .ex = ex_pair};
    ft_cuda_matvec_ids(&glu, NULL);
    ft_cuda_matvec_ids_params sum = {.type = dt, .w = down, .mat_bytes = down_mat, .n_rows = N_EMBD, .n_cols = N_FF,
                                     .x = hq_ref, .ids = d_ids, .x_div = 1, .y = y_ref, .n_pairs = n_pairs,
                                     .sum_w = d_w, .k = K, .ex = ex_pair};
    ft_cuda_matvec_ids(&sum, NULL);

    ft_cuda_moe_rows_params rp = {
        .gate_type = gt, .down_type = dt, .gate = gate, .up = up, .down = down, .gate_mat_bytes = gate_mat,
        .down_mat_bytes = down_mat, .n_embd = N_EMBD, .n_ff = N_FF, .n_expert = N_EXPERT, .n_tok = n_tok, .k = K,
        .sel = d_sel, .ids = d_ids, .sel_w = d_w, .xq = xq, .work = work, .h = h, .hq = hq, .out = out, .y = y,
        .ex = ex,
    };
    ft_cuda_moe_rows(&rp, NULL);

    float *a = to_host(h, nh * sizeof(float)), *b = to_host(h_ref, nh * sizeof(float));
    uint8_t *qa = to_host(hq, nhq), *qb = to_host(hq_ref, nhq);
    float *ya = to_host(y, ny * sizeof(float)), *yb = to_host(y_ref, ny * sizeof(float));
    bool nan = false;
    for (size_t i = 0; i < ny; i++) nan |= ya[i] != ya[i];
    const char *tn = ft_type_name(gt), *dn = ft_type_name(dt);
    CHECK(!memcmp(a, b, nh * sizeof(float)), "%s/%s %d tok%s act %d: h differs from the per-pair GLU's", tn, dn, n_tok,
          slots ? " slots" : "", xh.act);
    CHECK(!memcmp(qa, qb, nhq), "%s/%s %d tok: h's q8_1 differs", tn, dn, n_tok);
    CHECK(!nan && !memcmp(ya, yb, ny * sizeof(float)), "%s/%s %d tok%s act %d: y differs from the SUM's%s", tn, dn, n_tok,
          slots ? " slots" : "", xh.act, nan ? " (NaN: unwritten)" : "");
    free(a); free(b); free(qa); free(qb); free(ya); free(yb);
    void *dev[] = {gate, up, down, xq, d_sel, d_ids, d_w, d_gb, d_ub, d_db, d_sc, h_ref, h, hq_ref, hq, y_ref, y, out, work};
    for (size_t i = 0; i < FT_ARRAY_LEN(dev); i++) ft_cuda_free(dev[i]);
}

TEST(test_cuda_moe_rows_formats) {
    GPU_TEST_REQUIRE_DEVICE();
    const enum ft_type types[] = {FT_TYPE_Q4_0, FT_TYPE_Q4_1, FT_TYPE_Q5_0, FT_TYPE_Q5_1, FT_TYPE_Q8_0,
                                  FT_TYPE_Q2_K, FT_TYPE_Q3_K, FT_TYPE_Q4_K, FT_TYPE_Q5_K, FT_TYPE_Q6_K,
                                  FT_TYPE_IQ4_NL, FT_TYPE_IQ4_XS, FT_TYPE_MXFP4};
    const extras_host silu = {FT_CUDA_GLU_SILU, false, false};
    for (size_t i = 0; i < FT_ARRAY_LEN(types); i++) rows_case(types[i], types[i], 5, false, silu);
    rows_case(FT_TYPE_Q4_K, FT_TYPE_Q6_K, 5, false, silu);
    rows_case(FT_TYPE_Q8_0, FT_TYPE_Q4_K, 5, false, silu);
}

TEST(test_cuda_moe_rows_token_counts) {
    GPU_TEST_REQUIRE_DEVICE();
    const extras_host silu = {FT_CUDA_GLU_SILU, false, false};
    const int toks[] = {2, 5, 13, 40};
    for (size_t i = 0; i < FT_ARRAY_LEN(toks); i++) {
        rows_case(FT_TYPE_Q4_K, FT_TYPE_Q4_K, toks[i], false, silu);
        rows_case(FT_TYPE_Q4_K, FT_TYPE_Q6_K, toks[i], true, silu);
    }
}

TEST(test_cuda_moe_rows_extras) {
    GPU_TEST_REQUIRE_DEVICE();
    rows_case(FT_TYPE_MXFP4, FT_TYPE_MXFP4, 13, true, (extras_host){FT_CUDA_GLU_SWIGLU_OAI, true, false}); // gpt-oss
    rows_case(FT_TYPE_Q4_K, FT_TYPE_Q6_K, 40, true, (extras_host){FT_CUDA_GLU_GELU, false, true});        // gemma4
    rows_case(FT_TYPE_Q8_0, FT_TYPE_Q8_0, 5, true, (extras_host){FT_CUDA_GLU_SILU, true, true});
}
