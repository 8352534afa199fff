// matvec_f.cu: y = x · wᵀ for float weights w (n_rows, n_cols) in f32, f16 or bf16 and 1..8
// tokens of float activations x (n_tok, n_cols); products and sums in float (FMA).
//
// Steps of one CTA (128 threads, ROWS consecutive rows, all NCOLS tokens):
//   1. When n_cols % 4 == 0, thread t takes 4-element chunks t, t + 128, ... of the row: one
//      8-byte (f16/bf16) or 16-byte (f32) weight load and one float4 activation load per
//      token per chunk, coalesced across the warp. Otherwise one element at a time.
//   2. Reduce each (token, row) accumulator over the warp (shuffles) and the 4 warps (shared
//      memory); threads 0..NCOLS*ROWS-1 write y.
// Geometry: grid = ceil(n_rows / ROWS), ROWS = 1 for one token, 2 for more; NCOLS in
// {1, 2, 4, 8} with the runtime n_tok <= NCOLS. Rows past n_rows compute on the last row and
// are not written. Several matrices of one input (ft_cuda_matvec_multi: qwen35moe's alpha and
// beta) take consecutive runs of CTAs, each run its matrix's grid.
#include "cuda_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../../quant/quant.h"

enum { MVF_THREADS = 128, MVF_WARPS = MVF_THREADS / FT_WARP };

// Loads of 1 and 4 weights as floats.
template <int T> struct fw;
template <> struct fw<FT_TYPE_F32> {
    typedef float elem;
    static __device__ __forceinline__ float one(const elem *p) { return *p; }
    static __device__ __forceinline__ float4 four(const elem *p) { return *(const float4 *)p; }
};
template <> struct fw<FT_TYPE_F16> {
    typedef ft_half elem;
    static __device__ __forceinline__ float one(const elem *p) { return __half2float(__ushort_as_half(*p)); }
    static __device__ __forceinline__ float4 four(const elem *p) {
        const uint2 v = *(const uint2 *)p;
        const float2 a = __half22float2(*(const __half2 *)&v.x);
        const float2 b = __half22float2(*(const __half2 *)&v.y);
        return make_float4(a.x, a.y, b.x, b.y);
    }
};
template <> struct fw<FT_TYPE_BF16> {
    typedef ft_bf16 elem;
    static __device__ __forceinline__ float one(const elem *p) { return __uint_as_float((uint32_t)*p << 16); }
    static __device__ __forceinline__ float4 four(const elem *p) {
        const uint2 v = *(const uint2 *)p;
        // bf16 is the upper half of a float: shift or mask each half into place
        return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xFFFF0000u),
                           __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xFFFF0000u));
    }
};

typedef struct matvec_f_args {
    const void *w;   // (n_rows, n_cols)
    const float *x;  // (n_tok, n_cols)
    float *y;        // (n_tok, n_rows)
    int n_rows;
    int n_cols;
    int n_tok;
    const int32_t *ids; // expert mode, as in matvec_q.cu; NULL: off
    size_t w_mat;       // bytes per matrix
    int x_div, n_pairs;
    // several matrices of one input: segment s owns CTAs seg_cta[s] .. seg_cta[s + 1] - 1 and
    // computes seg_w[s] (seg_rows[s] rows) into seg_y[s]. n_seg 0: off (w, y, n_rows above)
    int n_seg;
    const void *seg_w[FT_CUDA_MATVEC_MAX_SEG];
    float *seg_y[FT_CUDA_MATVEC_MAX_SEG];
    int seg_rows[FT_CUDA_MATVEC_MAX_SEG];
    int seg_cta[FT_CUDA_MATVEC_MAX_SEG + 1];
} matvec_f_args;

template <int T, int NCOLS, int ROWS, bool VEC, bool SEG>
__global__ void __launch_bounds__(MVF_THREADS) matvec_f_kernel(const matvec_f_args a) {
    typedef fw<T> F;
    typedef typename F::elem elem;
    int bx = blockIdx.x, n_rows = a.n_rows;
    const elem *w = (const elem *)a.w;
    float *y = a.y;
    if (SEG) {
        int sg = 0;
        while (sg + 1 < a.n_seg && bx >= a.seg_cta[sg + 1]) sg++;
        w = (const elem *)a.seg_w[sg];
        y = a.seg_y[sg];
        n_rows = a.seg_rows[sg];
        bx -= a.seg_cta[sg];
    }
    const int row0 = bx * ROWS;
    if (!a.ids) { // a dense matrix (constant): the CTA's rows are requested while the kernel before ends
        const int end = min(row0 + ROWS, n_rows);
        if (row0 < end)
            ft_prefetch_l2(w + (size_t)row0 * a.n_cols, (size_t)(end - row0) * a.n_cols * sizeof(elem), threadIdx.x, MVF_THREADS);
    }
    ft_pdl_begin();
    const float *x = a.x;
    if (a.ids) {
        const int pair = blockIdx.y;
        if (a.ids[pair] < 0) { // computed on the CPU (hybrid): zero rows (the whole CTA, before any barrier)
            if (threadIdx.x < ROWS && row0 + (int)threadIdx.x < n_rows) y[(size_t)pair * n_rows + row0 + threadIdx.x] = 0.0f;
            return;
        }
        w = (const elem *)((const uint8_t *)a.w + (size_t)a.ids[pair] * a.w_mat);
        x += (size_t)(pair / a.x_div) * a.n_cols;
        y += (size_t)pair * n_rows;
    }
    const elem *wr[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) wr[r] = w + (size_t)min(row0 + r, n_rows - 1) * a.n_cols;

    float acc[NCOLS][ROWS];
#pragma unroll
    for (int c = 0; c < NCOLS; c++)
#pragma unroll
        for (int r = 0; r < ROWS; r++) acc[c][r] = 0.0f;

    if (VEC) {
        for (int i = 4 * threadIdx.x; i < a.n_cols; i += 4 * MVF_THREADS) {
            float4 wv[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; r++) wv[r] = F::four(wr[r] + i);
#pragma unroll
            for (int c = 0; c < NCOLS; c++) {
                if (c >= a.n_tok) break;
                const float4 xv = *(const float4 *)(x + (size_t)c * a.n_cols + i);
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    float s = acc[c][r];
                    s = fmaf(wv[r].x, xv.x, s);
                    s = fmaf(wv[r].y, xv.y, s);
                    s = fmaf(wv[r].z, xv.z, s);
                    s = fmaf(wv[r].w, xv.w, s);
                    acc[c][r] = s;
                }
            }
        }
    } else {
        for (int i = threadIdx.x; i < a.n_cols; i += MVF_THREADS) {
#pragma unroll
            for (int c = 0; c < NCOLS; c++) {
                if (c >= a.n_tok) break;
                const float xv = x[(size_t)c * a.n_cols + i];
#pragma unroll
                for (int r = 0; r < ROWS; r++) acc[c][r] = fmaf(F::one(wr[r] + i), xv, acc[c][r]);
            }
        }
    }

    __shared__ float red[MVF_WARPS][NCOLS][ROWS];
    const int warp = threadIdx.x / FT_WARP, lane = threadIdx.x % FT_WARP;
#pragma unroll
    for (int c = 0; c < NCOLS; c++)
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const float v = ft_warp_sum(acc[c][r]);
            if (lane == 0) red[warp][c][r] = v;
        }
    __syncthreads();
    if (threadIdx.x < NCOLS * ROWS) {
        const int c = threadIdx.x / ROWS, r = threadIdx.x % ROWS;
        float v = 0.0f;
#pragma unroll
        for (int k = 0; k < MVF_WARPS; k++) v += red[k][c][r];
        if (c < a.n_tok && row0 + r < n_rows) y[(int64_t)c * n_rows + row0 + r] = v;
    }
}

template <int T, int NCOLS>
static void launch_ncols(const matvec_f_args &a, cudaStream_t s) {
    constexpr int ROWS = NCOLS == 1 ? 1 : 2;
    matvec_f_args a2 = a;
    const int n_cta = a.n_seg ? ft_seg_ctas(a.n_seg, a.seg_rows, ROWS, a2.seg_cta) : (a.n_rows + ROWS - 1) / ROWS;
    const dim3 grid((unsigned)n_cta, a.ids ? (unsigned)a.n_pairs : 1u);
    // 4-element chunks need every row (and token) to start 16-byte / 8-byte aligned
    if (a.n_cols % 4 == 0 && a.n_seg) ft_launch(matvec_f_kernel<T, NCOLS, ROWS, true, true>, grid, MVF_THREADS, 0, s, a2);
    else if (a.n_cols % 4 == 0) ft_launch(matvec_f_kernel<T, NCOLS, ROWS, true, false>, grid, MVF_THREADS, 0, s, a2);
    else if (a.n_seg) ft_launch(matvec_f_kernel<T, NCOLS, ROWS, false, true>, grid, MVF_THREADS, 0, s, a2);
    else ft_launch(matvec_f_kernel<T, NCOLS, ROWS, false, false>, grid, MVF_THREADS, 0, s, a2);
    CUDA_CHECK_LAUNCH();
}

template <int T>
static void launch_type(const matvec_f_args &a, cudaStream_t s) {
    if (a.n_tok == 1) launch_ncols<T, 1>(a, s);
    else if (a.n_tok == 2) launch_ncols<T, 2>(a, s);
    else if (a.n_tok <= 4) launch_ncols<T, 4>(a, s);
    else launch_ncols<T, 8>(a, s);
}

void ft_cuda_matvec_f_multi(const ft_cuda_matvec_params *p, int n_seg, const ft_cuda_matvec_ids_params *ip,
                            cudaStream_t s) {
    FT_CUDA_ASSERT(n_seg >= 0 && n_seg <= FT_CUDA_MATVEC_MAX_SEG && !(n_seg && ip));
    FT_CUDA_ASSERT(p->n_rows >= 1 && p->n_rows <= INT32_MAX && p->n_cols <= INT32_MAX / 2);
    // vector loads assume 16-byte aligned bases (cudaMalloc gives 256)
    FT_CUDA_ASSERT(((uintptr_t)p->w % 16) == 0 && ((uintptr_t)p->x % 16) == 0);
    matvec_f_args a;
    a.w = p->w;
    a.x = (const float *)p->x;
    a.y = p->y;
    a.n_rows = (int)p->n_rows;
    a.n_cols = (int)p->n_cols;
    a.n_tok = p->n_tok;
    a.ids = ip ? ip->ids : NULL;
    a.w_mat = ip ? ip->mat_bytes : 0;
    a.x_div = ip ? ip->x_div : 1;
    a.n_pairs = ip ? ip->n_pairs : 1;
    a.n_seg = n_seg;
    for (int i = 0; i < n_seg; i++) {
        FT_CUDA_ASSERT(p[i].type == p->type && p[i].n_cols == p->n_cols && p[i].x == p->x && p[i].n_tok == p->n_tok);
        FT_CUDA_ASSERT(p[i].n_rows >= 1 && p[i].n_rows <= INT32_MAX && (uintptr_t)p[i].w % 16 == 0 && !p[i].bias);
        a.seg_w[i] = p[i].w;
        a.seg_y[i] = p[i].y;
        a.seg_rows[i] = (int)p[i].n_rows;
    }
    switch (p->type) {
    case FT_TYPE_F32: launch_type<FT_TYPE_F32>(a, s); break;
    case FT_TYPE_F16: launch_type<FT_TYPE_F16>(a, s); break;
    case FT_TYPE_BF16: launch_type<FT_TYPE_BF16>(a, s); break;
    default: FT_CUDA_ASSERT(!"not a float type");
    }
}

void ft_cuda_matvec_f(const ft_cuda_matvec_params *p, const ft_cuda_matvec_ids_params *ip, cudaStream_t s) {
    ft_cuda_matvec_f_multi(p, 0, ip, s);
}
