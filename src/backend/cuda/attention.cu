// attention.cu: causal attention of n_tok queries over an f16 or q8_0 KV cache (decode and
// prefill, sliding windows, grouped KV heads), with the scores computed as the CPU op does:
// for an f16 cache the query is rounded to f16 and dotted in float; for a q8_0 cache the
// query is quantized to q8_0 (the CPU's rounding) and dotted with integer sums per block.
//
// Decode batches take attention_decode.cu's kernel; prefill batches of the shapes flash_attn.cu
// covers take its tiled tensor-core kernel; the rest run here, one CTA per (head, token). The
// split of the keys over CTAs (flash-decoding) and the merge of the splits: attention_split.cuh.
#include "attention_split.cuh"

#include "../../quant/fp16.h"
#include "../../quant/quant.h"
#include "../../util/env.h"

#include <stdlib.h>

__device__ __forceinline__ float ld_kv(const uint8_t *row, uint32_t type, int d) {
    if (type == FT_TYPE_F16) return ft_fp16_to_fp32(((const ft_half *)row)[d]);
    const block_q8_0 *b = (const block_q8_0 *)row + d / 32;
    return ft_fp16_to_fp32(b->d) * (float)b->qs[d % 32];
}

// Steps, one 128-thread CTA per (head, token):
//   1. the query (converted as above) goes to shared memory;
//   2. keys kmin..qpos in chunks of 128: thread i scores key k0 + i; CTA max; p = e^(s - M)
//      with the running max M; the running sum and the accumulators are rescaled when M grows
//      (online softmax, float);
//   3. warp w takes keys w, w + 4, ... of the chunk, lane l output dims l, l + 32, ... (V rows
//      read coalesced); at the end the 4 warps' sums are added and divided by the softmax sum.
// Small batches (n_tok <= FT_CUDA_ATTN_SPLIT_MAX_TOK) of head sizes the decode kernel lacks split
// the keys into up to FT_CUDA_ATTN_MAX_SPLIT ranges of whole chunks, one CTA each (grid.z),
// writing partial results that attention_merge_kernel merges.
// MHD: the largest head_dim of the instance (AT_MAX_HD / 2, or AT_MAX_HD for gemma4's heads of
// 512), which sizes the per-thread accumulators.
template <int MHD>
__global__ void __launch_bounds__(AT_THREADS) attention_kernel(const ft_cuda_attn_params pa) {
    ft_pdl_begin();
    ft_cuda_attn_params p = pa;
    if (pa.rows.pos) attn_seq(p, blockIdx.y); // (then its token 0)
    __shared__ float qf[MHD];
    __shared__ int8_t qq[MHD];
    __shared__ float qd[MHD / 32];
    __shared__ float pr[AT_THREADS];
    __shared__ float red[32];
    const int h = blockIdx.x, t = pa.rows.pos ? 0 : blockIdx.y, tid = threadIdx.x, hd = p.head_dim;
    const int hk = h / (p.n_head / p.n_head_kv);
    const int pos0 = attn_pos0(p), qpos = pos0 + t;
    const attn_split_t sp = attn_split_of(p, pos0);
    if ((int)blockIdx.z >= sp.n_split) return; // a graphed launch's spare CTAs
    const int kmin = p.window > 0 ? max(0, qpos - p.window + 1) : 0;
    // split z of the keys (flash-decoding): keys kbeg..kend, which may be none
    const int kbeg = kmin + (int)blockIdx.z * sp.per;
    const int kend = sp.n_split > 1 ? min(qpos, kbeg + sp.per - 1) : qpos;
    const float *q = attn_seq_q(pa, blockIdx.y) + ((int64_t)t * p.n_head + h) * hd;
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
    constexpr int DJ = MHD / FT_WARP, NW = AT_THREADS / FT_WARP;
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
            const uint8_t *kr = (const uint8_t *)p.k + (size_t)ft_kv_row(p.blocks, k) * p.k_row_bytes + koff;
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
            const uint8_t *vr = (const uint8_t *)p.v + (size_t)ft_kv_row(p.blocks, k0 + kk) * p.v_row_bytes + voff;
#pragma unroll
            for (int j = 0; j < DJ; j++) {
                const int d = lane + j * FT_WARP;
                if (d < hd) acc[j] += pk * ld_kv(vr, p.v_type, d);
            }
        }
        __syncthreads(); // pr is rewritten by the next chunk
    }
    // the warps' partial sums, through shared memory (reusing the query's buffer)
    __shared__ float part[NW][MHD];
#pragma unroll
    for (int j = 0; j < DJ; j++) {
        const int d = lane + j * FT_WARP;
        if (d < hd) part[warp][d] = acc[j];
    }
    __syncthreads();
    if (sp.n_split > 1) {
        // a partial result: the unnormalised sums, the running max and the softmax sum
        float *o = attn_part_row(p, t, h, blockIdx.z, sp.stride);
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
    // a sink joins the denominator as one more key with no value (M = -inf: no key, output 0)
    if (p.sinks) S += expf(p.sinks[h] - M);
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    float *o = p.out + ((int64_t)t * p.n_head + h) * hd;
    for (int d = tid; d < hd; d += AT_THREADS) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) v += part[w][d];
        o[d] = v * inv;
    }
}

__global__ void __launch_bounds__(AT_THREADS) attention_merge_kernel(const ft_cuda_attn_params pa) {
    // the position and the split before the wait for the attention (copies before the step wrote
    // the position, no kernel of it does); every CTA waits, so that the launch never completes
    // before the attention it follows
    ft_cuda_attn_params p = pa;
    if (pa.rows.pos) attn_seq(p, blockIdx.y);
    const attn_split_t sp = attn_split_of(p, attn_pos0(p));
    ft_pdl_begin();
    if (sp.n_split == 1) return; // the attention kernel wrote the output (a graphed launch)
    attn_merge(p, blockIdx.x, pa.rows.pos ? 0 : blockIdx.y, sp);
}

int attn_dec_ctas(void) {
    static int ctas;
    if (!ctas) {
        const char *e = ft_env_str(FT_ENV_CUDA_DEC_CTAS_PER_SM);
        const int asked = e ? atoi(e) : 0;
        ctas = (asked >= 1 && asked <= 8 ? asked : 2) * ft_cuda_sm_count();
    }
    return ctas;
}

extern "C" bool ft_cuda_attention_quantizes(int n_tok, int head_dim) { return attn_decode(n_tok, head_dim); }

extern "C" size_t ft_cuda_attention_part_floats(int n_tok, bool rows, int n_head, int n_head_kv, int head_dim) {
    if (rows) { // each sequence's rows at the most splits any takes (attn_seq_stride)
        ft_cuda_attn_params p = {};
        p.n_head = n_head, p.n_head_kv = n_head_kv, p.head_dim = head_dim, p.n_seq = n_tok, p.dec_ctas = attn_dec_ctas();
        return (size_t)n_tok * (size_t)n_head * (size_t)attn_seq_stride(p) * (size_t)(head_dim + 2);
    }
    const int max_split = attn_decode(n_tok, head_dim) ? dec_max_split(n_tok, n_head, n_head_kv, 1, attn_dec_ctas())
                          : n_tok <= FT_CUDA_ATTN_SPLIT_MAX_TOK ? FT_CUDA_ATTN_MAX_SPLIT : 0;
    return (size_t)n_tok * (size_t)n_head * (size_t)max_split * (size_t)(head_dim + 2);
}

extern "C" size_t ft_cuda_attention_part_bound(int64_t max_width, int max_head_dim) {
    // attention_kernel: FT_CUDA_ATTN_SPLIT_MAX_TOK tokens of FT_CUDA_ATTN_MAX_SPLIT splits of
    // n_head * (head_dim + 2) <= 3 * max_width floats (head_dim >= 1). The decode kernel: its
    // n_tok * n_head rows are at most DEC_ROWS * ctas (ctas = n_head_kv * row groups, times the
    // sequences of a launch of several), each of n_split <= target / ctas + 1 partials of
    // head_dim + 2 floats, where n_split > 1 (ctas < target, the CTAs a decode launch aims at):
    // twice DEC_ROWS * target rows at most
    const size_t general = (size_t)FT_CUDA_ATTN_SPLIT_MAX_TOK * FT_CUDA_ATTN_MAX_SPLIT * 3 * (size_t)max_width;
    const size_t decode = (size_t)2 * DEC_ROWS * (size_t)attn_dec_ctas() * (size_t)(max_head_dim + 2);
    return general > decode ? general : decode;
}

extern "C" void ft_cuda_attention(const ft_cuda_attn_params *pp, ft_cuda_stream *s) {
    ft_cuda_attn_params q = *pp;
    const ft_cuda_attn_params *p = &q;
    const bool rows = q.rows.pos != NULL;
    q.n_seq = rows ? q.n_tok : 1;
    q.dec_ctas = attn_dec_ctas();
    const int per_seq = rows ? 1 : q.n_tok; // tokens of each sequence
    FT_CUDA_ASSERT(!p->out_q || ft_cuda_attention_quantizes(per_seq, p->head_dim));
    FT_CUDA_ASSERT(p->head_dim >= 1 && p->head_dim <= AT_MAX_HD && p->n_head % p->n_head_kv == 0);
    FT_CUDA_ASSERT(p->k_type == FT_TYPE_F16 || (p->k_type == FT_TYPE_Q8_0 && p->head_dim % 32 == 0));
    FT_CUDA_ASSERT(p->v_type == FT_TYPE_F16 || (p->v_type == FT_TYPE_Q8_0 && p->head_dim % 32 == 0));
    FT_CUDA_ASSERT(p->n_tok >= 0 && p->n_tok <= 65535 && (!rows || p->rows.blocks));
    if (p->n_tok == 0) return;
    // small batches (decode) split the keys over several CTAs so that their cache reads are in
    // flight together; prefill has CTAs enough. With the position on the device the split is
    // unknown here: launch the most CTAs, the spare ones return.
    const bool decode = attn_decode(per_seq, p->head_dim);
    int n_split = rows ? 1 : attn_split_of(*p, p->pos0).n_split;
    if ((p->pos_dev || rows) && p->part)
        n_split = decode ? dec_max_split(per_seq, p->n_head, p->n_head_kv, q.n_seq, q.dec_ctas)
                         : per_seq <= FT_CUDA_ATTN_SPLIT_MAX_TOK ? FT_CUDA_ATTN_MAX_SPLIT : 1;
    const cudaStream_t st = ft_cuda_stream_handle(s);
    if (decode) attn_decode_launch(*p, n_split, st);
    else if (p->head_dim <= AT_MAX_HD / 2)
        ft_launch(attention_kernel<AT_MAX_HD / 2>, dim3((unsigned)p->n_head, (unsigned)p->n_tok, (unsigned)n_split),
                  AT_THREADS, 0, st, *p);
    else
        ft_launch(attention_kernel<AT_MAX_HD>, dim3((unsigned)p->n_head, (unsigned)p->n_tok, (unsigned)n_split),
                  AT_THREADS, 0, st, *p);
    CUDA_CHECK_LAUNCH();
    if (n_split > 1) {
        ft_launch(attention_merge_kernel, dim3((unsigned)p->n_head, (unsigned)p->n_tok), AT_THREADS, 0, st, *p);
        CUDA_CHECK_LAUNCH();
    }
}
