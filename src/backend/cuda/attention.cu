// attention.cu: causal attention of n_tok queries over an f16 or q8_0 KV cache (decode and
// prefill, sliding windows, grouped KV heads), with the scores computed as the CPU op does:
// for an f16 cache the query is rounded to f16 and dotted in float; for a q8_0 cache the
// query is quantized to q8_0 (the CPU's rounding) and dotted with integer sums per block.
//
// The steps, the split of the keys (flash-decoding) and the launch geometry: above
// attention_kernel.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "q8_1.cuh"

#include "../../quant/fp16.h"
#include "../../quant/quant.h"

enum { AT_THREADS = 128, AT_MAX_HD = 256, DEC_CHUNK = 16 }; // DEC_CHUNK: attention_decode_kernel's keys per step (4 warps x 4)

__device__ __forceinline__ float ld_kv(const uint8_t *row, uint32_t type, int d) {
    if (type == FT_TYPE_F16) return ft_fp16_to_fp32(((const ft_half *)row)[d]);
    const block_q8_0 *b = (const block_q8_0 *)row + d / 32;
    return ft_fp16_to_fp32(b->d) * (float)b->qs[d % 32];
}

// The split of max_keys keys: n_split ranges of per keys (whole chunks of chunk keys: the
// keys a CTA takes per step, AT_THREADS for attention_kernel, DEC_CHUNK for the decode kernel).
struct attn_split_t {
    int n_split, per;
};

// Does this launch take attention_decode_kernel (n_tok small, head sizes it is built for)?
__host__ __device__ static bool attn_decode(int n_tok, int head_dim) {
    return n_tok <= FT_CUDA_ATTN_SPLIT_MAX_TOK && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

__host__ __device__ static attn_split_t attn_split(int max_keys, bool allow, int chunk) {
    attn_split_t r = {1, max_keys};
    if (!allow || max_keys <= chunk) return r;
    int n = (max_keys + chunk - 1) / chunk;
    n = n < FT_CUDA_ATTN_MAX_SPLIT ? n : FT_CUDA_ATTN_MAX_SPLIT;
    const int per = (max_keys + n - 1) / n;
    r.per = (per + chunk - 1) / chunk * chunk;
    r.n_split = (max_keys + r.per - 1) / r.per;
    return r;
}

// The first query's position, and the split of this launch.
__device__ __forceinline__ int attn_pos0(const ft_cuda_attn_params &p) {
    return p.pos0 + (p.pos_dev ? *p.pos_dev : 0);
}

__device__ __forceinline__ attn_split_t attn_split_of(const ft_cuda_attn_params &p, int pos0) {
    int max_keys = pos0 + p.n_tok;
    if (p.window > 0) max_keys = min(max_keys, p.window);
    return attn_split(max_keys, p.part != NULL && p.n_tok <= FT_CUDA_ATTN_SPLIT_MAX_TOK,
                      attn_decode(p.n_tok, p.head_dim) ? DEC_CHUNK : AT_THREADS);
}

// Steps, one 128-thread CTA per (head, token):
//   1. the query (converted as above) goes to shared memory;
//   2. keys kmin..qpos in chunks of 128: thread i scores key k0 + i; CTA max; p = e^(s - M)
//      with the running max M; the running sum and the accumulators are rescaled when M grows
//      (online softmax, float);
//   3. warp w takes keys w, w + 4, ... of the chunk, lane l output dims l, l + 32, ... (V rows
//      read coalesced); at the end the 4 warps' sums are added and divided by the softmax sum.
// Batches of up to FT_CUDA_ATTN_SPLIT_MAX_TOK tokens (decode) split the keys into up to
// FT_CUDA_ATTN_MAX_SPLIT ranges of whole chunks, one CTA each (grid.z), writing partial sums,
// maxima and softmax sums that are then merged (flash-decoding): by the decode kernel's last
// CTA of each (head, token) when split_count is given, else by a second kernel. Prefill batches of the
// shapes flash_attn.cu covers take its tiled tensor-core kernel; the rest run here, one CTA per
// (head, token).
// The split is a function of the key count alone (attn_split), computed by the kernels
// themselves: with the position in device memory (a replayed CUDA graph) the grid has
// FT_CUDA_ATTN_MAX_SPLIT CTAs per (head, token) and those past the split return at once, so a
// graphed step computes exactly what the same step launched directly computes.
__global__ void __launch_bounds__(AT_THREADS) attention_kernel(const ft_cuda_attn_params p) {
    ft_pdl_begin();
    __shared__ float qf[AT_MAX_HD];
    __shared__ int8_t qq[AT_MAX_HD];
    __shared__ float qd[AT_MAX_HD / 32];
    __shared__ float pr[AT_THREADS];
    __shared__ float red[32];
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x, hd = p.head_dim;
    const int hk = h / (p.n_head / p.n_head_kv);
    const int pos0 = attn_pos0(p), qpos = pos0 + t;
    const attn_split_t sp = attn_split_of(p, pos0);
    if ((int)blockIdx.z >= sp.n_split) return; // a graphed launch's spare CTAs
    const int kmin = p.window > 0 ? max(0, qpos - p.window + 1) : 0;
    // split z of the keys (flash-decoding): keys kbeg..kend, which may be none
    const int kbeg = kmin + (int)blockIdx.z * sp.per;
    const int kend = sp.n_split > 1 ? min(qpos, kbeg + sp.per - 1) : qpos;
    const float *q = p.q + ((int64_t)t * p.n_head + h) * hd;
    const bool kq8 = p.k_type == FT_TYPE_Q8_0;
    const size_t koff = (size_t)hk * (kq8 ? (size_t)hd / 32 * sizeof(block_q8_0) : (size_t)hd * 2);
    const size_t voff = (size_t)hk * (p.v_type == FT_TYPE_Q8_0 ? (size_t)hd / 32 * sizeof(block_q8_0) : (size_t)hd * 2);

    // 1. the query in the key's dot-product format
    if (kq8) {
        // a warp per block of 32: amax, d = amax / 127, codes round-half-even(x * 127 / amax)
        const int lane = tid % FT_WARP;
        for (int b = tid / FT_WARP; b < hd / 32; b += AT_THREADS / FT_WARP) {
            const float v = q[b * 32 + lane];
            const float amax = ft_warp_max(fabsf(v));
            const float id = amax != 0.0f ? 127.f / amax : 0.0f;
            qq[b * 32 + lane] = (int8_t)__float2int_rn(v * id);
            if (lane == 0) qd[b] = ft_fp16_to_fp32(ft_fp32_to_fp16(amax / 127.f));
        }
    } else {
        for (int d = tid; d < hd; d += AT_THREADS) qf[d] = ft_fp16_to_fp32(ft_fp32_to_fp16(q[d]));
    }
    __syncthreads();

    // thread (warp w, lane l) accumulates dims l, l + 32, ... over the keys w, w + 4, ... of
    // each chunk; the 4 warps' partial sums are added at the end
    constexpr int DJ = AT_MAX_HD / FT_WARP, NW = AT_THREADS / FT_WARP;
    const int lane = tid % FT_WARP, warp = tid / FT_WARP;
    float acc[DJ];
#pragma unroll
    for (int j = 0; j < DJ; j++) acc[j] = 0.0f;
    float M = -INFINITY, S = 0.0f;
    const bool vec = !kq8 && hd % 8 == 0; // 16-byte loads of 8 f16 keys
    for (int k0 = kbeg; k0 <= kend; k0 += AT_THREADS) {
        // 2. scores of this chunk
        const int k = k0 + tid;
        float s = -INFINITY;
        if (k <= kend) {
            const uint8_t *kr = (const uint8_t *)p.k + (size_t)k * p.k_row_bytes + koff;
            s = 0.0f;
            if (kq8) {
                for (int b = 0; b < hd / 32; b++) {
                    const block_q8_0 *kb = (const block_q8_0 *)kr + b;
                    int isum = 0;
#pragma unroll 8
                    for (int i = 0; i < 32; i++) isum += (int)kb->qs[i] * (int)qq[b * 32 + i];
                    s += ft_fp16_to_fp32(kb->d) * qd[b] * (float)isum;
                }
            } else if (vec) {
                const uint4 *k8 = (const uint4 *)kr;
                // unrolled so that several 16-byte loads are in flight before the first use
#pragma unroll 8
                for (int d8 = 0; d8 < hd / 8; d8++) {
                    const uint4 u = k8[d8];
                    const uint32_t w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        s += ft_fp16_to_fp32((ft_half)(w4[i] & 0xFFFFu)) * qf[d8 * 8 + 2 * i];
                        s += ft_fp16_to_fp32((ft_half)(w4[i] >> 16)) * qf[d8 * 8 + 2 * i + 1];
                    }
                }
            } else {
                const ft_half *kh = (const ft_half *)kr;
                for (int d = 0; d < hd; d++) s += ft_fp16_to_fp32(kh[d]) * qf[d];
            }
            s *= p.scale;
        }
        const float m_chunk = ft_block_max(s, red);
        const float M_new = fmaxf(M, m_chunk);
        const float e = k <= kend ? expf(s - M_new) : 0.0f;
        const float e_sum = ft_block_sum(e, red);
        const float rescale = M == -INFINITY ? 0.0f : expf(M - M_new);
        S = S * rescale + e_sum;
        M = M_new;
        pr[tid] = e;
        __syncthreads();
        // 3. values
        const int n_k = min(AT_THREADS, kend - k0 + 1);
#pragma unroll
        for (int j = 0; j < DJ; j++) acc[j] *= rescale;
        // unrolled: the value loads of several keys are issued before their sums need them
#pragma unroll 8
        for (int kk = warp; kk < n_k; kk += NW) {
            const float pk = pr[kk];
            const uint8_t *vr = (const uint8_t *)p.v + (size_t)(k0 + kk) * p.v_row_bytes + voff;
#pragma unroll
            for (int j = 0; j < DJ; j++) {
                const int d = lane + j * FT_WARP;
                if (d < hd) acc[j] += pk * ld_kv(vr, p.v_type, d);
            }
        }
        __syncthreads(); // pr is rewritten by the next chunk
    }
    // the warps' partial sums, through shared memory (reusing the query's buffer)
    __shared__ float part[NW][AT_MAX_HD];
#pragma unroll
    for (int j = 0; j < DJ; j++) {
        const int d = lane + j * FT_WARP;
        if (d < hd) part[warp][d] = acc[j];
    }
    __syncthreads();
    if (sp.n_split > 1) {
        // a partial result: the unnormalised sums, the running max and the softmax sum
        float *o = p.part + (((int64_t)t * p.n_head + h) * FT_CUDA_ATTN_MAX_SPLIT + blockIdx.z) * (hd + 2);
        for (int d = tid; d < hd; d += AT_THREADS) {
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < NW; w++) v += part[w][d];
            o[d] = v;
        }
        if (tid == 0) {
            o[hd] = M;
            o[hd + 1] = S;
        }
        return;
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    float *o = p.out + ((int64_t)t * p.n_head + h) * hd;
    for (int d = tid; d < hd; d += AT_THREADS) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) v += part[w][d];
        o[d] = v * inv;
    }
}

// ---------------------------------------------------------------------------------------------
// Decode (n_tok <= FT_CUDA_ATTN_SPLIT_MAX_TOK, head_dim = 32 * EPL): a warp per key instead
// of a thread per key, so that every load is a coalesced slice of a row and the keys a warp
// walks are independent of one another.
// Steps, one 128-thread CTA per (head, token, split), the split as attention_kernel's:
//   1. lane l holds the query's dims l*EPL .. l*EPL+EPL-1 in registers, converted as the
//      CPU op does (f16-rounded; or q8_0 codes with their block's scale, the block's amax
//      taken over the 32/EPL lanes that share it);
//   2. warp w takes keys kbeg + 4w + 16i .. +3 (4 keys per step, all their K and V slices
//      loaded before the arithmetic): score = warp sum of the lanes' partial dots (q8_0:
//      integer sums per block, scaled by both blocks' scales), online softmax per warp, V
//      slices accumulated in registers;
//   3. the 4 warps' (max, sum, accumulators) are merged through shared memory, and the CTA
//      writes the output, or a partial result (unnormalised sums, max, softmax sum) when the
//      keys are split; with split_count the last CTA of the (head, token) then merges them
//      (attn_merge, attention_merge_kernel's arithmetic), else attention_merge_kernel does.

template <int EPL>
__device__ __forceinline__ void ld_slice(const uint8_t *row, uint32_t type, int d0, float (&v)[EPL]) {
    if (type == FT_TYPE_F16) {
        const ft_half *hp = (const ft_half *)row + d0;
        if (EPL == 8) {
            const uint4 u = *(const uint4 *)hp;
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4 && 2 * i + 1 < EPL; i++) {
                v[2 * i] = ft_fp16_to_fp32((ft_half)(w[i] & 0xFFFFu));
                v[2 * i + 1] = ft_fp16_to_fp32((ft_half)(w[i] >> 16));
            }
        } else if (EPL == 4) {
            const uint2 u = *(const uint2 *)hp;
            v[0] = ft_fp16_to_fp32((ft_half)(u.x & 0xFFFFu));
            v[1] = ft_fp16_to_fp32((ft_half)(u.x >> 16));
            v[2 % EPL] = ft_fp16_to_fp32((ft_half)(u.y & 0xFFFFu));
            v[3 % EPL] = ft_fp16_to_fp32((ft_half)(u.y >> 16));
        } else {
#pragma unroll
            for (int i = 0; i < EPL; i++) v[i] = ft_fp16_to_fp32(hp[i]);
        }
    } else {
        const block_q8_0 *b = (const block_q8_0 *)row + d0 / 32;
        const float d = ft_fp16_to_fp32(b->d);
#pragma unroll
        for (int i = 0; i < EPL; i++) v[i] = d * (float)b->qs[d0 % 32 + i];
    }
}

// The splits of one (head, token) merged by a CTA of AT_THREADS threads (all of them call it):
// weights e^(M_z - M) for each split's sums, taken in split order. Thread z loads split z's
// max and sum into shared memory, and each thread's loop over the splits' values is unrolled
// so that its loads are in flight together: a few memory round trips, not one per split, in
// few registers (the decode kernel inlines this: its occupancy must not drop). The partials
// come from other CTAs: read through L2 (__ldcg), never from a line an earlier launch left in
// this SM's L1.
__device__ __forceinline__ void attn_merge(const ft_cuda_attn_params &p, int h, int t, int n_split) {
    constexpr int NS = FT_CUDA_ATTN_MAX_SPLIT;
    static_assert(NS <= AT_THREADS, "a thread per split");
    __shared__ float m_s[NS], s_s[NS], f_s[NS];
    const int hd = p.head_dim, tid = threadIdx.x;
    const float *part = p.part + ((int64_t)t * p.n_head + h) * NS * (hd + 2);
    if (tid < n_split) {
        m_s[tid] = __ldcg(&part[tid * (hd + 2) + hd]);
        s_s[tid] = __ldcg(&part[tid * (hd + 2) + hd + 1]);
    }
    __syncthreads();
    float M = -INFINITY;
    for (int z = 0; z < n_split; z++) M = fmaxf(M, m_s[z]);
    if (tid < n_split) f_s[tid] = m_s[tid] != -INFINITY ? expf(m_s[tid] - M) : 0.0f;
    __syncthreads();
    float S = 0.0f;
    for (int z = 0; z < n_split; z++)
        if (m_s[z] != -INFINITY) S += s_s[z] * f_s[z];
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    const int64_t o0 = ((int64_t)t * p.n_head + h) * hd;
    for (int d = tid; d < hd; d += AT_THREADS) {
        float v = 0.0f;
#pragma unroll 8
        for (int z = 0; z < n_split; z++) {
            const float pv = __ldcg(&part[z * (hd + 2) + d]);
            if (m_s[z] != -INFINITY) v += pv * f_s[z];
        }
        p.out[o0 + d] = v * inv;
        if (p.out_q) ft_q8_1_warp_store(v * inv, (block_q8_1 *)p.out_q + (o0 + d) / QK8_1, tid % FT_WARP);
    }
}

__global__ void __launch_bounds__(AT_THREADS) attention_merge_kernel(const ft_cuda_attn_params p) {
    ft_pdl_begin();
    const int n_split = attn_split_of(p, attn_pos0(p)).n_split;
    if (n_split == 1) return; // attention_kernel wrote the output (a graphed launch)
    attn_merge(p, blockIdx.x, blockIdx.y, n_split);
}

template <int EPL>
__global__ void __launch_bounds__(AT_THREADS) attention_decode_kernel(const ft_cuda_attn_params p) {
    ft_pdl_begin();
    constexpr int NW = AT_THREADS / FT_WARP, KPW = 4, G = 32 / EPL; // G lanes share a q8_0 block
    __shared__ float wacc[NW][32 * EPL];
    __shared__ float wm[NW], wl[NW];
    const int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x % FT_WARP, warp = threadIdx.x / FT_WARP;
    const int hd = 32 * EPL, d0 = lane * EPL;
    const int hk = h / (p.n_head / p.n_head_kv);
    const int pos0 = attn_pos0(p), qpos = pos0 + t;
    const attn_split_t sp = attn_split_of(p, pos0);
    if ((int)blockIdx.z >= sp.n_split) return;
    const int kmin = p.window > 0 ? max(0, qpos - p.window + 1) : 0;
    const int kbeg = kmin + (int)blockIdx.z * sp.per;
    const int kend = sp.n_split > 1 ? min(qpos, kbeg + sp.per - 1) : qpos;
    const bool kq8 = p.k_type == FT_TYPE_Q8_0;
    const size_t koff = (size_t)hk * (kq8 ? (size_t)hd / 32 * sizeof(block_q8_0) : (size_t)hd * 2);
    const size_t voff = (size_t)hk * (p.v_type == FT_TYPE_Q8_0 ? (size_t)hd / 32 * sizeof(block_q8_0) : (size_t)hd * 2);

    // 1. the query slice
    const float *q = p.q + ((int64_t)t * p.n_head + h) * hd + d0;
    float qf[EPL];
    int qq[EPL];
    float qd = 0.0f;
    if (kq8) {
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) amax = fmaxf(amax, fabsf(q[i]));
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) qq[i] = __float2int_rn(q[i] * id);
        qd = ft_fp16_to_fp32(ft_fp32_to_fp16(amax / 127.f));
    } else {
#pragma unroll
        for (int i = 0; i < EPL; i++) qf[i] = ft_fp16_to_fp32(ft_fp32_to_fp16(q[i]));
    }

    // 2. keys, 4 per warp per step
    float m = -INFINITY, l = 0.0f, acc[EPL];
#pragma unroll
    for (int i = 0; i < EPL; i++) acc[i] = 0.0f;
    for (int k0 = kbeg + warp * KPW; k0 <= kend; k0 += NW * KPW) {
        float kv[KPW][EPL], vv[KPW][EPL], s[KPW];
        float kd[KPW];
        int8_t kc[KPW][EPL];
#pragma unroll
        for (int j = 0; j < KPW; j++) {
            const int k = min(k0 + j, kend); // past the end: a valid row, masked below
            const uint8_t *kr = (const uint8_t *)p.k + (size_t)k * p.k_row_bytes + koff;
            if (kq8) {
                const block_q8_0 *b = (const block_q8_0 *)kr + d0 / 32;
                kd[j] = ft_fp16_to_fp32(b->d);
#pragma unroll
                for (int i = 0; i < EPL; i++) kc[j][i] = b->qs[d0 % 32 + i];
            } else {
                ld_slice<EPL>(kr, FT_TYPE_F16, d0, kv[j]);
            }
            ld_slice<EPL>((const uint8_t *)p.v + (size_t)k * p.v_row_bytes + voff, p.v_type, d0, vv[j]);
        }
#pragma unroll
        for (int j = 0; j < KPW; j++) {
            float part = 0.0f;
            if (kq8) {
                int isum = 0;
#pragma unroll
                for (int i = 0; i < EPL; i++) isum += qq[i] * (int)kc[j][i];
#pragma unroll
                for (int o = G / 2; o > 0; o >>= 1) isum += __shfl_xor_sync(0xffffffffu, isum, o);
                part = lane % G == 0 ? kd[j] * qd * (float)isum : 0.0f;
            } else {
#pragma unroll
                for (int i = 0; i < EPL; i++) part += qf[i] * kv[j][i];
            }
            s[j] = ft_warp_sum(part) * p.scale;
        }
        float mx = s[0]; // key k0 is valid
#pragma unroll
        for (int j = 1; j < KPW; j++)
            if (k0 + j <= kend) mx = fmaxf(mx, s[j]);
        const float m_new = fmaxf(m, mx);
        const float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
        l *= corr;
#pragma unroll
        for (int i = 0; i < EPL; i++) acc[i] *= corr;
#pragma unroll
        for (int j = 0; j < KPW; j++) {
            const float e = k0 + j <= kend ? expf(s[j] - m_new) : 0.0f;
            l += e;
#pragma unroll
            for (int i = 0; i < EPL; i++) acc[i] += e * vv[j][i];
        }
        m = m_new;
    }

    // 3. the warps merged
#pragma unroll
    for (int i = 0; i < EPL; i++) wacc[warp][d0 + i] = acc[i];
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; w++) M = fmaxf(M, wm[w]);
    float S = 0.0f, f[NW];
#pragma unroll
    for (int w = 0; w < NW; w++) {
        f[w] = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - M);
        S += wl[w] * f[w];
    }
    if (sp.n_split > 1) {
        float *o = p.part + (((int64_t)t * p.n_head + h) * FT_CUDA_ATTN_MAX_SPLIT + blockIdx.z) * (hd + 2);
        for (int d = threadIdx.x; d < hd; d += AT_THREADS) {
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < NW; w++) v += wacc[w][d] * f[w];
            o[d] = v;
        }
        if (threadIdx.x == 0) {
            o[hd] = M;
            o[hd + 1] = S;
        }
        if (!p.split_count) return;
        // the last CTA of this (head, token) to finish merges the splits: the partials are
        // made visible before the count says so (threadfence), and read past L1 (attn_merge)
        __shared__ bool last;
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            int *cnt = p.split_count + (int64_t)t * p.n_head + h;
            last = atomicAdd(cnt, 1) == sp.n_split - 1;
            if (last) *cnt = 0; // every other CTA has counted: ready for the next launch
        }
        __syncthreads();
        if (last) {
            __threadfence();
            attn_merge(p, h, t, sp.n_split);
        }
        return;
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    const int64_t o0 = ((int64_t)t * p.n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += AT_THREADS) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) v += wacc[w][d] * f[w];
        p.out[o0 + d] = v * inv;
        // hd % 32 == 0: each warp holds one whole q8_1 block of the output row
        if (p.out_q) ft_q8_1_warp_store(v * inv, (block_q8_1 *)p.out_q + (o0 + d) / QK8_1, lane);
    }
}


extern "C" bool ft_cuda_attention_quantizes(int n_tok, int head_dim) { return attn_decode(n_tok, head_dim); }

extern "C" void ft_cuda_attention(const ft_cuda_attn_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(!p->out_q || ft_cuda_attention_quantizes(p->n_tok, p->head_dim));
    FT_CUDA_ASSERT(p->head_dim >= 1 && p->head_dim <= AT_MAX_HD && p->n_head % p->n_head_kv == 0);
    FT_CUDA_ASSERT(p->k_type == FT_TYPE_F16 || (p->k_type == FT_TYPE_Q8_0 && p->head_dim % 32 == 0));
    FT_CUDA_ASSERT(p->v_type == FT_TYPE_F16 || (p->v_type == FT_TYPE_Q8_0 && p->head_dim % 32 == 0));
    FT_CUDA_ASSERT(p->n_tok >= 0 && p->n_tok <= 65535);
    if (p->n_tok == 0) return;
    // small batches (decode) split the keys over several CTAs per (head, token) so that more
    // than n_head CTAs share the cache reads; prefill has CTAs enough. With the position on the
    // device the split is unknown here: launch the most CTAs, the spare ones return.
    const bool allow = p->part && p->n_tok <= FT_CUDA_ATTN_SPLIT_MAX_TOK;
    int n_split = FT_CUDA_ATTN_MAX_SPLIT;
    if (!p->pos_dev) {
        int max_keys = p->pos0 + p->n_tok;
        if (p->window > 0) max_keys = min(max_keys, p->window);
        n_split = attn_split(max_keys, allow, attn_decode(p->n_tok, p->head_dim) ? DEC_CHUNK : AT_THREADS).n_split;
    } else if (!allow) {
        n_split = 1;
    }
    const cudaStream_t st = ft_cuda_stream_handle(s);
    const dim3 grid((unsigned)p->n_head, (unsigned)p->n_tok, (unsigned)n_split);
    // the warp-per-key kernel for decode batches of the head sizes it is built for
    const bool decode = attn_decode(p->n_tok, p->head_dim);
    if (decode && p->head_dim == 64) ft_launch(attention_decode_kernel<2>, grid, AT_THREADS, 0, st, *p);
    else if (decode && p->head_dim == 128) ft_launch(attention_decode_kernel<4>, grid, AT_THREADS, 0, st, *p);
    else if (decode && p->head_dim == 256) ft_launch(attention_decode_kernel<8>, grid, AT_THREADS, 0, st, *p);
    else ft_launch(attention_kernel, grid, AT_THREADS, 0, st, *p);
    CUDA_CHECK_LAUNCH();
    if (n_split > 1 && !(decode && p->split_count)) {
        ft_launch(attention_merge_kernel, dim3((unsigned)p->n_head, (unsigned)p->n_tok), AT_THREADS, 0, st, *p);
        CUDA_CHECK_LAUNCH();
    }
}
