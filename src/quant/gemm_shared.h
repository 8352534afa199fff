// gemm_shared.h: what prefill's GEMMs (dot_amx.c, gemm_vnni.c, gemm_avx2.c) share (internal to quant/).
//
// Both are exact for q8_0 and q4_K: integer block sums, then the scalar reference's float steps
// in its order, so their outputs equal ft_vec_dot_<type>_ref to the bit, and each other's.
#ifndef FT_QUANT_GEMM_SHARED_H
#define FT_QUANT_GEMM_SHARED_H

#include "quant.h"

#include <stdbool.h>
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
// q4_K's with AVX2 alone (the same bits), and q5_K's, at most 8 tokens: each row decoded once for
// all of them.
void ft_gemm_few_q4_K_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, float *s,
                           size_t ls);
void ft_gemm_few_q5_K(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, float *s,
                      size_t ls);

// The same for q6_K, at most 8 tokens, each row decoded once for all of them. AVX2 and F16C.
// (The 32-element formats have none: per block the exact path's sums cost as much as a vector.)
void ft_gemm_few_q6_K(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc, float *s,
                      size_t ls);

// ---------------------------------------------------------------------------------------------
// The lane-per-token GEMMs (gemm_vnni.c: 16 tokens a vector, gemm_avx2.c: 8). The activations are
// packed once per call, per `lanes` tokens and per 4 codes (a group): lanes * 4 bytes holding each
// token's 4 codes in turn; the weight rows are unpacked a pass of `rows` at a time into one code
// per byte (n a row, in element order) and their scales per (block b, row r) at b * rows + r; rows
// past nr get zero codes and scales.

enum { FT_GEMM_GROUP = 4 };

// Token vectors per block of packing (at least 1) that fit block_bytes.
int ft_gemm_token_block(size_t vector_bytes, size_t block_bytes);

// q8_0 activations, per (token vector, block of 32): 8 groups, then -off * (each token's code sum)
// as int32 (the start of the block's sums, for weight codes that are value + off), then each
// token's scale as float; lanes past nc are zeros.
size_t ft_gemm_q8_0_packed(int lanes);
void ft_gemm_pack_q8_0(uint8_t *dst, const void *y, size_t by, int c0, int nc, int64_t nb, int off, int lanes);

// q8_K activations, per (token vector, super-block of 256): 64 groups, each token's scale as
// float, then `pairs` words of its code sums in int16 pairs, for _mm*_madd_epi16 against a row's
// pairs of mins or scales: 4 words of the sub-block sums of 32 (q4_K, q5_K; 2i, 2i + 1), or 8 of
// the sums of 16 (q6_K).
size_t ft_gemm_q8_K_packed(int pairs, int lanes);
void ft_gemm_pack_q8_K(uint8_t *dst, const void *y, size_t by, int c0, int nc, int64_t nb, int pairs, int lanes);

// The 32-element formats' rows (q8_0, q4_0, q5_0, iq4_nl, mxfp4): each block's 32 codes as bytes,
// the value plus off for q8_0 and the code books (iq4_nl, mxfp4; off 0: signed), the nibble
// (value + 8) for q4_0 and the five bits (value + 16) for q5_0 whatever off; the block's scale as
// float. AVX2 and F16C.
void ft_gemm_rows_32(enum ft_type t, int off, uint8_t *wq, float *wd, const uint8_t *x, size_t bx, int nr,
                     int64_t nb, int rows);

// q4_K and q5_K rows (x5: q5_K, the fifth bit from qh): codes 0..15 or 0..31 and per super-block
// the 8 sub-block scales, the mins in int16 pairs, d and dmin. AVX2 and F16C.
typedef struct {
    int32_t sc[8];
    uint32_t mn[4];
    float d, dmin;
} ft_gemm_q45_K_scales;
void ft_gemm_rows_q45_K(uint8_t *wq, ft_gemm_q45_K_scales *ws, const uint8_t *x, size_t bx, int nr, int64_t nb,
                        bool x5, int rows);

// q6_K rows: codes 0..63 (the value plus 32) and per super-block the 16 int8 scales, the same in
// int16 pairs (2i, 2i + 1), and d. AVX2 and F16C.
typedef struct {
    int32_t sc[16];
    uint32_t sc_pair[8];
    float d;
} ft_gemm_q6_K_scales;
void ft_gemm_rows_q6_K(uint8_t *wq, ft_gemm_q6_K_scales *ws, const uint8_t *x, size_t bx, int nr, int64_t nb,
                       int rows);

// The loop both files run: the call's token vectors, a block of them packed at a time
// (PACK(dst, c0): the vector of tokens from c0, VBYTES bytes), and its weight rows in passes of
// ROWS against each vector: ROWS_FN(wq, ws, x rows, bx, rows in the pass, nb) unpacks a pass
// into the row buffers (BLOCK codes a block; the scales at ws, which the caller declares),
// KERNEL(wq, ws, vector, nb, acc) computes it against one vector into ACC_T acc[ROWS], and
// STORE(acc[r], s, ls, row, first token, valid tokens) writes a row's outputs.
#define FT_GEMM_LOOP(LANES, ROWS, ACC_T, STORE, BLOCK_BYTES, BLOCK, VBYTES, PACK, ROWS_FN, KERNEL)           \
    do {                                                                                                     \
        const int64_t nb = n / (BLOCK);                                                                      \
        const int nv = (nc + (LANES)-1) / (LANES);                                                           \
        const size_t vbytes = (VBYTES);                                                                      \
        const int tb = ft_gemm_token_block(vbytes, (BLOCK_BYTES));                                           \
        const int nvb = nv < tb ? nv : tb;                                                                   \
        uint8_t *p =                                                                                         \
            ft_gemm_scratch((size_t)nvb * vbytes + (size_t)(ROWS)*nb * ((BLOCK) + sizeof(*ws)) + 3 * 64);    \
        uint8_t *act = ft_gemm_carve(&p, (size_t)nvb * vbytes);                                              \
        uint8_t *wq = ft_gemm_carve(&p, (size_t)(ROWS)*nb * (BLOCK));                                        \
        ws = ft_gemm_carve(&p, (size_t)(ROWS)*nb * sizeof(*ws));                                             \
        for (int v0 = 0; v0 < nv; v0 += nvb) {                                                               \
            const int v1 = v0 + nvb < nv ? v0 + nvb : nv;                                                    \
            for (int v = v0; v < v1; v++)                                                                    \
                PACK(act + (size_t)(v - v0) * vbytes, v * (LANES));                                          \
            for (int r0 = 0; r0 < nr; r0 += (ROWS)) {                                                        \
                const int mr = nr - r0 < (ROWS) ? nr - r0 : (ROWS);                                          \
                ROWS_FN(wq, ws, (const uint8_t *)x + (size_t)r0 * bx, bx, mr, nb);                           \
                for (int v = v0; v < v1; v++) {                                                              \
                    ACC_T acc[ROWS];                                                                         \
                    KERNEL(wq, ws, act + (size_t)(v - v0) * vbytes, nb, acc);                                \
                    const int valid = nc - v * (LANES) < (LANES) ? nc - v * (LANES) : (LANES);               \
                    for (int r = 0; r < mr; r++)                                                             \
                        STORE(acc[r], s, ls, r0 + r, v * (LANES), valid);                                    \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    } while (0)

#endif
