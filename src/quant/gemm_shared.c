// gemm_shared.c: per-thread scratch and the few-token path of prefill's GEMMs (gemm_shared.h).
//
// The functions carry their own target attributes, so the file builds with the project's plain
// flags; callers enter them only after ops.c has seen the CPU support them.
#include "gemm_shared.h"
#include "blocks.h"
#include "fp16.h"
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
