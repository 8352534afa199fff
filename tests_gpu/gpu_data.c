// gpu_data.c: see gpu_data.h.
#include "gpu_data.h"

#include "../src/backend/cuda/ft_cuda.h"
#include "../src/util/util.h"

#include <stdlib.h>

void *gpu_copy_to_device(const void *h, size_t n) {
    void *d = ft_cuda_malloc(n);
    FT_ASSERT(d);
    ft_cuda_memcpy_h2d(d, h, n, NULL);
    ft_cuda_device_sync();
    return d;
}

void *gpu_random_rows(enum ft_type t, int64_t n_rows, int64_t n_cols, ft_rng *rng) {
    size_t rb = ft_row_bytes(t, n_cols), bytes = rb * (size_t)n_rows;
    uint8_t *w = ft_malloc(bytes);
    for (int64_t r = 0; r < n_rows; r++)
        ft_quant_random_row(t, rng, 0.05f, w + r * rb, n_cols);
    void *d = gpu_copy_to_device(w, bytes);
    free(w);
    return d;
}

void *gpu_random_q8_1(int64_t n_cols, int n_rows, ft_rng *rng) {
    size_t n = (size_t)n_cols * (size_t)n_rows;
    float *x = ft_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = ft_rng_normal(rng);
    float *dx = gpu_copy_to_device(x, n * sizeof(float));
    void *dq = ft_cuda_malloc(ft_cuda_q8_1_bytes(n_cols, n_rows));
    FT_ASSERT(dq);
    ft_cuda_quantize_q8_1(dx, dq, n_cols, n_rows, NULL);
    ft_cuda_device_sync();
    ft_cuda_free(dx);
    free(x);
    return dq;
}
