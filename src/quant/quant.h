// quant: tensor element types and the row operations on them.
//
// `enum ft_type` numbers are the GGUF on-disk type ids (ggml's), so they are append-only and
// a file's type field maps straight onto them. Every id GGUF defines has traits (name, block
// size, block bytes) so that a reader can size any tensor; only the types ft computes with have
// ops (dequantize, quantize, dot product).
//
// Three tiers per op: `*_ref` is the scalar, deterministic reference; `vec_dot` in the ops table
// is the fastest path this CPU supports (AVX2 chosen at run time, never an illegal instruction
// on an older CPU); CUDA lives in the backend. All functions here are pure and thread-safe.
#ifndef FT_QUANT_H
#define FT_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blocks.h"
#include "../util/rng.h"

enum ft_type {
    FT_TYPE_F32 = 0,
    FT_TYPE_F16 = 1,
    FT_TYPE_Q4_0 = 2,
    FT_TYPE_Q4_1 = 3,
    // 4 and 5 were Q4_2 and Q4_3, removed from GGUF
    FT_TYPE_Q5_0 = 6,
    FT_TYPE_Q5_1 = 7,
    FT_TYPE_Q8_0 = 8,
    FT_TYPE_Q8_1 = 9,
    FT_TYPE_Q2_K = 10,
    FT_TYPE_Q3_K = 11,
    FT_TYPE_Q4_K = 12,
    FT_TYPE_Q5_K = 13,
    FT_TYPE_Q6_K = 14,
    FT_TYPE_Q8_K = 15,
    FT_TYPE_IQ2_XXS = 16,
    FT_TYPE_IQ2_XS = 17,
    FT_TYPE_IQ3_XXS = 18,
    FT_TYPE_IQ1_S = 19,
    FT_TYPE_IQ4_NL = 20,
    FT_TYPE_IQ3_S = 21,
    FT_TYPE_IQ2_S = 22,
    FT_TYPE_IQ4_XS = 23,
    FT_TYPE_I8 = 24,
    FT_TYPE_I16 = 25,
    FT_TYPE_I32 = 26,
    FT_TYPE_I64 = 27,
    FT_TYPE_F64 = 28,
    FT_TYPE_IQ1_M = 29,
    FT_TYPE_BF16 = 30,
    // 31..33 were Q4_0_4_4, Q4_0_4_8, Q4_0_8_8, removed from GGUF
    FT_TYPE_TQ1_0 = 34,
    FT_TYPE_TQ2_0 = 35,
    // 36..38 were IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8, removed from GGUF
    FT_TYPE_MXFP4 = 39,
    FT_TYPE_NVFP4 = 40,
    FT_TYPE_Q1_0 = 41,
    FT_TYPE_Q2_0 = 42,
    FT_TYPE_COUNT = 43,
};

// Static facts about a type. block_elems == 0 marks an id that is not a valid type.
typedef struct ft_type_traits {
    const char *name;  // as llama.cpp names it: "f32", "q4_K", "iq4_xs", ...
    int block_elems;   // elements per block (1 for plain scalars)
    int block_bytes;   // bytes per block
} ft_type_traits;

// Traits of a type id read from a file. Returns NULL for an id GGUF does not define (or a
// removed one); never aborts.
const ft_type_traits *ft_type_traits_find(uint32_t type_id);

// Name of a type ("q4_K"), or "unknown" for an invalid id.
const char *ft_type_name(uint32_t type_id);

// Parses a type name, case-insensitive ("Q4_K", "bf16"). Returns false if unknown.
bool ft_type_from_name(const char *name, enum ft_type *out);

// Bytes of a row of n elements. n must be a multiple of the block size (FT_ASSERT).
size_t ft_row_bytes(enum ft_type type, int64_t n);

// ---------------------------------------------------------------------------------------------
// Row operations. n is always a multiple of the type's block size.

typedef void (*ft_to_float_fn)(const void *x, float *y, int64_t n);
typedef void (*ft_from_float_fn)(const float *x, void *y, int64_t n);
// Dot product of a weight row x (the type's format) with an activation row y (in the type's
// vec_dot_type format), both n elements long.
typedef float (*ft_vec_dot_fn)(int64_t n, const void *x, const void *y);
// The same on a tile: nr weight rows x (bx bytes apart) with nc activation rows y (by bytes
// apart), s[c * ls + r] = vec_dot(n, x row r, y row c), equal to vec_dot to the bit. Decodes
// each weight block once for several activation rows (prefill's matmuls).
typedef void (*ft_vec_dot_tile_fn)(int64_t n, const void *x, size_t bx, int nr, const void *y,
                                   size_t by, int nc, float *s, size_t ls);

typedef struct ft_quant_ops {
    ft_to_float_fn to_float;         // dequantize (reference; exact, so also the fast path)
    ft_from_float_fn from_float_ref; // quantize, reference
    ft_vec_dot_fn vec_dot_ref;       // scalar reference dot product
    ft_vec_dot_fn vec_dot;           // fastest dot product on this CPU
    enum ft_type vec_dot_type;       // format the activations are quantized to for vec_dot
    ft_vec_dot_tile_fn vec_dot_tile; // vec_dot over a tile on this CPU; NULL: loop over vec_dot
    // Prefill's GEMM on this CPU (AMX tiles, AVX-512 VNNI or AVX2), the tile contract but equal to vec_dot_ref to the
    // bit rather than to vec_dot (integer formats; bf16 sums in float: within
    // n * 2^-24 * sum |x_i y_i| of vec_dot_ref). Any nr, nc >= 1; each output depends only on
    // its own weight and activation rows, never on the others of the call. For the rows of
    // prefill chunks (see FT_GEMM_MIN_COLS), best given many weight rows per call (it packs
    // the activations once per call). NULL: vec_dot_tile.
    ft_vec_dot_tile_fn gemm;
} ft_quant_ops;

// The ops of a type ft computes with, or NULL for a type it does not (yet) support.
// The first call detects the CPU's features; thread-safe.
const ft_quant_ops *ft_quant_ops_find(enum ft_type type);

// Which SIMD level the kernels use on this CPU: "avx512" (AVX2 dot products and AVX-512BW
// tiles where there is one), "avx2" or "scalar". FT_SIMD=scalar in the environment forces the
// scalar path, FT_SIMD=avx2 the AVX2 one, FT_SIMD=avx512 the AVX-512 tiles without AMX (for
// tests and benchmarks).
const char *ft_quant_simd_name(void);

// True on AMD Zen 4 (family 19h with AVX-512), which keeps the AVX2 tile kernels (ops.c).
bool ft_quant_zen4(void);

// True where prefill's GEMMs run on AMX tiles (ft_quant_ops.gemm: q8_0, q4_K, and bf16 with
// AMX-BF16): the CPU has AMX-INT8 and AVX-512BW, the OS grants the tile state, FT_AMX=0 does
// not turn them off and FT_SIMD does not force avx2, avx512 or scalar. They are not
// bit-identical to the per-row kernels, so callers choose them per row by the row's own
// sequence chunk (backend.h, ft_backend.row_gemm), never by a call's row count.
bool ft_quant_amx(void);

// Which GEMMs prefill's rows take (ft_quant_ops.gemm): "amx" (as ft_quant_amx; the other formats
// with AVX-512 VNNI), "vnni" (AVX-512 VNNI for the integer formats, and AVX-512 BF16 for bf16
// where the CPU has it, on CPUs without AMX or with FT_AMX=0), "avxvnni" (AVX-VNNI for the
// integer formats, on CPUs without AVX-512 VNNI or with FT_SIMD=avxvnni), "avx2" (AVX2 for all
// of them, on CPUs without either VNNI or with FT_SIMD=avx2; also bf16's wherever the CPU lacks
// AVX-512 BF16) or "none" (FT_SIMD=scalar, or no AVX2).
const char *ft_quant_gemm_name(void);

// A sequence's chunk of this many tokens or more takes its type's gemm (ft_backend.row_gemm):
// from here it beats vec_dot_tile.
#define FT_GEMM_MIN_COLS 4

// Fills dst with a row of n random but valid values of type t (n a multiple of the block size):
// normal floats for f32/f16/bf16; for block types random codes and sub-scales with super-scales
// chosen so the values have about the given standard deviation and mean near 0. For synthetic
// models. Aborts on an activation-only or unsupported type.
void ft_quant_random_row(enum ft_type t, ft_rng *rng, float std, void *dst, int64_t n);

// ---------------------------------------------------------------------------------------------
// Per-type scalar functions. Dequantization is exact arithmetic, so it has one version;
// quantization has a reference (`_ref`) that faster paths must match.

void ft_dequantize_row_q4_0(const void *x, float *y, int64_t n);
void ft_dequantize_row_q4_1(const void *x, float *y, int64_t n);
void ft_dequantize_row_q5_0(const void *x, float *y, int64_t n);
void ft_dequantize_row_q5_1(const void *x, float *y, int64_t n);
void ft_dequantize_row_q8_0(const void *x, float *y, int64_t n);
void ft_dequantize_row_q8_1(const void *x, float *y, int64_t n);
void ft_dequantize_row_q2_K(const void *x, float *y, int64_t n);
void ft_dequantize_row_q3_K(const void *x, float *y, int64_t n);
void ft_dequantize_row_q4_K(const void *x, float *y, int64_t n);
void ft_dequantize_row_q5_K(const void *x, float *y, int64_t n);
void ft_dequantize_row_q6_K(const void *x, float *y, int64_t n);
void ft_dequantize_row_q8_K(const void *x, float *y, int64_t n);
void ft_dequantize_row_iq4_nl(const void *x, float *y, int64_t n);
void ft_dequantize_row_iq4_xs(const void *x, float *y, int64_t n);
void ft_dequantize_row_mxfp4(const void *x, float *y, int64_t n);
void ft_dequantize_row_f16(const void *x, float *y, int64_t n);
void ft_dequantize_row_bf16(const void *x, float *y, int64_t n);
void ft_dequantize_row_f32(const void *x, float *y, int64_t n);

void ft_quantize_row_q4_0_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q4_1_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q5_0_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q5_1_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q8_0_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q8_1_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q2_K_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q3_K_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q4_K_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q5_K_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q6_K_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_q8_K_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_iq4_nl_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_iq4_xs_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_mxfp4_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_f16_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_bf16_ref(const float *x, void *y, int64_t n);
void ft_quantize_row_f32_ref(const float *x, void *y, int64_t n);

#endif
