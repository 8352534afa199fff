// bench_cuda_gemm.cu: prefill matmul throughput of the tensor-core GEMM (ft_cuda_gemm,
// ft_cuda_moe_gemm) against the path the CUDA backend takes today (the decode matvec kernels,
// 8 tokens per launch; ft_cuda_matvec_ids for the experts), at Qwen3-30B-A3B's prefill shapes.
//
// Dense (out x in, 512 tokens): attention q 4096 x 2048, k and v 512 x 2048 and out
// 2048 x 4096, all q8_0, and one expert's matrices as plain GEMMs: gate/up 768 x 2048 q4_K,
// down 2048 x 768 q4_K.
// MoE FFN (512 tokens, 128 experts, top-8, n_embd 2048, n_ff 768, q4_K): ft_cuda_moe_gemm
// (grouping, fused gate/up, q8_1 of h, down, combine) against quantize + matvec_ids gate, up +
// swiglu + quantize + matvec_ids down + combine; random routing (8 distinct experts per token).
// TFLOP/s count 2 * n_tok * out * in per matrix (the MoE: 3 matrices per (token, slot) pair).
// The contenders alternate inside each repetition; times are medians of the repetitions of a
// loop of launches; the activations' q8_1 form is made once outside the dense timings.
//
// The dense GEMM runs twice: as one launch of its tiles, and split over its input where the tiles
// leave SMs idle (the backend's form for decode-sized batches, ft_cuda_gemm_params.part).
//
// Usage: bench_cuda_gemm [--quick] [--tok=N]   (--quick: 3 repetitions instead of 9; --tok:
// tokens instead of 512, e.g. 16 or 32 to find where the GEMM overtakes the matvec path)
#include <cuda_runtime.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "../src/backend/cuda/cuda_ops.h"
#include "../src/backend/cuda/ft_cuda.h"
extern "C" {
#include "../src/quant/quant.h"
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Milliseconds of one call of fn, over a loop of n calls on stream s.
template <typename F>
static float time_loop(cudaStream_t s, int n, F fn) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < n; i++) fn();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaGetLastError());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms / n;
}

// n_mat copies of one random (rows, cols) matrix of type t, on the device.
static uint8_t *upload_weights(enum ft_type t, int64_t rows, int64_t cols, int n_mat, ft_rng *rng) {
    const size_t rb = ft_row_bytes(t, cols), mat = rb * (size_t)rows;
    std::vector<uint8_t> hw(mat);
    for (int64_t r = 0; r < rows; r++) ft_quant_random_row(t, rng, 0.05f, hw.data() + r * rb, cols);
    uint8_t *dw;
    CK(cudaMalloc(&dw, mat * n_mat));
    for (int i = 0; i < n_mat; i++) CK(cudaMemcpy(dw + mat * i, hw.data(), mat, cudaMemcpyHostToDevice));
    return dw;
}

// y = x · wᵀ through the matvec kernels, 8 tokens per launch (cuda_backend.c's matmul_raw).
static void matvec_path(enum ft_type t, const void *w, int64_t rows, int64_t cols, const void *xq, float *y,
                        int n_tok, ft_cuda_stream *s) {
    const size_t xq_row = ft_cuda_q8_1_bytes(cols, 1);
    for (int t0 = 0; t0 < n_tok; t0 += FT_CUDA_MATVEC_MAX_TOK) {
        ft_cuda_matvec_params p = {};
        p.type = t;
        p.w = w;
        p.n_rows = rows;
        p.n_cols = cols;
        p.x = (const uint8_t *)xq + (size_t)t0 * xq_row;
        p.y = y + (size_t)t0 * rows;
        p.n_tok = std::min(FT_CUDA_MATVEC_MAX_TOK, n_tok - t0);
        ft_cuda_matvec(&p, s);
    }
}

int main(int argc, char **argv) {
    int reps = 9, n_tok = 512;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) reps = 3;
        else if (!strncmp(argv[i], "--tok=", 6)) n_tok = atoi(argv[i] + 6);
    }
    if (ft_cuda_device_count() == 0) {
        printf("bench_cuda_gemm: no CUDA device\n");
        return 0;
    }
    if (n_tok < 1) n_tok = 512;
    ft_cuda_device_info info;
    ft_cuda_device_get_info(0, &info);
    printf("device: %s, sm_%d%d, %d SMs; %d tokens, median of %d\n\n", info.name, info.cc_major, info.cc_minor,
           info.sm_count, n_tok, reps);
    cudaStream_t cs;
    CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    ft_cuda_stream *s = (ft_cuda_stream *)cs;
    ft_rng rng = ft_rng_init(42);

    // activations: n_tok rows of up to 4096 floats and their q8_1 form
    const int64_t max_cols = 4096;
    std::vector<float> hx((size_t)max_cols * n_tok);
    for (auto &v : hx) v = ft_rng_normal(&rng);
    float *dx, *dy;
    void *dq;
    CK(cudaMalloc(&dx, hx.size() * sizeof(float)));
    CK(cudaMalloc(&dy, (size_t)4096 * n_tok * sizeof(float)));
    CK(cudaMalloc(&dq, ft_cuda_q8_1_bytes(max_cols, n_tok)));
    const size_t part_floats = (size_t)1 << 22; // as the backend's
    float *dpart;
    CK(cudaMalloc(&dpart, part_floats * sizeof(float)));
    CK(cudaMemcpy(dx, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));

    // ---- dense shapes
    struct shape { const char *name; enum ft_type t; int64_t rows, cols; };
    const shape shapes[] = {
        {"attn q 2048->4096", FT_TYPE_Q8_0, 4096, 2048},
        {"attn k/v 2048->512", FT_TYPE_Q8_0, 512, 2048},
        {"attn out 4096->2048", FT_TYPE_Q8_0, 2048, 4096},
        {"expert gate 2048->768", FT_TYPE_Q4_K, 768, 2048},
        {"expert down 768->2048", FT_TYPE_Q4_K, 2048, 768},
    };
    printf("%-22s %-5s | %9s %8s | %9s %8s | %9s %8s | %7s\n", "shape", "type", "gemm us", "TFLOP/s", "split us",
           "TFLOP/s", "matvec us", "TFLOP/s", "speedup");
    for (const shape &sh : shapes) {
        uint8_t *dw = upload_weights(sh.t, sh.rows, sh.cols, 1, &rng);
        ft_cuda_quantize_q8_1(dx, dq, sh.cols, n_tok, s);
        ft_cuda_gemm_params gp = {};
        gp.type = sh.t;
        gp.w = dw;
        gp.n_out = sh.rows;
        gp.n_in = sh.cols;
        gp.x = dq;
        gp.y = dy;
        gp.n_tok = n_tok;
        ft_cuda_gemm_params gs = gp;
        gs.part = dpart;
        gs.part_floats = part_floats;
        ft_cuda_gemm(&gp, s); // warm-up
        ft_cuda_gemm(&gs, s);
        matvec_path(sh.t, dw, sh.rows, sh.cols, dq, dy, n_tok, s);
        std::vector<float> tg, ts, tm;
        for (int r = 0; r < reps; r++) {
            tg.push_back(time_loop(cs, 20, [&] { ft_cuda_gemm(&gp, s); }));
            ts.push_back(time_loop(cs, 20, [&] { ft_cuda_gemm(&gs, s); }));
            tm.push_back(time_loop(cs, 5, [&] { matvec_path(sh.t, dw, sh.rows, sh.cols, dq, dy, n_tok, s); }));
        }
        const double flop = 2.0 * n_tok * (double)sh.rows * (double)sh.cols;
        const float g = median(tg), sp = median(ts), m = median(tm);
        printf("%-22s %-5s | %9.1f %8.1f | %9.1f %8.1f | %9.1f %8.1f | %6.1fx\n", sh.name, ft_type_name(sh.t), g * 1e3,
               flop / (g * 1e-3) / 1e12, sp * 1e3, flop / (sp * 1e-3) / 1e12, m * 1e3, flop / (m * 1e-3) / 1e12,
               m / std::min(g, sp));
        fflush(stdout);
        CK(cudaFree(dw));
    }

    // ---- the MoE FFN
    const int E = 128, k = 8, P = n_tok * k;
    const int64_t D = 2048, F = 768;
    const enum ft_type et = FT_TYPE_Q4_K;
    const size_t gmat = ft_row_bytes(et, D) * F, dmat = ft_row_bytes(et, F) * D;
    uint8_t *dg = upload_weights(et, F, D, E, &rng), *du = upload_weights(et, F, D, E, &rng);
    uint8_t *dd = upload_weights(et, D, F, E, &rng);
    std::vector<int32_t> sel(P);
    std::vector<float> sw(P);
    for (int t = 0; t < n_tok; t++)
        for (int j = 0; j < k; j++) {
            int e;
            bool dup;
            do {
                e = (int)(ft_rng_next(&rng) % E);
                dup = false;
                for (int i = 0; i < j; i++) dup |= sel[t * k + i] == e;
            } while (dup);
            sel[t * k + j] = e;
            sw[t * k + j] = 1.0f / k;
        }
    int32_t *dsel;
    float *dsw, *dh, *dh2, *dout, *dmy;
    void *dwork, *dxq, *dhq;
    CK(cudaMalloc(&dsel, P * sizeof(int32_t)));
    CK(cudaMalloc(&dsw, P * sizeof(float)));
    CK(cudaMalloc(&dh, (size_t)P * F * sizeof(float)));
    CK(cudaMalloc(&dh2, (size_t)P * F * sizeof(float)));
    CK(cudaMalloc(&dout, (size_t)P * D * sizeof(float)));
    CK(cudaMalloc(&dmy, (size_t)n_tok * D * sizeof(float)));
    CK(cudaMalloc(&dwork, ft_cuda_moe_gemm_work_bytes(P, E)));
    CK(cudaMalloc(&dxq, ft_cuda_q8_1_bytes(D, n_tok)));
    CK(cudaMalloc(&dhq, ft_cuda_q8_1_bytes(F, P)));
    CK(cudaMemcpy(dsel, sel.data(), P * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsw, sw.data(), P * sizeof(float), cudaMemcpyHostToDevice));

    ft_cuda_moe_gemm_params mp = {};
    mp.gate_type = et;
    mp.down_type = et;
    mp.gate = dg;
    mp.up = du;
    mp.down = dd;
    mp.gate_mat_bytes = gmat;
    mp.down_mat_bytes = dmat;
    mp.n_embd = D;
    mp.n_ff = F;
    mp.n_expert = E;
    mp.n_tok = n_tok;
    mp.k = k;
    mp.sel = dsel;
    mp.sel_w = dsw;
    mp.xq = dxq;
    mp.work = dwork;
    mp.h = dh;
    mp.hq = dhq;
    mp.out = dout;
    mp.y = dmy;
    auto moe_gemm = [&] {
        ft_cuda_quantize_q8_1(dx, dxq, D, n_tok, s);
        ft_cuda_moe_gemm(&mp, s);
    };
    // the backend's current path (cuda_backend.c's cuda_moe_ffn after routing)
    auto moe_matvec = [&] {
        ft_cuda_quantize_q8_1(dx, dxq, D, n_tok, s);
        ft_cuda_matvec_ids_params ip = {};
        ip.type = et;
        ip.mat_bytes = gmat;
        ip.n_rows = F;
        ip.n_cols = D;
        ip.x = dxq;
        ip.ids = dsel;
        ip.x_div = k;
        ip.n_pairs = P;
        ip.w = dg;
        ip.y = dh;
        ft_cuda_matvec_ids(&ip, s);
        ip.w = du;
        ip.y = dh2;
        ft_cuda_matvec_ids(&ip, s);
        ft_cuda_swiglu(dh, dh2, (size_t)P * F, s);
        ft_cuda_quantize_q8_1(dh, dhq, F, P, s);
        ip.w = dd;
        ip.mat_bytes = dmat;
        ip.n_rows = D;
        ip.n_cols = F;
        ip.x = dhq;
        ip.x_div = 1;
        ip.y = dout;
        ft_cuda_matvec_ids(&ip, s);
        ft_cuda_moe_combine(dout, dsw, dmy, n_tok, k, (int)D, s);
    };
    moe_gemm();
    moe_matvec();
    std::vector<float> tg, tm;
    for (int r = 0; r < reps; r++) {
        tg.push_back(time_loop(cs, 10, moe_gemm));
        tm.push_back(time_loop(cs, 3, moe_matvec));
    }
    const double flop = 2.0 * P * 3.0 * (double)D * (double)F;
    const float g = median(tg), m = median(tm);
    printf("\nMoE FFN %d tok, %d experts top-%d, %lldx%lld q4_K: grouped gemm %.1f us (%.1f TFLOP/s), "
           "matvec_ids %.1f us (%.1f TFLOP/s), speedup %.1fx\n",
           n_tok, E, k, (long long)D, (long long)F, g * 1e3, flop / (g * 1e-3) / 1e12, m * 1e3,
           flop / (m * 1e-3) / 1e12, m / g);
    printf("  per 48 layers: grouped gemm %.2f ms, matvec_ids %.2f ms\n", 48 * g, 48 * m);

    CK(cudaFree(dg)); CK(cudaFree(du)); CK(cudaFree(dd)); CK(cudaFree(dsel)); CK(cudaFree(dsw));
    CK(cudaFree(dh)); CK(cudaFree(dh2)); CK(cudaFree(dout)); CK(cudaFree(dmy)); CK(cudaFree(dwork));
    CK(cudaFree(dxq)); CK(cudaFree(dhq)); CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(dq)); CK(cudaFree(dpart));
    CK(cudaStreamDestroy(cs));
    return 0;
}
