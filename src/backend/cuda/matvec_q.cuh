// matvec_q.cuh: what the quantized matvec kernels share (matvec_q.cu, moe_rows.cu): the
// per-format constants and vec_dot of each weight type, and a warp's dot products of a few
// weight rows with a few q8_1 activation rows in the one lane order every such kernel uses, so
// that a product has the same bits whichever kernel computes it (a token decoded alone and in a
// batch). Internal to src/backend/cuda/.
#ifndef FT_CUDA_MATVEC_Q_CUH
#define FT_CUDA_MATVEC_Q_CUH

#include "cuda_common.cuh"

#include "../../quant/quant.h"
#include "vecdot_q.cuh"

enum { MV_THREADS = 128, MV_WARPS = MV_THREADS / FT_WARP };

// Per-format constants: elements and bytes of a block, parts per block, and its vec_dot.
template <int T> struct qt;
#define QT(T, qk_, bytes_, nparts_, fn)                                                       \
    template <> struct qt<T> {                                                                \
        static constexpr int qk = qk_, bytes = bytes_, nparts = nparts_;                      \
        static __device__ __forceinline__ float dot(const uint8_t *__restrict__ b, const block_q8_1 *__restrict__ y, int p) { \
            return fn(b, y, p);                                                               \
        }                                                                                     \
    };
QT(FT_TYPE_Q4_0, QK4_0, sizeof(block_q4_0), NPART_32, vd_q4_0)
QT(FT_TYPE_Q4_1, QK4_1, sizeof(block_q4_1), NPART_32, vd_q4_1)
QT(FT_TYPE_Q5_0, QK5_0, sizeof(block_q5_0), NPART_32, vd_q5_0)
QT(FT_TYPE_Q5_1, QK5_1, sizeof(block_q5_1), NPART_32, vd_q5_1)
QT(FT_TYPE_Q8_0, QK8_0, sizeof(block_q8_0), NPART_32, vd_q8_0)
QT(FT_TYPE_IQ4_NL, QK4_NL, sizeof(block_iq4_nl), NPART_32, vd_iq4_nl)
QT(FT_TYPE_MXFP4, QK_MXFP4, sizeof(block_mxfp4), NPART_MXFP4, vd_mxfp4)
QT(FT_TYPE_Q2_K, QK_K, sizeof(block_q2_K), NPART_K, vd_q2_K)
QT(FT_TYPE_Q3_K, QK_K, sizeof(block_q3_K), NPART_K, vd_q3_K)
QT(FT_TYPE_Q4_K, QK_K, sizeof(block_q4_K), NPART_K4, vd_q4_K)
QT(FT_TYPE_Q5_K, QK_K, sizeof(block_q5_K), NPART_K4, vd_q5_K)
QT(FT_TYPE_Q6_K, QK_K, sizeof(block_q6_K), NPART_K, vd_q6_K)
QT(FT_TYPE_IQ4_XS, QK_K, sizeof(block_iq4_xs), NPART_K, vd_iq4_xs)
#undef QT

// Part `part` of each weight block wb[r] times the matching words of each activation block
// xb[c] + x_off, added to acc[r][c] for c < n_x. Tokens outside, rows inside, and dot's
// pointers restrict: the compiler then loads each part's weight words once for all the tokens
// and each token's words once for all the rows (nothing written in between can change them);
// it does neither for plain pointers or the other loop order.
template <int T, int NW, int NX>
__device__ __forceinline__ void part_dot_x(const uint8_t *const (&wb)[NW], const block_q8_1 *const (&xb)[NX],
                                           int64_t x_off, int n_x, int part, float (&acc)[NW][NX]) {
#pragma unroll
    for (int c = 0; c < NX; c++) {
        if (c >= n_x) break;
#pragma unroll
        for (int r = 0; r < NW; r++) acc[r][c] += qt<T>::dot(wb[r], xb[c] + x_off, part);
    }
}

// The warp's dot products of NW weight rows wr with n_x <= NX activation rows x (each n_blocks
// weight blocks long): lane l takes parts l, l + 32, ... (2 per step, their loads before their
// arithmetic: the order of matvec_q_kernel<T, 1, 1, 32, 2>), one accumulator per (x, row), then
// the warp's sum; every lane gets out[c][r] for c < n_x (the rest is left as it was).
template <int T, int NW, int NX>
__device__ __forceinline__ void warp_rows_dot_x(const uint8_t *const (&wr)[NW], const block_q8_1 *const (&x)[NX],
                                                int n_x, int n_blocks, int lane, float (&out)[NX][NW]) {
    typedef qt<T> Q;
    constexpr int YB = Q::qk / QK8_1, U = 2;
    const int n_items = n_blocks * Q::nparts;
    float acc[NW][NX];
#pragma unroll
    for (int r = 0; r < NW; r++)
#pragma unroll
        for (int c = 0; c < NX; c++) acc[r][c] = 0.0f;
    for (int it0 = lane; it0 < n_items; it0 += FT_WARP * U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int it = it0 + u * FT_WARP;
            if (it >= n_items) break;
            const int ib = it / Q::nparts, part = it % Q::nparts;
            const uint8_t *wb[NW];
#pragma unroll
            for (int r = 0; r < NW; r++) wb[r] = wr[r] + (size_t)ib * Q::bytes;
            part_dot_x<T, NW, NX>(wb, x, (int64_t)ib * YB, n_x, part, acc);
        }
    }
#pragma unroll
    for (int c = 0; c < NX; c++) {
        if (c >= n_x) break;
#pragma unroll
        for (int r = 0; r < NW; r++) out[c][r] = ft_warp_sum(acc[r][c]);
    }
}

// One activation row: warp_rows_dot_x with NX = 1.
template <int T, int NW>
__device__ __forceinline__ void warp_rows_dot(const uint8_t *const (&wr)[NW], const block_q8_1 *x, int n_blocks,
                                              int lane, float (&out)[NW]) {
    const block_q8_1 *const xs[1] = {x};
    float o[1][NW];
    warp_rows_dot_x<T, NW, 1>(wr, xs, 1, n_blocks, lane, o);
#pragma unroll
    for (int r = 0; r < NW; r++) out[r] = o[0][r];
}

// The GLU kernels that write a q8_1 block of h (matvec_q.cu's per-pair one, moe_rows.cu's
// grouped one): a CTA of GLUQ_WARPS warps on 32 consecutive rows from row0, warp w on rows w
// and w + 16; wr = their gate and up rows, interleaved, in the matrices at byte base of the
// gate bank w and the up bank w_up.
enum { GLUQ_WARPS = 16, GLUQ_RPW = QK8_1 / GLUQ_WARPS };

template <int T>
__device__ __forceinline__ void gluq_rows(const uint8_t *w, const uint8_t *w_up, size_t base, int row0, int warp,
                                          int n_blocks, const uint8_t *(&wr)[2 * GLUQ_RPW]) {
#pragma unroll
    for (int i = 0; i < GLUQ_RPW; i++) {
        const size_t off = base + (size_t)(row0 + warp + GLUQ_WARPS * i) * n_blocks * qt<T>::bytes;
        wr[2 * i] = w + off;
        wr[2 * i + 1] = w_up + off;
    }
}

#endif
