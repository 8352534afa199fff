// attention_decode.cu: attention of a small batch of queries (decode: n_tok <=
// FT_CUDA_ATTN_SPLIT_MAX_TOK, head_dim 64, 128 or 256) over an f16 or q8_0 KV cache, on tensor
// cores.
//
// Decode reads the whole cache for a few queries: it is bound by the cache's bytes, and the
// kernel's work is to keep enough of them in flight. A CTA takes one KV head and DEC_ROWS = 16
// query rows that share it ((token, query head) pairs in token order, so one token's 4-16
// heads of a KV head are one CTA), so a K or V row is read once for all of them and the
// products are MMA tiles; the keys are split over enough CTAs to fill the GPU
// (attention_split.cuh), and each CTA streams its keys through a ring of stages of DEC_TK
// keys, each refilled by asynchronous copies once its tile is computed (dec_shape: one stage more
// where the device's shared memory allows it, at most two CTAs an SM then); the first tiles'
// cached rows are requested before the wait for the kernel before.
//
// Numerics: the CPU op's, up to float summation order.
//   - scores: over an f16 cache Q rounded to f16 times K (m16n8k16 f16 MMAs with f32 sums: the
//     products are exact); over q8_0 Q quantized to q8_0 as the CPU does, integer sums per
//     32-element block (m16n8k32 s8 MMAs) times both blocks' scales;
//   - values: a softmax weight p enters the f16 MMAs as two parts, hi = f16(p) and
//     lo = f16(p - hi), so it keeps about 22 bits, not f16's 11; a q8_0 V enters as its codes
//     (exact in f16), the weights scaled by the key's block scale, a block of 32 dims at a time;
//   - the online softmax and every sum: f32.
//
// Steps, one CTA of 4 warps per (KV head, row group, split):
//   1. the rows' queries to shared memory: f16, or q8_0 codes and scales;
//   2. per tile, warp w takes keys 16w .. 16w + 15: S = Q K^T, scaled and masked (causal per
//      row, window) to -inf, its own online softmax (running max and sum per row), O += P V
//      with P straight from S's accumulators (MMA layouts: mma.cuh);
//   3. the 4 warps' (max, sum, O) merged through shared memory into the output (and its q8_1
//      form), or into the split's partials, which attention_merge_kernel merges: a CTA per
//      (token, head), not the last CTA of a row group, which alone would read all the partials
//      of its rows while the rest of the GPU waits.
#include "attention_split.cuh"
#include "mma.cuh"

#include "../../quant/fp16.h"
#include "../../quant/quant.h"

// 4 bytes of shared memory at a 2-byte aligned address (q8_0 codes follow a 2-byte scale).
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | (uint32_t)h[1] << 16;
}

__device__ __forceinline__ float ld_f16(const uint8_t *p) {
    return __half2float(__ushort_as_half(*(const uint16_t *)p));
}

// An s8 code pair as two f16 (exact) in one word, lo in the low half.
__device__ __forceinline__ uint32_t codes_f16x2(int8_t lo, int8_t hi) {
    return (uint32_t)__half_as_ushort(__int2half_rn(lo)) |
           ((uint32_t)__half_as_ushort(__int2half_rn(hi)) << 16);
}

// p as hi + lo, each f16, lo in the low half of each word.
__device__ __forceinline__ void split_f16x2(float a, float b, uint32_t &hi, uint32_t &lo) {
    const __half ha = __float2half_rn(a), hb = __float2half_rn(b);
    hi = (uint32_t)__half_as_ushort(ha) | ((uint32_t)__half_as_ushort(hb) << 16);
    lo = pack_f16x2(a - __half2float(ha), b - __half2float(hb));
}

// DEEP: the form for GPUs whose CTA may take more shared memory than a consumer GPU's (sm_90:
// 227 KB), one stage more where two CTAs still fit an SM, so that a CTA keeps two tiles of keys
// in flight while it computes one.
template <int HD, bool DEEP = false> struct dec_shape {
    static constexpr int NB = HD / 32;                          // q8_0 blocks per head row
    static constexpr int Q8_ROW = NB * (int)sizeof(block_q8_0); // one head's q8_0 row
    // shared rows: f16 rows 16 bytes longer than the data, so that the 8 row addresses of an
    // ldmatrix fall in distinct banks; q8_0 rows an odd number of words, so that the 8 keys' words
    // of a fragment load do
    static constexpr int F16_ROW = HD * 2 + 16;
    static constexpr int Q8_STRIDE = (Q8_ROW / 4) % 2 ? Q8_ROW : Q8_ROW + 4;
    static constexpr int ROW = F16_ROW > Q8_STRIDE ? F16_ROW : Q8_STRIDE;
    static constexpr int QC_ROW = HD + 16; // q8_0 query codes: a fragment's 8 rows in distinct banks
    // stages: as many as keep the CTA within the 99 KB a consumer GPU's (sm_86, sm_89, sm_120) CTA
    // may take; one stage (HD 256) loads each tile after the last one is computed, while the
    // SM's other CTAs keep the memory busy
    static constexpr int STAGES = (HD <= 64 ? 3 : HD <= 128 ? 2 : 1) + (DEEP && HD <= 128 ? 1 : 0);
    static constexpr int STAGE = 2 * DEC_TK * ROW; // the K tile, then the V tile
    static constexpr int QBUF = DEC_ROWS * F16_ROW;
    static constexpr int SMEM = STAGES * STAGE + QBUF + DEC_ROWS * NB * (int)sizeof(float);
    // after the keys, the stages hold the warps' results
    static_assert(SMEM <= (DEEP ? 110 : 99) * 1024, "a consumer GPU's CTA holds it; two deep CTAs fit an sm_90 SM");
    static_assert((4 * DEC_ROWS * (HD + 2)) * (int)sizeof(float) <= STAGES * STAGE, "the warps' results fit");
};

template <int HD, bool DEEP, bool KQ8, bool VQ8>
__global__ void __launch_bounds__(AT_THREADS) attention_decode_kernel(const ft_cuda_attn_params pa) {
    // Before ft_pdl_begin this kernel reads only what no kernel of the step writes: the position,
    // the block tables (both written by copies before the step) and the cache rows of earlier
    // positions (the kernel before writes this step's rows alone; every kernel before that one
    // has completed, since that one began with its own wait).
    ft_cuda_attn_params p = pa;
    if (pa.rows.pos) attn_seq(p, blockIdx.y); // (grid.y: the sequence)
    using S = dec_shape<HD, DEEP>;
    constexpr int NB = S::NB, ND = HD / 8, NW = AT_THREADS / FT_WARP;
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *qbuf = smem + S::STAGES * S::STAGE;
    float *qscale = (float *)(qbuf + S::QBUF); // (DEC_ROWS, NB): q8_0 query scales

    const int tid = threadIdx.x, lane = tid % FT_WARP, warp = tid / FT_WARP, g = lane / 4, t4 = lane % 4;
    const int G = p.n_head / p.n_head_kv, n_rg = dec_row_groups(p.n_tok, p.n_head, p.n_head_kv);
    // rows r0 .. r0 + n_rows - 1 (one token's heads: one row group, no division)
    const int hk = n_rg == 1 ? (int)blockIdx.x : (int)blockIdx.x / n_rg,
              r0 = n_rg == 1 ? 0 : (int)blockIdx.x % n_rg * DEC_ROWS;
    const int n_rows = min(DEC_ROWS, p.n_tok * G - r0);
    // Each row's token and query head, one thread a row: the divisions by G run side by side
    // once, not in every thread's chain of loads and stores (a decode CTA is the only one on its
    // SM at short depths, one warp per scheduler: its time is its instruction chain's)
    __shared__ int row_tok[DEC_ROWS], row_head[DEC_ROWS];
    if (tid < DEC_ROWS) {
        const int r = r0 + min(tid, n_rows - 1); // (rows past n_rows: the last one's)
        row_tok[tid] = r / G;
        row_head[tid] = hk * G + r % G;
    }
    const int pos0 = attn_pos0(p);
    const attn_split_t sp = attn_split_of(p, pos0);
    if ((int)blockIdx.z >= sp.n_split) return; // a graphed launch's spare CTAs
    const int r1 = r0 + n_rows - 1; // (within one token's G rows, as one token's decode: no division)
    const int t_first = r0 < G ? 0 : r0 / G, t_last = r1 < G ? 0 : r1 / G;
    const int kmin = p.window > 0 ? max(0, pos0 + t_first - p.window + 1) : 0;
    const int kbeg = kmin + attn_split_first(sp, blockIdx.z); // keys kbeg..kend, which may be none
    const int kend = sp.n_split > 1 ? min(pos0 + t_last, kbeg + attn_split_len(sp, blockIdx.z) - 1) : pos0 + t_last;
    const int n_tiles = kend >= kbeg ? (kend - kbeg + DEC_TK) / DEC_TK : 0;
    const int krow = KQ8 ? S::Q8_ROW : HD * 2, vrow = VQ8 ? S::Q8_ROW : HD * 2;
    const uint8_t *kg = (const uint8_t *)p.k + (size_t)hk * krow,
                  *vg = (const uint8_t *)p.v + (size_t)hk * vrow;

    // The tile's rows from row_at(r) (where row r's head starts in the cache) to dst: the 16-byte
    // pieces of f16 rows a fixed stride apart per thread, the 4-byte words of q8_0 rows dealt round
    // the CTA.
    auto copy = [&](uint8_t *dst, auto row_at, bool q8) {
        if (q8) {
            for (int e = tid; e < DEC_TK * (S::Q8_ROW / 4); e += AT_THREADS) {
                const int r = e / (S::Q8_ROW / 4), c = e % (S::Q8_ROW / 4);
                cp_async4(dst + r * S::ROW + c * 4, row_at(r) + c * 4);
            }
        } else {
            constexpr int CPR = HD / 8, RSTEP = AT_THREADS / CPR; // 16-byte pieces a row; rows apart
            static_assert(AT_THREADS % CPR == 0, "a thread's pieces are one column of pieces");
            const int rt = tid / CPR, c = tid % CPR;
#pragma unroll
            for (int j = 0; j < DEC_TK / RSTEP; j++) {
                const int r = rt + j * RSTEP;
                cp_async16(dst + r * S::ROW + c * 16, row_at(r) + c * 16);
            }
        }
    };
    // tile i's K and V rows to its stage (rows past kend repeat row kend: valid data, masked).
    // A tile that starts a block of the table (every tile but a window's: splits are whole
    // tiles) is that block, DEC_TK == FT_KV_BLOCK: one lookup, its rows in order. Another tile's
    // keys lie in at most two blocks: two lookups, the same for every thread, then rows run on as
    // in an unpaged cache
    static_assert(DEC_TK == FT_KV_BLOCK, "a tile that starts a block of the table is that block");
    auto load_tile = [&](int i) {
        uint8_t *kt = smem + i % S::STAGES * S::STAGE, *vt = kt + DEC_TK * S::ROW;
        const int k0 = kbeg + i * DEC_TK;
        if (k0 % FT_KV_BLOCK == 0) {
            const int64_t b0 = ft_kv_row(p.blocks, k0);
            const int last = min(DEC_TK - 1, kend - k0); // (rows past it repeat it)
            const uint8_t *kb = kg + (size_t)b0 * p.k_row_bytes, *vb = vg + (size_t)b0 * p.v_row_bytes;
            const int krb = (int)p.k_row_bytes, vrb = (int)p.v_row_bytes; // (a block's rows: within 32 bits)
            auto k_at = [&](int r) { return kb + min(r, last) * krb; };
            auto v_at = [&](int r) { return vb + min(r, last) * vrb; };
            copy(kt, k_at, KQ8);
            copy(vt, v_at, VQ8);
            return;
        }
        const int edge = (k0 / FT_KV_BLOCK + 1) * FT_KV_BLOCK;
        const int64_t b0 = ft_kv_row(p.blocks, k0);
        const int64_t b1 = min(k0 + DEC_TK - 1, kend) >= edge ? ft_kv_row(p.blocks, edge) : 0;
        auto row = [&](int r) -> size_t {
            const int k = min(k0 + r, kend);
            return (size_t)(k < edge ? b0 + (k - k0) : b1 + (k - edge));
        };
        auto k_at = [&](int r) { return kg + row(r) * p.k_row_bytes; };
        auto v_at = [&](int r) { return vg + row(r) * p.v_row_bytes; };
        copy(kt, k_at, KQ8);
        copy(vt, v_at, VQ8);
    };
    // Every stage is filled before the loop: whole tiles of keys cached by earlier steps before
    // the wait for the kernel before (their reads overlap its run), the others (this step's keys,
    // which it may still be writing) after it. A copy group per stage and phase, so that waiting
    // for all but STAGES - 1 groups waits for tile it in both.
    auto cached = [&](int i) { return kbeg + i * DEC_TK + DEC_TK - 1 < min(pos0, kend + 1); };
#pragma unroll
    for (int i = 0; i < S::STAGES; i++) {
        if (i < n_tiles && cached(i)) load_tile(i);
        cp_async_commit();
    }
    ft_pdl_begin();
#pragma unroll
    for (int i = 0; i < S::STAGES; i++) {
        if (i < n_tiles && !cached(i)) load_tile(i);
        cp_async_commit();
    }

    // 1. the queries in the key's dot-product format (rows past n_rows: zeros, never written)
    __syncthreads();          // the row tables
    auto q_row = [&](int i) { // row r0 + i's query
        return attn_seq_q(pa, blockIdx.y) + ((int64_t)row_tok[i] * p.n_head + row_head[i]) * HD;
    };
    // Every load is issued before the first is used (the rows' tests are warp-uniform): one round
    // trip, not one per row, at the head of every CTA's critical path.
    if constexpr (KQ8) {
        // a warp per block of 32: amax, d = amax / 127, codes round-half-even(x * 127 / amax)
        constexpr int NQ = DEC_ROWS * NB / NW;
        float v[NQ];
#pragma unroll
        for (int j = 0; j < NQ; j++) {
            const int b = warp + j * NW, i = b / NB, blk = b % NB;
            v[j] = i < n_rows ? q_row(i)[blk * 32 + lane] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < NQ; j++) {
            const int b = warp + j * NW, i = b / NB, blk = b % NB;
            const float amax = ft_warp_max(fabsf(v[j]));
            const float id = amax != 0.0f ? 127.f / amax : 0.0f;
            ((int8_t *)qbuf)[i * S::QC_ROW + blk * 32 + lane] = (int8_t)__float2int_rn(v[j] * id);
            if (lane == 0) qscale[i * NB + blk] = ft_fp16_to_fp32(ft_fp32_to_fp16(amax / 127.f));
        }
    } else {
        constexpr int NQ = DEC_ROWS * (HD / 2) / AT_THREADS;
        const int64_t row_step = (int64_t)(AT_THREADS / (HD / 2)); // rows between a thread's pairs
        const int i0 = tid / (HD / 2), d = tid % (HD / 2) * 2;
        float2 v[NQ];
#pragma unroll
        for (int j = 0; j < NQ; j++) {
            const int i = i0 + j * (int)row_step;
            v[j] = i < n_rows ? *(const float2 *)(q_row(i) + d) : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int j = 0; j < NQ; j++)
            *(uint32_t *)(qbuf + (i0 + j * row_step) * S::F16_ROW + d * 2) = pack_f16x2(v[j].x, v[j].y);
    }
    // this thread's two rows (g and g + 8): their query positions (rows past n_rows see all)
    int qpos[2];
#pragma unroll
    for (int h = 0; h < 2; h++)
        qpos[h] = pos0 + row_tok[g + 8 * h];

    // 2. the keys, a tile at a time; warp w's are k0 + 16w .. k0 + 16w + 15
    float o[ND][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < ND; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const int kw = 16 * warp;
    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<S::STAGES - 1>();
        __syncthreads(); // tile it landed for all
        const int k0 = kbeg + it * DEC_TK;
        if (k0 + kw <= kend) { // (none of this warp's keys: the last tile)
            const uint8_t *kt = smem + it % S::STAGES * S::STAGE, *vt = kt + DEC_TK * S::ROW;

            // S = Q K^T: n-tile n holds keys kw + 8n .. kw + 8n + 7
            float s[2][4] = {};
            if constexpr (KQ8) {
                const int8_t *qc = (const int8_t *)qbuf;
#pragma unroll
                for (int blk = 0; blk < NB; blk++) {
                    const uint32_t a[4] = {
                        *(const uint32_t *)(qc + g * S::QC_ROW + blk * 32 + 4 * t4),
                        *(const uint32_t *)(qc + (g + 8) * S::QC_ROW + blk * 32 + 4 * t4),
                        *(const uint32_t *)(qc + g * S::QC_ROW + blk * 32 + 16 + 4 * t4),
                        *(const uint32_t *)(qc + (g + 8) * S::QC_ROW + blk * 32 + 16 + 4 * t4)};
                    const float dq[2] = {qscale[g * NB + blk], qscale[(g + 8) * NB + blk]};
#pragma unroll
                    for (int n = 0; n < 2; n++) {
                        const uint8_t *kb = kt + (kw + 8 * n + g) * S::ROW + blk * (int)sizeof(block_q8_0);
                        int is[4];
                        mma_s8(is, a, ld_u32_a2(kb + 2 + 4 * t4), ld_u32_a2(kb + 2 + 16 + 4 * t4));
                        // element e: row g + 8 (e / 2), key kw + 8n + 2 t4 + e % 2
                        const uint8_t *kc =
                            kt + (kw + 8 * n + 2 * t4) * S::ROW + blk * (int)sizeof(block_q8_0);
                        const float dk[2] = {ld_f16(kc), ld_f16(kc + S::ROW)};
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            s[n][e] += dk[e % 2] * dq[e / 2] * (float)is[e];
                    }
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    uint32_t a[4], b[4];
                    ldsm_x4(a, qbuf + (lane & 15) * S::F16_ROW + (kk * 16 + (lane >> 4) * 8) * 2);
                    ldsm_x4(b, kt + (kw + (lane >> 4) * 8 + (lane & 7)) * S::ROW +
                                   (kk * 16 + (lane >> 3 & 1) * 8) * 2);
                    mma_f16(s[0], a, b[0], b[1]);
                    mma_f16(s[1], a, b[2], b[3]);
                }
            }

            // scale and mask, then the online softmax: the 4 lanes of a row (t4 = 0..3) share its max
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e / 2, k = k0 + kw + 8 * n + 2 * t4 + e % 2;
                    const bool seen = k <= kend && k <= qpos[h] && (p.window <= 0 || qpos[h] - k < p.window);
                    s[n][e] = seen ? s[n][e] * p.scale : -INFINITY;
                    mx[h] = fmaxf(mx[h], s[n][e]);
                }
            float base[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float m_new = fmaxf(m[h], mma_row_max(mx[h]));
                base[h] = m_new == -INFINITY ? 0.0f : m_new; // nothing seen yet: e^-inf = 0, not NaN
                const float corr = expf(m[h] - base[h]);
                l[h] *= corr;
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    o[n][2 * h] *= corr;
                    o[n][2 * h + 1] *= corr;
                }
                m[h] = m_new;
            }
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[n][e] = expf(s[n][e] - base[e / 2]);
                    l[e / 2] += s[n][e];
                }

            // O += P V: S's n-tiles 0 and 1 are P's A fragment for the warp's 16 keys
            if constexpr (!VQ8) {
                uint32_t ph[4], pl[4];
                split_f16x2(s[0][0], s[0][1], ph[0], pl[0]);
                split_f16x2(s[0][2], s[0][3], ph[1], pl[1]);
                split_f16x2(s[1][0], s[1][1], ph[2], pl[2]);
                split_f16x2(s[1][2], s[1][3], ph[3], pl[3]);
#pragma unroll
                for (int j = 0; j < HD / 16; j++) { // dims 16j .. 16j + 15: n-tiles 2j, 2j + 1
                    uint32_t b[4];
                    ldsm_x4_t(b, vt + (kw + (lane >> 3 & 1) * 8 + (lane & 7)) * S::ROW +
                                     (16 * j + (lane >> 4) * 8) * 2);
                    mma_f16(o[2 * j], ph, b[0], b[1]);
                    mma_f16(o[2 * j], pl, b[0], b[1]);
                    mma_f16(o[2 * j + 1], ph, b[2], b[3]);
                    mma_f16(o[2 * j + 1], pl, b[2], b[3]);
                }
            } else {
                // this lane's keys kw + 2 t4, + 1, + 8, + 9; per block the weights times its scales
                const uint8_t *vr[4] = {vt + (kw + 2 * t4) * S::ROW, vt + (kw + 2 * t4 + 1) * S::ROW,
                                        vt + (kw + 2 * t4 + 8) * S::ROW, vt + (kw + 2 * t4 + 9) * S::ROW};
#pragma unroll
                for (int blk = 0; blk < NB; blk++) {
                    const int bo = blk * (int)sizeof(block_q8_0);
                    const float dv[4] = {ld_f16(vr[0] + bo), ld_f16(vr[1] + bo), ld_f16(vr[2] + bo),
                                         ld_f16(vr[3] + bo)};
                    uint32_t ph[4], pl[4];
                    split_f16x2(s[0][0] * dv[0], s[0][1] * dv[1], ph[0], pl[0]);
                    split_f16x2(s[0][2] * dv[0], s[0][3] * dv[1], ph[1], pl[1]);
                    split_f16x2(s[1][0] * dv[2], s[1][1] * dv[3], ph[2], pl[2]);
                    split_f16x2(s[1][2] * dv[2], s[1][3] * dv[3], ph[3], pl[3]);
#pragma unroll
                    for (int n4 = 0; n4 < 4; n4++) { // n-tile 4 blk + n4: dims 32 blk + 8 n4 .. + 7
                        const int c = bo + 2 + 8 * n4 + g;
                        const int8_t *v0 = (const int8_t *)vr[0], *v1 = (const int8_t *)vr[1];
                        const int8_t *v2 = (const int8_t *)vr[2], *v3 = (const int8_t *)vr[3];
                        const uint32_t b0 = codes_f16x2(v0[c], v1[c]), b1 = codes_f16x2(v2[c], v3[c]);
                        mma_f16(o[4 * blk + n4], ph, b0, b1);
                        mma_f16(o[4 * blk + n4], pl, b0, b1);
                    }
                }
            }
        }
        __syncthreads(); // the stage is read: tile it + STAGES takes it
        if (it + S::STAGES < n_tiles) load_tile(it + S::STAGES);
        cp_async_commit();
    }

    // 3. the warps' results through shared memory (the stages: every copy has landed): per row
    // the largest max M, sums and O rescaled to it, added in warp order
    cp_async_wait<0>();
    __syncthreads();
    float *wm = (float *)smem, *wl = wm + NW * DEC_ROWS, *wo = wl + NW * DEC_ROWS; // wo: (NW, DEC_ROWS, HD)
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] = mma_row_sum(l[h]);
        if (t4 == 0) {
            wm[warp * DEC_ROWS + g + 8 * h] = m[h];
            wl[warp * DEC_ROWS + g + 8 * h] = l[h];
        }
    }
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            wo[(warp * DEC_ROWS + g + 8 * (e / 2)) * HD + 8 * n + 2 * t4 + e % 2] = o[n][e];
    __syncthreads();
    // per row: the largest max M, each warp's weight e^(m_w - M) and the sum L, one thread a row
    __shared__ float row_f[DEC_ROWS][NW], row_m[DEC_ROWS], row_l[DEC_ROWS];
    if (tid < n_rows) {
        const int i = tid;
        float M = -INFINITY, L = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++)
            M = fmaxf(M, wm[w * DEC_ROWS + i]);
#pragma unroll
        for (int w = 0; w < NW; w++) {
            const float f = wm[w * DEC_ROWS + i] == -INFINITY ? 0.0f : expf(wm[w * DEC_ROWS + i] - M);
            row_f[i][w] = f;
            L += wl[w * DEC_ROWS + i] * f;
        }
        row_m[i] = M;
        row_l[i] = L;
    }
    __syncthreads();
    const bool split = sp.n_split > 1;
    // four dims a thread: a 32-dim block is 8 lanes, whose q8_1 sums take 3 shuffles, not a warp's
    // 5. Rows whole in 8-lane groups (HD is a multiple of 32); every lane runs every round (the
    // bound is the CTA's), so the shuffles see whole warps
    constexpr int Q4 = HD / 4;
    for (int e0 = 0; e0 < n_rows * Q4; e0 += AT_THREADS) {
        const int e = e0 + tid, i = min(e / Q4, n_rows - 1), d = e % Q4 * 4;
        const bool live = e < n_rows * Q4;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int w = 0; w < NW; w++) {
            const float4 o4 = *(const float4 *)&wo[(w * DEC_ROWS + i) * HD + d];
            const float f = row_f[i][w];
            v[0] += o4.x * f;
            v[1] += o4.y * f;
            v[2] += o4.z * f;
            v[3] += o4.w * f;
        }
        const int tok = row_tok[i], h = row_head[i];
        if (split) {
            if (live) {
                float *part = attn_part_row(p, tok, h, blockIdx.z, sp.stride);
#pragma unroll
                for (int c = 0; c < 4; c++)
                    part[d + c] = v[c];
                if (d == 0) {
                    part[HD] = row_m[i];
                    part[HD + 1] = row_l[i];
                }
            }
            continue;
        }
        float L = row_l[i];
        if (p.sinks) L += expf(p.sinks[h] - row_m[i]); // the head's sink joins the denominator
        float x[4];
#pragma unroll
        for (int c = 0; c < 4; c++)
            x[c] = L == 0.0f ? 0.0f : v[c] / L;
        const int64_t oi = ((int64_t)tok * p.n_head + h) * HD + d;
        if (live)
#pragma unroll
            for (int c = 0; c < 4; c++)
                p.out[oi + c] = x[c];
        if (p.out_q) ft_q8_1_store4(x, (block_q8_1 *)p.out_q + oi / QK8_1, lane % 8, live);
    }
}

template <int HD, bool DEEP, bool KQ8, bool VQ8>
static void launch_types(const ft_cuda_attn_params &p, dim3 grid, cudaStream_t st) {
    ft_launch(attention_decode_kernel<HD, DEEP, KQ8, VQ8>, grid, AT_THREADS, (size_t)dec_shape<HD, DEEP>::SMEM, st, p);
}

template <int HD, bool DEEP> static void launch_hd(const ft_cuda_attn_params &p, dim3 grid, cudaStream_t st) {
    const bool kq8 = p.k_type == FT_TYPE_Q8_0, vq8 = p.v_type == FT_TYPE_Q8_0;
    if (kq8 && vq8)
        launch_types<HD, DEEP, true, true>(p, grid, st);
    else if (kq8)
        launch_types<HD, DEEP, true, false>(p, grid, st);
    else if (vq8)
        launch_types<HD, DEEP, false, true>(p, grid, st);
    else
        launch_types<HD, DEEP, false, false>(p, grid, st);
}

template <int HD, bool DEEP> static void allow_smem() {
    const int bytes = dec_shape<HD, DEEP>::SMEM;
    CUDA_CHECK(cudaFuncSetAttribute(attention_decode_kernel<HD, DEEP, true, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    CUDA_CHECK(cudaFuncSetAttribute(attention_decode_kernel<HD, DEEP, true, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    CUDA_CHECK(cudaFuncSetAttribute(attention_decode_kernel<HD, DEEP, false, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    CUDA_CHECK(cudaFuncSetAttribute(attention_decode_kernel<HD, DEEP, false, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Whether this device takes the deep form (a CTA may take its shared memory and an SM holds two),
// and whether launches use it (ft_cuda_attention_force_deep: the tests run both forms).
static bool g_deep_ok, g_deep;

extern "C" void ft_cuda_attention_init(void) {
    // the stages exceed the 48 KB a kernel gets without asking (set once, before any capture)
    allow_smem<64, false>();
    allow_smem<128, false>();
    allow_smem<256, false>();
    int dev = 0, per_cta = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&per_cta, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    const int deep = dec_shape<128, true>::SMEM; // (the largest deep form)
    g_deep_ok = per_cta >= deep && per_sm >= 2 * (deep + 1024);
    if (g_deep_ok) {
        allow_smem<64, true>();
        allow_smem<128, true>();
    }
    g_deep = g_deep_ok;
}

extern "C" bool ft_cuda_attention_force_deep(bool on) {
    g_deep = on && g_deep_ok;
    return g_deep;
}

void attn_decode_launch(const ft_cuda_attn_params &p, int n_split, cudaStream_t st) {
    // the asynchronous copies move 16 bytes (f16 rows) or 4 (q8_0) at a time
    FT_CUDA_ASSERT(((uintptr_t)p.k | p.k_row_bytes) % (p.k_type == FT_TYPE_F16 ? 16 : 4) == 0);
    FT_CUDA_ASSERT(((uintptr_t)p.v | p.v_row_bytes) % (p.v_type == FT_TYPE_F16 ? 16 : 4) == 0);
    const int n_rg = dec_row_groups(p.rows.pos ? 1 : p.n_tok, p.n_head, p.n_head_kv);
    const dim3 grid((unsigned)(p.n_head_kv * n_rg), (unsigned)p.n_seq, (unsigned)n_split);
    if (p.head_dim == 64)
        g_deep ? launch_hd<64, true>(p, grid, st) : launch_hd<64, false>(p, grid, st);
    else if (p.head_dim == 128)
        g_deep ? launch_hd<128, true>(p, grid, st) : launch_hd<128, false>(p, grid, st);
    else
        launch_hd<256, false>(p, grid, st);
}
