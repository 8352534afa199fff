// moe_route.cu: MoE routing on the device (gating, top-k with selection bias, weights) and the
// weighted sum of the selected experts' outputs; the host never learns which experts ran.
//
// Routing, one warp per token (lane i owns experts i, i + 32, ...), as the CPU op (cpu_moe.c):
//   1. probs = softmax(logits) (max-subtracted, sum of exps, times 1/sum) or sigmoid(logits);
//   2. k rounds of a warp arg-max over probs + bias among the experts not yet taken (ties to
//      the lower index, as the CPU's scan); lane 0 records each winner;
//   3. the routing gap (last selected score minus the best unselected one, >= 0) lowers *gap
//      (an atomicMin on the float's bits, which order like ints for non-negative floats);
//   4. weights = probs of the winners, renormalised (sum floored at 2^-14) and scaled;
//   5. with counts, each winner's counter gets an atomic add (the route counts, backend.h).
// gpt-oss (moe_route_kernel, and the one-launch router of decode): the router's bias is added
// to the logits first, and with softmax_weight the logits select and the weights are the
// softmax of the k selected ones.
// Combine: one thread per output element, summing the token's k expert rows in slot order.
// Decode (one token, float router weights) takes moe_router_kernel: the router's logits and
// the routing in one launch.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "expert_extras.cuh"
#include "host_meeting.cuh"
#include "q8_1.cuh"
#include "rms_norm.cuh"

#include "../../quant/fp16.h"
#include "../../quant/quant.h"
#include "../../util/env.h"

enum { ROUTE_MAX_EXPERTS = 1024, ROUTE_MAX_K = 64 };

// An unsigned integer that orders as the float does: -0 as +0, NaN below every number.
__device__ __forceinline__ unsigned float_order_key(float f) {
    const unsigned u = __float_as_uint(f == 0.0f ? 0.0f : f);
    return f != f ? 0u : (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

// The warp's best (bv, bi) from each lane's candidate (bi: an index whose lane is bi % 32): the
// higher score, ties to the lower index; bi == ne marks a lane with none. Every lane ends with
// the winner. Two warp reductions (REDUX: one instruction each) and a shuffle, not five rounds
// of shuffles and compares: routing runs k + 1 of them on one warp alone on its SM, so its time
// is this chain's.
__device__ __forceinline__ void warp_argmax(float &bv, int &bi, int ne) {
    const unsigned key = bi == ne ? 0u : float_order_key(bv) + 1u; // (a number's key is never ~0u)
    const unsigned best = __reduce_max_sync(0xffffffffu, key);
    const unsigned wi = __reduce_min_sync(0xffffffffu, key == best ? (unsigned)bi : 0xffffffffu);
    bv = __shfl_sync(0xffffffffu, bv, (int)(wi % FT_WARP)); // the winner's own value, to the bit
    bi = (int)wi;
}

__global__ void __launch_bounds__(FT_WARP) moe_route_kernel(const ft_cuda_route_params p) {
    ft_pdl_begin();
    __shared__ float probs[ROUTE_MAX_EXPERTS];
    __shared__ unsigned char taken[ROUTE_MAX_EXPERTS];
    __shared__ int sel[ROUTE_MAX_K];
    const int t = blockIdx.x, lane = threadIdx.x, ne = p.n_expert, k = p.k;
    const float *lg = p.logits + (int64_t)t * ne;
    if (p.logit_bias) { // an f32 add into the logits, as the CPU op's
        float *lw = const_cast<float *>(lg);
        for (int i = lane; i < ne; i += FT_WARP) lw[i] += p.logit_bias[i];
        __syncwarp();
    }
    if (p.softmax) {
        float mx = -INFINITY;
        for (int i = lane; i < ne; i += FT_WARP) mx = fmaxf(mx, lg[i]);
        mx = ft_warp_max(mx);
        float sum = 0.0f;
        for (int i = lane; i < ne; i += FT_WARP) {
            const float e = expf(lg[i] - mx);
            probs[i] = e;
            sum += e;
        }
        sum = ft_warp_sum(sum);
        const float inv = 1.0f / sum;
        for (int i = lane; i < ne; i += FT_WARP) probs[i] *= inv;
    } else if (p.softmax_weight) {
        for (int i = lane; i < ne; i += FT_WARP) probs[i] = lg[i];
    } else {
        for (int i = lane; i < ne; i += FT_WARP) probs[i] = 1.0f / (1.0f + expf(-lg[i]));
    }
    for (int i = lane; i < ne; i += FT_WARP) taken[i] = 0;
    __syncwarp();
    for (int j = 0; j <= k && j < ne; j++) {
        float bv = -INFINITY;
        int bi = ne;
        for (int i = lane; i < ne; i += FT_WARP) {
            const float v = probs[i] + (p.bias ? p.bias[i] : 0.0f);
            if (!taken[i] && (bi == ne || v > bv)) {
                bv = v;
                bi = i;
            }
        }
        warp_argmax(bv, bi, ne);
        if (j == k) {
            // the best unselected expert: the routing gap
            if (lane == 0) {
                const int last = sel[k - 1];
                const float lv = probs[last] + (p.bias ? p.bias[last] : 0.0f);
                const float gap = fmaxf(lv - bv, 0.0f);
                atomicMin((int *)p.gap, __float_as_int(gap));
            }
            break;
        }
        if (lane == 0) {
            sel[j] = bi;
            taken[bi] = 1;
        }
        __syncwarp();
    }
    __syncwarp();
    if (lane == 0) {
        float w[ROUTE_MAX_K], sum = 0.0f;
        for (int j = 0; j < k; j++) w[j] = probs[sel[j]];
        if (p.softmax_weight) { // the k selected logits' softmax, in selection order
            float mx = -INFINITY;
            for (int j = 0; j < k; j++) mx = fmaxf(mx, w[j]);
            double es = 0.0;
            for (int j = 0; j < k; j++) {
                w[j] = expf(w[j] - mx);
                es += w[j];
            }
            const float inv = (float)(1.0 / es);
            for (int j = 0; j < k; j++) w[j] *= inv;
        }
        for (int j = 0; j < k; j++) sum += w[j];
        if (p.norm_w) {
            sum = fmaxf(sum, 6.103515625e-5f);
            for (int j = 0; j < k; j++) w[j] /= sum;
        }
        if (p.w_scale != 0.0f && p.w_scale != 1.0f)
            for (int j = 0; j < k; j++) w[j] *= p.w_scale;
        for (int j = 0; j < k; j++) {
            p.sel[(int64_t)t * k + j] = sel[j];
            p.w[(int64_t)t * k + j] = w[j];
            if (p.counts) atomicAdd(&p.counts[sel[j]], 1ull);
        }
    }
}

// The same routing with each lane's experts in registers (PL per lane: n_expert <= 32 * PL)
// and k <= 32 (lane j keeps slot j): no shared memory, no serial tail, which is where the
// kernel above spends its time at decode. Same comparisons and the same float operations in
// the same order (the weight sum is still taken slot by slot), so the same results.
// The logits are read through L2 (__ldcg): moe_router_kernel's last CTA routes the logits
// the other CTAs wrote.
template <int PL>
__device__ __forceinline__ void route_token(const ft_cuda_route_params &p, int t, int lane) {
    const int ne = p.n_expert, k = p.k;
    const float *lg = p.logits + (int64_t)t * ne;
    float pr[PL], v[PL];
    unsigned taken = 0; // bit i: expert lane + 32 i is selected (or does not exist)
#pragma unroll
    for (int i = 0; i < PL; i++) {
        const int e = lane + FT_WARP * i;
        pr[i] = e < ne ? __ldcg(&lg[e]) : -INFINITY;
        if (e >= ne) taken |= 1u << i;
    }
    if (p.softmax) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < PL; i++) mx = fmaxf(mx, pr[i]);
        mx = ft_warp_max(mx);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < PL; i++) {
            const float e = lane + FT_WARP * i < ne ? expf(pr[i] - mx) : 0.0f;
            pr[i] = e;
            sum += e;
        }
        sum = ft_warp_sum(sum);
        const float inv = 1.0f / sum;
#pragma unroll
        for (int i = 0; i < PL; i++) pr[i] *= inv;
    } else if (!p.softmax_weight) { // (softmax_weight: the logits themselves select)
#pragma unroll
        for (int i = 0; i < PL; i++) pr[i] = 1.0f / (1.0f + expf(-pr[i]));
    }
#pragma unroll
    for (int i = 0; i < PL; i++) {
        const int e = lane + FT_WARP * i;
        v[i] = pr[i] + (p.bias && e < ne ? p.bias[e] : 0.0f);
    }
    int my_sel = 0;
    float my_w = 0.0f, last_v = 0.0f;
    for (int j = 0; j <= k && j < ne; j++) {
        // the lane's best untaken expert (ascending index: ties keep the lower one), then the warp's
        float bv = -INFINITY;
        int bi = ne;
#pragma unroll
        for (int i = 0; i < PL; i++)
            if (!(taken >> i & 1) && (bi == ne || v[i] > bv)) {
                bv = v[i];
                bi = lane + FT_WARP * i;
            }
        warp_argmax(bv, bi, ne);
        if (j == k) {
            if (lane == 0) atomicMin((int *)p.gap, __float_as_int(fmaxf(last_v - bv, 0.0f)));
            break;
        }
        // the winner's probability, from the lane that holds it
        float cand = 0.0f;
#pragma unroll
        for (int i = 0; i < PL; i++)
            if (i == bi / FT_WARP) cand = pr[i];
        const float pw = __shfl_sync(0xffffffffu, cand, bi % FT_WARP);
        if (lane == bi % FT_WARP) taken |= 1u << (bi / FT_WARP);
        if (lane == j) {
            my_sel = bi;
            my_w = pw;
        }
        last_v = bv;
    }
    if (p.softmax_weight) { // the k selected logits' softmax, the sum in double in slot order
        float mx = -INFINITY;
        for (int j = 0; j < k; j++) mx = fmaxf(mx, __shfl_sync(0xffffffffu, my_w, j));
        const float ew = expf(my_w - mx);
        double es = 0.0;
        for (int j = 0; j < k; j++) es += (double)__shfl_sync(0xffffffffu, ew, j);
        my_w = ew * (float)(1.0 / es);
    }
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += __shfl_sync(0xffffffffu, my_w, j);
    if (p.norm_w) my_w /= fmaxf(sum, 6.103515625e-5f);
    if (p.w_scale != 0.0f && p.w_scale != 1.0f) my_w *= p.w_scale;
    if (lane < k) {
        p.sel[(int64_t)t * k + lane] = my_sel;
        p.w[(int64_t)t * k + lane] = my_w;
        if (p.counts) atomicAdd(&p.counts[my_sel], 1ull);
    }
}

template <int PL>
__global__ void __launch_bounds__(FT_WARP) moe_route_reg_kernel(const ft_cuda_route_params p) {
    ft_pdl_begin();
    route_token<PL>(p, blockIdx.x, threadIdx.x);
}

// ---------------------------------------------------------------------------------------------
// Router and routing in one launch, for one token (decode) and float router weights: a warp per
// expert row computes its logit (lane l takes elements l, l + 32, ...; float FMAs, then the
// warp's sum), ROUTER_WARPS rows per CTA; each CTA then counts itself done (after a
// threadfence: its logits are visible first) and the last one routes with its first warp
// (route_token), then resets the count for the next launch. Replaces the router matvec and the
// routing launch. With the export (ft_cuda_router_params.export_x) each CTA also copies its
// slice of x to the host and fences it to the system before counting itself done, and the last
// CTA's routing warp writes the routing there too, fences, and publishes the meeting.

enum { ROUTER_WARPS = 4 };

template <int T> __device__ __forceinline__ float router_w(const void *w, size_t i);
template <> __device__ __forceinline__ float router_w<FT_TYPE_F32>(const void *w, size_t i) { return ((const float *)w)[i]; }
template <> __device__ __forceinline__ float router_w<FT_TYPE_F16>(const void *w, size_t i) {
    return ft_fp16_to_fp32(((const ft_half *)w)[i]);
}
template <> __device__ __forceinline__ float router_w<FT_TYPE_BF16>(const void *w, size_t i) {
    return __uint_as_float((uint32_t)((const ft_bf16 *)w)[i] << 16);
}

// The logit of row e: a warp's lane-strided FMA chain, then the warp's sum (lane 0 has it).
template <int T>
__device__ __forceinline__ float router_dot_warp(const ft_cuda_router_params &r, int e, int lane) {
    const size_t row = (size_t)e * (size_t)r.n_embd;
    float acc = 0.0f;
#pragma unroll 8
    for (int64_t i = lane; i < r.n_embd; i += FT_WARP) acc = fmaf(router_w<T>(r.w, row + i), r.x[i], acc);
    return ft_warp_sum(acc);
}

// The logit of row e by the whole CTA (f32, n_embd a multiple of 4, 16-byte aligned rows and
// x, which may be shared memory): thread t reads float4 number t + 128 j of the row and of x, four of each issued before
// their FMAs (past the row's end, zeros: they add nothing), then the warps' sums meet in shared
// memory (thread 0 has it).
__device__ __forceinline__ float router_dot_cta(const ft_cuda_router_params &r, const float *x, int e, float *part) {
    const float4 *w4 = (const float4 *)((const float *)r.w + (size_t)e * (size_t)r.n_embd);
    const float4 *x4 = (const float4 *)x;
    const int n4 = (int)(r.n_embd / 4), nt = blockDim.x;
    float acc = 0.0f;
    for (int j0 = threadIdx.x; j0 < n4; j0 += 4 * nt) {
        float4 wv[4], xv[4];
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const bool in = j0 + b * nt < n4;
            wv[b] = in ? w4[j0 + b * nt] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            xv[b] = in ? x4[j0 + b * nt] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int b = 0; b < 4; b++) {
            acc = fmaf(wv[b].x, xv[b].x, acc);
            acc = fmaf(wv[b].y, xv[b].y, acc);
            acc = fmaf(wv[b].z, xv[b].z, acc);
            acc = fmaf(wv[b].w, xv[b].w, acc);
        }
    }
    acc = ft_warp_sum(acc);
    if (threadIdx.x % FT_WARP == 0) part[threadIdx.x / FT_WARP] = acc;
    __syncthreads();
    float sum = 0.0f;
    if (threadIdx.x == 0)
        for (int w = 0; w < ROUTER_WARPS; w++) sum += part[w];
    return sum;
}

// ROW_CTA: a CTA per expert row (router_dot_cta: f32 rows whose width and addresses take float4
// loads), else a warp per row, ROUTER_WARPS rows per CTA (FT_CUDA_ROUTER_VEC=0 asks for it).
// NORM (ROW_CTA only; ft_cuda_router_params.norm): r.x is the residual row and each CTA first
// normalises it into shared memory with the norm launch's bits (rms_norm.cuh), dots its row with
// that, and writes its share of the norm's outputs (a warp a 32-element block: the floats, and
// their q8_1 form for the expert matmuls).
template <int T, int PL, bool ROW_CTA, bool NORM>
__global__ void __launch_bounds__(ROUTER_WARPS * FT_WARP) moe_router_kernel(const ft_cuda_router_params r,
                                                                            const ft_cuda_route_params p) {
    static_assert(!NORM || ROW_CTA, "the norm takes the whole CTA");
    extern __shared__ __align__(16) float xs[]; // NORM: the normalised row
    __shared__ bool last;
    __shared__ float part[ROUTER_WARPS], red[32];
    const int warp = threadIdx.x / FT_WARP, lane = threadIdx.x % FT_WARP;
    const int e = ROW_CTA ? blockIdx.x : blockIdx.x * ROUTER_WARPS + warp;
    const size_t row_bytes = (size_t)r.n_embd * (T == FT_TYPE_F32 ? 4 : 2);
    if (e < p.n_expert) // the router's rows (constant) are requested while the kernel before ends
        ft_prefetch_l2((const uint8_t *)r.w + (size_t)e * row_bytes, row_bytes, ROW_CTA ? threadIdx.x : lane,
                       ROW_CTA ? blockDim.x : FT_WARP);
    if (NORM && r.norm_w) // the norm's weights too, a share each CTA (read after its reduction)
        ft_prefetch_l2(r.norm_w, (size_t)r.n_embd * sizeof(float), blockIdx.x * blockDim.x + threadIdx.x,
                       gridDim.x * blockDim.x);
    ft_pdl_begin();
    if (r.export_x)
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < r.n_embd;
             i += (int64_t)gridDim.x * blockDim.x)
            r.export_x[i] = r.x[i];
    // the router's bias (gpt-oss): an f32 add into the logit, as the CPU op's
    const float *x = r.x;
    if constexpr (NORM) {
        const int n = (int)r.n_embd;
        rms_norm_row_smem<ROUTER_WARPS * FT_WARP>(r.x, r.norm_w, r.norm_eps, n, xs, red);
        x = xs;
        for (int b = blockIdx.x * ROUTER_WARPS + warp; b < n / QK8_1; b += gridDim.x * ROUTER_WARPS) {
            const float o = xs[b * QK8_1 + lane];
            r.norm_y[b * QK8_1 + lane] = o;
            if (r.norm_yq) ft_q8_1_warp_store(o, (block_q8_1 *)r.norm_yq + b, lane);
        }
    }
    if constexpr (ROW_CTA) {
        const float logit = router_dot_cta(r, x, e, part);
        if (threadIdx.x == 0) const_cast<float *>(p.logits)[e] = p.logit_bias ? logit + p.logit_bias[e] : logit;
    } else if (e < p.n_expert) {
        const float logit = router_dot_warp<T>(r, e, lane);
        if (lane == 0) // (this kernel writes what it routes)
            const_cast<float *>(p.logits)[e] = p.logit_bias ? logit + p.logit_bias[e] : logit;
    }
    if (r.export_x) __threadfence_system();
    else __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(r.count, 1) == (int)gridDim.x - 1;
        if (last) *r.count = 0; // every other CTA has counted: ready for the next launch
    }
    __syncthreads();
    if (last && warp == 0) {
        __threadfence();
        route_token<PL>(p, 0, lane);
        if (r.export_x) {
            if (lane < p.k) { // (each lane reads back the slot it wrote)
                r.export_sel[lane] = p.sel[lane];
                r.export_w[lane] = p.w[lane];
            }
            __threadfence_system();
            __syncwarp();
            if (lane == 0) ft_meeting_publish(r.export_flag, r.export_seq);
        }
    }
}

extern "C" bool ft_cuda_moe_router_fits(uint32_t w_type, int n_tok, int n_expert, int k) {
    return n_tok == 1 && (w_type == FT_TYPE_F32 || w_type == FT_TYPE_F16 || w_type == FT_TYPE_BF16) &&
           n_expert >= 1 && n_expert <= 8 * FT_WARP && k >= 1 && k <= FT_WARP && k <= n_expert;
}

// A CTA per row with float4 loads where it applies (faster fused decode than a warp per row:
// docs/performance.md); FT_CUDA_ROUTER_VEC=0 keeps a warp per row, for A/B. Read once.
static bool router_vec_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) enabled = ft_env_flag(FT_ENV_CUDA_ROUTER_VEC);
    return enabled;
}

template <int T, bool ROW_CTA, bool NORM = false>
static void launch_router(const ft_cuda_router_params *r, const ft_cuda_route_params *p, cudaStream_t st) {
    const unsigned grid = (unsigned)(ROW_CTA ? p->n_expert : (p->n_expert + ROUTER_WARPS - 1) / ROUTER_WARPS);
    const size_t smem = NORM ? (size_t)r->n_embd * sizeof(float) : 0;
    if (p->n_expert <= 4 * FT_WARP)
        ft_launch(moe_router_kernel<T, 4, ROW_CTA, NORM>, grid, ROUTER_WARPS * FT_WARP, smem, st, *r, *p);
    else
        ft_launch(moe_router_kernel<T, 8, ROW_CTA, NORM>, grid, ROUTER_WARPS * FT_WARP, smem, st, *r, *p);
}

extern "C" bool ft_cuda_moe_router_norm_fits(const ft_cuda_router_params *r) {
    return r->w_type == FT_TYPE_F32 && router_vec_enabled() && r->n_embd % QK8_1 == 0 &&
           r->n_embd <= FT_CUDA_ROUTER_NORM_MAX && (uintptr_t)r->w % 16 == 0 && (uintptr_t)r->x % 16 == 0 &&
           !r->export_x;
}

extern "C" void ft_cuda_moe_router(const ft_cuda_router_params *r, const ft_cuda_route_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(ft_cuda_moe_router_fits(r->w_type, p->n_tok, p->n_expert, p->k) && p->gap && r->count);
    FT_CUDA_ASSERT(!(p->softmax && p->softmax_weight));
    FT_CUDA_ASSERT(r->n_embd >= 1);
    const cudaStream_t st = ft_cuda_stream_handle(s);
    if (r->norm) {
        FT_CUDA_ASSERT(ft_cuda_moe_router_norm_fits(r) && r->norm_y);
        launch_router<FT_TYPE_F32, true, true>(r, p, st);
        CUDA_CHECK_LAUNCH();
        return;
    }
    switch (r->w_type) {
    case FT_TYPE_F32:
        if (router_vec_enabled() && r->n_embd % 4 == 0 && (uintptr_t)r->w % 16 == 0 &&
            (uintptr_t)r->x % 16 == 0)
            launch_router<FT_TYPE_F32, true>(r, p, st);
        else
            launch_router<FT_TYPE_F32, false>(r, p, st);
        break;
    case FT_TYPE_F16: launch_router<FT_TYPE_F16, false>(r, p, st); break;
    default: launch_router<FT_TYPE_BF16, false>(r, p, st); break;
    }
    CUDA_CHECK_LAUNCH();
}

__global__ void moe_combine_kernel(const float *h, const float *w, float *y, int k, int n_embd, int64_t total) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (i >= total) return;
    const int64_t t = i / n_embd;
    const int c = (int)(i % n_embd);
    float acc = h[(t * k) * n_embd + c] * w[t * k];
    for (int j = 1; j < k; j++) acc += h[(t * k + j) * n_embd + c] * w[t * k + j];
    y[i] = acc;
}

// One thread per element of the pairs' rows, in the fused kernels' steps (expert_extras.cuh).
__global__ void moe_glu_extras_kernel(float *hg, const float *hu, const ft_cuda_expert_extras ex, int n_ff,
                                      int64_t total) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (i >= total) return;
    const int64_t pr = i / n_ff;
    hg[i] = ft_expert_glu(ex, ex.bias_ids[pr], n_ff, i % n_ff, hg[i], hu[i]);
}

// (a pair the CPU computes, ids -1 in hybrid, keeps its zero row: the CPU adds its extras)
__global__ void moe_down_extras_kernel(float *h, const int32_t *ids, const ft_cuda_expert_extras ex, int n,
                                       int64_t total) {
    ft_pdl_begin();
    const int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (i >= total || ids[i / n] < 0) return;
    h[i] = ft_expert_down(ex, ex.bias_ids[i / n], n, i % n, h[i]);
}

extern "C" void ft_cuda_moe_glu_extras(float *h_gate, const float *h_up, const ft_cuda_expert_extras *ex,
                                       int64_t n_pairs, int n_ff, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(ex->bias_ids);
    const int64_t total = n_pairs * n_ff;
    if (total == 0) return;
    ft_launch(moe_glu_extras_kernel, (unsigned)((total + 255) / 256), 256, 0, ft_cuda_stream_handle(s), h_gate, h_up,
              *ex, n_ff, total);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_moe_down_extras(float *h, const int32_t *ids, const ft_cuda_expert_extras *ex, int64_t n_pairs,
                                        int n, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(ex->bias_ids);
    const int64_t total = n_pairs * n;
    if (total == 0 || (!ex->down_scale && !ex->down_bias)) return;
    ft_launch(moe_down_extras_kernel, (unsigned)((total + 255) / 256), 256, 0, ft_cuda_stream_handle(s), h, ids, *ex,
              n, total);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_moe_route(const ft_cuda_route_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(p->n_expert >= 1 && p->n_expert <= ROUTE_MAX_EXPERTS);
    FT_CUDA_ASSERT(p->k >= 1 && p->k <= ROUTE_MAX_K && p->k <= p->n_expert && p->gap);
    FT_CUDA_ASSERT(!(p->softmax && p->softmax_weight));
    if (p->n_tok == 0) return;
    const cudaStream_t st = ft_cuda_stream_handle(s);
    if (p->logit_bias || p->softmax_weight) ft_launch(moe_route_kernel, (unsigned)p->n_tok, FT_WARP, 0, st, *p);
    else if (p->k <= FT_WARP && p->n_expert <= 4 * FT_WARP) ft_launch(moe_route_reg_kernel<4>, (unsigned)p->n_tok, FT_WARP, 0, st, *p);
    else if (p->k <= FT_WARP && p->n_expert <= 8 * FT_WARP) ft_launch(moe_route_reg_kernel<8>, (unsigned)p->n_tok, FT_WARP, 0, st, *p);
    else ft_launch(moe_route_kernel, (unsigned)p->n_tok, FT_WARP, 0, st, *p);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_moe_combine(const float *h, const float *w, float *y, int n_tok, int k, int n_embd,
                                    ft_cuda_stream *s) {
    const int64_t total = (int64_t)n_tok * n_embd;
    if (total == 0) return;
    ft_launch(moe_combine_kernel, (unsigned)((total + 255) / 256), 256, 0, ft_cuda_stream_handle(s), h, w, y, k, n_embd, total);
    CUDA_CHECK_LAUNCH();
}
