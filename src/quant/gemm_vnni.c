// gemm_vnni.c: prefill GEMMs with AVX-512 VNNI for q8_0, q4_0, q5_0, iq4_nl, mxfp4, q4_K, q5_K and
// q6_K weights, for CPUs without AMX (see dot.h); all but q8_0 and q4_K also where there is AMX,
// which has no GEMM for them.
//
// Entered only through ft_quant_ops_find() after ops.c has seen the CPU support AVX-512 VNNI
// (with F, BW, VL, DQ and F16C). Like the AMX GEMMs the integer sums are exact and the float
// steps are the scalar reference's in its order, so every output equals ft_vec_dot_<type>_ref
// to the bit (and the AMX GEMM's): a prefill computes the same logits on either kind of CPU.
//
// Layout: the 16 int32 lanes of a vector are 16 tokens. Per call the activations are packed
// once, per 16 tokens and per 4 codes ("group"): 64 bytes holding each token's 4 codes in turn,
// so one VPDPBUSD adds a weight row's 4 codes (broadcast) times 16 tokens' 4 codes. The
// weights are read in place, ROWS rows at a time, into a small buffer of unsigned codes (q4_K:
// its nibbles unpacked; q8_0: its codes plus 128, since VPDPBUSD's first operand is unsigned,
// the 128 * (sum of the token's codes) then subtracted from each block's sum; the other
// 32-element formats likewise with their own offsets, below). Per block the
// ROWS x 16 exact sums take the reference's float steps, 16 tokens to a register.
// Thread-safe: each thread packs into its own scratch.
#include "dot.h"
#include "gemm_shared.h"
#include "quant.h"
#include "fp16.h"
#include "../util/util.h"

#include <immintrin.h>
#include <string.h>

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

// LANES tokens per vector; ROWS weight rows per pass over a vector's packed codes (the sums of
// ROWS x 1 vectors stay in registers); below MIN_TOKENS tokens q8_0 and q4_K take the shared
// per-(row, token) path (the AMX GEMMs' threshold; the same bits, and the vectors were no faster
// there); a block of token vectors is packed to at most TOKEN_BLOCK_BYTES, so the rows' passes
// over them hit the L2.
enum { LANES = 16, ROWS = 8, GROUP = 4, MIN_TOKENS = 4, TOKEN_BLOCK_BYTES = 256 << 10 };

bool ft_gemm_vnni_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

// The 4 codes at p, in every lane.
static inline VNNI_TARGET __m512i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof(v));
    return _mm512_set1_epi32(v);
}

// Writes lanes [0, valid) of v (tokens c0.., one weight row r) to s[(c0 + l) * ls + r].
static inline VNNI_TARGET void store_lanes(__m512 v, float *s, size_t ls, int r, int c0, int valid) {
    float t[LANES];
    _mm512_storeu_ps(t, v);
    for (int l = 0; l < valid; l++)
        s[(size_t)(c0 + l) * ls + (size_t)r] = t[l];
}

// gemm_shared.h's loop at this file's widths.
#define GEMM_LOOP(BLOCK, VBYTES, PACK, ROWS_FN, KERNEL) \
    FT_GEMM_LOOP(LANES, ROWS, __m512, store_lanes, TOKEN_BLOCK_BYTES, BLOCK, VBYTES, PACK, ROWS_FN, KERNEL)

// ---------------------------------------------------------------------------------------------
// q8_0 x q8_0
//
// Packed per (token vector, block) by gemm_shared.c: 8 groups of 64 bytes, then -off * (each
// token's code sum) as int32 (the start of the block's sums), then each token's scale as float.
// The weight rows: codes + 128 (q8_0) and float scales.

enum { Q8_GROUPS = QK8_0 / GROUP, Q8_PACKED = Q8_GROUPS * 64 + 2 * LANES * 4 };

#define PACK_32(dst, c0) ft_gemm_pack_q8_0(dst, y, by, c0, nc, nb, off, LANES)
#define ROWS_32(wq, ws, xr, bx, mr, nb) ft_gemm_rows_32(type, off, wq, ws, xr, bx, mr, nb, ROWS)

// The ROWS rows against one token vector: per block the exact sums, then the reference's
// sum += (dx * dy) * float(isum) per (row, token).
static inline VNNI_TARGET void kernel_q8_0(const uint8_t *wq, const float *wd, const uint8_t *act, int64_t nb,
                                           __m512 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm512_setzero_ps();
    const size_t row = (size_t)nb * QK8_0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * Q8_PACKED;
        const __m512i start = _mm512_loadu_si512((const void *)(p + Q8_GROUPS * 64));
        const __m512 dy = _mm512_loadu_ps((const float *)(p + Q8_GROUPS * 64) + LANES);
        __m512i sum[ROWS];
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++)
            sum[r] = start;
#pragma GCC unroll 8
        for (int g = 0; g < Q8_GROUPS; g++) {
            const __m512i a = _mm512_loadu_si512((const void *)(p + g * 64));
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++)
                sum[r] = _mm512_dpbusd_epi32(sum[r], bcast4(wq + r * row + (size_t)b * QK8_0 + g * GROUP), a);
        }
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) {
            const __m512 d = _mm512_mul_ps(_mm512_set1_ps(wd[b * ROWS + r]), dy);
            const __m512 t = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sum[r]));
            acc[r] = _mm512_add_ps(acc[r], t);
        }
    }
}

VNNI_TARGET void ft_gemm_q8_0_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                   int nc, float *s, size_t ls) {
    if (nc < MIN_TOKENS) {
        ft_gemm_few_q8_0(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    float *ws;
    const enum ft_type type = FT_TYPE_Q8_0;
    const int off = 128;
    GEMM_LOOP(QK8_0, (size_t)nb * Q8_PACKED, PACK_32, ROWS_32, kernel_q8_0);
}

// ---------------------------------------------------------------------------------------------
// q4_0, q5_0, iq4_nl, mxfp4 x q8_0: q8_0's GEMM on each format's codes made unsigned (q4_0: the
// nibble, offset 8; q5_0: nibble and fifth bit, offset 16; iq4_nl and mxfp4: the code book's
// value plus 128) and its block scale as a float, so the exact integer sum is the reference's
// and so are the float steps ((dx * dy) * isum: the products commute exactly). Every token count
// takes the vectors (no few-token path: the same bits, and these formats have none of their own).

#define GEMM_32(NAME, TYPE, OFF)                                                                             \
    VNNI_TARGET void NAME(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,    \
                          float *s, size_t ls) {                                                           \
        float *ws;                                                                                          \
        const enum ft_type type = (TYPE);                                                                   \
        const int off = (OFF);                                                                              \
        GEMM_LOOP(32, (size_t)nb * Q8_PACKED, PACK_32, ROWS_32, kernel_q8_0);                               \
    }
GEMM_32(ft_gemm_q4_0_vnni, FT_TYPE_Q4_0, 8)
GEMM_32(ft_gemm_q5_0_vnni, FT_TYPE_Q5_0, 16)
GEMM_32(ft_gemm_iq4_nl_vnni, FT_TYPE_IQ4_NL, 128)
GEMM_32(ft_gemm_mxfp4_vnni, FT_TYPE_MXFP4, 128)
#undef PACK_32
#undef ROWS_32
#undef GEMM_32

// ---------------------------------------------------------------------------------------------
// K-quants x q8_K
//
// Activations, per (token vector, super-block of 256): 64 groups of 64 bytes, each token's scale
// as float, then words of the token's code sums in int16 pairs, which _mm512_madd_epi16 takes
// against a row's int16 pairs of mins or scales: q4_K and q5_K 4 words of sub-block sums of 32
// (2i, 2i + 1; at most 32 * 127 each), q6_K 8 words of the sums of 16 (bsums 2i, 2i + 1).

enum { K_GROUPS = QK_K / GROUP, K_CODES = K_GROUPS * 64 };

// GEMM_LOOP's PACK for the K-quants: the code sums of 32 (q4_K, q5_K) or of 16 (q6_K).
#define PACK_Q8_K4(dst, c0) ft_gemm_pack_q8_K(dst, y, by, c0, nc, nb, 4, LANES)
#define PACK_Q8_K8(dst, c0) ft_gemm_pack_q8_K(dst, y, by, c0, nc, nb, SUBS6 / 2, LANES)
#define ROWS_Q4_K(wq, ws, xr, bx, mr, nb) ft_gemm_rows_q45_K(wq, ws, xr, bx, mr, nb, false, ROWS)
#define ROWS_Q5_K(wq, ws, xr, bx, mr, nb) ft_gemm_rows_q45_K(wq, ws, xr, bx, mr, nb, true, ROWS)
#define ROWS_Q6_K(wq, ws, xr, bx, mr, nb) ft_gemm_rows_q6_K(wq, ws, xr, bx, mr, nb, ROWS)

// The rows' codes, one per byte in element order, ROWS rows of n: 4 per group broadcast to the
// 16 tokens of a vector against its packed group; the exact sum of one sub-block of `groups`
// groups, per row, into sum[r].
static inline __attribute__((always_inline)) VNNI_TARGET void sub_block_sums(const uint8_t *wq, size_t row,
                                                                             size_t at, const uint8_t *p,
                                                                             int g0, int groups,
                                                                             __m512i sum[ROWS]) {
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++)
        sum[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = g0; g < g0 + groups; g++) {
        const __m512i a = _mm512_loadu_si512((const void *)(p + g * 64));
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++)
            sum[r] = _mm512_dpbusd_epi32(sum[r], bcast4(wq + r * row + at + g * GROUP), a);
    }
}

// isum[r] = the sum over a super-block's `subs` sub-blocks (of `groups` groups each) of row r's
// scale times the sub-block's exact sum; row r's scales at sc + r * sc_stride (int32).
static inline __attribute__((always_inline)) VNNI_TARGET void
scaled_sums(const uint8_t *wq, size_t row, int64_t b, const uint8_t *p, int subs, int groups,
            const int32_t *sc, size_t sc_stride, __m512i isum[ROWS]) {
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++)
        isum[r] = _mm512_setzero_si512();
    for (int j = 0; j < subs; j++) {
        __m512i sum[ROWS];
        sub_block_sums(wq, row, (size_t)b * QK_K, p, j * groups, groups, sum);
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++)
            isum[r] = _mm512_add_epi32(isum[r],
                                       _mm512_mullo_epi32(sum[r], _mm512_set1_epi32(sc[r * sc_stride + j])));
    }
}

// ---------------------------------------------------------------------------------------------
// q4_K and q5_K x q8_K
//
// Per super-block and per (weight row, token): isum = sum over the 8 sub-blocks of scale_j *
// (its exact code products), msum = sum of min_j * (the token's codes of sub-block j summed), and
// the reference's sum += (dy * dx) * float(isum) - (dy * dmin) * float(msum). q5_K's codes take
// their fifth bit from qh (bit 2c of qh[l] for element 64c + l, bit 2c + 1 for 64c + 32 + l).

enum { SUBS = QK_K / 32 };

static VNNI_TARGET void kernel_q45_K(const uint8_t *wq, const ft_gemm_q45_K_scales *ws, const uint8_t *act,
                                     int64_t nb, __m512 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm512_setzero_ps();
    const size_t row = (size_t)nb * QK_K, stride = ft_gemm_q8_K_packed(4, LANES);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
        const ft_gemm_q45_K_scales *w = ws + b * ROWS;
        __m512i isum[ROWS];
        scaled_sums(wq, row, b, p, SUBS, 8, w->sc, sizeof(*w) / sizeof(int32_t), isum);
        const __m512 dy = _mm512_loadu_ps((const float *)(p + K_CODES));
        const __m512i *bs = (const __m512i *)(p + K_CODES + LANES * 4);
        const __m512i bs0 = _mm512_loadu_si512(bs), bs1 = _mm512_loadu_si512(bs + 1);
        const __m512i bs2 = _mm512_loadu_si512(bs + 2), bs3 = _mm512_loadu_si512(bs + 3);
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) {
            __m512i msum = _mm512_madd_epi16(_mm512_set1_epi32((int)w[r].mn[0]), bs0);
            msum = _mm512_add_epi32(msum, _mm512_madd_epi16(_mm512_set1_epi32((int)w[r].mn[1]), bs1));
            msum = _mm512_add_epi32(msum, _mm512_madd_epi16(_mm512_set1_epi32((int)w[r].mn[2]), bs2));
            msum = _mm512_add_epi32(msum, _mm512_madd_epi16(_mm512_set1_epi32((int)w[r].mn[3]), bs3));
            const __m512 t1 =
                _mm512_mul_ps(_mm512_mul_ps(dy, _mm512_set1_ps(w[r].d)), _mm512_cvtepi32_ps(isum[r]));
            const __m512 t2 =
                _mm512_mul_ps(_mm512_mul_ps(dy, _mm512_set1_ps(w[r].dmin)), _mm512_cvtepi32_ps(msum));
            acc[r] = _mm512_add_ps(acc[r], _mm512_sub_ps(t1, t2));
        }
    }
}

VNNI_TARGET void ft_gemm_q4_K_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                   int nc, float *s, size_t ls) {
    if (nc < MIN_TOKENS) {
        ft_gemm_few_q4_K(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    ft_gemm_q45_K_scales *ws;
    GEMM_LOOP(QK_K, (size_t)nb * ft_gemm_q8_K_packed(4, LANES), PACK_Q8_K4, ROWS_Q4_K, kernel_q45_K);
}

// Below 4 tokens the shared per-(row, token) path (the same bits): over 32 experts of 768 x 2048,
// 1 token 3.1 ms against 6.1 ms for a vector, 4 tokens 6.4 ms.
VNNI_TARGET void ft_gemm_q5_K_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                   int nc, float *s, size_t ls) {
    if (nc < 4) {
        ft_gemm_few_q5_K(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    ft_gemm_q45_K_scales *ws;
    GEMM_LOOP(QK_K, (size_t)nb * ft_gemm_q8_K_packed(4, LANES), PACK_Q8_K4, ROWS_Q5_K, kernel_q45_K);
}

// ---------------------------------------------------------------------------------------------
// q6_K x q8_K
//
// Codes 0..63 (the value plus 32) and int8 scales per 16: isum = sum over the 16 sub-blocks of
// scale_j * (its exact code products) - 32 * sum of scale_j * (the token's sum of sub-block j),
// then the reference's sum += (dy * dx) * float(isum). Element 128h + 32k + l takes its low
// four bits from ql[64h + 32(k % 2) + l] (low nibble for k < 2) and its top two from bits
// 2k..2k+1 of qh[32h + l].

enum { SUBS6 = QK_K / 16 };

static VNNI_TARGET void kernel_q6_K(const uint8_t *wq, const ft_gemm_q6_K_scales *ws, const uint8_t *act,
                                    int64_t nb, __m512 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm512_setzero_ps();
    const size_t row = (size_t)nb * QK_K, stride = ft_gemm_q8_K_packed(SUBS6 / 2, LANES);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
        const ft_gemm_q6_K_scales *w = ws + b * ROWS;
        __m512i isum[ROWS];
        scaled_sums(wq, row, b, p, SUBS6, 4, w->sc, sizeof(*w) / sizeof(int32_t), isum);
        const __m512 dy = _mm512_loadu_ps((const float *)(p + K_CODES));
        const __m512i *bs = (const __m512i *)(p + K_CODES + LANES * 4);
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) {
            __m512i osum = _mm512_setzero_si512();
            for (int i = 0; i < SUBS6 / 2; i++)
                osum = _mm512_add_epi32(osum, _mm512_madd_epi16(_mm512_set1_epi32((int)w[r].sc_pair[i]),
                                                                _mm512_loadu_si512(bs + i)));
            const __m512i sumi = _mm512_sub_epi32(isum[r], _mm512_slli_epi32(osum, 5));
            const __m512 t =
                _mm512_mul_ps(_mm512_mul_ps(dy, _mm512_set1_ps(w[r].d)), _mm512_cvtepi32_ps(sumi));
            acc[r] = _mm512_add_ps(acc[r], t);
        }
    }
}

// Below 6 tokens the shared per-(row, token) path (the same bits): measured over 32 experts of
// 768 x 2048, 1 token 4.3 ms against 11.8 ms for a vector, 6 tokens 12.5 ms.
VNNI_TARGET void ft_gemm_q6_K_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                   int nc, float *s, size_t ls) {
    if (nc < 6) {
        ft_gemm_few_q6_K(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    ft_gemm_q6_K_scales *ws;
    GEMM_LOOP(QK_K, (size_t)nb * ft_gemm_q8_K_packed(SUBS6 / 2, LANES), PACK_Q8_K8, ROWS_Q6_K, kernel_q6_K);
}
