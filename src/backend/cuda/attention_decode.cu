// attention_decode.cu: attention of a small batch of queries (decode: n_tok <=
// FT_CUDA_ATTN_SPLIT_MAX_TOK, head_dim 64, 128 or 256) over an f16 or q8_0 KV cache, with the
// scores computed as the CPU op does (attention.cu's top says how).
//
// Decode reads the whole cache for a few queries, so it is bound by the cache's bytes: each CTA
// takes one KV head and all its query heads (up to DEC_MAX_HEADS; more: several CTAs), so a K
// or V row is read once for all of them, and the keys are split over enough CTAs to fill the
// GPU (attention_split.cuh), each walking its keys in tiles that are copied to shared memory
// asynchronously, the next tile while the current one is computed.
//
// Steps, one 128-thread CTA per (KV head and query-head group, token, split):
//   1. the group's queries go to shared memory, f16-rounded (or as q8_0 codes and scales);
//   2. per tile of TK keys: thread (key j, head group) scores key j for its heads from the
//      shared tile (float dots, or integer sums per q8_0 block); a warp per head takes the
//      tile's max, rescales its running sum (online softmax, float) and writes the tile's
//      e^(s - M); thread (8 output dims, head group) accumulates the V rows in registers;
//   3. the CTA writes the output, or a partial result when the keys are split; with
//      split_count the last CTA of its (group, token) merges the splits (attn_merge), else
//      attention_merge_kernel does.
#include "attention_split.cuh"

#include <cuda_fp16.h>

#include "../../quant/fp16.h"
#include "../../quant/quant.h"

// Asynchronous copies global -> shared (sm_80 and later): 16 bytes (through L2 only) or 4.
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// 8 f16 values (16 bytes) as floats; the conversion is exact, so the hardware's equals ft's.
__device__ __forceinline__ void f16x8(const uint4 u, float (&f)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __half2 h;
        memcpy(&h, &w[i], 4);
        const float2 v = __half22float2(h);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

// 4 bytes of shared memory at a 2-byte aligned address (q8_0 codes follow a 2-byte scale).
__device__ __forceinline__ int ld_s32_a2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | (uint32_t)h[1] << 16);
}

template <int HD>
struct dec_shape {
    static constexpr int TK = dec_tile_keys(HD);
    static constexpr int Q8_ROW = HD / 32 * (int)sizeof(block_q8_0); // one head's q8_0 row
    // padded shared rows of K, so that the 16-byte (f16) or 2-byte (q8_0) loads of a warp's 32
    // keys at one offset fall in distinct banks: f16 rows 16 bytes longer, q8_0 rows an odd
    // number of words
    static constexpr int K16_STRIDE = HD * 2 + 16;
    static constexpr int K8_STRIDE = (Q8_ROW / 4) % 2 ? Q8_ROW : Q8_ROW + 4;
    static constexpr int KBUF = TK * (K16_STRIDE > K8_STRIDE ? K16_STRIDE : K8_STRIDE);
    static constexpr int VBUF = TK * HD * 2;
};

template <int HD, int GP>
__global__ void __launch_bounds__(AT_THREADS) attention_decode_kernel(const ft_cuda_attn_params p) {
    ft_pdl_begin();
    using S = dec_shape<HD>;
    constexpr int TK = S::TK, NB = HD / 32;
    __shared__ __align__(16) uint8_t kbuf[2][S::KBUF];
    __shared__ __align__(16) uint8_t vbuf[2][S::VBUF];
    __shared__ __align__(16) uint8_t qbuf[GP * HD * 2]; // f16 queries, or q8_0 codes then scales
    __shared__ float prob[GP][TK];                       // the tile's scores, then e^(s - M)
    __shared__ float run_m[GP], run_l[GP], run_c[GP];    // running max, sum, the tile's rescale

    const int tid = threadIdx.x, lane = tid % FT_WARP, warp = tid / FT_WARP;
    const int G = p.n_head / p.n_head_kv, n_grp = dec_groups(p.n_head, p.n_head_kv);
    const int hc = (G + n_grp - 1) / n_grp; // query heads per CTA, <= GP
    const int hk = (int)blockIdx.x / n_grp, grp = (int)blockIdx.x % n_grp, t = blockIdx.y;
    const int h0 = hk * G + grp * hc, nh = min(hc, G - grp * hc); // this CTA's heads h0 .. h0 + nh - 1
    const int pos0 = attn_pos0(p), qpos = pos0 + t;
    const attn_split_t sp = attn_split_of(p, pos0);
    if ((int)blockIdx.z >= sp.n_split) return; // a graphed launch's spare CTAs
    const int kmin = p.window > 0 ? max(0, qpos - p.window + 1) : 0;
    const int kbeg = kmin + (int)blockIdx.z * sp.per; // keys kbeg..kend, which may be none
    const int kend = sp.n_split > 1 ? min(qpos, kbeg + sp.per - 1) : qpos;
    const int n_tiles = kend >= kbeg ? (kend - kbeg + TK) / TK : 0;
    const bool kq8 = p.k_type == FT_TYPE_Q8_0, vq8 = p.v_type == FT_TYPE_Q8_0;
    const int krow = kq8 ? S::Q8_ROW : HD * 2, vrow = vq8 ? S::Q8_ROW : HD * 2;
    const uint8_t *kg = (const uint8_t *)p.k + (size_t)hk * krow, *vg = (const uint8_t *)p.v + (size_t)hk * vrow;
    const int kstride = kq8 ? S::K8_STRIDE : S::K16_STRIDE;

    // tile i's K and V rows to buffer b (rows past kend repeat row kend: valid data, masked).
    // The tile's keys lie in at most two blocks of the table (TK <= FT_KV_BLOCK): two lookups a
    // tile, the same for every thread, then rows run on as in an unpaged cache
    static_assert(TK <= FT_KV_BLOCK, "a decode tile spans at most two KV blocks");
    auto load_tile = [&](int i, int b) {
        const int k0 = kbeg + i * TK, edge = (k0 / FT_KV_BLOCK + 1) * FT_KV_BLOCK;
        const int64_t r0 = ft_kv_row(p.blocks, k0), r1 = min(k0 + TK - 1, kend) >= edge ? ft_kv_row(p.blocks, edge) : 0;
        auto row = [&](int r) -> size_t {
            const int k = min(k0 + r, kend);
            return (size_t)(k < edge ? r0 + (k - k0) : r1 + (k - edge));
        };
        if (kq8) {
            for (int e = tid; e < TK * (S::Q8_ROW / 4); e += AT_THREADS) {
                const int r = e / (S::Q8_ROW / 4), c = e % (S::Q8_ROW / 4);
                cp_async4(kbuf[b] + r * kstride + c * 4, kg + row(r) * p.k_row_bytes + c * 4);
            }
        } else {
            for (int e = tid; e < TK * (HD / 8); e += AT_THREADS) {
                const int r = e / (HD / 8), c = e % (HD / 8);
                cp_async16(kbuf[b] + r * kstride + c * 16, kg + row(r) * p.k_row_bytes + c * 16);
            }
        }
        if (vq8) {
            for (int e = tid; e < TK * (S::Q8_ROW / 4); e += AT_THREADS) {
                const int r = e / (S::Q8_ROW / 4), c = e % (S::Q8_ROW / 4);
                cp_async4(vbuf[b] + r * vrow + c * 4, vg + row(r) * p.v_row_bytes + c * 4);
            }
        } else {
            for (int e = tid; e < TK * (HD / 8); e += AT_THREADS) {
                const int r = e / (HD / 8), c = e % (HD / 8);
                cp_async16(vbuf[b] + r * vrow + c * 16, vg + row(r) * p.v_row_bytes + c * 16);
            }
        }
        cp_async_commit();
    };
    if (n_tiles > 0) load_tile(0, 0);

    // 1. the queries in the key's dot-product format (heads past nh: zeros, never used)
    const float *q = p.q + ((int64_t)t * p.n_head + h0) * HD;
    if (kq8) {
        int8_t *qc = (int8_t *)qbuf;
        float *qs = (float *)(qbuf + GP * HD);
        // a warp per block of 32: amax, d = amax / 127, codes round-half-even(x * 127 / amax)
        for (int b = warp; b < GP * NB; b += AT_THREADS / FT_WARP) {
            const float v = b / NB < nh ? q[b * 32 + lane] : 0.0f;
            const float amax = ft_warp_max(fabsf(v));
            const float id = amax != 0.0f ? 127.f / amax : 0.0f;
            qc[b * 32 + lane] = (int8_t)__float2int_rn(v * id);
            if (lane == 0) qs[b] = ft_fp16_to_fp32(ft_fp32_to_fp16(amax / 127.f));
        }
    } else {
        ft_half *qh = (ft_half *)qbuf;
        for (int i = tid; i < GP * HD; i += AT_THREADS) qh[i] = ft_fp32_to_fp16(i / HD < nh ? q[i] : 0.0f);
    }
    if (tid < GP) {
        run_m[tid] = -INFINITY;
        run_l[tid] = 0.0f;
    }

    // thread roles: scores (key j, heads gs, gs + NGS, ...), values (dims 8c..8c+7, heads gv,
    // gv + NGV, ...)
    constexpr int NGS = AT_THREADS / TK, SPT = (GP + NGS - 1) / NGS;
    constexpr int NGV = AT_THREADS / (HD / 8), HPT = (GP + NGV - 1) / NGV;
    const int j = tid % TK, gs = tid / TK, c = tid % (HD / 8), gv = tid / (HD / 8);
    float acc[HPT][8];
#pragma unroll
    for (int a = 0; a < HPT; a++)
#pragma unroll
        for (int i = 0; i < 8; i++) acc[a][i] = 0.0f;

    for (int it = 0; it < n_tiles; it++) {
        const int b = it & 1, k0 = kbeg + it * TK;
        if (it + 1 < n_tiles) {
            load_tile(it + 1, b ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); // the tile (and, the first time, the queries) visible to all

        // 2a. scores
        float s[SPT];
#pragma unroll
        for (int a = 0; a < SPT; a++) s[a] = 0.0f;
        const uint8_t *kr = kbuf[b] + j * kstride;
        if (kq8) {
            const int8_t *qc = (const int8_t *)qbuf;
            const float *qs = (const float *)(qbuf + GP * HD);
#pragma unroll
            for (int blk = 0; blk < NB; blk++) {
                const uint8_t *kb = kr + blk * sizeof(block_q8_0);
                const float dk = __half2float(__ushort_as_half(*(const uint16_t *)kb));
                int kw[8];
#pragma unroll
                for (int w = 0; w < 8; w++) kw[w] = ld_s32_a2(kb + 2 + 4 * w);
#pragma unroll
                for (int a = 0; a < SPT; a++) {
                    const int g = gs + a * NGS;
                    if (GP % NGS == 0 || g < GP) {
                        const int *qw = (const int *)(qc + (g * NB + blk) * 32);
                        int isum = 0;
#pragma unroll
                        for (int w = 0; w < 8; w++) isum = __dp4a(kw[w], qw[w], isum);
                        s[a] += dk * qs[g * NB + blk] * (float)isum;
                    }
                }
            }
        } else {
            const ft_half *qh = (const ft_half *)qbuf;
#pragma unroll 4
            for (int c8 = 0; c8 < HD / 8; c8++) {
                float kf[8];
                f16x8(*(const uint4 *)(kr + c8 * 16), kf);
#pragma unroll
                for (int a = 0; a < SPT; a++) {
                    const int g = gs + a * NGS;
                    if (GP % NGS == 0 || g < GP) {
                        float qf[8];
                        f16x8(*(const uint4 *)(qh + g * HD + c8 * 8), qf);
#pragma unroll
                        for (int i = 0; i < 8; i++) s[a] += qf[i] * kf[i];
                    }
                }
            }
        }
#pragma unroll
        for (int a = 0; a < SPT; a++) {
            const int g = gs + a * NGS;
            if (GP % NGS == 0 || g < GP) prob[g][j] = k0 + j <= kend ? s[a] * p.scale : -INFINITY;
        }
        __syncthreads();

        // 2b. online softmax, a warp per head (each tile holds key k0: its max is finite)
        for (int g = warp; g < nh; g += AT_THREADS / FT_WARP) {
            const float x = lane < TK ? prob[g][lane] : -INFINITY;
            const float m_old = run_m[g], m_new = fmaxf(m_old, ft_warp_max(x));
            const float e = x == -INFINITY ? 0.0f : expf(x - m_new);
            const float corr = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
            const float sum = ft_warp_sum(e);
            if (lane < TK) prob[g][lane] = e;
            if (lane == 0) {
                run_l[g] = run_l[g] * corr + sum;
                run_m[g] = m_new;
                run_c[g] = corr;
            }
        }
        __syncthreads();

        // 2c. values
        const int n_k = min(TK, kend - k0 + 1);
#pragma unroll
        for (int a = 0; a < HPT; a++) {
            const int g = gv + a * NGV;
            if (g < nh) {
                const float corr = run_c[g];
#pragma unroll
                for (int i = 0; i < 8; i++) acc[a][i] *= corr;
            }
        }
#pragma unroll 4
        for (int kk = 0; kk < n_k; kk++) {
            float vf[8];
            const uint8_t *vr = vbuf[b] + kk * vrow;
            if (vq8) {
                const uint8_t *vb = vr + (c / 4) * sizeof(block_q8_0);
                const float dv = __half2float(__ushort_as_half(*(const uint16_t *)vb));
                const int w0 = ld_s32_a2(vb + 2 + (c % 4) * 8), w1 = ld_s32_a2(vb + 2 + (c % 4) * 8 + 4);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    vf[i] = dv * (float)(int8_t)(w0 >> (8 * i));
                    vf[4 + i] = dv * (float)(int8_t)(w1 >> (8 * i));
                }
            } else {
                f16x8(*(const uint4 *)(vr + c * 16), vf);
            }
#pragma unroll
            for (int a = 0; a < HPT; a++) {
                const int g = gv + a * NGV;
                if (g < nh) {
                    const float pk = prob[g][kk];
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[a][i] += pk * vf[i];
                }
            }
        }
        __syncthreads(); // buffer b and prob are rewritten next
    }

    // 3. the group's sums through shared memory (the K buffers: every copy has landed), then
    // the output or the partial results
    float *sums = (float *)&kbuf[0][0]; // (GP, HD)
    static_assert(sizeof(float) * GP * HD <= sizeof(kbuf), "the sums fit the K buffers");
#pragma unroll
    for (int a = 0; a < HPT; a++) {
        const int g = gv + a * NGV;
        if (g < nh)
#pragma unroll
            for (int i = 0; i < 8; i++) sums[g * HD + c * 8 + i] = acc[a][i];
    }
    __syncthreads();
    if (sp.n_split > 1) {
        for (int e = tid; e < nh * HD; e += AT_THREADS)
            attn_part_row(p, t, h0 + e / HD, blockIdx.z, sp.stride)[e % HD] = sums[e];
        if (tid < nh) {
            float *o = attn_part_row(p, t, h0 + tid, blockIdx.z, sp.stride);
            o[HD] = run_m[tid];
            o[HD + 1] = run_l[tid];
        }
        if (!p.split_count) return;
        // the last CTA of this (group, token) to finish merges the splits: the partials are
        // made visible before the count says so (threadfence), and read past L1 (attn_merge)
        __shared__ bool last;
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            int *cnt = p.split_count + (int64_t)t * p.n_head + blockIdx.x;
            last = atomicAdd(cnt, 1) == sp.n_split - 1;
            if (last) *cnt = 0; // every other CTA has counted: ready for the next launch
        }
        __syncthreads();
        if (last) {
            __threadfence();
            for (int g = 0; g < nh; g++) attn_merge(p, h0 + g, t, sp);
        }
        return;
    }
    // nh * HD is a multiple of 32: each warp holds one whole q8_1 block of an output row
    for (int e = tid; e < nh * HD; e += AT_THREADS) {
        const int g = e / HD;
        const float l = run_l[g], v = l == 0.0f ? 0.0f : sums[e] / l;
        const int64_t o = ((int64_t)t * p.n_head + h0) * HD + e;
        p.out[o] = v;
        if (p.out_q) ft_q8_1_warp_store(v, (block_q8_1 *)p.out_q + o / QK8_1, lane);
    }
}

template <int HD>
static void launch_hd(const ft_cuda_attn_params &p, dim3 grid, cudaStream_t st) {
    const int G = p.n_head / p.n_head_kv, n_grp = dec_groups(p.n_head, p.n_head_kv);
    const int hc = (G + n_grp - 1) / n_grp;
    if (hc <= 1) ft_launch(attention_decode_kernel<HD, 1>, grid, AT_THREADS, 0, st, p);
    else if (hc <= 2) ft_launch(attention_decode_kernel<HD, 2>, grid, AT_THREADS, 0, st, p);
    else if (hc <= 4) ft_launch(attention_decode_kernel<HD, 4>, grid, AT_THREADS, 0, st, p);
    else if (hc <= 8) ft_launch(attention_decode_kernel<HD, 8>, grid, AT_THREADS, 0, st, p);
    else ft_launch(attention_decode_kernel<HD, 16>, grid, AT_THREADS, 0, st, p);
}

void attn_decode_launch(const ft_cuda_attn_params &p, int n_split, cudaStream_t st) {
    // the asynchronous copies move 16 bytes (f16 rows) or 4 (q8_0) at a time
    FT_CUDA_ASSERT(((uintptr_t)p.k | p.k_row_bytes) % (p.k_type == FT_TYPE_F16 ? 16 : 4) == 0);
    FT_CUDA_ASSERT(((uintptr_t)p.v | p.v_row_bytes) % (p.v_type == FT_TYPE_F16 ? 16 : 4) == 0);
    const dim3 grid((unsigned)(p.n_head_kv * dec_groups(p.n_head, p.n_head_kv)), (unsigned)p.n_tok, (unsigned)n_split);
    if (p.head_dim == 64) launch_hd<64>(p, grid, st);
    else if (p.head_dim == 128) launch_hd<128>(p, grid, st);
    else launch_hd<256>(p, grid, st);
}
