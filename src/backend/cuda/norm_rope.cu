// norm_rope.cu: the per-head RMSNorm of Q or K followed by RoPE, in one launch (qwen3moe and
// laguna normalise each head of q and k before rotating it: two launches each otherwise).
//
// Steps, one CTA per (token, head) row of head_dim <= 256 floats (a thread per dimension, in
// whole warps), of one buffer or of two (q and k: one launch instead of two; the CTAs of the
// first buffer's rows come first):
//   1. thread d loads element d; the sum of squares is reduced over the CTA as
//      rms_norm_kernel<1> reduces it (the same butterflies; its extra warps add only zeros),
//      and y_d = (x_d * scale) * w_d goes to shared memory;
//   2. thread i < n_rot / 2 rotates pair i (ft_rope_pair, rope.cu's arithmetic) and writes
//      it; dimensions past n_rot are written as normalised.
// So the result has the bits of rms_norm then rope. Without the norm (ft_cuda_norm_rope_opt), the
// ropes of q and k in one launch with rope.cu's bits.
// With cache rows (ft_cuda_norm_rope_kv, decode steps): 3. each of buffer 1's rows (k) rereads
// its final values and stores them into k's cache row, and CTAs past buffer 1's rows store v's
// heads into v's, with set_rows.cu's bits (kv_store.cuh): one launch instead of two.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "kv_store.cuh"
#include "rope.cuh"

#include "../kv_block.h"

enum { NR_THREADS = FT_CUDA_NORM_ROPE_MAX_HD };

// One or two buffers (q and k of a layer) in one launch: rows 0 .. rows[0] - 1 are buffer 0's.
typedef struct norm_rope_args {
    float *x[2];
    const float *w[2];
    int n_head[2];
    int rows0; // (token, head) rows of buffer 0
    int rows1; // rows0 + buffer 1's rows; v's rows (cache rows only) follow
    int head_dim;
    float eps;
    int pos0;
    bool norm; // false: the rope alone (two buffers' ropes in one launch)
    ft_cuda_kv_rows kv; // kv.type 0: no cache rows
} norm_rope_args;

// Element d of head h of token t into cache c's row (0: k, 1: v) of position pos; q8_0: a whole
// warp calls.
__device__ __forceinline__ void store_kv(const norm_rope_args &a, const ft_cuda_rope_params &p, int c, int t, int pos,
                                         int h, int d, float v) {
    const ft_cuda_set_rows_dst &dst = c ? a.kv.v : a.kv.k;
    const int32_t *blocks = p.rows.pos ? p.rows.blocks[t] : a.kv.blocks;
    uint8_t *row = (uint8_t *)dst.dst + (size_t)ft_kv_row(blocks, pos) * dst.row_bytes;
    const int64_t i = (int64_t)h * a.head_dim + d;
    if (a.kv.type == FT_TYPE_F16) ft_kv_store_f16(row, i, v);
    else ft_kv_store_q8_0(row, i / 32, v, d % 32); // (head_dim % 32 == 0: blocks within a head)
}

__global__ void __launch_bounds__(NR_THREADS) norm_rope_kernel(const norm_rope_args a, const ft_cuda_rope_params p) {
    ft_pdl_begin();
    __shared__ float red[32];
    __shared__ float ys[NR_THREADS];
    const int d = threadIdx.x;
    if ((int)blockIdx.x >= a.rows1) { // a head of v: into its cache row as it is
        const int row = blockIdx.x - a.rows1, t = row / a.n_head[1];
        if (d < a.head_dim)
            store_kv(a, p, 1, t, ft_rope_pos(p, a.pos0, t), row - t * a.n_head[1], d,
                     a.kv.v.x[(int64_t)row * a.head_dim + d]);
        return;
    }
    const int j = (int)blockIdx.x >= a.rows0, row = blockIdx.x - (j ? a.rows0 : 0);
    const int t = row / ft_param_pick(a.n_head, j), head_dim = a.head_dim;
    float *xr = ft_param_pick(a.x, j) + (int64_t)row * head_dim;
    const float *w = ft_param_pick(a.w, j);
    const float v = d < head_dim ? xr[d] : 0.0f;
    const float wd = d < head_dim ? (w ? w[d] : 1.0f) : 0.0f; // loaded with x, not after the reduction
    if (a.norm) {
        const float sum = ft_block_sum(v * v, red);
        const float scale = 1.0f / sqrtf(sum / head_dim + a.eps);
        if (d < head_dim) ys[d] = (v * scale) * wd;
    } else if (d < head_dim) {
        ys[d] = v;
    }
    __syncthreads();
    const int half = p.n_rot / 2;
    if (d < half) {
        const int i0 = p.neox ? d : 2 * d, i1 = p.neox ? d + half : 2 * d + 1;
        ft_rope_pair(ys[i0], ys[i1], ft_rope_pos(p, a.pos0, t), d, p, &xr[i0], &xr[i1]);
    } else if (d >= p.n_rot && d < head_dim) {
        xr[d] = ys[d];
    }
    if (j == 0 || !a.kv.type) return;
    __syncthreads(); // the CTA's stores to xr are visible to its threads
    if (d < head_dim) store_kv(a, p, 0, t, ft_rope_pos(p, a.pos0, t), row - t * a.n_head[1], d, xr[d]);
}

extern "C" void ft_cuda_norm_rope(const ft_cuda_norm_rope_buf *b, int n_buf, int n_tok, int head_dim, float eps,
                                  int pos0, const ft_cuda_rope_params *p, ft_cuda_stream *s) {
    ft_cuda_norm_rope_opt(b, n_buf, n_tok, head_dim, eps, true, pos0, p, s);
}

extern "C" void ft_cuda_norm_rope_opt(const ft_cuda_norm_rope_buf *b, int n_buf, int n_tok, int head_dim, float eps,
                                      bool norm, int pos0, const ft_cuda_rope_params *p, ft_cuda_stream *s) {
    ft_cuda_norm_rope_kv(b, n_buf, n_tok, head_dim, eps, norm, pos0, p, NULL, s);
}

extern "C" void ft_cuda_norm_rope_kv(const ft_cuda_norm_rope_buf *b, int n_buf, int n_tok, int head_dim, float eps,
                                     bool norm, int pos0, const ft_cuda_rope_params *p, const ft_cuda_kv_rows *kv,
                                     ft_cuda_stream *s) {
    FT_CUDA_ASSERT(head_dim >= 1 && head_dim <= NR_THREADS && p->n_rot % 2 == 0 && p->n_rot <= head_dim);
    FT_CUDA_ASSERT(n_buf == 1 || n_buf == 2);
    FT_CUDA_ASSERT(!kv || (n_buf == 2 && kv->k.x == b[1].x && (kv->type == FT_TYPE_F16 ||
                                                                 (kv->type == FT_TYPE_Q8_0 && head_dim % 32 == 0))));
    norm_rope_args a;
    int64_t rows = 0;
    for (int j = 0; j < 2; j++) {
        const ft_cuda_norm_rope_buf &bj = b[j < n_buf ? j : 0];
        a.x[j] = bj.x;
        a.w[j] = bj.w;
        a.n_head[j] = bj.n_head;
    }
    a.rows0 = (int)((int64_t)n_tok * b[0].n_head);
    for (int j = 0; j < n_buf; j++) rows += (int64_t)n_tok * b[j].n_head;
    FT_CUDA_ASSERT(rows <= INT32_MAX);
    if (n_buf == 1) a.rows0 = (int)rows; // (buffer 1 unused)
    a.rows1 = (int)rows;
    memset(&a.kv, 0, sizeof(a.kv));
    if (kv) {
        a.kv = *kv;
        if (kv->v.x) rows += (int64_t)n_tok * b[1].n_head; // v's heads: as many as k's
    }
    FT_CUDA_ASSERT(rows <= INT32_MAX);
    a.head_dim = head_dim;
    a.eps = eps;
    a.pos0 = pos0;
    a.norm = norm;
    if (rows == 0) return;
    // a thread per dimension: idle warps would only add zeros to the sum (the same bits)
    const int threads = (head_dim + FT_WARP - 1) / FT_WARP * FT_WARP;
    ft_launch(norm_rope_kernel, (unsigned)rows, threads, 0, ft_cuda_stream_handle(s), a, *p);
    CUDA_CHECK_LAUNCH();
}
