// test_ops.c: the CPU backend's ops against independent float/double computations, and the
// fast path against the scalar reference path (FT_REFERENCE's backend). Outputs are filled
// with NaN first so an element an op forgets to write fails.
#include "test.h"
#include "fixtures.h"
#include "../src/backend/cpu/cpu_impl.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>


static ft_backend *backend(bool reference, int max_tok, int width) {
    ft_backend *be = ft_backend_cpu_init(reference ? 1 : 3, reference);
    ft_backend_limits lim = {.max_tok = max_tok, .max_width = width, .max_ctx = 64, .max_head_dim = 64,
                             .n_expert = 8, .n_expert_used = 2};
    be->ops->reserve(be, &lim);
    return be;
}

static const enum ft_type k_types[] = {
    FT_TYPE_F32,  FT_TYPE_F16,  FT_TYPE_BF16, FT_TYPE_Q4_0, FT_TYPE_Q4_1,   FT_TYPE_Q5_0,   FT_TYPE_Q5_1,  FT_TYPE_Q8_0,
    FT_TYPE_Q2_K, FT_TYPE_Q3_K, FT_TYPE_Q4_K, FT_TYPE_Q5_K, FT_TYPE_Q6_K, FT_TYPE_IQ4_NL, FT_TYPE_IQ4_XS, FT_TYPE_MXFP4,
};

// matmul: fast vs reference within 1e-4 relative, and both vs the dequantized weights times
// the dequantized quantized activations in double (the same numbers, another summation).
TEST(ops_matmul_every_type) {
    enum { N_IN = 256, N_OUT = 37, N_TOK = 5 };
    ft_rng r = ft_rng_init(11);
    float x[N_TOK * N_IN], yf[N_TOK * N_OUT], yr[N_TOK * N_OUT], w[N_IN], xd[N_IN];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 1.0f);
    ft_backend *fast = backend(false, 8, 512), *ref = backend(true, 8, 512);
    uint8_t xq[N_IN * 4 + 64];
    for (size_t ti = 0; ti < FT_ARRAY_LEN(k_types); ti++) {
        enum ft_type t = k_types[ti];
        ft_tensor wt = fixture_weight(t, N_IN, N_OUT, 1, &r);
        fixture_fill_nan(yf, FT_ARRAY_LEN(yf));
        fixture_fill_nan(yr, FT_ARRAY_LEN(yr));
        fast->ops->matmul(fast, &wt, x, yf, N_TOK);
        ref->ops->matmul(ref, &wt, x, yr, N_TOK);
        const ft_quant_ops *q = ft_quant_ops_find(t), *aq = ft_quant_ops_find(q->vec_dot_type);
        double worst = 0;
        for (int k = 0; k < N_TOK; k++) {
            aq->from_float_ref(x + k * N_IN, xq, N_IN);
            aq->to_float(xq, xd, N_IN);
            for (int o = 0; o < N_OUT; o++) {
                q->to_float((uint8_t *)wt.data + (size_t)o * wt.row_bytes, w, N_IN);
                double want = 0;
                for (int i = 0; i < N_IN; i++) want += (double)w[i] * xd[i];
                double scale = fmax(1.0, fabs(want));
                worst = fmax(worst, fabs(yr[k * N_OUT + o] - want) / scale);
                CHECK(fabs(yf[k * N_OUT + o] - yr[k * N_OUT + o]) <= 1e-4 * scale, "%s: fast %g ref %g", ft_type_name(t),
                      yf[k * N_OUT + o], yr[k * N_OUT + o]);
            }
        }
        // the activation quantizer is llama.cpp's (rounding ties to even), the oracle here the
        // reference quantizer: an occasional code differs by one
        CHECK(worst < 2e-2, "%s: reference path off the double product by %g", ft_type_name(t), worst);
        free(wt.data);
    }
    fast->ops->free(fast);
    ref->ops->free(ref);
}

// rms_norm and rope against double-precision formulas.
TEST(ops_rms_norm_rope) {
    enum { N = 64, ROWS = 3 };
    ft_rng r = ft_rng_init(5);
    float x[ROWS * N], y[ROWS * N], wv[N];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 2.0f);
    fixture_fill_normal(&r, wv, N, 0.1f);
    for (int i = 0; i < N; i++) wv[i] += 1.0f;
    ft_tensor w = {.name = "norm", .type = FT_TYPE_F32, .ne = {N, 1, 1}, .row_bytes = N * 4, .mat_bytes = N * 4,
                   .data = wv};
    ft_backend *be = backend(false, 8, 512);
    fixture_fill_nan(y, FT_ARRAY_LEN(y));
    be->ops->rms_norm(be, x, &w, y, ROWS, N, 1e-6f);
    for (int k = 0; k < ROWS; k++) {
        double ss = 0;
        for (int i = 0; i < N; i++) ss += (double)x[k * N + i] * x[k * N + i];
        double inv = 1.0 / sqrt(ss / N + 1e-6);
        for (int i = 0; i < N; i++) CHECK(fabs(y[k * N + i] - x[k * N + i] * inv * wv[i]) < 1e-5, "rms_norm %d", i);
    }
    // rope: 2 tokens at positions 7, 8, 2 heads of 64, first 32 dims rotating, both layouts
    for (int neox = 0; neox < 2; neox++) {
        float q[2 * 2 * 64], o[2 * 2 * 64];
        fixture_fill_normal(&r, q, FT_ARRAY_LEN(q), 1.0f);
        memcpy(o, q, sizeof(q));
        ft_rope_params rp = {.n_rot = 32, .neox = neox, .freq_base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.0f,
                             .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096};
        be->ops->rope(be, q, 2, 2, 64, 7, &rp);
        for (int t = 0; t < 2; t++)
            for (int h = 0; h < 2; h++) {
                const float *a = o + (t * 2 + h) * 64;
                const float *b = q + (t * 2 + h) * 64;
                for (int i = 0; i < 16; i++) {
                    double th = (7 + t) * pow(10000.0, -2.0 * i / 32);
                    int i0 = neox ? i : 2 * i, i1 = neox ? i + 16 : 2 * i + 1;
                    CHECK(fabs(b[i0] - (a[i0] * cos(th) - a[i1] * sin(th))) < 1e-4, "rope neox=%d pair %d", neox, i);
                    CHECK(fabs(b[i1] - (a[i0] * sin(th) + a[i1] * cos(th))) < 1e-4, "rope neox=%d pair %d", neox, i);
                }
                for (int i = 32; i < 64; i++) CHECK(b[i] == a[i], "rope: dim %d past n_rot changed", i);
            }
    }
    // hadamard twice is the identity
    float hx[128], hy[128];
    fixture_fill_normal(&r, hx, 128, 1.0f);
    memcpy(hy, hx, sizeof(hx));
    be->ops->hadamard(be, hy, 2, 64, 64);
    be->ops->hadamard(be, hy, 2, 64, 64);
    for (int i = 0; i < 128; i++) CHECK(fabs(hy[i] - hx[i]) < 1e-5, "hadamard^2 != I at %d", i);
    be->ops->free(be);
}

// The element-wise ops split rows over the pool above CPU_ROWS_MIN_FLOATS: on 3 threads they
// give the single-thread reference backend's bits (rms_norm, rope, get_rows, add, scale,
// softcap, hadamard, set_rows into f16 and q8_0 caches, gate_mul with per-element and per-head
// gates), on enough rows that the split is taken.
TEST(ops_elementwise_threads_same_bits) {
    enum { ROWS = 96, N = 512, HD = 64, NH = N / HD };
    FT_ASSERT(ROWS * N >= 2 * CPU_ROWS_MIN_FLOATS);
    ft_rng r = ft_rng_init(29);
    float *x = ft_malloc(sizeof(float) * ROWS * N), *g = ft_malloc(sizeof(float) * ROWS * N), wv[N];
    fixture_fill_normal(&r, x, ROWS * N, 2.0f);
    fixture_fill_normal(&r, g, ROWS * N, 1.0f);
    fixture_fill_normal(&r, wv, N, 0.1f);
    ft_tensor w = {.name = "norm", .type = FT_TYPE_F32, .ne = {N, 1, 1}, .row_bytes = N * 4, .mat_bytes = N * 4,
                   .data = wv};
    ft_tensor emb = fixture_weight(FT_TYPE_Q8_0, N, ROWS, 1, &r);
    int32_t ids[ROWS];
    for (int i = 0; i < ROWS; i++) ids[i] = (i * 37) % ROWS;
    float *out[2][12];
    uint8_t *caches[2][2];
    const enum ft_type cache_types[2] = {FT_TYPE_F16, FT_TYPE_Q8_0};
    for (int ref = 0; ref < 2; ref++) {
        ft_backend *be = ft_backend_cpu_init(ref ? 1 : 3, ref);
        ft_backend_limits lim = {.max_tok = ROWS, .max_width = N, .max_ctx = ROWS, .max_head_dim = HD};
        be->ops->reserve(be, &lim);
        for (int k = 0; k < 12; k++) {
            out[ref][k] = ft_malloc(sizeof(float) * ROWS * N);
            memcpy(out[ref][k], x, sizeof(float) * ROWS * N);
        }
        be->ops->rms_norm(be, x, &w, out[ref][0], ROWS, N, 1e-6f);
        ft_rope_params rp = {.n_rot = HD, .neox = true, .freq_base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.0f,
                             .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096};
        be->ops->rope(be, out[ref][1], ROWS, NH, HD, 5, &rp);
        be->ops->get_rows(be, &emb, ids, out[ref][2], ROWS);
        be->ops->add(be, out[ref][3], g, (size_t)ROWS * N);
        be->ops->scale(be, out[ref][4], (size_t)ROWS * N, 0.37f);
        be->ops->softcap(be, out[ref][5], (size_t)ROWS * N, 3.0f);
        be->ops->hadamard(be, out[ref][6], ROWS, N, 128);
        be->ops->gate_mul(be, out[ref][7], g, ROWS, NH, HD, N, FT_ACT_SIGMOID);
        be->ops->gate_mul(be, out[ref][8], g, ROWS, NH, HD, NH, FT_ACT_SILU);
        for (int ci = 0; ci < 2; ci++) {
            ft_tensor cache = fixture_kv_cache(cache_types[ci], N, ROWS);
            be->ops->set_rows(be, &cache, NULL, 0, x, ROWS);
            caches[ref][ci] = cache.data;
            if (ref) CHECK(memcmp(caches[0][ci], caches[1][ci], cache.mat_bytes) == 0, "set_rows %s",
                           ft_type_name(cache_types[ci]));
        }
        be->ops->free(be);
    }
    static const char *names[] = {"rms_norm", "rope", "get_rows", "add", "scale", "softcap", "hadamard",
                                  "gate_mul per element", "gate_mul per head"};
    for (int k = 0; k < 9; k++) CHECK(memcmp(out[0][k], out[1][k], sizeof(float) * ROWS * N) == 0, "%s", names[k]);
    for (int ref = 0; ref < 2; ref++) {
        for (int k = 0; k < 12; k++) free(out[ref][k]);
        for (int ci = 0; ci < 2; ci++) free(caches[ref][ci]);
    }
    free(x), free(g), free(emb.data);
}

// Attention over a cache against a double softmax over the dequantized cache (f16 and q8_0),
// with GQA, a sliding window, and attention sinks (gpt-oss: one logit per head in each softmax's
// denominator; here one head's sink far above its scores, which then scales the whole output
// down, one far below, and two in between).
TEST(ops_attention) {
    enum { HD = 64, NH = 4, NKV = 2, CTX = 20, NT = 3 };
    ft_rng r = ft_rng_init(9);
    enum ft_type types[2] = {FT_TYPE_F16, FT_TYPE_Q8_0};
    float sink_v[NH] = {6.0f, -30.0f, 0.5f, 1.5f};
    ft_tensor sinks = {.name = "sinks", .type = FT_TYPE_F32, .ne = {NH, 1, 1}, .row_bytes = NH * 4,
                       .mat_bytes = NH * 4, .data = sink_v};
    for (int ti = 0; ti < 2; ti++)
        for (int window = 0; window <= 5; window += 5)
            for (int with_sinks = 0; with_sinks < 2; with_sinks++) {
            ft_backend *be = backend(ti == 1, 8, 512);
            ft_tensor kc = {.name = "k", .type = types[ti], .ne = {NKV * HD, CTX, 1}}, vc = kc;
            kc.row_bytes = vc.row_bytes = ft_row_bytes(types[ti], NKV * HD);
            kc.data = ft_calloc(CTX, kc.row_bytes);
            vc.data = ft_calloc(CTX, vc.row_bytes);
            float kv[CTX * NKV * HD], vv[CTX * NKV * HD], q[NT * NH * HD], out[NT * NH * HD], kd[NKV * HD], vd[NKV * HD];
            fixture_fill_normal(&r, kv, FT_ARRAY_LEN(kv), 1.0f);
            fixture_fill_normal(&r, vv, FT_ARRAY_LEN(vv), 1.0f);
            fixture_fill_normal(&r, q, FT_ARRAY_LEN(q), 1.0f);
            be->ops->set_rows(be, &kc, NULL, 0, kv, CTX);
            be->ops->set_rows(be, &vc, NULL, 0, vv, CTX);
            fixture_fill_nan(out, FT_ARRAY_LEN(out));
            int pos0 = CTX - NT;
            ft_attn_params ap = {.q = q, .out = out, .k_cache = &kc, .v_cache = &vc, .n_tok = NT, .pos0 = pos0,
                                 .n_head = NH, .n_head_kv = NKV, .head_dim = HD, .window = window, .scale = 0.125f,
                                 .sinks = with_sinks ? &sinks : NULL};
            be->ops->attention(be, &ap);
            const ft_quant_ops *qo = ft_quant_ops_find(types[ti]);
            for (int t = 0; t < NT; t++)
                for (int h = 0; h < NH; h++) {
                    int hk = h / (NH / NKV), qp = pos0 + t, k0 = window ? FT_MAX(0, qp - window + 1) : 0;
                    double s[CTX], mx = -1e30, sum = 0, o[HD] = {0};
                    for (int k = k0; k <= qp; k++) {
                        qo->to_float((uint8_t *)kc.data + k * kc.row_bytes, kd, NKV * HD);
                        double d = 0;
                        for (int i = 0; i < HD; i++) d += (double)q[(t * NH + h) * HD + i] * kd[hk * HD + i];
                        s[k] = d * 0.125;
                        mx = fmax(mx, s[k]);
                    }
                    if (with_sinks) mx = fmax(mx, sink_v[h]);
                    for (int k = k0; k <= qp; k++) sum += s[k] = exp(s[k] - mx);
                    if (with_sinks) sum += exp(sink_v[h] - mx);
                    for (int k = k0; k <= qp; k++) {
                        qo->to_float((uint8_t *)vc.data + k * vc.row_bytes, vd, NKV * HD);
                        for (int i = 0; i < HD; i++) o[i] += s[k] / sum * vd[hk * HD + i];
                    }
                    for (int i = 0; i < HD; i++)
                        CHECK(fabs(out[(t * NH + h) * HD + i] - o[i]) < 2e-2,
                              "%s window %d sinks %d: t%d h%d [%d] %g vs %g", ft_type_name(types[ti]), window,
                              with_sinks, t, h, i, out[(t * NH + h) * HD + i], o[i]);
                }
            free(kc.data);
            free(vc.data);
            be->ops->free(be);
        }
}

// moe_ffn against a direct float computation: softmax router, top-2, renormalised weights,
// SiLU-gated experts from the dequantized banks (activations quantized as the op does).
TEST(ops_moe_ffn_matches_direct) {
    enum { E = 256, F = 256, NX = 8, K = 2, NT = 6 };
    ft_rng r = ft_rng_init(21);
    ft_tensor router = fixture_weight(FT_TYPE_F32, E, NX, 1, &r);
    ft_tensor gate = fixture_weight(FT_TYPE_Q4_K, E, F, NX, &r), up = fixture_weight(FT_TYPE_Q8_0, E, F, NX, &r),
              down = fixture_weight(FT_TYPE_Q6_K, F, E, NX, &r);
    float x[NT * E], yf[NT * E], yr[NT * E];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 1.0f);
    for (int reference = 0; reference < 2; reference++) {
        ft_backend *be = backend(reference, 8, 512);
        ft_moe_params mp = {.router = &router, .gate_exps = &gate, .up_exps = &up, .down_exps = &down, .n_expert = NX,
                            .n_expert_used = K, .gating = FT_GATING_SOFTMAX, .norm_w = true};
        float *y = reference ? yr : yf;
        fixture_fill_nan(y, NT * E);
        be->ops->moe_ffn(be, &mp, x, y, NT);
        be->ops->free(be);
    }
    float wrow[E], h[F];
    for (int t = 0; t < NT; t++) {
        const float *xt = x + t * E;
        double lg[NX], mx = -1e30, sum = 0;
        for (int e = 0; e < NX; e++) {
            lg[e] = 0;
            for (int i = 0; i < E; i++) lg[e] += (double)((float *)router.data)[e * E + i] * xt[i];
            mx = fmax(mx, lg[e]);
        }
        for (int e = 0; e < NX; e++) sum += lg[e] = exp(lg[e] - mx);
        int sel[K] = {-1, -1};
        for (int j = 0; j < K; j++)
            for (int e = 0; e < NX; e++)
                if (e != sel[0] && (sel[j] < 0 || lg[e] > lg[sel[j]])) sel[j] = e;
        double wsum = lg[sel[0]] + lg[sel[1]];
        double out[E] = {0};
        for (int j = 0; j < K; j++) {
            int e = sel[j];
            for (int o = 0; o < F; o++) {
                double g = 0, u = 0;
                ft_quant_ops_find(gate.type)->to_float((uint8_t *)gate.data + e * gate.mat_bytes + o * gate.row_bytes, wrow, E);
                for (int i = 0; i < E; i++) g += (double)wrow[i] * xt[i];
                ft_quant_ops_find(up.type)->to_float((uint8_t *)up.data + e * up.mat_bytes + o * up.row_bytes, wrow, E);
                for (int i = 0; i < E; i++) u += (double)wrow[i] * xt[i];
                h[o] = (float)(g / (1 + exp(-g)) * u);
            }
            for (int o = 0; o < E; o++) {
                double d = 0;
                ft_quant_ops_find(down.type)->to_float((uint8_t *)down.data + e * down.mat_bytes + o * down.row_bytes, wrow, F);
                for (int i = 0; i < F; i++) d += (double)wrow[i] * h[i];
                out[o] += lg[e] / wsum * d;
            }
        }
        double err = 0, norm = 0;
        for (int o = 0; o < E; o++) {
            err += (yr[t * E + o] - out[o]) * (yr[t * E + o] - out[o]);
            norm += out[o] * out[o];
            CHECK(fabs(yf[t * E + o] - yr[t * E + o]) <= 1e-4 * fmax(1.0, fabs(yr[t * E + o])), "fast vs ref t%d [%d]", t, o);
        }
        // activations are quantized (q8_K, q8_0) in the op and not in this direct version
        CHECK(sqrt(err / norm) < 2e-2, "token %d: relative error %g against the direct computation", t, sqrt(err / norm));
    }
    free(router.data);
    free(gate.data);
    free(up.data);
    free(down.data);
}

// A float tensor of n0 x n1 normal values times scale (owned by the caller: free t->data).
static ft_tensor make_f32(int64_t n0, int64_t n1, float scale, ft_rng *r) {
    ft_tensor t = {.name = "bias", .type = FT_TYPE_F32, .ne = {n0, n1, 1}, .placement = FT_PLACEMENT_CPU};
    t.row_bytes = (size_t)n0 * sizeof(float);
    t.mat_bytes = t.row_bytes * (size_t)n1;
    t.data = ft_malloc(t.mat_bytes);
    fixture_fill_normal(r, t.data, (size_t)(n0 * n1), scale);
    return t;
}

// moe_ffn as gpt-oss runs it against a direct double computation: the router's bias on the
// logits, the top 4 of the logits weighted by the softmax of those 4 (SOFTMAX_WEIGHT) and scaled,
// each expert's gate, up and down biases, and the clamped SwiGLU (biases large enough that both
// clamps act, which the test counts). Fast and reference paths, at 1, 3 and 40 tokens (decode's
// chunks, the static shares, the prefill GEMM rows), mxfp4 gate/up (gpt-oss's experts) and
// q8_0 down; fast against reference within 1e-4, both against the direct within 2e-2 relative.
TEST(ops_moe_ffn_gpt_oss_matches_direct) {
    enum { E = 256, F = 256, NX = 8, K = 4, NT = 40 };
    ft_rng r = ft_rng_init(77);
    ft_tensor router = fixture_weight(FT_TYPE_F32, E, NX, 1, &r), rbias = make_f32(NX, 1, 1.0f, &r);
    ft_tensor gate = fixture_weight(FT_TYPE_MXFP4, E, F, NX, &r), up = fixture_weight(FT_TYPE_MXFP4, E, F, NX, &r),
              down = fixture_weight(FT_TYPE_Q8_0, F, E, NX, &r);
    ft_tensor gb = make_f32(F, NX, 4.0f, &r), ub = make_f32(F, NX, 4.0f, &r), db = make_f32(E, NX, 0.5f, &r);
    static float x[NT * E], yf[NT * E], yr[NT * E];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 1.0f);
    const float w_scale = 1.5f;
    const int toks[] = {1, 3, NT};
    int clamped_gate = 0, clamped_up = 0;
    for (size_t ni = 0; ni < FT_ARRAY_LEN(toks); ni++) {
        int n_tok = toks[ni];
        for (int reference = 0; reference < 2; reference++) {
            ft_backend *be = ft_backend_cpu_init(reference ? 1 : 3, reference);
            ft_backend_limits lim = {.max_tok = NT, .max_width = E, .max_ctx = 16, .max_head_dim = 64,
                                     .n_expert = NX, .n_expert_used = K};
            be->ops->reserve(be, &lim);
            ft_moe_params mp = {.router = &router, .router_bias = &rbias, .gate_exps = &gate, .up_exps = &up,
                                .down_exps = &down, .gate_bias = &gb, .up_bias = &ub, .down_bias = &db,
                                .act = FT_GLU_SWIGLU_OAI, .n_expert = NX, .n_expert_used = K,
                                .gating = FT_GATING_SOFTMAX_WEIGHT, .w_scale = w_scale};
            float *y = reference ? yr : yf;
            fixture_fill_nan(y, FT_ARRAY_LEN(yf));
            be->ops->moe_ffn(be, &mp, x, y, n_tok);
            be->ops->free(be);
        }
        float wrow[E], h[F];
        double worst = 0;
        for (int t = 0; t < n_tok; t++) {
            const float *xt = x + t * E;
            double lg[NX];
            for (int e = 0; e < NX; e++) {
                lg[e] = ((float *)rbias.data)[e];
                for (int i = 0; i < E; i++) lg[e] += (double)((float *)router.data)[e * E + i] * xt[i];
            }
            int sel[K];
            bool taken[NX] = {false};
            for (int j = 0; j < K; j++) {
                sel[j] = -1;
                for (int e = 0; e < NX; e++)
                    if (!taken[e] && (sel[j] < 0 || lg[e] > lg[sel[j]])) sel[j] = e;
                taken[sel[j]] = true;
            }
            double wsum = 0, w[K];
            for (int j = 0; j < K; j++) wsum += w[j] = exp(lg[sel[j]] - lg[sel[0]]);
            double out[E] = {0};
            for (int j = 0; j < K; j++) {
                int e = sel[j];
                for (int o = 0; o < F; o++) {
                    double g = ((float *)gb.data)[e * F + o], u = ((float *)ub.data)[e * F + o];
                    ft_quant_ops_find(gate.type)->to_float((uint8_t *)gate.data + e * gate.mat_bytes + o * gate.row_bytes, wrow, E);
                    for (int i = 0; i < E; i++) g += (double)wrow[i] * xt[i];
                    ft_quant_ops_find(up.type)->to_float((uint8_t *)up.data + e * up.mat_bytes + o * up.row_bytes, wrow, E);
                    for (int i = 0; i < E; i++) u += (double)wrow[i] * xt[i];
                    clamped_gate += g > 7.0;
                    clamped_up += fabs(u) > 7.0;
                    g = fmin(g, 7.0);
                    u = fmin(fmax(u, -7.0), 7.0);
                    h[o] = (float)(g / (1 + exp(-1.702 * g)) * (u + 1));
                }
                for (int o = 0; o < E; o++) {
                    double d = ((float *)db.data)[e * E + o];
                    ft_quant_ops_find(down.type)->to_float((uint8_t *)down.data + e * down.mat_bytes + o * down.row_bytes, wrow, F);
                    for (int i = 0; i < F; i++) d += (double)wrow[i] * h[i];
                    out[o] += w_scale * w[j] / wsum * d;
                }
            }
            double err = 0, norm = 0;
            for (int o = 0; o < E; o++) {
                REQUIRE(isfinite(yr[t * E + o]) && isfinite(yf[t * E + o]), "%d tokens: t%d [%d] not written", n_tok, t, o);
                err += (yr[t * E + o] - out[o]) * (yr[t * E + o] - out[o]);
                norm += out[o] * out[o];
                CHECK(fabs(yf[t * E + o] - yr[t * E + o]) <= 1e-4 * fmax(1.0, fabs(yr[t * E + o])),
                      "%d tokens: fast vs ref t%d [%d]: %g %g", n_tok, t, o, yf[t * E + o], yr[t * E + o]);
            }
            worst = fmax(worst, sqrt(err / norm));
        }
        // activations are quantized (q8_0) in the op and not in this direct version
        CHECK(worst < 2e-2, "%d tokens: relative error %g against the direct computation", n_tok, worst);
        printf("  moe gpt-oss, %d tokens: worst relative error against the direct %.2e\n", n_tok, worst);
    }
    CHECK(clamped_gate > 100 && clamped_up > 100, "the clamps barely act: gate %d, up %d", clamped_gate, clamped_up);
    ft_tensor *ts[] = {&router, &rbias, &gate, &up, &down, &gb, &ub, &db};
    for (size_t i = 0; i < FT_ARRAY_LEN(ts); i++) free(ts[i]->data);
}

// moe_ffn at decode (few tokens, no GEMM rows), where gate/up and down run as one pool job and
// a thread takes down's rows of an expert once another thread has flagged its hidden rows
// ready: the same bits at every thread count, 1 to 8 on however many cores (more threads than
// cores make the waits long), over many calls with new inputs, so a thread reading hidden rows
// before they are written would show.
TEST(ops_moe_ffn_decode_same_bits_at_any_thread_count) {
    enum { E = 512, F = 768, NX = 16, K = 4, MAX_T = 3, CALLS = 12 };
    ft_rng r = ft_rng_init(33);
    ft_tensor router = fixture_weight(FT_TYPE_F32, E, NX, 1, &r);
    ft_tensor gate = fixture_weight(FT_TYPE_Q4_K, E, F, NX, &r), up = fixture_weight(FT_TYPE_Q4_K, E, F, NX, &r),
              down = fixture_weight(FT_TYPE_Q4_K, F, E, NX, &r);
    static float x[CALLS][MAX_T * E], want[CALLS][MAX_T * E], y[MAX_T * E];
    for (int c = 0; c < CALLS; c++) fixture_fill_normal(&r, x[c], MAX_T * E, 1.0f);
    const int threads[] = {1, 2, 3, 5, 8};
    for (size_t ti = 0; ti < FT_ARRAY_LEN(threads); ti++) {
        ft_backend *be = ft_backend_cpu_init(threads[ti], false);
        ft_backend_limits lim = {.max_tok = MAX_T, .max_width = F, .max_ctx = 16, .max_head_dim = 64,
                                 .n_expert = NX, .n_expert_used = K};
        be->ops->reserve(be, &lim);
        ft_moe_params mp = {.router = &router, .gate_exps = &gate, .up_exps = &up, .down_exps = &down, .n_expert = NX,
                            .n_expert_used = K, .gating = FT_GATING_SOFTMAX, .norm_w = true};
        int bad = 0;
        for (int c = 0; c < CALLS; c++) {
            int n_tok = 1 + c % MAX_T;
            float *out = threads[ti] == 1 ? want[c] : y;
            fixture_fill_nan(out, MAX_T * E);
            be->ops->moe_ffn(be, &mp, x[c], out, n_tok);
            if (threads[ti] > 1) bad += memcmp(out, want[c], (size_t)n_tok * E * sizeof(float)) != 0;
            else
                for (int i = 0; i < n_tok * E; i++) REQUIRE(isfinite(out[i]), "call %d [%d] not written", c, i);
        }
        CHECK(bad == 0, "%d threads: %d of %d calls differ from 1 thread's bits", threads[ti], bad, CALLS);
        be->ops->free(be);
    }
    free(router.data);
    free(gate.data);
    free(up.data);
    free(down.data);
}

// moe_ffn with the routing given (ft_moe_params.sel, as --moe-backend cpu gives the GPU's) equals
// the op routing for itself, bit for bit, with the router then never read (NaN weights here):
// one token, a few (decode: down in chunks, the weighted sums by the chunks' last threads), and
// a prefill batch, at 1 and 4 threads.
TEST(ops_moe_ffn_given_routing_equals_own) {
    enum { E = 512, F = 256, NX = 16, K = 4, NT = 40 };
    ft_rng r = ft_rng_init(44);
    ft_tensor router = fixture_weight(FT_TYPE_F32, E, NX, 1, &r), nan_router = router;
    nan_router.data = ft_malloc(router.mat_bytes);
    fixture_fill_nan(nan_router.data, (size_t)E * NX);
    ft_tensor gate = fixture_weight(FT_TYPE_Q4_K, E, F, NX, &r), up = fixture_weight(FT_TYPE_Q4_K, E, F, NX, &r),
              down = fixture_weight(FT_TYPE_Q6_K, F, E, NX, &r);
    static float x[NT * E], want[NT * E], got[NT * E];
    static int32_t sel[NT * K];
    static float sel_w[NT * K];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 1.0f);
    const int threads[] = {1, 4}, toks[] = {1, 3, NT};
    for (size_t ti = 0; ti < FT_ARRAY_LEN(threads); ti++)
        for (size_t ni = 0; ni < FT_ARRAY_LEN(toks); ni++) {
            int n_tok = toks[ni];
            ft_backend *be = ft_backend_cpu_init(threads[ti], false);
            ft_backend_limits lim = {.max_tok = NT, .max_width = E, .max_ctx = 16, .max_head_dim = 64,
                                     .n_expert = NX, .n_expert_used = K};
            be->ops->reserve(be, &lim);
            ft_moe_params mp = {.router = &router, .gate_exps = &gate, .up_exps = &up, .down_exps = &down,
                                .n_expert = NX, .n_expert_used = K, .gating = FT_GATING_SOFTMAX, .norm_w = true};
            fixture_fill_nan(want, FT_ARRAY_LEN(want));
            be->ops->moe_ffn(be, &mp, x, want, n_tok);
            memcpy(sel, cpu_of(be)->sel, (size_t)n_tok * K * sizeof(int32_t));
            memcpy(sel_w, cpu_of(be)->sel_w, (size_t)n_tok * K * sizeof(float));
            mp.router = &nan_router;
            mp.sel = sel;
            mp.sel_w = sel_w;
            fixture_fill_nan(got, FT_ARRAY_LEN(got));
            be->ops->moe_ffn(be, &mp, x, got, n_tok);
            for (int i = 0; i < n_tok * E; i++) REQUIRE(isfinite(want[i]), "%d tokens: [%d] not written", n_tok, i);
            CHECK(!memcmp(want, got, (size_t)n_tok * E * sizeof(float)), "%d threads, %d tokens: given routing differs",
                  threads[ti], n_tok);
            be->ops->free(be);
        }
    free(router.data);
    free(nan_router.data);
    free(gate.data);
    free(up.data);
    free(down.data);
}

// route_counts: the selections moe_ffn's router made, per block and expert, against a direct
// double routing (softmax, top-3 by probability; sigmoid with a selection bias), counted over
// calls to two blocks of three (the middle one stays 0) at several token counts and on both
// paths; a routing handed in (ft_moe_params.sel) adds nothing, and a backend reserved without
// n_layer has no counters.
TEST(ops_moe_route_counts_match_direct_routing) {
    enum { E = 256, F = 64, NX = 12, K = 3, NT = 20, NL = 3 };
    ft_rng r = ft_rng_init(57);
    ft_tensor router = fixture_weight(FT_TYPE_F32, E, NX, 1, &r);
    ft_tensor gate = fixture_weight(FT_TYPE_Q8_0, E, F, NX, &r), up = fixture_weight(FT_TYPE_Q8_0, E, F, NX, &r),
              down = fixture_weight(FT_TYPE_Q8_0, F, E, NX, &r);
    ft_tensor bias = make_f32(NX, 1, 0.3f, &r);
    static float x[NT * E], y[NT * E];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 1.0f);
    const int toks[] = {1, 4, NT, 7};
    for (int reference = 0; reference < 2; reference++) {
        ft_backend *be = ft_backend_cpu_init(reference ? 1 : 3, reference);
        ft_backend_limits lim = {.max_tok = NT, .max_width = E, .max_ctx = 16, .max_head_dim = 64,
                                 .n_expert = NX, .n_expert_used = K, .n_layer = NL};
        be->ops->reserve(be, &lim);
        uint64_t want[NL * NX] = {0}, got[NL * NX];
        for (size_t c = 0; c < FT_ARRAY_LEN(toks); c++) {
            int layer = c % 2 ? 2 : 0, n_tok = toks[c];
            bool sigmoid = layer == 2;
            const float *xc = x + (c % 2) * 3 * E; // the calls read different tokens
            ft_moe_params mp = {.layer = layer, .router = &router, .sel_bias = sigmoid ? &bias : NULL,
                                .gate_exps = &gate, .up_exps = &up, .down_exps = &down, .n_expert = NX,
                                .n_expert_used = K, .gating = sigmoid ? FT_GATING_SIGMOID : FT_GATING_SOFTMAX,
                                .norm_w = true};
            be->ops->moe_ffn(be, &mp, xc, y, n_tok);
            for (int t = 0; t < n_tok; t++) {
                double score[NX], mx = -1e30, sum = 0;
                for (int e = 0; e < NX; e++) {
                    score[e] = 0;
                    for (int i = 0; i < E; i++) score[e] += (double)((float *)router.data)[e * E + i] * xc[t * E + i];
                    mx = fmax(mx, score[e]);
                }
                if (sigmoid)
                    for (int e = 0; e < NX; e++) score[e] = 1 / (1 + exp(-score[e])) + ((float *)bias.data)[e];
                else {
                    for (int e = 0; e < NX; e++) sum += score[e] = exp(score[e] - mx);
                    for (int e = 0; e < NX; e++) score[e] /= sum;
                }
                bool taken[NX] = {0};
                for (int j = 0; j < K; j++) {
                    int best = -1;
                    for (int e = 0; e < NX; e++)
                        if (!taken[e] && (best < 0 || score[e] > score[best])) best = e;
                    taken[best] = true;
                    want[layer * NX + best]++;
                }
            }
            // the same routing handed in: computed elsewhere, so not counted here
            static int32_t sel[NT * K];
            static float sel_w[NT * K];
            memcpy(sel, cpu_of(be)->sel, (size_t)n_tok * K * sizeof(int32_t));
            memcpy(sel_w, cpu_of(be)->sel_w, (size_t)n_tok * K * sizeof(float));
            mp.sel = sel;
            mp.sel_w = sel_w;
            be->ops->moe_ffn(be, &mp, xc, y, n_tok);
        }
        REQUIRE(be->ops->route_counts, "the CPU backend counts its routing");
        memset(got, 0xff, sizeof(got));
        be->ops->route_counts(be, got);
        uint64_t total = 0;
        for (int i = 0; i < NL * NX; i++) {
            CHECK(got[i] == want[i], "reference %d: block %d expert %d: %llu counted, %llu selected", reference,
                  i / NX, i % NX, (unsigned long long)got[i], (unsigned long long)want[i]);
            total += got[i];
        }
        CHECK(total == (uint64_t)(1 + 4 + NT + 7) * K, "%llu selections in all", (unsigned long long)total);
        be->ops->free(be);
    }
    ft_backend *be = backend(false, NT, E); // limits without n_layer: no counters, out left alone
    uint64_t untouched[NX];
    memset(untouched, 0x5a, sizeof(untouched));
    be->ops->route_counts(be, untouched);
    for (int e = 0; e < NX; e++) CHECK(untouched[e] == 0x5a5a5a5a5a5a5a5aull, "out written without counters");
    be->ops->free(be);
    free(router.data);
    free(gate.data);
    free(up.data);
    free(down.data);
    free(bias.data);
}

// moe_ffn on gate and up as views into one fused tensor (each expert's gate rows, then its up
// rows: ffn_gate_up_exps, the matrices 2 x mat_bytes apart) equals it on packed copies of the
// same matrices, bit for bit: decode (one and three tokens) and a prefill batch (GEMM rows),
// fast and reference, for expert types of the GEMM, the tile kernels and bf16.
TEST(ops_moe_ffn_fused_gate_up_view_equals_packed) {
    enum { E = 256, F = 256, NX = 8, K = 2, NT = 40 };
    static const enum ft_type types[] = {FT_TYPE_Q4_K, FT_TYPE_Q6_K, FT_TYPE_BF16, FT_TYPE_MXFP4};
    ft_rng r = ft_rng_init(55);
    static float x[NT * E], want[NT * E], got[NT * E];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 1.0f);
    ft_tensor router = fixture_weight(FT_TYPE_F32, E, NX, 1, &r);
    for (size_t ti = 0; ti < FT_ARRAY_LEN(types); ti++) {
        ft_tensor gate = fixture_weight(types[ti], E, F, NX, &r), up = fixture_weight(types[ti], E, F, NX, &r),
                  down = fixture_weight(FT_TYPE_Q6_K, F, E, NX, &r);
        size_t mb = gate.mat_bytes;
        uint8_t *fused = ft_malloc(2 * mb * NX);
        for (int e = 0; e < NX; e++) {
            memcpy(fused + 2 * mb * e, (uint8_t *)gate.data + mb * e, mb);
            memcpy(fused + 2 * mb * e + mb, (uint8_t *)up.data + mb * e, mb);
        }
        ft_tensor gv = gate, uv = up;
        gv.data = fused;
        uv.data = fused + mb;
        gv.mat_stride = uv.mat_stride = 2 * mb;
        const int toks[] = {1, 3, NT};
        for (int reference = 0; reference < 2; reference++)
            for (size_t ni = 0; ni < FT_ARRAY_LEN(toks); ni++) {
                int n_tok = toks[ni];
                ft_backend *be = ft_backend_cpu_init(reference ? 1 : 3, reference);
                ft_backend_limits lim = {.max_tok = NT, .max_width = E, .max_ctx = 16, .max_head_dim = 64,
                                         .n_expert = NX, .n_expert_used = K};
                be->ops->reserve(be, &lim);
                ft_moe_params mp = {.router = &router, .gate_exps = &gate, .up_exps = &up, .down_exps = &down,
                                    .n_expert = NX, .n_expert_used = K, .gating = FT_GATING_SOFTMAX, .norm_w = true};
                fixture_fill_nan(want, FT_ARRAY_LEN(want));
                be->ops->moe_ffn(be, &mp, x, want, n_tok);
                mp.gate_exps = &gv;
                mp.up_exps = &uv;
                fixture_fill_nan(got, FT_ARRAY_LEN(got));
                be->ops->moe_ffn(be, &mp, x, got, n_tok);
                for (int i = 0; i < n_tok * E; i++) REQUIRE(isfinite(want[i]), "%d tokens: [%d] not written", n_tok, i);
                CHECK(!memcmp(want, got, (size_t)n_tok * E * sizeof(float)), "%s, %s, %d tokens: the fused view differs",
                      ft_type_name(types[ti]), reference ? "reference" : "fast", n_tok);
                be->ops->free(be);
            }
        free(fused);
        free(gate.data);
        free(up.data);
        free(down.data);
    }
    free(router.data);
}

// Activations quantized to q8_0 and q8_1 (the q8_0 and q4_0-family matmuls' input; AVX2 where
// the CPU has it) equal the scalar form of llama.cpp's arithmetic byte for byte: random rows at
// several scales, rows whose codes fall on .5 ties (round half to even), two elements of equal
// magnitude and opposite sign, zero and -0 rows, denormals.
TEST(ops_quantize_q8_0_q8_1_match_scalar) {
    enum { N = 4 * 32, ROWS = 36 };
    ft_rng r = ft_rng_init(9);
    static float x[N];
    static block_q8_0 want0[N / 32], got0[N / 32];
    static block_q8_1 want1[N / 32], got1[N / 32];
    for (int row = 0; row < ROWS; row++) {
        float scale = powf(10.0f, (float)(row % 9) - 4.0f);
        fixture_fill_normal(&r, x, N, scale);
        switch (row % 6) {
        case 1: // amax 127: codes are the values, .5 ties among them
            x[3] = -127.0f;
            for (int i = 4; i < 32; i++) x[i] = (float)((i % 41) - 20) + 0.5f;
            break;
        case 2: x[10] = 3.0f * scale * 8, x[20] = -3.0f * scale * 8; break;
        case 3: for (int i = 0; i < 32; i++) x[i] = 0.0f;
            x[32 + 7] = -0.0f;
            break;
        case 4: for (int i = 0; i < 32; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * 1e-40f * (float)(i + 1); break;
        case 5: for (int i = 0; i < 32; i++) x[i] = -0.0f; break;
        default: break;
        }
        memset(want0, 0xab, sizeof(want0));
        memset(got0, 0xcd, sizeof(got0));
        memset(want1, 0xab, sizeof(want1));
        memset(got1, 0xcd, sizeof(got1));
        cpu_quantize_q8_scalar(x, want0, N, false);
        cpu_quantize_row(FT_TYPE_Q8_0, x, got0, N);
        cpu_quantize_q8_scalar(x, want1, N, true);
        cpu_quantize_row(FT_TYPE_Q8_1, x, got1, N);
        CHECK(!memcmp(want0, got0, sizeof(want0)), "row %d: q8_0 differs", row);
        CHECK(!memcmp(want1, got1, sizeof(want1)), "row %d: q8_1 differs", row);
    }
}

// Activations quantized to q8_K (every K-quant matvec's input; AVX2 where the CPU has it) equal
// the reference byte for byte: random rows at several scales, rows whose codes fall on .5 ties,
// two elements of equal magnitude and opposite sign (the first sets the sign), zero and -0 rows,
// denormals, and rows holding an infinity or a NaN.
TEST(ops_quantize_q8_K_matches_reference) {
    enum { N = 2 * QK_K, ROWS = 40 };
    ft_rng r = ft_rng_init(5);
    static float x[N];
    static block_q8_K want[N / QK_K], got[N / QK_K];
    for (int row = 0; row < ROWS; row++) {
        float scale = powf(10.0f, (float)(row % 9) - 4.0f);
        fixture_fill_normal(&r, x, N, scale);
        switch (row % 8) {
        case 1: // iscale = 1: codes are the values, .5 ties among them
            x[3] = -127.0f;
            for (int i = 4; i < QK_K; i++) x[i] = (float)((i % 41) - 20) + 0.5f;
            break;
        case 2: x[10] = 3.0f * scale * 8, x[20] = -3.0f * scale * 8; break;
        case 3: memset(x, 0, QK_K * sizeof(float)); x[QK_K + 7] = -0.0f; break;
        case 4: for (int i = 0; i < QK_K; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * 1e-40f * (float)(i + 1); break;
        case 5: x[50] = INFINITY; break;
        case 6: x[70] = NAN; break;
        case 7: for (int i = 0; i < QK_K; i++) x[i] = -0.0f; break;
        default: break;
        }
        memset(want, 0xab, sizeof(want));
        memset(got, 0xcd, sizeof(got));
        ft_quantize_row_q8_K_ref(x, want, N);
        cpu_quantize_row(FT_TYPE_Q8_K, x, got, N);
        for (int b = 0; b < N / QK_K; b++) {
            CHECK(!memcmp(want[b].qs, got[b].qs, sizeof(want[b].qs)), "row %d block %d: codes differ", row, b);
            CHECK(!memcmp(want[b].bsums, got[b].bsums, sizeof(want[b].bsums)), "row %d block %d: sums differ", row, b);
            CHECK(!memcmp(&want[b].d, &got[b].d, sizeof(float)), "row %d block %d: d %g vs %g", row, b, want[b].d, got[b].d);
        }
    }
}

// f16 rows (KV-cache writes) through cpu_quantize_row equal the reference conversion bit for
// bit: a sweep of float bit patterns in steps that hit every exponent and many halfway
// mantissas, the f16 subnormal and overflow boundaries, signed zeros, infinities and NaNs with
// payloads (the reference writes a canonical NaN), rows whose length is not a multiple of 8.
TEST(ops_quantize_f16_matches_reference) {
    enum { N = 4099 };
    static float x[N];
    static ft_half want[N], got[N];
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7fffffffu,
                                0xffc00001u, 0x7f800001u, 0x477fefffu, 0x477ff000u, 0x477fe000u, 0x33000000u,
                                0x33000001u, 0x32ffffffu, 0x387fe000u, 0x387ff000u, 0x38800000u, 0x3f801000u,
                                0x3f803000u, 0x3f800fffu, 0xc7800000u, 0x00000001u};
    for (int row = 0; row < 64; row++) { // 64 rows of N patterns 16417 apart span the 2^32 patterns
        for (int i = 0; i < N; i++) {
            uint32_t bits = (uint32_t)(((uint64_t)row * N + (uint64_t)i) * 16417u);
            if (row == 0 && i < (int)FT_ARRAY_LEN(special)) bits = special[i];
            memcpy(&x[i], &bits, 4);
        }
        for (int n = N; n >= N - 5; n -= 5) {
            memset(want, 0xab, sizeof(want));
            memset(got, 0xcd, sizeof(got));
            ft_quantize_row_f16_ref(x, want, n);
            cpu_quantize_row(FT_TYPE_F16, x, got, n);
            int bad = -1;
            for (int i = 0; i < n && bad < 0; i++)
                if (want[i] != got[i]) bad = i;
            uint32_t b = 0;
            if (bad >= 0) memcpy(&b, &x[bad], 4);
            CHECK(bad < 0, "n %d: element %d (0x%08x): 0x%04x vs reference 0x%04x", n, bad, b, bad >= 0 ? got[bad] : 0,
                  bad >= 0 ? want[bad] : 0);
        }
    }
}
