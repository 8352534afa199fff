// cuda_stub.c: the CUDA backend's constructor in a build without nvcc: there is no device.
#include "cuda.h"

int ft_backend_cuda_device_count(void) {
    FT_LOG_DEBUG("cuda: built without CUDA (no nvcc at build time)");
    return 0;
}

ft_backend *ft_backend_cuda_init(const ft_backend_params *p, ft_err *err) {
    (void)p;
    ft_err_set(err, "--device cuda: this ft was built without CUDA (no nvcc at build time)");
    return NULL;
}

unsigned ft_backend_cuda_features(void) { return 0; }

bool ft_backend_cuda_measure_bw(const ft_bw_request *req, moe_bw_profile *out, ft_err *err) {
    (void)req;
    (void)out;
    return ft_err_set(err, "--device cuda: this ft was built without CUDA (no nvcc at build time)");
}
