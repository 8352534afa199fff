// dot_avx2.c: AVX2 dot products of every weight type (see dot.h).
//
// Compiled for AVX2 + FMA + F16C and entered only through ft_quant_ops_find() after the CPUID
// check in ops.c; no other file calls them. Sections: the float formats; the 32-element block
// formats (q8_0 / q8_1 activations); the K-quants and iq4_xs (q8_K activations, whose own
// comment gives their steps); AVX-512 tiles and decode's matrix-vector products for q4_K and
// q8_0, chosen at run time where the CPU has AVX-512BW (and VNNI). Each section's banner gives
// its kernels' steps. Pure functions, thread-safe (the fp16 table is filled once).
#include "dot.h"
#include "quant.h"
#include "codec.h"
#include "fp16.h"
#include "tables.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

// Also compile for AVX2 where the build did not pass -mavx2 (the fuzz build compiles every
// source with one set of flags); the run-time check in ops.c is what guards these functions.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#endif

// ---------------------------------------------------------------------------------------------
// Helpers

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float half(ft_half h) { return _cvtsh_ss(h); }

// Every fp16 value as a float, and every E8M0 exponent as the halved MXFP4 scale. Filled
// once, by the first block kernel to run (from any thread); read-only afterwards.
static float g_half_table[1 << 16];
static float g_e8m0_half_table[256];
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;
static atomic_bool g_tables_ready;

static void tables_fill(void) {
    for (uint32_t h = 0; h < (1u << 16); h++) g_half_table[h] = ft_fp16_to_fp32((ft_half)h);
    for (uint32_t e = 0; e < 256; e++) g_e8m0_half_table[e] = ft_e8m0_to_fp32_half((uint8_t)e);
    atomic_store_explicit(&g_tables_ready, true, memory_order_release);
}

static inline void tables_init(void) {
    if (!atomic_load_explicit(&g_tables_ready, memory_order_acquire))
        pthread_once(&g_tables_once, tables_fill);
}

// a * b broadcast to 8 lanes, from two table entries. Broadcasting each from memory is a
// plain load, which keeps the scale off the shuffle port that the nibble unpacking needs.
static inline __m256 scale_product(const float *a, const float *b) {
    return _mm256_mul_ps(_mm256_broadcast_ss(a), _mm256_broadcast_ss(b));
}

// Byte j is 0xff where bit j of the 32-bit little-endian qh is set, else 0.
static inline __m256i bits_to_bytes(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, sizeof(h));
    // byte j takes byte j / 8 of h, then is tested against bit j % 8
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

static inline __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

// Weights stream from memory at batch 1, where one core's demand loads alone reach about half
// of its share of the bandwidth: each step asks for the lines PREFETCH_AHEAD bytes on, covering
// the bytes the step itself reads (2 KiB beat 0.5, 1 and 4 KiB: docs/performance.md).
enum { PREFETCH_AHEAD = 2048 };
// always_inline: GCC counts a prefetch as no side effect, so it deletes the call of a prefetch
// helper that it has not inlined early (GCC 12 left no prefetch in this file without it).
static inline __attribute__((always_inline)) void prefetch_weights(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PREFETCH_AHEAD + o, _MM_HINT_T0);
}

// 8 int32 partial sums of x . y for unsigned codes x (< 128).
static inline __m256i sums_u8(__m256i x, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

// As sums_u8 for (x - off) . y, where x (< 128) and off are unsigned.
static inline __m256i sums_u8_off(__m256i x, __m256i y, __m256i off) {
    __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(x, y), _mm256_maddubs_epi16(off, y));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// As sums_u8 for signed codes x, through |x| . (y * sign(x)).
static inline __m256i sums_i8(__m256i x, __m256i y) {
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static inline __m256 fma_sums(__m256 d, __m256i sums, __m256 acc) {
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc);
}

// Row c of a tile's activations (rows by bytes apart).
static inline const void *tile_col(const void *y, size_t by, int c) {
    return (const uint8_t *)y + (size_t)c * by;
}

// ---------------------------------------------------------------------------------------------
// Float formats: four 8-lane FMA accumulators over 32 elements per iteration, then 8-lane steps
// and a scalar tail, so any n works.

// One kernel for the three: loads of 8 elements as floats, and a scalar element.
enum float_kind { FLOAT_F32, FLOAT_F16, FLOAT_BF16 };

static inline __m256 load_f16(const ft_half *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

// bf16 is the top half of a float: widen to 32 bits and shift into place.
static inline __m256 load_bf16(const ft_bf16 *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline __m256 load8(enum float_kind k, const void *p, int64_t i) {
    if (k == FLOAT_F32) return _mm256_loadu_ps((const float *)p + i);
    if (k == FLOAT_F16) return load_f16((const ft_half *)p + i);
    return load_bf16((const ft_bf16 *)p + i);
}

static inline float load1(enum float_kind k, const void *p, int64_t i) {
    if (k == FLOAT_F32) return ((const float *)p)[i];
    if (k == FLOAT_F16) return half(((const ft_half *)p)[i]);
    return ft_bf16_to_fp32(((const ft_bf16 *)p)[i]);
}

// Float tiles take 2 columns at most: each column keeps 4 accumulators (the per-row order),
// and 8 of them plus the 4 converted weight vectors fill the 16 registers.
enum { TILE_NC_FLOAT = 2 };

static inline __attribute__((always_inline)) void
tile_float(enum float_kind k, int64_t n, const void *x, const void *vy, size_t by, int nc, float *out) {
    __m256 a[TILE_NC_FLOAT][4];
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++) a[c][0] = a[c][1] = a[c][2] = a[c][3] = _mm256_setzero_ps();
    int64_t i = 0;
    const size_t elem = k == FLOAT_F32 ? 4 : 2;
    for (; i + 32 <= n; i += 32) {
        prefetch_weights((const uint8_t *)x + (size_t)i * elem, 32 * elem);
        __m256 x0 = load8(k, x, i), x1 = load8(k, x, i + 8), x2 = load8(k, x, i + 16), x3 = load8(k, x, i + 24);
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) {
            const void *y = tile_col(vy, by, c);
            a[c][0] = _mm256_fmadd_ps(x0, load8(k, y, i), a[c][0]);
            a[c][1] = _mm256_fmadd_ps(x1, load8(k, y, i + 8), a[c][1]);
            a[c][2] = _mm256_fmadd_ps(x2, load8(k, y, i + 16), a[c][2]);
            a[c][3] = _mm256_fmadd_ps(x3, load8(k, y, i + 24), a[c][3]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 x0 = load8(k, x, i);
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) a[c][0] = _mm256_fmadd_ps(x0, load8(k, tile_col(vy, by, c), i), a[c][0]);
    }
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++) {
        const void *y = tile_col(vy, by, c);
        float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a[c][0], a[c][1]), _mm256_add_ps(a[c][2], a[c][3])));
        for (int64_t j = i; j < n; j++) sum += load1(k, x, j) * load1(k, y, j);
        out[c] = sum;
    }
}

// As TILE_KERNEL (below) for the float formats, in column groups of TILE_NC_FLOAT.
#define TILE_KERNEL_FLOAT(type, KIND)                                                              \
    float ft_vec_dot_##type##_avx2(int64_t n, const void *x, const void *y) {                      \
        float out;                                                                                 \
        tile_float(KIND, n, x, y, 0, 1, &out);                                                     \
        return out;                                                                                \
    }                                                                                              \
    void ft_vec_dot_tile_##type##_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, \
                                       size_t by, int nc, float *s, size_t ls) {                   \
        for (int c0 = 0; c0 < nc; c0 += TILE_NC_FLOAT) {                                           \
            const void *yc = tile_col(y, by, c0);                                                  \
            for (int r = 0; r < nr; r++) {                                                         \
                const void *xr = tile_col(x, bx, r);                                               \
                float o[TILE_NC_FLOAT];                                                            \
                if (nc - c0 >= 2) {                                                                \
                    tile_float(KIND, n, xr, yc, by, 2, o);                                         \
                    s[(size_t)c0 * ls + (size_t)r] = o[0];                                         \
                    s[(size_t)(c0 + 1) * ls + (size_t)r] = o[1];                                   \
                } else {                                                                           \
                    tile_float(KIND, n, xr, yc, by, 1, o);                                         \
                    s[(size_t)c0 * ls + (size_t)r] = o[0];                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

TILE_KERNEL_FLOAT(f32, FLOAT_F32)
TILE_KERNEL_FLOAT(f16, FLOAT_F16)
TILE_KERNEL_FLOAT(bf16, FLOAT_BF16)

// ---------------------------------------------------------------------------------------------
// 32-element block formats. Each format supplies a decoder of the codes of two blocks at a
// time (two blocks' nibbles unpack in one 256-bit register) and where its scale is (an index
// into a table of floats); one loop per activation format, inlined with them, walks the
// blocks. An odd last block is decoded as a pair with itself.
//
// The kernels, two blocks per iteration:
//   1. decode the 32 weight codes of each block into a 256-bit vector of bytes in element
//      order (the nibbles of both blocks unpack in one register);
//   2. multiply them with the 32 int8 activation codes into 16 int16 pair sums
//      (_mm256_maddubs_epi16, unsigned x signed bytes) and widen to 8 int32 sums;
//   3. acc += (d_x * d_y) * float(sums), one 8-lane float accumulator per block of the pair
//      to hide the FMA latency; an odd last block takes the same path, paired with itself.
// Unsigned codes with an offset (q4_0's q - 8, q5_0's q - 16, mxfp4's code book + 12) use
// maddubs(q, y) - maddubs(offset, y), one instruction fewer than the sign trick that signed
// codes (q8_0, iq4_nl) need: |x| . (y * sign(x)). No pair sum can saturate: the largest is
// 2 * 128 * 127 = 32512 < 32767 (activations never hold -128; a weight may).
// The block scales are fp16: converting them is a large share of the work per block, so they
// are read from a 256 KiB table of all 65,536 values (filled on first use) and broadcast
// straight from it.

typedef void (*block_codes_fn)(const void *x0, const void *x1, __m256i *c0, __m256i *c1);
typedef __m256i (*block_sums_fn)(__m256i codes, __m256i y);
typedef unsigned (*block_field_fn)(const void *x);

// The 32 nibbles of each of two q4_0-packed blocks as bytes 0..15, in element order: bytes
// 0..15 the low nibbles of qs[0..15], bytes 16..31 the high nibbles.
static inline void unpack_nibbles2(const uint8_t *qs0, const uint8_t *qs1, __m256i *c0, __m256i *c1) {
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qs0)),
                                           _mm_loadu_si128((const __m128i *)qs1), 1);
    __m256i lo = _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(both, 4), _mm256_set1_epi8(0x0f));
    *c0 = _mm256_permute2x128_si256(lo, hi, 0x20);
    *c1 = _mm256_permute2x128_si256(lo, hi, 0x31);
}

// Tiles: every kernel below computes the dot products of one weight row x with nc (1..4)
// activation rows (by bytes apart) and writes them to out[0..nc); the weight codes of each
// block are decoded once for all nc columns. nc is a constant once inlined (TILE_KERNEL below
// instantiates 1..4), so the per-column arrays live in registers. Each column's arithmetic is
// that of the single dot product (nc = 1), in the same order, so a tile's results equal the
// per-row dot products to the bit.
enum { TILE_NC = 4 };

// Sum over nb blocks of x (block_bytes apart) and each column y of
// table[scale_index(x)] * fp16(y.d) * sums(codes(x), y.qs).
static inline __attribute__((always_inline)) void
tile_blocks_q8_0(int64_t nb, const uint8_t *x, size_t block_bytes, const void *vy, size_t by, int nc,
                 float *out, block_codes_fn codes, block_sums_fn sums, block_field_fn scale_index,
                 const float *table) {
    tables_init();
    __m256 acc0[TILE_NC], acc1[TILE_NC];
    #pragma GCC unroll 4
    for (int c = 0; c < nc; c++) acc0[c] = acc1[c] = _mm256_setzero_ps();
    __m256i c0, c1;
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        const uint8_t *x0 = x + b * block_bytes, *x1 = x0 + block_bytes;
        prefetch_weights(x0, 2 * block_bytes);
        codes(x0, x1, &c0, &c1);
        #pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const block_q8_0 *y = tile_col(vy, by, c);
            __m256 d0 = scale_product(table + scale_index(x0), g_half_table + y[b].d);
            __m256 d1 = scale_product(table + scale_index(x1), g_half_table + y[b + 1].d);
            acc0[c] = fma_sums(d0, sums(c0, load256(y[b].qs)), acc0[c]);
            acc1[c] = fma_sums(d1, sums(c1, load256(y[b + 1].qs)), acc1[c]);
        }
    }
    if (b < nb) {
        const uint8_t *x0 = x + b * block_bytes;
        codes(x0, x0, &c0, &c1);
        #pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const block_q8_0 *y = tile_col(vy, by, c);
            __m256 d0 = scale_product(table + scale_index(x0), g_half_table + y[b].d);
            acc0[c] = fma_sums(d0, sums(c0, load256(y[b].qs)), acc0[c]);
        }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < nc; c++) out[c] = hsum_ps(_mm256_add_ps(acc0[c], acc1[c]));
}

// Sum over nb blocks of x (block_bytes apart) and each column y of
// fp16(d(x)) * fp16(y.d) * (codes(x) . y.qs) + fp16(m(x)) * fp16(y.s): the q8_1 formats,
// whose min term (q8_1's s is d_y * sum(qy)) is summed in scalar alongside.
static inline __attribute__((always_inline)) void
tile_blocks_q8_1(int64_t nb, const uint8_t *x, size_t block_bytes, const void *vy, size_t by, int nc,
                 float *out, block_codes_fn codes, block_field_fn d, block_field_fn m) {
    tables_init();
    const float *t = g_half_table;
    __m256 acc0[TILE_NC], acc1[TILE_NC];
    float min0[TILE_NC], min1[TILE_NC];
    #pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        acc0[c] = acc1[c] = _mm256_setzero_ps();
        min0[c] = min1[c] = 0;
    }
    __m256i c0, c1;
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        const uint8_t *x0 = x + b * block_bytes, *x1 = x0 + block_bytes;
        prefetch_weights(x0, 2 * block_bytes);
        codes(x0, x1, &c0, &c1);
        #pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const block_q8_1 *y = tile_col(vy, by, c);
            __m256 d0 = scale_product(t + d(x0), t + y[b].d);
            __m256 d1 = scale_product(t + d(x1), t + y[b + 1].d);
            acc0[c] = fma_sums(d0, sums_u8(c0, load256(y[b].qs)), acc0[c]);
            acc1[c] = fma_sums(d1, sums_u8(c1, load256(y[b + 1].qs)), acc1[c]);
            min0[c] = fmaf(t[m(x0)], t[y[b].s], min0[c]);
            min1[c] = fmaf(t[m(x1)], t[y[b + 1].s], min1[c]);
        }
    }
    if (b < nb) {
        const uint8_t *x0 = x + b * block_bytes;
        codes(x0, x0, &c0, &c1);
        #pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const block_q8_1 *y = tile_col(vy, by, c);
            __m256 d0 = scale_product(t + d(x0), t + y[b].d);
            acc0[c] = fma_sums(d0, sums_u8(c0, load256(y[b].qs)), acc0[c]);
            min0[c] = fmaf(t[m(x0)], t[y[b].s], min0[c]);
        }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < nc; c++) out[c] = hsum_ps(_mm256_add_ps(acc0[c], acc1[c])) + (min0[c] + min1[c]);
}

// The body of a tile function (parameters n, x, bx, nr, y, by, nc, s, ls) around a tile
// kernel K(n, x, y, by, nc, out): column groups of TILE_NC (a narrower last group), and within
// a group every weight row, so the group's activation rows stay in L1 while the rows pass. The
// switch hands K a constant column count, so the always-inline kernel unrolls for it.
#define TILE_COLUMNS(K)                                                                            \
    for (int c0 = 0; c0 < nc; c0 += TILE_NC) {                                                     \
        int m = nc - c0 < TILE_NC ? nc - c0 : TILE_NC;                                             \
        const void *yc = tile_col(y, by, c0);                                                      \
        for (int r = 0; r < nr; r++) {                                                             \
            const void *xr = tile_col(x, bx, r);                                                   \
            float o[TILE_NC];                                                                      \
            switch (m) {                                                                           \
            case 4: K(n, xr, yc, by, 4, o); break;                                                 \
            case 3: K(n, xr, yc, by, 3, o); break;                                                 \
            case 2: K(n, xr, yc, by, 2, o); break;                                                 \
            default: K(n, xr, yc, by, 1, o); break;                                                \
            }                                                                                      \
            for (int c = 0; c < m; c++) s[(size_t)(c0 + c) * ls + (size_t)r] = o[c];               \
        }                                                                                          \
    }

// Defines, from a tile kernel K, the type's per-row dot product ft_vec_dot_<type>_avx2 (one
// column) and its tile function ft_vec_dot_tile_<type>_avx2 (TILE_COLUMNS).
#define TILE_KERNEL(type, K)                                                                       \
    float ft_vec_dot_##type##_avx2(int64_t n, const void *x, const void *y) {                      \
        float out;                                                                                 \
        K(n, x, y, 0, 1, &out);                                                                    \
        return out;                                                                                \
    }                                                                                              \
    void ft_vec_dot_tile_##type##_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, \
                                       size_t by, int nc, float *s, size_t ls) {                   \
        TILE_COLUMNS(K)                                                                            \
    }

// q4_0: (q - 8) with q a nibble; q4_1: q, with the min term.
static inline void codes_q4_0(const void *x0, const void *x1, __m256i *c0, __m256i *c1) {
    unpack_nibbles2(((const block_q4_0 *)x0)->qs, ((const block_q4_0 *)x1)->qs, c0, c1);
}
static inline __m256i sums_minus8(__m256i c, __m256i y) { return sums_u8_off(c, y, _mm256_set1_epi8(8)); }
static inline unsigned d_q4_0(const void *x) { return ((const block_q4_0 *)x)->d; }

static inline __attribute__((always_inline)) void
tile_q4_0(int64_t n, const void *x, const void *y, size_t by, int nc, float *out) {
    tile_blocks_q8_0(n / QK4_0, x, sizeof(block_q4_0), y, by, nc, out, codes_q4_0, sums_minus8, d_q4_0, g_half_table);
}
TILE_KERNEL(q4_0, tile_q4_0)

static inline void codes_q4_1(const void *x0, const void *x1, __m256i *c0, __m256i *c1) {
    unpack_nibbles2(((const block_q4_1 *)x0)->qs, ((const block_q4_1 *)x1)->qs, c0, c1);
}
static inline unsigned d_q4_1(const void *x) { return ((const block_q4_1 *)x)->d; }
static inline unsigned m_q4_1(const void *x) { return ((const block_q4_1 *)x)->m; }

static inline __attribute__((always_inline)) void
tile_q4_1(int64_t n, const void *x, const void *y, size_t by, int nc, float *out) {
    tile_blocks_q8_1(n / QK4_1, x, sizeof(block_q4_1), y, by, nc, out, codes_q4_1, d_q4_1, m_q4_1);
}
TILE_KERNEL(q4_1, tile_q4_1)

// q5_0: (q - 16) with the fifth bit of q from qh; q5_1: q, with the min term.
static inline __m256i fifth_bits(const uint8_t *qh) {
    return _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
}

static inline void codes_q5_0(const void *vx0, const void *vx1, __m256i *c0, __m256i *c1) {
    const block_q5_0 *x0 = vx0, *x1 = vx1;
    unpack_nibbles2(x0->qs, x1->qs, c0, c1);
    *c0 = _mm256_or_si256(*c0, fifth_bits(x0->qh));
    *c1 = _mm256_or_si256(*c1, fifth_bits(x1->qh));
}
static inline __m256i sums_minus16(__m256i c, __m256i y) { return sums_u8_off(c, y, _mm256_set1_epi8(16)); }
static inline unsigned d_q5_0(const void *x) { return ((const block_q5_0 *)x)->d; }

static inline __attribute__((always_inline)) void
tile_q5_0(int64_t n, const void *x, const void *y, size_t by, int nc, float *out) {
    tile_blocks_q8_0(n / QK5_0, x, sizeof(block_q5_0), y, by, nc, out, codes_q5_0, sums_minus16, d_q5_0, g_half_table);
}
TILE_KERNEL(q5_0, tile_q5_0)

static inline void codes_q5_1(const void *vx0, const void *vx1, __m256i *c0, __m256i *c1) {
    const block_q5_1 *x0 = vx0, *x1 = vx1;
    unpack_nibbles2(x0->qs, x1->qs, c0, c1);
    *c0 = _mm256_or_si256(*c0, fifth_bits(x0->qh));
    *c1 = _mm256_or_si256(*c1, fifth_bits(x1->qh));
}
static inline unsigned d_q5_1(const void *x) { return ((const block_q5_1 *)x)->d; }
static inline unsigned m_q5_1(const void *x) { return ((const block_q5_1 *)x)->m; }

static inline __attribute__((always_inline)) void
tile_q5_1(int64_t n, const void *x, const void *y, size_t by, int nc, float *out) {
    tile_blocks_q8_1(n / QK5_1, x, sizeof(block_q5_1), y, by, nc, out, codes_q5_1, d_q5_1, m_q5_1);
}
TILE_KERNEL(q5_1, tile_q5_1)

// q8_0: the codes as they are, signed.
static inline void codes_q8_0(const void *x0, const void *x1, __m256i *c0, __m256i *c1) {
    *c0 = load256(((const block_q8_0 *)x0)->qs);
    *c1 = load256(((const block_q8_0 *)x1)->qs);
}
static inline unsigned d_q8_0(const void *x) { return ((const block_q8_0 *)x)->d; }

static inline __attribute__((always_inline)) void
tile_q8_0(int64_t n, const void *x, const void *y, size_t by, int nc, float *out) {
    tile_blocks_q8_0(n / QK8_0, x, sizeof(block_q8_0), y, by, nc, out, codes_q8_0, sums_i8, d_q8_0, g_half_table);
}
TILE_KERNEL(q8_0, tile_q8_0)

// iq4_nl and mxfp4: a byte shuffle looks the nibbles up in the 16-entry code book (broadcast
// to both 128-bit lanes, as vpshufb indexes within a lane).
static inline __m256i load_book(const int8_t *book) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)book));
}

static inline void codes_iq4_nl(const void *x0, const void *x1, __m256i *c0, __m256i *c1) {
    const __m256i book = load_book(ft_kvalues_iq4nl);
    unpack_nibbles2(((const block_iq4_nl *)x0)->qs, ((const block_iq4_nl *)x1)->qs, c0, c1);
    *c0 = _mm256_shuffle_epi8(book, *c0);
    *c1 = _mm256_shuffle_epi8(book, *c1);
}
static inline unsigned d_iq4_nl(const void *x) { return ((const block_iq4_nl *)x)->d; }

static inline __attribute__((always_inline)) void
tile_iq4_nl(int64_t n, const void *x, const void *y, size_t by, int nc, float *out) {
    tile_blocks_q8_0(n / QK4_NL, x, sizeof(block_iq4_nl), y, by, nc, out, codes_iq4_nl, sums_i8, d_iq4_nl, g_half_table);
}
TILE_KERNEL(iq4_nl, tile_iq4_nl)

// mxfp4: the code book plus 12 is unsigned (0..24), so the offset form applies.
static const int8_t k_mxfp4_plus12[16] = {
    12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
};

static inline void codes_mxfp4(const void *x0, const void *x1, __m256i *c0, __m256i *c1) {
    const __m256i book = load_book(k_mxfp4_plus12);
    unpack_nibbles2(((const block_mxfp4 *)x0)->qs, ((const block_mxfp4 *)x1)->qs, c0, c1);
    *c0 = _mm256_shuffle_epi8(book, *c0);
    *c1 = _mm256_shuffle_epi8(book, *c1);
}
static inline __m256i sums_minus12(__m256i c, __m256i y) { return sums_u8_off(c, y, _mm256_set1_epi8(12)); }
static inline unsigned e_mxfp4(const void *x) { return ((const block_mxfp4 *)x)->e; }

static inline __attribute__((always_inline)) void
tile_mxfp4(int64_t n, const void *x, const void *y, size_t by, int nc, float *out) {
    tile_blocks_q8_0(n / QK_MXFP4, x, sizeof(block_mxfp4), y, by, nc, out, codes_mxfp4, sums_minus12, e_mxfp4, g_e8m0_half_table);
}
TILE_KERNEL(mxfp4, tile_mxfp4)

// ---------------------------------------------------------------------------------------------
// K-quants and iq4_xs with q8_K activations, one 256-element super-block per iteration:
//   1. decode the sub-block scales into int16 lanes laid out so that one byte shuffle
//      (bcast16) broadcasts a sub-block's scale;
//   2. per 32 weights: decode the codes to unsigned bytes, maddubs them with the int8
//      activations (the largest pair sum, 2 * 63 * 127, cannot saturate), and madd the pair
//      sums with the scales, which applies the scale and widens to int32 in one instruction;
//      the integer sums of a super-block are exact;
//   3. the offsets and mins (q2_K/q4_K/q5_K mins, q3_K's -4, q6_K's -32) never touch the
//      codes: they are scales times the activation sums of 16 (bsums), one madd per
//      super-block;
//   4. acc += d * float(int sums) in an 8-lane float vector; one horizontal sum at the end.
// Two int32 accumulators per super-block keep the adds off one dependency chain. Layout of
// the codes and scales: see the comments in dot_ref.c.

// Row j of this table, as a vpshufb control, copies int16 element j of each 128-bit lane to
// all 8 int16 elements of that lane.
#define BC2(j) 2 * (j), 2 * (j) + 1
#define BC8(j) BC2(j), BC2(j), BC2(j), BC2(j)
#define BC32(j) {BC8(j), BC8(j), BC8(j), BC8(j)}
_Alignas(32) static const uint8_t k_bcast16[8][32] = {
    BC32(0), BC32(1), BC32(2), BC32(3), BC32(4), BC32(5), BC32(6), BC32(7),
};
#undef BC2
#undef BC8
#undef BC32

// Element j of each lane of s, broadcast within the lane.
static inline __m256i bcast16(__m256i s, int j) {
    return _mm256_shuffle_epi8(s, load256(k_bcast16[j]));
}

// The 16 int8 scales of 16-element sub-blocks, widened to int16 with the even sub-blocks in
// the low lane and the odd ones in the high lane. The 32 weights at offset 32 * g cover
// sub-blocks 2g and 2g + 1, which maddubs leaves in the low and high lane: bcast16(s, g)
// gives each lane its scale.
static inline __m256i scales16_even_odd(__m128i sc8) {
    const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, even_odd));
}

// sum += (pair sums p16) * (scale lanes), widened to int32.
static inline __m256i madd_acc(__m256i sum, __m256i scale, __m256i p16) {
    return _mm256_add_epi32(sum, _mm256_madd_epi16(scale, p16));
}

// ---------------------------------------------------------------------------------------------
// q2_K: codes 0..3 in 2-bit fields; scale nibble and min nibble per 16 weights.

float ft_vec_dot_q2_K_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q2_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m15 = _mm_set1_epi8(0x0f);
    tables_init();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = y[b].d * g_half_table[x[b].d];
        const float dmin = y[b].d * g_half_table[x[b].dmin];
        const __m128i sm = _mm_loadu_si128((const __m128i *)x[b].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m15));
        const __m256i msum = _mm256_madd_epi16(mins, load256(y[b].bsums));
        const __m256i scales = scales16_even_odd(_mm_and_si128(sm, m15));
        const int8_t *q8 = y[b].qs;
        __m256i sum0 = _mm256_setzero_si256(), sum1 = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i q2 = load256(x[b].qs + 32 * h);
            __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(q2, m3), load256(q8));
            __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q2, 2), m3),
                                              load256(q8 + 32));
            __m256i p2 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q2, 4), m3),
                                              load256(q8 + 64));
            __m256i p3 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q2, 6), m3),
                                              load256(q8 + 96));
            sum0 = madd_acc(sum0, bcast16(scales, 4 * h + 0), p0);
            sum1 = madd_acc(sum1, bcast16(scales, 4 * h + 1), p1);
            sum0 = madd_acc(sum0, bcast16(scales, 4 * h + 2), p2);
            sum1 = madd_acc(sum1, bcast16(scales, 4 * h + 3), p3);
            q8 += 128;
        }
        const __m256i sumi = _mm256_add_epi32(sum0, sum1);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(msum), acc);
    }
    return hsum_ps(acc);
}

// ---------------------------------------------------------------------------------------------
// q3_K: the code is lo + 4 * hbit - 4 with lo in 2-bit fields and hbit in hmask. The kernel
// multiplies the unsigned lo + 4 * hbit (0..7) and subtracts 4 * scale * bsum per sub-block.

// The 16 signed scales (value - 32) as int8, in sub-block order.
static inline __m128i scales_q3_K(const uint8_t s[12]) {
    uint32_t hw;
    memcpy(&hw, s + 8, sizeof(hw));
    __m128i lo8 = _mm_loadl_epi64((const __m128i *)s);
    // bytes 0..7: low nibbles of s[0..7]; bytes 8..15: their high nibbles
    __m128i lo = _mm_unpacklo_epi64(lo8, _mm_srli_epi16(lo8, 4));
    lo = _mm_and_si128(lo, _mm_set1_epi8(0x0f));
    // byte j: bits 2(j/4)..2(j/4)+1 of s[8 + j % 4]
    __m128i hi = _mm_srlv_epi32(_mm_set1_epi32((int)hw), _mm_setr_epi32(0, 2, 4, 6));
    hi = _mm_and_si128(hi, _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

// 4 where bit `bit` of each byte of h is set, else 0. 16-bit shifts are safe: the mask keeps
// only a bit that came from the same byte.
static inline __m256i hbit_times4(__m256i h, int bit) {
    const __m256i m4 = _mm256_set1_epi8(4);
    if (bit <= 2) return _mm256_and_si256(_mm256_slli_epi16(h, 2 - bit), m4);
    return _mm256_and_si256(_mm256_srli_epi16(h, bit - 2), m4);
}

float ft_vec_dot_q3_K_avx2(int64_t n, const void *vx, const void *vy) {
    const block_q3_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    tables_init();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = y[b].d * g_half_table[x[b].d];
        const __m128i sc8 = scales_q3_K(x[b].scales);
        const __m256i scales = scales16_even_odd(sc8);
        // 4 * sum_j scale_j * bsum_j: the -4 of every code
        const __m256i offset = _mm256_slli_epi32(
            _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), load256(y[b].bsums)), 2);
        const __m256i hbits = load256(x[b].hmask);
        const int8_t *q8 = y[b].qs;
        __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i q3 = load256(x[b].qs + 32 * h);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q3, 2 * k), m3);
                __m256i code = _mm256_or_si256(lo, hbit_times4(hbits, 4 * h + k));
                __m256i p = _mm256_maddubs_epi16(code, load256(q8 + 32 * k));
                sum[k % 2] = madd_acc(sum[k % 2], bcast16(scales, 4 * h + k), p);
            }
            q8 += 128;
        }
        const __m256i sumi = _mm256_sub_epi32(_mm256_add_epi32(sum[0], sum[1]), offset);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

// ---------------------------------------------------------------------------------------------
// q4_K / q5_K: 8 sub-blocks of 32 with 6-bit scales and mins.

// The packed scales and mins as 16 bytes: bytes 0..7 the scales, 8..15 the mins. Reads 16
// bytes from s (the 12 scale bytes and the first 4 code bytes, which are ignored). As 32-bit
// words s0, s1, s2: scales 0..3 = s0 & 0x3f.., scales 4..7 = (s2 & 0x0f..) | top two bits of
// s0's bytes, mins 0..3 = s1 & 0x3f.., mins 4..7 = (s2 >> 4 & 0x0f..) | top two bits of s1's.
static inline __m128i scales_mins_k4(const uint8_t *s) {
    __m128i v = _mm_loadu_si128((const __m128i *)s);
    __m128i low = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); // s0 s2 s1 s2
    low = _mm_srlv_epi32(low, _mm_setr_epi32(0, 0, 0, 4));
    low = _mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i top = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); // s0 s0 s1 s1
    // bits 6..7 of each byte to bits 4..5, only in words 1 and 3
    top = _mm_and_si128(_mm_srli_epi32(top, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(low, top);
}

// Shared by q4_K and q5_K: exactly one of x4, x5 is non-NULL (a constant once inlined).
static inline __attribute__((always_inline)) void
tile_q45_K(int64_t n, const block_q4_K *x4, const block_q5_K *x5, const void *vy, size_t by, int nc,
           float *out) {
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    const __m256i m16 = _mm256_set1_epi8(0x10);
    tables_init();
    __m256 acc[TILE_NC];
    __m128 accm[TILE_NC];
    #pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        acc[c] = _mm256_setzero_ps();
        accm[c] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < n / QK_K; b++) {
        if (x4) prefetch_weights(x4 + b, sizeof(block_q4_K));
        else prefetch_weights(x5 + b, sizeof(block_q5_K));
        const float dx = g_half_table[x4 ? x4[b].d : x5[b].d];
        const float dminx = g_half_table[x4 ? x4[b].dmin : x5[b].dmin];
        const __m128i sm = scales_mins_k4(x4 ? x4[b].scales : x5[b].scales);
        const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        // the 8 scales as int16 in both lanes
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const uint8_t *qs = x4 ? x4[b].qs : x5[b].qs;
        const __m256i qh = x5 ? load256(x5[b].qh) : _mm256_setzero_si256();
        __m256i sum0[TILE_NC], sum1[TILE_NC];
        #pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const block_q8_K *y = (const block_q8_K *)tile_col(vy, by, c) + b;
            // mins . (sums of 32 activations): bsums added in pairs
            const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums),
                                              _mm_loadu_si128((const __m128i *)y->bsums + 1));
            const __m128i msum = _mm_madd_epi16(mins, bs);
            accm[c] = _mm_fmadd_ps(_mm_set1_ps(y->d * dminx), _mm_cvtepi32_ps(msum), accm[c]);
            sum0[c] = sum1[c] = _mm256_setzero_si256();
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i q4 = load256(qs + 32 * k);
            __m256i lo = _mm256_and_si256(q4, m15);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m15);
            if (x5) {
                // bit 2k (low nibbles) and 2k + 1 (high nibbles) of qh become bit 4
                __m256i hl = 2 * k <= 4 ? _mm256_slli_epi16(qh, 4 - 2 * k)
                                        : _mm256_srli_epi16(qh, 2 * k - 4);
                __m256i hh = 2 * k + 1 <= 4 ? _mm256_slli_epi16(qh, 3 - 2 * k)
                                            : _mm256_srli_epi16(qh, 2 * k - 3);
                lo = _mm256_or_si256(lo, _mm256_and_si256(hl, m16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(hh, m16));
            }
            const __m256i sl = bcast16(scales, 2 * k), sh = bcast16(scales, 2 * k + 1);
            #pragma GCC unroll 4
            for (int c = 0; c < nc; c++) {
                const int8_t *q8 = ((const block_q8_K *)tile_col(vy, by, c) + b)->qs;
                __m256i pl = _mm256_maddubs_epi16(lo, load256(q8 + 64 * k));
                __m256i ph = _mm256_maddubs_epi16(hi, load256(q8 + 64 * k + 32));
                sum0[c] = madd_acc(sum0[c], sl, pl);
                sum1[c] = madd_acc(sum1[c], sh, ph);
            }
        }
        #pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const float d = ((const block_q8_K *)tile_col(vy, by, c) + b)->d * dx;
            const __m256i sumi = _mm256_add_epi32(sum0[c], sum1[c]);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        __m128 m = _mm_add_ps(accm[c], _mm_movehl_ps(accm[c], accm[c]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[c] = hsum_ps(acc[c]) - _mm_cvtss_f32(m);
    }
}

static inline __attribute__((always_inline)) void
tile_q4_K(int64_t n, const void *x, const void *y, size_t by, int nc, float *out) {
    tile_q45_K(n, x, NULL, y, by, nc, out);
}
TILE_KERNEL(q4_K, tile_q4_K)

static inline __attribute__((always_inline)) void
tile_q5_K(int64_t n, const void *x, const void *y, size_t by, int nc, float *out) {
    tile_q45_K(n, NULL, x, y, by, nc, out);
}
TILE_KERNEL(q5_K, tile_q5_K)

// ---------------------------------------------------------------------------------------------
// q6_K: unsigned 6-bit codes (value + 32) and int8 scales per 16; the -32 is subtracted as
// 32 * sum_j scale_j * bsum_j.

static inline __attribute__((always_inline)) void
tile_q6_K(int64_t n, const void *vx, const void *vy, size_t by, int nc, float *out) {
    const block_q6_K *x = vx;
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    const __m256i m48 = _mm256_set1_epi8(0x30);
    tables_init();
    __m256 acc[TILE_NC];
    #pragma GCC unroll 4
    for (int c = 0; c < nc; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        prefetch_weights(x + b, sizeof(block_q6_K));
        const float dx = g_half_table[x[b].d];
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[b].scales);
        const __m256i scales = scales16_even_odd(sc8);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        __m256i sum0[TILE_NC], sum1[TILE_NC];
        #pragma GCC unroll 4
        for (int c = 0; c < nc; c++) sum0[c] = sum1[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i l1 = load256(x[b].ql + 64 * h);
            const __m256i l2 = load256(x[b].ql + 64 * h + 32);
            const __m256i qh = load256(x[b].qh + 32 * h);
            // bits 2k..2k+1 of qh become bits 4..5 of code k
            __m256i code[4];
            code[0] = _mm256_or_si256(_mm256_and_si256(l1, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m48));
            code[1] = _mm256_or_si256(_mm256_and_si256(l2, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m48));
            code[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15), _mm256_and_si256(qh, m48));
            code[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15),
                                      _mm256_and_si256(_mm256_srli_epi16(qh, 2), m48));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i sk = bcast16(scales, 4 * h + k);
                #pragma GCC unroll 4
                for (int c = 0; c < nc; c++) {
                    const int8_t *q8 = ((const block_q8_K *)tile_col(vy, by, c) + b)->qs + 128 * h;
                    __m256i p = _mm256_maddubs_epi16(code[k], load256(q8 + 32 * k));
                    if (k % 2 == 0)
                        sum0[c] = madd_acc(sum0[c], sk, p);
                    else
                        sum1[c] = madd_acc(sum1[c], sk, p);
                }
            }
        }
        #pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const block_q8_K *y = (const block_q8_K *)tile_col(vy, by, c) + b;
            // 32 * sum_j scale_j * bsum_j: the -32 of every code
            const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(y->bsums)), 5);
            const __m256i sumi = _mm256_sub_epi32(_mm256_add_epi32(sum0[c], sum1[c]), offset);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dx), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < nc; c++) out[c] = hsum_ps(acc[c]);
}
TILE_KERNEL(q6_K, tile_q6_K)

// ---------------------------------------------------------------------------------------------
// iq4_xs: iq4_nl code book lookups, 8 sub-blocks of 32 with 6-bit scales offset by 32.

float ft_vec_dot_iq4_xs_avx2(int64_t n, const void *vx, const void *vy) {
    const block_iq4_xs *x = vx;
    const block_q8_K *y = vy;
    const __m256i book = load_book(ft_kvalues_iq4nl);
    tables_init();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = g_half_table[x[b].d] * y[b].d;
        // scale ib: nibble ib of scales_l (as a 32-bit word), 2-bit field ib of scales_h
        uint32_t sl;
        memcpy(&sl, x[b].scales_l, sizeof(sl));
        __m256i lo = _mm256_srlv_epi32(_mm256_set1_epi32((int)sl),
                                       _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
        __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(x[b].scales_h),
                                       _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
        hi = _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4);
        __m256i ls = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(15)), hi);
        ls = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
        // int16 scales 0..7 in both lanes
        const __m256i scales = _mm256_permute4x64_epi64(_mm256_packs_epi32(ls, ls), 0x88);
        const uint8_t *qs = x[b].qs;
        const int8_t *q8 = y[b].qs;
        __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
        for (int ib = 0; ib < 8; ib += 2) {
            __m256i c[2];
            unpack_nibbles2(qs + 16 * ib, qs + 16 * ib + 16, &c[0], &c[1]);
            for (int k = 0; k < 2; k++) {
                // signed codes: |x| . (y * sign(x)), as in sums_i8
                __m256i code = _mm256_shuffle_epi8(book, c[k]);
                __m256i q = load256(q8 + 32 * (ib + k));
                __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(code, code), _mm256_sign_epi8(q, code));
                sum[k] = madd_acc(sum[k], bcast16(scales, ib + k), p);
            }
        }
        const __m256i sumi = _mm256_add_epi32(sum[0], sum[1]);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

// ---------------------------------------------------------------------------------------------
// AVX-512 (BW) tiles, chosen at run time where the CPU has AVX-512BW (ops.c). They reuse the
// AVX2 helpers above and give bit-identical results: every integer sum is exact whatever the
// vector width, and the 512-bit lanes are folded back onto the 256-bit kernel's 8 lanes before
// the first float operation, which then runs in the same order.

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

// Decode's matrix-vector products (tiles of one activation row) take several weight rows per
// pass over the blocks, sharing each block's activation loads, and prefetch the rows of a
// later pass. q8_0: MV_ROWS rows, prefetching the next pass. q4_K: Q4K_MV_ROWS rows,
// prefetching Q4K_PREFETCH_ROWS rows on: the pair that bench_cpu_moe found fastest
// (docs/performance.md); -DFT_Q4K_MV_ROWS and -DFT_Q4K_PREFETCH_ROWS try others.
enum { MV_ROWS = 4 };
#ifdef FT_Q4K_MV_ROWS
enum { Q4K_MV_ROWS = FT_Q4K_MV_ROWS };
#else
enum { Q4K_MV_ROWS = 2 };
#endif
#ifdef FT_Q4K_PREFETCH_ROWS
enum { Q4K_PREFETCH_ROWS = FT_Q4K_PREFETCH_ROWS };
#else
enum { Q4K_PREFETCH_ROWS = 8 };
#endif
_Static_assert(Q4K_MV_ROWS >= 1 && (int)Q4K_MV_ROWS <= (int)MV_ROWS, "q4_K decode takes 1..MV_ROWS rows per pass");

// The body of a decode tile (parameters n, x, bx, nr, y, s) around a matvec K(n, x, bx, rows, y,
// out) of up to 4 rows: passes of ROWS rows, then the last rows in one pass whose count the
// switch makes a constant, so the always-inline K unrolls for it.
#define MATVEC_ROW_GROUPS(K, ROWS)                                                                 \
    do {                                                                                           \
        int r_ = 0;                                                                                \
        for (; r_ + (ROWS) <= nr; r_ += (ROWS)) K(n, tile_col(x, bx, r_), bx, (ROWS), y, s + r_);  \
        switch (nr - r_) {                                                                         \
        case 3: K(n, tile_col(x, bx, r_), bx, 3, y, s + r_); break;                                \
        case 2: K(n, tile_col(x, bx, r_), bx, 2, y, s + r_); break;                                \
        case 1: K(n, tile_col(x, bx, r_), bx, 1, y, s + r_); break;                                \
        default: break;                                                                            \
        }                                                                                          \
    } while (0)

// The cache lines of the bytes at p (a row's blocks of this step) ahead bytes later.
static inline __attribute__((always_inline)) void prefetch_next_pass(const void *p, size_t ahead, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + ahead + o, _MM_HINT_T0);
}

// q4_K, one 512-bit step per 64 weights: the low nibbles (elements 0..31 of the step) in the
// low half and the high nibbles (32..63) in the high half match 64 consecutive activation
// bytes; maddubs, then madd with [scale 2k x16 | scale 2k+1 x16], and lane l + lane l + 8 is
// the 256-bit kernel's sum0 + sum1 lane l.
static inline __attribute__((always_inline)) AVX512_TARGET void
tile512_q4_K(int64_t n, const void *vx, const void *vy, size_t by, int nc, float *out) {
    const block_q4_K *x = vx;
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    tables_init();
    __m256 acc[TILE_NC];
    __m128 accm[TILE_NC];
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        acc[c] = _mm256_setzero_ps();
        accm[c] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < n / QK_K; b++) {
        prefetch_weights(x + b, sizeof(block_q4_K));
        const float dx = g_half_table[x[b].d];
        const float dminx = g_half_table[x[b].dmin];
        const __m128i sm = scales_mins_k4(x[b].scales);
        const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        __m512i sum[TILE_NC];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const block_q8_K *y = (const block_q8_K *)tile_col(vy, by, c) + b;
            const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums),
                                              _mm_loadu_si128((const __m128i *)y->bsums + 1));
            const __m128i msum = _mm_madd_epi16(mins, bs);
            accm[c] = _mm_fmadd_ps(_mm_set1_ps(y->d * dminx), _mm_cvtepi32_ps(msum), accm[c]);
            sum[c] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i q4 = load256(x[b].qs + 32 * k);
            const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q4, m15)),
                                                 _mm256_and_si256(_mm256_srli_epi16(q4, 4), m15), 1);
            // int16 lanes 0..15: scale 2k; 16..31: scale 2k + 1
            const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * k)),
                                                   _mm256_set1_epi16((short)(2 * k + 1)), 1);
            const __m512i sc = _mm512_permutexvar_epi16(idx, sc16);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) {
                const int8_t *q8 = ((const block_q8_K *)tile_col(vy, by, c) + b)->qs;
                __m512i p = _mm512_maddubs_epi16(w, _mm512_loadu_si512((const void *)(q8 + 64 * k)));
                sum[c] = _mm512_add_epi32(sum[c], _mm512_madd_epi16(sc, p));
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const float d = ((const block_q8_K *)tile_col(vy, by, c) + b)->d * dx;
            const __m256i sumi = _mm256_add_epi32(_mm512_castsi512_si256(sum[c]), _mm512_extracti64x4_epi64(sum[c], 1));
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        __m128 m = _mm_add_ps(accm[c], _mm_movehl_ps(accm[c], accm[c]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[c] = hsum_ps(acc[c]) - _mm_cvtss_f32(m);
    }
}

// q4_K decode matvec with AVX-512BW: Q4K_MV_ROWS weight rows per pass, so each block's activation
// codes and sums are loaded once for all of them. Each row's arithmetic is tile512_q4_K's with
// one column, in its order, so the results equal the AVX2 kernel's to the bit.

// out[r] = x_r . y for the nr (1..Q4K_MV_ROWS) weight rows x_r = x + r * bx.
static inline __attribute__((always_inline)) AVX512_TARGET void
matvec512_q4_K(int64_t n, const uint8_t *x, size_t bx, int nr, const block_q8_K *y, float *out) {
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    tables_init();
    __m256 acc[MV_ROWS];
    __m128 accm[MV_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_setzero_ps();
        accm[r] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < n / QK_K; b++) {
        const block_q8_K *yb = y + b;
        const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)yb->bsums),
                                          _mm_loadu_si128((const __m128i *)yb->bsums + 1));
        __m512i sc16[MV_ROWS], sum[MV_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const block_q4_K *xb = (const block_q4_K *)(x + (size_t)r * bx) + b;
            prefetch_next_pass(xb, Q4K_PREFETCH_ROWS * bx, sizeof(block_q4_K));
            const __m128i sm = scales_mins_k4(xb->scales);
            const __m128i msum = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)), bs);
            accm[r] = _mm_fmadd_ps(_mm_set1_ps(yb->d * g_half_table[xb->dmin]), _mm_cvtepi32_ps(msum), accm[r]);
            sc16[r] = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
            sum[r] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i q8 = _mm512_loadu_si512((const void *)(yb->qs + 64 * k));
            // int16 lanes 0..15: scale 2k; 16..31: scale 2k + 1
            const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * k)),
                                                   _mm256_set1_epi16((short)(2 * k + 1)), 1);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) {
                const block_q4_K *xb = (const block_q4_K *)(x + (size_t)r * bx) + b;
                const __m256i q4 = load256(xb->qs + 32 * k);
                const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q4, m15)),
                                                     _mm256_and_si256(_mm256_srli_epi16(q4, 4), m15), 1);
                const __m512i p = _mm512_maddubs_epi16(w, q8);
                sum[r] = _mm512_add_epi32(sum[r], _mm512_madd_epi16(_mm512_permutexvar_epi16(idx, sc16[r]), p));
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const block_q4_K *xb = (const block_q4_K *)(x + (size_t)r * bx) + b;
            const float d = yb->d * g_half_table[xb->d];
            const __m256i sumi = _mm256_add_epi32(_mm512_castsi512_si256(sum[r]), _mm512_extracti64x4_epi64(sum[r], 1));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) {
        __m128 m = _mm_add_ps(accm[r], _mm_movehl_ps(accm[r], accm[r]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[r] = hsum_ps(acc[r]) - _mm_cvtss_f32(m);
    }
}

AVX512_TARGET void ft_vec_dot_tile_q4_K_avx512(int64_t n, const void *x, size_t bx, int nr, const void *y,
                                               size_t by, int nc, float *s, size_t ls) {
    if (nc == 1) { // decode: several rows per pass (below)
        MATVEC_ROW_GROUPS(matvec512_q4_K, Q4K_MV_ROWS);
        return;
    }
    TILE_COLUMNS(tile512_q4_K)
}

// q8_0, two blocks per 512-bit step: block b in the low half, b + 1 in the high half, so the
// float accumulator's halves are the 256-bit kernel's acc0 and acc1. AVX-512 has no byte
// sign instruction: |x| . (y negated where x < 0) is the same product (x = 0 contributes 0
// either way).
static inline __attribute__((always_inline)) AVX512_TARGET __m512i load2x256(const void *a, const void *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(load256(a)), load256(b), 1);
}

static inline __attribute__((always_inline)) AVX512_TARGET void
tile512_q8_0(int64_t n, const void *vx, const void *vy, size_t by, int nc, float *out) {
    const block_q8_0 *x = vx;
    const int64_t nb = n / QK8_0;
    const __m512i ones = _mm512_set1_epi16(1);
    tables_init();
    __m512 acc[TILE_NC];
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        prefetch_weights(x + b, 2 * sizeof(block_q8_0));
        const __m512i xq = load2x256(x[b].qs, x[b + 1].qs);
        const __m512i ax = _mm512_abs_epi8(xq);
        const __mmask64 neg = _mm512_movepi8_mask(xq);
        const float dx0 = g_half_table[x[b].d], dx1 = g_half_table[x[b + 1].d];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const block_q8_0 *y = tile_col(vy, by, c);
            __m512i yq = load2x256(y[b].qs, y[b + 1].qs);
            yq = _mm512_mask_sub_epi8(yq, neg, _mm512_setzero_si512(), yq);
            __m512i sums = _mm512_madd_epi16(_mm512_maddubs_epi16(ax, yq), ones);
            __m512 d = _mm512_insertf32x8(_mm512_set1_ps(dx0 * g_half_table[y[b].d]),
                                          _mm256_set1_ps(dx1 * g_half_table[y[b + 1].d]), 1);
            acc[c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sums), acc[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        __m256 acc0 = _mm512_castps512_ps256(acc[c]), acc1 = _mm512_extractf32x8_ps(acc[c], 1);
        if (b < nb) {
            const block_q8_0 *y = tile_col(vy, by, c);
            const __m256i c0 = load256(x[b].qs);
            __m256 d0 = scale_product(g_half_table + x[b].d, g_half_table + y[b].d);
            acc0 = fma_sums(d0, sums_i8(c0, load256(y[b].qs)), acc0);
        }
        out[c] = hsum_ps(_mm256_add_ps(acc0, acc1));
    }
}

AVX512_TARGET void ft_vec_dot_tile_q8_0_avx512(int64_t n, const void *x, size_t bx, int nr, const void *y,
                                               size_t by, int nc, float *s, size_t ls) {
    TILE_COLUMNS(tile512_q8_0)
}

// ---------------------------------------------------------------------------------------------
// q8_0 with AVX-512 VNNI, where the CPU has it (ops.c). A tile of one activation row (decode's
// matrix-vector product) takes MV_ROWS weight rows per pass over the blocks, so each pair of
// activation blocks is loaded and prepared once for all of them; wider tiles (prefill) are the
// AVX-512BW kernel's.
//
// dpbusd multiplies unsigned by signed bytes and sums each 4 products into an int32 lane without
// saturating. The signed weight codes become unsigned by flipping their top bit (x + 128); the
// surplus 128 * (the lane's 4 activation codes), which depends on the activation only, is the
// sum's starting value, negated. Each int32 lane is then exactly x . y over the same 4 elements
// as the AVX2 kernel's lane, and the float steps are that kernel's, in its order, so the results
// equal it to the bit.

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

// A pass's pair of activation blocks y[0], y[1], once for all its rows: their codes (*yq, y[0]
// in the low half), the sums' start -(offset . codes) per 4 codes, which takes back the offset
// that makes the weight codes unsigned, and the blocks' scales (*dy, 8 lanes each).
static inline __attribute__((always_inline)) VNNI_TARGET void
vnni_y_pair(const block_q8_0 *y, __m512i offset, __m512i *yq, __m512i *start, __m512 *dy) {
    *yq = load2x256(y[0].qs, y[1].qs);
    *start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, *yq));
    *dy = _mm512_insertf32x8(_mm512_set1_ps(g_half_table[y[0].d]), _mm256_set1_ps(g_half_table[y[1].d]), 1);
}

// out[r] = x_r . y for the nr (1..MV_ROWS) weight rows x_r = x + r * bx.
static inline __attribute__((always_inline)) VNNI_TARGET void
matvec_vnni_q8_0(int64_t n, const uint8_t *x, size_t bx, int nr, const block_q8_0 *y, float *out) {
    const int64_t nb = n / QK8_0;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    tables_init();
    __m512 acc[MV_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        __m512i yq, start;
        __m512 dy;
        vnni_y_pair(y + b, flip, &yq, &start, &dy);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const block_q8_0 *xr = (const block_q8_0 *)(x + (size_t)r * bx);
            // the same place in the next pass's rows (faster here than 2 KiB on in the same
            // row, as the per-row kernels do: docs/performance.md)
            prefetch_next_pass(xr + b, MV_ROWS * bx, 2 * sizeof(block_q8_0));
            const __m512i xq = _mm512_xor_si512(load2x256(xr[b].qs, xr[b + 1].qs), flip);
            const __m512i sums = _mm512_dpbusd_epi32(start, xq, yq);
            const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(g_half_table[xr[b].d]),
                                                 _mm256_set1_ps(g_half_table[xr[b + 1].d]), 1);
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy), _mm512_cvtepi32_ps(sums), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) {
        const block_q8_0 *xr = (const block_q8_0 *)(x + (size_t)r * bx);
        __m256 acc0 = _mm512_castps512_ps256(acc[r]), acc1 = _mm512_extractf32x8_ps(acc[r], 1);
        if (b < nb) {
            __m256 d0 = scale_product(g_half_table + xr[b].d, g_half_table + y[b].d);
            acc0 = fma_sums(d0, sums_i8(load256(xr[b].qs), load256(y[b].qs)), acc0);
        }
        out[r] = hsum_ps(_mm256_add_ps(acc0, acc1));
    }
}

// Several activation rows (a step's decode tokens, short chunks): out[c * ls + r] = x_r . y_c for
// nr (1..TV_ROWS) weight rows and nc (1..TV_COLS) activation rows, each pair with the matvec's
// arithmetic above (so the bits of one token alone). A pass prepares each column's pair of
// blocks once for all rows and each row's codes once for all columns.
enum { TV_ROWS = 4, TV_COLS = 2 };

static inline __attribute__((always_inline)) VNNI_TARGET void
tile_vnni_q8_0(int64_t n, const uint8_t *x, size_t bx, int nr, const uint8_t *y, size_t by, int nc, float *s,
               size_t ls, bool first) {
    const int64_t nb = n / QK8_0;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    tables_init();
    __m512 acc[TV_ROWS][TV_COLS];
#pragma GCC unroll 4
    for (int r = 0; r < TV_ROWS; r++)
#pragma GCC unroll 2
        for (int c = 0; c < TV_COLS; c++) acc[r][c] = _mm512_setzero_ps();
    // (zeroed once: a column past nc is never written nor read)
    __m512i yq[TV_COLS] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    __m512i start[TV_COLS] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    __m512 dy[TV_COLS] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
#pragma GCC unroll 2
        for (int c = 0; c < TV_COLS; c++)
            if (c < nc) vnni_y_pair((const block_q8_0 *)(y + (size_t)c * by) + b, flip, &yq[c], &start[c], &dy[c]);
#pragma GCC unroll 4
        for (int r = 0; r < TV_ROWS; r++) {
            if (r >= nr) break;
            const block_q8_0 *xr = (const block_q8_0 *)(x + (size_t)r * bx);
            if (first) prefetch_next_pass(xr + b, TV_ROWS * bx, 2 * sizeof(block_q8_0)); // (as the matvec)
            const __m512i xq = _mm512_xor_si512(load2x256(xr[b].qs, xr[b + 1].qs), flip);
            const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(g_half_table[xr[b].d]),
                                                 _mm256_set1_ps(g_half_table[xr[b + 1].d]), 1);
#pragma GCC unroll 2
            for (int c = 0; c < TV_COLS; c++) {
                if (c >= nc) break;
                const __m512i sums = _mm512_dpbusd_epi32(start[c], xq, yq[c]);
                acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy[c]), _mm512_cvtepi32_ps(sums), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < nr; r++) {
        const block_q8_0 *xr = (const block_q8_0 *)(x + (size_t)r * bx);
        for (int c = 0; c < nc; c++) {
            const block_q8_0 *yc = (const block_q8_0 *)(y + (size_t)c * by);
            __m256 acc0 = _mm512_castps512_ps256(acc[r][c]), acc1 = _mm512_extractf32x8_ps(acc[r][c], 1);
            if (b < nb) {
                __m256 d0 = scale_product(g_half_table + xr[b].d, g_half_table + yc[b].d);
                acc0 = fma_sums(d0, sums_i8(load256(xr[b].qs), load256(yc[b].qs)), acc0);
            }
            s[(size_t)c * ls + (size_t)r] = hsum_ps(_mm256_add_ps(acc0, acc1));
        }
    }
}

VNNI_TARGET void ft_vec_dot_tile_q8_0_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y,
                                           size_t by, int nc, float *s, size_t ls) {
    if (nc == 1) {
        MATVEC_ROW_GROUPS(matvec_vnni_q8_0, MV_ROWS);
        return;
    }
    // a group of rows meets every column while it is in the L1 cache; its first pass (from
    // memory) prefetches the next group's
    for (int r0 = 0; r0 < nr; r0 += TV_ROWS)
        for (int c0 = 0; c0 < nc; c0 += TV_COLS)
            tile_vnni_q8_0(n, (const uint8_t *)x + (size_t)r0 * bx, bx, nr - r0 < TV_ROWS ? nr - r0 : TV_ROWS,
                           (const uint8_t *)y + (size_t)c0 * by, by, nc - c0 < TV_COLS ? nc - c0 : TV_COLS,
                           s + (size_t)c0 * ls + r0, ls, c0 == 0);
}

// ---------------------------------------------------------------------------------------------
// mxfp4 with AVX-512 VNNI for decode (one activation row): MV_ROWS weight rows per pass and two
// blocks per 512-bit step, as the q8_0 matvec above (block b in the low half, b + 1 in the high
// half: the AVX2 tile's acc0 and acc1). A block's 16 code bytes are broadcast to both 128-bit
// lanes of its half and the second lane shifted right by 4, so after the mask the half holds its
// 32 codes in element order; one byte shuffle looks them up in the code book plus 12 (unsigned,
// as dpbusd wants), and the sums start from -12 * (each lane's 4 activation codes), prepared once
// per pass for all rows. Lane l is then exactly the AVX2 tile's sum of elements 4l..4l+3 and the
// float steps are its own, in its order: the results are the same to the bit. About a third of
// the AVX2 tile's vector instructions per block, which is what bounds that one in decode.

// out[r] = x_r . y for the nr (1..MV_ROWS) weight rows x_r = x + r * bx.
static inline __attribute__((always_inline)) VNNI_TARGET void
matvec_vnni_mxfp4(int64_t n, const uint8_t *x, size_t bx, int nr, const block_q8_0 *y, float *out) {
    const int64_t nb = n / QK_MXFP4;
    const __m512i m15 = _mm512_set1_epi8(0x0f), twelve = _mm512_set1_epi8(12);
    const __m512i book = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k_mxfp4_plus12));
    const __mmask32 upper = 0xff00ff00u; // the int16 lanes of each half's second 128-bit lane
    tables_init();
    __m512 acc[MV_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        __m512i yq, start;
        __m512 dy;
        vnni_y_pair(y + b, twelve, &yq, &start, &dy);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const block_mxfp4 *xr = (const block_mxfp4 *)(x + (size_t)r * bx);
            prefetch_next_pass(xr + b, MV_ROWS * bx, 2 * sizeof(block_mxfp4));
            __m512i q = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)xr[b].qs))),
                _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)xr[b + 1].qs)), 1);
            q = _mm512_and_si512(_mm512_mask_srli_epi16(q, upper, q, 4), m15);
            const __m512i sums = _mm512_dpbusd_epi32(start, _mm512_shuffle_epi8(book, q), yq);
            const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(g_e8m0_half_table[xr[b].e]),
                                                 _mm256_set1_ps(g_e8m0_half_table[xr[b + 1].e]), 1);
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy), _mm512_cvtepi32_ps(sums), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) {
        const block_mxfp4 *xr = (const block_mxfp4 *)(x + (size_t)r * bx);
        __m256 acc0 = _mm512_castps512_ps256(acc[r]), acc1 = _mm512_extractf32x8_ps(acc[r], 1);
        if (b < nb) { // an odd last block: the AVX2 tile's step
            __m256i c0, c1;
            codes_mxfp4(xr + b, xr + b, &c0, &c1);
            __m256 d0 = scale_product(g_e8m0_half_table + xr[b].e, g_half_table + y[b].d);
            acc0 = fma_sums(d0, sums_minus12(c0, load256(y[b].qs)), acc0);
        }
        out[r] = hsum_ps(_mm256_add_ps(acc0, acc1));
    }
}

VNNI_TARGET void ft_vec_dot_tile_mxfp4_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y,
                                            size_t by, int nc, float *s, size_t ls) {
    if (nc != 1) {
        ft_vec_dot_tile_mxfp4_avx2(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    MATVEC_ROW_GROUPS(matvec_vnni_mxfp4, MV_ROWS);
}

// ---------------------------------------------------------------------------------------------
// q4_K with AVX-512 VNNI for decode (one activation row), two weight rows per pass (four were
// slower). While 512-bit instructions run only two ports take vector instructions, and the
// AVX-512BW matvec is bound by them where its weights come from the cache, so this form issues
// about 40% fewer (docs/performance.md has the figures):
//   1. one 512-bit load per 128 weights: its low nibbles are weights [0,32) and [64,96) of
//      them, its high nibbles [32,64) and [96,128); the activation bytes are paired to match
//      once per block for both rows (a shuffle of two loads per pair);
//   2. dpwssd multiplies the int16 products by the sub-block scales and adds them to the sums
//      in one instruction (madd + add);
//   3. the two rows' scales and mins are unpacked side by side in one 256-bit register (row r
//      in lane r); the scales' permutation indices for row 1 are row 0's + 8.
// Lane l of the int32 sums collects the same products as matvec512_q4_K's lane l (after its
// fold; exact integer sums) and the float steps are its own, in its order, so the results
// are the same to the bit.

// out[r] = x_r . y for the nr (1 or 2) weight rows x_r = x + r * bx.
static inline __attribute__((always_inline)) VNNI_TARGET void
matvec_vnni_q4_K(int64_t n, const uint8_t *x, size_t bx, int nr, const block_q8_K *y, float *out) {
    const __m512i m15 = _mm512_set1_epi8(0x0f);
    tables_init();
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 accm = _mm256_setzero_ps(); // lane r: row r's mins terms
    // int16 lanes 0..15 take scale i0, 16..31 scale i1, for the sub-block pairs (0, 2), (1, 3),
    // (4, 6), (5, 7); row 1's scales sit 8 int16 lanes on
    __m512i idx[2][4];
    for (int r = 0; r < 2; r++)
        for (int p = 0; p < 4; p++) {
            int i0 = (p & 1) + 4 * (p >> 1) + 8 * r;
            idx[r][p] = _mm512_inserti64x4(_mm512_set1_epi16((short)i0), _mm256_set1_epi16((short)(i0 + 2)), 1);
        }
    const block_q4_K *xr[2] = {(const block_q4_K *)x, (const block_q4_K *)(x + (nr > 1 ? bx : 0))};
    for (int64_t b = 0; b < n / QK_K; b++) {
        const block_q8_K *yb = y + b;
        const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)yb->bsums),
                                          _mm_loadu_si128((const __m128i *)yb->bsums + 1));
        __m512i q8[4];
        for (int h = 0; h < 2; h++) {
            const __m512i a = _mm512_loadu_si512((const void *)(yb->qs + 128 * h));
            const __m512i c = _mm512_loadu_si512((const void *)(yb->qs + 128 * h + 64));
            q8[2 * h] = _mm512_shuffle_i64x2(a, c, 0x44);     // [0,32) and [64,96)
            q8[2 * h + 1] = _mm512_shuffle_i64x2(a, c, 0xee); // [32,64) and [96,128)
        }
        const block_q4_K *x0 = xr[0] + b, *x1 = xr[1] + b;
#pragma GCC unroll 2
        for (int r = 0; r < nr; r++)
            prefetch_next_pass(xr[r] + b, Q4K_PREFETCH_ROWS * bx, sizeof(block_q4_K));
        // scales_mins_k4 of both rows, row r in lane r
        __m256i v = _mm256_loadu2_m128i((const __m128i *)x1->scales, (const __m128i *)x0->scales);
        __m256i low = _mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));
        low = _mm256_srlv_epi32(low, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4));
        low = _mm256_and_si256(low, _mm256_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f,
                                                      0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
        __m256i top = _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));
        top = _mm256_and_si256(_mm256_srli_epi32(top, 2), _mm256_setr_epi32(0, 0x30303030, 0, 0x30303030, 0,
                                                                             0x30303030, 0, 0x30303030));
        const __m256i sm = _mm256_or_si256(low, top);
        const __m256i zero = _mm256_setzero_si256();
        // mins . (sums of 32 activations), per lane as matvec512_q4_K's accm
        const __m256i msum = _mm256_madd_epi16(_mm256_unpacklo_epi8(_mm256_srli_si256(sm, 8), zero),
                                               _mm256_broadcastsi128_si256(bs));
        const __m256 dmin = _mm256_setr_m128(_mm_set1_ps(yb->d * g_half_table[x0->dmin]),
                                             _mm_set1_ps(yb->d * g_half_table[x1->dmin]));
        accm = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(msum), accm);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_unpacklo_epi8(sm, zero)); // row r's 8 scales at 8r
#pragma GCC unroll 2
        for (int r = 0; r < nr; r++) {
            const block_q4_K *xb = r ? x1 : x0;
            __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m512i q4 = _mm512_loadu_si512((const void *)(xb->qs + 64 * h));
                const __m512i lo = _mm512_and_si512(q4, m15), hi = _mm512_and_si512(_mm512_srli_epi16(q4, 4), m15);
                sum = _mm512_dpwssd_epi32(sum, _mm512_permutexvar_epi16(idx[r][2 * h], sc16),
                                          _mm512_maddubs_epi16(lo, q8[2 * h]));
                sum = _mm512_dpwssd_epi32(sum, _mm512_permutexvar_epi16(idx[r][2 * h + 1], sc16),
                                          _mm512_maddubs_epi16(hi, q8[2 * h + 1]));
            }
            const float d = yb->d * g_half_table[xb->d];
            const __m256i sumi = _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < nr; r++) {
        __m128 m = r ? _mm256_extractf128_ps(accm, 1) : _mm256_castps256_ps128(accm);
        m = _mm_add_ps(m, _mm_movehl_ps(m, m));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[r] = hsum_ps(acc[r]) - _mm_cvtss_f32(m);
    }
}

VNNI_TARGET void ft_vec_dot_tile_q4_K_vnni(int64_t n, const void *x, size_t bx, int nr, const void *y,
                                           size_t by, int nc, float *s, size_t ls) {
    if (nc != 1) {
        ft_vec_dot_tile_q4_K_avx512(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    int r = 0;
    for (; r + 2 <= nr; r += 2) matvec_vnni_q4_K(n, tile_col(x, bx, r), bx, 2, y, s + r);
    if (r < nr) matvec_vnni_q4_K(n, tile_col(x, bx, r), bx, 1, y, s + r);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
