// hadamard.cu: in-place orthonormal Walsh-Hadamard rotation of chunks of n floats (n a power
// of two), in the CPU op's order: scale by 1/sqrt(n), then butterflies of span 1, 2, 4, ...
// (so the two agree to the bit).
//
// Launch: one CTA of n/2 threads per chunk; the chunk lives in shared memory; thread i does
// butterfly i of every stage.
#include "cuda_common.cuh"
#include "cuda_ops.h"

enum { HAD_MAX = 1024 };

__global__ void hadamard_kernel(float *x, int n, float scale) {
    ft_pdl_begin();
    __shared__ float v[HAD_MAX];
    float *c = x + (int64_t)blockIdx.x * n;
    const int h = n / 2, i = threadIdx.x;
    v[i] = c[i] * scale;
    v[i + h] = c[i + h] * scale;
    __syncthreads();
    for (int len = 1; len < n; len <<= 1) {
        const int j = (i / len) * 2 * len + i % len;
        const float a = v[j], b = v[j + len];
        v[j] = a + b;
        v[j + len] = a - b;
        __syncthreads();
    }
    c[i] = v[i];
    c[i + h] = v[i + h];
}

extern "C" void ft_cuda_hadamard(float *x, int64_t n_chunks, int n, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(n >= 2 && n <= HAD_MAX && (n & (n - 1)) == 0 && n_chunks <= INT32_MAX);
    if (n_chunks == 0) return;
    ft_launch(hadamard_kernel, (unsigned)n_chunks, n / 2, 0, ft_cuda_stream_handle(s), x, n, 1.0f / sqrtf((float)n));
    CUDA_CHECK_LAUNCH();
}
