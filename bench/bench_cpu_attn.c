// bench_cpu_attn.c: the CPU backend's attention for one query token (decode) at a depth, or for
// a prefill chunk of -q tokens after it, over the f16 KV caches of several layers (so each step
// reads its keys and values from memory, not from the last-level cache), with the cache in
// anonymous memory in huge pages where the kernel gives them (--small-pages: from the C heap);
// f16 caches, or q8_0 with --q8_0.
//
// Reported per depth: the op's time per layer (median of the steps), the GB/s of the K and V
// bytes it reads, and the GFLOP/s of its scores and sums (4 flops per query head, key and head
// dimension it sees). FT_SIMD=avx2 (or scalar) picks the other paths of the same binary, for a
// comparison in one build. A measurement, not a test: it asserts nothing about speed.
//
// Usage: bench_cpu_attn [-t threads] [-d 1024,4096,16384] [-q tokens] [-l layers] [-s steps]
//                       [--heads 32] [--kv-heads 4] [--head-dim 128] [--small-pages] [--q8_0]
#include "../src/cli/bench_common.h"
#include "../src/backend/cpu/cpu.h"
#include "../src/backend/cpu/cpu_impl.h"
#include "../src/quant/fp16.h"
#include "../src/util/mapping.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Comma-separated positive ints into out (at most cap); returns the count, 0 on a bad list.
static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    for (char *end; *s && n < cap; s = *end == ',' ? end + 1 : end) {
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0 || v > (1 << 24)) return 0;
        out[n++] = (int)v;
    }
    return n;
}

int main(int argc, char **argv) {
    int threads = 2, layers = 8, steps = 20, heads = 32, kv_heads = 4, hd = 128, n_q = 1;
    int depths[16] = {1024, 4096, 16384}, n_depths = 3;
    bool small_pages = false;
    enum ft_type kv_type = FT_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = v != NULL;
        if (!strcmp(a, "--small-pages")) {
            small_pages = true;
            continue;
        }
        if (!strcmp(a, "--q8_0")) {
            kv_type = FT_TYPE_Q8_0;
            continue;
        }
        if (!strcmp(a, "-t") && v) threads = atoi(v);
        else if (!strcmp(a, "-l") && v) layers = atoi(v);
        else if (!strcmp(a, "-q") && v) n_q = atoi(v);
        else if (!strcmp(a, "-s") && v) steps = atoi(v);
        else if (!strcmp(a, "--heads") && v) heads = atoi(v);
        else if (!strcmp(a, "--kv-heads") && v) kv_heads = atoi(v);
        else if (!strcmp(a, "--head-dim") && v) hd = atoi(v);
        else if (!strcmp(a, "-d") && v) ok = (n_depths = parse_list(v, depths, 16)) > 0;
        else ok = false;
        if (!ok || threads < 1 || layers < 1 || steps < 1 || kv_heads < 1 || heads % kv_heads || hd < 16 || n_q < 1 ||
            n_q > 65536) {
            fprintf(stderr, "usage: bench_cpu_attn [-t threads] [-d 1024,4096,16384] [-q tokens] [-l layers] [-s steps] "
                            "[--heads 32] [--kv-heads 4] [--head-dim 128] [--small-pages] [--q8_0]\n");
            return 2;
        }
        i++;
    }
    int max_ctx = 0;
    for (int i = 0; i < n_depths; i++) max_ctx = FT_MAX(max_ctx, depths[i] + n_q);
    ft_backend *be = ft_backend_cpu_init(threads, false);
    ft_backend_limits lim = {.max_tok = n_q, .max_width = (int64_t)heads * hd, .max_ctx = max_ctx,
                             .max_head_dim = hd, .n_expert = 1, .n_expert_used = 1};
    be->ops->reserve(be, &lim);
    // one K and one V cache per layer, rows of kv_heads * hd f16 values
    size_t row_bytes = ft_row_bytes(kv_type, (int64_t)kv_heads * hd), cache_bytes = row_bytes * (size_t)max_ctx;
    float *rows = ft_malloc((size_t)max_ctx * kv_heads * hd * sizeof(float));
    ft_tensor *k = ft_calloc((size_t)layers, sizeof(ft_tensor)), *v = ft_calloc((size_t)layers, sizeof(ft_tensor));
    ft_rng r = ft_rng_init(1);
    size_t huge = 0;
    for (int l = 0; l < layers; l++) {
        ft_tensor *ts[2] = {&k[l], &v[l]};
        for (int i = 0; i < 2; i++) {
            *ts[i] = (ft_tensor){.type = kv_type, .ne = {kv_heads * hd, max_ctx, 1}, .row_bytes = row_bytes,
                                 .mat_bytes = cache_bytes, .placement = FT_PLACEMENT_CPU};
            snprintf(ts[i]->name, sizeof(ts[i]->name), "cache");
            ts[i]->data = small_pages ? ft_calloc(1, cache_bytes) : ft_huge_alloc(cache_bytes);
            for (size_t e = 0; e < (size_t)max_ctx * kv_heads * hd; e++) rows[e] = ft_rng_normal(&r);
            be->ops->set_rows(be, ts[i], NULL, 0, rows, max_ctx);
            size_t anon = 0, in_huge = 0;
            ft_mapping_usage(ts[i]->data, cache_bytes, &anon, &in_huge);
            huge += in_huge;
        }
    }
    size_t q_floats = (size_t)n_q * heads * hd;
    float *q = ft_malloc(q_floats * sizeof(float)), *out = ft_malloc(q_floats * sizeof(float));
    for (size_t i = 0; i < q_floats; i++) q[i] = ft_rng_normal(&r);
    printf("attention of %d token%s: %d/%d heads of %d, %d layers, %d threads, path %s; %s caches %.1f MiB, %.0f%% "
           "in huge pages\n",
           n_q, n_q == 1 ? " (decode)" : "s (a prefill chunk)", heads, kv_heads, hd, layers, threads, ft_quant_simd_name(), ft_type_name(kv_type),
           2.0 * (double)layers * (double)cache_bytes / (1 << 20),
           100.0 * (double)huge / (2.0 * (double)layers * (double)cache_bytes));
    double *t = ft_malloc((size_t)steps * sizeof(double));
    for (int di = 0; di < n_depths; di++) {
        int depth = depths[di];
        for (int s = -2; s < steps; s++) { // two untimed steps first
            double t0 = bench_now_s();
            for (int l = 0; l < layers; l++) {
                ft_attn_params p = {.q = q, .out = out, .k_cache = &k[l], .v_cache = &v[l], .n_tok = n_q, .pos0 = depth,
                                    .n_head = heads, .n_head_kv = kv_heads, .head_dim = hd, .scale = 0.0884f};
                be->ops->attention(be, &p);
            }
            if (s >= 0) t[s] = (bench_now_s() - t0) / layers;
        }
        qsort(t, (size_t)steps, sizeof(double), bench_cmp_double);
        double med = t[steps / 2], bytes = 2.0 * (double)row_bytes * (depth + n_q);
        // each query sees the keys up to its own position
        double flops = 4.0 * heads * hd * (double)n_q * (depth + (n_q + 1) / 2.0);
        printf("  depth %6d: %8.1f us a layer (median of %d steps), %6.1f GB/s of K and V, %7.1f GFLOP/s\n", depth,
               med * 1e6, steps, bytes / med / 1e9, flops / med / 1e9);
    }
    for (int l = 0; l < layers; l++) {
        if (small_pages) {
            free(k[l].data);
            free(v[l].data);
        } else {
            ft_huge_free(k[l].data, cache_bytes);
            ft_huge_free(v[l].data, cache_bytes);
        }
    }
    free(k);
    free(v);
    free(rows);
    free(q);
    free(out);
    free(t);
    be->ops->free(be);
    return 0;
}
