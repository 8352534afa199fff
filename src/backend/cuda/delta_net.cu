// delta_net.cu: gated DeltaNet linear attention (ft_cuda_delta_net), the CPU op's steps
// (cpu_delta.c) in three kernels: the causal conv with SiLU per channel, the L2 norm of q's and
// k's heads, and the delta rule. A prefill batch's conv runs a thread per (channel, run of
// DN_CONV_RUN tokens) into scratch instead, the state written by a kernel after it; both convs
// make the same sums in the same order, so either gives the same bits.
//
// The delta rule updates each row of a head's state matrix on its own (row r of the stored,
// transposed state needs only q, k, v[r] and the gates of each token), so a warp owns a row for
// the whole launch: the row stays in registers across the tokens, and the state is read and
// written once per launch however many tokens it takes. That loop is serial in the tokens: a
// batch of a chunk's tokens or more takes the chunked form instead (delta_rule_chunked.cu),
// where only the chunks follow one another.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "delta_rule_chunked.cuh"

enum { DN_THREADS = 128, DN_WARPS = DN_THREADS / FT_WARP, DN_CONV_RUN = 16 };

__device__ __forceinline__ float dn_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float dn_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

__device__ __forceinline__ bool dn_fresh(const ft_cuda_delta_params &p) {
    return p.pos0 + (p.pos_dev ? *p.pos_dev : 0) == 0;
}

// One step of a channel's conv: the window (the last K - 1 inputs, oldest first) and the new
// input x times the taps, summed oldest first as the CPU sums; x then joins the window.
__device__ __forceinline__ float dn_conv_step(float (&win)[FT_CUDA_DELTA_MAX_CONV - 1],
                                              const float (&w)[FT_CUDA_DELTA_MAX_CONV], float x, int K) {
    constexpr int MK = FT_CUDA_DELTA_MAX_CONV;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < MK; i++) {
        if (i < K - 1) sum += win[i] * w[i];
        else if (i == K - 1) sum += x * w[i];
    }
#pragma unroll
    for (int i = 0; i < MK - 1; i++) {
        if (i < K - 2) win[i] = win[i + 1];
        else if (i == K - 2) win[i] = x;
    }
    return sum;
}

// Channel c's d_conv taps, zeros past them.
__device__ __forceinline__ void dn_conv_taps(const ft_cuda_delta_params &p, int c, float (&w)[FT_CUDA_DELTA_MAX_CONV]) {
#pragma unroll
    for (int i = 0; i < FT_CUDA_DELTA_MAX_CONV; i++) w[i] = i < p.d_conv ? p.conv_w[(size_t)c * p.d_conv + i] : 0.0f;
}

// One thread per channel: the window of its last d_conv - 1 inputs in registers (oldest first,
// as the CPU sums), the conv's output written over its input, the window back to the state.
__global__ void __launch_bounds__(DN_THREADS) dn_conv_kernel(ft_cuda_delta_params p, int C) {
    ft_pdl_begin();
    const int c = blockIdx.x * DN_THREADS + threadIdx.x;
    if (c >= C) return;
    constexpr int MK = FT_CUDA_DELTA_MAX_CONV;
    const int K = p.d_conv;
    const bool fresh = dn_fresh(p);
    float win[MK - 1], w[MK];
#pragma unroll
    for (int i = 0; i < MK - 1; i++) win[i] = i < K - 1 && !fresh ? p.conv_state[(size_t)i * C + c] : 0.0f;
    dn_conv_taps(p, c, w);
    for (int t = 0; t < p.n_tok; t++) {
        float *xp = p.qkv + (size_t)t * C + c;
        const float x = *xp;
        const float sum = dn_conv_step(win, w, x, K);
        *xp = dn_silu(sum);
    }
#pragma unroll
    for (int i = 0; i < MK - 1; i++)
        if (i < K - 1) p.conv_state[(size_t)i * C + c] = win[i];
}

// One thread per (channel, run of DN_CONV_RUN tokens): the window of the d_conv - 1 inputs
// before the run (from the state before the first token, zeros when fresh) in registers, then
// the run's outputs, SiLU applied, to dst; src is left as it is.
__global__ void __launch_bounds__(DN_THREADS) dn_conv_run_kernel(ft_cuda_delta_params p, int C, const float *src,
                                                                  float *dst) {
    ft_pdl_begin();
    const int c = blockIdx.x * DN_THREADS + threadIdx.x, t0 = blockIdx.y * DN_CONV_RUN;
    if (c >= C) return;
    constexpr int MK = FT_CUDA_DELTA_MAX_CONV;
    const int K = p.d_conv;
    const bool fresh = dn_fresh(p);
    float win[MK - 1], w[MK];
#pragma unroll
    for (int i = 0; i < MK - 1; i++) {
        const int j = t0 - (K - 1) + i; // the input's token; below 0: state row K - 1 + j
        win[i] = i >= K - 1 ? 0.0f : j >= 0 ? src[(size_t)j * C + c] : fresh ? 0.0f : p.conv_state[(size_t)(K - 1 + j) * C + c];
    }
    dn_conv_taps(p, c, w);
    const int t1 = min(t0 + DN_CONV_RUN, p.n_tok);
    for (int t = t0; t < t1; t++) {
        const float x = src[(size_t)t * C + c];
        const float sum = dn_conv_step(win, w, x, K);
        dst[(size_t)t * C + c] = dn_silu(sum);
    }
}

// The conv state after a batch of at least d_conv - 1 tokens: their last inputs.
__global__ void __launch_bounds__(DN_THREADS) dn_conv_state_kernel(ft_cuda_delta_params p, int C, const float *src) {
    ft_pdl_begin();
    const int c = blockIdx.x * DN_THREADS + threadIdx.x;
    if (c >= C) return;
    for (int i = 0; i < p.d_conv - 1; i++)
        p.conv_state[(size_t)i * C + c] = src[(size_t)(p.n_tok - (p.d_conv - 1) + i) * C + c];
}

// A warp per (token, q or k head): the head scaled to unit L2 norm (at most 1 / eps).
__global__ void __launch_bounds__(DN_THREADS) dn_l2_kernel(ft_cuda_delta_params p, int C) {
    ft_pdl_begin();
    const int lane = threadIdx.x % FT_WARP, qk = 2 * p.n_k_heads, hd = p.head_dim;
    const int row = blockIdx.x * DN_WARPS + threadIdx.x / FT_WARP;
    if (row >= p.n_tok * qk) return;
    float *x = p.qkv + (size_t)(row / qk) * C + (size_t)(row % qk) * hd;
    float ss = 0.0f;
    for (int i = lane; i < hd; i += FT_WARP) ss += x[i] * x[i];
    ss = ft_warp_sum(ss);
    const float scale = 1.0f / fmaxf(sqrtf(ss), p.eps);
    for (int i = lane; i < hd; i += FT_WARP) x[i] *= scale;
}

// A warp per (row r, V head h); lane j holds elements j, j + 32, ... of the row (NPL of them,
// head_dim = 32 * NPL), of q and of k. The next token's inputs load before this token's sums.
template <int NPL>
__global__ void __launch_bounds__(DN_THREADS) dn_rule_kernel(ft_cuda_delta_params p, int C) {
    ft_pdl_begin();
    constexpr int HD = NPL * FT_WARP;
    const int lane = threadIdx.x % FT_WARP, r = blockIdx.x * DN_WARPS + threadIdx.x / FT_WARP, h = blockIdx.y;
    const int H = p.n_v_heads, Kw = p.n_k_heads * HD;
    const int hk = p.k_grouped ? h / (H / p.n_k_heads) : h % p.n_k_heads;
    if (r >= HD) return;
    float *S = p.state + ((size_t)h * HD + r) * HD;
    float s[NPL];
    const bool fresh = dn_fresh(p);
#pragma unroll
    for (int j = 0; j < NPL; j++) s[j] = fresh ? 0.0f : S[lane + j * FT_WARP];
    const float scale = 1.0f / sqrtf((float)HD), dt = p.dt[h], a = p.a[h];
    float q[NPL], k[NPL], v = 0.0f, al = 0.0f, be = 0.0f;
    auto load = [&](int t) {
        const float *row = p.qkv + (size_t)t * C;
#pragma unroll
        for (int j = 0; j < NPL; j++) {
            q[j] = row[hk * HD + lane + j * FT_WARP];
            k[j] = row[Kw + hk * HD + lane + j * FT_WARP];
        }
        v = row[2 * Kw + h * HD + r];
        al = p.alpha[(size_t)t * H + h];
        be = p.beta[(size_t)t * H + h];
    };
    if (p.n_tok > 0) load(0);
    for (int t = 0; t < p.n_tok; t++) {
        float qt[NPL], kt[NPL];
#pragma unroll
        for (int j = 0; j < NPL; j++) qt[j] = q[j], kt[j] = k[j];
        const float vt = v, decay = expf(dn_softplus(al + dt) * a), b = 1.0f / (1.0f + expf(-be));
        if (t + 1 < p.n_tok) load(t + 1);
        float part = 0.0f;
#pragma unroll
        for (int j = 0; j < NPL; j++) {
            s[j] *= decay;
            part += s[j] * kt[j];
        }
        const float delta = (vt - ft_warp_sum(part)) * b;
        part = 0.0f;
#pragma unroll
        for (int j = 0; j < NPL; j++) {
            s[j] += kt[j] * delta;
            part += s[j] * qt[j];
        }
        const float o = ft_warp_sum(part);
        if (lane == 0) p.out[(size_t)t * H * HD + (size_t)h * HD + r] = o * scale;
    }
#pragma unroll
    for (int j = 0; j < NPL; j++) S[lane + j * FT_WARP] = s[j];
}

extern "C" void ft_cuda_delta_net(const ft_cuda_delta_params *p, ft_cuda_stream *s) {
    const int hd = p->head_dim, C = (2 * p->n_k_heads + p->n_v_heads) * hd;
    FT_CUDA_ASSERT(p->d_conv >= 1 && p->d_conv <= FT_CUDA_DELTA_MAX_CONV && p->n_v_heads % p->n_k_heads == 0);
    FT_CUDA_ASSERT(hd == 32 || hd == 64 || hd == 128 || hd == 256);
    if (p->n_tok <= 0) return;
    cudaStream_t st = ft_cuda_stream_handle(s);
    const unsigned c_blocks = (C + DN_THREADS - 1) / DN_THREADS;
    ft_cuda_delta_params q = *p; // the kernels after the conv read its output at q.qkv
    // a run of tokens per thread fills the machine where one thread per channel walking every
    // token would not; decode keeps the one kernel (no scratch, one launch fewer)
    if (p->scratch && p->n_tok >= DN_CONV_RUN && p->n_tok >= p->d_conv - 1) {
        ft_launch(dn_conv_run_kernel, dim3(c_blocks, (p->n_tok + DN_CONV_RUN - 1) / DN_CONV_RUN), DN_THREADS, 0, st,
                  *p, C, (const float *)p->qkv, p->scratch);
        CUDA_CHECK_LAUNCH();
        ft_launch(dn_conv_state_kernel, dim3(c_blocks), DN_THREADS, 0, st, *p, C, (const float *)p->qkv);
        CUDA_CHECK_LAUNCH();
        q.qkv = p->scratch;
    } else {
        ft_launch(dn_conv_kernel, dim3(c_blocks), DN_THREADS, 0, st, *p, C);
        CUDA_CHECK_LAUNCH();
    }
    const int rows = p->n_tok * 2 * p->n_k_heads;
    ft_launch(dn_l2_kernel, dim3((rows + DN_WARPS - 1) / DN_WARPS), DN_THREADS, 0, st, q, C);
    CUDA_CHECK_LAUNCH();
    if (p->chunk_ws && dn_chunked_fits(p->n_tok, p->n_v_heads, hd, p->chunk_ws_floats)) {
        dn_chunked_rule(q, C, st);
        return;
    }
    const dim3 grid(hd / DN_WARPS, p->n_v_heads);
    switch (hd) {
    case 32: ft_launch(dn_rule_kernel<1>, grid, DN_THREADS, 0, st, q, C); break;
    case 64: ft_launch(dn_rule_kernel<2>, grid, DN_THREADS, 0, st, q, C); break;
    case 128: ft_launch(dn_rule_kernel<4>, grid, DN_THREADS, 0, st, q, C); break;
    default: ft_launch(dn_rule_kernel<8>, grid, DN_THREADS, 0, st, q, C); break;
    }
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_delta_net_init(void) { dn_chunked_init(); }
