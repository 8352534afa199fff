// mma.cuh: the warp-level tensor-core instructions (sm_80 and later, so one kernel serves
// sm_80..sm_120) and the shared-memory copies the attention kernels build on.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .f16; lane = 4 g + t; each
// 32-bit register holds two f16, the lower index in the low half):
//   A (16 x 16, row): a0 = row g, k 2t, 2t+1; a1 = row g+8, k 2t..; a2 = row g, k 2t+8, 2t+9;
//                     a3 = row g+8, k 2t+8..
//   B (16 x 8, col):  b0 = k 2t, 2t+1 of column g; b1 = k 2t+8, 2t+9 of column g
//   C (16 x 8, f32):  c0, c1 = row g, columns 2t, 2t+1; c2, c3 = row g+8, same columns
// m16n8k32 with .s8: A a0 = row g, k 4t..4t+3; a1 = row g+8, k 4t..; a2 = row g, k 16+4t..;
// a3 = row g+8, k 16+4t..; B b0 = k 4t..4t+3 of column g, b1 = k 16+4t.. of column g; C as
// above (s32); bytes in k order from the low one.
#ifndef FT_CUDA_MMA_CUH
#define FT_CUDA_MMA_CUH

#include <cuda_fp16.h>
#include <stdint.h>

// c += a b, f16 inputs, f32 sums.
__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c = a b, s8 inputs, s32 sums.
__device__ __forceinline__ void mma_s8(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    c[0] = c[1] = c[2] = c[3] = 0;
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 matrices of 16-bit elements from shared memory: lanes 8i .. 8i + 7 give the row
// addresses of matrix i, whose fragment lands in r[i] (lane 4 g + t: row g, elements 2t and
// 2t + 1). _t transposes: lane 4 g + t gets rows 2t and 2t + 1 of column g.
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

// Two floats as f16 in one word, lo in the low half.
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
    return (uint32_t)__half_as_ushort(__float2half_rn(lo)) |
           ((uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16);
}

// Asynchronous copies global -> shared: 16 bytes (through L2 only) or 4.
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// The max of x over the 4 lanes holding one row of an MMA C fragment (lanes 4g .. 4g + 3).
__device__ __forceinline__ float mma_row_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// The sum of x over those 4 lanes.
__device__ __forceinline__ float mma_row_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

#endif
