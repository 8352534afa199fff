// flash_attn.cu: tiled causal attention for prefill batches on tensor cores (flash attention,
// FA2's order of operations), over an f16 or q8_0 KV cache, with grouped KV heads and sliding
// windows. attention.cu keeps decode and the shapes this kernel does not take.
//
// Numerics: scores as the CPU op computes them, up to float summation order: over an f16 cache
// Q rounded to f16 times K (m16n8k16 f16 MMAs, f32 sums); over a q8_0 cache Q quantized to
// q8_0 as the CPU does, integer sums per 32-element block (m16n8k32 s8 MMAs) scaled by both
// blocks' scales. Values enter the MMAs as f16 (q8_0 rows dequantized on load) and so do the
// softmax weights P; the online softmax and the output accumulate in f32.
//
// The launch geometry, the steps and the MMA fragment layouts are above flash_attn_kernel.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "mma.cuh"

#include <cuda_fp16.h>

#include "../../quant/quant.h"
#include "../../util/env.h"

enum {
    FA_THREADS = 128,
    FA_BQ = 64, // query rows per CTA: 4 warps x 16
    FA_BK = 64, // keys per step
    FA_PAD = 8, // f16 elements of padding per shared row: rows 16 bytes apart, fragment loads
                // of the 8 rows x 4 words of a warp fall in 32 different banks
    FA_PAD8 = 16, // the same for rows of int8 codes
};

__device__ __forceinline__ uint32_t ld_word(const __half *p) { return *(const uint32_t *)p; }

// Two f16 of different rows as one word, lo in the low half.
__device__ __forceinline__ uint32_t pair_word(const __half *lo, const __half *hi) {
    return (uint32_t)__half_as_ushort(*lo) | ((uint32_t)__half_as_ushort(*hi) << 16);
}

// Where the keys of a tile of FA_BK from k0 lie in the cache: in at most two blocks of the
// block table (FA_BK <= FT_KV_BLOCK), key k < edge at row r0 + (k - k0), the others at
// r1 + (k - edge). Two lookups a tile, the same for every thread.
typedef struct tile_rows {
    int k0, edge;
    int64_t r0, r1;
} tile_rows;

template <int BK = FA_BK>
__device__ __forceinline__ tile_rows tile_rows_of(const int32_t *blocks, int k0, int kend) {
    static_assert(BK <= FT_KV_BLOCK, "a tile spans at most two KV blocks");
    const int edge = (k0 / FT_KV_BLOCK + 1) * FT_KV_BLOCK;
    return {k0, edge, ft_kv_row(blocks, k0), min(k0 + BK - 1, kend) >= edge ? ft_kv_row(blocks, edge) : 0};
}

__device__ __forceinline__ size_t tile_row(const tile_rows &t, int k) {
    return (size_t)(k < t.edge ? t.r0 + (k - t.k0) : t.r1 + (k - t.edge));
}

// Rows kbeg..kend of one KV head (f16 or q8_0) to a shared tile of FA_BK rows starting at key
// tr.k0, as f16; rows outside kbeg..kend are zeros, so that P = 0 meets finite values.
template <int D>
__device__ __forceinline__ void load_kv_tile(__half (*dst)[D + FA_PAD], const uint8_t *base, const tile_rows &tr,
                                             size_t row_bytes, uint32_t type, size_t head_off, int kbeg, int kend) {
    constexpr int C8 = D / 8; // 8-element chunks per row
    for (int i = threadIdx.x; i < FA_BK * C8; i += FA_THREADS) {
        const int j = i / C8, c = i % C8 * 8, k = tr.k0 + j;
        __half *o = &dst[j][c];
        if (k < kbeg || k > kend) {
            *(uint4 *)o = make_uint4(0, 0, 0, 0);
            continue;
        }
        const uint8_t *row = base + tile_row(tr, k) * row_bytes + head_off;
        if (type == FT_TYPE_F16) {
            *(uint4 *)o = *(const uint4 *)(row + (size_t)c * 2);
        } else {
            const block_q8_0 *b = (const block_q8_0 *)row + c / 32;
            const float d = __half2float(__ushort_as_half(b->d));
            uint32_t w[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                w[e] = pack_f16x2(d * (float)b->qs[c % 32 + 2 * e], d * (float)b->qs[c % 32 + 2 * e + 1]);
            *(uint4 *)o = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}

// q8_0 key rows kbeg..kend of one KV head as codes and scales (as load_kv_tile; zeros outside).
template <int D>
__device__ __forceinline__ void load_k_q8_tile(int8_t (*codes)[D + FA_PAD8], float (*scales)[D / 32], const uint8_t *base,
                                               const tile_rows &tr, size_t row_bytes, size_t head_off, int kbeg,
                                               int kend) {
    for (int i = threadIdx.x; i < FA_BK * (D / 32); i += FA_THREADS) {
        const int j = i / (D / 32), b = i % (D / 32), k = tr.k0 + j;
        uint32_t *o = (uint32_t *)&codes[j][b * 32];
        if (k < kbeg || k > kend) {
#pragma unroll
            for (int w = 0; w < 8; w++) o[w] = 0;
            scales[j][b] = 0.0f;
            continue;
        }
        const block_q8_0 *blk = (const block_q8_0 *)(base + tile_row(tr, k) * row_bytes + head_off) + b;
        const uint16_t *qs = (const uint16_t *)blk->qs; // 2-byte aligned: blocks are 34 bytes
#pragma unroll
        for (int w = 0; w < 8; w++) o[w] = (uint32_t)qs[2 * w] | ((uint32_t)qs[2 * w + 1] << 16);
        scales[j][b] = __half2float(__ushort_as_half(blk->d));
    }
}

// A key tile's scores in S's accumulators s (NK n-tiles of 8 keys from k0; element e: row
// g + 8 (e / 2), key column 2t + e % 2) scaled into log2 units (sl2) and masked (causal to the
// rows' positions qpos, the window) to -inf; then the online softmax: the rows' running max m
// (the 4 lanes of a row, t = 0..3, share it), sum l and output o rescaled to the new max, and s
// replaced by the weights exp2(s - max), added to l.
template <int NK, int ND>
__device__ __forceinline__ void fa_softmax_tile(float (&s)[NK][4], float (&o)[ND][4], float (&m)[2], float (&l)[2],
                                                int k0, int t, const int (&qpos)[2], int window, float sl2) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < NK; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int h = e / 2, k = k0 + 8 * n + 2 * t + e % 2;
            const bool seen = k <= qpos[h] && (window <= 0 || qpos[h] - k < window);
            s[n][e] = seen ? s[n][e] * sl2 : -INFINITY;
            mx[h] = fmaxf(mx[h], s[n][e]);
        }
    float base[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float m_new = fmaxf(m[h], mma_row_max(mx[h]));
        base[h] = m_new == -INFINITY ? 0.0f : m_new; // nothing seen yet: e^-inf = 0, not NaN
        const float corr = exp2f(m[h] - base[h]);
        l[h] *= corr;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            o[n][2 * h] *= corr;
            o[n][2 * h + 1] *= corr;
        }
        m[h] = m_new;
    }
#pragma unroll
    for (int n = 0; n < NK; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[n][e] = exp2f(s[n][e] - base[e / 2]);
            l[e / 2] += s[n][e];
        }
}

// P's A fragment for keys 16j .. 16j + 15 of a tile: the weights in S's C fragments of n-tiles
// 2j and 2j + 1, rounded to f16.
template <int NK>
__device__ __forceinline__ void fa_p_fragment(const float (&s)[NK][4], int j, uint32_t pa[4]) {
    pa[0] = pack_f16x2(s[2 * j][0], s[2 * j][1]);
    pa[1] = pack_f16x2(s[2 * j][2], s[2 * j][3]);
    pa[2] = pack_f16x2(s[2 * j + 1][0], s[2 * j + 1][1]);
    pa[3] = pack_f16x2(s[2 * j + 1][2], s[2 * j + 1][3]);
}

// The output of this thread's two rows (r0 and r0 + 8 of the CTA's FA_BQ, those the tile owns):
// O / l (the 4 lanes of a row summed, the head's sink in the denominator) into dims dv0 ..
// dv0 + 8 ND - 1 of the rows of out (D floats a head).
template <int D, int ND>
__device__ __forceinline__ void fa_write_rows(const ft_cuda_attn_params &p, const float (&o)[ND][4], const float (&m)[2],
                                              float (&l)[2], int r0, int t, int t0, int t1, int hk, int dv0) {
    const int group = p.n_head / p.n_head_kv, tpt = FA_BQ / group;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] = mma_row_sum(l[h]);
        const int r = r0 + 8 * h, tok = t0 + r / group;
        if (r >= tpt * group || tok > t1) continue;
        // the head's sink joins the denominator (m in log2 units, as the scores)
        if (p.sinks) l[h] += exp2f(p.sinks[hk * group + r % group] * 1.44269504088896340736f - m[h]);
        const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
        float *out = p.out + ((int64_t)tok * p.n_head + hk * group + r % group) * D + dv0;
#pragma unroll
        for (int n = 0; n < ND; n++)
            *(float2 *)&out[8 * n + 2 * t] = make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    }
}

// Query dims c0 .. c0 + DH - 1 of the tile's FA_BQ rows rounded to f16 into st (rows of ROW
// halves): row r = (token t0 + r / group, head hk * group + r % group), zeros past the tile's
// tokens (t1 the last).
template <int D, int DH, int ROW>
__device__ __forceinline__ void fa_stage_q_f16(const ft_cuda_attn_params &p, __half (*st)[ROW], int t0, int t1,
                                               int hk, int c0) {
    const int group = p.n_head / p.n_head_kv, tpt = FA_BQ / group;
    for (int i = threadIdx.x; i < FA_BQ * (DH / 2); i += FA_THREADS) {
        const int r = i / (DH / 2), d = i % (DH / 2) * 2, tok = t0 + r / group;
        float x0 = 0.0f, x1 = 0.0f;
        if (r < tpt * group && tok <= t1) {
            const float *q = p.q + ((int64_t)tok * p.n_head + hk * group + r % group) * D + c0 + d;
            x0 = q[0];
            x1 = q[1];
        }
        *(uint32_t *)&st[r][d] = pack_f16x2(x0, x1);
    }
}

// A warp's A fragments of its 16 staged f16 query rows from m0 (this thread's rows m0 + g and
// m0 + g + 8), KD k-steps of 16 dims.
template <int KD, int ROW>
__device__ __forceinline__ void fa_q_fragments(const __half (*st)[ROW], int m0, int g, int t, uint32_t (&qa)[KD][4]) {
#pragma unroll
    for (int kk = 0; kk < KD; kk++) {
        qa[kk][0] = ld_word(&st[m0 + g][kk * 16 + 2 * t]);
        qa[kk][1] = ld_word(&st[m0 + g + 8][kk * 16 + 2 * t]);
        qa[kk][2] = ld_word(&st[m0 + g][kk * 16 + 2 * t + 8]);
        qa[kk][3] = ld_word(&st[m0 + g + 8][kk * 16 + 2 * t + 8]);
    }
}

// Launch: one 128-thread CTA per (KV head, tile of FA_BQ / group tokens), grid (n_head_kv,
// tiles). Its FA_BQ = 64 rows are (token, query head) pairs of the heads sharing that KV head,
// row r = token t0 + r / group, head hk * group + r % group, so each K/V tile read to shared
// memory serves the whole group; rows past the tile's tokens compute on zeros, unwritten.
// Steps:
//   1. the rows' queries, rounded to f16 (or q8_0 codes and scales), staged in shared memory;
//      each warp takes 16 rows and keeps them as MMA A fragments in registers;
//   2. over the keys the tile's rows can see, FA_BK = 64 at a time: K and V rows to shared
//      memory (f16 copied; q8_0 V dequantized to f16, q8_0 K kept as codes and scales; keys
//      outside the range zero-filled);
//      S = Q K^T (f32), scaled, masked (causal, window) to -inf;
//      online softmax per row in f32 (running max m, sum l; O rescaled when m grows);
//      O += P V with P rounded to f16, straight from S's accumulator registers;
//   3. O / l written as f32.
//
// MMA fragments: mma.cuh.
// For S = Q K^T, k runs over head dims and the columns are keys: b0 is one aligned word of a
// K row in shared memory (a q8_0 block is one m16n8k32 step). For O += P V, k runs over keys:
// S's C fragments of key columns 16j..16j+7 and 16j+8..16j+15 are exactly P's A fragment for
// keys 16j..16j+15, and b0 pairs two V rows' elements of one dim (two 16-bit loads).
template <int D, bool KQ8>
__global__ void __launch_bounds__(FA_THREADS) flash_attn_kernel(const ft_cuda_attn_params p) {
    // Head size 256 takes its K rows (and queries) in halves of 128 through shared memory, and a
    // CTA writes one half of the output (grid.z): the tiles of 64 rows then fit 48 KB and the
    // fragments the registers, at the price of computing S once per output half.
    constexpr int DH = D > 128 ? 128 : D;       // head dims of K (and Q) staged at a time
    constexpr int NH = D / DH;                  // halves of K per key tile
    constexpr int DV = DH;                      // output dims of this CTA: dv0 .. dv0 + DV - 1
    constexpr int KD = KQ8 ? DH / 32 : DH / 16; // k-steps of S = Q K^T per half (q8_0: one block each)
    constexpr int ND = DV / 8;                  // n-tiles of O
    constexpr int NK = FA_BK / 8;
    constexpr int NBH = KQ8 ? DH / 32 : 1;      // q8_0 blocks per half row
    constexpr int NB = KQ8 ? D / 32 : 1;        // q8_0 blocks per row
    __shared__ __align__(16) __half ks[FA_BK][DH + FA_PAD]; // K tile, and the query staging area
    __shared__ __align__(16) __half vs[FA_BK][DV + FA_PAD];
    __shared__ float kd[KQ8 ? FA_BK : 1][NBH]; // q8_0: the key blocks' scales
    __shared__ float qd[KQ8 ? FA_BQ : 1][NB];  // q8_0: the query blocks' scales
    static_assert(FA_BQ <= FA_BK && FA_PAD8 <= 2 * FA_PAD + DH, "q8_0 codes fit in ks");
    int8_t(*kc)[DH + FA_PAD8] = (int8_t(*)[DH + FA_PAD8])&ks[0][0]; // q8_0: codes in ks's place
    const int lane = threadIdx.x % FT_WARP, warp = threadIdx.x / FT_WARP, g = lane / 4, t = lane % 4;
    const int group = p.n_head / p.n_head_kv, tpt = FA_BQ / group; // tokens per tile
    const int hk = blockIdx.x, t0 = blockIdx.y * tpt, t1 = min(t0 + tpt, p.n_tok) - 1, dv0 = blockIdx.z * DV;
    const int pos0 = p.pos0 + (p.pos_dev ? *p.pos_dev : 0);
    // the keys some row of the tile sees
    const int kend = pos0 + t1;
    const int kbeg = p.window > 0 ? max(0, pos0 + t0 - p.window + 1) : 0;

    // 1. queries, half by half: row r = (token t0 + r / group, head hk * group + r % group)
    const int m0 = warp * 16;
    uint32_t qa[NH][KD][4];
    float qs[2][NB]; // q8_0: the scales of this thread's two rows' blocks
#pragma unroll
    for (int hh = 0; hh < NH; hh++) {
        if (hh) __syncthreads(); // the previous half's fragments are in registers
        if constexpr (KQ8) {
            // a thread per (row, block): q8_0 as the CPU quantizes it (d = amax / 127 rounded to
            // f16, codes round(x / d) half away from zero)
            for (int i = threadIdx.x; i < FA_BQ * NBH; i += FA_THREADS) {
                const int r = i / NBH, b = i % NBH, tok = t0 + r / group;
                const bool valid = r < tpt * group && tok <= t1;
                const float *q = p.q + ((int64_t)(valid ? tok : 0) * p.n_head + hk * group + r % group) * D +
                                 (hh * NBH + b) * 32;
                float amax = 0.0f;
                for (int j = 0; j < 32 && valid; j++) amax = fmaxf(amax, fabsf(q[j]));
                const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                for (int j = 0; j < 32; j++) kc[r][b * 32 + j] = valid ? (int8_t)(int)roundf(q[j] * id) : 0;
                qd[r][hh * NBH + b] = __half2float(__float2half_rn(d));
            }
        } else {
            fa_stage_q_f16<D, DH>(p, ks, t0, t1, hk, hh * DH);
        }
        __syncthreads();
        if constexpr (KQ8) {
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                qa[hh][kk][0] = *(const uint32_t *)&kc[m0 + g][kk * 32 + 4 * t];
                qa[hh][kk][1] = *(const uint32_t *)&kc[m0 + g + 8][kk * 32 + 4 * t];
                qa[hh][kk][2] = *(const uint32_t *)&kc[m0 + g][kk * 32 + 4 * t + 16];
                qa[hh][kk][3] = *(const uint32_t *)&kc[m0 + g + 8][kk * 32 + 4 * t + 16];
                qs[0][hh * KD + kk] = qd[m0 + g][hh * KD + kk];
                qs[1][hh * KD + kk] = qd[m0 + g + 8][hh * KD + kk];
            }
        } else {
            fa_q_fragments(ks, m0, g, t, qa[hh]);
        }
    }
    // this thread's two rows (g and g + 8 of the warp's 16): their query positions
    int qpos[2];
#pragma unroll
    for (int h = 0; h < 2; h++) qpos[h] = pos0 + min(t0 + (m0 + g + 8 * h) / group, t1);

    // 2. keys kbeg..kend, FA_BK at a time
    const bool vq8 = p.v_type == FT_TYPE_Q8_0;
    const size_t q8_row = (size_t)D / 32 * sizeof(block_q8_0);
    const size_t koff = (size_t)hk * (KQ8 ? q8_row : (size_t)D * 2);
    const size_t koff_half = KQ8 ? (size_t)DH / 32 * sizeof(block_q8_0) : (size_t)DH * 2;
    const size_t voff = (size_t)hk * (vq8 ? q8_row : (size_t)D * 2) +
                        (vq8 ? (size_t)dv0 / 32 * sizeof(block_q8_0) : (size_t)dv0 * 2);
    const float sl2 = p.scale * 1.44269504088896340736f; // scores in log2 units: exp2f below
    float o[ND][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int k0 = kbeg; k0 <= kend; k0 += FA_BK) {
        __syncthreads(); // the previous tile (or the query staging) is no longer read
        const tile_rows tr = tile_rows_of(p.blocks, k0, kend);
        // S = Q K^T: n-tile n holds keys k0 + 8n .. k0 + 8n + 7
        float s[NK][4];
#pragma unroll
        for (int n = 0; n < NK; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int hh = 0; hh < NH; hh++) {
            if (hh) __syncthreads(); // the previous half of K is no longer read
            if constexpr (KQ8)
                load_k_q8_tile<DH>(kc, kd, (const uint8_t *)p.k, tr, p.k_row_bytes, koff + hh * koff_half, kbeg, kend);
            else
                load_kv_tile<DH>(ks, (const uint8_t *)p.k, tr, p.k_row_bytes, FT_TYPE_F16, koff + hh * koff_half, kbeg,
                                 kend);
            if (hh == 0) load_kv_tile<DV>(vs, (const uint8_t *)p.v, tr, p.v_row_bytes, p.v_type, voff, kbeg, kend);
            __syncthreads();
#pragma unroll
            for (int n = 0; n < NK; n++) {
#pragma unroll
                for (int kk = 0; kk < KD; kk++) {
                    if constexpr (KQ8) {
                        // block kk's integer sums, times (key scale * query scale) as the CPU's dot
                        int is[4];
                        mma_s8(is, qa[hh][kk], *(const uint32_t *)&kc[8 * n + g][kk * 32 + 4 * t],
                               *(const uint32_t *)&kc[8 * n + g][kk * 32 + 4 * t + 16]);
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            s[n][e] += kd[8 * n + 2 * t + e % 2][kk] * qs[e / 2][hh * KD + kk] * (float)is[e];
                    } else {
                        mma_f16(s[n], qa[hh][kk], ld_word(&ks[8 * n + g][kk * 16 + 2 * t]),
                                ld_word(&ks[8 * n + g][kk * 16 + 2 * t + 8]));
                    }
                }
            }
        }
        fa_softmax_tile(s, o, m, l, k0, t, qpos, p.window, sl2);

        // O += P V over keys 16j .. 16j + 15 of the tile
#pragma unroll
        for (int j = 0; j < FA_BK / 16; j++) {
            uint32_t pa[4];
            fa_p_fragment(s, j, pa);
            const int kr = 16 * j + 2 * t;
#pragma unroll
            for (int n = 0; n < ND; n++) {
                const int d = 8 * n + g;
                mma_f16(o[n], pa, pair_word(&vs[kr][d], &vs[kr + 1][d]), pair_word(&vs[kr + 8][d], &vs[kr + 9][d]));
            }
        }
    }

    // 3. O / l for the rows this tile owns
    fa_write_rows<D>(p, o, m, l, m0 + g, t, t0, t1, hk, dv0);
}

// ---------------------------------------------------------------------------------------------
// The pipelined form, for f16 caches at head sizes 64 and 128 (the common prefill): the same
// rows, numerics and steps as flash_attn_kernel, but
//   - K and V in tiles of FA_BKP = 32 keys, in two stages of shared memory (the bytes of one
//     64-key tile): while a tile computes, the next one's rows are in flight (cp.async), and
//     the block-table lookup of the tile after that is loaded, so a tile waits for no memory
//     round trip once the pipeline runs (flash_attn_kernel loads, then computes);
//   - the MMAs' K and V operands come from shared memory by ldmatrix (four 8 x 8 matrices an
//     instruction; transposed for V), where flash_attn_kernel loads 32-bit words of K and
//     16-bit halves of V one at a time.
// The scores and weights are those of flash_attn_kernel; the online softmax rescales every 32
// keys instead of 64, which changes the float sums' order only.
enum { FA_BKP = 32 };

// The rows of tile tr (keys tr.k0 .. tr.k0 + FA_BKP - 1) of one KV head into a stage, K and V:
// cp.async for the keys in kbeg..kend, zeros stored for the others.
template <int D>
__device__ __forceinline__ void issue_kv_f16(__half (*kd)[D + FA_PAD], __half (*vd)[D + FA_PAD],
                                             const ft_cuda_attn_params &p, const tile_rows &tr, size_t koff, size_t voff,
                                             int kbeg, int kend) {
    constexpr int C8 = D / 8; // 16-byte chunks per row
    for (int i = threadIdx.x; i < FA_BKP * C8; i += FA_THREADS) {
        const int j = i / C8, c = i % C8 * 8, k = tr.k0 + j;
        if (k < kbeg || k > kend) {
            *(uint4 *)&kd[j][c] = make_uint4(0, 0, 0, 0);
            *(uint4 *)&vd[j][c] = make_uint4(0, 0, 0, 0);
            continue;
        }
        const size_t r = tile_row(tr, k);
        cp_async16(&kd[j][c], (const uint8_t *)p.k + r * p.k_row_bytes + koff + (size_t)c * 2);
        cp_async16(&vd[j][c], (const uint8_t *)p.v + r * p.v_row_bytes + voff + (size_t)c * 2);
    }
}

template <int D>
__global__ void __launch_bounds__(FA_THREADS) flash_attn_f16_kernel(const ft_cuda_attn_params p) {
    static_assert(D == 64 || D == 128, "heads of 256 take flash_attn_kernel's halves");
    constexpr int KD = D / 16;      // k-steps of S = Q K^T
    constexpr int ND = D / 8;       // n-tiles of O
    constexpr int NK = FA_BKP / 8;  // n-tiles of S
    constexpr int ROW = D + FA_PAD; // halves per shared row
    __shared__ __align__(16) __half ks[2][FA_BKP][ROW];
    __shared__ __align__(16) __half vs[2][FA_BKP][ROW];
    static_assert(2 * FA_BKP >= FA_BQ, "the queries are staged across ks's two stages");
    __half(*qst)[ROW] = (__half(*)[ROW]) & ks[0][0][0];
    const int lane = threadIdx.x % FT_WARP, warp = threadIdx.x / FT_WARP, g = lane / 4, t = lane % 4;
    const int group = p.n_head / p.n_head_kv, tpt = FA_BQ / group; // tokens per tile
    const int hk = blockIdx.x, t0 = blockIdx.y * tpt, t1 = min(t0 + tpt, p.n_tok) - 1;
    const int pos0 = p.pos0 + (p.pos_dev ? *p.pos_dev : 0);
    const int kend = pos0 + t1;
    const int kbeg = p.window > 0 ? max(0, pos0 + t0 - p.window + 1) : 0;

    // 1. queries rounded to f16: row r = (token t0 + r / group, head hk * group + r % group)
    const int m0 = warp * 16;
    fa_stage_q_f16<D, D>(p, qst, t0, t1, hk, 0);
    __syncthreads();
    uint32_t qa[KD][4];
    fa_q_fragments(qst, m0, g, t, qa);
    int qpos[2];
#pragma unroll
    for (int h = 0; h < 2; h++) qpos[h] = pos0 + min(t0 + (m0 + g + 8 * h) / group, t1);
    __syncthreads(); // every warp holds its queries: the stages may be written

    // 2. keys kbeg..kend, FA_BKP at a time, one tile ahead
    const size_t koff = (size_t)hk * D * 2, voff = koff;
    const float sl2 = p.scale * 1.44269504088896340736f; // scores in log2 units: exp2f below
    float o[ND][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const int n_tiles = (kend - kbeg) / FA_BKP + 1;
    issue_kv_f16<D>(ks[0], vs[0], p, tile_rows_of<FA_BKP>(p.blocks, kbeg, kend), koff, voff, kbeg, kend);
    cp_async_commit();
    tile_rows tr_next = n_tiles > 1 ? tile_rows_of<FA_BKP>(p.blocks, kbeg + FA_BKP, kend) : tile_rows{};
    for (int it = 0; it < n_tiles; it++) {
        const int st = it & 1, k0 = kbeg + it * FA_BKP;
        if (it + 1 < n_tiles) {
            issue_kv_f16<D>(ks[st ^ 1], vs[st ^ 1], p, tr_next, koff, voff, kbeg, kend);
            if (it + 2 < n_tiles) tr_next = tile_rows_of<FA_BKP>(p.blocks, k0 + 2 * FA_BKP, kend); // used next time
        }
        cp_async_commit(); // (an empty group on the last tile keeps the count below uniform)
        cp_async_wait<1>(); // this tile's rows have landed (this thread's copies) ...
        __syncthreads();    // ... and every thread's, and its zeros are visible
        // S = Q K^T: n-tile n holds keys k0 + 8n .. k0 + 8n + 7; one ldmatrix gives two n-tiles
        float s[NK][4];
#pragma unroll
        for (int n = 0; n < NK; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++)
#pragma unroll
            for (int n2 = 0; n2 < NK / 2; n2++) {
                uint32_t b[4];
                ldsm_x4(b, &ks[st][16 * n2 + (lane >> 4) * 8 + (lane & 7)][kk * 16 + (lane >> 3 & 1) * 8]);
                mma_f16(s[2 * n2], qa[kk], b[0], b[1]);
                mma_f16(s[2 * n2 + 1], qa[kk], b[2], b[3]);
            }
        fa_softmax_tile(s, o, m, l, k0, t, qpos, p.window, sl2);
        // O += P V over keys 16j .. 16j + 15 of the tile; one transposed ldmatrix gives the V
        // operands of two n-tiles of O
#pragma unroll
        for (int j = 0; j < FA_BKP / 16; j++) {
            uint32_t pa[4];
            fa_p_fragment(s, j, pa);
#pragma unroll
            for (int n2 = 0; n2 < ND / 2; n2++) {
                uint32_t b[4];
                ldsm_x4_t(b, &vs[st][16 * j + (lane >> 3 & 1) * 8 + (lane & 7)][16 * n2 + (lane >> 4) * 8]);
                mma_f16(o[2 * n2], pa, b[0], b[1]);
                mma_f16(o[2 * n2 + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads(); // the stage is read: the next tile's copies may overwrite it
    }

    // 3. O / l for the rows this tile owns
    fa_write_rows<D>(p, o, m, l, m0 + g, t, t0, t1, hk, 0);
}

// The shapes the kernel computes, at any number of queries.
static bool flash_shape_ok(const ft_cuda_attn_params *p) {
    return (p->head_dim == 64 || p->head_dim == 128 || p->head_dim == 256) && p->n_head_kv > 0 &&
           p->n_head % p->n_head_kv == 0 && p->n_head / p->n_head_kv <= FA_BQ && !p->out_q;
}

extern "C" bool ft_cuda_flash_attention_fits(const ft_cuda_attn_params *p) {
    return p->n_tok >= FT_CUDA_FLASH_MIN_TOK && flash_shape_ok(p);
}

// The pipelined kernel for f16 caches (FT_CUDA_FLASH_PIPE=0: flash_attn_kernel, for A/B). Read once.
static bool pipe_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) enabled = ft_env_flag(FT_ENV_CUDA_FLASH_PIPE);
    return enabled;
}

// Also below FT_CUDA_FLASH_MIN_TOK queries: the rows of a step resuming a chunk that took it.
extern "C" void ft_cuda_flash_attention(const ft_cuda_attn_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(flash_shape_ok(p) && p->n_tok >= 1 && p->n_tok <= 65535 * (FA_BQ / (p->n_head / p->n_head_kv)));
    FT_CUDA_ASSERT(p->k_type == FT_TYPE_F16 || p->k_type == FT_TYPE_Q8_0);
    FT_CUDA_ASSERT(p->v_type == FT_TYPE_F16 || p->v_type == FT_TYPE_Q8_0);
    const int tpt = FA_BQ / (p->n_head / p->n_head_kv);
    const dim3 grid((unsigned)p->n_head_kv, (unsigned)((p->n_tok + tpt - 1) / tpt), p->head_dim > 128 ? 2u : 1u);
    const cudaStream_t st = ft_cuda_stream_handle(s);
    const bool kq8 = p->k_type == FT_TYPE_Q8_0;
    if (!kq8 && p->v_type == FT_TYPE_F16 && p->head_dim <= 128 && pipe_enabled()) {
        if (p->head_dim == 64) flash_attn_f16_kernel<64><<<grid, FA_THREADS, 0, st>>>(*p);
        else flash_attn_f16_kernel<128><<<grid, FA_THREADS, 0, st>>>(*p);
    } else if (p->head_dim == 64 && kq8) flash_attn_kernel<64, true><<<grid, FA_THREADS, 0, st>>>(*p);
    else if (p->head_dim == 64) flash_attn_kernel<64, false><<<grid, FA_THREADS, 0, st>>>(*p);
    else if (p->head_dim == 128 && kq8) flash_attn_kernel<128, true><<<grid, FA_THREADS, 0, st>>>(*p);
    else if (p->head_dim == 128) flash_attn_kernel<128, false><<<grid, FA_THREADS, 0, st>>>(*p);
    else if (kq8) flash_attn_kernel<256, true><<<grid, FA_THREADS, 0, st>>>(*p);
    else flash_attn_kernel<256, false><<<grid, FA_THREADS, 0, st>>>(*p);
    CUDA_CHECK_LAUNCH();
}
