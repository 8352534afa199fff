// test_cpu_delta.c: the gated DeltaNet op's fast path (cpu_delta_avx2.c) against its reference
// (cpu_delta.c on FT_REFERENCE's backend): outputs, the state matrices and the conv state after
// fresh and continued launches, K heads shared by 1 and 4 V heads (both groupings), head sizes
// 128 and 16, and a head size the fast path does not take (12, which must still agree: it
// falls back). Outputs start as NaN so an unwritten element fails.
#include "fixtures.h"
#include "../src/backend/cpu/cpu.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

enum { DN_MAX_TOK = 70 };

static ft_backend *delta_backend(bool reference, int width, int hd) {
    ft_backend *be = ft_backend_cpu_init(reference ? 1 : 3, reference);
    ft_backend_limits lim = {.max_tok = DN_MAX_TOK,
                             .max_width = width,
                             .max_ctx = 16,
                             .max_head_dim = hd,
                             .n_expert = 1,
                             .n_expert_used = 1};
    be->ops->reserve(be, &lim);
    return be;
}

static void fill(ft_rng *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = ft_rng_normal(r) * scale;
}

// Worst |a - b| over n values relative to max(1, |b|); NaN counts as infinitely far.
static float worst_diff(const float *a, const float *b, size_t n) {
    float worst = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]) / fmaxf(1.0f, fabsf(b[i]));
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

// The fast path sums over 8 lanes where the reference sums in order (and the L2 norm in f32
// where the reference uses double): differences of a few f32 ulps per step, carried by the
// state over the launches (3e-7 seen); 1e-5 relative leaves room and still catches a wrong
// formula or a 0.1 % scale error.
TEST(cpu_delta_net_fast_vs_reference) {
    ft_rng r = ft_rng_init(11);
    const int shapes[4][4] = {
        {128, 2, 8, 0}, {128, 2, 2, 1}, {16, 3, 12, 1}, {12, 2, 4, 0}}; // hd, n_k, n_v, grouped
    const int launches[3] = {DN_MAX_TOK, 1, 9}; // fresh prompt, then a decode step, then a chunk
    const int d_conv = 4;
    for (int si = 0; si < 4; si++) {
        int hd = shapes[si][0], nk = shapes[si][1], nv = shapes[si][2];
        int C = (2 * nk + nv) * hd;
        ft_backend *fast = delta_backend(false, C, hd), *ref = delta_backend(true, C, hd);
        ft_tensor conv_w = fixture_kv_cache(FT_TYPE_F32, d_conv, C),
                  dt = fixture_kv_cache(FT_TYPE_F32, nv, 1), a = fixture_kv_cache(FT_TYPE_F32, nv, 1);
        fill(&r, conv_w.data, (size_t)d_conv * C, 0.5f);
        fill(&r, dt.data, (size_t)nv, 0.5f);
        for (int h = 0; h < nv; h++)
            ((float *)a.data)[h] = -expf(ft_rng_normal(&r) * 0.5f);
        ft_tensor cs[2], st[2];
        for (int b = 0; b < 2; b++) {
            cs[b] = fixture_kv_cache(FT_TYPE_F32, C, d_conv - 1);
            st[b] = fixture_kv_cache(FT_TYPE_F32, nv * hd * hd, 1);
        }
        size_t nx = (size_t)DN_MAX_TOK * C, no = (size_t)DN_MAX_TOK * nv * hd, nab = (size_t)DN_MAX_TOK * nv;
        float *qkv = ft_malloc(nx * sizeof(float)), *qkv2 = ft_malloc(nx * sizeof(float));
        float *alpha = ft_malloc(nab * sizeof(float)), *beta = ft_malloc(nab * sizeof(float));
        float *out[2] = {ft_malloc(no * sizeof(float)), ft_malloc(no * sizeof(float))};
        int pos = 0;
        for (int li = 0; li < 3; li++) {
            int n = launches[li];
            fill(&r, qkv, (size_t)n * C, 1.0f);
            fill(&r, alpha, (size_t)n * nv, 1.0f);
            fill(&r, beta, (size_t)n * nv, 1.0f);
            for (int b = 0; b < 2; b++) {
                memcpy(qkv2, qkv, (size_t)n * C * sizeof(float)); // the op may overwrite it
                for (size_t i = 0; i < no; i++)
                    out[b][i] = NAN;
                ft_delta_params p = {.qkv = qkv2,
                                     .alpha = alpha,
                                     .beta = beta,
                                     .conv_w = &conv_w,
                                     .dt = &dt,
                                     .a = &a,
                                     .conv_state = &cs[b],
                                     .state = &st[b],
                                     .out = out[b],
                                     .n_tok = n,
                                     .pos0 = pos,
                                     .n_k_heads = nk,
                                     .n_v_heads = nv,
                                     .head_dim = hd,
                                     .d_conv = d_conv,
                                     .k_grouped = shapes[si][3],
                                     .eps = 1e-6f};
                ft_backend *be = b ? ref : fast;
                be->ops->delta_net(be, &p);
            }
            float d_out = worst_diff(out[0], out[1], (size_t)n * nv * hd);
            float d_state = worst_diff(st[0].data, st[1].data, (size_t)nv * hd * hd);
            float d_conv_state = worst_diff(cs[0].data, cs[1].data, (size_t)(d_conv - 1) * C);
            CHECK(d_out <= 1e-5f && d_state <= 1e-5f && d_conv_state == 0.0f,
                  "hd %d heads %d/%d launch %d (%d tokens at %d): out %g state %g conv state %g", hd, nk, nv,
                  li, n, pos, d_out, d_state, d_conv_state);
            pos += n;
        }
        free(qkv);
        free(qkv2);
        free(alpha);
        free(beta);
        free(out[0]);
        free(out[1]);
        for (int b = 0; b < 2; b++) {
            free(cs[b].data);
            free(st[b].data);
        }
        free(conv_w.data);
        free(dt.data);
        free(a.data);
        fast->ops->free(fast);
        ref->ops->free(ref);
    }
}
