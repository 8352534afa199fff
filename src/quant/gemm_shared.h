// gemm_shared.h: what prefill's GEMMs (dot_amx.c, gemm_vnni.c) share (internal to quant/).
//
// Both are exact for q8_0 and q4_K: integer block sums, then the scalar reference's float steps
// in its order, so their outputs equal ft_vec_dot_<type>_ref to the bit, and each other's.
#ifndef FT_QUANT_GEMM_SHARED_H
#define FT_QUANT_GEMM_SHARED_H

#include <stddef.h>
#include <stdint.h>

// This thread's scratch of at least `bytes` (64-aligned), grown to the largest call and freed
// when the thread exits; valid until the thread's next call.
uint8_t *ft_gemm_scratch(size_t bytes);

// Carves n bytes (64-aligned) from *p.
static inline void *ft_gemm_carve(uint8_t **p, size_t n) {
    void *r = *p;
    *p += (n + 63) & ~(size_t)63;
    return r;
}

// The tile contract (dot.h) for a few tokens: each (weight row, token) on its own, with the
// GEMMs' exact integer sums and the reference's float steps, so the bits are theirs whatever
// the count. q8_0 needs AVX2 and F16C; q4_K also AVX-512BW.
void ft_gemm_few_q8_0(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, float *s,
                      size_t ls);
void ft_gemm_few_q4_K(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, float *s,
                      size_t ls);

#endif
