// attention_split.cuh: how attention.cu's kernels split the keys of a launch over CTAs
// (flash-decoding) and how the splits' partial results are merged; internal to attention.cu
// and attention_decode.cu.
//
// The split is a function of the launch's shapes and key count alone, computed by the kernels
// themselves: with the position in device memory (a replayed CUDA graph) the grid has the most
// splits the shapes can take and those past the split return at once, so a graphed step
// computes exactly what the same step launched directly computes.
//
// Partial results: per (token t, query head h, split z) head_dim unnormalised sums, the running
// max and the softmax sum, at ((t * n_head + h) * stride + z) * (head_dim + 2) floats.
#ifndef FT_CUDA_ATTENTION_SPLIT_CUH
#define FT_CUDA_ATTENTION_SPLIT_CUH

#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "q8_1.cuh"

enum {
    AT_THREADS = 128, // the CTA of every attention kernel
    AT_MAX_HD = 512, // the general kernel's (gemma4's full layers); decode and flash take 64, 128, 256
    DEC_ROWS = 16, // query rows ((token, head) pairs of one KV head) of a decode CTA: one MMA tile
    DEC_TK = 64,   // keys of a decode tile: 16 per warp
    DEC_MAX_SPLIT = 128,
    // a decode launch aims at p.dec_ctas CTAs (FT_CUDA_DEC_CTAS_PER_SM a multiprocessor, so that
    // the cache reads of all of them are in flight together: a decode CTA at depth waits on
    // memory), each split holding DEC_MIN_KEYS keys or more (fewer splits, less to merge, where
    // the context is short)
    DEC_MIN_KEYS = 128,
};

struct attn_split_t {
    // per: keys of the longest split; the first rem splits hold per keys, the others per - chunk
    // (a decode launch's chunks dealt evenly, so that its CTAs end together); stride: splits
    // between (t, h) rows
    int n_split, per, stride, rem, chunk;
};

// Split z's first key (from the launch's first) and its key count.
__host__ __device__ inline int attn_split_first(const attn_split_t &s, int z) {
    return z * s.per - (z > s.rem ? z - s.rem : 0) * s.chunk;
}
__host__ __device__ inline int attn_split_len(const attn_split_t &s, int z) {
    return z < s.rem ? s.per : s.per - s.chunk;
}

// Does this launch take attention_decode.cu's kernel (a small batch, head sizes it is built for)?
__host__ __device__ inline bool attn_decode(int n_tok, int head_dim) {
    return n_tok <= FT_CUDA_ATTN_SPLIT_MAX_TOK && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

// Decode CTAs per KV head: its n_tok * group query rows, DEC_ROWS a CTA.
__host__ __device__ inline int dec_row_groups(int n_tok, int n_head, int n_head_kv) {
    return (n_tok * (n_head / n_head_kv) + DEC_ROWS - 1) / DEC_ROWS;
}

// The most tokens the DEC_ROWS rows of one decode CTA belong to.
__host__ __device__ inline int dec_tok_span(int n_tok, int n_head, int n_head_kv) {
    const int span = (DEC_ROWS - 1) / (n_head / n_head_kv) + 2;
    return span < n_tok ? span : n_tok;
}

// The most splits a decode launch of these shapes takes (its grid's z with a device position):
// n_seq sequences of n_tok tokens each.
__host__ __device__ inline int dec_max_split(int n_tok, int n_head, int n_head_kv, int n_seq, int target) {
    const int ctas = n_head_kv * dec_row_groups(n_tok, n_head, n_head_kv) * n_seq;
    const int want = (target + ctas - 1) / ctas;
    return want < DEC_MAX_SPLIT ? want : DEC_MAX_SPLIT;
}

// max_keys keys in up to max_split ranges of at least min_keys, each whole chunks of chunk keys:
// ranges of one length (balance false), or as many ranges as asked with the chunks dealt evenly
// (their lengths differ by a chunk at most).
__host__ __device__ inline attn_split_t attn_split_keys(int max_keys, int max_split, int min_keys, int chunk,
                                                        bool balance) {
    attn_split_t r = {1, max_keys, 1, 1, chunk};
    int n = (max_keys + min_keys - 1) / min_keys;
    n = n < max_split ? n : max_split;
    if (n <= 1) return r;
    if (balance) {
        const int chunks = (max_keys + chunk - 1) / chunk, q = chunks / n, rest = chunks % n;
        r.n_split = n;
        r.per = (q + (rest > 0)) * chunk;
        r.rem = rest > 0 ? rest : n;
        return r;
    }
    const int per = (max_keys + n - 1) / n;
    r.per = (per + chunk - 1) / chunk * chunk;
    r.n_split = (max_keys + r.per - 1) / r.per;
    r.rem = r.n_split;
    return r;
}

// The split of a launch whose first query is at pos0: the decode kernel's (stride: its splits),
// or attention_kernel's (chunks of AT_THREADS keys, small batches only; stride
// FT_CUDA_ATTN_MAX_SPLIT).
__host__ __device__ inline attn_split_t attn_split_of(const ft_cuda_attn_params &p, int pos0) {
    const bool decode = attn_decode(p.n_tok, p.head_dim);
    int max_keys = pos0 + p.n_tok;
    if (p.window > 0) {
        // a decode CTA's rows may belong to several tokens, each with its own window
        const int w = p.window + (decode ? dec_tok_span(p.n_tok, p.n_head, p.n_head_kv) - 1 : 0);
        max_keys = max_keys < w ? max_keys : w;
    }
    attn_split_t r = {1, max_keys, 1, 1, 1};
    if (!p.part) return r;
    if (decode) {
        r = attn_split_keys(max_keys, dec_max_split(p.n_tok, p.n_head, p.n_head_kv, p.n_seq, p.dec_ctas), DEC_MIN_KEYS, DEC_TK, true);
        r.stride = r.n_split;
        return r;
    }
    if (p.n_tok > FT_CUDA_ATTN_SPLIT_MAX_TOK) return r;
    r = attn_split_keys(max_keys, FT_CUDA_ATTN_MAX_SPLIT, AT_THREADS, AT_THREADS, false);
    r.stride = FT_CUDA_ATTN_MAX_SPLIT;
    return r;
}

// The first query's position.
__device__ __forceinline__ int attn_pos0(const ft_cuda_attn_params &p) {
    return p.pos0 + (p.pos_dev ? *p.pos_dev : 0);
}

// Splits between one sequence's (token, head) rows of partials in a launch of rows of several
// sequences: the most any of them takes.
__host__ __device__ inline int attn_seq_stride(const ft_cuda_attn_params &p) {
    return attn_decode(1, p.head_dim) ? dec_max_split(1, p.n_head, p.n_head_kv, p.n_seq, p.dec_ctas)
                                      : FT_CUDA_ATTN_MAX_SPLIT;
}

// p, a copy of a launch's params with rows of several sequences (p.rows), becomes the launch
// of sequence s alone: its one query, its position and block table, its share of the outputs
// and partials; the split still spreads over all n_seq sequences' CTAs.
__device__ __forceinline__ void attn_seq(ft_cuda_attn_params &p, int s) {
    const int64_t width = (int64_t)p.n_head * p.head_dim, off = (int64_t)s * width;
    const int64_t part_off = (int64_t)s * p.n_head * attn_seq_stride(p) * (p.head_dim + 2);
    p.pos0 = p.rows.pos[s];
    p.blocks = p.rows.blocks[s];
    p.rows.pos = NULL;
    p.pos_dev = NULL;
    p.n_tok = 1;
    p.q += off;
    p.out += off;
    if (p.out_q) p.out_q = (block_q8_1 *)p.out_q + off / QK8_1;
    if (p.part) p.part += part_off;
}

// The queries of sequence s as attn_seq moves them, from the launch's own params pa: nvcc 13
// compiled attention_kernel's read of p.q after attn_seq to a load of the parameter's unmoved
// pointer (its PTX loads param+0; the other moved fields were right), so the kernels take the
// query from here.
__device__ __forceinline__ const float *attn_seq_q(const ft_cuda_attn_params &pa, int s) {
    return pa.rows.pos ? pa.q + (int64_t)s * pa.n_head * pa.head_dim : pa.q;
}

__device__ __forceinline__ float *attn_part_row(const ft_cuda_attn_params &p, int t, int h, int z, int stride) {
    return p.part + (((int64_t)t * p.n_head + h) * stride + z) * (p.head_dim + 2);
}

// The splits of one (head, token) merged by a CTA of AT_THREADS threads (all of them call it):
// weights e^(M_z - M) for each split's sums. Every load is issued before the first is used: thread
// z's split's max and sum, and the values of its dim in the first MZ splits (one round trip, not
// one for the maxes and another for the values); the largest max M and the denominator are
// reductions over the CTA; splits past MZ, and dims past the CTA's, follow in rounds of MZ. The
// partials come from other CTAs: read through L2 (__ldcg), never from a line an earlier launch
// left in this SM's L1. Ends with a barrier, so that it may be called again at once.
__device__ __forceinline__ void attn_merge(const ft_cuda_attn_params &p, int h, int t, const attn_split_t &sp) {
    constexpr int NS = DEC_MAX_SPLIT, MZ = 64;
    static_assert(NS == AT_THREADS && FT_CUDA_ATTN_MAX_SPLIT <= NS, "a thread per split");
    __shared__ float f_s[NS], red[FT_WARP];
    const int hd = p.head_dim, tid = threadIdx.x, n_split = sp.n_split;
    const float *part = attn_part_row(p, t, h, 0, sp.stride);
    float mz = -INFINITY, sz = 0.0f, pv[MZ];
    if (tid < n_split) {
        mz = __ldcg(&part[tid * (hd + 2) + hd]);
        sz = __ldcg(&part[tid * (hd + 2) + hd + 1]);
    }
#pragma unroll
    for (int u = 0; u < MZ; u++)
        pv[u] = tid < hd && u < n_split ? __ldcg(&part[u * (hd + 2) + tid]) : 0.0f;
    const float M = ft_block_max(mz, red);
    const float f = mz != -INFINITY ? expf(mz - M) : 0.0f; // (a split that saw no key weighs 0)
    f_s[tid] = f;
    float S = ft_block_sum(sz * f, red); // (its barriers publish f_s)
    if (p.sinks) S += expf(p.sinks[h] - M); // the head's sink: one more term of the denominator
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    const int64_t o0 = ((int64_t)t * p.n_head + h) * hd;
    for (int d = tid; d < hd; d += AT_THREADS) {
        float v = 0.0f;
        for (int z0 = 0; z0 < n_split; z0 += MZ) {
            if (d != tid || z0 > 0) // (the first round of the first dim: loaded above)
#pragma unroll
                for (int u = 0; u < MZ; u++)
                    pv[u] = z0 + u < n_split ? __ldcg(&part[(z0 + u) * (hd + 2) + d]) : 0.0f;
#pragma unroll
            for (int u = 0; u < MZ; u++)
                if (z0 + u < n_split) v += pv[u] * f_s[z0 + u];
        }
        p.out[o0 + d] = v * inv;
        if (p.out_q) ft_q8_1_warp_store(v * inv, (block_q8_1 *)p.out_q + (o0 + d) / QK8_1, tid % FT_WARP);
    }
    __syncthreads();
}

// attention_decode.cu: launches its kernel on grid (n_head_kv * dec_row_groups, n_seq, n_split)
// (p.n_seq set; with p.rows, p.n_tok is the sequences').
void attn_decode_launch(const ft_cuda_attn_params &p, int n_split, cudaStream_t st);

#endif
