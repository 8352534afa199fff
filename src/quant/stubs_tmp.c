// stubs_tmp.c: TEMPORARY weak stand-ins so the tree links while the quant functions are
// being written. Each real definition overrides its stub. Delete this file when all exist.
#include "quant.h"
#include "dot.h"
#include "../util/util.h"

#define STUB(what) ft_abort(__FILE__, __LINE__, "%s is not written yet", what)

__attribute__((weak)) void ft_dequantize_row_q4_0(const void *x, float *y, int64_t n) { STUB("dequantize q4_0"); }
__attribute__((weak)) void ft_quantize_row_q4_0_ref(const float *x, void *y, int64_t n) { STUB("quantize q4_0"); }
__attribute__((weak)) void ft_dequantize_row_q4_1(const void *x, float *y, int64_t n) { STUB("dequantize q4_1"); }
__attribute__((weak)) void ft_quantize_row_q4_1_ref(const float *x, void *y, int64_t n) { STUB("quantize q4_1"); }
__attribute__((weak)) void ft_dequantize_row_q5_0(const void *x, float *y, int64_t n) { STUB("dequantize q5_0"); }
__attribute__((weak)) void ft_quantize_row_q5_0_ref(const float *x, void *y, int64_t n) { STUB("quantize q5_0"); }
__attribute__((weak)) void ft_dequantize_row_q5_1(const void *x, float *y, int64_t n) { STUB("dequantize q5_1"); }
__attribute__((weak)) void ft_quantize_row_q5_1_ref(const float *x, void *y, int64_t n) { STUB("quantize q5_1"); }
__attribute__((weak)) void ft_dequantize_row_q8_0(const void *x, float *y, int64_t n) { STUB("dequantize q8_0"); }
__attribute__((weak)) void ft_quantize_row_q8_0_ref(const float *x, void *y, int64_t n) { STUB("quantize q8_0"); }
__attribute__((weak)) void ft_dequantize_row_q8_1(const void *x, float *y, int64_t n) { STUB("dequantize q8_1"); }
__attribute__((weak)) void ft_quantize_row_q8_1_ref(const float *x, void *y, int64_t n) { STUB("quantize q8_1"); }
__attribute__((weak)) void ft_dequantize_row_q2_K(const void *x, float *y, int64_t n) { STUB("dequantize q2_K"); }
__attribute__((weak)) void ft_quantize_row_q2_K_ref(const float *x, void *y, int64_t n) { STUB("quantize q2_K"); }
__attribute__((weak)) void ft_dequantize_row_q3_K(const void *x, float *y, int64_t n) { STUB("dequantize q3_K"); }
__attribute__((weak)) void ft_quantize_row_q3_K_ref(const float *x, void *y, int64_t n) { STUB("quantize q3_K"); }
__attribute__((weak)) void ft_dequantize_row_q4_K(const void *x, float *y, int64_t n) { STUB("dequantize q4_K"); }
__attribute__((weak)) void ft_quantize_row_q4_K_ref(const float *x, void *y, int64_t n) { STUB("quantize q4_K"); }
__attribute__((weak)) void ft_dequantize_row_q5_K(const void *x, float *y, int64_t n) { STUB("dequantize q5_K"); }
__attribute__((weak)) void ft_quantize_row_q5_K_ref(const float *x, void *y, int64_t n) { STUB("quantize q5_K"); }
__attribute__((weak)) void ft_dequantize_row_q6_K(const void *x, float *y, int64_t n) { STUB("dequantize q6_K"); }
__attribute__((weak)) void ft_quantize_row_q6_K_ref(const float *x, void *y, int64_t n) { STUB("quantize q6_K"); }
__attribute__((weak)) void ft_dequantize_row_q8_K(const void *x, float *y, int64_t n) { STUB("dequantize q8_K"); }
__attribute__((weak)) void ft_quantize_row_q8_K_ref(const float *x, void *y, int64_t n) { STUB("quantize q8_K"); }
__attribute__((weak)) void ft_dequantize_row_iq4_nl(const void *x, float *y, int64_t n) { STUB("dequantize iq4_nl"); }
__attribute__((weak)) void ft_quantize_row_iq4_nl_ref(const float *x, void *y, int64_t n) { STUB("quantize iq4_nl"); }
__attribute__((weak)) void ft_dequantize_row_iq4_xs(const void *x, float *y, int64_t n) { STUB("dequantize iq4_xs"); }
__attribute__((weak)) void ft_quantize_row_iq4_xs_ref(const float *x, void *y, int64_t n) { STUB("quantize iq4_xs"); }
__attribute__((weak)) void ft_dequantize_row_mxfp4(const void *x, float *y, int64_t n) { STUB("dequantize mxfp4"); }
__attribute__((weak)) void ft_quantize_row_mxfp4_ref(const float *x, void *y, int64_t n) { STUB("quantize mxfp4"); }
__attribute__((weak)) void ft_dequantize_row_f16(const void *x, float *y, int64_t n) { STUB("dequantize f16"); }
__attribute__((weak)) void ft_quantize_row_f16_ref(const float *x, void *y, int64_t n) { STUB("quantize f16"); }
__attribute__((weak)) void ft_dequantize_row_bf16(const void *x, float *y, int64_t n) { STUB("dequantize bf16"); }
__attribute__((weak)) void ft_quantize_row_bf16_ref(const float *x, void *y, int64_t n) { STUB("quantize bf16"); }
__attribute__((weak)) void ft_dequantize_row_f32(const void *x, float *y, int64_t n) { STUB("dequantize f32"); }
__attribute__((weak)) void ft_quantize_row_f32_ref(const float *x, void *y, int64_t n) { STUB("quantize f32"); }
__attribute__((weak)) float ft_vec_dot_f32_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot f32 ref"); }
__attribute__((weak)) float ft_vec_dot_f32_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot f32 avx2"); }
__attribute__((weak)) float ft_vec_dot_f16_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot f16 ref"); }
__attribute__((weak)) float ft_vec_dot_f16_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot f16 avx2"); }
__attribute__((weak)) float ft_vec_dot_bf16_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot bf16 ref"); }
__attribute__((weak)) float ft_vec_dot_bf16_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot bf16 avx2"); }
__attribute__((weak)) float ft_vec_dot_q4_0_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q4_0 ref"); }
__attribute__((weak)) float ft_vec_dot_q4_0_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q4_0 avx2"); }
__attribute__((weak)) float ft_vec_dot_q4_1_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q4_1 ref"); }
__attribute__((weak)) float ft_vec_dot_q4_1_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q4_1 avx2"); }
__attribute__((weak)) float ft_vec_dot_q5_0_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q5_0 ref"); }
__attribute__((weak)) float ft_vec_dot_q5_0_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q5_0 avx2"); }
__attribute__((weak)) float ft_vec_dot_q5_1_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q5_1 ref"); }
__attribute__((weak)) float ft_vec_dot_q5_1_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q5_1 avx2"); }
__attribute__((weak)) float ft_vec_dot_q8_0_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q8_0 ref"); }
__attribute__((weak)) float ft_vec_dot_q8_0_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q8_0 avx2"); }
__attribute__((weak)) float ft_vec_dot_q2_K_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q2_K ref"); }
__attribute__((weak)) float ft_vec_dot_q2_K_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q2_K avx2"); }
__attribute__((weak)) float ft_vec_dot_q3_K_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q3_K ref"); }
__attribute__((weak)) float ft_vec_dot_q3_K_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q3_K avx2"); }
__attribute__((weak)) float ft_vec_dot_q4_K_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q4_K ref"); }
__attribute__((weak)) float ft_vec_dot_q4_K_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q4_K avx2"); }
__attribute__((weak)) float ft_vec_dot_q5_K_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q5_K ref"); }
__attribute__((weak)) float ft_vec_dot_q5_K_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q5_K avx2"); }
__attribute__((weak)) float ft_vec_dot_q6_K_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot q6_K ref"); }
__attribute__((weak)) float ft_vec_dot_q6_K_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot q6_K avx2"); }
__attribute__((weak)) float ft_vec_dot_iq4_nl_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot iq4_nl ref"); }
__attribute__((weak)) float ft_vec_dot_iq4_nl_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot iq4_nl avx2"); }
__attribute__((weak)) float ft_vec_dot_iq4_xs_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot iq4_xs ref"); }
__attribute__((weak)) float ft_vec_dot_iq4_xs_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot iq4_xs avx2"); }
__attribute__((weak)) float ft_vec_dot_mxfp4_ref(int64_t n, const void *x, const void *y) { STUB("vec_dot mxfp4 ref"); }
__attribute__((weak)) float ft_vec_dot_mxfp4_avx2(int64_t n, const void *x, const void *y) { STUB("vec_dot mxfp4 avx2"); }
