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
#include "codec.h"
#include "tables.h"
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

// Token vectors per block of the packing (at least 1).
static int token_block(size_t vector_bytes) {
    size_t v = TOKEN_BLOCK_BYTES / vector_bytes;
    return v < 1 ? 1 : (int)v;
}

// A pass's row r past the call's rows: zero codes (row_bytes) and zero scales (scale_bytes per
// block, at (b * ROWS + r) in the pass's scales).
static void zero_row(uint8_t *q, size_t row_bytes, void *scales, size_t scale_bytes, int r, int64_t nb) {
    memset(q, 0, row_bytes);
    for (int64_t b = 0; b < nb; b++)
        memset((uint8_t *)scales + (size_t)(b * ROWS + r) * scale_bytes, 0, scale_bytes);
}

// The call's token vectors, a block of them packed at a time (PACK(dst, c0): the vector of
// tokens from c0, VBYTES bytes), and its weight rows in passes of ROWS against each vector:
// ROWS_FN unpacks a pass into the row buffers (BLOCK codes a block; the scales at ws, which the
// caller declares), KERNEL computes it against one vector.
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
                    __m512 acc[ROWS];                                                                        \
                    KERNEL(wq, ws, act + (size_t)(v - v0) * vbytes, nb, acc);                                \
                    const int valid = nc - v * LANES < LANES ? nc - v * LANES : LANES;                       \
                    for (int r = 0; r < mr; r++)                                                             \
                        store_lanes(acc[r], s, ls, r0 + r, v * LANES, valid);                                \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    } while (0)

// ---------------------------------------------------------------------------------------------
// q8_0 x q8_0
//
// Packed per (token vector, block): 8 groups of 64 bytes, then -128 * (each token's code sum)
// as int32 (the start of the block's sums), then each token's scale as float.

enum { Q8_GROUPS = QK8_0 / GROUP, Q8_PACKED = Q8_GROUPS * 64 + 2 * LANES * 4 };

// off: the weights' code offset (their codes are value + off), taken off at the block's start.
static VNNI_TARGET void pack_q8_0(uint8_t *dst, const void *y, size_t by, int c0, int nc, int64_t nb, int off) {
    if (c0 + LANES > nc) memset(dst, 0, (size_t)nb * Q8_PACKED); // lanes past the last token
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + (size_t)b * Q8_PACKED;
        int32_t *start = (int32_t *)(p + Q8_GROUPS * 64);
        float *d = (float *)(start + LANES);
        for (int l = 0; l < LANES && c0 + l < nc; l++) {
            const int c = c0 + l;
            const block_q8_0 *yb = (const block_q8_0 *)((const uint8_t *)y + (size_t)c * by) + b;
            int sum = 0;
            for (int k = 0; k < QK8_0; k++)
                sum += yb->qs[k];
            for (int g = 0; g < Q8_GROUPS; g++)
                memcpy(p + g * 64 + l * GROUP, yb->qs + g * GROUP, GROUP);
            start[l] = -off * sum;
            d[l] = ft_fp16_to_fp32(yb->d);
        }
    }
}

// ROWS weight rows from x (rows past nr: zero codes and scales) as codes + 128 and float scales.
static VNNI_TARGET void rows_q8_0(uint8_t *wq, float *wd, const uint8_t *x, size_t bx, int nr, int64_t nb) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int r = 0; r < ROWS; r++) {
        uint8_t *q = wq + (size_t)r * nb * QK8_0;
        if (r >= nr) {
            zero_row(q, (size_t)nb * QK8_0, wd, sizeof(wd[0]), r, nb);
            continue;
        }
        const block_q8_0 *xb = (const block_q8_0 *)(x + (size_t)r * bx);
        for (int64_t b = 0; b < nb; b++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)xb[b].qs);
            _mm256_storeu_si256((__m256i *)(q + b * QK8_0), _mm256_xor_si256(v, flip));
            wd[b * ROWS + r] = _cvtsh_ss(xb[b].d);
        }
    }
}

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
#define PACK_Q8_0(dst, c0) pack_q8_0(dst, y, by, c0, nc, nb, 128)
    GEMM_LOOP(QK8_0, (size_t)nb * Q8_PACKED, PACK_Q8_0, rows_q8_0, kernel_q8_0);
#undef PACK_Q8_0
}

// ---------------------------------------------------------------------------------------------
// q4_0, q5_0, iq4_nl, mxfp4 x q8_0: q8_0's GEMM on each format's codes made unsigned (q4_0: the
// nibble, offset 8; q5_0: nibble and fifth bit, offset 16; iq4_nl and mxfp4: the code book's
// value plus 128) and its block scale as a float, so the exact integer sum is the reference's
// and so are the float steps ((dx * dy) * isum: the products commute exactly). Every token count
// takes the vectors (no few-token path: the same bits, and these formats have none of their own).

// Element j of a 32-element nibble block: qs[j] & 15 for j < 16, qs[j - 16] >> 4 after.
static inline VNNI_TARGET __m256i nibbles32(const uint8_t qs[16]) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m15 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m15), _mm_and_si128(v, m15));
}

// A code book (16 int8 values) plus 128, as a lookup table for _mm256_shuffle_epi8.
static inline VNNI_TARGET __m256i book_plus_128(const int8_t book[16]) {
    const __m128i b = _mm_add_epi8(_mm_loadu_si128((const __m128i *)book), _mm_set1_epi8((char)0x80));
    return _mm256_broadcastsi128_si256(b);
}

// The decoders of ROWS rows (rows past nr: zero codes and scales), each block's 32 unsigned codes
// and float scale.
#define ROWS_32(NAME, BLOCK_T, CODES, SCALE)                                                                \
    static VNNI_TARGET void NAME(uint8_t *wq, float *wd, const uint8_t *x, size_t bx, int nr, int64_t nb) { \
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

ROWS_32(rows_q4_0, block_q4_0, nibbles32(xb[b].qs), _cvtsh_ss(xb[b].d))

// q5_0's fifth bits: bit j of qh for element j, spread to bit 4 of byte j.
static inline VNNI_TARGET __m256i q5_0_codes(const block_q5_0 *b) {
    uint32_t h;
    memcpy(&h, b->qh, sizeof(h));
    const __m256i bits = _mm256_set1_epi32((int)h);
    // byte j of `pick` selects the byte of h holding bit j; the mask then tests its bit
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i hb = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(bits, pick), bit), bit);
    return _mm256_or_si256(nibbles32(b->qs), _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
}
ROWS_32(rows_q5_0, block_q5_0, q5_0_codes(&xb[b]), _cvtsh_ss(xb[b].d))
ROWS_32(rows_iq4_nl, block_iq4_nl, _mm256_shuffle_epi8(book_plus_128(ft_kvalues_iq4nl), nibbles32(xb[b].qs)),
        _cvtsh_ss(xb[b].d))
ROWS_32(rows_mxfp4, block_mxfp4, _mm256_shuffle_epi8(book_plus_128(ft_kvalues_mxfp4), nibbles32(xb[b].qs)),
        ft_e8m0_to_fp32_half(xb[b].e))
#undef ROWS_32

#define GEMM_32(NAME, ROWS_FN, OFF)                                                                          \
    VNNI_TARGET void NAME(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,    \
                          float *s, size_t ls) {                                                           \
        float *ws;                                                                                          \
        const int off = (OFF);                                                                              \
        GEMM_LOOP(32, (size_t)nb * Q8_PACKED, PACK_32, ROWS_FN, kernel_q8_0);                               \
    }
#define PACK_32(dst, c0) pack_q8_0(dst, y, by, c0, nc, nb, off)
GEMM_32(ft_gemm_q4_0_vnni, rows_q4_0, 8)
GEMM_32(ft_gemm_q5_0_vnni, rows_q5_0, 16)
GEMM_32(ft_gemm_iq4_nl_vnni, rows_iq4_nl, 128)
GEMM_32(ft_gemm_mxfp4_vnni, rows_mxfp4, 128)
#undef PACK_32
#undef GEMM_32

// ---------------------------------------------------------------------------------------------
// K-quants x q8_K
//
// Activations, per (token vector, super-block of 256): 64 groups of 64 bytes, each token's scale
// as float, then words of the token's code sums in int16 pairs, which _mm512_madd_epi16 takes
// against a row's int16 pairs of mins or scales: q4_K and q5_K 4 words of sub-block sums of 32
// (2i, 2i + 1; at most 32 * 127 each), q6_K 8 words of the sums of 16 (bsums 2i, 2i + 1).

enum { K_GROUPS = QK_K / GROUP, K_CODES = K_GROUPS * 64 };

static size_t k_packed(int pairs) {
    return K_CODES + LANES * 4 + (size_t)pairs * LANES * 4;
}

static VNNI_TARGET void pack_q8_K(uint8_t *dst, const void *y, size_t by, int c0, int nc, int64_t nb,
                                  int pairs) {
    const size_t stride = k_packed(pairs);
    if (c0 + LANES > nc) memset(dst, 0, (size_t)nb * stride); // lanes past the last token
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + (size_t)b * stride;
        float *d = (float *)(p + K_CODES);
        uint32_t *bsum = (uint32_t *)(d + LANES);
        for (int l = 0; l < LANES && c0 + l < nc; l++) {
            const int c = c0 + l;
            const block_q8_K *yb = (const block_q8_K *)((const uint8_t *)y + (size_t)c * by) + b;
            for (int g = 0; g < K_GROUPS; g++)
                memcpy(p + g * 64 + l * GROUP, yb->qs + g * GROUP, GROUP);
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

// GEMM_LOOP's PACK for the K-quants: the code sums of 32 (q4_K, q5_K) or of 16 (q6_K).
#define PACK_Q8_K4(dst, c0) pack_q8_K(dst, y, by, c0, nc, nb, 4)
#define PACK_Q8_K8(dst, c0) pack_q8_K(dst, y, by, c0, nc, nb, SUBS6 / 2)

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

// Per (super-block, row) of the buffered rows: the 8 sub-block scales (int32, for the
// multiply), the mins in int16 pairs, d and dmin.
typedef struct {
    int32_t sc[SUBS];
    uint32_t mn[4];
    float d, dmin;
} q45_K_row_scales;
_Static_assert(sizeof(q45_K_row_scales) % sizeof(int32_t) == 0, "scales as int32 strides");

// ROWS weight rows from x (rows past nr: zero codes and scales), q4_K (x5 false) or q5_K.
static inline __attribute__((always_inline)) VNNI_TARGET void
rows_q45_K(uint8_t *wq, q45_K_row_scales *ws, const uint8_t *x, size_t bx, int nr, int64_t nb, bool x5) {
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
            q45_K_row_scales *w = &ws[b * ROWS + r];
            uint8_t sc[SUBS], mn[SUBS];
            for (int j = 0; j < SUBS; j++) {
                ft_k4_scale_min(j, scales, &sc[j], &mn[j]);
                w->sc[j] = sc[j];
            }
            for (int i = 0; i < 4; i++)
                w->mn[i] = mn[2 * i] | (uint32_t)mn[2 * i + 1] << 16;
            w->d = _cvtsh_ss(x5 ? b5->d : b4->d);
            w->dmin = _cvtsh_ss(x5 ? b5->dmin : b4->dmin);
        }
    }
}

static VNNI_TARGET void rows_q4_K(uint8_t *wq, q45_K_row_scales *ws, const uint8_t *x, size_t bx, int nr,
                                  int64_t nb) {
    rows_q45_K(wq, ws, x, bx, nr, nb, false);
}

static VNNI_TARGET void rows_q5_K(uint8_t *wq, q45_K_row_scales *ws, const uint8_t *x, size_t bx, int nr,
                                  int64_t nb) {
    rows_q45_K(wq, ws, x, bx, nr, nb, true);
}

static VNNI_TARGET void kernel_q45_K(const uint8_t *wq, const q45_K_row_scales *ws, const uint8_t *act,
                                     int64_t nb, __m512 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm512_setzero_ps();
    const size_t row = (size_t)nb * QK_K, stride = k_packed(4);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
        const q45_K_row_scales *w = ws + b * ROWS;
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
    q45_K_row_scales *ws;
    GEMM_LOOP(QK_K, (size_t)nb * k_packed(4), PACK_Q8_K4, rows_q4_K, kernel_q45_K);
}

// q5_K has no per-(row, token) path: any token count takes the vectors, so the bits never
// depend on the call's count.
VNNI_TARGET void ft_gemm_q5_K_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                   int nc, float *s, size_t ls) {
    q45_K_row_scales *ws;
    GEMM_LOOP(QK_K, (size_t)nb * k_packed(4), PACK_Q8_K4, rows_q5_K, kernel_q45_K);
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

typedef struct {
    int32_t sc[SUBS6];
    uint32_t sc_pair[SUBS6 / 2]; // (scale 2i, scale 2i + 1) as int16
    float d;
} q6_K_row_scales;
_Static_assert(sizeof(q6_K_row_scales) % sizeof(int32_t) == 0, "scales as int32 strides");

static VNNI_TARGET void rows_q6_K(uint8_t *wq, q6_K_row_scales *ws, const uint8_t *x, size_t bx, int nr,
                                  int64_t nb) {
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
                code[0] = _mm256_or_si256(_mm256_and_si256(l1, m15),
                                          _mm256_and_si256(_mm256_slli_epi16(qh, 4), m48));
                code[1] = _mm256_or_si256(_mm256_and_si256(l2, m15),
                                          _mm256_and_si256(_mm256_slli_epi16(qh, 2), m48));
                code[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15),
                                          _mm256_and_si256(qh, m48));
                code[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15),
                                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m48));
                for (int k = 0; k < 4; k++)
                    _mm256_storeu_si256((__m256i *)(q + b * QK_K + 128 * h + 32 * k), code[k]);
            }
            q6_K_row_scales *w = &ws[b * ROWS + r];
            for (int j = 0; j < SUBS6; j++)
                w->sc[j] = xb[b].scales[j];
            for (int i = 0; i < SUBS6 / 2; i++)
                w->sc_pair[i] = (uint16_t)(int16_t)xb[b].scales[2 * i] |
                                (uint32_t)(uint16_t)(int16_t)xb[b].scales[2 * i + 1] << 16;
            w->d = _cvtsh_ss(xb[b].d);
        }
    }
}

static VNNI_TARGET void kernel_q6_K(const uint8_t *wq, const q6_K_row_scales *ws, const uint8_t *act,
                                    int64_t nb, __m512 acc[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        acc[r] = _mm512_setzero_ps();
    const size_t row = (size_t)nb * QK_K, stride = k_packed(SUBS6 / 2);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = act + (size_t)b * stride;
        const q6_K_row_scales *w = ws + b * ROWS;
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

// As q5_K, any token count takes the vectors.
VNNI_TARGET void ft_gemm_q6_K_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                   int nc, float *s, size_t ls) {
    q6_K_row_scales *ws;
    GEMM_LOOP(QK_K, (size_t)nb * k_packed(SUBS6 / 2), PACK_Q8_K8, rows_q6_K, kernel_q6_K);
}
