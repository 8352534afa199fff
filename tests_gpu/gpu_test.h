// gpu_test.h: helpers shared by the GPU tests (tests_gpu/). Every GPU test starts with
// GPU_TEST_REQUIRE_DEVICE(), which marks it skipped where there is no CUDA device (CI, or a
// build without nvcc), so `make test-gpu` runs everywhere and proves something only on a GPU.
#ifndef FT_GPU_TEST_H
#define FT_GPU_TEST_H

#include "../tests/test.h"
#include "../src/backend/cuda/ft_cuda.h"

#define GPU_TEST_REQUIRE_DEVICE()                                                   \
    do {                                                                            \
        if (ft_cuda_device_count() == 0) {                                          \
            test_skip("no CUDA device");                                            \
            return;                                                                 \
        }                                                                           \
    } while (0)

#endif
