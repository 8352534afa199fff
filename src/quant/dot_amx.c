// dot_amx.c: prefill GEMMs on AMX tiles for q8_0, q4_K (int8) and bf16 weights (see dot.h).
//
// Entered only through ft_quant_ops_find() after ft_amx_init() has seen the CPU and the OS
// allow AMX-INT8 (and ops.c has seen AVX-512BW, which the float steps use). The functions
// carry their own target attributes, so the file builds with the project's plain flags.
// The integer sums are exact and the float steps are the reference's, so every q8_0 and q4_K
// output equals ft_vec_dot_<type>_ref to the bit (not the AVX2 kernels, whose float order is
// per lane). Thread-safe: each thread packs into its own scratch and holds the tile state only
// inside a call ("Tiles" below gives the steps).
#include "dot.h"
#include "gemm_shared.h"
#include "quant.h"
#include "codec.h"
#include "fp16.h"
#include "../util/util.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

enum { TILE_M = 16, TILE_N = 16, TILE_K = 32, B_TILE_BYTES = TILE_K * TILE_N, GEMM_TILE_MIN_TOKENS = 4 };

// ---------------------------------------------------------------------------------------------
// Availability

// Linux hands out the 8 KiB tile data state only on request, once per process.
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

bool ft_amx_has_bf16(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22)); // AMX-BF16
}

bool ft_amx_init(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false; // OSXSAVE
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return false; // AMX-TILE, AMX-INT8
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false; // XTILECFG and XTILEDATA enabled by the OS
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

// ---------------------------------------------------------------------------------------------
// Tiles
//
// A tile of 16 weight rows is AMX's A operand: one row per weight row, the 32 codes of one
// block (q8_0) or sub-block (q4_K, unpacked from nibbles to bytes). A tile of 16 activation
// rows (tokens) is B in AMX's packed form: 8 rows of 64 bytes, row k holding each token's
// codes 4k..4k+3 in turn. TDPBSSD / TDPBUSD then give C, the 16 x 16 exact int32 sums of the
// block per (weight row, token). Steps of a call:
//   1. pack every activation row of the call into B tiles, one per (16 tokens, 32 codes),
//      with the scales as floats (q8_K: also the pair sums of the sub-block sums, for the min
//      term), into per-thread scratch;
//   2. per 16 weight rows: copy (q8_0) or unpack (q4_K) their codes into a contiguous buffer,
//      zero rows past the end, the block scales as floats (q4_K: sub-block scales as int32);
//   3. per 16 tokens: per block, the tile products into C, C stored, and the scalar
//      reference's float steps in its order, sum += (dx * dy) * float(isum) (q4_K: minus the
//      min term), 16 tokens to a 512-bit register and one register per weight row;
//   4. the 16 x 16 sums written transposed into s (token-major), only the valid ones.
// Fewer than GEMM_TILE_MIN_TOKENS tokens skip the tiles: a tile costs the same for 1 token as
// for 16, so they take gemm_shared.c's per-(row, token) path, which gives the same bits.
//
// Tile registers: 0..3 C, 4..5 A, 6..7 B. The tile state is loaded at the start of each call
// and released at its end (a thread holding tile data makes every context switch save 8 KiB).

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static AMX_TARGET void tiles_configure(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.rows[t] = TILE_M, cfg.colsb[t] = TILE_N * 4; // C: int32
    for (int t = 4; t < 6; t++) cfg.rows[t] = TILE_M, cfg.colsb[t] = TILE_K;     // A: weights
    for (int t = 6; t < 8; t++) cfg.rows[t] = TILE_K / 4, cfg.colsb[t] = TILE_N * 4; // B
    // GCC 12's _tile_loadconfig does not tell the compiler it reads cfg, which then drops the
    // stores of the rows and column widths: the asm names the whole struct as its input.
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// The B tile of 16 activation rows, as described at the top: row[r] points at token r's bytes
// of this step (32 int8 codes, or 32 bf16 values in 64 bytes), NULL past the last token (zeros).
static inline void pack_b_bytes(uint8_t *dst, const void *const row[TILE_N], int bytes) {
    for (int r = 0; r < TILE_N; r++) {
        uint32_t w[16] = {0};
        if (row[r]) memcpy(w, row[r], (size_t)bytes);
        for (int k = 0; k < bytes / 4; k++) memcpy(dst + k * TILE_N * 4 + r * 4, &w[k], 4);
    }
}

static inline void pack_b(uint8_t *dst, const int8_t *const codes[TILE_N]) {
    pack_b_bytes(dst, (const void *const *)codes, TILE_K);
}

// Asks for the cache lines of a weight row the next tile reads, while this tile computes.
static inline void prefetch_row(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

// Writes the valid part of a 16 x 16 result block (row m of acc: weight row r0 + m, its 16
// tokens c0..c0 + 15) to s[c * ls + r].
static inline AMX_TARGET void store_block(const __m512 acc[TILE_M], float *s, size_t ls, int r0, int nr, int c0, int nc) {
    float t[TILE_M][TILE_N];
    for (int m = 0; m < TILE_M; m++) _mm512_storeu_ps(t[m], acc[m]);
    for (int n = 0; n < nc; n++)
        for (int m = 0; m < nr; m++) s[(size_t)(c0 + n) * ls + (size_t)(r0 + m)] = t[m][n];
}

// ---------------------------------------------------------------------------------------------
// q8_0 x q8_0

// acc[m] += (dx[m] * dy) * float(C[m]) for the 16 weight rows: the reference's steps, per token.
static inline __attribute__((always_inline)) AMX_TARGET void
q8_0_block_sums(__m512 acc[TILE_M], const int32_t *c, const float *dx, __m512 dy) {
#pragma GCC unroll 16
    for (int m = 0; m < TILE_M; m++) {
        __m512 d = _mm512_mul_ps(_mm512_set1_ps(dx[m]), dy);
        __m512 p = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_load_si512(c + m * TILE_N)));
        acc[m] = _mm512_add_ps(acc[m], p);
    }
}

AMX_TARGET void ft_gemm_q8_0_amx(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                 int nc, float *s, size_t ls) {
    if (nc < GEMM_TILE_MIN_TOKENS) {
        ft_gemm_few_q8_0(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    const int64_t nb = n / QK8_0;
    const int nt = (nc + TILE_N - 1) / TILE_N;
    uint8_t *p = ft_gemm_scratch((size_t)nt * nb * (B_TILE_BYTES + TILE_N * 4) + (size_t)nb * (TILE_M * TILE_K + TILE_M * 4) +
                             2 * TILE_M * TILE_N * 4 + 6 * 64);
    uint8_t *bq = ft_gemm_carve(&p, (size_t)nt * nb * B_TILE_BYTES); // (token tile, block): a B tile
    float *bd = ft_gemm_carve(&p, (size_t)nt * nb * TILE_N * 4);      // (token tile, block, token): scale
    uint8_t *aq = ft_gemm_carve(&p, (size_t)nb * TILE_M * TILE_K);    // (block, weight row): 32 codes
    float *ad = ft_gemm_carve(&p, (size_t)nb * TILE_M * 4);           // (block, weight row): scale
    int32_t *c0 = ft_gemm_carve(&p, TILE_M * TILE_N * 4), *c1 = ft_gemm_carve(&p, TILE_M * TILE_N * 4);

    for (int t = 0; t < nt; t++)
        for (int64_t b = 0; b < nb; b++) {
            const int8_t *codes[TILE_N];
            for (int r = 0; r < TILE_N; r++) {
                int col = t * TILE_N + r;
                const block_q8_0 *yb = col < nc ? (const block_q8_0 *)((const uint8_t *)y + (size_t)col * by) + b : NULL;
                codes[r] = yb ? yb->qs : NULL;
                bd[((size_t)t * nb + b) * TILE_N + r] = yb ? ft_fp16_to_fp32(yb->d) : 0.0f;
            }
            pack_b(bq + ((size_t)t * nb + b) * B_TILE_BYTES, codes);
        }

    tiles_configure();
    for (int r0 = 0; r0 < nr; r0 += TILE_M) {
        const int mr = nr - r0 < TILE_M ? nr - r0 : TILE_M;
        // row by row (one stream through the tile's weights), fetching the next tile's row
        for (int m = 0; m < TILE_M; m++) {
            if (r0 + TILE_M + m < nr) prefetch_row((const uint8_t *)x + (size_t)(r0 + TILE_M + m) * bx, bx);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *dst = aq + ((size_t)b * TILE_M + m) * TILE_K;
                if (m < mr) {
                    const block_q8_0 *xb = (const block_q8_0 *)((const uint8_t *)x + (size_t)(r0 + m) * bx) + b;
                    memcpy(dst, xb->qs, TILE_K);
                    ad[b * TILE_M + m] = ft_fp16_to_fp32(xb->d);
                } else {
                    memset(dst, 0, TILE_K);
                    ad[b * TILE_M + m] = 0.0f;
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            __m512 acc[TILE_M];
            for (int m = 0; m < TILE_M; m++) acc[m] = _mm512_setzero_ps();
            const uint8_t *bt = bq + (size_t)t * nb * B_TILE_BYTES;
            const float *dt = bd + (size_t)t * nb * TILE_N;
            int64_t b = 0;
            // two blocks per step in separate tiles, so the second product overlaps the first's
            // float steps
            for (; b + 1 < nb; b += 2) {
                _tile_loadd(4, aq + (size_t)b * TILE_M * TILE_K, TILE_K);
                _tile_loadd(6, bt + (size_t)b * B_TILE_BYTES, TILE_N * 4);
                _tile_loadd(5, aq + (size_t)(b + 1) * TILE_M * TILE_K, TILE_K);
                _tile_loadd(7, bt + (size_t)(b + 1) * B_TILE_BYTES, TILE_N * 4);
                _tile_zero(0);
                _tile_zero(1);
                _tile_dpbssd(0, 4, 6);
                _tile_dpbssd(1, 5, 7);
                _tile_stored(0, c0, TILE_N * 4);
                _tile_stored(1, c1, TILE_N * 4);
                q8_0_block_sums(acc, c0, ad + b * TILE_M, _mm512_loadu_ps(dt + b * TILE_N));
                q8_0_block_sums(acc, c1, ad + (b + 1) * TILE_M, _mm512_loadu_ps(dt + (b + 1) * TILE_N));
            }
            if (b < nb) {
                _tile_loadd(4, aq + (size_t)b * TILE_M * TILE_K, TILE_K);
                _tile_loadd(6, bt + (size_t)b * B_TILE_BYTES, TILE_N * 4);
                _tile_zero(0);
                _tile_dpbssd(0, 4, 6);
                _tile_stored(0, c0, TILE_N * 4);
                q8_0_block_sums(acc, c0, ad + b * TILE_M, _mm512_loadu_ps(dt + b * TILE_N));
            }
            int mc = nc - t * TILE_N < TILE_N ? nc - t * TILE_N : TILE_N;
            store_block(acc, s, ls, r0, mr, t * TILE_N, mc);
        }
    }
    _tile_release();
}

// ---------------------------------------------------------------------------------------------
// q4_K x q8_K
//
// Per super-block of 256 and per (weight row, token): isum = sum over the 8 sub-blocks of
// scale_j * C_j (exact in int32: at most 8 * 63 * 32 * 15 * 127), msum = sum of min_j * (the
// token's sum of sub-block j's codes), and the reference's
// sum += (dy * dx) * float(isum) - (dy * dmin) * float(msum).
// The min term is 4 int16 pair products per token: a 32-bit word per pair of sub-blocks holds
// (min_2i, min_2i+1) on the weight side and the two code sums (at most 32 * 127) on the
// activation side, so _mm512_madd_epi16 forms it for 16 tokens at once.

enum { SUPER_K = QK_K, SUB_BLOCKS = QK_K / TILE_K };

static inline __attribute__((always_inline)) AMX_TARGET void
q4_K_super_sums(__m512 acc[TILE_M], const int32_t *c /* (8, 16, 16) */, const int32_t *sc /* (8, 16) */,
                const uint32_t *mins /* (4, 16) */, const float *dx, const float *dmx, __m512 dy,
                const uint32_t *bsum /* (4, 16) */) {
    const __m512i bs0 = _mm512_loadu_si512(bsum), bs1 = _mm512_loadu_si512(bsum + 16);
    const __m512i bs2 = _mm512_loadu_si512(bsum + 32), bs3 = _mm512_loadu_si512(bsum + 48);
#pragma GCC unroll 16
    for (int m = 0; m < TILE_M; m++) {
        __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int j = 0; j < SUB_BLOCKS; j++)
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(_mm512_load_si512(c + (j * TILE_M + m) * TILE_N),
                                                             _mm512_set1_epi32(sc[j * TILE_M + m])));
        __m512i msum = _mm512_madd_epi16(_mm512_set1_epi32((int)mins[m]), bs0);
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(_mm512_set1_epi32((int)mins[TILE_M + m]), bs1));
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(_mm512_set1_epi32((int)mins[2 * TILE_M + m]), bs2));
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(_mm512_set1_epi32((int)mins[3 * TILE_M + m]), bs3));
        __m512 t1 = _mm512_mul_ps(_mm512_mul_ps(dy, _mm512_set1_ps(dx[m])), _mm512_cvtepi32_ps(isum));
        __m512 t2 = _mm512_mul_ps(_mm512_mul_ps(dy, _mm512_set1_ps(dmx[m])), _mm512_cvtepi32_ps(msum));
        acc[m] = _mm512_add_ps(acc[m], _mm512_sub_ps(t1, t2));
    }
}

// Row m's 256 codes of one super-block as bytes in element order (see dot_ref.c's dot_q45_K).
static inline AMX_TARGET void unpack_q4_K(uint8_t *dst, const uint8_t *qs) {
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    for (int k = 0; k < 4; k++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
        _mm256_storeu_si256((__m256i *)(dst + 64 * k), _mm256_and_si256(q, m15));
        _mm256_storeu_si256((__m256i *)(dst + 64 * k + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), m15));
    }
}

// The products of 4 sub-blocks (j0..j0 + 3) of one super-block into c + j * 256.
#define Q4_K_PRODUCTS(J0)                                                                           \
    do {                                                                                           \
        _tile_loadd(4, ab + (J0 + 0) * TILE_K, SUPER_K);                                           \
        _tile_loadd(6, bb + (J0 + 0) * B_TILE_BYTES, TILE_N * 4);                                  \
        _tile_loadd(5, ab + (J0 + 1) * TILE_K, SUPER_K);                                           \
        _tile_loadd(7, bb + (J0 + 1) * B_TILE_BYTES, TILE_N * 4);                                  \
        _tile_zero(0);                                                                             \
        _tile_zero(1);                                                                             \
        _tile_dpbusd(0, 4, 6);                                                                     \
        _tile_dpbusd(1, 5, 7);                                                                     \
        _tile_loadd(4, ab + (J0 + 2) * TILE_K, SUPER_K);                                           \
        _tile_loadd(6, bb + (J0 + 2) * B_TILE_BYTES, TILE_N * 4);                                  \
        _tile_loadd(5, ab + (J0 + 3) * TILE_K, SUPER_K);                                           \
        _tile_loadd(7, bb + (J0 + 3) * B_TILE_BYTES, TILE_N * 4);                                  \
        _tile_zero(2);                                                                             \
        _tile_zero(3);                                                                             \
        _tile_dpbusd(2, 4, 6);                                                                     \
        _tile_dpbusd(3, 5, 7);                                                                     \
        _tile_stored(0, cs + (J0 + 0) * TILE_M * TILE_N, TILE_N * 4);                              \
        _tile_stored(1, cs + (J0 + 1) * TILE_M * TILE_N, TILE_N * 4);                              \
        _tile_stored(2, cs + (J0 + 2) * TILE_M * TILE_N, TILE_N * 4);                              \
        _tile_stored(3, cs + (J0 + 3) * TILE_M * TILE_N, TILE_N * 4);                              \
    } while (0)

AMX_TARGET void ft_gemm_q4_K_amx(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                 int nc, float *s, size_t ls) {
    if (nc < GEMM_TILE_MIN_TOKENS) {
        ft_gemm_few_q4_K(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    const int64_t nb = n / QK_K;
    const int nt = (nc + TILE_N - 1) / TILE_N;
    const size_t b_super = SUB_BLOCKS * B_TILE_BYTES; // B tiles of one (token tile, super-block)
    uint8_t *p = ft_gemm_scratch((size_t)nt * nb * (b_super + TILE_N * 4 + 4 * TILE_N * 4) +
                             (size_t)nb * (TILE_M * SUPER_K + SUB_BLOCKS * TILE_M * 4 + 4 * TILE_M * 4 + 2 * TILE_M * 4) +
                             SUB_BLOCKS * TILE_M * TILE_N * 4 + 10 * 64);
    uint8_t *bq = ft_gemm_carve(&p, (size_t)nt * nb * b_super);                   // (token tile, super, sub): B tile
    float *bd = ft_gemm_carve(&p, (size_t)nt * nb * TILE_N * 4);                  // (token tile, super, token): d
    uint32_t *bsum = ft_gemm_carve(&p, (size_t)nt * nb * 4 * TILE_N * 4);         // (token tile, super, pair, token)
    uint8_t *aq = ft_gemm_carve(&p, (size_t)nb * TILE_M * SUPER_K);               // (super, weight row): 256 codes
    int32_t *asc = ft_gemm_carve(&p, (size_t)nb * SUB_BLOCKS * TILE_M * 4);       // (super, sub, weight row): scale
    uint32_t *amin = ft_gemm_carve(&p, (size_t)nb * 4 * TILE_M * 4);              // (super, pair, weight row): mins
    float *adx = ft_gemm_carve(&p, (size_t)nb * TILE_M * 4);                      // (super, weight row): d
    float *admx = ft_gemm_carve(&p, (size_t)nb * TILE_M * 4);                     // (super, weight row): dmin
    int32_t *cs = ft_gemm_carve(&p, SUB_BLOCKS * TILE_M * TILE_N * 4);            // (sub, weight row, token): C

    for (int t = 0; t < nt; t++)
        for (int64_t b = 0; b < nb; b++) {
            const size_t tb = (size_t)t * nb + b;
            const block_q8_K *yb[TILE_N];
            for (int r = 0; r < TILE_N; r++) {
                int col = t * TILE_N + r;
                yb[r] = col < nc ? (const block_q8_K *)((const uint8_t *)y + (size_t)col * by) + b : NULL;
                bd[tb * TILE_N + r] = yb[r] ? yb[r]->d : 0.0f;
                for (int i = 0; i < 4; i++) {
                    uint32_t w = 0;
                    if (yb[r]) {
                        const int16_t *bs = yb[r]->bsums + 4 * i;
                        w = (uint16_t)(int16_t)(bs[0] + bs[1]) | (uint32_t)(uint16_t)(int16_t)(bs[2] + bs[3]) << 16;
                    }
                    bsum[(tb * 4 + i) * TILE_N + r] = w;
                }
            }
            for (int j = 0; j < SUB_BLOCKS; j++) {
                const int8_t *codes[TILE_N];
                for (int r = 0; r < TILE_N; r++) codes[r] = yb[r] ? yb[r]->qs + TILE_K * j : NULL;
                pack_b(bq + tb * b_super + (size_t)j * B_TILE_BYTES, codes);
            }
        }

    tiles_configure();
    for (int r0 = 0; r0 < nr; r0 += TILE_M) {
        const int mr = nr - r0 < TILE_M ? nr - r0 : TILE_M;
        // row by row (one stream through the tile's weights), fetching the next tile's row
        for (int m = 0; m < TILE_M; m++) {
            if (r0 + TILE_M + m < nr) prefetch_row((const uint8_t *)x + (size_t)(r0 + TILE_M + m) * bx, bx);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *dst = aq + ((size_t)b * TILE_M + m) * SUPER_K;
                if (m >= mr) {
                    memset(dst, 0, SUPER_K);
                    for (int j = 0; j < SUB_BLOCKS; j++) asc[(b * SUB_BLOCKS + j) * TILE_M + m] = 0;
                    for (int i = 0; i < 4; i++) amin[(b * 4 + i) * TILE_M + m] = 0;
                    adx[b * TILE_M + m] = admx[b * TILE_M + m] = 0.0f;
                    continue;
                }
                const block_q4_K *xb = (const block_q4_K *)((const uint8_t *)x + (size_t)(r0 + m) * bx) + b;
                unpack_q4_K(dst, xb->qs);
                uint8_t sc[SUB_BLOCKS], mn[SUB_BLOCKS];
                for (int j = 0; j < SUB_BLOCKS; j++) {
                    ft_k4_scale_min(j, xb->scales, &sc[j], &mn[j]);
                    asc[(b * SUB_BLOCKS + j) * TILE_M + m] = sc[j];
                }
                for (int i = 0; i < 4; i++) amin[(b * 4 + i) * TILE_M + m] = mn[2 * i] | (uint32_t)mn[2 * i + 1] << 16;
                adx[b * TILE_M + m] = ft_fp16_to_fp32(xb->d);
                admx[b * TILE_M + m] = ft_fp16_to_fp32(xb->dmin);
            }
        }
        for (int t = 0; t < nt; t++) {
            __m512 acc[TILE_M];
            for (int m = 0; m < TILE_M; m++) acc[m] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const size_t tb = (size_t)t * nb + b;
                const uint8_t *ab = aq + (size_t)b * TILE_M * SUPER_K, *bb = bq + tb * b_super;
                Q4_K_PRODUCTS(0);
                Q4_K_PRODUCTS(4);
                q4_K_super_sums(acc, cs, asc + b * SUB_BLOCKS * TILE_M, amin + b * 4 * TILE_M, adx + b * TILE_M,
                                admx + b * TILE_M, _mm512_loadu_ps(bd + tb * TILE_N), bsum + tb * 4 * TILE_N);
            }
            int mc = nc - t * TILE_N < TILE_N ? nc - t * TILE_N : TILE_N;
            store_block(acc, s, ls, r0, mr, t * TILE_N, mc);
        }
    }
    _tile_release();
}

// ---------------------------------------------------------------------------------------------
// bf16 x bf16
//
// No block scales: each C tile sums its 16 x 16 floats over the whole row (TDPBF16PS adds the
// products of bf16 pairs into float32) and is stored once at the end. Tiles 0..3 are C for 2
// weight tiles x 2 token tiles, 4..5 A, 6..7 B, all 16 rows of 64 bytes (32 elements a step).
// The weight rows are read in place (a last partial pair of tiles from a zero-padded copy).
// Loops: token blocks of BF16_TOKEN_TILES tiles (their packed activations stay in L2), pairs
// of weight tiles, pairs of token tiles, steps.
// Not the reference's double sum: float sums in AMX's order, one rounding per step (inputs
// below FLT_MIN flushed to zero), as llama.cpp's vdpbf16ps path rounds; within
// n * 2^-24 * sum |x_i y_i| of the reference.

enum { BF16_K = 32, BF16_STEP_BYTES = BF16_K * 2, BF16_B_TILE = TILE_N * BF16_STEP_BYTES, BF16_TOKEN_TILES = 4 };

#define AMX_BF16_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

static AMX_BF16_TARGET void tiles_configure_bf16(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg)); // see tiles_configure
}

// Writes C tile rows [0, mr) x tokens [0, mc) from c (16 x 16 floats) to s at (r0, c0).
static inline void store_c_bf16(const float *c, float *s, size_t ls, int r0, int mr, int c0, int mc) {
    for (int n = 0; n < mc; n++)
        for (int m = 0; m < mr; m++) s[(size_t)(c0 + n) * ls + (size_t)(r0 + m)] = c[m * TILE_N + n];
}

static inline int clamp_tile(int v) { return v < 0 ? 0 : v > TILE_M ? TILE_M : v; }

AMX_BF16_TARGET void ft_gemm_bf16_amx(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                      int nc, float *s, size_t ls) {
    if (n % BF16_K) { // steps of 32 elements only
        ft_vec_dot_tile_bf16_avx2(n, x, bx, nr, y, by, nc, s, ls);
        return;
    }
    const int64_t nk = n / BF16_K;
    const int nt = ((nc + TILE_N - 1) / TILE_N + 1) & ~1; // token tiles, padded to pairs
    const size_t row_bytes = (size_t)n * 2;
    uint8_t *p = ft_gemm_scratch((size_t)nt * nk * BF16_B_TILE + 2 * TILE_M * row_bytes + TILE_M * TILE_N * 4 + 3 * 64);
    uint8_t *bq = ft_gemm_carve(&p, (size_t)nt * nk * BF16_B_TILE); // (token tile, step): a B tile
    uint8_t *apad = ft_gemm_carve(&p, 2 * TILE_M * row_bytes);      // a last partial pair of weight tiles
    float *cbuf = ft_gemm_carve(&p, TILE_M * TILE_N * 4);

    for (int t = 0; t < nt; t++)
        for (int64_t k = 0; k < nk; k++) {
            const void *row[TILE_N];
            for (int r = 0; r < TILE_N; r++) {
                int col = t * TILE_N + r;
                row[r] = col < nc ? (const uint8_t *)y + (size_t)col * by + (size_t)k * BF16_STEP_BYTES : NULL;
            }
            pack_b_bytes(bq + ((size_t)t * nk + k) * BF16_B_TILE, row, BF16_STEP_BYTES);
        }

    tiles_configure_bf16();
    for (int tb = 0; tb < nt; tb += BF16_TOKEN_TILES)
        for (int r0 = 0; r0 < nr; r0 += 2 * TILE_M) {
            const uint8_t *a0 = (const uint8_t *)x + (size_t)r0 * bx;
            size_t sa = bx;
            if (r0 + 2 * TILE_M > nr) {
                memset(apad, 0, 2 * TILE_M * row_bytes);
                for (int m = 0; m < nr - r0; m++) memcpy(apad + m * row_bytes, a0 + (size_t)m * bx, row_bytes);
                a0 = apad;
                sa = row_bytes;
            }
            const uint8_t *a1 = a0 + TILE_M * sa;
            for (int t = tb; t < tb + BF16_TOKEN_TILES && t < nt; t += 2) {
                const uint8_t *b0 = bq + (size_t)t * nk * BF16_B_TILE, *b1 = b0 + (size_t)nk * BF16_B_TILE;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int64_t k = 0; k < nk; k++) {
                    _tile_loadd(4, a0 + (size_t)k * BF16_STEP_BYTES, sa);
                    _tile_loadd(5, a1 + (size_t)k * BF16_STEP_BYTES, sa);
                    _tile_loadd(6, b0 + (size_t)k * BF16_B_TILE, TILE_N * 4);
                    _tile_loadd(7, b1 + (size_t)k * BF16_B_TILE, TILE_N * 4);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                const int mr0 = clamp_tile(nr - r0), mr1 = clamp_tile(nr - r0 - TILE_M);
                const int mc0 = clamp_tile(nc - t * TILE_N), mc1 = clamp_tile(nc - (t + 1) * TILE_N);
                _tile_stored(0, cbuf, TILE_N * 4);
                store_c_bf16(cbuf, s, ls, r0, mr0, t * TILE_N, mc0);
                _tile_stored(1, cbuf, TILE_N * 4);
                store_c_bf16(cbuf, s, ls, r0, mr0, (t + 1) * TILE_N, mc1);
                _tile_stored(2, cbuf, TILE_N * 4);
                store_c_bf16(cbuf, s, ls, r0 + TILE_M, mr1, t * TILE_N, mc0);
                _tile_stored(3, cbuf, TILE_N * 4);
                store_c_bf16(cbuf, s, ls, r0 + TILE_M, mr1, (t + 1) * TILE_N, mc1);
            }
        }
    _tile_release();
}
