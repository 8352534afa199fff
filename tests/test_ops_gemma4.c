// test_ops_gemma4.c: the CPU ops and op parameters gemma4 added, against independent double
// computations, and their fast paths against the scalar reference path: RMSNorm without a
// weight, scale and soft-capping, RoPE's frequency factors, the GELU-gated dense FFN, and
// moe_ffn with GELU experts, per-expert down scales and a router input of its own. Outputs are
// filled with NaN first so an element an op forgets to write fails.
#include "test.h"
#include "fixtures.h"
#include "../src/backend/cpu/cpu_impl.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>


// An f32 vector of n values (free t->data).
static ft_tensor make_f32(int64_t n, float mean, float scale, ft_rng *r) {
    ft_tensor t = {.name = "f32", .type = FT_TYPE_F32, .ne = {n, 1, 1}, .placement = FT_PLACEMENT_CPU};
    t.row_bytes = t.mat_bytes = (size_t)n * sizeof(float);
    t.data = ft_malloc(t.mat_bytes);
    fixture_fill_normal(r, t.data, (size_t)n, scale);
    for (int64_t i = 0; i < n; i++) ((float *)t.data)[i] += mean;
    return t;
}

static ft_backend *backend(bool reference, int max_tok, int width, int n_expert, int n_used) {
    ft_backend *be = ft_backend_cpu_init(reference ? 1 : 3, reference);
    ft_backend_limits lim = {.max_tok = max_tok, .max_width = width, .max_ctx = 64, .max_head_dim = 64,
                             .n_expert = n_expert, .n_expert_used = n_used};
    be->ops->reserve(be, &lim);
    return be;
}

static double gelu(double g) { return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))); }

// x (n floats) as a matmul with weights of type wtype reads it: quantized to the type's
// vec_dot_type (by the reference quantizer) and back.
static void as_read_by(enum ft_type wtype, const float *x, int n, float *out) {
    enum ft_type vdt = ft_quant_ops_find(wtype)->vec_dot_type;
    const ft_quant_ops *q = ft_quant_ops_find(vdt);
    uint8_t buf[8192];
    FT_ASSERT(ft_row_bytes(vdt, n) <= sizeof(buf));
    if (vdt == FT_TYPE_F32) {
        memcpy(out, x, (size_t)n * sizeof(float));
        return;
    }
    q->from_float_ref(x, buf, n);
    q->to_float(buf, out, n);
}

// RMSNorm without a weight (NULL, or a tensor without data) against double; with one, the same
// times the weight.
TEST(ops_rms_norm_without_weight) {
    enum { N = 96, ROWS = 5 };
    ft_rng r = ft_rng_init(3);
    float x[ROWS * N], y[ROWS * N], y2[ROWS * N];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 3.0f);
    ft_backend *be = backend(false, 8, 512, 1, 1);
    ft_tensor absent = {.name = "absent", .type = FT_TYPE_F32, .ne = {N, 1, 1}};
    fixture_fill_nan(y, FT_ARRAY_LEN(y));
    be->ops->rms_norm(be, x, NULL, y, ROWS, N, 1e-6f);
    fixture_fill_nan(y2, FT_ARRAY_LEN(y2));
    be->ops->rms_norm(be, x, &absent, y2, ROWS, N, 1e-6f);
    for (int k = 0; k < ROWS; k++) {
        double ss = 0;
        for (int i = 0; i < N; i++) ss += (double)x[k * N + i] * x[k * N + i];
        double inv = 1.0 / sqrt(ss / N + 1e-6);
        for (int i = 0; i < N; i++) {
            CHECK(fabs(y[k * N + i] - x[k * N + i] * inv) < 1e-5, "row %d [%d]: %g vs %g", k, i, y[k * N + i],
                  x[k * N + i] * inv);
            CHECK(y2[k * N + i] == y[k * N + i], "an absent weight is no weight: row %d [%d]", k, i);
        }
    }
    // in place, as gemma4 norms V
    be->ops->rms_norm(be, x, NULL, x, ROWS, N, 1e-6f);
    CHECK(!memcmp(x, y, sizeof(x)), "in place differs");
    be->ops->free(be);
}

// scale, and soft-capping as ggml computes it (x times 1/cap, tanh, times cap) against double:
// values far past the cap end just inside it, small ones barely move.
TEST(ops_scale_softcap) {
    enum { N = 1000 };
    ft_rng r = ft_rng_init(8);
    static float x[N], y[N];
    fixture_fill_normal(&r, x, N, 20.0f);
    x[0] = 1e6f, x[1] = -1e6f, x[2] = 0.0f, x[3] = 1e-3f;
    ft_backend *be = backend(false, 8, 512, 1, 1);
    memcpy(y, x, sizeof(x));
    be->ops->scale(be, y, N, 0.37f);
    for (int i = 0; i < N; i++) CHECK(y[i] == x[i] * 0.37f, "scale [%d]", i);
    const float caps[] = {30.0f, 5.0f};
    for (size_t c = 0; c < FT_ARRAY_LEN(caps); c++) {
        memcpy(y, x, sizeof(x));
        be->ops->softcap(be, y, N, caps[c]);
        for (int i = 0; i < N; i++) {
            double want = caps[c] * tanh((double)x[i] / caps[c]);
            CHECK(fabs(y[i] - want) <= 2e-6 * caps[c], "cap %g [%d]: %g for %g, want %g", caps[c], i, y[i], x[i], want);
            CHECK(fabsf(y[i]) <= caps[c], "cap %g [%d]: %g past the cap", caps[c], i, y[i]);
        }
        CHECK(y[0] == caps[c] && y[1] == -caps[c] && y[2] == 0.0f && fabsf(y[3] - 1e-3f) < 1e-9f);
    }
    be->ops->free(be);
}

// RoPE with frequency factors (gemma4's proportional RoPE of its full layers): pair i turns by
// freq_scale * pos * base^(-2i/n_rot) / factor[i] against double; a factor of 1e30 leaves its pair
// as it was. NeoX and adjacent pairs, plain and with a linear context scale.
TEST(ops_rope_freq_factors) {
    enum { HD = 64, NH = 3, NT = 4, ROT = 64, POS0 = 11 };
    ft_rng r = ft_rng_init(17);
    float ffv[ROT / 2];
    for (int i = 0; i < ROT / 2; i++) ffv[i] = i < 8 ? 0.5f + 0.25f * (float)(i % 4) : 1e30f;
    ft_tensor ff = {.name = "rope_freqs", .type = FT_TYPE_F32, .ne = {ROT / 2, 1, 1}, .row_bytes = sizeof(ffv),
                    .mat_bytes = sizeof(ffv), .data = ffv};
    ft_backend *be = backend(false, 8, 512, 1, 1);
    for (int neox = 0; neox < 2; neox++)
        for (int scaled = 0; scaled < 2; scaled++) {
            float q[NT * NH * HD], o[NT * NH * HD];
            fixture_fill_normal(&r, q, FT_ARRAY_LEN(q), 1.0f);
            memcpy(o, q, sizeof(q));
            float fs = scaled ? 0.25f : 1.0f;
            ft_rope_params rp = {.n_rot = ROT, .neox = neox, .freq_base = 1000000.0f, .freq_scale = fs,
                                 .attn_factor = 1.0f, .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096,
                                 .freq_factors = &ff};
            be->ops->rope(be, q, NT, NH, HD, POS0, &rp);
            int unturned = 0;
            for (int t = 0; t < NT; t++)
                for (int h = 0; h < NH; h++) {
                    const float *a = o + (t * NH + h) * HD, *b = q + (t * NH + h) * HD;
                    for (int i = 0; i < ROT / 2; i++) {
                        double th = fs * (POS0 + t) * pow(1000000.0, -2.0 * i / ROT) / ffv[i];
                        int i0 = neox ? i : 2 * i, i1 = neox ? i + ROT / 2 : 2 * i + 1;
                        CHECK(fabs(b[i0] - (a[i0] * cos(th) - a[i1] * sin(th))) < 1e-4, "neox=%d scaled=%d pair %d", neox,
                              scaled, i);
                        CHECK(fabs(b[i1] - (a[i0] * sin(th) + a[i1] * cos(th))) < 1e-4, "neox=%d scaled=%d pair %d", neox,
                              scaled, i);
                        if (ffv[i] > 1e29f) unturned += b[i0] == a[i0] && b[i1] == a[i1];
                    }
                }
            CHECK(unturned == NT * NH * (ROT / 2 - 8), "neox=%d: %d pairs of factor 1e30 kept", neox, unturned);
        }
    // without factors the first pair at position 11 turns by 11 radians: the factors did something
    be->ops->free(be);
}

// GELU as ggml's CPU computes it (gate rounded to f16, its GELU from the f16 table) against GELU's
// tanh form in double, within two f16 roundings; the table's value equal to its float
// computation bit for bit; the ends past +-10.
TEST(ops_geglu_matches_gelu) {
    cpu_gelu_table_init(); // (the CPU backend's init fills it; no backend here)
    ft_rng r = ft_rng_init(4);
    double worst = 0;
    int table_off = 0;
    for (int i = 0; i < 20000; i++) {
        float g = ft_rng_normal(&r) * 4.0f, u = ft_rng_normal(&r);
        float direct = cpu_gelu_f16(ft_fp16_to_fp32(ft_fp32_to_fp16(g))) * u;
        table_off += fabsf(g) < 10.0f && memcmp(&direct, &(float){cpu_glu(FT_GLU_GELU, g, u)}, sizeof(float)) != 0;
        double want = gelu(g) * u, got = cpu_glu(FT_GLU_GELU, g, u);
        double err = fabs(got - want) / fmax(fabs(u) * 1e-2, fabs(want));
        worst = fmax(worst, err);
    }
    CHECK(worst < 3e-3, "worst relative difference %g", worst);
    CHECK(table_off == 0, "%d gates' table values differ from their computation", table_off);
    CHECK(cpu_glu(FT_GLU_GELU, -10.0f, 3.0f) == 0.0f && cpu_glu(FT_GLU_GELU, -50.0f, 3.0f) == 0.0f);
    CHECK(cpu_glu(FT_GLU_GELU, 10.0f, 3.0f) == 30.0f && cpu_glu(FT_GLU_GELU, 12.5f, -2.0f) == -25.0f);
    // not SiLU: at 1, GELU is 0.841, SiLU 0.731
    CHECK(fabsf(cpu_glu(FT_GLU_GELU, 1.0f, 1.0f) - 0.8413f) < 1e-3f, "%g", cpu_glu(FT_GLU_GELU, 1.0f, 1.0f));
}

// The dense FFN with GELU: fast against reference, both against a double computation from the
// dequantized weights and activations quantized as the op's (1e-2 relative).
TEST(ops_ffn_gelu_matches_direct) {
    enum { E = 256, F = 512, NT = 40 };
    ft_rng r = ft_rng_init(23);
    ft_tensor gate = fixture_weight(FT_TYPE_Q8_0, E, F, 1, &r), up = fixture_weight(FT_TYPE_Q4_K, E, F, 1, &r),
              down = fixture_weight(FT_TYPE_Q6_K, F, E, 1, &r);
    static float x[NT * E], yf[NT * E], yr[NT * E];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 1.5f);
    const int toks[] = {1, NT};
    for (size_t ni = 0; ni < FT_ARRAY_LEN(toks); ni++) {
        int n = toks[ni];
        for (int reference = 0; reference < 2; reference++) {
            ft_backend *be = backend(reference, NT, F, 1, 1);
            float *y = reference ? yr : yf;
            fixture_fill_nan(y, FT_ARRAY_LEN(yf));
            be->ops->ffn(be, &gate, &up, &down, x, y, n, FT_GLU_GELU);
            be->ops->free(be);
        }
        float wrow[F], h[F], xg[E], xu[E];
        double worst = 0;
        for (int t = 0; t < n; t++) {
            as_read_by(gate.type, x + t * E, E, xg);
            as_read_by(up.type, x + t * E, E, xu);
            for (int o = 0; o < F; o++) {
                double g = 0, u = 0;
                ft_quant_ops_find(gate.type)->to_float((uint8_t *)gate.data + o * gate.row_bytes, wrow, E);
                for (int i = 0; i < E; i++) g += (double)wrow[i] * xg[i];
                ft_quant_ops_find(up.type)->to_float((uint8_t *)up.data + o * up.row_bytes, wrow, E);
                for (int i = 0; i < E; i++) u += (double)wrow[i] * xu[i];
                h[o] = (float)(gelu(g) * u);
            }
            as_read_by(down.type, h, F, h);
            double err = 0, norm = 0;
            for (int o = 0; o < E; o++) {
                double d = 0;
                ft_quant_ops_find(down.type)->to_float((uint8_t *)down.data + o * down.row_bytes, wrow, F);
                for (int i = 0; i < F; i++) d += (double)wrow[i] * h[i];
                REQUIRE(isfinite(yr[t * E + o]) && isfinite(yf[t * E + o]), "%d tokens: t%d [%d] not written", n, t, o);
                CHECK(fabs(yf[t * E + o] - yr[t * E + o]) <= 1e-4 * fmax(1.0, fabs(yr[t * E + o])), "fast vs ref t%d [%d]",
                      t, o);
                err += (yr[t * E + o] - d) * (yr[t * E + o] - d);
                norm += d * d;
            }
            worst = fmax(worst, sqrt(err / norm));
        }
        CHECK(worst < 1e-2, "%d tokens: relative error %g against the direct computation", n, worst);
        printf("  ffn gelu, %d tokens: worst relative error against the direct %.2e\n", n, worst);
    }
    free(gate.data);
    free(up.data);
    free(down.data);
}

// moe_ffn as gemma4 runs it against a direct double computation: the router on an input of its
// own (router_x, here unrelated to x, so routing from x would pick other experts), softmax over
// the experts, top 4 renormalised, GELU-gated experts, each expert's down output times its own
// scale. Fast and reference paths at 1, 3 and 40 tokens (decode's chunks, the static shares, the
// prefill GEMM rows), gate/up split and fused in one tensor; fast against reference within 1e-4,
// both against the direct (its activations quantized as the op's) within 1e-2 relative (GELU's
// f16 steps, a code here and there rounded the other way).
TEST(ops_moe_ffn_gemma4_matches_direct) {
    enum { E = 256, F = 256, NX = 8, K = 4, NT = 40 };
    ft_rng r = ft_rng_init(91);
    ft_tensor router = fixture_weight(FT_TYPE_Q8_0, E, NX, 1, &r), dscale = make_f32(NX, 1.0f, 0.4f, &r);
    ft_tensor gate = fixture_weight(FT_TYPE_Q4_K, E, F, NX, &r), up = fixture_weight(FT_TYPE_Q4_K, E, F, NX, &r),
              down = fixture_weight(FT_TYPE_Q5_K, F, E, NX, &r);
    // the fused form: each expert's gate rows, then its up rows
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
    static float x[NT * E], rx[NT * E], yf[NT * E], yr[NT * E], yfused[NT * E];
    fixture_fill_normal(&r, x, FT_ARRAY_LEN(x), 1.5f);
    fixture_fill_normal(&r, rx, FT_ARRAY_LEN(rx), 1.0f);
    const int toks[] = {1, 3, NT};
    int routed_apart = 0;
    for (size_t ni = 0; ni < FT_ARRAY_LEN(toks); ni++) {
        int n_tok = toks[ni];
        for (int pass = 0; pass < 3; pass++) { // fast, reference, fast on the fused view
            ft_backend *be = backend(pass == 1, NT, E, NX, K);
            ft_moe_params mp = {.router = &router, .gate_exps = pass == 2 ? &gv : &gate, .up_exps = pass == 2 ? &uv : &up,
                                .down_exps = &down, .down_scale = &dscale, .router_x = rx, .act = FT_GLU_GELU,
                                .n_expert = NX, .n_expert_used = K, .gating = FT_GATING_SOFTMAX, .norm_w = true};
            float *y = pass == 0 ? yf : pass == 1 ? yr : yfused;
            fixture_fill_nan(y, FT_ARRAY_LEN(yf));
            be->ops->moe_ffn(be, &mp, x, y, n_tok);
            be->ops->free(be);
        }
        CHECK(!memcmp(yf, yfused, (size_t)n_tok * E * sizeof(float)), "%d tokens: the fused view differs", n_tok);
        float wrow[F], h[F], xt[E], rt[E], rtx[E];
        double worst = 0;
        for (int t = 0; t < n_tok; t++) {
            as_read_by(router.type, rx + t * E, E, rt);
            as_read_by(router.type, x + t * E, E, rtx);
            as_read_by(gate.type, x + t * E, E, xt); // (gate and up of one type)
            double lg[NX], lx[NX], mx = -1e30, sum = 0;
            for (int e = 0; e < NX; e++) {
                lg[e] = lx[e] = 0;
                ft_quant_ops_find(router.type)->to_float((uint8_t *)router.data + e * router.row_bytes, wrow, E);
                for (int i = 0; i < E; i++) lg[e] += (double)wrow[i] * rt[i], lx[e] += (double)wrow[i] * rtx[i];
                mx = fmax(mx, lg[e]);
            }
            for (int e = 0; e < NX; e++) sum += lg[e] = exp(lg[e] - mx);
            int sel[K], selx[K];
            bool taken[NX] = {false}, takenx[NX] = {false};
            for (int j = 0; j < K; j++) {
                sel[j] = selx[j] = -1;
                for (int e = 0; e < NX; e++) {
                    if (!taken[e] && (sel[j] < 0 || lg[e] > lg[sel[j]])) sel[j] = e;
                    if (!takenx[e] && (selx[j] < 0 || lx[e] > lx[selx[j]])) selx[j] = e;
                }
                taken[sel[j]] = takenx[selx[j]] = true;
            }
            for (int e = 0; e < NX; e++) routed_apart += taken[e] != takenx[e];
            double wsum = 0;
            for (int j = 0; j < K; j++) wsum += lg[sel[j]];
            double out[E] = {0};
            for (int j = 0; j < K; j++) {
                int e = sel[j];
                for (int o = 0; o < F; o++) {
                    double g = 0, u = 0;
                    ft_quant_ops_find(gate.type)->to_float((uint8_t *)gate.data + e * gate.mat_bytes + o * gate.row_bytes, wrow, E);
                    for (int i = 0; i < E; i++) g += (double)wrow[i] * xt[i];
                    ft_quant_ops_find(up.type)->to_float((uint8_t *)up.data + e * up.mat_bytes + o * up.row_bytes, wrow, E);
                    for (int i = 0; i < E; i++) u += (double)wrow[i] * xt[i];
                    h[o] = (float)(gelu(g) * u);
                }
                as_read_by(down.type, h, F, h);
                for (int o = 0; o < E; o++) {
                    double d = 0;
                    ft_quant_ops_find(down.type)->to_float((uint8_t *)down.data + e * down.mat_bytes + o * down.row_bytes, wrow, F);
                    for (int i = 0; i < F; i++) d += (double)wrow[i] * h[i];
                    out[o] += lg[e] / wsum * ((float *)dscale.data)[e] * d;
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
        CHECK(worst < 1e-2, "%d tokens: relative error %g against the direct computation", n_tok, worst);
        printf("  moe gemma4, %d tokens: worst relative error against the direct %.2e\n", n_tok, worst);
    }
    CHECK(routed_apart > 20, "router_x and x route alike (%d differences): the test could not tell them apart",
          routed_apart);
    ft_tensor *ts[] = {&router, &dscale, &gate, &up, &down};
    for (size_t i = 0; i < FT_ARRAY_LEN(ts); i++) free(ts[i]->data);
    free(fused);
}
