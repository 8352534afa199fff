// gemm_avx2.c: prefill GEMMs on 256-bit vectors for CPUs without AVX-512 VNNI (see dot.h): q8_0,
// q4_0, q5_0, iq4_nl, mxfp4, q4_K, q5_K, q6_K and bf16 with AVX2, and the integer formats with
// AVX-VNNI where the CPU has it (Intel's cores since Alder Lake, AMD's since Zen 5).
//
// Entered only through ft_quant_ops_find() after ops.c has seen the CPU support AVX2, FMA and
// F16C (and AVX-VNNI for the _avxvnni entries). As gemm_vnni.c: the integer sums are exact and
// the float steps are the scalar reference's in its order, so every integer-format output equals
// ft_vec_dot_<type>_ref to the bit (and the VNNI and AMX GEMMs'); bf16 sums in float, within
// n * 2^-24 * sum |x_i y_i|.
//
// Layout (gemm_vnni.c's, at half the width): the 8 int32 lanes of a vector are 8 tokens. Per
// call the activations are packed once, per 8 tokens and per 4 codes ("group"): 32 bytes holding
// each token's 4 codes in turn. A weight row's 4 unsigned codes are broadcast against them:
//   - AVX-VNNI: VPDPBUSD adds the 4 products to each token's int32 sum;
//   - AVX2: VPMADDUBSW multiplies and sums pairs in int16, VPMADDWD widens (also multiplying by
//     a K-quant's sub-block scale). The pair sums saturate only past 32,767, so small unsigned
//     codes (q4_0, q5_0, mxfp4 with an offset; the K-quants) sum several groups in int16 before
//     widening, as many as 2 * 128 * max code allows, and signed codes (q8_0, iq4_nl) take the
//     sign trick instead of an offset: |w| times a with w's sign, widened every group.
// Thread-safe: each thread packs into its own scratch.
#include "dot.h"
#include "gemm_shared.h"
#include "quant.h"
#include "codec.h"
#include "tables.h"
#include "fp16.h"
#include "../util/util.h"

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

#define AVX2_GEMM __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) AVX2_GEMM

// LANES tokens per vector; ROWS weight rows per pass over a vector's packed codes (their sums
// stay in registers: 16 ymm hold ROWS x (int16 sum, int32 sum, float sum) and the operands); a
// block of token vectors is packed to at most TOKEN_BLOCK_BYTES, so the rows' passes over them
// hit the L2.
enum { LANES = 8, ROWS = 4, GROUP = 4, GROUP_BYTES = LANES * GROUP, TOKEN_BLOCK_BYTES = 256 << 10 };

// AVX-VNNI is CPUID leaf 7, sub-leaf 1, EAX bit 4 (the OS saving the YMM state comes with AVX2's
// check in ops.c).
bool ft_gemm_avxvnni_supported(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}

// The 4 codes at p, in every lane.
INLINE __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof(v));
    return _mm256_set1_epi32(v);
}

// Writes lanes [0, valid) of v (tokens c0.., one weight row r) to s[(c0 + l) * ls + r].
INLINE void store_lanes(__m256 v, float *s, size_t ls, int r, int c0, int valid) {
    float t[LANES];
    _mm256_storeu_ps(t, v);
    for (int l = 0; l < valid; l++)
        s[(size_t)(c0 + l) * ls + (size_t)r] = t[l];
}

static int token_block(size_t vector_bytes) {
    size_t v = TOKEN_BLOCK_BYTES / vector_bytes;
    return v < 1 ? 1 : (int)v;
}

// A pass's row r past the call's rows: zero codes and zero scales.
static void zero_row(uint8_t *q, size_t row_bytes, void *scales, size_t scale_bytes, int r, int64_t nb) {
    memset(q, 0, row_bytes);
    for (int64_t b = 0; b < nb; b++)
        memset((uint8_t *)scales + (size_t)(b * ROWS + r) * scale_bytes, 0, scale_bytes);
}

// gemm_vnni.c's loop at this file's widths: the call's token vectors, a block of them packed at
// a time (PACK(dst, c0)), and its weight rows in passes of ROWS (ROWS_FN unpacks a pass into
// the row buffers, BLOCK codes a block, the scales at ws), KERNEL computing a pass against one
// vector.
#define GEMM_LOOP(BLOCK, VBYTES, PACK, ROWS_FN, KERNEL)                                                      \
    do {                                                                                                     \
        const int64_t nb = n / (BLOCK);                                                                      \
        const int nv = (nc + LANES - 1) / LANES;                                                             \
        const size_t vbytes = (VBYTES);                                                                      \
        const int tb = token_block(vbytes);                                                                  \
        const int nvb = nv < tb ? nv : tb;                                                                   \
        uint8_t *p =                                                                                         \
            ft_gemm_scratch((size_t)nvb * vbytes + (size_t)ROWS * nb * ((BLOCK) + sizeof(*ws)) + 3 * 64);    \
        uint8_t *act = ft_gemm_carve(&p, (size_t)nvb * vbytes);                                              \
        uint8_t *wq = ft_gemm_carve(&p, (size_t)ROWS * nb * (BLOCK));                                        \
        ws = ft_gemm_carve(&p, (size_t)ROWS * nb * sizeof(*ws));                                             \
        for (int v0 = 0; v0 < nv; v0 += nvb) {                                                               \
            const int v1 = v0 + nvb < nv ? v0 + nvb : nv;                                                    \
            for (int v = v0; v < v1; v++)                                                                    \
                PACK(act + (size_t)(v - v0) * vbytes, v * LANES);                                            \
            for (int r0 = 0; r0 < nr; r0 += ROWS) {                                                          \
                const int mr = nr - r0 < ROWS ? nr - r0 : ROWS;                                              \
                ROWS_FN(wq, ws, (const uint8_t *)x + (size_t)r0 * bx, bx, mr, nb);                           \
                for (int v = v0; v < v1; v++) {                                                              \
                    __m256 acc[ROWS];                                                                        \
                    KERNEL(wq, ws, act + (size_t)(v - v0) * vbytes, nb, acc);                                \
                    const int valid = nc - v * LANES < LANES ? nc - v * LANES : LANES;                       \
                    for (int r = 0; r < mr; r++)                                                             \
                        store_lanes(acc[r], s, ls, r0 + r, v * LANES, valid);                                \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    } while (0)

// VPDPBUSD (AVX-VNNI): acc += the 4 products of w's unsigned bytes and a's signed bytes, per int32
// lane. As inline assembly, so that one always-inlined kernel body serves both flavours (the
// intrinsic needs the target on every function it is inlined through); the dispatch checks the
// CPU.
INLINE __m256i dpbusd(__m256i acc, __m256i w, __m256i a) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(w), "x"(a));
    return acc;
}

// The exact sums over `groups` groups from g0 of ROWS rows' unsigned codes (at wq + r * row + at,
// 4 a group) times a vector's packed groups at p, added to sum[r] times scale[r * scale_stride]
// (no scale: times 1). AVX2 (vnni false) sums `run` groups at a time in int16, which the codes'
// bound must allow.
INLINE void unsigned_sums(const uint8_t *wq, size_t row, size_t at, const uint8_t *p, int g0, int groups,
                          int run, const int32_t *scale, size_t scale_stride, bool vnni, __m256i sum[ROWS]) {
    if (vnni) {
        __m256i s32[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            s32[r] = scale ? _mm256_setzero_si256() : sum[r];
#pragma GCC unroll 1
        for (int g = g0; g < g0 + groups; g++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(p + g * GROUP_BYTES));
#pragma GCC unroll 4
            for (int r = 0; r < ROWS; r++)
                s32[r] = dpbusd(s32[r], bcast4(wq + r * row + at + g * GROUP), a);
        }
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            sum[r] = scale ? _mm256_add_epi32(sum[r], _mm256_mullo_epi32(s32[r], _mm256_set1_epi32(scale[r * scale_stride])))
                           : s32[r];
        return;
    }
    __m256i mul[ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++)
        mul[r] = _mm256_set1_epi16(scale ? (int16_t)scale[r * scale_stride] : 1);
    for (int g1 = g0; g1 < g0 + groups; g1 += run) {
        __m256i s16[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            s16[r] = _mm256_setzero_si256();
        // one group a pass, each row's sum a chain: unrolled, GCC reassociates the adds into
        // trees that spill
#pragma GCC unroll 1
        for (int g = g1; g < g1 + run; g++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(p + g * GROUP_BYTES));
#pragma GCC unroll 4
            for (int r = 0; r < ROWS; r++)
                s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(bcast4(wq + r * row + at + g * GROUP), a));
        }
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(s16[r], mul[r]));
    }
}

// ---------------------------------------------------------------------------------------------
// q8_0, q4_0, q5_0, iq4_nl, mxfp4 x q8_0
//
// Packed per (token vector, block): 8 groups of 32 bytes, then -off * (each token's code sum)
// as int32 (the start of the block's sums: the weights' codes are value + off), then each
// token's scale as float. The weight rows: 32 codes a block (unsigned with an offset, or signed
// for the sign trick) and the block's scale as float; per block the reference's
// sum += (dx * dy) * float(isum) (the products commute exactly).

enum { Q8_GROUPS = QK8_0 / GROUP, Q8_PACKED = Q8_GROUPS * GROUP_BYTES + 2 * LANES * 4 };

static AVX2_GEMM void pack_q8_0(uint8_t *dst, const void *y, size_t by, int c0, int nc, int64_t nb, int off) {
    if (c0 + LANES > nc) memset(dst, 0, (size_t)nb * Q8_PACKED); // lanes past the last token
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + (size_t)b * Q8_PACKED;
        int32_t *start = (int32_t *)(p + Q8_GROUPS * GROUP_BYTES);
        float *d = (float *)(start + LANES);
        for (int l = 0; l < LANES && c0 + l < nc; l++) {
            const block_q8_0 *yb = (const block_q8_0 *)((const uint8_t *)y + (size_t)(c0 + l) * by) + b;
            int sum = 0;
            for (int k = 0; k < QK8_0; k++)
                sum += yb->qs[k];
            for (int g = 0; g < Q8_GROUPS; g++)
                memcpy(p + g * GROUP_BYTES + l * GROUP, yb->qs + g * GROUP, GROUP);
            start[l] = -off * sum;
            d[l] = ft_fp16_to_fp32(yb->d);
        }
    }
}

// Element j of a 32-element nibble block: qs[j] & 15 for j < 16, qs[j - 16] >> 4 after.
INLINE __m256i nibbles32(const uint8_t qs[16]) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m15 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m15), _mm_and_si128(v, m15));
}

// q5_0's codes: the nibble and, from bit j of qh, bit 4 of byte j.
INLINE __m256i q5_0_codes(const block_q5_0 *b) {
    uint32_t h;
    memcpy(&h, b->qh, sizeof(h));
    const __m256i bits = _mm256_set1_epi32((int)h);
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i hb = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(bits, pick), bit), bit);
    return _mm256_or_si256(nibbles32(b->qs), _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
}

// A code book (16 int8 values) plus off, as a lookup table for _mm256_shuffle_epi8.
INLINE __m256i book(const int8_t values[16], int off) {
    const __m128i b = _mm_add_epi8(_mm_loadu_si128((const __m128i *)values), _mm_set1_epi8((char)off));
    return _mm256_broadcastsi128_si256(b);
}

#define ROWS_32(NAME, BLOCK_T, CODES, SCALE)                                                                \
    static AVX2_GEMM void NAME(uint8_t *wq, float *wd, const uint8_t *x, size_t bx, int nr, int64_t nb) {   \
        for (int r = 0; r < ROWS; r++) {                                                                    \
            uint8_t *q = wq + (size_t)r * nb * 32;                                                          \
            if (r >= nr) {                                                                                  \
                zero_row(q, (size_t)nb * 32, wd, sizeof(wd[0]), r, nb);                                     \
                continue;                                                                                   \
            }                                                                                               \
            const BLOCK_T *xb = (const BLOCK_T *)(x + (size_t)r * bx);                                      \
            for (int64_t b = 0; b < nb; b++) {                                                              \
                _mm256_storeu_si256((__m256i *)(q + b * 32), CODES);                                        \
                wd[b * ROWS + r] = SCALE;                                                                   \
            }                                                                                               \
        }                                                                                                   \
    }

// signed codes (AVX2's sign trick): q8_0's own, iq4_nl's book; the same plus 128 (AVX-VNNI)
ROWS_32(rows_q8_0, block_q8_0, _mm256_loadu_si256((const __m256i *)xb[b].qs), _cvtsh_ss(xb[b].d))
ROWS_32(rows_iq4_nl, block_iq4_nl, _mm256_shuffle_epi8(book(ft_kvalues_iq4nl, 0), nibbles32(xb[b].qs)),
        _cvtsh_ss(xb[b].d))
ROWS_32(rows_q8_0_u, block_q8_0,
        _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)xb[b].qs), _mm256_set1_epi8((char)0x80)),
        _cvtsh_ss(xb[b].d))
ROWS_32(rows_iq4_nl_u, block_iq4_nl, _mm256_shuffle_epi8(book(ft_kvalues_iq4nl, 128), nibbles32(xb[b].qs)),
        _cvtsh_ss(xb[b].d))
// unsigned codes: q4_0's nibble (offset 8), q5_0's five bits (16), mxfp4's book plus 12 (0..24)
ROWS_32(rows_q4_0, block_q4_0, nibbles32(xb[b].qs), _cvtsh_ss(xb[b].d))
ROWS_32(rows_q5_0, block_q5_0, q5_0_codes(&xb[b]), _cvtsh_ss(xb[b].d))
ROWS_32(rows_mxfp4, block_mxfp4, _mm256_shuffle_epi8(book(ft_kvalues_mxfp4, 12), nibbles32(xb[b].qs)),
        ft_e8m0_to_fp32_half(xb[b].e))
#undef ROWS_32

// The reference's float step of a 32-element block for ROWS rows: acc += (dx * dy) * float(isum).
INLINE void block_step(const float *wd, int64_t b, __m256 dy, const __m256i isum[ROWS], __m256 acc[ROWS]) {
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++) {
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(wd[b * ROWS + r]), dy);
        acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[r])));
    }
}

// Signed codes: per group |w| times a with w's sign, widened every group.
INLINE void kernel_signed(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb, __m256 acc[ROWS]) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm256_setzero_ps();
    const size_t row = (size_t)nb * QK8_0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * Q8_PACKED;
        __m256i sum[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            sum[r] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int g = 0; g < Q8_GROUPS; g++) { // one group a pass, as unsigned_sums
            const __m256i a = _mm256_loadu_si256((const __m256i *)(p + g * GROUP_BYTES));
#pragma GCC unroll 4
            for (int r = 0; r < ROWS; r++) {
                const __m256i w = bcast4(wq + r * row + (size_t)b * QK8_0 + g * GROUP);
                const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
                sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(p16, ones));
            }
        }
        block_step(wd, b, _mm256_loadu_ps((const float *)(p + Q8_GROUPS * GROUP_BYTES) + LANES), sum, acc);
    }
}

// Unsigned codes: int16 runs of `run` groups (AVX2; as many as the codes' bound allows) or VPDPBUSD.
INLINE void kernel_unsigned(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb, int run, bool vnni,
                            __m256 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm256_setzero_ps();
    const size_t row = (size_t)nb * QK8_0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * Q8_PACKED;
        const __m256i start = _mm256_loadu_si256((const __m256i *)(p + Q8_GROUPS * GROUP_BYTES));
        __m256i sum[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            sum[r] = start;
        unsigned_sums(wq, row, (size_t)b * QK8_0, p, 0, Q8_GROUPS, run, NULL, 0, vnni, sum);
        block_step(wd, b, _mm256_loadu_ps((const float *)(p + Q8_GROUPS * GROUP_BYTES) + LANES), sum, acc);
    }
}

// int16 runs: 2 * 128 * max code * run <= 32,767
static AVX2_GEMM void kernel_q4_0(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb,
                                  __m256 acc[ROWS]) {
    kernel_unsigned(wq, wd, act, nb, 8, false, acc); // codes 0..15
}
static AVX2_GEMM void kernel_q5_0(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb,
                                  __m256 acc[ROWS]) {
    kernel_unsigned(wq, wd, act, nb, 4, false, acc); // 0..31
}
static AVX2_GEMM void kernel_mxfp4(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb,
                                   __m256 acc[ROWS]) {
    kernel_unsigned(wq, wd, act, nb, 4, false, acc); // 0..24
}
static AVX2_GEMM void kernel_q8_0(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb,
                                  __m256 acc[ROWS]) {
    kernel_signed(wq, wd, act, nb, acc);
}
// AVX-VNNI: every format's unsigned codes alike
static AVX2_GEMM void kernel_32_vnni(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb,
                                     __m256 acc[ROWS]) {
    kernel_unsigned(wq, wd, act, nb, Q8_GROUPS, true, acc);
}

#define GEMM_32(NAME, ROWS_FN, KERNEL, OFF)                                                                  \
    AVX2_GEMM void NAME(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,      \
                        float *s, size_t ls) {                                                             \
        float *ws;                                                                                          \
        const int off = (OFF);                                                                              \
        GEMM_LOOP(32, (size_t)nb * Q8_PACKED, PACK_32, ROWS_FN, KERNEL);                                    \
    }
#define PACK_32(dst, c0) pack_q8_0(dst, y, by, c0, nc, nb, off)
static GEMM_32(gemm_q8_0_vectors, rows_q8_0, kernel_q8_0, 0)
GEMM_32(ft_gemm_iq4_nl_avx2, rows_iq4_nl, kernel_q8_0, 0)
GEMM_32(ft_gemm_q4_0_avx2, rows_q4_0, kernel_q4_0, 8)
GEMM_32(ft_gemm_q5_0_avx2, rows_q5_0, kernel_q5_0, 16)
GEMM_32(ft_gemm_mxfp4_avx2, rows_mxfp4, kernel_mxfp4, 12)
static GEMM_32(gemm_q8_0_vectors_vnni, rows_q8_0_u, kernel_32_vnni, 128)
GEMM_32(ft_gemm_iq4_nl_avxvnni, rows_iq4_nl_u, kernel_32_vnni, 128)
GEMM_32(ft_gemm_q4_0_avxvnni, rows_q4_0, kernel_32_vnni, 8)
GEMM_32(ft_gemm_q5_0_avxvnni, rows_q5_0, kernel_32_vnni, 16)
GEMM_32(ft_gemm_mxfp4_avxvnni, rows_mxfp4, kernel_32_vnni, 12)
#undef PACK_32
#undef GEMM_32

// Below a few tokens q8_0 takes the shared per-(row, token) path (gemm_shared.c: the same bits;
// it skips the packing, which costs the same for 1 token as for 8).
AVX2_GEMM void ft_gemm_q8_0_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                 float *s, size_t ls) {
    if (nc < FT_GEMM_MIN_COLS)
        ft_gemm_few_q8_0(n, x, bx, nr, y, by, nc, s, ls);
    else
        gemm_q8_0_vectors(n, x, bx, nr, y, by, nc, s, ls);
}

AVX2_GEMM void ft_gemm_q8_0_avxvnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                    float *s, size_t ls) {
    if (nc < FT_GEMM_MIN_COLS)
        ft_gemm_few_q8_0(n, x, bx, nr, y, by, nc, s, ls);
    else
        gemm_q8_0_vectors_vnni(n, x, bx, nr, y, by, nc, s, ls);
}

// ---------------------------------------------------------------------------------------------
// K-quants x q8_K
//
// Activations, per (token vector, super-block of 256): 64 groups of 32 bytes, each token's scale
// as float, then words of the token's code sums in int16 pairs (gemm_vnni.c's): q4_K and q5_K
// 4 words of sub-block sums of 32, q6_K 8 words of the sums of 16.

enum { K_GROUPS = QK_K / GROUP, K_CODES = K_GROUPS * GROUP_BYTES, SUBS = QK_K / 32, SUBS6 = QK_K / 16 };

static size_t k_packed(int pairs) {
    return K_CODES + LANES * 4 + (size_t)pairs * LANES * 4;
}

static AVX2_GEMM void pack_q8_K(uint8_t *dst, const void *y, size_t by, int c0, int nc, int64_t nb, int pairs) {
    const size_t stride = k_packed(pairs);
    if (c0 + LANES > nc) memset(dst, 0, (size_t)nb * stride); // lanes past the last token
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + (size_t)b * stride;
        float *d = (float *)(p + K_CODES);
        uint32_t *bsum = (uint32_t *)(d + LANES);
        for (int l = 0; l < LANES && c0 + l < nc; l++) {
            const block_q8_K *yb = (const block_q8_K *)((const uint8_t *)y + (size_t)(c0 + l) * by) + b;
            for (int g = 0; g < K_GROUPS; g++)
                memcpy(p + g * GROUP_BYTES + l * GROUP, yb->qs + g * GROUP, GROUP);
            d[l] = yb->d;
            const int per = 16 / pairs / 2; // bsums of 16 per half of a word
            for (int i = 0; i < pairs; i++) {
                int lo = 0, hi = 0;
                for (int k = 0; k < per; k++) {
                    lo += yb->bsums[2 * per * i + k];
                    hi += yb->bsums[2 * per * i + per + k];
                }
                bsum[i * LANES + l] = (uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)hi << 16;
            }
        }
    }
}

#define PACK_Q8_K4(dst, c0) pack_q8_K(dst, y, by, c0, nc, nb, 4)
#define PACK_Q8_K8(dst, c0) pack_q8_K(dst, y, by, c0, nc, nb, SUBS6 / 2)

// q4_K and q5_K: per super-block and per (row, token) isum = sum of scale_j * (sub-block j's
// exact products), msum = sum of min_j * (the token's code sum of sub-block j), then the
// reference's sum += (dy * dx) * float(isum) - (dy * dmin) * float(msum).
typedef struct {
    int32_t sc[SUBS]; // the sub-block scales
    uint32_t mn[4];   // (min 2i, min 2i + 1) as int16
    float d, dmin;
} q45_K_rows;
_Static_assert(sizeof(q45_K_rows) % sizeof(int32_t) == 0, "scales as int32 strides");

INLINE uint32_t pair16(int lo, int hi) {
    return (uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)hi << 16;
}

INLINE void rows_q45_K(uint8_t *wq, q45_K_rows *ws, const uint8_t *x, size_t bx, int nr, int64_t nb, bool x5) {
    const __m256i m15 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int r = 0; r < ROWS; r++) {
        uint8_t *q = wq + (size_t)r * nb * QK_K;
        if (r >= nr) {
            zero_row(q, (size_t)nb * QK_K, ws, sizeof(ws[0]), r, nb);
            continue;
        }
        for (int64_t b = 0; b < nb; b++) {
            const block_q4_K *b4 = (const block_q4_K *)(x + (size_t)r * bx) + b;
            const block_q5_K *b5 = (const block_q5_K *)(x + (size_t)r * bx) + b;
            const uint8_t *qs = x5 ? b5->qs : b4->qs, *scales = x5 ? b5->scales : b4->scales;
            const __m256i qh = x5 ? _mm256_loadu_si256((const __m256i *)b5->qh) : _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
                __m256i lo = _mm256_and_si256(v, m15), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m15);
                if (x5) {
                    __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
                    __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
                }
                _mm256_storeu_si256((__m256i *)(q + b * QK_K + 64 * c), lo);
                _mm256_storeu_si256((__m256i *)(q + b * QK_K + 64 * c + 32), hi);
            }
            q45_K_rows *w = &ws[b * ROWS + r];
            uint8_t sc[SUBS], mn[SUBS];
            for (int j = 0; j < SUBS; j++) {
                ft_k4_scale_min(j, scales, &sc[j], &mn[j]);
                w->sc[j] = sc[j];
            }
            for (int i = 0; i < 4; i++)
                w->mn[i] = pair16(mn[2 * i], mn[2 * i + 1]);
            w->d = _cvtsh_ss(x5 ? b5->d : b4->d);
            w->dmin = _cvtsh_ss(x5 ? b5->dmin : b4->dmin);
        }
    }
}

static AVX2_GEMM void rows_q4_K(uint8_t *wq, q45_K_rows *ws, const uint8_t *x, size_t bx, int nr, int64_t nb) {
    rows_q45_K(wq, ws, x, bx, nr, nb, false);
}

static AVX2_GEMM void rows_q5_K(uint8_t *wq, q45_K_rows *ws, const uint8_t *x, size_t bx, int nr, int64_t nb) {
    rows_q45_K(wq, ws, x, bx, nr, nb, true);
}

// run: AVX2's groups summed in int16 (q4_K's codes 0..15: a whole sub-block of 8; q5_K's 0..31: 4)
INLINE void kernel_q45_K(const uint8_t *wq, const q45_K_rows *ws, const uint8_t *act, int64_t nb, int run,
                         bool vnni, __m256 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm256_setzero_ps();
    const size_t row = (size_t)nb * QK_K, stride = k_packed(4);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
        const q45_K_rows *w = ws + b * ROWS;
        __m256i isum[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            isum[r] = _mm256_setzero_si256();
        for (int j = 0; j < SUBS; j++)
            unsigned_sums(wq, row, (size_t)b * QK_K, p, 8 * j, 8, run, &w->sc[j], sizeof(*w) / sizeof(int32_t), vnni,
                          isum);
        const __m256 dy = _mm256_loadu_ps((const float *)(p + K_CODES));
        const __m256i *bs = (const __m256i *)(p + K_CODES + LANES * 4);
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++) {
            __m256i msum = _mm256_madd_epi16(_mm256_set1_epi32((int)w[r].mn[0]), _mm256_loadu_si256(bs));
            for (int i = 1; i < 4; i++)
                msum = _mm256_add_epi32(msum,
                                        _mm256_madd_epi16(_mm256_set1_epi32((int)w[r].mn[i]), _mm256_loadu_si256(bs + i)));
            const __m256 t1 = _mm256_mul_ps(_mm256_mul_ps(dy, _mm256_set1_ps(w[r].d)), _mm256_cvtepi32_ps(isum[r]));
            const __m256 t2 = _mm256_mul_ps(_mm256_mul_ps(dy, _mm256_set1_ps(w[r].dmin)), _mm256_cvtepi32_ps(msum));
            acc[r] = _mm256_add_ps(acc[r], _mm256_sub_ps(t1, t2));
        }
    }
}

static AVX2_GEMM void kernel_q4_K(const uint8_t *wq, const q45_K_rows *ws, const uint8_t *act, int64_t nb,
                                  __m256 acc[ROWS]) {
    kernel_q45_K(wq, ws, act, nb, 8, false, acc);
}

static AVX2_GEMM void kernel_q5_K(const uint8_t *wq, const q45_K_rows *ws, const uint8_t *act, int64_t nb,
                                  __m256 acc[ROWS]) {
    kernel_q45_K(wq, ws, act, nb, 4, false, acc);
}

static AVX2_GEMM void kernel_q45_K_vnni(const uint8_t *wq, const q45_K_rows *ws, const uint8_t *act, int64_t nb,
                                        __m256 acc[ROWS]) {
    kernel_q45_K(wq, ws, act, nb, 8, true, acc);
}

AVX2_GEMM void ft_gemm_q4_K_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                 float *s, size_t ls) {
    q45_K_rows *ws;
    GEMM_LOOP(QK_K, (size_t)nb * k_packed(4), PACK_Q8_K4, rows_q4_K, kernel_q4_K);
}

AVX2_GEMM void ft_gemm_q5_K_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                 float *s, size_t ls) {
    q45_K_rows *ws;
    GEMM_LOOP(QK_K, (size_t)nb * k_packed(4), PACK_Q8_K4, rows_q5_K, kernel_q5_K);
}

AVX2_GEMM void ft_gemm_q4_K_avxvnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                    float *s, size_t ls) {
    q45_K_rows *ws;
    GEMM_LOOP(QK_K, (size_t)nb * k_packed(4), PACK_Q8_K4, rows_q4_K, kernel_q45_K_vnni);
}

AVX2_GEMM void ft_gemm_q5_K_avxvnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                    float *s, size_t ls) {
    q45_K_rows *ws;
    GEMM_LOOP(QK_K, (size_t)nb * k_packed(4), PACK_Q8_K4, rows_q5_K, kernel_q45_K_vnni);
}

// q6_K: codes 0..63 (the value plus 32) and int8 scales per 16: isum = sum over the 16
// sub-blocks of scale_j * (its exact code products) - 32 * sum of scale_j * (the token's sum of
// sub-block j), then the reference's sum += (dy * dx) * float(isum). Element 128h + 32k + l
// takes its low four bits from ql[64h + 32(k % 2) + l] and its top two from bits 2k..2k+1 of
// qh[32h + l].
typedef struct {
    int32_t sc[SUBS6];           // the sub-block scales
    uint32_t sc_pair[SUBS6 / 2]; // (scale 2i, scale 2i + 1) as int16
    float d;
} q6_K_rows;
_Static_assert(sizeof(q6_K_rows) % sizeof(int32_t) == 0, "scales as int32 strides");

static AVX2_GEMM void rows_q6_K(uint8_t *wq, q6_K_rows *ws, const uint8_t *x, size_t bx, int nr, int64_t nb) {
    const __m256i m15 = _mm256_set1_epi8(0x0f), m48 = _mm256_set1_epi8(0x30);
    for (int r = 0; r < ROWS; r++) {
        uint8_t *q = wq + (size_t)r * nb * QK_K;
        if (r >= nr) {
            zero_row(q, (size_t)nb * QK_K, ws, sizeof(ws[0]), r, nb);
            continue;
        }
        const block_q6_K *xb = (const block_q6_K *)(x + (size_t)r * bx);
        for (int64_t b = 0; b < nb; b++) {
            for (int h = 0; h < 2; h++) {
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)(xb[b].ql + 64 * h));
                const __m256i l2 = _mm256_loadu_si256((const __m256i *)(xb[b].ql + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(xb[b].qh + 32 * h));
                __m256i code[4];
                code[0] = _mm256_or_si256(_mm256_and_si256(l1, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m48));
                code[1] = _mm256_or_si256(_mm256_and_si256(l2, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m48));
                code[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15), _mm256_and_si256(qh, m48));
                code[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15),
                                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m48));
                for (int k = 0; k < 4; k++)
                    _mm256_storeu_si256((__m256i *)(q + b * QK_K + 128 * h + 32 * k), code[k]);
            }
            q6_K_rows *w = &ws[b * ROWS + r];
            for (int j = 0; j < SUBS6; j++)
                w->sc[j] = xb[b].scales[j];
            for (int i = 0; i < SUBS6 / 2; i++)
                w->sc_pair[i] = pair16(xb[b].scales[2 * i], xb[b].scales[2 * i + 1]);
            w->d = _cvtsh_ss(xb[b].d);
        }
    }
}

INLINE void kernel_q6_K(const uint8_t *wq, const q6_K_rows *ws, const uint8_t *act, int64_t nb, bool vnni,
                        __m256 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm256_setzero_ps();
    const size_t row = (size_t)nb * QK_K, stride = k_packed(SUBS6 / 2);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
        const q6_K_rows *w = ws + b * ROWS;
        __m256i isum[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            isum[r] = _mm256_setzero_si256();
        for (int j = 0; j < SUBS6; j++) // AVX2: codes 0..63 in int16 runs of 2
            unsigned_sums(wq, row, (size_t)b * QK_K, p, 4 * j, 4, 2, &w->sc[j], sizeof(*w) / sizeof(int32_t), vnni,
                          isum);
        const __m256 dy = _mm256_loadu_ps((const float *)(p + K_CODES));
        const __m256i *bs = (const __m256i *)(p + K_CODES + LANES * 4);
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++) {
            __m256i osum = _mm256_setzero_si256();
            for (int i = 0; i < SUBS6 / 2; i++)
                osum = _mm256_add_epi32(osum, _mm256_madd_epi16(_mm256_set1_epi32((int)w[r].sc_pair[i]),
                                                                _mm256_loadu_si256(bs + i)));
            const __m256i sumi = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(osum, 5));
            const __m256 t = _mm256_mul_ps(_mm256_mul_ps(dy, _mm256_set1_ps(w[r].d)), _mm256_cvtepi32_ps(sumi));
            acc[r] = _mm256_add_ps(acc[r], t);
        }
    }
}

static AVX2_GEMM void kernel_q6_K_avx2(const uint8_t *wq, const q6_K_rows *ws, const uint8_t *act, int64_t nb,
                                       __m256 acc[ROWS]) {
    kernel_q6_K(wq, ws, act, nb, false, acc);
}

static AVX2_GEMM void kernel_q6_K_vnni(const uint8_t *wq, const q6_K_rows *ws, const uint8_t *act, int64_t nb,
                                       __m256 acc[ROWS]) {
    kernel_q6_K(wq, ws, act, nb, true, acc);
}

AVX2_GEMM void ft_gemm_q6_K_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                 float *s, size_t ls) {
    q6_K_rows *ws;
    GEMM_LOOP(QK_K, (size_t)nb * k_packed(SUBS6 / 2), PACK_Q8_K8, rows_q6_K, kernel_q6_K_avx2);
}

AVX2_GEMM void ft_gemm_q6_K_avxvnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                    float *s, size_t ls) {
    q6_K_rows *ws;
    GEMM_LOOP(QK_K, (size_t)nb * k_packed(SUBS6 / 2), PACK_Q8_K8, rows_q6_K, kernel_q6_K_vnni);
}

// ---------------------------------------------------------------------------------------------
// bf16 x bf16
//
// The activations packed as floats per (element, token): 32 bytes an element for 8 tokens, two
// token vectors per pass; ROWS weight rows widened to floats once per pass and broadcast an
// element at a time. Each lane sums its products in element order with FMA (float sums, as the
// other bf16 GEMMs: within the bound above). Any token count takes the vectors: another path
// would sum in another order, and an output must not depend on how many tokens its call has.

enum { BF16_VECTORS = 2, BF16_TOKENS = LANES * BF16_VECTORS };

INLINE __m256 bf16x8(const ft_bf16 *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

// Tokens [c0, c0 + 16) of y as (element, token) floats, zeros past nc.
static AVX2_GEMM void pack_bf16(float *dst, const void *y, size_t by, int c0, int nc, int64_t n) {
    for (int v = 0; v < BF16_VECTORS; v++)
        for (int l = 0; l < LANES; l++) {
            float *d = dst + (size_t)v * n * LANES + l;
            const int c = c0 + v * LANES + l;
            if (c >= nc) {
                for (int64_t k = 0; k < n; k++)
                    d[k * LANES] = 0.0f;
                continue;
            }
            const ft_bf16 *src = (const ft_bf16 *)((const uint8_t *)y + (size_t)c * by);
            for (int64_t k = 0; k < n; k++)
                d[k * LANES] = ft_bf16_to_fp32(src[k]);
        }
}

// ROWS rows of x (rows past nr: zeros) widened to floats.
static AVX2_GEMM void rows_bf16(float *wf, const uint8_t *x, size_t bx, int nr, int64_t n) {
    for (int r = 0; r < ROWS; r++) {
        float *d = wf + (size_t)r * n;
        if (r >= nr) {
            memset(d, 0, (size_t)n * sizeof(float));
            continue;
        }
        const ft_bf16 *src = (const ft_bf16 *)(x + (size_t)r * bx);
        int64_t k = 0;
        for (; k + 8 <= n; k += 8)
            _mm256_storeu_ps(d + k, bf16x8(src + k));
        for (; k < n; k++)
            d[k] = ft_bf16_to_fp32(src[k]);
    }
}

INLINE void kernel_bf16(const float *wf, const float *act, int64_t n, __m256 acc[ROWS][BF16_VECTORS]) {
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++)
        for (int v = 0; v < BF16_VECTORS; v++)
            acc[r][v] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        const __m256 a0 = _mm256_loadu_ps(act + k * LANES), a1 = _mm256_loadu_ps(act + (n + k) * LANES);
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++) {
            const __m256 w = _mm256_broadcast_ss(wf + (size_t)r * n + k);
            acc[r][0] = _mm256_fmadd_ps(w, a0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(w, a1, acc[r][1]);
        }
    }
}

AVX2_GEMM void ft_gemm_bf16_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                 float *s, size_t ls) {
    const int nt = (nc + BF16_TOKENS - 1) / BF16_TOKENS; // token pairs of vectors
    const size_t tbytes = (size_t)n * BF16_TOKENS * sizeof(float);
    int ntb = (int)(TOKEN_BLOCK_BYTES / tbytes);
    ntb = ntb < 1 ? 1 : ntb > nt ? nt : ntb;
    uint8_t *p = ft_gemm_scratch((size_t)ntb * tbytes + (size_t)ROWS * n * sizeof(float) + 2 * 64);
    float *act = ft_gemm_carve(&p, (size_t)ntb * tbytes);
    float *wf = ft_gemm_carve(&p, (size_t)ROWS * n * sizeof(float));
    for (int t0 = 0; t0 < nt; t0 += ntb) {
        const int t1 = t0 + ntb < nt ? t0 + ntb : nt;
        for (int t = t0; t < t1; t++)
            pack_bf16(act + (size_t)(t - t0) * n * BF16_TOKENS, y, by, t * BF16_TOKENS, nc, n);
        for (int r0 = 0; r0 < nr; r0 += ROWS) {
            const int mr = nr - r0 < ROWS ? nr - r0 : ROWS;
            rows_bf16(wf, (const uint8_t *)x + (size_t)r0 * bx, bx, mr, n);
            for (int t = t0; t < t1; t++) {
                __m256 acc[ROWS][BF16_VECTORS];
                kernel_bf16(wf, act + (size_t)(t - t0) * n * BF16_TOKENS, n, acc);
                for (int v = 0; v < BF16_VECTORS; v++) {
                    const int c0 = t * BF16_TOKENS + v * LANES;
                    if (c0 >= nc) break;
                    const int valid = nc - c0 < LANES ? nc - c0 : LANES;
                    for (int r = 0; r < mr; r++)
                        store_lanes(acc[r][v], s, ls, r0 + r, c0, valid);
                }
            }
        }
    }
}
