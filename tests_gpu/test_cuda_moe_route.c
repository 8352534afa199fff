// test_cuda_moe_route.c: the fused router (ft_cuda_moe_router: one token's logits and routing
// in one launch) against the two launches it replaces (ft_cuda_matvec with the float router
// weights, then ft_cuda_moe_route), for f32 and bf16 weights, softmax and sigmoid gating with a
// selection bias, gpt-oss's routing (the router's bias, softmax-weighted top k), 60 / 128 / 256
// experts and k 1 / 4 / 8, rows of 2048 floats (f32: a CTA per
// row, whole float4 rounds), 260 (a CTA per row, a partial round) and 258 (not whole float4s: a
// warp per row).
//
// The logits are float dot products summed in another order (lane-strided FMA chains and a
// warp sum, against the matvec's 4-element chunks over 128 threads): they must agree within
// 4 n_embd 2^-24 sum |w x|. The routing of equal logits is the same code, so with random
// logits (no near ties: consecutive sorted probabilities of 256 experts are ~1e-3 apart, the
// logit error ~1e-6) the selected experts must be equal and the weights within 1e-5 relative.
// Each case runs twice, so a count left non-zero by the first launch (the last CTA resets it)
// would fail the second. Outputs start as NaN. Every launch also counts its selections into one
// set of route counters, which must end as the histogram of the experts the launches returned.
#include "gpu_test.h"
#include "../src/backend/cuda/cuda_ops.h"

#include "../src/quant/fp16.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// oai: gpt-oss's routing (the router's own bias added to the logits, the top k of the logits
// weighted by their softmax, no renormalisation) instead of softmax or sigmoid gating.
static void router_case(enum ft_type t, int n_embd, int n_expert, int k, bool softmax, bool bias, bool oai,
                        ft_rng *rng) {
    const size_t nw = (size_t)n_expert * n_embd, es = t == FT_TYPE_F32 ? 4 : 2;
    uint8_t *w = ft_malloc(nw * es);
    float *wf = ft_malloc(nw * sizeof(float)), *x = ft_malloc(n_embd * sizeof(float)), b[256], lb[256];
    for (size_t i = 0; i < nw; i++) {
        float v = 0.05f * ft_rng_normal(rng);
        if (t == FT_TYPE_F32) ((float *)w)[i] = wf[i] = v;
        else wf[i] = ft_bf16_to_fp32(((ft_bf16 *)w)[i] = ft_fp32_to_bf16(v));
    }
    for (int i = 0; i < n_embd; i++) x[i] = ft_rng_normal(rng);
    for (int i = 0; i < n_expert; i++) b[i] = 0.01f * ft_rng_normal(rng), lb[i] = 0.5f * ft_rng_normal(rng);
    void *dw = ft_cuda_malloc(nw * es);
    float *dx = ft_cuda_malloc(n_embd * sizeof(float)), *db = ft_cuda_malloc(256 * sizeof(float));
    float *dlb = ft_cuda_malloc(256 * sizeof(float));
    float *dlog = ft_cuda_malloc(2 * 256 * sizeof(float)), *dsw = ft_cuda_malloc(2 * 32 * sizeof(float));
    float *dgap = ft_cuda_malloc(2 * sizeof(float));
    int32_t *dsel = ft_cuda_malloc(2 * 32 * sizeof(int32_t));
    int *dcount = ft_cuda_malloc(sizeof(int));
    unsigned long long *dcounts = ft_cuda_malloc(256 * sizeof(unsigned long long));
    FT_ASSERT(dw && dx && db && dlog && dsw && dgap && dsel && dcount && dcounts);
    ft_cuda_memset(dcounts, 0, 256 * sizeof(unsigned long long), NULL);
    uint64_t hist[256] = {0};
    ft_cuda_memcpy_h2d(dw, w, nw * es, NULL);
    ft_cuda_memcpy_h2d(dx, x, n_embd * sizeof(float), NULL);
    ft_cuda_memcpy_h2d(db, b, 256 * sizeof(float), NULL);
    ft_cuda_memcpy_h2d(dlb, lb, 256 * sizeof(float), NULL);
    ft_cuda_memset(dcount, 0, sizeof(int), NULL);
    const float inf[2] = {INFINITY, INFINITY};

    // [0]: the two launches; [1]: the fused one (twice)
    float logits[2][256], sw[2][32], gap[2];
    int32_t sel[2][32];
    for (int run = 0; run < 3; run++) {
        const int j = run == 0 ? 0 : 1;
        ft_cuda_memset(dlog + j * 256, 0xFF, 256 * sizeof(float), NULL);
        ft_cuda_memset(dsw + j * 32, 0xFF, 32 * sizeof(float), NULL);
        ft_cuda_memset(dsel + j * 32, 0xFF, 32 * sizeof(int32_t), NULL);
        ft_cuda_memcpy_h2d(dgap + j, inf, sizeof(float), NULL);
        ft_cuda_route_params rp = {.logits = dlog + j * 256, .bias = bias ? db : NULL, .sel = dsel + j * 32,
                                   .w = dsw + j * 32, .gap = dgap + j, .n_tok = 1, .n_expert = n_expert, .k = k,
                                   .softmax = softmax && !oai, .norm_w = !oai, .w_scale = 1.0f, .counts = dcounts,
                                   .logit_bias = oai ? dlb : NULL, .softmax_weight = oai};
        if (j == 0) {
            ft_cuda_matvec_params mp = {.type = t, .w = dw, .n_rows = n_expert, .n_cols = n_embd, .x = dx,
                                        .y = dlog, .n_tok = 1};
            ft_cuda_matvec(&mp, NULL);
            ft_cuda_moe_route(&rp, NULL);
        } else {
            CHECK(ft_cuda_moe_router_fits(t, 1, n_expert, k));
            ft_cuda_router_params r = {.w_type = t, .w = dw, .x = dx, .n_embd = n_embd, .count = dcount};
            ft_cuda_moe_router(&r, &rp, NULL);
        }
        ft_cuda_memcpy_d2h(logits[j], dlog + j * 256, (size_t)n_expert * sizeof(float), NULL);
        ft_cuda_memcpy_d2h(sw[j], dsw + j * 32, (size_t)k * sizeof(float), NULL);
        ft_cuda_memcpy_d2h(sel[j], dsel + j * 32, (size_t)k * sizeof(int32_t), NULL);
        ft_cuda_memcpy_d2h(&gap[j], dgap + j, sizeof(float), NULL);
        ft_cuda_device_sync();
        for (int i = 0; i < k; i++)
            if (sel[j][i] >= 0 && sel[j][i] < n_expert) hist[sel[j][i]]++;
        if (j == 0) continue;
        for (int e = 0; e < n_expert; e++) {
            double s = 0;
            for (int i = 0; i < n_embd; i++) s += fabs((double)wf[(size_t)e * n_embd + i] * x[i]);
            double err = fabs((double)logits[1][e] - logits[0][e]), bound = 4.0 * n_embd * 0x1p-24 * s;
            if (!(err <= bound)) {
                CHECK(err <= bound, "%s width %d, %d experts run %d: logit %d %g vs %g", ft_type_name(t), n_embd,
                      n_expert, run, e, logits[1][e], logits[0][e]);
                break;
            }
        }
        for (int i = 0; i < k; i++) {
            CHECK(sel[1][i] == sel[0][i], "%s width %d, %d experts k %d %s run %d: slot %d expert %d vs %d",
                  ft_type_name(t), n_embd, n_expert, k, oai ? "gpt-oss" : softmax ? "softmax" : "sigmoid", run, i,
                  sel[1][i], sel[0][i]);
            CHECK(fabs(sw[1][i] - sw[0][i]) <= 1e-5 * fabs(sw[0][i]), "slot %d weight %g vs %g", i, sw[1][i], sw[0][i]);
        }
        CHECK(isfinite(gap[1]) && fabs(gap[1] - gap[0]) <= 1e-4, "gap %g vs %g", gap[1], gap[0]);
    }
    uint64_t counts[256];
    ft_cuda_memcpy_d2h(counts, dcounts, 256 * sizeof(uint64_t), NULL);
    ft_cuda_device_sync();
    for (int e = 0; e < 256; e++)
        CHECK(counts[e] == hist[e], "%s %d experts k %d: expert %d counted %llu, returned %llu times", ft_type_name(t),
              n_expert, k, e, (unsigned long long)counts[e], (unsigned long long)hist[e]);
    free(w); free(wf); free(x);
    ft_cuda_free(dw); ft_cuda_free(dx); ft_cuda_free(db); ft_cuda_free(dlb); ft_cuda_free(dlog); ft_cuda_free(dsw);
    ft_cuda_free(dgap); ft_cuda_free(dsel); ft_cuda_free(dcount); ft_cuda_free(dcounts);
}

TEST(test_cuda_moe_router_fused) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_rng rng = ft_rng_init(0x4047E);
    const int widths[] = {2048, 260, 258}, experts[] = {60, 128, 256}, ks[] = {1, 4, 8};
    for (size_t n = 0; n < FT_ARRAY_LEN(widths); n++)
        for (size_t e = 0; e < FT_ARRAY_LEN(experts); e++)
            for (size_t i = 0; i < FT_ARRAY_LEN(ks); i++) {
                router_case(FT_TYPE_F32, widths[n], experts[e], ks[i], true, false, false, &rng);
                router_case(FT_TYPE_BF16, widths[n], experts[e], ks[i], false, true, false, &rng);
                router_case(FT_TYPE_F32, widths[n], experts[e], ks[i], false, false, true, &rng);
            }
    CHECK(!ft_cuda_moe_router_fits(FT_TYPE_Q8_0, 1, 128, 8) && !ft_cuda_moe_router_fits(FT_TYPE_F32, 2, 128, 8));
}

// The route counters of ft_cuda_moe_route on each of its kernels (the register kernels to 128
// and 256 experts, the shared-memory one beyond and for gpt-oss's softmax-weighted routing):
// after two launches over 37 tokens of random logits, each expert's counter is the number of
// times the launches returned it, and they sum to 2 x 37 x k.
TEST(test_cuda_moe_route_counts) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_rng rng = ft_rng_init(0xC0047);
    enum { T = 37, MAXE = 300 };
    static const struct { int n_expert, k, softmax_weight; } cases[] = {{60, 4, 0}, {200, 8, 0}, {300, 8, 0}, {32, 4, 1}};
    float *dlog = ft_cuda_malloc(T * MAXE * sizeof(float)), *dw = ft_cuda_malloc(T * 8 * sizeof(float));
    float *dgap = ft_cuda_malloc(sizeof(float));
    int32_t *dsel = ft_cuda_malloc(T * 8 * sizeof(int32_t));
    unsigned long long *dcounts = ft_cuda_malloc(MAXE * sizeof(unsigned long long));
    FT_ASSERT(dlog && dw && dgap && dsel && dcounts);
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        const int ne = cases[c].n_expert, k = cases[c].k;
        static float logits[T * MAXE];
        static int32_t sel[T * 8];
        uint64_t hist[MAXE] = {0}, counts[MAXE];
        ft_cuda_memset(dcounts, 0, MAXE * sizeof(unsigned long long), NULL);
        const float inf = INFINITY;
        for (int run = 0; run < 2; run++) {
            for (int i = 0; i < T * ne; i++) logits[i] = ft_rng_normal(&rng);
            ft_cuda_memcpy_h2d(dlog, logits, (size_t)T * ne * sizeof(float), NULL);
            ft_cuda_memcpy_h2d(dgap, &inf, sizeof(float), NULL);
            ft_cuda_route_params rp = {.logits = dlog, .sel = dsel, .w = dw, .gap = dgap, .n_tok = T, .n_expert = ne,
                                       .k = k, .softmax = !cases[c].softmax_weight, .norm_w = 1, .w_scale = 1.0f,
                                       .softmax_weight = cases[c].softmax_weight, .counts = dcounts};
            ft_cuda_moe_route(&rp, NULL);
            ft_cuda_memcpy_d2h(sel, dsel, (size_t)T * k * sizeof(int32_t), NULL);
            ft_cuda_device_sync();
            for (int i = 0; i < T * k; i++) {
                REQUIRE(sel[i] >= 0 && sel[i] < ne, "%d experts: selection %d is %d", ne, i, sel[i]);
                hist[sel[i]]++;
            }
        }
        ft_cuda_memcpy_d2h(counts, dcounts, (size_t)ne * sizeof(uint64_t), NULL);
        ft_cuda_device_sync();
        uint64_t total = 0;
        for (int e = 0; e < ne; e++) {
            CHECK(counts[e] == hist[e], "%d experts k %d: expert %d counted %llu, returned %llu times", ne, k, e,
                  (unsigned long long)counts[e], (unsigned long long)hist[e]);
            total += counts[e];
        }
        CHECK(total == 2u * T * (uint64_t)k, "%d experts: %llu counted", ne, (unsigned long long)total);
    }
    ft_cuda_free(dlog); ft_cuda_free(dw); ft_cuda_free(dgap); ft_cuda_free(dsel); ft_cuda_free(dcounts);
}

// The decode router normalising its own input (ft_cuda_router_params.norm) against the two
// launches it replaces (ft_cuda_rms_norm, then the router on the norm's output): the norm's
// floats and q8_1 blocks, the logits, the selections and the weights all equal to the bit. Rows
// of 2048 and 1056 floats (rms_norm's register paths, the second padded) and 6144 (its loop);
// 8 experts (fewer CTAs than the norm's 32-element blocks) and 128; with and without a norm
// weight. The fused launch runs twice (its count must be reset).
static void router_norm_case(int n_embd, int n_expert, bool weighted, ft_rng *rng) {
    const int k = n_expert < 8 ? 2 : 8;
    const size_t nw = (size_t)n_expert * n_embd, qb = ft_cuda_q8_1_bytes(n_embd, 1);
    float *w = ft_malloc(nw * sizeof(float)), *x = ft_malloc(n_embd * sizeof(float));
    float *nwt = ft_malloc(n_embd * sizeof(float));
    for (size_t i = 0; i < nw; i++) w[i] = 0.05f * ft_rng_normal(rng);
    for (int i = 0; i < n_embd; i++) x[i] = 3.0f * ft_rng_normal(rng), nwt[i] = 1.0f + 0.1f * ft_rng_normal(rng);
    float *dw = ft_cuda_malloc(nw * sizeof(float)), *dx = ft_cuda_malloc(n_embd * sizeof(float));
    float *dnw = ft_cuda_malloc(n_embd * sizeof(float)), *dy = ft_cuda_malloc(2 * (size_t)n_embd * sizeof(float));
    uint8_t *dyq = ft_cuda_malloc(2 * qb);
    float *dlog = ft_cuda_malloc(2 * 128 * sizeof(float)), *dsw = ft_cuda_malloc(2 * 8 * sizeof(float));
    float *dgap = ft_cuda_malloc(2 * sizeof(float));
    int32_t *dsel = ft_cuda_malloc(2 * 8 * sizeof(int32_t));
    int *dcount = ft_cuda_malloc(sizeof(int));
    FT_ASSERT(dw && dx && dnw && dy && dyq && dlog && dsw && dgap && dsel && dcount);
    ft_cuda_memcpy_h2d(dw, w, nw * sizeof(float), NULL);
    ft_cuda_memcpy_h2d(dx, x, n_embd * sizeof(float), NULL);
    ft_cuda_memcpy_h2d(dnw, nwt, n_embd * sizeof(float), NULL);
    ft_cuda_memset(dcount, 0, sizeof(int), NULL);
    const float inf = INFINITY, eps = 1e-6f;
    float *y[2], logits[2][128], sw[2][8];
    int32_t sel[2][8];
    uint8_t *yq[2];
    for (int j = 0; j < 2; j++) y[j] = ft_malloc(n_embd * sizeof(float)), yq[j] = ft_malloc(qb);
    for (int run = 0; run < 3; run++) {
        const int j = run == 0 ? 0 : 1;
        ft_cuda_memset(dy + (size_t)j * n_embd, 0xFF, n_embd * sizeof(float), NULL);
        ft_cuda_memset(dyq + j * qb, 0xFF, qb, NULL);
        ft_cuda_memset(dlog + j * 128, 0xFF, 128 * sizeof(float), NULL);
        ft_cuda_memcpy_h2d(dgap + j, &inf, sizeof(float), NULL);
        ft_cuda_route_params rp = {.logits = dlog + j * 128, .sel = dsel + j * 8, .w = dsw + j * 8, .gap = dgap + j,
                                   .n_tok = 1, .n_expert = n_expert, .k = k, .softmax = true, .norm_w = true,
                                   .w_scale = 1.0f};
        ft_cuda_router_params r = {.w_type = FT_TYPE_F32, .w = dw, .x = dx, .n_embd = n_embd, .count = dcount};
        CHECK(ft_cuda_moe_router_fits(FT_TYPE_F32, 1, n_expert, k) && ft_cuda_moe_router_norm_fits(&r));
        if (j == 0) {
            ft_cuda_rms_norm(dx, NULL, weighted ? dnw : NULL, dy, dyq, 1, n_embd, eps, NULL);
            r.x = dy;
        } else {
            r.norm = true, r.norm_w = weighted ? dnw : NULL, r.norm_eps = eps;
            r.norm_y = dy + n_embd, r.norm_yq = dyq + qb;
        }
        ft_cuda_moe_router(&r, &rp, NULL);
        ft_cuda_memcpy_d2h(y[j], dy + (size_t)j * n_embd, n_embd * sizeof(float), NULL);
        ft_cuda_memcpy_d2h(yq[j], dyq + j * qb, qb, NULL);
        ft_cuda_memcpy_d2h(logits[j], dlog + j * 128, (size_t)n_expert * sizeof(float), NULL);
        ft_cuda_memcpy_d2h(sw[j], dsw + j * 8, (size_t)k * sizeof(float), NULL);
        ft_cuda_memcpy_d2h(sel[j], dsel + j * 8, (size_t)k * sizeof(int32_t), NULL);
        ft_cuda_device_sync();
        if (j == 0) continue;
        CHECK(!memcmp(y[0], y[1], n_embd * sizeof(float)), "width %d, %d experts%s run %d: the norm's floats differ",
              n_embd, n_expert, weighted ? "" : " (no weight)", run);
        CHECK(!memcmp(yq[0], yq[1], qb), "width %d: the norm's q8_1 blocks differ", n_embd);
        CHECK(!memcmp(logits[0], logits[1], (size_t)n_expert * sizeof(float)), "width %d, %d experts: logits differ",
              n_embd, n_expert);
        CHECK(!memcmp(sel[0], sel[1], (size_t)k * sizeof(int32_t)) && !memcmp(sw[0], sw[1], (size_t)k * sizeof(float)),
              "width %d, %d experts: the routing differs", n_embd, n_expert);
    }
    for (int j = 0; j < 2; j++) free(y[j]), free(yq[j]);
    free(w); free(x); free(nwt);
    ft_cuda_free(dw); ft_cuda_free(dx); ft_cuda_free(dnw); ft_cuda_free(dy); ft_cuda_free(dyq); ft_cuda_free(dlog);
    ft_cuda_free(dsw); ft_cuda_free(dgap); ft_cuda_free(dsel); ft_cuda_free(dcount);
}

TEST(test_cuda_moe_router_norm) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_rng rng = ft_rng_init(0x70E);
    const int widths[] = {2048, 1056, 6144}, experts[] = {8, 128};
    for (size_t n = 0; n < FT_ARRAY_LEN(widths); n++)
        for (size_t e = 0; e < FT_ARRAY_LEN(experts); e++) {
            router_norm_case(widths[n], experts[e], true, &rng);
            router_norm_case(widths[n], experts[e], false, &rng);
        }
}
