// cpu_quant.c: quantizing activations the way llama.cpp's CPU backend does.
//
// llama.cpp quantizes matmul inputs (and q8_0 KV-cache rows) with its x86 SIMD routines, not
// its scalar reference: for q8_0 and q8_1 the inverse scale is 127 / amax (the reference uses
// 1 / (amax / 127), which differs in the last bit) and values round half to even (the
// reference rounds half away from zero). One code in a block off by one moves logits by about
// 1e-2 on our test models, so we reproduce that arithmetic here in plain C. Other formats
// (q8_K, f16, bf16, f32) use the reference, as llama.cpp does.
#include "cpu_impl.h"
#include "../../quant/fp16.h"

#include <math.h>

static void quantize_q8(const float *x, void *vy, int64_t n, bool with_sum) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
        int8_t *qs;
        if (with_sum) {
            block_q8_1 *y = (block_q8_1 *)vy + b;
            y->d = ft_fp32_to_fp16(d);
            qs = y->qs;
        } else {
            block_q8_0 *y = (block_q8_0 *)vy + b;
            y->d = ft_fp32_to_fp16(d);
            qs = y->qs;
        }
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            qs[i] = (int8_t)nearbyintf(xb[i] * id); // round half to even, as _mm256_round_ps
            sum += qs[i];
        }
        if (with_sum) ((block_q8_1 *)vy + b)->s = ft_fp32_to_fp16(d * (float)sum);
    }
}

void cpu_quantize_row(enum ft_type vdt, const float *x, void *y, int64_t n) {
    if (vdt == FT_TYPE_Q8_0)
        quantize_q8(x, y, n, false);
    else if (vdt == FT_TYPE_Q8_1)
        quantize_q8(x, y, n, true);
    else
        ft_quant_ops_find(vdt)->from_float_ref(x, y, n);
}
