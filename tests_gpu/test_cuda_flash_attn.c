// test_cuda_flash_attn.c: the CUDA backend's prefill attention (flash_attn.cu, taken by
// cuda_attention for batches of FT_CUDA_FLASH_MIN_TOK tokens or more at head dims 64, 128 and 256)
// against an exact attention in double precision over the same cache bytes, and against the
// CPU backend's op; each case through the backend's op (its dispatch) and through the launcher
// with the position in device memory (a replayed CUDA graph's way).
//
// Cases: f16 and q8_0 caches; 1, 4 and 8 query heads per KV head; head dims 64, 128 and 256 (K in halves);
// batches from position 0 and after cached tokens (pos0 > 0); sliding windows shorter than the
// batch; token counts that are not multiples of the kernel's tile (64 / group tokens). GPU
// outputs start as NaN, so an unwritten element fails.
//
// Error measure: max |gpu - ref| / max |ref| over the output. The reference's scores are the
// CPU op's definition: the f32 query dotted with the keys over an f16 cache; the query rounded
// through q8_0 over a q8_0 cache (the kernel then sums integer products exactly, as the CPU).
// Tolerances:
//   - against the double reference, 4e-3. The kernel rounds the softmax weights P and the
//     values (exact for f16, dequantized q8_0) to f16 and, over an f16 cache, the query, unit
//     roundoff u = 2^-11 = 4.9e-4; sums are f32. P's and V's rounding move an output, a convex
//     combination of values, by at most u * max |v| each: about 2e-3 of it for these N(0, 1)
//     values (max |v| about 4.5, max |ref| 0.4..3), far less on average since the errors are
//     independent; the query's rounding moves a score by u * scale * sum |q_d k_d| at worst,
//     a weight relatively as much. A host emulation of the kernel (one iteration per CUDA
//     thread, MMAs rebuilt from the PTX ISA's element formulas, f16 rounding as
//     __float2half_rn) gave at most 6.3e-4 on these cases (q8_0: 4.0e-4);
//   - against the CPU op as test_cuda_backend.c's attention: 2e-2 over an f16 cache (the CPU
//     keeps its value accumulator in f16 for batches under 64), 5e-3 over q8_0.
#include "gpu_test.h"
#include "../tests/fixtures.h"

#include "../src/backend/cpu/cpu.h"
#include "../src/backend/cuda/cuda.h"
#include "../src/backend/cuda/cuda_ops.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The launcher is called directly too (with the position in device memory, as a replayed CUDA
// graph passes it). Weak: a build without nvcc has no kernels, and skips before the calls.
#pragma weak ft_cuda_flash_attention
#pragma weak ft_cuda_flash_attention_fits

enum { N_KV = 2, N_CTX = 320 };

// The same bytes in device memory.
static ft_tensor dev_copy(const ft_tensor *h) {
    ft_tensor d = *h;
    d.data = ft_cuda_malloc(h->mat_bytes);
    FT_ASSERT(d.data);
    ft_cuda_memcpy_h2d(d.data, h->data, h->mat_bytes, NULL);
    ft_cuda_device_sync();
    d.placement = FT_PLACEMENT_CUDA;
    return d;
}

// Exact causal attention in double over the dequantized cache: out (n_tok, n_head * hd). With
// q8_q, each query row goes through q8_0 first, as the scores over a q8_0 cache are defined
// (the CPU's dot product of q8_0 keys with the query quantized to q8_0).
static void attention_exact(const ft_attn_params *p, bool q8_q, const float *kf, const float *vf, float *out) {
    int hd = p->head_dim, group = p->n_head / p->n_head_kv, W = p->n_head_kv * hd;
    double *w = ft_malloc(N_CTX * sizeof(double));
    float *q = ft_malloc((size_t)hd * sizeof(float));
    void *qb = ft_malloc(ft_row_bytes(FT_TYPE_Q8_0, hd));
    const ft_quant_ops *q8 = ft_quant_ops_find(FT_TYPE_Q8_0);
    for (int t = 0; t < p->n_tok; t++)
        for (int h = 0; h < p->n_head; h++) {
            memcpy(q, p->q + ((size_t)t * p->n_head + h) * hd, (size_t)hd * sizeof(float));
            if (q8_q) {
                q8->from_float_ref(q, qb, hd);
                q8->to_float(qb, q, hd);
            }
            int qpos = p->pos0 + t, kmin = p->window > 0 ? FT_MAX(0, qpos - p->window + 1) : 0;
            double mx = -INFINITY, sum = 0;
            for (int k = kmin; k <= qpos; k++) {
                const float *kr = kf + (size_t)k * W + (size_t)(h / group) * hd;
                double s = 0;
                for (int d = 0; d < hd; d++) s += (double)q[d] * kr[d];
                w[k] = s * p->scale;
                mx = fmax(mx, w[k]);
            }
            for (int k = kmin; k <= qpos; k++) sum += w[k] = exp(w[k] - mx);
            for (int d = 0; d < hd; d++) {
                double o = 0;
                for (int k = kmin; k <= qpos; k++) o += w[k] * vf[(size_t)k * W + (size_t)(h / group) * hd + d];
                out[((size_t)t * p->n_head + h) * hd + d] = (float)(o / sum);
            }
        }
    free(w);
    free(q);
    free(qb);
}

static double rel_err(const float *a, const float *ref, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e; // NaN: an unwritten element
        scale = fmax(scale, fabs(ref[i]));
    }
    return scale > 0 ? worst / scale : worst;
}

static void flash_case(ft_backend *cpu, ft_backend *gpu, ft_rng *rng, enum ft_type type, int hd) {
    const int W = N_KV * hd;
    // the cache: positions 0..N_CTX-1 written by the CPU op; the GPU gets the same bytes
    ft_tensor ck = fixture_kv_cache(type, W, N_CTX), cv = fixture_kv_cache(type, W, N_CTX);
    float *kf = ft_malloc((size_t)N_CTX * W * sizeof(float)), *vf = ft_malloc((size_t)N_CTX * W * sizeof(float));
    float *x = cpu->ops->alloc(cpu, (size_t)N_CTX * W);
    for (size_t i = 0; i < (size_t)N_CTX * W; i++) x[i] = ft_rng_normal(rng);
    cpu->ops->set_rows(cpu, &ck, NULL, 0, x, N_CTX);
    for (size_t i = 0; i < (size_t)N_CTX * W; i++) x[i] = ft_rng_normal(rng);
    cpu->ops->set_rows(cpu, &cv, NULL, 0, x, N_CTX);
    const ft_quant_ops *qo = ft_quant_ops_find(type);
    for (int r = 0; r < N_CTX; r++) {
        qo->to_float((const uint8_t *)ck.data + (size_t)r * ck.row_bytes, kf + (size_t)r * W, W);
        qo->to_float((const uint8_t *)cv.data + (size_t)r * cv.row_bytes, vf + (size_t)r * W, W);
    }
    ft_tensor gk = dev_copy(&ck), gv = dev_copy(&cv);
    int32_t *pos_dev = ft_cuda_malloc(sizeof(int32_t));
    FT_ASSERT(pos_dev);

    // (n_tok, pos0, window): from 0; after cached tokens; the smallest batch the kernel takes;
    // windows shorter than the batch; a batch of several tiles at every group size
    struct { int n_tok, pos0, window; } cases[] = {
        {37, 0, 0}, {100, 150, 0}, {FT_CUDA_FLASH_MIN_TOK, 300, 0}, {70, 90, 40}, {131, 5, 0}, {45, 250, 13},
    };
    const int groups[] = {1, 4, 8};
    for (size_t gi = 0; gi < FT_ARRAY_LEN(groups); gi++)
        for (size_t ci = 0; ci < FT_ARRAY_LEN(cases); ci++) {
            int n = cases[ci].n_tok, nh = N_KV * groups[gi];
            FT_ASSERT(cases[ci].pos0 + n <= N_CTX);
            size_t QN = (size_t)n * nh * hd;
            float *q = ft_malloc(QN * sizeof(float)), *ref = ft_malloc(QN * sizeof(float));
            for (size_t i = 0; i < QN; i++) q[i] = ft_rng_normal(rng);
            float *cq = cpu->ops->alloc(cpu, QN), *co = cpu->ops->alloc(cpu, QN);
            memcpy(cq, q, QN * sizeof(float));
            float *gq = gpu->ops->alloc(gpu, QN), *go = gpu->ops->alloc(gpu, QN);
            float *nan = ft_malloc(QN * sizeof(float)), *out = ft_malloc(QN * sizeof(float));
            for (size_t i = 0; i < QN; i++) nan[i] = NAN;
            ft_cuda_device_sync(); // alloc's memset ran on the backend's stream
            ft_cuda_memcpy_h2d(gq, q, QN * sizeof(float), NULL);
            ft_cuda_memcpy_h2d(go, nan, QN * sizeof(float), NULL);
            ft_cuda_device_sync();

            ft_attn_params ap = {.q = cq, .out = co, .k_cache = &ck, .v_cache = &cv, .n_tok = n,
                                 .pos0 = cases[ci].pos0, .n_head = nh, .n_head_kv = N_KV, .head_dim = hd,
                                 .window = cases[ci].window, .scale = 1.0f / sqrtf((float)hd)};
            attention_exact(&ap, type == FT_TYPE_Q8_0, kf, vf, ref);
            cpu->ops->attention(cpu, &ap);
            ap.q = gq;
            ap.out = go;
            ap.k_cache = &gk;
            ap.v_cache = &gv;
            gpu->ops->attention(gpu, &ap);
            gpu->ops->read(gpu, go, out, QN);
            double e_ref = rel_err(out, ref, QN), e_cpu = rel_err(out, co, QN);

            // the launcher itself, pos0 in device memory, into a NaN-filled output
            ft_cuda_memcpy_h2d(go, nan, QN * sizeof(float), NULL);
            ft_cuda_memcpy_h2d(pos_dev, &cases[ci].pos0, sizeof(int32_t), NULL);
            ft_cuda_device_sync();
            ft_cuda_attn_params dp = {.q = gq, .out = go, .k = gk.data, .v = gv.data, .k_type = type, .v_type = type,
                                      .k_row_bytes = gk.row_bytes, .v_row_bytes = gv.row_bytes, .n_tok = n,
                                      .pos0 = 0, .n_head = nh, .n_head_kv = N_KV, .head_dim = hd,
                                      .window = cases[ci].window, .scale = ap.scale, .pos_dev = pos_dev};
            double e_dev = INFINITY;
            if (ft_cuda_flash_attention_fits(&dp)) {
                ft_cuda_flash_attention(&dp, NULL);
                ft_cuda_device_sync();
                ft_cuda_memcpy_d2h(out, go, QN * sizeof(float), NULL);
                ft_cuda_device_sync();
                e_dev = rel_err(out, ref, QN);
            } else {
                CHECK(false, "flash %s hd %d group %d case %zu: not a shape the kernel takes", ft_type_name(type), hd,
                      groups[gi], ci);
            }
            printf("    flash %s hd %d group %d n_tok %d pos0 %d window %d: %.2e vs exact (%.2e with pos_dev), "
                   "%.2e vs cpu\n", ft_type_name(type), hd, groups[gi], n, cases[ci].pos0, cases[ci].window, e_ref,
                   e_dev, e_cpu);
            CHECK(e_dev <= 4e-3, "flash %s hd %d group %d case %zu with pos_dev vs exact: %.3e", ft_type_name(type),
                  hd, groups[gi], ci, e_dev);
            CHECK(e_ref <= 4e-3, "flash %s hd %d group %d case %zu vs exact: %.3e", ft_type_name(type), hd,
                  groups[gi], ci, e_ref);
            CHECK(e_cpu <= (type == FT_TYPE_F16 ? 2e-2 : 5e-3), "flash %s hd %d group %d case %zu vs cpu: %.3e",
                  ft_type_name(type), hd, groups[gi], ci, e_cpu);
            free(q);
            free(ref);
            free(nan);
            free(out);
        }
    free(kf);
    free(vf);
    free(ck.data);
    free(cv.data);
    ft_cuda_free(gk.data);
    ft_cuda_free(gv.data);
    ft_cuda_free(pos_dev);
}

TEST(cuda_flash_attn) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_err err = {{0}};
    ft_backend *cpu = ft_backend_cpu_init(2, false), *gpu = ft_backend_init(&(ft_backend_params){.device = FT_PLACEMENT_CUDA, .graph_max_tok = -1}, &err);
    if (!gpu) {
        test_fail(__FILE__, __LINE__, "cuda init: %s", err.msg);
        cpu->ops->free(cpu);
        return;
    }
    ft_backend_limits lim = {160, (int64_t)8 * N_KV * 256, N_CTX, 256, 0, 0, 0, 0};
    cpu->ops->reserve(cpu, &lim);
    gpu->ops->reserve(gpu, &lim);
    ft_rng rng = ft_rng_init(77);
    for (int hd = 64; hd <= 256; hd *= 2) { // 256: K in halves, two CTAs per output
        flash_case(cpu, gpu, &rng, FT_TYPE_F16, hd);
        flash_case(cpu, gpu, &rng, FT_TYPE_Q8_0, hd);
    }
    cpu->ops->free(cpu);
    gpu->ops->free(gpu);
}
