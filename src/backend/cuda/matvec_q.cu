// matvec_q.cu: y = x · wᵀ for quantized weights w (n_rows, n_cols) and 1..8 tokens of q8_1
// activations x (the decode and small-batch matmul; llama.cpp calls this MMVQ).
//
// Steps (128-thread CTAs; a group of TPR threads computes ROWS consecutive rows):
//   1. The rows' blocks are split into NPART parts each (vecdot_q.cuh); the n_blocks * NPART
//      parts are dealt to the group's threads round-robin, so neighbouring threads read
//      neighbouring bytes of a row (coalesced).
//   2. Per part: load the code words and scales once, and for each token the q8_1 words they
//      meet (L1-resident: every row reads the same activations); integer dot products (dp4a)
//      per sub-block, scaled into one float accumulator per (token, row).
//   3. Reduce each accumulator over the warp (shuffles), and for TPR = 128 over the 4 warps
//      (shared memory); one thread per (token, row) writes y.
// Geometry (pick_tpr): one token on many rows (n_rows * 32 >= 1024 * SMs, e.g. the output
// matrix): a warp per row, 4 rows per CTA, 2 parts per thread per step; one token on fewer
// rows: the CTA on one row; 2..8 tokens: the CTA on 2 rows. grid = ceil(n_rows / rows per
// CTA). Kernels are instantiated for NCOLS in {1, 2, 4, 8} with the runtime n_tok <= NCOLS; a
// row index past n_rows computes on the last row and is not written. Nothing fused: the
// caller quantizes x once (quantize_q8_1.cu) for all the matmuls that share it.
#include "cuda_common.cuh"

#include "../../quant/quant.h"
#include "expert_extras.cuh"
#include "matvec_q.cuh"
#include "q8_1.cuh"

typedef struct matvec_q_args {
    const uint8_t *w;     // (n_rows, n_blocks) blocks
    const block_q8_1 *x;  // (n_tok, n_cols / 32)
    float *y;             // (n_tok, n_rows)
    int n_rows;
    int n_blocks;         // weight blocks per row
    int n_tok;
    const float *bias;    // (n_rows) added to each output row, or NULL
    float *acc;           // (n_tok, n_rows) each output also added into, or NULL
    // expert mode (ft_cuda_matvec_ids): CTA row blockIdx.y is pair p, on matrix ids[p] (w_mat
    // bytes apart), reading x row p / x_div and writing y row p; n_tok is 1. NULL: off.
    const int32_t *ids;
    size_t w_mat;
    int x_div;
    int n_pairs;
    // several matrices of one input in one launch (ft_cuda_matvec_multi): segment s owns CTAs
    // seg_cta[s] .. seg_cta[s + 1] - 1 and computes seg_w[s] (seg_rows[s] rows) into seg_y[s].
    // n_seg 0: off (w, y, n_rows above)
    int n_seg;
    const uint8_t *seg_w[FT_CUDA_MATVEC_MAX_SEG];
    float *seg_y[FT_CUDA_MATVEC_MAX_SEG];
    const float *seg_b[FT_CUDA_MATVEC_MAX_SEG];
    int seg_rows[FT_CUDA_MATVEC_MAX_SEG];
    int seg_cta[FT_CUDA_MATVEC_MAX_SEG + 1];
} matvec_q_args;

// Output (token c, row) of sum v: plus the bias, into y, and added into the residual a.acc (the
// add op's arithmetic: acc + y).
__device__ __forceinline__ void store_out(const matvec_q_args &a, float *y, const float *bias, int c, int n_rows,
                                          int row, float v) {
    const int64_t i = (int64_t)c * n_rows + row;
    const float o = bias ? v + bias[row] : v;
    y[i] = o;
    if (a.acc) a.acc[i] += o;
}

// A group of TPR threads (32: one warp; 128: the whole CTA) computes ROWS consecutive rows;
// each thread walks the rows' parts with stride TPR, U parts per step with all their loads
// issued before the arithmetic that needs them, and every part for all ROWS rows (so the
// activation words it loads serve each row).
template <int T, int NCOLS, int ROWS, int TPR, int U>
__global__ void __launch_bounds__(MV_THREADS) matvec_q_kernel(const matvec_q_args a) {
    typedef qt<T> Q;
    constexpr int YB = Q::qk / QK8_1; // q8_1 blocks per weight block
    constexpr int GROUPS = MV_THREADS / TPR;
    const uint8_t *w = a.w;
    float *y = a.y;
    const float *bias = a.bias;
    int n_rows = a.n_rows, bx = blockIdx.x;
    if (a.n_seg) {
        int sg = 0;
        while (sg + 1 < a.n_seg && bx >= a.seg_cta[sg + 1]) sg++;
        w = a.seg_w[sg];
        y = a.seg_y[sg];
        bias = a.seg_b[sg];
        n_rows = a.seg_rows[sg];
        bx -= a.seg_cta[sg];
    }
    const int row0 = (bx * GROUPS + threadIdx.x / TPR) * ROWS;
    const int t = threadIdx.x % TPR;
    const size_t row_bytes = (size_t)a.n_blocks * Q::bytes;
    const int64_t x_stride = (int64_t)a.n_blocks * YB; // q8_1 blocks per token
    if (!a.ids) { // a dense matrix (constant): the CTA's rows are requested while the kernel before ends
        const int first = bx * GROUPS * ROWS, end = min(first + GROUPS * ROWS, n_rows);
        if (first < end) ft_prefetch_l2(w + (size_t)first * row_bytes, (size_t)(end - first) * row_bytes, threadIdx.x, MV_THREADS);
    }
    ft_pdl_begin();
    const block_q8_1 *x = a.x;
    if (a.ids) {
        const int pair = blockIdx.y;
        if (a.ids[pair] < 0) { // computed on the CPU (hybrid): zero rows, whose weighted sum adds nothing
            if (threadIdx.x % TPR < ROWS && row0 + (int)(threadIdx.x % TPR) < n_rows)
                y[(int64_t)pair * n_rows + row0 + threadIdx.x % TPR] = 0.0f;
            return;
        }
        w += (size_t)a.ids[pair] * a.w_mat;
        x += (int64_t)(pair / a.x_div) * x_stride;
        y += (int64_t)pair * n_rows;
    }
    // a row past the end computes on the last row and is not written (no early exit: the
    // CTA-wide reduction below needs every thread)
    const uint8_t *wr[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) wr[r] = w + (size_t)min(row0 + r, n_rows - 1) * row_bytes;

    const block_q8_1 *xs[NCOLS];
#pragma unroll
    for (int c = 0; c < NCOLS; c++) xs[c] = x + c * x_stride;
    float acc_rc[ROWS][NCOLS]; // (row, token): part_dot_x's layout
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int c = 0; c < NCOLS; c++) acc_rc[r][c] = 0.0f;
    const int n_items = a.n_blocks * Q::nparts;
    for (int it0 = t; it0 < n_items; it0 += TPR * U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int it = it0 + u * TPR;
            if (it >= n_items) break;
            const int ib = it / Q::nparts, part = it % Q::nparts;
            const uint8_t *wb[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; r++) wb[r] = wr[r] + (size_t)ib * Q::bytes;
            part_dot_x<T, ROWS, NCOLS>(wb, xs, (int64_t)ib * YB, a.n_tok, part, acc_rc);
        }
    }
    float acc[NCOLS][ROWS];
#pragma unroll
    for (int c = 0; c < NCOLS; c++)
#pragma unroll
        for (int r = 0; r < ROWS; r++) acc[c][r] = ft_warp_sum(acc_rc[r][c]);
    if (TPR > FT_WARP) {
        // several warps per group: add up the warps' sums in shared memory
        constexpr int WPG = TPR / FT_WARP;
        __shared__ float red[MV_WARPS][NCOLS][ROWS];
        const int warp = threadIdx.x / FT_WARP, lane = threadIdx.x % FT_WARP;
        if (lane == 0)
#pragma unroll
            for (int c = 0; c < NCOLS; c++)
#pragma unroll
                for (int r = 0; r < ROWS; r++) red[warp][c][r] = acc[c][r];
        __syncthreads();
        if (t < NCOLS * ROWS) {
            const int c = t / ROWS, r = t % ROWS;
            const int w0 = (threadIdx.x / TPR) * WPG;
            float v = 0.0f;
#pragma unroll
            for (int k = 0; k < WPG; k++) v += red[w0 + k][c][r];
            if (c < a.n_tok && row0 + r < n_rows) store_out(a, y, bias, c, n_rows, row0 + r, v);
        }
    } else if (t < NCOLS * ROWS) {
        // lane t writes (token t / ROWS, row t % ROWS); acc[][] is indexed by constants only,
        // so it stays in registers
        float v = acc[0][0];
#pragma unroll
        for (int c = 0; c < NCOLS; c++)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                if (t == c * ROWS + r) v = acc[c][r];
        const int c = t / ROWS, r = t % ROWS;
        if (c < a.n_tok && row0 + r < n_rows) store_out(a, y, bias, c, n_rows, row0 + r, v);
    }
}

// ---------------------------------------------------------------------------------------------
// Fused expert kernels (ft_cuda_matvec_ids with w_up or sum_w): a warp per row, 4 rows per CTA,
// each row's parts dealt to the lanes exactly as matvec_q_kernel<T, 1, 1, 32, 2> deals them,
// so every dot product has the bits of the unfused kernel.
//   GLU: grid (rows / 4, pairs); the warp computes the gate row and the up row of its pair's
//        expert in one pass over the activations and writes act(gate + bias, up + bias)
//        (expert_extras.cuh: SiLU unless the model says otherwise), replacing two matvecs and
//        an element-wise launch; with y_q, a CTA of 16 warps takes 32 rows and writes their
//        q8_1 block too (matvec_q_glu_q_kernel).
//   SUM: grid (rows / 4, tokens), a warp per slot (k warps); each warp computes the 4 rows for
//        its slot's expert (times its scale, plus its bias, where the model has them), and the
//        weighted sum over the slots is taken in slot order (moe_combine's), replacing the down
//        matvec, the combine launch and the (pairs, rows) intermediate.

typedef struct matvec_q_fused_args {
    const uint8_t *w, *w_up;  // (n_matrices, n_rows, n_blocks) blocks each; w_up: GLU only
    size_t w_mat;
    const block_q8_1 *x;      // (pairs / x_div, n_cols / 32)
    const int32_t *ids;       // (pairs)
    const float *sum_w;       // SUM: (pairs) weights
    float *y;                 // GLU: (pairs, n_rows); SUM: (tokens, n_rows)
    block_q8_1 *y_q;          // GLU: y's q8_1 form as well (pairs, n_rows / 32), or NULL
    int n_rows, n_blocks, x_div, k;
    ft_cuda_expert_extras ex; // GLU: the activation and gate/up biases; SUM: down's scale and bias
} matvec_q_fused_args;

// The global expert of a pair, for the extras (the weights' id may be a cache slot).
__device__ __forceinline__ int64_t fused_bias_id(const matvec_q_fused_args &a, int pair) {
    return a.ex.bias_ids ? a.ex.bias_ids[pair] : a.ids[pair];
}

template <int T>
__global__ void __launch_bounds__(MV_THREADS) matvec_q_glu_kernel(const matvec_q_fused_args a) {
    ft_pdl_begin();
    const int row = blockIdx.x * MV_WARPS + threadIdx.x / FT_WARP, lane = threadIdx.x % FT_WARP;
    if (row >= a.n_rows) return; // whole warps: no CTA-wide step follows
    const int pair = blockIdx.y;
    if (a.ids[pair] < 0) return; // computed on the CPU (hybrid); the SUM kernel skips the pair
    const size_t off = (size_t)a.ids[pair] * a.w_mat + (size_t)row * a.n_blocks * qt<T>::bytes;
    const uint8_t *const wr[2] = {a.w + off, a.w_up + off};
    float d[2];
    warp_rows_dot<T, 2>(wr, a.x + (int64_t)(pair / a.x_div) * a.n_blocks * (qt<T>::qk / QK8_1), a.n_blocks, lane, d);
    if (lane == 0) a.y[(int64_t)pair * a.n_rows + row] = ft_expert_glu(a.ex, fused_bias_id(a, pair), a.n_rows, row, d[0], d[1]);
}

// GLU with y_q: CTA (32 consecutive rows, pair) of GLUQ_WARPS = 16 warps; warp w computes rows
// w and w + 16 (gate and up, in one pass: per row the bits of the kernel above), then warp 0
// writes the 32 outputs and their q8_1 block (quantize_q8_1.cu's bits), which the down matvec
// reads: no quantize launch between the two.
template <int T>
__global__ void __launch_bounds__(GLUQ_WARPS * FT_WARP) matvec_q_glu_q_kernel(const matvec_q_fused_args a) {
    ft_pdl_begin();
    __shared__ float hs[QK8_1];
    const int warp = threadIdx.x / FT_WARP, lane = threadIdx.x % FT_WARP;
    const int row0 = blockIdx.x * QK8_1, pair = blockIdx.y;
    if (a.ids[pair] < 0) return; // computed on the CPU (hybrid): the whole CTA, before any barrier
    const size_t base = (size_t)a.ids[pair] * a.w_mat;
    const uint8_t *wr[2 * GLUQ_RPW];
    gluq_rows<T>(a.w, a.w_up, base, row0, warp, a.n_blocks, wr);
    float d[2 * GLUQ_RPW];
    warp_rows_dot<T, 2 * GLUQ_RPW>(wr, a.x + (int64_t)(pair / a.x_div) * a.n_blocks * (qt<T>::qk / QK8_1), a.n_blocks,
                                   lane, d);
    if (lane == 0) {
        const int64_t e = fused_bias_id(a, pair);
#pragma unroll
        for (int i = 0; i < GLUQ_RPW; i++) {
            const int r = warp + GLUQ_WARPS * i;
            hs[r] = ft_expert_glu(a.ex, e, a.n_rows, row0 + r, d[2 * i], d[2 * i + 1]);
        }
    }
    __syncthreads();
    if (warp == 0) {
        const float h = hs[lane];
        a.y[(int64_t)pair * a.n_rows + row0 + lane] = h;
        ft_q8_1_warp_store(h, a.y_q + (int64_t)pair * (a.n_rows / QK8_1) + blockIdx.x, lane);
    }
}

enum { SUM_ROWS = 4, SUM_MAX_K = FT_CUDA_MATVEC_SUM_MAX_K };

// SUM: CTA (SUM_ROWS rows, token) of k warps; warp j computes the rows for the token's slot j
// (the k experts' reads overlap instead of following one another), and thread r then adds
// the slots' products in slot order.
template <int T>
__global__ void __launch_bounds__(SUM_MAX_K * FT_WARP) matvec_q_sum_kernel(const matvec_q_fused_args a) {
    ft_pdl_begin();
    __shared__ float dots[SUM_MAX_K][SUM_ROWS];
    const int row0 = blockIdx.x * SUM_ROWS, j = threadIdx.x / FT_WARP, lane = threadIdx.x % FT_WARP;
    const int tok = blockIdx.y, pair = tok * a.k + j;
    const size_t row_bytes = (size_t)a.n_blocks * qt<T>::bytes;
    const int id = a.ids[pair];
    float d[SUM_ROWS];
    if (id >= 0) {
        const uint8_t *w = a.w + (size_t)id * a.w_mat;
        const uint8_t *wr[SUM_ROWS];
#pragma unroll
        for (int r = 0; r < SUM_ROWS; r++) wr[r] = w + (size_t)min(row0 + r, a.n_rows - 1) * row_bytes;
        warp_rows_dot<T, SUM_ROWS>(wr, a.x + (int64_t)(pair / a.x_div) * a.n_blocks * (qt<T>::qk / QK8_1),
                                   a.n_blocks, lane, d);
    } else { // computed on the CPU (hybrid): its product adds nothing here
#pragma unroll
        for (int r = 0; r < SUM_ROWS; r++) d[r] = 0.0f;
    }
    if (lane == 0 && id >= 0) {
        const int64_t e = fused_bias_id(a, pair);
#pragma unroll
        for (int r = 0; r < SUM_ROWS; r++) d[r] = ft_expert_down(a.ex, e, a.n_rows, min(row0 + r, a.n_rows - 1), d[r]);
    }
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < SUM_ROWS; r++) dots[j][r] = d[r];
    __syncthreads();
    const int r = threadIdx.x;
    if (r < SUM_ROWS && row0 + r < a.n_rows) {
        const float *sw = a.sum_w + (int64_t)tok * a.k;
        float sum = dots[0][r] * sw[0];
        for (int jj = 1; jj < a.k; jj++) sum += dots[jj][r] * sw[jj];
        a.y[(int64_t)tok * a.n_rows + row0 + r] = sum;
    }
}

template <int T>
static void launch_fused(const ft_cuda_matvec_ids_params *ip, cudaStream_t s) {
    typedef qt<T> Q;
    FT_CUDA_ASSERT(ip->n_cols % Q::qk == 0 && ip->n_rows >= 1 && ip->n_rows <= INT32_MAX);
    FT_CUDA_ASSERT((uintptr_t)ip->w % 16 == 0); // as the plain kernel: the bank is 16-byte aligned
    matvec_q_fused_args a;
    a.w = (const uint8_t *)ip->w;
    a.w_up = (const uint8_t *)ip->w_up;
    a.w_mat = ip->mat_bytes;
    a.x = (const block_q8_1 *)ip->x;
    a.ids = ip->ids;
    a.sum_w = ip->sum_w;
    a.y = ip->y;
    a.y_q = (block_q8_1 *)ip->y_q;
    a.n_rows = (int)ip->n_rows;
    a.n_blocks = (int)(ip->n_cols / Q::qk);
    a.x_div = ip->x_div;
    a.k = ip->k;
    a.ex = ip->ex;
    const unsigned gx = (unsigned)((a.n_rows + MV_WARPS - 1) / MV_WARPS);
    if (ip->w_up && ip->y_q) {
        FT_CUDA_ASSERT((uintptr_t)ip->w_up % 16 == 0 && ip->n_rows % QK8_1 == 0);
        ft_launch(matvec_q_glu_q_kernel<T>, dim3((unsigned)(a.n_rows / QK8_1), (unsigned)ip->n_pairs), GLUQ_WARPS * FT_WARP, 0, s, a);
    } else if (ip->w_up) {
        FT_CUDA_ASSERT((uintptr_t)ip->w_up % 16 == 0);
        ft_launch(matvec_q_glu_kernel<T>, dim3(gx, (unsigned)ip->n_pairs), MV_THREADS, 0, s, a);
    } else {
        FT_CUDA_ASSERT(ip->k >= 1 && ip->k <= SUM_MAX_K && ip->n_pairs % ip->k == 0);
        const unsigned gs = (unsigned)((a.n_rows + SUM_ROWS - 1) / SUM_ROWS);
        ft_launch(matvec_q_sum_kernel<T>, dim3(gs, (unsigned)(ip->n_pairs / ip->k)), ip->k * FT_WARP, 0, s, a);
    }
    CUDA_CHECK_LAUNCH();
}

static void matvec_fused(const ft_cuda_matvec_ids_params *ip, cudaStream_t s) {
    switch (ip->type) {
    case FT_TYPE_Q4_0: launch_fused<FT_TYPE_Q4_0>(ip, s); break;
    case FT_TYPE_Q4_1: launch_fused<FT_TYPE_Q4_1>(ip, s); break;
    case FT_TYPE_Q5_0: launch_fused<FT_TYPE_Q5_0>(ip, s); break;
    case FT_TYPE_Q5_1: launch_fused<FT_TYPE_Q5_1>(ip, s); break;
    case FT_TYPE_Q8_0: launch_fused<FT_TYPE_Q8_0>(ip, s); break;
    case FT_TYPE_Q2_K: launch_fused<FT_TYPE_Q2_K>(ip, s); break;
    case FT_TYPE_Q3_K: launch_fused<FT_TYPE_Q3_K>(ip, s); break;
    case FT_TYPE_Q4_K: launch_fused<FT_TYPE_Q4_K>(ip, s); break;
    case FT_TYPE_Q5_K: launch_fused<FT_TYPE_Q5_K>(ip, s); break;
    case FT_TYPE_Q6_K: launch_fused<FT_TYPE_Q6_K>(ip, s); break;
    case FT_TYPE_IQ4_NL: launch_fused<FT_TYPE_IQ4_NL>(ip, s); break;
    case FT_TYPE_IQ4_XS: launch_fused<FT_TYPE_IQ4_XS>(ip, s); break;
    case FT_TYPE_MXFP4: launch_fused<FT_TYPE_MXFP4>(ip, s); break;
    default:
        fprintf(stderr, "ft_cuda_matvec_ids: no fused form for weight type %u\n", ip->type);
        abort();
    }
}

// Threads per row group forced by ft_cuda_matvec_force_tpr (0: automatic), and the SM count.
static int g_tpr_forced = 0, g_sm_count = 0;

extern "C" void ft_cuda_matvec_force_tpr(int tpr) {
    FT_CUDA_ASSERT(tpr == 0 || tpr == FT_WARP || tpr == MV_THREADS);
    g_tpr_forced = tpr;
}

// One token: a warp per row when there are enough rows to give every SM ~1024 threads, else
// the whole CTA per row (short, few rows: more threads in flight). Several tokens: 2 rows per
// 128-thread CTA (faster at every decode shape measured: the activation words a thread loads
// serve both rows).
static int pick_tpr(int n_rows, int n_tok) {
    if (g_tpr_forced) return g_tpr_forced;
    if (!g_sm_count) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, dev));
    }
    if (n_tok > 1) return MV_THREADS;
    return (int64_t)n_rows * FT_WARP >= (int64_t)g_sm_count * 1024 ? FT_WARP : MV_THREADS;
}

template <int T, int NCOLS, int ROWS, int TPR, int U>
static void launch(const matvec_q_args &a0, cudaStream_t s) {
    constexpr int rows_per_cta = MV_THREADS / TPR * ROWS;
    matvec_q_args a = a0;
    const int n_cta = a.n_seg ? ft_seg_ctas(a.n_seg, a.seg_rows, rows_per_cta, a.seg_cta)
                              : (a.n_rows + rows_per_cta - 1) / rows_per_cta;
    const dim3 grid((unsigned)n_cta, a.ids ? (unsigned)a.n_pairs : 1u);
    ft_launch(matvec_q_kernel<T, NCOLS, ROWS, TPR, U>, grid, MV_THREADS, 0, s, a);
    CUDA_CHECK_LAUNCH();
}

template <int T, int NCOLS>
static void launch_ncols(const matvec_q_args &a, cudaStream_t s) {
    constexpr int ROWS = NCOLS == 1 ? 1 : 2;
    // the expert form has n_pairs CTAs per row group already: a warp per row keeps the CTA
    // count (prefill: thousands of pairs) down
    if ((a.ids && !g_tpr_forced) || pick_tpr(a.n_rows, a.n_tok) == FT_WARP) launch<T, NCOLS, ROWS, FT_WARP, 2>(a, s);
    else launch<T, NCOLS, ROWS, MV_THREADS, 1>(a, s);
}

template <int T>
static void launch_type(const ft_cuda_matvec_params *p, const ft_cuda_matvec_ids_params *ip, cudaStream_t s,
                        int n_seg = 0) {
    typedef qt<T> Q;
    FT_CUDA_ASSERT(p->n_cols % Q::qk == 0);
    FT_CUDA_ASSERT(p->n_rows >= 1 && p->n_rows <= INT32_MAX && p->n_cols / Q::qk <= INT32_MAX / Q::nparts);
    FT_CUDA_ASSERT((uintptr_t)p->w % 16 == 0); // 16-byte loads of q4_K / q5_K codes
    matvec_q_args a;
    a.n_seg = n_seg;
    int64_t rows_all = 0;
    for (int i = 0; i < n_seg; i++) {
        FT_CUDA_ASSERT(p[i].type == p->type && p[i].n_cols == p->n_cols && p[i].x == p->x && p[i].n_tok == p->n_tok);
        FT_CUDA_ASSERT(p[i].n_rows >= 1 && (uintptr_t)p[i].w % 16 == 0);
        a.seg_w[i] = (const uint8_t *)p[i].w;
        a.seg_y[i] = p[i].y;
        a.seg_b[i] = p[i].bias;
        a.seg_rows[i] = (int)p[i].n_rows;
        rows_all += p[i].n_rows;
    }
    FT_CUDA_ASSERT(rows_all <= INT32_MAX);
    a.w = (const uint8_t *)p->w;
    a.x = (const block_q8_1 *)p->x;
    a.y = p->y;
    a.bias = p->bias;
    FT_CUDA_ASSERT(!p->acc || (!n_seg && !ip));
    a.acc = p->acc;
    a.n_rows = (int)p->n_rows;
    a.n_blocks = (int)(p->n_cols / Q::qk);
    a.n_tok = p->n_tok;
    a.ids = ip ? ip->ids : NULL;
    a.w_mat = ip ? ip->mat_bytes : 0;
    a.x_div = ip ? ip->x_div : 1;
    a.n_pairs = ip ? ip->n_pairs : 1;
    if (n_seg) a.n_rows = (int)rows_all; // picks the geometry for all the rows together
    if (p->n_tok == 1) launch_ncols<T, 1>(a, s);
    else if (p->n_tok == 2) launch_ncols<T, 2>(a, s);
    else if (p->n_tok <= 4) launch_ncols<T, 4>(a, s);
    else launch_ncols<T, 8>(a, s);
}

extern "C" bool ft_cuda_matvec_wants_q8_1(uint32_t type) {
    switch (type) {
    case FT_TYPE_Q4_0: case FT_TYPE_Q4_1: case FT_TYPE_Q5_0: case FT_TYPE_Q5_1:
    case FT_TYPE_Q8_0: case FT_TYPE_Q2_K: case FT_TYPE_Q3_K: case FT_TYPE_Q4_K:
    case FT_TYPE_Q5_K: case FT_TYPE_Q6_K: case FT_TYPE_IQ4_NL: case FT_TYPE_IQ4_XS:
    case FT_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

extern "C" bool ft_cuda_matvec_supported(uint32_t type) {
    return ft_cuda_matvec_wants_q8_1(type) || type == FT_TYPE_F32 || type == FT_TYPE_F16 ||
           type == FT_TYPE_BF16;
}

static void matvec_any(const ft_cuda_matvec_params *p, const ft_cuda_matvec_ids_params *ip,
                       ft_cuda_stream *stream) {
    FT_CUDA_ASSERT(p->n_tok >= 1 && p->n_tok <= FT_CUDA_MATVEC_MAX_TOK);
    FT_CUDA_ASSERT(p->n_cols > 0);
    const cudaStream_t s = ft_cuda_stream_handle(stream);
    switch (p->type) {
    case FT_TYPE_Q4_0: launch_type<FT_TYPE_Q4_0>(p, ip, s); break;
    case FT_TYPE_Q4_1: launch_type<FT_TYPE_Q4_1>(p, ip, s); break;
    case FT_TYPE_Q5_0: launch_type<FT_TYPE_Q5_0>(p, ip, s); break;
    case FT_TYPE_Q5_1: launch_type<FT_TYPE_Q5_1>(p, ip, s); break;
    case FT_TYPE_Q8_0: launch_type<FT_TYPE_Q8_0>(p, ip, s); break;
    case FT_TYPE_Q2_K: launch_type<FT_TYPE_Q2_K>(p, ip, s); break;
    case FT_TYPE_Q3_K: launch_type<FT_TYPE_Q3_K>(p, ip, s); break;
    case FT_TYPE_Q4_K: launch_type<FT_TYPE_Q4_K>(p, ip, s); break;
    case FT_TYPE_Q5_K: launch_type<FT_TYPE_Q5_K>(p, ip, s); break;
    case FT_TYPE_Q6_K: launch_type<FT_TYPE_Q6_K>(p, ip, s); break;
    case FT_TYPE_IQ4_NL: launch_type<FT_TYPE_IQ4_NL>(p, ip, s); break;
    case FT_TYPE_IQ4_XS: launch_type<FT_TYPE_IQ4_XS>(p, ip, s); break;
    case FT_TYPE_MXFP4: launch_type<FT_TYPE_MXFP4>(p, ip, s); break;
    case FT_TYPE_F32: case FT_TYPE_F16: case FT_TYPE_BF16:
        FT_CUDA_ASSERT(!p->bias && !p->acc);
        ft_cuda_matvec_f(p, ip, s);
        break;
    default:
        fprintf(stderr, "ft_cuda_matvec: unsupported weight type %u\n", p->type);
        abort();
    }
}

extern "C" void ft_cuda_matvec(const ft_cuda_matvec_params *p, ft_cuda_stream *stream) {
    matvec_any(p, NULL, stream);
}

extern "C" void ft_cuda_matvec_multi(const ft_cuda_matvec_params *p, int n, ft_cuda_stream *stream) {
    FT_CUDA_ASSERT(n >= 1 && n <= FT_CUDA_MATVEC_MAX_SEG && ft_cuda_matvec_supported(p->type));
    FT_CUDA_ASSERT(p->n_tok >= 1 && p->n_tok <= FT_CUDA_MATVEC_MAX_TOK && p->n_cols > 0);
    const cudaStream_t s = ft_cuda_stream_handle(stream);
    switch (p->type) {
    case FT_TYPE_F32: case FT_TYPE_F16: case FT_TYPE_BF16: ft_cuda_matvec_f_multi(p, n, NULL, s); break;
    case FT_TYPE_Q4_0: launch_type<FT_TYPE_Q4_0>(p, NULL, s, n); break;
    case FT_TYPE_Q4_1: launch_type<FT_TYPE_Q4_1>(p, NULL, s, n); break;
    case FT_TYPE_Q5_0: launch_type<FT_TYPE_Q5_0>(p, NULL, s, n); break;
    case FT_TYPE_Q5_1: launch_type<FT_TYPE_Q5_1>(p, NULL, s, n); break;
    case FT_TYPE_Q8_0: launch_type<FT_TYPE_Q8_0>(p, NULL, s, n); break;
    case FT_TYPE_Q2_K: launch_type<FT_TYPE_Q2_K>(p, NULL, s, n); break;
    case FT_TYPE_Q3_K: launch_type<FT_TYPE_Q3_K>(p, NULL, s, n); break;
    case FT_TYPE_Q4_K: launch_type<FT_TYPE_Q4_K>(p, NULL, s, n); break;
    case FT_TYPE_Q5_K: launch_type<FT_TYPE_Q5_K>(p, NULL, s, n); break;
    case FT_TYPE_Q6_K: launch_type<FT_TYPE_Q6_K>(p, NULL, s, n); break;
    case FT_TYPE_IQ4_NL: launch_type<FT_TYPE_IQ4_NL>(p, NULL, s, n); break;
    case FT_TYPE_IQ4_XS: launch_type<FT_TYPE_IQ4_XS>(p, NULL, s, n); break;
    case FT_TYPE_MXFP4: launch_type<FT_TYPE_MXFP4>(p, NULL, s, n); break;
    default: FT_CUDA_ASSERT(!"unreachable");
    }
}

extern "C" void ft_cuda_matvec_ids(const ft_cuda_matvec_ids_params *ip, ft_cuda_stream *stream) {
    FT_CUDA_ASSERT(ip->n_pairs >= 1 && ip->n_pairs <= 65535 && ip->x_div >= 1 && ip->ids);
    if (ip->w_up || ip->sum_w) {
        FT_CUDA_ASSERT(!(ip->w_up && ip->sum_w) && ft_cuda_matvec_wants_q8_1(ip->type));
        matvec_fused(ip, ft_cuda_stream_handle(stream));
        return;
    }
    ft_cuda_matvec_params p = {ip->type, ip->w, ip->n_rows, ip->n_cols, ip->x, ip->y, 1, NULL, NULL, 0, NULL};
    matvec_any(&p, ip, stream);
}
