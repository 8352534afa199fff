// bench_cuda_matvec.cu: decode matvec throughput (GB/s of weight bytes) of ft_cuda_matvec per
// weight format at Qwen3-30B-A3B's decode shapes, against the HBM bandwidth measured in the
// same run by a copy kernel (bytes read + bytes written) and a read-only kernel.
//
// Shapes (rows x cols = out x in): expert gate/up 768 x 2048, attention q 4096 x 2048,
// attention out 2048 x 4096, output 151936 x 2048. Each measurement replays a CUDA graph of
// many launches (as the engine's decode graphs will), each launch on the next of enough copies
// of the weights to span 1 GiB, so every launch reads its weights from HBM, not from L2.
// Times are medians of 7 replays; 1 and 8 tokens.
//
// Usage: bench_cuda_matvec [--quick] [--tpr=32|128]
//   --quick: fewer formats and replays, for a smoke run; --tpr: force the quantized kernels'
//   threads per row group (ft_cuda_matvec_force_tpr) instead of the choice by shape.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "../src/backend/cuda/ft_cuda.h"
extern "C" {
#include "../src/quant/quant.h"
}

#define CK(call)                                                                           \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

__global__ void copy_kernel(const float4 *__restrict__ a, float4 *__restrict__ b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        b[i] = a[i];
}

__global__ void read_kernel(const float4 *__restrict__ a, size_t n, float *out) {
    float s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = a[i];
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 12345.678f) *out = s; // keeps the loads alive
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median time in ms of one launch of `launch` over a graph of n_launch launches.
template <typename F>
static float time_graph(cudaStream_t s, int n_launch, int reps, F launch) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n_launch; i++) launch(i);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s)); // warm-up
    CK(cudaStreamSynchronize(s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms / n_launch);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return median(t);
}

int main(int argc, char **argv) {
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strncmp(argv[i], "--tpr=", 6)) ft_cuda_matvec_force_tpr(atoi(argv[i] + 6));
    }
    if (ft_cuda_device_count() == 0) {
        printf("bench_cuda_matvec: no CUDA device\n");
        return 0;
    }
    ft_cuda_device_info info;
    ft_cuda_device_get_info(0, &info);
    printf("device: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", info.name, info.cc_major,
           info.cc_minor, info.sm_count, info.total_mem / 1073741824.0, info.l2_bytes / 1048576.0);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int reps = quick ? 3 : 7;

    // ---- HBM bandwidth: 2 GiB copy (1 GiB read + 1 GiB written) and a 1 GiB read
    const size_t bw_bytes = (size_t)1 << 30;
    float4 *ba, *bb;
    float *sink;
    CK(cudaMalloc(&ba, bw_bytes));
    CK(cudaMalloc(&bb, bw_bytes));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(ba, 0x3c, bw_bytes)); // not zeros
    const size_t n4 = bw_bytes / sizeof(float4);
    const int bw_grid = info.sm_count * 8;
    float copy_ms = time_graph(s, 4, reps, [&](int) { copy_kernel<<<bw_grid, 512, 0, s>>>(ba, bb, n4); });
    float read_ms = time_graph(s, 4, reps, [&](int) { read_kernel<<<bw_grid, 512, 0, s>>>(ba, n4, sink); });
    CK(cudaGetLastError());
    const double copy_gbs = 2.0 * bw_bytes / (copy_ms * 1e-3) / 1e9;
    const double read_gbs = (double)bw_bytes / (read_ms * 1e-3) / 1e9;
    printf("HBM: copy %.0f GB/s (read+write), read-only %.0f GB/s\n\n", copy_gbs, read_gbs);
    CK(cudaFree(ba));
    CK(cudaFree(bb));
    CK(cudaFree(sink));

    struct shape { const char *name; int64_t rows, cols; };
    const shape shapes[] = {
        {"expert 2048->768", 768, 2048},
        {"attn q 2048->4096", 4096, 2048},
        {"attn out 4096->2048", 2048, 4096},
        {"output 2048->151936", 151936, 2048},
    };
    const enum ft_type all_types[] = {
        FT_TYPE_Q4_0, FT_TYPE_Q4_1, FT_TYPE_Q5_0, FT_TYPE_Q5_1, FT_TYPE_Q8_0, FT_TYPE_Q2_K,
        FT_TYPE_Q3_K, FT_TYPE_Q4_K, FT_TYPE_Q5_K, FT_TYPE_Q6_K, FT_TYPE_IQ4_NL, FT_TYPE_IQ4_XS,
        FT_TYPE_MXFP4, FT_TYPE_F16, FT_TYPE_BF16, FT_TYPE_F32,
    };
    const enum ft_type quick_types[] = {FT_TYPE_Q4_K, FT_TYPE_Q8_0, FT_TYPE_BF16};
    const enum ft_type *types = quick ? quick_types : all_types;
    const int n_types = quick ? 3 : (int)(sizeof(all_types) / sizeof(all_types[0]));

    // activations: 8 tokens of 4096 floats, and their q8_1 form
    const int64_t max_cols = 4096;
    std::vector<float> hx(max_cols * 8);
    ft_rng rng = ft_rng_init(42);
    for (auto &v : hx) v = ft_rng_normal(&rng);
    float *dx, *dy;
    void *dq;
    CK(cudaMalloc(&dx, hx.size() * sizeof(float)));
    CK(cudaMalloc(&dy, (size_t)151936 * 8 * sizeof(float)));
    CK(cudaMalloc(&dq, ft_cuda_q8_1_bytes(max_cols, 8)));
    CK(cudaMemcpy(dx, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));

    printf("%-7s %-20s %9s | %8s %7s %6s | %8s %7s %6s\n", "type", "shape", "MB", "1 tok us",
           "GB/s", "%copy", "8 tok us", "GB/s", "%copy");
    const size_t span = (size_t)1 << 30;       // weights spanned by one graph's launches
    const size_t gen_max = (size_t)64 << 20;   // random bytes generated on the host, then tiled
    for (int ti = 0; ti < n_types; ti++) {
        const enum ft_type t = types[ti];
        for (const shape &sh : shapes) {
            const size_t rb = ft_row_bytes(t, sh.cols);
            const size_t mat = rb * (size_t)sh.rows;
            const int copies = (int)std::max<size_t>(1, (span + mat - 1) / mat);
            const size_t total = mat * copies;
            uint8_t *dw;
            CK(cudaMalloc(&dw, total));
            // random valid rows on the host (whole rows, up to gen_max), tiled over the buffer
            const size_t gen_rows = std::min<size_t>((size_t)sh.rows, std::max<size_t>(1, gen_max / rb));
            std::vector<uint8_t> hw(gen_rows * rb);
            for (size_t r = 0; r < gen_rows; r++) ft_quant_random_row(t, &rng, 0.05f, hw.data() + r * rb, sh.cols);
            for (size_t off = 0; off < total; off += hw.size())
                CK(cudaMemcpy(dw + off, hw.data(), std::min(hw.size(), total - off), cudaMemcpyHostToDevice));
            const bool q = ft_cuda_matvec_wants_q8_1(t);
            float tms[2];
            const int toks[2] = {1, 8};
            for (int k = 0; k < 2; k++) {
                const int nt = toks[k];
                if (q) ft_cuda_quantize_q8_1(dx, dq, sh.cols, nt, (ft_cuda_stream *)s);
                const int n_launch = std::max(4, std::min(copies, 256));
                tms[k] = time_graph(s, n_launch, reps, [&](int i) {
                    ft_cuda_matvec_params p = {};
                    p.type = t;
                    p.w = dw + (size_t)(i % copies) * mat;
                    p.n_rows = sh.rows;
                    p.n_cols = sh.cols;
                    p.x = q ? (const void *)dq : (const void *)dx;
                    p.y = dy;
                    p.n_tok = nt;
                    ft_cuda_matvec(&p, (ft_cuda_stream *)s);
                });
            }
            const double g1 = mat / (tms[0] * 1e-3) / 1e9, g8 = mat / (tms[1] * 1e-3) / 1e9;
            printf("%-7s %-20s %9.2f | %8.2f %7.0f %5.1f%% | %8.2f %7.0f %5.1f%%\n", ft_type_name(t),
                   sh.name, mat / 1e6, tms[0] * 1e3, g1, 100 * g1 / copy_gbs, tms[1] * 1e3, g8,
                   100 * g8 / copy_gbs);
            fflush(stdout);
            CK(cudaFree(dw));
        }
    }
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(dq));
    CK(cudaStreamDestroy(s));
    return 0;
}
