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
//     sign trick instead of an offset: |a| times w with a's sign (|w| and a's sign for rows
//     holding a -128), widened every group.
// A vector costs as much for 1 token as for 8: below a few tokens q8_0 and the K-quants take
// gemm_shared.c's per-(row, token) paths, which give the same bits.
// Thread-safe: each thread packs into its own scratch.
#include "dot.h"
#include "gemm_shared.h"
#include "quant.h"
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
enum { LANES = 8, ROWS = 4, GROUP = FT_GEMM_GROUP, GROUP_BYTES = LANES * GROUP, TOKEN_BLOCK_BYTES = 256 << 10 };

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

// gemm_shared.h's loop at this file's widths.
#define GEMM_LOOP(BLOCK, VBYTES, PACK, ROWS_FN, KERNEL) \
    FT_GEMM_LOOP(LANES, ROWS, __m256, store_lanes, TOKEN_BLOCK_BYTES, BLOCK, VBYTES, PACK, ROWS_FN, KERNEL)

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

enum { Q8_GROUPS = QK8_0 / GROUP };

// gemm_shared.c's packing and rows: the signed formats' codes offset by 0 (AVX2's sign trick) or
// 128 (AVX-VNNI), q4_0's by 8, q5_0's by 16, mxfp4's book by 12 (0..24, small enough for AVX2's
// int16 runs).
#define PACK_32(dst, c0) ft_gemm_pack_q8_0(dst, y, by, c0, nc, nb, off, LANES)
#define ROWS_32(wq, ws, xr, bx, mr, nb) ft_gemm_rows_32(type, off, wq, ws, xr, bx, mr, nb, ROWS)

// The reference's float step of a 32-element block for ROWS rows: acc += (dx * dy) * float(isum).
INLINE void block_step(const float *wd, int64_t b, __m256 dy, const __m256i isum[ROWS], __m256 acc[ROWS]) {
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++) {
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(wd[b * ROWS + r]), dy);
        acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[r])));
    }
}

// Signed codes, the sign trick: VPMADDUBSW takes one unsigned operand, so a * w is |u| times v
// with u's sign, widened every group. abs_a (u = a, the packed activations, whose codes are
// within +-127): |a| once per group for the ROWS rows, then one sign a row. Else (u = w) |w| and
// a's sign both a row: for rows holding a code of -128, which a byte cannot negate (a q8_0 file
// may hold one; our quantizers and iq4_nl's book never do). The products and their sums are
// exact either way (a pair stays under int16's bound): the same bits.
INLINE void kernel_signed(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb, bool abs_a,
                          __m256 acc[ROWS]) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm256_setzero_ps();
    const size_t row = (size_t)nb * QK8_0, stride = ft_gemm_q8_0_packed(LANES);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
        __m256i sum[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; r++)
            sum[r] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int g = 0; g < Q8_GROUPS; g++) { // one group a pass, as unsigned_sums
            const __m256i a = _mm256_loadu_si256((const __m256i *)(p + g * GROUP_BYTES));
            const __m256i a_abs = _mm256_abs_epi8(a);
#pragma GCC unroll 4
            for (int r = 0; r < ROWS; r++) {
                const __m256i w = bcast4(wq + r * row + (size_t)b * QK8_0 + g * GROUP);
                const __m256i p16 = abs_a ? _mm256_maddubs_epi16(a_abs, _mm256_sign_epi8(w, a))
                                          : _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
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
    const size_t row = (size_t)nb * QK8_0, stride = ft_gemm_q8_0_packed(LANES);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
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
// The signed kernels: |a| (rows without -128) or |w| (rows with one; kernel_signed).
static AVX2_GEMM void kernel_q8_0(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb,
                                  __m256 acc[ROWS]) {
    kernel_signed(wq, wd, act, nb, true, acc);
}
static AVX2_GEMM void kernel_q8_0_m128(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb,
                                       __m256 acc[ROWS]) {
    kernel_signed(wq, wd, act, nb, false, acc);
}

// Whether the unpacked rows at wq (bytes of codes) hold a -128.
INLINE bool codes_hold_m128(const uint8_t *wq, size_t bytes) {
    const __m256i m128 = _mm256_set1_epi8(-128);
    __m256i seen = _mm256_setzero_si256();
    for (size_t i = 0; i < bytes; i += 32)
        seen = _mm256_or_si256(seen, _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(wq + i)), m128));
    return !_mm256_testz_si256(seen, seen);
}
// AVX-VNNI: every format's unsigned codes alike
static AVX2_GEMM void kernel_32_vnni(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb,
                                     __m256 acc[ROWS]) {
    kernel_unsigned(wq, wd, act, nb, Q8_GROUPS, true, acc);
}

// The signed formats on AVX2 (off 0): each pass's rows scanned once for a -128 when unpacked,
// which picks the kernel for its token vectors.
#define ROWS_32_SIGNED(wq, ws, xr, bx, mr, nb)                                                             \
    (ROWS_32(wq, ws, xr, bx, mr, nb), m128 = codes_hold_m128(wq, (size_t)ROWS * (size_t)(nb)*QK8_0))
#define KERNEL_SIGNED(wq, ws, act, nb, acc) (m128 ? kernel_q8_0_m128 : kernel_q8_0)(wq, ws, act, nb, acc)
#define GEMM_32_SIGNED(NAME, TYPE)                                                                          \
    AVX2_GEMM void NAME(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,      \
                        float *s, size_t ls) {                                                             \
        float *ws;                                                                                          \
        const enum ft_type type = (TYPE);                                                                   \
        const int off = 0;                                                                                  \
        bool m128 = false;                                                                                  \
        GEMM_LOOP(32, (size_t)nb * ft_gemm_q8_0_packed(LANES), PACK_32, ROWS_32_SIGNED, KERNEL_SIGNED);     \
    }
#define GEMM_32(NAME, TYPE, KERNEL, OFF)                                                                     \
    AVX2_GEMM void NAME(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,      \
                        float *s, size_t ls) {                                                             \
        float *ws;                                                                                          \
        const enum ft_type type = (TYPE);                                                                   \
        const int off = (OFF);                                                                              \
        GEMM_LOOP(32, (size_t)nb * ft_gemm_q8_0_packed(LANES), PACK_32, ROWS_32, KERNEL);                                    \
    }
static GEMM_32_SIGNED(gemm_q8_0_vectors, FT_TYPE_Q8_0)
GEMM_32_SIGNED(ft_gemm_iq4_nl_avx2, FT_TYPE_IQ4_NL)
GEMM_32(ft_gemm_q4_0_avx2, FT_TYPE_Q4_0, kernel_q4_0, 8)
GEMM_32(ft_gemm_q5_0_avx2, FT_TYPE_Q5_0, kernel_q5_0, 16)
GEMM_32(ft_gemm_mxfp4_avx2, FT_TYPE_MXFP4, kernel_mxfp4, 12)
static GEMM_32(gemm_q8_0_vectors_vnni, FT_TYPE_Q8_0, kernel_32_vnni, 128)
GEMM_32(ft_gemm_iq4_nl_avxvnni, FT_TYPE_IQ4_NL, kernel_32_vnni, 128)
GEMM_32(ft_gemm_q4_0_avxvnni, FT_TYPE_Q4_0, kernel_32_vnni, 8)
GEMM_32(ft_gemm_q5_0_avxvnni, FT_TYPE_Q5_0, kernel_32_vnni, 16)
GEMM_32(ft_gemm_mxfp4_avxvnni, FT_TYPE_MXFP4, kernel_32_vnni, 12)
#undef PACK_32
#undef ROWS_32
#undef ROWS_32_SIGNED
#undef KERNEL_SIGNED
#undef GEMM_32_SIGNED
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

#define ROWS_Q4_K(wq, ws, xr, bx, mr, nb) ft_gemm_rows_q45_K(wq, ws, xr, bx, mr, nb, false, ROWS)
#define ROWS_Q5_K(wq, ws, xr, bx, mr, nb) ft_gemm_rows_q45_K(wq, ws, xr, bx, mr, nb, true, ROWS)
#define ROWS_Q6_K(wq, ws, xr, bx, mr, nb) ft_gemm_rows_q6_K(wq, ws, xr, bx, mr, nb, ROWS)

// q4_K and q5_K: per super-block and per (row, token) isum = sum of scale_j * (sub-block j's
// exact products), msum = sum of min_j * (the token's code sum of sub-block j), then the
// reference's sum += (dy * dx) * float(isum) - (dy * dmin) * float(msum).
// run: AVX2's groups summed in int16 (q4_K's codes 0..15: a whole sub-block of 8; q5_K's 0..31: 4)
INLINE void kernel_q45_K(const uint8_t *wq, const ft_gemm_q45_K_scales *ws, const uint8_t *act, int64_t nb, int run,
                         bool vnni, __m256 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm256_setzero_ps();
    const size_t row = (size_t)nb * QK_K, stride = ft_gemm_q8_K_packed(4, LANES);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
        const ft_gemm_q45_K_scales *w = ws + b * ROWS;
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

static AVX2_GEMM void kernel_q4_K_avx2(const uint8_t *wq, const ft_gemm_q45_K_scales *ws, const uint8_t *act,
                                       int64_t nb, __m256 acc[ROWS]) {
    kernel_q45_K(wq, ws, act, nb, 8, false, acc);
}

static AVX2_GEMM void kernel_q5_K_avx2(const uint8_t *wq, const ft_gemm_q45_K_scales *ws, const uint8_t *act,
                                       int64_t nb, __m256 acc[ROWS]) {
    kernel_q45_K(wq, ws, act, nb, 4, false, acc);
}

static AVX2_GEMM void kernel_q45_K_avxvnni(const uint8_t *wq, const ft_gemm_q45_K_scales *ws, const uint8_t *act,
                                           int64_t nb, __m256 acc[ROWS]) {
    kernel_q45_K(wq, ws, act, nb, 8, true, acc);
}

// Below these counts the K-quants take the shared per-(row, token) paths (gemm_shared.c, the same
// bits): a vector costs as much for 1 token as for 8, unpacking the rows included. The crossings
// measured over 32 experts of 768 x 2048, one thread (q4_K: 1 token 3.7 ms, a vector 9.2 ms with
// AVX2 and 7.7 ms with AVX-VNNI; q5_K: 3.1 against 7.6 and 6.1; q6_K: 4.3 against 13.4 and 13.8).
enum { FEW_Q4_K_AVX2 = 5, FEW_Q4_K_AVXVNNI = 5, FEW_Q5_K_AVX2 = 6, FEW_Q5_K_AVXVNNI = 4, FEW_Q6_K = 7 };

// q6_K: codes 0..63 (the value plus 32) and int8 scales per 16: isum = sum over the 16
// sub-blocks of scale_j * (its exact code products) - 32 * sum of scale_j * (the token's sum of
// sub-block j), then the reference's sum += (dy * dx) * float(isum). Element 128h + 32k + l
// takes its low four bits from ql[64h + 32(k % 2) + l] and its top two from bits 2k..2k+1 of
// qh[32h + l].
INLINE void kernel_q6_K(const uint8_t *wq, const ft_gemm_q6_K_scales *ws, const uint8_t *act, int64_t nb, bool vnni,
                        __m256 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm256_setzero_ps();
    const size_t row = (size_t)nb * QK_K, stride = ft_gemm_q8_K_packed(SUBS6 / 2, LANES);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
        const ft_gemm_q6_K_scales *w = ws + b * ROWS;
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

static AVX2_GEMM void kernel_q6_K_avx2(const uint8_t *wq, const ft_gemm_q6_K_scales *ws, const uint8_t *act, int64_t nb,
                                       __m256 acc[ROWS]) {
    kernel_q6_K(wq, ws, act, nb, false, acc);
}

static AVX2_GEMM void kernel_q6_K_avxvnni(const uint8_t *wq, const ft_gemm_q6_K_scales *ws, const uint8_t *act, int64_t nb,
                                       __m256 acc[ROWS]) {
    kernel_q6_K(wq, ws, act, nb, true, acc);
}

// The K-quants' entries: below FEW tokens FEW_FN (the same bits), else the vectors.
#define GEMM_K(NAME, FEW, FEW_FN, SCALES_T, PAIRS, ROWS_FN, KERNEL)                                         \
    AVX2_GEMM void NAME(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,      \
                        float *s, size_t ls) {                                                             \
        if (nc < (FEW)) {                                                                                   \
            FEW_FN(n, x, bx, nr, y, by, nc, s, ls);                                                         \
            return;                                                                                         \
        }                                                                                                   \
        SCALES_T *ws;                                                                                       \
        const int pairs = (PAIRS);                                                                          \
        GEMM_LOOP(QK_K, (size_t)nb * ft_gemm_q8_K_packed(pairs, LANES), PACK_Q8_K, ROWS_FN, KERNEL);        \
    }
#define PACK_Q8_K(dst, c0) ft_gemm_pack_q8_K(dst, y, by, c0, nc, nb, pairs, LANES)
GEMM_K(ft_gemm_q4_K_avx2, FEW_Q4_K_AVX2, ft_gemm_few_q4_K_avx2, ft_gemm_q45_K_scales, 4, ROWS_Q4_K, kernel_q4_K_avx2)
GEMM_K(ft_gemm_q5_K_avx2, FEW_Q5_K_AVX2, ft_gemm_few_q5_K, ft_gemm_q45_K_scales, 4, ROWS_Q5_K, kernel_q5_K_avx2)
GEMM_K(ft_gemm_q6_K_avx2, FEW_Q6_K, ft_gemm_few_q6_K, ft_gemm_q6_K_scales, SUBS6 / 2, ROWS_Q6_K, kernel_q6_K_avx2)
GEMM_K(ft_gemm_q4_K_avxvnni, FEW_Q4_K_AVXVNNI, ft_gemm_few_q4_K_avx2, ft_gemm_q45_K_scales, 4, ROWS_Q4_K,
       kernel_q45_K_avxvnni)
GEMM_K(ft_gemm_q5_K_avxvnni, FEW_Q5_K_AVXVNNI, ft_gemm_few_q5_K, ft_gemm_q45_K_scales, 4, ROWS_Q5_K,
       kernel_q45_K_avxvnni)
GEMM_K(ft_gemm_q6_K_avxvnni, FEW_Q6_K, ft_gemm_few_q6_K, ft_gemm_q6_K_scales, SUBS6 / 2, ROWS_Q6_K,
       kernel_q6_K_avxvnni)
#undef PACK_Q8_K
#undef GEMM_K

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
