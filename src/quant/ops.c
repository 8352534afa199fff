// ops.c: the table of row operations per type, and the run-time choice of SIMD level.
#include "quant.h"
#include "dot.h"
#include "../util/env.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define OPS(type, vdt)                                                                   \
    {ft_dequantize_row_##type, ft_quantize_row_##type##_ref, ft_vec_dot_##type##_ref,    \
     ft_vec_dot_##type##_ref, vdt}

static ft_quant_ops g_ops[FT_TYPE_COUNT] = {
    [FT_TYPE_F32] = OPS(f32, FT_TYPE_F32),
    [FT_TYPE_F16] = OPS(f16, FT_TYPE_F16),
    [FT_TYPE_BF16] = OPS(bf16, FT_TYPE_BF16),
    [FT_TYPE_Q4_0] = OPS(q4_0, FT_TYPE_Q8_0),
    [FT_TYPE_Q4_1] = OPS(q4_1, FT_TYPE_Q8_1),
    [FT_TYPE_Q5_0] = OPS(q5_0, FT_TYPE_Q8_0),
    [FT_TYPE_Q5_1] = OPS(q5_1, FT_TYPE_Q8_1),
    [FT_TYPE_Q8_0] = OPS(q8_0, FT_TYPE_Q8_0),
    [FT_TYPE_Q2_K] = OPS(q2_K, FT_TYPE_Q8_K),
    [FT_TYPE_Q3_K] = OPS(q3_K, FT_TYPE_Q8_K),
    [FT_TYPE_Q4_K] = OPS(q4_K, FT_TYPE_Q8_K),
    [FT_TYPE_Q5_K] = OPS(q5_K, FT_TYPE_Q8_K),
    [FT_TYPE_Q6_K] = OPS(q6_K, FT_TYPE_Q8_K),
    [FT_TYPE_IQ4_NL] = OPS(iq4_nl, FT_TYPE_Q8_0),
    [FT_TYPE_IQ4_XS] = OPS(iq4_xs, FT_TYPE_Q8_K),
    [FT_TYPE_MXFP4] = OPS(mxfp4, FT_TYPE_Q8_0),
    // Activation-only formats: quantize and dequantize, no dot product of their own.
    [FT_TYPE_Q8_1] = {ft_dequantize_row_q8_1, ft_quantize_row_q8_1_ref, NULL, NULL, FT_TYPE_Q8_1},
    [FT_TYPE_Q8_K] = {ft_dequantize_row_q8_K, ft_quantize_row_q8_K_ref, NULL, NULL, FT_TYPE_Q8_K},
};

static const char *g_simd = "scalar";
static bool g_amx;
static const char *g_gemm = "none";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

// F16C is CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know it; the
// AVX2 check below already covers the OS saving the YMM state).
static bool cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

bool ft_quant_zen4(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u) return false; // "Auth"enticAMD
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    unsigned family = (a >> 8 & 0xf) + (a >> 20 & 0xff);
    return family == 0x19 && __builtin_cpu_supports("avx512f"); // Zen 3 is 0x19 too, without AVX-512
}

// The VNNI GEMMs of the formats AMX has no tiles for (used with and without AMX).
static void set_vnni_only_gemms(void) {
    g_ops[FT_TYPE_Q4_0].gemm = ft_gemm_q4_0_vnni;
    g_ops[FT_TYPE_Q5_0].gemm = ft_gemm_q5_0_vnni;
    g_ops[FT_TYPE_IQ4_NL].gemm = ft_gemm_iq4_nl_vnni;
    g_ops[FT_TYPE_MXFP4].gemm = ft_gemm_mxfp4_vnni;
    g_ops[FT_TYPE_Q5_K].gemm = ft_gemm_q5_K_vnni;
    g_ops[FT_TYPE_Q6_K].gemm = ft_gemm_q6_K_vnni;
}

static void ops_init(void) {
    const char *force = ft_env_str(FT_ENV_SIMD);
    if (force && strcmp(force, "scalar") == 0) return;
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())) return;
    g_simd = "avx2";
#define USE_AVX2(T, type) g_ops[T].vec_dot = ft_vec_dot_##type##_avx2
    USE_AVX2(FT_TYPE_F32, f32);
    USE_AVX2(FT_TYPE_F16, f16);
    USE_AVX2(FT_TYPE_BF16, bf16);
    USE_AVX2(FT_TYPE_Q4_0, q4_0);
    USE_AVX2(FT_TYPE_Q4_1, q4_1);
    USE_AVX2(FT_TYPE_Q5_0, q5_0);
    USE_AVX2(FT_TYPE_Q5_1, q5_1);
    USE_AVX2(FT_TYPE_Q8_0, q8_0);
    USE_AVX2(FT_TYPE_Q2_K, q2_K);
    USE_AVX2(FT_TYPE_Q3_K, q3_K);
    USE_AVX2(FT_TYPE_Q4_K, q4_K);
    USE_AVX2(FT_TYPE_Q5_K, q5_K);
    USE_AVX2(FT_TYPE_Q6_K, q6_K);
    USE_AVX2(FT_TYPE_IQ4_NL, iq4_nl);
    USE_AVX2(FT_TYPE_IQ4_XS, iq4_xs);
    USE_AVX2(FT_TYPE_MXFP4, mxfp4);
#undef USE_AVX2
#define USE_TILE(T, type) g_ops[T].vec_dot_tile = ft_vec_dot_tile_##type##_avx2
    USE_TILE(FT_TYPE_F32, f32);
    USE_TILE(FT_TYPE_F16, f16);
    USE_TILE(FT_TYPE_BF16, bf16);
    USE_TILE(FT_TYPE_Q4_0, q4_0);
    USE_TILE(FT_TYPE_Q4_1, q4_1);
    USE_TILE(FT_TYPE_Q5_0, q5_0);
    USE_TILE(FT_TYPE_Q5_1, q5_1);
    USE_TILE(FT_TYPE_Q8_0, q8_0);
    USE_TILE(FT_TYPE_Q4_K, q4_K);
    USE_TILE(FT_TYPE_Q5_K, q5_K);
    USE_TILE(FT_TYPE_Q6_K, q6_K);
    USE_TILE(FT_TYPE_IQ4_NL, iq4_nl);
    USE_TILE(FT_TYPE_MXFP4, mxfp4);
#undef USE_TILE
    // Prefill's AVX2 GEMMs (AVX-VNNI's for the integer formats where the CPU has it; FT_SIMD=avx2
    // keeps AVX2's: an AVX2-only CPU), until AVX-512 VNNI, BF16 or AMX ones replace them below
    // (the integer formats' bits are the same on all of them).
    const bool avxvnni = !(force && strcmp(force, "avx2") == 0) && ft_gemm_avxvnni_supported();
    g_gemm = avxvnni ? "avxvnni" : "avx2";
#define USE_GEMM(T, type) g_ops[T].gemm = avxvnni ? ft_gemm_##type##_avxvnni : ft_gemm_##type##_avx2
    USE_GEMM(FT_TYPE_Q8_0, q8_0);
    USE_GEMM(FT_TYPE_Q4_0, q4_0);
    USE_GEMM(FT_TYPE_Q5_0, q5_0);
    USE_GEMM(FT_TYPE_IQ4_NL, iq4_nl);
    USE_GEMM(FT_TYPE_MXFP4, mxfp4);
    USE_GEMM(FT_TYPE_Q4_K, q4_K);
    USE_GEMM(FT_TYPE_Q5_K, q5_K);
    USE_GEMM(FT_TYPE_Q6_K, q6_K);
#undef USE_GEMM
    g_ops[FT_TYPE_BF16].gemm = ft_gemm_bf16_avx2;
    // AVX-512BW tiles where the CPU and OS have them (FT_SIMD=avx2 and avxvnni keep the AVX2 ones)
    if (force && (strcmp(force, "avx2") == 0 || strcmp(force, "avxvnni") == 0)) return;
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")))
        return;
    g_simd = "avx512";
    // Zen 4 runs 512-bit instructions as two 256-bit halves: there the AVX2 tiles are as fast
    // from the cache and nearly twice as fast streaming weights from memory (decode), so it
    // keeps them unless FT_SIMD=avx512 asks (docs/performance.md); its GEMMs stay AVX-512.
    if (!ft_quant_zen4() || (force && strcmp(force, "avx512") == 0)) {
        g_ops[FT_TYPE_Q4_K].vec_dot_tile = ft_vec_dot_tile_q4_K_avx512;
        g_ops[FT_TYPE_Q8_0].vec_dot_tile = ft_vec_dot_tile_q8_0_avx512;
        if (__builtin_cpu_supports("avx512vnni")) {
            g_ops[FT_TYPE_Q8_0].vec_dot_tile = ft_vec_dot_tile_q8_0_vnni;
            g_ops[FT_TYPE_Q4_K].vec_dot_tile = ft_vec_dot_tile_q4_K_vnni;
            g_ops[FT_TYPE_MXFP4].vec_dot_tile = ft_vec_dot_tile_mxfp4_vnni;
        }
    }
    // Prefill's GEMMs on AMX tiles where the CPU and OS have them (FT_AMX=0 keeps them off, as
    // FT_SIMD=avx512 or avx2 do). They are not bit-identical to the AVX kernels (they sum in
    // the scalar reference's order, those per lane), so which rows take them is a function of
    // each row's own sequence chunk, never of a call's row count (backend.h, ft_backend.row_gemm):
    // a sequence computes the same bits alone or batched.
    if (ft_env_flag(FT_ENV_AMX) && !(force && strcmp(force, "avx512") == 0) && ft_amx_init()) {
        g_amx = true;
        g_gemm = "amx";
        g_ops[FT_TYPE_Q4_K].gemm = ft_gemm_q4_K_amx;
        if (ft_amx_has_bf16()) g_ops[FT_TYPE_BF16].gemm = ft_gemm_bf16_amx;
        g_ops[FT_TYPE_Q8_0].gemm = ft_gemm_q8_0_amx;
        if (ft_gemm_vnni_supported()) set_vnni_only_gemms(); // AMX has no tiles for these; the same bits either way
        return;
    }
    // Without AMX (or with it turned off), the VNNI GEMMs: the same bits as AMX's, by the same
    // per-row rule; bf16 with AVX-512 BF16 (float sums in another order than AMX's).
    if (!ft_gemm_vnni_supported()) return;
    g_gemm = "vnni";
    g_ops[FT_TYPE_Q4_K].gemm = ft_gemm_q4_K_vnni;
    g_ops[FT_TYPE_Q8_0].gemm = ft_gemm_q8_0_vnni;
    set_vnni_only_gemms();
    if (ft_gemm_bf16_avx512_supported()) g_ops[FT_TYPE_BF16].gemm = ft_gemm_bf16_avx512;
}

const ft_quant_ops *ft_quant_ops_find(enum ft_type type) {
    pthread_once(&g_once, ops_init);
    if ((unsigned)type >= FT_TYPE_COUNT || !g_ops[type].to_float) return NULL;
    return &g_ops[type];
}

bool ft_quant_amx(void) {
    pthread_once(&g_once, ops_init);
    return g_amx;
}

const char *ft_quant_gemm_name(void) {
    pthread_once(&g_once, ops_init);
    return g_gemm;
}

const char *ft_quant_simd_name(void) {
    pthread_once(&g_once, ops_init);
    return g_simd;
}
