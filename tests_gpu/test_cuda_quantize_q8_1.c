// test_cuda_quantize_q8_1.c: ft_cuda_quantize_q8_1 (src/backend/cuda/quantize_q8_1.cu) against
// the CPU backend's activation quantizer (cpu_quantize_row, llama.cpp's x86 arithmetic): the
// bytes must be identical (same scale, same rounding, same fp16 s), for 1, 3 and 8 rows of 32, 2048 and 4128 columns of normal floats
// with outliers, an all-zero block and a block of tiny values.
#include "gpu_test.h"

#include "../src/backend/cpu/cpu_impl.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <stdlib.h>
#include <string.h>

TEST(test_cuda_quantize_q8_1_matches_ref) {
    GPU_TEST_REQUIRE_DEVICE();
    const int64_t cols[] = {32, 2048, 4128};
    const int toks[] = {1, 3, 8};
    ft_rng rng = ft_rng_init(1234);
    for (size_t ci = 0; ci < FT_ARRAY_LEN(cols); ci++) {
        for (size_t ti = 0; ti < FT_ARRAY_LEN(toks); ti++) {
            const int64_t n = cols[ci];
            const int nt = toks[ti];
            const size_t nx = (size_t)n * nt;
            float *x = ft_malloc(nx * sizeof(float));
            for (size_t i = 0; i < nx; i++) {
                x[i] = ft_rng_normal(&rng);
                if (ft_rng_uniform(&rng) < 0.01f) x[i] *= 30.0f; // outliers
            }
            if (n >= 64) {
                memset(x + 32, 0, 32 * sizeof(float));             // all-zero block
                for (int i = 0; i < 32 && (size_t)i < nx; i++) x[i] *= 1e-30f; // tiny block
            }
            const size_t qb = ft_cuda_q8_1_bytes(n, nt);
            uint8_t *ref = ft_malloc(qb), *got = ft_malloc(qb);
            for (int t = 0; t < nt; t++)
                cpu_quantize_row(FT_TYPE_Q8_1, x + (size_t)t * n, ref + (size_t)t * (qb / nt), n);
            float *dx = ft_cuda_malloc(nx * sizeof(float));
            void *dq = ft_cuda_malloc(qb);
            REQUIRE(dx && dq);
            ft_cuda_memcpy_h2d(dx, x, nx * sizeof(float), NULL);
            ft_cuda_memset(dq, 0xAB, qb, NULL);
            ft_cuda_quantize_q8_1(dx, dq, n, nt, NULL);
            ft_cuda_memcpy_d2h(got, dq, qb, NULL);
            ft_cuda_device_sync();
            size_t first_diff = qb;
            for (size_t i = 0; i < qb; i++)
                if (got[i] != ref[i]) {
                    first_diff = i;
                    break;
                }
            CHECK(first_diff == qb, "n_cols %lld n_tok %d: first differing byte %zu (block %zu)",
                  (long long)n, nt, first_diff, first_diff / sizeof(block_q8_1));
            ft_cuda_free(dx);
            ft_cuda_free(dq);
            free(x);
            free(ref);
            free(got);
        }
    }
}
