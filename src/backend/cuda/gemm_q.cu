// gemm_q.cu: the prefill GEMM for quantized weights on tensor cores, y = x · wᵀ for many
// tokens (llama.cpp calls this MMQ), dense and grouped by expert (the MoE form).
//
// int8 mma.sync (sm_80+, so one kernel serves sm_80..sm_120) on q8_1 activations, with the
// weight codes decoded into shared memory (gemm_q.cuh): prefill gets the numbers decode and
// llama.cpp's MMQ get. Why int8 and the MMA fragment layout: above mma_k32; the kernel's steps
// and tiles: above gemm_q_kernel. Launches only: no state, thread-safe per stream.
#include "cuda_common.cuh"

extern "C" {
#include "../../quant/quant.h" // ft_row_bytes
}
#include "cuda_ops.h"
#include "expert_extras.cuh"
#include "gemm_q.cuh"
#include "moe_group.cuh"

enum {
    GM_THREADS = 128,
    GM_BM = 64,                 // weight rows per CTA
    GM_KC = 128,                // input elements per chunk
    GM_KB = GM_KC / 32,         // k-blocks per chunk
    GM_LDW = (GM_KC + 16) / 4,  // words per shared-memory row (144 bytes)
};

// m16n8k32 and m16n8k16 int8 MMAs, d = a · b (c = 0). Not volatile: the results are used, and
// the compiler may then schedule them among the shared-memory loads.
// Why int8 MMA on q8_1 activations, not weights dequantized to f16:
//   - accuracy: the decode kernels (matvec_q.cu) already quantize activations to q8_1 and
//     take exact integer dot products per sub-block; doing the same here gives prefill the
//     same numbers as decode and as llama.cpp's MMQ, and the int32 sums inside a sub-block
//     are exact. Dequantizing to f16 would round every weight (d * sc * q is not an f16 in
//     general) and the activations to f16 (a relative 2^-11, coarser where x is large).
//   - speed: int8 MMAs run at twice the f16 rate (m16n8k32 s8 against m16n8k16 f16 per
//     instruction), int8 tiles take half the shared memory of f16 tiles, and the weight codes
//     are int8-sized already (every format's codes, offsets removed, fit int8: gemm_q.cuh).
//   The cost is one float scale product per output per 32-element k-block (and a min term
//   for q4_K / q5_K / q4_1 / q5_1), on the CUDA cores next to the MMAs.
//   mma.sync (sm_80+), not wgmma, so one kernel serves sm_80..sm_120.
//
// MMA fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8; lane = 4 g + t):
//   A (16 x 32, row): a0 = row g, k 4t..4t+3; a1 = row g+8, k 4t..; a2 = row g, k 16+4t..;
//                     a3 = row g+8, k 16+4t..
//   B (32 x 8, col):  b0 = k 4t..4t+3 of column g; b1 = k 16+4t.. of column g
//   C (16 x 8):       c0, c1 = row g, columns 2t, 2t+1; c2, c3 = row g+8, same columns
//   m16n8k16: A a0 = row g, k 4t..; a1 = row g+8, k 4t..; B b0 = k 4t.. of column g; C as above.
// Weights are A (rows = output features), activations B (columns = tokens); both tiles are
// stored k-contiguous per row, so each fragment register is one aligned 32-bit word.
__device__ __forceinline__ void mma_k32(int d[4], const int a[4], const int b[2]) {
    d[0] = d[1] = d[2] = d[3] = 0;
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_k16(int d[4], const int a[2], int b) {
    d[0] = d[1] = d[2] = d[3] = 0;
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
}

// Steps, per CTA (128 threads = 4 warps) on a tile of BM = 64 weight rows x BN tokens:
//   1. For each chunk of KC = 128 input elements (4 k-blocks of 32):
//      a. decode the weight tile (64 rows x 4 units, gemm_q.cuh) into shared memory: int8
//         codes, the float scale of each sub-block and the unit's float min;
//      b. copy the activation tile (BN tokens x 4 q8_1 blocks) into shared memory: int8
//         codes, the scale d8 and d8 * (exact integer sum of the codes) for the min term;
//      c. per k-block and warp (a 32-row x BN/2-token quarter of the tile): m16n8k32 MMAs
//         (m16n8k16 twice for the 16-element sub-blocks of q3_K and q6_K) into int32 tiles
//         started at 0, then acc += int32 * (scale * d8) [- min * d8 * sum].
//   2. Write y, or in the fused gate/up form act(acc_gate, acc_up) (SiLU, or as the tile
//      expert's extras say, with its biases), or the single form's value times the expert's
//      scale plus its bias where a.ex has them (expert_extras.cuh).
// Shared memory rows are 144 bytes (128 + 16 of padding): the MMA fragment loads (8 rows x
// 4 words per warp) then touch 32 different banks. Not done yet: double buffering of the
// tiles (the loads of a chunk wait for the MMAs of the previous one; several CTAs per SM
// hide part of that latency).
//
// Tiles: the dense form tiles the tokens in order (grid.y = ceil(n_tok / BN), BN = 64, or 32
// when 64 would make fewer than two CTAs per SM); where even that leaves SMs idle (a decode step
// of a few dozen tokens: a 512-row projection is 8 tiles) it splits the input over grid.z, and
// ft_cuda_sum_splits adds the splits' partial products in order (deterministic). The grouped
// form reads a tile table written on the device by the grouping (moe_gemm.cu): entry y is
// (expert, first position, count) in the expert-sorted order of the (token, slot) pairs, or
// expert -1 for an unused slot of the grid (grid.y is an upper bound, so the host never
// learns the counts). Each tile reads its expert's weight rows once for up to BN tokens.
// Rows past n_out and tokens past the tile's count compute on zeros and are not written.
//
// NW = 2: fused gate/up (w0 = gate, w1 = up, y = act(gate, up)); 1: y = x · w0ᵀ.
template <int T, int BN, int NW>
__global__ void __launch_bounds__(GM_THREADS) gemm_q_kernel(const gemm_q_args a) {
    using G = gq<T>;
    constexpr int NSUB = 32 / G::SUB;      // sub-blocks (MMAs) per k-block
    constexpr int NT = BN / 16;            // n8 tiles per warp (a warp covers BN / 2 tokens)
    constexpr int NMIN = G::HAS_MIN ? GM_KB : 1;
    static_assert(!(G::HAS_MIN && G::SUB != 32), "mins are per 32-element unit");
    static_assert(BN % 16 == 0 && GM_BM == 64, "warp tiling: 2 x 2 warps of 32 rows x BN/2 tokens");

    __shared__ __align__(16) int s_w[NW][GM_BM][GM_LDW];   // weight codes, k-contiguous
    __shared__ float s_sc[NW][GM_BM][GM_KB * NSUB];        // sub-block scales
    __shared__ float s_mn[NW][GM_BM][NMIN];                // unit mins
    __shared__ __align__(16) int s_x[BN][GM_LDW];          // activation codes
    __shared__ float s_d8[BN][GM_KB];                      // q8_1 scales
    __shared__ float s_ds[BN][GM_KB];                      // d8 * sum of the block's codes
    __shared__ int s_xrow[BN];                             // activation row of each token, -1: none

    // the tile: expert, first position and token count
    int expert = 0, pos0, cnt;
    if (a.tiles) {
        expert = a.tiles[MOE_TILE_INTS * blockIdx.y];
        if (expert < 0) return; // an unused slot: the whole CTA leaves before any barrier
        pos0 = a.tiles[MOE_TILE_INTS * blockIdx.y + 1];
        cnt = a.tiles[MOE_TILE_INTS * blockIdx.y + 2];
    } else {
        pos0 = (int)blockIdx.y * BN;
        cnt = min(BN, a.n_pos - pos0);
    }
    const int row0 = (int)blockIdx.x * GM_BM;
    const int tid = threadIdx.x;
    for (int j = tid; j < BN; j += GM_THREADS) {
        int r = -1;
        if (j < cnt) r = a.x_map ? a.x_map[pos0 + j] / a.x_div : pos0 + j;
        s_xrow[j] = r;
    }

    const int n_kb = a.n_in / 32;
    const uint8_t *w_base0 = a.w0 + (size_t)expert * a.mat_bytes;
    const uint8_t *w_base1 = NW == 2 ? a.w1 + (size_t)expert * a.mat_bytes : w_base0;

    const int lane = tid % FT_WARP, warp = tid / FT_WARP;
    const int g = lane / 4, t = lane % 4;
    const int wr = (warp / 2) * 32;        // the warp's first row in the tile
    const int wt = (warp % 2) * (BN / 2);  // its first token

    float acc[NW][2][NT][4];
#pragma unroll
    for (int wi = 0; wi < NW; wi++)
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[wi][mt][nt][i] = 0.0f;

    __syncthreads(); // s_xrow

    // the k-blocks of this CTA's split (all of them unsplit)
    const int kb0 = a.part ? (int)blockIdx.z * a.kb_split : 0;
    const int kb1 = a.part ? min(n_kb, kb0 + a.kb_split) : n_kb;
    for (int kc = kb0; kc < kb1; kc += GM_KB) {
        // 1a. weight units: consecutive threads take consecutive units of a row
        for (int u = tid; u < NW * GM_BM * GM_KB; u += GM_THREADS) {
            const int wi = u / (GM_BM * GM_KB), r = (u / GM_KB) % GM_BM, kb = u % GM_KB;
            const int gkb = kc + kb, grow = row0 + r;
            int code[8];
            float sc[2] = {0.0f, 0.0f}, mn = 0.0f;
            if (grow < a.n_out && gkb < n_kb) {
                constexpr int UPB = G::QK / 32; // units per block
                const uint8_t *blk = (wi ? w_base1 : w_base0) + (size_t)grow * a.row_bytes + (size_t)(gkb / UPB) * G::BB;
                G::unit(blk, gkb % UPB, code, sc, &mn);
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) code[i] = 0;
            }
            int4 *dst = (int4 *)&s_w[wi][r][8 * kb];
            dst[0] = make_int4(code[0], code[1], code[2], code[3]);
            dst[1] = make_int4(code[4], code[5], code[6], code[7]);
#pragma unroll
            for (int s = 0; s < NSUB; s++) s_sc[wi][r][NSUB * kb + s] = sc[s];
            if (G::HAS_MIN) s_mn[wi][r][kb % NMIN] = mn;
        }
        // 1b. activation blocks
        for (int u = tid; u < BN * GM_KB; u += GM_THREADS) {
            const int j = u / GM_KB, kb = u % GM_KB, gkb = kc + kb;
            const int xr = s_xrow[j];
            int code[8];
            float d8 = 0.0f;
            int sum = 0;
            if (xr >= 0 && gkb < n_kb) {
                const block_q8_1 *b = a.x + (size_t)xr * (size_t)n_kb + gkb;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    code[i] = ld_u(b, i);
                    sum = __dp4a(code[i], 0x01010101, sum);
                }
                d8 = ld_d8(b);
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) code[i] = 0;
            }
            int4 *dst = (int4 *)&s_x[j][8 * kb];
            dst[0] = make_int4(code[0], code[1], code[2], code[3]);
            dst[1] = make_int4(code[4], code[5], code[6], code[7]);
            s_d8[j][kb] = d8;
            s_ds[j][kb] = d8 * (float)sum;
        }
        __syncthreads();

        // 1c. MMAs and scales
#pragma unroll
        for (int kb = 0; kb < GM_KB; kb++) {
            float d8[NT][2];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                d8[nt][0] = s_d8[wt + 8 * nt + 2 * t][kb];
                d8[nt][1] = s_d8[wt + 8 * nt + 2 * t + 1][kb];
            }
#pragma unroll
            for (int s = 0; s < NSUB; s++) {
                // this sub-block's words: 8 per k-block, 4 per 16-element half
                const int k0 = 8 * kb + 4 * s;
                int b[NT][2];
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    b[nt][0] = s_x[wt + 8 * nt + g][k0 + t];
                    b[nt][1] = NSUB == 1 ? s_x[wt + 8 * nt + g][k0 + 4 + t] : 0;
                }
#pragma unroll
                for (int wi = 0; wi < NW; wi++) {
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        const int r = wr + 16 * mt + g;
                        int af[4];
                        af[0] = s_w[wi][r][k0 + t];
                        af[1] = s_w[wi][r + 8][k0 + t];
                        af[2] = NSUB == 1 ? s_w[wi][r][k0 + 4 + t] : 0;
                        af[3] = NSUB == 1 ? s_w[wi][r + 8][k0 + 4 + t] : 0;
                        const float sc0 = s_sc[wi][r][NSUB * kb + s], sc1 = s_sc[wi][r + 8][NSUB * kb + s];
#pragma unroll
                        for (int nt = 0; nt < NT; nt++) {
                            int c[4];
                            if (NSUB == 1) mma_k32(c, af, b[nt]);
                            else mma_k16(c, af, b[nt][0]);
                            float *o = acc[wi][mt][nt];
                            o[0] += (float)c[0] * (sc0 * d8[nt][0]);
                            o[1] += (float)c[1] * (sc0 * d8[nt][1]);
                            o[2] += (float)c[2] * (sc1 * d8[nt][0]);
                            o[3] += (float)c[3] * (sc1 * d8[nt][1]);
                        }
                    }
                }
            }
            if (G::HAS_MIN) {
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const float ds0 = s_ds[wt + 8 * nt + 2 * t][kb], ds1 = s_ds[wt + 8 * nt + 2 * t + 1][kb];
#pragma unroll
                    for (int wi = 0; wi < NW; wi++)
#pragma unroll
                        for (int mt = 0; mt < 2; mt++) {
                            const int r = wr + 16 * mt + g;
                            const float m0 = s_mn[wi][r][kb % NMIN], m1 = s_mn[wi][r + 8][kb % NMIN];
                            float *o = acc[wi][mt][nt];
                            o[0] -= m0 * ds0;
                            o[1] -= m0 * ds1;
                            o[2] -= m1 * ds0;
                            o[3] -= m1 * ds1;
                        }
                }
            }
        }
        __syncthreads(); // before the next chunk overwrites the tiles
    }

    // 2. outputs
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = row0 + wr + 16 * mt + g + 8 * (i / 2);
                const int j = wt + 8 * nt + 2 * t + i % 2;
                if (row >= a.n_out || j >= cnt) continue;
                const int pos = pos0 + j;
                if (a.part) { // a split's partial product (dense form: no extras)
                    a.part[((size_t)blockIdx.z * a.n_pos + pos) * (size_t)a.n_out + row] = acc[0][mt][nt][i];
                    continue;
                }
                const int yr = a.y_map ? a.y_map[pos] : pos;
                const float v = NW == 2 ? ft_expert_glu(a.ex, expert, a.n_out, row, acc[0][mt][nt][i], acc[NW - 1][mt][nt][i])
                                        : ft_expert_down(a.ex, expert, a.n_out, row, acc[0][mt][nt][i]);
                a.y[(size_t)yr * (size_t)a.n_out + row] = v;
            }
}

// ---------------------------------------------------------------------------------------------
// Dispatch

#define GEMM_Q_TYPES(X)                                                                         \
    X(FT_TYPE_Q4_0) X(FT_TYPE_Q4_1) X(FT_TYPE_Q5_0) X(FT_TYPE_Q5_1) X(FT_TYPE_Q8_0)              \
    X(FT_TYPE_IQ4_NL) X(FT_TYPE_MXFP4) X(FT_TYPE_Q3_K) X(FT_TYPE_Q4_K) X(FT_TYPE_Q5_K)           \
    X(FT_TYPE_Q6_K) X(FT_TYPE_IQ4_XS)

extern "C" bool ft_cuda_gemm_supported(uint32_t type) {
    switch (type) {
#define CASE(T) case T:
        GEMM_Q_TYPES(CASE)
#undef CASE
        return true;
    default:
        return false;
    }
}

// Elements per block of a supported type.
static int gemm_block_elems(uint32_t type) {
    switch (type) {
#define CASE(T) case T: return gq<T>::QK;
        GEMM_Q_TYPES(CASE)
#undef CASE
    default:
        return 0;
    }
}

template <int BN, int NW>
static void launch(uint32_t type, const gemm_q_args &a, dim3 grid, cudaStream_t stream) {
    switch (type) {
#define CASE(T)                                                           \
    case T:                                                               \
        gemm_q_kernel<T, BN, NW><<<grid, GM_THREADS, 0, stream>>>(a);     \
        break;
        GEMM_Q_TYPES(CASE)
#undef CASE
    default:
        FT_CUDA_ASSERT(!"unsupported weight type");
    }
    CUDA_CHECK_LAUNCH();
}

// Shapes every form shares: the weights' rows hold n_in / QK whole blocks, row_bytes apart.
static void check_common(uint32_t type, const gemm_q_args &a) {
    FT_CUDA_ASSERT(ft_cuda_gemm_supported(type));
    const int qk = gemm_block_elems(type);
    FT_CUDA_ASSERT(a.n_in > 0 && a.n_in % qk == 0 && a.n_out > 0);
    FT_CUDA_ASSERT(a.row_bytes == ft_row_bytes((enum ft_type)type, a.n_in));
    FT_CUDA_ASSERT(((uintptr_t)a.w0 & 15) == 0 && ((uintptr_t)a.w1 & 15) == 0 && ((uintptr_t)a.x & 3) == 0);
    // the 16-byte loads of q4_K / q5_K codes need 16-byte rows and matrices (144 and 176 are
    // multiples of 16); the other formats load at most 4 bytes at a time, at their alignment
    // (q3_K, q6_K and iq4_xs rows of an odd number of blocks are not 16-byte multiples)
    const bool wide = type == FT_TYPE_Q4_K || type == FT_TYPE_Q5_K;
    FT_CUDA_ASSERT(!wide || (a.row_bytes % 16 == 0 && a.mat_bytes % 16 == 0));
}

static int g_force_bn; // ft_cuda_gemm_force_bn

extern "C" void ft_cuda_gemm(const ft_cuda_gemm_params *p, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(p->n_tok >= 1 && p->n_out >= 1 && p->n_out <= INT32_MAX && p->n_in <= INT32_MAX);
    gemm_q_args a = {};
    a.w0 = (const uint8_t *)p->w;
    a.row_bytes = ft_row_bytes((enum ft_type)p->type, p->n_in);
    a.n_out = (int)p->n_out;
    a.n_in = (int)p->n_in;
    a.x = (const block_q8_1 *)p->x;
    a.y = p->y;
    a.n_pos = p->n_tok;
    check_common(p->type, a);
    // tiles of 64 tokens, or 32 where 64 would leave SMs idle (k/v projections: 512 rows)
    const int64_t row_tiles = (p->n_out + GM_BM - 1) / GM_BM;
    int bn = row_tiles * ((p->n_tok + GM_GEMM_BN - 1) / GM_GEMM_BN) < 2 * (int64_t)ft_cuda_sm_count() ? GM_GROUP_BN : GM_GEMM_BN;
    if (g_force_bn) bn = g_force_bn;
    dim3 grid((unsigned)row_tiles, (unsigned)((p->n_tok + bn - 1) / bn));
    FT_CUDA_ASSERT(grid.y <= 65535);
    // fewer tiles than SMs: split the input so that about two CTAs per SM stream the weights
    const int64_t out = (int64_t)p->n_tok * p->n_out, n_chunks = (a.n_in / 32 + GM_KB - 1) / GM_KB;
    int64_t per;
    const int splits = p->part ? ft_cuda_gemm_splits((int64_t)grid.x * grid.y, n_chunks, p->part_floats, out, &per) : 1;
    if (splits > 1) {
        a.part = p->part;
        a.kb_split = (int)per * GM_KB;
        grid.z = (unsigned)splits;
    }
    const cudaStream_t st = ft_cuda_stream_handle(s);
    if (bn == GM_GEMM_BN) launch<GM_GEMM_BN, 1>(p->type, a, grid, st);
    else launch<GM_GROUP_BN, 1>(p->type, a, grid, st);
    if (splits > 1) ft_cuda_sum_splits(p->part, p->y, out, splits, s);
}

extern "C" void ft_cuda_gemm_force_bn(int bn) {
    FT_CUDA_ASSERT(bn == 0 || bn == GM_GEMM_BN || bn == GM_GROUP_BN);
    g_force_bn = bn;
}

void ft_cuda_gemm_grouped(uint32_t type, const gemm_q_args *a, int max_tiles, cudaStream_t stream) {
    check_common(type, *a);
    FT_CUDA_ASSERT(a->tiles && max_tiles >= 1 && max_tiles <= 65535 && a->x_div >= 1);
    const dim3 grid((unsigned)((a->n_out + GM_BM - 1) / GM_BM), (unsigned)max_tiles);
    if (a->w1) launch<GM_GROUP_BN, 2>(type, *a, grid, stream);
    else launch<GM_GROUP_BN, 1>(type, *a, grid, stream);
}
