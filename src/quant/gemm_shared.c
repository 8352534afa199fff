// gemm_shared.c: per-thread scratch, the few-token path, and the lane-per-token GEMMs' packing and
// weight rows, of prefill's GEMMs (gemm_shared.h).
//
// The functions carry their own target attributes, so the file builds with the project's plain
// flags; callers enter them only after ops.c has seen the CPU support them.
#include "gemm_shared.h"
#include "blocks.h"
#include "codec.h"
#include "fp16.h"
#include "tables.h"
#include "../util/util.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Per-thread scratch, grown to the largest call and freed when the thread exits

typedef struct {
    uint8_t *p;
    size_t cap;
} amx_scratch;

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v) {
    amx_scratch *s = v;
    free(s->p);
    free(s);
}

static void scratch_key_init(void) {
    FT_ASSERT(pthread_key_create(&g_scratch_key, scratch_free) == 0);
}

uint8_t *ft_gemm_scratch(size_t bytes) {
    pthread_once(&g_scratch_once, scratch_key_init);
    amx_scratch *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        s = calloc(1, sizeof(*s));
        FT_ASSERT(s && pthread_setspecific(g_scratch_key, s) == 0);
    }
    if (s->cap < bytes) {
        free(s->p);
        s->cap = (bytes + 4095) & ~(size_t)4095;
        s->p = aligned_alloc(64, s->cap);
        FT_ASSERT(s->p);
    }
    return s->p;
}

// ---------------------------------------------------------------------------------------------
// Few tokens: the reference's order, one (weight row, token) at a time
//
// A GEMM's packing costs the same for 1 token as for 16, so below a few tokens each (weight row,
// token) is computed on its own: the same exact integer sums per block, then the reference's
// float steps in its order. Prefill chunks give their experts any number of tokens, 1 included.

// EXACT_PREFETCH: how far ahead the weight loads are asked for (bytes; as dot_avx2.c's kernels:
// rows stream from memory, and the next row follows on from this one).
enum { EXACT_PREFETCH = 2048 };

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

// fp16 to float with F16C: exact, so equal to ft_fp16_to_fp32.
static inline AVX2_TARGET float fp16_f16c(ft_half h) {
    return _cvtsh_ss(h);
}
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

// Sum of the 8 int32 lanes (exact).
static inline AVX2_TARGET int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// sum_k x[k] * y[k] over 32 signed codes (activations never hold -128: see dot_avx2.c).
static inline AVX2_TARGET __m256i dot32_i8(const int8_t *x, const int8_t *y) {
    __m256i vx = _mm256_loadu_si256((const __m256i *)x), vy = _mm256_loadu_si256((const __m256i *)y);
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(vx, vx), _mm256_sign_epi8(vy, vx));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

static AVX2_TARGET float dot_exact_q8_0(int64_t n, const block_q8_0 *x, const block_q8_0 *y) {
    float sum = 0;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        _mm_prefetch((const char *)(x + b) + EXACT_PREFETCH, _MM_HINT_T0);
        int32_t isum = hsum_i32(dot32_i8(x[b].qs, y[b].qs));
        sum += (fp16_f16c(x[b].d) * fp16_f16c(y[b].d)) * (float)isum;
    }
    return sum;
}

// The 8 scales (sc) and 8 mins (mn) of a q4_K super-block: ft_k4_scale_min for all sub-blocks
// at once, four bytes to a 32-bit word (words a, b, c of the 12 bytes: sub-block j < 4 takes
// the low 6 bits of a and b; j >= 4 the nibbles of c and the top 2 bits of a and b).
static inline void k4_scales_mins(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    uint32_t a, b, c;
    memcpy(&a, s, 4);
    memcpy(&b, s + 4, 4);
    memcpy(&c, s + 8, 4);
    uint32_t w[4] = {a & 0x3f3f3f3fu, (c & 0x0f0f0f0fu) | ((a >> 6) & 0x03030303u) << 4, b & 0x3f3f3f3fu,
                     ((c >> 4) & 0x0f0f0f0fu) | ((b >> 6) & 0x03030303u) << 4};
    memcpy(sc, w, 8);
    memcpy(mn, w + 2, 8);
}

// AVX-512BW: per 32 bytes of qs, a 512-bit vector of its low nibbles then its high ones, which
// is sub-blocks 2c and 2c + 1 in element order, against 64 activation codes in one step.
static AVX512_TARGET float dot_exact_q4_K(int64_t n, const block_q4_K *x, const block_q8_K *y) {
    const __m256i m15 = _mm256_set1_epi8(0x0f);
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; b++) {
        for (int o = 0; o < (int)sizeof(block_q4_K); o += 64)
            _mm_prefetch((const char *)(x + b) + EXACT_PREFETCH + o, _MM_HINT_T0);
        uint8_t sc[8], mn[8];
        k4_scales_mins(x[b].scales, sc, mn);
        // each pair sum of codes (at most 2 * 15 * 127) times its scale (at most 63), two to an int32
        __m512i acc = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * c));
            __m512i codes = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m15)),
                                               _mm256_and_si256(_mm256_srli_epi16(q, 4), m15), 1);
            __m512i scale =
                _mm512_inserti64x4(_mm512_set1_epi16(sc[2 * c]), _mm256_set1_epi16(sc[2 * c + 1]), 1);
            __m512i p = _mm512_maddubs_epi16(codes, _mm512_loadu_si512(y[b].qs + 64 * c));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(p, scale));
        }
        // the min term: min_j times the two code sums of sub-block j (each at most 16 * 127)
        __m128i m8;
        memcpy(&m8, mn, 8);
        __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(m8, dup));
        __m256i bs = _mm256_loadu_si256((const __m256i *)y[b].bsums);
        int32_t isum = _mm512_reduce_add_epi32(acc), msum = hsum_i32(_mm256_madd_epi16(mins16, bs));
        sum += (y[b].d * fp16_f16c(x[b].d)) * (float)isum - (y[b].d * fp16_f16c(x[b].dmin)) * (float)msum;
    }
    return sum;
}

AVX2_TARGET void ft_gemm_few_q8_0(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                  int nc, float *s, size_t ls) {
    for (int r = 0; r < nr; r++) // each weight row read once, from cache for the next tokens
        for (int c = 0; c < nc; c++)
            s[(size_t)c * ls + r] =
                dot_exact_q8_0(n, (const block_q8_0 *)((const uint8_t *)x + (size_t)r * bx),
                               (const block_q8_0 *)((const uint8_t *)y + (size_t)c * by));
}

AVX512_TARGET void ft_gemm_few_q4_K(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by,
                                    int nc, float *s, size_t ls) {
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++)
            s[(size_t)c * ls + r] =
                dot_exact_q4_K(n, (const block_q4_K *)((const uint8_t *)x + (size_t)r * bx),
                               (const block_q8_K *)((const uint8_t *)y + (size_t)c * by));
}

// A q4_K or q5_K super-block's 256 codes as 8 vectors in element order: per 32 bytes c of qs
// its low nibbles (sub-block 2c) and its high ones (2c + 1), with q5_K's fifth bits from qh
// (NULL: q4_K; bit 2c of qh[l] for element 64c + l, bit 2c + 1 for 64c + 32 + l).
static inline AVX2_TARGET void q45_K_codes(const uint8_t *qs, const uint8_t *qh, __m256i code[8]) {
    const __m256i m15 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        code[2 * c] = _mm256_and_si256(v, m15);
        code[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m15);
        if (qh) {
            code[2 * c] =
                _mm256_or_si256(code[2 * c], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c), one), 4));
            code[2 * c + 1] = _mm256_or_si256(code[2 * c + 1],
                                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c + 1), one), 4));
        }
    }
}

// A q6_K super-block's 256 codes (0..63, the value plus 32) as 8 vectors in element order:
// element 128h + 32k + l takes its low four bits from ql[64h + 32(k % 2) + l] (low nibble for
// k < 2) and its top two from bits 2k..2k+1 of qh[32h + l].
static inline AVX2_TARGET void q6_K_codes(const block_q6_K *b, __m256i code[8]) {
    const __m256i m15 = _mm256_set1_epi8(0x0f), m48 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l2 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        __m256i *c = code + 4 * h;
        c[0] = _mm256_or_si256(_mm256_and_si256(l1, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m48));
        c[1] = _mm256_or_si256(_mm256_and_si256(l2, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m48));
        c[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15), _mm256_and_si256(qh, m48));
        c[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m48));
    }
}

// q4_K and q5_K (x5) with AVX2 alone, a weight row's super-block decoded once for all the tokens:
// per 32 bytes of qs its low nibbles (sub-block 2c) and its high ones (2c + 1), with q5_K's fifth
// bits (bit 2c of qh[l] for element 64c + l, bit 2c + 1 for 64c + 32 + l), against 32 activation
// codes each, the sub-blocks' scales in VPMADDWD; per token the reference's float steps.
static AVX2_TARGET void few_q45_K(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                  float *s, size_t ls, bool x5) {
    enum { MAX_FEW = 8 };
    FT_ASSERT(nc <= MAX_FEW);
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    for (int r = 0; r < nr; r++) {
        const uint8_t *xr = (const uint8_t *)x + (size_t)r * bx;
        const size_t sb = x5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
        float sum[MAX_FEW] = {0};
        for (int64_t b = 0; b < n / QK_K; b++) {
            const block_q4_K *b4 = (const block_q4_K *)(xr + b * sb);
            const block_q5_K *b5 = (const block_q5_K *)(xr + b * sb);
            for (int o = 0; o < (int)sb; o += 64)
                _mm_prefetch((const char *)b4 + EXACT_PREFETCH + o, _MM_HINT_T0);
            uint8_t sc[8], mn[8];
            k4_scales_mins(x5 ? b5->scales : b4->scales, sc, mn);
            __m256i codes[8], scale[8];
            q45_K_codes(x5 ? b5->qs : b4->qs, x5 ? b5->qh : NULL, codes);
            for (int j = 0; j < 8; j++)
                scale[j] = _mm256_set1_epi16(sc[j]);
            __m128i m8;
            memcpy(&m8, mn, 8);
            const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(m8, dup));
            const float d = fp16_f16c(x5 ? b5->d : b4->d), dmin = fp16_f16c(x5 ? b5->dmin : b4->dmin);
            for (int t = 0; t < nc; t++) {
                const block_q8_K *yb = (const block_q8_K *)((const uint8_t *)y + (size_t)t * by) + b;
                __m256i acc = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) {
                    __m256i p = _mm256_maddubs_epi16(codes[j], _mm256_loadu_si256((const __m256i *)(yb->qs + 32 * j)));
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale[j]));
                }
                __m256i bs = _mm256_loadu_si256((const __m256i *)yb->bsums);
                int32_t isum = hsum_i32(acc), msum = hsum_i32(_mm256_madd_epi16(mins16, bs));
                sum[t] += (yb->d * d) * (float)isum - (yb->d * dmin) * (float)msum;
            }
        }
        for (int t = 0; t < nc; t++)
            s[(size_t)t * ls + r] = sum[t];
    }
}

AVX2_TARGET void ft_gemm_few_q4_K_avx2(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                      float *s, size_t ls) {
    few_q45_K(n, x, bx, nr, y, by, nc, s, ls, false);
}

AVX2_TARGET void ft_gemm_few_q5_K(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                  float *s, size_t ls) {
    few_q45_K(n, x, bx, nr, y, by, nc, s, ls, true);
}

// ---------------------------------------------------------------------------------------------
// The lane-per-token GEMMs' packing and weight rows (gemm_shared.h)

int ft_gemm_token_block(size_t vector_bytes, size_t block_bytes) {
    size_t v = block_bytes / vector_bytes;
    return v < 1 ? 1 : (int)v;
}

size_t ft_gemm_q8_0_packed(int lanes) {
    return (size_t)(QK8_0 / FT_GEMM_GROUP) * lanes * FT_GEMM_GROUP + 2 * (size_t)lanes * 4;
}

void ft_gemm_pack_q8_0(uint8_t *dst, const void *y, size_t by, int c0, int nc, int64_t nb, int off, int lanes) {
    const size_t stride = ft_gemm_q8_0_packed(lanes), gbytes = (size_t)lanes * FT_GEMM_GROUP;
    if (c0 + lanes > nc) memset(dst, 0, (size_t)nb * stride); // lanes past the last token
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + (size_t)b * stride;
        int32_t *start = (int32_t *)(p + QK8_0 / FT_GEMM_GROUP * gbytes);
        float *d = (float *)(start + lanes);
        for (int l = 0; l < lanes && c0 + l < nc; l++) {
            const block_q8_0 *yb = (const block_q8_0 *)((const uint8_t *)y + (size_t)(c0 + l) * by) + b;
            int sum = 0;
            for (int k = 0; k < QK8_0; k++)
                sum += yb->qs[k];
            for (int g = 0; g < QK8_0 / FT_GEMM_GROUP; g++)
                memcpy(p + g * gbytes + l * FT_GEMM_GROUP, yb->qs + g * FT_GEMM_GROUP, FT_GEMM_GROUP);
            start[l] = -off * sum;
            d[l] = ft_fp16_to_fp32(yb->d);
        }
    }
}

size_t ft_gemm_q8_K_packed(int pairs, int lanes) {
    return (size_t)(QK_K / FT_GEMM_GROUP) * lanes * FT_GEMM_GROUP + (size_t)lanes * 4 + (size_t)pairs * lanes * 4;
}

void ft_gemm_pack_q8_K(uint8_t *dst, const void *y, size_t by, int c0, int nc, int64_t nb, int pairs, int lanes) {
    const size_t stride = ft_gemm_q8_K_packed(pairs, lanes), gbytes = (size_t)lanes * FT_GEMM_GROUP;
    if (c0 + lanes > nc) memset(dst, 0, (size_t)nb * stride); // lanes past the last token
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + (size_t)b * stride;
        float *d = (float *)(p + QK_K / FT_GEMM_GROUP * gbytes);
        uint32_t *bsum = (uint32_t *)(d + lanes);
        for (int l = 0; l < lanes && c0 + l < nc; l++) {
            const block_q8_K *yb = (const block_q8_K *)((const uint8_t *)y + (size_t)(c0 + l) * by) + b;
            for (int g = 0; g < QK_K / FT_GEMM_GROUP; g++)
                memcpy(p + g * gbytes + l * FT_GEMM_GROUP, yb->qs + g * FT_GEMM_GROUP, FT_GEMM_GROUP);
            d[l] = yb->d;
            const int per = 16 / pairs / 2; // bsums of 16 per half of a word
            for (int i = 0; i < pairs; i++) {
                int lo = 0, hi = 0;
                for (int k = 0; k < per; k++) {
                    lo += yb->bsums[2 * per * i + k];
                    hi += yb->bsums[2 * per * i + per + k];
                }
                bsum[i * lanes + l] = (uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)hi << 16;
            }
        }
    }
}

// A pass's row r past the call's rows: zero codes (row_bytes) and zero scales (scale_bytes per
// block, at (b * rows + r) in the pass's scales).
static void zero_row(uint8_t *q, size_t row_bytes, void *scales, size_t scale_bytes, int r, int rows, int64_t nb) {
    memset(q, 0, row_bytes);
    for (int64_t b = 0; b < nb; b++)
        memset((uint8_t *)scales + (size_t)(b * rows + r) * scale_bytes, 0, scale_bytes);
}

static inline uint32_t pair16(int lo, int hi) {
    return (uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)hi << 16;
}

// Element j of a 32-element nibble block: qs[j] & 15 for j < 16, qs[j - 16] >> 4 after.
static inline AVX2_TARGET __m256i nibbles32(const uint8_t qs[16]) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m15 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m15), _mm_and_si128(v, m15));
}

// q5_0's codes: the nibble and, from bit j of qh, bit 4 of byte j.
static inline AVX2_TARGET __m256i q5_0_codes(const block_q5_0 *b) {
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

// A code book (16 int8 values) plus off, as a lookup table for _mm256_shuffle_epi8.
static inline AVX2_TARGET __m256i book(const int8_t values[16], int off) {
    const __m128i b = _mm_add_epi8(_mm_loadu_si128((const __m128i *)values), _mm_set1_epi8((char)off));
    return _mm256_broadcastsi128_si256(b);
}

AVX2_TARGET void ft_gemm_rows_32(enum ft_type t, int off, uint8_t *wq, float *wd, const uint8_t *x, size_t bx, int nr,
                                 int64_t nb, int rows) {
    const __m256i q8_off = _mm256_set1_epi8((char)off);
    const __m256i iq4_book = book(ft_kvalues_iq4nl, off), mxfp4_book = book(ft_kvalues_mxfp4, off);
    for (int r = 0; r < rows; r++) {
        uint8_t *q = wq + (size_t)r * nb * 32;
        if (r >= nr) {
            zero_row(q, (size_t)nb * 32, wd, sizeof(wd[0]), r, rows, nb);
            continue;
        }
        const uint8_t *xr = x + (size_t)r * bx;
        for (int64_t b = 0; b < nb; b++) {
            __m256i codes;
            float d;
            switch (t) {
            case FT_TYPE_Q8_0: {
                const block_q8_0 *xb = (const block_q8_0 *)xr + b;
                codes = _mm256_add_epi8(_mm256_loadu_si256((const __m256i *)xb->qs), q8_off);
                d = fp16_f16c(xb->d);
                break;
            }
            case FT_TYPE_Q4_0: {
                const block_q4_0 *xb = (const block_q4_0 *)xr + b;
                codes = nibbles32(xb->qs);
                d = fp16_f16c(xb->d);
                break;
            }
            case FT_TYPE_Q5_0: {
                const block_q5_0 *xb = (const block_q5_0 *)xr + b;
                codes = q5_0_codes(xb);
                d = fp16_f16c(xb->d);
                break;
            }
            case FT_TYPE_IQ4_NL: {
                const block_iq4_nl *xb = (const block_iq4_nl *)xr + b;
                codes = _mm256_shuffle_epi8(iq4_book, nibbles32(xb->qs));
                d = fp16_f16c(xb->d);
                break;
            }
            case FT_TYPE_MXFP4: {
                const block_mxfp4 *xb = (const block_mxfp4 *)xr + b;
                codes = _mm256_shuffle_epi8(mxfp4_book, nibbles32(xb->qs));
                d = ft_e8m0_to_fp32_half(xb->e);
                break;
            }
            default: FT_ASSERT(!"ft_gemm_rows_32: not a 32-element format");
            }
            _mm256_storeu_si256((__m256i *)(q + b * 32), codes);
            wd[b * rows + r] = d;
        }
    }
}

AVX2_TARGET void ft_gemm_rows_q45_K(uint8_t *wq, ft_gemm_q45_K_scales *ws, const uint8_t *x, size_t bx, int nr,
                                    int64_t nb, bool x5, int rows) {
    for (int r = 0; r < rows; r++) {
        uint8_t *q = wq + (size_t)r * nb * QK_K;
        if (r >= nr) {
            zero_row(q, (size_t)nb * QK_K, ws, sizeof(ws[0]), r, rows, nb);
            continue;
        }
        for (int64_t b = 0; b < nb; b++) {
            const block_q4_K *b4 = (const block_q4_K *)(x + (size_t)r * bx) + b;
            const block_q5_K *b5 = (const block_q5_K *)(x + (size_t)r * bx) + b;
            __m256i code[8];
            q45_K_codes(x5 ? b5->qs : b4->qs, x5 ? b5->qh : NULL, code);
            for (int k = 0; k < 8; k++)
                _mm256_storeu_si256((__m256i *)(q + b * QK_K + 32 * k), code[k]);
            ft_gemm_q45_K_scales *w = &ws[b * rows + r];
            uint8_t sc[8], mn[8];
            k4_scales_mins(x5 ? b5->scales : b4->scales, sc, mn);
            for (int j = 0; j < 8; j++)
                w->sc[j] = sc[j];
            for (int i = 0; i < 4; i++)
                w->mn[i] = pair16(mn[2 * i], mn[2 * i + 1]);
            w->d = fp16_f16c(x5 ? b5->d : b4->d);
            w->dmin = fp16_f16c(x5 ? b5->dmin : b4->dmin);
        }
    }
}

AVX2_TARGET void ft_gemm_rows_q6_K(uint8_t *wq, ft_gemm_q6_K_scales *ws, const uint8_t *x, size_t bx, int nr,
                                   int64_t nb, int rows) {
    for (int r = 0; r < rows; r++) {
        uint8_t *q = wq + (size_t)r * nb * QK_K;
        if (r >= nr) {
            zero_row(q, (size_t)nb * QK_K, ws, sizeof(ws[0]), r, rows, nb);
            continue;
        }
        const block_q6_K *xb = (const block_q6_K *)(x + (size_t)r * bx);
        for (int64_t b = 0; b < nb; b++) {
            __m256i code[8];
            q6_K_codes(&xb[b], code);
            for (int k = 0; k < 8; k++)
                _mm256_storeu_si256((__m256i *)(q + b * QK_K + 32 * k), code[k]);
            ft_gemm_q6_K_scales *w = &ws[b * rows + r];
            for (int j = 0; j < 16; j++)
                w->sc[j] = xb[b].scales[j];
            for (int i = 0; i < 8; i++)
                w->sc_pair[i] = pair16(xb[b].scales[2 * i], xb[b].scales[2 * i + 1]);
            w->d = fp16_f16c(xb[b].d);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Few tokens for q6_K (gemm_shared.h): the exact sums and the reference's float steps, each
// row's super-block decoded once for the call's tokens

enum { FEW_MAX = 8 };

AVX2_TARGET void ft_gemm_few_q6_K(int64_t n, const void *x, size_t bx, int nr, const void *y, size_t by, int nc,
                                  float *s, size_t ls) {
    FT_ASSERT(nc <= FEW_MAX);
    for (int r = 0; r < nr; r++) {
        const block_q6_K *xr = (const block_q6_K *)((const uint8_t *)x + (size_t)r * bx);
        float sum[FEW_MAX] = {0};
        for (int64_t b = 0; b < n / QK_K; b++) {
            for (int o = 0; o < (int)sizeof(block_q6_K); o += 64)
                _mm_prefetch((const char *)(xr + b) + EXACT_PREFETCH + o, _MM_HINT_T0);
            // codes 0..63 of elements 32k.. (k = 0..7) and the scales of their two sub-blocks of 16
            __m256i code[8], scale[8];
            q6_K_codes(&xr[b], code);
            for (int k = 0; k < 8; k++)
                scale[k] = _mm256_set_m128i(_mm_set1_epi16(xr[b].scales[2 * k + 1]), _mm_set1_epi16(xr[b].scales[2 * k]));
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xr[b].scales));
            const float d = fp16_f16c(xr[b].d);
            for (int c = 0; c < nc; c++) {
                const block_q8_K *yb = (const block_q8_K *)((const uint8_t *)y + (size_t)c * by) + b;
                __m256i acc = _mm256_setzero_si256();
                for (int k = 0; k < 8; k++) {
                    const __m256i p = _mm256_maddubs_epi16(code[k], _mm256_loadu_si256((const __m256i *)(yb->qs + 32 * k)));
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale[k]));
                }
                const __m256i bs = _mm256_loadu_si256((const __m256i *)yb->bsums);
                const int32_t isum = hsum_i32(acc) - 32 * hsum_i32(_mm256_madd_epi16(sc16, bs));
                sum[c] += (yb->d * d) * (float)isum;
            }
        }
        for (int c = 0; c < nc; c++)
            s[(size_t)c * ls + r] = sum[c];
    }
}
