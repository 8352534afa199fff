// test_cuda_backend.c: every op of the CUDA backend (src/backend/cuda/cuda_backend.c) against
// the CPU backend's op on the same random data, and whole models (ft_engine on --device cuda
// against --device cpu) for every architecture.
//
// GPU outputs start as NaN, so an unwritten element fails. The error measure of an op is
// max |gpu - cpu| / max |cpu| over the output; its tolerance is stated next to each case:
//   - float-only arithmetic (norms, RoPE, Hadamard, gates, adds): 1e-5 or tighter, the last
//     bits of expf/cosf and summation order;
//   - matmuls on quantized weights: 2e-2, because the GPU quantizes activations to q8_1 where
//     the CPU uses the weight type's vec_dot_type (q8_0, q8_K: a half-step of a 127-level code
//     per element, about 0.4 %, partly averaging out over a dot product); f16 weights 4e-3
//     (the CPU rounds activations to f16), bf16 1.6e-2 (to bf16), f32 1e-5;
//   - attention: 2e-2 over an f16 cache (the CPU rounds its value accumulator to f16 after
//     every key), 5e-3 over q8_0 (both quantize the query the same way; float sums differ);
//   - moe_ffn and ffn: 3e-2 to 4e-2 with K-quant banks (two quantized matmuls in a row),
//     5e-3 with q8_0 / bf16 banks; an f32 router so both backends pick the same experts
//     (cases whose routing gap is under 1e-4 are skipped).
// Whole models, after a prompt (40 tokens in steps of 16: the matvec kernels, more than 8
// tokens per matmul; 104 in steps of 64 and 40: the GEMMs) and after each of 3 decoded tokens:
//   - strict: q8_0 weights everywhere and a q8_0 KV cache, where the GPU's q8_1 activations
//     carry the same codes as the CPU's q8_0 ones for the same input; top-10 probabilities
//     within 3e-2 and the same arg-max unless the CPU's two best are that close;
//   - realistic: q4_K experts and an f16 KV cache (q8_1 against q8_K activations, the CPU's
//     f16 value accumulator: ~1 % per matmul): 0.05 likewise.
//   Random-weight models are chaotic (probs_compare.h: the CPU against itself moves by up to
//   0.5 when one norm weight in three changes by 1e-5), so a step is judged only where the
//   CPU reference is stable under perturbations of the size of the expected differences (1e-5
//   strict, 1e-2 realistic), and at least half the steps of each architecture's cases must be. The tight checks are per block, from the same input
//   (test_cuda_layers.c: 5e-3).
#include "gpu_test.h"
#include "../tests/fixtures.h"
#include "probs_compare.h"

#include "../src/backend/cpu/cpu.h"
#include "../src/backend/cuda/cuda.h"
#include "../src/engine/engine.h"
#include "../src/model/synth.h"
#include "../src/quant/fp16.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Helpers

typedef struct {
    ft_backend *cpu, *gpu;
    ft_rng rng;
} pair;

static bool pair_init(pair *p, int max_tok, int64_t max_width, int max_ctx, int hd, int ne, int k) {
    ft_err err = {{0}};
    p->cpu = ft_backend_cpu_init(2, false);
    p->gpu = ft_backend_init(&(ft_backend_params){.device = FT_PLACEMENT_CUDA, .graph_max_tok = -1}, &err);
    if (!p->gpu) {
        test_fail(__FILE__, __LINE__, "cuda init: %s", err.msg);
        p->cpu->ops->free(p->cpu);
        return false;
    }
    ft_backend_limits lim = {max_tok, max_width, max_ctx, hd, ne, k, 0, .n_layer = 2}; // route counters for blocks 0, 1
    p->cpu->ops->reserve(p->cpu, &lim);
    p->gpu->ops->reserve(p->gpu, &lim);
    p->rng = ft_rng_init(1234);
    return true;
}

static void pair_free(pair *p) {
    p->cpu->ops->free(p->cpu);
    p->gpu->ops->free(p->gpu);
}

static float *randn(ft_rng *r, size_t n, float scale) {
    float *x = ft_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = ft_rng_normal(r) * scale;
    return x;
}

// A backend buffer of the CPU backend holding host data x (n floats), or NaN when x is NULL.
static float *cpu_buf(pair *p, const float *x, size_t n) {
    float *b = p->cpu->ops->alloc(p->cpu, n);
    for (size_t i = 0; i < n; i++) b[i] = x ? x[i] : NAN;
    return b;
}

// The same on the GPU backend.
static float *gpu_buf(pair *p, const float *x, size_t n) {
    float *b = p->gpu->ops->alloc(p->gpu, n);
    float *h = ft_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = x ? x[i] : NAN;
    ft_cuda_device_sync(); // alloc's memset ran on the backend's stream
    ft_cuda_memcpy_h2d(b, h, n * sizeof(float), NULL);
    ft_cuda_device_sync();
    free(h);
    return b;
}

static float *gpu_read(pair *p, const float *b, size_t n) {
    float *h = ft_malloc(n * sizeof(float));
    p->gpu->ops->read(p->gpu, b, h, n);
    return h;
}

// A random host tensor of type t, (ne0, ne1, ne2).
static ft_tensor host_tensor(ft_rng *r, enum ft_type t, int64_t ne0, int64_t ne1, int64_t ne2, float std) {
    ft_tensor w = {0};
    snprintf(w.name, sizeof(w.name), "test_%s", ft_type_name(t));
    w.type = t;
    w.ne[0] = ne0;
    w.ne[1] = ne1;
    w.ne[2] = ne2;
    w.row_bytes = ft_row_bytes(t, ne0);
    w.mat_bytes = w.row_bytes * (size_t)ne1;
    w.data = ft_malloc(w.mat_bytes * (size_t)ne2);
    for (int64_t i = 0; i < ne1 * ne2; i++) ft_quant_random_row(t, r, std, (uint8_t *)w.data + i * w.row_bytes, ne0);
    w.placement = FT_PLACEMENT_CPU;
    return w;
}

static ft_tensor dev_tensor(const ft_tensor *h) {
    ft_tensor d = *h;
    size_t n = h->mat_bytes * (size_t)h->ne[2];
    d.data = ft_cuda_malloc(n);
    FT_ASSERT(d.data);
    ft_cuda_memcpy_h2d(d.data, h->data, n, NULL);
    ft_cuda_device_sync();
    d.placement = FT_PLACEMENT_CUDA;
    return d;
}

// max |a - b| / max |b|; NaN anywhere gives INFINITY.
static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

// Compares the GPU buffer g with the CPU buffer c (n floats) under tol; prints the error.
static double compare(pair *p, const char *what, const float *g, const float *c, size_t n, double tol) {
    float *h = gpu_read(p, g, n);
    double e = rel_err(h, c, n);
    printf("    %-40s err %.3g (tol %.3g)\n", what, e, tol);
    fflush(stdout);
    CHECK(e <= tol, "%s: error %.3g > %.3g", what, e, tol);
    free(h);
    return e;
}

// ---------------------------------------------------------------------------------------------
// Ops

// The process's share of the device as nvidia-smi reads it (--gpu-memory-limit counts it): the
// CUDA context before anything is allocated, and an allocation's bytes beside it.
TEST(cuda_process_memory) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_cuda_device_info a, b;
    CHECK(ft_cuda_device_get_info(0, &a));
    if (!a.process_mem) {
        test_skip("NVML does not list this process (no libnvidia-ml, or a PID namespace of its own)");
        return;
    }
    CHECK(a.process_mem < a.total_mem, "%zu of %zu", a.process_mem, a.total_mem);
    const size_t n = (size_t)256 << 20;
    void *p = ft_cuda_malloc(n);
    CHECK(p != NULL);
    CHECK(ft_cuda_device_get_info(0, &b));
    ft_cuda_free(p);
    // the allocator rounds up to its own pages (2 MiB)
    CHECK(b.process_mem >= a.process_mem + n && b.process_mem <= a.process_mem + n + ((size_t)64 << 20),
          "held %zu MiB, then %zu MiB after a 256 MiB allocation", a.process_mem >> 20, b.process_mem >> 20);
}

TEST(cuda_op_matmul) {
    GPU_TEST_REQUIRE_DEVICE();
    pair p;
    if (!pair_init(&p, 40, 1024, 16, 64, 0, 0)) return;
    struct { enum ft_type t; double tol; } types[] = {
        {FT_TYPE_Q8_0, 2e-2}, {FT_TYPE_Q4_0, 2e-2}, {FT_TYPE_Q4_K, 2e-2}, {FT_TYPE_Q5_K, 2e-2},
        {FT_TYPE_Q6_K, 2e-2}, {FT_TYPE_Q2_K, 2e-2}, {FT_TYPE_Q3_K, 2e-2}, {FT_TYPE_IQ4_XS, 2e-2},
        {FT_TYPE_F16, 4e-3},  {FT_TYPE_BF16, 1.6e-2}, {FT_TYPE_F32, 1e-5},
    };
    int toks[] = {1, 5, 8, 21, 40};
    for (size_t ti = 0; ti < FT_ARRAY_LEN(types); ti++) {
        ft_tensor w = host_tensor(&p.rng, types[ti].t, 512, 300, 1, 0.05f), dw = dev_tensor(&w);
        for (size_t k = 0; k < FT_ARRAY_LEN(toks); k++) {
            int n = toks[k];
            float *x = randn(&p.rng, (size_t)n * 512, 1.0f);
            float *cx = cpu_buf(&p, x, (size_t)n * 512), *cy = cpu_buf(&p, NULL, (size_t)n * 300);
            float *gx = gpu_buf(&p, x, (size_t)n * 512), *gy = gpu_buf(&p, NULL, (size_t)n * 300);
            p.cpu->ops->matmul(p.cpu, &w, cx, cy, n);
            p.gpu->ops->matmul(p.gpu, &dw, gx, gy, n);
            char what[64];
            snprintf(what, sizeof(what), "matmul %s n_tok %d", ft_type_name(types[ti].t), n);
            compare(&p, what, gy, cy, (size_t)n * 300, types[ti].tol);
            free(x);
        }
        free(w.data);
        ft_cuda_free(dw.data);
    }
    pair_free(&p);
}

TEST(cuda_op_elementwise) {
    GPU_TEST_REQUIRE_DEVICE();
    pair p;
    if (!pair_init(&p, 16, 1024, 16, 128, 0, 0)) return;
    int n_tok = 7, nh = 4, hd = 128, W = nh * hd;
    size_t N = (size_t)n_tok * W;
    float *x = randn(&p.rng, N, 1.0f), *x2 = randn(&p.rng, N, 1.0f);
    ft_tensor wn = host_tensor(&p.rng, FT_TYPE_F32, W, 1, 1, 1.0f), dwn = dev_tensor(&wn);
    ft_tensor wh = host_tensor(&p.rng, FT_TYPE_F32, hd, 1, 1, 1.0f), dwh = dev_tensor(&wh);

    // rms_norm over rows of W, and per head in place (as q_norm)
    float *cx = cpu_buf(&p, x, N), *cy = cpu_buf(&p, NULL, N), *gx = gpu_buf(&p, x, N), *gy = gpu_buf(&p, NULL, N);
    p.cpu->ops->rms_norm(p.cpu, cx, &wn, cy, n_tok, W, 1e-6f);
    p.gpu->ops->rms_norm(p.gpu, gx, &dwn, gy, n_tok, W, 1e-6f);
    compare(&p, "rms_norm rows", gy, cy, N, 1e-5);
    p.cpu->ops->rms_norm(p.cpu, cx, &wh, cx, n_tok * nh, hd, 1e-6f);
    p.gpu->ops->rms_norm(p.gpu, gx, &dwh, gx, n_tok * nh, hd, 1e-6f);
    compare(&p, "rms_norm per head, in place", gx, cx, N, 1e-5);

    // add, add_bias
    float *cx2 = cpu_buf(&p, x2, N), *gx2 = gpu_buf(&p, x2, N);
    p.cpu->ops->add(p.cpu, cy, cx2, N);
    p.gpu->ops->add(p.gpu, gy, gx2, N);
    compare(&p, "add", gy, cy, N, 1e-6);
    p.cpu->ops->add_bias(p.cpu, cy, &wn, n_tok, W);
    p.gpu->ops->add_bias(p.gpu, gy, &dwn, n_tok, W);
    compare(&p, "add_bias", gy, cy, N, 1e-6);

    // rope: NeoX, adjacent pairs with partial rotation, YaRN; positions far from 0
    ft_rope_params rps[3] = {
        {.n_rot = 128, .neox = true, .freq_base = 1e6f, .freq_scale = 1, .attn_factor = 1, .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096},
        {.n_rot = 64, .neox = false, .freq_base = 1e4f, .freq_scale = 1, .attn_factor = 1, .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096},
        {.n_rot = 128, .neox = true, .freq_base = 1e6f, .freq_scale = 0.25f, .ext_factor = 1, .attn_factor = 1, .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096},
    };
    // and imrope for text (qwen35moe: sections [11, 11, 10, 0] of 32 pairs, partial rotation)
    ft_rope_params rp_imrope = {.n_rot = 64, .neox = true, .freq_base = 1e7f, .freq_scale = 1, .attn_factor = 1,
                                .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096, .imrope = true,
                                .sections = {11, 11, 10, 0}};
    const ft_rope_params *rpp[4] = {&rps[0], &rps[1], &rps[2], &rp_imrope};
    const char *rnames[4] = {"rope neox", "rope normal n_rot 64", "rope yarn", "rope imrope n_rot 64"};
    for (int i = 0; i < 4; i++) {
        float *c1 = cpu_buf(&p, x, N), *g1 = gpu_buf(&p, x, N);
        p.cpu->ops->rope(p.cpu, c1, n_tok, nh, hd, 3000, rpp[i]);
        p.gpu->ops->rope(p.gpu, g1, n_tok, nh, hd, 3000, rpp[i]);
        compare(&p, rnames[i], g1, c1, N, i == 2 ? 1e-4 : 1e-5); // YaRN: cosf/sinf/logf ulps at ~3000 rad
    }

    // hadamard with the chunk sizes the KV cache uses
    int hs[2] = {64, 128};
    for (int i = 0; i < 2; i++) {
        float *c1 = cpu_buf(&p, x, N), *g1 = gpu_buf(&p, x, N);
        p.cpu->ops->hadamard(p.cpu, c1, n_tok, W, hs[i]);
        p.gpu->ops->hadamard(p.gpu, g1, n_tok, W, hs[i]);
        compare(&p, hs[i] == 64 ? "hadamard 64" : "hadamard 128", g1, c1, N, 1e-6);
    }

    // gates: softplus, sigmoid and SiLU, each per head and per element
    int gws[2] = {nh, W};
    const char *acts[3] = {"softplus", "sigmoid", "silu"};
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < 2; i++) {
            float *c1 = cpu_buf(&p, x, N), *g1 = gpu_buf(&p, x, N);
            float *cg = cpu_buf(&p, x2, (size_t)n_tok * gws[i]), *gg = gpu_buf(&p, x2, (size_t)n_tok * gws[i]);
            p.cpu->ops->gate_mul(p.cpu, c1, cg, n_tok, nh, hd, gws[i], (enum ft_act)a);
            p.gpu->ops->gate_mul(p.gpu, g1, gg, n_tok, nh, hd, gws[i], (enum ft_act)a);
            char what[64];
            snprintf(what, sizeof(what), "gate_mul %s per %s", acts[a], i ? "element" : "head");
            compare(&p, what, g1, c1, N, 1e-5);
        }
    // split_heads: the doubled Q projection of q-gated attention (x read as 2 heads of 2 * 128)
    {
        int sh = nh / 2, sd = hd, half = n_tok * sh * sd;
        float *ca = cpu_buf(&p, NULL, (size_t)half), *cb = cpu_buf(&p, NULL, (size_t)half);
        float *ga = gpu_buf(&p, NULL, (size_t)half), *gb = gpu_buf(&p, NULL, (size_t)half);
        float *c1 = cpu_buf(&p, x, N), *g1 = gpu_buf(&p, x, N);
        p.cpu->ops->split_heads(p.cpu, c1, ca, cb, n_tok, sh, sd);
        p.gpu->ops->split_heads(p.gpu, g1, ga, gb, n_tok, sh, sd);
        compare(&p, "split_heads first halves", ga, ca, (size_t)half, 0);
        compare(&p, "split_heads second halves", gb, cb, (size_t)half, 0);
    }
    free(x);
    free(x2);
    free(wn.data);
    free(wh.data);
    ft_cuda_free(dwn.data);
    ft_cuda_free(dwh.data);
    pair_free(&p);
}

// An f32 tensor of n floats at data (placement as given), shaped (ne0, ne1).
static ft_tensor f32_tensor(void *data, int64_t ne0, int64_t ne1, enum ft_placement where) {
    ft_tensor t = {0};
    snprintf(t.name, sizeof(t.name), "test_f32");
    t.type = FT_TYPE_F32;
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.ne[2] = 1;
    t.row_bytes = ft_row_bytes(FT_TYPE_F32, ne0);
    t.mat_bytes = t.row_bytes * (size_t)ne1;
    t.data = data;
    t.placement = where;
    return t;
}

// Gated DeltaNet: a sequence started fresh, then continued from its states in steps of the
// given sizes (one token: decode; more: a prompt chunk), each step's output and both states
// against the CPU op. Float sums in another order, carried through the state: 1e-4.
typedef struct delta_shape {
    int hk, hv, hd, d_conv;
    bool grouped;
} delta_shape;

typedef struct delta_case_opts {
    const int *steps;
    int n_steps;
    float alpha_mean;  // added to the decay's projection: larger decays (and sums of them) for a
                       // chunk's cumulative decay to reach far below 1
    int scratch_k;     // the pair's expert count: the GPU's FFN scratch (the chunked rule's
                       // workspace) grows with it
    bool vs_token_loop;// also a GPU backend with FT_CUDA_DELTA_CHUNKED=0: every step of a chunk or
                       // more must differ from it (the chunked form ran) and both meet the CPU
} delta_case_opts;

static void delta_net_case(const delta_shape *sh, const delta_case_opts *o) {
    int Hk = sh->hk, H = sh->hv, hd = sh->hd, K = sh->d_conv;
    int C = (2 * Hk + H) * hd, V = H * hd, max_tok = 0;
    for (int i = 0; i < o->n_steps; i++) max_tok = FT_MAX(max_tok, o->steps[i]);
    pair p;
    if (!pair_init(&p, max_tok, C, 16, hd, o->scratch_k, o->scratch_k)) return;
    ft_backend *loop = NULL;
    if (o->vs_token_loop) {
        ft_err err = {{0}};
        setenv("FT_CUDA_DELTA_CHUNKED", "0", 1);
        loop = ft_backend_init(&(ft_backend_params){.device = FT_PLACEMENT_CUDA, .graph_max_tok = -1}, &err);
        unsetenv("FT_CUDA_DELTA_CHUNKED");
        FT_ASSERT(loop);
        ft_backend_limits lim = {max_tok, C, 16, hd, o->scratch_k, o->scratch_k, 0, 0};
        loop->ops->reserve(loop, &lim);
    }
    float *w = randn(&p.rng, (size_t)K * C, 0.3f), *dt = randn(&p.rng, (size_t)H, 0.5f);
    float *a = randn(&p.rng, (size_t)H, 0.5f);
    for (int i = 0; i < K * C; i++) w[i] += 0.25f;
    for (int i = 0; i < H; i++) a[i] = -expf(a[i]);
    size_t n_conv = (size_t)(K - 1) * C, n_state = (size_t)H * hd * hd;
    float *c_conv = cpu_buf(&p, NULL, n_conv ? n_conv : 1), *c_state = cpu_buf(&p, NULL, n_state);
    float *g_conv = gpu_buf(&p, NULL, n_conv ? n_conv : 1), *g_state = gpu_buf(&p, NULL, n_state);
    float *l_conv = gpu_buf(&p, NULL, n_conv ? n_conv : 1), *l_state = gpu_buf(&p, NULL, n_state);
    ft_tensor hw = f32_tensor(w, K, C, FT_PLACEMENT_CPU), hdt = f32_tensor(dt, H, 1, FT_PLACEMENT_CPU);
    ft_tensor ha = f32_tensor(a, H, 1, FT_PLACEMENT_CPU);
    ft_tensor dw = dev_tensor(&hw), ddt = dev_tensor(&hdt), da = dev_tensor(&ha);
    ft_tensor cc = f32_tensor(c_conv, C, K - 1, FT_PLACEMENT_CPU), cs = f32_tensor(c_state, n_state, 1, FT_PLACEMENT_CPU);
    ft_tensor gc = f32_tensor(g_conv, C, K - 1, FT_PLACEMENT_CUDA), gs = f32_tensor(g_state, n_state, 1, FT_PLACEMENT_CUDA);
    ft_tensor lc = f32_tensor(l_conv, C, K - 1, FT_PLACEMENT_CUDA), ls = f32_tensor(l_state, n_state, 1, FT_PLACEMENT_CUDA);
    int pos = 0;
    for (int st = 0; st < o->n_steps && !test_failed(); st++) {
        int n = o->steps[st];
        float *qkv = randn(&p.rng, (size_t)n * C, 1.0f), *ab = randn(&p.rng, (size_t)2 * n * H, 1.0f);
        for (size_t i = 0; i < (size_t)n * H; i++) ab[i] += o->alpha_mean;
        float *cq = cpu_buf(&p, qkv, (size_t)n * C), *cab = cpu_buf(&p, ab, (size_t)2 * n * H);
        float *gq = gpu_buf(&p, qkv, (size_t)n * C), *gab = gpu_buf(&p, ab, (size_t)2 * n * H);
        float *lq = gpu_buf(&p, qkv, (size_t)n * C);
        float *co = cpu_buf(&p, NULL, (size_t)n * V), *go = gpu_buf(&p, NULL, (size_t)n * V);
        float *lo = gpu_buf(&p, NULL, (size_t)n * V);
        ft_delta_params dp = {
            .qkv = cq, .alpha = cab, .beta = cab + (size_t)n * H, .conv_w = &hw, .dt = &hdt, .a = &ha,
            .conv_state = &cc, .state = &cs, .out = co, .n_tok = n, .pos0 = pos, .n_k_heads = Hk,
            .n_v_heads = H, .head_dim = hd, .d_conv = K, .k_grouped = sh->grouped, .eps = 1e-6f,
        };
        p.cpu->ops->delta_net(p.cpu, &dp);
        if (loop && n < 64) { // the same incoming state: a chunk's arithmetic differs from the loop's
            float *hs = gpu_read(&p, g_state, n_state);
            ft_cuda_memcpy_h2d(l_state, hs, n_state * sizeof(float), NULL);
            free(hs);
            if (n_conv) {
                float *hc = gpu_read(&p, g_conv, n_conv);
                ft_cuda_memcpy_h2d(l_conv, hc, n_conv * sizeof(float), NULL);
                free(hc);
            }
            ft_cuda_device_sync();
        }
        dp.qkv = gq, dp.alpha = gab, dp.beta = gab + (size_t)n * H, dp.conv_w = &dw, dp.dt = &ddt, dp.a = &da;
        dp.conv_state = &gc, dp.state = &gs, dp.out = go;
        p.gpu->ops->delta_net(p.gpu, &dp);
        char what[112];
        snprintf(what, sizeof(what), "delta_net %d/%d heads of %d%s, conv %d: %d at %d", Hk, H, hd,
                 sh->grouped ? " grouped" : "", K, n, pos);
        compare(&p, what, go, co, (size_t)n * V, 1e-4);
        compare(&p, "  its delta-rule state", g_state, c_state, n_state, 1e-4);
        if (n_conv) compare(&p, "  its conv state", g_conv, c_conv, n_conv, 0);
        if (loop) {
            dp.qkv = lq, dp.conv_state = &lc, dp.state = &ls, dp.out = lo;
            loop->ops->delta_net(loop, &dp);
            ft_cuda_device_sync(); // its own stream: read below through the other backend
            float *hl = gpu_read(&p, lo, (size_t)n * V), *hg = gpu_read(&p, go, (size_t)n * V);
            compare(&p, "  the token loop's output", lo, co, (size_t)n * V, 1e-4);
            bool same = !memcmp(hl, hg, (size_t)n * V * sizeof(float));
            CHECK(n < 64 ? same : !same, "%s: the chunked and token-loop outputs are %s", what,
                  same ? "bit-identical (the chunked form did not run)" : "different (a decode step ran chunked)");
            free(hl);
            free(hg);
        }
        pos += n;
        free(qkv);
        free(ab);
    }
    free(w); free(dt); free(a);
    ft_cuda_free(dw.data); ft_cuda_free(ddt.data); ft_cuda_free(da.data);
    if (loop) loop->ops->free(loop);
    pair_free(&p);
}

TEST(cuda_op_delta_net) {
    GPU_TEST_REQUIRE_DEVICE();
    static const delta_shape shapes[] = {
        {2, 4, 128, 4, false}, {2, 4, 128, 4, true}, {1, 2, 64, 3, false}, {2, 6, 32, 2, true},
        {1, 2, 256, 4, false}, {2, 2, 128, 1, false},
    };
    static const int steps[] = {20, 1, 1, 70, 2, 1}; // 16 tokens or more: the conv in runs
    delta_case_opts o = {steps, FT_ARRAY_LEN(steps), 0.0f, 0, false};
    for (size_t sh = 0; sh < FT_ARRAY_LEN(shapes) && !test_failed(); sh++) delta_net_case(&shapes[sh], &o);
}

// The chunked delta rule (delta_rule_chunked.cu): steps of one chunk, of several with a partial
// last one, and of five, with decode steps between them, at the usual decays and at strong ones
// (a chunk's cumulative decay far below 1), against the CPU and beside the token loop.
TEST(cuda_op_delta_net_chunked) {
    GPU_TEST_REQUIRE_DEVICE();
    static const delta_shape shapes[] = {
        {2, 4, 128, 4, false}, {2, 4, 128, 4, true}, {1, 2, 64, 3, false}, {2, 6, 64, 4, true},
    };
    static const int steps[] = {64, 1, 130, 2, 300, 1};
    for (int strong = 0; strong < 2; strong++) {
        delta_case_opts o = {steps, FT_ARRAY_LEN(steps), strong ? 3.0f : 0.0f, 8, true};
        for (size_t sh = 0; sh < FT_ARRAY_LEN(shapes) && !test_failed(); sh++) delta_net_case(&shapes[sh], &o);
    }
}

TEST(cuda_op_get_rows) {
    GPU_TEST_REQUIRE_DEVICE();
    pair p;
    if (!pair_init(&p, 16, 512, 16, 64, 0, 0)) return;
    ft_tensor t = host_tensor(&p.rng, FT_TYPE_Q4_K, 512, 100, 1, 1.0f); // stays in host memory
    int32_t ids[5] = {3, 99, 0, 3, 42};
    float *cy = cpu_buf(&p, NULL, 5 * 512), *gy = gpu_buf(&p, NULL, 5 * 512);
    p.cpu->ops->get_rows(p.cpu, &t, ids, cy, 5);
    p.gpu->ops->get_rows(p.gpu, &t, ids, gy, 5);
    compare(&p, "get_rows q4_K", gy, cy, 5 * 512, 0);
    free(t.data);
    pair_free(&p);
}

// A KV-cache tensor of type t with n_ctx rows of width floats, on the host or the device.
static ft_tensor cache_tensor(enum ft_type t, int width, int n_ctx, bool dev) {
    ft_tensor c = fixture_kv_cache(t, width, n_ctx);
    if (dev) {
        free(c.data);
        c.data = ft_cuda_malloc(c.mat_bytes);
        ft_cuda_memset(c.data, 0, c.mat_bytes, NULL);
        ft_cuda_device_sync();
        c.placement = FT_PLACEMENT_CUDA;
    }
    return c;
}

// The attention op on both backends for queries q (n tokens from pos0): caches[0..1] are the
// CPU's K and V, caches[2..3] the GPU's; sinks[0..1] the CPU's and GPU's attention sinks (or
// NULL); *co and *go receive the outputs (backend buffers).
static void attention_both(pair *p, const ft_tensor *const caches[4], const ft_tensor *const sinks[2],
                           const float *q, int n, int pos0, int nh, int nkv, int hd, int window, float **co,
                           float **go) {
    size_t QN = (size_t)n * nh * hd;
    *co = cpu_buf(p, NULL, QN);
    *go = gpu_buf(p, NULL, QN);
    ft_attn_params ap = {.q = cpu_buf(p, q, QN), .out = *co, .k_cache = caches[0], .v_cache = caches[1], .n_tok = n,
                         .pos0 = pos0, .n_head = nh, .n_head_kv = nkv, .head_dim = hd, .window = window,
                         .scale = 1.0f / sqrtf((float)hd), .sinks = sinks ? sinks[0] : NULL};
    p->cpu->ops->attention(p->cpu, &ap);
    ap.q = gpu_buf(p, q, QN);
    ap.out = *go;
    ap.k_cache = caches[2];
    ap.v_cache = caches[3];
    ap.sinks = sinks ? sinks[1] : NULL;
    p->gpu->ops->attention(p->gpu, &ap);
}

// set_rows and attention at head size hd (the decode kernel is built for 64, 128 and 256); with
// sinks, gpt-oss's attention sinks (a logit per head in each softmax's denominator), of about
// the scores' size so that they matter, on every kernel the cases reach (decode and its split
// merge, the general kernel, flash attention).
static void set_rows_attention_case(int hd, bool with_sinks) {
    const int nh = 8, nkv = 2, n_ctx = 400, W = nkv * hd;
    pair p;
    if (!pair_init(&p, 64, nh * hd, n_ctx, hd, 0, 0)) return;
    float *sv = randn(&p.rng, nh, 2.0f);
    ft_tensor sc = f32_tensor(sv, nh, 1, FT_PLACEMENT_CPU), sg = dev_tensor(&sc);
    const ft_tensor *sinks[2] = {&sc, &sg};
    enum ft_type kts[2] = {FT_TYPE_F16, FT_TYPE_Q8_0};
    for (int ki = 0; ki < 2; ki++) {
        enum ft_type kt = kts[ki];
        ft_tensor ck = cache_tensor(kt, W, n_ctx, false), cv = cache_tensor(kt, W, n_ctx, false);
        ft_tensor gk = cache_tensor(kt, W, n_ctx, true), gv = cache_tensor(kt, W, n_ctx, true);
        // fill positions 0..359 in chunks (several set_rows calls at offsets)
        int filled = 360;
        float *k = randn(&p.rng, (size_t)filled * W, 1.0f), *v = randn(&p.rng, (size_t)filled * W, 1.0f);
        for (int r0 = 0; r0 < filled; r0 += 60) {
            float *ckb = cpu_buf(&p, k + (size_t)r0 * W, 60 * (size_t)W), *cvb = cpu_buf(&p, v + (size_t)r0 * W, 60 * (size_t)W);
            float *gkb = gpu_buf(&p, k + (size_t)r0 * W, 60 * (size_t)W), *gvb = gpu_buf(&p, v + (size_t)r0 * W, 60 * (size_t)W);
            p.cpu->ops->set_rows(p.cpu, &ck, NULL, r0, ckb, 60);
            p.cpu->ops->set_rows(p.cpu, &cv, NULL, r0, cvb, 60);
            p.gpu->ops->set_rows(p.gpu, &gk, NULL, r0, gkb, 60);
            p.gpu->ops->set_rows(p.gpu, &gv, NULL, r0, gvb, 60);
        }
        // the cache bytes: f16 identical; q8_0 scales identical and codes within 1
        uint8_t *hk = ft_malloc(ck.mat_bytes);
        ft_cuda_device_sync();
        ft_cuda_memcpy_d2h(hk, gk.data, ck.mat_bytes, NULL);
        ft_cuda_device_sync();
        int worst = 0;
        size_t bad_scale = 0;
        if (kt == FT_TYPE_F16) {
            worst = memcmp(hk, ck.data, ck.mat_bytes) ? 1 : 0;
        } else {
            const block_q8_0 *a = (const block_q8_0 *)hk, *b = ck.data;
            for (size_t i = 0; i < ck.mat_bytes / sizeof(block_q8_0); i++) {
                bad_scale += a[i].d != b[i].d;
                for (int j = 0; j < 32; j++) worst = FT_MAX(worst, abs(a[i].qs[j] - b[i].qs[j]));
            }
        }
        printf("    set_rows %s: worst code difference %d, scales differing %zu\n", ft_type_name(kt), worst, bad_scale);
        CHECK(kt == FT_TYPE_F16 ? worst == 0 : (worst <= 1 && bad_scale == 0), "set_rows %s", ft_type_name(kt));
        free(hk);

        // decode at the end (keys split over CTAs), a small batch (split too), a prefill batch
        // from 0, a batch in the middle, and sliding windows (short, and long enough to split)
        struct { int n_tok, pos0, window;
        } cases[] = {{1, 359, 0},   {4, 300, 0}, {40, 0, 0},  {64, 296, 0}, {1, 359, 16}, {30, 100, 7},
                     {1, 359, 200}, {1, 2, 0},   {8, 352, 0}, {3, 126, 0},  {6, 350, 40}};
        for (size_t ci = 0; ci < FT_ARRAY_LEN(cases); ci++) {
            int n = cases[ci].n_tok;
            size_t QN = (size_t)n * nh * hd;
            float *q = randn(&p.rng, QN, 1.0f), *co, *go;
            attention_both(&p, (const ft_tensor *[4]){&ck, &cv, &gk, &gv}, with_sinks ? sinks : NULL, q, n,
                           cases[ci].pos0, nh, nkv, hd, cases[ci].window, &co, &go);
            char what[112];
            snprintf(what, sizeof(what), "attention %s hd %d n_tok %d pos0 %d window %d%s", ft_type_name(kt), hd, n,
                     cases[ci].pos0, cases[ci].window, with_sinks ? " sinks" : "");
            compare(&p, what, go, co, QN, kt == FT_TYPE_F16 ? 2e-2 : 5e-3);
            free(q);
        }
        free(k);
        free(v);
        free(ck.data);
        free(cv.data);
        ft_cuda_free(gk.data);
        ft_cuda_free(gv.data);
    }
    free(sv);
    ft_cuda_free(sg.data);
    pair_free(&p);
}

TEST(cuda_op_set_rows_attention) {
    GPU_TEST_REQUIRE_DEVICE();
    set_rows_attention_case(128, false);
    set_rows_attention_case(64, false);
    set_rows_attention_case(256, false);
}

TEST(cuda_op_attention_sinks) {
    GPU_TEST_REQUIRE_DEVICE();
    set_rows_attention_case(64, true);
    set_rows_attention_case(128, true);
}

// copy_rows on the device (a reused prefix's rows into a sequence's own block, kv.h): rows that
// set_rows wrote just before, a write the backend still holds back to join the next one, are
// copied in stream order as bytes, f16 and q8_0, 1, 37 and 63 rows from block 1 to block 3; the
// rows past them and every other block keep the bytes of the same writes without the copy.
TEST(cuda_op_copy_rows) {
    GPU_TEST_REQUIRE_DEVICE();
    enum { W = 256, ROWS = 4 * FT_KV_BLOCK, B = FT_KV_BLOCK };
    pair p;
    REQUIRE(pair_init(&p, ROWS, W, ROWS, 128, 1, 1));
    float *x = randn(&p.rng, (size_t)ROWS * W, 1.0f), *xd = gpu_buf(&p, x, (size_t)ROWS * W);
    const enum ft_type types[2] = {FT_TYPE_F16, FT_TYPE_Q8_0};
    const int ns[3] = {1, 37, B - 1};
    for (int ti = 0; ti < 2; ti++)
        for (int ni = 0; ni < 3; ni++) {
            int n = ns[ni];
            ft_tensor plain = cache_tensor(types[ti], W, ROWS, true), copied = cache_tensor(types[ti], W, ROWS, true);
            p.gpu->ops->set_rows(p.gpu, &plain, NULL, 0, xd, ROWS);
            p.gpu->ops->set_rows(p.gpu, &copied, NULL, 0, xd, ROWS);
            p.gpu->ops->copy_rows(p.gpu, &copied, 3 * B, B, n);
            size_t nf = plain.mat_bytes / sizeof(float), rb = plain.row_bytes;
            const uint8_t *want = (const uint8_t *)gpu_read(&p, plain.data, nf),
                          *got = (const uint8_t *)gpu_read(&p, copied.data, nf);
            CHECK(!memcmp(got + 3 * B * rb, want + B * rb, (size_t)n * rb), "%s: the %d rows copied",
                  ft_type_name(types[ti]), n);
            CHECK(!memcmp(got + (3 * B + n) * rb, want + (3 * B + n) * rb, (size_t)(B - n) * rb),
                  "%s: the rows past %d", ft_type_name(types[ti]), n);
            CHECK(!memcmp(got, want, 3 * B * rb), "%s: blocks 0-2", ft_type_name(types[ti]));
            free((void *)want);
            free((void *)got);
            ft_cuda_free(plain.data);
            ft_cuda_free(copied.data);
        }
    free(x);
    pair_free(&p);
}

// Through a block table (kv_block.h): a sequence's rows written into a shuffled set of blocks
// of a larger store give the bits the same rows in an unpaged cache give, on every kernel the
// op picks (decode split over CTAs, small batches, the flash prefill, windows).
static void paged_attention_case(int hd, enum ft_type kt) {
    const int nh = 8, nkv = 2, W = nkv * hd, n_blk = 6, n_ctx = n_blk * FT_KV_BLOCK, store = 10 * FT_KV_BLOCK;
    pair p;
    if (!pair_init(&p, 128, nh * hd, n_ctx, hd, 0, 0)) return;
    ft_tensor flat_k = cache_tensor(kt, W, n_ctx, true), flat_v = cache_tensor(kt, W, n_ctx, true);
    ft_tensor pk = cache_tensor(kt, W, store, true), pv = cache_tensor(kt, W, store, true);
    const int32_t table[6] = {7, 2, 9, 0, 5, 3};
    int32_t *table_dev = ft_cuda_malloc(sizeof(table));
    ft_cuda_memcpy_h2d(table_dev, table, sizeof(table), NULL);
    ft_cuda_device_sync();
    const int filled = 370, chunk = 37; // chunks across block boundaries
    float *k = randn(&p.rng, (size_t)filled * W, 1.0f), *v = randn(&p.rng, (size_t)filled * W, 1.0f);
    for (int r0 = 0; r0 < filled; r0 += chunk) {
        float *kb = gpu_buf(&p, k + (size_t)r0 * W, (size_t)chunk * W), *vb = gpu_buf(&p, v + (size_t)r0 * W, (size_t)chunk * W);
        p.gpu->ops->set_rows(p.gpu, &flat_k, NULL, r0, kb, chunk);
        p.gpu->ops->set_rows(p.gpu, &flat_v, NULL, r0, vb, chunk);
        p.gpu->ops->set_rows(p.gpu, &pk, table_dev, r0, kb, chunk);
        p.gpu->ops->set_rows(p.gpu, &pv, table_dev, r0, vb, chunk);
    }
    struct { int n_tok, pos0, window; } cases[] = {{1, 369, 0}, {4, 300, 0}, {100, 0, 0}, {128, 242, 0},
                                                   {1, 369, 70}, {33, 200, 7}, {8, 362, 0}};
    int n_same = 0;
    for (size_t ci = 0; ci < FT_ARRAY_LEN(cases); ci++) {
        int n = cases[ci].n_tok;
        size_t QN = (size_t)n * nh * hd;
        float *q = randn(&p.rng, QN, 1.0f);
        float *qd = gpu_buf(&p, q, QN), *of = gpu_buf(&p, NULL, QN), *op = gpu_buf(&p, NULL, QN);
        ft_attn_params ap = {.q = qd, .out = of, .k_cache = &flat_k, .v_cache = &flat_v, .n_tok = n,
                             .pos0 = cases[ci].pos0, .n_head = nh, .n_head_kv = nkv, .head_dim = hd,
                             .window = cases[ci].window, .scale = 1.0f / sqrtf((float)hd)};
        p.gpu->ops->attention(p.gpu, &ap);
        ap.out = op;
        ap.k_cache = &pk;
        ap.v_cache = &pv;
        ap.blocks = table_dev;
        p.gpu->ops->attention(p.gpu, &ap);
        float *hf = gpu_read(&p, of, QN), *hp = gpu_read(&p, op, QN);
        bool eq = !memcmp(hf, hp, QN * sizeof(float));
        CHECK(eq, "paged attention %s hd %d n_tok %d pos0 %d window %d differs from the flat cache", ft_type_name(kt), hd,
              n, cases[ci].pos0, cases[ci].window);
        n_same += eq;
        free(q);
        free(hf);
        free(hp);
    }
    printf("    paged %s hd %d: %d/%zu shapes bit-identical to the flat cache\n", ft_type_name(kt), hd, n_same,
           FT_ARRAY_LEN(cases));
    free(k);
    free(v);
    ft_cuda_free(table_dev);
    ft_cuda_free(flat_k.data);
    ft_cuda_free(flat_v.data);
    ft_cuda_free(pk.data);
    ft_cuda_free(pv.data);
    pair_free(&p);
}

// Qwen3's RoPE over whole heads of hd (NeoX pairs, base 1e6), as the decode tests apply it.
static ft_rope_params decode_rope(int hd) {
    return (ft_rope_params){.n_rot = hd, .neox = true, .freq_base = 1e6f, .freq_scale = 1, .attn_factor = 1,
                            .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096};
}

// The bytes of two ways' K and V caches (kc[0], kc[1], vc[0], vc[1]) into host copies c[0..3]
// (ft_malloc'd, freed by the caller), after the device is done with them.
static void caches_to_host(const ft_tensor kc[2], const ft_tensor vc[2], uint8_t *c[4]) {
    const ft_tensor *ct[4] = {&kc[0], &kc[1], &vc[0], &vc[1]};
    ft_cuda_device_sync();
    for (int i = 0; i < 4; i++) {
        c[i] = ft_malloc(ct[i]->mat_bytes);
        ft_cuda_memcpy_d2h(c[i], ct[i]->data, ct[i]->mat_bytes, NULL);
    }
    ft_cuda_device_sync();
}

// A decode step's per-head norms, ropes and cache rows as the backend runs them (the rows of k
// and v written by the norm+rope launch) against the same ops with an op between the ropes and
// the rows (separate launches): q, k and both caches to the bit, through a block table, for
// both cache types at several head sizes and token counts (positions crossing a block).
static void norm_rope_rows_case(int hd, enum ft_type kt, int n_tok) {
    const int nh = 8, nkv = 2, W = nkv * hd, store = 4 * FT_KV_BLOCK, pos0 = 2 * FT_KV_BLOCK - 2;
    pair p;
    if (!pair_init(&p, 8, nh * hd, store, hd, 0, 0)) return;
    const int32_t table[4] = {3, 0, 2, 1};
    int32_t *table_dev = ft_cuda_malloc(sizeof(table));
    ft_cuda_memcpy_h2d(table_dev, table, sizeof(table), NULL);
    ft_tensor qw_h = host_tensor(&p.rng, FT_TYPE_F32, hd, 1, 1, 1.0f), kw_h = host_tensor(&p.rng, FT_TYPE_F32, hd, 1, 1, 1.0f);
    ft_tensor qw = dev_tensor(&qw_h), kw = dev_tensor(&kw_h);
    const size_t QN = (size_t)n_tok * nh * hd, KN = (size_t)n_tok * W;
    float *q = randn(&p.rng, QN, 1.0f), *k = randn(&p.rng, KN, 1.0f), *v = randn(&p.rng, KN, 1.0f);
    const ft_rope_params rp = decode_rope(hd);
    float *qb[2], *kb[2], *vb[2], *dummy = gpu_buf(&p, q, 32);
    ft_tensor kc[2], vc[2];
    for (int way = 0; way < 2; way++) { // 0: as a step runs them; 1: an add between ropes and rows
        qb[way] = gpu_buf(&p, q, QN);
        kb[way] = gpu_buf(&p, k, KN);
        vb[way] = gpu_buf(&p, v, KN);
        kc[way] = cache_tensor(kt, W, store, true);
        vc[way] = cache_tensor(kt, W, store, true);
        ft_backend *g = p.gpu;
        g->ops->rms_norm(g, qb[way], &qw, qb[way], n_tok * nh, hd, 1e-6f);
        g->ops->rms_norm(g, kb[way], &kw, kb[way], n_tok * nkv, hd, 1e-6f);
        g->ops->rope(g, qb[way], n_tok, nh, hd, pos0, &rp);
        g->ops->rope(g, kb[way], n_tok, nkv, hd, pos0, &rp);
        if (way == 1) g->ops->add(g, dummy, dummy, 32);
        g->ops->set_rows(g, &kc[way], table_dev, pos0, kb[way], n_tok);
        g->ops->set_rows(g, &vc[way], table_dev, pos0, vb[way], n_tok);
    }
    float *q0 = gpu_read(&p, qb[0], QN), *q1 = gpu_read(&p, qb[1], QN); // (reads launch what waits)
    float *k0 = gpu_read(&p, kb[0], KN), *k1 = gpu_read(&p, kb[1], KN);
    size_t cb = kc[0].mat_bytes;
    uint8_t *c[4];
    caches_to_host(kc, vc, c);
    bool same_q = !memcmp(q0, q1, QN * sizeof(float)), same_k = !memcmp(k0, k1, KN * sizeof(float));
    bool same_kc = !memcmp(c[0], c[1], cb), same_vc = !memcmp(c[2], c[3], cb);
    size_t written = 0; // (the rows were written at all: some byte differs from the zeroed cache)
    for (size_t i = 0; i < cb; i++) written += c[0][i] != 0 && c[2][i] != 0;
    CHECK(same_q && same_k && same_kc && same_vc && written > 0,
          "%s hd %d n_tok %d: q %d, k %d, k cache %d, v cache %d equal; %zu bytes written", ft_type_name(kt), hd, n_tok,
          same_q, same_k, same_kc, same_vc, written);
    for (int i = 0; i < 4; i++) free(c[i]);
    for (int way = 0; way < 2; way++) {
        ft_cuda_free(kc[way].data);
        ft_cuda_free(vc[way].data);
    }
    free(q0), free(q1), free(k0), free(k1), free(q), free(k), free(v);
    free(qw_h.data), free(kw_h.data);
    ft_cuda_free(qw.data);
    ft_cuda_free(kw.data);
    ft_cuda_free(table_dev);
    pair_free(&p);
}

TEST(cuda_op_norm_rope_rows) {
    GPU_TEST_REQUIRE_DEVICE();
    const int hds[3] = {64, 128, 256}, toks[3] = {1, 3, 8};
    for (int t = 0; t < 2 && !test_failed(); t++)
        for (int h = 0; h < 3; h++)
            for (int n = 0; n < 3; n++) norm_rope_rows_case(hds[h], t ? FT_TYPE_Q8_0 : FT_TYPE_F16, toks[n]);
    printf("    norm+rope with the cache rows in its launch: f16 and q8_0, heads of 64/128/256, 1/3/8 tokens\n");
}

TEST(cuda_op_paged_attention) {
    GPU_TEST_REQUIRE_DEVICE();
    paged_attention_case(128, FT_TYPE_F16);
    paged_attention_case(128, FT_TYPE_Q8_0);
    paged_attention_case(64, FT_TYPE_F16);
}

// Causal attention of n queries from pos0 over the cache rows k, v (the values the cache holds),
// the query rounded to f16 as the f16 dot product takes it, in double.
static float *attention_exact(const float *q, const float *k, const float *v, int n, int pos0, int nh, int nkv,
                              int hd, int window) {
    float *out = ft_malloc((size_t)n * nh * hd * sizeof(float));
    double *s = ft_malloc((size_t)(pos0 + n) * sizeof(double)), *o = ft_malloc((size_t)hd * sizeof(double));
    const int W = nkv * hd;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            const float *qh = q + ((size_t)t * nh + h) * hd;
            const int hk = h / (nh / nkv), qpos = pos0 + t, kmin = window > 0 ? FT_MAX(0, qpos - window + 1) : 0;
            double m = -INFINITY, l = 0;
            for (int j = kmin; j <= qpos; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)ft_fp16_to_fp32(ft_fp32_to_fp16(qh[i])) * k[(size_t)j * W + hk * hd + i];
                s[j] = d / sqrt((double)hd);
                m = fmax(m, s[j]);
            }
            for (int i = 0; i < hd; i++) o[i] = 0;
            for (int j = kmin; j <= qpos; j++) {
                const double e = exp(s[j] - m);
                l += e;
                for (int i = 0; i < hd; i++) o[i] += e * v[(size_t)j * W + hk * hd + i];
            }
            for (int i = 0; i < hd; i++) out[((size_t)t * nh + h) * hd + i] = (float)(o[i] / l);
        }
    free(s);
    free(o);
    return out;
}

// Decode attention at depth: the keys split over many CTAs, each KV head's query rows in CTAs of
// 16 (one token's heads, or the heads of several tokens), f16 and q8_0 caches; against the CPU op.
static void attention_depth_case(int hd, int nh, int nkv, enum ft_type kt) {
    const int n_ctx = 5200, filled = 5000, W = nkv * hd;
    pair p;
    if (!pair_init(&p, 8, nh * hd, n_ctx, hd, 0, 0)) return;
    ft_tensor ck = cache_tensor(kt, W, n_ctx, false), cv = cache_tensor(kt, W, n_ctx, false);
    ft_tensor gk = cache_tensor(kt, W, n_ctx, true), gv = cache_tensor(kt, W, n_ctx, true);
    const int chunk = 500;
    float *k = randn(&p.rng, (size_t)filled * W, 1.0f), *v = randn(&p.rng, (size_t)filled * W, 1.0f);
    for (int r0 = 0; r0 < filled; r0 += chunk) {
        const float *kc = k + (size_t)r0 * W, *vc = v + (size_t)r0 * W;
        p.cpu->ops->set_rows(p.cpu, &ck, NULL, r0, cpu_buf(&p, kc, (size_t)chunk * W), chunk);
        p.cpu->ops->set_rows(p.cpu, &cv, NULL, r0, cpu_buf(&p, vc, (size_t)chunk * W), chunk);
        p.gpu->ops->set_rows(p.gpu, &gk, NULL, r0, gpu_buf(&p, kc, (size_t)chunk * W), chunk);
        p.gpu->ops->set_rows(p.gpu, &gv, NULL, r0, gpu_buf(&p, vc, (size_t)chunk * W), chunk);
    }
    if (kt == FT_TYPE_F16) // what the cache holds
        for (size_t i = 0; i < (size_t)filled * W; i++) {
            k[i] = ft_fp16_to_fp32(ft_fp32_to_fp16(k[i]));
            v[i] = ft_fp16_to_fp32(ft_fp32_to_fp16(v[i]));
        }
    // one token deep in the cache, at a split boundary's neighbourhood, several tokens, a
    // window (one token, and several whose rows share a CTA), a context short enough not to split
    struct { int n_tok, pos0, window;
    } cases[] = {{1, 4999, 0},    {1, 4095, 0}, {3, 4990, 0}, {8, 4992, 0}, {1, 4999, 1000},
                 {5, 4990, 1000}, {8, 32, 8},   {8, 4992, 8}, {1, 40, 0},   {2, 700, 0}};
    for (size_t ci = 0; ci < FT_ARRAY_LEN(cases); ci++) {
        int n = cases[ci].n_tok;
        size_t QN = (size_t)n * nh * hd;
        float *q = randn(&p.rng, QN, 1.0f), *co, *go;
        attention_both(&p, (const ft_tensor *[4]){&ck, &cv, &gk, &gv}, NULL, q, n, cases[ci].pos0, nh, nkv, hd,
                       cases[ci].window, &co, &go);
        char what[128];
        snprintf(what, sizeof(what), "attention %s hd %d heads %d/%d n_tok %d pos0 %d window %d", ft_type_name(kt), hd,
                 nh, nkv, n, cases[ci].pos0, cases[ci].window);
        // the CPU op keeps an f16 cache's running sum of values in f16, as llama.cpp does; the
        // GPU sums in float: against it within that rounding, and against the exact attention
        // of the cache's values (q f16-rounded, in double) within float's
        compare(&p, what, go, co, QN, kt == FT_TYPE_F16 ? 4e-2 : 1e-4);
        if (kt == FT_TYPE_F16) {
            float *exact = attention_exact(q, k, v, n, cases[ci].pos0, nh, nkv, hd, cases[ci].window);
            float *h = gpu_read(&p, go, QN);
            double e = rel_err(h, exact, QN);
            printf("    %-40s err %.3g against the exact attention (tol 1e-4)\n", what, e);
            CHECK(e <= 1e-4, "%s: error %.3g against the exact attention", what, e);
            free(h);
            free(exact);
        }
        free(q);
    }
    free(k);
    free(v);
    free(ck.data);
    free(cv.data);
    ft_cuda_free(gk.data);
    ft_cuda_free(gv.data);
    pair_free(&p);
}

TEST(cuda_op_attention_depth) {
    GPU_TEST_REQUIRE_DEVICE();
    enum ft_type kts[2] = {FT_TYPE_F16, FT_TYPE_Q8_0};
    // both forms of the decode kernel where the device has the deep one (a stage more a CTA)
    const bool deep = ft_cuda_attention_force_deep(true);
    for (int ki = 0; ki < (deep ? 4 : 2); ki++) {
        ft_cuda_attention_force_deep(ki < 2);
        attention_depth_case(128, 32, 4, kts[ki % 2]);  // Qwen3-30B-A3B: 8 query heads per KV head
        attention_depth_case(128, 16, 1, kts[ki % 2]);  // 16 per KV head
        attention_depth_case(128, 48, 2, kts[ki % 2]);  // 24: rows of 16 across heads
        attention_depth_case(64, 8, 8, kts[ki % 2]);    // one: a CTA's rows are tokens
        attention_depth_case(256, 16, 2, kts[ki % 2]);  // head 256
        attention_depth_case(64, 12, 4, kts[ki % 2]);   // 3
        attention_depth_case(128, 4, 2, kts[ki % 2]);   // 2 (laguna's test shape): 8 tokens a CTA
    }
    ft_cuda_attention_force_deep(true);
}

// A step of several sequences' decode rows in one call of each op (rope_seqs, set_rows_seqs,
// attention's seqs: one token of each, each at its own position through its own block table of
// one store), against the same rows sequence by sequence: q, k and both caches to the bit
// (per-head norms before the ropes, so the launches fuse as in a step), the attention outputs
// within float summation order (the keys split over all the sequences' CTAs, not each one's).
static void attention_seqs_case(int hd, enum ft_type kt, int n, int window) {
    const int nh = 8, nkv = 2, W = nkv * hd, per = 40; // blocks of each sequence's table
    const int store = n * per * FT_KV_BLOCK;
    pair p;
    if (!pair_init(&p, FT_MAX(n, 8), nh * hd, per * FT_KV_BLOCK, hd, 0, 0)) return;
    int32_t *tables = ft_malloc((size_t)n * per * sizeof(int32_t)), *pos = ft_malloc((size_t)n * sizeof(int32_t));
    // a permutation (37 is prime to every n * per here): the sequences' blocks interleave
    for (int i = 0; i < n * per; i++) tables[i] = (int32_t)((i * 37 + 3) % (n * per));
    int32_t *tables_dev = ft_cuda_malloc((size_t)n * per * sizeof(int32_t));
    ft_cuda_memcpy_h2d(tables_dev, tables, (size_t)n * per * sizeof(int32_t), NULL);
    const int32_t **blocks = ft_malloc((size_t)n * sizeof(int32_t *));
    for (int i = 0; i < n; i++) {
        blocks[i] = tables_dev + (size_t)i * per;
        pos[i] = (int)(((i + 1) * 977 + 13) % (per * FT_KV_BLOCK - 1)); // short and deep, across blocks
    }
    if (n > 2) pos[0] = 0; // a sequence's first token
    void *seqs_dev = ft_cuda_malloc((size_t)n * (sizeof(int32_t *) + sizeof(int32_t)));
    ft_cuda_memcpy_h2d(seqs_dev, blocks, (size_t)n * sizeof(int32_t *), NULL);
    int32_t *pos_dev = (int32_t *)((char *)seqs_dev + (size_t)n * sizeof(int32_t *));
    ft_cuda_memcpy_h2d(pos_dev, pos, (size_t)n * sizeof(int32_t), NULL);
    ft_seq_rows rows = {.n = n, .pos = pos_dev, .blocks = (const int32_t *const *)seqs_dev};
    ft_tensor kc[2], vc[2];
    for (int way = 0; way < 2; way++) {
        kc[way] = cache_tensor(kt, W, store, true);
        vc[way] = cache_tensor(kt, W, store, true);
    }
    // each sequence's keys before its token, the same in both stores
    for (int i = 0; i < n; i++) {
        if (!pos[i]) continue;
        float *k = randn(&p.rng, (size_t)pos[i] * W, 1.0f), *v = randn(&p.rng, (size_t)pos[i] * W, 1.0f);
        float *kb = gpu_buf(&p, k, (size_t)pos[i] * W), *vb = gpu_buf(&p, v, (size_t)pos[i] * W);
        for (int way = 0; way < 2; way++) {
            p.gpu->ops->set_rows(p.gpu, &kc[way], blocks[i], 0, kb, pos[i]);
            p.gpu->ops->set_rows(p.gpu, &vc[way], blocks[i], 0, vb, pos[i]);
        }
        free(k);
        free(v);
    }
    ft_tensor qw_h = host_tensor(&p.rng, FT_TYPE_F32, hd, 1, 1, 1.0f), kw_h = host_tensor(&p.rng, FT_TYPE_F32, hd, 1, 1, 1.0f);
    ft_tensor qw = dev_tensor(&qw_h), kw = dev_tensor(&kw_h);
    const size_t QN = (size_t)n * nh * hd, KN = (size_t)n * W;
    float *q = randn(&p.rng, QN, 1.0f), *k = randn(&p.rng, KN, 1.0f), *v = randn(&p.rng, KN, 1.0f);
    const ft_rope_params rp = decode_rope(hd);
    float *qb[2], *kb[2], *vb[2], *ob[2];
    ft_backend *g = p.gpu;
    for (int way = 0; way < 2; way++) { // 0: sequence by sequence; 1: the rows together
        qb[way] = gpu_buf(&p, q, QN);
        kb[way] = gpu_buf(&p, k, KN);
        vb[way] = gpu_buf(&p, v, KN);
        ob[way] = gpu_buf(&p, NULL, QN);
        ft_attn_params ap = {.k_cache = &kc[way], .v_cache = &vc[way], .n_tok = 1, .n_head = nh, .n_head_kv = nkv,
                             .head_dim = hd, .window = window, .scale = 1.0f / sqrtf((float)hd)};
        if (way == 0) {
            for (int i = 0; i < n; i++) {
                float *qi = qb[0] + (size_t)i * nh * hd, *ki = kb[0] + (size_t)i * W, *vi = vb[0] + (size_t)i * W;
                g->ops->rms_norm(g, qi, &qw, qi, nh, hd, 1e-6f);
                g->ops->rms_norm(g, ki, &kw, ki, nkv, hd, 1e-6f);
                g->ops->rope(g, qi, 1, nh, hd, pos[i], &rp);
                g->ops->rope(g, ki, 1, nkv, hd, pos[i], &rp);
                g->ops->set_rows(g, &kc[0], blocks[i], pos[i], ki, 1);
                g->ops->set_rows(g, &vc[0], blocks[i], pos[i], vi, 1);
                ap.q = qi;
                ap.out = ob[0] + (size_t)i * nh * hd;
                ap.pos0 = pos[i];
                ap.blocks = blocks[i];
                g->ops->attention(g, &ap);
            }
        } else {
            g->ops->rms_norm(g, qb[1], &qw, qb[1], n * nh, hd, 1e-6f);
            g->ops->rms_norm(g, kb[1], &kw, kb[1], n * nkv, hd, 1e-6f);
            g->ops->rope_seqs(g, qb[1], nh, hd, &rows, &rp);
            g->ops->rope_seqs(g, kb[1], nkv, hd, &rows, &rp);
            g->ops->set_rows_seqs(g, &kc[1], &rows, kb[1]);
            g->ops->set_rows_seqs(g, &vc[1], &rows, vb[1]);
            ap.q = qb[1];
            ap.out = ob[1];
            ap.n_tok = n;
            ap.seqs = &rows;
            g->ops->attention(g, &ap);
        }
    }
    float *q0 = gpu_read(&p, qb[0], QN), *q1 = gpu_read(&p, qb[1], QN), *k0 = gpu_read(&p, kb[0], KN),
          *k1 = gpu_read(&p, kb[1], KN), *o0 = gpu_read(&p, ob[0], QN), *o1 = gpu_read(&p, ob[1], QN);
    size_t cb = kc[0].mat_bytes;
    uint8_t *c[4];
    caches_to_host(kc, vc, c);
    bool same_q = !memcmp(q0, q1, QN * sizeof(float)), same_k = !memcmp(k0, k1, KN * sizeof(float));
    bool same_kc = !memcmp(c[0], c[1], cb), same_vc = !memcmp(c[2], c[3], cb);
    double e = rel_err(o1, o0, QN);
    bool same_o = !memcmp(o0, o1, QN * sizeof(float));
    // over an f16 cache, each sequence's output of both ways against its exact attention (q
    // rounded to f16, the cache's values, in double) within float's summation
    double ex[2] = {0, 0};
    for (int i = 0; i < n && kt == FT_TYPE_F16; i++) {
        const int nk = pos[i] + 1, kmin = window > 0 ? FT_MAX(0, pos[i] - window + 1) : 0;
        float *kr = ft_malloc((size_t)nk * W * sizeof(float)), *vr = ft_malloc((size_t)nk * W * sizeof(float));
        for (int j = 0; j < nk; j++) {
            size_t row = (size_t)tables[(size_t)i * per + j / FT_KV_BLOCK] * FT_KV_BLOCK + j % FT_KV_BLOCK;
            const ft_half *hk = (const ft_half *)(c[1] + row * kc[1].row_bytes), *hv = (const ft_half *)(c[3] + row * vc[1].row_bytes);
            for (int d = 0; d < W; d++) {
                kr[(size_t)j * W + d] = j < kmin ? 0.0f : ft_fp16_to_fp32(hk[d]);
                vr[(size_t)j * W + d] = j < kmin ? 0.0f : ft_fp16_to_fp32(hv[d]);
            }
        }
        float *xo = attention_exact(q1 + (size_t)i * nh * hd, kr, vr, 1, pos[i], nh, nkv, hd, window);
        for (int way = 0; way < 2; way++) {
            double ei = rel_err((way ? o1 : o0) + (size_t)i * nh * hd, xo, (size_t)nh * hd);
            ex[way] = fmax(ex[way], ei);
            if (ei > 1e-4) printf("      sequence %d at %d: way %d err %.3g against the exact attention\n", i, pos[i], way, ei);
        }
        free(kr), free(vr), free(xo);
    }
    printf("    %d sequences %s hd %d window %d: q, k, caches equal %d %d %d %d; attention err %.3g%s; against the "
           "exact %.3g, %.3g\n", n, ft_type_name(kt), hd, window, same_q, same_k, same_kc, same_vc, e,
           same_o ? " (bit-identical)" : "", ex[0], ex[1]);
    CHECK(ex[0] <= 1e-4 && ex[1] <= 1e-4, "%d sequences hd %d: against the exact attention %.3g, %.3g", n, hd, ex[0], ex[1]);
    CHECK(same_q && same_k && same_kc && same_vc, "%d sequences %s hd %d: rows differ from sequence by sequence", n,
          ft_type_name(kt), hd);
    CHECK(e <= 1e-5, "%d sequences %s hd %d window %d: attention differs by %.3g", n, ft_type_name(kt), hd, window, e);
    for (int i = 0; i < 4; i++) free(c[i]);
    for (int way = 0; way < 2; way++) {
        ft_cuda_free(kc[way].data);
        ft_cuda_free(vc[way].data);
    }
    free(q0), free(q1), free(k0), free(k1), free(o0), free(o1), free(q), free(k), free(v);
    free(qw_h.data), free(kw_h.data);
    ft_cuda_free(qw.data);
    ft_cuda_free(kw.data);
    ft_cuda_free(tables_dev);
    ft_cuda_free(seqs_dev);
    free(tables), free(pos), free(blocks);
    pair_free(&p);
}

TEST(cuda_op_attention_seqs) {
    GPU_TEST_REQUIRE_DEVICE();
    enum ft_type kts[2] = {FT_TYPE_F16, FT_TYPE_Q8_0};
    for (int ki = 0; ki < 2; ki++) {
        attention_seqs_case(128, kts[ki], 2, 0);
        attention_seqs_case(128, kts[ki], 7, 0);
        attention_seqs_case(128, kts[ki], 32, 0);
        attention_seqs_case(128, kts[ki], 5, 300);
        attention_seqs_case(64, kts[ki], 9, 0);
        attention_seqs_case(256, kts[ki], 4, 0);
        attention_seqs_case(96, kts[ki], 6, 0); // the general kernel (no decode kernel for 96)
        attention_seqs_case(96, kts[ki], 1, 0);
        attention_seqs_case(96, kts[ki], 2, 0);
    }
}

// The dense FFN (a shared expert) and its sigmoid gate: gate and up of two types (matmuls and
// the element-wise activation) and of one type (decode sizes take the experts' fused GLU kernel,
// which writes h's q8_1 for down), each against the CPU.
TEST(cuda_op_ffn) {
    GPU_TEST_REQUIRE_DEVICE();
    const int E = 256, F = 512;
    pair p;
    if (!pair_init(&p, 24, F, 16, 64, 0, 0)) return;
    enum ft_type kinds[3][3] = {
        {FT_TYPE_Q8_0, FT_TYPE_Q4_K, FT_TYPE_Q6_K},
        {FT_TYPE_Q4_K, FT_TYPE_Q4_K, FT_TYPE_Q6_K},
        {FT_TYPE_Q8_0, FT_TYPE_Q8_0, FT_TYPE_Q8_0},
    };
    ft_tensor gi = host_tensor(&p.rng, FT_TYPE_F32, E, 1, 1, 0.1f), dgi = dev_tensor(&gi);
    for (int ki = 0; ki < 3; ki++) {
        ft_tensor g = host_tensor(&p.rng, kinds[ki][0], E, F, 1, 0.05f), u = host_tensor(&p.rng, kinds[ki][1], E, F, 1, 0.05f),
                  d = host_tensor(&p.rng, kinds[ki][2], F, E, 1, 0.05f);
        ft_tensor dg = dev_tensor(&g), du = dev_tensor(&u), dd = dev_tensor(&d);
        int toks[] = {1, 3, 8, 24};
        for (size_t k = 0; k < FT_ARRAY_LEN(toks); k++) {
            int n = toks[k];
            size_t N = (size_t)n * E;
            float *x = randn(&p.rng, N, 1.0f), *s = randn(&p.rng, N, 1.0f);
            float *cx = cpu_buf(&p, x, N), *cy = cpu_buf(&p, NULL, N), *gx = gpu_buf(&p, x, N), *gy = gpu_buf(&p, NULL, N);
            p.cpu->ops->ffn(p.cpu, &g, &u, &d, cx, cy, n, FT_GLU_SILU);
            p.gpu->ops->ffn(p.gpu, &dg, &du, &dd, gx, gy, n, FT_GLU_SILU);
            char what[80];
            snprintf(what, sizeof(what), "ffn %s/%s/%s n_tok %d", ft_type_name(kinds[ki][0]), ft_type_name(kinds[ki][1]),
                     ft_type_name(kinds[ki][2]), n);
            compare(&p, what, gy, cy, N, 3e-2);
            if (ki == 0) {
                float *cs = cpu_buf(&p, s, N), *gs = gpu_buf(&p, s, N), *cz = cpu_buf(&p, x, N), *gz = gpu_buf(&p, x, N);
                p.cpu->ops->sigmoid_gate_add(p.cpu, &gi, cx, cs, cz, n, E);
                p.gpu->ops->sigmoid_gate_add(p.gpu, &dgi, gx, gs, gz, n, E);
                snprintf(what, sizeof(what), "sigmoid_gate_add n_tok %d", n);
                compare(&p, what, gz, cz, N, 1e-5);
            }
            free(x);
            free(s);
        }
        free(g.data); free(u.data); free(d.data);
        ft_cuda_free(dg.data); ft_cuda_free(du.data); ft_cuda_free(dd.data);
    }
    free(gi.data);
    ft_cuda_free(dgi.data);
    pair_free(&p);
}

// qwen35moe's gated DeltaNet tail and attention output gate: a per-head norm in place then the
// gate (one launch on the GPU, which also writes the gated rows' q8_1), or the gate alone, then
// the output projection reading that q8_1; and two float matmuls of one input (alpha and beta:
// one launch). Each against the CPU.
TEST(cuda_op_gated_norm_then_matmul) {
    GPU_TEST_REQUIRE_DEVICE();
    const int H = 8, hd = 128, W = H * hd, E = 256;
    pair p;
    if (!pair_init(&p, 8, W, 16, 64, 0, 0)) return;
    ft_tensor nw = host_tensor(&p.rng, FT_TYPE_F32, hd, 1, 1, 1.0f), dnw = dev_tensor(&nw);
    ft_tensor wo = host_tensor(&p.rng, FT_TYPE_Q8_0, W, E, 1, 0.05f), dwo = dev_tensor(&wo);
    ft_tensor fa[2], fb[2], dfa[2], dfb[2];
    for (int fi = 0; fi < 2; fi++) {
        enum ft_type t = fi ? FT_TYPE_BF16 : FT_TYPE_F32;
        fa[fi] = host_tensor(&p.rng, t, E, H, 1, 0.1f), dfa[fi] = dev_tensor(&fa[fi]);
        fb[fi] = host_tensor(&p.rng, t, E, 2 * H, 1, 0.1f), dfb[fi] = dev_tensor(&fb[fi]);
    }
    int toks[] = {1, 3, 8};
    for (size_t k = 0; k < FT_ARRAY_LEN(toks); k++) {
        int n = toks[k];
        size_t N = (size_t)n * W;
        // (norm, act, gate per element): DeltaNet's SiLU per element; a sigmoid per head; the gate alone
        struct { bool norm; enum ft_act act; bool per_elem; } cases[] = {
            {true, FT_ACT_SILU, true}, {true, FT_ACT_SIGMOID, false}, {false, FT_ACT_SIGMOID, false}};
        for (size_t ci = 0; ci < FT_ARRAY_LEN(cases); ci++) {
            int gw = cases[ci].per_elem ? W : H;
            float *x = randn(&p.rng, N, 1.0f), *g = randn(&p.rng, (size_t)n * gw, 1.0f);
            float *cx = cpu_buf(&p, x, N), *gx = gpu_buf(&p, x, N);
            float *cg = cpu_buf(&p, g, (size_t)n * gw), *gg = gpu_buf(&p, g, (size_t)n * gw);
            float *cy = cpu_buf(&p, NULL, (size_t)n * E), *gy = gpu_buf(&p, NULL, (size_t)n * E);
            if (cases[ci].norm) {
                p.cpu->ops->rms_norm(p.cpu, cx, &nw, cx, n * H, hd, 1e-6f);
                p.gpu->ops->rms_norm(p.gpu, gx, &dnw, gx, n * H, hd, 1e-6f);
            }
            p.cpu->ops->gate_mul(p.cpu, cx, cg, n, H, hd, gw, cases[ci].act);
            p.gpu->ops->gate_mul(p.gpu, gx, gg, n, H, hd, gw, cases[ci].act);
            p.cpu->ops->matmul(p.cpu, &wo, cx, cy, n);
            p.gpu->ops->matmul(p.gpu, &dwo, gx, gy, n);
            char what[80];
            snprintf(what, sizeof(what), "%sgate %s n_tok %d", cases[ci].norm ? "norm + " : "",
                     cases[ci].per_elem ? "per element" : "per head", n);
            compare(&p, what, gx, cx, N, 1e-5);
            snprintf(what, sizeof(what), "  then q8_0 matmul n_tok %d", n);
            compare(&p, what, gy, cy, (size_t)n * E, 2e-2);
            free(x);
            free(g);
        }
        // two float matrices of one input, f32 then bf16 (tolerance: the CPU's bf16 dot rounds x)
        for (int fi = 0; fi < 2; fi++) {
            const ft_tensor *a = &fa[fi], *b = &fb[fi], *da = &dfa[fi], *db = &dfb[fi];
            float *x = randn(&p.rng, (size_t)n * E, 1.0f);
            float *cx = cpu_buf(&p, x, (size_t)n * E), *gx = gpu_buf(&p, x, (size_t)n * E);
            float *ca = cpu_buf(&p, NULL, (size_t)n * H), *ga = gpu_buf(&p, NULL, (size_t)n * H);
            float *cb = cpu_buf(&p, NULL, (size_t)n * 2 * H), *gb = gpu_buf(&p, NULL, (size_t)n * 2 * H);
            p.cpu->ops->matmul(p.cpu, a, cx, ca, n);
            p.cpu->ops->matmul(p.cpu, b, cx, cb, n);
            p.gpu->ops->matmul(p.gpu, da, gx, ga, n);
            p.gpu->ops->matmul(p.gpu, db, gx, gb, n);
            char what[80];
            double tol = fi ? 1.6e-2 : 1e-5;
            snprintf(what, sizeof(what), "%s matmul, first of two, n_tok %d", fi ? "bf16" : "f32", n);
            compare(&p, what, ga, ca, (size_t)n * H, tol);
            snprintf(what, sizeof(what), "%s matmul, second of two, n_tok %d", fi ? "bf16" : "f32", n);
            compare(&p, what, gb, cb, (size_t)n * 2 * H, tol);
            free(x);
        }
    }
    free(nw.data); free(wo.data);
    ft_cuda_free(dnw.data); ft_cuda_free(dwo.data);
    for (int fi = 0; fi < 2; fi++) {
        free(fa[fi].data), free(fb[fi].data);
        ft_cuda_free(dfa[fi].data), ft_cuda_free(dfb[fi].data);
    }
    pair_free(&p);
}

TEST(cuda_op_moe_ffn) {
    GPU_TEST_REQUIRE_DEVICE();
    const int E = 256, F = 256, NE = 16, K = 4;
    pair p;
    if (!pair_init(&p, 40, F, 16, 64, NE, K)) return;
    ft_tensor router = host_tensor(&p.rng, FT_TYPE_F32, E, NE, 1, 0.1f), drouter = dev_tensor(&router);
    ft_tensor bias = host_tensor(&p.rng, FT_TYPE_F32, NE, 1, 1, 0.1f), dbias = dev_tensor(&bias);
    // tolerances: K-quant banks 4e-2 (two matmuls each up to 1.2e-2 from q8_1 vs q8_K
    // activations, measured); q8_0 / bf16 banks 5e-3 (q8_0's activations agree to the code)
    struct { enum ft_type gu, down; double tol; } banks[2] = {{FT_TYPE_Q4_K, FT_TYPE_Q6_K, 4e-2}, {FT_TYPE_Q8_0, FT_TYPE_BF16, 5e-3}};
    bool tie_seen = false;      // a near tie so far: the two routers may have counted apart
    uint64_t n_sel[2] = {0, 0}; // selections made so far per block (tokens x K)
    for (int b = 0; b < 2; b++) {
        ft_tensor g = host_tensor(&p.rng, banks[b].gu, E, F, NE, 0.05f), u = host_tensor(&p.rng, banks[b].gu, E, F, NE, 0.05f),
                  d = host_tensor(&p.rng, banks[b].down, F, E, NE, 0.05f);
        ft_tensor dg = dev_tensor(&g), du = dev_tensor(&u), dd = dev_tensor(&d);
        for (int mode = 0; mode < 2; mode++) {
            ft_moe_params mp = {.layer = mode, .router = &router, .gate_exps = &g, .up_exps = &u, .down_exps = &d, .n_expert = NE,
                                .n_expert_used = K, .gating = mode ? FT_GATING_SIGMOID : FT_GATING_SOFTMAX,
                                .norm_w = true, .w_scale = mode ? 2.5f : 0.0f, .sel_bias = mode ? &bias : NULL};
            ft_moe_params gp = mp;
            gp.router = &drouter;
            gp.gate_exps = &dg;
            gp.up_exps = &du;
            gp.down_exps = &dd;
            gp.sel_bias = mode ? &dbias : NULL;
            int toks[] = {1, 3, 40};
            for (size_t k = 0; k < FT_ARRAY_LEN(toks); k++) {
                int n = toks[k];
                size_t N = (size_t)n * E;
                float *x = randn(&p.rng, N, 1.0f);
                float *cx = cpu_buf(&p, x, N), *cy = cpu_buf(&p, NULL, N), *gx = gpu_buf(&p, x, N), *gy = gpu_buf(&p, NULL, N);
                p.cpu->min_route_gap = INFINITY;
                p.gpu->min_route_gap = INFINITY;
                p.cpu->ops->moe_ffn(p.cpu, &mp, cx, cy, n);
                p.gpu->ops->moe_ffn(p.gpu, &gp, gx, gy, n);
                char what[96];
                snprintf(what, sizeof(what), "moe_ffn %s/%s %s n_tok %d", ft_type_name(banks[b].gu), ft_type_name(banks[b].down),
                         mode ? "sigmoid+bias" : "softmax", n);
                float *h = gpu_read(&p, gy, N); // also folds the device's routing gap in
                double e = rel_err(h, cy, N);
                bool near_tie = p.cpu->min_route_gap < 1e-4f;
                printf("    %-40s err %.3g (tol %.3g), routing gap cpu %.3g gpu %.3g%s\n", what, e, banks[b].tol, p.cpu->min_route_gap,
                       p.gpu->min_route_gap, near_tie ? " (near tie: not checked)" : "");
                if (!near_tie) {
                    CHECK(e <= banks[b].tol, "%s: error %.3g", what, e);
                    CHECK(fabsf(p.gpu->min_route_gap - p.cpu->min_route_gap) < 1e-3f, "%s: routing gap", what);
                }
                // the route counters (cumulative over the calls, block = mode): the CPU's, expert
                // by expert, until a near tie may have routed a token otherwise; the totals always
                tie_seen |= near_tie;
                uint64_t cc[2 * 16], gc[2 * 16]; // (NE is 16)
                p.cpu->ops->route_counts(p.cpu, cc);
                p.gpu->ops->route_counts(p.gpu, gc);
                for (int l = 0; l < 2; l++) {
                    uint64_t cs = 0, gs = 0;
                    for (int ex = 0; ex < NE; ex++) {
                        cs += cc[l * NE + ex], gs += gc[l * NE + ex];
                        if (!tie_seen)
                            CHECK(gc[l * NE + ex] == cc[l * NE + ex], "%s: block %d expert %d counted %llu, the CPU %llu",
                                  what, l, ex, (unsigned long long)gc[l * NE + ex], (unsigned long long)cc[l * NE + ex]);
                    }
                    CHECK(gs == cs, "%s: block %d: %llu selections counted, the CPU %llu", what, l,
                          (unsigned long long)gs, (unsigned long long)cs);
                    n_sel[l] += l == mode ? (uint64_t)n * K : 0;
                    CHECK(cs == n_sel[l], "%s: block %d: the CPU counted %llu of %llu", what, l, (unsigned long long)cs,
                          (unsigned long long)n_sel[l]);
                }
                free(h);
                free(x);
            }
        }
        free(g.data); free(u.data); free(d.data);
        ft_cuda_free(dg.data); ft_cuda_free(du.data); ft_cuda_free(dd.data);
    }
    free(router.data); free(bias.data);
    ft_cuda_free(drouter.data); ft_cuda_free(dbias.data);
    pair_free(&p);
}

// A decode batch's MoE FFN (several sequences' tokens in one step, below the GEMM's threshold)
// against each token's FFN alone: to the bit for a batch the router's matvec takes (up to 8
// tokens: the same routing bits), within 1e-5 for 20 tokens (the router's float GEMM rounds the
// logits otherwise); K-quant and q8_0 banks, the tokens sharing experts (16 experts, top-4).
TEST(cuda_op_moe_ffn_batch_equals_alone) {
    GPU_TEST_REQUIRE_DEVICE();
    const int E = 256, F = 256, NE = 16, K = 4;
    pair p;
    if (!pair_init(&p, 40, F, 16, 64, NE, K)) return;
    ft_tensor router = host_tensor(&p.rng, FT_TYPE_F32, E, NE, 1, 0.1f), drouter = dev_tensor(&router);
    enum ft_type types[2][2] = {{FT_TYPE_Q4_K, FT_TYPE_Q6_K}, {FT_TYPE_Q8_0, FT_TYPE_Q8_0}};
    for (int b = 0; b < 2; b++) {
        ft_tensor g = host_tensor(&p.rng, types[b][0], E, F, NE, 0.05f), u = host_tensor(&p.rng, types[b][0], E, F, NE, 0.05f),
                  d = host_tensor(&p.rng, types[b][1], F, E, NE, 0.05f);
        ft_tensor dg = dev_tensor(&g), du = dev_tensor(&u), dd = dev_tensor(&d);
        ft_moe_params mp = {.router = &drouter, .gate_exps = &dg, .up_exps = &du, .down_exps = &dd, .n_expert = NE,
                            .n_expert_used = K, .gating = FT_GATING_SOFTMAX, .norm_w = true};
        const int toks[2] = {5, 20};
        for (int k = 0; k < 2; k++) {
            int n = toks[k];
            size_t N = (size_t)n * E;
            float *x = randn(&p.rng, N, 1.0f);
            float *gx = gpu_buf(&p, x, N), *gy = gpu_buf(&p, NULL, N), *g1 = gpu_buf(&p, NULL, N);
            p.gpu->ops->moe_ffn(p.gpu, &mp, gx, gy, n);
            for (int t = 0; t < n; t++) p.gpu->ops->moe_ffn(p.gpu, &mp, gx + (size_t)t * E, g1 + (size_t)t * E, 1);
            float *hb = gpu_read(&p, gy, N), *ha = gpu_read(&p, g1, N);
            double e = rel_err(hb, ha, N);
            bool same = !memcmp(hb, ha, N * sizeof(float));
            printf("    moe_ffn %s/%s, %d tokens together against each alone: err %.3g%s\n", ft_type_name(types[b][0]),
                   ft_type_name(types[b][1]), n, e, same ? " (bit-identical)" : "");
            if (n <= FT_CUDA_MATVEC_MAX_TOK) CHECK(same, "%d tokens: grouped differs from alone by %.3g", n, e);
            else CHECK(e <= 1e-5, "%d tokens: grouped differs from alone by %.3g", n, e);
            free(x), free(hb), free(ha);
        }
        free(g.data); free(u.data); free(d.data);
        ft_cuda_free(dg.data); ft_cuda_free(du.data); ft_cuda_free(dd.data);
    }
    free(router.data);
    ft_cuda_free(drouter.data);
    pair_free(&p);
}

// ---------------------------------------------------------------------------------------------
// Whole models: the engine on --device cuda against --device cpu

// Steps judged and steps stable, over the whole-model cases of one test.
static int g_model_steps, g_model_stable;

// One whole-model case: the prompt in steps of n_batch tokens, then 3 decoded tokens.
typedef struct model_opts {
    const char *arch;
    bool strict;    // q8_0 weights and KV (else q4_K experts, f16 KV)
    bool swa_yarn;  // laguna: sliding windows of 8 and YaRN
    bool bf16_tail; // 4 layers, the last with BF16 experts (laguna, glm4moe: after a dense lead,
                    // 2 quantized MoE layers); gemma4: Gemma-4-26B-A4B's heads (512 and 256), f32
    int n_batch;    // 16: matvec kernels (more than 8 tokens per matmul); 64: the GEMMs
    int n_prompt;   // at most 120
} model_opts;

// gemma4 as test_conformance_archs.c's models: 6 layers, two of every three sliding (a window of
// 16, past which the prompts run) with heads of 64 and 4 KV heads on a RoPE base of their own, the
// full ones with heads of 128, 2 KV heads and proportional RoPE (rope_freqs); the last 3 layers on
// the KV of layers 1 and 2; Q/K norms, V normed without weight; a dense GELU FFN beside top-2 GELU
// experts with per-expert down scales and the router on its own input; layer output scales; the
// logits soft-capped. heads_26b: Gemma-4-26B-A4B's attention (full heads of 512 over one KV head,
// RoPE over a quarter; sliding heads of 256; V as K's projection; gate and up fused), f32 weights.
static void gemma4_shape(ft_synth_params *sp, bool strict, bool heads_26b) {
    sp->n_layer = 6;
    sp->head_dim = 128;
    sp->head_dim_swa = 64;
    sp->n_head_kv_swa = 4;
    sp->n_rot = 64;
    sp->n_swa = 16;
    sp->swa_pattern = 3;
    sp->n_kv_shared = 3;
    sp->rope_freq_base = 1000000.0f;
    sp->rope_freq_base_swa = 10000.0f;
    sp->n_ff_shexp = 512;
    sp->final_softcap = 15.0f;
    sp->expert_down_scale = true;
    sp->layer_out_scale = true;
    if (!strict) fixture_expert_types(sp, "q4_K,q6_K,bf16,mxfp4,q4_K,q6_K", NULL);
    if (heads_26b) {
        sp->n_head = 8;
        sp->n_head_kv = 1;
        sp->head_dim = 512;
        sp->head_dim_swa = 256;
        sp->n_rot = 128;
        sp->k_eq_v = true;
        sp->fused_gate_up = true;
        sp->final_softcap = 30.0f;
        sp->dense_type = FT_TYPE_F32;
        fixture_expert_types(sp, "f32", NULL);
    }
}

static void model_case(const model_opts *o) {
    const char *arch = o->arch;
    bool strict = o->strict;
    enum ft_type kv_type = strict ? FT_TYPE_Q8_0 : FT_TYPE_F16;
    double tol = strict ? 3e-2 : 0.05;
    // the q8_0 KV rotation needs 64 | head_dim
    ft_synth_params sp = fixture_compare_params(arch, strcmp(arch, "qwen2moe") ? 128 : 64, strict);
    if (!strcmp(arch, "qwen35moe") || !strcmp(arch, "qwen3next"))
        sp.full_attn_interval = 2; // layers 0 and 2 linear, 1 attention
    if (!strcmp(arch, "laguna")) {
        if (o->swa_yarn) {
            sp.n_swa = 8;
            sp.yarn_factor = 4;
        }
    }
    if (!strcmp(arch, "gemma4")) gemma4_shape(&sp, strict, o->bf16_tail);
    else if (o->bf16_tail) fixture_bf16_tail(&sp, strict);
    const char *path = fixture_write(&sp, arch);
    if (!path) return;
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 128;
    ep.n_batch = o->n_batch;
    ep.kv_type = kv_type;
    ep.n_threads = 4;
    probs_reference ref;
    if (!probs_reference_init(&ref, path, &ep, strict ? 1e-5f : 1e-2f, &err)) {
        test_fail(__FILE__, __LINE__, "cpu reference: %s", err.msg);
        return;
    }
    ep.device = FT_PLACEMENT_CUDA;
    ft_model *mg = ft_model_load(path, &err);
    ft_engine *eg = NULL;
    if (mg) eg = ft_engine_init(mg, &ep, &err);
    if (!eg) {
        test_fail(__FILE__, __LINE__, "engine: %s", err.msg);
    } else {
        int n_vocab = mg->hp.n_vocab;
        int32_t prompt[120];
        FT_ASSERT(o->n_prompt <= 120);
        ft_rng r = ft_rng_init(7);
        for (int i = 0; i < o->n_prompt; i++) prompt[i] = (int32_t)(ft_rng_next(&r) % (uint64_t)n_vocab);
        char name[96];
        snprintf(name, sizeof(name), "%s %s%s%s, steps of %d", arch, strict ? "strict" : "realistic",
                 o->swa_yarn ? " swa+yarn" : "", o->bf16_tail ? " bf16 tail" : "", o->n_batch);
        // the prompt, then 3 decoded tokens; each step judged where the reference is stable
        double worst = 0, worst_unstable = 0;
        int32_t t = prompt[5];
        for (int step = 0; step < 4 && !test_failed(); step++) {
            const int32_t *in = step ? &t : prompt;
            int n = step ? 1 : o->n_prompt;
            bool stable = false;
            const float *lc = probs_reference_eval(&ref, in, n, tol, &stable, &err);
            const float *lg = lc ? ft_engine_eval(eg, in, n, &err) : NULL;
            if (!lg) {
                test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
                break;
            }
            char what[160];
            if (step) snprintf(what, sizeof(what), "%s: decode %d", name, step - 1);
            else snprintf(what, sizeof(what), "%s: prefill %d", name, o->n_prompt);
            double d = probs_compare(what, lc, lg, n_vocab, probs_step_tol(&ref, tol), stable);
            if (stable) worst = fmax(worst, d);
            else worst_unstable = fmax(worst_unstable, d);
            if (step) t = (t * 31 + 7) % n_vocab;
        }
        printf("    %-40s top-10 prob diff %.3g over %d stable steps of %d (tol %.3g; %.3g where the cpu is "
               "not stable), routing gap cpu %.3g gpu %.3g\n", name, worst, ref.n_stable, ref.n_steps, tol,
               worst_unstable, ft_engine_route_gap(ref.e[0]), ft_engine_route_gap(eg));
        fflush(stdout);
        g_model_steps += ref.n_steps;
        g_model_stable += ref.n_stable;
    }
    probs_reference_free(&ref);
    ft_engine_free(eg);
    ft_model_free(mg);
}

// Every architecture, strict and realistic, in steps of 16 (40 tokens) and of 64 (104).
// A test whose reference was too chaotic to judge most steps proves little: at least half of
// them must be stable.
static void arch_cases(const char *arch, bool swa_yarn, bool bf16_tail) {
    g_model_steps = g_model_stable = 0;
    for (int big = 0; big < 2; big++)
        for (int strict = 1; strict >= 0; strict--) {
            model_opts o = {arch, strict, swa_yarn, bf16_tail, big ? 64 : 16, big ? 104 : 40};
            model_case(&o);
        }
    CHECK(2 * g_model_stable >= g_model_steps, "%s: only %d of %d steps had a stable reference", arch, g_model_stable,
          g_model_steps);
}

TEST(cuda_model_qwen3moe) { GPU_TEST_REQUIRE_DEVICE(); arch_cases("qwen3moe", false, false); }
TEST(cuda_model_qwen2moe) { GPU_TEST_REQUIRE_DEVICE(); arch_cases("qwen2moe", false, false); }
TEST(cuda_model_qwen35moe) { GPU_TEST_REQUIRE_DEVICE(); arch_cases("qwen35moe", false, false); }
TEST(cuda_model_qwen3next) { GPU_TEST_REQUIRE_DEVICE(); arch_cases("qwen3next", false, false); }
TEST(cuda_model_llama) { GPU_TEST_REQUIRE_DEVICE(); arch_cases("llama", false, false); }
TEST(cuda_model_laguna) {
    GPU_TEST_REQUIRE_DEVICE();
    arch_cases("laguna", false, false);
    arch_cases("laguna", true, false);
}
TEST(cuda_model_laguna_bf16_tail) { GPU_TEST_REQUIRE_DEVICE(); arch_cases("laguna", false, true); }
// GLM-4.5's shape (fixture_glm4moe: dense lead, biases, Q/K norms, half-head rotary, an MTP
// block the device placement must leave in the file), then with a BF16 MoE layer last
// gpt-oss (fixture_gptoss: attention sinks, sliding windows of 8, YaRN, Q/K/V/O biases, the
// router's and experts' biases, softmax-weighted top 4, the clamped SwiGLU; mxfp4 and q4_K
// experts where not strict): the prompts run past the window
TEST(cuda_model_gptoss) {
    GPU_TEST_REQUIRE_DEVICE();
    arch_cases("gpt-oss", false, false);
}

// gemma4 (gemma4_shape): GELU, down scales, the router's input, soft-capping, output scales, the
// weightless V norm, proportional RoPE, shared KV; then with Gemma-4-26B-A4B's heads of 512.
TEST(cuda_model_gemma4) {
    GPU_TEST_REQUIRE_DEVICE();
    arch_cases("gemma4", false, false);
    arch_cases("gemma4", false, true);
}

TEST(cuda_model_glm4moe) {
    GPU_TEST_REQUIRE_DEVICE();
    arch_cases("glm4moe", false, false);
    arch_cases("glm4moe", false, true);
}
