// gpu_data.h: random test data on the device for the GPU tests (tests_gpu/).
#ifndef FT_GPU_DATA_H
#define FT_GPU_DATA_H

#include "../src/quant/quant.h"
#include "../src/util/rng.h"

#include <stddef.h>
#include <stdint.h>

// A device copy of n bytes at h (synchronised).
void *gpu_copy_to_device(const void *h, size_t n);

// n_rows random rows of n_cols weights of type t on the device (ft_quant_random_row, scale 0.05).
void *gpu_random_rows(enum ft_type t, int64_t n_rows, int64_t n_cols, ft_rng *rng);

// q8_1 of n_rows rows of n_cols standard normal floats on the device (ft_cuda_quantize_q8_1).
void *gpu_random_q8_1(int64_t n_cols, int n_rows, ft_rng *rng);

#endif
