// delta_rule_chunked.cu: the delta rule of gated DeltaNet over a prefill batch in chunks of
// DN_CHUNK tokens (the chunked form of flash-linear-attention's gated delta rule), run by
// ft_cuda_delta_net after its conv and L2 norm in place of the token loop (delta_net.cu). The
// same result up to float rounding, but a chunk's tokens become small matrix products and only
// the chunks follow one another, where the token loop walks every token in turn.
//
// With S a V head's state (Dk x Dv; the stored matrix is Sᵀ), S_0 its value at a chunk's start,
// and per token i of the chunk its key k_i, query q_i, value v_i, write strength β_i and
// cumulative log decay G_i = g_0 + ... + g_i within the chunk:
//   A  (C x C, strictly lower)   A_im = β_i exp(G_i - G_m) k_i·k_m
//   U = (I + A)⁻¹ (β ⊙ V)        W = (I + A)⁻¹ (β exp(G) ⊙ K)         (forward substitution)
//   Δ = U - W S_0                (row i: the δ_i the token loop adds as S += k_i δ_iᵀ)
//   O = scale (exp(G) ⊙ Q) S_0 + scale (M ⊙ Q Kᵀ) Δ,   M_im = exp(G_i - G_m) for m <= i, else 0
//   S = exp(G_last) S_0 + (exp(G_last - G) ⊙ K)ᵀ Δ
// Tokens past the batch's end pad the last chunk as zeros with no decay, so they add nothing.
//
// Two kernels:
//   dn_chunk_prep: a CTA per (chunk, V head), every chunk at once: A, then U and W by forward
//     substitution (a thread per column, the column in registers), and the factors the scan
//     needs (scale exp(G) ⊙ Q, the masked Q Kᵀ, exp(G_last - G) ⊙ K transposed, exp(G_last)),
//     into the workspace;
//   dn_chunk_scan: a CTA per (V head, DN_SCAN_COLS columns of S; the columns of S evolve
//     independently), the chunks in order with its columns of S in shared memory: Δ, then O,
//     then S.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "delta_rule_chunked.cuh"

enum { DN_CK_THREADS = 256, DN_SCAN_COLS = 16 };

// Floats of one (chunk, head) block of the workspace: U, W, scaled Q (each C x D), K
// transposed (D x C), Q Kᵀ masked (C x C), exp(G_last) (padded to 4).
static __host__ __device__ constexpr size_t dn_chunk_block(int D) {
    return 4 * (size_t)DN_CHUNK * D + (size_t)DN_CHUNK * DN_CHUNK + 4;
}

size_t dn_chunk_ws_floats(int n_tok, int n_v_heads, int head_dim) {
    const size_t n_chunks = (size_t)(n_tok + DN_CHUNK - 1) / DN_CHUNK;
    return n_chunks * (size_t)n_v_heads * dn_chunk_block(head_dim);
}

bool dn_chunked_fits(int n_tok, int n_v_heads, int head_dim, size_t ws_floats) {
    return n_tok >= DN_CHUNK && (head_dim == 64 || head_dim == 128) &&
           dn_chunk_ws_floats(n_tok, n_v_heads, head_dim) <= ws_floats;
}

__device__ __forceinline__ float dn_ck_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

__device__ __forceinline__ float dot4(float4 a, float4 b) {
    return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, a.w * b.w)));
}

// acc += s * b, lane by lane
__device__ __forceinline__ void axpy4(float4 &acc, float s, float4 b) {
    acc.x = fmaf(s, b.x, acc.x);
    acc.y = fmaf(s, b.y, acc.y);
    acc.z = fmaf(s, b.z, acc.z);
    acc.w = fmaf(s, b.w, acc.w);
}

// Shared memory of dn_chunk_prep: K and Q rows (stride D + 4, so rows 16 apart sit in other
// banks), A (stride C + 1), the cumulative decays, write strengths and two exp tables.
template <int D> static constexpr size_t prep_smem() {
    return (2 * (size_t)DN_CHUNK * (D + 4) + (size_t)DN_CHUNK * (DN_CHUNK + 1) + 4 * DN_CHUNK) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(DN_CK_THREADS) dn_chunk_prep_kernel(ft_cuda_delta_params p, int C, float *ws) {
    ft_pdl_begin();
    constexpr int CH = DN_CHUNK, LD = D + 4, LA = CH + 1;
    extern __shared__ __align__(16) float sm[];
    float *Ks = sm, *Qs = Ks + CH * LD, *As = Qs + CH * LD, *G = As + CH * LA, *B = G + CH;
    float *EG = B + CH, *ED = EG + CH; // exp(G_i), exp(G_last - G_i)
    const int tid = threadIdx.x, c = blockIdx.x, h = blockIdx.y, H = p.n_v_heads, Kw = p.n_k_heads * D;
    const int hk = p.k_grouped ? h / (H / p.n_k_heads) : h % p.n_k_heads;
    const int t0 = c * CH, n = min(CH, p.n_tok - t0);
    float *U = ws + (size_t)(c * H + h) * dn_chunk_block(D), *Wm = U + CH * D, *Qp = Wm + CH * D;
    float *Kt = Qp + CH * D, *Aqk = Kt + D * CH, *gam = Aqk + CH * CH;

    // 1. the chunk's q and k rows (zeros past its tokens), decays and write strengths
    for (int e = tid; e < CH * D / 4; e += DN_CK_THREADS) {
        const int i = e / (D / 4), d = e % (D / 4) * 4;
        float4 q4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), k4 = q4;
        if (i < n) {
            const float *row = p.qkv + (size_t)(t0 + i) * C + hk * D + d;
            q4 = *(const float4 *)row;
            k4 = *(const float4 *)(row + Kw);
        }
        *(float4 *)&Qs[i * LD + d] = q4;
        *(float4 *)&Ks[i * LD + d] = k4;
    }
    if (tid < CH) {
        float g = 0.0f, b = 0.0f;
        if (tid < n) {
            const size_t at = (size_t)(t0 + tid) * H + h;
            g = dn_ck_softplus(p.alpha[at] + p.dt[h]) * p.a[h];
            b = 1.0f / (1.0f + expf(-p.beta[at]));
        }
        G[tid] = g;
        B[tid] = b;
    }
    __syncthreads();
    if (tid < FT_WARP) { // the running sum of the decays: two per lane, then a scan over lanes
        const float a0 = G[2 * tid], pair = a0 + G[2 * tid + 1];
        float s = pair;
#pragma unroll
        for (int o = 1; o < FT_WARP; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, s, o);
            if (tid >= o) s += y;
        }
        G[2 * tid] = s - pair + a0;
        G[2 * tid + 1] = s;
    }
    __syncthreads();
    if (tid < CH) {
        EG[tid] = expf(G[tid]);
        ED[tid] = expf(G[CH - 1] - G[tid]);
    }

    // 2. A into shared memory and the masked Q Kᵀ into the workspace: thread (ti, tm) makes
    //    rows ti + 16a and columns tm + 16b (a, b < 4) of both
    {
        const int ti = tid / 16, tm = tid % 16;
        float kk[4][4] = {}, qk[4][4] = {};
        for (int d = 0; d < D; d += 4) {
            float4 ki[4], qi[4], km[4];
#pragma unroll
            for (int a = 0; a < 4; a++) {
                ki[a] = *(const float4 *)&Ks[(ti + 16 * a) * LD + d];
                qi[a] = *(const float4 *)&Qs[(ti + 16 * a) * LD + d];
                km[a] = *(const float4 *)&Ks[(tm + 16 * a) * LD + d];
            }
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    kk[a][b] += dot4(ki[a], km[b]);
                    qk[a][b] += dot4(qi[a], km[b]);
                }
        }
        const float scale = 1.0f / sqrtf((float)D);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int i = ti + 16 * a, m = tm + 16 * b;
                const float dec = m <= i ? expf(G[i] - G[m]) : 0.0f;
                As[i * LA + m] = m < i ? B[i] * dec * kk[a][b] : 0.0f;
                Aqk[i * CH + m] = scale * dec * qk[a][b];
            }
        __syncthreads();

        // the scan's factors of Q and K
        for (int e = tid; e < CH * D; e += DN_CK_THREADS) {
            const int i = e / D, d = e % D;
            Qp[e] = scale * EG[i] * Qs[i * LD + d];
        }
        for (int e = tid; e < D * CH; e += DN_CK_THREADS) {
            const int d = e / CH, j = e % CH;
            Kt[e] = ED[j] * Ks[j * LD + d];
        }
        if (tid == 0) gam[0] = EG[CH - 1];
    }

    // 3. (I + A) X = R by forward substitution, a thread per column of R: β v (threads < D,
    //    into U) or β exp(G) k (the next D threads, into W)
    if (tid < 2 * D) {
        const int j = tid % D;
        const bool is_v = tid < D;
        const float *vcol = p.qkv + (size_t)t0 * C + 2 * Kw + h * D + j;
        float x[CH];
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const float r = is_v ? (i < n ? vcol[(size_t)i * C] : 0.0f) : EG[i] * Ks[i * LD + j];
            x[i] = B[i] * r;
        }
#pragma unroll
        for (int i = 1; i < CH; i++) {
            float s = x[i];
#pragma unroll
            for (int m = 0; m < i; m++) s = fmaf(-As[i * LA + m], x[m], s);
            x[i] = s;
        }
        float *dst = is_v ? U : Wm;
#pragma unroll
        for (int i = 0; i < CH; i++) dst[i * D + j] = x[i];
    }
}

// acc += sign (row · M[:, c .. c + 3]) over the D rows of M (row: D floats in global memory, M in
// shared memory)
template <int D, int NC>
__device__ __forceinline__ void row_times_cols(float4 &acc, float sign, const float *row, const float (*M)[NC], int c) {
#pragma unroll 8
    for (int d = 0; d < D; d += 4) {
        const float4 r4 = *(const float4 *)&row[d];
        axpy4(acc, sign * r4.x, *(const float4 *)&M[d][c]);
        axpy4(acc, sign * r4.y, *(const float4 *)&M[d + 1][c]);
        axpy4(acc, sign * r4.z, *(const float4 *)&M[d + 2][c]);
        axpy4(acc, sign * r4.w, *(const float4 *)&M[d + 3][c]);
    }
}

template <int D>
__global__ void __launch_bounds__(DN_CK_THREADS) dn_chunk_scan_kernel(ft_cuda_delta_params p, const float *ws,
                                                                      int n_chunks) {
    ft_pdl_begin();
    constexpr int CH = DN_CHUNK, NC = DN_SCAN_COLS;
    __shared__ __align__(16) float S[D][NC];   // columns r0.. of S: row d holds k-dim d
    __shared__ __align__(16) float Dl[CH][NC]; // the chunk's Δ, the same columns
    const int tid = threadIdx.x, h = blockIdx.y, r0 = blockIdx.x * NC, H = p.n_v_heads;
    float *state = p.state + (size_t)h * D * D; // row r: column r of S
    const bool fresh = p.pos0 + (p.pos_dev ? *p.pos_dev : 0) == 0;
    for (int e = tid; e < D * NC; e += DN_CK_THREADS) {
        const int c = e / D, d = e % D;
        S[d][c] = fresh ? 0.0f : state[(size_t)(r0 + c) * D + d];
    }
    __syncthreads();
    for (int ch = 0; ch < n_chunks; ch++) {
        const float *U = ws + (size_t)(ch * H + h) * dn_chunk_block(D), *Wm = U + CH * D, *Qp = Wm + CH * D;
        const float *Kt = Qp + CH * D, *Aqk = Kt + D * CH, gam = Aqk[CH * CH];
        const int t0 = ch * CH, n = min(CH, p.n_tok - t0);
        // Δ = U - W S: a thread per (row, 4 columns)
        for (int e = tid; e < CH * NC / 4; e += DN_CK_THREADS) {
            const int i = e / (NC / 4), c = e % (NC / 4) * 4;
            float4 acc = *(const float4 *)&U[i * D + r0 + c];
            row_times_cols<D, NC>(acc, -1.0f, Wm + i * D, S, c);
            *(float4 *)&Dl[i][c] = acc;
        }
        __syncthreads();
        // O = Qp S + (masked Q Kᵀ) Δ; the padding's rows are not written
        for (int e = tid; e < CH * NC / 4; e += DN_CK_THREADS) {
            const int i = e / (NC / 4), c = e % (NC / 4) * 4;
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            const float *a = Aqk + i * CH;
            row_times_cols<D, NC>(acc, 1.0f, Qp + i * D, S, c);
            for (int m = 0; m <= i; m += 4) { // zeros past the diagonal
                const float4 a4 = *(const float4 *)&a[m];
                axpy4(acc, a4.x, *(const float4 *)&Dl[m][c]);
                axpy4(acc, a4.y, *(const float4 *)&Dl[m + 1][c]);
                axpy4(acc, a4.z, *(const float4 *)&Dl[m + 2][c]);
                axpy4(acc, a4.w, *(const float4 *)&Dl[m + 3][c]);
            }
            if (i < n) *(float4 *)&p.out[(size_t)(t0 + i) * H * D + (size_t)h * D + r0 + c] = acc;
        }
        __syncthreads(); // O read S_0
        // S = exp(G_last) S + Ktᵀ Δ: a thread per (k-dim row, 4 columns), each its own
        for (int e = tid; e < D * NC / 4; e += DN_CK_THREADS) {
            const int d = e / (NC / 4), c = e % (NC / 4) * 4;
            float4 acc = *(const float4 *)&S[d][c];
            acc.x *= gam, acc.y *= gam, acc.z *= gam, acc.w *= gam;
            const float *k = Kt + d * CH;
#pragma unroll 4
            for (int j = 0; j < CH; j += 4) {
                const float4 k4 = *(const float4 *)&k[j];
                axpy4(acc, k4.x, *(const float4 *)&Dl[j][c]);
                axpy4(acc, k4.y, *(const float4 *)&Dl[j + 1][c]);
                axpy4(acc, k4.z, *(const float4 *)&Dl[j + 2][c]);
                axpy4(acc, k4.w, *(const float4 *)&Dl[j + 3][c]);
            }
            *(float4 *)&S[d][c] = acc;
        }
        __syncthreads();
    }
    for (int e = tid; e < D * NC; e += DN_CK_THREADS) {
        const int c = e / D, d = e % D;
        state[(size_t)(r0 + c) * D + d] = S[d][c];
    }
}

template <int D> static void launch(const ft_cuda_delta_params &p, int C, cudaStream_t st) {
    const int n_chunks = (p.n_tok + DN_CHUNK - 1) / DN_CHUNK;
    ft_launch(dn_chunk_prep_kernel<D>, dim3(n_chunks, p.n_v_heads), DN_CK_THREADS, prep_smem<D>(), st, p, C,
              p.chunk_ws);
    CUDA_CHECK_LAUNCH();
    ft_launch(dn_chunk_scan_kernel<D>, dim3(D / DN_SCAN_COLS, p.n_v_heads), DN_CK_THREADS, 0, st, p,
              (const float *)p.chunk_ws, n_chunks);
    CUDA_CHECK_LAUNCH();
}

void dn_chunked_init(void) {
    CUDA_CHECK(cudaFuncSetAttribute(dn_chunk_prep_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)prep_smem<64>()));
    CUDA_CHECK(cudaFuncSetAttribute(dn_chunk_prep_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)prep_smem<128>()));
}

void dn_chunked_rule(const ft_cuda_delta_params &p, int C, cudaStream_t st) {
    FT_CUDA_ASSERT(dn_chunked_fits(p.n_tok, p.n_v_heads, p.head_dim, p.chunk_ws_floats) && C % 4 == 0 &&
                   (uintptr_t)p.qkv % 16 == 0 && (uintptr_t)p.out % 16 == 0 && (uintptr_t)p.chunk_ws % 16 == 0);
    if (p.head_dim == 64) launch<64>(p, C, st);
    else launch<128>(p, C, st);
}
